//! The emulated Kubernetes API servers as a kube-rs client sees them: a GKE cluster made
//! through the container API gets an API server at its `endpoint`, trusted through its
//! CA; discovery, CRUD, server-side apply, dry runs, conflicts, selectors, watches, CRDs,
//! Status errors, faults, exec upgrades, restarts with a state file and cluster deletion.
//! Some responses are checked against the Kubernetes OpenAPI document.

use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine as _;
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{
    Api, ApiResource, AttachParams, DeleteParams, DynamicObject, GroupVersionKind, ListParams,
    Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::discovery::Discovery;
use serde_json::{json, Value};
use terrain_sandbox::{Options, Sandbox, Timing};

const PROJECT: &str = "proj";
const LOCATION: &str = "us-central1";

/// A sandbox with one GKE cluster and a kube client for it.
struct Cluster {
    sandbox: Sandbox,
    http: reqwest::Client,
    name: String,
    endpoint: String,
    ca_pem: String,
    client: kube::Client,
}

fn clusters_url(sandbox: &Sandbox) -> String {
    format!(
        "{}v1/projects/{PROJECT}/locations/{LOCATION}/clusters",
        sandbox.gcp_endpoints().container
    )
}

async fn cloud(
    http: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    body: Option<Value>,
) -> Value {
    let mut req = http.request(method, url).bearer_auth("cloud-token");
    if let Some(body) = body {
        req = req.json(&body);
    }
    let resp = req.send().await.expect("the container API answers");
    let status = resp.status();
    let body: Value = resp.json().await.expect("JSON");
    assert!(status.is_success(), "{url}: {status} {body}");
    body
}

/// Polls a GKE operation until it is DONE.
async fn wait(http: &reqwest::Client, sandbox: &Sandbox, op: &Value) {
    let url = format!(
        "{}v1/projects/{PROJECT}/locations/{LOCATION}/operations/{}",
        sandbox.gcp_endpoints().container,
        op["name"].as_str().expect("operation name")
    );
    for _ in 0..100 {
        let now = cloud(http, reqwest::Method::GET, &url, None).await;
        if now["status"] == "DONE" {
            assert!(now.get("error").is_none(), "{now}");
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("operation {op} never finished");
}

fn pem_to_der(pem: &str) -> Vec<u8> {
    let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    base64::engine::general_purpose::STANDARD
        .decode(body)
        .expect("PEM body is base64")
}

fn kube_client(endpoint: &str, ca_pem: &str, token: &str) -> kube::Client {
    let url = format!("https://{endpoint}").parse().expect("endpoint URL");
    let mut config = kube::Config::new(url);
    config.root_cert = Some(vec![pem_to_der(ca_pem)]);
    config.auth_info.token = Some(token.to_string().into());
    kube::Client::try_from(config).expect("kube client")
}

impl Cluster {
    async fn start(name: &str) -> Cluster {
        let sandbox = Sandbox::start(Options {
            timing: Timing::instant(),
            ..Options::google_apis_on()
        })
        .await
        .expect("sandbox starts");
        Cluster::create(sandbox, name).await
    }

    async fn create(sandbox: Sandbox, name: &str) -> Cluster {
        let http = reqwest::Client::new();
        let op = cloud(
            &http,
            reqwest::Method::POST,
            &clusters_url(&sandbox),
            Some(json!({"cluster": {"name": name, "initialNodeCount": 1}})),
        )
        .await;
        wait(&http, &sandbox, &op).await;
        Cluster::connect(sandbox, http, name).await
    }

    async fn connect(sandbox: Sandbox, http: reqwest::Client, name: &str) -> Cluster {
        let url = format!("{}/{name}", clusters_url(&sandbox));
        let cluster = cloud(&http, reqwest::Method::GET, &url, None).await;
        let endpoint = cluster["endpoint"].as_str().expect("endpoint").to_string();
        assert!(endpoint.starts_with("127.0.0.1:"), "{endpoint}");
        let ca_pem = String::from_utf8(
            base64::engine::general_purpose::STANDARD
                .decode(
                    cluster["masterAuth"]["clusterCaCertificate"]
                        .as_str()
                        .expect("CA"),
                )
                .expect("base64 CA"),
        )
        .expect("PEM text");
        let client = kube_client(&endpoint, &ca_pem, "any-token");
        Cluster {
            sandbox,
            http,
            name: name.to_string(),
            endpoint,
            ca_pem,
            client,
        }
    }

    fn dynamic(&self, group: &str, version: &str, kind: &str) -> Api<DynamicObject> {
        let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
        Api::namespaced_with(self.client.clone(), "default", &ar)
    }

    /// A raw GET through the kube client, as JSON.
    async fn raw(&self, path: &str) -> Value {
        let req = axum::http::Request::get(path)
            .body(Vec::new())
            .expect("request");
        let text = self.client.request_text(req).await.expect("GET succeeds");
        serde_json::from_str(&text).expect("JSON")
    }

    /// A plain HTTPS client that trusts the cluster CA.
    fn https(&self) -> reqwest::Client {
        reqwest::Client::builder()
            .add_root_certificate(
                reqwest::Certificate::from_pem(self.ca_pem.as_bytes()).expect("CA"),
            )
            .build()
            .expect("https client")
    }
}

fn api_error(result: Result<impl std::fmt::Debug, kube::Error>) -> Box<kube::core::Status> {
    match result {
        Err(kube::Error::Api(status)) => status,
        other => panic!("expected an API error, got {other:?}"),
    }
}

// ---------------------------------------------------------------- OpenAPI checks

/// The Kubernetes 1.31 OpenAPI document, kept in the repository.
fn swagger() -> Value {
    terrain_contracts::kubernetes_swagger()
}

/// Checks `value` against a swagger definition: required properties, unknown fields,
/// basic types, and nested definitions. Collects every problem found.
fn conforms(swagger: &Value, def: &str, value: &Value, at: &str, problems: &mut Vec<String>) {
    let schema = &swagger["definitions"][def];
    assert!(schema.is_object(), "no definition {def}");
    check_schema(swagger, schema, value, at, problems);
}

fn check_schema(
    swagger: &Value,
    schema: &Value,
    value: &Value,
    at: &str,
    problems: &mut Vec<String>,
) {
    if value.is_null() {
        // Go clients write unset optional structs as null (`lastProbeTime: null`).
        return;
    }
    if let Some(r) = schema["$ref"].as_str() {
        let name = r.trim_start_matches("#/definitions/");
        conforms(swagger, name, value, at, problems);
        return;
    }
    if schema["format"] == "int-or-string" {
        if !(value.is_string() || value.is_i64()) {
            problems.push(format!("{at}: expected an int or string, got {value}"));
        }
        return;
    }
    let ok = match schema["type"].as_str() {
        Some("string") => value.is_string(),
        Some("integer") => value.is_i64() || value.is_u64(),
        Some("number") => value.is_number(),
        Some("boolean") => value.is_boolean(),
        Some("array") => value.is_array(),
        Some("object") | None => value.is_object() || schema.get("properties").is_none(),
        Some(_) => true,
    };
    if !ok {
        problems.push(format!("{at}: expected {}, got {value}", schema["type"]));
        return;
    }
    for required in schema["required"].as_array().into_iter().flatten() {
        let key = required.as_str().unwrap_or_default();
        if value.get(key).is_none_or(Value::is_null) {
            problems.push(format!("{at}: missing required {key}"));
        }
    }
    if let (Some(props), Some(obj)) = (schema["properties"].as_object(), value.as_object()) {
        for (k, v) in obj {
            match props.get(k) {
                Some(prop) => check_schema(swagger, prop, v, &format!("{at}.{k}"), problems),
                None if schema.get("additionalProperties").is_none() => {
                    problems.push(format!("{at}: unknown field {k}"));
                }
                None => {}
            }
        }
    }
    if let (Some(items), Some(list)) = (schema.get("items"), value.as_array()) {
        for (i, v) in list.iter().enumerate() {
            check_schema(swagger, items, v, &format!("{at}[{i}]"), problems);
        }
    }
    if let (Some(extra), Some(obj)) = (schema.get("additionalProperties"), value.as_object()) {
        for (k, v) in obj {
            check_schema(swagger, extra, v, &format!("{at}.{k}"), problems);
        }
    }
}

fn assert_conforms(swagger: &Value, def: &str, value: &Value) {
    let mut problems = Vec::new();
    conforms(swagger, def, value, def, &mut problems);
    assert!(problems.is_empty(), "{def}: {problems:#?}\n{value:#}");
}

const META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1";

// ---------------------------------------------------------------- tests

#[tokio::test]
async fn discovery_finds_built_in_types_and_matches_the_openapi_shapes() {
    let c = Cluster::start("disco").await;
    let discovery = Discovery::new(c.client.clone())
        .run()
        .await
        .expect("discovery runs");
    let (job, caps) = discovery
        .resolve_gvk(&GroupVersionKind::gvk("batch", "v1", "Job"))
        .expect("batch/v1 Job is discovered");
    assert_eq!(job.plural, "jobs");
    assert_eq!(caps.scope, kube::discovery::Scope::Namespaced);
    for (group, version, kind) in [
        ("", "v1", "Pod"),
        ("apps", "v1", "Deployment"),
        ("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding"),
        ("coordination.k8s.io", "v1", "Lease"),
        ("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
    ] {
        assert!(
            discovery
                .resolve_gvk(&GroupVersionKind::gvk(group, version, kind))
                .is_some(),
            "{group}/{version} {kind}"
        );
    }
    let aggregated = Discovery::new(c.client.clone())
        .run_aggregated()
        .await
        .expect("aggregated discovery runs");
    let (pods, caps) = aggregated
        .resolve_gvk(&GroupVersionKind::gvk("", "v1", "Pod"))
        .expect("pods in aggregated discovery");
    assert_eq!(pods.plural, "pods");
    assert!(
        caps.subresources.iter().any(|(r, _)| r.plural == "exec"),
        "{caps:?}"
    );

    let swagger = swagger();
    let version = c.raw("/version").await;
    // One version source: the API server says what GKE says of the control plane.
    let http = reqwest::Client::new();
    let gke = cloud(
        &http,
        reqwest::Method::GET,
        &format!("{}/disco", clusters_url(&c.sandbox)),
        None,
    )
    .await;
    let master = gke["currentMasterVersion"].as_str().expect("a version");
    assert_eq!(version["gitVersion"], format!("v{master}"));
    assert_eq!(
        version["minor"],
        master.split('.').nth(1).expect("a minor version")
    );
    assert_conforms(&swagger, "io.k8s.apimachinery.pkg.version.Info", &version);
    assert_conforms(
        &swagger,
        &format!("{META}.APIVersions"),
        &c.raw("/api").await,
    );
    assert_conforms(
        &swagger,
        &format!("{META}.APIGroupList"),
        &c.raw("/apis").await,
    );
    for path in ["/api/v1", "/apis/batch/v1", "/apis/apps/v1"] {
        assert_conforms(
            &swagger,
            &format!("{META}.APIResourceList"),
            &c.raw(path).await,
        );
    }

    let pods: Api<Pod> = Api::namespaced(c.client.clone(), "default");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p", "labels": {"app": "x"}},
        "spec": {"containers": [{"name": "main", "image": "busybox", "command": ["sleep", "60"]}]}
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("pod created");
    let list = c.raw("/api/v1/namespaces/default/pods").await;
    assert_eq!(list["kind"], "PodList");
    assert!(list["metadata"]["resourceVersion"].is_string());
    assert_conforms(&swagger, "io.k8s.api.core.v1.PodList", &list);
    let namespaces = c.raw("/api/v1/namespaces").await;
    assert_conforms(&swagger, "io.k8s.api.core.v1.NamespaceList", &namespaces);
    let names: Vec<&str> = namespaces["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|n| n["metadata"]["name"].as_str())
        .collect();
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        assert!(names.contains(&ns), "{ns} in {names:?}");
    }
    c.sandbox.shutdown().await;
}

#[tokio::test]
async fn namespaced_crud_selectors_and_conflicts() {
    let c = Cluster::start("crud").await;
    let cms = c.dynamic("", "v1", "ConfigMap");
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "ConfigMap"));
    for (name, app) in [("a", "web"), ("b", "db"), ("c", "web")] {
        let mut obj = DynamicObject::new(name, &ar).data(json!({"data": {"k": name}}));
        obj.metadata.labels = Some(BTreeMap::from([("app".to_string(), app.to_string())]));
        let made = cms
            .create(&PostParams::default(), &obj)
            .await
            .expect("created");
        assert!(made.metadata.uid.is_some());
        assert!(made.metadata.creation_timestamp.is_some());
    }
    let web = cms
        .list(&ListParams::default().labels("app=web"))
        .await
        .expect("list");
    let names: Vec<String> = web
        .items
        .iter()
        .filter_map(|o| o.metadata.name.clone())
        .collect();
    assert_eq!(names, ["a", "c"]);
    let not_web = cms
        .list(&ListParams::default().labels("app notin (web)"))
        .await
        .expect("list");
    assert_eq!(not_web.items.len(), 1);
    let by_name = cms
        .list(&ListParams::default().fields("metadata.name=b"))
        .await
        .expect("list");
    assert_eq!(by_name.items.len(), 1);

    let typed: Api<ConfigMap> = Api::namespaced(c.client.clone(), "default");
    let mut a = typed.get("a").await.expect("get a");
    let stale_version = a.metadata.resource_version.clone();
    a.data = Some(BTreeMap::from([("k".to_string(), "changed".to_string())]));
    let replaced = typed
        .replace("a", &PostParams::default(), &a)
        .await
        .expect("replace");
    assert_ne!(replaced.metadata.resource_version, stale_version);
    let stale = api_error(typed.replace("a", &PostParams::default(), &a).await);
    assert_eq!((stale.code, stale.reason.as_str()), (409, "Conflict"));
    assert!(
        stale.message.contains("the object has been modified"),
        "{}",
        stale.message
    );

    let exists = api_error(typed.create(&PostParams::default(), &replaced).await);
    assert_eq!(
        (exists.code, exists.reason.as_str()),
        (409, "AlreadyExists")
    );

    let patched = typed
        .patch(
            "b",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"extra": "1"}})),
        )
        .await
        .expect("merge patch");
    assert_eq!(
        patched
            .data
            .as_ref()
            .and_then(|d| d.get("extra"))
            .map(String::as_str),
        Some("1")
    );
    let json_patch = axum::http::Request::patch("/api/v1/namespaces/default/configmaps/b")
        .header("Content-Type", "application/json-patch+json")
        .body(
            json!([{"op": "remove", "path": "/data/extra"}])
                .to_string()
                .into_bytes(),
        )
        .expect("request");
    let patched: ConfigMap = c.client.request(json_patch).await.expect("json patch");
    assert!(patched
        .data
        .as_ref()
        .is_some_and(|d| !d.contains_key("extra")));

    typed
        .delete("c", &DeleteParams::default())
        .await
        .expect("delete");
    let missing = api_error(typed.get("c").await);
    assert_eq!((missing.code, missing.reason.as_str()), (404, "NotFound"));
    assert_eq!(missing.message, "configmaps \"c\" not found");

    let jobs: Api<Job> = Api::namespaced(c.client.clone(), "default");
    let missing = api_error(jobs.get("nope").await);
    assert_eq!(missing.message, "jobs.batch \"nope\" not found");
    let elsewhere: Api<ConfigMap> = Api::namespaced(c.client.clone(), "nowhere");
    let lost: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "lost"}})).expect("cm");
    let no_ns = api_error(elsewhere.create(&PostParams::default(), &lost).await);
    assert_eq!(
        (no_ns.code, no_ns.message.as_str()),
        (404, "namespaces \"nowhere\" not found")
    );
    let unknown = api_error(
        c.dynamic("example.com", "v1", "Gadget")
            .list(&ListParams::default())
            .await,
    );
    assert_eq!(unknown.code, 404);
    c.sandbox.shutdown().await;
}

