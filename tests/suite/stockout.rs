//! Stockouts at apply, through the CLI on the sandbox: a GKE node pool whose zone is out
//! of its machine type lands in its `fallback` zone (said as it happens, recorded in
//! the `landed` output, and planned clean afterwards); without a fallback the pool the
//! failed create left is kept in the state as tainted, never orphaned, and replaced once
//! capacity is back, leaving exactly one pool; an EKS node group out of capacity falls
//! back to its next instance type, and one with every placement out is kept tainted.
//!
//! Capacity comes from `TERRAIN_SANDBOX_CAPACITY`, which each `--sandbox` run's emulator
//! reads when it starts (and which replaces what its state file kept: `{}` clears it).

use crate::common;

use common::{Run, Sandbox as Work};
use serde_json::Value;

/// Emulated durations × this: operations take several polls, but quickly.
const TIME_SCALE: &str = "0.2";

/// n1-standard-8 is out in us-central1-a, the zone of the cluster below.
const GCP_STOCKOUT: &str =
    r#"{"gcp": {"stockouts": [{"zone": "us-central1-a", "machineType": "n1-standard-8"}]}}"#;

/// No stockout at all.
const NO_STOCKOUT: &str = "{}";

/// A zonal Standard cluster in us-central1-a and a one-node n1-standard-8 pool on it;
/// `FALLBACK` is replaced by the pool's fallback line (or nothing).
const GKE_STACK: &str = r#"[stack]
name = "stockout"

[providers.gcp]
project = "stockout-project"
region = "us-central1"

[gke_cluster.ml]
name = "ml"
location = "us-central1-a"
mode = "standard"

[gke_node_pool.workers]
name = "workers"
cluster = "${gke_cluster.ml.id}"
machine_type = "n1-standard-8"
node_count = 1
FALLBACK
"#;

/// A work directory holding the GKE stack with `fallback` (a TOML line, or "").
fn gke_work(fallback: &str) -> Work {
    let work = Work::new();
    work.write("stack.toml", &GKE_STACK.replace("FALLBACK", fallback));
    work
}

/// `terrain ARGS --sandbox` with the emulator's capacity set to `capacity`.
fn run(work: &Work, capacity: &str, args: &[&str]) -> Run {
    let mut all = args.to_vec();
    all.push("--sandbox");
    work.run_env(
        &all,
        &[
            ("TERRAIN_SANDBOX_TIME_SCALE", TIME_SCALE),
            ("TERRAIN_SANDBOX_CAPACITY", capacity),
        ],
    )
}

/// The state entry of `address` in the sandbox state of stack `stack`.
#[track_caller]
fn entry(work: &Work, stack: &str, address: &str) -> Value {
    let state = work.json(&format!("state/sandbox/{stack}.json"));
    state["resources"][address].clone()
}

/// Whether a state entry is marked tainted (the flag may be left out when false).
fn is_tainted(entry: &Value) -> bool {
    entry["tainted"].as_bool().unwrap_or(false)
}

/// The lines of `terrain sandbox list` naming a GKE node pool.
fn sandbox_pools(work: &Work) -> Vec<String> {
    let list = work.run(&["sandbox", "list"]);
    list.success();
    list.stdout
        .lines()
        .filter(|l| l.starts_with("gke node pool "))
        .map(str::to_string)
        .collect()
}

