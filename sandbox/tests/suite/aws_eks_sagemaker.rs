//! EKS, SageMaker and the ACK SageMaker controller in the sandbox, driven the way a user
//! drives the real services: with the official `aws` CLI and `kubectl`. Cluster and node
//! group lifecycles with EKS's errors, the Kubernetes API an EKS cluster gets (nodes
//! labelled like EKS nodes, EKS-style authentication), pipelines and executions that
//! succeed, fail on purpose and stop, and ACK objects reconciled against SageMaker.
//! Answers are checked against the botocore models in `contracts/`. Skipped
//! (with a message) when the `aws` CLI or kubectl is not installed.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common;
use common::{assert_botocore, reference};
use serde_json::{json, Value};
use terrain_sandbox::{Options, Sandbox, Timing};

const REGION: &str = "us-east-1";
const KUBECTL: &str = "/usr/bin/kubectl";
const ROLE: &str = "arn:aws:iam::123456789012:role/eks-cluster";
const NODE_ROLE: &str = "arn:aws:iam::123456789012:role/eks-node";
const SAGEMAKER_ROLE: &str = "arn:aws:iam::123456789012:role/SageMakerRole";

/// The subnets and roles the tests' clusters and node groups name, made subnets of each
/// region's default VPC and roles in IAM the way an account's are configured in the
/// sandbox.
fn configure_account(sandbox: &Sandbox) {
    sandbox
        .set_capacity(json!({"aws": {
            "subnets": {
                "subnet-a": "us-east-1a",
                "subnet-b": "us-east-1b",
                "subnet-x": "eu-west-1a",
                "subnet-y": "eu-west-1b",
            },
            "roles": {"eks-cluster": "eks.amazonaws.com", "eks-node": "ec2.amazonaws.com"},
        }}))
        .expect("subnets and roles configured");
}

/// A botocore service model (stored gzipped).
fn model(service: &str, version: &str) -> Value {
    terrain_contracts::botocore(service, version)
}

pub(crate) struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// The official aws CLI pointed at the sandbox, with no trace of the developer's own
/// configuration or credentials (the other AWS suites drive it through this too).
pub(crate) struct Aws {
    url: String,
    home: tempfile::TempDir,
    /// The exit code for an error the service answered: 255 for CLI v1 (which uses it
    /// for every failure), 254 for v2.
    service_error: i32,
}

impl Aws {
    /// `None` (and a message) when the CLI is not installed.
    pub(crate) async fn new(sandbox: &Sandbox) -> Option<Aws> {
        let version = tokio::process::Command::new("aws")
            .arg("--version")
            .output()
            .await
            .ok()
            .filter(|o| o.status.success())
            .map(|o| {
                // v1 prints its version on stderr, v2 on stdout.
                format!(
                    "{}{}",
                    String::from_utf8_lossy(&o.stdout),
                    String::from_utf8_lossy(&o.stderr)
                )
            });
        let Some(version) = version else {
            eprintln!("skipping: the aws CLI is not installed");
            return None;
        };
        Some(Aws {
            url: sandbox.url(),
            home: tempfile::tempdir().expect("temp dir"),
            service_error: if version.starts_with("aws-cli/1.") {
                255
            } else {
                254
            },
        })
    }

