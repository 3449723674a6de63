//! Apply: the plan's steps walked with bounded parallelism, each step run by the
//! function of its operation.

use std::collections::BTreeMap;
use std::time::Instant;

use serde_json::Value;
use terrain_providers::ProviderError;

use crate::addr::Address;
use crate::desired::{self};
use crate::plan::{self, Action, Change, Plan, Step};
use crate::state::{Pending, PendingOp};
use crate::walk::{self, Outcome};

use self::desired_spec::Applied;
use super::persist::Persister;

mod create;
mod delete;
mod desired_spec;
mod update;
use super::{hide_secrets, secret_values, ApplyReport, Base, Engine, EngineError, Event};

impl Engine {
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
            return Err(if plan.destroy {
                EngineError::Destroy(errors)
            } else {
                EngineError::Apply(errors)
            });
        }
        if not_started > 0 {
            let done = outcomes.iter().filter(|o| **o == Outcome::Done).count();
            return Err(EngineError::Interrupted { done, not_started });
        }
        Ok(report)
    }
    /// Runs one step of `change`: the function of its operation, on the resource's
    /// [`Target`].
    async fn run_step(
        &self,
        change: &Change,
        step: Step,
        persister: &Persister,
    ) -> Result<Option<String>, EngineError> {
        let target = self.target(change, persister)?;
        match step {
            // An object still recorded under the address (not an interrupted create
            // being resumed) is the one a create_before_destroy replace supersedes.
            Step::Create if target.supersedes(persister) => self.replace(&target, persister).await,
            Step::Create => self.create(&target, persister).await,
            Step::Update => self.update(&target, persister).await,
            Step::Delete => self.delete(&target, persister).await,
            Step::DeleteDeposed => self.delete_deposed(&target, persister).await,
        }
    }

    /// What every operation on `change`'s resource needs.
    fn target<'a>(
        &self,
        change: &'a Change,
        persister: &Persister,
    ) -> Result<Target<'a>, EngineError> {
        let address = &change.address;
        let key = address.to_string();
        let kind = self.kind(address, &change.kind)?;
        let recorded = persister.snapshot_entry(&key).map(|e| e.provider);
        let instance = self.instance(address, kind.provider(), recorded.as_deref());
        let ctx = self.ctx_hiding(address, &instance, secret_values(change))?;
        Ok(Target {
            change,
            key,
            kind,
            instance,
            ctx,
        })
    }

    /// Records what an operation's call came to in the state (in memory; the caller
    /// persists when the moment calls for it): the one place an operation's result
    /// becomes the resource's entry.
    fn record(&self, target: &Target<'_>, persister: &Persister, result: Recorded<'_>) {
        let key = &target.key;
        persister.update(key, |s| {
            let Some(e) = s.resources.get_mut(key) else {
                return;
            };
            e.pending = None;
            match result {
                Recorded::Object {
                    observed,
                    desired,
                    untaint,
                } => {
                    e.id = Some(observed.id);
                    e.spec = observed.spec;
                    e.outputs = observed.outputs;
                    if untaint {
                        e.tainted = false;
                    }
                    e.dependencies = desired.dependencies.clone();
                    e.sensitive_paths = desired.sensitive.clone();
                }
                Recorded::Tainted { id, desired } => {
                    e.id = Some(id);
                    e.spec = desired.spec.clone();
                    e.outputs = Value::Object(Default::default());
                    e.tainted = true;
                    e.dependencies = desired.dependencies.clone();
                    e.sensitive_paths = desired.sensitive.clone();
                }
                Recorded::NotMade => {
                    if e.id.is_none() && e.deposed.is_empty() {
                        s.resources.remove(key);
                    }
                }
                Recorded::Unchanged => {}
                Recorded::Deleted => {
                    e.id = None;
                    if e.deposed.is_empty() {
                        s.resources.remove(key);
                    }
                }
            }
        });
    }

    /// Records that `op` is about to run on the resource (its write-ahead intent).
    fn intend(&self, target: &Target<'_>, persister: &Persister, op: PendingOp, spec: Value) {
        persister.update(&target.key, |s| {
            if let Some(e) = s.resources.get_mut(&target.key) {
                e.pending = Some(Pending {
                    op,
                    started_at: now(),
                    planned_id: None,
                    spec,
                });
            }
        });
    }
}

/// The time an intent is recorded at.
fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// The resource an operation works on: its change, state key, kind, the provider
/// instance that manages it and the context of its calls.
struct Target<'a> {
    change: &'a Change,
    key: String,
    kind: std::sync::Arc<dyn terrain_providers::Resource>,
    instance: String,
    ctx: terrain_providers::Ctx,
}

impl Target<'_> {
    fn address(&self) -> &Address {
        &self.change.address
    }

    /// A failure of this resource's operation, as the apply reports it.
    fn failed(&self, message: impl Into<String>) -> EngineError {
        EngineError::Apply(vec![(self.address().clone(), message.into())])
    }

    /// A provider's error, as the apply reports it.
    fn provider_failed(&self, e: ProviderError) -> EngineError {
        self.failed(e.to_string())
    }

    /// Whether a create here supersedes an object the state still records (a
    /// create_before_destroy replace), rather than making the first one or resuming an
    /// interrupted create.
    fn supersedes(&self, persister: &Persister) -> bool {
        persister
            .snapshot_entry(&self.key)
            .is_some_and(|e| e.id.is_some() && !desired::resumes_create(&e))
    }
}

/// What an operation's call came to, as [`Engine::record`] writes it.
enum Recorded<'a> {
    /// The object as the provider reported it after a create or an update; `untaint`
    /// when a create made it anew.
    Object {
        observed: terrain_providers::Observed,
        desired: &'a Applied,
        untaint: bool,
    },
    /// Made, but failed: kept so the next plan replaces it.
    Tainted { id: String, desired: &'a Applied },
    /// The create was refused: nothing was made.
    NotMade,
    /// The update failed: the object is as it was.
    Unchanged,
    /// The object is gone.
    Deleted,
}
