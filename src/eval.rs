//! Evaluating stack values: references replaced by what they point at, values not
//! known until apply marked with [`UNKNOWN`], and secret-ness carried along so that a
//! value derived from a sensitive one is itself sensitive.

use serde_json::{Map, Value};
use terrain_providers::protocol::{is_unknown, UNKNOWN};

use crate::addr::Address;
use crate::stack::{Node, NodeKind, Part, Ref, Span};

/// What a reference resolves to.
#[derive(Debug, Clone, PartialEq)]
pub enum Resolved {
    /// The value, and whether it is secret.
    Known(Value, bool),
    /// Not known until apply; the flag says whether it will be secret.
    Unknown(bool),
}

/// Where references get their values.
/// Where the environment's name (`${env}`) is kept among a stack's variables: under a
/// name no declared variable can have.
pub const ENVIRONMENT_VARIABLE: &str = "${env}";

pub trait Scope {
    /// A variable's value and secret-ness.
    fn var(&self, name: &str) -> Option<(Value, bool)>;
    /// An environment variable.
    fn env(&self, name: &str) -> Option<String>;
    /// An attribute of a resource (`path` is never empty).
    fn resource(&self, addr: &Address, path: &[String]) -> Resolved;
}

/// An evaluated value and the dotted paths inside it that are secret.
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluated {
    pub value: Value,
    pub sensitive_paths: Vec<String>,
}

/// Why a value could not be evaluated.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct EvalError {
    pub span: Span,
    pub message: String,
}

/// Evaluates `node` in `scope`.
///
/// Fails when a reference has no value (an unset variable or environment variable, or
/// an attribute the resource does not have).
pub fn eval(node: &Node, scope: &dyn Scope) -> Result<Evaluated, EvalError> {
    let mut sensitive = Vec::new();
    let value = eval_at(node, scope, "", &mut sensitive)?;
    Ok(Evaluated {
        value,
        sensitive_paths: sensitive,
    })
}

fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_string()
    } else {
        format!("{prefix}.{key}")
    }
}

fn eval_at(
    node: &Node,
    scope: &dyn Scope,
    path: &str,
    sensitive: &mut Vec<String>,
) -> Result<Value, EvalError> {
    match &node.kind {
        NodeKind::Literal(v) => Ok(v.clone()),
        NodeKind::Whole(r) => {
            let (v, secret) = resolve(r, node.span, scope)?;
            if secret {
                sensitive.push(path.to_string());
            }
            Ok(v)
        }
        NodeKind::Template(parts) => {
            let mut out = String::new();
            let mut secret = false;
            let mut unknown = false;
            for p in parts {
                match p {
                    Part::Lit(l) => out.push_str(l),
                    Part::Ref(r, span) => {
                        let (v, s) = resolve(r, *span, scope)?;
                        secret |= s;
                        if is_unknown(&v) {
                            unknown = true;
                        }
                        match v {
                            Value::String(s) => out.push_str(&s),
                            Value::Null => {}
                            other => out.push_str(&other.to_string()),
                        }
                    }
                }
            }
            if secret {
                sensitive.push(path.to_string());
            }
            // A string with an unknown piece is unknown as a whole.
            Ok(Value::String(if unknown {
                UNKNOWN.to_string()
            } else {
                out
            }))
        }
        NodeKind::List(items) => items
            .iter()
            .enumerate()
            .map(|(i, n)| eval_at(n, scope, &join(path, &i.to_string()), sensitive))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array),
        NodeKind::Table(entries) => {
            let mut map = Map::new();
            for (k, _, n) in entries {
                map.insert(k.clone(), eval_at(n, scope, &join(path, k), sensitive)?);
            }
            Ok(Value::Object(map))
        }
    }
}

