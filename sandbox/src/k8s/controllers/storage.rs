//! The persistent-volume controller: claims bind to matching volumes (or to volumes a
//! storage class's provisioner makes for them), released volumes are kept or deleted
//! by their reclaim policy, and the protection finalizers hold claims that pods use and
//! volumes that claims hold.

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use super::events::{self, Event, Involved};
use super::{base, scaled};
use crate::k8s::obj::{self, ts};
use crate::k8s::store::ObjKey;
use crate::k8s::{ClusterState, SettleCtx};

const CONTROLLER: &str = "persistentvolume-controller";
pub(crate) const PVC_PROTECTION: &str = "kubernetes.io/pvc-protection";
pub(crate) const PV_PROTECTION: &str = "kubernetes.io/pv-protection";

fn pvc_key(namespace: &str, name: &str) -> ObjKey {
    ObjKey::new("", "persistentvolumeclaims", namespace, name)
}

fn pv_key(name: &str) -> ObjKey {
    ObjKey::new("", "persistentvolumes", "", name)
}

fn class_of(v: &Value) -> &str {
    v["spec"]["storageClassName"].as_str().unwrap_or_default()
}

fn storage_class<'a>(cluster: &'a ClusterState, name: &str) -> Option<&'a Value> {
    cluster
        .store
        .get(&ObjKey::new("storage.k8s.io", "storageclasses", "", name))
}

/// Whether an unbound claim waits for a pod before its volume is made.
pub(super) fn waits_for_consumer(cluster: &ClusterState, pvc: &Value) -> bool {
    let class = class_of(pvc);
    !class.is_empty()
        && storage_class(cluster, class)
            .is_some_and(|sc| sc["volumeBindingMode"] == "WaitForFirstConsumer")
}

fn claimed_by(pv: &Value) -> Option<(&str, &str)> {
    let r = &pv["spec"]["claimRef"];
    Some((r["namespace"].as_str()?, r["name"].as_str()?))
}

/// Sets a claim's or volume's phase; volumes also note when it changed.
fn set_phase(object: &mut Value, phase: &str, now: DateTime<Utc>) {
    if object["status"]["phase"] != phase {
        obj::set(object, &["status", "phase"], json!(phase));
        if object["spec"]
            .get("persistentVolumeReclaimPolicy")
            .is_some()
        {
            obj::set(object, &["status", "lastPhaseTransitionTime"], ts(now));
        }
    }
}

/// Whether a volume can serve a claim (class, mode, access modes, size, selector).
fn matches(pv: &Value, pvc: &Value) -> bool {
    let modes = |v: &Value| -> Vec<String> {
        obj::items(&v["spec"]["accessModes"])
            .iter()
            .filter_map(|m| m.as_str().map(str::to_string))
            .collect()
    };
    let pv_modes = modes(pv);
    let mode = |v: &Value| {
        v["spec"]["volumeMode"]
            .as_str()
            .unwrap_or("Filesystem")
            .to_string()
    };
    class_of(pv) == class_of(pvc)
        && mode(pv) == mode(pvc)
        && modes(pvc).iter().all(|m| pv_modes.contains(m))
        && obj::storage_bytes(&pv["spec"]["capacity"]["storage"])
            >= obj::storage_bytes(&pvc["spec"]["resources"]["requests"]["storage"])
        && (pvc["spec"]["selector"].is_null()
            || obj::selector_matches(&pvc["spec"]["selector"], &pv["metadata"]["labels"]))
}

