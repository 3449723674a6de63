//! The `gke_node_pool` kind: a node pool on a Standard GKE cluster, with GPUs, TPU
//! slices, Spot or legacy preemptible VMs, autoscaling (from zero), taints and labels.
//!
//! Autoscaling, node count, taints and labels change in place (setAutoscaling, setSize,
//! update); machine type, accelerators, Spot/preemptible, scopes and disks are fixed
//! at creation, so changing them replaces the pool.
//!
//! Creation survives stockouts: a pool whose create operation fails for capacity
//! (`GCE_STOCKOUT`, `ZONE_RESOURCE_POOL_EXHAUSTED`) is deleted and made again in each
//! `fallback` zone, then with each fallback machine type ([`candidates`]); the
//! `landed` output says where it went, and reads report the declared spec for any of
//! those placements, so a fallback is not drift. `fallback` itself only steers create:
//! changing it touches no API. A pool that was made but did not come out right (every
//! placement out of capacity, an operation that failed, a wait that timed out) is
//! returned as tainted, so the engine keeps it in the state and the next plan replaces
//! it instead of leaving it behind.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use reqwest::Method;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::client::{client, status_of, Client, Request};
use super::config::Api;
use super::{
    by_parent, catalog, id_parts, is_ours, labels_with_ours, list_key, not_ours, operation,
};
use crate::schema::Fields;
use crate::{Ctx, Invalid, Kind, Live, Peer, ProviderError};

/// The kind `gke_node_pool`.
#[derive(Debug, Clone, Copy, Default)]
pub struct GkeNodePool;

/// Autoscaling bounds; `min` may be 0 so an idle GPU pool costs nothing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Autoscaling {
    /// Fewest nodes per zone (0 lets an idle pool cost nothing).
    pub min: i64,
    /// Most nodes per zone.
    pub max: i64,
}

/// GPUs attached to each node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Gpu {
    /// The GPU type (nvidia-l4, nvidia-tesla-t4, nvidia-tesla-a100…).
    #[serde(rename = "type")]
    pub kind: String,
    /// GPUs per node.
    #[serde(default = "one")]
    pub count: i64,
    /// Driver installation: default, latest or disabled.
    #[serde(default = "default_driver")]
    pub driver: String,
}

/// A TPU slice: the machine type names the TPU generation, the topology its shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Tpu {
    /// The slice shape, e.g. 2x4 (v5e) or 2x2x2 (v5p).
    pub topology: String,
}

/// Where else create may put the pool when its declared placement is out of capacity:
/// other zones of the cluster's region (the pool's `locations`), other machine types.
/// Only create reads it (see [`candidates`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Fallback {
    /// Zones of the cluster's region to put the pool in instead, in order.
    #[serde(default)]
    pub zones: Vec<String>,
    /// Machine types to use instead, in order: in the declared zones, then in each fallback
    /// zone.
    #[serde(default)]
    pub machine_types: Vec<String>,
}

/// Where the pool's nodes went: its zones and machine type.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Landed {
    /// The zones the nodes are in.
    pub zones: Vec<String>,
    /// The nodes' machine type.
    pub machine_type: String,
}

// serde's defaults, the same as the schema's (checked by `schema_mismatches`).
fn e2_medium() -> String {
    "e2-medium".into()
}

fn gke_default() -> Vec<String> {
    vec!["gke-default".into()]
}

fn one() -> i64 {
    1
}

fn default_driver() -> String {
    "default".into()
}

/// What a stack writes for a `gke_node_pool`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    /// The pool's name (RFC 1035, at most 40 characters).
    #[terrain(force_new)]
    pub name: String,
    /// The Standard cluster's id: ${gke_cluster.NAME.id}.
    #[terrain(force_new)]
    pub cluster: String,
    /// The nodes' machine type (n1-highmem-8, g2-standard-8, ct5lp-hightpu-4t…).
    #[serde(default = "e2_medium")]
    #[terrain(force_new)]
    pub machine_type: String,
    /// Nodes per zone; with autoscaling, the starting size.
    pub node_count: Option<i64>,
    /// Let the cluster autoscaler size the pool.
    pub autoscaling: Option<Autoscaling>,
    /// GPUs attached to each node.
    #[terrain(force_new)]
    pub gpu: Option<Gpu>,
    /// A TPU slice; machine_type names the TPU generation.
    #[terrain(force_new)]
    pub tpu: Option<Tpu>,
    /// Spot VMs: much cheaper, reclaimable at any time.
    #[serde(default)]
    #[terrain(force_new)]
    pub spot: bool,
    /// Legacy preemptible VMs (24 h maximum); prefer spot.
    #[serde(default)]
    #[terrain(force_new)]
    pub preemptible: bool,
    /// Node taints as key=value:Effect.
    #[serde(default)]
    pub taints: Vec<String>,
    /// Kubernetes labels on the nodes.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// OAuth scopes of the nodes (aliases like cloud-platform or full URLs).
    #[serde(default = "gke_default")]
    #[terrain(force_new)]
    pub scopes: Vec<String>,
    /// Boot disk size per node.
    #[terrain(force_new)]
    pub disk_size_gb: Option<i64>,
    /// Boot disk type (pd-standard, pd-balanced, pd-ssd).
    #[terrain(force_new)]
    pub disk_type: Option<String>,
    /// Where create tries next when the declared placement is out of capacity
    /// (GCE_STOCKOUT); changing it changes nothing in the cloud.
    pub fallback: Option<Fallback>,
    /// The Google service account the nodes run as (its email), instead of the Compute
    /// Engine default (also when empty). Give it roles/container.defaultNodeServiceAccount,
    /// and read access to the registries its images come from.
    #[terrain(force_new)]
    pub service_account: Option<String>,
    /// Which metadata server pods see: "gke" (Workload Identity: pods act as their
    /// Kubernetes service accounts; the default on clusters that have it) or "gce"
    /// (pods act as the node's service account). A change recreates the nodes.
    pub workload_metadata: Option<String>,
}

/// What `gke_node_pool` reports after apply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Outputs {
    /// Node labels that select this pool's nodes.
    pub node_selector: BTreeMap<String, String>,
    /// Selector, taints, accelerators and spot-ness, for a kubernetes_job's node_pool.
    #[terrain(derived_from = ["name", "machine_type", "gpu", "tpu", "spot", "preemptible", "taints"])]
    pub placement: Value,
    /// The nodes' Kubernetes version.
    pub version: String,
    /// The pool's status.
    pub status: String,
    /// Where the pool went: a fallback's zone or machine type when the declared placement
    /// was out of capacity.
    pub landed: Landed,
}

const CREATE: &str = "container.projects.locations.clusters.nodePools.create";
const GET: &str = "container.projects.locations.clusters.nodePools.get";
const LIST: &str = "container.projects.locations.clusters.nodePools.list";
const DELETE: &str = "container.projects.locations.clusters.nodePools.delete";
const UPDATE: &str = "container.projects.locations.clusters.nodePools.update";
const SET_AUTOSCALING: &str = "container.projects.locations.clusters.nodePools.setAutoscaling";
const SET_SIZE: &str = "container.projects.locations.clusters.nodePools.setSize";
const ID_SHAPE: &str = "projects/PROJECT/locations/LOCATION/clusters/CLUSTER/nodePools/NAME";
const DRIVERS: &[(&str, &str)] = &[
    ("default", "DEFAULT"),
    ("latest", "LATEST"),
    ("disabled", "INSTALLATION_DISABLED"),
];

fn driver_api(d: &str) -> &'static str {
    DRIVERS
        .iter()
        .find(|(n, _)| *n == d)
        .map_or("DEFAULT", |(_, a)| a)
}

fn driver_of(api: &str) -> &'static str {
    DRIVERS
        .iter()
        .find(|(_, a)| *a == api)
        .map_or("default", |(n, _)| n)
}

/// Where a pool runs: its cluster's location, from the cluster's spec when the stack
/// makes it, else from the pool's cluster id, else the provider's region or zone; ""
/// when none is known yet.
fn location_of(spec: &Value, config: &Value, peers: &[Peer]) -> String {
    peers
        .iter()
        .find(|p| p.kind == "gke_cluster")
        .and_then(|c| crate::usage::gcp_location(&c.spec["location"], config))
        .or_else(|| {
            let parts: Vec<&str> = crate::usage::known(&spec["cluster"])?.split('/').collect();
            match parts.as_slice() {
                ["projects", _, "locations", l, "clusters", _] => Some((*l).to_string()),
                _ => None,
            }
        })
        .or_else(|| crate::usage::gcp_location(&Value::Null, config))
        .unwrap_or_default()
}

/// The Cloud TPU accelerator type of a slice (`ct5lp-hightpu-4t` in `2x2` →
/// `v5litepod-4`): v5e and v6e names count chips, the others TensorCores (two a chip).
fn tpu_accelerator_type(machine_type: &str, topology: &str) -> Option<String> {
    let tpu = catalog::tpu(machine_type)?;
    let chips: u32 = topology
        .split('x')
        .map(|d| d.parse::<u32>().ok())
        .try_fold(1u32, |acc, d| d.map(|d| acc * d))?;
    match tpu.version {
        "v5e" => Some(format!("v5litepod-{chips}")),
        "v6e" => Some(format!("v6e-{chips}")),
        "v2" | "v3" | "v4" | "v5p" => Some(format!("{}-{}", tpu.version, chips * 2)),
        _ => None,
    }
}

