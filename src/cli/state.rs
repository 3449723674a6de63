//! `terrain state list|show|journal|pull|push|migrate|rm|mv`: inspect, copy, move and
//! edit the state. None of them touches the objects; those that write hold the lock
//! (migrate holds both), and pull writes a private file rather than printing secrets.

use clap::{Args, Subcommand};
use terrain_providers::Registry;

use super::{common, Exit, RunArgs, StackArgs};
use crate::addr::Address;
use crate::output::{self, value::mark};
use crate::state::journal::{Change, Record};
use crate::state::PendingOp;

#[derive(Subcommand, Debug)]
pub enum StateCommand {
    /// Lists the addresses in the state.
    List(Plain),
    /// Shows one resource as recorded, as JSON: id, spec, outputs (a secret is null,
    /// marked `true` in `spec_sensitive` / `outputs_sensitive`).
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
    /// Writes the whole state to FILE (mode 0600: it holds secrets), as a backup or to
    /// inspect it; nothing is printed of it.
    Pull {
        file: std::path::PathBuf,
        #[command(flatten)]
        stack: StackArgs,
    },
    /// Replaces the stored state with FILE, under the lock: refused when FILE is of
    /// another lineage or older than the stored state, unless --force.
    Push {
        file: std::path::PathBuf,
        /// Pushes even a state of another lineage or an older serial.
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        stack: StackArgs,
        #[command(flatten)]
        run: RunArgs,
    },
    /// Moves the state from where it was (FROM: a local path, s3://BUCKET/KEY or
    /// gs://BUCKET/PREFIX/NAME.json) to where the stack now keeps it, holding both
    /// locks; refused when the target holds a state of another lineage. FROM is left as
    /// it was.
    Migrate {
        #[arg(long = "from", value_name = "LOCATION")]
        from: String,
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
        StateCommand::List(Plain { stack: args }) => list(&args, &registry).await?,
        StateCommand::Show {
            address,
            stack: args,
        } => show(&address, &args, &registry).await?,
        StateCommand::Journal(Plain { stack: args }) => journal(&args, &registry).await?,
        StateCommand::Rm {
            addresses,
            stack: args,
            run,
        } => rm(&addresses, &args, &run, &registry).await?,
        StateCommand::Pull { file, stack: args } => pull(&file, &args, &registry).await?,
        StateCommand::Push {
            file,
            force,
            stack: args,
            run,
        } => push(&file, force, &args, &run, &registry).await?,
        StateCommand::Migrate {
            from,
            stack: args,
            run,
        } => migrate(&from, &args, &run, &registry).await?,
        StateCommand::Mv {
            from,
            to,
            stack: args,
            run,
        } => mv(&from, &to, &args, &run, &registry).await?,
    }
    Ok(Exit::Ok)
}

/// `state list`: prints the addresses in the state, one a line.
async fn list(args: &StackArgs, registry: &Registry) -> anyhow::Result<()> {
    let stack = common::load_stack(args, registry)?;
    let backend = common::backend(&stack, args, "state").await?;
    let state = backend.load().await?.unwrap_or_default();
    backend.close().await;
    let text: String = state.resources.keys().map(|k| format!("{k}\n")).collect();
    output::print(&text);
    Ok(())
}

/// `state show`: prints the resource at `address` as recorded, as JSON, its secrets
/// nulls.
async fn show(address: &Address, args: &StackArgs, registry: &Registry) -> anyhow::Result<()> {
    let stack = common::load_stack(args, registry)?;
    let backend = common::backend(&stack, args, "state").await?;
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
    // Secrets are nulls, with trees of where they were (as `plan --json`'s
    // `before_sensitive`).
    let spec = mark(&r.spec, &spec_secrets);
    let outputs = mark(&r.outputs, &out_secrets);
    let show = serde_json::json!({
        "address": address.to_string(),
        "kind": r.kind,
        "provider": r.provider,
        "id": r.id,
        "spec": spec.value,
        "spec_sensitive": spec.sensitive,
        "outputs": outputs.value,
        "outputs_sensitive": outputs.sensitive,
        "dependencies": r.dependencies,
        "pending": r.pending.as_ref().map(|p| p.op),
    });
    output::print(&format!("{}\n", serde_json::to_string_pretty(&show)?));
    Ok(())
}

