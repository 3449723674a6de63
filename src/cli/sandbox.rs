//! The sandbox as a product feature: `--sandbox` runs (plan, apply, destroy, status…)
//! against a local emulator of the clouds instead of real accounts, and the
//! `terrain sandbox` subcommands (`serve`, `list`, `reset`).
//!
//! Everything lives in one directory beside the stack's state, `state/sandbox/` by
//! default: the emulated cloud (`cloud.json` and its `cloud.json.data/`), the stacks'
//! sandbox state files (kept apart from real state so the two never mix), the access
//! token the emulated Google APIs accept, and, while `terrain sandbox serve` runs, its
//! address (`serve.json`) and a kubeconfig per cluster (`kube/`).
//!
//! A `--sandbox` run attaches to a running `serve` when there is one; otherwise it starts
//! the emulator in-process on the same files, so the emulated cloud persists between
//! runs either way. One process at a time owns the files (`cloud.lock`).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::net::TcpStream;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};
use serde_json::{json, Map, Value};
use terrain_sandbox::{Options, Sandbox, Timing};

use crate::output;

/// The variable that slows the emulator down (or speeds it up): base durations × scale.
pub const TIME_SCALE_VAR: &str = "TERRAIN_SANDBOX_TIME_SCALE";
/// Google APIs on in every sandbox project from the start (see `enabled_apis_from_env`).
pub const ENABLED_APIS_VAR: &str = "TERRAIN_SANDBOX_ENABLED_APIS";

/// The token the emulated Google APIs are called with (they check that one is sent,
/// not what it is, so it is no secret).
const ACCESS_TOKEN: &str = "terrain-sandbox-token";

/// The key id AWS requests are signed with, for clients such as the aws CLI.
const AWS_SECRET: &str = "terrain-sandbox-secret";

/// `state/sandbox` for `state/<stack>.json`: the directory beside the stack's state.
pub fn dir_for(state_path: &Path) -> PathBuf {
    let parent = state_path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    parent.join("sandbox")
}

/// Where a stack's state goes on `--sandbox` runs: `state/sandbox/<stack>.json`.
pub fn state_path(state_path: &Path) -> PathBuf {
    let name = state_path
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_else(|| "state.json".into());
    dir_for(state_path).join(name)
}

/// What a `--sandbox` run talks to; keep it alive for the whole run.
pub struct Attached {
    pub url: String,
    dir: PathBuf,
    /// The emulator when this process runs it (no `serve` was running).
    local: Option<Sandbox>,
    _lock: Option<DirLock>,
}

/// The project the sandbox makes GCS state buckets in.
pub const STATE_PROJECT: &str = "terrain-sandbox-state";

impl Attached {
    /// Provider settings that point every provider at the emulator.
    pub fn provider_overrides(&self) -> BTreeMap<String, Map<String, Value>> {
        overrides(&self.url, &token_file(&self.dir))
    }

    /// Stops the in-process emulator (its state is already saved).
    pub async fn close(self) {
        if let Some(sandbox) = self.local {
            sandbox.shutdown().await;
        }
    }
}

fn token_file(dir: &Path) -> PathBuf {
    dir.join("access-token")
}

fn overrides(url: &str, token_file: &Path) -> BTreeMap<String, Map<String, Value>> {
    let object = |v: Value| match v {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    let mut out = BTreeMap::new();
    out.insert(
        "gcp".to_string(),
        object(json!({
            "endpoints": {
                "container": format!("{url}/container/"),
                "file": format!("{url}/file/"),
                "storage": format!("{url}/storage/"),
                "compute": format!("{url}/compute/"),
                "tpu": format!("{url}/tpu/"),
                "serviceusage": format!("{url}/serviceusage/"),
                "iam": format!("{url}/iam/"),
                "cloudresourcemanager": format!("{url}/cloudresourcemanager/"),
            },
            "access_token_file": token_file.display().to_string(),
            "credentials": null,
            // The emulator's operations take seconds: poll it often.
            "poll_interval": "100ms",
            "max_poll_interval": "500ms",
            "retry_base_delay": "50ms",
        })),
    );
    out.insert(
        "aws".to_string(),
        object(json!({
            "endpoint": url,
            "endpoints": {},
            "profile": null,
            "sandbox": true,
        })),
    );
    out
}

/// Attaches to the sandbox kept in `dir`: a running `terrain sandbox serve`, else an
/// emulator started in this process on the same files.
pub async fn attach(dir: &Path, operation: &str) -> anyhow::Result<Attached> {
    let dir = absolute(dir)?;
    // Written by whoever runs the sandbox, and again here should it have gone missing.
    write_token(&dir)?;
    if let Some(served) = Served::running(&dir) {
        return Ok(Attached {
            url: served.url,
            dir,
            local: None,
            _lock: None,
        });
    }
    let lock = DirLock::acquire(&dir, operation)?;
    let sandbox = start(&dir, time_scale_from_env()?).await?;
    Ok(Attached {
        url: sandbox.url(),
        dir,
        local: Some(sandbox),
        _lock: Some(lock),
    })
}

fn absolute(dir: &Path) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("create the sandbox directory {}", dir.display()))?;
    dir.canonicalize()
        .with_context(|| format!("resolve the sandbox directory {}", dir.display()))
}

