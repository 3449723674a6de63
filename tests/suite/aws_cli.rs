//! SageMaker on EKS end to end, as a user runs it: the real `terrain` binary against the
//! sandbox's EKS, S3 and SageMaker APIs and the emulated EKS cluster's Kubernetes API
//! with its ACK SageMaker controller. EKS cluster + GPU spot node group + versioned
//! KMS-encrypted bucket + definition object + ACK CRDs + Pipeline + PipelineExecution
//! (waiting for completion) → a clean re-plan → the same objects seen by the official
//! `aws` CLI → a definition edit planned as an update with its diff → a Kubernetes
//! upgrade that skips a minor version refused by the plan, one that does not applied in
//! place → destroy, leaving the sandbox empty.

use crate::common;

use std::process::Command;

use common::{expect_file, Sandbox};
use terrain_sandbox::{Options, Sandbox as Cloud, Timing};

/// Copies an official CRD of the ACK SageMaker controller (v1.9.1, kept in
/// `contracts/`) into the work directory, as a user keeps the chart's CRDs beside the
/// stack; returns its path relative to the stack.
fn crd(work: &Sandbox, name: &str) -> String {
    let text = terrain_contracts::ack_sagemaker_crd(name);
    let rel = format!("ack/{name}.yaml");
    work.write(&rel, &text);
    rel
}

struct Env {
    cloud: Cloud,
    vars: Vec<(String, String)>,
    args: Vec<String>,
}

