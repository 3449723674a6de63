//! Where a workload runs: spot capacity, GPUs, TPUs and node pools mapped to the node
//! selector, tolerations and resource limits each cluster flavor understands. Pure and
//! offline, so the same answer serves `validate`, `render` and apply.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::connect::Flavor;

/// A TPU slice a workload asks for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tpu {
    /// The accelerator label value (`tpu-v5-lite-podslice`).
    #[serde(rename = "type")]
    pub kind: String,
    /// The slice's topology (`2x4`).
    pub topology: String,
    /// TPU chips per node (`google.com/tpu`).
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

const GKE_SPOT: &str = "cloud.google.com/gke-spot";
const GKE_ACCELERATOR: &str = "cloud.google.com/gke-accelerator";
const GKE_TPU_ACCELERATOR: &str = "cloud.google.com/gke-tpu-accelerator";
const GKE_TPU_TOPOLOGY: &str = "cloud.google.com/gke-tpu-topology";
const EKS_CAPACITY_TYPE: &str = "eks.amazonaws.com/capacityType";
const INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
const NVIDIA_GPU: &str = "nvidia.com/gpu";
const GOOGLE_TPU: &str = "google.com/tpu";

impl Placement {
    /// Adds a node selector term; `source` says which setting asked for it, so a clash
    /// names both sides.
    fn select(
        &mut self,
        key: &str,
        value: &str,
        source: &str,
        sources: &mut BTreeMap<String, String>,
    ) -> Result<(), String> {
        match self.node_selector.get(key) {
            Some(existing) if existing != value => Err(format!(
                "{} selects {key}={existing} but {source} selects {key}={value}",
                sources.get(key).map_or("another setting", String::as_str)
            )),
            Some(_) => Ok(()),
            None => {
                self.node_selector
                    .insert(key.to_string(), value.to_string());
                sources.insert(key.to_string(), source.to_string());
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

/// The node selector, tolerations and limits for `intent` on a `flavor` cluster.
///
/// Fails, naming the setting to change, when the cluster cannot offer what is asked
/// (spot on a generic cluster, TPUs off GKE, GPUs on Autopilot without a type) or when
/// the settings contradict each other or the node pool.
pub fn placement(flavor: &Flavor, intent: &Intent) -> Result<Placement, String> {
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

    if intent.gpus < 0 {
        return Err(format!("gpus must be 0 or more, got {}", intent.gpus));
    }
    if intent.gpus > 0 && intent.tpu.is_some() {
        return Err("a workload uses GPUs or a TPU, not both: set gpus = 0 or remove tpu".into());
    }
    if intent.gpus == 0 && intent.gpu_type.is_some() {
        return Err(
            "gpu_type is set but gpus is 0: set gpus to how many GPUs each pod needs".into(),
        );
    }

    if intent.spot {
        let pool_spot = intent
            .node_pool
            .as_ref()
            .map(|p| p["spot"].as_bool().unwrap_or(false));
        match (flavor, pool_spot) {
            (_, Some(false)) => {
                return Err(format!("spot = true but {pool_name} is not a spot pool: set spot = false, or use a spot node pool"));
            }
            // The pool's own selector already picks its (spot or preemptible) nodes.
            (_, Some(true)) => {}
            (Flavor::Gke { .. }, None) => {
                out.select(GKE_SPOT, "true", "spot", &mut sources)?;
                out.tolerate(json!({"key": GKE_SPOT, "operator": "Equal", "value": "true", "effect": "NoSchedule"}));
            }
            (Flavor::Eks, None) => out.select(EKS_CAPACITY_TYPE, "SPOT", "spot", &mut sources)?,
            (Flavor::Generic, None) => {
                return Err(
                    "spot = true needs to know how the cluster labels spot nodes: set flavor = \"gke\" or \"eks\" on the cluster reference, or give a spot node_pool"
                        .into(),
                );
            }
        }
    }

    if intent.gpus > 0 {
        out.limits
            .insert(NVIDIA_GPU.to_string(), intent.gpus.to_string());
        out.tolerate(exists_toleration(NVIDIA_GPU));
        let pool_accelerator = intent
            .node_pool
            .as_ref()
            .and_then(|p| p["accelerator"]["type"].as_str().map(str::to_string));
        match (flavor, intent.gpu_type.as_deref()) {
            (Flavor::Gke { .. }, Some(kind)) => {
                out.select(GKE_ACCELERATOR, kind, "gpu_type", &mut sources)?
            }
            (Flavor::Gke { autopilot: true }, None) if pool_accelerator.is_none() => {
                return Err("GPUs on GKE Autopilot need gpu_type, the accelerator to provision (e.g. \"nvidia-tesla-t4\" or \"nvidia-l4\")".into());
            }
            (Flavor::Eks, Some(kind)) if looks_like_instance_type(kind) => {
                out.select(INSTANCE_TYPE, kind, "gpu_type", &mut sources)?
            }
            (Flavor::Eks, Some(kind)) => {
                return Err(format!("on EKS, gpu_type names the GPU instance type (e.g. \"g5.xlarge\"); {kind:?} is not one"));
            }
            (Flavor::Generic, Some(_)) => {
                return Err("gpu_type needs to know how the cluster labels GPU nodes: set flavor = \"gke\" or \"eks\" on the cluster reference, or select nodes with node_pool".into());
            }
            _ => {}
        }
    }

    if let Some(tpu) = &intent.tpu {
        if !matches!(flavor, Flavor::Gke { .. }) {
            return Err(format!(
                "TPUs run on GKE only; this cluster's flavor is {}",
                flavor.describe()
            ));
        }
        if tpu.chips < 1 {
            return Err(format!("tpu.chips must be 1 or more, got {}", tpu.chips));
        }
        out.select(GKE_TPU_ACCELERATOR, &tpu.kind, "tpu.type", &mut sources)?;
        out.select(
            GKE_TPU_TOPOLOGY,
            &tpu.topology,
            "tpu.topology",
            &mut sources,
        )?;
        out.limits
            .insert(GOOGLE_TPU.to_string(), tpu.chips.to_string());
        out.tolerate(exists_toleration(GOOGLE_TPU));
    }

    if let Some(pool) = &intent.node_pool {
        if !pool.is_object() {
            return Err("node_pool must be a node pool's `placement` output, such as \"${gke_node_pool.gpu.placement}\"".into());
        }
        if let Some(selector) = pool["node_selector"].as_object() {
            for (key, value) in selector {
                let value = value
                    .as_str()
                    .ok_or_else(|| format!("{pool_name}: node_selector.{key} must be a string"))?;
                out.select(key, value, &pool_name, &mut sources)?;
            }
        }
        for taint in pool["taints"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
        {
            let key = taint["key"]
                .as_str()
                .ok_or_else(|| format!("{pool_name}: a taint has no key"))?;
            let raw = taint["effect"].as_str().unwrap_or_default();
            let effect = taint_effect(raw)
                .ok_or_else(|| format!("{pool_name}: taint {key} has unknown effect {raw:?}"))?;
            let mut toleration = json!({"key": key, "operator": "Equal", "effect": effect});
            match taint["value"].as_str() {
                Some(value) if !value.is_empty() => toleration["value"] = json!(value),
                _ => toleration["operator"] = json!("Exists"),
            }
            out.tolerate(toleration);
        }
        let per_node = pool["accelerator"]["count"].as_i64();
        match per_node {
            // GPUs on the pool but none requested: the pod runs there without claiming any.
            _ if intent.gpus == 0 => {}
            None => {
                return Err(format!(
                    "gpus = {} but {pool_name} has no GPUs",
                    intent.gpus
                ))
            }
            Some(n) if intent.gpus > n => {
                return Err(format!(
                    "gpus = {} but {pool_name} has {n} GPU(s) per node",
                    intent.gpus
                ));
            }
            Some(_) => {}
        }
        if let (Some(tpu), Some(chips)) = (&intent.tpu, pool["tpu"]["chips"].as_i64()) {
            if tpu.chips > chips {
                return Err(format!(
                    "tpu.chips = {} but {pool_name} has {chips} TPU chip(s) per node",
                    tpu.chips
                ));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

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
            ("negative gpus", STANDARD, intent(false, -1, None), "gpus must be 0 or more"),
            ("tpu on eks", Flavor::Eks, Intent { tpu: Some(tpu()), ..Intent::default() }, "TPUs run on GKE only; this cluster's flavor is eks"),
            ("tpu on generic", Flavor::Generic, Intent { tpu: Some(tpu()), ..Intent::default() }, "flavor is generic"),
            ("tpu and gpus", STANDARD, Intent { gpus: 1, tpu: Some(tpu()), ..Intent::default() }, "GPUs or a TPU, not both"),
            ("zero chips", STANDARD, Intent { tpu: Some(Tpu { chips: 0, ..tpu() }), ..Intent::default() }, "tpu.chips must be 1 or more"),
            (
                "more gpus than the pool has",
                STANDARD,
                Intent { gpus: 4, node_pool: Some(gpu_pool(false)), ..Intent::default() },
                "gpus = 4 but node pool gpu has 2 GPU(s) per node",
            ),
            (
                "spot on a non-spot pool",
                STANDARD,
                Intent { spot: true, node_pool: Some(gpu_pool(false)), ..Intent::default() },
                "spot = true but node pool gpu is not a spot pool",
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
                "tpu.chips = 8 but node pool tpu has 4 TPU chip(s) per node",
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
}
