//! `terrain operator`: runs the Stack controller in this process (in a cluster, as the
//! Deployment in `deploy/`) once this replica holds the Lease, planning and applying
//! through the same engine as `terrain plan` and `terrain apply` on `--max-runs` run
//! threads; `--crd` prints the Stack CRD instead.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use async_trait::async_trait;
use clap::Args;
use kube::CustomResourceExt;

use super::{common, Exit, StackArgs};
use crate::engine::{Base, EngineError, Quiet};
use crate::operator::crd::{BackendSpec, Stack};
use crate::operator::metrics::Metrics;
use crate::operator::{controller, hide, lease, Job, Planned, RunError, Runner};
use crate::plan::Plan;
use crate::stack::BackendConfig;
use crate::state::{OutputState, StateError};

/// Runs at once unless `--max-runs` says otherwise: one where a thread cannot have its
/// own working directory.
const DEFAULT_RUNS: u16 = if cfg!(target_os = "linux") { 4 } else { 1 };

#[derive(Args, Debug)]
pub struct OperatorArgs {
    /// Prints the Stack CustomResourceDefinition (YAML) and exits.
    #[arg(long)]
    crd: bool,
    /// Reconciles only the Stacks of this namespace (all namespaces by default).
    #[arg(short = 'n', long, value_name = "NAMESPACE")]
    namespace: Option<String>,
    /// The kubeconfig context of the cluster whose Stacks to reconcile (in a pod, its
    /// service account is used).
    #[arg(long, value_name = "NAME")]
    context: Option<String>,
    /// Where the Stacks' files are written, one directory each.
    #[arg(
        long = "work-dir",
        default_value = "/tmp/terrain-operator",
        value_name = "DIR"
    )]
    work_dir: PathBuf,
    /// How long to wait before retrying a Stack whose plan or apply failed.
    #[arg(long, default_value = "30s", value_name = "DURATION", value_parser = super::parse_duration)]
    retry: Duration,
    /// Serves `/metrics` (Prometheus), `/healthz` and `/readyz` on this address
    /// (`0.0.0.0:8080`; port 0 picks a free one, which the log names).
    #[arg(long = "metrics-addr", value_name = "ADDR")]
    metrics_addr: Option<std::net::SocketAddr>,
    /// How many plans and applies run at once (each in its own thread and working
    /// directory); the rest wait their turn.
    #[arg(long = "max-runs", default_value_t = DEFAULT_RUNS, value_parser = clap::value_parser!(u16).range(1..=64), value_name = "N")]
    max_runs: u16,
    /// The Lease that elects the one replica that reconciles.
    #[arg(long, default_value = "terrain-operator", value_name = "NAME")]
    lease: String,
    /// The Lease's namespace (default: the pod's, from POD_NAMESPACE; else that of
    /// `--namespace`; else `default`).
    #[arg(long = "lease-namespace", value_name = "NAMESPACE")]
    lease_namespace: Option<String>,
    /// How long a replica that stopped renewing the Lease keeps it: another takes over
    /// that long after the holder died.
    #[arg(long = "lease-duration", default_value = "15s", value_name = "DURATION", value_parser = super::parse_duration)]
    lease_duration: Duration,
    /// Plans and applies against the sandbox instead of the real clouds.
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

