//! The scheduler: binds pending pods to nodes that match their selectors, tolerate-check
//! the nodes' taints and have room for their extended resources (GPUs, TPUs); explains
//! failures the way kube-scheduler does; and, as the cluster autoscaler or Autopilot would,
//! adds a node when a pod fits nowhere but a node could be made for it.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use super::events::{self, Event, Involved};
use super::nodes::{self, Shape};
use super::{base, scaled};
use crate::k8s::obj::{self, ts};
use crate::k8s::store::ObjKey;
use crate::k8s::{ClusterState, SettleCtx};

const SCHEDULER: &str = "default-scheduler";
const AUTOSCALER: &str = "cluster-autoscaler";

pub(super) fn schedule(cluster: &mut ClusterState, ctx: &SettleCtx<'_>) {
    let mut pending = obj::list_where(&cluster.store, "", "pods", None, |p| {
        p["spec"]["nodeName"].as_str().is_none_or(str::is_empty)
            && !obj::deleting(p)
            && p["status"]["phase"]
                .as_str()
                .is_none_or(|ph| ph == "Pending")
            && p["spec"]["schedulerName"]
                .as_str()
                .is_none_or(|s| s == SCHEDULER)
            && obj::items(&p["spec"]["schedulingGates"]).is_empty()
    });
    // First come, first served, as the scheduling queue orders pods of equal priority.
    pending.sort_by(|(ka, a), (kb, b)| {
        let ca = a["metadata"]["creationTimestamp"]
            .as_str()
            .unwrap_or_default();
        let cb = b["metadata"]["creationTimestamp"]
            .as_str()
            .unwrap_or_default();
        (ca, ka).cmp(&(cb, kb))
    });
    for (key, pod) in pending {
        schedule_pod(cluster, ctx, &key, pod);
    }
}

/// Why a node cannot take a pod, as the scheduler's filter plugins report it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Misfit {
    Unschedulable,
    Taint(String, String),
    Selector,
    TooManyPods,
    Insufficient(String),
}

impl Misfit {
    fn text(&self) -> String {
        match self {
            Misfit::Unschedulable => "node(s) were unschedulable".into(),
            Misfit::Taint(k, v) => format!("node(s) had untolerated taint {{{k}: {v}}}"),
            Misfit::Selector => "node(s) didn't match Pod's node affinity/selector".into(),
            Misfit::TooManyPods => "Too many pods".into(),
            Misfit::Insufficient(r) => format!("Insufficient {r}"),
        }
    }

    /// Only a lack of room could be solved by evicting other pods.
    fn preemption_could_help(&self) -> bool {
        matches!(self, Misfit::TooManyPods | Misfit::Insufficient(_))
    }
}

/// The extended resources (`nvidia.com/gpu`, `google.com/tpu`…) a pod asks for: the larger
/// of its containers' sum and its largest init container, requests defaulting to limits.
pub(super) fn extended_requests(spec: &Value) -> BTreeMap<String, i64> {
    let of = |c: &Value| -> BTreeMap<String, i64> {
        let mut m = BTreeMap::new();
        for part in ["limits", "requests"] {
            if let Some(res) = c["resources"][part].as_object() {
                for (k, v) in res.iter().filter(|(k, _)| k.contains('/')) {
                    m.insert(k.clone(), obj::count(v));
                }
            }
        }
        m
    };
    let mut total: BTreeMap<String, i64> = BTreeMap::new();
    for c in obj::items(&spec["containers"]) {
        for (k, v) in of(c) {
            *total.entry(k).or_default() += v;
        }
    }
    for c in obj::items(&spec["initContainers"]) {
        for (k, v) in of(c) {
            let e = total.entry(k).or_default();
            *e = (*e).max(v);
        }
    }
    total.retain(|_, v| *v > 0);
    total
}

/// What the pods bound to each node already take.
#[derive(Default)]
struct Usage {
    pods: BTreeMap<String, i64>,
    resources: BTreeMap<(String, String), i64>,
}

