//! The Job controller (batch/v1): pods from the template up to `parallelism` until
//! `completions` succeed (NonIndexed and Indexed), failures counted against
//! `backoffLimit` (restarts in place included), `activeDeadlineSeconds`, `suspend`,
//! `ttlSecondsAfterFinished`, and the status a real Job reports, with the
//! `batch.kubernetes.io/job-tracking` finalizer keeping each pod until it is counted.

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use super::events::{self, Event, Involved};
use super::kubelet;
use super::scaled;
use crate::k8s::obj::{self, ts};
use crate::k8s::store::ObjKey;
use crate::k8s::{ClusterState, SettleCtx};

const CONTROLLER: &str = "job-controller";
pub(super) const TRACKING: &str = "batch.kubernetes.io/job-tracking";
const INDEX: &str = "batch.kubernetes.io/job-completion-index";

pub(super) fn sync(cluster: &mut ClusterState, ctx: &SettleCtx<'_>) {
    let mut live = BTreeSet::new();
    for (key, job) in obj::list(&cluster.store, "batch", "jobs", None) {
        if !obj::deleting(&job) {
            live.insert(obj::uid(&job).to_string());
            sync_job(cluster, ctx, &key, job);
        }
    }
    // A Job that is gone or going no longer counts its pods: let them go.
    let orphans = obj::list_where(&cluster.store, "", "pods", None, |p| {
        obj::has_finalizer(p, TRACKING)
            && obj::controller_uid(p, "Job").is_none_or(|u| !live.contains(u))
    });
    for (key, mut pod) in orphans {
        obj::remove_finalizer(&mut pod, TRACKING);
        cluster.store.update(&key, pod);
    }
}

fn condition<'a>(job: &'a Value, kind: &str) -> Option<&'a Value> {
    obj::items(&job["status"]["conditions"])
        .iter()
        .find(|c| c["type"] == kind && c["status"] == "True")
}

fn add_condition(job: &mut Value, kind: &str, reason: &str, message: &str, at: DateTime<Utc>) {
    let conditions = obj::array_mut(job, &["status", "conditions"]);
    conditions.retain(|c| c["type"] != kind);
    conditions.push(json!({
        "type": kind, "status": "True", "lastProbeTime": ts(at), "lastTransitionTime": ts(at),
        "reason": reason, "message": message,
    }));
}

fn terminal(pod: &Value) -> bool {
    matches!(
        pod["status"]["phase"].as_str(),
        Some("Succeeded" | "Failed")
    )
}

fn index_of(pod: &Value) -> Option<i64> {
    obj::annotation(pod, INDEX).and_then(|i| i.parse().ok())
}

/// `"0-2,4"` → {0, 1, 2, 4}.
fn parse_indexes(s: &str) -> BTreeSet<i64> {
    let mut set = BTreeSet::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<i64>(), b.parse::<i64>()) {
                    set.extend(a..=b);
                }
            }
            None => {
                if let Ok(i) = part.parse() {
                    set.insert(i);
                }
            }
        }
    }
    set
}

fn format_indexes(set: &BTreeSet<i64>) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut iter = set.iter().copied().peekable();
    while let Some(start) = iter.next() {
        let mut end = start;
        while iter.peek() == Some(&(end + 1)) {
            end += 1;
            iter.next();
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
    }
    parts.join(",")
}

