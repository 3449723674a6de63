//! What the sandbox's test suites share: running the real `kubectl` with a kubeconfig
//! the sandbox wrote and a home of its own (so nothing of the developer's setup leaks
//! in), and checking AWS answers against a botocore model's shapes.

#![allow(dead_code)] // each test crate uses what it needs

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

pub const KUBECTL: &str = "/usr/bin/kubectl";

/// A file of the official contracts kept in the repository (`contracts/`); a
/// contract that is not there fails the test, naming it.
pub fn reference(path: &str) -> PathBuf {
    terrain_contracts::path(path)
}

pub struct Kubectl<'a> {
    pub kubeconfig: &'a Path,
    pub home: &'a Path,
}

pub struct Run {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

impl Kubectl<'_> {
    pub async fn run(&self, args: &[&str]) -> Run {
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
    pub async fn ok(&self, args: &[&str]) -> Run {
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

    /// Runs kubectl expecting it to fail.
    pub async fn fails(&self, args: &[&str]) -> Run {
        let run = self.run(args).await;
        assert!(
            !run.ok,
            "kubectl {} succeeded:\n{}",
            args.join(" "),
            run.stdout
        );
        run
    }
}

/// Where `value` strays from shape `shape` of `model`: members the shape does not have,
/// values of the wrong type, strings outside an enum.
pub fn botocore_violations(model: &Value, shape: &str, value: &Value, at: &str) -> Vec<String> {
    let s = &model["shapes"][shape];
    let mut out = Vec::new();
    let wrong = |what: &str| vec![format!("{at}: expected {what} ({shape}), got {value}")];
    match s["type"].as_str().unwrap_or_default() {
        "structure" => {
            let Some(obj) = value.as_object() else {
                return wrong("an object");
            };
            for (k, v) in obj {
                match s["members"][k]["shape"].as_str() {
                    Some(member) => {
                        out.extend(botocore_violations(model, member, v, &format!("{at}.{k}")))
                    }
                    None => out.push(format!("{at}.{k} is not a member of {shape}")),
                }
            }
        }
        "list" => {
            let Some(items) = value.as_array() else {
                return wrong("a list");
            };
            let member = s["member"]["shape"].as_str().unwrap_or_default();
            for (i, v) in items.iter().enumerate() {
                out.extend(botocore_violations(model, member, v, &format!("{at}[{i}]")));
            }
        }
        "map" => {
            let Some(obj) = value.as_object() else {
                return wrong("a map");
            };
            let member = s["value"]["shape"].as_str().unwrap_or_default();
            for (k, v) in obj {
                out.extend(botocore_violations(model, member, v, &format!("{at}.{k}")));
            }
        }
        "string" => match value.as_str() {
            None => return wrong("a string"),
            Some(v) => {
                if let Some(values) = s["enum"].as_array() {
                    if !values.iter().any(|e| e == v) {
                        out.push(format!("{at}: {v:?} is not a value of {shape}"));
                    }
                }
            }
        },
        "integer" | "long" if !value.is_i64() && !value.is_u64() => return wrong("an integer"),
        "boolean" if !value.is_boolean() => return wrong("a boolean"),
        "timestamp" | "double" | "float" if !value.is_number() => return wrong("a number"),
        _ => {}
    }
    out
}

pub fn assert_botocore(model: &Value, shape: &str, value: &Value) {
    let problems = botocore_violations(model, shape, value, shape);
    assert!(problems.is_empty(), "{problems:#?}\nin {value:#}");
}

/// A call to an emulated cloud API, which must succeed; its JSON answer.
pub async fn cloud(
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

/// Creates the GKE cluster `name` in `project` and writes its kubeconfig under `home`.
pub async fn gke_cluster(
    sandbox: &terrain_sandbox::Sandbox,
    project: &str,
    name: &str,
    home: &Path,
) -> PathBuf {
    let http = reqwest::Client::new();
    let root = format!(
        "{}v1/projects/{project}/locations/us-central1",
        sandbox.gcp_endpoints().container
    );
    let op = cloud(
        &http,
        reqwest::Method::POST,
        &format!("{root}/clusters"),
        Some(json!({"cluster": {"name": name, "initialNodeCount": 1}})),
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
    let written = sandbox.kubeconfig(home).expect("kubeconfig");
    written
        .into_iter()
        .find(|(n, _)| n == name)
        .map(|(_, path)| path)
        .unwrap_or_else(|| panic!("a kubeconfig for {name}"))
}