#[tokio::test]
async fn server_side_apply_owns_removes_and_conflicts() {
    let c = Cluster::start("ssa").await;
    let deployments = c.dynamic("apps", "v1", "Deployment");
    let deployment = |replicas: i64, labels: Value| {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "labels": labels},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                             "spec": {"containers": [{"name": "web", "image": "nginx"}]}}
            }
        })
    };
    let mine = PatchParams::apply("mine");
    let made = deployments
        .patch(
            "web",
            &mine,
            &Patch::Apply(deployment(1, json!({"team": "a", "tier": "front"}))),
        )
        .await
        .expect("apply creates");
    let managed = made.metadata.managed_fields.clone().unwrap_or_default();
    assert_eq!(managed.len(), 1);
    assert_eq!(managed[0].manager.as_deref(), Some("mine"));
    assert_eq!(managed[0].operation.as_deref(), Some("Apply"));
    let fields = serde_json::to_value(&managed[0].fields_v1).expect("fieldsV1");
    assert_eq!(fields["f:metadata"]["f:labels"]["f:team"], json!({}));
    assert!(
        fields["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"web\"}"]["f:image"]
            .is_object()
    );

    // Dropping a label this manager alone owned removes it.
    let updated = deployments
        .patch(
            "web",
            &mine,
            &Patch::Apply(deployment(2, json!({"team": "a"}))),
        )
        .await
        .expect("apply updates");
    let labels = updated.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get("tier"), None);
    assert_eq!(updated.data["spec"]["replicas"], 2);

    let other = PatchParams::apply("other");
    let conflict = api_error(
        deployments
            .patch(
                "web",
                &other,
                &Patch::Apply(deployment(5, json!({"team": "a"}))),
            )
            .await,
    );
    assert_eq!((conflict.code, conflict.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        conflict.message,
        "Apply failed with 1 conflict: conflict with \"mine\": .spec.replicas"
    );
    let causes = conflict
        .details
        .as_ref()
        .map(|d| d.causes.clone())
        .unwrap_or_default();
    assert_eq!(causes[0].reason, "FieldManagerConflict");
    assert_eq!(causes[0].field, ".spec.replicas");

    let forced = deployments
        .patch(
            "web",
            &other.clone().force(),
            &Patch::Apply(deployment(5, json!({"team": "a"}))),
        )
        .await
        .expect("force takes ownership");
    assert_eq!(forced.data["spec"]["replicas"], 5);
    let no_manager = api_error(
        deployments
            .patch(
                "web",
                &PatchParams::default(),
                &Patch::Apply(deployment(1, json!({}))),
            )
            .await,
    );
    assert_eq!(no_manager.code, 400);

    // A plain update records an Update entry for its manager.
    let edited = deployments
        .patch(
            "web",
            &PatchParams {
                field_manager: Some("editor".into()),
                ..PatchParams::default()
            },
            &Patch::Merge(json!({"metadata": {"annotations": {"note": "x"}}})),
        )
        .await
        .expect("merge patch");
    assert!(edited
        .metadata
        .managed_fields
        .unwrap_or_default()
        .iter()
        .any(
            |m| m.manager.as_deref() == Some("editor") && m.operation.as_deref() == Some("Update")
        ));
    c.sandbox.shutdown().await;
}

