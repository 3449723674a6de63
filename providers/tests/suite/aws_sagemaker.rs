//! `sagemaker_pipeline` and `sagemaker_pipeline_execution` end to end, driven through the
//! untyped adapter as the engine drives them.
//!
//! Against the sandbox: an EKS cluster made by `eks_cluster` and reached through its
//! `kubernetes` output, the ACK SageMaker CRDs installed from the reference files with
//! `kubernetes_manifest`, and the sandbox's ACK controller reconciling the objects
//! against its SageMaker. Pipeline create → read equals the spec → an edited definition
//! file previews as a unified diff → update → a run followed to Succeeded, its ARN
//! known to the SageMaker API → a failing run fails with its reason → both deleted and
//! gone. A cluster without the CRDs gets the install command; a definition with a
//! syntax error fails at `prepare` with its line and column.
//!
//! Against moto (the third-party AWS emulator, without ACK): the SageMaker cross-checks
//! alone, with pipelines and runs made through signed SageMaker API calls.

use crate::support::aws as support;

use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::{json, Value};
use terrain_providers::aws::eks_capability::EksCapability;
use terrain_providers::aws::eks_cluster::EksCluster;
use terrain_providers::aws::iam_role::IamRole;
use terrain_providers::aws::sagemaker_pipeline::{
    cross_check_pipeline, PipelineCheck, SageMakerPipeline,
};
use terrain_providers::aws::sagemaker_pipeline_execution::{
    cross_check_execution, SageMakerPipelineExecution,
};
use terrain_providers::{Adapter, Ctx, ProviderError, Resource};
use terrain_sandbox::{Options, Sandbox, Timing};

/// One SageMaker API call (JSON 1.1, signed) with `ctx`'s provider table: how the
/// tests make and inspect what the cross-checks read.
async fn sagemaker(ctx: &Ctx, operation: &str, body: Value) -> Result<Value, ProviderError> {
    let (client, region) = terrain_providers::aws::ack::sagemaker(ctx).await?;
    client
        .json11(
            &terrain_providers::aws::signed::SAGEMAKER,
            &region,
            operation,
            &body,
        )
        .await
}

const ROLE: &str = "arn:aws:iam::123456789012:role/SageMakerExecution";

fn pipelines() -> Adapter<SageMakerPipeline> {
    Adapter::new(SageMakerPipeline)
}

fn executions() -> Adapter<SageMakerPipelineExecution> {
    Adapter::new(SageMakerPipelineExecution)
}

/// A context that keeps the progress messages it is sent.
fn recording(address: &str, config: &Value) -> (Ctx, Arc<Mutex<Vec<String>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&seen);
    let ctx = support::ctx(address, config.clone()).with_reporter(Arc::new(move |m: &str| {
        sink.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(m.to_string())
    }));
    (ctx, seen)
}

fn seen(progress: &Arc<Mutex<Vec<String>>>) -> Vec<String> {
    progress
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
}

fn without_nulls(v: &Value) -> Value {
    match v {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), without_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_nulls).collect()),
        other => other.clone(),
    }
}

/// The spec as the engine hands it over: defaults filled, validated, local inputs read.
fn prepared(kind: &dyn Resource, fields: Value, config: &Value) -> Value {
    let spec = kind.schema().with_defaults(&fields);
    let problems = kind.validate(&spec, config);
    assert!(problems.is_empty(), "{problems:?}");
    kind.prepare(spec).expect("the spec prepares")
}

