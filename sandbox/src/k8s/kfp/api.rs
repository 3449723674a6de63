//! The handlers of KFP's v2beta1 API: pipeline packages uploaded as forms, pipelines and
//! their versions, experiments and runs, with KFP's list options (paging, sorting, the
//! JSON `filter`) and grpc-gateway's strict JSON bodies (an unknown field is refused, as
//! protojson refuses it). Answers are the objects in KFP's wire form: snake_case names,
//! RFC 3339 timestamps, enums as strings.

use chrono::{DateTime, Utc};
use serde::Deserialize as _;
use serde_json::{json, Map, Value};

use super::{
    multipart, Experiment, KfpError, KfpRequest, Pipeline, PipelineVersion, Run, StateEntry,
    DEFAULT_EXPERIMENT, DEFAULT_SERVICE_ACCOUNT, EPOCH,
};
use crate::common::ids::new_uid;
use crate::http::ApiResponse;
use crate::k8s::store::timestamp;
use crate::k8s::{obj, ClusterState, ObjKey};

/// The largest package the upload handlers take, as KFP's `MaxFileLength`.
const MAX_UPLOAD: usize = 32 << 20;
/// The form field a package comes in.
const UPLOAD_FIELD: &str = "uploadfile";

/// v2beta1's `GetHealthzResponse` (the build's commit and tag are v1's healthz only).
pub(super) fn healthz() -> Value {
    json!({
        "multi_user": false,
        "pipeline_store": "database",
    })
}

/// The namespace a resource is stored in. KFP runs single-user (`multi_user: false`),
/// where it ignores the namespace clients send and keeps everything in the empty one.
fn single_user(_asked: Option<&str>) -> String {
    String::new()
}

fn now_ts(req: &KfpRequest<'_>) -> String {
    timestamp(req.now)
}

// ---- request bodies ----

/// What a JSON body may hold: scalars, free-form values (a `Struct` or a map), or
/// messages with known fields.
enum Field {
    Scalar,
    Free,
    Message(&'static [(&'static str, Field)]),
}

const PIPELINE_FIELDS: &[(&str, Field)] = &[
    ("pipeline_id", Field::Scalar),
    ("name", Field::Scalar),
    ("display_name", Field::Scalar),
    ("description", Field::Scalar),
    ("created_at", Field::Scalar),
    ("namespace", Field::Scalar),
    ("error", Field::Free),
];

const EXPERIMENT_FIELDS: &[(&str, Field)] = &[
    ("experiment_id", Field::Scalar),
    ("display_name", Field::Scalar),
    ("description", Field::Scalar),
    ("created_at", Field::Scalar),
    ("namespace", Field::Scalar),
    ("storage_state", Field::Scalar),
    ("last_run_created_at", Field::Scalar),
];

const VERSION_REFERENCE: &[(&str, Field)] = &[
    ("pipeline_id", Field::Scalar),
    ("pipeline_version_id", Field::Scalar),
];

const RUNTIME_CONFIG: &[(&str, Field)] = &[
    ("parameters", Field::Free),
    ("pipeline_root", Field::Scalar),
];

const RUN_FIELDS: &[(&str, Field)] = &[
    ("experiment_id", Field::Scalar),
    ("run_id", Field::Scalar),
    ("display_name", Field::Scalar),
    ("storage_state", Field::Scalar),
    ("description", Field::Scalar),
    ("pipeline_version_id", Field::Scalar),
    ("pipeline_spec", Field::Free),
    (
        "pipeline_version_reference",
        Field::Message(VERSION_REFERENCE),
    ),
    ("runtime_config", Field::Message(RUNTIME_CONFIG)),
    ("service_account", Field::Scalar),
    ("created_at", Field::Scalar),
    ("scheduled_at", Field::Scalar),
    ("finished_at", Field::Scalar),
    ("state", Field::Scalar),
    ("error", Field::Free),
    ("run_details", Field::Free),
    ("recurring_run_id", Field::Scalar),
    ("state_history", Field::Free),
];