/// The Job controller for one Job: the pods that ended counted, the Job moved on
/// (failing, completing, suspended or running), pods removed and created to match, and
/// the status written.
fn sync_job(cluster: &mut ClusterState, ctx: &SettleCtx<'_>, key: &ObjKey, mut job: Value) {
    let now = ctx.now;
    if expire(cluster, ctx, key, &job) {
        return;
    }
    let uid = obj::uid(&job).to_string();
    let spec = job["spec"].clone();
    let indexed = spec["completionMode"] == "Indexed";
    let completions = spec["completions"].as_i64();
    let backoff_limit = spec["backoffLimit"].as_i64().unwrap_or(6);
    let suspended = spec["suspend"] == true;
    let pods = |cluster: &ClusterState| -> Vec<(ObjKey, Value)> {
        obj::list_where(&cluster.store, "", "pods", Some(&key.namespace), |p| {
            obj::controller_uid(p, "Job") == Some(uid.as_str())
        })
    };

    let before = pods(cluster);
    let tally = count_ended(cluster, &job, before);
    let current = pods(cluster);
    let seen = Seen::of(&current);
    let ended_at = seen.latest_end.map_or(now, |t| t.min(now));

    let finished = condition(&job, "Complete").is_some() || condition(&job, "Failed").is_some();
    if !finished && !suspended && job["status"]["startTime"].is_null() {
        // The controller sees a Job as it is created; a settle coming later catches up.
        let created =
            obj::parse_time(&job["metadata"]["creationTimestamp"]).map_or(now, |t| t.min(now));
        obj::set(&mut job, &["status", "startTime"], ts(created));
    }
    let started = obj::parse_time(&job["status"]["startTime"]);
    // New pods are due from when the Job started or a pod last ended or went.
    let create_at = [started, seen.latest_end, seen.deleted]
        .into_iter()
        .flatten()
        .max()
        .map_or(now, |t| t.min(now));

    let mut remove_pods: Vec<(ObjKey, bool)> = Vec::new();
    let mut create = 0usize;
    let mut create_indexes: Vec<i64> = Vec::new();
    if !finished {
        if condition(&job, "FailureTarget").is_none() {
            let deadline = spec["activeDeadlineSeconds"]
                .as_f64()
                .zip(started)
                .map(|(secs, start)| start + scaled(ctx, secs));
            mark_failure_target(
                &mut job,
                tally.failed + seen.restarts > backoff_limit,
                deadline.filter(|d| *d <= now && !suspended),
                ended_at,
            );
        }
        let all_done = match (indexed, completions) {
            (true, Some(c)) => (0..c).all(|i| tally.done_indexes.contains(&i)),
            (false, Some(c)) => tally.succeeded >= c,
            (_, None) => tally.succeeded > 0,
        };
        let drained = seen.active.is_empty() && seen.terminating == 0;
        let active_keys =
            |failure: bool| seen.active.iter().map(move |(k, _)| (k.clone(), failure));
        if let Some(target) = condition(&job, "FailureTarget").cloned() {
            remove_pods.extend(active_keys(true));
            if drained {
                fail(cluster, &mut job, &target, ended_at);
            }
        } else if all_done {
            if condition(&job, "SuccessCriteriaMet").is_none() {
                add_condition(
                    &mut job,
                    "SuccessCriteriaMet",
                    "CompletionsReached",
                    "Reached expected number of succeeded pods",
                    ended_at,
                );
            }
            remove_pods.extend(active_keys(false));
            if drained {
                complete(cluster, &mut job, ended_at);
            }
        } else if suspended {
            remove_pods.extend(active_keys(false));
            suspend(cluster, &mut job, now);
        } else {
            resume(cluster, &mut job, now);
            (create, create_indexes) = pods_to_create(&spec, indexed, completions, &seen, &tally);
        }
    }

    for (pod_key, counts_as_failure) in &remove_pods {
        remove_pod(cluster, &job, pod_key, *counts_as_failure, now);
    }
    for _ in 0..create {
        create_pod(cluster, &job, key, None, create_at);
    }
    for i in create_indexes {
        create_pod(cluster, &job, key, Some(i), create_at);
    }
    write_status(cluster, key, job, &uid, &tally, seen.ready, indexed);
}

/// What the Job's ended pods add up to: the counts its status keeps.
struct Tally {
    succeeded: i64,
    failed: i64,
    /// Indexed Jobs: the completion indexes that have succeeded.
    done_indexes: BTreeSet<i64>,
}

/// Counts the pods that ended since the last settle into the Job's status counts, then
/// lets those pods go (drops the tracking finalizer), so each is counted once.
fn count_ended(cluster: &mut ClusterState, job: &Value, pods: Vec<(ObjKey, Value)>) -> Tally {
    let mut tally = Tally {
        succeeded: job["status"]["succeeded"].as_i64().unwrap_or_default(),
        failed: job["status"]["failed"].as_i64().unwrap_or_default(),
        done_indexes: parse_indexes(
            job["status"]["completedIndexes"]
                .as_str()
                .unwrap_or_default(),
        ),
    };
    for (pod_key, mut pod) in pods {
        if !obj::has_finalizer(&pod, TRACKING) {
            continue;
        }
        let unbound_and_deleted =
            obj::deleting(&pod) && !obj::has_finalizer(&pod, kubelet::FINALIZER);
        if !terminal(&pod) && !unbound_and_deleted {
            continue;
        }
        if pod["status"]["phase"] == "Succeeded" {
            tally.succeeded += 1;
            if let Some(i) = index_of(&pod) {
                tally.done_indexes.insert(i);
            }
        } else {
            tally.failed += 1;
        }
        obj::remove_finalizer(&mut pod, TRACKING);
        cluster.store.update(&pod_key, pod);
    }
    tally
}

