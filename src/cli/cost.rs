//! `terrain cost`: what the stack's objects cost per hour as last applied, priced from
//! the catalog terrain ships (and the stack's or `--prices` price file), offline: each
//! billing resource's range at its autoscaling minimum and maximum, and the total.
//! `--json` prints the same as data.

use anyhow::Context;
use clap::Args;

use super::{common, Exit, StackArgs};
use crate::engine::Quiet;
use crate::output;

#[derive(Args, Debug)]
pub struct CostArgs {
    #[command(flatten)]
    pub stack: StackArgs,
    /// Prints JSON.
    #[arg(long)]
    pub json: bool,
}

pub async fn run(args: CostArgs) -> anyhow::Result<Exit> {
    let registry = common::registry();
    let stack = common::load_stack(&args.stack, &registry)?;
    let engine = common::engine(
        &args.stack,
        "terrain cost",
        stack,
        registry,
        1,
        std::sync::Arc::new(Quiet),
    )
    .await?;
    let state = engine.load_state().await?;
    let cost = engine.cost_of_state(&state);
    engine.close().await;
    if args.json {
        let text = serde_json::to_string_pretty(&serde_json::json!({
            "total": output::cost::totals_json(&cost),
            "resources": cost.resources.iter().map(|r| serde_json::json!({
                "address": r.address,
                "cost": output::cost::resource_json(r),
            })).collect::<Vec<_>>(),
        }))
        .context("encode the cost")?;
        output::print(&format!("{text}\n"));
    } else {
        output::print(&output::cost::table(&cost));
    }
    Ok(Exit::Ok)
}
