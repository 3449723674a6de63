//! The `eks_addon` kind: an EKS add-on of a cluster (`coredns`, `kube-proxy`, `vpc-cni`,
//! `eks-pod-identity-agent`…), software EKS installs and keeps on the cluster's nodes.
//! The id is `CLUSTER/NAME`.
//!
//! The version and the configuration values change in place (UpdateAddon, followed to
//! its end and until the add-on is ACTIVE again), tags through TagResource/UntagResource;
//! the cluster and the name force a new add-on. Left out, `version` is EKS's default
//! version for the cluster's Kubernetes version, and the add-on keeps whatever version it
//! runs. `resolve_conflicts` says what EKS does with fields of the add-on's Kubernetes
//! objects someone else changed; EKS does not report it back, so it is read from the
//! prior spec.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_eks::types::{Addon, ResolveConflicts, Update};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::eks::{
    self, code_of, found, hash_map, problems_line, retag, tag_map, Creating, EksObject, IN_USE,
    POLL,
};
use super::{config, is_not_found, sdk_error, tags_with_ours, user_tags, wait_for};
use crate::schema::Fields;
use crate::{Ctx, Health, Invalid, Kind, Live, ProviderError};

/// The kind `eks_addon`.
#[derive(Debug, Clone, Copy, Default)]
pub struct EksAddon;

/// What a stack writes for an `eks_addon`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    /// The EKS cluster's name ("${eks_cluster.NAME.name}").
    #[terrain(force_new)]
    pub cluster: String,
    /// The add-on's name as EKS publishes it (coredns, kube-proxy, vpc-cni,
    /// eks-pod-identity-agent, aws-ebs-csi-driver…): lowercase letters, digits and '-'.
    #[terrain(force_new)]
    pub name: String,
    /// The add-on version (v1.3.8-eksbuild.2); left out, EKS installs its default version
    /// for the cluster's Kubernetes version and the add-on keeps what it runs. Changed in
    /// place.
    pub version: Option<String>,
    /// The add-on's configuration, a JSON object as a string (its schema is EKS's
    /// DescribeAddonConfiguration); left out, the add-on's defaults. Changed in place.
    pub configuration_values: Option<String>,
    /// What EKS does with fields of the add-on's Kubernetes objects changed outside EKS,
    /// at create and update: NONE (keep them; the call may fail), OVERWRITE (EKS's values
    /// win) or PRESERVE (keep them). Left out, EKS's default (NONE).
    pub resolve_conflicts: Option<String>,
    /// AWS tags on the add-on.
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
}

/// What `eks_addon` reports after apply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Outputs {
    /// The add-on's ARN.
    pub arn: String,
    /// CREATING, ACTIVE, UPDATING, DEGRADED, DELETING, CREATE_FAILED, UPDATE_FAILED or
    /// DELETE_FAILED.
    pub status: String,
    /// The version the add-on runs (also when `version` is left to EKS).
    pub version: String,
}

const CREATE: &str = "eks:CreateAddon";
const DESCRIBE: &str = "eks:DescribeAddon";
const UPDATE: &str = "eks:UpdateAddon";
const DELETE: &str = "eks:DeleteAddon";
const ID_SHAPE: &str = "CLUSTER/ADDON";

/// The values of `resolve_conflicts`, as EKS spells them.
pub const RESOLVE_CONFLICTS: &[&str] = &["NONE", "OVERWRITE", "PRESERVE"];

/// Statuses an add-on does not leave by itself: the node group's and capability's, and
/// a failed update.
const BROKEN: &[&str] = &[
    "CREATE_FAILED",
    "DEGRADED",
    "DELETE_FAILED",
    "UPDATE_FAILED",
];

/// EKS installs an add-on in a minute or two; allow far more (an add-on whose pods wait
/// for nodes stays CREATING until they come).
const CREATE_TIMEOUT: Duration = Duration::from_secs(20 * 60);
const UPDATE_TIMEOUT: Duration = Duration::from_secs(20 * 60);
const DELETE_TIMEOUT: Duration = Duration::from_secs(20 * 60);

