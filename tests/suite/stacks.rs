//! The example stacks in `stacks/`, each taken through its whole life on the sandbox
//! with the real binary, as a user would from a clone of the repository:
//! `plan` (exit 2) → `apply` → `plan --detailed-exitcode` (exit 0) → a small edit that
//! plans exactly one in-place update → `destroy` → the sandbox holds nothing.
//!
//! The stacks are copied into a scratch directory first (the edit must not touch the
//! repository) and run from its root with `-s stacks/<name> --sandbox`, so relative paths
//! inside them are resolved against the stack's directory as they are for users. The
//! batch-ML run serves the sandbox from this process, so it can also read the Redis
//! queue back from the real redis-server behind the `redis-leader` pod; the others let
//! each `--sandbox` run start the sandbox itself on the files in `state/sandbox/`.

use crate::common;

use common::{expect_file, stable, Run, Sandbox as Work};
use terrain_sandbox::{Options, Sandbox, Timing};

/// Emulated durations × this: the runs stay realistic (operations take several polls)
/// but quick.
const TIME_SCALE: &str = "0.2";

/// A scratch directory holding a copy of `stacks/<name>` and the shared modules, whose
/// sandbox projects start as new ones do (every API off but Cloud Storage): the stacks
/// turn on what they call.
fn work_with(name: &str) -> Work {
    let work = Work::new().fresh_projects();
    let stacks = common::manifest_dir().join("stacks");
    common::copy_dir(&stacks.join(name), &work.join(&format!("stacks/{name}")));
    common::copy_dir(&stacks.join("modules"), &work.join("stacks/modules"));
    work
}

/// `terrain ARGS -s stacks/<name> --sandbox`.
fn run(work: &Work, name: &str, args: &[&str]) -> Run {
    let stack = format!("stacks/{name}");
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["-s", &stack, "--sandbox"]);
    work.run_env(&all, &[("TERRAIN_SANDBOX_TIME_SCALE", TIME_SCALE)])
}

/// Plan, apply, clean re-plan; returns the apply run.
fn create(work: &Work, name: &str) -> Run {
    let plan = run(work, name, &["plan", "--detailed-exitcode"]);
    plan.expect_code(2);
    expect_file(&format!("stacks/{name}/plan.txt"), &stable(&plan.stdout));
    let apply = run(work, name, &["apply", "--auto-approve"]);
    apply.success();
    assert!(
        apply.stdout.contains("Apply complete!"),
        "apply finished:\n{}",
        apply.stdout
    );
    run(work, name, &["plan", "--detailed-exitcode"]).expect_code(0);
    apply
}

/// Sets `key` from `old` to `new` in the stack, expects exactly one in-place update of
/// `address`, applies it, and expects a clean re-plan.
fn edit_one(work: &Work, name: &str, (key, old, new): (&str, &str, &str), address: &str) {
    work.set_value(&format!("stacks/{name}/stack.toml"), key, old, new);
    let plan = run(work, name, &["plan", "--detailed-exitcode"]);
    plan.expect_code(2);
    assert!(
        plan.stdout
            .contains(&format!("~ {address} will be updated in place")),
        "{}",
        plan.stdout
    );
    assert!(
        plan.stdout
            .contains("Plan: 0 to add, 1 to change, 0 to replace, 0 to destroy."),
        "exactly one in-place update:\n{}",
        plan.stdout
    );
    expect_file(
        &format!("stacks/{name}/plan-edit.txt"),
        &stable(&plan.stdout),
    );
    run(work, name, &["apply", "--auto-approve"]).success();
    run(work, name, &["plan", "--detailed-exitcode"]).expect_code(0);
}

/// Destroys the stack and checks that its state is empty.
fn destroy(work: &Work, name: &str) {
    let destroy = run(work, name, &["destroy", "--auto-approve"]);
    destroy.success();
    assert!(
        destroy.stdout.contains("Destroy complete!"),
        "{}",
        destroy.stdout
    );
    let state = work.state_addresses(&format!("state/sandbox/{name}.json"));
    assert!(state.is_empty(), "state still holds {state:?}");
}

/// What `terrain sandbox list` prints.
fn inventory(work: &Work) -> String {
    let list = work.run(&["sandbox", "list"]);
    list.success();
    list.stdout
}

