//! Contract checks against the official Google API discovery documents kept in the
//! repository under `contracts/gcp/`.
//!
//! This module owns three things, and nothing else:
//! - loading a discovery document (`Discovery::load`),
//! - routing an HTTP method and a root-relative path to the documented method
//!   (`Discovery::method`), including storage's media-upload paths,
//! - validating JSON bodies against the documented schemas (`Discovery::check`)
//!   and summarising which official fields and enum values a body uses
//!   (`Discovery::fields_used`).
//!
//! It depends only on `serde_json` and std, and never modifies the documents.

#![allow(dead_code)]

use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Directory holding the official discovery documents, kept in the repository
/// (`contracts/gcp/`, with their provenance in `contracts/SOURCES.json`).
pub fn reference_dir() -> PathBuf {
    terrain_contracts::dir().join("gcp")
}

/// A documented API method, as resolved by [`Discovery::method`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Method {
    /// Method id, e.g. `container.projects.locations.clusters.create`.
    pub id: String,
    /// Upper-case HTTP method from the document, e.g. `POST`.
    pub http_method: String,
    /// Request body schema name, if the method takes a body.
    pub request: Option<String>,
    /// Response body schema name, if the method returns one.
    pub response: Option<String>,
    /// The template that matched, relative to the API root
    /// (service path included), e.g. `storage/v1/b/{bucket}`.
    pub template: String,
    /// Path parameters bound by the match, percent-decoded.
    pub params: BTreeMap<String, String>,
}

#[derive(Debug, Clone)]
enum Part {
    Lit(String),
    Var(String),
}

#[derive(Debug, Clone)]
struct Route {
    id: String,
    http_method: String,
    request: Option<String>,
    response: Option<String>,
    template: String,
    segments: Vec<Vec<Part>>,
    /// Templates from `flatPath` follow the google.api.http rules: a `:verb`
    /// is only ever a suffix, so a variable never swallows a ':'.
    strict: bool,
}

/// A parsed discovery document.
#[derive(Debug, Clone)]
pub struct Discovery {
    name: String,
    version: String,
    service_path: String,
    schemas: Map<String, Value>,
    routes: Vec<Route>,
}

impl Discovery {
    /// Loads `file_name` (e.g. `"container.v1.json"`) from [`reference_dir`].
    /// Panics with a message naming the expected path if it is missing or invalid.
    pub fn load(file_name: &str) -> Discovery {
        let name = format!("gcp/{file_name}");
        match Self::from_value(&terrain_contracts::json(&name)) {
            Ok(doc) => doc,
            Err(err) => panic!("{name}: {err}"),
        }
    }

    /// Loads a discovery document from an explicit path.
    pub fn from_path(path: &Path) -> Result<Discovery, String> {
        let text = std::fs::read_to_string(path).map_err(|err| {
            format!(
                "cannot read discovery document {}: {err} (the official documents are expected under {})",
                path.display(),
                reference_dir().display()
            )
        })?;
        let doc: Value = serde_json::from_str(&text).map_err(|err| {
            format!(
                "discovery document {} is not valid JSON: {err}",
                path.display()
            )
        })?;
        Self::from_value(&doc).map_err(|err| format!("{}: {err}", path.display()))
    }

    /// Builds a `Discovery` from an already parsed document.
    pub fn from_value(doc: &Value) -> Result<Discovery, String> {
        let name = str_field(doc, "name")
            .ok_or("discovery document has no \"name\"")?
            .to_string();
        let schemas = doc
            .get("schemas")
            .and_then(Value::as_object)
            .cloned()
            .ok_or("discovery document has no \"schemas\" object")?;
        let mut discovery = Discovery {
            name,
            version: str_field(doc, "version").unwrap_or_default().to_string(),
            service_path: str_field(doc, "servicePath")
                .unwrap_or_default()
                .to_string(),
            schemas,
            routes: Vec::new(),
        };
        let mut routes = Vec::new();
        discovery.collect_routes(doc, &mut routes);
        if routes.is_empty() {
            return Err("discovery document declares no methods".to_string());
        }
        discovery.routes = routes;
        Ok(discovery)
    }

    /// API name from the document, e.g. `"container"`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// API version from the document, e.g. `"v1"`.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// Whether the document defines a schema called `name`.
    pub fn has_schema(&self, name: &str) -> bool {
        self.schemas.contains_key(name)
    }

    /// The documented method with id `id`, without path parameters.
    pub fn method_by_id(&self, id: &str) -> Option<Method> {
        self.routes
            .iter()
            .find(|route| route.id == id)
            .map(|route| route.to_method(BTreeMap::new()))
    }

    /// Finds the method whose template (`flatPath`, else `path`, plus media
    /// upload paths) matches `http_method` and `path`, where `path` is
    /// relative to the API root URL (e.g. `storage/v1/b/my-bucket`,
    /// `upload/storage/v1/b/x/o`, `v1/projects/p/locations/l/clusters`).
    /// A leading '/', a query string, a fragment, and a scheme+host prefix
    /// are ignored. Each `{x}` matches exactly one non-empty segment (no
    /// '/'); in `flatPath` templates it also never contains ':', so a custom
    /// verb such as `:setSize` must match literally. When several templates
    /// match, literal segments win over variables, comparing from the left.
    pub fn method(&self, http_method: &str, path: &str) -> Option<Method> {
        let path = normalize_path(path);
        let segments: Vec<&str> = path.split('/').collect();
        let mut best: Option<(Vec<u8>, &Route, BTreeMap<String, String>)> = None;
        for route in &self.routes {
            if !route.http_method.eq_ignore_ascii_case(http_method)
                || route.segments.len() != segments.len()
            {
                continue;
            }
            let mut params = Vec::new();
            let mut score = Vec::with_capacity(segments.len());
            let matched = route
                .segments
                .iter()
                .zip(&segments)
                .all(|(parts, segment)| {
                    score.push(segment_score(parts));
                    match_segment(parts, segment, route.strict, &mut params)
                });
            if !matched {
                continue;
            }
            let better = match &best {
                None => true,
                Some((best_score, _, _)) => score > *best_score,
            };
            if better {
                let params = params
                    .into_iter()
                    .map(|(name, value)| (name, percent_decode(&value)))
                    .collect();
                best = Some((score, route, params));
            }
        }
        best.map(|(_, route, params)| route.to_method(params))
    }

