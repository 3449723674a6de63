//! The kubelet of every node: a bound pod's containers are pulled, created and started,
//! Redis containers wait for their real redis-server, the batch-ML worker drains its queue
//! ([`super::workers`]), other job-like containers run for a while and exit (failing when the pod's sandbox annotations say so, restarting in place under
//! `OnFailure`), deleted pods stop after a grace period, pods of vanished nodes fail, and a
//! spot reclaim terminates everything on a node.

use chrono::{DateTime, Duration, Utc};
use serde_json::{json, Value};

use super::events::{self, Event, Involved};
use super::images::{is_redis_image, is_redis_pod, normalize_image};
use super::nodes::{self, Shape};
use super::workers::{self, is_queue_worker, Drain};
use super::{base, scaled};
use crate::common::hash::fnv64;
use crate::k8s::obj::{self, ts};
use crate::k8s::processes::RedisStatus;
use crate::k8s::store::ObjKey;
use crate::k8s::{ClusterState, SettleCtx};

/// Holds a pod that reached a node until its containers have stopped, so a deleted pod
/// shows as terminating for its grace period and its processes are stopped.
pub(super) const FINALIZER: &str = "sandbox.terrain.dev/kubelet";
/// Pod annotation: how long (simulated seconds) a job-like container runs.
pub(crate) const RUN_SECONDS: &str = "sandbox.terrain.dev/run-seconds";
/// Pod annotation: the exit code job-like containers end with.
pub(crate) const EXIT_CODE: &str = "sandbox.terrain.dev/exit-code";
/// Pod annotation: how many of a Job's first attempts fail.
pub(crate) const FAIL_ATTEMPTS: &str = "sandbox.terrain.dev/fail-attempts";
/// Pod annotation: the container writes its results to this object store URL
/// (`gs://BUCKET/PREFIX`) as it ends, as the pod's cloud identity; a write the cloud
/// refuses fails the container with the cloud's error.
pub(crate) const WRITES: &str = "sandbox.terrain.dev/writes";
/// Pod annotation: the pod's node, when it is Spot or preemptible, is reclaimed halfway
/// through the pod's run (the sandbox's seeded spot reclaims mark the attempts they
/// take, `super::pipelines`); on other nodes it means nothing.
pub(crate) const SPOT_RECLAIM: &str = "sandbox.terrain.dev/spot-reclaim";
const KUBELET: &str = "kubelet";
const JOB_TRACKING: &str = "batch.kubernetes.io/job-tracking";
/// Restarts done in one settle at most, so a container failing at scale 0 cannot spin.
const RESTARTS_PER_SETTLE: u32 = 3;
pub(super) const SHUTDOWN_MESSAGE: &str =
    "Pod was terminated in response to imminent node shutdown.";

fn image_id(image: &str) -> String {
    let n = normalize_image(image);
    let repo = n.split('@').next().unwrap_or(&n);
    let repo = repo
        .rsplit_once(':')
        .filter(|(_, t)| !t.contains('/'))
        .map_or(repo, |(r, _)| r);
    format!("{repo}@sha256:{}", hex64(&[&n]))
}

/// 64 hex digits derived from `parts` (container and image ids).
fn hex64(parts: &[&str]) -> String {
    (0..4u8)
        .map(|i| {
            // splitmix64's finalizer: FNV of near-identical inputs differs in few bits.
            let mut z = fnv64(&[&parts.join("/"), &i.to_string()]);
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            format!("{:016x}", z ^ (z >> 31))
        })
        .collect()
}

/// Whether the pod runs to completion (a Job's pods, `Never`/`OnFailure` pods that are not
/// Redis, anything told how long to run or how to exit) rather than until stopped.
pub(crate) fn runs_to_completion(pod: &Value) -> bool {
    obj::controller_uid(pod, "Job").is_some()
        || (pod["spec"]["restartPolicy"]
            .as_str()
            .is_some_and(|p| p != "Always")
            && !is_redis_pod(pod))
        || obj::annotation(pod, RUN_SECONDS).is_some()
        || obj::annotation(pod, EXIT_CODE).is_some()
}

/// `sleep N` as a container's whole command: `Some(None)` sleeps forever.
fn sleep_seconds(container: &Value) -> Option<Option<f64>> {
    let words: Vec<&str> = obj::items(&container["command"])
        .iter()
        .chain(obj::items(&container["args"]))
        .filter_map(Value::as_str)
        .collect();
    let words: Vec<&str> = match words.as_slice() {
        [sh, "-c", script] if sh.ends_with("sh") => script.split_whitespace().collect(),
        _ => words,
    };
    let [cmd, arg] = words.as_slice() else {
        return None;
    };
    if cmd.rsplit('/').next() != Some("sleep") {
        return None;
    }
    if *arg == "infinity" {
        return Some(None);
    }
    let (digits, unit) = match arg.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => (&arg[..i], c),
        _ => (*arg, 's'),
    };
    let n: f64 = digits.parse().ok()?;
    let mult = match unit {
        's' => 1.0,
        'm' => 60.0,
        'h' => 3600.0,
        'd' => 86400.0,
        _ => return None,
    };
    Some(Some(n * mult))
}

/// How long one run of a job-like container lasts; `None`: until stopped. A `sleep N`
/// command sleeps real seconds (a helper pod must stay up for the exec it exists for);
/// everything else is simulated time.
fn run_time(pod: &Value, container: &Value, ctx: &SettleCtx<'_>) -> Option<Duration> {
    if !runs_to_completion(pod) {
        return None;
    }
    if let Some(secs) = obj::annotation(pod, RUN_SECONDS).and_then(|s| s.trim().parse::<f64>().ok())
    {
        return Some(scaled(ctx, secs));
    }
    match sleep_seconds(container) {
        Some(None) => None,
        Some(Some(secs)) => Some(Duration::milliseconds((secs * 1000.0) as i64)),
        None => Some(scaled(ctx, base::JOB_RUN)),
    }
}

pub(super) fn sync(cluster: &mut ClusterState, ctx: &SettleCtx<'_>) {
    // A finished pod the kubelet has let go of needs nothing more.
    let bound = obj::list_where(&cluster.store, "", "pods", None, |p| {
        p["spec"]["nodeName"]
            .as_str()
            .is_some_and(|n| !n.is_empty())
            && (!terminal(p) || obj::has_finalizer(p, FINALIZER) || obj::deleting(p))
    });
    for (key, pod) in bound {
        sync_pod(cluster, ctx, &key, pod);
    }
    workers::forget_gone(cluster);
}

