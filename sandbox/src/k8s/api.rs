//! The request handlers of an emulated Kubernetes API server: routing a path to a
//! resource type, get/list (label and field selectors, paging), create, replace, the
//! patch flavours, server-side apply, delete with propagation, the status and scale
//! subresources, dry runs, pod logs, and the first half of watches, exec and
//! port-forward (validated here under the state lock, streamed by `server.rs`).
//! Transport-neutral, so every rule can be unit-tested without a socket.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use axum::http::Method;
use base64::Engine as _;
use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use super::apply::{self, Writer};
use super::discovery::{self, ResourceType};
use super::status::{self, Cause, StatusError};
use super::store::timestamp;
use crate::common::ids::new_uid;
use super::stream::ExecTarget;
use super::table::{self, Include};
use super::{controllers, defaults, environment, volumes, ClusterState, ObjKey, SettleCtx};
use crate::http::{percent_decode, ApiResponse, Body};

/// Watches without `timeoutSeconds` end after this long, as the API server's default.
const DEFAULT_WATCH_TIMEOUT: Duration = Duration::from_secs(1800);

/// Namespaces that cannot be deleted.
const PROTECTED_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public"];

/// One Kubernetes API request, as the handlers see it.
#[derive(Debug, Clone)]
pub(crate) struct KubeRequest {
    pub method: Method,
    /// The request path, still percent-encoded, starting with `/`.
    pub path: String,
    pub query: Vec<(String, String)>,
    pub content_type: Option<String>,
    pub accept: Option<String>,
    pub user_agent: Option<String>,
    pub body: Vec<u8>,
}

impl KubeRequest {
    pub(crate) fn param(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    fn params(&self, name: &str) -> Vec<&str> {
        self.query
            .iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    fn flag(&self, name: &str) -> bool {
        matches!(self.param(name), Some("true" | "1" | "True"))
    }

    fn accept(&self) -> &str {
        self.accept.as_deref().unwrap_or("")
    }

    /// The field manager of a write: `fieldManager`, else the client's User-Agent name.
    fn manager(&self) -> String {
        if let Some(m) = self.param("fieldManager").filter(|m| !m.is_empty()) {
            return m.to_string();
        }
        self.user_agent
            .as_deref()
            .and_then(|ua| ua.split('/').next())
            .map(str::trim)
            .filter(|m| !m.is_empty())
            .unwrap_or("unknown")
            .to_string()
    }

    /// The body as JSON (or YAML, for apply patches).
    fn body_value(&self) -> Result<Value, StatusError> {
        if self.body.iter().all(u8::is_ascii_whitespace) {
            return Err(StatusError::bad_request("the request body is empty"));
        }
        match serde_json::from_slice::<Value>(&self.body) {
            Ok(v) => Ok(v),
            Err(json_err) => {
                let is_yaml = self
                    .content_type
                    .as_deref()
                    .is_some_and(|c| c.contains("yaml"));
                if !is_yaml {
                    return Err(StatusError::bad_request(format!(
                        "the request body is not valid JSON: {json_err}"
                    )));
                }
                serde_yaml_ng::from_slice::<Value>(&self.body).map_err(|e| {
                    StatusError::bad_request(format!("the request body is not valid YAML: {e}"))
                })
            }
        }
    }
}

/// What a request turned into: an answer, or a stream for `server.rs` to run.
#[derive(Debug)]
pub(crate) enum Outcome {
    Done(ApiResponse),
    Watch(Box<Watch>, Vec<Value>),
    FollowLog(LogFollow),
    Exec(ExecTarget),
    PortForward(Vec<(u16, Option<SocketAddr>)>),
}

impl From<StatusError> for Outcome {
    fn from(e: StatusError) -> Outcome {
        Outcome::Done(e.response())
    }
}

fn ok(status: u16, value: Value) -> Outcome {
    Outcome::Done(ApiResponse::json(status, value))
}

/// A path resolved to a resource.
#[derive(Debug, Clone)]
struct Target {
    rt: ResourceType,
    /// `None`: every namespace (lists and watches of namespaced types).
    namespace: Option<String>,
    name: Option<String>,
    sub: Option<String>,
    /// The deprecated `/watch/` path form.
    watch_path: bool,
}

impl Target {
    fn ns(&self) -> &str {
        self.namespace.as_deref().unwrap_or("")
    }

    fn name(&self) -> &str {
        self.name.as_deref().unwrap_or("")
    }

    fn key(&self) -> ObjKey {
        self.rt.key(self.ns(), self.name())
    }
}

fn segments(path: &str) -> Vec<String> {
    path.trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .map(percent_decode)
        .collect()
}

/// Serves one request against one cluster (already settled by the caller).
pub(crate) fn handle(cluster: &mut ClusterState, req: &KubeRequest, ctx: &SettleCtx) -> Outcome {
    let segs = segments(&req.path);
    let seg: Vec<&str> = segs.iter().map(String::as_str).collect();
    let get_only = |value: Option<Value>| -> Outcome {
        if req.method != Method::GET {
            return StatusError::method_not_allowed(req.method.as_str()).into();
        }
        match value {
            Some(v) => ok(200, v),
            None => StatusError::no_route().into(),
        }
    };
    // fieldValidation=Strict: the schemas behind /openapi reject undeclared fields first.
    if let Some(refused) = super::openapi::strict_field_check(cluster, req, &seg) {
        return Outcome::Done(refused);
    }
    match seg.as_slice() {
        [] => get_only(Some(
            json!({"paths": ["/api", "/api/v1", "/apis", "/healthz", "/livez", "/openapi/v2", "/openapi/v3", "/readyz", "/version"]}),
        )),
        ["healthz" | "livez" | "readyz"] => Outcome::Done(ApiResponse {
            status: 200,
            body: Body::Bytes {
                content_type: "text/plain; charset=utf-8".into(),
                data: b"ok".to_vec(),
            },
            retry_after: None,
        }),
        ["version"] => get_only(Some(discovery::version_info(cluster))),
        ["api"] => {
            if discovery::wants_aggregated(req.accept()) {
                return aggregated(discovery::aggregated(cluster, true), req);
            }
            get_only(Some(discovery::core_versions(cluster)))
        }
        ["apis"] => {
            if discovery::wants_aggregated(req.accept()) {
                return aggregated(discovery::aggregated(cluster, false), req);
            }
            get_only(Some(discovery::group_list(cluster)))
        }
        ["apis", group] => get_only(discovery::group(cluster, group)),
        ["api", "v1"] => get_only(discovery::resource_list(cluster, "", "v1")),
        ["apis", group, version] => get_only(discovery::resource_list(cluster, group, version)),
        ["openapi", rest @ ..] => Outcome::Done(super::openapi::respond(
            cluster,
            &req.method,
            req.accept(),
            rest,
        )),
        ["api", "v1", rest @ ..] => resource(cluster, req, ctx, "", "v1", rest),
        ["apis", group, version, rest @ ..] => resource(cluster, req, ctx, group, version, rest),
        _ => StatusError::no_route().into(),
    }
}

fn aggregated(value: Value, req: &KubeRequest) -> Outcome {
    if req.method != Method::GET {
        return StatusError::method_not_allowed(req.method.as_str()).into();
    }
    Outcome::Done(ApiResponse {
        status: 200,
        body: Body::Bytes {
            content_type: discovery::AGGREGATED_CONTENT_TYPE.into(),
            data: value.to_string().into_bytes(),
        },
        retry_after: None,
    })
}

fn resolve(cluster: &ClusterState, group: &str, version: &str, rest: &[&str]) -> Option<Target> {
    let (watch_path, rest) = match rest {
        ["watch", rest @ ..] => (true, rest),
        _ => (false, rest),
    };
    if let ["namespaces", ns, plural, more @ ..] = rest {
        if let Some(rt) = discovery::find(cluster, group, version, plural).filter(|r| r.namespaced)
        {
            if more.len() > 2 {
                return None;
            }
            return Some(Target {
                rt,
                namespace: Some(ns.to_string()),
                name: more.first().map(|s| s.to_string()),
                sub: more.get(1).map(|s| s.to_string()),
                watch_path,
            });
        }
    }
    let (plural, more) = rest.split_first()?;
    if more.len() > 2 {
        return None;
    }
    let rt = discovery::find(cluster, group, version, plural)?;
    if rt.namespaced && !more.is_empty() {
        // A namespaced object is only reachable under its namespace.
        return None;
    }
    Some(Target {
        rt,
        namespace: None,
        name: more.first().map(|s| s.to_string()),
        sub: more.get(1).map(|s| s.to_string()),
        watch_path,
    })
}

fn resource(
    cluster: &mut ClusterState,
    req: &KubeRequest,
    ctx: &SettleCtx,
    group: &str,
    version: &str,
    rest: &[&str],
) -> Outcome {
    let Some(t) = resolve(cluster, group, version, rest) else {
        return StatusError::no_route().into();
    };
    if let Some(v) = req.param("dryRun").filter(|v| *v != "All") {
        return StatusError::bad_request(format!(
            "invalid dry run value {v:?}: the only supported value is \"All\""
        ))
        .into();
    }
    let result = match (t.sub.as_deref(), t.name.is_some()) {
        (None, false) => match req.method {
            Method::GET if t.watch_path || req.flag("watch") => {
                return match Watch::start(cluster, &t, req, ctx.now) {
                    Ok((w, initial)) => Outcome::Watch(Box::new(w), initial),
                    Err(e) => e.into(),
                }
            }
            Method::GET => list(cluster, &t, req, ctx.now),
            Method::POST if !t.rt.namespaced || t.namespace.is_some() => {
                create(cluster, &t, req, ctx.now)
            }
            Method::DELETE => delete_collection(cluster, &t, req, ctx.now),
            _ => Err(StatusError::method_not_allowed(req.method.as_str())),
        },
        (None, true) => match req.method {
            Method::GET if t.watch_path => {
                let mut t = t.clone();
                let name = t.name.take().unwrap_or_default();
                let mut req = req.clone();
                req.query
                    .push(("fieldSelector".into(), format!("metadata.name={name}")));
                return match Watch::start(cluster, &t, &req, ctx.now) {
                    Ok((w, initial)) => Outcome::Watch(Box::new(w), initial),
                    Err(e) => e.into(),
                };
            }
            Method::GET => get(cluster, &t, req, ctx.now),
            Method::PUT => replace(cluster, &t, req, ctx.now),
            Method::PATCH => patch(cluster, &t, req, ctx.now),
            Method::DELETE => delete(cluster, &t, req, ctx.now),
            _ => Err(StatusError::method_not_allowed(req.method.as_str())),
        },
        (Some("status"), true) if t.rt.has("status") => match req.method {
            Method::GET => get(cluster, &t, req, ctx.now),
            Method::PUT => replace(cluster, &t, req, ctx.now),
            Method::PATCH => patch(cluster, &t, req, ctx.now),
            _ => Err(StatusError::method_not_allowed(req.method.as_str())),
        },
        (Some("scale"), true) if t.rt.scale.is_some() => scale(cluster, &t, req, ctx.now),
        (Some("log"), true) if t.rt.has("log") => {
            if req.method != Method::GET {
                Err(StatusError::method_not_allowed(req.method.as_str()))
            } else {
                return logs(cluster, &t, req, ctx.now);
            }
        }
        (Some("exec"), true) if t.rt.has("exec") => return exec(cluster, &t, req, ctx),
        (Some("portforward"), true) if t.rt.has("portforward") => {
            return portforward(cluster, &t, req, ctx)
        }
        _ => Err(StatusError::no_route()),
    };
    match result {
        Ok(outcome) => outcome,
        Err(e) => e.into(),
    }
}

// ---------------------------------------------------------------- views and storage

/// An event as events.k8s.io/v1 names its fields, against the core/v1 name it is stored under.
const EVENT_FIELDS: &[(&str, &str)] = &[
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("reportingComponent", "reportingController"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
];

fn rename_fields(obj: &mut Value, to_v1: bool) {
    let Some(m) = obj.as_object_mut() else {
        return;
    };
    for (core, v1) in EVENT_FIELDS {
        let (from, to) = if to_v1 { (core, v1) } else { (v1, core) };
        if let Some(v) = m.remove(*from) {
            m.insert(to.to_string(), v);
        }
    }
}

/// The stored object as the requested type shows it.
fn view(rt: &ResourceType, stored: &Value) -> Value {
    let mut v = stored.clone();
    if rt.is_events_v1() {
        rename_fields(&mut v, true);
    }
    if let Some(m) = v.as_object_mut() {
        m.insert("apiVersion".into(), json!(rt.api_version()));
        m.insert("kind".into(), json!(rt.kind));
    }
    v
}

/// A requested-type object in the form it is stored in.
fn to_storage(rt: &ResourceType, object: Value) -> Value {
    let mut v = object;
    if rt.is_events_v1() {
        rename_fields(&mut v, false);
        v["apiVersion"] = json!("v1");
    }
    v
}

fn check_kind(t: &Target, body: &Value) -> Result<(), StatusError> {
    if !body.is_object() {
        return Err(StatusError::bad_request(
            "the request body must be a JSON object",
        ));
    }
    let kind = body["kind"].as_str().unwrap_or("");
    let api_version = body["apiVersion"].as_str().unwrap_or("");
    if (!kind.is_empty() && kind != t.rt.kind)
        || (!api_version.is_empty() && api_version != t.rt.api_version())
    {
        return Err(StatusError::bad_request(
            if !kind.is_empty() && kind != t.rt.kind {
                format!(
                    "the kind in the data ({kind}) does not match the expected kind ({})",
                    t.rt.kind
                )
            } else {
                format!(
                "the API version in the data ({api_version}) does not match the expected API version ({})",
                t.rt.api_version()
            )
            },
        ));
    }
    Ok(())
}

fn name_rule(rt: &ResourceType) -> fn(&str) -> Option<String> {
    match (rt.group.as_str(), rt.plural.as_str()) {
        ("", "namespaces" | "services") => dns_label,
        ("rbac.authorization.k8s.io", _) => path_segment,
        _ => dns_subdomain,
    }
}

fn dns_label(name: &str) -> Option<String> {
    if name.len() > 63 {
        return Some("must be no more than 63 characters".into());
    }
    let b = name.as_bytes();
    let ok = !b.is_empty()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-';
    (!ok).then(|| "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')".into())
}

fn dns_subdomain(name: &str) -> Option<String> {
    if name.len() > 253 {
        return Some("must be no more than 253 characters".into());
    }
    let ok = !name.is_empty()
        && name.split('.').all(|part| {
            let b = part.as_bytes();
            !b.is_empty()
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
                && b[0] != b'-'
                && b[b.len() - 1] != b'-'
        });
    (!ok).then(|| "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".into())
}

fn path_segment(name: &str) -> Option<String> {
    match name {
        "" => Some("name or generateName is required".into()),
        "." | ".." => Some(format!("may not be '{name}'")),
        _ if name.contains('/') => Some("may not contain '/'".into()),
        _ if name.contains('%') => Some("may not contain '%'".into()),
        _ => None,
    }
}

/// A value as the API server quotes it in field errors.
fn quoted(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => format!("{s:?}"),
        Some(other) => other.to_string(),
        None => "null".into(),
    }
}

/// The value at a dotted field path with `[i]` indexes (`spec.template.spec.containers[0]`).
fn dotted<'a>(obj: &'a Value, field: &str) -> Option<&'a Value> {
    let mut v = obj;
    for part in field.split('.').filter(|p| !p.is_empty()) {
        let (name, indexes) = match part.find('[') {
            Some(i) => (&part[..i], &part[i..]),
            None => (part, ""),
        };
        if !name.is_empty() {
            v = v.get(name)?;
        }
        for idx in indexes.split('[').filter(|s| !s.is_empty()) {
            let idx = idx.trim_end_matches(']');
            v = match idx.parse::<usize>() {
                Ok(i) => v.get(i)?,
                Err(_) => v.get(idx.trim_matches('"'))?,
            };
        }
    }
    Some(v)
}

