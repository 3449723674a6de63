//! Using terrain as a library: load a stack, plan it against a state file, and walk the
//! planned changes as data (what a CI bot commenting on pull requests would do).
//!
//! `cargo run --example plan_stack -- stacks/quickstart`

use std::path::PathBuf;
use std::sync::Arc;

use terrain::engine::{Engine, Quiet, Settings};
use terrain::stack::{self, LoadOptions};
use terrain::state::local::LocalBackend;
use terrain::walk::Cancel;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let path: PathBuf = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "stacks/quickstart".into())
        .into();
    let registry = terrain_providers::registry::builtin();
    let env = |k: &str| std::env::var(k).ok();
    let stack = stack::load(&LoadOptions {
        path: &path,
        vars: &[],
        var_files: &[],
        environment: terrain::stack::DEFAULT_ENVIRONMENT,
        env: &env,
        registry: &registry,
    })?;
    let state_file =
        std::env::temp_dir().join(format!("terrain-example-{}.json", std::process::id()));
    let engine = Engine {
        stack,
        registry,
        backend: Arc::new(LocalBackend::new(&state_file)),
        settings: Settings::default(),
        observer: Arc::new(Quiet),
        cancel: Cancel::new(),
    };
    let (plan, _state) = engine
        .plan(false, &[], &path.display().to_string(), &[])
        .await?;
    for change in &plan.changes {
        println!(
            "{:>3} {:<28} {:?}",
            change.action.symbol(),
            change.address.to_string(),
            change.action
        );
    }
    let s = plan.summary();
    println!(
        "{} to add, {} to change, {} to replace, {} to destroy",
        s.add, s.change, s.replace, s.destroy
    );
    Ok(())
}
