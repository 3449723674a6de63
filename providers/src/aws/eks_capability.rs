//! The `eks_capability` kind: an EKS managed capability of a cluster. EKS has three types
//! (ACK, KRO, ARGOCD); terrain manages ACK, the AWS Controllers for Kubernetes, which EKS
//! runs outside the cluster's nodes as an IAM role trusting
//! `capabilities.eks.amazonaws.com`. The id is `CLUSTER/NAME`.
//!
//! The role and ACK's settings change in place (UpdateCapability, followed to its end and
//! until the capability is ACTIVE again; a role made moments before is retried while IAM
//! propagates it), tags through TagResource/UntagResource; the cluster, the name and the
//! type force a new capability. Deleting one keeps what its controllers made
//! (`deletePropagationPolicy` RETAIN, the only policy EKS has). EKS runs one capability
//! of each type per cluster, and only on clusters with access entries (authentication
//! mode API or API_AND_CONFIG_MAP): a stack's `eks_cluster` left at CONFIG_MAP is refused
//! at plan.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_eks::types::{
    AckConfigRequest, Capability, CapabilityConfigurationRequest,
    CapabilityDeletePropagationPolicy, CapabilityType, UpdateAckConfig,
    UpdateCapabilityConfiguration,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::eks::{
    self, code_of, found, hash_map, in_prior_order, problems_line, retag, tag_map, wait_update,
    Creating, RolePropagation, UpdateWait, IN_USE,
};
use super::{catalog, config, is_not_found, sdk_error, tags_with_ours, user_tags};
use crate::schema::Fields;
use crate::{Ctx, Health, Invalid, Kind, Live, Peer, ProviderError};

/// The kind `eks_capability`.
#[derive(Debug, Clone, Copy, Default)]
pub struct EksCapability;

// serde's default, the same as the schema's (checked by `schema_mismatches`).
fn ack() -> String {
    "ACK".to_string()
}

/// What a stack writes for an `eks_capability`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    /// The EKS cluster's name ("${eks_cluster.NAME.name}"); its authentication_mode must be
    /// API or API_AND_CONFIG_MAP.
    #[terrain(force_new)]
    pub cluster: String,
    /// The capability's name, unique in the cluster: letters, digits, '-' and '_', starting
    /// with a letter or digit, at most 64 characters.
    #[terrain(force_new)]
    pub name: String,
    /// The capability type: ACK (AWS Controllers for Kubernetes), the only one terrain
    /// manages so far (EKS also has KRO and ARGOCD). A cluster runs one capability of each
    /// type.
    #[serde(rename = "type", default = "ack")]
    #[terrain(force_new)]
    pub capability_type: String,
    /// The IAM role the capability's controllers act as (arn:aws:iam::ACCOUNT:role/NAME); it
    /// must trust capabilities.eks.amazonaws.com. Changed in place.
    pub role_arn: String,
    /// The capability's settings; changed in place.
    #[serde(default)]
    pub configuration: Configuration,
    /// AWS tags on the capability.
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
}

/// The capability's settings, as EKS's `configuration` holds them: one table per type.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Configuration {
    /// ACK's settings.
    #[serde(default)]
    pub ack: AckConfiguration,
}

/// ACK's settings. Left out, they are EKS's defaults: references stay in their namespace
/// and every service controller runs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct AckConfiguration {
    /// Whether ACK resolves resource references to resources in other Kubernetes
    /// namespaces.
    #[serde(default)]
    pub enable_cross_namespace: bool,
    /// ACK service controllers turned off ("s3", "ec2", "iam"…): their resources are not
    /// reconciled until the service is turned back on.
    #[serde(default)]
    pub disabled_services: Vec<String>,
}

/// What `eks_capability` reports after apply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Outputs {
    /// The capability's ARN.
    pub arn: String,
    /// CREATING, ACTIVE, UPDATING, DEGRADED, DELETING, CREATE_FAILED or DELETE_FAILED.
    pub status: String,
    /// The version of the capability's software EKS runs.
    pub version: String,
}

const CREATE: &str = "eks:CreateCapability";
const DESCRIBE: &str = "eks:DescribeCapability";
const UPDATE: &str = "eks:UpdateCapability";
const DELETE: &str = "eks:DeleteCapability";
const LIST: &str = "eks:ListCapabilities";
const ID_SHAPE: &str = "CLUSTER/CAPABILITY";

