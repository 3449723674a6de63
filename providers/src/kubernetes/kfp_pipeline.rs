//! The `kfp_pipeline` kind: a compiled Kubeflow Pipelines pipeline uploaded to KFP on a
//! cluster, through KFP's REST API behind the cluster's service proxy (`kfp_api`).
//!
//! The file is read and checked at validate and plan (`kfp_spec`: the PipelineSpec
//! and its Kubernetes platform spec, problems at `pipeline.yaml:LINE:COL`), and what
//! it compiles to is kept in the spec (`compiled`, with its `digest`), so the runs of
//! the same stack are checked against it before anything exists.
//!
//! A changed file is a new version of the same pipeline (KFP's versions are
//! immutable); a file changed back to one uploaded before uses that version again.
//! Versions are told apart by the digest of what they hold, which KFP returns with
//! each version (`pipeline_spec`), so a version uploaded by hand is never mistaken for
//! the stack's. Destroy deletes the versions, then the pipeline: KFP refuses to delete
//! a pipeline that still has versions.
//!
//! Id: `<namespace>/<name>` (KFP's namespace, the pipeline's name), known before the
//! upload, so an apply interrupted after it adopts the pipeline it made.

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use super::kfp_api::{self, Kfp};
use super::kfp_spec::{self, Compiled};
use super::{check_cluster, check_dns_label, connect, needs_cluster};
use crate::protocol::UNKNOWN;
use crate::schema::Fields;
use crate::{ApiGroups, Ctx, Invalid, Kind, Live, ProviderError};

/// The kind `kfp_pipeline`.
#[derive(Debug, Clone, Copy, Default)]
pub struct KfpPipeline;

const ID_SHAPE: &str = "NAMESPACE/NAME";
/// The longest pipeline name KFP's database column takes.
const MAX_NAME: usize = 128;
/// How long the API server may take to come up after KFP's install rolled out.
const READY_TIMEOUT: Duration = Duration::from_secs(120);

pub(crate) fn default_namespace() -> String {
    "kubeflow".into()
}

/// What a stack writes for a `kfp_pipeline`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    #[terrain(doc = crate::kubernetes::CLUSTER_DOC, force_new)]
    pub cluster: Value,
    /// The namespace KFP runs in (its API server's Service, `ml-pipeline`).
    #[serde(default = "default_namespace")]
    #[terrain(force_new)]
    pub namespace: String,
    /// The pipeline's name in KFP, unique there.
    #[terrain(force_new)]
    pub name: String,
    /// The name KFP's UI shows (the name when not set).
    #[terrain(force_new)]
    pub display_name: Option<String>,
    /// A description of the pipeline.
    #[terrain(force_new)]
    pub description: Option<String>,
    /// The compiled pipeline (`kfp`'s `compiler.Compiler().compile(…)` output), relative
    /// to the current directory. A changed file is uploaded as a new version.
    pub file: String,
    /// Computed from `file` at plan time; do not set it.
    #[serde(default)]
    pub digest: String,
    /// Computed from `file` at plan time (the PipelineSpec and the platform spec);
    /// do not set it.
    #[serde(default)]
    #[terrain(any)]
    pub compiled: Value,
}

/// What `kfp_pipeline` reports after apply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Outputs {
    /// KFP's id of the pipeline.
    pub pipeline_id: String,
    /// The id of the version holding the file, for runs (`kfp_run.version`).
    pub version_id: String,
    /// That version's name.
    pub version_name: String,
    /// How many versions the pipeline has.
    pub versions: i64,
}

/// The JSON both documents make, as KFP returns a version's `pipeline_spec`.
fn compiled_value(c: &Compiled) -> Value {
    json!({"pipeline_spec": c.spec, "platform_spec": c.platform.clone().unwrap_or(Value::Null)})
}

/// The same JSON whatever wrote it: keys sorted (serde_json's maps are), and whole
/// numbers as integers (YAML's `3.0` and KFP's `3` are one value).
fn canonical(value: &Value) -> Value {
    match value {
        Value::Number(n) => match n.as_f64() {
            Some(f) if n.is_f64() && f.fract() == 0.0 && f.abs() < 9.0e15 => json!(f as i64),
            _ => value.clone(),
        },
        Value::Array(items) => Value::Array(items.iter().map(canonical).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), canonical(v)))
                .collect::<Map<String, Value>>(),
        ),
        other => other.clone(),
    }
}

/// The digest of a compiled pipeline: `sha256:` and the hex of its canonical JSON.
pub fn digest(compiled: &Value) -> String {
    let text = canonical(compiled).to_string();
    format!("sha256:{}", hex::encode(Sha256::digest(text.as_bytes())))
}

