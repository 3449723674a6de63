//! `terrain plan`: refresh, diff, show. `--out FILE` saves the plan for `apply FILE`;
//! `--json` prints it as data, `--markdown` as a pull-request comment;
//! `--detailed-exitcode` exits 2 when there are changes;
//! the stack's policies and `--policy DIR` judge it (a deny fails it, unsaved).

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use anyhow::Context;
use clap::Args;

use super::{common, Exit, RunArgs, StackArgs};
use crate::engine::Quiet;
use crate::output::{self, Style};
use crate::plan::{Plan, PLAN_FORMAT_VERSION};

#[derive(Args, Debug)]
pub struct PlanArgs {
    #[command(flatten)]
    pub stack: StackArgs,
    #[command(flatten)]
    pub run: RunArgs,
    /// Plans the destruction of everything the stack manages.
    #[arg(long)]
    pub destroy: bool,
    /// Saves the plan to FILE; `terrain apply FILE` then does exactly that.
    #[arg(short = 'o', long = "out", value_name = "FILE")]
    pub out: Option<std::path::PathBuf>,
    /// Prints the plan as JSON.
    #[arg(long)]
    pub json: bool,
    /// Prints the plan as Markdown for a pull-request comment: counts, cost, warnings,
    /// a table of the actions and the full plan folded away.
    #[arg(long, conflicts_with = "json")]
    pub markdown: bool,
    /// Exit code 0 when there is nothing to do, 2 when there are changes, 1 on error.
    #[arg(long = "detailed-exitcode")]
    pub detailed_exitcode: bool,
}

pub async fn run(args: PlanArgs) -> anyhow::Result<Exit> {
    // Where the user meant, before the run moves into the stack's directory.
    let out_file = args.out.as_deref().map(common::absolute);
    let registry = common::registry();
    let stack = common::load_stack(&args.stack, &registry)?;
    let mut engine = common::engine(
        &args.stack,
        "terrain plan",
        stack,
        registry,
        args.run.parallelism,
        std::sync::Arc::new(Quiet),
    )
    .await?;
    engine.engine.settings.refresh = args.run.refresh;
    let mut policies = common::policies(&engine.stack, &args.run.policies)?;
    let stack_path = args.stack.stack.display().to_string();
    let (plan, _) = engine
        .plan(
            args.destroy,
            &args.run.targets,
            &stack_path,
            &args.stack.vars,
        )
        .await?;
    let mut plan = plan;
    plan.var_files = common::var_files(&args.stack);
    // The guardrails judge the plan before anything is shown or saved.
    let verdict = common::judge(policies.as_mut(), &engine.stack, &plan)?;
    if args.json {
        let mut doc = output::plan::to_json(&plan);
        if let (Some(v), serde_json::Value::Object(map)) = (&verdict, &mut doc) {
            map.insert("policy".into(), output::policy::to_json(v));
        }
        let text = serde_json::to_string_pretty(&doc).context("encode the plan")?;
        output::print(&format!("{text}\n"));
    } else if args.markdown {
        let warns: Vec<String> = verdict
            .iter()
            .flat_map(|v| v.warns.iter().map(ToString::to_string))
            .collect();
        output::print(&output::markdown::render(&plan, &warns));
    } else {
        if let Some(banner) = common::state_banner(&args.stack, &*engine.backend) {
            output::print(&banner);
        }
        let style = Style::detect(args.stack.no_color);
        output::print(&output::plan::render(&plan, style));
        if let Some(v) = &verdict {
            output::print(&output::policy::warnings(v, style));
        }
    }
    common::within_budget(&plan)?;
    common::allowed(verdict.as_ref())?;
    if let (Some(path), Some(file)) = (&args.out, &out_file) {
        save(file, &plan)?;
        if !args.json && !args.markdown {
            output::print(&format!(
                "\nSaved the plan to {}. To apply exactly this plan: terrain apply {}\n",
                path.display(),
                path.display()
            ));
        }
    }
    Ok(if args.detailed_exitcode && plan.has_changes() {
        Exit::Changes
    } else {
        Exit::Ok
    })
}

/// Writes a plan file (0600: it holds variable values and refreshed state).
pub fn save(path: &Path, plan: &Plan) -> anyhow::Result<()> {
    let bytes = serde_json::to_vec_pretty(plan).context("encode the plan")?;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .with_context(|| format!("write plan {}", tmp.display()))?;
    f.write_all(&bytes)
        .and_then(|()| f.sync_all())
        .with_context(|| format!("write plan {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("write plan {}", path.display()))?;
    Ok(())
}

/// Reads a plan file written by [`save`].
pub fn load(path: &Path) -> anyhow::Result<Plan> {
    let bytes = std::fs::read(path).with_context(|| format!("read plan {}", path.display()))?;
    let plan: Plan = serde_json::from_slice(&bytes)
        .with_context(|| format!("{} is not a terrain plan file", path.display()))?;
    if plan.format_version != PLAN_FORMAT_VERSION {
        anyhow::bail!(
            "{} has plan format {}, this terrain reads {PLAN_FORMAT_VERSION}",
            path.display(),
            plan.format_version
        );
    }
    Ok(plan)
}