/// A diagnostic's message as one line: its wrapped continuation lines (`  │ …`) joined
/// back (a line broken after a hyphen or a slash without a space).
fn unwrapped(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        match line.strip_prefix("  │ ") {
            Some(rest) => {
                if !out.ends_with(['-', '/']) {
                    out.push(' ');
                }
                out.push_str(rest);
            }
            None => {
                out.push('\n');
                out.push_str(line);
            }
        }
    }
    out
}

/// What no node pool of the stack could run, a parameter the pipeline does not take,
/// and a broken compiled pipeline are refused by `plan` before anything exists: the
/// cluster, its pools, KFP and the pipeline are all to be created by the same plan.
#[test]
fn gke_gpu_pipelines_refuses_at_plan_what_its_pools_cannot_run() {
    let name = "gke-gpu-pipelines";
    let stack = format!("stacks/{name}/stack.toml");
    let refused_as_printed = |work: &Work| -> String {
        let plan = run(work, name, &["plan"]);
        plan.expect_code(1);
        assert_eq!(inventory(work), "The sandbox holds nothing.\n");
        plan.stderr.clone()
    };
    let refused = |work: &Work| unwrapped(&refused_as_printed(work));

    let work = work_with(name);
    // The preemptible pool's GPUs (the always-on pool's are named the same way).
    work.edit(
        &stack,
        "gpu_type        = \"nvidia-tesla-t4\"\ngpus_per_node",
        "gpu_type        = \"nvidia-tesla-v100\"\ngpus_per_node",
    );
    let printed = refused_as_printed(&work);
    // The stack's README shows this refusal as terrain prints it.
    let readme =
        std::fs::read_to_string(common::manifest_dir().join(format!("stacks/{name}/README.md")))
            .expect("the stack's README");
    let shown = readme
        .split(&format!("$ terrain plan -s stacks/{name} --sandbox\n"))
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("the README shows the refusal");
    assert_eq!(
        shown, printed,
        "the README's refusal is what terrain prints"
    );
    let err = unwrapped(&printed);
    for part in [
        "kfp_run.train.version: task train of pipeline kfp_pipeline.training asks for 1 nvidia.com/gpu",
        "module.preemptible_gpu.gke_node_pool.main: its nodes have cloud.google.com/gke-accelerator=nvidia-tesla-v100, not nvidia-tesla-t4",
        "module.gpu.gke_node_pool.main: its nodes have cloud.google.com/gke-nodepool=gpu-pool, not preemptible-gpu-pool",
    ] {
        assert!(err.contains(part), "{part} in:\n{err}");
    }

    let work = work_with(name);
    work.set_value(
        &stack,
        "parameters",
        "{ rows = 1000, epochs = 3 }",
        "{ rows = 1000, epoch = 3, gpus = 8 }",
    );
    let err = refused(&work);
    for part in [
        "kfp_run.train.parameters.epoch: the pipeline has no input \"epoch\"; did you mean \"epochs\"?",
        "its nodes have 4 nvidia.com/gpu each, fewer than 8",
    ] {
        assert!(err.contains(part), "{part} in:\n{err}");
    }

    let work = work_with(name);
    let file = format!("stacks/{name}/pipeline/pipeline.yaml");
    work.edit(&file, "producerTask: preprocess", "producerTask: prepare");
    let err = refused(&work);
    assert!(
        err.contains("kfp_pipeline.training.file: ")
            && err.contains("pipeline/pipeline.yaml:")
            && err.contains("prepare"),
        "{err}"
    );

    // A pipeline on a cluster the plan creates without Kubeflow Pipelines on it.
    let work = work_with(name);
    work.write(
        "stacks/no-kfp/stack.toml",
        r#"[stack]
name = "no-kfp"

[providers.gcp]
project = "terrain-sandbox-project"
region  = "us-central1"

[gke_cluster.c]
name     = "no-kfp"
location = "us-central1-a"
mode     = "standard"

[gke_node_pool.default]
cluster      = "${gke_cluster.c.id}"
name         = "default-pool"
machine_type = "e2-standard-4"
node_count   = 1

[kfp_pipeline.p]
cluster = "${gke_cluster.c.kubernetes}"
name    = "p"
file    = "../gke-gpu-pipelines/pipeline/pipeline.yaml"
"#,
    );
    let plan = run(&work, "no-kfp", &["plan"]);
    plan.expect_code(1);
    let err = unwrapped(&plan.stderr);
    assert!(
        err.contains("kfp_pipeline.p needs its cluster to serve Pipeline (pipelines.kubeflow.org/v2beta1); nothing in this stack provides it on gke_cluster.c, which this plan creates: install Kubeflow Pipelines on gke_cluster.c with the kubeflow-pipelines module"),
        "{err}"
    );
    assert_eq!(inventory(&work), "The sandbox holds nothing.\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gke_gpu_pipelines_plans_applies_scales_and_destroys() {
    let name = "gke-gpu-pipelines";
    let work = work_with(name);
    std::fs::create_dir_all(work.join("state/sandbox")).expect("create state/sandbox");
    // Served from here, with the preemptible pool's nodes reclaimed under a fixed seed:
    // the pipeline's training step is preempted and retried, as KFP retries it.
    let sandbox = Sandbox::start(Options {
        timing: Timing::scaled(0.2),
        state_file: Some(work.join("state/sandbox/cloud.json")),
        ..Options::default()
    })
    .await
    .expect("start the sandbox");
    sandbox.faults().spot_reclaims(0.5, 3);
    serve_from_here(&work, &sandbox);
    let apply = create(&work, name);
    assert!(
        apply.stdout.contains("training_status   = \"SUCCEEDED\""),
        "{}",
        apply.stdout
    );
    let attempts: i64 = apply
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("training_attempts = "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("training_attempts in:\n{}", apply.stdout));
    assert!(
        (2..=6).contains(&attempts),
        "the training step ran {attempts} times: preempted at least once, within its 5 retries"
    );
    // KFP's own Python client, through the API server's service proxy with the
    // kubeconfig a user gets: every answer matches the API's generated models, and it
    // uploads, runs and deletes pipelines of its own.
    let kube = work.join("kube");
    sandbox.kubeconfig(&kube).expect("kubeconfigs");
    let client = std::process::Command::new("python3")
        .arg(common::manifest_dir().join("tests/fixtures/kfp/client_check.py"))
        .arg(kube.join("kubeflow-pipelines.kubeconfig"))
        .arg(work.join(&format!("stacks/{name}/pipeline/pipeline.yaml")))
        .output()
        .expect("python3 runs (scripts/deps.sh installs it and kfp)");
    let said = String::from_utf8_lossy(&client.stdout);
    assert!(
        client.status.success() && said.trim_end().ends_with("ok"),
        "kfp's client:\n{said}\n{}",
        String::from_utf8_lossy(&client.stderr)
    );
    let held = inventory(&work);
    assert!(
        held.contains("/kubeflow-pipelines/preemptible-gpu-pool")
            && held.contains("gcs bucket kubeflow-"),
        "{held}"
    );
    edit_one(
        &work,
        name,
        ("max_nodes", "4", "6"),
        "module.preemptible_gpu.gke_node_pool.main",
    );
    destroy(&work, name);
    assert_eq!(inventory(&work), "The sandbox holds nothing.\n");
    sandbox.shutdown().await;
}

#[test]
fn gke_accelerators_plans_applies_scales_and_destroys() {
    let name = "gke-accelerators";
    let work = work_with(name);
    let apply = create(&work, name);
    assert!(
        apply.stdout.contains("gpu_job_status   = \"Complete\"")
            && apply.stdout.contains("tpu_job_status   = \"Complete\""),
        "{}",
        apply.stdout
    );
    edit_one(
        &work,
        name,
        ("max_nodes", "5", "6"),
        "module.gpu.gke_node_pool.main",
    );
    destroy(&work, name);
    assert_eq!(inventory(&work), "The sandbox holds nothing.\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eks_sagemaker_plans_applies_scales_and_destroys() {
    let name = "eks-sagemaker";
    let work = work_with(name);
    std::fs::create_dir_all(work.join("state/sandbox")).expect("create state/sandbox");
    // Served from here, so the destroy's requests can be read back in order.
    let sandbox = Sandbox::start(Options {
        timing: Timing::scaled(0.2),
        state_file: Some(work.join("state/sandbox/cloud.json")),
        ..Options::google_apis_on()
    })
    .await
    .expect("start the sandbox");
    serve_from_here(&work, &sandbox);
    // From an empty account: no ACK until the stack's capability is ACTIVE.
    let apply = create(&work, name);
    assert!(
        apply.stdout.contains("execution_status = \"Succeeded\""),
        "{}",
        apply.stdout
    );
    let held = inventory(&work);
    for object in [
        "eks capability us-east-1/ml-pipelines/ack (ACK)",
        "sagemaker pipeline us-east-1/my-kubernetes-pipeline",
        "s3 object ml-pipelines-123456789012/sagemaker/xgboost/train/abalone.train",
        "s3 object ml-pipelines-123456789012/sagemaker/xgboost/validation/abalone.validation",
    ] {
        assert!(held.contains(object), "{object} in:\n{held}");
    }
    edit_one(
        &work,
        name,
        ("max_nodes", "4", "6"),
        "module.gpu.eks_node_group.main",
    );
    sandbox.clear_traffic();
    destroy(&work, name);
    destroyed_consumers_before_the_controller(&sandbox.traffic());
    // KMS keeps a destroyed key for its waiting period (scheduled, not deleted), as in
    // the cloud; nothing else is left.
    let left = inventory(&work);
    let lines: Vec<&str> = left.lines().collect();
    assert!(
        lines.len() == 1
            && lines[0].starts_with("kms key us-east-1/")
            && lines[0].ends_with(" (PendingDeletion)"),
        "{left}"
    );
    sandbox.shutdown().await;
}

/// From the sandbox's request log of a destroy: the Pipeline and PipelineExecution were
/// deleted, and gone (their finalizers lifted by the controller), before the ACK
/// capability was deleted, and the capability before the cluster.
#[track_caller]
fn destroyed_consumers_before_the_controller(traffic: &[terrain_sandbox::Exchange]) {
    let at = |what: &str, hit: &dyn Fn(&terrain_sandbox::Exchange) -> bool| {
        traffic
            .iter()
            .rposition(|e| hit(e))
            .unwrap_or_else(|| panic!("the destroy sent {what}"))
    };
    let object_gone = |plural: &'static str, name: &'static str| {
        move |e: &terrain_sandbox::Exchange| {
            e.api == "kubernetes"
                && e.method == "GET"
                && e.status == 404
                && e.path.ends_with(&format!("/{plural}/{name}"))
        }
    };
    let pipeline_gone = at(
        "a read of the deleted Pipeline",
        &object_gone("pipelines", "my-kubernetes-pipeline"),
    );
    let execution_gone = at(
        "a read of the deleted PipelineExecution",
        &object_gone("pipelineexecutions", "my-kubernetes-pipeline-execution"),
    );
    let capability = at("DeleteCapability", &|e| {
        e.api == "eks" && e.method == "DELETE" && e.path.ends_with("/capabilities/ack")
    });
    let cluster = at("DeleteCluster", &|e| {
        e.api == "eks" && e.method == "DELETE" && e.path.ends_with("clusters/ml-pipelines")
    });
    assert!(
        pipeline_gone < capability && execution_gone < capability,
        "the ACK objects were gone before the capability was deleted"
    );
    assert!(
        capability < cluster,
        "the capability went before the cluster"
    );
}

/// The `serve.json` a `terrain sandbox serve` writes, pointing `--sandbox` runs at a
/// sandbox this test process serves.
fn serve_from_here(work: &Work, sandbox: &Sandbox) {
    let served = serde_json::json!({"url": sandbox.url(), "pid": std::process::id()});
    work.write("state/sandbox/serve.json", &served.to_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gke_batch_ml_queues_runs_grows_the_share_and_destroys() {
    let name = "gke-batch-ml";
    let work = work_with(name);
    std::fs::create_dir_all(work.join("state/sandbox")).expect("create state/sandbox");
    let sandbox = Sandbox::start(Options {
        timing: Timing::scaled(0.2),
        state_file: Some(work.join("state/sandbox/cloud.json")),
        ..Options::default()
    })
    .await
    .expect("start the sandbox");
    // The runs below block this test's thread; the other workers keep the sandbox serving.
    serve_from_here(&work, &sandbox);
    create(&work, name);

    // The worker drained the queue (in the real Redis) and wrote a checkpoint per
    // dataset and the report to the share, as the seed's worker does.
    let redis = sandbox
        .redis_address("batch-aiml", "default", "redis-leader")
        .expect("the redis-leader pod is backed by a redis-server");
    assert_eq!(
        common::redis_list(redis, "datasets"),
        Vec::<String>::new(),
        "the Job drained the queue"
    );
    let report = find_file(&work.join("state/sandbox"), "report.txt")
        .expect("the worker wrote output/report.txt on the share");
    let output = report.parent().expect("output/");
    assert!(output.ends_with("output"), "{}", output.display());
    let dates = ["2018-04-01", "2018-04-02", "2018-04-03", "2018-04-04"];
    for date in dates {
        assert!(
            output.join(format!("model_cpt_{date}.pkl")).is_file(),
            "checkpoint for {date} in {}",
            output.display()
        );
    }
    let lines: Vec<String> = std::fs::read_to_string(&report)
        .expect("read report.txt")
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(
        lines,
        dates
            .iter()
            .map(|d| format!("datasets/training/{d}.pkl: trained, checkpoint model_cpt_{d}.pkl"))
            .collect::<Vec<_>>()
    );
    // The Job's log says what it did, item by item.
    let logs = run(&work, name, &["logs", "kubernetes_job.workload"]);
    logs.success();
    assert!(
        logs.stdout
            .contains("Processing datasets/training/2018-04-01.pkl")
            && logs.stdout.ends_with("Queue empty, exiting\n"),
        "{}",
        logs.stdout
    );

    // The Job ran to completion on spot capacity.
    let status = run(&work, name, &["status"]);
    status.success();
    let job = status
        .stdout
        .lines()
        .find(|l| l.starts_with("kubernetes_job.workload"))
        .expect("status lists the job");
    assert!(
        job.contains("Complete (1/1 succeeded)"),
        "{}",
        status.stdout
    );

    // Filestore shares grow in place.
    edit_one(
        &work,
        name,
        ("default", "1024", "2048"),
        "module.share.filestore_instance.main",
    );
    destroy(&work, name);
    assert_eq!(inventory(&work), "The sandbox holds nothing.\n");
    assert_eq!(sandbox.inventory(), Vec::<String>::new());
    sandbox.shutdown().await;
}

/// The first file named `name` under `dir`, depth first.
fn find_file(dir: &std::path::Path, name: &str) -> Option<std::path::PathBuf> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .collect();
    entries.sort_by_key(std::fs::DirEntry::file_name);
    for e in entries {
        let path = e.path();
        if path.is_dir() {
            if let Some(found) = find_file(&path, name) {
                return Some(found);
            }
        } else if e.file_name() == name {
            return Some(path);
        }
    }
    None
}

#[test]
fn multi_region_gpu_applies_in_two_regions_and_a_removed_key_destroys_its_pools_only() {
    let name = "multi-region-gpu";
    let work = work_with(name);
    let apply = create(&work, name);
    assert!(
        apply
            .stdout
            .contains("shard_status = [\"Complete\",\"Complete\"]"),
        "{}",
        apply.stdout
    );
    let held = inventory(&work);
    for pool in [
        "gke node pool terrain-sandbox-project/us-central1-a/train-us/l4-pool",
        "gke node pool terrain-sandbox-project/europe-west4-a/train-eu/t4-pool",
    ] {
        assert!(held.contains(pool), "{pool}:\n{held}");
    }
    // One accelerator type fewer: exactly its pool in each region goes.
    work.edit(
        &format!("stacks/{name}/stack.toml"),
        ", t4 = { machine_type = \"n1-standard-8\", gpu_type = \"nvidia-tesla-t4\", max_nodes = 2 }",
        "",
    );
    work.edit(
        &format!("stacks/{name}/stack.toml"),
        ", '${module.us_gpus[\"t4\"].name}'",
        "",
    );
    work.edit(
        &format!("stacks/{name}/stack.toml"),
        ", '${module.eu_gpus[\"t4\"].name}'",
        "",
    );
    let plan = run(&work, name, &["plan", "--detailed-exitcode"]);
    plan.expect_code(2);
    expect_file(
        &format!("stacks/{name}/plan-edit.txt"),
        &stable(&plan.stdout),
    );
    assert!(
        plan.stdout
            .contains("Plan: 0 to add, 0 to change, 0 to replace, 2 to destroy."),
        "{}",
        plan.stdout
    );
    run(&work, name, &["apply", "--auto-approve"]).success();
    run(&work, name, &["plan", "--detailed-exitcode"]).expect_code(0);
    assert!(!inventory(&work).contains("t4-pool"));
    destroy(&work, name);
    assert_eq!(inventory(&work), "The sandbox holds nothing.\n");
}
