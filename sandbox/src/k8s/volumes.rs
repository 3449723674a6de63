//! Where pods' volumes live on the host (NFS shares behind PersistentVolumes, emptyDirs),
//! and what exec and port-forward reach for a pod.

use std::net::SocketAddr;
use std::path::Path;

use super::processes::Processes;
use super::{ClusterState, Mount};

/// The mounts of a pod's container (`None`: the first container), or why there are none
/// (no such pod, not running, no such container).
pub(crate) fn mounts(
    cluster: &ClusterState,
    data_dir: &Path,
    namespace: &str,
    pod: &str,
    container: Option<&str>,
) -> Result<Vec<Mount>, String> {
    let _ = (cluster, data_dir, namespace, pod, container);
    Ok(Vec::new())
}

/// The address behind a pod's port, when a process listens there.
pub(crate) fn port_target(
    cluster: &ClusterState,
    processes: &Processes,
    namespace: &str,
    pod: &str,
    port: u16,
) -> Option<SocketAddr> {
    let _ = (cluster, processes, namespace, pod, port);
    None
}

/// The redis-server behind a pod, when it has one.
pub(crate) fn redis_of(cluster: &ClusterState, processes: &Processes, namespace: &str, pod: &str) -> Option<SocketAddr> {
    let _ = (cluster, processes, namespace, pod);
    None
}
