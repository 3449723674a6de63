//! Where a workload runs: spot capacity, GPUs, TPUs and node pools mapped to the node
//! selector, tolerations and resource limits each cluster flavor understands; and the
//! same rules checked against the node pool and cluster of the same stack, read from
//! their specs before either exists ([`PoolPeer`], [`ClusterSide`], [`peer_refusals`]).
//! Pure and offline, so the same answer serves `validate`, `render` and apply.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::connect::{flavor, Flavor};
use crate::protocol::{is_unknown, UNKNOWN};
use crate::schema::Fields;
use crate::{aws, gcp, Peer};

/// A TPU slice a workload asks for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Tpu {
    /// The TPU accelerator (tpu-v5-lite-podslice).
    #[serde(rename = "type")]
    pub kind: String,
    /// The slice topology (2x4).
    pub topology: String,
    /// TPU chips per pod.
    pub chips: i64,
}

/// What a workload asks of its nodes.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Intent {
    pub spot: bool,
    pub gpus: i64,
    /// The accelerator (`nvidia-tesla-t4`) or, on EKS, an instance type (`g5.xlarge`).
    pub gpu_type: Option<String>,
    pub tpu: Option<Tpu>,
    /// A node pool's `placement` output: `{node_selector, taints, accelerator, tpu, spot}`.
    pub node_pool: Option<Value>,
}

/// How a pod template gets onto the right nodes.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Placement {
    pub node_selector: BTreeMap<String, String>,
    /// Pod tolerations, as the API spells them.
    pub tolerations: Vec<Value>,
    /// Container resource limits for accelerators (`nvidia.com/gpu: "1"`).
    pub limits: BTreeMap<String, String>,
}

/// Why a workload cannot be placed: the workload's setting to change (dotted, as in
/// the stack: `gpus`, `tpu.topology`, `node_pool`) and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub field: String,
    pub message: String,
}

impl Refusal {
    fn at(field: &str, message: impl Into<String>) -> Self {
        Self {
            field: field.to_string(),
            message: message.into(),
        }
    }
}

/// `field: message`.
impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

const GKE_SPOT: &str = "cloud.google.com/gke-spot";
const GKE_ACCELERATOR: &str = "cloud.google.com/gke-accelerator";
const GKE_TPU_ACCELERATOR: &str = "cloud.google.com/gke-tpu-accelerator";
const GKE_TPU_TOPOLOGY: &str = "cloud.google.com/gke-tpu-topology";
const EKS_CAPACITY_TYPE: &str = "eks.amazonaws.com/capacityType";
const INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
const NVIDIA_GPU: &str = "nvidia.com/gpu";
const GOOGLE_TPU: &str = "google.com/tpu";

/// Which setting asked for a node selector term: its label in messages and the
/// workload's field a clash is reported at.
struct Source {
    label: String,
    field: &'static str,
}

impl Placement {
    /// Adds a node selector term; `source` says which setting asked for it, so a clash
    /// names both sides. A clash is reported at the workload's own setting: the one
    /// that came first when the node pool is the other side.
    fn select(
        &mut self,
        key: &str,
        value: &str,
        source: Source,
        sources: &mut BTreeMap<String, Source>,
    ) -> Result<(), Refusal> {
        match self.node_selector.get(key) {
            Some(existing) if existing != value => {
                let earlier = sources.get(key);
                let field = match earlier {
                    Some(e) if source.field == "node_pool" => e.field,
                    _ => source.field,
                };
                Err(Refusal::at(
                    field,
                    format!(
                        "{} selects {key}={existing} but {} selects {key}={value}",
                        earlier.map_or("another setting", |e| e.label.as_str()),
                        source.label
                    ),
                ))
            }
            Some(_) => Ok(()),
            None => {
                self.node_selector
                    .insert(key.to_string(), value.to_string());
                sources.insert(key.to_string(), source);
                Ok(())
            }
        }
    }

    fn tolerate(&mut self, toleration: Value) {
        if !self.tolerations.contains(&toleration) {
            self.tolerations.push(toleration);
        }
    }
}

fn by(field: &'static str) -> Source {
    Source {
        label: field.to_string(),
        field,
    }
}

fn exists_toleration(key: &str) -> Value {
    json!({"key": key, "operator": "Exists", "effect": "NoSchedule"})
}

/// A taint effect as the API spells it, from either the GKE enum or the API form.
fn taint_effect(effect: &str) -> Option<&'static str> {
    match effect {
        "NO_SCHEDULE" | "NoSchedule" => Some("NoSchedule"),
        "PREFER_NO_SCHEDULE" | "PreferNoSchedule" => Some("PreferNoSchedule"),
        "NO_EXECUTE" | "NoExecute" => Some("NoExecute"),
        _ => None,
    }
}

/// An EKS GPU type that names an instance type (`g5.xlarge`) rather than an accelerator.
fn looks_like_instance_type(gpu_type: &str) -> bool {
    gpu_type
        .split_once('.')
        .is_some_and(|(family, size)| !family.is_empty() && !size.is_empty())
}

