//! The `[kind.name]` block `terrain import --write` adds to a stack file: a live
//! object's spec (as its kind reads it back) written as stack TOML, in the canonical
//! layout of `terrain fmt`.
//!
//! Every field the kind's schema declares is written, in the schema's order, except
//! those equal to the schema's default (the load fills them in again) and those the
//! object does not have. A value that is another resource's (an id) is written as a
//! reference to it. Secret fields are not written: each becomes a reference to
//! a generated sensitive variable without a default, which the run must be given.
//!
//! Kubernetes objects built by hand are adopted as a `kubernetes_manifest` whose
//! objects are in a YAML file beside it ([`manifest_block`]).

use serde_json::Value as Json;
use terrain_providers::schema::{Field, Schema, Type};
use toml_edit::{Array, InlineTable, Value};

/// A block written for one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    /// The TOML text: a comment, `[kind.name]`, then one `[variables.…]` table per
    /// secret field; formatted, ending in one newline.
    pub text: String,
    /// The variables generated for secret fields, in the order written: each needs a
    /// value (`--var NAME=…` or `TERRAIN_VAR_NAME`).
    pub variables: Vec<String>,
}

/// The block of object `id` at `kind.name`, whose live spec is `spec`. `refer` gives
/// the reference to write instead of a top-level field's value, when the value is
/// another resource's (a node pool's `cluster` is its cluster's id): the block then
/// depends on that resource, as one written by hand would.
pub fn block(
    kind: &str,
    name: &str,
    id: &str,
    schema: &Schema,
    spec: &Json,
    refer: &dyn Fn(&str, &Json) -> Option<String>,
) -> Block {
    let empty = serde_json::Map::new();
    let map = spec.as_object().unwrap_or(&empty);
    let mut lines = vec![
        format!("# Imported from {} by terrain import.", one_line(id)),
        format!("[{kind}.{name}]"),
    ];
    let mut variables = Vec::new();
    let mut var_tables = Vec::new();
    for field in &schema.fields {
        let Some(value) = map.get(field.name) else {
            continue;
        };
        if value.is_null() || field.default.as_ref() == Some(value) {
            continue;
        }
        let key = toml_edit::Key::new(field.name).to_string();
        if field.sensitive {
            let var = format!("{name}_{}", field.name);
            lines.push(format!("{key} = \"${{var.{var}}}\""));
            var_tables.push(variable_table(&var, kind, name, field));
            variables.push(var);
            continue;
        }
        if let Some(reference) = refer(field.name, value) {
            lines.push(format!("{key} = {}", Value::from(reference)));
        } else if let Some(v) = to_toml(&field.ty, value) {
            lines.push(format!("{key} = {v}"));
        }
    }
    let mut text = lines.join("\n") + "\n";
    for t in var_tables {
        text.push('\n');
        text.push_str(&t);
    }
    let text = super::fmt::format(&text).unwrap_or(text);
    Block { text, variables }
}

/// The block adopting Kubernetes objects built by hand: a `kubernetes_manifest` at
/// `kubernetes_manifest.name` on the cluster `cluster` (an address whose `kubernetes`
/// output connects to it), its objects in the manifest file `file` (relative to the
/// stack). `described` says which objects, for the comment above the block.
pub fn manifest_block(name: &str, cluster: &str, file: &str, described: &str) -> Block {
    let text = format!(
        "# Adopted from {} on {cluster} by terrain import.\n[kubernetes_manifest.{name}]\ncluster = {}\nfile = {}\n",
        one_line(described),
        Value::from(format!("${{{cluster}.kubernetes}}")),
        Value::from(file),
    );
    let text = super::fmt::format(&text).unwrap_or(text);
    Block {
        text,
        variables: Vec::new(),
    }
}

