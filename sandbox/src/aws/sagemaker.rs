//! Amazon SageMaker (JSON 1.1, `X-Amz-Target: SageMaker.<Op>`): model-building pipelines
//! and their executions. Definitions are checked the way SageMaker checks them (JSON,
//! version, unique named steps of known types); an execution runs its top-level steps
//! one after another on the sandbox clock and ends Succeeded, Failed (a Fail step, or a
//! failure planned with `fail_next_operation("sagemaker", …)`) or, once stopped, Stopped.
//! The HTTP handlers and the ACK controller (`ack.rs`) share the same methods, so both
//! see one set of pipelines.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::{AwsCtx, AwsError, AwsRequest, AwsResponse, ACCOUNT};

/// Realistic durations in seconds, multiplied by the sandbox's time scale.
mod base {
    /// One pipeline step (a training or processing job, a condition…).
    pub const STEP: f64 = 2.0;
    /// From StopPipelineExecution to Stopped.
    pub const STOP: f64 = 1.0;
}

const CONTENT_TYPE: &str = "application/x-amz-json-1.1";
const DEFINITION_VERSION: &str = "2020-12-01";
/// Step types of the pipeline definition schema (`CreateModelStep` is type `Model`).
const STEP_TYPES: &[&str] = &[
    "Training",
    "Processing",
    "Transform",
    "Model",
    "RegisterModel",
    "Condition",
    "Fail",
    "Lambda",
    "Callback",
    "QualityCheck",
    "ClarifyCheck",
    "EMR",
    "Tuning",
    "AutoML",
    "Endpoint",
    "EndpointConfig",
];
const PARAMETER_TYPES: &[&str] = &["String", "Integer", "Float", "Boolean"];
const NAME_PATTERN: &str = "^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,255}";
const EXECUTION_NAME_PATTERN: &str = "^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,81}";
const ROLE_PATTERN: &str = "^arn:aws[a-z\\-]*:iam::\\d{12}:role/?[a-zA-Z_0-9+=,.@\\-_/]+$";

pub(crate) const EXECUTING: &str = "Executing";
pub(crate) const STOPPING: &str = "Stopping";
pub(crate) const STOPPED: &str = "Stopped";
pub(crate) const FAILED: &str = "Failed";
pub(crate) const SUCCEEDED: &str = "Succeeded";

/// Every emulated pipeline and execution.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SageMaker {
    #[serde(default)]
    pipelines: Vec<Pipeline>,
    #[serde(default)]
    executions: Vec<Execution>,
}

/// A pipeline as DescribePipeline reports it.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct Pipeline {
    pub region: String,
    pub name: String,
    pub arn: String,
    pub display_name: String,
    pub description: Option<String>,
    pub role_arn: String,
    pub definition: String,
    pub parallelism: Option<i64>,
    pub tags: Vec<(String, String)>,
    pub created: DateTime<Utc>,
    pub modified: DateTime<Utc>,
    pub last_run: Option<DateTime<Utc>>,
    pub version_id: i64,
    client_request_token: Option<String>,
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct Execution {
    region: String,
    arn: String,
    pipeline_arn: String,
    display_name: String,
    description: Option<String>,
    parallelism: Option<i64>,
    parameters: Vec<(String, String)>,
    status: String,
    failure_reason: Option<String>,
    created: DateTime<Utc>,
    modified: DateTime<Utc>,
    steps: Vec<Step>,
    /// How long each step runs.
    step_ms: i64,
    /// When the run ends, unless stopped first.
    until: Option<DateTime<Utc>>,
    /// The step that fails and why, when the run is to fail.
    failure: Option<(usize, String)>,
    /// When StopPipelineExecution came, and when the stop completes.
    stop_at: Option<DateTime<Utc>>,
    stop_until: Option<DateTime<Utc>>,
    pipeline_version_id: i64,
    client_request_token: Option<String>,
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct Step {
    name: String,
    step_type: String,
    display_name: Option<String>,
    description: Option<String>,
    /// A Fail step's `ErrorMessage`.
    error_message: Option<String>,
}

/// What CreatePipeline and UpdatePipeline take, in the API's terms; `None` leaves a
/// member out (on update: unchanged).
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct PipelineSpec {
    pub name: String,
    pub display_name: Option<String>,
    pub description: Option<String>,
    pub role_arn: Option<String>,
    pub definition: Option<String>,
    pub parallelism: Option<i64>,
    pub tags: Vec<(String, String)>,
    pub client_request_token: Option<String>,
}

/// What StartPipelineExecution takes.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct ExecutionSpec {
    /// The pipeline's name or ARN.
    pub pipeline: String,
    pub display_name: Option<String>,
    pub description: Option<String>,
    pub parallelism: Option<i64>,
    pub parameters: Vec<(String, String)>,
    pub client_request_token: Option<String>,
}

/// An execution's state, as DescribePipelineExecution reports it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ExecutionState {
    pub status: String,
    pub failure_reason: Option<String>,
    pub created: DateTime<Utc>,
    pub modified: DateTime<Utc>,
}

fn validation(message: impl Into<String>) -> AwsError {
    AwsError::new(400, "ValidationException", message)
}

fn not_found(message: impl Into<String>) -> AwsError {
    AwsError::new(400, "ResourceNotFound", message)
}

/// A constraint failure worded the way SageMaker's request validation words it.
fn constraint(member: &str, value: &str, constraint: &str) -> AwsError {
    validation(format!(
        "1 validation error detected: Value '{value}' at '{member}' failed to satisfy constraint: {constraint}"
    ))
}

fn missing(member: &str) -> AwsError {
    validation(format!(
        "1 validation error detected: Value null at '{member}' failed to satisfy constraint: Member must not be null"
    ))
}

/// `^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,n}$`: letters and digits, single or repeated hyphens
/// between them, at most `max` characters.
fn name_ok(name: &str, max: usize) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && name.len() <= max
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'-')
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
}

fn check_name(member: &str, name: &str) -> Result<(), AwsError> {
    if name_ok(name, 256) {
        Ok(())
    } else {
        Err(constraint(
            member,
            name,
            &format!("Member must satisfy regular expression pattern: {NAME_PATTERN}"),
        ))
    }
}

fn check_role_arn(role: &str) -> Result<(), AwsError> {
    let ok = role
        .strip_prefix("arn:aws")
        .and_then(|rest| rest.split_once(":iam::"))
        .and_then(|(partition, rest)| {
            let partition_ok = partition
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b == b'-');
            let (account, role) = rest.split_once(":role")?;
            Some(
                partition_ok
                    && account.len() == 12
                    && account.bytes().all(|b| b.is_ascii_digit())
                    && !role.trim_start_matches('/').is_empty()
                    && role
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"+=,.@-_/".contains(&b)),
            )
        })
        .unwrap_or(false);
    if ok && role.len() >= 20 && role.len() <= 2048 {
        Ok(())
    } else {
        Err(constraint(
            "roleArn",
            role,
            &format!("Member must satisfy regular expression pattern: {ROLE_PATTERN}"),
        ))
    }
}

fn check_parallelism(value: Option<i64>) -> Result<(), AwsError> {
    match value {
        Some(n) if n < 1 => Err(constraint(
            "parallelismConfiguration.maxParallelExecutionSteps",
            &n.to_string(),
            "Member must have value greater than or equal to 1",
        )),
        _ => Ok(()),
    }
}

/// A pipeline ARN: the account's, the region's, the name lowercased as SageMaker does.
fn pipeline_arn(region: &str, name: &str) -> String {
    format!(
        "arn:aws:sagemaker:{region}:{ACCOUNT}:pipeline/{}",
        name.to_ascii_lowercase()
    )
}