fn invalid(t: &Target, name: &str, causes: Vec<Cause>) -> StatusError {
    StatusError::invalid(&t.rt.kind, &t.rt.group, name, causes)
}

fn invalid_name(t: &Target, name: &str, message: String) -> StatusError {
    invalid(
        t,
        name,
        vec![Cause {
            reason: "FieldValueInvalid",
            field: "metadata.name".into(),
            message: format!("Invalid value: {name:?}: {message}"),
        }],
    )
}

/// The causes `defaults` reported, as a 422 Invalid Status.
fn defaults_invalid(
    t: &Target,
    name: &str,
    object: &Value,
    causes: Vec<defaults::Cause>,
) -> StatusError {
    let causes = causes
        .into_iter()
        .map(|(field, message)| {
            let kind = CAUSE_KINDS
                .iter()
                .find(|(prefix, _)| message.starts_with(prefix));
            match kind {
                Some((_, reason)) => Cause {
                    reason,
                    message,
                    field,
                },
                // A bare detail ("field is immutable") gets the value it is about.
                None => Cause {
                    reason: "FieldValueInvalid",
                    message: format!(
                        "Invalid value: {}: {message}",
                        quoted(dotted(object, &field))
                    ),
                    field,
                },
            }
        })
        .collect();
    invalid(t, name, causes)
}

/// The cause reason each kind of field error message stands for.
const CAUSE_KINDS: &[(&str, &str)] = &[
    ("Invalid value", "FieldValueInvalid"),
    ("Required value", "FieldValueRequired"),
    ("Unsupported value", "FieldValueNotSupported"),
    ("Forbidden", "FieldValueForbidden"),
    ("Duplicate value", "FieldValueDuplicate"),
    ("Not found", "FieldValueNotFound"),
    ("Too long", "FieldValueTooLong"),
    ("Too many", "FieldValueTooMany"),
];

fn generated_name(prefix: &str) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let prefix: String = prefix.chars().take(58).collect();
    let suffix: String = (0..5)
        .map(|_| ALPHABET[rand::random_range(0..ALPHABET.len())] as char)
        .collect();
    format!("{prefix}{suffix}")
}

fn resource_version_of(obj: &Value) -> Option<&str> {
    obj["metadata"]["resourceVersion"]
        .as_str()
        .filter(|s| !s.is_empty())
}

/// Keeps what clients cannot set: identity, timestamps, the deletion state.
fn restore_server_fields(old: &Value, new: &mut Value) {
    if !new["metadata"].is_object() {
        new["metadata"] = json!({});
    }
    for key in [
        "name",
        "namespace",
        "uid",
        "creationTimestamp",
        "generation",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "resourceVersion",
    ] {
        match old["metadata"].get(key) {
            Some(v) => new["metadata"][key] = v.clone(),
            None => {
                if let Some(m) = new["metadata"].as_object_mut() {
                    m.remove(key);
                }
            }
        }
    }
    if let Some(m) = new["metadata"].as_object_mut() {
        m.remove("selfLink");
    }
}

fn strip_create_metadata(obj: &mut Value) {
    if let Some(m) = obj["metadata"].as_object_mut() {
        for key in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "selfLink",
            "managedFields",
        ] {
            m.remove(key);
        }
    }
}

/// What the API server's per-type strategies do to a new object's status.
fn prepare_status_for_create(rt: &ResourceType, obj: &mut Value, now: DateTime<Utc>) {
    let Some(m) = obj.as_object_mut() else {
        return;
    };
    if rt.has("status") && !(rt.group.is_empty() && rt.plural == "nodes") {
        m.remove("status");
    }
    match (rt.group.as_str(), rt.plural.as_str()) {
        ("", "namespaces") => {
            m.insert("status".into(), json!({"phase": "Active"}));
            let spec = m.entry("spec").or_insert_with(|| json!({}));
            if spec.is_object() && spec.get("finalizers").is_none() {
                spec["finalizers"] = json!(["kubernetes"]);
            }
        }
        ("", "persistentvolumes") => {
            m.insert("status".into(), json!({"phase": "Pending"}));
        }
        ("apiextensions.k8s.io", "customresourcedefinitions") => crd_status(obj, now),
        _ => {}
    }
}

/// Checks a CustomResourceDefinition and fills what the API server does: defaulted
/// names, and the status that makes it served at once.
fn check_crd(t: &Target, name: &str, crd: &mut Value) -> Result<(), StatusError> {
    let spec = crd["spec"].clone();
    let text = |v: &Value| v.as_str().unwrap_or("").to_string();
    let (group, plural, kind) = (
        text(&spec["group"]),
        text(&spec["names"]["plural"]),
        text(&spec["names"]["kind"]),
    );
    let mut causes = Vec::new();
    let mut require = |ok: bool, field: &str, message: &str| {
        if !ok {
            causes.push(Cause {
                reason: "FieldValueRequired",
                field: field.into(),
                message: message.into(),
            });
        }
    };
    require(!group.is_empty(), "spec.group", "Required value");
    require(!plural.is_empty(), "spec.names.plural", "Required value");
    require(!kind.is_empty(), "spec.names.kind", "Required value");
    let versions = spec["versions"].as_array().cloned().unwrap_or_default();
    require(
        !versions.is_empty(),
        "spec.versions",
        "Required value: must have exactly one version marked as storage version",
    );
    let storage = versions
        .iter()
        .filter(|v| v["storage"] == Value::Bool(true))
        .count();
    if !versions.is_empty() && storage != 1 {
        causes.push(Cause {
            reason: "FieldValueInvalid",
            field: "spec.versions".into(),
            message: "Invalid value: must have exactly one version marked as storage version"
                .into(),
        });
    }
    let scope = spec["scope"].as_str().unwrap_or("");
    if scope != "Namespaced" && scope != "Cluster" {
        causes.push(Cause {
            reason: "FieldValueNotSupported",
            field: "spec.scope".into(),
            message: format!(
                "Unsupported value: {scope:?}: supported values: \"Cluster\", \"Namespaced\""
            ),
        });
    }
    if !group.is_empty() && !plural.is_empty() && name != format!("{plural}.{group}") {
        causes.push(Cause {
            reason: "FieldValueInvalid",
            field: "metadata.name".into(),
            message: format!("Invalid value: {name:?}: must be spec.names.plural+\".\"+spec.group"),
        });
    }
    if !causes.is_empty() {
        return Err(invalid(t, name, causes));
    }
    let names = &mut crd["spec"]["names"];
    if names["singular"].as_str().is_none_or(str::is_empty) {
        names["singular"] = json!(kind.to_lowercase());
    }
    if names["listKind"].as_str().is_none_or(str::is_empty) {
        names["listKind"] = json!(format!("{kind}List"));
    }
    Ok(())
}

fn crd_status(crd: &mut Value, now: DateTime<Utc>) {
    let stored: Vec<Value> = crd["spec"]["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| v["storage"] == Value::Bool(true))
        .map(|v| v["name"].clone())
        .collect();
    let at = timestamp(now);
    crd["status"] = json!({
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "lastTransitionTime": at,
             "reason": "NoConflicts", "message": "no conflicts found"},
            {"type": "Established", "status": "True", "lastTransitionTime": at,
             "reason": "InitialNamesAccepted", "message": "the initial names have been accepted"}
        ],
        "acceptedNames": crd["spec"]["names"].clone(),
        "storedVersions": stored,
    });
}

fn is_crd(rt: &ResourceType) -> bool {
    rt.group == "apiextensions.k8s.io" && rt.plural == "customresourcedefinitions"
}

fn dry_run(req: &KubeRequest) -> bool {
    req.param("dryRun") == Some("All")
}

fn check_namespace(cluster: &ClusterState, t: &Target) -> Result<(), StatusError> {
    if !t.rt.namespaced {
        return Ok(());
    }
    let ns = cluster
        .store
        .get(&ObjKey::new("", "namespaces", "", t.ns()));
    match ns {
        None => Err(StatusError::not_found("", "namespaces", t.ns())),
        Some(ns) if ns["metadata"].get("deletionTimestamp").is_some() => Err(StatusError::forbidden(format!(
            "{} is forbidden: unable to create new content in namespace {} because it is being terminated",
            status::qualified(&t.rt.group, &t.rt.plural, t.name()),
            t.ns()
        ))),
        Some(_) => Ok(()),
    }
}

/// Stores a new object (or, dry, shows what would be stored) after defaulting.
fn insert(
    cluster: &mut ClusterState,
    t: &Target,
    mut object: Value,
    dry: bool,
    now: DateTime<Utc>,
) -> Result<Value, StatusError> {
    let key = t.key();
    let name = key.name.clone();
    object = to_storage(&t.rt, object);
    if let Err(causes) = defaults::on_create(&key, &mut object, cluster) {
        return Err(defaults_invalid(t, &name, &object, causes));
    }
    let stored = if dry {
        let meta = &mut object["metadata"];
        if !meta["uid"].is_string() {
            meta["uid"] = json!(new_uid());
        }
        meta["creationTimestamp"] = json!(timestamp(now));
        meta["generation"] = json!(1);
        object
    } else {
        cluster.store.insert_new(key, object, now)
    };
    Ok(view(&t.rt, &stored))
}

