//! Adopting objects built by hand (`kubectl apply`, `kubectl create`, scripts): finding
//! the ones of a namespace terrain does not manage, and each one as the user would
//! have written it, for `terrain import --write` to put in a manifest file.
//!
//! What is found: Jobs, PersistentVolumeClaims (with the PersistentVolume each is
//! bound to, unless a provisioner made it), Services, Pods, Deployments and
//! StatefulSets that carry no terrain label and no owner (a Job's pods, a Deployment's
//! ReplicaSets are their controller's, not the user's), and not the API server's own
//! `kubernetes` Service. Secrets are never adopted: their data would be written in
//! plain text to a file meant for version control.
//!
//! What is written: the `kubectl.kubernetes.io/last-applied-configuration` of an
//! object `kubectl apply` made (exactly what the user wrote); otherwise the live object
//! without what the server fills in: status and bookkeeping metadata, a Job's
//! generated selector and labels, a Service's allocated cluster IPs, a Pod's node and
//! service account token volume, a PersistentVolume's binding ids, and the values the
//! API server defaults (`dnsPolicy: ClusterFirst`, a Job's `backoffLimit: 6`…).

use serde_json::{json, Map, Value};

use super::apply;
use super::connect;
use super::{ObjectRef, MANAGED_BY};
use crate::{Ctx, ProviderError};

/// The kinds looked for, in the order listed: (apiVersion, kind, the lowercase name
/// shown and accepted in `kind/name`, short names also accepted).
pub const KINDS: &[(&str, &str, &str, &[&str])] = &[
    ("v1", "PersistentVolume", "persistentvolume", &["pv"]),
    (
        "v1",
        "PersistentVolumeClaim",
        "persistentvolumeclaim",
        &["pvc"],
    ),
    ("v1", "Service", "service", &["svc"]),
    ("v1", "Pod", "pod", &["po"]),
    ("apps/v1", "Deployment", "deployment", &["deploy"]),
    ("apps/v1", "StatefulSet", "statefulset", &["sts"]),
    ("batch/v1", "Job", "job", &[]),
];

/// The annotation `kubectl apply` keeps the applied object in.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// An object that can be adopted.
#[derive(Debug, Clone, PartialEq)]
pub struct Found {
    pub target: ObjectRef,
    /// The object as the user would have written it ([`written`]).
    pub object: Value,
}

impl Found {
    /// `kind/name` as listed and picked (`job/workload`).
    pub fn pick(&self) -> String {
        format!("{}/{}", lower_kind(&self.target.kind), self.target.name)
    }
}

/// The lowercase name of `kind` as [`KINDS`] lists it (`persistentvolumeclaim`).
pub fn lower_kind(kind: &str) -> String {
    kind.to_ascii_lowercase()
}

/// The lowercase kind that `given` (a kind, its lowercase name or a short name, as
/// in `pvc/fileserver-claim`) stands for; `None` when no kind found here has it.
pub fn kind_named(given: &str) -> Option<&'static str> {
    let given = given.to_ascii_lowercase();
    let given = given.split('.').next().unwrap_or_default();
    KINDS
        .iter()
        .find(|(_, _, lower, short)| *lower == given || short.contains(&given))
        .map(|(_, _, lower, _)| *lower)
}

