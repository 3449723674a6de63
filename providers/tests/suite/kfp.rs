//! `kfp_pipeline` and `kfp_run` against the sandbox's Kubeflow Pipelines: KFP's API
//! server Deployment and Service applied on an Autopilot cluster (the sandbox then
//! serves KFP's REST API behind the Service), reached through the API server's service
//! proxy. A pipeline goes upload → read (no diff) → new version for a changed file →
//! the old file's version used again → destroy (versions, then the pipeline); a run
//! goes from submitted to SUCCEEDED with its tasks' pods on the nodes they ask for; a
//! failing run is tainted and names the failed task with its pod's last log lines;
//! `on_destroy = "archive"` keeps the run in KFP's history; before KFP is installed the
//! calls fail naming the Service and how to install it.

use serde_json::{json, Value};
use terrain_providers::kubernetes::apply;
use terrain_providers::ProviderError;

use crate::kubernetes::{ctx, kind, recording, without_nulls, Env};

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/kfp/gpu_pipeline.yaml"
);

/// The fixture pipeline with its training step steered to Autopilot's T4 nodes (there
/// is no named pool on Autopilot), and `extra` lines added to the platform spec of the
/// training step.
fn pipeline_text(extra: &str) -> String {
    let text = std::fs::read_to_string(FIXTURE).expect("fixture");
    let platform = text.find("---").expect("two documents");
    format!(
        "{}---\nplatforms:\n  kubernetes:\n    deploymentSpec:\n      executors:\n        exec-train:\n          nodeSelector:\n            labels:\n              cloud.google.com/gke-accelerator: nvidia-tesla-t4\n{extra}",
        &text[..platform]
    )
}

/// Installs what the sandbox recognises as KFP: its API server's Deployment and
/// Service in `kubeflow`, and the account steps run as.
async fn install_kfp(env: &Env) {
    let objects = [
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kubeflow"}}),
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "pipeline-runner", "namespace": "kubeflow"}}),
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "ml-pipeline", "namespace": "kubeflow"},
               "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "ml-pipeline"}},
                        "template": {"metadata": {"labels": {"app": "ml-pipeline"}},
                                     "spec": {"containers": [{"name": "ml-pipeline-api-server", "image": "ghcr.io/kubeflow/kfp-api-server:2.17.0",
                                                              "ports": [{"name": "http", "containerPort": 8888}, {"name": "grpc", "containerPort": 8887}]}]}}}}),
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "ml-pipeline", "namespace": "kubeflow"},
               "spec": {"selector": {"app": "ml-pipeline"},
                        "ports": [{"name": "http", "port": 8888, "targetPort": 8888}, {"name": "grpc", "port": 8887, "targetPort": 8887}]}}),
    ];
    apply::apply_all(&env.client, &objects, true)
        .await
        .expect("KFP's API server applies");
}

