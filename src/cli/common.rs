//! What the subcommands share: loading the stack (diagnostics printed here), opening
//! the state backend, building the engine, holding the lock, asking for confirmation
//! and handling Ctrl-C.

use std::io::{BufRead, IsTerminal};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::Context;
use terrain_providers::Registry;

use super::{Reported, StackArgs};
use crate::engine::{Engine, Observer, Settings};
use crate::output::{self, Style};
use crate::stack::{self, BackendConfig, LoadOptions, Stack};
use crate::state::gcs::GcsBackend;
use crate::state::local::LocalBackend;
use crate::state::s3::S3Backend;
use crate::state::{lock, Backend, LockInfo};
use crate::walk::Cancel;
use terrain_providers::gcp::config::GcpConfig;

/// The registry of kinds this binary offers.
pub fn registry() -> Registry {
    terrain_providers::registry::builtin()
}

/// The directory terrain was started in: paths given on the command line are relative
/// to it, even once a run has moved into the stack's directory.
pub fn start_dir() -> PathBuf {
    static START: OnceLock<PathBuf> = OnceLock::new();
    START
        .get_or_init(|| std::env::current_dir().unwrap_or_default())
        .clone()
}

/// Moves into the stack's directory `dir` (relative to [`start_dir`]), unless already
/// there: relative paths inside a stack (dataset sources, manifest and definition
/// files, local files) are relative to the stack's directory, wherever terrain is
/// started from, as a root module's are for `terraform -chdir`. Validation reads them
/// too, so this happens before the stack is checked.
fn enter_stack_dir(dir: &std::path::Path) -> anyhow::Result<()> {
    let target = absolute(dir);
    let here = std::env::current_dir().ok();
    let same = match (
        target.canonicalize(),
        here.as_ref().map(|h| h.canonicalize()),
    ) {
        (Ok(a), Some(Ok(b))) => a == b,
        _ => false,
    };
    if !same {
        std::env::set_current_dir(&target)
            .with_context(|| format!("work in the stack's directory {}", dir.display()))?;
    }
    Ok(())
}

/// The environment of this run: `--env` (or `TERRAIN_ENV`), else the default one.
fn environment(args: &StackArgs) -> anyhow::Result<String> {
    match &args.env {
        None => Ok(stack::DEFAULT_ENVIRONMENT.to_string()),
        Some(name) if crate::addr::is_identifier(name) => Ok(name.clone()),
        Some(name) => anyhow::bail!(
            "--env {name:?}: an environment's name starts with a letter and holds letters, digits, `_` and `-`"
        ),
    }
}

/// `envs/NAME.toml` beside the stack: the environment's variable values. It must exist,
/// so a mistyped `--env` is not a new, empty environment.
fn env_file(stack: &std::path::Path, name: &str) -> anyhow::Result<PathBuf> {
    let stack = absolute(stack);
    let dir = if stack.is_dir() {
        stack
    } else {
        stack
            .parent()
            .map(std::path::Path::to_path_buf)
            .unwrap_or_default()
    };
    let envs = dir.join("envs");
    let file = envs.join(format!("{name}.toml"));
    if file.is_file() {
        return Ok(file);
    }
    let mut known: Vec<String> = std::fs::read_dir(&envs)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter_map(|e| {
                    let p = e.path();
                    (p.extension().is_some_and(|x| x == "toml"))
                        .then(|| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
                        .flatten()
                })
                .collect()
        })
        .unwrap_or_default();
    known.sort();
    let hint = if known.is_empty() {
        format!(
            "create {} (it may be empty) to add the environment",
            file.display()
        )
    } else {
        let close = stack::source::did_you_mean(name, known.iter().map(String::as_str))
            .map(|d| format!("{d} "))
            .unwrap_or_default();
        format!("{close}environments: {}", known.join(", "))
    };
    anyhow::bail!(
        "--env {name}: no environment file {}; {hint}",
        file.display()
    )
}