/// The number of nodes a pool starts with.
fn initial_count(spec: &Spec) -> i64 {
    if let Some(n) = spec.node_count {
        return n;
    }
    if let Some(topology) = spec.tpu.as_ref().map(|t| t.topology.as_str()) {
        if let Ok(nodes) = catalog::check_tpu_topology(&spec.machine_type, topology) {
            return i64::from(nodes);
        }
    }
    spec.autoscaling.as_ref().map_or(1, |a| a.min)
}

fn autoscaling_body(a: Option<&Autoscaling>) -> Value {
    match a {
        Some(a) => json!({"enabled": true, "minNodeCount": a.min, "maxNodeCount": a.max}),
        None => json!({"enabled": false}),
    }
}

fn taints_body(taints: &[String]) -> Result<Vec<Value>, ProviderError> {
    taints
        .iter()
        .map(|t| {
            catalog::parse_taint(t)
                .map(|(key, value, effect)| json!({"key": key, "value": value, "effect": effect}))
                .map_err(|m| ProviderError::Unsupported(format!("taint {t:?}: {m}")))
        })
        .collect()
}

/// The CreateNodePoolRequest body.
///
/// Fails on a taint or scope validation would have refused.
pub fn create_body(spec: &Spec, address: &str) -> Result<Value, ProviderError> {
    let scopes = catalog::expand_scopes(&spec.scopes)
        .map_err(|m| ProviderError::Unsupported(format!("scopes: {m}")))?;
    let mut config = json!({
        "machineType": spec.machine_type,
        "oauthScopes": scopes,
        "labels": spec.labels,
        "resourceLabels": labels_with_ours(&BTreeMap::new(), address),
        "taints": taints_body(&spec.taints)?,
    });
    if let Some(gpu) = &spec.gpu {
        config["accelerators"] = json!([{
            "acceleratorCount": gpu.count.to_string(),
            "acceleratorType": gpu.kind,
            "gpuDriverInstallationConfig": {"gpuDriverVersion": driver_api(&gpu.driver)},
        }]);
    }
    if spec.spot {
        config["spot"] = json!(true);
    }
    if spec.preemptible {
        config["preemptible"] = json!(true);
    }
    if let Some(size) = spec.disk_size_gb {
        config["diskSizeGb"] = json!(size);
    }
    if let Some(t) = &spec.disk_type {
        config["diskType"] = json!(t);
    }
    if let Some(account) = spec.service_account.as_deref().filter(|a| !a.is_empty()) {
        config["serviceAccount"] = json!(account);
    }
    if let Some(mode) = &spec.workload_metadata {
        config["workloadMetadataConfig"] = json!({"mode": metadata_api(mode)});
    }
    let mut pool = json!({
        "name": spec.name,
        "initialNodeCount": initial_count(spec),
        "config": config,
    });
    if spec.autoscaling.is_some() {
        pool["autoscaling"] = autoscaling_body(spec.autoscaling.as_ref());
    }
    if let Some(tpu) = &spec.tpu {
        // Multi-host slices are placed together; GKE wants the topology on the policy.
        if catalog::check_tpu_topology(&spec.machine_type, &tpu.topology)
            .is_ok_and(|nodes| nodes > 1)
        {
            pool["placementPolicy"] = json!({"type": "COMPACT", "tpuTopology": tpu.topology});
        } else {
            pool["placementPolicy"] = json!({"tpuTopology": tpu.topology});
        }
    }
    Ok(json!({ "nodePool": pool }))
}

/// One placement a create tries: a machine type, in the cluster's own zones (`zone`
/// `None`) or in one fallback zone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub zone: Option<String>,
    pub machine_type: String,
}

impl Candidate {
    /// How a progress line names this candidate as the next one tried.
    fn as_fallback(&self, declared_machine_type: &str) -> String {
        match (&self.zone, self.machine_type == declared_machine_type) {
            (Some(z), true) => format!("fallback zone {z}"),
            (None, _) => format!("fallback machine type {}", self.machine_type),
            (Some(z), false) => format!(
                "fallback machine type {} in fallback zone {z}",
                self.machine_type
            ),
        }
    }
}

/// The placements a create tries, in order: the declared one; the declared machine
/// type in each fallback zone; then each fallback machine type in the declared
/// placement and in each fallback zone. Moving zones first keeps the machine the stack
/// asked for whenever any zone has it.
pub fn candidates(spec: &Spec) -> Vec<Candidate> {
    let at = |zone: Option<&String>, machine_type: &String| Candidate {
        zone: zone.cloned(),
        machine_type: machine_type.clone(),
    };
    let mut out = vec![at(None, &spec.machine_type)];
    if let Some(f) = &spec.fallback {
        out.extend(f.zones.iter().map(|z| at(Some(z), &spec.machine_type)));
        for m in &f.machine_types {
            out.push(at(None, m));
            out.extend(f.zones.iter().map(|z| at(Some(z), m)));
        }
    }
    // Validation refuses repeats; were one to slip through, trying it again would only
    // repeat its failure.
    let mut seen = Vec::new();
    out.retain(|c| {
        let new = !seen.contains(c);
        if new {
            seen.push(c.clone());
        }
        new
    });
    out
}

/// The CreateNodePoolRequest body for `spec` placed at `candidate`: its machine type,
/// and `nodePool.locations` set to the candidate's zone when it has one.
///
/// Fails as [`create_body`].
pub fn candidate_body(
    spec: &Spec,
    address: &str,
    candidate: &Candidate,
) -> Result<Value, ProviderError> {
    let placed = Spec {
        machine_type: candidate.machine_type.clone(),
        ..spec.clone()
    };
    let mut body = create_body(&placed, address)?;
    if let Some(zone) = &candidate.zone {
        body["nodePool"]["locations"] = json!([zone]);
    }
    Ok(body)
}

/// The capacity marker in a failed create's message — GKE's `GCE_STOCKOUT`, Compute
/// Engine's `ZONE_RESOURCE_POOL_EXHAUSTED`, or its plain-words form — or `None` when the
/// pool failed for another reason (which another placement would not fix).
pub fn stockout_reason(message: &str) -> Option<&'static str> {
    if message.contains("GCE_STOCKOUT") {
        Some("GCE_STOCKOUT")
    } else if message.contains("ZONE_RESOURCE_POOL_EXHAUSTED") {
        Some("ZONE_RESOURCE_POOL_EXHAUSTED")
    } else if message.contains("does not have enough resources available") {
        Some("not enough resources available")
    } else {
        None
    }
}

