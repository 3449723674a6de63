//! `terrain operator` and `terrain stack` on the sandbox, as a team runs them: the real
//! binary serving the sandbox, a GKE cluster made by a stack, the CRD from `deploy/`
//! applied with kubectl, and the operator reconciling a Stack whose files are in a
//! ConfigMap. A plan waits for approval by digest and nothing is made; an approval of a
//! plan that then changes is superseded and not applied; the approved plan is applied;
//! a label changed through the emulated Cloud Storage API is reported as drift, then
//! put back once the Stack says `Correct`. Also: `deploy/` is what the types generate
//! and passes kubernetes-validate.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::{kubernetes_validate_strict, manifest_dir};

fn terrain() -> Command {
    Command::new(env!("CARGO_BIN_EXE_terrain"))
}

fn ok(cmd: &mut Command, what: &str) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{what} failed:\n{text}");
    text
}

#[test]
fn deploy_crd_is_the_one_the_types_generate() {
    let generated = ok(
        terrain().args(["operator", "--crd"]),
        "terrain operator --crd",
    );
    let kept = std::fs::read_to_string(manifest_dir().join("deploy/crd.yaml")).expect("crd.yaml");
    let body: String = kept
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(
        body, generated,
        "deploy/crd.yaml is stale: terrain operator --crd > deploy/crd.yaml (keep the comment)"
    );
}

#[test]
fn deploy_manifests_pass_kubernetes_validate_strict() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut files = Vec::new();
    for name in ["crd.yaml", "rbac.yaml", "operator.yaml"] {
        let text = std::fs::read_to_string(manifest_dir().join("deploy").join(name)).expect("read");
        for (i, doc) in serde_yaml_ng::Deserializer::from_str(&text).enumerate() {
            let v = <Value as serde::Deserialize>::deserialize(doc).expect("YAML");
            if v.is_null() {
                continue;
            }
            let path = dir.path().join(format!("{name}-{i}.yaml"));
            std::fs::write(&path, serde_yaml_ng::to_string(&v).expect("yaml")).expect("write");
            files.push(path);
        }
    }
    assert_eq!(
        files.len(),
        6,
        "the CRD, namespace, service account, role, binding and Deployment"
    );
    kubernetes_validate_strict(&files, "a deploy/ manifest");
}

/// A child process killed when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `terrain sandbox serve` in `dir`, once it answers; its URL.
fn serve(dir: &Path, log: &Path) -> (Proc, String) {
    let child = terrain()
        .args(["sandbox", "serve", "--dir"])
        .arg(dir)
        .env("TERRAIN_SANDBOX_TIME_SCALE", "0.01")
        .stdout(std::fs::File::create(log).expect("log"))
        .stderr(Stdio::null())
        .spawn()
        .expect("terrain sandbox serve");
    let proc = Proc(child);
    let url = wait("the sandbox serves", Duration::from_secs(60), || {
        let text = std::fs::read_to_string(dir.join("serve.json")).ok()?;
        let v: Value = serde_json::from_str(&text).ok()?;
        v["url"].as_str().map(str::to_string)
    });
    (proc, url)
}

fn wait<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            start.elapsed() < timeout,
            "timed out after {timeout:?} waiting until {what}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

struct Cluster {
    kubeconfig: PathBuf,
    /// The operator's log, shown when a wait times out.
    log: PathBuf,
}

impl Cluster {
    fn kubectl(&self, args: &[&str]) -> String {
        ok(
            Command::new("kubectl")
                .arg("--kubeconfig")
                .arg(&self.kubeconfig)
                .args(args),
            &format!("kubectl {}", args.join(" ")),
        )
    }

    fn apply(&self, doc: &Value) {
        let file = tempfile::NamedTempFile::new().expect("temp");
        std::fs::write(file.path(), serde_json::to_string(doc).expect("json")).expect("write");
        self.kubectl(&["apply", "-f", &file.path().display().to_string()]);
    }

    fn stack(&self) -> Value {
        serde_json::from_str(&self.kubectl(&["get", "stack", "data", "-o", "json"])).expect("json")
    }

