//! Apply: the plan's steps walked with bounded parallelism, each step run by the
//! function of its operation.

use std::collections::BTreeMap;
use std::time::Instant;

use serde_json::Value;
use terrain_providers::ProviderError;

use crate::addr::Address;
use crate::desired::{self, StackScope};
use crate::eval::lookup;
use crate::plan::{self, Action, Change, Plan, Step};
use crate::state::{Deposed, Pending, PendingOp, ResourceState};
use crate::walk::{self, Outcome};

use super::persist::Persister;
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
}