/// Seconds since the epoch, as JSON 1.1 timestamps travel.
fn epoch(t: DateTime<Utc>) -> Value {
    json!(t.timestamp_millis() as f64 / 1000.0)
}

/// A timestamp member sent as epoch seconds (or an RFC 3339 string).
fn time_member(body: &Map<String, Value>, key: &str) -> Option<DateTime<Utc>> {
    match body.get(key)? {
        Value::Number(n) => {
            let ms = (n.as_f64()? * 1000.0).round() as i64;
            DateTime::<Utc>::from_timestamp_millis(ms)
        }
        Value::String(s) => DateTime::parse_from_rfc3339(s)
            .ok()
            .map(|t| t.with_timezone(&Utc)),
        _ => None,
    }
}

fn scaled_ms(secs: f64, scale: f64) -> i64 {
    let ms = secs * 1000.0 * scale;
    if ms.is_finite() && ms > 0.0 {
        ms.round() as i64
    } else {
        0
    }
}

/// Twelve random lowercase letters and digits, the shape of an execution id.
fn execution_id() -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    (0..12)
        .map(|_| char::from(ALPHABET[usize::from(rand::random::<u8>()) % ALPHABET.len()]))
        .collect()
}

/// Checks a pipeline definition as SageMaker does and returns its top-level steps.
fn check_definition(text: &str) -> Result<Vec<Step>, AwsError> {
    let invalid = |why: String| validation(format!("Invalid pipeline definition: {why}"));
    let definition: Value = serde_json::from_str(text)
        .map_err(|e| validation(format!("Unable to parse pipeline definition: {e}")))?;
    let Some(definition) = definition.as_object() else {
        return Err(invalid("the definition must be a JSON object".into()));
    };
    match definition.get("Version") {
        Some(Value::String(v)) if v == DEFINITION_VERSION => {}
        Some(v) => {
            return Err(invalid(format!(
                "Version {v} is not supported; use \"{DEFINITION_VERSION}\""
            )))
        }
        None => {
            return Err(invalid(format!(
                "Version is required and must be \"{DEFINITION_VERSION}\""
            )))
        }
    }
    for (i, p) in definition
        .get("Parameters")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let name = p["Name"].as_str().unwrap_or_default();
        if name.is_empty() {
            return Err(invalid(format!("Parameters[{i}] has no Name")));
        }
        let kind = p["Type"].as_str().unwrap_or_default();
        if !PARAMETER_TYPES.contains(&kind) {
            return Err(invalid(format!(
                "parameter {name} has Type {kind:?}; the types are {}",
                PARAMETER_TYPES.join(", ")
            )));
        }
    }
    let steps = match definition.get("Steps") {
        Some(Value::Array(steps)) if !steps.is_empty() => steps,
        Some(Value::Array(_)) => return Err(invalid("Steps must not be empty".into())),
        Some(_) => return Err(invalid("Steps must be a list".into())),
        None => return Err(invalid("Steps is required".into())),
    };
    // Names are unique across the whole definition, the branches of Condition steps
    // included, and DependsOn may name any of them.
    let mut names: Vec<String> = Vec::new();
    let mut depends: Vec<(String, String)> = Vec::new();
    let mut top = Vec::new();
    let mut queue: Vec<(&Value, bool)> = steps.iter().map(|s| (s, true)).collect();
    let mut next = 0;
    while next < queue.len() {
        let (step, is_top) = queue[next];
        next += 1;
        let Some(step) = step.as_object() else {
            return Err(invalid("every step must be a JSON object".into()));
        };
        let name = step.get("Name").and_then(Value::as_str).unwrap_or_default();
        let name_valid = !name.is_empty()
            && name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !name_valid {
            return Err(invalid(format!(
                "step name {name:?} must match ^[A-Za-z0-9\\-_]{{1,64}}$"
            )));
        }
        if names.iter().any(|n| n == name) {
            return Err(invalid(format!(
                "step names must be unique; {name} appears more than once"
            )));
        }
        names.push(name.to_string());
        let kind = step.get("Type").and_then(Value::as_str).unwrap_or_default();
        if !STEP_TYPES.contains(&kind) {
            return Err(invalid(format!(
                "step {name} has Type {kind:?}, which is not one of {}",
                STEP_TYPES.join(", ")
            )));
        }
        for d in step
            .get("DependsOn")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            depends.push((name.to_string(), d.as_str().unwrap_or_default().to_string()));
        }
        if kind == "Condition" {
            for branch in ["IfSteps", "ElseSteps"] {
                for s in step
                    .get("Arguments")
                    .and_then(|a| a.get(branch))
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    queue.push((s, false));
                }
            }
        }
        if is_top {
            let text = |k: &str| step.get(k).and_then(Value::as_str).map(str::to_string);
            top.push(Step {
                name: name.to_string(),
                step_type: kind.to_string(),
                display_name: text("DisplayName"),
                description: text("Description"),
                error_message: step
                    .get("Arguments")
                    .and_then(|a| a.get("ErrorMessage"))
                    .and_then(Value::as_str)
                    .map(str::to_string),
            });
        }
    }
    if let Some((step, dep)) = depends.iter().find(|(_, d)| !names.contains(d)) {
        return Err(invalid(format!(
            "step {step} depends on {dep:?}, which is not a step of this pipeline"
        )));
    }
    Ok(top)
}

/// The names of the parameters a definition declares.
fn declared_parameters(definition: &str) -> Vec<String> {
    serde_json::from_str::<Value>(definition)
        .ok()
        .and_then(|d| d.get("Parameters").and_then(Value::as_array).cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|p| p["Name"].as_str().map(str::to_string))
        .collect()
}

impl Pipeline {
    fn render(&self) -> Value {
        let mut p = json!({
            "PipelineArn": self.arn,
            "PipelineName": self.name,
            "PipelineDisplayName": self.display_name,
            "PipelineDefinition": self.definition,
            "RoleArn": self.role_arn,
            "PipelineStatus": "Active",
            "CreationTime": epoch(self.created),
            "LastModifiedTime": epoch(self.modified),
        });
        if let Some(d) = &self.description {
            p["PipelineDescription"] = json!(d);
        }
        if let Some(t) = self.last_run {
            p["LastRunTime"] = epoch(t);
        }
        if let Some(n) = self.parallelism {
            p["ParallelismConfiguration"] = json!({"MaxParallelExecutionSteps": n});
        }
        p
    }

    fn summary(&self) -> Value {
        let mut p = json!({
            "PipelineArn": self.arn,
            "PipelineName": self.name,
            "PipelineDisplayName": self.display_name,
            "RoleArn": self.role_arn,
            "CreationTime": epoch(self.created),
            "LastModifiedTime": epoch(self.modified),
        });
        if let Some(d) = &self.description {
            p["PipelineDescription"] = json!(d);
        }
        if let Some(t) = self.last_run {
            p["LastExecutionTime"] = epoch(t);
        }
        p
    }
}

impl Execution {
    fn id(&self) -> &str {
        self.arn.rsplit('/').next().unwrap_or_default()
    }

    fn pipeline_name(&self) -> &str {
        self.pipeline_arn.rsplit('/').next().unwrap_or_default()
    }

    fn terminal(&self) -> bool {
        matches!(self.status.as_str(), STOPPED | FAILED | SUCCEEDED)
    }

    fn step_start(&self, i: usize) -> DateTime<Utc> {
        let i = i64::try_from(i).unwrap_or(i64::MAX / 2);
        self.created + chrono::Duration::milliseconds(self.step_ms.saturating_mul(i))
    }