    pub(crate) async fn run_in(&self, region: &str, args: &[&str]) -> Out {
        let mut cmd = tokio::process::Command::new("aws");
        cmd.arg("--endpoint-url")
            .arg(&self.url)
            .arg("--region")
            .arg(region)
            .arg("--output")
            .arg("json")
            .args(args)
            .env("AWS_ACCESS_KEY_ID", "x")
            .env("AWS_SECRET_ACCESS_KEY", "y")
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .env("AWS_CONFIG_FILE", "/nonexistent")
            .env("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
            .env("HOME", self.home.path())
            .env_remove("AWS_PROFILE")
            .env_remove("AWS_SESSION_TOKEN")
            .env_remove("AWS_DEFAULT_REGION");
        let out = tokio::time::timeout(Duration::from_secs(120), cmd.output())
            .await
            .expect("the aws CLI finishes within two minutes")
            .expect("the aws CLI runs");
        Out {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    pub(crate) async fn run(&self, args: &[&str]) -> Out {
        self.run_in(REGION, args).await
    }

    /// Runs a command that must succeed and returns its JSON output.
    pub(crate) async fn json(&self, args: &[&str]) -> Value {
        self.json_in(REGION, args).await
    }

    pub(crate) async fn json_in(&self, region: &str, args: &[&str]) -> Value {
        let out = self.run_in(region, args).await;
        assert_eq!(
            out.code,
            0,
            "aws {} failed:\n{}{}",
            args.join(" "),
            out.stdout,
            out.stderr
        );
        if out.stdout.trim().is_empty() {
            return Value::Null;
        }
        serde_json::from_str(&out.stdout).expect("the aws CLI prints JSON")
    }

    /// Runs a command the service must refuse with `code`; returns the CLI's message.
    pub(crate) async fn fails(&self, args: &[&str], code: &str) -> String {
        let out = self.run(args).await;
        assert_eq!(
            out.code,
            self.service_error,
            "aws {} should fail with {code}:\n{}{}",
            args.join(" "),
            out.stdout,
            out.stderr
        );
        assert!(
            out.stderr.contains(&format!("An error occurred ({code})")),
            "aws {}: {}",
            args.join(" "),
            out.stderr
        );
        out.stderr
    }
}

struct Kubectl {
    kubeconfig: PathBuf,
    home: tempfile::TempDir,
}

impl Kubectl {
    fn installed() -> bool {
        let ok = Path::new(KUBECTL).is_file();
        if !ok {
            eprintln!("skipping: {KUBECTL} is not installed");
        }
        ok
    }

    /// kubectl for the cluster named `name`, with the kubeconfig the sandbox writes.
    fn for_cluster(sandbox: &Sandbox, name: &str) -> Kubectl {
        let home = tempfile::tempdir().expect("temp dir");
        let written = sandbox.kubeconfig(home.path()).expect("kubeconfig");
        let kubeconfig = written
            .into_iter()
            .find(|(n, _)| n == name)
            .map(|(_, p)| p)
            .expect("a kubeconfig for the cluster");
        Kubectl { kubeconfig, home }
    }

    async fn run(&self, args: &[&str]) -> Out {
        let mut cmd = tokio::process::Command::new(KUBECTL);
        cmd.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(self.home.path().join("cache"))
            .args(args)
            .env_remove("KUBECONFIG")
            .env("HOME", self.home.path());
        let out = tokio::time::timeout(Duration::from_secs(120), cmd.output())
            .await
            .expect("kubectl finishes within two minutes")
            .expect("kubectl runs");
        Out {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    async fn ok(&self, args: &[&str]) -> Out {
        let out = self.run(args).await;
        assert_eq!(
            out.code,
            0,
            "kubectl {} failed:\n{}{}",
            args.join(" "),
            out.stdout,
            out.stderr
        );
        out
    }

    async fn json(&self, args: &[&str]) -> Value {
        let mut args = args.to_vec();
        args.extend(["-o", "json"]);
        serde_json::from_str(&self.ok(&args).await.stdout).expect("kubectl prints JSON")
    }

    /// Applies `objects`, one JSON manifest each.
    async fn apply(&self, objects: &[Value]) {
        for (i, object) in objects.iter().enumerate() {
            let path = self.home.path().join(format!("manifest-{i}.json"));
            std::fs::write(&path, object.to_string()).expect("manifest written");
            self.ok(&["apply", "-f", &path.to_string_lossy()]).await;
        }
    }
}

async fn pause() {
    tokio::time::sleep(Duration::from_millis(100)).await;
}

/// Describes the cluster until its status is `status`.
async fn cluster_until(aws: &Aws, name: &str, status: &str) -> Value {
    for _ in 0..100 {
        let c = aws.json(&["eks", "describe-cluster", "--name", name]).await;
        if c["cluster"]["status"] == status {
            return c;
        }
        pause().await;
    }
    panic!("cluster {name} never became {status}");
}

fn pipeline_definition(steps: usize) -> String {
    let steps: Vec<Value> = (0..steps)
        .map(|i| {
            json!({"Name": format!("Train{i}"), "Type": "Training", "Arguments": {
                "AlgorithmSpecification": {"TrainingImage": "123456789012.dkr.ecr.us-east-1.amazonaws.com/train:1", "TrainingInputMode": "File"},
                "ResourceConfig": {"InstanceCount": 1, "InstanceType": "ml.m5.xlarge", "VolumeSizeInGB": 30},
            }})
        })
        .collect();
    json!({
        "Version": "2020-12-01",
        "Parameters": [{"Name": "Epochs", "Type": "Integer", "DefaultValue": 3}],
        "Steps": steps,
    })
    .to_string()
}

#[tokio::test]
async fn eks_capabilities_through_the_cli() {
    let sandbox = Sandbox::start(Options {
        timing: Timing::instant(),
        ..Options::google_apis_on()
    })
    .await
    .expect("sandbox starts");
    sandbox
        .set_capacity(json!({"aws": {
            "subnets": {"subnet-a": "us-east-1a", "subnet-b": "us-east-1b"},
            "roles": {"eks-cluster": "eks.amazonaws.com", "ack": "capabilities.eks.amazonaws.com"},
        }}))
        .expect("account configured");
    let Some(aws) = Aws::new(&sandbox).await else {
        return;
    };
    let eks = model("eks", "2017-11-01");
    for (name, mode) in [("ml", "API"), ("old", "CONFIG_MAP")] {
        aws.json(&[
            "eks",
            "create-cluster",
            "--name",
            name,
            "--role-arn",
            ROLE,
            "--resources-vpc-config",
            "subnetIds=subnet-a,subnet-b",
            "--access-config",
            &format!("authenticationMode={mode}"),
        ])
        .await;
        aws.run(&["eks", "wait", "cluster-active", "--name", name])
            .await;
    }
    let ack = "arn:aws:iam::123456789012:role/ack";
    let create = |cluster: &'static str, role: &'static str| {
        vec![
            "eks",
            "create-capability",
            "--cluster-name",
            cluster,
            "--capability-name",
            "ack",
            "--type",
            "ACK",
            "--role-arn",
            role,
            "--delete-propagation-policy",
            "RETAIN",
        ]
    };
    let made = aws.json(&create("ml", ack)).await;
    assert_botocore(&eks, "CreateCapabilityResponse", &made);
    let described = aws
        .json(&[
            "eks",
            "describe-capability",
            "--cluster-name",
            "ml",
            "--capability-name",
            "ack",
        ])
        .await;
    assert_botocore(&eks, "DescribeCapabilityResponse", &described);
    assert_eq!(described["capability"]["status"], "ACTIVE");
    let listed = aws
        .json(&["eks", "list-capabilities", "--cluster-name", "ml"])
        .await;
    assert_botocore(&eks, "ListCapabilitiesResponse", &listed);
    assert_eq!(listed["capabilities"][0]["type"], "ACK");
    // A cluster without access entries, and a role EKS's capabilities cannot assume.
    let refused = aws
        .fails(&create("old", ack), "InvalidParameterException")
        .await;
    assert!(refused.contains("authentication mode"), "{refused}");
    let refused = aws
        .fails(&create("ml", ROLE), "ResourceInUseException")
        .await;
    assert!(refused.contains("ack"), "{refused}");
    aws.json(&[
        "eks",
        "delete-capability",
        "--cluster-name",
        "ml",
        "--capability-name",
        "ack",
    ])
    .await;
    let listed = aws
        .json(&["eks", "list-capabilities", "--cluster-name", "ml"])
        .await;
    assert_eq!(listed["capabilities"], json!([]), "{listed}");
}

#[tokio::test]
async fn eks_clusters_and_node_groups_through_the_cli() {
    let sandbox = Sandbox::start(Options {
        timing: Timing::instant(),
        ..Options::google_apis_on()
    })
    .await
    .expect("sandbox starts");
    configure_account(&sandbox);
    let Some(aws) = Aws::new(&sandbox).await else {
        return;
    };
    let eks = model("eks", "2017-11-01");

    let made = aws
        .json(&[
            "eks",
            "create-cluster",
            "--name",
            "ml",
            "--role-arn",
            ROLE,
            "--resources-vpc-config",
            "subnetIds=subnet-a,subnet-b",
            "--tags",
            "team=ml",
        ])
        .await;
    assert_botocore(&eks, "CreateClusterResponse", &made);
    assert_eq!(made["cluster"]["status"], "CREATING");
    assert_eq!(
        made["cluster"]["arn"],
        "arn:aws:eks:us-east-1:123456789012:cluster/ml"
    );
    let dup = aws
        .fails(
            &[
                "eks",
                "create-cluster",
                "--name",
                "ml",
                "--role-arn",
                ROLE,
                "--resources-vpc-config",
                "subnetIds=subnet-a,subnet-b",
            ],
            "ResourceInUseException",
        )
        .await;
    assert!(
        dup.contains("Cluster already exists with name: ml"),
        "{dup}"
    );
    let bad = aws
        .fails(
            &[
                "eks",
                "create-cluster",
                "--name",
                "old",
                "--role-arn",
                ROLE,
                "--kubernetes-version",
                "1.12",
                "--resources-vpc-config",
                "subnetIds=subnet-a,subnet-b",
            ],
            "InvalidParameterException",
        )
        .await;
    assert!(bad.contains("unsupported Kubernetes version"), "{bad}");
    // The same name in another region is another cluster.
    aws.json_in(
        "eu-west-1",
        &[
            "eks",
            "create-cluster",
            "--name",
            "ml",
            "--role-arn",
            ROLE,
            "--resources-vpc-config",
            "subnetIds=subnet-x,subnet-y",
        ],
    )
    .await;
    let listed = aws.json(&["eks", "list-clusters"]).await;
    assert_eq!(listed["clusters"], json!(["ml"]));

    let described = cluster_until(&aws, "ml", "ACTIVE").await;
    assert_botocore(&eks, "DescribeClusterResponse", &described);
    let cluster = &described["cluster"];
    assert!(
        cluster["endpoint"]
            .as_str()
            .is_some_and(|e| e.starts_with("https://127.0.0.1:")),
        "{cluster}"
    );
    assert!(cluster["certificateAuthority"]["data"].is_string());
    assert_eq!(cluster["version"], "1.31");
    assert_eq!(cluster["tags"], json!({"team": "ml"}));
    let skip = aws
        .fails(
            &[
                "eks",
                "update-cluster-version",
                "--name",
                "ml",
                "--kubernetes-version",
                "1.33",
            ],
            "InvalidParameterException",
        )
        .await;
    assert!(
        skip.contains("Unsupported Kubernetes minor version update from 1.31 to 1.33"),
        "{skip}"
    );

    let ng = aws
        .json(&[
            "eks",
            "create-nodegroup",
            "--cluster-name",
            "ml",
            "--nodegroup-name",
            "gpu",
            "--node-role",
            NODE_ROLE,
            "--subnets",
            "subnet-a",
            "--instance-types",
            "g5.xlarge",
            "--scaling-config",
            "minSize=1,maxSize=3,desiredSize=2",
            "--labels",
            "team=ml",
            "--taints",
            "key=gpu,value=true,effect=NO_SCHEDULE",
        ])
        .await;
    assert_botocore(&eks, "CreateNodegroupResponse", &ng);
    assert_eq!(ng["nodegroup"]["status"], "CREATING");
    let described = aws
        .json(&[
            "eks",
            "describe-nodegroup",
            "--cluster-name",
            "ml",
            "--nodegroup-name",
            "gpu",
        ])
        .await;
    assert_botocore(&eks, "DescribeNodegroupResponse", &described);
    assert_eq!(described["nodegroup"]["status"], "ACTIVE");

    let update = aws
        .json(&[
            "eks",
            "update-nodegroup-config",
            "--cluster-name",
            "ml",
            "--nodegroup-name",
            "gpu",
            "--scaling-config",
            "desiredSize=3",
            "--labels",
            "addOrUpdateLabels={tier=a}",
        ])
        .await;
    assert_botocore(&eks, "UpdateNodegroupConfigResponse", &update);
    let id = update["update"]["id"]
        .as_str()
        .expect("an update id")
        .to_string();
    let done = aws
        .json(&[
            "eks",
            "describe-update",
            "--name",
            "ml",
            "--update-id",
            &id,
            "--nodegroup-name",
            "gpu",
        ])
        .await;
    assert_botocore(&eks, "DescribeUpdateResponse", &done);
    assert_eq!(done["update"]["status"], "Successful");
    let described = aws
        .json(&[
            "eks",
            "describe-nodegroup",
            "--cluster-name",
            "ml",
            "--nodegroup-name",
            "gpu",
        ])
        .await;
    assert_eq!(described["nodegroup"]["scalingConfig"]["desiredSize"], 3);
    assert_eq!(
        described["nodegroup"]["labels"],
        json!({"team": "ml", "tier": "a"})
    );

    if Kubectl::installed() {
        let kubectl = Kubectl::for_cluster(&sandbox, "ml");
        let mut nodes = Value::Null;
        for _ in 0..50 {
            nodes = kubectl
                .json(&["get", "nodes", "-l", "eks.amazonaws.com/nodegroup=gpu"])
                .await;
            if nodes["items"].as_array().map(Vec::len) == Some(3) {
                break;
            }
            pause().await;
        }
        let items = nodes["items"].as_array().expect("a node list");
        assert_eq!(items.len(), 3, "{nodes:#}");
        for node in items {
            let labels = &node["metadata"]["labels"];
            for (k, v) in [
                ("eks.amazonaws.com/nodegroup", "gpu"),
                ("eks.amazonaws.com/capacityType", "ON_DEMAND"),
                ("node.kubernetes.io/instance-type", "g5.xlarge"),
                ("team", "ml"),
                ("tier", "a"),
            ] {
                assert_eq!(labels[k], v, "{k} in {labels}");
            }
            assert!(labels["eks.amazonaws.com/nodegroup-image"]
                .as_str()
                .is_some_and(|i| i.starts_with("ami-")));
            assert_eq!(node["status"]["capacity"]["nvidia.com/gpu"], "1");
            assert_eq!(
                node["spec"]["taints"],
                json!([{"key": "gpu", "value": "true", "effect": "NoSchedule"}])
            );
        }
        // EKS takes only `aws eks get-token` tokens, not a Google access token.
        let refused = kubectl
            .run(&["--token=ya29.google-token", "get", "nodes"])
            .await;
        assert_ne!(refused.code, 0);
        assert!(
            refused.stderr.contains("Unauthorized"),
            "{}",
            refused.stderr
        );
    }

    let attached = aws
        .fails(
            &["eks", "delete-cluster", "--name", "ml"],
            "ResourceInUseException",
        )
        .await;
    assert!(
        attached.contains("Cluster has nodegroups attached"),
        "{attached}"
    );
    let deleting = aws
        .json(&[
            "eks",
            "delete-nodegroup",
            "--cluster-name",
            "ml",
            "--nodegroup-name",
            "gpu",
        ])
        .await;
    assert_eq!(deleting["nodegroup"]["status"], "DELETING");
    let mut left = Value::Null;
    for _ in 0..50 {
        left = aws
            .json(&["eks", "list-nodegroups", "--cluster-name", "ml"])
            .await;
        if left["nodegroups"] == json!([]) {
            break;
        }
        pause().await;
    }
    assert_eq!(left["nodegroups"], json!([]));
    let deleting = aws.json(&["eks", "delete-cluster", "--name", "ml"]).await;
    assert_botocore(&eks, "DeleteClusterResponse", &deleting);
    assert_eq!(deleting["cluster"]["status"], "DELETING");
    let mut gone = None;
    for _ in 0..50 {
        let out = aws.run(&["eks", "describe-cluster", "--name", "ml"]).await;
        if out.code != 0 {
            gone = Some(out);
            break;
        }
        pause().await;
    }
    let gone = gone.expect("the cluster goes");
    assert_eq!(gone.code, aws.service_error, "{}", gone.stderr);
    assert!(
        gone.stderr.contains(
            "An error occurred (ResourceNotFoundException) when calling the DescribeCluster operation: No cluster found for name: ml."
        ),
        "{}",
        gone.stderr
    );
    sandbox.shutdown().await;
}

/// A timestamp as the CLI prints it: epoch seconds, or ISO 8601 when configured so.
fn secs(v: &Value) -> f64 {
    match v {
        Value::Number(n) => n.as_f64().expect("a number"),
        Value::String(s) => {
            let t = chrono::DateTime::parse_from_rfc3339(s).expect("an ISO 8601 timestamp");
            t.timestamp_millis() as f64 / 1000.0
        }
        other => panic!("not a timestamp: {other}"),
    }
}

/// Describes the execution until `done` says so.
async fn execution_until(aws: &Aws, arn: &str, done: impl Fn(&str) -> bool) -> Value {
    for _ in 0..300 {
        let e = aws
            .json(&[
                "sagemaker",
                "describe-pipeline-execution",
                "--pipeline-execution-arn",
                arn,
            ])
            .await;
        if done(e["PipelineExecutionStatus"].as_str().unwrap_or_default()) {
            return e;
        }
        pause().await;
    }
    panic!("execution {arn} never got there");
}

#[tokio::test]
async fn sagemaker_pipelines_and_executions_through_the_cli() {
    let sandbox = Sandbox::start(Options {
        timing: Timing::scaled(0.5),
        ..Options::google_apis_on()
    })
    .await
    .expect("sandbox starts");
    configure_account(&sandbox);
    let Some(aws) = Aws::new(&sandbox).await else {
        return;
    };
    let sm = model("sagemaker", "2017-07-24");
    let definition = pipeline_definition(2);

    let created = aws
        .json(&[
            "sagemaker",
            "create-pipeline",
            "--pipeline-name",
            "train",
            "--role-arn",
            SAGEMAKER_ROLE,
            "--pipeline-definition",
            &definition,
        ])
        .await;
    assert_eq!(
        created["PipelineArn"],
        "arn:aws:sagemaker:us-east-1:123456789012:pipeline/train"
    );
    let described = aws
        .json(&["sagemaker", "describe-pipeline", "--pipeline-name", "train"])
        .await;
    assert_botocore(&sm, "DescribePipelineResponse", &described);
    assert_eq!(described["PipelineStatus"], "Active");
    assert_eq!(described["PipelineDefinition"], definition);

    for (definition, needle) in [
        (
            r#"{"Version": "2020-12-01", "Steps": []}"#.to_string(),
            "Steps must not be empty",
        ),
        (
            "{not json".to_string(),
            "Unable to parse pipeline definition",
        ),
        (
            r#"{"Version": "2020-12-01", "Steps": [{"Name": "A", "Type": "Baking"}]}"#.to_string(),
            "Baking",
        ),
    ] {
        let refused = aws
            .fails(
                &[
                    "sagemaker",
                    "create-pipeline",
                    "--pipeline-name",
                    "broken",
                    "--role-arn",
                    SAGEMAKER_ROLE,
                    "--pipeline-definition",
                    &definition,
                ],
                "ValidationException",
            )
            .await;
        assert!(refused.contains(needle), "{refused}");
    }
    let taken = aws
        .fails(
            &[
                "sagemaker",
                "create-pipeline",
                "--pipeline-name",
                "train",
                "--role-arn",
                SAGEMAKER_ROLE,
                "--pipeline-definition",
                &definition,
            ],
            "ValidationException",
        )
        .await;
    assert!(
        taken.contains("Pipeline with name (train) already exists."),
        "{taken}"
    );
    let missing = aws
        .fails(
            &["sagemaker", "describe-pipeline", "--pipeline-name", "nope"],
            "ResourceNotFound",
        )
        .await;
    assert!(
        missing.contains(
            "Pipeline 'arn:aws:sagemaker:us-east-1:123456789012:pipeline/nope' does not exist."
        ),
        "{missing}"
    );

    let started = aws
        .json(&[
            "sagemaker",
            "start-pipeline-execution",
            "--pipeline-name",
            "train",
            "--pipeline-parameters",
            "Name=Epochs,Value=5",
        ])
        .await;
    let ok_arn = started["PipelineExecutionArn"]
        .as_str()
        .expect("an execution ARN")
        .to_string();
    assert!(
        ok_arn.starts_with("arn:aws:sagemaker:us-east-1:123456789012:pipeline/train/execution/"),
        "{ok_arn}"
    );
    let succeeded = execution_until(&aws, &ok_arn, |s| s != "Executing").await;
    assert_botocore(&sm, "DescribePipelineExecutionResponse", &succeeded);
    assert_eq!(succeeded["PipelineExecutionStatus"], "Succeeded");
    // Two steps of 2 s each at half speed, on the sandbox clock.
    let ran = secs(&succeeded["LastModifiedTime"]) - secs(&succeeded["CreationTime"]);
    assert!((ran - 2.0).abs() < 0.01, "ran {ran} s");
    let steps = aws
        .json(&[
            "sagemaker",
            "list-pipeline-execution-steps",
            "--pipeline-execution-arn",
            &ok_arn,
        ])
        .await;
    assert_botocore(&sm, "ListPipelineExecutionStepsResponse", &steps);
    let statuses: Vec<(&str, &str)> = steps["PipelineExecutionSteps"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            (
                s["StepName"].as_str().unwrap_or_default(),
                s["StepStatus"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        statuses,
        [("Train1", "Succeeded"), ("Train0", "Succeeded")],
        "newest first"
    );
    // Each Training step names the training job it ran, as SageMaker does.
    let execution_id = ok_arn.rsplit('/').next().expect("an execution id");
    for step in steps["PipelineExecutionSteps"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let job = step["Metadata"]["TrainingJob"]["Arn"]
            .as_str()
            .unwrap_or_default();
        let name = step["StepName"]
            .as_str()
            .unwrap_or_default()
            .to_ascii_lowercase();
        assert_eq!(
            job,
            format!("arn:aws:sagemaker:us-east-1:123456789012:training-job/pipelines-{execution_id}-{name}"),
            "{step}"
        );
    }
    let parameters = aws
        .json(&[
            "sagemaker",
            "list-pipeline-parameters-for-execution",
            "--pipeline-execution-arn",
            &ok_arn,
        ])
        .await;
    assert_botocore(
        &sm,
        "ListPipelineParametersForExecutionResponse",
        &parameters,
    );
    assert_eq!(
        parameters["PipelineParameters"],
        serde_json::json!([{"Name": "Epochs", "Value": "5"}])
    );

    sandbox
        .faults()
        .fail_next_operation("sagemaker", "AlgorithmError: loss became NaN");
    let failing = aws
        .json(&[
            "sagemaker",
            "start-pipeline-execution",
            "--pipeline-name",
            "train",
        ])
        .await["PipelineExecutionArn"]
        .as_str()
        .expect("an execution ARN")
        .to_string();
    let failed = execution_until(&aws, &failing, |s| s != "Executing").await;
    assert_eq!(failed["PipelineExecutionStatus"], "Failed");
    assert_eq!(failed["FailureReason"], "AlgorithmError: loss became NaN");

    aws.json(&[
        "sagemaker",
        "create-pipeline",
        "--pipeline-name",
        "long",
        "--role-arn",
        SAGEMAKER_ROLE,
        "--pipeline-definition",
        &pipeline_definition(60),
    ])
    .await;
    let long = aws
        .json(&[
            "sagemaker",
            "start-pipeline-execution",
            "--pipeline-name",
            "long",
        ])
        .await["PipelineExecutionArn"]
        .as_str()
        .expect("an execution ARN")
        .to_string();
    let stopping = aws
        .json(&[
            "sagemaker",
            "stop-pipeline-execution",
            "--pipeline-execution-arn",
            &long,
        ])
        .await;
    assert_eq!(stopping["PipelineExecutionArn"], long);
    let stopped = execution_until(&aws, &long, |s| s != "Stopping").await;
    assert_eq!(stopped["PipelineExecutionStatus"], "Stopped");
    let conflict = aws
        .fails(
            &[
                "sagemaker",
                "stop-pipeline-execution",
                "--pipeline-execution-arn",
                &long,
            ],
            "ConflictException",
        )
        .await;
    assert!(conflict.contains("Stopped"), "{conflict}");

    let listed = aws
        .json(&[
            "sagemaker",
            "list-pipeline-executions",
            "--pipeline-name",
            "train",
        ])
        .await;
    assert_botocore(&sm, "ListPipelineExecutionsResponse", &listed);
    let arns: Vec<&str> = listed["PipelineExecutionSummaries"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["PipelineExecutionArn"].as_str())
        .collect();
    assert_eq!(arns, [failing.as_str(), ok_arn.as_str()], "newest first");
    let pipelines = aws.json(&["sagemaker", "list-pipelines"]).await;
    assert_botocore(&sm, "ListPipelinesResponse", &pipelines);
    sandbox.shutdown().await;
}

fn ack_pipeline(name: &str, definition: &str) -> Value {
    json!({
        "apiVersion": "sagemaker.services.k8s.aws/v1alpha1",
        "kind": "Pipeline",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "pipelineName": name,
            "roleARN": SAGEMAKER_ROLE,
            "pipelineDefinition": definition,
            "tags": [{"key": "team", "value": "ml"}],
        },
    })
}

fn ack_execution(name: &str, pipeline: &str) -> Value {
    json!({
        "apiVersion": "sagemaker.services.k8s.aws/v1alpha1",
        "kind": "PipelineExecution",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "pipelineName": pipeline,
            "pipelineExecutionDisplayName": name,
            "pipelineParameters": [{"name": "Epochs", "value": "2"}],
        },
    })
}

fn condition<'a>(object: &'a Value, kind: &str) -> Option<&'a Value> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

/// Reads the object until `done` holds.
async fn object_until(
    kubectl: &Kubectl,
    kind: &str,
    name: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let mut last = Value::Null;
    for _ in 0..200 {
        last = kubectl.json(&["get", kind, name]).await;
        if done(&last) {
            return last;
        }
        pause().await;
    }
    panic!("{kind}/{name} never got there: {last:#}");
}

#[tokio::test]
async fn the_ack_controller_runs_pipelines_from_kubernetes() {
    if !Kubectl::installed() {
        return;
    }
    let sandbox = Sandbox::start(Options {
        timing: Timing::scaled(0.05),
        ..Options::google_apis_on()
    })
    .await
    .expect("sandbox starts");
    configure_account(&sandbox);
    let Some(aws) = Aws::new(&sandbox).await else {
        return;
    };
    create_cluster(&aws, "mlops").await;
    let kubectl = Kubectl::for_cluster(&sandbox, "mlops");

    // Until the CRDs are installed the API has no such resource.
    let unknown = kubectl
        .run(&["get", "pipelines.sagemaker.services.k8s.aws"])
        .await;
    assert_ne!(unknown.code, 0, "{}", unknown.stdout);
    for crd in [
        "ack-sagemaker/sagemaker.services.k8s.aws_pipelines.yaml",
        "ack-sagemaker/sagemaker.services.k8s.aws_pipelineexecutions.yaml",
    ] {
        kubectl
            .ok(&["apply", "-f", &reference(crd).to_string_lossy()])
            .await;
    }
    // The controller: an ACK capability, which leaves the chart's CRDs in place.
    ack_capability(&aws, "mlops", &["AmazonSageMakerFullAccess"]).await;

    kubectl
        .apply(&[
            ack_pipeline("train", &pipeline_definition(2)),
            ack_execution("run", "train"),
        ])
        .await;
    let run = object_until(&kubectl, "pipelineexecution", "run", |o| {
        o["status"]["pipelineExecutionStatus"] == "Succeeded"
    })
    .await;
    let synced = condition(&run, "ACK.ResourceSynced").expect("a synced condition");
    assert_eq!(synced["status"], "True");
    assert_eq!(
        synced["message"],
        "PipelineExecution is in Succeeded status."
    );
    assert_eq!(
        run["metadata"]["finalizers"],
        json!(["finalizers.sagemaker.services.k8s.aws/PipelineExecution"])
    );
    let run_arn = run["status"]["ackResourceMetadata"]["arn"]
        .as_str()
        .expect("an execution ARN")
        .to_string();
    let from_cli = aws
        .json(&[
            "sagemaker",
            "describe-pipeline-execution",
            "--pipeline-execution-arn",
            &run_arn,
        ])
        .await;
    assert_eq!(from_cli["PipelineExecutionStatus"], "Succeeded");
    assert_eq!(from_cli["PipelineExecutionDisplayName"], "run");

    let pipeline = kubectl.json(&["get", "pipeline", "train"]).await;
    assert_eq!(pipeline["status"]["pipelineStatus"], "Active");
    assert_eq!(
        pipeline["status"]["ackResourceMetadata"]["ownerAccountID"],
        "123456789012"
    );
    assert_eq!(pipeline["status"]["ackResourceMetadata"]["region"], REGION);
    assert_eq!(
        condition(&pipeline, "ACK.ResourceSynced").map(|c| c["status"].clone()),
        Some(json!("True"))
    );
    let described = aws
        .json(&["sagemaker", "describe-pipeline", "--pipeline-name", "train"])
        .await;
    assert_eq!(
        pipeline["status"]["ackResourceMetadata"]["arn"],
        described["PipelineArn"]
    );
    let tags = aws
        .json(&[
            "sagemaker",
            "list-tags",
            "--resource-arn",
            described["PipelineArn"].as_str().unwrap_or_default(),
        ])
        .await;
    assert!(
        tags["Tags"]
            .as_array()
            .is_some_and(|t| t.contains(&json!({"Key": "team", "Value": "ml"}))),
        "{tags}"
    );

    // Deleting a running execution stops it before the object goes.
    kubectl
        .apply(&[
            ack_pipeline("long", &pipeline_definition(400)),
            ack_execution("long-run", "long"),
        ])
        .await;
    let long = object_until(&kubectl, "pipelineexecution", "long-run", |o| {
        o["status"]["pipelineExecutionStatus"] == "Executing"
    })
    .await;
    let synced = condition(&long, "ACK.ResourceSynced").expect("a synced condition");
    assert_eq!(synced["status"], "False");
    assert_eq!(
        synced["message"],
        "PipelineExecution is in Executing status."
    );
    let long_arn = long["status"]["ackResourceMetadata"]["arn"]
        .as_str()
        .expect("an execution ARN")
        .to_string();
    kubectl
        .ok(&["delete", "pipelineexecution", "long-run", "--timeout=60s"])
        .await;
    let gone = kubectl.run(&["get", "pipelineexecution", "long-run"]).await;
    assert!(gone.stderr.contains("NotFound"), "{}", gone.stderr);
    let stopped = execution_until(&aws, &long_arn, |s| s == "Stopped").await;
    assert!(stopped["FailureReason"].is_null(), "{stopped}");

    // A definition SageMaker refuses leaves the Pipeline terminal, with SageMaker's words.
    kubectl
        .apply(&[ack_pipeline(
            "broken",
            r#"{"Version": "2020-12-01", "Steps": []}"#,
        )])
        .await;
    let broken = object_until(&kubectl, "pipeline", "broken", |o| {
        condition(o, "ACK.Terminal").is_some()
    })
    .await;
    let terminal = condition(&broken, "ACK.Terminal").expect("terminal");
    assert_eq!(terminal["status"], "True");
    assert_eq!(
        terminal["message"],
        "ValidationException: Invalid pipeline definition: Steps must not be empty"
    );
    assert_eq!(
        condition(&broken, "ACK.ResourceSynced").map(|c| c["status"].clone()),
        Some(json!("False"))
    );
    aws.fails(
        &[
            "sagemaker",
            "describe-pipeline",
            "--pipeline-name",
            "broken",
        ],
        "ResourceNotFound",
    )
    .await;

    // Deleting a Pipeline deletes it in SageMaker.
    kubectl
        .ok(&["delete", "pipeline", "train", "--timeout=60s"])
        .await;
    aws.fails(
        &["sagemaker", "describe-pipeline", "--pipeline-name", "train"],
        "ResourceNotFound",
    )
    .await;
    sandbox.shutdown().await;
}

const ACK_CRDS: [&str; 2] = [
    "pipelineexecutions.sagemaker.services.k8s.aws",
    "pipelines.sagemaker.services.k8s.aws",
];

/// The CRDs of the cluster, by name, as `kubectl get crd` lists them.
async fn crds(kubectl: &Kubectl) -> Vec<Value> {
    kubectl.json(&["get", "crd"]).await["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn names(objects: &[Value]) -> Vec<String> {
    objects
        .iter()
        .filter_map(|o| o["metadata"]["name"].as_str().map(str::to_string))
        .collect()
}

/// Creates cluster `name` in the `API` authentication mode an ACK capability needs, and
/// waits until it is ACTIVE.
async fn create_cluster(aws: &Aws, name: &str) {
    aws.json(&[
        "eks",
        "create-cluster",
        "--name",
        name,
        "--role-arn",
        ROLE,
        "--resources-vpc-config",
        "subnetIds=subnet-a,subnet-b",
        "--access-config",
        "authenticationMode=API",
    ])
    .await;
    cluster_until(aws, name, "ACTIVE").await;
}

/// Makes role `ack-controller`, trusting EKS capabilities and holding the managed
/// `policies`, and an ACK capability of cluster `cluster` acting as it; returns once the
/// capability is ACTIVE.
async fn ack_capability(aws: &Aws, cluster: &str, policies: &[&str]) {
    let trust = json!({"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow",
        "Principal": {"Service": "capabilities.eks.amazonaws.com"},
        "Action": ["sts:AssumeRole", "sts:TagSession"],
    }]})
    .to_string();
    let exists = aws
        .run(&["iam", "get-role", "--role-name", "ack-controller"])
        .await;
    if exists.code != 0 {
        aws.json(&[
            "iam",
            "create-role",
            "--role-name",
            "ack-controller",
            "--assume-role-policy-document",
            &trust,
        ])
        .await;
    }
    for policy in policies {
        aws.run(&[
            "iam",
            "attach-role-policy",
            "--role-name",
            "ack-controller",
            "--policy-arn",
            &format!("arn:aws:iam::aws:policy/{policy}"),
        ])
        .await;
    }
    aws.json(&[
        "eks",
        "create-capability",
        "--cluster-name",
        cluster,
        "--capability-name",
        "ack",
        "--type",
        "ACK",
        "--role-arn",
        "arn:aws:iam::123456789012:role/ack-controller",
        "--delete-propagation-policy",
        "RETAIN",
    ])
    .await;
    for _ in 0..200 {
        let c = aws
            .json(&[
                "eks",
                "describe-capability",
                "--cluster-name",
                cluster,
                "--capability-name",
                "ack",
            ])
            .await;
        if c["capability"]["status"] == "ACTIVE" {
            return;
        }
        pause().await;
    }
    panic!("the ACK capability of {cluster} never became ACTIVE");
}

#[tokio::test]
async fn eks_clusters_start_without_ack_until_an_ack_capability_is_active() {
    if !Kubectl::installed() {
        return;
    }
    let sandbox = Sandbox::start(Options {
        timing: Timing::scaled(0.05),
        ..Options::google_apis_on()
    })
    .await
    .expect("sandbox starts");
    configure_account(&sandbox);
    let Some(aws) = Aws::new(&sandbox).await else {
        return;
    };
    create_cluster(&aws, "fresh").await;
    let kubectl = Kubectl::for_cluster(&sandbox, "fresh");

    // A new EKS cluster has no ACK: no CRDs, nothing to submit a pipeline to.
    assert_eq!(crds(&kubectl).await, Vec::<Value>::new());
    let unknown = kubectl.run(&["get", "pipelines"]).await;
    assert_ne!(unknown.code, 0, "{}", unknown.stdout);

    // The capability installs the CRDs and runs the controller as its role, which may
    // call SageMaker but not pass the pipeline's role: ACK reports SageMaker's refusal.
    ack_capability(&aws, "fresh", &[]).await;
    aws.json(&[
        "iam",
        "put-role-policy",
        "--role-name",
        "ack-controller",
        "--policy-name",
        "sagemaker",
        "--policy-document",
        r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"sagemaker:*","Resource":"*"}]}"#,
    ])
    .await;
    let installed = crds(&kubectl).await;
    assert_eq!(names(&installed), ACK_CRDS);
    for crd in &installed {
        assert_eq!(
            condition(crd, "Established").map(|c| c["status"].clone()),
            Some(json!("True")),
            "{crd:#}"
        );
        assert!(
            crd["metadata"]["labels"]["app.kubernetes.io/managed-by"].is_null(),
            "no Helm release installed it: {crd:#}"
        );
    }
    kubectl
        .apply(&[
            ack_pipeline("train", &pipeline_definition(1)),
            ack_execution("run", "train"),
        ])
        .await;
    let refused = object_until(&kubectl, "pipeline", "train", |o| {
        condition(o, "ACK.Recoverable").is_some()
    })
    .await;
    let message = condition(&refused, "ACK.Recoverable").expect("recoverable")["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        message.contains("AccessDeniedException")
            && message.contains("assumed-role/ack-controller/")
            && message.contains(&format!("iam:PassRole on resource: {SAGEMAKER_ROLE}")),
        "{message}"
    );
    aws.fails(
        &["sagemaker", "describe-pipeline", "--pipeline-name", "train"],
        "ResourceNotFound",
    )
    .await;