    /// The Stack once `pred` holds of its status.
    fn until(&self, what: &str, timeout: Duration, pred: impl Fn(&Value) -> bool) -> Value {
        let start = Instant::now();
        loop {
            let s = self.stack();
            if pred(&s["status"]) {
                return s;
            }
            assert!(
                start.elapsed() < timeout,
                "timed out after {timeout:?} waiting until {what}; the Stack:\n{s:#}\nthe operator's log:\n{}",
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

fn condition<'a>(status: &'a Value, type_: &str) -> &'a Value {
    status["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
        .unwrap_or(&Value::Null)
}

fn is(status: &Value, type_: &str, value: &str) -> bool {
    condition(status, type_)["status"] == value
}

/// The stack the operator reconciles: the README's example.
fn data_stack() -> String {
    std::fs::read_to_string(manifest_dir().join("deploy/examples/data/stack.toml"))
        .expect("example stack")
}

struct Storage {
    url: String,
    token: String,
}

impl Storage {
    async fn labels(&self) -> Option<Value> {
        let r = reqwest::Client::new()
            .get(format!("{}/storage/storage/v1/b/ops-data-bucket", self.url))
            .bearer_auth(&self.token)
            .send()
            .await
            .expect("get bucket");
        if r.status() == 404 {
            return None;
        }
        let v: Value = r.json().await.expect("bucket");
        // terrain's own labels (managed-by, terrain-address) besides.
        Some(v["labels"]["team"].clone())
    }

    async fn relabel(&self, labels: Value) {
        reqwest::Client::new()
            .patch(format!("{}/storage/storage/v1/b/ops-data-bucket", self.url))
            .bearer_auth(&self.token)
            .json(&json!({ "labels": labels }))
            .send()
            .await
            .expect("patch bucket")
            .error_for_status()
            .expect("patched");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn operator_holds_plans_for_approval_by_digest_and_reports_and_corrects_drift() {
    let work = tempfile::tempdir().expect("temp dir");
    let dir = work.path().join("sandbox");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let (_serve, url) = serve(&dir, &work.path().join("serve.log"));
    let sandbox_dir = dir.display().to_string();

    // The cluster the operator runs against, made by the README's example stack in a
    // project as new as they come.
    let cluster_stack = work.path().join("cluster");
    std::fs::create_dir_all(&cluster_stack).expect("mkdir");
    std::fs::copy(
        manifest_dir().join("deploy/examples/cluster/stack.toml"),
        cluster_stack.join("stack.toml"),
    )
    .expect("copy");
    ok(
        terrain()
            .args([
                "apply",
                "--auto-approve",
                "--sandbox",
                "--sandbox-dir",
                &sandbox_dir,
                "-s",
            ])
            .arg(&cluster_stack)
            .current_dir(work.path()),
        "terrain apply (the cluster)",
    );
    let kubeconfig = wait(
        "the cluster's kubeconfig is written",
        Duration::from_secs(30),
        || {
            std::fs::read_dir(dir.join("kube"))
                .ok()?
                .filter_map(Result::ok)
                .map(|e| e.path())
                .find(|p| p.to_string_lossy().contains("ops"))
        },
    );
    let operator_log = work.path().join("operator.log");
    let k = Cluster {
        kubeconfig,
        log: operator_log.clone(),
    };
    k.kubectl(&[
        "apply",
        "-f",
        &manifest_dir().join("deploy/crd.yaml").display().to_string(),
    ]);
    k.kubectl(&[
        "wait",
        "--for",
        "condition=established",
        "crd/stacks.terrain.dev",
        "--timeout",
        "30s",
    ]);

    let _operator = Proc(
        terrain()
            .args([
                "operator",
                "--sandbox",
                "--sandbox-dir",
                &sandbox_dir,
                "--retry",
                "1s",
                "--work-dir",
            ])
            .arg(work.path().join("stacks"))
            .env("KUBECONFIG", &k.kubeconfig)
            .current_dir(work.path())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&operator_log).expect("log"))
            .spawn()
            .expect("terrain operator"),
    );
    let storage = Storage {
        url: url.clone(),
        token: std::fs::read_to_string(dir.join("access-token"))
            .expect("token")
            .trim()
            .to_string(),
    };

    k.apply(&json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "data-stack", "namespace": "default"},
        "data": {"stack.toml": data_stack()}}));
    k.apply(&json!({"apiVersion": "terrain.dev/v1alpha1", "kind": "Stack",
        "metadata": {"name": "data", "namespace": "default"},
        "spec": {"source": {"configMap": {"name": "data-stack"}}, "interval": "3s", "vars": {"team": "ml"}}}));

