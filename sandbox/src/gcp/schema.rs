//! The field-table engine: a compact description of the Google messages the sandbox
//! accepts and returns, the request-body canonicalizer built on it (unknown names and bad
//! enum values are rejected with Google's messages; int64 becomes a string, int32 a number,
//! output-only fields are dropped) and the strict conformance check the tests run on every
//! response. The tables themselves live in `tables.rs`; `tests/suite/field_tables.rs` proves them
//! against the official discovery documents.

use serde_json::{Map, Value};

/// A proto enum: its full name (for error messages) and its value names.
#[derive(Debug)]
pub struct EnumType {
    /// Full proto name, e.g. `google.container.v1.ReleaseChannel.Channel`.
    pub proto: &'static str,
    /// Value names, the zero (default) value first.
    pub values: &'static [&'static str],
}

/// The JSON type of a field.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    /// A string (also timestamps and durations).
    String,
    /// An int64/uint64: a decimal string in responses; a number or a string in requests.
    Int64,
    /// An int32: a number; requests may also send a decimal string.
    Int32,
    /// A boolean.
    Bool,
    /// An enum value name.
    Enum(&'static EnumType),
    /// A nested message.
    Message(&'static Message),
    /// A `map<string, string>`.
    StringMap,
    /// Free-form JSON (`google.protobuf.Any`, operation metadata and responses).
    Any,
}

/// One field of a message.
#[derive(Debug)]
pub struct Field {
    /// The JSON (lowerCamel) name.
    pub name: &'static str,
    pub kind: Kind,
    /// A JSON array of `kind`.
    pub repeated: bool,
    /// Set by the server only; accepted in requests but ignored.
    pub output_only: bool,
}

impl Field {
    /// A singular field clients may set.
    pub const fn new(name: &'static str, kind: Kind) -> Field {
        Field {
            name,
            kind,
            repeated: false,
            output_only: false,
        }
    }

    /// The same field as a list.
    pub const fn list(self) -> Field {
        Field {
            repeated: true,
            ..self
        }
    }

    /// The same field, set by the server only.
    pub const fn output(self) -> Field {
        Field {
            output_only: true,
            ..self
        }
    }
}

/// A message: the fields the sandbox knows, a subset of the official ones.
#[derive(Debug)]
pub struct Message {
    /// The discovery schema name (`Cluster`), or for storage's inline objects the dotted
    /// path to it (`Bucket.versioning`).
    pub name: &'static str,
    /// The full proto name used in error messages.
    pub proto: &'static str,
    pub fields: &'static [Field],
}

impl Message {
    /// The field with this JSON name; proto3 JSON parsers also accept the snake_case
    /// name, so does this.
    pub fn field(&self, key: &str) -> Option<&'static Field> {
        self.fields
            .iter()
            .find(|f| f.name == key || snake(f.name) == key)
    }

    /// Checks that `value` is exactly shaped like this message as a server would return
    /// it: known fields only, int64 as strings, valid enum values. Fails with one line per
    /// problem.
    pub fn conforms(&self, value: &Value) -> Result<(), Vec<String>> {
        let mut problems = Vec::new();
        conform_message(self, value, self.name, &mut problems);
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems)
        }
    }
}

/// How a request body is canonicalized.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rules {
    /// proto3 JSON: default values (false, 0, "", empty lists and maps, the zero enum)
    /// carry no information and are dropped, as Google's servers do in their responses.
    pub proto3: bool,
    /// Keep `null` values (storage PATCH uses them to delete fields).
    pub keep_nulls: bool,
}

impl Rules {
    pub(crate) const PROTO3: Rules = Rules {
        proto3: true,
        keep_nulls: false,
    };
    pub(crate) const JSON_API: Rules = Rules {
        proto3: false,
        keep_nulls: false,
    };
    pub(crate) const JSON_API_PATCH: Rules = Rules {
        proto3: false,
        keep_nulls: true,
    };
}

/// One rejected field of a request body.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Violation {
    /// The snake_case path of the field, e.g. `cluster.node_pools[0].config`.
    pub field: String,
    /// Google's message for it.
    pub message: String,
}

