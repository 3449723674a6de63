//! Compatibility with the official `gcloud` CLI: objects created over HTTP must be listed
//! and described by `gcloud container` and `gcloud filestore` pointed at the sandbox with
//! endpoint overrides. Skipped (with a message) when gcloud is not installed. gcloud takes
//! seconds per command, so the invocations are few and share one sandbox.

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};
use terrain_sandbox::{Options, Sandbox, Timing};

const PROJECT: &str = "sandbox-proj";

fn gcloud_on_path() -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join("gcloud").is_file()))
}

struct Gcloud<'a> {
    config_dir: &'a Path,
    token_file: &'a Path,
    sandbox: &'a Sandbox,
}

impl Gcloud<'_> {
    /// Runs gcloud with a private configuration pointed at the sandbox; returns stdout
    /// and fails the test with gcloud's stderr when the command fails.
    async fn run(&self, args: &[&str]) -> String {
        let endpoints = self.sandbox.gcp_endpoints();
        let mut cmd = tokio::process::Command::new("gcloud");
        cmd.args(args);
        // Nothing from the developer's own gcloud setup may leak into the test.
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("CLOUDSDK_") {
                cmd.env_remove(key);
            }
        }
        cmd.env("CLOUDSDK_CONFIG", self.config_dir)
            .env(
                "CLOUDSDK_API_ENDPOINT_OVERRIDES_CONTAINER",
                &endpoints.container,
            )
            .env("CLOUDSDK_API_ENDPOINT_OVERRIDES_FILE", &endpoints.file)
            .env(
                "CLOUDSDK_API_ENDPOINT_OVERRIDES_STORAGE",
                &endpoints.storage,
            )
            .env("CLOUDSDK_AUTH_ACCESS_TOKEN_FILE", self.token_file)
            .env("CLOUDSDK_CORE_PROJECT", PROJECT)
            .env("CLOUDSDK_CORE_DISABLE_PROMPTS", "1")
            .env("CLOUDSDK_COMPONENT_MANAGER_DISABLE_UPDATE_CHECK", "1")
            .env("CLOUDSDK_CORE_DISABLE_USAGE_REPORTING", "1");
        let out = tokio::time::timeout(Duration::from_secs(120), cmd.output())
            .await
            .expect("gcloud finishes within two minutes")
            .expect("gcloud runs");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(
            out.status.success(),
            "gcloud {} failed ({}):\nstdout:\n{stdout}\nstderr:\n{stderr}",
            args.join(" "),
            out.status
        );
        stdout
    }

    async fn json(&self, args: &[&str]) -> Value {
        let text = self.run(args).await;
        serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("gcloud {args:?} printed no JSON ({e}):\n{text}"))
    }
}

