//! What the ACK SageMaker kinds (`sagemaker_pipeline`, `sagemaker_pipeline_execution`)
//! share: the ACK custom resources' API version and object shape, the CRD check with its
//! install hint, server-side apply, reading the controller's conditions and waiting on
//! them, getting, deleting and health-checking an object by id, the validation of the
//! fields both kinds have, and the SageMaker client the cross-checks use.
//!
//! The ACK controller reports through conditions: `ACK.ResourceSynced` (done),
//! `ACK.Recoverable` (an error it retries; reported as progress) and `ACK.Terminal` (an
//! error it will not retry; a failure).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use super::signed::Signed;
use crate::kubernetes::apply;
use crate::kubernetes::{
    check_cluster, check_dns_label, check_dns_subdomain, connect, delete_owned, list_batch,
    list_key, needs_cluster, ownership, parse_id, refuse_strangers, with_managed_label, ObjectRef,
    Ownership,
};
use crate::{Ctx, Health, Invalid, Kind, Live, ProviderError};

/// The API group and version of the ACK SageMaker custom resources.
pub const API_VERSION: &str = "sagemaker.services.k8s.aws/v1alpha1";
/// How long deleting an object may take: the controller deletes (or stops) the SageMaker
/// resource before it lifts its finalizer.
const DELETE_TIMEOUT: Duration = Duration::from_secs(15 * 60);

/// A terrain kind made of one ACK SageMaker object, identified as
/// `sagemaker.services.k8s.aws/v1alpha1/<AckKind>/<namespace>/<name>`.
pub trait AckKind: Kind {
    /// The custom resource's kind (`Pipeline`, `PipelineExecution`).
    const ACK_KIND: &'static str;

    /// The cluster reference in `spec`.
    fn cluster(spec: &Self::Spec) -> &Value;
    /// The resource as the live `object` shows it, under `id`; what the object does not
    /// hold comes from `prior`.
    fn live(id: &str, object: &Value, prior: &Self::Spec) -> Live<Self>
    where
        Self: Sized;
    /// The health the live `object` shows.
    fn health_of(object: &Value) -> Health;
}

/// The API group the ACK SageMaker kinds belong to, which an ACK capability or the
/// controller's manifests provide.
pub const GROUP: &str = "sagemaker.services.k8s.aws";

/// What an object of ACK kind `kind` needs its cluster to serve.
pub fn needs(kind: &str) -> crate::ApiGroups {
    crate::ApiGroups {
        provides: Vec::new(),
        needs: vec![crate::ApiKind {
            group: GROUP.to_string(),
            api_version: API_VERSION.to_string(),
            kind: kind.to_string(),
        }],
        ..crate::ApiGroups::default()
    }
}

/// `serde` default of the `namespace` field.
pub fn default_namespace() -> String {
    "default".into()
}

/// The shape of `K`'s ids, for the error on one that does not fit.
fn id_shape<K: AckKind>() -> String {
    format!("{API_VERSION}/{}/NAMESPACE/NAME", K::ACK_KIND)
}

/// The `K` object `name` in `namespace`.
pub fn target<K: AckKind>(namespace: &str, name: &str) -> ObjectRef {
    ObjectRef::new(API_VERSION, K::ACK_KIND, Some(namespace), name)
}

/// The `K` object `name` in `namespace` with `body` as its spec, labelled as terrain's
/// (without the address annotation).
pub fn object<K: AckKind>(namespace: &str, name: &str, body: Value) -> Value {
    json!({
        "apiVersion": API_VERSION,
        "kind": K::ACK_KIND,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": with_managed_label(&BTreeMap::new()),
        },
        "spec": body,
    })
}

/// The namespace and name a live object shows.
pub fn placement_of(object: &Value) -> (String, String) {
    let metadata = &object["metadata"];
    (
        metadata["namespace"]
            .as_str()
            .unwrap_or("default")
            .to_string(),
        metadata["name"].as_str().unwrap_or_default().to_string(),
    )
}