pub async fn run(args: OperatorArgs) -> anyhow::Result<Exit> {
    if args.crd {
        let text = serde_yaml_ng::to_string(&Stack::crd())?;
        crate::output::print(&text);
        return Ok(Exit::Ok);
    }
    common::start_dir();
    let client = common::kube_client(args.context.as_deref()).await?;
    let metrics = Arc::new(Metrics::default());
    let runner = Arc::new(Worker::start(
        EngineRunner {
            sandbox: args.sandbox,
            sandbox_dir: args.sandbox.then(|| common::absolute(&args.sandbox_dir)),
        },
        args.max_runs,
        metrics.clone(),
    )?);
    let stacks: kube::Api<Stack> = match &args.namespace {
        Some(ns) => kube::Api::namespaced(client.clone(), ns),
        None => kube::Api::all(client.clone()),
    };
    // Served from the start, so a replica waiting for the Lease answers its probes.
    if let Some(addr) = args.metrics_addr {
        let (listener, bound) = crate::operator::metrics::bind(addr)
            .await
            .with_context(|| format!("serve metrics on {addr}"))?;
        log(
            "info",
            &format!("serving /metrics, /healthz and /readyz on {bound}"),
        );
        tokio::spawn(crate::operator::metrics::serve(
            listener,
            metrics.clone(),
            stacks,
        ));
    }
    let pod = std::env::var("POD_NAME")
        .unwrap_or_else(|_| gethostname::gethostname().to_string_lossy().into_owned());
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    let settings = lease::Settings {
        namespace: args
            .lease_namespace
            .clone()
            .or_else(|| std::env::var("POD_NAMESPACE").ok())
            .or_else(|| args.namespace.clone())
            .unwrap_or_else(|| "default".into()),
        name: args.lease.clone(),
        identity: format!("{pod}_{}", &suffix[..8]),
        duration: args.lease_duration,
    };
    if settings.duration < Duration::from_secs(2) {
        anyhow::bail!("--lease-duration must be at least 2s");
    }
    let mut elector = lease::Elector::new(client.clone(), settings);
    log(
        "info",
        &format!(
            "terrain operator started as {}, {} runs at a time",
            elector.settings.identity, args.max_runs
        ),
    );
    let lease_name = format!("{}/{}", elector.settings.namespace, elector.settings.name);
    let term = tokio::select! {
        term = elector.acquire(|why| log("info", &format!("waiting for the Lease {lease_name}: {why}"))) => term,
        () = stopped() => {
            log("info", "terrain operator stopped");
            return Ok(Exit::Ok);
        }
    };
    log(
        "info",
        &format!("holding the Lease {lease_name} at term {term}: reconciling"),
    );
    metrics.leading(true);
    let hold = elector.hold(term);
    let settings = controller::Settings {
        namespace: args.namespace,
        work: common::absolute(&args.work_dir),
        retry: args.retry,
        lease: Some(hold),
    };
    tokio::select! {
        () = controller::run(client, runner, settings, metrics.clone()) => {}
        lost = elector.keep(term) => {
            // Runs in flight go on in their threads; only ending the process stops
            // them before the next holder takes over (as a SIGKILL would).
            log("error", &format!("lost the Lease {lease_name}: {lost}; stopping at once"));
            std::process::exit(3);
        }
    }
    // The controller has stopped and nothing runs: hand the Lease over now.
    if let Err(e) = elector.release().await {
        log("warn", &format!("hand back the Lease {lease_name}: {e}"));
    }
    log("info", "terrain operator stopped");
    Ok(Exit::Ok)
}

fn log(level: &str, message: &str) {
    crate::output::operator::log(level, "", message);
}

/// SIGTERM (the kubelet stopping the pod) or Ctrl-C.
async fn stopped() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        () = term => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

/// Plans and applies with the engine. A run works in its stack's directory (relative
/// paths in stacks are relative to it).
struct EngineRunner {
    sandbox: bool,
    sandbox_dir: Option<PathBuf>,
}

/// What the controller asks of a run thread.
enum Request {
    Plan(Job, Reply<Planned>),
    Apply(Job, Box<Planned>, Reply<BTreeMap<String, OutputState>>),
    Store(Job, String, Box<Plan>, Reply<String>),
}

type Reply<T> = tokio::sync::oneshot::Sender<Result<T, RunError>>;

/// The run threads, `--max-runs` of them, each with its own single-threaded runtime
/// and its own working directory, taking requests in turn: so no more than that many
/// plans and applies run at once, however many Stacks are due (after a restart, all
/// of them). The engine's futures are not all `Send`, so runs stay off the
/// controller's tasks.
struct Worker {
    requests: tokio::sync::mpsc::Sender<Request>,
}

impl Worker {
    fn start(runner: EngineRunner, limit: u16, metrics: Arc<Metrics>) -> anyhow::Result<Worker> {
        if cfg!(not(target_os = "linux")) && limit > 1 {
            anyhow::bail!(
                "--max-runs {limit}: more than one run at a time needs Linux (each run thread's own working directory); use --max-runs 1 here"
            );
        }
        let (tx, rx) = tokio::sync::mpsc::channel::<Request>(64);
        let rx = Arc::new(tokio::sync::Mutex::new(rx));
        let runner = Arc::new(runner);
        let (started_tx, started) = std::sync::mpsc::channel::<anyhow::Result<()>>();
        for i in 0..limit {
            let (rx, runner, metrics, started_tx) = (
                rx.clone(),
                runner.clone(),
                metrics.clone(),
                started_tx.clone(),
            );
            std::thread::Builder::new()
                .name(format!("terrain-run-{i}"))
                .spawn(move || {
                    let ready = own_working_directory().and_then(|()| {
                        tokio::runtime::Builder::new_current_thread()
                            .enable_all()
                            .build()
                            .context("start a run thread's runtime")
                    });
                    let runtime = match ready {
                        Ok(r) => {
                            let _ = started_tx.send(Ok(()));
                            r
                        }
                        Err(e) => {
                            let _ = started_tx.send(Err(e));
                            return;
                        }
                    };
                    let home = common::start_dir();
                    runtime.block_on(async move {
                        loop {
                            let request = rx.lock().await.recv().await;
                            let Some(request) = request else { break };
                            // A run moves into its stack's directory, which the next
                            // reconcile rewrites: back home first, so no work is left
                            // in a directory that is gone.
                            let _ = std::env::set_current_dir(&home);
                            let _running = metrics.run_started();
                            match request {
                                Request::Plan(job, reply) => {
                                    let _ = reply.send(runner.plan(&job).await);
                                }
                                Request::Apply(job, planned, reply) => {
                                    let _ = reply.send(runner.apply(&job, &planned).await);
                                }
                                Request::Store(job, name, plan, reply) => {
                                    let _ = reply.send(runner.store_plan(&job, &name, &plan).await);
                                }
                            }
                        }
                    });
                })?;
        }
        drop(started_tx);
        for _ in 0..limit {
            started
                .recv()
                .context("a run thread stopped while starting")??;
        }
        Ok(Worker { requests: tx })
    }