fn phase(pod: &Value) -> &str {
    pod["status"]["phase"].as_str().unwrap_or("Pending")
}

fn terminal(pod: &Value) -> bool {
    matches!(phase(pod), "Succeeded" | "Failed")
}

fn sync_pod(cluster: &mut ClusterState, ctx: &SettleCtx<'_>, key: &ObjKey, pod: Value) {
    let node_name = pod["spec"]["nodeName"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if obj::deleting(&pod) {
        stop(cluster, ctx, key, pod);
        return;
    }
    if terminal(&pod) {
        release(cluster, ctx, key, pod);
        return;
    }
    let Some(node) = cluster.store.get(&nodes::node_key(&node_name)).cloned() else {
        lost(cluster, ctx, key, pod);
        return;
    };
    run(cluster, ctx, key, pod, &node);
}

/// A terminal pod lets go of its processes and of the kubelet finalizer.
fn release(cluster: &mut ClusterState, ctx: &SettleCtx<'_>, key: &ObjKey, mut pod: Value) {
    if !obj::has_finalizer(&pod, FINALIZER) {
        return;
    }
    if is_redis_pod(&pod) {
        ctx.processes.stop(obj::uid(&pod));
    }
    obj::remove_finalizer(&mut pod, FINALIZER);
    cluster.store.update(key, pod);
}

/// The pod's node is gone: the pod fails and the pod garbage collector deletes it.
fn lost(cluster: &mut ClusterState, ctx: &SettleCtx<'_>, key: &ObjKey, mut pod: Value) {
    let now = ctx.now;
    for c in containers_mut(&mut pod) {
        let started = c["state"]["running"]["startedAt"].clone();
        c["state"] = obj::compact(json!({"terminated": {
            "exitCode": 137, "reason": "ContainerStatusUnknown",
            "message": "The container could not be located when the pod was terminated",
            "startedAt": started, "finishedAt": ts(now),
        }}));
        c["ready"] = json!(false);
        c["started"] = json!(false);
    }
    obj::set(&mut pod, &["status", "phase"], json!("Failed"));
    set_condition(
        &mut pod,
        "DisruptionTarget",
        true,
        Some(("DeletionByPodGC", "PodGC: node no longer exists")),
        now,
    );
    set_condition(&mut pod, "Ready", false, Some(("PodFailed", "")), now);
    set_condition(
        &mut pod,
        "ContainersReady",
        false,
        Some(("PodFailed", "")),
        now,
    );
    cluster.store.update(key, pod.clone());
    release(cluster, ctx, key, pod);
    cluster.store.delete(key, now);
}

/// A deleted pod: containers get the stop signal, then after the grace period the pod
/// lets go and the store removes it (once other finalizers, a Job's, are gone too).
fn stop(cluster: &mut ClusterState, ctx: &SettleCtx<'_>, key: &ObjKey, mut pod: Value) {
    if !obj::has_finalizer(&pod, FINALIZER) {
        return;
    }
    let node = pod["spec"]["nodeName"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let since = obj::parse_time(&pod["metadata"]["deletionTimestamp"]).unwrap_or(ctx.now);
    if !terminal(&pod) {
        let running: Vec<String> = containers(&pod)
            .iter()
            .filter(|c| !c["state"]["running"].is_null())
            .filter_map(|c| c["name"].as_str().map(str::to_string))
            .collect();
        for c in running {
            events::emit_once(
                &mut cluster.store,
                &Involved::new(&pod, "v1", "Pod"),
                Event::normal(KUBELET, "Killing", format!("Stopping container {c}"))
                    .on_host(&node)
                    .at_container(&c),
                since,
            );
        }
    }
    let grace = if pod["spec"]["terminationGracePeriodSeconds"] == 0 {
        Duration::zero()
    } else {
        scaled(ctx, base::KILL_GRACE)
    };
    let at = since + grace;
    if at > ctx.now {
        return;
    }
    if !terminal(&pod) {
        for c in containers_mut(&mut pod) {
            let started = c["state"]["running"]["startedAt"].clone();
            if !started.is_null() {
                c["state"] = obj::compact(json!({"terminated": {
                    "exitCode": 143, "reason": "Error", "startedAt": started, "finishedAt": ts(at),
                    "containerID": c["containerID"].clone(),
                }}));
            }
            c["ready"] = json!(false);
            c["started"] = json!(false);
        }
        if pod["spec"]["restartPolicy"] != "Always" {
            obj::set(&mut pod, &["status", "phase"], json!("Failed"));
        }
        set_condition(&mut pod, "Ready", false, Some(("PodFailed", "")), at);
        set_condition(
            &mut pod,
            "ContainersReady",
            false,
            Some(("PodFailed", "")),
            at,
        );
    }
    if is_redis_pod(&pod) {
        ctx.processes.stop(obj::uid(&pod));
    }
    obj::remove_finalizer(&mut pod, FINALIZER);
    cluster.store.update(key, pod);
}

fn containers(pod: &Value) -> &[Value] {
    obj::items(&pod["status"]["containerStatuses"])
}

/// The container statuses that are objects (a status written by a client could hold
/// anything; indexing into a non-object would panic).
fn containers_mut(pod: &mut Value) -> impl Iterator<Item = &mut Value> {
    obj::array_mut(pod, &["status", "containerStatuses"])
        .iter_mut()
        .filter(|c| c.is_object())
}

/// Sets a pod condition, keeping its transition time when its status did not change.
fn set_condition(
    pod: &mut Value,
    kind: &str,
    status: bool,
    reason: Option<(&str, &str)>,
    at: DateTime<Utc>,
) {
    let status = if status { "True" } else { "False" };
    let conditions = obj::array_mut(pod, &["status", "conditions"]);
    let previous = conditions.iter().find(|c| c["type"] == kind).cloned();
    let since = match &previous {
        Some(p) if p["status"] == status => p["lastTransitionTime"].clone(),
        _ => ts(at),
    };
    let mut c = json!({"type": kind, "status": status, "lastTransitionTime": since});
    if let Some((r, m)) = reason {
        c["reason"] = json!(r);
        if !m.is_empty() {
            c["message"] = json!(m);
        }
    }
    match conditions.iter_mut().find(|c| c["type"] == kind) {
        Some(slot) => *slot = c,
        None => conditions.push(c),
    }
}

/// The lowest free address in the node's pod range.
fn allocate_ip(cluster: &ClusterState, node: &Value) -> String {
    let cidr = node["spec"]["podCIDR"].as_str().unwrap_or("10.4.0.0/24");
    let prefix = cidr.rsplit_once('.').map_or("10.4.0", |(p, _)| p);
    let used: Vec<String> = cluster
        .store
        .list("", "pods", None)
        .iter()
        .filter(|(_, p)| !terminal(p))
        .filter_map(|(_, p)| p["status"]["podIP"].as_str().map(str::to_string))
        .collect();
    (2..=254)
        .map(|i| format!("{prefix}.{i}"))
        .find(|ip| !used.contains(ip))
        .unwrap_or_else(|| format!("{prefix}.254"))
}

/// The failures a pod's Job has had so far, besides this pod's own restarts: what the
/// `fail-attempts` annotation counts against.
fn job_failures(cluster: &ClusterState, pod: &Value) -> i64 {
    let Some(job_uid) = obj::controller_uid(pod, "Job") else {
        return 0;
    };
    let namespace = obj::str_at(pod, &["metadata", "namespace"]).unwrap_or_default();
    let counted = cluster
        .store
        .list("batch", "jobs", Some(namespace))
        .into_iter()
        .find(|(_, j)| obj::uid(j) == job_uid)
        .map(|(_, j)| j["status"]["failed"].as_i64().unwrap_or_default())
        .unwrap_or_default();
    let others: i64 = cluster
        .store
        .list("", "pods", Some(namespace))
        .into_iter()
        .filter(|(_, p)| {
            obj::controller_uid(p, "Job") == Some(job_uid) && obj::uid(p) != obj::uid(pod)
        })
        .map(|(_, p)| {
            if phase(p) == "Failed" && obj::has_finalizer(p, JOB_TRACKING) {
                1
            } else if terminal(p) {
                0
            } else {
                restarts(p)
            }
        })
        .sum();
    counted + others
}

pub(crate) fn restarts(pod: &Value) -> i64 {
    containers(pod)
        .iter()
        .map(|c| c["restartCount"].as_i64().unwrap_or_default())
        .sum()
}

/// The exit code of a job-like container's run that ends now.
fn exit_code(pod: &Value, failures_so_far: i64) -> i64 {
    let told = obj::annotation(pod, EXIT_CODE)
        .and_then(|s| s.trim().parse::<i64>().ok())
        .unwrap_or_default();
    if told != 0 {
        return told;
    }
    let attempts = obj::annotation(pod, FAIL_ATTEMPTS)
        .and_then(|s| s.trim().parse::<i64>().ok())
        .unwrap_or_default();
    if failures_so_far < attempts {
        1
    } else {
        0
    }
}

/// Why the cloud refuses the write the pod's `WRITES` annotation asks for, if it does:
/// asked of the pod's node's cloud, as the pod's Kubernetes service account.
pub(crate) fn write_denied(cluster: &ClusterState, pod: &Value) -> Option<String> {
    let url = obj::annotation(pod, WRITES)?;
    let namespace = pod["metadata"]["namespace"].as_str().unwrap_or("default");
    let account = pod["spec"]["serviceAccountName"]
        .as_str()
        .unwrap_or("default");
    let node_name = pod["spec"]["nodeName"].as_str().unwrap_or_default();
    let node = cluster
        .store
        .get(&ObjKey::new("", "nodes", "", node_name))
        .cloned()
        .unwrap_or(Value::Null);
    let annotations = cluster
        .store
        .get(&ObjKey::new("", "serviceaccounts", namespace, account))
        .map(|sa| sa["metadata"]["annotations"].clone())
        .unwrap_or(Value::Null);
    cluster
        .cloud
        .may_write(&node, namespace, account, &annotations, url)
        .err()
}

fn container_id(pod: &Value, container: &str, restart: i64) -> String {
    format!(
        "containerd://{}",
        hex64(&[obj::uid(pod), container, &restart.to_string()])
    )
}

/// Go's duration rendering for the seconds the Pulled event reports.
fn go_duration(d: Duration) -> String {
    let ms = d.num_milliseconds().max(1);
    if ms < 1000 {
        format!("{ms}ms")
    } else {
        format!("{}s", (ms as f64 / 1000.0 * 1000.0).round() / 1000.0)
    }
}

/// Everything about one pod's pass the container steps share.
struct Pass<'a> {
    ctx: &'a SettleCtx<'a>,
    /// The pod's node is reclaimed halfway through its run ([`reclaim_due`]): its
    /// containers never finish on their own.
    doomed: bool,
    node: String,
    start_at: DateTime<Utc>,
    redis: Option<RedisStatus>,
    base_failures: i64,
    restarts_done: u32,
    /// The latest moment something changed, for condition transition times.
    changed: Option<DateTime<Utc>>,
}

impl Pass<'_> {
    fn changed_at(&mut self, at: DateTime<Utc>) {
        self.changed = Some(self.changed.map_or(at, |c| c.max(at)));
    }
}