    /// Validates `value` against schema `schema_name`. Returns one
    /// human-readable problem per violation, each starting with a JSON path
    /// rooted at the schema name, e.g.
    /// `CreateClusterRequest.cluster.nodePools[0].config.acceleratorz: not a field of NodeConfig`.
    ///
    /// Checked: unknown object keys (through `$ref`, `items`,
    /// `additionalProperties` and inline `properties`), JSON types, `enum`
    /// membership, integer formats (int32/uint32 as JSON numbers; int64/uint64
    /// as decimal strings, plain integers also accepted), and the string
    /// formats google-duration, google-datetime, date-time, date and byte.
    /// `null` is accepted for any field and map value (PATCH semantics), but
    /// not as an array element.
    pub fn check(&self, schema_name: &str, value: &Value) -> Vec<String> {
        let mut problems = Vec::new();
        match self.schemas.get(schema_name) {
            Some(schema) => {
                self.check_node(schema, schema_name, schema_name, value, &mut problems);
            }
            None => problems.push(format!(
                "{schema_name}: no such schema in the {} discovery document",
                self.name
            )),
        }
        problems
    }

    /// Every official field path that `value` uses, rooted at the schema name:
    /// dotted, with `[]` for arrays of objects and `{}` for maps of objects
    /// (e.g. `Cluster.nodePools[].config.accelerators[].acceleratorType`).
    /// Only leaves are listed: scalars, nulls, empty objects/arrays, arrays of
    /// scalars and maps (listed by their field path). For enum-typed strings
    /// an extra entry names the owning schema, field and value, e.g.
    /// `NodeTaint.effect=NO_SCHEDULE`. Keys that are not official fields are
    /// skipped (see [`Discovery::check`] for reporting them).
    pub fn fields_used(&self, schema_name: &str, value: &Value) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        if let Some(schema) = self.schemas.get(schema_name) {
            self.collect_fields(schema, schema_name, schema_name, value, &mut out);
        }
        out
    }

    // ---- routes ---------------------------------------------------------

    fn collect_routes(&self, resource: &Value, routes: &mut Vec<Route>) {
        if let Some(methods) = resource.get("methods").and_then(Value::as_object) {
            for method in methods.values() {
                self.add_method_routes(method, routes);
            }
        }
        if let Some(resources) = resource.get("resources").and_then(Value::as_object) {
            for child in resources.values() {
                self.collect_routes(child, routes);
            }
        }
    }

    fn add_method_routes(&self, method: &Value, routes: &mut Vec<Route>) {
        let (Some(id), Some(http_method)) =
            (str_field(method, "id"), str_field(method, "httpMethod"))
        else {
            return;
        };
        let schema_ref = |key: &str| {
            method
                .get(key)
                .and_then(|body| str_field(body, "$ref"))
                .map(str::to_string)
        };
        let request = schema_ref("request");
        let response = schema_ref("response");
        let mut templates = Vec::new();
        if let Some(flat) = str_field(method, "flatPath") {
            templates.push((self.root_relative(flat), true));
        } else if let Some(path) = str_field(method, "path") {
            templates.push((self.root_relative(path), false));
        }
        if let Some(protocols) = method
            .get("mediaUpload")
            .and_then(|upload| upload.get("protocols"))
            .and_then(Value::as_object)
        {
            for protocol in protocols.values() {
                if let Some(path) = str_field(protocol, "path") {
                    templates.push((self.root_relative(path), false));
                }
            }
        }
        for (template, strict) in templates {
            let segments = template.split('/').map(parse_segment).collect();
            routes.push(Route {
                id: id.to_string(),
                http_method: http_method.to_ascii_uppercase(),
                request: request.clone(),
                response: response.clone(),
                template,
                segments,
                strict,
            });
        }
    }

    /// Paths starting with '/' are relative to rootUrl; others to rootUrl + servicePath.
    fn root_relative(&self, template: &str) -> String {
        match template.strip_prefix('/') {
            Some(absolute) => absolute.to_string(),
            None => format!("{}{}", self.service_path, template),
        }
    }

    // ---- validation -----------------------------------------------------

    /// Follows `$ref`; returns the schema to apply and its label.
    fn resolve<'a>(
        &'a self,
        schema: &'a Value,
        label: &str,
    ) -> Result<(&'a Value, String), String> {
        match str_field(schema, "$ref") {
            Some(name) => self
                .schemas
                .get(name)
                .map(|target| (target, name.to_string()))
                .ok_or_else(|| format!("reference to unknown schema {name}")),
            None => Ok((schema, label.to_string())),
        }
    }

    fn check_node(
        &self,
        schema: &Value,
        label: &str,
        path: &str,
        value: &Value,
        problems: &mut Vec<String>,
    ) {
        let (schema, label) = match self.resolve(schema, label) {
            Ok(resolved) => resolved,
            Err(err) => {
                problems.push(format!("{path}: {err}"));
                return;
            }
        };
        if value.is_null() {
            return;
        }
        match schema_type(schema) {
            "any" => {}
            "object" => match value.as_object() {
                Some(map) => self.check_object(schema, &label, path, map, problems),
                None => problems.push(type_problem(path, "object", value)),
            },
            "array" => match value.as_array() {
                Some(items) => {
                    let item_schema = schema.get("items");
                    for (index, item) in items.iter().enumerate() {
                        let item_path = format!("{path}[{index}]");
                        if item.is_null() {
                            problems.push(format!(
                                "{item_path}: null is not allowed as an array element"
                            ));
                        } else if let Some(item_schema) = item_schema {
                            self.check_node(item_schema, &label, &item_path, item, problems);
                        }
                    }
                }
                None => problems.push(type_problem(path, "array", value)),
            },
            "string" => check_string(schema, &label, path, value, problems),
            "integer" => check_integer(schema, path, value, problems),
            "number" => match value {
                Value::Number(_) => {}
                Value::String(s) if matches!(s.as_str(), "NaN" | "Infinity" | "-Infinity") => {}
                _ => problems.push(type_problem(path, "number", value)),
            },
            "boolean" => {
                if !value.is_boolean() {
                    problems.push(type_problem(path, "boolean", value));
                }
            }
            other => problems.push(format!(
                "{path}: schema {label} has unsupported type {other:?}"
            )),
        }
    }

    fn check_object(
        &self,
        schema: &Value,
        label: &str,
        path: &str,
        map: &Map<String, Value>,
        problems: &mut Vec<String>,
    ) {
        let properties = schema.get("properties").and_then(Value::as_object);
        let additional = additional_properties(schema);
        for (key, child) in map {
            if let Some(property) = properties.and_then(|props| props.get(key)) {
                if !child.is_null() {
                    let child_label = format!("{label}.{key}");
                    self.check_node(
                        property,
                        &child_label,
                        &key_path(path, key),
                        child,
                        problems,
                    );
                }
            } else if let Some(additional) = additional {
                if !child.is_null() {
                    self.check_node(additional, label, &key_path(path, key), child, problems);
                }
            } else {
                let hint = properties
                    .and_then(|props| suggest(key, props.keys()))
                    .map(|near| format!(" (did you mean {near:?}?)"))
                    .unwrap_or_default();
                problems.push(format!(
                    "{}: not a field of {label}{hint}",
                    key_path(path, key)
                ));
            }
        }
    }

    // ---- field summary --------------------------------------------------

    fn collect_fields(
        &self,
        schema: &Value,
        label: &str,
        path: &str,
        value: &Value,
        out: &mut BTreeSet<String>,
    ) {
        let Ok((schema, label)) = self.resolve(schema, label) else {
            out.insert(path.to_string());
            return;
        };
        match (schema_type(schema), value) {
            ("object", Value::Object(map)) if !map.is_empty() => {
                let properties = schema.get("properties").and_then(Value::as_object);
                let additional = additional_properties(schema);
                let mut map_recorded = false;
                for (key, child) in map {
                    if let Some(property) = properties.and_then(|props| props.get(key)) {
                        let child_label = format!("{label}.{key}");
                        self.collect_fields(
                            property,
                            &child_label,
                            &format!("{path}.{key}"),
                            child,
                            out,
                        );
                    } else if let Some(additional) = additional {
                        if !map_recorded {
                            out.insert(path.to_string());
                            map_recorded = true;
                        }
                        if child.is_object() || child.is_array() {
                            self.collect_fields(
                                additional,
                                &label,
                                &format!("{path}{{}}"),
                                child,
                                out,
                            );
                        } else {
                            self.collect_enum(additional, &label, child, out);
                        }
                    }
                }
            }
            ("array", Value::Array(items)) if !items.is_empty() => {
                let Some(item_schema) = schema.get("items") else {
                    out.insert(path.to_string());
                    return;
                };
                let item_is_container = self
                    .resolve(item_schema, &label)
                    .map(|(resolved, _)| matches!(schema_type(resolved), "object" | "array"))
                    .unwrap_or(false);
                if item_is_container {
                    let item_path = format!("{path}[]");
                    for item in items {
                        self.collect_fields(item_schema, &label, &item_path, item, out);
                    }
                } else {
                    out.insert(path.to_string());
                    for item in items {
                        self.collect_enum(item_schema, &label, item, out);
                    }
                }
            }
            _ => {
                out.insert(path.to_string());
                self.collect_enum(schema, &label, value, out);
            }
        }
    }

    fn collect_enum(&self, schema: &Value, label: &str, value: &Value, out: &mut BTreeSet<String>) {
        let Ok((schema, label)) = self.resolve(schema, label) else {
            return;
        };
        if let (Some(_), Some(text)) = (schema.get("enum"), value.as_str()) {
            out.insert(format!("{label}={text}"));
        }
    }
}

