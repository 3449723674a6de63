//! The engine: refresh state through the providers, plan, and apply a plan with bounded
//! parallelism. Each operation's intent is journaled before its API call (write-ahead)
//! and its result after, so a killed run loses nothing and the next run adopts what an
//! interrupted create made instead of creating it again; the end of an apply folds the
//! journal into a new snapshot.
//!
//! The engine prints nothing: it reports [`Event`]s to an [`Observer`].

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::stream::{self, StreamExt, TryStreamExt};
use serde_json::Value;
use terrain_providers::{Ctx, Observed, ProviderError, Registry, Resource};

use crate::addr::Address;
use crate::desired::{self, StackScope};
use crate::diff::changed_paths;
use crate::eval::{self, lookup};
use crate::plan::{self, Action, Change, Drift, Plan, PlanError, PlanInputs, Step};
use crate::stack::Stack;
use crate::state::{
    journal, Backend, Deposed, OutputState, Pending, PendingOp, ResourceState, State, StateError,
};
use crate::walk::{self, Cancel, Outcome};

/// What the engine reports while it works.
#[derive(Debug, Clone)]
pub enum Event {
    /// Reading a resource's live state.
    Refreshing { address: Address, id: String },
    /// An operation started. `adopts` names the object of an interrupted create that
    /// this create adopts (and waits for) instead of making a new one.
    Started {
        address: Address,
        step: Step,
        adopts: Option<String>,
    },
    /// A long operation's progress.
    Progress { address: Address, message: String },
    /// An operation finished.
    Finished {
        address: Address,
        step: Step,
        elapsed: Duration,
        id: Option<String>,
    },
    /// An operation failed.
    Failed {
        address: Address,
        step: Step,
        error: String,
    },
    /// Not attempted because a dependency failed.
    Skipped { address: Address, because: Address },
    /// Something worth knowing that is not an error.
    Warning(String),
}

/// Receives [`Event`]s; the output layer implements it.
pub trait Observer: Send + Sync {
    fn event(&self, event: Event);
}

/// An observer that drops everything (tests, benchmarks).
pub struct Quiet;

impl Observer for Quiet {
    fn event(&self, _: Event) {}
}

/// Why an engine operation failed.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    State(Box<StateError>),
    #[error(transparent)]
    Plan(Box<PlanError>),
    #[error("{address}: refresh: {source}")]
    Refresh {
        address: Address,
        #[source]
        source: Box<ProviderError>,
    },
    #[error("{address}: the state has kind `{kind}`, which this terrain does not know")]
    UnknownKind { address: Address, kind: String },
    #[error("provider `{provider}`: configuration: {message}")]
    ProviderConfig { provider: String, message: String },
    #[error("the saved plan is stale: {0}; run `terrain plan` again")]
    StalePlan(String),
    #[error("apply finished with {} error(s):\n{}", .0.len(), .0.iter().map(|(a, e)| format!("  {a}: {e}")).collect::<Vec<_>>().join("\n"))]
    Apply(Vec<(Address, String)>),
    #[error("interrupted: {done} operation(s) completed and saved, {not_started} not started; run the same command again to continue")]
    Interrupted { done: usize, not_started: usize },
    #[error("outputs.{name}: {message}")]
    Output { name: String, message: String },
    #[error("import {address}: {message}")]
    Import { address: Address, message: String },
    #[error("the stack does not fit what the cloud offers (nothing was changed):\n{}", .0.iter().map(|m| m.lines().map(|l| format!("  {l}")).collect::<Vec<_>>().join("\n")).collect::<Vec<_>>().join("\n"))]
    Capacity(Vec<String>),
}

/// Wraps a provider's read failure with the resource's address.
fn refresh_error(address: &Address) -> impl FnOnce(ProviderError) -> EngineError + '_ {
    move |source| EngineError::Refresh {
        address: address.clone(),
        source: Box::new(source),
    }
}

impl From<PlanError> for EngineError {
    fn from(e: PlanError) -> Self {
        Self::Plan(Box::new(e))
    }
}

impl From<StateError> for EngineError {
    fn from(e: StateError) -> Self {
        Self::State(Box::new(e))
    }
}

/// Reads an environment variable (the process environment, or a fixed map in tests).
pub use terrain_providers::EnvFn;

/// What reading one unit of refresh found: each object's index among the reads and its
/// live state (`None`: not found), and a warning when a list call failed.
type UnitRead = (Vec<(usize, Option<Observed>)>, Option<String>);

/// One refreshed resource: its key, its new entry, drift, a warning.
type Refreshed = (String, Settled, Option<Drift>, Option<String>);

/// What refresh makes of one stored entry.
enum Settled {
    /// The object is gone and nothing of it is kept.
    Gone,
    /// The live object is exactly as recorded: the stored entry is the refreshed one,
    /// moved rather than rebuilt, so a re-plan of objects in sync holds one copy of them.
    Kept,
    /// A new entry (drift, an adoption, leftover deposed objects).
    New(Box<ResourceState>),
}

/// What a refresh found.
pub struct Refresh {
    /// The refreshed state: live specs and outputs; vanished objects dropped.
    pub state: State,
    pub drift: BTreeMap<String, Drift>,
    pub warnings: Vec<String>,
    /// Whether the refreshed entries differ from the stored ones.
    pub learned: bool,
}

/// The state a plan is applied to: the stored state's records besides its resources
/// (lineage, serial, outputs), whose resources are the plan's refreshed ones, and
/// whether those differ from the ones stored (apply then records them first).
#[derive(Debug, Clone, Default)]
pub struct Base {
    pub state: State,
    pub learned: bool,
}

impl Base {
    /// The base for applying `plan` to `stored`, the state as loaded now (a saved plan,
    /// checked fresh against it).
    pub fn against(stored: State, plan: &Plan) -> Self {
        let learned = stored.resources != plan.refreshed;
        Self {
            state: State {
                resources: BTreeMap::new(),
                ..stored
            },
            learned,
        }
    }
}

/// A state entry whose object refresh reads: under `id`, with `prior` as its last
/// applied spec (the intent's, for an interrupted create). Borrows from the state being
/// refreshed: a refresh holds no copy of it besides the refreshed one it builds.
struct ToRead<'a> {
    key: &'a str,
    address: Address,
    kind: Arc<dyn Resource>,
    id: &'a str,
    prior: &'a Value,
    entry: &'a ResourceState,
    resuming: bool,
}

/// How the engine runs.
#[derive(Clone)]
pub struct Settings {
    pub parallelism: usize,
    pub env: EnvFn,
    /// Provider settings laid over the stack's `[providers.<name>]` tables, key by key
    /// (`--sandbox` points every provider at the local emulator this way).
    pub provider_overrides: BTreeMap<String, serde_json::Map<String, Value>>,
    /// Refresh objects whose kind can list them with one list call per key
    /// ([`Resource::batch_key`]); off, each object is read alone (benchmarks compare).
    pub batch_refresh: bool,
    /// What the run's provider calls share: each provider instance's configured
    /// clients, Kubernetes connections per cluster, discovery. One per engine (settings
    /// made by [`Settings::default`] get a new one); never shared between engines.
    pub session: Arc<terrain_providers::Session>,
    /// The prices plans are costed with: the shipped catalog, with the stack's or the
    /// command line's price file laid over it.
    pub catalog: Arc<crate::cost::Catalog>,
    /// Read every object through its provider before planning (`--refresh=false`
    /// plans against the state as last recorded, and asks the clouds nothing: neither
    /// the live objects nor their capacity).
    pub refresh: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            refresh: true,
            batch_refresh: true,
            parallelism: 10,
            env: Arc::new(|k| std::env::var(k).ok()),
            provider_overrides: BTreeMap::new(),
            session: terrain_providers::Session::new(),
            catalog: crate::cost::Catalog::shipped(),
        }
    }
}

