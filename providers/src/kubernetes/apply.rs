//! Generic object operations over any kind the cluster serves, CRDs included:
//! server-side apply (and its dry run), get, delete-and-wait, waiting for readiness,
//! the live diff plans show, and what "ready" means for common kinds.
//!
//! Kinds are resolved to API resources through discovery. Resolutions are cached for
//! the process by `apiVersion` and kind, which is sound because what a GVK maps to
//! (plural, scope) is fixed by the API's definition, not by one cluster; only found
//! kinds are cached, so a CRD installed during an apply is seen at once.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use kube::api::{Api, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::discovery::{ApiResource, Scope};
use serde_json::Value;

use super::connect::Conn;
use super::{yaml_diff, ObjectRef, ADDRESS_ANNOTATION};
use crate::{Ctx, ProviderError};

/// The field manager terrain's server-side applies use.
pub const FIELD_MANAGER: &str = "terrain";

/// An object as the API server holds it after an apply.
#[derive(Debug, Clone, PartialEq)]
pub struct Applied {
    pub object: Value,
}

type Resolution = (ApiResource, bool);

async fn resolve(
    client: &Conn,
    api_version: &str,
    kind: &str,
) -> Result<Option<Resolution>, ProviderError> {
    let key = (api_version.to_string(), kind.to_string());
    if let Some(found) = client
        .discovery()
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&key)
    {
        return Ok(Some(found.clone()));
    }
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind);
    match kube::discovery::pinned_kind(client, &gvk).await {
        Ok((resource, caps)) => {
            let found = (resource, caps.scope == Scope::Namespaced);
            client
                .discovery()
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(key, found.clone());
            Ok(Some(found))
        }
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(None),
        Err(kube::Error::Discovery(_)) => Ok(None),
        Err(e) => Err(api_error(format!("kubernetes discovery {api_version}"), e)),
    }
}

/// `jobs.batch/train` or `pods/redis-leader`, as calls are named in errors.
fn resource_name(resource: &ApiResource, name: &str) -> String {
    if resource.group.is_empty() {
        format!("{}/{name}", resource.plural)
    } else {
        format!("{}.{}/{name}", resource.plural, resource.group)
    }
}

/// The API for the object's resource, scoped to its namespace, and the call name for
/// `verb`; `None` when the kind is not served.
async fn api_for(
    client: &Conn,
    target: &ObjectRef,
    verb: &str,
) -> Result<Option<(Api<DynamicObject>, String, bool)>, ProviderError> {
    let Some((resource, namespaced)) = resolve(client, &target.api_version, &target.kind).await?
    else {
        return Ok(None);
    };
    let api = match (&target.namespace, namespaced) {
        (Some(ns), true) => Api::namespaced_with(client.kube(), ns, &resource),
        (None, true) => Api::default_namespaced_with(client.kube(), &resource),
        (_, false) => Api::all_with(client.kube(), &resource),
    };
    let call = format!("{verb} {}", resource_name(&resource, &target.name));
    Ok(Some((api, call, namespaced)))
}

/// The error for an object whose kind the cluster does not serve.
fn not_served(verb: &str, target: &ObjectRef) -> ProviderError {
    ProviderError::api(
        format!("{verb} {}/{}", target.kind.to_lowercase(), target.name),
        404,
        "NotFound",
        format!(
            "the cluster does not serve kind {} in {} (for {}): is the CustomResourceDefinition that defines it installed?",
            target.kind,
            target.api_version,
            target.describe()
        ),
    )
}

/// Whether the cluster serves `kind` as a namespaced resource; `None` when it does
/// not serve the kind at all.
pub async fn is_namespaced(
    client: &Conn,
    api_version: &str,
    kind: &str,
) -> Result<Option<bool>, ProviderError> {
    Ok(resolve(client, api_version, kind)
        .await?
        .map(|(_, namespaced)| namespaced))
}

/// A kube error as a provider error named by `call`.
pub fn api_error(call: String, e: kube::Error) -> ProviderError {
    match e {
        kube::Error::Api(status) => ProviderError::api(
            call,
            status.code,
            status.reason.clone(),
            status.message.clone(),
        ),
        // Its causes, cleaned of the debug renderings some of them print.
        other => ProviderError::api(call, 0, "", crate::failure::chain(&other)),
    }
}

/// The HTTP status of an API error (0 for transport failures).
pub fn status_of(e: &ProviderError) -> Option<u16> {
    match e {
        ProviderError::Api { status, .. } => Some(*status),
        ProviderError::Conflict { .. } => Some(409),
        _ => None,
    }
}