/// A training pipeline (the XGBoost example, trimmed) whose run takes `max_runtime`.
fn training_definition(max_runtime: u64) -> String {
    serde_json::to_string_pretty(&json!({
        "Version": "2020-12-01",
        "Metadata": {},
        "Parameters": [
            {"Name": "InputData", "Type": "String", "DefaultValue": "s3://ml-data/abalone/train.csv"},
            {"Name": "InstanceType", "Type": "String", "DefaultValue": "ml.m5.xlarge"},
        ],
        "Steps": [
            {
                "Name": "TrainAbalone",
                "Type": "Training",
                "Arguments": {
                    "AlgorithmSpecification": {
                        "TrainingImage": "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-xgboost:1.7-1",
                        "TrainingInputMode": "File",
                    },
                    "OutputDataConfig": {"S3OutputPath": "s3://ml-artifacts/abalone"},
                    "ResourceConfig": {"InstanceCount": 1, "InstanceType": {"Get": "Parameters.InstanceType"}, "VolumeSizeInGB": 30},
                    "StoppingCondition": {"MaxRuntimeInSeconds": max_runtime},
                    "RoleArn": ROLE,
                    "InputDataConfig": [{
                        "ChannelName": "train",
                        "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": {"Get": "Parameters.InputData"}}},
                    }],
                    "HyperParameters": {"objective": "reg:squarederror", "num_round": "50"},
                },
            },
            {
                "Name": "RegisterAbalone",
                "Type": "RegisterModel",
                "DependsOn": ["TrainAbalone"],
                "Arguments": {
                    "ModelPackageGroupName": "abalone",
                    "InferenceSpecification": {
                        "Containers": [{
                            "Image": "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-xgboost:1.7-1",
                            "ModelDataUrl": {"Get": "Steps.TrainAbalone.ModelArtifacts.S3ModelArtifacts"},
                        }],
                        "SupportedContentTypes": ["text/csv"],
                        "SupportedResponseMIMETypes": ["text/csv"],
                    },
                },
            },
        ],
    }))
    .expect("encodes")
}

/// A pipeline whose run fails: its training step is followed by a Fail step.
fn failing_definition() -> String {
    let mut d: Value = serde_json::from_str(&training_definition(3600)).expect("JSON");
    d["Steps"][1] = json!({
        "Name": "Boom",
        "Type": "Fail",
        "DependsOn": ["TrainAbalone"],
        "Arguments": {"ErrorMessage": "AlgorithmError: boom"},
    });
    serde_json::to_string_pretty(&d).expect("encodes")
}

/// A sandbox with one EKS cluster and its `kubernetes` output; `None` (with a message)
/// while the sandbox's EKS answers 501 NotImplemented.
async fn eks_sandbox(name: &str) -> Option<(Sandbox, Value, Value)> {
    let sandbox = Sandbox::start(Options {
        timing: Timing::scaled(0.01),
        ..Default::default()
    })
    .await
    .expect("sandbox starts");
    sandbox
        .set_capacity(support::hand_named_account())
        .expect("capacity set");
    let config = support::config(&sandbox.url());
    match eks_cluster(&config, name, true).await {
        Ok(kubernetes) => Some((sandbox, config, kubernetes)),
        Err(ProviderError::Api { status: 501, .. }) => {
            eprintln!("the sandbox's EKS answers 501 NotImplemented: skipping");
            sandbox.shutdown().await;
            None
        }
        Err(e) => panic!("the EKS cluster is created: {e}"),
    }
}

