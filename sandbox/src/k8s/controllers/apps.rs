//! The apps/v1 controllers: Deployments roll their template out through ReplicaSets
//! (`<name>-<pod-template-hash>`), ReplicaSets keep their pod count, DaemonSets run one pod
//! per eligible node, StatefulSets run ordered pods `<name>-<i>` with their claims.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use super::events::{self, Event, Involved};
use crate::common::hash::fnv64;
use crate::k8s::obj::{self, ts};
use crate::k8s::store::ObjKey;
use crate::k8s::{ClusterState, SettleCtx};

const HASH_LABEL: &str = "pod-template-hash";
const REVISION: &str = "deployment.kubernetes.io/revision";

pub(super) fn sync(cluster: &mut ClusterState, ctx: &SettleCtx<'_>) {
    for (key, d) in obj::list(&cluster.store, "apps", "deployments", None) {
        if !obj::deleting(&d) {
            deployment(cluster, ctx, &key, d);
        }
    }
    for (key, rs) in obj::list(&cluster.store, "apps", "replicasets", None) {
        if !obj::deleting(&rs) {
            replicaset(cluster, ctx, &key, rs);
        }
    }
    for (key, ds) in obj::list(&cluster.store, "apps", "daemonsets", None) {
        if !obj::deleting(&ds) {
            daemonset(cluster, ctx, &key, ds);
        }
    }
    for (key, sts) in obj::list(&cluster.store, "apps", "statefulsets", None) {
        if !obj::deleting(&sts) {
            statefulset(cluster, ctx, &key, sts);
        }
    }
}

/// The deployment controller's pod-template-hash: FNV-32a of the template, rendered with
/// Kubernetes' safe alphabet.
pub(super) fn template_hash(template: &Value) -> String {
    let h = fnv64(&[&crate::common::hash::canonical(template)]);
    let h32 = (h ^ (h >> 32)) as u32;
    obj::safe_encode(&h32.to_string())
}

fn active(pod: &Value) -> bool {
    !obj::deleting(pod)
        && !matches!(
            pod["status"]["phase"].as_str(),
            Some("Succeeded" | "Failed")
        )
}

fn ready(pod: &Value) -> bool {
    obj::items(&pod["status"]["conditions"])
        .iter()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

fn owned(
    cluster: &ClusterState,
    group: &str,
    resource: &str,
    namespace: &str,
    kind: &str,
    owner: &Value,
) -> Vec<(ObjKey, Value)> {
    obj::list_where(&cluster.store, group, resource, Some(namespace), |o| {
        obj::controller_uid(o, kind) == Some(obj::uid(owner))
    })
}

fn replicas(spec: &Value) -> i64 {
    spec["replicas"].as_i64().unwrap_or(1).max(0)
}

/// A pod made from a workload's template.
fn pod_from(template: &Value, namespace: &str, name: &str, owner_ref: Value) -> Value {
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": template["metadata"].clone(),
        "spec": template["spec"].clone(),
    });
    let meta = obj::obj_mut(&mut pod, &["metadata"]);
    meta.remove("creationTimestamp");
    meta.insert("name".into(), json!(name));
    meta.insert("namespace".into(), json!(namespace));
    meta.insert("ownerReferences".into(), json!([owner_ref]));
    pod
}

fn delete_pod(
    cluster: &mut ClusterState,
    owner: &Involved<'_>,
    component: &str,
    key: &ObjKey,
    now: DateTime<Utc>,
) {
    if cluster.store.delete(key, now).is_some() {
        events::emit(
            &mut cluster.store,
            owner,
            Event::normal(
                component,
                "SuccessfulDelete",
                format!("Deleted pod: {}", key.name),
            ),
            now,
        );
    }
}

/// `maxUnavailable`/`maxSurge` as a number of pods (`"25%"` of `total`, rounded down).
fn int_or_percent(v: &Value, total: i64) -> i64 {
    match v {
        Value::String(s) => s
            .strip_suffix('%')
            .and_then(|p| p.parse::<i64>().ok())
            .map_or(0, |p| total * p / 100),
        other => other.as_i64().unwrap_or_default(),
    }
}

/// Sets a Deployment-style condition (`lastUpdateTime` moves when the reason changes,
/// `lastTransitionTime` only when the status does).
fn set_condition(
    object: &mut Value,
    kind: &str,
    status: bool,
    reason: &str,
    message: &str,
    now: DateTime<Utc>,
) {
    let status = if status { "True" } else { "False" };
    let conditions = obj::array_mut(object, &["status", "conditions"]);
    let previous = conditions.iter().find(|c| c["type"] == kind).cloned();
    let (updated, transitioned) = match &previous {
        Some(p) if p["status"] == status && p["reason"] == reason && p["message"] == message => {
            (p["lastUpdateTime"].clone(), p["lastTransitionTime"].clone())
        }
        Some(p) if p["status"] == status => (ts(now), p["lastTransitionTime"].clone()),
        _ => (ts(now), ts(now)),
    };
    let c = json!({"type": kind, "status": status, "lastUpdateTime": updated, "lastTransitionTime": transitioned,
                   "reason": reason, "message": message});
    match conditions.iter_mut().find(|c| c["type"] == kind) {
        Some(slot) => *slot = c,
        None => conditions.push(c),
    }
}

