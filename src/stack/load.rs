//! Phase one of loading: read the stack's files, parse TOML keeping spans, and sort the
//! top-level tables into sections. No schema knowledge here.

use std::path::{Path, PathBuf};

use serde_json::Value;
use toml_span::value::{Table, ValueInner};

use super::expr::{parse_template, Node, NodeKind, Part};
use super::source::{Diagnostic, FileId, SourceFile, Sources, Span, StackErrors};
use super::LoadOptions;

/// Top-level tables with a meaning of their own; every other table is a resource kind.
pub const RESERVED: [&str; 4] = ["stack", "providers", "variables", "outputs"];

/// An entry of a section: its name, the span of the name, and its value.
pub type Entry = (String, Span, Node);

/// A resource as written: kind, name, spans, body.
pub struct RawResource {
    pub kind: String,
    pub kind_span: Span,
    pub name: String,
    pub name_span: Span,
    pub body: Node,
}

/// Every file parsed, not yet validated.
pub struct RawStack {
    pub dir: PathBuf,
    pub sources: Sources,
    /// The `[stack]` table and the span of its key, if any file has one.
    pub stack: Option<(Span, Node)>,
    pub providers: Vec<Entry>,
    pub variables: Vec<Entry>,
    pub outputs: Vec<Entry>,
    pub resources: Vec<RawResource>,
}

/// Reads the stack's files and sorts their contents into sections.
///
/// Fails when no file can be read or any file is not valid TOML.
pub fn read(opts: &LoadOptions<'_>) -> Result<RawStack, StackErrors> {
    let (dir, paths) = stack_files(opts.path)?;
    let mut sources = Sources::default();
    for path in &paths {
        match std::fs::read_to_string(path) {
            Ok(text) => sources.files.push(SourceFile {
                path: path.clone(),
                text: text.into(),
            }),
            Err(e) => {
                return Err(StackErrors {
                    sources,
                    diagnostics: vec![Diagnostic::nowhere(format!("read {}: {e}", path.display()))],
                })
            }
        }
    }
    let mut raw = RawStack {
        dir,
        sources: Sources::default(),
        stack: None,
        providers: Vec::new(),
        variables: Vec::new(),
        outputs: Vec::new(),
        resources: Vec::new(),
    };
    let mut diags = Vec::new();
    for (file, source) in sources.files.iter().enumerate() {
        let text = source.text.clone();
        let parsed = match toml_span::parse(&text) {
            Ok(v) => v,
            Err(e) => {
                diags.push(Diagnostic::at(
                    Span::new(file, e.span.start, e.span.end.max(e.span.start + 1)),
                    format!("invalid TOML: {e}"),
                    "here",
                ));
                continue;
            }
        };
        let ValueInner::Table(top) = parsed.as_ref() else {
            continue;
        };
        for (key, value) in sorted(top) {
            let key_span = Span::new(file, key.span.start, key.span.end);
            let node = to_node(value, file, &text, &mut diags);
            let name = key.name.to_string();
            match name.as_str() {
                "stack" => {
                    if let Some((first, _)) = &raw.stack {
                        diags.push(
                            Diagnostic::at(
                                key_span,
                                "[stack] is defined twice",
                                "second definition",
                            )
                            .help(format!(
                                "the first is at {}; keep one",
                                sources.locate(*first)
                            )),
                        );
                    } else {
                        raw.stack = Some((key_span, node));
                    }
                }
                "providers" | "variables" | "outputs" => {
                    let section = match name.as_str() {
                        "providers" => &mut raw.providers,
                        "variables" => &mut raw.variables,
                        _ => &mut raw.outputs,
                    };
                    match node.kind {
                        NodeKind::Table(entries) => section.extend(entries),
                        _ => diags.push(Diagnostic::at(
                            key_span,
                            format!("`{name}` must be a table"),
                            "not a table",
                        )),
                    }
                }
                _ => match node.kind {
                    NodeKind::Table(entries) => {
                        for (rname, rspan, body) in entries {
                            raw.resources.push(RawResource {
                                kind: name.clone(),
                                kind_span: key_span,
                                name: rname,
                                name_span: rspan,
                                body,
                            });
                        }
                    }
                    _ => diags.push(
                        Diagnostic::at(
                            key_span,
                            format!("`{name}` must be a table of resources"),
                            "not a table",
                        )
                        .help(format!("write resources as `[{name}.<name>]` tables")),
                    ),
                },
            }
        }
    }
    raw.sources = sources;
    if diags.is_empty() {
        Ok(raw)
    } else {
        Err(StackErrors {
            sources: raw.sources,
            diagnostics: diags,
        })
    }
}