/// Whether waiting may go on after `e`: the server was briefly unreachable or busy.
fn transient(e: &ProviderError) -> bool {
    matches!(status_of(e), Some(0 | 429 | 500 | 502 | 503 | 504))
}

/// A 409 from server-side apply, turned into an error naming the other managers, the
/// fields they own and how to take them over.
fn conflict(call: String, status: &kube::core::Status, object: &Value) -> ProviderError {
    let causes = status
        .details
        .as_ref()
        .map(|d| d.causes.as_slice())
        .unwrap_or_default();
    let mut managers: Vec<String> = causes
        .iter()
        .filter_map(|c| c.message.split('"').nth(1).map(str::to_string))
        .collect();
    managers.sort();
    managers.dedup();
    let fields: Vec<&str> = causes
        .iter()
        .map(|c| c.field.as_str())
        .filter(|f| !f.is_empty())
        .collect();
    let address = object["metadata"]["annotations"][ADDRESS_ANNOTATION]
        .as_str()
        .unwrap_or("the resource");
    let detail = if managers.is_empty() && fields.is_empty() {
        status.message.clone()
    } else {
        format!(
            "fields owned by another field manager ({}): {}",
            if managers.is_empty() {
                "unnamed".to_string()
            } else {
                managers.join(", ")
            },
            fields.join(", ")
        )
    };
    ProviderError::Conflict {
        call,
        message: format!("{detail}; set force_conflicts = true on {address} to take ownership"),
    }
}

async fn server_side_apply(
    client: &Conn,
    object: &Value,
    force: bool,
    dry_run: bool,
) -> Result<Value, ProviderError> {
    let verb = if dry_run {
        "kubernetes dry-run apply"
    } else {
        "kubernetes apply"
    };
    let target =
        ObjectRef::of(object).map_err(|m| ProviderError::Unsupported(format!("{verb}: {m}")))?;
    let (api, call, namespaced) = api_for(client, &target, verb)
        .await?
        .ok_or_else(|| not_served(verb, &target))?;
    let mut body = object.clone();
    if !namespaced {
        if let Some(meta) = body["metadata"].as_object_mut() {
            meta.remove("namespace");
        }
    }
    let mut params = PatchParams::apply(FIELD_MANAGER);
    params.force = force;
    params.dry_run = dry_run;
    match api.patch(&target.name, &params, &Patch::Apply(&body)).await {
        Ok(live) => to_value(&call, &live),
        Err(kube::Error::Api(status)) if status.code == 409 => Err(conflict(call, &status, object)),
        Err(e) => Err(api_error(call, e)),
    }
}

fn to_value(call: &str, object: &DynamicObject) -> Result<Value, ProviderError> {
    serde_json::to_value(object).map_err(|e| {
        ProviderError::api(
            call.to_string(),
            0,
            "",
            format!("the response does not encode: {e}"),
        )
    })
}

/// Server-side applies `object` (a full manifest) as [`FIELD_MANAGER`], taking over
/// conflicting fields when `force`; returns the object as stored.
///
/// Fails with `Conflict` naming the other managers when fields are owned elsewhere,
/// with a 404 naming the CRD when the kind is not served, and with `Api` otherwise.
pub async fn apply(
    client: &Conn,
    object: &serde_json::Value,
    force: bool,
) -> Result<serde_json::Value, ProviderError> {
    server_side_apply(client, object, force, false).await
}

/// What [`apply`] would store, without storing it.
pub async fn dry_run(
    client: &Conn,
    object: &serde_json::Value,
    force: bool,
) -> Result<serde_json::Value, ProviderError> {
    server_side_apply(client, object, force, true).await
}

/// Applies `objects` in order.
pub async fn apply_all(
    client: &Conn,
    objects: &[Value],
    force: bool,
) -> Result<Vec<Applied>, ProviderError> {
    let mut applied = Vec::with_capacity(objects.len());
    for object in objects {
        applied.push(Applied {
            object: apply(client, object, force).await?,
        });
    }
    Ok(applied)
}

/// The object, or `None` when it (or its kind) does not exist.
pub async fn get(
    client: &Conn,
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    name: &str,
) -> Result<Option<serde_json::Value>, ProviderError> {
    let target = ObjectRef::new(api_version, kind, namespace, name);
    let Some((api, call, _)) = api_for(client, &target, "kubernetes get").await? else {
        return Ok(None);
    };
    match api.get_opt(name).await {
        Ok(Some(object)) => to_value(&call, &object).map(Some),
        Ok(None) => Ok(None),
        Err(e) => Err(api_error(call, e)),
    }
}