/// The Job's pods as this settle finds them, once the ended ones are counted.
struct Seen<'a> {
    /// Pods neither ended nor being deleted.
    active: Vec<&'a (ObjKey, Value)>,
    /// Pods not ended but being deleted.
    terminating: i64,
    /// Active pods that are Ready.
    ready: i64,
    /// Container restarts of the active pods, which count against `backoffLimit`.
    restarts: i64,
    /// When the Job's last pod ended: what finishing is dated from, however late a
    /// settle notices it.
    latest_end: Option<DateTime<Utc>>,
    /// When a pod was last marked for deletion.
    deleted: Option<DateTime<Utc>>,
}

impl<'a> Seen<'a> {
    /// Sorts out `current`, the Job's pods.
    fn of(current: &'a [(ObjKey, Value)]) -> Self {
        let active: Vec<&(ObjKey, Value)> = current
            .iter()
            .filter(|(_, p)| !terminal(p) && !obj::deleting(p))
            .collect();
        let terminating = current
            .iter()
            .filter(|(_, p)| !terminal(p) && obj::deleting(p))
            .count() as i64;
        let ready = active
            .iter()
            .filter(|(_, p)| {
                obj::items(&p["status"]["conditions"])
                    .iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            })
            .count() as i64;
        let restarts: i64 = active.iter().map(|(_, p)| kubelet::restarts(p)).sum();
        let latest_end = current
            .iter()
            .filter(|(_, p)| terminal(p))
            .flat_map(|(_, p)| {
                obj::items(&p["status"]["containerStatuses"])
                    .iter()
                    .filter_map(|c| obj::parse_time(&c["state"]["terminated"]["finishedAt"]))
                    .collect::<Vec<_>>()
            })
            .max();
        let deleted = current
            .iter()
            .filter_map(|(_, p)| obj::parse_time(&p["metadata"]["deletionTimestamp"]))
            .max();
        Seen {
            active,
            terminating,
            ready,
            restarts,
            latest_end,
            deleted,
        }
    }
}

/// Marks a Job that is to fail (FailureTarget): past its backoff limit, dated from the
/// last pod's end, or past its deadline `deadline_passed`, dated from the deadline.
fn mark_failure_target(
    job: &mut Value,
    over_backoff: bool,
    deadline_passed: Option<DateTime<Utc>>,
    ended_at: DateTime<Utc>,
) {
    if over_backoff {
        add_condition(
            job,
            "FailureTarget",
            "BackoffLimitExceeded",
            "Job has reached the specified backoff limit",
            ended_at,
        );
    } else if let Some(d) = deadline_passed {
        add_condition(
            job,
            "FailureTarget",
            "DeadlineExceeded",
            "Job was active longer than specified deadline",
            d,
        );
    }
}

/// Fails a Job whose pods are all gone, for the reason its FailureTarget gives.
fn fail(cluster: &mut ClusterState, job: &mut Value, target: &Value, ended_at: DateTime<Utc>) {
    let reason = target["reason"].as_str().unwrap_or_default().to_string();
    let message = target["message"].as_str().unwrap_or_default().to_string();
    let at = obj::parse_time(&target["lastTransitionTime"]).map_or(ended_at, |t| t.max(ended_at));
    add_condition(job, "Failed", &reason, &message, at);
    events::emit(
        &mut cluster.store,
        &Involved::new(job, "batch/v1", "Job"),
        Event::warning(CONTROLLER, &reason, message),
        at,
    );
}

/// Completes a Job that has its completions and whose pods are all gone.
fn complete(cluster: &mut ClusterState, job: &mut Value, ended_at: DateTime<Utc>) {
    add_condition(
        job,
        "Complete",
        "CompletionsReached",
        "Reached expected number of succeeded pods",
        ended_at,
    );
    obj::set(job, &["status", "completionTime"], ts(ended_at));
    events::emit(
        &mut cluster.store,
        &Involved::new(job, "batch/v1", "Job"),
        Event::normal(CONTROLLER, "Completed", "Job completed"),
        ended_at,
    );
}