impl Route {
    fn to_method(&self, params: BTreeMap<String, String>) -> Method {
        Method {
            id: self.id.clone(),
            http_method: self.http_method.clone(),
            request: self.request.clone(),
            response: self.response.clone(),
            template: self.template.clone(),
            params,
        }
    }
}

// ---- helpers --------------------------------------------------------------

fn str_field<'a>(value: &'a Value, key: &str) -> Option<&'a str> {
    value.get(key).and_then(Value::as_str)
}

/// The effective schema type; untyped schemas with properties are objects.
fn schema_type(schema: &Value) -> &str {
    match str_field(schema, "type") {
        Some(ty) => ty,
        None if schema.get("properties").is_some()
            || schema.get("additionalProperties").is_some() =>
        {
            "object"
        }
        None => "any",
    }
}

/// `additionalProperties` as a schema; `true` means any value.
fn additional_properties(schema: &Value) -> Option<&Value> {
    static ANY: Value = Value::Null;
    match schema.get("additionalProperties") {
        Some(Value::Object(_)) => schema.get("additionalProperties"),
        Some(Value::Bool(true)) => Some(&ANY),
        _ => None,
    }
}

fn normalize_path(path: &str) -> &str {
    let path = match path.find("://") {
        Some(scheme_end) => {
            let rest = &path[scheme_end + 3..];
            rest.find('/').map_or("", |slash| &rest[slash..])
        }
        None => path,
    };
    let path = path.split(['?', '#']).next().unwrap_or_default();
    path.trim_start_matches('/')
}

fn parse_segment(segment: &str) -> Vec<Part> {
    let mut parts = Vec::new();
    let mut rest = segment;
    while !rest.is_empty() {
        match rest.find('{') {
            Some(0) => match rest.find('}') {
                Some(close) => {
                    let name = rest[1..close].trim_start_matches('+');
                    parts.push(Part::Var(name.to_string()));
                    rest = &rest[close + 1..];
                }
                None => {
                    parts.push(Part::Lit(rest.to_string()));
                    rest = "";
                }
            },
            Some(open) => {
                parts.push(Part::Lit(rest[..open].to_string()));
                rest = &rest[open..];
            }
            None => {
                parts.push(Part::Lit(rest.to_string()));
                rest = "";
            }
        }
    }
    parts
}

/// 2 for an all-literal segment, 1 for a mix, 0 for a bare variable.
fn segment_score(parts: &[Part]) -> u8 {
    let literals = parts
        .iter()
        .filter(|part| matches!(part, Part::Lit(_)))
        .count();
    if literals == parts.len() {
        2
    } else if literals > 0 {
        1
    } else {
        0
    }
}

fn match_segment(
    parts: &[Part],
    segment: &str,
    strict: bool,
    params: &mut Vec<(String, String)>,
) -> bool {
    match parts.split_first() {
        None => segment.is_empty(),
        Some((Part::Lit(literal), rest)) => segment
            .strip_prefix(literal.as_str())
            .is_some_and(|remaining| match_segment(rest, remaining, strict, params)),
        Some((Part::Var(name), rest)) => {
            let ends = segment
                .char_indices()
                .map(|(index, ch)| index + ch.len_utf8())
                .collect::<Vec<_>>();
            for end in ends {
                let candidate = &segment[..end];
                if strict && candidate.contains(':') {
                    break;
                }
                let mark = params.len();
                params.push((name.clone(), candidate.to_string()));
                if match_segment(rest, &segment[end..], strict, params) {
                    return true;
                }
                params.truncate(mark);
            }
            false
        }
    }
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        if bytes[index] == b'%' && index + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[index + 1..index + 3]).ok();
            if let Some(byte) = hex.and_then(|hex| u8::from_str_radix(hex, 16).ok()) {
                out.push(byte);
                index += 3;
                continue;
            }
        }
        out.push(bytes[index]);
        index += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn key_path(path: &str, key: &str) -> String {
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|ch| ch.is_ascii_alphanumeric() || matches!(ch, '_' | '-' | '@' | '$'));
    if plain {
        format!("{path}.{key}")
    } else {
        format!("{path}[{}]", Value::String(key.to_string()))
    }
}

fn describe(value: &Value) -> String {
    let kind = match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    let mut text = value.to_string();
    if text.chars().count() > 60 {
        text = text.chars().take(57).collect::<String>() + "...";
    }
    format!("{kind} {text}")
}

