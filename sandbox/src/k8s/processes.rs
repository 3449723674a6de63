//! The real processes behind emulated pods: a pod whose image is Redis is backed by a
//! `redis-server` on a loopback port, so queue items land in a real Redis.

use std::net::SocketAddr;
use std::path::PathBuf;

/// The state of the redis-server backing one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RedisStatus {
    /// Started, not yet accepting connections.
    Starting,
    Ready(SocketAddr),
    /// It exited or could not start; the message says why.
    Failed(String),
    /// No redis-server binary on this machine; the message says how to install one.
    Unavailable(String),
}

/// The processes of one sandbox; cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct Processes {
    data_dir: PathBuf,
}

impl Processes {
    pub(crate) fn new(data_dir: PathBuf) -> Processes {
        Processes { data_dir }
    }

    /// Starts, if it is not running, the redis-server backing the pod with uid `pod_uid`,
    /// and reports its state without blocking.
    pub(crate) fn redis(&self, pod_uid: &str) -> RedisStatus {
        let _ = (&self.data_dir, pod_uid);
        RedisStatus::Unavailable("not yet".into())
    }

    /// The address of the pod's redis-server, when it is ready.
    pub(crate) fn redis_addr(&self, pod_uid: &str) -> Option<SocketAddr> {
        match self.redis(pod_uid) {
            RedisStatus::Ready(a) => Some(a),
            _ => None,
        }
    }

    /// Stops the pod's process (and forgets its data), if any.
    pub(crate) fn stop(&self, pod_uid: &str) {
        let _ = pod_uid;
    }

    /// Stops every process (sandbox shutdown); data stays for the next start.
    pub(crate) fn stop_all(&self) {}
}
