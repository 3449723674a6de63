//! `terrain import ADDR ID`: record an existing object in the state at ADDR, which the
//! stack must declare; the next plan shows how it differs from the stack.
//!
//! With `--write FILE`, the stack must not declare ADDR yet: the object is read, its
//! block written to FILE (a file of the stack, created or appended to, see
//! [`crate::stack::write`]), and then imported, so the next plan shows no changes.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use serde_json::Value;

use super::{common, Exit, RunArgs, StackArgs};
use crate::addr::Address;
use crate::engine::Quiet;
use crate::output;
use crate::stack::Stack;

/// The kinds `--write` can read from their id alone.
const WRITABLE: &[&str] = &[
    "gke_cluster",
    "gke_node_pool",
    "filestore_instance",
    "gcs_bucket",
    "eks_cluster",
    "eks_node_group",
    "s3_bucket",
];

#[derive(Args, Debug)]
pub struct ImportArgs {
    /// The address in the stack (`kind.name`).
    address: Address,
    /// The object's id as its provider knows it (a path, a name…).
    id: String,
    /// Writes the object's block to FILE (a .toml file of the stack, created if
    /// missing, appended to otherwise) before importing it; the stack must not
    /// declare ADDR yet.
    #[arg(long = "write", value_name = "FILE")]
    write: Option<PathBuf>,
    #[command(flatten)]
    stack: StackArgs,
    #[command(flatten)]
    run: RunArgs,
}

pub async fn run(args: ImportArgs) -> anyhow::Result<Exit> {
    let registry = common::registry();
    let mut stack = common::load_stack(&args.stack, &registry)?;
    let mut wrote = None;
    if let Some(file) = &args.write {
        let file = common::absolute(file);
        let block = write_block(&args, &file, stack, &registry).await?;
        // Load the stack again, as the first load did, from where terrain started.
        std::env::set_current_dir(common::start_dir())
            .context("return to the directory terrain was started in")?;
        stack = common::load_stack(&args.stack, &registry)?;
        if !stack.resources.contains_key(&args.address) {
            anyhow::bail!(
                "wrote {} to {} but the stack does not load it; is the file part of the stack?",
                args.address,
                file.display()
            );
        }
        wrote = Some((file, block));
    }
    let engine = common::engine(
        &args.stack,
        "terrain import",
        stack,
        registry,
        args.run.parallelism,
        std::sync::Arc::new(Quiet),
    )
    .await?;
    let backend = engine.backend.clone();
    let result = common::with_lock(&*backend, "import", args.run.lock_timeout, async {
        let mut state = engine.load_state().await?;
        let key = args.address.to_string();
        if let Some(existing) = state.resources.get(&key) {
            anyhow::bail!(
                "{key} is already in the state (id {}); `terrain state rm {key}` first to import another object",
                existing.id.as_deref().unwrap_or("pending")
            );
        }
        let r = engine.import(&args.address, &args.id).await?;
        let id = r.id.clone().unwrap_or_default();
        state.resources.insert(key.clone(), r);
        state.serial += 1;
        backend.save(&state).await?;
        match &wrote {
            None => output::print(&format!(
                "Imported {key} [id={id}]. Run `terrain plan` to see how it differs from the stack.\n"
            )),
            Some((file, _)) => output::print(&format!(
                "Wrote [{key}] to {} and imported {}. Run terrain plan: it shows no changes.\n",
                shown(file),
                args.id
            )),
        }
        Ok(Exit::Ok)
    })
    .await;
    engine.close().await;
    result
}

/// `--write`: reads the object at `args.id` and appends its block to `file`; answers
/// the variables the block needs values for.
async fn write_block(
    args: &ImportArgs,
    file: &Path,
    stack: Stack,
    registry: &terrain_providers::Registry,
) -> anyhow::Result<Vec<String>> {
    let address = &args.address;
    if !address.module().is_empty() || address.key().is_some() {
        anyhow::bail!(
            "--write takes an address of the stack's own (`kind.name`), not {address}; declare the block and import without --write"
        );
    }
    if let Some(rc) = stack.resources.get(address) {
        let at = stack
            .sources
            .files
            .get(rc.span.file)
            .map(|f| format!("{}:{}", f.path.display(), f.line_col(rc.span.start).0))
            .unwrap_or_else(|| "<unknown>".into());
        anyhow::bail!("{address} is already in the stack at {at}; import without --write");
    }
    let kind = registry
        .get(&address.kind)
        .with_context(|| format!("no resource kind `{}`", address.kind))?
        .clone();
    if !WRITABLE.contains(&kind.kind()) {
        if kind.provider() == "kubernetes" || kind.schema().field("cluster").is_some() {
            anyhow::bail!(
                "--write cannot read a {} without its cluster; declare the block and import without --write",
                kind.kind()
            );
        }
        anyhow::bail!(
            "--write cannot write a {} yet; declare the block and import without --write",
            kind.kind()
        );
    }
    if file.extension().and_then(|e| e.to_str()) != Some("toml") {
        anyhow::bail!("--write {}: the file must be a .toml file", shown(file));
    }
    let stack_path = common::absolute(&args.stack.stack);
    let in_stack = if stack_path.is_dir() {
        file.parent()
            .zip(stack_path.canonicalize().ok())
            .is_some_and(|(p, d)| p.canonicalize().is_ok_and(|p| p == d))
    } else {
        file.canonicalize()
            .ok()
            .zip(stack_path.canonicalize().ok())
            .is_some_and(|(a, b)| a == b)
    };
    if !in_stack {
        anyhow::bail!(
            "--write {}: the file is not part of the stack {}",
            shown(file),
            args.stack.stack.display()
        );
    }
    let engine = common::engine(
        &args.stack,
        "terrain import",
        stack,
        registry.clone(),
        args.run.parallelism,
        std::sync::Arc::new(Quiet),
    )
    .await?;
    let read = async {
        let ctx = engine.ctx(address, kind.provider())?;
        let obs = kind
            .read(&ctx, &args.id, &Value::Null)
            .await
            .with_context(|| format!("{address}: read {}", args.id))?;
        anyhow::Ok(obs)
    }
    .await;
    engine.close().await;
    let obs = read?.with_context(|| format!("no {} with id `{}` exists", kind.kind(), args.id))?;
    let block = crate::stack::write::block(
        &address.kind,
        &address.name,
        &args.id,
        kind.schema(),
        &obs.spec,
    );
    let mut text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e).with_context(|| format!("read {}", shown(file))),
    };
    if !text.trim().is_empty() {
        if !text.ends_with('\n') {
            text.push('\n');
        }
        text.push('\n');
    }
    text.push_str(&block.text);
    common::replace_file(file, &text).with_context(|| format!("write {}", shown(file)))?;
    for var in &block.variables {
        output::print(&format!(
            "{address} has a secret field: give variable {var} a value with --var {var}=… or TERRAIN_VAR_{var} (without one the import stops here: run `terrain import {address} {}` with it).\n",
            args.id
        ));
    }
    Ok(block.variables)
}

/// `path` as the user would write it: relative to where terrain started when inside it.
fn shown(path: &Path) -> String {
    path.strip_prefix(common::start_dir())
        .unwrap_or(path)
        .display()
        .to_string()
}
