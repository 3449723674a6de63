//! Modules: a `[module.NAME]` call puts the resources of a module directory into the
//! stack under `module.NAME.` (`module.NAME[KEY].` per instance when the call has
//! `count` or `for_each`). Inside, `${var.x}` is the call's argument for `x` (as
//! written at the call, so a problem with it points there), references to the
//! module's own resources gain the call's prefix, and `${module.NAME.OUTPUT}` outside
//! is the output's value as the module writes it. Nothing stays of the module
//! boundary once this has run: the engine sees resources with longer addresses, and
//! every problem inside a module is located in the module's file and named by the
//! full address.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use serde_json::Value;

use super::expand::{self, Instance, Repeat};
use super::expr::{Node, NodeKind, Part, Ref};
use super::load::{Entry, RawCall, RawModule, RawResource};
use super::source::{did_you_mean, Diagnostic, Span};
use super::{LoadOptions, Variable};
use crate::addr::{Address, Key, ModuleStep};

/// Keys of a module call that are not arguments.
const CALL_KEYS: [&str; 4] = ["source", "count", "for_each", "provider"];

/// The variable a failed call's outputs stand for: no variable can have this name,
/// and the checks pass over it (the call's own problem is already reported, and the
/// stack is refused).
pub const FAILED_CALL: &str = "\u{0}failed module call";

/// How deep modules may nest: deeper is a module calling itself, directly or not.
const MAX_DEPTH: usize = 16;

/// The outputs of each module call instance, by its step.
type Outputs = BTreeMap<ModuleStep, BTreeMap<String, Node>>;

/// What the stack's modules add: their resources (addressed under their calls) and
/// their `[[moved]]` entries (addresses already prefixed).
pub struct Inlined {
    pub resources: Vec<RawResource>,
    pub moved: Vec<Node>,
}

/// The stack's module calls and every module they reach.
pub struct Calls<'a> {
    /// The stack's directory, canonical.
    pub dir: &'a std::path::Path,
    pub calls: &'a [RawCall],
    pub modules: &'a BTreeMap<PathBuf, RawModule>,
}

/// Inlines every module call of the stack, and replaces `${module.…}` references in
/// the stack's own resources and outputs by the modules' outputs.
pub fn inline(
    stack: &Calls<'_>,
    resources: &mut [RawResource],
    outputs: &mut [Entry],
    vars: &BTreeMap<String, Variable>,
    refused: &BTreeSet<String>,
    opts: &LoadOptions<'_>,
    diags: &mut Vec<Diagnostic>,
) -> Inlined {
    let mut out = Inlined {
        resources: Vec::new(),
        moved: Vec::new(),
    };
    let root = Rewriter {
        path: Vec::new(),
        args: None,
        outputs: BTreeMap::new(),
        calls: BTreeMap::new(),
        providers: BTreeMap::new(),
        dir: ".".to_string(),
    };
    let ctx = Context {
        modules: stack.modules,
        vars,
        refused,
        opts,
        root: stack
            .dir
            .canonicalize()
            .unwrap_or_else(|_| stack.dir.to_path_buf()),
    };
    let (outs, repeats) = ctx.calls(stack.calls, &root, &mut out, diags);
    let root = Rewriter {
        outputs: outs,
        calls: repeats,
        ..root
    };
    // Only what reads a module output or `${path.…}` changes: the rest is left as is.
    let touched = |r: &Ref| matches!(r, Ref::ModuleOutput { .. } | Ref::Path { .. });
    for r in resources.iter_mut().filter(|r| r.body.any_ref(&touched)) {
        let what = Address::new(&r.kind, &r.name).to_string();
        r.body = root.rewrite(&what, &r.body, &mut BTreeSet::new(), diags);
    }
    for (name, _, node) in outputs.iter_mut() {
        *node = root.rewrite(&format!("output.{name}"), node, &mut BTreeSet::new(), diags);
    }
    out
}

struct Context<'a> {
    modules: &'a BTreeMap<PathBuf, RawModule>,
    vars: &'a BTreeMap<String, Variable>,
    /// Variables declared whose value was refused (reported): see `expand`.
    refused: &'a BTreeSet<String>,
    opts: &'a LoadOptions<'a>,
    /// The stack's directory, canonical: `${path.module}` is relative to it.
    root: PathBuf,
}

