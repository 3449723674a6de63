//! The operator under faults and at scale, on the sandbox with the real binaries (long
//! tier): two replicas and the leader SIGKILLed (the other takes over within 20s of a
//! 15s Lease, and nothing is applied twice); 50 SIGKILLs of the leader during applies
//! (no state lost, no bucket duplicated or orphaned, no state lock left longer than the
//! Lease and one renewal); 100 Stacks on one operator (a restart replans none of those
//! planned within their interval, never more runs at once than `--max-runs`, and the
//! process stays under 300 MiB).

use std::collections::{BTreeMap, BTreeSet};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::operator::{applied, is, terrain, wait, Ops, Proc};

/// One `terrain operator` process.
struct Operator {
    proc: Proc,
    /// `http://127.0.0.1:PORT`, its metrics.
    metrics: String,
}

impl Operator {
    fn pid(&self) -> u32 {
        self.proc.0.id()
    }

    /// Its peak resident memory so far, in MiB (`VmHWM`).
    fn peak_mib(&self) -> f64 {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map(|kb| kb / 1024.0)
            .unwrap_or_default()
    }

    /// The value of metric `name` (a line `NAME VALUE`), once it serves.
    async fn metric(&self, name: &str) -> f64 {
        let start = Instant::now();
        loop {
            if let Ok(r) = reqwest::get(format!("{}/metrics", self.metrics)).await {
                let text = r.text().await.unwrap_or_default();
                if let Some(v) = text
                    .lines()
                    .find_map(|l| l.strip_prefix(&format!("{name} ")))
                    .and_then(|v| v.parse().ok())
                {
                    return v;
                }
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "no metric {name} at {}",
                self.metrics
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// A free local port.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// `terrain operator` as pod `pod` with `extra` arguments, its log appended to the
/// cluster's.
fn spawn(ops: &Ops, pod: &str, extra: &[&str]) -> Operator {
    let port = free_port();
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&ops.k.log)
        .expect("log");
    let child = terrain()
        .args(["operator", "--sandbox", "--sandbox-dir", &ops.sandbox_dir])
        .args([
            "--retry",
            "1s",
            "--metrics-addr",
            &format!("127.0.0.1:{port}"),
        ])
        .arg("--work-dir")
        .arg(ops.work.path().join(format!("stacks-{pod}")))
        .args(extra)
        .env("KUBECONFIG", &ops.k.kubeconfig)
        .env("POD_NAME", pod)
        .current_dir(ops.work.path())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("terrain operator");
    Operator {
        proc: Proc(child),
        metrics: format!("http://127.0.0.1:{port}"),
    }
}

/// The pod holding the operator's Lease (`default/terrain-operator`), if any.
fn lease_holder(ops: &Ops) -> Option<String> {
    let out = std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&ops.k.kubeconfig)
        .args(["get", "lease", "terrain-operator", "-o", "json"])
        .output()
        .ok()?;
    let v: Value = serde_json::from_slice(&out.stdout).ok()?;
    let holder = v["spec"]["holderIdentity"].as_str()?;
    holder.rsplit_once('_').map(|(pod, _)| pod.to_string())
}

fn until_leader(ops: &Ops, pod: &str, timeout: Duration) {
    wait(&format!("{pod} holds the Lease"), timeout, || {
        (lease_holder(ops).as_deref() == Some(pod)).then_some(())
    });
}

/// A stack of `n` buckets labelled `team`, its state in `ops-state` under `prefix`.
fn fleet_stack(prefix: &str, bucket: &str) -> String {
    format!(
        r#"[stack]
name = "fleet"

[variables.n]
default = 1

[variables.team]
default = "ml"

[providers.gcp]
project = "ops-project"
region  = "us-central1"

[backend.gcs]
bucket = "ops-state"
prefix = "{prefix}"

[gcs_bucket.data]
count    = "${{var.n}}"
name     = "{bucket}-${{count.index}}"
location = "us-central1"
labels   = {{ team = "${{var.team}}" }}
"#
    )
}

fn configmap(name: &str, stack: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default"},
        "data": {"stack.toml": stack}})
}

