//! Plans: for every resource, the action that converges live infrastructure to the
//! stack (create, update in place, replace with its reason, delete, nothing), computed
//! from the refreshed state and the stack's desired specs. Saved with `plan -out`.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use terrain_providers::protocol::is_unknown;

use crate::addr::Address;
use crate::diff::{changed_paths, overlay};
use crate::eval::{self, lookup, Resolved, Scope};
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
    /// The live spec (refreshed), for anything that exists.
    pub before: Option<Value>,
    /// The desired spec, defaults filled; values not known until apply are marked.
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
    /// The state the plan was made against: a saved plan only applies to it.
    pub lineage: String,
    pub serial: u64,
    /// Every resource, in graph order: stack resources dependencies first, then
    /// deletions, dependents first.
    pub changes: Vec<Change>,
    /// The state as refreshed during planning (what apply starts from).
    pub refreshed: BTreeMap<String, ResourceState>,
    /// Non-fatal findings (an interrupted create that could not be adopted…).
    #[serde(default)]
    pub warnings: Vec<String>,
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

    /// Whether applying the plan would change anything.
    pub fn has_changes(&self) -> bool {
        self.changes.iter().any(Change::is_change)
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
        address: Address,
        verb: &'static str,
        why: String,
    },
    #[error("{address}: {message}")]
    Eval { address: Address, message: String },
    #[error("{address}: invalid spec: {message}")]
    Invalid { address: Address, message: String },
    /// An in-place update the provider's API would refuse (an EKS upgrade skipping a
    /// minor version): the plan fails rather than the apply.
    #[error("{address}: cannot be updated in place: {message}")]
    ChangeRefused { address: Address, message: String },
    #[error("--target {0}: no such resource in the stack or the state")]
    UnknownTarget(Address),
}

/// Inputs to planning besides the stack and the refreshed state.
pub struct PlanInputs<'a> {
    pub destroy: bool,
    pub targets: &'a [Address],
    pub env: &'a dyn Fn(&str) -> Option<String>,
}

/// The desired spec of every stack resource as far as it is known at plan time.
struct PlanScope<'a> {
    stack: &'a Stack,
    state: &'a State,
    env: &'a dyn Fn(&str) -> Option<String>,
    /// Desired specs computed so far (dependencies come first) and their secret paths.
    desired: BTreeMap<Address, (Value, Vec<String>)>,
    /// Actions decided so far.
    actions: BTreeMap<Address, Action>,
    /// The spec paths each planned in-place update changes.
    changed: BTreeMap<Address, Vec<String>>,
}

