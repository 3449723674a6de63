//! The `sagemaker_pipeline_execution` kind: one run of a SageMaker pipeline, submitted
//! as an ACK `PipelineExecution` on the EKS cluster whose ACK SageMaker controller starts
//! it, followed (by default) until it succeeds or fails, and cross-checked with the
//! SageMaker API (`sagemaker:DescribePipelineExecution`,
//! `sagemaker:ListPipelineExecutions`).
//!
//! An execution cannot change once started: every field that reaches the object forces
//! a replacement (a new run). Only `wait` and `wait_timeout`, terrain's own behaviour,
//! change in place. Deleting the object stops a running execution (the controller does
//! that before lifting its finalizer).
//!
//! Id: `sagemaker.services.k8s.aws/v1alpha1/PipelineExecution/<namespace>/<name>`.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::ack::{self, ack_state, arn_of, AckKind, AckState};
use super::signed::SAGEMAKER;
use crate::kubernetes::apply::Progress;
use crate::kubernetes::{id_of, mark_ours, ObjectRef};
use crate::local::duration::parse_duration;
use crate::schema::Fields;
use crate::{Ctx, Health, Invalid, Kind, Live, ProviderError};

const START_TIMEOUT: Duration = Duration::from_secs(15 * 60);
const WAITS: &[&str] = &["none", "started", "complete"];
/// How many pages of `ListPipelineExecutions` (newest first) to search for a run.
const LIST_PAGES: usize = 10;

/// The kind `sagemaker_pipeline_execution`.
#[derive(Debug, Clone, Copy, Default)]
pub struct SageMakerPipelineExecution;

fn complete() -> String {
    "complete".into()
}

fn twelve_hours() -> String {
    "12h".into()
}

/// What a stack writes for a `sagemaker_pipeline_execution`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    #[terrain(doc = crate::kubernetes::CLUSTER_DOC, force_new)]
    pub cluster: Value,
    /// The namespace of the PipelineExecution object.
    #[serde(default = "ack::default_namespace")]
    #[terrain(force_new)]
    pub namespace: String,
    /// The PipelineExecution object's name.
    #[terrain(force_new)]
    pub name: String,
    /// The pipeline to run, by name or ARN ("${sagemaker_pipeline.train.pipeline_name}").
    #[terrain(force_new)]
    pub pipeline_name: String,
    /// The run's display name.
    #[terrain(force_new)]
    pub display_name: Option<String>,
    /// A description of the run.
    #[terrain(force_new)]
    pub description: Option<String>,
    /// Values for the definition's parameters, by name.
    #[serde(default)]
    #[terrain(force_new)]
    pub parameters: BTreeMap<String, String>,
    /// How many steps of this run may run at once.
    #[terrain(force_new)]
    pub max_parallel_steps: Option<i64>,
    /// none (return once submitted), started, or complete (follow the run; a failed run is
    /// an error).
    #[serde(default = "complete")]
    pub wait: String,
    /// How long wait = "complete" may take (e.g. 2h).
    #[serde(default = "twelve_hours")]
    pub wait_timeout: String,
}

impl Spec {
    fn target(&self) -> ObjectRef {
        ack::target::<SageMakerPipelineExecution>(&self.namespace, &self.name)
    }

    fn timeout(&self) -> Duration {
        parse_duration(&self.wait_timeout).unwrap_or(Duration::from_secs(12 * 3600))
    }
}

/// What `sagemaker_pipeline_execution` reports after apply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Outputs {
    /// The run's ARN.
    pub arn: String,
    /// Executing, Stopping, Stopped, Failed, Succeeded or CompletedWithFailures.
    pub status: String,
    /// Why the run failed; empty otherwise.
    pub failure_reason: String,
}

