//! Phase one of loading: read the stack's files (UTF-8, or an error at the first bad
//! byte), parse TOML keeping spans, and sort the top-level tables into sections, each
//! name defined once across the files. No schema knowledge here.

use std::path::{Path, PathBuf};

use serde_json::Value;
use toml_span::value::{Table, ValueInner};

use super::check::META_KEYS;
use super::expr::{parse_template, Node, NodeKind, Part};
use super::source::{Diagnostic, FileId, SourceFile, Sources, Span, StackErrors};
use super::LoadOptions;

/// Top-level tables with a meaning of their own; every other table is a resource kind.
pub const RESERVED: [&str; 8] = [
    "module",
    "stack",
    "pricing",
    "providers",
    "variables",
    "outputs",
    "backend",
    "moved",
];

/// An entry of a section: its name, the span of the name, and its value.
pub type Entry = (String, Span, Node);

/// A resource as written: kind, name, spans, body.
#[derive(Clone)]
pub struct RawResource {
    pub kind: String,
    pub kind_span: Span,
    pub name: String,
    pub name_span: Span,
    pub body: Node,
    /// The instance, once a block with `count` / `for_each` is expanded.
    pub key: Option<crate::addr::Key>,
    /// The module calls this resource sits under (none for the stack's own).
    pub module: Vec<crate::addr::ModuleStep>,
}

/// A `[module.NAME]` call as written: its arguments (and meta keys) in `body`.
#[derive(Clone)]
pub struct RawCall {
    pub name: String,
    pub name_span: Span,
    pub body: Node,
    /// The module's directory (canonical); `None` when `source` is missing or wrong
    /// (reported).
    pub source: Option<PathBuf>,
    /// The directory as the call names it (relative to where terrain runs, as the
    /// stack's own files are shown), for messages.
    pub shown: PathBuf,
}

/// A module's files parsed: what a stack has, minus the settings its caller owns.
#[derive(Default)]
pub struct RawModule {
    pub variables: Vec<Entry>,
    pub outputs: Vec<Entry>,
    pub resources: Vec<RawResource>,
    pub calls: Vec<RawCall>,
    pub moved: Vec<Node>,
}

/// Every file parsed, not yet validated.
pub struct RawStack {
    pub dir: PathBuf,
    /// `dir`, canonical, as found when the files were read (the run may change its
    /// working directory before the stack is checked).
    pub root: PathBuf,
    pub sources: Sources,
    /// The `[stack]` table and the span of its key, if any file has one.
    pub stack: Option<(Span, Node)>,
    /// The `[pricing]` table and the span of its key, if any file has one.
    pub pricing: Option<(Span, Node)>,
    pub providers: Vec<Entry>,
    /// `[backend.<type>]` tables.
    pub backends: Vec<Entry>,
    /// Variable values from variables files, lowest precedence first.
    pub var_values: Vec<Entry>,
    pub variables: Vec<Entry>,
    pub outputs: Vec<Entry>,
    pub resources: Vec<RawResource>,
    /// `[[moved]]` entries, each a table node.
    pub moved: Vec<Node>,
    /// `[module.NAME]` calls of the stack itself.
    pub calls: Vec<RawCall>,
    /// Every module called, by its directory (each read once however often called).
    pub modules: std::collections::BTreeMap<PathBuf, RawModule>,
}

