//! Refresh: every object of the state read through its provider (batched where a kind
//! lists many in one call), interrupted creates adopted where their object is found,
//! drift found, vanished objects dropped.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::stream::{self, StreamExt, TryStreamExt};
use serde_json::Value;
use terrain_providers::{Ctx, Observed, ProviderError, Resource};

use crate::addr::Address;
use crate::desired::{self};
use crate::diff::changed_paths;
use crate::plan::Drift;
use crate::state::{Pending, ResourceState, State};

use super::{Engine, EngineError, Event};

/// Wraps a provider's read failure with the resource's address.
pub(super) fn refresh_error(address: &Address) -> impl FnOnce(ProviderError) -> EngineError + '_ {
    move |source| EngineError::Refresh {
        address: address.clone(),
        source: Box::new(source),
    }
}

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

impl Engine {
    /// The provider instance a refresh reads `read` through.
    fn read_instance(&self, read: &ToRead<'_>) -> String {
        self.instance(
            &read.address,
            read.kind.provider(),
            Some(&read.entry.provider),
        )
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
}