#[tokio::test]
async fn dry_runs_validate_without_storing() {
    let c = Cluster::start("dry").await;
    let cms: Api<ConfigMap> = Api::namespaced(c.client.clone(), "default");
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "dry"}, "data": {"k": "v"}}))
            .expect("cm");
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let shown = cms.create(&dry, &cm).await.expect("dry create");
    assert_eq!(shown.metadata.name.as_deref(), Some("dry"));
    assert_eq!(api_error(cms.get("dry").await).code, 404);
    let applied = cms
        .patch(
            "dry",
            &PatchParams::apply("t").dry_run(),
            &Patch::Apply(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "dry"}}),
            ),
        )
        .await
        .expect("dry apply");
    assert_eq!(applied.metadata.name.as_deref(), Some("dry"));
    assert_eq!(api_error(cms.get("dry").await).code, 404);
    let bad: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "Not_Valid"}})).expect("cm");
    let invalid = api_error(cms.create(&dry, &bad).await);
    assert_eq!((invalid.code, invalid.reason.as_str()), (422, "Invalid"));
    assert!(
        invalid.message.starts_with(
            "ConfigMap \"Not_Valid\" is invalid: metadata.name: Invalid value: \"Not_Valid\""
        ),
        "{}",
        invalid.message
    );
    c.sandbox.shutdown().await;
}

