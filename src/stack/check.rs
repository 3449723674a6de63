//! Phase two of loading: validate the parsed files against the registry. Unknown kinds
//! and keys, wrong types, bad references, missing variables, kinds' own offline checks
//! and dependency cycles are all reported together, each at its place in the files.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use serde_json::Value;
use sha2::{Digest, Sha256};
use terrain_providers::{Schema, Type};

use super::load::{toml_to_json, Entry, RawResource, RawStack, RESERVED};
use super::source::{did_you_mean, Diagnostic, Sources, Span, StackErrors};
use super::{
    Lifecycle, LoadOptions, Node, NodeKind, OutputConfig, Ref, ResourceConfig, Stack, Variable,
};
use crate::addr::{is_identifier, Address};
use crate::desired;
use crate::eval;

/// Keys of a resource table that configure terrain rather than the object.
pub const META_KEYS: [&str; 6] = [
    "depends_on",
    "lifecycle",
    "sensitive",
    "count",
    "for_each",
    "provider",
];

/// What `[stack]` says: the name, a legacy `backend` (its path and where it is written),
/// the `budget` table and the `policies` directories.
type StackSection = (
    String,
    Option<(Option<PathBuf>, Span)>,
    Option<Node>,
    Vec<PathBuf>,
);

/// Validates a parsed stack.
pub fn check(mut raw: RawStack, opts: &LoadOptions<'_>) -> Result<Stack, StackErrors> {
    // The resources' bodies move into the checked stack rather than being copied.
    let raw_resources = std::mem::take(&mut raw.resources);
    let mut c = Checker {
        sources: &raw.sources,
        diags: Vec::new(),
        declared_vars: raw.variables.iter().map(|(n, _, _)| n.clone()).collect(),
        failed: BTreeSet::new(),
        warnings: Vec::new(),
    };
    let (name, legacy_backend, budget, policies) = c.stack_section(&raw);
    let pricing = super::pricing::check(
        raw.pricing.as_ref(),
        budget.as_ref(),
        &raw.dir,
        &mut c.diags,
    );
    let providers = c.providers(&raw.providers, opts);
    let variables = c.variables(&raw.variables, &raw.var_values, opts);
    let refused: BTreeSet<String> = c
        .declared_vars
        .iter()
        .filter(|name| !variables.contains_key(*name))
        .cloned()
        .collect();
    let (backend, problems) = super::backend::check(
        &raw.sources,
        &super::backend::Declared {
            tables: &raw.backends,
            legacy: legacy_backend,
        },
        &name,
        &raw.dir,
        &variables,
        opts.env,
    );
    c.diags.extend(problems);
    let mut raw_resources = raw_resources;
    let inlined = super::module::inline(
        &super::module::Calls {
            dir: &raw.root,
            calls: &raw.calls,
            modules: &raw.modules,
        },
        &mut raw_resources,
        &mut raw.outputs,
        &variables,
        &refused,
        opts,
        &mut c.diags,
    );
    raw_resources.extend(inlined.resources);
    raw.moved.extend(inlined.moved);
    let (mut raw_resources, blocks) =
        super::expand::instances(raw_resources, &variables, &refused, opts, &mut c.diags);
    c.failed = blocks.failed().clone();
    for r in &mut raw_resources {
        let (kind, name, key, module) = (&r.kind, &r.name, &r.key, &r.module);
        let what = || {
            Address::new(kind, name)
                .with_key(key.clone())
                .within(module)
                .to_string()
        };
        blocks.resolve(&what, &mut r.body, &mut c.diags);
    }
    for (name, _, node) in &mut raw.outputs {
        blocks.resolve(&|| format!("output.{name}"), node, &mut c.diags);
    }
    let mut resources = c.resources(raw_resources, &blocks, &providers, opts);
    let outputs = c.outputs(&raw.outputs, &variables, &resources, opts);
    for (addr, rc) in &resources {
        c.body_refs(addr, &rc.body, &variables, &resources, opts);
    }
    let moved = super::moved::check(&raw.moved, &resources, &mut c.diags);
    c.cycles(&resources);
    let mut unserved = Vec::new();
    if c.diags.is_empty() {
        let (groups, services) = c.kind_validation(&resources, &providers, &variables, opts);
        unserved = super::api_groups::link(&mut resources, &groups);
        super::services::link(&mut resources, &services);
        // What the groups and services imply can close a cycle no reference shows.
        c.cycles(&resources);
    }
    let warnings = std::mem::take(&mut c.warnings);
    let mut diags = c.diags;
    // File order, so output is stable and reads top to bottom.
    diags.sort_by_key(|d| d.span.map(|s| (s.file, s.start)));
    if !diags.is_empty() {
        return Err(StackErrors {
            sources: raw.sources,
            diagnostics: diags,
        });
    }
    let source_hash = hash_sources(&raw.sources);
    Ok(Stack {
        environment: opts.environment.to_string(),
        name,
        dir: raw.dir,
        sources: raw.sources,
        source_hash,
        backend,
        providers,
        variables,
        resources,
        outputs,
        moved,
        pricing,
        policies,
        warnings,
        unserved,
    })
}

fn hash_sources(sources: &Sources) -> String {
    let mut h = Sha256::new();
    for f in &sources.files {
        h.update(f.path.to_string_lossy().as_bytes());
        h.update([0]);
        h.update(f.text.as_bytes());
        h.update([0]);
    }
    hex::encode(h.finalize())
}

struct Checker<'a> {
    sources: &'a Sources,
    diags: Vec<Diagnostic>,
    /// Every declared variable, with a value or not: a use of one already reported as
    /// having no value is not reported again.
    declared_vars: BTreeSet<String>,
    /// Blocks whose `count` / `for_each` was refused (reported): uses of them are not
    /// reported again.
    failed: BTreeSet<Address>,
    /// What the stack-wide checks warn about, for the plan to show.
    warnings: Vec<String>,
}

/// A variable's declaration: its default and its type, each with where it is written,
/// and whether its value is secret.
struct VariableDecl {
    default: Option<(Value, Span)>,
    ty: Option<(String, Span)>,
    sensitive: bool,
    /// `allowed = [...]`: the only values the variable may take.
    allowed: Option<Vec<Value>>,
}

fn type_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "nothing",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "list",
        Value::Object(_) => "table",
    }
}