/// The `PipelineExecution` for `spec`, as rendered (without the address annotation).
pub fn objects(spec: &Spec) -> Result<Vec<Value>, ProviderError> {
    let mut body = json!({"pipelineName": spec.pipeline_name});
    if let Some(display) = &spec.display_name {
        body["pipelineExecutionDisplayName"] = json!(display);
    }
    if let Some(description) = &spec.description {
        body["pipelineExecutionDescription"] = json!(description);
    }
    if !spec.parameters.is_empty() {
        body["pipelineParameters"] = ack::pair_list(&spec.parameters, "name", "value");
    }
    if let Some(steps) = spec.max_parallel_steps {
        body["parallelismConfiguration"] = json!({"maxParallelExecutionSteps": steps});
    }
    Ok(vec![ack::object::<SageMakerPipelineExecution>(
        &spec.namespace,
        &spec.name,
        body,
    )])
}

/// The run's status as the controller last saw it (empty before it started).
fn status_of(object: &Value) -> &str {
    object["status"]["pipelineExecutionStatus"]
        .as_str()
        .unwrap_or_default()
}

fn failure_reason_of(object: &Value) -> &str {
    object["status"]["failureReason"]
        .as_str()
        .unwrap_or_default()
}

/// Statuses a run does not leave.
fn finished(status: &str) -> bool {
    matches!(
        status,
        "Succeeded" | "Failed" | "Stopped" | "CompletedWithFailures"
    )
}

/// The spec a live `PipelineExecution` shows; waiting is terrain's own (`prior`).
fn spec_of(object: &Value, prior: &Spec) -> Spec {
    let s = &object["spec"];
    let string = |v: &Value| v.as_str().map(str::to_string);
    let (namespace, name) = ack::placement_of(object);
    Spec {
        cluster: prior.cluster.clone(),
        namespace,
        name,
        pipeline_name: s["pipelineName"].as_str().unwrap_or_default().to_string(),
        display_name: string(&s["pipelineExecutionDisplayName"]),
        description: string(&s["pipelineExecutionDescription"]),
        parameters: ack::pairs_of(&s["pipelineParameters"], "name", "value"),
        max_parallel_steps: s["parallelismConfiguration"]["maxParallelExecutionSteps"].as_i64(),
        wait: prior.wait.clone(),
        wait_timeout: prior.wait_timeout.clone(),
    }
}

fn outputs_of(object: &Value) -> Outputs {
    Outputs {
        arn: arn_of(object).unwrap_or_default().to_string(),
        status: status_of(object).to_string(),
        failure_reason: failure_reason_of(object).to_string(),
    }
}

/// The error for a run that ended without succeeding.
fn run_failed(target: &ObjectRef, arn: &str, status: &str, reason: &str) -> ProviderError {
    let reason = if reason.is_empty() || reason == "None" {
        "no reason given".to_string()
    } else {
        reason.to_string()
    };
    let message = match status {
        "Stopped" => format!("the run was stopped before it finished ({reason})"),
        "CompletedWithFailures" => format!("the run completed with failed steps: {reason}"),
        _ => format!("Failed: {reason}"),
    };
    ProviderError::Failed {
        call: format!("sagemaker pipeline execution {arn} ({})", target.describe()),
        message,
    }
}

