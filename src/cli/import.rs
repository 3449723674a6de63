//! `terrain import ADDR ID`: record an existing object in the state at ADDR, which the
//! stack must declare; the next plan shows how it differs from the stack.
//!
//! With `--write FILE`, the stack must not declare ADDR yet: the object is read, its
//! block written to FILE (a file of the stack, created or appended to, see
//! [`crate::stack::write`]), and then imported, so the next plan shows no changes. A
//! Kubernetes object is adopted as a `kubernetes_manifest` on the cluster `--cluster`
//! names, its YAML in `manifests/` beside FILE.
//!
//! With `--all-in-cluster CLUSTER_ADDR`, the objects of `--namespace` that terrain does
//! not manage are listed; those picked with `--include kind/name` are adopted as above,
//! one block each, and imported under one lock.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use serde_json::Value;
use terrain_providers::kubernetes::adopt::{self, Found};
use terrain_providers::kubernetes::ObjectRef;
use terrain_providers::{Kind, Writes};

use super::{common, Exit, RunArgs, StackArgs};
use crate::addr::Address;
use crate::engine::{Engine, Quiet};
use crate::output;
use crate::stack::Stack;
use common::Session;

/// The kind Kubernetes objects built by hand are adopted as (its kind says so:
/// `Writes::Manifest`).
const MANIFEST: &str = <terrain_providers::kubernetes::manifest::Manifest as Kind>::KIND;

/// Where adopted objects' YAML goes, beside the file written.
const MANIFEST_DIR: &str = "manifests";

#[derive(Args, Debug)]
pub struct ImportArgs {
    /// The address in the stack (`kind.name`).
    #[arg(required_unless_present = "all_in_cluster")]
    address: Option<Address>,
    /// The object's id as its provider knows it (a path, a name,
    /// APIVERSION/KIND/NAMESPACE/NAME…).
    #[arg(required_unless_present = "all_in_cluster")]
    id: Option<String>,
    /// Writes the object's block to FILE (a .toml file of the stack, created if
    /// missing, appended to otherwise) before importing it; the stack must not
    /// declare ADDR yet.
    #[arg(long = "write", value_name = "FILE")]
    write: Option<PathBuf>,
    /// With --write and a kubernetes_manifest: the cluster the object is on, an address
    /// of the stack whose `kubernetes` output connects to it (gke_cluster.main).
    #[arg(long, value_name = "CLUSTER_ADDR", conflicts_with = "all_in_cluster")]
    cluster: Option<Address>,
    /// Lists the objects of --namespace on CLUSTER_ADDR that terrain does not manage
    /// (Jobs, PersistentVolumeClaims and their volumes, Services, Pods, Deployments,
    /// StatefulSets); with --include and --write, adopts the ones picked.
    #[arg(long = "all-in-cluster", value_name = "CLUSTER_ADDR", conflicts_with_all = ["address", "id"])]
    all_in_cluster: Option<Address>,
    /// The namespace --all-in-cluster looks in.
    #[arg(
        long,
        value_name = "NS",
        default_value = "default",
        requires = "all_in_cluster"
    )]
    namespace: String,
    /// An object --all-in-cluster adopts, as listed (`job/workload`,
    /// `pvc/fileserver-claim`); repeatable.
    #[arg(long = "include", value_name = "KIND/NAME", requires_all = ["all_in_cluster", "write"])]
    include: Vec<String>,
    #[command(flatten)]
    stack: StackArgs,
    #[command(flatten)]
    run: RunArgs,
}

