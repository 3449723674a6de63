//! The reconcile loop: kube's controller runtime watching Stacks (and the ConfigMaps
//! they read), a finalizer for `deletionPolicy: Destroy`, the status written by
//! server-side apply, an Event for each thing a person should know (a plan pending,
//! drift found, an apply, a superseded approval), and when a Stack is due for a plan.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::finalizer::{finalizer, Event as Finalized};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::json;

use super::crd::{Condition, DeletionPolicy, PendingPlan, Stack, StackStatus, API_VERSION};
use super::decide::{self, Decision, Facts, Why};
use super::digest;
use super::metrics::Metrics;
use super::{hide, source, Job, OperatorError, Planned, RunError, Runner};

/// The finalizer that holds a Stack under `deletionPolicy: Destroy` until its destroy
/// plan is applied.
pub const FINALIZER: &str = "terrain.dev/destroy";
/// The field manager of the operator's status writes.
pub const MANAGER: &str = "terrain-operator";
/// Set (to a time) by `terrain stack plan` to ask for a plan now.
pub const PLAN_REQUESTED: &str = "terrain.dev/plan-requested";

/// How the operator runs.
pub struct Settings {
    /// Only Stacks of this namespace; all when `None`.
    pub namespace: Option<String>,
    /// Where Stacks' files are written (one directory each).
    pub work: PathBuf,
    /// How long to wait before retrying a Stack whose plan or apply failed.
    pub retry: Duration,
    /// The Lease this replica holds, recorded with the state locks it takes.
    pub lease: Option<crate::state::LeaseHold>,
}

/// One reconcile's plan and what is known of it.
struct Round<'a> {
    stack: &'a Stack,
    job: Job,
    planned: Planned,
    facts: Facts,
    /// Whether its changes are drift, and the fields that drifted.
    drift: bool,
    drifted: Vec<String>,
    /// When to plan again.
    interval: Duration,
}

/// What every reconcile shares.
pub struct Context {
    client: Client,
    runner: Arc<dyn Runner>,
    /// `reportingInstance` of the Events written: the pod, or the host.
    instance: String,
    settings: Settings,
    metrics: Arc<Metrics>,
}

/// Runs the controller until SIGTERM or Ctrl-C (letting the reconciles under way
/// finish), counting into `metrics`.
pub async fn run(
    client: Client,
    runner: Arc<dyn Runner>,
    settings: Settings,
    metrics: Arc<Metrics>,
) {
    let stacks: Api<Stack> = match &settings.namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let maps: Api<ConfigMap> = match &settings.namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let instance = std::env::var("POD_NAME")
        .unwrap_or_else(|_| gethostname::gethostname().to_string_lossy().into_owned());
    let ctx = Arc::new(Context {
        instance,
        client,
        runner,
        settings,
        metrics: metrics.clone(),
    });
    let controller = Controller::new(stacks.clone(), watcher::Config::default());
    let store = controller.store();
    metrics.watch(store.clone());
    controller
        // A commit is a changed ConfigMap: the Stacks reading it plan at once.
        .watches(maps, watcher::Config::default(), move |cm: ConfigMap| {
            let ns = cm.namespace().unwrap_or_default();
            let name = cm.name_any();
            store
                .state()
                .into_iter()
                .filter(|s| {
                    s.namespace().as_deref() == Some(ns.as_str())
                        && s.spec
                            .source
                            .config_map
                            .as_ref()
                            .is_some_and(|c| c.name == name)
                })
                .map(|s| ObjectRef::from_obj(&*s))
                .collect::<Vec<_>>()
        })
        .shutdown_on_signal()
        .run(reconcile, error_policy, ctx)
        .for_each(|result| {
            metrics.reconciled(result.is_ok());
            async move {
                match result {
                    Ok((stack, _)) => {
                        crate::output::operator::log("info", &stack.to_string(), "reconciled")
                    }
                    Err(e) => {
                        crate::output::operator::log("error", "", &format!("reconcile failed: {e}"))
                    }
                }
            }
        })
        .await;
}

/// A reconcile's failure, as the runtime retries it.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("{0}")]
    Operator(#[from] OperatorError),
    #[error("finalizer: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<OperatorError>>),
}

