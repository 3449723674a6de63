//! Plans: for every resource, the action that converges live infrastructure to the
//! stack (create, update in place, replace with its reason, delete, nothing), computed
//! from the refreshed state and the stack's desired specs. Saved with `plan -out`.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::addr::Address;
use crate::desired::{self, DesiredError, Planned, StackScope};
use crate::diff::{changed_paths, is_without_nulls, without_nulls};
use crate::graph::{self, Deps};
use crate::stack::Stack;
use crate::state::{Deposed, ResourceState, State};

/// The format version of saved plan files.
pub const PLAN_FORMAT_VERSION: u32 = 1;

/// What happens to one resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    NoOp,
    Create,
    Update,
    Replace,
    Delete,
}

impl Action {
    /// The symbol shown in plans.
    pub fn symbol(self) -> &'static str {
        match self {
            Action::NoOp => " ",
            Action::Create => "+",
            Action::Update => "~",
            Action::Replace => "-/+",
            Action::Delete => "-",
        }
    }
}

/// What changed outside terrain since the last apply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Drift {
    /// The spec as terrain last recorded it.
    pub recorded: Value,
    /// The spec as the API reports it now; `None` when the object was deleted.
    pub live: Option<Value>,
}

/// The planned change of one resource.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Change {
    pub address: Address,
    pub kind: String,
    pub action: Action,
    /// The provider's id of the existing object, if there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The live spec (refreshed), for anything that exists and changes; `None` for a
    /// no-op, whose live spec is its entry in [`Plan::refreshed`] (see [`Plan::before`]).
    pub before: Option<Value>,
    /// The desired spec, defaults filled; values not known until apply are marked.
    /// `None` for a no-op whose desired spec is its live one less its null keys (see
    /// [`Plan::after`]).
    pub after: Option<Value>,
    /// The spec fields whose change forces the replace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replace_because: Vec<String>,
    /// Spec paths whose values are secret.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sensitive_paths: Vec<String>,
    #[serde(default)]
    pub create_before_destroy: bool,
    /// What this resource depends on (the stack's view; the state's for deletes).
    pub dependencies: Vec<Address>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift: Option<Drift>,
    /// Attributes the provider reports only once the object exists (for creates and
    /// replaces), shown as known after apply.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub computed: Vec<String>,
    /// Old objects of an interrupted create_before_destroy, to delete.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deposed: Vec<Deposed>,
    /// The object's create failed after it was made: it is replaced whatever changed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tainted: bool,
    /// Things worth telling about this resource (an adopted interrupted create…).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// What the provider will change on the live object, computed against it (a
    /// unified YAML diff of a dry-run apply), for updates and replaces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live_diff: Option<String>,
}

impl Change {
    /// Whether applying this change does anything.
    pub fn is_change(&self) -> bool {
        self.action != Action::NoOp || !self.deposed.is_empty()
    }

    /// A change of `address` by `action` with nothing else known (renderer tests set
    /// the fields they need over it).
    #[cfg(test)]
    pub(crate) fn of(address: Address, action: Action) -> Change {
        Change {
            kind: address.kind.clone(),
            address,
            action,
            id: None,
            before: None,
            after: None,
            replace_because: Vec::new(),
            sensitive_paths: Vec::new(),
            create_before_destroy: false,
            dependencies: Vec::new(),
            drift: None,
            computed: Vec::new(),
            deposed: Vec::new(),
            tainted: false,
            notes: Vec::new(),
            live_diff: None,
        }
    }
}

/// A whole plan.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Plan {
    pub format_version: u32,
    pub terrain_version: String,
    pub stack: String,
    /// Where the stack was loaded from, and its content hash.
    pub stack_path: String,
    pub stack_hash: String,
    pub destroy: bool,
    pub targets: Vec<Address>,
    /// Variable values the plan was made with (a saved plan applies with the same).
    pub variables: Vec<(String, String)>,
    /// The environment the plan was made for (`--env`; none for the default one) and
    /// the variables files it read (`--var-file`): a saved plan applies with the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub var_files: Vec<std::path::PathBuf>,
    /// The state the plan was made against: a saved plan only applies to it.
    pub lineage: String,
    pub serial: u64,
    /// Every resource, in graph order: stack resources dependencies first, then
    /// deletions, dependents first.
    pub changes: Vec<Change>,
    /// State entries renamed by `[[moved]]` entries (the objects stay as they are).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub moved: Vec<Moved>,
    /// The state as refreshed during planning (what apply starts from).
    pub refreshed: BTreeMap<String, ResourceState>,
    /// Non-fatal findings (an interrupted create that could not be adopted…).
    #[serde(default)]
    pub warnings: Vec<String>,
    /// What the stack costs before and after the plan (absent from plans saved before
    /// terrain priced them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<crate::cost::PlanCost>,
}

