//! The engine: refresh state through the providers, plan, and apply a plan with bounded
//! parallelism. Each operation's intent is journaled before its API call (write-ahead)
//! and its result after, so a killed run loses nothing and the next run adopts what an
//! interrupted create made instead of creating it again; the end of an apply folds the
//! journal into a new snapshot.
//!
//! The engine prints nothing: it reports [`Event`]s to an [`Observer`].
//!
//! This file holds the engine's types and what every step shares (provider instances,
//! contexts, secrets hidden from provider text); `refresh` reads the live objects, `plan`
//! makes a plan of them, `services` and `cloud_checks` ask the clouds read-only what a
//! plan depends on (APIs that must be on; roles, buckets and accounts it names), `apply`
//! runs one, one file per operation, `persist` writes the state as it goes, `import`
//! adopts an existing object. Pricing a plan lives beside the cost model
//! (`crate::pricing`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use terrain_providers::{Ctx, ProviderError, Registry, Resource};

use crate::addr::Address;
use crate::desired::{self, StackScope};
use crate::eval::{self};
use crate::plan::{Change, Plan, PlanError, Step};
use crate::stack::Stack;
use crate::state::{Backend, OutputState, State, StateError};
use crate::walk::Cancel;

mod apply;
mod cloud_checks;
mod import;
mod persist;
mod planning;
mod refresh;
mod services;

pub use refresh::Refresh;

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
    #[error("destroy finished with {} error(s):\n{}", .0.len(), .0.iter().map(|(a, e)| format!("  {a}: {e}")).collect::<Vec<_>>().join("\n"))]
    Destroy(Vec<(Address, String)>),
    #[error("interrupted: {done} operation(s) completed and saved, {not_started} not started; run the same command again to continue")]
    Interrupted { done: usize, not_started: usize },
    #[error("outputs.{name}: {message}")]
    Output { name: String, message: String },
    #[error("import {address}: {message}")]
    Import { address: Address, message: String },
    #[error("the stack does not fit what the cloud offers (nothing was changed):\n{}", .0.iter().map(|m| m.lines().map(|l| format!("  {l}")).collect::<Vec<_>>().join("\n")).collect::<Vec<_>>().join("\n"))]
    Capacity(Vec<String>),
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
}

/// The values at a change's sensitive paths, before and after, as they could appear in
/// a provider's text (a live diff prints the object the provider sends).
pub(super) fn secret_values(c: &Change) -> Vec<String> {
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
pub(crate) fn hide_secrets(mut text: String, secrets: &[String]) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Action;
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
