//! What the EKS kinds (`eks_cluster`, `eks_node_group`, `eks_capability`) share: a
//! Describe answer with a missing object as `None`, polling an object's status until it
//! is ACTIVE or gone, creating with adoption of an earlier attempt's object, following an
//! update to its end (DescribeUpdate), tag and label diffs, the one-line form of EKS's
//! issues and errors, and health from a status.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::time::Duration;

use aws_sdk_eks::types::{Capability, Cluster, Nodegroup, Update};
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_runtime_api::client::result::SdkError;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;

use serde_json::Value;

use super::{catalog, config, is_not_found, is_ours, not_ours, sdk_error, user_tags, wait_for};
use crate::{Ctx, Health, Invalid, ProviderError};

pub(crate) const DESCRIBE_UPDATE: &str = "eks:DescribeUpdate";
pub(crate) const TAG: &str = "eks:TagResource";
pub(crate) const UNTAG: &str = "eks:UntagResource";
/// The error code of a create whose name is taken, or a delete EKS cannot start yet.
pub(crate) const IN_USE: &str = "ResourceInUseException";

/// EKS's own waiters poll every 30 s; half that notices the end sooner.
pub(crate) const POLL: Duration = Duration::from_secs(15);

/// An EKS object with a lifecycle status and tags (a cluster, a node group, a capability).
pub(crate) trait EksObject {
    /// The status as EKS spells it (`ACTIVE`, `DELETING`, …).
    fn status_str(&self) -> Option<&str>;
    /// The tags the object carries, terrain's own included.
    fn tag_list(&self) -> Option<&HashMap<String, String>>;
}

impl EksObject for Cluster {
    fn status_str(&self) -> Option<&str> {
        self.status().map(|s| s.as_str())
    }
    fn tag_list(&self) -> Option<&HashMap<String, String>> {
        self.tags()
    }
}

impl EksObject for Nodegroup {
    fn status_str(&self) -> Option<&str> {
        self.status().map(|s| s.as_str())
    }
    fn tag_list(&self) -> Option<&HashMap<String, String>> {
        self.tags()
    }
}

impl EksObject for Capability {
    fn status_str(&self) -> Option<&str> {
        self.status().map(|s| s.as_str())
    }
    fn tag_list(&self) -> Option<&HashMap<String, String>> {
        self.tags()
    }
}

/// Whether the object is being torn down: as good as gone for planning.
pub(crate) fn is_deleting<T: EksObject>(live: &T) -> bool {
    live.status_str() == Some("DELETING")
}

// ---------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------

/// The API error's code, when it is one.
pub(crate) fn code_of(e: &ProviderError) -> &str {
    match e {
        ProviderError::Api { code, .. } => code,
        _ => "",
    }
}

/// A Describe call's answer, a missing object (or a missing parent) as `Ok(None)`.
///
/// Fails with the call's error for any other failure.
pub(crate) fn found<T, E>(
    call: &str,
    answer: Result<T, SdkError<E, HttpResponse>>,
) -> Result<Option<T>, ProviderError>
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    match answer {
        Ok(out) => Ok(Some(out)),
        Err(e) => {
            let e = sdk_error(call, e);
            if is_not_found(&e) {
                Ok(None)
            } else {
                Err(e)
            }
        }
    }
}

/// `(cluster, name)` of the id `CLUSTER/NAME` of a part of a cluster (`shape` says
/// it for the kind: `CLUSTER/NODEGROUP`).
pub(crate) fn parts<'i>(
    id: &'i str,
    kind: &str,
    shape: &str,
) -> Result<(&'i str, &'i str), ProviderError> {
    id.split_once('/')
        .filter(|(c, n)| !c.is_empty() && !n.is_empty() && !n.contains('/'))
        .ok_or_else(|| {
            ProviderError::Unsupported(format!("{kind} id {id:?} is not of the form {shape}"))
        })
}

