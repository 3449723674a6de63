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

pub(super) fn terrain() -> Command {
    Command::new(env!("CARGO_BIN_EXE_terrain"))
}

pub(super) fn ok(cmd: &mut Command, what: &str) -> String {
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
        9,
        "the CRD, namespace, service account, cluster role and binding, the Lease's role and binding, the Deployment and its disruption budget"
    );
    kubernetes_validate_strict(&files, "a deploy/ manifest");
}

/// A child process killed when dropped.
pub(super) struct Proc(pub(super) Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `terrain sandbox serve` in `dir`, once it answers; its URL.
pub(super) fn serve(dir: &Path, log: &Path) -> (Proc, String) {
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

pub(super) fn wait<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
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

pub(super) struct Cluster {
    pub(super) kubeconfig: PathBuf,
    /// The operator's log, shown when a wait times out.
    pub(super) log: PathBuf,
}

impl Cluster {
    pub(super) fn kubectl(&self, args: &[&str]) -> String {
        ok(
            Command::new("kubectl")
                .arg("--kubeconfig")
                .arg(&self.kubeconfig)
                .args(args),
            &format!("kubectl {}", args.join(" ")),
        )
    }

    pub(super) fn apply(&self, doc: &Value) {
        let file = tempfile::NamedTempFile::new().expect("temp");
        std::fs::write(file.path(), serde_json::to_string(doc).expect("json")).expect("write");
        self.kubectl(&["apply", "-f", &file.path().display().to_string()]);
    }

    fn stack(&self) -> Value {
        self.stack_named("data")
    }

    /// Approves `digest` for Stack `data`, as an edit of its spec.
    fn approve(&self, digest: &str) {
        let patch = json!({"spec": {"approval": {"approvedPlan": digest}}}).to_string();
        self.kubectl(&["patch", "stack", "data", "--type", "merge", "-p", &patch]);
    }

    pub(super) fn stack_named(&self, name: &str) -> Value {
        serde_json::from_str(&self.kubectl(&["get", "stack", name, "-o", "json"])).expect("json")
    }

    /// Stack `data` once `pred` holds of its status.
    fn until(&self, what: &str, timeout: Duration, pred: impl Fn(&Value) -> bool) -> Value {
        self.until_named("data", what, timeout, pred)
    }

    /// Stack `name` once `pred` holds of its status.
    pub(super) fn until_named(
        &self,
        name: &str,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        let start = Instant::now();
        loop {
            let s = self.stack_named(name);
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

pub(super) fn condition<'a>(status: &'a Value, type_: &str) -> &'a Value {
    status["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
        .unwrap_or(&Value::Null)
}

pub(super) fn is(status: &Value, type_: &str, value: &str) -> bool {
    condition(status, type_)["status"] == value
}

/// The stack the operator reconciles: the README's example.
pub(super) fn data_stack() -> String {
    std::fs::read_to_string(manifest_dir().join("deploy/examples/data/stack.toml"))
        .expect("example stack")
}

pub(super) struct Storage {
    pub(super) url: String,
    pub(super) token: String,
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

    async fn put_object(&self, bucket: &str, name: &str, body: &Value) {
        reqwest::Client::new()
            .post(format!(
                "{}/storage/upload/storage/v1/b/{bucket}/o",
                self.url
            ))
            .query(&[("uploadType", "media"), ("name", name)])
            .bearer_auth(&self.token)
            .body(body.to_string())
            .send()
            .await
            .expect("upload")
            .error_for_status()
            .expect("uploaded");
    }

    async fn delete_object(&self, bucket: &str, name: &str) {
        reqwest::Client::new()
            .delete(format!(
                "{}/storage/storage/v1/b/{bucket}/o/{}",
                self.url,
                name.replace('/', "%2F")
            ))
            .bearer_auth(&self.token)
            .send()
            .await
            .expect("delete")
            .error_for_status()
            .expect("deleted");
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

/// `terrain operator` against `k`'s cluster and the sandbox of `sandbox_dir`, its log
/// appended to `k.log`, with a 2s Lease: a restarted operator takes over 2s after the
/// one killed.
fn spawn_operator(work: &Path, sandbox_dir: &str, k: &Cluster) -> Proc {
    spawn_operator_with(work, sandbox_dir, k, &["--lease-duration", "2s"])
}

/// [`spawn_operator`] with `extra` arguments.
pub(super) fn spawn_operator_with(
    work: &Path,
    sandbox_dir: &str,
    k: &Cluster,
    extra: &[&str],
) -> Proc {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&k.log)
        .expect("log");
    Proc(
        terrain()
            .args([
                "operator",
                "--sandbox",
                "--sandbox-dir",
                sandbox_dir,
                "--retry",
                "1s",
                "--metrics-addr",
                "127.0.0.1:0",
                "--work-dir",
            ])
            .arg(work.join("stacks"))
            .args(extra)
            .env("KUBECONFIG", &k.kubeconfig)
            .current_dir(work)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("terrain operator"),
    )
}

/// A served sandbox with a GKE cluster made by the README's example stack (in a
/// project as new as they come), the Stack CRD applied, and `terrain operator` running
/// against it.
pub(super) struct Ops {
    pub(super) work: tempfile::TempDir,
    pub(super) sandbox_dir: String,
    pub(super) k: Cluster,
    pub(super) storage: Storage,
    operator: Option<Proc>,
    _serve: Proc,
}

impl Ops {
    fn start() -> Ops {
        let mut ops = Ops::bare();
        ops.operator = Some(spawn_operator(ops.work.path(), &ops.sandbox_dir, &ops.k));
        ops
    }

    /// The sandbox, the cluster and the CRD, and no operator yet.
    pub(super) fn bare() -> Ops {
        let work = tempfile::tempdir().expect("temp dir");
        let dir = work.path().join("sandbox");
        std::fs::create_dir_all(&dir).expect("mkdir");
        let (serve, url) = serve(&dir, &work.path().join("serve.log"));
        let sandbox_dir = dir.display().to_string();
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
        // `serve` writes it (through a temporary file and a rename) within a second.
        let kubeconfig = dir.join("kube/ops.kubeconfig");
        wait(
            "the cluster's kubeconfig is written",
            Duration::from_secs(30),
            || kubeconfig.exists().then_some(()),
        );
        let operator_log = work.path().join("operator.log");
        let k = Cluster {
            kubeconfig,
            log: operator_log.clone(),
        };
        let crd = manifest_dir().join("deploy/crd.yaml").display().to_string();
        k.kubectl(&["apply", "-f", &crd]);
        k.kubectl(&[
            "wait",
            "--for",
            "condition=established",
            "crd/stacks.terrain.dev",
            "--timeout",
            "30s",
        ]);
        let storage = Storage {
            url,
            token: std::fs::read_to_string(dir.join("access-token"))
                .expect("token")
                .trim()
                .to_string(),
        };
        Ops {
            work,
            sandbox_dir,
            k,
            storage,
            operator: None,
            _serve: serve,
        }
    }

    /// Kills the operator (SIGKILL, at whatever it is doing) and starts another.
    fn restart(&mut self) {
        self.operator = None;
        self.operator = Some(spawn_operator(self.work.path(), &self.sandbox_dir, &self.k));
    }

    /// `terrain ARGS` against the operator's cluster, from the work directory.
    pub(super) fn terrain(&self, args: &[&str]) -> String {
        ok(
            terrain()
                .args(args)
                .env("KUBECONFIG", &self.k.kubeconfig)
                .current_dir(self.work.path()),
            &format!("terrain {}", args.join(" ")),
        )
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn operator_holds_plans_for_approval_by_digest_and_reports_and_corrects_drift() {
    let ops = Ops::start();
    let (k, storage, sandbox_dir) = (&ops.k, &ops.storage, ops.sandbox_dir.clone());
    let operator_log = k.log.clone();

    // As a team would: `kubectl create` (which sends the ConfigMap as protobuf).
    let example = manifest_dir().join("deploy/examples/data/stack.toml");
    k.kubectl(&[
        "create",
        "configmap",
        "data-stack",
        &format!("--from-file=stack.toml={}", example.display()),
    ]);
    k.kubectl(&["create", "namespace", "team-a"]);
    k.kubectl(&["create", "serviceaccount", "runner", "-n", "team-a"]);
    let cm: Value =
        serde_json::from_str(&k.kubectl(&["get", "configmap", "data-stack", "-o", "json"]))
            .expect("json");
    assert_eq!(cm["data"]["stack.toml"], data_stack());
    let sa: Value = serde_json::from_str(&k.kubectl(&[
        "get",
        "serviceaccount",
        "runner",
        "-n",
        "team-a",
        "-o",
        "json",
    ]))
    .expect("json");
    assert_eq!(sa["metadata"]["namespace"], "team-a");
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
    let asked = Instant::now();
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
    eprintln!(
        "approved plan applied {:?} after the approval",
        asked.elapsed()
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
    // What Prometheus and the kubelet read, on the address the log names.
    let operator_lines = std::fs::read_to_string(&k.log).unwrap_or_default();
    let addr = operator_lines
        .lines()
        .find_map(|l| l.split("serving /metrics, /healthz and /readyz on ").nth(1))
        .map(|a| a.trim_end_matches("\"}").to_string())
        .expect("the log names the metrics address");
    let get = |path: &str| {
        let url = format!("http://{addr}{path}");
        async move {
            let r = reqwest::get(&url).await.expect("answered");
            (r.status().as_u16(), r.text().await.expect("text"))
        }
    };
    assert_eq!(get("/healthz").await.0, 200);
    assert_eq!(get("/readyz").await.0, 200);
    let (code, metrics) = get("/metrics").await;
    assert_eq!(code, 200);
    for line in [
        "terrain_operator_stacks{condition=\"Ready\",status=\"True\"} 1",
        "terrain_operator_drift_detected_total 1",
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "no {line:?} in\n{metrics}"
        );
    }
    let count = |name: &str| {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    assert!(
        count("terrain_operator_apply_duration_seconds_count") >= 2,
        "{metrics}"
    );
    assert!(
        count("terrain_operator_plan_duration_seconds_count") >= 4,
        "{metrics}"
    );
    if let Some(p) = &ops.operator {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", p.0.id())).unwrap_or_default();
        let peak = status
            .lines()
            .find(|l| l.starts_with("VmHWM"))
            .unwrap_or_default();
        eprintln!("operator peak memory: {peak}");
    }
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

fn git(dir: &Path, args: &[&str]) {
    ok(
        Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
            .args(args)
            .current_dir(dir),
        &format!("git {}", args.join(" ")),
    );
}

fn commit(repo: &Path, file: &str, text: &str) {
    let path = repo.join(file);
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(&path, text).expect("write");
    git(repo, &["add", "-A"]);
    git(repo, &["commit", "-qm", file]);
}

#[tokio::test(flavor = "multi_thread")]
async fn operator_reads_a_stack_from_git_and_plans_anew_only_when_its_files_change() {
    let ops = Ops::start();
    let (k, storage) = (&ops.k, &ops.storage);
    let repo = ops.work.path().join("repo");
    std::fs::create_dir_all(&repo).expect("mkdir");
    git(&repo, &["init", "-q", "-b", "main"]);
    commit(&repo, "stacks/data/stack.toml", &data_stack());
    commit(&repo, "README.md", "the team's stacks\n");
    k.apply(&json!({"apiVersion": "terrain.dev/v1alpha1", "kind": "Stack",
        "metadata": {"name": "data", "namespace": "default"},
        "spec": {"source": {"git": {"url": format!("file://{}", repo.display()), "ref": "main", "path": "stacks/data"}},
                 "interval": "2s", "approval": {"mode": "AutoIfNonDisruptive"}}}));
    let s = k.until("the first plan is applied", Duration::from_secs(60), |st| {
        is(st, "Ready", "True")
    });
    let first = s["status"]["lastAppliedDigest"]
        .as_str()
        .expect("applied")
        .to_string();
    assert_eq!(storage.labels().await, Some(json!("ml")));

    // A commit changing the stack: planned at the next interval and, adding and
    // changing only, applied.
    commit(
        &repo,
        "stacks/data/stack.toml",
        &data_stack().replace("default = \"ml\"", "default = \"platform\""),
    );
    let s = k.until("the commit is applied", Duration::from_secs(60), |st| {
        st["lastAppliedDigest"].as_str().is_some_and(|d| d != first) && is(st, "Ready", "True")
    });
    let second = s["status"]["lastAppliedDigest"]
        .as_str()
        .expect("applied")
        .to_string();
    assert_eq!(storage.labels().await, Some(json!("platform")));

    // A commit outside the stack's path: the same inputs, so nothing new to approve.
    commit(&repo, "README.md", "the team's stacks, described\n");
    let shown = ops.terrain(&[
        "stack",
        "plan",
        "data",
        "--no-color",
        "--sandbox",
        "--sandbox-dir",
        &ops.sandbox_dir,
    ]);
    assert!(
        shown.contains("No plan is pending.")
            && shown.contains(&format!("Last applied:  {second}")),
        "{shown}"
    );
    assert!(
        shown.contains(&format!(
            "Source:        file://{} at main stacks/data",
            repo.display()
        )),
        "{shown}"
    );

    // Shrinking is disruptive: a commit that destroys the bucket waits for approval.
    commit(&repo, "stacks/data/stack.toml", "[stack]\nname = \"data\"\n\n[providers.gcp]\nproject = \"ops-project\"\nregion  = \"us-central1\"\n\n[backend.gcs]\nbucket = \"ops-state\"\nprefix = \"stacks/data\"\n");
    let s = k.until("the destroy waits", Duration::from_secs(60), |st| {
        is(st, "PlanPending", "True")
    });
    assert_eq!(s["status"]["pendingPlan"]["disruptive"], true);
    assert_eq!(
        s["status"]["pendingPlan"]["disruptions"],
        json!(["gcs_bucket.data: destroyed"])
    );
    assert_eq!(
        storage.labels().await,
        Some(json!("platform")),
        "nothing destroyed unapproved"
    );

    // Suspended: nothing is planned or applied until it is unset, and the status says so.
    k.kubectl(&[
        "patch",
        "stack",
        "data",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"suspend":true}}"#,
    ]);
    let s = k.until("suspended", Duration::from_secs(30), |st| {
        condition(st, "Reconciling")["reason"] == "Suspended"
    });
    let planned = s["status"]["lastPlanned"].clone();
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        k.stack()["status"]["lastPlanned"],
        planned,
        "a suspended Stack is not planned"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn operator_keeps_secrets_out_refuses_local_state_and_destroys_only_once_approved() {
    let ops = Ops::start();
    let (k, storage) = (&ops.k, &ops.storage);
    const SECRET: &str = "tok-5ecre7-value-991";
    let stack = format!(
        "{}\n[variables.owner]\nsensitive = true\n",
        data_stack().replace(
            "labels   = { team = \"${var.team}\" }",
            "labels   = { team = \"${var.team}\", owner = \"${var.owner}\" }"
        )
    );
    k.apply(&json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "data-stack", "namespace": "default"}, "data": {"stack.toml": stack}}));
    k.kubectl(&[
        "create",
        "secret",
        "generic",
        "data-secrets",
        &format!("--from-literal=owner={SECRET}"),
    ]);
    k.apply(&json!({"apiVersion": "terrain.dev/v1alpha1", "kind": "Stack",
        "metadata": {"name": "data", "namespace": "default"},
        "spec": {"source": {"configMap": {"name": "data-stack"}}, "interval": "2s",
                 "varsFrom": [{"secretRef": {"name": "data-secrets"}}], "deletionPolicy": "Destroy"}}));
    // A stack whose state would be on the pod's disk is refused, saying why.
    k.apply(&json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "local-stack", "namespace": "default"},
        "data": {"stack.toml": "[stack]\nname = \"local\"\n\n[providers.gcp]\nproject = \"ops-project\"\n\n[gcs_bucket.b]\nname = \"ops-local-bucket\"\nlocation = \"us-central1\"\n"}}));
    k.apply(
        &json!({"apiVersion": "terrain.dev/v1alpha1", "kind": "Stack",
        "metadata": {"name": "local", "namespace": "default"},
        "spec": {"source": {"configMap": {"name": "local-stack"}}, "interval": "2s"}}),
    );
    let s = k.until_named(
        "local",
        "the local state is refused",
        Duration::from_secs(60),
        |st| is(st, "Stalled", "True"),
    );
    let message = condition(&s["status"], "Stalled")["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        message.contains("local file") && message.contains("S3 or GCS"),
        "{message}"
    );

    let s = k.until("a plan is pending", Duration::from_secs(60), |st| {
        is(st, "PlanPending", "True")
    });
    let digest = s["status"]["pendingPlan"]["digest"]
        .as_str()
        .expect("digest")
        .to_string();
    // Someone else holds the state lock: the approved plan waits, the status naming
    // the holder, and is applied once the lock is released.
    let lock = "stacks/data/default.json.lock";
    storage
        .put_object("ops-state", lock, &json!({"id": "0b9f7c1e-2222-4333-8444-a55566667777",
            "who": "ci@runner-9", "pid": 77, "operation": "apply", "created": "2026-11-29T06:00:00Z"}))
        .await;
    ops.terrain(&["stack", "approve", "data", &digest]);
    let s = k.until("the lock is reported", Duration::from_secs(60), |st| {
        is(st, "Locked", "True")
    });
    let held = condition(&s["status"], "Locked")["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        held.contains("ci@runner-9 (pid 77) for `apply`")
            && held.contains("0b9f7c1e-2222-4333-8444-a55566667777"),
        "{held}"
    );
    assert_eq!(storage.labels().await, None, "nothing applied while locked");
    storage.delete_object("ops-state", lock).await;
    k.until("applied", Duration::from_secs(60), |st| {
        is(st, "Ready", "True") && is(st, "Locked", "False")
    });
    assert_eq!(storage.labels().await, Some(json!("ml")));

    // Deleting the Stack makes a destroy plan that waits; the Stack stays meanwhile.
    k.kubectl(&["delete", "stack", "data", "--wait=false"]);
    let s = k.until("the destroy plan waits", Duration::from_secs(60), |st| {
        condition(st, "PlanPending")["reason"] == "DestroyAwaitingApproval"
    });
    assert_eq!(s["status"]["pendingPlan"]["destroyAll"], true);
    assert_eq!(s["status"]["pendingPlan"]["destroy"], 1);
    assert_eq!(
        storage.labels().await,
        Some(json!("ml")),
        "nothing destroyed unapproved"
    );
    let shown = ops.terrain(&[
        "stack",
        "show",
        "data",
        "--no-color",
        "--sandbox",
        "--sandbox-dir",
        &ops.sandbox_dir,
    ]);
    assert!(
        shown.contains("(destroy)") && shown.contains("- gcs_bucket.data will be destroyed"),
        "{shown}"
    );
    let approved = ops.terrain(&["stack", "approve", "data"]);
    assert!(approved.contains("to destroy"), "{approved}");
    wait("the Stack is gone", Duration::from_secs(60), || {
        let out = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&k.kubeconfig)
            .args(["get", "stack", "data", "--ignore-not-found", "-o", "name"])
            .output()
            .ok()?;
        out.stdout.is_empty().then_some(())
    });
    assert_eq!(storage.labels().await, None, "destroyed once approved");

    // The Secret's value is nowhere the operator writes or shows.
    let events = k.kubectl(&["get", "events.events.k8s.io", "-o", "json"]);
    let everything = format!(
        "{shown}\n{events}\n{}\n{}",
        k.kubectl(&["get", "stacks", "-o", "json"]),
        std::fs::read_to_string(&k.log).unwrap_or_default()
    );
    assert!(
        !everything.contains(SECRET),
        "the secret leaked:\n{everything}"
    );
}

/// The random steps of a long trial, from `TERRAIN_TEST_SEED` (printed, so a failing
/// run can be repeated) or a new seed.
pub(super) fn seeded_rng() -> (u64, rand::rngs::StdRng) {
    use rand::SeedableRng;
    let seed: u64 = std::env::var("TERRAIN_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!("seed {seed} (TERRAIN_TEST_SEED={seed} repeats this run)");
    (seed, rand::rngs::StdRng::seed_from_u64(seed))
}

/// How many times the operator says it applied each digest (its `Applied` Events).
pub(super) fn applied(k: &Cluster) -> std::collections::BTreeMap<String, u64> {
    let events: Value =
        serde_json::from_str(&k.kubectl(&["get", "events.events.k8s.io", "-o", "json"]))
            .expect("events");
    let mut out = std::collections::BTreeMap::new();
    for e in events["items"].as_array().expect("items") {
        if e["regarding"]["kind"] != "Stack" || e["reason"] != "Applied" {
            continue;
        }
        let note = e["note"].as_str().unwrap_or_default();
        let digest = note
            .strip_prefix("applied ")
            .and_then(|n| n.split(' ').next())
            .unwrap_or(note);
        *out.entry(digest.to_string()).or_default() += e["series"]["count"].as_u64().unwrap_or(1);
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "long: 200 random interleavings of commits, approvals (current and stale), drift and operator SIGKILLs against one Stack (about 3 minutes)"]
async fn operator_never_applies_an_unapproved_or_superseded_digest() {
    use rand::Rng;
    let (seed, mut rng) = seeded_rng();
    let mut ops = Ops::start();
    let teams = ["ml", "research", "platform", "infra"];
    let configmap = |team: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "data-stack", "namespace": "default"},
        "data": {"stack.toml": data_stack().replace("default = \"ml\"", &format!("default = \"{team}\""))}})
    };
    ops.k.apply(&configmap("ml"));
    ops.k.apply(
        &json!({"apiVersion": "terrain.dev/v1alpha1", "kind": "Stack",
        "metadata": {"name": "data", "namespace": "default"},
        "spec": {"source": {"configMap": {"name": "data-stack"}}, "interval": "1s"}}),
    );
    // Every digest the test approved, and every one it saw pending.
    let mut approved: std::collections::BTreeSet<String> = Default::default();
    let mut seen: Vec<String> = Vec::new();
    let mut steps = std::collections::BTreeMap::<&str, u32>::new();
    for _ in 0..200 {
        let pending = ops.k.stack()["status"]["pendingPlan"]["digest"]
            .as_str()
            .map(str::to_string);
        if let Some(d) = &pending {
            if !seen.contains(d) {
                seen.push(d.clone());
            }
        }
        let step = match rng.random_range(0..100) {
            0..25 => "commit",
            25..50 => "approve",
            50..65 => "approve-stale",
            65..80 => "drift",
            80..90 => "restart",
            _ => "wait",
        };
        *steps.entry(step).or_default() += 1;
        match step {
            "commit" => ops
                .k
                .apply(&configmap(teams[rng.random_range(0..teams.len())])),
            "approve" | "approve-stale" => {
                let digest = if step == "approve" {
                    pending.clone()
                } else {
                    (!seen.is_empty()).then(|| seen[rng.random_range(0..seen.len())].clone())
                };
                if let Some(d) = digest {
                    approved.insert(d.clone());
                    ops.k.approve(&d);
                }
            }
            "drift" => {
                if ops.storage.labels().await.is_some() {
                    ops.storage
                        .relabel(json!({"team": format!("hand-{}", rng.random_range(0..3))}))
                        .await;
                }
            }
            "restart" => ops.restart(),
            _ => std::thread::sleep(Duration::from_millis(rng.random_range(0..1500))),
        }
        std::thread::sleep(Duration::from_millis(rng.random_range(0..300)));
    }
    eprintln!(
        "steps: {steps:?}; {} digests seen pending, {} approved",
        seen.len(),
        approved.len()
    );
    let done = applied(&ops.k);
    for (digest, times) in &done {
        assert!(
            approved.contains(digest),
            "applied {digest}, which was never approved (seed {seed})"
        );
        let log = std::fs::read_to_string(&ops.k.log).unwrap_or_default();
        let failures: Vec<&str> = log.lines().filter(|l| l.contains("\"error\"")).collect();
        assert_eq!(
            *times,
            1,
            "applied {digest} {times} times (seed {seed}); the operator's errors:\n{}",
            failures.join("\n")
        );
    }
    // Settled: approving whatever is pending (the last commit's plan, or the one
    // putting drift back) brings the bucket to what the stack says.
    let team = teams[rng.random_range(0..teams.len())];
    ops.k.apply(&configmap(team));
    let start = Instant::now();
    loop {
        let s = ops.k.stack();
        let st = &s["status"];
        if is(st, "Ready", "True") && ops.storage.labels().await == Some(json!(team)) {
            break;
        }
        if let Some(d) = st["pendingPlan"]["digest"].as_str() {
            if s["spec"]["approval"]["approvedPlan"].as_str() != Some(d) {
                ops.k.approve(d);
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "never settled (seed {seed}):\n{s:#}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    eprintln!(
        "{} plans applied, each approved by digest, none twice",
        done.len()
    );
}
