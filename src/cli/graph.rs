//! `terrain graph`: the dependency graph. `--format dot` (the default) prints Graphviz
//! DOT (`terrain graph | dot -Tsvg`); `--format svg` a picture laid out by terrain
//! itself, no Graphviz needed; `--format html` a self-contained page with that picture,
//! each resource coloured by its planned action: it plans as `terrain plan` does (the
//! same stack options, `--sandbox` included, and `--destroy`), or reads a saved plan
//! with `--plan FILE` without planning again.

use std::path::PathBuf;
use std::sync::Arc;

use clap::{Args, ValueEnum};

use super::{common, Exit, StackArgs};
use crate::engine::Quiet;
use crate::output;
use crate::plan::{stack_deps, Plan};

/// How many resource operations a plan's refresh may run at once (`terrain plan`'s
/// default).
const PARALLELISM: u16 = 10;

#[derive(Args, Debug)]
pub struct GraphArgs {
    #[command(flatten)]
    stack: StackArgs,
    /// dot: Graphviz DOT, to pipe into `dot -Tsvg`; svg: a picture laid out by terrain;
    /// html: a page with that picture coloured by the plan's actions.
    #[arg(long, value_enum, default_value_t = Format::Dot)]
    format: Format,
    /// With --format html: colours from this saved plan (`terrain plan --out FILE`)
    /// instead of planning now.
    #[arg(long = "plan", value_name = "FILE")]
    plan: Option<PathBuf>,
    /// With --format html: colours the plan to destroy everything the stack manages.
    #[arg(long, conflicts_with = "plan")]
    destroy: bool,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    Dot,
    Svg,
    Html,
}

pub async fn run(args: GraphArgs) -> anyhow::Result<Exit> {
    if args.format != Format::Html && (args.plan.is_some() || args.destroy) {
        anyhow::bail!("--plan and --destroy colour the HTML page: add --format html");
    }
    // Where the user meant, before the run moves into the stack's directory.
    let plan_file = args.plan.as_deref().map(|p| (common::absolute(p), p));
    let registry = common::registry();
    let stack = common::load_stack(&args.stack, &registry)?;
    let deps = stack_deps(&stack);
    let text = match args.format {
        Format::Dot => crate::graph::to_dot(&stack.name, &deps),
        Format::Svg => output::picture::svg(&stack.name, &deps)?,
        Format::Html => {
            let name = stack.name.clone();
            let plan = match plan_file {
                Some((file, given)) => saved_plan(&file, given, &stack)?,
                None => plan_now(&args, stack, registry).await?,
            };
            output::picture::html(&name, &deps, &plan)?
        }
    };
    output::print(&text);
    Ok(Exit::Ok)
}

/// The plan saved in `file` (`given` on the command line) by `terrain plan --out`,
/// which must be of this stack; one made before the stack's files changed still colours
/// the picture, with a note.
fn saved_plan(
    file: &std::path::Path,
    given: &std::path::Path,
    stack: &crate::stack::Stack,
) -> anyhow::Result<Plan> {
    let plan = super::plan::load(file)?;
    if plan.stack != stack.name {
        anyhow::bail!(
            "{} is a plan of the stack {}, not of {}",
            given.display(),
            plan.stack,
            stack.name
        );
    }
    if plan.stack_hash != stack.source_hash {
        output::eprint(&format!(
            "Note: the stack's files changed since {} was saved; the colours are that plan's.\n",
            given.display()
        ));
    }
    Ok(plan)
}

/// Plans as `terrain plan` does (refreshing, on the sandbox with `--sandbox`).
async fn plan_now(
    args: &GraphArgs,
    stack: crate::stack::Stack,
    registry: terrain_providers::Registry,
) -> anyhow::Result<Plan> {
    let session = common::engine(
        &args.stack,
        "terrain graph",
        stack,
        registry,
        PARALLELISM,
        Arc::new(Quiet),
    )
    .await?;
    let stack_path = args.stack.stack.display().to_string();
    let planned = session
        .plan(args.destroy, &[], &stack_path, &args.stack.vars)
        .await;
    session.close().await;
    let (plan, _) = planned?;
    Ok(plan)
}