    // With the policy that lets it pass roles to SageMaker, the next pass goes through.
    aws.json(&[
        "iam",
        "attach-role-policy",
        "--role-name",
        "ack-controller",
        "--policy-arn",
        "arn:aws:iam::aws:policy/AmazonSageMakerFullAccess",
    ])
    .await;
    let pipeline = object_until(&kubectl, "pipeline", "train", |o| {
        condition(o, "ACK.ResourceSynced").is_some_and(|c| c["status"] == "True")
    })
    .await;
    assert_eq!(pipeline["status"]["pipelineStatus"], "Active");
    let run = object_until(&kubectl, "pipelineexecution", "run", |o| {
        o["status"]["pipelineExecutionStatus"] == "Succeeded"
    })
    .await;
    let run_id = run["status"]["ackResourceMetadata"]["arn"]
        .as_str()
        .and_then(|arn| arn.rsplit('/').next())
        .expect("an execution ARN")
        .to_string();
    let held = sandbox.inventory();
    for line in [
        "eks cluster us-east-1/fresh".to_string(),
        "sagemaker pipeline us-east-1/train".to_string(),
        format!("sagemaker execution us-east-1/train/{run_id}"),
    ] {
        assert!(held.contains(&line), "{line} in {held:#?}");
    }

    // Taken down in order (objects while the controller runs, then the capability,
    // then the cluster) the sandbox holds nothing.
    kubectl
        .ok(&["delete", "pipelineexecution", "run", "--timeout=60s"])
        .await;
    kubectl
        .ok(&["delete", "pipeline", "train", "--timeout=60s"])
        .await;
    let refused = aws
        .fails(
            &["eks", "delete-cluster", "--name", "fresh"],
            "ResourceInUseException",
        )
        .await;
    assert!(refused.contains("capabilities"), "{refused}");
    aws.json(&[
        "eks",
        "delete-capability",
        "--cluster-name",
        "fresh",
        "--capability-name",
        "ack",
    ])
    .await;
    for _ in 0..200 {
        let listed = aws
            .json(&["eks", "list-capabilities", "--cluster-name", "fresh"])
            .await;
        if listed["capabilities"] == json!([]) {
            break;
        }
        pause().await;
    }
    aws.json(&["eks", "delete-cluster", "--name", "fresh"])
        .await;
    aws.json(&[
        "iam",
        "detach-role-policy",
        "--role-name",
        "ack-controller",
        "--policy-arn",
        "arn:aws:iam::aws:policy/AmazonSageMakerFullAccess",
    ])
    .await;
    aws.json(&[
        "iam",
        "delete-role-policy",
        "--role-name",
        "ack-controller",
        "--policy-name",
        "sagemaker",
    ])
    .await;
    aws.json(&["iam", "delete-role", "--role-name", "ack-controller"])
        .await;
    let mut held = sandbox.inventory();
    for _ in 0..100 {
        if held.is_empty() {
            break;
        }
        pause().await;
        held = sandbox.inventory();
    }
    assert_eq!(held, Vec::<String>::new());
    sandbox.shutdown().await;
}

