//! `terrain state list|show|journal|rm|mv`: inspect and edit the state. rm and mv change
//! only terrain's records, never the objects, and hold the lock while they do.

use clap::{Args, Subcommand};

use super::{common, Exit, RunArgs, StackArgs};
use crate::addr::Address;
use crate::output::{self, value::redact};
use crate::state::journal::{Change, Record};
use crate::state::PendingOp;

#[derive(Subcommand, Debug)]
pub enum StateCommand {
    /// Lists the addresses in the state.
    List(Plain),
    /// Shows one resource as recorded: id, spec, outputs (secrets hidden).
    Show {
        address: Address,
        #[command(flatten)]
        stack: StackArgs,
    },
    /// Lists the journal's records not yet folded into the state file (left by an apply
    /// that was killed before its end): serial, change, address, pending operation.
    Journal(Plain),
    /// Forgets resources without touching the objects.
    Rm {
        #[arg(required = true)]
        addresses: Vec<Address>,
        #[command(flatten)]
        stack: StackArgs,
        #[command(flatten)]
        run: RunArgs,
    },
    /// Renames a resource in the state (after renaming it in the stack).
    Mv {
        from: Address,
        to: Address,
        #[command(flatten)]
        stack: StackArgs,
        #[command(flatten)]
        run: RunArgs,
    },
}

#[derive(Args, Debug)]
pub struct Plain {
    #[command(flatten)]
    stack: StackArgs,
}

pub async fn run(cmd: StateCommand) -> anyhow::Result<Exit> {
    let registry = common::registry();
    match cmd {
        StateCommand::List(Plain { stack: args }) => {
            let stack = common::load_stack(&args, &registry)?;
            let backend = common::backend(&stack, &args, "state").await?;
            let state = backend.load().await?.unwrap_or_default();
            backend.close().await;
            let text: String = state.resources.keys().map(|k| format!("{k}\n")).collect();
            output::print(&text);
        }
        StateCommand::Show {
            address,
            stack: args,
        } => {
            let stack = common::load_stack(&args, &registry)?;
            let backend = common::backend(&stack, &args, "state").await?;
            let state = backend.load().await?.unwrap_or_default();
            backend.close().await;
            let r = state
                .resources
                .get(&address.to_string())
                .ok_or_else(|| anyhow::anyhow!("{address} is not in the state"))?;
            let spec_secrets: Vec<String> = r
                .sensitive_paths
                .iter()
                .filter_map(|p| p.strip_prefix("spec.").map(str::to_string))
                .collect();
            let out_secrets: Vec<String> = r
                .sensitive_paths
                .iter()
                .filter_map(|p| p.strip_prefix("outputs.").map(str::to_string))
                .collect();
            let show = serde_json::json!({
                "address": address.to_string(),
                "kind": r.kind,
                "provider": r.provider,
                "id": r.id,
                "spec": redact(&r.spec, &spec_secrets, ""),
                "outputs": redact(&r.outputs, &out_secrets, ""),
                "dependencies": r.dependencies,
                "pending": r.pending.as_ref().map(|p| p.op),
            });
            output::print(&format!("{}\n", serde_json::to_string_pretty(&show)?));
        }
        StateCommand::Journal(Plain { stack: args }) => {
            let stack = common::load_stack(&args, &registry)?;
            let backend = common::backend(&stack, &args, "state journal").await?;
            let records = backend.journal().await?;
            output::print(&journal_lines(&backend.location(), &records));
            backend.close().await;
        }
        StateCommand::Rm {
            addresses,
            stack: args,
            run,
        } => {
            let stack = common::load_stack(&args, &registry)?;
            let backend = common::backend(&stack, &args, "state rm").await?;
            common::with_lock(&**backend, "state rm", run.lock_timeout, async {
                let mut state = backend.load().await?.unwrap_or_default();
                for a in &addresses {
                    if !state.resources.contains_key(&a.to_string()) {
                        anyhow::bail!("{a} is not in the state; nothing was removed");
                    }
                }
                for a in &addresses {
                    state.resources.remove(&a.to_string());
                }
                state.serial += 1;
                backend.save(&state).await?;
                let text: String = addresses
                    .iter()
                    .map(|a| {
                        format!(
                            "Removed {a} from the state; the object itself was left as it is.\n"
                        )
                    })
                    .collect();
                output::print(&text);
                Ok(())
            })
            .await?;
        }
        StateCommand::Mv {
            from,
            to,
            stack: args,
            run,
        } => {
            let stack = common::load_stack(&args, &registry)?;
            let backend = common::backend(&stack, &args, "state mv").await?;
            common::with_lock(&**backend, "state mv", run.lock_timeout, async {
                let mut state = backend.load().await?.unwrap_or_default();
                if from.kind != to.kind {
                    anyhow::bail!("cannot move {from} to {to}: a resource keeps its kind");
                }
                if state.resources.contains_key(&to.to_string()) {
                    anyhow::bail!("cannot move {from} to {to}: {to} is already in the state");
                }
                let r = state
                    .resources
                    .remove(&from.to_string())
                    .ok_or_else(|| anyhow::anyhow!("{from} is not in the state"))?;
                state.resources.insert(to.to_string(), r);
                // Whatever depended on the old address now depends on the new one.
                for other in state.resources.values_mut() {
                    for d in &mut other.dependencies {
                        if *d == from.to_string() {
                            *d = to.to_string();
                        }
                    }
                }
                state.serial += 1;
                backend.save(&state).await?;
                output::print(&format!("Moved {from} to {to}.\n"));
                Ok(())
            })
            .await?;
        }
    }
    Ok(Exit::Ok)
}

/// The journal as `terrain state journal` prints it: one line per record, no values
/// (specs and outputs may hold secrets; `state show` shows them redacted).
fn journal_lines(location: &str, records: &[Record]) -> String {
    if records.is_empty() {
        return format!(
            "The journal of {location} is empty: the state file holds the whole state.\n"
        );
    }
    let mut out = format!(
        "{} records in the journal of {location}, not yet folded into the state file (the next apply does):\n",
        records.len()
    );
    for r in records {
        let line = match &r.change {
            Change::Put { address, resource } => match &resource.pending {
                Some(p) => {
                    let op = match p.op {
                        PendingOp::Create => "create",
                        PendingOp::Update => "update",
                        PendingOp::Delete => "delete",
                    };
                    format!("put     {address} (pending {op} since {})", p.started_at)
                }
                None => match &resource.id {
                    Some(id) => format!("put     {address} = {id}"),
                    None => format!("put     {address}"),
                },
            },
            Change::Remove { address } => format!("remove  {address}"),
            Change::Outputs { outputs } => format!("outputs {} outputs", outputs.len()),
        };
        out.push_str(&format!("  serial {:>6}  {line}\n", r.serial));
    }
    out
}