/// Marks a suspended Job Suspended, once.
fn suspend(cluster: &mut ClusterState, job: &mut Value, now: DateTime<Utc>) {
    if condition(job, "Suspended").is_none() {
        add_condition(job, "Suspended", "JobSuspended", "Job suspended", now);
        events::emit(
            &mut cluster.store,
            &Involved::new(job, "batch/v1", "Job"),
            Event::normal(CONTROLLER, "Suspended", "Job suspended"),
            now,
        );
    }
}

/// Resumes a Job that was suspended: its Suspended condition turns False, and its
/// start time (what `activeDeadlineSeconds` runs from) starts again.
fn resume(cluster: &mut ClusterState, job: &mut Value, now: DateTime<Utc>) {
    if condition(job, "Suspended").is_some() {
        let conditions = obj::array_mut(job, &["status", "conditions"]);
        for c in conditions.iter_mut().filter(|c| c["type"] == "Suspended") {
            *c = json!({"type": "Suspended", "status": "False", "lastProbeTime": ts(now),
                        "lastTransitionTime": ts(now), "reason": "JobResumed", "message": "Job resumed"});
        }
        obj::set(job, &["status", "startTime"], ts(now));
        events::emit(
            &mut cluster.store,
            &Involved::new(job, "batch/v1", "Job"),
            Event::normal(CONTROLLER, "Resumed", "Job resumed"),
            now,
        );
    }
}

/// The pods a running Job is short of, up to `parallelism`: how many for a NonIndexed
/// Job, which indexes for an Indexed one.
fn pods_to_create(
    spec: &Value,
    indexed: bool,
    completions: Option<i64>,
    seen: &Seen<'_>,
    tally: &Tally,
) -> (usize, Vec<i64>) {
    let parallelism = spec["parallelism"].as_i64().unwrap_or(1).max(0);
    // TerminatingOrFailed: a terminating pod is replaced at once; Failed waits.
    let occupied = seen.active.len() as i64
        + if spec["podReplacementPolicy"] == "Failed" {
            seen.terminating
        } else {
            0
        };
    if indexed {
        let busy: BTreeSet<i64> = seen
            .active
            .iter()
            .filter_map(|(_, p)| index_of(p))
            .collect();
        let room = usize::try_from(parallelism - occupied).unwrap_or_default();
        let indexes = (0..completions.unwrap_or(1))
            .filter(|i| !tally.done_indexes.contains(i) && !busy.contains(i))
            .take(room)
            .collect();
        (0, indexes)
    } else {
        let wanted = match completions {
            Some(c) => parallelism.min(c - tally.succeeded),
            None if tally.succeeded > 0 => 0,
            None => parallelism,
        };
        (
            usize::try_from(wanted - occupied).unwrap_or_default(),
            Vec::new(),
        )
    }
}

/// Writes the Job's status: its counts, with active and terminating pods counted again
/// after this settle's removals and creations.
fn write_status(
    cluster: &mut ClusterState,
    key: &ObjKey,
    mut job: Value,
    uid: &str,
    tally: &Tally,
    ready: i64,
    indexed: bool,
) {
    let live_now: Vec<bool> = cluster
        .store
        .list("", "pods", Some(&key.namespace))
        .into_iter()
        .filter(|(_, p)| obj::controller_uid(p, "Job") == Some(uid) && !terminal(p))
        .map(|(_, p)| obj::deleting(p))
        .collect();
    let terminating_now = live_now.iter().filter(|d| **d).count() as i64;
    let active_now = live_now.len() as i64 - terminating_now;
    let status = obj::obj_mut(&mut job, &["status"]);
    for (field, n) in [
        ("active", active_now),
        ("succeeded", tally.succeeded),
        ("failed", tally.failed),
    ] {
        if n > 0 {
            status.insert(field.into(), json!(n));
        } else {
            status.remove(field);
        }
    }
    status.insert("ready".into(), json!(ready.min(active_now)));
    status.insert("terminating".into(), json!(terminating_now));
    status.insert("uncountedTerminatedPods".into(), json!({}));
    if indexed {
        let done = format_indexes(&tally.done_indexes);
        if done.is_empty() {
            status.remove("completedIndexes");
        } else {
            status.insert("completedIndexes".into(), json!(done));
        }
    }
    cluster.store.update(key, job);
}

