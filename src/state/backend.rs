//! The state backend interface (load, save, lock) and its errors. Local files, S3
//! (conditional-write lock object) and GCS (generation-precondition lock object)
//! implement it and pass the same [`super::conformance`] suite.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::journal::{JournalError, Record};
use super::State;

/// Who holds a lock, for what, since when. Recorded with the lock so a refused second
/// writer can say who to ask.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockInfo {
    /// A UUID; `terrain force-unlock ID` takes it.
    pub id: String,
    /// `user@host`.
    pub who: String,
    pub pid: u32,
    /// The command holding it (`apply`, `destroy`, `import`, `state rm` …).
    pub operation: String,
    /// RFC 3339.
    pub created: String,
    /// The Lease its holder held when it took the lock (an operator's replica).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<LeaseHold>,
}

/// A Lease held by a lock's holder, and its term: the Lease's `leaseTransitions` when
/// the holder took it. Terms only grow and each is held by one process, so a lock taken
/// at an older term of the same Lease belongs to a holder that lost it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseHold {
    pub namespace: String,
    pub name: String,
    /// The holder's identity in the Lease (the pod, and a suffix per process).
    pub holder: String,
    pub term: i32,
}

impl std::fmt::Display for LeaseHold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} holding Lease {}/{} at term {}",
            self.holder, self.namespace, self.name, self.term
        )
    }
}

impl LockInfo {
    /// `user@host` of this process.
    pub fn who_here() -> String {
        let user = std::env::var("USER")
            .or_else(|_| std::env::var("LOGNAME"))
            .unwrap_or_else(|_| "unknown".to_string());
        let host = gethostname::gethostname().to_string_lossy().into_owned();
        format!("{user}@{host}")
    }

    /// A new lock record for `operation`, naming this process.
    pub fn new(operation: &str) -> Self {
        Self {
            id: uuid::Uuid::new_v4().to_string(),
            who: Self::who_here(),
            pid: std::process::id(),
            operation: operation.to_string(),
            created: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            lease: None,
        }
    }

    /// Who holds it: `user@host (pid N)`, and the Lease its holder holds, if any.
    pub fn holder(&self) -> String {
        match &self.lease {
            Some(l) => format!("{} (pid {}, {l})", self.who, self.pid),
            None => format!("{} (pid {})", self.who, self.pid),
        }
    }

    /// The same record, naming the Lease its holder holds.
    pub fn holding(mut self, lease: Option<LeaseHold>) -> Self {
        self.lease = lease;
        self
    }
}