fn pipeline_spec(env: &Env, file: &std::path::Path) -> Value {
    env.spec(
        "kfp_pipeline",
        json!({"name": "gpu-training", "file": file.display().to_string()}),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelines_upload_versions_and_runs_succeed_then_destroy() {
    let env = Env::start().await;
    let file = env.dir.path().join("pipeline.yaml");
    std::fs::write(&file, pipeline_text("")).expect("write");
    let pipelines = kind("kfp_pipeline");
    let p_ctx = ctx("kfp_pipeline.training");
    let spec = pipeline_spec(&env, &file);

    // Before KFP is installed there is no Service to proxy to.
    let Err(e) = pipelines.create(&p_ctx, &spec).await else {
        panic!("no KFP, no upload")
    };
    let text = e.to_string();
    assert!(
        text.starts_with(
            "kfp.pipelines.getByName failed: 404 NotFound: services \"ml-pipeline\" not found; "
        ),
        "{text}"
    );
    assert!(text.contains("the kubeflow-pipelines module"), "{text}");

    install_kfp(&env).await;
    let created = pipelines.create(&p_ctx, &spec).await.expect("uploaded");
    assert_eq!(created.id, "kubeflow/gpu-training");
    let first_version = created.outputs["version_id"].clone();
    assert_eq!(created.outputs["versions"], 1);
    let read = pipelines
        .read(&p_ctx, &created.id, &spec)
        .await
        .expect("read")
        .expect("exists");
    assert_eq!(
        without_nulls(&read.spec),
        without_nulls(&spec),
        "a fresh upload reads back as its spec"
    );
    assert_eq!(read.outputs, created.outputs);

    // A changed file is a new version of the same pipeline.
    std::fs::write(
        &file,
        pipeline_text("").replace("defaultValue: 3.0", "defaultValue: 5.0"),
    )
    .expect("write");
    let changed = pipeline_spec(&env, &file);
    assert_ne!(changed["digest"], spec["digest"]);
    let read = pipelines
        .read(&p_ctx, &created.id, &changed)
        .await
        .expect("read")
        .expect("exists");
    assert_ne!(
        read.spec["digest"], changed["digest"],
        "the live pipeline does not hold the new file yet"
    );
    let updated = pipelines
        .update(&p_ctx, &created.id, &spec, &changed)
        .await
        .expect("a new version");
    assert_eq!(updated.outputs["versions"], 2);
    assert_ne!(updated.outputs["version_id"], first_version);
    assert_eq!(
        updated.outputs["pipeline_id"],
        created.outputs["pipeline_id"]
    );
    // Back to the first file: its version is used again, nothing is uploaded.
    std::fs::write(&file, pipeline_text("")).expect("write");
    let back = pipelines
        .update(&p_ctx, &created.id, &changed, &spec)
        .await
        .expect("the first version");
    assert_eq!(back.outputs["version_id"], first_version);
    assert_eq!(back.outputs["versions"], 2);

    // A run of the first version, followed until it succeeds.
    let runs = kind("kfp_run");
    let (r_ctx, progress) = recording("kfp_run.train");
    let run_spec = env.spec(
        "kfp_run",
        json!({"name": "train-1", "experiment": "tests", "pipeline": created.outputs["pipeline_id"],
               "version": first_version, "parameters": {"epochs": 2}}),
    );
    let run = runs
        .create(&r_ctx, &run_spec)
        .await
        .expect("the run succeeds");
    assert_eq!(run.id, "kubeflow/tests/train-1");
    assert_eq!(run.outputs["state"], "SUCCEEDED");
    assert_eq!(
        run.outputs["tasks"],
        json!({"preprocess": "SUCCEEDED", "train": "SUCCEEDED"})
    );
    let seen = progress.lock().expect("progress").clone();
    assert!(
        seen.first().is_some_and(|m| m
            == &format!(
                "run {} started",
                run.outputs["run_id"].as_str().unwrap_or_default()
            )),
        "{seen:?}"
    );
    let read = runs
        .read(&r_ctx, &run.id, &run_spec)
        .await
        .expect("read")
        .expect("exists");
    assert_eq!(
        without_nulls(&read.spec),
        without_nulls(&run_spec),
        "a run reads back as its spec"
    );
    // Its training pod ran on a T4 node.
    let pods = apply::list(&env.client, "v1", "Pod", Some("kubeflow"), "")
        .await
        .expect("pods");
    let train = pods
        .iter()
        .find(|p| {
            p["spec"]["nodeSelector"]["cloud.google.com/gke-accelerator"] == "nvidia-tesla-t4"
        })
        .expect("a training pod");
    assert_eq!(
        train["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"],
        "1"
    );
    assert_eq!(train["status"]["phase"], "Succeeded");

    runs.delete(&r_ctx, &run.id, &run_spec)
        .await
        .expect("deleted");
    assert!(runs
        .read(&r_ctx, &run.id, &run_spec)
        .await
        .expect("read")
        .is_none());
    runs.delete(&r_ctx, &run.id, &run_spec)
        .await
        .expect("deleting what is gone succeeds");

    // Destroy: the versions, then the pipeline (KFP refuses the other order).
    pipelines
        .delete(&p_ctx, &created.id, &spec)
        .await
        .expect("deleted");
    assert!(pipelines
        .read(&p_ctx, &created.id, &spec)
        .await
        .expect("read")
        .is_none());
    env.sandbox.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_run_is_tainted_and_names_the_task_with_its_log_tail() {
    let env = Env::start().await;
    install_kfp(&env).await;
    let file = env.dir.path().join("pipeline.yaml");
    // The sandbox's step fails as the pipeline's code would: exit code 2.
    std::fs::write(
        &file,
        pipeline_text("          podMetadata:\n            annotations:\n              sandbox.terrain.dev/exit-code: '2'\n"),
    )
    .expect("write");
    let pipelines = kind("kfp_pipeline");
    let p_ctx = ctx("kfp_pipeline.training");
    let spec = pipeline_spec(&env, &file);
    let created = pipelines.create(&p_ctx, &spec).await.expect("uploaded");
    let runs = kind("kfp_run");
    let r_ctx = ctx("kfp_run.train");
    let run_spec = env.spec(
        "kfp_run",
        json!({"name": "train-1", "pipeline": created.outputs["pipeline_id"],
               "version": created.outputs["version_id"], "on_destroy": "archive"}),
    );
    let Err(e) = runs.create(&r_ctx, &run_spec).await else {
        panic!("a run whose step fails must fail")
    };
    match &e {
        ProviderError::Tainted { id, error } => {
            assert_eq!(id, "kubeflow/Default/train-1");
            assert!(matches!(**error, ProviderError::Failed { .. }), "{error:?}");
        }
        other => panic!("a failed run is tainted, not {other:?}"),
    }
    let text = e.to_string();
    assert!(text.starts_with("kfp run "), "{text}");
    // Five retries, as the pipeline says, then the task's error and its pod's log.
    assert!(
        text.contains("\n  task train failed after 6 attempts: "),
        "{text}"
    );
    assert!(text.contains("last log lines of pod "), "{text}");
    assert!(text.contains("exited with code 2"), "{text}");

    // Archived on destroy: gone for terrain, kept in KFP's history.
    runs.delete(&r_ctx, "kubeflow/Default/train-1", &run_spec)
        .await
        .expect("archived");
    assert!(runs
        .read(&r_ctx, "kubeflow/Default/train-1", &run_spec)
        .await
        .expect("read")
        .is_none());
    env.sandbox.shutdown().await;
}