/// A bound, live pod: picked up, started, run, restarted or finished.
/// Whether the cloud may reclaim `node` (a Spot or preemptible VM).
fn on_spot(node: &Value) -> bool {
    obj::label(node, "cloud.google.com/gke-spot") == Some("true")
        || obj::label(node, "cloud.google.com/gke-preemptible") == Some("true")
        || obj::label(node, "eks.amazonaws.com/capacityType") == Some("SPOT")
}

/// A pod marked [`SPOT_RECLAIM`] on a Spot node, halfway through its run: its node is
/// reclaimed now. Decided from the pod's own timestamps, so it does not depend on when
/// the settles come.
fn reclaim_due(pod: &Value, node: &Value, ctx: &SettleCtx<'_>) -> bool {
    if obj::annotation(pod, SPOT_RECLAIM).is_none() || !on_spot(node) {
        return false;
    }
    let container = &pod["spec"]["containers"][0];
    let started = obj::items(&pod["status"]["containerStatuses"])
        .first()
        .and_then(|c| obj::parse_time(&c["state"]["running"]["startedAt"]));
    match (started, run_time(pod, container, ctx)) {
        (Some(started), Some(run)) => ctx.now >= started + run / 2,
        _ => false,
    }
}

fn run(
    cluster: &mut ClusterState,
    ctx: &SettleCtx<'_>,
    key: &ObjKey,
    mut pod: Value,
    node: &Value,
) {
    if reclaim_due(&pod, node, ctx) {
        preempt(cluster, &key.namespace, &key.name, ctx.now);
        return;
    }
    let node_name = obj::name(node).to_string();
    obj::add_finalizer(&mut pod, FINALIZER);
    let scheduled_at = obj::items(&pod["status"]["conditions"])
        .iter()
        .find(|c| c["type"] == "PodScheduled" && c["status"] == "True")
        .and_then(|c| obj::parse_time(&c["lastTransitionTime"]))
        .or_else(|| obj::parse_time(&pod["metadata"]["creationTimestamp"]))
        .unwrap_or(ctx.now);
    if pod["status"]["startTime"].is_null() {
        pick_up(cluster, &mut pod, node, scheduled_at);
    }
    let start_at = scheduled_at + scaled(ctx, base::POD_START);
    let redis =
        (is_redis_pod(&pod) && ctx.now >= start_at).then(|| ctx.processes.redis(obj::uid(&pod)));
    let mut pass = Pass {
        ctx,
        doomed: obj::annotation(&pod, SPOT_RECLAIM).is_some() && on_spot(node),
        node: node_name,
        start_at,
        redis,
        base_failures: job_failures(cluster, &pod),
        restarts_done: 0,
        changed: None,
    };
    let specs: Vec<Value> = obj::items(&pod["spec"]["containers"]).to_vec();
    for (i, spec) in specs.iter().enumerate() {
        let Some(mut status) = containers(&pod).get(i).filter(|s| s.is_object()).cloned() else {
            continue;
        };
        let others = restarts(&pod) - status["restartCount"].as_i64().unwrap_or_default();
        // Steps until nothing more is due; the cap stops a pathological restart loop.
        for _ in 0..16 {
            let own = others + status["restartCount"].as_i64().unwrap_or_default();
            if !step(cluster, &mut pass, &pod, spec, &mut status, own) {
                break;
            }
        }
        if let Some(slot) = obj::array_mut(&mut pod, &["status", "containerStatuses"]).get_mut(i) {
            *slot = status;
        }
    }
    finish_init_containers(&mut pod, start_at, ctx.now);
    summarize(cluster, &mut pass, key, pod);
}