    fn render(&self, pipeline_display: &str) -> Value {
        let mut e = json!({
            "PipelineArn": self.pipeline_arn,
            "PipelineExecutionArn": self.arn,
            "PipelineExecutionDisplayName": self.display_name,
            "PipelineExecutionStatus": self.status,
            "PipelineExperimentConfig": {"ExperimentName": pipeline_display, "TrialName": self.id()},
            "CreationTime": epoch(self.created),
            "LastModifiedTime": epoch(self.modified),
            "PipelineVersionId": self.pipeline_version_id,
        });
        if let Some(d) = &self.description {
            e["PipelineExecutionDescription"] = json!(d);
        }
        if let Some(r) = &self.failure_reason {
            e["FailureReason"] = json!(r);
        }
        if let Some(n) = self.parallelism {
            e["ParallelismConfiguration"] = json!({"MaxParallelExecutionSteps": n});
        }
        e
    }

    fn summary(&self) -> Value {
        let mut e = json!({
            "PipelineExecutionArn": self.arn,
            "StartTime": epoch(self.created),
            "PipelineExecutionStatus": self.status,
            "PipelineExecutionDisplayName": self.display_name,
        });
        if let Some(d) = &self.description {
            e["PipelineExecutionDescription"] = json!(d);
        }
        if let Some(r) = &self.failure_reason {
            e["PipelineExecutionFailureReason"] = json!(r);
        }
        e
    }

    /// What a step made or decided, as ListPipelineExecutionSteps reports it: the ARN of
    /// the job a Training, Processing, Transform or Tuning step ran (named
    /// `pipelines-<execution id>-<step>` as SageMaker names them), a Condition's outcome,
    /// a Fail step's message.
    fn step_metadata(&self, step: &Step, status: &str) -> Value {
        let execution_id = self.arn.rsplit('/').next().unwrap_or_default();
        let job_name: String = format!("pipelines-{execution_id}-{}", step.name)
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '-'
                }
            })
            .take(63)
            .collect();
        let arn = |what: &str| json!({"Arn": format!("arn:aws:sagemaker:{}:{ACCOUNT}:{what}/{job_name}", self.region)});
        match step.step_type.as_str() {
            "Training" => json!({"TrainingJob": arn("training-job")}),
            "Processing" => json!({"ProcessingJob": arn("processing-job")}),
            "Transform" => json!({"TransformJob": arn("transform-job")}),
            "Tuning" => json!({"TuningJob": arn("hyper-parameter-tuning-job")}),
            "Model" => json!({"Model": arn("model")}),
            "Condition" if status == SUCCEEDED => json!({"Condition": {"Outcome": "True"}}),
            "Fail" => {
                json!({"Fail": {"ErrorMessage": step.error_message.clone().unwrap_or_default()}})
            }
            _ => json!({}),
        }
    }

    /// The steps that have started by `now`, in the order they ran, with their status.
    fn step_entries(&self, now: DateTime<Utc>) -> Vec<Value> {
        let mut out = Vec::new();
        for (i, step) in self.steps.iter().enumerate() {
            let start = self.step_start(i);
            let end = self.step_start(i + 1);
            if start > now || self.stop_at.is_some_and(|s| start > s) {
                break;
            }
            let failing = self.failure.as_ref().filter(|(at, _)| *at == i);
            let (status, ended) = if self.stop_at.is_some_and(|s| end > s) {
                let stopped = self.status == STOPPED;
                let status = if stopped { STOPPED } else { STOPPING };
                (status, self.stop_until.filter(|_| stopped))
            } else if end > now {
                (EXECUTING, None)
            } else if failing.is_some() {
                (FAILED, Some(end))
            } else {
                (SUCCEEDED, Some(end))
            };
            let mut entry = json!({
                "StepName": step.name,
                "StartTime": epoch(start),
                "StepStatus": status,
                "AttemptCount": 1,
                "Metadata": self.step_metadata(step, status),
            });
            if let Some(d) = &step.display_name {
                entry["StepDisplayName"] = json!(d);
            }
            if let Some(d) = &step.description {
                entry["StepDescription"] = json!(d);
            }
            if let Some(t) = ended {
                entry["EndTime"] = epoch(t);
            }
            if let (FAILED, Some((_, reason))) = (status, failing) {
                entry["FailureReason"] = json!(reason);
            }
            out.push(entry);
            if status == FAILED {
                break;
            }
        }
        out
    }
}

/// The values a run uses: those given, then every other parameter of the definition
/// at its default, in the definition's order (as ListPipelineParametersForExecution
/// reports them).
fn with_defaults(definition: &str, given: &[(String, String)]) -> Vec<(String, String)> {
    let mut out = given.to_vec();
    let parsed: Value = serde_json::from_str(definition).unwrap_or(Value::Null);
    for p in parsed["Parameters"].as_array().into_iter().flatten() {
        let Some(name) = p["Name"].as_str() else {
            continue;
        };
        if out.iter().any(|(n, _)| n == name) {
            continue;
        }
        let value = match &p["DefaultValue"] {
            Value::Null => continue,
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        out.push((name.to_string(), value));
    }
    out
}

/// The `Tags` member as `(Key, Value)` pairs.
fn tags_member(body: &Map<String, Value>) -> Result<Vec<(String, String)>, AwsError> {
    let Some(tags) = body.get("Tags") else {
        return Ok(Vec::new());
    };
    let Some(tags) = tags.as_array() else {
        return Err(validation("Tags must be a list"));
    };
    if tags.len() > 50 {
        return Err(constraint(
            "tags",
            &tags.len().to_string(),
            "Member must have length less than or equal to 50",
        ));
    }
    tags.iter()
        .map(|t| {
            let key = t["Key"].as_str().unwrap_or_default();
            if key.is_empty() || key.len() > 128 {
                return Err(constraint(
                    "tags.member.key",
                    key,
                    "Member must have length between 1 and 128",
                ));
            }
            Ok((
                key.to_string(),
                t["Value"].as_str().unwrap_or_default().to_string(),
            ))
        })
        .collect()
}

fn tags_value(tags: &[(String, String)]) -> Value {
    json!(tags
        .iter()
        .map(|(k, v)| json!({"Key": k, "Value": v}))
        .collect::<Vec<_>>())
}

fn merge_tags(tags: &mut Vec<(String, String)>, add: Vec<(String, String)>) {
    for (k, v) in add {
        match tags.iter_mut().find(|(old, _)| *old == k) {
            Some(slot) => slot.1 = v,
            None => tags.push((k, v)),
        }
    }
}

fn str_member(body: &Map<String, Value>, key: &str) -> Result<Option<String>, AwsError> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(AwsError::new(
            400,
            "SerializationException",
            format!("{key} must be a string"),
        )),
    }
}

fn parallelism_member(body: &Map<String, Value>) -> Result<Option<i64>, AwsError> {
    match body.get("ParallelismConfiguration") {
        None | Some(Value::Null) => Ok(None),
        Some(p) => match p.get("MaxParallelExecutionSteps").and_then(Value::as_i64) {
            Some(n) => Ok(Some(n)),
            None => Err(missing(
                "parallelismConfiguration.maxParallelExecutionSteps",
            )),
        },
    }
}

/// One page of `items` after the `NextToken` offset, `MaxResults` long.
fn page(items: Vec<Value>, key: &str, body: &Map<String, Value>) -> Value {
    let start: usize = body
        .get("NextToken")
        .and_then(Value::as_str)
        .and_then(|t| t.parse().ok())
        .unwrap_or(0);
    let max = body
        .get("MaxResults")
        .and_then(Value::as_u64)
        .and_then(|m| usize::try_from(m).ok())
        .filter(|m| *m > 0)
        .unwrap_or(50);
    let end = start.saturating_add(max).min(items.len());
    let slice = items
        .get(start..end)
        .map(<[Value]>::to_vec)
        .unwrap_or_default();
    let mut out = json!({ key: slice });
    if end < items.len() {
        out["NextToken"] = json!(end.to_string());
    }
    out
}