/// Replaces a stored object (or, dry, shows the result) after defaulting and checks.
fn store_update(
    cluster: &mut ClusterState,
    t: &Target,
    old_stored: &Value,
    new_view: Value,
    dry: bool,
) -> Result<Value, StatusError> {
    let key = t.key();
    let mut object = to_storage(&t.rt, new_view);
    if let Err(causes) = defaults::on_update(&key, old_stored, &mut object, cluster) {
        return Err(defaults_invalid(t, &key.name, &object, causes));
    }
    if dry {
        return Ok(view(&t.rt, &object));
    }
    let stored = cluster.store.update(&key, object);
    if stored["metadata"].get("deletionTimestamp").is_some() {
        // Removing the last finalizer of an object being deleted deletes it now.
        cluster.store.finish_deletions();
    }
    Ok(view(&t.rt, &stored))
}

// ---------------------------------------------------------------- selectors

#[derive(Debug, Clone, PartialEq)]
enum LabelOp {
    Eq(String),
    NotEq(String),
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    NotExists,
}

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LabelReq {
    key: String,
    op: LabelOp,
}

fn split_top_level(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out.into_iter()
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect()
}

fn valid_label_key(key: &str) -> bool {
    let name = key.rsplit('/').next().unwrap_or("");
    !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && key.matches('/').count() <= 1
}

fn valid_label_value(v: &str) -> bool {
    v.len() <= 63
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Parses `a=b,c!=d,e in (x,y),f notin (z),g,!h`.
pub(crate) fn parse_label_selector(s: &str) -> Result<Vec<LabelReq>, String> {
    let mut out = Vec::new();
    for term in split_top_level(s) {
        let bad = || format!("unable to parse requirement: {term:?}: invalid label selector");
        let req = if let Some(key) = term.strip_prefix('!') {
            LabelReq {
                key: key.trim().to_string(),
                op: LabelOp::NotExists,
            }
        } else if let Some(open) = term.find('(') {
            let close = term.rfind(')').filter(|c| *c > open).ok_or_else(bad)?;
            let head: Vec<&str> = term[..open].split_whitespace().collect();
            let values: Vec<String> = term[open + 1..close]
                .split(',')
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
                .collect();
            match head.as_slice() {
                [key, "in"] => LabelReq {
                    key: key.to_string(),
                    op: LabelOp::In(values),
                },
                [key, "notin"] => LabelReq {
                    key: key.to_string(),
                    op: LabelOp::NotIn(values),
                },
                _ => return Err(bad()),
            }
        } else if let Some((k, v)) = term.split_once("!=") {
            LabelReq {
                key: k.trim().to_string(),
                op: LabelOp::NotEq(v.trim().to_string()),
            }
        } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
            LabelReq {
                key: k.trim().to_string(),
                op: LabelOp::Eq(v.trim().to_string()),
            }
        } else {
            LabelReq {
                key: term.to_string(),
                op: LabelOp::Exists,
            }
        };
        let values_ok = match &req.op {
            LabelOp::Eq(v) | LabelOp::NotEq(v) => valid_label_value(v),
            LabelOp::In(vs) | LabelOp::NotIn(vs) => vs.iter().all(|v| valid_label_value(v)),
            _ => true,
        };
        if !valid_label_key(&req.key) || !values_ok {
            return Err(bad());
        }
        out.push(req);
    }
    Ok(out)
}

fn labels_match(reqs: &[LabelReq], obj: &Value) -> bool {
    let labels = &obj["metadata"]["labels"];
    reqs.iter().all(|r| {
        let value = labels.get(&r.key).and_then(Value::as_str);
        match &r.op {
            LabelOp::Eq(v) => value == Some(v.as_str()),
            LabelOp::NotEq(v) => value != Some(v.as_str()),
            LabelOp::In(vs) => value.is_some_and(|x| vs.iter().any(|v| v == x)),
            LabelOp::NotIn(vs) => value.is_none_or(|x| !vs.iter().any(|v| v == x)),
            LabelOp::Exists => value.is_some(),
            LabelOp::NotExists => value.is_none(),
        }
    })
}

/// One requirement of a field selector: `field=value` or `field!=value`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FieldReq {
    field: String,
    equal: bool,
    value: String,
}

/// The fields each type can be selected by, besides `metadata.name` and
/// `metadata.namespace`.
fn selectable_fields(rt: &ResourceType) -> &'static [&'static str] {
    match (rt.storage_group.as_str(), rt.plural.as_str()) {
        ("", "pods") => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
        ("", "events") => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        ("", "nodes") => &["spec.unschedulable"],
        ("", "secrets") => &["type"],
        ("", "namespaces") => &["status.phase"],
        ("batch", "jobs") => &["status.successful"],
        _ => &[],
    }
}

pub(crate) fn parse_field_selector(s: &str, rt: &ResourceType) -> Result<Vec<FieldReq>, String> {
    let mut out = Vec::new();
    for term in s.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        let (field, equal, value) = if let Some((f, v)) = term.split_once("!=") {
            (f, false, v)
        } else if let Some((f, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
            (f, true, v)
        } else {
            return Err(format!(
                "invalid selector: '{term}'; can't understand '{term}'"
            ));
        };
        let field = field.trim();
        // events.k8s.io selects by `regarding.*`, stored as core `involvedObject.*`.
        let field = match field.strip_prefix("regarding.") {
            Some(rest) if rt.plural == "events" => format!("involvedObject.{rest}"),
            _ => field.to_string(),
        };
        if field != "metadata.name"
            && field != "metadata.namespace"
            && !selectable_fields(rt).contains(&field.as_str())
        {
            return Err(format!("field label not supported: {field}"));
        }
        out.push(FieldReq {
            field,
            equal,
            value: value.trim().to_string(),
        });
    }
    Ok(out)
}

fn field_string(obj: &Value, field: &str) -> String {
    let mut v = obj;
    for part in field.split('.') {
        match v.get(part) {
            Some(next) => v = next,
            None => return String::new(),
        }
    }
    match v {
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::Object(m) if field == "source" => m
            .get("component")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
        _ => String::new(),
    }
}

fn fields_match(reqs: &[FieldReq], stored: &Value) -> bool {
    reqs.iter().all(|r| {
        let mut got = field_string(stored, &r.field);
        if got.is_empty() && r.field == "spec.unschedulable" {
            got = "false".into();
        }
        (got == r.value) == r.equal
    })
}

/// The selectors of a list or watch request.
#[derive(Debug, Clone, Default)]
pub(crate) struct Selectors {
    labels: Vec<LabelReq>,
    fields: Vec<FieldReq>,
}

impl Selectors {
    fn parse(req: &KubeRequest, rt: &ResourceType) -> Result<Selectors, StatusError> {
        let labels = match req.param("labelSelector") {
            Some(s) => parse_label_selector(s).map_err(StatusError::bad_request)?,
            None => Vec::new(),
        };
        let fields = match req.param("fieldSelector") {
            Some(s) => parse_field_selector(s, rt).map_err(StatusError::bad_request)?,
            None => Vec::new(),
        };
        Ok(Selectors { labels, fields })
    }

    fn matches(&self, stored: &Value) -> bool {
        labels_match(&self.labels, stored) && fields_match(&self.fields, stored)
    }
}

// ---------------------------------------------------------------- get and list

fn partial_metadata(req: &KubeRequest) -> bool {
    req.accept().contains("as=PartialObjectMetadata")
}

fn table_include(req: &KubeRequest) -> Option<Include> {
    table::wants_table(req.accept()).then(|| Include::parse(req.param("includeObject")))
}

fn get(
    cluster: &ClusterState,
    t: &Target,
    req: &KubeRequest,
    now: DateTime<Utc>,
) -> Result<Outcome, StatusError> {
    let stored = cluster
        .store
        .get(&t.key())
        .ok_or_else(|| StatusError::not_found(&t.rt.group, &t.rt.plural, t.name()))?;
    let obj = view(&t.rt, stored);
    if let Some(include) = table_include(req) {
        let meta = json!({"resourceVersion": resource_version_of(&obj).unwrap_or_default()});
        return Ok(ok(200, table::table(&t.rt, &[obj], now, include, meta)));
    }
    if partial_metadata(req) {
        return Ok(ok(
            200,
            json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]}),
        ));
    }
    Ok(ok(200, obj))
}

/// The objects of a list, in key order, after selectors.
fn matching<'a>(
    cluster: &'a ClusterState,
    t: &Target,
    selectors: &Selectors,
) -> Vec<(&'a ObjKey, &'a Value)> {
    cluster
        .store
        .list(&t.rt.storage_group, &t.rt.plural, t.namespace.as_deref())
        .into_iter()
        .filter(|(_, o)| selectors.matches(o))
        .collect()
}

fn list(
    cluster: &ClusterState,
    t: &Target,
    req: &KubeRequest,
    now: DateTime<Utc>,
) -> Result<Outcome, StatusError> {
    let selectors = Selectors::parse(req, &t.rt)?;
    let all = matching(cluster, t, &selectors);
    let rv = cluster.store.resource_version.to_string();
    let start = match req.param("continue").filter(|c| !c.is_empty()) {
        Some(token) => decode_continue(token)?,
        None => String::new(),
    };
    let after: Vec<(&ObjKey, &Value)> = all
        .into_iter()
        .filter(|(k, _)| start.is_empty() || format!("{}/{}", k.namespace, k.name) > start)
        .collect();
    let limit = req
        .param("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .filter(|l| *l > 0);
    let (page, more) = match limit {
        Some(l) if after.len() > l => (&after[..l], after.len() - l),
        _ => (&after[..], 0),
    };
    let items: Vec<Value> = page.iter().map(|(_, o)| view(&t.rt, o)).collect();
    let mut meta = json!({"resourceVersion": rv});
    if more > 0 {
        if let Some((k, _)) = page.last() {
            meta["continue"] = json!(encode_continue(&format!("{}/{}", k.namespace, k.name)));
            meta["remainingItemCount"] = json!(more);
        }
    }
    if let Some(include) = table_include(req) {
        return Ok(ok(200, table::table(&t.rt, &items, now, include, meta)));
    }
    if partial_metadata(req) {
        let items: Vec<Value> = items
            .iter()
            .map(|o| json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": o["metadata"]}))
            .collect();
        return Ok(ok(
            200,
            json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": meta, "items": items}),
        ));
    }
    Ok(ok(
        200,
        json!({"kind": t.rt.list_kind(), "apiVersion": t.rt.api_version(), "metadata": meta, "items": items}),
    ))
}

fn encode_continue(start: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json!({"start": start}).to_string())
}

fn decode_continue(token: &str) -> Result<String, StatusError> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .ok()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        .and_then(|v| v["start"].as_str().map(str::to_string))
        .ok_or_else(|| StatusError::bad_request("the provided continue parameter is invalid"))
}

// ---------------------------------------------------------------- writes

fn create(
    cluster: &mut ClusterState,
    t: &Target,
    req: &KubeRequest,
    now: DateTime<Utc>,
) -> Result<Outcome, StatusError> {
    let mut obj = req.body_value()?;
    check_kind(t, &obj)?;
    obj["apiVersion"] = json!(t.rt.api_version());
    obj["kind"] = json!(t.rt.kind);
    if !obj["metadata"].is_object() {
        obj["metadata"] = json!({});
    }
    let body_ns = obj["metadata"]["namespace"]
        .as_str()
        .unwrap_or("")
        .to_string();
    if t.rt.namespaced && !body_ns.is_empty() && body_ns != t.ns() {
        return Err(StatusError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    let mut name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
    if name.is_empty() {
        if let Some(prefix) = obj["metadata"]["generateName"]
            .as_str()
            .filter(|p| !p.is_empty())
        {
            name = generated_name(prefix);
        }
    }
    if name.is_empty() {
        return Err(invalid(
            t,
            "",
            vec![Cause {
                reason: "FieldValueRequired",
                field: "metadata.name".into(),
                message: "Required value: name or generateName is required".into(),
            }],
        ));
    }
    if let Some(problem) = name_rule(&t.rt)(&name) {
        return Err(invalid_name(t, &name, problem));
    }
    let t = Target {
        name: Some(name.clone()),
        ..t.clone()
    };
    obj["metadata"]["name"] = json!(name);
    if t.rt.namespaced {
        obj["metadata"]["namespace"] = json!(t.ns());
    } else if let Some(m) = obj["metadata"].as_object_mut() {
        m.remove("namespace");
    }
    check_namespace(cluster, &t)?;
    if cluster.store.get(&t.key()).is_some() {
        return Err(StatusError::already_exists(
            &t.rt.group,
            &t.rt.plural,
            &name,
        ));
    }
    strip_create_metadata(&mut obj);
    if is_crd(&t.rt) {
        check_crd(&t, &name, &mut obj)?;
    }
    prepare_status_for_create(&t.rt, &mut obj, now);
    let manager = req.manager();
    let api_version = t.rt.api_version();
    apply::record_update(
        None,
        &mut obj,
        &Writer {
            manager: &manager,
            api_version: &api_version,
            subresource: None,
            now,
        },
    );
    let stored = insert(cluster, &t, obj, dry_run(req), now)?;
    Ok(ok(201, stored))
}

fn replace(
    cluster: &mut ClusterState,
    t: &Target,
    req: &KubeRequest,
    now: DateTime<Utc>,
) -> Result<Outcome, StatusError> {
    let body = req.body_value()?;
    check_kind(t, &body)?;
    let body_name = body["metadata"]["name"].as_str().unwrap_or("");
    if body_name != t.name() {
        return Err(StatusError::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({})",
            t.name()
        )));
    }
    let old_stored = cluster
        .store
        .get(&t.key())
        .cloned()
        .ok_or_else(|| StatusError::not_found(&t.rt.group, &t.rt.plural, t.name()))?;
    let old = view(&t.rt, &old_stored);
    if let Some(rv) = resource_version_of(&body) {
        if Some(rv) != resource_version_of(&old) {
            return Err(StatusError::stale(&t.rt.group, &t.rt.plural, t.name()));
        }
    }
    let new = merge_write(t, &old, body, now);
    write_update(cluster, t, req, &old_stored, &old, new, now)
}