impl Env {
    async fn new(work: &Sandbox) -> Self {
        let cloud = Cloud::start(Options {
            timing: Timing::scaled(0.01),
            ..Options::google_apis_on()
        })
        .await
        .expect("sandbox starts");
        // The fixture names its subnets and roles; the account has them.
        cloud
            .set_capacity(serde_json::from_str(common::HAND_NAMED_ACCOUNT).expect("JSON"))
            .expect("capacity set");
        let vars = [
            ("AWS_ENDPOINT_URL", cloud.url()),
            ("AWS_ACCESS_KEY_ID", "AKIDSANDBOX".to_string()),
            ("AWS_SECRET_ACCESS_KEY", "sandbox-secret".to_string()),
            ("AWS_EC2_METADATA_DISABLED", "true".to_string()),
            ("AWS_CONFIG_FILE", "/nonexistent/aws-config".to_string()),
            (
                "AWS_SHARED_CREDENTIALS_FILE",
                "/nonexistent/aws-credentials".to_string(),
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let args = vec![
            "--var".to_string(),
            format!("ack_pipeline_crd={}", crd(work, "pipelines")),
            "--var".to_string(),
            format!("ack_execution_crd={}", crd(work, "pipelineexecutions")),
        ];
        Self { cloud, vars, args }
    }

    fn run(&self, work: &Sandbox, args: &[&str]) -> common::Run {
        let envs: Vec<(&str, &str)> = self
            .vars
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let mut all: Vec<&str> = args.to_vec();
        all.extend(self.args.iter().map(String::as_str));
        work.run_env(&all, &envs)
    }

    /// Runs the official aws CLI against the sandbox; `None` when it is not installed.
    fn aws(&self, args: &[&str]) -> Option<serde_json::Value> {
        let mut cmd = Command::new("aws");
        cmd.args([
            "--endpoint-url",
            &self.cloud.url(),
            "--region",
            "us-east-1",
            "--output",
            "json",
        ])
        .args(args);
        for (k, v) in &self.vars {
            cmd.env(k, v);
        }
        let out = match cmd.output() {
            Ok(out) => out,
            Err(e) => {
                eprintln!("aws CLI not runnable ({e}); skipping the aws CLI check");
                return None;
            }
        };
        assert!(
            out.status.success(),
            "aws {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Some(serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null))
    }
}

/// Replaces what differs between runs but not between correct outputs: the sandbox's
/// ports and the ids SageMaker makes up.
fn stable(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find("127.0.0.1:") {
        out.push_str(&rest[..i + 10]);
        rest = &rest[i + 10..];
        let digits = rest.chars().take_while(char::is_ascii_digit).count();
        if digits > 0 {
            out.push_str("PORT");
        }
        rest = &rest[digits..];
    }
    out.push_str(rest);
    match out.find("/execution/") {
        Some(i) => {
            let start = i + "/execution/".len();
            let len = out[start..]
                .chars()
                .take_while(char::is_ascii_alphanumeric)
                .count();
            format!("{}<id>{}", &out[..start], &out[start + len..])
        }
        None => out,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eks_sagemaker_applies_runs_the_pipeline_and_destroys() {
    let work = Sandbox::with_fixture("eks-sagemaker");
    let env = Env::new(&work).await;

    let plan = env.run(&work, &["plan", "--no-color", "--detailed-exitcode"]);
    plan.expect_code(2);
    expect_file("aws/plan-create.txt", &stable(&plan.stdout));

    let apply = env.run(&work, &["apply", "--no-color", "--auto-approve"]);
    apply.success();
    // Progress lines interleave as resources apply in parallel: check what each ended with.
    for address in [
        "eks_cluster.ml",
        "eks_node_group.gpu",
        "iam_role.ack",
        "eks_capability.ack",
        "s3_bucket.pipelines",
        "s3_object.definition",
        "kubernetes_manifest.ack_pipeline_crd",
        "kubernetes_manifest.ack_execution_crd",
        "sagemaker_pipeline.xgboost",
        "sagemaker_pipeline_execution.run",
    ] {
        assert!(
            apply
                .stdout
                .contains(&format!("{address}: creation complete after")),
            "{address} completes:\n{}",
            apply.stdout
        );
    }
    // Waits poll often; a poll with nothing new to say prints nothing (the apply used to
    // print "creating EKS cluster ml-pipelines (0s elapsed)" once per poll).
    let mut seen = std::collections::BTreeSet::new();
    let progress = apply
        .stdout
        .lines()
        .skip_while(|l| !l.starts_with("Plan: "))
        .filter(|l| !l.starts_with(' ') && l.contains(": "));
    for line in progress {
        assert!(
            seen.insert(line),
            "{line:?} is printed twice:\n{}",
            apply.stdout
        );
    }
    assert!(
        apply
            .stdout
            .contains("Apply complete! Resources: 10 added, 0 changed, 0 replaced, 0 destroyed."),
        "{}",
        apply.stdout
    );
    env.run(&work, &["plan", "--detailed-exitcode"])
        .expect_code(0);

    let outputs = env.run(&work, &["output", "--json"]);
    outputs.success();
    let outputs: serde_json::Value =
        serde_json::from_str(&outputs.stdout).expect("outputs are JSON");
    assert_eq!(
        outputs["execution_status"]["value"], "Succeeded",
        "{outputs}"
    );
    let arn = outputs["pipeline_arn"]["value"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert_eq!(
        arn,
        "arn:aws:sagemaker:us-east-1:123456789012:pipeline/xgboost-training"
    );

    // The official CLI sees the same pipeline, bucket settings and definition object.
    if let Some(pipeline) = env.aws(&[
        "sagemaker",
        "describe-pipeline",
        "--pipeline-name",
        "xgboost-training",
    ]) {
        assert_eq!(pipeline["PipelineArn"], arn.as_str());
        assert_eq!(
            pipeline["ParallelismConfiguration"]["MaxParallelExecutionSteps"],
            2
        );
        let executions = env
            .aws(&[
                "sagemaker",
                "list-pipeline-executions",
                "--pipeline-name",
                "xgboost-training",
            ])
            .unwrap_or_default();
        let summaries = executions["PipelineExecutionSummaries"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert_eq!(summaries.len(), 1, "{executions}");
        assert_eq!(summaries[0]["PipelineExecutionStatus"], "Succeeded");
        let versioning = env
            .aws(&[
                "s3api",
                "get-bucket-versioning",
                "--bucket",
                "ml-pipelines-123456789012",
            ])
            .unwrap_or_default();
        assert_eq!(versioning["Status"], "Enabled");
        let encryption = env
            .aws(&[
                "s3api",
                "get-bucket-encryption",
                "--bucket",
                "ml-pipelines-123456789012",
            ])
            .unwrap_or_default();
        assert_eq!(
            encryption["ServerSideEncryptionConfiguration"]["Rules"][0]
                ["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"],
            "aws:kms"
        );
        let head = env
            .aws(&[
                "s3api",
                "head-object",
                "--bucket",
                "ml-pipelines-123456789012",
                "--key",
                "pipelines/xgboost/definition.json",
            ])
            .unwrap_or_default();
        assert_eq!(head["ContentType"], "application/json");
        let nodegroup = env
            .aws(&[
                "eks",
                "describe-nodegroup",
                "--cluster-name",
                "ml-pipelines",
                "--nodegroup-name",
                "gpu-spot",
            ])
            .unwrap_or_default();
        assert_eq!(nodegroup["nodegroup"]["capacityType"], "SPOT");
        assert_eq!(nodegroup["nodegroup"]["amiType"], "AL2023_x86_64_NVIDIA");
    }

    // kubectl sees the ACK objects on the cluster, through the kubeconfig the sandbox
    // writes (with an EKS-shaped token).
    let kubeconfigs = env
        .cloud
        .kubeconfig(&work.join("kube"))
        .expect("kubeconfig written");
    let (_, kubeconfig) = kubeconfigs
        .iter()
        .find(|(name, _)| name == "ml-pipelines")
        .expect("a kubeconfig for ml-pipelines");
    match Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args([
            "get",
            "pipelineexecutions.sagemaker.services.k8s.aws",
            "xgboost-run-1",
            "-o",
            "jsonpath={.status.pipelineExecutionStatus}",
        ])
        .output()
    {
        Ok(out) => {
            assert!(
                out.status.success(),
                "kubectl: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "Succeeded");
        }
        Err(e) => eprintln!("kubectl not runnable ({e}); skipping the kubectl check"),
    }

    // Scaling the node group is an in-place update.
    work.edit(
        "stack.toml",
        "scaling = { min = 0, max = 4, desired = 1 }",
        "scaling = { min = 0, max = 6, desired = 1 }",
    );
    let scale = env.run(&work, &["plan", "--no-color", "--detailed-exitcode"]);
    scale.expect_code(2);
    expect_file("aws/plan-scaling.txt", &stable(&scale.stdout));

    // A definition edit re-uploads the object and updates the pipeline, with its diff.
    work.edit(
        "pipeline.json",
        "\"num_round\": \"50\"",
        "\"num_round\": \"80\"",
    );
    let edit = env.run(&work, &["plan", "--no-color", "--detailed-exitcode"]);
    edit.expect_code(2);
    expect_file("aws/plan-definition.txt", &stable(&edit.stdout));
    env.run(&work, &["apply", "--auto-approve"]).success();
    env.run(&work, &["plan", "--detailed-exitcode"])
        .expect_code(0);
    if let Some(pipeline) = env.aws(&[
        "sagemaker",
        "describe-pipeline",
        "--pipeline-name",
        "xgboost-training",
    ]) {
        let definition = pipeline["PipelineDefinition"].as_str().unwrap_or_default();
        assert!(definition.contains("\"80\""), "{definition}");
    }

    // An upgrade that skips a minor version is refused by the plan, naming the steps;
    // one minor version is an in-place upgrade, which the sandbox carries out.
    work.set_value("stack.toml", "version", "\"1.31\"", "\"1.33\"");
    let skip = env.run(&work, &["plan", "--no-color"]);
    skip.expect_code(1);
    assert!(
        skip.stderr.contains(
            "eks_cluster.ml: cannot be updated in place: version: EKS upgrades one minor version at a time: 1.31 → 1.33 skips 1.32; set version = \"1.32\", apply, and repeat for \"1.33\""
        ),
        "{}",
        skip.stderr
    );
    work.set_value("stack.toml", "version", "\"1.33\"", "\"1.32\"");
    let step = env.run(&work, &["plan", "--no-color", "--detailed-exitcode"]);
    step.expect_code(2);
    for line in [
        "~ eks_cluster.ml will be updated in place",
        "~ version = \"1.31\" -> \"1.32\"",
        "control plane upgrade 1.31 → 1.32 in place",
        "Plan: 0 to add, 1 to change, 0 to replace, 0 to destroy.",
    ] {
        assert!(step.stdout.contains(line), "{line}:\n{}", step.stdout);
    }
    env.run(&work, &["apply", "--auto-approve"]).success();
    env.run(&work, &["plan", "--detailed-exitcode"])
        .expect_code(0);
    if let Some(cluster) = env.aws(&["eks", "describe-cluster", "--name", "ml-pipelines"]) {
        assert_eq!(cluster["cluster"]["version"], "1.32");
    }

    let destroy = env.run(&work, &["destroy", "--auto-approve"]);
    destroy.success();
    let state: serde_json::Value = reqwest::get(format!("{}/_sandbox/state", env.cloud.url()))
        .await
        .expect("state")
        .json()
        .await
        .expect("json");
    assert!(
        state["kubernetes"]["clusters"]
            .as_object()
            .is_none_or(|c| c.is_empty()),
        "no emulated cluster is left: {}",
        state["kubernetes"]
    );
    let aws = &state["aws"];
    for (what, value) in [
        ("EKS clusters", &aws["eks"]["clusters"]),
        ("S3 buckets", &aws["s3"]["buckets"]),
        ("SageMaker pipelines", &aws["sagemaker"]["pipelines"]),
    ] {
        let empty = match value {
            serde_json::Value::Null => true,
            serde_json::Value::Array(a) => a.is_empty(),
            serde_json::Value::Object(o) => o.is_empty(),
            _ => false,
        };
        assert!(empty, "no {what} left: {value}");
    }
}
