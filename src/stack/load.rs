//! Phase one of loading: read the stack's files (UTF-8, or an error at the first bad
//! byte), parse TOML keeping spans, and sort the top-level tables into sections, each
//! name defined once across the files. No schema knowledge here. Also how TOML read
//! whole (a price file, a `--var` value) becomes JSON, so that every TOML value terrain
//! reads is read the same way.

use std::collections::HashMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

use serde_json::Value;
use toml::de::{DeFloat, DeInteger, DeTable, DeValue};
use toml::Spanned;

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
    let doc = match DeTable::parse(text) {
        Ok(doc) => doc,
        Err(e) => {
            // Every syntax error comes with its place; the file's start stands in should
            // one ever come without.
            let at = e.span().unwrap_or(0..0);
            diags.push(Diagnostic::at(
                Span::new(file, at.start, at.end.max(at.start + 1)),
                format!("invalid TOML: {}", e.message()),
                "here",
            ));
            return Vec::new();
        }
    };
    let headers = Header::all(text, doc.get_ref());
    let layout = Layout::new(file, text, &headers);
    let mut found = Found::default();
    let entries = layout.entries(doc.get_ref(), Some(&Scope::root(&layout)), &mut found);
    // A value terrain does not read makes the whole file unreadable, as a syntax error
    // does: only that is reported, at the first such value.
    match found.invalid {
        Some(e) => {
            diags.push(Diagnostic::at(
                Span::new(file, e.span.start, e.span.end.max(e.span.start + 1)),
                format!("invalid TOML: {e}"),
                "here",
            ));
            Vec::new()
        }
        None => {
            diags.extend(found.diags);
            entries
        }
    }
}

/// A TOML value as JSON, for files and values read whole (a price file, a `--var`):
/// tables' keys in name order, a float that is not finite (`inf`, `nan`) as `null`.
///
/// Fails at a value terrain does not read (see [`InvalidNumber`]).
pub fn toml_to_json(v: &Spanned<DeValue<'_>>) -> Result<Value, InvalidNumber> {
    let invalid = || InvalidNumber { span: v.span() };
    Ok(match v.get_ref() {
        DeValue::String(s) => Value::String(s.to_string()),
        DeValue::Integer(i) => Value::from(integer(i).ok_or_else(invalid)?),
        DeValue::Float(f) => {
            let f = float(f).ok_or_else(invalid)?;
            serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)
        }
        DeValue::Boolean(b) => Value::Bool(*b),
        DeValue::Datetime(_) => return Err(invalid()),
        DeValue::Array(items) => {
            Value::Array(items.iter().map(toml_to_json).collect::<Result<_, _>>()?)
        }
        DeValue::Table(t) => {
            let mut entries = t
                .iter()
                .map(|(k, v)| Ok((k.get_ref().to_string(), toml_to_json(v)?)))
                .collect::<Result<Vec<_>, InvalidNumber>>()?;
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(entries.into_iter().collect())
        }
    })
}

/// A value the TOML parser accepts but terrain does not read: a date or time, an
/// integer beyond 64 bits, a float too large to be finite. Terrain has always refused
/// these (its earlier TOML reader read them as malformed numbers); they stay refused,
/// with the same message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid number")]
pub struct InvalidNumber {
    /// The value's byte span in its text.
    pub span: Range<usize>,
}

/// An integer as written (any radix), if it fits in 64 bits.
fn integer(i: &DeInteger<'_>) -> Option<i64> {
    i64::from_str_radix(i.as_str(), i.radix()).ok()
}

/// A float as written; `inf` and `nan` are read as such, a number too large to be
/// finite is not read.
fn float(f: &DeFloat<'_>) -> Option<f64> {
    let written = f.as_str();
    let n: f64 = written.parse().ok()?;
    let special = matches!(written.trim_start_matches(['+', '-']), "inf" | "nan");
    (n.is_finite() || special).then_some(n)
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

/// The spans of a file's keys and values as diagnostics give them. The parser spans a
/// key or a value by its text; these differ where a diagnostic needs more: a string is
/// spanned by its contents (without the quotes, so a reference in it is located by
/// offset), a table written as a `[header]` section from its `[` to the end of its last
/// value (or of the header's line), a table made by a dotted key (`a.b = 1`) by its
/// first value. (Terrain's diagnostics have always pointed there; the corpus of bad
/// stacks pins many of them.)
struct Layout<'a> {
    file: FileId,
    text: &'a str,
    /// Every `[table]` and `[[array]]` header of the file, in the order written.
    headers: &'a [Header],
    /// For each table path, the headers that are or continue that table (the path is a
    /// prefix of theirs), in order: finding a table's first header is a lookup, not a
    /// scan of every header (which made loading one file of N resources O(N²)).
    under: HashMap<&'a [String], Vec<usize>>,
}

