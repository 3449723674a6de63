//! Contract test: every field and enum value in the sandbox's field tables exists in the
//! official discovery documents (`contracts/gcp/*.json`) with a compatible type, so
//! the emulator cannot accept or return a field Google does not have.

use std::collections::HashSet;

use serde_json::{Map, Value};
use terrain_sandbox::gcp::schema::{Kind, Message};
use terrain_sandbox::gcp::tables;

/// API `api`'s v1 discovery document, kept in the repository (`contracts/gcp/`).
fn discovery(api: &str) -> Value {
    terrain_contracts::discovery(api, "v1")
}

struct Checker<'a> {
    api: &'a str,
    doc: &'a Value,
    problems: Vec<String>,
    /// Referenced schemas already checked (also stops self-references like
    /// OperationProgress.stages).
    visited: HashSet<(usize, String)>,
}

impl Checker<'_> {
    fn message(&mut self, msg: &'static Message, props: &Map<String, Value>, path: &str) {
        for field in msg.fields {
            let at = format!("{}: {path}.{}", self.api, field.name);
            let Some(prop) = props.get(field.name) else {
                self.problems
                    .push(format!("{at} is not in the discovery document"));
                continue;
            };
            let is_array = prop["type"] == "array";
            if field.repeated != is_array {
                self.problems.push(format!(
                    "{at}: table says repeated={}, discovery type is {}",
                    field.repeated, prop["type"]
                ));
                continue;
            }
            if prop["readOnly"] == Value::Bool(true) && !field.output_only {
                self.problems.push(format!(
                    "{at} is read-only in discovery but accepted as input"
                ));
            }
            let item = if is_array { &prop["items"] } else { prop };
            self.kind(field.kind, item, &at, &format!("{path}.{}", field.name));
        }
    }

    fn kind(&mut self, kind: Kind, item: &Value, at: &str, path: &str) {
        let ty = item["type"].as_str().unwrap_or("");
        let format = item["format"].as_str().unwrap_or("");
        let ok = match kind {
            Kind::String => {
                ty == "string"
                    && [
                        "",
                        "google-datetime",
                        "date-time",
                        "google-duration",
                        "byte",
                    ]
                    .contains(&format)
            }
            Kind::Int64 => ty == "string" && ["int64", "uint64"].contains(&format),
            Kind::Int32 => ty == "integer" && ["int32", "uint32"].contains(&format),
            Kind::Bool => ty == "boolean",
            Kind::StringMap => ty == "object" && item["additionalProperties"]["type"] == "string",
            Kind::Any => ty == "object",
            Kind::Enum(e) => {
                if ty != "string" {
                    false
                } else if let Some(values) = item["enum"].as_array() {
                    for v in e.values {
                        if !values.iter().any(|x| x == v) {
                            self.problems
                                .push(format!("{at}: enum value {v} is not in {values:?}"));
                        }
                    }
                    // proto3 drops the zero value, so it must really be the zero value.
                    if values.first().and_then(Value::as_str) != e.values.first().copied() {
                        self.problems
                            .push(format!("{at}: the first (zero) enum value differs"));
                    }
                    true
                } else {
                    // Storage's JSON API lists string values in the description only.
                    let description = item["description"].as_str().unwrap_or("");
                    for v in e.values {
                        if !description.contains(v) {
                            self.problems.push(format!(
                                "{at}: value {v} is not documented in {description:?}"
                            ));
                        }
                    }
                    true
                }
            }
            Kind::Message(m) => {
                if let Some(reference) = item["$ref"].as_str() {
                    if m.name != reference {
                        self.problems.push(format!(
                            "{at}: table message {} but discovery $ref {reference}",
                            m.name
                        ));
                    }
                    match self.doc["schemas"][reference]["properties"].as_object() {
                        Some(props) => {
                            let key = (m as *const Message as usize, reference.to_string());
                            if self.visited.insert(key) {
                                let props = props.clone();
                                self.message(m, &props, path);
                            }
                        }
                        None => self
                            .problems
                            .push(format!("{at}: schema {reference} not found")),
                    }
                    true
                } else if let Some(props) = item["properties"].as_object() {
                    let props = props.clone();
                    self.message(m, &props, path);
                    true
                } else {
                    false
                }
            }
        };
        if !ok {
            self.problems.push(format!(
                "{at}: table kind {kind:?} is incompatible with discovery type {ty:?} format {format:?}"
            ));
        }
    }
}

#[test]
fn field_tables_match_the_official_discovery_documents() {
    let mut checked = 0;
    let mut problems = Vec::new();
    for api in ["container", "file", "storage"] {
        let doc = discovery(api);
        let mut checker = Checker {
            api,
            doc: &doc,
            problems: Vec::new(),
            visited: HashSet::new(),
        };
        for table in tables::all().into_iter().filter(|t| t.api == api) {
            let name = table.message.name;
            match doc["schemas"][name]["properties"].as_object() {
                Some(props) => {
                    let props = props.clone();
                    checker.message(table.message, &props, name);
                    checked += 1;
                }
                None => checker
                    .problems
                    .push(format!("{api}: no schema named {name}")),
            }
        }
        problems.extend(checker.problems);
    }
    assert!(
        problems.is_empty(),
        "field tables drifted from discovery:\n{}",
        problems.join("\n")
    );
    assert!(checked >= 20, "only {checked} root messages checked");
}

#[test]
fn the_checker_catches_a_drifted_table() {
    use terrain_sandbox::gcp::schema::{EnumType, Field};
    static FAKE_CHANNEL: EnumType = EnumType {
        proto: "x",
        values: &["UNSPECIFIED", "FAST"],
    };
    static DRIFTED: Message = Message {
        name: "ReleaseChannel",
        proto: "x",
        fields: &[
            Field::new("channel", Kind::Enum(&FAKE_CHANNEL)),
            Field::new("cadence", Kind::String),
        ],
    };
    let doc = discovery("container");
    let mut checker = Checker {
        api: "container",
        doc: &doc,
        problems: Vec::new(),
        visited: HashSet::new(),
    };
    let props = doc["schemas"]["ReleaseChannel"]["properties"]
        .as_object()
        .expect("ReleaseChannel schema")
        .clone();
    checker.message(&DRIFTED, &props, "ReleaseChannel");
    assert_eq!(checker.problems.len(), 2, "{:?}", checker.problems);
}
