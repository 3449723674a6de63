//! `terrain status`: the live readiness of every resource the stack manages, asked of
//! the providers now (a Job's completions, a claim's binding), one line each.

use clap::Args;

use super::{common, Exit, StackArgs};
use crate::engine::Quiet;
use crate::inspect::Status;
use crate::output::{self, Style};

#[derive(Args, Debug)]
pub struct StatusArgs {
    #[command(flatten)]
    stack: StackArgs,
    /// How many providers calls may run at once.
    #[arg(long, default_value_t = 10, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    parallelism: u16,
}

/// One aligned line per resource: address, readiness, summary.
pub fn render(statuses: &[Status], style: Style) -> String {
    let width = statuses
        .iter()
        .map(|s| s.address.to_string().len())
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    for s in statuses {
        let (word, colour, summary) = match &s.health {
            None => ("pending", "33", "not applied".to_string()),
            Some(Ok(h)) if h.ready => ("ready", "32", h.summary.clone()),
            Some(Ok(h)) => ("not ready", "33", h.summary.clone()),
            Some(Err(e)) => ("error", "31", e.clone()),
        };
        out.push_str(&format!(
            "{:<width$}  {}  {summary}\n",
            s.address.to_string(),
            style.paint(colour, &format!("{word:<9}"))
        ));
    }
    out
}

pub async fn run(args: StatusArgs) -> anyhow::Result<Exit> {
    let registry = common::registry();
    let stack = common::load_stack(&args.stack, &registry)?;
    let engine = common::engine(
        &args.stack,
        "terrain status",
        stack,
        registry,
        args.parallelism,
        std::sync::Arc::new(Quiet),
    )
    .await?;
    let backend = engine.backend.clone();
    let state = backend.load().await?.unwrap_or_default();
    let statuses = engine.status(&state).await;
    output::print(&render(&statuses, Style::detect(args.stack.no_color)));
    Ok(Exit::Ok)
}