/// Loads and validates the stack, printing its diagnostics if it has problems.
pub fn load_stack(args: &StackArgs, registry: &Registry) -> anyhow::Result<Stack> {
    match checked_stack(args, registry)? {
        Ok(s) => Ok(s),
        Err(errors) => {
            let style = Style::detect(args.no_color);
            output::eprint(&output::diag::render(
                &errors,
                style.color && std::io::stderr().is_terminal(),
            ));
            Err(Reported.into())
        }
    }
}

/// Loads and validates the stack: the stack, or its diagnostics (for the caller to
/// show). Fails on an unknown environment.
pub fn checked_stack(
    args: &StackArgs,
    registry: &Registry,
) -> anyhow::Result<Result<Stack, stack::StackErrors>> {
    // Before any change of directory: command-line paths are relative to it.
    start_dir();
    let env = |k: &str| std::env::var(k).ok();
    let environment = environment(args)?;
    let mut var_files = Vec::new();
    if let Some(name) = &args.env {
        var_files.push(env_file(&args.stack, name)?);
    }
    var_files.extend(self::var_files(args));
    let opts = LoadOptions {
        path: &args.stack,
        vars: &args.vars,
        var_files: &var_files,
        environment: &environment,
        env: &env,
        registry,
    };
    let loaded = stack::load::read(&opts).and_then(|raw| {
        if let Err(e) = enter_stack_dir(&raw.dir) {
            return Err(stack::StackErrors {
                sources: raw.sources,
                diagnostics: vec![stack::Diagnostic::nowhere(format!("{e:#}"))],
            });
        }
        stack::check::check(raw, &opts)
    });
    Ok(loaded)
}

/// The local state file of this run: `--state`, else the stack's local backend; `None`
/// when the state is remote. On `--sandbox` runs, under the `sandbox/` directory beside
/// it, so sandbox and real state never mix.
pub fn state_path(stack: &Stack, args: &StackArgs) -> Option<PathBuf> {
    let path = match (&args.state, &stack.backend) {
        (Some(p), _) => p.clone(),
        (None, BackendConfig::Local { path }) => path.clone(),
        (None, BackendConfig::S3(_) | BackendConfig::Gcs(_)) => return None,
    };
    Some(run_path(stack, args, &path))
}

/// The directory of the sandbox of `--sandbox` runs: `sandbox/` beside the local state
/// file, or beside where a local state would be (`state/<stack>.json`) when the state
/// is remote. Every environment of a stack shares it.
fn sandbox_dir(stack: &Stack, args: &StackArgs) -> PathBuf {
    if let Some(dir) = &args.sandbox_dir {
        return absolute(dir);
    }
    let base = match (&args.state, &stack.backend) {
        (Some(p), _) => p.clone(),
        (None, BackendConfig::Local { path }) => path.clone(),
        (None, _) => PathBuf::from("state").join(format!("{}.json", stack.name)),
    };
    let dir = super::sandbox::dir_for(&base);
    if moves_into(&stack.dir) {
        absolute(&dir)
    } else {
        dir
    }
}

/// `path` (of the stack's) as this run uses it: under `sandbox/` on `--sandbox` runs,
/// in the environment's own directory with `--env` (`state/staging/…`,
/// `state/sandbox/staging/…`), and absolute when the run works in the stack's
/// directory.
fn run_path(stack: &Stack, args: &StackArgs, path: &std::path::Path) -> PathBuf {
    let path = if args.sandbox {
        super::sandbox::state_path(path)
    } else {
        path.to_path_buf()
    };
    let path = match (&args.env, path.file_name(), path.parent()) {
        (Some(env), Some(file), Some(dir)) => dir.join(env).join(file),
        _ => path,
    };
    // Absolute when the run works in another directory, the stack's (see
    // `enter_stack_dir`); as given otherwise, which reads better in messages.
    if moves_into(&stack.dir) {
        absolute(&path)
    } else {
        path
    }
}

/// Whether a run of the stack in `dir` works in another directory than the one terrain
/// was started in.
fn moves_into(dir: &std::path::Path) -> bool {
    match (absolute(dir).canonicalize(), start_dir().canonicalize()) {
        (Ok(a), Ok(b)) => a != b,
        _ => true,
    }
}

