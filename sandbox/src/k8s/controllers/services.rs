//! Services at run time: the `endpoints` object of every Service with a selector follows
//! the pods it selects (ready ones as addresses, others as not-ready addresses), and a
//! LoadBalancer Service gets its external address after a while.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::events::{self, Event, Involved};
use super::{base, scaled};
use crate::common::hash::fnv64;
use crate::k8s::obj;
use crate::k8s::store::ObjKey;
use crate::k8s::{ClusterState, SettleCtx};

/// Marks the Endpoints this controller manages, so it can remove them with their Service.
const MANAGED_BY: &str = "endpoints.kubernetes.io/managed-by";
const CONTROLLER: &str = "endpoint-controller";

pub(super) fn sync(cluster: &mut ClusterState, ctx: &SettleCtx<'_>) {
    let services = obj::list(&cluster.store, "", "services", None);
    for (key, svc) in &services {
        if selector_of(svc).is_some() {
            endpoints(cluster, key, svc, ctx);
        }
        if svc["spec"]["type"] == "LoadBalancer" {
            load_balancer(cluster, ctx, key, svc);
        }
    }
    let stale: Vec<ObjKey> = cluster
        .store
        .list("", "endpoints", None)
        .into_iter()
        .filter(|(k, e)| {
            obj::label(e, MANAGED_BY) == Some(CONTROLLER)
                && cluster
                    .store
                    .get(&ObjKey::new("", "services", &k.namespace, &k.name))
                    .is_none_or(|s| selector_of(s).is_none())
        })
        .map(|(k, _)| k.clone())
        .collect();
    for k in stale {
        cluster.store.remove(&k);
    }
}

fn selector_of(svc: &Value) -> Option<&Value> {
    let sel = &svc["spec"]["selector"];
    (sel.as_object().is_some_and(|m| !m.is_empty()) && svc["spec"]["type"] != "ExternalName")
        .then_some(sel)
}

/// A service port's target on one pod: the number, or the named container port.
fn target_port(port: &Value, pod: &Value) -> Option<i64> {
    match &port["targetPort"] {
        Value::Number(n) => n.as_i64(),
        Value::String(name) => obj::items(&pod["spec"]["containers"])
            .iter()
            .flat_map(|c| obj::items(&c["ports"]))
            .find(|p| p["name"] == name.as_str())
            .and_then(|p| p["containerPort"].as_i64()),
        _ => port["port"].as_i64(),
    }
}

/// The pods behind one set of resolved ports.
struct Subset {
    ready: Vec<Value>,
    not_ready: Vec<Value>,
    ports: Vec<Value>,
}

