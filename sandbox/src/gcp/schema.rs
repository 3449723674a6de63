//! The message engine: the Google messages of one discovery document read into a compact
//! form (every schema, storage's inline objects named by their dotted path, `$ref`s kept
//! as names so recursive schemas resolve lazily), the request-body canonicalizer built on
//! it (unknown names and bad values are rejected with Google's messages; int64 becomes a
//! string, int32 a number, output-only fields are dropped; a field Google has but the
//! sandbox does not emulate is named in an "is not supported by the sandbox" answer) and
//! the strict conformance check the tests run on every response. The documents
//! themselves are embedded by `discovery.rs`; what they do not say (some proto names,
//! storage's output-only fields and enum values, which fields each handler emulates) is
//! in `tables.rs`.

use std::collections::{BTreeMap, HashMap};

use serde_json::{Map, Value};

/// A proto enum: its full name (for error messages) and its value names.
#[derive(Debug, Clone)]
pub struct EnumType {
    /// Full proto name, e.g. `google.container.v1.ReleaseChannel.Channel`.
    pub proto: String,
    /// Value names, the zero (default) value first.
    pub values: Vec<String>,
}

/// The JSON type of a field.
#[derive(Debug, Clone)]
pub enum Kind {
    /// A string (also bytes, timestamps and durations).
    String,
    /// An int64: a decimal string in responses; a number or a string in requests.
    Int64,
    /// A uint64, encoded as an int64 is.
    UInt64,
    /// An int32: a number; requests may also send a decimal string.
    Int32,
    /// A uint32, encoded as an int32 is.
    UInt32,
    /// A double (`number`, format `double`).
    Double,
    /// A float (`number`, format `float`).
    Float,
    /// A boolean.
    Bool,
    /// An enum value name.
    Enum(EnumType),
    /// A message of the same document, by schema name (resolved when it is reached, so
    /// recursive schemas stay finite).
    Message(String),
    /// A `map<string, V>` (`additionalProperties`); the box describes the values.
    Map(Box<Field>),
    /// Free-form JSON (`type: any`, an object without properties).
    Any,
}

/// One field of a message.
#[derive(Debug, Clone)]
pub struct Field {
    /// The JSON (lowerCamel) name.
    pub name: String,
    pub kind: Kind,
    /// A JSON array of `kind`.
    pub repeated: bool,
    /// Set by the server only; accepted in requests but ignored.
    pub output_only: bool,
}

/// A message: every field its discovery schema defines.
#[derive(Debug, Clone)]
pub struct Message {
    /// The discovery schema name (`Cluster`), or for storage's inline objects the dotted
    /// path to it (`Bucket.versioning`).
    pub name: String,
    /// The full proto name used in error messages.
    pub proto: String,
    pub fields: Vec<Field>,
}

impl Message {
    /// The field with this JSON name; proto3 JSON parsers also accept the snake_case
    /// name, so does this.
    pub fn field(&self, key: &str) -> Option<&Field> {
        self.fields
            .iter()
            .find(|f| f.name == key || snake(&f.name) == key)
    }
}

/// One method of a document: its HTTP binding and the schemas of its body and answer.
#[derive(Debug, Clone)]
pub struct Method {
    pub http_method: String,
    /// The URI template relative to the document's `servicePath` (`flatPath` when the
    /// document has one).
    pub path: String,
    pub request: Option<String>,
    pub response: Option<String>,
}

