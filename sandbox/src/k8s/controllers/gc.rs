//! The garbage collector and the namespace controller: dependents whose owners are gone
//! are deleted (background), owners deleted in the foreground wait for their dependents,
//! orphaning owners let go of theirs; a namespace being deleted empties itself and goes.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use crate::k8s::obj;
use crate::k8s::store::ObjKey;
use crate::k8s::{ClusterState, SettleCtx};

const FOREGROUND: &str = "foregroundDeletion";
const ORPHAN: &str = "orphan";

pub(super) fn namespaces(cluster: &mut ClusterState, ctx: &SettleCtx<'_>) {
    let now = ctx.now;
    let namespaces = obj::list(&cluster.store, "", "namespaces", None);
    let names: BTreeSet<String> = namespaces.iter().map(|(k, _)| k.name.clone()).collect();
    let keys = cluster.store.keys();
    for (key, mut ns) in namespaces {
        if !obj::deleting(&ns) {
            continue;
        }
        let inside: Vec<&ObjKey> = keys.iter().filter(|k| k.namespace == key.name).collect();
        if inside.is_empty() {
            // Empty: the namespace controller's finalizer is done.
            obj::array_mut(&mut ns, &["spec", "finalizers"]).retain(|f| f != "kubernetes");
            obj::remove_finalizer(&mut ns, "kubernetes");
            if obj::items(&ns["spec"]["finalizers"]).is_empty()
                && obj::items(&ns["metadata"]["finalizers"]).is_empty()
            {
                cluster.store.remove(&key);
            } else {
                cluster.store.update(&key, ns);
            }
            continue;
        }
        if ns["status"]["phase"] != "Terminating" {
            obj::set(&mut ns, &["status", "phase"], json!("Terminating"));
            cluster.store.update(&key, ns);
        }
        for k in inside {
            if cluster.store.get(k).is_some_and(|o| !obj::deleting(o)) {
                cluster.store.delete(k, now);
            }
        }
    }
    // A namespace removed outright (without passing through Terminating) leaves its
    // objects behind; they go the same way. Only where namespaces are managed at all.
    if !names.is_empty() {
        for k in keys
            .iter()
            .filter(|k| !k.namespace.is_empty() && !names.contains(&k.namespace))
        {
            if cluster.store.get(k).is_some_and(|o| !obj::deleting(o)) {
                cluster.store.delete(k, now);
            }
        }
    }
}

pub(super) fn collect(cluster: &mut ClusterState, ctx: &SettleCtx<'_>) {
    // A few rounds, so chains (Deployment → ReplicaSet → Pod) unwind in one settle.
    for _ in 0..4 {
        if !collect_once(cluster, ctx.now) {
            break;
        }
    }
    expire_events(cluster, ctx.now);
}

/// Events live an hour after they last happened, as the API server's event TTL has it.
fn expire_events(cluster: &mut ClusterState, now: DateTime<Utc>) {
    let ttl = chrono::Duration::hours(1);
    let old: Vec<ObjKey> = cluster
        .store
        .list("", "events", None)
        .into_iter()
        .filter(|(_, e)| obj::parse_time(&e["lastTimestamp"]).is_some_and(|t| t + ttl < now))
        .map(|(k, _)| k.clone())
        .collect();
    for key in old {
        cluster.store.remove(&key);
    }
}