impl Context<'_> {
    /// Expands `calls` written in the context `parent` (whose arguments, prefix and
    /// nested outputs apply to the calls' own arguments); returns the outputs of each
    /// call instance and how each call is repeated.
    fn calls(
        &self,
        calls: &[RawCall],
        parent: &Rewriter,
        out: &mut Inlined,
        diags: &mut Vec<Diagnostic>,
    ) -> (Outputs, BTreeMap<String, Repeat>) {
        let mut outputs = Outputs::new();
        let mut repeats = BTreeMap::new();
        if parent.path.len() >= MAX_DEPTH {
            if let Some(c) = calls.first() {
                diags.push(
                    Diagnostic::at(
                        c.name_span,
                        format!(
                            "{}: modules nest more than {MAX_DEPTH} deep",
                            prefix(&parent.path)
                        ),
                        "too deep",
                    )
                    .help("a module calls itself, directly or through others"),
                );
            }
            return (outputs, repeats);
        }
        // A call may take another's outputs: expand those first.
        for call in order(calls, diags) {
            let Some(dir) = &call.source else { continue };
            let Some(module) = self.modules.get(dir) else {
                continue;
            };
            let here = format!("{}module.{}", prefix(&parent.path), call.name);
            // The call's own arguments are written in the parent's context.
            let sibling = Rewriter {
                outputs: outputs.clone(),
                calls: repeats.clone(),
                path: parent.path.clone(),
                args: parent.args.clone(),
                providers: parent.providers.clone(),
                dir: parent.dir.clone(),
            };
            let mut body = sibling.rewrite(&here, &call.body, &mut BTreeSet::new(), diags);
            let Some(repeat) =
                expand::take_repeat(&here, &mut body, self.vars, self.refused, self.opts, diags)
            else {
                continue;
            };
            let for_each = expand::for_each_nodes(&body);
            for key in repeat.keys() {
                let instance = match &key {
                    None => Instance::None,
                    Some(Key::Index(i)) => Instance::Count(*i),
                    Some(Key::Name(k)) => match for_each.iter().find(|(fk, _)| fk == k) {
                        Some((k, v)) => Instance::Each(k, v),
                        None => continue,
                    },
                };
                let step = ModuleStep {
                    name: call.name.clone(),
                    key: key.clone(),
                };
                let what = format!("{}{step}", prefix(&parent.path));
                let args = expand::substitute(&body, &instance, &what, diags);
                let mut path = parent.path.clone();
                path.push(step.clone());
                let providers = call_providers(&here, &args, &parent.providers, diags);
                let made = self.instance((call, module), path, &args, providers, out, diags);
                outputs.insert(step, made);
            }
            repeats.insert(call.name.clone(), repeat);
        }
        (outputs, repeats)
    }

    /// One instance of a module call at `path`, with arguments `args` (the call's
    /// body, already in the stack's terms): adds its resources, returns its outputs.
    fn instance(
        &self,
        (call, module): (&RawCall, &RawModule),
        path: Vec<ModuleStep>,
        args: &Node,
        providers: BTreeMap<String, String>,
        out: &mut Inlined,
        diags: &mut Vec<Diagnostic>,
    ) -> BTreeMap<String, Node> {
        let what = prefix(&path);
        let what = what.trim_end_matches('.');
        let given: Vec<(String, Span, Node)> = match &args.kind {
            NodeKind::Table(entries) => entries
                .iter()
                .filter(|(k, _, _)| !CALL_KEYS.contains(&k.as_str()) && !k.starts_with('\0'))
                .cloned()
                .collect(),
            _ => Vec::new(),
        };
        let declared = declarations(&module.variables);
        let reported = diags.len();
        for (name, span, _) in &given {
            if !declared.contains_key(name) {
                let mut d = Diagnostic::at(
                    *span,
                    format!("{what}: the module has no variable `{name}`"),
                    "unknown argument",
                );
                d.help = did_you_mean(name, declared.keys().map(String::as_str)).or_else(|| {
                    Some(format!(
                        "its variables: {}",
                        declared.keys().cloned().collect::<Vec<_>>().join(", ")
                    ))
                });
                diags.push(d);
            }
        }
        let mut values: BTreeMap<String, Arg> = BTreeMap::new();
        for (name, decl) in &declared {
            let node = given
                .iter()
                .find(|(n, _, _)| n == name)
                .map(|(_, _, node)| node.clone())
                .or_else(|| decl.default.clone());
            match node {
                Some(node) => {
                    values.insert(
                        name.clone(),
                        Arg {
                            node,
                            sensitive: decl.sensitive,
                        },
                    );
                }
                None => diags.push(
                    Diagnostic::at(
                        call.name_span,
                        format!("{what}: variable `{name}` is required (it has no default)"),
                        "missing argument",
                    )
                    .help(format!("add {name} = … to the call")),
                ),
            }
        }
        if diags.len() > reported {
            // A call with wrong arguments adds nothing (each problem is reported once
            // at the call); its outputs hold a placeholder nothing checks further.
            return module
                .outputs
                .iter()
                .map(|(name, span, _)| {
                    let failed = Node {
                        span: *span,
                        kind: NodeKind::Whole(Ref::Var(FAILED_CALL.to_string())),
                    };
                    (name.clone(), failed)
                })
                .collect();
        }
        let inner = Rewriter {
            path: path.clone(),
            args: Some(values),
            outputs: BTreeMap::new(),
            calls: BTreeMap::new(),
            providers,
            dir: call
                .source
                .as_deref()
                .map_or_else(|| ".".to_string(), |d| relative(&self.root, d)),
        };
        let (nested, repeats) = self.calls(&module.calls, &inner, out, diags);
        let inner = Rewriter {
            outputs: nested,
            calls: repeats,
            ..inner
        };
        for r in &module.resources {
            let name = Address::new(&r.kind, &r.name).within(&path).to_string();
            let mut secret_fields = BTreeSet::new();
            let mut body = inner.rewrite(&name, &r.body, &mut secret_fields, diags);
            inner.prefix_meta(&mut body, &secret_fields);
            let base = self.opts.registry.get(&r.kind).map(|k| k.provider());
            if let Some(instance) = base.and_then(|b| inner.providers.get(b)) {
                set_default_provider(&mut body, instance);
            }
            out.resources.push(RawResource {
                body,
                module: path.clone(),
                ..r.clone()
            });
        }
        for m in &module.moved {
            out.moved.push(inner.prefix_moved(m));
        }
        let mut outputs = BTreeMap::new();
        for (name, _, node) in &module.outputs {
            let value = match &node.kind {
                NodeKind::Table(_) => match node.get("value") {
                    Some(v) => v,
                    None => {
                        diags.push(Diagnostic::at(
                            node.span,
                            format!("{what}: output `{name}` has no `value`"),
                            "no value",
                        ));
                        continue;
                    }
                },
                _ => node,
            };
            let rewritten = inner.rewrite(
                &format!("{what}.output.{name}"),
                value,
                &mut BTreeSet::new(),
                diags,
            );
            outputs.insert(name.clone(), rewritten);
        }
        outputs
    }
}