/// Writes the sandbox's access token for gcloud, the GKE auth plugin and terrain's own
/// GCP client. Every run calls this while others may be reading the file, so it never
/// truncates in place (a reader could see it empty and send no token): a file already
/// holding the token is left alone, and otherwise the token is written beside it and
/// renamed over it.
fn write_token(dir: &Path) -> anyhow::Result<()> {
    let path = token_file(dir);
    if std::fs::read(&path).is_ok_and(|held| held == ACCESS_TOKEN.as_bytes()) {
        return Ok(());
    }
    let partial = dir.join(format!(".access-token.{}", std::process::id()));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&partial)
        .and_then(|mut f| f.write_all(ACCESS_TOKEN.as_bytes()))
        .and_then(|()| std::fs::rename(&partial, &path));
    if written.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    written.with_context(|| format!("write {}", path.display()))
}

/// `TERRAIN_SANDBOX_ENABLED_APIS`: Google APIs on in every project of the sandbox from
/// the start (comma-separated; `all` for every API terrain calls), as in a project
/// whose owner enabled them by hand. Unset, a project starts as a new one does.
fn enabled_apis_from_env() -> Option<Vec<String>> {
    let text = std::env::var(ENABLED_APIS_VAR).ok()?;
    let mut apis = Vec::new();
    for name in text.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        if name == "all" {
            apis.extend(terrain_sandbox::GOOGLE_APIS.iter().map(|a| a.to_string()));
        } else {
            apis.push(name.to_string());
        }
    }
    Some(apis)
}

fn time_scale_from_env() -> anyhow::Result<f64> {
    match std::env::var(TIME_SCALE_VAR) {
        Ok(text) if !text.trim().is_empty() => {
            parse_scale(&text).map_err(|e| anyhow::anyhow!("{TIME_SCALE_VAR}: {e}"))
        }
        _ => Ok(1.0),
    }
}

fn parse_scale(text: &str) -> Result<f64, String> {
    text.trim()
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s >= 0.0)
        .ok_or_else(|| {
            format!("`{text}` is not a time scale; use a number ≥ 0 (1 = default durations, 5 = five times slower, 0 = instant)")
        })
}

/// Starts the emulator on `dir`'s files, on the port it had before when that is free.
async fn start(dir: &Path, scale: f64) -> anyhow::Result<Sandbox> {
    let port_file = dir.join("port");
    let port = std::fs::read_to_string(&port_file)
        .ok()
        .and_then(|t| t.trim().parse::<u16>().ok());
    let sandbox = Sandbox::start(Options {
        timing: Timing::scaled(scale),
        state_file: Some(dir.join("cloud.json")),
        port,
        enabled_apis: enabled_apis_from_env(),
    })
    .await
    .with_context(|| format!("start the sandbox in {}", dir.display()))?;
    // Best effort: a different port next time only means clients re-read outputs.
    let _ = std::fs::write(&port_file, sandbox.port().to_string());
    Ok(sandbox)
}

/// Ownership of a sandbox directory's files by one process: `cloud.lock` holds its pid
/// and what it is doing. A lock whose process is gone is taken over.
struct DirLock {
    path: PathBuf,
}

