//! The GCP provider as a user drives it: the real `terrain` binary against the
//! sandbox's Google APIs (reached through gcloud's endpoint-override variables), with
//! checked-in expected output. The stack is the "done when": an Autopilot
//! cluster, a Standard cluster with a Spot GPU pool (autoscaling 0–4, tainted) and a TPU
//! pool, a Filestore instance and a GCS bucket.

use crate::common;

use common::{expect_file, Sandbox};
use terrain_sandbox::{Options, Sandbox as Cloud, Timing};

struct Env {
    cloud: Cloud,
    vars: Vec<(String, String)>,
}

impl Env {
    async fn new(work: &Sandbox) -> Self {
        let cloud = Cloud::start(Options {
            timing: Timing::scaled(0.002),
            ..Options::google_apis_on()
        })
        .await
        .expect("sandbox starts");
        work.write("token", "sandbox-token\n");
        let e = cloud.gcp_endpoints();
        let vars = vec![
            (
                "CLOUDSDK_API_ENDPOINT_OVERRIDES_CONTAINER".to_string(),
                e.container,
            ),
            ("CLOUDSDK_API_ENDPOINT_OVERRIDES_FILE".to_string(), e.file),
            (
                "CLOUDSDK_API_ENDPOINT_OVERRIDES_STORAGE".to_string(),
                e.storage,
            ),
            // The plan's capacity preflight reads Compute Engine and Cloud TPU.
            (
                "CLOUDSDK_API_ENDPOINT_OVERRIDES_COMPUTE".to_string(),
                e.compute,
            ),
            ("CLOUDSDK_API_ENDPOINT_OVERRIDES_TPU".to_string(), e.tpu),
            // The plan asks Service Usage which APIs are on.
            (
                "CLOUDSDK_API_ENDPOINT_OVERRIDES_SERVICEUSAGE".to_string(),
                e.serviceusage,
            ),
            ("CLOUDSDK_API_ENDPOINT_OVERRIDES_IAM".to_string(), e.iam),
            (
                "CLOUDSDK_API_ENDPOINT_OVERRIDES_CLOUDRESOURCEMANAGER".to_string(),
                e.cloudresourcemanager,
            ),
            (
                "CLOUDSDK_AUTH_ACCESS_TOKEN_FILE".to_string(),
                work.join("token").display().to_string(),
            ),
        ];
        Self { cloud, vars }
    }