/// The object a write of `body` produces: the status subresource changes only status,
/// the main resource everything but status (when there is a status subresource).
fn merge_write(t: &Target, old: &Value, body: Value, now: DateTime<Utc>) -> Value {
    let mut new = if t.sub.as_deref() == Some("status") {
        let mut n = old.clone();
        match body.get("status") {
            Some(s) => n["status"] = s.clone(),
            None => {
                if let Some(m) = n.as_object_mut() {
                    m.remove("status");
                }
            }
        }
        n
    } else {
        let mut n = body;
        if t.rt.has("status") {
            match old.get("status") {
                Some(s) => n["status"] = s.clone(),
                None => {
                    if let Some(m) = n.as_object_mut() {
                        m.remove("status");
                    }
                }
            }
        }
        n
    };
    new["apiVersion"] = json!(t.rt.api_version());
    new["kind"] = json!(t.rt.kind);
    restore_server_fields(old, &mut new);
    if is_crd(&t.rt) && t.sub.is_none() {
        // Names may grow (new versions, short names); the CRD stays established.
        let conditions = old["status"]["conditions"].clone();
        crd_status(&mut new, now);
        if conditions.is_array() {
            new["status"]["conditions"] = conditions;
        }
    }
    new
}

fn write_update(
    cluster: &mut ClusterState,
    t: &Target,
    req: &KubeRequest,
    old_stored: &Value,
    old: &Value,
    mut new: Value,
    now: DateTime<Utc>,
) -> Result<Outcome, StatusError> {
    if is_crd(&t.rt) && t.sub.is_none() {
        check_crd(t, t.name(), &mut new)?;
    }
    let manager = req.manager();
    let api_version = t.rt.api_version();
    apply::record_update(
        Some(old),
        &mut new,
        &Writer {
            manager: &manager,
            api_version: &api_version,
            subresource: t.sub.as_deref(),
            now,
        },
    );
    let stored = store_update(cluster, t, old_stored, new, dry_run(req))?;
    Ok(ok(200, stored))
}

fn content_type(req: &KubeRequest) -> &str {
    req.content_type
        .as_deref()
        .and_then(|c| c.split(';').next())
        .map(str::trim)
        .unwrap_or("")
}

fn patch(
    cluster: &mut ClusterState,
    t: &Target,
    req: &KubeRequest,
    now: DateTime<Utc>,
) -> Result<Outcome, StatusError> {
    let kind = content_type(req).to_string();
    if kind == "application/apply-patch+yaml" {
        return server_side_apply(cluster, t, req, now);
    }
    let old_stored = cluster
        .store
        .get(&t.key())
        .cloned()
        .ok_or_else(|| StatusError::not_found(&t.rt.group, &t.rt.plural, t.name()))?;
    let old = view(&t.rt, &old_stored);
    let body = req.body_value()?;
    let patched = match kind.as_str() {
        "application/merge-patch+json" => {
            let mut target = old.clone();
            merge_patch(&mut target, &body);
            target
        }
        "application/strategic-merge-patch+json" => {
            let mut target = old.clone();
            strategic_merge_patch(&mut target, &body);
            target
        }
        "application/json-patch+json" => json_patch(&old, &body).map_err(|e| {
            StatusError::bad_request(format!("the JSON patch could not be applied: {e}"))
        })?,
        other => return Err(StatusError::unsupported_media_type(other)),
    };
    if let Some(rv) = body["metadata"]["resourceVersion"].as_str() {
        if Some(rv) != resource_version_of(&old) {
            return Err(StatusError::stale(&t.rt.group, &t.rt.plural, t.name()));
        }
    }
    if patched["metadata"]["name"].as_str() != Some(t.name()) {
        return Err(StatusError::bad_request(format!(
            "the name of the object ({}) does not match the name on the URL ({})",
            patched["metadata"]["name"].as_str().unwrap_or(""),
            t.name()
        )));
    }
    let new = merge_write(t, &old, patched, now);
    write_update(cluster, t, req, &old_stored, &old, new, now)
}

fn server_side_apply(
    cluster: &mut ClusterState,
    t: &Target,
    req: &KubeRequest,
    now: DateTime<Utc>,
) -> Result<Outcome, StatusError> {
    let manager = req
        .param("fieldManager")
        .filter(|m| !m.is_empty())
        .ok_or_else(|| StatusError::bad_request("PATCH is not supported for apply requests without a fieldManager: fieldManager is required for apply requests"))?
        .to_string();
    let force = match req.param("force") {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            return Err(StatusError::bad_request(format!(
                "invalid force value {other:?}"
            )))
        }
    };
    let mut config = req.body_value()?;
    check_kind(t, &config)?;
    if config["apiVersion"].as_str().is_none_or(str::is_empty)
        || config["kind"].as_str().is_none_or(str::is_empty)
    {
        return Err(StatusError::bad_request(
            "apiVersion and kind must be set in an applied configuration",
        ));
    }
    if !config["metadata"].is_object() {
        config["metadata"] = json!({});
    }
    match config["metadata"]["name"].as_str() {
        Some(n) if n == t.name() => {}
        None | Some("") => config["metadata"]["name"] = json!(t.name()),
        Some(other) => {
            return Err(StatusError::bad_request(format!(
                "the name of the object ({other}) does not match the name on the URL ({})",
                t.name()
            )))
        }
    }
    if t.rt.namespaced {
        match config["metadata"]["namespace"].as_str() {
            Some(ns) if !ns.is_empty() && ns != t.ns() => {
                return Err(StatusError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ))
            }
            _ => config["metadata"]["namespace"] = json!(t.ns()),
        }
    }
    let api_version = t.rt.api_version();
    let writer = Writer {
        manager: &manager,
        api_version: &api_version,
        subresource: t.sub.as_deref(),
        now,
    };
    let live_stored = cluster.store.get(&t.key()).cloned();
    let live = live_stored.as_ref().map(|s| view(&t.rt, s));
    if let (Some(rv), Some(live)) = (resource_version_of(&config), &live) {
        if Some(rv) != resource_version_of(live) {
            return Err(StatusError::stale(&t.rt.group, &t.rt.plural, t.name()));
        }
    }
    let applied = apply::apply(live.as_ref(), &config, &writer, force).map_err(|conflicts| {
        let mut e = StatusError::conflict(&t.rt.group, &t.rt.plural, t.name(), "")
            .with_message(apply::conflict_message(&conflicts));
        e.details = Some(Box::new(json!({
            "causes": conflicts
                .iter()
                .map(|c| json!({"reason": "FieldManagerConflict", "message": c.cause(), "field": c.field}))
                .collect::<Vec<_>>()
        })));
        e
    })?;
    match (live_stored, live) {
        (Some(old_stored), Some(old)) => {
            let mut new = applied;
            let managed = new["metadata"]["managedFields"].clone();
            let mut new = {
                // The applied config may not reach past the subresource it was sent to.
                let body = std::mem::take(&mut new);
                merge_write(t, &old, body, now)
            };
            if is_crd(&t.rt) && t.sub.is_none() {
                check_crd(t, t.name(), &mut new)?;
            }
            if managed.is_null() {
                if let Some(m) = new["metadata"].as_object_mut() {
                    m.remove("managedFields");
                }
            } else {
                new["metadata"]["managedFields"] = managed;
            }
            let stored = store_update(cluster, t, &old_stored, new, dry_run(req))?;
            Ok(ok(200, stored))
        }
        _ => {
            if t.sub.is_some() {
                return Err(StatusError::not_found(&t.rt.group, &t.rt.plural, t.name()));
            }
            if let Some(problem) = name_rule(&t.rt)(t.name()) {
                return Err(invalid_name(t, t.name(), problem));
            }
            check_namespace(cluster, t)?;
            let mut obj = applied;
            obj["apiVersion"] = json!(t.rt.api_version());
            obj["kind"] = json!(t.rt.kind);
            let managed = obj["metadata"]["managedFields"].clone();
            strip_create_metadata(&mut obj);
            if !managed.is_null() {
                obj["metadata"]["managedFields"] = managed;
            }
            if is_crd(&t.rt) {
                check_crd(t, t.name(), &mut obj)?;
            }
            prepare_status_for_create(&t.rt, &mut obj, now);
            let stored = insert(cluster, t, obj, dry_run(req), now)?;
            Ok(ok(201, stored))
        }
    }
}

/// RFC 7386 JSON merge patch.
pub(crate) fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    let Some(t) = target.as_object_mut() else {
        return;
    };
    for (k, v) in p {
        if v.is_null() {
            t.remove(k);
        } else {
            merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

/// A strategic merge patch, approximated: a merge patch in which lists of named
/// objects merge by name (`$patch: delete` removes an item) and the `$`-directives
/// kubectl adds are dropped.
pub(crate) fn strategic_merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if p.get("$patch").and_then(Value::as_str) == Some("replace") {
        let mut replacement = patch.clone();
        if let Some(m) = replacement.as_object_mut() {
            m.remove("$patch");
        }
        *target = replacement;
        return;
    }
    if !target.is_object() {
        *target = json!({});
    }
    let Some(t) = target.as_object_mut() else {
        return;
    };
    for (k, v) in p {
        if k.starts_with('$') {
            continue;
        }
        if v.is_null() {
            t.remove(k);
            continue;
        }
        let named =
            |items: &[Value]| !items.is_empty() && items.iter().all(|i| i["name"].is_string());
        match (t.get_mut(k), v) {
            (Some(Value::Array(live)), Value::Array(items))
                if named(items) && (live.is_empty() || named(live)) =>
            {
                for item in items {
                    let is_delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
                    let pos = live.iter().position(|l| l["name"] == item["name"]);
                    match (pos, is_delete) {
                        (Some(i), true) => {
                            live.remove(i);
                        }
                        (None, true) => {}
                        (Some(i), false) => strategic_merge_patch(&mut live[i], item),
                        (None, false) => {
                            let mut fresh = json!({});
                            strategic_merge_patch(&mut fresh, item);
                            live.push(fresh);
                        }
                    }
                }
            }
            (Some(existing), _) => strategic_merge_patch(existing, v),
            (None, _) => {
                let mut fresh = Value::Null;
                strategic_merge_patch(&mut fresh, v);
                t.insert(k.clone(), fresh);
            }
        }
    }
}

fn pointer_tokens(path: &str) -> Result<Vec<String>, String> {
    if path.is_empty() {
        return Ok(Vec::new());
    }
    let Some(rest) = path.strip_prefix('/') else {
        return Err(format!("invalid JSON pointer {path:?}"));
    };
    Ok(rest
        .split('/')
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect())
}

fn pointer_get<'a>(v: &'a Value, tokens: &[String]) -> Option<&'a Value> {
    tokens.iter().try_fold(v, |v, t| match v {
        Value::Object(m) => m.get(t),
        Value::Array(a) => t.parse::<usize>().ok().and_then(|i| a.get(i)),
        _ => None,
    })
}

fn pointer_parent<'a>(
    v: &'a mut Value,
    tokens: &[String],
) -> Result<(&'a mut Value, String), String> {
    let Some((last, parents)) = tokens.split_last() else {
        return Err("the root cannot be changed this way".into());
    };
    let mut cur = v;
    for t in parents {
        cur = match cur {
            Value::Object(m) => m.get_mut(t),
            Value::Array(a) => t.parse::<usize>().ok().and_then(|i| a.get_mut(i)),
            _ => None,
        }
        .ok_or_else(|| format!("path component {t:?} not found"))?;
    }
    Ok((cur, last.clone()))
}