/// The objects of `namespace` on `cluster` that terrain does not manage, in the order
/// of [`KINDS`], then by name.
///
/// Fails when a list call fails (the cluster cannot be reached, the credentials are
/// refused); a kind the cluster does not serve has nothing to find.
pub async fn discover(
    ctx: &Ctx,
    cluster: &Value,
    namespace: &str,
) -> Result<Vec<Found>, ProviderError> {
    let client = connect::client(ctx, cluster).await?;
    let mut found = Vec::new();
    let mut volumes = Vec::new();
    for (api_version, kind, _, _) in KINDS {
        if *kind == "PersistentVolume" {
            continue;
        }
        let mut objects = apply::list(&client, api_version, kind, Some(namespace), "").await?;
        objects.sort_by(|a, b| name(a).cmp(name(b)));
        for object in objects {
            if !by_hand(&object) {
                continue;
            }
            if *kind == "PersistentVolumeClaim" {
                if let Some(volume) = object["spec"]["volumeName"].as_str() {
                    volumes.push(volume.to_string());
                }
            }
            if let Ok(target) = ObjectRef::of(&object) {
                found.push(Found {
                    target,
                    object: written(&object),
                });
            }
        }
    }
    // Volumes are cluster-scoped: only those the namespace's claims are bound to, and
    // only those made by hand (a provisioner's volume goes with its claim).
    let mut bound = Vec::new();
    for volume in volumes {
        let Some(object) = apply::get(&client, "v1", "PersistentVolume", None, &volume).await?
        else {
            continue;
        };
        let provisioned = object["metadata"]["annotations"]["pv.kubernetes.io/provisioned-by"]
            .as_str()
            .is_some();
        if by_hand(&object) && !provisioned {
            if let Ok(target) = ObjectRef::of(&object) {
                bound.push(Found {
                    target,
                    object: written(&object),
                });
            }
        }
    }
    bound.sort_by(|a, b| a.target.name.cmp(&b.target.name));
    bound.extend(found);
    Ok(bound)
}

/// The object `target` names on `cluster`, as [`written`]; `None` when it does not
/// exist.
///
/// Fails for a Secret (its data would be written in plain text), for an object terrain
/// manages already (naming its address), and when the call fails.
pub async fn fetch(
    ctx: &Ctx,
    cluster: &Value,
    target: &ObjectRef,
) -> Result<Option<Found>, ProviderError> {
    if target.kind == "Secret" {
        return Err(ProviderError::Unsupported(format!(
            "{}: a Secret is not adopted, its data would be written in plain text; declare it with a sensitive variable",
            target.describe()
        )));
    }
    let client = connect::client(ctx, cluster).await?;
    let Some(object) = apply::get_ref(&client, target).await? else {
        return Ok(None);
    };
    if let Some(address) = managed_by(&object) {
        return Err(ProviderError::Unsupported(format!(
            "{} is managed by terrain already, as {address}",
            target.describe()
        )));
    }
    Ok(Some(Found {
        target: target.clone(),
        object: written(&object),
    }))
}

fn name(object: &Value) -> &str {
    object["metadata"]["name"].as_str().unwrap_or_default()
}

/// The terrain address an object is marked for, if terrain made it.
fn managed_by(object: &Value) -> Option<String> {
    let metadata = &object["metadata"];
    (metadata["labels"][MANAGED_BY.0].as_str() == Some(MANAGED_BY.1)).then(|| {
        metadata["annotations"][super::ADDRESS_ANNOTATION]
            .as_str()
            .unwrap_or("another stack")
            .to_string()
    })
}

/// Whether `object` was made by hand: no terrain marks, no owner, not the API server's
/// own Service.
fn by_hand(object: &Value) -> bool {
    let metadata = &object["metadata"];
    let owned = metadata["ownerReferences"]
        .as_array()
        .is_some_and(|o| !o.is_empty());
    let apiserver = object["kind"] == "Service"
        && metadata["name"] == "kubernetes"
        && metadata["labels"]["component"] == "apiserver";
    managed_by(object).is_none() && !owned && !apiserver
}