#[test]
fn a_stockout_in_the_first_zone_lands_the_pool_in_its_fallback_zone() {
    let work = gke_work(r#"fallback = { zones = ["us-central1-b"] }"#);
    let apply = run(&work, GCP_STOCKOUT, &["apply", "--auto-approve"]);
    apply.success();
    assert!(
        apply.stdout.contains(
            "gke_node_pool.workers: us-central1-a is out of n1-standard-8 (GCE_STOCKOUT): trying fallback zone us-central1-b"
        ),
        "{}",
        apply.stdout
    );
    let pool = entry(&work, "stockout", "gke_node_pool.workers");
    assert!(!is_tainted(&pool), "{pool}");
    assert_eq!(
        pool["id"],
        "projects/stockout-project/locations/us-central1-a/clusters/ml/nodePools/workers"
    );
    assert_eq!(
        pool["outputs"]["landed"],
        serde_json::json!({"zones": ["us-central1-b"], "machine_type": "n1-standard-8"}),
        "{pool}"
    );
    assert_eq!(
        pool["spec"]["machine_type"], "n1-standard-8",
        "the declared spec"
    );
    // Landing in the fallback zone is what the stack asked for: no drift, no change.
    let plan = run(&work, GCP_STOCKOUT, &["plan", "--detailed-exitcode"]);
    plan.expect_code(0);
    let pools = sandbox_pools(&work);
    assert_eq!(
        pools.iter().filter(|p| p.ends_with("/ml/workers")).count(),
        1,
        "the failed pool was deleted before the fallback: {pools:?}"
    );
}

/// The fallback progress line names the machine it falls back from: when that machine
/// type comes from a sensitive variable, the line hides it as every other output does.
#[test]
fn a_fallback_progress_line_never_shows_a_machine_type_from_a_secret() {
    let work = gke_work(r#"fallback = { zones = ["us-central1-b"] }"#);
    work.edit(
        "stack.toml",
        "machine_type = \"n1-standard-8\"",
        "machine_type = \"${var.machine}\"",
    );
    work.edit(
        "stack.toml",
        "[providers.gcp]",
        "[variables.machine]\ndefault = \"n1-standard-8\"\nsensitive = true\n\n[providers.gcp]",
    );
    let apply = run(&work, GCP_STOCKOUT, &["apply", "--auto-approve"]);
    apply.success();
    let out = apply.all_output();
    assert!(
        out.contains(
            "gke_node_pool.workers: us-central1-a is out of (sensitive value) (GCE_STOCKOUT): trying fallback zone us-central1-b"
        ),
        "{out}"
    );
    assert!(!out.contains("n1-standard-8"), "{out}");
    let plan = run(&work, GCP_STOCKOUT, &["plan", "--detailed-exitcode"]);
    plan.expect_code(0);
    assert!(
        !plan.all_output().contains("n1-standard-8"),
        "{}",
        plan.all_output()
    );
}

#[test]
fn a_stockout_without_fallback_keeps_the_pool_tainted_not_orphaned() {
    let work = gke_work("");
    let apply = run(&work, GCP_STOCKOUT, &["apply", "--auto-approve"]);
    apply.failure();
    let out = apply.all_output();
    assert!(
        out.contains("gke_node_pool.workers") && out.contains("GCE_STOCKOUT"),
        "{out}"
    );
    assert!(
        out.contains("the object is kept as tainted; the next apply replaces it"),
        "{out}"
    );
    assert!(
        !out.contains("trying fallback"),
        "nothing to fall back to: {out}"
    );
    let pool = entry(&work, "stockout", "gke_node_pool.workers");
    assert!(is_tainted(&pool), "{pool}");
    assert_eq!(
        pool["id"],
        "projects/stockout-project/locations/us-central1-a/clusters/ml/nodePools/workers"
    );
    let pools = sandbox_pools(&work);
    assert!(
        pools.iter().any(|p| p.ends_with("/workers")),
        "the failed pool is still in the cloud: {pools:?}"
    );

    // Capacity is back: the tainted pool is replaced, and only one remains.
    let plan = run(&work, NO_STOCKOUT, &["plan", "--detailed-exitcode"]);
    plan.expect_code(2);
    assert!(
        plan.stdout.contains("gke_node_pool.workers")
            && plan.stdout.contains("is tainted, so must be replaced"),
        "{}",
        plan.stdout
    );
    run(&work, NO_STOCKOUT, &["apply", "--auto-approve"]).success();
    let pool = entry(&work, "stockout", "gke_node_pool.workers");
    assert!(!is_tainted(&pool), "{pool}");
    assert_eq!(pool["outputs"]["status"], "RUNNING", "{pool}");
    let workers: Vec<String> = sandbox_pools(&work)
        .into_iter()
        .filter(|p| p.ends_with("/workers"))
        .collect();
    assert_eq!(workers.len(), 1, "no duplicate: {workers:?}");
    run(&work, NO_STOCKOUT, &["plan", "--detailed-exitcode"]).expect_code(0);
}

/// g5.xlarge is out in us-east-1a, where the node group's one subnet is; the account has
/// the subnets and roles the stack names.
const AWS_STOCKOUT: &str = r#"{"aws": {
    "stockouts": [{"zone": "us-east-1a", "instanceType": "g5.xlarge"}],
    "subnets": {"subnet-0a1b2c3d4e5f60001": "us-east-1a", "subnet-0a1b2c3d4e5f60002": "us-east-1b"},
    "roles": {"eks-cluster": "eks.amazonaws.com", "eks-nodes": "ec2.amazonaws.com"}}}"#;

