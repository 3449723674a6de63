//! The desired spec of one resource, computed one way for every command: `validate`
//! sees it offline, `plan` against the refreshed state, `apply` against what has been
//! applied, and the inspect commands (`render`, `status`) against the state.
//!
//! One pipeline: evaluate the body, fill defaults, run the kind's checks field by field
//! (a value not known until apply exempts only the checks that read it) and its checks
//! against the resources it references, complete the spec from local inputs (files,
//! directories), and keep the live value of `ignore_changes` fields. It runs over one
//! scope, [`StackScope`], whose resource attributes come from one of three sources:
//! [`Offline`] (variables, the environment and the stack's own configuration of every
//! resource), [`Planned`] (the plan being made) and [`Applied`] (the state as applied
//! so far). Problems come back at spec paths, with every secret hidden.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;
use terrain_providers::protocol::is_unknown;
use terrain_providers::{Invalid, Peer, ProviderError};

use crate::addr::Address;
use crate::diff::{changed_paths, overlay};
use crate::eval::{self, lookup, EvalError, Resolved, Scope};
use crate::plan::Action;
use crate::stack::{ResourceConfig, Variable};
use crate::state::{PendingOp, ResourceState, State};

/// What the desired spec of one resource is, as far as it is known.
#[derive(Debug, Clone, PartialEq)]
pub struct Desired {
    /// Defaults filled, completed from local inputs; values not known yet are marked.
    pub spec: Value,
    /// Dotted spec paths whose values are secret (the schema's, the stack's
    /// `sensitive`, and values derived from sensitive variables or fields).
    pub sensitive: Vec<String>,
}

/// Why a desired spec could not be computed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum DesiredError {
    /// A reference has no value (an unset variable…), at the reference.
    #[error("{}", .0.message)]
    Evaluate(EvalError),
    /// The spec breaks the kind's rules; problems are at spec paths, secrets hidden.
    #[error("{}", .problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Check { problems: Vec<Invalid> },
}

/// Where resource attributes come from; variables and the environment are the same
/// for every source.
pub trait Attributes {
    /// An attribute of a resource (`path` is never empty).
    fn resource(&self, addr: &Address, path: &[String]) -> Resolved;
}

/// The scope every stack value is evaluated in.
pub struct StackScope<'a> {
    pub variables: &'a BTreeMap<String, Variable>,
    pub env: &'a dyn Fn(&str) -> Option<String>,
    pub attributes: &'a dyn Attributes,
}

impl Scope for StackScope<'_> {
    fn var(&self, name: &str) -> Option<(Value, bool)> {
        self.variables
            .get(name)
            .map(|v| (v.value.clone(), v.sensitive))
    }
    fn env(&self, name: &str) -> Option<String> {
        (self.env)(name)
    }
    fn resource(&self, addr: &Address, path: &[String]) -> Resolved {
        self.attributes.resource(addr, path)
    }
}

/// Whether dotted `a` and `b` name overlapping parts (one is the other or inside it).
pub fn overlaps(a: &str, b: &str) -> bool {
    a == b || a.starts_with(&format!("{b}.")) || b.starts_with(&format!("{a}."))
}

/// Whether the value at `path` of `rc`'s spec is secret: the schema or the stack says
/// so, or it derives from a secret (`derived`: paths the evaluation marked).
fn field_secret(rc: &ResourceConfig, path: &[String], derived: &[String]) -> bool {
    let dotted = path.join(".");
    rc.resource
        .schema()
        .field(&path[0])
        .is_some_and(|f| f.sensitive)
        || rc
            .sensitive
            .iter()
            .chain(derived)
            .any(|p| overlaps(p, &dotted))
}

/// A spec value as a reference sees it.
fn from_spec(spec: &Value, path: &[String], secret: bool) -> Resolved {
    match lookup(spec, path) {
        Some(v) if is_unknown(v) => Resolved::Unknown(secret),
        Some(v) => Resolved::Known(v.clone(), secret),
        None => Resolved::Known(Value::Null, secret),
    }
}

/// No resource attributes at all (provider tables, variable-only values): every
/// resource attribute is unknown.
pub struct NoResources;

impl Attributes for NoResources {
    fn resource(&self, _addr: &Address, _path: &[String]) -> Resolved {
        Resolved::Unknown(false)
    }
}