/// Orders listed items by the `SortOrder` member (default newest first).
fn sort_order(body: &Map<String, Value>) -> Result<bool, AwsError> {
    match body.get("SortOrder").and_then(Value::as_str) {
        None | Some("Descending") => Ok(true),
        Some("Ascending") => Ok(false),
        Some(other) => Err(constraint(
            "sortOrder",
            other,
            "Member must satisfy enum value set: [Ascending, Descending]",
        )),
    }
}

impl SageMaker {
    /// One line per pipeline and execution, for `Sandbox::inventory`. Executions are
    /// listed whatever their status: they are records of their pipeline, and go only
    /// with it (DeletePipeline).
    pub(crate) fn inventory(&self, out: &mut Vec<String>) {
        for p in &self.pipelines {
            out.push(format!("sagemaker pipeline {}/{}", p.region, p.name));
        }
        for e in &self.executions {
            out.push(format!(
                "sagemaker execution {}/{}/{}",
                e.region,
                e.pipeline_name(),
                e.id()
            ));
        }
    }

    /// Ends the runs and stops whose time has come.
    pub(crate) fn settle(&mut self, now: DateTime<Utc>) {
        for e in &mut self.executions {
            match e.status.as_str() {
                EXECUTING if e.until.is_some_and(|u| now >= u) => {
                    let end = e.until.unwrap_or(now);
                    match &e.failure {
                        Some((_, reason)) => {
                            e.status = FAILED.to_string();
                            e.failure_reason = Some(reason.clone());
                        }
                        None => e.status = SUCCEEDED.to_string(),
                    }
                    e.modified = end;
                }
                STOPPING if e.stop_until.is_some_and(|u| now >= u) => {
                    e.status = STOPPED.to_string();
                    e.modified = e.stop_until.unwrap_or(now);
                }
                _ => {}
            }
        }
    }

    pub(crate) fn handle(
        &mut self,
        req: &AwsRequest,
        ctx: &AwsCtx,
        iam: &super::iam::Iam,
    ) -> Result<AwsResponse, AwsError> {
        let target = req.header("x-amz-target").unwrap_or_default();
        let Some(op) = target.strip_prefix("SageMaker.") else {
            return Err(AwsError::new(
                400,
                "UnknownOperationException",
                format!("the X-Amz-Target {target:?} names no SageMaker operation"),
            ));
        };
        let body = match req.json()? {
            Value::Null => Map::new(),
            Value::Object(m) => m,
            _ => {
                return Err(AwsError::new(
                    400,
                    "SerializationException",
                    "the request body must be a JSON object",
                ))
            }
        };
        let region = req.region.as_str();
        let now = ctx.now;
        let scale = ctx.scale * ctx.faults.slow_factor();
        let out = match op {
            "CreatePipeline" => {
                let arn = self.create_pipeline(region, &pipeline_spec(&body)?, now)?;
                json!({"PipelineArn": arn})
            }
            "UpdatePipeline" => {
                let (arn, version) = self.update_pipeline(region, &pipeline_spec(&body)?, now)?;
                json!({"PipelineArn": arn, "PipelineVersionId": version})
            }
            "DescribePipeline" => {
                let name =
                    str_member(&body, "PipelineName")?.ok_or_else(|| missing("pipelineName"))?;
                self.pipeline(region, &name)
                    .map(Pipeline::render)
                    .ok_or_else(|| pipeline_not_found(region, &name))?
            }
            "DeletePipeline" => {
                let name =
                    str_member(&body, "PipelineName")?.ok_or_else(|| missing("pipelineName"))?;
                json!({"PipelineArn": self.delete_pipeline(region, &name)?})
            }
            "ListPipelines" => self.list_pipelines(region, &body)?,
            "StartPipelineExecution" => {
                let spec = execution_spec(&body)?;
                let failure = ctx
                    .faults
                    .take_operation_failure("sagemaker")
                    .map(|(_, m)| m);
                let arn = self.start_execution(region, &spec, now, scale, failure, iam)?;
                json!({"PipelineExecutionArn": arn})
            }
            "DescribePipelineExecution" => {
                let arn = str_member(&body, "PipelineExecutionArn")?
                    .ok_or_else(|| missing("pipelineExecutionArn"))?;
                let e = self.execution_index(&arn)?;
                let e = &self.executions[e];
                let display = self
                    .pipelines
                    .iter()
                    .find(|p| p.arn == e.pipeline_arn)
                    .map_or(e.pipeline_name(), |p| p.display_name.as_str());
                e.render(display)
            }
            "ListPipelineExecutions" => self.list_executions(region, &body)?,
            "StopPipelineExecution" => {
                let arn = str_member(&body, "PipelineExecutionArn")?
                    .ok_or_else(|| missing("pipelineExecutionArn"))?;
                json!({"PipelineExecutionArn": self.stop_execution(&arn, now, scale)?})
            }
            "ListPipelineExecutionSteps" => {
                let arn = str_member(&body, "PipelineExecutionArn")?
                    .ok_or_else(|| missing("pipelineExecutionArn"))?;
                let e = &self.executions[self.execution_index(&arn)?];
                let mut steps = e.step_entries(now);
                if sort_order(&body)? {
                    steps.reverse();
                }
                page(steps, "PipelineExecutionSteps", &body)
            }
            "ListPipelineParametersForExecution" => {
                let arn = str_member(&body, "PipelineExecutionArn")?
                    .ok_or_else(|| missing("pipelineExecutionArn"))?;
                let e = &self.executions[self.execution_index(&arn)?];
                let parameters: Vec<Value> = e
                    .parameters
                    .iter()
                    .map(|(name, value)| json!({"Name": name, "Value": value}))
                    .collect();
                page(parameters, "PipelineParameters", &body)
            }
            "AddTags" | "ListTags" | "DeleteTags" => self.tags(op, &body)?,
            other => {
                return Err(AwsError::new(
                    400,
                    "UnknownOperationException",
                    format!("the sandbox's SageMaker does not emulate {other}"),
                ))
            }
        };
        Ok(AwsResponse::json(200, CONTENT_TYPE, &out))
    }

    fn pipeline_index(&self, region: &str, name_or_arn: &str) -> Option<usize> {
        self.pipelines.iter().position(|p| {
            if name_or_arn.starts_with("arn:") {
                p.arn.eq_ignore_ascii_case(name_or_arn)
            } else {
                p.region == region && p.name.eq_ignore_ascii_case(name_or_arn)
            }
        })
    }

    /// The pipeline named (or with the ARN) `name_or_arn`, if there is one.
    pub(crate) fn pipeline(&self, region: &str, name_or_arn: &str) -> Option<&Pipeline> {
        self.pipeline_index(region, name_or_arn)
            .map(|i| &self.pipelines[i])
    }