/// The object `target` names (see [`get`]).
pub async fn get_ref(client: &Conn, target: &ObjectRef) -> Result<Option<Value>, ProviderError> {
    get(
        client,
        &target.api_version,
        &target.kind,
        target.namespace.as_deref(),
        &target.name,
    )
    .await
}

/// How many objects one page of a list call asks for; [`list`] follows the pages.
pub const LIST_PAGE: u32 = 500;

/// The objects of a kind matching `label_selector` (`app=redis`, or empty for all), in
/// `namespace` (every namespace when `None`); empty when the kind is not served. Pages of
/// [`LIST_PAGE`] objects are followed to the last.
pub async fn list(
    client: &Conn,
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    label_selector: &str,
) -> Result<Vec<Value>, ProviderError> {
    list_paged(
        client,
        api_version,
        kind,
        namespace,
        label_selector,
        LIST_PAGE,
    )
    .await
}

/// [`list`] with pages of `page` objects (`limit`), following `metadata.continue` until
/// the server has no more. Each object is shown as [`get`] shows it: API servers leave
/// `apiVersion` and `kind` out of the items of built-in kinds' lists, so they are put
/// back.
///
/// Fails when a page cannot be read (an expired continue token is a 410), or when the
/// server hands back a continue token it gave before (a loop).
pub async fn list_paged(
    client: &Conn,
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    label_selector: &str,
    page: u32,
) -> Result<Vec<Value>, ProviderError> {
    let Some((resource, namespaced)) = resolve(client, api_version, kind).await? else {
        return Ok(Vec::new());
    };
    let api: Api<DynamicObject> = match namespace {
        Some(ns) if namespaced => Api::namespaced_with(client.kube(), ns, &resource),
        _ => Api::all_with(client.kube(), &resource),
    };
    let call = format!("kubernetes list {}", resource.plural);
    let first = kube::api::ListParams::default()
        .labels(label_selector)
        .limit(page.max(1));
    let mut params = first.clone();
    let mut tokens = std::collections::HashSet::new();
    let mut out = Vec::new();
    loop {
        let listed = api
            .list(&params)
            .await
            .map_err(|e| api_error(call.clone(), e))?;
        for mut object in listed.items {
            if object.types.is_none() {
                object.types = Some(kube::api::TypeMeta {
                    api_version: api_version.to_string(),
                    kind: kind.to_string(),
                });
            }
            out.push(to_value(&call, &object)?);
        }
        let Some(token) = listed.metadata.continue_.filter(|t| !t.is_empty()) else {
            return Ok(out);
        };
        if !tokens.insert(token.clone()) {
            return Err(ProviderError::api(
                call,
                0,
                "",
                "the server repeated a continue token; the list does not end",
            ));
        }
        params = first.clone().continue_token(&token);
    }
}

/// Forwards progress lines to a context, leaving out repeats: waits poll often, and a
/// line that did not change says nothing new.
pub struct Progress<'a> {
    ctx: &'a Ctx,
    last: Mutex<String>,
}

impl<'a> Progress<'a> {
    pub fn new(ctx: &'a Ctx) -> Self {
        Self {
            ctx,
            last: Mutex::new(String::new()),
        }
    }

    /// Reports `line` unless it is the line reported last.
    pub fn report(&self, line: &str) {
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        if *last != line {
            line.clone_into(&mut last);
            self.ctx.progress(line);
        }
    }
}

/// How long to sleep between polls: quick at first (most objects settle fast), then
/// backing off to every 2 s.
fn next_delay(delay: Duration) -> Duration {
    (delay * 3 / 2).min(Duration::from_secs(2))
}

const FIRST_DELAY: Duration = Duration::from_millis(200);
/// How often a long wait says it is still waiting.
const PROGRESS_EVERY: Duration = Duration::from_secs(15);

/// Deletes the object with background propagation (its dependents go after it) and
/// waits until it is gone; `Ok` when it is already gone.
pub async fn delete_and_wait(
    client: &Conn,
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    name: &str,
    ctx: &crate::Ctx,
    timeout: std::time::Duration,
) -> Result<(), ProviderError> {
    let target = ObjectRef::new(api_version, kind, namespace, name);
    let Some((api, call, _)) = api_for(client, &target, "kubernetes delete").await? else {
        return Ok(());
    };
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 404 => return Ok(()),
        Err(e) => return Err(api_error(call, e)),
    }
    ctx.progress(&format!("deleting {}", target.describe()));
    let started = tokio::time::Instant::now();
    let mut delay = FIRST_DELAY;
    let mut reported = started;
    loop {
        match api.get_opt(name).await {
            Ok(None) => return Ok(()),
            Ok(Some(_)) => {}
            Err(e) => {
                let e = api_error(call.clone(), e);
                if !transient(&e) {
                    return Err(e);
                }
            }
        }
        if started.elapsed() >= timeout {
            return Err(ProviderError::Timeout {
                call,
                waiting_for: format!("{} to be deleted", target.describe()),
                after: timeout,
            });
        }
        if reported.elapsed() >= PROGRESS_EVERY {
            reported = tokio::time::Instant::now();
            ctx.progress(&format!(
                "still deleting {} ({}s)",
                target.describe(),
                started.elapsed().as_secs()
            ));
        }
        tokio::time::sleep(delay).await;
        delay = next_delay(delay);
    }
}

