//! A container's environment as the kubelet builds it: the Service variables of the
//! pod's namespace (`enableServiceLinks`) and the API server's, then `envFrom`, then `env`
//! with `valueFrom` resolved (ConfigMaps, Secrets, the downward API) and `$(VAR)`
//! references expanded, and last what the node's device plugins add for the devices the
//! container was given (`nvidia.com/gpu`, and through the cloud, `google.com/tpu`).
//! `kubectl exec` runs commands with it, so `env` inside a GPU Job's pod shows its GPUs.

use std::collections::BTreeMap;

use base64::Engine as _;
use serde_json::Value;

use super::obj;
use super::store::ObjKey;
use super::ClusterState;
use crate::common::hash::fnv64;

/// The `kubernetes` Service's address, as every container sees it.
const API_HOST: &str = "10.96.0.1";

/// One variable; order matters (later ones win, `$(VAR)` sees earlier ones).
type Var = (String, String);

/// The environment of `container` in `pod`, in the order the kubelet sets it.
pub(crate) fn container_env(cluster: &ClusterState, pod: &Value, container: &str) -> Vec<Var> {
    let namespace = pod["metadata"]["namespace"].as_str().unwrap_or("default");
    let spec = obj::items(&pod["spec"]["containers"])
        .iter()
        .chain(obj::items(&pod["spec"]["initContainers"]))
        .find(|c| c["name"] == container)
        .cloned()
        .unwrap_or(Value::Null);
    let mut vars: Vec<Var> = vec![(
        "HOSTNAME".into(),
        pod["spec"]["hostname"]
            .as_str()
            .unwrap_or_else(|| obj::name(pod))
            .to_string(),
    )];
    if pod["spec"]["enableServiceLinks"] != Value::Bool(false) {
        vars.extend(service_links(cluster, namespace));
    }
    vars.extend(service_vars(
        "KUBERNETES",
        API_HOST,
        &[(Some("https"), 443, "TCP")],
    ));
    for from in obj::items(&spec["envFrom"]) {
        let prefix = from["prefix"].as_str().unwrap_or_default();
        let source = if from["configMapRef"].is_object() {
            config_map(cluster, namespace, &from["configMapRef"])
        } else {
            secret(cluster, namespace, &from["secretRef"])
        };
        for (k, v) in source {
            vars.push((format!("{prefix}{k}"), v));
        }
    }
    for e in obj::items(&spec["env"]) {
        let Some(name) = e["name"].as_str() else {
            continue;
        };
        let value = match e["value"].as_str() {
            Some(v) => Some(expand(v, &vars)),
            None if e["valueFrom"].is_object() => value_from(cluster, pod, &spec, &e["valueFrom"]),
            None => Some(String::new()),
        };
        if let Some(value) = value {
            vars.push((name.to_string(), value));
        }
    }
    let node = pod["spec"]["nodeName"]
        .as_str()
        .and_then(|n| cluster.store.get(&ObjKey::new("", "nodes", "", n)));
    if let Some(node) = node {
        let limits = &spec["resources"]["limits"];
        let count = |resource: &str| match &limits[resource] {
            Value::String(s) => s.parse::<i64>().unwrap_or(0),
            other => other.as_i64().unwrap_or(0),
        };
        let gpus = count("nvidia.com/gpu");
        if gpus > 0 {
            vars.extend(nvidia_env(obj::name(node), gpus));
        }
        for (resource, n) in limits.as_object().into_iter().flatten() {
            let n = match n {
                Value::String(s) => s.parse::<i64>().unwrap_or(0),
                other => other.as_i64().unwrap_or(0),
            };
            if n > 0 && resource != "nvidia.com/gpu" {
                vars.extend(cluster.cloud.device_env(node, resource, n));
            }
        }
    }
    dedup_last_wins(vars)
}

