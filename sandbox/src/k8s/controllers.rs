//! The cluster's controllers, run lazily before every request: nodes from node pools, the
//! scheduler, pod phases, Jobs, Deployments, DaemonSets, volume binding, finalizers and
//! garbage collection, plus pod logs.

use chrono::{DateTime, Utc};

use super::{ClusterState, SettleCtx};

/// Brings every object up to date with the clock.
pub(crate) fn settle(cluster: &mut ClusterState, ctx: &SettleCtx<'_>) {
    let _ = (cluster, ctx);
}

/// The log of a pod's container (`None`: its only or first container).
pub(crate) fn pod_logs(
    cluster: &ClusterState,
    namespace: &str,
    pod: &str,
    container: Option<&str>,
    now: DateTime<Utc>,
) -> Result<String, String> {
    let _ = (cluster, namespace, pod, container, now);
    Ok(String::new())
}

/// Preempts a running pod as a spot reclaim would; false when there is no such pod.
pub(crate) fn preempt(cluster: &mut ClusterState, namespace: &str, pod: &str, now: DateTime<Utc>) -> bool {
    let _ = (cluster, namespace, pod, now);
    false
}

/// Stops whatever backs the cluster's pods (the cluster is being deleted).
pub(crate) fn teardown(cluster: &ClusterState, ctx: &SettleCtx<'_>) {
    let _ = (cluster, ctx);
}
