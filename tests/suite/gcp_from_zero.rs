//! A new Google Cloud project, as the sandbox starts one (every API off but Cloud
//! Storage and Service Usage): the plan refuses a resource whose API is off and that
//! nothing in the stack turns on, naming the API, the resources calling it and the
//! block to add, and changes nothing; with the `gcp_project_service` blocks the same
//! stack applies, each resource after the API it calls, and destroy leaves the APIs on
//! unless asked.

use crate::common;

use common::Sandbox as Work;

/// A Standard cluster with a GPU pool and a Filestore share, on the sandbox; `apis`
/// is written before the resources.
fn stack(apis: &str) -> String {
    format!(
        r#"[providers.gcp]
project = "fresh-project"
region  = "us-central1"
zone    = "us-central1-a"

{apis}
[gke_cluster.gpu]
name     = "gpu-cluster"
location = "us-central1-a"

[gke_node_pool.gpu]
name         = "spot-gpu-pool"
cluster      = "${{gke_cluster.gpu.id}}"
machine_type = "n1-standard-4"
gpu          = {{ type = "nvidia-tesla-t4", count = 1 }}
spot         = true
autoscaling  = {{ min = 0, max = 2 }}

[filestore_instance.nfs]
name  = "nfs"
tier  = "BASIC_HDD"
share = {{ name = "share", capacity_gb = 1024 }}
"#
    )
}

const APIS: &str = r#"[gcp_project_service.container]
service = "container.googleapis.com"

[gcp_project_service.compute]
service = "compute.googleapis.com"

[gcp_project_service.file]
service            = "file.googleapis.com"
disable_on_destroy = true
"#;

fn work(apis: &str) -> Work {
    let work = Work::new().fresh_projects();
    work.write("stack.toml", &stack(apis));
    work
}

/// `terrain ARGS --sandbox --no-color` in `work`, operations at a fifth of their time.
fn run(work: &Work, args: &[&str]) -> common::Run {
    let mut all = args.to_vec();
    all.extend(["--sandbox", "--no-color"]);
    work.run_env(&all, &[("TERRAIN_SANDBOX_TIME_SCALE", "0.2")])
}

#[test]
fn apis_off_in_a_new_project_are_refused_at_plan_with_the_blocks_to_add() {
    let work = work("");
    // Valid offline: whether an API is on is the project's to say.
    run(&work, &["validate"]).success();
    let plan = run(&work, &["plan"]);
    plan.expect_code(1);
    let err = plan.stderr.split_whitespace().collect::<Vec<_>>().join(" ");
    for said in [
        "stack.toml:7:14: gke_cluster.gpu: these APIs are off in project fresh-project and nothing in this stack turns them on:",
        "compute.googleapis.com (called by gke_cluster.gpu, gke_node_pool.gpu)",
        "container.googleapis.com (called by gke_cluster.gpu, gke_node_pool.gpu)",
        "file.googleapis.com (called by filestore_instance.nfs)",
        "[gcp_project_service.container] service = \"container.googleapis.com\"",
        "[gcp_project_service.file] service = \"file.googleapis.com\"",
    ] {
        assert!(err.contains(said), "the error says {said:?}:\n{}", plan.stderr);
    }
    // Cloud Storage is on in a new project: nothing asks for it.
    assert!(!err.contains("storage.googleapis.com"), "{}", plan.stderr);
    assert_eq!(
        work.run(&["sandbox", "list"]).stdout,
        "The sandbox holds nothing.\n"
    );
}

#[test]
fn a_stack_that_turns_its_apis_on_applies_on_a_new_project_and_leaves_them_on() {
    let work = work(APIS);
    let plan = run(&work, &["plan", "--detailed-exitcode"]);
    plan.expect_code(2);
    // The capacity the plan would read is behind Compute Engine, which the apply turns on.
    assert!(
        plan.stdout
            .contains("capacity not checked for provider gcp: this apply turns on"),
        "{}",
        plan.stdout
    );
    let apply = run(&work, &["apply", "--auto-approve"]);
    apply.success();
    let at = |what: &str| apply.at(what);
    // Each resource waited for the API it calls, with no depends_on written.
    assert!(
        at("gcp_project_service.container: creation complete") < at("gke_cluster.gpu: creating...")
    );
    assert!(
        at("gcp_project_service.compute: creation complete") < at("gke_node_pool.gpu: creating...")
    );
    assert!(
        at("gcp_project_service.file: creation complete")
            < at("filestore_instance.nfs: creating...")
    );
    run(&work, &["plan", "--detailed-exitcode"]).expect_code(0);
    let destroy = run(&work, &["destroy", "--auto-approve"]);
    destroy.success();
    assert!(
        destroy
            .stdout
            .contains("leaving container.googleapis.com on (disable_on_destroy = false)"),
        "{}",
        destroy.stdout
    );
    // Left on: a cluster in the same project plans without them now; the one whose
    // stack asked for it to be turned off is off again.
    work.write("stack.toml", &stack(""));
    let plan = run(&work, &["plan"]);
    plan.expect_code(1);
    let err = plan.stderr.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        err.contains("this API is off in project fresh-project"),
        "{}",
        plan.stderr
    );
    assert!(
        err.contains("file.googleapis.com (called by filestore_instance.nfs)"),
        "{}",
        plan.stderr
    );
    assert!(!err.contains("container.googleapis.com"), "{}", plan.stderr);
}

#[test]
fn turning_an_api_off_under_resources_the_stack_keeps_is_refused_at_plan() {
    let work = work(APIS);
    run(&work, &["apply", "--auto-approve"]).success();
    // The Filestore API's block removed, the share kept: destroying the block would
    // turn the API off under the share.
    let without_file = APIS.replace(
        "[gcp_project_service.file]\nservice            = \"file.googleapis.com\"\ndisable_on_destroy = true\n",
        "",
    );
    assert_ne!(without_file, APIS);
    work.write("stack.toml", &stack(&without_file));
    let plan = run(&work, &["plan"]);
    plan.expect_code(1);
    let err = plan.stderr.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        err.contains("gcp_project_service.file: deleting it turns file.googleapis.com off in project fresh-project (disable_on_destroy = true) under filestore_instance.nfs, which the stack keeps"),
        "{}",
        plan.stderr
    );
    // Destroying everything is fine: the share goes first, then the API.
    work.write("stack.toml", &stack(APIS));
    run(&work, &["destroy", "--auto-approve"]).success();
}