impl DirLock {
    fn acquire(dir: &Path, operation: &str) -> anyhow::Result<DirLock> {
        let path = dir.join("cloud.lock");
        let me = format!("{} {operation}\n", std::process::id());
        for _ in 0..3 {
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
            {
                Ok(mut f) => {
                    f.write_all(me.as_bytes())
                        .with_context(|| format!("write {}", path.display()))?;
                    return Ok(DirLock { path });
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let text = std::fs::read_to_string(&path).unwrap_or_default();
                    let mut parts = text.trim().splitn(2, ' ');
                    let pid = parts.next().and_then(|p| p.parse::<u32>().ok());
                    let what = parts.next().unwrap_or("terrain").to_string();
                    match pid {
                        Some(pid) if crate::state::lock::process_alive(pid) => anyhow::bail!(
                            "the sandbox in {} is in use by `{what}` (pid {pid}); wait for it to finish, or start `terrain sandbox serve` so that runs share one sandbox",
                            dir.display()
                        ),
                        // Left by a process that is gone: take it over.
                        _ => {
                            let _ = std::fs::remove_file(&path);
                        }
                    }
                }
                Err(e) => {
                    return Err(e).with_context(|| format!("create {}", path.display()));
                }
            }
        }
        anyhow::bail!(
            "could not take the sandbox lock {}; remove it if no terrain process is running",
            path.display()
        )
    }
}

impl Drop for DirLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// `serve.json`: where a running `terrain sandbox serve` listens.
#[derive(serde::Serialize, serde::Deserialize)]
struct Served {
    url: String,
    pid: u32,
}

impl Served {
    fn path(dir: &Path) -> PathBuf {
        dir.join("serve.json")
    }

    /// The serve of `dir`, if one is running and answering.
    fn running(dir: &Path) -> Option<Served> {
        let text = std::fs::read_to_string(Self::path(dir)).ok()?;
        let served: Served = serde_json::from_str(&text).ok()?;
        let addr = served.url.strip_prefix("http://")?.parse().ok()?;
        let answering = crate::state::lock::process_alive(served.pid)
            && TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_ok();
        answering.then_some(served)
    }
}

/// `terrain sandbox …`
#[derive(Subcommand, Debug)]
pub enum SandboxCommand {
    /// Keeps a sandbox running and prints what gcloud, kubectl and the aws CLI need to
    /// use it; `--sandbox` runs use it while it runs. Stop with Ctrl-C.
    Serve(ServeArgs),
    /// Lists what the sandbox holds (clusters, pools, buckets, pipelines…).
    List(DirArgs),
    /// Forgets everything the sandbox holds (and the stacks' sandbox state).
    Reset(DirArgs),
}

#[derive(Args, Debug)]
pub struct DirArgs {
    /// The sandbox directory: the `sandbox/` folder beside the stacks' state.
    #[arg(long, default_value = "state/sandbox", value_name = "DIR")]
    pub dir: PathBuf,
}

#[derive(Args, Debug)]
pub struct ServeArgs {
    #[command(flatten)]
    pub dir: DirArgs,
    /// Multiplies every emulated duration (1: a cluster takes seconds; 10: ten times
    /// slower, to watch progress; 0: instant).
    #[arg(long = "time-scale", env = TIME_SCALE_VAR, default_value = "1", value_name = "SCALE", value_parser = parse_scale)]
    pub time_scale: f64,
}

pub async fn run(command: SandboxCommand) -> anyhow::Result<super::Exit> {
    match command {
        SandboxCommand::Serve(args) => serve(args).await,
        SandboxCommand::List(args) => list(args).await,
        SandboxCommand::Reset(args) => reset(args),
    }
}

