//! Every `kubernetes_*` kind's rendered objects, for representative specs, checked two
//! ways: against the official Kubernetes 1.31 OpenAPI document (`contract/openapi.rs`)
//! and by the third-party validator `kubernetes-validate --strict` (installed by
//! `scripts/deps.sh`). What the provider applies is exactly what it renders, so a field
//! the API would reject fails here, offline.

use crate::common::kubernetes_validate_strict;
use crate::contract::openapi;

use std::process::Command;

use serde_json::{json, Value};
use terrain_providers::registry::builtin;

/// A cluster reference as a GKE cluster reports it (never contacted here).
fn cluster(autopilot: bool) -> Value {
    json!({
        "host": "https://127.0.0.1:6443",
        "ca_certificate": "",
        "auth": {"type": "google"},
        "flavor": "gke",
        "autopilot": autopilot,
        "name": "batch-aiml",
        "location": "us-central1",
        "project": "p",
    })
}

/// (kind, a name for messages, spec) for each shape worth rendering.
fn samples() -> Vec<(&'static str, &'static str, Value)> {
    let gpu_pool = json!({
        "pool": "preemptible-gpu",
        "node_selector": {"cloud.google.com/gke-nodepool": "preemptible-gpu", "cloud.google.com/gke-accelerator": "nvidia-tesla-t4", "cloud.google.com/gke-preemptible": "true"},
        "taints": [{"key": "preemptible", "value": "true", "effect": "NO_SCHEDULE"}],
        "accelerator": {"type": "nvidia-tesla-t4", "count": 4},
        "tpu": null,
        "spot": true,
    });
    vec![
        (
            "kubernetes_nfs_volume",
            "filestore volume",
            json!({
                "cluster": cluster(true), "name": "fileserver", "claim_name": "fileserver-claim",
                "server": "10.0.0.2", "path": "/NFSVol", "capacity": "1Ti",
            }),
        ),
        (
            "kubernetes_redis",
            "redis pod with the claim",
            json!({
                "cluster": cluster(true), "name": "redis-leader",
                "volume": {"claim": "fileserver-claim", "mount_path": "/mnt/fileserver"},
            }),
        ),
        (
            "kubernetes_redis",
            "redis deployment",
            json!({
                "cluster": cluster(true), "name": "queue", "workload": "deployment",
                "resources": {"cpu": "250m", "memory": "256Mi"}, "labels": {"team": "ml"},
            }),
        ),
        (
            "kubernetes_job",
            "spot batch job",
            json!({
                "cluster": cluster(true), "name": "workload",
                "image": "us-docker.pkg.dev/google-samples/containers/gke/batch-ml-workload",
                "spot": true, "restart_policy": "OnFailure",
                "volumes": [{"claim": "fileserver-claim", "mount_path": "/mnt/fileserver"}],
                "env": {"QUEUE": "redis-leader"}, "secret_env": {"TOKEN": "s3cr3t"},
                "ttl_seconds_after_finished": 600,
            }),
        ),
        (
            "kubernetes_job",
            "gpu job on a tainted pool",
            json!({
                "cluster": cluster(false), "name": "train", "image": "nvcr.io/nvidia/pytorch:24.01-py3",
                "command": ["python", "train.py"], "args": ["--epochs", "3"],
                "gpus": 1, "gpu_type": "nvidia-tesla-t4", "retries": 5, "node_pool": gpu_pool,
                "resources": {"cpu": "4", "memory": "16Gi"},
            }),
        ),
        (
            "kubernetes_job",
            "tpu job",
            json!({
                "cluster": cluster(false), "name": "tpu-train", "image": "python:3.11",
                "tpu": {"type": "tpu-v5-lite-podslice", "topology": "2x4", "chips": 4},
                "restart_policy": "Never",
            }),
        ),
        (
            "kubernetes_manifest",
            "driver daemonset and binding",
            json!({
                "cluster": cluster(false),
                "manifest": [
                    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                     "metadata": {"name": "pipeline-runner"},
                     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
                     "subjects": [{"kind": "ServiceAccount", "name": "pipeline-runner", "namespace": "kubeflow"}]},
                    {"apiVersion": "apps/v1", "kind": "DaemonSet",
                     "metadata": {"name": "nvidia-driver-installer", "namespace": "kube-system"},
                     "spec": {"selector": {"matchLabels": {"k8s-app": "nvidia-driver-installer"}},
                              "template": {"metadata": {"labels": {"k8s-app": "nvidia-driver-installer"}},
                                           "spec": {"containers": [{"name": "pause", "image": "gcr.io/google-containers/pause:2.0"}]}}}},
                ],
            }),
        ),
    ]
}

fn render(kind: &str, spec: &Value) -> Vec<Value> {
    let registry = builtin();
    let resource = registry
        .get(kind)
        .unwrap_or_else(|| panic!("the registry has no kind {kind}"));
    let spec = resource.schema().with_defaults(spec);
    let spec = resource
        .prepare(spec)
        .unwrap_or_else(|e| panic!("{kind}: prepare: {e}"));
    resource
        .render(&spec, &json!({}))
        .unwrap_or_else(|| panic!("{kind} has no rendered form"))
        .unwrap_or_else(|e| panic!("{kind}: render: {e}"))
}

#[test]
fn rendered_objects_match_the_kubernetes_openapi_document() {
    let swagger = openapi::load();
    let mut problems = Vec::new();
    for (kind, what, spec) in samples() {
        let objects = render(kind, &spec);
        assert!(!objects.is_empty(), "{kind} ({what}) renders nothing");
        for o in &objects {
            for p in swagger.check(o) {
                problems.push(format!(
                    "{kind} ({what}) {} {}: {p}",
                    o["kind"].as_str().unwrap_or("?"),
                    o["metadata"]["name"].as_str().unwrap_or("?")
                ));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "rendered objects depart from the OpenAPI document:\n{}",
        problems.join("\n")
    );
}

#[test]
fn rendered_objects_pass_kubernetes_validate_strict() {
    let Ok(out) = Command::new("kubernetes-validate")
        .arg("--version")
        .output()
    else {
        panic!("kubernetes-validate is not installed; run scripts/deps.sh");
    };
    assert!(out.status.success(), "kubernetes-validate --version failed");
    let dir = tempfile::tempdir().expect("temp dir");
    let mut files = Vec::new();
    for (i, (kind, _, spec)) in samples().into_iter().enumerate() {
        for (j, o) in render(kind, &spec).iter().enumerate() {
            let path = dir.path().join(format!("{i:02}-{j}-{kind}.yaml"));
            std::fs::write(&path, serde_yaml_ng::to_string(o).expect("yaml"))
                .expect("write manifest");
            files.push(path);
        }
    }
    kubernetes_validate_strict(&files, "rendered objects");
}

#[test]
fn the_openapi_checker_catches_a_bad_object() {
    // The checker itself must be able to fail: an unknown field, a wrong type and a
    // missing required field in one Job.
    let swagger = openapi::load();
    let bad = json!({
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "x"},
        "spec": {"backoffLimit": "six", "template": {"spec": {"containers": [{"image": "busybox", "nodeSelectr": {}}]}}},
    });
    let problems = swagger.check(&bad);
    assert!(
        problems.iter().any(|p| p.contains("backoffLimit")),
        "{problems:?}"
    );
    assert!(
        problems.iter().any(|p| p.contains("nodeSelectr")),
        "{problems:?}"
    );
    assert!(
        problems.iter().any(|p| p.contains("name: required")),
        "{problems:?}"
    );
}
