//! The OpenAPI documents of an emulated API server — `/openapi/v3` (an index whose hashes
//! follow content), `/openapi/v3/<api/v1|apis/g/v>` and the swagger 2.0 `/openapi/v2` —
//! built from `schema.rs` for the kinds the cluster serves and cached per set of served
//! kinds; and the strict field validation (`fieldValidation=Strict`) those schemas allow.

use std::sync::{Arc, Mutex, OnceLock};

use axum::http::Method;
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha512};

use crate::http::{ApiResponse, Body};
use crate::k8s::discovery::{self, ResourceType};
use crate::k8s::request::KubeRequest;
use crate::k8s::schema::{self, Root, PATCH, V2_REF, V3_REF};
use crate::k8s::status::StatusError;
use crate::k8s::ClusterState;

/// The documents of one set of served kinds.
pub(crate) struct Documents {
    /// `(api/v1 | apis/g/v, JSON, hash)` in discovery order.
    v3: Vec<(String, Vec<u8>, String)>,
    root: Vec<u8>,
    /// Every definition any group/version uses, for the v2 document.
    defs: Map<String, Value>,
    types: Vec<(ResourceType, String)>,
    title_version: String,
    /// Built on the first ask: few clients want v2.
    v2: OnceLock<Vec<u8>>,
}

impl Documents {
    /// The v3 document of `api/v1` or `apis/<group>/<version>`.
    pub(crate) fn v3(&self, name: &str) -> Option<&[u8]> {
        self.v3
            .iter()
            .find(|(n, _, _)| n == name)
            .map(|(_, body, _)| body.as_slice())
    }

    pub(crate) fn v3_root(&self) -> &[u8] {
        &self.root
    }

    pub(crate) fn v2(&self) -> &[u8] {
        self.v2
            .get_or_init(|| serde_json::to_vec(&v2_document(self)).unwrap_or_default())
    }
}

/// Documents by the fingerprint of what they were built for, most recent first.
type Cached = Vec<(u64, Arc<Documents>)>;

/// How many sets of served kinds keep their documents: one per distinct set of CRDs in
/// play, so a handful covers every cluster a sandbox runs.
const CACHED_SETS: usize = 8;

/// The documents for what `cluster` serves now: from the cache when the served kinds (and
/// the CRD revisions behind them) are unchanged, else built (tens of milliseconds).
pub(crate) fn documents(cluster: &ClusterState) -> Arc<Documents> {
    static CACHE: OnceLock<Mutex<Cached>> = OnceLock::new();
    let types = discovery::all(cluster);
    let crds: Vec<&Value> = cluster
        .store
        .list("apiextensions.k8s.io", "customresourcedefinitions", None)
        .into_iter()
        .map(|(_, crd)| crd)
        .collect();
    let mut parts: Vec<String> = vec![cluster.version.clone()];
    for t in &types {
        parts.push(format!(
            "{}/{}/{}/{}/{}",
            t.group, t.version, t.plural, t.kind, t.namespaced
        ));
    }
    for crd in &crds {
        parts.push(format!(
            "{}/{}",
            crd["metadata"]["uid"].as_str().unwrap_or_default(),
            crd["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or_default()
        ));
    }
    let key = crate::common::hash::fnv64(&parts.iter().map(String::as_str).collect::<Vec<_>>());
    let cache = CACHE.get_or_init(|| Mutex::new(Vec::new()));
    if let Some(docs) = cache
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, d)| d.clone())
    {
        return docs;
    }
    // Built outside the lock: two requests racing build twice, nobody waits.
    let docs = Arc::new(build(&cluster.version, &types, &crds));
    let mut cached = cache
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    cached.retain(|(k, _)| *k != key);
    cached.insert(0, (key, docs.clone()));
    cached.truncate(CACHED_SETS);
    docs
}

/// The schema (and its definition name) of a served type, if it has one.
fn kind_schema(t: &ResourceType, crds: &[&Value]) -> Option<(String, Value)> {
    let b = schema::builtins();
    if let Some((_, _, _, name)) = b
        .kinds
        .iter()
        .find(|(g, v, k, _)| *g == t.group && *v == t.version && *k == t.kind)
    {
        return Some((name.clone(), b.defs.get(name)?.clone()));
    }
    let crd = crds.iter().find(|c| {
        c["spec"]["group"] == t.group.as_str() && c["spec"]["names"]["plural"] == t.plural.as_str()
    })?;
    Some((
        schema::crd_definition_name(&t.group, &t.version, &t.kind),
        schema::crd_schema(crd, &t.version)?,
    ))
}