async fn reconcile(stack: Arc<Stack>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    let ns = stack.namespace().unwrap_or_default();
    let api: Api<Stack> = Api::namespaced(ctx.client.clone(), &ns);
    let ctx = ctx.clone();
    finalizer(&api, FINALIZER, stack, |event| async {
        match event {
            Finalized::Apply(s) => ctx.converge(&s).await,
            Finalized::Cleanup(s) => ctx.cleanup(&s).await,
        }
    })
    .await
    .map_err(|e| ReconcileError::Finalizer(Box::new(e)))
}

fn error_policy(_stack: Arc<Stack>, _error: &ReconcileError, ctx: Arc<Context>) -> Action {
    Action::requeue(ctx.settings.retry)
}

/// The interval of `stack`.
fn interval(stack: &Stack) -> Result<Duration, String> {
    terrain_providers::local::duration::parse_duration(&stack.spec.interval)
        .filter(|d| !d.is_zero())
        .ok_or_else(|| {
            format!(
                "spec.interval {:?} is not a duration; use e.g. 30s, 5m, 1h",
                stack.spec.interval
            )
        })
}

/// The interval of `stack`, jittered by up to a tenth either way.
fn next_plan(stack: &Stack) -> Result<Duration, String> {
    let base = interval(stack)?;
    let tenth = base.as_secs_f64() / 10.0;
    let jitter = rand::random::<f64>() * 2.0 * tenth - tenth;
    Ok(Duration::from_secs_f64(
        (base.as_secs_f64() + jitter).max(1.0),
    ))
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// How long until `stack` is due for a plan, when it is not due now: its spec, its
/// inputs (`inputs`, their content hash) and its plan requests are as when it was last
/// planned, and its interval has not passed since. Every status write is a change of
/// the Stack its watch sees: without this, each plan would set off the next.
/// A Stack whose last plan or apply failed is due at once (the retry), and so is one
/// whose apply was cut short (the operator killed mid-way): its
/// state lock is released and its changes finished by the replica that goes on, not
/// an interval later.
fn not_due(stack: &Stack, inputs: &str) -> Option<Duration> {
    let status = stack.status.as_ref()?;
    let interrupted = status
        .conditions
        .iter()
        .any(|c| c.type_ == "Reconciling" && c.status == "True" && c.reason == "Applying");
    // A plan or apply that failed is tried again at `--retry`, not an interval later.
    let failed = status.conditions.iter().any(|c| {
        c.type_ == "Ready"
            && c.status == "False"
            && (c.reason == "PlanFailed" || c.reason == "ApplyFailed")
    });
    if interrupted || failed {
        return None;
    }
    let asked = stack.annotations().get(PLAN_REQUESTED).map(String::as_str);
    let same = status.observed_generation == stack.meta().generation
        && status.planned_inputs.as_deref() == Some(inputs)
        && status.plan_request.as_deref() == asked;
    if !same {
        return None;
    }
    let last = chrono::DateTime::parse_from_rfc3339(status.last_planned.as_deref()?).ok()?;
    let since = (chrono::Utc::now() - last.with_timezone(&chrono::Utc))
        .to_std()
        .ok()?;
    interval(stack)
        .ok()?
        .checked_sub(since)
        .filter(|left| *left > Duration::from_millis(200))
}

/// Sets condition `type_` in `status`, keeping its transition time when its status
/// does not change.
fn set(
    status: &mut StackStatus,
    generation: Option<i64>,
    type_: &str,
    on: bool,
    reason: &str,
    message: &str,
) {
    let value = if on { "True" } else { "False" };
    let since = status
        .conditions
        .iter()
        .find(|c| c.type_ == type_ && c.status == value)
        .map(|c| c.last_transition_time.clone());
    status.conditions.retain(|c| c.type_ != type_);
    status.conditions.push(Condition {
        type_: type_.to_string(),
        status: value.to_string(),
        reason: reason.to_string(),
        message: message.to_string(),
        last_transition_time: since.unwrap_or_else(now),
        observed_generation: generation,
    });
    status.conditions.sort_by(|a, b| a.type_.cmp(&b.type_));
}

impl Context {
    fn api(&self, stack: &Stack) -> Api<Stack> {
        Api::namespaced(self.client.clone(), &stack.namespace().unwrap_or_default())
    }

    /// `stack` as the API server has it now; `None` once it is gone.
    async fn fresh(&self, stack: &Stack) -> Result<Option<Stack>, OperatorError> {
        self.api(stack)
            .get_opt(&stack.name_any())
            .await
            .map_err(|source| OperatorError::Kube {
                call: format!("get stacks/{}", stack.name_any()),
                source,
            })
    }

    async fn write_status(&self, stack: &Stack, status: &StackStatus) -> Result<(), OperatorError> {
        let patch = json!({"apiVersion": API_VERSION, "kind": "Stack", "status": status});
        self.api(stack)
            .patch_status(
                &stack.name_any(),
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(&patch),
            )
            .await
            .map_err(|source| OperatorError::Kube {
                call: format!("apply stacks/{}/status", stack.name_any()),
                source,
            })?;
        Ok(())
    }

    /// Writes an `events.k8s.io/v1` Event about `stack`. Each is its own object: kube's
    /// recorder folds Events of one reason into a series that keeps only the first
    /// note, which would hide every digest applied after the first. The callers write
    /// one only when there is news (not at every retry).
    async fn event(&self, stack: &Stack, warning: bool, reason: &str, action: &str, note: String) {
        let ns = stack.namespace().unwrap_or_default();
        let now = chrono::Utc::now();
        let name = format!(
            "{}.{:x}",
            stack.name_any(),
            now.timestamp_nanos_opt().unwrap_or_default()
        );
        let event = json!({
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": ns},
            "eventTime": now.to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
            "reportingController": MANAGER,
            "reportingInstance": self.instance,
            "action": action,
            "reason": reason,
            // The API server refuses notes over 1 kB.
            "note": note.chars().take(1000).collect::<String>(),
            "type": if warning { "Warning" } else { "Normal" },
            "regarding": stack.object_ref(&()),
        });
        let Ok(event) = serde_json::from_value::<k8s_openapi::api::events::v1::Event>(event) else {
            return;
        };
        let api: Api<k8s_openapi::api::events::v1::Event> =
            Api::namespaced(self.client.clone(), &ns);
        // An Event is news, not state: one that cannot be written is not a failure.
        if let Err(e) = api.create(&kube::api::PostParams::default(), &event).await {
            crate::output::operator::log(
                "warn",
                &format!("{ns}/{}", stack.name_any()),
                &format!("write an Event: {e}"),
            );
        }
    }

    /// The job of `stack`, its inputs read and its files written.
    async fn job(&self, stack: &Stack, destroy: bool) -> Result<(Job, String), OperatorError> {
        let ns = stack.namespace().unwrap_or_default();
        let inputs = source::read(
            &self.client,
            &ns,
            &stack.name_any(),
            &stack.spec,
            &self.settings.work,
        )
        .await?;
        let hash = digest::inputs_hash(&inputs.files, stack.spec.env.as_deref(), &inputs.vars);
        let job = Job {
            dir: inputs.dir,
            env: stack.spec.env.clone(),
            vars: inputs.vars.into_iter().collect(),
            secrets: inputs.secrets,
            backend: stack.spec.backend.clone(),
            destroy,
            lease: self.settings.lease.clone(),
        };
        Ok((job, hash))
    }

    /// Plans a Stack that is not being deleted and applies what is approved.
    async fn converge(&self, cached: &Stack) -> Result<Action, OperatorError> {
        // The watch's copy may predate this operator's own last status write (or the
        // latest approval): decide from the Stack as it is now.
        let Some(stack) = self.fresh(cached).await? else {
            return Ok(Action::await_change());
        };
        let stack = &stack;
        let generation = stack.meta().generation;
        let mut status = stack.status.clone().unwrap_or_default();
        status.observed_generation = generation;
        if stack.spec.suspend {
            set(
                &mut status,
                generation,
                "Reconciling",
                false,
                "Suspended",
                "spec.suspend is set: nothing is planned or applied",
            );
            self.write_status(stack, &status).await?;
            return Ok(Action::await_change());
        }
        let interval = match next_plan(stack) {
            Ok(d) => d,
            Err(message) => return self.stalled(stack, status, "InvalidSpec", &message).await,
        };
        let (job, inputs) = match self.job(stack, false).await {
            Ok(j) => j,
            Err(e @ OperatorError::Source { .. }) => {
                return self
                    .stalled(stack, status, "SourceUnavailable", &e.to_string())
                    .await
            }
            Err(e) => return Err(e),
        };
        if let Some(left) = not_due(stack, &inputs) {
            return Ok(Action::requeue(left));
        }
        let started = std::time::Instant::now();
        let planned = self.runner.plan(&job).await;
        self.metrics.planned(started.elapsed(), planned.is_ok());
        let planned = match planned {
            Ok(p) => p,
            Err(e) => return self.failed(stack, status, &job, e, "PlanFailed").await,
        };
        status.planned_inputs = Some(inputs.clone());
        status.last_planned =
            Some(chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true));
        status.plan_request = stack.annotations().get(PLAN_REQUESTED).cloned();
        match &planned.locked {
            Some(holder) => set(
                &mut status,
                generation,
                "Locked",
                true,
                "LockHeld",
                &format!("the state lock is held by {holder}"),
            ),
            None => set(&mut status, generation, "Locked", false, "Unlocked", ""),
        }
        status.outputs = visible(&planned.outputs);
        let facts = Facts {
            digest: digest::plan_digest(
                &planned.plan,
                &inputs,
                status.last_applied_digest.as_deref(),
            ),
            inputs: inputs.clone(),
            has_changes: planned.plan.has_changes(),
            disruptive: !digest::disruptions(&planned.plan).is_empty(),
        };
        let drift = decide::is_drift(&status, &facts);
        let drifted = if drift {
            digest::drifted_fields(&planned.plan, &stack.spec.drift.ignore)
        } else {
            Vec::new()
        };
        let decision = decide::decide(&stack.spec, &status, &facts);
        let round = Round {
            stack,
            job,
            planned,
            facts,
            drift,
            drifted,
            interval,
        };
        match decision {
            Decision::Converged => self.settled(&round, status).await,
            Decision::Apply { why } => self.apply(&round, status, why).await,
            Decision::Wait { superseded, drift } => {
                self.hold(&round, status, superseded, drift).await
            }
        }
    }

    /// Records that the live objects match the stack.
    async fn settled(
        &self,
        round: &Round<'_>,
        mut status: StackStatus,
    ) -> Result<Action, OperatorError> {
        let generation = round.stack.meta().generation;
        status.pending_plan = None;
        status.superseded_approval = None;
        status.drifted.clear();
        // The live objects match these inputs, whoever made them so (an apply cut short
        // after its last change, by a replica that died before saying so): a change
        // from them later is drift.
        status.last_applied_inputs = Some(round.facts.inputs.clone());
        for type_ in ["Drifted", "PlanPending", "Reconciling", "Stalled"] {
            let reason = if type_ == "Drifted" {
                "NoDrift"
            } else {
                "UpToDate"
            };
            set(&mut status, generation, type_, false, reason, "");
        }
        set(
            &mut status,
            generation,
            "Ready",
            true,
            "UpToDate",
            "the live objects match the stack",
        );
        self.write_status(round.stack, &status).await?;
        Ok(Action::requeue(round.interval))
    }

    /// Stores a plan that waits for approval and says so: in the status, and in an
    /// Event when it is new, supersedes an approval, or shows new drift.
    async fn hold(
        &self,
        round: &Round<'_>,
        mut status: StackStatus,
        superseded: Option<String>,
        drift: bool,
    ) -> Result<Action, OperatorError> {
        let (stack, generation) = (round.stack, round.stack.meta().generation);
        let pending = match self
            .pending(
                &round.job,
                &round.planned,
                &round.facts.digest,
                status.pending_plan.as_ref(),
            )
            .await
        {
            Ok(p) => p,
            Err(e) => {
                return self
                    .failed(stack, status, &round.job, e, "PlanNotStored")
                    .await
            }
        };
        let fresh = status.pending_plan.as_ref().map(|p| &p.digest) != Some(&pending.digest);
        let newly = superseded.is_some() && status.superseded_approval != superseded;
        status.superseded_approval.clone_from(&superseded);
        if let Some(old) = superseded.as_ref().filter(|_| newly) {
            self.event(stack, true, "PlanSuperseded", "Plan", format!("approved plan {old} was superseded by {}: the stack's inputs, its state or the live objects changed since; approve the new plan", pending.digest)).await;
        }
        if drift {
            let fields = format!("changed outside the stack: {}", round.drifted.join(", "));
            if status.drifted != round.drifted {
                self.metrics.drifted();
                self.event(stack, true, "DriftDetected", "Plan", fields.clone())
                    .await;
            }
            status.drifted.clone_from(&round.drifted);
            set(
                &mut status,
                generation,
                "Drifted",
                true,
                "ChangedOutside",
                &fields,
            );
        }
        let counts = counts(&pending);
        let (reason, message) = match (&superseded, drift) {
            (Some(old), _) => (
                "Superseded",
                format!(
                    "{old} was approved but the plan is now {} ({counts}); approve it to apply",
                    pending.digest
                ),
            ),
            (None, true) if stack.spec.drift.mode == super::crd::DriftMode::Report => (
                "DriftAwaitingApproval",
                format!(
                    "plan {} puts the drift back ({counts}); approve it to apply",
                    pending.digest
                ),
            ),
            _ => (
                "AwaitingApproval",
                format!("plan {} ({counts}) waits for approval", pending.digest),
            ),
        };
        if fresh && superseded.is_none() {
            self.event(stack, false, "PlanPending", "Plan", message.clone())
                .await;
        }
        status.pending_plan = Some(pending);
        set(
            &mut status,
            generation,
            "PlanPending",
            true,
            reason,
            &message,
        );
        set(&mut status, generation, "Reconciling", false, reason, "");
        set(&mut status, generation, "Stalled", false, reason, "");
        set(&mut status, generation, "Ready", false, reason, &message);
        self.write_status(stack, &status).await?;
        Ok(Action::requeue(round.interval))
    }

    /// Applies a plan that was let through, and records it.
    async fn apply(
        &self,
        round: &Round<'_>,
        mut status: StackStatus,
        why: Why,
    ) -> Result<Action, OperatorError> {
        let Round {
            stack,
            job,
            planned,
            facts,
            drift,
            drifted,
            interval,
        } = round;
        let (stack, drift, interval) = (*stack, *drift, *interval);
        let generation = stack.meta().generation;
        let s = planned.plan.summary();
        let counts = format!(
            "{} to add, {} to change, {} to replace, {} to destroy",
            s.add, s.change, s.replace, s.destroy
        );
        set(
            &mut status,
            generation,
            "Reconciling",
            true,
            "Applying",
            &format!("applying {} ({counts})", facts.digest),
        );
        self.write_status(stack, &status).await?;
        let started = std::time::Instant::now();
        let applied = self.runner.apply(job, planned).await;
        self.metrics.applied(started.elapsed(), applied.is_ok());
        let outputs = match applied {
            Ok(o) => o,
            Err(RunError::Stale { message }) => {
                // The state moved between plan and apply: plan again now, never apply
                // what was planned against another state.
                set(
                    &mut status,
                    generation,
                    "Reconciling",
                    true,
                    "Replanning",
                    &hide(&message, &job.secrets),
                );
                self.write_status(stack, &status).await?;
                return Ok(Action::requeue(Duration::from_secs(1)));
            }
            Err(e) => return self.failed(stack, status, job, e, "ApplyFailed").await,
        };
        let by = match why {
            Why::Approved => "approved by digest",
            Why::Auto => "approval mode Auto",
            Why::NonDisruptive => "non-disruptive, approval mode AutoIfNonDisruptive",
        };
        self.event(
            stack,
            false,
            "Applied",
            "Apply",
            format!("applied {} ({counts}; {by})", facts.digest),
        )
        .await;
        if drift {
            self.event(
                stack,
                false,
                "DriftCorrected",
                "Apply",
                format!("put back: {}", drifted.join(", ")),
            )
            .await;
        }
        status.last_applied_digest = Some(facts.digest.clone());
        status.superseded_approval = None;
        status.last_applied_inputs = Some(facts.inputs.clone());
        status.pending_plan = None;
        status.drifted.clear();
        status.outputs = visible(&outputs);
        set(
            &mut status,
            generation,
            "Drifted",
            false,
            if drift { "Corrected" } else { "NoDrift" },
            "",
        );
        set(&mut status, generation, "PlanPending", false, "Applied", "");
        set(&mut status, generation, "Reconciling", false, "Applied", "");
        set(&mut status, generation, "Stalled", false, "Applied", "");
        set(
            &mut status,
            generation,
            "Ready",
            true,
            "Applied",
            &format!("applied {}", facts.digest),
        );
        self.write_status(stack, &status).await?;
        Ok(Action::requeue(interval))
    }

    /// Stores the plan of a pending `planned` and describes it (unless it is `before`,
    /// the plan pending already).
    async fn pending(
        &self,
        job: &Job,
        planned: &Planned,
        digest: &str,
        before: Option<&PendingPlan>,
    ) -> Result<PendingPlan, RunError> {
        // The same plan as at the last interval: stored already, and described.
        if let Some(p) = before.filter(|p| p.digest == digest) {
            return Ok(p.clone());
        }
        let plan = &planned.plan;
        let location = self
            .runner
            .store_plan(job, &digest::plan_file(digest), plan)
            .await?;
        let s = plan.summary();
        let disruptions = digest::disruptions(plan);
        let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        Ok(PendingPlan {
            digest: digest.to_string(),
            serial: plan.serial,
            lineage: plan.lineage.clone(),
            add: count(s.add),
            change: count(s.change),
            replace: count(s.replace),
            destroy: count(s.destroy),
            destroy_all: plan.destroy,
            disruptive: !disruptions.is_empty(),
            disruptions,
            cost_delta: plan
                .cost
                .as_ref()
                .map(|c| format!("{:+.2}", c.after.1 - c.before.1)),
            location,
            state: planned.state.clone(),
            planned_at: now(),
        })
    }

    async fn stalled(
        &self,
        stack: &Stack,
        mut status: StackStatus,
        reason: &str,
        message: &str,
    ) -> Result<Action, OperatorError> {
        let generation = stack.meta().generation;
        set(&mut status, generation, "Stalled", true, reason, message);
        set(&mut status, generation, "Reconciling", false, reason, "");
        set(&mut status, generation, "Ready", false, reason, message);
        self.write_status(stack, &status).await?;
        let fresh = stack.status.as_ref().is_none_or(|s| {
            !s.conditions
                .iter()
                .any(|c| c.type_ == "Stalled" && c.status == "True" && c.message == message)
        });
        if fresh {
            self.event(stack, true, reason, "Reconcile", message.to_string())
                .await;
        }
        // Only a change of the Stack or its sources (which trigger a reconcile at once)
        // can fix it: look again at the interval, not at the retry's pace.
        let later = next_plan(stack).unwrap_or(self.settings.retry);
        Ok(Action::requeue(later.max(self.settings.retry)))
    }

    async fn failed(
        &self,
        stack: &Stack,
        mut status: StackStatus,
        job: &Job,
        error: RunError,
        reason: &str,
    ) -> Result<Action, OperatorError> {
        let generation = stack.meta().generation;
        let message = hide(&error.to_string(), &job.secrets);
        match &error {
            RunError::Invalid { .. } => {
                return self.stalled(stack, status, "InvalidStack", &message).await
            }
            RunError::Locked { holder, .. } => {
                set(
                    &mut status,
                    generation,
                    "Locked",
                    true,
                    "LockHeld",
                    &format!("the state lock is held by {holder}: {message}"),
                );
            }
            RunError::Stale { .. } | RunError::Failed { .. } => {}
        }
        let repeated = status
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.reason == reason && c.message == message);
        set(&mut status, generation, "Reconciling", false, reason, "");
        set(&mut status, generation, "Ready", false, reason, &message);
        self.write_status(stack, &status).await?;
        // One Event per failure, not one per retry.
        if !repeated {
            self.event(stack, true, reason, "Reconcile", message).await;
        }
        Ok(Action::requeue(self.settings.retry))
    }

    /// A Stack being deleted: under `Orphan` it just goes; under `Destroy` its destroy
    /// plan is held to approval like any other, and the finalizer stays until applied.
    async fn cleanup(&self, cached: &Stack) -> Result<Action, OperatorError> {
        if cached.spec.deletion_policy == DeletionPolicy::Orphan {
            return Ok(Action::await_change());
        }
        let Some(stack) = self.fresh(cached).await? else {
            return Ok(Action::await_change());
        };
        let stack = &stack;
        let generation = stack.meta().generation;
        let mut status = stack.status.clone().unwrap_or_default();
        let (job, inputs) = self.job(stack, true).await?;
        let planned = self.runner.plan(&job).await?;
        if !planned.plan.has_changes() {
            return Ok(Action::await_change());
        }
        let facts = Facts {
            digest: digest::plan_digest(
                &planned.plan,
                &inputs,
                status.last_applied_digest.as_deref(),
            ),
            inputs,
            has_changes: true,
            disruptive: true,
        };
        let mut spec = stack.spec.clone();
        // Nothing here is drift: a destroy is judged as the plan it is.
        status.last_applied_inputs = None;
        spec.drift.mode = super::crd::DriftMode::Correct;
        match decide::decide(&spec, &status, &facts) {
            Decision::Apply { .. } => {
                self.runner.apply(&job, &planned).await?;
                self.event(
                    stack,
                    false,
                    "Destroyed",
                    "Destroy",
                    format!("applied destroy plan {}", facts.digest),
                )
                .await;
                Ok(Action::await_change())
            }
            Decision::Converged | Decision::Wait { .. } => {
                let pending = self
                    .pending(&job, &planned, &facts.digest, status.pending_plan.as_ref())
                    .await?;
                let message = format!(
                    "destroy plan {} ({}) waits for approval; the Stack stays until it is applied",
                    pending.digest,
                    counts(&pending)
                );
                if status.pending_plan.as_ref().map(|p| &p.digest) != Some(&pending.digest) {
                    self.event(stack, false, "PlanPending", "Destroy", message.clone())
                        .await;
                }
                status.pending_plan = Some(pending);
                set(
                    &mut status,
                    generation,
                    "PlanPending",
                    true,
                    "DestroyAwaitingApproval",
                    &message,
                );
                self.write_status(stack, &status).await?;
                Err(OperatorError::DestroyPending {
                    digest: facts.digest,
                })
            }
        }
    }
}

