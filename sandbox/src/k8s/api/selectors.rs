//! Label and field selectors: parsing them as the API server does (with its error
//! messages) and matching stored objects.

use super::*;

#[derive(Debug, Clone, PartialEq)]
pub(super) enum LabelOp {
    Eq(String),
    NotEq(String),
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    NotExists,
}

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LabelReq {
    key: String,
    op: LabelOp,
}

pub(super) fn split_top_level(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out.into_iter()
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect()
}

pub(super) fn valid_label_key(key: &str) -> bool {
    let name = key.rsplit('/').next().unwrap_or("");
    !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && key.matches('/').count() <= 1
}

pub(super) fn valid_label_value(v: &str) -> bool {
    v.len() <= 63
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Parses `a=b,c!=d,e in (x,y),f notin (z),g,!h`.
pub(crate) fn parse_label_selector(s: &str) -> Result<Vec<LabelReq>, String> {
    let mut out = Vec::new();
    for term in split_top_level(s) {
        let bad = || format!("unable to parse requirement: {term:?}: invalid label selector");
        let req = if let Some(key) = term.strip_prefix('!') {
            LabelReq {
                key: key.trim().to_string(),
                op: LabelOp::NotExists,
            }
        } else if let Some(open) = term.find('(') {
            let close = term.rfind(')').filter(|c| *c > open).ok_or_else(bad)?;
            let head: Vec<&str> = term[..open].split_whitespace().collect();
            let values: Vec<String> = term[open + 1..close]
                .split(',')
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
                .collect();
            match head.as_slice() {
                [key, "in"] => LabelReq {
                    key: key.to_string(),
                    op: LabelOp::In(values),
                },
                [key, "notin"] => LabelReq {
                    key: key.to_string(),
                    op: LabelOp::NotIn(values),
                },
                _ => return Err(bad()),
            }
        } else if let Some((k, v)) = term.split_once("!=") {
            LabelReq {
                key: k.trim().to_string(),
                op: LabelOp::NotEq(v.trim().to_string()),
            }
        } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
            LabelReq {
                key: k.trim().to_string(),
                op: LabelOp::Eq(v.trim().to_string()),
            }
        } else {
            LabelReq {
                key: term.to_string(),
                op: LabelOp::Exists,
            }
        };
        let values_ok = match &req.op {
            LabelOp::Eq(v) | LabelOp::NotEq(v) => valid_label_value(v),
            LabelOp::In(vs) | LabelOp::NotIn(vs) => vs.iter().all(|v| valid_label_value(v)),
            _ => true,
        };
        if !valid_label_key(&req.key) || !values_ok {
            return Err(bad());
        }
        out.push(req);
    }
    Ok(out)
}

pub(super) fn labels_match(reqs: &[LabelReq], obj: &Value) -> bool {
    let labels = &obj["metadata"]["labels"];
    reqs.iter().all(|r| {
        let value = labels.get(&r.key).and_then(Value::as_str);
        match &r.op {
            LabelOp::Eq(v) => value == Some(v.as_str()),
            LabelOp::NotEq(v) => value != Some(v.as_str()),
            LabelOp::In(vs) => value.is_some_and(|x| vs.iter().any(|v| v == x)),
            LabelOp::NotIn(vs) => value.is_none_or(|x| !vs.iter().any(|v| v == x)),
            LabelOp::Exists => value.is_some(),
            LabelOp::NotExists => value.is_none(),
        }
    })
}

/// One requirement of a field selector: `field=value` or `field!=value`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FieldReq {
    field: String,
    equal: bool,
    value: String,
}

/// The fields each type can be selected by, besides `metadata.name` and
/// `metadata.namespace`.
pub(super) fn selectable_fields(rt: &ResourceType) -> &'static [&'static str] {
    match (rt.storage_group.as_str(), rt.plural.as_str()) {
        ("", "pods") => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
        ("", "events") => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        ("", "nodes") => &["spec.unschedulable"],
        ("", "secrets") => &["type"],
        ("", "namespaces") => &["status.phase"],
        ("batch", "jobs") => &["status.successful"],
        _ => &[],
    }
}

pub(crate) fn parse_field_selector(s: &str, rt: &ResourceType) -> Result<Vec<FieldReq>, String> {
    let mut out = Vec::new();
    for term in s.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        let (field, equal, value) = if let Some((f, v)) = term.split_once("!=") {
            (f, false, v)
        } else if let Some((f, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
            (f, true, v)
        } else {
            return Err(format!(
                "invalid selector: '{term}'; can't understand '{term}'"
            ));
        };
        let field = field.trim();
        // events.k8s.io selects by `regarding.*`, stored as core `involvedObject.*`.
        let field = match field.strip_prefix("regarding.") {
            Some(rest) if rt.plural == "events" => format!("involvedObject.{rest}"),
            _ => field.to_string(),
        };
        if field != "metadata.name"
            && field != "metadata.namespace"
            && !selectable_fields(rt).contains(&field.as_str())
        {
            return Err(format!("field label not supported: {field}"));
        }
        out.push(FieldReq {
            field,
            equal,
            value: value.trim().to_string(),
        });
    }
    Ok(out)
}

pub(super) fn field_string(obj: &Value, field: &str) -> String {
    let mut v = obj;
    for part in field.split('.') {
        match v.get(part) {
            Some(next) => v = next,
            None => return String::new(),
        }
    }
    match v {
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::Object(m) if field == "source" => m
            .get("component")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
        _ => String::new(),
    }
}

pub(super) fn fields_match(reqs: &[FieldReq], stored: &Value) -> bool {
    reqs.iter().all(|r| {
        let mut got = field_string(stored, &r.field);
        if got.is_empty() && r.field == "spec.unschedulable" {
            got = "false".into();
        }
        (got == r.value) == r.equal
    })
}

/// The selectors of a list or watch request.
#[derive(Debug, Clone, Default)]
pub(crate) struct Selectors {
    labels: Vec<LabelReq>,
    fields: Vec<FieldReq>,
}

impl Selectors {
    pub(super) fn parse(req: &KubeRequest, rt: &ResourceType) -> Result<Selectors, StatusError> {
        let labels = match req.param("labelSelector") {
            Some(s) => parse_label_selector(s).map_err(StatusError::bad_request)?,
            None => Vec::new(),
        };
        let fields = match req.param("fieldSelector") {
            Some(s) => parse_field_selector(s, rt).map_err(StatusError::bad_request)?,
            None => Vec::new(),
        };
        Ok(Selectors { labels, fields })
    }

    pub(super) fn matches(&self, stored: &Value) -> bool {
        labels_match(&self.labels, stored) && fields_match(&self.fields, stored)
    }
}