/// Why a state operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("read state {location}: {source}")]
    Read {
        location: String,
        #[source]
        source: std::io::Error,
    },
    #[error("write state {location}: {source}")]
    Write {
        location: String,
        #[source]
        source: std::io::Error,
    },
    #[error("decode state {location}: {source}")]
    Decode {
        location: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("state {location} has format version {found}; this terrain reads up to {supported}: upgrade terrain")]
    UnsupportedFormat {
        location: String,
        found: u32,
        supported: u32,
    },
    #[error(
        "state {location} is locked by {} for `{}` since {}, lock id {}; if that run is no longer going, release it with `terrain force-unlock {}`",
        holder.holder(), holder.operation, holder.created, holder.id, holder.id
    )]
    LockHeld {
        location: String,
        holder: Box<LockInfo>,
    },
    #[error("lock state {location}: {source}")]
    Lock {
        location: String,
        #[source]
        source: std::io::Error,
    },
    #[error("state {location} is locked with id {found}, not {given}; nothing was unlocked")]
    LockMismatch {
        location: String,
        given: String,
        found: String,
    },
    #[error("state {location} is not locked")]
    NotLocked { location: String },
    #[error("state journal {location}: {source}; nothing was loaded (the journal is left as it is for inspection)")]
    Journal {
        location: String,
        #[source]
        source: JournalError,
    },
    #[error("state journal {location} has records but the state file beside it is missing; restore the state file (or its .backup) before running terrain again")]
    JournalWithoutSnapshot { location: String },
    #[error("state {location} keeps no journal")]
    NoJournal { location: String },
    #[error("encode state {location}: {source}")]
    Encode {
        location: String,
        #[source]
        source: serde_json::Error,
    },
    /// A remote backend's call failed (`s3.PutObject`, `storage.objects.get`): the
    /// provider layer's account of it (status, code, message, request id, hint).
    #[error("state {location}: {error}")]
    Remote {
        location: String,
        #[source]
        error: terrain_providers::ProviderError,
    },
    #[error("state {location}: {message}")]
    Config { location: String, message: String },
    /// The stored state is no longer the version this run read: another writer saved
    /// since (a lock lost or broken while this run went on).
    #[error("state {location} changed since this run read it: another run saved it in between (was its lock broken with force-unlock?); nothing was overwritten; run `terrain plan` again")]
    Stale { location: String },
    #[error("state {location}: bucket {bucket} does not keep object versions, so a bad save would overwrite the only copy of the state; enable versioning on it (`{enable}`), or set allow_unversioned = true in [{table}] to accept the risk")]
    Unversioned {
        location: String,
        bucket: String,
        /// The command that turns versioning on.
        enable: String,
        /// The stack table to allow it in (`backend.s3`).
        table: &'static str,
    },
}

/// Where state lives.
#[async_trait]
pub trait Backend: Send + Sync {
    /// Where the state is, for messages (`state/demo.json`).
    fn location(&self) -> String;
    /// The stored state, or `None` when there is none yet.
    async fn load(&self) -> Result<Option<State>, StateError>;
    /// Replaces the stored state atomically, keeping the previous version as a backup,
    /// and removes the journal (a compaction: `state` includes what the journal held).
    /// A reader never sees a partly written state, whatever happens during the call.
    async fn save(&self, state: &State) -> Result<(), StateError>;
    /// Whether this backend keeps a journal ([`Backend::append`]). One that does not is
    /// saved whole instead.
    fn journals(&self) -> bool {
        false
    }
    /// Appends `records` to the journal and makes them durable together (one flush for
    /// all of them); returns the journal's size in bytes after them. Loading replays the
    /// journal over the state last saved.
    async fn append(&self, _records: &[Record]) -> Result<u64, StateError> {
        Err(StateError::NoJournal {
            location: self.location(),
        })
    }
    /// The journal's records not yet folded into the saved state, in order.
    async fn journal(&self) -> Result<Vec<Record>, StateError> {
        Ok(Vec::new())
    }
    /// Takes the lock, or fails at once with [`StateError::LockHeld`] naming the holder.
    async fn lock(&self, info: &LockInfo) -> Result<(), StateError>;
    /// Releases a lock this process took with `id`.
    async fn unlock(&self, id: &str) -> Result<(), StateError>;
    /// The current lock record, if locked.
    async fn lock_info(&self) -> Result<Option<LockInfo>, StateError>;
    /// Breaks a lock held by someone else, if its id is `id`.
    async fn force_unlock(&self, id: &str) -> Result<(), StateError>;
    /// Stores `bytes` as `name` beside the state (the plans the operator keeps for
    /// approval, which hold what the state holds), protected as the state is: 0600 on
    /// disk, the state's bucket and encryption remotely. Names are content-addressed,
    /// so one already there is kept. Returns where it is.
    async fn put_beside(&self, name: &str, _bytes: Vec<u8>) -> Result<String, StateError> {
        Err(StateError::Config {
            location: self.location(),
            message: format!("keeps nothing beside the state (asked to store {name})"),
        })
    }
    /// What [`Backend::put_beside`] stored as `name`; `None` when nothing is.
    async fn get_beside(&self, _name: &str) -> Result<Option<Vec<u8>>, StateError> {
        Ok(None)
    }
}