impl EksObject for Addon {
    fn status_str(&self) -> Option<&str> {
        self.status().map(|s| s.as_str())
    }
    fn tag_list(&self) -> Option<&HashMap<String, String>> {
        self.tags()
    }
}

// ---------------------------------------------------------------------------------
// Offline checks
// ---------------------------------------------------------------------------------

/// Checks an add-on name: lowercase letters, digits, '-' (and '_', which the names of
/// AWS Marketplace add-ons hold: `vendor_product`), starting with a letter or digit.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("must not be empty".into());
    }
    if !name.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit()) {
        return Err(format!(
            "{name:?} must start with a lowercase letter or digit"
        ));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-' || *c == '_'))
    {
        return Err(format!(
            "{name:?} holds {bad:?}; EKS add-on names are lowercase letters, digits and '-' (coredns, vpc-cni, eks-pod-identity-agent)"
        ));
    }
    Ok(())
}

/// Checks configuration values: a JSON object.
pub fn check_configuration_values(values: &str) -> Result<(), String> {
    match serde_json::from_str::<Value>(values) {
        Ok(Value::Object(_)) => Ok(()),
        Ok(other) => Err(format!(
            "must be a JSON object (\"{{...}}\"), not {}",
            match other {
                Value::Array(_) => "an array",
                Value::String(_) => "a string",
                Value::Number(_) => "a number",
                Value::Bool(_) => "a boolean",
                _ => "null",
            }
        )),
        Err(e) => Err(format!("is not JSON: {e}")),
    }
}

/// Checks `resolve_conflicts`: one of [`RESOLVE_CONFLICTS`].
pub fn check_resolve_conflicts(value: &str) -> Result<(), String> {
    if RESOLVE_CONFLICTS.contains(&value) {
        Ok(())
    } else {
        Err(format!(
            "{value:?} is not one of {}",
            RESOLVE_CONFLICTS.join(", ")
        ))
    }
}

// ---------------------------------------------------------------------------------
// Reading
// ---------------------------------------------------------------------------------

/// Whether two configuration values mean the same: the same JSON, however spelled.
fn same_values(a: Option<&str>, b: Option<&str>) -> bool {
    let parsed = |s: Option<&str>| s.map(|s| serde_json::from_str::<Value>(s).ok());
    match (a, b) {
        (Some(x), Some(y)) if x == y => true,
        (Some(_), Some(_)) => {
            matches!((parsed(a), parsed(b)), (Some(Some(x)), Some(Some(y))) if x == y)
        }
        (None, None) => true,
        _ => false,
    }
}

/// The configuration values a live add-on shows; none when EKS answers none or an
/// empty string (what an add-on without configuration reports).
fn live_values(live: &Addon) -> Option<&str> {
    live.configuration_values().filter(|v| !v.trim().is_empty())
}

/// The spec a live add-on shows, for the add-on `(cluster, name)` of its id. The version
/// is read back only when the prior spec set it (or on import): left to EKS, it stays
/// left to EKS. The configuration values keep the prior's spelling when they mean the
/// same JSON; `resolve_conflicts` is the prior's, as EKS does not report it.
pub fn spec_of(live: &Addon, (cluster, name): (&str, &str), prior: Option<&Spec>) -> Spec {
    let values = live_values(live);
    let prior_values = prior.and_then(|p| p.configuration_values.as_deref());
    Spec {
        cluster: live.cluster_name().unwrap_or(cluster).to_string(),
        name: live.addon_name().unwrap_or(name).to_string(),
        version: prior
            .is_none_or(|p| p.version.is_some())
            .then(|| live.addon_version().map(str::to_string))
            .flatten(),
        configuration_values: if same_values(values, prior_values) {
            prior_values.map(str::to_string)
        } else {
            values.map(str::to_string)
        },
        resolve_conflicts: prior.and_then(|p| p.resolve_conflicts.clone()),
        tags: user_tags(&tag_map(live.tags())),
    }
}

