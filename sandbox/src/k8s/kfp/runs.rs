//! The run model of the emulated Kubeflow Pipelines: what KFP's compiled workflow says
//! about a run, read from the run's PipelineSpec and platform document. Its tasks
//! ([`task_defs`]: the root DAG's, with their dependencies, executors and retry policies),
//! the pod of a task attempt as KFP's driver shapes it ([`task_pod`]: named after the
//! run's Argo workflow, labelled and annotated as KFP does, the executor's image, command
//! and resources with `{{$.inputs.parameters[…]}}` placeholders filled from the run's
//! parameters, accelerators as limits, the platform document's node selector,
//! tolerations and pod metadata), the state transitions of runs and tasks with their
//! history, the reason a failed attempt reports, and the seeded draw that decides spot
//! reclaims. The run controller that applies all this to the cluster on every settle is
//! `controllers/pipelines.rs`; this file knows no controller.
//!
//! Only root-DAG tasks run pods; a task whose component is a nested DAG or an importer
//! counts as succeeded as soon as it is due.

use chrono::{DateTime, Utc};
use serde_json::{json, Map, Value};

use super::{Run, StateEntry, Task};
use crate::common::hash::fnv64;
use crate::k8s::obj;
use crate::k8s::store::{timestamp, ObjKey};
use crate::k8s::ClusterState;

/// Pod annotation naming the task, as KFP's driver sets it.
pub(crate) const TASK_DISPLAY_NAME: &str = "pipelines.kubeflow.org/task_display_name";
/// Pod label carrying the run id.
pub(crate) const RUN_ID_LABEL: &str = "pipeline/runid";
const WORKFLOW_LABEL: &str = "workflows.argoproj.io/workflow";
const V2_COMPONENT_LABEL: &str = "pipelines.kubeflow.org/v2_component";
/// The ConfigMap (in KFP's namespace) holding the default pipeline root.
const LAUNCHER_CONFIG: &str = "kfp-launcher";

/// Whether a run or task state is final.
pub(crate) fn terminal(state: &str) -> bool {
    matches!(state, "SUCCEEDED" | "FAILED" | "SKIPPED" | "CANCELED")
}

fn record(history: &mut Vec<StateEntry>, state: &str, now: DateTime<Utc>) {
    if history.last().is_some_and(|e| e.state == state) {
        return;
    }
    history.push(StateEntry {
        update_time: timestamp(now),
        state: state.to_string(),
    });
}

/// Moves a task to `state`, recording it in its history.
pub(crate) fn set_task_state(task: &mut Task, state: &str, now: DateTime<Utc>) {
    if task.state != state {
        task.state = state.to_string();
        record(&mut task.state_history, state, now);
    }
}

/// Moves a run to `state`, recording it in its history; a final state dates `finished_at`.
pub(crate) fn set_run_state(run: &mut Run, state: &str, now: DateTime<Utc>) {
    if run.state != state {
        run.state = state.to_string();
        record(&mut run.state_history, state, now);
        if terminal(state) {
            run.finished_at = timestamp(now);
        }
    }
}

/// One task of the run's root DAG, as the spec declares it.
pub(crate) struct TaskDef<'a> {
    pub key: &'a str,
    pub display_name: String,
    pub deps: Vec<&'a str>,
    pub spec: &'a Value,
    /// The executor's `container`, `None` for tasks that run no pod.
    pub container: Option<&'a Value>,
    pub executor_label: &'a str,
}

/// The tasks of the spec's root DAG, by key.
pub(crate) fn task_defs(spec: &Value) -> Vec<TaskDef<'_>> {
    let Some(tasks) = spec["root"]["dag"]["tasks"].as_object() else {
        return Vec::new();
    };
    let mut keys: Vec<&String> = tasks.keys().collect();
    keys.sort();
    keys.into_iter()
        .map(|key| {
            let t = &tasks[key];
            let component =
                &spec["components"][t["componentRef"]["name"].as_str().unwrap_or_default()];
            let executor_label = component["executorLabel"].as_str().unwrap_or_default();
            let container = spec["deploymentSpec"]["executors"][executor_label]["container"]
                .as_object()
                .map(|_| &spec["deploymentSpec"]["executors"][executor_label]["container"]);
            TaskDef {
                key,
                display_name: t["taskInfo"]["name"].as_str().unwrap_or(key).to_string(),
                deps: obj::items(&t["dependentTasks"])
                    .iter()
                    .filter_map(Value::as_str)
                    .collect(),
                spec: t,
                container,
                executor_label,
            }
        })
        .collect()
}

/// The namespace a run's pods go to: KFP's own (`kubeflow` when a run predates it).
pub(crate) fn run_namespace(ns: &str) -> &str {
    if ns.is_empty() {
        "kubeflow"
    } else {
        ns
    }
}

/// When the pod's container started, if it did.
pub(crate) fn started_at(pod: &Value) -> Option<String> {
    obj::items(&pod["status"]["containerStatuses"])
        .iter()
        .find_map(|c| {
            c["state"]["running"]["startedAt"]
                .as_str()
                .or(c["state"]["terminated"]["startedAt"].as_str())
        })
        .map(str::to_string)
}

