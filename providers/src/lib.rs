//! terrain-providers: the provider protocol every resource kind implements, and the
//! providers themselves, one module per cloud and one file per resource kind.
//!
//! The engine never knows a kind by name: it sees [`Resource`] (untyped JSON in, JSON
//! out) and a [`Schema`] describing the kind's fields. Each kind is written against the
//! typed [`Kind`] trait and registered once in [`registry::builtin`].

// The schema derive names this crate by its name, inside it too.
extern crate self as terrain_providers;

pub mod aws;
pub mod capacity;
pub mod error;
pub mod failure;
pub mod gcp;
pub mod kubernetes;
pub mod local;
pub mod protocol;
pub mod provider;
pub mod registry;
pub mod schema;
pub mod session;
pub mod testing;
pub mod usage;

pub use capacity::{Demand, Finding, Need, Severity};
pub use error::ProviderError;
pub use protocol::{
    Adapter, ApiGroups, ApiKind, Ctx, Health, Invalid, Kind, LineSink, Live, Observed, Peer,
    Reporter, Resource, Writes,
};
pub use registry::Registry;
pub use schema::{Field, Schema, Type};
pub use session::{EnvFn, Session};
pub use usage::Usage;