/// The capability types EKS has.
pub const EKS_TYPES: &[&str] = &["ACK", "KRO", "ARGOCD"];
/// The types terrain manages: KRO and Argo CD have settings terrain does not model yet.
pub const MANAGED_TYPES: &[&str] = &["ACK"];
/// EKS takes at most this many disabled ACK services.
const MAX_DISABLED_SERVICES: usize = 200;
/// The longest ACK service name EKS takes.
const SERVICE_NAME_MAX: usize = 63;

/// EKS provisions a capability's controllers in a few minutes; allow far more.
const CREATE_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// A new role or settings may restart the controllers.
const UPDATE_TIMEOUT: Duration = Duration::from_secs(30 * 60);
const DELETE_TIMEOUT: Duration = Duration::from_secs(30 * 60);

// ---------------------------------------------------------------------------------
// Offline checks
// ---------------------------------------------------------------------------------

/// Checks a capability type: one EKS has and terrain manages.
pub fn check_type(t: &str) -> Result<(), String> {
    if MANAGED_TYPES.contains(&t) {
        Ok(())
    } else if EKS_TYPES.contains(&t) {
        Err(format!(
            "{t} is an EKS capability type, but terrain manages only ACK capabilities so far"
        ))
    } else {
        Err(format!(
            "{t:?} is not an EKS capability type ({}); terrain manages only ACK capabilities so far",
            EKS_TYPES.join(", ")
        ))
    }
}

/// Problems with ACK's disabled services, at their paths: EKS's shape for a service
/// name (lowercase letters and digits, starting with a letter, at most 63), at most 200
/// of them. EKS stores a name it does not know without complaint; a name listed twice is
/// a typo of the stack's.
fn check_disabled_services(services: &[String], out: &mut Vec<Invalid>) {
    let path = "configuration.ack.disabled_services";
    if services.len() > MAX_DISABLED_SERVICES {
        out.push(Invalid::at(
            path,
            format!(
                "at most {MAX_DISABLED_SERVICES} services; {} given",
                services.len()
            ),
        ));
    }
    let mut seen = BTreeSet::new();
    for (i, s) in services.iter().enumerate() {
        let shaped = s.len() <= SERVICE_NAME_MAX
            && s.starts_with(|c: char| c.is_ascii_lowercase())
            && s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
        if !shaped {
            out.push(Invalid::at(
                &format!("{path}.{i}"),
                format!("{s:?} is not an ACK service name: 1 to {SERVICE_NAME_MAX} lowercase letters and digits, starting with a letter (s3, ec2, iam, sagemaker)"),
            ));
        } else if !seen.insert(s) {
            out.push(Invalid::at(
                &format!("{path}.{i}"),
                format!("{s} is listed twice"),
            ));
        }
    }
}

// ---------------------------------------------------------------------------------
// Requests, built apart from sending them
// ---------------------------------------------------------------------------------

/// The `configuration` of CreateCapability. ACK's settings are sent even when they are
/// EKS's defaults: what the stack says is what EKS is told.
pub fn create_configuration(c: &Configuration) -> CapabilityConfigurationRequest {
    CapabilityConfigurationRequest::builder()
        .ack(
            AckConfigRequest::builder()
                .enable_cross_namespace(c.ack.enable_cross_namespace)
                .set_disabled_services(Some(c.ack.disabled_services.clone()))
                .build(),
        )
        .build()
}

/// The `configuration` of UpdateCapability: both settings, whole (EKS replaces the list
/// of disabled services rather than merging it).
pub fn update_configuration(c: &Configuration) -> UpdateCapabilityConfiguration {
    UpdateCapabilityConfiguration::builder()
        .ack(
            UpdateAckConfig::builder()
                .enable_cross_namespace(c.ack.enable_cross_namespace)
                .set_disabled_services(Some(c.ack.disabled_services.clone()))
                .build(),
        )
        .build()
}

/// A client request token for one create: every send of it carries the same, so EKS
/// answers a repeated send whose first answer was lost with the first one's result.
fn request_token() -> String {
    format!("terrain-{:032x}", rand::random::<u128>())
}

// ---------------------------------------------------------------------------------
// Reading
// ---------------------------------------------------------------------------------

