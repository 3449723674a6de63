//! Delete and deletecollection: options, propagation policies (orphan, background,
//! foreground) and finalizers.

use super::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Propagation {
    Orphan,
    Background,
    Foreground,
}

pub(super) fn delete_options(req: &KubeRequest) -> Result<Value, StatusError> {
    if req.body.iter().all(u8::is_ascii_whitespace) {
        return Ok(json!({}));
    }
    req.body_value()
}

pub(super) fn propagation(
    t: &Target,
    req: &KubeRequest,
    options: &Value,
) -> Result<Propagation, StatusError> {
    let given = req
        .param("propagationPolicy")
        .or_else(|| options["propagationPolicy"].as_str());
    match given {
        Some("Orphan") => Ok(Propagation::Orphan),
        Some("Background") => Ok(Propagation::Background),
        Some("Foreground") => Ok(Propagation::Foreground),
        Some(other) => Err(StatusError::bad_request(format!(
            "invalid propagationPolicy {other:?}: must be one of Orphan, Background, Foreground"
        ))),
        None => {
            let orphan = req
                .param("orphanDependents")
                .map(|v| v == "true")
                .or_else(|| options["orphanDependents"].as_bool());
            Ok(match orphan {
                Some(true) => Propagation::Orphan,
                Some(false) => Propagation::Background,
                // batch/v1 Jobs still default to orphaning their pods.
                None if t.rt.group == "batch" && t.rt.plural == "jobs" => Propagation::Orphan,
                None => Propagation::Background,
            })
        }
    }
}

/// Deletes one object by the request's options; `None` when it is gone for good.
pub(super) fn delete_one(
    cluster: &mut ClusterState,
    t: &Target,
    key: &ObjKey,
    policy: Propagation,
    options: &Value,
    dry: bool,
    now: DateTime<Utc>,
) -> Result<Option<Value>, StatusError> {
    let stored = cluster
        .store
        .get(key)
        .cloned()
        .ok_or_else(|| StatusError::not_found(&t.rt.group, &t.rt.plural, &key.name))?;
    let pre = &options["preconditions"];
    let uid = stored["metadata"]["uid"].as_str().unwrap_or("").to_string();
    if let Some(want) = pre["uid"].as_str() {
        if want != uid {
            return Err(StatusError::conflict(
                &t.rt.group,
                &t.rt.plural,
                &key.name,
                &format!(
                    "Precondition failed: UID in precondition: {want}, UID in object meta: {uid}"
                ),
            ));
        }
    }
    if let Some(want) = pre["resourceVersion"].as_str() {
        let have = resource_version_of(&stored).unwrap_or("");
        if want != have {
            return Err(StatusError::conflict(&t.rt.group, &t.rt.plural, &key.name, &format!(
                "Precondition failed: ResourceVersion in precondition: {want}, ResourceVersion in object meta: {have}"
            )));
        }
    }
    if key.group.is_empty()
        && key.resource == "namespaces"
        && PROTECTED_NAMESPACES.contains(&key.name.as_str())
    {
        return Err(StatusError::forbidden(format!(
            "namespaces \"{}\" is forbidden: this namespace may not be deleted",
            key.name
        )));
    }
    if dry {
        return Ok(Some(stored));
    }
    // The garbage collector (in the controllers) does the rest: it releases the
    // dependents of an orphaning owner, deletes those of a foreground one first, and
    // removes the finalizer when done.
    let finalizer = match policy {
        Propagation::Orphan => Some("orphan"),
        Propagation::Foreground => Some("foregroundDeletion"),
        Propagation::Background => None,
    };
    let deleting = stored["metadata"].get("deletionTimestamp").is_some();
    if let Some(finalizer) = finalizer.filter(|_| !deleting) {
        let mut obj = stored.clone();
        let mut finalizers = obj["metadata"]["finalizers"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if !finalizers.iter().any(|f| f == finalizer) {
            finalizers.push(json!(finalizer));
            obj["metadata"]["finalizers"] = Value::Array(finalizers);
            cluster.store.update(key, obj);
        }
    }
    if key.group == "apiextensions.k8s.io" && key.resource == "customresourcedefinitions" {
        let group = stored["spec"]["group"].as_str().unwrap_or("").to_string();
        let plural = stored["spec"]["names"]["plural"]
            .as_str()
            .unwrap_or("")
            .to_string();
        for k in cluster.store.keys() {
            if k.group == group && k.resource == plural {
                cluster.store.remove(&k);
            }
        }
    }
    Ok(cluster
        .store
        .delete(key, now)
        .filter(|_| cluster.store.get(key).is_some()))
}

pub(super) fn delete(
    cluster: &mut ClusterState,
    t: &Target,
    req: &KubeRequest,
    now: DateTime<Utc>,
) -> Result<Outcome, StatusError> {
    let options = delete_options(req)?;
    let policy = propagation(t, req, &options)?;
    let key = t.key();
    let uid = cluster
        .store
        .get(&key)
        .and_then(|o| o["metadata"]["uid"].as_str())
        .unwrap_or("")
        .to_string();
    match delete_one(cluster, t, &key, policy, &options, dry_run(req), now)? {
        Some(still_there) => Ok(ok(200, view(&t.rt, &still_there))),
        None => Ok(ok(
            200,
            status::success(&t.rt.group, &t.rt.plural, t.name(), &uid),
        )),
    }
}

pub(super) fn delete_collection(
    cluster: &mut ClusterState,
    t: &Target,
    req: &KubeRequest,
    now: DateTime<Utc>,
) -> Result<Outcome, StatusError> {
    let options = delete_options(req)?;
    let policy = propagation(t, req, &options)?;
    let selectors = Selectors::parse(req, &t.rt)?;
    let keys: Vec<(ObjKey, Value)> = matching(cluster, t, &selectors)
        .into_iter()
        .map(|(k, o)| (k.clone(), o.clone()))
        .collect();
    let mut items = Vec::new();
    for (key, before) in keys {
        if key.group.is_empty()
            && key.resource == "namespaces"
            && PROTECTED_NAMESPACES.contains(&key.name.as_str())
        {
            continue;
        }
        let shown =
            delete_one(cluster, t, &key, policy, &options, dry_run(req), now)?.unwrap_or(before);
        items.push(view(&t.rt, &shown));
    }
    Ok(ok(
        200,
        json!({"kind": t.rt.list_kind(), "apiVersion": t.rt.api_version(),
               "metadata": {"resourceVersion": cluster.store.resource_version.to_string()}, "items": items}),
    ))
}
