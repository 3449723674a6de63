//! Who runs as what on GKE, from an empty project: service accounts, IAM grants and
//! Workload Identity, checked at plan with the cluster, bucket and accounts created by
//! the same stack, and enforced by the sandbox as Google enforces them: a Job whose
//! Kubernetes service account is not granted the bucket fails its write with Cloud
//! Storage's 403, and succeeds once the stack grants it.

use crate::common;

use common::Sandbox as Work;

const APIS: &str = r#"[gcp_project_service.container]
service = "container.googleapis.com"

[gcp_project_service.compute]
service = "compute.googleapis.com"

[gcp_project_service.iam]
service = "iam.googleapis.com"

[gcp_project_service.resourcemanager]
service = "cloudresourcemanager.googleapis.com"
"#;

/// A Standard cluster (Workload Identity as `identity` says), a small pool whose nodes
/// run as their own account, a bucket, the runner's namespace and account, a Job that
/// writes to the bucket as that account, and `grants`.
fn stack(identity: &str, grants: &str) -> String {
    format!(
        r#"[providers.gcp]
project = "identity-project"
region  = "us-central1"
zone    = "us-central1-a"

{APIS}
[gke_cluster.ml]
name     = "ml"
location = "us-central1-a"
{identity}

[gcp_service_account.nodes]
account_id = "ml-nodes"

[gcp_iam_member.nodes]
role   = "roles/container.defaultNodeServiceAccount"
member = "${{gcp_service_account.nodes.member}}"

[gke_node_pool.cpu]
name            = "cpu"
cluster         = "${{gke_cluster.ml.id}}"
machine_type    = "e2-standard-4"
node_count      = 1
service_account = "${{gcp_service_account.nodes.email}}"

[gcs_bucket.runs]
name          = "identity-project-runs"
location      = "us-central1"
force_destroy = true

[kubernetes_manifest.runner]
cluster = "${{gke_cluster.ml.kubernetes}}"
file    = "runner.yaml"

{grants}
[kubernetes_job.train]
cluster         = "${{gke_cluster.ml.kubernetes}}"
name            = "train"
namespace       = "ml"
image           = "python:3.12"
command         = ["python", "train.py"]
service_account = "runner"
retries         = 0
restart_policy  = "Never"
wait            = "complete"
pod_annotations = {{ "sandbox.terrain.dev/writes" = "gs://${{gcs_bucket.runs.name}}/checkpoints/" }}
depends_on      = ["kubernetes_manifest.runner", "gke_node_pool.cpu"]
"#
    )
}

const GRANT: &str = r#"[gcp_iam_member.runner_writes]
role                       = "roles/storage.objectUser"
bucket                     = "${gcs_bucket.runs.name}"
kubernetes_service_account = { cluster = "${gke_cluster.ml.kubernetes}", namespace = "ml", name = "runner" }
"#;

/// The runner's namespace and Kubernetes service account.
const RUNNER: &str = "apiVersion: v1
kind: Namespace
metadata:
  name: ml
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: runner
  namespace: ml
";

fn work(identity: &str, grants: &str) -> Work {
    let work = Work::new().fresh_projects();
    work.write("stack.toml", &stack(identity, grants));
    work.write("runner.yaml", RUNNER);
    work
}

/// `terrain ARGS --sandbox --no-color` in `work`, operations at a tenth of their time.
fn run(work: &Work, args: &[&str]) -> common::Run {
    let mut all = args.to_vec();
    all.extend(["--sandbox", "--no-color"]);
    work.run_env(&all, &[("TERRAIN_SANDBOX_TIME_SCALE", "0.1")])
}