async fn post(http: &reqwest::Client, url: &str, body: Value) -> Value {
    let resp = http
        .post(url)
        .bearer_auth("setup-token")
        .json(&body)
        .send()
        .await
        .expect("request reaches the sandbox");
    let status = resp.status();
    let body: Value = resp.json().await.expect("JSON response");
    assert!(status.is_success(), "POST {url}: {status} {body}");
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gcloud_lists_and_describes_sandbox_objects() {
    if !gcloud_on_path() {
        println!("skipped: gcloud is not on PATH");
        return;
    }
    let sandbox = Sandbox::start(Options {
        timing: Timing::instant(),
        ..Options::default()
    })
    .await
    .expect("sandbox starts");
    let endpoints = sandbox.gcp_endpoints();
    let http = reqwest::Client::new();

    let container = format!("{}v1/projects/{PROJECT}/locations", endpoints.container);
    post(
        &http,
        &format!("{container}/us-central1/clusters"),
        json!({"cluster": {
            "name": "ml",
            "resourceLabels": {"team": "ml"},
            "nodePools": [
                {"name": "system", "initialNodeCount": 1, "config": {"machineType": "e2-standard-4"}},
                {"name": "gpu", "initialNodeCount": 1, "config": {"machineType": "g2-standard-8",
                    "accelerators": [{"acceleratorCount": "1", "acceleratorType": "nvidia-l4"}]}}
            ]
        }}),
    )
    .await;
    post(
        &http,
        &format!("{container}/us-central1-a/clusters"),
        json!({"cluster": {"name": "zonal", "initialNodeCount": 2}}),
    )
    .await;
    post(
        &http,
        &format!(
            "{}v1/projects/{PROJECT}/locations/us-central1-b/instances?instanceId=nfs",
            endpoints.file
        ),
        json!({"tier": "BASIC_HDD", "fileShares": [{"name": "vol1", "capacityGb": 1024}],
            "networks": [{"network": "default"}]}),
    )
    .await;
    sandbox.clear_traffic();

    let dir = tempfile::tempdir().expect("temp dir");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "gcloud-token\n").expect("token file");
    let config_dir = dir.path().join("gcloud-config");
    std::fs::create_dir(&config_dir).expect("config dir");
    let gcloud = Gcloud {
        config_dir: &config_dir,
        token_file: &token_file,
        sandbox: &sandbox,
    };

    // Instant timing: the operations finished on the first read gcloud makes.
    let clusters = gcloud
        .json(&["container", "clusters", "list", "--format=json"])
        .await;
    let mut names: Vec<&str> = clusters
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["ml", "zonal"]);
    assert!(clusters
        .as_array()
        .into_iter()
        .flatten()
        .all(|c| c["status"] == "RUNNING"));

    let ml = gcloud
        .json(&[
            "container",
            "clusters",
            "describe",
            "ml",
            "--region",
            "us-central1",
            "--format=json",
        ])
        .await;
    assert_eq!(
        (ml["name"].as_str(), ml["location"].as_str()),
        (Some("ml"), Some("us-central1"))
    );
    assert_eq!(ml["resourceLabels"]["team"], "ml");
    assert_eq!(
        ml["nodePools"][1]["config"]["accelerators"][0]["acceleratorCount"],
        "1"
    );

    let zonal = gcloud
        .json(&[
            "container",
            "clusters",
            "describe",
            "zonal",
            "--zone",
            "us-central1-a",
            "--format=json",
        ])
        .await;
    assert_eq!(
        (zonal["zone"].as_str(), zonal["currentNodeCount"].as_i64()),
        (Some("us-central1-a"), Some(2))
    );

    // A mutation through gcloud exercises the operation format: gcloud polls it to DONE.
    gcloud
        .run(&[
            "container",
            "node-pools",
            "create",
            "extra",
            "--cluster",
            "ml",
            "--region",
            "us-central1",
            "--num-nodes",
            "1",
            "--machine-type",
            "n2-standard-2",
        ])
        .await;
    let pools = gcloud
        .run(&[
            "container",
            "node-pools",
            "list",
            "--cluster",
            "ml",
            "--region",
            "us-central1",
        ])
        .await;
    let header = pools.lines().next().unwrap_or("");
    for column in ["NAME", "MACHINE_TYPE", "DISK_SIZE_GB", "NODE_VERSION"] {
        assert!(
            header.contains(column),
            "node-pools list header {header:?} lacks {column}"
        );
    }
    for cell in ["system", "gpu", "g2-standard-8", "extra", "n2-standard-2"] {
        assert!(
            pools.contains(cell),
            "node-pools list lacks {cell}:\n{pools}"
        );
    }

    gcloud
        .run(&[
            "filestore",
            "instances",
            "create",
            "scratch",
            "--zone",
            "us-central1-a",
            "--tier",
            "BASIC_SSD",
            "--file-share",
            "name=scratch,capacity=2.5TB",
            "--network",
            "name=default",
        ])
        .await;
    let instances = gcloud.run(&["filestore", "instances", "list"]).await;
    let mut lines = instances.lines();
    let header = lines.next().unwrap_or("");
    for column in [
        "INSTANCE_NAME",
        "LOCATION",
        "TIER",
        "CAPACITY_GB",
        "FILE_SHARE_NAME",
        "IP_ADDRESS",
        "STATE",
    ] {
        assert!(
            header.contains(column),
            "filestore list header {header:?} lacks {column}"
        );
    }
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split_whitespace().collect()).collect();
    let expected = [
        [
            "nfs",
            "us-central1-b",
            "BASIC_HDD",
            "1024",
            "vol1",
            "10.200.0.2",
            "READY",
        ],
        [
            "scratch",
            "us-central1-a",
            "BASIC_SSD",
            "2560",
            "scratch",
            "10.200.0.10",
            "READY",
        ],
    ];
    for cells in expected {
        assert!(
            rows.iter().any(|row| cells.iter().all(|c| row.contains(c))),
            "no filestore row with {cells:?} in:\n{instances}"
        );
    }

    let nfs = gcloud
        .json(&[
            "filestore",
            "instances",
            "describe",
            "nfs",
            "--zone",
            "us-central1-b",
            "--format=json",
        ])
        .await;
    assert_eq!(
        nfs["name"],
        format!("projects/{PROJECT}/locations/us-central1-b/instances/nfs")
    );
    assert_eq!(nfs["fileShares"][0]["capacityGb"], "1024");

    let calls: Vec<String> = sandbox
        .traffic()
        .iter()
        .map(|e| format!("{} {} /{}/{}", e.status, e.method, e.api, e.path))
        .collect();
    println!("paths gcloud called:\n{}", calls.join("\n"));
    assert!(
        sandbox.traffic().iter().all(|e| e.status == 200),
        "gcloud saw errors:\n{}",
        calls.join("\n")
    );
    sandbox.shutdown().await;
}
