//! `terrain logs ADDR [-f]`: the logs of a resource that has them (a Job's pods), as
//! its provider reads them; `-f` follows until it finishes.

use std::sync::Arc;

use clap::Args;

use super::{common, Exit, StackArgs};
use crate::addr::Address;
use crate::engine::Quiet;
use crate::output;

#[derive(Args, Debug)]
pub struct LogsArgs {
    /// The resource (`kind.name`), e.g. kubernetes_job.workload.
    address: Address,
    #[command(flatten)]
    stack: StackArgs,
    /// Keeps printing new lines until the resource finishes.
    #[arg(short = 'f', long)]
    follow: bool,
}

pub async fn run(args: LogsArgs) -> anyhow::Result<Exit> {
    let registry = common::registry();
    let stack = common::load_stack(&args.stack, &registry)?;
    let engine = common::engine(
        &args.stack,
        "terrain logs",
        stack,
        registry,
        1,
        Arc::new(Quiet),
    )
    .await?;
    let backend = engine.backend.clone();
    let state = backend.load().await?.unwrap_or_default();
    let sink: terrain_providers::LineSink =
        Arc::new(|line: &str| output::print(&format!("{line}\n")));
    engine
        .logs(&args.address, &state, args.follow, sink)
        .await?;
    Ok(Exit::Ok)
}