#[tokio::test]
async fn watches_stream_changes() {
    let c = Cluster::start("watch").await;
    let cms: Api<ConfigMap> = Api::namespaced(c.client.clone(), "default");
    let existing: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "before", "labels": {"app": "x"}}}))
            .expect("cm");
    cms.create(&PostParams::default(), &existing)
        .await
        .expect("create");
    let mut events = cms
        .watch(&WatchParams::default().labels("app=x").timeout(30), "0")
        .await
        .expect("watch starts")
        .boxed();
    let writer = cms.clone();
    let changes = tokio::spawn(async move {
        let cm: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": "w", "labels": {"app": "x"}}}))
                .expect("cm");
        writer
            .create(&PostParams::default(), &cm)
            .await
            .expect("create");
        writer
            .patch(
                "w",
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {"k": "v"}})),
            )
            .await
            .expect("patch");
        let other: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": "unrelated"}})).expect("cm");
        writer
            .create(&PostParams::default(), &other)
            .await
            .expect("create");
        writer
            .delete("w", &DeleteParams::default())
            .await
            .expect("delete");
    });
    let mut seen = Vec::new();
    let collect = async {
        while let Some(event) = events.try_next().await.expect("watch event") {
            let (kind, name) = match &event {
                WatchEvent::Added(o) => ("ADDED", o.metadata.name.clone()),
                WatchEvent::Modified(o) => ("MODIFIED", o.metadata.name.clone()),
                WatchEvent::Deleted(o) => ("DELETED", o.metadata.name.clone()),
                WatchEvent::Bookmark(_) => continue,
                WatchEvent::Error(e) => panic!("watch error {e:?}"),
            };
            seen.push(format!("{kind} {}", name.unwrap_or_default()));
            if kind == "DELETED" {
                break;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(60), collect)
        .await
        .expect("the watch delivers the deletion");
    changes.await.expect("writer");
    assert_eq!(seen, ["ADDED before", "ADDED w", "MODIFIED w", "DELETED w"]);
    c.sandbox.shutdown().await;
}

#[tokio::test]
async fn a_crd_serves_its_custom_resources() {
    let c = Cluster::start("crds").await;
    let crds = Api::<DynamicObject>::all_with(
        c.client.clone(),
        &ApiResource::from_gvk(&GroupVersionKind::gvk(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
        )),
    );
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wd"]},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                "subresources": {"status": {}},
                "additionalPrinterColumns": [{"name": "Size", "type": "integer", "jsonPath": ".spec.size"}]
            }]
        }
    });
    let made = crds
        .patch(
            "widgets.example.com",
            &PatchParams::apply("setup"),
            &Patch::Apply(crd),
        )
        .await
        .expect("CRD applied");
    let conditions = made.data["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(conditions
        .iter()
        .any(|c| c["type"] == "Established" && c["status"] == "True"));
    let discovery = Discovery::new(c.client.clone())
        .run()
        .await
        .expect("discovery");
    let (ar, caps) = discovery
        .resolve_gvk(&GroupVersionKind::gvk("example.com", "v1", "Widget"))
        .expect("Widget is discovered");
    assert!(caps.subresources.iter().any(|(r, _)| r.plural == "status"));
    let widgets: Api<DynamicObject> = Api::namespaced_with(c.client.clone(), "default", &ar);
    let w = DynamicObject::new("w1", &ar).data(json!({"spec": {"size": 3}}));
    widgets
        .create(&PostParams::default(), &w)
        .await
        .expect("widget created");
    let status = widgets
        .patch_status(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"ready": true}})),
        )
        .await
        .expect("status patched");
    assert_eq!(
        (
            status.data["status"]["ready"].as_bool(),
            status.data["spec"]["size"].as_i64()
        ),
        (Some(true), Some(3))
    );
    let table = {
        let req = axum::http::Request::get("/apis/example.com/v1/namespaces/default/widgets")
            .header("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
            .body(Vec::new())
            .expect("request");
        serde_json::from_str::<Value>(&c.client.request_text(req).await.expect("table"))
            .expect("JSON")
    };
    assert_eq!(table["kind"], "Table");
    assert_eq!(table["rows"][0]["cells"], json!(["w1", 3]));
    crds.delete("widgets.example.com", &DeleteParams::default())
        .await
        .expect("CRD deleted");
    assert_eq!(
        api_error(widgets.list(&ListParams::default()).await).code,
        404
    );
    c.sandbox.shutdown().await;
}