/// Reads the stack's files and sorts their contents into sections.
///
/// Fails when no file can be read, any file is not UTF-8 or not valid TOML, or a
/// section entry (`[stack]`, a provider, a variable, an output) is defined twice.
pub fn read(opts: &LoadOptions<'_>) -> Result<RawStack, StackErrors> {
    let (dir, mut paths) = stack_files(opts.path)?;
    // Variable files (the environment's, then each --var-file) are sources too: their
    // problems point into them, and a saved plan goes stale when they change.
    // A variables file kept beside the stack's files is not one of them.
    let canonical = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    let given: Vec<PathBuf> = opts.var_files.iter().map(|p| canonical(p)).collect();
    paths.retain(|p| !given.contains(&canonical(p)));
    let stack_files = paths.len();
    paths.extend(opts.var_files.iter().cloned());
    let mut sources = Sources::default();
    let mut diags = Vec::new();
    // Files that are not UTF-8: reported once at their first bad byte, not parsed.
    let mut not_utf8 = Vec::new();
    for path in &paths {
        let bytes = match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(e) => {
                return Err(StackErrors {
                    sources,
                    diagnostics: vec![Diagnostic::nowhere(format!("read {}: {e}", path.display()))],
                })
            }
        };
        let file = sources.files.len();
        let text = match String::from_utf8(bytes) {
            Ok(text) => text,
            Err(e) => {
                diags.push(utf8_error(file, &e));
                not_utf8.push(file);
                // The lossy text keeps the valid prefix byte for byte, so the span of the
                // first bad byte (now U+FFFD) shows the right line.
                String::from_utf8_lossy(e.as_bytes()).into_owned()
            }
        };
        sources.files.push(SourceFile {
            path: path.clone(),
            text: text.into(),
        });
    }
    let root = dir.canonicalize().unwrap_or_else(|_| dir.clone());
    let mut raw = RawStack {
        root,
        dir,
        sources: Sources::default(),
        stack: None,
        pricing: None,
        providers: Vec::new(),
        backends: Vec::new(),
        var_values: Vec::new(),
        variables: Vec::new(),
        outputs: Vec::new(),
        resources: Vec::new(),
        moved: Vec::new(),
        calls: Vec::new(),
        modules: std::collections::BTreeMap::new(),
    };
    for (file, source) in sources.files.iter().enumerate() {
        if not_utf8.contains(&file) {
            continue;
        }
        if file >= stack_files {
            raw.var_values
                .extend(var_file(file, &source.text, &sources, &mut diags));
            continue;
        }
        for (name, key_span, node) in top_entries(file, &source.text, &mut diags) {
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
                "pricing" => {
                    if let Some((first, _)) = &raw.pricing {
                        diags.push(
                            Diagnostic::at(
                                key_span,
                                "[pricing] is defined twice",
                                "second definition",
                            )
                            .help(format!(
                                "the first is at {}; keep one",
                                sources.locate(*first)
                            )),
                        );
                    } else {
                        raw.pricing = Some((key_span, node));
                    }
                }
                "moved" => moved_entries(node, key_span, &mut raw.moved, &mut diags),
                "module" => calls(node, key_span, &raw.dir, &mut raw.calls, &mut diags),
                "providers" | "variables" | "outputs" | "backend" => {
                    let section = match name.as_str() {
                        "providers" => &mut raw.providers,
                        "backend" => &mut raw.backends,
                        "variables" => &mut raw.variables,
                        _ => &mut raw.outputs,
                    };
                    section_entries(&name, node, key_span, section, &sources, &mut diags);
                }
                _ => resource_entries(name, node, key_span, &mut raw.resources, &mut diags),
            }
        }
    }
    let sourced = |c: &RawCall| c.source.clone().map(|s| (s, c.shown.clone()));
    let mut pending: Vec<(PathBuf, PathBuf)> = raw.calls.iter().filter_map(sourced).collect();
    while let Some((dir, shown)) = pending.pop() {
        if raw.modules.contains_key(&dir) {
            continue;
        }
        let module = read_module(&dir, &shown, &mut sources, &mut diags);
        pending.extend(module.calls.iter().filter_map(sourced));
        raw.modules.insert(dir, module);
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

/// `[[moved]]`: a list of tables.
fn moved_entries(node: Node, key_span: Span, out: &mut Vec<Node>, diags: &mut Vec<Diagnostic>) {
    match node.kind {
        NodeKind::List(items) => out.extend(items),
        _ => diags.push(
            Diagnostic::at(key_span, "`moved` is a list of tables", "not a list")
                .help("write each entry as [[moved]] with from = \"…\" and to = \"…\""),
        ),
    }
}

/// `[module.NAME]` tables: the calls, each with its module's directory found from
/// `source` (a path relative to `dir`, the directory of the file holding the call).
fn calls(
    node: Node,
    key_span: Span,
    dir: &Path,
    out: &mut Vec<RawCall>,
    diags: &mut Vec<Diagnostic>,
) {
    let NodeKind::Table(entries) = node.kind else {
        diags.push(
            Diagnostic::at(
                key_span,
                "`module` must be a table of module calls",
                "not a table",
            )
            .help("write each call as [module.NAME] with source = \"path/to/module\""),
        );
        return;
    };
    for (name, name_span, body) in entries {
        let source = match body.get("source") {
            Some(Node {
                kind: NodeKind::Literal(Value::String(path)),
                span,
            }) => {
                let full = dir.join(path);
                match full.canonicalize() {
                    Ok(found) if found.is_dir() => Some(found),
                    Ok(_) => {
                        diags.push(
                            Diagnostic::at(
                                *span,
                                format!(
                                    "module.{name}.source: {} is not a directory",
                                    full.display()
                                ),
                                "not a directory",
                            )
                            .help("a module is a directory of .toml files"),
                        );
                        None
                    }
                    Err(e) => {
                        diags.push(
                            Diagnostic::at(
                                *span,
                                format!("module.{name}.source: {}: {e}", full.display()),
                                "not found",
                            )
                            .help(format!("the path is relative to {}", dir.display())),
                        );
                        None
                    }
                }
            }
            Some(other) => {
                diags.push(Diagnostic::at(
                    other.span,
                    format!("module.{name}.source: expected a path written out, not a reference"),
                    "not a path",
                ));
                None
            }
            None => {
                diags.push(
                    Diagnostic::at(
                        name_span,
                        format!("module.{name}: no `source`"),
                        "no source",
                    )
                    .help("add source = \"path/to/module\" (relative to this file's directory)"),
                );
                None
            }
        };
        let shown = match body.get("source").map(|n| &n.kind) {
            Some(NodeKind::Literal(Value::String(path))) => dir.join(path),
            _ => dir.to_path_buf(),
        };
        out.push(RawCall {
            name,
            name_span,
            body,
            source,
            shown,
        });
    }
}

/// Reads the `.toml` files of module directory `dir` (named `shown` in messages) into
/// `sources`.
fn read_module(
    dir: &Path,
    shown: &Path,
    sources: &mut Sources,
    diags: &mut Vec<Diagnostic>,
) -> RawModule {
    let mut module = RawModule::default();
    let paths = match stack_files(dir) {
        Ok((_, paths)) => paths,
        Err(e) => {
            diags.extend(e.diagnostics);
            return module;
        }
    };
    for path in paths {
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) => {
                diags.push(Diagnostic::nowhere(format!("read {}: {e}", path.display())));
                continue;
            }
        };
        let file = sources.files.len();
        sources.files.push(SourceFile {
            path: path
                .file_name()
                .map_or_else(|| path.clone(), |name| shown.join(name)),
            text: text.clone().into(),
        });
        for (name, key_span, node) in top_entries(file, &text, diags) {
            match name.as_str() {
                "stack" | "providers" | "backend" => diags.push(
                    Diagnostic::at(
                        key_span,
                        format!("a module cannot have [{name}]: the stack calling it settles that"),
                        "not in a module",
                    )
                    .help("move it to the stack; a module has [variables], resources, [outputs] and module calls"),
                ),
                "variables" | "outputs" => {
                    let section = if name == "variables" {
                        &mut module.variables
                    } else {
                        &mut module.outputs
                    };
                    section_entries(&name, node, key_span, section, sources, diags);
                }
                "moved" => moved_entries(node, key_span, &mut module.moved, diags),
                "module" => calls(node, key_span, shown, &mut module.calls, diags),
                _ => resource_entries(name, node, key_span, &mut module.resources, diags),
            }
        }
    }
    module
}