fn without_hash(template: &Value) -> Value {
    let mut t = template.clone();
    obj::remove(&mut t, &["metadata", "labels", HASH_LABEL]);
    if t["metadata"]["labels"]
        .as_object()
        .is_some_and(|m| m.is_empty())
    {
        obj::remove(&mut t, &["metadata", "labels"]);
    }
    t
}

fn revision(rs: &Value) -> i64 {
    obj::annotation(rs, REVISION)
        .and_then(|r| r.parse().ok())
        .unwrap_or_default()
}

/// The deployment controller for one Deployment: its ReplicaSet for the current
/// template found or made, the rollout moved on (unless paused), and the status written.
fn deployment(cluster: &mut ClusterState, ctx: &SettleCtx<'_>, key: &ObjKey, d: Value) {
    let now = ctx.now;
    let want = replicas(&d["spec"]);
    let Some((new_key, new_rs)) = current_replicaset(cluster, key, &d, want, now) else {
        return;
    };
    let old: Vec<(ObjKey, Value)> = owned(
        cluster,
        "apps",
        "replicasets",
        &key.namespace,
        "Deployment",
        &d,
    )
    .into_iter()
    .filter(|(k, _)| *k != new_key)
    .collect();
    if d["spec"]["paused"] != true {
        roll(cluster, &d, &new_key, &new_rs, &old, want, now);
    }
    deployment_status(cluster, key, d, &new_key, new_rs, want, now);
}

/// The Deployment's ReplicaSet for its current template: an owned set with that
/// template (or the name it would get), else a new one at the next revision, with no
/// replicas yet. None when it cannot be made.
fn current_replicaset(
    cluster: &mut ClusterState,
    key: &ObjKey,
    d: &Value,
    want: i64,
    now: DateTime<Utc>,
) -> Option<(ObjKey, Value)> {
    const COMPONENT: &str = "deployment-controller";
    let template = d["spec"]["template"].clone();
    let sets = owned(
        cluster,
        "apps",
        "replicasets",
        &key.namespace,
        "Deployment",
        d,
    );
    let hash = template_hash(&template);
    let name = format!("{}-{hash}", key.name);
    let found = sets
        .iter()
        .find(|(k, rs)| without_hash(&rs["spec"]["template"]) == template || k.name == name)
        .cloned();
    if found.is_some() {
        return found;
    }
    let next_revision = sets
        .iter()
        .map(|(_, rs)| revision(rs))
        .max()
        .unwrap_or_default()
        + 1;
    let mut rs_template = template.clone();
    obj::set(
        &mut rs_template,
        &["metadata", "labels", HASH_LABEL],
        json!(hash),
    );
    let mut selector = d["spec"]["selector"].clone();
    obj::set(&mut selector, &["matchLabels", HASH_LABEL], json!(hash));
    let rs = json!({
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": name,
            "namespace": key.namespace,
            "labels": rs_template["metadata"]["labels"].clone(),
            "annotations": {
                REVISION: next_revision.to_string(),
                "deployment.kubernetes.io/desired-replicas": want.to_string(),
                "deployment.kubernetes.io/max-replicas": (want + int_or_percent(&d["spec"]["strategy"]["rollingUpdate"]["maxSurge"], want)).to_string(),
            },
            "ownerReferences": [obj::controller_ref(d, "apps/v1", "Deployment")],
        },
        "spec": {"replicas": 0, "selector": selector, "template": rs_template},
    });
    let rs_key = ObjKey::new("apps", "replicasets", &key.namespace, &name);
    let owner = Involved::new(d, "apps/v1", "Deployment");
    super::create_owned(cluster, rs_key.clone(), rs, &owner, COMPONENT, None, now)
        .map(|v| (rs_key, v))
}