/// `displayName` → `display_name`: protojson takes a field by its JSON name or its proto
/// name.
fn snake(key: &str) -> String {
    let mut out = String::with_capacity(key.len() + 4);
    for c in key.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// `(line L:C)` of a field's key in the body, as protojson points at it.
fn position(body: &str, key: &str) -> String {
    let needle = format!("\"{key}\"");
    let at = body.find(&needle).unwrap_or_default();
    let before = &body[..at];
    let line = before.matches('\n').count() + 1;
    let col = at - before.rfind('\n').map_or(0, |i| i + 1) + 1;
    format!("(line {line}:{col})")
}

fn normalize(
    value: &Value,
    fields: &'static [(&'static str, Field)],
    body: &str,
) -> Result<Value, KfpError> {
    let Some(map) = value.as_object() else {
        return Err(KfpError::invalid(format!(
            "proto: syntax error {}: unexpected token {value}",
            "(line 1:1)"
        )));
    };
    let mut out = Map::new();
    for (key, v) in map {
        let name = snake(key);
        let Some((field, kind)) = fields.iter().find(|(f, _)| *f == name) else {
            return Err(KfpError::invalid(format!(
                "proto: {}: unknown field \"{key}\"",
                position(body, key)
            )));
        };
        let v = match kind {
            Field::Message(inner) if !v.is_null() => normalize(v, inner, body)?,
            _ => v.clone(),
        };
        out.insert((*field).to_string(), v);
    }
    Ok(Value::Object(out))
}

/// The JSON body, its field names normalized to the proto names; unknown fields refused.
fn decode(
    req: &KfpRequest<'_>,
    fields: &'static [(&'static str, Field)],
) -> Result<Value, KfpError> {
    let text = String::from_utf8_lossy(req.body);
    if text.trim().is_empty() {
        return Ok(json!({}));
    }
    let value: Value = serde_json::from_str(&text).map_err(|e| {
        KfpError::invalid(format!(
            "proto: syntax error (line {}:{}): {e}",
            e.line(),
            e.column()
        ))
    })?;
    normalize(&value, fields, &text)
}

fn text(v: &Value, key: &str) -> String {
    v[key].as_str().unwrap_or_default().to_string()
}

// ---- list options ----

/// Applies `filter`, `sort_by`, `page_size` and `page_token` to a list of wire objects
/// and answers `{KEY: [...], total_size, next_page_token}`.
fn page(
    req: &KfpRequest<'_>,
    key: &str,
    mut items: Vec<Value>,
    default_sort: &str,
) -> Result<Value, KfpError> {
    if let Some(filter) = req.param("filter").filter(|f| !f.trim().is_empty()) {
        let parsed: Value = serde_json::from_str(filter).map_err(|_| {
            KfpError::invalid(format!(
                "Invalid input error: Failed to parse valid filter from {filter:?}"
            ))
        })?;
        let predicates = parsed["predicates"].as_array().cloned().unwrap_or_default();
        for p in &predicates {
            if p["key"].as_str().is_none_or(str::is_empty) {
                return Err(KfpError::invalid(format!(
                    "Invalid input error: Failed to parse valid filter from {filter:?}: a predicate has no key"
                )));
            }
        }
        items.retain(|item| predicates.iter().all(|p| matches(item, p)));
    }
    let sort_by = req.param("sort_by").unwrap_or(default_sort);
    let (field, desc) = match sort_by.trim().split_once(' ') {
        Some((f, dir)) => (f.trim(), dir.trim().eq_ignore_ascii_case("desc")),
        None => (sort_by.trim(), false),
    };
    let field = if field.is_empty() {
        "created_at"
    } else {
        field
    };
    items.sort_by(|a, b| {
        let ord = sort_key(&a[field]).cmp(&sort_key(&b[field]));
        if desc {
            ord.reverse()
        } else {
            ord
        }
    });
    let total = items.len();
    let start: usize = match req.param("page_token").filter(|t| !t.is_empty()) {
        Some(t) => t.parse().map_err(|_| {
            KfpError::invalid(format!(
                "Invalid input error: Failed to parse the page token {t:?}"
            ))
        })?,
        None => 0,
    };
    let size = req
        .param("page_size")
        .and_then(|s| s.parse::<usize>().ok())
        .filter(|s| *s > 0)
        .unwrap_or(total.max(1));
    let end = (start + size).min(total);
    let next = if end < total {
        end.to_string()
    } else {
        String::new()
    };
    let page: Vec<Value> = items
        .into_iter()
        .skip(start)
        .take(end.saturating_sub(start))
        .collect();
    Ok(json!({key: page, "total_size": total, "next_page_token": next}))
}

