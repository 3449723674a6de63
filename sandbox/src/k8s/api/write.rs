//! Writes: create (generateName, dry runs, defaults), replace, the patch flavours
//! (JSON merge, strategic merge, JSON patch) and server-side apply.

use super::*;

pub(super) fn create(
    cluster: &mut ClusterState,
    t: &Target,
    req: &KubeRequest,
    now: DateTime<Utc>,
) -> Result<Outcome, StatusError> {
    let mut obj = req.body_value()?;
    check_kind(t, &obj)?;
    obj["apiVersion"] = json!(t.rt.api_version());
    obj["kind"] = json!(t.rt.kind);
    if !obj["metadata"].is_object() {
        obj["metadata"] = json!({});
    }
    let body_ns = obj["metadata"]["namespace"]
        .as_str()
        .unwrap_or("")
        .to_string();
    if t.rt.namespaced && !body_ns.is_empty() && body_ns != t.ns() {
        return Err(StatusError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    let mut name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
    if name.is_empty() {
        if let Some(prefix) = obj["metadata"]["generateName"]
            .as_str()
            .filter(|p| !p.is_empty())
        {
            name = generated_name(prefix);
        }
    }
    if name.is_empty() {
        return Err(invalid(
            t,
            "",
            vec![Cause {
                reason: "FieldValueRequired",
                field: "metadata.name".into(),
                message: "Required value: name or generateName is required".into(),
            }],
        ));
    }
    if let Some(problem) = name_rule(&t.rt)(&name) {
        return Err(invalid_name(t, &name, problem));
    }
    let t = Target {
        name: Some(name.clone()),
        ..t.clone()
    };
    obj["metadata"]["name"] = json!(name);
    if t.rt.namespaced {
        obj["metadata"]["namespace"] = json!(t.ns());
    } else if let Some(m) = obj["metadata"].as_object_mut() {
        m.remove("namespace");
    }
    check_namespace(cluster, &t)?;
    if cluster.store.get(&t.key()).is_some() {
        return Err(StatusError::already_exists(
            &t.rt.group,
            &t.rt.plural,
            &name,
        ));
    }
    strip_create_metadata(&mut obj);
    if is_crd(&t.rt) {
        check_crd(&t, &name, &mut obj)?;
    }
    prepare_status_for_create(&t.rt, &mut obj, now);
    let manager = req.manager();
    let api_version = t.rt.api_version();
    apply::record_update(
        None,
        &mut obj,
        &Writer {
            manager: &manager,
            api_version: &api_version,
            subresource: None,
            now,
        },
    );
    let stored = insert(cluster, &t, obj, dry_run(req), now)?;
    Ok(ok(201, stored))
}

pub(super) fn replace(
    cluster: &mut ClusterState,
    t: &Target,
    req: &KubeRequest,
    now: DateTime<Utc>,
) -> Result<Outcome, StatusError> {
    let body = req.body_value()?;
    check_kind(t, &body)?;
    let body_name = body["metadata"]["name"].as_str().unwrap_or("");
    if body_name != t.name() {
        return Err(StatusError::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({})",
            t.name()
        )));
    }
    let old_stored = cluster
        .store
        .get(&t.key())
        .cloned()
        .ok_or_else(|| StatusError::not_found(&t.rt.group, &t.rt.plural, t.name()))?;
    let old = view(&t.rt, &old_stored);
    if let Some(rv) = resource_version_of(&body) {
        if Some(rv) != resource_version_of(&old) {
            return Err(StatusError::stale(&t.rt.group, &t.rt.plural, t.name()));
        }
    }
    let new = merge_write(t, &old, body, now);
    write_update(cluster, t, req, &old_stored, &old, new, now)
}

/// The object a write of `body` produces: the status subresource changes only status,
/// the main resource everything but status (when there is a status subresource).
pub(super) fn merge_write(t: &Target, old: &Value, body: Value, now: DateTime<Utc>) -> Value {
    let mut new = if t.sub.as_deref() == Some("status") {
        let mut n = old.clone();
        match body.get("status") {
            Some(s) => n["status"] = s.clone(),
            None => {
                if let Some(m) = n.as_object_mut() {
                    m.remove("status");
                }
            }
        }
        n
    } else {
        let mut n = body;
        if t.rt.has("status") {
            match old.get("status") {
                Some(s) => n["status"] = s.clone(),
                None => {
                    if let Some(m) = n.as_object_mut() {
                        m.remove("status");
                    }
                }
            }
        }
        n
    };
    new["apiVersion"] = json!(t.rt.api_version());
    new["kind"] = json!(t.rt.kind);
    restore_server_fields(old, &mut new);
    if is_crd(&t.rt) && t.sub.is_none() {
        // Names may grow (new versions, short names); the CRD stays established.
        let conditions = old["status"]["conditions"].clone();
        crd_status(&mut new, now);
        if conditions.is_array() {
            new["status"]["conditions"] = conditions;
        }
    }
    new
}