fn build(version: &str, types: &[ResourceType], crds: &[&Value]) -> Documents {
    let b = schema::builtins();
    let mut all_defs = Map::new();
    let mut typed = Vec::new();
    let mut v3 = Vec::new();
    let mut root_paths = Map::new();
    for (group, versions) in discovery::groups(types) {
        for v in versions {
            let name = discovery::openapi_name(&group, &v);
            let members: Vec<&ResourceType> = types
                .iter()
                .filter(|t| t.group == group && t.version == v)
                .collect();
            let mut schemas = Map::new();
            let mut paths = Map::new();
            for t in &members {
                let def = kind_schema(t, crds);
                if let Some((def_name, def_schema)) = &def {
                    schemas.insert(def_name.clone(), def_schema.clone());
                    typed.push(((*t).clone(), def_name.clone()));
                }
                let (path, item) = v3_path(t, def.as_ref().map(|(n, _)| n.as_str()));
                paths.insert(path, item);
            }
            let reached = schema::closure(
                &b.defs,
                schemas
                    .values()
                    .chain([&json!({"$ref": format!("{V3_REF}{PATCH}")})]),
            );
            for def_name in reached {
                if let Some(def) = b.defs.get(&def_name) {
                    schemas.entry(def_name).or_insert_with(|| def.clone());
                }
            }
            for (k, s) in &schemas {
                all_defs.entry(k.clone()).or_insert_with(|| s.clone());
            }
            let doc = json!({
                "openapi": "3.0.0",
                "info": {"title": "Kubernetes", "version": version},
                "paths": paths,
                "components": {"schemas": schemas},
            });
            let body = serde_json::to_vec(&doc).unwrap_or_default();
            // The real server's hash: SHA-512 of the document, upper-case hex.
            let hash: String = Sha512::digest(&body)
                .iter()
                .map(|byte| format!("{byte:02X}"))
                .collect();
            root_paths.insert(
                name.clone(),
                json!({"serverRelativeURL": format!("/openapi/v3/{name}?hash={hash}")}),
            );
            v3.push((name, body, hash));
        }
    }
    let root = serde_json::to_vec(&json!({"paths": root_paths})).unwrap_or_default();
    Documents {
        v3,
        root,
        defs: all_defs,
        types: typed,
        title_version: version.to_string(),
        v2: OnceLock::new(),
    }
}

/// The object path of a type: `/api/v1/namespaces/{namespace}/pods/{name}`.
fn object_path(t: &ResourceType) -> String {
    let base = format!("/{}", discovery::openapi_name(&t.group, &t.version));
    if t.namespaced {
        format!("{base}/namespaces/{{namespace}}/{}/{{name}}", t.plural)
    } else {
        format!("{base}/{}/{{name}}", t.plural)
    }
}

/// Whether a type takes strategic merge patches: built-ins do, custom resources do not.
fn takes_strategic_merge(t: &ResourceType) -> bool {
    schema::builtins()
        .kinds
        .iter()
        .any(|(g, v, k, _)| *g == t.group && *v == t.version && *k == t.kind)
}

fn patch_media_types(t: &ResourceType) -> Vec<&'static str> {
    let mut types = vec![
        "application/apply-patch+yaml",
        "application/json-patch+json",
        "application/merge-patch+json",
    ];
    if takes_strategic_merge(t) {
        types.push("application/strategic-merge-patch+json");
    }
    types
}

const QUERY_PARAMS: &[(&str, &str)] = &[
    ("dryRun", "When present, indicates that modifications should not be persisted."),
    ("fieldManager", "fieldManager is a name associated with the actor or entity that is making these changes."),
    ("fieldValidation", "fieldValidation instructs the server on how to handle objects in the request containing unknown or duplicate fields. Valid values are: Ignore, Warn (the default) and Strict."),
    ("force", "Force is going to \"force\" Apply requests. It means user will re-acquire conflicting fields owned by other people."),
];

