//! Checks of Kubeflow Pipelines runs across the stack, offline, also when the cluster,
//! its node pools, KFP and the pipeline are all created by the same stack: a run's
//! `parameters` against the pipeline's inputs (missing, unknown, wrong type), and
//! every task that asks for an accelerator or steers itself with a node selector or
//! tolerations against the node pools of the run's cluster. A task no pool can take
//! would sit Pending forever; here it fails the plan, naming each pool and why it
//! does not fit.
//!
//! A task's accelerator comes from the compiled pipeline (`resourceType`, a
//! Kubernetes resource name such as `nvidia.com/gpu`, and `resourceCount`, either of
//! which may be a run parameter, substituted first), its GPU model from its node
//! selector (`cloud.google.com/gke-accelerator`). A pool's nodes are what its kind's
//! `placement` output says, computed from its spec as apply computes it. GKE taints
//! GPU nodes with `nvidia.com/gpu=present:NoSchedule` and lets pods that ask for GPUs
//! tolerate it; the checks do the same.
//!
//! Skipped while not knowable offline: a pipeline or cluster from outside the stack, a
//! parameter known only at apply, an Autopilot cluster (it makes nodes per pod), a
//! cluster whose pools the stack does not make.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::kfp_spec::{self, Compiled, TaskPlacement};
use super::placement::pool_placement;
use crate::protocol::{is_unknown, StackFinding, StackResource};
use crate::Peer;

/// The kinds these checks read.
pub const STACK_KINDS: &[&str] = &[
    "kfp_run",
    "kfp_pipeline",
    "gke_node_pool",
    "eks_node_group",
    "gke_cluster",
    "eks_cluster",
];

/// The GPU resource name and the taint GKE puts on GPU nodes.
const GPU: &str = "nvidia.com/gpu";
const TPU: &str = "google.com/tpu";

/// Label keys a pool's kind decides entirely: a node has them only when the pool's
/// spec says so, so a selector on one the pool lacks does not match.
fn decided_by_pool(key: &str) -> bool {
    key.starts_with("cloud.google.com/gke-") || key.starts_with("eks.amazonaws.com/")
}

/// What the nodes of one pool are, as far as known offline.
struct Pool {
    address: String,
    labels: BTreeMap<String, String>,
    taints: Vec<(String, String, String)>,
    /// The accelerator resource its nodes offer and how many per node.
    offers: Option<(String, i64)>,
}

impl Pool {
    fn of(r: &StackResource) -> Option<Pool> {
        let peer = Peer {
            kind: r.kind.clone(),
            address: r.address.clone(),
            spec: r.spec.clone(),
        };
        let placement = pool_placement(&peer)?;
        let mut labels: BTreeMap<String, String> = placement["node_selector"]
            .as_object()
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        if let Some(user) = r.spec["labels"].as_object() {
            for (k, v) in user {
                if let Some(v) = v.as_str().filter(|v| !is_unknown(&Value::from(*v))) {
                    labels.insert(k.clone(), v.to_string());
                }
            }
        }
        let mut taints: Vec<(String, String, String)> = placement["taints"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|t| {
                        let s = |k: &str| t[k].as_str().unwrap_or_default().to_string();
                        (s("key"), s("value"), k8s_effect(&s("effect")))
                    })
                    .collect()
            })
            .unwrap_or_default();
        let accelerator = &placement["accelerator"];
        let gpus = accelerator["count"].as_i64().unwrap_or(0);
        let offers = if !placement["tpu"].is_null() {
            Some((
                TPU.to_string(),
                placement["tpu"]["chips"].as_i64().unwrap_or(0),
            ))
        } else if gpus > 0 {
            if r.kind == "gke_node_pool" {
                taints.push((GPU.into(), "present".into(), "NoSchedule".into()));
                if let Some(t) = accelerator["type"].as_str() {
                    labels.insert("cloud.google.com/gke-accelerator".into(), t.into());
                }
            }
            Some((GPU.to_string(), gpus))
        } else {
            None
        };
        if r.kind == "eks_node_group" {
            let capacity = if placement["spot"] == true {
                "SPOT"
            } else {
                "ON_DEMAND"
            };
            labels.insert("eks.amazonaws.com/capacityType".into(), capacity.into());
        }
        Some(Pool {
            address: r.address.clone(),
            labels,
            taints,
            offers,
        })
    }

    /// Why `task` cannot run on these nodes; `None` when it can.
    fn refuses(&self, task: &TaskPlacement) -> Option<String> {
        for (key, want) in &task.node_selector {
            match self.labels.get(key) {
                Some(have) if have != want => {
                    return Some(format!("its nodes have {key}={have}, not {want}"))
                }
                None if decided_by_pool(key) => {
                    return Some(format!("its nodes have no label {key}"))
                }
                _ => {}
            }
        }
        if let Some(asked) = &task.resource_type {
            let count = task.count.unwrap_or(1);
            match &self.offers {
                Some((offered, n)) if offered == asked && *n >= count => {}
                Some((offered, n)) if offered == asked => {
                    return Some(format!(
                        "its nodes have {n} {offered} each, fewer than {count}"
                    ))
                }
                _ if asked != GPU && asked != TPU => {}
                Some((offered, n)) => {
                    return Some(format!("its nodes offer {n} {offered}, not {asked}"))
                }
                None => return Some(format!("its nodes have no {asked}")),
            }
        }
        for (key, value, effect) in &self.taints {
            let auto = key == GPU && task.resource_type.as_deref() == Some(GPU);
            if !auto && !tolerated(&task.tolerations, key, value, effect) {
                let taint = if value.is_empty() {
                    format!("{key}:{effect}")
                } else {
                    format!("{key}={value}:{effect}")
                };
                return Some(format!(
                    "its nodes are tainted {taint}, which the task does not tolerate"
                ));
            }
        }
        None
    }
}

