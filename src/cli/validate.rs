//! `terrain validate`: load and check the stack offline; no state, no API.

use clap::Args;

use super::{common, Exit, StackArgs};
use crate::output;

#[derive(Args, Debug)]
pub struct ValidateArgs {
    #[command(flatten)]
    stack: StackArgs,
}

pub fn run(args: ValidateArgs) -> anyhow::Result<Exit> {
    let registry = common::registry();
    let stack = common::load_stack(&args.stack, &registry)?;
    let n = stack.resources.len();
    output::print(&output::plan::warnings(
        &stack.warnings,
        output::Style::detect(args.stack.no_color),
    ));
    output::print(&format!(
        "The stack `{}` is valid: {n} resource{}, {} output{}.\n",
        stack.name,
        if n == 1 { "" } else { "s" },
        stack.outputs.len(),
        if stack.outputs.len() == 1 { "" } else { "s" }
    ));
    Ok(Exit::Ok)
}
