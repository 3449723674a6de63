//! Server-side apply and `metadata.managedFields`: which manager owns which fields (kept
//! in the real FieldsV1 format), merging an applied configuration into the live object,
//! removing fields a manager stopped applying, and the conflicts between managers.
//!
//! Simplifications of the real structured-merge-diff: lists of objects that all carry a
//! `name` are associative (keyed `k:{"name":…}`), every other list is an atomic leaf,
//! and maps are always granular.

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};
use serde_json::{json, Map, Value};

use super::store::timestamp;

/// A field path in FieldsV1 segments: `f:<field>` or `k:{"name":"x"}`.
pub(crate) type Path = Vec<String>;
/// The fields one manager owns.
pub(crate) type FieldSet = BTreeSet<Path>;

/// Metadata the server sets; nobody owns these.
const SERVER_METADATA: &[&str] = &[
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "generation",
    "managedFields",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
];

/// Who writes, through which API version and subresource, and when.
#[derive(Debug, Clone)]
pub(crate) struct Writer<'a> {
    pub manager: &'a str,
    pub api_version: &'a str,
    /// `Some("status")` for writes through the status subresource.
    pub subresource: Option<&'a str>,
    pub now: DateTime<Utc>,
}

/// A field another manager owns with a different value than the applied one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Conflict {
    pub manager: String,
    pub api_version: String,
    /// As the API server prints it: `.spec.replicas`.
    pub field: String,
}

impl Conflict {
    /// `conflict with "kubectl" using apps/v1`.
    pub(crate) fn cause(&self) -> String {
        format!(
            "conflict with \"{}\" using {}",
            self.manager, self.api_version
        )
    }
}

/// The message of a 409 apply conflict.
pub(crate) fn conflict_message(conflicts: &[Conflict]) -> String {
    if let [one] = conflicts {
        return format!(
            "Apply failed with 1 conflict: {}: {}",
            one.cause(),
            one.field
        );
    }
    let mut managers: Vec<(&str, &str)> = conflicts
        .iter()
        .map(|c| (c.manager.as_str(), c.api_version.as_str()))
        .collect();
    managers.sort();
    managers.dedup();
    let mut lines = Vec::new();
    for (manager, api_version) in managers {
        lines.push(format!("conflicts with \"{manager}\" using {api_version}:"));
        for c in conflicts
            .iter()
            .filter(|c| c.manager == manager && c.api_version == api_version)
        {
            lines.push(format!("- {}", c.field));
        }
    }
    format!(
        "Apply failed with {} conflicts: {}",
        conflicts.len(),
        lines.join("\n")
    )
}

/// One `metadata.managedFields` entry.
#[derive(Debug, Clone, PartialEq)]
struct Entry {
    manager: String,
    operation: String,
    api_version: String,
    time: String,
    subresource: Option<String>,
    fields: FieldSet,
}

impl Entry {
    fn is(&self, manager: &str, operation: &str, subresource: Option<&str>) -> bool {
        self.manager == manager
            && self.operation == operation
            && self.subresource.as_deref() == subresource
    }

    fn to_value(&self) -> Value {
        let mut v = Map::new();
        v.insert("manager".into(), json!(self.manager));
        v.insert("operation".into(), json!(self.operation));
        v.insert("apiVersion".into(), json!(self.api_version));
        v.insert("time".into(), json!(self.time));
        v.insert("fieldsType".into(), json!("FieldsV1"));
        v.insert("fieldsV1".into(), to_fields_v1(&self.fields));
        if let Some(sub) = &self.subresource {
            v.insert("subresource".into(), json!(sub));
        }
        Value::Object(v)
    }

    fn from_value(v: &Value) -> Option<Entry> {
        let mut fields = FieldSet::new();
        from_fields_v1(&v["fieldsV1"], &mut Vec::new(), &mut fields);
        Some(Entry {
            manager: v["manager"].as_str()?.to_string(),
            operation: v["operation"].as_str().unwrap_or("Update").to_string(),
            api_version: v["apiVersion"].as_str().unwrap_or_default().to_string(),
            time: v["time"].as_str().unwrap_or_default().to_string(),
            subresource: v["subresource"]
                .as_str()
                .filter(|s| !s.is_empty())
                .map(str::to_string),
            fields,
        })
    }
}

fn entries_of(object: Option<&Value>) -> Vec<Entry> {
    object
        .and_then(|o| o["metadata"]["managedFields"].as_array())
        .into_iter()
        .flatten()
        .filter_map(Entry::from_value)
        .collect()
}