/// A state entry a `[[moved]]` entry renames.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Moved {
    pub from: String,
    pub to: String,
}

/// Counts of actions, for the summary line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    pub add: usize,
    pub change: usize,
    pub replace: usize,
    pub destroy: usize,
}

impl Plan {
    /// A plan of stack `stack` holding only `changes` (renderer tests).
    #[cfg(test)]
    pub(crate) fn of_changes(stack: &str, changes: Vec<Change>) -> Plan {
        Plan {
            format_version: PLAN_FORMAT_VERSION,
            terrain_version: "test".into(),
            stack: stack.into(),
            stack_path: "stack.toml".into(),
            stack_hash: String::new(),
            destroy: false,
            targets: Vec::new(),
            variables: Vec::new(),
            environment: None,
            var_files: Vec::new(),
            lineage: String::new(),
            serial: 0,
            changes,
            moved: Vec::new(),
            refreshed: Default::default(),
            warnings: Vec::new(),
            cost: None,
        }
    }

    /// Counts by action.
    pub fn summary(&self) -> Summary {
        let mut s = Summary::default();
        for c in &self.changes {
            match c.action {
                Action::Create => s.add += 1,
                Action::Update => s.change += 1,
                Action::Replace => s.replace += 1,
                Action::Delete => s.destroy += 1,
                Action::NoOp => {}
            }
        }
        s
    }

    /// Whether applying the plan would change anything (a move changes the state).
    pub fn has_changes(&self) -> bool {
        !self.moved.is_empty() || self.changes.iter().any(Change::is_change)
    }

    /// The live spec of `c`'s object: its own `before`, or for a no-op the refreshed
    /// entry it was planned from (not copied into the change).
    pub fn before<'a>(&'a self, c: &'a Change) -> Option<&'a Value> {
        c.before.as_ref().or_else(|| {
            (c.action == Action::NoOp)
                .then(|| self.refreshed.get(&c.address.to_string()))
                .flatten()
                .filter(|r| r.id.is_some())
                .map(|r| &r.spec)
        })
    }

    /// The desired spec of `c`: its own `after`, or for a no-op planned in sync its
    /// refreshed spec without the null keys (which is what it was found equal to; the
    /// plan holds no copy).
    pub fn after<'a>(&'a self, c: &'a Change) -> Option<Cow<'a, Value>> {
        match &c.after {
            Some(after) => Some(Cow::Borrowed(after)),
            None if c.action == Action::NoOp => {
                self.before(c).map(|v| Cow::Owned(without_nulls(v)))
            }
            None => None,
        }
    }

    /// Drift found while refreshing, for resources the plan otherwise keeps.
    pub fn drifted(&self) -> impl Iterator<Item = &Change> {
        self.changes.iter().filter(|c| c.drift.is_some())
    }
}

