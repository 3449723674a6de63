//! `terrain apply` and `terrain destroy`: plan (or read a saved plan), show it, hold it
//! to the policies, ask, then apply under the state lock with progress, saving state
//! after every operation.

use clap::Args;

use super::{common, Exit, RunArgs, StackArgs};
use crate::engine::{ApplyReport, Base};
use crate::output::{self, progress::Progress, Style};
use crate::plan::Plan;

#[derive(Args, Debug)]
pub struct ApplyArgs {
    /// A plan saved with `terrain plan --out FILE`, applied exactly (no prompt).
    plan_file: Option<std::path::PathBuf>,
    #[command(flatten)]
    stack: StackArgs,
    #[command(flatten)]
    run: RunArgs,
    /// Applies without asking for confirmation.
    #[arg(long = "auto-approve")]
    auto_approve: bool,
}

#[derive(Args, Debug)]
pub struct DestroyArgs {
    #[command(flatten)]
    stack: StackArgs,
    #[command(flatten)]
    run: RunArgs,
    /// Destroys without asking for confirmation.
    #[arg(long = "auto-approve")]
    auto_approve: bool,
}

pub async fn run_apply(args: ApplyArgs) -> anyhow::Result<Exit> {
    match &args.plan_file {
        Some(file) => apply_saved(file, &args).await,
        None => converge(&args.stack, &args.run, args.auto_approve, false).await,
    }
}

pub async fn run_destroy(args: DestroyArgs) -> anyhow::Result<Exit> {
    converge(&args.stack, &args.run, args.auto_approve, true).await
}

async fn build(
    stack_args: &StackArgs,
    run: &RunArgs,
    operation: &str,
) -> anyhow::Result<(common::Session, Style)> {
    let registry = common::registry();
    let stack = common::load_stack(stack_args, &registry)?;
    let style = Style::detect(stack_args.no_color);
    let mut engine = common::engine(
        stack_args,
        operation,
        stack,
        registry,
        run.parallelism,
        Progress::new(style),
    )
    .await?;
    engine.engine.settings.refresh = run.refresh;
    common::handle_interrupts(engine.cancel.clone());
    Ok((engine, style))
}

async fn converge(
    stack_args: &StackArgs,
    run: &RunArgs,
    auto_approve: bool,
    destroy: bool,
) -> anyhow::Result<Exit> {
    let op = if destroy { "destroy" } else { "apply" };
    let (engine, style) = build(stack_args, run, &format!("terrain {op}")).await?;
    let mut policies = common::policies(&engine.stack, &run.policies)?;
    let backend = engine.backend.clone();
    let result = common::with_lock(&*backend, op, run.lock_timeout, async {
        let stack_path = stack_args.stack.display().to_string();
        let (plan, state) = engine
            .plan(destroy, &run.targets, &stack_path, &stack_args.vars)
            .await?;
        if let Some(banner) = common::state_banner(stack_args, &*backend) {
            output::print(&banner);
        }
        output::print(&output::plan::render(&plan, style));
        held_to_policies(policies.as_mut(), &engine, &plan, style)?;
        common::within_budget(&plan)?;
        if !plan.has_changes() {
            // Still record what refresh learned (adopted creates, vanished objects).
            engine.apply(&plan, state).await?;
            return Ok(Exit::Ok);
        }
        let question = if destroy {
            format!(
                "Do you really want to destroy everything stack `{}` manages? There is no undo.",
                engine.stack.name
            )
        } else {
            "Do you want to perform these actions?".to_string()
        };
        if !common::confirm(&question, auto_approve)? {
            output::print(&format!(
                "\n{} cancelled; nothing was changed.\n",
                if destroy { "Destroy" } else { "Apply" }
            ));
            return Err(super::Reported.into());
        }
        output::print("\n");
        let report = engine.apply(&plan, state).await?;
        finish(&report, destroy);
        Ok(Exit::Ok)
    })
    .await;
    engine.close().await;
    result
}

async fn apply_saved(file: &std::path::Path, args: &ApplyArgs) -> anyhow::Result<Exit> {
    let plan: Plan = super::plan::load(file)?;
    // The plan is applied with the stack and variables it was made from.
    let mut stack_args = args.stack.clone();
    stack_args.stack = plan.stack_path.clone().into();
    stack_args.vars = plan.variables.clone();
    stack_args.env = plan.environment.clone();
    stack_args.var_files = plan.var_files.clone();
    let (engine, style) = build(&stack_args, &args.run, "terrain apply").await?;
    let mut policies = common::policies(&engine.stack, &args.run.policies)?;
    let backend = engine.backend.clone();
    let result = common::with_lock(&*backend, "apply", args.run.lock_timeout, async {
        let stored = engine.backend.load().await?;
        engine.check_fresh(&plan, stored.as_ref())?;
        // A saved plan is held to the policies as they are now, not as they were.
        held_to_policies(policies.as_mut(), &engine, &plan, style)?;
        let report = engine
            .apply(&plan, Base::against(stored.unwrap_or_default(), &plan))
            .await?;
        finish(&report, plan.destroy);
        Ok(Exit::Ok)
    })
    .await;
    engine.close().await;
    result
}

/// Holds `plan` to the run's policies: their warnings shown, a deny failing the run.
fn held_to_policies(
    policies: Option<&mut crate::policy::Policies>,
    engine: &common::Session,
    plan: &Plan,
    style: Style,
) -> anyhow::Result<()> {
    let verdict = common::judge(policies, &engine.stack, plan)?;
    if let Some(v) = &verdict {
        output::print(&output::policy::warnings(v, style));
    }
    common::allowed(verdict.as_ref())
}

fn finish(report: &ApplyReport, destroy: bool) {
    let mut text = if destroy {
        format!(
            "\nDestroy complete! Resources: {} destroyed.\n",
            report.deleted
        )
    } else {
        format!(
            "\nApply complete! Resources: {} added, {} changed, {} replaced, {} destroyed.\n",
            report.created, report.updated, report.replaced, report.deleted
        )
    };
    if !destroy && !report.outputs.is_empty() {
        text.push_str("\nOutputs:\n\n");
        text.push_str(&super::outputs::render_all(&report.outputs));
    }
    output::print(&text);
}
