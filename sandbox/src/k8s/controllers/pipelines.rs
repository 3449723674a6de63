//! The Kubeflow Pipelines run controller: what KFP's Argo workflow and its v2 launcher do
//! for a run, done on the cluster's objects in every settle round. A task of the run
//! becomes a pod (shaped by `k8s/kfp/runs.rs`) once the tasks it depends on succeeded;
//! the scheduler and kubelet run it like any pod; its phase becomes the task's state; a
//! failed attempt is retried after its backoff up to `retryPolicy.maxRetryCount`; the run
//! ends SUCCEEDED, FAILED or CANCELED from its tasks. After a task fails no new task
//! starts, tasks already running finish, and then the run is FAILED (Argo's fail-fast).
//! Finished pods stay until their run is deleted.
//!
//! Spot reclaims of task pods (the `spotReclaims` fault) land here too: a running task
//! pod on a Spot or preemptible node is reclaimed halfway through its run when the
//! seeded draw for its run, task and attempt falls under the rate, so a seed replays the
//! same reclaims; the kubelet's preemption fails the pod and the retry policy takes over.

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use super::{kubelet, scaled};
use crate::common::ids::new_uid;
use crate::k8s::kfp::runs::{
    duration_secs, finished_at, reclaim_roll, run_namespace, set_run_state, set_task_state,
    started_at, task_defs, task_pod, terminal, why_failed, TaskDef,
};
use crate::k8s::kfp::{Run, Task};
use crate::k8s::obj;
use crate::k8s::store::{timestamp, ObjKey};
use crate::k8s::{defaults, discovery, ClusterState, SettleCtx};

/// Argo's Workflow resource, present once KFP's manifests installed its CRD.
const WORKFLOWS: (&str, &str, &str) = ("argoproj.io", "v1alpha1", "workflows");

fn workflow_key(run: &Run) -> ObjKey {
    ObjKey::new(
        WORKFLOWS.0,
        WORKFLOWS.2,
        run_namespace(&run.kube_namespace),
        &run.workflow,
    )
}

/// Keeps the run's Argo Workflow (when Argo's CRD is installed) in step with the run, so
/// `kubectl get workflows -n kubeflow` shows the run as it does on a real install; its
/// pods are owned by it.
fn sync_workflow(cluster: &mut ClusterState, run: &Run, now: DateTime<Utc>) {
    let (group, version, plural) = WORKFLOWS;
    if discovery::find(cluster, group, version, plural).is_none() {
        return;
    }
    let phase = match run.state.as_str() {
        "PENDING" => "Pending",
        "RUNNING" | "CANCELING" => "Running",
        "SUCCEEDED" => "Succeeded",
        _ => "Failed",
    };
    let key = workflow_key(run);
    let Some(mut wf) = cluster.store.get(&key).cloned() else {
        let mut wf = json!({
            "apiVersion": format!("{group}/{version}"),
            "kind": "Workflow",
            "metadata": {
                "name": run.workflow,
                "namespace": key.namespace,
                "labels": {
                    "pipeline/runid": run.run_id,
                    "pipelines.kubeflow.org/v2_component": "true",
                    "workflows.argoproj.io/phase": phase,
                },
            },
            "spec": {
                "entrypoint": "entrypoint",
                "serviceAccountName": run.service_account,
                "podMetadata": {"labels": {"pipeline/runid": run.run_id}},
            },
            "status": {"phase": phase, "startedAt": run.created_at, "finishedAt": null},
        });
        if defaults::on_create(&key, &mut wf, cluster).is_ok() {
            cluster.store.insert_new(key, wf, now);
        }
        return;
    };
    if wf["status"]["phase"] == phase {
        return;
    }
    obj::set(&mut wf, &["status", "phase"], json!(phase));
    obj::set(
        &mut wf,
        &["metadata", "labels", "workflows.argoproj.io/phase"],
        json!(phase),
    );
    if terminal(&run.state) {
        obj::set(&mut wf, &["status", "finishedAt"], json!(run.finished_at));
        obj::set(
            &mut wf,
            &["metadata", "labels", "workflows.argoproj.io/completed"],
            json!("true"),
        );
        if let Some(e) = &run.error {
            obj::set(&mut wf, &["status", "message"], json!(e));
        }
    }
    cluster.store.update(&key, wf);
}

/// Brings every unfinished run up to date with its pods and starts what is due.
pub(super) fn sync(cluster: &mut ClusterState, ctx: &SettleCtx<'_>) {
    let ids: Vec<String> = cluster
        .kfp
        .runs
        .iter()
        .filter(|(_, r)| r.active())
        .map(|(id, _)| id.clone())
        .collect();
    for id in ids {
        let Some(mut run) = cluster.kfp.runs.get(&id).cloned() else {
            continue;
        };
        sync_workflow(cluster, &run, ctx.now);
        sync_run(cluster, ctx, &mut run);
        sync_workflow(cluster, &run, ctx.now);
        cluster.kfp.runs.insert(id, run);
    }
}

