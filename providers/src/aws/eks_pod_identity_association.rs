//! The `eks_pod_identity_association` kind: an EKS Pod Identity association, which gives
//! the pods of one Kubernetes service account of a cluster an IAM role (through the
//! `eks-pod-identity-agent` add-on, an `eks_addon`). The role must trust
//! `pods.eks.amazonaws.com`. The id is `CLUSTER/ASSOCIATION_ID`, EKS's `a-…` id, known
//! only once the association is made.
//!
//! The role changes in place (UpdatePodIdentityAssociation), tags through
//! TagResource/UntagResource; the cluster, the namespace and the service account force a
//! new association. EKS keeps one association per service account: a create that finds
//! one adopts it when its tags say this address made it (an earlier attempt whose answer
//! was lost), and otherwise refuses, naming `terrain import`.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_eks::types::PodIdentityAssociation;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::eks::{
    self, code_of, found, hash_map, is_role_not_ready, retag, tag_map, EksObject, IN_USE,
    ROLE_PROPAGATION,
};
use super::{catalog, config, is_not_found, is_ours, sdk_error, tags_with_ours, user_tags};
use crate::kubernetes::{check_dns_label, check_dns_subdomain};
use crate::protocol::UNKNOWN;
use crate::schema::Fields;
use crate::{Ctx, Health, Invalid, Kind, Live, Peer, ProviderError};

/// The kind `eks_pod_identity_association`.
#[derive(Debug, Clone, Copy, Default)]
pub struct EksPodIdentityAssociation;

/// What a stack writes for an `eks_pod_identity_association`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    /// The EKS cluster's name ("${eks_cluster.NAME.name}"); its pods get credentials only
    /// while the eks-pod-identity-agent add-on runs on it.
    #[terrain(force_new)]
    pub cluster: String,
    /// The service account's Kubernetes namespace (a DNS label: lowercase letters, digits
    /// and '-', at most 63 characters). It need not exist yet.
    #[terrain(force_new)]
    pub namespace: String,
    /// The Kubernetes service account whose pods act as the role (a DNS subdomain). It
    /// need not exist yet; EKS keeps one association per service account.
    #[terrain(force_new)]
    pub service_account: String,
    /// The IAM role the pods act as (arn:aws:iam::ACCOUNT:role/NAME); it must trust
    /// pods.eks.amazonaws.com (iam_role trust = "eks-pods"). Changed in place.
    pub role_arn: String,
    /// AWS tags on the association.
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
}

/// What `eks_pod_identity_association` reports after apply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Outputs {
    /// EKS's id of the association (a-…).
    pub association_id: String,
    /// The association's ARN.
    pub association_arn: String,
}

const CREATE: &str = "eks:CreatePodIdentityAssociation";
const DESCRIBE: &str = "eks:DescribePodIdentityAssociation";
const UPDATE: &str = "eks:UpdatePodIdentityAssociation";
const DELETE: &str = "eks:DeletePodIdentityAssociation";
const LIST: &str = "eks:ListPodIdentityAssociations";
const ID_SHAPE: &str = "CLUSTER/ASSOCIATION_ID";

/// The service principal EKS Pod Identity assumes roles as, and the `iam_role` trust
/// preset naming it.
pub const PRINCIPAL: &str = "pods.eks.amazonaws.com";
const PRESET: &str = "eks-pods";

/// Associations have no lifecycle status (they exist at once, or not); only their tags
/// are needed, for `eks::retag`.
impl EksObject for PodIdentityAssociation {
    fn status_str(&self) -> Option<&str> {
        None
    }
    fn tag_list(&self) -> Option<&HashMap<String, String>> {
        self.tags()
    }
}

// ---------------------------------------------------------------------------------
// A role IAM has not propagated yet
// ---------------------------------------------------------------------------------

/// Whether EKS refused a role that pod identity cannot use yet: the words EKS uses for a
/// role IAM has not propagated ([`is_role_not_ready`]: "Role … does not exist"), and
/// those for a trust policy it does not find `pods.eks.amazonaws.com` in ("Trust policy
/// of the role provided is invalid"), which a role made seconds before also gets. The
/// same words for a role that really does not trust pods: hence the bound.
pub fn is_trust_not_ready(e: &ProviderError) -> bool {
    if is_role_not_ready(e) {
        return true;
    }
    let ProviderError::Api { code, message, .. } = e else {
        return false;
    };
    let message = message.to_ascii_lowercase();
    code == "InvalidParameterException"
        && message.contains("trust policy")
        && message.contains("role")
}

