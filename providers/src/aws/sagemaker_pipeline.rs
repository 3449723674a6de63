//! The `sagemaker_pipeline` kind: a SageMaker model-building pipeline, submitted as an
//! ACK `Pipeline` (`sagemaker.services.k8s.aws/v1alpha1`) on an EKS cluster where the
//! ACK SageMaker controller turns it into the SageMaker pipeline, then cross-checked
//! with the SageMaker API (`sagemaker:DescribePipeline`).
//!
//! The definition comes from a JSON file (`definition_file`, relative to the working
//! directory) or inline (`definition`). `prepare` reads and validates it at plan time, so
//! a bad definition fails with its line and column before anything is sent, and records
//! the SHA-256 of its canonical text (the text without layout) as `definition_hash`: an
//! edited file is an in-place update, and the plan shows the definition's unified diff.
//! Reading recomputes the hash from the live object, so an edit made behind terrain's
//! back shows as drift.
//!
//! The ACK controller reports through conditions (read in [`super::ack`]). A synced
//! status can be the previous generation's (ACK keeps no observed generation), so an
//! apply is done only once SageMaker itself shows the applied definition.
//!
//! Id: `sagemaker.services.k8s.aws/v1alpha1/Pipeline/<namespace>/<name>`.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::ack::{self, ack_state, arn_of, AckKind, AckState};
use super::signed::SAGEMAKER;
use super::{catalog, definition};
use super::{tags_with_ours, user_tags, MANAGED_BY};
use crate::kubernetes::apply::{self, Progress};
use crate::kubernetes::{connect, id_of, mark_ours, yaml_diff, ObjectRef};
use crate::schema::Fields;
use crate::{Ctx, Health, Invalid, Kind, Live, ProviderError};

const SYNC_TIMEOUT: Duration = Duration::from_secs(15 * 60);
/// How long after an update a Terminal condition may still be the previous spec's.
const TERMINAL_GRACE: Duration = Duration::from_secs(5);
/// How often to look again when SageMaker does not show the applied definition yet.
const STALE_RETRY: Duration = Duration::from_millis(500);

/// The kind `sagemaker_pipeline`.
#[derive(Debug, Clone, Copy, Default)]
pub struct SageMakerPipeline;

/// What a stack writes for a `sagemaker_pipeline`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    #[terrain(doc = crate::kubernetes::CLUSTER_DOC, force_new)]
    pub cluster: Value,
    /// The namespace of the Pipeline object.
    #[serde(default = "ack::default_namespace")]
    #[terrain(force_new)]
    pub namespace: String,
    /// The Pipeline object's name.
    #[terrain(force_new)]
    pub name: String,
    /// The SageMaker pipeline's name: letters, digits and '-'.
    #[terrain(force_new)]
    pub pipeline_name: String,
    /// The name SageMaker Studio shows.
    pub display_name: Option<String>,
    /// A description of the pipeline.
    pub description: Option<String>,
    /// The IAM role the pipeline's steps run as.
    pub role_arn: String,
    /// A JSON file holding the pipeline definition, relative to the working directory.
    pub definition_file: Option<String>,
    /// The pipeline definition as JSON text (instead of definition_file).
    pub definition: Option<String>,
    /// How many steps may run at once (parallelismConfiguration).
    pub max_parallel_steps: Option<i64>,
    /// Tags on the SageMaker pipeline.
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
    /// Placeholders in the definition and the stack values that replace them before it
    /// is validated and submitted, so the definition names the stack's role and bucket:
    /// `{ "<<YOUR_SAGEMAKER_ROLE_ARN>>" = "${iam_role.sagemaker.arn}" }`. Each key must
    /// appear in the definition, and no `<<…>>` placeholder may be left without one.
    #[serde(default)]
    pub substitutions: BTreeMap<String, String>,
    /// Computed when planning: SHA-256 of the definition without its layout; not to be set
    /// in stacks.
    pub definition_hash: Option<String>,
}

impl Spec {
    fn target(&self) -> ObjectRef {
        ack::target::<SageMakerPipeline>(&self.namespace, &self.name)
    }
}

/// What `sagemaker_pipeline` reports after apply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Outputs {
    /// The pipeline's ARN.
    pub arn: String,
    /// The SageMaker pipeline's name.
    pub pipeline_name: String,
    /// The pipeline's status (Active).
    pub status: String,
}

/// Checks SageMaker tags: keys of 1 to 128 characters not starting with `aws:`, values of
/// at most 256.
fn check_tags(tags: &BTreeMap<String, String>) -> Result<(), String> {
    for (key, value) in tags {
        if key.is_empty() || key.chars().count() > 128 {
            return Err(format!("key {key:?}: must be 1 to 128 characters"));
        }
        if key.starts_with("aws:") {
            return Err(format!("key {key:?}: the aws: prefix is reserved"));
        }
        if value.chars().count() > 256 {
            return Err(format!("value of {key:?}: at most 256 characters"));
        }
    }
    Ok(())
}