/// `pairs` as the list of `{key_field: key, value_field: value}` ACK writes for maps
/// (tags, pipeline parameters).
pub fn pair_list(pairs: &BTreeMap<String, String>, key_field: &str, value_field: &str) -> Value {
    Value::Array(
        pairs
            .iter()
            .map(|(k, v)| json!({key_field: k, value_field: v}))
            .collect(),
    )
}

/// The map a [`pair_list`] holds; entries without a string key are skipped, a missing
/// value reads as empty.
pub fn pairs_of(list: &Value, key_field: &str, value_field: &str) -> BTreeMap<String, String> {
    list.as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|p| {
                    Some((
                        p[key_field].as_str()?.to_string(),
                        p[value_field].as_str().unwrap_or_default().to_string(),
                    ))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// What the ACK controller says about an object, from its conditions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AckState {
    /// `ACK.ResourceSynced` is True: the AWS resource matches the object.
    Synced,
    /// `ACK.Terminal` is True: an error the controller will not retry.
    Terminal(String),
    /// `ACK.Recoverable` is True: an error the controller retries.
    Recoverable(String),
    /// Nothing decisive yet, with what there is to say.
    Pending(String),
}

fn condition<'a>(object: &'a Value, kind: &str) -> Option<&'a Value> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

fn condition_text(c: &Value) -> String {
    let message = c["message"].as_str().unwrap_or_default();
    let reason = c["reason"].as_str().unwrap_or_default();
    match (reason.is_empty(), message.is_empty()) {
        (_, false) => message.to_string(),
        (false, true) => reason.to_string(),
        (true, true) => "no message".to_string(),
    }
}

/// The controller's verdict on `object`.
pub fn ack_state(object: &Value) -> AckState {
    let is_true = |c: &&Value| c["status"] == "True";
    if let Some(c) = condition(object, "ACK.Terminal").filter(is_true) {
        return AckState::Terminal(condition_text(c));
    }
    if let Some(c) = condition(object, "ACK.Recoverable").filter(is_true) {
        return AckState::Recoverable(condition_text(c));
    }
    match condition(object, "ACK.ResourceSynced") {
        Some(c) if c["status"] == "True" => AckState::Synced,
        Some(c) => AckState::Pending(format!(
            "ACK.ResourceSynced is {}: {}",
            c["status"].as_str().unwrap_or("Unknown"),
            condition_text(c)
        )),
        None => AckState::Pending(
            "no ACK conditions yet (is the ACK SageMaker controller running?)".into(),
        ),
    }
}

/// The ARN the controller recorded, once the AWS resource exists.
pub fn arn_of(object: &Value) -> Option<&str> {
    object["status"]["ackResourceMetadata"]["arn"]
        .as_str()
        .filter(|a| !a.is_empty())
}

/// The wait error for an object the controller gave up on (`ACK.Terminal`).
pub fn gave_up(target: &ObjectRef, message: &str) -> String {
    format!(
        "the ACK SageMaker controller gave up on {} (ACK.Terminal): {message}",
        target.describe()
    )
}

/// The progress line for an error the controller retries (`ACK.Recoverable`).
pub fn retrying(message: &str) -> String {
    format!("ACK.Recoverable, the controller retries: {message}")
}

/// Polls `target` until `check` says done (`Ok(true)`) or fails (`Err`), for at most
/// `timeout`; `what` names what is waited for in progress and timeout messages.
///
/// Fails when `check` fails, the object cannot be read or `timeout` passes.
pub async fn wait_for<F>(
    client: &crate::kubernetes::connect::Conn,
    target: &ObjectRef,
    ctx: &Ctx,
    timeout: Duration,
    what: &str,
    check: F,
) -> Result<Value, ProviderError>
where
    F: Fn(&Value) -> Result<bool, String> + Send,
{
    apply::wait_until(
        client,
        &target.api_version,
        &target.kind,
        target.namespace.as_deref(),
        &target.name,
        ctx,
        timeout,
        what,
        check,
    )
    .await
}