/// Retries of a create or update refused by [`is_trust_not_ready`], bounded by
/// [`ROLE_PROPAGATION`] and backing off from one second like `eks::RolePropagation`
/// (whose matcher does not know pod identity's words for a role's trust).
struct TrustPropagation {
    started: tokio::time::Instant,
    delay: Duration,
}

impl TrustPropagation {
    fn new() -> Self {
        Self {
            started: tokio::time::Instant::now(),
            delay: Duration::from_secs(1),
        }
    }

    /// Whether `e` is that refusal and time remains: then waits and says so.
    async fn retry(&mut self, ctx: &Ctx, e: &ProviderError) -> bool {
        if !is_trust_not_ready(e) || self.started.elapsed() + self.delay > ROLE_PROPAGATION {
            return false;
        }
        ctx.progress(&format!(
            "EKS Pod Identity cannot use the role yet (IAM takes a few seconds to make a new role or trust policy usable); retrying in {}s",
            self.delay.as_secs()
        ));
        tokio::time::sleep(self.delay).await;
        self.delay = (self.delay * 2).min(Duration::from_secs(10));
        true
    }
}

/// A refusal [`TrustPropagation`] gave up on, with what to do about it: past the bound,
/// the role most likely does not trust pods.eks.amazonaws.com.
fn explain_trust(e: ProviderError) -> ProviderError {
    if !is_trust_not_ready(&e) {
        return e;
    }
    match e {
        ProviderError::Api {
            call,
            status,
            code,
            message,
            request_id,
            hint,
        } => ProviderError::Api {
            call,
            status,
            code,
            message: format!(
                "{message}; still refused after {}s, longer than IAM takes to propagate a role: the role must exist and trust {PRINCIPAL} for sts:AssumeRole and sts:TagSession (iam_role trust = \"{PRESET}\")",
                ROLE_PROPAGATION.as_secs()
            ),
            request_id,
            hint,
        },
        other => other,
    }
}

// ---------------------------------------------------------------------------------
// Offline checks
// ---------------------------------------------------------------------------------

/// The `trust` of an `iam_role` as a stack writes it, when it is presets (a name or a
/// list of names) none of which is pod identity's: `trust = "ec2"`. `None` for trust
/// that includes it, tables, and values not known offline or misspelled (which the
/// role's own checks report).
fn wrong_presets(trust: &Value) -> Option<String> {
    let names: Vec<&str> = match trust {
        Value::String(s) => vec![s.as_str()],
        Value::Array(items) => items.iter().map(Value::as_str).collect::<Option<_>>()?,
        _ => return None,
    };
    let known = names
        .iter()
        .all(|n| !n.contains(UNKNOWN) && super::policy::preset(n).is_some());
    if !known || names.contains(&PRESET) {
        return None;
    }
    let quoted: Vec<String> = names.iter().map(|n| format!("\"{n}\"")).collect();
    Some(match trust {
        Value::Array(_) => format!("[{}]", quoted.join(", ")),
        _ => quoted.concat(),
    })
}

/// The name of the role an ARN names, when known offline.
fn role_name(arn: &str) -> Option<&str> {
    arn.rsplit('/')
        .next()
        .filter(|n| !n.is_empty() && !n.contains(UNKNOWN) && arn.contains(":role/"))
}

// ---------------------------------------------------------------------------------
// Reading
// ---------------------------------------------------------------------------------

/// The spec a live association shows, for the cluster of its id.
pub fn spec_of(live: &PodIdentityAssociation, cluster: &str) -> Spec {
    Spec {
        cluster: live.cluster_name().unwrap_or(cluster).to_string(),
        namespace: live.namespace().unwrap_or_default().to_string(),
        service_account: live.service_account().unwrap_or_default().to_string(),
        role_arn: live.role_arn().unwrap_or_default().to_string(),
        tags: user_tags(&tag_map(live.tags())),
    }
}

fn outputs_of(live: &PodIdentityAssociation) -> Outputs {
    Outputs {
        association_id: live.association_id().unwrap_or_default().to_string(),
        association_arn: live.association_arn().unwrap_or_default().to_string(),
    }
}