/// `object` as the user would have written it: what `kubectl apply` recorded, or the
/// live object without what the server fills in.
pub fn written(object: &Value) -> Value {
    let applied = object["metadata"]["annotations"][LAST_APPLIED]
        .as_str()
        .and_then(|text| serde_json::from_str::<Value>(text).ok())
        .filter(|v| v.is_object() && v["kind"] == object["kind"]);
    let mut out = match applied {
        Some(mut applied) => {
            // kubectl records the namespace only when the file names one.
            if let (Some(ns), Some(meta)) = (
                object["metadata"]["namespace"].as_str(),
                applied["metadata"].as_object_mut(),
            ) {
                meta.entry("namespace")
                    .or_insert_with(|| Value::String(ns.to_string()));
            }
            applied
        }
        None => without_server_fields(object),
    };
    if let Some(meta) = out["metadata"].as_object_mut() {
        prune_map(meta, "annotations", |k| {
            k == LAST_APPLIED
                || k.starts_with("pv.kubernetes.io/")
                || k.starts_with("volume.kubernetes.io/")
                || k.starts_with("volume.beta.kubernetes.io/")
                || k == "deployment.kubernetes.io/revision"
                || k == "batch.kubernetes.io/job-tracking"
        });
    }
    in_usual_order(&mut out);
    out
}

/// Puts an object's keys in the order people write them: `apiVersion`, `kind`,
/// `metadata` (`name`, `namespace`, `labels`, `annotations` first), `spec`, then the
/// rest as they were.
fn in_usual_order(object: &mut Value) {
    fn first(map: &mut Map<String, Value>, keys: &[&str]) {
        let mut rest = std::mem::take(map);
        for key in keys {
            if let Some(v) = rest.remove(*key) {
                map.insert((*key).to_string(), v);
            }
        }
        map.extend(rest);
    }
    if let Some(map) = object.as_object_mut() {
        first(map, &["apiVersion", "kind", "metadata", "spec"]);
        if let Some(meta) = map.get_mut("metadata").and_then(Value::as_object_mut) {
            first(meta, &["name", "namespace", "labels", "annotations"]);
        }
    }
}

/// The live object without status, bookkeeping metadata and the fields the server or
/// its controllers set for each kind.
fn without_server_fields(object: &Value) -> Value {
    let mut out = apply::strip_noise(object);
    let kind = out["kind"].as_str().unwrap_or_default().to_string();
    if let Some(meta) = out["metadata"].as_object_mut() {
        meta.remove("deletionTimestamp");
        meta.remove("deletionGracePeriodSeconds");
        if kind == "Job" {
            prune_map(meta, "labels", generated_job_label);
        }
    }
    let spec = out["spec"].as_object_mut();
    let Some(spec) = spec else {
        return out;
    };
    match kind.as_str() {
        "Job" => {
            if spec.get("manualSelector") != Some(&Value::Bool(true)) {
                spec.remove("selector");
            }
            if let Some(meta) = spec
                .get_mut("template")
                .and_then(|t| t.get_mut("metadata"))
                .and_then(Value::as_object_mut)
            {
                prune_map(meta, "labels", generated_job_label);
                meta.remove("creationTimestamp");
            }
            if let Some(pod) = spec
                .get_mut("template")
                .and_then(|t| t.get_mut("spec"))
                .and_then(Value::as_object_mut)
            {
                without_token_volume(pod);
            }
        }
        "Service" => {
            let headless = spec.get("clusterIP").and_then(Value::as_str) == Some("None");
            if !headless {
                spec.remove("clusterIP");
                spec.remove("clusterIPs");
            }
            spec.remove("ipFamilies");
            spec.remove("ipFamilyPolicy");
        }
        "Pod" => {
            spec.remove("nodeName");
            without_token_volume(spec);
            if let Some(Value::Array(tolerations)) = spec.get_mut("tolerations") {
                // Added to every pod by the DefaultTolerationSeconds admission plugin.
                tolerations.retain(|t| {
                    let key = t["key"].as_str().unwrap_or_default();
                    !(matches!(
                        key,
                        "node.kubernetes.io/not-ready" | "node.kubernetes.io/unreachable"
                    ) && t["tolerationSeconds"] == 300)
                });
                if tolerations.is_empty() {
                    spec.remove("tolerations");
                }
            }
        }
        "PersistentVolume" => {
            if let Some(claim) = spec.get_mut("claimRef").and_then(Value::as_object_mut) {
                claim.remove("uid");
                claim.remove("resourceVersion");
            }
        }
        _ => {}
    }
    without_defaults(&kind, spec);
    out
}