/// The definition's text and the name problems are reported under.
fn definition_source(spec: &Spec) -> Result<(String, String), ProviderError> {
    match (&spec.definition_file, &spec.definition) {
        (Some(path), None) => {
            let bytes = std::fs::read(path)
                .map_err(|e| ProviderError::io("read pipeline definition file", path.clone(), e))?;
            String::from_utf8(bytes)
                .map(|text| (text, path.clone()))
                .map_err(|e| {
                    // Located like a syntax error: the line and column of the first bad byte.
                    let bytes = e.as_bytes();
                    let good = e.utf8_error().valid_up_to();
                    let before = String::from_utf8_lossy(&bytes[..good]);
                    let line = before.matches('\n').count() + 1;
                    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
                    ProviderError::Unsupported(format!(
                        "{path}:{line}:{col}: invalid UTF-8 (byte 0x{:02x}); a definition is JSON text in UTF-8",
                        bytes.get(good).copied().unwrap_or_default()
                    ))
                })
        }
        (None, Some(text)) => Ok((text.clone(), "definition".to_string())),
        _ => Err(ProviderError::Unsupported(format!(
            "{}: set either `definition_file` or `definition`",
            SageMakerPipeline::KIND
        ))),
    }
}

/// The problems of an invalid definition as one error.
fn invalid_definition(problems: &[definition::Problem], source: &str) -> ProviderError {
    let lines: Vec<String> = problems.iter().map(|p| p.describe(source)).collect();
    ProviderError::Unsupported(match lines.as_slice() {
        [one] => format!("invalid pipeline definition: {one}"),
        _ => format!(
            "invalid pipeline definition ({} problems):\n  {}",
            lines.len(),
            lines.join("\n  ")
        ),
    })
}

/// The spec's definition, read, validated and compacted (see [`definition::compact`]).
///
/// Fails when the file cannot be read or the definition is invalid, naming the file
/// and the line and column or JSON pointer of each problem.
pub fn canonical_definition(spec: &Spec) -> Result<String, ProviderError> {
    let (text, source) = definition_source(spec)?;
    let text = substitute(&text, &source, &spec.substitutions)?;
    definition::validate(&text).map_err(|problems| invalid_definition(&problems, &source))?;
    Ok(definition::compact(&text))
}

/// `text` with each placeholder of `substitutions` replaced by its value (escaped for
/// the JSON string it sits in); a value not known until apply leaves its placeholder
/// for now. Fails for a placeholder that does not appear, and for a `<<…>>` left with
/// no value, naming its line and column.
fn substitute(
    text: &str,
    source: &str,
    substitutions: &BTreeMap<String, String>,
) -> Result<String, ProviderError> {
    let mut out = text.to_string();
    for (placeholder, value) in substitutions {
        if !text.contains(placeholder.as_str()) {
            return Err(ProviderError::invalid(
                &format!("substitutions.{placeholder}"),
                format!("`{placeholder}` does not appear in {source}"),
            ));
        }
        if value.contains(crate::protocol::UNKNOWN) {
            continue;
        }
        let escaped = serde_json::to_string(value).unwrap_or_default();
        let escaped = escaped
            .strip_prefix('"')
            .and_then(|e| e.strip_suffix('"'))
            .unwrap_or(value);
        out = out.replace(placeholder.as_str(), escaped);
    }
    let mut from = 0;
    while let Some(i) = out[from..].find("<<") {
        let start = from + i;
        let Some(len) = out[start..].find(">>") else {
            break;
        };
        let placeholder = &out[start..start + len + 2];
        let well_formed = placeholder[2..placeholder.len() - 2]
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_');
        if well_formed && !substitutions.contains_key(placeholder) {
            let before = &out[..start];
            let line = before.matches('\n').count() + 1;
            let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            return Err(ProviderError::Unsupported(format!(
                "{source}:{line}:{col}: placeholder `{placeholder}` has no value; fill it from the stack with `substitutions = {{ \"{placeholder}\" = \"${{…}}\" }}`"
            )));
        }
        from = start + len + 2;
    }
    Ok(out)
}

/// The SHA-256 (hex) of a canonical definition.
pub fn definition_hash(canonical: &str) -> String {
    hex::encode(Sha256::digest(canonical.as_bytes()))
}

/// `tags` as ACK writes them.
fn tag_list(tags: &BTreeMap<String, String>) -> Value {
    ack::pair_list(tags, "key", "value")
}

/// The `Pipeline` object for `spec` with `definition` (canonical text) and `tags`.
fn object_with(spec: &Spec, definition: &str, tags: &BTreeMap<String, String>) -> Value {
    let mut body = json!({
        "pipelineName": spec.pipeline_name,
        "roleARN": spec.role_arn,
        "pipelineDefinition": definition,
    });
    if let Some(display) = &spec.display_name {
        body["pipelineDisplayName"] = json!(display);
    }
    if let Some(description) = &spec.description {
        body["pipelineDescription"] = json!(description);
    }
    if let Some(steps) = spec.max_parallel_steps {
        body["parallelismConfiguration"] = json!({"maxParallelExecutionSteps": steps});
    }
    if !tags.is_empty() {
        body["tags"] = tag_list(tags);
    }
    ack::object::<SageMakerPipeline>(&spec.namespace, &spec.name, body)
}

/// The `Pipeline` as rendered: the user's tags and terrain's `managed-by` tag (the
/// address tag and annotation are added at apply time, as for Kubernetes kinds).
pub fn objects(spec: &Spec) -> Result<Vec<Value>, ProviderError> {
    let mut tags = spec.tags.clone();
    tags.insert(MANAGED_BY.0.to_string(), MANAGED_BY.1.to_string());
    Ok(vec![object_with(spec, &canonical_definition(spec)?, &tags)])
}

