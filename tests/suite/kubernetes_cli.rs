//! The batch-ML scenario end to end, as a user runs it: the real `terrain` binary against
//! the sandbox (GKE Autopilot + Filestore + the cluster's emulated Kubernetes API, with a
//! real redis-server behind the Redis pod). Create → clean re-plan → queue contents read
//! back from Redis → status, logs and kubectl → an in-place Job update with its live YAML
//! diff → a new dataset file re-copied and queued → destroy, leaving the sandbox empty.

use crate::common;

use std::net::SocketAddr;
use std::process::Command;

use common::{expect_file, stable, Sandbox};
use terrain_sandbox::{Options, Sandbox as Cloud, Timing};

struct Env {
    cloud: Cloud,
    vars: Vec<(String, String)>,
}

impl Env {
    async fn new(work: &Sandbox) -> Self {
        let cloud = Cloud::start(Options {
            timing: Timing::scaled(0.01),
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

    /// The Redis list as the real redis-server behind the `redis-leader` pod holds it.
    fn queue(&self, list: &str) -> Vec<String> {
        let addr: SocketAddr = self
            .cloud
            .redis_address("batch-aiml", "default", "redis-leader")
            .expect("the redis-leader pod is backed by a redis-server");
        common::redis_list(addr, list)
    }
}

const TRAINING: [&str; 4] = [
    "datasets/training/2018-04-01.pkl",
    "datasets/training/2018-04-02.pkl",
    "datasets/training/2018-04-03.pkl",
    "datasets/training/2018-04-04.pkl",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_ml_applies_queues_runs_updates_and_destroys() {
    let work = Sandbox::with_fixture("batch-ml");
    let env = Env::new(&work).await;

    let plan = env.run(&work, &["plan", "--detailed-exitcode"]);
    plan.expect_code(2);
    expect_file("kubernetes/plan-create.txt", &stable(&plan.stdout));

    let apply = env.run(&work, &["apply", "--auto-approve"]);
    apply.success();
    env.run(&work, &["plan", "--detailed-exitcode"])
        .expect_code(0);

    // The training paths were queued in the real Redis, and the Job's worker took them
    // all off it.
    assert_eq!(env.queue("datasets"), Vec::<String>::new());
    let logs = env.run(&work, &["logs", "kubernetes_job.workload"]);
    for path in TRAINING {
        assert!(
            logs.stdout.contains(&format!("Processing {path}\n")),
            "{path}:\n{}",
            logs.stdout
        );
    }

    let status = env.run(&work, &["status", "--no-color"]);
    status.success();
    let job_line = status
        .stdout
        .lines()
        .find(|l| l.starts_with("kubernetes_job.workload"))
        .expect("status lists the job");
    assert!(
        job_line.contains("ready") && job_line.contains("Complete"),
        "{}",
        status.stdout
    );
    let claim_line = status
        .stdout
        .lines()
        .find(|l| l.starts_with("kubernetes_nfs_volume.fileserver"))
        .expect("status lists the volume");
    assert!(claim_line.contains("Bound"), "{}", status.stdout);

    let logs = env.run(&work, &["logs", "kubernetes_job.workload"]);
    logs.success();
    assert!(!logs.stdout.trim().is_empty(), "the job's pod has logs");

    let rendered = env.run(&work, &["render", "kubernetes_nfs_volume.fileserver"]);
    rendered.success();
    assert!(
        rendered.stdout.contains("kind: PersistentVolume")
            && rendered.stdout.contains("path: /NFSVol"),
        "{}",
        rendered.stdout
    );

    // kubectl sees what terrain built, through the kubeconfig the sandbox writes.
    let kubeconfigs = env
        .cloud
        .kubeconfig(&work.join("kube"))
        .expect("kubeconfig written");
    let (_, kubeconfig) = kubeconfigs
        .iter()
        .find(|(name, _)| name == "batch-aiml")
        .expect("a kubeconfig for batch-aiml");
    match Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["get", "jobs", "-o", "name"])
        .output()
    {
        Ok(out) => {
            assert!(
                out.status.success(),
                "kubectl get jobs: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert_eq!(
                String::from_utf8_lossy(&out.stdout).trim(),
                "job.batch/workload"
            );
        }
        Err(e) => eprintln!("kubectl not runnable ({e}); skipping the kubectl check"),
    }

    // An in-place change to the Job shows the live objects' YAML diff.
    let update = env.run(
        &work,
        &[
            "plan",
            "--no-color",
            "--var",
            "parallelism=2",
            "--detailed-exitcode",
        ],
    );
    update.expect_code(2);
    expect_file("kubernetes/plan-parallelism.txt", &stable(&update.stdout));
    env.run(
        &work,
        &["apply", "--auto-approve", "--var", "parallelism=2"],
    )
    .success();
    env.run(
        &work,
        &["plan", "--var", "parallelism=2", "--detailed-exitcode"],
    )
    .expect_code(0);

    // A new training file is copied and queued; what was queued before is not pushed again.
    work.write(
        "datasets/training/2018-04-05.pkl",
        "training rows for 2018-04-05\n",
    );
    let more = env.run(
        &work,
        &[
            "plan",
            "--no-color",
            "--var",
            "parallelism=2",
            "--detailed-exitcode",
        ],
    );
    more.expect_code(2);
    expect_file("kubernetes/plan-new-dataset.txt", &stable(&more.stdout));
    env.run(
        &work,
        &["apply", "--auto-approve", "--var", "parallelism=2"],
    )
    .success();
    // Only the new path: the four taken before are not pushed again. It waits for the
    // next run of the worker (the Job itself did not change).
    assert_eq!(env.queue("datasets"), ["datasets/training/2018-04-05.pkl"]);

    let destroy = env.run(
        &work,
        &["destroy", "--auto-approve", "--var", "parallelism=2"],
    );
    destroy.success();
    env.run(
        &work,
        &["plan", "--var", "parallelism=2", "--detailed-exitcode"],
    )
    .expect_code(2);
    let state: serde_json::Value = reqwest::get(format!("{}/_sandbox/state", env.cloud.url()))
        .await
        .expect("state")
        .json()
        .await
        .expect("json");
    assert!(
        state["kubernetes"]["clusters"]
            .as_object()
            .is_none_or(|c| c.is_empty()),
        "no emulated cluster is left: {}",
        state["kubernetes"]
    );
    assert!(
        state["gcp"]["container"]["clusters"]
            .as_array()
            .is_none_or(|c| c.is_empty()),
        "no GKE cluster is left"
    );
    assert!(
        env.cloud.traffic().iter().all(|x| x.status != 401),
        "every call carried a token"
    );
}