/// One `[table]` or `[[array]]` header, with its section.
struct Header {
    /// The table's names (`[a.b]`: `a`, `b`).
    path: Vec<String>,
    /// The span of each of those names in the header.
    keys: Vec<(usize, usize)>,
    /// Where the header starts: its `[`.
    at: usize,
    /// Past the header's line, its newline included.
    line_end: usize,
    /// Past the last value written in its section, if any.
    values_end: Option<usize>,
}

/// Where a table's entries may be continued by headers: the table's names, and the
/// headers that may do it (those of the same element of an array of tables).
struct Scope {
    path: Vec<String>,
    headers: Range<usize>,
}

impl Scope {
    fn root(layout: &Layout<'_>) -> Self {
        Self {
            path: Vec::new(),
            headers: 0..layout.headers.len(),
        }
    }

    fn child(&self, name: &str) -> Self {
        let mut path = self.path.clone();
        path.push(name.to_string());
        Self {
            path,
            headers: self.headers.clone(),
        }
    }
}

/// What converting a file found besides its nodes: problems with values, and the first
/// value (in the text) terrain does not read.
#[derive(Default)]
struct Found {
    diags: Vec<Diagnostic>,
    invalid: Option<InvalidNumber>,
}

impl Found {
    fn refuse(&mut self, span: Range<usize>) {
        if self
            .invalid
            .as_ref()
            .is_none_or(|e| span.start < e.span.start)
        {
            self.invalid = Some(InvalidNumber { span });
        }
    }
}

impl<'a> Layout<'a> {
    fn new(file: FileId, text: &'a str, headers: &'a [Header]) -> Self {
        let mut under: HashMap<&'a [String], Vec<usize>> = HashMap::new();
        for (i, h) in headers.iter().enumerate() {
            for n in 1..=h.path.len() {
                under.entry(&h.path[..n]).or_default().push(i);
            }
        }
        Self {
            file,
            text,
            headers,
            under,
        }
    }

    /// The headers in `scope`'s range that are or continue the table `scope.path`.
    fn headers_under<'s>(&'s self, scope: &'s Scope) -> impl Iterator<Item = usize> + 's {
        let found = self.under.get(scope.path.as_slice()).map_or(&[][..], |v| v);
        let from = found.partition_point(|&i| i < scope.headers.start);
        found[from..]
            .iter()
            .copied()
            .take_while(|&i| i < scope.headers.end)
    }

    fn span(&self, range: (usize, usize)) -> Span {
        Span::new(self.file, range.0, range.1)
    }

    /// The span of header `h`'s table: from its `[` to the end of the last value of its
    /// section, or of its line when the section is empty.
    fn header_span(&self, h: usize) -> Span {
        let (at, end) = self.headers.get(h).map_or((0, 0), |h| {
            (h.at, h.values_end.unwrap_or(0).max(h.line_end))
        });
        Span::new(self.file, at, end)
    }

    /// The first header in `scope` that is or continues the table `scope.path`.
    fn first_header(&self, scope: &Scope) -> Option<usize> {
        self.headers_under(scope).next()
    }

    /// A table's entries in the order written. `scope` is `None` for an inline table
    /// (which no header continues).
    fn entries(&self, t: &DeTable<'_>, scope: Option<&Scope>, found: &mut Found) -> Vec<Entry> {
        let mut out: Vec<Entry> = t
            .iter()
            .map(|(key, value)| {
                let name = key.get_ref().to_string();
                let child = scope.map(|s| s.child(&name));
                let header = child
                    .as_ref()
                    .and_then(|c| Some((c, self.first_header(c)?)));
                let (key_span, node) = match header {
                    // A table written with headers is named by its first header.
                    Some((c, h)) => {
                        let named = self.headers[h].keys.get(c.path.len() - 1).copied();
                        let named = named.unwrap_or_else(|| unquoted(self.text, key.span()));
                        (named, self.header_node(value, c, h, found))
                    }
                    None => (
                        unquoted(self.text, key.span()),
                        self.node(value, child.as_ref(), found),
                    ),
                };
                (name, self.span(key_span), node)
            })
            .collect();
        out.sort_by_key(|(_, span, _)| span.start);
        out
    }

