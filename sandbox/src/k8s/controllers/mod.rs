//! The cluster's controllers, run lazily before every request: nodes from node pools, the
//! scheduler, pod phases, Jobs, Deployments, DaemonSets, volume binding, finalizers and
//! garbage collection, plus pod logs, and Kubeflow Pipelines runs (`pipelines.rs`).
//!
//! Every controller is a pure function of the stored objects and the clock: timing is read
//! from timestamps kept in the objects (creation, scheduling, container start, condition
//! transitions), never from memory, so a restarted sandbox carries on where it stopped and
//! a settle that finds nothing due writes nothing.

mod apps;
mod events;
mod gc;
mod images;
mod jobs;
mod kubelet;
mod logs;
mod nodes;
mod pipelines;
mod scheduler;
mod services;
mod storage;
#[cfg(test)]
pub(super) mod testkit;
mod workers;

use chrono::{DateTime, Duration, Utc};
use serde_json::Value;

use super::store::ObjKey;
use super::{defaults, obj, ClusterState, SettleCtx};
use events::{Event, Involved};
pub(super) use images::{is_redis_pod, redis_container};
pub(crate) use workers::Drained;

/// Base durations in seconds, multiplied by `SettleCtx::scale`. Durations users give in
/// objects (`activeDeadlineSeconds`, `ttlSecondsAfterFinished`, the run-seconds annotation)
/// are simulated time too, so a scaled sandbox keeps their order; a container's own
/// `sleep N` is real time (a helper pod must stay up for the exec it exists for).
mod base {
    /// Scheduling to containers running (image pull, create, start).
    pub const POD_START: f64 = 2.0;
    /// A job-like container's run time when nothing says otherwise.
    pub const JOB_RUN: f64 = 3.0;
    /// A deleted pod's containers stopping.
    pub const KILL_GRACE: f64 = 1.0;
    /// First restart delay of a failed container; it doubles per restart up to `BACKOFF_MAX`.
    pub const BACKOFF: f64 = 1.0;
    pub const BACKOFF_MAX: f64 = 30.0;
    /// A new VM joining the cluster (a preempted node's replacement).
    pub const NODE_BOOT: f64 = 3.0;
    /// The autoscaler (or Autopilot) adding a node for a pending pod.
    pub const SCALE_UP: f64 = 5.0;
    /// How long an autoscaled node stays empty before it is removed.
    pub const SCALE_DOWN: f64 = 60.0;
    /// A dynamic provisioner creating a volume.
    pub const PROVISION: f64 = 1.0;
    /// A cloud load balancer getting its address.
    pub const LOAD_BALANCER: f64 = 2.0;
}

/// `secs` of simulated time at the context's scale.
fn scaled(ctx: &SettleCtx<'_>, secs: f64) -> Duration {
    Duration::milliseconds((secs * ctx.scale.max(0.0) * 1000.0).round() as i64)
}

/// Stores an object a controller made, defaulted and checked as the API server would,
/// and records SuccessfulCreate with `message` (when there is one) or FailedCreate, with
/// the reasons, on its owner.
fn create_owned(
    cluster: &mut ClusterState,
    key: ObjKey,
    mut object: Value,
    owner: &Involved<'_>,
    component: &str,
    message: Option<String>,
    now: DateTime<Utc>,
) -> Option<Value> {
    match defaults::on_create(&key, &mut object, cluster) {
        Ok(()) => {
            let stored = cluster.store.insert_new(key, object, now);
            if let Some(message) = message {
                events::emit(
                    &mut cluster.store,
                    owner,
                    Event::normal(component, "SuccessfulCreate", message),
                    now,
                );
            }
            Some(stored)
        }
        Err(causes) => {
            let why: Vec<String> = causes
                .iter()
                .map(|(field, m)| format!("{field}: {m}"))
                .collect();
            let message = format!(
                "Error creating: {} is invalid: {}",
                key.describe(),
                why.join(", ")
            );
            events::emit(
                &mut cluster.store,
                owner,
                Event::warning(component, "FailedCreate", message),
                now,
            );
            None
        }
    }
}

/// Brings every object up to date with the clock.
pub(crate) fn settle(cluster: &mut ClusterState, ctx: &SettleCtx<'_>) {
    // Rounds until nothing changes (a few at most), so what one controller's work makes
    // due for another (a Job's next pod once one finished) happens in the same settle.
    for _ in 0..8 {
        let before = cluster.store.resource_version;
        round(cluster, ctx);
        if cluster.store.resource_version == before {
            break;
        }
    }
}