pub(super) fn write_update(
    cluster: &mut ClusterState,
    t: &Target,
    req: &KubeRequest,
    old_stored: &Value,
    old: &Value,
    mut new: Value,
    now: DateTime<Utc>,
) -> Result<Outcome, StatusError> {
    if is_crd(&t.rt) && t.sub.is_none() {
        check_crd(t, t.name(), &mut new)?;
    }
    let manager = req.manager();
    let api_version = t.rt.api_version();
    apply::record_update(
        Some(old),
        &mut new,
        &Writer {
            manager: &manager,
            api_version: &api_version,
            subresource: t.sub.as_deref(),
            now,
        },
    );
    let stored = store_update(cluster, t, old_stored, new, dry_run(req))?;
    Ok(ok(200, stored))
}

pub(super) fn content_type(req: &KubeRequest) -> &str {
    req.content_type
        .as_deref()
        .and_then(|c| c.split(';').next())
        .map(str::trim)
        .unwrap_or("")
}

pub(super) fn patch(
    cluster: &mut ClusterState,
    t: &Target,
    req: &KubeRequest,
    now: DateTime<Utc>,
) -> Result<Outcome, StatusError> {
    let kind = content_type(req).to_string();
    if kind == "application/apply-patch+yaml" {
        return server_side_apply(cluster, t, req, now);
    }
    let old_stored = cluster
        .store
        .get(&t.key())
        .cloned()
        .ok_or_else(|| StatusError::not_found(&t.rt.group, &t.rt.plural, t.name()))?;
    let old = view(&t.rt, &old_stored);
    let body = req.body_value()?;
    let patched = match kind.as_str() {
        "application/merge-patch+json" => {
            let mut target = old.clone();
            merge_patch(&mut target, &body);
            target
        }
        "application/strategic-merge-patch+json" => {
            let mut target = old.clone();
            strategic_merge_patch(&mut target, &body);
            target
        }
        "application/json-patch+json" => json_patch(&old, &body).map_err(|e| {
            StatusError::bad_request(format!("the JSON patch could not be applied: {e}"))
        })?,
        other => return Err(StatusError::unsupported_media_type(other)),
    };
    if let Some(rv) = body["metadata"]["resourceVersion"].as_str() {
        if Some(rv) != resource_version_of(&old) {
            return Err(StatusError::stale(&t.rt.group, &t.rt.plural, t.name()));
        }
    }
    if patched["metadata"]["name"].as_str() != Some(t.name()) {
        return Err(StatusError::bad_request(format!(
            "the name of the object ({}) does not match the name on the URL ({})",
            patched["metadata"]["name"].as_str().unwrap_or(""),
            t.name()
        )));
    }
    let new = merge_write(t, &old, patched, now);
    write_update(cluster, t, req, &old_stored, &old, new, now)
}

