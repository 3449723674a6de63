//! Values in a stack with their source spans, and the references inside strings:
//! `${kind.name.attr}`, `${var.x}`, `${env.X}`, `${env}` (the run's environment). A
//! string that is one reference and nothing else keeps the referenced value's type;
//! `$${` writes a literal `${`. A test of a value known at plan (a variable, an
//! environment variable, `${env}`) against a quoted string picks between two forms of a
//! stack: `${var.ack == 'capability'}` is a boolean (`count` takes it as 1 or 0), and
//! `${var.ack == 'capability' ? 'eks-capabilities' : 'eks-pods'}` one of two strings.

use serde_json::Value;

use super::source::Span;
use crate::addr::{is_identifier, Address};

/// What a reference points at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ref {
    /// An attribute of a resource: a spec field, a reported output, or `id`; `path`
    /// descends into tables (`share.name`). `addr` names one instance of a block with
    /// `count` or `for_each`.
    Resource { addr: Address, path: Vec<String> },
    /// `kind.name[*].attr`: the attribute of every instance of a block, as a list.
    Splat { addr: Address, path: Vec<String> },
    /// A stack variable.
    Var(String),
    /// An environment variable, read when the stack is loaded.
    Env(String),
    /// `${env}`: the name of the environment the run is for (`--env`).
    Environment,
    /// `${count.index}` inside a block with `count`.
    CountIndex,
    /// `${each.key}` inside a block with `for_each`.
    EachKey,
    /// `${each.value}` (and a path into it) inside a block with `for_each`.
    EachValue(Vec<String>),
    /// `${path.module}` (`module` true): the directory of the module the value is
    /// written in, relative to the stack's; `${path.root}`: the stack's directory.
    /// Relative paths in a resource (manifest files, dataset sources) are relative to
    /// the stack's directory, so a module names its own files with `${path.module}/…`.
    Path { module: bool },
    /// `${module.NAME.OUTPUT}`: an output of a module call (`module` holds the call,
    /// and its key when it has `count` or `for_each`).
    ModuleOutput {
        module: crate::addr::ModuleStep,
        output: String,
    },
    /// `${SUBJECT == 'value'}` (`equal`) or `!=`: a boolean; with `? 'a' : 'b'`
    /// (`choose`), the first string when the test holds, else the second. The subject
    /// is a [`Ref::Var`], [`Ref::Env`] or [`Ref::Environment`]: known at plan, so the
    /// choice is too.
    Test {
        subject: Box<Ref>,
        equal: bool,
        value: String,
        choose: Option<(String, String)>,
    },
}

impl Ref {
    /// The boolean or string a [`Ref::Test`] gives when its subject's value is
    /// `subject`: the subject's text (numbers and booleans as written) compared with the
    /// value. `None` for any other reference.
    pub fn decide(&self, subject: &Value) -> Option<Value> {
        let Ref::Test {
            equal,
            value,
            choose,
            ..
        } = self
        else {
            return None;
        };
        let text = match subject {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let holds = (&text == value) == *equal;
        Some(match choose {
            None => Value::Bool(holds),
            Some((yes, no)) => Value::String(if holds { yes.clone() } else { no.clone() }),
        })
    }
}

impl std::fmt::Display for Ref {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ref::Resource { addr, path } => write!(f, "{addr}.{}", path.join(".")),
            Ref::Splat { addr, path } => write!(f, "{addr}[*].{}", path.join(".")),
            Ref::Var(v) => write!(f, "var.{v}"),
            Ref::Env(e) => write!(f, "env.{e}"),
            Ref::Environment => write!(f, "env"),
            Ref::CountIndex => write!(f, "count.index"),
            Ref::EachKey => write!(f, "each.key"),
            Ref::EachValue(path) if path.is_empty() => write!(f, "each.value"),
            Ref::EachValue(path) => write!(f, "each.value.{}", path.join(".")),
            Ref::ModuleOutput { module, output } => write!(f, "{module}.{output}"),
            Ref::Path { module: true } => write!(f, "path.module"),
            Ref::Path { module: false } => write!(f, "path.root"),
            Ref::Test {
                subject,
                equal,
                value,
                choose,
            } => {
                let op = if *equal { "==" } else { "!=" };
                write!(f, "{subject} {op} '{value}'")?;
                match choose {
                    Some((yes, no)) => write!(f, " ? '{yes}' : '{no}'"),
                    None => Ok(()),
                }
            }
        }
    }
}