/// Why a plan could not be made.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("{address}: lifecycle.prevent_destroy is set, but this plan would {verb} it{why}; remove prevent_destroy first if this is intended")]
    PreventDestroy {
        address: Box<Address>,
        verb: &'static str,
        why: String,
    },
    #[error("{at}: {address}: {message}")]
    Eval {
        address: Box<Address>,
        /// `file:line:col` of the reference.
        at: String,
        message: String,
    },
    /// The spec breaks its kind's rules with the values known at plan time; each
    /// problem is located at its value in the stack (`file:line:col: field: rule`).
    #[error("{address}: invalid spec:\n  {}", .problems.join("\n  "))]
    Invalid {
        address: Box<Address>,
        problems: Vec<String>,
    },
    /// An in-place update the provider's API would refuse (an EKS upgrade skipping a
    /// minor version): the plan fails rather than the apply.
    #[error("{address}: cannot be updated in place: {message}")]
    ChangeRefused {
        address: Box<Address>,
        message: String,
    },
    #[error("--target {0}: no such resource in the stack or the state")]
    UnknownTarget(Box<Address>),
    /// A custom kind nothing will serve: nothing in the stack provides its API group
    /// on a cluster this plan creates.
    #[error("{at}: {message}")]
    Unserved {
        address: Box<Address>,
        /// `file:line:col` of the consumer's `cluster` field.
        at: String,
        message: String,
    },
    /// Deleting a resource would turn off a cloud API that resources the stack keeps
    /// call.
    #[error("{address}: {message}")]
    ApiStranded {
        address: Box<Address>,
        message: String,
    },
    /// A resource calls a cloud API that is off in its project, and nothing in the
    /// stack turns it on.
    #[error("{at}: {address}: {message}")]
    ServicesOff {
        address: Box<Address>,
        /// `file:line:col` of the first resource calling it.
        at: String,
        message: String,
    },
}

/// Inputs to planning besides the stack and the refreshed state.
pub struct PlanInputs<'a> {
    pub destroy: bool,
    pub targets: &'a [Address],
    pub env: &'a dyn Fn(&str) -> Option<String>,
}

/// The dependencies of every stack resource.
pub fn stack_deps(stack: &Stack) -> Deps {
    stack
        .resources
        .iter()
        .map(|(a, rc)| (a.clone(), rc.dependencies()))
        .collect()
}

/// Computes the plan from a refreshed state (`state`, with live specs) and `drift`
/// (recorded specs of resources that changed or vanished outside terrain).
pub fn compute(
    stack: &Stack,
    state: &State,
    drift: &BTreeMap<String, Drift>,
    inputs: &PlanInputs<'_>,
) -> Result<Vec<Change>, PlanError> {
    let deps = stack_deps(stack);
    let order = graph::topo_order(&deps);
    let state_deps = state_deps(state);
    let selected = selected(stack, state, &deps, &state_deps, inputs)?;
    let ctx = Planning {
        stack,
        state,
        deps: &deps,
        drift,
        inputs,
        selected: selected.as_ref(),
    };

    let mut planned = Planned {
        resources: &stack.resources,
        state,
        desired: BTreeMap::new(),
        in_sync: BTreeMap::new(),
        actions: BTreeMap::new(),
        changed: BTreeMap::new(),
    };
    let mut changes = Vec::with_capacity(stack.resources.len().max(state.resources.len()));
    if !inputs.destroy {
        let mut configs: BTreeMap<&str, Value> = BTreeMap::new();
        for addr in &order {
            let Some(rc) = stack.resources.get(addr) else {
                continue;
            };
            let config = provider_config(stack, &mut configs, addr, rc, inputs.env)?;
            changes.push(plan_resource(&ctx, &mut planned, addr, rc, config)?);
        }
    }
    plan_deletions(&ctx, &state_deps, &mut changes)?;
    if !inputs.destroy {
        unserved(stack, &changes)?;
    }
    take_desired(&mut changes, &mut planned.desired);
    Ok(changes)
}

/// Refuses a custom kind nothing will serve: its cluster is created (or replaced) by
/// this plan and nothing in the stack provides its API group there. On a cluster that
/// exists, the live cluster is asked instead (`Engine::served`).
fn unserved(stack: &Stack, changes: &[Change]) -> Result<(), PlanError> {
    let action = |a: &Address| changes.iter().find(|c| &c.address == a).map(|c| c.action);
    for u in &stack.unserved {
        let fresh = matches!(action(&u.cluster), Some(Action::Create | Action::Replace));
        let consumed = matches!(
            action(&u.consumer),
            Some(Action::Create | Action::Update | Action::Replace)
        );
        if !(fresh && consumed) {
            continue;
        }
        let span = stack.resources.get(&u.consumer).map(|rc| {
            rc.body
                .at(&["cluster".to_string()])
                .map_or(rc.span, |n| n.span)
        });
        return Err(PlanError::Unserved {
            address: Box::new(u.consumer.clone()),
            at: span.map(|s| stack.sources.locate(s)).unwrap_or_default(),
            message: crate::stack::api_groups::unserved_message(u),
        });
    }
    Ok(())
}