fn pointer_add(v: &mut Value, tokens: &[String], value: Value) -> Result<(), String> {
    if tokens.is_empty() {
        *v = value;
        return Ok(());
    }
    let (parent, last) = pointer_parent(v, tokens)?;
    match parent {
        Value::Object(m) => {
            m.insert(last, value);
            Ok(())
        }
        Value::Array(a) => {
            let i = if last == "-" {
                a.len()
            } else {
                last.parse::<usize>()
                    .map_err(|_| format!("invalid index {last:?}"))?
            };
            if i > a.len() {
                return Err(format!("index {i} out of bounds"));
            }
            a.insert(i, value);
            Ok(())
        }
        _ => Err("the parent is not a container".into()),
    }
}

fn pointer_remove(v: &mut Value, tokens: &[String]) -> Result<Value, String> {
    let (parent, last) = pointer_parent(v, tokens)?;
    match parent {
        Value::Object(m) => m
            .remove(&last)
            .ok_or_else(|| format!("path {last:?} not found")),
        Value::Array(a) => {
            let i = last
                .parse::<usize>()
                .map_err(|_| format!("invalid index {last:?}"))?;
            if i >= a.len() {
                return Err(format!("index {i} out of bounds"));
            }
            Ok(a.remove(i))
        }
        _ => Err("the parent is not a container".into()),
    }
}

/// RFC 6902 JSON patch.
pub(crate) fn json_patch(doc: &Value, patch: &Value) -> Result<Value, String> {
    let ops = patch
        .as_array()
        .ok_or("a JSON patch must be a list of operations")?;
    let mut doc = doc.clone();
    for op in ops {
        let path = pointer_tokens(op["path"].as_str().ok_or("every operation needs a path")?)?;
        match op["op"].as_str().unwrap_or("") {
            "add" => pointer_add(
                &mut doc,
                &path,
                op.get("value").cloned().ok_or("add needs a value")?,
            )?,
            "remove" => {
                pointer_remove(&mut doc, &path)?;
            }
            "replace" => {
                pointer_remove(&mut doc, &path)?;
                pointer_add(
                    &mut doc,
                    &path,
                    op.get("value").cloned().ok_or("replace needs a value")?,
                )?;
            }
            "move" => {
                let from = pointer_tokens(op["from"].as_str().ok_or("move needs from")?)?;
                let v = pointer_remove(&mut doc, &from)?;
                pointer_add(&mut doc, &path, v)?;
            }
            "copy" => {
                let from = pointer_tokens(op["from"].as_str().ok_or("copy needs from")?)?;
                let v = pointer_get(&doc, &from)
                    .cloned()
                    .ok_or("copy source not found")?;
                pointer_add(&mut doc, &path, v)?;
            }
            "test" => {
                if pointer_get(&doc, &path) != op.get("value") {
                    return Err(format!("test failed at {}", op["path"]));
                }
            }
            other => return Err(format!("unknown operation {other:?}")),
        }
    }
    Ok(doc)
}

// ---------------------------------------------------------------- delete

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Propagation {
    Orphan,
    Background,
    Foreground,
}

fn delete_options(req: &KubeRequest) -> Result<Value, StatusError> {
    if req.body.iter().all(u8::is_ascii_whitespace) {
        return Ok(json!({}));
    }
    req.body_value()
}

fn propagation(t: &Target, req: &KubeRequest, options: &Value) -> Result<Propagation, StatusError> {
    let given = req
        .param("propagationPolicy")
        .or_else(|| options["propagationPolicy"].as_str());
    match given {
        Some("Orphan") => Ok(Propagation::Orphan),
        Some("Background") => Ok(Propagation::Background),
        Some("Foreground") => Ok(Propagation::Foreground),
        Some(other) => Err(StatusError::bad_request(format!(
            "invalid propagationPolicy {other:?}: must be one of Orphan, Background, Foreground"
        ))),
        None => {
            let orphan = req
                .param("orphanDependents")
                .map(|v| v == "true")
                .or_else(|| options["orphanDependents"].as_bool());
            Ok(match orphan {
                Some(true) => Propagation::Orphan,
                Some(false) => Propagation::Background,
                // batch/v1 Jobs still default to orphaning their pods.
                None if t.rt.group == "batch" && t.rt.plural == "jobs" => Propagation::Orphan,
                None => Propagation::Background,
            })
        }
    }
}

/// Deletes one object by the request's options; `None` when it is gone for good.
fn delete_one(
    cluster: &mut ClusterState,
    t: &Target,
    key: &ObjKey,
    policy: Propagation,
    options: &Value,
    dry: bool,
    now: DateTime<Utc>,
) -> Result<Option<Value>, StatusError> {
    let stored = cluster
        .store
        .get(key)
        .cloned()
        .ok_or_else(|| StatusError::not_found(&t.rt.group, &t.rt.plural, &key.name))?;
    let pre = &options["preconditions"];
    let uid = stored["metadata"]["uid"].as_str().unwrap_or("").to_string();
    if let Some(want) = pre["uid"].as_str() {
        if want != uid {
            return Err(StatusError::conflict(
                &t.rt.group,
                &t.rt.plural,
                &key.name,
                &format!(
                    "Precondition failed: UID in precondition: {want}, UID in object meta: {uid}"
                ),
            ));
        }
    }
    if let Some(want) = pre["resourceVersion"].as_str() {
        let have = resource_version_of(&stored).unwrap_or("");
        if want != have {
            return Err(StatusError::conflict(&t.rt.group, &t.rt.plural, &key.name, &format!(
                "Precondition failed: ResourceVersion in precondition: {want}, ResourceVersion in object meta: {have}"
            )));
        }
    }
    if key.group.is_empty()
        && key.resource == "namespaces"
        && PROTECTED_NAMESPACES.contains(&key.name.as_str())
    {
        return Err(StatusError::forbidden(format!(
            "namespaces \"{}\" is forbidden: this namespace may not be deleted",
            key.name
        )));
    }
    if dry {
        return Ok(Some(stored));
    }
    // The garbage collector (in the controllers) does the rest: it releases the
    // dependents of an orphaning owner, deletes those of a foreground one first, and
    // removes the finalizer when done.
    let finalizer = match policy {
        Propagation::Orphan => Some("orphan"),
        Propagation::Foreground => Some("foregroundDeletion"),
        Propagation::Background => None,
    };
    let deleting = stored["metadata"].get("deletionTimestamp").is_some();
    if let Some(finalizer) = finalizer.filter(|_| !deleting) {
        let mut obj = stored.clone();
        let mut finalizers = obj["metadata"]["finalizers"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if !finalizers.iter().any(|f| f == finalizer) {
            finalizers.push(json!(finalizer));
            obj["metadata"]["finalizers"] = Value::Array(finalizers);
            cluster.store.update(key, obj);
        }
    }
    if key.group == "apiextensions.k8s.io" && key.resource == "customresourcedefinitions" {
        let group = stored["spec"]["group"].as_str().unwrap_or("").to_string();
        let plural = stored["spec"]["names"]["plural"]
            .as_str()
            .unwrap_or("")
            .to_string();
        for k in cluster.store.keys() {
            if k.group == group && k.resource == plural {
                cluster.store.remove(&k);
            }
        }
    }
    Ok(cluster
        .store
        .delete(key, now)
        .filter(|_| cluster.store.get(key).is_some()))
}

fn delete(
    cluster: &mut ClusterState,
    t: &Target,
    req: &KubeRequest,
    now: DateTime<Utc>,
) -> Result<Outcome, StatusError> {
    let options = delete_options(req)?;
    let policy = propagation(t, req, &options)?;
    let key = t.key();
    let uid = cluster
        .store
        .get(&key)
        .and_then(|o| o["metadata"]["uid"].as_str())
        .unwrap_or("")
        .to_string();
    match delete_one(cluster, t, &key, policy, &options, dry_run(req), now)? {
        Some(still_there) => Ok(ok(200, view(&t.rt, &still_there))),
        None => Ok(ok(
            200,
            status::success(&t.rt.group, &t.rt.plural, t.name(), &uid),
        )),
    }
}

fn delete_collection(
    cluster: &mut ClusterState,
    t: &Target,
    req: &KubeRequest,
    now: DateTime<Utc>,
) -> Result<Outcome, StatusError> {
    let options = delete_options(req)?;
    let policy = propagation(t, req, &options)?;
    let selectors = Selectors::parse(req, &t.rt)?;
    let keys: Vec<(ObjKey, Value)> = matching(cluster, t, &selectors)
        .into_iter()
        .map(|(k, o)| (k.clone(), o.clone()))
        .collect();
    let mut items = Vec::new();
    for (key, before) in keys {
        if key.group.is_empty()
            && key.resource == "namespaces"
            && PROTECTED_NAMESPACES.contains(&key.name.as_str())
        {
            continue;
        }
        let shown =
            delete_one(cluster, t, &key, policy, &options, dry_run(req), now)?.unwrap_or(before);
        items.push(view(&t.rt, &shown));
    }
    Ok(ok(
        200,
        json!({"kind": t.rt.list_kind(), "apiVersion": t.rt.api_version(),
               "metadata": {"resourceVersion": cluster.store.resource_version.to_string()}, "items": items}),
    ))
}

// ---------------------------------------------------------------- scale

fn path_get<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    path.trim_start_matches('.')
        .split('.')
        .try_fold(obj, |v, p| v.get(p))
}

fn path_set(obj: &mut Value, path: &str, value: Value) {
    let parts: Vec<&str> = path.trim_start_matches('.').split('.').collect();
    let mut v = obj;
    for p in &parts[..parts.len().saturating_sub(1)] {
        if !v[*p].is_object() {
            v[*p] = json!({});
        }
        v = &mut v[*p];
    }
    if let Some(last) = parts.last() {
        v[*last] = value;
    }
}

fn scale_view(t: &Target, obj: &Value) -> Value {
    let paths = t.rt.scale.clone().unwrap_or(discovery::ScalePaths {
        spec_replicas: ".spec.replicas".into(),
        status_replicas: ".status.replicas".into(),
        label_selector: None,
    });
    let selector = paths
        .label_selector
        .as_deref()
        .and_then(|p| path_get(obj, p))
        .map(|s| match s {
            Value::String(s) => s.clone(),
            other => table::selector_string(other),
        });
    let mut status = json!({"replicas": path_get(obj, &paths.status_replicas).and_then(Value::as_i64).unwrap_or(0)});
    if let Some(s) = selector {
        status["selector"] = json!(s);
    }
    let meta = &obj["metadata"];
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"],
            "resourceVersion": meta["resourceVersion"], "creationTimestamp": meta["creationTimestamp"],
        },
        "spec": {"replicas": path_get(obj, &paths.spec_replicas).and_then(Value::as_i64).unwrap_or(0)},
        "status": status,
    })
}

fn scale(
    cluster: &mut ClusterState,
    t: &Target,
    req: &KubeRequest,
    now: DateTime<Utc>,
) -> Result<Outcome, StatusError> {
    let old_stored = cluster
        .store
        .get(&t.key())
        .cloned()
        .ok_or_else(|| StatusError::not_found(&t.rt.group, &t.rt.plural, t.name()))?;
    let old = view(&t.rt, &old_stored);
    let current = scale_view(t, &old);
    let wanted = match req.method {
        Method::GET => return Ok(ok(200, current)),
        Method::PUT => req.body_value()?,
        Method::PATCH => {
            let body = req.body_value()?;
            let mut target = current.clone();
            match content_type(req) {
                "application/json-patch+json" => {
                    json_patch(&current, &body).map_err(StatusError::bad_request)?
                }
                "application/merge-patch+json"
                | "application/strategic-merge-patch+json"
                | "application/apply-patch+yaml" => {
                    merge_patch(&mut target, &body);
                    target
                }
                other => return Err(StatusError::unsupported_media_type(other)),
            }
        }
        _ => return Err(StatusError::method_not_allowed(req.method.as_str())),
    };
    if let Some(rv) = resource_version_of(&wanted) {
        if Some(rv) != resource_version_of(&old) {
            return Err(StatusError::stale(&t.rt.group, &t.rt.plural, t.name()));
        }
    }
    let Some(replicas) = wanted["spec"]["replicas"].as_i64().filter(|r| *r >= 0) else {
        return Err(StatusError::invalid(
            "Scale",
            "autoscaling",
            t.name(),
            vec![Cause {
                reason: "FieldValueInvalid",
                field: "spec.replicas".into(),
                message: format!(
                    "Invalid value: {}: must be greater than or equal to 0",
                    quoted(wanted["spec"].get("replicas"))
                ),
            }],
        ));
    };
    let mut new = old.clone();
    let path =
        t.rt.scale
            .as_ref()
            .map_or(".spec.replicas", |s| s.spec_replicas.as_str());
    path_set(&mut new, path, json!(replicas));
    let scale_target = Target {
        sub: None,
        ..t.clone()
    };
    let manager = req.manager();
    let api_version = t.rt.api_version();
    apply::record_update(
        Some(&old),
        &mut new,
        &Writer {
            manager: &manager,
            api_version: &api_version,
            subresource: Some("scale"),
            now,
        },
    );
    let stored = store_update(cluster, &scale_target, &old_stored, new, dry_run(req))?;
    Ok(ok(200, scale_view(t, &stored)))
}