/// A version's content as KFP returns it, in the shape of [`compiled_value`]: its
/// `pipeline_spec` is the PipelineSpec, or `{pipeline_spec, platform_spec}` when the
/// file had a platform document.
fn version_compiled(version: &Value) -> Value {
    let spec = &version["pipeline_spec"];
    if spec.get("pipeline_spec").is_some() {
        json!({"pipeline_spec": spec["pipeline_spec"], "platform_spec": spec.get("platform_spec").cloned().unwrap_or(Value::Null)})
    } else {
        json!({"pipeline_spec": spec, "platform_spec": Value::Null})
    }
}

/// Reads and checks the compiled pipeline at `path`; problems at `path:LINE:COL`.
pub fn read_compiled(path: &str) -> Result<(String, Compiled), String> {
    let text = std::fs::read_to_string(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => {
            format!("{path}: no such file (a relative path is relative to the stack's directory)")
        }
        std::io::ErrorKind::InvalidData => {
            format!("{path}: not UTF-8 text; a compiled pipeline is YAML")
        }
        _ => format!("{path}: cannot read: {e}"),
    })?;
    match kfp_spec::parse(&text) {
        Ok(c) => Ok((text, c)),
        Err(problems) => {
            let shown: Vec<String> = problems.iter().take(10).map(|p| p.describe(path)).collect();
            let mut message = shown.join("\n");
            if problems.len() > 10 {
                message.push_str(&format!("\n(and {} more)", problems.len() - 10));
            }
            Err(message)
        }
    }
}

fn parse_id(id: &str) -> Result<(&str, &str), ProviderError> {
    match id.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((ns, name))
        }
        _ => Err(ProviderError::Unsupported(format!(
            "{}: {id:?} is not an id of this kind; expected {ID_SHAPE}",
            KfpPipeline::KIND
        ))),
    }
}

/// The version of `versions` holding `digest`, newest first.
fn version_with<'a>(versions: &'a [Value], digest_: &str) -> Option<&'a Value> {
    versions
        .iter()
        .rev()
        .find(|v| digest(&version_compiled(v)) == digest_)
}