impl Scope for PlanScope<'_> {
    fn var(&self, name: &str) -> Option<(Value, bool)> {
        self.stack
            .variables
            .get(name)
            .map(|v| (v.value.clone(), v.sensitive))
    }

    fn env(&self, name: &str) -> Option<String> {
        (self.env)(name)
    }

    fn resource(&self, addr: &Address, path: &[String]) -> Resolved {
        let Some(rc) = self.stack.resources.get(addr) else {
            return Resolved::Unknown(false);
        };
        let schema = rc.resource.schema();
        let action = self.actions.get(addr).copied().unwrap_or(Action::Create);
        let existing = self.state.resources.get(&addr.to_string());
        let keeps_object = matches!(action, Action::NoOp | Action::Update);
        if path[0] == "id" {
            return match (keeps_object, existing.and_then(|r| r.id.clone())) {
                (true, Some(id)) => Resolved::Known(Value::String(id), false),
                _ => Resolved::Unknown(false),
            };
        }
        if let Some(field) = schema.field(&path[0]) {
            let secret = field.sensitive || rc.sensitive.iter().any(|p| p == &path[0]);
            let Some((spec, secret_paths)) = self.desired.get(addr) else {
                return Resolved::Unknown(secret);
            };
            let secret = secret
                || secret_paths
                    .iter()
                    .any(|p| p == &path[0] || path.join(".").starts_with(&format!("{p}.")));
            return match lookup(spec, path) {
                Some(v) if is_unknown(v) => Resolved::Unknown(secret),
                Some(v) => Resolved::Known(v.clone(), secret),
                None => Resolved::Known(Value::Null, secret),
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

/// Whether two dotted spec paths name overlapping parts (one is the other or inside it).
fn overlaps(a: &str, b: &str) -> bool {
    a == b || a.starts_with(&format!("{b}.")) || b.starts_with(&format!("{a}."))
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
    let state_deps: Deps = state
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
        .collect();

    // Which resources the run may touch.
    let selected: Option<BTreeSet<Address>> = if inputs.targets.is_empty() {
        None
    } else {
        for t in inputs.targets {
            if !stack.resources.contains_key(t) && !state.resources.contains_key(&t.to_string()) {
                return Err(PlanError::UnknownTarget(t.clone()));
            }
        }
        let mut all = state_deps.clone();
        for (a, ds) in &deps {
            all.entry(a.clone()).or_default().extend(ds.iter().cloned());
        }
        Some(if inputs.destroy {
            graph::with_dependents(&all, inputs.targets)
        } else {
            graph::with_dependencies(&all, inputs.targets)
        })
    };
    let in_scope = |a: &Address| selected.as_ref().is_none_or(|s| s.contains(a));

    let mut scope = PlanScope {
        stack,
        state,
        env: inputs.env,
        desired: BTreeMap::new(),
        actions: BTreeMap::new(),
        changed: BTreeMap::new(),
    };
    let mut changes = Vec::new();
    if !inputs.destroy {
        for addr in &order {
            let Some(rc) = stack.resources.get(addr) else {
                continue;
            };
            let key = addr.to_string();
            let existing = state.resources.get(&key);
            let evaluated = eval::eval(&rc.body, &scope).map_err(|e| PlanError::Eval {
                address: addr.clone(),
                message: e.message,
            })?;
            let schema = rc.resource.schema();
            let mut after = schema.with_defaults(&evaluated.value);
            let mut sensitive: BTreeSet<String> = evaluated.sensitive_paths.into_iter().collect();
            sensitive.extend(
                schema
                    .fields
                    .iter()
                    .filter(|f| f.sensitive)
                    .map(|f| f.name.to_string()),
            );
            sensitive.extend(rc.sensitive.iter().cloned());
            let sensitive: Vec<String> = sensitive.into_iter().collect();
            // Checks that needed values only known now (other resources' attributes).
            let config = stack
                .provider_config(rc.resource.provider(), inputs.env)
                .map_err(|e| PlanError::Invalid {
                    address: addr.clone(),
                    message: format!("providers.{}: {}", rc.resource.provider(), e.message),
                })?;
            if let Some(bad) = rc.resource.validate(&after, &config).into_iter().next() {
                return Err(PlanError::Invalid {
                    address: addr.clone(),
                    message: bad.to_string(),
                });
            }
            // Local inputs (a dataset's files) complete the spec, so a changed file
            // shows as a change. A spec still waiting on other resources is completed
            // where it can be; apply completes it again with every value known.
            if is_unknown(&after) {
                if let Ok(prepared) = rc.resource.prepare(after.clone()) {
                    after = prepared;
                }
            } else {
                after = rc.resource.prepare(after).map_err(|e| PlanError::Invalid {
                    address: addr.clone(),
                    message: e.to_string(),
                })?;
            }
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
                dependencies: deps.get(addr).cloned().unwrap_or_default(),
                drift: drift.get(&key).cloned(),
                computed: schema.outputs.iter().map(|f| f.name.to_string()).collect(),
                deposed: existing.map(|r| r.deposed.clone()).unwrap_or_default(),
                tainted: false,
                notes: Vec::new(),
                live_diff: None,
            };
            match existing.filter(|r| r.id.is_some()) {
                None => {
                    change.action = Action::Create;
                }
                Some(live) => {
                    after = overlay(&after, &live.spec, &rc.lifecycle.ignore_changes);
                    let changed = changed_paths(&live.spec, &after, &rc.lifecycle.ignore_changes);
                    let forcing: Vec<String> = changed
                        .iter()
                        .filter(|p| {
                            let parts: Vec<&str> = p.split('.').collect();
                            schema.field_at(&parts).is_some_and(|f| f.force_new)
                        })
                        .cloned()
                        .collect();
                    change.before = Some(live.spec.clone());
                    scope.changed.insert(addr.clone(), changed.clone());
                    change.tainted = live.tainted;
                    change.action = if live.tainted || !forcing.is_empty() {
                        change.replace_because = forcing;
                        Action::Replace
                    } else if !changed.is_empty() {
                        Action::Update
                    } else {
                        Action::NoOp
                    };
                }
            }
            if !in_scope(addr) {
                change.action = Action::NoOp;
            }
            if change.action == Action::Update {
                if let Some(before) = &change.before {
                    let refused = rc.resource.validate_change(before, &after);
                    if !refused.is_empty() {
                        let message: Vec<String> =
                            refused.iter().map(ToString::to_string).collect();
                        return Err(PlanError::ChangeRefused {
                            address: addr.clone(),
                            message: message.join("; "),
                        });
                    }
                }
            }
            if change.action == Action::Replace && rc.lifecycle.prevent_destroy {
                return Err(PlanError::PreventDestroy {
                    address: addr.clone(),
                    verb: "replace",
                    why: format!(
                        " ({} forces replacement)",
                        change.replace_because.join(", ")
                    ),
                });
            }
            change.after = Some(after.clone());
            scope.actions.insert(addr.clone(), change.action);
            scope.desired.insert(addr.clone(), (after, sensitive));
            changes.push(change);
        }
    }

    // Deletions: what the state has and the stack (or a destroy) no longer wants,
    // dependents before what they depend on.
    let doomed: Deps = state_deps
        .iter()
        .filter(|(a, _)| inputs.destroy || !stack.resources.contains_key(*a))
        .filter(|(a, _)| in_scope(a))
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
                        address: addr.clone(),
                        verb: "destroy",
                        why: String::new(),
                    });
                }
            }
        }
        let gone = r.id.is_none();
        changes.push(Change {
            address: addr.clone(),
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
            drift: drift.get(&key).cloned(),
            computed: Vec::new(),
            deposed: r.deposed.clone(),
            tainted: r.tainted,
            notes: Vec::new(),
            live_diff: None,
        });
    }
    Ok(changes)
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