fn round(cluster: &mut ClusterState, ctx: &SettleCtx<'_>) {
    gc::namespaces(cluster, ctx);
    nodes::sync(cluster, ctx);
    storage::bind(cluster, ctx);
    apps::sync(cluster, ctx);
    jobs::sync(cluster, ctx);
    scheduler::schedule(cluster, ctx);
    // Spot reclaims land before the kubelet's pass, so a pod due to be reclaimed halfway
    // is still running when a late settle catches up past its end.
    pipelines::reclaim(cluster, ctx);
    kubelet::sync(cluster, ctx);
    // Once more, so what the kubelet just did (a pod that finished, a pod that became
    // ready) shows in the owners' status within the same round.
    jobs::sync(cluster, ctx);
    apps::sync(cluster, ctx);
    services::sync(cluster, ctx);
    // Kubeflow Pipelines runs follow their task pods and start the next tasks.
    pipelines::sync(cluster, ctx);
    storage::protect(cluster, ctx);
    nodes::scale_down(cluster, ctx);
    gc::collect(cluster, ctx);
    cluster.store.finish_deletions();
}

/// The log of a pod's container (`None`: its only or first container).
pub(crate) fn pod_logs(
    cluster: &ClusterState,
    namespace: &str,
    pod: &str,
    container: Option<&str>,
    now: DateTime<Utc>,
) -> Result<String, String> {
    logs::pod_logs(cluster, namespace, pod, container, now)
}

/// Preempts a running pod as a spot reclaim would; false when there is no such pod.
pub(crate) fn preempt(
    cluster: &mut ClusterState,
    namespace: &str,
    pod: &str,
    now: DateTime<Utc>,
) -> bool {
    kubelet::preempt(cluster, namespace, pod, now)
}