/// A piece of a string with references.
#[derive(Debug, Clone, PartialEq)]
pub enum Part {
    Lit(String),
    Ref(Ref, Span),
}

/// A value from a stack file, with where it was written.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub span: Span,
    pub kind: NodeKind,
}

/// The shapes a [`Node`] takes.
#[derive(Debug, Clone, PartialEq)]
pub enum NodeKind {
    /// A value with no reference in it.
    Literal(Value),
    /// A string that is exactly one reference: keeps the referenced value's type.
    Whole(Ref),
    /// A string mixing text and references.
    Template(Vec<Part>),
    List(Vec<Node>),
    /// Keys in source order, each with the span of the key.
    Table(Vec<(String, Span, Node)>),
}

impl Node {
    /// Every reference in this value, with its span.
    pub fn refs(&self) -> Vec<(&Ref, Span)> {
        let mut out = Vec::new();
        self.collect_refs(&mut out);
        out
    }

    fn collect_refs<'a>(&'a self, out: &mut Vec<(&'a Ref, Span)>) {
        match &self.kind {
            NodeKind::Literal(_) => {}
            NodeKind::Whole(r) => out.push((r, self.span)),
            NodeKind::Template(parts) => {
                for p in parts {
                    if let Part::Ref(r, s) = p {
                        out.push((r, *s));
                    }
                }
            }
            NodeKind::List(items) => items.iter().for_each(|n| n.collect_refs(out)),
            NodeKind::Table(entries) => entries.iter().for_each(|(_, _, n)| n.collect_refs(out)),
        }
    }

    /// Whether any reference in this value satisfies `pred` (without collecting them).
    pub fn any_ref(&self, pred: &dyn Fn(&Ref) -> bool) -> bool {
        match &self.kind {
            NodeKind::Literal(_) => false,
            NodeKind::Whole(r) => pred(r),
            NodeKind::Template(parts) => parts
                .iter()
                .any(|p| matches!(p, Part::Ref(r, _) if pred(r))),
            NodeKind::List(items) => items.iter().any(|n| n.any_ref(pred)),
            NodeKind::Table(entries) => entries.iter().any(|(_, _, n)| n.any_ref(pred)),
        }
    }

    /// The entry `key` of a table node.
    pub fn get(&self, key: &str) -> Option<&Node> {
        match &self.kind {
            NodeKind::Table(entries) => {
                entries.iter().find(|(k, _, _)| k == key).map(|(_, _, n)| n)
            }
            _ => None,
        }
    }

    /// The span of the key `key` of a table node.
    pub fn key_span(&self, key: &str) -> Option<Span> {
        match &self.kind {
            NodeKind::Table(entries) => entries
                .iter()
                .find(|(k, _, _)| k == key)
                .map(|(_, s, _)| *s),
            _ => None,
        }
    }

    /// The node at a dotted path: table keys (inline tables too) and list indexes, as
    /// a kind's check names a field (`taints.0.effect`). `None` when the path leads
    /// nowhere in what was written (a default filled in, an index past the end).
    pub fn at(&self, path: &[String]) -> Option<&Node> {
        path.iter().try_fold(self, |n, k| match &n.kind {
            NodeKind::Table(_) => n.get(k),
            NodeKind::List(items) => k.parse::<usize>().ok().and_then(|i| items.get(i)),
            _ => None,
        })
    }

    /// The value, when the node holds no reference (a literal, or lists and tables of
    /// literals).
    pub fn literal(&self) -> Option<Value> {
        match &self.kind {
            NodeKind::Literal(v) => Some(v.clone()),
            NodeKind::Whole(_) | NodeKind::Template(_) => None,
            NodeKind::List(items) => items
                .iter()
                .map(Node::literal)
                .collect::<Option<_>>()
                .map(Value::Array),
            NodeKind::Table(entries) => entries
                .iter()
                .map(|(k, _, n)| n.literal().map(|v| (k.clone(), v)))
                .collect::<Option<serde_json::Map<_, _>>>()
                .map(Value::Object),
        }
    }
}