fn counts(p: &PendingPlan) -> String {
    format!(
        "{} to add, {} to change, {} to replace, {} to destroy",
        p.add, p.change, p.replace, p.destroy
    )
}

/// The outputs a status may show: the non-sensitive ones.
fn visible(
    outputs: &BTreeMap<String, crate::state::OutputState>,
) -> BTreeMap<String, serde_json::Value> {
    outputs
        .iter()
        .filter(|(_, o)| !o.sensitive)
        .map(|(k, o)| (k.clone(), o.value.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operator::crd::{ConfigMapSource, Source, StackSpec};

    fn stack(generation: i64, status: Option<StackStatus>) -> Stack {
        let spec: StackSpec = serde_json::from_value(json!({
            "source": {"configMap": {"name": "files"}}, "interval": "5m"
        }))
        .expect("spec");
        assert_eq!(
            spec.source,
            Source {
                config_map: Some(ConfigMapSource {
                    name: "files".into()
                }),
                git: None
            }
        );
        let mut s = Stack::new("data", spec);
        s.metadata.generation = Some(generation);
        s.status = status;
        s
    }

    fn planned(ago: chrono::Duration) -> StackStatus {
        StackStatus {
            observed_generation: Some(2),
            planned_inputs: Some("sha256:in".into()),
            last_planned: Some((chrono::Utc::now() - ago).to_rfc3339()),
            ..StackStatus::default()
        }
    }

    #[test]
    fn a_stack_planned_within_its_interval_from_the_same_inputs_is_not_due() {
        let left = not_due(
            &stack(2, Some(planned(chrono::Duration::seconds(60)))),
            "sha256:in",
        )
        .expect("not due");
        assert!(
            left <= Duration::from_secs(240) && left > Duration::from_secs(230),
            "{left:?}"
        );
        // Never planned, its interval passed, a new spec, new inputs, a plan asked for.
        assert_eq!(not_due(&stack(2, None), "sha256:in"), None);
        assert_eq!(
            not_due(
                &stack(2, Some(planned(chrono::Duration::minutes(6)))),
                "sha256:in"
            ),
            None
        );
        assert_eq!(
            not_due(
                &stack(3, Some(planned(chrono::Duration::seconds(1)))),
                "sha256:in"
            ),
            None
        );
        assert_eq!(
            not_due(
                &stack(2, Some(planned(chrono::Duration::seconds(1)))),
                "sha256:new"
            ),
            None
        );
        let mut cut_short = planned(chrono::Duration::seconds(1));
        set(
            &mut cut_short,
            Some(2),
            "Reconciling",
            true,
            "Applying",
            "applying sha256:ab",
        );
        assert_eq!(not_due(&stack(2, Some(cut_short)), "sha256:in"), None);
        let mut apply_failed = planned(chrono::Duration::seconds(1));
        set(
            &mut apply_failed,
            Some(2),
            "Ready",
            false,
            "ApplyFailed",
            "409",
        );
        assert_eq!(not_due(&stack(2, Some(apply_failed)), "sha256:in"), None);
        let mut asked = stack(2, Some(planned(chrono::Duration::seconds(1))));
        asked.metadata.annotations = Some([(PLAN_REQUESTED.to_string(), "now".to_string())].into());
        assert_eq!(not_due(&asked, "sha256:in"), None);
    }
}