    /// CreatePipeline: the new pipeline's ARN. Fails with ValidationException on a bad
    /// name, role or definition, or a name already taken (unless the same
    /// ClientRequestToken retries the same create).
    pub(crate) fn create_pipeline(
        &mut self,
        region: &str,
        spec: &PipelineSpec,
        now: DateTime<Utc>,
    ) -> Result<String, AwsError> {
        if spec.name.is_empty() {
            return Err(missing("pipelineName"));
        }
        check_name("pipelineName", &spec.name)?;
        if let Some(d) = &spec.display_name {
            check_name("pipelineDisplayName", d)?;
        }
        let role = spec.role_arn.as_deref().ok_or_else(|| missing("roleArn"))?;
        check_role_arn(role)?;
        check_parallelism(spec.parallelism)?;
        if let Some(i) = self.pipeline_index(region, &spec.name) {
            let existing = &self.pipelines[i];
            if spec.client_request_token.is_some()
                && existing.client_request_token == spec.client_request_token
            {
                return Ok(existing.arn.clone());
            }
            return Err(validation(format!(
                "Pipeline names must be unique within an AWS account and region. Pipeline with name ({}) already exists.",
                spec.name
            )));
        }
        let definition = spec.definition.as_deref().ok_or_else(|| {
            validation(
                "Either PipelineDefinition or PipelineDefinitionS3Location must be provided.",
            )
        })?;
        check_definition(definition)?;
        if spec.description.as_ref().is_some_and(|d| d.len() > 3072) {
            return Err(validation(
                "1 validation error detected: Value at 'pipelineDescription' failed to satisfy constraint: Member must have length less than or equal to 3072",
            ));
        }
        let arn = pipeline_arn(region, &spec.name);
        self.pipelines.push(Pipeline {
            region: region.to_string(),
            name: spec.name.clone(),
            arn: arn.clone(),
            display_name: spec
                .display_name
                .clone()
                .unwrap_or_else(|| spec.name.clone()),
            description: spec.description.clone(),
            role_arn: role.to_string(),
            definition: definition.to_string(),
            parallelism: spec.parallelism,
            tags: spec.tags.clone(),
            created: now,
            modified: now,
            last_run: None,
            version_id: 1,
            client_request_token: spec.client_request_token.clone(),
        });
        Ok(arn)
    }

    /// UpdatePipeline: changes the members `spec` sets; returns the ARN and the new
    /// version id. Fails with ResourceNotFound, or ValidationException on bad values.
    pub(crate) fn update_pipeline(
        &mut self,
        region: &str,
        spec: &PipelineSpec,
        now: DateTime<Utc>,
    ) -> Result<(String, i64), AwsError> {
        if spec.name.is_empty() {
            return Err(missing("pipelineName"));
        }
        let i = self
            .pipeline_index(region, &spec.name)
            .ok_or_else(|| pipeline_not_found(region, &spec.name))?;
        if let Some(d) = &spec.display_name {
            check_name("pipelineDisplayName", d)?;
        }
        if let Some(role) = &spec.role_arn {
            check_role_arn(role)?;
        }
        check_parallelism(spec.parallelism)?;
        if let Some(d) = &spec.definition {
            check_definition(d)?;
        }
        let p = &mut self.pipelines[i];
        if let Some(d) = &spec.display_name {
            p.display_name = d.clone();
        }
        if let Some(d) = &spec.description {
            p.description = Some(d.clone());
        }
        if let Some(r) = &spec.role_arn {
            p.role_arn = r.clone();
        }
        if let Some(d) = &spec.definition {
            p.definition = d.clone();
        }
        if spec.parallelism.is_some() {
            p.parallelism = spec.parallelism;
        }
        p.version_id += 1;
        p.modified = now;
        Ok((p.arn.clone(), p.version_id))
    }

    /// DeletePipeline: the deleted pipeline's ARN. Its executions go with it, running
    /// ones included (SageMaker stops them). Fails with ResourceNotFound.
    pub(crate) fn delete_pipeline(
        &mut self,
        region: &str,
        name_or_arn: &str,
    ) -> Result<String, AwsError> {
        let i = self
            .pipeline_index(region, name_or_arn)
            .ok_or_else(|| pipeline_not_found(region, name_or_arn))?;
        let p = self.pipelines.remove(i);
        self.executions.retain(|e| e.pipeline_arn != p.arn);
        Ok(p.arn)
    }

    /// StartPipelineExecution: the new execution's ARN. The run takes `base::STEP` per
    /// top-level step at `scale`; `failure` (a planned fault) makes its first step fail
    /// with that reason, as does a pipeline role of `iam` that SageMaker may not assume
    /// (its steps run as it). Fails with ResourceNotFound for an unknown pipeline, or
    /// ValidationException for bad names or undeclared parameters.
    pub(crate) fn start_execution(
        &mut self,
        region: &str,
        spec: &ExecutionSpec,
        now: DateTime<Utc>,
        scale: f64,
        failure: Option<String>,
        iam: &super::iam::Iam,
    ) -> Result<String, AwsError> {
        if spec.pipeline.is_empty() {
            return Err(missing("pipelineName"));
        }
        let i = self
            .pipeline_index(region, &spec.pipeline)
            .ok_or_else(|| pipeline_not_found(region, &spec.pipeline))?;
        if let Some(d) = &spec.display_name {
            if !name_ok(d, 82) {
                return Err(constraint(
                    "pipelineExecutionDisplayName",
                    d,
                    &format!(
                        "Member must satisfy regular expression pattern: {EXECUTION_NAME_PATTERN}"
                    ),
                ));
            }
        }
        check_parallelism(spec.parallelism)?;
        let pipeline = &self.pipelines[i];
        if let Some(token) = &spec.client_request_token {
            if let Some(e) = self.executions.iter().find(|e| {
                e.pipeline_arn == pipeline.arn && e.client_request_token.as_ref() == Some(token)
            }) {
                return Ok(e.arn.clone());
            }
        }
        let declared = declared_parameters(&pipeline.definition);
        if let Some((name, _)) = spec.parameters.iter().find(|(n, _)| !declared.contains(n)) {
            return Err(validation(format!(
                "Parameter {name} is not defined in the pipeline definition of {}",
                pipeline.name
            )));
        }
        let steps = check_definition(&pipeline.definition)?;
        // A role of the account SageMaker may not assume fails the first step, as
        // SageMaker reports it once it tries to run the step as that role. (A role the
        // sandbox does not hold is taken to be assumable.)
        let failure = failure.or_else(|| {
            super::iam::role(iam, &pipeline.role_arn)
                .filter(|role| !super::iam::trusts(role, "sagemaker.amazonaws.com"))
                .map(|_| {
                    format!(
                        "ClientError: SageMaker is unable to perform: sts:AssumeRole on the role {}. Check if you have a trust relationship for 'sagemaker.amazonaws.com' to assume the role.",
                        pipeline.role_arn
                    )
                })
        });
        // A planned fault fails the first step; otherwise a Fail step ends the run.
        let failure = failure.map(|m| (0, m)).or_else(|| {
            steps.iter().position(|s| s.step_type == "Fail").map(|i| {
                let message = steps[i]
                    .error_message
                    .clone()
                    .unwrap_or_else(|| format!("Step {} failed", steps[i].name));
                (i, message)
            })
        });
        let ran = failure.as_ref().map_or(steps.len(), |(i, _)| i + 1);
        let step_ms = scaled_ms(base::STEP, scale);
        let total = step_ms.saturating_mul(i64::try_from(ran).unwrap_or(i64::MAX / 2));
        let arn = format!(
            "arn:aws:sagemaker:{region}:{ACCOUNT}:pipeline/{}/execution/{}",
            pipeline.name.to_ascii_lowercase(),
            execution_id()
        );
        let execution = Execution {
            region: region.to_string(),
            arn: arn.clone(),
            pipeline_arn: pipeline.arn.clone(),
            display_name: spec
                .display_name
                .clone()
                .unwrap_or_else(|| format!("execution-{}", now.timestamp_millis())),
            description: spec.description.clone(),
            parallelism: spec.parallelism.or(pipeline.parallelism),
            parameters: with_defaults(&pipeline.definition, &spec.parameters),
            status: EXECUTING.to_string(),
            failure_reason: None,
            created: now,
            modified: now,
            steps,
            step_ms,
            until: Some(now + chrono::Duration::milliseconds(total)),
            failure,
            stop_at: None,
            stop_until: None,
            pipeline_version_id: pipeline.version_id,
            client_request_token: spec.client_request_token.clone(),
        };
        self.pipelines[i].last_run = Some(now);
        self.executions.push(execution);
        Ok(arn)
    }