    async fn ask<T>(&self, make: impl FnOnce(Reply<T>) -> Request) -> Result<T, RunError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let gone = || RunError::Failed {
            message: "the engine's thread stopped".into(),
        };
        self.requests.send(make(tx)).await.map_err(|_| gone())?;
        rx.await.map_err(|_| gone())?
    }
}

#[async_trait]
impl Runner for Worker {
    async fn plan(&self, job: &Job) -> Result<Planned, RunError> {
        let job = job.clone();
        self.ask(|r| Request::Plan(job, r)).await
    }

    async fn apply(
        &self,
        job: &Job,
        planned: &Planned,
    ) -> Result<BTreeMap<String, OutputState>, RunError> {
        let (job, planned) = (job.clone(), Box::new(planned.clone()));
        self.ask(|r| Request::Apply(job, planned, r)).await
    }

    async fn store_plan(&self, job: &Job, name: &str, plan: &Plan) -> Result<String, RunError> {
        let (job, name, plan) = (job.clone(), name.to_string(), Box::new(plan.clone()));
        self.ask(|r| Request::Store(job, name, plan, r)).await
    }
}

fn failed(job: &Job, e: impl std::fmt::Display) -> RunError {
    RunError::Failed {
        message: hide(&format!("{e:#}"), &job.secrets),
    }
}

fn engine_error(job: &Job, e: EngineError) -> RunError {
    match e {
        EngineError::StalePlan(why) => RunError::Stale {
            message: format!("the plan no longer applies: {why}"),
        },
        EngineError::State(state) => match *state {
            StateError::LockHeld { holder, .. } => RunError::Locked {
                holder: format!(
                    "{} for `{}` since {}",
                    holder.holder(),
                    holder.operation,
                    holder.created
                ),
                message: format!("lock id {}", holder.id),
            },
            other => failed(job, other),
        },
        other => failed(job, other),
    }
}

fn state_error(job: &Job, e: StateError) -> RunError {
    engine_error(job, EngineError::State(Box::new(e)))
}

/// Gives the calling thread a working directory of its own (Linux's
/// `unshare(CLONE_FS)`): a run's `chdir` into its stack's directory then moves only its
/// thread (and the threads it starts), not the other runs nor the controller.
#[cfg(target_os = "linux")]
fn own_working_directory() -> anyhow::Result<()> {
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_FS)
        .context("give a run thread its own working directory (unshare CLONE_FS)")
}

/// Elsewhere a thread cannot have its own working directory: one run thread only,
/// which goes back to the start directory before each run.
#[cfg(not(target_os = "linux"))]
fn own_working_directory() -> anyhow::Result<()> {
    Ok(())
}

impl EngineRunner {
    fn args(&self, job: &Job) -> StackArgs {
        StackArgs {
            stack: job.dir.clone(),
            vars: job.vars.clone(),
            var_files: Vec::new(),
            env: job.env.clone(),
            state: None,
            no_color: true,
            sandbox: self.sandbox,
            sandbox_dir: self.sandbox_dir.clone(),
            prices: None,
        }
    }

    async fn session(&self, job: &Job, operation: &str) -> Result<common::Session, RunError> {
        let registry = common::registry();
        let args = self.args(job);
        let mut stack = match common::checked_stack(&args, &registry) {
            Ok(Ok(s)) => s,
            Ok(Err(errors)) => {
                // `stack.toml:27:12: …`, as the stack's repository names its files.
                let text = errors
                    .to_string()
                    .replace(&format!("{}/", job.dir.display()), "");
                return Err(RunError::Invalid {
                    message: hide(&text, &job.secrets),
                });
            }
            Err(e) => {
                return Err(RunError::Invalid {
                    message: hide(&format!("{e:#}"), &job.secrets),
                })
            }
        };
        if let Some(backend) = &job.backend {
            stack.backend = backend_config(backend)?;
        }
        if let BackendConfig::Local { path } = &stack.backend {
            return Err(RunError::Invalid {
                message: format!(
                    "the stack keeps its state in a local file ({}), which a pod does not keep: give it an S3 or GCS [backend], or set spec.backend",
                    path.display()
                ),
            });
        }
        common::engine(&args, operation, stack, registry, 10, Arc::new(Quiet))
            .await
            .map_err(|e| failed(job, e))
    }
}

