//! Helpers over untyped Kubernetes objects, shared by the controllers, the defaulting and
//! the volume code: panic-free reads and writes of nested JSON fields, timestamps,
//! stable hashes and generated names, label and node selectors, resource quantities.

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

use super::store::{self, ObjKey, Store};
#[cfg(test)]
use crate::common::hash::canonical;
use crate::common::hash::fnv64;

/// The value at `path`, `Null` when any step is missing (indexing JSON never panics).
pub(crate) fn at<'a>(v: &'a Value, path: &[&str]) -> &'a Value {
    path.iter().fold(v, |v, k| &v[*k])
}

/// The string at `path`, if there is one.
pub(crate) fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    at(v, path).as_str()
}

/// The elements of an array field, empty when it is absent or not an array.
pub(crate) fn items(v: &Value) -> &[Value] {
    v.as_array().map(Vec::as_slice).unwrap_or(&[])
}

fn as_map(v: &mut Value) -> &mut Map<String, Value> {
    if !v.is_object() {
        *v = Value::Object(Map::new());
    }
    match v {
        Value::Object(m) => m,
        _ => unreachable!("just made an object"),
    }
}

/// The object at `path`, created as needed; whatever non-object is in the way is
/// replaced, so user input of the wrong shape cannot make a controller panic.
pub(crate) fn obj_mut<'a>(v: &'a mut Value, path: &[&str]) -> &'a mut Map<String, Value> {
    let mut cur = v;
    for k in path {
        cur = as_map(cur).entry((*k).to_string()).or_insert(Value::Null);
    }
    as_map(cur)
}

/// Sets the field at `path` (see [`obj_mut`]).
pub(crate) fn set(v: &mut Value, path: &[&str], value: Value) {
    match path.split_last() {
        Some((last, parents)) => {
            obj_mut(v, parents).insert((*last).to_string(), value);
        }
        None => *v = value,
    }
}

/// Sets the field at `path` unless it already holds something other than null.
pub(crate) fn default(v: &mut Value, path: &[&str], value: Value) {
    if at(v, path).is_null() {
        set(v, path, value);
    }
}

/// Removes the field at `path`, returning it.
pub(crate) fn remove(v: &mut Value, path: &[&str]) -> Option<Value> {
    let (last, parents) = path.split_last()?;
    let mut cur = v;
    for k in parents {
        cur = cur.get_mut(*k)?;
    }
    cur.as_object_mut()?.remove(*last)
}

/// The value at `path`, created (null) as needed, with objects made along the way.
pub(crate) fn value_mut<'a>(v: &'a mut Value, path: &[&str]) -> &'a mut Value {
    match path.split_last() {
        Some((last, parents)) => obj_mut(v, parents)
            .entry((*last).to_string())
            .or_insert(Value::Null),
        None => v,
    }
}

/// The elements of the array at `path`, created (empty) as needed.
pub(crate) fn array_mut<'a>(v: &'a mut Value, path: &[&str]) -> &'a mut Vec<Value> {
    let slot = value_mut(v, path);
    if !slot.is_array() {
        *slot = Value::Array(Vec::new());
    }
    match slot {
        Value::Array(a) => a,
        _ => unreachable!("just made an array"),
    }
}

/// The value without null fields: the API server omits empty optional fields, and
/// clients checking against the OpenAPI types reject nulls where a string belongs.
pub(crate) fn compact(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, compact(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.into_iter().map(compact).collect()),
        other => other,
    }
}

pub(crate) fn name(v: &Value) -> &str {
    str_at(v, &["metadata", "name"]).unwrap_or_default()
}

pub(crate) fn uid(v: &Value) -> &str {
    str_at(v, &["metadata", "uid"]).unwrap_or_default()
}

pub(crate) fn deleting(v: &Value) -> bool {
    !at(v, &["metadata", "deletionTimestamp"]).is_null()
}

pub(crate) fn has_finalizer(v: &Value, finalizer: &str) -> bool {
    items(at(v, &["metadata", "finalizers"]))
        .iter()
        .any(|f| f == finalizer)
}

pub(crate) fn add_finalizer(v: &mut Value, finalizer: &str) {
    let list = array_mut(v, &["metadata", "finalizers"]);
    if !list.iter().any(|f| f == finalizer) {
        list.push(Value::from(finalizer));
    }
}