fn stack_resource(name: &str, configmap: &str, vars: Value, backend_prefix: Option<&str>) -> Value {
    let mut spec = json!({
        "source": {"configMap": {"name": configmap}},
        "interval": "1h",
        "approval": {"mode": "Auto"},
        "drift": {"mode": "Correct"},
        "vars": vars,
    });
    if let Some(prefix) = backend_prefix {
        spec["backend"] = json!({"gcs": {"bucket": "ops-state", "prefix": prefix}});
    }
    json!({"apiVersion": "terrain.dev/v1alpha1", "kind": "Stack",
        "metadata": {"name": name, "namespace": "default"}, "spec": spec})
}

impl super::operator::Storage {
    async fn get(&self, path: &str) -> reqwest::Response {
        reqwest::Client::new()
            .get(format!("{}/storage/storage/v1/{path}", self.url))
            .bearer_auth(&self.token)
            .send()
            .await
            .expect("storage request")
    }

    /// Whether object `name` of bucket `ops-state` exists.
    async fn state_object(&self, name: &str) -> Option<Value> {
        let r = self
            .get(&format!(
                "b/ops-state/o/{}?alt=media",
                name.replace('/', "%2F")
            ))
            .await;
        if r.status() == 404 {
            return None;
        }
        Some(r.json().await.expect("object"))
    }