fn store_entries(object: &mut Value, entries: Vec<Entry>) {
    let entries: Vec<Value> = entries
        .iter()
        .filter(|e| !e.fields.is_empty())
        .map(Entry::to_value)
        .collect();
    if !object["metadata"].is_object() {
        object["metadata"] = json!({});
    }
    if let Some(meta) = object["metadata"].as_object_mut() {
        if entries.is_empty() {
            meta.remove("managedFields");
        } else {
            meta.insert("managedFields".into(), Value::Array(entries));
        }
    }
}

/// The FieldsV1 tree of a set: a path that is also the prefix of others gets a `"."`
/// member, as an associative list item always does.
pub(crate) fn to_fields_v1(set: &FieldSet) -> Value {
    let mut root = Map::new();
    for path in set {
        let mut node = &mut root;
        for seg in path {
            let child = node.entry(seg.clone()).or_insert_with(|| json!({}));
            if !child.is_object() {
                *child = json!({});
            }
            node = match child.as_object_mut() {
                Some(m) => m,
                None => unreachable!("just made an object"),
            };
        }
    }
    for path in set {
        if path.last().is_some_and(|s| s.starts_with("k:"))
            || set
                .iter()
                .any(|o| o.len() > path.len() && o.starts_with(path))
        {
            let mut node = &mut root;
            for seg in path {
                node = match node.get_mut(seg).and_then(Value::as_object_mut) {
                    Some(m) => m,
                    None => unreachable!("inserted above"),
                };
            }
            node.insert(".".into(), json!({}));
        }
    }
    Value::Object(root)
}

/// The paths of a FieldsV1 tree.
pub(crate) fn from_fields_v1(tree: &Value, prefix: &mut Path, out: &mut FieldSet) {
    let Some(map) = tree.as_object() else {
        return;
    };
    for (seg, child) in map {
        if seg == "." {
            if !prefix.is_empty() {
                out.insert(prefix.clone());
            }
            continue;
        }
        prefix.push(seg.clone());
        if child.as_object().is_none_or(Map::is_empty) {
            out.insert(prefix.clone());
        } else {
            from_fields_v1(child, prefix, out);
        }
        prefix.pop();
    }
}

/// Whether a list is associative: non-empty, and every item an object with a string name.
fn associative(items: &[Value]) -> bool {
    !items.is_empty() && items.iter().all(|i| i["name"].is_string())
}

fn key_segment(item: &Value) -> String {
    format!("k:{}", json!({"name": item["name"]}))
}

/// The part of an object managers can own: no apiVersion/kind, no server-set metadata,
/// and either no status (main resource) or only the status (status subresource).
pub(crate) fn owned_view(object: &Value, subresource: Option<&str>) -> Value {
    if subresource == Some("status") {
        return match object.get("status") {
            Some(s) => json!({"status": s}),
            None => json!({}),
        };
    }
    let mut v = object.clone();
    if let Some(m) = v.as_object_mut() {
        m.remove("apiVersion");
        m.remove("kind");
        m.remove("status");
        if let Some(meta) = m.get_mut("metadata").and_then(Value::as_object_mut) {
            for key in SERVER_METADATA {
                meta.remove(*key);
            }
        }
        if m.get("metadata")
            .and_then(Value::as_object)
            .is_some_and(Map::is_empty)
        {
            m.remove("metadata");
        }
    }
    v
}

/// The leaf fields (and associative list items) of a value.
pub(crate) fn field_set(value: &Value) -> FieldSet {
    fn walk(v: &Value, prefix: &mut Path, out: &mut FieldSet) {
        match v {
            Value::Object(m) if !m.is_empty() => {
                for (k, child) in m {
                    prefix.push(format!("f:{k}"));
                    walk(child, prefix, out);
                    prefix.pop();
                }
            }
            Value::Array(items) if associative(items) => {
                for item in items {
                    prefix.push(key_segment(item));
                    out.insert(prefix.clone());
                    if let Some(m) = item.as_object() {
                        for (k, child) in m {
                            prefix.push(format!("f:{k}"));
                            walk(child, prefix, out);
                            prefix.pop();
                        }
                    }
                    prefix.pop();
                }
            }
            _ => {
                if !prefix.is_empty() {
                    out.insert(prefix.clone());
                }
            }
        }
    }
    let mut out = FieldSet::new();
    walk(value, &mut Vec::new(), &mut out);
    out
}

