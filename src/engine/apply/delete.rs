//! Delete, and the delete of deposed objects a create_before_destroy replace left:
//! the intent recorded before the call, the entry dropped once nothing of it remains.

use serde_json::Value;

use crate::state::PendingOp;

use super::super::persist::Persister;
use super::super::{Engine, EngineError};
use super::{Recorded, Target};

impl Engine {
    /// Deletes the object of `target`; nothing to do when the state has none.
    pub(super) async fn delete(
        &self,
        target: &Target<'_>,
        persister: &Persister,
    ) -> Result<Option<String>, EngineError> {
        let Some(entry) = persister.snapshot_entry(&target.key) else {
            return Ok(None);
        };
        let Some(id) = entry.id.clone() else {
            return Ok(None);
        };
        self.intend(target, persister, PendingOp::Delete, Value::Null);
        persister.persist().await?;
        let result = target.kind.delete(&target.ctx, &id, &entry.spec).await;
        match result {
            Ok(()) => {
                self.record(target, persister, Recorded::Deleted);
                Ok(Some(id))
            }
            Err(e) => {
                self.record(target, persister, Recorded::Unchanged);
                Err(target.provider_failed(e))
            }
        }
    }

    /// Deletes every deposed object of `target`, each dropped from the state as soon as
    /// it is gone.
    pub(super) async fn delete_deposed(
        &self,
        target: &Target<'_>,
        persister: &Persister,
    ) -> Result<Option<String>, EngineError> {
        let deposed = persister
            .snapshot_entry(&target.key)
            .map(|e| e.deposed)
            .unwrap_or_default();
        for d in deposed {
            target
                .kind
                .delete(&target.ctx, &d.id, &d.spec)
                .await
                .map_err(|e| target.provider_failed(e))?;
            persister.update(&target.key, |s| {
                if let Some(e) = s.resources.get_mut(&target.key) {
                    e.deposed.retain(|x| x.id != d.id);
                    if e.id.is_none() && e.deposed.is_empty() && e.pending.is_none() {
                        s.resources.remove(&target.key);
                    }
                }
            });
            persister.persist().await?;
        }
        Ok(None)
    }
}