/// What the sandbox adds to one discovery document: the names and markings it does not
/// spell out, and which fields the handlers emulate (see `tables.rs`).
#[derive(Debug, Clone, Copy)]
pub struct Profile {
    /// The API's name (`container`).
    pub api: &'static str,
    /// The proto package of its messages (`google.container.v1`, `storage.v1`).
    pub package: &'static str,
    /// Storage's JSON API: enums are named by their field (`storage.v1.Bucket.storageClass`)
    /// rather than by an UpperCamel type name.
    pub json_api: bool,
    /// Proto names the `<package>.<Schema>` and `<Schema>.<UpperCamel(field)>` rules get
    /// wrong, by schema or `schema.field`.
    pub proto_names: &'static [(&'static str, &'static str)],
    /// Fields (`schema.field`) only the server sets though the document does not say so.
    pub output_only: &'static [&'static str],
    /// Enums (`schema.field`) whose values the document lists in prose only.
    pub enums: &'static [(&'static str, &'static [&'static str])],
    /// The fields of each message the handlers act on; any other field Google has is
    /// answered as not supported by the sandbox.
    pub emulated: &'static [(&'static str, &'static [&'static str])],
}

impl Profile {
    fn proto_name(&self, key: &str) -> Option<&'static str> {
        self.proto_names
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, proto)| *proto)
    }

    fn is_output_only(&self, owner: &str, field: &str) -> bool {
        self.output_only
            .iter()
            .any(|k| k.strip_prefix(owner).and_then(|r| r.strip_prefix('.')) == Some(field))
    }

    fn enum_values(&self, owner: &str, field: &str) -> Option<&'static [&'static str]> {
        let key = format!("{owner}.{field}");
        self.enums
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, values)| *values)
    }

    /// Whether the handlers act on `field` of message `message`.
    pub fn emulates(&self, message: &str, field: &str) -> bool {
        self.emulated
            .iter()
            .any(|(m, fields)| *m == message && fields.contains(&field))
    }
}