    fn execution_index(&self, arn: &str) -> Result<usize, AwsError> {
        self.executions
            .iter()
            .position(|e| e.arn == arn)
            .ok_or_else(|| not_found(format!("Pipeline execution '{arn}' does not exist.")))
    }

    /// DescribePipelineExecution's status fields, or `None` when there is no such
    /// execution.
    pub(crate) fn execution(&self, arn: &str) -> Option<ExecutionState> {
        let e = &self.executions[self.execution_index(arn).ok()?];
        Some(ExecutionState {
            status: e.status.clone(),
            failure_reason: e.failure_reason.clone(),
            created: e.created,
            modified: e.modified,
        })
    }

    /// StopPipelineExecution: an Executing run goes Stopping, then Stopped after
    /// `base::STOP` at `scale`; stopping one already stopping is a no-op. Fails with
    /// ResourceNotFound, or ConflictException when the run has already ended.
    pub(crate) fn stop_execution(
        &mut self,
        arn: &str,
        now: DateTime<Utc>,
        scale: f64,
    ) -> Result<String, AwsError> {
        let i = self.execution_index(arn)?;
        let e = &mut self.executions[i];
        if e.terminal() {
            return Err(AwsError::new(
                400,
                "ConflictException",
                format!(
                    "Pipeline execution '{arn}' is in {} status and cannot be stopped.",
                    e.status
                ),
            ));
        }
        if e.status == EXECUTING {
            e.status = STOPPING.to_string();
            e.stop_at = Some(now);
            e.stop_until = Some(now + chrono::Duration::milliseconds(scaled_ms(base::STOP, scale)));
            e.modified = now;
        }
        Ok(e.arn.clone())
    }

    fn list_pipelines(&self, region: &str, body: &Map<String, Value>) -> Result<Value, AwsError> {
        let prefix = str_member(body, "PipelineNamePrefix")?.unwrap_or_default();
        let after = time_member(body, "CreatedAfter");
        let before = time_member(body, "CreatedBefore");
        let mut found: Vec<&Pipeline> = self
            .pipelines
            .iter()
            .filter(|p| p.region == region)
            .filter(|p| {
                p.name
                    .to_ascii_lowercase()
                    .starts_with(&prefix.to_ascii_lowercase())
            })
            .filter(|p| after.is_none_or(|t| p.created > t))
            .filter(|p| before.is_none_or(|t| p.created < t))
            .collect();
        match body.get("SortBy").and_then(Value::as_str) {
            Some("Name") => found.sort_by_key(|p| p.name.to_ascii_lowercase()),
            None | Some("CreationTime") => found.sort_by_key(|p| p.created),
            Some(other) => {
                return Err(constraint(
                    "sortBy",
                    other,
                    "Member must satisfy enum value set: [Name, CreationTime]",
                ))
            }
        }
        if sort_order(body)? {
            found.reverse();
        }
        let items = found.into_iter().map(Pipeline::summary).collect();
        Ok(page(items, "PipelineSummaries", body))
    }

    fn list_executions(&self, region: &str, body: &Map<String, Value>) -> Result<Value, AwsError> {
        let name = str_member(body, "PipelineName")?.ok_or_else(|| missing("pipelineName"))?;
        let pipeline = self
            .pipeline(region, &name)
            .ok_or_else(|| pipeline_not_found(region, &name))?;
        let after = time_member(body, "CreatedAfter");
        let before = time_member(body, "CreatedBefore");
        let mut found: Vec<&Execution> = self
            .executions
            .iter()
            .filter(|e| e.pipeline_arn == pipeline.arn)
            .filter(|e| after.is_none_or(|t| e.created > t))
            .filter(|e| before.is_none_or(|t| e.created < t))
            .collect();
        match body.get("SortBy").and_then(Value::as_str) {
            None | Some("CreationTime") => found.sort_by_key(|e| e.created),
            Some("PipelineExecutionArn") => found.sort_by(|a, b| a.arn.cmp(&b.arn)),
            Some(other) => {
                return Err(constraint(
                    "sortBy",
                    other,
                    "Member must satisfy enum value set: [CreationTime, PipelineExecutionArn]",
                ))
            }
        }
        if sort_order(body)? {
            found.reverse();
        }
        let items = found.into_iter().map(Execution::summary).collect();
        Ok(page(items, "PipelineExecutionSummaries", body))
    }

    fn tags(&mut self, op: &str, body: &Map<String, Value>) -> Result<Value, AwsError> {
        let arn = str_member(body, "ResourceArn")?.ok_or_else(|| missing("resourceArn"))?;
        let Some(p) = self
            .pipelines
            .iter_mut()
            .find(|p| p.arn.eq_ignore_ascii_case(&arn))
        else {
            return Err(not_found(format!("Resource {arn} does not exist.")));
        };
        match op {
            "AddTags" => {
                let add = tags_member(body)?;
                merge_tags(&mut p.tags, add.clone());
                Ok(json!({"Tags": tags_value(&add)}))
            }
            "DeleteTags" => {
                let keys: Vec<&str> = body
                    .get("TagKeys")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .collect();
                if keys.is_empty() {
                    return Err(missing("tagKeys"));
                }
                p.tags.retain(|(k, _)| !keys.contains(&k.as_str()));
                Ok(json!({}))
            }
            _ => Ok(json!({"Tags": tags_value(&p.tags)})),
        }
    }
}

fn pipeline_not_found(region: &str, name_or_arn: &str) -> AwsError {
    let arn = if name_or_arn.starts_with("arn:") {
        name_or_arn.to_string()
    } else {
        pipeline_arn(region, name_or_arn)
    };
    not_found(format!("Pipeline '{arn}' does not exist."))
}

/// CreatePipeline's and UpdatePipeline's members.
fn pipeline_spec(body: &Map<String, Value>) -> Result<PipelineSpec, AwsError> {
    if body.contains_key("PipelineDefinitionS3Location") && !body.contains_key("PipelineDefinition")
    {
        // The sandbox's S3 is not wired to SageMaker; say so rather than pretend.
        return Err(validation(
            "the sandbox reads pipeline definitions from PipelineDefinition only, not PipelineDefinitionS3Location",
        ));
    }
    Ok(PipelineSpec {
        name: str_member(body, "PipelineName")?.unwrap_or_default(),
        display_name: str_member(body, "PipelineDisplayName")?,
        description: str_member(body, "PipelineDescription")?,
        role_arn: str_member(body, "RoleArn")?,
        definition: str_member(body, "PipelineDefinition")?,
        parallelism: parallelism_member(body)?,
        tags: tags_member(body)?,
        client_request_token: str_member(body, "ClientRequestToken")?,
    })
}

