//! The Kubernetes side of the sandbox: one emulated API server per emulated cluster (GKE
//! now, EKS later), each on its own loopback TLS port with a serving certificate signed
//! by the cluster's CA. This file owns the per-cluster state kept in the sandbox world
//! ([`KubeState`], [`ClusterState`]) and the facts the cloud side hands over (flavor,
//! CA, node pools); `store.rs` the objects.

pub(crate) mod controllers;
pub(crate) mod defaults;
pub(crate) mod processes;
pub(crate) mod store;
pub(crate) mod stream;
pub(crate) mod volumes;

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

pub(crate) use store::{ObjKey, Store};

/// Every emulated cluster's Kubernetes API, by cluster key (`gke/projects/p/locations/l/clusters/n`).
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub(crate) struct KubeState {
    #[serde(default)]
    pub clusters: BTreeMap<String, ClusterState>,
}

/// Which cloud made the cluster; decides node labels and how Autopilot-style scheduling works.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub(crate) enum Flavor {
    Gke { autopilot: bool },
    Eks,
}

/// A node pool (GKE) or node group (EKS) as the cloud side describes it; the cluster's
/// Node objects are derived from these.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct NodePoolInfo {
    pub name: String,
    pub machine_type: String,
    /// Nodes the pool has now.
    pub node_count: i64,
    /// The autoscaler's ceiling (equal to `node_count` without autoscaling).
    pub max_nodes: i64,
    /// Labels every node carries (pool name, accelerator, spot, instance type…).
    pub labels: BTreeMap<String, String>,
    /// `{key, value, effect}` objects, as in a Node's `spec.taints`.
    pub taints: Vec<serde_json::Value>,
    /// Extended resources every node offers: `nvidia.com/gpu` → `"1"`, `google.com/tpu` → `"4"`.
    pub extended_resources: BTreeMap<String, String>,
    pub cpu: String,
    pub memory: String,
}

/// One emulated cluster's API server.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ClusterState {
    /// The cluster's name in its cloud (for kubeconfig contexts and messages).
    pub name: String,
    pub flavor: Flavor,
    /// The loopback port the API server listens on (0 until first bound).
    pub port: u16,
    pub ca_cert_pem: String,
    pub ca_key_pem: String,
    /// Refreshed from the cloud side on every request.
    #[serde(default)]
    pub node_pools: Vec<NodePoolInfo>,
    pub created: DateTime<Utc>,
    #[serde(default)]
    pub store: Store,
}

/// What a controller pass needs besides the cluster: the sandbox clock, the time scale
/// of simulated durations, the processes backing pods, and the directory volumes live in.
pub(crate) struct SettleCtx<'a> {
    pub now: DateTime<Utc>,
    /// Multiplies every simulated duration (pod start, job run); 0 = instant.
    pub scale: f64,
    pub processes: &'a processes::Processes,
    /// The sandbox's data directory: NFS shares, emptyDirs and Redis data live under it.
    pub data_dir: &'a std::path::Path,
}

/// A volume as seen from inside a container: its mount path and the host directory
/// behind it (an NFS share's directory, an emptyDir…).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mount {
    pub path: String,
    pub host: std::path::PathBuf,
    pub read_only: bool,
}