/// Removes a finalizer, and the list with it when it is left empty, as the API server
/// does not show an empty list.
pub(crate) fn remove_finalizer(v: &mut Value, finalizer: &str) {
    if has_finalizer(v, finalizer) {
        let list = array_mut(v, &["metadata", "finalizers"]);
        list.retain(|f| f != finalizer);
        if list.is_empty() {
            remove(v, &["metadata", "finalizers"]);
        }
    }
}

pub(crate) fn annotation<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v["metadata"]["annotations"][key].as_str()
}

pub(crate) fn label<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v["metadata"]["labels"][key].as_str()
}

/// The uid of the object's controlling owner, when it has one of that kind.
pub(crate) fn controller_uid<'a>(v: &'a Value, kind: &str) -> Option<&'a str> {
    items(at(v, &["metadata", "ownerReferences"]))
        .iter()
        .find(|r| r["controller"] == true && r["kind"] == kind)
        .and_then(|r| r["uid"].as_str())
}

/// An ownerReference naming `owner` as the controller, as workload controllers set.
pub(crate) fn controller_ref(owner: &Value, api_version: &str, kind: &str) -> Value {
    serde_json::json!({
        "apiVersion": api_version,
        "kind": kind,
        "name": name(owner),
        "uid": uid(owner),
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

pub(crate) fn parse_time(v: &Value) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(v.as_str()?)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

pub(crate) fn ts(t: DateTime<Utc>) -> Value {
    Value::from(store::timestamp(t))
}

/// The objects of one resource, cloned so the store can be changed while walking them.
pub(crate) fn list(
    store: &Store,
    group: &str,
    resource: &str,
    namespace: Option<&str>,
) -> Vec<(ObjKey, Value)> {
    list_where(store, group, resource, namespace, |_| true)
}

/// The objects of one resource that `keep` selects, cloned (and only those: settles run
/// before every request, so they copy no more than they may change).
pub(crate) fn list_where(
    store: &Store,
    group: &str,
    resource: &str,
    namespace: Option<&str>,
    keep: impl Fn(&Value) -> bool,
) -> Vec<(ObjKey, Value)> {
    store
        .list(group, resource, namespace)
        .into_iter()
        .filter(|(_, v)| keep(v))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// The alphabet Kubernetes draws generated name suffixes from (no vowels, no look-alikes).
const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// `n` characters of a stable, name-safe encoding of `parts`.
pub(crate) fn stable_suffix(parts: &[&str], n: usize) -> String {
    let mut h = fnv64(parts);
    (0..n)
        .map(|_| {
            let c = ALPHANUMS[(h % ALPHANUMS.len() as u64) as usize];
            h /= ALPHANUMS.len() as u64;
            char::from(c)
        })
        .collect()
}

/// Kubernetes' `SafeEncodeString`: each byte mapped onto [`ALPHANUMS`], as the
/// deployment controller renders a pod-template-hash.
pub(crate) fn safe_encode(s: &str) -> String {
    s.bytes()
        .map(|b| char::from(ALPHANUMS[usize::from(b) % ALPHANUMS.len()]))
        .collect()
}

/// A free name `<base>-<5 random chars>` in the namespace, as `generateName` produces.
pub(crate) fn generate_name(
    store: &Store,
    group: &str,
    resource: &str,
    namespace: &str,
    base: &str,
) -> String {
    // The API server truncates the prefix so the name stays a valid label (63 characters).
    let base: String = base.chars().take(57).collect();
    loop {
        let suffix: String = (0..5)
            .map(|_| char::from(ALPHANUMS[rand::random_range(0..ALPHANUMS.len())]))
            .collect();
        let name = format!("{base}-{suffix}");
        if store
            .get(&ObjKey::new(group, resource, namespace, &name))
            .is_none()
        {
            return name;
        }
    }
}

/// Whether a `metav1.LabelSelector` (`matchLabels` and `matchExpressions`) selects `labels`;
/// the empty selector selects everything.
pub(crate) fn selector_matches(selector: &Value, labels: &Value) -> bool {
    if let Some(ml) = selector["matchLabels"].as_object() {
        if !ml.iter().all(|(k, v)| labels[k.as_str()] == *v) {
            return false;
        }
    }
    items(&selector["matchExpressions"]).iter().all(|e| {
        let value = labels[e["key"].as_str().unwrap_or_default()].as_str();
        let values: Vec<&str> = items(&e["values"])
            .iter()
            .filter_map(Value::as_str)
            .collect();
        match e["operator"].as_str() {
            Some("In") => value.is_some_and(|v| values.contains(&v)),
            Some("NotIn") => value.is_none_or(|v| !values.contains(&v)),
            Some("Exists") => value.is_some(),
            Some("DoesNotExist") => value.is_none(),
            _ => false,
        }
    })
}

/// Whether a plain `key: value` selector (a Service's or a nodeSelector) selects `labels`.
pub(crate) fn map_matches(selector: &Value, labels: &Value) -> bool {
    selector
        .as_object()
        .is_none_or(|m| m.iter().all(|(k, v)| labels[k.as_str()] == *v))
}

/// Whether a node matches one `nodeSelectorTerm` (all its expressions and fields).
fn term_matches(term: &Value, node: &Value) -> bool {
    let labels = &node["metadata"]["labels"];
    let exprs_ok = items(&term["matchExpressions"]).iter().all(|e| {
        let value = labels[e["key"].as_str().unwrap_or_default()].as_str();
        requirement_holds(e, value)
    });
    let fields_ok = items(&term["matchFields"]).iter().all(|e| {
        let value = match e["key"].as_str() {
            Some("metadata.name") => Some(name(node)),
            _ => None,
        };
        requirement_holds(e, value)
    });
    exprs_ok && fields_ok
}

fn requirement_holds(e: &Value, value: Option<&str>) -> bool {
    let values: Vec<&str> = items(&e["values"])
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let number = |s: Option<&str>| s.and_then(|s| s.parse::<i64>().ok());
    match e["operator"].as_str() {
        Some("In") => value.is_some_and(|v| values.contains(&v)),
        Some("NotIn") => value.is_none_or(|v| !values.contains(&v)),
        Some("Exists") => value.is_some(),
        Some("DoesNotExist") => value.is_none(),
        Some("Gt") => {
            matches!((number(value), number(values.first().copied())), (Some(a), Some(b)) if a > b)
        }
        Some("Lt") => {
            matches!((number(value), number(values.first().copied())), (Some(a), Some(b)) if a < b)
        }
        _ => false,
    }
}

/// Whether a pod's `nodeSelector` and required node affinity both accept the node.
pub(crate) fn node_matches(pod_spec: &Value, node: &Value) -> bool {
    if !map_matches(&pod_spec["nodeSelector"], &node["metadata"]["labels"]) {
        return false;
    }
    let required = at(
        pod_spec,
        &[
            "affinity",
            "nodeAffinity",
            "requiredDuringSchedulingIgnoredDuringExecution",
            "nodeSelectorTerms",
        ],
    );
    match required.as_array() {
        // Terms are ORed; an empty list matches nothing, as in the scheduler.
        Some(terms) => terms.iter().any(|t| term_matches(t, node)),
        None => true,
    }
}

/// Whether one of the tolerations tolerates the taint.
pub(crate) fn tolerates(tolerations: &Value, taint: &Value) -> bool {
    items(tolerations).iter().any(|t| {
        let effect_ok = t["effect"]
            .as_str()
            .is_none_or(|e| e.is_empty() || taint["effect"] == e);
        let key = t["key"].as_str().unwrap_or_default();
        match t["operator"].as_str().unwrap_or("Equal") {
            "Exists" => effect_ok && (key.is_empty() || taint["key"] == key),
            _ => {
                effect_ok
                    && taint["key"] == key
                    && t["value"].as_str().unwrap_or_default()
                        == taint["value"].as_str().unwrap_or_default()
            }
        }
    })
}

/// An integer resource quantity (`"2"`, `2`, `"1k"`); extended resources are whole numbers.
pub(crate) fn count(v: &Value) -> i64 {
    match v {
        Value::Number(n) => n.as_i64().unwrap_or_default(),
        Value::String(s) => {
            let s = s.trim();
            let (digits, mult) = match s.strip_suffix('k') {
                Some(d) => (d, 1000),
                None => (s, 1),
            };
            digits.parse::<i64>().map(|n| n * mult).unwrap_or_default()
        }
        _ => 0,
    }
}

/// A storage quantity in bytes (`1Ti`, `10Gi`, `500M`, `1.5Gi`).
pub(crate) fn storage_bytes(q: &Value) -> f64 {
    let s = match q {
        Value::String(s) => s.trim().to_string(),
        Value::Number(n) => n.to_string(),
        _ => return 0.0,
    };
    let units: [(&str, f64); 12] = [
        ("Ki", 1024f64),
        ("Mi", 1024f64.powi(2)),
        ("Gi", 1024f64.powi(3)),
        ("Ti", 1024f64.powi(4)),
        ("Pi", 1024f64.powi(5)),
        ("Ei", 1024f64.powi(6)),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("P", 1e15),
        ("E", 1e18),
    ];
    for (suffix, mult) in units {
        if let Some(n) = s.strip_suffix(suffix) {
            return n.parse::<f64>().unwrap_or_default() * mult;
        }
    }
    s.parse().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn set_replaces_whatever_is_in_the_way() {
        let mut v = json!({"status": "broken"});
        set(&mut v, &["status", "phase"], json!("Running"));
        assert_eq!(v, json!({"status": {"phase": "Running"}}));
        assert_eq!(remove(&mut v, &["status", "phase"]), Some(json!("Running")));
        assert_eq!(remove(&mut v, &["nope", "x"]), None);
    }

    #[test]
    fn label_selectors() {
        let labels = json!({"app": "web", "tier": "front"});
        let cases = [
            (json!({}), true),
            (json!({"matchLabels": {"app": "web"}}), true),
            (json!({"matchLabels": {"app": "db"}}), false),
            (
                json!({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["front", "x"]}]}),
                true,
            ),
            (
                json!({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["front"]}]}),
                false,
            ),
            (
                json!({"matchExpressions": [{"key": "zone", "operator": "DoesNotExist"}]}),
                true,
            ),
            (
                json!({"matchExpressions": [{"key": "zone", "operator": "Exists"}]}),
                false,
            ),
        ];
        for (selector, want) in cases {
            assert_eq!(selector_matches(&selector, &labels), want, "{selector}");
        }
    }

    #[test]
    fn tolerations_follow_the_scheduler_rules() {
        let taint = json!({"key": "preemptible", "value": "true", "effect": "NoSchedule"});
        let cases = [
            (json!([]), false),
            (
                json!([{"key": "preemptible", "value": "true", "effect": "NoSchedule"}]),
                true,
            ),
            (
                json!([{"key": "preemptible", "operator": "Equal", "value": "false"}]),
                false,
            ),
            (json!([{"key": "preemptible", "operator": "Exists"}]), true),
            (json!([{"operator": "Exists"}]), true),
            (
                json!([{"key": "preemptible", "operator": "Exists", "effect": "NoExecute"}]),
                false,
            ),
        ];
        for (tolerations, want) in cases {
            assert_eq!(tolerates(&tolerations, &taint), want, "{tolerations}");
        }
    }

    #[test]
    fn node_affinity_terms() {
        let node = json!({"metadata": {"name": "n1", "labels": {"pool": "gpu", "gpus": "4"}}});
        let aff = |terms: Value| json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}});
        let cases = [
            (json!({"nodeSelector": {"pool": "gpu"}}), true),
            (json!({"nodeSelector": {"pool": "cpu"}}), false),
            (
                aff(
                    json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]),
                ),
                true,
            ),
            (
                aff(
                    json!([{"matchExpressions": [{"key": "gpus", "operator": "Gt", "values": ["2"]}]}]),
                ),
                true,
            ),
            (
                aff(
                    json!([{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["x"]}]},
                        {"matchExpressions": [{"key": "pool", "operator": "Exists"}]}]),
                ),
                true,
            ),
            (aff(json!([])), false),
        ];
        for (spec, want) in cases {
            assert_eq!(node_matches(&spec, &node), want, "{spec}");
        }
    }

    #[test]
    fn stable_names_do_not_change() {
        assert_eq!(fnv64(&["a"]), 0xaf63_dc4c_8601_ec8c, "FNV-1a of \"a\"");
        assert_eq!(stable_suffix(&["x", "y"], 4), stable_suffix(&["x", "y"], 4));
        assert_ne!(stable_suffix(&["x", "y"], 4), stable_suffix(&["xy"], 4));
        assert_eq!(safe_encode("12"), "56");
        assert_eq!(
            canonical(&json!({"b": 1, "a": {"d": 2, "c": 3}})),
            r#"{"a":{"c":3,"d":2},"b":1}"#
        );
    }

    #[test]
    fn quantities() {
        for (v, want) in [
            (json!("2"), 2),
            (json!(4), 4),
            (json!("1k"), 1000),
            (json!("x"), 0),
            (json!(null), 0),
        ] {
            assert_eq!(count(&v), want, "{v}");
        }
    }
}