impl Usage {
    fn of(cluster: &ClusterState) -> Usage {
        let mut u = Usage::default();
        for (_, pod) in cluster.store.list("", "pods", None) {
            let Some(node) = pod["spec"]["nodeName"].as_str() else {
                continue;
            };
            if matches!(
                pod["status"]["phase"].as_str(),
                Some("Succeeded" | "Failed")
            ) {
                continue;
            }
            *u.pods.entry(node.to_string()).or_default() += 1;
            for (r, n) in extended_requests(&pod["spec"]) {
                *u.resources.entry((node.to_string(), r)).or_default() += n;
            }
        }
        u
    }
}

/// Why `node` cannot take the pod, in the scheduler's plugin order (the first failing
/// filter is the one reported, except that every short resource is named).
fn misfits(pod: &Value, node: &Value, usage: &Usage) -> Vec<Misfit> {
    let spec = &pod["spec"];
    let tolerations = &spec["tolerations"];
    if node["spec"]["unschedulable"] == true
        && !obj::tolerates(
            tolerations,
            &json!({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}),
        )
    {
        return vec![Misfit::Unschedulable];
    }
    let untolerated = obj::items(&node["spec"]["taints"]).iter().find(|t| {
        matches!(t["effect"].as_str(), Some("NoSchedule" | "NoExecute"))
            && !obj::tolerates(tolerations, t)
    });
    if let Some(t) = untolerated {
        return vec![Misfit::Taint(
            t["key"].as_str().unwrap_or_default().to_string(),
            t["value"].as_str().unwrap_or_default().to_string(),
        )];
    }
    if !obj::node_matches(spec, node) {
        return vec![Misfit::Selector];
    }
    let name = obj::name(node);
    let mut short = Vec::new();
    let max_pods = obj::count(&node["status"]["allocatable"]["pods"]);
    if usage.pods.get(name).copied().unwrap_or_default() + 1 > max_pods {
        short.push(Misfit::TooManyPods);
    }
    for (r, want) in extended_requests(spec) {
        let have = obj::count(&node["status"]["allocatable"][r.as_str()]);
        let used = usage
            .resources
            .get(&(name.to_string(), r.clone()))
            .copied()
            .unwrap_or_default();
        if used + want > have {
            short.push(Misfit::Insufficient(r));
        }
    }
    short
}

/// `"1 a, 2 b"`: reasons counted and sorted as the scheduler's FitError renders them.
fn tally(reasons: impl Iterator<Item = String>) -> String {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for r in reasons {
        *counts.entry(r).or_default() += 1;
    }
    let mut parts: Vec<String> = counts
        .into_iter()
        .map(|(r, n)| format!("{n} {r}"))
        .collect();
    parts.sort();
    parts.join(", ")
}

/// The FailedScheduling message for a pod no node can take.
fn fit_error(per_node: &[Vec<Misfit>]) -> String {
    let n = per_node.len();
    if n == 0 {
        return "no nodes available to schedule pods".into();
    }
    let reasons = tally(per_node.iter().flat_map(|m| m.iter().map(Misfit::text)));
    let preemption = tally(per_node.iter().map(|m| {
        if m.iter().all(Misfit::preemption_could_help) {
            "No preemption victims found for incoming pod".to_string()
        } else {
            "Preemption is not helpful for scheduling".to_string()
        }
    }));
    format!("0/{n} nodes are available: {reasons}. preemption: 0/{n} nodes are available: {preemption}.")
}

fn unresolvable(node_count: usize, why: &str) -> String {
    format!(
        "0/{node_count} nodes are available: {why}. preemption: 0/{node_count} nodes are available: {node_count} Preemption is not helpful for scheduling."
    )
}

/// Whether the pod's claims let it be scheduled.
enum Claims {
    Bound,
    /// Waiting for a first-consumer volume to be provisioned: nothing to report yet.
    Provisioning,
    Blocked(String),
}

