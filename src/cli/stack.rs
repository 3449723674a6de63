//! `terrain stack list|show|approve|plan`: the Stacks an operator reconciles, seen and
//! approved from a terminal as `kubectl` would, a pending plan shown as `terrain plan`
//! shows it (or as Markdown for a pull request).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};
use kube::api::{ListParams, Patch, PatchParams};
use kube::Api;
use serde_json::json;

use super::{common, Exit, StackArgs};
use crate::operator::controller::PLAN_REQUESTED;
use crate::operator::crd::Stack;
use crate::operator::digest::plan_file;
use crate::output::{self, Style};
use crate::plan::Plan;

#[derive(Subcommand, Debug)]
pub enum StackCommand {
    /// Lists the Stacks: ready or not, the pending plan's digest and counts, drift.
    List(ListArgs),
    /// Shows a Stack's status and its pending plan, as `terrain plan` shows a plan.
    Show(ShowArgs),
    /// Approves a Stack's pending plan by its digest: exactly that plan is applied.
    Approve(ApproveArgs),
    /// Asks the operator to plan a Stack now, waits for the plan and shows it.
    Plan(PlanArgs),
}

#[derive(Args, Debug, Clone)]
pub struct Target {
    /// The namespace (the kubeconfig context's by default).
    #[arg(short = 'n', long, value_name = "NAMESPACE")]
    namespace: Option<String>,
    /// The kubeconfig context (the current one by default).
    #[arg(long, value_name = "NAME")]
    context: Option<String>,
}

#[derive(Args, Debug)]
pub struct ListArgs {
    #[command(flatten)]
    target: Target,
    /// Lists the Stacks of every namespace.
    #[arg(short = 'A', long = "all-namespaces")]
    all: bool,
}

#[derive(Args, Debug, Clone)]
pub struct View {
    /// Shows the pending plan as Markdown, for a pull-request comment.
    #[arg(long)]
    markdown: bool,
    /// Never colour the output (also NO_COLOR).
    #[arg(long = "no-color")]
    no_color: bool,
    /// The state (and the plans beside it) is in the sandbox.
    #[arg(long, value_parser = clap::builder::BoolishValueParser::new(), num_args = 0, default_missing_value = "true", default_value = "false")]
    sandbox: bool,
    /// The sandbox's directory (that of `terrain sandbox serve --dir DIR`).
    #[arg(
        long = "sandbox-dir",
        default_value = "state/sandbox",
        value_name = "DIR"
    )]
    sandbox_dir: PathBuf,
}

#[derive(Args, Debug)]
pub struct ShowArgs {
    /// The Stack.
    name: String,
    #[command(flatten)]
    target: Target,
    #[command(flatten)]
    view: View,
}

#[derive(Args, Debug)]
pub struct ApproveArgs {
    /// The Stack.
    name: String,
    /// The digest approved (`sha256:…`); it must be the pending plan's. Without it, the
    /// pending plan as it is now.
    digest: Option<String>,
    #[command(flatten)]
    target: Target,
}

#[derive(Args, Debug)]
pub struct PlanArgs {
    /// The Stack.
    name: String,
    #[command(flatten)]
    target: Target,
    #[command(flatten)]
    view: View,
    /// How long to wait for the operator's plan.
    #[arg(long, default_value = "10m", value_name = "DURATION", value_parser = super::parse_duration)]
    timeout: Duration,
}

pub async fn run(command: StackCommand) -> anyhow::Result<Exit> {
    match command {
        StackCommand::List(a) => list(a).await,
        StackCommand::Show(a) => {
            let (api, _) = api(&a.target).await?;
            let stack = get(&api, &a.name).await?;
            show(&stack, &a.view).await
        }
        StackCommand::Approve(a) => approve(a).await,
        StackCommand::Plan(a) => plan(a).await,
    }
}

async fn api(target: &Target) -> anyhow::Result<(Api<Stack>, String)> {
    let client = common::kube_client(target.context.as_deref()).await?;
    let ns = target
        .namespace
        .clone()
        .unwrap_or_else(|| client.default_namespace().to_string());
    Ok((Api::namespaced(client, &ns), ns))
}

async fn get(api: &Api<Stack>, name: &str) -> anyhow::Result<Stack> {
    api.get_opt(name)
        .await
        .with_context(|| format!("get stacks.terrain.dev/{name}"))?
        .with_context(|| {
            format!("no Stack {name} in this namespace; `terrain stack list -A` lists them all")
        })
}

