//! `[[moved]]` entries: a resource, a block of instances or a module call renamed in
//! the stack (`from = "gke_node_pool.gpu"`, `to = "module.gpu_pool.gke_node_pool.main"`)
//! keeps its object: the plan moves its state entry instead of destroying one object
//! and creating another. Checked when the stack is loaded; applied to the stored state
//! before refresh.

use std::collections::BTreeMap;

use crate::addr::{segments, Address, Bracket, ModuleStep};

use super::expr::{Node, NodeKind};
use super::source::{Diagnostic, Span};
use super::ResourceConfig;

/// One side of a move: a resource (an instance, or a whole block when it has no key)
/// or a module call (everything under it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    Resource(Address),
    Module(Vec<ModuleStep>),
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Resource(a) => write!(f, "{a}"),
            Endpoint::Module(steps) => write!(
                f,
                "{}",
                steps
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(".")
            ),
        }
    }
}

impl Endpoint {
    fn parse(s: &str) -> Option<Self> {
        if let Ok(a) = Address::parse(s) {
            return Some(Endpoint::Resource(a));
        }
        let segs = segments(s)?;
        if segs.len() % 2 != 0 {
            return None;
        }
        segs.chunks(2)
            .map(|pair| match pair {
                [m, call]
                    if m.name == "module"
                        && m.bracket.is_none()
                        && crate::addr::is_identifier(&call.name) =>
                {
                    match &call.bracket {
                        None => Some(ModuleStep {
                            name: call.name.clone(),
                            key: None,
                        }),
                        Some(Bracket::Key(k)) => Some(ModuleStep {
                            name: call.name.clone(),
                            key: Some(k.clone()),
                        }),
                        Some(Bracket::Splat) => None,
                    }
                }
                _ => None,
            })
            .collect::<Option<Vec<_>>>()
            .map(Endpoint::Module)
    }

    /// Whether `addr` is (or is under) this endpoint.
    fn holds(&self, addr: &Address) -> bool {
        match self {
            Endpoint::Resource(a) => a.covers(addr),
            Endpoint::Module(steps) => addr.module().starts_with(steps),
        }
    }
}

/// A checked `[[moved]]` entry.
#[derive(Debug, Clone)]
pub struct Move {
    pub from: Endpoint,
    pub to: Endpoint,
    /// The entry, for messages.
    pub span: Span,
}

impl Move {
    /// Where `addr` goes by this move, if it moves.
    pub fn rewrite(&self, addr: &Address) -> Option<Address> {
        match (&self.from, &self.to) {
            (Endpoint::Resource(from), Endpoint::Resource(to)) => {
                if addr == from {
                    Some(to.clone())
                } else if from.key().is_none() && to.key().is_none() && addr.resource() == *from {
                    Some(to.clone().with_key(addr.key().cloned()))
                } else {
                    None
                }
            }
            (Endpoint::Module(from), Endpoint::Module(to)) => {
                let rest = addr.module().strip_prefix(from.as_slice())?;
                let module = to.iter().chain(rest).cloned().collect();
                Some(addr.clone().with_module(module))
            }
            _ => None,
        }
    }
}