/// Why a discovery document could not be read.
#[derive(Debug, thiserror::Error)]
pub enum DocumentError {
    #[error("the {api} discovery document is not JSON: {source}")]
    Json {
        api: &'static str,
        source: serde_json::Error,
    },
    #[error("the {api} discovery document could not be inflated: {source}")]
    Inflate {
        api: &'static str,
        source: std::io::Error,
    },
    #[error("the {api} discovery document has no schemas")]
    NoSchemas { api: &'static str },
    #[error("the sandbox embeds no discovery document for {api}")]
    Unknown { api: String },
    #[error("the {api} discovery document is unreadable: {reason}")]
    Unreadable { api: &'static str, reason: String },
}

/// One discovery document, read: its messages and methods.
#[derive(Debug)]
pub struct Document {
    pub profile: Profile,
    pub messages: HashMap<String, Message>,
    /// By method id (`container.projects.locations.clusters.update`).
    pub methods: BTreeMap<String, Method>,
}

impl Document {
    /// Reads a parsed discovery document.
    pub fn from_json(profile: Profile, doc: &Value) -> Result<Document, DocumentError> {
        let Some(schemas) = doc["schemas"].as_object() else {
            return Err(DocumentError::NoSchemas { api: profile.api });
        };
        let mut messages = HashMap::new();
        for (name, schema) in schemas {
            read_message(profile, name, schema, &mut messages);
        }
        let mut methods = BTreeMap::new();
        read_methods(doc, &mut methods);
        Ok(Document {
            profile,
            messages,
            methods,
        })
    }

    /// The message named `name` (a schema, or a dotted path to an inline object).
    pub fn message(&self, name: &str) -> Option<&Message> {
        self.messages.get(name)
    }

    /// Checks that `value` is exactly shaped like message `name` as a server would return
    /// it: known fields only, int64 as strings, valid enum values. Fails with one line per
    /// problem.
    pub fn conforms(&self, name: &str, value: &Value) -> Result<(), Vec<String>> {
        let mut problems = Vec::new();
        match self.message(name) {
            Some(msg) => self.conform_message(msg, value, name, &mut problems),
            None => problems.push(format!("{}: no message {name}", self.profile.api)),
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems)
        }
    }

    /// Validates a request body against message `name` and returns its canonical form.
    /// `root` is the request field the body binds to (`instance` for Filestore, empty
    /// when the body is the whole request), which prefixes every path in the messages.
    pub(crate) fn canonicalize(
        &self,
        name: &str,
        value: &Value,
        root: &str,
        rules: Rules,
    ) -> Result<Value, Rejection> {
        let Some(msg) = self.message(name) else {
            return Err(Rejection::Invalid(vec![Violation {
                field: root.to_string(),
                message: format!("{}: no message {name}", self.profile.api),
            }]));
        };
        let mut walk = Walk {
            doc: self,
            rules,
            errs: Vec::new(),
            unsupported: Vec::new(),
        };
        let out = walk.message(msg, value, root, true);
        if !walk.errs.is_empty() {
            return Err(Rejection::Invalid(walk.errs));
        }
        if !walk.unsupported.is_empty() {
            return Err(Rejection::Unsupported(walk.unsupported));
        }
        Ok(out.unwrap_or_else(|| Value::Object(Map::new())))
    }

    fn conform_message(
        &self,
        msg: &Message,
        value: &Value,
        path: &str,
        problems: &mut Vec<String>,
    ) {
        let Some(obj) = value.as_object() else {
            problems.push(format!("{path}: expected an object, got {value}"));
            return;
        };
        for (key, v) in obj {
            let Some(field) = msg.fields.iter().find(|f| &f.name == key) else {
                problems.push(format!("{path}: unknown field {key:?}"));
                continue;
            };
            self.conform_field(field, v, &format!("{path}.{key}"), problems);
        }
    }

    fn conform_field(&self, field: &Field, v: &Value, path: &str, problems: &mut Vec<String>) {
        if field.repeated {
            match v.as_array() {
                Some(items) => {
                    for (i, item) in items.iter().enumerate() {
                        self.conform_value(&field.kind, item, &format!("{path}[{i}]"), problems);
                    }
                }
                None => problems.push(format!("{path}: expected a list, got {v}")),
            }
        } else {
            self.conform_value(&field.kind, v, path, problems);
        }
    }

    fn conform_value(&self, kind: &Kind, v: &Value, path: &str, problems: &mut Vec<String>) {
        let ok = match kind {
            Kind::String => v.is_string(),
            Kind::Bool => v.is_boolean(),
            Kind::Int64 => v.as_str().is_some_and(|s| s.parse::<i64>().is_ok()),
            Kind::UInt64 => v.as_str().is_some_and(|s| s.parse::<u64>().is_ok()),
            Kind::Int32 => v.as_i64().is_some_and(|n| i32::try_from(n).is_ok()),
            Kind::UInt32 => v.as_u64().is_some_and(|n| u32::try_from(n).is_ok()),
            // proto3 JSON writes NaN and the infinities as strings.
            Kind::Double | Kind::Float => {
                v.is_number()
                    || ["NaN", "Infinity", "-Infinity"].contains(&v.as_str().unwrap_or(""))
            }
            Kind::Enum(e) => v.as_str().is_some_and(|s| e.values.iter().any(|x| x == s)),
            Kind::Any => true,
            Kind::Map(item) => match v.as_object() {
                Some(map) => {
                    for (k, item_value) in map {
                        self.conform_field(item, item_value, &format!("{path}[{k}]"), problems);
                    }
                    true
                }
                None => false,
            },
            Kind::Message(name) => {
                match self.message(name) {
                    Some(m) => self.conform_message(m, v, path, problems),
                    None => problems.push(format!("{path}: no message {name}")),
                }
                true
            }
        };
        if !ok {
            problems.push(format!(
                "{path}: {v} is not a valid {}",
                self.type_name(kind)
            ));
        }
    }

    fn type_name(&self, kind: &Kind) -> String {
        match kind {
            Kind::String => "TYPE_STRING".to_string(),
            Kind::Int64 => "TYPE_INT64".to_string(),
            Kind::UInt64 => "TYPE_UINT64".to_string(),
            Kind::Int32 => "TYPE_INT32".to_string(),
            Kind::UInt32 => "TYPE_UINT32".to_string(),
            Kind::Double => "TYPE_DOUBLE".to_string(),
            Kind::Float => "TYPE_FLOAT".to_string(),
            Kind::Bool => "TYPE_BOOL".to_string(),
            Kind::Enum(e) => format!("type.googleapis.com/{}", e.proto),
            Kind::Message(name) => match self.message(name) {
                Some(m) => format!("type.googleapis.com/{}", m.proto),
                None => format!("type.googleapis.com/{}.{name}", self.profile.package),
            },
            Kind::Map(item) => {
                let value = match &item.kind {
                    Kind::String => "string".to_string(),
                    other => self.type_name(other),
                };
                format!("map<string, {value}>")
            }
            Kind::Any => "type.googleapis.com/google.protobuf.Value".to_string(),
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

/// Why a request body was refused.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Rejection {
    /// Google would refuse it too: unknown names, ill-typed values.
    Invalid(Vec<Violation>),
    /// Google would take it, but it sets fields the sandbox does not emulate; each
    /// violation's message says so, profile the field.
    Unsupported(Vec<Violation>),
}

/// One canonicalization: the document, the rules and what went wrong so far.
struct Walk<'d> {
    doc: &'d Document,
    rules: Rules,
    errs: Vec<Violation>,
    unsupported: Vec<Violation>,
}

impl Walk<'_> {
    /// `check` is whether fields are held to what the sandbox emulates: only along
    /// emulated fields (below an unsupported one, that one is already named).
    fn message(&mut self, msg: &Message, value: &Value, path: &str, check: bool) -> Option<Value> {
        let Some(obj) = value.as_object() else {
            let name = self.doc.type_name(&Kind::Message(msg.name.clone()));
            self.errs.push(invalid_value(path, &name, value));
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
                self.errs.push(Violation {
                    field: path.to_string(),
                    message: format!(
                        "Invalid JSON payload received. Unknown name \"{key}\"{at}: Cannot find field."
                    ),
                });
                continue;
            };
            let field_path = join(path, &snake(&field.name));
            let emulated = field.output_only || self.doc.profile.emulates(&msg.name, &field.name);
            if v.is_null() {
                if self.rules.keep_nulls && emulated && !field.output_only {
                    out.insert(field.name.clone(), Value::Null);
                }
                continue;
            }
            let canonical = self.field(field, v, &field_path, check && emulated);
            // Output-only fields are validated (a client echoing a resource back must
            // still send well-formed JSON) but never stored.
            if field.output_only {
                continue;
            }
            let Some(c) = canonical else { continue };
            if self.rules.proto3 && is_default(field, &c) {
                continue;
            }
            // Below a field already named, everything is kept so that its emptiness is
            // judged on all it holds.
            if !emulated && check {
                // A field left at its default asks for nothing the sandbox lacks.
                if !is_empty(&c) {
                    self.unsupported.push(Violation {
                        field: field_path.clone(),
                        message: format!(
                            "{}.{} ({field_path}) is not supported by the sandbox.",
                            msg.name, field.name
                        ),
                    });
                }
                continue;
            }
            out.insert(field.name.clone(), c);
        }
        Some(Value::Object(out))
    }