async fn list(args: ListArgs) -> anyhow::Result<Exit> {
    let client = common::kube_client(args.target.context.as_deref()).await?;
    let api: Api<Stack> = if args.all {
        Api::all(client)
    } else {
        let ns = args
            .target
            .namespace
            .clone()
            .unwrap_or_else(|| client.default_namespace().to_string());
        Api::namespaced(client, &ns)
    };
    let stacks = api
        .list(&ListParams::default())
        .await
        .context("list stacks.terrain.dev")?;
    if stacks.items.is_empty() {
        output::print("No Stacks found.\n");
    } else {
        output::print(&output::operator::table(&stacks.items, args.all));
    }
    Ok(Exit::Ok)
}

/// Prints `stack` and its pending plan, read from beside its state.
async fn show(stack: &Stack, view: &View) -> anyhow::Result<Exit> {
    let pending = stack.status.as_ref().and_then(|s| s.pending_plan.clone());
    let plan = match &pending {
        Some(p) => Some(stored_plan(&p.state, &p.digest, view).await?),
        None => None,
    };
    match (&plan, view.markdown) {
        (Some(plan), true) => output::print(&output::markdown::render(plan, &[])),
        (Some(plan), false) => {
            output::print(&output::operator::describe(stack));
            output::print("\n");
            output::print(&output::plan::render(plan, Style::detect(view.no_color)));
        }
        (None, _) => output::print(&output::operator::describe(stack)),
    }
    Ok(Exit::Ok)
}

/// The plan `digest` stored beside the state at `state`.
async fn stored_plan(state: &str, digest: &str, view: &View) -> anyhow::Result<Plan> {
    let args = StackArgs {
        stack: PathBuf::from("."),
        vars: Vec::new(),
        var_files: Vec::new(),
        env: None,
        state: None,
        no_color: view.no_color,
        sandbox: view.sandbox,
        sandbox_dir: None,
        prices: None,
    };
    let sandbox = if view.sandbox {
        Some(common::attach_sandbox(&view.sandbox_dir, "terrain stack show").await?)
    } else {
        None
    };
    let backend = common::backend_at(state, &args, sandbox.as_ref())?;
    let bytes = backend.get_beside(&plan_file(digest)).await;
    if let Some(s) = sandbox {
        s.close().await;
    }
    let bytes = bytes?.with_context(|| {
        format!("plan {digest} is not beside the state {state} (was it removed?)")
    })?;
    let plan: Plan = serde_json::from_slice(&bytes)
        .with_context(|| format!("plan {digest} beside {state} is not a terrain plan"))?;
    Ok(plan)
}

async fn approve(args: ApproveArgs) -> anyhow::Result<Exit> {
    let (api, ns) = api(&args.target).await?;
    let stack = get(&api, &args.name).await?;
    let pending = stack
        .status
        .as_ref()
        .and_then(|s| s.pending_plan.clone())
        .with_context(|| {
            format!(
                "Stack {ns}/{}: no plan is pending; nothing was approved",
                args.name
            )
        })?;
    if let Some(given) = &args.digest {
        if *given != pending.digest {
            anyhow::bail!(
                "Stack {ns}/{}: the pending plan is {}, not {given}; nothing was approved. Review it with `terrain stack show {}`",
                args.name,
                pending.digest,
                args.name
            );
        }
    }
    let patch = json!({"spec": {"approval": {"approvedPlan": pending.digest}}});
    api.patch(&args.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .with_context(|| format!("patch stacks.terrain.dev/{}", args.name))?;
    output::print(&format!(
        "Approved plan {} of Stack {ns}/{} ({} to add, {} to change, {} to replace, {} to destroy).\nThe operator applies it now, as long as a new plan has exactly this digest.\n",
        pending.digest, args.name, pending.add, pending.change, pending.replace, pending.destroy
    ));
    Ok(Exit::Ok)
}

async fn plan(args: PlanArgs) -> anyhow::Result<Exit> {
    let (api, ns) = api(&args.target).await?;
    let asked = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Nanos, true);
    let patch = json!({"metadata": {"annotations": {PLAN_REQUESTED: asked}}});
    api.patch(&args.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .with_context(|| format!("patch stacks.terrain.dev/{}", args.name))?;
    let deadline = tokio::time::Instant::now() + args.timeout;
    loop {
        let stack = get(&api, &args.name).await?;
        let answered = stack
            .status
            .as_ref()
            .and_then(|s| s.plan_request.as_deref())
            == Some(asked.as_str());
        if answered {
            return show(&stack, &args.view).await;
        }
        if tokio::time::Instant::now() >= deadline {
            anyhow::bail!(
                "Stack {ns}/{}: the operator made no plan within {:?}; is it running? (`kubectl -n terrain-system logs deploy/terrain-operator`)",
                args.name,
                args.timeout
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