/// `text` on one line, without the frame a wrapped error is drawn in.
fn flat(text: &str) -> String {
    text.split_whitespace()
        .filter(|w| *w != "│")
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn a_job_without_the_bucket_grant_fails_with_storages_403_and_succeeds_with_it() {
    let work = work("", "");
    let apply = run(&work, &["apply", "--auto-approve"]);
    apply.expect_code(1);
    let err = flat(&apply.stderr);
    assert!(
        err.contains("Error: writing results: 403 Forbidden: principal://iam.googleapis.com/projects/")
            && err.contains("/workloadIdentityPools/identity-project.svc.id.goog/subject/ns/ml/sa/runner does not have storage.objects.create access"),
        "{}",
        apply.stderr
    );
    // The grant, added: the tainted Job is replaced and its write goes through.
    work.write("stack.toml", &stack("", GRANT));
    let apply = run(&work, &["apply", "--auto-approve"]);
    apply.success();
    assert!(
        apply.at("gcp_iam_member.runner_writes: creation complete")
            < apply.at("kubernetes_job.train: creating..."),
        "{}",
        apply.stdout
    );
    run(&work, &["plan", "--detailed-exitcode"]).expect_code(0);
    run(&work, &["destroy", "--auto-approve"]).success();
    // Only the APIs stay on; the grant, the accounts and everything else are gone.
    assert_eq!(
        work.run(&["sandbox", "list"]).stdout,
        "The sandbox holds nothing.\n"
    );
}

#[test]
fn a_workload_identity_grant_on_a_cluster_without_it_is_refused_at_plan() {
    let work = work("workload_identity = false", GRANT);
    let plan = run(&work, &["plan"]);
    plan.expect_code(1);
    let err = flat(&plan.stderr);
    assert!(
        err.contains("gcp_iam_member.runner_writes.kubernetes_service_account.cluster: gke_cluster.ml has workload_identity = false, so its pods cannot act as their Kubernetes service accounts"),
        "{}",
        plan.stderr
    );
    // At the reference to the cluster, as written.
    let line = stack("workload_identity = false", GRANT)
        .lines()
        .position(|l| l.starts_with("kubernetes_service_account"))
        .expect("the account's line")
        + 1;
    assert!(
        err.contains(&format!("stack.toml:{line}:43:")),
        "the error names stack.toml:{line}:43:\n{}",
        plan.stderr
    );
    assert_eq!(
        work.run(&["sandbox", "list"]).stdout,
        "The sandbox holds nothing.\n"
    );
}

#[test]
fn a_role_that_is_not_googles_is_refused_at_validate_with_the_nearest_one() {
    let work = work(
        "",
        &GRANT.replace("roles/storage.objectUser", "roles/storage.objectAdmn"),
    );
    let validate = run(&work, &["validate"]);
    validate.expect_code(1);
    let err = flat(&validate.stderr);
    assert!(
        err.contains("gcp_iam_member.runner_writes.role: roles/storage.objectAdmn is not a predefined Google Cloud role; did you mean `roles/storage.objectAdmin`"),
        "{}",
        validate.stderr
    );
    // At the value, as written.
    let line = stack("", GRANT)
        .lines()
        .position(|l| l.starts_with("role                       = \"roles/storage.objectUser\""))
        .expect("the role's line")
        + 1;
    assert!(
        err.contains(&format!("stack.toml:{line}:31:")),
        "the error names stack.toml:{line}:31:\n{}",
        validate.stderr
    );
}

#[test]
fn a_node_account_without_the_node_role_and_editor_to_a_workload_are_warned_about() {
    let grants = format!(
        "{}\n{}",
        GRANT.replace("roles/storage.objectUser", "roles/editor"),
        ""
    );
    let work = work("", &grants);
    let text = stack("", &grants).replace(
        "[gcp_iam_member.nodes]\nrole   = \"roles/container.defaultNodeServiceAccount\"\nmember = \"${gcp_service_account.nodes.member}\"\n",
        "",
    );
    work.write("stack.toml", &text);
    let plan = run(&work, &["plan"]);
    plan.success();
    let all = flat(&format!("{}{}", plan.stdout, plan.stderr));
    assert!(
        all.contains("Warning: gke_node_pool.cpu.service_account: its nodes run as gcp_service_account.nodes, which the stack does not grant roles/container.defaultNodeServiceAccount"),
        "{all}"
    );
    assert!(
        all.contains("Warning: gcp_iam_member.runner_writes.role: roles/editor to a workload identity gives every pod running as it the whole project"),
        "{all}"
    );
    // The shipped guardrail denies it outright.
    let policies = common::manifest_dir().join("stacks/policies");
    let denied = run(
        &work,
        &["plan", "--policy", &policies.display().to_string()],
    );
    denied.expect_code(1);
    assert!(
        flat(&format!("{}{}", denied.stdout, denied.stderr))
            .contains("roles/editor to a workload identity gives its pods the whole project"),
        "{}\n{}",
        denied.stdout,
        denied.stderr
    );
}

#[test]
fn a_grant_on_what_neither_the_stack_nor_the_cloud_has_is_refused_at_plan() {
    // The APIs on first: a plan that turns them on cannot ask them anything yet.
    let work = Work::new().fresh_projects();
    let header = "[providers.gcp]\nproject = \"identity-project\"\nregion  = \"us-central1\"\n\n";
    work.write("stack.toml", &format!("{header}{APIS}"));
    run(&work, &["apply", "--auto-approve"]).success();
    let grants = r#"
[gcp_iam_member.on_a_bucket]
role   = "roles/storage.objectViewer"
member = "group:ml@example.com"
bucket = "nobody-made-this-bucket"

[gcp_iam_member.new_role]
role   = "roles/brandnewservice.runner"
member = "group:ml@example.com"

[gcp_iam_member.on_an_account]
role            = "roles/iam.serviceAccountUser"
member          = "group:ml@example.com"
service_account = "ghost@identity-project.iam.gserviceaccount.com"
"#;
    work.write("stack.toml", &format!("{header}{APIS}{grants}"));
    // Offline, each is well formed (a role close to no predefined one may be newer than
    // the catalog)…
    run(&work, &["validate"]).success();
    // …but the cloud has none of them.
    let plan = run(&work, &["plan"]);
    plan.expect_code(1);
    let err = flat(&plan.stderr);
    assert!(
        err.contains("gcp_iam_member.new_role: invalid spec:")
            && err.contains(
                "role: IAM has no role roles/brandnewservice.runner (iam.roles.get answered 404)"
            ),
        "{}",
        plan.stderr
    );
    for (grant, said) in [
        ("on_a_bucket", "bucket: there is no bucket nobody-made-this-bucket: the stack does not make it and Cloud Storage has none"),
        ("on_an_account", "service_account: there is no service account ghost@identity-project.iam.gserviceaccount.com"),
    ] {
        let only = grants
            .split("\n[")
            .find(|block| block.starts_with(&format!("gcp_iam_member.{grant}]")))
            .expect("the block");
        work.write("stack.toml", &format!("{header}{APIS}\n[{only}"));
        let plan = run(&work, &["plan"]);
        plan.expect_code(1);
        let err = flat(&plan.stderr);
        assert!(err.contains(said), "{}", plan.stderr);
        assert!(err.contains("stack.toml:"), "{}", plan.stderr);
    }
    // What the stack makes is not looked for in the cloud.
    work.write(
        "stack.toml",
        &format!(
            "{header}{APIS}\n[gcs_bucket.made]\nname = \"made-by-this-stack\"\nlocation = \"us-central1\"\n\n[gcp_iam_member.on_it]\nrole   = \"roles/storage.objectViewer\"\nmember = \"group:ml@example.com\"\nbucket = \"made-by-this-stack\"\n"
        ),
    );
    run(&work, &["plan"]).success();
}

#[test]
fn turning_workload_identity_on_names_the_pools_it_does_not_reach_yet() {
    let work = Work::new().fresh_projects();
    let stack = |identity: &str| {
        format!(
            "[providers.gcp]\nproject = \"identity-project\"\nregion  = \"us-central1\"\n\n{APIS}\n[gke_cluster.ml]\nname     = \"ml\"\nlocation = \"us-central1-a\"\n{identity}\n\n[gke_node_pool.cpu]\nname         = \"cpu\"\ncluster      = \"${{gke_cluster.ml.id}}\"\nmachine_type = \"e2-standard-4\"\nnode_count   = 1\n"
        )
    };
    work.write("stack.toml", &stack("workload_identity = false"));
    run(&work, &["apply", "--auto-approve"]).success();
    // Never turned on implicitly: left to the default, the cluster keeps what it has
    // (the state forgets the old setting; the cluster does not change).
    work.write("stack.toml", &stack(""));
    run(&work, &["apply", "--auto-approve"]).success();
    run(&work, &["plan", "--detailed-exitcode"]).expect_code(0);
    work.write("stack.toml", &stack("workload_identity = true"));
    let plan = run(&work, &["plan"]);
    plan.success();
    let out = flat(&plan.stdout);
    assert!(
        out.contains("~ gke_cluster.ml will be updated in place")
            && out.contains("turns Workload Identity on, but node pools cpu keep the Compute Engine metadata server (their pods still act as the node's service account) until their workload_metadata = \"gke\", which recreates their nodes"),
        "{}",
        plan.stdout
    );
    run(&work, &["apply", "--auto-approve"]).success();
    run(&work, &["plan", "--detailed-exitcode"]).expect_code(0);
}
