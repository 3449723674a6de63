//! The Kubernetes side of the sandbox: one emulated API server per emulated cluster (GKE
//! and EKS), transport-neutral and naming no cloud: what is a cloud's (node shapes,
//! machine families, accelerator labels) comes through [`CloudSide`] (`cloud.rs`), which
//! `gcp/kube.rs` and `aws/kube.rs` implement. This layer sits above `common/` and
//! `http.rs` and below the clouds and the server (`server/kube.rs` serves each cluster on
//! its own loopback TLS port); nothing here imports them. This file owns the
//! per-cluster state kept in the sandbox world ([`KubeState`], [`ClusterState`]), the
//! facts the cloud side hands over (flavor, CA, node pools with their labels, taints and
//! resources) and keeping the clusters in step with the cloud; `store.rs` the objects,
//! `api/` the handlers, `request.rs` the request they take.

pub(crate) mod api;
pub(crate) mod apply;
pub(crate) mod cloud;
pub(crate) mod controllers;
pub(crate) mod defaults;
pub(crate) mod discovery;
pub(crate) mod environment;
pub(crate) mod jail;
pub(crate) mod kfp;
pub(crate) mod kubeconfig;
pub(crate) mod obj;
pub(crate) mod openapi;
pub(crate) mod processes;
pub(crate) mod protobuf;
pub(crate) mod request;
pub(crate) mod schema;
pub(crate) mod spdy;
pub(crate) mod status;
pub(crate) mod store;
pub(crate) mod stream;
pub(crate) mod table;
pub(crate) mod volumes;

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::json;

pub(crate) use cloud::CloudSide;
pub(crate) use store::{ObjKey, Store};

/// Every emulated cluster's Kubernetes API, by cluster key (`gke/projects/p/locations/l/clusters/n`).
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub(crate) struct KubeState {
    #[serde(default)]
    pub clusters: BTreeMap<String, ClusterState>,
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
    /// The nodes' kubelet version (`v1.32.4-gke.1415000`); `None`: the control plane's.
    #[serde(default)]
    pub version: Option<String>,
}

/// One emulated cluster's API server.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ClusterState {
    /// The cluster's name in its cloud (for kubeconfig contexts and messages).
    pub name: String,
    /// Its cloud, as the cloud side hands it over on every reconcile.
    #[serde(
        serialize_with = "cloud::serialize",
        skip_deserializing,
        default = "cloud::unknown"
    )]
    pub cloud: Arc<dyn CloudSide>,
    /// The loopback port the API server listens on (0 until first bound).
    pub port: u16,
    pub ca_cert_pem: String,
    pub ca_key_pem: String,
    /// Refreshed from the cloud side on every request.
    #[serde(default)]
    pub node_pools: Vec<NodePoolInfo>,
    /// The API server's version (`/version`'s gitVersion), as the cloud reports the
    /// control plane's: one source for `/version`, the nodes and the cloud API.
    #[serde(default = "default_version")]
    pub version: String,
    pub created: DateTime<Utc>,
    #[serde(default)]
    pub store: Store,
    /// What each run of a batch-ML worker took from its queue, by pod, container and
    /// restart (see `controllers::workers`).
    #[serde(default)]
    pub drained: std::collections::BTreeMap<String, controllers::Drained>,
    /// The Kubeflow Pipelines API's own database (pipelines, versions, experiments,
    /// runs), served behind the `ml-pipeline` Service once KFP is installed.
    #[serde(default, skip_serializing_if = "kfp::KfpState::is_empty")]
    pub kfp: kfp::KfpState,
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
    /// Spot VMs reclaimed under pipeline task pods (the fault switch); `None`: never.
    pub spot_reclaims: Option<crate::faults::SpotReclaims>,
}

/// A volume as seen from inside a container: its mount path and the host directory
/// behind it (an NFS share's directory, an emptyDir…).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mount {
    pub path: String,
    pub host: std::path::PathBuf,
    pub read_only: bool,
}

/// The version of a cluster saved before clusters had their own.
fn default_version() -> String {
    "v1.31.8-sandbox".to_string()
}

/// The `kubernetes` Service's address: the first of the Service range (10.96.0.0/16).
const API_SERVICE_IP: &str = "10.96.0.1";
/// The control plane's address behind it, in the cluster's private range.
const API_SERVER_IP: &str = "172.16.0.2";