/// The error for a cluster that does not serve the ACK kind `kind`.
fn not_installed(kind: &str) -> ProviderError {
    let plural = format!("{}s", kind.to_lowercase());
    ProviderError::api(
        format!("kubernetes apply {plural}.sagemaker.services.k8s.aws"),
        404,
        "NotFound",
        format!(
            "no CustomResourceDefinition serves {kind} in {API_VERSION}: nothing runs the ACK SageMaker controller on this cluster; add an `eks_capability` with type = \"ACK\" on it (EKS runs the controller and installs its CRDs), or install the controller and its CRDs with a `kubernetes_manifest`"
        ),
    )
}

/// Fails with the install hint when the cluster does not serve the ACK kind `kind`.
pub async fn require_crd(
    client: &crate::kubernetes::connect::Conn,
    kind: &str,
) -> Result<(), ProviderError> {
    match apply::is_namespaced(client, API_VERSION, kind).await? {
        Some(_) => Ok(()),
        None => Err(not_installed(kind)),
    }
}

/// Server-side applies an ACK object, taking back fields changed by hand. A 404 is
/// looked into: discovery answers are cached per process by kind, not per cluster, so a
/// cluster without the CRDs passes [`require_crd`] once another cluster had them.
pub async fn apply_ack(
    client: &crate::kubernetes::connect::Conn,
    object: &Value,
) -> Result<Value, ProviderError> {
    match apply::apply(client, object, true).await {
        Err(e) if apply::status_of(&e) == Some(404) => {
            let kind = object["kind"].as_str().unwrap_or_default();
            let gvk =
                kube::api::GroupVersionKind::gvk("sagemaker.services.k8s.aws", "v1alpha1", kind);
            match kube::discovery::pinned_kind(client, &gvk).await {
                Ok(_) => Err(e),
                Err(_) => Err(not_installed(kind)),
            }
        }
        other => other,
    }
}

/// Applies `object` (already marked as `ctx`'s) on `cluster` and returns the client and
/// the object as applied. With `refuse`, an existing object that is not terrain's is
/// left alone and an error.
///
/// Fails when the cluster cannot be reached, does not serve `K`'s CRD, holds a stranger
/// (with `refuse`) or refuses the object.
pub async fn submit<K: AckKind>(
    ctx: &Ctx,
    cluster: &Value,
    object: &Value,
    refuse: bool,
) -> Result<(connect::Conn, Value), ProviderError> {
    let client = connect::client(ctx, cluster).await?;
    require_crd(&client, K::ACK_KIND).await?;
    if refuse {
        refuse_strangers(&client, std::slice::from_ref(object), K::KIND, &ctx.address).await?;
    }
    let applied = apply_ack(&client, object).await?;
    Ok((client, applied))
}

/// The live object of `id` with the client that read it, unless it is gone or another
/// resource's.
///
/// Fails when `id` is not `K`'s or the cluster cannot be asked.
pub async fn live_object<K: AckKind>(
    ctx: &Ctx,
    cluster: &Value,
    id: &str,
) -> Result<Option<(connect::Conn, Value)>, ProviderError> {
    let refs = parse_id(K::KIND, id, &id_shape::<K>())?;
    let client = connect::client(ctx, cluster).await?;
    let Some(object) = apply::get_ref(&client, &refs[0]).await? else {
        return Ok(None);
    };
    if matches!(ownership(&object, &ctx.address), Ownership::Other(_)) {
        return Ok(None);
    }
    Ok(Some((client, object)))
}

/// `Kind::read` of an ACK kind: the live resource of `id`, `None` when it is gone.
///
/// Fails without `prior` (the cluster is needed), or as [`live_object`] does.
pub async fn read<K: AckKind>(
    ctx: &Ctx,
    id: &str,
    prior: Option<&K::Spec>,
) -> Result<Option<Live<K>>, ProviderError> {
    let prior = prior.ok_or_else(|| needs_cluster(K::KIND))?;
    Ok(live_object::<K>(ctx, K::cluster(prior), id)
        .await?
        .map(|(_, object)| K::live(id, &object, prior)))
}

