//! What the remote backends share: the state as one object of a store with
//! conditional writes (S3 ETags, GCS generations), and the protocol over it. A save is
//! conditional on the version this client last read or wrote, so a writer whose lock
//! was broken cannot clobber a newer state, and one whose answer was lost and was sent
//! again finds its own write. The lock is an object beside the state, created only if
//! absent and holding the [`LockInfo`] of its holder; a killed run's lock on this
//! machine, or that of an operator replica that lost its Lease, is taken over
//! ([`super::lock::abandoned`]). Each store ([`super::s3`],
//! [`super::gcs`]) says only how to read, write and delete one object.

use std::sync::Mutex;

use async_trait::async_trait;

use super::{Backend, LockInfo, State, StateError};

/// An object store as the remote backends use it.
#[async_trait]
pub trait Objects: Send + Sync {
    /// What a conditional write compares: an ETag, a generation.
    type Version: Clone + Send + Sync;

    /// The address of object `name`, for messages (`s3://bucket/key`).
    fn url(&self, name: &str) -> String;
    /// Whether the bucket keeps object versions; `None` when it does not exist. With
    /// `create` (before a write), a missing bucket is made, versioned, where that is
    /// allowed (the sandbox).
    async fn versioning(&self, create: bool) -> Result<Option<bool>, StateError>;
    /// Whether the stack accepts a bucket that keeps no versions.
    fn allows_unversioned(&self) -> bool;
    /// The refusal of a bucket that keeps no versions, saying how to turn them on.
    fn unversioned(&self) -> StateError;
    /// Object `name` and its version; `None` when there is none.
    async fn get(&self, name: &str) -> Result<Option<(Vec<u8>, Self::Version)>, StateError>;
    /// Writes `body` as `name` if its current version is `expected` (`None`: only if
    /// there is no object). The new version, or `None` when the condition did not hold.
    async fn put_if(
        &self,
        name: &str,
        body: Vec<u8>,
        expected: Option<&Self::Version>,
    ) -> Result<Option<Self::Version>, StateError>;
    /// Deletes `name` if it is still `version`; gone already, or replaced by another
    /// version since, is no error (the next look finds what is there).
    async fn delete_if(&self, name: &str, version: &Self::Version) -> Result<(), StateError>;
}

/// Why a bucket is not known to be fit for the state yet.
enum Unchecked {
    /// It does not exist; the first write may make it.
    NoBucket,
    Failed(StateError),
}

/// A state kept as object `state` of `objects`, its lock as `state.lock`.
pub struct Remote<O: Objects> {
    objects: O,
    state: String,
    /// Set once the bucket is known to keep versions (or allowed not to): checked once
    /// per client, before anything is read or written.
    fit: tokio::sync::OnceCell<()>,
    /// The state object's version as this client last read or wrote it: `Some(None)`
    /// when it was absent, `None` before anything was read.
    seen: Mutex<Option<Option<O::Version>>>,
}

impl<O: Objects> Remote<O> {
    pub(crate) fn with(objects: O, state: String) -> Self {
        Self {
            objects,
            state,
            fit: tokio::sync::OnceCell::new(),
            seen: Mutex::new(None),
        }
    }

    /// Whether the bucket is fit for the state: it keeps versions (a bad save can be
    /// gone back from), or the stack allows it not to. With `create` (before a write), a
    /// missing bucket is made where that is allowed; without, it is `Ok(false)`: a read
    /// finds no state there.
    async fn ready(&self, create: bool) -> Result<bool, StateError> {
        let checked = self
            .fit
            .get_or_try_init(|| async {
                match self.objects.versioning(create).await {
                    Ok(Some(true)) => Ok(()),
                    Ok(Some(false)) if self.objects.allows_unversioned() => Ok(()),
                    Ok(Some(false)) => Err(Unchecked::Failed(self.objects.unversioned())),
                    Ok(None) => Err(Unchecked::NoBucket),
                    Err(e) => Err(Unchecked::Failed(e)),
                }
            })
            .await;
        match checked {
            Ok(()) => Ok(true),
            Err(Unchecked::NoBucket) => Ok(false),
            Err(Unchecked::Failed(e)) => Err(e),
        }
    }

    /// The object of `name` kept beside the state (`STATE.plans/NAME`).
    fn beside(&self, name: &str) -> String {
        format!("{}.plans/{name}", self.state)
    }

    fn lock_name(&self) -> String {
        format!("{}.lock", self.state)
    }