pub(super) fn server_side_apply(
    cluster: &mut ClusterState,
    t: &Target,
    req: &KubeRequest,
    now: DateTime<Utc>,
) -> Result<Outcome, StatusError> {
    let manager = req
        .param("fieldManager")
        .filter(|m| !m.is_empty())
        .ok_or_else(|| StatusError::bad_request("PATCH is not supported for apply requests without a fieldManager: fieldManager is required for apply requests"))?
        .to_string();
    let force = match req.param("force") {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            return Err(StatusError::bad_request(format!(
                "invalid force value {other:?}"
            )))
        }
    };
    let mut config = req.body_value()?;
    check_kind(t, &config)?;
    if config["apiVersion"].as_str().is_none_or(str::is_empty)
        || config["kind"].as_str().is_none_or(str::is_empty)
    {
        return Err(StatusError::bad_request(
            "apiVersion and kind must be set in an applied configuration",
        ));
    }
    if !config["metadata"].is_object() {
        config["metadata"] = json!({});
    }
    match config["metadata"]["name"].as_str() {
        Some(n) if n == t.name() => {}
        None | Some("") => config["metadata"]["name"] = json!(t.name()),
        Some(other) => {
            return Err(StatusError::bad_request(format!(
                "the name of the object ({other}) does not match the name on the URL ({})",
                t.name()
            )))
        }
    }
    if t.rt.namespaced {
        match config["metadata"]["namespace"].as_str() {
            Some(ns) if !ns.is_empty() && ns != t.ns() => {
                return Err(StatusError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ))
            }
            _ => config["metadata"]["namespace"] = json!(t.ns()),
        }
    }
    let api_version = t.rt.api_version();
    let writer = Writer {
        manager: &manager,
        api_version: &api_version,
        subresource: t.sub.as_deref(),
        now,
    };
    let live_stored = cluster.store.get(&t.key()).cloned();
    let live = live_stored.as_ref().map(|s| view(&t.rt, s));
    if let (Some(rv), Some(live)) = (resource_version_of(&config), &live) {
        if Some(rv) != resource_version_of(live) {
            return Err(StatusError::stale(&t.rt.group, &t.rt.plural, t.name()));
        }
    }
    let applied = apply::apply(live.as_ref(), &config, &writer, force).map_err(|conflicts| {
        let mut e = StatusError::conflict(&t.rt.group, &t.rt.plural, t.name(), "")
            .with_message(apply::conflict_message(&conflicts));
        e.details = Some(Box::new(json!({
            "causes": conflicts
                .iter()
                .map(|c| json!({"reason": "FieldManagerConflict", "message": c.cause(), "field": c.field}))
                .collect::<Vec<_>>()
        })));
        e
    })?;
    match (live_stored, live) {
        (Some(old_stored), Some(old)) => {
            let mut new = applied;
            let managed = new["metadata"]["managedFields"].clone();
            let mut new = {
                // The applied config may not reach past the subresource it was sent to.
                let body = std::mem::take(&mut new);
                merge_write(t, &old, body, now)
            };
            if is_crd(&t.rt) && t.sub.is_none() {
                check_crd(t, t.name(), &mut new)?;
            }
            if managed.is_null() {
                if let Some(m) = new["metadata"].as_object_mut() {
                    m.remove("managedFields");
                }
            } else {
                new["metadata"]["managedFields"] = managed;
            }
            let stored = store_update(cluster, t, &old_stored, new, dry_run(req))?;
            Ok(ok(200, stored))
        }
        _ => {
            if t.sub.is_some() {
                return Err(StatusError::not_found(&t.rt.group, &t.rt.plural, t.name()));
            }
            if let Some(problem) = name_rule(&t.rt)(t.name()) {
                return Err(invalid_name(t, t.name(), problem));
            }
            check_namespace(cluster, t)?;
            let mut obj = applied;
            obj["apiVersion"] = json!(t.rt.api_version());
            obj["kind"] = json!(t.rt.kind);
            let managed = obj["metadata"]["managedFields"].clone();
            strip_create_metadata(&mut obj);
            if !managed.is_null() {
                obj["metadata"]["managedFields"] = managed;
            }
            if is_crd(&t.rt) {
                check_crd(t, t.name(), &mut obj)?;
            }
            prepare_status_for_create(&t.rt, &mut obj, now);
            let stored = insert(cluster, t, obj, dry_run(req), now)?;
            Ok(ok(201, stored))
        }
    }
}

/// RFC 7386 JSON merge patch.
pub(crate) fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    let Some(t) = target.as_object_mut() else {
        return;
    };
    for (k, v) in p {
        if v.is_null() {
            t.remove(k);
        } else {
            merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

/// A strategic merge patch, approximated: a merge patch in which lists of named
/// objects merge by name (`$patch: delete` removes an item) and the `$`-directives
/// kubectl adds are dropped.
pub(crate) fn strategic_merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if p.get("$patch").and_then(Value::as_str) == Some("replace") {
        let mut replacement = patch.clone();
        if let Some(m) = replacement.as_object_mut() {
            m.remove("$patch");
        }
        *target = replacement;
        return;
    }
    if !target.is_object() {
        *target = json!({});
    }
    let Some(t) = target.as_object_mut() else {
        return;
    };
    for (k, v) in p {
        if k.starts_with('$') {
            continue;
        }
        if v.is_null() {
            t.remove(k);
            continue;
        }
        let named =
            |items: &[Value]| !items.is_empty() && items.iter().all(|i| i["name"].is_string());
        match (t.get_mut(k), v) {
            (Some(Value::Array(live)), Value::Array(items))
                if named(items) && (live.is_empty() || named(live)) =>
            {
                for item in items {
                    let is_delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
                    let pos = live.iter().position(|l| l["name"] == item["name"]);
                    match (pos, is_delete) {
                        (Some(i), true) => {
                            live.remove(i);
                        }
                        (None, true) => {}
                        (Some(i), false) => strategic_merge_patch(&mut live[i], item),
                        (None, false) => {
                            let mut fresh = json!({});
                            strategic_merge_patch(&mut fresh, item);
                            live.push(fresh);
                        }
                    }
                }
            }
            (Some(existing), _) => strategic_merge_patch(existing, v),
            (None, _) => {
                let mut fresh = Value::Null;
                strategic_merge_patch(&mut fresh, v);
                t.insert(k.clone(), fresh);
            }
        }
    }
}

pub(super) fn pointer_tokens(path: &str) -> Result<Vec<String>, String> {
    if path.is_empty() {
        return Ok(Vec::new());
    }
    let Some(rest) = path.strip_prefix('/') else {
        return Err(format!("invalid JSON pointer {path:?}"));
    };
    Ok(rest
        .split('/')
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect())
}

pub(super) fn pointer_get<'a>(v: &'a Value, tokens: &[String]) -> Option<&'a Value> {
    tokens.iter().try_fold(v, |v, t| match v {
        Value::Object(m) => m.get(t),
        Value::Array(a) => t.parse::<usize>().ok().and_then(|i| a.get(i)),
        _ => None,
    })
}