fn claims(cluster: &ClusterState, namespace: &str, spec: &Value) -> Claims {
    let mut provisioning = false;
    for v in obj::items(&spec["volumes"]) {
        let Some(claim) = v["persistentVolumeClaim"]["claimName"].as_str() else {
            continue;
        };
        let Some(pvc) =
            cluster
                .store
                .get(&ObjKey::new("", "persistentvolumeclaims", namespace, claim))
        else {
            return Claims::Blocked(format!("persistentvolumeclaim \"{claim}\" not found"));
        };
        if obj::deleting(pvc) {
            return Claims::Blocked(format!(
                "persistentvolumeclaim \"{claim}\" is being deleted"
            ));
        }
        if pvc["status"]["phase"] == "Bound" {
            continue;
        }
        if super::storage::waits_for_consumer(cluster, pvc) {
            provisioning = true;
            continue;
        }
        return Claims::Blocked("pod has unbound immediate PersistentVolumeClaims".into());
    }
    if provisioning {
        Claims::Provisioning
    } else {
        Claims::Bound
    }
}

fn schedule_pod(cluster: &mut ClusterState, ctx: &SettleCtx<'_>, key: &ObjKey, pod: Value) {
    let node_list: Vec<Value> = cluster
        .store
        .list("", "nodes", None)
        .into_iter()
        .map(|(_, n)| n.clone())
        .collect();
    match claims(cluster, &key.namespace, &pod["spec"]) {
        Claims::Bound => {}
        Claims::Provisioning => return,
        Claims::Blocked(why) => {
            unschedulable(cluster, ctx, key, pod, &unresolvable(node_list.len(), &why));
            return;
        }
    }
    let usage = Usage::of(cluster);
    let mut fits: Vec<(i64, String)> = Vec::new();
    let mut per_node = Vec::new();
    for node in &node_list {
        let m = misfits(&pod, node, &usage);
        if m.is_empty() {
            let name = obj::name(node).to_string();
            fits.push((usage.pods.get(&name).copied().unwrap_or_default(), name));
        } else {
            per_node.push(m);
        }
    }
    // The least busy node, as the default scoring spreads pods.
    if let Some((_, node)) = fits.into_iter().min() {
        // A pod that never had to wait was placeable when it was made (or when its node
        // came up); dating the binding so lets a settle that comes late catch up.
        let waited = obj::items(&pod["status"]["conditions"])
            .iter()
            .any(|c| c["type"] == "PodScheduled");
        let at = if waited {
            ctx.now
        } else {
            let created = obj::parse_time(&pod["metadata"]["creationTimestamp"]).unwrap_or(ctx.now);
            let up = cluster
                .store
                .get(&nodes::node_key(&node))
                .and_then(nodes::up_since)
                .unwrap_or(ctx.now);
            created.max(up).min(ctx.now)
        };
        bind(cluster, key, pod, &node, at);
        return;
    }
    let pod = unschedulable(cluster, ctx, key, pod, &fit_error(&per_node));
    let since = obj::items(&pod["status"]["conditions"])
        .iter()
        .find(|c| c["type"] == "PodScheduled")
        .and_then(|c| obj::parse_time(&c["lastTransitionTime"]))
        .unwrap_or(ctx.now);
    let added = if cluster.cloud.provisions_per_pod() {
        provision_for(cluster, ctx, &pod, since)
    } else {
        scale_up_for(cluster, ctx, &pod, since)
    };
    if let Some(node) = added {
        let node = cluster.store.get(&nodes::node_key(&node)).cloned();
        if let Some(node) = node.filter(|n| misfits(&pod, n, &Usage::of(cluster)).is_empty()) {
            // Bound when the node it waited for came up.
            let at = nodes::up_since(&node).unwrap_or(ctx.now).min(ctx.now);
            bind(cluster, key, pod, obj::name(&node), at);
        }
    }
}

fn bind(cluster: &mut ClusterState, key: &ObjKey, mut pod: Value, node: &str, at: DateTime<Utc>) {
    obj::set(&mut pod, &["spec", "nodeName"], json!(node));
    let conditions = obj::array_mut(&mut pod, &["status", "conditions"]);
    conditions.retain(|c| c["type"] != "PodScheduled");
    conditions
        .push(json!({"type": "PodScheduled", "status": "True", "lastTransitionTime": ts(at)}));
    let pod = cluster.store.update(key, pod);
    let message = format!(
        "Successfully assigned {}/{} to {node}",
        key.namespace, key.name
    );
    events::emit(
        &mut cluster.store,
        &Involved::new(&pod, "v1", "Pod"),
        Event::normal(SCHEDULER, "Scheduled", message),
        at,
    );
}

