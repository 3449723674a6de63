//! The Kubernetes side of the sandbox: one emulated API server per emulated cluster (GKE
//! now, EKS later), each on its own loopback TLS port with a serving certificate signed
//! by the cluster's CA. This file owns the per-cluster state kept in the sandbox world
//! ([`KubeState`], [`ClusterState`]), the facts the cloud side hands over (flavor, CA,
//! node pools — with the labels, taints and resources GKE gives its nodes) and keeping
//! the clusters in step with the cloud; `store.rs` the objects, `server.rs` the
//! listeners, `api.rs` the handlers.

pub(crate) mod api;
pub(crate) mod apply;
pub(crate) mod controllers;
pub(crate) mod defaults;
pub(crate) mod discovery;
pub(crate) mod kubeconfig;
pub(crate) mod processes;
pub(crate) mod server;
pub(crate) mod status;
pub(crate) mod store;
pub(crate) mod stream;
pub(crate) mod table;
pub(crate) mod volumes;

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::gcp::container::{KubeCluster, KubePool};

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
    pub flavor: Flavor,
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
        flavor: Flavor,
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
            flavor,
            port: 0,
            ca_cert_pem,
            ca_key_pem,
            node_pools,
            version,
            created: now,
            store,
            drained: std::collections::BTreeMap::new(),
        }
    }
}

/// A cluster as its cloud reports it, in cloud-neutral terms.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CloudCluster {
    /// `gke/projects/p/locations/l/clusters/n`.
    pub key: String,
    pub name: String,
    pub flavor: Flavor,
    pub ca_cert_pem: String,
    pub ca_key_pem: String,
    pub node_pools: Vec<NodePoolInfo>,
    /// The control plane's version in the API server's form (`v1.32.4-gke.1415000`).
    pub version: String,
}

impl KubeState {
    /// Makes the clusters whose keys start with `prefix` (one cloud's) match what that
    /// cloud reports: new ones get an API server state, existing ones fresh node pools,
    /// and the ones that are gone are removed and returned for teardown.
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
                    if existing.node_pools != c.node_pools {
                        existing.node_pools = c.node_pools;
                    }
                    // An upgrade of the control plane shows at `/version` at once.
                    existing.version = c.version;
                }
                None => {
                    let state = ClusterState::new(
                        &c.name,
                        c.flavor,
                        c.ca_cert_pem,
                        c.ca_key_pem,
                        c.node_pools,
                        c.version,
                        now,
                    );
                    self.clusters.insert(c.key, state);
                }
            }
        }
        removed
    }
}

/// The kubeconfig context name of a cluster, as its cloud's CLI names it
/// (`gke_<project>_<location>_<name>` for GKE).
pub(crate) fn context_name(key: &str, name: &str) -> String {
    // `aws eks update-kubeconfig` names contexts by the cluster ARN.
    if let Some(region) = key.strip_prefix("eks/").and_then(|k| k.split('/').next()) {
        return format!(
            "arn:aws:eks:{region}:{}:cluster/{name}",
            crate::aws::ACCOUNT
        );
    }
    match key
        .strip_prefix("gke/")
        .map(|k| k.split('/').collect::<Vec<_>>())
    {
        Some(parts) => match parts.as_slice() {
            ["projects", project, "locations", location, "clusters", cluster] => {
                format!("gke_{project}_{location}_{cluster}")
            }
            _ => name.to_string(),
        },
        None => name.to_string(),
    }
}

/// The GKE clusters in cloud-neutral terms.
pub(crate) fn gke_clusters(clusters: Vec<KubeCluster>) -> Vec<CloudCluster> {
    clusters
        .into_iter()
        .map(|c| CloudCluster {
            node_pools: c.pools.iter().map(gke_node_pool).collect(),
            version: format!("v{}", c.version),
            key: c.key,
            name: c.name,
            flavor: Flavor::Gke {
                autopilot: c.autopilot,
            },
            ca_cert_pem: c.ca_cert_pem,
            ca_key_pem: c.ca_key_pem,
        })
        .collect()
}

