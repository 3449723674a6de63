//! `terrain force-unlock ID`: break a lock whose holder is gone.

use clap::Args;

use super::{common, Exit, StackArgs};
use crate::output;

#[derive(Args, Debug)]
pub struct ForceUnlockArgs {
    /// The lock id, as printed by the error that refused your run.
    id: String,
    #[command(flatten)]
    stack: StackArgs,
}

pub async fn run(args: ForceUnlockArgs) -> anyhow::Result<Exit> {
    let registry = common::registry();
    let stack = common::load_stack(&args.stack, &registry)?;
    let backend = common::backend(&stack, &args.stack, "force-unlock").await?;
    let holder = backend.lock_info().await?;
    backend.force_unlock(&args.id).await?;
    let who = holder
        .map(|h| format!(" (held by {} for `{}`)", h.holder(), h.operation))
        .unwrap_or_default();
    output::print(&format!(
        "Released lock {} on {}{who}.\n",
        args.id,
        backend.location()
    ));
    backend.close().await;
    Ok(Exit::Ok)
}
