//! The GCP provider against the sandbox's Google APIs, through the engine: every kind
//! goes through create → clean re-plan → in-place update → replace → destroy; injected
//! faults (503s, a 429 burst, lost responses) converge with no duplicate creates; and
//! every request the provider sent and every object the sandbox returned is checked
//! against the official discovery documents in `contracts/gcp/`.

use crate::common;
use crate::contract::discovery;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use common::set_value;
use serde_json::Value;
use terrain::engine::{Engine, Quiet, Settings};
use terrain::plan::{Action, Plan};
use terrain::stack::{self, LoadOptions};
use terrain::state::local::LocalBackend;
use terrain::walk::Cancel;
use terrain_sandbox::{Exchange, Options, Sandbox, Timing};

/// A sandbox, a state file and a stack directory.
struct World {
    sandbox: Sandbox,
    dir: tempfile::TempDir,
}

impl World {
    async fn new() -> Self {
        let sandbox = Sandbox::start(Options {
            timing: Timing::scaled(0.002),
            ..Options::google_apis_on()
        })
        .await
        .expect("sandbox starts");
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("token"), "sandbox-token\n").expect("token file");
        Self { sandbox, dir }
    }

    /// The `[providers.gcp]` table pointing at the sandbox.
    fn provider(&self) -> String {
        let e = self.sandbox.gcp_endpoints();
        format!(
            r#"[providers.gcp]
project = "ml-project"
region = "us-central1"
zone = "us-central1-a"
access_token_file = "{}"
poll_interval = "5ms"
max_poll_interval = "20ms"
retry_base_delay = "5ms"
max_retries = 12
endpoints = {{ container = "{}", file = "{}", storage = "{}" }}
"#,
            self.dir.path().join("token").display(),
            e.container,
            e.file,
            e.storage
        )
    }

    /// Writes `text` as the stack and loads it (offline: no API call).
    fn load(&self, text: &str) -> Result<terrain::stack::Stack, terrain::stack::StackErrors> {
        let path = self.dir.path().join("stack.toml");
        std::fs::write(&path, text).expect("write stack");
        let env = |_: &str| None;
        stack::load(&LoadOptions {
            path: &path,
            vars: &[],
            var_files: &[],
            environment: terrain::stack::DEFAULT_ENVIRONMENT,
            env: &env,
            registry: &terrain_providers::registry::builtin(),
        })
    }

    fn engine(&self, resources: &str) -> Engine {
        let stack = self
            .load(&format!("{}\n{resources}", self.provider()))
            .unwrap_or_else(|e| panic!("stack loads: {e:?}"));
        Engine {
            stack,
            registry: terrain_providers::registry::builtin(),
            backend: Arc::new(LocalBackend::new(self.dir.path().join("terrain.tfstate"))),
            settings: Settings {
                parallelism: 4,
                ..Settings::default()
            },
            observer: Arc::new(Quiet),
            cancel: Cancel::new(),
        }
    }

    async fn plan(&self, resources: &str) -> Plan {
        self.engine(resources)
            .plan(false, &[], "stack.toml", &[])
            .await
            .expect("plan")
            .0
    }

    async fn apply(&self, resources: &str) -> Plan {
        let e = self.engine(resources);
        let (plan, state) = e.plan(false, &[], "stack.toml", &[]).await.expect("plan");
        e.apply(&plan, state)
            .await
            .unwrap_or_else(|err| panic!("apply: {err}"));
        plan
    }

    async fn destroy(&self, resources: &str) {
        let e = self.engine(resources);
        let (plan, state) = e
            .plan(true, &[], "stack.toml", &[])
            .await
            .expect("destroy plan");
        e.apply(&plan, state)
            .await
            .unwrap_or_else(|err| panic!("destroy: {err}"));
    }

    /// What the sandbox holds, by listing every collection through the public API.
    async fn inventory(&self) -> BTreeSet<String> {
        let e = self.sandbox.gcp_endpoints();
        let http = reqwest::Client::new();
        let get = |url: String| {
            let http = http.clone();
            async move {
                http.get(url)
                    .bearer_auth("sandbox-token")
                    .send()
                    .await
                    .expect("list request")
                    .json::<Value>()
                    .await
                    .expect("list json")
            }
        };
        let mut out = BTreeSet::new();
        let clusters = get(format!(
            "{}v1/projects/ml-project/locations/-/clusters",
            e.container
        ))
        .await;
        for c in clusters["clusters"].as_array().into_iter().flatten() {
            let name = c["name"].as_str().unwrap_or_default();
            out.insert(format!("cluster {name}"));
            for p in c["nodePools"].as_array().into_iter().flatten() {
                out.insert(format!(
                    "pool {name}/{}",
                    p["name"].as_str().unwrap_or_default()
                ));
            }
        }
        let instances = get(format!(
            "{}v1/projects/ml-project/locations/-/instances",
            e.file
        ))
        .await;
        for i in instances["instances"].as_array().into_iter().flatten() {
            out.insert(format!(
                "filestore {}",
                i["name"].as_str().unwrap_or_default()
            ));
        }
        let buckets = get(format!("{}storage/v1/b?project=ml-project", e.storage)).await;
        for b in buckets["items"].as_array().into_iter().flatten() {
            out.insert(format!("bucket {}", b["name"].as_str().unwrap_or_default()));
        }
        out
    }
}

