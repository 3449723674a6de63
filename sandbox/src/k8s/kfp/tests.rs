//! Tests of the emulated Kubeflow Pipelines, driven as clients drive a real install:
//! through the API server's service proxy to `ml-pipeline` in `kubeflow`, with the
//! controllers' clock moved by the test harness.

use axum::http::Method;
use serde_json::{json, Value};

use super::api::parse_package;
use super::multipart;
use super::runs::reclaim_roll;
use crate::faults::SpotReclaims;
use crate::k8s::api::{handle, Outcome};
use crate::k8s::controllers::testkit::{self, Harness};
use crate::k8s::request::KubeRequest;
use crate::k8s::{controllers, NodePoolInfo, SettleCtx};

/// The two-task pipeline (preprocess → train on a preemptible T4 with retries) as the
/// KFP SDK compiles it, with its platform document.
const PIPELINE: &str = include_str!("testdata/gpu_pipeline.yaml");
const KFP: &str = "/api/v1/namespaces/kubeflow/services/ml-pipeline:8888/proxy/apis/v2beta1";
const BOUNDARY: &str = "----kfpformboundary7MA4YWxkTrZu0gW";

/// The pool the fixture's train task selects: preemptible T4 nodes, tainted
/// `preemptible=true`.
fn preemptible_gpu_pool() -> NodePoolInfo {
    let mut p = testkit::pool("preemptible-gpu-pool", 1, 1);
    p.machine_type = "n1-standard-8".into();
    p.labels.insert(
        "cloud.google.com/gke-accelerator".into(),
        "nvidia-tesla-t4".into(),
    );
    p.labels
        .insert("cloud.google.com/gke-preemptible".into(), "true".into());
    p.taints = vec![json!({"key": "preemptible", "value": "true", "effect": "NoSchedule"})];
    p.extended_resources
        .insert("nvidia.com/gpu".into(), "1".into());
    p
}

/// A cluster with KFP's API server Deployment and `ml-pipeline` Service, settled until
/// the API server is ready.
fn installed() -> Harness {
    let mut h = Harness::standard(vec![
        testkit::pool("default-pool", 2, 2),
        preemptible_gpu_pool(),
    ]);
    h.create(
        "",
        "namespaces",
        "",
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kubeflow"}}),
    );
    h.create("apps", "deployments", "kubeflow", json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "ml-pipeline"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "ml-pipeline"}},
                 "template": {"metadata": {"labels": {"app": "ml-pipeline"}},
                              "spec": {"containers": [{"name": "ml-pipeline-api-server",
                                                       "image": "ghcr.io/kubeflow/kfp-api-server:2.17.0",
                                                       "ports": [{"name": "http", "containerPort": 8888},
                                                                 {"name": "grpc", "containerPort": 8887}]}]}}},
    }));
    h.create(
        "",
        "services",
        "kubeflow",
        json!({
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": "ml-pipeline"},
            "spec": {"selector": {"app": "ml-pipeline"},
                     "ports": [{"name": "http", "port": 8888}, {"name": "grpc", "port": 8887}]},
        }),
    );
    h.run_for(8.0);
    h
}

fn send(
    h: &mut Harness,
    method: Method,
    path_query: &str,
    content_type: Option<&str>,
    body: Vec<u8>,
) -> (u16, Value) {
    let (path, query) = path_query.split_once('?').unwrap_or((path_query, ""));
    let req = KubeRequest {
        method,
        path: path.to_string(),
        query: crate::http::parse_query(query),
        content_type: content_type.map(str::to_string),
        accept: None,
        user_agent: Some("kfp-client/2.14.3".into()),
        body,
        port_streams: false,
    };
    let ctx = SettleCtx {
        now: h.now,
        scale: h.scale,
        processes: &h.processes,
        data_dir: h.dir.path(),
        spot_reclaims: h.spot_reclaims,
    };
    match handle(&mut h.cluster, &req, &ctx) {
        Outcome::Done(r) => (r.status, r.json_body().cloned().unwrap_or(Value::Null)),
        other => panic!("expected a plain answer, got {other:?}"),
    }
}

