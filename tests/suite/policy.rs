//! Guardrails in Rego, through the CLI on the sandbox: the shipped policies
//! (`stacks/policies`) pass their own tests and hold for the example stacks; a deny
//! fails the plan and the apply before anything is made, naming the rule and the
//! resource (on a cluster the same stack creates); a warn shows under the plan; the
//! stack's `[stack] policies` judge every plan; a saved plan is judged again at apply;
//! a policy that does not parse is located by file and line; `plan --json` carries the
//! verdict.

use crate::common;

use common::Sandbox as Work;

const STACKS: [&str; 5] = [
    "gke-batch-ml",
    "gke-gpu-pipelines",
    "eks-sagemaker",
    "gke-accelerators",
    "multi-region-gpu",
];

/// A work directory holding the stacks these tests use, with their shared modules.
fn with_stacks() -> Work {
    common::with_stacks(&[STACKS.as_slice(), &["modules", "policies"]].concat())
}

#[test]
fn the_shipped_policies_pass_their_own_tests() {
    let work = with_stacks();
    let run = work.run(&["policy", "test", "stacks/policies", "--no-color"]);
    run.success();
    let last = run.stdout.lines().last().unwrap_or_default();
    let (passed, total) = last
        .strip_prefix("PASS: ")
        .and_then(|n| n.split_once('/'))
        .expect("a PASS: n/m line");
    assert_eq!(passed, total, "{}", run.stdout);
    assert!(
        total.parse::<usize>().expect("a count") >= 20,
        "{}",
        run.stdout
    );
    // Every shipped policy has tests.
    for policy in [
        "gpu_pools_tainted",
        "buckets",
        "spot_jobs_retry",
        "autopilot_no_node_pools",
        "gpu_ceiling",
    ] {
        assert!(
            run.stdout
                .contains(&format!("PASS data.terrain.{policy}.test_")),
            "{policy}: {}",
            run.stdout
        );
    }
}