#[tokio::test]
async fn tokens_faults_and_the_traffic_log() {
    let c = Cluster::start("edge").await;
    let anonymous = c
        .https()
        .get(format!("https://{}/api/v1/namespaces", c.endpoint))
        .send()
        .await
        .expect("reaches the server");
    assert_eq!(anonymous.status(), 401);
    let body: Value = anonymous.json().await.expect("Status");
    assert_eq!(
        (body["kind"].as_str(), body["reason"].as_str()),
        (Some("Status"), Some("Unauthorized"))
    );

    c.sandbox.faults().burst(429, 1, 2);
    let cms: Api<ConfigMap> = Api::namespaced(c.client.clone(), "default");
    let throttled = c
        .https()
        .get(format!(
            "https://{}/api/v1/namespaces/default/configmaps",
            c.endpoint
        ))
        .bearer_auth("t")
        .send()
        .await
        .expect("reaches the server");
    assert_eq!(throttled.status(), 429);
    assert_eq!(
        throttled
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("2")
    );
    let body: Value = throttled.json().await.expect("Status");
    assert_eq!(body["reason"], "TooManyRequests");
    cms.list(&ListParams::default())
        .await
        .expect("the burst is over");

    let traffic = c.sandbox.traffic();
    let kube: Vec<_> = traffic.iter().filter(|e| e.api == "kubernetes").collect();
    assert!(kube.iter().any(|e| e.injected && e.status == 429));
    assert!(kube.iter().any(|e| e.path
        == format!("{}/api/v1/namespaces/default/configmaps", c.name)
        && e.status == 200));

    // Exec streams only over WebSocket; an upgrade to SPDY is refused.
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), "default");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "shell"},
        "spec": {"containers": [{"name": "main", "image": "busybox", "command": ["sleep", "3600"]}]}
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("pod");
    pods.patch_status(
        "shell",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Running"}})),
    )
    .await
    .expect("status");
    let spdy = c
        .https()
        .post(format!(
            "https://{}/api/v1/namespaces/default/pods/shell/exec?command=ls&stdout=true",
            c.endpoint
        ))
        .bearer_auth("t")
        .header("Connection", "Upgrade")
        .header("Upgrade", "SPDY/3.1")
        .header("X-Stream-Protocol-Version", "v4.channel.k8s.io")
        .send()
        .await
        .expect("reaches the server");
    assert_eq!(spdy.status(), 400);
    let body: Value = spdy.json().await.expect("Status");
    assert!(
        body["message"]
            .as_str()
            .is_some_and(|m| m.contains("only WebSocket")),
        "{body}"
    );
    let attached = pods
        .exec("shell", ["ls"], &AttachParams::default().stderr(false))
        .await;
    assert!(
        attached.is_ok(),
        "the WebSocket upgrade succeeds: {:?}",
        attached.err()
    );
    c.sandbox.shutdown().await;
}