/// `ttlSecondsAfterFinished`: a finished Job past its time is deleted, its pods first.
fn expire(cluster: &mut ClusterState, ctx: &SettleCtx<'_>, key: &ObjKey, job: &Value) -> bool {
    let Some(ttl) = job["spec"]["ttlSecondsAfterFinished"].as_f64() else {
        return false;
    };
    let Some(finished) = condition(job, "Complete").or_else(|| condition(job, "Failed")) else {
        return false;
    };
    let at = obj::parse_time(&finished["lastTransitionTime"]).unwrap_or(ctx.now) + scaled(ctx, ttl);
    if at > ctx.now {
        return false;
    }
    // The TTL controller deletes with foreground propagation.
    let mut job = job.clone();
    obj::add_finalizer(&mut job, "foregroundDeletion");
    cluster.store.update(key, job);
    cluster.store.delete(key, ctx.now);
    true
}

fn remove_pod(
    cluster: &mut ClusterState,
    job: &Value,
    key: &ObjKey,
    counts_as_failure: bool,
    now: DateTime<Utc>,
) {
    if !counts_as_failure {
        // Pods stopped because the Job is suspended or done are not failures.
        if let Some(mut pod) = cluster.store.get(key).cloned() {
            obj::remove_finalizer(&mut pod, TRACKING);
            cluster.store.update(key, pod);
        }
    }
    if cluster.store.delete(key, now).is_some() {
        events::emit(
            &mut cluster.store,
            &Involved::new(job, "batch/v1", "Job"),
            Event::normal(
                CONTROLLER,
                "SuccessfulDelete",
                format!("Deleted pod: {}", key.name),
            ),
            now,
        );
    }
}