/// Why a string's references could not be parsed; `offset` is relative to the string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseRefError {
    pub offset: usize,
    pub len: usize,
    pub message: String,
}

/// Splits a string into literal text and references. `base` is the byte offset of the
/// string's content in the file, so reference spans point at the `${…}` itself.
pub fn parse_template(s: &str, file: usize, base: usize) -> Result<Vec<Part>, ParseRefError> {
    let mut parts = Vec::new();
    let mut lit = String::new();
    let mut rest = s;
    let mut pos = 0;
    while let Some(i) = rest.find('$') {
        lit.push_str(&rest[..i]);
        let after = &rest[i..];
        if let Some(tail) = after.strip_prefix("$${") {
            lit.push_str("${");
            rest = tail;
            pos += i + 3;
        } else if after.starts_with("${") {
            let close = after.find('}').ok_or_else(|| ParseRefError {
                offset: pos + i,
                len: after.len(),
                message: "unterminated reference: `${` without a closing `}`".to_string(),
            })?;
            let inner = &after[2..close];
            let r = parse_ref(inner.trim()).map_err(|message| ParseRefError {
                offset: pos + i,
                len: close + 1,
                message,
            })?;
            if !lit.is_empty() {
                parts.push(Part::Lit(std::mem::take(&mut lit)));
            }
            parts.push(Part::Ref(
                r,
                Span::new(file, base + pos + i, base + pos + i + close + 1),
            ));
            rest = &after[close + 1..];
            pos += i + close + 1;
        } else {
            lit.push('$');
            rest = &after[1..];
            pos += i + 1;
        }
    }
    lit.push_str(rest);
    if !lit.is_empty() || parts.is_empty() {
        parts.push(Part::Lit(lit));
    }
    Ok(parts)
}

/// Parses the inside of `${…}`.
pub fn parse_ref(s: &str) -> Result<Ref, String> {
    if let Some(at) = s.find("==").or_else(|| s.find("!=")) {
        return parse_test(s, at);
    }
    use crate::addr::{segments, Bracket, ModuleStep};
    let bad = |why: &str| {
        format!("`${{{s}}}` is not a reference: {why}; references look like `${{kind.name.attr}}`, `${{kind.name[0].attr}}`, `${{var.name}}`, `${{env.NAME}}` or `${{module.NAME.output}}`")
    };
    let segs = segments(s).ok_or_else(|| bad("empty part or malformed `[…]`"))?;
    // Brackets belong after a resource's or module call's name only.
    let plain = |from: usize| -> Result<Vec<String>, String> {
        segs[from..]
            .iter()
            .map(|g| match g.bracket {
                None => Ok(g.name.clone()),
                Some(_) => Err(bad("`[…]` goes right after a resource's name")),
            })
            .collect()
    };
    let first = &segs[0];
    let names = plain(0).ok();
    match names
        .as_deref()
        .map(|n| n.iter().map(String::as_str).collect::<Vec<_>>())
        .as_deref()
    {
        Some(["var", name]) if is_identifier(name) => return Ok(Ref::Var((*name).to_string())),
        Some(["env", name])
            if !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') =>
        {
            return Ok(Ref::Env((*name).to_string()))
        }
        Some(["env"]) => return Ok(Ref::Environment),
        Some(["var", ..] | ["env", ..]) => {
            return Err(bad("expected one name after `var.` or `env.`"))
        }
        Some(["path", "module"]) => return Ok(Ref::Path { module: true }),
        Some(["path", "root"]) => return Ok(Ref::Path { module: false }),
        Some(["path", ..]) => {
            return Err(bad(
                "`path` has two attributes: `path.module` and `path.root`",
            ))
        }
        Some(["count", "index"]) => return Ok(Ref::CountIndex),
        Some(["count", ..]) => return Err(bad("`count` has one attribute: `count.index`")),
        Some(["each", "key"]) => return Ok(Ref::EachKey),
        Some(["each", "value", path @ ..]) => {
            return Ok(Ref::EachValue(
                path.iter().map(|p| (*p).to_string()).collect(),
            ))
        }
        Some(["each", ..]) => {
            return Err(bad(
                "`each` has two attributes: `each.key` and `each.value`",
            ))
        }
        _ => {}
    }
    if first.name == "module" && first.bracket.is_none() {
        let [_, call, output, rest @ ..] = segs.as_slice() else {
            return Err(bad("a module output reference is `module.NAME.OUTPUT`"));
        };
        if !rest.is_empty() || output.bracket.is_some() || !is_identifier(&output.name) {
            return Err(bad("a module output reference is `module.NAME.OUTPUT`"));
        }
        if !is_identifier(&call.name) {
            return Err(bad("module names are identifiers"));
        }
        let key = match &call.bracket {
            None => None,
            Some(Bracket::Key(k)) => Some(k.clone()),
            Some(Bracket::Splat) => {
                return Err(bad(
                    "`[*]` of a module call is not supported; name one instance",
                ))
            }
        };
        return Ok(Ref::ModuleOutput {
            module: ModuleStep {
                name: call.name.clone(),
                key,
            },
            output: output.name.clone(),
        });
    }
    let [kind, name, ..] = segs.as_slice() else {
        return Err(bad("too few parts"));
    };
    if kind.bracket.is_some() || !is_identifier(&kind.name) || !is_identifier(&name.name) {
        return Err(bad("kind and name must be identifiers"));
    }
    let path = plain(2)?;
    if path.is_empty() {
        return Err(bad(
            "a resource reference needs an attribute after the name",
        ));
    }
    let addr = Address::new(&kind.name, &name.name);
    Ok(match &name.bracket {
        None => Ref::Resource { addr, path },
        Some(Bracket::Key(k)) => Ref::Resource {
            addr: addr.with_key(Some(k.clone())),
            path,
        },
        Some(Bracket::Splat) => Ref::Splat { addr, path },
    })
}

