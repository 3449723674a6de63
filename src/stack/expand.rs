//! `count` and `for_each`: a resource block that has one becomes one resource per
//! instance (`kubernetes_job.shard[0]`, `gke_node_pool.gpu["t4"]`), each body with
//! `${count.index}`, `${each.key}` and `${each.value…}` filled in. Then every reference
//! is checked against the instances: `kind.name[KEY]` names one, `kind.name[*]` gives
//! a list of all of them, and a block with instances is never named without one.
//!
//! Instances are known at plan, always: `count` and `for_each` may use literals,
//! variables and the environment, never a value a resource reports after apply, and
//! never a secret (instance keys are shown in every address).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::expr::{Node, NodeKind, Part, Ref};
use super::load::RawResource;
use super::source::{did_you_mean, Diagnostic, Span};
use super::{LoadOptions, Variable};
use crate::addr::{Address, Key};

/// The meta keys that repeat a block.
pub const REPEAT_KEYS: [&str; 2] = ["count", "for_each"];

/// The instances of every block, by the block's address (no key).
#[derive(Debug, Default)]
pub struct Blocks {
    blocks: BTreeMap<Address, Repeat>,
    /// Blocks whose `count` / `for_each` was refused: they have no instances, and
    /// what names them is not reported again.
    failed: BTreeSet<Address>,
}

/// How a block (or a module call) is repeated.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Repeat {
    /// One resource, addressed without a key.
    Single,
    Count(usize),
    ForEach(Vec<String>),
}

impl Repeat {
    /// Whether `key` names an instance (`None`: the block itself, when not repeated).
    pub(super) fn has(&self, key: Option<&Key>) -> bool {
        match (self, key) {
            (Repeat::Single, None) => true,
            (Repeat::Count(n), Some(Key::Index(i))) => i < n,
            (Repeat::ForEach(keys), Some(Key::Name(k))) => keys.iter().any(|x| x == k),
            _ => false,
        }
    }

    pub(super) fn keys(&self) -> Vec<Option<Key>> {
        match self {
            Repeat::Single => vec![None],
            Repeat::Count(n) => (0..*n).map(|i| Some(Key::Index(i))).collect(),
            Repeat::ForEach(keys) => keys.iter().map(|k| Some(Key::Name(k.clone()))).collect(),
        }
    }
}

/// What `${count.index}` and `${each.…}` are for one instance.
pub(super) enum Instance<'a> {
    None,
    Count(usize),
    /// The key and the value as written (or evaluated) for it.
    Each(&'a str, &'a Node),
}

/// Expands every block with `count` or `for_each` into its instances. Problems (a bad
/// or unknown `count`, both keys at once, `${each…}` outside a `for_each` block) go to
/// `diags`; such a block yields no instances.
pub fn instances(
    raw: Vec<RawResource>,
    vars: &BTreeMap<String, Variable>,
    refused: &BTreeSet<String>,
    opts: &LoadOptions<'_>,
    diags: &mut Vec<Diagnostic>,
) -> (Vec<RawResource>, Blocks) {
    let mut out = Vec::with_capacity(raw.len());
    let mut blocks = Blocks::default();
    for mut r in raw {
        let block = Address::new(&r.kind, &r.name).within(&r.module);
        let repeat = take_repeat(&block.to_string(), &mut r.body, vars, refused, opts, diags);
        let Some(repeat) = repeat else {
            blocks.failed.insert(block);
            continue;
        };
        match &repeat {
            Repeat::Single => {
                // Only a body that names an instance value is rebuilt (to report it):
                // most are moved through untouched.
                if r.body
                    .any_ref(&|r| matches!(r, Ref::CountIndex | Ref::EachKey | Ref::EachValue(_)))
                {
                    r.body = substitute(&r.body, &Instance::None, &block.to_string(), diags);
                }
                out.push(r);
            }
            Repeat::Count(n) => {
                for i in 0..*n {
                    let addr = block.clone().with_key(Some(Key::Index(i)));
                    out.push(RawResource {
                        body: substitute(&r.body, &Instance::Count(i), &addr.to_string(), diags),
                        key: Some(Key::Index(i)),
                        ..r.clone_header()
                    });
                }
            }
            Repeat::ForEach(_) => {
                let values = for_each_nodes(&r.body);
                for (k, v) in &values {
                    let key = Some(Key::Name(k.clone()));
                    let addr = block.clone().with_key(key.clone());
                    out.push(RawResource {
                        body: substitute(&r.body, &Instance::Each(k, v), &addr.to_string(), diags),
                        key,
                        ..r.clone_header()
                    });
                }
            }
        }
        blocks.blocks.insert(block, repeat);
    }
    (out, blocks)
}