fn endpoints(cluster: &mut ClusterState, key: &ObjKey, svc: &Value, ctx: &SettleCtx<'_>) {
    let Some(selector) = selector_of(svc) else {
        return;
    };
    let publish_not_ready = svc["spec"]["publishNotReadyAddresses"] == true;
    // Pods with the same resolved ports share a subset.
    let mut subsets: BTreeMap<String, Subset> = BTreeMap::new();
    for (_, pod) in cluster.store.list("", "pods", Some(&key.namespace)) {
        let Some(ip) = pod["status"]["podIP"].as_str() else {
            continue;
        };
        if obj::deleting(pod)
            || matches!(
                pod["status"]["phase"].as_str(),
                Some("Succeeded" | "Failed")
            )
            || !obj::map_matches(selector, &pod["metadata"]["labels"])
        {
            continue;
        }
        let mut ports = Vec::new();
        for p in obj::items(&svc["spec"]["ports"]) {
            let Some(target) = target_port(p, pod) else {
                continue;
            };
            let mut port =
                json!({"port": target, "protocol": p["protocol"].as_str().unwrap_or("TCP")});
            if let Some(name) = p["name"].as_str() {
                port["name"] = json!(name);
            }
            ports.push(port);
        }
        let mut address = json!({
            "ip": ip,
            "targetRef": {"kind": "Pod", "namespace": key.namespace, "name": obj::name(pod), "uid": obj::uid(pod)},
        });
        if let Some(node) = pod["spec"]["nodeName"].as_str() {
            address["nodeName"] = json!(node);
        }
        let ready = obj::items(&pod["status"]["conditions"])
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        let entry = subsets
            .entry(crate::common::hash::canonical(&json!(ports)))
            .or_insert_with(|| Subset {
                ready: Vec::new(),
                not_ready: Vec::new(),
                ports,
            });
        if ready || publish_not_ready {
            entry.ready.push(address);
        } else {
            entry.not_ready.push(address);
        }
    }
    let subsets: Vec<Value> = subsets
        .into_values()
        .map(
            |Subset {
                 mut ready,
                 mut not_ready,
                 ports,
             }| {
                ready.sort_by(|a, b| a["ip"].as_str().cmp(&b["ip"].as_str()));
                not_ready.sort_by(|a, b| a["ip"].as_str().cmp(&b["ip"].as_str()));
                let mut s = json!({"ports": ports});
                if !ready.is_empty() {
                    s["addresses"] = json!(ready);
                }
                if !not_ready.is_empty() {
                    s["notReadyAddresses"] = json!(not_ready);
                }
                s
            },
        )
        .collect();
    let mut labels = svc["metadata"]["labels"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    labels.insert(MANAGED_BY.into(), json!(CONTROLLER));
    let ep_key = ObjKey::new("", "endpoints", &key.namespace, &key.name);
    match cluster.store.get(&ep_key).cloned() {
        Some(mut existing) => {
            if subsets.is_empty() {
                obj::remove(&mut existing, &["subsets"]);
            } else {
                existing["subsets"] = json!(subsets);
            }
            obj::set(&mut existing, &["metadata", "labels"], json!(labels));
            cluster.store.update(&ep_key, existing);
        }
        None => {
            let mut object = json!({
                "apiVersion": "v1",
                "kind": "Endpoints",
                "metadata": {"name": key.name, "namespace": key.namespace, "labels": labels},
            });
            if !subsets.is_empty() {
                object["subsets"] = json!(subsets);
            }
            cluster.store.insert_new(ep_key, object, ctx.now);
        }
    }
}

fn load_balancer(cluster: &mut ClusterState, ctx: &SettleCtx<'_>, key: &ObjKey, svc: &Value) {
    if !obj::items(&svc["status"]["loadBalancer"]["ingress"]).is_empty() {
        return;
    }
    let created = obj::parse_time(&svc["metadata"]["creationTimestamp"]).unwrap_or(ctx.now);
    let involved = Involved::new(svc, "v1", "Service");
    events::emit_once(
        &mut cluster.store,
        &involved,
        Event::normal(
            "service-controller",
            "EnsuringLoadBalancer",
            "Ensuring load balancer",
        ),
        created,
    );
    let at = created + scaled(ctx, base::LOAD_BALANCER);
    if at > ctx.now {
        return;
    }
    let h = fnv64(&[&key.namespace, &key.name, obj::uid(svc)]);
    let ip = format!(
        "34.{}.{}.{}",
        64 + (h >> 16) % 64,
        (h >> 8) % 256,
        h % 254 + 1
    );
    let mut updated = svc.clone();
    obj::set(
        &mut updated,
        &["status", "loadBalancer", "ingress"],
        json!([{"ip": ip, "ipMode": "VIP"}]),
    );
    let updated = cluster.store.update(key, updated);
    events::emit(
        &mut cluster.store,
        &Involved::new(&updated, "v1", "Service"),
        Event::normal(
            "service-controller",
            "EnsuredLoadBalancer",
            "Ensured load balancer",
        ),
        at,
    );
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{self, Harness};
    use super::*;

    #[test]
    fn endpoints_follow_ready_pods() {
        let mut h = Harness::standard(vec![testkit::pool("default-pool", 1, 1)]);
        h.create("", "services", "default", json!({
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
            "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]},
        }));
        h.settle();
        let ep = h.get("", "endpoints", "default", "web");
        assert!(ep["subsets"].is_null(), "no pods yet: {ep}");
        h.create("", "pods", "default", json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "w", "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": "nginx", "ports": [{"name": "http", "containerPort": 8080}]}]},
        }));
        h.settle();
        let ep = h.get("", "endpoints", "default", "web");
        assert_eq!(
            ep["subsets"][0]["notReadyAddresses"][0]["targetRef"]["name"], "w",
            "{ep}"
        );
        h.run_for(5.0);
        let ep = h.get("", "endpoints", "default", "web");
        assert_eq!(
            ep["subsets"][0]["addresses"][0]["targetRef"]["name"], "w",
            "{ep}"
        );
        assert_eq!(
            ep["subsets"][0]["ports"][0],
            json!({"port": 8080, "protocol": "TCP", "name": "http"})
        );
        h.delete("", "services", "default", "web");
        h.settle();
        assert!(!h.exists("", "endpoints", "default", "web"));
    }

    #[test]
    fn a_load_balancer_gets_an_address() {
        let mut h = Harness::standard(vec![]);
        h.create(
            "",
            "services",
            "default",
            json!({
                "apiVersion": "v1", "kind": "Service", "metadata": {"name": "lb"},
                "spec": {"type": "LoadBalancer", "selector": {"app": "x"}, "ports": [{"port": 80}]},
            }),
        );
        h.settle();
        assert!(
            h.get("", "services", "default", "lb")["status"]["loadBalancer"]["ingress"].is_null()
        );
        h.run_for(3.0);
        let ip = h.get("", "services", "default", "lb")["status"]["loadBalancer"]["ingress"][0]
            ["ip"]
            .clone();
        assert!(ip.as_str().is_some_and(|ip| ip.starts_with("34.")), "{ip}");
        assert!(h
            .reasons("default", "lb")
            .contains(&"EnsuredLoadBalancer".to_string()));
    }
}