fn sync_run(cluster: &mut ClusterState, ctx: &SettleCtx<'_>, run: &mut Run) {
    let now = ctx.now;
    let spec = run.spec.clone();
    let defs = task_defs(&spec);
    let canceling = run.state == "CANCELING";
    for task in run.tasks.iter_mut() {
        if !terminal(&task.state) && task.retry_at.is_none() {
            let def = defs.iter().find(|d| d.key == task.key);
            observe(
                cluster,
                run_namespace(&run.kube_namespace),
                task,
                def,
                canceling,
                ctx,
            );
        }
        if canceling && task.retry_at.is_some() {
            task.retry_at = None;
            set_task_state(task, "CANCELED", now);
            task.end_time = Some(timestamp(now));
        }
    }
    if !canceling {
        // After a failure no new task starts, but retries already due still run.
        let failed = run.tasks.iter().any(|t| t.state == "FAILED");
        start_due(cluster, ctx, run, &defs, !failed);
    }
    let active = run.tasks.iter().any(|t| !terminal(&t.state));
    if canceling {
        if !active {
            set_run_state(run, "CANCELED", now);
        }
        return;
    }
    if let Some(f) = run.tasks.iter().find(|t| t.state == "FAILED") {
        if !active {
            run.error = Some(format!(
                "task {} failed: {}",
                f.display_name,
                f.error.as_deref().unwrap_or("unknown error")
            ));
            set_run_state(run, "FAILED", now);
        }
        return;
    }
    let done = defs.iter().all(|d| {
        run.tasks
            .iter()
            .any(|t| t.key == d.key && t.state == "SUCCEEDED")
    });
    if done {
        set_run_state(run, "RUNNING", now);
        set_run_state(run, "SUCCEEDED", now);
    } else if !run.tasks.is_empty() {
        set_run_state(run, "RUNNING", now);
    }
}

/// Follows a task's current attempt: its pod's phase becomes the task's state; a failed
/// attempt is retried while the retry policy allows.
fn observe(
    cluster: &ClusterState,
    namespace: &str,
    task: &mut Task,
    def: Option<&TaskDef<'_>>,
    canceling: bool,
    ctx: &SettleCtx<'_>,
) {
    let now = ctx.now;
    let Some(pod_name) = task.pods.last() else {
        return;
    };
    let pod = cluster
        .store
        .get(&ObjKey::new("", "pods", namespace, pod_name));
    let phase = pod.and_then(|p| p["status"]["phase"].as_str());
    if canceling && !matches!(phase, Some("Succeeded")) {
        if pod.is_none() || matches!(phase, Some("Failed")) {
            set_task_state(task, "CANCELED", now);
            task.end_time = Some(timestamp(now));
        }
        return;
    }
    match (pod, phase) {
        (Some(p), Some("Succeeded")) => {
            task.start_time
                .get_or_insert_with(|| started_at(p).unwrap_or_else(|| timestamp(now)));
            task.end_time = Some(finished_at(p).unwrap_or_else(|| timestamp(now)));
            task.error = None;
            set_task_state(task, "SUCCEEDED", now);
        }
        (Some(p), Some("Running")) => {
            task.start_time
                .get_or_insert_with(|| started_at(p).unwrap_or_else(|| timestamp(now)));
            set_task_state(task, "RUNNING", now);
        }
        (Some(p), Some("Failed")) => attempt_failed(task, def, why_failed(p), ctx),
        (None, _) => attempt_failed(task, def, format!("pod {pod_name} was deleted"), ctx),
        _ => {}
    }
}

fn attempt_failed(task: &mut Task, def: Option<&TaskDef<'_>>, why: String, ctx: &SettleCtx<'_>) {
    let now = ctx.now;
    let policy = def.map(|d| &d.spec["retryPolicy"]).unwrap_or(&Value::Null);
    let max_retries = policy["maxRetryCount"].as_i64().unwrap_or_default();
    let attempts = task.pods.len() as i64;
    task.error = Some(why);
    if attempts <= max_retries {
        // Argo's backoff: duration × factor^(retries so far), capped.
        let first = duration_secs(&policy["backoffDuration"]);
        let factor = policy["backoffFactor"].as_f64().unwrap_or(2.0).max(1.0);
        let cap = match duration_secs(&policy["backoffMaxDuration"]) {
            c if c > 0.0 => c,
            _ => 3600.0,
        };
        let secs = (first * factor.powi((attempts - 1).clamp(0, 30) as i32)).min(cap);
        task.retry_at = Some(now + scaled(ctx, secs));
        return;
    }
    task.end_time = Some(timestamp(now));
    set_task_state(task, "FAILED", now);
}

