//! terrain: a Terraform-style provisioner for ML batch infrastructure.
//!
//! The library is the engine behind the `terrain` binary: stack loading, the dependency
//! graph, planning, the apply/destroy walker and the state store. Only [`output`]
//! prints; everything else returns values and errors.

pub mod addr;
pub mod cli;
pub mod cost;
pub mod desired;
pub mod diff;
pub mod engine;
pub mod eval;
pub mod graph;
pub mod inspect;
pub mod operator;
pub mod output;
pub mod plan;
pub mod policy;
pub mod preflight;
pub mod pricing;
pub mod stack;
pub mod state;
pub mod walk;