fn create_pod(
    cluster: &mut ClusterState,
    job: &Value,
    job_key: &ObjKey,
    index: Option<i64>,
    now: DateTime<Utc>,
) {
    let job_name = obj::name(job).to_string();
    let uid = obj::uid(job).to_string();
    let template = &job["spec"]["template"];
    let base = match index {
        Some(i) => format!("{job_name}-{i}"),
        None => job_name.clone(),
    };
    let name = obj::generate_name(&cluster.store, "", "pods", &job_key.namespace, &base);
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": template["metadata"].clone(),
        "spec": template["spec"].clone(),
    });
    let meta = obj::obj_mut(&mut pod, &["metadata"]);
    meta.remove("creationTimestamp");
    meta.insert("name".into(), json!(name));
    meta.insert("generateName".into(), json!(format!("{base}-")));
    meta.insert("namespace".into(), json!(job_key.namespace));
    meta.insert(
        "ownerReferences".into(),
        json!([obj::controller_ref(job, "batch/v1", "Job")]),
    );
    meta.insert("finalizers".into(), json!([TRACKING]));
    for (k, v) in [
        ("batch.kubernetes.io/controller-uid", uid.as_str()),
        ("batch.kubernetes.io/job-name", job_name.as_str()),
        ("controller-uid", uid.as_str()),
        ("job-name", job_name.as_str()),
    ] {
        obj::set(&mut pod, &["metadata", "labels", k], json!(v));
    }
    if let Some(i) = index {
        obj::set(
            &mut pod,
            &["metadata", "labels", INDEX],
            json!(i.to_string()),
        );
        obj::set(
            &mut pod,
            &["metadata", "annotations", INDEX],
            json!(i.to_string()),
        );
        obj::default(&mut pod, &["spec", "hostname"], json!(base));
        for c in obj::array_mut(&mut pod, &["spec", "containers"]) {
            obj::array_mut(c, &["env"]).push(json!({
                "name": "JOB_COMPLETION_INDEX",
                "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": format!("metadata.annotations['{INDEX}']")}},
            }));
        }
    }
    let pod_key = ObjKey::new("", "pods", &job_key.namespace, &name);
    let owner = Involved::new(job, "batch/v1", "Job");
    super::create_owned(
        cluster,
        pod_key,
        pod,
        &owner,
        CONTROLLER,
        Some(format!("Created pod: {name}")),
        now,
    );
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{self, Harness};
    use super::*;

    fn job(name: &str, spec: Value, annotations: Value) -> Value {
        let mut spec = spec;
        obj::default(
            &mut spec,
            &["template"],
            json!({
                "metadata": {"annotations": annotations},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "work", "image": "busybox", "command": ["run"]}]},
            }),
        );
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": spec})
    }

    fn status(h: &Harness, name: &str) -> Value {
        h.get("batch", "jobs", "default", name)["status"].clone()
    }

    fn condition_types(h: &Harness, name: &str) -> Vec<String> {
        obj::items(&status(h, name)["conditions"])
            .iter()
            .filter(|c| c["status"] == "True")
            .filter_map(|c| c["type"].as_str().map(str::to_string))
            .collect()
    }

    fn job_pods(h: &Harness, name: &str) -> Vec<Value> {
        h.list("", "pods", "default")
            .into_iter()
            .filter(|p| obj::label(p, "batch.kubernetes.io/job-name") == Some(name))
            .collect()
    }

    #[test]
    fn a_job_runs_its_pod_to_completion() {
        let mut h = Harness::standard(vec![testkit::pool("default-pool", 1, 1)]);
        h.create(
            "batch",
            "jobs",
            "default",
            job("hello", json!({}), json!({})),
        );
        h.settle();
        let pods = job_pods(&h, "hello");
        assert_eq!(pods.len(), 1);
        let pod = &pods[0];
        assert!(
            obj::name(pod).starts_with("hello-") && obj::name(pod).len() == "hello-".len() + 5,
            "{}",
            obj::name(pod)
        );
        assert_eq!(obj::label(pod, "job-name"), Some("hello"));
        assert_eq!(pod["metadata"]["ownerReferences"][0]["controller"], true);
        assert_eq!(
            pod["metadata"]["ownerReferences"][0]["blockOwnerDeletion"],
            true
        );
        assert_eq!(status(&h, "hello")["active"], 1);
        h.run_for(8.0);
        let s = status(&h, "hello");
        assert_eq!(s["succeeded"], 1, "{s}");
        assert_eq!(s["active"], Value::Null);
        assert!(s["completionTime"].is_string());
        assert_eq!(s["uncountedTerminatedPods"], json!({}));
        assert_eq!(
            condition_types(&h, "hello"),
            vec!["SuccessCriteriaMet", "Complete"]
        );
        let pod = &job_pods(&h, "hello")[0];
        assert_eq!(pod["status"]["phase"], "Succeeded");
        assert_eq!(
            pod["status"]["containerStatuses"][0]["state"]["terminated"]["reason"],
            "Completed"
        );
        assert!(
            obj::items(&pod["metadata"]["finalizers"]).is_empty(),
            "{}",
            pod["metadata"]
        );
        let reasons = h.reasons("default", "hello");
        for r in ["SuccessfulCreate", "Completed"] {
            assert!(reasons.contains(&r.to_string()), "{reasons:?}");
        }
        let pod_reasons = h.reasons("default", obj::name(pod));
        for r in ["Scheduled", "Pulling", "Pulled", "Created", "Started"] {
            assert!(pod_reasons.contains(&r.to_string()), "{pod_reasons:?}");
        }
    }

    #[test]
    fn the_first_attempts_fail_then_one_succeeds() {
        let mut h = Harness::standard(vec![testkit::pool("default-pool", 1, 1)]);
        let spec = json!({"backoffLimit": 5});
        h.create(
            "batch",
            "jobs",
            "default",
            job(
                "retry",
                spec,
                json!({"sandbox.terrain.dev/fail-attempts": "2"}),
            ),
        );
        h.run_for(30.0);
        let s = status(&h, "retry");
        assert_eq!(s["failed"], 2, "{s}");
        assert_eq!(s["succeeded"], 1, "{s}");
        assert_eq!(
            condition_types(&h, "retry"),
            vec!["SuccessCriteriaMet", "Complete"]
        );
        let mut phases: Vec<(String, String)> = job_pods(&h, "retry")
            .iter()
            .map(|p| {
                (
                    p["metadata"]["creationTimestamp"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    p["status"]["phase"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                )
            })
            .collect();
        phases.sort();
        let phases: Vec<&str> = phases.iter().map(|(_, p)| p.as_str()).collect();
        assert_eq!(phases, ["Failed", "Failed", "Succeeded"]);
    }

    #[test]
    fn on_failure_restarts_in_place_and_counts_toward_the_limit() {
        let mut h = Harness::standard(vec![testkit::pool("default-pool", 1, 1)]);
        let mut j = job(
            "inplace",
            json!({"backoffLimit": 5}),
            json!({"sandbox.terrain.dev/fail-attempts": "2"}),
        );
        j["spec"]["template"]["spec"]["restartPolicy"] = json!("OnFailure");
        h.create("batch", "jobs", "default", j);
        h.run_for(40.0);
        let pods = job_pods(&h, "inplace");
        assert_eq!(pods.len(), 1, "one pod, restarted in place");
        assert_eq!(pods[0]["status"]["containerStatuses"][0]["restartCount"], 2);
        assert_eq!(
            pods[0]["status"]["containerStatuses"][0]["lastState"]["terminated"]["exitCode"],
            1
        );
        assert_eq!(
            condition_types(&h, "inplace"),
            vec!["SuccessCriteriaMet", "Complete"]
        );
        assert!(h
            .reasons("default", obj::name(&pods[0]))
            .contains(&"BackOff".to_string()));
    }

    #[test]
    fn exceeding_the_backoff_limit_fails_the_job() {
        let mut h = Harness::standard(vec![testkit::pool("default-pool", 1, 1)]);
        let spec = json!({"backoffLimit": 1});
        h.create(
            "batch",
            "jobs",
            "default",
            job(
                "doomed",
                spec,
                json!({"sandbox.terrain.dev/exit-code": "3"}),
            ),
        );
        h.run_for(30.0);
        let s = status(&h, "doomed");
        assert_eq!(s["failed"], 2, "{s}");
        assert_eq!(
            condition_types(&h, "doomed"),
            vec!["FailureTarget", "Failed"]
        );
        let failed = obj::items(&s["conditions"])
            .iter()
            .find(|c| c["type"] == "Failed")
            .cloned()
            .unwrap_or_default();
        assert_eq!(failed["reason"], "BackoffLimitExceeded");
        assert_eq!(
            failed["message"],
            "Job has reached the specified backoff limit"
        );
        assert!(h
            .reasons("default", "doomed")
            .contains(&"BackoffLimitExceeded".to_string()));
        let pod = &job_pods(&h, "doomed")[0];
        assert_eq!(
            pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"],
            3
        );
        assert_eq!(
            pod["status"]["containerStatuses"][0]["state"]["terminated"]["reason"],
            "Error"
        );
    }

    #[test]
    fn parallel_and_indexed_completions() {
        let mut h = Harness::standard(vec![testkit::pool("default-pool", 2, 2)]);
        h.create(
            "batch",
            "jobs",
            "default",
            job(
                "par",
                json!({"parallelism": 2, "completions": 4}),
                json!({}),
            ),
        );
        h.create(
            "batch",
            "jobs",
            "default",
            job(
                "idx",
                json!({"parallelism": 3, "completions": 3, "completionMode": "Indexed"}),
                json!({}),
            ),
        );
        h.settle();
        assert_eq!(status(&h, "par")["active"], 2);
        assert_eq!(status(&h, "idx")["active"], 3);
        let mut indexes: Vec<String> = job_pods(&h, "idx")
            .iter()
            .filter_map(|p| obj::label(p, INDEX).map(str::to_string))
            .collect();
        indexes.sort();
        assert_eq!(indexes, ["0", "1", "2"]);
        h.run_for(30.0);
        assert_eq!(status(&h, "par")["succeeded"], 4);
        assert_eq!(status(&h, "idx")["completedIndexes"], "0-2");
        assert!(condition_types(&h, "idx").contains(&"Complete".to_string()));
    }

    #[test]
    fn the_deadline_stops_a_long_job() {
        let mut h = Harness::standard(vec![testkit::pool("default-pool", 1, 1)]);
        let spec = json!({"activeDeadlineSeconds": 5});
        h.create(
            "batch",
            "jobs",
            "default",
            job(
                "slow",
                spec,
                json!({"sandbox.terrain.dev/run-seconds": "600"}),
            ),
        );
        h.run_for(20.0);
        let s = status(&h, "slow");
        let failed = obj::items(&s["conditions"])
            .iter()
            .find(|c| c["type"] == "Failed")
            .cloned()
            .unwrap_or_default();
        assert_eq!(failed["reason"], "DeadlineExceeded", "{s}");
        assert_eq!(s["failed"], 1);
        assert!(h
            .reasons("default", "slow")
            .contains(&"SuccessfulDelete".to_string()));
    }

    #[test]
    fn suspend_and_resume() {
        let mut h = Harness::standard(vec![testkit::pool("default-pool", 1, 1)]);
        h.create(
            "batch",
            "jobs",
            "default",
            job("s", json!({"suspend": true}), json!({})),
        );
        h.run_for(5.0);
        assert!(job_pods(&h, "s").is_empty());
        assert_eq!(condition_types(&h, "s"), vec!["Suspended"]);
        assert!(status(&h, "s")["startTime"].is_null());
        let mut j = h.get("batch", "jobs", "default", "s");
        j["spec"]["suspend"] = json!(false);
        h.put("batch", "jobs", "default", j);
        h.run_for(10.0);
        assert!(condition_types(&h, "s").contains(&"Complete".to_string()));
        assert!(h.reasons("default", "s").contains(&"Resumed".to_string()));
    }

    #[test]
    fn ttl_after_finished_deletes_the_job_and_its_pods() {
        let mut h = Harness::standard(vec![testkit::pool("default-pool", 1, 1)]);
        h.create(
            "batch",
            "jobs",
            "default",
            job("tmp", json!({"ttlSecondsAfterFinished": 10}), json!({})),
        );
        h.run_for(8.0);
        assert!(condition_types(&h, "tmp").contains(&"Complete".to_string()));
        assert!(
            h.exists("batch", "jobs", "default", "tmp"),
            "kept until the ttl passes"
        );
        h.run_for(15.0);
        assert!(!h.exists("batch", "jobs", "default", "tmp"));
        assert!(job_pods(&h, "tmp").is_empty());
    }

    #[test]
    fn a_preempted_pod_is_replaced() {
        let mut spot = testkit::pool("spot", 1, 1);
        spot.labels
            .insert("cloud.google.com/gke-spot".into(), "true".into());
        let mut h = Harness::standard(vec![spot]);
        let mut j = job(
            "spot",
            json!({"backoffLimit": 6}),
            json!({"sandbox.terrain.dev/run-seconds": "20"}),
        );
        j["spec"]["template"]["spec"]["nodeSelector"] =
            json!({"cloud.google.com/gke-spot": "true"});
        h.create("batch", "jobs", "default", j);
        h.run_for(4.0);
        let first = job_pods(&h, "spot").pop().expect("a pod");
        assert_eq!(first["status"]["phase"], "Running");
        let node = first["spec"]["nodeName"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(crate::k8s::controllers::preempt(
            &mut h.cluster,
            "default",
            obj::name(&first),
            h.now
        ));
        let victim = h.get("", "pods", "default", obj::name(&first));
        assert_eq!(victim["status"]["phase"], "Failed");
        assert_eq!(victim["status"]["reason"], "Terminated");
        let disruption = obj::items(&victim["status"]["conditions"])
            .iter()
            .find(|c| c["type"] == "DisruptionTarget")
            .cloned()
            .unwrap_or_default();
        assert_eq!(disruption["reason"], "TerminationByKubelet");
        assert_eq!(
            disruption["message"],
            "Pod was terminated in response to imminent node shutdown."
        );
        assert!(h
            .reasons("default", obj::name(&first))
            .contains(&"Preempted".to_string()));
        assert!(
            !super::super::nodes::is_ready(&h.get("", "nodes", "", &node)),
            "the VM comes back booting"
        );
        h.run_for(40.0);
        let s = status(&h, "spot");
        assert_eq!(s["failed"], 1, "{s}");
        assert_eq!(s["succeeded"], 1, "{s}");
        assert_eq!(job_pods(&h, "spot").len(), 2);
    }

    #[test]
    fn a_job_noticed_late_is_dated_by_its_pods() {
        let mut h = Harness::standard(vec![testkit::pool("default-pool", 1, 1)]);
        h.create(
            "batch",
            "jobs",
            "default",
            job("late", json!({}), json!({})),
        );
        h.settle();
        h.advance(600.0);
        let s = status(&h, "late");
        assert_eq!(s["succeeded"], 1);
        assert_eq!(s["startTime"], "2025-01-01T00:00:00Z");
        assert_eq!(
            s["completionTime"], "2025-01-01T00:00:05Z",
            "start 2 s + run 3 s, not when seen"
        );
    }

    #[test]
    fn sequential_completions_catch_up_in_one_late_settle() {
        let mut h = Harness::standard(vec![testkit::pool("default-pool", 1, 1)]);
        h.settle();
        h.create(
            "batch",
            "jobs",
            "default",
            job("seq", json!({"completions": 3}), json!({})),
        );
        h.advance(60.0);
        let s = status(&h, "seq");
        assert_eq!(s["succeeded"], 3, "{s}");
        assert_eq!(
            s["completionTime"], "2025-01-01T00:00:15Z",
            "three 5 s pods back to back"
        );
    }

    #[test]
    fn index_sets_round_trip() {
        for s in ["", "0", "0-2", "0-2,4", "1,3,5-7"] {
            assert_eq!(format_indexes(&parse_indexes(s)), s);
        }
    }
}