/// Creates the EKS cluster `name`, `with_ack` the ACK controllers as a capability (which
/// installs their CRDs and acts as a role allowed SageMaker and passing roles to it),
/// and returns its `kubernetes` output.
async fn eks_cluster(config: &Value, name: &str, with_ack: bool) -> Result<Value, ProviderError> {
    let clusters = Adapter::new(EksCluster);
    let spec = clusters.schema().with_defaults(&json!({
        "name": name,
        "version": "1.31",
        "role_arn": "arn:aws:iam::123456789012:role/eks-cluster",
        "subnet_ids": ["subnet-0aaaaaaaaaaaaaaaa", "subnet-0bbbbbbbbbbbbbbbb"],
        "authentication_mode": "API",
    }));
    let cluster = clusters
        .create(
            &support::ctx(format!("eks_cluster.{name}"), config.clone()),
            &spec,
        )
        .await?;
    let kubernetes = cluster.outputs["kubernetes"].clone();
    assert_eq!(kubernetes["flavor"], "eks", "{kubernetes}");
    if !with_ack {
        return Ok(kubernetes);
    }
    let roles = Adapter::new(IamRole);
    let role = roles
        .create(
            &support::ctx("iam_role.ack", config.clone()),
            &roles.schema().with_defaults(&json!({
                "name": format!("{name}-ack"),
                "trust": "eks-capabilities",
                "managed_policies": ["AmazonSageMakerFullAccess"],
            })),
        )
        .await?;
    let capabilities = Adapter::new(EksCapability);
    capabilities
        .create(
            &support::ctx("eks_capability.ack", config.clone()),
            &capabilities.schema().with_defaults(&json!({
                "cluster": name,
                "name": "ack",
                "role_arn": role.outputs["arn"],
            })),
        )
        .await?;
    Ok(kubernetes)
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).expect("writes the definition file");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelines_and_runs_through_ack_on_the_sandbox() -> Result<(), ProviderError> {
    let Some((sandbox, config, cluster)) = eks_sandbox("ml").await else {
        return Ok(());
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("abalone.json");
    write(&file, &training_definition(3600));
    let kind = pipelines();

    // Create: applied, synced by the controller, cross-checked with SageMaker.
    let (ctx, progress) = recording("sagemaker_pipeline.train", &config);
    let fields = json!({
        "cluster": cluster,
        "name": "abalone",
        "pipeline_name": "abalone-train",
        "description": "trains the abalone model",
        "role_arn": ROLE,
        "definition_file": file.display().to_string(),
        "max_parallel_steps": 2,
        "tags": {"team": "ml"},
    });
    let spec = prepared(&kind, fields.clone(), &config);
    let id = "sagemaker.services.k8s.aws/v1alpha1/Pipeline/default/abalone";
    assert_eq!(kind.planned_id(&spec, &config).as_deref(), Some(id));
    let created = kind.create(&ctx, &spec).await?;
    assert_eq!(created.id, id);
    assert_eq!(without_nulls(&created.spec), without_nulls(&spec));
    assert_eq!(created.outputs["pipeline_name"], "abalone-train");
    assert_eq!(created.outputs["status"], "Active");
    let arn = created.outputs["arn"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert_eq!(
        arn,
        "arn:aws:sagemaker:us-east-1:123456789012:pipeline/abalone-train"
    );
    assert!(
        seen(&progress)
            .iter()
            .any(|m| m.contains("the ACK controller to sync Pipeline default/abalone")),
        "{:?}",
        seen(&progress)
    );
    let read = kind
        .read(&ctx, id, &spec)
        .await?
        .expect("the pipeline exists");
    assert_eq!(
        without_nulls(&read.spec),
        without_nulls(&spec),
        "a clean re-plan shows no change"
    );
    let health = kind.health(&ctx, id, &spec).await?;
    assert!(health.ready, "{health:?}");

    // An edited file is an in-place change whose plan shows the definition's diff.
    write(&file, &training_definition(7200));
    let edited = prepared(&kind, fields.clone(), &config);
    assert_ne!(edited["definition_hash"], spec["definition_hash"]);
    let preview = kind
        .preview(&ctx, id, &spec, &edited)
        .await?
        .expect("a diff");
    assert!(
        preview.starts_with("--- live pipelineDefinition\n+++ planned pipelineDefinition\n"),
        "{preview}"
    );
    assert!(
        preview.contains(
            "-          \"MaxRuntimeInSeconds\": 3600\n+          \"MaxRuntimeInSeconds\": 7200\n"
        ),
        "{preview}"
    );
    let updated = kind.update(&ctx, id, &spec, &edited).await?;
    assert_eq!(updated.spec["definition_hash"], edited["definition_hash"]);
    let read = kind.read(&ctx, id, &edited).await?.expect("exists");
    assert_eq!(without_nulls(&read.spec), without_nulls(&edited));
    assert_eq!(
        cross_check_pipeline(
            &ctx,
            "abalone-train",
            &arn,
            Some(&serde_json::from_str(&training_definition(7200)).expect("JSON"))
        )
        .await?,
        PipelineCheck::Matches,
        "SageMaker holds the edited definition"
    );

    // A run followed to the end, known to the SageMaker API under the pipeline.
    let runs = executions();
    let (run_ctx, run_progress) = recording("sagemaker_pipeline_execution.nightly", &config);
    let run = prepared(
        &runs,
        json!({
            "cluster": cluster,
            "name": "abalone-nightly",
            "pipeline_name": "abalone-train",
            "display_name": "nightly-1",
            "parameters": {"InputData": "s3://ml-data/abalone/2024-06-01.csv"},
        }),
        &config,
    );
    let run_id = "sagemaker.services.k8s.aws/v1alpha1/PipelineExecution/default/abalone-nightly";
    let finished = runs.create(&run_ctx, &run).await?;
    assert_eq!(finished.id, run_id);
    assert_eq!(finished.outputs["status"], "Succeeded");
    assert_eq!(finished.outputs["failure_reason"], "");
    let run_arn = finished.outputs["arn"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        run_arn.starts_with(
            "arn:aws:sagemaker:us-east-1:123456789012:pipeline/abalone-train/execution/"
        ),
        "{run_arn}"
    );
    assert!(
        seen(&run_progress)
            .iter()
            .any(|m| m.contains("SageMaker to start PipelineExecution default/abalone-nightly")),
        "{:?}",
        seen(&run_progress)
    );
    let described = sagemaker(
        &run_ctx,
        "DescribePipelineExecution",
        json!({"PipelineExecutionArn": run_arn}),
    )
    .await?;
    assert_eq!(described["PipelineExecutionStatus"], "Succeeded");
    assert_eq!(described["PipelineArn"], arn.as_str());
    let read = runs.read(&run_ctx, run_id, &run).await?.expect("exists");
    assert_eq!(without_nulls(&read.spec), without_nulls(&run));

    // A re-plan lists the namespace's pipelines, and its runs, with one call each: what
    // the list shows is what a read shows; a name it does not show is `None` (the
    // engine then reads that one alone).
    let missing = "sagemaker.services.k8s.aws/v1alpha1/Pipeline/default/missing";
    assert!(kind.batch_key(&json!({}), id, &edited).is_some());
    assert_eq!(
        kind.batch_key(&json!({}), id, &edited),
        kind.batch_key(&json!({}), missing, &edited),
        "one namespace on one cluster is one list"
    );
    let pipeline_read = kind.read(&ctx, id, &edited).await?.expect("exists");
    let listed = kind
        .read_batch(
            &support::ctx("sagemaker_pipeline (list of 2)", config.clone()),
            &[(id, &edited), (missing, &edited)],
        )
        .await?;
    assert_eq!(
        listed[0]
            .as_ref()
            .map(|o| (o.id.clone(), without_nulls(&o.spec), o.outputs.clone())),
        Some((
            pipeline_read.id.clone(),
            without_nulls(&pipeline_read.spec),
            pipeline_read.outputs.clone()
        ))
    );
    assert!(listed[1].is_none(), "{:?}", listed[1]);
    let listed = runs
        .read_batch(
            &support::ctx("sagemaker_pipeline_execution (list of 1)", config.clone()),
            &[(run_id, &run)],
        )
        .await?;
    assert_eq!(
        listed[0]
            .as_ref()
            .map(|o| (without_nulls(&o.spec), o.outputs.clone())),
        Some((without_nulls(&read.spec), read.outputs.clone()))
    );

    let health = runs.health(&run_ctx, run_id, &run).await?;
    assert_eq!((health.ready, health.summary.as_str()), (true, "Succeeded"));

    // A run that fails says why.
    let fail_file = dir.path().join("failing.json");
    write(&fail_file, &failing_definition());
    let failing_pipeline = prepared(
        &kind,
        json!({
            "cluster": cluster,
            "name": "abalone-failing",
            "pipeline_name": "abalone-failing",
            "role_arn": ROLE,
            "definition_file": fail_file.display().to_string(),
        }),
        &config,
    );
    let fail_ctx = support::ctx("sagemaker_pipeline.failing", config.clone());
    let failing_id = kind.create(&fail_ctx, &failing_pipeline).await?.id;
    let bad_run = prepared(
        &runs,
        json!({"cluster": cluster, "name": "abalone-failing-1", "pipeline_name": "abalone-failing"}),
        &config,
    );
    let bad_ctx = support::ctx("sagemaker_pipeline_execution.failing", config.clone());
    let failed = runs
        .create(&bad_ctx, &bad_run)
        .await
        .expect_err("the run fails");
    let text = failed.to_string();
    assert!(text.contains("Failed: AlgorithmError: boom"), "{text}");
    let bad_id = "sagemaker.services.k8s.aws/v1alpha1/PipelineExecution/default/abalone-failing-1";
    // The failed run exists: the engine keeps it, tainted, for the next apply to replace.
    match &failed {
        ProviderError::Tainted { id, error } => {
            assert_eq!(id, bad_id);
            assert!(matches!(**error, ProviderError::Failed { .. }), "{error:?}");
        }
        other => panic!("a failed run is tainted, not {other:?}"),
    }
    let health = runs.health(&bad_ctx, bad_id, &bad_run).await?;
    assert_eq!(
        (health.ready, health.summary.as_str()),
        (false, "Failed: AlgorithmError: boom")
    );

    // Destroy: the objects go once the controller has cleaned up SageMaker.
    for (ctx, id, spec) in [(&run_ctx, run_id, &run), (&bad_ctx, bad_id, &bad_run)] {
        runs.delete(ctx, id, spec).await?;
        assert!(runs.read(ctx, id, spec).await?.is_none(), "{id} is gone");
        runs.delete(ctx, id, spec).await?;
    }
    for (ctx, id, spec) in [
        (&ctx, id, &edited),
        (&fail_ctx, failing_id.as_str(), &failing_pipeline),
    ] {
        kind.delete(ctx, id, spec).await?;
        assert!(kind.read(ctx, id, spec).await?.is_none(), "{id} is gone");
        kind.delete(ctx, id, spec).await?;
    }
    let gone = sagemaker(
        &run_ctx,
        "DescribePipeline",
        json!({"PipelineName": "abalone-train"}),
    )
    .await
    .expect_err("the SageMaker pipeline is deleted");
    assert!(terrain_providers::aws::is_not_found(&gone), "{gone}");
    sandbox.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_without_the_crds_gets_the_install_command() -> Result<(), ProviderError> {
    let Some((sandbox, config, with_ack)) = eks_sandbox("with-ack").await else {
        return Ok(());
    };
    let kind = pipelines();
    // Regression: kinds resolved through discovery are remembered for the process, so
    // once a cluster with the CRDs was seen, a cluster without them passed the early
    // check; the apply's 404 must still come out as the install command.
    let ctx = support::ctx("sagemaker_pipeline.probe", config.clone());
    let probe = json!({"cluster": with_ack, "name": "probe", "pipeline_name": "probe", "role_arn": ROLE, "definition": training_definition(3600)});
    assert!(kind
        .read(
            &ctx,
            "sagemaker.services.k8s.aws/v1alpha1/Pipeline/default/probe",
            &kind.schema().with_defaults(&probe)
        )
        .await?
        .is_none());
    let cluster = eks_cluster(&config, "bare", false).await?;
    let spec = prepared(
        &kind,
        json!({
            "cluster": cluster,
            "name": "abalone",
            "pipeline_name": "abalone-train",
            "role_arn": ROLE,
            "definition": training_definition(3600),
        }),
        &config,
    );
    let e = kind
        .create(
            &support::ctx("sagemaker_pipeline.train", config.clone()),
            &spec,
        )
        .await
        .expect_err("no CRDs");
    let text = e.to_string();
    assert!(
        text.contains("nothing runs the ACK SageMaker controller on this cluster"),
        "{text}"
    );
    assert!(
        text.contains("add an `eks_capability` with type = \"ACK\" on it"),
        "{text}"
    );
    let runs = executions();
    let run = prepared(
        &runs,
        json!({"cluster": cluster, "name": "abalone-1", "pipeline_name": "abalone-train"}),
        &config,
    );
    let e = runs
        .create(
            &support::ctx("sagemaker_pipeline_execution.run", config.clone()),
            &run,
        )
        .await
        .expect_err("no CRDs");
    assert!(e.to_string().contains("eks_capability"), "{e}");
    // Nothing to delete is not an error.
    kind.delete(
        &support::ctx("sagemaker_pipeline.train", config.clone()),
        "sagemaker.services.k8s.aws/v1alpha1/Pipeline/default/abalone",
        &spec,
    )
    .await?;
    sandbox.shutdown().await;
    Ok(())
}

#[test]
fn a_definition_with_a_syntax_error_fails_at_prepare() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("pipeline.json");
    // Line 7 opens a string it never closes.
    let text = "{\n  \"Version\": \"2020-12-01\",\n  \"Steps\": [\n    {\n      \"Name\": \"Train\",\n      \"Type\": \"Training\",\n      \"Arguments\": {\"RoleArn\": \"arn:aws:iam::123456789012:role/r}\n    }\n  ]\n}\n";
    write(&file, text);
    let kind = pipelines();
    let spec = kind.schema().with_defaults(&json!({
        "cluster": {"kubeconfig": "/nonexistent/kubeconfig"},
        "name": "abalone",
        "pipeline_name": "abalone-train",
        "role_arn": ROLE,
        "definition_file": file.display().to_string(),
    }));
    assert!(kind.validate(&spec, &json!({})).is_empty());
    let e = kind
        .prepare(spec)
        .expect_err("the definition does not parse");
    assert_eq!(
        e.to_string(),
        format!(
            "definition_file: invalid pipeline definition: {}:7:32: unterminated string: the string that starts here does not end on its line",
            file.display()
        )
    );
}

#[tokio::test]
async fn cross_checks_against_moto() -> Result<(), ProviderError> {
    // moto has no ACK controller, so the pipelines and runs are made with the SDK and
    // only the SageMaker side of the kinds is exercised. moto marks a run Succeeded the
    // moment it starts and has no StopPipelineExecution, so running, failed and stopped
    // runs are exercised against the sandbox only. moto answers an unknown pipeline
    // with a 400 ValidationException where SageMaker answers ResourceNotFound.
    let moto = support::Moto::start();
    let config = support::config(&moto.url);
    let ctx = support::ctx("sagemaker_pipeline.train", config.clone());
    let definition = training_definition(3600);
    let created = sagemaker(
        &ctx,
        "CreatePipeline",
        json!({"PipelineName": "abalone-train", "RoleArn": ROLE, "PipelineDefinition": definition}),
    )
    .await?;
    let arn = created["PipelineArn"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let wanted: Value = serde_json::from_str(&definition).expect("JSON");

    assert_eq!(
        cross_check_pipeline(&ctx, "abalone-train", &arn, Some(&wanted)).await?,
        PipelineCheck::Matches
    );
    let other: Value = serde_json::from_str(&training_definition(7200)).expect("JSON");
    assert_eq!(
        cross_check_pipeline(&ctx, "abalone-train", &arn, Some(&other)).await?,
        PipelineCheck::OtherDefinition,
        "a definition SageMaker does not hold yet"
    );
    let wrong = "arn:aws:sagemaker:eu-west-1:210987654321:pipeline/abalone-train";
    let e = cross_check_pipeline(&ctx, "abalone-train", wrong, None)
        .await
        .expect_err("another ARN");
    let text = e.to_string();
    assert!(
        text.starts_with("sagemaker:DescribePipeline failed:"),
        "{text}"
    );
    assert!(text.contains(&arn) && text.contains(wrong), "{text}");
    assert!(text.contains("another account or region"), "{text}");
    let e = cross_check_pipeline(&ctx, "no-such-pipeline", &arn, None)
        .await
        .expect_err("unknown pipeline");
    assert!(
        e.to_string()
            .starts_with("sagemaker:DescribePipeline failed:"),
        "{e}"
    );

    let started = sagemaker(
        &ctx,
        "StartPipelineExecution",
        json!({"PipelineName": "abalone-train"}),
    )
    .await?;
    let run = started["PipelineExecutionArn"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let (status, _) = cross_check_execution(&ctx, "abalone-train", &run, "Succeeded").await?;
    assert_eq!(status, "Succeeded");
    // While the object has no finished status yet, any SageMaker status goes.
    cross_check_execution(&ctx, "abalone-train", &run, "Executing").await?;
    let e = cross_check_execution(&ctx, "abalone-train", &run, "Failed")
        .await
        .expect_err("the object and SageMaker disagree");
    let text = e.to_string();
    assert!(
        text.starts_with("sagemaker:DescribePipelineExecution failed:")
            && text.contains("\"Succeeded\"")
            && text.contains("\"Failed\""),
        "{text}"
    );

    // A run of another pipeline is not listed under this one.
    sagemaker(
        &ctx,
        "CreatePipeline",
        json!({"PipelineName": "abalone-other", "RoleArn": ROLE, "PipelineDefinition": definition}),
    )
    .await?;
    let other_run = sagemaker(
        &ctx,
        "StartPipelineExecution",
        json!({"PipelineName": "abalone-other"}),
    )
    .await?["PipelineExecutionArn"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let e = cross_check_execution(&ctx, "abalone-train", &other_run, "Succeeded")
        .await
        .expect_err("listed under another pipeline");
    let text = e.to_string();
    assert!(
        text.starts_with("sagemaker:ListPipelineExecutions failed:")
            && text.contains("does not list the run"),
        "{text}"
    );
    cross_check_execution(&ctx, "abalone-other", &other_run, "Succeeded").await?;
    Ok(())
}