/// Removes `count` / `for_each` from a block's body and works out its instances;
/// `None` when they are wrong (reported). A `for_each` value is kept on the resource
/// for [`instances`] to hand out.
pub(super) fn take_repeat(
    block: &str,
    body: &mut Node,
    vars: &BTreeMap<String, Variable>,
    refused: &BTreeSet<String>,
    opts: &LoadOptions<'_>,
    diags: &mut Vec<Diagnostic>,
) -> Option<Repeat> {
    let NodeKind::Table(entries) = &mut body.kind else {
        return Some(Repeat::Single);
    };
    let mut found: Vec<(String, Span, Node)> = Vec::new();
    entries.retain(|(k, s, n)| {
        if REPEAT_KEYS.contains(&k.as_str()) {
            found.push((k.clone(), *s, n.clone()));
            false
        } else {
            true
        }
    });
    match found.as_slice() {
        [] => Some(Repeat::Single),
        [_, (_, second, _)] => {
            diags.push(
                Diagnostic::at(
                    *second,
                    format!("{block}: `count` and `for_each` cannot both be set"),
                    "second repetition",
                )
                .help("keep `count` for numbered copies, or `for_each` for one per key"),
            );
            None
        }
        // A table written out: its keys are known now, and its values may be known
        // only after apply (a cluster per key); they are put in each instance as
        // written, references and secrets kept.
        [(key, _, node)] if key == "for_each" && matches!(node.kind, NodeKind::Table(_)) => {
            let NodeKind::Table(written) = &node.kind else {
                return None;
            };
            for (_, _, v) in written {
                for (r, span) in v.refs() {
                    if matches!(r, Ref::CountIndex | Ref::EachKey | Ref::EachValue(_)) {
                        diags.push(Diagnostic::at(
                            span,
                            format!("{block}.for_each: `${{{r}}}` cannot be used in the for_each of a block"),
                            "not available here",
                        ));
                        return None;
                    }
                }
            }
            let keys = written.iter().map(|(k, _, _)| k.clone()).collect();
            entries.push((FOR_EACH_VALUE.to_string(), node.span, node.clone()));
            Some(Repeat::ForEach(keys))
        }
        [(key, _, node)] => {
            let value = known_value(block, key, node, vars, refused, opts, diags)?;
            if key == "count" {
                // A test (`count = "${var.ack == 'capability'}"`) makes the block or not.
                let n = value.as_u64().or(value.as_bool().map(u64::from));
                return match n {
                    Some(n) => Some(Repeat::Count(usize::try_from(n).ok()?)),
                    None => {
                        diags.push(
                            Diagnostic::at(
                                node.span,
                                format!(
                                    "{block}.count: expected a whole number ≥ 0 or a test, found {}",
                                    shape(&value)
                                ),
                                "not a count",
                            )
                            .help("`count = 3` makes instances [0], [1] and [2]; `count = \"${var.x == 'on'}\"` makes [0] only when the test holds"),
                        );
                        None
                    }
                };
            }
            let keys = match &value {
                Value::Object(map) => map.keys().cloned().collect::<Vec<_>>(),
                Value::Array(items) => {
                    let mut keys = Vec::new();
                    let mut seen = BTreeSet::new();
                    for item in items {
                        let Value::String(s) = item else {
                            diags.push(Diagnostic::at(
                                node.span,
                                format!(
                                    "{block}.for_each: a list must hold strings, found {}",
                                    shape(item)
                                ),
                                "not a string",
                            ).help("use a map for other values: `for_each = { a = { … }, b = { … } }`"));
                            return None;
                        };
                        if !seen.insert(s.clone()) {
                            diags.push(Diagnostic::at(
                                node.span,
                                format!("{block}.for_each: the key \"{s}\" is listed twice"),
                                "duplicate key",
                            ));
                            return None;
                        }
                        keys.push(s.clone());
                    }
                    keys
                }
                other => {
                    diags.push(
                        Diagnostic::at(
                            node.span,
                            format!(
                                "{block}.for_each: expected a map or a list of strings, found {}",
                                shape(other)
                            ),
                            "not a map or list",
                        )
                        .help(
                            "`for_each = [\"a\", \"b\"]` or `for_each = { a = { … }, b = { … } }`",
                        ),
                    );
                    return None;
                }
            };
            // The value travels to `instances` as a hidden entry of the body.
            entries.push((
                FOR_EACH_VALUE.to_string(),
                node.span,
                Node {
                    span: node.span,
                    kind: NodeKind::Literal(value),
                },
            ));
            Some(Repeat::ForEach(keys))
        }
        _ => None,
    }
}