/// The error for an object that vanished in the middle of an update.
pub(crate) fn gone(call: &str, what: &str) -> ProviderError {
    ProviderError::api(
        call,
        404,
        "ResourceNotFoundException",
        format!("{what} is gone"),
    )
}

/// EKS issues or update errors as one line, `CODE: message (resource ids)` each, or
/// `none` when there are none.
pub(crate) fn problems_line<'a>(
    problems: impl IntoIterator<Item = (Option<&'a str>, Option<&'a str>, &'a [String])>,
    none: &str,
) -> String {
    let lines: Vec<String> = problems
        .into_iter()
        .map(|(code, message, ids)| {
            let ids = ids.join(", ");
            format!(
                "{}: {}{}",
                code.unwrap_or("Unknown"),
                message.unwrap_or_default(),
                if ids.is_empty() {
                    String::new()
                } else {
                    format!(" ({ids})")
                }
            )
        })
        .collect();
    if lines.is_empty() {
        none.to_string()
    } else {
        lines.join("; ")
    }
}

/// The errors of a failed update, one line.
fn update_errors(update: &Update) -> String {
    problems_line(
        update.errors().iter().map(|e| {
            (
                e.error_code().map(|c| c.as_str()),
                e.error_message(),
                e.resource_ids(),
            )
        }),
        "EKS gave no reason",
    )
}

// ---------------------------------------------------------------------------------
// Lists and tags
// ---------------------------------------------------------------------------------

/// Whether two lists hold the same items, in any order.
pub(crate) fn same_set(a: &[String], b: &[String]) -> bool {
    a.iter().collect::<BTreeSet<_>>() == b.iter().collect::<BTreeSet<_>>()
}

/// A live list as the stack wrote it: in the prior's order when it holds the same
/// items (EKS does not keep the order of subnets, CIDRs, log types or instance types).
pub(crate) fn in_prior_order(live: Vec<String>, prior: Option<&Vec<String>>) -> Vec<String> {
    match prior {
        Some(p) if same_set(p, &live) => p.clone(),
        _ => live,
    }
}