/// `SUBJECT == 'v'`, `SUBJECT != 'v'`, optionally `? 'a' : 'b'`; `at` is where the
/// operator starts. Strings are quoted with `'` or `"`.
fn parse_test(s: &str, at: usize) -> Result<Ref, String> {
    let bad = |why: &str| {
        format!("`${{{s}}}` is not a test: {why}; a test looks like `${{var.name == 'value'}}`, or `${{var.name == 'value' ? 'this' : 'that'}}` to pick a string")
    };
    let subject = parse_ref(s[..at].trim()).map_err(|_| bad("the left side is not a reference"))?;
    if !matches!(subject, Ref::Var(_) | Ref::Env(_) | Ref::Environment) {
        return Err(bad(&format!(
            "`{subject}` may be known only after apply; test a variable, `env.NAME` or `env`"
        )));
    }
    let equal = s[at..].starts_with("==");
    let (value, rest) = quoted(s[at + 2..].trim_start())
        .ok_or_else(|| bad("the right side is not a quoted string"))?;
    let rest = rest.trim();
    let choose = if rest.is_empty() {
        None
    } else {
        let rest = rest
            .strip_prefix('?')
            .ok_or_else(|| bad("expected `?` after the value"))?;
        let (yes, rest) =
            quoted(rest.trim_start()).ok_or_else(|| bad("expected a quoted string after `?`"))?;
        let rest = rest
            .trim_start()
            .strip_prefix(':')
            .ok_or_else(|| bad("expected `:` between the two strings"))?;
        let (no, rest) =
            quoted(rest.trim_start()).ok_or_else(|| bad("expected a quoted string after `:`"))?;
        if !rest.trim().is_empty() {
            return Err(bad("unexpected text after the second string"));
        }
        Some((yes, no))
    };
    Ok(Ref::Test {
        subject: Box::new(subject),
        equal,
        value,
        choose,
    })
}

