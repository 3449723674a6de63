//! `terrain output [NAME]`: the stack's outputs as of the last apply. Secrets show as
//! `(sensitive value)` (`null` with `--json`, whose entries say `"sensitive": true`)
//! unless `--show-sensitive` is given for one named output.

use std::collections::BTreeMap;

use anyhow::Context;
use clap::Args;
use serde_json::Value;

use super::{common, Exit, StackArgs};
use crate::output::{self, value::SENSITIVE};
use crate::state::OutputState;

#[derive(Args, Debug)]
pub struct OutputArgs {
    /// One output; all when left out.
    name: Option<String>,
    #[command(flatten)]
    stack: StackArgs,
    /// Prints JSON.
    #[arg(long)]
    json: bool,
    /// Prints the value of a sensitive output (only with NAME).
    #[arg(long = "show-sensitive", requires = "name")]
    show_sensitive: bool,
}

/// `name = value` lines, secrets hidden.
pub fn render_all(outputs: &BTreeMap<String, OutputState>) -> String {
    let width = outputs.keys().map(String::len).max().unwrap_or(0);
    outputs
        .iter()
        .map(|(k, o)| {
            let v = if o.sensitive {
                SENSITIVE.to_string()
            } else {
                o.value.to_string()
            };
            format!("{k:<width$} = {v}\n")
        })
        .collect()
}

pub async fn run(args: OutputArgs) -> anyhow::Result<Exit> {
    let registry = common::registry();
    let stack = common::load_stack(&args.stack, &registry)?;
    let backend = common::backend(&stack, &args.stack, "outputs").await?;
    let state = backend.load().await?.unwrap_or_default();
    backend.close().await;
    match &args.name {
        Some(name) => {
            let o = state.outputs.get(name).with_context(|| {
                let known: Vec<&str> = state.outputs.keys().map(String::as_str).collect();
                format!(
                    "no output `{name}` in the state{}",
                    if known.is_empty() {
                        " (apply the stack first)".to_string()
                    } else {
                        format!("; outputs: {}", known.join(", "))
                    }
                )
            })?;
            let value = if o.sensitive && !args.show_sensitive {
                // JSON has no marker text a script could take for the value.
                if args.json {
                    Value::Null
                } else {
                    Value::String(SENSITIVE.to_string())
                }
            } else {
                o.value.clone()
            };
            let text = match (&value, args.json) {
                (Value::String(s), false) => s.clone(),
                (v, _) => serde_json::to_string_pretty(v).context("encode output")?,
            };
            output::print(&format!("{text}\n"));
        }
        None if args.json => {
            let all: serde_json::Map<String, Value> = state
                .outputs
                .iter()
                .map(|(k, o)| {
                    let v = if o.sensitive {
                        Value::Null
                    } else {
                        o.value.clone()
                    };
                    (
                        k.clone(),
                        serde_json::json!({"value": v, "sensitive": o.sensitive}),
                    )
                })
                .collect();
            output::print(&format!(
                "{}\n",
                serde_json::to_string_pretty(&all).context("encode outputs")?
            ));
        }
        None => output::print(&render_all(&state.outputs)),
    }
    Ok(Exit::Ok)
}