/// `path` resolved against the directory terrain was started in.
pub fn absolute(path: &std::path::Path) -> PathBuf {
    if path.is_absolute() {
        return path.to_path_buf();
    }
    start_dir().join(path)
}

/// The engine of one command, and the sandbox it talks to on `--sandbox` runs.
pub struct Session {
    pub engine: Engine,
    sandbox: Option<super::sandbox::Attached>,
}

impl Session {
    /// Stops an in-process sandbox (what it holds is saved as it changes).
    pub async fn close(self) {
        if let Some(s) = self.sandbox {
            s.close().await;
        }
    }
}

impl std::ops::Deref for Session {
    type Target = Engine;
    fn deref(&self) -> &Engine {
        &self.engine
    }
}

/// The state of a command that runs no engine, and on `--sandbox` runs with a remote
/// backend the sandbox that holds it (kept attached while the session lives).
pub struct StateSession {
    backend: Arc<dyn Backend>,
    sandbox: Option<super::sandbox::Attached>,
}

impl StateSession {
    /// Stops an in-process sandbox.
    pub async fn close(self) {
        if let Some(s) = self.sandbox {
            s.close().await;
        }
    }
}

impl std::ops::Deref for StateSession {
    type Target = Arc<dyn Backend>;
    fn deref(&self) -> &Arc<dyn Backend> {
        &self.backend
    }
}

/// The state backend for a command that runs no engine (`operation` names it to the
/// sandbox's lock).
pub async fn backend(
    stack: &Stack,
    args: &StackArgs,
    operation: &str,
) -> anyhow::Result<StateSession> {
    let sandbox = match state_path(stack, args) {
        None if args.sandbox => {
            Some(super::sandbox::attach(&sandbox_dir(stack, args), operation).await?)
        }
        _ => None,
    };
    let backend = open_backend(stack, args, sandbox.as_ref())?;
    Ok(StateSession { backend, sandbox })
}

impl StateSession {
    /// A backend for another state `location`: a local path, `s3://BUCKET/KEY` or
    /// `gs://BUCKET/PREFIX/NAME.json` (on `--sandbox` runs, in the sandbox's stores).
    pub fn other(&self, location: &str, args: &StackArgs) -> anyhow::Result<Arc<dyn Backend>> {
        backend_at(location, args, self.sandbox.as_ref())
    }
}

/// A backend for the state at `location`: a local path, `s3://BUCKET/KEY` or
/// `gs://BUCKET/PREFIX/NAME.json` (on `--sandbox` runs, in `sandbox`'s stores).
pub fn backend_at(
    location: &str,
    args: &StackArgs,
    sandbox: Option<&super::sandbox::Attached>,
) -> anyhow::Result<Arc<dyn Backend>> {
    if let Some(rest) = location.strip_prefix("s3://") {
        let (bucket, key) = rest
            .split_once('/')
            .filter(|(b, k)| !b.is_empty() && !k.is_empty())
            .with_context(|| format!("{location}: expected s3://BUCKET/KEY"))?;
        let settings = crate::state::s3::S3Settings {
            bucket: bucket.to_string(),
            key: key.to_string(),
            region: None,
            endpoint: None,
            kms_key_id: None,
            allow_unversioned: false,
            sandbox: false,
            create_bucket: false,
        };
        return s3_backend(settings, args, sandbox);
    }
    if let Some(rest) = location.strip_prefix("gs://") {
        let (bucket, object) = rest
            .split_once('/')
            .filter(|(b, o)| !b.is_empty() && o.ends_with(".json"))
            .with_context(|| format!("{location}: expected gs://BUCKET/PREFIX/NAME.json"))?;
        let (prefix, file) = object.rsplit_once('/').unwrap_or(("", object));
        let settings = crate::state::gcs::GcsSettings {
            bucket: bucket.to_string(),
            prefix: prefix.to_string(),
            name: file.trim_end_matches(".json").to_string(),
            kms_key_name: None,
            allow_unversioned: false,
            create_in_project: None,
        };
        return gcs_backend(settings, args, sandbox);
    }
    Ok(Arc::new(LocalBackend::new(absolute(std::path::Path::new(
        location,
    )))))
}