/// Deletes the object `target` names and waits until it is gone (see [`delete_and_wait`]).
pub async fn delete_ref(
    client: &Conn,
    target: &ObjectRef,
    ctx: &Ctx,
    timeout: Duration,
) -> Result<(), ProviderError> {
    delete_and_wait(
        client,
        &target.api_version,
        &target.kind,
        target.namespace.as_deref(),
        &target.name,
        ctx,
        timeout,
    )
    .await
}

/// Polls the object until `check` says it is ready (`Ok(true)`) and returns it;
/// `Ok(false)` keeps waiting, `Err(message)` fails for good with `Failed`. The object
/// disappearing, or `timeout` passing, fails too. `what` names what is awaited, for
/// progress and errors (`Job default/train to complete`).
#[allow(clippy::too_many_arguments)] // the shared signature other kinds call
pub async fn wait_until<F>(
    client: &Conn,
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    name: &str,
    ctx: &crate::Ctx,
    timeout: std::time::Duration,
    what: &str,
    check: F,
) -> Result<serde_json::Value, ProviderError>
where
    F: Fn(&serde_json::Value) -> Result<bool, String> + Send,
{
    let target = ObjectRef::new(api_version, kind, namespace, name);
    let verb = "kubernetes wait";
    let (api, call, _) = api_for(client, &target, verb)
        .await?
        .ok_or_else(|| not_served(verb, &target))?;
    ctx.progress(&format!("waiting for {what}"));
    let started = tokio::time::Instant::now();
    let mut reported = started;
    let mut delay = FIRST_DELAY;
    loop {
        match api.get_opt(name).await {
            Ok(Some(object)) => {
                let object = to_value(&call, &object)?;
                match check(&object) {
                    Ok(true) => return Ok(object),
                    Ok(false) => {}
                    Err(message) => return Err(ProviderError::Failed { call, message }),
                }
            }
            Ok(None) => {
                return Err(ProviderError::api(
                    call,
                    404,
                    "NotFound",
                    format!("{} was deleted while waiting for {what}", target.describe()),
                ));
            }
            Err(e) => {
                let e = api_error(call.clone(), e);
                if !transient(&e) {
                    return Err(e);
                }
            }
        }
        if started.elapsed() >= timeout {
            return Err(ProviderError::Timeout {
                call,
                waiting_for: what.to_string(),
                after: timeout,
            });
        }
        if reported.elapsed() >= PROGRESS_EVERY {
            reported = tokio::time::Instant::now();
            ctx.progress(&format!(
                "still waiting for {what} ({}s)",
                started.elapsed().as_secs()
            ));
        }
        tokio::time::sleep(delay).await;
        delay = next_delay(delay);
    }
}

/// The object without what the server adds and the user never sets: bookkeeping
/// metadata and status.
pub fn strip_noise(object: &Value) -> Value {
    let mut out = object.clone();
    if let Some(map) = out.as_object_mut() {
        map.remove("status");
        if let Some(meta) = map.get_mut("metadata").and_then(Value::as_object_mut) {
            for key in [
                "managedFields",
                "resourceVersion",
                "uid",
                "creationTimestamp",
                "generation",
                "selfLink",
            ] {
                meta.remove(key);
            }
            if meta
                .get("annotations")
                .is_some_and(|a| a.as_object().is_some_and(|m| m.is_empty()))
            {
                meta.remove("annotations");
            }
        }
    }
    out
}

/// The unified YAML diff from the live object to the planned one (headers `--- live`
/// and `+++ planned`), after stripping server noise; `None` when they are equal.
pub fn live_diff(live: &serde_json::Value, planned: &serde_json::Value) -> Option<String> {
    yaml_diff::unified(&strip_noise(live), &strip_noise(planned), "live", "planned")
}