fn string(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

fn outputs_of(pipeline: &Value, version: &Value, versions: usize) -> Outputs {
    Outputs {
        pipeline_id: string(&pipeline["pipeline_id"]),
        version_id: string(&version["pipeline_version_id"]),
        version_name: string(&version["name"]),
        versions: i64::try_from(versions).unwrap_or(i64::MAX),
    }
}

/// KFP on `spec`'s cluster, once its API server answers (right after KFP's install
/// rolled out, its first calls may still meet no ready endpoint).
async fn kfp(ctx: &Ctx, cluster: &Value, namespace: &str) -> Result<Kfp, ProviderError> {
    let conn = connect::client(ctx, cluster).await?;
    Ok(Kfp::new(conn, namespace))
}

async fn when_ready<T, F, Fut>(ctx: &Ctx, mut call: F) -> Result<T, ProviderError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, ProviderError>>,
{
    let started = std::time::Instant::now();
    loop {
        match call().await {
            Err(e)
                if super::apply::status_of(&e) == Some(503)
                    && started.elapsed() < READY_TIMEOUT =>
            {
                ctx.progress("waiting for KFP's API server");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            other => return other,
        }
    }
}

/// Uploads the file as a version of `pipeline` unless one holds it already.
async fn ensure_version(
    kfp: &Kfp,
    spec: &Spec,
    pipeline: &Value,
) -> Result<Live<KfpPipeline>, ProviderError> {
    let pipeline_id = string(&pipeline["pipeline_id"]);
    let mut versions = kfp.versions(&pipeline_id).await?;
    if version_with(&versions, &spec.digest).is_none() {
        let bytes = std::fs::read(&spec.file).map_err(|e| ProviderError::Io {
            call: "read",
            path: spec.file.clone(),
            source: e,
        })?;
        let hex = spec.digest.trim_start_matches("sha256:");
        let name = format!("{}-{}", spec.name, &hex[..hex.len().min(12)]);
        let description = spec.description.clone().unwrap_or_default();
        kfp.upload_version(&pipeline_id, &name, &description, &bytes)
            .await?;
        versions = kfp.versions(&pipeline_id).await?;
    }
    let version = version_with(&versions, &spec.digest).ok_or_else(|| ProviderError::Failed {
        call: "kfp.pipelines.uploadVersion".into(),
        message: format!(
            "KFP lists no version of pipeline {pipeline_id} holding the uploaded file ({})",
            spec.digest
        ),
    })?;
    Ok(Live {
        id: format!("{}/{}", spec.namespace, spec.name),
        outputs: outputs_of(pipeline, version, versions.len()),
        spec: spec.clone(),
    })
}

#[async_trait]
impl Kind for KfpPipeline {
    type Spec = Spec;
    type Outputs = Outputs;
    const KIND: &'static str = "kfp_pipeline";
    const PROVIDER: &'static str = "kubernetes";

    fn api_groups(_spec: &Value) -> ApiGroups {
        kfp_api::needed("Pipeline")
    }

    fn validate(spec: &Spec, _config: &Value) -> Vec<Invalid> {
        let mut out = Vec::new();
        check_cluster(&spec.cluster, &mut out);
        if let Err(m) = check_dns_label(&spec.namespace) {
            out.push(Invalid::at("namespace", m));
        }
        if spec.name.trim().is_empty() {
            out.push(Invalid::at("name", "must not be empty"));
        } else if spec.name.len() > MAX_NAME {
            out.push(Invalid::at(
                "name",
                format!("KFP takes names of at most {MAX_NAME} characters"),
            ));
        } else if spec.name.contains('/') {
            out.push(Invalid::at("name", "must not contain '/'"));
        }
        if spec.file.trim().is_empty() {
            out.push(Invalid::at(
                "file",
                "name the compiled pipeline (the YAML `kfp`'s compiler writes)",
            ));
        }
        out
    }

    fn prepare(mut spec: Spec) -> Result<Spec, ProviderError> {
        if spec.file.contains(UNKNOWN) || spec.file.trim().is_empty() {
            return Ok(spec);
        }
        let (_, compiled) =
            read_compiled(&spec.file).map_err(|m| ProviderError::invalid("file", m))?;
        spec.compiled = compiled_value(&compiled);
        spec.digest = digest(&spec.compiled);
        Ok(spec)
    }

    fn planned_id(spec: &Spec, _config: &Value) -> Option<String> {
        Some(format!("{}/{}", spec.namespace, spec.name))
    }

    async fn read(
        &self,
        ctx: &Ctx,
        id: &str,
        prior: Option<&Spec>,
    ) -> Result<Option<Live<Self>>, ProviderError> {
        let (namespace, name) = parse_id(id)?;
        let prior = prior.ok_or_else(|| needs_cluster(Self::KIND))?;
        let kfp = kfp(ctx, &prior.cluster, namespace).await?;
        let Some(pipeline) = kfp.pipeline_by_name(name).await? else {
            return Ok(None);
        };
        let pipeline_id = string(&pipeline["pipeline_id"]);
        let versions = kfp.versions(&pipeline_id).await?;
        // The stack's version when it is still there; else the newest, whose content
        // differs from the file, so the plan uploads the file again.
        let (version, spec) = match version_with(&versions, &prior.digest) {
            Some(v) => (v.clone(), prior.clone()),
            None => {
                let newest = versions.last().cloned().unwrap_or(Value::Null);
                let compiled = if newest.is_null() {
                    Value::Null
                } else {
                    version_compiled(&newest)
                };
                let spec = Spec {
                    digest: if compiled.is_null() {
                        String::new()
                    } else {
                        digest(&compiled)
                    },
                    compiled,
                    ..prior.clone()
                };
                (newest, spec)
            }
        };
        let display = pipeline["display_name"].as_str().filter(|d| *d != name);
        let description = pipeline["description"].as_str().filter(|d| !d.is_empty());
        let spec = Spec {
            namespace: namespace.to_string(),
            name: name.to_string(),
            display_name: match (&prior.display_name, display) {
                (Some(p), None) if p == name => prior.display_name.clone(),
                (_, d) => d.map(str::to_string),
            },
            description: description.map(str::to_string),
            ..spec
        };
        Ok(Some(Live {
            id: id.to_string(),
            outputs: outputs_of(&pipeline, &version, versions.len()),
            spec,
        }))
    }

    async fn create(&self, ctx: &Ctx, spec: &Spec) -> Result<Live<Self>, ProviderError> {
        let kfp = kfp(ctx, &spec.cluster, &spec.namespace).await?;
        let existing = when_ready(ctx, || kfp.pipeline_by_name(&spec.name)).await?;
        let pipeline = match existing {
            // The pipeline an interrupted apply of this resource uploaded.
            Some(p) if ctx.resumes().is_some() => p,
            Some(p) => {
                return Err(ProviderError::Failed {
                    call: "kfp.pipelines.upload".into(),
                    message: format!(
                        "KFP already has a pipeline named {:?} (id {}); pick another name, or adopt it with `terrain import {} {}/{}`",
                        spec.name,
                        string(&p["pipeline_id"]),
                        ctx.address,
                        spec.namespace,
                        spec.name
                    ),
                })
            }
            None => {
                let bytes = std::fs::read(&spec.file).map_err(|e| ProviderError::Io {
                    call: "read",
                    path: spec.file.clone(),
                    source: e,
                })?;
                let display = spec.display_name.clone().unwrap_or_else(|| spec.name.clone());
                let description = spec.description.clone().unwrap_or_default();
                ctx.progress(&format!("uploading {}", spec.file));
                kfp.upload_pipeline(&spec.name, &display, &description, &bytes)
                    .await?
            }
        };
        ensure_version(&kfp, spec, &pipeline).await
    }

    async fn update(
        &self,
        ctx: &Ctx,
        _id: &str,
        _prior: &Spec,
        spec: &Spec,
    ) -> Result<Live<Self>, ProviderError> {
        let kfp = kfp(ctx, &spec.cluster, &spec.namespace).await?;
        let Some(pipeline) = when_ready(ctx, || kfp.pipeline_by_name(&spec.name)).await? else {
            return Err(ProviderError::Failed {
                call: "kfp.pipelines.getByName".into(),
                message: format!(
                    "pipeline {:?} is gone from KFP; the next plan uploads it again",
                    spec.name
                ),
            });
        };
        ctx.progress(&format!("uploading {} as a new version", spec.file));
        ensure_version(&kfp, spec, &pipeline).await
    }

    async fn delete(&self, ctx: &Ctx, id: &str, prior: Option<&Spec>) -> Result<(), ProviderError> {
        let (namespace, name) = parse_id(id)?;
        let prior = prior.ok_or_else(|| needs_cluster(Self::KIND))?;
        let kfp = kfp(ctx, &prior.cluster, namespace).await?;
        let Some(pipeline) = when_ready(ctx, || kfp.pipeline_by_name(name)).await? else {
            return Ok(());
        };
        let pipeline_id = string(&pipeline["pipeline_id"]);
        // KFP refuses to delete a pipeline that still has versions.
        for version in kfp.versions(&pipeline_id).await? {
            kfp.delete_version(&pipeline_id, &string(&version["pipeline_version_id"]))
                .await?;
        }
        kfp.delete_pipeline(&pipeline_id).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubernetes::connect::tests::gke_reference;
    use crate::testing::schema_mismatches;

    const FIXTURE: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/kfp/gpu_pipeline.yaml"
    );

    fn base() -> Spec {
        Spec {
            cluster: gke_reference(),
            namespace: "kubeflow".into(),
            name: "gpu-training".into(),
            display_name: None,
            description: None,
            file: FIXTURE.into(),
            digest: String::new(),
            compiled: Value::Null,
        }
    }

    #[test]
    fn schema_agrees_with_serde() {
        let spec = KfpPipeline::prepare(Spec {
            display_name: Some("GPU training".into()),
            description: Some("Preprocess, then train".into()),
            ..base()
        })
        .expect("prepares");
        let outputs = Outputs {
            pipeline_id: "p".into(),
            version_id: "v".into(),
            version_name: "n".into(),
            versions: 1,
        };
        assert_eq!(
            schema_mismatches::<KfpPipeline>(&spec, &outputs),
            Vec::<String>::new()
        );
    }

    #[test]
    fn the_digest_is_the_same_for_the_file_and_for_what_kfp_returns() {
        let spec = KfpPipeline::prepare(base()).expect("prepares");
        assert!(spec.digest.starts_with("sha256:"), "{}", spec.digest);
        // KFP returns numbers as JSON writes them (3, not 3.0), the two documents
        // wrapped when there is a platform spec.
        let text = spec.compiled.to_string().replace("3.0", "3");
        let returned: Value = serde_json::from_str(&text).expect("json");
        let version = json!({"pipeline_spec": returned});
        assert_eq!(digest(&version_compiled(&version)), spec.digest);
        let plain = json!({"pipeline_spec": spec.compiled["pipeline_spec"]});
        assert_ne!(digest(&version_compiled(&plain)), spec.digest);
    }

    #[test]
    fn a_broken_file_is_refused_at_its_line_and_column() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("pipeline.yaml");
        let text = std::fs::read_to_string(FIXTURE)
            .expect("fixture")
            .replace("name: comp-train", "name: comp-trian");
        std::fs::write(&path, text).expect("write");
        let spec = Spec {
            file: path.to_string_lossy().into_owned(),
            ..base()
        };
        match KfpPipeline::prepare(spec) {
            Err(ProviderError::Invalid { field, message }) => {
                assert_eq!(field, "file");
                // At the task's componentRef, and only the one line: not the file.
                let expected = format!("{}:", path.display());
                assert!(message.starts_with(&expected), "{message}");
                assert_eq!(message.lines().count(), 1, "{message}");
                let place: Vec<&str> = message[expected.len()..].splitn(3, ':').collect();
                assert!(
                    place.len() == 3
                        && place[0].parse::<usize>().is_ok()
                        && place[1].parse::<usize>().is_ok(),
                    "LINE:COL: {message}"
                );
                assert!(message.contains("comp-trian"), "{message}");
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
}
