//! What the API server does to an object on write besides storing it: defaulting
//! (Job selectors and labels, Service cluster IPs, pod defaults) and the checks of
//! immutable fields. Defaults are filled on update too, so a write that omits a
//! defaulted or server-assigned field (an apply without `clusterIP`) keeps it.

use std::collections::BTreeSet;

use serde_json::{json, Value};

use super::obj::{self, default};
use super::store::ObjKey;
use super::ClusterState;

/// A field problem, reported as a 422 Invalid Status cause: `(field path, message)`,
/// e.g. `("spec.template", "field is immutable")`.
pub(crate) type Cause = (String, String);

const PVC_PROTECTION: &str = "kubernetes.io/pvc-protection";
const PV_PROTECTION: &str = "kubernetes.io/pv-protection";
const JOB_UID_LABELS: [&str; 2] = ["batch.kubernetes.io/controller-uid", "controller-uid"];
const JOB_NAME_LABELS: [&str; 2] = ["batch.kubernetes.io/job-name", "job-name"];

/// Fills defaults on a new object (before it is stored) and checks it.
pub(crate) fn on_create(
    key: &ObjKey,
    object: &mut Value,
    cluster: &ClusterState,
) -> Result<(), Vec<Cause>> {
    let mut causes = Vec::new();
    match (key.group.as_str(), key.resource.as_str()) {
        ("", "pods") => {
            pod(object);
            if cluster.cloud.tolerates_extended_resources() {
                extended_resource_tolerations(object);
            }
        }
        ("batch", "jobs") => job_create(key, object, &mut causes),
        ("batch", "cronjobs") => cronjob(object),
        ("apps", "deployments" | "replicasets" | "daemonsets" | "statefulsets") => {
            workload(key, object, &mut causes);
        }
        ("", "services") => service(key, &Value::Null, object, cluster, &mut causes),
        ("", "persistentvolumeclaims") => pvc_create(object, cluster),
        ("", "persistentvolumes") => pv_create(object),
        ("", "namespaces") => namespace(key, object, true),
        ("", "secrets") => {
            string_data(object);
            default(object, &["type"], json!("Opaque"));
        }
        ("storage.k8s.io", "storageclasses") => {
            default(object, &["reclaimPolicy"], json!("Delete"));
            default(object, &["volumeBindingMode"], json!("Immediate"));
        }
        _ => {}
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(causes)
    }
}

/// Fills defaults on a changed object and refuses changes to immutable fields.
pub(crate) fn on_update(
    key: &ObjKey,
    old: &Value,
    object: &mut Value,
    cluster: &ClusterState,
) -> Result<(), Vec<Cause>> {
    let mut causes = Vec::new();
    match (key.group.as_str(), key.resource.as_str()) {
        ("", "pods") => pod_update(old, object, &mut causes),
        ("batch", "jobs") => job_update(key, old, object, &mut causes),
        ("batch", "cronjobs") => cronjob(object),
        ("apps", "deployments" | "replicasets" | "daemonsets" | "statefulsets") => {
            workload(key, object, &mut causes);
            workload_update(key, old, object, &mut causes);
        }
        ("", "services") => service(key, old, object, cluster, &mut causes),
        ("", "persistentvolumeclaims") => pvc_update(old, object, &mut causes),
        ("", "persistentvolumes") => pv_update(old, object, &mut causes),
        ("", "namespaces") => namespace(key, object, false),
        ("", "secrets") => {
            string_data(object);
            default(object, &["type"], json!("Opaque"));
            data_immutable(old, object, &mut causes);
            if !old.is_null() && old["type"] != object["type"] {
                causes.push(immutable("type", &object["type"]));
            }
        }
        ("", "configmaps") => data_immutable(old, object, &mut causes),
        ("storage.k8s.io", "storageclasses") => {
            default(object, &["reclaimPolicy"], json!("Delete"));
            default(object, &["volumeBindingMode"], json!("Immediate"));
        }
        _ => {}
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(causes)
    }
}

/// A value as the API server prints it in a field error.
/// A Secret's `stringData` written into `data` (base64), over keys of the same name, as
/// the API server does on every write: `stringData` is never stored or returned.
fn string_data(object: &mut Value) {
    use base64::Engine as _;
    let Some(Value::Object(plain)) = object.as_object_mut().and_then(|o| o.remove("stringData"))
    else {
        return;
    };
    if !object["data"].is_object() {
        object["data"] = json!({});
    }
    for (k, v) in plain {
        let text = v.as_str().unwrap_or_default();
        object["data"][k] = json!(base64::engine::general_purpose::STANDARD.encode(text));
    }
}