/// A scope with variables and the environment, where resources are unknown.
pub fn variables_only<'a>(
    variables: &'a BTreeMap<String, Variable>,
    env: &'a dyn Fn(&str) -> Option<String>,
) -> StackScope<'a> {
    StackScope {
        variables,
        env,
        attributes: &NoResources,
    }
}

/// Offline: a referenced resource's fields are what the stack configures for it (as
/// far as that is known offline); what the cloud reports (outputs, ids) is unknown.
pub struct Offline<'a> {
    pub resources: &'a BTreeMap<Address, ResourceConfig>,
    /// The offline desired specs computed so far (dependencies come first).
    pub specs: &'a BTreeMap<Address, Desired>,
}

impl Attributes for Offline<'_> {
    fn resource(&self, addr: &Address, path: &[String]) -> Resolved {
        let Some(rc) = self.resources.get(addr) else {
            return Resolved::Unknown(false);
        };
        let schema = rc.resource.schema();
        if path[0] == "id" {
            return Resolved::Unknown(false);
        }
        if schema.field(&path[0]).is_some() {
            return match self.specs.get(addr) {
                Some(d) => from_spec(&d.spec, path, field_secret(rc, path, &d.sensitive)),
                None => Resolved::Unknown(field_secret(rc, path, &[])),
            };
        }
        Resolved::Unknown(schema.output(&path[0]).is_some_and(|f| f.sensitive))
    }
}

/// While planning: fields are the desired specs planned so far; outputs are known for
/// objects the plan keeps (and through in-place updates that leave them be).
pub struct Planned<'a> {
    pub resources: &'a BTreeMap<Address, ResourceConfig>,
    pub state: &'a State,
    /// Desired specs computed so far (dependencies come first).
    pub desired: BTreeMap<Address, Desired>,
    /// No-ops whose desired spec is their refreshed spec exactly, with their secret
    /// paths: the spec is read from `state` rather than held a second time.
    pub in_sync: BTreeMap<Address, Vec<String>>,
    /// Actions decided so far.
    pub actions: BTreeMap<Address, Action>,
    /// The spec paths each planned in-place update changes.
    pub changed: BTreeMap<Address, Vec<String>>,
}

impl Planned<'_> {
    /// The desired spec of `addr` planned so far, with its secret paths.
    pub fn spec(&self, addr: &Address) -> Option<(&Value, &[String])> {
        if let Some(d) = self.desired.get(addr) {
            return Some((&d.spec, &d.sensitive));
        }
        let sensitive = self.in_sync.get(addr)?;
        let r = self.state.resources.get(&addr.to_string())?;
        Some((&r.spec, sensitive))
    }
}

impl Attributes for Planned<'_> {
    fn resource(&self, addr: &Address, path: &[String]) -> Resolved {
        let Some(rc) = self.resources.get(addr) else {
            return Resolved::Unknown(false);
        };
        let schema = rc.resource.schema();
        let action = self.actions.get(addr).copied().unwrap_or(Action::Create);
        let existing = self
            .state
            .resources
            .get(&addr.to_string())
            .filter(|r| !resumes_create(r));
        let keeps_object = matches!(action, Action::NoOp | Action::Update);
        if path[0] == "id" {
            return match (keeps_object, existing.and_then(|r| r.id.clone())) {
                (true, Some(id)) => Resolved::Known(Value::String(id), false),
                _ => Resolved::Unknown(false),
            };
        }
        if schema.field(&path[0]).is_some() {
            return match self.spec(addr) {
                Some((spec, sensitive)) => from_spec(spec, path, field_secret(rc, path, sensitive)),
                None => Resolved::Unknown(field_secret(rc, path, &[])),
            };
        }
        let output = schema.output(&path[0]);
        let secret = output.is_some_and(|f| f.sensitive);
        // Outputs are known for objects that stay as they are, and through an in-place
        // update for outputs that follow none of the fields it changes.
        let kept = match action {
            Action::NoOp => true,
            Action::Update => output.and_then(|f| f.derived_from).is_some_and(|follows| {
                let changed = self.changed.get(addr).map(Vec::as_slice).unwrap_or(&[]);
                !changed
                    .iter()
                    .any(|c| follows.iter().any(|f| overlaps(c, f)))
            }),
            _ => false,
        };
        match (kept, existing) {
            (true, Some(r)) => match lookup(&r.outputs, path) {
                Some(v) => Resolved::Known(v.clone(), secret),
                None => Resolved::Unknown(secret),
            },
            _ => Resolved::Unknown(secret),
        }
    }
}

