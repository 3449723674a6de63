//! Node objects: one per VM of each node pool the cloud side reports, Autopilot's
//! auto-provisioned nodes, nodes booting after a preemption, and scale-down of autoscaled
//! nodes left empty.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use super::events::{self, Event, Involved};
use super::{base, scaled};
use crate::common::hash::fnv64;
use crate::k8s::obj::{self, ts};
use crate::k8s::store::ObjKey;
use crate::k8s::{ClusterState, NodePoolInfo, SettleCtx};

/// When an autoscaled node was last seen without pods (kept on the Node).
const UNNEEDED_SINCE: &str = "sandbox.terrain.dev/unneeded-since";
pub(super) const NOT_READY_TAINT: &str = "node.kubernetes.io/not-ready";
/// Used when the pool's labels do not say which zone its VMs are in.
const DEFAULT_ZONE: &str = "local-a";

pub(super) fn node_key(name: &str) -> ObjKey {
    ObjKey::new("", "nodes", "", name)
}

fn autopilot(cluster: &ClusterState) -> bool {
    cluster.cloud.provisions_per_pod()
}

/// The label naming a node's pool.
fn pool_label(cluster: &ClusterState) -> &'static str {
    cluster.cloud.pool_label()
}

/// The name of VM `index` of a pool, stable so a settle finds the nodes it made before.
pub(super) fn pool_node_name(cluster: &ClusterState, pool: &str, index: i64) -> String {
    cluster.cloud.pool_node_name(&cluster.name, pool, index)
}

/// The node made for a pod where the cloud provisions per pod, named after the pod so
/// that every settle agrees on which node that is.
pub(super) fn autopilot_node_name(cluster: &ClusterState, pod_uid: &str) -> String {
    cluster.cloud.pod_node_name(&cluster.name, pod_uid)
}

/// What a node looks like, whoever asks for it.
pub(super) struct Shape {
    pub pool: String,
    pub machine_type: String,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Value>,
    pub cpu: String,
    pub memory: String,
    pub extended: BTreeMap<String, String>,
    /// The kubelet's version; `None`: the control plane's.
    pub version: Option<String>,
}

impl Shape {
    pub(super) fn of_pool(pool: &NodePoolInfo) -> Shape {
        Shape {
            pool: pool.name.clone(),
            machine_type: pool.machine_type.clone(),
            labels: pool.labels.clone(),
            taints: pool.taints.clone(),
            cpu: pool.cpu.clone(),
            memory: pool.memory.clone(),
            extended: pool.extended_resources.clone(),
            version: pool.version.clone(),
        }
    }
}

/// Since when the node has been Ready, if it is.
pub(super) fn up_since(node: &Value) -> Option<DateTime<Utc>> {
    obj::items(&node["status"]["conditions"])
        .iter()
        .find(|c| c["type"] == "Ready" && c["status"] == "True")
        .and_then(|c| obj::parse_time(&c["lastTransitionTime"]))
}