/// StartPipelineExecution's members.
fn execution_spec(body: &Map<String, Value>) -> Result<ExecutionSpec, AwsError> {
    let parameters = body
        .get("PipelineParameters")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|p| {
            let name = p["Name"].as_str().unwrap_or_default();
            if name.is_empty() {
                return Err(missing("pipelineParameters.member.name"));
            }
            Ok((
                name.to_string(),
                p["Value"].as_str().unwrap_or_default().to_string(),
            ))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ExecutionSpec {
        pipeline: str_member(body, "PipelineName")?.unwrap_or_default(),
        display_name: str_member(body, "PipelineExecutionDisplayName")?,
        description: str_member(body, "PipelineExecutionDescription")?,
        parallelism: parallelism_member(body)?,
        parameters,
        client_request_token: str_member(body, "ClientRequestToken")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::Faults;
    use axum::http::Method;

    const ROLE: &str = "arn:aws:iam::123456789012:role/SageMakerRole";

    fn definition(steps: &[(&str, &str)]) -> String {
        let steps: Vec<Value> = steps
            .iter()
            .map(|(name, kind)| json!({"Name": name, "Type": kind, "Arguments": {}}))
            .collect();
        json!({"Version": "2020-12-01", "Parameters": [{"Name": "Epochs", "Type": "Integer", "DefaultValue": 1}], "Steps": steps}).to_string()
    }

    struct Harness {
        sm: SageMaker,
        faults: Faults,
        iam: crate::aws::iam::Iam,
        secs: i64,
    }

    impl Harness {
        fn new() -> Harness {
            Harness {
                sm: SageMaker::default(),
                faults: Faults::default(),
                iam: crate::aws::iam::Iam::default(),
                secs: 0,
            }
        }

        fn at(&mut self, secs: i64) -> &mut Self {
            self.secs = secs;
            self
        }

        fn call(&mut self, op: &str, body: Value) -> Result<Value, AwsError> {
            let now =
                DateTime::<Utc>::from_timestamp(1_700_000_000 + self.secs, 0).expect("valid time");
            self.sm.settle(now);
            let target = format!("SageMaker.{op}");
            let req = AwsRequest::new(
                Method::POST,
                "/",
                &[("X-Amz-Target", target.as_str())],
                body.to_string().as_bytes(),
            );
            let ctx = AwsCtx {
                now,
                scale: 1.0,
                faults: &self.faults,
            };
            let resp = self.sm.handle(&req, &ctx, &self.iam)?;
            assert_eq!(resp.header("content-type"), Some(CONTENT_TYPE));
            Ok(resp.json_body().unwrap_or(Value::Null))
        }

        fn create(&mut self, name: &str, steps: &[(&str, &str)]) -> Result<Value, AwsError> {
            self.call(
                "CreatePipeline",
                json!({"PipelineName": name, "RoleArn": ROLE, "PipelineDefinition": definition(steps)}),
            )
        }

        fn start(&mut self, name: &str) -> String {
            self.call("StartPipelineExecution", json!({"PipelineName": name}))
                .expect("started")["PipelineExecutionArn"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        }

        fn status(&mut self, arn: &str) -> Value {
            self.call(
                "DescribePipelineExecution",
                json!({"PipelineExecutionArn": arn}),
            )
            .expect("described")["PipelineExecutionStatus"]
                .clone()
        }
    }

    #[test]
    fn a_run_uses_the_given_parameters_then_the_definitions_defaults() {
        let definition = r#"{"Parameters": [{"Name": "Epochs", "Type": "Integer", "DefaultValue": 3},
            {"Name": "Data", "Type": "String", "DefaultValue": "s3://b/d"}, {"Name": "NoDefault", "Type": "String"}]}"#;
        assert_eq!(
            with_defaults(definition, &[("Epochs".into(), "5".into())]),
            [
                ("Epochs".to_string(), "5".to_string()),
                ("Data".to_string(), "s3://b/d".to_string())
            ]
        );
    }

    #[test]
    fn definitions_are_checked_like_sagemaker() {
        let cases = [
            ("not json", "Unable to parse pipeline definition"),
            ("[]", "JSON object"),
            (
                r#"{"Steps": [{"Name": "a", "Type": "Training"}]}"#,
                "Version",
            ),
            (
                r#"{"Version": "2019-01-01", "Steps": [{"Name": "a", "Type": "Training"}]}"#,
                "Version",
            ),
            (
                r#"{"Version": "2020-12-01", "Steps": []}"#,
                "Steps must not be empty",
            ),
            (r#"{"Version": "2020-12-01"}"#, "Steps is required"),
            (
                r#"{"Version": "2020-12-01", "Steps": [{"Name": "a", "Type": "Training"}, {"Name": "a", "Type": "Processing"}]}"#,
                "unique",
            ),
            (
                r#"{"Version": "2020-12-01", "Steps": [{"Name": "a", "Type": "Cooking"}]}"#,
                "Cooking",
            ),
            (
                r#"{"Version": "2020-12-01", "Steps": [{"Name": "a b", "Type": "Training"}]}"#,
                "step name",
            ),
            (
                r#"{"Version": "2020-12-01", "Steps": [{"Name": "a", "Type": "Training", "DependsOn": ["b"]}]}"#,
                "depends on",
            ),
            (
                r#"{"Version": "2020-12-01", "Parameters": [{"Name": "p", "Type": "Blob"}], "Steps": [{"Name": "a", "Type": "Training"}]}"#,
                "Blob",
            ),
            (
                r#"{"Version": "2020-12-01", "Steps": [{"Name": "c", "Type": "Condition", "Arguments": {"IfSteps": [{"Name": "c", "Type": "Training"}]}}]}"#,
                "unique",
            ),
        ];
        for (text, needle) in cases {
            let e = check_definition(text).expect_err(text);
            assert_eq!(e.code, "ValidationException", "{text}");
            assert!(e.message.contains(needle), "{text}: {}", e.message);
        }
        let steps = check_definition(&definition(&[
            ("Prep", "Processing"),
            ("Train", "Training"),
        ]))
        .expect("valid");
        assert_eq!(steps.len(), 2);
    }

    #[test]
    fn names_and_roles_follow_the_model_patterns() {
        for (name, ok) in [
            ("a", true),
            ("my-pipeline-1", true),
            ("a--b", true),
            ("-a", false),
            ("a-", false),
            ("a_b", false),
            ("", false),
        ] {
            assert_eq!(name_ok(name, 256), ok, "{name}");
        }
        assert!(check_role_arn(ROLE).is_ok());
        assert!(check_role_arn("arn:aws:iam::123:role/x").is_err());
        assert!(check_role_arn("arn:aws:s3:::bucket/key-name-here").is_err());
    }

    #[test]
    fn pipelines_are_created_described_updated_and_deleted() {
        let mut h = Harness::new();
        let made = h
            .create("Train-Pipeline", &[("Train", "Training")])
            .expect("created");
        assert_eq!(
            made["PipelineArn"],
            "arn:aws:sagemaker:us-east-1:123456789012:pipeline/train-pipeline"
        );
        let dup = h
            .create("Train-Pipeline", &[("Train", "Training")])
            .expect_err("taken");
        assert_eq!(
            dup.message,
            "Pipeline names must be unique within an AWS account and region. Pipeline with name (Train-Pipeline) already exists."
        );
        let token = "0123456789abcdef0123456789abcdef";
        let first = h
            .call("CreatePipeline", json!({"PipelineName": "p2", "RoleArn": ROLE, "PipelineDefinition": definition(&[("a", "Lambda")]), "ClientRequestToken": token}))
            .expect("created");
        let again = h
            .call("CreatePipeline", json!({"PipelineName": "p2", "RoleArn": ROLE, "PipelineDefinition": definition(&[("a", "Lambda")]), "ClientRequestToken": token}))
            .expect("a retry with the same token");
        assert_eq!(first, again);
        let bad = h
            .call("CreatePipeline", json!({"PipelineName": "bad_name", "RoleArn": ROLE, "PipelineDefinition": definition(&[("a", "Lambda")])}))
            .expect_err("bad name");
        assert!(
            bad.message
                .starts_with("1 validation error detected: Value 'bad_name' at 'pipelineName'"),
            "{}",
            bad.message
        );
        let d = h
            .call(
                "DescribePipeline",
                json!({"PipelineName": "train-pipeline"}),
            )
            .expect("described case-insensitively");
        assert_eq!(d["PipelineStatus"], "Active");
        assert_eq!(d["PipelineDisplayName"], "Train-Pipeline");
        assert!(d["CreationTime"].is_number());
        let u = h
            .call(
                "UpdatePipeline",
                json!({"PipelineName": "Train-Pipeline", "PipelineDescription": "v2"}),
            )
            .expect("updated");
        assert_eq!(u["PipelineVersionId"], 2);
        let list = h
            .call(
                "ListPipelines",
                json!({"SortBy": "Name", "SortOrder": "Ascending"}),
            )
            .expect("listed");
        let names: Vec<&str> = list["PipelineSummaries"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p["PipelineName"].as_str())
            .collect();
        assert_eq!(names, ["p2", "Train-Pipeline"]);
        h.call("DeletePipeline", json!({"PipelineName": "Train-Pipeline"}))
            .expect("deleted");
        let gone = h
            .call(
                "DescribePipeline",
                json!({"PipelineName": "Train-Pipeline"}),
            )
            .expect_err("gone");
        assert_eq!((gone.status, gone.code.as_str()), (400, "ResourceNotFound"));
        assert_eq!(
            gone.message,
            "Pipeline 'arn:aws:sagemaker:us-east-1:123456789012:pipeline/train-pipeline' does not exist."
        );
    }

    #[test]
    fn executions_run_their_steps_then_succeed() {
        let mut h = Harness::new();
        h.create("p", &[("Prep", "Processing"), ("Train", "Training")])
            .expect("created");
        let arn = h.at(0).start("p");
        assert!(arn.starts_with("arn:aws:sagemaker:us-east-1:123456789012:pipeline/p/execution/"));
        let id = arn.rsplit('/').next().unwrap_or_default();
        assert!(
            id.len() == 12
                && id
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        );
        assert_eq!(h.status(&arn), EXECUTING);
        let steps = h
            .at(3)
            .call(
                "ListPipelineExecutionSteps",
                json!({"PipelineExecutionArn": arn}),
            )
            .expect("steps");
        let states: Vec<(&str, &str)> = steps["PipelineExecutionSteps"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|s| {
                (
                    s["StepName"].as_str().unwrap_or(""),
                    s["StepStatus"].as_str().unwrap_or(""),
                )
            })
            .collect();
        assert_eq!(states, [("Train", EXECUTING), ("Prep", SUCCEEDED)]);
        assert_eq!(h.at(4).status(&arn), SUCCEEDED);
        let steps = h
            .call(
                "ListPipelineExecutionSteps",
                json!({"PipelineExecutionArn": arn, "SortOrder": "Ascending"}),
            )
            .expect("steps");
        assert_eq!(
            steps["PipelineExecutionSteps"].as_array().map(Vec::len),
            Some(2)
        );
        assert!(steps["PipelineExecutionSteps"][1]["EndTime"].is_number());
        let e = h.sm.execution(&arn).expect("known");
        assert_eq!(e.modified - e.created, chrono::Duration::seconds(4));
        let conflict = h
            .call(
                "StopPipelineExecution",
                json!({"PipelineExecutionArn": arn}),
            )
            .expect_err("done");
        assert_eq!(conflict.code, "ConflictException");
        let list = h
            .call("ListPipelineExecutions", json!({"PipelineName": "p"}))
            .expect("listed");
        assert_eq!(
            list["PipelineExecutionSummaries"][0]["PipelineExecutionStatus"],
            SUCCEEDED
        );
    }

    #[test]
    fn a_pipeline_role_sagemaker_may_not_assume_fails_the_first_step() {
        use crate::aws::iam;
        let mut h = Harness::new();
        let mut role = iam::role_with(&[], &[]);
        role.arn = ROLE.to_string();
        role.trust = json!({"Statement": [{"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}]});
        h.iam = iam::holding(vec![role.clone()]);
        h.create("p", &[("Train", "Training")]).expect("created");
        let failing = h.at(0).start("p");
        assert_eq!(h.at(2).status(&failing), FAILED);
        let steps = h
            .call(
                "ListPipelineExecutionSteps",
                json!({"PipelineExecutionArn": failing}),
            )
            .expect("listed");
        assert_eq!(
            steps["PipelineExecutionSteps"][0]["FailureReason"],
            format!("ClientError: SageMaker is unable to perform: sts:AssumeRole on the role {ROLE}. Check if you have a trust relationship for 'sagemaker.amazonaws.com' to assume the role.")
        );
        // Trusted, the same pipeline runs.
        role.trust = json!({"Statement": [{"Effect": "Allow", "Principal": {"Service": ["ec2.amazonaws.com", "sagemaker.amazonaws.com"]}, "Action": "sts:AssumeRole"}]});
        h.iam = iam::holding(vec![role]);
        let running = h.at(3).start("p");
        assert_eq!(h.at(10).status(&running), SUCCEEDED);
    }

    #[test]
    fn failures_and_stops() {
        let mut h = Harness::new();
        h.create("p", &[("Prep", "Processing"), ("Train", "Training")])
            .expect("created");
        h.faults
            .fail_next_operation("sagemaker", "AlgorithmError: loss is NaN");
        let failing = h.at(0).start("p");
        assert_eq!(h.at(2).status(&failing), FAILED);
        let d = h
            .call(
                "DescribePipelineExecution",
                json!({"PipelineExecutionArn": failing}),
            )
            .expect("described");
        assert_eq!(d["FailureReason"], "AlgorithmError: loss is NaN");
        let steps = h
            .call(
                "ListPipelineExecutionSteps",
                json!({"PipelineExecutionArn": failing}),
            )
            .expect("steps");
        assert_eq!(
            steps["PipelineExecutionSteps"].as_array().map(Vec::len),
            Some(1)
        );
        assert_eq!(steps["PipelineExecutionSteps"][0]["StepStatus"], FAILED);
        assert_eq!(
            steps["PipelineExecutionSteps"][0]["FailureReason"],
            "AlgorithmError: loss is NaN"
        );

        let running = h.at(10).start("p");
        h.at(11)
            .call(
                "StopPipelineExecution",
                json!({"PipelineExecutionArn": running}),
            )
            .expect("stopping");
        assert_eq!(h.status(&running), STOPPING);
        h.call(
            "StopPipelineExecution",
            json!({"PipelineExecutionArn": running}),
        )
        .expect("stopping again is fine");
        assert_eq!(h.at(12).status(&running), STOPPED);
        let steps = h
            .call(
                "ListPipelineExecutionSteps",
                json!({"PipelineExecutionArn": running}),
            )
            .expect("steps");
        assert_eq!(steps["PipelineExecutionSteps"][0]["StepStatus"], STOPPED);

        h.create("f", &[("Check", "Processing"), ("Stop", "Fail")])
            .expect("created");
        let fail_step = h.at(20).start("f");
        assert_eq!(h.at(24).status(&fail_step), FAILED);

        let unknown = h
            .call("StartPipelineExecution", json!({"PipelineName": "p", "PipelineParameters": [{"Name": "Nope", "Value": "1"}]}))
            .expect_err("undeclared");
        assert_eq!(unknown.code, "ValidationException");
        let missing = h
            .call("StartPipelineExecution", json!({"PipelineName": "zzz"}))
            .expect_err("no pipeline");
        assert_eq!(missing.code, "ResourceNotFound");
    }

    #[test]
    fn deleting_a_pipeline_takes_its_executions() {
        let mut h = Harness::new();
        h.create("p", &[("Train", "Training")]).expect("created");
        let arn = h.start("p");
        h.call("DeletePipeline", json!({"PipelineName": "p"}))
            .expect("deleted");
        assert!(h.sm.execution(&arn).is_none());
    }

    #[test]
    fn state_survives_a_json_round_trip() {
        let mut h = Harness::new();
        h.create("p", &[("Train", "Training")]).expect("created");
        let arn = h.start("p");
        let text = serde_json::to_string(&h.sm).expect("serializes");
        let back: SageMaker = serde_json::from_str(&text).expect("reads back");
        assert_eq!(back.execution(&arn), h.sm.execution(&arn));
        assert_eq!(
            back.pipeline("us-east-1", "p").map(|p| p.version_id),
            Some(1)
        );
    }
}
