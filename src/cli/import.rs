//! `terrain import ADDR ID`: record an existing object in the state at ADDR, which the
//! stack must declare; the next plan shows how it differs from the stack.

use clap::Args;

use super::{common, Exit, RunArgs, StackArgs};
use crate::addr::Address;
use crate::engine::Quiet;
use crate::output;

#[derive(Args, Debug)]
pub struct ImportArgs {
    /// The address in the stack (`kind.name`).
    address: Address,
    /// The object's id as its provider knows it (a path, a name…).
    id: String,
    #[command(flatten)]
    stack: StackArgs,
    #[command(flatten)]
    run: RunArgs,
}

pub async fn run(args: ImportArgs) -> anyhow::Result<Exit> {
    let registry = common::registry();
    let stack = common::load_stack(&args.stack, &registry)?;
    let engine = common::engine(
        &args.stack,
        "terrain import",
        stack,
        registry,
        args.run.parallelism,
        std::sync::Arc::new(Quiet),
    )
    .await?;
    let backend = engine.backend.clone();
    common::with_lock(&*backend, "import", args.run.lock_timeout, async {
        let mut state = engine.load_state().await?;
        let key = args.address.to_string();
        if let Some(existing) = state.resources.get(&key) {
            anyhow::bail!(
                "{key} is already in the state (id {}); `terrain state rm {key}` first to import another object",
                existing.id.as_deref().unwrap_or("pending")
            );
        }
        let r = engine.import(&args.address, &args.id).await?;
        let id = r.id.clone().unwrap_or_default();
        state.resources.insert(key.clone(), r);
        state.serial += 1;
        backend.save(&state).await?;
        output::print(&format!("Imported {key} [id={id}]. Run `terrain plan` to see how it differs from the stack.\n"));
        Ok(Exit::Ok)
    })
    .await
}
