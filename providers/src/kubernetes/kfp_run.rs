//! The `kfp_run` kind: one run of a version of a Kubeflow Pipelines pipeline, in an
//! experiment, with its parameters, followed (by default) until it succeeds or fails.
//!
//! A run's inputs are fixed once it starts, so every field that reaches KFP forces a
//! replacement: a changed parameter is a new run. Only `wait`, `wait_timeout` and
//! `on_destroy`, terrain's own behaviour, change in place. A run that fails is kept,
//! tainted, for inspection; the error names each failed task, KFP's message and the
//! tail of the log of the task's last pod (KFP has no log endpoint: the pod is read
//! through the cluster's API).
//!
//! Destroy deletes the run by default: KFP's record, its Argo workflow and its pods go,
//! and its artifacts stay where the pipeline root keeps them (the bucket). With
//! `on_destroy = "archive"` the run is stopped if it still runs and archived instead,
//! so it stays in KFP's history (its experiment's archived runs).
//!
//! Id: `<namespace>/<experiment>/<display name>`, known before the run exists: an
//! apply interrupted after KFP started the run adopts it rather than starting another.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use kube::api::LogParams;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::apply::Progress;
use super::kfp_api::{self, Kfp};
use super::kfp_pipeline::default_namespace;
use super::{check_cluster, check_dns_label, connect, needs_cluster};
use crate::local::duration::parse_duration;
use crate::schema::Fields;
use crate::{ApiGroups, Ctx, Invalid, Kind, Live, ProviderError};

/// The kind `kfp_run`.
#[derive(Debug, Clone, Copy, Default)]
pub struct KfpRun;

const ID_SHAPE: &str = "NAMESPACE/EXPERIMENT/NAME";
const WAITS: &[&str] = &["none", "started", "complete"];
const ON_DESTROY: &[&str] = &["delete", "archive"];
/// States a run does not leave.
const FINISHED: &[&str] = &["SUCCEEDED", "SKIPPED", "FAILED", "CANCELED"];
/// Log lines of a failed task's pod shown in the error.
const LOG_LINES: i64 = 20;
const POLL: Duration = Duration::from_millis(500);
const POLL_MAX: Duration = Duration::from_secs(10);

fn complete() -> String {
    "complete".into()
}

fn twelve_hours() -> String {
    "12h".into()
}

fn delete() -> String {
    "delete".into()
}

fn default_experiment() -> String {
    "Default".into()
}

/// What a stack writes for a `kfp_run`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    #[terrain(doc = crate::kubernetes::CLUSTER_DOC, force_new)]
    pub cluster: Value,
    /// The namespace KFP runs in.
    #[serde(default = "default_namespace")]
    #[terrain(force_new)]
    pub namespace: String,
    /// The run's name (KFP's display name), unique in its experiment.
    #[terrain(force_new)]
    pub name: String,
    /// A description of the run.
    #[terrain(force_new)]
    pub description: Option<String>,
    /// The experiment the run belongs to, by name; made when KFP has none of that name.
    #[serde(default = "default_experiment")]
    #[terrain(force_new)]
    pub experiment: String,
    /// The pipeline ("${kfp_pipeline.train.pipeline_id}").
    #[terrain(force_new)]
    pub pipeline: String,
    /// The version to run ("${kfp_pipeline.train.version_id}"): a new version of the
    /// pipeline is a new run.
    #[terrain(force_new)]
    pub version: String,
    /// Values for the pipeline's inputs, by name, checked against them at plan.
    #[serde(default)]
    #[terrain(force_new, any)]
    pub parameters: BTreeMap<String, Value>,
    /// Where the run keeps its artifacts (gs://…, s3://…); KFP's default otherwise.
    #[terrain(force_new)]
    pub pipeline_root: Option<String>,
    /// The Kubernetes service account the steps run as (KFP's `pipeline-runner` when
    /// not set).
    #[terrain(force_new)]
    pub service_account: Option<String>,
    /// none (return once submitted), started, or complete (follow the run; a failed run
    /// is an error naming the failed tasks with their logs).
    #[serde(default = "complete")]
    pub wait: String,
    /// How long wait = "complete" may take (e.g. 2h).
    #[serde(default = "twelve_hours")]
    pub wait_timeout: String,
    /// What destroy does: delete (the run, its workflow and pods) or archive (stop it if
    /// it runs and keep it in KFP's history).
    #[serde(default = "delete")]
    pub on_destroy: String,
}

