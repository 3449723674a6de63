//! `meta.k8s.io/v1` Table responses, which `kubectl get` asks for: the columns kubectl
//! users know for the common built-in types, a CRD's `additionalPrinterColumns` (with
//! the small JSONPath subset they use), and NAME/AGE for everything else.

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use super::discovery::ResourceType;

/// `(name, type, priority, description)`; priority 1 columns show with `-o wide`.
type Column = (&'static str, &'static str, u8, &'static str);

const NAME: Column = (
    "Name",
    "string",
    0,
    "Name must be unique within a namespace.",
);
const AGE: Column = (
    "Age",
    "string",
    0,
    "CreationTimestamp is a timestamp representing the server time when this object was created.",
);

/// What a Table row carries as its `object`: `includeObject=None|Metadata|Object`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Include {
    None,
    Metadata,
    Object,
}

impl Include {
    pub(crate) fn parse(value: Option<&str>) -> Include {
        match value {
            Some("None") => Include::None,
            Some("Object") => Include::Object,
            _ => Include::Metadata,
        }
    }
}

/// Whether an `Accept` header asks for a Table.
pub(crate) fn wants_table(accept: &str) -> bool {
    accept.split(',').any(|media| {
        media
            .split(';')
            .map(str::trim)
            .any(|param| param == "as=Table")
    })
}