/// A client of the cluster of kubeconfig context `context` (the current one when
/// `None`; in a pod, its service account).
pub async fn kube_client(context: Option<&str>) -> anyhow::Result<kube::Client> {
    let config = match context {
        None => kube::Config::infer().await.context(
            "find the cluster: no kubeconfig (KUBECONFIG, ~/.kube/config) and not in a pod",
        )?,
        Some(name) => kube::Config::from_kubeconfig(&kube::config::KubeConfigOptions {
            context: Some(name.to_string()),
            ..Default::default()
        })
        .await
        .with_context(|| format!("kubeconfig context {name}"))?,
    };
    kube::Client::try_from(config).context("connect to the cluster")
}

/// Attaches to the sandbox of `dir` (that of `terrain sandbox serve --dir DIR`).
pub async fn attach_sandbox(
    dir: &std::path::Path,
    operation: &str,
) -> anyhow::Result<super::sandbox::Attached> {
    super::sandbox::attach(&absolute(dir), operation).await
}

/// The stack's state backend and, on `--sandbox` runs, the sandbox attached whatever
/// the backend (a migration may read or write the sandbox's stores either way).
pub async fn backend_with_sandbox(
    stack: &Stack,
    args: &StackArgs,
    operation: &str,
) -> anyhow::Result<StateSession> {
    let sandbox = if args.sandbox {
        Some(super::sandbox::attach(&sandbox_dir(stack, args), operation).await?)
    } else {
        None
    };
    let backend = open_backend(stack, args, sandbox.as_ref())?;
    Ok(StateSession { backend, sandbox })
}

/// The backend of this run: the local file, or the remote store (on `--sandbox` runs,
/// the sandbox's, where the bucket is made on first use).
fn open_backend(
    stack: &Stack,
    args: &StackArgs,
    sandbox: Option<&super::sandbox::Attached>,
) -> anyhow::Result<Arc<dyn Backend>> {
    if let Some(path) = state_path(stack, args) {
        return Ok(Arc::new(LocalBackend::new(path)));
    }
    match &stack.backend {
        BackendConfig::Local { path } => {
            Ok(Arc::new(LocalBackend::new(run_path(stack, args, path))))
        }
        BackendConfig::S3(settings) => {
            let mut settings = settings.clone();
            if let Some(env) = &args.env {
                settings.key = with_environment(&settings.key, env);
            }
            s3_backend(settings, args, sandbox)
        }
        BackendConfig::Gcs(settings) => {
            let mut settings = settings.clone();
            if let Some(env) = &args.env {
                settings.name.clone_from(env);
            }
            gcs_backend(settings, args, sandbox)
        }
    }
}

/// The line a plan or apply starts with when it is for an environment or its state is
/// remote: which environment, and where its state is.
pub fn state_banner(args: &StackArgs, backend: &dyn Backend) -> Option<String> {
    let remote = backend.location().contains("://");
    match &args.env {
        Some(env) => Some(format!(
            "Environment {env}: state {}\n\n",
            backend.location()
        )),
        None if remote => Some(format!("State {}\n\n", backend.location())),
        None => None,
    }
}

/// Every `--var-file` as an absolute path (a saved plan keeps them).
pub fn var_files(args: &StackArgs) -> Vec<PathBuf> {
    args.var_files.iter().map(|f| absolute(f)).collect()
}

/// An S3 state backend; on `--sandbox` runs in the sandbox's S3, signed with its
/// credentials, the bucket made on first write.
fn s3_backend(
    mut settings: crate::state::s3::S3Settings,
    args: &StackArgs,
    sandbox: Option<&super::sandbox::Attached>,
) -> anyhow::Result<Arc<dyn Backend>> {
    if args.sandbox {
        let sandbox = sandbox
            .context("a --sandbox run keeps S3 state in the sandbox, which is not attached")?;
        settings.endpoint = Some(sandbox.url.clone());
        settings.sandbox = true;
        settings.create_bucket = true;
        settings
            .region
            .get_or_insert_with(|| "us-east-1".to_string());
    }
    Ok(Arc::new(S3Backend::new(settings)))
}

