//! The command line: argument definitions and dispatch, one file per subcommand.
//! `anyhow` lives here and nowhere else; exit codes are 0 (ok, `--help`, `--version`),
//! 1 (any error, command-line mistakes included) and 2 (plan has changes, with
//! `--detailed-exitcode`) and nothing else.

mod apply;
mod common;
mod cost;
mod fmt;
mod force_unlock;
mod graph;
mod import;
mod logs;
mod operator;
mod outputs;
mod plan;
mod policy;
mod render;
mod sandbox;
mod stack;
mod state;
mod status;
mod validate;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::error::ErrorKind;
use clap::{Args, Parser, Subcommand};

use crate::output;

/// terrain: provision ML batch infrastructure from TOML stacks.
#[derive(Parser, Debug)]
#[command(
    name = "terrain",
    version,
    about,
    long_about = None,
    propagate_version = true,
    after_help = "Try a stack with no cloud account (the sandbox emulates the clouds):\n  terrain plan -s stacks/gke-batch-ml --sandbox\n  terrain apply -s stacks/gke-batch-ml --sandbox\n  terrain destroy -s stacks/gke-batch-ml --sandbox\n\n`terrain <command> --help` describes each command."
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Options every command that reads a stack takes.
#[derive(Args, Debug, Clone)]
pub struct StackArgs {
    /// The stack: a .toml file, or a directory whose .toml files form one stack.
    #[arg(
        short = 's',
        long = "stack",
        env = "TERRAIN_STACK",
        default_value = ".",
        value_name = "PATH"
    )]
    pub stack: PathBuf,
    /// Sets a variable (repeatable); also TERRAIN_VAR_<name> in the environment.
    #[arg(long = "var", value_name = "NAME=VALUE", value_parser = parse_var)]
    pub vars: Vec<(String, String)>,
    /// Reads variable values from this TOML file of `name = value` lines (repeatable;
    /// later files win, --var wins over them).
    #[arg(long = "var-file", value_name = "FILE")]
    pub var_files: Vec<PathBuf>,
    /// The environment: its variables from `envs/NAME.toml` beside the stack, its own
    /// state (`state/NAME/…`, or the remote key with NAME in it), `${env}` in the stack.
    #[arg(long = "env", env = "TERRAIN_ENV", value_name = "NAME")]
    pub env: Option<String>,
    /// Uses this state file instead of the one the stack names.
    #[arg(long = "state", value_name = "FILE")]
    pub state: Option<PathBuf>,
    /// Never colour the output (also NO_COLOR).
    #[arg(long = "no-color", global = true)]
    pub no_color: bool,
    /// Runs against the local sandbox instead of the real clouds: no account or
    /// credentials needed. State goes to `state/sandbox/`, and the emulated cloud
    /// persists between runs.
    #[arg(long, env = "TERRAIN_SANDBOX", value_parser = clap::builder::BoolishValueParser::new(), num_args = 0, default_missing_value = "true", default_value = "false")]
    pub sandbox: bool,
    /// The sandbox's directory on `--sandbox` runs, in place of `sandbox/` beside the
    /// stack's state: where `terrain sandbox serve --dir DIR` keeps the one shared by
    /// several stacks (and the operator's).
    #[arg(
        long = "sandbox-dir",
        env = "TERRAIN_SANDBOX_DIR",
        value_name = "DIR",
        requires = "sandbox"
    )]
    pub sandbox_dir: Option<PathBuf>,
    /// Prices laid over the catalog terrain ships (`[[price]]` entries, as in the stack's
    /// `[pricing] file`, which this replaces): negotiated rates, or prices it lacks.
    #[arg(long = "prices", value_name = "FILE")]
    pub prices: Option<PathBuf>,
}

