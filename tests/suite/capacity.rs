//! The plan's capacity preflight, through the CLI on the sandbox with its capacity set
//! (`TERRAIN_SANDBOX_CAPACITY`), always with the cluster created by the same stack: a
//! GPU quota of 0 fails the plan (and the apply) before anything is created, naming
//! the quota, the region, the need, the limit and how to ask for more; a quota enough
//! at the minimum only is a warning; a zone that does not sell the pool's GPUs or TPU
//! slice is an error naming where they are sold; spot pools count against the
//! preemptible quotas; EKS node groups against their vCPU quota; `--refresh=false`
//! skips the check and says so; and a machine type from a secret stays hidden.

use crate::common;

use common::Sandbox as Work;

/// A work directory holding the stacks these tests use, with their shared modules.
fn with_stacks() -> Work {
    common::with_stacks(&[
        "gke-gpu-pipelines",
        "gke-accelerators",
        "eks-sagemaker",
        "modules",
    ])
}

const CAPACITY: &str = "TERRAIN_SANDBOX_CAPACITY";

fn plan(work: &Work, stack: &str, capacity: &str, extra: &[&str]) -> common::Run {
    let mut args = vec!["plan", "-s", stack, "--sandbox", "--no-color"];
    args.extend_from_slice(extra);
    work.run_env(&args, &[(CAPACITY, capacity)])
}

#[test]
fn a_gpu_quota_of_zero_fails_the_plan_and_the_apply_before_anything_is_created() {
    let work = with_stacks();
    let capacity = r#"{"gcp": {"quotas": [{"metric": "NVIDIA_T4_GPUS", "limit": 0}]}}"#;
    let run = plan(&work, "stacks/gke-gpu-pipelines", capacity, &[]);
    run.expect_code(1);
    let err = &run.stderr;
    assert!(
        err.contains(
            "Error: the stack does not fit what the cloud offers (nothing was changed):
  quota NVIDIA_T4_GPUS in us-central1 (project terrain-sandbox-project): 0 left of 0, 0 in use (compute.regions.get)
    the stack's node pools need 1 more at their initial size and 1 at their maximum:
      module.gpu.gke_node_pool.main: 1 node × 1 nvidia-tesla-t4
    to ask for more: the console's Quotas page (IAM & Admin → Quotas & System Limits), metric compute.googleapis.com/nvidia_t4_gpus, region us-central1
"
        ),
        "{err}"
    );
    // The preemptible pool counts against its own quota, which is not short.
    assert!(!err.contains("PREEMPTIBLE_NVIDIA_T4_GPUS"), "{err}");

    let apply = work.run_env(
        &[
            "apply",
            "-s",
            "stacks/gke-gpu-pipelines",
            "--sandbox",
            "--auto-approve",
            "--no-color",
        ],
        &[(CAPACITY, capacity)],
    );
    apply.expect_code(1);
    assert!(apply.stderr.contains("NVIDIA_T4_GPUS"), "{}", apply.stderr);
    // Nothing was made: no cluster in the sandbox, nothing in the state.
    let state = work.join("stacks/gke-gpu-pipelines/state/sandbox");
    let recorded = std::fs::read_dir(&state)
        .map(|d| d.filter_map(Result::ok).count())
        .unwrap_or(0);
    let resources = (recorded > 0)
        .then(|| {
            work.run(&[
                "state",
                "list",
                "-s",
                "stacks/gke-gpu-pipelines",
                "--sandbox",
            ])
        })
        .map(|r| r.stdout.clone())
        .unwrap_or_default();
    assert!(resources.trim().is_empty(), "state: {resources}");
}

#[test]
fn a_quota_enough_only_at_the_minimum_is_a_warning() {
    let work = with_stacks();
    // The preemptible pool scales 0–4 nodes × 4 T4s: 16 at most, 8 left.
    let capacity = r#"{"gcp": {"quotas": [{"metric": "PREEMPTIBLE_NVIDIA_T4_GPUS", "limit": 8}]}}"#;
    let run = plan(&work, "stacks/gke-gpu-pipelines", capacity, &[]);
    run.success();
    assert!(
        run.stdout.contains(
            "Warning: capacity: quota PREEMPTIBLE_NVIDIA_T4_GPUS in us-central1 (project terrain-sandbox-project): 8 left of 8, 0 in use (compute.regions.get)
  enough for the node pools' initial size (0) but not their maximum (16): the autoscaler will stop short
    module.preemptible_gpu.gke_node_pool.main: 0–4 nodes × 4 nvidia-tesla-t4
"
        ),
        "{}",
        run.stdout
    );
}

