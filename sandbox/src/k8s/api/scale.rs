//! The scale subresource of Deployments, ReplicaSets, StatefulSets, Jobs and custom
//! resources that declare one.

use super::*;

pub(super) fn path_get<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    path.trim_start_matches('.')
        .split('.')
        .try_fold(obj, |v, p| v.get(p))
}

pub(super) fn path_set(obj: &mut Value, path: &str, value: Value) {
    let parts: Vec<&str> = path.trim_start_matches('.').split('.').collect();
    let mut v = obj;
    for p in &parts[..parts.len().saturating_sub(1)] {
        if !v[*p].is_object() {
            v[*p] = json!({});
        }
        v = &mut v[*p];
    }
    if let Some(last) = parts.last() {
        v[*last] = value;
    }
}

pub(super) fn scale_view(t: &Target, obj: &Value) -> Value {
    let paths = t.rt.scale.clone().unwrap_or(discovery::ScalePaths {
        spec_replicas: ".spec.replicas".into(),
        status_replicas: ".status.replicas".into(),
        label_selector: None,
    });
    let selector = paths
        .label_selector
        .as_deref()
        .and_then(|p| path_get(obj, p))
        .map(|s| match s {
            Value::String(s) => s.clone(),
            other => table::selector_string(other),
        });
    let mut status = json!({"replicas": path_get(obj, &paths.status_replicas).and_then(Value::as_i64).unwrap_or(0)});
    if let Some(s) = selector {
        status["selector"] = json!(s);
    }
    let meta = &obj["metadata"];
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"],
            "resourceVersion": meta["resourceVersion"], "creationTimestamp": meta["creationTimestamp"],
        },
        "spec": {"replicas": path_get(obj, &paths.spec_replicas).and_then(Value::as_i64).unwrap_or(0)},
        "status": status,
    })
}

pub(super) fn scale(
    cluster: &mut ClusterState,
    t: &Target,
    req: &KubeRequest,
    now: DateTime<Utc>,
) -> Result<Outcome, StatusError> {
    let old_stored = cluster
        .store
        .get(&t.key())
        .cloned()
        .ok_or_else(|| StatusError::not_found(&t.rt.group, &t.rt.plural, t.name()))?;
    let old = view(&t.rt, &old_stored);
    let current = scale_view(t, &old);
    let wanted = match req.method {
        Method::GET => return Ok(ok(200, current)),
        Method::PUT => req.body_value()?,
        Method::PATCH => {
            let body = req.body_value()?;
            let mut target = current.clone();
            match content_type(req) {
                "application/json-patch+json" => {
                    json_patch(&current, &body).map_err(StatusError::bad_request)?
                }
                "application/merge-patch+json"
                | "application/strategic-merge-patch+json"
                | "application/apply-patch+yaml" => {
                    merge_patch(&mut target, &body);
                    target
                }
                other => return Err(StatusError::unsupported_media_type(other)),
            }
        }
        _ => return Err(StatusError::method_not_allowed(req.method.as_str())),
    };
    if let Some(rv) = resource_version_of(&wanted) {
        if Some(rv) != resource_version_of(&old) {
            return Err(StatusError::stale(&t.rt.group, &t.rt.plural, t.name()));
        }
    }
    let Some(replicas) = wanted["spec"]["replicas"].as_i64().filter(|r| *r >= 0) else {
        return Err(StatusError::invalid(
            "Scale",
            "autoscaling",
            t.name(),
            vec![Cause {
                reason: "FieldValueInvalid",
                field: "spec.replicas".into(),
                message: format!(
                    "Invalid value: {}: must be greater than or equal to 0",
                    quoted(wanted["spec"].get("replicas"))
                ),
            }],
        ));
    };
    let mut new = old.clone();
    let path =
        t.rt.scale
            .as_ref()
            .map_or(".spec.replicas", |s| s.spec_replicas.as_str());
    path_set(&mut new, path, json!(replicas));
    let scale_target = Target {
        sub: None,
        ..t.clone()
    };
    let manager = req.manager();
    let api_version = t.rt.api_version();
    apply::record_update(
        Some(&old),
        &mut new,
        &Writer {
            manager: &manager,
            api_version: &api_version,
            subresource: Some("scale"),
            now,
        },
    );
    let stored = store_update(cluster, &scale_target, &old_stored, new, dry_run(req))?;
    Ok(ok(200, scale_view(t, &stored)))
}