    fn field(&mut self, field: &Field, v: &Value, path: &str, check: bool) -> Option<Value> {
        if !field.repeated {
            return self.value(&field.kind, v, path, check);
        }
        let Some(items) = v.as_array() else {
            self.errs.push(Violation {
                field: path.to_string(),
                message: format!(
                    "Invalid JSON payload received. Expected a list at '{path}', got {v}."
                ),
            });
            return None;
        };
        let mut list = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            if let Some(c) = self.value(&field.kind, item, &format!("{path}[{i}]"), check) {
                list.push(c);
            }
        }
        Some(Value::Array(list))
    }

    fn value(&mut self, kind: &Kind, v: &Value, path: &str, check: bool) -> Option<Value> {
        let canonical = match kind {
            Kind::String => v.is_string().then(|| v.clone()),
            Kind::Bool => v.is_boolean().then(|| v.clone()),
            Kind::Int64 => integer(v).map(|n| Value::String(n.to_string())),
            Kind::UInt64 => integer(v)
                .filter(|n| *n >= 0)
                .map(|n| Value::String(n.to_string())),
            Kind::Int32 => integer(v)
                .and_then(|n| i32::try_from(n).ok())
                .map(Value::from),
            Kind::UInt32 => integer(v)
                .and_then(|n| u32::try_from(n).ok())
                .map(Value::from),
            Kind::Double | Kind::Float => number(v),
            Kind::Enum(e) => v
                .as_str()
                .filter(|s| e.values.iter().any(|x| x == s))
                .map(|_| v.clone()),
            Kind::Any => Some(v.clone()),
            Kind::Message(name) => {
                let Some(m) = self.doc.message(name) else {
                    self.errs.push(Violation {
                        field: path.to_string(),
                        message: format!("{}: no message {name}", self.doc.profile.api),
                    });
                    return None;
                };
                return self.message(m, v, path, check);
            }
            Kind::Map(item) => {
                let Some(obj) = v.as_object() else {
                    self.errs
                        .push(invalid_value(path, &self.doc.type_name(kind), v));
                    return None;
                };
                let mut out = Map::new();
                for (k, item_value) in obj {
                    if item_value.is_null() {
                        if self.rules.keep_nulls {
                            out.insert(k.clone(), Value::Null);
                        } else {
                            let name = self.doc.type_name(&item.kind);
                            self.errs.push(invalid_value(
                                &format!("{path}[{k}]"),
                                &name,
                                item_value,
                            ));
                        }
                        continue;
                    }
                    if let Some(c) = self.field(item, item_value, &format!("{path}[{k}]"), check) {
                        out.insert(k.clone(), c);
                    }
                }
                return Some(Value::Object(out));
            }
        };
        if canonical.is_none() {
            self.errs
                .push(invalid_value(path, &self.doc.type_name(kind), v));
        }
        canonical
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

/// A floating-point value sent as a number or a string, as proto3 JSON allows.
fn number(v: &Value) -> Option<Value> {
    match v {
        Value::Number(_) => Some(v.clone()),
        Value::String(s) if ["NaN", "Infinity", "-Infinity"].contains(&s.as_str()) => {
            Some(v.clone())
        }
        Value::String(s) => s
            .trim()
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map(Value::Number),
        _ => None,
    }
}

fn is_default(field: &Field, v: &Value) -> bool {
    if field.repeated {
        return v.as_array().is_some_and(|a| a.is_empty());
    }
    match &field.kind {
        Kind::String => v.as_str() == Some(""),
        Kind::Bool => v == &Value::Bool(false),
        Kind::Int64 | Kind::UInt64 => v.as_str() == Some("0"),
        Kind::Int32 | Kind::UInt32 => v.as_i64() == Some(0),
        Kind::Double | Kind::Float => v.as_f64() == Some(0.0),
        Kind::Enum(e) => v.as_str() == e.values.first().map(String::as_str),
        Kind::Map(_) => v.as_object().is_some_and(|m| m.is_empty()),
        // Message presence is meaningful (`releaseChannel: {}` differs from no field).
        Kind::Message(_) | Kind::Any => false,
    }
}

/// Whether a canonical value asks for nothing: every leaf at its JSON default.
fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty() || s == "0",
        Value::Array(items) => items.iter().all(is_empty),
        Value::Object(map) => map.values().all(is_empty),
    }
}