/// A module variable as declared: its default and whether it is secret.
struct Declared {
    default: Option<Node>,
    sensitive: bool,
}

/// The module's `[variables]`: `name = default`, or a table with `default`, `type`,
/// `description` and `sensitive`.
fn declarations(entries: &[Entry]) -> BTreeMap<String, Declared> {
    entries
        .iter()
        .map(|(name, _, node)| {
            let declared = match &node.kind {
                NodeKind::Table(_) => Declared {
                    default: node.get("default").cloned(),
                    sensitive: node
                        .get("sensitive")
                        .and_then(Node::literal)
                        .is_some_and(|v| v == Value::Bool(true)),
                },
                _ => Declared {
                    default: Some(node.clone()),
                    sensitive: false,
                },
            };
            (name.clone(), declared)
        })
        .collect()
}

/// A module variable's value at one call: the argument as written there.
#[derive(Clone)]
struct Arg {
    node: Node,
    sensitive: bool,
}

/// How the values of one context (the stack, or one module call instance) are put in
/// the stack's terms.
struct Rewriter {
    /// The module calls this context is under.
    path: Vec<ModuleStep>,
    /// The module's variables (`None` for the stack itself, whose variables stay).
    args: Option<BTreeMap<String, Arg>>,
    /// The outputs of the calls made in this context, per instance.
    outputs: Outputs,
    /// How each call made in this context is repeated.
    calls: BTreeMap<String, Repeat>,
    /// The provider instance each provider's resources use here unless they name one
    /// (`provider = "gcp.europe"` on the call, or on a call above it), by provider.
    providers: BTreeMap<String, String>,
    /// `${path.module}`: this context's directory, relative to the stack's.
    dir: String,
}

impl Rewriter {
    /// `node` in the stack's terms; top-level fields that took a sensitive module
    /// variable are added to `secret`.
    fn rewrite(
        &self,
        what: &str,
        node: &Node,
        secret: &mut BTreeSet<String>,
        diags: &mut Vec<Diagnostic>,
    ) -> Node {
        self.rewrite_at(what, node, None, secret, diags)
    }