fn type_problem(path: &str, expected: &str, value: &Value) -> String {
    format!("{path}: expected {expected}, got {}", describe(value))
}

fn check_string(
    schema: &Value,
    label: &str,
    path: &str,
    value: &Value,
    problems: &mut Vec<String>,
) {
    let format = str_field(schema, "format").unwrap_or_default();
    if matches!(format, "int64" | "uint64") {
        let valid = match value {
            Value::String(text) => {
                let digits = if format == "int64" {
                    text.strip_prefix('-').unwrap_or(text)
                } else {
                    text
                };
                let all_digits = !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit());
                all_digits
                    && if format == "int64" {
                        text.parse::<i64>().is_ok()
                    } else {
                        text.parse::<u64>().is_ok()
                    }
            }
            Value::Number(number) => {
                if format == "int64" {
                    number.is_i64()
                } else {
                    number.is_u64()
                }
            }
            _ => false,
        };
        if !valid {
            problems.push(format!(
                "{path}: expected {format} (a string of decimal digits), got {}",
                describe(value)
            ));
        }
        return;
    }
    let Some(text) = value.as_str() else {
        problems.push(type_problem(path, "string", value));
        return;
    };
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array) {
        if !allowed
            .iter()
            .any(|candidate| candidate.as_str() == Some(text))
        {
            let names: Vec<&str> = allowed.iter().filter_map(Value::as_str).collect();
            problems.push(format!(
                "{path}: {text:?} is not a {label} enum value (allowed: {})",
                names.join(", ")
            ));
        }
        return;
    }
    let (valid, example) = match format {
        "google-duration" => (is_duration(text), "\"3600s\" or \"1.5s\""),
        "google-datetime" | "date-time" => (is_rfc3339(text), "\"2024-01-15T10:00:00Z\""),
        "date" => (is_date(text), "\"2024-01-15\""),
        "byte" => (is_base64(text), "base64 text"),
        _ => (true, ""),
    };
    if !valid {
        problems.push(format!(
            "{path}: {text:?} is not a valid {format} (expected {example})"
        ));
    }
}

fn check_integer(schema: &Value, path: &str, value: &Value, problems: &mut Vec<String>) {
    let format = str_field(schema, "format").unwrap_or("int32");
    let (min, max) = match format {
        "uint32" => (0.0, f64::from(u32::MAX)),
        "int64" => (i64::MIN as f64, i64::MAX as f64),
        "uint64" => (0.0, u64::MAX as f64),
        _ => (f64::from(i32::MIN), f64::from(i32::MAX)),
    };
    let Value::Number(number) = value else {
        problems.push(format!(
            "{path}: expected {format} as a JSON number, got {}",
            describe(value)
        ));
        return;
    };
    let in_range = if let Some(int) = number.as_i64() {
        (int as f64) >= min && (int as f64) <= max
    } else if let Some(uint) = number.as_u64() {
        (uint as f64) <= max
    } else {
        number
            .as_f64()
            .is_some_and(|float| float.fract() == 0.0 && float >= min && float <= max)
    };
    if !in_range {
        problems.push(format!("{path}: {number} is not a valid {format}"));
    }
}

fn all_digits(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit())
}

fn number_in(text: &str, low: u32, high: u32) -> bool {
    all_digits(text) && text.parse::<u32>().is_ok_and(|n| (low..=high).contains(&n))
}

fn is_duration(text: &str) -> bool {
    let Some(body) = text.strip_suffix('s') else {
        return false;
    };
    let body = body.strip_prefix('-').unwrap_or(body);
    match body.split_once('.') {
        Some((seconds, nanos)) => all_digits(seconds) && all_digits(nanos) && nanos.len() <= 9,
        None => all_digits(body),
    }
}

fn is_date(text: &str) -> bool {
    let bytes = text.as_bytes();
    text.len() == 10
        && text.is_ascii()
        && all_digits(&text[0..4])
        && bytes[4] == b'-'
        && number_in(&text[5..7], 1, 12)
        && bytes[7] == b'-'
        && number_in(&text[8..10], 1, 31)
}

fn is_rfc3339(text: &str) -> bool {
    let (Some(date), Some(sep), Some(time)) = (text.get(0..10), text.get(10..11), text.get(11..))
    else {
        return false;
    };
    if !is_date(date) || !matches!(sep, "T" | "t") {
        return false;
    }
    let (clock, zone) = if let Some(clock) = time.strip_suffix(['Z', 'z']) {
        (clock, None)
    } else if time.len() > 6 && time.is_char_boundary(time.len() - 6) {
        let (clock, zone) = time.split_at(time.len() - 6);
        (clock, Some(zone))
    } else {
        return false;
    };
    if let Some(zone) = zone {
        let sign_ok = zone.starts_with(['+', '-']);
        let hours = zone.get(1..3).unwrap_or_default();
        let minutes = zone.get(4..6).unwrap_or_default();
        if !sign_ok
            || zone.get(3..4) != Some(":")
            || !number_in(hours, 0, 23)
            || !number_in(minutes, 0, 59)
        {
            return false;
        }
    }
    let (hms, fraction) = match clock.split_once('.') {
        Some((hms, fraction)) => (hms, Some(fraction)),
        None => (clock, None),
    };
    let fields: Vec<&str> = hms.split(':').collect();
    fields.len() == 3
        && fields.iter().all(|field| field.len() == 2)
        && number_in(fields[0], 0, 23)
        && number_in(fields[1], 0, 59)
        && number_in(fields[2], 0, 60)
        && fraction.is_none_or(all_digits)
}

fn is_base64(text: &str) -> bool {
    let body = text.trim_end_matches('=');
    text.len() - body.len() <= 2
        && body
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'-' | b'_'))
}