/// `spec` of a `kind` without the values the API server defaults when they are left
/// out (`dnsPolicy: ClusterFirst`, a Job's `backoffLimit: 6`…): an object made with
/// `kubectl create` shows them, though nobody wrote them.
fn without_defaults(kind: &str, spec: &mut Map<String, Value>) {
    let defaults: &[(&str, Value)] = match kind {
        "Job" => &[
            ("backoffLimit", json!(6)),
            ("completionMode", json!("NonIndexed")),
            ("suspend", json!(false)),
            ("podReplacementPolicy", json!("TerminatingOrFailed")),
        ],
        "Deployment" => &[
            ("revisionHistoryLimit", json!(10)),
            ("progressDeadlineSeconds", json!(600)),
            (
                "strategy",
                json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}}),
            ),
        ],
        "StatefulSet" => &[
            ("podManagementPolicy", json!("OrderedReady")),
            ("revisionHistoryLimit", json!(10)),
            (
                "updateStrategy",
                json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}),
            ),
            (
                "persistentVolumeClaimRetentionPolicy",
                json!({"whenDeleted": "Retain", "whenScaled": "Retain"}),
            ),
        ],
        "Service" => &[
            ("type", json!("ClusterIP")),
            ("sessionAffinity", json!("None")),
            ("internalTrafficPolicy", json!("Cluster")),
        ],
        "PersistentVolumeClaim" => &[("volumeMode", json!("Filesystem"))],
        "PersistentVolume" => &[
            ("volumeMode", json!("Filesystem")),
            ("persistentVolumeReclaimPolicy", json!("Retain")),
        ],
        _ => &[],
    };
    drop_equal(spec, defaults);
    if kind == "Service" {
        if let Some(Value::Array(ports)) = spec.get_mut("ports") {
            for port in ports.iter_mut().filter_map(Value::as_object_mut) {
                drop_equal(port, &[("protocol", json!("TCP"))]);
                if port.get("targetPort").is_some() && port.get("targetPort") == port.get("port") {
                    port.remove("targetPort");
                }
            }
        }
    }
    if kind == "Pod" {
        pod_without_defaults(spec, true);
    } else if let Some(pod) = spec
        .get_mut("template")
        .and_then(|t| t.get_mut("spec"))
        .and_then(Value::as_object_mut)
    {
        // A Job's pods must name their restart policy: it has no default there.
        pod_without_defaults(pod, kind != "Job");
    }
}

/// A pod spec without the values the API server defaults; `restart_default`: whether
/// `restartPolicy: Always` is one of them (not for a Job's pods).
fn pod_without_defaults(pod: &mut Map<String, Value>, restart_default: bool) {
    drop_equal(
        pod,
        &[
            ("dnsPolicy", json!("ClusterFirst")),
            ("schedulerName", json!("default-scheduler")),
            ("terminationGracePeriodSeconds", json!(30)),
            ("securityContext", json!({})),
            ("enableServiceLinks", json!(true)),
            ("serviceAccountName", json!("default")),
            ("serviceAccount", json!("default")),
            ("priority", json!(0)),
            ("preemptionPolicy", json!("PreemptLowerPriority")),
        ],
    );
    if restart_default {
        drop_equal(pod, &[("restartPolicy", json!("Always"))]);
    }
    for list in ["containers", "initContainers"] {
        let Some(Value::Array(containers)) = pod.get_mut(list) else {
            continue;
        };
        for c in containers.iter_mut().filter_map(Value::as_object_mut) {
            // `Always` for an image without a tag or tagged latest, else `IfNotPresent`.
            let image = c.get("image").and_then(Value::as_str).unwrap_or_default();
            let last = image.rsplit('/').next().unwrap_or_default();
            let pull = match last.split_once(':') {
                _ if last.contains('@') => "IfNotPresent",
                Some((_, "latest")) | None => "Always",
                Some(_) => "IfNotPresent",
            };
            drop_equal(
                c,
                &[
                    ("imagePullPolicy", json!(pull)),
                    ("terminationMessagePath", json!("/dev/termination-log")),
                    ("terminationMessagePolicy", json!("File")),
                    ("resources", json!({})),
                ],
            );
            if let Some(Value::Array(ports)) = c.get_mut("ports") {
                for port in ports.iter_mut().filter_map(Value::as_object_mut) {
                    drop_equal(port, &[("protocol", json!("TCP"))]);
                }
            }
        }
    }
}