pub(super) fn bind(cluster: &mut ClusterState, ctx: &SettleCtx<'_>) {
    let now = ctx.now;
    // Volumes first: free ones are Available, ones whose claim went are released.
    for (key, mut pv) in obj::list(&cluster.store, "", "persistentvolumes", None) {
        if obj::deleting(&pv) {
            continue;
        }
        let Some((ns, name)) = claimed_by(&pv).map(|(n, c)| (n.to_string(), c.to_string())) else {
            set_phase(&mut pv, "Available", now);
            cluster.store.update(&key, pv);
            continue;
        };
        let claim = cluster.store.get(&pvc_key(&ns, &name));
        let uid = pv["spec"]["claimRef"]["uid"].as_str();
        let claim_alive = claim.is_some_and(|c| uid.is_none_or(|u| u == obj::uid(c)));
        if claim_alive || pv["status"]["phase"] != "Bound" {
            if !claim_alive && pv["status"]["phase"] != "Released" {
                // Pre-bound to a claim that does not exist (yet).
                set_phase(&mut pv, "Available", now);
                cluster.store.update(&key, pv);
            }
            continue;
        }
        match pv["spec"]["persistentVolumeReclaimPolicy"].as_str() {
            Some("Delete") => {
                cluster.store.delete(&key, now);
            }
            Some("Recycle") => {
                obj::remove(&mut pv, &["spec", "claimRef"]);
                set_phase(&mut pv, "Available", now);
                cluster.store.update(&key, pv);
            }
            _ => {
                set_phase(&mut pv, "Released", now);
                cluster.store.update(&key, pv);
            }
        }
    }
    for (key, pvc) in obj::list(&cluster.store, "", "persistentvolumeclaims", None) {
        if obj::deleting(&pvc) {
            continue;
        }
        if pvc["status"]["phase"] == "Bound" {
            check_bound(cluster, &key, pvc, now);
        } else {
            bind_claim(cluster, ctx, &key, pvc);
        }
    }
}

/// A bound claim whose volume vanished is Lost.
fn check_bound(cluster: &mut ClusterState, key: &ObjKey, mut pvc: Value, now: DateTime<Utc>) {
    let volume = pvc["spec"]["volumeName"].as_str().unwrap_or_default();
    if cluster.store.get(&pv_key(volume)).is_some() {
        return;
    }
    set_phase(&mut pvc, "Lost", now);
    let pvc = cluster.store.update(key, pvc);
    events::emit(
        &mut cluster.store,
        &Involved::new(&pvc, "v1", "PersistentVolumeClaim"),
        Event::warning(
            CONTROLLER,
            "ClaimLost",
            "Bound claim has lost its PersistentVolume. Data on the volume is lost!",
        ),
        now,
    );
}

fn bind_claim(cluster: &mut ClusterState, ctx: &SettleCtx<'_>, key: &ObjKey, mut pvc: Value) {
    let now = ctx.now;
    let uid = obj::uid(&pvc).to_string();
    let wants_volume = pvc["spec"]["volumeName"].as_str().map(str::to_string);
    let volumes = obj::list(&cluster.store, "", "persistentvolumes", None);
    let is_mine = |pv: &Value| {
        claimed_by(pv) == Some((key.namespace.as_str(), key.name.as_str()))
            && pv["spec"]["claimRef"]["uid"]
                .as_str()
                .is_none_or(|u| u == uid)
    };
    let chosen = match &wants_volume {
        Some(v) => volumes
            .iter()
            .find(|(k, pv)| k.name == *v && (claimed_by(pv).is_none() || is_mine(pv))),
        None => volumes
            .iter()
            .find(|(_, pv)| !obj::deleting(pv) && is_mine(pv))
            .or_else(|| {
                let mut free: Vec<&(ObjKey, Value)> = volumes
                    .iter()
                    .filter(|(_, pv)| {
                        !obj::deleting(pv) && claimed_by(pv).is_none() && matches(pv, &pvc)
                    })
                    .collect();
                free.sort_by(|(_, a), (_, b)| {
                    obj::storage_bytes(&a["spec"]["capacity"]["storage"])
                        .total_cmp(&obj::storage_bytes(&b["spec"]["capacity"]["storage"]))
                });
                free.first().copied()
            }),
    }
    .cloned();
    let Some((pv_key_, mut pv)) = chosen else {
        set_phase(&mut pvc, "Pending", now);
        let pvc = cluster.store.update(key, pvc);
        if wants_volume.is_none() {
            no_volume(cluster, ctx, key, &pvc);
        }
        return;
    };
    if claimed_by(&pv).is_none() {
        obj::set(
            &mut pv,
            &[
                "metadata",
                "annotations",
                "pv.kubernetes.io/bound-by-controller",
            ],
            json!("yes"),
        );
    }
    obj::set(
        &mut pv,
        &["spec", "claimRef"],
        json!({
            "kind": "PersistentVolumeClaim", "namespace": key.namespace, "name": key.name, "uid": uid,
            "apiVersion": "v1", "resourceVersion": pvc["metadata"]["resourceVersion"].clone(),
        }),
    );
    set_phase(&mut pv, "Bound", now);
    cluster.store.update(&pv_key_, pv.clone());
    if wants_volume.is_none() {
        obj::set(
            &mut pvc,
            &[
                "metadata",
                "annotations",
                "pv.kubernetes.io/bound-by-controller",
            ],
            json!("yes"),
        );
    }
    obj::set(
        &mut pvc,
        &["metadata", "annotations", "pv.kubernetes.io/bind-completed"],
        json!("yes"),
    );
    obj::set(&mut pvc, &["spec", "volumeName"], json!(pv_key_.name));
    obj::set(
        &mut pvc,
        &["status", "accessModes"],
        pv["spec"]["accessModes"].clone(),
    );
    obj::set(
        &mut pvc,
        &["status", "capacity"],
        pv["spec"]["capacity"].clone(),
    );
    set_phase(&mut pvc, "Bound", now);
    cluster.store.update(key, pvc);
}

