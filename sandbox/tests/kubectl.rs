//! Compatibility with the official `kubectl`: with a kubeconfig the sandbox writes, kubectl
//! lists namespaces and pods, applies a manifest server-side, prints, describes and
//! deletes the object. Skipped (with a message) when kubectl is not installed.

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};
use terrain_sandbox::{Options, Sandbox, Timing};

const KUBECTL: &str = "/usr/bin/kubectl";
const PROJECT: &str = "kubectl-proj";

struct Kubectl<'a> {
    kubeconfig: &'a Path,
    home: &'a Path,
}

struct Run {
    ok: bool,
    stdout: String,
    stderr: String,
}

impl Kubectl<'_> {
    async fn run(&self, args: &[&str]) -> Run {
        let mut cmd = tokio::process::Command::new(KUBECTL);
        cmd.arg("--kubeconfig")
            .arg(self.kubeconfig)
            .arg("--cache-dir")
            .arg(self.home.join("cache"))
            .args(args)
            // Nothing from the developer's own setup may leak in.
            .env_remove("KUBECONFIG")
            .env("HOME", self.home)
            .env("CLOUDSDK_CONFIG", self.home.join("gcloud"));
        let out = tokio::time::timeout(Duration::from_secs(120), cmd.output())
            .await
            .expect("kubectl finishes within two minutes")
            .expect("kubectl runs");
        Run {
            ok: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Runs kubectl and fails the test with its output when it fails.
    async fn ok(&self, args: &[&str]) -> Run {
        let run = self.run(args).await;
        assert!(
            run.ok,
            "kubectl {} failed:\nstdout:\n{}\nstderr:\n{}",
            args.join(" "),
            run.stdout,
            run.stderr
        );
        run
    }
}

async fn cloud(
    http: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    body: Option<Value>,
) -> Value {
    let mut req = http.request(method, url).bearer_auth("setup-token");
    if let Some(body) = body {
        req = req.json(&body);
    }
    let resp = req.send().await.expect("the container API answers");
    assert!(resp.status().is_success(), "{url}: {}", resp.status());
    resp.json().await.expect("JSON")
}

#[tokio::test]
async fn kubectl_gets_applies_describes_and_deletes() {
    if !Path::new(KUBECTL).is_file() {
        eprintln!("skipping: {KUBECTL} is not installed");
        return;
    }
    let sandbox = Sandbox::start(Options {
        timing: Timing::instant(),
        ..Options::default()
    })
    .await
    .expect("sandbox starts");
    let http = reqwest::Client::new();
    let root = format!(
        "{}v1/projects/{PROJECT}/locations/us-central1",
        sandbox.gcp_endpoints().container
    );
    let op = cloud(
        &http,
        reqwest::Method::POST,
        &format!("{root}/clusters"),
        Some(json!({"cluster": {"name": "batch", "initialNodeCount": 1}})),
    )
    .await;
    let op_url = format!(
        "{root}/operations/{}",
        op["name"].as_str().expect("operation")
    );
    for _ in 0..100 {
        if cloud(&http, reqwest::Method::GET, &op_url, None).await["status"] == "DONE" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let home = tempfile::tempdir().expect("temp dir");
    let written = sandbox.kubeconfig(home.path()).expect("kubeconfig");
    let [(name, kubeconfig)] = written.as_slice() else {
        panic!("one kubeconfig per cluster, got {written:?}");
    };
    assert_eq!(name, "batch");
    let kubectl = Kubectl {
        kubeconfig,
        home: home.path(),
    };

    let namespaces = kubectl.ok(&["get", "namespaces"]).await;
    let header: Vec<&str> = namespaces
        .stdout
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(header, ["NAME", "STATUS", "AGE"], "{}", namespaces.stdout);
    for ns in ["default", "kube-node-lease", "kube-public", "kube-system"] {
        assert!(
            namespaces
                .stdout
                .lines()
                .any(|l| l.split_whitespace().take(2).eq([ns, "Active"])),
            "{ns} Active in:\n{}",
            namespaces.stdout
        );
    }

    let pods = kubectl.ok(&["get", "pods", "-A"]).await;
    assert!(
        pods.stdout.contains("NAMESPACE") || pods.stderr.contains("No resources found"),
        "stdout:\n{}\nstderr:\n{}",
        pods.stdout,
        pods.stderr
    );

    let manifest = home.path().join("settings.yaml");
    std::fs::write(
        &manifest,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  labels:\n    app: demo\ndata:\n  greeting: hello\n",
    )
    .expect("manifest");
    let manifest = manifest.to_string_lossy().into_owned();
    let applied = kubectl
        .ok(&["apply", "--server-side", "-f", &manifest])
        .await;
    assert_eq!(
        applied.stdout.trim(),
        "configmap/settings serverside-applied"
    );

    let yaml = kubectl
        .ok(&["get", "configmap", "settings", "-o", "yaml"])
        .await;
    let object: Value = serde_yaml_ng::from_str(&yaml.stdout).expect("kubectl prints YAML");
    assert_eq!(object["kind"], "ConfigMap");
    assert_eq!(object["metadata"]["name"], "settings");
    assert_eq!(object["metadata"]["namespace"], "default");
    assert_eq!(object["data"]["greeting"], "hello");
    assert!(object["metadata"]["uid"].is_string());

    let table = kubectl.ok(&["get", "configmaps", "-l", "app=demo"]).await;
    let rows: Vec<Vec<&str>> = table
        .stdout
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows.first().map(Vec::as_slice),
        Some(["NAME", "DATA", "AGE"].as_slice())
    );
    assert_eq!(
        rows.get(1).map(|r| &r[..2]),
        Some(["settings", "1"].as_slice())
    );

    let described = kubectl.ok(&["describe", "configmap", "settings"]).await;
    for want in [
        "Name:",
        "settings",
        "Namespace:",
        "default",
        "app=demo",
        "greeting",
        "hello",
    ] {
        assert!(
            described.stdout.contains(want),
            "{want} in:\n{}",
            described.stdout
        );
    }

    let deleted = kubectl.ok(&["delete", "configmap", "settings"]).await;
    assert_eq!(deleted.stdout.trim(), "configmap \"settings\" deleted");
    let missing = kubectl.run(&["get", "configmap", "settings"]).await;
    assert!(!missing.ok);
    assert!(
        missing
            .stderr
            .contains("Error from server (NotFound): configmaps \"settings\" not found"),
        "{}",
        missing.stderr
    );
    sandbox.shutdown().await;
}
