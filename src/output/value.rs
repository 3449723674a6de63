//! Renders values for plans, `state show` and every `--json` output. For people: secrets
//! shown as `(sensitive value)`, values not known until apply as `(known after apply)`,
//! short values inline and long ones over several lines. For scripts ([`mark`]): those
//! values are `null`, and parallel trees of `true`s say which ones were secret or not
//! known yet (Terraform's `after_unknown` / `after_sensitive`), so no JSON output ever
//! holds a marker string a script could take for a real value.

use serde_json::{Map, Value};
use terrain_providers::protocol::{is_unknown, UNKNOWN};

/// What a secret shows as.
pub const SENSITIVE: &str = "(sensitive value)";
/// What a value not known until apply shows as.
pub const KNOWN_AFTER_APPLY: &str = "(known after apply)";

/// Whether `path` is, or is inside, one of `sensitive`.
pub fn is_sensitive(path: &str, sensitive: &[String]) -> bool {
    sensitive.iter().any(|s| {
        s == path || path.starts_with(&format!("{s}.")) || s.starts_with(&format!("{path}."))
    })
}

/// A value as `--json` outputs carry it: [`Marked::value`] is the value with every
/// secret and every value not known until apply replaced by `null`; the other two trees
/// say where those were.
#[derive(Debug, Clone, PartialEq)]
pub struct Marked {
    pub value: Value,
    /// `true` where a value is not known until apply (a string holding the unknown marker,
    /// even inside a longer interpolated string, is unknown as a whole).
    pub unknown: Value,
    /// `true` where a value is secret (a whole secret object or array is just `true`).
    pub sensitive: Value,
}

/// Splits `value` into what `--json` shows and where its secrets (the values at the
/// `sensitive` paths and under them, except nulls: nothing is not a secret) and its
/// unknowns are. A marks tree has the shape of the value: `true` at a marked leaf,
/// objects holding only the keys with marks inside, arrays as arrays (an element with
/// nothing marked is `false`, so positions line up), and `false` for a whole value with
/// nothing marked.
pub fn mark(value: &Value, sensitive: &[String]) -> Marked {
    let (value, unknown, sensitive) = mark_at(value, sensitive, "");
    Marked {
        value,
        unknown,
        sensitive,
    }
}

fn mark_at(value: &Value, sensitive: &[String], path: &str) -> (Value, Value, Value) {
    if !path.is_empty()
        && !value.is_null()
        && sensitive
            .iter()
            .any(|s| s == path || path.starts_with(&format!("{s}.")))
    {
        // Hidden whole: a secret holding a value not known yet is marked as both.
        return (
            Value::Null,
            Value::Bool(is_unknown(value)),
            Value::Bool(true),
        );
    }
    let child = |k: &str| {
        if path.is_empty() {
            k.to_string()
        } else {
            format!("{path}.{k}")
        }
    };
    match value {
        Value::String(s) if s.contains(UNKNOWN) => {
            (Value::Null, Value::Bool(true), Value::Bool(false))
        }
        Value::Object(m) => {
            let mut out = Map::new();
            let mut unknown = Map::new();
            let mut secret = Map::new();
            for (k, v) in m {
                let (v, u, s) = mark_at(v, sensitive, &child(k));
                out.insert(k.clone(), v);
                if u != Value::Bool(false) {
                    unknown.insert(k.clone(), u);
                }
                if s != Value::Bool(false) {
                    secret.insert(k.clone(), s);
                }
            }
            let tree = |m: Map<String, Value>| {
                if m.is_empty() {
                    Value::Bool(false)
                } else {
                    Value::Object(m)
                }
            };
            (Value::Object(out), tree(unknown), tree(secret))
        }
        Value::Array(a) => {
            let mut out = Vec::with_capacity(a.len());
            let mut unknown = Vec::with_capacity(a.len());
            let mut secret = Vec::with_capacity(a.len());
            for (i, v) in a.iter().enumerate() {
                let (v, u, s) = mark_at(v, sensitive, &child(&i.to_string()));
                out.push(v);
                unknown.push(u);
                secret.push(s);
            }
            let tree = |marks: Vec<Value>| {
                if marks.iter().all(|m| *m == Value::Bool(false)) {
                    Value::Bool(false)
                } else {
                    Value::Array(marks)
                }
            };
            (Value::Array(out), tree(unknown), tree(secret))
        }
        other => (other.clone(), Value::Bool(false), Value::Bool(false)),
    }
}