/// A type's PATCH operation, declaring `fieldValidation` (clients check for it before
/// leaving validation to the server) and, for built-ins, strategic merge patches (kubectl
/// then computes its client-side apply patches from these schemas).
fn v3_path(t: &ResourceType, def: Option<&str>) -> (String, Value) {
    let gvk = json!({"group": t.group, "kind": t.kind, "version": t.version});
    let string = json!({"type": "string", "uniqueItems": true});
    let parameters: Vec<Value> = QUERY_PARAMS
        .iter()
        .map(|(name, description)| {
            json!({"name": name, "in": "query", "description": description, "schema": string})
        })
        .collect();
    let body_schema = json!({"$ref": format!("{V3_REF}{PATCH}")});
    let content: Map<String, Value> = patch_media_types(t)
        .into_iter()
        .map(|m| (m.to_string(), json!({"schema": body_schema})))
        .collect();
    let mut path_params = vec![
        json!({"name": "name", "in": "path", "description": format!("name of the {}", t.kind), "required": true, "schema": string}),
    ];
    if t.namespaced {
        path_params.push(json!({"name": "namespace", "in": "path", "description": "object name and auth scope, such as for teams and projects", "required": true, "schema": string}));
    }
    let response = match def {
        Some(d) => {
            json!({"description": "OK", "content": {"application/json": {"schema": {"$ref": format!("{V3_REF}{d}")}}}})
        }
        None => json!({"description": "OK"}),
    };
    let op = json!({
        "description": format!("partially update the specified {}", t.kind),
        "operationId": format!("patch{}{}", if t.namespaced { "Namespaced" } else { "" }, t.kind),
        "parameters": parameters,
        "requestBody": {"content": content, "required": true},
        "responses": {"200": response.clone(), "201": {"description": "Created", "content": response.get("content").cloned().unwrap_or(json!({}))}},
        "x-kubernetes-action": "patch",
        "x-kubernetes-group-version-kind": gvk,
    });
    (
        object_path(t),
        json!({"patch": op, "parameters": path_params}),
    )
}

/// A schema in swagger 2.0 form: references to `#/definitions/`, a lone `allOf`
/// reference back to a `$ref` with siblings (as the real v2 document has them), and no
/// `nullable`, `anyOf`, `oneOf` or `not`, which swagger lacks. Property maps are walked
/// as maps, so fields named like keywords (JSONSchemaProps has `$ref`, `allOf`, …) stay.
fn v2_schema(s: &Value) -> Value {
    let Some(m) = s.as_object() else {
        return s.clone();
    };
    let mut out = Map::new();
    for (k, v) in m {
        match k.as_str() {
            "properties" | "patternProperties" => {
                let props: Map<String, Value> = v
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(name, p)| (name.clone(), v2_schema(p)))
                    .collect();
                out.insert(k.clone(), Value::Object(props));
            }
            "items" | "additionalProperties" => {
                out.insert(k.clone(), v2_schema(v));
            }
            "$ref" => {
                let r = v.as_str().unwrap_or_default();
                let r = r
                    .strip_prefix(V3_REF)
                    .map_or_else(|| r.to_string(), |n| format!("{V2_REF}{n}"));
                out.insert(k.clone(), json!(r));
            }
            "allOf" => match v.as_array().map(Vec::as_slice) {
                Some([only]) if only.get("$ref").is_some() && !m.contains_key("$ref") => {
                    if let Some(r) = v2_schema(only).get("$ref") {
                        out.insert("$ref".into(), r.clone());
                    }
                }
                _ => {
                    let all: Vec<Value> =
                        v.as_array().into_iter().flatten().map(v2_schema).collect();
                    out.insert(k.clone(), Value::Array(all));
                }
            },
            "nullable" | "anyOf" | "oneOf" | "not" => {}
            _ => {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    Value::Object(out)
}

fn v2_document(docs: &Documents) -> Value {
    let definitions: Map<String, Value> = docs
        .defs
        .iter()
        .map(|(k, v)| (k.clone(), v2_schema(v)))
        .collect();
    let mut paths = Map::new();
    for (t, def) in &docs.types {
        let mut parameters: Vec<Value> = QUERY_PARAMS
            .iter()
            .map(|(name, description)| json!({"name": name, "in": "query", "description": description, "type": "string", "uniqueItems": true}))
            .collect();
        parameters.push(json!({"name": "body", "in": "body", "required": true, "schema": {"$ref": format!("{V2_REF}{PATCH}")}}));
        let gvk = json!({"group": t.group, "kind": t.kind, "version": t.version});
        paths.insert(
            object_path(t),
            json!({"patch": {
                "description": format!("partially update the specified {}", t.kind),
                "consumes": patch_media_types(t),
                "produces": ["application/json"],
                "schemes": ["https"],
                "operationId": format!("patch{}{}", if t.namespaced { "Namespaced" } else { "" }, t.kind),
                "parameters": parameters,
                "responses": {"200": {"description": "OK", "schema": {"$ref": format!("{V2_REF}{def}")}}},
                "x-kubernetes-action": "patch",
                "x-kubernetes-group-version-kind": gvk,
            }}),
        );
    }
    json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": docs.title_version},
        "paths": paths,
        "definitions": definitions,
    })
}

