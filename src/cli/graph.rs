//! `terrain graph`: the dependency graph in Graphviz DOT (`terrain graph | dot -Tsvg`).

use clap::Args;

use super::{common, Exit, StackArgs};
use crate::output;
use crate::plan::stack_deps;

#[derive(Args, Debug)]
pub struct GraphArgs {
    #[command(flatten)]
    stack: StackArgs,
}

pub fn run(args: GraphArgs) -> anyhow::Result<Exit> {
    let registry = common::registry();
    let stack = common::load_stack(&args.stack, &registry)?;
    output::print(&crate::graph::to_dot(&stack.name, &stack_deps(&stack)));
    Ok(Exit::Ok)
}