fn render(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

fn immutable(field: &str, value: &Value) -> Cause {
    (
        field.to_string(),
        format!("Invalid value: {}: field is immutable", render(value)),
    )
}

/// `imagePullPolicy` as the API server defaults it: `Always` for `:latest` or no tag.
fn pull_policy(image: &str) -> &'static str {
    if image.contains('@') {
        return "IfNotPresent";
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.split_once(':') {
        Some((_, "latest")) | None => "Always",
        Some(_) => "IfNotPresent",
    }
}

/// Defaults every pod spec gets, wherever it appears (a pod, a template).
fn pod_spec(spec: &mut Value) {
    default(spec, &["restartPolicy"], json!("Always"));
    default(spec, &["dnsPolicy"], json!("ClusterFirst"));
    default(spec, &["schedulerName"], json!("default-scheduler"));
    default(spec, &["terminationGracePeriodSeconds"], json!(30));
    default(spec, &["securityContext"], json!({}));
    default(spec, &["enableServiceLinks"], json!(true));
    for list in ["containers", "initContainers"] {
        if spec[list].is_null() {
            continue;
        }
        for c in obj::array_mut(spec, &[list]) {
            let image = c["image"].as_str().unwrap_or_default().to_string();
            default(c, &["imagePullPolicy"], json!(pull_policy(&image)));
            default(
                c,
                &["terminationMessagePath"],
                json!("/dev/termination-log"),
            );
            default(c, &["terminationMessagePolicy"], json!("File"));
            default(c, &["resources"], json!({}));
            if !c["ports"].is_null() {
                for p in obj::array_mut(c, &["ports"]) {
                    default(p, &["protocol"], json!("TCP"));
                }
            }
            if !c["env"].is_null() {
                for e in obj::array_mut(c, &["env"]) {
                    if !e["valueFrom"]["fieldRef"].is_null() {
                        default(e, &["valueFrom", "fieldRef", "apiVersion"], json!("v1"));
                    }
                }
            }
        }
    }
    if !spec["volumes"].is_null() {
        for v in obj::array_mut(spec, &["volumes"]) {
            for source in ["configMap", "secret"] {
                if !v[source].is_null() {
                    default(v, &[source, "defaultMode"], json!(420));
                }
            }
            if !v["hostPath"].is_null() {
                default(v, &["hostPath", "type"], json!(""));
            }
        }
    }
}

fn template(object: &mut Value, path: &[&str]) {
    if !obj::at(object, path).is_null() {
        let mut spec_path = path.to_vec();
        spec_path.push("spec");
        obj::obj_mut(object, &spec_path);
        pod_spec(obj::value_mut(object, &spec_path));
    }
}

/// What a new pod gets from defaulting and the admission plugins (ServiceAccount,
/// DefaultTolerationSeconds, Priority) and its initial status.
fn pod(object: &mut Value) {
    obj::obj_mut(object, &["spec"]);
    let spec = obj::value_mut(object, &["spec"]);
    pod_spec(spec);
    default(spec, &["serviceAccountName"], json!("default"));
    let sa = spec["serviceAccountName"].clone();
    default(spec, &["serviceAccount"], sa);
    // The Priority admission plugin resolves the class; the two system classes every API
    // server creates at start are known without objects.
    let priority = match spec["priorityClassName"].as_str() {
        Some("system-node-critical") => 2_000_001_000,
        Some("system-cluster-critical") => 2_000_000_000,
        _ => 0,
    };
    default(spec, &["priority"], json!(priority));
    default(spec, &["preemptionPolicy"], json!("PreemptLowerPriority"));
    let tolerations = obj::array_mut(spec, &["tolerations"]);
    for key in [
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    ] {
        let covered = tolerations
            .iter()
            .any(|t| t["key"] == key && (t["effect"] == "NoExecute" || t["effect"].is_null()));
        if !covered {
            tolerations.push(json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}));
        }
    }
    default(object, &["status", "phase"], json!("Pending"));
    let qos = qos_class(&object["spec"]);
    default(object, &["status", "qosClass"], json!(qos));
}

/// The ExtendedResourceToleration admission plugin: a toleration of the taint named for
/// each extended resource (`nvidia.com/gpu`, `google.com/tpu`) the pod's containers
/// ask for, unless one tolerates it already.
fn extended_resource_tolerations(object: &mut Value) {
    let mut names: Vec<String> = Vec::new();
    for c in obj::items(&object["spec"]["containers"])
        .iter()
        .chain(obj::items(&object["spec"]["initContainers"]))
    {
        for part in ["limits", "requests"] {
            if let Some(m) = c["resources"][part].as_object() {
                names.extend(
                    m.keys()
                        .filter(|k| k.contains('/') && !k.contains("kubernetes.io/"))
                        .cloned(),
                );
            }
        }
    }
    names.sort();
    names.dedup();
    if names.is_empty() {
        return;
    }
    let spec = obj::value_mut(object, &["spec"]);
    let tolerations = obj::array_mut(spec, &["tolerations"]);
    for name in names {
        let covered = tolerations.iter().any(|t| {
            t["key"] == name.as_str()
                && t["operator"] == "Exists"
                && (t["effect"].is_null() || t["effect"] == "NoSchedule")
        });
        if !covered {
            tolerations.push(json!({"key": name, "operator": "Exists", "effect": "NoSchedule"}));
        }
    }
}

/// Pod spec fields a running pod may change.
fn pod_update(old: &Value, object: &mut Value, causes: &mut Vec<Cause>) {
    if old.is_null() {
        pod(object);
        return;
    }
    if object["spec"]["nodeName"].is_null() && !old["spec"]["nodeName"].is_null() {
        obj::set(
            object,
            &["spec", "nodeName"],
            old["spec"]["nodeName"].clone(),
        );
    }
    pod(object);
    let comparable = |spec: &Value| {
        let mut s = spec.clone();
        for list in ["containers", "initContainers"] {
            if let Some(cs) = s[list].as_array_mut() {
                for c in cs {
                    obj::remove(c, &["image"]);
                }
            }
        }
        for field in [
            "activeDeadlineSeconds",
            "tolerations",
            "terminationGracePeriodSeconds",
            "schedulingGates",
        ] {
            obj::remove(&mut s, &[field]);
        }
        s
    };
    let tolerations_kept = obj::items(&old["spec"]["tolerations"])
        .iter()
        .all(|t| obj::items(&object["spec"]["tolerations"]).contains(t));
    if comparable(&old["spec"]) != comparable(&object["spec"]) || !tolerations_kept {
        causes.push((
            "spec".into(),
            "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)".into(),
        ));
    }
}

fn job_defaults(object: &mut Value) {
    obj::obj_mut(object, &["spec"]);
    let spec = obj::value_mut(object, &["spec"]);
    if spec["completions"].is_null() && spec["parallelism"].is_null() {
        spec["completions"] = json!(1);
    }
    default(spec, &["parallelism"], json!(1));
    default(spec, &["backoffLimit"], json!(6));
    default(spec, &["completionMode"], json!("NonIndexed"));
    default(spec, &["suspend"], json!(false));
    let replacement = if spec["podFailurePolicy"].is_null() {
        "TerminatingOrFailed"
    } else {
        "Failed"
    };
    default(spec, &["podReplacementPolicy"], json!(replacement));
    template(object, &["spec", "template"]);
}