/// What planning each resource reads: the run's inputs and what was derived from them
/// before the first resource.
struct Planning<'a> {
    stack: &'a Stack,
    state: &'a State,
    deps: &'a Deps,
    drift: &'a BTreeMap<String, Drift>,
    inputs: &'a PlanInputs<'a>,
    /// The resources the run may touch; `None` when it has no `--target`.
    selected: Option<&'a BTreeSet<Address>>,
}

impl Planning<'_> {
    /// Whether the run may touch `a`.
    fn in_scope(&self, a: &Address) -> bool {
        self.selected.is_none_or(|s| s.contains(a))
    }
}

/// The dependencies of every resource in the state, as the state recorded them.
fn state_deps(state: &State) -> Deps {
    state
        .resources
        .iter()
        .filter_map(|(a, r)| {
            Address::parse(a).ok().map(|addr| {
                (
                    addr,
                    r.dependencies
                        .iter()
                        .filter_map(|d| Address::parse(d).ok())
                        .collect(),
                )
            })
        })
        .collect()
}

/// Which resources the run may touch: `None` when it has no `--target`, otherwise the
/// targets with their dependencies (their dependents for a destroy).
fn selected(
    stack: &Stack,
    state: &State,
    deps: &Deps,
    state_deps: &Deps,
    inputs: &PlanInputs<'_>,
) -> Result<Option<BTreeSet<Address>>, PlanError> {
    if inputs.targets.is_empty() {
        return Ok(None);
    }
    // A target names a resource, or every instance of a block with `count` or
    // `for_each` when written without a key.
    let mut targets: Vec<Address> = Vec::new();
    for t in inputs.targets {
        let before = targets.len();
        targets.extend(stack.resources.keys().filter(|a| t.covers(a)).cloned());
        targets.extend(
            state
                .resources
                .keys()
                .filter_map(|k| Address::parse(k).ok())
                .filter(|a| t.covers(a) && !stack.resources.contains_key(a)),
        );
        if targets.len() == before {
            return Err(PlanError::UnknownTarget(Box::new(t.clone())));
        }
    }
    let mut all = state_deps.clone();
    for (a, ds) in deps {
        all.entry(a.clone()).or_default().extend(ds.iter().cloned());
    }
    Ok(Some(if inputs.destroy {
        graph::with_dependents(&all, &targets)
    } else {
        graph::with_dependencies(&all, &targets)
    }))
}

/// The evaluated `[providers.<name>]` table of `rc`'s provider, from `configs` or
/// evaluated into it: each provider instance is configured once per plan, not once per
/// resource.
fn provider_config<'c, 's: 'c>(
    stack: &'s Stack,
    configs: &'c mut BTreeMap<&'s str, Value>,
    addr: &Address,
    rc: &'s crate::stack::ResourceConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<&'c Value, PlanError> {
    Ok(match configs.entry(rc.provider.as_str()) {
        std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
        std::collections::btree_map::Entry::Vacant(slot) => slot.insert(
            stack
                .provider_config(&rc.provider, env)
                .map_err(|e| PlanError::Eval {
                    address: Box::new(addr.clone()),
                    at: stack.sources.locate(e.span),
                    message: format!("providers.{}: {}", rc.provider, e.message),
                })?,
        ),
    })
}