/// A one-line rendering, or `None` when the value deserves several lines.
pub fn inline(value: &Value, sensitive: bool) -> Option<String> {
    if sensitive {
        return Some(SENSITIVE.to_string());
    }
    if is_unknown(value) {
        return Some(KNOWN_AFTER_APPLY.to_string());
    }
    let s = match value {
        Value::String(s) if s.contains('\n') => return None,
        other => other.to_string(),
    };
    (s.chars().count() <= 80).then_some(s)
}

/// A multi-line rendering: strings as their lines, anything else as pretty JSON; a
/// value not known yet as such, and nothing as no lines.
pub fn lines(value: &Value) -> String {
    if is_unknown(value) {
        return KNOWN_AFTER_APPLY.to_string();
    }
    match value {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => serde_json::to_string_pretty(other).unwrap_or_else(|_| other.to_string()),
    }
}

/// How many lines of a created value a plan shows before it shortens it.
pub const LONG_VALUE_LINES: usize = 1000;
/// How many of a long value's lines a plan still shows.
const HEAD_LINES: usize = 40;

/// [`lines`] as a plan shows a created value: in full up to [`LONG_VALUE_LINES`] lines.
/// Past that, a list of Kubernetes objects (a manifest's CRDs run to tens of thousands
/// of lines) becomes one line per object, and anything else its first lines and a count
/// of the rest, which `terrain plan --json` shows.
pub fn created_lines(value: &Value) -> String {
    if let Some(summary) = compiled_pipeline(value) {
        return summary;
    }
    let text = lines(value);
    let total = text.lines().count();
    if total <= LONG_VALUE_LINES {
        return text;
    }
    if let Some(objects) = kubernetes_objects(value) {
        let mut out = format!(
            "{} objects ({total} lines; terrain plan --json shows them):\n",
            objects.len()
        );
        for o in objects {
            out.push_str(&o);
            out.push('\n');
        }
        return out;
    }
    let mut out: String = text
        .lines()
        .take(HEAD_LINES)
        .map(|l| format!("{l}\n"))
        .collect();
    out.push_str(&format!(
        "… {} more lines (terrain plan --json shows them)\n",
        total - HEAD_LINES
    ));
    out
}

/// A compiled Kubeflow Pipelines pipeline (`kfp_pipeline`'s `compiled`: hundreds of
/// lines of the compiler's JSON) as its name, tasks and the executors its platform spec
/// steers; its `digest` beside it says when it changes.
fn compiled_pipeline(value: &Value) -> Option<String> {
    let spec = value.get("pipeline_spec")?;
    let name = spec["pipelineInfo"]["name"].as_str()?;
    let tasks: Vec<&str> = spec["root"]["dag"]["tasks"]
        .as_object()
        .map(|t| t.keys().map(String::as_str).collect())
        .unwrap_or_default();
    let steered: Vec<&str> = value["platform_spec"]["platforms"]["kubernetes"]["deploymentSpec"]
        ["executors"]
        .as_object()
        .map(|e| e.keys().map(String::as_str).collect())
        .unwrap_or_default();
    let mut out = format!(
        "pipeline {name}: {} task{} ({})",
        tasks.len(),
        if tasks.len() == 1 { "" } else { "s" },
        tasks.join(", ")
    );
    if !steered.is_empty() {
        out.push_str(&format!("; Kubernetes settings for {}", steered.join(", ")));
    }
    out.push_str(" (terrain plan --json shows it all)\n");
    Some(out)
}