fn sort_key(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// One filter predicate (`{"key", "operation", "string_value" | "int_value" | …}`) on a
/// wire object.
fn matches(item: &Value, p: &Value) -> bool {
    let key = p["key"].as_str().unwrap_or_default();
    let have = match &item[key] {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    };
    let want = [
        "string_value",
        "stringValue",
        "int_value",
        "intValue",
        "long_value",
        "longValue",
        "timestamp_value",
        "timestampValue",
        "bool_value",
        "boolValue",
    ]
    .iter()
    .find_map(|k| match &p[*k] {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    })
    .unwrap_or_default();
    // The operation by name, or by its enum number as protojson also accepts.
    let op = match &p["operation"] {
        Value::String(s) => s.as_str(),
        Value::Number(n) => match n.as_i64() {
            Some(1) => "EQUALS",
            Some(2) => "NOT_EQUALS",
            Some(3) => "GREATER_THAN",
            Some(5) => "GREATER_THAN_EQUALS",
            Some(6) => "LESS_THAN",
            Some(7) => "LESS_THAN_EQUALS",
            Some(8) => "IN",
            Some(9) => "IS_SUBSTRING",
            _ => "",
        },
        _ => p["op"].as_str().unwrap_or("EQUALS"),
    };
    match op {
        "EQUALS" => have == want,
        "NOT_EQUALS" => have != want,
        "IS_SUBSTRING" => have.contains(&want),
        "GREATER_THAN" => have > want,
        "GREATER_THAN_EQUALS" => have >= want,
        "LESS_THAN" => have < want,
        "LESS_THAN_EQUALS" => have <= want,
        "IN" => {
            let values = if p["string_values"].is_null() {
                &p["stringValues"]["values"]
            } else {
                &p["string_values"]["values"]
            };
            obj::items(values).iter().any(|v| v.as_str() == Some(&have))
        }
        _ => false,
    }
}

// ---- pipelines ----

fn pipeline_json(p: &Pipeline) -> Value {
    json!({
        "pipeline_id": p.pipeline_id,
        "name": p.name,
        "display_name": p.display_name,
        "description": p.description,
        "created_at": p.created_at,
        "namespace": p.namespace,
    })
}

/// The version's `pipeline_spec`: the PipelineSpec, or with a platform document both.
fn version_json(v: &PipelineVersion) -> Value {
    let spec = match &v.platform {
        Some(platform) => json!({"pipeline_spec": v.spec, "platform_spec": platform}),
        None => v.spec.clone(),
    };
    json!({
        "pipeline_id": v.pipeline_id,
        "pipeline_version_id": v.pipeline_version_id,
        "name": v.name,
        "display_name": v.display_name,
        "description": v.description,
        "created_at": v.created_at,
        "package_url": {"pipeline_url": ""},
        "pipeline_spec": spec,
    })
}

/// A package's documents: the PipelineSpec and the platform document, if any.
pub(crate) fn parse_package(data: &[u8]) -> Result<(Value, Option<Value>), String> {
    let text = std::str::from_utf8(data).map_err(|e| format!("the file is not UTF-8: {e}"))?;
    let mut spec = None;
    let mut platform = None;
    for doc in serde_yaml_ng::Deserializer::from_str(text) {
        let value =
            Value::deserialize(doc).map_err(|e| format!("unable to parse the YAML: {e}"))?;
        if value.is_null() {
            continue;
        }
        if value.get("platforms").is_some() {
            platform = Some(value);
        } else if spec.is_none() {
            spec = Some(value);
        } else {
            return Err("the package holds more than one pipeline spec".into());
        }
    }
    let spec = spec.ok_or("the package holds no pipeline spec")?;
    if !spec.is_object() {
        return Err("the pipeline spec is not a YAML mapping".into());
    }
    for required in ["pipelineInfo", "root"] {
        if spec.get(required).is_none() {
            return Err(format!("the pipeline spec has no {required}"));
        }
    }
    if spec["pipelineInfo"]["name"]
        .as_str()
        .is_none_or(str::is_empty)
    {
        return Err("pipelineInfo.name is empty".into());
    }
    Ok((spec, platform))
}

/// The uploaded package's file name and bytes.
fn uploaded(req: &KfpRequest<'_>) -> Result<(String, Vec<u8>), KfpError> {
    if req.body.len() > MAX_UPLOAD + 64 * 1024 {
        return Err(too_large());
    }
    let parts = multipart::parse(req.content_type.unwrap_or_default(), req.body).map_err(|e| {
        KfpError::invalid(format!(
            "Failed to read the pipeline package from the form: {e}"
        ))
    })?;
    let part = parts
        .into_iter()
        .find(|p| p.name == UPLOAD_FIELD)
        .ok_or_else(|| {
            KfpError::invalid(
                "Failed to read the pipeline package from the form: http: no such file",
            )
        })?;
    if part.data.len() > MAX_UPLOAD {
        return Err(too_large());
    }
    Ok((part.filename.unwrap_or_default(), part.data))
}

/// RESOURCE_EXHAUSTED, which the upload handlers answer with 413.
fn too_large() -> KfpError {
    KfpError {
        code: 8,
        message: format!(
            "File size too large. Maximum supported size: {}MB",
            MAX_UPLOAD >> 20
        ),
    }
}

/// `gpu_pipeline.yaml` → `gpu_pipeline` (`.tar.gz` packages lose both extensions).
fn stem(filename: &str) -> String {
    let base = filename.rsplit(['/', '\\']).next().unwrap_or(filename);
    let base = base.strip_suffix(".tar.gz").unwrap_or(base);
    match base.rsplit_once('.') {
        Some((s, _)) if !s.is_empty() => s.to_string(),
        _ => base.to_string(),
    }
}

pub(super) fn upload_pipeline(
    cluster: &mut ClusterState,
    req: &KfpRequest<'_>,
) -> Result<ApiResponse, KfpError> {
    let (filename, data) = uploaded(req)?;
    let (spec, platform) = parse_package(&data).map_err(|why| {
        KfpError::invalid(format!(
            "Failed to create a pipeline and a pipeline version. The pipeline spec is invalid.: Invalid input error: {why}"
        ))
    })?;
    let namespace = single_user(req.param("namespace"));
    let name = req
        .param("name")
        .or(req.param("display_name"))
        .filter(|n| !n.is_empty())
        .map_or_else(|| stem(&filename), str::to_string);
    if name.is_empty() {
        return Err(KfpError::invalid(
            "Failed to create a pipeline and a pipeline version: Invalid input error: pipeline's name cannot be empty",
        ));
    }
    let display_name = req
        .param("display_name")
        .filter(|n| !n.is_empty())
        .unwrap_or(&name)
        .to_string();
    let state = &mut cluster.kfp;
    if state
        .pipelines
        .values()
        .any(|p| p.name == name && p.namespace == namespace)
    {
        return Err(KfpError::exists(format!(
            "Failed to create a pipeline and a pipeline version: Already exist error: Failed to create a new pipeline. The name {name} already exists. Please specify a new name"
        )));
    }
    let description = req.param("description").unwrap_or_default().to_string();
    let pipeline = Pipeline {
        pipeline_id: new_uid(),
        name: name.clone(),
        display_name: display_name.clone(),
        description: description.clone(),
        created_at: now_ts(req),
        namespace,
    };
    let version = PipelineVersion {
        pipeline_id: pipeline.pipeline_id.clone(),
        pipeline_version_id: new_uid(),
        name,
        display_name,
        description,
        created_at: now_ts(req),
        spec,
        platform,
    };
    let answer = pipeline_json(&pipeline);
    state
        .versions
        .insert(version.pipeline_version_id.clone(), version);
    state
        .pipelines
        .insert(pipeline.pipeline_id.clone(), pipeline);
    Ok(ApiResponse::json(200, answer))
}

pub(super) fn upload_version(
    cluster: &mut ClusterState,
    req: &KfpRequest<'_>,
) -> Result<ApiResponse, KfpError> {
    let pipeline_id = req
        .param("pipelineid")
        .filter(|p| !p.is_empty())
        .ok_or_else(|| {
            KfpError::invalid(
                "Failed to create a pipeline version: Invalid input error: Pipeline id is empty. Please specify a valid pipeline id",
            )
        })?
        .to_string();
    let (filename, data) = uploaded(req)?;
    if !cluster.kfp.pipelines.contains_key(&pipeline_id) {
        // The upload handler answers a bad `pipelineid` as a bad request, not NOT_FOUND.
        return Err(KfpError::invalid(format!(
            "Failed to create a pipeline version: Invalid input error: Failed to get pipeline with id {pipeline_id}: ResourceNotFoundError: Pipeline {pipeline_id} not found"
        )));
    }
    let (spec, platform) = parse_package(&data).map_err(|why| {
        KfpError::invalid(format!(
            "Failed to create a pipeline version. The pipeline spec is invalid.: Invalid input error: {why}"
        ))
    })?;
    let name = req
        .param("name")
        .or(req.param("display_name"))
        .filter(|n| !n.is_empty())
        .map_or_else(|| stem(&filename), str::to_string);
    let display_name = req
        .param("display_name")
        .filter(|n| !n.is_empty())
        .unwrap_or(&name)
        .to_string();
    if cluster
        .kfp
        .versions
        .values()
        .any(|v| v.pipeline_id == pipeline_id && v.name == name)
    {
        return Err(KfpError::exists(format!(
            "Failed to create a pipeline version: Already exist error: Failed to create a new pipeline version. The name {name} already exists in pipeline {pipeline_id}. Please specify a new name"
        )));
    }
    let version = PipelineVersion {
        pipeline_id,
        pipeline_version_id: new_uid(),
        name,
        display_name,
        description: req.param("description").unwrap_or_default().to_string(),
        created_at: now_ts(req),
        spec,
        platform,
    };
    let answer = version_json(&version);
    cluster
        .kfp
        .versions
        .insert(version.pipeline_version_id.clone(), version);
    Ok(ApiResponse::json(200, answer))
}

pub(super) fn create_pipeline(
    cluster: &mut ClusterState,
    req: &KfpRequest<'_>,
) -> Result<Value, KfpError> {
    let body = decode(req, PIPELINE_FIELDS)?;
    let name = match text(&body, "name") {
        n if n.is_empty() => text(&body, "display_name"),
        n => n,
    };
    if name.is_empty() {
        return Err(KfpError::invalid(
            "Failed to create a pipeline: Invalid input error: pipeline's name cannot be empty",
        ));
    }
    let namespace = single_user(body["namespace"].as_str());
    if cluster
        .kfp
        .pipelines
        .values()
        .any(|p| p.name == name && p.namespace == namespace)
    {
        return Err(KfpError::exists(format!(
            "Failed to create a pipeline: Already exist error: Failed to create a new pipeline. The name {name} already exists. Please specify a new name"
        )));
    }
    let display_name = match text(&body, "display_name") {
        d if d.is_empty() => name.clone(),
        d => d,
    };
    let pipeline = Pipeline {
        pipeline_id: new_uid(),
        name,
        display_name,
        description: text(&body, "description"),
        created_at: now_ts(req),
        namespace,
    };
    let answer = pipeline_json(&pipeline);
    cluster
        .kfp
        .pipelines
        .insert(pipeline.pipeline_id.clone(), pipeline);
    Ok(answer)
}

fn pipeline_missing(id: &str) -> KfpError {
    KfpError::not_found(format!(
        "Failed to get pipeline with id {id}: ResourceNotFoundError: Pipeline {id} not found"
    ))
}

pub(super) fn list_pipelines(
    cluster: &ClusterState,
    req: &KfpRequest<'_>,
) -> Result<Value, KfpError> {
    let items = cluster.kfp.pipelines.values().map(pipeline_json).collect();
    page(req, "pipelines", items, "created_at")
}

pub(super) fn get_pipeline(cluster: &ClusterState, id: &str) -> Result<Value, KfpError> {
    cluster
        .kfp
        .pipelines
        .get(id)
        .map(pipeline_json)
        .ok_or_else(|| pipeline_missing(id))
}

pub(super) fn pipeline_by_name(
    cluster: &ClusterState,
    req: &KfpRequest<'_>,
    name: &str,
) -> Result<Value, KfpError> {
    let namespace = single_user(req.param("namespace"));
    cluster
        .kfp
        .pipelines
        .values()
        .find(|p| p.name == name && p.namespace == namespace)
        .map(pipeline_json)
        .ok_or_else(|| {
            KfpError::not_found(format!(
                "Failed to get a pipeline with name {name} and namespace {namespace:?}: ResourceNotFoundError: Namespace/pipeline {namespace}/{name} not found"
            ))
        })
}

pub(super) fn delete_pipeline(
    cluster: &mut ClusterState,
    req: &KfpRequest<'_>,
    id: &str,
) -> Result<Value, KfpError> {
    if !cluster.kfp.pipelines.contains_key(id) {
        return Err(pipeline_missing(id).with_prefix("Failed to delete pipeline"));
    }
    let cascade = matches!(req.param("cascade"), Some("true" | "1" | "True"));
    let versions: Vec<String> = cluster
        .kfp
        .versions
        .values()
        .filter(|v| v.pipeline_id == id)
        .map(|v| v.pipeline_version_id.clone())
        .collect();
    if !versions.is_empty() && !cascade {
        return Err(KfpError::precondition(format!(
            "Failed to delete pipeline with id {id}: Failed precondition error: Pipeline {id} has pipeline versions. Delete them first or use cascade"
        )));
    }
    for v in versions {
        cluster.kfp.versions.remove(&v);
    }
    cluster.kfp.pipelines.remove(id);
    Ok(json!({}))
}

impl KfpError {
    /// The same error behind the call's own prefix (`Failed to delete pipeline: …`).
    fn with_prefix(mut self, prefix: &str) -> KfpError {
        self.message = format!("{prefix}: {}", self.message);
        self
    }
}

pub(super) fn list_versions(
    cluster: &ClusterState,
    req: &KfpRequest<'_>,
    id: &str,
) -> Result<Value, KfpError> {
    if !cluster.kfp.pipelines.contains_key(id) {
        return Err(pipeline_missing(id).with_prefix("Failed to list pipeline versions"));
    }
    let items = cluster
        .kfp
        .versions
        .values()
        .filter(|v| v.pipeline_id == id)
        .map(version_json)
        .collect();
    page(req, "pipeline_versions", items, "created_at")
}

fn version_missing(vid: &str) -> KfpError {
    KfpError::not_found(format!(
        "Failed to get pipeline version with id {vid}: ResourceNotFoundError: PipelineVersion {vid} not found"
    ))
}

pub(super) fn get_version(cluster: &ClusterState, id: &str, vid: &str) -> Result<Value, KfpError> {
    cluster
        .kfp
        .versions
        .get(vid)
        .filter(|v| v.pipeline_id == id)
        .map(version_json)
        .ok_or_else(|| version_missing(vid))
}

pub(super) fn delete_version(
    cluster: &mut ClusterState,
    id: &str,
    vid: &str,
) -> Result<Value, KfpError> {
    if cluster
        .kfp
        .versions
        .get(vid)
        .is_none_or(|v| v.pipeline_id != id)
    {
        return Err(version_missing(vid).with_prefix("Failed to delete pipeline version"));
    }
    cluster.kfp.versions.remove(vid);
    Ok(json!({}))
}

// ---- experiments ----

fn experiment_json(e: &Experiment) -> Value {
    json!({
        "experiment_id": e.experiment_id,
        "display_name": e.display_name,
        "description": e.description,
        "created_at": e.created_at,
        "namespace": e.namespace,
        "storage_state": e.storage_state,
        "last_run_created_at": e.last_run_created_at,
    })
}

fn new_experiment(
    cluster: &mut ClusterState,
    display_name: &str,
    description: &str,
    namespace: &str,
    now: DateTime<Utc>,
) -> Result<Experiment, KfpError> {
    if display_name.is_empty() {
        return Err(KfpError::invalid(
            "Failed to create a new experiment: Invalid input error: Experiment must have a non-empty name",
        ));
    }
    if cluster
        .kfp
        .experiments
        .values()
        .any(|e| e.display_name == display_name && e.namespace == namespace)
    {
        return Err(KfpError::exists(format!(
            "Failed to create a new experiment: Already exist error: Failed to create a new experiment. The name {display_name} already exists. Please specify a new name"
        )));
    }
    let e = Experiment {
        experiment_id: new_uid(),
        display_name: display_name.to_string(),
        description: description.to_string(),
        created_at: timestamp(now),
        namespace: namespace.to_string(),
        storage_state: "AVAILABLE".into(),
        last_run_created_at: EPOCH.into(),
    };
    cluster
        .kfp
        .experiments
        .insert(e.experiment_id.clone(), e.clone());
    Ok(e)
}

pub(super) fn create_experiment(
    cluster: &mut ClusterState,
    req: &KfpRequest<'_>,
) -> Result<Value, KfpError> {
    let body = decode(req, EXPERIMENT_FIELDS)?;
    let e = new_experiment(
        cluster,
        &text(&body, "display_name"),
        &text(&body, "description"),
        &single_user(body["namespace"].as_str()),
        req.now,
    )?;
    Ok(experiment_json(&e))
}

fn experiment_missing(id: &str) -> KfpError {
    KfpError::not_found(format!(
        "Failed to get experiment: ResourceNotFoundError: Experiment {id} not found"
    ))
}

pub(super) fn list_experiments(
    cluster: &ClusterState,
    req: &KfpRequest<'_>,
) -> Result<Value, KfpError> {
    let items = cluster
        .kfp
        .experiments
        .values()
        .map(experiment_json)
        .collect();
    page(req, "experiments", items, "created_at")
}

pub(super) fn get_experiment(cluster: &ClusterState, id: &str) -> Result<Value, KfpError> {
    cluster
        .kfp
        .experiments
        .get(id)
        .map(experiment_json)
        .ok_or_else(|| experiment_missing(id))
}

pub(super) fn delete_experiment(cluster: &mut ClusterState, id: &str) -> Result<Value, KfpError> {
    cluster
        .kfp
        .experiments
        .remove(id)
        .map(|_| json!({}))
        .ok_or_else(|| experiment_missing(id).with_prefix("Failed to delete experiment"))
}

// ---- runs ----

pub(crate) fn run_json(run: &Run) -> Value {
    let tasks: Vec<Value> = run
        .tasks
        .iter()
        .map(|t| {
            let mut v = json!({
                "run_id": run.run_id,
                "task_id": t.task_id,
                "display_name": t.display_name,
                "create_time": t.create_time,
                "start_time": t.start_time.as_deref().unwrap_or(EPOCH),
                "end_time": t.end_time.as_deref().unwrap_or(EPOCH),
                "state": t.state,
                "pod_name": t.pods.last().cloned().unwrap_or_default(),
                "child_tasks": t.pods.iter().map(|p| json!({"pod_name": p})).collect::<Vec<_>>(),
                "state_history": t.state_history,
            });
            if let Some(e) = &t.error {
                v["error"] = json!({"code": 2, "message": e});
            }
            v
        })
        .collect();
    let mut v = json!({
        "experiment_id": run.experiment_id,
        "run_id": run.run_id,
        "display_name": run.display_name,
        "storage_state": run.storage_state,
        "description": run.description,
        "pipeline_version_reference": {
            "pipeline_id": run.pipeline_id,
            "pipeline_version_id": run.pipeline_version_id,
        },
        "runtime_config": run.runtime_config,
        "service_account": run.service_account,
        "created_at": run.created_at,
        "scheduled_at": run.scheduled_at,
        "finished_at": run.finished_at,
        "state": run.state,
        "run_details": {"task_details": tasks},
        "state_history": run.state_history,
    });
    if let Some(e) = &run.error {
        v["error"] = json!({"code": 2, "message": e});
    }
    v
}

/// `gpu-training` → `gpu-training`; anything else made a DNS label as Argo names
/// workflows.
pub(crate) fn sanitize(name: &str) -> String {
    let mut out: String = name
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    while out.contains("--") {
        out = out.replace("--", "-");
    }
    let out: String = out.trim_matches('-').chars().take(40).collect();
    let out = out.trim_end_matches('-').to_string();
    if out.is_empty() {
        "pipeline".into()
    } else {
        out
    }
}

pub(super) fn create_run(
    cluster: &mut ClusterState,
    req: &KfpRequest<'_>,
) -> Result<Value, KfpError> {
    let body = decode(req, RUN_FIELDS)?;
    let display_name = text(&body, "display_name");
    if display_name.is_empty() {
        return Err(KfpError::invalid(
            "Failed to create a run: Invalid input error: The run name is empty. Please specify a valid name",
        ));
    }
    let reference = &body["pipeline_version_reference"];
    let vid = match text(reference, "pipeline_version_id") {
        v if v.is_empty() => text(&body, "pipeline_version_id"),
        v => v,
    };
    if vid.is_empty() {
        return Err(KfpError::invalid(
            "Failed to create a run: Invalid input error: Pipeline version reference must be specified: pipeline_version_reference.pipeline_version_id is empty",
        ));
    }
    let version = cluster.kfp.versions.get(&vid).cloned().ok_or_else(|| {
        KfpError::not_found(format!(
            "Failed to create a run: Failed to fetch a pipeline version: ResourceNotFoundError: PipelineVersion {vid} not found"
        ))
    })?;
    let pipeline_id = text(reference, "pipeline_id");
    if !pipeline_id.is_empty() && pipeline_id != version.pipeline_id {
        return Err(KfpError::invalid(format!(
            "Failed to create a run: Invalid input error: Pipeline version {vid} does not belong to pipeline {pipeline_id}"
        )));
    }
    let experiment_id = match text(&body, "experiment_id") {
        id if id.is_empty() => {
            let existing = cluster
                .kfp
                .experiments
                .values()
                .find(|e| e.display_name == DEFAULT_EXPERIMENT)
                .map(|e| e.experiment_id.clone());
            match existing {
                Some(id) => id,
                None => new_experiment(cluster, DEFAULT_EXPERIMENT, "", "", req.now)?.experiment_id,
            }
        }
        id if cluster.kfp.experiments.contains_key(&id) => id,
        id => return Err(experiment_missing(&id).with_prefix("Failed to create a run")),
    };
    let mut runtime_config = match &body["runtime_config"] {
        Value::Object(_) => body["runtime_config"].clone(),
        _ => json!({}),
    };
    if !runtime_config["parameters"].is_object() {
        runtime_config["parameters"] = json!({});
    }
    let service_account = match text(&body, "service_account") {
        s if s.is_empty() => DEFAULT_SERVICE_ACCOUNT.to_string(),
        s => s,
    };
    let run_id = new_uid();
    let pipeline_name = version.spec["pipelineInfo"]["name"]
        .as_str()
        .unwrap_or("pipeline");
    let workflow = format!(
        "{}-{}",
        sanitize(pipeline_name),
        obj::stable_suffix(&[&run_id], 5)
    );
    let now = timestamp(req.now);
    let run = Run {
        run_id: run_id.clone(),
        experiment_id: experiment_id.clone(),
        display_name,
        description: text(&body, "description"),
        storage_state: "AVAILABLE".into(),
        pipeline_id: version.pipeline_id.clone(),
        pipeline_version_id: vid,
        runtime_config,
        service_account,
        created_at: now.clone(),
        scheduled_at: now.clone(),
        finished_at: EPOCH.into(),
        state: "PENDING".into(),
        error: None,
        tasks: Vec::new(),
        state_history: vec![StateEntry {
            update_time: now.clone(),
            state: "PENDING".into(),
        }],
        kube_namespace: req.kube_namespace.to_string(),
        workflow,
        spec: version.spec,
        platform: version.platform,
    };
    if let Some(e) = cluster.kfp.experiments.get_mut(&experiment_id) {
        e.last_run_created_at = now;
    }
    let answer = run_json(&run);
    cluster.kfp.runs.insert(run_id, run);
    Ok(answer)
}

fn run_missing(id: &str) -> KfpError {
    KfpError::not_found(format!(
        "Failed to get a run: ResourceNotFoundError: Run {id} not found"
    ))
}

pub(super) fn get_run(cluster: &ClusterState, id: &str) -> Result<Value, KfpError> {
    cluster
        .kfp
        .runs
        .get(id)
        .map(run_json)
        .ok_or_else(|| run_missing(id))
}

pub(super) fn list_runs(cluster: &ClusterState, req: &KfpRequest<'_>) -> Result<Value, KfpError> {
    let experiment = req.param("experiment_id").filter(|e| !e.is_empty());
    let items = cluster
        .kfp
        .runs
        .values()
        .filter(|r| experiment.is_none_or(|e| r.experiment_id == e))
        .map(run_json)
        .collect();
    page(req, "runs", items, "created_at")
}

/// Deletes the pods of a run's tasks (all of them, or only the unfinished ones).
fn delete_pods(cluster: &mut ClusterState, run: &Run, only_unfinished: bool, now: DateTime<Utc>) {
    for task in &run.tasks {
        for pod in &task.pods {
            let key = ObjKey::new("", "pods", &run.kube_namespace, pod);
            let finished = cluster.store.get(&key).is_some_and(|p| {
                matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed"))
            });
            if !only_unfinished || !finished {
                cluster.store.delete(&key, now);
            }
        }
    }
}

pub(super) fn delete_run(
    cluster: &mut ClusterState,
    req: &KfpRequest<'_>,
    id: &str,
) -> Result<Value, KfpError> {
    let run = cluster
        .kfp
        .runs
        .remove(id)
        .ok_or_else(|| run_missing(id).with_prefix("Failed to delete a run"))?;
    delete_pods(cluster, &run, false, req.now);
    // Its Argo Workflow, when Argo's CRD made one.
    cluster.store.delete(
        &ObjKey::new(
            "argoproj.io",
            "workflows",
            super::runs::run_namespace(&run.kube_namespace),
            &run.workflow,
        ),
        req.now,
    );
    Ok(json!({}))
}

/// `:archive`, `:unarchive`, `:terminate`.
pub(super) fn run_action(
    cluster: &mut ClusterState,
    req: &KfpRequest<'_>,
    id: &str,
    action: &str,
) -> Result<Value, KfpError> {
    let Some(run) = cluster.kfp.runs.get_mut(id) else {
        return Err(run_missing(id));
    };
    match action {
        "archive" => run.storage_state = "ARCHIVED".into(),
        "unarchive" => run.storage_state = "AVAILABLE".into(),
        "terminate" => {
            if run.active() && run.state != "CANCELING" {
                run.state = "CANCELING".into();
                run.state_history.push(StateEntry {
                    update_time: timestamp(req.now),
                    state: "CANCELING".into(),
                });
                let run = run.clone();
                delete_pods(cluster, &run, true, req.now);
            }
        }
        _ => return Err(KfpError::not_found("Not Found")),
    }
    Ok(json!({}))
}