pub async fn run(args: ImportArgs) -> anyhow::Result<Exit> {
    let registry = common::registry();
    let stack = common::load_stack(&args.stack, &registry)?;
    let (Some(address), Some(id)) = (&args.address, &args.id) else {
        return match &args.all_in_cluster {
            Some(cluster) => adopt_all(&args, cluster, stack, registry).await,
            None => anyhow::bail!("give ADDR and ID, or --all-in-cluster CLUSTER_ADDR"),
        };
    };
    let Some(file) = &args.write else {
        let done = import(&args, stack, registry, &[(address.clone(), id.clone())]).await?;
        output::print(&format!(
            "Imported {address} [id={}]. Run `terrain plan` to see how it differs from the stack.\n",
            done.first().map(String::as_str).unwrap_or_default()
        ));
        return Ok(Exit::Ok);
    };
    let file = common::absolute(file);
    refuse_declared(&stack, address)?;
    check_file(&args, &file)?;
    let kind = registry
        .get(&address.kind)
        .with_context(|| format!("no resource kind `{}`", address.kind))?
        .clone();
    // The kind says how its block is written.
    match kind.writes() {
        Writes::Manifest => {
            let cluster = args.cluster.as_ref().with_context(|| {
            format!("--write {address}: name the cluster the object is on with --cluster CLUSTER_ADDR (e.g. gke_cluster.main)")
        })?;
            let target = ObjectRef::parse(id).with_context(|| {
            format!("{address}: `{id}` is not an object id; give APIVERSION/KIND/NAMESPACE/NAME (v1/Service/default/redis-leader, v1/PersistentVolume//fileserver)")
        })?;
            let engine = engine(&args, stack, &registry).await?;
            let found = async {
                let state = engine.load_state().await?;
                let (ctx, connection) = on_cluster(&engine, cluster, &state)?;
                adopt::fetch(&ctx, &connection, &target)
                    .await
                    .with_context(|| format!("{address}: kubernetes get {}", target.describe()))?
                    .with_context(|| format!("no {} exists", target.describe()))
            }
            .await;
            engine.close().await;
            let found = found?;
            write_manifest(&file, &address.name, cluster, &found)?;
        }
        Writes::FromId => {
            if args.cluster.is_some() {
                anyhow::bail!(
                    "--cluster is for Kubernetes objects; a {} is not on a cluster",
                    kind.kind()
                );
            }
            write_cloud_block(&args, address, id, &file, stack, &registry, &*kind).await?;
        }
        Writes::AsManifest => {
            anyhow::bail!(
            "--write adopts a Kubernetes object as a {MANIFEST} (a {} is rendered by terrain from its fields); run `terrain import {MANIFEST}.{} {id} --write {} --cluster CLUSTER_ADDR`",
            kind.kind(),
            address.name,
            shown(&file)
        );
        }
        Writes::No => {
            anyhow::bail!(
                "--write cannot write a {} yet; declare the block and import without --write",
                kind.kind()
            );
        }
    }
    let stack = reload(&args, &registry, &[address])?;
    import(&args, stack, registry, &[(address.clone(), id.clone())]).await?;
    output::print(&format!(
        "Wrote [{address}] to {} and imported {id}. Run terrain plan: it shows no changes.\n",
        shown(&file),
    ));
    Ok(Exit::Ok)
}

/// `--all-in-cluster`: lists what could be adopted, or adopts what `--include` picks.
async fn adopt_all(
    args: &ImportArgs,
    cluster: &Address,
    stack: Stack,
    registry: terrain_providers::Registry,
) -> anyhow::Result<Exit> {
    if let Some(file) = &args.write {
        check_file(args, &common::absolute(file))?;
    }
    let engine = engine(args, stack.clone(), &registry).await?;
    let found = async {
        let state = engine.load_state().await?;
        let (ctx, connection) = on_cluster(&engine, cluster, &state)?;
        let found = adopt::discover(&ctx, &connection, &args.namespace)
            .await
            .with_context(|| {
                format!(
                    "{cluster}: list the objects of namespace {}",
                    args.namespace
                )
            })?;
        // Objects imported earlier carry no marks until terrain applies them: the
        // state's ids say they are adopted already.
        let known: std::collections::BTreeSet<&str> = state
            .resources
            .values()
            .filter_map(|r| r.id.as_deref())
            .flat_map(|id| id.split(','))
            .collect();
        anyhow::Ok(
            found
                .into_iter()
                .filter(|f| !known.contains(f.target.to_string().as_str()))
                .collect::<Vec<_>>(),
        )
    }
    .await;
    engine.close().await;
    let found = found?;
    if args.include.is_empty() {
        output::print(&listing(cluster, &args.namespace, &found));
        return Ok(Exit::Ok);
    }
    let Some(file) = &args.write else {
        anyhow::bail!("--include needs --write FILE: the file the blocks go to");
    };
    let file = common::absolute(file);
    let picked = picked(&args.include, &found, cluster, &args.namespace)?;
    let mut imports = Vec::new();
    for f in &picked {
        let address = Address::new(MANIFEST, block_name(f));
        refuse_declared(&stack, &address)?;
        imports.push((address, f.target.to_string()));
    }
    for (f, (address, _)) in picked.iter().zip(&imports) {
        write_manifest(&file, &address.name, cluster, f)?;
    }
    let addresses: Vec<&Address> = imports.iter().map(|(a, _)| a).collect();
    let stack = reload(args, &registry, &addresses)?;
    import(args, stack, registry, &imports).await?;
    let names: Vec<String> = imports.iter().map(|(a, _)| a.to_string()).collect();
    output::print(&format!(
        "Wrote {} to {} (objects in {MANIFEST_DIR}/) and imported them. Run terrain plan: it shows no changes.\n",
        names.join(", "),
        shown(&file),
    ));
    Ok(Exit::Ok)
}

