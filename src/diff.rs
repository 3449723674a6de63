//! Structural diff of two specs: which dotted paths differ, treating an absent key and
//! null as the same and a value not known until apply as a change; and a spec as its
//! live form with the null keys left out, which a no-op's plan stores instead of a copy.

use serde_json::Value;
use terrain_providers::protocol::is_unknown;

/// The dotted paths at which `before` and `after` differ. Tables are compared key by
/// key; lists and scalars as whole values. Paths under any of `ignore` are left out.
pub fn changed_paths(before: &Value, after: &Value, ignore: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    walk(before, after, "", &mut out);
    out.retain(|p| {
        !ignore
            .iter()
            .any(|i| p == i || p.starts_with(&format!("{i}.")))
    });
    out
}

fn walk(before: &Value, after: &Value, path: &str, out: &mut Vec<String>) {
    match (before, after) {
        (Value::Object(b), Value::Object(a)) => {
            let mut keys: Vec<&String> = b.keys().chain(a.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                let sub = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                walk(
                    b.get(k).unwrap_or(&Value::Null),
                    a.get(k).unwrap_or(&Value::Null),
                    &sub,
                    out,
                );
            }
        }
        _ if is_unknown(after) => out.push(path.to_string()),
        _ if !same(before, after) => out.push(path.to_string()),
        _ => {}
    }
}

/// Equality where an empty table equals null (an absent optional table).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Null, Value::Object(m)) | (Value::Object(m), Value::Null) => m.is_empty(),
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

/// `value` with each of `paths` replaced by its value in `from` (ignore_changes keeps
/// the live value so an update does not undo changes made outside terrain).
pub fn overlay(value: &Value, from: &Value, paths: &[String]) -> Value {
    let mut out = value.clone();
    for p in paths {
        let parts: Vec<&str> = p.split('.').collect();
        let src = parts.iter().try_fold(from, |v, k| v.get(*k));
        set_path(&mut out, &parts, src.cloned().unwrap_or(Value::Null));
    }
    out
}

fn set_path(v: &mut Value, parts: &[&str], new: Value) {
    let Some((first, rest)) = parts.split_first() else {
        *v = new;
        return;
    };
    if !v.is_object() {
        *v = Value::Object(serde_json::Map::new());
    }
    if let Value::Object(m) = v {
        let entry = m.entry((*first).to_string()).or_insert(Value::Null);
        set_path(entry, rest, new);
    }
}

/// `v` with every object key whose value is null left out, at any depth.
pub fn without_nulls(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), without_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_nulls).collect()),
        other => other.clone(),
    }
}

/// Whether `spec` equals [`without_nulls`]`(live)` (keys in any order), without building
/// it.
pub fn is_without_nulls(live: &Value, spec: &Value) -> bool {
    match (live, spec) {
        (Value::Object(l), Value::Object(s)) => {
            l.iter().filter(|(_, v)| !v.is_null()).count() == s.len()
                && s.iter()
                    .all(|(k, sv)| l.get(k).is_some_and(|lv| is_without_nulls(lv, sv)))
        }
        (Value::Array(l), Value::Array(s)) => {
            l.len() == s.len() && l.iter().zip(s).all(|(l, s)| is_without_nulls(l, s))
        }
        (l, s) => l == s && !matches!(l, Value::Object(_) | Value::Array(_)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use terrain_providers::protocol::UNKNOWN;

    #[test]
    fn nested_changes_are_reported_by_path() {
        let b = json!({"a": 1, "share": {"name": "x", "gb": 1024}, "l": [1, 2]});
        let a = json!({"a": 1, "share": {"name": "y", "gb": 1024}, "l": [1, 3]});
        assert_eq!(changed_paths(&b, &a, &[]), vec!["l", "share.name"]);
    }

    #[test]
    fn absent_equals_null_and_empty_table() {
        assert!(changed_paths(&json!({"a": null, "t": {}}), &json!({}), &[]).is_empty());
        assert!(changed_paths(&json!({"n": 1}), &json!({"n": 1.0}), &[]).is_empty());
    }

    #[test]
    fn unknown_is_a_change_and_ignored_paths_are_not() {
        let b = json!({"ip": "1.2.3.4", "labels": {"x": "1"}});
        let a = json!({"ip": UNKNOWN, "labels": {"x": "2"}});
        assert_eq!(changed_paths(&b, &a, &[]), vec!["ip", "labels.x"]);
        assert_eq!(changed_paths(&b, &a, &["labels".to_string()]), vec!["ip"]);
    }

    #[test]
    fn overlay_keeps_live_values() {
        let desired = json!({"a": 1, "labels": {"x": "2"}});
        let live = json!({"a": 5, "labels": {"x": "1"}});
        assert_eq!(
            overlay(&desired, &live, &["labels".to_string()]),
            json!({"a": 1, "labels": {"x": "1"}})
        );
    }

    #[test]
    fn without_nulls_is_what_is_without_nulls_compares_with() {
        let live = json!({"name": "a", "tags": null, "pool": {"min": 0, "max": null}, "items": [{"x": null, "y": 1}]});
        let spec = json!({"pool": {"min": 0}, "name": "a", "items": [{"y": 1}]});
        assert_eq!(without_nulls(&live), spec);
        assert!(is_without_nulls(&live, &spec));
        // A null the spec holds itself, a missing key, another value: not the same.
        assert!(!is_without_nulls(
            &live,
            &json!({"name": "a", "tags": null, "pool": {"min": 0}, "items": [{"y": 1}]})
        ));
        assert!(!is_without_nulls(
            &live,
            &json!({"name": "a", "items": [{"y": 1}]})
        ));
        assert!(!is_without_nulls(
            &live,
            &json!({"name": "b", "pool": {"min": 0}, "items": [{"y": 1}]})
        ));
        assert!(!is_without_nulls(&json!([1, null]), &json!([1])));
    }
}