/// `live` cut down to the fields `shape` has, for diffing against an object the server
/// could not dry-run (an immutable field changed, so the object is replaced): the
/// fields the server added would otherwise all show as removed.
fn prune_to(live: &Value, shape: &Value) -> Value {
    match (live, shape) {
        (Value::Object(l), Value::Object(s)) => Value::Object(
            l.iter()
                .filter_map(|(k, v)| s.get(k).map(|sv| (k.clone(), prune_to(v, sv))))
                .collect(),
        ),
        (Value::Array(l), Value::Array(s)) if l.len() == s.len() => {
            Value::Array(l.iter().zip(s).map(|(lv, sv)| prune_to(lv, sv)).collect())
        }
        _ => live.clone(),
    }
}

/// `a` with `b`'s fields added (objects merge, anything else from `b`).
fn merge(a: &Value, b: &Value) -> Value {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut out = x.clone();
            for (k, v) in y {
                let merged = out.get(k).map_or_else(|| v.clone(), |old| merge(old, v));
                out.insert(k.clone(), merged);
            }
            Value::Object(out)
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            Value::Array(x.iter().zip(y).map(|(p, q)| merge(p, q)).collect())
        }
        _ => b.clone(),
    }
}

/// What a plan may show of a Secret: its keys, never its values; a changed value shows
/// as changed.
fn redact_secrets(live: &Value, planned: &Value) -> (Value, Value) {
    let secret = |o: &Value| o["kind"] == "Secret";
    if !secret(live) && !secret(planned) {
        return (live.clone(), planned.clone());
    }
    let (mut live, mut planned) = (live.clone(), planned.clone());
    for field in ["data", "stringData"] {
        let before = live[field].clone();
        if let Some(map) = live.get_mut(field).and_then(Value::as_object_mut) {
            for value in map.values_mut() {
                *value = Value::String("(sensitive)".into());
            }
        }
        if let Some(map) = planned.get_mut(field).and_then(Value::as_object_mut) {
            for (key, value) in map.iter_mut() {
                let same = before.get(key.as_str()) == Some(&*value);
                *value = Value::String(
                    if same || before.is_null() {
                        "(sensitive)"
                    } else {
                        "(sensitive, changed)"
                    }
                    .into(),
                );
            }
        }
    }
    (live, planned)
}

/// The plan's live diff for a resource made of `objects` (as they will be applied),
/// which were `prior` before: each object is dry-run and diffed against its live form;
/// prior objects no longer wanted show as removed. Objects the server refuses to
/// dry-run in place (immutable fields, a namespace that does not exist yet) are
/// diffed against their local form instead. `None` when nothing differs.
pub async fn preview(
    client: &Conn,
    prior: &[Value],
    objects: &[Value],
    force: bool,
) -> Result<Option<String>, ProviderError> {
    let refs = |list: &[Value]| -> Result<Vec<ObjectRef>, ProviderError> {
        list.iter()
            .map(|o| {
                ObjectRef::of(o)
                    .map_err(|m| ProviderError::Unsupported(format!("kubernetes preview: {m}")))
            })
            .collect()
    };
    let (prior_refs, refs_now) = (refs(prior)?, refs(objects)?);
    let mut sections = Vec::new();
    for (object, target) in objects.iter().zip(&refs_now) {
        let live = get_ref(client, target).await?.unwrap_or(Value::Null);
        let before = prior_refs
            .iter()
            .position(|r| r == target)
            .map(|i| &prior[i]);
        let (live, planned) = match dry_run(client, object, force).await {
            Ok(planned) => (live, planned),
            Err(e) if matches!(status_of(&e), Some(404 | 422)) => {
                let shape = before.map_or_else(|| object.clone(), |b| merge(b, object));
                (prune_to(&live, &shape), object.clone())
            }
            Err(e) => return Err(e),
        };
        let (live, planned) = redact_secrets(&live, &planned);
        let diff = live_diff(&live, &planned);
        if let Some(d) = diff {
            sections.push(format!("{}:\n{d}", target.describe()));
        }
    }
    for target in prior_refs.iter().filter(|r| !refs_now.contains(r)) {
        if let Some(live) = get_ref(client, target).await? {
            let (live, _) = redact_secrets(&live, &Value::Null);
            if let Some(d) = live_diff(&live, &Value::Null) {
                sections.push(format!("{} (deleted):\n{d}", target.describe()));
            }
        }
    }
    Ok((!sections.is_empty()).then(|| sections.join("\n")))
}

fn condition<'a>(object: &'a Value, kind: &str) -> Option<&'a Value> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

fn condition_true(object: &Value, kind: &str) -> bool {
    condition(object, kind).is_some_and(|c| c["status"] == "True")
}

fn int(value: &Value) -> i64 {
    value.as_i64().unwrap_or(0)
}