pub(super) fn pointer_parent<'a>(
    v: &'a mut Value,
    tokens: &[String],
) -> Result<(&'a mut Value, String), String> {
    let Some((last, parents)) = tokens.split_last() else {
        return Err("the root cannot be changed this way".into());
    };
    let mut cur = v;
    for t in parents {
        cur = match cur {
            Value::Object(m) => m.get_mut(t),
            Value::Array(a) => t.parse::<usize>().ok().and_then(|i| a.get_mut(i)),
            _ => None,
        }
        .ok_or_else(|| format!("path component {t:?} not found"))?;
    }
    Ok((cur, last.clone()))
}

pub(super) fn pointer_add(v: &mut Value, tokens: &[String], value: Value) -> Result<(), String> {
    if tokens.is_empty() {
        *v = value;
        return Ok(());
    }
    let (parent, last) = pointer_parent(v, tokens)?;
    match parent {
        Value::Object(m) => {
            m.insert(last, value);
            Ok(())
        }
        Value::Array(a) => {
            let i = if last == "-" {
                a.len()
            } else {
                last.parse::<usize>()
                    .map_err(|_| format!("invalid index {last:?}"))?
            };
            if i > a.len() {
                return Err(format!("index {i} out of bounds"));
            }
            a.insert(i, value);
            Ok(())
        }
        _ => Err("the parent is not a container".into()),
    }
}

pub(super) fn pointer_remove(v: &mut Value, tokens: &[String]) -> Result<Value, String> {
    let (parent, last) = pointer_parent(v, tokens)?;
    match parent {
        Value::Object(m) => m
            .remove(&last)
            .ok_or_else(|| format!("path {last:?} not found")),
        Value::Array(a) => {
            let i = last
                .parse::<usize>()
                .map_err(|_| format!("invalid index {last:?}"))?;
            if i >= a.len() {
                return Err(format!("index {i} out of bounds"));
            }
            Ok(a.remove(i))
        }
        _ => Err("the parent is not a container".into()),
    }
}

/// RFC 6902 JSON patch.
pub(crate) fn json_patch(doc: &Value, patch: &Value) -> Result<Value, String> {
    let ops = patch
        .as_array()
        .ok_or("a JSON patch must be a list of operations")?;
    let mut doc = doc.clone();
    for op in ops {
        let path = pointer_tokens(op["path"].as_str().ok_or("every operation needs a path")?)?;
        match op["op"].as_str().unwrap_or("") {
            "add" => pointer_add(
                &mut doc,
                &path,
                op.get("value").cloned().ok_or("add needs a value")?,
            )?,
            "remove" => {
                pointer_remove(&mut doc, &path)?;
            }
            "replace" => {
                pointer_remove(&mut doc, &path)?;
                pointer_add(
                    &mut doc,
                    &path,
                    op.get("value").cloned().ok_or("replace needs a value")?,
                )?;
            }
            "move" => {
                let from = pointer_tokens(op["from"].as_str().ok_or("move needs from")?)?;
                let v = pointer_remove(&mut doc, &from)?;
                pointer_add(&mut doc, &path, v)?;
            }
            "copy" => {
                let from = pointer_tokens(op["from"].as_str().ok_or("copy needs from")?)?;
                let v = pointer_get(&doc, &from)
                    .cloned()
                    .ok_or("copy source not found")?;
                pointer_add(&mut doc, &path, v)?;
            }
            "test" => {
                // As the API server's JSON patch: a missing member tests equal to null
                // (kube's finalizer helper tests `/metadata/finalizers` against null
                // before adding the first).
                let found = pointer_get(&doc, &path).unwrap_or(&Value::Null);
                if found != op.get("value").unwrap_or(&Value::Null) {
                    return Err(format!("test failed at {}", op["path"]));
                }
            }
            other => return Err(format!("unknown operation {other:?}")),
        }
    }
    Ok(doc)
}
