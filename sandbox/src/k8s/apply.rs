//! Server-side apply and `metadata.managedFields`: which manager owns which fields (kept
//! in the real FieldsV1 format), merging an applied configuration into the live object,
//! removing fields a manager stopped applying, and the conflicts between managers.
//!
//! Lists and maps follow the kind's schema (`schema.rs`) as structured-merge-diff does:
//! `x-kubernetes-list-type: map` lists are merged and owned item by item by their
//! `x-kubernetes-list-map-keys` (`k:{"containerPort":80,"protocol":"TCP"}`, a key the item
//! omits taken from its default), sets by value (`v:"x"`), atomic lists and
//! `x-kubernetes-map-type: atomic` maps whole. Where no schema is known (a kind neither
//! built in nor registered by a CRD) the old heuristic stands: lists of objects that all
//! carry a `name` are keyed by it, every other list is atomic.

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};
use serde_json::{json, Map, Value};

use super::schema::{ListKind, Node, Root, KEY_DEFAULTS};
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
    /// `Apply` or `Update`.
    pub operation: String,
    pub api_version: String,
    pub subresource: Option<String>,
    /// As the API server prints it: `.spec.replicas`.
    pub field: String,
}

impl Conflict {
    /// The manager as the API server names it: `"kubectl"` for an applier, `"kubectl-edit"
    /// using apps/v1` for an updater (whose entry is per API version), with the
    /// subresource when there is one.
    fn manager_display(&self) -> String {
        let mut out = format!("{:?}", self.manager);
        if let Some(sub) = &self.subresource {
            out.push_str(&format!(" with subresource {sub:?}"));
        }
        if self.operation == "Update" {
            out.push_str(&format!(" using {}", self.api_version));
        }
        out
    }

    /// `conflict with "kubectl"`.
    pub(crate) fn cause(&self) -> String {
        format!("conflict with {}", self.manager_display())
    }

    /// structured-merge-diff's manager identifier (the entry's JSON without fields, time
    /// and, for appliers, API version): it groups and orders a message's conflicts.
    fn identifier(&self) -> String {
        let mut id = Map::new();
        id.insert("manager".into(), json!(self.manager));
        id.insert("operation".into(), json!(self.operation));
        if self.operation != "Apply" {
            id.insert("apiVersion".into(), json!(self.api_version));
        }
        if let Some(sub) = &self.subresource {
            id.insert("subresource".into(), json!(sub));
        }
        Value::Object(id).to_string()
    }
}