/// `1 GPU`, `4 GPUs`.
fn count_of(n: i64, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// The node selector, tolerations and limits for `intent` on a `flavor` cluster.
///
/// Fails, naming the setting to change (`gpus: asks for …`), when the cluster cannot
/// offer what is asked (spot on a generic cluster, TPUs off GKE, GPUs on Autopilot
/// without a type) or when the settings contradict each other or the node pool.
pub fn placement(flavor: &Flavor, intent: &Intent) -> Result<Placement, String> {
    place(flavor, intent).map_err(|r| r.to_string())
}

/// [`placement`], with the refusal's field apart from its message (for `validate`).
pub fn place(flavor: &Flavor, intent: &Intent) -> Result<Placement, Refusal> {
    let mut out = Placement::default();
    let mut sources = BTreeMap::new();
    let pool_name = intent
        .node_pool
        .as_ref()
        .and_then(|p| p["pool"].as_str())
        .map_or_else(
            || "node_pool".to_string(),
            |name| format!("node pool {name}"),
        );

    check_accelerators(intent)?;
    if intent.spot {
        place_spot(flavor, intent, &pool_name, &mut out, &mut sources)?;
    }
    if intent.gpus > 0 {
        place_gpus(flavor, intent, &mut out, &mut sources)?;
    }
    if let Some(tpu) = &intent.tpu {
        place_tpu(flavor, tpu, &mut out, &mut sources)?;
    }
    if let Some(pool) = &intent.node_pool {
        follow_pool(pool, &pool_name, &mut out, &mut sources)?;
        check_pool_capacity(pool, intent, &pool_name)?;
    }
    Ok(out)
}

/// Refuses GPU and TPU settings that contradict each other, whatever the cluster.
fn check_accelerators(intent: &Intent) -> Result<(), Refusal> {
    if intent.gpus < 0 {
        return Err(Refusal::at(
            "gpus",
            format!("must be 0 or more, got {}", intent.gpus),
        ));
    }
    if intent.gpus > 0 && intent.tpu.is_some() {
        return Err(Refusal::at(
            "tpu",
            "a workload uses GPUs or a TPU, not both: set gpus = 0 or remove tpu",
        ));
    }
    if intent.gpus == 0 && intent.gpu_type.is_some() {
        return Err(Refusal::at(
            "gpu_type",
            "is set but gpus is 0: set gpus to how many GPUs each pod needs",
        ));
    }
    Ok(())
}

/// Places a workload asking for spot capacity: on the node pool's nodes when it names
/// a spot pool, else on the nodes the `flavor` labels as spot.
fn place_spot(
    flavor: &Flavor,
    intent: &Intent,
    pool_name: &str,
    out: &mut Placement,
    sources: &mut BTreeMap<String, Source>,
) -> Result<(), Refusal> {
    let pool_spot = intent
        .node_pool
        .as_ref()
        .map(|p| p["spot"].as_bool().unwrap_or(false));
    match (flavor, pool_spot) {
        (_, Some(false)) => {
            return Err(Refusal::at("spot", format!("asks for spot capacity, but {pool_name} is not a spot pool: set spot = false, or use a spot node pool")));
        }
        // The pool's own selector already picks its (spot or preemptible) nodes.
        (_, Some(true)) => {}
        (Flavor::Gke { .. }, None) => {
            out.select(GKE_SPOT, "true", by("spot"), sources)?;
            out.tolerate(json!({"key": GKE_SPOT, "operator": "Equal", "value": "true", "effect": "NoSchedule"}));
        }
        (Flavor::Eks, None) => out.select(EKS_CAPACITY_TYPE, "SPOT", by("spot"), sources)?,
        (Flavor::Generic, None) => {
            return Err(Refusal::at(
                "spot",
                "spot = true needs to know how the cluster labels spot nodes: set flavor = \"gke\" or \"eks\" on the cluster reference, or give a spot node_pool",
            ));
        }
    }
    Ok(())
}

/// Places a workload asking for GPUs: the GPU limit and toleration, and the nodes with
/// its `gpu_type` as the `flavor` labels them.
fn place_gpus(
    flavor: &Flavor,
    intent: &Intent,
    out: &mut Placement,
    sources: &mut BTreeMap<String, Source>,
) -> Result<(), Refusal> {
    out.limits
        .insert(NVIDIA_GPU.to_string(), intent.gpus.to_string());
    out.tolerate(exists_toleration(NVIDIA_GPU));
    let pool_accelerator = intent
        .node_pool
        .as_ref()
        .and_then(|p| p["accelerator"]["type"].as_str().map(str::to_string));
    match (flavor, intent.gpu_type.as_deref()) {
        (Flavor::Gke { .. }, Some(kind)) => {
            out.select(GKE_ACCELERATOR, kind, by("gpu_type"), sources)?
        }
        (Flavor::Gke { autopilot: true }, None) if pool_accelerator.is_none() => {
            return Err(Refusal::at("gpu_type", "GPUs on GKE Autopilot need gpu_type, the accelerator to provision (e.g. \"nvidia-tesla-t4\" or \"nvidia-l4\")"));
        }
        (Flavor::Eks, Some(kind)) if looks_like_instance_type(kind) => {
            out.select(INSTANCE_TYPE, kind, by("gpu_type"), sources)?
        }
        (Flavor::Eks, Some(kind)) => {
            return Err(Refusal::at("gpu_type", format!("on EKS, gpu_type names the GPU instance type (e.g. \"g5.xlarge\"); {kind:?} is not one")));
        }
        (Flavor::Generic, Some(_)) => {
            return Err(Refusal::at("gpu_type", "gpu_type needs to know how the cluster labels GPU nodes: set flavor = \"gke\" or \"eks\" on the cluster reference, or select nodes with node_pool"));
        }
        _ => {}
    }
    Ok(())
}

/// Places a workload asking for a TPU slice (GKE only): the nodes of its type and
/// topology, the chip limit and the toleration.
fn place_tpu(
    flavor: &Flavor,
    tpu: &Tpu,
    out: &mut Placement,
    sources: &mut BTreeMap<String, Source>,
) -> Result<(), Refusal> {
    if !matches!(flavor, Flavor::Gke { .. }) {
        return Err(Refusal::at(
            "tpu",
            format!(
                "TPUs run on GKE only; this cluster's flavor is {}",
                flavor.describe()
            ),
        ));
    }
    if tpu.chips < 1 {
        return Err(Refusal::at(
            "tpu.chips",
            format!("must be 1 or more, got {}", tpu.chips),
        ));
    }
    out.select(GKE_TPU_ACCELERATOR, &tpu.kind, by("tpu.type"), sources)?;
    out.select(GKE_TPU_TOPOLOGY, &tpu.topology, by("tpu.topology"), sources)?;
    out.limits
        .insert(GOOGLE_TPU.to_string(), tpu.chips.to_string());
    out.tolerate(exists_toleration(GOOGLE_TPU));
    Ok(())
}

/// Places a workload on the node pool `pool` (its `placement` output): the pool's node
/// selector, and a toleration of each of its taints.
fn follow_pool(
    pool: &Value,
    pool_name: &str,
    out: &mut Placement,
    sources: &mut BTreeMap<String, Source>,
) -> Result<(), Refusal> {
    if !pool.is_object() {
        return Err(Refusal::at(
            "node_pool",
            "must be a node pool's `placement` output, such as \"${gke_node_pool.gpu.placement}\"",
        ));
    }
    if let Some(selector) = pool["node_selector"].as_object() {
        for (key, value) in selector {
            let value = value.as_str().ok_or_else(|| {
                Refusal::at(
                    "node_pool",
                    format!("{pool_name}: node_selector.{key} must be a string"),
                )
            })?;
            let source = Source {
                label: pool_name.to_string(),
                field: "node_pool",
            };
            out.select(key, value, source, sources)?;
        }
    }
    for taint in pool["taints"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        let key = taint["key"]
            .as_str()
            .ok_or_else(|| Refusal::at("node_pool", format!("{pool_name}: a taint has no key")))?;
        let raw = taint["effect"].as_str().unwrap_or_default();
        let effect = taint_effect(raw).ok_or_else(|| {
            Refusal::at(
                "node_pool",
                format!("{pool_name}: taint {key} has unknown effect {raw:?}"),
            )
        })?;
        let mut toleration = json!({"key": key, "operator": "Equal", "effect": effect});
        match taint["value"].as_str() {
            Some(value) if !value.is_empty() => toleration["value"] = json!(value),
            _ => toleration["operator"] = json!("Exists"),
        }
        out.tolerate(toleration);
    }
    Ok(())
}

/// Refuses a workload asking for more GPUs or TPU chips per pod than a node of the
/// pool `pool` has (or any, when it has none).
fn check_pool_capacity(pool: &Value, intent: &Intent, pool_name: &str) -> Result<(), Refusal> {
    let per_node = pool["accelerator"]["count"].as_i64();
    match per_node {
        // GPUs on the pool but none requested: the pod runs there without claiming any.
        _ if intent.gpus == 0 => {}
        None => {
            return Err(Refusal::at(
                "gpus",
                format!(
                    "asks for {} per pod, but {pool_name} has no GPUs: set gpus = 0, or use a node pool with GPUs",
                    count_of(intent.gpus, "GPU")
                ),
            ))
        }
        Some(n) if intent.gpus > n => {
            return Err(Refusal::at(
                "gpus",
                format!(
                    "asks for {} per pod, but {pool_name} has {n} GPU(s) per node: set gpus = {n} or fewer, or use a node pool with more GPUs per node",
                    count_of(intent.gpus, "GPU")
                ),
            ));
        }
        Some(_) => {}
    }
    if let Some(tpu) = &intent.tpu {
        // Without TPUs the pool's nodes never carry the TPU labels the pod selects.
        if pool["tpu"].is_null() {
            return Err(Refusal::at(
                "tpu",
                format!("asks for a TPU slice, but {pool_name} has no TPUs: remove tpu, or use a TPU node pool"),
            ));
        }
        if let Some(chips) = pool["tpu"]["chips"].as_i64() {
            if tpu.chips > chips {
                return Err(Refusal::at(
                    "tpu.chips",
                    format!(
                        "asks for {} per pod, but {pool_name} has {chips} TPU chip(s) per node",
                        count_of(tpu.chips, "TPU chip")
                    ),
                ));
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------
// The node pool and cluster of the same stack, read from their specs: the plan checks
// the workload against them before either exists (their outputs are unknown then).
// ---------------------------------------------------------------------------------

/// A string of a spec, unless it is (or holds) a value not known until apply.
fn known_str(v: &Value) -> Option<&str> {
    v.as_str().filter(|s| !s.contains(UNKNOWN))
}

/// A bool of a spec with defaults filled (absent is false); `None` when unknown.
fn known_bool(v: &Value) -> Option<bool> {
    match v {
        Value::Bool(b) => Some(*b),
        Value::Null => Some(false),
        _ => None,
    }
}

/// A fact about a node pool's nodes, with the setting of the pool's spec it comes
/// from, as the stack writes it (`gpu.count = 1`), so a refusal can name it.
#[derive(Debug, Clone, PartialEq)]
pub struct Fact<T> {
    pub value: T,
    pub setting: String,
}

fn fact<T>(value: T, setting: impl Into<String>) -> Fact<T> {
    Fact {
        value,
        setting: setting.into(),
    }
}

/// The kinds of node pool a workload's `node_pool` can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolKind {
    GkeNodePool,
    EksNodeGroup,
}

/// The TPU slice a pool's nodes form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slice {
    /// The `cloud.google.com/gke-tpu-accelerator` value (`tpu-v5-lite-podslice`).
    pub kind: String,
    pub topology: String,
    /// TPU chips per node.
    pub chips: i64,
}

/// A node pool of the same stack (a `gke_node_pool` or `eks_node_group` peer) as its
/// spec says offline, read the way its `placement` output is computed. A fact is
/// `None` while it depends on a value not known until apply: its check waits.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolPeer {
    pub address: String,
    pub kind: PoolKind,
    /// GPUs per node, 0 without; on an EKS group of several instance types the fewest,
    /// as a pod may land on any of them (the group's `placement` says the same).
    pub gpus: Option<Fact<i64>>,
    /// What `gpu_type` may name to land on these nodes: the accelerator (GKE) or the
    /// group's instance types (EKS); empty without GPUs.
    pub gpu_types: Option<Fact<Vec<String>>>,
    pub spot: Option<Fact<bool>>,
    pub tpu: Option<Fact<Option<Slice>>>,
}

impl PoolPeer {
    /// The pool `peer` is, when it is one.
    pub fn of(peer: &Peer) -> Option<Self> {
        match peer.kind.as_str() {
            "gke_node_pool" => Some(Self::gke(&peer.address, &peer.spec)),
            "eks_node_group" => Some(Self::eks(&peer.address, &peer.spec)),
            _ => None,
        }
    }

    /// As `gcp::node_pool::placement` reads a `gke_node_pool` spec.
    fn gke(address: &str, spec: &Value) -> Self {
        let machine = known_str(&spec["machine_type"]);
        let (gpus, gpu_types) = match &spec["gpu"] {
            Value::Null => match machine {
                None => (None, None),
                Some(mt) => match gcp::catalog::built_in_gpus(mt) {
                    Some((kind, n)) => {
                        let setting = format!("machine_type = {mt:?}");
                        (
                            Some(fact(i64::from(n), &setting)),
                            Some(fact(vec![kind.to_string()], setting)),
                        )
                    }
                    None => {
                        let setting = format!("machine_type = {mt:?} and no gpu");
                        (Some(fact(0, &setting)), Some(fact(Vec::new(), setting)))
                    }
                },
            },
            gpu if gpu.is_object() => {
                let count = match &gpu["count"] {
                    // serde's default, as the pool's spec decodes it.
                    Value::Null => Some(1),
                    n => n.as_i64(),
                };
                (
                    count.map(|n| fact(n, format!("gpu.count = {n}"))),
                    known_str(&gpu["type"])
                        .map(|t| fact(vec![t.to_string()], format!("gpu.type = {t:?}"))),
                )
            }
            _ => (None, None),
        };
        let spot = match (known_bool(&spec["spot"]), known_bool(&spec["preemptible"])) {
            (Some(true), _) => Some(fact(true, "spot = true")),
            (_, Some(true)) => Some(fact(true, "preemptible = true")),
            (Some(false), Some(false)) => Some(fact(false, "neither spot nor preemptible is set")),
            _ => None,
        };
        let tpu = match &spec["tpu"] {
            Value::Null => Some(fact(
                None,
                machine.map_or_else(
                    || "no tpu".to_string(),
                    |mt| format!("machine_type = {mt:?} and no tpu"),
                ),
            )),
            t if t.is_object() => match (machine, known_str(&t["topology"])) {
                (Some(mt), Some(topology)) => Some(fact(
                    gcp::catalog::tpu(mt).map(|info| Slice {
                        kind: info.accelerator_label.to_string(),
                        topology: topology.to_string(),
                        chips: i64::from(info.chips_per_vm),
                    }),
                    format!("machine_type = {mt:?}, tpu.topology = {topology:?}"),
                )),
                _ => None,
            },
            _ => None,
        };
        Self {
            address: address.to_string(),
            kind: PoolKind::GkeNodePool,
            gpus,
            gpu_types,
            spot,
            tpu,
        }
    }

    /// As `aws::eks_node_group::placement` reads an `eks_node_group` spec.
    fn eks(address: &str, spec: &Value) -> Self {
        let types: Option<Vec<String>> = match &spec["instance_types"] {
            Value::Null => Some(vec!["m5.large".to_string()]),
            Value::Array(items) => items
                .iter()
                .map(|t| known_str(t).map(str::to_string))
                .collect(),
            _ => None,
        };
        let (gpus, gpu_types) = match types {
            None => (None, None),
            Some(types) => {
                let setting = format!("instance_types = {}", json!(types));
                let parsed: Vec<aws::catalog::InstanceType> = types
                    .iter()
                    .filter_map(|t| aws::catalog::instance_type(t).ok())
                    .collect();
                let all_nvidia = !parsed.is_empty()
                    && parsed
                        .iter()
                        .all(|t| t.accel == aws::catalog::Accel::Nvidia);
                let per_node = parsed
                    .iter()
                    .map(|t| i64::from(t.accelerators))
                    .min()
                    .filter(|_| all_nvidia)
                    .unwrap_or(0);
                let offered = if per_node > 0 { types } else { Vec::new() };
                (Some(fact(per_node, &setting)), Some(fact(offered, setting)))
            }
        };
        let spot = match &spec["capacity_type"] {
            Value::Null => Some(fact(false, "capacity_type = \"ON_DEMAND\"")),
            c => known_str(c).map(|c| fact(c == "SPOT", format!("capacity_type = {c:?}"))),
        };
        Self {
            address: address.to_string(),
            kind: PoolKind::EksNodeGroup,
            gpus,
            gpu_types,
            spot,
            tpu: Some(fact(None, "an EKS node group")),
        }
    }
}

/// The `placement` output a pool of the same stack will report, computed from its spec
/// by the pool kind's own function, so plan and apply read the same value; `None` for
/// a peer that is not a pool, or whose spec does not decode yet (an unknown number).
pub fn pool_placement(peer: &Peer) -> Option<Value> {
    match peer.kind.as_str() {
        "gke_node_pool" => serde_json::from_value(peer.spec.clone())
            .ok()
            .map(|spec| gcp::node_pool::placement(&spec)),
        "eks_node_group" => serde_json::from_value(peer.spec.clone())
            .ok()
            .map(|spec| aws::eks_node_group::placement(&spec)),
        _ => None,
    }
}

/// The cluster a workload runs on, as far as known offline: its flavor, and the
/// cluster of the same stack it was read from (`None` when the reference is known).
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterSide {
    pub flavor: Flavor,
    pub address: Option<String>,
}

impl ClusterSide {
    /// The flavor of `cluster`, else of the one `gke_cluster` or `eks_cluster` among
    /// `peers` (the cluster of the same stack, whose `kubernetes` output it is);
    /// `None` when it cannot be told offline.
    pub fn of(cluster: &Value, peers: &[Peer]) -> Option<Self> {
        if !is_unknown(cluster) || known_str(&cluster["flavor"]).is_some() {
            return Some(Self {
                flavor: flavor(cluster),
                address: None,
            });
        }
        let mut clusters = peers.iter().filter_map(|p| match p.kind.as_str() {
            "gke_cluster" => Some((
                Flavor::Gke {
                    autopilot: p.spec["mode"] == "autopilot",
                },
                &p.address,
            )),
            "eks_cluster" => Some((Flavor::Eks, &p.address)),
            _ => None,
        });
        let (flavor, address) = clusters.next()?;
        // Two clusters referenced: which one `cluster` names is not known offline.
        if clusters.next().is_some() {
            return None;
        }
        Some(Self {
            flavor,
            address: Some(address.clone()),
        })
    }

    fn name(&self) -> String {
        self.address
            .clone()
            .unwrap_or_else(|| "the cluster".to_string())
    }
}

/// A TPU slice as far as a workload's spec knows it offline.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AskedTpu {
    pub kind: Option<String>,
    pub topology: Option<String>,
    pub chips: Option<i64>,
}

/// What a workload asks of its nodes, as far as known offline (`None`: not known
/// until apply, or not given).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Asked {
    pub spot: Option<bool>,
    pub gpus: Option<i64>,
    pub gpu_type: Option<String>,
    /// Whether `gpu_type` is given at all (known or not).
    pub gpu_type_given: bool,
    pub tpu: Option<AskedTpu>,
    /// Whether `node_pool` is given at all (known or not).
    pub node_pool_given: bool,
}