/// One garbage-collector sweep; true when it changed something.
fn collect_once(cluster: &mut ClusterState, now: DateTime<Utc>) -> bool {
    let mut owners: BTreeMap<String, ObjKey> = BTreeMap::new();
    let mut dependents: Vec<(ObjKey, Value)> = Vec::new();
    for key in cluster.store.keys() {
        let Some(o) = cluster.store.get(&key) else {
            continue;
        };
        owners.insert(obj::uid(o).to_string(), key.clone());
        if !obj::items(&o["metadata"]["ownerReferences"]).is_empty() {
            dependents.push((key, o.clone()));
        }
    }
    let owner = |uid: &str| owners.get(uid).and_then(|k| cluster.store.get(k));
    let mut has_dependents: BTreeSet<String> = BTreeSet::new();
    for (_, d) in &dependents {
        for r in obj::items(&d["metadata"]["ownerReferences"]) {
            has_dependents.insert(r["uid"].as_str().unwrap_or_default().to_string());
        }
    }
    let mut changed = false;
    let mut deletions: Vec<(ObjKey, bool)> = Vec::new();
    let mut rewrites: Vec<(ObjKey, Value)> = Vec::new();
    for (key, d) in &dependents {
        let refs = obj::items(&d["metadata"]["ownerReferences"]);
        let mut keep = Vec::new();
        let mut foreground = false;
        for r in refs {
            let uid = r["uid"].as_str().unwrap_or_default();
            match owner(uid) {
                None => {}
                Some(o) if obj::deleting(o) && obj::has_finalizer(o, ORPHAN) => {}
                Some(o) => {
                    foreground |= obj::deleting(o) && obj::has_finalizer(o, FOREGROUND);
                    keep.push(r.clone());
                }
            }
        }
        if keep.is_empty() {
            // Orphaned refs removed but nothing left to own it: it goes only when
            // every owner vanished (not when owners orphaned it).
            let orphaned = refs
                .iter()
                .any(|r| owner(r["uid"].as_str().unwrap_or_default()).is_some());
            if orphaned {
                let mut updated = d.clone();
                obj::remove(&mut updated, &["metadata", "ownerReferences"]);
                rewrites.push((key.clone(), updated));
            } else if !obj::deleting(d) {
                deletions.push((key.clone(), false));
            }
            continue;
        }
        if keep.len() != refs.len() {
            let mut updated = d.clone();
            obj::set(&mut updated, &["metadata", "ownerReferences"], json!(keep));
            rewrites.push((key.clone(), updated));
        }
        if foreground && !obj::deleting(d) {
            deletions.push((key.clone(), has_dependents.contains(obj::uid(d))));
        }
    }
    for (key, updated) in rewrites {
        cluster.store.update(&key, updated);
        changed = true;
    }
    for (key, cascade) in deletions {
        if cascade {
            // Deleted in the foreground like its owner: its own dependents go first.
            if let Some(mut o) = cluster.store.get(&key).cloned() {
                obj::add_finalizer(&mut o, FOREGROUND);
                cluster.store.update(&key, o);
            }
        }
        cluster.store.delete(&key, now);
        changed = true;
    }
    // Owners waiting on dependents: done once nothing refers to them.
    let referenced: BTreeSet<String> = cluster
        .store
        .keys()
        .iter()
        .filter_map(|k| cluster.store.get(k))
        .flat_map(|o| {
            obj::items(&o["metadata"]["ownerReferences"])
                .iter()
                .filter(|r| r["blockOwnerDeletion"] == true || r["controller"] == true)
                .filter_map(|r| r["uid"].as_str().map(str::to_string))
                .collect::<Vec<_>>()
        })
        .collect();
    for key in cluster.store.keys() {
        let Some(o) = cluster.store.get(&key) else {
            continue;
        };
        if !obj::deleting(o) || referenced.contains(obj::uid(o)) {
            continue;
        }
        if obj::has_finalizer(o, FOREGROUND) || obj::has_finalizer(o, ORPHAN) {
            let mut o = o.clone();
            obj::remove_finalizer(&mut o, FOREGROUND);
            obj::remove_finalizer(&mut o, ORPHAN);
            cluster.store.update(&key, o);
            changed = true;
        }
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{self, Harness};
    use super::*;

    fn deployment() -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}},
        })
    }

    fn running_deployment() -> Harness {
        let mut h = Harness::standard(vec![testkit::pool("default-pool", 1, 1)]);
        h.create("apps", "deployments", "default", deployment());
        h.run_for(5.0);
        assert_eq!(h.names("", "pods", "default").len(), 2);
        h
    }

    #[test]
    fn background_deletion_removes_dependents_after_the_owner() {
        let mut h = running_deployment();
        h.delete("apps", "deployments", "default", "web");
        assert!(
            !h.exists("apps", "deployments", "default", "web"),
            "no finalizer: gone at once"
        );
        h.run_for(5.0);
        assert!(h.names("apps", "replicasets", "default").is_empty());
        assert!(h.names("", "pods", "default").is_empty());
    }

    #[test]
    fn foreground_deletion_waits_for_dependents() {
        let mut h = running_deployment();
        let mut d = h.get("apps", "deployments", "default", "web");
        obj::add_finalizer(&mut d, FOREGROUND);
        h.put("apps", "deployments", "default", d);
        h.delete("apps", "deployments", "default", "web");
        h.settle();
        assert!(
            h.exists("apps", "deployments", "default", "web"),
            "held while pods terminate"
        );
        assert!(obj::deleting(&h.get(
            "apps",
            "replicasets",
            "default",
            &h.names("apps", "replicasets", "default")[0]
        )));
        h.run_for(5.0);
        assert!(!h.exists("apps", "deployments", "default", "web"));
        assert!(h.names("", "pods", "default").is_empty());
    }

    #[test]
    fn orphan_deletion_keeps_dependents_without_owners() {
        let mut h = running_deployment();
        let mut d = h.get("apps", "deployments", "default", "web");
        obj::add_finalizer(&mut d, ORPHAN);
        h.put("apps", "deployments", "default", d);
        h.delete("apps", "deployments", "default", "web");
        h.run_for(3.0);
        assert!(!h.exists("apps", "deployments", "default", "web"));
        let sets = h.list("apps", "replicasets", "default");
        assert_eq!(sets.len(), 1);
        assert!(
            sets[0]["metadata"]["ownerReferences"].is_null(),
            "{}",
            sets[0]["metadata"]
        );
        assert_eq!(h.names("", "pods", "default").len(), 2);
    }

    #[test]
    fn a_deleted_namespace_empties_then_goes() {
        let mut h = Harness::standard(vec![testkit::pool("default-pool", 1, 1)]);
        h.create(
            "",
            "namespaces",
            "",
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}),
        );
        h.create(
            "",
            "configmaps",
            "team",
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}}),
        );
        h.create("", "pods", "team", json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                                             "spec": {"containers": [{"name": "c", "image": "nginx"}]}}));
        h.run_for(4.0);
        h.delete("", "namespaces", "", "team");
        h.settle();
        assert_eq!(
            h.get("", "namespaces", "", "team")["status"]["phase"],
            "Terminating"
        );
        assert!(!h.exists("", "configmaps", "team", "cfg"));
        h.run_for(4.0);
        assert!(h.names("", "pods", "team").is_empty());
        assert!(!h.exists("", "namespaces", "", "team"));
    }

    #[test]
    fn events_expire_after_an_hour() {
        let mut h = running_deployment();
        assert!(!h.names("", "events", "default").is_empty());
        h.advance(3500.0);
        assert!(!h.names("", "events", "default").is_empty());
        h.advance(200.0);
        assert!(h.names("", "events", "default").is_empty());
    }

    #[test]
    fn objects_of_a_vanished_namespace_are_swept() {
        let mut h = Harness::standard(vec![]);
        h.create(
            "",
            "namespaces",
            "",
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gone"}}),
        );
        h.create(
            "",
            "configmaps",
            "gone",
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}}),
        );
        h.cluster
            .store
            .remove(&ObjKey::new("", "namespaces", "", "gone"));
        h.settle();
        assert!(!h.exists("", "configmaps", "gone", "cfg"));
        assert!(h.exists("", "namespaces", "", "default"));
    }
}