#[tokio::test]
async fn clusters_survive_a_restart_and_go_away_with_their_cloud_cluster() {
    let dir = tempfile::tempdir().expect("temp dir");
    let state = dir.path().join("state.json");
    let options = || Options {
        timing: Timing::instant(),
        state_file: Some(state.clone()),
        ..Options::google_apis_on()
    };
    let c = Cluster::create(Sandbox::start(options()).await.expect("sandbox"), "keep").await;
    assert!(
        dir.path().join("state.json.data").is_dir(),
        "the data directory sits beside the state file"
    );
    let cms: Api<ConfigMap> = Api::namespaced(c.client.clone(), "default");
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "kept"}, "data": {"k": "v"}}))
            .expect("cm");
    cms.create(&PostParams::default(), &cm)
        .await
        .expect("create");
    let first_endpoint = c.endpoint.clone();
    c.sandbox.shutdown().await;

    let sandbox = Sandbox::start(options()).await.expect("sandbox restarts");
    let c = Cluster::connect(sandbox, reqwest::Client::new(), "keep").await;
    assert_eq!(
        c.endpoint, first_endpoint,
        "the saved port is free, so it is reused"
    );
    let cms: Api<ConfigMap> = Api::namespaced(c.client.clone(), "default");
    let kept = cms.get("kept").await.expect("the object survived");
    assert_eq!(
        kept.data.unwrap_or_default().get("k").map(String::as_str),
        Some("v")
    );

    let configs = tempfile::tempdir().expect("temp dir");
    let written = c
        .sandbox
        .kubeconfig(configs.path())
        .expect("kubeconfig written");
    assert_eq!(written.len(), 1);
    assert_eq!(written[0].0, "keep");
    let kubeconfig = kube::config::Kubeconfig::read_from(&written[0].1).expect("kubeconfig parses");
    assert_eq!(
        kubeconfig.current_context.as_deref(),
        Some("gke_proj_us-central1_keep")
    );
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .expect("kube config");
    let via_file: Api<ConfigMap> =
        Api::namespaced(kube::Client::try_from(config).expect("client"), "default");
    via_file.get("kept").await.expect("the kubeconfig works");

    assert!(
        !c.sandbox.preempt_pod("nope", "default", "p"),
        "no such cluster"
    );
    let op = cloud(
        &c.http,
        reqwest::Method::DELETE,
        &format!("{}/keep", clusters_url(&c.sandbox)),
        None,
    )
    .await;
    wait(&c.http, &c.sandbox, &op).await;
    let gone = tokio::time::timeout(Duration::from_secs(30), cms.get("kept"))
        .await
        .expect("no hang");
    assert!(gone.is_err(), "the API server stopped with its cluster");
    assert!(c
        .sandbox
        .kubeconfig(configs.path())
        .expect("kubeconfig")
        .is_empty());
    c.sandbox.shutdown().await;
}