impl Spec {
    fn timeout(&self) -> Duration {
        parse_duration(&self.wait_timeout).unwrap_or(Duration::from_secs(12 * 3600))
    }
}

/// What `kfp_run` reports after apply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Outputs {
    /// KFP's id of the run.
    pub run_id: String,
    /// The experiment's id.
    pub experiment_id: String,
    /// PENDING, RUNNING, SUCCEEDED, SKIPPED, FAILED, CANCELING, CANCELED or PAUSED.
    pub state: String,
    /// Each task's state, by task name.
    pub tasks: BTreeMap<String, String>,
    /// How many times each task ran, by task name (more than once after a failure or a
    /// preemption it was retried from).
    pub attempts: BTreeMap<String, i64>,
    /// Why the run failed; empty otherwise.
    pub error: String,
}

fn parse_id(id: &str) -> Result<(&str, &str, &str), ProviderError> {
    let mut parts = id.splitn(3, '/');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(ns), Some(exp), Some(name))
            if !ns.is_empty() && !exp.is_empty() && !name.is_empty() =>
        {
            Ok((ns, exp, name))
        }
        _ => Err(ProviderError::Unsupported(format!(
            "{}: {id:?} is not an id of this kind; expected {ID_SHAPE}",
            KfpRun::KIND
        ))),
    }
}