/// Whether a state entry is an interrupted create whose object was found but not yet
/// taken over: the next apply resumes the create (waits for it to be ready).
pub fn resumes_create(r: &ResourceState) -> bool {
    r.id.is_some()
        && r.pending
            .as_ref()
            .is_some_and(|p| p.op == PendingOp::Create)
}

/// While applying (and inspecting): every dependency of a step is applied, so values
/// come from the state; objects not there (yet) are unknown.
pub struct Applied<'a> {
    pub resources: &'a BTreeMap<Address, ResourceConfig>,
    /// Looks one resource up by address: a step only needs the few it references.
    pub entry: &'a dyn Fn(&str) -> Option<ResourceState>,
}

impl Attributes for Applied<'_> {
    fn resource(&self, addr: &Address, path: &[String]) -> Resolved {
        let Some(r) = (self.entry)(&addr.to_string()).filter(|r| !resumes_create(r)) else {
            return Resolved::Unknown(false);
        };
        if path[0] == "id" {
            return r.id.clone().map_or(Resolved::Unknown(false), |id| {
                Resolved::Known(Value::String(id), false)
            });
        }
        let rc = self.resources.get(addr);
        let in_spec = rc.is_some_and(|rc| rc.resource.schema().field(&path[0]).is_some());
        let recorded: Vec<String> = r
            .sensitive_paths
            .iter()
            .filter_map(|p| {
                p.strip_prefix(if in_spec { "spec." } else { "outputs." })
                    .map(str::to_string)
            })
            .collect();
        let dotted = path.join(".");
        let secret = recorded.iter().any(|p| overlaps(p, &dotted))
            || (in_spec && rc.is_some_and(|rc| field_secret(rc, path, &[])))
            || (!in_spec
                && rc.is_some_and(|rc| {
                    rc.resource
                        .schema()
                        .output(&path[0])
                        .is_some_and(|f| f.sensitive)
                }));
        let source = if in_spec { &r.spec } else { &r.outputs };
        match lookup(source, path) {
            Some(v) if is_unknown(v) => Resolved::Unknown(secret),
            Some(v) => Resolved::Known(v.clone(), secret),
            None => Resolved::Known(Value::Null, secret),
        }
    }
}

/// What the pipeline needs besides the resource and the scope.
pub struct Inputs<'a> {
    /// The provider's `[providers.<name>]` table, evaluated.
    pub config: &'a Value,
    /// The resources this one references, as far as they are known offline.
    pub peers: &'a [Peer],
    /// The live spec of the existing object (`ignore_changes` keeps its values).
    pub prior: Option<&'a Value>,
}

/// Computes `rc`'s desired spec in `scope`.
///
/// Fails when a reference has no value, or when the spec breaks a rule of its kind
/// that can be checked with the values known now.
pub fn compute(
    rc: &ResourceConfig,
    scope: &dyn Scope,
    inputs: &Inputs<'_>,
) -> Result<Desired, DesiredError> {
    let evaluated = eval::eval(&rc.body, scope).map_err(DesiredError::Evaluate)?;
    let kind = &rc.resource;
    let schema = kind.schema();
    let mut spec = schema.with_defaults(&evaluated.value);
    let mut sensitive: BTreeSet<String> = evaluated.sensitive_paths.into_iter().collect();
    sensitive.extend(
        schema
            .fields
            .iter()
            .filter(|f| f.sensitive)
            .map(|f| f.name.to_string()),
    );
    sensitive.extend(rc.sensitive.iter().cloned());
    sensitive.remove("");
    let sensitive: Vec<String> = sensitive.into_iter().collect();
    let mut problems = kind.validate(&spec, inputs.config);
    problems.extend(kind.validate_peers(&spec, inputs.peers));
    // Local inputs (a definition file, a dataset's directory) are read now, at
    // validate and plan too: their problems must not wait for the cluster to exist.
    match kind.prepare(spec.clone()) {
        Ok(prepared) => spec = prepared,
        Err(e) => problems.extend(prepare_problem(&spec, e)),
    }
    if !problems.is_empty() {
        let secrets = secret_values(&spec, &sensitive);
        return Err(DesiredError::Check {
            problems: problems
                .into_iter()
                .map(|p| hide_in_problem(p, &sensitive, &secrets))
                .collect(),
        });
    }
    if let Some(prior) = inputs.prior {
        spec = overlay(&spec, prior, &rc.lifecycle.ignore_changes);
    }
    Ok(Desired { spec, sensitive })
}