fn call(h: &mut Harness, method: Method, path: &str, body: Option<Value>) -> (u16, Value) {
    let body = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
    send(
        h,
        method,
        &format!("{KFP}{path}"),
        Some("application/json"),
        body,
    )
}

fn upload(h: &mut Harness, path_query: &str, filename: &str, package: &str) -> (u16, Value) {
    let body = multipart::form(BOUNDARY, "uploadfile", filename, package.as_bytes());
    let ct = format!("multipart/form-data; boundary={BOUNDARY}");
    send(
        h,
        Method::POST,
        &format!("{KFP}{path_query}"),
        Some(&ct),
        body,
    )
}

/// The fixture with its spec and platform documents edited.
fn package(edit: impl FnOnce(&mut Value, &mut Value)) -> String {
    let (mut spec, platform) = parse_package(PIPELINE.as_bytes()).expect("the fixture parses");
    let mut platform = platform.expect("the fixture has a platform document");
    edit(&mut spec, &mut platform);
    format!(
        "{}---\n{}",
        serde_yaml_ng::to_string(&spec).expect("YAML"),
        serde_yaml_ng::to_string(&platform).expect("YAML")
    )
}

/// Uploads `package` and starts a run of its version; the run.
fn start_run(h: &mut Harness, package: &str, display_name: &str) -> Value {
    let (status, pipeline) = upload(h, "/pipelines/upload?name=gpu-training", "p.yaml", package);
    assert_eq!(status, 200, "{pipeline}");
    let pid = pipeline["pipeline_id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let (_, versions) = call(h, Method::GET, &format!("/pipelines/{pid}/versions"), None);
    let vid = versions["pipeline_versions"][0]["pipeline_version_id"].clone();
    let (status, run) = call(
        h,
        Method::POST,
        "/runs",
        Some(json!({
            "display_name": display_name,
            "pipeline_version_reference": {"pipeline_id": pid, "pipeline_version_id": vid},
            "runtime_config": {"parameters": {"epochs": 2, "gpus": "1"}},
        })),
    );
    assert_eq!(status, 200, "{run}");
    run
}

fn get_run(h: &mut Harness, id: &str) -> Value {
    let (status, run) = call(h, Method::GET, &format!("/runs/{id}"), None);
    assert_eq!(status, 200, "{run}");
    run
}

/// Moves the clock until the run has ended (or `secs` passed); the run.
fn finish(h: &mut Harness, id: &str, secs: f64) -> Value {
    for _ in 0..(secs * 2.0) as usize {
        h.run_for(0.5);
        let run = get_run(h, id);
        if matches!(
            run["state"].as_str(),
            Some("SUCCEEDED" | "FAILED" | "CANCELED")
        ) {
            return run;
        }
    }
    get_run(h, id)
}

fn task<'a>(run: &'a Value, name: &str) -> &'a Value {
    run["run_details"]["task_details"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t["display_name"] == name))
        .unwrap_or(&Value::Null)
}

fn pod(h: &Harness, name: &Value) -> Value {
    h.get("", "pods", "kubeflow", name.as_str().unwrap_or_default())
}