const EKS_STACK: &str = r#"[stack]
name = "stockout-eks"

[providers.aws]
region = "us-east-1"

[eks_cluster.ml]
name = "ml"
version = "1.33"
role_arn = "arn:aws:iam::123456789012:role/eks-cluster"
subnet_ids = ["subnet-0a1b2c3d4e5f60001", "subnet-0a1b2c3d4e5f60002"]

[eks_node_group.gpu]
cluster_name = "${eks_cluster.ml.name}"
name = "gpu"
node_role_arn = "arn:aws:iam::123456789012:role/eks-nodes"
subnet_ids = ["subnet-0a1b2c3d4e5f60001"]
instance_types = ["g5.xlarge"]
scaling = { min = 0, max = 2, desired = 1 }
fallback = { instance_types = ["g5.2xlarge"] }
"#;

#[test]
fn a_node_group_out_of_capacity_falls_back_to_its_next_instance_type() {
    let work = Work::new();
    work.write("stack.toml", EKS_STACK);
    let apply = run(&work, AWS_STOCKOUT, &["apply", "--auto-approve"]);
    apply.success();
    assert!(
        apply.stdout.contains(
            "eks_node_group.gpu: subnet-0a1b2c3d4e5f60001 has no g5.xlarge capacity (InsufficientInstanceCapacity): trying fallback instance type g5.2xlarge"
        ),
        "{}",
        apply.stdout
    );
    let group = entry(&work, "stockout-eks", "eks_node_group.gpu");
    assert!(!is_tainted(&group), "{group}");
    assert_eq!(group["id"], "ml/gpu");
    assert_eq!(
        group["outputs"]["landed"],
        serde_json::json!({"subnet_ids": ["subnet-0a1b2c3d4e5f60001"], "instance_types": ["g5.2xlarge"]}),
        "{group}"
    );
    assert_eq!(group["outputs"]["status"], "ACTIVE", "{group}");
    assert_eq!(
        group["spec"]["instance_types"],
        serde_json::json!(["g5.xlarge"]),
        "the declared spec"
    );
    run(&work, AWS_STOCKOUT, &["plan", "--detailed-exitcode"]).expect_code(0);
}

#[test]
fn a_node_group_with_every_placement_out_of_capacity_is_kept_tainted() {
    let work = Work::new();
    work.write("stack.toml", EKS_STACK);
    let every_g5 = AWS_STOCKOUT.replace("\"g5.xlarge\"", "\"g5.*\"");
    let apply = run(&work, &every_g5, &["apply", "--auto-approve"]);
    apply.failure();
    let out = apply.all_output();
    assert!(
        out.contains("every placement tried was out of capacity: g5.xlarge in subnet-0a1b2c3d4e5f60001 (InsufficientInstanceCapacity); g5.2xlarge in subnet-0a1b2c3d4e5f60001 (InsufficientInstanceCapacity)"),
        "{out}"
    );
    let group = entry(&work, "stockout-eks", "eks_node_group.gpu");
    assert!(is_tainted(&group), "{group}");
    assert_eq!(group["id"], "ml/gpu");
}