/// Validates a request body against `msg` and returns its canonical form. `root` is the
/// request field the body binds to (`instance` for Filestore, empty when the body is the
/// whole request), which prefixes every path in the messages.
pub(crate) fn canonicalize(
    msg: &'static Message,
    value: &Value,
    root: &str,
    rules: Rules,
) -> Result<Value, Vec<Violation>> {
    let mut errs = Vec::new();
    let out = canonical_message(msg, value, root, rules, &mut errs);
    if errs.is_empty() {
        Ok(out.unwrap_or_else(|| Value::Object(Map::new())))
    } else {
        Err(errs)
    }
}

fn canonical_message(
    msg: &'static Message,
    value: &Value,
    path: &str,
    rules: Rules,
    errs: &mut Vec<Violation>,
) -> Option<Value> {
    let Some(obj) = value.as_object() else {
        errs.push(invalid_value(path, &type_name(Kind::Message(msg)), value));
        return None;
    };
    let mut out = Map::new();
    for (key, v) in obj {
        let Some(field) = msg.field(key) else {
            let at = if path.is_empty() {
                String::new()
            } else {
                format!(" at '{path}'")
            };
            errs.push(Violation {
                field: path.to_string(),
                message: format!(
                    "Invalid JSON payload received. Unknown name \"{key}\"{at}: Cannot find field."
                ),
            });
            continue;
        };
        let field_path = join(path, &snake(field.name));
        if v.is_null() {
            if rules.keep_nulls {
                out.insert(field.name.to_string(), Value::Null);
            }
            continue;
        }
        let canonical = if field.repeated {
            match v.as_array() {
                Some(items) => {
                    let mut list = Vec::with_capacity(items.len());
                    for (i, item) in items.iter().enumerate() {
                        let item_path = format!("{field_path}[{i}]");
                        if let Some(c) = canonical_value(field.kind, item, &item_path, rules, errs)
                        {
                            list.push(c);
                        }
                    }
                    Some(Value::Array(list))
                }
                None => {
                    errs.push(Violation {
                        field: field_path.clone(),
                        message: format!(
                            "Invalid JSON payload received. Expected a list at '{field_path}', got {v}."
                        ),
                    });
                    None
                }
            }
        } else {
            canonical_value(field.kind, v, &field_path, rules, errs)
        };
        // Output-only fields are validated (a client echoing a resource back must still
        // send well-formed JSON) but never stored.
        if field.output_only {
            continue;
        }
        if let Some(c) = canonical {
            if rules.proto3 && is_default(field, &c) {
                continue;
            }
            out.insert(field.name.to_string(), c);
        }
    }
    Some(Value::Object(out))
}

fn canonical_value(
    kind: Kind,
    v: &Value,
    path: &str,
    rules: Rules,
    errs: &mut Vec<Violation>,
) -> Option<Value> {
    let bad = |errs: &mut Vec<Violation>| {
        errs.push(invalid_value(path, &type_name(kind), v));
        None
    };
    match kind {
        Kind::String => match v {
            Value::String(_) => Some(v.clone()),
            _ => bad(errs),
        },
        Kind::Bool => match v {
            Value::Bool(_) => Some(v.clone()),
            _ => bad(errs),
        },
        Kind::Int64 => match integer(v) {
            Some(n) => Some(Value::String(n.to_string())),
            None => bad(errs),
        },
        Kind::Int32 => match integer(v).and_then(|n| i32::try_from(n).ok()) {
            Some(n) => Some(Value::from(n)),
            None => bad(errs),
        },
        Kind::Enum(e) => match v.as_str() {
            Some(s) if e.values.contains(&s) => Some(v.clone()),
            _ => bad(errs),
        },
        Kind::Message(m) => canonical_message(m, v, path, rules, errs),
        Kind::StringMap => {
            let Some(obj) = v.as_object() else {
                return bad(errs);
            };
            let mut out = Map::new();
            for (k, item) in obj {
                match item {
                    Value::String(_) => {
                        out.insert(k.clone(), item.clone());
                    }
                    Value::Null if rules.keep_nulls => {
                        out.insert(k.clone(), Value::Null);
                    }
                    _ => errs.push(invalid_value(
                        &format!("{path}[{k}]"),
                        &type_name(Kind::String),
                        item,
                    )),
                }
            }
            Some(Value::Object(out))
        }
        Kind::Any => Some(v.clone()),
    }
}