/// What reading `id` with a list takes: the cluster (from `prior`) and the object.
/// `None` for an id that is not `K`'s or names no namespace (read alone).
fn list_plan<K: AckKind>(id: &str, prior: &K::Spec) -> Option<(Value, ObjectRef)> {
    let target = parse_id(K::KIND, id, &id_shape::<K>())
        .ok()?
        .into_iter()
        .next()?;
    target.namespace.as_ref()?;
    Some((K::cluster(prior).clone(), target))
}

/// `Kind::batch_key` of an ACK kind: the `K` objects of one namespace on one cluster are
/// read with one list call.
pub fn batch_key<K: AckKind>(id: &str, prior: Option<&K::Spec>) -> Option<String> {
    let (cluster, target) = list_plan::<K>(id, prior?)?;
    list_key(&cluster, &target)
}

/// `Kind::read_batch` of an ACK kind: one list of the namespace's `K` objects with
/// terrain's label (`app.kubernetes.io/managed-by=terrain`), each shown as [`read`]
/// shows it. An object the list does not show (an import without the label) or that is
/// marked for another resource is answered `None` (see
/// [`crate::kubernetes::list_batch`]), and the engine reads it alone.
///
/// Fails when the cluster cannot be reached or the list call fails.
pub async fn read_batch<K: AckKind>(
    ctx: &Ctx,
    items: &[(String, Option<K::Spec>)],
) -> Result<Vec<Option<Live<K>>>, ProviderError> {
    let listed = list_batch(ctx, items, list_plan::<K>, K::KIND).await?;
    Ok(listed
        .into_iter()
        .zip(items)
        .map(|(object, (id, prior))| Some(K::live(id, &object?, prior.as_ref()?)))
        .collect())
}

/// `Kind::delete` of an ACK kind: deletes the object of `id` and waits until it is gone
/// (the controller removes the SageMaker side first).
///
/// Fails when `id` is not `K`'s, without `prior`, or when the delete fails or times out.
pub async fn delete<K: AckKind>(
    ctx: &Ctx,
    id: &str,
    prior: Option<&K::Spec>,
) -> Result<(), ProviderError> {
    let refs = parse_id(K::KIND, id, &id_shape::<K>())?;
    let prior = prior.ok_or_else(|| needs_cluster(K::KIND))?;
    delete_owned(K::cluster(prior), &refs, false, ctx, DELETE_TIMEOUT).await
}

/// `Kind::health` of an ACK kind: [`AckKind::health_of`] the live object, or `missing`.
///
/// Fails without `prior`, or as [`live_object`] does.
pub async fn health<K: AckKind>(
    ctx: &Ctx,
    id: &str,
    prior: Option<&K::Spec>,
) -> Result<Option<Health>, ProviderError> {
    let prior = prior.ok_or_else(|| needs_cluster(K::KIND))?;
    Ok(Some(
        match live_object::<K>(ctx, K::cluster(prior), id).await? {
            Some((_, object)) => K::health_of(&object),
            None => Health {
                ready: false,
                summary: "missing".into(),
            },
        },
    ))
}

/// Checks a SageMaker resource name (`[a-zA-Z0-9](-*[a-zA-Z0-9])*`, at most `max`
/// characters): pipelines, display names.
pub fn check_sagemaker_name(name: &str, max: usize) -> Result<(), String> {
    let alnum = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    let ok = !name.is_empty()
        && name.len() <= max
        && alnum(name.chars().next())
        && alnum(name.chars().last())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{name:?} is not a SageMaker name: 1 to {max} letters, digits and '-', starting and ending with a letter or digit"
        ))
    }
}

/// Checks where the object goes: the cluster reference, the namespace and the name.
pub fn check_placement(cluster: &Value, namespace: &str, name: &str, out: &mut Vec<Invalid>) {
    check_cluster(cluster, out);
    if let Err(m) = check_dns_label(namespace) {
        out.push(Invalid::at("namespace", m));
    }
    if let Err(m) = check_dns_subdomain(name) {
        out.push(Invalid::at("name", m));
    }
}