/// No volume fits: a storage class's provisioner makes one, or the claim waits and says why.
fn no_volume(cluster: &mut ClusterState, ctx: &SettleCtx<'_>, key: &ObjKey, pvc: &Value) {
    let now = ctx.now;
    let class = class_of(pvc).to_string();
    let involved = Involved::new(pvc, "v1", "PersistentVolumeClaim");
    if class.is_empty() {
        events::emit_once(
            &mut cluster.store,
            &involved,
            Event::normal(
                CONTROLLER,
                "FailedBinding",
                "no persistent volumes available for this claim and no storage class is set",
            ),
            now,
        );
        return;
    }
    let Some(sc) = storage_class(cluster, &class).cloned() else {
        events::emit_once(
            &mut cluster.store,
            &involved,
            Event::warning(
                CONTROLLER,
                "ProvisioningFailed",
                format!("storageclass.storage.k8s.io \"{class}\" not found"),
            ),
            now,
        );
        return;
    };
    let provisioner = sc["provisioner"].as_str().unwrap_or_default().to_string();
    if sc["volumeBindingMode"] == "WaitForFirstConsumer" && !used_by_pod(cluster, key) {
        events::emit_once(
            &mut cluster.store,
            &involved,
            Event::normal(
                CONTROLLER,
                "WaitForFirstConsumer",
                "waiting for first consumer to be created before binding",
            ),
            now,
        );
        return;
    }
    let message = format!(
        "Waiting for a volume to be created either by the external provisioner '{provisioner}' or manually by the system administrator. If volume creation is delayed, please verify that the provisioner is running and correctly registered."
    );
    events::emit_once(
        &mut cluster.store,
        &involved,
        Event::normal(CONTROLLER, "ExternalProvisioning", message),
        now,
    );
    let since = obj::parse_time(&pvc["metadata"]["creationTimestamp"]).unwrap_or(now);
    if since + scaled(ctx, base::PROVISION) > now {
        return;
    }
    let name = format!("pvc-{}", obj::uid(pvc));
    if cluster.store.get(&pv_key(&name)).is_some() {
        return;
    }
    let pv = obj::compact(json!({
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {
            "name": name,
            "annotations": {"pv.kubernetes.io/provisioned-by": provisioner},
            "finalizers": [PV_PROTECTION],
        },
        "spec": {
            "accessModes": pvc["spec"]["accessModes"].clone(),
            "capacity": {"storage": pvc["spec"]["resources"]["requests"]["storage"].clone()},
            "claimRef": {"kind": "PersistentVolumeClaim", "namespace": key.namespace, "name": key.name,
                         "uid": obj::uid(pvc), "apiVersion": "v1"},
            "csi": {"driver": provisioner, "volumeHandle": name, "fsType": "ext4"},
            "persistentVolumeReclaimPolicy": sc["reclaimPolicy"].as_str().unwrap_or("Delete"),
            "storageClassName": class,
            "volumeMode": pvc["spec"]["volumeMode"].as_str().unwrap_or("Filesystem"),
        },
        "status": {"phase": "Bound", "lastPhaseTransitionTime": ts(now)},
    }));
    cluster.store.insert_new(pv_key(&name), pv, now);
    let mut annotated = pvc.clone();
    for k in [
        "volume.beta.kubernetes.io/storage-provisioner",
        "volume.kubernetes.io/storage-provisioner",
    ] {
        obj::set(
            &mut annotated,
            &["metadata", "annotations", k],
            json!(provisioner),
        );
    }
    let annotated = cluster.store.update(key, annotated);
    // The external provisioner reports under its own name.
    let component = if provisioner.is_empty() {
        CONTROLLER
    } else {
        provisioner.as_str()
    };
    events::emit(
        &mut cluster.store,
        &Involved::new(&annotated, "v1", "PersistentVolumeClaim"),
        Event::normal(
            component,
            "ProvisioningSucceeded",
            format!("Successfully provisioned volume {name}"),
        ),
        now,
    );
    bind_claim(cluster, ctx, key, annotated);
}