pub(super) fn is_ready(node: &Value) -> bool {
    obj::items(&node["status"]["conditions"])
        .iter()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

fn conditions(ready: bool, now: DateTime<Utc>) -> Value {
    let c = |t: &str, status: &str, reason: &str, message: &str| {
        json!({"type": t, "status": status, "lastHeartbeatTime": ts(now), "lastTransitionTime": ts(now),
               "reason": reason, "message": message})
    };
    json!([
        c(
            "MemoryPressure",
            "False",
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available"
        ),
        c(
            "DiskPressure",
            "False",
            "KubeletHasNoDiskPressure",
            "kubelet has no disk pressure"
        ),
        c(
            "PIDPressure",
            "False",
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available"
        ),
        if ready {
            c(
                "Ready",
                "True",
                "KubeletReady",
                "kubelet is posting ready status",
            )
        } else {
            c("Ready", "False", "KubeletNotReady", "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized")
        },
    ])
}

/// The Node object for a VM. `slot` numbers the node's pod range and address.
pub(super) fn build(
    cluster: &ClusterState,
    name: &str,
    shape: &Shape,
    slot: u32,
    ready: bool,
    now: DateTime<Utc>,
) -> Value {
    let mut labels = shape.labels.clone();
    // The pool label is how nodes are matched to their pool: it always names the pool.
    labels.insert(pool_label(cluster).to_string(), shape.pool.clone());
    let zone = labels
        .get("topology.kubernetes.io/zone")
        .cloned()
        .or_else(|| {
            labels
                .get("topology.kubernetes.io/region")
                .map(|r| format!("{r}-a"))
        })
        .unwrap_or_else(|| DEFAULT_ZONE.to_string());
    let region = labels
        .get("topology.kubernetes.io/region")
        .cloned()
        .unwrap_or_else(|| {
            zone.rsplit_once('-')
                .map_or(zone.clone(), |(r, _)| r.to_string())
        });
    for (k, v) in [
        ("kubernetes.io/hostname", name.to_string()),
        ("kubernetes.io/os", "linux".into()),
        ("kubernetes.io/arch", "amd64".into()),
        ("beta.kubernetes.io/os", "linux".into()),
        ("beta.kubernetes.io/arch", "amd64".into()),
        (
            "node.kubernetes.io/instance-type",
            shape.machine_type.clone(),
        ),
        (
            "beta.kubernetes.io/instance-type",
            shape.machine_type.clone(),
        ),
        ("topology.kubernetes.io/zone", zone.clone()),
        ("topology.kubernetes.io/region", region),
    ] {
        labels.entry(k.to_string()).or_insert(v);
    }
    let mut taints = shape.taints.clone();
    if !ready {
        taints.push(json!({"key": NOT_READY_TAINT, "effect": "NoSchedule", "timeAdded": ts(now)}));
    }
    let mut capacity = json!({
        "cpu": shape.cpu,
        "memory": shape.memory,
        "pods": "110",
        "ephemeral-storage": "98831908Ki",
        "hugepages-2Mi": "0",
    });
    for (k, v) in &shape.extended {
        capacity[k.as_str()] = json!(v);
    }
    let internal_ip = format!("10.128.{}.{}", slot / 250, slot % 250 + 2);
    let provider_id = cluster.cloud.provider_id(&zone, name);
    // One version source: the pool's nodes run its version, else the control plane's.
    let kubelet = shape.version.as_deref().unwrap_or(&cluster.version);
    let (os_image, runtime) = cluster.cloud.node_os();
    let machine_id = format!(
        "{:016x}{:016x}",
        fnv64(&[name, "machine"]),
        fnv64(&[name, "id"])
    );
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
        },
        "spec": {
            "podCIDR": format!("10.4.{slot}.0/24"),
            "podCIDRs": [format!("10.4.{slot}.0/24")],
            "providerID": provider_id,
            "taints": taints,
        },
        "status": {
            "capacity": capacity,
            "allocatable": capacity,
            "conditions": conditions(ready, now),
            "addresses": [
                {"type": "InternalIP", "address": internal_ip},
                {"type": "Hostname", "address": name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": machine_id,
                "systemUUID": machine_id,
                "bootID": format!("{:016x}", fnv64(&[name, &ts(now).to_string()])),
                "kernelVersion": "6.1.112+",
                "osImage": os_image,
                "containerRuntimeVersion": runtime,
                "kubeletVersion": kubelet,
                "kubeProxyVersion": kubelet,
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        },
    })
}

/// The lowest pod-range slot no node uses.
fn free_slot(cluster: &ClusterState) -> u32 {
    let used: BTreeSet<u32> = cluster
        .store
        .list("", "nodes", None)
        .iter()
        .filter_map(|(_, n)| {
            let cidr = n["spec"]["podCIDR"].as_str()?;
            cidr.strip_prefix("10.4.")?.split('.').next()?.parse().ok()
        })
        .collect();
    (0..).find(|s| !used.contains(s)).unwrap_or_default()
}

/// Adds a node and records that it registered; `ready: false` makes it boot first.
pub(super) fn add(
    cluster: &mut ClusterState,
    name: &str,
    shape: &Shape,
    ready: bool,
    now: DateTime<Utc>,
) -> Value {
    let slot = free_slot(cluster);
    let node = build(cluster, name, shape, slot, ready, now);
    let node = cluster.store.insert_new(node_key(name), node, now);
    let message = format!("Node {name} event: Registered Node {name} in Controller");
    events::emit(
        &mut cluster.store,
        &Involved::new(&node, "v1", "Node"),
        Event::normal("node-controller", "RegisteredNode", message),
        now,
    );
    node
}

/// The names of a pool's nodes in Kubernetes now.
pub(super) fn pool_nodes(cluster: &ClusterState, pool: &str) -> Vec<String> {
    let label = pool_label(cluster);
    cluster
        .store
        .list("", "nodes", None)
        .into_iter()
        .filter(|(_, n)| obj::label(n, label) == Some(pool) && !obj::name(n).starts_with("gk3-"))
        .map(|(k, _)| k.name.clone())
        .collect()
}

/// Adds one node to a pool at the lowest free index below `limit`; its name, or `None`
/// when the pool is full.
pub(super) fn grow_pool(
    cluster: &mut ClusterState,
    pool: &NodePoolInfo,
    limit: i64,
    now: DateTime<Utc>,
) -> Option<String> {
    let existing = pool_nodes(cluster, &pool.name);
    let name = (0..limit)
        .map(|i| pool_node_name(cluster, &pool.name, i))
        .find(|n| !existing.contains(n))?;
    add(cluster, &name, &Shape::of_pool(pool), true, now);
    Some(name)
}