/// Checks the `[[moved]]` entries against the stack's resources.
pub fn check(
    entries: &[Node],
    resources: &BTreeMap<Address, ResourceConfig>,
    diags: &mut Vec<Diagnostic>,
) -> Vec<Move> {
    let mut out = Vec::new();
    for entry in entries {
        let NodeKind::Table(fields) = &entry.kind else {
            diags.push(
                Diagnostic::at(entry.span, "moved: each entry is a table", "not a table")
                    .help("write [[moved]] with from = \"…\" and to = \"…\""),
            );
            continue;
        };
        let mut from = None;
        let mut to = None;
        let reported = diags.len();
        for (key, kspan, value) in fields {
            let slot = match key.as_str() {
                "from" => &mut from,
                "to" => &mut to,
                other => {
                    diags.push(
                        Diagnostic::at(
                            *kspan,
                            format!("moved: unknown key `{other}`"),
                            "unknown key",
                        )
                        .help("a moved entry has `from` and `to`"),
                    );
                    continue;
                }
            };
            let parsed = match &value.kind {
                NodeKind::Literal(serde_json::Value::String(s)) => Endpoint::parse(s),
                _ => None,
            };
            match parsed {
                Some(p) => *slot = Some((p, value.span)),
                None => diags.push(
                    Diagnostic::at(
                        value.span,
                        format!("moved.{key}: expected a resource address or a module call"),
                        "not an address",
                    )
                    .help("e.g. \"gke_node_pool.gpu\", \"kubernetes_job.shard[0]\", \"module.gpu_pool\""),
                ),
            }
        }
        let (Some((from, from_span)), Some((to, to_span))) = (from, to) else {
            if diags.len() == reported {
                diags.push(
                    Diagnostic::at(
                        entry.span,
                        "moved: an entry needs both `from` and `to`",
                        "incomplete",
                    )
                    .help("write from = \"old address\" and to = \"new address\""),
                );
            }
            continue;
        };
        let problem = match (&from, &to) {
            _ if from == to => Some((to_span, "`from` and `to` are the same".to_string())),
            (Endpoint::Resource(f), Endpoint::Resource(t)) if f.kind != t.kind => Some((
                to_span,
                format!("a {} cannot become a {}: a move keeps the object, and its kind", f.kind, t.kind),
            )),
            (Endpoint::Resource(_), Endpoint::Module(_))
            | (Endpoint::Module(_), Endpoint::Resource(_)) => Some((
                to_span,
                "a resource moves to a resource address, a module call to a module call".to_string(),
            )),
            // A block turned into instances (`a.b` → `a.b[0]`) is no longer at `a.b`.
            (Endpoint::Resource(f), _) => resources
                .contains_key(f)
                .then(|| (from_span, format!("`{f}` is still in the stack; remove its block, or this entry"))),
            (Endpoint::Module(_), _) => resources
                .keys()
                .find(|a| from.holds(a))
                .map(|a| (from_span, format!("`{a}` is still in the stack under it; remove the module call, or this entry"))),
        };
        if let Some((span, why)) = problem {
            diags.push(Diagnostic::at(
                span,
                format!("moved {from} → {to}: {why}"),
                "invalid move",
            ));
            continue;
        }
        out.push(Move {
            from,
            to,
            span: entry.span,
        });
    }
    out
}

/// What [`rename`] did: the entries it moved, and the moves it could not make.
#[derive(Debug, Default)]
pub struct Renamed {
    /// `(from, to)` per state entry moved, in address order of `from`.
    pub moved: Vec<(String, String)>,
    /// Why a move was not made (its destination already has an object).
    pub skipped: Vec<String>,
}

/// Applies `moves`, in order, to stored state entries: each entry a move covers is
/// renamed (a later move may carry it further), and every dependency list naming it
/// follows. An entry whose destination already holds one is left where it is, and
/// said why: a move never merges two objects.
pub fn rename(
    moves: &[Move],
    resources: &mut BTreeMap<String, crate::state::ResourceState>,
) -> Renamed {
    let mut out = Renamed::default();
    // Where each original entry is now, to report one line per entry.
    let mut origin: BTreeMap<String, String> = BTreeMap::new();
    for m in moves {
        let moving: Vec<(String, Address)> = resources
            .keys()
            .filter_map(|k| Address::parse(k).ok().map(|a| (k.clone(), a)))
            .filter_map(|(k, a)| m.rewrite(&a).map(|to| (k, to)))
            .collect();
        for (key, to) in moving {
            let to_key = to.to_string();
            if resources.contains_key(&to_key) {
                out.skipped.push(format!(
                    "moved {} → {}: `{key}` stays where it is, because `{to_key}` is already in the state",
                    m.from, m.to
                ));
                continue;
            }
            if let Some(entry) = resources.remove(&key) {
                resources.insert(to_key.clone(), entry);
                let first = origin.remove(&key).unwrap_or(key);
                origin.insert(to_key, first);
            }
        }
    }
    let renames: BTreeMap<&String, &String> = origin
        .iter()
        .filter(|(now, first)| now != first)
        .map(|(now, first)| (first, now))
        .collect();
    if renames.is_empty() {
        return out;
    }
    for entry in resources.values_mut() {
        for dep in &mut entry.dependencies {
            if let Some(now) = renames.get(dep) {
                dep.clone_from(now);
            }
        }
    }
    out.moved = renames
        .into_iter()
        .map(|(first, now)| (first.clone(), now.clone()))
        .collect();
    out
}