    /// A table (or array of tables) written with headers, first header `h`.
    fn header_node(
        &self,
        value: &Spanned<DeValue<'_>>,
        scope: &Scope,
        h: usize,
        found: &mut Found,
    ) -> Node {
        let kind = match value.get_ref() {
            DeValue::Table(t) => NodeKind::Table(self.entries(t, Some(scope), found)),
            // `[[name]]`: each element is the table of one header, continued by the
            // headers up to the next element's.
            DeValue::Array(items) => {
                let own: Vec<usize> = self
                    .headers_under(scope)
                    .filter(|&i| self.headers[i].path.len() == scope.path.len())
                    .collect();
                let items = items.iter().enumerate().map(|(i, item)| {
                    let (Some(&at), DeValue::Table(t)) = (own.get(i), item.get_ref()) else {
                        return self.node(item, None, found);
                    };
                    let end = own.get(i + 1).copied().unwrap_or(scope.headers.end);
                    let element = Scope {
                        path: scope.path.clone(),
                        headers: at..end,
                    };
                    Node {
                        span: self.header_span(at),
                        kind: NodeKind::Table(self.entries(t, Some(&element), found)),
                    }
                });
                NodeKind::List(items.collect())
            }
            _ => return self.node(value, None, found),
        };
        Node {
            span: self.header_span(h),
            kind,
        }
    }

    /// A value written after `=` (or a table made by dotted keys, `scope` naming it).
    fn node(&self, v: &Spanned<DeValue<'_>>, scope: Option<&Scope>, found: &mut Found) -> Node {
        let raw = v.span();
        let mut span = self.span((raw.start, raw.end));
        let kind = match v.get_ref() {
            DeValue::String(s) => {
                span = self.span(unquoted(self.text, raw));
                string_node(s, span, self.text, &mut found.diags)
            }
            DeValue::Integer(i) => match integer(i) {
                Some(i) => NodeKind::Literal(Value::from(i)),
                None => {
                    found.refuse(raw);
                    NodeKind::Literal(Value::Null)
                }
            },
            DeValue::Float(f) => match float(f).map(serde_json::Number::from_f64) {
                Some(Some(n)) => NodeKind::Literal(Value::Number(n)),
                Some(None) => {
                    found.diags.push(Diagnostic::at(
                        span,
                        "numbers must be finite",
                        "not a finite number",
                    ));
                    NodeKind::Literal(Value::Null)
                }
                None => {
                    found.refuse(raw);
                    NodeKind::Literal(Value::Null)
                }
            },
            DeValue::Boolean(b) => NodeKind::Literal(Value::Bool(*b)),
            DeValue::Datetime(_) => {
                found.refuse(raw);
                NodeKind::Literal(Value::Null)
            }
            // Lists keep a node per element (with its span), so a problem with one element
            // is reported at it.
            DeValue::Array(items) => {
                NodeKind::List(items.iter().map(|i| self.node(i, None, found)).collect())
            }
            DeValue::Table(t) => {
                let inline = self.text.as_bytes().get(raw.start) == Some(&b'{');
                let entries = self.entries(t, scope.filter(|_| !inline), found);
                // A table made by dotted keys is spanned by the first value written in it.
                if !inline {
                    if let Some((_, _, first)) = entries.first() {
                        span = first.span;
                    }
                }
                NodeKind::Table(entries)
            }
        };
        Node { span, kind }
    }
}

/// Collects the headers of table `t` (named `path`) and below, and the spans of the
/// values written after `=` in their sections.
fn survey(
    text: &str,
    t: &DeTable<'_>,
    path: &mut Vec<String>,
    headers: &mut Vec<Header>,
    values: &mut Vec<Range<usize>>,
) {
    let starts_with = |span: &Range<usize>, c: u8| text.as_bytes().get(span.start) == Some(&c);
    for (key, value) in t.iter() {
        path.push(key.get_ref().to_string());
        match value.get_ref() {
            DeValue::Table(sub) if !starts_with(&value.span(), b'{') => {
                // A `[header]` table; otherwise one named on the way to a header or made
                // by dotted keys, spanned by a name.
                if starts_with(&value.span(), b'[') {
                    headers.push(Header::new(text, path, value.span()));
                }
                survey(text, sub, path, headers, values);
            }
            // An array of tables: each element a `[[header]]` table. (The elements of an
            // array written after `=` are values; its tables are inline.)
            DeValue::Array(items)
                if items
                    .first()
                    .is_some_and(|i| i.get_ref().is_table() && starts_with(&i.span(), b'[')) =>
            {
                for item in items.iter() {
                    if let DeValue::Table(sub) = item.get_ref() {
                        headers.push(Header::new(text, path, item.span()));
                        survey(text, sub, path, headers, values);
                    }
                }
            }
            _ => values.push(value.span()),
        }
        path.pop();
    }
}