    fn rewrite_at(
        &self,
        what: &str,
        node: &Node,
        field: Option<&str>,
        secret: &mut BTreeSet<String>,
        diags: &mut Vec<Diagnostic>,
    ) -> Node {
        let kind = match &node.kind {
            NodeKind::Literal(_) => return node.clone(),
            NodeKind::Whole(r) => match self.value_of(what, r, node.span, field, secret, diags) {
                Some(replacement) => return replacement,
                None => NodeKind::Whole(self.moved_ref(r)),
            },
            NodeKind::Template(parts) => {
                let mut out: Vec<Part> = Vec::with_capacity(parts.len());
                for p in parts {
                    match p {
                        Part::Lit(l) => expand::push_text(&mut out, l),
                        Part::Ref(r, span) => {
                            match self.value_of(what, r, *span, field, secret, diags) {
                                Some(replacement) => {
                                    expand::splice(what, &mut out, &replacement, r, *span, diags)
                                }
                                None => out.push(Part::Ref(self.moved_ref(r), *span)),
                            }
                        }
                    }
                }
                match out.as_slice() {
                    [Part::Lit(s)] => NodeKind::Literal(Value::String(s.clone())),
                    _ => NodeKind::Template(out),
                }
            }
            NodeKind::List(items) => NodeKind::List(
                items
                    .iter()
                    .map(|n| self.rewrite_at(what, n, field, secret, diags))
                    .collect(),
            ),
            NodeKind::Table(entries) => NodeKind::Table(
                entries
                    .iter()
                    .map(|(k, s, n)| {
                        let field = field.or(Some(k.as_str()));
                        (
                            k.clone(),
                            *s,
                            self.rewrite_at(what, n, field, secret, diags),
                        )
                    })
                    .collect(),
            ),
        };
        Node {
            span: node.span,
            kind,
        }
    }

    /// What replaces reference `r` wholesale: a module variable's argument, or a
    /// module output's value. `None` when `r` stays a reference.
    fn value_of(
        &self,
        what: &str,
        r: &Ref,
        span: Span,
        field: Option<&str>,
        secret: &mut BTreeSet<String>,
        diags: &mut Vec<Diagnostic>,
    ) -> Option<Node> {
        match r {
            Ref::Var(name) => {
                let args = self.args.as_ref()?;
                match args.get(name) {
                    Some(arg) => {
                        if arg.sensitive {
                            if let Some(f) = field {
                                secret.insert(f.to_string());
                            }
                        }
                        Some(arg.node.clone())
                    }
                    None => {
                        let mut d = Diagnostic::at(
                            span,
                            format!("{what}: the module has no variable `{name}`"),
                            "unknown variable",
                        );
                        d.help =
                            did_you_mean(name, args.keys().map(String::as_str)).or_else(|| {
                                Some(format!(
                                    "declare it in the module's [variables]: {name} = …"
                                ))
                            });
                        diags.push(d);
                        Some(null_at(span))
                    }
                }
            }
            Ref::Path { module } => Some(Node {
                span,
                kind: NodeKind::Literal(Value::String(if *module {
                    self.dir.clone()
                } else {
                    ".".to_string()
                })),
            }),
            // A test of a module variable: decided by the argument when it is written
            // out, carried up when it is itself a value known at plan.
            Ref::Test { subject, .. } if matches!(subject.as_ref(), Ref::Var(_)) => {
                let arg = self.value_of(what, subject, span, field, secret, diags)?;
                let kind = match arg.kind {
                    NodeKind::Literal(v) => NodeKind::Literal(r.decide(&v).unwrap_or(Value::Null)),
                    NodeKind::Whole(inner @ (Ref::Var(_) | Ref::Env(_) | Ref::Environment)) => {
                        let mut carried = r.clone();
                        if let Ref::Test { subject, .. } = &mut carried {
                            **subject = inner;
                        }
                        NodeKind::Whole(carried)
                    }
                    _ => {
                        diags.push(Diagnostic::at(
                            span,
                            format!("{what}: `${{{r}}}` tests `{subject}`, whose argument is not known at plan"),
                            "not known at plan",
                        ).help("pass the module a literal, a variable or the environment for it"));
                        return Some(null_at(span));
                    }
                };
                Some(Node { span, kind })
            }
            Ref::ModuleOutput { module, output } => {
                let found = self.outputs.get(module).and_then(|o| o.get(output));
                if let Some(node) = found {
                    return Some(node.clone());
                }
                diags.push(self.output_problem(what, module, output, span));
                Some(null_at(span))
            }
            _ => None,
        }
    }