/// The kubelet noticing a newly bound pod: addresses, start time, containers being created
/// and their images being pulled.
fn pick_up(cluster: &mut ClusterState, pod: &mut Value, node: &Value, at: DateTime<Utc>) {
    let node_name = obj::name(node).to_string();
    let host_ip = obj::items(&node["status"]["addresses"])
        .iter()
        .find(|a| a["type"] == "InternalIP")
        .and_then(|a| a["address"].as_str())
        .unwrap_or("10.128.0.2")
        .to_string();
    let pod_ip = allocate_ip(cluster, node);
    let has_init = !obj::items(&pod["spec"]["initContainers"]).is_empty();
    let waiting = if has_init {
        "PodInitializing"
    } else {
        "ContainerCreating"
    };
    let statuses: Vec<Value> = obj::items(&pod["spec"]["containers"])
        .iter()
        .map(|c| {
            json!({
                "name": c["name"], "image": normalize_image(c["image"].as_str().unwrap_or_default()), "imageID": "",
                "ready": false, "restartCount": 0, "started": false,
                "state": {"waiting": {"reason": waiting}}, "lastState": {},
            })
        })
        .collect();
    let init: Vec<Value> = obj::items(&pod["spec"]["initContainers"])
        .iter()
        .map(|c| {
            json!({
                "name": c["name"], "image": normalize_image(c["image"].as_str().unwrap_or_default()), "imageID": "",
                "ready": false, "restartCount": 0, "started": false,
                "state": {"waiting": {"reason": "PodInitializing"}}, "lastState": {},
            })
        })
        .collect();
    let status = obj::obj_mut(pod, &["status"]);
    status.insert("phase".into(), json!("Pending"));
    status.insert("hostIP".into(), json!(host_ip));
    status.insert("hostIPs".into(), json!([{"ip": host_ip}]));
    status.insert("podIP".into(), json!(pod_ip));
    status.insert("podIPs".into(), json!([{"ip": pod_ip}]));
    status.insert("startTime".into(), ts(at));
    status.insert("containerStatuses".into(), json!(statuses));
    if !init.is_empty() {
        status.insert("initContainerStatuses".into(), json!(init));
    }
    let qos = crate::k8s::defaults::qos_class(&pod["spec"]);
    obj::default(pod, &["status", "qosClass"], json!(qos));
    set_condition(pod, "PodReadyToStartContainers", true, None, at);
    set_condition(
        pod,
        "Initialized",
        !has_init,
        if has_init {
            Some((
                "ContainersNotInitialized",
                "containers with incomplete status: [init]",
            ))
        } else {
            None
        },
        at,
    );
    let names: Vec<&str> = obj::items(&pod["spec"]["containers"])
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    let unready = format!("containers with unready status: [{}]", names.join(" "));
    set_condition(
        pod,
        "Ready",
        false,
        Some(("ContainersNotReady", &unready)),
        at,
    );
    set_condition(
        pod,
        "ContainersReady",
        false,
        Some(("ContainersNotReady", &unready)),
        at,
    );
    let images: Vec<(String, String)> = obj::items(&pod["spec"]["initContainers"])
        .iter()
        .chain(obj::items(&pod["spec"]["containers"]))
        .map(|c| {
            (
                c["name"].as_str().unwrap_or_default().to_string(),
                c["image"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    for (name, image) in images {
        events::emit(
            &mut cluster.store,
            &Involved::new(pod, "v1", "Pod"),
            Event::normal(KUBELET, "Pulling", format!("Pulling image \"{image}\""))
                .on_host(&node_name)
                .at_container(&name),
            at,
        );
    }
}

/// Init containers run (instantly) before the app containers start.
fn finish_init_containers(pod: &mut Value, start_at: DateTime<Utc>, now: DateTime<Utc>) {
    if now < start_at || obj::items(&pod["status"]["initContainerStatuses"]).is_empty() {
        return;
    }
    for c in obj::array_mut(pod, &["status", "initContainerStatuses"]) {
        if c.is_object() && c["state"]["terminated"].is_null() {
            c["state"] = obj::compact(
                json!({"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": ts(start_at), "finishedAt": ts(start_at)}}),
            );
            c["imageID"] = json!(image_id(c["image"].as_str().unwrap_or_default()));
        }
    }
    set_condition(pod, "Initialized", true, None, start_at);
}

/// One transition of one container, if one is due; true when something changed.
fn step(
    cluster: &mut ClusterState,
    pass: &mut Pass<'_>,
    pod: &Value,
    spec: &Value,
    status: &mut Value,
    own_restarts: i64,
) -> bool {
    let name = spec["name"].as_str().unwrap_or_default().to_string();
    let image = spec["image"].as_str().unwrap_or_default().to_string();
    let redis = is_redis_image(&image);
    let now = pass.ctx.now;
    let state = &status["state"];
    if !state["terminated"].is_null() {
        return false;
    }
    if let Some(started) = obj::parse_time(&state["running"]["startedAt"]) {
        if redis {
            let ready = matches!(pass.redis, Some(RedisStatus::Ready(_)));
            if status["ready"] != ready {
                status["ready"] = json!(ready);
                pass.changed_at(now);
            }
            if let Some(RedisStatus::Failed(m) | RedisStatus::Unavailable(m)) = &pass.redis {
                let m = m.clone();
                crash(
                    cluster,
                    pass,
                    pod,
                    &name,
                    status,
                    Ended {
                        code: 1,
                        started,
                        end: now,
                    },
                );
                cannot_create(cluster, pass, pod, &name, status, &m);
                return false;
            }
        }
        let (end, code) = if is_queue_worker(pod, &image) && runs_to_completion(pod) {
            // The batch-ML worker runs until its queue is empty.
            match workers::drain(cluster, pass.ctx, pod, spec, started, own_restarts) {
                Drain::Working => return false,
                Drain::Took => {
                    pass.changed_at(now);
                    return true;
                }
                Drain::Empty(at) => (at, 0),
            }
        } else {
            let Some(run) = run_time(pod, spec, pass.ctx) else {
                return false;
            };
            let end = started + run;
            if end > now || pass.doomed {
                return false;
            }
            let code = exit_code(pod, pass.base_failures + own_restarts);
            let code = if code == 0 && write_denied(cluster, pod).is_some() {
                1
            } else {
                code
            };
            (end, code)
        };
        let policy = pod["spec"]["restartPolicy"].as_str().unwrap_or("Always");
        let restart = (policy == "Always" || (policy == "OnFailure" && code != 0))
            && pass.restarts_done < RESTARTS_PER_SETTLE;
        if restart {
            pass.restarts_done += 1;
            crash(
                cluster,
                pass,
                pod,
                &name,
                status,
                Ended { code, started, end },
            );
            return true;
        }
        let reason = if code == 0 { "Completed" } else { "Error" };
        status["state"] = obj::compact(json!({"terminated": {
            "exitCode": code, "reason": reason, "startedAt": ts(started), "finishedAt": ts(end),
            "containerID": status["containerID"].clone(),
        }}));
        status["ready"] = json!(false);
        status["started"] = json!(false);
        pass.changed_at(end);
        return true;
    }
    let due = if !status["lastState"]["terminated"].is_null() {
        let finished =
            obj::parse_time(&status["lastState"]["terminated"]["finishedAt"]).unwrap_or(now);
        let n = status["restartCount"].as_i64().unwrap_or(1).clamp(1, 16) as i32;
        let backoff = (base::BACKOFF * 2f64.powi(n - 1)).min(base::BACKOFF_MAX);
        finished + scaled(pass.ctx, backoff)
    } else {
        pass.start_at
    };
    if due > now {
        return false;
    }
    let at = if redis {
        match &pass.redis {
            // Started when its server was seen ready, which may be later than due.
            Some(RedisStatus::Ready(_)) => now,
            Some(RedisStatus::Failed(m) | RedisStatus::Unavailable(m)) => {
                let m = m.clone();
                cannot_create(cluster, pass, pod, &name, status, &m);
                return false;
            }
            Some(RedisStatus::Starting) | None => return false,
        }
    } else {
        due
    };
    start(cluster, pass, pod, spec, status, at);
    true
}

fn start(
    cluster: &mut ClusterState,
    pass: &mut Pass<'_>,
    pod: &Value,
    spec: &Value,
    status: &mut Value,
    at: DateTime<Utc>,
) {
    let name = spec["name"].as_str().unwrap_or_default();
    let image = spec["image"].as_str().unwrap_or_default();
    let restarted = !status["lastState"]["terminated"].is_null();
    let restart = status["restartCount"].as_i64().unwrap_or_default();
    status["state"] = obj::compact(json!({"running": {"startedAt": ts(at)}}));
    status["ready"] =
        json!(!is_redis_image(image) || matches!(pass.redis, Some(RedisStatus::Ready(_))));
    status["started"] = json!(true);
    status["imageID"] = json!(image_id(image));
    status["containerID"] = json!(container_id(pod, name, restart));
    pass.changed_at(at);
    let pulled = if restarted {
        format!("Container image \"{image}\" already present on machine")
    } else {
        let took = scaled(pass.ctx, base::POD_START * 0.6);
        let size = 10_000_000 + fnv64(&[image]) % 900_000_000;
        format!(
            "Successfully pulled image \"{image}\" in {} ({} including waiting). Image size: {size} bytes.",
            go_duration(took),
            go_duration(took)
        )
    };
    let node = pass.node.clone();
    for (reason, message) in [
        ("Pulled", pulled),
        ("Created", format!("Created container {name}")),
        ("Started", format!("Started container {name}")),
    ] {
        events::emit(
            &mut cluster.store,
            &Involved::new(pod, "v1", "Pod"),
            Event::normal(KUBELET, reason, message)
                .on_host(&node)
                .at_container(name),
            at,
        );
    }
}

/// How a container's run ended.
struct Ended {
    code: i64,
    started: DateTime<Utc>,
    end: DateTime<Utc>,
}

/// A run that ended and will be restarted after a back-off.
fn crash(
    cluster: &mut ClusterState,
    pass: &mut Pass<'_>,
    pod: &Value,
    name: &str,
    status: &mut Value,
    ended: Ended,
) {
    let Ended { code, started, end } = ended;
    let reason = if code == 0 { "Completed" } else { "Error" };
    status["lastState"] = obj::compact(json!({"terminated": {
        "exitCode": code, "reason": reason, "startedAt": ts(started), "finishedAt": ts(end),
        "containerID": status["containerID"].clone(),
    }}));
    let restarts = status["restartCount"].as_i64().unwrap_or_default() + 1;
    status["restartCount"] = json!(restarts);
    let pod_ref = format!(
        "{}_{}({})",
        obj::name(pod),
        obj::str_at(pod, &["metadata", "namespace"]).unwrap_or_default(),
        obj::uid(pod)
    );
    let backoff =
        (base::BACKOFF * 2f64.powi((restarts as i32 - 1).clamp(0, 16))).min(base::BACKOFF_MAX);
    status["state"] = obj::compact(json!({"waiting": {
        "reason": "CrashLoopBackOff",
        "message": format!("back-off {} restarting failed container={name} pod={pod_ref}", go_duration(scaled(pass.ctx, backoff))),
    }}));
    status["ready"] = json!(false);
    status["started"] = json!(false);
    pass.changed_at(end);
    let node = pass.node.clone();
    events::emit(
        &mut cluster.store,
        &Involved::new(pod, "v1", "Pod"),
        Event::warning(
            KUBELET,
            "BackOff",
            format!("Back-off restarting failed container {name} in pod {pod_ref}"),
        )
        .on_host(&node)
        .at_container(name),
        end,
    );
}

/// The container cannot be created (no redis-server, or it would not start).
fn cannot_create(
    cluster: &mut ClusterState,
    pass: &mut Pass<'_>,
    pod: &Value,
    name: &str,
    status: &mut Value,
    message: &str,
) {
    let waiting = &status["state"]["waiting"];
    if waiting["reason"] == "CreateContainerError" && waiting["message"] == message {
        return;
    }
    status["state"] =
        obj::compact(json!({"waiting": {"reason": "CreateContainerError", "message": message}}));
    status["ready"] = json!(false);
    pass.changed_at(pass.ctx.now);
    let node = pass.node.clone();
    events::emit(
        &mut cluster.store,
        &Involved::new(pod, "v1", "Pod"),
        Event::warning(KUBELET, "Failed", format!("Error: {message}"))
            .on_host(&node)
            .at_container(name),
        pass.ctx.now,
    );
}

/// Phase and conditions from the containers; a pod that ended lets go of its processes.
fn summarize(cluster: &mut ClusterState, pass: &mut Pass<'_>, key: &ObjKey, mut pod: Value) {
    let at = pass.changed.unwrap_or(pass.ctx.now);
    let all = containers(&pod).to_vec();
    let done = !all.is_empty() && all.iter().all(|c| !c["state"]["terminated"].is_null());
    let never_started = all.iter().any(|c| {
        c["state"]["running"].is_null()
            && c["state"]["terminated"].is_null()
            && c["lastState"]["terminated"].is_null()
    });
    let phase = if done {
        if all
            .iter()
            .all(|c| c["state"]["terminated"]["exitCode"] == 0)
        {
            "Succeeded"
        } else {
            "Failed"
        }
    } else if never_started {
        "Pending"
    } else {
        "Running"
    };
    obj::set(&mut pod, &["status", "phase"], json!(phase));
    if done {
        set_condition(&mut pod, "PodReadyToStartContainers", false, None, at);
        set_condition(
            &mut pod,
            "Initialized",
            true,
            Some(("PodCompleted", "")),
            at,
        );
        set_condition(&mut pod, "Ready", false, Some(("PodCompleted", "")), at);
        set_condition(
            &mut pod,
            "ContainersReady",
            false,
            Some(("PodCompleted", "")),
            at,
        );
    } else {
        let unready: Vec<&str> = all
            .iter()
            .filter(|c| c["ready"] != true)
            .filter_map(|c| c["name"].as_str())
            .collect();
        if unready.is_empty() {
            set_condition(&mut pod, "Ready", true, None, at);
            set_condition(&mut pod, "ContainersReady", true, None, at);
        } else {
            let message = format!("containers with unready status: [{}]", unready.join(" "));
            set_condition(
                &mut pod,
                "Ready",
                false,
                Some(("ContainersNotReady", &message)),
                at,
            );
            set_condition(
                &mut pod,
                "ContainersReady",
                false,
                Some(("ContainersNotReady", &message)),
                at,
            );
        }
    }
    sort_conditions(&mut pod);
    let pod = cluster.store.update(key, pod);
    if done {
        release(cluster, pass.ctx, key, pod);
    }
}

/// The order the kubelet lists conditions in.
fn sort_conditions(pod: &mut Value) {
    const ORDER: [&str; 6] = [
        "DisruptionTarget",
        "PodReadyToStartContainers",
        "Initialized",
        "Ready",
        "ContainersReady",
        "PodScheduled",
    ];
    obj::array_mut(pod, &["status", "conditions"]).sort_by_key(|c| {
        ORDER
            .iter()
            .position(|t| c["type"] == *t)
            .unwrap_or(ORDER.len())
    });
}

/// A spot reclaim: every pod on the pod's node is terminated and the node goes; a pool's
/// VM comes back (booting) under the same name.
pub(super) fn preempt(
    cluster: &mut ClusterState,
    namespace: &str,
    name: &str,
    now: DateTime<Utc>,
) -> bool {
    let Some(pod) = cluster.store.get(&ObjKey::new("", "pods", namespace, name)) else {
        return false;
    };
    if phase(pod) != "Running" {
        return false;
    }
    let Some(node_name) = pod["spec"]["nodeName"].as_str().map(str::to_string) else {
        return false;
    };
    let victims: Vec<(ObjKey, Value)> = obj::list(&cluster.store, "", "pods", None)
        .into_iter()
        .filter(|(_, p)| p["spec"]["nodeName"] == node_name.as_str() && !terminal(p))
        .collect();
    for (key, mut victim) in victims {
        for c in containers_mut(&mut victim) {
            let started = c["state"]["running"]["startedAt"].clone();
            c["state"] = obj::compact(if started.is_null() {
                json!({"terminated": {"exitCode": 137, "reason": "ContainerStatusUnknown", "finishedAt": ts(now)}})
            } else {
                json!({"terminated": {"exitCode": 137, "reason": "Error", "startedAt": started, "finishedAt": ts(now),
                                      "containerID": c["containerID"].clone()}})
            });
            c["ready"] = json!(false);
            c["started"] = json!(false);
        }
        let status = obj::obj_mut(&mut victim, &["status"]);
        status.insert("phase".into(), json!("Failed"));
        status.insert("reason".into(), json!("Terminated"));
        status.insert("message".into(), json!(SHUTDOWN_MESSAGE));
        set_condition(
            &mut victim,
            "DisruptionTarget",
            true,
            Some(("TerminationByKubelet", SHUTDOWN_MESSAGE)),
            now,
        );
        set_condition(&mut victim, "Ready", false, Some(("PodFailed", "")), now);
        set_condition(
            &mut victim,
            "ContainersReady",
            false,
            Some(("PodFailed", "")),
            now,
        );
        sort_conditions(&mut victim);
        let victim = cluster.store.update(&key, victim);
        events::emit(
            &mut cluster.store,
            &Involved::new(&victim, "v1", "Pod"),
            Event::warning(
                KUBELET,
                "Preempted",
                format!("Node {node_name} was reclaimed (spot VM preemption): {SHUTDOWN_MESSAGE}"),
            )
            .on_host(&node_name),
            now,
        );
    }
    cluster.store.remove(&nodes::node_key(&node_name));
    let autopilot = cluster.cloud.provisions_per_pod();
    let pool = cluster
        .node_pools
        .iter()
        .find(|p| {
            (0..p.node_count).any(|i| nodes::pool_node_name(cluster, &p.name, i) == node_name)
        })
        .cloned();
    if let (false, Some(pool)) = (autopilot, pool) {
        nodes::add(cluster, &node_name, &Shape::of_pool(&pool), false, now);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{self, Harness};
    use super::*;
    use std::io::{Read as _, Write as _};

    fn pod(name: &str, spec: Value, annotations: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "annotations": annotations}, "spec": spec})
    }

    fn container_state(h: &Harness, name: &str) -> Value {
        h.get("", "pods", "default", name)["status"]["containerStatuses"][0].clone()
    }

    #[test]
    fn images() {
        let cases = [
            ("redis", true, "docker.io/library/redis:latest"),
            ("redis:7.2", true, "docker.io/library/redis:7.2"),
            (
                "docker.io/library/redis:6.0.5",
                true,
                "docker.io/library/redis:6.0.5",
            ),
            ("bitnami/redis:7.2", true, "docker.io/bitnami/redis:7.2"),
            (
                "oliver006/redis_exporter",
                false,
                "docker.io/oliver006/redis_exporter:latest",
            ),
            (
                "us-docker.pkg.dev/google-samples/containers/gke/batch-ml-workload",
                false,
                "us-docker.pkg.dev/google-samples/containers/gke/batch-ml-workload:latest",
            ),
            ("localhost:5000/app:v1", false, "localhost:5000/app:v1"),
        ];
        for (image, redis, normalized) in cases {
            assert_eq!(is_redis_image(image), redis, "{image}");
            assert_eq!(normalize_image(image), normalized, "{image}");
        }
    }

    #[test]
    fn what_runs_to_completion() {
        let mut h = Harness::standard(vec![testkit::pool("default-pool", 1, 1)]);
        let c = |extra: Value| {
            let mut c = json!({"name": "main", "image": "busybox"});
            if let Some(m) = extra.as_object() {
                for (k, v) in m {
                    c[k.as_str()] = v.clone();
                }
            }
            json!([c])
        };
        let cases = [
            (
                "never",
                json!({"restartPolicy": "Never", "containers": c(json!({}))}),
                json!({}),
                "Succeeded",
                "terminated",
            ),
            (
                "always",
                json!({"containers": c(json!({}))}),
                json!({}),
                "Running",
                "running",
            ),
            (
                "helper",
                json!({"restartPolicy": "Never", "containers": c(json!({"command": ["sleep", "3600"]}))}),
                json!({}),
                "Running",
                "running",
            ),
            (
                "forever",
                json!({"restartPolicy": "Never", "containers": c(json!({"command": ["sh", "-c", "sleep infinity"]}))}),
                json!({}),
                "Running",
                "running",
            ),
            (
                "crashing",
                json!({"containers": c(json!({}))}),
                json!({"sandbox.terrain.dev/exit-code": "1"}),
                "Running",
                "lastState",
            ),
            (
                "failing",
                json!({"restartPolicy": "Never", "containers": c(json!({}))}),
                json!({"sandbox.terrain.dev/exit-code": "4"}),
                "Failed",
                "terminated",
            ),
        ];
        for (name, spec, annotations, _, _) in &cases {
            h.create(
                "",
                "pods",
                "default",
                pod(name, spec.clone(), annotations.clone()),
            );
        }
        h.run_for(12.0);
        for (name, _, _, phase, state) in cases {
            let p = h.get("", "pods", "default", name);
            assert_eq!(p["status"]["phase"], phase, "{name}");
            let status = container_state(&h, name);
            let found = if state == "lastState" {
                &status["lastState"]["terminated"]
            } else {
                &status["state"][state]
            };
            assert!(!found.is_null(), "{name}: {status}");
        }
        let crashing = container_state(&h, "crashing");
        assert!(
            crashing["restartCount"].as_i64().unwrap_or_default() >= 2,
            "{crashing}"
        );
        assert_eq!(crashing["lastState"]["terminated"]["exitCode"], 1);
        assert!(h
            .reasons("default", "crashing")
            .contains(&"BackOff".to_string()));
        let running = h.get("", "pods", "default", "always");
        assert!(running["status"]["podIP"]
            .as_str()
            .is_some_and(|ip| ip.starts_with("10.4.")));
        assert!(running["status"]["hostIP"]
            .as_str()
            .is_some_and(|ip| ip.starts_with("10.128.")));
        assert_eq!(running["status"]["qosClass"], "BestEffort");
        let types: Vec<&str> = obj::items(&running["status"]["conditions"])
            .iter()
            .filter_map(|c| c["type"].as_str())
            .collect();
        assert_eq!(
            types,
            [
                "PodReadyToStartContainers",
                "Initialized",
                "Ready",
                "ContainersReady",
                "PodScheduled"
            ]
        );
        assert!(obj::items(&running["status"]["conditions"])
            .iter()
            .all(|c| c["status"] == "True"));
    }

    #[test]
    fn a_deleted_pod_stops_after_its_grace_period() {
        let mut h = Harness::standard(vec![testkit::pool("default-pool", 1, 1)]);
        h.create(
            "",
            "pods",
            "default",
            pod(
                "web",
                json!({"containers": [{"name": "c", "image": "nginx"}]}),
                json!({}),
            ),
        );
        h.run_for(3.0);
        assert!(obj::has_finalizer(
            &h.get("", "pods", "default", "web"),
            FINALIZER
        ));
        h.delete("", "pods", "default", "web");
        h.settle();
        assert!(
            h.exists("", "pods", "default", "web"),
            "terminating during its grace period"
        );
        assert!(h.reasons("default", "web").contains(&"Killing".to_string()));
        h.run_for(2.0);
        assert!(!h.exists("", "pods", "default", "web"));
    }

    #[test]
    fn pods_of_a_vanished_pool_fail() {
        let mut h = Harness::standard(vec![testkit::pool("a", 1, 1)]);
        h.create(
            "",
            "pods",
            "default",
            pod(
                "bare",
                json!({"containers": [{"name": "c", "image": "nginx"}]}),
                json!({}),
            ),
        );
        h.run_for(3.0);
        assert_eq!(
            h.get("", "pods", "default", "bare")["status"]["phase"],
            "Running"
        );
        h.cluster.node_pools.clear();
        h.settle();
        assert!(h.names("", "nodes", "").is_empty());
        assert!(
            !h.exists("", "pods", "default", "bare"),
            "the pod garbage collector removes pods of vanished nodes"
        );
    }

    #[test]
    fn autopilot_replaces_a_preempted_pods_node() {
        let mut h = Harness::autopilot();
        h.create("batch", "jobs", "default", json!({
            "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "w"},
            "spec": {"template": {"metadata": {"annotations": {RUN_SECONDS: "30"}},
                                  "spec": {"restartPolicy": "OnFailure", "nodeSelector": {"cloud.google.com/gke-spot": "true"},
                                           "containers": [{"name": "w", "image": "worker"}]}}},
        }));
        h.run_for(10.0);
        let first = h.list("", "pods", "default").pop().expect("a pod");
        assert_eq!(first["status"]["phase"], "Running");
        let node = first["spec"]["nodeName"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(preempt(&mut h.cluster, "default", obj::name(&first), h.now));
        assert!(
            !h.exists("", "nodes", "", &node),
            "an Autopilot node is not brought back"
        );
        assert!(
            !preempt(&mut h.cluster, "default", obj::name(&first), h.now),
            "no longer running"
        );
        h.run_for(60.0);
        let job = h.get("batch", "jobs", "default", "w");
        assert_eq!(job["status"]["succeeded"], 1, "{}", job["status"]);
        assert_eq!(job["status"]["failed"], 1);
        let second = h
            .list("", "pods", "default")
            .into_iter()
            .find(|p| obj::name(p) != obj::name(&first))
            .expect("a replacement pod");
        assert_ne!(second["spec"]["nodeName"], node.as_str());
    }

    fn redis_server_installed() -> bool {
        if std::env::var_os("TERRAIN_REDIS_SERVER").is_some() {
            return true;
        }
        std::env::var_os("PATH").is_some_and(|paths| {
            std::env::split_paths(&paths).any(|d| d.join("redis-server").is_file())
        })
    }

    #[test]
    fn a_redis_pod_is_backed_by_a_real_server() {
        let mut h = Harness::standard(vec![testkit::pool("default-pool", 1, 1)]);
        h.create("", "pods", "default", pod(
            "redis-leader",
            json!({"containers": [{"name": "leader", "image": "docker.io/library/redis:6.0.5", "ports": [{"containerPort": 6379}]}]}),
            json!({}),
        ));
        h.run_for(3.0);
        // The server starts in real time; the simulated clock only gates when it is asked for.
        for _ in 0..200 {
            let status = container_state(&h, "redis-leader");
            if status["ready"] == true
                || status["state"]["waiting"]["reason"] == "CreateContainerError"
            {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
            h.advance(0.1);
        }
        let status = container_state(&h, "redis-leader");
        if !redis_server_installed() {
            assert_eq!(
                status["state"]["waiting"]["reason"], "CreateContainerError",
                "{status}"
            );
            let message = status["state"]["waiting"]["message"]
                .as_str()
                .unwrap_or_default();
            assert!(message.contains("redis-server"), "{message}");
            assert!(h
                .reasons("default", "redis-leader")
                .contains(&"Failed".to_string()));
            return;
        }
        assert_eq!(status["ready"], true, "{status}");
        let p = h.get("", "pods", "default", "redis-leader");
        assert_eq!(p["status"]["phase"], "Running");
        let addr =
            crate::k8s::volumes::redis_of(&h.cluster, &h.processes, "default", "redis-leader")
                .expect("the server's address");
        assert_eq!(
            crate::k8s::volumes::port_target(
                &h.cluster,
                &h.processes,
                "default",
                "redis-leader",
                6379
            ),
            Some(addr)
        );
        assert_eq!(
            crate::k8s::volumes::port_target(
                &h.cluster,
                &h.processes,
                "default",
                "redis-leader",
                80
            ),
            None
        );
        let mut conn = std::net::TcpStream::connect(addr).expect("connect to redis-server");
        conn.write_all(b"PING\r\n").expect("send PING");
        let mut reply = [0u8; 7];
        conn.read_exact(&mut reply).expect("read the reply");
        assert_eq!(&reply, b"+PONG\r\n");
        let logs = super::super::pod_logs(&h.cluster, "default", "redis-leader", None, h.now)
            .expect("logs");
        assert!(
            logs.contains("Redis version=6.0.5") && logs.contains("Ready to accept connections"),
            "{logs}"
        );
        h.delete("", "pods", "default", "redis-leader");
        h.run_for(2.0);
        assert!(!h.exists("", "pods", "default", "redis-leader"));
    }
}