/// The spec a live capability shows, for the capability `(cluster, name)` of its id; the
/// disabled services in `prior`'s order when they are the same.
pub fn spec_of(live: &Capability, (cluster, name): (&str, &str), prior: Option<&Spec>) -> Spec {
    let ack_live = live.configuration().and_then(|c| c.ack());
    Spec {
        cluster: live.cluster_name().unwrap_or(cluster).to_string(),
        name: live.capability_name().unwrap_or(name).to_string(),
        // An answer without a type (none seen) is read as the only type terrain makes,
        // rather than as a change that would replace the capability.
        capability_type: live.r#type().map_or_else(ack, |t| t.as_str().to_string()),
        role_arn: live.role_arn().unwrap_or_default().to_string(),
        configuration: Configuration {
            ack: AckConfiguration {
                // Absent settings are EKS's defaults, as its answer documents them.
                enable_cross_namespace: ack_live
                    .and_then(|a| a.enable_cross_namespace())
                    .unwrap_or(false),
                disabled_services: in_prior_order(
                    ack_live
                        .map(|a| a.disabled_services().to_vec())
                        .unwrap_or_default(),
                    prior.map(|p| &p.configuration.ack.disabled_services),
                ),
            },
        },
        tags: user_tags(&tag_map(live.tags())),
    }
}

fn outputs_of(live: &Capability) -> Outputs {
    Outputs {
        arn: live.arn().unwrap_or_default().to_string(),
        status: live
            .status()
            .map(|s| s.as_str())
            .unwrap_or_default()
            .to_string(),
        version: live.version().unwrap_or_default().to_string(),
    }
}

/// `(cluster, name)` of an id (see [`ID_SHAPE`]).
fn parts(id: &str) -> Result<(&str, &str), ProviderError> {
    eks::parts(id, EksCapability::KIND, ID_SHAPE)
}

/// The capability; `None` when it (or its cluster) does not exist.
async fn describe(
    eks: &aws_sdk_eks::Client,
    cluster: &str,
    name: &str,
) -> Result<Option<Capability>, ProviderError> {
    let answer = eks
        .describe_capability()
        .cluster_name(cluster)
        .capability_name(name)
        .send()
        .await;
    Ok(found(DESCRIBE, answer)?.and_then(|out| out.capability().cloned()))
}

/// The health issues of a capability, one line.
pub fn health_issues(live: &Capability) -> String {
    problems_line(
        live.health()
            .map(|h| h.issues())
            .unwrap_or_default()
            .iter()
            .map(|i| (i.code().map(|c| c.as_str()), i.message(), &[][..])),
        "EKS reports no health issue",
    )
}

/// Waits until the capability is ACTIVE (see [`eks::wait_part_active`]).
async fn wait_active(
    ctx: &Ctx,
    eks: &aws_sdk_eks::Client,
    (cluster, name): (&str, &str),
    call: &str,
    waiting_for: &str,
    timeout: Duration,
) -> Result<Capability, ProviderError> {
    let part = eks::Part {
        noun: "capability",
        cluster,
        name,
    };
    // Right after the create it may not be visible yet: the wait keeps waiting.
    let describe = || describe(eks, cluster, name);
    eks::wait_part_active(
        ctx,
        part,
        (call, waiting_for),
        timeout,
        describe,
        health_issues,
    )
    .await
}

/// Waits until the capability no longer exists (see [`eks::wait_part_gone`]).
async fn wait_gone(
    ctx: &Ctx,
    eks: &aws_sdk_eks::Client,
    (cluster, name): (&str, &str),
) -> Result<(), ProviderError> {
    let part = eks::Part {
        noun: "capability",
        cluster,
        name,
    };
    let describe = || describe(eks, cluster, name);
    eks::wait_part_gone(ctx, part, DELETE, DELETE_TIMEOUT, describe, health_issues).await
}

/// Deletes the capability and waits until it is gone; one (or a cluster) already gone
/// is fine, one already being deleted is waited for.
async fn remove(
    ctx: &Ctx,
    eks: &aws_sdk_eks::Client,
    (cluster, name): (&str, &str),
) -> Result<(), ProviderError> {
    match eks
        .delete_capability()
        .cluster_name(cluster)
        .capability_name(name)
        .send()
        .await
        .map_err(|e| sdk_error(DELETE, e))
    {
        Ok(_) => {}
        Err(e) if is_not_found(&e) => return Ok(()),
        // Already being deleted (an earlier attempt): wait for the end below.
        Err(e) if code_of(&e) == IN_USE => {
            eks::already_deleting(e, || describe(eks, cluster, name)).await?;
        }
        Err(e) => return Err(e),
    }
    wait_gone(ctx, eks, (cluster, name)).await
}