    /// The project's buckets whose names start with `prefix`.
    async fn buckets(&self, prefix: &str) -> BTreeSet<String> {
        let v: Value = self
            .get(&format!(
                "b?project=ops-project&prefix={prefix}&maxResults=1000"
            ))
            .await
            .json()
            .await
            .expect("buckets");
        v["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|b| b["name"].as_str().map(str::to_string))
            .collect()
    }
}

/// Waits until Stack `fleet` has applied its spec as it is now: its status is of the
/// current generation (not one a killed replica wrote before the change), and what was
/// planned from it is applied.
fn until_converged(ops: &Ops, what: &str, timeout: Duration) {
    let generation = ops.k.stack_named("fleet")["metadata"]["generation"].clone();
    ops.k.until_named("fleet", what, timeout, |s| {
        s["observedGeneration"] == generation
            && is(s, "Ready", "True")
            && is(s, "Reconciling", "False")
            && s["lastAppliedInputs"] == s["plannedInputs"]
    });
}

/// Every digest was applied once at most.
fn applied_once(ops: &Ops) -> usize {
    let applied = applied(&ops.k);
    let twice: BTreeMap<_, _> = applied.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "applied more than once: {twice:?}");
    applied.len()
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "long: two operators with a 15s Lease, the leader SIGKILLed (about 20 seconds)"]
async fn a_standby_operator_takes_over_within_20s_of_the_leaders_sigkill_and_applies_nothing_twice()
{
    let ops = Ops::bare();
    let lease = ["--lease-duration", "15s"];
    let a = spawn(&ops, "operator-a", &lease);
    until_leader(&ops, "operator-a", Duration::from_secs(30));
    let b = spawn(&ops, "operator-b", &lease);
    assert_eq!(a.metric("terrain_operator_leader").await, 1.0);
    assert_eq!(b.metric("terrain_operator_leader").await, 0.0);
    // The standby answers its probes: ready once it could list the Stacks.
    let t = Instant::now();
    loop {
        let ready = reqwest::get(format!("{}/readyz", b.metrics))
            .await
            .expect("readyz");
        if ready.status() == 200 {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the standby is not ready after 30s: {}",
            ready.status()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    ops.k.apply(&configmap(
        "fleet",
        &fleet_stack("stacks/fleet", "ops-fleet"),
    ));
    ops.k.apply(&stack_resource(
        "fleet",
        "fleet",
        json!({"n": "2", "team": "ml"}),
        None,
    ));
    ops.k
        .until_named("fleet", "2 buckets applied", Duration::from_secs(60), |s| {
            is(s, "Ready", "True")
        });
    assert_eq!(
        ops.storage.buckets("ops-fleet-").await,
        BTreeSet::from(["ops-fleet-0".to_string(), "ops-fleet-1".to_string()])
    );

    // A change, and the leader killed while it plans or applies it.
    ops.k.apply(&stack_resource(
        "fleet",
        "fleet",
        json!({"n": "4", "team": "research"}),
        None,
    ));
    tokio::time::sleep(Duration::from_millis(rand::random_range(0..600))).await;
    drop(a);
    let killed = Instant::now();
    // The standby never takes over before the Lease could have expired.
    tokio::time::sleep(Duration::from_secs(9)).await;
    assert_eq!(lease_holder(&ops).as_deref(), Some("operator-a"));
    until_leader(&ops, "operator-b", Duration::from_secs(25));
    let took = killed.elapsed();
    eprintln!(
        "takeover {:.1}s after the leader's SIGKILL (15s Lease)",
        took.as_secs_f64()
    );
    assert!(took < Duration::from_secs(20), "took over after {took:?}");
    assert_eq!(b.metric("terrain_operator_leader").await, 1.0);

    until_converged(
        &ops,
        "the change applied by the new leader",
        Duration::from_secs(60),
    );
    assert_eq!(
        ops.storage.buckets("ops-fleet-").await,
        (0..4)
            .map(|i| format!("ops-fleet-{i}"))
            .collect::<BTreeSet<_>>()
    );
    assert_eq!(
        ops.storage
            .state_object("stacks/fleet/default.json.lock")
            .await,
        None
    );
    let digests = applied_once(&ops);
    eprintln!("{digests} digests applied, each once");

    // Stopped as the kubelet stops a pod (SIGTERM), the leader hands the Lease back:
    // the next replica takes over at once, not a Lease duration later.
    let c = spawn(&ops, "operator-c", &lease);
    assert_eq!(c.metric("terrain_operator_leader").await, 0.0);
    let term = std::process::Command::new("kill")
        .args(["-TERM", &b.pid().to_string()])
        .status()
        .expect("kill -TERM");
    assert!(term.success());
    let stopped = Instant::now();
    until_leader(&ops, "operator-c", Duration::from_secs(10));
    let handover = stopped.elapsed();
    eprintln!(
        "after SIGTERM, the Lease handed over in {:.1}s",
        handover.as_secs_f64()
    );
    assert!(handover < Duration::from_secs(5), "{handover:?}");
    drop(b);
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "long: 50 SIGKILLs of the leading operator during applies, with a standby (about 7 minutes)"]
async fn fifty_sigkills_during_applies_lose_no_state_duplicate_nothing_and_leave_no_lock_past_the_lease(
) {
    use rand::Rng;
    let (_, mut rng) = super::operator::seeded_rng();
    // A 6s Lease: its holder renews every 2s.
    let (duration, renewal) = (Duration::from_secs(6), Duration::from_secs(2));
    let lease = ["--lease-duration", "6s"];
    let ops = Ops::bare();
    let mut pods: BTreeMap<String, Operator> = BTreeMap::new();
    pods.insert("operator-0".into(), spawn(&ops, "operator-0", &lease));
    until_leader(&ops, "operator-0", Duration::from_secs(30));
    pods.insert("operator-1".into(), spawn(&ops, "operator-1", &lease));
    ops.k.apply(&configmap(
        "fleet",
        &fleet_stack("stacks/fleet", "ops-kill"),
    ));
    let lock = "stacks/fleet/default.json.lock";
    let mut n = 3;
    let mut team = "ml".to_string();
    ops.k.apply(&stack_resource(
        "fleet",
        "fleet",
        json!({"n": n.to_string(), "team": team}),
        None,
    ));
    // Kills that landed while the leader held the state lock for an apply, and the
    // changes pushed for them (an apply that ends before its moment is not killed).
    let (mut kills, mut changes) = (0, 0);
    let mut lock_left: Vec<f64> = Vec::new();
    let mut spawned = 2;
    let started = Instant::now();
    while kills < 50 {
        changes += 1;
        assert!(changes <= 300, "only {kills} kills landed in 300 applies");
        // A new change: more or fewer buckets, and another label.
        n = loop {
            let m = rng.random_range(1..=6);
            if m != n {
                break m;
            }
        };
        // A label never used before, so the change always has something to apply
        // (the live objects may be as a change before the last left them).
        team = format!("change-{changes}");
        ops.k.apply(&stack_resource(
            "fleet",
            "fleet",
            json!({"n": n.to_string(), "team": team}),
            None,
        ));
        // Its apply starts (the lock appears); the leader is killed at a random
        // moment of it.
        let seen = Instant::now();
        while ops.storage.state_object(lock).await.is_none() {
            assert!(
                seen.elapsed() < Duration::from_secs(30),
                "change {changes}: no apply took the lock in 30s; the log:\n{}",
                std::fs::read_to_string(&ops.k.log).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..60))).await;
        if ops.storage.state_object(lock).await.is_none() {
            continue;
        }
        let leader = lease_holder(&ops).expect("a leader");
        drop(pods.remove(&leader).expect("the leader is ours"));
        let killed = Instant::now();
        let held = ops.storage.state_object(lock).await;
        let pod = format!("operator-{spawned}");
        spawned += 1;
        pods.insert(pod.clone(), spawn(&ops, &pod, &lease));
        // The apply may have ended in the moment between the look and the kill.
        let Some(holder) = held else { continue };
        kills += 1;
        // The lock names the Lease it was taken under.
        assert_eq!(
            holder["lease"]["holder"]
                .as_str()
                .map(|h| h.starts_with(&format!("{leader}_"))),
            Some(true),
            "kill {kills}: the lock does not name the leader's Lease: {holder}"
        );
        while ops.storage.state_object(lock).await.is_some() {
            assert!(
                killed.elapsed() < Duration::from_secs(60),
                "kill {kills}: the lock of {leader} is still there after a minute"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let left = killed.elapsed();
        lock_left.push(left.as_secs_f64());
        assert!(
            left <= duration + renewal,
            "kill {kills}: the dead leader's lock was left {left:?} (Lease {duration:?}, renewal {renewal:?}); the log:\n{}",
            std::fs::read_to_string(&ops.k.log).unwrap_or_default()
        );
    }
    let took = started.elapsed();
    // The last change converges.
    until_converged(&ops, "the last change applied", Duration::from_secs(120));
    let want: BTreeSet<String> = (0..n).map(|i| format!("ops-kill-{i}")).collect();
    assert_eq!(
        ops.storage.buckets("ops-kill-").await,
        want,
        "buckets made but not in the desired set (orphans) or missing"
    );
    // The state holds exactly those buckets, each once.
    let dir = ops.work.path().join("fleet");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(
        dir.join("stack.toml"),
        fleet_stack("stacks/fleet", "ops-kill"),
    )
    .expect("write");
    let list = ops.terrain(&[
        "state",
        "list",
        "--sandbox",
        "--sandbox-dir",
        &ops.sandbox_dir,
        "-s",
        &dir.display().to_string(),
    ]);
    let listed: Vec<&str> = list
        .lines()
        .filter(|l| l.starts_with("gcs_bucket."))
        .collect();
    assert_eq!(
        listed,
        (0..n)
            .map(|i| format!("gcs_bucket.data[{i}]"))
            .collect::<Vec<_>>(),
        "{list}"
    );
    let labels: BTreeSet<String> = {
        let mut out = BTreeSet::new();
        for b in &want {
            let v: Value = ops
                .storage
                .get(&format!("b/{b}"))
                .await
                .json()
                .await
                .expect("bucket");
            out.insert(v["labels"]["team"].as_str().unwrap_or_default().to_string());
        }
        out
    };
    assert_eq!(labels, BTreeSet::from([team.clone()]));
    assert_eq!(ops.storage.state_object(lock).await, None);
    let digests = applied_once(&ops);
    let worst = lock_left.iter().copied().fold(0.0, f64::max);
    let mean = lock_left.iter().sum::<f64>() / lock_left.len().max(1) as f64;
    eprintln!(
        "50 kills during applies ({changes} changes) in {:.0}s; the dead leader's lock left after the kill: mean {mean:.1}s, worst {worst:.1}s (bound {:.0}s); {digests} digests applied, each once",
        took.as_secs_f64(),
        (duration + renewal).as_secs_f64()
    );
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "long: 100 Stacks on one operator, restarted (about 4 minutes)"]
async fn a_hundred_stacks_restart_with_no_replan_storm_within_the_run_limit_under_300_mib() {
    let ops = Ops::bare();
    let limit = 4;
    let args = ["--lease-duration", "2s", "--max-runs", "4"];
    let first = spawn(&ops, "operator-a", &args);
    until_leader(&ops, "operator-a", Duration::from_secs(30));
    // Each its own bucket (ops-sNNN-0) and state.
    let stacks = |team: &str| -> Vec<Value> {
        (0..100)
            .map(|i| {
                stack_resource(
                    &format!("s{i:03}"),
                    &format!("fleet-{i:03}"),
                    json!({"n": "1", "team": team}),
                    Some(&format!("stacks/s{i:03}")),
                )
            })
            .collect()
    };
    let maps: Vec<Value> = (0..100)
        .map(|i| {
            configmap(
                &format!("fleet-{i:03}"),
                &fleet_stack("unused", &format!("ops-s{i:03}")),
            )
        })
        .collect();
    // One file of many JSON documents, one after the other.
    let apply_all = |docs: Vec<Value>| {
        let file = tempfile::NamedTempFile::new().expect("temp");
        let text: Vec<String> = docs.iter().map(|d| d.to_string()).collect();
        std::fs::write(file.path(), text.join("\n")).expect("write");
        ops.k
            .kubectl(&["apply", "-f", &file.path().display().to_string()]);
    };
    apply_all(maps);
    let start = Instant::now();
    apply_all(stacks("ml"));
    let all_ready = |what: &str, pred: &dyn Fn(&Value) -> bool| {
        let t = Instant::now();
        loop {
            let v: Value = serde_json::from_str(&ops.k.kubectl(&["get", "stacks", "-o", "json"]))
                .expect("stacks");
            let n = v["items"]
                .as_array()
                .expect("items")
                .iter()
                .filter(|s| pred(&s["status"]))
                .count();
            if n == 100 {
                return;
            }
            assert!(
                t.elapsed() < Duration::from_secs(600),
                "{n} of 100 Stacks {what} after 10 minutes; the log:\n{}",
                std::fs::read_to_string(&ops.k.log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_secs(1));
        }
    };
    all_ready("applied", &|s| is(s, "Ready", "True"));
    let first_pass = start.elapsed();
    let most = first.metric("terrain_operator_runs_in_flight_max").await;
    assert_eq!(most, f64::from(limit), "runs at once, with 100 Stacks due");
    let peak_first = first.peak_mib();
    assert_eq!(ops.storage.buckets("ops-s").await.len(), 100);

    // Restarted: every Stack was planned within its interval; none is planned again.
    drop(first);
    let second = spawn(&ops, "operator-b", &args);
    until_leader(&ops, "operator-b", Duration::from_secs(30));
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(10) {
        assert_eq!(
            second
                .metric("terrain_operator_plan_duration_seconds_count")
                .await
                + second.metric("terrain_operator_plans_failed_total").await,
            0.0,
            "the restarted operator replanned Stacks planned within their interval"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // A change of every Stack: all due at once, planned `--max-runs` at a time.
    let before: Vec<Value> = {
        let v: Value =
            serde_json::from_str(&ops.k.kubectl(&["get", "stacks", "-o", "json"])).expect("stacks");
        v["items"]
            .as_array()
            .expect("items")
            .iter()
            .map(|s| s["status"]["lastAppliedInputs"].clone())
            .collect()
    };
    assert_eq!(before.len(), 100);
    let restart = Instant::now();
    apply_all(stacks("research"));
    all_ready("applied the change", &|s| {
        is(s, "Ready", "True") && !before.contains(&s["lastAppliedInputs"])
    });
    let second_pass = restart.elapsed();
    let most = second.metric("terrain_operator_runs_in_flight_max").await;
    assert_eq!(
        most,
        f64::from(limit),
        "runs at once, with 100 Stacks due after a restart"
    );
    let peak = second.peak_mib().max(peak_first);
    eprintln!(
        "100 Stacks: first applied in {:.0}s, a change to all in {:.0}s, {limit} runs at once at most; operator peak {peak:.0} MiB",
        first_pass.as_secs_f64(),
        second_pass.as_secs_f64()
    );
    assert!(peak < 300.0, "the operator reached {peak:.0} MiB");
}