/// The selector and labels tying a Job to its pods, generated from the Job's uid.
fn job_selector(object: &mut Value, uid: &str, name: &str) {
    if object["spec"]["manualSelector"] == true {
        return;
    }
    obj::set(
        object,
        &["spec", "selector"],
        json!({"matchLabels": {JOB_UID_LABELS[0]: uid}}),
    );
    for k in JOB_UID_LABELS {
        obj::set(
            object,
            &["spec", "template", "metadata", "labels", k],
            json!(uid),
        );
    }
    for k in JOB_NAME_LABELS {
        obj::set(
            object,
            &["spec", "template", "metadata", "labels", k],
            json!(name),
        );
    }
}

fn job_checks(object: &Value, causes: &mut Vec<Cause>) {
    let policy = &object["spec"]["template"]["spec"]["restartPolicy"];
    if !matches!(policy.as_str(), Some("OnFailure" | "Never")) {
        causes.push((
            "spec.template.spec.restartPolicy".into(),
            format!(
                "Unsupported value: {}: supported values: \"OnFailure\", \"Never\"",
                render(policy)
            ),
        ));
    }
    for field in [
        "parallelism",
        "completions",
        "backoffLimit",
        "activeDeadlineSeconds",
        "ttlSecondsAfterFinished",
    ] {
        if object["spec"][field].as_i64().is_some_and(|n| n < 0) {
            causes.push((
                format!("spec.{field}"),
                format!(
                    "Invalid value: {}: must be greater than or equal to 0",
                    object["spec"][field]
                ),
            ));
        }
    }
}

fn job_create(key: &ObjKey, object: &mut Value, causes: &mut Vec<Cause>) {
    let uid = match obj::str_at(object, &["metadata", "uid"]) {
        Some(u) => u.to_string(),
        None => crate::common::ids::new_uid(),
    };
    obj::set(object, &["metadata", "uid"], json!(uid));
    if object["spec"]["manualSelector"] != true && !object["spec"]["selector"].is_null() {
        causes.push((
            "spec.selector".into(),
            format!(
                "Invalid value: {}: `selector` will be auto-generated",
                render(&object["spec"]["selector"])
            ),
        ));
    }
    job_selector(object, &uid, &key.name);
    job_defaults(object);
    job_checks(object, causes);
}

fn job_update(key: &ObjKey, old: &Value, object: &mut Value, causes: &mut Vec<Cause>) {
    if old.is_null() {
        job_defaults(object);
        return;
    }
    let uid = obj::uid(old).to_string();
    if object["spec"]["manualSelector"] != true {
        job_selector(object, &uid, &key.name);
    } else if object["spec"]["selector"].is_null() {
        obj::set(
            object,
            &["spec", "selector"],
            old["spec"]["selector"].clone(),
        );
    }
    job_defaults(object);
    job_checks(object, causes);
    for field in ["selector", "template", "completionMode"] {
        if old["spec"][field] != object["spec"][field] {
            causes.push(immutable(&format!("spec.{field}"), &object["spec"][field]));
        }
    }
    if old["spec"]["completions"] != object["spec"]["completions"] {
        causes.push(immutable(
            "spec.completions",
            &object["spec"]["completions"],
        ));
    }
}

fn cronjob(object: &mut Value) {
    default(object, &["spec", "concurrencyPolicy"], json!("Allow"));
    default(object, &["spec", "suspend"], json!(false));
    default(object, &["spec", "successfulJobsHistoryLimit"], json!(3));
    default(object, &["spec", "failedJobsHistoryLimit"], json!(1));
    template(object, &["spec", "jobTemplate", "spec", "template"]);
}

/// Deployments, ReplicaSets, DaemonSets and StatefulSets: defaults and the selector checks.
fn workload(key: &ObjKey, object: &mut Value, causes: &mut Vec<Cause>) {
    obj::obj_mut(object, &["spec"]);
    let spec = obj::value_mut(object, &["spec"]);
    match key.resource.as_str() {
        "deployments" => {
            default(spec, &["replicas"], json!(1));
            default(spec, &["revisionHistoryLimit"], json!(10));
            default(spec, &["progressDeadlineSeconds"], json!(600));
            default(spec, &["strategy", "type"], json!("RollingUpdate"));
            if spec["strategy"]["type"] == "RollingUpdate" {
                default(
                    spec,
                    &["strategy", "rollingUpdate", "maxSurge"],
                    json!("25%"),
                );
                default(
                    spec,
                    &["strategy", "rollingUpdate", "maxUnavailable"],
                    json!("25%"),
                );
            }
        }
        "replicasets" => default(spec, &["replicas"], json!(1)),
        "daemonsets" => {
            default(spec, &["revisionHistoryLimit"], json!(10));
            default(spec, &["updateStrategy", "type"], json!("RollingUpdate"));
            if spec["updateStrategy"]["type"] == "RollingUpdate" {
                default(
                    spec,
                    &["updateStrategy", "rollingUpdate", "maxUnavailable"],
                    json!(1),
                );
                default(
                    spec,
                    &["updateStrategy", "rollingUpdate", "maxSurge"],
                    json!(0),
                );
            }
        }
        _ => {
            default(spec, &["replicas"], json!(1));
            default(spec, &["revisionHistoryLimit"], json!(10));
            default(spec, &["podManagementPolicy"], json!("OrderedReady"));
            default(spec, &["updateStrategy", "type"], json!("RollingUpdate"));
            if spec["updateStrategy"]["type"] == "RollingUpdate" {
                default(
                    spec,
                    &["updateStrategy", "rollingUpdate", "partition"],
                    json!(0),
                );
            }
            default(
                spec,
                &["persistentVolumeClaimRetentionPolicy"],
                json!({"whenDeleted": "Retain", "whenScaled": "Retain"}),
            );
            if !spec["volumeClaimTemplates"].is_null() {
                for t in obj::array_mut(spec, &["volumeClaimTemplates"]) {
                    default(t, &["spec", "volumeMode"], json!("Filesystem"));
                    default(t, &["apiVersion"], json!("v1"));
                    default(t, &["kind"], json!("PersistentVolumeClaim"));
                }
            }
        }
    }
    template(object, &["spec", "template"]);
    let selector = &object["spec"]["selector"];
    if selector.is_null() {
        causes.push(("spec.selector".into(), "Required value".into()));
    } else if !obj::selector_matches(selector, &object["spec"]["template"]["metadata"]["labels"]) {
        causes.push((
            "spec.template.metadata.labels".into(),
            format!(
                "Invalid value: {}: `selector` does not match template `labels`",
                render(&object["spec"]["template"]["metadata"]["labels"])
            ),
        ));
    }
}