fn invalid_value(path: &str, type_name: &str, v: &Value) -> Violation {
    Violation {
        field: path.to_string(),
        message: format!("Invalid value at '{path}' ({type_name}), {v}"),
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

/// `gpuDriverVersion` → `GpuDriverVersion`, the proto name of a field's nested enum.
fn upper_camel(name: &str) -> String {
    let mut chars = name.chars();
    match chars.next() {
        Some(first) => first.to_ascii_uppercase().to_string() + chars.as_str(),
        None => String::new(),
    }
}

// ------------------------------------------------------------ reading a document

fn read_message(
    profile: Profile,
    name: &str,
    schema: &Value,
    out: &mut HashMap<String, Message>,
) -> String {
    let mut fields = Vec::new();
    if let Some(props) = schema["properties"].as_object() {
        for (field, prop) in props {
            fields.push(read_field(profile, name, field, prop, out));
        }
    }
    let proto = profile
        .proto_name(name)
        .map(str::to_string)
        .unwrap_or_else(|| format!("{}.{name}", profile.package));
    out.insert(
        name.to_string(),
        Message {
            name: name.to_string(),
            proto,
            fields,
        },
    );
    name.to_string()
}

fn read_field(
    profile: Profile,
    owner: &str,
    name: &str,
    prop: &Value,
    out: &mut HashMap<String, Message>,
) -> Field {
    let description = prop["description"].as_str().unwrap_or("").trim_start();
    let lower = description.to_ascii_lowercase();
    let output_only = prop["readOnly"] == Value::Bool(true)
        || lower.starts_with("output only")
        || lower.starts_with("[output only]")
        || profile.is_output_only(owner, name);
    let (kind, repeated) = if prop["type"] == "array" {
        (read_kind(profile, owner, name, &prop["items"], out), true)
    } else {
        (read_kind(profile, owner, name, prop, out), false)
    };
    Field {
        name: name.to_string(),
        kind,
        repeated,
        output_only,
    }
}

fn read_kind(
    profile: Profile,
    owner: &str,
    name: &str,
    prop: &Value,
    out: &mut HashMap<String, Message>,
) -> Kind {
    if let Some(reference) = prop["$ref"].as_str() {
        return Kind::Message(reference.to_string());
    }
    let format = prop["format"].as_str().unwrap_or("");
    match prop["type"].as_str().unwrap_or("") {
        "string" => match format {
            "int64" => Kind::Int64,
            "uint64" => Kind::UInt64,
            _ => {
                let values: Option<Vec<String>> = match prop["enum"].as_array() {
                    Some(values) => Some(
                        values
                            .iter()
                            .filter_map(Value::as_str)
                            .map(str::to_string)
                            .collect(),
                    ),
                    None => profile
                        .enum_values(owner, name)
                        .map(|v| v.iter().map(|s| s.to_string()).collect()),
                };
                match values {
                    Some(values) => Kind::Enum(EnumType {
                        proto: enum_proto(profile, owner, name),
                        values,
                    }),
                    None => Kind::String,
                }
            }
        },
        "integer" => match format {
            "uint32" => Kind::UInt32,
            _ => Kind::Int32,
        },
        "number" => match format {
            "float" => Kind::Float,
            _ => Kind::Double,
        },
        "boolean" => Kind::Bool,
        "object" if prop["properties"].is_object() => {
            Kind::Message(read_message(profile, &format!("{owner}.{name}"), prop, out))
        }
        "object" if prop["additionalProperties"].is_object() => Kind::Map(Box::new(read_field(
            profile,
            owner,
            name,
            &prop["additionalProperties"],
            out,
        ))),
        _ => Kind::Any,
    }
}

fn enum_proto(profile: Profile, owner: &str, field: &str) -> String {
    let key = format!("{owner}.{field}");
    if let Some(proto) = profile.proto_name(&key) {
        return proto.to_string();
    }
    if profile.json_api {
        format!("{}.{key}", profile.package)
    } else {
        format!("{}.{owner}.{}", profile.package, upper_camel(field))
    }
}

fn read_methods(resource: &Value, out: &mut BTreeMap<String, Method>) {
    if let Some(methods) = resource["methods"].as_object() {
        for method in methods.values() {
            let Some(id) = method["id"].as_str() else {
                continue;
            };
            let path = method["flatPath"]
                .as_str()
                .or_else(|| method["path"].as_str())
                .unwrap_or("");
            out.insert(
                id.to_string(),
                Method {
                    http_method: method["httpMethod"].as_str().unwrap_or("").to_string(),
                    path: path.to_string(),
                    request: method["request"]["$ref"].as_str().map(str::to_string),
                    response: method["response"]["$ref"].as_str().map(str::to_string),
                },
            );
        }
    }
    if let Some(resources) = resource["resources"].as_object() {
        for r in resources.values() {
            read_methods(r, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A small document in the discovery format, read as the real ones are.
    fn doc() -> Document {
        let raw = json!({"schemas": {
            "Inner": {"properties": {
                "color": {"type": "string", "enum": ["COLOR_UNSPECIFIED", "RED", "BLUE"]},
                "count": {"type": "string", "format": "int64"},
                "ratio": {"type": "number", "format": "double"},
                "next": {"$ref": "Inner"},
            }},
            "Outer": {"properties": {
                "name": {"type": "string"},
                "size": {"type": "integer", "format": "int32"},
                "on": {"type": "boolean"},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "innerItems": {"type": "array", "items": {"$ref": "Inner"}},
                "single": {"$ref": "Inner"},
                "status": {"type": "string", "description": "Output only. The status."},
                "unemulated": {"type": "string"},
                "nested": {"type": "object", "properties": {"deep": {"type": "boolean"}}},
            }},
            "Request": {"properties": {"outer": {"$ref": "Outer"}}},
        }});
        let profile = Profile {
            api: "test",
            package: "test.v1",
            json_api: false,
            proto_names: &[],
            output_only: &[],
            enums: &[],
            emulated: &[
                ("Request", &["outer"]),
                (
                    "Outer",
                    &["name", "size", "on", "labels", "innerItems", "single"],
                ),
                ("Inner", &["color", "count", "ratio", "next"]),
            ],
        };
        Document::from_json(profile, &raw).expect("a valid document")
    }

    fn messages(rejection: Rejection) -> Vec<String> {
        match rejection {
            Rejection::Invalid(v) | Rejection::Unsupported(v) => {
                v.into_iter().map(|v| v.message).collect()
            }
        }
    }

    #[test]
    fn reads_kinds_names_and_inline_objects() {
        let doc = doc();
        let outer = doc.message("Outer").expect("Outer");
        assert_eq!(outer.proto, "test.v1.Outer");
        assert!(outer.field("status").is_some_and(|f| f.output_only));
        assert!(outer.field("inner_items").is_some_and(|f| f.repeated));
        assert!(matches!(
            outer.field("nested").map(|f| &f.kind),
            Some(Kind::Message(n)) if n == "Outer.nested"
        ));
        let inner = doc.message("Inner").expect("Inner");
        assert!(matches!(
            inner.field("color").map(|f| &f.kind),
            Some(Kind::Enum(e)) if e.proto == "test.v1.Inner.Color" && e.values.len() == 3
        ));
        assert!(matches!(
            inner.field("ratio").map(|f| &f.kind),
            Some(Kind::Double)
        ));
    }

    #[test]
    fn canonicalizes_integers_defaults_and_output_fields() {
        let got = doc()
            .canonicalize(
                "Request",
                &json!({"outer": {"name": "a", "size": "3", "on": false, "labels": {},
                    "inner_items": [{"count": 5, "color": "RED", "ratio": "0.5"},
                        {"color": "COLOR_UNSPECIFIED", "next": {"next": {"count": "2"}}}],
                    "single": {}, "status": "RUNNING", "unemulated": ""}}),
                "",
                Rules::PROTO3,
            )
            .expect("valid body");
        assert_eq!(
            got,
            json!({"outer": {"name": "a", "size": 3,
                "innerItems": [{"count": "5", "color": "RED", "ratio": 0.5},
                    {"next": {"next": {"count": "2"}}}],
                "single": {}}})
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
                vec!["Invalid value at 'outer.single.color' (type.googleapis.com/test.v1.Inner.Color), \"GREEN\""],
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
                json!({"outer": {"single": {"count": "x", "ratio": true}, "innerItems": {}}}),
                vec![
                    "Invalid value at 'outer.single.count' (TYPE_INT64), \"x\"",
                    "Invalid value at 'outer.single.ratio' (TYPE_DOUBLE), true",
                    "Invalid JSON payload received. Expected a list at 'outer.inner_items', got {}.",
                ],
            ),
            (
                json!({"outer": 5}),
                vec!["Invalid value at 'outer' (type.googleapis.com/test.v1.Outer), 5"],
            ),
            (
                json!({"outer": {"labels": []}}),
                vec!["Invalid value at 'outer.labels' (map<string, string>), []"],
            ),
        ];
        let doc = doc();
        for (body, want) in cases {
            let err = doc
                .canonicalize("Request", &body, "", Rules::PROTO3)
                .expect_err("body must be rejected");
            assert!(matches!(err, Rejection::Invalid(_)), "{err:?}");
            assert_eq!(messages(err), want, "for {body}");
        }
    }

    #[test]
    fn fields_the_sandbox_does_not_emulate_are_named_unless_left_empty() {
        let doc = doc();
        // Outer.unemulated and .nested are not emulated: each set to a value is named.
        let err = doc
            .canonicalize(
                "Request",
                &json!({"outer": {"name": "a", "unemulated": "x", "nested": {"deep": true},
                    "single": {"color": "BLUE"}, "status": "x"}}),
                "",
                Rules::PROTO3,
            )
            .expect_err("unsupported fields");
        assert!(matches!(err, Rejection::Unsupported(_)), "{err:?}");
        assert_eq!(
            messages(err),
            vec![
                "Outer.unemulated (outer.unemulated) is not supported by the sandbox.",
                "Outer.nested (outer.nested) is not supported by the sandbox.",
            ]
        );
        // An empty value asks for nothing; an ill-typed one is still Google's error.
        assert_eq!(
            doc.canonicalize(
                "Request",
                &json!({"outer": {"name": "a", "nested": {"deep": false}, "unemulated": ""}}),
                "",
                Rules::PROTO3
            ),
            Ok(json!({"outer": {"name": "a"}}))
        );
        assert!(matches!(
            doc.canonicalize(
                "Request",
                &json!({"outer": {"nested": {"deep": 1}}}),
                "",
                Rules::PROTO3
            ),
            Err(Rejection::Invalid(_))
        ));
    }

    #[test]
    fn root_prefixes_paths_and_nulls_survive_only_for_patches() {
        let doc = doc();
        let Err(Rejection::Invalid(errs)) =
            doc.canonicalize("Outer", &json!({"bad": 1}), "outer", Rules::PROTO3)
        else {
            panic!("unknown field accepted");
        };
        assert_eq!(errs[0].field, "outer");
        let body = json!({"name": null, "labels": {"a": null, "b": "x"}, "on": false});
        assert_eq!(
            doc.canonicalize("Outer", &body, "", Rules::JSON_API_PATCH),
            Ok(json!({"name": null, "labels": {"a": null, "b": "x"}, "on": false}))
        );
        let Err(Rejection::Invalid(errs)) = doc.canonicalize("Outer", &body, "", Rules::JSON_API)
        else {
            panic!("null label accepted");
        };
        assert_eq!(errs[0].field, "labels[a]");
    }

    #[test]
    fn conformance_is_strict_about_output_shapes() {
        let doc = doc();
        assert!(doc
            .conforms(
                "Outer",
                &json!({"name": "a", "size": 3, "status": "X", "single": {"count": "1"},
                    "nested": {"deep": true}})
            )
            .is_ok());
        let problems = doc
            .conforms(
                "Outer",
                &json!({"size": "3", "single": {"count": 1, "next": {"color": "GREEN"}}, "extra": true}),
            )
            .expect_err("four problems");
        assert_eq!(problems.len(), 4, "{problems:?}");
    }
}