/// A property name close to `key`: same letters ignoring case and '_',
/// or within edit distance 2.
fn suggest<'a>(key: &str, candidates: impl Iterator<Item = &'a String>) -> Option<&'a str> {
    let squash = |text: &str| -> String {
        text.chars()
            .filter(|ch| *ch != '_' && *ch != '-')
            .map(|ch| ch.to_ascii_lowercase())
            .collect()
    };
    let wanted = squash(key);
    let mut best: Option<(usize, &str)> = None;
    for candidate in candidates {
        let distance = if squash(candidate) == wanted {
            0
        } else {
            edit_distance(key, candidate)
        };
        if distance <= 2 && best.is_none_or(|(current, _)| distance < current) {
            best = Some((distance, candidate.as_str()));
        }
    }
    best.map(|(_, name)| name)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut current = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != cb);
            current[j + 1] = substitution.min(previous[j + 1] + 1).min(current[j] + 1);
        }
        previous = current;
    }
    previous[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn container() -> Discovery {
        Discovery::load("container.v1.json")
    }
    fn file() -> Discovery {
        Discovery::load("file.v1.json")
    }
    fn storage() -> Discovery {
        Discovery::load("storage.v1.json")
    }

    fn method_id(doc: &Discovery, http_method: &str, path: &str) -> String {
        doc.method(http_method, path)
            .map(|method| method.id)
            .unwrap_or_else(|| panic!("no {} method matches {http_method} {path}", doc.name()))
    }

    const CLUSTER: &str = "v1/projects/p/locations/us-central1/clusters/c";

    #[test]
    fn loads_documents_and_names() {
        assert_eq!(container().name(), "container");
        assert_eq!(file().name(), "file");
        assert_eq!(storage().name(), "storage");
        assert_eq!(Discovery::load("tpu.v2.json").name(), "tpu");
        assert!(container().has_schema("Cluster"));
        assert!(container().has_schema("CreateClusterRequest"));
        assert!(!container().has_schema("Bucket"));
        assert!(storage().has_schema("Bucket"));
    }

    #[test]
    fn missing_document_is_a_clear_error() {
        let err = Discovery::from_path(&reference_dir().join("nope.v9.json"))
            .expect_err("loading a missing document must fail");
        assert!(err.contains("nope.v9.json"), "{err}");
        assert!(err.contains("cannot read discovery document"), "{err}");
    }

    #[test]
    fn container_methods_match() {
        let doc = container();
        let cases = [
            (
                "POST",
                "v1/projects/p/locations/us-central1/clusters",
                "container.projects.locations.clusters.create",
            ),
            ("GET", CLUSTER, "container.projects.locations.clusters.get"),
            (
                "DELETE",
                CLUSTER,
                "container.projects.locations.clusters.delete",
            ),
            (
                "PUT",
                CLUSTER,
                "container.projects.locations.clusters.update",
            ),
            (
                "POST",
                "v1/projects/p/locations/us-central1/clusters/c:setResourceLabels",
                "container.projects.locations.clusters.setResourceLabels",
            ),
            (
                "POST",
                "v1/projects/p/locations/us-central1/clusters/c/nodePools/np:setAutoscaling",
                "container.projects.locations.clusters.nodePools.setAutoscaling",
            ),
            (
                "POST",
                "v1/projects/p/locations/us-central1/clusters/c/nodePools/np:setSize",
                "container.projects.locations.clusters.nodePools.setSize",
            ),
            (
                "POST",
                "v1/projects/p/locations/us-central1/clusters/c/nodePools",
                "container.projects.locations.clusters.nodePools.create",
            ),
            (
                "GET",
                "v1/projects/p/locations/us-central1/operations/operation-123-abc",
                "container.projects.locations.operations.get",
            ),
            (
                "GET",
                "v1/projects/p/zones/us-central1-a/clusters/c",
                "container.projects.zones.clusters.get",
            ),
            (
                "POST",
                "v1/projects/p/zones/us-central1-a/clusters/c/nodePools/np/setSize",
                "container.projects.zones.clusters.nodePools.setSize",
            ),
            (
                "GET",
                "v1/projects/p/zones/us-central1-a/operations/op-1",
                "container.projects.zones.operations.get",
            ),
            (
                "GET",
                "v1/projects/p/zones/us-central1-a/clusters/c:fetchClusterUpgradeInfo",
                "container.projects.zones.clusters.fetchClusterUpgradeInfo",
            ),
        ];
        for (http_method, path, id) in cases {
            assert_eq!(
                method_id(&doc, http_method, path),
                id,
                "{http_method} {path}"
            );
        }
    }

    #[test]
    fn container_method_details() {
        let doc = container();
        let create = doc
            .method(
                "post",
                "/v1/projects/p/locations/us-central1/clusters?alt=json",
            )
            .expect("create matches with a leading slash, lower-case method and query");
        assert_eq!(create.id, "container.projects.locations.clusters.create");
        assert_eq!(create.http_method, "POST");
        assert_eq!(create.request.as_deref(), Some("CreateClusterRequest"));
        assert_eq!(create.response.as_deref(), Some("Operation"));
        assert_eq!(
            create.template,
            "v1/projects/{projectsId}/locations/{locationsId}/clusters"
        );
        assert_eq!(
            create.params.get("projectsId").map(String::as_str),
            Some("p")
        );
        assert_eq!(
            create.params.get("locationsId").map(String::as_str),
            Some("us-central1")
        );

        let set_size = doc
            .method(
                "POST",
                &format!("https://container.googleapis.com/{CLUSTER}/nodePools/np:setSize"),
            )
            .expect("setSize matches with a full URL");
        assert_eq!(
            set_size.params.get("nodePoolsId").map(String::as_str),
            Some("np")
        );
        assert_eq!(set_size.request.as_deref(), Some("SetNodePoolSizeRequest"));

        let get = doc.method("GET", CLUSTER).expect("get matches");
        assert_eq!(get.request, None);
        assert_eq!(get.response.as_deref(), Some("Cluster"));
    }

    #[test]
    fn container_non_matches() {
        let doc = container();
        // Wrong verb, unknown custom method, wrong segment count, empty segment.
        assert_eq!(doc.method("PATCH", CLUSTER), None);
        assert_eq!(doc.method("GET", &format!("{CLUSTER}:setSize")), None);
        assert_eq!(doc.method("POST", &format!("{CLUSTER}:noSuchVerb")), None);
        assert_eq!(
            doc.method(
                "GET",
                "v1/projects/p/locations/us-central1/clusters/c/extra/x/y"
            ),
            None
        );
        assert_eq!(
            doc.method("GET", "v1/projects//locations/us-central1/clusters/c"),
            None
        );
        assert_eq!(doc.method("GET", "storage/v1/b/x"), None);
    }

    #[test]
    fn file_methods_match() {
        let doc = file();
        let cases = [
            (
                "POST",
                "v1/projects/p/locations/us-central1-a/instances",
                "file.projects.locations.instances.create",
            ),
            (
                "GET",
                "v1/projects/p/locations/us-central1-a/instances/fs",
                "file.projects.locations.instances.get",
            ),
            (
                "DELETE",
                "v1/projects/p/locations/us-central1-a/instances/fs",
                "file.projects.locations.instances.delete",
            ),
            (
                "PATCH",
                "v1/projects/p/locations/us-central1-a/instances/fs",
                "file.projects.locations.instances.patch",
            ),
            (
                "GET",
                "v1/projects/p/locations/us-central1-a/operations/operation-1700000000-abc",
                "file.projects.locations.operations.get",
            ),
            (
                "POST",
                "v1/projects/p/locations/us-central1-a/operations/op:cancel",
                "file.projects.locations.operations.cancel",
            ),
        ];
        for (http_method, path, id) in cases {
            assert_eq!(
                method_id(&doc, http_method, path),
                id,
                "{http_method} {path}"
            );
        }
        let create = doc
            .method(
                "POST",
                "v1/projects/p/locations/us-central1-a/instances?instanceId=fs",
            )
            .expect("create matches with a query string");
        assert_eq!(create.request.as_deref(), Some("Instance"));
        assert_eq!(create.response.as_deref(), Some("Operation"));
    }

    #[test]
    fn storage_methods_match() {
        let doc = storage();
        let cases = [
            ("POST", "storage/v1/b", "storage.buckets.insert"),
            ("GET", "storage/v1/b", "storage.buckets.list"),
            ("GET", "storage/v1/b/my-bucket", "storage.buckets.get"),
            ("PATCH", "storage/v1/b/my-bucket", "storage.buckets.patch"),
            ("DELETE", "storage/v1/b/my-bucket", "storage.buckets.delete"),
            ("GET", "storage/v1/b/my-bucket/o", "storage.objects.list"),
            (
                "GET",
                "storage/v1/b/my-bucket/o/data%2Ftrain.tar",
                "storage.objects.get",
            ),
            (
                "DELETE",
                "storage/v1/b/my-bucket/o/data%2Ftrain.tar",
                "storage.objects.delete",
            ),
            (
                "POST",
                "storage/v1/b/my-bucket/o/bulkRestore",
                "storage.objects.bulkRestore",
            ),
            (
                "GET",
                "storage/v1/b/my-bucket/o/bulkRestore",
                "storage.objects.get",
            ),
            ("POST", "upload/storage/v1/b/x/o", "storage.objects.insert"),
            (
                "POST",
                "/upload/storage/v1/b/x/o?uploadType=media&name=a",
                "storage.objects.insert",
            ),
            (
                "POST",
                "resumable/upload/storage/v1/b/x/o",
                "storage.objects.insert",
            ),
            ("POST", "storage/v1/b/x/o", "storage.objects.insert"),
        ];
        for (http_method, path, id) in cases {
            assert_eq!(
                method_id(&doc, http_method, path),
                id,
                "{http_method} {path}"
            );
        }
        let delete = doc
            .method("DELETE", "storage/v1/b/my-bucket/o/data%2Ftrain.tar")
            .expect("object delete matches");
        assert_eq!(delete.template, "storage/v1/b/{bucket}/o/{object}");
        assert_eq!(
            delete.params.get("bucket").map(String::as_str),
            Some("my-bucket")
        );
        assert_eq!(
            delete.params.get("object").map(String::as_str),
            Some("data/train.tar")
        );
        assert_eq!(delete.response, None);
        let upload = doc
            .method("POST", "upload/storage/v1/b/x/o")
            .expect("upload matches");
        assert_eq!(upload.template, "upload/storage/v1/b/{bucket}/o");
        assert_eq!(upload.request.as_deref(), Some("Object"));
        // Object names must be percent-encoded; a raw '/' adds segments.
        assert_eq!(
            doc.method("DELETE", "storage/v1/b/my-bucket/o/data/train.tar"),
            None
        );
        // The service path is part of the root-relative path.
        assert_eq!(doc.method("GET", "b/my-bucket"), None);
    }

    fn valid_cluster() -> Value {
        json!({
            "name": "train",
            "description": "batch training",
            "initialClusterVersion": "1.30",
            "location": "us-central1",
            "locations": ["us-central1-a", "us-central1-b"],
            "network": "default",
            "resourceLabels": {"team": "ml", "cost-center": "research"},
            "autopilot": {"enabled": false},
            "releaseChannel": {"channel": "REGULAR"},
            "ipAllocationPolicy": {"useIpAliases": true},
            "nodePools": [
                {
                    "name": "gpu",
                    "initialNodeCount": 1,
                    "locations": ["us-central1-a"],
                    "config": {
                        "machineType": "a2-highgpu-1g",
                        "diskSizeGb": 200,
                        "diskType": "pd-ssd",
                        "imageType": "COS_CONTAINERD",
                        "spot": true,
                        "oauthScopes": ["https://www.googleapis.com/auth/cloud-platform"],
                        "labels": {"role": "train"},
                        "metadata": {"disable-legacy-endpoints": "true"},
                        "maxRunDuration": "86400s",
                        "accelerators": [
                            {
                                "acceleratorCount": "1",
                                "acceleratorType": "nvidia-tesla-a100",
                                "gpuDriverInstallationConfig": {"gpuDriverVersion": "LATEST"},
                                "gpuSharingConfig": {"gpuSharingStrategy": "TIME_SHARING", "maxSharedClientsPerGpu": 2}
                            }
                        ],
                        "taints": [
                            {"key": "nvidia.com/gpu", "value": "present", "effect": "NO_SCHEDULE"}
                        ]
                    },
                    "autoscaling": {"enabled": true, "minNodeCount": 0, "maxNodeCount": 4, "locationPolicy": "ANY"},
                    "management": {"autoRepair": true, "autoUpgrade": true}
                },
                {
                    "name": "cpu",
                    "initialNodeCount": 2,
                    "config": {"machineType": "e2-standard-4", "preemptible": false}
                }
            ],
            "status": "RUNNING",
            "createTime": "2024-05-01T12:00:00Z",
            "currentNodeCount": 3,
            "endpoint": "10.0.0.2",
            "selfLink": "https://container.googleapis.com/v1/projects/p/locations/us-central1/clusters/train"
        })
    }

    #[test]
    fn accepts_valid_cluster_and_create_request() {
        let doc = container();
        assert_eq!(doc.check("Cluster", &valid_cluster()), Vec::<String>::new());
        let request =
            json!({"parent": "projects/p/locations/us-central1", "cluster": valid_cluster()});
        assert_eq!(
            doc.check("CreateClusterRequest", &request),
            Vec::<String>::new()
        );
        let set_size =
            json!({"nodeCount": 3, "name": "projects/p/locations/l/clusters/c/nodePools/np"});
        assert_eq!(
            doc.check("SetNodePoolSizeRequest", &set_size),
            Vec::<String>::new()
        );
    }

    #[test]
    fn accepts_valid_operation() {
        let operation = json!({
            "name": "operation-1700000000000-abc",
            "zone": "us-central1",
            "operationType": "CREATE_CLUSTER",
            "status": "DONE",
            "selfLink": "https://container.googleapis.com/v1/projects/1/locations/us-central1/operations/op",
            "targetLink": "https://container.googleapis.com/v1/projects/1/locations/us-central1/clusters/c",
            "startTime": "2024-05-01T12:00:00.123456789Z",
            "endTime": "2024-05-01T12:05:00+00:00",
            "error": {"code": 3, "message": "bad", "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "X"}]}
        });
        assert_eq!(
            container().check("Operation", &operation),
            Vec::<String>::new()
        );

        let file_operation = json!({
            "name": "projects/p/locations/l/operations/op",
            "done": true,
            "metadata": {
                "@type": "type.googleapis.com/google.cloud.common.OperationMetadata",
                "createTime": "2024-05-01T12:00:00Z",
                "verb": "create"
            },
            "response": {"@type": "type.googleapis.com/google.cloud.filestore.v1.Instance", "name": "x"}
        });
        assert_eq!(
            file().check("Operation", &file_operation),
            Vec::<String>::new()
        );
    }

    #[test]
    fn accepts_valid_filestore_instance() {
        let instance = json!({
            "tier": "BASIC_HDD",
            "description": "datasets",
            "fileShares": [{
                "name": "vol1",
                "capacityGb": "1024",
                "nfsExportOptions": [{"ipRanges": ["10.0.0.0/8"], "accessMode": "READ_WRITE", "squashMode": "NO_ROOT_SQUASH"}]
            }],
            "networks": [{"network": "default", "modes": ["MODE_IPV4"], "connectMode": "DIRECT_PEERING", "ipAddresses": ["10.1.2.3"]}],
            "labels": {"team": "ml"},
            "state": "READY",
            "createTime": "2024-05-01T12:00:00.123Z",
            "name": "projects/p/locations/us-central1-a/instances/fs"
        });
        assert_eq!(file().check("Instance", &instance), Vec::<String>::new());
    }

    fn valid_bucket() -> Value {
        json!({
            "kind": "storage#bucket",
            "id": "my-bucket",
            "name": "my-bucket",
            "selfLink": "https://www.googleapis.com/storage/v1/b/my-bucket",
            "projectNumber": "123456789012",
            "metageneration": "1",
            "location": "US-CENTRAL1",
            "locationType": "region",
            "storageClass": "STANDARD",
            "etag": "CAE=",
            "timeCreated": "2024-05-01T12:00:00.000Z",
            "updated": "2024-05-01T12:00:00.000Z",
            "labels": {"team": "ml"},
            "versioning": {"enabled": true},
            "iamConfiguration": {
                "uniformBucketLevelAccess": {"enabled": true},
                "publicAccessPrevention": "enforced"
            },
            "lifecycle": {"rule": [
                {"action": {"type": "Delete"}, "condition": {"age": 30, "matchesStorageClass": ["STANDARD"]}},
                {"action": {"type": "SetStorageClass", "storageClass": "NEARLINE"}, "condition": {"createdBefore": "2024-01-15"}}
            ]},
            "softDeletePolicy": {"retentionDurationSeconds": "604800"}
        })
    }

    #[test]
    fn accepts_valid_bucket_and_object() {
        let doc = storage();
        assert_eq!(doc.check("Bucket", &valid_bucket()), Vec::<String>::new());
        // PATCH semantics: nulls clear fields and map entries.
        let patch =
            json!({"labels": {"team": null}, "versioning": null, "lifecycle": {"rule": []}});
        assert_eq!(doc.check("Bucket", &patch), Vec::<String>::new());
        let object = json!({
            "name": "data/train.tar", "bucket": "my-bucket", "size": "1048576", "generation": "1700000000000000",
            "contentType": "application/x-tar", "metadata": {"source": "loader", "stale": null},
            "md5Hash": "1B2M2Y8AsgTpgAmY7PhCfg==", "crc32c": "AAAAAA=="
        });
        assert_eq!(doc.check("Object", &object), Vec::<String>::new());
    }

    #[test]
    fn rejects_unknown_field_deep_inside() {
        let mut request = json!({"cluster": valid_cluster()});
        request["cluster"]["nodePools"][0]["config"]["acceleratorz"] = json!([]);
        let problems = container().check("CreateClusterRequest", &request);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].starts_with("CreateClusterRequest.cluster.nodePools[0].config.acceleratorz: not a field of NodeConfig"),
            "{problems:?}"
        );
        assert!(
            problems[0].contains("did you mean \"accelerators\""),
            "{problems:?}"
        );
    }

    #[test]
    fn rejects_snake_case_and_inline_unknown_fields() {
        let cluster =
            json!({"nodePools": [{"config": {"accelerators": [{"accelerator_type": "x"}]}}]});
        let problems = container().check("Cluster", &cluster);
        assert_eq!(
            problems,
            vec![
                "Cluster.nodePools[0].config.accelerators[0].accelerator_type: not a field of AcceleratorConfig (did you mean \"acceleratorType\"?)"
                    .to_string()
            ]
        );
        let bucket = json!({"versioning": {"enable": true}, "labels": {"a.b/c": "d"}});
        assert_eq!(
            storage().check("Bucket", &bucket),
            vec!["Bucket.versioning.enable: not a field of Bucket.versioning (did you mean \"enabled\"?)".to_string()]
        );
    }

    #[test]
    fn rejects_wrong_enum() {
        let mut cluster = valid_cluster();
        cluster["nodePools"][0]["config"]["taints"][0]["effect"] = json!("NoSchedule");
        let problems = container().check("Cluster", &cluster);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].starts_with("Cluster.nodePools[0].config.taints[0].effect: \"NoSchedule\" is not a NodeTaint.effect enum value"),
            "{problems:?}"
        );
        assert!(problems[0].contains("NO_SCHEDULE"), "{problems:?}");
        let instance = json!({"networks": [{"modes": ["IPV4"]}]});
        let problems = file().check("Instance", &instance);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].starts_with(
                "Instance.networks[0].modes[0]: \"IPV4\" is not a NetworkConfig.modes enum value"
            ),
            "{problems:?}"
        );
    }

    #[test]
    fn rejects_wrong_types() {
        let mut bucket = valid_bucket();
        bucket["versioning"]["enabled"] = json!("true");
        assert_eq!(
            storage().check("Bucket", &bucket),
            vec!["Bucket.versioning.enabled: expected boolean, got string \"true\"".to_string()]
        );
        let cluster = json!({
            "autopilot": {"enabled": "yes"},
            "nodePools": {"name": "x"},
            "locations": "us-central1-a",
            "initialNodeCount": "3",
            "resourceLabels": {"team": 1},
            "name": 7
        });
        let problems = container().check("Cluster", &cluster);
        let expected = [
            "Cluster.autopilot.enabled: expected boolean, got string \"yes\"",
            "Cluster.nodePools: expected array, got object {\"name\":\"x\"}",
            "Cluster.locations: expected array, got string \"us-central1-a\"",
            "Cluster.initialNodeCount: expected int32 as a JSON number, got string \"3\"",
            "Cluster.resourceLabels.team: expected string, got number 1",
            "Cluster.name: expected string, got number 7",
        ];
        assert_eq!(problems, expected.map(String::from).to_vec());
    }

    #[test]
    fn int64_fields_take_digit_strings_or_numbers() {
        let doc = container();
        let accel = |count: Value| json!({"accelerators": [{"acceleratorCount": count}]});
        assert_eq!(
            doc.check("NodeConfig", &accel(json!("2"))),
            Vec::<String>::new()
        );
        assert_eq!(
            doc.check("NodeConfig", &accel(json!(2))),
            Vec::<String>::new()
        );
        assert_eq!(
            doc.check("NodeConfig", &accel(json!("-2"))),
            Vec::<String>::new()
        );
        for bad in [
            json!("two"),
            json!("2.0"),
            json!(""),
            json!(2.5),
            json!(true),
            json!("99999999999999999999"),
        ] {
            let problems = doc.check("NodeConfig", &accel(bad.clone()));
            assert_eq!(problems.len(), 1, "{bad}: {problems:?}");
            assert!(
                problems[0].starts_with("NodeConfig.accelerators[0].acceleratorCount: expected int64 (a string of decimal digits)"),
                "{problems:?}"
            );
        }
        let problems = storage().check("Bucket", &json!({"projectNumber": "-1"}));
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("expected uint64"), "{problems:?}");
    }

    #[test]
    fn int32_ranges_and_string_formats() {
        let doc = container();
        let problems = doc.check(
            "NodePool",
            &json!({
                "initialNodeCount": 3_000_000_000_u64,
                "autoscaling": {"minNodeCount": 1.5, "maxNodeCount": 4.0},
                "config": {"maxRunDuration": "3600", "consolidationDelay": "1.5s"}
            }),
        );
        assert_eq!(
            problems,
            vec![
                "NodePool.initialNodeCount: 3000000000 is not a valid int32".to_string(),
                "NodePool.autoscaling.minNodeCount: 1.5 is not a valid int32".to_string(),
                "NodePool.config.maxRunDuration: \"3600\" is not a valid google-duration (expected \"3600s\" or \"1.5s\")".to_string(),
            ]
        );
        let problems = file().check("Instance", &json!({"createTime": "2024-05-01 12:00:00"}));
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].starts_with(
                "Instance.createTime: \"2024-05-01 12:00:00\" is not a valid google-datetime"
            ),
            "{problems:?}"
        );
        let problems = storage().check(
            "Bucket",
            &json!({"lifecycle": {"rule": [{"condition": {"createdBefore": "2024-13-01"}}]}}),
        );
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].starts_with("Bucket.lifecycle.rule[0].condition.createdBefore:"),
            "{problems:?}"
        );
    }

    #[test]
    fn nulls_and_unknown_schemas() {
        let doc = container();
        assert_eq!(
            doc.check("Cluster", &json!({"autopilot": null, "name": null})),
            Vec::<String>::new()
        );
        assert_eq!(
            doc.check("Cluster", &json!({"locations": ["a", null]})),
            vec!["Cluster.locations[1]: null is not allowed as an array element".to_string()]
        );
        assert_eq!(
            doc.check("Clustr", &json!({})),
            vec!["Clustr: no such schema in the container discovery document".to_string()]
        );
        assert_eq!(
            doc.check("Empty", &json!({"x": 1})),
            vec!["Empty.x: not a field of Empty".to_string()]
        );
        assert_eq!(
            doc.check("Cluster", &json!([])),
            vec!["Cluster: expected object, got array []".to_string()]
        );
    }

    #[test]
    fn fields_used_summarises_paths_and_enums() {
        let cluster = json!({
            "name": "c",
            "autopilot": {"enabled": true},
            "resourceLabels": {"team": "ml"},
            "locations": ["us-central1-a"],
            "releaseChannel": {"channel": "REGULAR"},
            "nodePools": [
                {"config": {
                    "accelerators": [{"acceleratorType": "nvidia-l4", "acceleratorCount": "1"}],
                    "taints": [{"key": "k", "effect": "NO_SCHEDULE"}, {"key": "k2", "effect": "NO_EXECUTE"}]
                }},
                {"autoscaling": {}, "config": {"oauthScopes": []}}
            ],
            "bogus": {"x": 1}
        });
        let used: Vec<String> = container()
            .fields_used("Cluster", &cluster)
            .into_iter()
            .collect();
        let expected = [
            "Cluster.autopilot.enabled",
            "Cluster.locations",
            "Cluster.name",
            "Cluster.nodePools[].autoscaling",
            "Cluster.nodePools[].config.accelerators[].acceleratorCount",
            "Cluster.nodePools[].config.accelerators[].acceleratorType",
            "Cluster.nodePools[].config.oauthScopes",
            "Cluster.nodePools[].config.taints[].effect",
            "Cluster.nodePools[].config.taints[].key",
            "Cluster.releaseChannel.channel",
            "Cluster.resourceLabels",
            "NodeTaint.effect=NO_EXECUTE",
            "NodeTaint.effect=NO_SCHEDULE",
            "ReleaseChannel.channel=REGULAR",
        ];
        assert_eq!(used, expected.map(String::from).to_vec());

        let instance = json!({"tier": "BASIC_HDD", "networks": [{"modes": ["MODE_IPV4"]}]});
        let used: Vec<String> = file()
            .fields_used("Instance", &instance)
            .into_iter()
            .collect();
        assert_eq!(
            used,
            [
                "Instance.networks[].modes",
                "Instance.tier",
                "Instance.tier=BASIC_HDD",
                "NetworkConfig.modes=MODE_IPV4"
            ]
            .map(String::from)
            .to_vec()
        );

        let bucket = json!({"versioning": {"enabled": true}});
        let used: Vec<String> = storage()
            .fields_used("Bucket", &bucket)
            .into_iter()
            .collect();
        assert_eq!(used, vec!["Bucket.versioning.enabled".to_string()]);
        assert!(storage().fields_used("NoSuchSchema", &bucket).is_empty());
    }

    #[test]
    fn helpers() {
        assert!(is_date("2024-02-29") && !is_date("2024\u{e9}1-01") && !is_date("2024-00-01"));
        assert_eq!(percent_decode("a%2Fb%20c%zz%"), "a/b c%zz%");
        assert!(
            is_duration("0s")
                && is_duration("-1.000000001s")
                && !is_duration("1.0000000001s")
                && !is_duration("s")
        );
        assert!(
            is_rfc3339("2024-02-29T23:59:60.5-08:00")
                && !is_rfc3339("2024-02-29T24:00:00Z")
                && !is_rfc3339("2024-02-29")
        );
        assert!(is_base64("CAE=") && is_base64("_-ab") && !is_base64("a=b") && !is_base64("a==="));
        assert_eq!(key_path("X", "a.b/c"), "X[\"a.b/c\"]");
        assert_eq!(
            normalize_path("https://storage.googleapis.com/storage/v1/b?x=1"),
            "storage/v1/b"
        );
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }
}