/// Removes each key of `map` whose value equals the one given.
fn drop_equal(map: &mut Map<String, Value>, defaults: &[(&str, Value)]) {
    for (key, default) in defaults {
        if map.get(*key) == Some(default) {
            map.remove(*key);
        }
    }
}

/// The labels the Job controller puts on a Job and its pod template.
fn generated_job_label(key: &str) -> bool {
    matches!(
        key,
        "controller-uid"
            | "job-name"
            | "batch.kubernetes.io/controller-uid"
            | "batch.kubernetes.io/job-name"
    )
}

/// A pod spec without the service account token volume (`kube-api-access-…`) the
/// admission controller adds, and its mounts.
fn without_token_volume(pod: &mut Map<String, Value>) {
    let token = |name: &Value| {
        name.as_str()
            .is_some_and(|n| n.starts_with("kube-api-access-"))
    };
    if let Some(Value::Array(volumes)) = pod.get_mut("volumes") {
        volumes.retain(|v| !token(&v["name"]));
        if volumes.is_empty() {
            pod.remove("volumes");
        }
    }
    for list in ["containers", "initContainers"] {
        if let Some(Value::Array(containers)) = pod.get_mut(list) {
            for c in containers.iter_mut().filter_map(Value::as_object_mut) {
                if let Some(Value::Array(mounts)) = c.get_mut("volumeMounts") {
                    mounts.retain(|m| !token(&m["name"]));
                    if mounts.is_empty() {
                        c.remove("volumeMounts");
                    }
                }
            }
        }
    }
}

/// Removes the keys of map `meta[field]` that `drop` selects, and the map when empty.
fn prune_map(meta: &mut Map<String, Value>, field: &str, drop: impl Fn(&str) -> bool) {
    if let Some(Value::Object(map)) = meta.get_mut(field) {
        map.retain(|k, _| !drop(k));
        if map.is_empty() {
            meta.remove(field);
        }
    }
}

