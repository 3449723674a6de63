//! The API server's service proxy (`/api/v1/namespaces/{ns}/services/{svc}/proxy/…`):
//! the Service and port are resolved as kube-apiserver resolves them (`name`,
//! `name:port`, `scheme:name:port`, the port by number or name) and a ready endpoint is
//! picked from the Service's `endpoints`. Nothing really listens behind a Service in the
//! sandbox, so a request that reaches one is refused as a dial would be, except when the
//! Service is Kubeflow Pipelines' API server, whose HTTP API `k8s/kfp` emulates.

use serde_json::Value;

use super::super::kfp::{self, KfpRequest};
use super::super::request::KubeRequest;
use super::super::status::StatusError;
use super::super::{obj, ClusterState, ObjKey, SettleCtx};
use super::Outcome;

/// `[scheme:]name[:port]` → (name, port).
fn split_service(id: &str) -> (&str, Option<&str>) {
    let parts: Vec<&str> = id.split(':').collect();
    match parts.as_slice() {
        [name] => (name, None),
        [name, port] => (name, Some(*port).filter(|p| !p.is_empty())),
        [_scheme, name, port, ..] => (name, Some(*port).filter(|p| !p.is_empty())),
        _ => (id, None),
    }
}

fn no_endpoints(name: &str) -> StatusError {
    StatusError::unavailable(format!("no endpoints available for service \"{name}\""))
}

/// Serves one proxied request: `rest` is the path after `proxy/`.
pub(super) fn service_proxy(
    cluster: &mut ClusterState,
    req: &KubeRequest,
    ctx: &SettleCtx,
    namespace: &str,
    service: &str,
    rest: &[&str],
) -> Outcome {
    let (name, port) = split_service(service);
    let Some(svc) = cluster
        .store
        .get(&ObjKey::new("", "services", namespace, name))
        .cloned()
    else {
        return StatusError::not_found("", "services", name).into();
    };
    let ports = obj::items(&svc["spec"]["ports"]);
    // As kube-apiserver's resolver: a port number is looked up among the Service's ports
    // and stands for that port's name; no port at all means the unnamed port, so a
    // Service whose ports are named is only reachable with the port given.
    let port_name = match port {
        Some(p) if p.parse::<i64>().is_ok() => {
            match ports
                .iter()
                .find(|sp| sp["port"].as_i64().map(|n| n.to_string()).as_deref() == Some(p))
            {
                Some(sp) => sp["name"].as_str().unwrap_or_default().to_string(),
                None => {
                    return StatusError::unavailable(format!(
                        "no service port {p} found for service \"{name}\""
                    ))
                    .into()
                }
            }
        }
        Some(p) => p.to_string(),
        None => String::new(),
    };
    let port_name = port_name.as_str();
    // The ready addresses (with the resolved target port) of the subsets serving the port.
    let endpoints = cluster
        .store
        .get(&ObjKey::new("", "endpoints", namespace, name))
        .cloned()
        .unwrap_or(Value::Null);
    let mut ready: Option<(Value, i64)> = None;
    for subset in obj::items(&endpoints["subsets"]) {
        let Some(target) = obj::items(&subset["ports"])
            .iter()
            .find(|p| p["name"].as_str().unwrap_or_default() == port_name)
        else {
            continue;
        };
        if let Some(address) = obj::items(&subset["addresses"]).first() {
            ready = Some((address.clone(), target["port"].as_i64().unwrap_or_default()));
            break;
        }
    }
    let Some((address, target_port)) = ready else {
        return no_endpoints(name).into();
    };
    let pod = address["targetRef"]["name"]
        .as_str()
        .and_then(|p| cluster.store.get(&ObjKey::new("", "pods", namespace, p)));
    let is_kfp = pod.is_some_and(|p| {
        obj::items(&p["spec"]["containers"]).iter().any(|c| {
            c["image"]
                .as_str()
                .is_some_and(|i| i.contains(kfp::API_SERVER_IMAGE))
        })
    });
    if is_kfp && (target_port == kfp::HTTP_PORT || port_name == "http") {
        let path = format!("/{}", rest.join("/"));
        let kreq = KfpRequest {
            method: &req.method,
            path: &path,
            query: &req.query,
            content_type: req.content_type.as_deref(),
            body: &req.body,
            kube_namespace: namespace,
            now: ctx.now,
        };
        return Outcome::Done(kfp::serve(cluster, &kreq));
    }
    let ip = address["ip"].as_str().unwrap_or_default();
    StatusError::unavailable(format!(
        "error trying to reach service: dial tcp {ip}:{target_port}: connect: connection refused"
    ))
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_ids_name_the_port_optionally() {
        assert_eq!(split_service("ml-pipeline"), ("ml-pipeline", None));
        assert_eq!(
            split_service("ml-pipeline:8888"),
            ("ml-pipeline", Some("8888"))
        );
        assert_eq!(
            split_service("http:ml-pipeline:http"),
            ("ml-pipeline", Some("http"))
        );
        assert_eq!(split_service("https:web:"), ("web", None));
    }
}
