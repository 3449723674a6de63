//! The stack gke-gpu-pipelines' pipeline (`stacks/gke-gpu-pipelines/pipeline/`): the
//! checked-in `pipeline.yaml` is exactly what `pipeline.py` compiles to with the pinned
//! Kubeflow Pipelines SDK (installed by `scripts/deps.sh`; a machine without it fails
//! here rather than skipping), and it asks for what the stack's preemptible pool offers:
//! one T4, the pool's node labels, a toleration of its taint and five retries.

use std::process::Command;

use serde_json::{json, Value};

use crate::common::manifest_dir;

const DIR: &str = "stacks/gke-gpu-pipelines/pipeline";

/// The SDK's version, failing when python3 cannot import it.
fn kfp_version() -> String {
    let out = Command::new("python3")
        .args(["-c", "import kfp, kfp.kubernetes; print(kfp.__version__)"])
        .output()
        .expect("run python3 (scripts/deps.sh installs it)");
    assert!(
        out.status.success(),
        "the Kubeflow Pipelines SDK (kfp, kfp-kubernetes) is not importable by python3; \
         `bash scripts/deps.sh` installs it:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn checked_in() -> String {
    let path = manifest_dir().join(DIR).join("pipeline.yaml");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn the_compiled_pipeline_is_what_its_source_compiles_to() {
    let version = kfp_version();
    let dir = tempfile::tempdir().expect("temp dir");
    let out_path = dir.path().join("pipeline.yaml");
    let out = Command::new("python3")
        .arg(manifest_dir().join(DIR).join("pipeline.py"))
        .arg(&out_path)
        .current_dir(dir.path())
        .output()
        .expect("run python3");
    assert!(
        out.status.success(),
        "pipeline.py did not compile:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let compiled = std::fs::read_to_string(&out_path).expect("the compiled pipeline");
    let kept = checked_in();
    if compiled != kept {
        let line = compiled
            .lines()
            .zip(kept.lines())
            .position(|(a, b)| a != b)
            .map_or_else(|| "the length".to_string(), |i| format!("line {}", i + 1));
        panic!(
            "{DIR}/pipeline.yaml is not what pipeline.py compiles to with kfp {version} \
             (they first differ at {line}); recompile it with `python3 {DIR}/pipeline.py` \
             (the pinned SDK is what `bash scripts/deps.sh` installs):\n{compiled}"
        );
    }
}

fn documents(text: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(text)
        .map(|d| <Value as serde::Deserialize>::deserialize(d).expect("a YAML document"))
        .collect()
}

#[test]
fn the_compiled_pipeline_asks_for_one_t4_on_the_preemptible_pool() {
    let docs = documents(&checked_in());
    assert_eq!(docs.len(), 2, "the PipelineSpec, then the platform spec");
    let (spec, platform) = (&docs[0], &docs[1]);
    assert_eq!(spec["pipelineInfo"]["name"], "gpu-training");

    let task = &spec["root"]["dag"]["tasks"]["train"];
    let component = task["componentRef"]["name"]
        .as_str()
        .expect("train's component");
    let executor = spec["components"][component]["executorLabel"]
        .as_str()
        .expect("train's executor");
    let container = &spec["deploymentSpec"]["executors"][executor]["container"];
    assert_eq!(
        container["image"],
        "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"
    );

    // One GPU: the pipeline's `gpus` parameter, 1 unless a run says otherwise.
    let accelerator = &container["resources"]["accelerator"];
    assert_eq!(
        accelerator["resourceType"], "nvidia.com/gpu",
        "{accelerator}"
    );
    assert_eq!(
        accelerator["resourceCount"], "{{$.inputs.parameters['pipelinechannel--gpus']}}",
        "{accelerator}"
    );
    assert_eq!(
        task["inputs"]["parameters"]["pipelinechannel--gpus"]["componentInputParameter"],
        "gpus"
    );
    let gpus = &spec["root"]["inputDefinitions"]["parameters"]["gpus"];
    assert_eq!(gpus["parameterType"], "NUMBER_INTEGER", "{gpus}");
    assert_eq!(gpus["defaultValue"].as_f64(), Some(1.0), "{gpus}");

    // Retried through preemptions, and never answered from the cache.
    assert_eq!(task["retryPolicy"]["maxRetryCount"], 5, "{task}");
    assert_ne!(task["cachingOptions"]["enableCache"], true, "{task}");

    // On the stack's preemptible T4 pool, tolerating its taint.
    let stack: toml::Table = toml::from_str(
        &std::fs::read_to_string(manifest_dir().join("stacks/gke-gpu-pipelines/stack.toml"))
            .expect("the stack"),
    )
    .expect("the stack parses");
    let pool = &stack["module"]["preemptible_gpu"];
    assert_eq!(pool["gpu_type"].as_str(), Some("nvidia-tesla-t4"));
    assert_eq!(pool["preemptible"].as_bool(), Some(true));
    let pool_name = pool["name"].as_str().expect("the pool's name");
    let taint = pool["taints"][0].as_str().expect("the pool's taint");
    assert_eq!(taint, "preemptible=true:NoSchedule");

    let placement = &platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"][executor];
    assert_eq!(
        placement["nodeSelector"]["labels"],
        json!({
            "cloud.google.com/gke-accelerator": "nvidia-tesla-t4",
            "cloud.google.com/gke-nodepool": pool_name,
        }),
        "{placement}"
    );
    assert_eq!(
        placement["tolerations"],
        json!([{"effect": "NoSchedule", "key": "preemptible", "operator": "Equal", "value": "true"}]),
        "{placement}"
    );

    // The preprocessing step asks for nothing of the sort: it runs on the default pool.
    let prep = spec["root"]["dag"]["tasks"]["preprocess"]["componentRef"]["name"]
        .as_str()
        .expect("preprocess's component");
    let prep_executor = spec["components"][prep]["executorLabel"]
        .as_str()
        .expect("executor");
    assert_eq!(
        spec["deploymentSpec"]["executors"][prep_executor]["container"]["resources"],
        Value::Null
    );
    assert_eq!(
        platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
            .as_object()
            .expect("the platform's executors")
            .keys()
            .collect::<Vec<_>>(),
        [executor]
    );
}