/// Options of commands that change state.
#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// How many resource operations may run at once.
    #[arg(long, default_value_t = 10, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub parallelism: u16,
    /// How long to wait for the state lock before giving up (e.g. 30s, 2m).
    #[arg(long = "lock-timeout", default_value = "0s", value_name = "DURATION", value_parser = parse_duration)]
    pub lock_timeout: Duration,
    /// Limits the run to these resources and what they need (repeatable).
    #[arg(long = "target", value_name = "ADDR")]
    pub targets: Vec<crate::addr::Address>,
    /// Reads the live objects (and checks the clouds' capacity) before planning;
    /// `--refresh=false` plans against the state as last recorded.
    #[arg(long, value_name = "BOOL", value_parser = clap::builder::BoolishValueParser::new(), num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value = "true")]
    pub refresh: bool,
    /// Holds the plan to the Rego policies under DIR too (repeatable; besides the
    /// stack's `[stack] policies`): a `deny` fails it, a `warn` is shown under it.
    #[arg(long = "policy", value_name = "DIR")]
    pub policies: Vec<PathBuf>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Checks a stack offline: syntax, kinds, fields, types, references, cycles.
    Validate(validate::ValidateArgs),
    /// Rewrites stack files into the canonical layout (comments kept); `--check` lists
    /// the files that are not formatted and exits 1 if any, `--diff` shows the changes.
    Fmt(fmt::FmtArgs),
    /// Shows what apply would do: refreshes state, diffs it against the stack.
    Plan(plan::PlanArgs),
    /// Makes live infrastructure match the stack (or applies a saved plan).
    Apply(apply::ApplyArgs),
    /// Destroys everything the stack manages, dependents first.
    Destroy(apply::DestroyArgs),
    /// Inspects or edits the state.
    #[command(subcommand)]
    State(state::StateCommand),
    /// Prints the stack's outputs from the state.
    Output(outputs::OutputArgs),
    /// Prints what the stack's objects cost per hour as last applied.
    Cost(cost::CostArgs),
    /// Brings an existing object under management at ADDR.
    Import(import::ImportArgs),
    /// Prints the dependency graph: Graphviz DOT, or drawn as SVG, or an HTML page with
    /// the plan's actions coloured on it.
    Graph(graph::GraphArgs),
    /// Releases a state lock left by a run that is no longer going.
    ForceUnlock(force_unlock::ForceUnlockArgs),
    /// Prints the plain objects a resource is made of (Kubernetes manifests) as YAML.
    Render(render::RenderArgs),
    /// Shows the live readiness of every resource (Jobs' completions, claims' binding…).
    Status(status::StatusArgs),
    /// Prints a resource's logs (a Job's pods); -f follows until it finishes.
    Logs(logs::LogsArgs),
    /// Runs the local sandbox for exploring with gcloud, kubectl and the aws CLI.
    #[command(subcommand)]
    Sandbox(sandbox::SandboxCommand),
    /// Tests Rego policies (`terrain policy test DIR`).
    #[command(subcommand)]
    Policy(policy::PolicyCommand),
    /// Runs the controller that reconciles Stack resources in a cluster (`--crd`
    /// prints their CRD).
    Operator(operator::OperatorArgs),
    /// Lists, shows, plans and approves the Stacks an operator reconciles.
    #[command(subcommand)]
    Stack(stack::StackCommand),
}

fn parse_var(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.trim().to_string(), v.to_string()))
        .filter(|(k, _)| !k.is_empty())
        .ok_or_else(|| format!("`{s}` is not NAME=VALUE"))
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    terrain_providers::local::duration::parse_duration(s)
        .ok_or_else(|| format!("`{s}` is not a duration; use e.g. 0s, 30s, 2m"))
}

/// An error already shown to the user (stack diagnostics): exit 1 without printing.
#[derive(Debug, thiserror::Error)]
#[error("reported")]
pub struct Reported;

/// What a command ended with, besides errors.
pub enum Exit {
    Ok,
    /// `--detailed-exitcode`: the plan has changes.
    Changes,
}

/// Parses arguments, runs the command, prints any error once, returns the exit code.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage(&e),
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            output::eprint(&format!("Error: start the async runtime: {e}\n"));
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(Exit::Ok) => ExitCode::SUCCESS,
        Ok(Exit::Changes) => ExitCode::from(2),
        Err(e) => {
            if e.downcast_ref::<Reported>().is_none() {
                let chain: Vec<String> = e.chain().map(ToString::to_string).collect();
                output::eprint(&format!("Error: {}\n", dedup_chain(&chain)));
            }
            ExitCode::from(1)
        }
    }
}

/// Prints what clap has to say, as clap would (help and version on stdout, mistakes on
/// stderr), and maps it to an exit code: clap's own 2 for a mistake would read as "the
/// plan has changes" to a script using `--detailed-exitcode`.
fn usage(e: &clap::Error) -> ExitCode {
    // A closed pipe (`terrain --help | head`) is not an error; nothing more to print.
    let _ = e.print();
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => ExitCode::SUCCESS,
        _ => ExitCode::from(1),
    }
}

/// Joins an error chain, leaving out causes whose text the previous message already
/// includes (thiserror messages often embed their source).
fn dedup_chain(chain: &[String]) -> String {
    let mut out: Vec<&str> = Vec::new();
    for c in chain {
        if out.last().is_some_and(|prev| prev.contains(c.as_str())) {
            continue;
        }
        out.push(c);
    }
    out.join(": ")
}

async fn run(cli: Cli) -> anyhow::Result<Exit> {
    match cli.command {
        Command::Validate(a) => validate::run(a),
        Command::Fmt(a) => fmt::run(a),
        Command::Plan(a) => plan::run(a).await,
        Command::Apply(a) => apply::run_apply(a).await,
        Command::Destroy(a) => apply::run_destroy(a).await,
        Command::State(c) => state::run(c).await,
        Command::Output(a) => outputs::run(a).await,
        Command::Cost(a) => cost::run(a).await,
        Command::Import(a) => import::run(a).await,
        Command::Graph(a) => graph::run(a).await,
        Command::ForceUnlock(a) => force_unlock::run(a).await,
        Command::Render(a) => render::run(a).await,
        Command::Status(a) => status::run(a).await,
        Command::Logs(a) => logs::run(a).await,
        Command::Sandbox(c) => sandbox::run(c).await,
        Command::Policy(c) => policy::run(c),
        Command::Operator(a) => operator::run(a).await,
        Command::Stack(c) => stack::run(c).await,
    }
}