fn outputs_of(live: &Addon) -> Outputs {
    Outputs {
        arn: live.addon_arn().unwrap_or_default().to_string(),
        status: live
            .status()
            .map(|s| s.as_str())
            .unwrap_or_default()
            .to_string(),
        version: live.addon_version().unwrap_or_default().to_string(),
    }
}

/// `(cluster, name)` of an id (see [`ID_SHAPE`]).
fn parts(id: &str) -> Result<(&str, &str), ProviderError> {
    eks::parts(id, EksAddon::KIND, ID_SHAPE)
}

/// The add-on; `None` when it (or its cluster) does not exist.
async fn describe(
    eks: &aws_sdk_eks::Client,
    cluster: &str,
    name: &str,
) -> Result<Option<Addon>, ProviderError> {
    let answer = eks
        .describe_addon()
        .cluster_name(cluster)
        .addon_name(name)
        .send()
        .await;
    Ok(found(DESCRIBE, answer)?.and_then(|out| out.addon().cloned()))
}

/// The health issues of an add-on, one line.
pub fn health_issues(live: &Addon) -> String {
    problems_line(
        live.health()
            .map(|h| h.issues())
            .unwrap_or_default()
            .iter()
            .map(|i| (i.code().map(|c| c.as_str()), i.message(), i.resource_ids())),
        "EKS reports no health issue",
    )
}

/// A client request token for one create or update: every send of it carries the same,
/// so EKS answers a repeated send whose first answer was lost with the first one's
/// result.
fn request_token() -> String {
    format!("terrain-{:032x}", rand::random::<u128>())
}

// ---------------------------------------------------------------------------------
// Waiting
// ---------------------------------------------------------------------------------