/// One step of the rollout: the new ReplicaSet scaled to what the strategy allows, the
/// old ones down to what it cannot serve yet, and idle old sets past
/// `revisionHistoryLimit` deleted.
fn roll(
    cluster: &mut ClusterState,
    d: &Value,
    new_key: &ObjKey,
    new_rs: &Value,
    old: &[(ObjKey, Value)],
    want: i64,
    now: DateTime<Utc>,
) {
    let old_pods: i64 = old
        .iter()
        .map(|(_, rs)| rs["status"]["replicas"].as_i64().unwrap_or_default())
        .sum();
    let recreate = d["spec"]["strategy"]["type"] == "Recreate";
    let new_target = if recreate && old_pods > 0 { 0 } else { want };
    scale(cluster, d, new_key, new_rs, new_target, now);
    // Old sets keep what the new one cannot yet serve.
    let mut budget = if recreate {
        0
    } else {
        (want
            - new_rs["status"]["availableReplicas"]
                .as_i64()
                .unwrap_or_default())
        .max(0)
    };
    let mut old_sorted = old.to_vec();
    old_sorted.sort_by_key(|(_, rs)| std::cmp::Reverse(revision(rs)));
    for (k, rs) in &old_sorted {
        let current = rs["spec"]["replicas"].as_i64().unwrap_or_default();
        let keep = current.min(budget);
        budget -= keep;
        scale(cluster, d, k, rs, keep, now);
    }
    let limit = d["spec"]["revisionHistoryLimit"]
        .as_i64()
        .unwrap_or(10)
        .max(0);
    let mut idle: Vec<&(ObjKey, Value)> = old_sorted
        .iter()
        .filter(|(_, rs)| {
            rs["spec"]["replicas"] == 0
                && rs["status"]["replicas"].as_i64().unwrap_or_default() == 0
        })
        .collect();
    idle.sort_by_key(|(_, rs)| std::cmp::Reverse(revision(rs)));
    for (k, _) in idle
        .into_iter()
        .skip(usize::try_from(limit).unwrap_or_default())
    {
        cluster.store.delete(k, now);
    }
}

/// Writes the Deployment's status from its ReplicaSets as they are now: the replica
/// counts, the Available and Progressing conditions, and the current set's revision.
fn deployment_status(
    cluster: &mut ClusterState,
    key: &ObjKey,
    mut d: Value,
    new_key: &ObjKey,
    new_rs: Value,
    want: i64,
    now: DateTime<Utc>,
) {
    let sets = owned(
        cluster,
        "apps",
        "replicasets",
        &key.namespace,
        "Deployment",
        &d,
    );
    let sum = |field: &str| -> i64 {
        sets.iter()
            .map(|(_, rs)| rs["status"][field].as_i64().unwrap_or_default())
            .sum()
    };
    let total = sum("replicas");
    let ready_n = sum("readyReplicas");
    let available = sum("availableReplicas");
    let new_now = cluster.store.get(new_key).cloned().unwrap_or(new_rs);
    let updated = new_now["status"]["replicas"].as_i64().unwrap_or_default();
    let new_available = new_now["status"]["availableReplicas"]
        .as_i64()
        .unwrap_or_default();
    let generation = d["metadata"]["generation"].clone();
    let status = obj::obj_mut(&mut d, &["status"]);
    status.insert("observedGeneration".into(), generation);
    for (field, n) in [
        ("replicas", total),
        ("updatedReplicas", updated),
        ("readyReplicas", ready_n),
        ("availableReplicas", available),
    ] {
        if n > 0 {
            status.insert(field.into(), json!(n));
        } else {
            status.remove(field);
        }
    }
    let unavailable = (want - available).max(0);
    if unavailable > 0 {
        status.insert("unavailableReplicas".into(), json!(unavailable));
    } else {
        status.remove("unavailableReplicas");
    }
    let rolled_out = updated == want && new_available == want && total == want;
    set_rollout_conditions(&mut d, &new_key.name, want, available, rolled_out, now);
    let rev = revision(&new_now).to_string();
    obj::set(&mut d, &["metadata", "annotations", REVISION], json!(rev));
    cluster.store.update(key, d);
}

/// The Deployment's Available condition (enough pods for `maxUnavailable`) and its
/// Progressing one (whether the set `rs_name` has `rolled_out` fully), Available first.
fn set_rollout_conditions(
    d: &mut Value,
    rs_name: &str,
    want: i64,
    available: i64,
    rolled_out: bool,
    now: DateTime<Utc>,
) {
    let max_unavailable = int_or_percent(
        &d["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"],
        want,
    );
    if available >= want - max_unavailable {
        set_condition(
            d,
            "Available",
            true,
            "MinimumReplicasAvailable",
            "Deployment has minimum availability.",
            now,
        );
    } else {
        set_condition(
            d,
            "Available",
            false,
            "MinimumReplicasUnavailable",
            "Deployment does not have minimum availability.",
            now,
        );
    }
    if rolled_out {
        set_condition(
            d,
            "Progressing",
            true,
            "NewReplicaSetAvailable",
            &format!("ReplicaSet \"{rs_name}\" has successfully progressed."),
            now,
        );
    } else {
        set_condition(
            d,
            "Progressing",
            true,
            "ReplicaSetUpdated",
            &format!("ReplicaSet \"{rs_name}\" is progressing."),
            now,
        );
    }
    let conditions = obj::array_mut(d, &["status", "conditions"]);
    conditions.sort_by_key(|c| c["type"] != "Available");
}