/// The value at a path.
pub(crate) fn value_at<'a>(value: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut v = value;
    for seg in path {
        v = if let Some(field) = seg.strip_prefix("f:") {
            v.as_object()?.get(field)?
        } else if seg.starts_with("k:") {
            v.as_array()?.iter().find(|i| &key_segment(i) == seg)?
        } else {
            return None;
        };
    }
    Some(v)
}

/// Whether two views agree at a path (list items only need to be present in both).
fn same_at(a: &Value, b: &Value, path: &[String]) -> bool {
    match (value_at(a, path), value_at(b, path)) {
        (Some(x), Some(y)) => path.last().is_some_and(|s| s.starts_with("k:")) || x == y,
        (None, None) => true,
        _ => false,
    }
}

/// `.spec.template.spec.containers[name="c"].image`.
pub(crate) fn display_path(path: &[String]) -> String {
    let mut out = String::new();
    for seg in path {
        if let Some(field) = seg.strip_prefix("f:") {
            out.push('.');
            out.push_str(field);
        } else if let Some(key) = seg.strip_prefix("k:") {
            let parsed: Value = serde_json::from_str(key).unwrap_or(Value::Null);
            let parts: Vec<String> = parsed
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            out.push_str(&format!("[{}]", parts.join(",")));
        }
    }
    out
}

/// Removes the value at `path`, then every map or list this left empty (up to, not
/// including, the top-level `metadata`).
fn remove_at(value: &mut Value, path: &[String]) {
    let Some((last, parent_path)) = path.split_last() else {
        return;
    };
    let Some(parent) = value_at_mut(value, parent_path) else {
        return;
    };
    if let Some(field) = last.strip_prefix("f:") {
        if let Some(m) = parent.as_object_mut() {
            m.remove(field);
        }
    } else if let Some(items) = parent.as_array_mut() {
        items.retain(|i| &key_segment(i) != last);
    }
    let mut prefix = parent_path.to_vec();
    while prefix.len() > 1 || prefix.first().is_some_and(|s| s != "f:metadata") {
        let empty = value_at(value, &prefix).is_some_and(|v| match v {
            Value::Object(m) => m.is_empty(),
            Value::Array(a) => a.is_empty(),
            _ => false,
        });
        if !empty {
            break;
        }
        let Some((seg, up)) = prefix.split_last() else {
            break;
        };
        let Some(field) = seg.strip_prefix("f:") else {
            break;
        };
        if let Some(m) = value_at_mut(value, up).and_then(Value::as_object_mut) {
            m.remove(field);
        }
        prefix.pop();
    }
}

fn value_at_mut<'a>(value: &'a mut Value, path: &[String]) -> Option<&'a mut Value> {
    let mut v = value;
    for seg in path {
        v = if let Some(field) = seg.strip_prefix("f:") {
            v.as_object_mut()?.get_mut(field)?
        } else if seg.starts_with("k:") {
            v.as_array_mut()?
                .iter_mut()
                .find(|i| &key_segment(i) == seg)?
        } else {
            return None;
        };
    }
    Some(v)
}

/// Merges an applied configuration into a live value: maps field by field, associative
/// lists item by item (by name), everything else replaced.
pub(crate) fn merge(live: &mut Value, config: &Value) {
    match (live, config) {
        (Value::Object(l), Value::Object(c)) => {
            for (k, cv) in c {
                match l.get_mut(k) {
                    Some(lv) => merge(lv, cv),
                    None => {
                        l.insert(k.clone(), cv.clone());
                    }
                }
            }
        }
        (Value::Array(l), Value::Array(c))
            if associative(c) && (l.is_empty() || associative(l)) =>
        {
            for item in c {
                match l.iter_mut().find(|e| e["name"] == item["name"]) {
                    Some(existing) => merge(existing, item),
                    None => l.push(item.clone()),
                }
            }
        }
        (l, c) => *l = c.clone(),
    }
}

/// Drops null members: in an applied configuration they say nothing.
pub(crate) fn strip_nulls(value: &Value) -> Value {
    match value {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), strip_nulls(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(strip_nulls).collect()),
        other => other.clone(),
    }
}

