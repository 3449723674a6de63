//! Contract checks against the official Kubernetes 1.31 OpenAPI (swagger 2.0) document
//! kept in the repository (`contracts/kubernetes/swagger.json`): finds an object's definition
//! by its apiVersion and kind (`x-kubernetes-group-version-kind`) and lists every way the
//! object departs from it — unknown fields, missing required fields, wrong types.
//! Only `serde_json` and std; the document is never modified.

#![allow(dead_code)]

use serde_json::Value;

/// The swagger document, kept in the repository (`contracts/kubernetes/`). Panics (the
/// test fails) when it is not there: a contract test must not pass without its contract.
pub fn load() -> Swagger {
    Swagger {
        doc: terrain_contracts::kubernetes_swagger(),
    }
}

pub struct Swagger {
    doc: Value,
}

impl Swagger {
    /// The definition name for `apiVersion` + `kind` (`batch/v1` + `Job` →
    /// `io.k8s.api.batch.v1.Job`).
    pub fn definition_for(&self, api_version: &str, kind: &str) -> Option<String> {
        let (group, version) = match api_version.split_once('/') {
            Some((g, v)) => (g, v),
            None => ("", api_version),
        };
        let defs = self.doc["definitions"].as_object()?;
        defs.iter()
            .find(|(_, d)| {
                d["x-kubernetes-group-version-kind"]
                    .as_array()
                    .is_some_and(|gvks| {
                        gvks.iter().any(|g| {
                            g["group"] == group && g["version"] == version && g["kind"] == kind
                        })
                    })
            })
            .map(|(name, _)| name.clone())
    }

    /// Every departure of `object` from its definition; empty when it conforms. An
    /// object whose apiVersion/kind the document lacks is one problem.
    pub fn check(&self, object: &Value) -> Vec<String> {
        let api_version = object["apiVersion"].as_str().unwrap_or_default();
        let kind = object["kind"].as_str().unwrap_or_default();
        let Some(def) = self.definition_for(api_version, kind) else {
            return vec![format!(
                "no definition for apiVersion {api_version:?} kind {kind:?}"
            )];
        };
        let mut problems = Vec::new();
        self.check_against(
            &Value::String(format!("#/definitions/{def}")),
            object,
            kind,
            &mut problems,
            true,
        );
        problems
    }

    fn resolve<'a>(&'a self, reference: &str) -> Option<&'a Value> {
        let name = reference.strip_prefix("#/definitions/")?;
        self.doc["definitions"].get(name)
    }

    fn check_against(
        &self,
        reference: &Value,
        value: &Value,
        at: &str,
        problems: &mut Vec<String>,
        top: bool,
    ) {
        let Some(schema) = reference.as_str().and_then(|r| self.resolve(r)) else {
            problems.push(format!("{at}: unresolvable reference {reference}"));
            return;
        };
        self.check_schema(schema, value, at, problems, top);
    }

    fn check_schema(
        &self,
        schema: &Value,
        value: &Value,
        at: &str,
        problems: &mut Vec<String>,
        top: bool,
    ) {
        if let Some(r) = schema.get("$ref") {
            self.check_against(r, value, at, problems, top);
            return;
        }
        // Quantities and IntOrString are strings in the document but take numbers too.
        match schema["format"].as_str() {
            Some("int-or-string") => {
                if !(value.is_string() || value.is_i64() || value.is_u64()) {
                    problems.push(format!("{at}: expected an integer or string, got {value}"));
                }
                return;
            }
            _ if schema.get("type").is_none() && schema.get("properties").is_none() => return,
            _ => {}
        }
        match schema["type"].as_str() {
            Some("string") => {
                if !value.is_string() {
                    problems.push(format!("{at}: expected a string, got {value}"));
                }
            }
            Some("integer") => {
                if !(value.is_i64() || value.is_u64()) {
                    problems.push(format!("{at}: expected an integer, got {value}"));
                }
            }
            Some("number") => {
                if !value.is_number() {
                    problems.push(format!("{at}: expected a number, got {value}"));
                }
            }
            Some("boolean") => {
                if !value.is_boolean() {
                    problems.push(format!("{at}: expected a boolean, got {value}"));
                }
            }
            Some("array") => match value.as_array() {
                Some(items) => {
                    for (i, item) in items.iter().enumerate() {
                        self.check_schema(
                            &schema["items"],
                            item,
                            &format!("{at}[{i}]"),
                            problems,
                            false,
                        );
                    }
                }
                None => problems.push(format!("{at}: expected a list, got {value}")),
            },
            _ => {
                let Some(map) = value.as_object() else {
                    problems.push(format!("{at}: expected an object, got {value}"));
                    return;
                };
                if let Some(extra) = schema.get("additionalProperties") {
                    for (k, v) in map {
                        self.check_schema(extra, v, &format!("{at}.{k}"), problems, false);
                    }
                    return;
                }
                let props = schema["properties"].as_object();
                for (k, v) in map {
                    match props.and_then(|p| p.get(k)) {
                        Some(p) => self.check_schema(p, v, &format!("{at}.{k}"), problems, false),
                        None => problems.push(format!("{at}.{k}: not a field of this object")),
                    }
                }
                for req in schema["required"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                {
                    if !map.contains_key(req) && !(top && (req == "apiVersion" || req == "kind")) {
                        problems.push(format!("{at}.{req}: required, missing"));
                    }
                }
            }
        }
    }
}