/// The message of a 409 apply conflict, worded as the API server words it.
pub(crate) fn conflict_message(conflicts: &[Conflict]) -> String {
    if let [one] = conflicts {
        return format!(
            "Apply failed with 1 conflict: {}: {}",
            one.cause(),
            one.field
        );
    }
    let mut ids: Vec<String> = conflicts.iter().map(Conflict::identifier).collect();
    ids.sort();
    ids.dedup();
    let mut lines = Vec::new();
    for id in ids {
        let group: Vec<&Conflict> = conflicts.iter().filter(|c| c.identifier() == id).collect();
        if let Some(first) = group.first() {
            lines.push(format!("conflicts with {}:", first.manager_display()));
        }
        for c in group {
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

/// The FieldsV1 tree of a set: a path that is in the set and also the prefix of others
/// gets a `"."` member (a list item owned with its fields, a free-form map entry).
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
        if set
            .range(path.clone()..)
            .nth(1)
            .is_some_and(|o| o.len() > path.len() && o.starts_with(path))
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
    dot_first(Value::Object(root))
}

/// Puts each `"."` member first, where the API server writes it.
fn dot_first(tree: Value) -> Value {
    let Value::Object(m) = tree else {
        return tree;
    };
    let mut out = Map::new();
    if let Some(dot) = m.get(".") {
        out.insert(".".into(), dot.clone());
    }
    for (k, v) in m {
        if k != "." {
            out.insert(k, dot_first(v));
        }
    }
    Value::Object(out)
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

/// Whether a list is associative by the heuristic for unknown schemas: non-empty, and
/// every item an object with a string name.
fn associative(items: &[Value]) -> bool {
    !items.is_empty() && items.iter().all(|i| i["name"].is_string())
}

/// A list's kind: its schema's, else (no schema) keyed by name when every item is named.
fn list_kind<'a>(node: Node<'a>, lists: &[&[Value]]) -> ListKind<'a> {
    node.list_kind().unwrap_or_else(|| {
        let named = lists.iter().any(|l| !l.is_empty())
            && lists.iter().all(|l| l.is_empty() || associative(l));
        if named {
            ListKind::Map(vec!["name"])
        } else {
            ListKind::Atomic
        }
    })
}

/// JSON as Go's encoder writes it into FieldsV1 keys (`<`, `>` and `&` escaped).
fn go_json(v: &Value) -> String {
    v.to_string()
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
}

/// The FieldsV1 segment of a list item: `k:{…}` with the keys sorted by name (one the item
/// omits taken from its schema default), `v:<json>` for a set. `None` for atomic lists
/// and for items missing a key that has no default.
fn item_segment(kind: &ListKind, items_node: Node, item: &Value) -> Option<String> {
    match kind {
        ListKind::Map(keys) => {
            let mut sorted = keys.clone();
            sorted.sort_unstable();
            let mut parts = Vec::new();
            for k in sorted {
                let v = item
                    .get(k)
                    .filter(|v| !v.is_null())
                    .or_else(|| items_node.field(k).0.ext("default"))?;
                parts.push(format!("{}:{}", go_json(&json!(k)), go_json(v)));
            }
            Some(format!("k:{{{}}}", parts.join(",")))
        }
        ListKind::Set => Some(format!("v:{}", go_json(item))),
        ListKind::Atomic => None,
    }
}

/// Every item's segment, or `None` when the list must be treated whole.
fn item_segments(kind: &ListKind, items_node: Node, items: &[Value]) -> Option<Vec<String>> {
    items
        .iter()
        .map(|i| item_segment(kind, items_node, i))
        .collect()
}

/// Whether a list item is the one a `k:` or `v:` segment names, without the schema: a key
/// field the item omits matches its default from [`KEY_DEFAULTS`].
fn item_matches(item: &Value, seg: &str) -> bool {
    if let Some(key) = seg.strip_prefix("k:") {
        let Ok(Value::Object(fields)) = serde_json::from_str::<Value>(key) else {
            return false;
        };
        fields.iter().all(|(name, want)| match item.get(name) {
            Some(v) if !v.is_null() => v == want,
            _ => KEY_DEFAULTS
                .iter()
                .any(|(_, field, default)| field == name && want.as_str() == Some(default)),
        })
    } else if let Some(value) = seg.strip_prefix("v:") {
        serde_json::from_str::<Value>(value).is_ok_and(|want| *item == want)
    } else {
        false
    }
}

/// Whether a path is a key field of a list-map item (`…/k:{"name":"c"}/f:name`).
fn is_key_field(path: &[String]) -> bool {
    let [.., item, field] = path else {
        return false;
    };
    let (Some(key), Some(field)) = (item.strip_prefix("k:"), field.strip_prefix("f:")) else {
        return false;
    };
    serde_json::from_str::<Value>(key).is_ok_and(|k| k.get(field).is_some())
}

fn is_item(seg: &str) -> bool {
    seg.starts_with("k:") || seg.starts_with("v:")
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

/// The fields a value sets, as structured-merge-diff counts them: leaves, empty maps,
/// atomic lists and maps whole, list items (and their fields), free-form map entries.
pub(crate) fn field_set(value: &Value, node: Node) -> FieldSet {
    fn walk(v: &Value, node: Node, prefix: &mut Path, out: &mut FieldSet) {
        match v {
            Value::Object(m) if !m.is_empty() => {
                if node.map_atomic() && !prefix.is_empty() {
                    out.insert(prefix.clone());
                    return;
                }
                for (k, child) in m {
                    let (child_node, declared) = node.field(k);
                    prefix.push(format!("f:{k}"));
                    walk(child, child_node, prefix, out);
                    if node.is_known() && !declared {
                        // An entry of a free-form map is owned itself, besides what it holds.
                        out.insert(prefix.clone());
                    }
                    prefix.pop();
                }
            }
            Value::Array(items) => {
                let kind = list_kind(node, &[items]);
                let items_node = node.items();
                match item_segments(&kind, items_node, items) {
                    Some(segs) => {
                        for (item, seg) in items.iter().zip(segs) {
                            prefix.push(seg);
                            out.insert(prefix.clone());
                            if item.is_object() {
                                walk(item, items_node, prefix, out);
                            }
                            prefix.pop();
                        }
                    }
                    None => {
                        if !prefix.is_empty() {
                            out.insert(prefix.clone());
                        }
                    }
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
    walk(value, node, &mut Vec::new(), &mut out);
    out
}

/// The value at a path.
pub(crate) fn value_at<'a>(value: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut v = value;
    for seg in path {
        v = if let Some(field) = seg.strip_prefix("f:") {
            v.as_object()?.get(field)?
        } else if is_item(seg) {
            v.as_array()?.iter().find(|i| item_matches(i, seg))?
        } else {
            return None;
        };
    }
    Some(v)
}

/// Whether two views agree at a path (list items only need to be present in both).
fn same_at(a: &Value, b: &Value, path: &[String]) -> bool {
    match (value_at(a, path), value_at(b, path)) {
        (Some(x), Some(y)) => path.last().is_some_and(|s| is_item(s)) || x == y,
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
        } else if let Some(value) = seg.strip_prefix("v:") {
            out.push_str(&format!("[={value}]"));
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
        items.retain(|i| !item_matches(i, last));
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
        } else if is_item(seg) {
            v.as_array_mut()?
                .iter_mut()
                .find(|i| item_matches(i, seg))?
        } else {
            return None;
        };
    }
    Some(v)
}

/// Merges an applied configuration into a live value: granular maps field by field,
/// list maps item by item (by key), sets by value, atomic lists and maps (and scalars)
/// replaced.
pub(crate) fn merge(live: &mut Value, config: &Value, node: Node) {
    match (live, config) {
        (Value::Object(l), Value::Object(c)) if !node.map_atomic() => {
            for (k, cv) in c {
                let child = node.field(k).0;
                match l.get_mut(k) {
                    Some(lv) => merge(lv, cv, child),
                    None => {
                        l.insert(k.clone(), cv.clone());
                    }
                }
            }
        }
        (Value::Array(l), Value::Array(c)) => {
            let kind = list_kind(node, &[l, c]);
            let items_node = node.items();
            match kind {
                ListKind::Atomic => *l = c.clone(),
                ListKind::Set => {
                    for item in c {
                        if !l.contains(item) {
                            l.push(item.clone());
                        }
                    }
                }
                ListKind::Map(_) => {
                    let Some(config_segs) = item_segments(&kind, items_node, c) else {
                        // Applied items without their keys cannot be told apart.
                        *l = c.clone();
                        return;
                    };
                    // A live item without its keys matches nothing and stays.
                    let live_segs: Vec<Option<String>> = l
                        .iter()
                        .map(|i| item_segment(&kind, items_node, i))
                        .collect();
                    for (item, seg) in c.iter().zip(config_segs) {
                        match live_segs.iter().position(|s| s.as_ref() == Some(&seg)) {
                            Some(i) => merge(&mut l[i], item, items_node),
                            None => l.push(item.clone()),
                        }
                    }
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
    let root = Root::of_object(&config);
    let cfg_view = owned_view(&config, sub);
    let applied = field_set(&cfg_view, root.node());
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
                    operation: e.operation.clone(),
                    api_version: e.api_version.clone(),
                    subresource: e.subresource.clone(),
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
    // Shortest first: an item nobody else holds goes whole before its fields are looked
    // at, and a held item keeps its key fields, which name it.
    let mut removed: Vec<&Path> = previous.difference(&applied).collect();
    removed.sort_by_key(|p| p.len());
    for path in removed {
        let shared = others
            .iter()
            .any(|o| o == path || (path.last().is_some_and(|s| is_item(s)) && o.starts_with(path)));
        if !shared && !is_key_field(path) {
            remove_at(&mut object, path);
        }
    }
    merge(&mut object, &cfg_view, root.node());

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
/// fields the write removed leave every entry. Managed fields the client sent (non-empty,
/// on the main resource) are the starting point, as the API server takes them — that is
/// how kubectl moves client-side-apply ownership to its applier; otherwise the live
/// object's are.
pub(crate) fn record_update(old: Option<&Value>, new: &mut Value, writer: &Writer) {
    let sub = writer.subresource;
    let root = match Root::of_object(new) {
        Root::Unknown => old.map(Root::of_object).unwrap_or(Root::Unknown),
        known => known,
    };
    let old_view = old.map(|o| owned_view(o, sub)).unwrap_or_else(|| json!({}));
    let new_view = owned_view(new, sub);
    let old_set = field_set(&old_view, root.node());
    let new_set = field_set(&new_view, root.node());
    let changed: FieldSet = new_set
        .iter()
        .filter(|p| !old_set.contains(*p) || !same_at(&old_view, &new_view, p))
        .cloned()
        .collect();
    let removed: FieldSet = old_set.difference(&new_set).cloned().collect();
    let sent = new["metadata"]["managedFields"]
        .as_array()
        .filter(|list| !list.is_empty() && sub.is_none())
        .and_then(|list| {
            list.iter()
                .map(Entry::from_value)
                .collect::<Option<Vec<Entry>>>()
        });
    let mut entries = sent.unwrap_or_else(|| entries_of(old));
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
        let node = Root::of("apps/v1", "Deployment");
        let tree = to_fields_v1(&field_set(&view, node.node()));
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
        assert_eq!(back, field_set(&view, node.node()), "the tree round-trips");
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
    fn merge_rules_without_a_schema() {
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
            merge(&mut live, &config, Node::UNKNOWN);
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
            (
                json!({"replicas": 2}),
                false,
                Some("Apply failed with 1 conflict: conflict with \"kubectl\": .spec.replicas"),
            ),
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
        assert_eq!(back[0].cause(), "conflict with \"mine\"");
    }

    #[test]
    fn several_conflicts_are_grouped_by_manager_as_the_api_server_words_them() {
        let conflict = |manager: &str, operation: &str, sub: Option<&str>, field: &str| Conflict {
            manager: manager.into(),
            operation: operation.into(),
            api_version: "apps/v1".into(),
            subresource: sub.map(str::to_string),
            field: field.into(),
        };
        let conflicts = vec![
            conflict("kubectl-client-side-apply", "Update", None, ".x"),
            conflict("kubectl", "Apply", None, ".x"),
            conflict("kubectl", "Apply", None, ".y"),
            conflict("ctl", "Update", Some("status"), ".status.z"),
        ];
        // Ordered by the manager identifier (its JSON), not by the printed name.
        assert_eq!(
            conflict_message(&conflicts),
            "Apply failed with 4 conflicts: conflicts with \"ctl\" with subresource \"status\" using apps/v1:\n- .status.z\nconflicts with \"kubectl\":\n- .x\n- .y\nconflicts with \"kubectl-client-side-apply\" using apps/v1:\n- .x"
        );
        assert_eq!(
            conflicts[0].cause(),
            "conflict with \"kubectl-client-side-apply\" using apps/v1"
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

    fn labelled_deployment(containers: Value) -> Value {
        deployment(json!({
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": containers}},
        }))
    }

    fn fields_of(object: &Value, manager: &str) -> Value {
        object["metadata"]["managedFields"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|e| e["manager"] == manager)
            .map(|e| e["fieldsV1"].clone())
            .unwrap_or(Value::Null)
    }

    fn container_fields(fields: &Value) -> &Value {
        &fields["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"web\"}"]
    }

    #[test]
    fn server_side_apply_after_client_side_apply_merges_ports_by_key() {
        let manifest = |port: i64| {
            labelled_deployment(json!([{"name": "web", "image": "nginx",
                "ports": [{"containerPort": port}], "env": [{"name": "A", "value": "1"}]}]))
        };
        // Client-side apply creates the object as an Update by kubectl-client-side-apply.
        let mut created = manifest(80);
        record_update(None, &mut created, &writer("kubectl-client-side-apply"));
        let csa = fields_of(&created, "kubectl-client-side-apply");
        assert_eq!(
            container_fields(&csa)["f:ports"],
            json!({"k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}}}),
            "ports are keyed by containerPort and protocol, defaulted to TCP"
        );
        // kubectl apply --server-side of the same file with the port changed: a new item,
        // not a conflict on the list.
        let applied = apply(Some(&created), &manifest(8080), &writer("kubectl"), false)
            .expect("no conflict: the new port is a new item");
        let ports: Vec<&Value> = applied["spec"]["template"]["spec"]["containers"][0]["ports"]
            .as_array()
            .expect("ports")
            .iter()
            .map(|p| &p["containerPort"])
            .collect();
        assert_eq!(
            ports,
            [&json!(80), &json!(8080)],
            "80 stays while its owner keeps it"
        );
        assert_eq!(
            managers(&applied),
            [
                (
                    "kubectl-client-side-apply".to_string(),
                    "Update".to_string()
                ),
                ("kubectl".to_string(), "Apply".to_string())
            ]
        );
        let ssa = fields_of(&applied, "kubectl");
        assert!(container_fields(&ssa)["f:ports"]
            ["k:{\"containerPort\":8080,\"protocol\":\"TCP\"}"]
            .is_object());
        assert!(
            container_fields(&ssa)["f:env"]["k:{\"name\":\"A\"}"]["f:value"].is_object(),
            "co-owned"
        );
    }

    #[test]
    fn list_maps_sets_and_atomic_values_are_owned_as_the_schema_says() {
        let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "finalizers": ["a/b"], "labels": {"x": "y"}},
            "spec": {
                "nodeSelector": {"pool": "gpu"},
                "volumes": [{"name": "data", "emptyDir": {}}],
                "containers": [{"name": "c", "image": "i", "args": ["--x"],
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                    "ports": [{"containerPort": 53, "protocol": "UDP"}]}]}});
        record_update(None, &mut pod, &writer("maker"));
        let fields = fields_of(&pod, "maker");
        assert_eq!(
            fields,
            json!({
                "f:metadata": {"f:finalizers": {"v:\"a/b\"": {}}, "f:labels": {"f:x": {}}},
                "f:spec": {
                    "f:containers": {"k:{\"name\":\"c\"}": {
                        ".": {}, "f:args": {}, "f:image": {}, "f:name": {},
                        "f:ports": {"k:{\"containerPort\":53,\"protocol\":\"UDP\"}": {".": {}, "f:containerPort": {}, "f:protocol": {}}},
                        "f:volumeMounts": {"k:{\"mountPath\":\"/data\"}": {".": {}, "f:mountPath": {}, "f:name": {}}},
                    }},
                    "f:nodeSelector": {},
                    "f:volumes": {"k:{\"name\":\"data\"}": {".": {}, "f:emptyDir": {}, "f:name": {}}},
                }
            })
        );
        let mut back = FieldSet::new();
        from_fields_v1(&fields, &mut Vec::new(), &mut back);
        assert_eq!(to_fields_v1(&back), fields, "the tree round-trips");
    }

    #[test]
    fn merging_follows_list_map_keys_sets_and_atomic_lists() {
        let root = Root::of("v1", "Pod");
        let mut live = json!({"metadata": {"finalizers": ["a"]}, "spec": {
            "nodeSelector": {"pool": "cpu", "zone": "z"},
            "containers": [{"name": "c", "args": ["1", "2"], "env": [{"name": "A", "value": "1"}],
                "ports": [{"containerPort": 80, "protocol": "TCP"}]}]}});
        let config = json!({"metadata": {"finalizers": ["b", "a"]}, "spec": {
            "nodeSelector": {"pool": "gpu"},
            "containers": [{"name": "c", "args": ["3"], "env": [{"name": "B", "value": "2"}],
                "ports": [{"containerPort": 80, "name": "http"}]}]}});
        merge(&mut live, &config, root.node());
        assert_eq!(
            live,
            json!({"metadata": {"finalizers": ["a", "b"]}, "spec": {
                "nodeSelector": {"pool": "gpu"},
                "containers": [{"name": "c", "args": ["3"],
                    "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                    "ports": [{"containerPort": 80, "protocol": "TCP", "name": "http"}]}]}}),
            "sets by value, env by name, ports by key with TCP defaulted; args and the atomic nodeSelector replaced"
        );
    }

    #[test]
    fn conflicts_arise_only_where_another_manager_owns_a_changed_value() {
        let a = writer("a");
        let b = writer("b");
        let env = |pairs: &[(&str, &str)]| {
            labelled_deployment(json!([{"name": "web", "env": pairs
                .iter()
                .map(|(n, v)| json!({"name": n, "value": v}))
                .collect::<Vec<_>>()}]))
        };
        let obj = apply(None, &env(&[("A", "1")]), &a, false).expect("create");
        // b adds its own item: the list is not owned whole, so no conflict.
        let obj = apply(Some(&obj), &env(&[("B", "2")]), &b, false).expect("b's own item");
        let names: Vec<&Value> = obj["spec"]["template"]["spec"]["containers"][0]["env"]
            .as_array()
            .expect("env")
            .iter()
            .map(|e| &e["name"])
            .collect();
        assert_eq!(names, [&json!("A"), &json!("B")]);
        let err =
            apply(Some(&obj), &env(&[("A", "changed")]), &b, false).expect_err("a owns A's value");
        assert_eq!(
            conflict_message(&err),
            "Apply failed with 1 conflict: conflict with \"a\": .spec.template.spec.containers[name=\"web\"].env[name=\"A\"].value"
        );
        // b dropping B removes it; A (a's) stays.
        let obj = apply(Some(&obj), &env(&[]), &b, false).expect("drop B");
        assert_eq!(
            obj["spec"]["template"]["spec"]["containers"][0]["env"],
            json!([{"name": "A", "value": "1"}])
        );
        let forced = apply(Some(&obj), &env(&[("A", "changed")]), &b, true).expect("forced");
        assert_eq!(
            forced["spec"]["template"]["spec"]["containers"][0]["env"][0]["value"],
            "changed"
        );
        assert!(
            container_fields(&fields_of(&forced, "a"))["f:env"]["k:{\"name\":\"A\"}"]
                .get("f:value")
                .is_none(),
            "a lost the value it was forced off"
        );
    }

    #[test]
    fn updates_start_from_the_managed_fields_a_client_sends() {
        let mut obj = labelled_deployment(json!([{"name": "web", "image": "i"}]));
        record_update(None, &mut obj, &writer("kubectl-client-side-apply"));
        // kubectl's migration to server-side apply: the same object, its entries renamed.
        let mut migrated = obj.clone();
        migrated["metadata"]["managedFields"][0]["manager"] = json!("kubectl");
        migrated["metadata"]["managedFields"][0]["operation"] = json!("Apply");
        record_update(Some(&obj), &mut migrated, &writer("kubectl"));
        assert_eq!(
            managers(&migrated),
            [("kubectl".to_string(), "Apply".to_string())]
        );
        // Without managed fields in the body the live ones are kept.
        let mut plain = obj.clone();
        if let Some(m) = plain["metadata"].as_object_mut() {
            m.remove("managedFields");
        }
        record_update(Some(&obj), &mut plain, &writer("kubectl-edit"));
        assert_eq!(
            managers(&plain),
            [(
                "kubectl-client-side-apply".to_string(),
                "Update".to_string()
            )]
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