impl Asked {
    /// Reads `spot`, `gpus`, `gpu_type`, `tpu` and `node_pool` from a workload's spec
    /// (defaults filled, unknowns marked).
    pub fn of(spec: &Value) -> Self {
        Self {
            spot: known_bool(&spec["spot"]),
            gpus: match &spec["gpus"] {
                Value::Null => Some(0),
                n => n.as_i64(),
            },
            gpu_type: known_str(&spec["gpu_type"]).map(str::to_string),
            gpu_type_given: !spec["gpu_type"].is_null(),
            tpu: match &spec["tpu"] {
                Value::Null => None,
                t => Some(AskedTpu {
                    kind: known_str(&t["type"]).map(str::to_string),
                    topology: known_str(&t["topology"]).map(str::to_string),
                    chips: t["chips"].as_i64(),
                }),
            },
            node_pool_given: !spec["node_pool"].is_null(),
        }
    }
}

impl Intent {
    /// The intent of a workload's spec once `spot`, `gpus`, `gpu_type` and `tpu` are
    /// known, placed on `node_pool` (a pool's `placement` output); `None` before.
    pub fn known(spec: &Value, node_pool: Option<Value>) -> Option<Self> {
        let tpu = match &spec["tpu"] {
            Value::Null => None,
            t if is_unknown(t) => return None,
            t => Some(serde_json::from_value(t.clone()).ok()?),
        };
        Some(Self {
            spot: known_bool(&spec["spot"])?,
            gpus: match &spec["gpus"] {
                Value::Null => 0,
                n => n.as_i64()?,
            },
            gpu_type: match &spec["gpu_type"] {
                Value::Null => None,
                t => Some(known_str(t)?.to_string()),
            },
            tpu,
            node_pool,
        })
    }
}