/// The stack backend of a Stack's `spec.backend`.
fn backend_config(spec: &BackendSpec) -> Result<BackendConfig, RunError> {
    match (&spec.s3, &spec.gcs) {
        (Some(s3), None) => Ok(BackendConfig::S3(crate::state::s3::S3Settings {
            bucket: s3.bucket.clone(),
            key: s3.key.clone(),
            region: s3.region.clone(),
            endpoint: None,
            kms_key_id: s3.kms_key_id.clone(),
            allow_unversioned: false,
            sandbox: false,
            create_bucket: false,
        })),
        (None, Some(gcs)) => Ok(BackendConfig::Gcs(crate::state::gcs::GcsSettings {
            bucket: gcs.bucket.clone(),
            prefix: gcs.prefix.clone(),
            name: "default".to_string(),
            kms_key_name: gcs.kms_key_name.clone(),
            allow_unversioned: false,
            create_in_project: None,
        })),
        _ => Err(RunError::Invalid {
            message: "spec.backend must set exactly one of s3 and gcs".into(),
        }),
    }
}

impl EngineRunner {
    async fn plan(&self, job: &Job) -> Result<Planned, RunError> {
        let session = self.session(job, "terrain operator").await?;
        let result = async {
            // A replica that lost its Lease (or a run killed on this machine) left
            // its lock: release it now rather than at the next apply.
            let me = crate::state::LockInfo::new("operator plan").holding(job.lease.clone());
            let locked = crate::state::lock::clear_abandoned(&*session.backend, &me)
                .await
                .map_err(|e| state_error(job, e))?;
            let mut policies = common::policies(&session.stack, &[]).map_err(|e| failed(job, e))?;
            let path = job.dir.display().to_string();
            let (plan, base) = session
                .plan(job.destroy, &[], &path, &job.vars)
                .await
                .map_err(|e| engine_error(job, e))?;
            let verdict = common::judge(policies.as_mut(), &session.stack, &plan)
                .map_err(|e| failed(job, e))?;
            common::allowed(verdict.as_ref())
                .and_then(|()| common::within_budget(&plan))
                .map_err(|e| RunError::Invalid {
                    message: hide(&format!("{e:#}"), &job.secrets),
                })?;
            Ok(Planned {
                plan,
                state: session.backend.location(),
                outputs: base.state.outputs,
                locked: locked.map(|h| {
                    format!(
                        "{} for `{}` since {}: lock id {}",
                        h.holder(),
                        h.operation,
                        h.created,
                        h.id
                    )
                }),
            })
        }
        .await;
        session.close().await;
        result
    }

    async fn apply(
        &self,
        job: &Job,
        planned: &Planned,
    ) -> Result<BTreeMap<String, OutputState>, RunError> {
        let session = self.session(job, "terrain operator").await?;
        let backend = session.backend.clone();
        let info = crate::state::LockInfo::new("operator apply").holding(job.lease.clone());
        let result = async {
            crate::state::lock::acquire(&*backend, &info, Duration::ZERO)
                .await
                .map_err(|e| state_error(job, e))?;
            let applied = async {
                let stored = backend.load().await.map_err(|e| state_error(job, e))?;
                session
                    .check_fresh(&planned.plan, stored.as_ref())
                    .map_err(|e| engine_error(job, e))?;
                let base = Base::against(stored.unwrap_or_default(), &planned.plan);
                session
                    .apply(&planned.plan, base)
                    .await
                    .map_err(|e| engine_error(job, e))
            }
            .await;
            let unlocked = backend.unlock(&info.id).await;
            let report = applied?;
            unlocked.map_err(|e| state_error(job, e))?;
            Ok(report.outputs)
        }
        .await;
        session.close().await;
        result
    }

    async fn store_plan(&self, job: &Job, name: &str, plan: &Plan) -> Result<String, RunError> {
        let session = self.session(job, "terrain operator").await?;
        let bytes = serde_json::to_vec_pretty(plan).map_err(|e| failed(job, e))?;
        let stored = session
            .backend
            .put_beside(name, bytes)
            .await
            .map_err(|e| state_error(job, e));
        session.close().await;
        stored
    }
}