/// Namespaces every cluster starts with.
const INITIAL_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public", "kube-node-lease"];

impl ClusterState {
    /// A fresh API server's state: the initial namespaces and the `kubernetes` Service.
    pub(crate) fn new(
        name: &str,
        cloud: Arc<dyn CloudSide>,
        ca_cert_pem: String,
        ca_key_pem: String,
        node_pools: Vec<NodePoolInfo>,
        version: String,
        now: DateTime<Utc>,
    ) -> ClusterState {
        let mut store = Store::default();
        for ns in INITIAL_NAMESPACES {
            store.insert_new(
                ObjKey::new("", "namespaces", "", ns),
                json!({
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": ns, "labels": {"kubernetes.io/metadata.name": ns}},
                    "spec": {"finalizers": ["kubernetes"]},
                    "status": {"phase": "Active"},
                }),
                now,
            );
        }
        // The Service every API server keeps for itself, and its Endpoints: in-cluster
        // clients find the API at `kubernetes.default`.
        store.insert_new(
            ObjKey::new("", "services", "default", "kubernetes"),
            json!({
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "kubernetes", "namespace": "default",
                             "labels": {"component": "apiserver", "provider": "kubernetes"}},
                "spec": {
                    "type": "ClusterIP",
                    "clusterIP": API_SERVICE_IP,
                    "clusterIPs": [API_SERVICE_IP],
                    "ipFamilies": ["IPv4"],
                    "ipFamilyPolicy": "SingleStack",
                    "internalTrafficPolicy": "Cluster",
                    "sessionAffinity": "None",
                    "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 443}],
                },
                "status": {"loadBalancer": {}},
            }),
            now,
        );
        store.insert_new(
            ObjKey::new("", "endpoints", "default", "kubernetes"),
            json!({
                "apiVersion": "v1",
                "kind": "Endpoints",
                "metadata": {"name": "kubernetes", "namespace": "default",
                             "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
                "subsets": [{
                    "addresses": [{"ip": API_SERVER_IP}],
                    "ports": [{"name": "https", "port": 443, "protocol": "TCP"}],
                }],
            }),
            now,
        );
        ClusterState {
            name: name.to_string(),
            cloud,
            port: 0,
            ca_cert_pem,
            ca_key_pem,
            node_pools,
            version,
            created: now,
            store,
            drained: std::collections::BTreeMap::new(),
            kfp: kfp::KfpState::default(),
        }
    }