    // Manual: a plan waits, digest and all; nothing is made.
    let log = || std::fs::read_to_string(&operator_log).unwrap_or_default();
    let s = k.until("a plan is pending", Duration::from_secs(90), |st| {
        is(st, "PlanPending", "True")
    });
    let first = s["status"]["pendingPlan"]["digest"]
        .as_str()
        .expect("digest")
        .to_string();
    assert!(first.starts_with("sha256:") && first.len() == 71, "{first}");
    assert_eq!(s["status"]["pendingPlan"]["add"], 1, "{s:#}");
    assert_eq!(s["status"]["pendingPlan"]["disruptive"], false);
    assert!(
        s["status"]["pendingPlan"]["location"]
            .as_str()
            .expect("location")
            .starts_with("gs://ops-state/stacks/data/"),
        "{s:#}"
    );
    assert_eq!(
        storage.labels().await,
        None,
        "nothing is made before approval"
    );
    let shown = ok(
        terrain()
            .args([
                "stack",
                "show",
                "data",
                "--no-color",
                "--sandbox",
                "--sandbox-dir",
                &sandbox_dir,
            ])
            .env("KUBECONFIG", &k.kubeconfig),
        "terrain stack show",
    );
    assert!(
        shown.contains(&format!("Pending plan {first}")) && shown.contains("+ gcs_bucket.data"),
        "{shown}"
    );
    let listed = ok(
        terrain()
            .args(["stack", "list"])
            .env("KUBECONFIG", &k.kubeconfig),
        "terrain stack list",
    );
    assert!(
        listed.contains("data") && listed.contains("AwaitingApproval"),
        "{listed}"
    );

    // Approved, and a variable changed in the same edit: the approved plan is
    // superseded by the new one and not applied.
    k.kubectl(&[
        "patch",
        "stack",
        "data",
        "--type",
        "merge",
        "-p",
        &json!({"spec": {"approval": {"approvedPlan": first}, "vars": {"team": "research"}}})
            .to_string(),
    ]);
    let s = k.until(
        "the approval is superseded",
        Duration::from_secs(60),
        |st| condition(st, "PlanPending")["reason"] == "Superseded",
    );
    let second = s["status"]["pendingPlan"]["digest"]
        .as_str()
        .expect("digest")
        .to_string();
    assert_ne!(second, first);
    assert_eq!(
        storage.labels().await,
        None,
        "a superseded approval applies nothing"
    );

    // `terrain stack approve` approves exactly the pending plan.
    let approved = ok(
        terrain()
            .args(["stack", "approve", "data", &second])
            .env("KUBECONFIG", &k.kubeconfig),
        "terrain stack approve",
    );
    assert!(approved.contains(&second), "{approved}");
    let s = k.until(
        "the approved plan is applied",
        Duration::from_secs(60),
        |st| is(st, "Ready", "True"),
    );
    assert_eq!(s["status"]["lastAppliedDigest"], second.as_str());
    assert_eq!(s["status"]["outputs"]["bucket"], "ops-data-bucket");
    assert_eq!(storage.labels().await, Some(json!("research")));

    // A label changed outside the stack: drift, reported within an interval, not put back.
    storage.relabel(json!({"team": "someone-else"})).await;
    let changed = Instant::now();
    let s = k.until("drift is reported", Duration::from_secs(3 + 30), |st| {
        is(st, "Drifted", "True")
    });
    eprintln!("drift reported {:?} after the change", changed.elapsed());
    assert_eq!(
        s["status"]["drifted"],
        json!(["gcs_bucket.data.labels"]),
        "{s:#}"
    );
    assert_eq!(
        condition(&s["status"], "PlanPending")["reason"],
        "DriftAwaitingApproval"
    );
    assert_eq!(
        storage.labels().await,
        Some(json!("someone-else")),
        "Report does not correct"
    );

    // Correct under Auto: put back.
    k.kubectl(&[
        "patch",
        "stack",
        "data",
        "--type",
        "merge",
        "-p",
        &json!({"spec": {"approval": {"mode": "Auto"}, "drift": {"mode": "Correct"}}}).to_string(),
    ]);
    k.until("drift is corrected", Duration::from_secs(60), |st| {
        is(st, "Drifted", "False") && is(st, "Ready", "True")
    });
    assert_eq!(storage.labels().await, Some(json!("research")));

    let events = k.kubectl(&["get", "events.events.k8s.io", "-o", "json"]);
    let events: Value = serde_json::from_str(&events).expect("events");
    let reasons: Vec<&str> = events["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter(|e| e["regarding"]["kind"] == "Stack")
        .filter_map(|e| e["reason"].as_str())
        .collect();
    for r in [
        "PlanPending",
        "PlanSuperseded",
        "Applied",
        "DriftDetected",
        "DriftCorrected",
    ] {
        assert!(
            reasons.contains(&r),
            "no {r} Event among {reasons:?}\n{}",
            log()
        );
    }
}