fn live_of(live: &PodIdentityAssociation, cluster: &str) -> Live<EksPodIdentityAssociation> {
    Live {
        id: format!(
            "{}/{}",
            live.cluster_name().unwrap_or(cluster),
            live.association_id().unwrap_or_default()
        ),
        spec: spec_of(live, cluster),
        outputs: outputs_of(live),
    }
}

/// `(cluster, name)` of an id (see [`ID_SHAPE`]).
fn parts(id: &str) -> Result<(&str, &str), ProviderError> {
    eks::parts(id, EksPodIdentityAssociation::KIND, ID_SHAPE)
}

/// The association; `None` when it (or its cluster) does not exist.
async fn describe(
    eks: &aws_sdk_eks::Client,
    cluster: &str,
    association_id: &str,
) -> Result<Option<PodIdentityAssociation>, ProviderError> {
    let answer = eks
        .describe_pod_identity_association()
        .cluster_name(cluster)
        .association_id(association_id)
        .send()
        .await;
    Ok(found(DESCRIBE, answer)?.and_then(|out| out.association().cloned()))
}

/// The association of the spec's service account, whoever made it; `None` when there
/// is none.
async fn of_service_account(
    eks: &aws_sdk_eks::Client,
    spec: &Spec,
) -> Result<Option<PodIdentityAssociation>, ProviderError> {
    let listed = eks
        .list_pod_identity_associations()
        .cluster_name(&spec.cluster)
        .namespace(&spec.namespace)
        .service_account(&spec.service_account)
        .send()
        .await
        .map_err(|e| sdk_error(LIST, e))?;
    // EKS filters by both; checked again rather than trusted.
    let id = listed
        .associations()
        .iter()
        .find(|a| {
            a.namespace() == Some(spec.namespace.as_str())
                && a.service_account() == Some(spec.service_account.as_str())
        })
        .and_then(|a| a.association_id());
    match id {
        Some(id) => describe(eks, &spec.cluster, id).await,
        None => Ok(None),
    }
}

/// A create refused (`refusal`) because the service account has an association: the
/// association, when its tags say this address made it (an earlier attempt whose
/// answer was lost); otherwise the refusal, naming the association and `terrain import`.
async fn adopt(
    ctx: &Ctx,
    eks: &aws_sdk_eks::Client,
    spec: &Spec,
    refusal: ProviderError,
) -> Result<PodIdentityAssociation, ProviderError> {
    let Some(existing) = of_service_account(eks, spec).await? else {
        return Err(refusal);
    };
    if is_ours(&tag_map(existing.tags()), &ctx.address) {
        ctx.progress("adopting the pod identity association an earlier attempt created");
        return Ok(existing);
    }
    let id = format!(
        "{}/{}",
        spec.cluster,
        existing.association_id().unwrap_or_default()
    );
    let name = ctx
        .address
        .split_once('.')
        .map_or(ctx.address.as_str(), |(_, n)| n);
    Err(ProviderError::api(
        CREATE,
        409,
        "AlreadyExists",
        format!(
            "service account {}/{} of EKS cluster {} already has pod identity association {id}, not created by {}, and EKS keeps one per service account; bring it under terrain with `terrain import {}.{name} {id}`, or delete it",
            spec.namespace,
            spec.service_account,
            spec.cluster,
            ctx.address,
            EksPodIdentityAssociation::KIND
        ),
    ))
}

/// A client request token for one create or update: every send of it carries the same,
/// so EKS answers a repeated send whose first answer was lost with the first one's
/// result.
fn request_token() -> String {
    format!("terrain-{:032x}", rand::random::<u128>())
}

fn gone(id: &str) -> ProviderError {
    eks::gone(DESCRIBE, &format!("pod identity association {id}"))
}