fn workload_update(key: &ObjKey, old: &Value, object: &Value, causes: &mut Vec<Cause>) {
    if old.is_null() {
        return;
    }
    if old["spec"]["selector"] != object["spec"]["selector"] {
        causes.push(immutable("spec.selector", &object["spec"]["selector"]));
    }
    if key.resource == "statefulsets" {
        let mutable = [
            "replicas",
            "ordinals",
            "template",
            "updateStrategy",
            "persistentVolumeClaimRetentionPolicy",
            "minReadySeconds",
        ];
        let strip = |v: &Value| {
            let mut s = v["spec"].clone();
            for f in mutable {
                obj::remove(&mut s, &[f]);
            }
            s
        };
        if strip(old) != strip(object) {
            causes.push((
                "spec".into(),
                "Forbidden: updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden".into(),
            ));
        }
    }
}

/// Cluster IPs every Service holds, but `skip`'s own.
fn cluster_ips(cluster: &ClusterState, skip: &ObjKey) -> BTreeSet<String> {
    cluster
        .store
        .list("", "services", None)
        .into_iter()
        .filter(|(k, _)| *k != skip)
        .filter_map(|(_, s)| s["spec"]["clusterIP"].as_str().map(str::to_string))
        .collect()
}

fn node_ports(cluster: &ClusterState, skip: &ObjKey) -> BTreeSet<i64> {
    cluster
        .store
        .list("", "services", None)
        .into_iter()
        .filter(|(k, _)| *k != skip)
        .flat_map(|(_, s)| {
            obj::items(&s["spec"]["ports"])
                .iter()
                .filter_map(|p| p["nodePort"].as_i64())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// A free address in 10.96.0.0/16, starting from one derived from the name so the same
/// Service tends to get the same address.
fn allocate_ip(key: &ObjKey, taken: &BTreeSet<String>) -> Option<String> {
    let start = crate::common::hash::fnv64(&[&key.namespace, &key.name]) % 65_000;
    (0..65_000u64)
        .map(|i| (start + i) % 65_000 + 256)
        .filter(|o| o % 256 != 0 && o % 256 != 255)
        .map(|o| format!("10.96.{}.{}", o / 256, o % 256))
        .find(|ip| !taken.contains(ip))
}

/// Service defaults and allocations; on update, what was allocated stays.
fn service(
    key: &ObjKey,
    old: &Value,
    object: &mut Value,
    cluster: &ClusterState,
    causes: &mut Vec<Cause>,
) {
    obj::obj_mut(object, &["spec"]);
    let spec = obj::value_mut(object, &["spec"]);
    default(spec, &["type"], json!("ClusterIP"));
    default(spec, &["sessionAffinity"], json!("None"));
    let kind = spec["type"].as_str().unwrap_or("ClusterIP").to_string();
    let old_ip = old["spec"]["clusterIP"]
        .as_str()
        .filter(|ip| !ip.is_empty())
        .map(str::to_string);
    if kind != "ExternalName" {
        let asked = spec["clusterIP"]
            .as_str()
            .filter(|ip| !ip.is_empty())
            .map(str::to_string);
        match (asked, old_ip) {
            (None, Some(old_ip)) => spec["clusterIP"] = json!(old_ip),
            (Some(new), Some(old_ip)) if new != old_ip => {
                causes.push((
                    "spec.clusterIPs[0]".into(),
                    format!("Invalid value: []string{{{new:?}}}: may not change once set"),
                ));
            }
            (Some(ip), None) if ip != "None" && cluster_ips(cluster, key).contains(&ip) => {
                causes.push((
                    "spec.clusterIPs".into(),
                    format!("Invalid value: []string{{{ip:?}}}: failed to allocate IP {ip}: provided IP is already allocated"),
                ));
            }
            (None, None) => match allocate_ip(key, &cluster_ips(cluster, key)) {
                Some(ip) => spec["clusterIP"] = json!(ip),
                None => causes.push((
                    "spec.clusterIPs".into(),
                    "Internal error: range is full".into(),
                )),
            },
            _ => {}
        }
        let ip = spec["clusterIP"].clone();
        spec["clusterIPs"] = json!([ip]);
        default(spec, &["ipFamilies"], json!(["IPv4"]));
        default(spec, &["ipFamilyPolicy"], json!("SingleStack"));
        default(spec, &["internalTrafficPolicy"], json!("Cluster"));
    }
    let wants_node_ports = kind == "NodePort" || kind == "LoadBalancer";
    if wants_node_ports {
        default(spec, &["externalTrafficPolicy"], json!("Cluster"));
    }
    if kind == "LoadBalancer" {
        default(spec, &["allocateLoadBalancerNodePorts"], json!(true));
    }
    let mut taken = node_ports(cluster, key);
    let old_ports: Vec<Value> = obj::items(&old["spec"]["ports"]).to_vec();
    if !spec["ports"].is_null() {
        for p in obj::array_mut(spec, &["ports"]) {
            default(p, &["protocol"], json!("TCP"));
            let port = p["port"].clone();
            default(p, &["targetPort"], port);
            if wants_node_ports && p["nodePort"].is_null() {
                let kept = old_ports
                    .iter()
                    .find(|o| o["port"] == p["port"] && o["protocol"] == p["protocol"])
                    .and_then(|o| o["nodePort"].as_i64());
                let start = (crate::common::hash::fnv64(&[
                    &key.namespace,
                    &key.name,
                    &p["port"].to_string(),
                ]) % 2768) as i64;
                let port = kept.or_else(|| {
                    (0..2768)
                        .map(|i| 30_000 + (start + i) % 2768)
                        .find(|n| !taken.contains(n))
                });
                if let Some(n) = port {
                    taken.insert(n);
                    obj::set(p, &["nodePort"], json!(n));
                }
            }
        }
    }
    default(object, &["status", "loadBalancer"], json!({}));
}

fn default_class(cluster: &ClusterState) -> Option<String> {
    cluster
        .store
        .list("storage.k8s.io", "storageclasses", None)
        .into_iter()
        .find(|(_, sc)| {
            obj::annotation(sc, "storageclass.kubernetes.io/is-default-class") == Some("true")
        })
        .map(|(k, _)| k.name.clone())
}

fn pvc_create(object: &mut Value, cluster: &ClusterState) {
    default(object, &["spec", "volumeMode"], json!("Filesystem"));
    if object["spec"].get("storageClassName").is_none() {
        if let Some(class) = default_class(cluster) {
            obj::set(object, &["spec", "storageClassName"], json!(class));
        }
    }
    obj::add_finalizer(object, PVC_PROTECTION);
    default(object, &["status", "phase"], json!("Pending"));
}

fn pvc_update(old: &Value, object: &mut Value, causes: &mut Vec<Cause>) {
    default(object, &["spec", "volumeMode"], json!("Filesystem"));
    if old.is_null() {
        return;
    }
    for field in ["volumeName", "storageClassName"] {
        if object["spec"].get(field).is_none() && !old["spec"][field].is_null() {
            obj::set(object, &["spec", field], old["spec"][field].clone());
        }
    }
    let comparable = |v: &Value, keep_volume: bool| {
        let mut s = v["spec"].clone();
        obj::remove(&mut s, &["resources", "requests"]);
        obj::remove(&mut s, &["volumeAttributesClassName"]);
        if !keep_volume {
            obj::remove(&mut s, &["volumeName"]);
        }
        if s["resources"].as_object().is_some_and(|m| m.is_empty()) {
            obj::remove(&mut s, &["resources"]);
        }
        s
    };
    let was_bound = !old["spec"]["volumeName"].is_null();
    if comparable(old, was_bound) != comparable(object, was_bound) {
        causes.push((
            "spec".into(),
            "Forbidden: spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims".into(),
        ));
    }
    let size = |v: &Value| obj::storage_bytes(&v["spec"]["resources"]["requests"]["storage"]);
    if size(object) < size(old) {
        causes.push((
            "spec.resources.requests.storage".into(),
            "Forbidden: field can not be less than previous value".into(),
        ));
    }
}

fn pv_create(object: &mut Value) {
    default(
        object,
        &["spec", "persistentVolumeReclaimPolicy"],
        json!("Retain"),
    );
    default(object, &["spec", "volumeMode"], json!("Filesystem"));
    obj::add_finalizer(object, PV_PROTECTION);
    default(object, &["status", "phase"], json!("Pending"));
}

/// Fields of a PersistentVolume's spec that name where its data lives.
const PV_SOURCES: [&str; 21] = [
    "nfs",
    "hostPath",
    "csi",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "local",
    "iscsi",
    "cephfs",
    "rbd",
    "glusterfs",
    "fc",
    "flexVolume",
    "azureDisk",
    "azureFile",
    "vsphereVolume",
    "quobyte",
    "portworxVolume",
    "scaleIO",
    "storageos",
    "photonPersistentDisk",
    "cinder",
];

fn pv_update(old: &Value, object: &mut Value, causes: &mut Vec<Cause>) {
    default(
        object,
        &["spec", "persistentVolumeReclaimPolicy"],
        json!("Retain"),
    );
    default(object, &["spec", "volumeMode"], json!("Filesystem"));
    if old.is_null() {
        return;
    }
    let mutable = [
        "capacity",
        "persistentVolumeReclaimPolicy",
        "claimRef",
        "mountOptions",
        "nodeAffinity",
    ];
    if PV_SOURCES
        .iter()
        .any(|s| old["spec"][*s] != object["spec"][*s])
    {
        causes.push((
            "spec.persistentvolumesource".into(),
            "Forbidden: spec.persistentvolumesource is immutable after creation".into(),
        ));
    }
    let fields: BTreeSet<&str> = old["spec"]
        .as_object()
        .into_iter()
        .chain(object["spec"].as_object())
        .flat_map(|m| m.keys().map(String::as_str))
        .collect();
    for f in fields {
        if mutable.contains(&f) || PV_SOURCES.contains(&f) {
            continue;
        }
        if old["spec"][f] != object["spec"][f] {
            causes.push(immutable(&format!("spec.{f}"), &object["spec"][f]));
        }
    }
}

fn namespace(key: &ObjKey, object: &mut Value, creating: bool) {
    obj::set(
        object,
        &["metadata", "labels", "kubernetes.io/metadata.name"],
        json!(key.name),
    );
    default(object, &["spec", "finalizers"], json!(["kubernetes"]));
    default(object, &["status", "phase"], json!("Active"));
    if creating {
        // The store keeps an object being deleted only while `metadata.finalizers` has
        // something; mirroring the namespace controller's finalizer there is what keeps a
        // deleted namespace Terminating until it is empty, as kubectl waits for.
        obj::add_finalizer(object, "kubernetes");
    }
}

/// ConfigMaps and Secrets marked `immutable` keep their data.
fn data_immutable(old: &Value, object: &Value, causes: &mut Vec<Cause>) {
    if old["immutable"] != true {
        return;
    }
    let message = "Forbidden: field is immutable when `immutable` is set";
    for field in ["data", "binaryData"] {
        if old[field] != object[field] {
            causes.push((field.to_string(), message.to_string()));
        }
    }
    if object["immutable"] != true {
        causes.push(("immutable".into(), message.into()));
    }
}

/// A pod's QoS class, as the API server sets `status.qosClass` and the kubelet
/// ranks pods by it: no requests or limits at all, every container's limits set and
/// requests equal to them, or neither.
pub(crate) fn qos_class(spec: &Value) -> &'static str {
    let all: Vec<&Value> = obj::items(&spec["containers"])
        .iter()
        .chain(obj::items(&spec["initContainers"]))
        .collect();
    let set = |c: &Value, part: &str, r: &str| !c["resources"][part][r].is_null();
    if all.iter().all(|c| {
        ["cpu", "memory"]
            .iter()
            .all(|r| !set(c, "requests", r) && !set(c, "limits", r))
    }) {
        return "BestEffort";
    }
    let guaranteed = all.iter().all(|c| {
        ["cpu", "memory"].iter().all(|r| {
            let limit = &c["resources"]["limits"][*r];
            let request = &c["resources"]["requests"][*r];
            !limit.is_null() && (request.is_null() || request == limit)
        })
    });
    if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

#[cfg(test)]
mod tests {
    use super::super::controllers::testkit::{self, Harness};
    use super::*;

    fn create(
        h: &Harness,
        group: &str,
        resource: &str,
        namespace: &str,
        mut object: Value,
    ) -> Result<Value, Vec<Cause>> {
        let key = ObjKey::new(group, resource, namespace, obj::name(&object));
        on_create(&key, &mut object, &h.cluster)?;
        Ok(object)
    }

    fn job() -> Value {
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train"},
               "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "python:3.12"}]}}}})
    }

    #[test]
    fn secret_string_data_is_written_into_data_and_never_stored() {
        let h = Harness::standard(vec![]);
        let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
            "data": {"a": "b2xk", "keep": "eA=="}, "stringData": {"a": "new", "token": "t0k"}});
        let s = create(&h, "", "secrets", "default", secret).expect("a valid secret");
        assert!(s.get("stringData").is_none(), "{s}");
        assert_eq!(
            s["data"],
            json!({"a": "bmV3", "keep": "eA==", "token": "dDBr"})
        );
        assert_eq!(s["type"], "Opaque");
    }

    #[test]
    fn the_system_priority_classes_resolve_to_their_values() {
        for (class, want) in [
            (Some("system-cluster-critical"), 2_000_000_000),
            (Some("system-node-critical"), 2_000_001_000),
            (None, 0),
        ] {
            let mut p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "dns"},
                "spec": {"priorityClassName": class, "containers": [{"name": "c", "image": "x"}]}});
            super::pod(&mut p);
            assert_eq!(p["spec"]["priority"], want, "{class:?}");
        }
    }

    #[test]
    fn jobs_get_their_selector_labels_and_defaults() {
        let h = Harness::standard(vec![]);
        let j = create(&h, "batch", "jobs", "default", job()).expect("a valid job");
        let uid = j["metadata"]["uid"]
            .as_str()
            .expect("a uid assigned before storing");
        assert_eq!(
            j["spec"]["selector"],
            json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid}})
        );
        let labels = &j["spec"]["template"]["metadata"]["labels"];
        assert_eq!(labels["batch.kubernetes.io/job-name"], "train");
        assert_eq!(labels["controller-uid"], uid);
        let spec = &j["spec"];
        for (field, want) in [
            ("backoffLimit", json!(6)),
            ("completions", json!(1)),
            ("parallelism", json!(1)),
            ("completionMode", json!("NonIndexed")),
            ("suspend", json!(false)),
            ("podReplacementPolicy", json!("TerminatingOrFailed")),
        ] {
            assert_eq!(spec[field], want, "{field}");
        }
        assert!(spec.get("manualSelector").is_none());
        let pod = &spec["template"]["spec"];
        assert_eq!(pod["dnsPolicy"], "ClusterFirst");
        assert_eq!(pod["schedulerName"], "default-scheduler");
        assert_eq!(pod["terminationGracePeriodSeconds"], 30);
        assert_eq!(pod["containers"][0]["imagePullPolicy"], "IfNotPresent");
        assert_eq!(
            pod["containers"][0]["terminationMessagePath"],
            "/dev/termination-log"
        );
        let stored_uid = {
            let mut h = h;
            h.create("batch", "jobs", "default", job())["metadata"]["uid"].clone()
        };
        assert!(stored_uid.is_string());
    }

    #[test]
    fn job_validation() {
        let h = Harness::standard(vec![]);
        let mut always = job();
        always["spec"]["template"]["spec"]["restartPolicy"] = json!("Always");
        let mut selected = job();
        selected["spec"]["selector"] = json!({"matchLabels": {"a": "b"}});
        let cases = [
            (
                always,
                "spec.template.spec.restartPolicy",
                "Unsupported value: \"Always\": supported values: \"OnFailure\", \"Never\"",
            ),
            (
                selected,
                "spec.selector",
                "Invalid value: {\"matchLabels\":{\"a\":\"b\"}}: `selector` will be auto-generated",
            ),
        ];
        for (object, field, message) in cases {
            let causes = create(&h, "batch", "jobs", "default", object).expect_err("refused");
            assert_eq!(causes, vec![(field.to_string(), message.to_string())]);
        }
        let mut missing = job();
        obj::remove(&mut missing, &["spec", "template", "spec", "restartPolicy"]);
        assert!(
            create(&h, "batch", "jobs", "default", missing).is_err(),
            "no restartPolicy defaults to Always"
        );
    }

    #[test]
    fn a_job_template_is_immutable() {
        let mut h = Harness::standard(vec![]);
        let stored = h.create("batch", "jobs", "default", job());
        // An apply that leaves the generated selector out keeps it.
        let mut same = stored.clone();
        obj::remove(&mut same, &["spec", "selector"]);
        obj::remove(&mut same, &["spec", "backoffLimit"]);
        let kept = h
            .try_put("batch", "jobs", "default", same)
            .expect("an unchanged job");
        assert_eq!(kept["spec"]["selector"], stored["spec"]["selector"]);
        assert_eq!(kept["spec"]["backoffLimit"], 6);
        let mut changed = stored.clone();
        changed["spec"]["template"]["spec"]["containers"][0]["image"] = json!("python:3.13");
        changed["spec"]["completions"] = json!(3);
        changed["spec"]["parallelism"] = json!(2);
        let causes = h
            .try_put("batch", "jobs", "default", changed)
            .expect_err("refused");
        let fields: Vec<&str> = causes.iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(fields, ["spec.template", "spec.completions"]);
        assert!(
            causes[0].1.starts_with("Invalid value: {"),
            "{}",
            causes[0].1
        );
        assert!(
            causes[0].1.ends_with(": field is immutable"),
            "{}",
            causes[0].1
        );
        assert_eq!(causes[1].1, "Invalid value: 3: field is immutable");
        let mut scaled = stored;
        scaled["spec"]["parallelism"] = json!(4);
        scaled["spec"]["suspend"] = json!(true);
        assert!(
            h.try_put("batch", "jobs", "default", scaled).is_ok(),
            "parallelism and suspend change in place"
        );
    }

    #[test]
    fn services_get_unique_cluster_ips() {
        let mut h = Harness::standard(vec![]);
        let mut ips = BTreeSet::new();
        for i in 0..50 {
            let svc = h.create(
                "",
                "services",
                "default",
                json!({
                    "apiVersion": "v1", "kind": "Service", "metadata": {"name": format!("s{i}")},
                    "spec": {"selector": {"app": "x"}, "ports": [{"port": 80}]},
                }),
            );
            let ip = svc["spec"]["clusterIP"]
                .as_str()
                .expect("an address")
                .to_string();
            assert!(ip.starts_with("10.96."), "{ip}");
            assert_eq!(svc["spec"]["clusterIPs"], json!([ip]));
            assert!(ips.insert(ip), "addresses are unique");
        }
        let svc = h.get("", "services", "default", "s0");
        let spec = &svc["spec"];
        assert_eq!(spec["type"], "ClusterIP");
        assert_eq!(spec["sessionAffinity"], "None");
        assert_eq!(spec["ipFamilies"], json!(["IPv4"]));
        assert_eq!(spec["ipFamilyPolicy"], "SingleStack");
        assert_eq!(spec["internalTrafficPolicy"], "Cluster");
        assert_eq!(
            spec["ports"][0],
            json!({"port": 80, "protocol": "TCP", "targetPort": 80})
        );
        let headless = h.create(
            "",
            "services",
            "default",
            json!({
                "apiVersion": "v1", "kind": "Service", "metadata": {"name": "headless"},
                "spec": {"clusterIP": "None", "selector": {"app": "x"}},
            }),
        );
        assert_eq!(headless["spec"]["clusterIP"], "None");
        let taken = spec["clusterIP"].as_str().unwrap_or_default().to_string();
        let clash = create(
            &h,
            "",
            "services",
            "default",
            json!({
                "apiVersion": "v1", "kind": "Service", "metadata": {"name": "clash"}, "spec": {"clusterIP": taken},
            }),
        );
        assert!(clash.is_err_and(|c| c[0].1.ends_with("provided IP is already allocated")));
        // An update without the address keeps it; changing it is refused.
        let mut again = svc.clone();
        obj::remove(&mut again, &["spec", "clusterIP"]);
        obj::remove(&mut again, &["spec", "clusterIPs"]);
        let kept = h.try_put("", "services", "default", again).expect("kept");
        assert_eq!(kept["spec"]["clusterIP"], taken.as_str());
        let mut moved = svc;
        moved["spec"]["clusterIP"] = json!("10.96.200.200");
        let causes = h
            .try_put("", "services", "default", moved)
            .expect_err("refused");
        assert_eq!(causes[0].0, "spec.clusterIPs[0]");
        let np = h.create(
            "",
            "services",
            "default",
            json!({
                "apiVersion": "v1", "kind": "Service", "metadata": {"name": "np"},
                "spec": {"type": "NodePort", "ports": [{"port": 80}]},
            }),
        );
        let port = np["spec"]["ports"][0]["nodePort"]
            .as_i64()
            .expect("a node port");
        assert!((30_000..=32_767).contains(&port));
    }

    #[test]
    fn pods_get_admission_defaults() {
        let h = Harness::standard(vec![]);
        let pod = create(&h, "", "pods", "default", json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "a", "image": "redis"}, {"name": "b", "image": "redis:7.2"}]},
        }))
        .expect("a valid pod");
        let spec = &pod["spec"];
        assert_eq!(spec["restartPolicy"], "Always");
        assert_eq!(spec["serviceAccountName"], "default");
        assert_eq!(spec["containers"][0]["imagePullPolicy"], "Always");
        assert_eq!(spec["containers"][1]["imagePullPolicy"], "IfNotPresent");
        assert_eq!(spec["tolerations"].as_array().map(Vec::len), Some(2));
        assert_eq!(pod["status"]["phase"], "Pending");
        assert_eq!(pod["status"]["qosClass"], "BestEffort");
    }

    #[test]
    fn pod_specs_are_mostly_immutable() {
        let mut h = Harness::standard(vec![]);
        let pod = h.create(
            "",
            "pods",
            "default",
            json!({
                "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                "spec": {"containers": [{"name": "a", "image": "nginx:1.27"}]},
            }),
        );
        let mut image = pod.clone();
        image["spec"]["containers"][0]["image"] = json!("nginx:1.28");
        assert!(h.try_put("", "pods", "default", image).is_ok());
        let mut env = h.get("", "pods", "default", "p");
        env["spec"]["containers"][0]["env"] = json!([{"name": "A", "value": "1"}]);
        let causes = h.try_put("", "pods", "default", env).expect_err("refused");
        assert_eq!(causes[0].0, "spec");
        assert!(causes[0]
            .1
            .starts_with("Forbidden: pod updates may not change fields other than"));
    }

    #[test]
    fn claims_volumes_and_namespaces() {
        let mut h = Harness::standard(vec![]);
        let pvc = h.create("", "persistentvolumeclaims", "default", json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "c"},
            "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "", "resources": {"requests": {"storage": "1Gi"}}},
        }));
        assert_eq!(pvc["spec"]["volumeMode"], "Filesystem");
        assert_eq!(pvc["metadata"]["finalizers"], json!([PVC_PROTECTION]));
        let mut bigger = pvc.clone();
        bigger["spec"]["resources"]["requests"]["storage"] = json!("2Gi");
        assert!(h
            .try_put("", "persistentvolumeclaims", "default", bigger)
            .is_ok());
        let mut modes = h.get("", "persistentvolumeclaims", "default", "c");
        modes["spec"]["accessModes"] = json!(["ReadWriteOnce"]);
        let causes = h
            .try_put("", "persistentvolumeclaims", "default", modes)
            .expect_err("refused");
        assert_eq!(causes[0].0, "spec");

        let pv = h.create(
            "",
            "persistentvolumes",
            "",
            testkit::nfs_pv("v", "10.0.0.2", "/a", "1Ti"),
        );
        assert_eq!(pv["spec"]["persistentVolumeReclaimPolicy"], "Retain");
        assert_eq!(pv["metadata"]["finalizers"], json!([PV_PROTECTION]));
        let mut resized = pv.clone();
        resized["spec"]["capacity"]["storage"] = json!("2Ti");
        resized["spec"]["persistentVolumeReclaimPolicy"] = json!("Delete");
        assert!(h.try_put("", "persistentvolumes", "", resized).is_ok());
        let mut moved = h.get("", "persistentvolumes", "", "v");
        moved["spec"]["nfs"]["path"] = json!("/b");
        moved["spec"]["accessModes"] = json!(["ReadOnlyMany"]);
        let causes = h
            .try_put("", "persistentvolumes", "", moved)
            .expect_err("refused");
        let fields: Vec<&str> = causes.iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(fields, ["spec.persistentvolumesource", "spec.accessModes"]);

        let ns = h.get("", "namespaces", "", "default");
        assert_eq!(
            ns["metadata"]["labels"]["kubernetes.io/metadata.name"],
            "default"
        );
        assert_eq!(ns["spec"]["finalizers"], json!(["kubernetes"]));
    }

    #[test]
    fn workloads_need_matching_selectors() {
        let mut h = Harness::standard(vec![]);
        let d = h.create("apps", "deployments", "default", json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
            "spec": {"selector": {"matchLabels": {"app": "d"}},
                     "template": {"metadata": {"labels": {"app": "d"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}},
        }));
        assert_eq!(d["spec"]["replicas"], 1);
        assert_eq!(
            d["spec"]["strategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}})
        );
        assert_eq!(d["spec"]["revisionHistoryLimit"], 10);
        assert_eq!(d["spec"]["progressDeadlineSeconds"], 600);
        let mut applied = d.clone();
        obj::remove(&mut applied, &["spec", "replicas"]);
        assert_eq!(
            h.try_put("apps", "deployments", "default", applied)
                .expect("kept")["spec"]["replicas"],
            1
        );
        let mut reselect = d;
        reselect["spec"]["selector"] = json!({"matchLabels": {"app": "e"}});
        reselect["spec"]["template"]["metadata"]["labels"] = json!({"app": "e"});
        let causes = h
            .try_put("apps", "deployments", "default", reselect)
            .expect_err("refused");
        assert_eq!(causes[0].0, "spec.selector");
        let mismatch = create(
            &h,
            "apps",
            "deployments",
            "default",
            json!({
                "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "m"},
                "spec": {"selector": {"matchLabels": {"app": "m"}},
                         "template": {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}},
            }),
        );
        assert!(mismatch.is_err_and(|c| c[0].0 == "spec.template.metadata.labels"));
    }

    #[test]
    fn pull_policies() {
        for (image, want) in [
            ("redis", "Always"),
            ("redis:latest", "Always"),
            ("redis:7.2", "IfNotPresent"),
            ("localhost:5000/app", "Always"),
            ("localhost:5000/app:v1", "IfNotPresent"),
            ("app@sha256:abc", "IfNotPresent"),
        ] {
            assert_eq!(pull_policy(image), want, "{image}");
        }
    }

    #[test]
    fn objects_of_the_wrong_shape_are_refused_or_defaulted_without_panicking() {
        let h = Harness::standard(vec![]);
        let kinds = [
            ("", "pods"),
            ("batch", "jobs"),
            ("batch", "cronjobs"),
            ("apps", "deployments"),
            ("apps", "statefulsets"),
            ("", "services"),
            ("", "persistentvolumeclaims"),
            ("", "persistentvolumes"),
            ("", "namespaces"),
            ("", "secrets"),
        ];
        let shapes = [
            json!({"metadata": {"name": "x"}, "spec": "x"}),
            json!({"metadata": {"name": "x"}, "spec": {"template": [], "containers": "x", "ports": [1, "a"], "volumes": [null]}}),
            json!({"metadata": {"name": "x"}, "spec": {"template": {"spec": {"containers": [1, {"env": "x", "ports": "y"}]}}}}),
            json!({"metadata": "x"}),
        ];
        for (group, resource) in kinds {
            for shape in &shapes {
                let key = ObjKey::new(group, resource, "default", "x");
                let mut object = shape.clone();
                let _ = on_create(&key, &mut object, &h.cluster);
                let mut again = shape.clone();
                let _ = on_update(&key, &object, &mut again, &h.cluster);
            }
        }
    }
}