/// What the NVIDIA device plugin tells a container about the GPUs it was given: the
/// visible devices by UUID (stable per node and index) and what the driver offers.
fn nvidia_env(node: &str, count: i64) -> Vec<Var> {
    let uuids: Vec<String> = (0..count)
        .map(|i| {
            let a = fnv64(&[node, "gpu", &i.to_string()]);
            let b = fnv64(&[node, "gpu-uuid", &i.to_string()]);
            let h = format!("{a:016x}{b:016x}");
            format!(
                "GPU-{}-{}-{}-{}-{}",
                &h[0..8],
                &h[8..12],
                &h[12..16],
                &h[16..20],
                &h[20..32]
            )
        })
        .collect();
    vec![
        ("NVIDIA_VISIBLE_DEVICES".into(), uuids.join(",")),
        (
            "NVIDIA_DRIVER_CAPABILITIES".into(),
            "compute,utility".into(),
        ),
    ]
}

/// Keeps the last value of each name where its first occurrence was, as a process
/// environment holds one value per name.
fn dedup_last_wins(vars: Vec<Var>) -> Vec<Var> {
    let last: BTreeMap<&str, &str> = vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut seen = std::collections::BTreeSet::new();
    vars.iter()
        .filter(|(k, _)| seen.insert(k.clone()))
        .map(|(k, _)| (k.clone(), last[k.as_str()].to_string()))
        .collect()
}

/// The docker-links style variables of every Service with a cluster IP in `namespace`,
/// as the kubelet sets them: `REDIS_LEADER_SERVICE_HOST`, `…_SERVICE_PORT`, `…_PORT`,
/// `…_PORT_6379_TCP…`.
fn service_links(cluster: &ClusterState, namespace: &str) -> Vec<Var> {
    let mut out = Vec::new();
    for (key, svc) in cluster.store.list("", "services", Some(namespace)) {
        if namespace == "default" && key.name == "kubernetes" {
            continue;
        }
        let Some(ip) = svc["spec"]["clusterIP"].as_str().filter(|ip| *ip != "None") else {
            continue;
        };
        let ports: Vec<(Option<&str>, i64, &str)> = obj::items(&svc["spec"]["ports"])
            .iter()
            .filter_map(|p| {
                Some((
                    p["name"].as_str(),
                    p["port"].as_i64()?,
                    p["protocol"].as_str().unwrap_or("TCP"),
                ))
            })
            .collect();
        let prefix = key.name.to_uppercase().replace('-', "_");
        out.extend(service_vars(&prefix, ip, &ports));
    }
    out
}

fn service_vars(prefix: &str, ip: &str, ports: &[(Option<&str>, i64, &str)]) -> Vec<Var> {
    let Some((_, first, first_proto)) = ports.first() else {
        return Vec::new();
    };
    let mut out = vec![
        (format!("{prefix}_SERVICE_HOST"), ip.to_string()),
        (format!("{prefix}_SERVICE_PORT"), first.to_string()),
    ];
    for (name, port, _) in ports {
        if let Some(name) = name.filter(|n| !n.is_empty()) {
            let name = name.to_uppercase().replace('-', "_");
            out.push((format!("{prefix}_SERVICE_PORT_{name}"), port.to_string()));
        }
    }
    out.push((
        format!("{prefix}_PORT"),
        format!("{}://{ip}:{first}", first_proto.to_lowercase()),
    ));
    for (_, port, proto) in ports {
        let base = format!("{prefix}_PORT_{port}_{proto}");
        out.push((
            base.clone(),
            format!("{}://{ip}:{port}", proto.to_lowercase()),
        ));
        out.push((format!("{base}_PROTO"), proto.to_lowercase()));
        out.push((format!("{base}_PORT"), port.to_string()));
        out.push((format!("{base}_ADDR"), ip.to_string()));
    }
    out
}