async fn serve(args: ServeArgs) -> anyhow::Result<super::Exit> {
    let dir = absolute(&args.dir.dir)?;
    if let Some(served) = Served::running(&dir) {
        anyhow::bail!(
            "a sandbox is already being served from {} at {} (pid {}); use it, or stop it first",
            dir.display(),
            served.url,
            served.pid
        );
    }
    let _lock = DirLock::acquire(&dir, "terrain sandbox serve")?;
    write_token(&dir)?;
    let sandbox = start(&dir, args.time_scale).await?;
    let url = sandbox.url();
    let served = Served {
        url: url.clone(),
        pid: std::process::id(),
    };
    std::fs::write(
        Served::path(&dir),
        serde_json::to_vec_pretty(&served).context("encode serve.json")?,
    )
    .with_context(|| format!("write {}", Served::path(&dir).display()))?;
    output::print(&serve_banner(&url, &dir, args.time_scale));
    let kube_dir = dir.join("kube");
    let mut known: BTreeMap<String, PathBuf> = BTreeMap::new();
    let stop = tokio::signal::ctrl_c();
    tokio::pin!(stop);
    loop {
        refresh_kubeconfigs(&sandbox, &kube_dir, &mut known);
        tokio::select! {
            _ = &mut stop => break,
            () = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
    }
    let _ = std::fs::remove_file(Served::path(&dir));
    for path in known.values() {
        let _ = std::fs::remove_file(path);
    }
    sandbox.shutdown().await;
    output::print("\nSandbox stopped; what it holds is kept for the next run.\n");
    Ok(super::Exit::Ok)
}

/// Writes a kubeconfig for every running cluster, removes those of clusters gone, and
/// says so when the set changes.
fn refresh_kubeconfigs(sandbox: &Sandbox, dir: &Path, known: &mut BTreeMap<String, PathBuf>) {
    let Ok(written) = sandbox.kubeconfig(dir) else {
        return;
    };
    let now: BTreeMap<String, PathBuf> = written.into_iter().collect();
    let commands: BTreeMap<String, String> = sandbox.credentials_commands().into_iter().collect();
    for (name, path) in &now {
        if !known.contains_key(name) {
            let cli = commands
                .get(name)
                .map(|c| format!("\n  or, with the exports above: {c}"))
                .unwrap_or_default();
            output::print(&format!(
                "cluster {name} is up: kubectl --kubeconfig {} get pods{cli}\n",
                shown(path)
            ));
        }
    }
    for (name, path) in known.iter() {
        if !now.contains_key(name) {
            let _ = std::fs::remove_file(path);
            output::print(&format!("cluster {name} is gone\n"));
        }
    }
    *known = now;
}

/// `path` relative to the current directory when it lies under it (shorter to read and
/// to paste), else as it is.
fn shown(path: &Path) -> String {
    std::env::current_dir()
        .ok()
        .and_then(|cwd| path.strip_prefix(cwd).ok().map(Path::to_path_buf))
        .unwrap_or_else(|| path.to_path_buf())
        .display()
        .to_string()
}

fn serve_banner(url: &str, dir: &Path, scale: f64) -> String {
    // Absolute: gcloud and the GKE auth plugin read it from whatever directory they run in.
    let token = token_file(dir).display().to_string();
    format!(
        "Sandbox serving at {url} (emulated cloud: {cloud}; time scale {scale}).\n\
         `terrain … --sandbox` runs use it while it runs. Stop it with Ctrl-C.\n\
         \n\
         gcloud:\n  \
           export CLOUDSDK_API_ENDPOINT_OVERRIDES_CONTAINER={url}/container/\n  \
           export CLOUDSDK_API_ENDPOINT_OVERRIDES_FILE={url}/file/\n  \
           export CLOUDSDK_API_ENDPOINT_OVERRIDES_STORAGE={url}/storage/storage/v1/\n  \
           export CLOUDSDK_API_ENDPOINT_OVERRIDES_SERVICEUSAGE={url}/serviceusage/\n  \
           export CLOUDSDK_API_ENDPOINT_OVERRIDES_IAM={url}/iam/\n  \
           export CLOUDSDK_API_ENDPOINT_OVERRIDES_CLOUDRESOURCEMANAGER={url}/cloudresourcemanager/\n  \
           export CLOUDSDK_API_ENDPOINT_OVERRIDES_COMPUTE={url}/compute/compute/v1/\n  \
           export CLOUDSDK_API_ENDPOINT_OVERRIDES_TPU={url}/tpu/\n  \
           export CLOUDSDK_AUTH_ACCESS_TOKEN_FILE={token}\n\
         \n\
         aws:\n  \
           export AWS_ACCESS_KEY_ID={key} AWS_SECRET_ACCESS_KEY={AWS_SECRET} AWS_REGION=us-east-1 AWS_DEFAULT_REGION=us-east-1\n  \
           aws --endpoint-url {url} eks list-clusters\n\
         \n\
         kubectl: a kubeconfig per cluster in {kube}/, written as clusters come up:\n  \
           kubectl --kubeconfig {kube}/<cluster>.kubeconfig get jobs\n\n",
        cloud = shown(&dir.join("cloud.json")),
        key = terrain_providers::aws::config::SANDBOX_ACCESS_KEY,
        kube = shown(&dir.join("kube")),
    )
}

async fn list(args: DirArgs) -> anyhow::Result<super::Exit> {
    let attached = attach(&args.dir, "terrain sandbox list").await?;
    let items = match &attached.local {
        Some(sandbox) => sandbox.inventory(),
        None => remote_inventory(&attached.url).await?,
    };
    attached.close().await;
    if items.is_empty() {
        output::print("The sandbox holds nothing.\n");
    } else {
        output::print(&format!("{}\n", items.join("\n")));
    }
    Ok(super::Exit::Ok)
}

/// The inventory of a served sandbox, from its own endpoint.
async fn remote_inventory(url: &str) -> anyhow::Result<Vec<String>> {
    let address = format!("{url}{}", Sandbox::INVENTORY_PATH);
    let response = reqwest::get(&address)
        .await
        .and_then(reqwest::Response::error_for_status)
        .with_context(|| format!("ask the served sandbox what it holds: GET {address}"))?;
    response
        .json::<Vec<String>>()
        .await
        .with_context(|| format!("read the served sandbox's answer to GET {address}"))
}

fn reset(args: DirArgs) -> anyhow::Result<super::Exit> {
    let dir = absolute(&args.dir)?;
    if let Some(served) = Served::running(&dir) {
        anyhow::bail!(
            "the sandbox in {} is being served (pid {}); stop `terrain sandbox serve` first",
            dir.display(),
            served.pid
        );
    }
    let _lock = DirLock::acquire(&dir, "terrain sandbox reset")?;
    let mut removed = 0usize;
    for entry in std::fs::read_dir(&dir).with_context(|| format!("list {}", dir.display()))? {
        let entry = entry.with_context(|| format!("list {}", dir.display()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name == "cloud.lock" {
            continue;
        }
        let path = entry.path();
        let result = if path.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        result.with_context(|| format!("remove {}", path.display()))?;
        removed += 1;
    }
    output::print(&format!(
        "Reset the sandbox in {} ({removed} files removed): it holds nothing, and no stack has sandbox state.\n",
        dir.display()
    ));
    Ok(super::Exit::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sandbox_state_sits_beside_real_state_but_apart() {
        assert_eq!(
            state_path(Path::new("state/batch-ml.json")),
            PathBuf::from("state/sandbox/batch-ml.json")
        );
        assert_eq!(dir_for(Path::new("x.json")), PathBuf::from("./sandbox"));
    }

    #[test]
    fn overrides_point_every_provider_at_the_emulator() {
        let o = overrides("http://127.0.0.1:9", Path::new("/s/access-token"));
        assert_eq!(
            o["gcp"]["endpoints"]["file"],
            json!("http://127.0.0.1:9/file/")
        );
        assert_eq!(o["gcp"]["access_token_file"], json!("/s/access-token"));
        assert_eq!(o["aws"]["endpoint"], json!("http://127.0.0.1:9"));
        assert_eq!(o["aws"]["sandbox"], json!(true));
    }

    #[test]
    fn time_scales_are_non_negative_numbers() {
        assert_eq!(parse_scale("2.5"), Ok(2.5));
        assert_eq!(parse_scale("0"), Ok(0.0));
        assert!(parse_scale("-1").is_err());
        assert!(parse_scale("fast").is_err());
    }

    #[test]
    fn a_lock_left_by_a_dead_process_is_taken_over() {
        let dir = tempfile::tempdir().expect("temp dir");
        // pid 0 is never a process we can see in /proc as alive.
        std::fs::write(dir.path().join("cloud.lock"), "999999999 terrain apply\n").expect("write");
        let lock = DirLock::acquire(dir.path(), "terrain plan").expect("taken over");
        let err = DirLock::acquire(dir.path(), "terrain apply")
            .err()
            .expect("held by this process");
        assert!(
            err.to_string().contains("in use by `terrain plan`"),
            "{err}"
        );
        drop(lock);
        assert!(!dir.path().join("cloud.lock").exists());
    }

    #[test]
    fn the_access_token_file_is_never_seen_empty_while_runs_rewrite_it() {
        let dir = tempfile::tempdir().expect("temp dir");
        write_token(dir.path()).expect("first write");
        let path = token_file(dir.path());
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = {
            let (dir, stop) = (dir.path().to_path_buf(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    // A stale or damaged token is rewritten; a good one is left alone.
                    let damaged = dir.join("damaged");
                    std::fs::write(&damaged, "stale").expect("damage");
                    std::fs::rename(&damaged, token_file(&dir)).expect("damage");
                    write_token(&dir).expect("rewrite");
                }
            })
        };
        for _ in 0..5_000 {
            let held = std::fs::read_to_string(&path).expect("read the token");
            assert!(held == ACCESS_TOKEN || held == "stale", "read {held:?}");
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        writer.join().expect("writer");
        assert_eq!(std::fs::read_to_string(&path).expect("read"), ACCESS_TOKEN);
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(&path).expect("stat").permissions(),
        ) & 0o777;
        assert_eq!(mode, 0o600);
    }
}