/// Whether a pod that is not finished mounts the claim.
fn used_by_pod(cluster: &ClusterState, claim: &ObjKey) -> bool {
    cluster
        .store
        .list("", "pods", Some(&claim.namespace))
        .iter()
        .any(|(_, p)| {
            !matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed"))
                && obj::items(&p["spec"]["volumes"])
                    .iter()
                    .any(|v| v["persistentVolumeClaim"]["claimName"] == claim.name.as_str())
        })
}

/// The protection finalizers: a claim goes once no running pod uses it, a volume once no
/// claim holds it.
pub(super) fn protect(cluster: &mut ClusterState, _ctx: &SettleCtx<'_>) {
    for (key, mut pvc) in obj::list(&cluster.store, "", "persistentvolumeclaims", None) {
        if obj::deleting(&pvc)
            && obj::has_finalizer(&pvc, PVC_PROTECTION)
            && !used_by_pod(cluster, &key)
        {
            obj::remove_finalizer(&mut pvc, PVC_PROTECTION);
            cluster.store.update(&key, pvc);
        }
    }
    for (key, mut pv) in obj::list(&cluster.store, "", "persistentvolumes", None) {
        if !obj::deleting(&pv) || !obj::has_finalizer(&pv, PV_PROTECTION) {
            continue;
        }
        let held = claimed_by(&pv).is_some_and(|(ns, name)| {
            cluster.store.get(&pvc_key(ns, name)).is_some_and(|c| {
                c["spec"]["volumeName"] == key.name.as_str()
                    && pv["spec"]["claimRef"]["uid"]
                        .as_str()
                        .is_none_or(|u| u == obj::uid(c))
            })
        });
        if !held {
            obj::remove_finalizer(&mut pv, PV_PROTECTION);
            cluster.store.update(&key, pv);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{self, Harness};
    use super::*;

    fn claim(name: &str, class: Option<&str>, size: &str, modes: Value) -> Value {
        let mut c = json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name},
            "spec": {"accessModes": modes, "resources": {"requests": {"storage": size}}},
        });
        if let Some(class) = class {
            c["spec"]["storageClassName"] = json!(class);
        }
        c
    }

    #[test]
    fn a_claim_binds_to_the_smallest_matching_volume() {
        let mut h = Harness::standard(vec![]);
        h.create(
            "",
            "persistentvolumes",
            "",
            testkit::nfs_pv("big", "10.0.0.2", "/big", "1Ti"),
        );
        h.create(
            "",
            "persistentvolumes",
            "",
            testkit::nfs_pv("small", "10.0.0.2", "/small", "10Gi"),
        );
        h.create(
            "",
            "persistentvolumes",
            "",
            testkit::nfs_pv("tiny", "10.0.0.2", "/tiny", "1Gi"),
        );
        h.create(
            "",
            "persistentvolumeclaims",
            "default",
            claim(
                "fileserver-claim",
                Some(""),
                "5Gi",
                json!(["ReadWriteMany"]),
            ),
        );
        h.settle();
        let pvc = h.get("", "persistentvolumeclaims", "default", "fileserver-claim");
        assert_eq!(pvc["status"]["phase"], "Bound");
        assert_eq!(pvc["spec"]["volumeName"], "small");
        assert_eq!(pvc["status"]["capacity"]["storage"], "10Gi");
        assert_eq!(pvc["status"]["accessModes"], json!(["ReadWriteMany"]));
        assert_eq!(
            obj::annotation(&pvc, "pv.kubernetes.io/bind-completed"),
            Some("yes")
        );
        let pv = h.get("", "persistentvolumes", "", "small");
        assert_eq!(pv["status"]["phase"], "Bound");
        assert_eq!(pv["spec"]["claimRef"]["name"], "fileserver-claim");
        assert_eq!(pv["spec"]["claimRef"]["uid"], pvc["metadata"]["uid"]);
        assert_eq!(
            h.get("", "persistentvolumes", "", "big")["status"]["phase"],
            "Available"
        );
    }

    #[test]
    fn binding_table() {
        struct Case {
            class: Option<&'static str>,
            size: &'static str,
            modes: Value,
            volume_name: Option<&'static str>,
            bound_to: Option<&'static str>,
        }
        let case = |class, size, modes, volume_name, bound_to| Case {
            class,
            size,
            modes,
            volume_name,
            bound_to,
        };
        let cases = [
            case(Some(""), "1Gi", json!(["ReadWriteMany"]), None, Some("nfs")),
            case(None, "1Gi", json!(["ReadWriteOnce"]), None, Some("nfs")),
            case(Some(""), "2Ti", json!(["ReadWriteMany"]), None, None),
            case(Some("fast"), "1Gi", json!(["ReadWriteMany"]), None, None),
            case(Some(""), "1Gi", json!(["ReadOnlyMany"]), None, None),
            case(
                Some("other"),
                "1Gi",
                json!(["ReadWriteOnce"]),
                Some("nfs"),
                Some("nfs"),
            ),
        ];
        for c in cases {
            let mut h = Harness::standard(vec![]);
            let mut pv = testkit::nfs_pv("nfs", "10.0.0.2", "/x", "1Ti");
            pv["spec"]["accessModes"] = json!(["ReadWriteOnce", "ReadWriteMany"]);
            h.create("", "persistentvolumes", "", pv);
            let mut object = claim("c", c.class, c.size, c.modes.clone());
            if let Some(v) = c.volume_name {
                object["spec"]["volumeName"] = json!(v);
            }
            h.create("", "persistentvolumeclaims", "default", object);
            h.settle();
            let pvc = h.get("", "persistentvolumeclaims", "default", "c");
            let label = format!("{:?} {} {} {:?}", c.class, c.size, c.modes, c.volume_name);
            assert_eq!(pvc["spec"]["volumeName"].as_str(), c.bound_to, "{label}");
            assert_eq!(
                pvc["status"]["phase"],
                if c.bound_to.is_some() {
                    "Bound"
                } else {
                    "Pending"
                },
                "{label}"
            );
        }
    }

    #[test]
    fn waiting_claims_say_why() {
        let mut h = Harness::standard(vec![]);
        h.create(
            "",
            "persistentvolumeclaims",
            "default",
            claim("none", Some(""), "1Gi", json!(["ReadWriteOnce"])),
        );
        h.create(
            "",
            "persistentvolumeclaims",
            "default",
            claim("named", Some("filestore"), "1Gi", json!(["ReadWriteOnce"])),
        );
        h.settle();
        h.settle();
        assert_eq!(
            h.event_messages("default", "FailedBinding"),
            vec!["no persistent volumes available for this claim and no storage class is set"]
        );
        assert_eq!(
            h.event_messages("default", "ProvisioningFailed"),
            vec!["storageclass.storage.k8s.io \"filestore\" not found"]
        );
    }

    #[test]
    fn a_provisioner_makes_volumes_for_its_class() {
        let mut h = Harness::standard(vec![]);
        h.create("storage.k8s.io", "storageclasses", "", json!({
            "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "standard-rwo"},
            "provisioner": "pd.csi.storage.gke.io", "volumeBindingMode": "Immediate",
        }));
        h.create(
            "",
            "persistentvolumeclaims",
            "default",
            claim(
                "data",
                Some("standard-rwo"),
                "10Gi",
                json!(["ReadWriteOnce"]),
            ),
        );
        h.run_for(3.0);
        let pvc = h.get("", "persistentvolumeclaims", "default", "data");
        assert_eq!(pvc["status"]["phase"], "Bound");
        let pv = h.get(
            "",
            "persistentvolumes",
            "",
            pvc["spec"]["volumeName"].as_str().unwrap_or_default(),
        );
        assert_eq!(pv["spec"]["csi"]["driver"], "pd.csi.storage.gke.io");
        assert_eq!(pv["spec"]["persistentVolumeReclaimPolicy"], "Delete");
        assert!(h
            .reasons("default", "data")
            .contains(&"ProvisioningSucceeded".to_string()));
        h.delete("", "persistentvolumeclaims", "default", "data");
        h.run_for(2.0);
        assert!(
            h.names("", "persistentvolumes", "").is_empty(),
            "a Delete volume goes with its claim"
        );
    }

    #[test]
    fn protection_finalizers_hold_what_is_in_use() {
        let mut h = Harness::standard(vec![testkit::pool("default-pool", 1, 1)]);
        h.create(
            "",
            "persistentvolumes",
            "",
            testkit::nfs_pv("nfs", "10.0.0.2", "/x", "1Ti"),
        );
        h.create(
            "",
            "persistentvolumeclaims",
            "default",
            claim("c", Some(""), "1Gi", json!(["ReadWriteMany"])),
        );
        h.create(
            "",
            "pods",
            "default",
            json!({
                "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "user"},
                "spec": {"containers": [{"name": "c", "image": "nginx"}],
                         "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "c"}}]},
            }),
        );
        h.run_for(5.0);
        let pvc = h.get("", "persistentvolumeclaims", "default", "c");
        assert!(obj::has_finalizer(&pvc, PVC_PROTECTION));
        assert!(obj::has_finalizer(
            &h.get("", "persistentvolumes", "", "nfs"),
            PV_PROTECTION
        ));
        h.delete("", "persistentvolumeclaims", "default", "c");
        h.delete("", "persistentvolumes", "", "nfs");
        h.run_for(2.0);
        assert!(
            h.exists("", "persistentvolumeclaims", "default", "c"),
            "a running pod uses the claim"
        );
        assert!(
            h.exists("", "persistentvolumes", "", "nfs"),
            "a claim holds the volume"
        );
        h.delete("", "pods", "default", "user");
        h.run_for(5.0);
        assert!(!h.exists("", "persistentvolumeclaims", "default", "c"));
        assert!(!h.exists("", "persistentvolumes", "", "nfs"));
    }

    #[test]
    fn a_retained_volume_is_released() {
        let mut h = Harness::standard(vec![]);
        h.create(
            "",
            "persistentvolumes",
            "",
            testkit::nfs_pv("nfs", "10.0.0.2", "/x", "1Ti"),
        );
        h.create(
            "",
            "persistentvolumeclaims",
            "default",
            claim("c", Some(""), "1Gi", json!(["ReadWriteMany"])),
        );
        h.settle();
        h.delete("", "persistentvolumeclaims", "default", "c");
        h.settle();
        h.settle();
        let pv = h.get("", "persistentvolumes", "", "nfs");
        assert_eq!(pv["status"]["phase"], "Released");
        assert_eq!(pv["spec"]["claimRef"]["name"], "c");
    }

    #[test]
    fn quantities_in_bytes() {
        for (q, want) in [
            ("1Ki", 1024.0),
            ("1Ti", 1024f64.powi(4)),
            ("5G", 5e9),
            ("1.5Gi", 1.5 * 1024f64.powi(3)),
            ("100", 100.0),
        ] {
            assert_eq!(obj::storage_bytes(&json!(q)), want, "{q}");
        }
    }
}