/// `a`, `a and b`, `a, b and c`.
fn and_list(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

/// The error a create ends with after `tried` placements (`machine in zones (why)`
/// each): `error` itself when only the declared placement was tried, else one naming
/// every placement tried before it.
fn after_tries(error: ProviderError, tried: &[(String, bool)]) -> ProviderError {
    if tried.len() < 2 {
        return error;
    }
    let list: Vec<String> = tried.iter().map(|(t, _)| t.clone()).collect();
    let message = if tried.iter().all(|(_, capacity)| *capacity) {
        format!(
            "every placement tried was out of capacity: {}; the last attempt failed: {error}",
            list.join(", ")
        )
    } else {
        format!(
            "tried {}; the last attempt failed: {error}",
            list.join(", ")
        )
    };
    ProviderError::Failed {
        call: CREATE.to_string(),
        message,
    }
}

/// The spec a live pool shows; what the API cannot report comes from `prior`.
pub fn spec_of(live: &Value, cluster: &str, prior: Option<&Spec>) -> Spec {
    let config = &live["config"];
    let machine_type = config["machineType"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let gpu = config["accelerators"]
        .as_array()
        .and_then(|a| a.first())
        .map(|a| Gpu {
            kind: a["acceleratorType"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            count: a["acceleratorCount"]
                .as_str()
                .and_then(|c| c.parse().ok())
                .or_else(|| a["acceleratorCount"].as_i64())
                .unwrap_or(0),
            driver: driver_of(
                a["gpuDriverInstallationConfig"]["gpuDriverVersion"]
                    .as_str()
                    .unwrap_or("DEFAULT"),
            )
            .to_string(),
        });
    // Machine types with built-in GPUs (g2, a2, a3) report them even when the stack
    // named none.
    let gpu = match prior {
        Some(p) if p.gpu.is_none() && catalog::built_in_gpus(&machine_type).is_some() => None,
        _ => gpu,
    };
    let tpu = live["placementPolicy"]["tpuTopology"]
        .as_str()
        .filter(|t| !t.is_empty())
        .map(|t| Tpu {
            topology: t.to_string(),
        });
    let live_scopes: Vec<String> = config["oauthScopes"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let scopes = match prior {
        Some(p) if same_scopes(&p.scopes, &live_scopes) => p.scopes.clone(),
        _ => live_scopes,
    };
    let autoscaling =
        (live["autoscaling"]["enabled"].as_bool() == Some(true)).then(|| Autoscaling {
            min: live["autoscaling"]["minNodeCount"].as_i64().unwrap_or(0),
            max: live["autoscaling"]["maxNodeCount"].as_i64().unwrap_or(0),
        });
    let taints = config["taints"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|t| {
                    catalog::format_taint(
                        t["key"].as_str().unwrap_or(""),
                        t["value"].as_str().unwrap_or(""),
                        t["effect"].as_str().unwrap_or(""),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let labels = config["labels"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default();
    // A pool that landed on a fallback machine type is the pool the stack declared.
    let machine_type = match prior {
        Some(p)
            if p.fallback
                .as_ref()
                .is_some_and(|f| f.machine_types.contains(&machine_type)) =>
        {
            p.machine_type.clone()
        }
        _ => machine_type,
    };
    Spec {
        name: live["name"].as_str().unwrap_or_default().to_string(),
        cluster: cluster.to_string(),
        machine_type,
        node_count: match prior {
            Some(p) => p.node_count,
            None => live["initialNodeCount"].as_i64(),
        },
        autoscaling,
        gpu,
        tpu: tpu.or_else(|| prior.and_then(|p| p.tpu.clone())),
        spot: config["spot"].as_bool().unwrap_or(false),
        preemptible: config["preemptible"].as_bool().unwrap_or(false),
        taints,
        labels,
        scopes,
        // GKE fills in disk defaults; only compare them when the stack sets them.
        disk_size_gb: if prior.is_some_and(|p| p.disk_size_gb.is_none()) {
            None
        } else {
            config["diskSizeGb"].as_i64()
        },
        disk_type: if prior.is_some_and(|p| p.disk_type.is_none()) {
            None
        } else {
            config["diskType"].as_str().map(str::to_string)
        },
        // Never sent to GKE: what the stack last applied.
        fallback: prior.and_then(|p| p.fallback.clone()),
        // GKE fills both in; only compare them when the stack sets them.
        // Unset, or "" (a module's way of leaving it to GKE), is compared only when named.
        service_account: if prior
            .is_some_and(|p| p.service_account.as_deref().unwrap_or("").is_empty())
        {
            prior.and_then(|p| p.service_account.clone())
        } else {
            config["serviceAccount"]
                .as_str()
                .filter(|a| !a.is_empty() && *a != "default")
                .map(str::to_string)
        },
        workload_metadata: if prior.is_some_and(|p| p.workload_metadata.is_none()) {
            None
        } else {
            match config["workloadMetadataConfig"]["mode"].as_str() {
                Some("GKE_METADATA") => Some("gke".to_string()),
                Some("GCE_METADATA") => Some("gce".to_string()),
                _ => None,
            }
        },
    }
}

/// The API's `workloadMetadataConfig.mode` for a `workload_metadata` value.
fn metadata_api(mode: &str) -> &'static str {
    if mode == "gke" {
        "GKE_METADATA"
    } else {
        "GCE_METADATA"
    }
}

fn same_scopes(spec: &[String], live: &[String]) -> bool {
    let Ok(mut want) = catalog::expand_scopes(spec) else {
        return false;
    };
    let mut live = live.to_vec();
    want.sort();
    want.dedup();
    live.sort();
    live.dedup();
    want == live
}

/// The labels GKE puts on the pool's nodes that Pods can select on.
pub fn node_selector(spec: &Spec) -> BTreeMap<String, String> {
    let mut out = BTreeMap::from([(
        "cloud.google.com/gke-nodepool".to_string(),
        spec.name.clone(),
    )]);
    if spec.spot {
        out.insert("cloud.google.com/gke-spot".into(), "true".into());
    }
    if spec.preemptible {
        out.insert("cloud.google.com/gke-preemptible".into(), "true".into());
    }
    if let Some(gpu) = &spec.gpu {
        out.insert("cloud.google.com/gke-accelerator".into(), gpu.kind.clone());
    } else if let Some((kind, _)) = catalog::built_in_gpus(&spec.machine_type) {
        out.insert("cloud.google.com/gke-accelerator".into(), kind.to_string());
    }
    if let (Some(tpu), Some(info)) = (&spec.tpu, catalog::tpu(&spec.machine_type)) {
        out.insert(
            "cloud.google.com/gke-tpu-accelerator".into(),
            info.accelerator_label.to_string(),
        );
        out.insert(
            "cloud.google.com/gke-tpu-topology".into(),
            tpu.topology.clone(),
        );
    }
    out
}

/// The pool as a placement target (see `Outputs::placement`).
pub fn placement(spec: &Spec) -> Value {
    let taints: Vec<Value> = spec
        .taints
        .iter()
        .filter_map(|t| catalog::parse_taint(t).ok())
        .map(|(key, value, effect)| json!({"key": key, "value": value, "effect": effect}))
        .collect();
    let accelerator = match (&spec.gpu, catalog::built_in_gpus(&spec.machine_type)) {
        (Some(gpu), _) => json!({"type": gpu.kind, "count": gpu.count}),
        (None, Some((kind, count))) => json!({"type": kind, "count": count}),
        (None, None) => Value::Null,
    };
    let tpu = match (&spec.tpu, catalog::tpu(&spec.machine_type)) {
        (Some(tpu), Some(info)) => {
            json!({"type": info.accelerator_label, "topology": tpu.topology, "chips": info.chips_per_vm})
        }
        _ => Value::Null,
    };
    json!({
        "pool": spec.name,
        "node_selector": node_selector(spec),
        "taints": taints,
        "accelerator": accelerator,
        "tpu": tpu,
        "spot": spec.spot || spec.preemptible,
    })
}

/// The strings of a JSON list; empty when it is not one.
fn strings(list: &Value) -> Vec<String> {
    list.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn outputs_of(live: &Value, spec: &Spec) -> Outputs {
    Outputs {
        node_selector: node_selector(spec),
        placement: placement(spec),
        version: live["version"].as_str().unwrap_or_default().to_string(),
        status: live["status"].as_str().unwrap_or_default().to_string(),
        landed: Landed {
            zones: strings(&live["locations"]),
            machine_type: live["config"]["machineType"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        },
    }
}

fn parts(id: &str) -> Result<Vec<&str>, ProviderError> {
    id_parts(id, &["projects", "locations", "clusters", "nodePools"])
        .ok_or_else(|| super::bad_id(GkeNodePool::KIND, id, ID_SHAPE))
}

/// The object `read` reports for the live pool `live` with id `id`, whose parts are
/// `parts`; `None` for a pool being deleted, which is as good as gone. Shared by `read`
/// and `read_batch`.
fn live_of(
    id: &str,
    parts: &[&str],
    live: &Value,
    prior: Option<&Spec>,
) -> Option<Live<GkeNodePool>> {
    if live["status"] == "STOPPING" {
        return None;
    }
    let cluster = format!(
        "projects/{}/locations/{}/clusters/{}",
        parts[0], parts[1], parts[2]
    );
    let spec = spec_of(live, &cluster, prior);
    Some(Live {
        id: id.to_string(),
        outputs: outputs_of(live, &spec),
        spec,
    })
}

fn op_path(id: &str, op: &Value) -> Result<String, ProviderError> {
    let p = parts(id)?;
    Ok(format!(
        "v1/projects/{}/locations/{}/operations/{}",
        p[0],
        p[1],
        op["name"].as_str().unwrap_or_default()
    ))
}

/// The run's node pool locks, by cluster.
type ClusterLocks = Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>;

/// One lock per cluster for the run: GKE runs one node pool operation per cluster at
/// a time, so pools of the same cluster are changed one after another instead of
/// colliding.
fn cluster_lock(ctx: &Ctx, cluster: &str) -> Arc<tokio::sync::Mutex<()>> {
    let locks = ctx.session().slot::<ClusterLocks>("gcp.node_pool_locks");
    let mut locks = locks
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    locks.entry(cluster.to_string()).or_default().clone()
}

fn cluster_of(id: &str) -> String {
    id.rsplit_once("/nodePools/")
        .map_or(id, |(c, _)| c)
        .to_string()
}

async fn get(ctx: &Ctx, id: &str) -> Result<Option<Value>, ProviderError> {
    client(ctx)?
        .get_opt(ctx, &Request::get(GET, Api::Container, format!("v1/{id}")))
        .await
}

/// Sends a mutation on the pool and waits for its operation.
async fn mutate(
    ctx: &Ctx,
    id: &str,
    call: &'static str,
    method: Method,
    path: String,
    body: Value,
) -> Result<(), ProviderError> {
    let c = client(ctx)?;
    let lock = cluster_lock(ctx, &cluster_of(id));
    let _turn = lock.lock().await;
    let op = c
        .send(
            ctx,
            &Request::new(call, Api::Container, method, path).body(body),
        )
        .await?;
    let timeout = c.config.timeout(GkeNodePool::KIND);
    operation::wait(
        ctx,
        &c,
        &operation::CONTAINER,
        call,
        &op_path(id, &op)?,
        &op,
        timeout,
    )
    .await
}

/// What is wrong with `zone` as a fallback zone of a pool on a cluster at `location`
/// (a region or a zone): not a zone of the cluster's region, or the cluster's own zone
/// (where the pool goes first anyway).
fn fallback_zone_problem(zone: &str, location: &str) -> Option<String> {
    let region = catalog::region_of_zone(location).unwrap_or(location);
    if let Err(m) = catalog::check_zone_in_region(zone, region) {
        return Some(format!(
            "{m}; a node pool's zones are zones of its cluster's region"
        ));
    }
    (zone == location).then(|| {
        format!("{zone} is the cluster's zone, where the pool is created first; name other zones of {region}")
    })
}

/// Problems with `fallback`, at `fallback.zones.N` and `fallback.machine_types.N`: a
/// fallback with nothing in it, zones that do not exist (or lie outside the cluster's
/// region when its id says where it is), machine types GKE does not have or that do not
/// take the pool's GPUs, and anything listed twice or already declared.
fn check_fallback(spec: &Spec, f: &Fallback, out: &mut Vec<Invalid>) {
    if f.zones.is_empty() && f.machine_types.is_empty() {
        out.push(Invalid::at(
            "fallback",
            "names no fallback; list zones = [\"us-central1-b\", …] or machine_types = [\"n1-standard-16\", …], or leave fallback out",
        ));
    }
    let location = id_parts(&spec.cluster, &["projects", "locations", "clusters"])
        .and_then(|p| p.get(1).map(|l| (*l).to_string()))
        .filter(|l| catalog::check_location(l).is_ok());
    for (i, zone) in f.zones.iter().enumerate() {
        let at = format!("fallback.zones.{i}");
        if f.zones[..i].contains(zone) {
            out.push(Invalid::at(&at, format!("{zone} is listed twice")));
            continue;
        }
        let problem = match &location {
            Some(l) => fallback_zone_problem(zone, l),
            None => catalog::check_zone(zone).err(),
        };
        if let Some(m) = problem {
            out.push(Invalid::at(&at, m));
        }
    }
    let is_tpu = catalog::is_tpu_machine_type(&spec.machine_type);
    for (i, machine) in f.machine_types.iter().enumerate() {
        let at = format!("fallback.machine_types.{i}");
        if f.machine_types[..i].contains(machine) {
            out.push(Invalid::at(&at, format!("{machine} is listed twice")));
            continue;
        }
        if *machine == spec.machine_type {
            out.push(Invalid::at(
                &at,
                format!("{machine} is the pool's machine_type already"),
            ));
            continue;
        }
        if let Err(m) = catalog::check_machine_type(machine) {
            out.push(Invalid::at(&at, m));
            continue;
        }
        // The pool's placement output (node labels, accelerators) is what workloads
        // are scheduled by: a fallback must not change it.
        if is_tpu || catalog::is_tpu_machine_type(machine) {
            out.push(Invalid::at(
                &at,
                "a TPU slice's machine type fixes its generation and shape; TPU pools fall back over zones only",
            ));
        } else if let Some(gpu) = &spec.gpu {
            if let Ok(count) = u32::try_from(gpu.count) {
                if let Err(m) = catalog::check_gpu(machine, &gpu.kind, count) {
                    out.push(Invalid::at(&at, m));
                }
            }
        } else if catalog::built_in_gpus(machine) != catalog::built_in_gpus(&spec.machine_type) {
            out.push(Invalid::at(
                &at,
                format!(
                    "{machine} carries other GPUs than {} (built in), so workloads placed on this pool would not fit it; pick a machine type of the same family",
                    spec.machine_type
                ),
            ));
        }
    }
}

/// How one create attempt ended.
enum Attempt {
    /// The pool is RUNNING.
    Made,
    /// The create call was refused: this attempt made nothing.
    Refused(ProviderError),
    /// The pool exists but did not come out right (its operation failed, the wait
    /// timed out, an adopted pool is in ERROR).
    Failed(ProviderError),
}

/// Creates the pool at `candidate` and waits for it, adopting the pool an earlier
/// attempt of this address made when the name is taken. The caller holds the cluster's
/// lock.
async fn attempt(ctx: &Ctx, c: &Client, spec: &Spec, id: &str, candidate: &Candidate) -> Attempt {
    let body = match candidate_body(spec, &ctx.address, candidate) {
        Ok(body) => body,
        Err(e) => return Attempt::Refused(e),
    };
    let req = Request::new(
        CREATE,
        Api::Container,
        Method::POST,
        format!("v1/{}/nodePools", spec.cluster),
    )
    .body(body);
    let timeout = c.config.timeout(GkeNodePool::KIND);
    let waited = match c.send(ctx, &req).await {
        Ok(op) => match op_path(id, &op) {
            Ok(path) => {
                operation::wait(ctx, c, &operation::CONTAINER, CREATE, &path, &op, timeout).await
            }
            Err(e) => Err(e),
        },
        Err(e) if status_of(&e) == Some(409) => {
            let live = match get(ctx, id).await {
                Ok(Some(live)) => live,
                Ok(None) => return Attempt::Refused(e),
                Err(g) => return Attempt::Refused(g),
            };
            if !is_ours(&live["config"]["resourceLabels"], &ctx.address) {
                return Attempt::Refused(not_ours(
                    CREATE,
                    "node pool",
                    id,
                    GkeNodePool::KIND,
                    &ctx.address,
                ));
            }
            ctx.progress("adopting the node pool an earlier attempt created");
            operation::until_ready(ctx, c, GET, &format!("node pool {id}"), timeout, || async {
                let Some(l) = get(ctx, id).await? else {
                    return Ok(None);
                };
                let s = l["status"].as_str().unwrap_or("PROVISIONING");
                // An ERROR pool stays so: waiting longer would only time out.
                if s == "ERROR" {
                    return Err(ProviderError::Failed {
                        call: CREATE.to_string(),
                        message: format!(
                            "node pool {id} is in ERROR: {}",
                            l["statusMessage"].as_str().unwrap_or("GKE gave no reason")
                        ),
                    });
                }
                Ok(Some((s == "RUNNING", s.to_lowercase())))
            })
            .await
        }
        Err(e) => return Attempt::Refused(e),
    };
    match waited {
        Ok(()) => Attempt::Made,
        Err(e) => Attempt::Failed(e),
    }
}

/// The zones the pool `id` was put in (GKE's `locations`), or its cluster's location
/// when they cannot be read: for the messages about a failed placement.
async fn landed_zones(ctx: &Ctx, id: &str) -> Vec<String> {
    let zones = match get(ctx, id).await {
        Ok(Some(live)) => strings(&live["locations"]),
        _ => Vec::new(),
    };
    if !zones.is_empty() {
        return zones;
    }
    parts(id)
        .ok()
        .and_then(|p| p.get(1).map(|l| vec![(*l).to_string()]))
        .unwrap_or_default()
}

/// Deletes the pool `id` and waits until it is gone; a pool already gone is fine. The
/// caller holds the cluster's lock.
async fn remove(ctx: &Ctx, c: &Client, id: &str) -> Result<(), ProviderError> {
    let req = Request::new(DELETE, Api::Container, Method::DELETE, format!("v1/{id}"));
    match c.send(ctx, &req).await {
        Ok(op) => {
            operation::wait(
                ctx,
                c,
                &operation::CONTAINER,
                DELETE,
                &op_path(id, &op)?,
                &op,
                c.config.timeout(GkeNodePool::KIND),
            )
            .await
        }
        Err(e) if status_of(&e) == Some(404) => Ok(()),
        Err(e) => Err(e),
    }
}

#[async_trait]
impl Kind for GkeNodePool {
    type Spec = Spec;
    type Outputs = Outputs;
    const KIND: &'static str = "gke_node_pool";
    const PROVIDER: &'static str = "gcp";
    const WRITES: crate::protocol::Writes = crate::protocol::Writes::FromId;
    const BILLS: bool = true;
    const NEEDS_CAPACITY: bool = true;

    fn validate(spec: &Spec, _config: &Value) -> Vec<Invalid> {
        let mut out = Vec::new();
        if let Err(m) = catalog::check_rfc1035(&spec.name, catalog::GKE_NODE_POOL_NAME_MAX) {
            out.push(Invalid::at("name", m));
        }
        match id_parts(&spec.cluster, &["projects", "locations", "clusters"]) {
            None => out.push(Invalid::at(
                "cluster",
                format!(
                    "{:?} is not a cluster id; reference one: \"${{gke_cluster.NAME.id}}\"",
                    spec.cluster
                ),
            )),
            // The pool's nodes go where its cluster is: a written-out id must name a
            // location that exists.
            Some(parts) => {
                if let Err(m) = catalog::check_location(parts[1]) {
                    out.push(Invalid::at(
                        "cluster",
                        format!("the cluster's location: {m}"),
                    ));
                }
            }
        }
        if let Err(m) = catalog::check_machine_type(&spec.machine_type) {
            out.push(Invalid::at("machine_type", m));
        }
        let is_tpu = catalog::is_tpu_machine_type(&spec.machine_type);
        match (&spec.tpu, is_tpu) {
            (Some(tpu), true) => match catalog::check_tpu_topology(&spec.machine_type, &tpu.topology) {
                Ok(nodes) => {
                    if let Some(n) = spec.node_count.filter(|n| nodes > 1 && *n != i64::from(nodes)) {
                        out.push(Invalid::at("node_count", format!("a {} slice needs exactly {nodes} nodes, not {n}; leave node_count out", tpu.topology)));
                    }
                }
                Err(m) => out.push(Invalid::at("tpu.topology", m)),
            },
            (Some(_), false) => out.push(Invalid::at(
                "tpu",
                format!("{} is not a TPU machine type; TPU slices need one such as ct5lp-hightpu-4t (v5e) or ct5p-hightpu-4t (v5p)", spec.machine_type),
            )),
            (None, true) if catalog::tpu(&spec.machine_type).is_none() => {
                out.push(Invalid::at("machine_type", format!("unknown TPU machine type {:?}", spec.machine_type)));
            }
            _ => {}
        }
        if let Some(gpu) = &spec.gpu {
            if is_tpu {
                out.push(Invalid::at("gpu", "TPU machine types take no GPUs"));
            } else {
                match u32::try_from(gpu.count) {
                    Ok(count) if count > 0 => {
                        if let Err(m) = catalog::check_gpu(&spec.machine_type, &gpu.kind, count) {
                            // Point at the type when GKE does not offer it at all (retired, typo).
                            let offered = catalog::gpus().iter().any(|g| g.name == gpu.kind);
                            out.push(Invalid::at(if offered { "gpu" } else { "gpu.type" }, m));
                        }
                    }
                    _ => out.push(Invalid::at("gpu.count", "must be at least 1")),
                }
            }
            if !DRIVERS.iter().any(|(d, _)| *d == gpu.driver) {
                out.push(Invalid::at(
                    "gpu.driver",
                    format!(
                        "{:?} is not a driver choice; use default, latest or disabled",
                        gpu.driver
                    ),
                ));
            }
        }
        if spec.spot && spec.preemptible {
            out.push(Invalid::at(
                "preemptible",
                "set spot or preemptible, not both; spot replaces preemptible VMs",
            ));
        }
        if let Some(a) = &spec.autoscaling {
            if a.min < 0 {
                out.push(Invalid::at("autoscaling.min", "must be 0 or more"));
            }
            if a.max < 1 || a.max < a.min {
                out.push(Invalid::at(
                    "autoscaling.max",
                    format!("must be at least 1 and at least min ({})", a.min),
                ));
            }
            if let Some(n) = spec.node_count.filter(|n| *n < a.min || *n > a.max) {
                out.push(Invalid::at(
                    "node_count",
                    format!("{n} is outside the autoscaling range {}–{}", a.min, a.max),
                ));
            }
        } else if spec.node_count.is_some_and(|n| n < 0) {
            out.push(Invalid::at("node_count", "must be 0 or more"));
        }
        for (i, t) in spec.taints.iter().enumerate() {
            if let Err(m) = catalog::parse_taint(t) {
                out.push(Invalid::at(&format!("taints.{i}"), m));
            }
        }
        if let Some(mode) = spec
            .workload_metadata
            .as_deref()
            .filter(|m| !["gke", "gce"].contains(m))
        {
            out.push(Invalid::at(
                "workload_metadata",
                format!(
                    "{mode:?} is not a metadata server; use \"gke\" (Workload Identity) or \"gce\""
                ),
            ));
        }
        if let Some(account) = spec.service_account.as_deref().filter(|a| {
            !a.is_empty()
                && !crate::protocol::is_unknown(&json!(a))
                && !(a.contains('@') && a.ends_with(".gserviceaccount.com"))
        }) {
            out.push(Invalid::at(
                "service_account",
                format!("{account:?} is not a service account email (NAME@PROJECT.iam.gserviceaccount.com); reference one as \"${{gcp_service_account.NAME.email}}\""),
            ));
        }
        if let Err(m) = catalog::expand_scopes(&spec.scopes) {
            out.push(Invalid::at("scopes", m));
        }
        if spec.disk_size_gb.is_some_and(|d| d < 10) {
            out.push(Invalid::at("disk_size_gb", "must be at least 10"));
        }
        if let Some(f) = &spec.fallback {
            check_fallback(spec, f, &mut out);
        }
        out
    }

    fn validate_peers(spec: &Value, peers: &[Peer]) -> Vec<Invalid> {
        let mut out: Vec<Invalid> = peers
            .iter()
            .filter(|p| p.kind == "gke_cluster" && p.spec["mode"] == "autopilot")
            .map(|p| {
                Invalid::at(
                    "cluster",
                    format!("{} is an Autopilot cluster, which manages its nodes itself and has no node pools; remove this pool or set mode = \"standard\" on {}", p.address, p.address),
                )
            })
            .collect();
        // The cluster this stack makes has no id before apply, so its location (which
        // the fallback zones must agree with) comes from its spec.
        let location = peers
            .iter()
            .filter(|p| p.kind == "gke_cluster")
            .find_map(|p| crate::usage::known(&p.spec["location"]));
        if let Some(location) = location.filter(|l| catalog::check_location(l).is_ok()) {
            let zones = spec["fallback"]["zones"]
                .as_array()
                .map_or(&[][..], Vec::as_slice);
            for (i, zone) in zones.iter().enumerate() {
                let Some(zone) = crate::usage::known(zone) else {
                    continue;
                };
                if let Some(m) = fallback_zone_problem(zone, location) {
                    out.push(Invalid::at(&format!("fallback.zones.{i}"), m));
                }
            }
        }
        out
    }

    /// The pool's VMs between its autoscaling bounds (nodes per zone × the cluster's
    /// zones), their GPUs where the machine type does not include them, and TPU chips
    /// (whose price includes the VM).
    fn usage(spec: &Value, config: &Value, peers: &[Peer]) -> Vec<crate::Usage> {
        let Ok(typed) = serde_json::from_value::<Spec>(spec.clone()) else {
            return Vec::new();
        };
        let location = location_of(spec, config, peers);
        let region = crate::usage::gcp_region(&location);
        // A regional cluster puts the pool's nodes in each of its (by default three)
        // zones; counts are per zone.
        let zonal = location.is_empty() || region != location;
        let zones: i64 = if zonal { 1 } else { 3 };
        let (min, max) = match &typed.autoscaling {
            Some(a) => (a.min * zones, a.max * zones),
            None => {
                let n = initial_count(&typed) * zones;
                (n, n)
            }
        };
        let nodes = crate::capacity::nodes_text(min, max);
        let spot = typed.spot || typed.preemptible;
        let (min, max) = (min as f64, max as f64);
        let mut out = Vec::new();
        let machine = typed.machine_type.as_str();
        if let Some(tpu) = catalog::tpu(machine) {
            let family = machine.split('-').next().unwrap_or(machine);
            let chips = f64::from(tpu.chips_per_vm);
            out.push(
                crate::Usage::fixed(
                    "tpu.chip",
                    family,
                    &region,
                    0.0,
                    format!("{nodes} × {} chips ({machine})", tpu.chips_per_vm),
                )
                .ranging(min * chips, max * chips)
                .spot(spot),
            );
            return out;
        }
        out.push(
            crate::Usage::fixed(
                "gce.vm",
                machine,
                &region,
                0.0,
                format!("{nodes} × {machine}"),
            )
            .ranging(min, max)
            .spot(spot),
        );
        if let Some(gpu) = &typed.gpu {
            // g2, a2 and a3 machine types carry their GPUs in the machine's price.
            if catalog::built_in_gpus(machine).is_none() {
                let per = gpu.count as f64;
                out.push(
                    crate::Usage::fixed(
                        "gce.gpu",
                        &gpu.kind,
                        &region,
                        0.0,
                        format!("{nodes} × {} {}", gpu.count, gpu.kind),
                    )
                    .ranging(min * per, max * per)
                    .spot(spot),
                );
            }
        }
        out
    }

    /// The pool's nodes: in the cluster's zone, or in each of a regional cluster's
    /// zones (which GKE picks: three), at their initial size and autoscaling maximum.
    /// Kubernetes Engine, and the capacity the plan reads: Compute Engine, and Cloud
    /// TPU for a TPU pool.
    fn services(spec: &Value) -> Vec<&'static str> {
        let mut out = vec!["container.googleapis.com", "compute.googleapis.com"];
        if !spec["tpu"].is_null() {
            out.push("tpu.googleapis.com");
        }
        out
    }

    fn api_groups(_spec: &Value) -> crate::ApiGroups {
        crate::ApiGroups::nodes()
    }

    fn demand(spec: &Value, config: &Value, peers: &[Peer]) -> Vec<crate::Demand> {
        let Ok(typed) = serde_json::from_value::<Spec>(spec.clone()) else {
            return Vec::new();
        };
        let machine = typed.machine_type.as_str();
        if crate::usage::known(&spec["machine_type"]).is_none() {
            return Vec::new();
        }
        let location = location_of(spec, config, peers);
        let region = crate::usage::gcp_region(&location);
        let zonal = !location.is_empty() && region != location;
        let (zones, zone_count) = if zonal {
            (vec![location.clone()], 1)
        } else {
            (Vec::new(), 3)
        };
        let per_zone = |n: i64| u32::try_from(n.max(0)).unwrap_or(0) * zone_count;
        let at_start = per_zone(initial_count(&typed));
        let at_most = per_zone(
            typed
                .autoscaling
                .as_ref()
                .map_or(initial_count(&typed), |a| a.max),
        )
        .max(at_start);
        let nodes = crate::capacity::nodes_text(at_start.into(), at_most.into());
        let accelerators: Vec<(String, u32)> = match &typed.gpu {
            Some(g) if catalog::built_in_gpus(machine).is_none() => {
                vec![(g.kind.clone(), u32::try_from(g.count).unwrap_or(0))]
            }
            _ => catalog::built_in_gpus(machine)
                .map(|(g, n)| vec![(g.to_string(), n)])
                .unwrap_or_default(),
        };
        let tpu = typed
            .tpu
            .as_ref()
            .and_then(|t| tpu_accelerator_type(machine, &t.topology))
            .or_else(|| {
                let t = catalog::tpu(machine)?;
                tpu_accelerator_type(machine, t.topologies.first()?)
            });
        let basis = match (&tpu, accelerators.first()) {
            (Some(t), _) => format!("{nodes} × {machine} ({t})"),
            (None, Some((g, n))) => format!("{nodes} × {machine} with {n} {g}"),
            (None, None) => format!("{nodes} × {machine}"),
        };
        vec![crate::Demand {
            region,
            zones,
            zone_count,
            subnets: Vec::new(),
            // A fallback is checked like the placement it falls back from.
            machine_types: std::iter::once(machine.to_string())
                .chain(typed.fallback.iter().flat_map(|f| f.machine_types.clone()))
                .collect(),
            fallback_zones: typed
                .fallback
                .as_ref()
                .map(|f| f.zones.clone())
                .unwrap_or_default(),
            accelerators,
            tpu,
            spot: typed.spot || typed.preemptible,
            nodes: (at_start, at_most),
            basis,
        }]
    }

    fn planned_id(spec: &Spec, _config: &Value) -> Option<String> {
        id_parts(&spec.cluster, &["projects", "locations", "clusters"])?;
        Some(format!("{}/nodePools/{}", spec.cluster, spec.name))
    }

    async fn read(
        &self,
        ctx: &Ctx,
        id: &str,
        prior: Option<&Spec>,
    ) -> Result<Option<Live<Self>>, ProviderError> {
        let p = parts(id)?;
        let Some(live) = get(ctx, id).await? else {
            return Ok(None);
        };
        Ok(live_of(id, &p, &live, prior))
    }

    /// The pools of one cluster are listed together.
    fn batch_key(config: &Value, id: &str, _prior: Option<&Spec>) -> Option<String> {
        parts(id).ok()?;
        list_key(
            config,
            Api::Container,
            &format!("{}/nodePools", cluster_of(id)),
        )
    }

    /// One `nodePools.list` per cluster among `items` (GKE does not page it).
    async fn read_batch(
        &self,
        ctx: &Ctx,
        items: &[(String, Option<Spec>)],
    ) -> Result<Vec<Option<Live<Self>>>, ProviderError> {
        let c = client(ctx)?;
        let groups = by_parent(items, |id| parts(id).map(|_| cluster_of(id)))?;
        let mut out: Vec<Option<Live<Self>>> = items.iter().map(|_| None).collect();
        for (cluster, indices) in groups {
            let req = Request::get(LIST, Api::Container, format!("v1/{cluster}/nodePools"));
            // A cluster that is gone has no pools: each is then read alone to confirm.
            let listed = c.get_opt(ctx, &req).await?.unwrap_or(Value::Null);
            let pools = listed["nodePools"]
                .as_array()
                .map_or(&[][..], Vec::as_slice);
            for i in indices {
                let (id, prior) = &items[i];
                let p = parts(id)?;
                out[i] = pools
                    .iter()
                    .find(|l| l["name"].as_str() == Some(p[3]))
                    .and_then(|live| live_of(id, &p, live, prior.as_ref()));
            }
        }
        Ok(out)
    }

    /// Tries each placement of [`candidates`] in turn while the last one failed for
    /// capacity, deleting each failed pool before the next try; see the module docs.
    async fn create(&self, ctx: &Ctx, spec: &Spec) -> Result<Live<Self>, ProviderError> {
        let id = format!("{}/nodePools/{}", spec.cluster, spec.name);
        parts(&id)?;
        let c = client(ctx)?;
        let lock = cluster_lock(ctx, &spec.cluster);
        let _turn = lock.lock().await;
        let candidates = candidates(spec);
        // Each failed placement, `machine in zones (why)`, and whether it was capacity.
        let mut tried: Vec<(String, bool)> = Vec::new();
        for (i, candidate) in candidates.iter().enumerate() {
            let error = match attempt(ctx, &c, spec, &id, candidate).await {
                Attempt::Made => break,
                // Nothing of this attempt exists (an earlier one's pool was deleted).
                Attempt::Refused(e) => return Err(after_tries(e, &tried)),
                Attempt::Failed(e) => e,
            };
            let zones = match &candidate.zone {
                Some(z) => vec![z.clone()],
                None => landed_zones(ctx, &id).await,
            };
            let reason = stockout_reason(&error.to_string());
            tried.push((
                format!(
                    "{} in {} ({})",
                    candidate.machine_type,
                    and_list(&zones),
                    reason.unwrap_or("failed")
                ),
                reason.is_some(),
            ));
            let (Some(reason), Some(next)) = (reason, candidates.get(i + 1)) else {
                // Another placement cannot fix it, or none is left: keep this pool.
                return Err(ProviderError::tainted(&id, after_tries(error, &tried)));
            };
            ctx.progress(&format!(
                "{} {} out of {} ({reason}): trying {}",
                and_list(&zones),
                if zones.len() == 1 { "is" } else { "are" },
                candidate.machine_type,
                next.as_fallback(&spec.machine_type)
            ));
            // The failed pool holds the name: it goes before the next try. Should it not
            // go, it is what the state keeps.
            remove(ctx, &c, &id)
                .await
                .map_err(|e| ProviderError::tainted(&id, e))?;
        }
        match self.read(ctx, &id, Some(spec)).await {
            Ok(Some(live)) => Ok(live),
            Ok(None) => Err(ProviderError::tainted(
                &id,
                ProviderError::api(
                    GET,
                    404,
                    "NOT_FOUND",
                    format!("node pool {id} vanished right after it was created"),
                ),
            )),
            // Made, but unread: kept as tainted rather than forgotten.
            Err(e) => Err(ProviderError::tainted(&id, e)),
        }
    }

    async fn update(
        &self,
        ctx: &Ctx,
        id: &str,
        prior: &Spec,
        spec: &Spec,
    ) -> Result<Live<Self>, ProviderError> {
        if prior.autoscaling != spec.autoscaling {
            let body = json!({"autoscaling": autoscaling_body(spec.autoscaling.as_ref())});
            mutate(
                ctx,
                id,
                SET_AUTOSCALING,
                Method::POST,
                format!("v1/{id}:setAutoscaling"),
                body,
            )
            .await?;
        }
        if prior.node_count != spec.node_count && spec.autoscaling.is_none() {
            if let Some(n) = spec.node_count {
                mutate(
                    ctx,
                    id,
                    SET_SIZE,
                    Method::POST,
                    format!("v1/{id}:setSize"),
                    json!({"nodeCount": n}),
                )
                .await?;
            }
        }
        let metadata_changed =
            spec.workload_metadata.is_some() && prior.workload_metadata != spec.workload_metadata;
        if prior.taints != spec.taints || prior.labels != spec.labels || metadata_changed {
            let mut body = Map::new();
            if let (true, Some(mode)) = (metadata_changed, &spec.workload_metadata) {
                body.insert(
                    "workloadMetadataConfig".into(),
                    json!({"mode": metadata_api(mode)}),
                );
            }
            if prior.taints != spec.taints {
                body.insert(
                    "taints".into(),
                    json!({"taints": taints_body(&spec.taints)?}),
                );
            }
            if prior.labels != spec.labels {
                body.insert("labels".into(), json!({"labels": spec.labels}));
            }
            mutate(
                ctx,
                id,
                UPDATE,
                Method::PUT,
                format!("v1/{id}"),
                Value::Object(body),
            )
            .await?;
        }
        self.read(ctx, id, Some(spec)).await?.ok_or_else(|| {
            ProviderError::api(GET, 404, "NOT_FOUND", format!("node pool {id} is gone"))
        })
    }

    async fn delete(
        &self,
        ctx: &Ctx,
        id: &str,
        _prior: Option<&Spec>,
    ) -> Result<(), ProviderError> {
        parts(id)?;
        let c = client(ctx)?;
        let lock = cluster_lock(ctx, &cluster_of(id));
        let _turn = lock.lock().await;
        remove(ctx, &c, id).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::schema_mismatches;

    const CLUSTER: &str = "projects/p/locations/us-central1-a/clusters/gpu";

    fn base() -> Spec {
        Spec {
            name: "preemptible-gpu-pool".into(),
            cluster: CLUSTER.into(),
            machine_type: "n1-highmem-8".into(),
            node_count: None,
            autoscaling: Some(Autoscaling { min: 0, max: 4 }),
            gpu: Some(Gpu {
                kind: "nvidia-tesla-t4".into(),
                count: 4,
                driver: "default".into(),
            }),
            tpu: None,
            spot: false,
            preemptible: true,
            taints: vec!["preemptible=true:NoSchedule".into()],
            labels: BTreeMap::new(),
            scopes: vec!["cloud-platform".into()],
            disk_size_gb: None,
            disk_type: None,
            fallback: None,
            service_account: None,
            workload_metadata: None,
        }
    }

    #[test]
    fn usage_counts_nodes_per_zone_gpus_apart_and_tpu_chips_with_their_vm() {
        let json = |s: &Spec| serde_json::to_value(s).expect("a spec");
        // Zonal, from the id: 0–4 spot VMs and their T4s, priced apart.
        let usage = GkeNodePool::usage(&json(&base()), &json!({}), &[]);
        assert_eq!(usage.len(), 2, "{usage:?}");
        assert_eq!(
            (usage[0].meter.as_str(), usage[0].item.as_str()),
            ("gce.vm", "n1-highmem-8")
        );
        assert_eq!(
            (usage[0].min, usage[0].max, usage[0].spot),
            (0.0, 4.0, true)
        );
        assert_eq!(usage[0].region, "us-central1");
        assert_eq!(
            (usage[1].meter.as_str(), usage[1].max),
            ("gce.gpu", 16.0),
            "4 nodes × 4 T4s"
        );
        // Regional, from the cluster the stack makes: three zones of nodes.
        let peer = Peer {
            kind: "gke_cluster".into(),
            address: "gke_cluster.c".into(),
            spec: json!({"location": "europe-west4"}),
        };
        let mut regional = base();
        regional.cluster = format!("{}-x", crate::protocol::UNKNOWN);
        let usage = GkeNodePool::usage(&json(&regional), &json!({}), &[peer]);
        assert_eq!(
            (usage[0].max, usage[0].region.as_str()),
            (12.0, "europe-west4")
        );
        // A g2 machine carries its L4s: no GPU line.
        let mut g2 = base();
        g2.machine_type = "g2-standard-24".into();
        g2.gpu = Some(Gpu {
            kind: "nvidia-l4".into(),
            count: 2,
            driver: "default".into(),
        });
        let usage = GkeNodePool::usage(&json(&g2), &json!({}), &[]);
        assert_eq!(usage.len(), 1, "{usage:?}");
        // A TPU pool bills chips, the VM included.
        let mut tpu = base();
        tpu.machine_type = "ct5lp-hightpu-4t".into();
        tpu.gpu = None;
        tpu.spot = false;
        tpu.tpu = Some(Tpu {
            topology: "2x2".into(),
        });
        tpu.autoscaling = Some(Autoscaling { min: 0, max: 1 });
        let usage = GkeNodePool::usage(&json(&tpu), &json!({}), &[]);
        assert_eq!(usage.len(), 1);
        assert_eq!(
            (
                usage[0].meter.as_str(),
                usage[0].item.as_str(),
                usage[0].max
            ),
            ("tpu.chip", "ct5lp", 4.0)
        );
    }

    #[test]
    fn schema_matches_spec_and_outputs() {
        let full = Spec {
            node_count: Some(1),
            tpu: Some(Tpu {
                topology: "2x2".into(),
            }),
            labels: BTreeMap::from([("team".to_string(), "ml".to_string())]),
            disk_size_gb: Some(100),
            disk_type: Some("pd-ssd".into()),
            fallback: Some(Fallback {
                zones: vec!["us-central1-b".into()],
                machine_types: vec!["n1-highmem-16".into()],
            }),
            service_account: Some("gpu-nodes@p.iam.gserviceaccount.com".into()),
            workload_metadata: Some("gke".into()),
            ..base()
        };
        let outputs = outputs_of(
            &json!({"version": "1.31", "status": "RUNNING", "locations": ["us-central1-a"],
                    "config": {"machineType": "n1-highmem-8"}}),
            &full,
        );
        assert_eq!(
            schema_mismatches::<GkeNodePool>(&full, &outputs),
            Vec::<String>::new()
        );
    }

    #[test]
    fn request_body_matches_the_gcloud_flags() {
        let body = create_body(&base(), "gke_node_pool.preemptible").expect("body");
        let pool = &body["nodePool"];
        assert_eq!(pool["initialNodeCount"], 0);
        assert_eq!(
            pool["autoscaling"],
            json!({"enabled": true, "minNodeCount": 0, "maxNodeCount": 4})
        );
        assert_eq!(
            pool["config"]["taints"],
            json!([{"key": "preemptible", "value": "true", "effect": "NO_SCHEDULE"}])
        );
        assert_eq!(pool["config"]["accelerators"][0]["acceleratorCount"], "4");
        assert_eq!(
            pool["config"]["oauthScopes"],
            json!(["https://www.googleapis.com/auth/cloud-platform"])
        );
        assert_eq!(pool["config"]["preemptible"], true);
    }

    #[test]
    fn live_pool_reads_back_as_its_spec() {
        for s in [
            base(),
            Spec {
                gpu: None,
                tpu: Some(Tpu {
                    topology: "4x4".into(),
                }),
                machine_type: "ct5lp-hightpu-4t".into(),
                taints: vec![],
                autoscaling: None,
                preemptible: false,
                ..base()
            },
        ] {
            let mut live = create_body(&s, "a.b").expect("body")["nodePool"].clone();
            live["status"] = json!("RUNNING");
            assert_eq!(spec_of(&live, CLUSTER, Some(&s)), s);
        }
    }

    #[test]
    fn validation_table() {
        let cases: Vec<(Spec, &str)> = vec![
            (base(), ""),
            (
                Spec {
                    gpu: Some(Gpu {
                        kind: "nvidia-tesla-k80".into(),
                        count: 1,
                        driver: "default".into(),
                    }),
                    ..base()
                },
                "gpu.type",
            ),
            (
                Spec {
                    gpu: Some(Gpu {
                        kind: "nvidia-tesla-t4".into(),
                        count: 3,
                        driver: "default".into(),
                    }),
                    ..base()
                },
                "gpu",
            ),
            (
                Spec {
                    spot: true,
                    ..base()
                },
                "not both",
            ),
            (
                Spec {
                    autoscaling: Some(Autoscaling { min: 5, max: 4 }),
                    ..base()
                },
                "autoscaling.max",
            ),
            (
                Spec {
                    taints: vec!["preemptible=true:Sometimes".into()],
                    ..base()
                },
                "taints.0",
            ),
            (
                Spec {
                    machine_type: "ct5lp-hightpu-4t".into(),
                    gpu: None,
                    tpu: Some(Tpu {
                        topology: "3x3".into(),
                    }),
                    ..base()
                },
                "tpu.topology",
            ),
            (
                Spec {
                    tpu: Some(Tpu {
                        topology: "2x2".into(),
                    }),
                    ..base()
                },
                "not a TPU machine type",
            ),
            (
                Spec {
                    cluster: "gpu".into(),
                    ..base()
                },
                "not a cluster id",
            ),
            (
                Spec {
                    cluster: "projects/p/locations/us-central1-z/clusters/gpu".into(),
                    ..base()
                },
                "the cluster's location: `us-central1-z` is not a Google Cloud zone: us-central1 has zones a, b, c, f",
            ),
            (
                Spec {
                    cluster: "projects/p/locations/us-west9/clusters/gpu".into(),
                    ..base()
                },
                "did you mean `us-west1`",
            ),
            (
                Spec {
                    scopes: vec!["everything".into()],
                    ..base()
                },
                "scopes",
            ),
        ];
        for (s, want) in cases {
            let problems = GkeNodePool::validate(&s, &Value::Null);
            if want.is_empty() {
                assert!(problems.is_empty(), "{problems:?}");
            } else {
                assert!(
                    problems
                        .iter()
                        .any(|p| p.message.contains(want) || p.path.join(".") == want),
                    "want {want}, got {problems:?}"
                );
            }
        }
    }

    #[test]
    fn autopilot_cluster_peer_is_refused() {
        let peers = [Peer {
            kind: "gke_cluster".into(),
            address: "gke_cluster.auto".into(),
            spec: json!({"mode": "autopilot"}),
        }];
        let problems = GkeNodePool::validate_peers(&Value::Null, &peers);
        assert_eq!(problems.len(), 1);
        assert!(
            problems[0]
                .message
                .contains("gke_cluster.auto is an Autopilot cluster"),
            "{problems:?}"
        );
        let standard = [Peer {
            kind: "gke_cluster".into(),
            address: "gke_cluster.gpu".into(),
            spec: json!({"mode": "standard"}),
        }];
        assert!(GkeNodePool::validate_peers(&Value::Null, &standard).is_empty());
    }

    #[test]
    fn node_selector_follows_placement() {
        let sel = node_selector(&Spec {
            machine_type: "ct5lp-hightpu-4t".into(),
            gpu: None,
            tpu: Some(Tpu {
                topology: "2x4".into(),
            }),
            spot: true,
            preemptible: false,
            ..base()
        });
        assert_eq!(sel["cloud.google.com/gke-spot"], "true");
        assert_eq!(sel["cloud.google.com/gke-tpu-topology"], "2x4");
        assert!(sel.contains_key("cloud.google.com/gke-tpu-accelerator"));
    }

    fn with_fallback(zones: &[&str], machine_types: &[&str]) -> Spec {
        Spec {
            fallback: Some(Fallback {
                zones: zones.iter().map(|z| z.to_string()).collect(),
                machine_types: machine_types.iter().map(|m| m.to_string()).collect(),
            }),
            ..base()
        }
    }

    #[test]
    fn candidates_try_other_zones_before_other_machine_types() {
        let c = |zone: Option<&str>, m: &str| Candidate {
            zone: zone.map(str::to_string),
            machine_type: m.into(),
        };
        assert_eq!(candidates(&base()), vec![c(None, "n1-highmem-8")]);
        let spec = with_fallback(&["us-central1-b", "us-central1-c"], &["n1-highmem-16"]);
        assert_eq!(
            candidates(&spec),
            vec![
                c(None, "n1-highmem-8"),
                c(Some("us-central1-b"), "n1-highmem-8"),
                c(Some("us-central1-c"), "n1-highmem-8"),
                c(None, "n1-highmem-16"),
                c(Some("us-central1-b"), "n1-highmem-16"),
                c(Some("us-central1-c"), "n1-highmem-16"),
            ]
        );
        let body = candidate_body(&spec, "gke_node_pool.gpu", &candidates(&spec)[4]).expect("body");
        assert_eq!(body["nodePool"]["locations"], json!(["us-central1-b"]));
        assert_eq!(body["nodePool"]["config"]["machineType"], "n1-highmem-16");
        let declared =
            candidate_body(&spec, "gke_node_pool.gpu", &candidates(&spec)[0]).expect("body");
        assert!(
            declared["nodePool"].get("locations").is_none(),
            "the cluster's zones"
        );
        assert_eq!(
            candidates(&spec)[4].as_fallback("n1-highmem-8"),
            "fallback machine type n1-highmem-16 in fallback zone us-central1-b"
        );
        assert_eq!(
            candidates(&spec)[1].as_fallback("n1-highmem-8"),
            "fallback zone us-central1-b"
        );
    }

    #[test]
    fn only_capacity_failures_are_stockouts() {
        let sandbox = "Google Compute Engine: Not all instances running in IGM after 3s. Expected 1, running 0, transitioning 1. Current errors: [GCE_STOCKOUT]: Instance 'gke-a-b' creation failed: The zone 'projects/p/zones/us-central1-a' does not have enough resources available to fulfill the request.  Try a different zone, or try again later.";
        assert_eq!(stockout_reason(sandbox), Some("GCE_STOCKOUT"));
        assert_eq!(
            stockout_reason(
                "[ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS]: Instance 'x' creation failed"
            ),
            Some("ZONE_RESOURCE_POOL_EXHAUSTED")
        );
        assert_eq!(
            stockout_reason("The zone 'projects/p/zones/us-central1-a' does not have enough resources available to fulfill the request."),
            Some("not enough resources available")
        );
        for other in [
            "Quota 'NVIDIA_T4_GPUS' exceeded. Limit: 0.0 in region us-central1.",
            "Insufficient regional quota to satisfy request",
            "timed out after 1800s waiting for operation",
        ] {
            assert_eq!(stockout_reason(other), None, "{other}");
        }
        let tried = vec![
            (
                "n1-highmem-8 in us-central1-a (GCE_STOCKOUT)".to_string(),
                true,
            ),
            (
                "n1-highmem-8 in us-central1-b (GCE_STOCKOUT)".to_string(),
                true,
            ),
        ];
        let last = ProviderError::api(
            "x (operation o)",
            429,
            "RESOURCE_EXHAUSTED",
            "[GCE_STOCKOUT]",
        );
        assert_eq!(
            after_tries(last, &tried).to_string(),
            "container.projects.locations.clusters.nodePools.create failed: every placement tried was out of capacity: n1-highmem-8 in us-central1-a (GCE_STOCKOUT), n1-highmem-8 in us-central1-b (GCE_STOCKOUT); the last attempt failed: x (operation o) failed: 429 RESOURCE_EXHAUSTED: [GCE_STOCKOUT]"
        );
        let alone = ProviderError::api("x", 429, "RESOURCE_EXHAUSTED", "[GCE_STOCKOUT]");
        assert_eq!(
            after_tries(alone, &tried[..1]).to_string(),
            "x failed: 429 RESOURCE_EXHAUSTED: [GCE_STOCKOUT]"
        );
    }

    #[test]
    fn a_pool_on_a_fallback_reads_back_as_declared_and_says_where_it_landed() {
        let spec = with_fallback(&["us-central1-b"], &["n1-highmem-16"]);
        let placed = &candidates(&spec)[3];
        let mut live = candidate_body(&spec, "a.b", placed).expect("body")["nodePool"].clone();
        live["status"] = json!("RUNNING");
        live["locations"] = json!(["us-central1-a"]);
        assert_eq!(spec_of(&live, CLUSTER, Some(&spec)), spec);
        let outputs = outputs_of(&live, &spec);
        assert_eq!(
            outputs.landed,
            Landed {
                zones: vec!["us-central1-a".into()],
                machine_type: "n1-highmem-16".into()
            }
        );
        // A machine type no candidate has is drift; without the prior's fallback too.
        live["config"]["machineType"] = json!("n1-highmem-32");
        assert_eq!(
            spec_of(&live, CLUSTER, Some(&spec)).machine_type,
            "n1-highmem-32"
        );
        live["config"]["machineType"] = json!("n1-highmem-16");
        assert_eq!(
            spec_of(&live, CLUSTER, Some(&base())).machine_type,
            "n1-highmem-16"
        );
        // The fallback itself is the prior's: changing it is no change of the pool.
        let other = with_fallback(&["us-central1-c"], &[]);
        assert_eq!(
            spec_of(&live, CLUSTER, Some(&other)).fallback,
            other.fallback
        );
    }

    #[test]
    fn fallback_validation() {
        let problems = |s: &Spec| GkeNodePool::validate(s, &Value::Null);
        assert!(problems(&with_fallback(
            &["us-central1-b", "us-central1-c"],
            &["n1-highmem-16", "n1-standard-16"]
        ))
        .is_empty());
        let cases: Vec<(Spec, &str, &str)> = vec![
            (with_fallback(&[], &[]), "fallback", "names no fallback"),
            (
                with_fallback(&["us-central1-b", "us-central1-b"], &[]),
                "fallback.zones.1",
                "listed twice",
            ),
            (
                with_fallback(&["europe-west4-a"], &[]),
                "fallback.zones.0",
                "is in europe-west4, not us-central1",
            ),
            (
                with_fallback(&["us-central1-z"], &[]),
                "fallback.zones.0",
                "us-central1 has zones a, b, c, f",
            ),
            (
                with_fallback(&["us-central1-a"], &[]),
                "fallback.zones.0",
                "the cluster's zone",
            ),
            (
                with_fallback(&[], &["n1-highmem-8"]),
                "fallback.machine_types.0",
                "machine_type already",
            ),
            (
                with_fallback(&[], &["n1-highmem-16", "n1-highmem-16"]),
                "fallback.machine_types.1",
                "listed twice",
            ),
            (
                with_fallback(&[], &["n9-mega-8"]),
                "fallback.machine_types.0",
                "",
            ),
            (
                with_fallback(&[], &["e2-standard-8"]),
                "fallback.machine_types.0",
                "",
            ),
            (
                with_fallback(&[], &["ct5lp-hightpu-4t"]),
                "fallback.machine_types.0",
                "TPU",
            ),
            (
                Spec {
                    gpu: None,
                    ..with_fallback(&[], &["g2-standard-8"])
                },
                "fallback.machine_types.0",
                "carries other GPUs",
            ),
        ];
        for (s, path, want) in cases {
            let got = problems(&s);
            assert!(
                got.iter()
                    .any(|p| p.path.join(".") == path && p.message.contains(want)),
                "want {path}: {want}, got {got:?}"
            );
        }
        // A cluster whose id is not known yet: zones are checked alone, and against the
        // cluster's spec by validate_peers.
        let unknown = Spec {
            cluster: crate::protocol::UNKNOWN.into(),
            ..with_fallback(&["europe-west4-a"], &[])
        };
        assert!(!problems(&unknown)
            .iter()
            .any(|p| p.path.join(".") == "fallback.zones.0"));
        let peer = [Peer {
            kind: "gke_cluster".into(),
            address: "gke_cluster.gpu".into(),
            spec: json!({"mode": "standard", "location": "us-central1-a"}),
        }];
        let spec =
            json!({"fallback": {"zones": ["us-central1-b", "europe-west4-a", "us-central1-a"]}});
        let got = GkeNodePool::validate_peers(&spec, &peer);
        let paths: Vec<String> = got.iter().map(|p| p.path.join(".")).collect();
        assert_eq!(paths, ["fallback.zones.1", "fallback.zones.2"], "{got:?}");
    }
}
