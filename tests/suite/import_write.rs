//! `terrain import ADDR ID --write FILE` on the sandbox: objects one stack (`made/`)
//! created are imported by a second stack (`adopted/`, its own state, the same
//! emulated cloud), which starts without them; the block written makes the next plan
//! show no changes. An address the stack declares, a Kubernetes kind other than a
//! manifest, and a manifest without its cluster are refused. (Adopting objects built
//! with kubectl is in `official_clients.rs`, where kubectl runs.)

use crate::common;

use common::Sandbox as Work;

const GCP: &str = r#"[providers.gcp]
project = "ml-project"
region = "us-central1"
zone = "us-central1-a"
poll_interval = "5ms"
max_poll_interval = "20ms"
retry_base_delay = "5ms"
"#;

const AWS: &str = r#"[providers.aws]
region = "us-east-1"
"#;

/// The state of the second stack, beside the first's (`state/made.json`): both use
/// the sandbox of that directory (`state/sandbox/`).
const ADOPTED_STATE: &str = "state/adopted.json";

/// Applies `resources` (with `providers`) as stack `made`, and makes an empty stack
/// `adopted` with the same providers.
fn made(providers: &str, resources: &str) -> Work {
    let work = Work::new();
    work.write(
        "made/stack.toml",
        &format!("[stack]\nname = \"made\"\n\n{providers}\n{resources}"),
    );
    work.write(
        "adopted/stack.toml",
        &format!("[stack]\nname = \"adopted\"\n\n{providers}"),
    );
    work.run_env(
        &["apply", "-s", "made", "--sandbox", "--auto-approve"],
        &[("TERRAIN_SANDBOX_CAPACITY", common::HAND_NAMED_ACCOUNT)],
    )
    .success();
    work
}