#[test]
fn the_service_proxy_answers_as_the_api_server_does() {
    let mut h = Harness::standard(vec![testkit::pool("default-pool", 1, 1)]);
    let path = |svc: &str| format!("/api/v1/namespaces/default/services/{svc}/proxy/healthz");
    let (status, body) = send(&mut h, Method::GET, &path("nope"), None, Vec::new());
    assert_eq!(status, 404);
    assert_eq!(body["message"], "services \"nope\" not found");
    assert_eq!(body["reason"], "NotFound");
    h.create("", "services", "default", json!({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": 8080}]},
    }));
    h.settle();
    let (status, body) = send(&mut h, Method::GET, &path("web"), None, Vec::new());
    assert_eq!(status, 503, "no pods yet");
    assert_eq!(body["reason"], "ServiceUnavailable");
    assert_eq!(
        body["message"],
        "no endpoints available for service \"web\""
    );
    h.create(
        "apps",
        "deployments",
        "default",
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "c", "image": "nginx"}]}}},
        }),
    );
    h.run_for(6.0);
    let (status, body) = send(&mut h, Method::GET, &path("web:nope"), None, Vec::new());
    assert_eq!(
        (status, body["message"].clone()),
        (503, json!("no endpoints available for service \"web\""))
    );
    let ip = h.list("", "pods", "default")[0]["status"]["podIP"].clone();
    let (status, body) = send(&mut h, Method::GET, &path("web:81"), None, Vec::new());
    assert_eq!(
        (status, body["message"].clone()),
        (503, json!("no service port 81 found for service \"web\""))
    );
    // Without a port the resolver looks for the unnamed one, which a Service with named
    // ports lacks.
    let (status, body) = send(&mut h, Method::GET, &path("web"), None, Vec::new());
    assert_eq!(
        (status, body["message"].clone()),
        (503, json!("no endpoints available for service \"web\""))
    );
    for svc in ["web:http", "web:80", "http:web:80"] {
        let (status, body) = send(&mut h, Method::POST, &path(svc), None, b"{}".to_vec());
        assert_eq!(status, 503, "{svc}: {body}");
        assert_eq!(
            body["message"],
            format!(
                "error trying to reach service: dial tcp {}:8080: connect: connection refused",
                ip.as_str().unwrap_or_default()
            ),
        );
    }
    // A Service with one unnamed port is reachable without naming it.
    h.create(
        "",
        "services",
        "default",
        json!({
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": "plain"},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]},
        }),
    );
    h.settle();
    let (status, body) = send(&mut h, Method::GET, &path("plain"), None, Vec::new());
    assert_eq!(status, 503);
    assert!(
        body["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("error trying to reach service: dial tcp ")),
        "{body}"
    );
    // Discovery lists the subresource.
    let (_, list) = send(&mut h, Method::GET, "/api/v1", None, Vec::new());
    assert!(list["resources"]
        .as_array()
        .is_some_and(|r| r.iter().any(|r| r["name"] == "services/proxy")));
}

#[test]
fn kfp_answers_behind_its_service_once_its_api_server_is_ready() {
    let mut h = Harness::standard(vec![testkit::pool("default-pool", 1, 1)]);
    h.create(
        "",
        "namespaces",
        "",
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kubeflow"}}),
    );
    h.create(
        "",
        "services",
        "kubeflow",
        json!({
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": "ml-pipeline"},
            "spec": {"selector": {"app": "ml-pipeline"},
                     "ports": [{"name": "http", "port": 8888}, {"name": "grpc", "port": 8887}]},
        }),
    );
    h.settle();
    let (status, body) = call(&mut h, Method::GET, "/healthz", None);
    assert_eq!(
        (status, body["message"].clone()),
        (
            503,
            json!("no endpoints available for service \"ml-pipeline\"")
        )
    );
    drop(h);
    let mut h = installed();
    let (status, body) = call(&mut h, Method::GET, "/healthz", None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        json!({"multi_user": false, "pipeline_store": "database"})
    );
    for svc in [
        "ml-pipeline:8888",
        "ml-pipeline:http",
        "http:ml-pipeline:8888",
    ] {
        let path = format!("/api/v1/namespaces/kubeflow/services/{svc}/proxy/apis/v2beta1/healthz");
        assert_eq!(
            send(&mut h, Method::GET, &path, None, Vec::new()).0,
            200,
            "{svc}"
        );
    }
    let bare = "/api/v1/namespaces/kubeflow/services/ml-pipeline/proxy/apis/v2beta1/healthz";
    assert_eq!(
        send(&mut h, Method::GET, bare, None, Vec::new()).0,
        503,
        "its ports are named"
    );
    let grpc = "/api/v1/namespaces/kubeflow/services/ml-pipeline:grpc/proxy/apis/v2beta1/healthz";
    let (status, body) = send(&mut h, Method::GET, grpc, None, Vec::new());
    assert_eq!(status, 503);
    assert!(
        body["message"]
            .as_str()
            .is_some_and(|m| m.ends_with(":8887: connect: connection refused")),
        "{body}"
    );
    let (status, body) = call(&mut h, Method::GET, "/nothing/here", None);
    assert_eq!((status, body["code"].clone()), (404, json!(5)));
    assert_eq!(call(&mut h, Method::PUT, "/runs", None).0, 405);
}