/// The hidden body entry carrying a block's evaluated `for_each` between
/// [`take_repeat`] and [`instances`]; no schema field can have this name.
const FOR_EACH_VALUE: &str = "\u{0}for_each";

/// The (key, value) pairs of the `for_each` that [`take_repeat`] left in `body`: a
/// written table's entries as written, an evaluated map's entries, or each string of a
/// list as both key and value.
pub(super) fn for_each_nodes(body: &Node) -> Vec<(String, Node)> {
    let Some(node) = body.get(FOR_EACH_VALUE) else {
        return Vec::new();
    };
    let literal = |v: &Value| Node {
        span: node.span,
        kind: NodeKind::Literal(v.clone()),
    };
    match &node.kind {
        NodeKind::Table(entries) => entries
            .iter()
            .map(|(k, _, v)| (k.clone(), v.clone()))
            .collect(),
        NodeKind::Literal(Value::Object(map)) => {
            map.iter().map(|(k, v)| (k.clone(), literal(v))).collect()
        }
        NodeKind::Literal(Value::Array(items)) => items
            .iter()
            .filter_map(|v| v.as_str().map(|s| (s.to_string(), literal(v))))
            .collect(),
        _ => Vec::new(),
    }
}

impl RawResource {
    /// This block without its body: kind, name and spans, for its instances.
    fn clone_header(&self) -> RawResource {
        RawResource {
            kind: self.kind.clone(),
            kind_span: self.kind_span,
            name: self.name.clone(),
            name_span: self.name_span,
            body: Node {
                span: self.body.span,
                kind: NodeKind::Table(Vec::new()),
            },
            key: self.key.clone(),
            module: self.module.clone(),
        }
    }
}

/// The value of `count` / `for_each`, which must be known now: literals, variables and
/// the environment only, and no secret. A variable in `refused` (declared, but its
/// value was refused and reported) gives no value and no second report.
fn known_value(
    block: &str,
    key: &str,
    node: &Node,
    vars: &BTreeMap<String, Variable>,
    refused: &BTreeSet<String>,
    opts: &LoadOptions<'_>,
    diags: &mut Vec<Diagnostic>,
) -> Option<Value> {
    for (r, _) in node.refs() {
        let var = match r {
            Ref::Var(name) => Some(name),
            Ref::Test { subject, .. } => match subject.as_ref() {
                Ref::Var(name) => Some(name),
                _ => None,
            },
            _ => None,
        };
        if var.is_some_and(|name| refused.contains(name)) {
            return None;
        }
    }
    for (r, span) in node.refs() {
        let why = match r {
            Ref::Resource { .. } | Ref::Splat { .. } | Ref::ModuleOutput { .. } => format!(
                "`${{{r}}}` may be known only after apply, and the instances must be known at plan"
            ),
            Ref::CountIndex | Ref::EachKey | Ref::EachValue(_) => {
                format!("`${{{r}}}` cannot decide how many instances there are")
            }
            Ref::Var(name) if vars.get(name).is_some_and(|v| v.sensitive) => format!(
                "variable `{name}` is sensitive, and instance keys are shown in every address"
            ),
            Ref::Test { subject, .. } if matches!(subject.as_ref(), Ref::Var(name) if vars.get(name).is_some_and(|v| v.sensitive)) => format!(
                "`${{{r}}}` tests a sensitive variable, and instance keys are shown in every address"
            ),
            _ => continue,
        };
        diags.push(
            Diagnostic::at(
                span,
                format!("{block}.{key} must be known at plan: {why}"),
                "not known at plan",
            )
            .help(format!(
                "set {key} from literals, variables (not sensitive) or the environment"
            )),
        );
        return None;
    }
    let scope = crate::desired::variables_only(vars, opts.env);
    match crate::eval::eval(node, &scope) {
        Ok(e) => Some(e.value),
        Err(e) => {
            diags.push(Diagnostic::at(
                e.span,
                format!("{block}.{key}: {}", e.message),
                "cannot evaluate",
            ));
            None
        }
    }
}

