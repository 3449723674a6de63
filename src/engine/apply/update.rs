//! Update in place: the intent recorded before the call, then the object as the provider
//! reports it.

use crate::plan::Step;
use crate::state::PendingOp;

use super::super::persist::Persister;
use super::super::{Engine, EngineError};
use super::{Recorded, Target};

impl Engine {
    /// Updates the object of `target` in place to the spec the plan promised.
    pub(super) async fn update(
        &self,
        target: &Target<'_>,
        persister: &Persister,
    ) -> Result<Option<String>, EngineError> {
        let applied = self.applied_spec(target, Step::Update, persister)?;
        let (id, prior) = persister
            .snapshot_entry(&target.key)
            .and_then(|r| r.id.clone().map(|id| (id, r.spec.clone())))
            .ok_or_else(|| target.failed("update of an object the state does not have"))?;
        self.intend(target, persister, PendingOp::Update, applied.spec.clone());
        persister.persist().await?;
        let result = target
            .kind
            .update(&target.ctx, &id, &prior, &applied.spec)
            .await;
        let broken = result
            .as_ref()
            .ok()
            .and_then(|observed| self.inconsistent(target, &applied, observed));
        match result {
            Ok(observed) => {
                let id = observed.id.clone();
                self.record(
                    target,
                    persister,
                    Recorded::Object {
                        observed,
                        desired: &applied,
                        untaint: false,
                    },
                );
                if let Some(e) = broken {
                    persister.persist().await?;
                    return Err(e);
                }
                Ok(Some(id))
            }
            Err(e) => {
                self.record(target, persister, Recorded::Unchanged);
                Err(target.provider_failed(e))
            }
        }
    }
}