impl Checker<'_> {
    fn err(&mut self, d: Diagnostic) {
        self.diags.push(d);
    }

    fn unknown_key(&mut self, what: &str, key: &str, span: Span, allowed: &[&str]) {
        let mut d = Diagnostic::at(span, format!("{what}: unknown key `{key}`"), "unknown key");
        d.help = Some(match did_you_mean(key, allowed.iter().copied()) {
            Some(s) => s,
            None => format!("allowed keys: {}", allowed.join(", ")),
        });
        self.err(d);
    }

    fn literal_str(&mut self, what: &str, node: &Node) -> Option<String> {
        match &node.kind {
            NodeKind::Literal(Value::String(s)) => Some(s.clone()),
            _ => {
                self.err(Diagnostic::at(
                    node.span,
                    format!("{what} must be a plain string"),
                    "expected a string",
                ));
                None
            }
        }
    }

    fn literal_bool(&mut self, what: &str, node: &Node) -> bool {
        match &node.kind {
            NodeKind::Literal(Value::Bool(b)) => *b,
            _ => {
                self.err(Diagnostic::at(
                    node.span,
                    format!("{what} must be true or false"),
                    "expected a boolean",
                ));
                false
            }
        }
    }

    fn table<'n>(&mut self, what: &str, node: &'n Node) -> &'n [(String, Span, Node)] {
        match &node.kind {
            NodeKind::Table(entries) => entries,
            _ => {
                self.err(Diagnostic::at(
                    node.span,
                    format!("{what} must be a table"),
                    "expected a table",
                ));
                &[]
            }
        }
    }

    /// The stack's name, and `backend = {…}` if written: its local path, and the span of
    /// the key.
    /// The stack's name, its legacy `[stack] backend` (path and where it is written)
    /// and its `budget` table.
    fn stack_section(&mut self, raw: &RawStack) -> StackSection {
        let default_name = raw
            .dir
            .canonicalize()
            .ok()
            .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
            .filter(|n| is_identifier(n))
            .unwrap_or_else(|| "default".to_string());
        let mut name = default_name;
        let mut backend_path: Option<PathBuf> = None;
        let mut legacy: Option<Span> = None;
        let mut budget: Option<Node> = None;
        let mut policies: Vec<PathBuf> = Vec::new();
        if let Some((_, node)) = &raw.stack {
            for (key, kspan, value) in self.table("[stack]", node).to_vec() {
                match key.as_str() {
                    "name" => {
                        if let Some(n) = self.literal_str("stack.name", &value) {
                            if is_identifier(&n) {
                                name = n;
                            } else {
                                self.err(Diagnostic::at(
                                    value.span,
                                    format!("stack.name `{n}` must start with a letter and hold only letters, digits, `_` and `-`"),
                                    "invalid name",
                                ));
                            }
                        }
                    }
                    "description" => {
                        self.literal_str("stack.description", &value);
                    }
                    "budget" => budget = Some(value.clone()),
                    // Where the Rego guardrails every plan of the stack is held to live:
                    // plain paths (they decide how a plan is judged, so they are known
                    // before anything is evaluated), from the stack's directory.
                    "policies" => {
                        let bad = |span| {
                            Diagnostic::at(
                                span,
                                "stack.policies must be a list of plain strings naming directories or .rego files, e.g. [\"policies/\"]",
                                "expected a list of paths",
                            )
                        };
                        match &value.kind {
                            NodeKind::List(items) => {
                                for item in items {
                                    match &item.kind {
                                        NodeKind::Literal(Value::String(p)) if !p.is_empty() => {
                                            policies.push(raw.dir.join(p));
                                        }
                                        _ => self.err(bad(item.span)),
                                    }
                                }
                            }
                            NodeKind::Literal(Value::Array(items))
                                if items
                                    .iter()
                                    .all(|i| i.as_str().is_some_and(|p| !p.is_empty())) =>
                            {
                                policies.extend(
                                    items
                                        .iter()
                                        .filter_map(Value::as_str)
                                        .map(|p| raw.dir.join(p)),
                                );
                            }
                            _ => self.err(bad(value.span)),
                        }
                    }
                    "backend" => {
                        legacy = Some(kspan);
                        for (bkey, bspan, bvalue) in self.table("stack.backend", &value).to_vec() {
                            match bkey.as_str() {
                                "type" => {
                                    if let Some(t) = self.literal_str("stack.backend.type", &bvalue)
                                    {
                                        if t != "local" {
                                            self.err(
                                                Diagnostic::at(
                                                    bvalue.span,
                                                    format!(
                                                        "stack.backend.type `{t}` is not supported"
                                                    ),
                                                    "unknown backend",
                                                )
                                                .help("write a [backend.<type>] table for other backends (local, s3, gcs)"),
                                            );
                                        }
                                    }
                                }
                                "path" => {
                                    backend_path = self
                                        .literal_str("stack.backend.path", &bvalue)
                                        .map(|p| raw.dir.join(p));
                                }
                                other => self.unknown_key(
                                    "stack.backend",
                                    other,
                                    bspan,
                                    &["type", "path"],
                                ),
                            }
                        }
                    }
                    other => self.unknown_key(
                        "[stack]",
                        other,
                        kspan,
                        &["name", "description", "backend", "budget", "policies"],
                    ),
                }
            }
        }
        (name, legacy.map(|at| (backend_path, at)), budget, policies)
    }

    fn providers(&mut self, entries: &[Entry], opts: &LoadOptions<'_>) -> BTreeMap<String, Node> {
        let known = opts.registry.providers();
        let mut out = BTreeMap::new();
        for (name, span, node) in entries {
            if !known.contains(&name.as_str()) {
                let mut d = Diagnostic::at(
                    *span,
                    format!("providers.{name}: unknown provider `{name}`"),
                    "unknown provider",
                );
                d.help = did_you_mean(name, known.iter().copied())
                    .or_else(|| Some(format!("known providers: {}", known.join(", "))));
                self.err(d);
                continue;
            }
            self.table(&format!("providers.{name}"), node);
            // `[providers.gcp.europe]`: a table under a key that is no setting of the
            // provider is another instance of it, configured on its own.
            let settings = opts.registry.setting_keys(name);
            let mut default = node.clone();
            if let (Some(settings), NodeKind::Table(entries)) = (settings, &mut default.kind) {
                let (instances, own): (Vec<_>, Vec<_>) =
                    std::mem::take(entries).into_iter().partition(|(k, _, v)| {
                        matches!(v.kind, NodeKind::Table(_)) && !settings.contains(&k.as_str())
                    });
                *entries = own;
                for (alias, aspan, table) in instances {
                    if !is_identifier(&alias) {
                        self.err(Diagnostic::at(
                            aspan,
                            format!("providers.{name}.{alias}: an instance name is an identifier"),
                            "invalid name",
                        ));
                        continue;
                    }
                    out.insert(format!("{name}.{alias}"), table);
                }
            }
            out.insert(name.clone(), default);
        }
        out
    }

    /// The variables with their values for this run: `--var`, else the last variables
    /// file setting it (`var_values`, lowest precedence first), else `TERRAIN_VAR_*`,
    /// else the default. `${env}` is among them, under [`eval::ENVIRONMENT_VARIABLE`].
    fn variables(
        &mut self,
        entries: &[Entry],
        var_values: &[Entry],
        opts: &LoadOptions<'_>,
    ) -> BTreeMap<String, Variable> {
        let mut out = BTreeMap::new();
        out.insert(
            eval::ENVIRONMENT_VARIABLE.to_string(),
            Variable {
                value: Value::String(opts.environment.to_string()),
                sensitive: false,
                span: Span::default(),
            },
        );
        let declared: Vec<&str> = entries.iter().map(|(n, _, _)| n.as_str()).collect();
        self.undeclared_values(&declared, var_values, opts);
        for (name, span, node) in entries {
            if let Some(variable) = self.variable(name, *span, node, var_values, opts) {
                out.insert(name.clone(), variable);
            }
        }
        out
    }

    /// Reports the values given (in variables files, `var_values`, or with `--var`) for
    /// variables the stack does not declare.
    fn undeclared_values(
        &mut self,
        declared: &[&str],
        var_values: &[Entry],
        opts: &LoadOptions<'_>,
    ) {
        for (name, span, _) in var_values {
            if !declared.contains(&name.as_str()) {
                let mut d = Diagnostic::at(
                    *span,
                    format!("{name}: the stack declares no variable `{name}`"),
                    "unknown variable",
                );
                d.help = did_you_mean(name, declared.iter().copied());
                self.err(d);
            }
        }
        for (name, _) in opts.vars {
            if !declared.contains(&name.as_str()) {
                let mut d = Diagnostic::nowhere(format!(
                    "--var {name}: the stack declares no variable `{name}`"
                ));
                d.help = did_you_mean(name, declared.iter().copied());
                self.err(d);
            }
        }
    }

    /// The variable `name` declared at `span` as `node`, with its value for this run;
    /// `None` when a problem with it was reported.
    fn variable(
        &mut self,
        name: &str,
        span: Span,
        node: &Node,
        var_values: &[Entry],
        opts: &LoadOptions<'_>,
    ) -> Option<Variable> {
        if !is_identifier(name) {
            self.err(Diagnostic::at(
                span,
                format!("variables.{name}: not a valid variable name"),
                "invalid name",
            ));
            return None;
        }
        let VariableDecl {
            default,
            ty,
            sensitive,
            allowed,
        } = self.variable_decl(name, node)?;
        if let Some((t, tspan)) = &ty {
            if !["string", "number", "integer", "bool", "list", "table"].contains(&t.as_str()) {
                self.err(
                    Diagnostic::at(
                        *tspan,
                        format!("variables.{name}: unknown type `{t}`"),
                        "unknown type",
                    )
                    .help("types: string, number, integer, bool, list, table"),
                );
                return None;
            }
        }
        let ty = ty.map(|(t, _)| t);
        let from_cli = opts
            .vars
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| (v.clone(), "--var"));
        let from_file = var_values
            .iter()
            .rev()
            .find(|(n, _, _)| n == name)
            .filter(|_| from_cli.is_none());
        let want = ty
            .as_deref()
            .or(default.as_ref().map(|(d, _)| type_name_of(d)));
        if let Some((_, _, node)) = from_file {
            let v = self.file_value(name, node, want, sensitive)?;
            return self.allowed(
                name,
                node.span,
                v,
                allowed.as_deref(),
                "in the variables file",
            );
        }
        let given = from_cli
            .or_else(|| (opts.env)(&format!("TERRAIN_VAR_{name}")).map(|v| (v, "TERRAIN_VAR_")));
        let origin = match &given {
            Some((_, from)) => format!("given with {from}"),
            None => "as its default".to_string(),
        };
        let (value, value_span) = match given {
            Some((text, from)) => self.given_value(name, span, &text, from, want, sensitive)?,
            None => self.default_value(name, span, default)?,
        };
        // Only a default can be of the wrong type: a given value is parsed as `ty`.
        if let Some(t) = &ty {
            if !value_is(&value, t) {
                self.err(Diagnostic::at(
                    value_span,
                    format!(
                        "variables.{name}: the default is {}, not {}",
                        with_article(type_of(&value)),
                        with_article(t)
                    ),
                    "wrong type",
                ));
                return None;
            }
        }
        let v = Variable {
            value,
            sensitive,
            span,
        };
        self.allowed(name, value_span, v, allowed.as_deref(), &origin)
    }

    /// `v` when `allowed` (the declaration's list) holds its value; otherwise an error
    /// at `at` listing the allowed values (a sensitive value is not shown).
    fn allowed(
        &mut self,
        name: &str,
        at: Span,
        v: Variable,
        allowed: Option<&[Value]>,
        origin: &str,
    ) -> Option<Variable> {
        let Some(allowed) = allowed else {
            return Some(v);
        };
        if allowed.contains(&v.value) {
            return Some(v);
        }
        let shown = if v.sensitive {
            "its value".to_string()
        } else {
            v.value.to_string()
        };
        let list: Vec<String> = allowed.iter().map(Value::to_string).collect();
        self.err(
            Diagnostic::at(
                at,
                format!(
                    "variables.{name}: {shown} ({origin}) is not one of its allowed values: {}",
                    list.join(", ")
                ),
                "not allowed",
            )
            .help(
                v.value
                    .as_str()
                    .filter(|_| !v.sensitive)
                    .and_then(|given| did_you_mean(given, allowed.iter().filter_map(Value::as_str)))
                    .unwrap_or_else(|| format!("pass one of them: --var {name}=…")),
            ),
        );
        None
    }

    /// The default of the variable `name` (declared at `span`), given no value; `None`
    /// when it has no default either (reported).
    fn default_value(
        &mut self,
        name: &str,
        span: Span,
        default: Option<(Value, Span)>,
    ) -> Option<(Value, Span)> {
        if default.is_none() {
            self.err(
                Diagnostic::at(
                    span,
                    format!("variables.{name} has no value"),
                    "needs a value",
                )
                .help(format!(
                    "pass --var {name}=VALUE, set TERRAIN_VAR_{name}, or give it a default"
                )),
            );
        }
        default
    }

    /// The declaration of the variable `name` written as `node`: a table of `default`,
    /// `type`, `description` and `sensitive`, or the default alone. `None` when the
    /// default holds references.
    fn variable_decl(&mut self, name: &str, node: &Node) -> Option<VariableDecl> {
        // The default and the type each with where they are written, so a problem
        // with one points at it rather than at the name.
        match &node.kind {
            NodeKind::Table(fields) => {
                let mut decl = VariableDecl {
                    default: None,
                    ty: None,
                    sensitive: false,
                    allowed: None,
                };
                for (k, kspan, v) in fields {
                    match k.as_str() {
                        "default" => match v.literal() {
                            Some(val) => decl.default = Some((val, v.span)),
                            None => self.err(Diagnostic::at(
                                v.span,
                                format!("variables.{name}: a default cannot hold references"),
                                "reference in a default",
                            )),
                        },
                        "type" => {
                            decl.ty = self
                                .literal_str(&format!("variables.{name}.type"), v)
                                .map(|t| (t, v.span))
                        }
                        "description" => {
                            self.literal_str(&format!("variables.{name}.description"), v);
                        }
                        "sensitive" => {
                            decl.sensitive =
                                self.literal_bool(&format!("variables.{name}.sensitive"), v)
                        }
                        "allowed" => match v.literal() {
                            Some(Value::Array(items)) if !items.is_empty() => {
                                decl.allowed = Some(items)
                            }
                            _ => self.err(
                                Diagnostic::at(
                                    v.span,
                                    format!("variables.{name}.allowed: expected a list of the values the variable may take"),
                                    "not a list of values",
                                )
                                .help("allowed = [\"capability\", \"self-managed\"]"),
                            ),
                        },
                        other => self.unknown_key(
                            &format!("variables.{name}"),
                            other,
                            *kspan,
                            &["default", "type", "description", "sensitive", "allowed"],
                        ),
                    }
                }
                Some(decl)
            }
            _ => match node.literal() {
                Some(v) => Some(VariableDecl {
                    default: Some((v, node.span)),
                    ty: None,
                    sensitive: false,
                    allowed: None,
                }),
                None => {
                    self.err(Diagnostic::at(
                        node.span,
                        format!("variables.{name}: a default cannot hold references"),
                        "reference in a default",
                    ));
                    None
                }
            },
        }
    }

    /// The variable `name` with the value a variables file gives it (`node`), which must
    /// be of type `want`; `None` when it is not (reported) or holds references.
    fn file_value(
        &mut self,
        name: &str,
        node: &Node,
        want: Option<&str>,
        sensitive: bool,
    ) -> Option<Variable> {
        let value = node.literal()?;
        if let Some(t) = want.filter(|t| !value_is(&value, t)) {
            let shown = if sensitive {
                "(sensitive value)".to_string()
            } else {
                describe_value(&value)
            };
            self.err(Diagnostic::at(
                node.span,
                format!("variables.{name}: {shown} is not {}", with_article(t)),
                "wrong type",
            ));
            return None;
        }
        Some(Variable {
            value,
            sensitive,
            span: node.span,
        })
    }

    /// The value `text` given to the variable `name` (declared at `span`) by `from`
    /// (`--var` or `TERRAIN_VAR_`), parsed as `want`; `None` when it does not parse
    /// (reported).
    fn given_value(
        &mut self,
        name: &str,
        span: Span,
        text: &str,
        from: &str,
        want: Option<&str>,
        sensitive: bool,
    ) -> Option<(Value, Span)> {
        match parse_var(text, want) {
            Some(v) => Some((v, span)),
            None => {
                // A secret's value is never shown, not even when it is wrong.
                let shown = if sensitive {
                    "(sensitive value)".to_string()
                } else {
                    format!("`{text}`")
                };
                self.err(Diagnostic::at(
                    span,
                    format!(
                        "variables.{name}: value from {from}{}: {shown} is not {}",
                        if from == "--var" { "" } else { name },
                        with_article(want.unwrap_or("string"))
                    ),
                    "this variable",
                ));
                None
            }
        }
    }

    fn resources(
        &mut self,
        raw: Vec<RawResource>,
        blocks: &super::expand::Blocks,
        providers: &BTreeMap<String, Node>,
        opts: &LoadOptions<'_>,
    ) -> BTreeMap<Address, ResourceConfig> {
        let mut out: BTreeMap<Address, ResourceConfig> = BTreeMap::new();
        let mut reported_kinds = BTreeSet::new();
        // Where each resource's `depends_on` is written, for errors about its targets.
        let mut depends_on_at: BTreeMap<Address, Span> = BTreeMap::new();
        for r in raw {
            let Some(resource) = opts.registry.get(&r.kind) else {
                if reported_kinds.insert((r.kind.clone(), r.kind_span)) {
                    let mut d = Diagnostic::at(
                        r.kind_span,
                        format!("unknown resource kind `{}`", r.kind),
                        "unknown kind",
                    );
                    d.help = did_you_mean(&r.kind, opts.registry.names().chain(RESERVED)).or_else(
                        || {
                            Some(format!(
                                "known kinds: {}",
                                opts.registry.names().collect::<Vec<_>>().join(", ")
                            ))
                        },
                    );
                    self.err(d);
                }
                continue;
            };
            let addr = Address::new(&r.kind, &r.name)
                .with_key(r.key.clone())
                .within(&r.module);
            if !is_identifier(&r.name) {
                self.err(Diagnostic::at(r.name_span, format!("{addr}: resource names start with a letter or `_` and hold letters, digits, `_` and `-`"), "invalid name"));
                continue;
            }
            if let Some(first) = out.get(&addr) {
                self.err(
                    Diagnostic::at(
                        r.name_span,
                        format!("{addr} is defined twice"),
                        "second definition",
                    )
                    .help(format!(
                        "the first is at {}",
                        self.sources.locate(first.span)
                    )),
                );
                continue;
            }
            let body_span = r.body.span;
            let entries = match r.body.kind {
                NodeKind::Table(entries) => entries,
                _ => {
                    self.err(Diagnostic::at(
                        body_span,
                        format!("{addr} must be a table"),
                        "expected a table",
                    ));
                    Vec::new()
                }
            };
            let mut fields = Vec::with_capacity(entries.len());
            let mut depends_on = Vec::new();
            let mut lifecycle = Lifecycle::default();
            let mut sensitive = Vec::new();
            let mut provider = resource.provider().to_string();
            let schema = resource.schema();
            for (key, kspan, value) in entries {
                match key.as_str() {
                    "depends_on" => {
                        depends_on_at.insert(addr.clone(), value.span);
                        depends_on = self.depends_on(&addr, &value);
                    }
                    "lifecycle" => lifecycle = self.lifecycle(&addr, &value, schema),
                    "sensitive" => {
                        sensitive = self.field_list(&format!("{addr}.sensitive"), &value, schema)
                    }
                    "provider" => {
                        if let Some(p) =
                            self.provider_instance(&addr, resource.provider(), &value, providers)
                        {
                            provider = p;
                        }
                    }
                    _ => fields.push((key, kspan, value)),
                }
            }
            let body = Node {
                span: body_span,
                kind: NodeKind::Table(fields),
            };
            self.check_fields(&addr.to_string(), &schema.fields, &body, r.name_span);
            out.insert(
                addr.clone(),
                ResourceConfig {
                    addr,
                    span: r.name_span,
                    body,
                    depends_on,
                    implied: Vec::new(),
                    lifecycle,
                    sensitive,
                    provider,
                    resource: resource.clone(),
                },
            );
        }
        // depends_on targets must exist: checked once every address is known. A block
        // with instances named without a key stands for all of them.
        let addrs: Vec<Address> = out.keys().cloned().collect();
        for addr in addrs {
            let Some(rc) = out.get_mut(&addr) else {
                continue;
            };
            let mut resolved = Vec::with_capacity(rc.depends_on.len());
            for dep in &rc.depends_on {
                let found = blocks.depends_on(dep);
                if found.is_empty() && !self.failed.contains(&dep.resource()) {
                    let span = depends_on_at.get(&rc.addr).copied().unwrap_or(rc.span);
                    let mut d = Diagnostic::at(
                        span,
                        format!(
                            "{}: depends_on names `{dep}`, which is not in the stack",
                            rc.addr
                        ),
                        "unknown resource",
                    );
                    d.help = suggest_address(dep, blocks.addresses());
                    self.diags.push(d);
                }
                resolved.extend(found);
            }
            rc.depends_on = resolved;
        }
        out
    }

    /// The provider instance a resource's `provider = "…"` names: its kind's provider
    /// (`gcp`) or an instance of it (`gcp.europe`) the stack configures.
    fn provider_instance(
        &mut self,
        addr: &Address,
        base: &str,
        node: &Node,
        providers: &BTreeMap<String, Node>,
    ) -> Option<String> {
        let what = format!("{addr}.provider");
        let name = self.literal_str(&what, node)?;
        let instances: Vec<&str> = providers
            .keys()
            .map(String::as_str)
            .filter(|p| {
                p.strip_prefix(base)
                    .is_some_and(|rest| rest.starts_with('.'))
            })
            .collect();
        if name == base || instances.contains(&name.as_str()) {
            return Some(name);
        }
        let problem = match name.split_once('.') {
            Some((other, _)) if other != base => format!(
                "{what}: `{name}` is an instance of provider {other}, but {} belongs to {base}",
                addr.kind
            ),
            _ => format!("{what}: no provider instance `{name}`"),
        };
        let mut d = Diagnostic::at(node.span, problem, "unknown provider instance");
        d.help = did_you_mean(&name, instances.iter().copied()).or_else(|| {
            Some(format!(
                "configure it as [providers.{base}.NAME] and write provider = \"{base}.NAME\"; this stack has: {}",
                std::iter::once(base).chain(instances.iter().copied()).collect::<Vec<_>>().join(", ")
            ))
        });
        self.err(d);
        None
    }

    fn depends_on(&mut self, addr: &Address, node: &Node) -> Vec<Address> {
        let what = format!("{addr}.depends_on");
        match &node.kind {
            NodeKind::Literal(Value::Array(items)) => {
                let mut out = Vec::new();
                for item in items {
                    match item.as_str().map(Address::parse) {
                        Some(Ok(a)) => out.push(a),
                        Some(Err(e)) => self.err(Diagnostic::at(
                            node.span,
                            format!("{what}: {e}"),
                            "not an address",
                        )),
                        None => self.err(Diagnostic::at(
                            node.span,
                            format!("{what} must list addresses as strings"),
                            "expected strings",
                        )),
                    }
                }
                out
            }
            _ => {
                self.err(Diagnostic::at(
                    node.span,
                    format!("{what} must be a list of addresses like [\"kind.name\"]"),
                    "expected a list",
                ));
                Vec::new()
            }
        }
    }

    fn field_list(&mut self, what: &str, node: &Node, schema: &Schema) -> Vec<String> {
        let names: Vec<&str> = schema.fields.iter().map(|f| f.name).collect();
        match &node.kind {
            NodeKind::Literal(Value::Array(items)) => {
                let mut out = Vec::new();
                for item in items {
                    let Some(path) = item.as_str() else {
                        self.err(Diagnostic::at(
                            node.span,
                            format!("{what} must list field names as strings"),
                            "expected strings",
                        ));
                        continue;
                    };
                    let parts: Vec<&str> = path.split('.').collect();
                    if schema.field_at(&parts).is_none() {
                        let mut d = Diagnostic::at(
                            node.span,
                            format!("{what}: no field `{path}`"),
                            "unknown field",
                        );
                        d.help = did_you_mean(path, names.iter().copied())
                            .or_else(|| Some(format!("fields: {}", names.join(", "))));
                        self.err(d);
                    } else {
                        out.push(path.to_string());
                    }
                }
                out
            }
            _ => {
                self.err(Diagnostic::at(
                    node.span,
                    format!("{what} must be a list of field names"),
                    "expected a list",
                ));
                Vec::new()
            }
        }
    }

    fn lifecycle(&mut self, addr: &Address, node: &Node, schema: &Schema) -> Lifecycle {
        let mut l = Lifecycle::default();
        for (key, kspan, value) in self.table(&format!("{addr}.lifecycle"), node).to_vec() {
            match key.as_str() {
                "prevent_destroy" => {
                    l.prevent_destroy =
                        self.literal_bool(&format!("{addr}.lifecycle.prevent_destroy"), &value)
                }
                "create_before_destroy" => {
                    l.create_before_destroy = self
                        .literal_bool(&format!("{addr}.lifecycle.create_before_destroy"), &value)
                }
                "ignore_changes" => {
                    l.ignore_changes =
                        self.field_list(&format!("{addr}.lifecycle.ignore_changes"), &value, schema)
                }
                other => self.unknown_key(
                    &format!("{addr}.lifecycle"),
                    other,
                    kspan,
                    &["prevent_destroy", "create_before_destroy", "ignore_changes"],
                ),
            }
        }
        l
    }

    /// Checks keys and literal types of a table against schema fields.
    fn check_fields(
        &mut self,
        what: &str,
        fields: &[terrain_providers::Field],
        node: &Node,
        header: Span,
    ) {
        let NodeKind::Table(entries) = &node.kind else {
            return;
        };
        let mut allowed: Vec<&str> = fields.iter().map(|f| f.name).collect();
        if what.contains('.') && !what.contains(".lifecycle") && fields.len() == allowed.len() {
            allowed.extend(
                META_KEYS
                    .iter()
                    .copied()
                    .filter(|_| !what[what.find('.').map_or(0, |i| i + 1)..].contains('.')),
            );
        }
        for (key, kspan, value) in entries {
            match fields.iter().find(|f| f.name == key) {
                Some(f) => self.check_type(&format!("{what}.{key}"), &f.ty, value),
                None => self.unknown_key(what, key, *kspan, &allowed),
            }
        }
        for f in fields.iter().filter(|f| f.required) {
            if !entries.iter().any(|(k, _, _)| k == f.name) {
                self.err(
                    Diagnostic::at(
                        header,
                        format!("{what}: missing required field `{}`", f.name),
                        "missing field",
                    )
                    .help(format!("`{}`: {}", f.name, f.doc)),
                );
            }
        }
    }

    fn check_type(&mut self, what: &str, ty: &Type, node: &Node) {
        match (&node.kind, ty) {
            (_, Type::Any) => {}
            (NodeKind::Literal(v), _) => {
                if !ty.accepts(v) {
                    if let (Type::Object(fields), Value::Object(_)) = (ty, v) {
                        // Literal tables are kept as nodes; only reached for inline empties.
                        let _ = fields;
                    }
                    self.err(Diagnostic::at(node.span, format!("{what}: expected {}, found {}", ty.describe(), describe_value(v)), format!("expected {}", ty.describe())));
                }
            }
            (NodeKind::Whole(_), _) => {} // checked with references
            (NodeKind::Template(_), Type::String) => {}
            (NodeKind::Template(_), _) => self.err(
                Diagnostic::at(node.span, format!("{what}: expected {}, found a string", ty.describe()), format!("expected {}", ty.describe()))
                    .help("a reference alone in a string (\"${var.x}\") keeps its value's type; text around it makes a string"),
            ),
            (NodeKind::List(items), Type::List(inner)) => {
                for (i, item) in items.iter().enumerate() {
                    self.check_type(&format!("{what}.{i}"), inner, item);
                }
            }
            (NodeKind::Table(entries), Type::Map(inner)) => {
                for (k, _, v) in entries {
                    self.check_type(&format!("{what}.{k}"), inner, v);
                }
            }
            (NodeKind::Table(_), Type::Object(fields)) => self.check_fields(what, fields, node, node.span),
            (NodeKind::List(_), _) => self.err(Diagnostic::at(node.span, format!("{what}: expected {}, found a list", ty.describe()), format!("expected {}", ty.describe()))),
            (NodeKind::Table(_), _) => self.err(Diagnostic::at(node.span, format!("{what}: expected {}, found a table", ty.describe()), format!("expected {}", ty.describe()))),
        }
    }

    /// Checks every reference in a resource body: target exists, attribute exists, and
    /// a whole-string reference's type fits the field.
    fn body_refs(
        &mut self,
        addr: &Address,
        body: &Node,
        vars: &BTreeMap<String, Variable>,
        resources: &BTreeMap<Address, ResourceConfig>,
        opts: &LoadOptions<'_>,
    ) {
        let schema = resources
            .get(addr)
            .map(|r| r.resource.schema().clone())
            .unwrap_or_default();
        if let NodeKind::Table(entries) = &body.kind {
            for (key, _, node) in entries {
                let ty = schema.field(key).map(|f| f.ty.clone()).unwrap_or(Type::Any);
                self.node_refs(&format!("{addr}.{key}"), node, &ty, vars, resources, opts);
            }
        }
    }

    fn node_refs(
        &mut self,
        what: &str,
        node: &Node,
        ty: &Type,
        vars: &BTreeMap<String, Variable>,
        resources: &BTreeMap<Address, ResourceConfig>,
        opts: &LoadOptions<'_>,
    ) {
        match &node.kind {
            NodeKind::Whole(r) => {
                if let Some(found) = self.check_ref(what, r, node.span, vars, resources, opts) {
                    if !types_fit(ty, &found) {
                        self.err(Diagnostic::at(
                            node.span,
                            format!(
                                "{what}: expected {}, but `${{{r}}}` is {}",
                                ty.describe(),
                                found.describe()
                            ),
                            format!("expected {}", ty.describe()),
                        ));
                    }
                }
            }
            NodeKind::Template(parts) => {
                for p in parts {
                    if let super::Part::Ref(r, span) = p {
                        self.check_ref(what, r, *span, vars, resources, opts);
                    }
                }
            }
            NodeKind::List(items) => {
                let inner = match ty {
                    Type::List(t) => (**t).clone(),
                    _ => Type::Any,
                };
                for item in items {
                    self.node_refs(what, item, &inner, vars, resources, opts);
                }
            }
            NodeKind::Table(entries) => {
                for (k, _, v) in entries {
                    let inner = match ty {
                        Type::Map(t) => (**t).clone(),
                        Type::Object(fields) => fields
                            .iter()
                            .find(|f| f.name == k)
                            .map_or(Type::Any, |f| f.ty.clone()),
                        _ => Type::Any,
                    };
                    self.node_refs(&format!("{what}.{k}"), v, &inner, vars, resources, opts);
                }
            }
            NodeKind::Literal(_) => {}
        }
    }

    /// Resolves a reference's target; returns the type it yields when known.
    fn check_ref(
        &mut self,
        what: &str,
        r: &Ref,
        span: Span,
        vars: &BTreeMap<String, Variable>,
        resources: &BTreeMap<Address, ResourceConfig>,
        opts: &LoadOptions<'_>,
    ) -> Option<Type> {
        match r {
            Ref::Var(name) => self.var_ref(what, name, span, vars),
            Ref::Env(name) => {
                if (opts.env)(name).is_none() {
                    self.err(
                        Diagnostic::at(
                            span,
                            format!("{what}: environment variable `{name}` is not set"),
                            "not set",
                        )
                        .help(format!("export {name}=… before running terrain")),
                    );
                    return None;
                }
                Some(Type::String)
            }
            Ref::Environment => Some(Type::String),
            Ref::Test {
                subject, choose, ..
            } => {
                self.check_ref(what, subject, span, vars, resources, opts)?;
                Some(if choose.is_some() {
                    Type::String
                } else {
                    Type::Bool
                })
            }
            // Where expansion did not replace them: outside any resource block.
            Ref::CountIndex | Ref::EachKey | Ref::EachValue(_) => {
                self.err(Diagnostic::at(
                    span,
                    format!("{what}: `${{{r}}}` is only known inside a resource block with `count` or `for_each`"),
                    "not available here",
                ));
                None
            }
            // A splat left in a string: reported when instances were resolved.
            Ref::Splat { .. } => None,
            // Outside resources and outputs (a provider table, a backend).
            Ref::Path { .. } => {
                self.err(Diagnostic::at(
                    span,
                    format!("{what}: `${{{r}}}` is only known in resources and outputs"),
                    "not available here",
                ));
                None
            }
            Ref::ModuleOutput { module, output } => {
                self.err(
                    Diagnostic::at(
                        span,
                        format!("{what}: no module call `{module}` with an output `{output}`"),
                        "unknown module",
                    )
                    .help("declare the call as [module.NAME] source = \"path/to/module\""),
                );
                None
            }
            Ref::Resource { addr, path } => self.resource_ref(what, addr, path, span, resources),
        }
    }

    /// Resolves a reference to the variable `name`; returns its value's type when it
    /// has one.
    fn var_ref(
        &mut self,
        what: &str,
        name: &str,
        span: Span,
        vars: &BTreeMap<String, Variable>,
    ) -> Option<Type> {
        match vars.get(name) {
            Some(v) => Some(type_of_value(&v.value)),
            None if self.declared_vars.contains(name) => None,
            None if name == super::module::FAILED_CALL => None,
            None => {
                let mut d = Diagnostic::at(
                    span,
                    format!("{what}: no variable `{name}`"),
                    "unknown variable",
                );
                d.help = did_you_mean(name, vars.keys().map(String::as_str))
                    .or_else(|| Some(format!("declare it under [variables]: {name} = \"…\"")));
                self.err(d);
                None
            }
        }
    }

    /// Resolves a reference to the attribute `path` of the resource `addr`; returns the
    /// attribute's type.
    fn resource_ref(
        &mut self,
        what: &str,
        addr: &Address,
        path: &[String],
        span: Span,
        resources: &BTreeMap<Address, ResourceConfig>,
    ) -> Option<Type> {
        let Some(target) = resources.get(addr) else {
            // A block with instances named wrongly was reported when the
            // references were checked against its instances.
            let block = addr.resource();
            if self.failed.contains(&block)
                || resources
                    .range(&block..)
                    .next()
                    .is_some_and(|(a, _)| a.resource() == block)
            {
                return None;
            }
            let mut d = Diagnostic::at(
                span,
                format!("{what}: reference to `{addr}`, which is not in the stack"),
                "unknown resource",
            );
            d.help = suggest_address(addr, resources.keys());
            self.err(d);
            return None;
        };
        let schema = target.resource.schema();
        let first = path[0].as_str();
        if first == "id" {
            return Some(Type::String);
        }
        let field = schema.field(first).or_else(|| schema.output(first));
        let Some(field) = field else {
            let mut attrs: Vec<&str> = vec!["id"];
            attrs.extend(schema.fields.iter().map(|f| f.name));
            attrs.extend(schema.outputs.iter().map(|f| f.name));
            let mut d = Diagnostic::at(
                span,
                format!("{what}: `{addr}` has no attribute `{first}`"),
                "unknown attribute",
            );
            d.help = did_you_mean(first, attrs.iter().copied())
                .or_else(|| Some(format!("attributes of {}: {}", addr.kind, attrs.join(", "))));
            self.err(d);
            return None;
        };
        self.nested_type(what, addr, path, span, field.ty.clone())
    }

    /// The type at `path[1..]` inside the attribute `path[0]` of `addr`, of type `ty`;
    /// `None` when a step names nothing there (reported).
    fn nested_type(
        &mut self,
        what: &str,
        addr: &Address,
        path: &[String],
        span: Span,
        mut ty: Type,
    ) -> Option<Type> {
        for part in &path[1..] {
            ty = match ty {
                Type::Object(fields) => match fields.iter().find(|f| f.name == part) {
                    Some(f) => f.ty.clone(),
                    None => {
                        self.err(Diagnostic::at(
                            span,
                            format!(
                                "{what}: `{addr}.{}` has no attribute `{part}`",
                                path.join(".")
                            ),
                            "unknown attribute",
                        ));
                        return None;
                    }
                },
                Type::Map(t) => *t,
                Type::List(t) if part.parse::<usize>().is_ok() => *t,
                Type::Any => Type::Any,
                other => {
                    self.err(Diagnostic::at(
                        span,
                        format!(
                            "{what}: `{addr}.{}` is {}, it has no `{part}`",
                            path.join("."),
                            other.describe()
                        ),
                        "not a table",
                    ));
                    return None;
                }
            };
        }
        Some(ty)
    }

    /// Checks outputs' keys and references (as a resource body's are), and that one
    /// showing a secret says so.
    fn outputs(
        &mut self,
        entries: &[Entry],
        vars: &BTreeMap<String, Variable>,
        resources: &BTreeMap<Address, ResourceConfig>,
        opts: &LoadOptions<'_>,
    ) -> BTreeMap<String, OutputConfig> {
        let mut out = BTreeMap::new();
        for (name, span, node) in entries {
            let (value, sensitive, description) = match &node.kind {
                NodeKind::Table(fields) if node.get("value").is_some() => {
                    let mut value = None;
                    let mut sensitive = false;
                    let mut description = None;
                    for (k, kspan, v) in fields {
                        match k.as_str() {
                            "value" => value = Some(v.clone()),
                            "sensitive" => {
                                sensitive =
                                    self.literal_bool(&format!("outputs.{name}.sensitive"), v)
                            }
                            "description" => {
                                description =
                                    self.literal_str(&format!("outputs.{name}.description"), v)
                            }
                            other => self.unknown_key(
                                &format!("outputs.{name}"),
                                other,
                                *kspan,
                                &["value", "sensitive", "description"],
                            ),
                        }
                    }
                    (
                        value.unwrap_or_else(|| node.clone()),
                        sensitive,
                        description,
                    )
                }
                _ => (node.clone(), false, None),
            };
            self.node_refs(
                &format!("outputs.{name}"),
                &value,
                &Type::Any,
                vars,
                resources,
                opts,
            );
            // An output showing a secret must say so, or `terrain output` would print it.
            if !sensitive {
                for (r, rspan) in value.refs() {
                    let secret = match r {
                        Ref::Var(v) => vars.get(v).is_some_and(|v| v.sensitive),
                        Ref::Test { subject, .. } => {
                            matches!(subject.as_ref(), Ref::Var(v) if vars.get(v).is_some_and(|v| v.sensitive))
                        }
                        Ref::Resource { addr, path } => resources.get(addr).is_some_and(|rc| {
                            let s = rc.resource.schema();
                            s.field(&path[0])
                                .or_else(|| s.output(&path[0]))
                                .is_some_and(|f| f.sensitive)
                                || rc.sensitive.iter().any(|p| p == &path[0])
                        }),
                        Ref::Env(_)
                        | Ref::Environment
                        | Ref::Splat { .. }
                        | Ref::CountIndex
                        | Ref::EachKey
                        | Ref::EachValue(_)
                        | Ref::ModuleOutput { .. }
                        | Ref::Path { .. } => false,
                    };
                    if secret {
                        self.err(
                            Diagnostic::at(
                                rspan,
                                format!("outputs.{name} shows the secret `${{{r}}}`"),
                                "sensitive value",
                            )
                            .help(format!(
                                "declare it as [outputs.{name}] value = \"…\", sensitive = true"
                            )),
                        );
                    }
                }
            }
            out.insert(
                name.clone(),
                OutputConfig {
                    value,
                    sensitive,
                    description,
                    span: *span,
                },
            );
        }
        out
    }

    fn cycles(&mut self, resources: &BTreeMap<Address, ResourceConfig>) {
        let deps: BTreeMap<Address, Vec<Address>> = resources
            .iter()
            .map(|(a, rc)| {
                (
                    a.clone(),
                    rc.dependencies()
                        .into_iter()
                        .filter(|d| resources.contains_key(d))
                        .collect(),
                )
            })
            .collect();
        for cycle in crate::graph::cycles(&deps) {
            let first = &cycle[0];
            let mut path: Vec<String> = cycle.iter().map(ToString::to_string).collect();
            path.push(first.to_string());
            let span = resources.get(first).map(|r| r.span);
            let msg = format!("dependency cycle: {}", path.join(" -> "));
            let d = match span {
                Some(s) => Diagnostic::at(s, msg, "part of the cycle"),
                None => Diagnostic::nowhere(msg),
            }
            .help("remove one of these references or depends_on entries");
            self.err(d);
        }
        // `dependencies()` leaves a resource's own address out (the engine's graph has
        // no self edges), so a resource using itself is found here, at each use.
        for (addr, rc) in resources {
            let cycle = format!("dependency cycle: {addr} -> {addr}");
            for (r, span) in rc.body.refs() {
                if matches!(r, Ref::Resource { addr: target, .. } if target == addr) {
                    self.err(
                        Diagnostic::at(span, cycle.clone(), "refers to its own resource")
                            .help(format!("{addr} cannot use its own attributes: they exist only once it does; use a variable or another resource")),
                    );
                }
            }
            if rc.depends_on.contains(addr) {
                self.err(
                    Diagnostic::at(rc.span, cycle.clone(), "depends on itself")
                        .help(format!("remove \"{addr}\" from its own depends_on")),
                );
            }
        }
    }

    /// Runs each kind's own offline checks through the desired-spec pipeline, as far as
    /// the spec is known without any API: variables and environment filled in, the
    /// stack's own configuration of referenced resources known (their fields), what
    /// only the cloud reports unknown. Resources go dependencies first, so each sees
    /// its peers' offline specs. Provider settings are checked at their table. Returns
    /// the API groups each resource provides and needs (see `api_groups`), and the
    /// cloud APIs it calls and turns on (see `services`).
    fn kind_validation(
        &mut self,
        resources: &BTreeMap<Address, ResourceConfig>,
        providers: &BTreeMap<String, Node>,
        vars: &BTreeMap<String, Variable>,
        opts: &LoadOptions<'_>,
    ) -> (
        BTreeMap<Address, terrain_providers::ApiGroups>,
        BTreeMap<Address, super::services::Services>,
    ) {
        let mut groups = BTreeMap::new();
        let mut services = BTreeMap::new();
        let (mut configs, broken) = self.provider_tables(providers, vars, opts);
        let deps: crate::graph::Deps = resources
            .iter()
            .map(|(a, rc)| (a.clone(), rc.dependencies()))
            .collect();
        // A spec is kept only while a resource still to be checked references it: a
        // stack of thousands holds its references' specs, not every spec.
        let mut waiting: BTreeMap<&Address, usize> = BTreeMap::new();
        for ds in deps.values() {
            for d in ds {
                *waiting.entry(d).or_default() += 1;
            }
        }
        let mut specs: BTreeMap<Address, desired::Desired> = BTreeMap::new();
        // The resources the providers' stack-wide checks read, kept whole.
        let wanted: BTreeSet<&str> = terrain_providers::registry::stack_kinds().collect();
        let mut across: Vec<(Address, desired::Desired, Value)> = Vec::new();
        for addr in crate::graph::topo_order(&deps) {
            let Some(rc) = resources.get(&addr) else {
                continue;
            };
            let done = |specs: &mut BTreeMap<Address, desired::Desired>,
                        waiting: &mut BTreeMap<&Address, usize>| {
                for d in deps.get(&addr).into_iter().flatten() {
                    if let Some(n) = waiting.get_mut(d) {
                        *n = n.saturating_sub(1);
                        if *n == 0 {
                            specs.remove(d);
                        }
                    }
                }
            };
            let provider = rc.provider.as_str();
            if !configs.contains_key(provider) && !providers.contains_key(provider) {
                // No table: what the environment gives, through the configure step.
                let configured = terrain_providers::registry::configure(
                    rc.resource.provider(),
                    Value::Object(serde_json::Map::new()),
                    opts.env,
                );
                configs.insert(provider, configured);
            }
            let empty = Value::Object(serde_json::Map::new());
            let config = configs.get(provider).unwrap_or(&empty);
            let peers = desired::peers(rc, resources, |a| specs.get(a).map(|d| &d.spec));
            let offline = desired::Offline {
                resources,
                specs: &specs,
            };
            let scope = desired::StackScope {
                variables: vars,
                env: opts.env,
                attributes: &offline,
            };
            let inputs = desired::Inputs {
                config,
                peers: &peers,
                prior: None,
            };
            let computed = desired::compute(rc, &scope, &inputs);
            done(&mut specs, &mut waiting);
            match computed {
                Ok(d) => {
                    let s = super::services::Services {
                        project: config["project"]
                            .as_str()
                            .map_or_else(|| rc.provider.clone(), str::to_string),
                        uses: rc.resource.services(&d.spec),
                        enables: rc.resource.enables(&d.spec),
                    };
                    if !s.uses.is_empty() || s.enables.is_some() {
                        services.insert(addr.clone(), s);
                    }
                    let g = rc.resource.api_groups(&d.spec);
                    if !g.is_empty() {
                        groups.insert(addr.clone(), g);
                    }
                    if wanted.contains(rc.resource.kind()) {
                        across.push((addr.clone(), d.clone(), config.clone()));
                    }
                    if waiting.get(&addr).is_some_and(|n| *n > 0) {
                        specs.insert(addr, d);
                    }
                }
                Err(desired::DesiredError::Evaluate(e)) => self.err(Diagnostic::at(
                    e.span,
                    format!("{addr}: {}", e.message),
                    "here",
                )),
                Err(desired::DesiredError::Check { problems }) => {
                    let provider = rc.resource.provider();
                    for invalid in problems.into_iter().filter(|p| {
                        !(broken.contains(provider)
                            && p.message.starts_with("provider configuration"))
                    }) {
                        let span = rc.body.at(&invalid.path).map_or(rc.span, |n| n.span);
                        let field = if invalid.path.is_empty() {
                            String::new()
                        } else {
                            format!(".{}", invalid.path.join("."))
                        };
                        self.err(Diagnostic::at(
                            span,
                            format!("{addr}{field}: {}", invalid.message),
                            "invalid value",
                        ));
                    }
                }
            }
        }
        if self.diags.is_empty() {
            self.across_resources(resources, vars, across);
        }
        (groups, services)
    }

    /// Each provider table evaluated with the variables and checked by its provider:
    /// the configurations resources are checked with, and the providers whose table has
    /// problems (each reported once, at the setting, not again by every resource that
    /// cannot use the table).
    fn provider_tables<'p>(
        &mut self,
        providers: &'p BTreeMap<String, Node>,
        vars: &BTreeMap<String, Variable>,
        opts: &LoadOptions<'_>,
    ) -> (BTreeMap<&'p str, Value>, BTreeSet<&'p str>) {
        let plain = desired::variables_only(vars, opts.env);
        let mut configs: BTreeMap<&str, Value> = BTreeMap::new();
        let mut broken: BTreeSet<&str> = BTreeSet::new();
        for (name, node) in providers {
            match eval::eval(node, &plain) {
                Ok(e) => {
                    let secrets = desired::secret_values(&e.value, &e.sensitive_paths);
                    let base = name.split_once('.').map_or(name.as_str(), |(b, _)| b);
                    let problems = opts.registry.validate_config(base, &e.value);
                    if !problems.is_empty() {
                        broken.insert(name.as_str());
                    }
                    for invalid in problems {
                        let span = node.at(&invalid.path).map_or(node.span, |n| n.span);
                        let field = if invalid.path.is_empty() {
                            String::new()
                        } else {
                            format!(".{}", invalid.path.join("."))
                        };
                        let dotted = invalid.path.join(".");
                        let at_secret = e
                            .sensitive_paths
                            .iter()
                            .any(|p| desired::overlaps(p, &dotted));
                        self.err(Diagnostic::at(
                            span,
                            format!(
                                "providers.{name}{field}: {}",
                                desired::hide(&invalid.message, &secrets, at_secret)
                            ),
                            "invalid setting",
                        ));
                    }
                    configs.insert(
                        name.as_str(),
                        terrain_providers::registry::configure(base, e.value, opts.env),
                    );
                }
                Err(e) => self.err(Diagnostic::at(
                    e.span,
                    format!("providers.{name}: {}", e.message),
                    "here",
                )),
            }
        }
        (configs, broken)
    }

    /// The providers' checks across resources (IAM chains, networks), on the specs
    /// computed above: errors at the field they concern, warnings kept for the plan.
    fn across_resources(
        &mut self,
        resources: &BTreeMap<Address, ResourceConfig>,
        vars: &BTreeMap<String, Variable>,
        across: Vec<(Address, desired::Desired, Value)>,
    ) {
        if across.is_empty() {
            return;
        }
        let mut secrets: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let view: Vec<terrain_providers::protocol::StackResource> = across
            .into_iter()
            .filter_map(|(addr, d, config)| {
                let rc = resources.get(&addr)?;
                secrets.insert(
                    addr.to_string(),
                    desired::secret_values(&d.spec, &d.sensitive),
                );
                let (mut refs, mut links) = (BTreeMap::new(), BTreeMap::new());
                written_refs(&rc.body, "", vars, &mut refs, &mut links);
                Some(terrain_providers::protocol::StackResource {
                    kind: rc.resource.kind().to_string(),
                    address: addr.to_string(),
                    spec: d.spec,
                    config,
                    refs,
                    links,
                })
            })
            .collect();
        for f in terrain_providers::registry::check_stack(&view) {
            let hidden = secrets
                .get(&f.address)
                .map_or(f.message.clone(), |s| desired::hide(&f.message, s, false));
            let field = if f.path.is_empty() {
                String::new()
            } else {
                format!(".{}", f.path)
            };
            let message = format!("{}{field}: {hidden}", f.address);
            match f.severity {
                terrain_providers::Severity::Warning => self.warnings.push(message),
                terrain_providers::Severity::Error => {
                    let rc = resources.iter().find(|(a, _)| a.to_string() == f.address);
                    let span = rc.map(|(_, rc)| {
                        let path: Vec<String> = if f.path.is_empty() {
                            Vec::new()
                        } else {
                            f.path.split('.').map(str::to_string).collect()
                        };
                        rc.body.at(&path).map_or(rc.span, |n| n.span)
                    });
                    match span {
                        Some(span) => self.err(Diagnostic::at(span, message, "refused at plan")),
                        None => self.err(Diagnostic::nowhere(message)),
                    }
                }
            }
        }
    }
}