#[test]
fn a_failing_policy_test_fails_the_run_and_names_it() {
    let work = Work::new();
    work.write(
        "p/ceiling.rego",
        "package terrain.ceiling\n\ndeny contains \"too many\" if input.gpus > 8\n",
    );
    work.write(
        "p/ceiling_test.rego",
        "package terrain.ceiling\n\ntest_nine_is_too_many if {\n\tdeny[\"too many\"] with input as {\"gpus\": 9}\n}\n\ntest_eight_is_too_many if {\n\tdeny[\"too many\"] with input as {\"gpus\": 8}\n}\n",
    );
    let run = work.run(&["policy", "test", "p", "--no-color"]);
    run.expect_code(1);
    assert!(
        run.stdout
            .contains("PASS data.terrain.ceiling.test_nine_is_too_many\n"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains(
            "FAIL data.terrain.ceiling.test_eight_is_too_many (p/ceiling_test.rego): undefined"
        ),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.ends_with("PASS: 1/2\nFAIL: 1/2\n"),
        "{}",
        run.stdout
    );
}

#[test]
fn the_example_stacks_meet_the_shipped_policies() {
    let work = with_stacks();
    for s in STACKS {
        let run = work.run(&[
            "plan",
            "-s",
            &format!("stacks/{s}"),
            "--sandbox",
            "--no-color",
            "--policy",
            "stacks/policies",
        ]);
        run.success();
        let warned = run.stdout.contains("Policy warnings:");
        // The two GKE stacks with an always-on GPU pool leave its taint to GKE.
        let expect_warning = matches!(s, "gke-gpu-pipelines" | "gke-accelerators");
        assert_eq!(warned, expect_warning, "{s}: {}", run.stdout);
        if expect_warning {
            assert!(
                run.stdout.ends_with("\nPolicy warnings:\n  terrain.gpu_pools_tainted: module.gpu.gke_node_pool.main: this GPU pool declares no taint: GKE adds nvidia.com/gpu only while the cluster has a pool without GPUs\n"),
                "printed under the plan: {}",
                run.stdout
            );
        }
    }
}

#[test]
fn a_deny_fails_the_plan_and_the_apply_before_anything_is_made() {
    let work = with_stacks();
    // The preemptible GPU pool, on the cluster the same stack creates, loses its taint
    // (the module's default, as if the line were gone).
    work.set_value(
        "stacks/gke-gpu-pipelines/stack.toml",
        "taints",
        "[\"preemptible=true:NoSchedule\"]",
        "[]",
    );
    let plan = work.run(&[
        "plan",
        "-s",
        "stacks/gke-gpu-pipelines",
        "--sandbox",
        "--no-color",
        "--policy",
        "stacks/policies",
    ]);
    plan.expect_code(1);
    assert!(
        plan.stderr.contains("Error: the policies deny this plan (1 rule matched; nothing was changed):\n  terrain.gpu_pools_tainted: module.preemptible_gpu.gke_node_pool.main: a spot or preemptible GPU pool needs a NoSchedule taint, so only work that tolerates preemption lands there\n"),
        "{}",
        plan.stderr
    );
    // The plan itself is still shown, for the reviewer.
    assert!(plan.stdout.contains("Plan: "), "{}", plan.stdout);
    let apply = work.run(&[
        "apply",
        "-s",
        "stacks/gke-gpu-pipelines",
        "--sandbox",
        "--no-color",
        "--auto-approve",
        "--policy",
        "stacks/policies",
    ]);
    apply.expect_code(1);
    assert!(
        apply.stderr.contains("terrain.gpu_pools_tainted"),
        "{}",
        apply.stderr
    );
    assert!(!apply.stdout.contains("creating..."), "{}", apply.stdout);
    let listed = work.run(&["sandbox", "list"]);
    assert!(
        !listed.stdout.contains("kubeflow-pipelines"),
        "no cluster was made: {}",
        listed.stdout
    );
}

/// `[stack] policies` holds every plan of the stack to them, without `--policy`: here a
/// spot Job whose retries were taken away.
#[test]
fn the_stacks_own_policies_judge_every_plan() {
    let work = with_stacks();
    let stack = "stacks/gke-batch-ml/stack.toml";
    work.edit(
        stack,
        "[stack]\n",
        "[stack]\npolicies = [\"../policies\"]\n",
    );
    work.edit(
        stack,
        "[kubernetes_job.workload]\n",
        "[kubernetes_job.workload]\nretries = 0\n",
    );
    let run = work.run(&[
        "plan",
        "-s",
        "stacks/gke-batch-ml",
        "--sandbox",
        "--no-color",
    ]);
    run.expect_code(1);
    assert!(
        run.stderr.contains("terrain.spot_jobs_retry: kubernetes_job.workload: a Job on spot capacity needs retries ≥ 1 (it has 0)"),
        "{}",
        run.stderr
    );
    // The same directory given again on the command line is loaded once: the same
    // single deny, not a conflict between two copies of every rule.
    let again = work.run(&[
        "plan",
        "-s",
        "stacks/gke-batch-ml",
        "--sandbox",
        "--no-color",
        "--policy",
        "stacks/policies",
    ]);
    again.expect_code(1);
    assert_eq!(again.stderr, run.stderr);
    // A policies entry that is not a list of paths is located at its value.
    work.edit(
        stack,
        "policies = [\"../policies\"]",
        "policies = \"../policies\"",
    );
    let bad = work.run(&["validate", "-s", "stacks/gke-batch-ml"]);
    bad.expect_code(1);
    assert!(
        bad.stderr.contains("stack.toml:")
            && bad
                .stderr
                .contains("stack.policies must be a list of plain strings"),
        "{}",
        bad.stderr
    );
}

#[test]
fn a_saved_plan_is_judged_again_when_applied() {
    let work = with_stacks();
    let saved = work.run(&[
        "plan",
        "-s",
        "stacks/gke-batch-ml",
        "--sandbox",
        "--no-color",
        "-o",
        "batch.plan",
    ]);
    saved.success();
    work.write(
        "strict/no_filestore.rego",
        "package terrain.no_filestore\n\ndeny contains {\"address\": c.address, \"msg\": \"no Filestore in this project\"} if {\n\tsome c in input.changes\n\tc.kind == \"filestore_instance\"\n}\n",
    );
    let apply = work.run(&[
        "apply",
        "batch.plan",
        "--sandbox",
        "--no-color",
        "--policy",
        "strict",
    ]);
    apply.expect_code(1);
    assert!(
        apply.stderr.contains("terrain.no_filestore: module.share.filestore_instance.main: no Filestore in this project"),
        "{}",
        apply.stderr
    );
}

#[test]
fn a_policy_that_does_not_parse_is_located_by_file_and_line() {
    let work = with_stacks();
    work.write(
        "broken/broken.rego",
        "package terrain.broken\n\ndeny contains msg if {\n\tmsg := \n}\n",
    );
    let run = work.run(&[
        "plan",
        "-s",
        "stacks/gke-batch-ml",
        "--sandbox",
        "--no-color",
        "--policy",
        "broken",
    ]);
    run.expect_code(1);
    assert!(
        run.stderr
            .starts_with("Error: broken/broken.rego:4:9: expecting `}` while parsing set\n"),
        "{}",
        run.stderr
    );
    // Nothing was planned into a saved file or applied: the state has nothing.
    assert!(!run.stdout.contains("Plan: "), "{}", run.stdout);
}

#[test]
fn plan_json_carries_the_verdict() {
    let work = with_stacks();
    let run = work.run(&[
        "plan",
        "-s",
        "stacks/gke-accelerators",
        "--sandbox",
        "--json",
        "--policy",
        "stacks/policies",
    ]);
    run.success();
    let v: serde_json::Value = serde_json::from_str(&run.stdout).expect("plan JSON");
    assert_eq!(v["policy"]["denies"], serde_json::json!([]));
    assert_eq!(
        v["policy"]["warns"][0],
        serde_json::json!({
            "policy": "terrain.gpu_pools_tainted",
            "address": "module.gpu.gke_node_pool.main",
            "message": "this GPU pool declares no taint: GKE adds nvidia.com/gpu only while the cluster has a pool without GPUs",
        })
    );
}