/// Records why the pod waits (condition and a FailedScheduling event when the reason
/// changed); returns the pod as stored.
fn unschedulable(
    cluster: &mut ClusterState,
    ctx: &SettleCtx<'_>,
    key: &ObjKey,
    mut pod: Value,
    message: &str,
) -> Value {
    let current = obj::items(&pod["status"]["conditions"])
        .iter()
        .find(|c| c["type"] == "PodScheduled")
        .cloned();
    if current
        .as_ref()
        .is_some_and(|c| c["status"] == "False" && c["message"] == message)
    {
        return pod;
    }
    // A pod seen for the first time was tried when it was made.
    let since = match &current {
        Some(c) if c["status"] == "False" => c["lastTransitionTime"].clone(),
        Some(_) => ts(ctx.now),
        None => ts(obj::parse_time(&pod["metadata"]["creationTimestamp"])
            .map_or(ctx.now, |t| t.min(ctx.now))),
    };
    let conditions = obj::array_mut(&mut pod, &["status", "conditions"]);
    conditions.retain(|c| c["type"] != "PodScheduled");
    conditions.push(json!({
        "type": "PodScheduled", "status": "False", "lastTransitionTime": since,
        "reason": "Unschedulable", "message": message,
    }));
    obj::set(&mut pod, &["status", "phase"], json!("Pending"));
    let pod = cluster.store.update(key, pod);
    let at = if current.is_none() {
        obj::parse_time(&since).unwrap_or(ctx.now)
    } else {
        ctx.now
    };
    events::emit(
        &mut cluster.store,
        &Involved::new(&pod, "v1", "Pod"),
        Event::warning(SCHEDULER, "FailedScheduling", message),
        at,
    );
    pod
}

/// Clouds that make a node per pod (GKE Autopilot): a node made to the pod's measure
/// (its selector's labels, its GPUs or TPU chips, the machine the cloud picks for them)
/// once the provisioning delay has passed; the node's name.
fn provision_for(
    cluster: &mut ClusterState,
    ctx: &SettleCtx<'_>,
    pod: &Value,
    since: DateTime<Utc>,
) -> Option<String> {
    let name = nodes::autopilot_node_name(cluster, obj::uid(pod));
    if cluster.store.get(&nodes::node_key(&name)).is_some() {
        return None;
    }
    let spec = &pod["spec"];
    let mut labels: BTreeMap<String, String> = BTreeMap::new();
    if let Some(sel) = spec["nodeSelector"].as_object() {
        for (k, v) in sel {
            labels.insert(k.clone(), v.as_str().unwrap_or_default().to_string());
        }
    }
    let terms = obj::at(
        spec,
        &[
            "affinity",
            "nodeAffinity",
            "requiredDuringSchedulingIgnoredDuringExecution",
            "nodeSelectorTerms",
        ],
    );
    if let Some(term) = obj::items(terms).first() {
        for e in obj::items(&term["matchExpressions"]) {
            if let (Some(k), Some("In"), Some(v)) = (
                e["key"].as_str(),
                e["operator"].as_str(),
                e["values"][0].as_str(),
            ) {
                labels.entry(k.to_string()).or_insert_with(|| v.to_string());
            }
        }
    }
    let extended = extended_requests(spec);
    let machine_type = cluster.cloud.pod_node_machine(&mut labels, &extended);
    let pool = format!("nap-{}", name.rsplit('-').next().unwrap_or_default());
    let message = format!("pod triggered scale-up: [{{{pool} 0->1 (max: 1000)}}]");
    events::emit_once(
        &mut cluster.store,
        &Involved::new(pod, "v1", "Pod"),
        Event::normal(AUTOSCALER, "TriggeredScaleUp", message),
        since,
    );
    if since + scaled(ctx, base::SCALE_UP) > ctx.now {
        return None;
    }
    let shape = Shape {
        pool,
        machine_type,
        labels,
        taints: Vec::new(),
        cpu: "4".into(),
        memory: "16Gi".into(),
        extended: extended
            .into_iter()
            .map(|(k, v)| (k, v.to_string()))
            .collect(),
        // Autopilot's nodes run the control plane's version.
        version: None,
    };
    nodes::add(
        cluster,
        &name,
        &shape,
        true,
        since + scaled(ctx, base::SCALE_UP),
    );
    Some(name)
}