/// Server-side apply of `config` (already checked to name the right object) onto `live`
/// (`None`: the object does not exist yet and is created from the configuration).
/// Returns the object to store, with its managedFields, or the conflicts when another
/// manager owns a field the configuration changes and `force` is off.
pub(crate) fn apply(
    live: Option<&Value>,
    config: &Value,
    writer: &Writer,
    force: bool,
) -> Result<Value, Vec<Conflict>> {
    let config = strip_nulls(config);
    let sub = writer.subresource;
    let cfg_view = owned_view(&config, sub);
    let applied = field_set(&cfg_view);
    let live_view = live
        .map(|l| owned_view(l, sub))
        .unwrap_or_else(|| json!({}));
    let mut entries = entries_of(live);

    let mut conflicts = Vec::new();
    let mut conflict_paths: Vec<(usize, Path)> = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        if e.is(writer.manager, "Apply", sub) {
            continue;
        }
        for path in applied.intersection(&e.fields) {
            if !same_at(&cfg_view, &live_view, path) {
                conflicts.push(Conflict {
                    manager: e.manager.clone(),
                    api_version: e.api_version.clone(),
                    field: display_path(path),
                });
                conflict_paths.push((i, path.clone()));
            }
        }
    }
    if !conflicts.is_empty() && !force {
        return Err(conflicts);
    }
    for (i, path) in conflict_paths {
        entries[i].fields.remove(&path);
    }

    let mine = entries
        .iter()
        .position(|e| e.is(writer.manager, "Apply", sub));
    let previous = mine.map(|i| entries[i].fields.clone()).unwrap_or_default();
    let others: FieldSet = entries
        .iter()
        .enumerate()
        .filter(|(i, _)| Some(*i) != mine)
        .flat_map(|(_, e)| e.fields.iter().cloned())
        .collect();

    let mut object = match live {
        Some(l) => l.clone(),
        None => {
            let mut base = json!({"metadata": {}});
            for key in ["apiVersion", "kind"] {
                if let Some(v) = config.get(key) {
                    base[key] = v.clone();
                }
            }
            for key in ["name", "namespace"] {
                if let Some(v) = config["metadata"].get(key) {
                    base["metadata"][key] = v.clone();
                }
            }
            base
        }
    };
    // Longest first, so an item's fields go before the item.
    let mut removed: Vec<&Path> = previous.difference(&applied).collect();
    removed.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for path in removed {
        let shared = others.iter().any(|o| {
            o == path || (path.last().is_some_and(|s| s.starts_with("k:")) && o.starts_with(path))
        });
        if !shared {
            remove_at(&mut object, path);
        }
    }
    merge(&mut object, &cfg_view);

    let entry = Entry {
        manager: writer.manager.to_string(),
        operation: "Apply".into(),
        api_version: writer.api_version.to_string(),
        time: timestamp(writer.now),
        subresource: sub.map(str::to_string),
        fields: applied,
    };
    match mine {
        Some(i) => entries[i] = entry,
        None => entries.push(entry),
    }
    store_entries(&mut object, entries);
    Ok(object)
}