    fn seen(&self) -> Option<Option<O::Version>> {
        self.seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn set_seen(&self, version: Option<O::Version>) {
        *self
            .seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(version);
    }

    /// The lock record and its object's version, if locked.
    async fn lock_record(&self) -> Result<Option<(LockInfo, O::Version)>, StateError> {
        let Some((bytes, version)) = self.objects.get(&self.lock_name()).await? else {
            return Ok(None);
        };
        // A record that does not decode still means the state is locked.
        let info = serde_json::from_slice(&bytes).unwrap_or_else(|_| LockInfo {
            id: "unknown".into(),
            who: "unknown".into(),
            pid: 0,
            operation: "unknown".into(),
            created: "unknown".into(),
            lease: None,
        });
        Ok(Some((info, version)))
    }

    /// Releases the lock if its id is `id`.
    async fn release(&self, id: &str) -> Result<(), StateError> {
        let Some((holder, version)) = self.lock_record().await? else {
            return Err(StateError::NotLocked {
                location: self.location(),
            });
        };
        if holder.id != id {
            return Err(StateError::LockMismatch {
                location: self.location(),
                given: id.to_string(),
                found: holder.id,
            });
        }
        self.objects.delete_if(&self.lock_name(), &version).await
    }

    fn encode<T: serde::Serialize>(&self, value: &T) -> Result<Vec<u8>, StateError> {
        let mut bytes = serde_json::to_vec_pretty(value).map_err(|source| StateError::Encode {
            location: self.location(),
            source,
        })?;
        bytes.push(b'\n');
        Ok(bytes)
    }
}

#[async_trait]
impl<O: Objects> Backend for Remote<O> {
    fn location(&self) -> String {
        self.objects.url(&self.state)
    }

    async fn load(&self) -> Result<Option<State>, StateError> {
        if !self.ready(false).await? {
            return Ok(None);
        }
        match self.objects.get(&self.state).await? {
            None => {
                self.set_seen(None);
                Ok(None)
            }
            Some((bytes, version)) => {
                let state = super::decode(&bytes, &self.location())?;
                self.set_seen(Some(version));
                Ok(Some(state))
            }
        }
    }

    async fn save(&self, state: &State) -> Result<(), StateError> {
        self.ready(true).await?;
        let bytes = self.encode(state)?;
        let expected = match self.seen() {
            Some(seen) => seen,
            // A client that never read the state writes over whatever is there now,
            // but still not over a write that lands in between.
            None => self.objects.get(&self.state).await?.map(|(_, v)| v),
        };
        if let Some(version) = self
            .objects
            .put_if(&self.state, bytes.clone(), expected.as_ref())
            .await?
        {
            self.set_seen(Some(version));
            return Ok(());
        }
        // A write sent again after its answer was lost finds its own first attempt:
        // that is success, not a rival.
        if let Some((stored, version)) = self.objects.get(&self.state).await? {
            if stored == bytes {
                self.set_seen(Some(version));
                return Ok(());
            }
        }
        Err(StateError::Stale {
            location: self.location(),
        })
    }

    async fn put_beside(&self, name: &str, bytes: Vec<u8>) -> Result<String, StateError> {
        self.ready(true).await?;
        let object = self.beside(name);
        // `None`: it is there already, and a name is its content's digest.
        self.objects.put_if(&object, bytes, None).await?;
        Ok(self.objects.url(&object))
    }

    async fn get_beside(&self, name: &str) -> Result<Option<Vec<u8>>, StateError> {
        if !self.ready(false).await? {
            return Ok(None);
        }
        Ok(self.objects.get(&self.beside(name)).await?.map(|(b, _)| b))
    }

    async fn lock(&self, info: &LockInfo) -> Result<(), StateError> {
        self.ready(true).await?;
        let body = self.encode(info)?;
        // A lock released or taken over between a refused write and the read of it:
        // try again, a few times.
        for _ in 0..3 {
            if self
                .objects
                .put_if(&self.lock_name(), body.clone(), None)
                .await?
                .is_some()
            {
                return Ok(());
            }
            match self.lock_record().await? {
                // Our own lock, written by an attempt whose answer was lost.
                Some((holder, _)) if holder == *info => return Ok(()),
                // A killed run's lock, or a replica's that lost its Lease: taken over
                // (its writes were conditional, so nothing it left can be lost).
                Some((holder, version)) if super::lock::abandoned(&holder, info) => {
                    self.objects.delete_if(&self.lock_name(), &version).await?;
                }
                Some((holder, _)) => {
                    return Err(StateError::LockHeld {
                        location: self.location(),
                        holder: Box::new(holder),
                    })
                }
                None => {}
            }
        }
        Err(StateError::Remote {
            location: self.location(),
            error: terrain_providers::ProviderError::api(
                "lock",
                412,
                "",
                "the lock object kept changing while taking the lock",
            ),
        })
    }

    async fn unlock(&self, id: &str) -> Result<(), StateError> {
        self.release(id).await
    }

    async fn lock_info(&self) -> Result<Option<LockInfo>, StateError> {
        Ok(self.lock_record().await?.map(|(info, _)| info))
    }

    async fn force_unlock(&self, id: &str) -> Result<(), StateError> {
        self.release(id).await
    }
}