fn resolve(r: &Ref, span: Span, scope: &dyn Scope) -> Result<(Value, bool), EvalError> {
    let fail = |message: String| EvalError { span, message };
    match r {
        Ref::Var(name) => scope
            .var(name)
            .ok_or_else(|| fail(format!("variable `{name}` has no value"))),
        Ref::Env(name) => scope
            .env(name)
            .map(|v| (Value::String(v), false))
            .ok_or_else(|| fail(format!("environment variable `{name}` is not set"))),
        Ref::Environment => Ok(scope.var(ENVIRONMENT_VARIABLE).unwrap_or_else(|| {
            (
                Value::String(crate::stack::DEFAULT_ENVIRONMENT.to_string()),
                false,
            )
        })),
        Ref::Test { subject, .. } => {
            let (v, secret) = resolve(subject, span, scope)?;
            Ok((r.decide(&v).unwrap_or(Value::Null), secret))
        }
        Ref::Resource { addr, path } => match scope.resource(addr, path) {
            Resolved::Known(v, s) => Ok((v, s)),
            Resolved::Unknown(s) => Ok((Value::String(UNKNOWN.to_string()), s)),
        },
        // Expanded or refused when the stack is loaded: never here in a checked stack.
        Ref::Splat { .. }
        | Ref::CountIndex
        | Ref::EachKey
        | Ref::EachValue(_)
        | Ref::ModuleOutput { .. }
        | Ref::Path { .. } => Err(fail(format!("`${{{r}}}` has no value here"))),
    }
}

/// The value at a dotted path inside `value` (`share.name`, `items.0`).
pub fn lookup<'a>(value: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(value, |v, key| match v {
        Value::Object(m) => m.get(key),
        Value::Array(a) => key.parse::<usize>().ok().and_then(|i| a.get(i)),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stack::expr::parse_template;
    use serde_json::json;

    struct TestScope;
    impl Scope for TestScope {
        fn var(&self, name: &str) -> Option<(Value, bool)> {
            match name {
                "n" => Some((json!(3), false)),
                "pw" => Some((json!("hunter2"), true)),
                _ => None,
            }
        }
        fn env(&self, name: &str) -> Option<String> {
            (name == "HOME").then(|| "/root".to_string())
        }
        fn resource(&self, addr: &Address, _path: &[String]) -> Resolved {
            if addr.name == "known" {
                Resolved::Known(json!("10.0.0.2"), false)
            } else {
                Resolved::Unknown(false)
            }
        }
    }

    fn node(s: &str) -> Node {
        let parts = parse_template(s, 0, 0).expect("parses");
        let kind = match parts.as_slice() {
            [Part::Ref(r, _)] => NodeKind::Whole(r.clone()),
            [Part::Lit(l)] => NodeKind::Literal(json!(l)),
            _ => NodeKind::Template(parts),
        };
        Node {
            span: Span::default(),
            kind,
        }
    }

    #[test]
    fn whole_references_keep_their_type() {
        assert_eq!(
            eval(&node("${var.n}"), &TestScope)
                .expect("evaluates")
                .value,
            json!(3)
        );
        assert_eq!(
            eval(&node("n=${var.n}"), &TestScope)
                .expect("evaluates")
                .value,
            json!("n=3")
        );
    }

    #[test]
    fn unknown_pieces_make_the_string_unknown() {
        let v = eval(&node("http://${x.later.ip}:80"), &TestScope)
            .expect("evaluates")
            .value;
        assert!(is_unknown(&v));
        let v = eval(&node("http://${x.known.ip}:80"), &TestScope)
            .expect("evaluates")
            .value;
        assert_eq!(v, json!("http://10.0.0.2:80"));
    }

    #[test]
    fn secrets_propagate_to_the_field_path() {
        let n = Node {
            span: Span::default(),
            kind: NodeKind::Table(vec![
                ("user".into(), Span::default(), node("admin")),
                ("dsn".into(), Span::default(), node("admin:${var.pw}@db")),
            ]),
        };
        let e = eval(&n, &TestScope).expect("evaluates");
        assert_eq!(e.sensitive_paths, vec!["dsn".to_string()]);
    }

    #[test]
    fn missing_values_are_errors() {
        assert!(eval(&node("${var.nope}"), &TestScope).is_err());
        assert!(eval(&node("${env.NOPE}"), &TestScope).is_err());
        assert_eq!(
            eval(&node("${env.HOME}"), &TestScope)
                .expect("evaluates")
                .value,
            json!("/root")
        );
    }
}