fn actions(p: &Plan) -> BTreeMap<String, Action> {
    p.changes
        .iter()
        .filter(|c| c.action != Action::NoOp)
        .map(|c| (c.address.to_string(), c.action))
        .collect()
}

/// The stack of the issue's "done when": an Autopilot cluster, a Standard cluster with
/// a Spot GPU pool (autoscaling 0–`max`, tainted) and a TPU pool, a Filestore instance
/// and a GCS bucket.
fn stack(max: u32, machine: &str, capacity: u32, versioning: bool) -> String {
    format!(
        r#"
[gke_cluster.batch]
name = "batch-aiml"
mode = "autopilot"

[gke_cluster.gpu]
name = "gpu-cluster"
location = "us-central1-a"
labels = {{ team = "ml" }}

[gke_node_pool.gpu]
name = "spot-gpu-pool"
cluster = "${{gke_cluster.gpu.id}}"
machine_type = "{machine}"
gpu = {{ type = "nvidia-tesla-t4", count = 1 }}
spot = true
autoscaling = {{ min = 0, max = {max} }}
taints = ["preemptible=true:NoSchedule"]
scopes = ["cloud-platform"]

[gke_node_pool.tpu]
name = "tpu-pool"
cluster = "${{gke_cluster.gpu.id}}"
machine_type = "ct5lp-hightpu-4t"
tpu = {{ topology = "2x4" }}

[filestore_instance.nfs]
name = "batch-aiml-filestore"
location = "us-central1-a"
tier = "BASIC_HDD"
share = {{ name = "NFSVol", capacity_gb = {capacity} }}

[gcs_bucket.pipelines]
name = "kubeflow-ml-project"
location = "us-central1"
versioning = {versioning}
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_creates_updates_in_place_replaces_and_destroys() {
    let w = World::new().await;
    let v1 = stack(4, "n1-highmem-8", 1024, false);

    let first = w.apply(&v1).await;
    assert!(
        actions(&first).values().all(|a| *a == Action::Create),
        "{:?}",
        actions(&first)
    );
    assert_eq!(actions(&first).len(), 6);
    assert_eq!(
        w.inventory().await,
        BTreeSet::from([
            "cluster batch-aiml".to_string(),
            "cluster gpu-cluster".to_string(),
            "pool gpu-cluster/spot-gpu-pool".to_string(),
            "pool gpu-cluster/tpu-pool".to_string(),
            "filestore projects/ml-project/locations/us-central1-a/instances/batch-aiml-filestore"
                .to_string(),
            "bucket kubeflow-ml-project".to_string(),
        ]),
        "the default pool of the Standard cluster is removed"
    );
    assert_eq!(
        actions(&w.plan(&v1).await),
        BTreeMap::new(),
        "a fresh apply re-plans clean"
    );

    // Autoscaling, capacity and versioning change in place.
    let v2 = stack(5, "n1-highmem-8", 2048, true);
    let update = w.plan(&v2).await;
    assert_eq!(
        actions(&update),
        BTreeMap::from([
            ("filestore_instance.nfs".to_string(), Action::Update),
            ("gcs_bucket.pipelines".to_string(), Action::Update),
            ("gke_node_pool.gpu".to_string(), Action::Update),
        ])
    );
    w.apply(&v2).await;
    assert_eq!(
        actions(&w.plan(&v2).await),
        BTreeMap::new(),
        "updates converge"
    );

    // A new machine type replaces the pool, and the plan says why.
    let v3 = stack(5, "n1-standard-8", 2048, true);
    let replace = w.plan(&v3).await;
    assert_eq!(
        actions(&replace),
        BTreeMap::from([("gke_node_pool.gpu".to_string(), Action::Replace)])
    );
    let change = replace
        .changes
        .iter()
        .find(|c| c.address.to_string() == "gke_node_pool.gpu")
        .expect("pool change");
    assert_eq!(change.replace_because, ["machine_type"]);
    w.apply(&v3).await;
    assert_eq!(
        actions(&w.plan(&v3).await),
        BTreeMap::new(),
        "replace converges"
    );

    // Labels, release channel, taints and pool labels in place; a new tier, bucket
    // location or cluster zone replaces (and a replaced cluster takes its pools along).
    let v4 = v3
        .replace(
            "mode = \"autopilot\"\n",
            "mode = \"autopilot\"\nrelease_channel = \"rapid\"\nlabels = { env = \"prod\" }\n",
        )
        .replace(
            "taints = [\"preemptible=true:NoSchedule\"]",
            "taints = [\"preemptible=true:NoExecute\"]\nlabels = { workload = \"training\" }",
        );
    let in_place = w.plan(&v4).await;
    assert_eq!(
        actions(&in_place),
        BTreeMap::from([
            ("gke_cluster.batch".to_string(), Action::Update),
            ("gke_node_pool.gpu".to_string(), Action::Update)
        ])
    );
    w.apply(&v4).await;
    assert_eq!(
        actions(&w.plan(&v4).await),
        BTreeMap::new(),
        "label, channel and taint updates converge"
    );

    let v5 = set_value(&v4, "tier", "\"BASIC_HDD\"", "\"BASIC_SSD\"");
    let v5 = set_value(&v5, "capacity_gb", "2048", "2560")
        .replace(
            "location = \"us-central1\"\nversioning",
            "location = \"us-east1\"\nversioning",
        )
        .replace(
            "name = \"gpu-cluster\"\nlocation = \"us-central1-a\"",
            "name = \"gpu-cluster\"\nlocation = \"us-central1-b\"",
        );
    let replaces = w.plan(&v5).await;
    assert_eq!(
        actions(&replaces),
        BTreeMap::from([
            ("filestore_instance.nfs".to_string(), Action::Replace),
            ("gcs_bucket.pipelines".to_string(), Action::Replace),
            ("gke_cluster.gpu".to_string(), Action::Replace),
            ("gke_node_pool.gpu".to_string(), Action::Replace),
            ("gke_node_pool.tpu".to_string(), Action::Replace),
        ])
    );
    let because = |addr: &str| {
        replaces
            .changes
            .iter()
            .find(|c| c.address.to_string() == addr)
            .map(|c| c.replace_because.clone())
            .unwrap_or_default()
    };
    assert_eq!(because("filestore_instance.nfs"), ["tier"]);
    assert_eq!(because("gcs_bucket.pipelines"), ["location"]);
    assert_eq!(because("gke_cluster.gpu"), ["location"]);
    w.apply(&v5).await;
    assert_eq!(
        actions(&w.plan(&v5).await),
        BTreeMap::new(),
        "replacements converge"
    );
    assert!(w.inventory().await.contains("pool gpu-cluster/tpu-pool"));

    w.destroy(&v5).await;
    assert_eq!(
        w.inventory().await,
        BTreeSet::new(),
        "destroy leaves nothing behind"
    );

    // Every request and response, checked against Google's own API descriptions.
    let problems = contract_problems(&w.sandbox.traffic());
    assert!(
        problems.is_empty(),
        "contract violations:\n{}",
        problems.join("\n")
    );
}

/// The discovery document of each API the sandbox serves.
fn documents() -> BTreeMap<&'static str, discovery::Discovery> {
    BTreeMap::from([
        ("container", discovery::Discovery::load("container.v1.json")),
        ("file", discovery::Discovery::load("file.v1.json")),
        ("storage", discovery::Discovery::load("storage.v1.json")),
    ])
}

/// Every contract problem in `traffic`: unknown methods, request bodies or responses
/// with fields, types or enum values the official schema does not have.
fn contract_problems(traffic: &[Exchange]) -> Vec<String> {
    let docs = documents();
    let mut problems = Vec::new();
    for x in traffic {
        let Some(doc) = docs.get(x.api.as_str()) else {
            problems.push(format!("{} {}: unknown api {}", x.method, x.path, x.api));
            continue;
        };
        let Some(method) = doc.method(&x.method, &x.path) else {
            problems.push(format!(
                "{} {} {}: no such method in the discovery document",
                x.api, x.method, x.path
            ));
            continue;
        };
        if let (Some(schema), Some(body)) = (&method.request, &x.request) {
            for p in doc.check(schema, body) {
                problems.push(format!("request of {}: {p}", method.id));
            }
        }
        if (200..300).contains(&x.status) {
            if let (Some(schema), Some(body)) = (&method.response, &x.response) {
                for p in doc.check(schema, body) {
                    problems.push(format!("response of {}: {p}", method.id));
                }
            }
        }
    }
    problems
}

/// The official fields and enum values the provider's requests use, printed for the
/// record (`cargo test --test suite -- --nocapture gcp::fields_in_use`).
fn fields_used(traffic: &[Exchange]) -> BTreeSet<String> {
    let docs = documents();
    let mut used = BTreeSet::new();
    for x in traffic {
        let (Some(doc), Some(body)) = (docs.get(x.api.as_str()), &x.request) else {
            continue;
        };
        if let Some(schema) = doc.method(&x.method, &x.path).and_then(|m| m.request) {
            used.extend(doc.fields_used(&schema, body));
        }
    }
    used
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_converge_without_duplicate_creates() {
    let w = World::new().await;
    let v1 = stack(4, "n1-highmem-8", 1024, false);
    let faults = w.sandbox.faults();
    faults.set_error_rate(503, 0.10, 7);
    faults.burst(429, 3, 0);
    // Two creates take effect but their answers are lost: the retries must adopt.
    faults.fail_after_effect(2);

    w.apply(&v1).await;
    faults.clear();
    assert_eq!(
        actions(&w.plan(&v1).await),
        BTreeMap::new(),
        "the faulty run converged"
    );
    assert_eq!(w.inventory().await.len(), 6);

    let traffic = w.sandbox.traffic();
    assert!(
        traffic.iter().any(|x| x.injected && x.status == 503),
        "503s were injected"
    );
    assert!(
        traffic.iter().any(|x| x.injected && x.status == 429),
        "the 429 burst happened"
    );
    // The lost answers made the retried creates meet their own objects (409) and adopt
    // them; no object was ever created twice.
    assert!(
        traffic
            .iter()
            .any(|x| x.method == "POST" && x.status == 409),
        "a retried create met its own object"
    );
    let mut created: BTreeMap<String, usize> = BTreeMap::new();
    for x in traffic
        .iter()
        .filter(|x| x.method == "POST" && !x.injected && (200..300).contains(&x.status))
    {
        let body = x.request.clone().unwrap_or(Value::Null);
        if let Some(name) = body["cluster"]["name"]
            .as_str()
            .or(body["nodePool"]["name"].as_str())
            .or(body["name"].as_str())
        {
            *created.entry(format!("{} {name}", x.api)).or_default() += 1;
        }
        if x.api == "file" && x.query.contains("instanceId=") {
            *created.entry(format!("file {}", x.query)).or_default() += 1;
        }
    }
    assert!(
        created.values().all(|n| *n == 1),
        "created twice: {created:?}"
    );
    let problems = contract_problems(&traffic);
    assert!(
        problems.is_empty(),
        "contract violations:\n{}",
        problems.join("\n")
    );
    w.destroy(&v1).await;
    assert_eq!(w.inventory().await, BTreeSet::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_operation_surfaces_its_status_message() {
    let w = World::new().await;
    w.sandbox.faults().fail_next_operation(
        "file",
        "zone us-central1-a does not have enough resources available",
    );
    let resources = r#"
[filestore_instance.nfs]
name = "nfs"
share = { name = "NFSVol", capacity_gb = 1024 }
"#;
    let e = w.engine(resources);
    let (plan, state) = e.plan(false, &[], "stack.toml", &[]).await.expect("plan");
    let err = e
        .apply(&plan, state)
        .await
        .expect_err("the operation fails")
        .to_string();
    assert!(err.contains("filestore_instance.nfs"), "{err}");
    assert!(
        err.contains("file.projects.locations.instances.create"),
        "{err}"
    );
    assert!(
        err.contains("does not have enough resources available"),
        "{err}"
    );
    // Nothing half-made is left in state: the next run creates it.
    w.sandbox.faults().clear();
    let again = w.plan(resources).await;
    assert_eq!(
        actions(&again),
        BTreeMap::from([("filestore_instance.nfs".to_string(), Action::Create)])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_empty_bucket_refuses_destroy_unless_force_destroy() {
    let w = World::new().await;
    let keep = "[gcs_bucket.data]\nname = \"ml-data-bucket\"\nversioning = true\n";
    w.apply(keep).await;
    let e = w.sandbox.gcp_endpoints();
    let http = reqwest::Client::new();
    for name in [
        "datasets/training/2018-04-01.pkl",
        "datasets/testing/2018-04-05.pkl",
    ] {
        let status = http
            .post(format!("{}upload/storage/v1/b/ml-data-bucket/o", e.storage))
            .query(&[("uploadType", "media"), ("name", name)])
            .bearer_auth("t")
            .body("rows")
            .send()
            .await
            .expect("upload")
            .status();
        assert!(status.is_success(), "{status}");
    }
    let engine = w.engine(keep);
    let (plan, state) = engine
        .plan(true, &[], "stack.toml", &[])
        .await
        .expect("plan");
    let err = engine
        .apply(&plan, state)
        .await
        .expect_err("refused")
        .to_string();
    assert!(err.contains("storage.buckets.delete failed: 409"), "{err}");
    assert!(err.contains("force_destroy = true"), "{err}");

    let force =
        "[gcs_bucket.data]\nname = \"ml-data-bucket\"\nversioning = true\nforce_destroy = true\n";
    w.apply(force).await;
    w.destroy(force).await;
    assert_eq!(w.inventory().await, BTreeSet::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_pool_on_autopilot_cluster_is_refused_before_any_call() {
    let w = World::new().await;
    let err = w
        .load(&format!(
            "{}\n[gke_cluster.batch]\nname = \"batch\"\nmode = \"autopilot\"\n\n[gke_node_pool.gpu]\nname = \"gpu\"\ncluster = \"${{gke_cluster.batch.id}}\"\n",
            w.provider()
        ))
        .expect_err("refused");
    let text = format!("{err:?}");
    assert!(
        text.contains("gke_cluster.batch is an Autopilot cluster"),
        "{text}"
    );
    assert!(
        w.sandbox.traffic().is_empty(),
        "validation made no API call"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fields_in_use() {
    let w = World::new().await;
    let v = stack(4, "n1-highmem-8", 1024, true);
    w.apply(&v).await;
    w.apply(&stack(5, "n1-highmem-8", 2048, false)).await;
    w.destroy(&v).await;
    let used = fields_used(&w.sandbox.traffic());
    for f in &used {
        println!("{f}");
    }
    for expected in [
        "cluster.autopilot.enabled",
        "NodeTaint.effect=NO_SCHEDULE",
        "Instance.tier=BASIC_HDD",
    ] {
        assert!(
            used.iter().any(|u| u.ends_with(expected)),
            "{expected} in {used:?}"
        );
    }
}

impl World {
    /// `[providers.gcp.europe]`: the same sandbox under another project and region.
    fn europe(&self) -> String {
        let text = self
            .provider()
            .replacen("[providers.gcp]", "[providers.gcp.europe]", 1);
        let text = set_value(&text, "project", "\"ml-project\"", "\"eu-project\"");
        let text = set_value(&text, "region", "\"us-central1\"", "\"europe-west4\"");
        set_value(&text, "zone", "\"us-central1-a\"", "\"europe-west4-a\"")
    }

    /// The ids of the clusters the sandbox holds in `project`.
    async fn clusters_in(&self, project: &str) -> Vec<String> {
        let url = format!(
            "{}v1/projects/{project}/locations/-/clusters",
            self.sandbox.gcp_endpoints().container
        );
        let listed: Value = reqwest::Client::new()
            .get(url)
            .bearer_auth("sandbox-token")
            .send()
            .await
            .expect("list clusters")
            .json()
            .await
            .expect("clusters");
        let mut out: Vec<String> = listed["clusters"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                format!(
                    "{} {}",
                    c["location"].as_str().unwrap_or_default(),
                    c["name"].as_str().unwrap_or_default()
                )
            })
            .collect();
        out.sort();
        out
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_of_the_gcp_provider_manage_one_stack_in_two_projects_and_regions() {
    let w = World::new().await;
    let two = format!(
        "{}\n[gke_cluster.us]\nname = \"train-us\"\nlocation = \"us-central1-a\"\nmode = \"standard\"\n\n[gke_cluster.eu]\nprovider = \"gcp.europe\"\nname = \"train-eu\"\nlocation = \"europe-west4-a\"\nmode = \"standard\"\n",
        w.europe()
    );
    let plan = w.apply(&two).await;
    assert_eq!(plan.summary().add, 2);
    assert_eq!(
        w.clusters_in("ml-project").await,
        ["us-central1-a train-us"]
    );
    assert_eq!(
        w.clusters_in("eu-project").await,
        ["europe-west4-a train-eu"]
    );
    let state: Value = serde_json::from_str(
        &std::fs::read_to_string(w.dir.path().join("terrain.tfstate")).expect("state"),
    )
    .expect("state json");
    assert_eq!(
        state["resources"]["gke_cluster.eu"]["provider"],
        "gcp.europe"
    );
    assert_eq!(state["resources"]["gke_cluster.us"]["provider"], "gcp");
    assert!(
        !w.plan(&two).await.has_changes(),
        "a re-plan reads each through its instance"
    );

    // The same cluster under the default instance is refused offline: its zone is not
    // in that instance's region.
    let err = w
        .load(&format!(
            "{}\n{}",
            w.provider(),
            two.replace("provider = \"gcp.europe\"\n", "")
        ))
        .expect_err("refused");
    assert!(
        format!("{err:?}")
            .contains("zone `europe-west4-a` is not in the provider's region us-central1"),
        "{err:?}"
    );

    // Dropped from the stack, the European cluster is destroyed through the instance
    // that made it (the state records it), in its own project.
    w.apply(&format!("{}\n[gke_cluster.us]\nname = \"train-us\"\nlocation = \"us-central1-a\"\nmode = \"standard\"\n", w.europe())).await;
    assert!(w.clusters_in("eu-project").await.is_empty());
    assert_eq!(
        w.clusters_in("ml-project").await,
        ["us-central1-a train-us"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_engines_in_one_process_share_no_provider_client() {
    let w = World::new().await;
    let stack = "[gcs_bucket.data]\nname = \"shared-nothing\"\nlocation = \"us-central1\"\n";
    let first = w.engine(stack);
    let (plan, base) = first
        .plan(false, &[], "stack.toml", &[])
        .await
        .expect("plan");
    first.apply(&plan, base).await.expect("apply");
    let made = terrain_providers::gcp::client::clients_in(&first.settings.session);
    assert_eq!(made, 1, "one client for the one provider table of the run");
    let second = w.engine(stack);
    assert_eq!(
        terrain_providers::gcp::client::clients_in(&second.settings.session),
        0,
        "another engine starts with none of the first's clients"
    );
    assert!(!second
        .plan(false, &[], "stack.toml", &[])
        .await
        .expect("plan")
        .0
        .has_changes());
    assert_eq!(
        terrain_providers::gcp::client::clients_in(&second.settings.session),
        1
    );
    assert_eq!(
        terrain_providers::gcp::client::clients_in(&first.settings.session),
        1
    );
}