    fn output_problem(
        &self,
        what: &str,
        module: &ModuleStep,
        output: &str,
        span: Span,
    ) -> Diagnostic {
        let named = format!("{}{module}", prefix(&self.path));
        let Some(repeat) = self.calls.get(&module.name) else {
            let mut d = Diagnostic::at(
                span,
                format!("{what}: no module call `{named}`"),
                "unknown module",
            );
            d.help =
                did_you_mean(&module.name, self.calls.keys().map(String::as_str)).or_else(|| {
                    Some("declare the call as [module.NAME] source = \"path/to/module\"".into())
                });
            return d;
        };
        if !repeat.keys().contains(&module.key) {
            let keys: Vec<String> = repeat
                .keys()
                .into_iter()
                .map(|k| k.map_or_else(String::new, |k| k.to_string()))
                .collect();
            return Diagnostic::at(
                span,
                format!("{what}: `{named}` is not an instance of the call"),
                "no such instance",
            )
            .help(match repeat {
                Repeat::Single => format!("write `module.{}.{output}`", module.name),
                _ => format!("its instances: {}", keys.join(", ")),
            });
        }
        let known: Vec<&str> = self
            .outputs
            .get(module)
            .map(|o| o.keys().map(String::as_str).collect())
            .unwrap_or_default();
        let mut d = Diagnostic::at(
            span,
            format!("{what}: `{named}` has no output `{output}`"),
            "unknown output",
        );
        d.help = did_you_mean(output, known.iter().copied())
            .or_else(|| Some(format!("its outputs: {}", known.join(", "))));
        d
    }

    /// A reference that stays, in the stack's terms: a module's resources gain the
    /// call's prefix.
    fn moved_ref(&self, r: &Ref) -> Ref {
        match r {
            Ref::Resource { addr, path } => Ref::Resource {
                addr: addr.clone().within(&self.path),
                path: path.clone(),
            },
            Ref::Splat { addr, path } => Ref::Splat {
                addr: addr.clone().within(&self.path),
                path: path.clone(),
            },
            other => other.clone(),
        }
    }

    /// Prefixes the addresses a module resource's `depends_on` names, and adds the
    /// fields that took a sensitive variable to its `sensitive` list.
    fn prefix_meta(&self, body: &mut Node, secret: &BTreeSet<String>) {
        let NodeKind::Table(entries) = &mut body.kind else {
            return;
        };
        for (key, _, value) in entries.iter_mut() {
            if key == "depends_on" {
                if let NodeKind::Literal(Value::Array(items)) = &mut value.kind {
                    for item in items.iter_mut() {
                        if let Some(a) = item.as_str().and_then(|s| Address::parse(s).ok()) {
                            *item = Value::String(a.within(&self.path).to_string());
                        }
                    }
                }
            }
        }
        if secret.is_empty() {
            return;
        }
        let span = body.span;
        let NodeKind::Table(entries) = &mut body.kind else {
            return;
        };
        match entries.iter_mut().find(|(k, _, _)| k == "sensitive") {
            Some((
                _,
                _,
                Node {
                    kind: NodeKind::Literal(Value::Array(items)),
                    ..
                },
            )) => {
                for f in secret {
                    if !items.iter().any(|i| i.as_str() == Some(f)) {
                        items.push(Value::String(f.clone()));
                    }
                }
            }
            Some(_) => {}
            None => entries.push((
                "sensitive".to_string(),
                span,
                Node {
                    span,
                    kind: NodeKind::Literal(Value::Array(
                        secret.iter().map(|f| Value::String(f.clone())).collect(),
                    )),
                },
            )),
        }
    }

    /// A module's `[[moved]]` entry with its addresses under the call.
    fn prefix_moved(&self, entry: &Node) -> Node {
        let mut entry = entry.clone();
        if let NodeKind::Table(fields) = &mut entry.kind {
            for (key, _, value) in fields.iter_mut() {
                if key != "from" && key != "to" {
                    continue;
                }
                if let NodeKind::Literal(Value::String(s)) = &mut value.kind {
                    let steps = prefix(&self.path);
                    *s = format!("{steps}{s}");
                }
            }
        }
        entry
    }
}