// ---------------------------------------------------------------- pods: logs, exec, port-forward

fn pod<'a>(cluster: &'a ClusterState, t: &Target) -> Result<&'a Value, StatusError> {
    cluster
        .store
        .get(&t.key())
        .ok_or_else(|| StatusError::not_found("", "pods", t.name()))
}

fn container_names(pod: &Value) -> Vec<String> {
    pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["name"].as_str().map(str::to_string))
        .collect()
}

/// The container a log or exec request means, as the API server picks it.
fn pick_container(pod: &Value, asked: Option<&str>, name: &str) -> Result<String, StatusError> {
    let names = container_names(pod);
    match asked.filter(|c| !c.is_empty()) {
        Some(c) if names.iter().any(|n| n == c) => Ok(c.to_string()),
        Some(c) => Err(StatusError::bad_request(format!(
            "container {c} is not valid for pod {name}"
        ))),
        None => {
            if let Some(default) =
                pod["metadata"]["annotations"]["kubectl.kubernetes.io/default-container"].as_str()
            {
                if names.iter().any(|n| n == default) {
                    return Ok(default.to_string());
                }
            }
            match names.as_slice() {
                [one] => Ok(one.clone()),
                [] => Err(StatusError::bad_request(format!(
                    "pod {name} has no containers"
                ))),
                many => Err(StatusError::bad_request(format!(
                    "a container name must be specified for pod {name}, choose one of: [{}]",
                    many.join(" ")
                ))),
            }
        }
    }
}

/// What a followed log stream needs to keep going.
#[derive(Debug, Clone)]
pub(crate) struct LogFollow {
    pub namespace: String,
    pub pod: String,
    pub container: String,
    /// The first chunk (the log so far, after `tailLines`).
    pub initial: String,
    /// How much of the full log has been sent.
    pub sent: usize,
}

fn tail(text: &str, lines: Option<usize>) -> String {
    match lines {
        None => text.to_string(),
        Some(n) => {
            let all: Vec<&str> = text.split_inclusive('\n').collect();
            all[all.len().saturating_sub(n)..].concat()
        }
    }
}

fn logs(cluster: &ClusterState, t: &Target, req: &KubeRequest, now: DateTime<Utc>) -> Outcome {
    let result = (|| {
        let p = pod(cluster, t)?;
        let container = pick_container(p, req.param("container"), t.name())?;
        if req.flag("previous") {
            let restarted = p["status"]["containerStatuses"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| {
                    c["name"] == container.as_str() && c["lastState"].get("terminated").is_some()
                });
            if !restarted {
                return Err(StatusError::bad_request(format!(
                    "previous terminated container \"{container}\" in pod \"{}\" not found",
                    t.name()
                )));
            }
        }
        let text = controllers::pod_logs(cluster, t.ns(), t.name(), Some(&container), now)
            .map_err(StatusError::bad_request)?;
        let lines = req.param("tailLines").and_then(|n| n.parse::<usize>().ok());
        let mut shown = tail(&text, lines);
        if let Some(limit) = req
            .param("limitBytes")
            .and_then(|n| n.parse::<usize>().ok())
        {
            let mut cut = limit.min(shown.len());
            while !shown.is_char_boundary(cut) {
                cut -= 1;
            }
            shown.truncate(cut);
        }
        if req.flag("follow") {
            return Ok(Outcome::FollowLog(LogFollow {
                namespace: t.ns().to_string(),
                pod: t.name().to_string(),
                container,
                initial: shown,
                sent: text.len(),
            }));
        }
        Ok(Outcome::Done(ApiResponse {
            status: 200,
            body: Body::Bytes {
                content_type: "text/plain".into(),
                data: shown.into_bytes(),
            },
            retry_after: None,
        }))
    })();
    result.unwrap_or_else(Outcome::from)
}

/// One poll of a followed log: the new text, and whether the stream is over (the pod
/// finished or is gone).
pub(crate) fn follow_poll(
    cluster: &ClusterState,
    follow: &mut LogFollow,
    now: DateTime<Utc>,
) -> (String, bool) {
    let key = ObjKey::new("", "pods", &follow.namespace, &follow.pod);
    let Some(pod) = cluster.store.get(&key) else {
        return (String::new(), true);
    };
    let finished = matches!(
        pod["status"]["phase"].as_str(),
        Some("Succeeded" | "Failed")
    );
    let text = controllers::pod_logs(
        cluster,
        &follow.namespace,
        &follow.pod,
        Some(&follow.container),
        now,
    )
    .unwrap_or_default();
    if text.len() < follow.sent {
        // The container restarted: its log starts over.
        follow.sent = 0;
    }
    let mut start = follow.sent;
    while start < text.len() && !text.is_char_boundary(start) {
        start += 1;
    }
    let new = text.get(start..).unwrap_or("").to_string();
    follow.sent = text.len();
    (new, finished)
}

fn running_pod<'a>(cluster: &'a ClusterState, t: &Target) -> Result<&'a Value, StatusError> {
    let p = pod(cluster, t)?;
    if p["status"]["phase"] != "Running" {
        return Err(StatusError::bad_request(format!(
            "unable to upgrade connection: pod {} is not running",
            t.name()
        )));
    }
    Ok(p)
}

fn exec(cluster: &ClusterState, t: &Target, req: &KubeRequest, ctx: &SettleCtx) -> Outcome {
    let result = (|| {
        let p = running_pod(cluster, t)?;
        let container = pick_container(p, req.param("container"), t.name())?;
        let command: Vec<String> = req
            .params("command")
            .into_iter()
            .map(str::to_string)
            .collect();
        if command.is_empty() {
            return Err(StatusError::bad_request(
                "you must specify at least 1 command",
            ));
        }
        let mounts = volumes::mounts(cluster, ctx.data_dir, t.ns(), t.name(), Some(&container))
            .map_err(StatusError::bad_request)?;
        let redis = volumes::redis_of(cluster, ctx.processes, t.ns(), t.name());
        let env = environment::container_env(cluster, p, &container);
        Ok(Outcome::Exec(ExecTarget {
            command,
            env,
            mounts,
            redis,
            stdin: req.flag("stdin"),
            stdout: req.param("stdout").is_none() || req.flag("stdout"),
            stderr: req.param("stderr").is_none() || req.flag("stderr"),
        }))
    })();
    result.unwrap_or_else(Outcome::from)
}

fn portforward(cluster: &ClusterState, t: &Target, req: &KubeRequest, ctx: &SettleCtx) -> Outcome {
    let result = (|| {
        running_pod(cluster, t)?;
        let mut ports = Vec::new();
        for p in req.params("ports").into_iter().flat_map(|p| p.split(',')) {
            let port: u16 = p
                .trim()
                .parse()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| StatusError::bad_request(format!("invalid port {p:?}")))?;
            ports.push((
                port,
                volumes::port_target(cluster, ctx.processes, t.ns(), t.name(), port),
            ));
        }
        if ports.is_empty() {
            return Err(StatusError::bad_request(
                "at least one port must be given with the ports parameter",
            ));
        }
        Ok(Outcome::PortForward(ports))
    })();
    result.unwrap_or_else(Outcome::from)
}

// ---------------------------------------------------------------- watch

/// A running watch: what it selects and how far it has read the change log.
#[derive(Debug)]
pub(crate) struct Watch {
    rt: ResourceType,
    namespace: Option<String>,
    selectors: Selectors,
    last: u64,
    /// Whether each object seen so far matched the selectors, so an object that stops
    /// (or starts) matching is reported as DELETED (ADDED).
    visible: BTreeMap<ObjKey, bool>,
    table: Option<Include>,
    pub timeout: Duration,
    /// Set once an ERROR event has been sent: the stream ends.
    pub finished: bool,
}

impl Watch {
    fn start(
        cluster: &ClusterState,
        t: &Target,
        req: &KubeRequest,
        now: DateTime<Utc>,
    ) -> Result<(Watch, Vec<Value>), StatusError> {
        let selectors = Selectors::parse(req, &t.rt)?;
        let timeout = req
            .param("timeoutSeconds")
            .and_then(|s| s.parse::<u64>().ok())
            .map(Duration::from_secs)
            .unwrap_or(DEFAULT_WATCH_TIMEOUT);
        let mut w = Watch {
            rt: t.rt.clone(),
            namespace: t.namespace.clone(),
            selectors,
            last: cluster.store.resource_version,
            visible: BTreeMap::new(),
            table: table_include(req),
            timeout,
            finished: false,
        };
        let rv = req.param("resourceVersion").unwrap_or("");
        let initial_events = req.flag("sendInitialEvents");
        let mut events = Vec::new();
        if rv.is_empty() || rv == "0" || initial_events {
            for (k, o) in
                cluster
                    .store
                    .list(&t.rt.storage_group, &t.rt.plural, t.namespace.as_deref())
            {
                let m = w.selectors.matches(o);
                w.visible.insert(k.clone(), m);
                if m {
                    events.push(w.event("ADDED", o, now));
                }
            }
            if initial_events {
                events.push(json!({"type": "BOOKMARK", "object": {
                    "kind": t.rt.kind, "apiVersion": t.rt.api_version(),
                    "metadata": {"resourceVersion": w.last.to_string(),
                                 "annotations": {"k8s.io/initial-events-end": "true"}}
                }}));
            }
            return Ok((w, events));
        }
        let from: u64 = rv
            .parse()
            .map_err(|_| StatusError::bad_request(format!("invalid resource version {rv:?}")))?;
        w.last = from;
        let events = w.poll(cluster, now);
        Ok((w, events))
    }

    fn event(&self, kind: &str, stored: &Value, now: DateTime<Utc>) -> Value {
        let obj = view(&self.rt, stored);
        let object = match self.table {
            Some(include) => {
                let meta =
                    json!({"resourceVersion": resource_version_of(&obj).unwrap_or_default()});
                table::table(&self.rt, &[obj], now, include, meta)
            }
            None => obj,
        };
        json!({"type": kind, "object": object})
    }