/// A GCS state backend, with Google's usual credentials (a token file, a token, ADC);
/// on `--sandbox` runs with the settings the sandbox gives the GCP provider (its
/// storage endpoint, token and quick retries), the bucket made on first write.
fn gcs_backend(
    mut settings: crate::state::gcs::GcsSettings,
    args: &StackArgs,
    sandbox: Option<&super::sandbox::Attached>,
) -> anyhow::Result<Arc<dyn Backend>> {
    let table = if args.sandbox {
        let sandbox = sandbox
            .context("a --sandbox run keeps GCS state in the sandbox, which is not attached")?;
        settings.create_in_project = Some(super::sandbox::STATE_PROJECT.to_string());
        sandbox
            .provider_overrides()
            .remove("gcp")
            .map_or(serde_json::Value::Null, serde_json::Value::Object)
    } else {
        serde_json::json!({})
    };
    let config = GcpConfig::resolve(&table, &|k| std::env::var(k).ok())
        .context("the Google settings of the GCS state backend")?;
    Ok(Arc::new(GcsBackend::new(settings, config)?))
}

/// An S3 key with the environment in it, before the extension:
/// `ml/batch.json` → `ml/batch.staging.json`.
fn with_environment(key: &str, env: &str) -> String {
    let (dir, file) = key.rsplit_once('/').map_or(("", key), |(d, f)| (d, f));
    let file = match file.rsplit_once('.') {
        Some((stem, ext)) if !stem.is_empty() => format!("{stem}.{env}.{ext}"),
        _ => format!("{file}.{env}"),
    };
    if dir.is_empty() {
        file
    } else {
        format!("{dir}/{file}")
    }
}

/// Refuses a plan whose hourly maximum exceeds the stack's budget, naming what drives
/// the cost.
pub fn within_budget(plan: &crate::plan::Plan) -> anyhow::Result<()> {
    match plan
        .cost
        .as_ref()
        .and_then(|c| c.over_budget().map(|max| (c, max)))
    {
        Some((cost, max)) => Err(anyhow::anyhow!(output::cost::over_budget(cost, max))),
        None => Ok(()),
    }
}

/// The policies a run holds its plans to: the stack's `[stack] policies`, then
/// `extra` (`--policy`, as given on the command line); `None` when there are none.
/// Loaded before anything is planned or locked, so a policy that does not parse fails
/// at once.
pub fn policies(
    stack: &Stack,
    extra: &[PathBuf],
) -> anyhow::Result<Option<crate::policy::Policies>> {
    let mut paths = stack.policies.clone();
    paths.extend(extra.iter().map(|p| absolute(p)));
    if paths.is_empty() {
        return Ok(None);
    }
    Ok(Some(crate::policy::Policies::load_from(
        &paths,
        Some(&start_dir()),
    )?))
}

/// What `policies` say about `plan`; `None` when there are none.
pub fn judge(
    policies: Option<&mut crate::policy::Policies>,
    stack: &Stack,
    plan: &crate::plan::Plan,
) -> anyhow::Result<Option<crate::policy::Verdict>> {
    match policies {
        None => Ok(None),
        Some(p) => Ok(Some(p.evaluate(&crate::policy::input(stack, plan))?)),
    }
}

/// Fails with the denies when the policies deny the plan.
pub fn allowed(verdict: Option<&crate::policy::Verdict>) -> anyhow::Result<()> {
    match verdict {
        Some(v) if !v.denies.is_empty() => Err(anyhow::anyhow!(output::policy::denied(v))),
        _ => Ok(()),
    }
}