/// The entries of a `[variables]`, `[outputs]`, `[providers]` or `[backend]` table,
/// each name defined once across the files.
fn section_entries(
    name: &str,
    node: Node,
    key_span: Span,
    section: &mut Vec<Entry>,
    sources: &Sources,
    diags: &mut Vec<Diagnostic>,
) {
    match node.kind {
        // One file cannot hold a name twice (TOML refuses it); two can.
        NodeKind::Table(entries) => {
            for entry in entries {
                match section.iter().find(|(n, _, _)| *n == entry.0) {
                    Some((_, first, _)) => diags.push(
                        Diagnostic::at(
                            entry.1,
                            format!("{name}.{} is defined twice", entry.0),
                            "second definition",
                        )
                        .help(format!("the first is at {}", sources.locate(*first))),
                    ),
                    None => section.push(entry),
                }
            }
        }
        _ => diags.push(Diagnostic::at(
            key_span,
            format!("`{name}` must be a table"),
            "not a table",
        )),
    }
}

/// The resources of a `[KIND.NAME]` table.
fn resource_entries(
    kind: String,
    node: Node,
    key_span: Span,
    out: &mut Vec<RawResource>,
    diags: &mut Vec<Diagnostic>,
) {
    match node.kind {
        NodeKind::Table(entries) => {
            for (rname, rspan, body) in entries {
                out.push(RawResource {
                    kind: kind.clone(),
                    kind_span: key_span,
                    name: rname,
                    name_span: rspan,
                    body: plain_meta(body),
                    key: None,
                    module: Vec::new(),
                });
            }
        }
        _ => diags.push(
            Diagnostic::at(
                key_span,
                format!("`{kind}` must be a table of resources"),
                "not a table",
            )
            .help(format!("write resources as `[{kind}.<name>]` tables; a file of variable values goes in envs/ or is passed with --var-file")),
        ),
    }
}