/// vCPUs and memory (MiB) of a Compute Engine machine type; unknown types count as
/// e2-medium.
fn machine_shape(machine_type: &str) -> (i64, i64) {
    const GIB: f64 = 1024.0;
    let parts: Vec<&str> = machine_type.split('-').collect();
    let n = |s: &str| s.trim_end_matches(['g', 't']).parse::<i64>().ok();
    let shape = match parts.as_slice() {
        ["e2", "micro"] => Some((2, 1.0)),
        ["e2", "small"] => Some((2, 2.0)),
        ["e2", "medium"] => Some((2, 4.0)),
        ["custom", cpu, mem] => n(cpu).zip(n(mem)).map(|(c, m)| (c, m as f64 / GIB)),
        ["a2", "highgpu", g] => n(g).map(|g| (12 * g, 85.0 * g as f64)),
        ["a2", "ultragpu", g] => n(g).map(|g| (12 * g, 170.0 * g as f64)),
        ["a2", "megagpu", _] => Some((96, 1360.0)),
        ["a3", _, _] => Some((208, 1872.0)),
        ["ct4p", _, t] | ["ct5p", _, t] => n(t).map(|t| (52 * t, 112.0 * t as f64)),
        ["ct5lp", _, "1t"] | ["ct5l", _, "1t"] => Some((24, 48.0)),
        ["ct5lp", _, t] | ["ct5l", _, t] => n(t).map(|t| (28 * t, 48.0 * t as f64)),
        ["ct6e", _, "1t"] => Some((44, 176.0)),
        ["ct6e", _, t] => n(t).map(|t| (180, 180.0 * t as f64)),
        ["n1", "standard", c] => n(c).map(|c| (c, 3.75 * c as f64)),
        ["n1", "highmem", c] => n(c).map(|c| (c, 6.5 * c as f64)),
        ["n1", "highcpu", c] => n(c).map(|c| (c, 0.9 * c as f64)),
        [_, "standard", c] => n(c).map(|c| (c, 4.0 * c as f64)),
        [_, "highmem", c] => n(c).map(|c| (c, 8.0 * c as f64)),
        [_, "highcpu", c] => n(c).map(|c| (c, c as f64)),
        _ => None,
    };
    let (cpu, gib) = shape.unwrap_or((2, 4.0));
    (cpu, (gib * GIB).round() as i64)
}

/// The GPUs some machine types come with when no accelerator is configured.
fn bundled_gpus(machine_type: &str) -> Option<(&'static str, i64)> {
    let parts: Vec<&str> = machine_type.split('-').collect();
    let count = |s: &str| s.trim_end_matches('g').parse::<i64>().ok();
    match parts.as_slice() {
        ["a2", "highgpu", g] => count(g).map(|c| ("nvidia-tesla-a100", c)),
        ["a2", "megagpu", g] => count(g).map(|c| ("nvidia-tesla-a100", c)),
        ["a2", "ultragpu", g] => count(g).map(|c| ("nvidia-a100-80gb", c)),
        ["a3", "megagpu", g] => count(g).map(|c| ("nvidia-h100-mega-80gb", c)),
        ["a3", _, g] => count(g).map(|c| ("nvidia-h100-80gb", c)),
        ["g2", "standard", cpu] => cpu.parse::<i64>().ok().map(|cpu| {
            let gpus = match cpu {
                24 => 2,
                48 => 4,
                96 => 8,
                _ => 1,
            };
            ("nvidia-l4", gpus)
        }),
        _ => None,
    }
}

/// A TPU machine type's accelerator label value, chip count and default topology.
fn tpu_shape(machine_type: &str) -> Option<(&'static str, i64, &'static str)> {
    let parts: Vec<&str> = machine_type.split('-').collect();
    let [family, _, chips] = parts.as_slice() else {
        return None;
    };
    let chips: i64 = chips.strip_suffix('t')?.parse().ok()?;
    let (accelerator, three_d) = match *family {
        "ct4p" => ("tpu-v4-podslice", true),
        "ct5p" => ("tpu-v5p-slice", true),
        "ct5lp" => ("tpu-v5-lite-podslice", false),
        "ct5l" => ("tpu-v5-lite-device", false),
        "ct6e" => ("tpu-v6e-slice", false),
        _ => return None,
    };
    let topology = match (three_d, chips) {
        (true, _) => "2x2x1",
        (false, 1) => "1x1",
        (false, 4) => "2x2",
        (false, 8) => "2x4",
        (false, _) => "1x1",
    };
    Some((accelerator, chips, topology))
}

fn gke_effect(effect: &str) -> &str {
    match effect {
        "NO_SCHEDULE" => "NoSchedule",
        "PREFER_NO_SCHEDULE" => "PreferNoSchedule",
        "NO_EXECUTE" => "NoExecute",
        other => other,
    }
}