/// Stops whatever backs the cluster's pods (the cluster is being deleted).
pub(crate) fn teardown(cluster: &ClusterState, ctx: &SettleCtx<'_>) {
    for (_, pod) in cluster.store.list("", "pods", None) {
        if images::is_redis_pod(pod) {
            ctx.processes.stop(obj::uid(pod));
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::testkit::{self, Harness};
    use crate::k8s::processes::Processes;
    use crate::k8s::store::ObjKey;

    fn workload(h: &mut Harness) {
        h.create(
            "",
            "persistentvolumes",
            "",
            testkit::nfs_pv("nfs", "10.0.0.2", "/NFSVol", "1Ti"),
        );
        h.create("", "persistentvolumeclaims", "default", json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "claim"},
            "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "", "resources": {"requests": {"storage": "1Gi"}}},
        }));
        h.create("apps", "deployments", "default", json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "c", "image": "nginx"}],
                                           "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "claim"}}]}}},
        }));
        h.create(
            "",
            "services",
            "default",
            json!({
                "apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
                "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]},
            }),
        );
        h.create("apps", "daemonsets", "default", json!({
            "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent"},
            "spec": {"selector": {"matchLabels": {"app": "agent"}},
                     "template": {"metadata": {"labels": {"app": "agent"}}, "spec": {"containers": [{"name": "a", "image": "agent"}]}}},
        }));
        h.create("batch", "jobs", "default", json!({
            "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train"},
            "spec": {"completions": 2, "template": {"metadata": {"annotations": {"sandbox.terrain.dev/run-seconds": "10"}},
                     "spec": {"restartPolicy": "Never", "containers": [{"name": "t", "image": "trainer"}]}}},
        }));
    }

    #[test]
    fn a_settled_cluster_stays_put() {
        let mut h = Harness::standard(vec![testkit::pool("default-pool", 2, 2)]);
        workload(&mut h);
        h.run_for(40.0);
        let job = h.get("batch", "jobs", "default", "train");
        assert_eq!(job["status"]["succeeded"], 2, "{}", job["status"]);
        let version = h.cluster.store.resource_version;
        h.settle();
        h.advance(5.0);
        assert_eq!(
            h.cluster.store.resource_version, version,
            "nothing due, nothing written"
        );
    }

    #[test]
    fn a_restarted_sandbox_carries_on_from_the_stored_objects() {
        let mut h = Harness::standard(vec![testkit::pool("default-pool", 2, 2)]);
        workload(&mut h);
        h.run_for(4.0);
        assert_eq!(
            h.get("batch", "jobs", "default", "train")["status"]["active"],
            1
        );
        let saved = serde_json::to_string(&h.cluster).expect("the cluster serializes");
        h.cluster = serde_json::from_str(&saved).expect("and reads back");
        h.processes = Processes::new(h.dir.path().to_path_buf());
        h.run_for(30.0);
        let job = h.get("batch", "jobs", "default", "train");
        assert_eq!(job["status"]["succeeded"], 2, "{}", job["status"]);
        let d = h.get("apps", "deployments", "default", "web");
        assert_eq!(d["status"]["readyReplicas"], 2);
        let names = h.names("", "pods", "default");
        assert_eq!(
            names.iter().filter(|n| n.starts_with("web-")).count(),
            2,
            "no pod made twice: {names:?}"
        );
    }

    #[test]
    fn at_scale_zero_everything_happens_on_the_next_settle() {
        let mut h = Harness::standard(vec![testkit::pool("default-pool", 2, 2)]);
        h.scale = 0.0;
        workload(&mut h);
        h.settle();
        assert_eq!(
            h.get("batch", "jobs", "default", "train")["status"]["succeeded"],
            2
        );
        assert_eq!(
            h.get("apps", "deployments", "default", "web")["status"]["readyReplicas"],
            2
        );
        let ep = h.get("", "endpoints", "default", "web");
        assert_eq!(
            ep["subsets"][0]["addresses"].as_array().map(Vec::len),
            Some(2),
            "{ep}"
        );
    }

    #[test]
    fn objects_of_the_wrong_shape_do_not_break_a_settle() {
        let mut h = Harness::standard(vec![testkit::pool("default-pool", 1, 1)]);
        let odd = [
            (
                "",
                "pods",
                "default",
                json!({"metadata": {"name": "a"}, "spec": "x"}),
            ),
            (
                "",
                "pods",
                "default",
                json!({"metadata": {"name": "b"}, "spec": {"containers": "x", "volumes": [1]}, "status": {"containerStatuses": [1, "x"]}}),
            ),
            (
                "",
                "pods",
                "default",
                json!({"metadata": {"name": "c", "finalizers": "x"}, "spec": {"nodeName": "gone", "containers": [{"name": 1}]}}),
            ),
            (
                "batch",
                "jobs",
                "default",
                json!({"metadata": {"name": "j"}, "spec": 5}),
            ),
            (
                "batch",
                "jobs",
                "default",
                json!({"metadata": {"name": "k", "uid": "u"}, "spec": {"template": [], "parallelism": "x"}}),
            ),
            (
                "apps",
                "deployments",
                "default",
                json!({"metadata": {"name": "d"}, "spec": {"template": [], "replicas": -3}}),
            ),
            (
                "apps",
                "daemonsets",
                "default",
                json!({"metadata": {"name": "e"}, "spec": {"template": {"spec": {"tolerations": "x"}}}}),
            ),
            (
                "apps",
                "statefulsets",
                "default",
                json!({"metadata": {"name": "f"}, "spec": {"volumeClaimTemplates": "x"}}),
            ),
            (
                "",
                "services",
                "default",
                json!({"metadata": {"name": "s"}, "spec": {"selector": {"a": "b"}, "ports": "x"}}),
            ),
            (
                "",
                "persistentvolumes",
                "",
                json!({"metadata": {"name": "v"}, "spec": {"claimRef": "x", "capacity": 5}}),
            ),
            (
                "",
                "persistentvolumeclaims",
                "default",
                json!({"metadata": {"name": "p"}, "spec": null}),
            ),
            (
                "",
                "namespaces",
                "",
                json!({"metadata": {"name": "n", "deletionTimestamp": "garbage"}, "spec": {"finalizers": "x"}}),
            ),
            (
                "",
                "configmaps",
                "default",
                json!({"metadata": {"name": "m", "ownerReferences": "x"}}),
            ),
        ];
        for (group, resource, namespace, object) in odd {
            let name = object["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            h.cluster.store.insert_new(
                ObjKey::new(group, resource, namespace, &name),
                object,
                h.now,
            );
        }
        h.run_for(10.0);
        assert!(h.exists("", "namespaces", "", "default"));
    }
}