impl Header {
    /// Every header of `doc` (parsed from `text`) in the order written, each with the
    /// end of the last value of its section.
    fn all(text: &str, doc: &DeTable<'_>) -> Vec<Header> {
        let mut headers = Vec::new();
        let mut values = Vec::new();
        survey(text, doc, &mut Vec::new(), &mut headers, &mut values);
        headers.sort_by_key(|h| h.at);
        for v in values {
            let section = headers.partition_point(|h| h.at <= v.start);
            if let Some(h) = section.checked_sub(1).and_then(|i| headers.get_mut(i)) {
                h.values_end = Some(h.values_end.map_or(v.end, |e| e.max(v.end)));
            }
        }
        headers
    }

    /// The header spanned `span` (`[` to `]`) naming table `path`.
    fn new(text: &str, path: &[String], span: Range<usize>) -> Self {
        let line_end = text
            .get(span.end..)
            .and_then(|rest| rest.find('\n'))
            .map_or(text.len(), |i| span.end + i + 1);
        Self {
            path: path.to_vec(),
            keys: header_keys(text, span.start),
            at: span.start,
            line_end,
            values_end: None,
        }
    }
}

/// The spans of the names in the header at `at` (`[a."b c".d]`), a quoted one's
/// without its quotes. The header is valid TOML (the file parsed).
fn header_keys(text: &str, at: usize) -> Vec<(usize, usize)> {
    let bytes = text.as_bytes();
    let mut i = at;
    while bytes.get(i) == Some(&b'[') {
        i += 1;
    }
    let skip_blanks = |i: &mut usize| {
        while matches!(bytes.get(*i), Some(b' ' | b'\t')) {
            *i += 1;
        }
    };
    let mut keys = Vec::new();
    loop {
        skip_blanks(&mut i);
        let start = i;
        match bytes.get(i) {
            Some(&quote @ (b'"' | b'\'')) => {
                i += 1;
                while let Some(&b) = bytes.get(i) {
                    if b == quote {
                        break;
                    }
                    // A basic string's escape may be of its quote.
                    i += if b == b'\\' && quote == b'"' { 2 } else { 1 };
                }
                i += 1;
                keys.push(unquoted(text, start..i));
            }
            Some(_) => {
                while !matches!(bytes.get(i), None | Some(b' ' | b'\t' | b'.' | b']')) {
                    i += 1;
                }
                keys.push((start, i));
            }
            None => break,
        }
        skip_blanks(&mut i);
        if bytes.get(i) != Some(&b'.') {
            break;
        }
        i += 1;
    }
    keys
}