/// What `--all-in-cluster` found, and how to adopt it.
fn listing(cluster: &Address, namespace: &str, found: &[Found]) -> String {
    if found.is_empty() {
        return format!(
            "Nothing to adopt in namespace {namespace} on {cluster}: every object there is in the state, or made by terrain or a controller.\n"
        );
    }
    let width = found.iter().map(|f| f.pick().len()).max().unwrap_or(0);
    let mut out = format!(
        "Not managed by terrain in namespace {namespace} on {cluster} ({}):\n",
        found.len()
    );
    for f in found {
        out.push_str(&format!(
            "  {:width$}  {}\n",
            f.pick(),
            Address::new(MANIFEST, block_name(f))
        ));
    }
    let example: Vec<String> = found
        .iter()
        .map(|f| format!("--include {}", f.pick()))
        .collect();
    out.push_str(&format!(
        "Adopt them with: terrain import --all-in-cluster {cluster} --namespace {namespace} --write FILE {}\n",
        example.join(" ")
    ));
    out
}

/// The objects `include` names, in the order found; fails naming a pick that matches
/// nothing found, with what was.
fn picked(
    include: &[String],
    found: &[Found],
    cluster: &Address,
    namespace: &str,
) -> anyhow::Result<Vec<Found>> {
    let mut out: Vec<Found> = Vec::new();
    for pick in include {
        let (kind, name) = pick
            .split_once('/')
            .with_context(|| format!("--include {pick}: write KIND/NAME, e.g. job/workload"))?;
        let lower = adopt::kind_named(kind).with_context(|| {
            let kinds: Vec<&str> = adopt::KINDS.iter().map(|k| k.2).collect();
            format!(
                "--include {pick}: `{kind}` is not a kind that is adopted ({})",
                kinds.join(", ")
            )
        })?;
        let wanted = format!("{lower}/{name}");
        let hit = found.iter().find(|f| f.pick() == wanted).with_context(|| {
            let all: Vec<String> = found.iter().map(Found::pick).collect();
            format!(
                "--include {pick}: no {wanted} without terrain's marks in namespace {namespace} on {cluster}; found: {}",
                if all.is_empty() { "nothing".into() } else { all.join(", ") }
            )
        })?;
        if !out.iter().any(|f| f.target == hit.target) {
            out.push(hit.clone());
        }
    }
    out.sort_by_key(|f| found.iter().position(|g| g.target == f.target));
    Ok(out)
}

/// The name of the block adopting `found`: `job_workload`, `pvc_fileserver_claim`.
fn block_name(found: &Found) -> String {
    let kind = match found.target.kind.as_str() {
        "PersistentVolume" => "pv".to_string(),
        "PersistentVolumeClaim" => "pvc".to_string(),
        other => adopt::lower_kind(other),
    };
    let name: String = found
        .target
        .name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    format!("{kind}_{name}")
}

/// The cluster `cluster` names, as a connection (its `kubernetes` output in `state`),
/// with the context to call it in.
fn on_cluster(
    engine: &Engine,
    cluster: &Address,
    state: &crate::state::State,
) -> anyhow::Result<(terrain_providers::Ctx, Value)> {
    let Some(entry) = state.resources.get(&cluster.to_string()) else {
        anyhow::bail!(
            "{cluster} is not in the state: apply it first (the objects are read from the live cluster)"
        );
    };
    let connection = entry.outputs["kubernetes"].clone();
    if connection.is_null() {
        anyhow::bail!(
            "{cluster} has no `kubernetes` output: name a cluster (gke_cluster.NAME, eks_cluster.NAME)"
        );
    }
    let ctx = engine.ctx(cluster, "kubernetes")?;
    Ok((ctx, connection))
}