/// A string in `'…'` or `"…"` at the start of `s` (no escapes), and what follows it.
fn quoted(s: &str) -> Option<(String, &str)> {
    let q = s.chars().next().filter(|c| *c == '\'' || *c == '"')?;
    let end = s[1..].find(q)? + 1;
    Some((s[1..end].to_string(), &s[end + 1..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lit(s: &str) -> Part {
        Part::Lit(s.to_string())
    }

    #[test]
    fn splits_text_and_references_with_spans() {
        let parts = parse_template("a-${var.x}-b", 0, 10).expect("parses");
        assert_eq!(parts.len(), 3);
        assert_eq!(parts[0], lit("a-"));
        assert_eq!(
            parts[1],
            Part::Ref(Ref::Var("x".into()), Span::new(0, 12, 20))
        );
        assert_eq!(parts[2], lit("-b"));
    }

    #[test]
    fn escapes_and_lone_dollars_stay_literal() {
        assert_eq!(
            parse_template("$${HOME} costs $5", 0, 0).expect("parses"),
            vec![lit("${HOME} costs $5")]
        );
    }

    #[test]
    fn resource_reference_with_nested_path() {
        assert_eq!(
            parse_ref("filestore.nfs.share.name"),
            Ok(Ref::Resource {
                addr: Address::new("filestore", "nfs"),
                path: vec!["share".into(), "name".into()]
            })
        );
        assert_eq!(parse_ref("env.HOME"), Ok(Ref::Env("HOME".into())));
        assert_eq!(parse_ref("env"), Ok(Ref::Environment));
    }

    #[test]
    fn instance_splat_count_each_and_module_references() {
        assert_eq!(
            parse_ref("gke_node_pool.gpu[\"t4\"].name"),
            Ok(Ref::Resource {
                addr: Address::parse("gke_node_pool.gpu[\"t4\"]").expect("valid"),
                path: vec!["name".into()]
            })
        );
        assert_eq!(
            parse_ref("kubernetes_job.shard[*].name"),
            Ok(Ref::Splat {
                addr: Address::new("kubernetes_job", "shard"),
                path: vec!["name".into()]
            })
        );
        assert_eq!(parse_ref("count.index"), Ok(Ref::CountIndex));
        assert_eq!(parse_ref("each.key"), Ok(Ref::EachKey));
        assert_eq!(
            parse_ref("each.value.type"),
            Ok(Ref::EachValue(vec!["type".into()]))
        );
        assert_eq!(
            parse_ref("module.gpu_pool.pool_name").map(|r| r.to_string()),
            Ok("module.gpu_pool.pool_name".to_string())
        );
    }

    #[test]
    fn tests_of_known_values_parse_and_pick() {
        let t = parse_ref("var.ack == 'capability'").expect("a test");
        assert_eq!(
            t,
            Ref::Test {
                subject: Box::new(Ref::Var("ack".into())),
                equal: true,
                value: "capability".into(),
                choose: None
            }
        );
        assert_eq!(t.to_string(), "var.ack == 'capability'");
        let choice =
            parse_ref(r#"env != "prod" ? "eks-pods" : 'eks-capabilities'"#).expect("a choice");
        assert_eq!(
            choice.decide(&Value::String("dev".into())),
            Some(Value::String("eks-pods".into()))
        );
        assert_eq!(
            choice.decide(&Value::String("prod".into())),
            Some(Value::String("eks-capabilities".into()))
        );
        let number = parse_ref("var.n == '3'").expect("a test");
        assert_eq!(
            number.decide(&serde_json::json!(3)),
            Some(Value::Bool(true))
        );
        assert_eq!(Ref::Var("n".into()).decide(&serde_json::json!(3)), None);
        let parts = parse_template("${var.a == 'x'}", 0, 0).expect("parses");
        assert!(matches!(parts.as_slice(), [Part::Ref(Ref::Test { .. }, _)]));
    }

    #[test]
    fn malformed_references_are_rejected() {
        for bad in [
            "local_file.a",
            "var",
            "var.a.b",
            "a..b",
            "",
            "1x.y.z",
            "count",
            "count.value",
            "each",
            "a.b[x].c",
            "a.b.c[0]",
            "module.m",
            "module.m.out.x",
        ] {
            assert!(parse_ref(bad).is_err(), "{bad:?}");
        }
        for bad in [
            "var.a == b",
            "var.a ==",
            "gke_cluster.a.name == 'x'",
            "var.a == 'x' ? 'y'",
            "var.a == 'x' ? 'y' : 'z' w",
            "var.a == 'x' 'y'",
            "count.index == '0'",
        ] {
            assert!(parse_ref(bad).is_err(), "{bad:?}");
        }
        let e = parse_template("x ${var.a", 0, 0).expect_err("unterminated");
        assert_eq!(e.offset, 2);
    }
}