/// `object` as a YAML document.
pub fn to_yaml(object: &Value) -> Result<String, serde_yaml_ng::Error> {
    serde_yaml_ng::to_string(object)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_job_made_with_kubectl_create_is_written_without_what_the_controller_added() {
        let live = json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {
                "name": "workload", "namespace": "default", "uid": "u1",
                "resourceVersion": "7", "creationTimestamp": "2026-11-26T00:00:00Z",
                "generation": 1,
                "labels": {"batch.kubernetes.io/job-name": "workload", "controller-uid": "u1", "team": "ml"},
                "annotations": {"batch.kubernetes.io/job-tracking": ""},
                "managedFields": [{"manager": "kubectl-create"}]
            },
            "spec": {
                "parallelism": 1, "backoffLimit": 6, "suspend": false,
                "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "u1"}},
                "template": {
                    "metadata": {"name": "workload", "labels": {"job-name": "workload", "controller-uid": "u1"}},
                    "spec": {
                        "restartPolicy": "OnFailure",
                        "dnsPolicy": "ClusterFirst", "terminationGracePeriodSeconds": 30,
                        "containers": [{"name": "w", "image": "i",
                            "imagePullPolicy": "Always", "terminationMessagePolicy": "File",
                            "volumeMounts": [{"name": "kube-api-access-x1", "mountPath": "/var/run/secrets"}]}],
                        "volumes": [{"name": "kube-api-access-x1", "projected": {}}]
                    }
                }
            },
            "status": {"active": 1}
        });
        assert_eq!(
            written(&live),
            json!({
                "apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": "workload", "namespace": "default", "labels": {"team": "ml"}},
                "spec": {
                    "parallelism": 1,
                    "template": {
                        "metadata": {"name": "workload"},
                        "spec": {"restartPolicy": "OnFailure", "containers": [{"name": "w", "image": "i"}]}
                    }
                }
            })
        );
    }

    #[test]
    fn an_object_made_with_kubectl_apply_is_written_as_applied() {
        let applied = json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "redis-leader"},
            "spec": {"ports": [{"port": 6379}], "selector": {"app": "redis"}}});
        let live = json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "redis-leader", "namespace": "default",
                "annotations": {LAST_APPLIED: applied.to_string()}},
            "spec": {"clusterIP": "10.96.0.42", "clusterIPs": ["10.96.0.42"],
                "ports": [{"port": 6379, "protocol": "TCP", "targetPort": 6379}],
                "selector": {"app": "redis"}, "type": "ClusterIP"}});
        let mut expected = applied;
        expected["metadata"]["namespace"] = json!("default");
        let out = written(&live);
        assert_eq!(out, expected);
        // In the order people write them.
        let keys = |v: &Value| v.as_object().map(|m| m.keys().cloned().collect::<Vec<_>>());
        assert_eq!(
            keys(&out).expect("an object"),
            ["apiVersion", "kind", "metadata", "spec"]
        );
        assert_eq!(
            keys(&out["metadata"]).expect("an object"),
            ["name", "namespace"]
        );
    }

    #[test]
    fn a_service_keeps_its_cluster_ip_only_when_headless() {
        let live = |ip: &str| {
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
                "spec": {"clusterIP": ip, "clusterIPs": [ip], "ipFamilies": ["IPv4"],
                    "ipFamilyPolicy": "SingleStack", "ports": [{"port": 1}]}})
        };
        assert_eq!(
            written(&live("10.96.0.9"))["spec"],
            json!({"ports": [{"port": 1}]})
        );
        assert_eq!(written(&live("None"))["spec"]["clusterIP"], "None");
    }

    #[test]
    fn owned_and_terrain_objects_are_not_found_as_made_by_hand() {
        let owned = json!({"kind": "Pod", "metadata": {"name": "w-abc",
            "ownerReferences": [{"kind": "Job", "name": "w"}]}});
        let ours = json!({"kind": "Job", "metadata": {"name": "w",
            "labels": {MANAGED_BY.0: MANAGED_BY.1},
            "annotations": {"terrain.dev/address": "kubernetes_job.w"}}});
        let apiserver = json!({"kind": "Service", "metadata": {"name": "kubernetes",
            "labels": {"component": "apiserver"}}});
        let mine = json!({"kind": "Pod", "metadata": {"name": "redis-leader"}});
        assert!(!by_hand(&owned));
        assert!(!by_hand(&ours));
        assert_eq!(managed_by(&ours).as_deref(), Some("kubernetes_job.w"));
        assert!(!by_hand(&apiserver));
        assert!(by_hand(&mine));
    }

    #[test]
    fn picks_name_kinds_by_kind_lowercase_or_short_name() {
        assert_eq!(kind_named("pvc"), Some("persistentvolumeclaim"));
        assert_eq!(kind_named("Job"), Some("job"));
        assert_eq!(kind_named("job.batch"), Some("job"));
        assert_eq!(kind_named("svc"), Some("service"));
        assert_eq!(kind_named("secret"), None);
    }
}