/// The engine for one stack and one state backend.
pub struct Engine {
    pub stack: Stack,
    pub registry: Registry,
    pub backend: Arc<dyn Backend>,
    pub settings: Settings,
    pub observer: Arc<dyn Observer>,
    pub cancel: Cancel,
}

/// The result of an apply.
#[derive(Debug, Clone, Default)]
pub struct ApplyReport {
    pub created: usize,
    pub updated: usize,
    pub replaced: usize,
    pub deleted: usize,
    pub outputs: BTreeMap<String, OutputState>,
}

impl Engine {
    pub(crate) fn env(&self) -> impl Fn(&str) -> Option<String> + '_ {
        move |k| (self.settings.env)(k)
    }

    pub(crate) fn kind(
        &self,
        address: &Address,
        kind: &str,
    ) -> Result<Arc<dyn Resource>, EngineError> {
        self.registry
            .get(kind)
            .cloned()
            .ok_or_else(|| EngineError::UnknownKind {
                address: address.clone(),
                kind: kind.to_string(),
            })
    }

    /// The `[providers.<name>]` table, evaluated (empty object when absent).
    /// The configuration of provider instance `provider` (`gcp`, `gcp.europe`): the
    /// stack's table through the provider's configure step, with the run's overrides
    /// for the provider (`--sandbox`) laid over every instance of it.
    pub(crate) fn provider_config(&self, provider: &str) -> Result<Value, EngineError> {
        let env = self.env();
        let mut config = self.stack.provider_config(provider, &env).map_err(|e| {
            EngineError::ProviderConfig {
                provider: provider.to_string(),
                message: e.message,
            }
        })?;
        let base = provider.split_once('.').map_or(provider, |(b, _)| b);
        if let (Some(extra), Value::Object(table)) =
            (self.settings.provider_overrides.get(base), &mut config)
        {
            for (key, value) in extra {
                table.insert(key.clone(), value.clone());
            }
        }
        Ok(config)
    }

    /// The provider instance that manages `address` (of a kind of provider `base`):
    /// the stack's choice; for a resource the stack no longer has, the instance that
    /// made it (`recorded`, from the state), so it is read and destroyed where it is.
    pub(crate) fn instance(&self, address: &Address, base: &str, recorded: Option<&str>) -> String {
        if let Some(rc) = self.stack.resources.get(address) {
            return rc.provider.clone();
        }
        match recorded {
            Some(p) if p == base || p.strip_prefix(base).is_some_and(|r| r.starts_with('.')) => {
                p.to_string()
            }
            _ => base.to_string(),
        }
    }

    /// The provider instance a refresh reads `read` through.
    fn read_instance(&self, read: &ToRead<'_>) -> String {
        self.instance(
            &read.address,
            read.kind.provider(),
            Some(&read.entry.provider),
        )
    }

    /// The context of a call for `address` through provider instance `provider`.
    pub(crate) fn ctx(&self, address: &Address, provider: &str) -> Result<Ctx, EngineError> {
        self.ctx_hiding(address, provider, Vec::new())
    }

    /// [`Engine::ctx`] for a call whose progress lines may quote `secrets` (a spec
    /// value a provider names while it works, e.g. a fallback machine type): they are
    /// hidden there as in every other output.
    pub(crate) fn ctx_hiding(
        &self,
        address: &Address,
        provider: &str,
        secrets: Vec<String>,
    ) -> Result<Ctx, EngineError> {
        let observer = self.observer.clone();
        let addr = address.clone();
        Ok(
            Ctx::new(address.to_string(), self.provider_config(provider)?)
                .in_run(self.settings.session.clone(), self.settings.env.clone())
                .with_reporter(Arc::new(move |m: &str| {
                    observer.event(Event::Progress {
                        address: addr.clone(),
                        message: hide_secrets(m.to_string(), &secrets),
                    })
                })),
        )
    }

    /// Loads the state (a new empty one when there is none).
    pub async fn load_state(&self) -> Result<State, EngineError> {
        Ok(self.backend.load().await?.unwrap_or_default())
    }

    /// Reads every resource in `stored` (the entries of the state `header` heads)
    /// through its provider: returns the refreshed state (live specs and outputs;
    /// vanished objects dropped; interrupted creates adopted where the object is found)
    /// and the drift found. Entries found in sync move into the refreshed state as they
    /// are.
    ///
    /// Objects whose kind can list them together ([`Resource::batch_key`]) are read with
    /// one list call per key; the rest one read each. A list is trusted for the objects
    /// it shows: one it does not show is read alone before it is called gone, and a list
    /// that fails falls back to reading each object alone.
    pub async fn refresh(
        &self,
        header: &State,
        stored: BTreeMap<String, ResourceState>,
    ) -> Result<Refresh, EngineError> {
        let mut refreshed = State {
            resources: BTreeMap::new(),
            outputs: header.outputs.clone(),
            ..header.clone_header()
        };
        let mut drift = BTreeMap::new();
        let mut warnings = Vec::new();
        let mut reads = Vec::new();
        for (key, r) in &stored {
            match self.to_read(key, r)? {
                Ok(read) => reads.push(read),
                Err(warning) => warnings.extend(warning),
            }
        }

        // Group the reads into list calls where the kind can list them.
        let mut configs: BTreeMap<String, Value> = BTreeMap::new();
        let mut batches: BTreeMap<(&'static str, String), Vec<usize>> = BTreeMap::new();
        let mut units: Vec<Vec<usize>> = Vec::new();
        for (i, read) in reads.iter().enumerate() {
            let provider = self.read_instance(read);
            if !configs.contains_key(&provider) {
                let config = self.provider_config(&provider)?;
                configs.insert(provider.clone(), config);
            }
            let config = configs.get(&provider).unwrap_or(&Value::Null);
            let key = if self.settings.batch_refresh {
                read.kind.batch_key(config, read.id, read.prior)
            } else {
                None
            };
            match key {
                Some(key) => batches.entry((read.kind.kind(), key)).or_default().push(i),
                None => units.push(vec![i]),
            }
        }
        units.extend(batches.into_values());
        let parallelism = self.settings.parallelism.max(1);
        let (reads, configs) = (&reads, &configs);
        let answers: Vec<Result<UnitRead, EngineError>> = stream::iter(units)
            .map(|unit| self.read_unit(reads, configs, unit))
            .buffer_unordered(parallelism)
            .collect()
            .await;
        let mut live: Vec<Option<Observed>> = vec![None; reads.len()];
        for answer in answers {
            let (found, warning) = answer?;
            warnings.extend(warning);
            for (i, obs) in found {
                live[i] = obs;
            }
        }
        let results: Vec<Result<Refreshed, EngineError>> = stream::iter(reads.iter().zip(live))
            .map(|(read, obs)| self.settle(read, obs))
            .buffered(parallelism)
            .collect()
            .await;
        let read = reads.len();
        let mut stored = stored;
        // An entry nothing was read for (an interrupted create that cannot be found)
        // is dropped: that is something learned.
        let mut learned = read != stored.len();
        for res in results {
            let (key, settled, d, warning) = res?;
            match settled {
                Settled::Gone => learned = true,
                Settled::Kept => {
                    if let Some(r) = stored.remove(&key) {
                        refreshed.resources.insert(key.clone(), r);
                    }
                }
                Settled::New(r) => {
                    learned |= stored.get(&key) != Some(&*r);
                    refreshed.resources.insert(key.clone(), *r);
                }
            }
            if let Some(d) = d {
                drift.insert(key, d);
            }
            warnings.extend(warning);
        }
        Ok(Refresh {
            state: refreshed,
            drift,
            warnings,
            learned,
        })
    }

    /// What refreshing the entry `key` reads: `Err` with an optional warning when there
    /// is nothing to read (an interrupted create whose object cannot be found by name).
    fn to_read<'a>(
        &self,
        key: &'a str,
        r: &'a ResourceState,
    ) -> Result<Result<ToRead<'a>, Option<String>>, EngineError> {
        let address = Address::parse(key).map_err(|e| {
            refresh_error(&Address::new("state", "entry"))(ProviderError::Unsupported(
                e.to_string(),
            ))
        })?;
        let kind = self.kind(&address, &r.kind)?;
        // An interrupted create: look for the object under the id it was to get.
        let resuming = desired::resumes_create(r);
        let (id, prior) = match (&r.id, &r.pending) {
            // A create being resumed: its spec is the intent's.
            (Some(id), Some(p)) if resuming => (id.as_str(), &p.spec),
            (Some(id), _) => (id.as_str(), &r.spec),
            (None, Some(p)) => match &p.planned_id {
                Some(pid) => (pid.as_str(), &p.spec),
                None => {
                    return Ok(Err(Some(format!(
                        "{address}: a create started at {} was interrupted and {} objects cannot be found by name; if it made one, it is not managed by terrain",
                        p.started_at, r.kind
                    ))));
                }
            },
            (None, None) => return Ok(Err(None)),
        };
        Ok(Ok(ToRead {
            key,
            address,
            kind,
            id,
            prior,
            entry: r,
            resuming,
        }))
    }

    /// Reads the objects of one unit (one object, or one list call's worth): each
    /// one's index in `reads` and what was found, plus a warning when a list failed.
    /// `configs` holds each provider's configuration, worked out once per refresh.
    async fn read_unit(
        &self,
        reads: &[ToRead<'_>],
        configs: &BTreeMap<String, Value>,
        unit: Vec<usize>,
    ) -> Result<UnitRead, EngineError> {
        for &i in &unit {
            self.observer.event(Event::Refreshing {
                address: reads[i].address.clone(),
                id: reads[i].id.to_string(),
            });
        }
        let (alone, warning) = match unit.as_slice() {
            [] => return Ok((Vec::new(), None)),
            [_] => (unit, None),
            [first, ..] => {
                let kind = &reads[*first].kind;
                let config = configs
                    .get(&self.read_instance(&reads[*first]))
                    .cloned()
                    .unwrap_or(Value::Null);
                let ctx = Ctx::new(format!("{} (list of {})", kind.kind(), unit.len()), config)
                    .in_run(self.settings.session.clone(), self.settings.env.clone());
                let items: Vec<(&str, &Value)> = unit
                    .iter()
                    .map(|&i| (reads[i].id, reads[i].prior))
                    .collect();
                match kind.read_batch(&ctx, &items).await {
                    Ok(found) if found.len() == unit.len() => {
                        let mut shown = Vec::with_capacity(unit.len());
                        let mut not_shown = Vec::new();
                        for (i, obs) in unit.into_iter().zip(found) {
                            match obs {
                                Some(obs) => shown.push((i, Some(obs))),
                                None => not_shown.push(i),
                            }
                        }
                        let confirmed = self.read_alone(reads, not_shown).await?;
                        shown.extend(confirmed);
                        return Ok((shown, None));
                    }
                    Ok(_) => (unit, None),
                    Err(e) => {
                        let warning = format!(
                            "{}: listing {} objects failed ({e}); each was read alone",
                            kind.kind(),
                            items.len()
                        );
                        (unit, Some(warning))
                    }
                }
            }
        };
        Ok((self.read_alone(reads, alone).await?, warning))
    }

    /// Reads each object of `unit` with its own call, `parallelism` at a time.
    async fn read_alone(
        &self,
        reads: &[ToRead<'_>],
        unit: Vec<usize>,
    ) -> Result<Vec<(usize, Option<Observed>)>, EngineError> {
        stream::iter(unit)
            .map(|i| async move {
                let read = &reads[i];
                let ctx = self.ctx(&read.address, &self.read_instance(read))?;
                let live = read
                    .kind
                    .read(&ctx, read.id, read.prior)
                    .await
                    .map_err(refresh_error(&read.address))?;
                Ok((i, live))
            })
            .buffered(self.settings.parallelism.max(1))
            .try_collect()
            .await
    }

    /// The refreshed entry for `read`, given its live object: drift, adoption of an
    /// interrupted create, leftover deposed objects.
    async fn settle(
        &self,
        read: &ToRead<'_>,
        live: Option<Observed>,
    ) -> Result<Refreshed, EngineError> {
        let address = &read.address;
        let key = read.key.to_string();
        let entry = read.entry;
        let id = read.id;
        let kind = &read.kind;
        let mut deposed = Vec::new();
        if !entry.deposed.is_empty() {
            let ctx = self.ctx(address, &self.read_instance(read))?;
            for d in &entry.deposed {
                if kind
                    .read(&ctx, &d.id, &d.spec)
                    .await
                    .map_err(refresh_error(address))?
                    .is_some()
                {
                    deposed.push(d.clone());
                }
            }
        }
        // The new entry: the old one's records around the given spec and outputs, which
        // are moved in rather than the old ones copied and overwritten.
        let rebuilt =
            |id: Option<String>, spec: Value, outputs: Value, pending: Option<Pending>| {
                ResourceState {
                    kind: entry.kind.clone(),
                    provider: entry.provider.clone(),
                    id,
                    spec,
                    outputs,
                    dependencies: entry.dependencies.clone(),
                    sensitive_paths: entry.sensitive_paths.clone(),
                    pending,
                    deposed: deposed.clone(),
                    tainted: entry.tainted,
                }
            };
        let adopted = entry.id.is_none() || read.resuming;
        match live {
            None if adopted => Ok((key, Settled::Gone, None, None)),
            None => {
                let drift = Drift {
                    recorded: entry.spec.clone(),
                    live: None,
                };
                if deposed.is_empty() {
                    Ok((key, Settled::Gone, Some(drift), None))
                } else {
                    // Keep the entry so the leftover old objects still get deleted.
                    let kept = rebuilt(None, entry.spec.clone(), entry.outputs.clone(), None);
                    Ok((key, Settled::New(Box::new(kept)), Some(drift), None))
                }
            }
            Some(obs) => {
                let drift = (!adopted
                    && entry.pending.is_none()
                    && !changed_paths(&entry.spec, &obs.spec, &[]).is_empty())
                .then(|| Drift {
                    recorded: entry.spec.clone(),
                    live: Some(obs.spec.clone()),
                });
                if adopted {
                    // The interrupted create made its object, which may still be
                    // coming up (a cluster takes minutes): keep the intent, so the plan
                    // shows the create resuming with its outputs unknown, and apply's
                    // create adopts the object and waits for it to be ready.
                    let warning = format!("{address}: found {id}, created by an earlier run that was interrupted before recording it; apply adopts it and waits for it to be ready");
                    let kept = rebuilt(
                        Some(obs.id),
                        entry.spec.clone(),
                        entry.outputs.clone(),
                        entry.pending.clone(),
                    );
                    return Ok((key, Settled::New(Box::new(kept)), None, Some(warning)));
                }
                let in_sync = drift.is_none()
                    && entry.pending.is_none()
                    && deposed.len() == entry.deposed.len()
                    && entry.id.as_deref() == Some(obs.id.as_str())
                    && entry.spec == obs.spec
                    && entry.outputs == obs.outputs;
                if in_sync {
                    return Ok((key, Settled::Kept, None, None));
                }
                Ok((
                    key,
                    Settled::New(Box::new(rebuilt(Some(obs.id), obs.spec, obs.outputs, None))),
                    drift,
                    None,
                ))
            }
        }
    }

    /// Refreshes and plans. `stack_path` and `variables` are recorded for `plan -out`.
    pub async fn plan(
        &self,
        destroy: bool,
        targets: &[Address],
        stack_path: &str,
        variables: &[(String, String)],
    ) -> Result<(Plan, Base), EngineError> {
        let stored = self.backend.load().await?;
        let existed = stored.is_some();
        let mut state = stored.unwrap_or_default();
        // The stored entries move into the refreshed state (those found in sync as
        // they are), so the plan holds one copy of the state, not two.
        let mut resources = std::mem::take(&mut state.resources);
        // `[[moved]]` entries rename stored objects before anything is read, so a
        // renamed resource is planned as the same object.
        let renamed = crate::stack::moved::rename(&self.stack.moved, &mut resources);
        let Refresh {
            state: refreshed,
            drift,
            mut warnings,
            mut learned,
        } = if self.settings.refresh {
            self.refresh(&state, resources).await?
        } else {
            Refresh {
                state: State {
                    resources,
                    outputs: state.outputs.clone(),
                    ..state.clone_header()
                },
                drift: BTreeMap::new(),
                warnings: vec![
                    "refresh skipped (--refresh=false): the plan compares the stack with the state as last recorded, and capacity is not checked".to_string(),
                ],
                learned: false,
            }
        };
        learned |= !renamed.moved.is_empty();
        warnings.extend(renamed.skipped);
        let env = self.env();
        let mut changes = plan::compute(
            &self.stack,
            &refreshed,
            &drift,
            &PlanInputs {
                destroy,
                targets,
                env: &env,
            },
        )?;
        if self.settings.refresh {
            self.live_diffs(&mut changes, &mut warnings).await;
        }
        warnings.sort();
        let plan = Plan {
            format_version: plan::PLAN_FORMAT_VERSION,
            terrain_version: env!("CARGO_PKG_VERSION").to_string(),
            stack: self.stack.name.clone(),
            stack_path: stack_path.to_string(),
            stack_hash: self.stack.source_hash.clone(),
            destroy,
            targets: targets.to_vec(),
            variables: variables.to_vec(),
            environment: (self.stack.environment != crate::stack::DEFAULT_ENVIRONMENT)
                .then(|| self.stack.environment.clone()),
            var_files: Vec::new(),
            // No stored state yet: the plan is for "no state", whatever lineage the
            // first save will pick.
            lineage: if existed {
                state.lineage.clone()
            } else {
                String::new()
            },
            serial: state.serial,
            changes,
            moved: renamed
                .moved
                .into_iter()
                .map(|(from, to)| plan::Moved { from, to })
                .collect(),
            refreshed: refreshed.resources,
            warnings,
            cost: None,
        };
        let mut plan = Plan {
            cost: Some(self.cost_of(&plan)),
            ..plan
        };
        if self.settings.refresh && !destroy {
            let (errors, found) = self.preflight(&plan).await?;
            if !errors.is_empty() {
                return Err(EngineError::Capacity(errors));
            }
            plan.warnings.extend(found);
        }
        Ok((plan, Base { state, learned }))
    }

    /// What `plan` costs (see `cost.rs`): each resource's usage as its kind reads it from
    /// the live spec (before) and the desired one (after), with the specs of what it
    /// references, priced from the run's catalog.
    pub fn cost_of(&self, plan: &Plan) -> crate::cost::PlanCost {
        let by_address: BTreeMap<&Address, &Change> =
            plan.changes.iter().map(|c| (&c.address, c)).collect();
        // The specs of what `c` references, and their secret values (a cost line must not
        // show a location or machine type that came from a sensitive value).
        let peers = |c: &Change, after: bool| peers_of(plan, &by_address, c, after);
        let mut out = crate::cost::PlanCost {
            max_hourly: self.stack.pricing.max_hourly,
            ..Default::default()
        };
        let mut configs = BTreeMap::new();
        for c in &plan.changes {
            // Most kinds bill nothing: no spec is copied for them.
            if !self.kind(&c.address, &c.kind).is_ok_and(|k| k.bills()) {
                continue;
            }
            let recorded = plan
                .refreshed
                .get(&c.address.to_string())
                .map(|r| r.provider.as_str());
            if let Some(before) = plan.before(c) {
                let (peers, secrets) = peers(c, false);
                let billed = Billed {
                    address: &c.address,
                    kind: &c.kind,
                    recorded,
                    spec: before,
                    sensitive_paths: &c.sensitive_paths,
                    peers: &peers,
                    peer_secrets: secrets,
                };
                if let Some(priced) = self.price(&mut configs, billed) {
                    out.before.0 += priced.hourly.0;
                    out.before.1 += priced.hourly.1;
                }
            }
            if c.action == Action::Delete {
                continue;
            }
            let Some(after) = plan.after(c) else {
                continue;
            };
            let (peers, secrets) = peers(c, true);
            let billed = Billed {
                address: &c.address,
                kind: &c.kind,
                recorded,
                spec: &after,
                sensitive_paths: &c.sensitive_paths,
                peers: &peers,
                peer_secrets: secrets,
            };
            if let Some(priced) = self.price(&mut configs, billed) {
                out.after.0 += priced.hourly.0;
                out.after.1 += priced.hourly.1;
                out.resources.push(priced);
            }
        }
        out
    }

    /// What the objects of `state` cost as last applied (`terrain cost`), offline.
    pub fn cost_of_state(&self, state: &State) -> crate::cost::PlanCost {
        use terrain_providers::Peer;
        let mut out = crate::cost::PlanCost {
            max_hourly: self.stack.pricing.max_hourly,
            ..Default::default()
        };
        let mut configs = BTreeMap::new();
        for (address, r) in &state.resources {
            let Ok(addr) = address.parse::<Address>() else {
                continue;
            };
            if !self.kind(&addr, &r.kind).is_ok_and(|k| k.bills()) {
                continue;
            }
            let mut peer_secrets = Vec::new();
            let peers: Vec<Peer> = r
                .dependencies
                .iter()
                .filter_map(|d| {
                    state.resources.get(d).map(|p| {
                        peer_secrets.extend(crate::desired::secret_values(
                            &p.spec,
                            &spec_paths(&p.sensitive_paths),
                        ));
                        Peer {
                            kind: p.kind.clone(),
                            address: d.clone(),
                            spec: p.spec.clone(),
                        }
                    })
                })
                .collect();
            let own_paths = spec_paths(&r.sensitive_paths);
            let billed = Billed {
                address: &addr,
                kind: &r.kind,
                recorded: Some(&r.provider),
                spec: &r.spec,
                sensitive_paths: &own_paths,
                peers: &peers,
                peer_secrets,
            };
            if let Some(priced) = self.price(&mut configs, billed) {
                out.after.0 += priced.hourly.0;
                out.after.1 += priced.hourly.1;
                out.resources.push(priced);
            }
        }
        out.before = out.after;
        out
    }

    /// One resource's spec priced; `None` when it bills for nothing (or its kind or
    /// provider table is unknown, which fails the run elsewhere). `configs` keeps each
    /// provider instance's table, evaluated once per pricing.
    fn price(
        &self,
        configs: &mut BTreeMap<String, Option<Value>>,
        billed: Billed<'_>,
    ) -> Option<crate::cost::ResourceCost> {
        let kind = self
            .kind(billed.address, billed.kind)
            .ok()
            .filter(|k| k.bills())?;
        let instance = self.instance(billed.address, kind.provider(), billed.recorded);
        let config = configs
            .entry(instance)
            .or_insert_with_key(|instance| self.provider_config(instance).ok())
            .as_ref()?;
        let usage = kind.usage(billed.spec, config, billed.peers);
        if usage.is_empty() {
            return None;
        }
        let mut priced =
            crate::cost::resource(&billed.address.to_string(), &usage, &self.settings.catalog);
        // What a kind says of its usage quotes its spec (a machine type, a location): a
        // value that came from a secret is priced, then hidden there as everywhere else.
        let mut secrets = crate::desired::secret_values(billed.spec, billed.sensitive_paths);
        secrets.extend(billed.peer_secrets);
        if !secrets.is_empty() {
            for line in &mut priced.lines {
                let u = &mut line.usage;
                for text in [&mut u.item, &mut u.region, &mut u.basis] {
                    *text = crate::desired::hide(text, &secrets, true);
                }
            }
        }
        Some(priced)
    }

    /// Asks the providers what each update or replace will change on the live object.
    /// A failure does not fail the plan (the change itself is known): it becomes a
    /// warning, since the same call at apply time will say more.
    async fn live_diffs(&self, changes: &mut [Change], warnings: &mut Vec<String>) {
        let wanted: Vec<usize> = changes
            .iter()
            .enumerate()
            .filter(|(_, c)| matches!(c.action, Action::Update | Action::Replace))
            .filter(|(_, c)| {
                c.id.is_some()
                    && c.after
                        .as_ref()
                        .is_some_and(|a| !terrain_providers::protocol::is_unknown(a))
            })
            .map(|(i, _)| i)
            .collect();
        let previews = futures::future::join_all(wanted.iter().map(|&i| {
            let c = &changes[i];
            async move {
                let kind = self.kind(&c.address, &c.kind).ok()?;
                let ctx = self
                    .ctx(
                        &c.address,
                        &self.instance(&c.address, kind.provider(), None),
                    )
                    .ok()?;
                let (id, before, after) = (c.id.as_deref()?, c.before.as_ref()?, c.after.as_ref()?);
                Some(
                    kind.preview(&ctx, id, before, after)
                        .await
                        .map_err(|e| format!("{}: live diff unavailable: {e}", c.address)),
                )
            }
        }))
        .await;
        for (i, preview) in wanted.into_iter().zip(previews) {
            match preview {
                Some(Ok(diff)) => {
                    let secrets = secret_values(&changes[i]);
                    changes[i].live_diff = diff.map(|d| hide_secrets(d, &secrets));
                }
                Some(Err(warning)) => warnings.push(warning),
                None => {}
            }
        }
    }

    /// Checks that `plan` was made from this stack and against `stored`, the state as
    /// stored now (`None`: there is none yet).
    pub fn check_fresh(&self, plan: &Plan, stored: Option<&State>) -> Result<(), EngineError> {
        if plan.stack_hash != self.stack.source_hash {
            return Err(EngineError::StalePlan(
                "the stack's files changed since it was saved".into(),
            ));
        }
        let state = match (plan.lineage.is_empty(), stored) {
            (true, None) => return Ok(()),
            (true, Some(_)) => {
                return Err(EngineError::StalePlan(
                    "it was made before any state existed, and a state was saved since".into(),
                ))
            }
            (false, None) => {
                return Err(EngineError::StalePlan(
                    "the state it was made against no longer exists".into(),
                ))
            }
            (false, Some(s)) => s,
        };
        if plan.lineage != state.lineage {
            return Err(EngineError::StalePlan(format!(
                "it was made for state lineage {}, the state now has lineage {}",
                plan.lineage, state.lineage
            )));
        }
        if plan.serial != state.serial {
            return Err(EngineError::StalePlan(format!(
                "the state changed since (serial {} then, {} now)",
                plan.serial, state.serial
            )));
        }
        Ok(())
    }

    /// Applies `plan` to `base` (from [`Engine::plan`], or [`Base::against`] the state
    /// as loaded now for a saved plan checked fresh). The caller holds the state lock.
    pub async fn apply(&self, plan: &Plan, base: Base) -> Result<ApplyReport, EngineError> {
        let Base { state, learned } = base;
        let mut start = state;
        start.resources = plan.refreshed.clone();
        let persister = Persister::new(self.backend.clone(), start);
        // What refresh learned (adoptions, vanished objects) is worth keeping even if
        // nothing else happens, and a journal left by a run that was killed before its
        // compaction is folded in; otherwise the state is not rewritten.
        let leftover = !self.backend.journal().await?.is_empty();
        if learned || leftover {
            persister.compact().await?;
        }
        let graph = plan::steps(&plan.changes);
        let run = |si: usize| {
            let (ci, step) = graph.steps[si];
            let change = &plan.changes[ci];
            let persister = &persister;
            async move {
                let started = Instant::now();
                // A create whose change carries an id resumes an interrupted create.
                let adopts = (step == Step::Create && change.action == Action::Create)
                    .then(|| change.id.clone())
                    .flatten();
                self.observer.event(Event::Started {
                    address: change.address.clone(),
                    step,
                    adopts,
                });
                match self.run_step(change, step, persister).await {
                    Ok(id) => {
                        self.observer.event(Event::Finished {
                            address: change.address.clone(),
                            step,
                            elapsed: started.elapsed(),
                            id,
                        });
                        true
                    }
                    Err(e) => {
                        // A step's own error already names its address: keep just the
                        // message, so the final report does not nest "apply finished…".
                        let message = match &e {
                            EngineError::Apply(list) if list.len() == 1 => list[0].1.clone(),
                            other => other.to_string(),
                        };
                        // An API's error may quote what it was sent.
                        let message = hide_secrets(message, &secret_values(change));
                        self.observer.event(Event::Failed {
                            address: change.address.clone(),
                            step,
                            error: message.clone(),
                        });
                        persister.record_error(change.address.clone(), message);
                        false
                    }
                }
            }
        };
        let outcomes = walk::walk(&graph.deps, self.settings.parallelism, &self.cancel, run).await;
        let mut report = ApplyReport::default();
        let mut not_started = 0;
        for (si, o) in outcomes.iter().enumerate() {
            let (ci, step) = graph.steps[si];
            let c = &plan.changes[ci];
            match o {
                Outcome::Done => match (c.action, step) {
                    (Action::Create, _) => report.created += 1,
                    (Action::Update, _) => report.updated += 1,
                    (Action::Replace, Step::Create) => report.replaced += 1,
                    (Action::Delete, _) => report.deleted += 1,
                    _ => {}
                },
                Outcome::Skipped(by) => {
                    let because = plan.changes[graph.steps[*by].0].address.clone();
                    self.observer.event(Event::Skipped {
                        address: c.address.clone(),
                        because: because.clone(),
                    });
                    persister.record_error(
                        c.address.clone(),
                        format!("not attempted: {because} failed"),
                    );
                }
                Outcome::Cancelled => not_started += 1,
                Outcome::Failed => {}
            }
        }
        // Outputs reflect whatever was applied, even on partial failure.
        let outputs = if plan.destroy && plan.targets.is_empty() {
            Ok(BTreeMap::new())
        } else {
            persister.read(|state| self.outputs(state))
        };
        match outputs {
            Ok(o) => {
                persister.set_outputs(o.clone());
                report.outputs = o;
            }
            Err(e) => persister.record_error(Address::new("outputs", "all"), e.to_string()),
        }
        persister.finish().await?;
        let errors = persister.errors();
        if !errors.is_empty() {
            return Err(EngineError::Apply(errors));
        }
        if not_started > 0 {
            let done = outcomes.iter().filter(|o| **o == Outcome::Done).count();
            return Err(EngineError::Interrupted { done, not_started });
        }
        Ok(report)
    }

    async fn run_step(
        &self,
        change: &Change,
        step: Step,
        persister: &Persister,
    ) -> Result<Option<String>, EngineError> {
        let address = &change.address;
        let key = address.to_string();
        let kind = self.kind(address, &change.kind)?;
        let recorded = persister.snapshot_entry(&key).map(|e| e.provider);
        let instance = self.instance(address, kind.provider(), recorded.as_deref());
        let ctx = self.ctx_hiding(address, &instance, secret_values(change))?;
        let fail = |e: ProviderError| EngineError::Apply(vec![(address.clone(), e.to_string())]);
        let now = || chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        match step {
            Step::Create | Step::Update => {
                let rc = self.stack.resources.get(address).ok_or_else(|| {
                    EngineError::Apply(vec![(address.clone(), "not in the stack".into())])
                })?;
                // Every dependency is applied by now: the same pipeline as plan, with
                // real values.
                let config = self
                    .provider_config(&instance)
                    .map_err(|e| EngineError::Apply(vec![(address.clone(), e.to_string())]))?;
                let entry = |k: &str| persister.snapshot_entry(k);
                let prior = persister
                    .snapshot_entry(&key)
                    .filter(|r| r.id.is_some() && !desired::resumes_create(r));
                let peers = desired::applied_peers(rc, &entry);
                let computed = {
                    let env = self.env();
                    let applied = desired::Applied {
                        resources: &self.stack.resources,
                        entry: &entry,
                    };
                    let scope = StackScope {
                        variables: &self.stack.variables,
                        env: &env,
                        attributes: &applied,
                    };
                    desired::compute(
                        rc,
                        &scope,
                        &desired::Inputs {
                            config: &config,
                            peers: &peers,
                            prior: if step == Step::Update {
                                prior.as_ref().map(|r| &r.spec)
                            } else {
                                None
                            },
                        },
                    )
                }
                .map_err(|e| {
                    EngineError::Apply(vec![(address.clone(), format!("invalid spec: {e}"))])
                })?;
                let mut sensitive: Vec<String> = change
                    .sensitive_paths
                    .iter()
                    .chain(&computed.sensitive)
                    .map(|p| format!("spec.{p}"))
                    .collect();
                let schema = kind.schema();
                sensitive.extend(
                    schema
                        .outputs
                        .iter()
                        .filter(|f| f.sensitive)
                        .map(|f| format!("outputs.{}", f.name)),
                );
                sensitive.sort();
                sensitive.dedup();
                let spec = computed.spec;
                // The plan is a promise: what it showed as known is what is applied.
                if let Some(planned) = &change.after {
                    let broken =
                        desired::broken_promises(planned, &spec, &rc.lifecycle.ignore_changes);
                    if !broken.is_empty() {
                        return Err(EngineError::Apply(vec![(
                            address.clone(),
                            format!(
                                "the spec now differs from the plan at {}; nothing was changed for this resource; run `terrain plan` again",
                                broken.join(", ")
                            ),
                        )]));
                    }
                }
                let inconsistent = |obs: &terrain_providers::Observed| {
                    let broken =
                        desired::broken_promises(&spec, &obs.spec, &rc.lifecycle.ignore_changes);
                    (!broken.is_empty()).then(|| {
                        let secrets = desired::secret_values(&spec, &computed.sensitive);
                        let shown: Vec<String> = broken
                            .iter()
                            .map(|p| {
                                if computed.sensitive.iter().any(|s| desired::overlaps(s, p)) {
                                    return format!("{p} ({})", desired::HIDDEN);
                                }
                                let path: Vec<String> = p.split('.').map(str::to_string).collect();
                                // A secret may still hide inside a wider value.
                                let show = |v: Option<&Value>| {
                                    desired::hide(&v.map_or("null".to_string(), ToString::to_string), &secrets, false)
                                };
                                format!("{p}: planned {}, got {}", show(lookup(&spec, &path)), show(lookup(&obs.spec, &path)))
                            })
                            .collect();
                        EngineError::Apply(vec![(
                            address.clone(),
                            format!(
                                "the provider produced an inconsistent result: {}; the object is recorded as the provider reported it, and the next plan shows the difference (this is a bug in the {} provider)",
                                shown.join("; "),
                                kind.provider()
                            ),
                        )])
                    })
                };
                let dependencies: Vec<String> = change
                    .dependencies
                    .iter()
                    .map(ToString::to_string)
                    .collect();
                if step == Step::Create {
                    let planned_id = kind.planned_id(&spec, &config);
                    persister.update(&key, |s| {
                        let entry =
                            s.resources
                                .entry(key.clone())
                                .or_insert_with(|| ResourceState {
                                    kind: change.kind.clone(),
                                    provider: instance.clone(),
                                    id: None,
                                    spec: Value::Null,
                                    outputs: Value::Null,
                                    dependencies: dependencies.clone(),
                                    sensitive_paths: sensitive.clone(),
                                    pending: None,
                                    deposed: Vec::new(),
                                    tainted: false,
                                });
                        // create_before_destroy: the old object is kept as deposed until
                        // its delete completes, so it is never lost track of. An
                        // interrupted create being resumed has no old object: the id
                        // is the one this create adopts.
                        let resuming = desired::resumes_create(entry);
                        let old = entry.id.take().map(|id| Deposed {
                            id,
                            spec: entry.spec.clone(),
                        });
                        if let Some(d) = old.filter(|_| !resuming) {
                            entry.deposed.push(d);
                        }
                        entry.pending = Some(Pending {
                            op: PendingOp::Create,
                            started_at: now(),
                            planned_id: planned_id.clone(),
                            spec: spec.clone(),
                        });
                    });
                    persister.persist().await?;
                    match kind.create(&ctx, &spec).await {
                        Ok(obs) => {
                            let id = obs.id.clone();
                            let broken = inconsistent(&obs);
                            persister.update(&key, |s| {
                                if let Some(e) = s.resources.get_mut(&key) {
                                    e.id = Some(obs.id);
                                    e.spec = obs.spec;
                                    e.outputs = obs.outputs;
                                    e.tainted = false;
                                    e.pending = None;
                                    e.dependencies = dependencies.clone();
                                    e.sensitive_paths = sensitive.clone();
                                }
                            });
                            if planned_id.is_none() || broken.is_some() {
                                // Nothing could find this object again after a crash, so
                                // its record must be on disk before anyone hears of it.
                                persister.persist().await?;
                            }
                            match broken {
                                Some(e) => Err(e),
                                None => Ok(Some(id)),
                            }
                        }
                        Err(ProviderError::Tainted { id, error }) => {
                            // Made, but failed (a run that did not succeed): keep it,
                            // tainted, so the next plan replaces it instead of adopting
                            // it as it is or leaving it behind.
                            persister.update(&key, |s| {
                                if let Some(e) = s.resources.get_mut(&key) {
                                    e.id = Some(id);
                                    e.spec = spec.clone();
                                    e.outputs = Value::Object(Default::default());
                                    e.pending = None;
                                    e.tainted = true;
                                    e.dependencies = dependencies.clone();
                                    e.sensitive_paths = sensitive.clone();
                                }
                            });
                            persister.persist().await?;
                            Err(EngineError::Apply(vec![(
                                address.clone(),
                                format!("{error}\n(the object is kept as tainted; the next apply replaces it)"),
                            )]))
                        }
                        Err(e) => {
                            // The API refused: nothing was made. Forget the intent.
                            persister.update(&key, |s| {
                                if let Some(entry) = s.resources.get_mut(&key) {
                                    entry.pending = None;
                                    if entry.id.is_none() && entry.deposed.is_empty() {
                                        s.resources.remove(&key);
                                    }
                                }
                            });
                            persister.persist().await?;
                            Err(fail(e))
                        }
                    }
                } else {
                    let (id, prior) = persister
                        .snapshot_entry(&key)
                        .and_then(|r| r.id.clone().map(|id| (id, r.spec.clone())))
                        .ok_or_else(|| {
                            EngineError::Apply(vec![(
                                address.clone(),
                                "update of an object the state does not have".into(),
                            )])
                        })?;
                    persister.update(&key, |s| {
                        if let Some(e) = s.resources.get_mut(&key) {
                            e.pending = Some(Pending {
                                op: PendingOp::Update,
                                started_at: now(),
                                planned_id: None,
                                spec: spec.clone(),
                            });
                        }
                    });
                    persister.persist().await?;
                    let result = kind.update(&ctx, &id, &prior, &spec).await;
                    let broken = result.as_ref().ok().and_then(&inconsistent);
                    persister.update(&key, |s| {
                        if let Some(e) = s.resources.get_mut(&key) {
                            e.pending = None;
                            if let Ok(obs) = &result {
                                e.id = Some(obs.id.clone());
                                e.spec = obs.spec.clone();
                                e.outputs = obs.outputs.clone();
                                e.dependencies = dependencies.clone();
                                e.sensitive_paths = sensitive.clone();
                            }
                        }
                    });
                    if let Some(e) = broken {
                        persister.persist().await?;
                        return Err(e);
                    }
                    result.map(|o| Some(o.id)).map_err(fail)
                }
            }
            Step::Delete => {
                let Some(entry) = persister.snapshot_entry(&key) else {
                    return Ok(None);
                };
                let Some(id) = entry.id.clone() else {
                    return Ok(None);
                };
                persister.update(&key, |s| {
                    if let Some(e) = s.resources.get_mut(&key) {
                        e.pending = Some(Pending {
                            op: PendingOp::Delete,
                            started_at: now(),
                            planned_id: None,
                            spec: Value::Null,
                        });
                    }
                });
                persister.persist().await?;
                let result = kind.delete(&ctx, &id, &entry.spec).await;
                persister.update(&key, |s| {
                    if let Some(e) = s.resources.get_mut(&key) {
                        e.pending = None;
                        if result.is_ok() {
                            e.id = None;
                            if e.deposed.is_empty() {
                                s.resources.remove(&key);
                            }
                        }
                    }
                });
                result.map(|()| Some(id)).map_err(fail)
            }
            Step::DeleteDeposed => {
                let deposed = persister
                    .snapshot_entry(&key)
                    .map(|e| e.deposed)
                    .unwrap_or_default();
                for d in deposed {
                    kind.delete(&ctx, &d.id, &d.spec).await.map_err(fail)?;
                    persister.update(&key, |s| {
                        if let Some(e) = s.resources.get_mut(&key) {
                            e.deposed.retain(|x| x.id != d.id);
                            if e.id.is_none() && e.deposed.is_empty() && e.pending.is_none() {
                                s.resources.remove(&key);
                            }
                        }
                    });
                    persister.persist().await?;
                }
                Ok(None)
            }
        }
    }

    /// The stack's outputs evaluated against `state`.
    pub fn outputs(&self, state: &State) -> Result<BTreeMap<String, OutputState>, EngineError> {
        let env = self.env();
        let entry = |k: &str| state.resources.get(k).cloned();
        let applied = desired::Applied {
            resources: &self.stack.resources,
            entry: &entry,
        };
        let scope = StackScope {
            variables: &self.stack.variables,
            env: &env,
            attributes: &applied,
        };
        let mut out = BTreeMap::new();
        for (name, o) in &self.stack.outputs {
            let e = eval::eval(&o.value, &scope).map_err(|e| EngineError::Output {
                name: name.clone(),
                message: e.message,
            })?;
            if terrain_providers::protocol::is_unknown(&e.value) {
                continue;
            }
            out.insert(
                name.clone(),
                OutputState {
                    value: e.value,
                    sensitive: o.sensitive,
                },
            );
        }
        Ok(out)
    }

    /// Brings an existing object under management at `address`.
    pub async fn import(
        &self,
        address: &Address,
        id: &str,
        state: &State,
    ) -> Result<ResourceState, EngineError> {
        let rc = self
            .stack
            .resources
            .get(address)
            .ok_or_else(|| EngineError::Import {
                address: address.clone(),
                message: "the stack has no such resource; add it to the stack first".into(),
            })?;
        let kind = rc.resource.clone();
        let ctx = self.ctx(address, &rc.provider)?;
        // The stack's spec tells the provider how the object is described (which field
        // holds a secret, which cluster a Kubernetes object is on, a manifest's
        // objects): computed by the pipeline apply uses, with what the state knows of
        // the resources it references. Without them, as far as it is known offline.
        let hint = self
            .spec_from_state(address, state)
            .ok()
            .or_else(|| {
                let env = self.env();
                let scope = desired::variables_only(&self.stack.variables, &env);
                eval::eval(&rc.body, &scope)
                    .ok()
                    .map(|e| kind.schema().with_defaults(&e.value))
            })
            .filter(|v| !terrain_providers::protocol::is_unknown(v))
            .unwrap_or(Value::Null);
        let obs = kind
            .read(&ctx, id, &hint)
            .await
            .map_err(refresh_error(address))?
            .ok_or_else(|| EngineError::Import {
                address: address.clone(),
                message: format!("no {} with id `{id}` exists", address.kind),
            })?;
        let mut sensitive: Vec<String> = kind
            .schema()
            .fields
            .iter()
            .filter(|f| f.sensitive)
            .map(|f| format!("spec.{}", f.name))
            .collect();
        sensitive.extend(rc.sensitive.iter().map(|p| format!("spec.{p}")));
        Ok(ResourceState {
            kind: address.kind.clone(),
            provider: rc.provider.clone(),
            id: Some(obs.id),
            spec: obs.spec,
            outputs: obs.outputs,
            dependencies: rc.dependencies().iter().map(ToString::to_string).collect(),
            sensitive_paths: sensitive,
            pending: None,
            deposed: Vec::new(),
            tainted: false,
        })
    }
}

/// The values at a change's sensitive paths, before and after, as they could appear in
/// a provider's text (a live diff prints the object the provider sends).
fn secret_values(c: &Change) -> Vec<String> {
    let mut out: Vec<String> = [c.before.as_ref(), c.after.as_ref()]
        .into_iter()
        .flatten()
        .flat_map(|side| desired::secret_values(side, &c.sensitive_paths))
        .collect();
    // Longest first, so a secret that contains another is hidden whole.
    out.sort_by_key(|s| std::cmp::Reverse(s.len()));
    out.dedup();
    out
}

/// `text` with every secret in it (and its base64 form, as a Kubernetes Secret's
/// `data` holds it) replaced by a marker.
fn hide_secrets(mut text: String, secrets: &[String]) -> String {
    use base64::Engine as _;
    for secret in secrets {
        let encoded = base64::engine::general_purpose::STANDARD.encode(secret);
        for form in [secret.as_str(), encoded.as_str()] {
            if text.contains(form) {
                text = text.replace(form, "(sensitive value)");
            }
        }
    }
    text
}

/// Journal size past which an apply folds its journal into a new snapshot mid-run, so
/// that loading (snapshot + replay) stays quick whatever the size of the run.
const COMPACT_AT: u64 = 16 << 20;

/// The state during an apply, written with group commit: each `persist` appends one
/// journal record per resource changed since the last write (one flush for all of
/// them), so concurrent operations share writes and no write costs the whole state.
/// Backends without a journal get a whole save instead. `finish` compacts.
struct Persister {
    backend: Arc<dyn Backend>,
    inner: Mutex<PersistInner>,
    write: tokio::sync::Mutex<Written>,
}

struct PersistInner {
    state: State,
    version: u64,
    /// Resources changed since their last record.
    dirty: BTreeSet<String>,
    outputs_dirty: bool,
    errors: Vec<(Address, String)>,
}

/// What is on disk: the version last written, and the journal's size.
#[derive(Default)]
struct Written {
    version: u64,
    journal_bytes: u64,
}

impl Persister {
    fn new(backend: Arc<dyn Backend>, state: State) -> Self {
        Self {
            backend,
            inner: Mutex::new(PersistInner {
                state,
                version: 0,
                dirty: BTreeSet::new(),
                outputs_dirty: false,
                errors: Vec::new(),
            }),
            write: tokio::sync::Mutex::new(Written::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PersistInner> {
        // A panic while holding this lock would already have aborted the apply; the
        // state inside is still the best record there is.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Changes the resource `key` in memory; the next `persist` (there is always one at
    /// the end of an apply) writes it. Results need not be durable before dependents
    /// start: their write-ahead intents are, and the next run adopts from those.
    fn update<T>(&self, key: &str, f: impl FnOnce(&mut State) -> T) -> T {
        let mut g = self.lock();
        let out = f(&mut g.state);
        g.dirty.insert(key.to_string());
        g.version += 1;
        out
    }

    /// Runs `f` on the state as it is now, without copying it.
    fn read<T>(&self, f: impl FnOnce(&State) -> T) -> T {
        f(&self.lock().state)
    }

    fn snapshot_entry(&self, key: &str) -> Option<ResourceState> {
        self.lock().state.resources.get(key).cloned()
    }

    fn record_error(&self, address: Address, error: String) {
        self.lock().errors.push((address, error));
    }

    fn errors(&self) -> Vec<(Address, String)> {
        let mut e = self.lock().errors.clone();
        e.sort();
        e.dedup();
        e
    }

    fn set_outputs(&self, outputs: BTreeMap<String, OutputState>) {
        let mut g = self.lock();
        if g.state.outputs != outputs {
            g.state.outputs = outputs;
            g.outputs_dirty = true;
            g.version += 1;
        }
    }

    /// Makes every change so far durable, unless a write that started after our last
    /// change already did: one journal record per changed resource, appended together.
    async fn persist(&self) -> Result<(), StateError> {
        let wanted = self.lock().version;
        let mut written = self.write.lock().await;
        if written.version >= wanted {
            return Ok(());
        }
        if !self.backend.journals() || written.journal_bytes >= COMPACT_AT {
            return self.compact_locked(&mut written).await;
        }
        let (records, keys, outputs_dirty, version) = {
            let mut g = self.lock();
            let keys = std::mem::take(&mut g.dirty);
            let outputs_dirty = std::mem::take(&mut g.outputs_dirty);
            let mut records = Vec::with_capacity(keys.len() + 1);
            for key in &keys {
                g.state.serial += 1;
                let change = match g.state.resources.get(key) {
                    Some(r) => journal::Change::Put {
                        address: key.clone(),
                        resource: Box::new(r.clone()),
                    },
                    None => journal::Change::Remove {
                        address: key.clone(),
                    },
                };
                records.push(journal::Record {
                    journal: journal::JOURNAL_FORMAT,
                    lineage: g.state.lineage.clone(),
                    serial: g.state.serial,
                    change,
                });
            }
            if outputs_dirty {
                g.state.serial += 1;
                records.push(journal::Record {
                    journal: journal::JOURNAL_FORMAT,
                    lineage: g.state.lineage.clone(),
                    serial: g.state.serial,
                    change: journal::Change::Outputs {
                        outputs: g.state.outputs.clone(),
                    },
                });
            }
            (records, keys, outputs_dirty, g.version)
        };
        match self.backend.append(&records).await {
            Ok(size) => {
                written.version = version;
                written.journal_bytes = size;
                Ok(())
            }
            Err(e) => {
                // Not on disk, or only in part: the serials these records took are
                // spent, so the next write is a compaction (a whole snapshot, which
                // carries these changes and removes the journal) rather than records
                // that would follow a gap.
                let mut g = self.lock();
                g.dirty.extend(keys);
                g.outputs_dirty |= outputs_dirty;
                written.journal_bytes = u64::MAX;
                Err(e)
            }
        }
    }

    /// Writes the whole state as the new snapshot, emptying the journal.
    async fn compact(&self) -> Result<(), StateError> {
        let mut written = self.write.lock().await;
        self.compact_locked(&mut written).await
    }

    async fn compact_locked(&self, written: &mut Written) -> Result<(), StateError> {
        let (snapshot, version) = {
            let mut g = self.lock();
            g.state.serial += 1;
            g.dirty.clear();
            g.outputs_dirty = false;
            (g.state.clone(), g.version)
        };
        if let Err(e) = self.backend.save(&snapshot).await {
            // The changes are only in memory now: the next write must be whole again.
            written.journal_bytes = u64::MAX;
            return Err(e);
        }
        written.version = version;
        written.journal_bytes = 0;
        Ok(())
    }

    /// The end of an apply: the journal folded into a new snapshot, if anything was
    /// changed since the last one.
    async fn finish(&self) -> Result<(), StateError> {
        let mut written = self.write.lock().await;
        let wanted = self.lock().version;
        if written.version >= wanted && written.journal_bytes == 0 {
            return Ok(());
        }
        self.compact_locked(&mut written).await
    }
}

/// The specs of what `c` references in `plan` (as planned, or as live when `after` is
/// false), and their secret values: what a kind reads its usage or capacity from must
/// not show a location or machine type that came from a sensitive value.
pub(crate) fn peers_of(
    plan: &Plan,
    by_address: &BTreeMap<&Address, &Change>,
    c: &Change,
    after: bool,
) -> (Vec<terrain_providers::Peer>, Vec<String>) {
    let mut secrets = Vec::new();
    let peers = c
        .dependencies
        .iter()
        .filter_map(|d| by_address.get(d))
        .filter_map(|p| {
            let spec = if after {
                plan.after(p).map(std::borrow::Cow::into_owned)
            } else {
                plan.before(p).cloned()
            }?;
            secrets.extend(crate::desired::secret_values(&spec, &p.sensitive_paths));
            Some(terrain_providers::Peer {
                kind: p.kind.clone(),
                address: p.address.to_string(),
                spec,
            })
        })
        .collect();
    (peers, secrets)
}

/// One resource to price: its spec, the secrets that must not show in its cost lines, and
/// what it references.
struct Billed<'a> {
    address: &'a Address,
    kind: &'a str,
    /// The provider instance the state records for it.
    recorded: Option<&'a str>,
    spec: &'a Value,
    /// Its secret spec paths.
    sensitive_paths: &'a [String],
    peers: &'a [terrain_providers::Peer],
    /// Secret values of the resources it references.
    peer_secrets: Vec<String>,
}

/// The spec paths among a state entry's sensitive paths (`spec.password` → `password`).
fn spec_paths(paths: &[String]) -> Vec<String> {
    paths
        .iter()
        .filter_map(|p| p.strip_prefix("spec."))
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn change(before: Value, after: Value, sensitive: &[&str]) -> Change {
        Change {
            id: Some("batch/v1/Job/default/train".into()),
            before: Some(before),
            after: Some(after),
            sensitive_paths: sensitive.iter().map(ToString::to_string).collect(),
            ..Change::of(Address::new("kubernetes_job", "train"), Action::Update)
        }
    }

    #[test]
    fn live_diffs_hide_sensitive_values_plain_and_base64() {
        let c = change(
            json!({"secret_env": {"TOKEN": "old-token-1"}, "parallelism": 1}),
            json!({"secret_env": {"TOKEN": "new-token-2"}, "parallelism": 2}),
            &["secret_env"],
        );
        let secrets = secret_values(&c);
        assert_eq!(secrets.len(), 2, "{secrets:?}");
        let diff = "-  TOKEN: b2xkLXRva2VuLTE=\n+  TOKEN: bmV3LXRva2VuLTI=\n+  value: new-token-2\n-  parallelism: 1\n+  parallelism: 2\n";
        let shown = hide_secrets(diff.to_string(), &secrets);
        for secret in [
            "old-token-1",
            "new-token-2",
            "b2xkLXRva2VuLTE=",
            "bmV3LXRva2VuLTI=",
        ] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        assert!(shown.contains("+  parallelism: 2"), "{shown}");
        assert!(shown.contains("(sensitive value)"), "{shown}");
    }
}