/// Writes `found`'s YAML to `manifests/` beside `file` and appends its block to `file`.
fn write_manifest(file: &Path, name: &str, cluster: &Address, found: &Found) -> anyhow::Result<()> {
    let relative = format!(
        "{MANIFEST_DIR}/{}-{}.yaml",
        adopt::lower_kind(&found.target.kind),
        found.target.name
    );
    let dir = file.parent().unwrap_or(Path::new("."));
    let yaml_path = dir.join(&relative);
    let yaml = adopt::to_yaml(&found.object)
        .with_context(|| format!("{}: write it as YAML", found.target.describe()))?;
    match std::fs::read_to_string(&yaml_path) {
        Ok(existing) if existing != yaml => anyhow::bail!(
            "{} exists and holds something else; move it away to adopt {}",
            shown(&yaml_path),
            found.target.describe()
        ),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dir.join(MANIFEST_DIR))
                .with_context(|| format!("create {}", shown(&dir.join(MANIFEST_DIR))))?;
            common::replace_file(&yaml_path, &yaml)
                .with_context(|| format!("write {}", shown(&yaml_path)))?;
        }
        Err(e) => return Err(e).with_context(|| format!("read {}", shown(&yaml_path))),
    }
    let block = crate::stack::write::manifest_block(
        name,
        &cluster.to_string(),
        &relative,
        &found.target.describe(),
    );
    append(file, &block.text)
}

/// `--write` of a cloud object: reads it by id and appends its block to `file`;
/// says which variables the block needs values for.
async fn write_cloud_block(
    args: &ImportArgs,
    address: &Address,
    id: &str,
    file: &Path,
    stack: Stack,
    registry: &terrain_providers::Registry,
    kind: &dyn terrain_providers::Resource,
) -> anyhow::Result<()> {
    let declared: Vec<Address> = stack.resources.keys().cloned().collect();
    let engine = engine(args, stack, registry).await?;
    let read = async {
        let ctx = engine.ctx(address, kind.provider())?;
        let obs = kind
            .read(&ctx, id, &Value::Null)
            .await
            .with_context(|| format!("{address}: read {id}"))?;
        anyhow::Ok((obs, engine.load_state().await?))
    }
    .await;
    engine.close().await;
    let (obs, state) = read?;
    let obs = obs.with_context(|| format!("no {} with id `{id}` exists", kind.kind()))?;
    let refer = |field: &str, value: &Value| reference(field, value, &state, &declared);
    let block = crate::stack::write::block(
        &address.kind,
        &address.name,
        id,
        kind.schema(),
        &obs.spec,
        &refer,
    );
    append(file, &block.text)?;
    for var in &block.variables {
        output::print(&format!(
            "{address} has a secret field: give variable {var} a value with --var {var}=… or TERRAIN_VAR_{var} (without one the import stops here: run `terrain import {address} {id}` with it).\n",
        ));
    }
    Ok(())
}

/// The reference to write for field `field` holding `value`, when the value is another
/// resource's of the stack (as the state has it): its id (a node pool's `cluster`), or
/// for a field naming a cluster (`cluster_name`), a cluster's name.
fn reference(
    field: &str,
    value: &Value,
    state: &crate::state::State,
    declared: &[Address],
) -> Option<String> {
    let text = value.as_str().filter(|t| !t.is_empty())?;
    let ours = |key: &str| declared.iter().any(|a| a.to_string() == key);
    // A field naming a cluster reads best as the cluster's name, even where its id is
    // the same text (an EKS cluster's).
    if field == "cluster" || field.ends_with("cluster_name") {
        let by_name = state.resources.iter().find(|(key, r)| {
            ours(key) && r.kind.ends_with("_cluster") && r.spec["name"].as_str() == Some(text)
        });
        if let Some((key, _)) = by_name {
            return Some(format!("${{{key}.name}}"));
        }
    }
    state
        .resources
        .iter()
        .find(|(key, r)| ours(key) && r.id.as_deref() == Some(text))
        .map(|(key, _)| format!("${{{key}.id}}"))
}