/// The directory of the stack and its files, sorted by name.
fn stack_files(path: &Path) -> Result<(PathBuf, Vec<PathBuf>), StackErrors> {
    let fail = |msg: String| StackErrors {
        sources: Sources::default(),
        diagnostics: vec![Diagnostic::nowhere(msg)],
    };
    let meta =
        std::fs::metadata(path).map_err(|e| fail(format!("stack {}: {e}", path.display())))?;
    if meta.is_file() {
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        return Ok((dir, vec![path.to_path_buf()]));
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(|e| fail(format!("stack {}: {e}", path.display())))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml") && p.is_file())
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(fail(format!(
            "stack {}: no .toml files in this directory",
            path.display()
        )));
    }
    Ok((path.to_path_buf(), files))
}

/// Table entries in the order they were written (toml-span sorts by name).
fn sorted<'a, 'de>(
    t: &'a Table<'de>,
) -> Vec<(&'a toml_span::value::Key<'de>, &'a toml_span::Value<'de>)> {
    let mut v: Vec<_> = t.iter().collect();
    v.sort_by_key(|(k, _)| k.span.start);
    v
}

fn to_node(
    v: &toml_span::Value<'_>,
    file: FileId,
    text: &str,
    diags: &mut Vec<Diagnostic>,
) -> Node {
    let span = Span::new(file, v.span.start, v.span.end);
    let kind = match v.as_ref() {
        ValueInner::String(s) => string_node(s, span, text, diags),
        ValueInner::Integer(i) => NodeKind::Literal(Value::from(*i)),
        ValueInner::Float(f) => match serde_json::Number::from_f64(*f) {
            Some(n) => NodeKind::Literal(Value::Number(n)),
            None => {
                diags.push(Diagnostic::at(
                    span,
                    "numbers must be finite",
                    "not a finite number",
                ));
                NodeKind::Literal(Value::Null)
            }
        },
        ValueInner::Boolean(b) => NodeKind::Literal(Value::Bool(*b)),
        ValueInner::Array(items) => {
            let nodes: Vec<Node> = items
                .iter()
                .map(|i| to_node(i, file, text, diags))
                .collect();
            literal_or(nodes, NodeKind::List, |ns| {
                Value::Array(ns.iter().map(literal_value).collect())
            })
        }
        ValueInner::Table(t) => {
            let entries: Vec<(String, Span, Node)> = sorted(t)
                .into_iter()
                .map(|(k, v)| {
                    (
                        k.name.to_string(),
                        Span::new(file, k.span.start, k.span.end),
                        to_node(v, file, text, diags),
                    )
                })
                .collect();
            NodeKind::Table(entries)
        }
    };
    Node { span, kind }
}

fn literal_value(n: &Node) -> Value {
    match &n.kind {
        NodeKind::Literal(v) => v.clone(),
        _ => Value::Null,
    }
}

/// Lists of plain values collapse to one literal, so most values carry no tree.
fn literal_or(
    nodes: Vec<Node>,
    wrap: fn(Vec<Node>) -> NodeKind,
    lit: fn(&[Node]) -> Value,
) -> NodeKind {
    if nodes.iter().all(|n| matches!(n.kind, NodeKind::Literal(_))) {
        NodeKind::Literal(lit(&nodes))
    } else {
        wrap(nodes)
    }
}

fn string_node(s: &str, span: Span, text: &str, diags: &mut Vec<Diagnostic>) -> NodeKind {
    if !s.contains('$') {
        return NodeKind::Literal(Value::String(s.to_string()));
    }
    // Reference spans are exact when the string has no escapes (its source text equals
    // its value); otherwise they fall back to the whole string.
    let raw = text.get(span.start..span.end).unwrap_or_default();
    let base = raw.find(s).map(|i| span.start + i);
    match parse_template(s, span.file, base.unwrap_or(span.start)) {
        Ok(mut parts) => {
            if base.is_none() {
                for p in &mut parts {
                    if let Part::Ref(_, sp) = p {
                        *sp = span;
                    }
                }
            }
            match parts.as_slice() {
                [Part::Lit(l)] => NodeKind::Literal(Value::String(l.clone())),
                [Part::Ref(r, _)] => NodeKind::Whole(r.clone()),
                _ => NodeKind::Template(parts),
            }
        }
        Err(e) => {
            let at = match base {
                Some(b) => Span::new(span.file, b + e.offset, b + e.offset + e.len),
                None => span,
            };
            diags.push(Diagnostic::at(at, e.message, "bad reference"));
            NodeKind::Literal(Value::String(s.to_string()))
        }
    }
}