/// A taint effect as pods spell it (GKE's API writes `NO_SCHEDULE`).
fn k8s_effect(effect: &str) -> String {
    match effect {
        "NO_SCHEDULE" => "NoSchedule",
        "PREFER_NO_SCHEDULE" => "PreferNoSchedule",
        "NO_EXECUTE" => "NoExecute",
        other => other,
    }
    .to_string()
}

/// Whether a toleration of `tolerations` (as a pod spells them) tolerates the taint.
fn tolerated(tolerations: &[Value], key: &str, value: &str, effect: &str) -> bool {
    tolerations.iter().any(|t| {
        let s = |k: &str| t[k].as_str().unwrap_or_default();
        let exists = s("operator") == "Exists";
        let key_ok = s("key") == key || (s("key").is_empty() && exists);
        let value_ok = exists || s("value") == value;
        let effect_ok = s("effect").is_empty() || s("effect") == effect;
        key_ok && value_ok && effect_ok
    })
}

/// What a task asks of its node, in words.
fn asks(task: &TaskPlacement) -> String {
    let mut parts = Vec::new();
    if let Some(rt) = &task.resource_type {
        parts.push(format!("{} {rt}", task.count.unwrap_or(1)));
    }
    if !task.node_selector.is_empty() {
        let labels: Vec<String> = task
            .node_selector
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        parts.push(format!("nodes labelled {}", labels.join(", ")));
    }
    if parts.is_empty() {
        "a node without taints it does not tolerate".into()
    } else {
        parts.join(" on ")
    }
}

fn by_address<'a>(resources: &'a [StackResource], address: &str) -> Option<&'a StackResource> {
    resources.iter().find(|r| r.address == address)
}

/// The resource `r`'s `cluster` (or `cluster_name`) field references.
fn cluster_of(r: &StackResource) -> Option<&str> {
    r.referenced("cluster")
        .or_else(|| r.referenced("cluster_name"))
        .map(|(a, _)| a)
}