    /// The events since the last poll.
    pub(crate) fn poll(&mut self, cluster: &ClusterState, now: DateTime<Utc>) -> Vec<Value> {
        if self.finished {
            return Vec::new();
        }
        let Some(changes) = cluster.store.changes_since(self.last) else {
            self.finished = true;
            let oldest = cluster.store.resource_version;
            let err = StatusError::expired(format!(
                "too old resource version: {} ({oldest})",
                self.last
            ));
            return vec![json!({"type": "ERROR", "object": err.to_value()})];
        };
        let mut events = Vec::new();
        for c in changes {
            self.last = c.resource_version;
            if c.key.group != self.rt.storage_group
                || c.key.resource != self.rt.plural
                || self
                    .namespace
                    .as_deref()
                    .is_some_and(|ns| ns != c.key.namespace)
            {
                continue;
            }
            let now_matches = self.selectors.matches(&c.object);
            let was = *self
                .visible
                .entry(c.key.clone())
                .or_insert(c.kind != "ADDED" && now_matches);
            let kind = match (c.kind, was, now_matches) {
                ("DELETED", true, _) => Some("DELETED"),
                ("DELETED", false, _) => None,
                (_, true, true) => Some(if c.kind == "ADDED" {
                    "ADDED"
                } else {
                    "MODIFIED"
                }),
                (_, true, false) => Some("DELETED"),
                (_, false, true) => Some("ADDED"),
                (_, false, false) => None,
            };
            if c.kind == "DELETED" {
                self.visible.remove(&c.key);
            } else {
                self.visible.insert(c.key.clone(), now_matches);
            }
            if let Some(kind) = kind {
                events.push(self.event(kind, &c.object, now));
            }
        }
        // Every change up to the store's version has now been seen.
        self.last = self.last.max(cluster.store.resource_version);
        events
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::k8s::processes::Processes;

    struct Fixture {
        cluster: ClusterState,
        dir: tempfile::TempDir,
        processes: Processes,
    }

    impl Fixture {
        fn new() -> Fixture {
            let dir = tempfile::tempdir().expect("temp dir");
            let processes = Processes::new(dir.path().to_path_buf());
            Fixture {
                cluster: ClusterState::new(
                    "c",
                    crate::k8s::controllers::testkit::cloud(false),
                    String::new(),
                    String::new(),
                    Vec::new(),
                    "v1.31.8-sandbox".to_string(),
                    Utc::now(),
                ),
                dir,
                processes,
            }
        }

        fn send(
            &mut self,
            method: Method,
            path_query: &str,
            content_type: Option<&str>,
            body: Option<Value>,
        ) -> Outcome {
            let (path, query) = path_query.split_once('?').unwrap_or((path_query, ""));
            let req = KubeRequest {
                method,
                path: path.to_string(),
                query: crate::http::parse_query(query),
                content_type: content_type.map(str::to_string),
                accept: None,
                user_agent: Some("tester/1.0".into()),
                body: body.map(|b| b.to_string().into_bytes()).unwrap_or_default(),
            };
            self.handle(&req)
        }

        fn handle(&mut self, req: &KubeRequest) -> Outcome {
            let ctx = SettleCtx {
                now: Utc::now(),
                scale: 0.0,
                processes: &self.processes,
                data_dir: self.dir.path(),
            };
            handle(&mut self.cluster, req, &ctx)
        }

        fn call(&mut self, method: Method, path_query: &str, body: Option<Value>) -> (u16, Value) {
            let ct = match method {
                Method::PATCH => Some("application/merge-patch+json"),
                _ => Some("application/json"),
            };
            self.reply(method, path_query, ct, body)
        }

        fn reply(
            &mut self,
            method: Method,
            path_query: &str,
            ct: Option<&str>,
            body: Option<Value>,
        ) -> (u16, Value) {
            match self.send(method, path_query, ct, body) {
                Outcome::Done(r) => (r.status, r.json_body().cloned().unwrap_or(Value::Null)),
                other => panic!("expected a plain answer, got {other:?}"),
            }
        }
    }

    const CMS: &str = "/api/v1/namespaces/default/configmaps";

    fn cm(name: &str, labels: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels}, "data": {"k": "v"}})
    }

    #[test]
    fn label_selectors_parse_and_match() {
        let obj = json!({"metadata": {"labels": {"app": "web", "tier": "front"}}});
        let cases = [
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("app in (web,db)", true),
            ("app notin (web)", false),
            ("tier", true),
            ("!tier", false),
            ("!missing", true),
            ("app=web,tier=back", false),
            ("missing notin (x)", true),
            ("", true),
        ];
        for (selector, want) in cases {
            let reqs = parse_label_selector(selector).expect(selector);
            assert_eq!(labels_match(&reqs, &obj), want, "{selector}");
        }
        for bad in ["app in web)", "a b in (x)", "=x", "app=not valid"] {
            assert!(parse_label_selector(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn field_selectors_depend_on_the_type() {
        let f = Fixture::new();
        let pods = discovery::find(&f.cluster, "", "v1", "pods").expect("pods");
        let cms = discovery::find(&f.cluster, "", "v1", "configmaps").expect("configmaps");
        let events = discovery::find(&f.cluster, "", "v1", "events").expect("events");
        let pod = json!({"metadata": {"name": "p", "namespace": "n"}, "spec": {"nodeName": "node-1"}, "status": {"phase": "Running"}});
        let cases = [
            (&pods, "spec.nodeName=node-1", Some(true)),
            (&pods, "status.phase!=Running", Some(false)),
            (&pods, "metadata.name=p,metadata.namespace=n", Some(true)),
            (&cms, "spec.nodeName=node-1", None),
            (&events, "involvedObject.name=p", Some(false)),
        ];
        for (rt, selector, want) in cases {
            let got = parse_field_selector(selector, rt)
                .ok()
                .map(|reqs| fields_match(&reqs, &pod));
            assert_eq!(got, want, "{selector}");
        }
    }

    #[test]
    fn crud_with_conflicts_and_not_found() {
        let mut f = Fixture::new();
        let (code, created) = f.call(Method::POST, CMS, Some(cm("a", json!({"app": "x"}))));
        assert_eq!(code, 201, "{created}");
        assert_eq!(created["metadata"]["managedFields"][0]["manager"], "tester");
        assert_eq!(f.call(Method::POST, CMS, Some(cm("a", json!({})))).0, 409);
        let (code, got) = f.call(Method::GET, &format!("{CMS}/a"), None);
        assert_eq!((code, got["data"]["k"].as_str()), (200, Some("v")));
        let mut stale = got.clone();
        stale["metadata"]["resourceVersion"] = json!("1");
        stale["data"]["k"] = json!("w");
        let (code, err) = f.call(Method::PUT, &format!("{CMS}/a"), Some(stale));
        assert_eq!((code, err["reason"].as_str()), (409, Some("Conflict")));
        let mut fresh = got.clone();
        fresh["data"]["k"] = json!("w");
        let (code, put) = f.call(Method::PUT, &format!("{CMS}/a"), Some(fresh));
        assert_eq!((code, put["data"]["k"].as_str()), (200, Some("w")));
        let (code, patched) = f.call(
            Method::PATCH,
            &format!("{CMS}/a"),
            Some(json!({"data": {"k": null, "n": "1"}})),
        );
        assert_eq!((code, patched["data"].clone()), (200, json!({"n": "1"})));
        let (code, gone) = f.call(Method::DELETE, &format!("{CMS}/a"), None);
        assert_eq!((code, gone["status"].as_str()), (200, Some("Success")));
        let (code, err) = f.call(Method::GET, &format!("{CMS}/a"), None);
        assert_eq!(code, 404);
        assert_eq!(err["message"], "configmaps \"a\" not found");
        assert_eq!(
            f.call(Method::GET, "/api/v1/namespaces/default/widgets", None)
                .0,
            404
        );
    }

    #[test]
    fn creates_check_names_and_namespaces() {
        let mut f = Fixture::new();
        let (code, err) = f.call(Method::POST, CMS, Some(cm("Bad_Name", json!({}))));
        assert_eq!((code, err["reason"].as_str()), (422, Some("Invalid")));
        assert_eq!(err["details"]["causes"][0]["field"], "metadata.name");
        let (code, err) = f.call(
            Method::POST,
            "/api/v1/namespaces/nope/configmaps",
            Some(cm("a", json!({}))),
        );
        assert_eq!(
            (code, err["message"].as_str()),
            (404, Some("namespaces \"nope\" not found"))
        );
        let (code, made) = f.call(
            Method::POST,
            CMS,
            Some(json!({"metadata": {"generateName": "gen-"}})),
        );
        assert_eq!(code, 201);
        assert!(made["metadata"]["name"]
            .as_str()
            .is_some_and(|n| n.starts_with("gen-") && n.len() == 9));
        let (code, dry) = f.call(
            Method::POST,
            &format!("{CMS}?dryRun=All"),
            Some(cm("dry", json!({}))),
        );
        assert_eq!(code, 201);
        assert!(dry["metadata"]["uid"].is_string());
        assert_eq!(
            f.call(Method::GET, &format!("{CMS}/dry"), None).0,
            404,
            "a dry run stores nothing"
        );
        let (code, _) = f.call(Method::DELETE, "/api/v1/namespaces/default", None);
        assert_eq!(code, 403, "default cannot be deleted");
    }

    #[test]
    fn lists_select_and_page() {
        let mut f = Fixture::new();
        for (name, app) in [("a", "x"), ("b", "y"), ("c", "x")] {
            assert_eq!(
                f.call(Method::POST, CMS, Some(cm(name, json!({"app": app}))))
                    .0,
                201
            );
        }
        let names = |v: &Value| -> Vec<String> {
            v["items"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|i| i["metadata"]["name"].as_str().map(str::to_string))
                .collect()
        };
        let (_, list) = f.call(Method::GET, &format!("{CMS}?labelSelector=app%3Dx"), None);
        assert_eq!(names(&list), ["a", "c"]);
        assert_eq!(list["kind"], "ConfigMapList");
        assert!(list["metadata"]["resourceVersion"].is_string());
        let (_, page) = f.call(Method::GET, &format!("{CMS}?limit=2"), None);
        assert_eq!(names(&page), ["a", "b"]);
        let token = page["metadata"]["continue"]
            .as_str()
            .expect("continue token")
            .to_string();
        let (_, rest) = f.call(
            Method::GET,
            &format!("{CMS}?limit=2&continue={token}"),
            None,
        );
        assert_eq!(names(&rest), ["c"]);
        let (_, all) = f.call(
            Method::GET,
            "/api/v1/configmaps?fieldSelector=metadata.name%3Db",
            None,
        );
        assert_eq!(names(&all), ["b"]);
        let (code, _) = f.call(
            Method::GET,
            &format!("{CMS}?fieldSelector=spec.x%3D1"),
            None,
        );
        assert_eq!(code, 400);
    }

    #[test]
    fn status_subresource_changes_only_status() {
        let mut f = Fixture::new();
        let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
                         "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}}},
                         "status": {"active": 5}});
        let (code, created) = f.call(
            Method::POST,
            "/apis/batch/v1/namespaces/default/jobs",
            Some(job),
        );
        assert_eq!(code, 201);
        assert!(
            created.get("status").is_none(),
            "status is not set on create"
        );
        let (code, s) = f.call(
            Method::PATCH,
            "/apis/batch/v1/namespaces/default/jobs/j/status",
            Some(json!({"status": {"active": 1}, "spec": {"parallelism": 9}})),
        );
        assert_eq!(code, 200);
        assert_eq!(s["status"]["active"], 1);
        assert_ne!(
            s["spec"]["parallelism"], 9,
            "spec is not written through status"
        );
        let (_, main) = f.call(
            Method::PATCH,
            "/apis/batch/v1/namespaces/default/jobs/j",
            Some(json!({"status": {"active": 7}, "spec": {"parallelism": 2}})),
        );
        assert_eq!(
            (
                main["status"]["active"].as_i64(),
                main["spec"]["parallelism"].as_i64()
            ),
            (Some(1), Some(2))
        );
    }

    #[test]
    fn patch_flavours() {
        let doc = json!({"a": {"b": 1}, "l": [{"name": "x", "v": 1}, {"name": "y", "v": 2}], "s": [1, 2]});
        let mut merged = doc.clone();
        merge_patch(&mut merged, &json!({"a": {"b": null, "c": 2}, "s": [3]}));
        assert_eq!(merged, json!({"a": {"c": 2}, "l": doc["l"], "s": [3]}));
        let mut strategic = doc.clone();
        strategic_merge_patch(
            &mut strategic,
            &json!({"$setElementOrder/l": [{"name": "y"}], "l": [{"name": "y", "v": 3}, {"name": "x", "$patch": "delete"}]}),
        );
        assert_eq!(strategic["l"], json!([{"name": "y", "v": 3}]));
        assert!(strategic.get("$setElementOrder/l").is_none());
        let patched = json_patch(
            &doc,
            &json!([
                {"op": "add", "path": "/s/-", "value": 9},
                {"op": "replace", "path": "/a/b", "value": 5},
                {"op": "remove", "path": "/l/0"},
                {"op": "test", "path": "/a/b", "value": 5}
            ]),
        )
        .expect("patch applies");
        assert_eq!(
            patched,
            json!({"a": {"b": 5}, "l": [{"name": "y", "v": 2}], "s": [1, 2, 9]})
        );
        assert!(json_patch(&doc, &json!([{"op": "test", "path": "/a/b", "value": 2}])).is_err());
    }

    #[test]
    fn server_side_apply_over_the_api() {
        let mut f = Fixture::new();
        let apply_ct = Some("application/apply-patch+yaml");
        let url = "/apis/apps/v1/namespaces/default/deployments/d";
        let config = |replicas: i64| {
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
                   "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "d"}},
                            "template": {"metadata": {"labels": {"app": "d"}},
                                         "spec": {"containers": [{"name": "c", "image": "i"}]}}}})
        };
        let (code, err) = f.reply(Method::PATCH, url, apply_ct, Some(config(1)));
        assert_eq!(
            (code, err["reason"].as_str()),
            (400, Some("BadRequest")),
            "fieldManager is required"
        );
        let (code, made) = f.reply(
            Method::PATCH,
            &format!("{url}?fieldManager=kubectl"),
            apply_ct,
            Some(config(1)),
        );
        assert_eq!(code, 201, "{made}");
        let (code, err) = f.reply(
            Method::PATCH,
            &format!("{url}?fieldManager=other"),
            apply_ct,
            Some(config(2)),
        );
        assert_eq!(code, 409);
        assert_eq!(
            err["message"],
            "Apply failed with 1 conflict: conflict with \"kubectl\": .spec.replicas"
        );
        assert_eq!(
            err["details"]["causes"][0],
            json!({"reason": "FieldManagerConflict", "message": "conflict with \"kubectl\"", "field": ".spec.replicas"})
        );
        let (code, forced) = f.reply(
            Method::PATCH,
            &format!("{url}?fieldManager=other&force=true"),
            apply_ct,
            Some(config(2)),
        );
        assert_eq!((code, forced["spec"]["replicas"].as_i64()), (200, Some(2)));
        let yaml = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: d\nspec:\n  replicas: 4\n  selector:\n    matchLabels: {app: d}\n  template:\n    metadata:\n      labels: {app: d}\n    spec:\n      containers: [{name: c, image: i}]\n";
        let req = KubeRequest {
            method: Method::PATCH,
            path: url.into(),
            query: vec![("fieldManager".into(), "other".into())],
            content_type: apply_ct.map(str::to_string),
            accept: None,
            user_agent: None,
            body: yaml.as_bytes().to_vec(),
        };
        match f.handle(&req) {
            Outcome::Done(r) => assert_eq!(
                r.json_body().map(|b| b["spec"]["replicas"].clone()),
                Some(json!(4))
            ),
            other => panic!("unexpected {other:?}"),
        }
        let (code, scale) = f.call(Method::GET, &format!("{url}/scale"), None);
        assert_eq!((code, scale["spec"]["replicas"].as_i64()), (200, Some(4)));
        let (code, scaled) = f.call(
            Method::PATCH,
            &format!("{url}/scale"),
            Some(json!({"spec": {"replicas": 6}})),
        );
        assert_eq!((code, scaled["spec"]["replicas"].as_i64()), (200, Some(6)));
    }

    #[test]
    fn crds_register_types_and_take_their_objects_along() {
        let mut f = Fixture::new();
        let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                     "names": {"plural": "widgets", "kind": "Widget"},
                     "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}}}]}});
        let crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
        let (code, made) = f.call(Method::POST, crds, Some(crd.clone()));
        assert_eq!(code, 201, "{made}");
        assert_eq!(made["status"]["conditions"][1]["type"], "Established");
        assert_eq!(made["status"]["acceptedNames"]["singular"], "widget");
        let mut bad = crd.clone();
        bad["metadata"]["name"] = json!("wrong");
        assert_eq!(f.call(Method::POST, crds, Some(bad)).0, 422);
        let widgets = "/apis/example.com/v1/namespaces/default/widgets";
        let (code, w) = f.call(Method::POST, widgets, Some(json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 1}})));
        assert_eq!((code, w["spec"]["size"].as_i64()), (201, Some(1)));
        assert_eq!(
            f.call(Method::DELETE, &format!("{crds}/widgets.example.com"), None)
                .0,
            200
        );
        assert_eq!(f.call(Method::GET, widgets, None).0, 404);
        assert!(f
            .cluster
            .store
            .list("example.com", "widgets", None)
            .is_empty());
    }

    #[test]
    fn deletes_follow_the_propagation_policy() {
        let mut f = Fixture::new();
        let (_, owner) = f.call(Method::POST, CMS, Some(cm("owner", json!({}))));
        let uid = owner["metadata"]["uid"].clone();
        let mut child = cm("child", json!({}));
        child["metadata"]["ownerReferences"] =
            json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid}]);
        assert_eq!(f.call(Method::POST, CMS, Some(child)).0, 201);
        let (code, held) = f.call(
            Method::DELETE,
            &format!("{CMS}/owner?propagationPolicy=Foreground"),
            None,
        );
        assert_eq!(code, 200);
        assert_eq!(
            held["metadata"]["finalizers"],
            json!(["foregroundDeletion"])
        );
        assert!(held["metadata"]["deletionTimestamp"].is_string());
        let (code, orphaning) = f.call(
            Method::DELETE,
            &format!("{CMS}/child"),
            Some(json!({"propagationPolicy": "Orphan"})),
        );
        assert_eq!(code, 200);
        assert_eq!(orphaning["metadata"]["finalizers"], json!(["orphan"]));
        let (_, plain) = f.call(Method::POST, CMS, Some(cm("plain", json!({}))));
        let (code, _) = f.call(
            Method::DELETE,
            &format!("{CMS}/plain"),
            Some(json!({"preconditions": {"uid": "nope"}})),
        );
        assert_eq!(code, 409);
        let uid = plain["metadata"]["uid"].as_str().unwrap_or_default();
        let (code, gone) = f.call(
            Method::DELETE,
            &format!("{CMS}/plain?propagationPolicy=Background"),
            Some(json!({"preconditions": {"uid": uid}})),
        );
        assert_eq!(
            (code, gone["status"].as_str()),
            (200, Some("Success")),
            "no finalizers: gone at once"
        );
        // Jobs still orphan their pods by default.
        let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
                         "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}}}});
        f.call(
            Method::POST,
            "/apis/batch/v1/namespaces/default/jobs",
            Some(job),
        );
        let (_, job) = f.call(
            Method::DELETE,
            "/apis/batch/v1/namespaces/default/jobs/j",
            None,
        );
        assert_eq!(job["metadata"]["finalizers"], json!(["orphan"]));
    }

    #[test]
    fn watches_replay_changes_and_report_selector_transitions() {
        let mut f = Fixture::new();
        f.call(Method::POST, CMS, Some(cm("a", json!({"app": "x"}))));
        let req = KubeRequest {
            method: Method::GET,
            path: CMS.into(),
            query: crate::http::parse_query("watch=true&labelSelector=app%3Dx"),
            content_type: None,
            accept: None,
            user_agent: None,
            body: Vec::new(),
        };
        let Outcome::Watch(mut w, initial) = f.handle(&req) else {
            panic!("expected a watch");
        };
        assert_eq!(
            initial
                .iter()
                .map(|e| e["type"].clone())
                .collect::<Vec<_>>(),
            [json!("ADDED")]
        );
        f.call(Method::POST, CMS, Some(cm("b", json!({"app": "y"}))));
        f.call(
            Method::PATCH,
            &format!("{CMS}/b"),
            Some(json!({"metadata": {"labels": {"app": "x"}}})),
        );
        f.call(
            Method::PATCH,
            &format!("{CMS}/a"),
            Some(json!({"metadata": {"labels": {"app": "z"}}})),
        );
        f.call(Method::DELETE, &format!("{CMS}/b"), None);
        let events: Vec<(String, String)> = w
            .poll(&f.cluster, Utc::now())
            .iter()
            .map(|e| {
                (
                    e["type"].as_str().unwrap_or_default().to_string(),
                    e["object"]["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                )
            })
            .collect();
        let want: Vec<(String, String)> = [("ADDED", "b"), ("DELETED", "a"), ("DELETED", "b")]
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        assert_eq!(events, want);
        let mut old = req.clone();
        old.query = crate::http::parse_query("watch=1&resourceVersion=1");
        let Outcome::Watch(_, replay) = f.handle(&old) else {
            panic!("expected a watch");
        };
        assert!(!replay.is_empty(), "changes after version 1 are replayed");
    }

    #[test]
    fn discovery_paths_answer() {
        let mut f = Fixture::new();
        let (code, v) = f.call(Method::GET, "/version", None);
        assert_eq!(
            (code, v["gitVersion"].as_str()),
            (200, Some(f.cluster.version.as_str()))
        );
        let (code, list) = f.call(Method::GET, "/apis/batch/v1", None);
        assert_eq!(
            (code, list["kind"].as_str()),
            (200, Some("APIResourceList"))
        );
        assert_eq!(f.call(Method::GET, "/apis/nothing/v1", None).0, 404);
        assert_eq!(f.call(Method::POST, "/version", None).0, 405);
    }

    #[test]
    fn exec_needs_a_running_pod() {
        let mut f = Fixture::new();
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}});
        assert_eq!(
            f.call(Method::POST, "/api/v1/namespaces/default/pods", Some(pod))
                .0,
            201
        );
        let (code, err) = f.call(
            Method::GET,
            "/api/v1/namespaces/default/pods/p/exec?command=ls",
            None,
        );
        assert_eq!(code, 400);
        assert_eq!(
            err["message"],
            "unable to upgrade connection: pod p is not running"
        );
        let key = ObjKey::new("", "pods", "default", "p");
        let mut running = f.cluster.store.get(&key).cloned().expect("pod");
        running["status"] = json!({"phase": "Running"});
        f.cluster.store.update(&key, running);
        match f.send(
            Method::GET,
            "/api/v1/namespaces/default/pods/p/exec?command=ls&command=-l&stdout=true",
            None,
            None,
        ) {
            Outcome::Exec(target) => assert_eq!(target.command, ["ls", "-l"]),
            other => panic!("expected exec, got {other:?}"),
        }
        assert_eq!(
            f.call(
                Method::GET,
                "/api/v1/namespaces/default/pods/p/log?previous=true",
                None
            )
            .0,
            400
        );
    }

    #[test]
    fn defaults_causes_keep_their_kind() {
        let f = Fixture::new();
        let jobs = discovery::find(&f.cluster, "batch", "v1", "jobs").expect("jobs");
        let t = Target {
            rt: jobs,
            namespace: Some("default".into()),
            name: Some("x".into()),
            sub: None,
            watch_path: false,
        };
        let object = json!({"spec": {"parallelism": 3}});
        let cases = [
            (
                "spec.parallelism",
                "field is immutable",
                "FieldValueInvalid",
                "Invalid value: 3: field is immutable",
            ),
            (
                "spec.selector",
                "Required value",
                "FieldValueRequired",
                "Required value",
            ),
            (
                "spec.x",
                "Invalid value: \"a\": bad",
                "FieldValueInvalid",
                "Invalid value: \"a\": bad",
            ),
            (
                "spec.restartPolicy",
                "Unsupported value: \"Always\": supported values: \"Never\"",
                "FieldValueNotSupported",
                "Unsupported value: \"Always\": supported values: \"Never\"",
            ),
            (
                "spec",
                "Forbidden: no",
                "FieldValueForbidden",
                "Forbidden: no",
            ),
        ];
        for (field, message, reason, shown) in cases {
            let e =
                defaults_invalid(&t, "x", &object, vec![(field.into(), message.into())]).to_value();
            let cause = &e["details"]["causes"][0];
            assert_eq!(
                (cause["reason"].as_str(), cause["message"].as_str()),
                (Some(reason), Some(shown)),
                "{message}"
            );
            assert_eq!(
                e["message"],
                format!("Job.batch \"x\" is invalid: {field}: {shown}")
            );
        }
    }

    #[test]
    fn logs_tail_and_follow_until_the_pod_finishes() {
        let cases = [
            ("a\nb\nc\n", None, "a\nb\nc\n"),
            ("a\nb\nc\n", Some(2), "b\nc\n"),
            ("a\nb\nc", Some(1), "c"),
            ("a\n", Some(5), "a\n"),
            ("a\n", Some(0), ""),
        ];
        for (text, lines, want) in cases {
            assert_eq!(tail(text, lines), want, "{text:?} {lines:?}");
        }
        let mut f = Fixture::new();
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}});
        f.call(Method::POST, "/api/v1/namespaces/default/pods", Some(pod));
        let started = json!({"phase": "Running", "containerStatuses": [
            {"name": "c", "ready": true, "restartCount": 0, "image": "i", "imageID": "", "state": {"running": {"startedAt": timestamp(Utc::now())}}}
        ]});
        let (code, _) = f.call(
            Method::PATCH,
            "/api/v1/namespaces/default/pods/p/status",
            Some(json!({"status": started})),
        );
        assert_eq!(code, 200);
        let Outcome::FollowLog(mut follow) = f.send(
            Method::GET,
            "/api/v1/namespaces/default/pods/p/log?follow=true",
            None,
            None,
        ) else {
            panic!("expected a followed log");
        };
        assert_eq!(follow.container, "c");
        assert!(
            !follow_poll(&f.cluster, &mut follow, Utc::now()).1,
            "still running"
        );
        f.call(
            Method::PATCH,
            "/api/v1/namespaces/default/pods/p/status",
            Some(json!({"status": {"phase": "Succeeded"}})),
        );
        assert!(
            follow_poll(&f.cluster, &mut follow, Utc::now()).1,
            "finished"
        );
        f.call(Method::DELETE, "/api/v1/namespaces/default/pods/p", None);
        assert!(follow_poll(&f.cluster, &mut follow, Utc::now()).1, "gone");
        assert_eq!(
            f.call(
                Method::GET,
                "/api/v1/namespaces/default/pods/nope/log",
                None
            )
            .0,
            404
        );
    }

    #[test]
    fn events_are_shared_between_core_and_events_k8s_io() {
        let mut f = Fixture::new();
        let ev = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e"},
                        "involvedObject": {"kind": "Pod", "name": "p"}, "message": "hello", "reason": "R"});
        assert_eq!(
            f.call(Method::POST, "/api/v1/namespaces/default/events", Some(ev))
                .0,
            201
        );
        let (code, v1) = f.call(
            Method::GET,
            "/apis/events.k8s.io/v1/namespaces/default/events/e",
            None,
        );
        assert_eq!(code, 200);
        assert_eq!(
            (
                v1["note"].as_str(),
                v1["regarding"]["name"].as_str(),
                v1["apiVersion"].as_str()
            ),
            (Some("hello"), Some("p"), Some("events.k8s.io/v1"))
        );
        let (_, by_object) = f.call(
            Method::GET,
            "/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3Dp",
            None,
        );
        assert_eq!(by_object["items"].as_array().map(Vec::len), Some(1));
    }
}