/// Whether an `Accept` header takes JSON (an absent one does).
fn accepts_json(accept: &str) -> bool {
    accept.trim().is_empty()
        || accept.split(',').any(|media| {
            matches!(
                media.split(';').next().map(str::trim),
                Some("application/json" | "application/*" | "*/*")
            )
        })
}

fn json_bytes(data: &[u8]) -> ApiResponse {
    ApiResponse {
        status: 200,
        body: Body::Bytes {
            content_type: "application/json".into(),
            data: data.to_vec(),
        },
        retry_after: None,
    }
}

/// `/openapi/…` (`rest` is the path after `openapi`): GET only; v2 in JSON alone, so a
/// client asking only for protobuf gets 406 as from a server that cannot encode it.
pub(crate) fn respond(
    cluster: &ClusterState,
    method: &Method,
    accept: &str,
    rest: &[&str],
) -> ApiResponse {
    if *method != Method::GET {
        return StatusError::method_not_allowed(method.as_str()).response();
    }
    match rest {
        ["v2"] => {
            if !accepts_json(accept) {
                return ApiResponse::json(
                    406,
                    json!({
                        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                        "message": "only the following media types are accepted: application/json",
                        "reason": "NotAcceptable", "code": 406,
                    }),
                );
            }
            json_bytes(documents(cluster).v2())
        }
        ["v3"] => json_bytes(documents(cluster).v3_root()),
        ["v3", gv @ ..] => match documents(cluster).v3(&gv.join("/")) {
            Some(body) => json_bytes(body),
            None => StatusError::no_route().response(),
        },
        _ => StatusError::no_route().response(),
    }
}

/// What a write path names: the type, namespace, name and subresource
/// (`/api/v1/namespaces/ns/pods/p/status` → pods, `ns`, `p`, `status`).
struct WriteTarget<'a> {
    rt: ResourceType,
    namespace: &'a str,
    name: &'a str,
    sub: Option<&'a str>,
}

fn write_target<'a>(cluster: &ClusterState, seg: &[&'a str]) -> Option<WriteTarget<'a>> {
    let (group, version, rest) = match seg {
        ["api", "v1", rest @ ..] => ("", "v1", rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return None,
    };
    if let ["namespaces", namespace, plural, more @ ..] = rest {
        if let Some(rt) = discovery::find(cluster, group, version, plural).filter(|r| r.namespaced)
        {
            return Some(WriteTarget {
                rt,
                namespace,
                name: more.first().copied().unwrap_or_default(),
                sub: more.get(1).copied(),
            });
        }
    }
    let (plural, more) = rest.split_first()?;
    Some(WriteTarget {
        rt: discovery::find(cluster, group, version, plural)?,
        namespace: "",
        name: more.first().copied().unwrap_or_default(),
        sub: more.get(1).copied(),
    })
}