/// Creates the association (retried while IAM propagates its role); adopts the one an
/// earlier attempt made.
async fn make(
    ctx: &Ctx,
    eks: &aws_sdk_eks::Client,
    spec: &Spec,
) -> Result<PodIdentityAssociation, ProviderError> {
    let tags = hash_map(tags_with_ours(&spec.tags, &ctx.address));
    let token = request_token();
    let mut propagation = TrustPropagation::new();
    loop {
        let sent = eks
            .create_pod_identity_association()
            .cluster_name(&spec.cluster)
            .namespace(&spec.namespace)
            .service_account(&spec.service_account)
            .role_arn(&spec.role_arn)
            .client_request_token(&token)
            .set_tags(Some(tags.clone()))
            .send()
            .await
            .map_err(|e| sdk_error(CREATE, e));
        match sent {
            Ok(out) => match out.association() {
                Some(made) => return Ok(made.clone()),
                // An answer without the association: it is found by its service account.
                None => {
                    return of_service_account(eks, spec).await?.ok_or_else(|| {
                        gone(&format!(
                            "{}/{}:{}",
                            spec.cluster, spec.namespace, spec.service_account
                        ))
                    })
                }
            },
            Err(e) if propagation.retry(ctx, &e).await => continue,
            Err(e) if code_of(&e) == IN_USE => return adopt(ctx, eks, spec, e).await,
            Err(e) => return Err(explain_trust(e)),
        }
    }
}

#[async_trait]
impl Kind for EksPodIdentityAssociation {
    type Spec = Spec;
    type Outputs = Outputs;
    const KIND: &'static str = "eks_pod_identity_association";
    const PROVIDER: &'static str = "aws";
    const WRITES: crate::protocol::Writes = crate::protocol::Writes::FromId;

    fn validate(spec: &Spec, config: &Value) -> Vec<Invalid> {
        let mut out = Vec::new();
        if let Err(m) = catalog::check_eks_name(&spec.cluster, catalog::EKS_CLUSTER_NAME_MAX) {
            out.push(Invalid::at("cluster", m));
        }
        if let Err(m) = check_dns_label(&spec.namespace) {
            out.push(Invalid::at("namespace", m));
        }
        if let Err(m) = check_dns_subdomain(&spec.service_account) {
            out.push(Invalid::at("service_account", m));
        }
        if let Err(m) = catalog::check_role_arn(&spec.role_arn) {
            out.push(Invalid::at("role_arn", m));
        } else if let Some(region) = config::catalog_region(config) {
            if let Err(m) = catalog::check_arn_partition(&spec.role_arn, region) {
                out.push(Invalid::at("role_arn", m));
            }
        }
        eks::check_tags_and_config(&spec.tags, config, &mut out);
        out
    }

    fn validate_peers(spec: &Value, peers: &[Peer]) -> Vec<Invalid> {
        // EKS refuses a role that does not trust pod identity, but only at apply, and
        // only after the propagation retries: say so at plan when the stack's own role
        // trusts presets other than "eks-pods". The role is the peer role_arn names;
        // when the ARN is not known offline (a reference), the one role referenced.
        let roles: Vec<&Peer> = peers.iter().filter(|p| p.kind == "iam_role").collect();
        let named = spec["role_arn"].as_str().and_then(role_name);
        let role = match named {
            Some(name) => roles.iter().find(|p| p.spec["name"].as_str() == Some(name)),
            None if roles.len() == 1 => roles.first(),
            None => None,
        };
        let Some(role) = role else {
            return Vec::new();
        };
        let Some(written) = wrong_presets(&role.spec["trust"]) else {
            return Vec::new();
        };
        vec![Invalid::at(
            "role_arn",
            format!(
                "{} has trust = {written}, but EKS Pod Identity assumes the role as {PRINCIPAL}: the role must trust pods.eks.amazonaws.com (trust = \"{PRESET}\", or add \"{PRESET}\" to its list)",
                role.address
            ),
        )]
    }

    async fn read(
        &self,
        ctx: &Ctx,
        id: &str,
        _prior: Option<&Spec>,
    ) -> Result<Option<Live<Self>>, ProviderError> {
        let (cluster, association_id) = parts(id)?;
        let eks = config::eks(ctx).await?;
        Ok(describe(&eks, cluster, association_id)
            .await?
            .map(|live| Live {
                id: id.to_string(),
                spec: spec_of(&live, cluster),
                outputs: outputs_of(&live),
            }))
    }

    async fn create(&self, ctx: &Ctx, spec: &Spec) -> Result<Live<Self>, ProviderError> {
        let eks = config::eks(ctx).await?;
        let made = make(ctx, &eks, spec).await?;
        Ok(live_of(&made, &spec.cluster))
    }