/// Records a non-apply write (create, update, patch) in `new`'s managedFields: the
/// writer's Update entry gains the fields it set or changed, which other managers lose;
/// fields the write removed leave every entry. Managed fields sent by the client are
/// replaced by the server's bookkeeping.
pub(crate) fn record_update(old: Option<&Value>, new: &mut Value, writer: &Writer) {
    let sub = writer.subresource;
    let old_view = old.map(|o| owned_view(o, sub)).unwrap_or_else(|| json!({}));
    let new_view = owned_view(new, sub);
    let old_set = field_set(&old_view);
    let new_set = field_set(&new_view);
    let changed: FieldSet = new_set
        .iter()
        .filter(|p| !old_set.contains(*p) || !same_at(&old_view, &new_view, p))
        .cloned()
        .collect();
    let removed: FieldSet = old_set.difference(&new_set).cloned().collect();
    let mut entries = entries_of(old);
    for e in &mut entries {
        e.fields.retain(|p| !removed.contains(p));
        if !e.is(writer.manager, "Update", sub) {
            e.fields.retain(|p| !changed.contains(p));
        }
    }
    if !changed.is_empty() {
        let time = timestamp(writer.now);
        match entries
            .iter_mut()
            .find(|e| e.is(writer.manager, "Update", sub))
        {
            Some(e) => {
                e.fields.extend(changed);
                e.time = time;
                e.api_version = writer.api_version.to_string();
            }
            None => entries.push(Entry {
                manager: writer.manager.to_string(),
                operation: "Update".into(),
                api_version: writer.api_version.to_string(),
                time,
                subresource: sub.map(str::to_string),
                fields: changed,
            }),
        }
    }
    store_entries(new, entries);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writer(manager: &str) -> Writer<'_> {
        Writer {
            manager,
            api_version: "apps/v1",
            subresource: None,
            now: Utc::now(),
        }
    }

    fn deployment(spec: Value) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "d", "namespace": "default"}, "spec": spec})
    }

    fn managers(object: &Value) -> Vec<(String, String)> {
        object["metadata"]["managedFields"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| {
                (
                    e["manager"].as_str().unwrap_or_default().to_string(),
                    e["operation"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect()
    }

    #[test]
    fn fields_v1_uses_the_real_format() {
        let view = owned_view(
            &json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "d", "uid": "u", "labels": {"app": "a"}},
                "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}},
                         "args": ["x"]},
                "status": {"replicas": 2}
            }),
            None,
        );
        let tree = to_fields_v1(&field_set(&view));
        assert_eq!(
            tree,
            json!({
                "f:metadata": {"f:labels": {"f:app": {}}},
                "f:spec": {
                    "f:args": {},
                    "f:replicas": {},
                    "f:template": {"f:spec": {"f:containers": {
                        "k:{\"name\":\"c\"}": {".": {}, "f:image": {}, "f:name": {}}
                    }}}
                }
            })
        );
        let mut back = FieldSet::new();
        from_fields_v1(&tree, &mut Vec::new(), &mut back);
        assert_eq!(back, field_set(&view), "the tree round-trips");
    }

    #[test]
    fn display_paths_match_the_api_server() {
        let cases: Vec<(Path, &str)> = vec![
            (vec!["f:spec".into(), "f:replicas".into()], ".spec.replicas"),
            (
                vec![
                    "f:spec".into(),
                    "f:containers".into(),
                    "k:{\"name\":\"c\"}".into(),
                    "f:image".into(),
                ],
                ".spec.containers[name=\"c\"].image",
            ),
            (
                vec![
                    "f:metadata".into(),
                    "f:labels".into(),
                    "f:app.kubernetes.io/name".into(),
                ],
                ".metadata.labels.app.kubernetes.io/name",
            ),
        ];
        for (path, want) in cases {
            assert_eq!(display_path(&path), want);
        }
    }

    #[test]
    fn merge_rules() {
        let cases = [
            // maps merge field by field
            (
                json!({"a": 1, "b": {"c": 1}}),
                json!({"b": {"d": 2}}),
                json!({"a": 1, "b": {"c": 1, "d": 2}}),
            ),
            // scalars and atomic lists are replaced
            (json!({"a": [1, 2]}), json!({"a": [3]}), json!({"a": [3]})),
            // associative lists merge by name
            (
                json!({"l": [{"name": "x", "v": 1}, {"name": "y", "v": 2}]}),
                json!({"l": [{"name": "y", "w": 3}, {"name": "z"}]}),
                json!({"l": [{"name": "x", "v": 1}, {"name": "y", "v": 2, "w": 3}, {"name": "z"}]}),
            ),
            // a list of objects without names is atomic
            (
                json!({"l": [{"k": 1}]}),
                json!({"l": [{"k": 2}]}),
                json!({"l": [{"k": 2}]}),
            ),
        ];
        for (mut live, config, want) in cases {
            merge(&mut live, &config);
            assert_eq!(live, want);
        }
    }

    #[test]
    fn apply_creates_then_updates_and_removes_what_it_stopped_applying() {
        let w = writer("tool");
        let created = apply(
            None,
            &deployment(json!({"replicas": 1, "paused": false, "template": {"metadata": {"labels": {"a": "b"}}}})),
            &w,
            false,
        )
        .expect("no conflicts on create");
        assert_eq!(created["spec"]["replicas"], 1);
        assert_eq!(created["metadata"]["name"], "d");
        assert_eq!(
            managers(&created),
            [("tool".to_string(), "Apply".to_string())]
        );
        let again = apply(
            Some(&created),
            &deployment(json!({"replicas": 3})),
            &w,
            false,
        )
        .expect("own fields");
        assert_eq!(
            again["spec"],
            json!({"replicas": 3}),
            "paused and template are no longer applied"
        );
        assert_eq!(
            again["metadata"]["managedFields"][0]["fieldsV1"],
            json!({"f:spec": {"f:replicas": {}}})
        );
    }

    #[test]
    fn fields_another_manager_owns_stay_when_the_applier_drops_them() {
        let a = writer("a");
        let b = writer("b");
        let obj = apply(
            None,
            &deployment(json!({"replicas": 1, "paused": true})),
            &a,
            false,
        )
        .expect("create");
        // b applies the same value: shared ownership, no conflict.
        let obj =
            apply(Some(&obj), &deployment(json!({"paused": true})), &b, false).expect("same value");
        let obj =
            apply(Some(&obj), &deployment(json!({"replicas": 1})), &a, false).expect("drop paused");
        assert_eq!(obj["spec"]["paused"], true, "b still owns it");
        let obj = apply(Some(&obj), &deployment(json!({})), &b, false).expect("b drops it");
        assert!(obj["spec"].get("paused").is_none(), "nobody owns it now");
    }

    #[test]
    fn conflicts_name_the_manager_and_field_and_force_takes_ownership() {
        let kubectl = writer("kubectl");
        let mine = writer("mine");
        let obj =
            apply(None, &deployment(json!({"replicas": 1})), &kubectl, false).expect("create");
        let cases = [
            (json!({"replicas": 1}), false, None),
            (json!({"replicas": 2}), false, Some("Apply failed with 1 conflict: conflict with \"kubectl\" using apps/v1: .spec.replicas")),
        ];
        for (spec, force, want) in cases {
            let got = apply(Some(&obj), &deployment(spec), &mine, force)
                .err()
                .map(|c| conflict_message(&c));
            assert_eq!(got.as_deref(), want);
        }
        let forced =
            apply(Some(&obj), &deployment(json!({"replicas": 2})), &mine, true).expect("forced");
        assert_eq!(forced["spec"]["replicas"], 2);
        assert_eq!(
            managers(&forced),
            [("mine".to_string(), "Apply".to_string())],
            "kubectl lost its only field"
        );
        let back = apply(
            Some(&forced),
            &deployment(json!({"replicas": 1})),
            &kubectl,
            false,
        )
        .expect_err("now kubectl conflicts with mine");
        assert_eq!(back[0].cause(), "conflict with \"mine\" using apps/v1");
    }

    #[test]
    fn several_conflicts_are_grouped_by_manager() {
        let conflicts = vec![
            Conflict {
                manager: "b".into(),
                api_version: "v1".into(),
                field: ".x".into(),
            },
            Conflict {
                manager: "a".into(),
                api_version: "v1".into(),
                field: ".y".into(),
            },
        ];
        assert_eq!(
            conflict_message(&conflicts),
            "Apply failed with 2 conflicts: conflicts with \"a\" using v1:\n- .y\nconflicts with \"b\" using v1:\n- .x"
        );
    }

    #[test]
    fn updates_take_the_fields_they_change() {
        let applier = writer("applier");
        let obj = apply(
            None,
            &deployment(json!({"replicas": 1, "paused": false})),
            &applier,
            false,
        )
        .expect("create");
        let mut edited = obj.clone();
        edited["spec"]["replicas"] = json!(5);
        edited["spec"]["minReadySeconds"] = json!(3);
        record_update(Some(&obj), &mut edited, &writer("kubectl"));
        let entries = &edited["metadata"]["managedFields"];
        assert_eq!(
            entries[0]["fieldsV1"],
            json!({"f:spec": {"f:paused": {}}}),
            "applier keeps the unchanged field"
        );
        assert_eq!(entries[1]["operation"], "Update");
        assert_eq!(
            entries[1]["fieldsV1"],
            json!({"f:spec": {"f:minReadySeconds": {}, "f:replicas": {}}})
        );
        // The applier now conflicts on replicas.
        let err = apply(
            Some(&edited),
            &deployment(json!({"replicas": 1, "paused": false})),
            &applier,
            false,
        )
        .expect_err("kubectl owns replicas");
        assert_eq!(err[0].field, ".spec.replicas");
        // Removing a field takes it from every manager.
        let mut removed = edited.clone();
        if let Some(spec) = removed["spec"].as_object_mut() {
            spec.remove("paused");
        }
        record_update(Some(&edited), &mut removed, &writer("kubectl"));
        assert_eq!(
            managers(&removed),
            [("kubectl".to_string(), "Update".to_string())]
        );
    }

    #[test]
    fn status_writes_own_only_status() {
        let w = Writer {
            subresource: Some("status"),
            ..writer("controller")
        };
        let old = json!({"metadata": {"name": "x"}, "spec": {"a": 1}, "status": {"phase": "A"}});
        let mut new = old.clone();
        new["status"]["phase"] = json!("B");
        record_update(Some(&old), &mut new, &w);
        let e = &new["metadata"]["managedFields"][0];
        assert_eq!(e["subresource"], "status");
        assert_eq!(e["fieldsV1"], json!({"f:status": {"f:phase": {}}}));
    }
}
