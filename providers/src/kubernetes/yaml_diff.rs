//! Unified diffs of objects rendered as YAML, the form plans show live changes in.

use serde_json::Value;
use similar::TextDiff;

/// An object as YAML with keys in sorted order (as kubectl shows objects), so that two
/// objects differ only where their values do; nothing (an absent object) is the empty
/// document.
pub fn to_yaml(value: &Value) -> String {
    if value.is_null() {
        return String::new();
    }
    let sorted = sorted(value);
    // JSON values always serialize to YAML; the fallback only keeps this total.
    serde_yaml_ng::to_string(&sorted).unwrap_or_else(|_| format!("{sorted:#}\n"))
}

fn sorted(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            Value::Object(
                keys.into_iter()
                    .map(|k| (k.clone(), sorted(&map[k])))
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
        other => other.clone(),
    }
}

/// The unified diff (3 lines of context) from `old` to `new`, rendered as YAML, with
/// headers `--- old_name` / `+++ new_name`; `None` when they render the same.
pub fn unified(old: &Value, new: &Value, old_name: &str, new_name: &str) -> Option<String> {
    unified_text(&to_yaml(old), &to_yaml(new), old_name, new_name)
}

/// The unified diff of two texts (see [`unified`]).
pub fn unified_text(old: &str, new: &str, old_name: &str, new_name: &str) -> Option<String> {
    if old == new {
        return None;
    }
    let diff = TextDiff::from_lines(old, new);
    let mut text = diff
        .unified_diff()
        .context_radius(3)
        .header(old_name, new_name)
        .to_string();
    if !text.ends_with('\n') {
        text.push('\n');
    }
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn equal_objects_have_no_diff() {
        let a = json!({"kind": "Job", "spec": {"parallelism": 1}});
        assert_eq!(unified(&a, &a.clone(), "live", "planned"), None);
    }

    #[test]
    fn a_changed_field_shows_with_context_and_headers() {
        let live = json!({"a": 1, "b": 2, "c": 3, "d": 4, "e": 5, "f": 6, "g": 7, "h": 8});
        let mut planned = live.clone();
        planned["h"] = json!(9);
        let diff = unified(&live, &planned, "live", "planned").expect("differs");
        assert_eq!(
            diff,
            "--- live\n+++ planned\n@@ -5,4 +5,4 @@\n e: 5\n f: 6\n g: 7\n-h: 8\n+h: 9\n"
        );
    }

    #[test]
    fn key_order_is_not_a_difference() {
        let a = json!({"metadata": {"name": "w", "labels": {"b": "1", "a": "2"}}, "kind": "Job"});
        let b = json!({"kind": "Job", "metadata": {"labels": {"a": "2", "b": "1"}, "name": "w"}});
        assert_eq!(unified(&a, &b, "live", "planned"), None);
        assert_eq!(
            to_yaml(&b),
            "kind: Job\nmetadata:\n  labels:\n    a: '2'\n    b: '1'\n  name: w\n"
        );
    }

    #[test]
    fn an_absent_object_diffs_from_nothing() {
        let diff =
            unified(&Value::Null, &json!({"kind": "Pod"}), "live", "planned").expect("differs");
        assert_eq!(diff, "--- live\n+++ planned\n@@ -0,0 +1 @@\n+kind: Pod\n");
        assert_eq!(to_yaml(&Value::Null), "");
    }

    #[test]
    fn missing_final_newline_is_completed() {
        let diff = unified_text("a", "b", "x", "y").expect("differs");
        assert!(diff.ends_with('\n'), "{diff:?}");
        assert!(diff.contains("-a") && diff.contains("+b"), "{diff}");
    }
}