/// When the pod's container ended, if it did.
pub(crate) fn finished_at(pod: &Value) -> Option<String> {
    obj::items(&pod["status"]["containerStatuses"])
        .iter()
        .find_map(|c| c["state"]["terminated"]["finishedAt"].as_str())
        .map(str::to_string)
}

/// A failed pod's reason, as KFP's run details show it.
pub(crate) fn why_failed(pod: &Value) -> String {
    let name = obj::name(pod);
    if let Some(message) = pod["status"]["message"].as_str().filter(|m| !m.is_empty()) {
        return format!("pod {name} failed: {message}");
    }
    let terminated = obj::items(&pod["status"]["containerStatuses"])
        .iter()
        .find(|c| c["name"] == "main")
        .or_else(|| obj::items(&pod["status"]["containerStatuses"]).first())
        .map(|c| &c["state"]["terminated"]);
    match terminated {
        Some(t) if !t.is_null() => {
            let code = t["exitCode"].as_i64().unwrap_or(1);
            let reason = t["reason"].as_str().unwrap_or("Error");
            match t["message"].as_str().filter(|m| !m.is_empty()) {
                Some(m) => {
                    format!("pod {name}: container main exited with code {code} ({reason}): {m}")
                }
                None => format!("pod {name}: container main exited with code {code} ({reason})"),
            }
        }
        _ => format!("pod {name} failed"),
    }
}

/// `"30s"`, `"1.5s"` (proto Duration JSON) in seconds.
pub(crate) fn duration_secs(v: &Value) -> f64 {
    match v {
        Value::String(s) => s.trim().trim_end_matches('s').parse().unwrap_or_default(),
        Value::Number(n) => n.as_f64().unwrap_or_default(),
        _ => 0.0,
    }
}

/// A JSON value as a placeholder's text: numbers without a needless `.0`.
fn value_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(match n.as_f64() {
            Some(f) if f.fract() == 0.0 && f.abs() < 1e15 => format!("{}", f as i64),
            _ => n.to_string(),
        }),
        Value::Bool(b) => Some(b.to_string()),
        Value::Null => None,
        other => Some(other.to_string()),
    }
}

/// The value of one of a task's input parameters: the run's parameter (or the
/// pipeline's default) it is wired to, or a constant.
fn input_parameter(run: &Run, task: &Value, name: &str) -> Option<String> {
    let input = &task["inputs"]["parameters"][name];
    if let Some(p) = input["componentInputParameter"].as_str() {
        let given = &run.runtime_config["parameters"][p];
        if !given.is_null() {
            return value_text(given);
        }
        return value_text(&run.spec["root"]["inputDefinitions"]["parameters"][p]["defaultValue"]);
    }
    let constant = &input["runtimeValue"]["constant"];
    if !constant.is_null() {
        return value_text(constant);
    }
    value_text(&input["runtimeValue"]["constantValue"]["stringValue"])
}

/// Replaces `{{$.inputs.parameters['NAME']}}` placeholders with the task's inputs.
fn substitute(run: &Run, task: &Value, s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    const OPEN: &str = "{{$.inputs.parameters[";
    while let Some(i) = rest.find(OPEN) {
        out.push_str(&rest[..i]);
        let after = &rest[i + OPEN.len()..];
        let Some(end) = after.find("]}}") else {
            out.push_str(&rest[i..]);
            return out;
        };
        let name = after[..end].trim_matches(|c| c == '\'' || c == '"');
        match input_parameter(run, task, name) {
            Some(v) => out.push_str(&v),
            None => out.push_str(&rest[i..i + OPEN.len() + end + 3]),
        }
        rest = &after[end + 3..];
    }
    out.push_str(rest);
    out
}

/// The container's `resources` from the executor's: accelerators as limits, CPU and
/// memory limits and requests (current string fields or the legacy numbers).
fn resources(run: &Run, task: &Value, container: &Value) -> Value {
    let r = &container["resources"];
    let text = |v: &Value| value_text(v).map(|s| substitute(run, task, &s));
    let mut limits = Map::new();
    let mut requests = Map::new();
    let accel = &r["accelerator"];
    let kind = text(&accel["resourceType"]).or_else(|| text(&accel["type"]));
    let count = text(&accel["resourceCount"]).or_else(|| text(&accel["count"]));
    if let (Some(kind), Some(count)) = (kind, count) {
        if !kind.is_empty() && count != "0" {
            limits.insert(kind, json!(count));
        }
    }
    let gigabytes = |v: &Value| value_text(v).map(|n| format!("{n}G"));
    for (field, legacy, limit, key) in [
        ("resourceCpuLimit", "cpuLimit", true, "cpu"),
        ("resourceMemoryLimit", "memoryLimit", true, "memory"),
        ("resourceCpuRequest", "cpuRequest", false, "cpu"),
        ("resourceMemoryRequest", "memoryRequest", false, "memory"),
    ] {
        let value = text(&r[field]).or_else(|| {
            // The legacy fields are numbers: cores, and gigabytes of memory.
            if key == "memory" {
                gigabytes(&r[legacy])
            } else {
                value_text(&r[legacy])
            }
        });
        if let Some(v) = value.filter(|v| !v.is_empty()) {
            let target = if limit { &mut limits } else { &mut requests };
            target.insert(key.to_string(), json!(v));
        }
    }
    let mut out = json!({});
    if !limits.is_empty() {
        out["limits"] = Value::Object(limits);
    }
    if !requests.is_empty() {
        out["requests"] = Value::Object(requests);
    }
    out
}