/// Plans the stack resource `rc` at `addr`: its desired spec, its action against the
/// refreshed state, and the record in `planned` that the resources planned next read.
fn plan_resource(
    ctx: &Planning<'_>,
    planned: &mut Planned<'_>,
    addr: &Address,
    rc: &crate::stack::ResourceConfig,
    config: &Value,
) -> Result<Change, PlanError> {
    let key = addr.to_string();
    let existing = ctx.state.resources.get(&key);
    // An interrupted create whose object was found: the create resumes.
    let resuming = existing.is_some_and(desired::resumes_create);
    let live = existing.filter(|r| r.id.is_some() && !resuming);
    let computed = desired_spec(ctx, planned, rc, config, live)?;
    let after = computed.spec.clone();
    let sensitive = computed.sensitive.clone();
    let schema = rc.resource.schema();
    let mut change = Change {
        address: addr.clone(),
        kind: addr.kind.clone(),
        action: Action::NoOp,
        id: existing.and_then(|r| r.id.clone()),
        before: None,
        after: None,
        replace_because: Vec::new(),
        sensitive_paths: sensitive.clone(),
        create_before_destroy: rc.lifecycle.create_before_destroy,
        dependencies: ctx.deps.get(addr).cloned().unwrap_or_default(),
        drift: ctx.drift.get(&key).cloned(),
        computed: Vec::new(),
        deposed: existing.map(|r| r.deposed.clone()).unwrap_or_default(),
        tainted: false,
        notes: Vec::new(),
        live_diff: None,
    };
    if resuming {
        change.notes.push(format!(
            "adopting the interrupted create of {}: apply waits for it to be ready",
            existing.and_then(|r| r.id.as_deref()).unwrap_or("?")
        ));
    }
    match live {
        None => {
            change.action = Action::Create;
        }
        Some(live) => compare_live(&mut change, planned, rc, live, &after),
    }
    if !ctx.in_scope(addr) {
        change.action = Action::NoOp;
    }
    check_allowed(&change, rc, &after)?;
    if matches!(change.action, Action::Create | Action::Replace) {
        change.computed = schema.outputs.iter().map(|f| f.name.to_string()).collect();
    }
    record_planned(planned, &change, live, after, sensitive);
    Ok(change)
}

/// The desired spec of `rc`, evaluated against the variables, the environment and the
/// resources planned so far.
fn desired_spec(
    ctx: &Planning<'_>,
    planned: &Planned<'_>,
    rc: &crate::stack::ResourceConfig,
    config: &Value,
    live: Option<&ResourceState>,
) -> Result<desired::Desired, PlanError> {
    let stack = ctx.stack;
    let peers = desired::peers(rc, &stack.resources, |a| planned.spec(a).map(|(s, _)| s));
    let scope = StackScope {
        variables: &stack.variables,
        env: ctx.inputs.env,
        attributes: planned,
    };
    desired::compute(
        rc,
        &scope,
        &desired::Inputs {
            config,
            peers: &peers,
            prior: live.map(|r| &r.spec),
        },
    )
    .map_err(|e| located(stack, rc, e))
}

/// Sets the action of `change` for an existing object from how its live spec differs
/// from the desired one (`after`): replace when tainted or a force-new field changes,
/// update when anything else changes, nothing otherwise.
fn compare_live(
    change: &mut Change,
    planned: &mut Planned<'_>,
    rc: &crate::stack::ResourceConfig,
    live: &ResourceState,
    after: &Value,
) {
    let schema = rc.resource.schema();
    let changed = changed_paths(&live.spec, after, &rc.lifecycle.ignore_changes);
    let forcing: Vec<String> = changed
        .iter()
        .filter(|p| {
            let parts: Vec<&str> = p.split('.').collect();
            schema.field_at(&parts).is_some_and(|f| f.force_new)
        })
        .cloned()
        .collect();
    planned
        .changed
        .insert(change.address.clone(), changed.clone());
    change.tainted = live.tainted;
    change.action = if live.tainted || !forcing.is_empty() {
        change.replace_because = forcing;
        Action::Replace
    } else if !changed.is_empty() {
        Action::Update
    } else {
        Action::NoOp
    };
    // A change that changes nothing does not copy the live spec: it is
    // the plan's refreshed entry ([`Plan::before`] finds it there).
    if change.action != Action::NoOp {
        change.before = Some(live.spec.clone());
    }
}

/// Fails the plan of `change` when the provider's API would refuse its in-place update,
/// or when it replaces a resource under `prevent_destroy`.
fn check_allowed(
    change: &Change,
    rc: &crate::stack::ResourceConfig,
    after: &Value,
) -> Result<(), PlanError> {
    if change.action == Action::Update {
        if let Some(before) = &change.before {
            let refused = rc.resource.validate_change(before, after);
            if !refused.is_empty() {
                let message: Vec<String> = refused.iter().map(ToString::to_string).collect();
                return Err(PlanError::ChangeRefused {
                    address: Box::new(change.address.clone()),
                    message: message.join("; "),
                });
            }
        }
    }
    if change.action == Action::Replace && rc.lifecycle.prevent_destroy {
        return Err(PlanError::PreventDestroy {
            address: Box::new(change.address.clone()),
            verb: "replace",
            why: format!(
                " ({} forces replacement)",
                change.replace_because.join(", ")
            ),
        });
    }
    Ok(())
}