/// Every value of `node` that references something, as written (`${iam_role.x.arn}`,
/// `s3://${s3_bucket.b.name}`), by dotted path; non-sensitive variables written in.
fn written_refs(
    node: &Node,
    path: &str,
    vars: &BTreeMap<String, Variable>,
    out: &mut BTreeMap<String, String>,
    links: &mut BTreeMap<String, (String, String)>,
) {
    use super::expr::Part;
    let join = |k: &str| {
        if path.is_empty() {
            k.to_string()
        } else {
            format!("{path}.{k}")
        }
    };
    match &node.kind {
        NodeKind::Literal(_) => {}
        NodeKind::Whole(r) => {
            out.insert(path.to_string(), format!("${{{r}}}"));
            if let Ref::Resource { addr, path: attr } = r {
                links.insert(path.to_string(), (addr.to_string(), attr.join(".")));
            }
        }
        NodeKind::Template(parts) => {
            let text: String = parts
                .iter()
                .map(|p| match p {
                    Part::Lit(l) => l.replace("${", "$${"),
                    // A variable's value is known: written in (a secret stays a
                    // reference, so no check ever shows it).
                    Part::Ref(Ref::Var(name), _) => match vars.get(name) {
                        Some(v) if !v.sensitive => match &v.value {
                            Value::String(text) => text.replace("${", "$${"),
                            Value::Number(n) => n.to_string(),
                            Value::Bool(b) => b.to_string(),
                            _ => format!("${{var.{name}}}"),
                        },
                        _ => format!("${{var.{name}}}"),
                    },
                    Part::Ref(r, _) => format!("${{{r}}}"),
                })
                .collect();
            out.insert(path.to_string(), text);
        }
        NodeKind::List(items) => {
            for (i, n) in items.iter().enumerate() {
                written_refs(n, &join(&i.to_string()), vars, out, links);
            }
        }
        NodeKind::Table(entries) => {
            for (k, _, n) in entries {
                written_refs(n, &join(k), vars, out, links);
            }
        }
    }
}