/// On an EKS node group, `gpu_type` (an instance type, selected by the
/// `node.kubernetes.io/instance-type` label) must be one the group launches, or the
/// pod waits forever. The group's `placement` output names only its first instance
/// type, so only its spec can tell.
pub fn instance_type_refusal(asked: &Asked, pool: &PoolPeer) -> Option<Refusal> {
    let wanted = asked.gpu_type.as_deref()?;
    let offered = pool.gpu_types.as_ref()?;
    let refused = pool.kind == PoolKind::EksNodeGroup
        && looks_like_instance_type(wanted)
        && !offered.value.is_empty()
        && !offered.value.iter().any(|t| t == wanted);
    refused.then(|| {
        Refusal::at(
            "gpu_type",
            format!(
                "asks for instance type {wanted}, but {} launches only {} ({}); set gpu_type to one of them, or leave it out",
                pool.address,
                offered.value.join(", "),
                offered.setting
            ),
        )
    })
}

/// What makes a workload unplaceable on the cluster and node pool of the same stack,
/// named by their addresses and settings: pods that could never be scheduled. Checks
/// on a value not known offline wait for apply. At most one refusal per field.
pub fn peer_refusals(
    asked: &Asked,
    cluster: Option<&ClusterSide>,
    pool: Option<&PoolPeer>,
) -> Vec<Refusal> {
    let mut out = Vec::new();
    let mut pool = pool;
    if let Some(c) = cluster {
        cluster_refusals(asked, c, &mut out);
        if let Some(p) = pool {
            let cloud_clash = match (c.flavor, p.kind) {
                (Flavor::Eks, PoolKind::GkeNodePool) => Some(format!(
                    "{} is a GKE node pool, but {} is an EKS cluster: use an eks_node_group's placement (\"${{eks_node_group.NAME.placement}}\")",
                    p.address,
                    c.name()
                )),
                (Flavor::Gke { .. }, PoolKind::EksNodeGroup) => Some(format!(
                    "{} is an EKS node group, but {} is a GKE cluster: use a gke_node_pool's placement (\"${{gke_node_pool.NAME.placement}}\")",
                    p.address,
                    c.name()
                )),
                _ => None,
            };
            if let Some(message) = cloud_clash {
                out.push(Refusal::at("node_pool", message));
                // The pool's nodes are not this cluster's: nothing else to compare.
                pool = None;
            }
        }
    }
    if let Some(p) = pool {
        pool_refusals(asked, p, &mut out);
    }
    let mut seen = std::collections::BTreeSet::new();
    out.retain(|r| seen.insert(r.field.clone()));
    out
}

