//! The root crate's integration tests, one binary: the CLI and end-to-end tests against
//! the sandbox, the engine against the call-recording test provider, the contract checks.
//! One binary links the workspace once instead of once per file; every test keeps its own
//! working directory, environment (passed to the commands it runs and to the contexts it
//! makes, never set on the process) and child processes.

#[path = "../common/mod.rs"]
mod common;
#[path = "../contract/mod.rs"]
mod contract;
#[path = "../../providers/tests/support/mod.rs"]
mod support;

mod ack_manifests;
mod aws_cli;
mod aws_from_zero;
mod bad_stacks;
mod call_errors;
mod capacity;
mod cli;
mod cost;
mod crash;
mod engine;
mod features;
mod fmt;
mod gcp;
mod gcp_cli;
mod gcp_from_zero;
mod gcp_identity;
mod graph_picture;
mod import_write;
mod kfp_manifests;
mod kfp_pipeline_source;
mod kubernetes_cli;
mod kubernetes_manifests;
mod layout;
mod official_clients;
mod operator;
mod operator_faults;
mod plan_json;
mod policy;
mod readme;
mod review;
mod sandbox_cli;
mod schemas;
mod stacks;
mod state_backend;
mod state_gcs;
mod state_s3;
mod stockout;
mod team_cli;
mod tiers;