    async fn update(
        &self,
        ctx: &Ctx,
        id: &str,
        _prior: &Spec,
        spec: &Spec,
    ) -> Result<Live<Self>, ProviderError> {
        let (cluster, association_id) = parts(id)?;
        let eks = config::eks(ctx).await?;
        let current = describe(&eks, cluster, association_id)
            .await?
            .ok_or_else(|| gone(id))?;
        if current.role_arn() != Some(spec.role_arn.as_str()) {
            let token = request_token();
            // A new role is often made in the same apply: EKS refuses it until IAM has
            // propagated it, as it does at create.
            let mut propagation = TrustPropagation::new();
            loop {
                let sent = eks
                    .update_pod_identity_association()
                    .cluster_name(cluster)
                    .association_id(association_id)
                    .role_arn(&spec.role_arn)
                    .client_request_token(&token)
                    .send()
                    .await
                    .map_err(|e| sdk_error(UPDATE, e));
                match sent {
                    Ok(_) => break,
                    Err(e) if propagation.retry(ctx, &e).await => continue,
                    Err(e) => return Err(explain_trust(e)),
                }
            }
        }
        if user_tags(&tag_map(current.tags())) != spec.tags {
            let arn = current.association_arn().unwrap_or_default();
            retag(&eks, arn, &current, &spec.tags).await?;
        }
        let live = describe(&eks, cluster, association_id)
            .await?
            .ok_or_else(|| gone(id))?;
        Ok(Live {
            id: id.to_string(),
            spec: spec_of(&live, cluster),
            outputs: outputs_of(&live),
        })
    }