/// Whether a rollout (Deployment, StatefulSet) is complete: the controller saw the
/// latest generation and every replica is updated and ready.
fn rolled_out(object: &Value) -> Result<bool, String> {
    let status = &object["status"];
    let want = object["spec"]["replicas"].as_i64().unwrap_or(1);
    if let Some(c) = condition(object, "Progressing") {
        if c["reason"] == "ProgressDeadlineExceeded" {
            return Err(format!(
                "rollout stalled: {}",
                c["message"]
                    .as_str()
                    .unwrap_or("progress deadline exceeded")
            ));
        }
    }
    let observed = int(&status["observedGeneration"]) >= int(&object["metadata"]["generation"]);
    Ok(observed
        && int(&status["updatedReplicas"]) >= want
        && int(&status["readyReplicas"]) >= want
        && int(&status["replicas"]) <= want)
}

/// What "ready" means for `object`'s kind: CRDs Established, Deployments and
/// StatefulSets rolled out, DaemonSets scheduled and ready everywhere, Jobs complete
/// (failed for good is an error), claims Bound, Pods Ready. `None` for kinds that are
/// ready once applied.
pub fn readiness(object: &Value) -> Option<Result<bool, String>> {
    let kind = object["kind"].as_str()?;
    Some(match kind {
        "CustomResourceDefinition" => Ok(condition_true(object, "Established")),
        "Deployment" | "StatefulSet" => rolled_out(object),
        "DaemonSet" => {
            let status = &object["status"];
            let observed =
                int(&status["observedGeneration"]) >= int(&object["metadata"]["generation"]);
            let want = int(&status["desiredNumberScheduled"]);
            Ok(observed
                && int(&status["updatedNumberScheduled"]) >= want
                && int(&status["numberReady"]) >= want)
        }
        "Job" => job_finished(object),
        "PersistentVolumeClaim" => match object["status"]["phase"].as_str() {
            Some("Bound") => Ok(true),
            Some("Lost") => Err("the claim lost its volume".to_string()),
            _ => Ok(false),
        },
        "Pod" => pod_ready(object),
        _ => return None,
    })
}

/// Whether a Job completed; a Job that failed for good is an error with the
/// condition's reason and message.
pub fn job_finished(object: &Value) -> Result<bool, String> {
    if condition_true(object, "Complete") {
        return Ok(true);
    }
    if let Some(c) = condition(object, "Failed").filter(|c| c["status"] == "True") {
        return Err(format!(
            "{}: {}",
            c["reason"].as_str().unwrap_or("Failed"),
            c["message"].as_str().unwrap_or("the job failed")
        ));
    }
    Ok(false)
}

/// Whether a Pod is Ready; one that ended (Succeeded or Failed) never will be.
pub fn pod_ready(object: &Value) -> Result<bool, String> {
    match object["status"]["phase"].as_str() {
        Some("Failed") => Err(format!(
            "the pod failed: {}",
            object["status"]["message"]
                .as_str()
                .or(object["status"]["reason"].as_str())
                .unwrap_or("no reason given")
        )),
        Some("Succeeded") => Err("the pod exited".to_string()),
        _ => Ok(condition_true(object, "Ready")),
    }
}