/// The `name = value` entries of a variables file (`envs/NAME.toml`, `--var-file`):
/// plain values, no tables of sections and no references.
fn var_file(
    file: FileId,
    text: &str,
    sources: &Sources,
    diags: &mut Vec<Diagnostic>,
) -> Vec<Entry> {
    let mut out: Vec<Entry> = Vec::new();
    for (name, key_span, node) in top_entries(file, text, diags) {
        if node.literal().is_none() {
            diags.push(
                Diagnostic::at(
                    node.span,
                    format!("{name}: a variables file holds plain values, not references"),
                    "reference",
                )
                .help(format!(
                    "in {}, write `name = value` lines",
                    sources.locate(key_span)
                )),
            );
            continue;
        }
        out.push((name, key_span, node));
    }
    out
}

/// The top-level entries of file `file` (`text`) in the order written, each with the
/// span of its key; none when it is not valid TOML (reported at the problem).
fn top_entries(file: FileId, text: &str, diags: &mut Vec<Diagnostic>) -> Vec<Entry> {
    let parsed = match toml_span::parse(text) {
        Ok(v) => v,
        Err(e) => {
            diags.push(Diagnostic::at(
                Span::new(file, e.span.start, e.span.end.max(e.span.start + 1)),
                format!("invalid TOML: {e}"),
                "here",
            ));
            return Vec::new();
        }
    };
    let ValueInner::Table(top) = parsed.as_ref() else {
        return Vec::new();
    };
    sorted(top)
        .into_iter()
        .map(|(key, value)| {
            (
                key.name.to_string(),
                Span::new(file, key.span.start, key.span.end),
                to_node(value, file, text, diags),
            )
        })
        .collect()
}

/// The diagnostic for a file that is not UTF-8, at its first bad byte (the column
/// counts the characters of the valid part of the line before it).
fn utf8_error(file: FileId, e: &std::string::FromUtf8Error) -> Diagnostic {
    let at = e.utf8_error().valid_up_to();
    let byte = e.as_bytes().get(at).copied().unwrap_or_default();
    Diagnostic::at(
        Span::new(file, at, at + char::REPLACEMENT_CHARACTER.len_utf8()),
        format!("invalid UTF-8 (byte 0x{byte:02x})"),
        "not UTF-8",
    )
    .help("stack files are UTF-8 text; save this one as UTF-8")
}

/// Terrain's own keys of a resource (`depends_on`, `sensitive`, `lifecycle`) are read
/// as plain values; only kind fields keep a node per list element, so that a problem
/// with one element points at it.
fn plain_meta(mut body: Node) -> Node {
    if let NodeKind::Table(entries) = &mut body.kind {
        for (key, _, value) in entries.iter_mut() {
            if META_KEYS.contains(&key.as_str()) {
                collapse_lists(value);
            }
        }
    }
    body
}