/// `[variables.VAR]` for secret field `field` of `kind.name`.
fn variable_table(var: &str, kind: &str, name: &str, field: &Field) -> String {
    let description = Value::from(format!(
        "The {} of {kind}.{name} (secret: give it with --var {var}=… or TERRAIN_VAR_{var}).",
        field.name
    ));
    let mut t = format!("[variables.{var}]\ndescription = {description}\n");
    let ty = match field.ty {
        Type::Int => Some("integer"),
        Type::Float => Some("number"),
        Type::Bool => Some("bool"),
        Type::List(_) => Some("list"),
        Type::Map(_) | Type::Object(_) => Some("table"),
        Type::String | Type::Any => None,
    };
    if let Some(ty) = ty {
        t.push_str(&format!("type = \"{ty}\"\n"));
    }
    t.push_str("sensitive = true\n");
    t
}

/// An id on one line (it goes into a comment).
fn one_line(id: &str) -> String {
    id.replace(['\n', '\r'], " ")
}

/// `value` (of type `ty`) as a TOML value; `None` for JSON null. Tables with known keys
/// leave out keys at their default, and give the rest in the schema's order.
fn to_toml(ty: &Type, value: &Json) -> Option<Value> {
    Some(match value {
        Json::Null => return None,
        Json::Bool(b) => Value::from(*b),
        Json::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => Value::from(i),
            (None, Some(f)) => Value::from(f),
            (None, None) => Value::from(n.to_string()),
        },
        Json::String(s) => Value::from(s.as_str()),
        Json::Array(items) => {
            let item_ty = match ty {
                Type::List(t) => t.as_ref(),
                _ => &Type::Any,
            };
            let mut a = Array::new();
            for item in items {
                if let Some(v) = to_toml(item_ty, item) {
                    a.push(v);
                }
            }
            Value::Array(a)
        }
        Json::Object(map) => {
            let mut t = InlineTable::new();
            match ty {
                Type::Object(fields) => {
                    for f in fields {
                        let Some(v) = map.get(f.name) else { continue };
                        if f.default.as_ref() == Some(v) {
                            continue;
                        }
                        if let Some(v) = to_toml(&f.ty, v) {
                            t.insert(f.name, v);
                        }
                    }
                }
                other => {
                    let item_ty = match other {
                        Type::Map(t) => t.as_ref(),
                        _ => &Type::Any,
                    };
                    for (k, v) in map {
                        if let Some(v) = to_toml(item_ty, v) {
                            t.insert(k, v);
                        }
                    }
                }
            }
            Value::InlineTable(t)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_value_that_is_another_resources_is_written_as_its_reference() {
        let spec = json!({"name": "b", "zones": ["a"], "location": "projects/p/l"});
        let b = block(
            "gcs_bucket",
            "logs",
            "b",
            &schema(),
            &spec,
            &|field, value| {
                (field == "location" && value == "projects/p/l")
                    .then(|| "${gke_cluster.main.id}".into())
            },
        );
        assert!(
            b.text.contains("location = \"${gke_cluster.main.id}\"\n"),
            "{}",
            b.text
        );
        assert!(b.text.contains("zones    = [\"a\"]"), "{}", b.text);
    }

    #[test]
    fn a_manifest_block_references_its_cluster_and_file() {
        let block = manifest_block(
            "job_workload",
            "gke_cluster.batch",
            "manifests/job-workload.yaml",
            "Job default/workload",
        );
        assert_eq!(
            block.text,
            "# Adopted from Job default/workload on gke_cluster.batch by terrain import.\n[kubernetes_manifest.job_workload]\ncluster = \"${gke_cluster.batch.kubernetes}\"\nfile    = \"manifests/job-workload.yaml\"\n"
        );
        assert!(block.variables.is_empty());
    }

    fn schema() -> Schema {
        Schema {
            fields: vec![
                Field::new("name", Type::String, "").required().force_new(),
                Field::new("location", Type::String, "").default(json!("US")),
                Field::new("versioning", Type::Bool, "").default(json!(false)),
                Field::new("password", Type::String, "").sensitive(),
                Field::new("labels", Type::Map(Box::new(Type::String)), "").default(json!({})),
                Field::new(
                    "share",
                    Type::Object(vec![
                        Field::new("name", Type::String, ""),
                        Field::new("capacity_gb", Type::Int, "").default(json!(1024)),
                    ]),
                    "",
                ),
                Field::new(
                    "taints",
                    Type::List(Box::new(Type::Object(vec![
                        Field::new("key", Type::String, ""),
                        Field::new("effect", Type::String, "").default(json!("NO_SCHEDULE")),
                    ]))),
                    "",
                ),
                Field::new("zones", Type::List(Box::new(Type::String)), ""),
                Field::new("size", Type::Int, "").default(json!(3)),
                Field::new("ratio", Type::Float, ""),
            ],
            outputs: vec![Field::new("self_link", Type::String, "")],
        }
    }

    #[test]
    fn defaults_and_unknown_keys_are_left_out_in_schema_order() {
        let spec = json!({
            "versioning": true,
            "location": "US",
            "name": "b",
            "size": 3,
            "labels": {},
            "self_link": "https://x",
            "zones": null,
        });
        let b = block("gcs_bucket", "logs", "b", &schema(), &spec, &|_, _| None);
        assert_eq!(
            b.text,
            "# Imported from b by terrain import.\n[gcs_bucket.logs]\nname       = \"b\"\nversioning = true\n"
        );
        assert!(b.variables.is_empty());
    }

    #[test]
    fn a_secret_field_becomes_a_sensitive_variable_without_default() {
        let spec = json!({"name": "db", "password": "hunter2"});
        let b = block("sql_user", "app", "db", &schema(), &spec, &|_, _| None);
        assert!(!b.text.contains("hunter2"), "{}", b.text);
        assert!(
            b.text.contains("password = \"${var.app_password}\""),
            "{}",
            b.text
        );
        assert!(
            b.text.contains("\n[variables.app_password]\n"),
            "{}",
            b.text
        );
        assert!(b.text.contains("sensitive   = true"), "{}", b.text);
        assert!(!b.text.contains("default"), "{}", b.text);
        assert_eq!(b.variables, vec!["app_password".to_string()]);
    }

    #[test]
    fn nested_tables_and_arrays_are_inline_without_their_defaults() {
        let spec = json!({
            "name": "n",
            "labels": {"team": "ml", "cost-center": "42"},
            "share": {"capacity_gb": 1024, "name": "NFSVol"},
            "taints": [{"effect": "NO_SCHEDULE", "key": "gpu"}, {"key": "tpu", "effect": "NO_EXECUTE"}],
            "zones": ["a", "b"],
            "size": 5,
            "ratio": 0.5,
        });
        let b = block("k", "x", "n", &schema(), &spec, &|_, _| None);
        let want = "# Imported from n by terrain import.\n[k.x]\n\
name   = \"n\"\n\
labels = { team = \"ml\", cost-center = \"42\" }\n\
share  = { name = \"NFSVol\" }\n\
taints = [{ key = \"gpu\" }, { key = \"tpu\", effect = \"NO_EXECUTE\" }]\n\
zones  = [\"a\", \"b\"]\n\
size   = 5\n\
ratio  = 0.5\n";
        assert_eq!(b.text, want);
    }

    #[test]
    fn the_block_is_formatted_and_parses_back_to_the_spec() {
        let spec = json!({
            "name": "quote \" and \\ back",
            "labels": {"a b": "c"},
            "share": {"name": "v"},
            "password": "s",
        });
        let b = block("k", "x", "id\nwith newline", &schema(), &spec, &|_, _| None);
        assert_eq!(
            crate::stack::fmt::format(&b.text).expect("the block is TOML"),
            b.text
        );
        let doc: toml_edit::DocumentMut = b.text.parse().expect("the block is TOML");
        assert_eq!(doc["k"]["x"]["name"].as_str(), Some("quote \" and \\ back"));
        assert_eq!(doc["k"]["x"]["labels"]["a b"].as_str(), Some("c"));
        assert_eq!(
            doc["variables"]["x_password"]["sensitive"].as_bool(),
            Some(true)
        );
    }
}