    fn run(&self, work: &Sandbox, args: &[&str]) -> common::Run {
        let envs: Vec<(&str, &str)> = self
            .vars
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        work.run_env(args, &envs)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gcp_stack_applies_replans_clean_updates_replaces_and_destroys() {
    let work = Sandbox::with_fixture("gcp-ml");
    let env = Env::new(&work).await;

    let plan = env.run(&work, &["plan", "--detailed-exitcode"]);
    plan.expect_code(2);
    expect_file("gcp/plan-create.txt", &plan.stdout);

    env.run(&work, &["apply", "--auto-approve"]).success();
    env.run(&work, &["plan", "--detailed-exitcode"])
        .expect_code(0);

    let update = env.run(
        &work,
        &["plan", "--var", "gpu_max_nodes=5", "--detailed-exitcode"],
    );
    update.expect_code(2);
    expect_file("gcp/plan-autoscaling.txt", &update.stdout);
    env.run(
        &work,
        &["apply", "--auto-approve", "--var", "gpu_max_nodes=5"],
    )
    .success();
    env.run(
        &work,
        &["plan", "--var", "gpu_max_nodes=5", "--detailed-exitcode"],
    )
    .expect_code(0);

    let replace = env.run(
        &work,
        &[
            "plan",
            "--var",
            "gpu_max_nodes=5",
            "--var",
            "gpu_machine_type=n1-standard-8",
            "--detailed-exitcode",
        ],
    );
    replace.expect_code(2);
    expect_file("gcp/plan-machine-type.txt", &replace.stdout);

    let destroy = env.run(
        &work,
        &["destroy", "--auto-approve", "--var", "gpu_max_nodes=5"],
    );
    destroy.success();
    env.run(
        &work,
        &["plan", "--var", "gpu_max_nodes=5", "--detailed-exitcode"],
    )
    .expect_code(2);
    let calls = env.cloud.traffic();
    assert!(
        calls.iter().all(|x| x.status != 401),
        "every call carried the token"
    );
}

/// `gcloud container clusters update gpu-cluster --node-pool spot-gpu-pool
/// --enable-autoscaling --min-nodes 0 --max-nodes 6`, sent as gcloud sends it (a
/// ClusterUpdate naming the pool), changes the pool behind terrain's back: the sandbox
/// accepts it as GKE does, the next plan shows the drift, and the apply puts it back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusters_update_node_pool_autoscaling_by_hand_is_drift_the_next_plan_shows() {
    let work = Sandbox::with_fixture("gcp-ml");
    let env = Env::new(&work).await;
    env.run(&work, &["apply", "--auto-approve"]).success();

    let cluster = format!(
        "{}v1/projects/ml-project/locations/us-central1-a/clusters/gpu-cluster",
        env.cloud.gcp_endpoints().container
    );
    let http = reqwest::Client::new();
    let answer = http
        .put(&cluster)
        .bearer_auth("sandbox-token")
        .json(&serde_json::json!({"update": {
            "desiredNodePoolId": "spot-gpu-pool",
            "desiredNodePoolAutoscaling": {"enabled": true, "minNodeCount": 0, "maxNodeCount": 6},
        }}))
        .send()
        .await
        .expect("the update is answered");
    let status = answer.status();
    let body = answer.text().await.unwrap_or_default();
    assert!(status.is_success(), "{status}: {body}");
    // The update is a long-running operation: wait until the pool shows it.
    let pool = format!("{cluster}/nodePools/spot-gpu-pool");
    let started = std::time::Instant::now();
    loop {
        let got: serde_json::Value = http
            .get(&pool)
            .bearer_auth("sandbox-token")
            .send()
            .await
            .expect("the pool is answered")
            .json()
            .await
            .expect("JSON");
        if got["autoscaling"]["maxNodeCount"] == 6 {
            break;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "the pool never showed the update: {got}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }

    let plan = env.run(&work, &["plan", "--detailed-exitcode"]);
    plan.expect_code(2);
    expect_file("gcp/plan-drift-autoscaling.txt", &plan.stdout);
    env.run(&work, &["apply", "--auto-approve"]).success();
    env.run(&work, &["plan", "--detailed-exitcode"])
        .expect_code(0);
}

/// The cluster autoscaler resizing an autoscaled pool (`nodePools/…:setSize`: the pool
/// grows from 1 node per zone to 2) is the autoscaler's business: the next plan has
/// nothing to do, so `terrain operator` never reports it as drift.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_autoscaler_resizing_a_pool_is_never_drift() {
    let work = Sandbox::with_fixture("gcp-ml");
    let env = Env::new(&work).await;
    env.run(&work, &["apply", "--auto-approve"]).success();
    let cluster = format!(
        "{}v1/projects/ml-project/locations/us-central1-a/clusters/gpu-cluster",
        env.cloud.gcp_endpoints().container
    );
    let http = reqwest::Client::new();
    let get = |url: String| {
        let http = http.clone();
        async move {
            http.get(url)
                .bearer_auth("sandbox-token")
                .send()
                .await
                .expect("answered")
                .json::<serde_json::Value>()
                .await
                .expect("JSON")
        }
    };
    let before = get(cluster.clone()).await["currentNodeCount"].clone();
    let answer = http
        .post(format!("{cluster}/nodePools/spot-gpu-pool:setSize"))
        .bearer_auth("sandbox-token")
        .json(&serde_json::json!({"nodeCount": 2}))
        .send()
        .await
        .expect("the resize is answered");
    assert!(
        answer.status().is_success(),
        "{}",
        answer.text().await.unwrap_or_default()
    );
    let started = std::time::Instant::now();
    loop {
        let c = get(cluster.clone()).await;
        let pool = &c["nodePools"]
            .as_array()
            .expect("pools")
            .iter()
            .find(|p| p["name"] == "spot-gpu-pool")
            .cloned()
            .unwrap_or_default();
        if c["currentNodeCount"] != before && pool["status"] == "RUNNING" {
            break;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "the resize never landed: {c}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    env.run(&work, &["plan", "--detailed-exitcode"])
        .expect_code(0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retired_gpu_and_bad_tpu_topology_are_refused_offline() {
    let work = Sandbox::with_fixture("gcp-ml");
    let stack = std::fs::read_to_string(work.join("stack.toml")).expect("read stack");
    let broken = stack
        .replace("type = \"nvidia-tesla-t4\"", "type = \"nvidia-tesla-k80\"")
        .replace("topology = \"2x4\"", "topology = \"3x3\"");
    work.write("stack.toml", &broken);
    let run = work.run(&["validate"]);
    run.failure();
    expect_file("gcp/validate-retired-gpu.txt", &run.stderr);
}

#[test]
fn missing_credentials_say_what_to_set() {
    let work = Sandbox::with_fixture("gcp-ml");
    // Endpoints that nothing serves: the run must stop at credentials, before any call.
    let run = work.run_env(
        &[
            "apply",
            "--auto-approve",
            "--target",
            "gcs_bucket.pipelines",
        ],
        &[(
            "CLOUDSDK_API_ENDPOINT_OVERRIDES_STORAGE",
            "http://127.0.0.1:9/storage/",
        )],
    );
    run.failure();
    assert!(
        run.stderr
            .contains("gcs_bucket.pipelines: provider configuration: no Google credentials found"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("GOOGLE_APPLICATION_CREDENTIALS"),
        "{}",
        run.stderr
    );
}