/// An integer sent as a JSON number or a decimal string, as proto3 JSON allows for every
/// integer type.
fn integer(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64().or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15)
                .map(|f| f as i64)
        }),
        Value::String(s) => s.trim().parse::<i64>().ok(),
        _ => None,
    }
}

fn is_default(field: &Field, v: &Value) -> bool {
    if field.repeated {
        return v.as_array().is_some_and(|a| a.is_empty());
    }
    match field.kind {
        Kind::String => v.as_str() == Some(""),
        Kind::Bool => v == &Value::Bool(false),
        Kind::Int64 => v.as_str() == Some("0"),
        Kind::Int32 => v.as_i64() == Some(0),
        Kind::Enum(e) => v.as_str() == e.values.first().copied(),
        Kind::StringMap => v.as_object().is_some_and(|m| m.is_empty()),
        // Message presence is meaningful (`releaseChannel: {}` differs from no field).
        Kind::Message(_) | Kind::Any => false,
    }
}

fn invalid_value(path: &str, type_name: &str, v: &Value) -> Violation {
    Violation {
        field: path.to_string(),
        message: format!("Invalid value at '{path}' ({type_name}), {v}"),
    }
}

fn type_name(kind: Kind) -> String {
    match kind {
        Kind::String => "TYPE_STRING".to_string(),
        Kind::Int64 => "TYPE_INT64".to_string(),
        Kind::Int32 => "TYPE_INT32".to_string(),
        Kind::Bool => "TYPE_BOOL".to_string(),
        Kind::Enum(e) => format!("type.googleapis.com/{}", e.proto),
        Kind::Message(m) => format!("type.googleapis.com/{}", m.proto),
        Kind::StringMap => "map<string, string>".to_string(),
        Kind::Any => "type.googleapis.com/google.protobuf.Any".to_string(),
    }
}

fn join(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}