/// kubectl's short durations: `45s`, `3m12s`, `5h`, `12d`…
pub(crate) fn human_duration(d: chrono::Duration) -> String {
    let secs = d.num_seconds();
    if secs < -1 {
        return "<invalid>".into();
    }
    let secs = secs.max(0);
    if secs < 120 {
        return format!("{secs}s");
    }
    let minutes = secs / 60;
    if minutes < 10 {
        let s = secs % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = minutes / 60;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{h}h", hours / 24)
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    let years = hours / 24 / 365;
    if years < 8 {
        let days = hours / 24 - years * 365;
        return if days == 0 {
            format!("{years}y")
        } else {
            format!("{years}y{days}d")
        };
    }
    format!("{years}y")
}

fn since(t: &Value, now: DateTime<Utc>) -> String {
    t.as_str()
        .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
        .map(|t| human_duration(now - t.with_timezone(&Utc)))
        .unwrap_or_else(|| "<unknown>".into())
}

fn s(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn int(v: &Value) -> i64 {
    v.as_i64().unwrap_or(0)
}

fn or_none(text: String) -> String {
    if text.is_empty() {
        "<none>".into()
    } else {
        text
    }
}

fn containers_and_images(spec: &Value) -> (String, String) {
    let list = spec["containers"].as_array().cloned().unwrap_or_default();
    let names: Vec<String> = list.iter().map(|c| s(&c["name"])).collect();
    let images: Vec<String> = list.iter().map(|c| s(&c["image"])).collect();
    (names.join(","), images.join(","))
}

/// `a=b,c in (d)` from a LabelSelector object.
pub(crate) fn selector_string(selector: &Value) -> String {
    let mut parts: Vec<String> = selector["matchLabels"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", s(v)))
        .collect();
    for expr in selector["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let key = s(&expr["key"]);
        let values: Vec<String> = expr["values"]
            .as_array()
            .into_iter()
            .flatten()
            .map(s)
            .collect();
        parts.push(match expr["operator"].as_str().unwrap_or_default() {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key,
            _ => format!("!{key}"),
        });
    }
    parts.join(",")
}

fn access_modes(modes: &Value) -> String {
    modes
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(|m| match m {
            "ReadWriteOnce" => "RWO",
            "ReadOnlyMany" => "ROX",
            "ReadWriteMany" => "RWX",
            "ReadWriteOncePod" => "RWOP",
            other => other,
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn pod_row(pod: &Value) -> (String, i64, String) {
    let status = &pod["status"];
    let total = pod["spec"]["containers"].as_array().map_or(0, Vec::len);
    let mut reason = s(&status["phase"]);
    if let Some(r) = status["reason"].as_str() {
        reason = r.to_string();
    }
    let mut ready = 0;
    let mut restarts = 0;
    let mut running = false;
    for cs in status["containerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .rev()
    {
        restarts += int(&cs["restartCount"]);
        let state = &cs["state"];
        if let Some(r) = state["waiting"]["reason"].as_str() {
            reason = r.to_string();
        } else if let Some(r) = state["terminated"]["reason"].as_str() {
            reason = r.to_string();
        } else if state.get("terminated").is_some() {
            reason = format!("ExitCode:{}", int(&state["terminated"]["exitCode"]));
        } else if state.get("running").is_some() && cs["ready"] == Value::Bool(true) {
            running = true;
            ready += 1;
        }
    }
    if reason == "Completed" && running {
        reason = "Running".into();
    }
    if pod["metadata"].get("deletionTimestamp").is_some() {
        reason = "Terminating".into();
    }
    (format!("{ready}/{total}"), restarts, reason)
}

fn job_status(job: &Value) -> String {
    if job["metadata"].get("deletionTimestamp").is_some() {
        return "Terminating".into();
    }
    for (kind, shown) in [
        ("Complete", "Complete"),
        ("Failed", "Failed"),
        ("Suspended", "Suspended"),
        ("FailureTarget", "FailureTarget"),
        ("SuccessCriteriaMet", "SuccessCriteriaMet"),
    ] {
        if job["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == kind && c["status"] == "True")
        {
            return shown.into();
        }
    }
    "Running".into()
}

fn job_duration(job: &Value, now: DateTime<Utc>) -> String {
    let parse = |v: &Value| {
        v.as_str()
            .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
            .map(|t| t.with_timezone(&Utc))
    };
    let Some(start) = parse(&job["status"]["startTime"]) else {
        return String::new();
    };
    let end = parse(&job["status"]["completionTime"]).unwrap_or(now);
    human_duration(end - start)
}

fn service_ports(svc: &Value) -> String {
    let ports: Vec<String> = svc["spec"]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            let proto = p["protocol"].as_str().unwrap_or("TCP");
            match p["nodePort"].as_i64() {
                Some(node) => format!("{}:{node}/{proto}", int(&p["port"])),
                None => format!("{}/{proto}", int(&p["port"])),
            }
        })
        .collect();
    or_none(ports.join(","))
}

fn external_ip(svc: &Value) -> String {
    let mut ips: Vec<String> = svc["spec"]["externalIPs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(s)
        .collect();
    if svc["spec"]["type"] == "LoadBalancer" {
        let ingress: Vec<String> = svc["status"]["loadBalancer"]["ingress"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|i| s(i.get("ip").or(i.get("hostname")).unwrap_or(&Value::Null)))
            .collect();
        if ingress.is_empty() && ips.is_empty() {
            return "<pending>".into();
        }
        ips.extend(ingress);
    }
    or_none(ips.join(","))
}

fn node_status(node: &Value) -> String {
    let ready = node["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready");
    let mut status = match ready.and_then(|c| c["status"].as_str()) {
        Some("True") => "Ready".to_string(),
        Some(_) => "NotReady".to_string(),
        None => "Unknown".to_string(),
    };
    if node["spec"]["unschedulable"] == Value::Bool(true) {
        status.push_str(",SchedulingDisabled");
    }
    status
}

fn node_roles(node: &Value) -> String {
    let roles: Vec<&str> = node["metadata"]["labels"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, _)| k.strip_prefix("node-role.kubernetes.io/"))
        .collect();
    or_none(roles.join(","))
}

fn node_address(node: &Value, kind: &str) -> String {
    or_none(
        node["status"]["addresses"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|a| a["type"] == kind)
            .map(|a| s(&a["address"]))
            .unwrap_or_default(),
    )
}

fn count(v: &Value) -> i64 {
    v.as_object().map_or(0, |m| m.len() as i64)
}

/// What a built-in type's row is made from: its type, the object, its spec and status, its NAME
/// and AGE cells, the time.
struct Row<'a> {
    rt: &'a ResourceType,
    obj: &'a Value,
    spec: &'a Value,
    status: &'a Value,
    name: Value,
    age: Value,
    now: DateTime<Utc>,
}

/// The columns and cells of a built-in type, or `None` for NAME/AGE.
fn builtin(
    rt: &ResourceType,
    obj: &Value,
    now: DateTime<Utc>,
) -> Option<(Vec<Column>, Vec<Value>)> {
    let row = Row {
        rt,
        obj,
        spec: &obj["spec"],
        status: &obj["status"],
        name: json!(s(&obj["metadata"]["name"])),
        age: json!(since(&obj["metadata"]["creationTimestamp"], now)),
        now,
    };
    let group = if rt.group == "events.k8s.io" {
        ""
    } else {
        rt.group.as_str()
    };
    Some(match (group, rt.plural.as_str()) {
        ("", "pods") => row_pods(row),
        ("batch", "jobs") => row_jobs(row),
        ("batch", "cronjobs") => row_cronjobs(row),
        ("", "services") => row_services(row),
        ("", "persistentvolumeclaims") => row_persistentvolumeclaims(row),
        ("", "persistentvolumes") => row_persistentvolumes(row),
        ("", "nodes") => row_nodes(row),
        ("", "namespaces") => row_namespaces(row),
        ("", "configmaps") => row_configmaps(row),
        ("", "secrets") => row_secrets(row),
        ("", "events") => row_events(row),
        ("apps", "deployments") => row_deployments(row),
        ("apps", "replicasets") => row_replicasets(row),
        ("apps", "statefulsets") => row_statefulsets(row),
        ("apps", "daemonsets") => row_daemonsets(row),
        ("apiextensions.k8s.io", "customresourcedefinitions") => row_customresourcedefinitions(row),
        _ => return None,
    })
}

/// The columns `kubectl get pods` shows, and this object's cells.
fn row_pods(row: Row<'_>) -> (Vec<Column>, Vec<Value>) {
    let Row {
        obj,
        spec,
        status,
        name,
        age,
        ..
    } = row;
    let (ready, restarts, reason) = pod_row(obj);
    (
        vec![
            NAME,
            (
                "Ready",
                "string",
                0,
                "The aggregate readiness state of this pod for accepting traffic.",
            ),
            (
                "Status",
                "string",
                0,
                "The aggregate status of the containers in this pod.",
            ),
            (
                "Restarts",
                "string",
                0,
                "The number of times the containers in this pod have been restarted.",
            ),
            AGE,
            ("IP", "string", 1, "IP address allocated to the pod."),
            (
                "Node",
                "string",
                1,
                "Name of the node the pod is assigned to.",
            ),
            (
                "Nominated Node",
                "string",
                1,
                "Name of the node the pod is nominated to.",
            ),
            (
                "Readiness Gates",
                "string",
                1,
                "Readiness gates of the pod.",
            ),
        ],
        vec![
            name,
            json!(ready),
            json!(reason),
            json!(restarts),
            age,
            json!(or_none(s(&status["podIP"]))),
            json!(or_none(s(&spec["nodeName"]))),
            json!(or_none(s(&status["nominatedNodeName"]))),
            json!("<none>"),
        ],
    )
}

/// The columns `kubectl get jobs` shows, and this object's cells.
fn row_jobs(row: Row<'_>) -> (Vec<Column>, Vec<Value>) {
    let Row {
        obj,
        spec,
        status,
        name,
        age,
        now,
        ..
    } = row;
    let succeeded = int(&status["succeeded"]);
    let completions = match spec["completions"].as_i64() {
        Some(c) => format!("{succeeded}/{c}"),
        None => match spec["parallelism"].as_i64().filter(|p| *p > 1) {
            Some(p) => format!("{succeeded}/1 of {p}"),
            None => format!("{succeeded}/1"),
        },
    };
    let (containers, images) = containers_and_images(&spec["template"]["spec"]);
    (
        vec![
            NAME,
            ("Status", "string", 0, "Status of the job."),
            (
                "Completions",
                "string",
                0,
                "The completion status of the job.",
            ),
            (
                "Duration",
                "string",
                0,
                "Time required to complete the job.",
            ),
            AGE,
            (
                "Containers",
                "string",
                1,
                "Names of each container in the template.",
            ),
            (
                "Images",
                "string",
                1,
                "Images referenced by each container in the template.",
            ),
            (
                "Selector",
                "string",
                1,
                "Query over pods that should match the replicas count.",
            ),
        ],
        vec![
            name,
            json!(job_status(obj)),
            json!(completions),
            json!(job_duration(obj, now)),
            age,
            json!(containers),
            json!(images),
            json!(or_none(selector_string(&spec["selector"]))),
        ],
    )
}

/// The columns `kubectl get cronjobs` shows, and this object's cells.
fn row_cronjobs(row: Row<'_>) -> (Vec<Column>, Vec<Value>) {
    let Row {
        spec,
        status,
        name,
        age,
        now,
        ..
    } = row;
    (
        vec![
            NAME,
            ("Schedule", "string", 0, "The schedule in Cron format."),
            ("Timezone", "string", 0, "The time zone for the schedule."),
            (
                "Suspend",
                "boolean",
                0,
                "Whether the cron job is suspended.",
            ),
            ("Active", "integer", 0, "The number of active jobs."),
            (
                "Last Schedule",
                "string",
                0,
                "When the job was last scheduled.",
            ),
            AGE,
        ],
        vec![
            name,
            json!(s(&spec["schedule"])),
            json!(or_none(s(&spec["timeZone"]))),
            json!(spec["suspend"] == Value::Bool(true)),
            json!(status["active"].as_array().map_or(0, Vec::len)),
            json!(match status.get("lastScheduleTime") {
                Some(t) => since(t, now),
                None => "<none>".into(),
            }),
            age,
        ],
    )
}

/// The columns `kubectl get services` shows, and this object's cells.
fn row_services(row: Row<'_>) -> (Vec<Column>, Vec<Value>) {
    let Row {
        obj,
        spec,
        name,
        age,
        ..
    } = row;
    (
        vec![
            NAME,
            ("Type", "string", 0, "The type of the service."),
            ("Cluster-IP", "string", 0, "The cluster IP of the service."),
            (
                "External-IP",
                "string",
                0,
                "The external IPs of the service.",
            ),
            ("Port(s)", "string", 0, "The ports of the service."),
            AGE,
            ("Selector", "string", 1, "The pods this service routes to."),
        ],
        vec![
            name,
            json!(spec["type"].as_str().unwrap_or("ClusterIP")),
            json!(or_none(s(&spec["clusterIP"]))),
            json!(external_ip(obj)),
            json!(service_ports(obj)),
            age,
            json!(or_none(
                spec["selector"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(k, v)| format!("{k}={}", s(v)))
                    .collect::<Vec<_>>()
                    .join(",")
            )),
        ],
    )
}

/// The columns `kubectl get persistentvolumeclaims` shows, and this object's cells.
fn row_persistentvolumeclaims(row: Row<'_>) -> (Vec<Column>, Vec<Value>) {
    let Row {
        spec,
        status,
        name,
        age,
        ..
    } = row;
    (
        vec![
            NAME,
            ("Status", "string", 0, "The phase of the claim."),
            ("Volume", "string", 0, "The volume bound to the claim."),
            ("Capacity", "string", 0, "The capacity of the bound volume."),
            (
                "Access Modes",
                "string",
                0,
                "The access modes of the bound volume.",
            ),
            (
                "StorageClass",
                "string",
                0,
                "The storage class of the claim.",
            ),
            (
                "VolumeAttributesClass",
                "string",
                0,
                "The volume attributes class of the claim.",
            ),
            AGE,
            ("VolumeMode", "string", 1, "The volume mode of the claim."),
        ],
        vec![
            name,
            json!(s(&status["phase"])),
            json!(s(&spec["volumeName"])),
            json!(s(&status["capacity"]["storage"])),
            json!(access_modes(&status["accessModes"])),
            json!(s(&spec["storageClassName"])),
            json!(spec["volumeAttributesClassName"]
                .as_str()
                .unwrap_or("<unset>")),
            age,
            json!(spec["volumeMode"].as_str().unwrap_or("Filesystem")),
        ],
    )
}

/// The columns `kubectl get persistentvolumes` shows, and this object's cells.
fn row_persistentvolumes(row: Row<'_>) -> (Vec<Column>, Vec<Value>) {
    let Row {
        spec,
        status,
        name,
        age,
        ..
    } = row;
    let claim = &spec["claimRef"];
    let claim = if claim.is_object() {
        format!("{}/{}", s(&claim["namespace"]), s(&claim["name"]))
    } else {
        String::new()
    };
    (
        vec![
            NAME,
            ("Capacity", "string", 0, "The capacity of the volume."),
            (
                "Access Modes",
                "string",
                0,
                "The access modes of the volume.",
            ),
            (
                "Reclaim Policy",
                "string",
                0,
                "What happens to the volume when released.",
            ),
            ("Status", "string", 0, "The phase of the volume."),
            ("Claim", "string", 0, "The claim bound to the volume."),
            (
                "StorageClass",
                "string",
                0,
                "The storage class of the volume.",
            ),
            (
                "VolumeAttributesClass",
                "string",
                0,
                "The volume attributes class of the volume.",
            ),
            ("Reason", "string", 0, "Why the volume is in its phase."),
            AGE,
            ("VolumeMode", "string", 1, "The volume mode of the volume."),
        ],
        vec![
            name,
            json!(s(&spec["capacity"]["storage"])),
            json!(access_modes(&spec["accessModes"])),
            json!(spec["persistentVolumeReclaimPolicy"]
                .as_str()
                .unwrap_or("Retain")),
            json!(s(&status["phase"])),
            json!(claim),
            json!(s(&spec["storageClassName"])),
            json!(spec["volumeAttributesClassName"]
                .as_str()
                .unwrap_or("<unset>")),
            json!(s(&status["reason"])),
            age,
            json!(spec["volumeMode"].as_str().unwrap_or("Filesystem")),
        ],
    )
}

/// The columns `kubectl get nodes` shows, and this object's cells.
fn row_nodes(row: Row<'_>) -> (Vec<Column>, Vec<Value>) {
    let Row {
        obj,
        status,
        name,
        age,
        ..
    } = row;
    let info = &status["nodeInfo"];
    (
        vec![
            NAME,
            ("Status", "string", 0, "The status of the node."),
            ("Roles", "string", 0, "The roles of the node."),
            AGE,
            (
                "Version",
                "string",
                0,
                "Kubelet version reported by the node.",
            ),
            ("Internal-IP", "string", 1, "The internal IP of the node."),
            ("External-IP", "string", 1, "The external IP of the node."),
            ("OS-Image", "string", 1, "OS image reported by the node."),
            (
                "Kernel-Version",
                "string",
                1,
                "Kernel version reported by the node.",
            ),
            (
                "Container-Runtime",
                "string",
                1,
                "Container runtime reported by the node.",
            ),
        ],
        vec![
            name,
            json!(node_status(obj)),
            json!(node_roles(obj)),
            age,
            json!(s(&info["kubeletVersion"])),
            json!(node_address(obj, "InternalIP")),
            json!(node_address(obj, "ExternalIP")),
            json!(s(&info["osImage"])),
            json!(s(&info["kernelVersion"])),
            json!(s(&info["containerRuntimeVersion"])),
        ],
    )
}

/// The columns `kubectl get namespaces` shows, and this object's cells.
fn row_namespaces(row: Row<'_>) -> (Vec<Column>, Vec<Value>) {
    let Row {
        status, name, age, ..
    } = row;
    (
        vec![
            NAME,
            ("Status", "string", 0, "The status of the namespace."),
            AGE,
        ],
        vec![
            name,
            json!(status["phase"].as_str().unwrap_or("Active")),
            age,
        ],
    )
}

/// The columns `kubectl get configmaps` shows, and this object's cells.
fn row_configmaps(row: Row<'_>) -> (Vec<Column>, Vec<Value>) {
    let Row { obj, name, age, .. } = row;
    (
        vec![NAME, ("Data", "integer", 0, "Number of data entries."), AGE],
        vec![
            name,
            json!(count(&obj["data"]) + count(&obj["binaryData"])),
            age,
        ],
    )
}

/// The columns `kubectl get secrets` shows, and this object's cells.
fn row_secrets(row: Row<'_>) -> (Vec<Column>, Vec<Value>) {
    let Row { obj, name, age, .. } = row;
    (
        vec![
            NAME,
            ("Type", "string", 0, "The type of the secret."),
            ("Data", "integer", 0, "Number of data entries."),
            AGE,
        ],
        vec![
            name,
            json!(obj["type"].as_str().unwrap_or("Opaque")),
            json!(count(&obj["data"])),
            age,
        ],
    )
}

/// The columns `kubectl get events` shows, and this object's cells.
fn row_events(row: Row<'_>) -> (Vec<Column>, Vec<Value>) {
    let Row { rt, obj, now, .. } = row;
    let involved = if rt.group == "events.k8s.io" {
        &obj["regarding"]
    } else {
        &obj["involvedObject"]
    };
    let last = obj
        .get("lastTimestamp")
        .filter(|v| !v.is_null())
        .or(obj.get("eventTime").filter(|v| !v.is_null()))
        .unwrap_or(&obj["metadata"]["creationTimestamp"]);
    let message = if rt.group == "events.k8s.io" {
        &obj["note"]
    } else {
        &obj["message"]
    };
    (
        vec![
            (
                "Last Seen",
                "string",
                0,
                "Time since the event was last seen.",
            ),
            ("Type", "string", 0, "Type of the event."),
            ("Reason", "string", 0, "Why the event happened."),
            ("Object", "string", 0, "The object the event is about."),
            ("Message", "string", 0, "What happened."),
        ],
        vec![
            json!(since(last, now)),
            json!(s(&obj["type"])),
            json!(s(&obj["reason"])),
            json!(format!(
                "{}/{}",
                s(&involved["kind"]).to_lowercase(),
                s(&involved["name"])
            )),
            json!(s(message)),
        ],
    )
}

/// The columns `kubectl get deployments` shows, and this object's cells.
fn row_deployments(row: Row<'_>) -> (Vec<Column>, Vec<Value>) {
    let Row {
        spec,
        status,
        name,
        age,
        ..
    } = row;
    let (containers, images) = containers_and_images(&spec["template"]["spec"]);
    (
        vec![
            NAME,
            ("Ready", "string", 0, "Number of the pod with ready state."),
            ("Up-to-date", "integer", 0, "Total number of non-terminated pods targeted by this deployment that have the desired template spec."),
            ("Available", "integer", 0, "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment."),
            AGE,
            ("Containers", "string", 1, "Names of each container in the template."),
            ("Images", "string", 1, "Images referenced by each container in the template."),
            ("Selector", "string", 1, "Label selector for pods."),
        ],
        vec![
            name,
            json!(format!("{}/{}", int(&status["readyReplicas"]), spec["replicas"].as_i64().unwrap_or(1))),
            json!(int(&status["updatedReplicas"])),
            json!(int(&status["availableReplicas"])),
            age,
            json!(containers),
            json!(images),
            json!(or_none(selector_string(&spec["selector"]))),
        ],
    )
}

/// The columns `kubectl get replicasets` shows, and this object's cells.
fn row_replicasets(row: Row<'_>) -> (Vec<Column>, Vec<Value>) {
    let Row {
        spec,
        status,
        name,
        age,
        ..
    } = row;
    (
        vec![
            NAME,
            ("Desired", "integer", 0, "Number of desired pods."),
            ("Current", "integer", 0, "Number of actual replicas."),
            ("Ready", "integer", 0, "Number of ready replicas."),
            AGE,
        ],
        vec![
            name,
            json!(spec["replicas"].as_i64().unwrap_or(1)),
            json!(int(&status["replicas"])),
            json!(int(&status["readyReplicas"])),
            age,
        ],
    )
}

/// The columns `kubectl get statefulsets` shows, and this object's cells.
fn row_statefulsets(row: Row<'_>) -> (Vec<Column>, Vec<Value>) {
    let Row {
        spec,
        status,
        name,
        age,
        ..
    } = row;
    (
        vec![
            NAME,
            ("Ready", "string", 0, "Number of the pod with ready state."),
            AGE,
        ],
        vec![
            name,
            json!(format!(
                "{}/{}",
                int(&status["readyReplicas"]),
                spec["replicas"].as_i64().unwrap_or(1)
            )),
            age,
        ],
    )
}

/// The columns `kubectl get daemonsets` shows, and this object's cells.
fn row_daemonsets(row: Row<'_>) -> (Vec<Column>, Vec<Value>) {
    let Row {
        spec,
        status,
        name,
        age,
        ..
    } = row;
    let (containers, images) = containers_and_images(&spec["template"]["spec"]);
    let node_selector: Vec<String> = spec["template"]["spec"]["nodeSelector"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", s(v)))
        .collect();
    (
        vec![
            NAME,
            (
                "Desired",
                "integer",
                0,
                "The desired number of nodes running the daemon pod.",
            ),
            (
                "Current",
                "integer",
                0,
                "The number of nodes running at least one daemon pod.",
            ),
            (
                "Ready",
                "integer",
                0,
                "The number of nodes running a ready daemon pod.",
            ),
            (
                "Up-to-date",
                "integer",
                0,
                "The number of nodes running the updated daemon pod.",
            ),
            (
                "Available",
                "integer",
                0,
                "The number of nodes running an available daemon pod.",
            ),
            (
                "Node Selector",
                "string",
                0,
                "The node selector of the daemon pods.",
            ),
            AGE,
            (
                "Containers",
                "string",
                1,
                "Names of each container in the template.",
            ),
            (
                "Images",
                "string",
                1,
                "Images referenced by each container in the template.",
            ),
            ("Selector", "string", 1, "Label selector for pods."),
        ],
        vec![
            name,
            json!(int(&status["desiredNumberScheduled"])),
            json!(int(&status["currentNumberScheduled"])),
            json!(int(&status["numberReady"])),
            json!(int(&status["updatedNumberScheduled"])),
            json!(int(&status["numberAvailable"])),
            json!(or_none(node_selector.join(","))),
            age,
            json!(containers),
            json!(images),
            json!(or_none(selector_string(&spec["selector"]))),
        ],
    )
}

/// The row of apiextensions.k8s.io/customresourcedefinitions.
fn row_customresourcedefinitions(row: Row<'_>) -> (Vec<Column>, Vec<Value>) {
    let Row { obj, name, .. } = row;
    (
        vec![
            NAME,
            ("Created At", "date", 0, "When the definition was created."),
        ],
        vec![name, json!(s(&obj["metadata"]["creationTimestamp"]))],
    )
}

/// The results of a printer-column JSONPath (`.a.b`, `[0]`, `[*]`, `[?(@.k=="v")]`).
pub(crate) fn json_path<'a>(value: &'a Value, path: &str) -> Vec<&'a Value> {
    let mut current = vec![value];
    let mut rest = path
        .trim()
        .trim_start_matches('{')
        .trim_end_matches('}')
        .trim_start_matches('$');
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('[') {
            let Some(end) = after.find(']') else {
                return Vec::new();
            };
            let inner = after[..end].trim();
            rest = &after[end + 1..];
            current = current
                .into_iter()
                .flat_map(|v| -> Vec<&Value> {
                    if inner == "*" {
                        return match v {
                            Value::Array(a) => a.iter().collect(),
                            Value::Object(m) => m.values().collect(),
                            _ => Vec::new(),
                        };
                    }
                    if let Some(filter) = inner.strip_prefix("?(").and_then(|f| f.strip_suffix(')'))
                    {
                        let Some((lhs, rhs)) = filter.split_once("==") else {
                            return Vec::new();
                        };
                        let field = lhs.trim().trim_start_matches('@');
                        let want = rhs.trim().trim_matches(|c| c == '"' || c == '\'');
                        return v
                            .as_array()
                            .into_iter()
                            .flatten()
                            .filter(|item| {
                                json_path(item, field)
                                    .first()
                                    .is_some_and(|got| s(got) == want)
                            })
                            .collect();
                    }
                    if let Ok(i) = inner.parse::<usize>() {
                        return v.get(i).into_iter().collect();
                    }
                    let key = inner.trim_matches(|c| c == '"' || c == '\'');
                    v.get(key).into_iter().collect()
                })
                .collect();
        } else if let Some(after) = rest.strip_prefix('.') {
            let end = after.find(['.', '[']).unwrap_or(after.len());
            let key = &after[..end];
            rest = &after[end..];
            if key.is_empty() {
                continue;
            }
            current = current.into_iter().filter_map(|v| v.get(key)).collect();
        } else {
            return Vec::new();
        }
    }
    current
}

/// A printer column's cell: dates as ages, numbers and booleans as such, text otherwise.
fn printer_cell(obj: &Value, column: &Value, now: DateTime<Utc>) -> Value {
    let found = json_path(obj, column["jsonPath"].as_str().unwrap_or_default());
    let Some(first) = found.first() else {
        return Value::Null;
    };
    match column["type"].as_str().unwrap_or("string") {
        "date" => json!(since(first, now)),
        "integer" | "number" | "boolean" if found.len() == 1 => (*first).clone(),
        _ => json!(found.iter().map(|v| s(v)).collect::<Vec<_>>().join(",")),
    }
}

fn definitions(columns: &[Column]) -> Vec<Value> {
    columns
        .iter()
        .map(|(name, kind, priority, description)| {
            let format = if *name == "Name" { "name" } else { "" };
            json!({"name": name, "type": kind, "format": format, "description": description, "priority": priority})
        })
        .collect()
}

fn row_object(obj: &Value, include: Include) -> Option<Value> {
    match include {
        Include::None => None,
        Include::Object => Some(obj.clone()),
        Include::Metadata => Some(json!({
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": obj["metadata"],
        })),
    }
}

/// A Table of `objects`; `list_metadata` (resourceVersion, continue) is copied over.
pub(crate) fn table(
    rt: &ResourceType,
    objects: &[Value],
    now: DateTime<Utc>,
    include: Include,
    list_metadata: Value,
) -> Value {
    let custom = !rt.printer_columns.is_empty();
    let mut columns: Option<Vec<Value>> = None;
    let mut rows = Vec::new();
    for obj in objects {
        let (defs, cells) = if custom {
            let mut defs = definitions(&[NAME]);
            let mut cells = vec![json!(s(&obj["metadata"]["name"]))];
            for col in &rt.printer_columns {
                defs.push(json!({
                    "name": col["name"],
                    "type": col["type"].as_str().unwrap_or("string"),
                    "format": col["format"].as_str().unwrap_or_default(),
                    "description": col["description"].as_str().unwrap_or_default(),
                    "priority": col["priority"].as_i64().unwrap_or(0),
                }));
                cells.push(printer_cell(obj, col, now));
            }
            (defs, cells)
        } else {
            match builtin(rt, obj, now) {
                Some((cols, cells)) => (definitions(&cols), cells),
                None => (
                    definitions(&[NAME, AGE]),
                    vec![
                        json!(s(&obj["metadata"]["name"])),
                        json!(since(&obj["metadata"]["creationTimestamp"], now)),
                    ],
                ),
            }
        };
        columns.get_or_insert(defs);
        let mut row = json!({"cells": cells});
        if let Some(o) = row_object(obj, include) {
            row["object"] = o;
        }
        rows.push(row);
    }
    let columns = columns.unwrap_or_else(|| {
        if custom {
            let mut defs = definitions(&[NAME]);
            defs.extend(rt.printer_columns.iter().map(|col| {
                json!({"name": col["name"], "type": col["type"].as_str().unwrap_or("string"), "format": "",
                       "description": col["description"].as_str().unwrap_or_default(),
                       "priority": col["priority"].as_i64().unwrap_or(0)})
            }));
            defs
        } else {
            match builtin(rt, &json!({}), now) {
                Some((cols, _)) => definitions(&cols),
                None => definitions(&[NAME, AGE]),
            }
        }
    });
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_metadata,
        "columnDefinitions": columns,
        "rows": rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::k8s::discovery;
    use crate::k8s::ClusterState;

    fn rt(group: &str, plural: &str) -> ResourceType {
        let c = ClusterState::new(
            "c",
            crate::k8s::controllers::testkit::cloud(false),
            String::new(),
            String::new(),
            Vec::new(),
            "v1.31.8-sandbox".to_string(),
            Utc::now(),
        );
        discovery::find(&c, group, "v1", plural).expect("built-in type")
    }

    fn headers(t: &Value) -> Vec<String> {
        t["columnDefinitions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|c| c["priority"] == 0)
            .map(|c| s(&c["name"]).to_uppercase())
            .collect()
    }

    #[test]
    fn durations_read_like_kubectl() {
        let cases = [
            (0, "0s"),
            (59, "59s"),
            (119, "119s"),
            (125, "2m5s"),
            (600, "10m"),
            (3 * 3600 + 60, "3h1m"),
            (30 * 3600, "30h"),
            (50 * 3600, "2d2h"),
            (30 * 86400, "30d"),
            (3 * 365 * 86400, "3y"),
        ];
        for (secs, want) in cases {
            assert_eq!(
                human_duration(chrono::Duration::seconds(secs)),
                want,
                "{secs}s"
            );
        }
    }

    #[test]
    fn built_in_columns_match_kubectl() {
        let now = Utc::now();
        let cases = [
            ("", "pods", "NAME READY STATUS RESTARTS AGE"),
            ("batch", "jobs", "NAME STATUS COMPLETIONS DURATION AGE"),
            (
                "",
                "services",
                "NAME TYPE CLUSTER-IP EXTERNAL-IP PORT(S) AGE",
            ),
            (
                "",
                "persistentvolumeclaims",
                "NAME STATUS VOLUME CAPACITY ACCESS MODES STORAGECLASS VOLUMEATTRIBUTESCLASS AGE",
            ),
            ("", "nodes", "NAME STATUS ROLES AGE VERSION"),
            ("", "namespaces", "NAME STATUS AGE"),
            ("apps", "deployments", "NAME READY UP-TO-DATE AVAILABLE AGE"),
            (
                "apps",
                "daemonsets",
                "NAME DESIRED CURRENT READY UP-TO-DATE AVAILABLE NODE SELECTOR AGE",
            ),
            ("rbac.authorization.k8s.io", "roles", "NAME AGE"),
            (
                "apiextensions.k8s.io",
                "customresourcedefinitions",
                "NAME CREATED AT",
            ),
        ];
        for (group, plural, want) in cases {
            let t = table(&rt(group, plural), &[], now, Include::Metadata, json!({}));
            assert_eq!(headers(&t).join(" "), want, "{plural}");
        }
    }

    #[test]
    fn pod_and_job_cells() {
        let now = Utc::now();
        let created = crate::k8s::store::timestamp(now - chrono::Duration::seconds(30));
        let pod = json!({
            "metadata": {"name": "p", "namespace": "default", "creationTimestamp": created},
            "spec": {"containers": [{"name": "a"}, {"name": "b"}]},
            "status": {"phase": "Running", "containerStatuses": [
                {"name": "a", "ready": true, "restartCount": 1, "state": {"running": {}}},
                {"name": "b", "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}
            ]}
        });
        let t = table(
            &rt("", "pods"),
            &[pod],
            now,
            Include::Metadata,
            json!({"resourceVersion": "5"}),
        );
        assert_eq!(
            t["rows"][0]["cells"].as_array().map(|c| c[..5].to_vec()),
            Some(vec![
                json!("p"),
                json!("1/2"),
                json!("CrashLoopBackOff"),
                json!(1),
                json!("30s")
            ])
        );
        assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
        assert_eq!(t["rows"][0]["object"]["metadata"]["namespace"], "default");
        assert_eq!(t["metadata"]["resourceVersion"], "5");
        let job = json!({
            "metadata": {"name": "j", "creationTimestamp": created},
            "spec": {"completions": 2, "template": {"spec": {"containers": []}}},
            "status": {"succeeded": 2, "startTime": created,
                       "completionTime": crate::k8s::store::timestamp(now - chrono::Duration::seconds(10)),
                       "conditions": [{"type": "Complete", "status": "True"}]}
        });
        let t = table(&rt("batch", "jobs"), &[job], now, Include::None, json!({}));
        assert_eq!(
            t["rows"][0]["cells"].as_array().map(|c| c[..4].to_vec()),
            Some(vec![
                json!("j"),
                json!("Complete"),
                json!("2/2"),
                json!("20s")
            ])
        );
        assert!(t["rows"][0].get("object").is_none());
    }

    #[test]
    fn printer_columns_follow_json_paths() {
        let obj = json!({"metadata": {"name": "w"}, "spec": {"size": 3, "items": [{"n": "a"}, {"n": "b"}]},
                         "status": {"conditions": [{"type": "Other", "status": "False"}, {"type": "Ready", "status": "True"}]}});
        let cases = [
            (".spec.size", vec![json!(3)]),
            (
                ".status.conditions[?(@.type==\"Ready\")].status",
                vec![json!("True")],
            ),
            (".spec.items[*].n", vec![json!("a"), json!("b")]),
            (".spec.items[1].n", vec![json!("b")]),
            (".spec.missing", vec![]),
        ];
        for (path, want) in cases {
            let got: Vec<Value> = json_path(&obj, path).into_iter().cloned().collect();
            assert_eq!(got, want, "{path}");
        }
        let mut widgets = rt("", "configmaps");
        widgets.printer_columns = vec![
            json!({"name": "Size", "type": "integer", "jsonPath": ".spec.size"}),
            json!({"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"}),
        ];
        let t = table(&widgets, &[obj], Utc::now(), Include::Metadata, json!({}));
        assert_eq!(headers(&t), ["NAME", "SIZE", "READY"]);
        assert_eq!(t["rows"][0]["cells"], json!(["w", 3, "True"]));
    }

    #[test]
    fn table_is_asked_for_in_the_accept_header() {
        assert!(wants_table(
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
        ));
        assert!(!wants_table("application/json"));
    }
}