fn cluster_refusals(asked: &Asked, c: &ClusterSide, out: &mut Vec<Refusal>) {
    let name = c.name();
    match c.flavor {
        Flavor::Eks => {
            if asked.tpu.is_some() {
                out.push(Refusal::at(
                    "tpu",
                    format!("asks for a TPU slice, but {name} is an EKS cluster; TPUs run on GKE only: remove tpu, or run the job on a GKE cluster"),
                ));
            }
            if let Some(t) = asked
                .gpu_type
                .as_deref()
                .filter(|t| !looks_like_instance_type(t))
            {
                out.push(Refusal::at(
                    "gpu_type",
                    format!("{t:?} is not an EC2 instance type, but {name} is an EKS cluster, where gpu_type names the GPU instance type (e.g. \"g5.xlarge\")"),
                ));
            }
        }
        Flavor::Gke { autopilot: true }
            if asked.gpus.is_some_and(|n| n > 0)
                && !asked.gpu_type_given
                && !asked.node_pool_given =>
        {
            out.push(Refusal::at(
                "gpu_type",
                format!("{name} is a GKE Autopilot cluster, where GPUs need gpu_type, the accelerator to provision (e.g. \"nvidia-tesla-t4\" or \"nvidia-l4\")"),
            ));
        }
        _ => {}
    }
}