/// The SDK's tag (or label) map, ordered; empty when absent.
pub(crate) fn tag_map(tags: Option<&HashMap<String, String>>) -> BTreeMap<String, String> {
    tags.map(|t| t.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default()
}

/// A tag (or label) map as the SDK takes it.
pub(crate) fn hash_map(tags: BTreeMap<String, String>) -> HashMap<String, String> {
    tags.into_iter().collect()
}

/// Entries to add or change and keys to remove, going from `prior` to `spec`: the diff
/// of tags (user tags only: terrain's own are never touched) and of node labels.
pub fn tag_changes(
    prior: &BTreeMap<String, String>,
    spec: &BTreeMap<String, String>,
) -> (BTreeMap<String, String>, Vec<String>) {
    let set = spec
        .iter()
        .filter(|(k, v)| prior.get(*k) != Some(*v))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let remove = prior
        .keys()
        .filter(|k| !spec.contains_key(*k))
        .cloned()
        .collect();
    (set, remove)
}

/// Brings the user tags of the resource `arn` from those of `live` to `spec`
/// (TagResource, UntagResource); terrain's own tags stay.
///
/// Fails with the first call EKS refuses.
pub(crate) async fn retag<T: EksObject>(
    eks: &aws_sdk_eks::Client,
    arn: &str,
    live: &T,
    spec: &BTreeMap<String, String>,
) -> Result<(), ProviderError> {
    let (set, remove) = tag_changes(&user_tags(&tag_map(live.tag_list())), spec);
    if !set.is_empty() {
        eks.tag_resource()
            .resource_arn(arn)
            .set_tags(Some(hash_map(set)))
            .send()
            .await
            .map_err(|e| sdk_error(TAG, e))?;
    }
    if !remove.is_empty() {
        eks.untag_resource()
            .resource_arn(arn)
            .set_tag_keys(Some(remove))
            .send()
            .await
            .map_err(|e| sdk_error(UNTAG, e))?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------
// Creating, waiting, health
// ---------------------------------------------------------------------------------

/// The object a create makes, for its messages.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Creating<'a> {
    /// The create call (`eks:CreateCluster`).
    pub call: &'a str,
    /// What it is called in messages: `cluster`, `node group`.
    pub noun: &'a str,
    pub name: &'a str,
    /// The id `terrain import` takes.
    pub id: &'a str,
    pub kind: &'a str,
}

/// Sends a create (`send` makes the SDK call); when EKS answers that the name is in use, describes what holds it:
/// an object still being deleted is waited out (`wait_gone`) and the create sent once
/// more, an object this address made (an earlier attempt whose answer was lost) is
/// adopted, anything else is refused as not ours.
///
/// Fails with the create's error, a describe's or the wait's, or the refusal.
pub(crate) async fn create_or_adopt<T, O, E, S, SF, D, DF, G, GF>(
    ctx: &Ctx,
    what: &Creating<'_>,
    mut send: S,
    describe: D,
    wait_gone: G,
) -> Result<(), ProviderError>
where
    T: EksObject,
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    S: FnMut() -> SF,
    SF: Future<Output = Result<O, SdkError<E, HttpResponse>>>,
    D: Fn() -> DF,
    DF: Future<Output = Result<Option<T>, ProviderError>>,
    G: Fn() -> GF,
    GF: Future<Output = Result<(), ProviderError>>,
{
    let Creating {
        call,
        noun,
        name,
        id,
        kind,
    } = *what;
    // A second attempt only after waiting out a same-named object being deleted.
    let mut attempt = 0;
    let mut propagation = RolePropagation::new();
    while attempt < 2 {
        attempt += 1;
        match send().await.map_err(|e| sdk_error(call, e)) {
            Ok(_) => break,
            Err(e) if propagation.retry(ctx, &e).await => {
                attempt -= 1;
                continue;
            }
            Err(e) if code_of(&e) == IN_USE => {
                // Our earlier attempt (lost response, interrupted run) or someone else's.
                let live = describe().await?.ok_or(e)?;
                if is_deleting(&live) && attempt == 1 {
                    ctx.progress(&format!(
                        "waiting for the previous {noun} {name} to finish deleting"
                    ));
                    wait_gone().await?;
                    continue;
                }
                if !is_ours(&tag_map(live.tag_list()), &ctx.address) {
                    return Err(not_ours(
                        call,
                        &format!("EKS {noun}"),
                        id,
                        kind,
                        &ctx.address,
                    ));
                }
                ctx.progress(&format!("adopting the {noun} an earlier attempt created"));
                break;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// How long a role just created may take to be usable by EKS: IAM is eventually
/// consistent, and a create naming a role made seconds before can be refused as if
/// the role did not exist or did not trust EKS.
pub(crate) const ROLE_PROPAGATION: Duration = Duration::from_secs(60);

/// Retries of a create refused because its role is not visible to EKS yet: bounded by
/// [`ROLE_PROPAGATION`], backing off from one second, each said in a progress line.
/// Any other refusal, and this one past the bound, is not retried.
pub(crate) struct RolePropagation {
    started: tokio::time::Instant,
    delay: Duration,
}

impl RolePropagation {
    pub(crate) fn new() -> Self {
        Self {
            started: tokio::time::Instant::now(),
            delay: Duration::from_secs(1),
        }
    }

    /// Whether `e` is that refusal and time remains: then waits and says so.
    pub(crate) async fn retry(&mut self, ctx: &Ctx, e: &ProviderError) -> bool {
        if !is_role_not_ready(e) || self.started.elapsed() + self.delay > ROLE_PROPAGATION {
            return false;
        }
        ctx.progress(&format!(
            "EKS cannot assume the role yet (IAM takes a few seconds to make a new role usable); retrying in {}s",
            self.delay.as_secs()
        ));
        tokio::time::sleep(self.delay).await;
        self.delay = (self.delay * 2).min(Duration::from_secs(10));
        true
    }
}

/// Whether EKS refused a create because the role it names cannot be assumed yet: an
/// `InvalidParameterException` about the role, as EKS words it for a role IAM has not
/// propagated (the same words as for a role that does not exist, hence the bound).
pub(crate) fn is_role_not_ready(e: &ProviderError) -> bool {
    let ProviderError::Api { code, message, .. } = e else {
        return false;
    };
    code == "InvalidParameterException"
        && message.contains("Role")
        && (message.contains("could not be assumed")
            || message.contains("does not exist")
            || message.contains("trusted entity"))
}

/// A delete EKS refused with `refusal` (in use): fine when the object is already being
/// deleted (an earlier attempt), so the caller waits for the end.
///
/// Fails with `refusal` otherwise, or with the describe's error.
pub(crate) async fn already_deleting<T, D, DF>(
    refusal: ProviderError,
    describe: D,
) -> Result<(), ProviderError>
where
    T: EksObject,
    D: FnOnce() -> DF,
    DF: Future<Output = Result<Option<T>, ProviderError>>,
{
    if describe().await?.is_some_and(|live| is_deleting(&live)) {
        Ok(())
    } else {
        Err(refusal)
    }
}

/// Polls `describe` until the object is ACTIVE and returns it. `failed` turns a status
/// the object will not leave for ACTIVE into the reason; an object not visible yet
/// (right after its create) is waited for.
///
/// Fails with `failed`'s reason, a describe's error or a timeout.
pub(crate) async fn wait_active<T, D, DF, F>(
    ctx: &Ctx,
    call: &str,
    waiting_for: &str,
    timeout: Duration,
    describe: D,
    failed: F,
) -> Result<T, ProviderError>
where
    T: EksObject,
    D: Fn() -> DF,
    DF: Future<Output = Result<Option<T>, ProviderError>>,
    F: Fn(&T, &str) -> Option<String>,
{
    let (describe, failed) = (&describe, &failed);
    wait_for(ctx, call, waiting_for, timeout, POLL, move || async move {
        let Some(live) = describe().await? else {
            return Ok(None);
        };
        match live.status_str() {
            Some("ACTIVE") => Ok(Some(live)),
            Some(status) => match failed(&live, status) {
                Some(message) => Err(ProviderError::Failed {
                    call: call.to_string(),
                    message,
                }),
                None => Ok(None),
            },
            None => Ok(None),
        }
    })
    .await
}

/// Polls `describe` until the object no longer exists. `failed` turns a status that
/// says the deletion failed into the reason.
///
/// Fails with `failed`'s reason, a describe's error or a timeout.
pub(crate) async fn wait_gone<T, D, DF, F>(
    ctx: &Ctx,
    call: &str,
    waiting_for: &str,
    timeout: Duration,
    describe: D,
    failed: F,
) -> Result<(), ProviderError>
where
    T: EksObject,
    D: Fn() -> DF,
    DF: Future<Output = Result<Option<T>, ProviderError>>,
    F: Fn(&T, &str) -> Option<String>,
{
    let (describe, failed) = (&describe, &failed);
    wait_for(ctx, call, waiting_for, timeout, POLL, move || async move {
        let Some(live) = describe().await? else {
            return Ok(Some(()));
        };
        match live.status_str().and_then(|status| failed(&live, status)) {
            Some(message) => Err(ProviderError::Failed {
                call: call.to_string(),
                message,
            }),
            None => Ok(None),
        }
    })
    .await
}

/// Statuses a node group or capability does not leave by itself.
pub(crate) const BROKEN: &[&str] = &["CREATE_FAILED", "DEGRADED", "DELETE_FAILED"];

/// A part of a cluster EKS creates and deletes on its own (a node group, a capability),
/// as the waits' messages name it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Part<'a> {
    /// `node group`, `capability`.
    pub noun: &'a str,
    pub cluster: &'a str,
    pub name: &'a str,
}

/// Waits until the part is ACTIVE; fails with its health issues (`issues`) when it
/// reaches a state it does not leave by itself ([`BROKEN`]) or is being deleted.
pub(crate) async fn wait_part_active<T, D, DF>(
    ctx: &Ctx,
    part: Part<'_>,
    (call, waiting_for): (&str, &str),
    timeout: Duration,
    describe: D,
    issues: fn(&T) -> String,
) -> Result<T, ProviderError>
where
    T: EksObject,
    D: Fn() -> DF,
    DF: Future<Output = Result<Option<T>, ProviderError>>,
{
    let Part {
        noun,
        cluster,
        name,
    } = part;
    wait_active(ctx, call, waiting_for, timeout, describe, |live, status| {
        (BROKEN.contains(&status) || status == "DELETING").then(|| {
            format!(
                "{noun} {name} of cluster {cluster} is {status}: {}",
                issues(live)
            )
        })
    })
    .await
}

/// Waits until the part no longer exists; fails with its health issues when its
/// deletion failed.
pub(crate) async fn wait_part_gone<T, D, DF>(
    ctx: &Ctx,
    part: Part<'_>,
    call: &str,
    timeout: Duration,
    describe: D,
    issues: fn(&T) -> String,
) -> Result<(), ProviderError>
where
    T: EksObject,
    D: Fn() -> DF,
    DF: Future<Output = Result<Option<T>, ProviderError>>,
{
    let Part {
        noun,
        cluster,
        name,
    } = part;
    wait_gone(
        ctx,
        call,
        &format!("deleting {noun} {name} of EKS cluster {cluster}"),
        timeout,
        describe,
        |live, status| {
            (status == "DELETE_FAILED").then(|| {
                format!(
                    "{noun} {name} of cluster {cluster} could not be deleted: {}",
                    issues(live)
                )
            })
        },
    )
    .await
}

/// Which update to follow and how: the cluster (and node group or capability) it belongs
/// to, the call that started it, the progress message and how long to wait.
#[derive(Debug, Clone, Copy)]
pub(crate) struct UpdateWait<'a> {
    pub cluster: &'a str,
    pub nodegroup: Option<&'a str>,
    pub capability: Option<&'a str>,
    pub call: &'a str,
    pub waiting_for: &'a str,
    pub timeout: Duration,
}

/// Follows an update EKS started (UpdateClusterConfig, UpdateClusterVersion,
/// UpdateNodegroupConfig, UpdateCapability) to its end: `Ok` once Successful, `Failed`
/// with EKS's errors when it failed or was cancelled. An answer without an update (some
/// emulators answer with the cluster instead) has nothing to follow.
pub(crate) async fn wait_update(
    ctx: &Ctx,
    eks: &aws_sdk_eks::Client,
    update: Option<&Update>,
    how: &UpdateWait<'_>,
) -> Result<(), ProviderError> {
    let UpdateWait {
        cluster,
        nodegroup,
        capability,
        call,
        waiting_for,
        timeout,
    } = *how;
    let Some(update) = update else {
        return Ok(());
    };
    let check = |u: &Update| -> Result<Option<()>, ProviderError> {
        match u.status().map(|s| s.as_str()) {
            Some("Successful") => Ok(Some(())),
            Some(s @ ("Failed" | "Cancelled")) => Err(ProviderError::Failed {
                call: call.to_string(),
                message: format!(
                    "update {} {}: {}",
                    u.id().unwrap_or_default(),
                    s.to_lowercase(),
                    update_errors(u)
                ),
            }),
            _ => Ok(None),
        }
    };
    if check(update)?.is_some() {
        return Ok(());
    }
    let id = update.id().unwrap_or_default().to_string();
    let id = id.as_str();
    wait_for(ctx, call, waiting_for, timeout, POLL, move || async move {
        let out = eks
            .describe_update()
            .name(cluster)
            .update_id(id)
            .set_nodegroup_name(nodegroup.map(str::to_string))
            .set_capability_name(capability.map(str::to_string))
            .send()
            .await
            .map_err(|e| sdk_error(DESCRIBE_UPDATE, e))?;
        match out.update() {
            Some(u) => check(u),
            None => Ok(None),
        }
    })
    .await
}

/// Health from a live object (`None` when it is missing): ready when ACTIVE, with
/// `active`'s detail (`ACTIVE (Kubernetes 1.31)`); a `broken` status with `issues`.
pub(crate) fn health_of<T: EksObject>(
    live: Option<&T>,
    broken: &[&str],
    issues: impl Fn(&T) -> String,
    active: impl Fn(&T) -> String,
) -> Health {
    let Some(live) = live else {
        return Health {
            ready: false,
            summary: "missing".into(),
        };
    };
    match live.status_str().unwrap_or("UNKNOWN") {
        "ACTIVE" => Health {
            ready: true,
            summary: format!("ACTIVE ({})", active(live)),
        },
        status if broken.contains(&status) => Health {
            ready: false,
            summary: format!("{status}: {}", issues(live)),
        },
        other => Health {
            ready: false,
            summary: other.to_string(),
        },
    }
}

// ---------------------------------------------------------------------------------
// Validation
// ---------------------------------------------------------------------------------

/// Problems with subnet ids, at `subnet_ids.N`: malformed or listed twice.
pub(crate) fn check_subnet_ids(ids: &[String], out: &mut Vec<Invalid>) {
    let mut seen = BTreeSet::new();
    for (i, id) in ids.iter().enumerate() {
        if let Err(m) = catalog::check_subnet_id(id) {
            out.push(Invalid::at(&format!("subnet_ids.{i}"), m));
        } else if !seen.insert(id) {
            out.push(Invalid::at(
                &format!("subnet_ids.{i}"),
                format!("{id} is listed twice"),
            ));
        }
    }
}

/// Problems with the user tags (at `tags`) and the provider's table (at the root).
pub(crate) fn check_tags_and_config(
    tags: &BTreeMap<String, String>,
    config: &Value,
    out: &mut Vec<Invalid>,
) {
    if let Err(m) = catalog::check_tags(tags) {
        out.push(Invalid::at("tags", m));
    }
    if let Err(e) = config::AwsConfig::from_ctx(config) {
        out.push(Invalid::at("", e.to_string()));
    }
}

/// Test helpers both EKS kinds use.
#[cfg(test)]
pub(crate) mod testing {
    use serde_json::Value;

    use crate::Kind;

    /// Checks a validation table: each case's spec is valid (empty path) or has a
    /// problem at `path` whose message contains `want`.
    pub(crate) fn assert_validation<K: Kind>(cases: Vec<(K::Spec, &str, &str)>, config: &Value) {
        for (s, path, want) in cases {
            let problems = K::validate(&s, config);
            if path.is_empty() {
                assert!(problems.is_empty(), "{s:?}: {problems:?}");
                continue;
            }
            assert!(
                problems
                    .iter()
                    .any(|p| p.path.join(".") == path && p.message.contains(want)),
                "want {path}: {want}, got {problems:?}"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    /// IAM is eventually consistent: a role made seconds before may be refused.
    #[tokio::test(start_paused = true)]
    async fn a_role_not_yet_visible_to_eks_is_retried_for_a_bounded_time() {
        let refused = ProviderError::api(
            "eks:CreateCluster",
            400,
            "InvalidParameterException",
            "Role with arn: arn:aws:iam::123456789012:role/c, could not be assumed because it does not exist or the trusted entity is not correct",
        );
        let other = ProviderError::api(
            "eks:CreateCluster",
            400,
            "InvalidParameterException",
            "Subnets specified must be in at least two different AZs",
        );
        assert!(is_role_not_ready(&refused));
        assert!(!is_role_not_ready(&other));
        let said = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let sink = said.clone();
        let ctx = Ctx::new("eks_cluster.ml", serde_json::json!({})).with_reporter(
            std::sync::Arc::new(move |m: &str| sink.lock().expect("lock").push(m.to_string())),
        );
        let mut retry = RolePropagation::new();
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

    use super::*;
    use aws_sdk_eks::types::{ClusterStatus, ErrorCode, ErrorDetail, NodegroupStatus};

    #[test]
    fn tag_diffs() {
        let prior = BTreeMap::from([
            ("a".to_string(), "1".to_string()),
            ("b".to_string(), "2".to_string()),
        ]);
        let spec = BTreeMap::from([
            ("a".to_string(), "9".to_string()),
            ("c".to_string(), "3".to_string()),
        ]);
        let (set, remove) = tag_changes(&prior, &spec);
        assert_eq!(
            set,
            BTreeMap::from([
                ("a".to_string(), "9".to_string()),
                ("c".to_string(), "3".to_string())
            ])
        );
        assert_eq!(remove, vec!["b".to_string()]);
        assert_eq!(tag_changes(&prior, &prior), (BTreeMap::new(), vec![]));
    }

    #[test]
    fn lists_keep_the_prior_order_only_for_the_same_items() {
        let prior = vec!["a".to_string(), "b".to_string()];
        let live = vec!["b".to_string(), "a".to_string()];
        assert_eq!(in_prior_order(live.clone(), Some(&prior)), prior);
        assert_eq!(in_prior_order(live.clone(), None), live);
        let other = vec!["b".to_string(), "c".to_string()];
        assert_eq!(in_prior_order(other.clone(), Some(&prior)), other);
    }

    #[test]
    fn update_errors_are_one_line() {
        let failed = Update::builder()
            .errors(
                ErrorDetail::builder()
                    .error_code(ErrorCode::SubnetNotFound)
                    .error_message("no such subnet")
                    .resource_ids("subnet-0aaaaaaaaaaaaaaaa")
                    .build(),
            )
            .errors(ErrorDetail::builder().error_message("try again").build())
            .build();
        assert_eq!(
            update_errors(&failed),
            "SubnetNotFound: no such subnet (subnet-0aaaaaaaaaaaaaaaa); Unknown: try again"
        );
        assert_eq!(
            update_errors(&Update::builder().build()),
            "EKS gave no reason"
        );
    }

    #[test]
    fn health_follows_the_status() {
        let issues = |_: &Cluster| "NodeCreationFailure: no capacity".to_string();
        let active = |_: &Cluster| "Kubernetes 1.31".to_string();
        let of = |status: ClusterStatus| {
            health_of(
                Some(&Cluster::builder().status(status).build()),
                &["FAILED"],
                issues,
                active,
            )
        };
        assert_eq!(
            of(ClusterStatus::Active),
            Health {
                ready: true,
                summary: "ACTIVE (Kubernetes 1.31)".into()
            }
        );
        assert_eq!(
            of(ClusterStatus::Failed),
            Health {
                ready: false,
                summary: "FAILED: NodeCreationFailure: no capacity".into()
            }
        );
        assert_eq!(
            of(ClusterStatus::Updating),
            Health {
                ready: false,
                summary: "UPDATING".into()
            }
        );
        assert_eq!(
            health_of::<Cluster>(None, &["FAILED"], issues, active).summary,
            "missing"
        );
        let deleting = Nodegroup::builder()
            .status(NodegroupStatus::Deleting)
            .build();
        assert!(is_deleting(&deleting));
        assert!(!is_deleting(&Nodegroup::builder().build()));
    }

    #[test]
    fn codes_and_gone_errors() {
        let e = ProviderError::api("eks:DescribeCluster", 404, IN_USE, "");
        assert_eq!(code_of(&e), IN_USE);
        assert_eq!(code_of(&ProviderError::Unsupported("x".into())), "");
        let g = gone("eks:DescribeNodegroup", "node group ml/gpu");
        assert!(is_not_found(&g));
        assert!(g.to_string().contains("node group ml/gpu is gone"), "{g}");
    }
}