/// Cross-checks a started `PipelineExecution` with SageMaker:
/// `sagemaker:DescribePipelineExecution` of `arn` must know it and, when the object
/// reports a finished `status`, report the same one; `sagemaker:ListPipelineExecutions`
/// of `pipeline_name` must list it. Returns SageMaker's status and failure reason.
///
/// Fails when SageMaker cannot be asked, does not know the run, disagrees on a finished
/// status, or does not list the run under the pipeline.
pub async fn cross_check_execution(
    ctx: &Ctx,
    pipeline_name: &str,
    arn: &str,
    status: &str,
) -> Result<(String, String), ProviderError> {
    const DESCRIBE: &str = "sagemaker:DescribePipelineExecution";
    const LIST: &str = "sagemaker:ListPipelineExecutions";
    let (client, region) = ack::sagemaker(ctx).await?;
    let described = client
        .json11(
            &SAGEMAKER,
            &region,
            "DescribePipelineExecution",
            &json!({"PipelineExecutionArn": arn}),
        )
        .await
        .map_err(|e| {
            let reported = format!("the run {arn}");
            ack::unknown_to_sagemaker(DESCRIBE, &reported, &region, e)
        })?;
    let api_status = described["PipelineExecutionStatus"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if finished(status) && api_status != status {
        return Err(ProviderError::Failed {
            call: DESCRIBE.into(),
            message: format!(
                "SageMaker reports the run {arn} as {api_status:?}, but its ACK PipelineExecution reports {status:?}"
            ),
        });
    }
    let reason = described["FailureReason"]
        .as_str()
        .unwrap_or_default()
        .to_string();

    let mut token: Option<String> = None;
    for _ in 0..LIST_PAGES {
        // Newest first: the run being checked is most likely on the first page.
        let mut body = json!({"PipelineName": pipeline_name, "SortOrder": "Descending"});
        if let Some(next) = token.take() {
            body["NextToken"] = Value::String(next);
        }
        let listed = client
            .json11(&SAGEMAKER, &region, "ListPipelineExecutions", &body)
            .await?;
        let listed_here = listed["PipelineExecutionSummaries"]
            .as_array()
            .is_some_and(|runs| runs.iter().any(|s| s["PipelineExecutionArn"] == arn));
        if listed_here {
            return Ok((api_status, reason));
        }
        match listed["NextToken"].as_str() {
            Some(next) if !next.is_empty() => token = Some(next.to_string()),
            _ => break,
        }
    }
    Err(ProviderError::Failed {
        call: LIST.into(),
        message: format!(
            "SageMaker does not list the run {arn} among the executions of pipeline {pipeline_name}: the PipelineExecution names another pipeline than the run belongs to"
        ),
    })
}

/// Waits as `spec.wait` asks on the applied object and returns it as it then is,
/// cross-checked once SageMaker knows the run.
async fn follow(
    ctx: &Ctx,
    client: &crate::kubernetes::connect::Conn,
    spec: &Spec,
    applied: Value,
) -> Result<Value, ProviderError> {
    let target = spec.target();
    if spec.wait == "none" {
        return Ok(applied);
    }
    let progress = Progress::new(ctx);
    let to_start = format!("SageMaker to start {}", target.describe());
    let started =
        ack::wait_for(
            client,
            &target,
            ctx,
            START_TIMEOUT,
            &to_start,
            |object| match ack_state(object) {
                AckState::Terminal(m) => Err(format!(
                    "the ACK SageMaker controller could not start {} (ACK.Terminal): {m}",
                    target.describe()
                )),
                AckState::Recoverable(m) if arn_of(object).is_none() => {
                    progress.report(&ack::retrying(&m));
                    Ok(false)
                }
                _ => Ok(arn_of(object).is_some()),
            },
        );
    let mut object = started.await?;
    if spec.wait == "complete" {
        let to_finish = format!("{} to finish", target.describe());
        let running = ack::wait_for(client, &target, ctx, spec.timeout(), &to_finish, |object| {
            let status = status_of(object);
            if finished(status) {
                return Ok(true);
            }
            if let AckState::Terminal(m) = ack_state(object) {
                return Err(ack::gave_up(&target, &m));
            }
            let shown = if status.is_empty() {
                "Starting"
            } else {
                status
            };
            // The status when it changes; the engine says how long it has been going.
            progress.report(shown);
            Ok(false)
        });
        object = running.await?;
    }
    let arn = arn_of(&object).unwrap_or_default().to_string();
    let status = status_of(&object).to_string();
    let (_, api_reason) = cross_check_execution(ctx, &spec.pipeline_name, &arn, &status).await?;
    if spec.wait == "complete" && status != "Succeeded" {
        let reason = match failure_reason_of(&object) {
            "" | "None" => api_reason.as_str(),
            reason => reason,
        };
        return Err(run_failed(&target, &arn, &status, reason));
    }
    Ok(object)
}

fn health_of(object: &Value) -> Health {
    let status = status_of(object);
    match status {
        "Succeeded" => Health {
            ready: true,
            summary: "Succeeded".into(),
        },
        "Failed" | "Stopped" | "CompletedWithFailures" => {
            let reason = failure_reason_of(object);
            Health {
                ready: false,
                summary: if reason.is_empty() || reason == "None" {
                    status.to_string()
                } else {
                    format!("{status}: {reason}")
                },
            }
        }
        _ => Health {
            ready: false,
            summary: match ack_state(object) {
                AckState::Terminal(m) => format!("Terminal: {m}"),
                _ if status.is_empty() => "Starting".into(),
                _ => status.to_string(),
            },
        },
    }
}

#[async_trait]
impl Kind for SageMakerPipelineExecution {
    type Spec = Spec;
    type Outputs = Outputs;
    const KIND: &'static str = "sagemaker_pipeline_execution";
    const PROVIDER: &'static str = "aws";
    const RENDERS: bool = true;

    fn api_groups(_spec: &Value) -> crate::ApiGroups {
        ack::needs(<Self as ack::AckKind>::ACK_KIND)
    }

    /// A run of a pipeline of the same stack may only set the parameters its
    /// definition declares: SageMaker refuses the start otherwise, after the cluster,
    /// the pipeline and everything before it were made.
    fn validate_peers(spec: &Value, peers: &[crate::Peer]) -> Vec<Invalid> {
        let unknown = |v: &str| v.contains(crate::protocol::UNKNOWN);
        let Some(pipeline) = peers.iter().find(|p| p.kind == "sagemaker_pipeline") else {
            return Vec::new();
        };
        let text = match (
            pipeline.spec["definition_file"].as_str(),
            pipeline.spec["definition"].as_str(),
        ) {
            (Some(path), _) if !unknown(path) => std::fs::read_to_string(path).ok(),
            (None, Some(text)) if !unknown(text) => Some(text.to_string()),
            _ => None,
        };
        // An unreadable or broken definition is the pipeline's own problem.
        let Some(definition) = text.and_then(|t| serde_json::from_str::<Value>(&t).ok()) else {
            return Vec::new();
        };
        let declared: Vec<&str> = definition["Parameters"]
            .as_array()
            .map(|list| list.iter().filter_map(|p| p["Name"].as_str()).collect())
            .unwrap_or_default();
        let Some(given) = spec["parameters"].as_object() else {
            return Vec::new();
        };
        given
            .keys()
            .filter(|k| !unknown(k) && !declared.contains(&k.as_str()))
            .map(|k| {
                let known = if declared.is_empty() {
                    "declares no parameters".to_string()
                } else {
                    format!("declares {}", declared.join(", "))
                };
                Invalid::at(
                    &format!("parameters.{k}"),
                    format!(
                        "{k:?} is not a parameter of {}: its definition {known}",
                        pipeline.address
                    ),
                )
            })
            .collect()
    }

    fn validate(spec: &Spec, _config: &Value) -> Vec<Invalid> {
        let mut out = Vec::new();
        ack::check_placement(&spec.cluster, &spec.namespace, &spec.name, &mut out);
        // A name, or an ARN ending in `pipeline/<name>`.
        let name = spec
            .pipeline_name
            .strip_prefix("arn:")
            .and_then(|arn| arn.split_once(":pipeline/").map(|(_, n)| n))
            .unwrap_or(&spec.pipeline_name);
        ack::check_names(
            name,
            spec.display_name.as_deref(),
            82,
            spec.description.as_deref(),
            &mut out,
        );
        for (name, value) in &spec.parameters {
            if !super::definition::is_step_name(name) {
                out.push(Invalid::at(
                    "parameters",
                    format!(
                        "{name:?} is not a parameter name: 1 to 64 letters, digits, '-' or '_'"
                    ),
                ));
            }
            if value.chars().count() > 1024 {
                out.push(Invalid::at(
                    "parameters",
                    format!("the value of {name:?} is longer than 1024 characters"),
                ));
            }
        }
        ack::check_max_parallel_steps(spec.max_parallel_steps, &mut out);
        if !WAITS.contains(&spec.wait.as_str()) {
            out.push(Invalid::at(
                "wait",
                format!(
                    "{:?} is not a wait mode; use \"none\", \"started\" or \"complete\"",
                    spec.wait
                ),
            ));
        }
        if parse_duration(&spec.wait_timeout).is_none() {
            out.push(Invalid::at(
                "wait_timeout",
                format!(
                    "{:?} is not a duration; write e.g. \"2h\" or \"90m\"",
                    spec.wait_timeout
                ),
            ));
        }
        out
    }

    fn planned_id(spec: &Spec, _config: &Value) -> Option<String> {
        Some(id_of(&[spec.target()]))
    }

    fn render(spec: &Spec, _config: &Value) -> Option<Result<Vec<Value>, ProviderError>> {
        Some(objects(spec))
    }

    async fn read(
        &self,
        ctx: &Ctx,
        id: &str,
        prior: Option<&Spec>,
    ) -> Result<Option<Live<Self>>, ProviderError> {
        ack::read::<Self>(ctx, id, prior).await
    }

    /// The objects of one namespace on one cluster are read with one list call.
    fn batch_key(_config: &Value, id: &str, prior: Option<&Spec>) -> Option<String> {
        ack::batch_key::<Self>(id, prior)
    }

    async fn read_batch(
        &self,
        ctx: &Ctx,
        items: &[(String, Option<Spec>)],
    ) -> Result<Vec<Option<Live<Self>>>, ProviderError> {
        ack::read_batch::<Self>(ctx, items).await
    }

    async fn create(&self, ctx: &Ctx, spec: &Spec) -> Result<Live<Self>, ProviderError> {
        let mut object = objects(spec)?.remove(0);
        mark_ours(&mut object, &ctx.address);
        let (client, applied) = ack::submit::<Self>(ctx, &spec.cluster, &object, true).await?;
        let id = id_of(&[spec.target()]);
        let object = match follow(ctx, &client, spec, applied).await {
            Ok(object) => object,
            // A run that failed, stopped or that the controller gave up on stays for
            // inspection, tainted: the next apply replaces it, which starts a new run.
            // A wait cut short (a timeout) is not tainted: the next apply follows the
            // same run again.
            Err(failed @ ProviderError::Failed { .. }) => {
                return Err(ProviderError::tainted(id, failed))
            }
            Err(e) => return Err(e),
        };
        Ok(Self::live(&id, &object, spec))
    }

    async fn update(
        &self,
        ctx: &Ctx,
        id: &str,
        _prior: &Spec,
        spec: &Spec,
    ) -> Result<Live<Self>, ProviderError> {
        // Only how terrain waits can change in place; a run asked to be followed now
        // is followed from where it is.
        let Some((client, object)) = ack::live_object::<Self>(ctx, &spec.cluster, id).await? else {
            return Err(ProviderError::api(
                format!("kubernetes get {}", spec.target().describe()),
                404,
                "NotFound",
                "the PipelineExecution is gone; plan again to start a new run",
            ));
        };
        let object = follow(ctx, &client, spec, object).await?;
        Ok(Self::live(id, &object, spec))
    }

    async fn delete(&self, ctx: &Ctx, id: &str, prior: Option<&Spec>) -> Result<(), ProviderError> {
        // The controller stops a running execution, then lifts its finalizer.
        ack::delete::<Self>(ctx, id, prior).await
    }

    async fn health(
        &self,
        ctx: &Ctx,
        id: &str,
        prior: Option<&Spec>,
    ) -> Result<Option<Health>, ProviderError> {
        ack::health::<Self>(ctx, id, prior).await
    }
}

impl AckKind for SageMakerPipelineExecution {
    const ACK_KIND: &'static str = "PipelineExecution";

    fn cluster(spec: &Spec) -> &Value {
        &spec.cluster
    }

    fn live(id: &str, object: &Value, prior: &Spec) -> Live<Self> {
        Live {
            id: id.to_string(),
            spec: spec_of(object, prior),
            outputs: outputs_of(object),
        }
    }

    fn health_of(object: &Value) -> Health {
        health_of(object)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aws::ack::crd_check;
    use crate::aws::ack::testing::assert_validation;
    use crate::kubernetes::connect::tests::gke_reference;
    use crate::testing::schema_mismatches;

    fn base() -> Spec {
        Spec {
            cluster: gke_reference(),
            namespace: "default".into(),
            name: "train-run-1".into(),
            pipeline_name: "abalone-train".into(),
            display_name: None,
            description: None,
            parameters: BTreeMap::new(),
            max_parallel_steps: None,
            wait: "complete".into(),
            wait_timeout: "12h".into(),
        }
    }

    fn full() -> Spec {
        Spec {
            display_name: Some("nightly-1".into()),
            description: Some("the nightly run".into()),
            parameters: BTreeMap::from([
                (
                    "InputData".to_string(),
                    "s3://ml-data/2024-06-01.csv".to_string(),
                ),
                ("MaxDepth".to_string(), "6".to_string()),
            ]),
            max_parallel_steps: Some(2),
            wait: "started".into(),
            wait_timeout: "2h".into(),
            ..base()
        }
    }

    #[test]
    fn schema_matches_spec_and_outputs() {
        let outputs = Outputs {
            arn: "arn:aws:sagemaker:us-east-1:123456789012:pipeline/abalone-train/execution/x1"
                .into(),
            status: "Succeeded".into(),
            failure_reason: String::new(),
        };
        assert_eq!(
            schema_mismatches::<SageMakerPipelineExecution>(&full(), &outputs),
            Vec::<String>::new()
        );
        let schema = SageMakerPipelineExecution::schema();
        // Everything that reaches the object replaces the run; waiting does not.
        for field in &schema.fields {
            let terrain_only = matches!(field.name, "wait" | "wait_timeout");
            assert_eq!(field.force_new, !terrain_only, "{}", field.name);
        }
    }

    #[test]
    fn renders_an_execution_the_crd_accepts() {
        let objects = objects(&full()).expect("renders");
        assert_eq!(
            objects,
            vec![json!({
                "apiVersion": "sagemaker.services.k8s.aws/v1alpha1",
                "kind": "PipelineExecution",
                "metadata": {"name": "train-run-1", "namespace": "default", "labels": {"app.kubernetes.io/managed-by": "terrain"}},
                "spec": {
                    "pipelineName": "abalone-train",
                    "pipelineExecutionDisplayName": "nightly-1",
                    "pipelineExecutionDescription": "the nightly run",
                    "pipelineParameters": [
                        {"name": "InputData", "value": "s3://ml-data/2024-06-01.csv"},
                        {"name": "MaxDepth", "value": "6"},
                    ],
                    "parallelismConfiguration": {"maxParallelExecutionSteps": 2},
                },
            })]
        );
        let crd = crd_check::schema("sagemaker.services.k8s.aws_pipelineexecutions.yaml");
        let mut marked = objects[0].clone();
        mark_ours(&mut marked, "sagemaker_pipeline_execution.run");
        for object in [
            &objects[0],
            &marked,
            &super::objects(&base()).expect("renders")[0],
        ] {
            assert_eq!(
                crd_check::problems(&crd, object),
                Vec::<String>::new(),
                "{object}"
            );
        }
        let mut bad = objects[0].clone();
        bad["spec"]["parameters"] = json!({"a": "b"});
        bad["spec"]["pipelineParameters"][0]["value"] = json!(3);
        let problems = crd_check::problems(&crd, &bad);
        assert_eq!(problems.len(), 2, "{problems:?}");
    }

    #[test]
    fn live_execution_reads_back_as_the_spec() {
        for spec in [base(), full()] {
            let mut live = objects(&spec).expect("renders").remove(0);
            mark_ours(&mut live, "sagemaker_pipeline_execution.run");
            live["status"] = json!({
                "ackResourceMetadata": {"arn": "arn:aws:sagemaker:us-east-1:123456789012:pipeline/abalone-train/execution/x1", "ownerAccountID": "123456789012", "region": "us-east-1"},
                "conditions": [{"type": "ACK.ResourceSynced", "status": "True"}],
                "pipelineExecutionStatus": "Failed",
                "failureReason": "AlgorithmError: boom",
            });
            assert_eq!(spec_of(&live, &spec), spec);
            assert_eq!(
                outputs_of(&live),
                Outputs {
                    arn: "arn:aws:sagemaker:us-east-1:123456789012:pipeline/abalone-train/execution/x1".into(),
                    status: "Failed".into(),
                    failure_reason: "AlgorithmError: boom".into(),
                }
            );
            assert_eq!(
                health_of(&live),
                Health {
                    ready: false,
                    summary: "Failed: AlgorithmError: boom".into()
                }
            );
        }
    }

    #[test]
    fn health_and_progress_lines() {
        let with = |status: Value| json!({"status": status});
        let cases = [
            (
                with(json!({"pipelineExecutionStatus": "Executing"})),
                false,
                "Executing",
            ),
            (
                with(json!({"pipelineExecutionStatus": "Succeeded", "failureReason": "None"})),
                true,
                "Succeeded",
            ),
            (
                with(json!({"pipelineExecutionStatus": "Stopped", "failureReason": "None"})),
                false,
                "Stopped",
            ),
            (with(json!({})), false, "Starting"),
            (
                with(
                    json!({"conditions": [{"type": "ACK.Terminal", "status": "True", "message": "ResourceNotFound: no pipeline abalone"}]}),
                ),
                false,
                "Terminal: ResourceNotFound: no pipeline abalone",
            ),
        ];
        for (object, ready, summary) in cases {
            assert_eq!(
                health_of(&object),
                Health {
                    ready,
                    summary: summary.into()
                },
                "{object}"
            );
        }
    }

    #[test]
    fn failures_say_why() {
        let target = base().target();
        let cases = [
            (
                "Failed",
                "AlgorithmError: boom",
                "Failed: AlgorithmError: boom",
            ),
            ("Failed", "None", "Failed: no reason given"),
            (
                "Stopped",
                "",
                "the run was stopped before it finished (no reason given)",
            ),
            (
                "CompletedWithFailures",
                "step Evaluate failed",
                "the run completed with failed steps: step Evaluate failed",
            ),
        ];
        for (status, reason, want) in cases {
            let e = run_failed(&target, "arn:x", status, reason);
            assert_eq!(
                e.to_string(),
                format!("sagemaker pipeline execution arn:x (PipelineExecution default/train-run-1) failed: {want}")
            );
        }
    }

    #[test]
    fn validation_table() {
        let cases: Vec<(Spec, &str, &str)> = vec![
            (base(), "", ""),
            (full(), "", ""),
            (
                Spec {
                    pipeline_name:
                        "arn:aws:sagemaker:us-east-1:123456789012:pipeline/abalone-train".into(),
                    ..base()
                },
                "",
                "",
            ),
            (
                Spec {
                    name: "Run_1".into(),
                    ..base()
                },
                "name",
                "DNS-1123",
            ),
            (
                Spec {
                    pipeline_name: "abalone_train".into(),
                    ..base()
                },
                "pipeline_name",
                "not a SageMaker name",
            ),
            (
                Spec {
                    display_name: Some("x".repeat(83)),
                    ..base()
                },
                "display_name",
                "1 to 82",
            ),
            (
                Spec {
                    parameters: BTreeMap::from([("Input Data".to_string(), "x".to_string())]),
                    ..base()
                },
                "parameters",
                "not a parameter name",
            ),
            (
                Spec {
                    max_parallel_steps: Some(0),
                    ..base()
                },
                "max_parallel_steps",
                "1 or more",
            ),
            (
                Spec {
                    wait: "finished".into(),
                    ..base()
                },
                "wait",
                "use \"none\", \"started\" or \"complete\"",
            ),
            (
                Spec {
                    wait_timeout: "soon".into(),
                    ..base()
                },
                "wait_timeout",
                "not a duration",
            ),
        ];
        assert_validation::<SageMakerPipelineExecution>(cases);
    }

    /// One SageMaker call through the cross-checks' client, which must be answered.
    async fn call(client: &crate::aws::signed::Signed, operation: &str, body: Value) -> Value {
        client
            .json11(
                &crate::aws::signed::SAGEMAKER,
                "us-east-1",
                operation,
                &body,
            )
            .await
            .unwrap_or_else(|e| panic!("{operation}: {e}"))
    }

    #[tokio::test]
    async fn cross_checks_read_the_answers_of_the_sandboxs_sagemaker() {
        use crate::aws::sagemaker_pipeline::{cross_check_pipeline, PipelineCheck};
        use terrain_sandbox::{Options, Sandbox, Timing};

        let sandbox = Sandbox::start(Options {
            timing: Timing::instant(),
            ..Options::default()
        })
        .await
        .expect("the sandbox starts");
        let ctx = Ctx::new(
            "sagemaker_pipeline_execution.run",
            json!({"region": "us-east-1", "endpoint": sandbox.url(), "sandbox": true}),
        );
        let (client, region) = ack::sagemaker(&ctx).await.expect("a client");
        assert_eq!(region, "us-east-1");
        let definition = |name: &str| json!({"Version": "2020-12-01", "Steps": [{"Name": name, "Type": "Training", "Arguments": {}}]});
        let mut arns = Vec::new();
        for pipeline in ["abalone", "other"] {
            let created = call(
                &client,
                "CreatePipeline",
                json!({
                    "PipelineName": pipeline,
                    "RoleArn": "arn:aws:iam::123456789012:role/SageMakerExecution",
                    "PipelineDefinition": definition("Train").to_string(),
                }),
            )
            .await;
            arns.push(
                created["PipelineArn"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            );
        }

        // DescribePipeline: the ARN and the definition, held as a JSON string.
        let arn = &arns[0];
        for (held, want) in [
            ("Train", PipelineCheck::Matches),
            ("Fit", PipelineCheck::OtherDefinition),
        ] {
            let wanted = definition(held);
            let check = cross_check_pipeline(&ctx, "abalone", arn, Some(&wanted));
            assert_eq!(check.await.expect("checked"), want, "{held}");
        }
        let e = cross_check_pipeline(&ctx, "abalone", &arns[1], None)
            .await
            .expect_err("another ARN")
            .to_string();
        assert!(
            e.starts_with(
                "sagemaker:DescribePipeline failed: SageMaker reports pipeline abalone as"
            ),
            "{e}"
        );
        let e = cross_check_pipeline(&ctx, "missing", arn, None)
            .await
            .expect_err("unknown pipeline")
            .to_string();
        assert!(e.contains("SageMaker in region us-east-1 does not know it (sagemaker:DescribePipeline failed: 400 ResourceNotFound: "), "{e}");

        // ListPipelineExecutions answers 50 runs a page, newest first: the first run is
        // found on the second page.
        let mut runs = Vec::new();
        for _ in 0..51 {
            let started = call(
                &client,
                "StartPipelineExecution",
                json!({"PipelineName": "abalone"}),
            )
            .await;
            runs.push(
                started["PipelineExecutionArn"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            );
        }
        let first = &runs[0];
        assert_eq!(
            cross_check_execution(&ctx, "abalone", first, "Succeeded")
                .await
                .expect("checked"),
            ("Succeeded".to_string(), String::new())
        );
        let e = cross_check_execution(&ctx, "abalone", first, "Failed")
            .await
            .expect_err("another status")
            .to_string();
        assert!(e.contains(&format!("SageMaker reports the run {first} as \"Succeeded\", but its ACK PipelineExecution reports \"Failed\"")), "{e}");
        let elsewhere = call(
            &client,
            "StartPipelineExecution",
            json!({"PipelineName": "other"}),
        )
        .await;
        let elsewhere = elsewhere["PipelineExecutionArn"]
            .as_str()
            .unwrap_or_default();
        let e = cross_check_execution(&ctx, "abalone", elsewhere, "")
            .await
            .expect_err("a run of another pipeline")
            .to_string();
        assert!(
            e.starts_with(
                "sagemaker:ListPipelineExecutions failed: SageMaker does not list the run"
            ),
            "{e}"
        );
        let unknown = format!("{arn}/execution/nosuchrun");
        let e = cross_check_execution(&ctx, "abalone", &unknown, "")
            .await
            .expect_err("an unknown run")
            .to_string();
        assert!(e.contains(&format!("the ACK controller reports the run {unknown}, but SageMaker in region us-east-1 does not know it")), "{e}");
        sandbox.shutdown().await;
    }
}