/// A create refused as in use while no capability holds the name: the cluster runs one
/// of this type under another name (EKS runs one of each type per cluster). Names it;
/// `refusal` itself when the list says otherwise or cannot be read.
async fn type_taken(
    ctx: &Ctx,
    eks: &aws_sdk_eks::Client,
    spec: &Spec,
    refusal: ProviderError,
) -> ProviderError {
    let listed = match eks
        .list_capabilities()
        .cluster_name(&spec.cluster)
        .send()
        .await
        .map_err(|e| sdk_error(LIST, e))
    {
        Ok(listed) => listed,
        Err(_) => return refusal,
    };
    let other = listed
        .capabilities()
        .iter()
        .filter(|c| c.r#type().map(|t| t.as_str()) == Some(spec.capability_type.as_str()))
        .find_map(|c| c.capability_name().filter(|n| *n != spec.name));
    let Some(other) = other else {
        return refusal;
    };
    let (status, code) = match &refusal {
        ProviderError::Api { status, code, .. } => (*status, code.clone()),
        _ => (409, IN_USE.to_string()),
    };
    let cluster = &spec.cluster;
    ProviderError::api(
        CREATE,
        status,
        code,
        format!(
            "cluster {cluster} already has an {} capability, {other}, and EKS runs one capability of each type per cluster: delete it (`aws eks delete-capability --cluster-name {cluster} --capability-name {other}`), or set name = \"{other}\" and bring it under terrain with `terrain import {} {cluster}/{other}`",
            spec.capability_type, ctx.address
        ),
    )
}

fn gone(id: &str) -> ProviderError {
    eks::gone(DESCRIBE, &format!("capability {id}"))
}

#[async_trait]
impl Kind for EksCapability {
    type Spec = Spec;
    type Outputs = Outputs;
    const KIND: &'static str = "eks_capability";
    const PROVIDER: &'static str = "aws";
    const WRITES: crate::protocol::Writes = crate::protocol::Writes::FromId;

    fn validate(spec: &Spec, config: &Value) -> Vec<Invalid> {
        let mut out = Vec::new();
        if let Err(m) = catalog::check_eks_name(&spec.cluster, catalog::EKS_CLUSTER_NAME_MAX) {
            out.push(Invalid::at("cluster", m));
        }
        if let Err(m) = catalog::check_eks_name(&spec.name, catalog::EKS_CAPABILITY_NAME_MAX) {
            out.push(Invalid::at("name", m));
        }
        if let Err(m) = check_type(&spec.capability_type) {
            out.push(Invalid::at("type", m));
        }
        if let Err(m) = catalog::check_role_arn(&spec.role_arn) {
            out.push(Invalid::at("role_arn", m));
        } else if let Some(region) = config::catalog_region(config) {
            if let Err(m) = catalog::check_arn_partition(&spec.role_arn, region) {
                out.push(Invalid::at("role_arn", m));
            }
        }
        check_disabled_services(&spec.configuration.ack.disabled_services, &mut out);
        eks::check_tags_and_config(&spec.tags, config, &mut out);
        out
    }

    fn validate_peers(_spec: &Value, peers: &[Peer]) -> Vec<Invalid> {
        // EKS refuses a capability on a cluster without access entries: say so at plan,
        // when the stack's cluster is at CONFIG_MAP, or leaves the mode to EKS (whose
        // default for a new cluster is CONFIG_MAP; the stack must say, so the plan can).
        peers
            .iter()
            .filter(|p| p.kind == "eks_cluster")
            .filter_map(|p| {
                let mode = &p.spec["authentication_mode"];
                let said = match mode.as_str() {
                    Some("CONFIG_MAP") => "has authentication_mode = \"CONFIG_MAP\"",
                    // Not decided until apply: left for EKS to judge.
                    Some(_) => return None,
                    None if mode.is_null() => {
                        "leaves authentication_mode to EKS, whose default is CONFIG_MAP"
                    }
                    None => return None,
                };
                Some(Invalid::at(
                    "cluster",
                    format!(
                        "{} {said}, and EKS runs capabilities only on clusters with access entries: set its authentication_mode = \"API\" for a new cluster (an existing one moves one step at a time: \"API_AND_CONFIG_MAP\" first)",
                        p.address
                    ),
                ))
            })
            .collect()
    }

    fn api_groups(spec: &Value) -> crate::ApiGroups {
        // An ACK capability runs every ACK service controller and installs their CRDs,
        // all in groups `<service>.services.k8s.aws`, but the services turned off.
        if spec["type"].as_str() != Some("ACK") {
            return crate::ApiGroups::default();
        }
        let mut provides = vec!["*.services.k8s.aws".to_string()];
        provides.extend(
            spec["configuration"]["ack"]["disabled_services"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(|s| format!("-{s}.services.k8s.aws")),
        );
        // EKS runs the capability's controllers outside the cluster: no pods here.
        crate::ApiGroups {
            provides,
            ..crate::ApiGroups::default()
        }
    }

    fn planned_id(spec: &Spec, _config: &Value) -> Option<String> {
        // Capability names are unique per cluster.
        Some(format!("{}/{}", spec.cluster, spec.name))
    }

    async fn read(
        &self,
        ctx: &Ctx,
        id: &str,
        prior: Option<&Spec>,
    ) -> Result<Option<Live<Self>>, ProviderError> {
        let (cluster, name) = parts(id)?;
        let eks = config::eks(ctx).await?;
        let Some(live) = describe(&eks, cluster, name).await? else {
            return Ok(None);
        };
        // A capability being deleted is as good as gone: planning must create a new one.
        if eks::is_deleting(&live) {
            return Ok(None);
        }
        Ok(Some(Live {
            id: id.to_string(),
            spec: spec_of(&live, (cluster, name), prior),
            outputs: outputs_of(&live),
        }))
    }

    async fn create(&self, ctx: &Ctx, spec: &Spec) -> Result<Live<Self>, ProviderError> {
        let eks = config::eks(ctx).await?;
        let (cluster, name) = (spec.cluster.as_str(), spec.name.as_str());
        let id = format!("{cluster}/{name}");
        let tags = hash_map(tags_with_ours(&spec.tags, &ctx.address));
        let token = request_token();
        let send = || {
            eks.create_capability()
                .cluster_name(cluster)
                .capability_name(name)
                .r#type(CapabilityType::from(spec.capability_type.as_str()))
                .role_arn(&spec.role_arn)
                .configuration(create_configuration(&spec.configuration))
                // The only policy EKS has: what the controllers made outlives them.
                .delete_propagation_policy(CapabilityDeletePropagationPolicy::Retain)
                .client_request_token(&token)
                .set_tags(Some(tags.clone()))
                .send()
        };
        let what = Creating {
            call: CREATE,
            noun: "capability",
            name,
            id: &id,
            kind: Self::KIND,
        };
        if let Err(e) = eks::create_or_adopt(
            ctx,
            &what,
            send,
            || describe(&eks, cluster, name),
            || wait_gone(ctx, &eks, (cluster, name)),
        )
        .await
        {
            return Err(if code_of(&e) == IN_USE {
                type_taken(ctx, &eks, spec, e).await
            } else {
                e
            });
        }
        // Made but not running (CREATE_FAILED, DEGRADED, a timeout): the state keeps it,
        // and the next plan replaces it rather than leaving it behind.
        let live = wait_active(
            ctx,
            &eks,
            (cluster, name),
            CREATE,
            &format!("creating capability {name} of EKS cluster {cluster}"),
            CREATE_TIMEOUT,
        )
        .await
        .map_err(|e| ProviderError::tainted(&id, e))?;
        Ok(Live {
            spec: spec_of(&live, (cluster, name), Some(spec)),
            outputs: outputs_of(&live),
            id,
        })
    }

    async fn update(
        &self,
        ctx: &Ctx,
        id: &str,
        prior: &Spec,
        spec: &Spec,
    ) -> Result<Live<Self>, ProviderError> {
        let (cluster, name) = parts(id)?;
        let eks = config::eks(ctx).await?;
        let current = describe(&eks, cluster, name)
            .await?
            .ok_or_else(|| gone(id))?;
        let role = (prior.role_arn != spec.role_arn).then_some(spec.role_arn.as_str());
        let configuration = (prior.configuration != spec.configuration)
            .then(|| update_configuration(&spec.configuration));
        let changed: Vec<&str> = [
            role.map(|_| "role"),
            configuration.as_ref().map(|_| "configuration"),
        ]
        .into_iter()
        .flatten()
        .collect();
        if !changed.is_empty() {
            let send = || {
                eks.update_capability()
                    .cluster_name(cluster)
                    .capability_name(name)
                    .set_role_arn(role.map(str::to_string))
                    .set_configuration(configuration.clone())
                    .send()
            };
            // A new role is often made in the same apply: EKS refuses it until IAM has
            // propagated it, as it does at create.
            let mut propagation = RolePropagation::new();
            let out = loop {
                match send().await.map_err(|e| sdk_error(UPDATE, e)) {
                    Ok(out) => break out,
                    Err(e) if propagation.retry(ctx, &e).await => continue,
                    Err(e) => return Err(e),
                }
            };
            let waiting_for = format!(
                "updating the {} of capability {name} of EKS cluster {cluster}",
                changed.join(" and ")
            );
            let how = UpdateWait {
                cluster,
                nodegroup: None,
                capability: Some(name),
                call: UPDATE,
                waiting_for: &waiting_for,
                timeout: UPDATE_TIMEOUT,
            };
            wait_update(ctx, &eks, out.update(), &how).await?;
            wait_active(
                ctx,
                &eks,
                (cluster, name),
                UPDATE,
                &waiting_for,
                UPDATE_TIMEOUT,
            )
            .await?;
        }
        if prior.tags != spec.tags {
            let arn = current.arn().unwrap_or_default();
            retag(&eks, arn, &current, &spec.tags).await?;
        }
        let live = describe(&eks, cluster, name)
            .await?
            .ok_or_else(|| gone(id))?;
        Ok(Live {
            id: id.to_string(),
            spec: spec_of(&live, (cluster, name), Some(spec)),
            outputs: outputs_of(&live),
        })
    }

    async fn delete(
        &self,
        ctx: &Ctx,
        id: &str,
        _prior: Option<&Spec>,
    ) -> Result<(), ProviderError> {
        let (cluster, name) = parts(id)?;
        let eks = config::eks(ctx).await?;
        remove(ctx, &eks, (cluster, name)).await
    }

    async fn health(
        &self,
        ctx: &Ctx,
        id: &str,
        _prior: Option<&Spec>,
    ) -> Result<Option<Health>, ProviderError> {
        let (cluster, name) = parts(id)?;
        let eks = config::eks(ctx).await?;
        let live = describe(&eks, cluster, name).await?;
        Ok(Some(eks::health_of(
            live.as_ref(),
            eks::BROKEN,
            health_issues,
            |live| format!("version {}", live.version().unwrap_or("unknown")),
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aws::eks::testing::assert_validation;
    use crate::protocol::UNKNOWN;
    use crate::testing::schema_mismatches;
    use aws_sdk_eks::types::{
        AckConfigResponse, CapabilityConfigurationResponse, CapabilityHealth, CapabilityIssue,
        CapabilityIssueCode, CapabilityStatus,
    };
    use serde_json::json;

    fn base() -> Spec {
        Spec {
            cluster: "ml".into(),
            name: "ack".into(),
            capability_type: "ACK".into(),
            role_arn: "arn:aws:iam::123456789012:role/ack-capability".into(),
            configuration: Configuration::default(),
            tags: BTreeMap::new(),
        }
    }

    fn full() -> Spec {
        Spec {
            configuration: Configuration {
                ack: AckConfiguration {
                    enable_cross_namespace: true,
                    disabled_services: vec!["sagemaker".into(), "ec2".into()],
                },
            },
            tags: BTreeMap::from([("team".to_string(), "ml".to_string())]),
            ..base()
        }
    }

    /// A capability as DescribeCapability reports one made from `s`.
    fn live_of(s: &Spec, address: &str) -> Capability {
        Capability::builder()
            .capability_name(&s.name)
            .arn(format!(
                "arn:aws:eks:us-west-2:123456789012:capability/{}/ack/{}",
                s.cluster, s.name
            ))
            .cluster_name(&s.cluster)
            .r#type(CapabilityType::from(s.capability_type.as_str()))
            .role_arn(&s.role_arn)
            .status(CapabilityStatus::Active)
            .version("v1")
            .configuration(
                CapabilityConfigurationResponse::builder()
                    .ack(
                        AckConfigResponse::builder()
                            .enable_cross_namespace(s.configuration.ack.enable_cross_namespace)
                            .set_disabled_services(Some(
                                s.configuration.ack.disabled_services.clone(),
                            ))
                            .build(),
                    )
                    .build(),
            )
            .set_tags(Some(hash_map(tags_with_ours(&s.tags, address))))
            .build()
    }

    #[test]
    fn schema_matches_spec_and_outputs() {
        let outputs = outputs_of(&live_of(&full(), "eks_capability.ack"));
        assert_eq!(
            schema_mismatches::<EksCapability>(&full(), &outputs),
            Vec::<String>::new()
        );
        let schema = EksCapability::schema();
        let field = |n: &str| {
            schema
                .fields
                .iter()
                .find(|f| f.name == n)
                .unwrap_or_else(|| panic!("{n} is a field"))
        };
        for n in ["cluster", "name", "type"] {
            assert!(field(n).force_new, "{n} forces a new capability");
        }
        for n in ["role_arn", "configuration", "tags"] {
            assert!(!field(n).force_new, "{n} changes in place");
        }
        assert_eq!(field("type").default, Some(json!("ACK")));
    }

    #[test]
    fn live_capability_reads_back_as_its_spec() {
        for s in [base(), full()] {
            let live = live_of(&s, "eks_capability.ack");
            assert_eq!(spec_of(&live, ("ml", "ack"), Some(&s)), s);
            let out = outputs_of(&live);
            assert_eq!(
                (out.status.as_str(), out.version.as_str()),
                ("ACTIVE", "v1")
            );
            assert!(out.arn.ends_with(":capability/ml/ack/ack"), "{}", out.arn);
        }
        // EKS may list the disabled services in another order: the prior's is kept.
        let mut live = live_of(&full(), "eks_capability.ack");
        live.configuration = Some(
            CapabilityConfigurationResponse::builder()
                .ack(
                    AckConfigResponse::builder()
                        .enable_cross_namespace(true)
                        .disabled_services("ec2")
                        .disabled_services("sagemaker")
                        .build(),
                )
                .build(),
        );
        assert_eq!(spec_of(&live, ("ml", "ack"), Some(&full())), full());
        // An answer without ACK's settings is EKS's defaults; terrain's tags are hidden.
        let mut bare = live_of(&base(), "eks_capability.ack");
        bare.configuration = None;
        bare.cluster_name = None;
        let imported = spec_of(&bare, ("ml", "ack"), None);
        assert_eq!(imported, base());
    }

    #[test]
    fn requests_carry_the_whole_ack_configuration() {
        let c = full().configuration;
        let created = create_configuration(&c);
        let ack = created.ack().expect("ack settings");
        assert_eq!(ack.enable_cross_namespace(), Some(true));
        assert_eq!(ack.disabled_services(), ["sagemaker", "ec2"]);
        assert!(created.argo_cd().is_none());
        // Back to the defaults: both sent, the list empty, so EKS turns every service on.
        let reset = update_configuration(&Configuration::default());
        let ack = reset.ack().expect("ack settings");
        assert_eq!(ack.enable_cross_namespace(), Some(false));
        assert_eq!(ack.disabled_services.as_deref(), Some(&[][..]));
        assert_ne!(request_token(), request_token());
    }

    #[test]
    fn ids() {
        assert_eq!(parts("ml/ack").ok(), Some(("ml", "ack")));
        for bad in ["ml", "/ack", "ml/", "a/b/c"] {
            assert!(parts(bad).is_err(), "{bad}");
        }
        assert_eq!(
            EksCapability::planned_id(&base(), &Value::Null).as_deref(),
            Some("ml/ack")
        );
    }

    #[test]
    fn validation_table() {
        let services = |s: &[&str]| Configuration {
            ack: AckConfiguration {
                enable_cross_namespace: false,
                disabled_services: s.iter().map(|s| s.to_string()).collect(),
            },
        };
        let cases: Vec<(Spec, &str, &str)> = vec![
            (base(), "", ""),
            (full(), "", ""),
            (
                Spec {
                    name: "ack.main".into(),
                    ..base()
                },
                "name",
                "only letters, digits",
            ),
            (
                Spec {
                    name: "-ack".into(),
                    ..base()
                },
                "name",
                "start with a letter or digit",
            ),
            (
                Spec {
                    name: "a".repeat(65),
                    ..base()
                },
                "name",
                "at most 64",
            ),
            (
                Spec {
                    name: String::new(),
                    ..base()
                },
                "name",
                "must not be empty",
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
                    capability_type: "KRO".into(),
                    ..base()
                },
                "type",
                "terrain manages only ACK capabilities so far",
            ),
            (
                Spec {
                    capability_type: "ARGOCD".into(),
                    ..base()
                },
                "type",
                "ARGOCD is an EKS capability type",
            ),
            (
                Spec {
                    capability_type: "ack".into(),
                    ..base()
                },
                "type",
                "\"ack\" is not an EKS capability type (ACK, KRO, ARGOCD)",
            ),
            (
                Spec {
                    role_arn: "ack-capability".into(),
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
                    configuration: services(&["S3"]),
                    ..base()
                },
                "configuration.ack.disabled_services.0",
                "not an ACK service name",
            ),
            (
                Spec {
                    configuration: services(&["s3", "s3"]),
                    ..base()
                },
                "configuration.ack.disabled_services.1",
                "listed twice",
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
        assert_validation::<EksCapability>(cases, &json!({"region": "us-west-2"}));
        let gov = vec![(
            base(),
            "role_arn",
            "the provider's region us-gov-west-1 is in the aws-us-gov partition",
        )];
        assert_validation::<EksCapability>(gov, &json!({"region": "us-gov-west-1"}));
    }

    #[test]
    fn a_cluster_without_access_entries_is_refused_at_plan() {
        let peer = |mode: Value| Peer {
            kind: "eks_cluster".into(),
            address: "eks_cluster.ml".into(),
            spec: json!({"name": "ml", "authentication_mode": mode}),
        };
        let spec = serde_json::to_value(base()).expect("a spec");
        let refused = EksCapability::validate_peers(&spec, &[peer(json!("CONFIG_MAP"))]);
        assert!(
            matches!(refused.as_slice(), [p] if p.path == ["cluster"] && p.message.starts_with("eks_cluster.ml has authentication_mode = \"CONFIG_MAP\"")),
            "{refused:?}"
        );
        // Left to EKS: a new cluster would be CONFIG_MAP.
        let unsaid = EksCapability::validate_peers(&spec, &[peer(Value::Null)]);
        assert!(
            matches!(unsaid.as_slice(), [p] if p.message.starts_with("eks_cluster.ml leaves authentication_mode to EKS, whose default is CONFIG_MAP")),
            "{unsaid:?}"
        );
        for ok in [json!("API"), json!("API_AND_CONFIG_MAP"), json!(UNKNOWN)] {
            assert!(
                EksCapability::validate_peers(&spec, &[peer(ok.clone())]).is_empty(),
                "{ok}"
            );
        }
    }

    #[test]
    fn health_follows_the_status_and_names_the_issues() {
        let mut live = live_of(&base(), "eks_capability.ack");
        live.status = Some(CapabilityStatus::Degraded);
        live.health = Some(
            CapabilityHealth::builder()
                .issues(
                    CapabilityIssue::builder()
                        .code(CapabilityIssueCode::AccessDenied)
                        .message("the role cannot be assumed")
                        .build(),
                )
                .build(),
        );
        assert_eq!(
            health_issues(&live),
            "AccessDenied: the role cannot be assumed"
        );
        let health = eks::health_of(Some(&live), eks::BROKEN, health_issues, |_| String::new());
        assert_eq!(
            health,
            Health {
                ready: false,
                summary: "DEGRADED: AccessDenied: the role cannot be assumed".into()
            }
        );
        let active = live_of(&base(), "eks_capability.ack");
        assert!(
            eks::health_of(Some(&active), eks::BROKEN, health_issues, |l| format!(
                "version {}",
                l.version().unwrap_or("unknown")
            ))
            .ready
        );
    }
}
