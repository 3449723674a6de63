//! The state during an apply, written ahead of and after each operation.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use crate::addr::Address;
use crate::state::{journal, Backend, OutputState, ResourceState, State, StateError};

/// Journal size past which an apply folds its journal into a new snapshot mid-run, so
/// that loading (snapshot + replay) stays quick whatever the size of the run.
const COMPACT_AT: u64 = 16 << 20;

/// The state during an apply, written with group commit: each `persist` appends one
/// journal record per resource changed since the last write (one flush for all of
/// them), so concurrent operations share writes and no write costs the whole state.
/// Backends without a journal get a whole save instead. `finish` compacts.
pub(super) struct Persister {
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
    pub(super) fn new(backend: Arc<dyn Backend>, state: State) -> Self {
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
    pub(super) fn update<T>(&self, key: &str, f: impl FnOnce(&mut State) -> T) -> T {
        let mut g = self.lock();
        let out = f(&mut g.state);
        g.dirty.insert(key.to_string());
        g.version += 1;
        out
    }

    /// Runs `f` on the state as it is now, without copying it.
    pub(super) fn read<T>(&self, f: impl FnOnce(&State) -> T) -> T {
        f(&self.lock().state)
    }

    pub(super) fn snapshot_entry(&self, key: &str) -> Option<ResourceState> {
        self.lock().state.resources.get(key).cloned()
    }

    pub(super) fn record_error(&self, address: Address, error: String) {
        self.lock().errors.push((address, error));
    }

    pub(super) fn errors(&self) -> Vec<(Address, String)> {
        let mut e = self.lock().errors.clone();
        e.sort();
        e.dedup();
        e
    }

    pub(super) fn set_outputs(&self, outputs: BTreeMap<String, OutputState>) {
        let mut g = self.lock();
        if g.state.outputs != outputs {
            g.state.outputs = outputs;
            g.outputs_dirty = true;
            g.version += 1;
        }
    }

    /// Makes every change so far durable, unless a write that started after our last
    /// change already did: one journal record per changed resource, appended together.
    pub(super) async fn persist(&self) -> Result<(), StateError> {
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
    pub(super) async fn compact(&self) -> Result<(), StateError> {
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
    pub(super) async fn finish(&self) -> Result<(), StateError> {
        let mut written = self.write.lock().await;
        let wanted = self.lock().version;
        if written.version >= wanted && written.journal_bytes == 0 {
            return Ok(());
        }
        self.compact_locked(&mut written).await
    }
}