/// The `Pipeline` as applied for `address`, with its canonical definition.
fn applied_object(spec: &Spec, address: &str) -> Result<(Value, String), ProviderError> {
    let canonical = canonical_definition(spec)?;
    let mut object = object_with(spec, &canonical, &tags_with_ours(&spec.tags, address));
    mark_ours(&mut object, address);
    Ok((object, canonical))
}

fn live_tags(object: &Value) -> BTreeMap<String, String> {
    user_tags(&ack::pairs_of(&object["spec"]["tags"], "key", "value"))
}

/// The spec a live `Pipeline` shows. Where the definition comes from is the stack's
/// (`prior`); its hash is the live definition's.
fn spec_of(object: &Value, prior: &Spec) -> Spec {
    let s = &object["spec"];
    let string = |v: &Value| v.as_str().map(str::to_string);
    let pipeline_name = s["pipelineName"].as_str().unwrap_or_default().to_string();
    // A display name equal to the pipeline's name is what SageMaker fills in when none
    // is given; a stack that gave none reads back none.
    let display_name = string(&s["pipelineDisplayName"])
        .filter(|d| prior.display_name.is_some() || *d != pipeline_name);
    let (namespace, name) = ack::placement_of(object);
    Spec {
        cluster: prior.cluster.clone(),
        namespace,
        name,
        pipeline_name,
        display_name,
        description: string(&s["pipelineDescription"]),
        role_arn: s["roleARN"].as_str().unwrap_or_default().to_string(),
        definition_file: prior.definition_file.clone(),
        definition: prior.definition.clone(),
        max_parallel_steps: s["parallelismConfiguration"]["maxParallelExecutionSteps"].as_i64(),
        tags: live_tags(object),
        substitutions: prior.substitutions.clone(),
        definition_hash: s["pipelineDefinition"]
            .as_str()
            .map(|d| definition_hash(&definition::compact(d))),
    }
}