    async fn delete(
        &self,
        ctx: &Ctx,
        id: &str,
        _prior: Option<&Spec>,
    ) -> Result<(), ProviderError> {
        let (cluster, association_id) = parts(id)?;
        let eks = config::eks(ctx).await?;
        match eks
            .delete_pod_identity_association()
            .cluster_name(cluster)
            .association_id(association_id)
            .send()
            .await
            .map_err(|e| sdk_error(DELETE, e))
        {
            // Gone at once: EKS has no deleting state for associations.
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn health(
        &self,
        ctx: &Ctx,
        id: &str,
        _prior: Option<&Spec>,
    ) -> Result<Option<Health>, ProviderError> {
        let (cluster, association_id) = parts(id)?;
        let eks = config::eks(ctx).await?;
        let live = describe(&eks, cluster, association_id).await?;
        Ok(Some(match live {
            Some(live) => Health {
                ready: true,
                summary: format!(
                    "service account {}/{} acts as {}",
                    live.namespace().unwrap_or_default(),
                    live.service_account().unwrap_or_default(),
                    live.role_arn().unwrap_or_default()
                ),
            },
            None => Health {
                ready: false,
                summary: "missing".into(),
            },
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aws::eks::testing::assert_validation;
    use crate::testing::schema_mismatches;
    use serde_json::json;

    fn base() -> Spec {
        Spec {
            cluster: "ml".into(),
            namespace: "training".into(),
            service_account: "trainer".into(),
            role_arn: "arn:aws:iam::123456789012:role/trainer".into(),
            tags: BTreeMap::new(),
        }
    }

    fn full() -> Spec {
        Spec {
            tags: BTreeMap::from([("team".to_string(), "ml".to_string())]),
            ..base()
        }
    }

    /// An association as DescribePodIdentityAssociation reports one made from `s`.
    fn live(s: &Spec, address: &str) -> PodIdentityAssociation {
        PodIdentityAssociation::builder()
            .cluster_name(&s.cluster)
            .namespace(&s.namespace)
            .service_account(&s.service_account)
            .role_arn(&s.role_arn)
            .association_id("a-0123456789abcdefg")
            .association_arn(format!(
                "arn:aws:eks:us-west-2:123456789012:podidentityassociation/{}/a-0123456789abcdefg",
                s.cluster
            ))
            .set_tags(Some(hash_map(tags_with_ours(&s.tags, address))))
            .build()
    }

    #[test]
    fn schema_matches_spec_and_outputs() {
        let outputs = outputs_of(&live(&full(), "eks_pod_identity_association.trainer"));
        assert_eq!(
            schema_mismatches::<EksPodIdentityAssociation>(&full(), &outputs),
            Vec::<String>::new()
        );
        let schema = EksPodIdentityAssociation::schema();
        let field = |n: &str| {
            schema
                .fields
                .iter()
                .find(|f| f.name == n)
                .unwrap_or_else(|| panic!("{n} is a field"))
        };
        for n in ["cluster", "namespace", "service_account"] {
            assert!(field(n).force_new, "{n} forces a new association");
        }
        for n in ["role_arn", "tags"] {
            assert!(!field(n).force_new, "{n} changes in place");
        }
    }

    #[test]
    fn live_association_reads_back_as_its_spec() {
        let l = live(&full(), "eks_pod_identity_association.trainer");
        assert_eq!(spec_of(&l, "ml"), full());
        let made = live_of(&l, "ml");
        assert_eq!(made.id, "ml/a-0123456789abcdefg");
        assert_eq!(made.outputs.association_id, "a-0123456789abcdefg");
        assert!(made
            .outputs
            .association_arn
            .ends_with(":podidentityassociation/ml/a-0123456789abcdefg"));
    }

    #[test]
    fn ids() {
        assert_eq!(
            parts("ml/a-0123456789abcdefg").ok(),
            Some(("ml", "a-0123456789abcdefg"))
        );
        for bad in ["ml", "/a-1", "ml/", "a/b/c"] {
            assert!(parts(bad).is_err(), "{bad}");
        }
        // EKS names the association: its id is not known before create.
        assert_eq!(
            EksPodIdentityAssociation::planned_id(&base(), &Value::Null),
            None
        );
    }

    #[test]
    fn validation_table() {
        let cases: Vec<(Spec, &str, &str)> = vec![
            (base(), "", ""),
            (full(), "", ""),
            (
                Spec {
                    service_account: "ack.sagemaker-controller".into(),
                    ..base()
                },
                "",
                "",
            ),
            (
                Spec {
                    namespace: "Training".into(),
                    ..base()
                },
                "namespace",
                "",
            ),
            (
                Spec {
                    namespace: "ml.training".into(),
                    ..base()
                },
                "namespace",
                "",
            ),
            (
                Spec {
                    namespace: "a".repeat(64),
                    ..base()
                },
                "namespace",
                "longer than 63",
            ),
            (
                Spec {
                    namespace: String::new(),
                    ..base()
                },
                "namespace",
                "must not be empty",
            ),
            (
                Spec {
                    service_account: "Trainer".into(),
                    ..base()
                },
                "service_account",
                "not a valid DNS-1123 subdomain",
            ),
            (
                Spec {
                    service_account: "-trainer".into(),
                    ..base()
                },
                "service_account",
                "not a valid DNS-1123 subdomain",
            ),
            (
                Spec {
                    cluster: "ml prod".into(),
                    ..base()
                },
                "cluster",
                "only letters, digits",
            ),
            (
                Spec {
                    role_arn: "trainer".into(),
                    ..base()
                },
                "role_arn",
                "not an ARN",
            ),
            (
                Spec {
                    role_arn: "arn:aws:iam::123456789012:user/alice".into(),
                    ..base()
                },
                "role_arn",
                "not a role",
            ),
            (
                Spec {
                    tags: BTreeMap::from([("aws:x".to_string(), "1".to_string())]),
                    ..base()
                },
                "tags",
                "reserved",
            ),
        ];
        assert_validation::<EksPodIdentityAssociation>(cases, &json!({"region": "us-west-2"}));
        let gov = vec![(
            base(),
            "role_arn",
            "the provider's region us-gov-west-1 is in the aws-us-gov partition",
        )];
        assert_validation::<EksPodIdentityAssociation>(gov, &json!({"region": "us-gov-west-1"}));
    }

    #[test]
    fn a_role_that_does_not_trust_pods_is_refused_at_plan() {
        let role = |name: &str, trust: Value| Peer {
            kind: "iam_role".into(),
            address: format!("iam_role.{name}"),
            spec: json!({"name": name, "trust": trust}),
        };
        let cluster = Peer {
            kind: "eks_cluster".into(),
            address: "eks_cluster.ml".into(),
            spec: json!({"name": "ml"}),
        };
        let referenced = json!({"cluster": UNKNOWN, "role_arn": UNKNOWN});
        let refused = EksPodIdentityAssociation::validate_peers(
            &referenced,
            &[cluster.clone(), role("trainer", json!("ec2"))],
        );
        assert!(
            matches!(refused.as_slice(), [p] if p.path == ["role_arn"]
                && p.message.starts_with("iam_role.trainer has trust = \"ec2\", but EKS Pod Identity")
                && p.message.contains("trust = \"eks-pods\"")),
            "{refused:?}"
        );
        let listed = EksPodIdentityAssociation::validate_peers(
            &referenced,
            &[role("trainer", json!(["ec2", "eks"]))],
        );
        assert!(
            matches!(listed.as_slice(), [p] if p.message.contains("trust = [\"ec2\", \"eks\"]")),
            "{listed:?}"
        );
        // The role of a written ARN is found by its name among several.
        let written = json!({"role_arn": "arn:aws:iam::123456789012:role/trainer"});
        let two = [
            role("other", json!("eks-pods")),
            role("trainer", json!("sagemaker")),
        ];
        assert_eq!(
            EksPodIdentityAssociation::validate_peers(&written, &two).len(),
            1
        );
        // Fine: trust that includes pods, tables, unknown or misspelled trust, and a
        // referenced ARN among several roles (which one is not known offline).
        for trust in [
            json!("eks-pods"),
            json!(["ec2", "eks-pods"]),
            json!({"services": ["pods.eks.amazonaws.com"]}),
            json!(UNKNOWN),
            json!("ekz"),
        ] {
            assert!(
                EksPodIdentityAssociation::validate_peers(
                    &referenced,
                    &[role("trainer", trust.clone())]
                )
                .is_empty(),
                "{trust}"
            );
        }
        assert!(EksPodIdentityAssociation::validate_peers(&referenced, &two).is_empty());
        assert!(EksPodIdentityAssociation::validate_peers(&referenced, &[cluster]).is_empty());
    }

    /// The refusals EKS (and the sandbox) give for a role pod identity cannot use yet.
    fn refusals() -> Vec<ProviderError> {
        [
            "Trust policy of the role provided is invalid. Follow the official documentation to resolve the issue.",
            "Trust policy of role provided does not allow EKS Pod Identity to assume it: arn:aws:iam::123456789012:role/x must trust pods.eks.amazonaws.com for sts:AssumeRole and sts:TagSession",
            "Role arn:aws:iam::123456789012:role/x does not exist",
        ]
        .into_iter()
        .map(|m| ProviderError::api(CREATE, 400, "InvalidParameterException", m))
        .collect()
    }

    #[test]
    fn trust_refusals_are_recognised_and_explained() {
        for e in refusals() {
            assert!(is_trust_not_ready(&e), "{e}");
            let explained = explain_trust(e).to_string();
            assert!(
                explained.starts_with(
                    "eks:CreatePodIdentityAssociation failed: 400 InvalidParameterException: "
                ) && explained.contains("the role must exist and trust pods.eks.amazonaws.com")
                    && explained.contains("trust = \"eks-pods\""),
                "{explained}"
            );
        }
        let other = ProviderError::api(
            CREATE,
            400,
            "InvalidParameterException",
            "Namespace name is invalid",
        );
        assert!(!is_trust_not_ready(&other));
        assert_eq!(
            explain_trust(other).to_string(),
            "eks:CreatePodIdentityAssociation failed: 400 InvalidParameterException: Namespace name is invalid"
        );
        let in_use = ProviderError::api(CREATE, 409, IN_USE, "Association already exists");
        assert!(!is_trust_not_ready(&in_use));
    }

    /// IAM is eventually consistent: a role made seconds before may be refused.
    #[tokio::test(start_paused = true)]
    async fn a_trust_refusal_is_retried_for_a_bounded_time() {
        let said = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let sink = said.clone();
        let ctx = Ctx::new("eks_pod_identity_association.trainer", json!({})).with_reporter(
            std::sync::Arc::new(move |m: &str| sink.lock().expect("lock").push(m.to_string())),
        );
        let refused = refusals().remove(0);
        let mut retry = TrustPropagation::new();
        let other = ProviderError::api(CREATE, 400, "InvalidParameterException", "bad");
        assert!(
            !retry.retry(&ctx, &other).await,
            "other refusals are not retried"
        );
        let started = tokio::time::Instant::now();
        let mut tries = 0;
        while retry.retry(&ctx, &refused).await {
            tries += 1;
        }
        assert!(tries >= 5, "{tries}");
        assert!(
            started.elapsed() <= ROLE_PROPAGATION,
            "{:?}",
            started.elapsed()
        );
        let said = said.lock().expect("lock");
        assert_eq!(said.len(), tries);
        assert!(said[0].contains("retrying in 1s"), "{said:?}");
    }
}