/// The kube-system pods once every one wanted is Running (or after a few seconds of
/// polling): `(name, phase, node)`.
async fn system_pods(client: &kube::Client, want_running: usize) -> Vec<(String, String, String)> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "kube-system");
    let mut seen = Vec::new();
    for _ in 0..100 {
        seen = pods
            .list(&ListParams::default())
            .await
            .expect("kube-system pods")
            .items
            .into_iter()
            .map(|p| {
                let status = p.status.unwrap_or_default();
                (
                    p.metadata.name.unwrap_or_default(),
                    status.phase.unwrap_or_default(),
                    p.spec.and_then(|s| s.node_name).unwrap_or_default(),
                )
            })
            .collect();
        if seen
            .iter()
            .filter(|(_, phase, _)| phase == "Running")
            .count()
            >= want_running
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    seen
}

fn running_named<'a>(
    pods: &'a [(String, String, String)],
    prefix: &str,
) -> Vec<&'a (String, String, String)> {
    pods.iter()
        .filter(|(name, phase, node)| {
            name.starts_with(prefix) && phase == "Running" && !node.is_empty()
        })
        .collect()
}

/// The `kube-dns` Service: its cluster IP and `(name, port, protocol)` of its ports.
async fn dns_service(client: &kube::Client) -> (String, Vec<(String, i32, String)>) {
    let services: Api<k8s_openapi::api::core::v1::Service> =
        Api::namespaced(client.clone(), "kube-system");
    let svc = services
        .get("kube-dns")
        .await
        .expect("the kube-dns Service");
    let spec = svc.spec.unwrap_or_default();
    let ports = spec
        .ports
        .unwrap_or_default()
        .into_iter()
        .map(|p| {
            (
                p.name.unwrap_or_default(),
                p.port,
                p.protocol.unwrap_or_default(),
            )
        })
        .collect();
    (spec.cluster_ip.unwrap_or_default(), ports)
}

async fn node_names(client: &kube::Client) -> Vec<String> {
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    nodes
        .list(&ListParams::default())
        .await
        .expect("nodes")
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect()
}

#[tokio::test]
async fn a_gke_cluster_runs_kube_dns_and_kube_proxy_in_kube_system() {
    let c = Cluster::start("dns").await;
    let nodes = node_names(&c.client).await;
    assert!(!nodes.is_empty());
    let pods = system_pods(&c.client, 2 + nodes.len()).await;
    let dns = running_named(&pods, "kube-dns-");
    assert_eq!(dns.len(), 2, "{pods:?}");
    let mut proxied: Vec<String> = running_named(&pods, "kube-proxy-")
        .into_iter()
        .map(|(_, _, node)| node.clone())
        .collect();
    proxied.sort();
    let mut all_nodes = nodes.clone();
    all_nodes.sort();
    assert_eq!(proxied, all_nodes, "one kube-proxy per node: {pods:?}");
    assert_eq!(pods.len(), 2 + nodes.len(), "{pods:?}");
    let (ip, ports) = dns_service(&c.client).await;
    assert_eq!(ip, "10.96.0.10");
    assert_eq!(
        ports,
        [
            ("dns".to_string(), 53, "UDP".to_string()),
            ("dns-tcp".to_string(), 53, "TCP".to_string())
        ]
    );
    // The address is taken: a user's Service cannot have it.
    let services = c.dynamic("", "v1", "Service");
    let clash = DynamicObject::new(
        "clash",
        &ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "Service")),
    )
    .data(json!({"spec": {"clusterIP": "10.96.0.10", "ports": [{"port": 53}]}}));
    let refused = api_error(services.create(&PostParams::default(), &clash).await);
    assert_eq!(refused.code, 422, "{refused:?}");
    c.sandbox.shutdown().await;
}