fn pool_refusals(asked: &Asked, p: &PoolPeer, out: &mut Vec<Refusal>) {
    let a = &p.address;
    if let (Some(n), Some(have)) = (asked.gpus.filter(|n| *n > 0), &p.gpus) {
        let asks = count_of(n, "GPU");
        if have.value == 0 {
            out.push(Refusal::at(
                "gpus",
                format!("asks for {asks} per pod, but {a} nodes have none ({}); set gpus = 0, or give {a} GPUs", have.setting),
            ));
        } else if n > have.value {
            out.push(Refusal::at(
                "gpus",
                format!(
                    "asks for {asks} per pod, but {a} nodes have {} ({}); set gpus = {} or fewer, or give {a} more GPUs per node",
                    have.value, have.setting, have.value
                ),
            ));
        }
    }
    match p.kind {
        PoolKind::GkeNodePool => {
            if let (Some(wanted), Some(offered)) = (&asked.gpu_type, &p.gpu_types) {
                if let Some(theirs) = offered.value.first().filter(|t| *t != wanted) {
                    out.push(Refusal::at(
                        "gpu_type",
                        format!("asks for {wanted}, but {a} nodes have {theirs} ({}); set gpu_type = {theirs:?}, or leave it out to take the pool's", offered.setting),
                    ));
                }
            }
        }
        PoolKind::EksNodeGroup => out.extend(instance_type_refusal(asked, p)),
    }
    // The reverse, spot = false on a spot pool, is no contradiction: spot = false asks
    // for nothing (placement adds no selector), so the pods run on the pool's nodes.
    if let (Some(true), Some(have)) = (asked.spot, &p.spot) {
        if !have.value {
            let remedy = match p.kind {
                PoolKind::GkeNodePool => format!("set spot = true on {a}"),
                PoolKind::EksNodeGroup => format!("set capacity_type = \"SPOT\" on {a}"),
            };
            out.push(Refusal::at(
                "spot",
                format!("asks for spot capacity, but {a} nodes are on-demand ({}); set spot = false, or {remedy}", have.setting),
            ));
        }
    }
    let Some(want) = &asked.tpu else {
        return;
    };
    match (p.kind, &p.tpu) {
        (PoolKind::EksNodeGroup, _) => out.push(Refusal::at(
            "tpu",
            format!("asks for a TPU slice, but {a} is an EKS node group; TPUs run on GKE only: remove tpu, or use a gke_node_pool of a TPU machine type"),
        )),
        (_, Some(Fact { value: None, setting })) => out.push(Refusal::at(
            "tpu",
            format!("asks for a TPU slice, but {a} nodes have no TPUs ({setting}); remove tpu, or give {a} a TPU machine type and tpu.topology"),
        )),
        (_, Some(Fact { value: Some(slice), setting })) => {
            if let Some(kind) = want.kind.as_ref().filter(|k| **k != slice.kind) {
                out.push(Refusal::at(
                    "tpu.type",
                    format!("asks for {kind}, but {a} nodes are {} ({setting}); set tpu.type = {:?}", slice.kind, slice.kind),
                ));
            }
            if let Some(topology) = want.topology.as_ref().filter(|t| **t != slice.topology) {
                out.push(Refusal::at(
                    "tpu.topology",
                    format!("asks for a {topology} slice, but {a} is a {} slice ({setting}); set tpu.topology = {:?}, or change {a}", slice.topology, slice.topology),
                ));
            }
            if let Some(chips) = want.chips.filter(|c| *c > slice.chips) {
                out.push(Refusal::at(
                    "tpu.chips",
                    format!(
                        "asks for {} per pod, but {a} nodes have {} ({setting}); set tpu.chips = {} or fewer",
                        count_of(chips, "TPU chip"),
                        slice.chips,
                        slice.chips
                    ),
                ));
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::UNKNOWN;

    const STANDARD: Flavor = Flavor::Gke { autopilot: false };
    const AUTOPILOT: Flavor = Flavor::Gke { autopilot: true };

    fn tpu() -> Tpu {
        Tpu {
            kind: "tpu-v5-lite-podslice".into(),
            topology: "2x4".into(),
            chips: 4,
        }
    }

    fn gpu_pool(spot: bool) -> Value {
        json!({
            "pool": "gpu",
            "node_selector": {"cloud.google.com/gke-nodepool": "gpu", "cloud.google.com/gke-accelerator": "nvidia-tesla-t4"},
            "taints": [{"key": "dedicated", "value": "ml", "effect": "NO_SCHEDULE"}, {"key": "batch", "value": "", "effect": "PREFER_NO_SCHEDULE"}],
            "accelerator": {"type": "nvidia-tesla-t4", "count": 2},
            "tpu": null,
            "spot": spot,
        })
    }

    fn selector(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn intent(spot: bool, gpus: i64, gpu_type: Option<&str>) -> Intent {
        Intent {
            spot,
            gpus,
            gpu_type: gpu_type.map(str::to_string),
            ..Intent::default()
        }
    }

    /// (what, flavor, intent, expected node selector, expected limits, expected tolerations)
    type Case = (
        &'static str,
        Flavor,
        Intent,
        BTreeMap<String, String>,
        BTreeMap<String, String>,
        Vec<Value>,
    );

    #[test]
    fn placements() {
        let spot_toleration = json!({"key": "cloud.google.com/gke-spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"});
        let gpu_toleration =
            json!({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"});
        let tpu_toleration =
            json!({"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"});
        let pool_tolerations = vec![
            json!({"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}),
            json!({"key": "batch", "operator": "Exists", "effect": "PreferNoSchedule"}),
        ];
        let gpu_limit = |n: &str| selector(&[("nvidia.com/gpu", n)]);
        let cases: Vec<Case> = vec![
            (
                "nothing asked",
                STANDARD,
                Intent::default(),
                selector(&[]),
                selector(&[]),
                vec![],
            ),
            (
                "nothing asked, generic",
                Flavor::Generic,
                Intent::default(),
                selector(&[]),
                selector(&[]),
                vec![],
            ),
            (
                "gke standard spot",
                STANDARD,
                intent(true, 0, None),
                selector(&[(GKE_SPOT, "true")]),
                selector(&[]),
                vec![spot_toleration.clone()],
            ),
            (
                "gke autopilot spot",
                AUTOPILOT,
                intent(true, 0, None),
                selector(&[(GKE_SPOT, "true")]),
                selector(&[]),
                vec![spot_toleration.clone()],
            ),
            (
                "eks spot",
                Flavor::Eks,
                intent(true, 0, None),
                selector(&[(EKS_CAPACITY_TYPE, "SPOT")]),
                selector(&[]),
                vec![],
            ),
            (
                "gke standard gpu with type",
                STANDARD,
                intent(false, 1, Some("nvidia-tesla-t4")),
                selector(&[(GKE_ACCELERATOR, "nvidia-tesla-t4")]),
                gpu_limit("1"),
                vec![gpu_toleration.clone()],
            ),
            (
                "gke standard gpu without type",
                STANDARD,
                intent(false, 2, None),
                selector(&[]),
                gpu_limit("2"),
                vec![gpu_toleration.clone()],
            ),
            (
                "gke autopilot spot gpu",
                AUTOPILOT,
                intent(true, 1, Some("nvidia-l4")),
                selector(&[(GKE_SPOT, "true"), (GKE_ACCELERATOR, "nvidia-l4")]),
                gpu_limit("1"),
                vec![spot_toleration.clone(), gpu_toleration.clone()],
            ),
            (
                "eks gpu instance type",
                Flavor::Eks,
                intent(true, 1, Some("g5.xlarge")),
                selector(&[(EKS_CAPACITY_TYPE, "SPOT"), (INSTANCE_TYPE, "g5.xlarge")]),
                gpu_limit("1"),
                vec![gpu_toleration.clone()],
            ),
            (
                "generic gpu without type",
                Flavor::Generic,
                intent(false, 1, None),
                selector(&[]),
                gpu_limit("1"),
                vec![gpu_toleration.clone()],
            ),
            (
                "gke standard tpu",
                STANDARD,
                Intent {
                    tpu: Some(tpu()),
                    ..Intent::default()
                },
                selector(&[
                    (GKE_TPU_ACCELERATOR, "tpu-v5-lite-podslice"),
                    (GKE_TPU_TOPOLOGY, "2x4"),
                ]),
                selector(&[("google.com/tpu", "4")]),
                vec![tpu_toleration.clone()],
            ),
            (
                "gke autopilot spot tpu",
                AUTOPILOT,
                Intent {
                    spot: true,
                    tpu: Some(tpu()),
                    ..Intent::default()
                },
                selector(&[
                    (GKE_SPOT, "true"),
                    (GKE_TPU_ACCELERATOR, "tpu-v5-lite-podslice"),
                    (GKE_TPU_TOPOLOGY, "2x4"),
                ]),
                selector(&[("google.com/tpu", "4")]),
                vec![spot_toleration.clone(), tpu_toleration.clone()],
            ),
            (
                "gpu pool with taints, gpus requested",
                STANDARD,
                Intent {
                    gpus: 2,
                    node_pool: Some(gpu_pool(false)),
                    ..Intent::default()
                },
                selector(&[
                    ("cloud.google.com/gke-nodepool", "gpu"),
                    (GKE_ACCELERATOR, "nvidia-tesla-t4"),
                ]),
                gpu_limit("2"),
                [vec![gpu_toleration.clone()], pool_tolerations.clone()].concat(),
            ),
            (
                "gpu pool, no gpus requested: runs there without limits",
                STANDARD,
                Intent {
                    node_pool: Some(gpu_pool(false)),
                    ..Intent::default()
                },
                selector(&[
                    ("cloud.google.com/gke-nodepool", "gpu"),
                    (GKE_ACCELERATOR, "nvidia-tesla-t4"),
                ]),
                selector(&[]),
                pool_tolerations.clone(),
            ),
            (
                "spot pool: the pool's selector picks its nodes",
                STANDARD,
                Intent {
                    spot: true,
                    gpus: 1,
                    gpu_type: Some("nvidia-tesla-t4".into()),
                    tpu: None,
                    node_pool: Some(gpu_pool(true)),
                },
                selector(&[
                    ("cloud.google.com/gke-nodepool", "gpu"),
                    (GKE_ACCELERATOR, "nvidia-tesla-t4"),
                ]),
                gpu_limit("1"),
                [vec![gpu_toleration.clone()], pool_tolerations.clone()].concat(),
            ),
        ];
        for (what, flavor, intent, node_selector, limits, tolerations) in cases {
            let got = placement(&flavor, &intent).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(
                got,
                Placement {
                    node_selector,
                    tolerations,
                    limits
                },
                "{what}"
            );
        }
    }

    #[test]
    fn impossible_placements_say_what_to_change() {
        let cases: Vec<(&str, Flavor, Intent, &str)> = vec![
            ("generic spot", Flavor::Generic, intent(true, 0, None), "set flavor = \"gke\" or \"eks\""),
            ("autopilot gpu without type", AUTOPILOT, intent(false, 1, None), "GPUs on GKE Autopilot need gpu_type"),
            ("eks accelerator name", Flavor::Eks, intent(false, 1, Some("nvidia-tesla-t4")), "names the GPU instance type"),
            ("generic gpu type", Flavor::Generic, intent(false, 1, Some("nvidia-tesla-t4")), "gpu_type needs to know"),
            ("type without gpus", STANDARD, intent(false, 0, Some("nvidia-tesla-t4")), "gpus is 0"),
            ("negative gpus", STANDARD, intent(false, -1, None), "gpus: must be 0 or more"),
            ("tpu on eks", Flavor::Eks, Intent { tpu: Some(tpu()), ..Intent::default() }, "TPUs run on GKE only; this cluster's flavor is eks"),
            ("tpu on generic", Flavor::Generic, Intent { tpu: Some(tpu()), ..Intent::default() }, "flavor is generic"),
            ("tpu and gpus", STANDARD, Intent { gpus: 1, tpu: Some(tpu()), ..Intent::default() }, "GPUs or a TPU, not both"),
            ("zero chips", STANDARD, Intent { tpu: Some(Tpu { chips: 0, ..tpu() }), ..Intent::default() }, "tpu.chips: must be 1 or more"),
            (
                "more gpus than the pool has",
                STANDARD,
                Intent { gpus: 4, node_pool: Some(gpu_pool(false)), ..Intent::default() },
                "gpus: asks for 4 GPUs per pod, but node pool gpu has 2 GPU(s) per node",
            ),
            (
                "spot on a non-spot pool",
                STANDARD,
                Intent { spot: true, node_pool: Some(gpu_pool(false)), ..Intent::default() },
                "spot: asks for spot capacity, but node pool gpu is not a spot pool",
            ),
            (
                "gpu type clashing with the pool",
                STANDARD,
                Intent { gpus: 1, gpu_type: Some("nvidia-l4".into()), node_pool: Some(gpu_pool(false)), ..Intent::default() },
                "gpu_type selects cloud.google.com/gke-accelerator=nvidia-l4 but node pool gpu selects cloud.google.com/gke-accelerator=nvidia-tesla-t4",
            ),
            (
                "gpus on a pool without gpus",
                STANDARD,
                Intent { gpus: 1, node_pool: Some(json!({"pool": "cpu", "node_selector": {}, "taints": [], "accelerator": null, "tpu": null, "spot": false})), ..Intent::default() },
                "node pool cpu has no GPUs",
            ),
            (
                "unknown taint effect",
                STANDARD,
                Intent { node_pool: Some(json!({"taints": [{"key": "k", "value": "v", "effect": "SOMETIMES"}]})), ..Intent::default() },
                "unknown effect \"SOMETIMES\"",
            ),
            ("pool not an object", STANDARD, Intent { node_pool: Some(json!("gpu")), ..Intent::default() }, "placement` output"),
            (
                "tpu chips beyond the pool",
                STANDARD,
                Intent { tpu: Some(Tpu { chips: 8, ..tpu() }), node_pool: Some(json!({"pool": "tpu", "node_selector": {}, "tpu": {"type": "tpu-v5-lite-podslice", "topology": "2x4", "chips": 4}})), ..Intent::default() },
                "tpu.chips: asks for 8 TPU chips per pod, but node pool tpu has 4 TPU chip(s) per node",
            ),
        ];
        for (what, flavor, intent, want) in cases {
            let e = placement(&flavor, &intent).expect_err(what);
            assert!(e.contains(want), "{what}: {e}");
        }
    }

    #[test]
    fn instance_types_are_told_from_accelerators() {
        for (text, want) in [
            ("g5.xlarge", true),
            ("p4d.24xlarge", true),
            ("nvidia-tesla-t4", false),
            (".x", false),
            ("g5.", false),
        ] {
            assert_eq!(looks_like_instance_type(text), want, "{text}");
        }
    }

    #[test]
    fn refusals_name_the_setting_to_change() {
        let cases: Vec<(Flavor, Intent, &str)> = vec![
            (STANDARD, intent(false, -1, None), "gpus"),
            (Flavor::Generic, intent(true, 0, None), "spot"),
            (AUTOPILOT, intent(false, 1, None), "gpu_type"),
            (
                Flavor::Eks,
                Intent {
                    tpu: Some(tpu()),
                    ..Intent::default()
                },
                "tpu",
            ),
            (
                STANDARD,
                Intent {
                    gpus: 4,
                    node_pool: Some(gpu_pool(false)),
                    ..Intent::default()
                },
                "gpus",
            ),
            (
                STANDARD,
                Intent {
                    spot: true,
                    node_pool: Some(gpu_pool(false)),
                    ..Intent::default()
                },
                "spot",
            ),
            // A clash with the pool is reported at the workload's own setting.
            (
                STANDARD,
                Intent {
                    gpus: 1,
                    gpu_type: Some("nvidia-l4".into()),
                    node_pool: Some(gpu_pool(false)),
                    ..Intent::default()
                },
                "gpu_type",
            ),
            (
                STANDARD,
                Intent {
                    tpu: Some(tpu()),
                    node_pool: Some(gpu_pool(false)),
                    ..Intent::default()
                },
                "tpu",
            ),
            (
                STANDARD,
                Intent {
                    node_pool: Some(json!("gpu")),
                    ..Intent::default()
                },
                "node_pool",
            ),
        ];
        for (flavor, intent, field) in cases {
            let r = place(&flavor, &intent).expect_err(field);
            assert_eq!(r.field, field, "{r}");
            assert_eq!(placement(&flavor, &intent), Err(r.to_string()));
        }
    }

    #[test]
    fn a_tpu_on_a_pool_without_tpus_is_refused() {
        let e = placement(
            &STANDARD,
            &Intent {
                tpu: Some(tpu()),
                node_pool: Some(gpu_pool(false)),
                ..Intent::default()
            },
        )
        .expect_err("no TPUs there");
        assert_eq!(
            e,
            "tpu: asks for a TPU slice, but node pool gpu has no TPUs: remove tpu, or use a TPU node pool"
        );
    }

    fn gke_pool(with: Value) -> Peer {
        let mut spec = json!({
            "name": "gpu", "cluster": UNKNOWN, "machine_type": "n1-standard-8",
            "node_count": null, "autoscaling": null,
            "gpu": {"type": "nvidia-tesla-t4", "count": 2, "driver": "default"},
            "tpu": null, "spot": false, "preemptible": false, "taints": [], "labels": {},
            "scopes": ["gke-default"], "disk_size_gb": null, "disk_type": null,
        });
        if let (Some(m), Value::Object(w)) = (spec.as_object_mut(), with) {
            m.extend(w);
        }
        Peer {
            kind: "gke_node_pool".into(),
            address: "gke_node_pool.gpu".into(),
            spec,
        }
    }

    fn eks_group(with: Value) -> Peer {
        let mut spec = json!({
            "cluster_name": "ml", "name": "gpu", "node_role_arn": "arn:aws:iam::123456789012:role/n",
            "subnet_ids": ["subnet-1"], "instance_types": ["g5.xlarge"], "ami_type": null,
            "capacity_type": "ON_DEMAND", "scaling": {"min": 0, "max": 1, "desired": null},
            "disk_size": 20, "labels": {}, "taints": [], "tags": {},
        });
        if let (Some(m), Value::Object(w)) = (spec.as_object_mut(), with) {
            m.extend(w);
        }
        Peer {
            kind: "eks_node_group".into(),
            address: "eks_node_group.gpu".into(),
            spec,
        }
    }

    /// The facts read from a pool's spec say what its `placement` output will say.
    #[test]
    fn pool_facts_agree_with_the_pools_placement_output() {
        let pools = [
            gke_pool(json!({})),
            gke_pool(json!({"gpu": null, "machine_type": "g2-standard-24"})),
            gke_pool(json!({"gpu": null, "machine_type": "e2-medium", "spot": true})),
            gke_pool(json!({"preemptible": true})),
            gke_pool(
                json!({"gpu": null, "machine_type": "ct5lp-hightpu-4t", "tpu": {"topology": "2x2"}}),
            ),
            eks_group(json!({})),
            eks_group(
                json!({"instance_types": ["g5.12xlarge", "g5.xlarge"], "capacity_type": "SPOT"}),
            ),
            eks_group(json!({"instance_types": ["m5.large"]})),
            eks_group(json!({"instance_types": ["inf2.xlarge"]})),
        ];
        for peer in pools {
            let facts = PoolPeer::of(&peer).expect("a pool");
            let output = pool_placement(&peer).expect("decodes");
            let what = &peer.spec;
            assert_eq!(
                facts.gpus.as_ref().map(|f| f.value),
                Some(output["accelerator"]["count"].as_i64().unwrap_or(0)),
                "{what}"
            );
            assert_eq!(
                facts.spot.as_ref().map(|f| f.value),
                output["spot"].as_bool(),
                "{what}"
            );
            let slice = facts.tpu.as_ref().map(|f| {
                f.value
                    .as_ref()
                    .map(|s| json!({"type": s.kind, "topology": s.topology, "chips": s.chips}))
                    .unwrap_or(Value::Null)
            });
            assert_eq!(slice, Some(output["tpu"].clone()), "{what}");
            if let Some(first) = facts.gpu_types.as_ref().and_then(|f| f.value.first()) {
                assert_eq!(
                    output["accelerator"]["type"].as_str(),
                    Some(first.as_str()),
                    "{what}"
                );
            }
        }
    }

    #[test]
    fn pool_facts_not_known_offline_are_none() {
        let vague = PoolPeer::of(&gke_pool(json!({
            "machine_type": UNKNOWN,
            "gpu": null,
            "spot": UNKNOWN,
            "preemptible": false,
        })))
        .expect("a pool");
        assert_eq!(
            (vague.gpus, vague.gpu_types, vague.spot),
            (None, None, None)
        );
        // Preemptible is spot enough, whatever `spot` turns out to be.
        let preemptible =
            PoolPeer::of(&gke_pool(json!({"spot": UNKNOWN, "preemptible": true}))).expect("a pool");
        assert_eq!(preemptible.spot.map(|f| f.value), Some(true));
        let group = PoolPeer::of(&eks_group(
            json!({"instance_types": ["g5.xlarge", UNKNOWN], "capacity_type": UNKNOWN}),
        ))
        .expect("a group");
        assert_eq!((group.gpus, group.spot), (None, None));
        assert!(PoolPeer::of(&Peer {
            kind: "gke_cluster".into(),
            address: "gke_cluster.batch".into(),
            spec: json!({}),
        })
        .is_none());
    }

    #[test]
    fn the_cluster_side_comes_from_the_reference_else_the_one_cluster_peer() {
        let gke = |mode: &str| Peer {
            kind: "gke_cluster".into(),
            address: "gke_cluster.batch".into(),
            spec: json!({"mode": mode}),
        };
        let eks = Peer {
            kind: "eks_cluster".into(),
            address: "eks_cluster.ml".into(),
            spec: json!({}),
        };
        let unknown = json!(UNKNOWN);
        assert_eq!(
            ClusterSide::of(&unknown, &[gke("autopilot")]),
            Some(ClusterSide {
                flavor: AUTOPILOT,
                address: Some("gke_cluster.batch".into())
            })
        );
        assert_eq!(
            ClusterSide::of(&unknown, std::slice::from_ref(&eks)).map(|c| c.flavor),
            Some(Flavor::Eks)
        );
        assert_eq!(
            ClusterSide::of(&unknown, &[gke("standard"), eks.clone()]),
            None
        );
        assert_eq!(ClusterSide::of(&unknown, &[]), None);
        // A known reference wins over the peers.
        assert_eq!(
            ClusterSide::of(
                &json!({"kubeconfig": "k", "flavor": "eks"}),
                &[gke("standard")]
            ),
            Some(ClusterSide {
                flavor: Flavor::Eks,
                address: None
            })
        );
        assert_eq!(
            ClusterSide::of(&json!({"kubeconfig": UNKNOWN, "flavor": "gke"}), &[eks])
                .map(|c| c.flavor),
            Some(STANDARD)
        );
    }

    #[test]
    fn peer_refusal_table() {
        let on = |spec: Value| Asked::of(&spec);
        let eks_side = ClusterSide {
            flavor: Flavor::Eks,
            address: Some("eks_cluster.ml".into()),
        };
        let gke_pool_facts = PoolPeer::of(&gke_pool(json!({}))).expect("a pool");
        let tpu_facts = PoolPeer::of(&gke_pool(
            json!({"gpu": null, "machine_type": "ct5lp-hightpu-4t", "tpu": {"topology": "2x2"}}),
        ))
        .expect("a pool");
        let group = PoolPeer::of(&eks_group(json!({}))).expect("a group");
        let tpu = |t: &str, topo: &str, chips: i64| json!({"tpu": {"type": t, "topology": topo, "chips": chips}});
        /// (what, asked, cluster, pool, refusals wanted: `field: message` starts)
        type Case<'a> = (
            &'a str,
            Asked,
            Option<&'a ClusterSide>,
            Option<&'a PoolPeer>,
            Vec<&'a str>,
        );
        let cases: Vec<Case> = vec![
            ("fits", on(json!({"gpus": 2, "gpu_type": "nvidia-tesla-t4"})), None, Some(&gke_pool_facts), vec![]),
            ("too many gpus", on(json!({"gpus": 3})), None, Some(&gke_pool_facts), vec!["gpus: asks for 3 GPUs per pod, but gke_node_pool.gpu nodes have 2 (gpu.count = 2)"]),
            ("other accelerator", on(json!({"gpus": 1, "gpu_type": "nvidia-l4"})), None, Some(&gke_pool_facts), vec!["gpu_type: asks for nvidia-l4, but gke_node_pool.gpu nodes have nvidia-tesla-t4"]),
            ("spot on on-demand", on(json!({"spot": true})), None, Some(&gke_pool_facts), vec!["spot: asks for spot capacity, but gke_node_pool.gpu nodes are on-demand"]),
            ("no spot on on-demand", on(json!({"spot": false})), None, Some(&gke_pool_facts), vec![]),
            ("tpu on a gpu pool", on(tpu("tpu-v5-lite-podslice", "2x2", 4)), None, Some(&gke_pool_facts), vec!["tpu: asks for a TPU slice, but gke_node_pool.gpu nodes have no TPUs"]),
            ("gpus on a tpu pool", on(json!({"gpus": 1})), None, Some(&tpu_facts), vec!["gpus: asks for 1 GPU per pod, but gke_node_pool.gpu nodes have none (machine_type = \"ct5lp-hightpu-4t\" and no gpu)"]),
            ("tpu fits", on(tpu("tpu-v5-lite-podslice", "2x2", 4)), None, Some(&tpu_facts), vec![]),
            (
                "every tpu setting off",
                on(tpu("tpu-v6e-slice", "4x4", 8)),
                None,
                Some(&tpu_facts),
                vec!["tpu.type: asks for tpu-v6e-slice", "tpu.topology: asks for a 4x4 slice", "tpu.chips: asks for 8 TPU chips per pod"],
            ),
            ("tpu on eks, once", on(tpu("tpu-v5-lite-podslice", "2x2", 4)), Some(&eks_side), Some(&group), vec!["tpu: asks for a TPU slice, but eks_cluster.ml is an EKS cluster"]),
            ("gke pool on eks", on(json!({"gpus": 9})), Some(&eks_side), Some(&gke_pool_facts), vec!["node_pool: gke_node_pool.gpu is a GKE node pool, but eks_cluster.ml is an EKS cluster"]),
            ("eks instance type", on(json!({"gpus": 1, "gpu_type": "g5.2xlarge"})), Some(&eks_side), Some(&group), vec!["gpu_type: asks for instance type g5.2xlarge, but eks_node_group.gpu launches only g5.xlarge"]),
            ("eks accelerator name", on(json!({"gpus": 1, "gpu_type": "nvidia-a10g"})), Some(&eks_side), Some(&group), vec!["gpu_type: \"nvidia-a10g\" is not an EC2 instance type"]),
            ("unknown gpus", on(json!({"gpus": UNKNOWN})), None, Some(&gke_pool_facts), vec![]),
            ("unknown tpu type", on(tpu(UNKNOWN, "2x2", 4)), None, Some(&tpu_facts), vec![]),
        ];
        for (what, asked, cluster, pool, want) in cases {
            let got: Vec<String> = peer_refusals(&asked, cluster, pool)
                .iter()
                .map(ToString::to_string)
                .collect();
            assert_eq!(got.len(), want.len(), "{what}: {got:?}");
            for (g, w) in got.iter().zip(&want) {
                assert!(g.starts_with(w), "{what}: want {w}…, got {g}");
            }
        }
    }

    #[test]
    fn intents_wait_for_unknown_asks() {
        let spec = json!({"spot": true, "gpus": 2, "gpu_type": "nvidia-l4", "tpu": null});
        assert_eq!(
            Intent::known(&spec, None),
            Some(Intent {
                spot: true,
                gpus: 2,
                gpu_type: Some("nvidia-l4".into()),
                tpu: None,
                node_pool: None
            })
        );
        for (field, unknown) in [
            ("spot", json!(UNKNOWN)),
            ("gpus", json!(UNKNOWN)),
            ("gpu_type", json!(UNKNOWN)),
            (
                "tpu",
                json!({"type": UNKNOWN, "topology": "2x2", "chips": 4}),
            ),
        ] {
            let mut s = spec.clone();
            s[field] = unknown;
            assert_eq!(Intent::known(&s, None), None, "{field}");
        }
    }
}