/// The provider instances a call's resources use: the caller's, with the call's own
/// `provider = "gcp.europe"` (or a list of them, one per provider) laid over them.
fn call_providers(
    what: &str,
    args: &Node,
    inherited: &BTreeMap<String, String>,
    diags: &mut Vec<Diagnostic>,
) -> BTreeMap<String, String> {
    let mut out = inherited.clone();
    let Some(node) = args.get("provider") else {
        return out;
    };
    let names: Vec<Value> = match node.literal() {
        Some(Value::Array(items)) => items,
        Some(v @ Value::String(_)) => vec![v],
        _ => {
            diags.push(Diagnostic::at(
                node.span,
                format!("{what}.provider: expected a provider instance like \"gcp.europe\", or a list of them"),
                "not a provider instance",
            ));
            return out;
        }
    };
    for name in names {
        let Some(name) = name.as_str() else { continue };
        let base = name.split_once('.').map_or(name, |(b, _)| b);
        out.insert(base.to_string(), name.to_string());
    }
    out
}

/// Gives a module resource the call's provider instance unless it names its own.
fn set_default_provider(body: &mut Node, instance: &str) {
    let span = body.span;
    if let NodeKind::Table(entries) = &mut body.kind {
        if entries.iter().any(|(k, _, _)| k == "provider") {
            return;
        }
        entries.push((
            "provider".to_string(),
            span,
            Node {
                span,
                kind: NodeKind::Literal(Value::String(instance.to_string())),
            },
        ));
    }
}

/// `to` relative to `from` (both canonical directories), `/`-separated: `../modules/x`.
fn relative(from: &std::path::Path, to: &std::path::Path) -> String {
    let from: Vec<_> = from.components().collect();
    let to: Vec<_> = to.components().collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut parts: Vec<String> = vec!["..".to_string(); from.len() - common];
    parts.extend(
        to[common..]
            .iter()
            .map(|c| c.as_os_str().to_string_lossy().into_owned()),
    );
    if parts.is_empty() {
        ".".to_string()
    } else {
        parts.join("/")
    }
}

/// `module.a.module.b[0].` for a path (empty for the stack itself).
fn prefix(path: &[ModuleStep]) -> String {
    path.iter().map(|s| format!("{s}.")).collect()
}

fn null_at(span: Span) -> Node {
    Node {
        span,
        kind: NodeKind::Literal(Value::Null),
    }
}

/// The calls in an order where each comes after the calls whose outputs its
/// arguments take; a cycle among them is reported (and its calls left out).
fn order<'c>(calls: &'c [RawCall], diags: &mut Vec<Diagnostic>) -> Vec<&'c RawCall> {
    let names: BTreeSet<&str> = calls.iter().map(|c| c.name.as_str()).collect();
    let needs = |c: &RawCall| -> BTreeSet<String> {
        c.body
            .refs()
            .into_iter()
            .filter_map(|(r, _)| match r {
                Ref::ModuleOutput { module, .. } if names.contains(module.name.as_str()) => {
                    Some(module.name.clone())
                }
                _ => None,
            })
            .collect()
    };
    let mut done: BTreeSet<String> = BTreeSet::new();
    let mut out = Vec::with_capacity(calls.len());
    let mut left: Vec<&RawCall> = calls.iter().collect();
    while !left.is_empty() {
        let (ready, waiting): (Vec<&RawCall>, Vec<&RawCall>) = left
            .into_iter()
            .partition(|c| needs(c).iter().all(|n| done.contains(n)));
        if ready.is_empty() {
            for c in &waiting {
                diags.push(
                    Diagnostic::at(
                        c.name_span,
                        format!(
                            "module.{}: its arguments take outputs of calls that take its own",
                            c.name
                        ),
                        "cycle",
                    )
                    .help("break the cycle: a module call cannot depend on itself through others"),
                );
            }
            break;
        }
        for c in ready {
            done.insert(c.name.clone());
            out.push(c);
        }
        left = waiting;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn module_directories_are_named_relative_to_the_stack() {
        assert_eq!(
            relative(Path::new("/r/stacks/a"), Path::new("/r/stacks/modules/m")),
            "../modules/m"
        );
        assert_eq!(
            relative(Path::new("/r/stacks/a"), Path::new("/r/stacks/a/mods/m")),
            "mods/m"
        );
        assert_eq!(
            relative(Path::new("/r/stacks/a"), Path::new("/r/stacks/a")),
            "."
        );
    }
}