/// Turns lists of plain values, at any depth, into one literal.
fn collapse_lists(node: &mut Node) {
    match &mut node.kind {
        NodeKind::List(items) => items.iter_mut().for_each(collapse_lists),
        NodeKind::Table(entries) => entries.iter_mut().for_each(|(_, _, v)| collapse_lists(v)),
        _ => return,
    }
    if let (NodeKind::List(_), Some(v)) = (&node.kind, node.literal()) {
        node.kind = NodeKind::Literal(v);
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
        // Lists keep a node per element (with its span), so a problem with one element
        // is reported at it.
        ValueInner::Array(items) => NodeKind::List(
            items
                .iter()
                .map(|i| to_node(i, file, text, diags))
                .collect(),
        ),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn node(text: &str) -> Node {
        let parsed = toml_span::parse(text).expect("valid TOML");
        let mut diags = Vec::new();
        let n = to_node(&parsed, 0, text, &mut diags);
        assert!(diags.is_empty(), "{diags:?}");
        n
    }

    fn path(p: &str) -> Vec<String> {
        p.split('.').map(str::to_string).collect()
    }

    fn text_at<'a>(text: &'a str, n: &Node, p: &str) -> &'a str {
        let found = n
            .at(&path(p))
            .unwrap_or_else(|| panic!("{p} is in the tree"));
        &text[found.span.start..found.span.end]
    }

    /// Regression: `at` followed table keys only, so a problem with a list element was
    /// reported at the resource's header.
    #[test]
    fn at_descends_into_list_elements_and_inline_tables() {
        let text = "types = [\"a\", \"bb\"]\ntaints = [{ key = \"k\", effect = \"NoSchedule\" }]\n";
        let n = node(text);
        assert_eq!(text_at(text, &n, "types.1"), "bb");
        assert_eq!(text_at(text, &n, "taints.0.effect"), "NoSchedule");
        assert!(n.at(&path("types.2")).is_none());
        assert!(n.at(&path("types.x")).is_none());
        assert!(n.at(&path("taints.0.value")).is_none());
        assert_eq!(
            n.get("types").and_then(Node::literal),
            Some(serde_json::json!(["a", "bb"]))
        );
    }

    #[test]
    fn meta_keys_read_as_plain_values_fields_keep_elements() {
        let text =
            "depends_on = [\"a.b\"]\nlifecycle = { ignore_changes = [\"x\"] }\nfiles = [\"f\"]\n";
        let n = plain_meta(node(text));
        assert!(matches!(
            n.get("depends_on").map(|d| &d.kind),
            Some(NodeKind::Literal(Value::Array(_)))
        ));
        assert!(matches!(
            n.at(&path("lifecycle.ignore_changes")).map(|d| &d.kind),
            Some(NodeKind::Literal(Value::Array(_)))
        ));
        assert!(matches!(
            n.get("files").map(|d| &d.kind),
            Some(NodeKind::List(_))
        ));
    }

    /// Regression: a file that is not UTF-8 was reported with no line.
    #[test]
    fn invalid_utf8_is_located_at_the_first_bad_byte() {
        let bytes = b"a = 1\nb = \"caf\xe9\"\n".to_vec();
        let e = String::from_utf8(bytes).expect_err("not UTF-8");
        let d = utf8_error(0, &e);
        let file = SourceFile {
            path: "s.toml".into(),
            text: String::from_utf8_lossy(e.as_bytes()).into_owned().into(),
        };
        let span = d.span.expect("located");
        assert_eq!(file.line_col(span.start), (2, 9));
        assert_eq!(&file.text[span.start..span.end], "\u{fffd}");
        assert_eq!(d.message, "invalid UTF-8 (byte 0xe9)");
    }

    /// Regression: a variable, output or provider in two files let one silently win.
    #[test]
    fn section_entries_defined_in_two_files_are_refused_at_the_second() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(
            dir.path().join("a.toml"),
            "[variables]\nregion = \"x\"\n[providers.gcp]\nproject = \"p\"\n[outputs]\no = \"1\"\n",
        )
        .expect("write a.toml");
        std::fs::write(
            dir.path().join("b.toml"),
            "[variables.region]\ndefault = \"y\"\n\n[providers.gcp]\n[outputs]\no = \"2\"\n",
        )
        .expect("write b.toml");
        let registry = terrain_providers::registry::builtin();
        let opts = LoadOptions {
            path: dir.path(),
            vars: &[],
            var_files: &[],
            environment: crate::stack::DEFAULT_ENVIRONMENT,
            env: &|_| None,
            registry: &registry,
        };
        let Err(errors) = read(&opts) else {
            panic!("duplicates must be refused");
        };
        let plain: Vec<(String, String, Option<String>)> = errors
            .diagnostics
            .iter()
            .map(|d| {
                let at = errors.sources.locate(d.span.expect("located"));
                let at = at.rsplit('/').next().unwrap_or_default().to_string();
                let help = d
                    .help
                    .as_ref()
                    .map(|h| h.rsplit('/').next().unwrap_or_default().to_string());
                (at, d.message.clone(), help)
            })
            .collect();
        assert_eq!(
            plain,
            vec![
                (
                    "b.toml:1:12".into(),
                    "variables.region is defined twice".into(),
                    Some("a.toml:2:1".into())
                ),
                (
                    "b.toml:4:12".into(),
                    "providers.gcp is defined twice".into(),
                    Some("a.toml:3:12".into())
                ),
                (
                    "b.toml:6:1".into(),
                    "outputs.o is defined twice".into(),
                    Some("a.toml:6:1".into())
                ),
            ]
        );
    }
}