/// Starts the tasks whose dependencies all succeeded and the retries whose backoff ended.
fn start_due(
    cluster: &mut ClusterState,
    ctx: &SettleCtx<'_>,
    run: &mut Run,
    defs: &[TaskDef<'_>],
    new_tasks: bool,
) {
    let now = ctx.now;
    // Tasks that run no pod succeed as soon as they are due, which may make others due:
    // loop until nothing more starts.
    loop {
        let mut started = false;
        for def in defs {
            let succeeded = |key: &str| {
                run.tasks
                    .iter()
                    .any(|t| t.key == key && t.state == "SUCCEEDED")
            };
            if let Some(i) = run.tasks.iter().position(|t| t.key == def.key) {
                let due = run.tasks[i].retry_at.is_some_and(|at| at <= now);
                if due {
                    run.tasks[i].retry_at = None;
                    let attempt = run.tasks[i].pods.len();
                    let result = create_pod(cluster, run, def, attempt, now);
                    let task = &mut run.tasks[i];
                    match result {
                        Ok(name) => {
                            task.pods.push(name);
                            set_task_state(task, "PENDING", now);
                        }
                        Err(why) => {
                            task.error = Some(why);
                            task.end_time = Some(timestamp(now));
                            set_task_state(task, "FAILED", now);
                        }
                    }
                    started = true;
                }
                continue;
            }
            if !new_tasks || !def.deps.iter().all(|d| succeeded(d)) {
                continue;
            }
            let mut task = Task {
                task_id: new_uid(),
                key: def.key.to_string(),
                display_name: def.display_name.clone(),
                create_time: timestamp(now),
                start_time: None,
                end_time: None,
                state: String::new(),
                error: None,
                pods: Vec::new(),
                retry_at: None,
                state_history: Vec::new(),
            };
            if def.container.is_none() {
                task.start_time = Some(timestamp(now));
                task.end_time = Some(timestamp(now));
                set_task_state(&mut task, "SUCCEEDED", now);
            } else {
                match create_pod(cluster, run, def, 0, now) {
                    Ok(name) => {
                        task.pods.push(name);
                        set_task_state(&mut task, "PENDING", now);
                    }
                    Err(why) => {
                        task.error = Some(why);
                        task.end_time = Some(timestamp(now));
                        set_task_state(&mut task, "FAILED", now);
                    }
                }
            }
            run.tasks.push(task);
            started = true;
        }
        if !started || !new_tasks || run.tasks.iter().any(|t| t.state == "FAILED") {
            return;
        }
    }
}

/// Marks the task pods whose draw falls under the fault's rate: the kubelet reclaims
/// the Spot VM under such a pod halfway through its run ([`kubelet::SPOT_RECLAIM`]).
/// Runs before the kubelet, so a pod is marked before it starts; the draw depends on
/// the run's name, the task and the attempt only, so a seed gives the same reclaims
/// whenever the settles come.
pub(super) fn reclaim(cluster: &mut ClusterState, ctx: &SettleCtx<'_>) {
    let Some(spot) = ctx.spot_reclaims.filter(|s| s.rate > 0.0) else {
        return;
    };
    let mut doomed = Vec::new();
    for run in cluster.kfp.runs.values().filter(|r| r.state == "RUNNING") {
        let namespace = run_namespace(&run.kube_namespace);
        for task in run.tasks.iter().filter(|t| !terminal(&t.state)) {
            let Some(pod_name) = task.pods.last() else {
                continue;
            };
            let attempt = task.pods.len() - 1;
            if reclaim_roll(spot.seed, &run.display_name, &task.key, attempt) < spot.rate {
                doomed.push(ObjKey::new("", "pods", namespace, pod_name));
            }
        }
    }
    for key in doomed {
        let Some(mut pod) = cluster.store.get(&key).cloned() else {
            continue;
        };
        if obj::annotation(&pod, kubelet::SPOT_RECLAIM).is_some() || obj::deleting(&pod) {
            continue;
        }
        obj::set(
            &mut pod,
            &["metadata", "annotations", kubelet::SPOT_RECLAIM],
            json!("true"),
        );
        cluster.store.update(&key, pod);
    }
}

/// Creates the pod of a task's attempt, defaulted as the API server would; its name, or
/// why it could not be made.
fn create_pod(
    cluster: &mut ClusterState,
    run: &Run,
    def: &TaskDef<'_>,
    attempt: usize,
    now: DateTime<Utc>,
) -> Result<String, String> {
    let (name, mut pod, artifacts) = task_pod(cluster, run, def, attempt);
    if let Some(url) = artifacts {
        // The kubelet writes the results there as the pod's cloud identity as the
        // container ends, and fails it when the cloud refuses.
        obj::set(
            &mut pod,
            &["metadata", "annotations", kubelet::WRITES],
            json!(url),
        );
    }
    if let Some(wf) = cluster.store.get(&workflow_key(run)) {
        obj::set(
            &mut pod,
            &["metadata", "ownerReferences"],
            json!([obj::controller_ref(wf, "argoproj.io/v1alpha1", "Workflow")]),
        );
    }
    let key = ObjKey::new("", "pods", run_namespace(&run.kube_namespace), &name);
    if cluster.store.get(&key).is_some() {
        // Made by an earlier settle whose task record was lost: adopt it.
        return Ok(name);
    }
    defaults::on_create(&key, &mut pod, cluster).map_err(|causes| {
        let why: Vec<String> = causes.iter().map(|c| format!("{c:?}")).collect();
        format!("creating pod {name}: {}", why.join(", "))
    })?;
    cluster.store.insert_new(key, pod, now);
    Ok(name)
}