/// An engine for `stack`, attached to the sandbox on `--sandbox` runs. With
/// `TERRAIN_LOG_PATH` set, events also go to that file.
pub async fn engine(
    args: &StackArgs,
    operation: &str,
    stack: Stack,
    registry: Registry,
    parallelism: u16,
    observer: Arc<dyn Observer>,
) -> anyhow::Result<Session> {
    let observer: Arc<dyn Observer> = match std::env::var_os("TERRAIN_LOG_PATH") {
        Some(path) if !path.is_empty() => {
            let path = absolute(&PathBuf::from(path));
            Arc::new(
                output::log::JsonLog::open(&path, observer)
                    .with_context(|| format!("open TERRAIN_LOG_PATH {}", path.display()))?,
            )
        }
        _ => observer,
    };
    // The sandbox lives beside the stack's sandbox state (`state/sandbox/`).
    let sandbox = if args.sandbox {
        Some(super::sandbox::attach(&sandbox_dir(&stack, args), operation).await?)
    } else {
        None
    };
    let backend = open_backend(&stack, args, sandbox.as_ref())?;
    // Both paths are as written, from where terrain was started (the stack's own is
    // under the stack's directory as given).
    let catalog = match args.prices.as_ref().or(stack.pricing.file.as_ref()) {
        Some(file) => Arc::new(crate::cost::Catalog::with_file(&absolute(file))?),
        None => crate::cost::Catalog::shipped(),
    };
    let mut stack = stack;
    stack.policies = stack.policies.iter().map(|p| absolute(p)).collect();
    // Every path of terrain's own (state, log, sandbox) is absolute by now.
    enter_stack_dir(&stack.dir)?;
    let provider_overrides = sandbox
        .as_ref()
        .map(super::sandbox::Attached::provider_overrides)
        .unwrap_or_default();
    Ok(Session {
        engine: Engine {
            stack,
            registry,
            backend,
            settings: Settings {
                parallelism: usize::from(parallelism),
                provider_overrides,
                catalog,
                ..Settings::default()
            },
            observer,
            cancel: Cancel::new(),
        },
        sandbox,
    })
}

/// Runs `f` holding the state lock, releasing it afterwards whatever `f` returned.
pub async fn with_lock<T, F>(
    backend: &dyn Backend,
    operation: &str,
    timeout: Duration,
    f: F,
) -> anyhow::Result<T>
where
    F: std::future::Future<Output = anyhow::Result<T>>,
{
    let info = LockInfo::new(operation);
    lock::acquire(backend, &info, timeout).await?;
    let result = f.await;
    let unlocked = backend.unlock(&info.id).await;
    let value = result?;
    unlocked.context("release the state lock")?;
    Ok(value)
}

/// Asks for `yes`. Without a terminal there is nobody to ask: refuse.
pub fn confirm(question: &str, auto_approve: bool) -> anyhow::Result<bool> {
    if auto_approve {
        return Ok(true);
    }
    if !std::io::stdin().is_terminal() {
        anyhow::bail!("no terminal to confirm on; nothing was changed. Review the plan and pass --auto-approve to run without asking");
    }
    output::print(&format!(
        "\n{question}\n  Only 'yes' will be accepted.\n\n  Enter a value: "
    ));
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .context("read the answer")?;
    Ok(answer.trim() == "yes")
}

/// First Ctrl-C: start nothing new, let operations in flight finish and save. Second:
/// stop at once (write-ahead records let the next run adopt interrupted creates).
pub fn handle_interrupts(cancel: Cancel) {
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_err() {
            return;
        }
        cancel.cancel();
        output::eprint("\nInterrupt received: starting nothing new, waiting for operations in flight to finish and be saved. Press Ctrl-C again to stop at once.\n");
        if tokio::signal::ctrl_c().await.is_ok() {
            output::eprint("\nStopping now. Operations in flight were recorded before they started; the next run finds and adopts what they made.\n");
            std::process::exit(130);
        }
    });
}

/// Replaces `path`'s content with `text` (creating it when missing) through a temporary
/// file beside it and a rename, keeping an existing file's permissions: a stack file
/// rewritten by `fmt` or `import --write` is never left half written. A symlink's
/// target is what gets rewritten.
pub fn replace_file(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let (target, permissions) = match std::fs::canonicalize(path) {
        Ok(target) => {
            let permissions = std::fs::metadata(&target)?.permissions();
            (target, Some(permissions))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => (path.to_path_buf(), None),
        Err(e) => return Err(e),
    };
    let dir = target
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    let name = target
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let tmp = dir.join(format!(".{name}.terrain-{}.tmp", std::process::id()));
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        if let Some(p) = permissions {
            std::fs::set_permissions(&tmp, p)?;
        }
        std::fs::rename(&tmp, &target)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}
