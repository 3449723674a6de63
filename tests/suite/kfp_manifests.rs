//! The Kubeflow Pipelines manifests the `kubeflow-pipelines` module applies
//! (`stacks/modules/kubeflow-pipelines/manifests/`) are the release's, as rendered in
//! `contracts/kubeflow-pipelines-2.17.0/`, with only the changes their README lists:
//! the cluster-scoped file byte for byte; the namespaced one without the two Secrets of
//! fixed credentials, MySQL's root password read from `mysql-secret`, and the pipeline
//! root templated. Every file has the sha256 its README states, and every object
//! passes `kubernetes-validate --strict` (CRDs excepted: it has no schema for their
//! custom kinds, and the CRDs themselves are checked as objects).

use serde_json::{json, Value};

use crate::common::{assert_readme_sha256, kubernetes_validate_strict, manifest_dir};

const DIR: &str = "stacks/modules/kubeflow-pipelines/manifests";

fn documents(text: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(text)
        .map(|d| <Value as serde::Deserialize>::deserialize(d).expect("a YAML document"))
        .filter(|d| !d.is_null())
        .collect()
}

fn read(path: &str) -> String {
    std::fs::read_to_string(manifest_dir().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn contract_cluster_scoped() -> Vec<u8> {
    terrain_contracts::bytes("kubeflow-pipelines-2.17.0/cluster-scoped-resources.yaml")
}

#[test]
fn the_cluster_scoped_manifest_is_the_releases_byte_for_byte() {
    let kept = std::fs::read(manifest_dir().join(DIR).join("cluster-scoped.yaml")).expect("read");
    assert!(
        kept == contract_cluster_scoped(),
        "cluster-scoped.yaml differs from the release's rendering"
    );
}

/// The release's namespaced install with the README's deliberate changes applied.
fn expected_namespaced() -> Vec<Value> {
    let mut out = Vec::new();
    for mut d in documents(&terrain_contracts::text(
        "kubeflow-pipelines-2.17.0/platform-agnostic.yaml",
    )) {
        if d["kind"] == "Secret" {
            assert!(
                ["mysql-secret", "mlpipeline-minio-artifact"]
                    .contains(&d["metadata"]["name"].as_str().unwrap_or("")),
                "an unexpected Secret: {d}"
            );
            continue;
        }
        if d["kind"] == "ConfigMap" && d["data"].get("defaultPipelineRoot").is_some() {
            d["data"]["defaultPipelineRoot"] = json!("${pipeline_root}");
        }
        if d["kind"] == "Deployment" && d["metadata"]["name"] == "mysql" {
            let env = &mut d["spec"]["template"]["spec"]["containers"][0]["env"];
            assert_eq!(env[0]["name"], "MYSQL_ALLOW_EMPTY_PASSWORD");
            env[0] = json!({"name": "MYSQL_ROOT_PASSWORD",
                            "valueFrom": {"secretKeyRef": {"key": "password", "name": "mysql-secret"}}});
        }
        out.push(d);
    }
    out
}

#[test]
fn the_namespaced_manifest_is_the_releases_with_only_the_listed_changes() {
    let kept = documents(&read(&format!("{DIR}/kubeflow-pipelines.yaml")));
    let expected = expected_namespaced();
    assert_eq!(kept.len(), expected.len(), "object count");
    for (k, e) in kept.iter().zip(&expected) {
        assert_eq!(
            k, e,
            "{} {} departs from the release",
            e["kind"], e["metadata"]["name"]
        );
    }
    assert_eq!(expected.len(), 70);
    // What the module's Secrets must hold for the pods that read them.
    let refs: std::collections::BTreeSet<(String, String)> =
        kept.iter().flat_map(|d| secret_refs(d)).collect();
    let module = read("stacks/modules/kubeflow-pipelines/main.toml");
    for (secret, key) in &refs {
        let block = module
            .split("\n[")
            .find(|b| b.contains(&format!("name       = \"{secret}\"")))
            .unwrap_or_else(|| panic!("the module makes no Secret {secret}"));
        assert!(
            block.contains(&format!("{key} = ")),
            "the module's {secret} has no key {key}:\n{block}"
        );
    }
    assert!(
        refs.contains(&("mysql-secret".into(), "password".into())),
        "{refs:?}"
    );
}

fn secret_refs(v: &Value) -> Vec<(String, String)> {
    match v {
        Value::Object(m) => {
            let mut out: Vec<(String, String)> = m.values().flat_map(secret_refs).collect();
            if let Some(r) = m.get("secretKeyRef") {
                if let (Some(n), Some(k)) = (r["name"].as_str(), r["key"].as_str()) {
                    out.push((n.to_string(), k.to_string()));
                }
            }
            out
        }
        Value::Array(a) => a.iter().flat_map(secret_refs).collect(),
        _ => Vec::new(),
    }
}

#[test]
fn every_manifest_file_has_the_sha256_its_readme_states() {
    assert_readme_sha256(
        &manifest_dir().join(DIR),
        &["cluster-scoped.yaml", "kubeflow-pipelines.yaml"],
    );
}

#[test]
fn the_kept_manifests_pass_kubernetes_validate_strict() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut files = Vec::new();
    let text = format!(
        "{}\n---\n{}",
        read(&format!("{DIR}/cluster-scoped.yaml")),
        read(&format!("{DIR}/kubeflow-pipelines.yaml"))
    );
    for (i, d) in documents(&text).iter().enumerate() {
        let path = dir.path().join(format!("{i:03}.yaml"));
        std::fs::write(&path, serde_yaml_ng::to_string(d).expect("yaml")).expect("write");
        files.push(path);
    }
    assert_eq!(files.len(), 86);
    kubernetes_validate_strict(&files, "a kept manifest");
}