fn scale(
    cluster: &mut ClusterState,
    d: &Value,
    key: &ObjKey,
    rs: &Value,
    to: i64,
    now: DateTime<Utc>,
) {
    let from = rs["spec"]["replicas"].as_i64().unwrap_or_default();
    if from == to {
        return;
    }
    let Some(mut current) = cluster.store.get(key).cloned() else {
        return;
    };
    obj::set(&mut current, &["spec", "replicas"], json!(to));
    obj::set(
        &mut current,
        &[
            "metadata",
            "annotations",
            "deployment.kubernetes.io/desired-replicas",
        ],
        json!(replicas(&d["spec"]).to_string()),
    );
    cluster.store.update(key, current);
    let verb = if to > from { "up" } else { "down" };
    events::emit(
        &mut cluster.store,
        &Involved::new(d, "apps/v1", "Deployment"),
        Event::normal(
            "deployment-controller",
            "ScalingReplicaSet",
            format!("Scaled {verb} replica set {} from {from} to {to}", key.name),
        ),
        now,
    );
}

fn replicaset(cluster: &mut ClusterState, ctx: &SettleCtx<'_>, key: &ObjKey, mut rs: Value) {
    const COMPONENT: &str = "replicaset-controller";
    let now = ctx.now;
    let want = replicas(&rs["spec"]);
    let pods = owned(cluster, "", "pods", &key.namespace, "ReplicaSet", &rs);
    let mut live: Vec<&(ObjKey, Value)> = pods.iter().filter(|(_, p)| active(p)).collect();
    let have = live.len() as i64;
    if have < want {
        for _ in have..want {
            let name = obj::generate_name(&cluster.store, "", "pods", &key.namespace, &key.name);
            let mut pod = pod_from(
                &rs["spec"]["template"],
                &key.namespace,
                &name,
                obj::controller_ref(&rs, "apps/v1", "ReplicaSet"),
            );
            obj::set(
                &mut pod,
                &["metadata", "generateName"],
                json!(format!("{}-", key.name)),
            );
            let pod_key = ObjKey::new("", "pods", &key.namespace, &name);
            let owner = Involved::new(&rs, "apps/v1", "ReplicaSet");
            super::create_owned(
                cluster,
                pod_key,
                pod,
                &owner,
                COMPONENT,
                Some(format!("Created pod: {name}")),
                now,
            );
        }
    } else if have > want {
        // The least useful go first: unscheduled, then not running, then not ready, then the newest.
        live.sort_by_key(|(_, p)| {
            (
                p["spec"]["nodeName"].is_string(),
                p["status"]["phase"] == "Running",
                ready(p),
                std::cmp::Reverse(
                    p["metadata"]["creationTimestamp"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                ),
            )
        });
        let extra: Vec<ObjKey> = live
            .iter()
            .take(usize::try_from(have - want).unwrap_or_default())
            .map(|(k, _)| k.clone())
            .collect();
        let owner_copy = rs.clone();
        for k in extra {
            delete_pod(
                cluster,
                &Involved::new(&owner_copy, "apps/v1", "ReplicaSet"),
                COMPONENT,
                &k,
                now,
            );
        }
    }
    let pods = owned(cluster, "", "pods", &key.namespace, "ReplicaSet", &rs);
    let live: Vec<&Value> = pods.iter().map(|(_, p)| p).filter(|p| active(p)).collect();
    let ready_n = live.iter().filter(|p| ready(p)).count() as i64;
    let generation = rs["metadata"]["generation"].clone();
    let status = obj::obj_mut(&mut rs, &["status"]);
    status.insert("replicas".into(), json!(live.len()));
    status.insert("fullyLabeledReplicas".into(), json!(live.len()));
    status.insert("readyReplicas".into(), json!(ready_n));
    status.insert("availableReplicas".into(), json!(ready_n));
    status.insert("observedGeneration".into(), generation);
    cluster.store.update(key, rs);
}

/// Tolerations the DaemonSet controller adds so its pods run on troubled nodes too.
fn daemon_tolerations(spec: &mut Value) {
    let tolerations = obj::array_mut(spec, &["tolerations"]);
    for (k, effect) in [
        ("node.kubernetes.io/not-ready", "NoExecute"),
        ("node.kubernetes.io/unreachable", "NoExecute"),
        ("node.kubernetes.io/disk-pressure", "NoSchedule"),
        ("node.kubernetes.io/memory-pressure", "NoSchedule"),
        ("node.kubernetes.io/pid-pressure", "NoSchedule"),
        ("node.kubernetes.io/unschedulable", "NoSchedule"),
    ] {
        if !tolerations
            .iter()
            .any(|t| t["key"] == k && t["effect"] == effect)
        {
            tolerations.push(json!({"key": k, "operator": "Exists", "effect": effect}));
        }
    }
}

/// Whether a DaemonSet's pod belongs on the node.
fn eligible(spec: &Value, node: &Value) -> bool {
    obj::node_matches(spec, node)
        && obj::items(&node["spec"]["taints"]).iter().all(|t| {
            !matches!(t["effect"].as_str(), Some("NoSchedule" | "NoExecute"))
                || obj::tolerates(&spec["tolerations"], t)
        })
}

/// The node a DaemonSet pod is meant for (its node affinity, or where it runs).
fn target_node(pod: &Value) -> Option<String> {
    let terms = obj::at(
        &pod["spec"],
        &[
            "affinity",
            "nodeAffinity",
            "requiredDuringSchedulingIgnoredDuringExecution",
            "nodeSelectorTerms",
        ],
    );
    obj::items(terms)
        .iter()
        .flat_map(|t| obj::items(&t["matchFields"]))
        .find(|f| f["key"] == "metadata.name")
        .and_then(|f| f["values"][0].as_str())
        .or_else(|| pod["spec"]["nodeName"].as_str())
        .map(str::to_string)
}

fn daemonset(cluster: &mut ClusterState, ctx: &SettleCtx<'_>, key: &ObjKey, mut ds: Value) {
    const COMPONENT: &str = "daemonset-controller";
    let now = ctx.now;
    let hash = template_hash(&ds["spec"]["template"]);
    let mut spec = ds["spec"]["template"]["spec"].clone();
    daemon_tolerations(&mut spec);
    let nodes: Vec<String> = cluster
        .store
        .list("", "nodes", None)
        .into_iter()
        .filter(|(_, n)| eligible(&spec, n))
        .map(|(k, _)| k.name.clone())
        .collect();
    let pods = owned(cluster, "", "pods", &key.namespace, "DaemonSet", &ds);
    let mut by_node: BTreeMap<String, Vec<(ObjKey, Value)>> = BTreeMap::new();
    let mut doomed: Vec<ObjKey> = Vec::new();
    for (k, p) in pods.iter().filter(|(_, p)| !obj::deleting(p)) {
        if p["status"]["phase"] == "Failed" {
            doomed.push(k.clone());
            continue;
        }
        match target_node(p) {
            Some(n) if nodes.contains(&n) => {
                by_node.entry(n).or_default().push((k.clone(), p.clone()))
            }
            _ => doomed.push(k.clone()),
        }
    }
    for list in by_node.values() {
        doomed.extend(list.iter().skip(1).map(|(k, _)| k.clone()));
    }
    let unavailable = by_node
        .values()
        .filter(|l| l.first().is_none_or(|(_, p)| !ready(p)))
        .count()
        + nodes.iter().filter(|n| !by_node.contains_key(*n)).count();
    if unavailable == 0 {
        // Rolling update, one pod at a time.
        let outdated = by_node
            .values()
            .filter_map(|l| l.first())
            .find(|(_, p)| obj::label(p, "controller-revision-hash") != Some(hash.as_str()));
        if let Some((k, _)) = outdated {
            doomed.push(k.clone());
        }
    }
    let owner_copy = ds.clone();
    for k in &doomed {
        delete_pod(
            cluster,
            &Involved::new(&owner_copy, "apps/v1", "DaemonSet"),
            COMPONENT,
            k,
            now,
        );
    }
    let generation = ds["metadata"]["generation"].as_i64().unwrap_or(1);
    for node in nodes.iter().filter(|n| !by_node.contains_key(*n)) {
        let name = obj::generate_name(&cluster.store, "", "pods", &key.namespace, &key.name);
        let mut pod = pod_from(
            &ds["spec"]["template"],
            &key.namespace,
            &name,
            obj::controller_ref(&ds, "apps/v1", "DaemonSet"),
        );
        pod["spec"] = spec.clone();
        obj::set(
            &mut pod,
            &["metadata", "generateName"],
            json!(format!("{}-", key.name)),
        );
        obj::set(
            &mut pod,
            &["metadata", "labels", "controller-revision-hash"],
            json!(hash),
        );
        obj::set(
            &mut pod,
            &["metadata", "labels", "pod-template-generation"],
            json!(generation.to_string()),
        );
        obj::set(
            &mut pod,
            &[
                "spec",
                "affinity",
                "nodeAffinity",
                "requiredDuringSchedulingIgnoredDuringExecution",
            ],
            json!({"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}),
        );
        let pod_key = ObjKey::new("", "pods", &key.namespace, &name);
        let owner = Involved::new(&owner_copy, "apps/v1", "DaemonSet");
        super::create_owned(
            cluster,
            pod_key,
            pod,
            &owner,
            COMPONENT,
            Some(format!("Created pod: {name}")),
            now,
        );
    }
    let pods = owned(cluster, "", "pods", &key.namespace, "DaemonSet", &ds);
    let live: Vec<&Value> = pods.iter().map(|(_, p)| p).filter(|p| active(p)).collect();
    let (placed, misplaced): (Vec<&Value>, Vec<&Value>) = live
        .iter()
        .partition(|p| target_node(p).is_some_and(|n| nodes.contains(&n)));
    let scheduled: BTreeSet<String> = placed.iter().filter_map(|p| target_node(p)).collect();
    let ready_n = placed.iter().filter(|p| ready(p)).count() as i64;
    let updated = placed
        .iter()
        .filter(|p| obj::label(p, "controller-revision-hash") == Some(hash.as_str()))
        .count();
    let desired = nodes.len() as i64;
    let status = obj::obj_mut(&mut ds, &["status"]);
    status.insert("desiredNumberScheduled".into(), json!(desired));
    status.insert("currentNumberScheduled".into(), json!(scheduled.len()));
    status.insert("numberMisscheduled".into(), json!(misplaced.len()));
    status.insert("numberReady".into(), json!(ready_n));
    status.insert("updatedNumberScheduled".into(), json!(updated));
    if ready_n > 0 {
        status.insert("numberAvailable".into(), json!(ready_n));
    } else {
        status.remove("numberAvailable");
    }
    if desired - ready_n > 0 {
        status.insert("numberUnavailable".into(), json!(desired - ready_n));
    } else {
        status.remove("numberUnavailable");
    }
    status.insert("observedGeneration".into(), json!(generation));
    cluster.store.update(key, ds);
}

fn statefulset(cluster: &mut ClusterState, ctx: &SettleCtx<'_>, key: &ObjKey, mut sts: Value) {
    const COMPONENT: &str = "statefulset-controller";
    let now = ctx.now;
    let want = replicas(&sts["spec"]);
    let revision = format!("{}-{}", key.name, template_hash(&sts["spec"]["template"]));
    let ordered = sts["spec"]["podManagementPolicy"] != "Parallel";
    let ordinal = |k: &ObjKey| -> Option<i64> {
        k.name
            .strip_prefix(&format!("{}-", key.name))
            .and_then(|i| i.parse().ok())
    };
    let pods: BTreeMap<i64, (ObjKey, Value)> =
        owned(cluster, "", "pods", &key.namespace, "StatefulSet", &sts)
            .into_iter()
            .filter_map(|(k, p)| ordinal(&k).map(|i| (i, (k, p))))
            .collect();
    let owner_copy = sts.clone();
    let owner = Involved::new(&owner_copy, "apps/v1", "StatefulSet");
    let all_ready = pods.values().all(|(_, p)| active(p) && ready(p));
    let mut acted = false;
    for i in 0..want {
        match pods.get(&i) {
            Some((k, p))
                if matches!(p["status"]["phase"].as_str(), Some("Failed" | "Succeeded"))
                    && !obj::deleting(p) =>
            {
                delete_pod(cluster, &owner, COMPONENT, k, now);
                acted = true;
            }
            Some((_, p)) => {
                if ordered && !(active(p) && ready(p)) {
                    acted = true;
                }
            }
            None => {
                create_member(cluster, &owner_copy, key, i, &revision, now);
                acted = true;
            }
        }
        if ordered && acted {
            break;
        }
    }
    if !acted {
        // Scale down from the highest ordinal, then roll outdated pods the same way.
        let extra = pods
            .iter()
            .rev()
            .find(|(i, (_, p))| **i >= want && !obj::deleting(p));
        let outdated = pods.iter().rev().find(|(i, (_, p))| {
            **i < want
                && !obj::deleting(p)
                && obj::label(p, "controller-revision-hash") != Some(revision.as_str())
        });
        if let Some((_, (k, _))) = extra.or(if all_ready { outdated } else { None }) {
            delete_pod(cluster, &owner, COMPONENT, k, now);
        }
    }
    let pods = owned(cluster, "", "pods", &key.namespace, "StatefulSet", &sts);
    let live: Vec<&Value> = pods.iter().map(|(_, p)| p).filter(|p| active(p)).collect();
    let ready_n = live.iter().filter(|p| ready(p)).count() as i64;
    let updated = live
        .iter()
        .filter(|p| obj::label(p, "controller-revision-hash") == Some(revision.as_str()))
        .count() as i64;
    let generation = sts["metadata"]["generation"].clone();
    let current_revision = if updated == live.len() as i64 {
        json!(revision)
    } else {
        sts["status"]["currentRevision"].clone()
    };
    let status = obj::obj_mut(&mut sts, &["status"]);
    status.insert("observedGeneration".into(), generation);
    status.insert("replicas".into(), json!(live.len()));
    status.insert("readyReplicas".into(), json!(ready_n));
    status.insert("availableReplicas".into(), json!(ready_n));
    status.insert("currentReplicas".into(), json!(updated));
    status.insert("updatedReplicas".into(), json!(updated));
    if !current_revision.is_null() {
        status.insert("currentRevision".into(), current_revision);
    }
    status.insert("updateRevision".into(), json!(revision));
    status.insert("collisionCount".into(), json!(0));
    cluster.store.update(key, sts);
}

/// Pod `<name>-<i>` of a StatefulSet, with its claims from the claim templates.
fn create_member(
    cluster: &mut ClusterState,
    sts: &Value,
    key: &ObjKey,
    i: i64,
    revision: &str,
    now: DateTime<Utc>,
) {
    const COMPONENT: &str = "statefulset-controller";
    let name = format!("{}-{i}", key.name);
    let owner = Involved::new(sts, "apps/v1", "StatefulSet");
    let mut pod = pod_from(
        &sts["spec"]["template"],
        &key.namespace,
        &name,
        obj::controller_ref(sts, "apps/v1", "StatefulSet"),
    );
    for (k, v) in [
        ("statefulset.kubernetes.io/pod-name", name.clone()),
        ("apps.kubernetes.io/pod-index", i.to_string()),
        ("controller-revision-hash", revision.to_string()),
    ] {
        obj::set(&mut pod, &["metadata", "labels", k], json!(v));
    }
    obj::set(&mut pod, &["spec", "hostname"], json!(name));
    if let Some(svc) = sts["spec"]["serviceName"].as_str() {
        obj::set(&mut pod, &["spec", "subdomain"], json!(svc));
    }
    for tpl in obj::items(&sts["spec"]["volumeClaimTemplates"]) {
        let tpl_name = obj::name(tpl).to_string();
        let claim = format!("{tpl_name}-{name}");
        let claim_key = ObjKey::new("", "persistentvolumeclaims", &key.namespace, &claim);
        if cluster.store.get(&claim_key).is_none() {
            let mut pvc = json!({
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": claim, "namespace": key.namespace, "labels": sts["spec"]["selector"]["matchLabels"].clone()},
                "spec": tpl["spec"].clone(),
            });
            if let Some(labels) = tpl["metadata"]["labels"].as_object() {
                for (k, v) in labels {
                    obj::set(&mut pvc, &["metadata", "labels", k], v.clone());
                }
            }
            let message = format!(
                "create Claim {claim} Pod {name} in StatefulSet {} success",
                key.name
            );
            super::create_owned(
                cluster,
                claim_key,
                pvc,
                &owner,
                COMPONENT,
                Some(message),
                now,
            );
        }
        let volumes = obj::array_mut(&mut pod, &["spec", "volumes"]);
        volumes.retain(|v| v["name"] != tpl_name.as_str());
        volumes.push(json!({"name": tpl_name, "persistentVolumeClaim": {"claimName": claim}}));
    }
    let pod_key = ObjKey::new("", "pods", &key.namespace, &name);
    let message = format!("create Pod {name} in StatefulSet {} successful", key.name);
    super::create_owned(cluster, pod_key, pod, &owner, COMPONENT, Some(message), now);
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{self, Harness};
    use super::*;

    fn deployment(name: &str, replicas: i64, image: &str) -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": name}},
                "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "web", "image": image}]}},
            },
        })
    }

    #[test]
    fn a_deployment_runs_its_replicas_and_rolls_a_new_template() {
        let mut h = Harness::standard(vec![testkit::pool("default-pool", 2, 2)]);
        h.create(
            "apps",
            "deployments",
            "default",
            deployment("web", 3, "nginx:1.27"),
        );
        h.run_for(5.0);
        let sets = h.list("apps", "replicasets", "default");
        assert_eq!(sets.len(), 1);
        let rs_name = obj::name(&sets[0]).to_string();
        let hash = obj::label(&sets[0], HASH_LABEL)
            .expect("pod-template-hash label")
            .to_string();
        assert_eq!(rs_name, format!("web-{hash}"));
        let pods = h.list("", "pods", "default");
        assert_eq!(pods.len(), 3);
        assert!(pods.iter().all(|p| p["status"]["phase"] == "Running"
            && obj::label(p, HASH_LABEL) == Some(hash.as_str())));
        let d = h.get("apps", "deployments", "default", "web");
        assert_eq!(d["status"]["readyReplicas"], 3, "{}", d["status"]);
        assert_eq!(d["status"]["availableReplicas"], 3);
        assert_eq!(d["status"]["updatedReplicas"], 3);
        assert_eq!(d["status"]["conditions"][0]["type"], "Available");
        assert_eq!(d["status"]["conditions"][0]["status"], "True");
        assert_eq!(
            d["status"]["conditions"][1]["reason"],
            "NewReplicaSetAvailable"
        );
        assert!(h
            .reasons("default", "web")
            .contains(&"ScalingReplicaSet".to_string()));

        let mut d = h.get("apps", "deployments", "default", "web");
        d["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:1.28");
        h.put("apps", "deployments", "default", d);
        h.run_for(10.0);
        let sets = h.list("apps", "replicasets", "default");
        assert_eq!(sets.len(), 2);
        let new = sets
            .iter()
            .find(|rs| obj::name(rs) != rs_name)
            .expect("a new replica set");
        assert_eq!(new["spec"]["replicas"], 3);
        assert_eq!(obj::annotation(new, REVISION), Some("2"));
        let old = sets
            .iter()
            .find(|rs| obj::name(rs) == rs_name)
            .expect("the old replica set");
        assert_eq!(old["spec"]["replicas"], 0);
        let live: Vec<Value> = h
            .list("", "pods", "default")
            .into_iter()
            .filter(active)
            .collect();
        assert_eq!(live.len(), 3);
        assert!(live
            .iter()
            .all(|p| p["spec"]["containers"][0]["image"] == "nginx:1.28"));
    }

    #[test]
    fn a_replicaset_replaces_deleted_pods_and_scales_down() {
        let mut h = Harness::standard(vec![testkit::pool("default-pool", 1, 1)]);
        h.create("apps", "replicasets", "default", json!({
            "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "rs"},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"a": "b"}},
                     "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}},
        }));
        h.run_for(5.0);
        let first = obj::name(&h.list("", "pods", "default")[0]).to_string();
        h.delete("", "pods", "default", &first);
        h.run_for(5.0);
        let names = h.names("", "pods", "default");
        assert_eq!(names.len(), 2, "{names:?}");
        assert!(!names.contains(&first));
        let mut rs = h.get("apps", "replicasets", "default", "rs");
        rs["spec"]["replicas"] = json!(1);
        h.put("apps", "replicasets", "default", rs);
        h.run_for(5.0);
        assert_eq!(h.names("", "pods", "default").len(), 1);
        assert_eq!(
            h.get("apps", "replicasets", "default", "rs")["status"]["readyReplicas"],
            1
        );
    }

    #[test]
    fn a_daemonset_runs_on_every_matching_node() {
        let mut h = Harness::standard(vec![
            testkit::pool("default-pool", 2, 2),
            testkit::gpu_pool("gpu", 1, 1),
        ]);
        h.settle();
        h.create("apps", "daemonsets", "kube-system", json!({
            "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "nvidia-driver-installer"},
            "spec": {"selector": {"matchLabels": {"k8s-app": "nvidia"}},
                     "template": {"metadata": {"labels": {"k8s-app": "nvidia"}},
                                  "spec": {"nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-l4"},
                                           "tolerations": [{"operator": "Exists"}],
                                           "containers": [{"name": "pause", "image": "gcr.io/google-containers/pause:2.0"}]}}},
        }));
        h.create(
            "apps",
            "daemonsets",
            "kube-system",
            json!({
                "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent"},
                "spec": {"selector": {"matchLabels": {"app": "agent"}},
                         "template": {"metadata": {"labels": {"app": "agent"}},
                                      "spec": {"containers": [{"name": "a", "image": "agent"}]}}},
            }),
        );
        h.run_for(5.0);
        let gpu = h.get(
            "apps",
            "daemonsets",
            "kube-system",
            "nvidia-driver-installer",
        );
        assert_eq!(gpu["status"]["desiredNumberScheduled"], 1);
        assert_eq!(gpu["status"]["numberReady"], 1);
        let agent = h.get("apps", "daemonsets", "kube-system", "agent");
        assert_eq!(
            agent["status"]["desiredNumberScheduled"], 2,
            "the GPU node's taint keeps the agent off"
        );
        assert_eq!(agent["status"]["numberReady"], 2);
        let nodes: BTreeSet<String> = h
            .list("", "pods", "kube-system")
            .iter()
            .filter(|p| obj::label(p, "app") == Some("agent"))
            .filter_map(|p| p["spec"]["nodeName"].as_str().map(str::to_string))
            .collect();
        assert_eq!(nodes.len(), 2, "one agent per node");
    }

    #[test]
    fn a_statefulset_starts_its_pods_in_order_with_claims() {
        let mut h = Harness::standard(vec![testkit::pool("default-pool", 1, 1)]);
        h.create(
            "",
            "persistentvolumes",
            "",
            testkit::nfs_pv("pv-a", "10.0.0.2", "/a", "1Gi"),
        );
        h.create(
            "",
            "persistentvolumes",
            "",
            testkit::nfs_pv("pv-b", "10.0.0.2", "/b", "1Gi"),
        );
        h.create("apps", "statefulsets", "default", json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
            "spec": {"replicas": 2, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
                     "template": {"metadata": {"labels": {"app": "db"}}, "spec": {"containers": [{"name": "db", "image": "x"}]}},
                     "volumeClaimTemplates": [{"metadata": {"name": "data"},
                        "spec": {"storageClassName": "", "accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}}]},
        }));
        h.settle();
        assert_eq!(
            h.names("", "pods", "default"),
            vec!["db-0"],
            "one at a time"
        );
        h.run_for(10.0);
        assert_eq!(h.names("", "pods", "default"), vec!["db-0", "db-1"]);
        assert_eq!(
            h.names("", "persistentvolumeclaims", "default"),
            vec!["data-db-0", "data-db-1"]
        );
        let sts = h.get("apps", "statefulsets", "default", "db");
        assert_eq!(sts["status"]["readyReplicas"], 2, "{}", sts["status"]);
        assert_eq!(
            h.get("", "pods", "default", "db-1")["spec"]["hostname"],
            "db-1"
        );
    }

    #[test]
    fn template_hashes_ignore_field_order() {
        let a = json!({"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {}});
        let b = json!({"spec": {}, "metadata": {"labels": {"b": "2", "a": "1"}}});
        assert_eq!(template_hash(&a), template_hash(&b));
        assert_ne!(template_hash(&a), template_hash(&json!({})));
    }
}