/// Pools to nodes (Standard clusters and EKS), then booting nodes to Ready.
pub(super) fn sync(cluster: &mut ClusterState, ctx: &SettleCtx<'_>) {
    if !autopilot(cluster) {
        sync_pools(cluster, ctx.now);
    }
    finish_boots(cluster, ctx);
}

fn sync_pools(cluster: &mut ClusterState, now: DateTime<Utc>) {
    let label = pool_label(cluster);
    let pools = cluster.node_pools.clone();
    for pool in &pools {
        let limit = pool.node_count.max(pool.max_nodes);
        let allowed: Vec<String> = (0..limit)
            .map(|i| pool_node_name(cluster, &pool.name, i))
            .collect();
        let existing = pool_nodes(cluster, &pool.name);
        for name in existing.iter().filter(|n| !allowed.contains(n)) {
            cluster.store.remove(&node_key(name));
        }
        for name in allowed
            .iter()
            .take(usize::try_from(pool.node_count).unwrap_or_default())
        {
            match cluster.store.get(&node_key(name)) {
                None => {
                    add(cluster, name, &Shape::of_pool(pool), true, now);
                }
                Some(node) => {
                    // Pool labels and taints changed in the cloud reach the nodes; what
                    // users added (kubectl label/taint) stays.
                    let mut updated = node.clone();
                    for (k, v) in pool.labels.iter().filter(|(k, _)| k.as_str() != label) {
                        obj::set(&mut updated, &["metadata", "labels", k], json!(v));
                    }
                    let taints = obj::array_mut(&mut updated, &["spec", "taints"]);
                    for t in &pool.taints {
                        if !taints
                            .iter()
                            .any(|x| x["key"] == t["key"] && x["effect"] == t["effect"])
                        {
                            taints.push(t.clone());
                        }
                    }
                    for (k, v) in &pool.extended_resources {
                        obj::set(&mut updated, &["status", "capacity", k], json!(v));
                        obj::set(&mut updated, &["status", "allocatable", k], json!(v));
                    }
                    cluster.store.update(&node_key(name), updated);
                }
            }
        }
    }
    let names: BTreeSet<&str> = pools.iter().map(|p| p.name.as_str()).collect();
    let gone: Vec<ObjKey> = cluster
        .store
        .list("", "nodes", None)
        .into_iter()
        .filter(|(_, n)| {
            obj::label(n, label).is_some_and(|p| !names.contains(p))
                && !obj::name(n).starts_with("gk3-")
        })
        .map(|(k, _)| k.clone())
        .collect();
    for key in gone {
        cluster.store.remove(&key);
    }
}

/// A node that joined NotReady becomes Ready once it has booted.
fn finish_boots(cluster: &mut ClusterState, ctx: &SettleCtx<'_>) {
    for (key, node) in obj::list(&cluster.store, "", "nodes", None) {
        let Some(ready) = obj::items(&node["status"]["conditions"])
            .iter()
            .find(|c| c["type"] == "Ready")
        else {
            continue;
        };
        if ready["status"] == "True" || ready["reason"] != "KubeletNotReady" {
            continue;
        }
        let since = obj::parse_time(&ready["lastTransitionTime"]).unwrap_or(ctx.now);
        let at = since + scaled(ctx, base::NODE_BOOT);
        if at > ctx.now {
            continue;
        }
        let mut updated = node.clone();
        obj::set(
            &mut updated,
            &["status", "conditions"],
            conditions(true, at),
        );
        obj::array_mut(&mut updated, &["spec", "taints"]).retain(|t| t["key"] != NOT_READY_TAINT);
        let updated = cluster.store.update(&key, updated);
        let message = format!("Node {} status is now: NodeReady", key.name);
        events::emit(
            &mut cluster.store,
            &Involved::new(&updated, "v1", "Node"),
            Event::normal("kubelet", "NodeReady", message).on_host(&key.name),
            at,
        );
    }
}