/// The id stack `made` recorded for `address`.
fn id_of(work: &Work, address: &str) -> String {
    let state = work.json("state/sandbox/made.json");
    state["resources"][address]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{address} has an id in {state:#}"))
        .to_string()
}

/// `terrain ARGS` on stack `adopted`, its own state, the shared sandbox.
fn adopted(work: &Work, args: &[&str]) -> common::Run {
    let mut all = args.to_vec();
    all.extend(["-s", "adopted", "--state", ADOPTED_STATE, "--sandbox"]);
    work.run(&all)
}

/// Imports each of `addresses` (as `made` has them) into `adopted` with `--write`,
/// then checks the plan shows no changes.
fn import_all(work: &Work, addresses: &[&str]) {
    for address in addresses {
        let id = id_of(work, address);
        let run = adopted(
            work,
            &["import", address, &id, "--write", "adopted/imported.toml"],
        );
        run.success();
        assert!(
            run.stdout.contains(&format!(
                "Wrote [{address}] to adopted/imported.toml and imported {id}. Run terrain plan: it shows no changes."
            )),
            "{}",
            run.stdout
        );
    }
    let text = work.read("adopted/imported.toml");
    for address in addresses {
        assert!(text.contains(&format!("[{address}]\n")), "{text}");
    }
    assert_eq!(
        terrain::stack::fmt::format(&text).expect("the file is TOML"),
        text,
        "the file is formatted"
    );
    let plan = adopted(work, &["plan", "--detailed-exitcode", "--no-color"]);
    plan.success();
    assert!(
        plan.stdout.contains("No changes"),
        "{}\n{text}",
        plan.stdout
    );
}

#[test]
fn a_gcs_bucket_is_written_and_imported() {
    let work = made(
        GCP,
        "[gcs_bucket.logs]\nname = \"ml-logs-bucket\"\nlocation = \"us-central1\"\nversioning = true\nlabels = { team = \"ml\" }\n",
    );
    import_all(&work, &["gcs_bucket.logs"]);
    let text = work.read("adopted/imported.toml");
    assert!(text.starts_with("# Imported from "), "{text}");
    assert!(text.contains("versioning = true"), "{text}");
    // At its default: left out.
    assert!(!text.contains("storage_class"), "{text}");
}

#[test]
fn a_gke_cluster_and_its_node_pool_are_written_and_imported() {
    let work = made(
        GCP,
        r#"[gke_cluster.gpu]
name = "gpu-cluster"
location = "us-central1-a"

[gke_node_pool.gpu]
name = "spot-gpu-pool"
cluster = "${gke_cluster.gpu.id}"
machine_type = "n1-highmem-8"
gpu = { type = "nvidia-tesla-t4", count = 1 }
spot = true
autoscaling = { min = 0, max = 4 }
taints = ["preemptible=true:NoSchedule"]
"#,
    );
    import_all(&work, &["gke_cluster.gpu", "gke_node_pool.gpu"]);
    let text = work.read("adopted/imported.toml");
    assert!(text.contains("= { type = \"nvidia-tesla-t4\" }"), "{text}");
    // The pool's cluster is the cluster imported first: a reference to it.
    assert!(text.contains("= \"${gke_cluster.gpu.id}\"\n"), "{text}");
    assert!(
        text.contains("\n\n# Imported from "),
        "a blank line between blocks: {text}"
    );
}

#[test]
fn a_filestore_instance_is_written_and_imported() {
    let work = made(
        GCP,
        r#"[filestore_instance.nfs]
name = "batch-aiml-filestore"
tier = "BASIC_HDD"
share = { name = "NFSVol", capacity_gb = 2048 }
"#,
    );
    import_all(&work, &["filestore_instance.nfs"]);
}

#[test]
fn an_s3_bucket_is_written_and_imported() {
    let work = made(
        AWS,
        r#"[s3_bucket.pipelines]
name = "ml-pipelines-123456789012"
versioning = true
encryption = { algorithm = "aws:kms", kms_key_id = "arn:aws:kms:us-east-1:123456789012:key/0b7c5f0e-1d2a-4c3b-9e8f-123456789abc" }
"#,
    );
    import_all(&work, &["s3_bucket.pipelines"]);
}

#[test]
fn an_eks_cluster_and_its_node_group_are_written_and_imported() {
    let work = made(
        AWS,
        r#"[eks_cluster.ml]
name = "ml-pipelines"
version = "1.31"
role_arn = "arn:aws:iam::123456789012:role/eks-cluster"
subnet_ids = ["subnet-0a1b2c3d4e5f60001", "subnet-0a1b2c3d4e5f60002"]
logging = ["api", "audit"]

[eks_node_group.gpu]
cluster_name = "${eks_cluster.ml.name}"
name = "gpu-spot"
node_role_arn = "arn:aws:iam::123456789012:role/eks-nodes"
subnet_ids = ["subnet-0a1b2c3d4e5f60001", "subnet-0a1b2c3d4e5f60002"]
instance_types = ["g5.xlarge"]
capacity_type = "SPOT"
scaling = { min = 0, max = 4, desired = 1 }
taints = [{ key = "nvidia.com/gpu", value = "true", effect = "NO_SCHEDULE" }]
"#,
    );
    import_all(&work, &["eks_cluster.ml", "eks_node_group.gpu"]);
    let text = work.read("adopted/imported.toml");
    assert!(
        text.contains("cluster_name   = \"${eks_cluster.ml.name}\"\n"),
        "{text}"
    );
}

#[test]
fn an_address_the_stack_declares_is_refused() {
    let work = made(GCP, "[gcs_bucket.logs]\nname = \"ml-logs-bucket\"\n");
    let run = work.run(&[
        "import",
        "gcs_bucket.logs",
        "ml-logs-bucket",
        "--write",
        "made/more.toml",
        "-s",
        "made",
        "--state",
        ADOPTED_STATE,
        "--sandbox",
    ]);
    run.failure();
    assert!(
        run.stderr
            .contains("gcs_bucket.logs is already in the stack at made/stack.toml:"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("; import without --write"),
        "{}",
        run.stderr
    );
    assert!(!work.exists("made/more.toml"));
}

#[test]
fn a_kubernetes_kind_other_than_a_manifest_is_refused() {
    let work = made(GCP, "[gcs_bucket.logs]\nname = \"ml-logs-bucket\"\n");
    let run = adopted(
        &work,
        &[
            "import",
            "kubernetes_job.train",
            "batch/v1/Job/default/train",
            "--write",
            "adopted/imported.toml",
        ],
    );
    run.failure();
    assert!(
        run.stderr.contains(
            "--write adopts a Kubernetes object as a kubernetes_manifest (a kubernetes_job is rendered by terrain from its fields); run `terrain import kubernetes_manifest.train batch/v1/Job/default/train --write adopted/imported.toml --cluster CLUSTER_ADDR`"
        ),
        "{}",
        run.stderr
    );
    assert!(!work.exists("adopted/imported.toml"));
}

#[test]
fn a_manifest_needs_the_cluster_it_is_on() {
    let work = made(GCP, "[gcs_bucket.logs]\nname = \"ml-logs-bucket\"\n");
    let run = adopted(
        &work,
        &[
            "import",
            "kubernetes_manifest.redis",
            "v1/Service/default/redis-leader",
            "--write",
            "adopted/imported.toml",
        ],
    );
    run.failure();
    assert!(
        run.stderr.contains(
            "--write kubernetes_manifest.redis: name the cluster the object is on with --cluster CLUSTER_ADDR (e.g. gke_cluster.main)"
        ),
        "{}",
        run.stderr
    );
    // A cluster the state does not have yet: nothing to read the object from.
    let run = adopted(
        &work,
        &[
            "import",
            "kubernetes_manifest.redis",
            "v1/Service/default/redis-leader",
            "--write",
            "adopted/imported.toml",
            "--cluster",
            "gke_cluster.main",
        ],
    );
    run.failure();
    assert!(
        run.stderr.contains(
            "gke_cluster.main is not in the state: apply it first (the objects are read from the live cluster)"
        ),
        "{}",
        run.stderr
    );
    assert!(!work.exists("adopted/imported.toml"));
}