#[test]
fn a_zone_that_does_not_sell_the_pools_accelerators_fails_the_plan() {
    let work = with_stacks();
    // us-central1-f sells neither L4s (so no g2 machines) nor TPU v5e.
    let run = plan(
        &work,
        "stacks/gke-accelerators",
        "{}",
        &["--var", "zone=us-central1-f"],
    );
    run.expect_code(1);
    let err = &run.stderr;
    assert!(
        err.contains("module.gpu.gke_node_pool.main: machine type g2-standard-24 is not offered in us-central1-f (compute.machineTypes.get); us-central1 offers it in us-central1-a, us-central1-b, us-central1-c: place the pool's cluster in one of those zones."),
        "{err}"
    );
    assert!(
        err.contains("gke_node_pool.tpu: TPU slice v5litepod-4 is not offered in us-central1-f (tpu.projects.locations.acceleratorTypes.get); us-central1 offers it in us-central1-a"),
        "{err}"
    );
    // The same stack in its own zone fits.
    plan(&work, "stacks/gke-accelerators", "{}", &[]).success();
}

#[test]
fn refresh_false_skips_the_check_and_says_so() {
    let work = with_stacks();
    let capacity = r#"{"gcp": {"quotas": [{"metric": "NVIDIA_T4_GPUS", "limit": 0}]}}"#;
    let run = plan(
        &work,
        "stacks/gke-gpu-pipelines",
        capacity,
        &["--refresh=false"],
    );
    run.success();
    assert!(
        run.stdout.contains("Warning: refresh skipped (--refresh=false): the plan compares the stack with the state as last recorded, and capacity is not checked"),
        "{}",
        run.stdout
    );
}

#[test]
fn a_node_group_over_its_vcpu_quota_fails_the_plan() {
    let work = with_stacks();
    // The spot GPU group starts at 1 × g5.xlarge (4 vCPUs) and may grow to 4 of
    // g5.xlarge.
    let capacity = r#"{"aws": {"quotas": [{"code": "L-3819A6DF", "value": 0}]}}"#;
    let run = plan(&work, "stacks/eks-sagemaker", capacity, &[]);
    run.expect_code(1);
    assert!(run.stderr.contains("L-3819A6DF"), "{}", run.stderr);
    assert!(
        run.stderr.contains("aws service-quotas request-service-quota-increase --service-code ec2 --quota-code L-3819A6DF"),
        "{}",
        run.stderr
    );
}

/// A machine type from a sensitive variable is checked all the same and never shown.
#[test]
fn capacity_messages_never_show_a_value_that_came_from_a_secret() {
    let work = with_stacks();
    common::gpu_machine_from_a_secret(&work);
    let run = plan(
        &work,
        "stacks/gke-accelerators",
        "{}",
        &["--var", "zone=us-central1-f"],
    );
    run.expect_code(1);
    assert!(
        !run.all_output().contains("g2-standard-24"),
        "{}",
        run.all_output()
    );
    assert!(
        run.stderr.contains("module.gpu.gke_node_pool.main: machine type (sensitive value) is not offered in us-central1-f"),
        "{}",
        run.stderr
    );
}

/// What already runs is not checked again: with the node groups applied, a spot GPU
/// quota lowered to nothing (which a plan creating them refuses, see above) does not
/// stop a plan that changes no node group. Only the node groups and what they need
/// (network, roles, cluster) are applied and planned: the pipeline's side is not
/// what the quotas are about.
#[test]
fn a_plan_that_changes_no_node_group_asks_nothing_of_the_quotas() {
    let work = with_stacks();
    let groups = [
        "--target",
        "module.gpu.eks_node_group.main",
        "--target",
        "eks_node_group.system",
    ];
    let mut apply = vec![
        "apply",
        "-s",
        "stacks/eks-sagemaker",
        "--sandbox",
        "--auto-approve",
    ];
    apply.extend(groups);
    work.run(&apply).success();
    let capacity = r#"{"aws": {"quotas": [{"code": "L-3819A6DF", "value": 0}]}}"#;
    let mut args = vec!["--detailed-exitcode"];
    args.extend(groups);
    let run = plan(&work, "stacks/eks-sagemaker", capacity, &args);
    run.expect_code(0);
    assert!(
        !run.all_output().contains("L-3819A6DF"),
        "{}",
        run.all_output()
    );
}