/// `state journal`: prints the journal's records not yet folded into the state file.
async fn journal(args: &StackArgs, registry: &Registry) -> anyhow::Result<()> {
    let stack = common::load_stack(args, registry)?;
    let backend = common::backend(&stack, args, "state journal").await?;
    let records = backend.journal().await?;
    output::print(&journal_lines(&backend.location(), &records));
    backend.close().await;
    Ok(())
}

/// `state rm`: forgets the resources at `addresses`, under the lock; none is forgotten
/// when one is not in the state.
async fn rm(
    addresses: &[Address],
    args: &StackArgs,
    run: &RunArgs,
    registry: &Registry,
) -> anyhow::Result<()> {
    let stack = common::load_stack(args, registry)?;
    let backend = common::backend(&stack, args, "state rm").await?;
    common::with_lock(&**backend, "state rm", run.lock_timeout, async {
        let mut state = backend.load().await?.unwrap_or_default();
        for a in addresses {
            if !state.resources.contains_key(&a.to_string()) {
                anyhow::bail!("{a} is not in the state; nothing was removed");
            }
        }
        for a in addresses {
            state.resources.remove(&a.to_string());
        }
        state.serial += 1;
        backend.save(&state).await?;
        let text: String = addresses
            .iter()
            .map(|a| format!("Removed {a} from the state; the object itself was left as it is.\n"))
            .collect();
        output::print(&text);
        Ok(())
    })
    .await
}

/// `state pull`: writes the whole state to `file`, readable by its owner alone.
async fn pull(file: &std::path::Path, args: &StackArgs, registry: &Registry) -> anyhow::Result<()> {
    let stack = common::load_stack(args, registry)?;
    let backend = common::backend(&stack, args, "state pull").await?;
    let state = backend.load().await?;
    let location = backend.location();
    backend.close().await;
    let state = state.ok_or_else(|| anyhow::anyhow!("{location} holds no state yet"))?;
    write_private(&common::absolute(file), &state)?;
    output::print(&format!(
        "Wrote the state of {location} (serial {}, {} resources) to {}.\n",
        state.serial,
        state.resources.len(),
        file.display()
    ));
    Ok(())
}

/// `state push`: replaces the stored state with `file`, under the lock; refused (unless
/// `force`) when `file` is of another lineage or older than the stored state.
async fn push(
    file: &std::path::Path,
    force: bool,
    args: &StackArgs,
    run: &RunArgs,
    registry: &Registry,
) -> anyhow::Result<()> {
    let stack = common::load_stack(args, registry)?;
    let pushed = read_state_file(&common::absolute(file))?;
    let backend = common::backend(&stack, args, "state push").await?;
    let result = common::with_lock(&**backend, "state push", run.lock_timeout, async {
        let stored = backend.load().await?;
        let mut state = pushed.clone();
        if let Some(stored) = &stored {
            if let Some(why) = push_refusal(stored, &pushed) {
                if !force {
                    anyhow::bail!(
                        "{}: {why}; nothing was pushed (--force pushes anyway)",
                        backend.location()
                    );
                }
                // Forced over a newer or foreign state: it must still read as
                // newer than what it replaces.
                state.serial = stored.serial + 1;
            }
        }
        backend.save(&state).await?;
        output::print(&format!(
            "Pushed {} (serial {}, {} resources) to {}.\n",
            file.display(),
            state.serial,
            state.resources.len(),
            backend.location()
        ));
        Ok(())
    })
    .await;
    backend.close().await;
    result
}