    /// Creates the cloud's system add-ons ([`CloudSide::system_objects`]) in a new cluster,
    /// defaulted as an API create is, so they carry what the API server fills (uids,
    /// timestamps, pod template defaults, the DNS Service's fixed address checked against
    /// the others) and the controllers run them like any workload. Kept apart from
    /// [`Self::new`] because the manifests depend on the cluster's key (EKS's image
    /// registries are regional), which only the reconcile knows.
    pub(crate) fn add_system_objects(&mut self, key: &str, now: DateTime<Utc>) {
        let types = discovery::all(self);
        for mut object in self.cloud.system_objects(key, &self.version) {
            let api_version = object["apiVersion"].as_str().unwrap_or_default();
            let kind = object["kind"].as_str().unwrap_or_default();
            let Some(rt) = types
                .iter()
                .find(|t| t.api_version() == api_version && t.kind == kind)
            else {
                continue;
            };
            let obj_key = rt.key(
                object["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or("default"),
                object["metadata"]["name"].as_str().unwrap_or_default(),
            );
            if self.store.get(&obj_key).is_some() {
                continue;
            }
            // The clouds' unit tests check that every manifest is accepted.
            if defaults::on_create(&obj_key, &mut object, self).is_err() {
                continue;
            }
            self.store.insert_new(obj_key, object, now);
        }
    }
}

/// A cluster as its cloud reports it, in cloud-neutral terms.
#[derive(Debug, Clone)]
pub(crate) struct CloudCluster {
    /// `gke/projects/p/locations/l/clusters/n`.
    pub key: String,
    pub name: String,
    pub cloud: Arc<dyn CloudSide>,
    pub ca_cert_pem: String,
    pub ca_key_pem: String,
    pub node_pools: Vec<NodePoolInfo>,
    /// The control plane's version in the API server's form (`v1.32.4-gke.1415000`).
    pub version: String,
}

impl KubeState {
    /// Makes the clusters whose keys start with `prefix` (one cloud's) match what that
    /// cloud reports: new ones get an API server state with the cloud's system add-ons,
    /// existing ones fresh node pools, and the ones that are gone are removed and returned
    /// for teardown.
    pub(crate) fn reconcile(
        &mut self,
        prefix: &str,
        clouds: Vec<CloudCluster>,
        now: DateTime<Utc>,
    ) -> Vec<(String, ClusterState)> {
        let gone: Vec<String> = self
            .clusters
            .keys()
            .filter(|k| k.starts_with(prefix) && !clouds.iter().any(|c| &c.key == *k))
            .cloned()
            .collect();
        let removed = gone
            .into_iter()
            .filter_map(|k| self.clusters.remove(&k).map(|c| (k, c)))
            .collect();
        for c in clouds {
            match self.clusters.get_mut(&c.key) {
                Some(existing) => {
                    existing.cloud = c.cloud;
                    if existing.node_pools != c.node_pools {
                        existing.node_pools = c.node_pools;
                    }
                    // An upgrade of the control plane shows at `/version` at once.
                    existing.version = c.version;
                }
                None => {
                    let mut state = ClusterState::new(
                        &c.name,
                        c.cloud,
                        c.ca_cert_pem,
                        c.ca_key_pem,
                        c.node_pools,
                        c.version,
                        now,
                    );
                    state.add_system_objects(&c.key, now);
                    self.clusters.insert(c.key, state);
                }
            }
        }
        removed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn reconcile_adds_refreshes_and_removes_clusters() {
        let now = Utc::now();
        let cloud = |key: &str, pools: Vec<NodePoolInfo>| CloudCluster {
            key: key.into(),
            name: key.rsplit('/').next().unwrap_or_default().into(),
            cloud: controllers::testkit::cloud(false),
            ca_cert_pem: String::new(),
            ca_key_pem: String::new(),
            node_pools: pools,
            version: "v1.32.4-gke.1415000".into(),
        };
        let mut state = KubeState::default();
        let removed = state.reconcile(
            "gke/",
            vec![cloud("gke/a", vec![]), cloud("gke/b", vec![])],
            now,
        );
        assert!(removed.is_empty());
        let ns: Vec<String> = state.clusters["gke/a"]
            .store
            .list("", "namespaces", None)
            .into_iter()
            .map(|(k, _)| k.name.clone())
            .collect();
        assert_eq!(
            ns,
            ["default", "kube-node-lease", "kube-public", "kube-system"]
        );
        // The cluster's version is its cloud's control-plane version.
        assert_eq!(state.clusters["gke/a"].version, "v1.32.4-gke.1415000");
        // Every API server keeps the `kubernetes` Service and its Endpoints.
        let store = &state.clusters["gke/a"].store;
        let svc = store
            .get(&ObjKey::new("", "services", "default", "kubernetes"))
            .expect("default/kubernetes");
        assert_eq!(svc["spec"]["clusterIP"], "10.96.0.1");
        assert_eq!(svc["spec"]["ports"][0]["port"], 443);
        let ep = store
            .get(&ObjKey::new("", "endpoints", "default", "kubernetes"))
            .expect("its endpoints");
        assert_eq!(ep["subsets"][0]["ports"][0]["port"], 443);
        let pools = vec![controllers::testkit::pool("p", 2, 2)];
        let removed = state.reconcile("gke/", vec![cloud("gke/a", pools.clone())], now);
        assert_eq!(
            removed.into_iter().map(|(k, _)| k).collect::<Vec<_>>(),
            ["gke/b"]
        );
        assert_eq!(state.clusters["gke/a"].node_pools, pools);
        state.clusters.insert(
            "eks/x".into(),
            ClusterState::new(
                "x",
                controllers::testkit::cloud(false),
                String::new(),
                String::new(),
                vec![],
                "v1.31.5-eks-5d632ec".into(),
                now,
            ),
        );
        assert!(state
            .reconcile("gke/", vec![], now)
            .iter()
            .all(|(k, _)| k.starts_with("gke/")));
        assert!(
            state.clusters.contains_key("eks/x"),
            "another cloud's clusters stay"
        );
    }
}