#[test]
fn pipelines_and_versions_are_uploaded_listed_and_deleted() {
    let mut h = installed();
    let (status, p) = upload(
        &mut h,
        "/pipelines/upload?description=GPU",
        "gpu_pipeline.yaml",
        PIPELINE,
    );
    assert_eq!(status, 200, "{p}");
    assert_eq!(p["name"], "gpu_pipeline", "named after the file");
    assert_eq!(p["display_name"], "gpu_pipeline");
    assert_eq!(p["description"], "GPU");
    assert!(p["created_at"].as_str().is_some_and(|t| t.ends_with('Z')));
    let pid = p["pipeline_id"].as_str().unwrap_or_default().to_string();
    assert_eq!(pid.len(), 36);
    let (status, again) = upload(&mut h, "/pipelines/upload", "gpu_pipeline.yaml", PIPELINE);
    assert_eq!(status, 409);
    assert_eq!(
        again["error_message"],
        "Failed to create a pipeline and a pipeline version: Already exist error: Failed to create a new pipeline. The name gpu_pipeline already exists. Please specify a new name"
    );
    let (status, bad) = upload(&mut h, "/pipelines/upload?name=x", "x.yaml", "a: [1,");
    assert_eq!(status, 400);
    assert!(
        bad["error_message"].as_str().is_some_and(|m| m.starts_with(
            "Failed to create a pipeline and a pipeline version. The pipeline spec is invalid."
        )),
        "{bad}"
    );
    let (status, bad) = upload(
        &mut h,
        "/pipelines/upload?name=x",
        "x.yaml",
        "pipelineInfo: {name: x}\n",
    );
    assert_eq!(status, 400, "no root: {bad}");
    let (status, _) = upload(
        &mut h,
        "/pipelines/upload_version?name=v2",
        "v.yaml",
        PIPELINE,
    );
    assert_eq!(status, 400, "no pipelineid");
    let (status, _) = upload(
        &mut h,
        "/pipelines/upload_version?name=v2&pipelineid=0000",
        "v.yaml",
        PIPELINE,
    );
    assert_eq!(status, 400, "an unknown pipelineid");
    let (status, v2) = upload(
        &mut h,
        &format!("/pipelines/upload_version?name=v2&pipelineid={pid}"),
        "v.yaml",
        PIPELINE,
    );
    assert_eq!(status, 200, "{v2}");
    assert_eq!(v2["pipeline_id"], pid.as_str());
    assert_eq!(v2["name"], "v2");
    assert_eq!(
        v2["pipeline_spec"]["pipeline_spec"]["pipelineInfo"]["name"],
        "gpu-training"
    );
    assert_eq!(
        v2["pipeline_spec"]["platform_spec"]["platforms"]["kubernetes"]["deploymentSpec"]
            ["executors"]["exec-train"]["tolerations"][0]["key"],
        "preemptible"
    );
    let (status, _) = upload(
        &mut h,
        &format!("/pipelines/upload_version?name=v2&pipelineid={pid}"),
        "v.yaml",
        PIPELINE,
    );
    assert_eq!(status, 409, "version names are unique in a pipeline");
    let (_, list) = call(&mut h, Method::GET, "/pipelines", None);
    assert_eq!(list["total_size"], 1);
    assert_eq!(list["next_page_token"], "");
    let filter = |name: &str| {
        crate::http::percent_encode(
            &json!({"predicates": [{"key": "name", "operation": "EQUALS", "string_value": name}]})
                .to_string(),
        )
    };
    let (_, found) = call(
        &mut h,
        Method::GET,
        &format!("/pipelines?filter={}", filter("gpu_pipeline")),
        None,
    );
    assert_eq!(found["pipelines"][0]["pipeline_id"], pid.as_str());
    let by_display = crate::http::percent_encode(
        &json!({"predicates": [{"key": "display_name", "operation": 1, "stringValue": "gpu_pipeline"}]})
            .to_string(),
    );
    let (_, found) = call(
        &mut h,
        Method::GET,
        &format!("/pipelines?filter={by_display}"),
        None,
    );
    assert_eq!(
        found["total_size"], 1,
        "JSON names and enum numbers: {found}"
    );
    let (_, none) = call(
        &mut h,
        Method::GET,
        &format!("/pipelines?filter={}", filter("other")),
        None,
    );
    assert_eq!(none["total_size"], 0);
    let (status, by_name) = call(&mut h, Method::GET, "/pipelines/names/gpu_pipeline", None);
    assert_eq!((status, by_name["pipeline_id"].clone()), (200, json!(pid)));
    let (_, versions) = call(
        &mut h,
        Method::GET,
        &format!("/pipelines/{pid}/versions?page_size=1"),
        None,
    );
    assert_eq!(versions["total_size"], 2);
    assert_eq!(
        versions["pipeline_versions"].as_array().map(Vec::len),
        Some(1)
    );
    assert_eq!(versions["next_page_token"], "1");
    let vid = versions["pipeline_versions"][0]["pipeline_version_id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let (status, v) = call(
        &mut h,
        Method::GET,
        &format!("/pipelines/{pid}/versions/{vid}"),
        None,
    );
    assert_eq!(status, 200);
    assert_eq!(
        v["pipeline_spec"]["pipeline_spec"]["root"]["dag"]["tasks"]["train"]["taskInfo"]["name"],
        "train"
    );
    let (status, refused) = call(&mut h, Method::DELETE, &format!("/pipelines/{pid}"), None);
    assert_eq!((status, refused["code"].clone()), (400, json!(9)));
    assert!(
        refused["message"]
            .as_str()
            .is_some_and(|m| m.contains("has pipeline versions. Delete them first or use cascade")),
        "{refused}"
    );
    let (status, _) = call(
        &mut h,
        Method::DELETE,
        &format!("/pipelines/{pid}/versions/{vid}"),
        None,
    );
    assert_eq!(status, 200);
    let (status, body) = call(
        &mut h,
        Method::DELETE,
        &format!("/pipelines/{pid}?cascade=true"),
        None,
    );
    assert_eq!((status, body), (200, json!({})));
    let (status, gone) = call(&mut h, Method::GET, &format!("/pipelines/{pid}"), None);
    assert_eq!((status, gone["code"].clone()), (404, json!(5)));
    assert!(
        h.cluster.kfp.versions.is_empty(),
        "cascade removed the versions"
    );
}