/// The span of a string's contents, given the span of the string as written (a key or a
/// value; anything else is returned as it is): without its quotes, and for a multi-line
/// string without the newline that may follow the opening quotes. An empty string is
/// spanned by its opening quote, so that it can be pointed at.
fn unquoted(text: &str, span: Range<usize>) -> (usize, usize) {
    let raw = text.as_bytes().get(span.clone()).unwrap_or_default();
    let Some(&quote) = raw.first().filter(|q| matches!(q, b'"' | b'\'')) else {
        return (span.start, span.end);
    };
    if raw.len() >= 6 && raw[1] == quote && raw[2] == quote {
        let skip = match raw.get(3) {
            Some(b'\n') => 4,
            Some(b'\r') => 5,
            _ => 3,
        };
        (span.start + skip, span.end - 3)
    } else if raw.len() == 2 {
        (span.start, span.start + 1)
    } else {
        (span.start + 1, span.end - 1)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The whole of `text` as one table node, spanned by the whole text.
    fn node(text: &str) -> Node {
        let (n, found) = converted(text);
        assert!(found.diags.is_empty(), "{:?}", found.diags);
        assert_eq!(found.invalid, None);
        n
    }

    fn converted(text: &str) -> (Node, Found) {
        let doc = DeTable::parse(text).expect("valid TOML");
        let headers = Header::all(text, doc.get_ref());
        let layout = Layout::new(0, text, &headers);
        let mut found = Found::default();
        let entries = layout.entries(doc.get_ref(), Some(&Scope::root(&layout)), &mut found);
        let n = Node {
            span: Span::new(0, 0, text.len()),
            kind: NodeKind::Table(entries),
        };
        (n, found)
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

    /// The spans diagnostics point at, pinned by the text at each: a `[kind.name]`
    /// table's key and value, a dotted key, an inline table, an array element, an empty
    /// section and `[[moved]]` entries. (The corpus of bad stacks relies on them too.)
    #[test]
    fn spans_are_the_text_diagnostics_point_at() {
        let text = "top.a = 1\ntop.b = \"x\"\n\n[kind.name]  # a resource\nsize = 2\n\
                    tags = { team = \"ml\" }\nzones = [\"a\", \"b\"]\n\n[empty]   # later\n\n\
                    [[moved]]\nfrom = \"x.y\"\nto = \"x.z\"\n\n[[moved]]\nfrom = \"p.q\"\nto = 'p.r'\n";
        let mut diags = Vec::new();
        let entries = top_entries(0, text, &mut diags);
        assert!(diags.is_empty(), "{diags:?}");
        let at = |s: Span| &text[s.start..s.end];
        let names: Vec<&str> = entries.iter().map(|(n, _, _)| n.as_str()).collect();
        assert_eq!(names, ["top", "kind", "empty", "moved"]);

        // A dotted key: its table is spanned by its first value; a string by its contents.
        let (_, key, top) = &entries[0];
        assert_eq!((key.start, at(*key)), (0, "top"));
        assert_eq!(at(top.span), "1");
        assert_eq!(text_at(text, top, "b"), "x");

        // A `[kind.name]` table: both names are the header's, and both tables run from
        // its `[` to the end of the section's last value.
        let section = "[kind.name]  # a resource\nsize = 2\ntags = { team = \"ml\" }\n\
                       zones = [\"a\", \"b\"]";
        let (_, key, kind) = &entries[1];
        let header = text.find("[kind.name]").expect("header");
        assert_eq!((key.start, at(*key)), (header + 1, "kind"));
        assert_eq!(at(kind.span), section);
        let NodeKind::Table(resources) = &kind.kind else {
            panic!("a table of resources");
        };
        let (_, key, body) = &resources[0];
        assert_eq!((key.start, at(*key)), (header + 6, "name"));
        assert_eq!(at(body.span), section);
        assert_eq!(text_at(text, body, "size"), "2");

        // An inline table and its value; a list and its element.
        assert_eq!(text_at(text, body, "tags"), "{ team = \"ml\" }");
        assert_eq!(text_at(text, body, "tags.team"), "ml");
        assert_eq!(text_at(text, body, "zones"), "[\"a\", \"b\"]");
        assert_eq!(text_at(text, body, "zones.1"), "b");

        // An empty section: its header's line, newline included.
        assert_eq!(at(entries[2].2.span), "[empty]   # later\n");

        // `[[moved]]`: named by the first header; each entry spanned by its section.
        let (_, key, moved) = &entries[3];
        let first = text.find("[[moved]]").expect("header");
        assert_eq!((key.start, at(*key)), (first + 2, "moved"));
        let one = "[[moved]]\nfrom = \"x.y\"\nto = \"x.z\"";
        assert_eq!(at(moved.span), one);
        assert_eq!(text_at(text, moved, "0"), one);
        assert_eq!(
            text_at(text, moved, "1"),
            "[[moved]]\nfrom = \"p.q\"\nto = 'p.r'"
        );
        assert_eq!(text_at(text, moved, "1.to"), "p.r");
    }

    /// Values terrain does not read make the whole file invalid, reported once at the
    /// first: a date, an integer beyond 64 bits, a float too large to be finite.
    #[test]
    fn dates_and_numbers_out_of_range_make_the_file_invalid() {
        for (text, at) in [
            ("a = 1\nb = 1979-05-27\n", "1979-05-27"),
            ("a = [1, 99999999999999999999]\n", "99999999999999999999"),
            ("[t]\nc = \"${x.y\"\nd = 1e999\n", "1e999"),
        ] {
            let mut diags = Vec::new();
            assert!(top_entries(0, text, &mut diags).is_empty());
            let [d] = diags.as_slice() else {
                panic!("one problem: {diags:?}");
            };
            let span = d.span.expect("located");
            assert_eq!(d.message, "invalid TOML: invalid number");
            assert_eq!(&text[span.start..span.end], at);
        }
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