/// Standard clusters: grows the first autoscaled pool whose nodes would take the pod,
/// once the scale-up delay has passed; the new node's name.
fn scale_up_for(
    cluster: &mut ClusterState,
    ctx: &SettleCtx<'_>,
    pod: &Value,
    since: DateTime<Utc>,
) -> Option<String> {
    let pools = cluster.node_pools.clone();
    let mut why_not = Vec::new();
    for pool in &pools {
        let template = nodes::build(cluster, "template", &Shape::of_pool(pool), 0, true, ctx.now);
        if let Some(m) = misfits(pod, &template, &Usage::default()).first() {
            why_not.push(m.text());
            continue;
        }
        let current = nodes::pool_nodes(cluster, &pool.name).len() as i64;
        if current >= pool.max_nodes {
            why_not.push("max node group size reached".to_string());
            continue;
        }
        let message = format!(
            "pod triggered scale-up: [{{{} {current}->{} (max: {})}}]",
            pool.name,
            current + 1,
            pool.max_nodes
        );
        events::emit_once(
            &mut cluster.store,
            &Involved::new(pod, "v1", "Pod"),
            Event::normal(AUTOSCALER, "TriggeredScaleUp", message),
            since,
        );
        if since + scaled(ctx, base::SCALE_UP) > ctx.now {
            return None;
        }
        return nodes::grow_pool(
            cluster,
            pool,
            pool.max_nodes,
            since + scaled(ctx, base::SCALE_UP),
        );
    }
    if pools.iter().any(|p| p.max_nodes > p.node_count) {
        let message = format!(
            "pod didn't trigger scale-up: {}",
            tally(why_not.into_iter())
        );
        events::emit_once(
            &mut cluster.store,
            &Involved::new(pod, "v1", "Pod"),
            Event::normal(AUTOSCALER, "NotTriggerScaleUp", message),
            since,
        );
    }
    None
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{self, Harness};
    use super::*;

    fn pod(name: &str, spec: Value) -> Value {
        let mut spec = spec;
        obj::default(
            &mut spec,
            &["containers"],
            json!([{"name": "main", "image": "busybox"}]),
        );
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})
    }

    fn scheduled_on(h: &Harness, name: &str) -> Option<String> {
        h.get("", "pods", "default", name)["spec"]["nodeName"]
            .as_str()
            .map(str::to_string)
    }

    fn condition_message(h: &Harness, name: &str) -> String {
        let pod = h.get("", "pods", "default", name);
        obj::items(&pod["status"]["conditions"])
            .iter()
            .find(|c| c["type"] == "PodScheduled")
            .and_then(|c| c["message"].as_str())
            .unwrap_or_default()
            .to_string()
    }

    #[test]
    fn standard_cluster_messages_name_every_reason() {
        let mut spot = testkit::pool("spot", 2, 2);
        spot.taints = vec![json!({"key": "preemptible", "value": "true", "effect": "NoSchedule"})];
        let mut h = Harness::standard(vec![testkit::pool("default-pool", 1, 1), spot]);
        h.settle();
        h.create(
            "",
            "pods",
            "default",
            pod(
                "p",
                json!({"nodeSelector": {"cloud.google.com/gke-nodepool": "gpu"}}),
            ),
        );
        h.settle();
        assert_eq!(scheduled_on(&h, "p"), None);
        assert_eq!(
            condition_message(&h, "p"),
            "0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 2 node(s) had untolerated taint {preemptible: true}. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
        );
        assert!(h
            .reasons("default", "p")
            .contains(&"FailedScheduling".to_string()));
    }

    #[test]
    fn placement_table() {
        struct Case {
            name: &'static str,
            spec: Value,
            /// The pool the pod lands in, or None when it must stay pending.
            want: Option<&'static str>,
            message: &'static str,
        }
        let preemptible_gpu = {
            let mut p = testkit::gpu_pool("pgpu", 1, 1);
            p.taints
                .push(json!({"key": "preemptible", "value": "true", "effect": "NoSchedule"}));
            p.labels
                .insert("cloud.google.com/gke-preemptible".into(), "true".into());
            p
        };
        let gpu_tol =
            json!([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]);
        let both_tol = json!([{"key": "nvidia.com/gpu", "operator": "Exists"}, {"key": "preemptible", "operator": "Equal", "value": "true", "effect": "NoSchedule"}]);
        let cases = vec![
            Case { name: "plain", spec: json!({}), want: Some("default-pool"), message: "" },
            Case {
                name: "gpu-without-toleration",
                spec: json!({"containers": [{"name": "m", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}),
                want: None,
                message: "0/3 nodes are available: 1 Insufficient nvidia.com/gpu, 2 node(s) had untolerated taint {nvidia.com/gpu: present}. preemption: 0/3 nodes are available: 1 No preemption victims found for incoming pod, 2 Preemption is not helpful for scheduling.",
            },
            Case {
                name: "gpu",
                spec: json!({"tolerations": gpu_tol, "containers": [{"name": "m", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}),
                want: Some("gpu"),
                message: "",
            },
            Case {
                name: "too-many-gpus",
                spec: json!({"tolerations": both_tol, "containers": [{"name": "m", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 2}}}]}),
                want: None,
                message: "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod.",
            },
            Case {
                name: "preemptible-gpu",
                spec: json!({"tolerations": both_tol, "nodeSelector": {"cloud.google.com/gke-preemptible": "true"},
                             "containers": [{"name": "m", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}),
                want: Some("pgpu"),
                message: "",
            },
        ];
        for case in cases {
            let mut h = Harness::standard(vec![
                testkit::pool("default-pool", 1, 1),
                testkit::gpu_pool("gpu", 1, 1),
                preemptible_gpu.clone(),
            ]);
            h.settle();
            h.create("", "pods", "default", pod(case.name, case.spec));
            h.settle();
            let node = scheduled_on(&h, case.name);
            match case.want {
                Some(pool) => {
                    let node = node.unwrap_or_else(|| {
                        panic!(
                            "{}: pending: {}",
                            case.name,
                            condition_message(&h, case.name)
                        )
                    });
                    let labels = &h.get("", "nodes", "", &node)["metadata"]["labels"];
                    assert_eq!(
                        labels["cloud.google.com/gke-nodepool"], pool,
                        "{}",
                        case.name
                    );
                }
                None => {
                    assert_eq!(node, None, "{}", case.name);
                    assert_eq!(
                        condition_message(&h, case.name),
                        case.message,
                        "{}",
                        case.name
                    );
                }
            }
        }
    }

    #[test]
    fn gpu_capacity_is_shared_between_pods() {
        let mut h = Harness::standard(vec![testkit::gpu_pool("gpu", 1, 1)]);
        h.settle();
        let spec = json!({"tolerations": [{"operator": "Exists"}],
                          "containers": [{"name": "m", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 1}}}]});
        h.create("", "pods", "default", pod("a", spec.clone()));
        h.create("", "pods", "default", pod("b", spec));
        h.settle();
        assert!(scheduled_on(&h, "a").is_some());
        assert_eq!(scheduled_on(&h, "b"), None);
        assert!(
            condition_message(&h, "b").contains("1 Insufficient nvidia.com/gpu"),
            "{}",
            condition_message(&h, "b")
        );
    }

    #[test]
    fn an_autoscaled_pool_grows_from_zero_after_a_delay() {
        let mut h = Harness::standard(vec![
            testkit::pool("default-pool", 1, 1),
            testkit::gpu_pool("gpu", 0, 2),
        ]);
        h.settle();
        assert_eq!(h.names("", "nodes", "").len(), 1);
        let spec = json!({"tolerations": [{"operator": "Exists"}],
                          "containers": [{"name": "m", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 1}}}]});
        h.create("", "pods", "default", pod("train", spec));
        h.settle();
        assert_eq!(
            scheduled_on(&h, "train"),
            None,
            "no node before the scale-up delay"
        );
        assert!(h
            .reasons("default", "train")
            .contains(&"TriggeredScaleUp".to_string()));
        h.advance(10.0);
        let node = scheduled_on(&h, "train").expect("scheduled after the scale-up");
        assert_eq!(
            h.get("", "nodes", "", &node)["metadata"]["labels"]["cloud.google.com/gke-nodepool"],
            "gpu"
        );
        assert_eq!(h.names("", "nodes", "").len(), 2);
    }

    #[test]
    fn a_full_pool_does_not_scale() {
        let mut h = Harness::standard(vec![testkit::pool("default-pool", 1, 2)]);
        h.settle();
        let spec = json!({"nodeSelector": {"x": "y"}});
        h.create("", "pods", "default", pod("p", spec));
        h.advance(10.0);
        assert_eq!(scheduled_on(&h, "p"), None);
        let messages = h.event_messages("default", "NotTriggerScaleUp");
        assert_eq!(
            messages,
            vec![
                "pod didn't trigger scale-up: 1 node(s) didn't match Pod's node affinity/selector"
            ]
        );
    }

    #[test]
    fn autopilot_provisions_nodes_for_what_pods_select() {
        struct Case {
            name: &'static str,
            spec: Value,
            label: (&'static str, &'static str),
            resource: Option<(&'static str, &'static str)>,
        }
        let cases = [
            Case {
                name: "spot",
                spec: json!({"nodeSelector": {"cloud.google.com/gke-spot": "true"}}),
                label: ("cloud.google.com/gke-spot", "true"),
                resource: None,
            },
            Case {
                name: "gpu",
                spec: json!({"nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-l4"},
                             "containers": [{"name": "m", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 2}}}]}),
                label: ("cloud.google.com/gke-accelerator", "nvidia-l4"),
                resource: Some(("nvidia.com/gpu", "2")),
            },
            Case {
                name: "tpu",
                spec: json!({"nodeSelector": {"cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice", "cloud.google.com/gke-tpu-topology": "2x2"},
                             "containers": [{"name": "m", "image": "x", "resources": {"limits": {"google.com/tpu": 4}}}]}),
                label: ("cloud.google.com/gke-tpu-topology", "2x2"),
                resource: Some(("google.com/tpu", "4")),
            },
        ];
        for case in cases {
            let mut h = Harness::autopilot();
            h.settle();
            assert!(h.names("", "nodes", "").is_empty());
            h.create("", "pods", "default", pod(case.name, case.spec));
            h.settle();
            assert_eq!(
                scheduled_on(&h, case.name),
                None,
                "{}: provisioning takes a while",
                case.name
            );
            assert!(
                h.reasons("default", case.name)
                    .contains(&"TriggeredScaleUp".to_string()),
                "{}",
                case.name
            );
            h.advance(6.0);
            let node = scheduled_on(&h, case.name)
                .unwrap_or_else(|| panic!("{}: not scheduled", case.name));
            assert!(node.starts_with("gk3-batch-nap-"), "{node}");
            let node = h.get("", "nodes", "", &node);
            assert_eq!(
                node["metadata"]["labels"][case.label.0], case.label.1,
                "{}",
                case.name
            );
            if let Some((r, n)) = case.resource {
                assert_eq!(node["status"]["allocatable"][r], n, "{}", case.name);
            }
        }
    }

    #[test]
    fn unbound_claims_keep_a_pod_pending() {
        let mut h = Harness::standard(vec![testkit::pool("default-pool", 1, 1)]);
        h.settle();
        h.create("", "persistentvolumeclaims", "default", json!({
            "metadata": {"name": "data"},
            "spec": {"storageClassName": "", "accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}
        }));
        h.create(
            "",
            "pods",
            "default",
            pod(
                "p",
                json!({"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]}),
            ),
        );
        h.settle();
        assert_eq!(scheduled_on(&h, "p"), None);
        assert_eq!(
            condition_message(&h, "p"),
            "0/1 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
        );
    }

    #[test]
    fn no_nodes_at_all() {
        let mut h = Harness::standard(vec![]);
        h.create("", "pods", "default", pod("p", json!({})));
        h.settle();
        assert_eq!(
            condition_message(&h, "p"),
            "no nodes available to schedule pods"
        );
    }
}