fn outputs_of(object: &Value) -> Outputs {
    Outputs {
        arn: arn_of(object).unwrap_or_default().to_string(),
        pipeline_name: object["spec"]["pipelineName"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        status: object["status"]["pipelineStatus"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    }
}

/// What SageMaker says about a pipeline the controller reports synced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PipelineCheck {
    /// The ARN matches and SageMaker holds the expected definition.
    Matches,
    /// The ARN matches but SageMaker still holds another definition: the controller has
    /// not pushed the applied one yet.
    OtherDefinition,
}

/// Cross-checks a synced `Pipeline` with SageMaker: `sagemaker:DescribePipeline` of
/// `pipeline_name` must answer with the ARN the object reports (`status_arn`) and, when
/// `definition` is given, hold that definition (compared as JSON).
///
/// Fails when SageMaker cannot be asked, does not know the pipeline, or reports another
/// ARN (the controller then works in another account or region than `[providers.aws]`).
pub async fn cross_check_pipeline(
    ctx: &Ctx,
    pipeline_name: &str,
    status_arn: &str,
    definition: Option<&Value>,
) -> Result<PipelineCheck, ProviderError> {
    const CALL: &str = "sagemaker:DescribePipeline";
    let (client, region) = ack::sagemaker(ctx).await?;
    let described = client
        .json11(
            &SAGEMAKER,
            &region,
            "DescribePipeline",
            &json!({"PipelineName": pipeline_name}),
        )
        .await
        .map_err(|e| {
            let reported = format!("pipeline {pipeline_name} as {status_arn}");
            ack::unknown_to_sagemaker(CALL, &reported, &region, e)
        })?;
    let arn = described["PipelineArn"].as_str().unwrap_or_default();
    if arn != status_arn {
        return Err(ProviderError::Failed {
            call: CALL.into(),
            message: format!(
                "SageMaker reports pipeline {pipeline_name} as {arn:?}, but its ACK Pipeline reports {status_arn:?}: the controller works in another account or region than [providers.aws] (region {region})"
            ),
        });
    }
    if let Some(wanted) = definition {
        // SageMaker holds the definition as a JSON string.
        let shown: Option<Value> = described["PipelineDefinition"]
            .as_str()
            .and_then(|d| serde_json::from_str(d).ok());
        if shown.as_ref() != Some(wanted) {
            return Ok(PipelineCheck::OtherDefinition);
        }
    }
    Ok(PipelineCheck::Matches)
}

/// Polls `target` until the controller reports it synced and returns it; fails on
/// `ACK.Terminal`, reports `ACK.Recoverable` and other waiting as progress.
///
/// A Terminal condition seen within `grace` of the call may be the previous
/// generation's (ACK records no observed generation, and the controller needs a moment
/// to see an updated spec), so it counts only once it outlasts `grace`.
pub async fn wait_synced(
    client: &crate::kubernetes::connect::Conn,
    target: &ObjectRef,
    ctx: &Ctx,
    timeout: Duration,
    grace: Duration,
) -> Result<Value, ProviderError> {
    let progress = Progress::new(ctx);
    let what = format!("the ACK controller to sync {}", target.describe());
    let started = tokio::time::Instant::now();
    ack::wait_for(
        client,
        target,
        ctx,
        timeout,
        &what,
        |object| match ack_state(object) {
            AckState::Synced => Ok(true),
            AckState::Terminal(message) if started.elapsed() < grace => {
                progress.report(&format!(
                    "ACK.Terminal ({message}); waiting for the controller to see the new spec"
                ));
                Ok(false)
            }
            AckState::Terminal(message) => Err(ack::gave_up(target, &message)),
            AckState::Recoverable(message) => {
                progress.report(&ack::retrying(&message));
                Ok(false)
            }
            AckState::Pending(message) => {
                progress.report(&message);
                Ok(false)
            }
        },
    )
    .await
}

/// Applies the `Pipeline`, waits until SageMaker shows it, and returns it as live.
async fn apply_and_sync(
    ctx: &Ctx,
    spec: &Spec,
    create: bool,
) -> Result<Live<SageMakerPipeline>, ProviderError> {
    let (object, canonical) = applied_object(spec, &ctx.address)?;
    let wanted: Value =
        serde_json::from_str(&canonical).map_err(|source| ProviderError::Decode {
            what: "pipeline definition",
            source,
        })?;
    // Every field terrain sets is the stack's: one changed by hand is taken back.
    let (client, _) = ack::submit::<SageMakerPipeline>(ctx, &spec.cluster, &object, create).await?;
    let target = spec.target();
    let started = tokio::time::Instant::now();
    loop {
        let remaining = SYNC_TIMEOUT.saturating_sub(started.elapsed());
        let grace = if create {
            Duration::ZERO
        } else {
            TERMINAL_GRACE
        };
        let live = wait_synced(&client, &target, ctx, remaining, grace).await?;
        let Some(arn) = arn_of(&live) else {
            return Err(ProviderError::Failed {
                call: format!("kubernetes wait {}", target.describe()),
                message: "the ACK controller reports the pipeline synced but recorded no ARN in status.ackResourceMetadata".into(),
            });
        };
        match cross_check_pipeline(ctx, &spec.pipeline_name, arn, Some(&wanted)).await? {
            PipelineCheck::Matches => {
                return Ok(Live {
                    id: id_of(&[target]),
                    spec: Spec {
                        definition_hash: Some(definition_hash(&canonical)),
                        ..spec_of(&live, spec)
                    },
                    outputs: outputs_of(&live),
                })
            }
            PipelineCheck::OtherDefinition if started.elapsed() < SYNC_TIMEOUT => {
                ctx.progress(&format!(
                    "SageMaker still shows the previous definition of {}; waiting for the controller",
                    spec.pipeline_name
                ));
                tokio::time::sleep(STALE_RETRY).await;
            }
            PipelineCheck::OtherDefinition => {
                return Err(ProviderError::Timeout {
                    call: "sagemaker:DescribePipeline".into(),
                    waiting_for: format!(
                        "SageMaker to show the applied definition of {}",
                        spec.pipeline_name
                    ),
                    after: SYNC_TIMEOUT,
                })
            }
        }
    }
}

/// The live object of `id`, unless it is gone or another resource's.
async fn live_object(ctx: &Ctx, cluster: &Value, id: &str) -> Result<Option<Value>, ProviderError> {
    Ok(ack::live_object::<SageMakerPipeline>(ctx, cluster, id)
        .await?
        .map(|(_, object)| object))
}

/// The plan detail for a definition change: the unified diff of the live and planned
/// definitions, pretty-printed, then the diff of the rest of the object.
fn preview_text(
    live: Option<&Value>,
    planned: &Value,
    live_dry_run: Option<&Value>,
) -> Option<String> {
    let definition_of = |o: Option<&Value>| {
        o.and_then(|o| o["spec"]["pipelineDefinition"].as_str())
            .map(definition::pretty)
            .unwrap_or_default()
    };
    let mut out = String::new();
    if let Some(diff) = yaml_diff::unified_text(
        &definition_of(live),
        &definition_of(Some(planned)),
        "live pipelineDefinition",
        "planned pipelineDefinition",
    ) {
        out.push_str(&diff);
    }
    // The definition is one long string in the object; its own diff is above.
    let summarized = |o: &Value| {
        let mut o = o.clone();
        if let Some(d) = o["spec"]["pipelineDefinition"].as_str() {
            o["spec"]["pipelineDefinition"] = json!(format!(
                "sha256:{}",
                definition_hash(&definition::compact(d))
            ));
        }
        o
    };
    let after = live_dry_run.unwrap_or(planned);
    if let Some(diff) = apply::live_diff(
        &live.map(summarized).unwrap_or(Value::Null),
        &summarized(after),
    ) {
        out.push_str(&diff);
    }
    (!out.is_empty()).then_some(out)
}

fn health_of(object: &Value) -> Health {
    match ack_state(object) {
        AckState::Synced => Health {
            ready: true,
            summary: format!(
                "{} (synced)",
                object["status"]["pipelineStatus"]
                    .as_str()
                    .unwrap_or("Active")
            ),
        },
        AckState::Terminal(m) => Health {
            ready: false,
            summary: format!("Terminal: {m}"),
        },
        AckState::Recoverable(m) => Health {
            ready: false,
            summary: format!("Recoverable: {m}"),
        },
        AckState::Pending(_) => Health {
            ready: false,
            summary: "Syncing".into(),
        },
    }
}

#[async_trait]
impl Kind for SageMakerPipeline {
    type Spec = Spec;
    type Outputs = Outputs;
    const KIND: &'static str = "sagemaker_pipeline";
    const PROVIDER: &'static str = "aws";
    const RENDERS: bool = true;

    fn api_groups(_spec: &Value) -> crate::ApiGroups {
        ack::needs(<Self as ack::AckKind>::ACK_KIND)
    }

    fn validate(spec: &Spec, _config: &Value) -> Vec<Invalid> {
        let mut out = Vec::new();
        ack::check_placement(&spec.cluster, &spec.namespace, &spec.name, &mut out);
        ack::check_names(
            &spec.pipeline_name,
            spec.display_name.as_deref(),
            256,
            spec.description.as_deref(),
            &mut out,
        );
        if let Err(m) = catalog::check_role_arn(&spec.role_arn) {
            out.push(Invalid::at("role_arn", m));
        }
        match (&spec.definition_file, &spec.definition) {
            (Some(_), Some(_)) => out.push(Invalid::at(
                "",
                "set either `definition_file` or `definition`, not both",
            )),
            (None, None) => out.push(Invalid::at(
                "",
                "set `definition_file` (a JSON file) or `definition` (the JSON text)",
            )),
            (Some(file), None) if file.trim().is_empty() => {
                out.push(Invalid::at("definition_file", "must name a file"))
            }
            (None, Some(text)) => {
                if let Err(problems) = definition::validate(text) {
                    // The field is named by the path already; say where inside it.
                    for p in problems {
                        let message = match (p.position, p.pointer.is_empty()) {
                            (Some((line, column)), _) => {
                                format!("line {line}, column {column}: {}", p.message)
                            }
                            (None, true) => p.message,
                            (None, false) => format!("{}: {}", p.pointer, p.message),
                        };
                        out.push(Invalid::at("definition", message));
                    }
                }
            }
            _ => {}
        }
        ack::check_max_parallel_steps(spec.max_parallel_steps, &mut out);
        if let Err(m) = check_tags(&spec.tags) {
            out.push(Invalid::at("tags", m));
        }
        if spec.definition_hash.is_some() {
            out.push(Invalid::at(
                "definition_hash",
                "is computed from the definition when planning; do not set it",
            ));
        }
        out
    }

    fn planned_id(spec: &Spec, _config: &Value) -> Option<String> {
        Some(id_of(&[spec.target()]))
    }

    /// Reads, checks and hashes the definition, at validate and plan as at apply: a
    /// broken definition is refused before the cluster it runs on exists. A definition
    /// (or its file's name) not known yet leaves the hash unknown.
    fn prepare(mut spec: Spec) -> Result<Spec, ProviderError> {
        let field = if spec.definition_file.is_some() {
            "definition_file"
        } else {
            "definition"
        };
        let input = spec.definition_file.as_ref().or(spec.definition.as_ref());
        if input.is_some_and(|v| v.contains(crate::protocol::UNKNOWN)) {
            spec.definition_hash = Some(crate::protocol::UNKNOWN.to_string());
            return Ok(spec);
        }
        let canonical = canonical_definition(&spec).map_err(|e| match e {
            ProviderError::Unsupported(message) | ProviderError::Failed { message, .. } => {
                ProviderError::invalid(field, message)
            }
            invalid @ ProviderError::Invalid { .. } => invalid,
            other => ProviderError::invalid(
                field,
                format!("{other} (relative paths start at the stack's directory)"),
            ),
        })?;
        // A placeholder whose value is not known yet: validated now, hashed at apply.
        let pending = spec
            .substitutions
            .values()
            .any(|v| v.contains(crate::protocol::UNKNOWN));
        spec.definition_hash = Some(if pending {
            crate::protocol::UNKNOWN.to_string()
        } else {
            definition_hash(&canonical)
        });
        Ok(spec)
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
        apply_and_sync(ctx, spec, true).await
    }

    async fn update(
        &self,
        ctx: &Ctx,
        _id: &str,
        _prior: &Spec,
        spec: &Spec,
    ) -> Result<Live<Self>, ProviderError> {
        apply_and_sync(ctx, spec, false).await
    }

    async fn delete(&self, ctx: &Ctx, id: &str, prior: Option<&Spec>) -> Result<(), ProviderError> {
        // The controller deletes the SageMaker pipeline, then lifts its finalizer.
        ack::delete::<Self>(ctx, id, prior).await
    }

    async fn preview(
        &self,
        ctx: &Ctx,
        id: &str,
        _prior: &Spec,
        spec: &Spec,
    ) -> Result<Option<String>, ProviderError> {
        let live = live_object(ctx, &spec.cluster, id).await?;
        let (planned, _) = applied_object(spec, &ctx.address)?;
        // What the server would store, when it can say (same object, CRD installed).
        let dry_run = match &live {
            Some(_) => {
                let client = connect::client(ctx, &spec.cluster).await?;
                apply::dry_run(&client, &planned, true).await.ok()
            }
            None => None,
        };
        Ok(preview_text(live.as_ref(), &planned, dry_run.as_ref()))
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

impl AckKind for SageMakerPipeline {
    const ACK_KIND: &'static str = "Pipeline";

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
    use crate::kubernetes::{ownership, Ownership};
    use crate::testing::schema_mismatches;

    const ROLE: &str = "arn:aws:iam::123456789012:role/SageMakerExecution";

    fn definition_text() -> String {
        serde_json::to_string_pretty(&json!({
            "Version": "2020-12-01",
            "Parameters": [{"Name": "InputData", "Type": "String", "DefaultValue": "s3://ml-data/train.csv"}],
            "Steps": [{
                "Name": "Train",
                "Type": "Training",
                "Arguments": {
                    "AlgorithmSpecification": {"TrainingImage": "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-xgboost:1.7-1", "TrainingInputMode": "File"},
                    "OutputDataConfig": {"S3OutputPath": "s3://ml-artifacts/model"},
                    "ResourceConfig": {"InstanceCount": 1, "InstanceType": "ml.m5.xlarge", "VolumeSizeInGB": 30},
                    "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
                    "RoleArn": ROLE,
                    "InputDataConfig": [{"ChannelName": "train", "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": {"Get": "Parameters.InputData"}}}}],
                },
            }],
        }))
        .expect("encodes")
    }

    fn base() -> Spec {
        Spec {
            cluster: gke_reference(),
            namespace: "ml".into(),
            name: "train".into(),
            pipeline_name: "abalone-train".into(),
            display_name: None,
            description: None,
            role_arn: ROLE.into(),
            definition_file: None,
            definition: Some(definition_text()),
            max_parallel_steps: None,
            tags: BTreeMap::new(),
            substitutions: BTreeMap::new(),
            definition_hash: None,
        }
    }

    fn full() -> Spec {
        Spec {
            display_name: Some("Abalone-training".into()),
            description: Some("trains the abalone model".into()),
            definition_file: Some("pipeline.json".into()),
            max_parallel_steps: Some(4),
            tags: BTreeMap::from([("team".to_string(), "ml".to_string())]),
            definition_hash: Some("ab".into()),
            ..base()
        }
    }

    #[test]
    fn schema_matches_spec_and_outputs() {
        let outputs = Outputs {
            arn: "arn:aws:sagemaker:us-east-1:123456789012:pipeline/abalone-train".into(),
            pipeline_name: "abalone-train".into(),
            status: "Active".into(),
        };
        assert_eq!(
            schema_mismatches::<SageMakerPipeline>(&full(), &outputs),
            Vec::<String>::new()
        );
        let schema = SageMakerPipeline::schema();
        for name in ["name", "namespace", "pipeline_name", "cluster"] {
            assert!(schema.field(name).is_some_and(|f| f.force_new), "{name}");
        }
        for name in ["definition_hash", "role_arn", "description", "tags"] {
            assert!(schema.field(name).is_some_and(|f| !f.force_new), "{name}");
        }
    }

    #[test]
    fn renders_a_pipeline_the_crd_accepts() {
        let spec = Spec {
            definition_file: None,
            definition_hash: None,
            definition: Some(definition_text()),
            ..full()
        };
        let objects = objects(&spec).expect("renders");
        assert_eq!(objects.len(), 1);
        let pipeline = &objects[0];
        assert_eq!(
            pipeline,
            &json!({
                "apiVersion": "sagemaker.services.k8s.aws/v1alpha1",
                "kind": "Pipeline",
                "metadata": {"name": "train", "namespace": "ml", "labels": {"app.kubernetes.io/managed-by": "terrain"}},
                "spec": {
                    "pipelineName": "abalone-train",
                    "roleARN": ROLE,
                    "pipelineDefinition": definition::compact(&definition_text()),
                    "pipelineDisplayName": "Abalone-training",
                    "pipelineDescription": "trains the abalone model",
                    "parallelismConfiguration": {"maxParallelExecutionSteps": 4},
                    "tags": [{"key": "managed-by", "value": "terrain"}, {"key": "team", "value": "ml"}],
                },
            })
        );
        let definition = pipeline["spec"]["pipelineDefinition"]
            .as_str()
            .expect("a string");
        assert!(
            !definition.contains('\n') && !definition.contains(": "),
            "{definition}"
        );
        let crd = crd_check::schema("sagemaker.services.k8s.aws_pipelines.yaml");
        let (applied, _) = applied_object(&spec, "sagemaker_pipeline.train").expect("applies");
        for object in [pipeline, &applied, &objects_of_base()] {
            assert_eq!(
                crd_check::problems(&crd, object),
                Vec::<String>::new(),
                "{object}"
            );
        }
        // The checker does see what the CRD forbids.
        let mut bad = pipeline.clone();
        bad["spec"]["roleArn"] = json!(ROLE);
        bad["spec"]["parallelismConfiguration"]["maxParallelExecutionSteps"] = json!("4");
        if let Some(s) = bad["spec"].as_object_mut() {
            s.remove("pipelineName");
        }
        let problems = crd_check::problems(&crd, &bad);
        assert_eq!(problems.len(), 3, "{problems:?}");
    }

    fn objects_of_base() -> Value {
        objects(&base()).expect("renders").remove(0)
    }

    #[test]
    fn applied_objects_carry_terrains_marks() {
        let (applied, canonical) =
            applied_object(&base(), "sagemaker_pipeline.train").expect("applies");
        assert_eq!(
            ownership(&applied, "sagemaker_pipeline.train"),
            Ownership::Ours
        );
        assert_eq!(
            applied["spec"]["tags"],
            json!([{"key": "managed-by", "value": "terrain"}, {"key": "terrain-address", "value": "sagemaker_pipeline.train"}])
        );
        assert_eq!(canonical, definition::compact(&definition_text()));
    }

    #[test]
    fn live_pipeline_reads_back_as_the_prepared_spec() {
        for spec in [
            base(),
            Spec {
                definition_hash: None,
                definition_file: None,
                ..full()
            },
        ] {
            let prepared = SageMakerPipeline::prepare(spec).expect("prepares");
            let (mut live, _) =
                applied_object(&prepared, "sagemaker_pipeline.train").expect("applies");
            live["metadata"]["finalizers"] =
                json!(["finalizers.sagemaker.services.k8s.aws/Pipeline"]);
            live["status"] = json!({
                "ackResourceMetadata": {"arn": "arn:aws:sagemaker:us-east-1:123456789012:pipeline/abalone-train", "ownerAccountID": "123456789012", "region": "us-east-1"},
                "conditions": [{"type": "ACK.ResourceSynced", "status": "True"}],
                "pipelineStatus": "Active",
            });
            assert_eq!(spec_of(&live, &prepared), prepared);
            assert_eq!(
                outputs_of(&live),
                Outputs {
                    arn: "arn:aws:sagemaker:us-east-1:123456789012:pipeline/abalone-train".into(),
                    pipeline_name: "abalone-train".into(),
                    status: "Active".into()
                }
            );
            // An edit behind terrain's back is drift in the hash.
            live["spec"]["pipelineDefinition"] = json!(definition_text().replace("3600", "7200"));
            assert_ne!(
                spec_of(&live, &prepared).definition_hash,
                prepared.definition_hash
            );
            // The display name SageMaker fills in is not the stack's.
            live["spec"]["pipelineDisplayName"] = json!("abalone-train");
            let read = spec_of(
                &live,
                &Spec {
                    display_name: None,
                    ..prepared.clone()
                },
            );
            assert_eq!(read.display_name, None);
        }
    }

    #[test]
    fn prepare_reads_validates_and_hashes_the_file() -> Result<(), ProviderError> {
        let dir = tempfile::tempdir().map_err(|e| ProviderError::io("tempdir", "", e))?;
        let path = dir.path().join("pipeline.json");
        std::fs::write(&path, definition_text())
            .map_err(|e| ProviderError::io("write", "pipeline.json", e))?;
        let file = path.display().to_string();
        let spec = Spec {
            definition: None,
            definition_file: Some(file.clone()),
            ..base()
        };
        let first = SageMakerPipeline::prepare(spec.clone())?;
        let inline = SageMakerPipeline::prepare(base())?;
        assert_eq!(
            first.definition_hash, inline.definition_hash,
            "a file and the same text inline hash alike"
        );
        assert_eq!(
            first.definition_hash,
            Some(definition_hash(&definition::compact(&definition_text())))
        );
        // Layout is not a change; content is.
        std::fs::write(&path, definition::compact(&definition_text()))
            .map_err(|e| ProviderError::io("write", "pipeline.json", e))?;
        assert_eq!(SageMakerPipeline::prepare(spec.clone())?, first);
        std::fs::write(&path, definition_text().replace("3600", "7200"))
            .map_err(|e| ProviderError::io("write", "pipeline.json", e))?;
        assert_ne!(SageMakerPipeline::prepare(spec.clone())?, first);

        // A syntax error fails at prepare with the file, line and column.
        let broken = definition_text().replacen("\"File\"", "\"File", 1);
        std::fs::write(&path, &broken)
            .map_err(|e| ProviderError::io("write", "pipeline.json", e))?;
        let e = SageMakerPipeline::prepare(spec.clone()).expect_err("broken JSON");
        let line = broken
            .lines()
            .position(|l| l.contains("\"TrainingInputMode\": \"File"))
            .map(|i| i + 1)
            .expect("the broken line");
        let text = e.to_string();
        assert!(
            text.starts_with(&format!(
                "definition_file: invalid pipeline definition: {file}:{line}:"
            )),
            "{text}"
        );
        assert!(text.contains("unterminated string"), "{text}");

        // A definition that parses but breaks the rules names the place.
        std::fs::write(
            &path,
            definition_text().replace("\"Training\"", "\"Train\""),
        )
        .map_err(|e| ProviderError::io("write", "pipeline.json", e))?;
        let e = SageMakerPipeline::prepare(spec.clone()).expect_err("unknown type");
        assert!(
            e.to_string().contains(&format!(
                "{file}: /Steps/0/Type: unknown step type \"Train\""
            )),
            "{e}"
        );

        let missing = Spec {
            definition_file: Some(dir.path().join("nope.json").display().to_string()),
            ..spec
        };
        let e = SageMakerPipeline::prepare(missing).expect_err("no file");
        assert!(
            e.to_string()
                .starts_with("definition_file: read pipeline definition file ")
                && e.to_string().contains("nope.json")
                && e.to_string()
                    .contains("relative paths start at the stack's directory"),
            "{e}"
        );
        Ok(())
    }

    #[test]
    fn validation_table() {
        let cases: Vec<(Spec, &str, &str)> = vec![
            (base(), "", ""),
            (
                Spec {
                    definition_hash: None,
                    definition: None,
                    ..full()
                },
                "",
                "",
            ),
            (
                Spec {
                    name: "Train".into(),
                    ..base()
                },
                "name",
                "DNS-1123",
            ),
            (
                Spec {
                    namespace: "ML".into(),
                    ..base()
                },
                "namespace",
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
                    pipeline_name: "-a".into(),
                    ..base()
                },
                "pipeline_name",
                "not a SageMaker name",
            ),
            (
                Spec {
                    display_name: Some("a b".into()),
                    ..base()
                },
                "display_name",
                "not a SageMaker name",
            ),
            (
                Spec {
                    role_arn: "SageMakerExecution".into(),
                    ..base()
                },
                "role_arn",
                "is not an ARN; expected an IAM role ARN",
            ),
            (
                Spec {
                    role_arn: "arn:aws:iam::1234:role/x".into(),
                    ..base()
                },
                "role_arn",
                "the account must be 12 digits",
            ),
            (
                Spec {
                    definition_file: Some("p.json".into()),
                    ..base()
                },
                "",
                "not both",
            ),
            (
                Spec {
                    definition: None,
                    ..base()
                },
                "",
                "set `definition_file`",
            ),
            (
                Spec {
                    definition: None,
                    definition_file: Some(" ".into()),
                    ..base()
                },
                "definition_file",
                "must name a file",
            ),
            (
                Spec {
                    definition: Some("{\"Version\": \"2020-12-01\"}".into()),
                    ..base()
                },
                "definition",
                "missing Steps",
            ),
            (
                Spec {
                    definition: Some("{\"Version\": \"2020".into()),
                    ..base()
                },
                "definition",
                "line 1, column 13: unterminated string",
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
                    tags: BTreeMap::from([("aws:x".to_string(), "v".to_string())]),
                    ..base()
                },
                "tags",
                "reserved",
            ),
            (
                Spec {
                    definition_hash: Some("ab".into()),
                    ..base()
                },
                "definition_hash",
                "do not set it",
            ),
            (
                Spec {
                    cluster: json!(3),
                    ..base()
                },
                "cluster",
                "expected a cluster reference",
            ),
        ];
        assert_validation::<SageMakerPipeline>(cases);
    }

    #[test]
    fn health_follows_the_conditions() {
        let with = |status: Value| json!({"status": status});
        let cases = [
            (
                with(
                    json!({"conditions": [{"type": "ACK.ResourceSynced", "status": "True"}], "pipelineStatus": "Active"}),
                ),
                true,
                "Active (synced)",
            ),
            (
                with(json!({"conditions": [{"type": "ACK.ResourceSynced", "status": "True"}]})),
                true,
                "Active (synced)",
            ),
            (
                with(
                    json!({"conditions": [{"type": "ACK.Terminal", "status": "True", "message": "m"}]}),
                ),
                false,
                "Terminal: m",
            ),
            (
                with(
                    json!({"conditions": [{"type": "ACK.Recoverable", "status": "True", "message": "slow down"}]}),
                ),
                false,
                "Recoverable: slow down",
            ),
            (with(json!({})), false, "Syncing"),
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
    fn role_arn_rules() {
        for ok in [
            ROLE,
            "arn:aws-cn:iam::123456789012:role/service-role/AmazonSageMaker-ExecutionRole-2024",
        ] {
            assert_eq!(catalog::check_role_arn(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "arn:aws:iam::123456789012:user/x",
            "arn:aws:iam:us-east-1:123456789012:role/x",
            "arn:aws:s3::123456789012:role/x",
            "arn:aws:iam::123456789012:role/",
            "arn:aws:iam::123456789012:rolex",
            "arn:aws:iam::123456789012:roles/x",
        ] {
            assert!(catalog::check_role_arn(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn preview_shows_the_definition_diff_then_the_object_diff() {
        let before = Spec {
            definition_hash: None,
            ..base()
        };
        let (mut live, _) = applied_object(&before, "sagemaker_pipeline.train").expect("applies");
        live["metadata"]["resourceVersion"] = json!("7");
        live["status"] = json!({"pipelineStatus": "Active"});
        let after = Spec {
            definition: Some(definition_text().replace("3600", "7200")),
            description: Some("longer runs".into()),
            ..before.clone()
        };
        let (planned, _) = applied_object(&after, "sagemaker_pipeline.train").expect("applies");
        let text = preview_text(Some(&live), &planned, None).expect("a diff");
        assert!(
            text.starts_with("--- live pipelineDefinition\n+++ planned pipelineDefinition\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "-          \"MaxRuntimeInSeconds\": 3600\n+          \"MaxRuntimeInSeconds\": 7200\n"
            ),
            "{text}"
        );
        assert!(text.contains("--- live\n+++ planned\n"), "{text}");
        assert!(
            text.contains("+  pipelineDescription: longer runs"),
            "{text}"
        );
        assert!(
            text.contains("pipelineDefinition: sha256:"),
            "the object diff shows the hash: {text}"
        );
        assert!(!text.contains("resourceVersion"), "{text}");
        let unchanged = preview_text(Some(&live), &live.clone(), None);
        assert_eq!(unchanged, None);
    }
}