/// A did-you-mean for a mistyped address: by name among resources of the same kind,
/// else by the whole address.
fn suggest_address<'a>(
    wrong: &Address,
    known: impl Iterator<Item = &'a Address>,
) -> Option<String> {
    let known: Vec<&Address> = known.collect();
    let same_kind: Vec<&str> = known
        .iter()
        .filter(|a| a.kind == wrong.kind)
        .map(|a| a.name.as_str())
        .collect();
    if let Some(name) = did_you_mean(&wrong.name, same_kind.iter().copied()) {
        return Some(
            name.replace('`', "")
                .replace("did you mean ", &format!("did you mean `{}.", wrong.kind))
                .replace('?', "`?"),
        );
    }
    let all: Vec<String> = known
        .iter()
        .filter(|a| a.kind != wrong.kind)
        .map(ToString::to_string)
        .collect();
    did_you_mean(&wrong.to_string(), all.iter().map(String::as_str))
}

fn describe_value(v: &Value) -> String {
    match v {
        Value::String(s) => format!("the string \"{s}\""),
        Value::Number(n) => format!("the number {n}"),
        Value::Bool(b) => format!("{b}"),
        other => format!("a {}", type_of(other)),
    }
}

fn type_of_value(v: &Value) -> Type {
    match v {
        Value::String(_) => Type::String,
        Value::Bool(_) => Type::Bool,
        Value::Number(n) if n.is_f64() => Type::Float,
        Value::Number(_) => Type::Int,
        _ => Type::Any,
    }
}