/// `apiVersion kind namespace/name` of each item, when every item is a Kubernetes object.
fn kubernetes_objects(value: &Value) -> Option<Vec<String>> {
    value
        .as_array()?
        .iter()
        .map(|o| {
            let api_version = o["apiVersion"].as_str()?;
            let kind = o["kind"].as_str()?;
            let name = o["metadata"]["name"].as_str()?;
            Some(match o["metadata"]["namespace"].as_str() {
                Some(ns) => format!("{api_version} {kind} {ns}/{name}"),
                None => format!("{api_version} {kind} {name}"),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn long_created_values_are_shortened_and_manifests_listed() {
        let objects: Vec<Value> = (0..200)
            .map(|i| {
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": format!("c{i}"), "namespace": "kubeflow"},
                            "data": {"a": "1"}})
            })
            .collect();
        let shown = created_lines(&Value::Array(objects));
        assert!(shown.starts_with("200 objects ("), "{shown}");
        assert!(shown.contains("\nv1 ConfigMap kubeflow/c199\n"), "{shown}");
        assert_eq!(shown.lines().count(), 201);
        let long: Vec<Value> = (0..1200).map(|i| json!(i)).collect();
        let shown = created_lines(&Value::Array(long));
        assert_eq!(shown.lines().count(), HEAD_LINES + 1);
        assert!(
            shown.ends_with("… 1162 more lines (terrain plan --json shows them)\n"),
            "{shown}"
        );
        let short = json!([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}}]);
        assert_eq!(created_lines(&short), lines(&short));
    }

    /// Whether any string in `value` (keys included) is or holds a marker text.
    fn holds_marker_text(value: &Value) -> bool {
        let marked = |s: &str| s.contains(SENSITIVE) || s.contains(KNOWN_AFTER_APPLY);
        match value {
            Value::String(s) => marked(s),
            Value::Array(a) => a.iter().any(holds_marker_text),
            Value::Object(m) => m.iter().any(|(k, v)| marked(k) || holds_marker_text(v)),
            _ => false,
        }
    }

    #[test]
    fn marks_secrets_and_unknowns_as_nulls_beside_trees_of_trues() {
        let interpolated = format!("x-{UNKNOWN}");
        let v = json!({
            "user": "a",
            "password": "hunter2",
            "ip": UNKNOWN,
            "url": interpolated,
            "nested": {"token": "t", "plain": 1},
            "unset": null,
            "list": [1, UNKNOWN, {"k": UNKNOWN}],
            "keys": {"a": [1, 2]},
        });
        let m = mark(
            &v,
            &[
                "password".into(),
                "nested.token".into(),
                "unset".into(),
                "keys".into(),
            ],
        );
        assert_eq!(
            m.value,
            json!({
                "user": "a",
                "password": null,
                "ip": null,
                "url": null,
                "nested": {"token": null, "plain": 1},
                "unset": null,
                "list": [1, null, {"k": null}],
                "keys": null,
            })
        );
        assert_eq!(
            m.unknown,
            json!({"ip": true, "url": true, "list": [false, true, {"k": true}]})
        );
        assert_eq!(
            m.sensitive,
            json!({"password": true, "nested": {"token": true}, "keys": true}),
            "a null is not a secret; a secret object is just true"
        );
        assert!(!m.value.to_string().contains("hunter2"));
        assert!(!holds_marker_text(&m.value));
    }

    #[test]
    fn nothing_marked_is_false_and_a_secret_unknown_is_both() {
        let m = mark(&json!({"a": [1, {"b": 2}], "c": "d"}), &[]);
        assert_eq!(m.value, json!({"a": [1, {"b": 2}], "c": "d"}));
        assert_eq!((m.unknown, m.sensitive), (json!(false), json!(false)));
        let m = mark(
            &json!({"s": UNKNOWN, "list": ["x", "y"]}),
            &["s".into(), "list.1".into()],
        );
        assert_eq!(m.value, json!({"s": null, "list": ["x", null]}));
        assert_eq!(m.unknown, json!({"s": true}));
        assert_eq!(m.sensitive, json!({"s": true, "list": [false, true]}));
        assert!(holds_marker_text(&json!({"a": [format!("x {SENSITIVE}")]})));
        assert!(holds_marker_text(&json!({KNOWN_AFTER_APPLY: 1})));
    }

    #[test]
    fn inline_or_not() {
        assert_eq!(inline(&json!("x"), false).as_deref(), Some("\"x\""));
        assert_eq!(inline(&json!("a\nb"), false), None);
        assert_eq!(inline(&json!("a\nb"), true).as_deref(), Some(SENSITIVE));
    }

    #[test]
    fn a_compiled_pipeline_shows_as_its_tasks() {
        let compiled = json!({
            "pipeline_spec": {"pipelineInfo": {"name": "gpu-training"},
                              "root": {"dag": {"tasks": {"preprocess": {}, "train": {}}}}},
            "platform_spec": {"platforms": {"kubernetes": {"deploymentSpec": {"executors": {"exec-train": {}}}}}},
        });
        assert_eq!(
            created_lines(&compiled),
            "pipeline gpu-training: 2 tasks (preprocess, train); Kubernetes settings for exec-train (terrain plan --json shows it all)\n"
        );
    }
}
