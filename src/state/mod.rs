//! The state: what terrain created, as last seen, keyed by address. Versioned JSON with
//! a serial (bumped on every save) and a lineage (fixed at creation), so a saved plan
//! can tell it is stale and two unrelated states are never confused.
//!
//! Backends ([`backend::Backend`]) load, save and lock it: a local file ([`local`]), an
//! S3 object ([`s3`]) or a GCS object ([`gcs`]). During an apply, changes are appended to a [`journal`] beside the
//! snapshot rather than rewriting it; loading replays the journal. Every backend passes
//! the one suite in [`conformance`]. The formats are documented in `state/README.md`.

pub mod backend;
pub mod conformance;
pub mod gcs;
pub mod journal;
pub mod local;
pub mod lock;
pub mod remote;
pub mod s3;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use backend::{Backend, LeaseHold, LockInfo, StateError};

/// The format version this build writes; older versions are upgraded on load.
pub const FORMAT_VERSION: u32 = 1;

/// A whole state file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct State {
    pub format_version: u32,
    pub terrain_version: String,
    /// Bumped on every save.
    pub serial: u64,
    /// A UUID fixed when the state is first created.
    pub lineage: String,
    /// Resources by address (`kind.name`), sorted so files diff cleanly.
    #[serde(default)]
    pub resources: BTreeMap<String, ResourceState>,
    /// Stack outputs as of the last apply.
    #[serde(default)]
    pub outputs: BTreeMap<String, OutputState>,
}

impl State {
    /// A fresh, empty state with a new lineage.
    pub fn new() -> Self {
        Self {
            format_version: FORMAT_VERSION,
            terrain_version: env!("CARGO_PKG_VERSION").to_string(),
            serial: 0,
            lineage: uuid::Uuid::new_v4().to_string(),
            resources: BTreeMap::new(),
            outputs: BTreeMap::new(),
        }
    }
}

impl State {
    /// The same state without its resources and outputs (serial, lineage, versions).
    pub fn clone_header(&self) -> Self {
        Self {
            format_version: self.format_version,
            terrain_version: self.terrain_version.clone(),
            serial: self.serial,
            lineage: self.lineage.clone(),
            resources: BTreeMap::new(),
            outputs: BTreeMap::new(),
        }
    }
}

impl Default for State {
    fn default() -> Self {
        Self::new()
    }
}

/// One managed resource.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResourceState {
    pub kind: String,
    pub provider: String,
    /// The provider's id for the object; `None` only while a create is pending.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The spec as last applied (or refreshed), defaults filled.
    #[serde(default)]
    pub spec: Value,
    /// Attributes reported by the provider after apply.
    #[serde(default)]
    pub outputs: Value,
    /// Addresses this resource depended on when applied: destroy runs in reverse of these
    /// even after the stack no longer mentions the resource.
    #[serde(default)]
    pub dependencies: Vec<String>,
    /// Dotted paths (`spec.password`, `outputs.token`) whose values are secret.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sensitive_paths: Vec<String>,
    /// An operation recorded before its API call (write-ahead). Present in a saved state
    /// only if terrain stopped before the call's result was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<Pending>,
    /// Objects replaced with create_before_destroy whose delete has not completed yet.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deposed: Vec<Deposed>,
    /// The object was made but its create failed (a run that did not succeed): the next
    /// plan replaces it.
    #[serde(default, skip_serializing_if = "is_false")]
    pub tainted: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// The operation in flight for a resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PendingOp {
    Create,
    Update,
    Delete,
}

/// A write-ahead record: what terrain was about to do, with what.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pending {
    pub op: PendingOp,
    /// RFC 3339 time the operation started.
    pub started_at: String,
    /// For creates: the id the object will have, if the kind knows it in advance; used
    /// to find and adopt the object after an interruption.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planned_id: Option<String>,
    /// The spec being applied.
    #[serde(default)]
    pub spec: Value,
}

/// An old object left over from a create_before_destroy replace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Deposed {
    pub id: String,
    pub spec: Value,
}

/// A stack output as of the last apply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutputState {
    pub value: Value,
    #[serde(default)]
    pub sensitive: bool,
}

/// Decodes a stored state (from any backend; `location` names it in errors), telling a newer format ("upgrade terrain") from a broken file.
pub fn decode(bytes: &[u8], location: &str) -> Result<State, StateError> {
    let unsupported = |found: u32| StateError::UnsupportedFormat {
        location: location.to_string(),
        found,
        supported: FORMAT_VERSION,
    };
    match serde_json::from_slice::<State>(bytes) {
        Ok(state) if state.format_version > FORMAT_VERSION => {
            Err(unsupported(state.format_version))
        }
        Ok(state) => Ok(state),
        Err(source) => {
            // A newer format may not fit today's `State` at all; saying "upgrade
            // terrain" beats a field-level decode error.
            #[derive(Deserialize)]
            struct Header {
                format_version: u32,
            }
            match serde_json::from_slice::<Header>(bytes) {
                Ok(h) if h.format_version > FORMAT_VERSION => Err(unsupported(h.format_version)),
                _ => Err(StateError::Decode {
                    location: location.to_string(),
                    source,
                }),
            }
        }
    }
}