/// Checks the fields naming a SageMaker pipeline or run: `pipeline_name` (the name
/// itself), a display name of at most `display_max` characters and a description.
pub fn check_names(
    pipeline_name: &str,
    display_name: Option<&str>,
    display_max: usize,
    description: Option<&str>,
    out: &mut Vec<Invalid>,
) {
    if let Err(m) = check_sagemaker_name(pipeline_name, 256) {
        out.push(Invalid::at("pipeline_name", m));
    }
    if let Some(Err(m)) = display_name.map(|d| check_sagemaker_name(d, display_max)) {
        out.push(Invalid::at("display_name", m));
    }
    if description.is_some_and(|d| d.chars().count() > 3072) {
        out.push(Invalid::at("description", "at most 3072 characters"));
    }
}

/// Checks `max_parallel_steps` (parallelismConfiguration.maxParallelExecutionSteps).
pub fn check_max_parallel_steps(steps: Option<i64>, out: &mut Vec<Invalid>) {
    if steps.is_some_and(|n| n < 1) {
        out.push(Invalid::at("max_parallel_steps", "must be 1 or more"));
    }
}

/// The run's signed client the cross-checks of what the controller reports call
/// SageMaker with (`client.json11(&signed::SAGEMAKER, &region, …)`), and the region it
/// calls.
///
/// Each call is tried up to the table's `max_attempts`, as the SDK client this replaces
/// was: a cross-check runs once the controller has done its work, and failing it fails
/// the apply, whereas the capacity check that stops at two attempts may be skipped.
///
/// Fails when the provider table is invalid, names no region or finds no credentials.
pub async fn sagemaker(ctx: &Ctx) -> Result<(Arc<Signed>, String), ProviderError> {
    let client = Signed::for_run(ctx, "cross-check SageMaker", u32::MAX).await?;
    let region = client.region().to_string();
    Ok((client, region))
}

/// Turns a not-found answer to `call` about what the controller reports (`reported`,
/// e.g. `the run <arn>`) into the error that says the controller works elsewhere; other
/// errors pass unchanged.
pub fn unknown_to_sagemaker(
    call: &str,
    reported: &str,
    region: &str,
    e: ProviderError,
) -> ProviderError {
    if !super::is_not_found(&e) {
        return e;
    }
    ProviderError::Failed {
        call: call.into(),
        message: format!(
            "the ACK controller reports {reported}, but SageMaker in region {region} does not know it ({e}); the controller works in another account or region than [providers.aws]"
        ),
    }
}

/// Test helpers both ACK kinds' unit tests use.
#[cfg(test)]
pub(crate) mod testing {
    use serde_json::Value;

    use crate::Kind;

    /// Runs a validation table: each `(spec, path, message)` wants a problem at `path`
    /// whose message contains `message`, or no problem at all when `message` is empty.
    pub(crate) fn assert_validation<K: Kind>(cases: Vec<(K::Spec, &str, &str)>) {
        for (spec, path, message) in cases {
            let problems = K::validate(&spec, &Value::Null);
            if message.is_empty() {
                assert!(problems.is_empty(), "{problems:?}");
            } else {
                assert!(
                    problems
                        .iter()
                        .any(|p| p.path.join(".") == path && p.message.contains(message)),
                    "want {path}: {message}, got {problems:?}"
                );
            }
        }
    }
}

/// Checks objects against a CRD's `openAPIV3Schema`: types, required fields, and fields
/// the schema does not list (errors, as the API server's pruning would drop them).
#[cfg(test)]
pub(crate) mod crd_check {
    use serde_json::Value;

    /// The `openAPIV3Schema` of the official CRD in `file` (under
    /// `contracts/ack-sagemaker/`).
    pub(crate) fn schema(file: &str) -> Value {
        let text = terrain_contracts::text(&format!("ack-sagemaker/{file}"));
        let crd: Value = serde_yaml_ng::from_str(&text).expect("the CRD is YAML");
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
    }