fn shape(v: &Value) -> String {
    match v {
        Value::Null => "nothing".into(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(_) => "a string".into(),
        Value::Array(_) => "a list".into(),
        Value::Object(_) => "a table".into(),
    }
}

/// `node` with `${count.index}` and `${each.…}` replaced by their values for
/// `instance`; such a reference outside a repeated block is reported.
pub(super) fn substitute(
    node: &Node,
    instance: &Instance<'_>,
    addr: &str,
    diags: &mut Vec<Diagnostic>,
) -> Node {
    let kind = match &node.kind {
        NodeKind::Literal(_) => return node.clone(),
        NodeKind::Whole(r) => match instance_value(r, node.span, instance, addr, diags) {
            Some(Ok(value)) => return value,
            Some(Err(())) => NodeKind::Literal(Value::Null),
            None => NodeKind::Whole(r.clone()),
        },
        NodeKind::Template(parts) => {
            let mut out: Vec<Part> = Vec::with_capacity(parts.len());
            for p in parts {
                match p {
                    Part::Lit(l) => push_text(&mut out, l),
                    Part::Ref(r, span) => match instance_value(r, *span, instance, addr, diags) {
                        None => out.push(p.clone()),
                        Some(Err(())) => {}
                        Some(Ok(value)) => splice(addr, &mut out, &value, r, *span, diags),
                    },
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
                .map(|n| substitute(n, instance, addr, diags))
                .collect(),
        ),
        NodeKind::Table(entries) => NodeKind::Table(
            entries
                .iter()
                .filter(|(k, _, _)| k != FOR_EACH_VALUE)
                .map(|(k, s, n)| (k.clone(), *s, substitute(n, instance, addr, diags)))
                .collect(),
        ),
    };
    Node {
        span: node.span,
        kind,
    }
}

/// Appends literal text to a template's parts.
pub(super) fn push_text(out: &mut Vec<Part>, text: &str) {
    match out.last_mut() {
        Some(Part::Lit(prev)) => prev.push_str(text),
        _ => out.push(Part::Lit(text.to_string())),
    }
}

/// Puts `value` (an argument, an output, `each.value`) where reference `r` was inside
/// a string: text as text, a reference as a reference; a list or table cannot be.
pub(super) fn splice(
    what: &str,
    out: &mut Vec<Part>,
    value: &Node,
    r: &Ref,
    span: Span,
    diags: &mut Vec<Diagnostic>,
) {
    match &value.kind {
        NodeKind::Literal(Value::String(s)) => push_text(out, s),
        NodeKind::Literal(Value::Null) => {}
        NodeKind::Literal(v @ (Value::Number(_) | Value::Bool(_))) => {
            push_text(out, &v.to_string())
        }
        NodeKind::Whole(inner) => out.push(Part::Ref(inner.clone(), value.span)),
        NodeKind::Template(parts) => {
            for p in parts {
                match p {
                    Part::Lit(l) => push_text(out, l),
                    other => out.push(other.clone()),
                }
            }
        }
        NodeKind::Literal(_) | NodeKind::List(_) | NodeKind::Table(_) => diags.push(
            Diagnostic::at(
                span,
                format!("{what}: `${{{r}}}` is a list or table and cannot be part of a string"),
                "not text",
            )
            .help(format!(
                "use `\"${{{r}}}\"` alone as the value to keep it whole"
            )),
        ),
    }
}

/// The node at `path` inside `node`: through written tables and lists, then inside a
/// literal value. `Err` names the first step that leads nowhere, and what was there.
fn node_at(node: &Node, path: &[String]) -> Result<Node, (usize, Vec<String>)> {
    let mut at = node.clone();
    for (n, p) in path.iter().enumerate() {
        let next = match &at.kind {
            NodeKind::Table(entries) => entries
                .iter()
                .find(|(k, _, _)| k == p)
                .map(|(_, _, v)| v.clone()),
            NodeKind::List(items) => p.parse::<usize>().ok().and_then(|i| items.get(i).cloned()),
            NodeKind::Literal(v) => {
                let inner = match v {
                    Value::Object(m) => m.get(p),
                    Value::Array(items) => p.parse::<usize>().ok().and_then(|i| items.get(i)),
                    _ => None,
                };
                inner.map(|v| Node {
                    span: at.span,
                    kind: NodeKind::Literal(v.clone()),
                })
            }
            _ => None,
        };
        match next {
            Some(next) => at = next,
            None => {
                let keys = match &at.kind {
                    NodeKind::Table(entries) => entries.iter().map(|(k, _, _)| k.clone()).collect(),
                    NodeKind::Literal(Value::Object(m)) => m.keys().cloned().collect(),
                    _ => Vec::new(),
                };
                return Err((n, keys));
            }
        }
    }
    Ok(at)
}

/// The value of an instance reference: `None` when `r` is not one, `Some(Err)` when it
/// is one that has no value here (reported).
fn instance_value(
    r: &Ref,
    span: Span,
    instance: &Instance<'_>,
    addr: &str,
    diags: &mut Vec<Diagnostic>,
) -> Option<Result<Node, ()>> {
    let literal = |v: Value| Node {
        span,
        kind: NodeKind::Literal(v),
    };
    let mut fail = |message: String, help: &str| {
        diags.push(Diagnostic::at(span, message, "not available here").help(help));
        Some(Err(()))
    };
    match (r, instance) {
        (Ref::CountIndex, Instance::Count(i)) => Some(Ok(literal(Value::from(*i)))),
        (Ref::EachKey, Instance::Each(k, _)) => Some(Ok(literal(Value::String((*k).to_string())))),
        (Ref::EachValue(path), Instance::Each(_, v)) => match node_at(v, path) {
            Ok(found) => Some(Ok(found)),
            Err((n, keys)) => {
                let shown = ["each", "value"]
                    .into_iter()
                    .chain(path[..n].iter().map(String::as_str))
                    .collect::<Vec<_>>()
                    .join(".");
                let p = &path[n];
                let mut d = Diagnostic::at(
                    span,
                    format!("{addr}: `{shown}` has no `{p}`"),
                    "no such key",
                );
                if !keys.is_empty() {
                    d.help = did_you_mean(p, keys.iter().map(String::as_str))
                        .or_else(|| Some(format!("its keys: {}", keys.join(", "))));
                }
                diags.push(d);
                Some(Err(()))
            }
        },
        (Ref::CountIndex, _) => fail(
            format!("{addr}: `${{count.index}}` is only known in a block with `count`"),
            "add `count = N` to the block, or remove the reference",
        ),
        (Ref::EachKey | Ref::EachValue(_), _) => fail(
            format!("{addr}: `${{{r}}}` is only known in a block with `for_each`"),
            "add `for_each = { … }` to the block, or remove the reference",
        ),
        _ => None,
    }
}

impl Blocks {
    /// The blocks whose `count` / `for_each` was refused.
    pub fn failed(&self) -> &BTreeSet<Address> {
        &self.failed
    }

    /// The address of every block (without instance keys).
    pub fn addresses(&self) -> impl Iterator<Item = &Address> {
        self.blocks.keys()
    }

    /// Checks every resource reference in `node` (written in `what`) against the
    /// instances, and turns each splat into a list of references to them.
    pub fn resolve(&self, what: &dyn Fn() -> String, node: &mut Node, diags: &mut Vec<Diagnostic>) {
        match &mut node.kind {
            NodeKind::Literal(_) => {}
            NodeKind::Whole(r) => {
                if let Ref::Splat { addr, path } = r {
                    if let Some(items) = self.splat(what, addr, path, node.span, diags) {
                        node.kind = NodeKind::List(items);
                    }
                    return;
                }
                let r = r.clone();
                self.check(what, &r, node.span, diags);
            }
            NodeKind::Template(parts) => {
                for p in parts.iter() {
                    if let Part::Ref(r, span) = p {
                        if let Ref::Splat { .. } = r {
                            let what = what();
                            diags.push(
                                Diagnostic::at(
                                    *span,
                                    format!("{what}: `${{{r}}}` is a list and cannot be part of a string"),
                                    "a list",
                                )
                                .help("use the splat alone as the value: `names = \"${kind.name[*].attr}\"`"),
                            );
                        } else {
                            self.check(what, r, *span, diags);
                        }
                    }
                }
            }
            NodeKind::List(items) => items.iter_mut().for_each(|n| self.resolve(what, n, diags)),
            NodeKind::Table(entries) => entries
                .iter_mut()
                .for_each(|(_, _, n)| self.resolve(what, n, diags)),
        }
    }

    fn splat(
        &self,
        what: &dyn Fn() -> String,
        block: &Address,
        path: &[String],
        span: Span,
        diags: &mut Vec<Diagnostic>,
    ) -> Option<Vec<Node>> {
        match self.blocks.get(block) {
            // Unknown: the reference check names it.
            None => Some(vec![Node {
                span,
                kind: NodeKind::Whole(Ref::Resource {
                    addr: block.clone(),
                    path: path.to_vec(),
                }),
            }]),
            Some(Repeat::Single) => {
                let what = what();
                diags.push(
                    Diagnostic::at(
                        span,
                        format!("{what}: `{block}` has neither `count` nor `for_each`, so it has no `[*]`"),
                        "not repeated",
                    )
                    .help(format!("refer to it as `${{{block}.{}}}`", path.join("."))),
                );
                None
            }
            Some(repeat) => Some(
                repeat
                    .keys()
                    .into_iter()
                    .map(|key| Node {
                        span,
                        kind: NodeKind::Whole(Ref::Resource {
                            addr: block.clone().with_key(key),
                            path: path.to_vec(),
                        }),
                    })
                    .collect(),
            ),
        }
    }

    fn check(&self, what: &dyn Fn() -> String, r: &Ref, span: Span, diags: &mut Vec<Diagnostic>) {
        let Ref::Resource { addr, path } = r else {
            return;
        };
        let block = addr.resource();
        let Some(repeat) = self.blocks.get(&block) else {
            // Not in the stack: the reference check says so, with a suggestion.
            return;
        };
        if repeat.has(addr.key()) {
            return;
        }
        let what = what();
        let attr = path.join(".");
        let problem = match (addr.key(), repeat) {
            (None, Repeat::Single) => return,
            (None, Repeat::Count(_) | Repeat::ForEach(_)) => {
                let example = repeat
                    .keys()
                    .into_iter()
                    .flatten()
                    .next()
                    .map_or_else(|| "[0]".to_string(), |k| k.to_string());
                (
                    format!("{what}: `{block}` has {}, so a reference names one instance", repeat_word(repeat)),
                    format!("write `${{{block}{example}.{attr}}}` for one, or `${{{block}[*].{attr}}}` for a list of all"),
                )
            }
            (Some(_), Repeat::Single) => (
                format!("{what}: `{block}` has neither `count` nor `for_each`, so it has no instance `{addr}`"),
                format!("write `${{{block}.{attr}}}`"),
            ),
            (Some(key), repeat) if repeat.has(Some(key)) => return,
            (Some(key), Repeat::Count(n)) => (
                format!("{what}: `{block}` has count = {n}, so it has no instance {key}"),
                match (key, n) {
                    (_, 0) => "it has no instances".to_string(),
                    (Key::Index(_), n) => format!("indexes run from 0 to {}", n - 1),
                    (Key::Name(_), _) => "instances of a block with `count` are numbered: [0], [1] …".to_string(),
                },
            ),
            (Some(key), Repeat::ForEach(keys)) => (
                format!("{what}: `{block}` has no instance {key}"),
                match key {
                    Key::Name(k) => did_you_mean(k, keys.iter().map(String::as_str)),
                    Key::Index(_) => None,
                }
                .unwrap_or_else(|| {
                    format!(
                        "its for_each keys: {}",
                        keys.iter()
                            .map(|k| Key::Name(k.clone()).to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                }),
            ),
        };
        diags.push(Diagnostic::at(span, problem.0, "no such instance").help(problem.1));
    }

    /// The instances `dep` names in a `depends_on`: itself, or every instance of a
    /// repeated block named without a key. Empty when it names nothing in the stack.
    pub fn depends_on(&self, dep: &Address) -> Vec<Address> {
        match self.blocks.get(&dep.resource()) {
            None => Vec::new(),
            Some(repeat) if dep.key().is_none() => repeat
                .keys()
                .into_iter()
                .map(|k| dep.clone().with_key(k))
                .collect(),
            Some(repeat) if repeat.has(dep.key()) => vec![dep.clone()],
            Some(_) => Vec::new(),
        }
    }
}

fn repeat_word(repeat: &Repeat) -> String {
    match repeat {
        Repeat::Single => "no repetition".into(),
        Repeat::Count(n) => format!("count = {n}"),
        Repeat::ForEach(_) => "for_each".into(),
    }
}