/// `nodePools` → `node_pools`, the proto field name Google's messages use.
pub(crate) fn snake(camel: &str) -> String {
    let mut out = String::with_capacity(camel.len() + 4);
    for c in camel.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

fn conform_message(msg: &Message, value: &Value, path: &str, problems: &mut Vec<String>) {
    let Some(obj) = value.as_object() else {
        problems.push(format!("{path}: expected an object, got {value}"));
        return;
    };
    for (key, v) in obj {
        let Some(field) = msg.fields.iter().find(|f| f.name == key) else {
            problems.push(format!("{path}: unknown field {key:?}"));
            continue;
        };
        let field_path = format!("{path}.{key}");
        if field.repeated {
            match v.as_array() {
                Some(items) => {
                    for (i, item) in items.iter().enumerate() {
                        conform_value(field.kind, item, &format!("{field_path}[{i}]"), problems);
                    }
                }
                None => problems.push(format!("{field_path}: expected a list, got {v}")),
            }
        } else {
            conform_value(field.kind, v, &field_path, problems);
        }
    }
}

fn conform_value(kind: Kind, v: &Value, path: &str, problems: &mut Vec<String>) {
    let ok = match kind {
        Kind::String => v.is_string(),
        Kind::Bool => v.is_boolean(),
        Kind::Int64 => v.as_str().is_some_and(|s| s.parse::<i128>().is_ok()),
        Kind::Int32 => v.as_i64().is_some_and(|n| i32::try_from(n).is_ok()),
        Kind::Enum(e) => v.as_str().is_some_and(|s| e.values.contains(&s)),
        Kind::StringMap => v
            .as_object()
            .is_some_and(|m| m.values().all(Value::is_string)),
        Kind::Any => true,
        Kind::Message(m) => {
            conform_message(m, v, path, problems);
            true
        }
    };
    if !ok {
        problems.push(format!("{path}: {v} is not a valid {}", type_name(kind)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    static COLOR: EnumType = EnumType {
        proto: "test.Paint.Color",
        values: &["COLOR_UNSPECIFIED", "RED", "BLUE"],
    };
    static INNER: Message = Message {
        name: "Inner",
        proto: "test.Inner",
        fields: &[
            Field::new("color", Kind::Enum(&COLOR)),
            Field::new("count", Kind::Int64),
        ],
    };
    static OUTER: Message = Message {
        name: "Outer",
        proto: "test.Outer",
        fields: &[
            Field::new("name", Kind::String),
            Field::new("size", Kind::Int32),
            Field::new("on", Kind::Bool),
            Field::new("labels", Kind::StringMap),
            Field::new("innerItems", Kind::Message(&INNER)).list(),
            Field::new("single", Kind::Message(&INNER)),
            Field::new("status", Kind::String).output(),
        ],
    };
    static REQUEST: Message = Message {
        name: "Request",
        proto: "test.Request",
        fields: &[Field::new("outer", Kind::Message(&OUTER))],
    };

    fn messages(errs: Vec<Violation>) -> Vec<String> {
        errs.into_iter().map(|v| v.message).collect()
    }

    #[test]
    fn canonicalizes_integers_defaults_and_output_fields() {
        let got = canonicalize(
            &REQUEST,
            &json!({"outer": {"name": "a", "size": "3", "on": false, "labels": {},
                "inner_items": [{"count": 5, "color": "RED"}, {"color": "COLOR_UNSPECIFIED"}],
                "single": {}, "status": "RUNNING"}}),
            "",
            Rules::PROTO3,
        )
        .expect("valid body");
        assert_eq!(
            got,
            json!({"outer": {"name": "a", "size": 3,
                "innerItems": [{"count": "5", "color": "RED"}, {}], "single": {}}})
        );
    }

    #[test]
    fn rejects_unknown_names_and_bad_values_like_google() {
        // Table-driven: the body, then every message expected for it.
        let cases: Vec<(Value, Vec<&str>)> = vec![
            (
                json!({"outer": {"innerItems": [{"fooBar": 1}]}}),
                vec!["Invalid JSON payload received. Unknown name \"fooBar\" at 'outer.inner_items[0]': Cannot find field."],
            ),
            (
                json!({"fooBar": 1}),
                vec!["Invalid JSON payload received. Unknown name \"fooBar\": Cannot find field."],
            ),
            (
                json!({"outer": {"single": {"color": "GREEN"}}}),
                vec!["Invalid value at 'outer.single.color' (type.googleapis.com/test.Paint.Color), \"GREEN\""],
            ),
            (
                json!({"outer": {"on": "yes", "size": 1.5, "labels": {"a": 1}}}),
                vec![
                    "Invalid value at 'outer.on' (TYPE_BOOL), \"yes\"",
                    "Invalid value at 'outer.size' (TYPE_INT32), 1.5",
                    "Invalid value at 'outer.labels[a]' (TYPE_STRING), 1",
                ],
            ),
            (
                json!({"outer": {"single": {"count": "x"}, "innerItems": {}}}),
                vec![
                    "Invalid value at 'outer.single.count' (TYPE_INT64), \"x\"",
                    "Invalid JSON payload received. Expected a list at 'outer.inner_items', got {}.",
                ],
            ),
            (
                json!({"outer": 5}),
                vec!["Invalid value at 'outer' (type.googleapis.com/test.Outer), 5"],
            ),
        ];
        for (body, want) in cases {
            let errs = canonicalize(&REQUEST, &body, "", Rules::PROTO3)
                .expect_err("body must be rejected");
            assert_eq!(messages(errs), want, "for {body}");
        }
    }

    #[test]
    fn root_prefixes_paths_and_nulls_survive_only_for_patches() {
        let errs = canonicalize(&OUTER, &json!({"bad": 1}), "outer", Rules::PROTO3)
            .expect_err("unknown field");
        assert_eq!(errs[0].field, "outer");
        let body = json!({"name": null, "labels": {"a": null, "b": "x"}, "on": false});
        assert_eq!(
            canonicalize(&OUTER, &body, "", Rules::JSON_API_PATCH).expect("valid"),
            json!({"name": null, "labels": {"a": null, "b": "x"}, "on": false})
        );
        assert_eq!(
            canonicalize(&OUTER, &body, "", Rules::JSON_API).expect_err("null label")[0].field,
            "labels[a]"
        );
    }

    #[test]
    fn conformance_is_strict_about_output_shapes() {
        assert!(OUTER
            .conforms(&json!({"name": "a", "size": 3, "status": "X", "single": {"count": "1"}}))
            .is_ok());
        let problems = OUTER
            .conforms(&json!({"size": "3", "single": {"count": 1}, "extra": true}))
            .expect_err("three problems");
        assert_eq!(problems.len(), 3, "{problems:?}");
    }
}