/// A failed `prepare` as a problem, unless it only failed on a value not known yet
/// (it is prepared again once that value is known).
fn prepare_problem(spec: &Value, e: ProviderError) -> Option<Invalid> {
    let unknown_at = |field: &str| {
        let path: Vec<String> = field.split('.').map(str::to_string).collect();
        lookup(spec, &path).is_some_and(is_unknown)
    };
    match e {
        ProviderError::Invalid { field, message } => (!unknown_at(&field)
            && !message.contains(terrain_providers::protocol::UNKNOWN))
        .then(|| Invalid::at(&field, message)),
        ProviderError::Decode { .. } if is_unknown(spec) => None,
        other => {
            let message = other.to_string();
            (!message.contains(terrain_providers::protocol::UNKNOWN))
                .then(|| Invalid::at("", message))
        }
    }
}

/// The plain values at `paths` of `spec` (strings, numbers), longest first, as they
/// could appear in a message.
pub fn secret_values(spec: &Value, paths: &[String]) -> Vec<String> {
    fn leaves(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::String(s) if !s.is_empty() && !is_unknown(v) => out.push(s.clone()),
            Value::Number(n) => out.push(n.to_string()),
            Value::Array(items) => items.iter().for_each(|i| leaves(i, out)),
            Value::Object(map) => map.values().for_each(|i| leaves(i, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    for p in paths {
        let path: Vec<String> = p.split('.').map(str::to_string).collect();
        if let Some(v) = lookup(spec, &path) {
            leaves(v, &mut out);
        }
    }
    out.sort_by_key(|s| std::cmp::Reverse(s.len()));
    out.dedup();
    out
}

/// The marker shown where a secret would be.
pub const HIDDEN: &str = "(sensitive value)";

/// `problem` with no secret in it. A problem at a secret value also loses every quoted
/// value close to the secret (a suggested rewrite of it, such as its lowercase form).
fn hide_in_problem(mut problem: Invalid, sensitive: &[String], secrets: &[String]) -> Invalid {
    let dotted = problem.path.join(".");
    let at_secret = !dotted.is_empty() && sensitive.iter().any(|p| overlaps(p, &dotted));
    problem.message = hide(&problem.message, secrets, at_secret);
    problem
}

/// `text` with each of `secrets` replaced by [`HIDDEN`]; with `quoted_too`, also every
/// quoted (`…` or "…") piece that looks like one of them (contains it, is contained in
/// it, or differs only a little, as a suggested rewrite does).
pub fn hide(text: &str, secrets: &[String], quoted_too: bool) -> String {
    let mut out = if quoted_too || !secrets.is_empty() {
        hide_quoted(text, secrets, quoted_too)
    } else {
        text.to_string()
    };
    for s in secrets {
        // Very short secrets ("1", "ab") would blank out ordinary words; the quoted
        // pass above catches them where a message quotes a value.
        if s.chars().count() >= 4 || out.trim() == s {
            out = replace_ci(&out, s, HIDDEN);
        }
    }
    out
}

fn hide_quoted(text: &str, secrets: &[String], looks_like: bool) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    loop {
        let next = rest.char_indices().find(|(_, c)| *c == '`' || *c == '"');
        let Some((start, quote)) = next else {
            out.push_str(rest);
            break;
        };
        let after = &rest[start + 1..];
        let Some(end) = after.find(quote) else {
            out.push_str(rest);
            break;
        };
        let inner = &after[..end];
        let lower = inner.to_lowercase();
        let hit = secrets.iter().any(|s| {
            let s = s.to_lowercase();
            lower == s
                || (looks_like
                    && (lower.contains(&s)
                        || (inner.chars().count() >= 3 && s.contains(&lower))
                        || strsim::normalized_levenshtein(&lower, &s) >= 0.5))
        });
        out.push_str(&rest[..start]);
        if hit {
            out.push_str(HIDDEN);
        } else {
            out.push(quote);
            out.push_str(inner);
            out.push(quote);
        }
        rest = &after[end + 1..];
    }
    out
}

/// `text` with every case-insensitive occurrence of `needle` replaced.
fn replace_ci(text: &str, needle: &str, with: &str) -> String {
    if needle.is_empty() {
        return text.to_string();
    }
    let lower = text.to_lowercase();
    let n = needle.to_lowercase();
    // Lowercasing can change byte lengths outside ASCII; fall back to exact matching.
    if lower.len() != text.len() || n.len() != needle.len() {
        return text.replace(needle, with);
    }
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while let Some(found) = lower[i..].find(&n) {
        out.push_str(&text[i..i + found]);
        out.push_str(with);
        i += found + n.len();
    }
    out.push_str(&text[i..]);
    out
}

/// The spec paths where `actual` breaks what `promised` said (values the plan knew),
/// ignoring `ignore` paths: what apply refuses as an inconsistent result. A value the
/// plan left out (null) promised nothing: fields completed from local inputs that were
/// not known yet (a dataset's file list when its directory is another resource's
/// output) are filled at apply.
pub fn broken_promises(promised: &Value, actual: &Value, ignore: &[String]) -> Vec<String> {
    changed_paths(actual, promised, ignore)
        .into_iter()
        .filter(|p| {
            let path: Vec<String> = p.split('.').map(str::to_string).collect();
            lookup(promised, &path).is_some_and(|v| !v.is_null() && !is_unknown(v))
        })
        .collect()
}

/// The resources `rc` references as the state has them (apply, inspect), for its peer
/// checks.
pub fn applied_peers(
    rc: &ResourceConfig,
    entry: &dyn Fn(&str) -> Option<ResourceState>,
) -> Vec<Peer> {
    rc.dependencies()
        .iter()
        .filter_map(|a| {
            let r = entry(&a.to_string())?;
            Some(Peer {
                kind: r.kind,
                address: a.to_string(),
                spec: r.spec,
            })
        })
        .collect()
}

/// The offline view of the resources `rc` references, for its peer checks.
/// `spec` gives the desired spec computed so far of a resource.
pub fn peers<'s>(
    rc: &ResourceConfig,
    resources: &BTreeMap<Address, ResourceConfig>,
    spec: impl Fn(&Address) -> Option<&'s Value>,
) -> Vec<Peer> {
    rc.dependencies()
        .iter()
        .filter_map(|a| {
            let peer = resources.get(a)?;
            Some(Peer {
                kind: peer.resource.kind().to_string(),
                address: a.to_string(),
                spec: spec(a)?.clone(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secrets_are_hidden_with_their_rewrites() {
        let secrets = vec!["MySecretBucket".to_string()];
        let m =
            "`MySecretBucket` has uppercase letters; bucket names are lowercase (`mysecretbucket`)";
        let shown = hide(m, &secrets, true);
        assert!(!shown.to_lowercase().contains("mysecretbucket"), "{shown}");
        assert!(shown.contains("has uppercase letters"), "{shown}");
    }

    #[test]
    fn short_secrets_are_hidden_where_quoted() {
        let shown = hide(
            "\"77\" is not a file mode; use 3 or 4 octal digits, e.g. \"0644\"",
            &["77".into()],
            true,
        );
        assert_eq!(
            shown,
            "(sensitive value) is not a file mode; use 3 or 4 octal digits, e.g. \"0644\""
        );
    }

    #[test]
    fn other_quoted_values_stay() {
        let shown = hide("`ab` is not `zone-x`", &["hunter2-s3cret".into()], false);
        assert_eq!(shown, "`ab` is not `zone-x`");
    }

    #[test]
    fn broken_promises_skip_unknowns() {
        let promised =
            json!({"a": 1, "b": terrain_providers::protocol::UNKNOWN, "c": {"d": "x"}, "e": null});
        let actual = json!({"a": 2, "b": "late", "c": {"d": "x"}, "e": ["filled"]});
        assert_eq!(
            broken_promises(&promised, &actual, &[]),
            vec!["a".to_string()]
        );
    }
}