#[test]
fn bodies_with_unknown_fields_are_refused() {
    let mut h = installed();
    let (status, e) = call(
        &mut h,
        Method::POST,
        "/experiments",
        Some(json!({"display_name": "x", "foo": 1})),
    );
    assert_eq!(status, 400);
    assert_eq!(e["code"], 3);
    assert_eq!(e["message"], "proto: (line 1:21): unknown field \"foo\"");
    assert_eq!(e["details"], json!([]));
    let (status, e) = call(
        &mut h,
        Method::POST,
        "/runs",
        Some(json!({"display_name": "r", "runtime_config": {"params": {}}})),
    );
    assert_eq!(status, 400, "nested messages are checked too: {e}");
    let (status, exp) = call(
        &mut h,
        Method::POST,
        "/experiments",
        Some(json!({"displayName": "exp", "description": "d"})),
    );
    assert_eq!(
        status, 200,
        "JSON names are accepted as protojson does: {exp}"
    );
    assert_eq!(exp["display_name"], "exp");
    assert_eq!(exp["storage_state"], "AVAILABLE");
    let (status, _) = call(
        &mut h,
        Method::POST,
        "/experiments",
        Some(json!({"display_name": "exp"})),
    );
    assert_eq!(status, 409);
}

#[test]
fn a_run_schedules_its_tasks_on_the_right_nodes_and_succeeds() {
    let mut h = installed();
    h.create(
        "",
        "configmaps",
        "kubeflow",
        json!({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kfp-launcher"},
            "data": {"defaultPipelineRoot": "gs://artifacts/root/"},
        }),
    );
    // Argo's Workflow CRD, as KFP's manifests install it.
    h.create("apiextensions.k8s.io", "customresourcedefinitions", "", json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "workflows.argoproj.io"},
        "spec": {"group": "argoproj.io", "scope": "Namespaced",
                 "names": {"kind": "Workflow", "listKind": "WorkflowList", "plural": "workflows", "singular": "workflow", "shortNames": ["wf"]},
                 "versions": [{"name": "v1alpha1", "served": true, "storage": true,
                               "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]},
    }));
    let run = start_run(&mut h, PIPELINE, "gpu-run");
    let id = run["run_id"].as_str().unwrap_or_default().to_string();
    assert_eq!(run["state"], "PENDING");
    assert_eq!(run["service_account"], "pipeline-runner");
    assert_eq!(run["finished_at"], "1970-01-01T00:00:00Z");
    assert_eq!(run["storage_state"], "AVAILABLE");
    let (_, experiments) = call(&mut h, Method::GET, "/experiments", None);
    assert_eq!(experiments["experiments"][0]["display_name"], "Default");
    assert_eq!(
        run["experiment_id"],
        experiments["experiments"][0]["experiment_id"]
    );
    let run = finish(&mut h, &id, 40.0);
    assert_eq!(run["state"], "SUCCEEDED", "{run}");
    assert_ne!(run["finished_at"], "1970-01-01T00:00:00Z");
    let states: Vec<&str> = run["state_history"]
        .as_array()
        .map(|a| a.iter().filter_map(|s| s["state"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(states, ["PENDING", "RUNNING", "SUCCEEDED"]);
    let pre = task(&run, "preprocess");
    let train = task(&run, "train");
    assert_eq!(
        (pre["state"].clone(), train["state"].clone()),
        (json!("SUCCEEDED"), json!("SUCCEEDED"))
    );
    assert!(
        pre["end_time"].as_str() <= train["start_time"].as_str(),
        "train waited for preprocess"
    );
    let pre_pod = pod(&h, &pre["pod_name"]);
    let train_pod = pod(&h, &train["pod_name"]);
    let name = train_pod["metadata"]["name"].as_str().unwrap_or_default();
    assert!(
        name.starts_with("gpu-training-") && name.contains("-system-container-impl-"),
        "{name}"
    );
    assert_eq!(name.rsplit('-').next().map(str::len), Some(10));
    assert_eq!(
        train_pod["metadata"]["labels"]["pipeline/runid"],
        id.as_str()
    );
    assert_eq!(
        train_pod["metadata"]["labels"]["pipelines.kubeflow.org/v2_component"],
        "true"
    );
    assert_eq!(
        train_pod["metadata"]["annotations"]["pipelines.kubeflow.org/task_display_name"],
        "train"
    );
    let main = &train_pod["spec"]["containers"][0];
    assert_eq!(main["name"], "main");
    assert_eq!(
        main["image"],
        "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"
    );
    assert_eq!(
        main["resources"]["limits"]["nvidia.com/gpu"], "1",
        "the placeholder took the run's gpus"
    );
    assert_eq!(
        train_pod["spec"]["nodeSelector"]["cloud.google.com/gke-nodepool"],
        "preemptible-gpu-pool"
    );
    assert_eq!(train_pod["spec"]["tolerations"][0]["key"], "preemptible");
    assert_eq!(train_pod["spec"]["serviceAccountName"], "pipeline-runner");
    assert_eq!(train_pod["spec"]["restartPolicy"], "Never");
    assert!(
        train_pod["spec"]["nodeName"]
            .as_str()
            .is_some_and(|n| n.contains("preemptible-gpu-pool")),
        "{}",
        train_pod["spec"]
    );
    assert!(
        pre_pod["spec"]["nodeName"]
            .as_str()
            .is_some_and(|n| n.contains("default-pool")),
        "{}",
        pre_pod["spec"]
    );
    assert_eq!(
        pre_pod["metadata"]["annotations"]["sandbox.terrain.dev/writes"],
        format!("gs://artifacts/root/gpu-training/{id}/preprocess/")
    );
    let (_, runs) = call(&mut h, Method::GET, "/runs", None);
    assert_eq!(runs["total_size"], 1);
    // The run's Argo Workflow owns its pods and shows its outcome.
    let workflows = h.list("argoproj.io", "workflows", "kubeflow");
    assert_eq!(workflows.len(), 1);
    assert_eq!(workflows[0]["status"]["phase"], "Succeeded");
    assert_eq!(
        workflows[0]["metadata"]["labels"]["pipeline/runid"],
        id.as_str()
    );
    assert!(name.starts_with(workflows[0]["metadata"]["name"].as_str().unwrap_or("?")));
    assert_eq!(
        train_pod["metadata"]["ownerReferences"][0]["kind"],
        "Workflow"
    );
}

#[test]
fn a_failing_task_fails_the_run_after_its_retries() {
    let mut h = installed();
    let failing = package(|spec, platform| {
        spec["root"]["dag"]["tasks"]["train"]["retryPolicy"]["maxRetryCount"] = json!(1);
        platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]["exec-train"]
            ["podMetadata"] = json!({"annotations": {"sandbox.terrain.dev/exit-code": "1"}, "labels": {"team": "ml"}});
    });
    let run = start_run(&mut h, &failing, "failing");
    let id = run["run_id"].as_str().unwrap_or_default().to_string();
    h.run_for(6.0);
    // KFP's database is kept with the cluster: a restarted sandbox carries the run on.
    let saved = serde_json::to_string(&h.cluster).expect("the cluster serializes");
    h.cluster = serde_json::from_str(&saved).expect("and reads back");
    assert!(h.cluster.kfp.runs.contains_key(&id));
    let run = finish(&mut h, &id, 60.0);
    assert_eq!(run["state"], "FAILED", "{run}");
    let train = task(&run, "train");
    assert_eq!(train["state"], "FAILED");
    assert_eq!(
        train["child_tasks"].as_array().map(Vec::len),
        Some(2),
        "one retry: {train}"
    );
    let message = run["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("task train failed: pod ") && message.contains("exited with code 1"),
        "{message}"
    );
    assert_eq!(
        train["error"]["message"]
            .as_str()
            .map(|m| message.ends_with(m)),
        Some(true)
    );
    let last = pod(&h, &train["pod_name"]);
    assert_eq!(last["metadata"]["labels"]["team"], "ml");
    let log =
        controllers::pod_logs(&h.cluster, "kubeflow", obj_name(&last), None, h.now).expect("a log");
    assert!(log.ends_with("Error: exited with code 1\n"), "{log}");
}

fn obj_name(v: &Value) -> &str {
    v["metadata"]["name"].as_str().unwrap_or_default()
}

/// A seed whose draws reclaim the train task's first attempt and spare its second.
const RECLAIM_SEED: u64 = 3;

#[test]
fn seeded_spot_reclaims_preempt_an_attempt_that_is_then_retried() {
    assert!(reclaim_roll(RECLAIM_SEED, "spot-run", "train", 0) < 0.5);
    assert!(reclaim_roll(RECLAIM_SEED, "spot-run", "train", 1) >= 0.5);
    let attempts = || {
        let mut h = installed();
        h.spot_reclaims = Some(SpotReclaims {
            rate: 0.5,
            seed: RECLAIM_SEED,
        });
        let run = start_run(&mut h, PIPELINE, "spot-run");
        let id = run["run_id"].as_str().unwrap_or_default().to_string();
        let run = finish(&mut h, &id, 60.0);
        assert_eq!(run["state"], "SUCCEEDED", "{run}");
        let train = task(&run, "train");
        let pods: Vec<Value> = train["child_tasks"].as_array().cloned().unwrap_or_default();
        let first = pod(&h, &pods[0]["pod_name"]);
        assert_eq!(
            first["status"]["message"],
            "Pod was terminated in response to imminent node shutdown."
        );
        assert!(pods.len() <= 6, "within 5 retries");
        (
            pods.len(),
            task(&run, "preprocess")["child_tasks"]
                .as_array()
                .map(Vec::len),
        )
    };
    let once = attempts();
    assert_eq!(
        once,
        (2, Some(1)),
        "the first train attempt reclaimed, the second not; preprocess on standard VMs"
    );
    assert_eq!(attempts(), once, "the same seed replays the same reclaims");
}

#[test]
fn a_run_is_terminated_archived_and_deleted() {
    let mut h = installed();
    let run = start_run(&mut h, PIPELINE, "stop-me");
    let id = run["run_id"].as_str().unwrap_or_default().to_string();
    h.run_for(3.0);
    let run = get_run(&mut h, &id);
    assert_eq!(run["state"], "RUNNING", "{run}");
    let pre = task(&run, "preprocess")["pod_name"].clone();
    let (status, body) = call(&mut h, Method::POST, &format!("/runs/{id}:terminate"), None);
    assert_eq!((status, body), (200, json!({})));
    assert_eq!(get_run(&mut h, &id)["state"], "CANCELING");
    let run = finish(&mut h, &id, 10.0);
    assert_eq!(run["state"], "CANCELED", "{run}");
    assert_eq!(task(&run, "preprocess")["state"], "CANCELED");
    assert!(
        task(&run, "train").is_null(),
        "nothing started after the terminate"
    );
    assert!(pod(&h, &pre).is_null(), "the running pod was deleted");
    assert_eq!(
        call(&mut h, Method::POST, &format!("/runs/{id}:archive"), None).0,
        200
    );
    assert_eq!(get_run(&mut h, &id)["storage_state"], "ARCHIVED");
    assert_eq!(
        call(&mut h, Method::POST, &format!("/runs/{id}:unarchive"), None).0,
        200
    );
    assert_eq!(get_run(&mut h, &id)["storage_state"], "AVAILABLE");
    let run = start_run_again(&mut h);
    let id2 = run["run_id"].as_str().unwrap_or_default().to_string();
    let run = finish(&mut h, &id2, 40.0);
    let pods: Vec<Value> = ["preprocess", "train"]
        .iter()
        .map(|t| task(&run, t)["pod_name"].clone())
        .collect();
    assert!(
        pods.iter().all(|p| !pod(&h, p).is_null()),
        "finished pods stay with their run"
    );
    let (status, body) = call(&mut h, Method::DELETE, &format!("/runs/{id2}"), None);
    assert_eq!((status, body), (200, json!({})));
    h.run_for(3.0);
    assert!(
        pods.iter().all(|p| pod(&h, p).is_null()),
        "deleting the run deleted its pods"
    );
    let (status, e) = call(&mut h, Method::GET, &format!("/runs/{id2}"), None);
    assert_eq!((status, e["code"].clone()), (404, json!(5)));
}

/// A second run of the pipeline uploaded by [`start_run`].
fn start_run_again(h: &mut Harness) -> Value {
    let (_, by_name) = call(h, Method::GET, "/pipelines/names/gpu-training", None);
    let pid = by_name["pipeline_id"].clone();
    let (_, versions) = call(
        h,
        Method::GET,
        &format!("/pipelines/{}/versions", pid.as_str().unwrap_or_default()),
        None,
    );
    let vid = versions["pipeline_versions"][0]["pipeline_version_id"].clone();
    let (status, run) = call(
        h,
        Method::POST,
        "/runs",
        Some(json!({
            "display_name": "again",
            "pipeline_version_reference": {"pipeline_id": pid, "pipeline_version_id": vid},
        })),
    );
    assert_eq!(status, 200, "{run}");
    run
}