/// Imports each `(address, id)` into the state under one lock, saving once; answers
/// their ids.
async fn import(
    args: &ImportArgs,
    stack: Stack,
    registry: terrain_providers::Registry,
    imports: &[(Address, String)],
) -> anyhow::Result<Vec<String>> {
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
        for (address, _) in imports {
            let key = address.to_string();
            if let Some(existing) = state.resources.get(&key) {
                anyhow::bail!(
                    "{key} is already in the state (id {}); `terrain state rm {key}` first to import another object",
                    existing.id.as_deref().unwrap_or("pending")
                );
            }
        }
        let mut ids = Vec::new();
        for (address, id) in imports {
            let r = engine.import(address, id, &state).await?;
            ids.push(r.id.clone().unwrap_or_default());
            state.resources.insert(address.to_string(), r);
        }
        state.serial += 1;
        backend.save(&state).await?;
        Ok(ids)
    })
    .await;
    engine.close().await;
    result
}

/// An engine that only reads (its observer prints nothing).
async fn engine(
    args: &ImportArgs,
    stack: Stack,
    registry: &terrain_providers::Registry,
) -> anyhow::Result<Session> {
    common::engine(
        &args.stack,
        "terrain import",
        stack,
        registry.clone(),
        args.run.parallelism,
        std::sync::Arc::new(Quiet),
    )
    .await
}

/// Loads the stack again after blocks were written, as the first load did, from where
/// terrain started; fails when it does not declare `written`.
fn reload(
    args: &ImportArgs,
    registry: &terrain_providers::Registry,
    written: &[&Address],
) -> anyhow::Result<Stack> {
    std::env::set_current_dir(common::start_dir())
        .context("return to the directory terrain was started in")?;
    let stack = common::load_stack(&args.stack, registry)?;
    if let Some(missing) = written.iter().find(|a| !stack.resources.contains_key(a)) {
        anyhow::bail!(
            "wrote {missing} but the stack does not load it; is the file part of the stack?"
        );
    }
    Ok(stack)
}

/// Fails when the stack declares `address` already (naming where).
fn refuse_declared(stack: &Stack, address: &Address) -> anyhow::Result<()> {
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
    Ok(())
}

/// Fails unless `file` is a .toml file of the stack.
fn check_file(args: &ImportArgs, file: &Path) -> anyhow::Result<()> {
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
    Ok(())
}

/// Appends `block` to `file` (created if missing), a blank line after what it holds.
fn append(file: &Path, block: &str) -> anyhow::Result<()> {
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
    text.push_str(block);
    common::replace_file(file, &text).with_context(|| format!("write {}", shown(file)))
}

/// `path` as the user would write it: relative to where terrain started when inside it.
fn shown(path: &Path) -> String {
    path.strip_prefix(common::start_dir())
        .unwrap_or(path)
        .display()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn found(api_version: &str, kind: &str, ns: Option<&str>, name: &str) -> Found {
        Found {
            target: ObjectRef::new(api_version, kind, ns, name),
            object: json!({}),
        }
    }

    #[test]
    fn adopted_blocks_are_named_by_short_kind_and_name() {
        let pvc = found(
            "v1",
            "PersistentVolumeClaim",
            Some("default"),
            "fileserver-claim",
        );
        assert_eq!(block_name(&pvc), "pvc_fileserver_claim");
        let job = found("batch/v1", "Job", Some("default"), "workload");
        assert_eq!(block_name(&job), "job_workload");
        let pv = found("v1", "PersistentVolume", None, "fileserver");
        assert_eq!(block_name(&pv), "pv_fileserver");
    }

    #[test]
    fn a_pick_that_matches_nothing_names_what_was_found() {
        let all = vec![
            found("v1", "Pod", Some("default"), "redis-leader"),
            found("batch/v1", "Job", Some("default"), "workload"),
        ];
        let cluster = Address::new("gke_cluster", "main");
        let got = picked(
            &["job/workload".into(), "po/redis-leader".into()],
            &all,
            &cluster,
            "default",
        )
        .expect("both found");
        assert_eq!(
            got.iter().map(Found::pick).collect::<Vec<_>>(),
            ["pod/redis-leader", "job/workload"]
        );
        let e = picked(&["job/worklaod".into()], &all, &cluster, "default")
            .expect_err("no such job")
            .to_string();
        assert!(
            e.contains("no job/worklaod") && e.contains("found: pod/redis-leader, job/workload"),
            "{e}"
        );
        let e = picked(&["secret/x".into()], &all, &cluster, "default")
            .expect_err("not adopted")
            .to_string();
        assert!(e.contains("`secret` is not a kind that is adopted"), "{e}");
    }
}