/// A one-line readiness summary of an object, for progress and health: `1/1 ready`,
/// `Bound`, `Established`.
pub fn summary(object: &Value) -> String {
    let status = &object["status"];
    match object["kind"].as_str().unwrap_or_default() {
        "Deployment" | "StatefulSet" => format!(
            "{}/{} ready",
            int(&status["readyReplicas"]),
            object["spec"]["replicas"].as_i64().unwrap_or(1)
        ),
        "DaemonSet" => format!(
            "{}/{} ready",
            int(&status["numberReady"]),
            int(&status["desiredNumberScheduled"])
        ),
        "CustomResourceDefinition" => if condition_true(object, "Established") {
            "Established"
        } else {
            "not established"
        }
        .to_string(),
        "Pod" => match pod_ready(object) {
            Ok(true) => "Ready".to_string(),
            _ => status["phase"].as_str().unwrap_or("Pending").to_string(),
        },
        "Job" => match job_finished(object) {
            Ok(true) => format!("Complete ({} succeeded)", int(&status["succeeded"])),
            Ok(false) => format!("Running ({} active)", int(&status["active"])),
            Err(reason) => format!("Failed: {}", reason.split(':').next().unwrap_or("Failed")),
        },
        _ => status["phase"].as_str().unwrap_or("applied").to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::response::{StatusCause, StatusDetails};
    use kube::core::Status;
    use serde_json::json;

    #[test]
    fn live_diff_ignores_server_noise() {
        let planned = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "default"}, "data": {"a": "1"}});
        let mut live = planned.clone();
        live["metadata"]["uid"] = json!("u-1");
        live["metadata"]["resourceVersion"] = json!("42");
        live["metadata"]["creationTimestamp"] = json!("2024-01-01T00:00:00Z");
        live["metadata"]["generation"] = json!(3);
        live["metadata"]["managedFields"] = json!([{"manager": "terrain"}]);
        live["status"] = json!({"phase": "Active"});
        assert_eq!(live_diff(&live, &planned), None);

        let mut changed = planned.clone();
        changed["data"]["a"] = json!("2");
        let diff = live_diff(&live, &changed).expect("differs");
        assert!(diff.starts_with("--- live\n+++ planned\n"), "{diff}");
        assert!(diff.contains("-  a: '1'\n+  a: '2'\n"), "{diff}");
        assert!(
            !diff.contains("resourceVersion") && !diff.contains("managedFields"),
            "{diff}"
        );
    }

    #[test]
    fn conflicts_name_managers_fields_and_the_remedy() {
        let status = Status::failure("Apply failed with 1 conflict", "Conflict")
            .with_code(409)
            .with_details(StatusDetails {
                name: "train".into(),
                group: "batch".into(),
                kind: "jobs".into(),
                uid: String::new(),
                causes: vec![
                    StatusCause {
                        reason: "FieldManagerConflict".into(),
                        message: "conflict with \"kubectl-edit\" using batch/v1".into(),
                        field: ".spec.parallelism".into(),
                    },
                    StatusCause {
                        reason: "FieldManagerConflict".into(),
                        message: "conflict with \"kubectl-edit\" using batch/v1".into(),
                        field: ".spec.backoffLimit".into(),
                    },
                ],
                retry_after_seconds: 0,
            });
        let object =
            json!({"metadata": {"annotations": {"terrain.dev/address": "kubernetes_job.train"}}});
        let e = conflict("kubernetes apply jobs.batch/train".into(), &status, &object);
        assert_eq!(
            e.to_string(),
            "kubernetes apply jobs.batch/train failed: 409 Conflict: fields owned by another field manager (kubectl-edit): .spec.parallelism, .spec.backoffLimit; set force_conflicts = true on kubernetes_job.train to take ownership"
        );
    }

    #[test]
    fn api_errors_keep_status_reason_and_message() {
        let e = api_error(
            "kubernetes get pods/x".into(),
            kube::Error::Api(
                Status::failure("pods \"x\" is forbidden", "Forbidden")
                    .with_code(403)
                    .boxed(),
            ),
        );
        assert_eq!(
            e.to_string(),
            "kubernetes get pods/x failed: 403 Forbidden: pods \"x\" is forbidden"
        );
        assert_eq!(status_of(&e), Some(403));
        assert!(!transient(&e));
        assert!(transient(&ProviderError::api(
            "c",
            503,
            "ServiceUnavailable",
            ""
        )));
    }

    #[test]
    fn unserved_kinds_name_the_crd() {
        let e = not_served(
            "kubernetes apply",
            &ObjectRef::new("example.com/v1", "Widget", Some("ml"), "w"),
        );
        let text = e.to_string();
        assert!(
            text.contains("does not serve kind Widget in example.com/v1 (for Widget ml/w)"),
            "{text}"
        );
        assert!(text.contains("CustomResourceDefinition"), "{text}");
    }

    #[test]
    fn readiness_table() {
        let cases: Vec<(Value, Option<Result<bool, String>>)> = vec![
            (json!({"kind": "ConfigMap"}), None),
            (
                json!({"kind": "CustomResourceDefinition", "status": {"conditions": [{"type": "Established", "status": "True"}]}}),
                Some(Ok(true)),
            ),
            (json!({"kind": "CustomResourceDefinition"}), Some(Ok(false))),
            (
                json!({"kind": "Deployment", "metadata": {"generation": 2}, "spec": {"replicas": 2}, "status": {"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2, "readyReplicas": 2}}),
                Some(Ok(true)),
            ),
            (
                json!({"kind": "Deployment", "metadata": {"generation": 3}, "spec": {"replicas": 2}, "status": {"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2, "readyReplicas": 2}}),
                Some(Ok(false)),
            ),
            (
                json!({"kind": "Deployment", "spec": {}, "status": {"conditions": [{"type": "Progressing", "reason": "ProgressDeadlineExceeded", "message": "too slow"}]}}),
                Some(Err("rollout stalled: too slow".into())),
            ),
            (
                json!({"kind": "DaemonSet", "status": {"desiredNumberScheduled": 3, "updatedNumberScheduled": 3, "numberReady": 2}}),
                Some(Ok(false)),
            ),
            (
                json!({"kind": "Job", "status": {"conditions": [{"type": "Complete", "status": "True"}]}}),
                Some(Ok(true)),
            ),
            (
                json!({"kind": "Job", "status": {"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit"}]}}),
                Some(Err(
                    "BackoffLimitExceeded: Job has reached the specified backoff limit".into(),
                )),
            ),
            (
                json!({"kind": "PersistentVolumeClaim", "status": {"phase": "Pending"}}),
                Some(Ok(false)),
            ),
            (
                json!({"kind": "PersistentVolumeClaim", "status": {"phase": "Bound"}}),
                Some(Ok(true)),
            ),
            (
                json!({"kind": "Pod", "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}),
                Some(Ok(true)),
            ),
            (
                json!({"kind": "Pod", "status": {"phase": "Failed", "message": "OOMKilled"}}),
                Some(Err("the pod failed: OOMKilled".into())),
            ),
        ];
        for (object, want) in cases {
            assert_eq!(readiness(&object), want, "{object}");
        }
    }

    #[test]
    fn summaries_are_one_line() {
        let cases = [
            (
                json!({"kind": "Deployment", "spec": {"replicas": 3}, "status": {"readyReplicas": 1}}),
                "1/3 ready",
            ),
            (
                json!({"kind": "Job", "status": {"active": 1}}),
                "Running (1 active)",
            ),
            (
                json!({"kind": "Job", "status": {"succeeded": 2, "conditions": [{"type": "Complete", "status": "True"}]}}),
                "Complete (2 succeeded)",
            ),
            (
                json!({"kind": "Job", "status": {"conditions": [{"type": "Failed", "status": "True", "reason": "DeadlineExceeded", "message": "m"}]}}),
                "Failed: DeadlineExceeded",
            ),
            (
                json!({"kind": "PersistentVolumeClaim", "status": {"phase": "Bound"}}),
                "Bound",
            ),
            (json!({"kind": "ConfigMap"}), "applied"),
        ];
        for (object, want) in cases {
            assert_eq!(summary(&object), want, "{object}");
        }
    }

    #[test]
    fn secrets_show_keys_never_values() {
        let live = json!({"kind": "Secret", "data": {"A": "b2xk", "B": "c2FtZQ=="}});
        let planned =
            json!({"kind": "Secret", "data": {"A": "bmV3", "B": "c2FtZQ==", "C": "YWRkZWQ="}});
        let (l, p) = redact_secrets(&live, &planned);
        assert_eq!(
            l,
            json!({"kind": "Secret", "data": {"A": "(sensitive)", "B": "(sensitive)"}})
        );
        assert_eq!(
            p,
            json!({"kind": "Secret", "data": {"A": "(sensitive, changed)", "B": "(sensitive)", "C": "(sensitive, changed)"}})
        );
        let diff = live_diff(&l, &p).expect("differs");
        assert!(!diff.contains("bmV3") && !diff.contains("b2xk"), "{diff}");
        let config = json!({"kind": "ConfigMap", "data": {"A": "x"}});
        assert_eq!(redact_secrets(&config, &config), (config.clone(), config));
    }

    #[test]
    fn progress_leaves_out_repeats() {
        let seen = std::sync::Arc::new(Mutex::new(Vec::new()));
        let sink = std::sync::Arc::clone(&seen);
        let ctx = Ctx::new("kubernetes_job.w", json!({})).with_reporter(std::sync::Arc::new(
            move |m: &str| {
                sink.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(m.to_string());
            },
        ));
        let progress = Progress::new(&ctx);
        for line in [
            "running: 1 active",
            "running: 1 active",
            "running: 0 active",
            "running: 1 active",
        ] {
            progress.report(line);
        }
        let seen = seen.lock().unwrap_or_else(PoisonError::into_inner).clone();
        assert_eq!(
            seen,
            [
                "running: 1 active",
                "running: 0 active",
                "running: 1 active"
            ]
        );
    }

    #[test]
    fn pruning_keeps_only_planned_fields() {
        let live = json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "a", "imagePullPolicy": "IfNotPresent"}], "dnsPolicy": "ClusterFirst"}}}, "status": {}});
        let shape =
            json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "b"}]}}}});
        assert_eq!(
            prune_to(&live, &shape),
            json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "a"}]}}}})
        );
        assert_eq!(
            merge(&json!({"a": {"b": 1}}), &json!({"a": {"c": 2}, "d": 3})),
            json!({"a": {"b": 1, "c": 2}, "d": 3})
        );
    }
}