fn types_fit(want: &Type, got: &Type) -> bool {
    match (want, got) {
        (Type::Any, _) | (_, Type::Any) => true,
        (Type::Float, Type::Int) => true,
        (Type::List(a), Type::List(b)) | (Type::Map(a), Type::Map(b)) => types_fit(a, b),
        (Type::Object(_), Type::Object(_))
        | (Type::Object(_), Type::Map(_))
        | (Type::Map(_), Type::Object(_)) => true,
        (a, b) => a == b,
    }
}

fn type_name_of(v: &Value) -> &'static str {
    match v {
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::Array(_) => "list",
        Value::Object(_) => "table",
        _ => "string",
    }
}

fn value_is(v: &Value, ty: &str) -> bool {
    match ty {
        "string" => v.is_string(),
        "number" => v.is_number(),
        "integer" => v.is_i64() || v.is_u64(),
        "bool" => v.is_boolean(),
        "list" => v.is_array(),
        "table" => v.is_object(),
        _ => true,
    }
}

/// A variable's value given on the command line or in the environment: strings as they
/// are; other types parsed as a TOML value (`3`, `true`, `["a", "b"]`). `None` when the
/// text is not a value of type `ty`.
fn parse_var(text: &str, ty: Option<&str>) -> Option<Value> {
    match ty {
        None | Some("string") => Some(Value::String(text.to_string())),
        Some(t) => {
            let doc = format!("v = {text}");
            let parsed = toml::de::DeTable::parse(&doc).ok()?;
            let v = toml_to_json(parsed.get_ref().get("v")?).ok()?;
            value_is(&v, t).then_some(v)
        }
    }
}

/// `a string`, `an integer`: a type name with its article, for messages.
fn with_article(t: &str) -> String {
    let article = if t.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    };
    format!("{article} {t}")
}