    /// Every place `value` breaks `schema`, as `path: problem`.
    pub(crate) fn problems(schema: &Value, value: &Value) -> Vec<String> {
        let mut out = Vec::new();
        walk(schema, value, "", &mut out);
        out
    }

    fn walk(schema: &Value, value: &Value, at: &str, out: &mut Vec<String>) {
        let ty = schema["type"].as_str().unwrap_or("");
        let fits = match ty {
            "object" => value.is_object(),
            "array" => value.is_array(),
            "string" => value.is_string(),
            "integer" => value.is_i64() || value.is_u64(),
            "number" => value.is_number(),
            "boolean" => value.is_boolean(),
            _ => true,
        };
        if !fits {
            out.push(format!("{at}: expected {ty}, got {value}"));
            return;
        }
        if let Some(required) = schema["required"].as_array() {
            for r in required.iter().filter_map(Value::as_str) {
                if value.get(r).is_none() {
                    out.push(format!("{at}: missing required {r}"));
                }
            }
        }
        match value {
            Value::Object(map) => {
                let properties = schema["properties"].as_object();
                let open = schema["x-kubernetes-preserve-unknown-fields"] == true
                    || schema.get("additionalProperties").is_some();
                for (key, child) in map {
                    match properties.and_then(|p| p.get(key)) {
                        Some(sub) => walk(sub, child, &format!("{at}.{key}"), out),
                        None if open || properties.is_none() => {}
                        None => out.push(format!("{at}.{key}: unknown field")),
                    }
                }
            }
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    walk(&schema["items"], item, &format!("{at}[{i}]"), out);
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aws::sagemaker_pipeline::SageMakerPipeline;
    use crate::aws::sagemaker_pipeline_execution::SageMakerPipelineExecution;

    #[test]
    fn conditions_decide_the_state() {
        let with = |conditions: Value| json!({"status": {"conditions": conditions}});
        let cases = [
            (
                json!({}),
                AckState::Pending(
                    "no ACK conditions yet (is the ACK SageMaker controller running?)".into(),
                ),
            ),
            (
                with(json!([{"type": "ACK.ResourceSynced", "status": "True"}])),
                AckState::Synced,
            ),
            (
                with(
                    json!([{"type": "ACK.ResourceSynced", "status": "False", "message": "Resource not synced"}]),
                ),
                AckState::Pending("ACK.ResourceSynced is False: Resource not synced".into()),
            ),
            (
                with(
                    json!([{"type": "ACK.ResourceSynced", "status": "Unknown", "reason": "Reconciling"}]),
                ),
                AckState::Pending("ACK.ResourceSynced is Unknown: Reconciling".into()),
            ),
            (
                with(
                    json!([{"type": "ACK.ResourceSynced", "status": "False"}, {"type": "ACK.Recoverable", "status": "True", "message": "ThrottlingException: slow down"}]),
                ),
                AckState::Recoverable("ThrottlingException: slow down".into()),
            ),
            (
                with(
                    json!([{"type": "ACK.ResourceSynced", "status": "True"}, {"type": "ACK.Terminal", "status": "True", "message": "ValidationException: bad definition"}]),
                ),
                AckState::Terminal("ValidationException: bad definition".into()),
            ),
            (
                with(json!([{"type": "ACK.Terminal", "status": "True"}])),
                AckState::Terminal("no message".into()),
            ),
            (
                with(
                    json!([{"type": "ACK.Terminal", "status": "False", "message": "old"}, {"type": "ACK.ResourceSynced", "status": "True"}]),
                ),
                AckState::Synced,
            ),
        ];
        for (object, want) in cases {
            assert_eq!(ack_state(&object), want, "{object}");
        }
        assert_eq!(
            arn_of(&json!({"status": {"ackResourceMetadata": {"arn": ""}}})),
            None
        );
        assert_eq!(
            arn_of(&json!({"status": {"ackResourceMetadata": {"arn": "arn:x"}}})),
            Some("arn:x")
        );
    }

    #[test]
    fn sagemaker_name_rules() {
        for ok in ["a", "abalone-train", "A--b", &"x".repeat(256)] {
            assert_eq!(check_sagemaker_name(ok, 256), Ok(()), "{ok}");
        }
        for bad in ["", "a_b", "a-", "-a", "a.b", &"x".repeat(257)] {
            assert!(check_sagemaker_name(bad, 256).is_err(), "{bad}");
        }
        assert!(check_sagemaker_name(&"x".repeat(83), 82).is_err());
    }

    #[test]
    fn ids_and_objects_of_each_kind() {
        assert_eq!(
            id_shape::<SageMakerPipeline>(),
            "sagemaker.services.k8s.aws/v1alpha1/Pipeline/NAMESPACE/NAME"
        );
        assert_eq!(
            id_shape::<SageMakerPipelineExecution>(),
            "sagemaker.services.k8s.aws/v1alpha1/PipelineExecution/NAMESPACE/NAME"
        );
        let object = object::<SageMakerPipelineExecution>("ml", "run-1", json!({"a": 1}));
        assert_eq!(
            object,
            json!({
                "apiVersion": "sagemaker.services.k8s.aws/v1alpha1",
                "kind": "PipelineExecution",
                "metadata": {"name": "run-1", "namespace": "ml", "labels": {"app.kubernetes.io/managed-by": "terrain"}},
                "spec": {"a": 1},
            })
        );
        assert_eq!(placement_of(&object), ("ml".into(), "run-1".into()));
        assert_eq!(
            placement_of(&json!({"metadata": {"name": "x"}})),
            ("default".into(), "x".into())
        );
        assert_eq!(
            target::<SageMakerPipeline>("ml", "train").describe(),
            "Pipeline ml/train"
        );
    }

    #[test]
    fn pair_lists_read_back() {
        let pairs = BTreeMap::from([
            ("a".to_string(), "1".to_string()),
            ("b".to_string(), String::new()),
        ]);
        let list = pair_list(&pairs, "name", "value");
        assert_eq!(
            list,
            json!([{"name": "a", "value": "1"}, {"name": "b", "value": ""}])
        );
        assert_eq!(pairs_of(&list, "name", "value"), pairs);
        assert_eq!(
            pairs_of(&json!([{"key": "k"}, {"value": "v"}]), "key", "value"),
            BTreeMap::from([("k".to_string(), String::new())])
        );
        assert_eq!(pairs_of(&Value::Null, "key", "value"), BTreeMap::new());
    }

    #[test]
    fn a_missing_crd_says_how_to_provide_the_controller() {
        let e = not_installed("PipelineExecution").to_string();
        assert!(
            e.starts_with("kubernetes apply pipelineexecutions.sagemaker.services.k8s.aws"),
            "{e}"
        );
        assert!(
            e.contains("add an `eks_capability` with type = \"ACK\" on it")
                && e.contains("with a `kubernetes_manifest`"),
            "{e}"
        );
        assert!(e.contains("no CustomResourceDefinition serves PipelineExecution in sagemaker.services.k8s.aws/v1alpha1"), "{e}");
    }

    #[test]
    fn an_unknown_resource_means_another_account_or_region() {
        let missing = ProviderError::api(
            "sagemaker:DescribePipeline",
            404,
            "ResourceNotFound",
            "no such pipeline",
        );
        let e = unknown_to_sagemaker(
            "sagemaker:DescribePipeline",
            "the run arn:x",
            "eu-west-1",
            missing,
        );
        let text = e.to_string();
        assert!(text.contains("the ACK controller reports the run arn:x, but SageMaker in region eu-west-1 does not know it"), "{text}");
        let other = ProviderError::api("sagemaker:DescribePipeline", 403, "AccessDenied", "no");
        let kept = unknown_to_sagemaker("sagemaker:DescribePipeline", "x", "r", other).to_string();
        assert!(kept.contains("AccessDenied"), "{kept}");
        assert!(!kept.contains("does not know it"), "{kept}");
    }
}