/// An EKS call as the aws CLI makes it: the SigV4 credential scope names service and
/// region (the sandbox reads the scope, it does not check signatures).
async fn eks(
    http: &reqwest::Client,
    sandbox: &Sandbox,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> Value {
    let mut req = http
        .request(method, format!("{}{path}", sandbox.url().trim_end_matches('/')))
        .header(
            "authorization",
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20260101/eu-west-1/eks/aws4_request, SignedHeaders=host;x-amz-date, Signature=0",
        );
    if let Some(body) = body {
        req = req.json(&body);
    }
    let resp = req.send().await.expect("EKS answers");
    let status = resp.status();
    let body: Value = resp.json().await.expect("JSON");
    assert!(status.is_success(), "{path}: {status} {body}");
    body
}

#[tokio::test]
async fn an_eks_cluster_runs_coredns_kube_proxy_and_aws_node() {
    let sandbox = Sandbox::start(Options {
        timing: Timing::instant(),
        ..Options::google_apis_on()
    })
    .await
    .expect("sandbox starts");
    // The subnets the cluster names, as the account's subnets.
    sandbox
        .set_capacity(
            json!({"aws": {"subnets": {"subnet-a": "eu-west-1a", "subnet-b": "eu-west-1b"},
                "roles": {"eks-cluster": "eks.amazonaws.com", "eks-node": "ec2.amazonaws.com"}}}),
        )
        .expect("subnets configured");
    let http = reqwest::Client::new();
    eks(
        &http,
        &sandbox,
        reqwest::Method::POST,
        "/clusters",
        Some(
            json!({"name": "ml", "roleArn": "arn:aws:iam::123456789012:role/eks-cluster",
                    "resourcesVpcConfig": {"subnetIds": ["subnet-a", "subnet-b"]}}),
        ),
    )
    .await;
    eks(
        &http,
        &sandbox,
        reqwest::Method::POST,
        "/clusters/ml/node-groups",
        Some(
            json!({"nodegroupName": "cpu", "nodeRole": "arn:aws:iam::123456789012:role/eks-node",
                    "subnets": ["subnet-a"], "instanceTypes": ["m5.xlarge"],
                    "scalingConfig": {"minSize": 1, "maxSize": 2, "desiredSize": 2}}),
        ),
    )
    .await;
    for _ in 0..100 {
        let ng = eks(
            &http,
            &sandbox,
            reqwest::Method::GET,
            "/clusters/ml/node-groups/cpu",
            None,
        )
        .await;
        if ng["nodegroup"]["status"] == "ACTIVE" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let configs = tempfile::tempdir().expect("temp dir");
    let written = sandbox
        .kubeconfig(configs.path())
        .expect("kubeconfig written");
    assert_eq!(written.len(), 1, "{written:?}");
    let kubeconfig = kube::config::Kubeconfig::read_from(&written[0].1).expect("kubeconfig parses");
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .expect("kube config");
    let client = kube::Client::try_from(config).expect("client");

    let mut nodes = Vec::new();
    for _ in 0..100 {
        nodes = node_names(&client).await;
        if nodes.len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(nodes.len(), 2, "{nodes:?}");
    let pods = system_pods(&client, 6).await;
    assert_eq!(running_named(&pods, "coredns-").len(), 2, "{pods:?}");
    for agent in ["kube-proxy-", "aws-node-"] {
        let mut on: Vec<String> = running_named(&pods, agent)
            .into_iter()
            .map(|(_, _, node)| node.clone())
            .collect();
        on.sort();
        nodes.sort();
        assert_eq!(on, nodes, "one {agent} per node: {pods:?}");
    }
    assert_eq!(pods.len(), 6, "{pods:?}");
    let (ip, ports) = dns_service(&client).await;
    assert_eq!(ip, "10.96.0.10");
    assert_eq!(
        ports[..2],
        [
            ("dns".to_string(), 53, "UDP".to_string()),
            ("dns-tcp".to_string(), 53, "TCP".to_string())
        ]
    );
    let coredns: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(client.clone(), "kube-system");
    let image = coredns
        .get("coredns")
        .await
        .expect("the coredns Deployment")
        .spec
        .and_then(|s| s.template.spec)
        .and_then(|s| s.containers.first().and_then(|c| c.image.clone()))
        .unwrap_or_default();
    assert_eq!(
        image,
        "602401143452.dkr.ecr.eu-west-1.amazonaws.com/eks/coredns:v1.11.4-eksbuild.2"
    );
    sandbox.shutdown().await;
}