/// Removes autoscaled nodes (Autopilot's, and pool nodes beyond the pool's size) that
/// have had no pods for a while, as the cluster autoscaler does.
pub(super) fn scale_down(cluster: &mut ClusterState, ctx: &SettleCtx<'_>) {
    let base_nodes: BTreeSet<String> = if autopilot(cluster) {
        BTreeSet::new()
    } else {
        cluster
            .node_pools
            .iter()
            .flat_map(|p| (0..p.node_count).map(|i| pool_node_name(cluster, &p.name, i)))
            .collect()
    };
    let mut busy: BTreeSet<String> = BTreeSet::new();
    for (_, pod) in cluster.store.list("", "pods", None) {
        let phase = pod["status"]["phase"].as_str().unwrap_or_default();
        if matches!(phase, "Succeeded" | "Failed")
            || obj::controller_uid(pod, "DaemonSet").is_some()
        {
            continue;
        }
        if let Some(n) = pod["spec"]["nodeName"].as_str() {
            busy.insert(n.to_string());
        }
    }
    for (key, node) in obj::list(&cluster.store, "", "nodes", None) {
        let autoscaled = key.name.starts_with("gk3-")
            || (obj::label(&node, pool_label(cluster)).is_some()
                && !base_nodes.contains(&key.name));
        if !autoscaled || !is_ready(&node) {
            continue;
        }
        if busy.contains(&key.name) {
            if obj::annotation(&node, UNNEEDED_SINCE).is_some() {
                let mut updated = node.clone();
                obj::remove(&mut updated, &["metadata", "annotations", UNNEEDED_SINCE]);
                cluster.store.update(&key, updated);
            }
            continue;
        }
        let since = obj::parse_time(&node["metadata"]["annotations"][UNNEEDED_SINCE]);
        let Some(since) = since else {
            if ctx.scale > 0.0 {
                let mut updated = node.clone();
                obj::set(
                    &mut updated,
                    &["metadata", "annotations", UNNEEDED_SINCE],
                    ts(ctx.now),
                );
                cluster.store.update(&key, updated);
                continue;
            }
            remove_unneeded(cluster, &key, &node, ctx.now);
            continue;
        };
        if since + scaled(ctx, base::SCALE_DOWN) <= ctx.now {
            remove_unneeded(cluster, &key, &node, ctx.now);
        }
    }
}

fn remove_unneeded(cluster: &mut ClusterState, key: &ObjKey, node: &Value, now: DateTime<Utc>) {
    events::emit(
        &mut cluster.store,
        &Involved::new(node, "v1", "Node"),
        Event::normal(
            "cluster-autoscaler",
            "ScaleDown",
            "node removed by cluster autoscaler",
        ),
        now,
    );
    cluster.store.remove(key);
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{self, Harness};
    use super::*;

    #[test]
    fn pools_become_labelled_tainted_nodes() {
        let mut h = Harness::standard(vec![
            testkit::pool("default-pool", 2, 2),
            testkit::gpu_pool("gpu", 1, 1),
        ]);
        h.settle();
        let nodes = h.names("", "nodes", "");
        assert_eq!(nodes.len(), 3, "{nodes:?}");
        let gpu = pool_node_name(&h.cluster, "gpu", 0);
        assert_eq!(gpu, "batch-gpu-0", "the cloud names the VMs");
        let node = h.get("", "nodes", "", &gpu);
        assert_eq!(
            node["metadata"]["labels"]["cloud.google.com/gke-nodepool"],
            "gpu"
        );
        assert_eq!(
            node["metadata"]["labels"]["kubernetes.io/hostname"],
            gpu.as_str()
        );
        assert_eq!(node["metadata"]["labels"]["kubernetes.io/os"], "linux");
        assert_eq!(
            node["metadata"]["labels"]["topology.kubernetes.io/zone"],
            "us-central1-a"
        );
        assert_eq!(node["status"]["capacity"]["nvidia.com/gpu"], "1");
        assert_eq!(node["status"]["allocatable"]["pods"], "110");
        // Regression: nodes reported a kubelet version of their own, not the cluster's.
        assert_eq!(
            node["status"]["nodeInfo"]["kubeletVersion"],
            h.cluster.version.as_str()
        );
        assert_eq!(node["spec"]["taints"][0]["key"], "nvidia.com/gpu");
        assert!(is_ready(&node));
    }

    #[test]
    fn a_pool_that_shrinks_or_vanishes_takes_its_nodes_along() {
        let mut h = Harness::standard(vec![testkit::pool("a", 3, 3), testkit::pool("b", 1, 1)]);
        h.settle();
        assert_eq!(h.names("", "nodes", "").len(), 4);
        h.cluster.node_pools = vec![testkit::pool("a", 1, 1)];
        h.settle();
        assert_eq!(
            h.names("", "nodes", ""),
            vec![pool_node_name(&h.cluster, "a", 0)]
        );
    }

    #[test]
    fn node_names_are_stable_and_distinct() {
        let h = Harness::standard(vec![]);
        let names: BTreeSet<String> = (0..20)
            .map(|i| pool_node_name(&h.cluster, "p", i))
            .collect();
        assert_eq!(names.len(), 20);
        assert_eq!(
            pool_node_name(&h.cluster, "p", 3),
            pool_node_name(&h.cluster, "p", 3)
        );
    }
}