/// Waits until the add-on is ACTIVE (see [`eks::wait_part_active`]).
async fn wait_active(
    ctx: &Ctx,
    eks: &aws_sdk_eks::Client,
    (cluster, name): (&str, &str),
    (call, waiting_for): (&str, &str),
    timeout: Duration,
) -> Result<Addon, ProviderError> {
    let part = eks::Part {
        noun: "add-on",
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

/// Waits until the add-on no longer exists (see [`eks::wait_part_gone`]).
async fn wait_gone(
    ctx: &Ctx,
    eks: &aws_sdk_eks::Client,
    (cluster, name): (&str, &str),
) -> Result<(), ProviderError> {
    let part = eks::Part {
        noun: "add-on",
        cluster,
        name,
    };
    let describe = || describe(eks, cluster, name);
    eks::wait_part_gone(ctx, part, DELETE, DELETE_TIMEOUT, describe, health_issues).await
}

/// Whether an update is over: `Some(())` once Successful, `Failed` with EKS's errors when
/// it failed or was cancelled.
fn update_done(u: &Update) -> Result<Option<()>, ProviderError> {
    match u.status().map(|s| s.as_str()) {
        Some("Successful") => Ok(Some(())),
        Some(s @ ("Failed" | "Cancelled")) => Err(ProviderError::Failed {
            call: UPDATE.to_string(),
            message: format!(
                "update {} {}: {}",
                u.id().unwrap_or_default(),
                s.to_lowercase(),
                problems_line(
                    u.errors().iter().map(|e| (
                        e.error_code().map(|c| c.as_str()),
                        e.error_message(),
                        e.resource_ids()
                    )),
                    "EKS gave no reason"
                )
            ),
        }),
        _ => Ok(None),
    }
}

/// Follows the update UpdateAddon started to its end (DescribeUpdate with the add-on's
/// name, which `eks::wait_update` does not send). An answer without an update has
/// nothing to follow.
async fn follow_update(
    ctx: &Ctx,
    eks: &aws_sdk_eks::Client,
    (cluster, name): (&str, &str),
    update: Option<&Update>,
    waiting_for: &str,
) -> Result<(), ProviderError> {
    let Some(update) = update else {
        return Ok(());
    };
    if update_done(update)?.is_some() {
        return Ok(());
    }
    let id = update.id().unwrap_or_default();
    wait_for(
        ctx,
        UPDATE,
        waiting_for,
        UPDATE_TIMEOUT,
        POLL,
        move || async move {
            let out = eks
                .describe_update()
                .name(cluster)
                .update_id(id)
                .addon_name(name)
                .send()
                .await
                .map_err(|e| sdk_error(eks::DESCRIBE_UPDATE, e))?;
            match out.update() {
                Some(u) => update_done(u),
                None => Ok(None),
            }
        },
    )
    .await
}

/// Deletes the add-on and waits until it is gone; one (or a cluster) already gone is
/// fine, one already being deleted is waited for.
async fn remove(
    ctx: &Ctx,
    eks: &aws_sdk_eks::Client,
    (cluster, name): (&str, &str),
) -> Result<(), ProviderError> {
    match eks
        .delete_addon()
        .cluster_name(cluster)
        .addon_name(name)
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

fn gone(id: &str) -> ProviderError {
    eks::gone(DESCRIBE, &format!("add-on {id}"))
}

/// Brings the add-on's version and configuration values to the spec's with UpdateAddon,
/// when they differ from the live add-on's, and waits until it is ACTIVE again. The
/// sandbox does not emulate UpdateAddon: this runs only against EKS.
async fn update_software(
    ctx: &Ctx,
    eks: &aws_sdk_eks::Client,
    (cluster, name): (&str, &str),
    current: &Addon,
    spec: &Spec,
) -> Result<(), ProviderError> {
    // Left out, the version stays whatever the add-on runs.
    let version = spec
        .version
        .as_deref()
        .filter(|v| current.addon_version() != Some(*v));
    // Removed values are sent as an empty string: EKS goes back to the add-on's defaults.
    let values = (!same_values(live_values(current), spec.configuration_values.as_deref()))
        .then(|| spec.configuration_values.clone().unwrap_or_default());
    let changed: Vec<&str> = [
        version.map(|_| "version"),
        values.as_ref().map(|_| "configuration values"),
    ]
    .into_iter()
    .flatten()
    .collect();
    if changed.is_empty() {
        return Ok(());
    }
    let out = eks
        .update_addon()
        .cluster_name(cluster)
        .addon_name(name)
        .set_addon_version(version.map(str::to_string))
        .set_configuration_values(values)
        .set_resolve_conflicts(
            spec.resolve_conflicts
                .as_deref()
                .map(ResolveConflicts::from),
        )
        .client_request_token(request_token())
        .send()
        .await
        .map_err(|e| sdk_error(UPDATE, e))?;
    let waiting_for = format!(
        "updating the {} of add-on {name} of EKS cluster {cluster}",
        changed.join(" and ")
    );
    follow_update(ctx, eks, (cluster, name), out.update(), &waiting_for).await?;
    wait_active(
        ctx,
        eks,
        (cluster, name),
        (UPDATE, &waiting_for),
        UPDATE_TIMEOUT,
    )
    .await?;
    Ok(())
}

#[async_trait]
impl Kind for EksAddon {
    type Spec = Spec;
    type Outputs = Outputs;
    const KIND: &'static str = "eks_addon";
    const PROVIDER: &'static str = "aws";
    const WRITES: crate::protocol::Writes = crate::protocol::Writes::FromId;

    fn validate(spec: &Spec, config: &Value) -> Vec<Invalid> {
        let mut out = Vec::new();
        if let Err(m) =
            super::catalog::check_eks_name(&spec.cluster, super::catalog::EKS_CLUSTER_NAME_MAX)
        {
            out.push(Invalid::at("cluster", m));
        }
        if let Err(m) = check_name(&spec.name) {
            out.push(Invalid::at("name", m));
        }
        if let Some(v) = &spec.version {
            if v.trim().is_empty() {
                out.push(Invalid::at(
                    "version",
                    "must not be empty; leave version out for EKS's default version",
                ));
            }
        }
        if let Some(values) = &spec.configuration_values {
            if let Err(m) = check_configuration_values(values) {
                out.push(Invalid::at("configuration_values", m));
            }
        }
        if let Some(r) = &spec.resolve_conflicts {
            if let Err(m) = check_resolve_conflicts(r) {
                out.push(Invalid::at("resolve_conflicts", m));
            }
        }
        eks::check_tags_and_config(&spec.tags, config, &mut out);
        out
    }

    fn planned_id(spec: &Spec, _config: &Value) -> Option<String> {
        // Add-on names are unique per cluster.
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
        // An add-on being deleted is as good as gone: planning must create a new one.
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
            eks.create_addon()
                .cluster_name(cluster)
                .addon_name(name)
                .set_addon_version(spec.version.clone())
                .set_configuration_values(spec.configuration_values.clone())
                .set_resolve_conflicts(
                    spec.resolve_conflicts
                        .as_deref()
                        .map(ResolveConflicts::from),
                )
                .client_request_token(&token)
                .set_tags(Some(tags.clone()))
                .send()
        };
        let what = Creating {
            call: CREATE,
            noun: "add-on",
            name,
            id: &id,
            kind: Self::KIND,
        };
        eks::create_or_adopt(
            ctx,
            &what,
            send,
            || describe(&eks, cluster, name),
            || wait_gone(ctx, &eks, (cluster, name)),
        )
        .await?;
        // Made but not running (CREATE_FAILED, DEGRADED, a timeout): the state keeps it,
        // and the next plan replaces it rather than leaving it behind.
        let waiting_for = format!("creating add-on {name} of EKS cluster {cluster}");
        let live = wait_active(
            ctx,
            &eks,
            (cluster, name),
            (CREATE, &waiting_for),
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
        _prior: &Spec,
        spec: &Spec,
    ) -> Result<Live<Self>, ProviderError> {
        let (cluster, name) = parts(id)?;
        let eks = config::eks(ctx).await?;
        let current = describe(&eks, cluster, name)
            .await?
            .ok_or_else(|| gone(id))?;
        update_software(ctx, &eks, (cluster, name), &current, spec).await?;
        if user_tags(&tag_map(current.tags())) != spec.tags {
            let arn = current.addon_arn().unwrap_or_default();
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
            BROKEN,
            health_issues,
            |live| format!("version {}", live.addon_version().unwrap_or("unknown")),
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aws::eks::testing::assert_validation;
    use crate::testing::schema_mismatches;
    use aws_sdk_eks::types::{
        AddonHealth, AddonIssue, AddonIssueCode, AddonStatus, ErrorCode, ErrorDetail, UpdateStatus,
    };
    use serde_json::json;

    fn base() -> Spec {
        Spec {
            cluster: "ml".into(),
            name: "eks-pod-identity-agent".into(),
            version: None,
            configuration_values: None,
            resolve_conflicts: None,
            tags: BTreeMap::new(),
        }
    }

    fn full() -> Spec {
        Spec {
            version: Some("v1.3.8-eksbuild.2".into()),
            configuration_values: Some(
                r#"{"agent": {"additionalArgs": {"-b": "169.254.170.23"}}}"#.into(),
            ),
            resolve_conflicts: Some("OVERWRITE".into()),
            tags: BTreeMap::from([("team".to_string(), "ml".to_string())]),
            ..base()
        }
    }

    /// An add-on as DescribeAddon reports one made from `s` (EKS's default version when
    /// `s` leaves it out).
    fn live_of(s: &Spec, address: &str) -> Addon {
        Addon::builder()
            .addon_name(&s.name)
            .cluster_name(&s.cluster)
            .addon_arn(format!(
                "arn:aws:eks:us-west-2:123456789012:addon/{}/{}/0ec9f1b2",
                s.cluster, s.name
            ))
            .status(AddonStatus::Active)
            .addon_version(s.version.as_deref().unwrap_or("v1.3.8-eksbuild.2"))
            .set_configuration_values(s.configuration_values.clone())
            .set_tags(Some(hash_map(tags_with_ours(&s.tags, address))))
            .build()
    }

    #[test]
    fn schema_matches_spec_and_outputs() {
        let outputs = outputs_of(&live_of(&full(), "eks_addon.agent"));
        assert_eq!(
            schema_mismatches::<EksAddon>(&full(), &outputs),
            Vec::<String>::new()
        );
        let schema = EksAddon::schema();
        let field = |n: &str| {
            schema
                .fields
                .iter()
                .find(|f| f.name == n)
                .unwrap_or_else(|| panic!("{n} is a field"))
        };
        for n in ["cluster", "name"] {
            assert!(field(n).force_new, "{n} forces a new add-on");
        }
        for n in [
            "version",
            "configuration_values",
            "resolve_conflicts",
            "tags",
        ] {
            assert!(!field(n).force_new, "{n} changes in place");
            assert!(!field(n).required, "{n} may be left out");
        }
    }

    #[test]
    fn live_addon_reads_back_as_its_spec() {
        let address = "eks_addon.agent";
        // Everything set: read back as written, resolve_conflicts from the prior.
        let live = live_of(&full(), address);
        assert_eq!(
            spec_of(&live, ("ml", "eks-pod-identity-agent"), Some(&full())),
            full()
        );
        let out = outputs_of(&live);
        assert_eq!(
            (out.status.as_str(), out.version.as_str()),
            ("ACTIVE", "v1.3.8-eksbuild.2")
        );
        assert!(
            out.arn.contains(":addon/ml/eks-pod-identity-agent/"),
            "{}",
            out.arn
        );
        // The version left to EKS stays left to EKS; the output says what runs.
        let live = live_of(&base(), address);
        assert_eq!(
            spec_of(&live, ("ml", "eks-pod-identity-agent"), Some(&base())),
            base()
        );
        assert_eq!(outputs_of(&live).version, "v1.3.8-eksbuild.2");
        // Imported: the version it runs is written down, and terrain's tags hidden.
        let imported = spec_of(&live, ("ml", "eks-pod-identity-agent"), None);
        assert_eq!(imported.version.as_deref(), Some("v1.3.8-eksbuild.2"));
        assert!(imported.tags.is_empty());
        // EKS may spell the same JSON otherwise: the prior's spelling is kept; other
        // values are read as they are, and an empty string is none.
        let mut respelled = live_of(&full(), address);
        respelled.configuration_values =
            Some(r#"{"agent":{"additionalArgs":{"-b":"169.254.170.23"}}}"#.into());
        assert_eq!(
            spec_of(&respelled, ("ml", "eks-pod-identity-agent"), Some(&full())),
            full()
        );
        respelled.configuration_values = Some(r#"{"agent":{}}"#.into());
        assert_eq!(
            spec_of(&respelled, ("ml", "eks-pod-identity-agent"), Some(&full()))
                .configuration_values
                .as_deref(),
            Some(r#"{"agent":{}}"#)
        );
        respelled.configuration_values = Some(String::new());
        assert_eq!(
            spec_of(&respelled, ("ml", "eks-pod-identity-agent"), Some(&base()))
                .configuration_values,
            None
        );
    }

    #[test]
    fn ids() {
        assert_eq!(parts("ml/coredns").ok(), Some(("ml", "coredns")));
        for bad in ["ml", "/coredns", "ml/", "a/b/c"] {
            assert!(parts(bad).is_err(), "{bad}");
        }
        assert_eq!(
            EksAddon::planned_id(&base(), &Value::Null).as_deref(),
            Some("ml/eks-pod-identity-agent")
        );
        assert_ne!(request_token(), request_token());
    }

    #[test]
    fn validation_table() {
        let cases: Vec<(Spec, &str, &str)> = vec![
            (base(), "", ""),
            (full(), "", ""),
            (
                Spec {
                    name: "solo-io_istio-distro".into(),
                    ..base()
                },
                "",
                "",
            ),
            (
                Spec {
                    name: "CoreDNS".into(),
                    ..base()
                },
                "name",
                "must start with a lowercase letter or digit",
            ),
            (
                Spec {
                    name: "core.dns".into(),
                    ..base()
                },
                "name",
                "holds '.'; EKS add-on names are lowercase letters, digits and '-'",
            ),
            (
                Spec {
                    name: "vpc-CNI".into(),
                    ..base()
                },
                "name",
                "holds 'C'",
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
                    version: Some(" ".into()),
                    ..base()
                },
                "version",
                "leave version out",
            ),
            (
                Spec {
                    configuration_values: Some("replicaCount: 2".into()),
                    ..base()
                },
                "configuration_values",
                "is not JSON",
            ),
            (
                Spec {
                    configuration_values: Some("[1]".into()),
                    ..base()
                },
                "configuration_values",
                "must be a JSON object",
            ),
            (
                Spec {
                    resolve_conflicts: Some("overwrite".into()),
                    ..base()
                },
                "resolve_conflicts",
                "\"overwrite\" is not one of NONE, OVERWRITE, PRESERVE",
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
        assert_validation::<EksAddon>(cases, &json!({"region": "us-west-2"}));
        for r in RESOLVE_CONFLICTS {
            let s = Spec {
                resolve_conflicts: Some(r.to_string()),
                ..base()
            };
            assert!(EksAddon::validate(&s, &json!({})).is_empty(), "{r}");
        }
    }

    #[test]
    fn configuration_values_compare_as_json() {
        assert!(same_values(Some(r#"{"a": 1}"#), Some(r#"{"a":1}"#)));
        assert!(!same_values(Some(r#"{"a": 1}"#), Some(r#"{"a":2}"#)));
        assert!(!same_values(Some(r#"{"a": 1}"#), None));
        assert!(same_values(None, None));
        // Not JSON: compared as written.
        assert!(same_values(Some("a: 1"), Some("a: 1")));
        assert!(!same_values(Some("a: 1"), Some("a:  1")));
    }

    #[test]
    fn updates_end_successful_or_with_eks_errors() {
        let of = |status: UpdateStatus| Update::builder().id("u-1").status(status).build();
        assert!(matches!(
            update_done(&of(UpdateStatus::Successful)),
            Ok(Some(()))
        ));
        assert!(matches!(
            update_done(&of(UpdateStatus::InProgress)),
            Ok(None)
        ));
        let failed = Update::builder()
            .id("u-1")
            .status(UpdateStatus::Failed)
            .errors(
                ErrorDetail::builder()
                    .error_code(ErrorCode::ConfigurationConflict)
                    .error_message("Conflicts found when trying to apply")
                    .build(),
            )
            .build();
        let e = update_done(&failed).expect_err("a failed update");
        assert!(
            e.to_string()
                .contains("update u-1 failed: ConfigurationConflict: Conflicts found"),
            "{e}"
        );
    }

    #[test]
    fn health_follows_the_status_and_names_the_issues() {
        let mut live = live_of(&base(), "eks_addon.agent");
        live.status = Some(AddonStatus::Degraded);
        live.health = Some(
            AddonHealth::builder()
                .issues(
                    AddonIssue::builder()
                        .code(AddonIssueCode::InsufficientNumberOfReplicas)
                        .message("The add-on is unhealthy because it doesn't have the desired number of replicas.")
                        .build(),
                )
                .build(),
        );
        let health = eks::health_of(Some(&live), BROKEN, health_issues, |_| String::new());
        assert!(!health.ready);
        assert!(
            health
                .summary
                .starts_with("DEGRADED: InsufficientNumberOfReplicas: The add-on is unhealthy"),
            "{}",
            health.summary
        );
        live.status = Some(AddonStatus::UpdateFailed);
        assert!(
            eks::health_of(Some(&live), BROKEN, health_issues, |_| String::new())
                .summary
                .starts_with("UPDATE_FAILED: ")
        );
        let active = live_of(&base(), "eks_addon.agent");
        assert_eq!(
            eks::health_of(Some(&active), BROKEN, health_issues, |l| format!(
                "version {}",
                l.addon_version().unwrap_or("unknown")
            )),
            Health {
                ready: true,
                summary: "ACTIVE (version v1.3.8-eksbuild.2)".into()
            }
        );
        let deleting = Addon::builder().status(AddonStatus::Deleting).build();
        assert!(eks::is_deleting(&deleting));
    }
}
