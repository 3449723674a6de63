//! The root crate's tests that use the AWS default credential chain in-process (the S3
//! state backend and a team's S3 state on moto). The chain reads the process environment,
//! so these tests share one fixed test environment (`support::aws::env`), and run in a
//! binary of their own: no other test's process or child sees those variables.

#[path = "../common/mod.rs"]
mod common;
#[path = "../../providers/tests/support/mod.rs"]
mod support;

mod state_s3;
mod team_cli;