/// `fieldValidation=Strict` on a write whose body has fields the kind's schema does not
/// declare: the error the real server answers with, before anything else looks at the
/// request. Creates, updates and merge patches fail decoding (400, `strict decoding
/// error: unknown field "spec.bogus"`); apply patches fail typing (500, `.spec.bogus:
/// field not declared in schema`, as the 1.31 server answers). JSON patches, kinds without
/// a schema and fields under `x-kubernetes-preserve-unknown-fields` pass.
pub(crate) fn strict_field_check(
    cluster: &ClusterState,
    req: &KubeRequest,
    seg: &[&str],
) -> Option<ApiResponse> {
    if req.param("fieldValidation") != Some("Strict")
        || !matches!(req.method, Method::POST | Method::PUT | Method::PATCH)
    {
        return None;
    }
    let target = write_target(cluster, seg)?;
    if target.sub.is_some_and(|s| s != "status") {
        return None;
    }
    let rt = &target.rt;
    let content_type = req
        .content_type
        .as_deref()
        .and_then(|c| c.split(';').next())
        .map(str::trim)
        .unwrap_or("");
    let body: Value = serde_json::from_slice(&req.body)
        .ok()
        .or_else(|| serde_yaml_ng::from_slice(&req.body).ok())?;
    let root = Root::of(&rt.api_version(), &rt.kind);
    let node = root.node();
    if !node.is_known() {
        return None;
    }
    let apply = req.method == Method::PATCH && content_type == "application/apply-patch+yaml";
    if req.method == Method::PATCH
        && !apply
        && !matches!(
            content_type,
            "application/merge-patch+json" | "application/strategic-merge-patch+json"
        )
    {
        return None;
    }
    let directives = content_type == "application/strategic-merge-patch+json";
    let undeclared = schema::undeclared_fields(node, &body, directives);
    if undeclared.is_empty() {
        return None;
    }
    if apply {
        let problems: Vec<String> = undeclared
            .iter()
            .map(|u| format!("{}: field not declared in schema", u.apply_path))
            .collect();
        let gvk = format!("{}/{}, Kind={}", rt.group, rt.version, rt.kind);
        return Some(ApiResponse::json(
            500,
            json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": format!(
                    "failed to create typed patch object ({}/{}; {gvk}): {}",
                    target.namespace,
                    target.name,
                    problems.join("\n")
                ),
                "code": 500,
            }),
        ));
    }
    let unknown: Vec<String> = undeclared
        .iter()
        .map(|u| format!("unknown field {:?}", u.decoder_path))
        .collect();
    Some(
        StatusError::bad_request(format!(
            "{kind} in version {version:?} cannot be handled as a {kind}: strict decoding error: {}",
            unknown.join(", "),
            kind = rt.kind,
            version = rt.version,
        ))
        .response(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;

    fn cluster() -> ClusterState {
        ClusterState::new(
            "c",
            crate::k8s::controllers::testkit::cloud(false),
            String::new(),
            String::new(),
            Vec::new(),
            "v1.31.8-sandbox".to_string(),
            Utc::now(),
        )
    }

    fn body(r: &ApiResponse) -> Value {
        match &r.body {
            Body::Bytes { data, .. } => serde_json::from_slice(data).expect("JSON"),
            Body::Json(v) => v.clone(),
            Body::Empty => Value::Null,
        }
    }

    #[test]
    fn v3_documents_hold_the_schemas_their_kinds_need() {
        let c = cluster();
        let docs = documents(&c);
        let core: Value = serde_json::from_slice(docs.v3("api/v1").expect("core")).expect("JSON");
        let schemas = &core["components"]["schemas"];
        assert_eq!(
            schemas["io.k8s.api.core.v1.Pod"]["x-kubernetes-group-version-kind"],
            json!([{"group": "", "kind": "Pod", "version": "v1"}])
        );
        assert_eq!(
            schemas["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"]
                ["x-kubernetes-list-map-keys"],
            json!(["name"])
        );
        assert!(schemas["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"].is_object());
        assert!(
            schemas["io.k8s.api.apps.v1.Deployment"].is_null(),
            "apps kinds live in apps/v1"
        );
        let spec_ref = &schemas["io.k8s.api.core.v1.Pod"]["properties"]["spec"]["allOf"][0]["$ref"];
        assert_eq!(spec_ref, "#/components/schemas/io.k8s.api.core.v1.PodSpec");
        let op = &core["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]["patch"];
        assert!(op["requestBody"]["content"]["application/strategic-merge-patch+json"].is_object());
    }

    #[test]
    fn the_v3_index_hashes_follow_content_and_documents_are_cached() {
        let c = cluster();
        let first = documents(&c);
        let again = documents(&c);
        assert!(
            Arc::ptr_eq(&first, &again),
            "unchanged kinds reuse the documents"
        );
        let root: Value = serde_json::from_slice(first.v3_root()).expect("JSON");
        let url = root["paths"]["apis/batch/v1"]["serverRelativeURL"]
            .as_str()
            .expect("batch");
        let batch = first.v3("apis/batch/v1").expect("batch doc");
        let hash: String = Sha512::digest(batch)
            .iter()
            .map(|b| format!("{b:02X}"))
            .collect();
        assert_eq!(url, format!("/openapi/v3/apis/batch/v1?hash={hash}"));
    }

    #[test]
    fn v2_is_swagger_json_and_refuses_protobuf_only_clients() {
        let c = cluster();
        let pb = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";
        let cases = [
            ("", 200),
            ("application/json", 200),
            ("application/json, */*", 200),
            (pb, 406),
        ];
        for (accept, want) in cases {
            assert_eq!(
                respond(&c, &Method::GET, accept, &["v2"]).status,
                want,
                "{accept:?}"
            );
        }
        let doc = body(&respond(&c, &Method::GET, "", &["v2"]));
        assert_eq!(doc["swagger"], "2.0");
        let containers =
            &doc["definitions"]["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"];
        assert_eq!(
            containers["items"]["$ref"],
            "#/definitions/io.k8s.api.core.v1.Container"
        );
        let spec = &doc["definitions"]["io.k8s.api.apps.v1.Deployment"]["properties"]["spec"];
        assert_eq!(
            spec["$ref"],
            "#/definitions/io.k8s.api.apps.v1.DeploymentSpec"
        );
        assert!(spec.get("allOf").is_none());
        assert_eq!(respond(&c, &Method::POST, "", &["v2"]).status, 405);
        assert_eq!(
            respond(&c, &Method::GET, "", &["v3", "apis", "nothing", "v1"]).status,
            404
        );
    }

    #[test]
    fn v2_conversion_keeps_fields_named_like_keywords() {
        let s = json!({"properties": {"$ref": {"type": "string"}, "allOf": {"type": "array", "items": {"allOf": [{"$ref": "#/components/schemas/X"}], "description": "d"}}}, "nullable": true});
        assert_eq!(
            v2_schema(&s),
            json!({"properties": {"$ref": {"type": "string"}, "allOf": {"type": "array", "items": {"$ref": "#/definitions/X", "description": "d"}}}})
        );
    }

    fn request(method: Method, path: &str, content_type: &str, body: Value) -> KubeRequest {
        KubeRequest {
            method,
            path: path.into(),
            query: vec![("fieldValidation".into(), "Strict".into())],
            content_type: Some(content_type.into()),
            accept: None,
            user_agent: None,
            body: body.to_string().into_bytes(),
            port_streams: false,
        }
    }

    #[test]
    fn strict_validation_answers_as_the_api_server() {
        let c = cluster();
        let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
            "spec": {"bogus": 1, "template": {"spec": {"containers": [{"name": "c", "image": "i", "imagePullPolicyy": "x"}]}}}});
        let check = |req: &KubeRequest| {
            let segs: Vec<String> = req
                .path
                .trim_matches('/')
                .split('/')
                .map(str::to_string)
                .collect();
            let seg: Vec<&str> = segs.iter().map(String::as_str).collect();
            strict_field_check(&c, req, &seg)
        };
        let created = check(&request(
            Method::POST,
            "/apis/apps/v1/namespaces/default/deployments",
            "application/json",
            deployment.clone(),
        ))
        .expect("unknown fields");
        assert_eq!(created.status, 400);
        assert_eq!(
            body(&created)["message"],
            "Deployment in version \"v1\" cannot be handled as a Deployment: strict decoding error: unknown field \"spec.bogus\", unknown field \"spec.template.spec.containers[0].imagePullPolicyy\""
        );
        let applied = check(&request(
            Method::PATCH,
            "/apis/apps/v1/namespaces/default/deployments/d",
            "application/apply-patch+yaml",
            deployment,
        ))
        .expect("unknown fields");
        assert_eq!(applied.status, 500);
        assert_eq!(
            body(&applied)["message"],
            "failed to create typed patch object (default/d; apps/v1, Kind=Deployment): .spec.bogus: field not declared in schema\n.spec.template.spec.containers[name=\"c\"].imagePullPolicyy: field not declared in schema"
        );
        let smp = json!({"metadata": {"labels": {"a": "b"}}, "spec": {"$setElementOrder/containers": [{"name": "c"}], "containers": [{"name": "c", "$patch": "delete"}]}});
        assert!(
            check(&request(
                Method::PATCH,
                "/api/v1/namespaces/default/pods/p",
                "application/strategic-merge-patch+json",
                smp
            ))
            .is_none(),
            "directives pass"
        );
        let mut lax = request(
            Method::POST,
            "/api/v1/namespaces/default/configmaps",
            "application/json",
            json!({"bogus": 1}),
        );
        lax.query.clear();
        assert!(check(&lax).is_none(), "only Strict is enforced here");
    }
}