#[tokio::test]
async fn an_ack_capability_installs_only_the_crds_a_cluster_lacks_also_after_a_restart() {
    if !Kubectl::installed() {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let state = dir.path().join("state.json");
    let options = || Options {
        timing: Timing::instant(),
        state_file: Some(state.clone()),
        ..Options::google_apis_on()
    };

    // A client installs the Pipeline CRD only; the capability adds the one it lacks.
    let sandbox = Sandbox::start(options()).await.expect("sandbox starts");
    configure_account(&sandbox);
    let Some(aws) = Aws::new(&sandbox).await else {
        return;
    };
    create_cluster(&aws, "later").await;
    let kubectl = Kubectl::for_cluster(&sandbox, "later");
    assert_eq!(crds(&kubectl).await, Vec::<Value>::new());
    kubectl
        .ok(&[
            "apply",
            "-f",
            &reference("ack-sagemaker/sagemaker.services.k8s.aws_pipelines.yaml").to_string_lossy(),
        ])
        .await;
    let own = crds(&kubectl).await;
    assert_eq!(names(&own), [ACK_CRDS[1]]);
    ack_capability(&aws, "later", &["AmazonSageMakerFullAccess"]).await;
    let installed = crds(&kubectl).await;
    assert_eq!(names(&installed), ACK_CRDS);
    assert_eq!(
        installed[1]["metadata"]["uid"], own[0]["metadata"]["uid"],
        "the client's CRD is not replaced"
    );
    let port = sandbox.port();
    sandbox.shutdown().await;

    // Reopened, the persisted capability installs nothing twice.
    let sandbox = Sandbox::start(Options {
        port: Some(port),
        ..options()
    })
    .await
    .expect("sandbox reopens");
    let kubectl = Kubectl::for_cluster(&sandbox, "later");
    let again = crds(&kubectl).await;
    assert_eq!(names(&again), ACK_CRDS);
    assert_eq!(
        again
            .iter()
            .map(|c| c["metadata"]["uid"].clone())
            .collect::<Vec<_>>(),
        installed
            .iter()
            .map(|c| c["metadata"]["uid"].clone())
            .collect::<Vec<_>>()
    );
    sandbox.shutdown().await;
}

/// The controller's manifests kept in the repository (the chart's rendering), with the
/// region filled in.
fn controller_manifests(dir: &Path, region: &str) -> Vec<PathBuf> {
    let from = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../stacks/modules/ack-sagemaker-controller/manifests");
    ["crds.yaml", "namespace.yaml", "controller.yaml"]
        .iter()
        .map(|name| {
            let text = std::fs::read_to_string(from.join(name)).expect("read a manifest");
            let path = dir.join(name);
            std::fs::write(&path, text.replace("${var.region}", region)).expect("write");
            path
        })
        .collect()
}

#[tokio::test]
async fn a_self_managed_controller_runs_as_its_pod_identity() {
    if !Kubectl::installed() {
        return;
    }
    let sandbox = Sandbox::start(Options {
        timing: Timing::scaled(0.05),
        ..Options::google_apis_on()
    })
    .await
    .expect("sandbox starts");
    configure_account(&sandbox);
    let Some(aws) = Aws::new(&sandbox).await else {
        return;
    };
    let eks = model("eks", "2017-11-01");
    create_cluster(&aws, "own").await;
    aws.json(&[
        "eks",
        "create-nodegroup",
        "--cluster-name",
        "own",
        "--nodegroup-name",
        "system",
        "--node-role",
        NODE_ROLE,
        "--subnets",
        "subnet-a",
        "--instance-types",
        "m6i.large",
        "--scaling-config",
        "minSize=1,maxSize=1,desiredSize=1",
    ])
    .await;
    aws.run(&[
        "eks",
        "wait",
        "nodegroup-active",
        "--cluster-name",
        "own",
        "--nodegroup-name",
        "system",
    ])
    .await;

    // The controller, applied from the repository's manifests, runs without an
    // identity: every call fails before it leaves the pod.
    let kubectl = Kubectl::for_cluster(&sandbox, "own");
    let dir = tempfile::tempdir().expect("temp dir");
    for file in controller_manifests(dir.path(), "us-east-1") {
        kubectl
            .ok(&["apply", "--server-side", "-f", &file.to_string_lossy()])
            .await;
    }
    kubectl
        .ok(&[
            "rollout",
            "status",
            "-n",
            "ack-system",
            "deployment/ack-sagemaker-controller-sagemaker-chart",
            "--timeout=60s",
        ])
        .await;
    kubectl
        .apply(&[ack_pipeline("train", &pipeline_definition(1))])
        .await;
    let stuck = object_until(&kubectl, "pipeline", "train", |o| {
        condition(o, "ACK.Recoverable").is_some()
    })
    .await;
    let message = condition(&stuck, "ACK.Recoverable").expect("recoverable")["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        message.contains("no EKS Pod Identity association")
            && message.contains("ack-system/ack-sagemaker-controller"),
        "{message}"
    );

    // The agent add-on and an association give its service account a role.
    let addon = aws
        .json(&[
            "eks",
            "create-addon",
            "--cluster-name",
            "own",
            "--addon-name",
            "eks-pod-identity-agent",
        ])
        .await;
    assert_botocore(&eks, "CreateAddonResponse", &addon);
    aws.fails(
        &[
            "eks",
            "create-addon",
            "--cluster-name",
            "own",
            "--addon-name",
            "not-an-addon",
        ],
        "InvalidParameterException",
    )
    .await;
    let trust = json!({"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow",
        "Principal": {"Service": "pods.eks.amazonaws.com"},
        "Action": ["sts:AssumeRole", "sts:TagSession"],
    }]})
    .to_string();
    aws.json(&[
        "iam",
        "create-role",
        "--role-name",
        "ack-pods",
        "--assume-role-policy-document",
        &trust,
    ])
    .await;
    aws.json(&[
        "iam",
        "attach-role-policy",
        "--role-name",
        "ack-pods",
        "--policy-arn",
        "arn:aws:iam::aws:policy/AmazonSageMakerFullAccess",
    ])
    .await;
    let refused = aws
        .fails(
            &[
                "eks",
                "create-pod-identity-association",
                "--cluster-name",
                "own",
                "--namespace",
                "ack-system",
                "--service-account",
                "ack-sagemaker-controller",
                "--role-arn",
                ROLE,
            ],
            "InvalidParameterException",
        )
        .await;
    assert!(refused.contains("pods.eks.amazonaws.com"), "{refused}");
    let made = aws
        .json(&[
            "eks",
            "create-pod-identity-association",
            "--cluster-name",
            "own",
            "--namespace",
            "ack-system",
            "--service-account",
            "ack-sagemaker-controller",
            "--role-arn",
            "arn:aws:iam::123456789012:role/ack-pods",
        ])
        .await;
    assert_botocore(&eks, "CreatePodIdentityAssociationResponse", &made);
    let id = made["association"]["associationId"]
        .as_str()
        .expect("an association id")
        .to_string();
    let described = aws
        .json(&[
            "eks",
            "describe-pod-identity-association",
            "--cluster-name",
            "own",
            "--association-id",
            &id,
        ])
        .await;
    assert_botocore(&eks, "DescribePodIdentityAssociationResponse", &described);
    let listed = aws
        .json(&[
            "eks",
            "list-pod-identity-associations",
            "--cluster-name",
            "own",
            "--namespace",
            "ack-system",
        ])
        .await;
    assert_botocore(&eks, "ListPodIdentityAssociationsResponse", &listed);
    assert_eq!(listed["associations"][0]["associationId"], json!(id));

    // Once the add-on is ACTIVE the controller gets the role's credentials and syncs.
    let pipeline = object_until(&kubectl, "pipeline", "train", |o| {
        condition(o, "ACK.ResourceSynced").is_some_and(|c| c["status"] == "True")
    })
    .await;
    assert_eq!(pipeline["status"]["pipelineStatus"], "Active");
    let described = aws
        .json(&[
            "eks",
            "describe-addon",
            "--cluster-name",
            "own",
            "--addon-name",
            "eks-pod-identity-agent",
        ])
        .await;
    assert_botocore(&eks, "DescribeAddonResponse", &described);
    assert_eq!(described["addon"]["status"], "ACTIVE");
    let held = sandbox.inventory();
    assert!(
        held.iter()
            .any(|l| l.starts_with("eks pod identity association us-east-1/own/a-")),
        "{held:#?}"
    );

    // Taken down: the objects while the controller runs, then its association.
    kubectl
        .ok(&["delete", "pipeline", "train", "--timeout=60s"])
        .await;
    aws.json(&[
        "eks",
        "delete-pod-identity-association",
        "--cluster-name",
        "own",
        "--association-id",
        &id,
    ])
    .await;
    aws.json(&[
        "eks",
        "delete-addon",
        "--cluster-name",
        "own",
        "--addon-name",
        "eks-pod-identity-agent",
    ])
    .await;
    sandbox.shutdown().await;
}
