//! Create, and the create half of a create_before_destroy replace: the intent recorded
//! before the call (so an interrupted create is found and adopted, never made twice),
//! then the object as the provider reports it, kept tainted when it was made but
//! failed, forgotten when the API refused it.

use serde_json::Value;
use terrain_providers::ProviderError;

use crate::desired;
use crate::plan::Step;
use crate::state::{Deposed, Pending, PendingOp, ResourceState};

use super::super::persist::Persister;
use super::super::{Engine, EngineError};
use super::{now, Recorded, Target};

impl Engine {
    /// Creates the object of `target` (or adopts the one an interrupted create made).
    pub(super) async fn create(
        &self,
        target: &Target<'_>,
        persister: &Persister,
    ) -> Result<Option<String>, EngineError> {
        let applied = self.applied_spec(target, Step::Create, persister)?;
        let planned_id = target.kind.planned_id(&applied.spec, &applied.config);
        let resumed = persister.update(&target.key, |s| {
            let entry = s
                .resources
                .entry(target.key.clone())
                .or_insert_with(|| ResourceState {
                    kind: target.change.kind.clone(),
                    provider: target.instance.clone(),
                    id: None,
                    spec: Value::Null,
                    outputs: Value::Null,
                    dependencies: applied.dependencies.clone(),
                    sensitive_paths: applied.sensitive.clone(),
                    pending: None,
                    deposed: Vec::new(),
                    tainted: false,
                });
            // An interrupted create being resumed finds its object again through the
            // create (the planned id); until it does, the entry holds no object.
            let resumed = desired::resumes_create(entry)
                .then(|| entry.pending.as_ref().and_then(|p| p.planned_id.clone()))
                .flatten()
                .filter(|id| Some(id) == planned_id.as_ref());
            if desired::resumes_create(entry) {
                entry.id = None;
            }
            entry.pending = Some(Pending {
                op: PendingOp::Create,
                started_at: now(),
                planned_id: planned_id.clone(),
                spec: applied.spec.clone(),
            });
            resumed
        });
        persister.persist().await?;
        let ctx = match resumed {
            Some(id) => target.ctx.clone().resuming(id),
            None => target.ctx.clone(),
        };
        match target.kind.create(&ctx, &applied.spec).await {
            Ok(observed) => {
                let id = observed.id.clone();
                let broken = self.inconsistent(target, &applied, &observed);
                self.record(
                    target,
                    persister,
                    Recorded::Object {
                        observed,
                        desired: &applied,
                        untaint: true,
                    },
                );
                if planned_id.is_none() || broken.is_some() {
                    // Nothing could find this object again after a crash, so its record
                    // must be on disk before anyone hears of it.
                    persister.persist().await?;
                }
                match broken {
                    Some(e) => Err(e),
                    None => Ok(Some(id)),
                }
            }
            Err(ProviderError::Tainted { id, error }) => {
                // Made, but failed (a run that did not succeed): keep it, tainted, so the
                // next plan replaces it instead of adopting it as it is or leaving it
                // behind.
                self.record(
                    target,
                    persister,
                    Recorded::Tainted {
                        id,
                        desired: &applied,
                    },
                );
                persister.persist().await?;
                Err(target.failed(format!(
                    "{error}\n(the object is kept as tainted; the next apply replaces it)"
                )))
            }
            Err(e) => {
                // The API refused: nothing was made. Forget the intent.
                self.record(target, persister, Recorded::NotMade);
                persister.persist().await?;
                Err(target.provider_failed(e))
            }
        }
    }

    /// The create half of a create_before_destroy replace: the object the state still
    /// records is kept as deposed until its delete completes, so it is never lost track
    /// of, then the new one is created.
    pub(super) async fn replace(
        &self,
        target: &Target<'_>,
        persister: &Persister,
    ) -> Result<Option<String>, EngineError> {
        persister.update(&target.key, |s| {
            if let Some(entry) = s.resources.get_mut(&target.key) {
                if desired::resumes_create(entry) {
                    return;
                }
                if let Some(id) = entry.id.take() {
                    entry.deposed.push(Deposed {
                        id,
                        spec: entry.spec.clone(),
                    });
                }
            }
        });
        self.create(target, persister).await
    }
}