/// A GKE node pool as the Kubernetes side sees it: the labels, taints and extended
/// resources GKE puts on its nodes.
pub(crate) fn gke_node_pool(pool: &KubePool) -> NodePoolInfo {
    let config = &pool.config;
    let machine_type = config["machineType"]
        .as_str()
        .unwrap_or("e2-medium")
        .to_string();
    let mut labels = BTreeMap::new();
    for (k, v) in config["labels"].as_object().into_iter().flatten() {
        if let Some(v) = v.as_str() {
            labels.insert(k.clone(), v.to_string());
        }
    }
    labels.insert("cloud.google.com/gke-nodepool".into(), pool.name.clone());
    labels.insert(
        "cloud.google.com/machine-family".into(),
        machine_type
            .split('-')
            .next()
            .unwrap_or_default()
            .to_string(),
    );
    labels.insert(
        "node.kubernetes.io/instance-type".into(),
        machine_type.clone(),
    );
    if config["spot"] == Value::Bool(true) {
        labels.insert("cloud.google.com/gke-spot".into(), "true".into());
    }
    if config["preemptible"] == Value::Bool(true) {
        labels.insert("cloud.google.com/gke-preemptible".into(), "true".into());
    }
    let mut taints: Vec<Value> = config["taints"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| {
            let mut taint = json!({
                "key": t["key"].as_str().unwrap_or_default(),
                "effect": gke_effect(t["effect"].as_str().unwrap_or_default()),
            });
            if let Some(v) = t["value"].as_str().filter(|v| !v.is_empty()) {
                taint["value"] = json!(v);
            }
            taint
        })
        .collect();
    let mut add_taint = |key: &str| {
        if !taints.iter().any(|t| t["key"] == key) {
            taints.push(json!({"key": key, "value": "present", "effect": "NoSchedule"}));
        }
    };
    let mut extended_resources = BTreeMap::new();
    let configured: Vec<(String, i64)> = config["accelerators"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| {
            let kind = a["acceleratorType"].as_str()?.to_string();
            let count = match &a["acceleratorCount"] {
                Value::String(s) => s.parse().ok(),
                other => other.as_i64(),
            }?;
            Some((kind, count))
        })
        .collect();
    let gpus = match configured.first() {
        Some((kind, _)) => Some((kind.clone(), configured.iter().map(|(_, c)| c).sum::<i64>())),
        None => bundled_gpus(&machine_type).map(|(k, c)| (k.to_string(), c)),
    };
    if let Some((kind, count)) = gpus {
        labels.insert("cloud.google.com/gke-accelerator".into(), kind);
        extended_resources.insert("nvidia.com/gpu".into(), count.to_string());
        add_taint("nvidia.com/gpu");
    }
    if let Some((accelerator, chips, default_topology)) = tpu_shape(&machine_type) {
        let topology = pool.placement_policy["tpuTopology"]
            .as_str()
            .filter(|t| !t.is_empty())
            .unwrap_or(default_topology);
        labels.insert(
            "cloud.google.com/gke-tpu-accelerator".into(),
            accelerator.into(),
        );
        labels.insert("cloud.google.com/gke-tpu-topology".into(), topology.into());
        extended_resources.insert("google.com/tpu".into(), chips.to_string());
        add_taint("google.com/tpu");
    }
    let node_count = pool.size * pool.zones;
    let autoscaling = &pool.autoscaling;
    let max_nodes = if autoscaling["enabled"] == Value::Bool(true) {
        let number = |key: &str| match &autoscaling[key] {
            Value::String(s) => s.parse::<i64>().ok(),
            other => other.as_i64(),
        };
        number("totalMaxNodeCount")
            .or_else(|| number("maxNodeCount").map(|m| m * pool.zones))
            .unwrap_or(node_count)
            .max(node_count)
    } else {
        node_count
    };
    let (cpu, memory_mib) = machine_shape(&machine_type);
    NodePoolInfo {
        name: pool.name.clone(),
        machine_type,
        node_count,
        max_nodes,
        labels,
        taints,
        extended_resources,
        cpu: cpu.to_string(),
        memory: format!("{memory_mib}Mi"),
        version: pool.version.as_ref().map(|v| format!("v{v}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(config: Value) -> KubePool {
        KubePool {
            name: "p".into(),
            config,
            size: 2,
            zones: 3,
            autoscaling: Value::Null,
            placement_policy: Value::Null,
            version: Some("1.32.4-gke.1415000".into()),
        }
    }

    /// A pool config and the labels, extended resources and taints its nodes get.
    type PoolCase = (
        Value,
        &'static [(&'static str, &'static str)],
        &'static [(&'static str, &'static str)],
        &'static [&'static str],
    );

    #[test]
    fn node_pools_get_gke_labels_taints_and_resources() {
        let cases: Vec<PoolCase> = vec![
            (
                json!({"machineType": "e2-standard-4", "labels": {"role": "cpu"}}),
                &[
                    ("cloud.google.com/gke-nodepool", "p"),
                    ("cloud.google.com/machine-family", "e2"),
                    ("node.kubernetes.io/instance-type", "e2-standard-4"),
                    ("role", "cpu"),
                ],
                &[],
                &[],
            ),
            (
                json!({"machineType": "g2-standard-8", "spot": true,
                       "accelerators": [{"acceleratorType": "nvidia-l4", "acceleratorCount": "2"}],
                       "taints": [{"key": "dedicated", "value": "ml", "effect": "NO_EXECUTE"}]}),
                &[
                    ("cloud.google.com/gke-spot", "true"),
                    ("cloud.google.com/gke-accelerator", "nvidia-l4"),
                ],
                &[("nvidia.com/gpu", "2")],
                &[
                    "dedicated=ml:NoExecute",
                    "nvidia.com/gpu=present:NoSchedule",
                ],
            ),
            (
                json!({"machineType": "n1-standard-4", "preemptible": true}),
                &[("cloud.google.com/gke-preemptible", "true")],
                &[],
                &[],
            ),
            (
                json!({"machineType": "ct5lp-hightpu-4t"}),
                &[
                    (
                        "cloud.google.com/gke-tpu-accelerator",
                        "tpu-v5-lite-podslice",
                    ),
                    ("cloud.google.com/gke-tpu-topology", "2x2"),
                ],
                &[("google.com/tpu", "4")],
                &["google.com/tpu=present:NoSchedule"],
            ),
            (
                json!({"machineType": "a2-highgpu-1g"}),
                &[("cloud.google.com/gke-accelerator", "nvidia-tesla-a100")],
                &[("nvidia.com/gpu", "1")],
                &["nvidia.com/gpu=present:NoSchedule"],
            ),
        ];
        for (config, labels, resources, taints) in cases {
            let info = gke_node_pool(&pool(config.clone()));
            for (k, v) in labels {
                assert_eq!(
                    info.labels.get(*k).map(String::as_str),
                    Some(*v),
                    "{config}: {k}"
                );
            }
            let got: Vec<(&str, &str)> = info
                .extended_resources
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            assert_eq!(got, resources.to_vec(), "{config}");
            let got: Vec<String> = info
                .taints
                .iter()
                .map(|t| {
                    format!(
                        "{}={}:{}",
                        t["key"].as_str().unwrap_or(""),
                        t["value"].as_str().unwrap_or(""),
                        t["effect"].as_str().unwrap_or("")
                    )
                })
                .collect();
            assert_eq!(got, taints.to_vec(), "{config}");
            assert_eq!(info.node_count, 6, "size per zone times zones");
        }
    }

    #[test]
    fn machine_shapes_and_autoscaling_ceilings() {
        let cases = [
            ("e2-medium", (2, 4096)),
            ("e2-standard-8", (8, 32768)),
            ("n2-highmem-4", (4, 32768)),
            ("n1-standard-1", (1, 3840)),
            ("ct5lp-hightpu-4t", (112, 196608)),
            ("mystery", (2, 4096)),
        ];
        for (machine, want) in cases {
            assert_eq!(machine_shape(machine), want, "{machine}");
        }
        let mut p = pool(json!({"machineType": "e2-medium"}));
        p.autoscaling = json!({"enabled": true, "maxNodeCount": 4});
        assert_eq!(gke_node_pool(&p).max_nodes, 12);
        p.autoscaling = json!({"enabled": true, "totalMaxNodeCount": "5"});
        assert_eq!(
            gke_node_pool(&p).max_nodes,
            6,
            "never below the current size"
        );
        p.autoscaling = json!({"enabled": false, "maxNodeCount": 9});
        assert_eq!(gke_node_pool(&p).max_nodes, 6);
    }

    #[test]
    fn reconcile_adds_refreshes_and_removes_clusters() {
        let now = Utc::now();
        let cloud = |key: &str, pools: Vec<NodePoolInfo>| CloudCluster {
            key: key.into(),
            name: key.rsplit('/').next().unwrap_or_default().into(),
            flavor: Flavor::Gke { autopilot: false },
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
        let pools = vec![gke_node_pool(&pool(json!({})))];
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
                Flavor::Eks,
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

    #[test]
    fn contexts_are_named_like_gcloud() {
        assert_eq!(
            context_name(
                "gke/projects/p/locations/us-central1/clusters/batch",
                "batch"
            ),
            "gke_p_us-central1_batch"
        );
        assert_eq!(
            context_name("eks/us-east-1/x", "x"),
            "arn:aws:eks:us-east-1:123456789012:cluster/x"
        );
    }
}