/// `$(VAR)` replaced by an earlier variable's value; `$$(VAR)` is a literal `$(VAR)`;
/// a reference to an unknown variable is left as written, as the kubelet does.
fn expand(value: &str, vars: &[Var]) -> String {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
            continue;
        }
        let reference = after
            .strip_prefix('(')
            .and_then(|r| r.find(')').map(|end| (&r[..end], &r[end + 1..])));
        match reference {
            Some((name, tail)) => {
                match vars.iter().rev().find(|(k, _)| k == name) {
                    Some((_, v)) => out.push_str(v),
                    None => {
                        out.push_str("$(");
                        out.push_str(name);
                        out.push(')');
                    }
                }
                rest = tail;
            }
            None => {
                out.push('$');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// A `valueFrom`; `None` when its source is missing and optional (the variable is then
/// not set; a required one keeps the pod from starting long before anyone execs in).
fn value_from(cluster: &ClusterState, pod: &Value, spec: &Value, from: &Value) -> Option<String> {
    let namespace = pod["metadata"]["namespace"].as_str().unwrap_or("default");
    if let Some(path) = from["fieldRef"]["fieldPath"].as_str() {
        return field(pod, path);
    }
    if let Some(resource) = from["resourceFieldRef"]["resource"].as_str() {
        let (kind, name) = resource.split_once('.')?;
        let v = &spec["resources"][kind][name];
        return Some(match v {
            Value::String(s) => s.clone(),
            Value::Null => "0".into(),
            other => other.to_string(),
        });
    }
    let (source, selector) = if from["configMapKeyRef"].is_object() {
        (
            config_map(cluster, namespace, &from["configMapKeyRef"]),
            &from["configMapKeyRef"],
        )
    } else {
        (
            secret(cluster, namespace, &from["secretKeyRef"]),
            &from["secretKeyRef"],
        )
    };
    let key = selector["key"].as_str()?;
    source.into_iter().find(|(k, _)| k == key).map(|(_, v)| v)
}

/// The downward API's fields.
fn field(pod: &Value, path: &str) -> Option<String> {
    let meta = &pod["metadata"];
    let indexed = |map: &str| {
        path.strip_prefix(map)
            .and_then(|r| r.strip_prefix("['"))
            .and_then(|r| r.strip_suffix("']"))
    };
    let v = match path {
        "metadata.name" => &meta["name"],
        "metadata.namespace" => &meta["namespace"],
        "metadata.uid" => &meta["uid"],
        "spec.nodeName" => &pod["spec"]["nodeName"],
        "spec.serviceAccountName" => &pod["spec"]["serviceAccountName"],
        "status.podIP" => &pod["status"]["podIP"],
        "status.hostIP" => &pod["status"]["hostIP"],
        _ => match (indexed("metadata.labels"), indexed("metadata.annotations")) {
            (Some(k), _) => &meta["labels"][k],
            (_, Some(k)) => &meta["annotations"][k],
            _ => return None,
        },
    };
    Some(v.as_str().unwrap_or_default().to_string())
}

fn config_map(cluster: &ClusterState, namespace: &str, selector: &Value) -> Vec<Var> {
    let Some(name) = selector["name"].as_str() else {
        return Vec::new();
    };
    let Some(cm) = cluster
        .store
        .get(&ObjKey::new("", "configmaps", namespace, name))
    else {
        return Vec::new();
    };
    cm["data"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
        .collect()
}

fn secret(cluster: &ClusterState, namespace: &str, selector: &Value) -> Vec<Var> {
    let Some(name) = selector["name"].as_str() else {
        return Vec::new();
    };
    let Some(s) = cluster
        .store
        .get(&ObjKey::new("", "secrets", namespace, name))
    else {
        return Vec::new();
    };
    let b64 = base64::engine::general_purpose::STANDARD;
    let data = s["data"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| {
            let bytes = b64.decode(v.as_str()?).ok()?;
            Some((k.clone(), String::from_utf8_lossy(&bytes).into_owned()))
        });
    let plain = s["stringData"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())));
    data.chain(plain).collect()
}

#[cfg(test)]
mod tests {
    use super::super::controllers::testkit::{self, Harness};
    use super::*;
    use serde_json::json;

    fn get<'a>(vars: &'a [Var], name: &str) -> Option<&'a str> {
        vars.iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn env_resolves_values_references_and_sources_in_the_kubelets_order() {
        let mut h = Harness::standard(vec![testkit::pool("default-pool", 1, 1)]);
        h.create(
            "",
            "configmaps",
            "default",
            json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cfg"}, "data": {"MODE": "train", "EPOCHS": "3"}}),
        );
        h.create(
            "",
            "secrets",
            "default",
            json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "creds"}, "data": {"token": "czNjcjN0"}}),
        );
        h.create(
            "",
            "services",
            "default",
            json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "redis-leader"}, "spec": {"selector": {"app": "redis"},
            "ports": [{"port": 6379, "targetPort": 6379}]}}),
        );
        h.create("", "pods", "default", json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "w", "labels": {"team": "ml"}},
            "spec": {"containers": [{"name": "c", "image": "busybox",
                "envFrom": [{"configMapRef": {"name": "cfg"}, "prefix": "CFG_"}],
                "env": [
                    {"name": "QUEUE", "value": "datasets"},
                    {"name": "URL", "value": "redis://$(REDIS_LEADER_SERVICE_HOST):6379/$(QUEUE) $$(QUEUE) $(NOPE)"},
                    {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
                    {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "TEAM", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['team']"}}},
                    {"name": "MISSING", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "nope", "optional": true}}},
                    {"name": "QUEUE", "value": "later"},
                ]}]}}));
        h.settle();
        let pod = h.get("", "pods", "default", "w");
        let vars = container_env(&h.cluster, &pod, "c");
        let ip = h.get("", "services", "default", "redis-leader")["spec"]["clusterIP"]
            .as_str()
            .expect("a cluster IP")
            .to_string();
        assert_eq!(get(&vars, "HOSTNAME"), Some("w"));
        assert_eq!(get(&vars, "KUBERNETES_SERVICE_HOST"), Some("10.96.0.1"));
        assert_eq!(get(&vars, "KUBERNETES_SERVICE_PORT"), Some("443"));
        assert_eq!(get(&vars, "REDIS_LEADER_SERVICE_HOST"), Some(ip.as_str()));
        assert_eq!(
            get(&vars, "REDIS_LEADER_PORT_6379_TCP"),
            Some(format!("tcp://{ip}:6379").as_str())
        );
        assert_eq!(get(&vars, "CFG_MODE"), Some("train"));
        assert_eq!(
            get(&vars, "URL"),
            Some(format!("redis://{ip}:6379/datasets $(QUEUE) $(NOPE)").as_str())
        );
        assert_eq!(get(&vars, "TOKEN"), Some("s3cr3t"));
        assert_eq!(get(&vars, "POD"), Some("w"));
        assert_eq!(get(&vars, "TEAM"), Some("ml"));
        assert_eq!(get(&vars, "MISSING"), None);
        assert_eq!(
            get(&vars, "QUEUE"),
            Some("later"),
            "the last definition wins"
        );
        assert_eq!(vars.iter().filter(|(k, _)| k == "QUEUE").count(), 1);
        assert_eq!(
            get(&vars, "NVIDIA_VISIBLE_DEVICES"),
            None,
            "no GPU asked for"
        );
    }

    #[test]
    fn a_gpu_pod_sees_the_gpus_it_was_given() {
        let mut h = Harness::standard(vec![testkit::gpu_pool("gpu", 1, 1)]);
        h.create(
            "",
            "pods",
            "default",
            json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "train"},
            "spec": {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                "containers": [{"name": "c", "image": "trainer",
                "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}),
        );
        h.settle();
        let pod = h.get("", "pods", "default", "train");
        assert!(pod["spec"]["nodeName"].is_string(), "{pod}");
        let vars = container_env(&h.cluster, &pod, "c");
        let devices = get(&vars, "NVIDIA_VISIBLE_DEVICES").expect("the GPU is visible");
        assert!(
            devices.starts_with("GPU-") && !devices.contains(','),
            "{devices}"
        );
        assert_eq!(devices.len(), "GPU-".len() + 36, "{devices}");
        let again = container_env(&h.cluster, &pod, "c");
        assert_eq!(
            get(&again, "NVIDIA_VISIBLE_DEVICES"),
            Some(devices),
            "stable"
        );
    }

    #[test]
    fn dollar_signs_that_are_not_references_stay() {
        let vars = vec![("A".to_string(), "1".to_string())];
        assert_eq!(expand("cost $5 $(A) $", &vars), "cost $5 1 $");
        assert_eq!(expand("$(A", &vars), "$(A");
    }
}