fn string(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

fn state_of(run: &Value) -> &str {
    run["state"].as_str().unwrap_or("PENDING")
}

/// Each task's name and detail: the display names of the tasks KFP reports, without
/// its own bookkeeping entries (the root DAG, drivers).
fn tasks_of(run: &Value) -> Vec<&Value> {
    run["run_details"]["task_details"]
        .as_array()
        .map(|tasks| {
            tasks
                .iter()
                .filter(|t| {
                    let name = t["display_name"].as_str().unwrap_or_default();
                    !name.is_empty() && !name.ends_with("-driver") && name != "root"
                })
                .collect()
        })
        .unwrap_or_default()
}

fn outputs_of(run: &Value) -> Outputs {
    Outputs {
        run_id: string(&run["run_id"]),
        experiment_id: string(&run["experiment_id"]),
        state: state_of(run).to_string(),
        tasks: tasks_of(run)
            .into_iter()
            .map(|t| (string(&t["display_name"]), string(&t["state"])))
            .collect(),
        attempts: tasks_of(run)
            .into_iter()
            .map(|t| {
                let n = t["child_tasks"].as_array().map_or(1, Vec::len).max(1);
                (
                    string(&t["display_name"]),
                    i64::try_from(n).unwrap_or(i64::MAX),
                )
            })
            .collect(),
        error: string(&run["error"]["message"]),
    }
}

/// The spec a live run shows; terrain's own fields and the experiment's name from
/// `prior`.
fn spec_of(run: &Value, prior: &Spec) -> Spec {
    let parameters = run["runtime_config"]["parameters"]
        .as_object()
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default();
    // KFP writes "" for a field the run was made without.
    let optional = |v: &Value| v.as_str().filter(|s| !s.is_empty()).map(str::to_string);
    let service_account = match run["service_account"].as_str() {
        // KFP fills in its default; a spec that set none still matches.
        Some("pipeline-runner") if prior.service_account.is_none() => None,
        Some(s) if !s.is_empty() => Some(s.to_string()),
        _ => None,
    };
    Spec {
        cluster: prior.cluster.clone(),
        namespace: prior.namespace.clone(),
        name: string(&run["display_name"]),
        description: optional(&run["description"]),
        experiment: prior.experiment.clone(),
        pipeline: string(&run["pipeline_version_reference"]["pipeline_id"]),
        version: string(&run["pipeline_version_reference"]["pipeline_version_id"]),
        parameters,
        pipeline_root: optional(&run["runtime_config"]["pipeline_root"]),
        service_account,
        wait: prior.wait.clone(),
        wait_timeout: prior.wait_timeout.clone(),
        on_destroy: prior.on_destroy.clone(),
    }
}

/// The run's body for `POST /runs`.
fn body(spec: &Spec, experiment_id: &str) -> Value {
    let mut runtime = json!({"parameters": spec.parameters.iter().map(|(k, v)| (k.clone(), v.clone())).collect::<Map<String, Value>>()});
    if let Some(root) = &spec.pipeline_root {
        runtime["pipeline_root"] = json!(root);
    }
    let mut run = json!({
        "display_name": spec.name,
        "experiment_id": experiment_id,
        "pipeline_version_reference": {"pipeline_id": spec.pipeline, "pipeline_version_id": spec.version},
        "runtime_config": runtime,
    });
    if let Some(d) = &spec.description {
        run["description"] = json!(d);
    }
    if let Some(sa) = &spec.service_account {
        run["service_account"] = json!(sa);
    }
    run
}

/// One line of progress: the run's state and each task's.
fn progress_line(run: &Value) -> String {
    let tasks: Vec<String> = tasks_of(run)
        .iter()
        .map(|t| {
            let attempts = t["child_tasks"].as_array().map_or(0, Vec::len);
            let retry = if attempts > 1 {
                format!(" (attempt {attempts})")
            } else {
                String::new()
            };
            format!(
                "{} {}{retry}",
                string(&t["display_name"]),
                string(&t["state"])
            )
        })
        .collect();
    if tasks.is_empty() {
        format!("run {}", state_of(run))
    } else {
        format!("run {}: {}", state_of(run), tasks.join(", "))
    }
}

/// The last lines of a pod's main container, or why they could not be read.
async fn log_tail(kfp: &Kfp, namespace: &str, pod: &str) -> String {
    let api: kube::Api<Pod> = kube::Api::namespaced(kfp.conn().kube(), namespace);
    let params = LogParams {
        tail_lines: Some(LOG_LINES),
        container: Some("main".into()),
        ..LogParams::default()
    };
    match api.logs(pod, &params).await {
        Ok(text) if !text.trim().is_empty() => {
            let lines: Vec<String> = text
                .trim_end()
                .lines()
                .map(|l| format!("    {l}"))
                .collect();
            format!("\n  last log lines of pod {pod}:\n{}", lines.join("\n"))
        }
        Ok(_) => format!("\n  pod {pod} printed nothing"),
        Err(e) => format!(
            "\n  the log of pod {pod} could not be read: {}",
            crate::failure::chain(&e)
        ),
    }
}

/// The error for a run that ended without succeeding: each failed task with KFP's
/// message and its pod's log tail.
async fn run_failed(kfp: &Kfp, namespace: &str, run: &Value) -> ProviderError {
    let state = state_of(run);
    let mut message = match state {
        "CANCELED" => "the run was canceled before it finished".to_string(),
        _ => format!("{state}: {}", {
            let e = string(&run["error"]["message"]);
            if e.is_empty() {
                "no reason given".to_string()
            } else {
                e
            }
        }),
    };
    for task in tasks_of(run).into_iter().filter(|t| t["state"] == "FAILED") {
        let name = string(&task["display_name"]);
        let attempts = task["child_tasks"].as_array().map_or(1, Vec::len).max(1);
        message.push_str(&format!(
            "\n  task {name} failed after {attempts} attempt{}: {}",
            if attempts == 1 { "" } else { "s" },
            string(&task["error"]["message"])
        ));
        let pod = string(&task["pod_name"]);
        if !pod.is_empty() {
            message.push_str(&log_tail(kfp, namespace, &pod).await);
        }
    }
    ProviderError::Failed {
        call: format!(
            "kfp run {} ({})",
            string(&run["run_id"]),
            string(&run["display_name"])
        ),
        message,
    }
}

/// Follows the run until `done` says so, reporting progress.
async fn follow(
    ctx: &Ctx,
    kfp: &Kfp,
    spec: &Spec,
    run_id: &str,
    done: impl Fn(&Value) -> bool,
) -> Result<Value, ProviderError> {
    let progress = Progress::new(ctx);
    let started = std::time::Instant::now();
    let mut pause = POLL;
    loop {
        let run = kfp
            .run(run_id)
            .await?
            .ok_or_else(|| ProviderError::Failed {
                call: "kfp.runs.get".into(),
                message: format!("run {run_id} was deleted while terrain followed it"),
            })?;
        if done(&run) {
            return Ok(run);
        }
        progress.report(&progress_line(&run));
        if started.elapsed() >= spec.timeout() {
            return Err(ProviderError::Timeout {
                call: format!("kfp run {run_id} ({})", spec.name),
                waiting_for: format!("the run to finish (it is {})", state_of(&run)),
                after: spec.timeout(),
            });
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 3 / 2).min(POLL_MAX);
    }
}

async fn kfp(ctx: &Ctx, cluster: &Value, namespace: &str) -> Result<Kfp, ProviderError> {
    Ok(Kfp::new(connect::client(ctx, cluster).await?, namespace))
}

/// The newest run of that name in the experiment that is not archived.
async fn find(kfp: &Kfp, experiment_id: &str, name: &str) -> Result<Option<Value>, ProviderError> {
    Ok(kfp
        .runs_named(experiment_id, name)
        .await?
        .into_iter()
        .find(|r| r["storage_state"] != "ARCHIVED" && r["display_name"] == name))
}

#[async_trait]
impl Kind for KfpRun {
    type Spec = Spec;
    type Outputs = Outputs;
    const KIND: &'static str = "kfp_run";
    const PROVIDER: &'static str = "kubernetes";

    fn api_groups(_spec: &Value) -> ApiGroups {
        kfp_api::needed("Run")
    }

    fn validate(spec: &Spec, _config: &Value) -> Vec<Invalid> {
        let mut out = Vec::new();
        check_cluster(&spec.cluster, &mut out);
        if let Err(m) = check_dns_label(&spec.namespace) {
            out.push(Invalid::at("namespace", m));
        }
        for (field, value) in [("name", &spec.name), ("experiment", &spec.experiment)] {
            if value.trim().is_empty() {
                out.push(Invalid::at(field, "must not be empty"));
            } else if field == "experiment" && value.contains('/') {
                out.push(Invalid::at(field, "must not contain '/'"));
            }
        }
        for (field, value) in [("pipeline", &spec.pipeline), ("version", &spec.version)] {
            if value.trim().is_empty() {
                out.push(Invalid::at(
                    field,
                    format!(
                        "name the pipeline's {field} (\"${{kfp_pipeline.NAME.{}}}\")",
                        if field == "pipeline" {
                            "pipeline_id"
                        } else {
                            "version_id"
                        }
                    ),
                ));
            }
        }
        if let Some(root) = &spec.pipeline_root {
            if !["gs://", "s3://", "minio://", "http://", "https://"]
                .iter()
                .any(|p| root.starts_with(p))
            {
                out.push(Invalid::at(
                    "pipeline_root",
                    format!("{root:?} is not a pipeline root: use gs://BUCKET/PREFIX, s3://BUCKET/PREFIX or minio://BUCKET/PREFIX"),
                ));
            }
        }
        if !WAITS.contains(&spec.wait.as_str()) {
            out.push(Invalid::at(
                "wait",
                format!("{:?} is not one of {}", spec.wait, WAITS.join(", ")),
            ));
        }
        if parse_duration(&spec.wait_timeout).is_none() {
            out.push(Invalid::at(
                "wait_timeout",
                format!("{:?} is not a duration (e.g. 90m, 2h)", spec.wait_timeout),
            ));
        }
        if !ON_DESTROY.contains(&spec.on_destroy.as_str()) {
            out.push(Invalid::at(
                "on_destroy",
                format!(
                    "{:?} is not one of {}",
                    spec.on_destroy,
                    ON_DESTROY.join(", ")
                ),
            ));
        }
        out
    }

    fn planned_id(spec: &Spec, _config: &Value) -> Option<String> {
        Some(format!(
            "{}/{}/{}",
            spec.namespace, spec.experiment, spec.name
        ))
    }

    async fn read(
        &self,
        ctx: &Ctx,
        id: &str,
        prior: Option<&Spec>,
    ) -> Result<Option<Live<Self>>, ProviderError> {
        let (namespace, experiment, name) = parse_id(id)?;
        let prior = prior.ok_or_else(|| needs_cluster(Self::KIND))?;
        let kfp = kfp(ctx, &prior.cluster, namespace).await?;
        let Some(exp) = kfp.find_experiment(experiment).await? else {
            return Ok(None);
        };
        let Some(run) = find(&kfp, &string(&exp["experiment_id"]), name).await? else {
            return Ok(None);
        };
        Ok(Some(Live {
            id: id.to_string(),
            outputs: outputs_of(&run),
            spec: spec_of(&run, prior),
        }))
    }

    async fn create(&self, ctx: &Ctx, spec: &Spec) -> Result<Live<Self>, ProviderError> {
        let kfp = kfp(ctx, &spec.cluster, &spec.namespace).await?;
        let experiment = kfp.experiment(&spec.experiment).await?;
        let experiment_id = string(&experiment["experiment_id"]);
        let id = format!("{}/{}/{}", spec.namespace, spec.experiment, spec.name);
        // An apply interrupted after KFP took the run follows that run.
        let resumed = match ctx.resumes() {
            Some(_) => find(&kfp, &experiment_id, &spec.name).await?.filter(|r| {
                r["pipeline_version_reference"]["pipeline_version_id"] == spec.version.as_str()
            }),
            None => None,
        };
        let run = match resumed {
            Some(run) => run,
            None => kfp.create_run(&body(spec, &experiment_id)).await?,
        };
        let run_id = string(&run["run_id"]);
        ctx.progress(&format!("run {run_id} started"));
        let run = match spec.wait.as_str() {
            "none" => run,
            "started" => follow(ctx, &kfp, spec, &run_id, |r| state_of(r) != "PENDING").await?,
            _ => {
                follow(ctx, &kfp, spec, &run_id, |r| {
                    FINISHED.contains(&state_of(r))
                })
                .await?
            }
        };
        if spec.wait == "complete" && state_of(&run) != "SUCCEEDED" {
            // The run stays for inspection, tainted: applying the same spec again would
            // not run it again, so the next apply replaces it.
            let failed = run_failed(&kfp, &spec.namespace, &run).await;
            return Err(ProviderError::tainted(id, failed));
        }
        Ok(Live {
            id,
            outputs: outputs_of(&run),
            spec: spec.clone(),
        })
    }

    async fn update(
        &self,
        ctx: &Ctx,
        id: &str,
        prior: &Spec,
        spec: &Spec,
    ) -> Result<Live<Self>, ProviderError> {
        // Only terrain's own fields change in place: nothing reaches KFP.
        let live = self
            .read(ctx, id, Some(prior))
            .await?
            .ok_or_else(|| ProviderError::Failed {
                call: "kfp.runs.get".into(),
                message: format!("run {id} is gone; the next plan starts it again"),
            })?;
        Ok(Live {
            spec: spec.clone(),
            ..live
        })
    }

    async fn delete(&self, ctx: &Ctx, id: &str, prior: Option<&Spec>) -> Result<(), ProviderError> {
        let (namespace, experiment, name) = parse_id(id)?;
        let prior = prior.ok_or_else(|| needs_cluster(Self::KIND))?;
        let kfp = kfp(ctx, &prior.cluster, namespace).await?;
        let Some(exp) = kfp.find_experiment(experiment).await? else {
            return Ok(());
        };
        let Some(run) = find(&kfp, &string(&exp["experiment_id"]), name).await? else {
            return Ok(());
        };
        let run_id = string(&run["run_id"]);
        if prior.on_destroy == "archive" {
            if !FINISHED.contains(&state_of(&run)) {
                kfp.terminate_run(&run_id).await?;
            }
            return kfp.archive_run(&run_id).await;
        }
        kfp.delete_run(&run_id).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubernetes::connect::tests::gke_reference;
    use crate::testing::schema_mismatches;

    fn base() -> Spec {
        Spec {
            cluster: gke_reference(),
            namespace: "kubeflow".into(),
            name: "train-1".into(),
            description: None,
            experiment: "Default".into(),
            pipeline: "p-1".into(),
            version: "v-1".into(),
            parameters: BTreeMap::from([("epochs".to_string(), json!(3))]),
            pipeline_root: Some("gs://bucket/root".into()),
            service_account: None,
            wait: "complete".into(),
            wait_timeout: "2h".into(),
            on_destroy: "delete".into(),
        }
    }

    fn sample_run() -> Value {
        json!({
            "run_id": "r-1", "experiment_id": "e-1", "display_name": "train-1",
            "state": "FAILED", "storage_state": "AVAILABLE",
            "error": {"code": 2, "message": "task train failed"},
            "pipeline_version_reference": {"pipeline_id": "p-1", "pipeline_version_id": "v-1"},
            "runtime_config": {"parameters": {"epochs": 3}, "pipeline_root": "gs://bucket/root"},
            "service_account": "pipeline-runner",
            "run_details": {"task_details": [
                {"display_name": "root", "state": "FAILED"},
                {"display_name": "preprocess", "state": "SUCCEEDED", "pod_name": "p-a", "child_tasks": [{"pod_name": "p-a"}]},
                {"display_name": "train", "state": "FAILED", "pod_name": "p-c",
                 "error": {"message": "exit code 1"}, "child_tasks": [{"pod_name": "p-b"}, {"pod_name": "p-c"}]},
            ]},
        })
    }

    #[test]
    fn schema_agrees_with_serde() {
        let full = Spec {
            description: Some("nightly".into()),
            service_account: Some("trainer".into()),
            ..base()
        };
        assert_eq!(
            schema_mismatches::<KfpRun>(&full, &outputs_of(&sample_run())),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_live_run_reads_back_as_its_spec() {
        let run = sample_run();
        assert_eq!(spec_of(&run, &base()), base());
        let outputs = outputs_of(&run);
        assert_eq!(
            outputs.tasks,
            BTreeMap::from([
                ("preprocess".to_string(), "SUCCEEDED".to_string()),
                ("train".to_string(), "FAILED".to_string())
            ])
        );
        assert_eq!(
            progress_line(&run),
            "run FAILED: preprocess SUCCEEDED, train FAILED (attempt 2)"
        );
    }

    #[test]
    fn the_body_carries_only_fields_kfp_knows() {
        let b = body(&base(), "e-1");
        let keys: Vec<&str> = b
            .as_object()
            .expect("object")
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            keys,
            [
                "display_name",
                "experiment_id",
                "pipeline_version_reference",
                "runtime_config"
            ]
        );
        assert_eq!(b["runtime_config"]["parameters"]["epochs"], 3);
    }

    #[test]
    fn only_terrain_fields_change_in_place() {
        let schema = KfpRun::schema();
        for field in &schema.fields {
            let own = matches!(field.name, "wait" | "wait_timeout" | "on_destroy");
            assert_eq!(field.force_new, !own, "{}", field.name);
        }
    }
}