/// Records the action and the desired spec (`after`) of `change` in `planned`.
fn record_planned(
    planned: &mut Planned<'_>,
    change: &Change,
    live: Option<&ResourceState>,
    after: Value,
    sensitive: Vec<String>,
) {
    // `after` goes into `planned.desired`, where the references of the
    // resources planned next read it; the change takes it from there at the end.
    // A no-op whose desired spec is exactly its refreshed one keeps neither: the
    // refreshed entry stands for both ([`Plan::after`]).
    let addr = &change.address;
    planned.actions.insert(addr.clone(), change.action);
    let in_sync = change.action == Action::NoOp
        && live.is_some_and(|live| is_without_nulls(&live.spec, &after));
    if in_sync {
        planned.in_sync.insert(addr.clone(), sensitive);
    } else {
        planned.desired.insert(
            addr.clone(),
            desired::Desired {
                spec: after,
                sensitive,
            },
        );
    }
}

/// Appends the deletions to `changes`: what the state has and the stack (or a destroy)
/// no longer wants, dependents before what they depend on.
fn plan_deletions(
    ctx: &Planning<'_>,
    state_deps: &Deps,
    changes: &mut Vec<Change>,
) -> Result<(), PlanError> {
    let (stack, state, inputs) = (ctx.stack, ctx.state, ctx.inputs);
    let doomed: Deps = state_deps
        .iter()
        .filter(|(a, _)| inputs.destroy || !stack.resources.contains_key(*a))
        .filter(|(a, _)| ctx.in_scope(a))
        .map(|(a, d)| (a.clone(), d.clone()))
        .collect();
    let mut delete_order = graph::topo_order(&doomed);
    delete_order.reverse();
    for addr in delete_order {
        let key = addr.to_string();
        let Some(r) = state.resources.get(&key) else {
            continue;
        };
        if inputs.destroy {
            if let Some(rc) = stack.resources.get(&addr) {
                if rc.lifecycle.prevent_destroy {
                    return Err(PlanError::PreventDestroy {
                        address: Box::new(addr.clone()),
                        verb: "destroy",
                        why: String::new(),
                    });
                }
            }
        }
        changes.push(deletion(addr, r, ctx.drift.get(&key).cloned()));
    }
    Ok(())
}

/// The change that deletes the state's resource `r` at `addr` (nothing, when its
/// object is already gone).
fn deletion(addr: Address, r: &ResourceState, drift: Option<Drift>) -> Change {
    let gone = r.id.is_none();
    Change {
        address: addr,
        kind: r.kind.clone(),
        action: if gone { Action::NoOp } else { Action::Delete },
        id: r.id.clone(),
        before: (!gone).then(|| r.spec.clone()),
        after: None,
        replace_because: Vec::new(),
        sensitive_paths: r
            .sensitive_paths
            .iter()
            .filter_map(|p| p.strip_prefix("spec.").map(str::to_string))
            .collect(),
        create_before_destroy: false,
        dependencies: r
            .dependencies
            .iter()
            .filter_map(|d| Address::parse(d).ok())
            .collect(),
        drift,
        computed: Vec::new(),
        deposed: r.deposed.clone(),
        tainted: r.tainted,
        notes: Vec::new(),
        live_diff: None,
    }
}

/// Moves each planned change's desired spec out of `desired` into the change, so that
/// the plan never holds two copies of every spec.
fn take_desired(changes: &mut [Change], desired: &mut BTreeMap<Address, desired::Desired>) {
    for change in changes {
        if change.after.is_none() {
            if let Some(d) = desired.remove(&change.address) {
                change.after = Some(d.spec);
            }
        }
    }
}