/// `state migrate`: moves the state at `from` to the stack's backend.
async fn migrate(
    from: &str,
    args: &StackArgs,
    run: &RunArgs,
    registry: &Registry,
) -> anyhow::Result<()> {
    let stack = common::load_stack(args, registry)?;
    let target = common::backend_with_sandbox(&stack, args, "state migrate").await?;
    let result = migrate_locked(&target, from, args, run).await;
    target.close().await;
    result
}

/// `state mv`: renames the resource `from` to `to` in the state, under the lock, and
/// what depended on it with it.
async fn mv(
    from: &Address,
    to: &Address,
    args: &StackArgs,
    run: &RunArgs,
    registry: &Registry,
) -> anyhow::Result<()> {
    let stack = common::load_stack(args, registry)?;
    let backend = common::backend(&stack, args, "state mv").await?;
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
    .await
}

/// Moves the state at `from` to `target` (the stack's backend), holding both locks.
async fn migrate_locked(
    target: &common::StateSession,
    from: &str,
    args: &StackArgs,
    run: &RunArgs,
) -> anyhow::Result<()> {
    let source = target.other(from, args)?;
    if source.location() == target.location() {
        anyhow::bail!("{from} is where the stack keeps its state already; nothing to migrate");
    }
    common::with_lock(&*source, "state migrate", run.lock_timeout, async {
        common::with_lock(&***target, "state migrate", run.lock_timeout, async {
            let state = source
                .load()
                .await?
                .ok_or_else(|| anyhow::anyhow!("{} holds no state; nothing to migrate", source.location()))?;
            match target.load().await? {
                Some(there) if there.lineage != state.lineage => anyhow::bail!(
                    "{} already holds another state (lineage {}, serial {}), not the one at {} (lineage {}); nothing was migrated. Move it away first, or push over it with `terrain state push --force`",
                    target.location(),
                    there.lineage,
                    there.serial,
                    source.location(),
                    state.lineage
                ),
                Some(there) if there.serial >= state.serial => {
                    output::print(&format!(
                        "{} already holds this state (serial {}); nothing to migrate.\n",
                        target.location(),
                        there.serial
                    ));
                    return Ok(());
                }
                _ => {}
            }
            target.save(&state).await?;
            output::print(&format!(
                "Migrated the state (lineage {}, serial {}, {} resources) from {} to {}; {} was left as it was.\n",
                state.lineage,
                state.serial,
                state.resources.len(),
                source.location(),
                target.location(),
                source.location()
            ));
            Ok(())
        })
        .await
    })
    .await
}

/// Why pushing `pushed` over `stored` is refused without --force, if it is.
fn push_refusal(stored: &crate::state::State, pushed: &crate::state::State) -> Option<String> {
    if stored.lineage != pushed.lineage {
        return Some(format!(
            "the file is of lineage {}, the stored state of lineage {}",
            pushed.lineage, stored.lineage
        ));
    }
    if pushed.serial < stored.serial {
        return Some(format!(
            "the file has serial {}, older than the stored state's {}",
            pushed.serial, stored.serial
        ));
    }
    if pushed.serial == stored.serial && pushed != stored {
        return Some(format!(
            "the file and the stored state both have serial {} but differ",
            pushed.serial
        ));
    }
    None
}

fn read_state_file(path: &std::path::Path) -> anyhow::Result<crate::state::State> {
    let bytes = std::fs::read(path).map_err(|e| anyhow::anyhow!("read {}: {e}", path.display()))?;
    Ok(crate::state::decode(&bytes, &path.display().to_string())?)
}

/// Writes `state` to `path` readable by its owner only.
fn write_private(path: &std::path::Path, state: &crate::state::State) -> anyhow::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut bytes = serde_json::to_vec_pretty(state)?;
    bytes.push(b'\n');
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| anyhow::anyhow!("write {}: {e}", path.display()))?;
    // A file that existed keeps its mode through open: make it private too.
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    f.write_all(&bytes)
        .and_then(|()| f.sync_all())
        .map_err(|e| anyhow::anyhow!("write {}: {e}", path.display()))?;
    Ok(())
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