/// The pipeline root the run writes artifacts under: the run's, the spec's, or the
/// `kfp-launcher` ConfigMap's.
fn pipeline_root(cluster: &ClusterState, run: &Run) -> Option<String> {
    [
        run.runtime_config["pipeline_root"].as_str(),
        run.spec["defaultPipelineRoot"].as_str(),
        cluster
            .store
            .get(&ObjKey::new(
                "",
                "configmaps",
                run_namespace(&run.kube_namespace),
                LAUNCHER_CONFIG,
            ))
            .and_then(|cm| cm["data"]["defaultPipelineRoot"].as_str()),
    ]
    .into_iter()
    .flatten()
    .find(|r| !r.is_empty())
    .map(str::to_string)
}

/// `{workflow}-system-container-impl-{10 digits}`, stable for a run, task and attempt.
pub(crate) fn pod_name(run: &Run, task: &str, attempt: usize) -> String {
    let digits = fnv64(&[&run.run_id, task, &attempt.to_string()]) % 10_000_000_000;
    format!("{}-system-container-impl-{digits:010}", run.workflow)
}

/// The pod of one attempt of a task, as KFP's driver makes it: its name, the manifest,
/// and the URL its output artifacts go to when the pipeline root is a bucket the sandbox
/// emulates (`gs://`) and the component has output artifacts.
pub(crate) fn task_pod(
    cluster: &ClusterState,
    run: &Run,
    def: &TaskDef<'_>,
    attempt: usize,
) -> (String, Value, Option<String>) {
    let namespace = run_namespace(&run.kube_namespace).to_string();
    let name = pod_name(run, def.key, attempt);
    let container = def.container.unwrap_or(&Value::Null);
    let mut main = json!({
        "name": "main",
        "image": container["image"].as_str().unwrap_or("python:3.11"),
    });
    for field in ["command", "args"] {
        if let Some(words) = container[field].as_array() {
            main[field] = Value::Array(
                words
                    .iter()
                    .map(|w| match w.as_str() {
                        Some(s) => json!(substitute(run, def.spec, s)),
                        None => w.clone(),
                    })
                    .collect(),
            );
        }
    }
    let res = resources(run, def.spec, container);
    if res.as_object().is_some_and(|m| !m.is_empty()) {
        main["resources"] = res;
    }
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {
                V2_COMPONENT_LABEL: "true",
                RUN_ID_LABEL: run.run_id,
                WORKFLOW_LABEL: run.workflow,
            },
            "annotations": {TASK_DISPLAY_NAME: def.display_name},
        },
        "spec": {
            "serviceAccountName": run.service_account,
            "restartPolicy": "Never",
            "containers": [main],
        },
    });
    let platform = run
        .platform
        .as_ref()
        .map(|p| &p["platforms"]["kubernetes"]["deploymentSpec"]["executors"][def.executor_label])
        .unwrap_or(&Value::Null);
    if let Some(labels) = platform["nodeSelector"]["labels"].as_object() {
        obj::set(
            &mut pod,
            &["spec", "nodeSelector"],
            Value::Object(labels.clone()),
        );
    }
    if let Some(tolerations) = platform["tolerations"].as_array() {
        obj::set(&mut pod, &["spec", "tolerations"], json!(tolerations));
    }
    for kind in ["annotations", "labels"] {
        if let Some(extra) = platform["podMetadata"][kind].as_object() {
            for (k, v) in extra {
                obj::set(&mut pod, &["metadata", kind, k], v.clone());
            }
        }
    }
    let component = &run.spec["components"][def.spec["componentRef"]["name"]
        .as_str()
        .unwrap_or_default()];
    let has_artifacts = component["outputDefinitions"]["artifacts"]
        .as_object()
        .is_some_and(|a| !a.is_empty());
    let artifacts = pipeline_root(cluster, run)
        .filter(|r| r.starts_with("gs://") && has_artifacts)
        .map(|root| {
            let pipeline = run.spec["pipelineInfo"]["name"]
                .as_str()
                .unwrap_or("pipeline");
            format!(
                "{}/{pipeline}/{}/{}/",
                root.trim_end_matches('/'),
                run.run_id,
                def.key
            )
        });
    (name, pod, artifacts)
}

/// A uniform draw in [0, 1) from the seed and an attempt's stable names.
pub(crate) fn reclaim_roll(seed: u64, run: &str, task: &str, attempt: usize) -> f64 {
    let mut z = fnv64(&[&seed.to_string(), run, task, &attempt.to_string()]);
    // splitmix64's finalizer: FNV of near-identical inputs differs in few bits.
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}