/// A desired-spec failure of `rc` as a plan error, each problem at its value.
fn located(stack: &Stack, rc: &crate::stack::ResourceConfig, e: DesiredError) -> PlanError {
    match e {
        DesiredError::Evaluate(e) => PlanError::Eval {
            address: Box::new(rc.addr.clone()),
            at: stack.sources.locate(e.span),
            message: e.message,
        },
        DesiredError::Check { problems } => PlanError::Invalid {
            address: Box::new(rc.addr.clone()),
            problems: problems
                .iter()
                .map(|p| {
                    let span = rc.body.at(&p.path).map_or(rc.span, |n| n.span);
                    format!("{}: {p}", stack.sources.locate(span))
                })
                .collect(),
        },
    }
}

/// One step of applying a plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Step {
    Create,
    Update,
    Delete,
    /// Delete the old objects left by an interrupted create_before_destroy.
    DeleteDeposed,
}

/// The steps of a plan and what each waits for: indices into `steps`.
pub struct StepGraph {
    pub steps: Vec<(usize, Step)>,
    pub deps: Vec<Vec<usize>>,
}

/// Orders the steps of applying `changes` (indices into it): creates and updates after
/// the creates/updates of their dependencies; deletes after the deletes of their
/// dependents; a replace deletes then creates, or with create_before_destroy creates,
/// lets dependents move over, then deletes.
pub fn steps(changes: &[Change]) -> StepGraph {
    let mut steps = Vec::new();
    let mut index: BTreeMap<(Address, Step), usize> = BTreeMap::new();
    for (i, c) in changes.iter().enumerate() {
        let mut add = |s: Step| {
            index.insert((c.address.clone(), s), steps.len());
            steps.push((i, s));
        };
        match c.action {
            Action::Create => add(Step::Create),
            Action::Update => add(Step::Update),
            // With create_before_destroy the create moves the old object to `deposed`,
            // and deleting the deposed objects is what removes it.
            Action::Replace if c.create_before_destroy => {
                add(Step::Create);
                add(Step::DeleteDeposed);
            }
            Action::Replace => {
                add(Step::Delete);
                add(Step::Create);
            }
            Action::Delete => add(Step::Delete),
            Action::NoOp => {}
        }
        let cbd_replace = c.action == Action::Replace && c.create_before_destroy;
        if !c.deposed.is_empty() && !cbd_replace {
            add(Step::DeleteDeposed);
        }
    }
    // dependents[a] = changes depending on a.
    let mut dependents: BTreeMap<&Address, Vec<usize>> = BTreeMap::new();
    for (i, c) in changes.iter().enumerate() {
        for d in &c.dependencies {
            dependents.entry(d).or_default().push(i);
        }
    }
    let mut deps = vec![Vec::new(); steps.len()];
    for (si, &(ci, step)) in steps.iter().enumerate() {
        let c = &changes[ci];
        let find = |a: &Address, s: Step| index.get(&(a.clone(), s)).copied();
        let mut wait = Vec::new();
        match step {
            Step::Create | Step::Update => {
                for d in &c.dependencies {
                    wait.extend(find(d, Step::Create));
                    wait.extend(find(d, Step::Update));
                }
                if step == Step::Create && c.action == Action::Replace && !c.create_before_destroy {
                    wait.extend(find(&c.address, Step::Delete));
                }
            }
            Step::Delete => {
                for &di in dependents
                    .get(&c.address)
                    .map(Vec::as_slice)
                    .unwrap_or_default()
                {
                    let dep = &changes[di];
                    // Dependents being removed go first; with create_before_destroy, the
                    // dependents move to the new object first.
                    if dep.action == Action::Delete
                        || (dep.action == Action::Replace && !dep.create_before_destroy)
                    {
                        wait.extend(find(&dep.address, Step::Delete));
                    }
                }
            }
            Step::DeleteDeposed => {
                wait.extend(find(&c.address, Step::Create));
                // Dependents move over to the new object before the old one goes.
                for &di in dependents
                    .get(&c.address)
                    .map(Vec::as_slice)
                    .unwrap_or_default()
                {
                    wait.extend(find(&changes[di].address, Step::Create));
                    wait.extend(find(&changes[di].address, Step::Update));
                }
            }
        }
        wait.retain(|w| *w != si);
        wait.sort_unstable();
        wait.dedup();
        deps[si] = wait;
    }
    StepGraph { steps, deps }
}