pub fn check(resources: &[StackResource]) -> Vec<StackFinding> {
    let mut out = Vec::new();
    for run in resources.iter().filter(|r| r.kind == "kfp_run") {
        let Some(pipeline) = run
            .referenced("version")
            .or_else(|| run.referenced("pipeline"))
            .and_then(|(a, _)| by_address(resources, a))
            .filter(|p| p.kind == "kfp_pipeline")
        else {
            continue;
        };
        let compiled = &pipeline.spec["compiled"];
        if !compiled["pipeline_spec"].is_object() {
            continue;
        }
        let compiled = Compiled {
            spec: compiled["pipeline_spec"].clone(),
            platform: Some(compiled["platform_spec"].clone()).filter(|p| p.is_object()),
        };
        let parameters: Map<String, Value> = run.spec["parameters"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        for (name, message) in kfp_spec::check_parameters(&compiled.spec, &parameters) {
            let path = if name.is_empty() {
                "parameters".to_string()
            } else {
                format!("parameters.{name}")
            };
            out.push(StackFinding::error(
                &run.address,
                &path,
                format!("{message} (pipeline {})", pipeline.address),
            ));
        }
        let Some(cluster) = cluster_of(run).and_then(|a| by_address(resources, a)) else {
            continue;
        };
        if cluster.kind == "gke_cluster" && cluster.spec["mode"] == "autopilot" {
            continue;
        }
        let pools: Vec<Pool> = resources
            .iter()
            .filter(|r| matches!(r.kind.as_str(), "gke_node_pool" | "eks_node_group"))
            .filter(|r| cluster_of(r) == Some(cluster.address.as_str()))
            .filter_map(Pool::of)
            .collect();
        if pools.is_empty() {
            continue;
        }
        for task in kfp_spec::placements(&compiled, &parameters) {
            if !task.unresolved.is_empty() {
                continue;
            }
            let reasons: Vec<String> = pools
                .iter()
                .map(|p| p.refuses(&task).map(|why| format!("{}: {why}", p.address)))
                .collect::<Option<Vec<String>>>()
                .unwrap_or_default();
            if reasons.is_empty() {
                continue;
            }
            out.push(StackFinding::error(
                &run.address,
                "version",
                format!(
                    "task {} of pipeline {} asks for {}, and no node pool of {} can run it, so it would stay Pending:\n  {}",
                    task.task,
                    pipeline.address,
                    asks(&task),
                    cluster.address,
                    reasons.join("\n  ")
                ),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const FIXTURE: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/kfp/gpu_pipeline.yaml"
    );

    fn resource(
        kind: &str,
        address: &str,
        spec: Value,
        links: &[(&str, &str, &str)],
    ) -> StackResource {
        StackResource {
            kind: kind.into(),
            address: address.into(),
            spec,
            config: json!({}),
            refs: BTreeMap::new(),
            links: links
                .iter()
                .map(|(p, a, attr)| (p.to_string(), (a.to_string(), attr.to_string())))
                .collect(),
        }
    }

    fn pool(name: &str, spec: Value) -> StackResource {
        let mut full = json!({
            "cluster": "x", "name": name, "machine_type": "n1-highmem-8", "node_count": 1,
            "spot": false, "preemptible": false, "taints": [], "labels": {},
        });
        for (k, v) in spec.as_object().expect("object") {
            full[k] = v.clone();
        }
        resource(
            "gke_node_pool",
            &format!("gke_node_pool.{name}"),
            full,
            &[("cluster", "gke_cluster.c", "id")],
        )
    }

    fn stack(pools: Vec<StackResource>, parameters: Value) -> Vec<StackResource> {
        let (_, compiled) =
            super::super::kfp_pipeline::read_compiled(FIXTURE).expect("fixture compiles");
        let mut out = vec![
            resource(
                "gke_cluster",
                "gke_cluster.c",
                json!({"mode": "standard"}),
                &[],
            ),
            resource(
                "kfp_pipeline",
                "kfp_pipeline.p",
                json!({"compiled": {"pipeline_spec": compiled.spec, "platform_spec": compiled.platform}}),
                &[],
            ),
            resource(
                "kfp_run",
                "kfp_run.r",
                json!({"parameters": parameters}),
                &[
                    ("cluster", "gke_cluster.c", "kubernetes"),
                    ("version", "kfp_pipeline.p", "version_id"),
                ],
            ),
        ];
        out.extend(pools);
        out
    }

    fn codelab_pools() -> Vec<StackResource> {
        vec![
            pool("default-pool", json!({"machine_type": "e2-standard-4"})),
            pool(
                "preemptible-gpu-pool",
                json!({"gpu": {"type": "nvidia-tesla-t4", "count": 4}, "preemptible": true,
                       "taints": ["preemptible=true:NoSchedule"]}),
            ),
        ]
    }

    #[test]
    fn the_codelab_pipeline_fits_the_codelab_pools() {
        let found = check(&stack(codelab_pools(), json!({"epochs": 2})));
        assert!(found.is_empty(), "{found:?}");
    }

    #[test]
    fn a_gpu_model_no_pool_offers_is_refused_with_each_pool_and_why() {
        let mut pools = codelab_pools();
        pools[1].spec["gpu"]["type"] = json!("nvidia-l4");
        let found = check(&stack(pools, json!({})));
        assert_eq!(found.len(), 1, "{found:?}");
        let m = &found[0].message;
        assert!(m.starts_with("task train of pipeline kfp_pipeline.p asks for 1 nvidia.com/gpu on nodes labelled cloud.google.com/gke-accelerator=nvidia-tesla-t4"), "{m}");
        assert!(m.contains("gke_node_pool.default-pool: its nodes have no label cloud.google.com/gke-accelerator"), "{m}");
        assert!(m.contains("gke_node_pool.preemptible-gpu-pool: its nodes have cloud.google.com/gke-accelerator=nvidia-l4, not nvidia-tesla-t4"), "{m}");
    }

    #[test]
    fn a_gpu_count_from_a_parameter_is_substituted_before_the_check() {
        let found = check(&stack(codelab_pools(), json!({"gpus": "8"})));
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0]
                .message
                .contains("its nodes have 4 nvidia.com/gpu each, fewer than 8"),
            "{}",
            found[0].message
        );
        let unknown = json!({"gpus": crate::protocol::UNKNOWN});
        assert!(check(&stack(codelab_pools(), unknown)).is_empty());
    }

    #[test]
    fn a_taint_the_task_does_not_tolerate_is_refused() {
        let mut pools = codelab_pools();
        pools[1].spec["taints"] = json!(["dedicated=training:NoSchedule"]);
        let found = check(&stack(pools, json!({})));
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].message.contains(
                "tainted dedicated=training:NoSchedule, which the task does not tolerate"
            ),
            "{}",
            found[0].message
        );
    }

    #[test]
    fn parameters_are_checked_against_the_pipeline_inputs() {
        let found = check(&stack(codelab_pools(), json!({"epoch": 2, "rows": "many"})));
        let shown: Vec<(String, String)> = found
            .iter()
            .map(|f| (f.path.clone(), f.message.clone()))
            .collect();
        assert_eq!(shown.len(), 2, "{shown:?}");
        assert_eq!(shown[0].0, "parameters.epoch");
        assert!(
            shown[0].1.contains("did you mean \"epochs\""),
            "{}",
            shown[0].1
        );
        assert_eq!(shown[1].0, "parameters.rows");
        assert!(shown[1].1.contains("NUMBER_INTEGER"), "{}", shown[1].1);
    }
}
