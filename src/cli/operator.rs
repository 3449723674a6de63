//! `terrain operator`: runs the Stack controller in this process (in a cluster, as the
//! Deployment in `deploy/`), planning and applying through the same engine as
//! `terrain plan` and `terrain apply`, on the engine's own thread, one run at a time;
//! `--crd` prints the Stack CRD instead.

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
use crate::operator::{controller, hide, Job, Planned, RunError, Runner};
use crate::plan::Plan;
use crate::stack::BackendConfig;
use crate::state::{OutputState, StateError};

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
    let runner = Arc::new(Worker::start(EngineRunner {
        sandbox: args.sandbox,
        sandbox_dir: args.sandbox.then(|| common::absolute(&args.sandbox_dir)),
    })?);
    let listener = match args.metrics_addr {
        Some(addr) => {
            let (listener, bound) = crate::operator::metrics::bind(addr)
                .await
                .with_context(|| format!("serve metrics on {addr}"))?;
            crate::output::operator::log(
                "info",
                "",
                &format!("serving /metrics, /healthz and /readyz on {bound}"),
            );
            Some(listener)
        }
        None => None,
    };
    crate::output::operator::log("info", "", "terrain operator started");
    controller::run(
        client,
        runner,
        controller::Settings {
            namespace: args.namespace,
            work: common::absolute(&args.work_dir),
            retry: args.retry,
        },
        listener,
    )
    .await;
    crate::output::operator::log("info", "", "terrain operator stopped");
    Ok(Exit::Ok)
}

/// Plans and applies with the engine, one run at a time: a run works in its stack's
/// directory (relative paths in stacks are relative to it), which is the process's.
struct EngineRunner {
    sandbox: bool,
    sandbox_dir: Option<PathBuf>,
}

/// What the controller asks of the engine's thread.
enum Request {
    Plan(Job, Reply<Planned>),
    Apply(Job, Box<Planned>, Reply<BTreeMap<String, OutputState>>),
    Store(Job, String, Box<Plan>, Reply<String>),
}

type Reply<T> = tokio::sync::oneshot::Sender<Result<T, RunError>>;

/// The engine's own thread and runtime, taking one request at a time. The engine's
/// futures are not all `Send`, and a run changes the process's working directory, so
/// runs go there in turn rather than onto the controller's tasks.
struct Worker {
    requests: tokio::sync::mpsc::Sender<Request>,
}

impl Worker {
    fn start(runner: EngineRunner) -> anyhow::Result<Worker> {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Request>(64);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("terrain-engine")
            .enable_all()
            .build()?;
        std::thread::Builder::new()
            .name("terrain-engine".into())
            .spawn(move || {
                let home = common::start_dir();
                runtime.block_on(async move {
                    while let Some(request) = rx.recv().await {
                        // A run moves into its stack's directory, which the next
                        // reconcile rewrites: back home first, so no work (a git
                        // fetch) is left in a directory that is gone.
                        let _ = std::env::set_current_dir(&home);
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
                    "{} (pid {}) for `{}` since {}",
                    holder.who, holder.pid, holder.operation, holder.created
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
        let info = crate::state::LockInfo::new("operator apply");
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
