//! AWS from an empty account, through the CLI on the sandbox: the mistakes the IAM and
//! network checks exist for, each made in `stacks/eks-sagemaker` (whose roles, bucket,
//! key and network the stack itself creates) and refused by `terrain plan` with the
//! stack's file:line:col, nothing created; a network apply killed after the VPC and a
//! subnet, converging on re-apply with no duplicate; a network still in use refused by
//! destroy, naming what holds it, and destroyed once freed.

use crate::common;

use std::fs::File;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{set_value, Run, Sandbox as Work};

const STACK: &str = "stacks/eks-sagemaker";

/// A work directory holding `stacks/eks-sagemaker` and the shared modules.
fn work() -> Work {
    let work = common::with_stacks(&["eks-sagemaker"]);
    common::copy_dir(
        &common::manifest_dir().join("stacks/modules"),
        &work.join("stacks/modules"),
    );
    work
}

/// `terrain plan` of the stack on the work directory's sandbox.
fn plan(work: &Work) -> Run {
    work.run(&["plan", "--no-color", "-s", STACK, "--sandbox"])
}

/// Edits the stack file with `edit`, plans, and checks the plan refuses the stack with
/// every one of `said` in its errors, at `stack.toml:LINE` (or in the module), and that
/// the sandbox holds nothing afterwards.
#[track_caller]
fn refused(edit: impl FnOnce(String) -> String, at: &str, said: &[&str]) {
    let work = work();
    let path = format!("{STACK}/stack.toml");
    work.write(&path, &edit(work.read(&path)));
    let run = plan(&work);
    run.expect_code(1);
    let err = flat(&run.stderr);
    assert!(err.contains(at), "the error names {at}:\n{}", run.stderr);
    for s in said {
        assert!(err.contains(s), "the error says {s:?}:\n{}", run.stderr);
    }
    assert!(err.contains("nothing was changed"), "{}", run.stderr);
    let list = work.run(&["sandbox", "list"]);
    list.success();
    assert_eq!(list.stdout, "The sandbox holds nothing.\n");
}

/// An error report on one line: its wrapping and margins gone, words single-spaced.
fn flat(text: &str) -> String {
    text.replace(['│', '×'], " ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// `text` with `old` replaced by `new`, exactly once.
#[track_caller]
fn replace(text: &str, old: &str, new: &str) -> String {
    assert_eq!(text.matches(old).count(), 1, "{old:?} once in the stack");
    text.replacen(old, new, 1)
}

#[test]
fn a_cluster_role_without_the_cluster_policy_is_refused_at_plan() {
    refused(
        |s| {
            set_value(
                &s,
                "managed_policies",
                r#"["AmazonEKSClusterPolicy"]"#,
                "[]",
            )
        },
        "stack.toml:48:20",
        &[
            "iam_role.cluster.managed_policies: eks_cluster.ml runs as this role",
            "add \"AmazonEKSClusterPolicy\" to managed_policies",
        ],
    );
}

#[test]
fn a_cluster_role_eks_cannot_assume_is_refused_at_plan() {
    refused(
        |s| {
            replace(
                &s,
                r#"trust            = "eks""#,
                r#"trust            = "ec2""#,
            )
        },
        "stack.toml:47:21",
        &[
            "eks_cluster.ml needs eks.amazonaws.com to assume this role",
            "use `trust = \"eks\"`",
        ],
    );
}

#[test]
fn a_node_role_that_cannot_pull_images_is_refused_at_plan() {
    refused(
        |s| replace(&s, r#", "AmazonEC2ContainerRegistryPullOnly""#, ""),
        "stack.toml:53:20",
        &[
            "eks_node_group.system's nodes run as this role, which may not pull images from ECR",
            "module.gpu.eks_node_group.main's nodes run as this role",
            "add \"AmazonEC2ContainerRegistryPullOnly\"",
        ],
    );
}

#[test]
fn a_node_role_without_the_cni_policy_is_a_warning_the_plan_goes_on() {
    let work = work();
    let path = format!("{STACK}/stack.toml");
    work.write(
        &path,
        &replace(&work.read(&path), r#""AmazonEKS_CNI_Policy", "#, ""),
    );
    let run = plan(&work);
    run.success();
    let all = format!("{}{}", run.stdout, run.stderr);
    assert!(
        all.contains("Warning: iam_role.nodes.managed_policies: eks_node_group.system's nodes run as this role, which does not hold AmazonEKS_CNI_Policy"),
        "{all}"
    );
}

#[test]
fn an_execution_role_sagemaker_cannot_assume_is_refused_at_plan() {
    refused(
        |s| {
            replace(
                &s,
                r#"trust            = "sagemaker""#,
                r#"trust            = "eks""#,
            )
        },
        "stack.toml:59:21",
        &[
            "sagemaker_pipeline.xgboost (step AbaloneTrain) needs sagemaker.amazonaws.com to assume this role (the step's execution role)",
            "use `trust = \"sagemaker\"`",
        ],
    );
}

#[test]
fn an_execution_role_without_the_bucket_key_is_refused_at_plan() {
    refused(
        |s| {
            replace(
                &s,
                "    { actions = [\"kms:Decrypt\", \"kms:GenerateDataKey\"], resources = [\"${kms_key.pipelines.arn}\"] },\n",
                "",
            )
        },
        "stack.toml:61:20",
        &[
            "sagemaker_pipeline.xgboost (step AbaloneTrain) runs as this role, which is not allowed `kms:GenerateDataKey`",
            "encrypted with the bucket's KMS key",
            "add to statements: { actions = [\"kms:Decrypt\", \"kms:GenerateDataKey\"], resources = [\"${kms_key.pipelines.arn}\"] }",
        ],
    );
}

/// The classic trap: AmazonSageMakerFullAccess reaches S3 objects only under names
/// holding "sagemaker". The seed's paths all hold `/sagemaker/` (so the policy alone
/// would do); once the definition writes elsewhere, the bucket's own statement is what
/// lets the step read and write.
#[test]
fn sagemaker_full_access_alone_cannot_reach_the_bucket_and_the_plan_says_so() {
    let work = work();
    let stack = format!("{STACK}/stack.toml");
    let text = replace(
        &work.read(&stack),
        "    { actions = [\"s3:GetObject\", \"s3:PutObject\", \"s3:ListBucket\"], resources = [\"${s3_bucket.pipelines.arn}\", \"${s3_bucket.pipelines.arn}/*\"] },\n",
        "",
    );
    work.write(&stack, &text);
    // As the seed's definition is, the managed policy covers its paths.
    plan(&work).success();
    let definition = format!("{STACK}/pipeline.json");
    work.write(
        &definition,
        &work.read(&definition).replace("/sagemaker/", "/training/"),
    );
    let run = plan(&work);
    run.expect_code(1);
    let err = flat(&run.stderr);
    for said in [
        "iam_role.sagemaker.statements: sagemaker_pipeline.xgboost (step AbaloneTrain) runs as this role, which is not allowed `s3:PutObject`",
        "s3://ml-pipelines-<account>/training/",
        "add to statements:",
        "nothing was changed",
    ] {
        assert!(err.contains(said), "the error says {said:?}:\n{}", run.stderr);
    }
}

#[test]
fn a_pipeline_role_that_cannot_pass_the_step_role_is_refused_at_plan() {
    refused(
        |s| {
            let s = replace(
                &s,
                "[kms_key.pipelines]",
                "[iam_role.pipeline]\nname  = \"ml-pipelines-pipeline\"\ntrust = \"sagemaker\"\n\n[kms_key.pipelines]",
            );
            let s = set_value(
                &s,
                "role_arn",
                "\"${iam_role.sagemaker.arn}\"",
                "\"${iam_role.pipeline.arn}\"",
            );
            // The ACK controllers may pass the new role: only the pipeline's grant lacks.
            ack_may_also_pass(&s, "${iam_role.pipeline.arn}")
        },
        "stack.toml:78:11",
        &[
            "iam_role.pipeline.statements: sagemaker_pipeline.xgboost (step AbaloneTrain): the pipeline runs as this role and starts the step as iam_role.sagemaker, so it must pass that role to SageMaker",
            "add to statements: { actions = [\"iam:PassRole\"], resources = [\"${iam_role.sagemaker.arn}\"], condition = { StringEquals = { \"iam:PassedToService\" = \"sagemaker.amazonaws.com\" } } }",
        ],
    );
}

/// A pipeline role made outside the stack may hold the grant: the plan goes on, and
/// says what that role needs.
#[test]
fn a_pipeline_role_from_outside_the_stack_is_a_warning_naming_what_it_needs() {
    let work = work();
    let path = format!("{STACK}/stack.toml");
    let text = set_value(
        &work.read(&path),
        "role_arn",
        "\"${iam_role.sagemaker.arn}\"",
        "\"arn:aws:iam::123456789012:role/made-by-hand\"",
    );
    work.write(
        &path,
        &ack_may_also_pass(&text, "arn:aws:iam::123456789012:role/made-by-hand"),
    );
    let run = plan(&work);
    run.success();
    let all = flat(&format!("{}{}", run.stdout, run.stderr));
    assert!(
        all.contains("Warning: sagemaker_pipeline.xgboost.role_arn: sagemaker_pipeline.xgboost (step AbaloneTrain): the pipeline runs as arn:aws:iam::123456789012:role/made-by-hand, which the stack does not make"),
        "{all}"
    );
    assert!(
        all.contains("must be allowed iam:PassRole on ${iam_role.sagemaker.arn}"),
        "{all}"
    );
}

#[test]
fn a_network_in_one_zone_is_refused_at_plan() {
    refused(
        |s| replace(&s, r#", "us-east-1b" = { public = 1, private = 9 }"#, ""),
        "eks-network/main.toml:98:16",
        &[
            "eks_cluster.ml.subnet_ids: EKS needs subnets in at least two Availability Zones",
            "add a subnet in another zone",
        ],
    );
}

#[test]
fn overlapping_subnets_are_refused_at_plan() {
    refused(
        |s| {
            replace(
                &s,
                r#""us-east-1b" = { public = 1, private = 9 }"#,
                r#""us-east-1b" = { public = 1, private = 8 }"#,
            )
        },
        "eks-network/main.toml:48:13",
        &["subnets of a VPC take disjoint ranges"],
    );
}

/// A stack of the network module alone, beside the shared modules.
const NETWORK: &str = r#"[stack]
name = "net"

[providers.aws]
region = "us-east-1"

[module.network]
source   = "../modules/eks-network"
name     = "net"
zones    = { "us-east-1a" = { public = 0, private = 8 }, "us-east-1b" = { public = 1, private = 9 } }
nat_zone = "us-east-1a"
"#;

/// Stops the `terrain sandbox serve` of a test when dropped.
struct Served(std::process::Child);

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A work directory with the network stack at `stacks/net` and a served sandbox (which
/// outlives a killed run) that `--sandbox` runs use.
fn network() -> (Work, Served) {
    let mut work = work();
    work.write("stacks/net/stack.toml", NETWORK);
    let served = serve(&mut work);
    (work, served)
}

/// Serves a sandbox for `work` (which outlives a killed run) and logs its runs' events to
/// `events.jsonl`.
fn serve(work: &mut Work) -> Served {
    work.set_log(work.join("events.jsonl"));
    let child = work
        .command(
            &["sandbox", "serve"],
            &[("TERRAIN_SANDBOX_TIME_SCALE", "0.2")],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start terrain sandbox serve");
    work.wait_for("the served sandbox", Duration::from_secs(30), || {
        work.exists("state/sandbox/serve.json").then_some(())
    });
    Served(child)
}

/// The addresses the event log says were created, in order, with repeats.
fn created(work: &Work) -> Vec<String> {
    let log = std::fs::read_to_string(work.join("events.jsonl")).unwrap_or_default();
    log.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["event"] == "finished" && e["step"] == "create")
        .filter_map(|e| e["address"].as_str().map(str::to_string))
        .collect()
}

/// The sandbox's inventory lines of `noun` (`ec2 vpc`, `ec2 subnet`, …).
fn held(work: &Work, noun: &str) -> Vec<String> {
    let list = work.run(&["sandbox", "list"]);
    list.success();
    list.stdout
        .lines()
        .filter(|l| l.starts_with(noun))
        .map(str::to_string)
        .collect()
}

#[test]
fn a_network_apply_killed_after_the_vpc_and_a_subnet_converges_with_no_orphan() {
    let (work, _served) = network();
    let out = File::create(work.join("killed.out")).expect("create killed.out");
    let mut child = work
        .command(
            &["apply", "-s", "stacks/net", "--sandbox", "--auto-approve"],
            &[],
        )
        .stdout(Stdio::from(out))
        .stderr(Stdio::null())
        .spawn()
        .expect("start the apply to kill");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let made = created(&work);
        let vpc = made.iter().any(|a| a.ends_with("aws_vpc.main"));
        let subnet = made.iter().any(|a| a.contains("aws_subnet."));
        if vpc && subnet {
            break;
        }
        if let Some(status) = child.try_wait().expect("poll the apply") {
            panic!(
                "the apply ended ({status}) before the VPC and a subnet were made:\n{}",
                work.read("killed.out")
            );
        }
        assert!(Instant::now() < deadline, "no VPC and subnet within 60 s");
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().expect("SIGKILL the apply");
    child.wait().expect("reap the killed apply");
    let at_kill = created(&work);
    assert!(
        !at_kill
            .iter()
            .any(|a| a.ends_with("aws_route_table.private")),
        "killed part-way: {at_kill:?}"
    );

    work.run(&["apply", "-s", "stacks/net", "--sandbox", "--auto-approve"])
        .success();
    work.run(&[
        "plan",
        "-s",
        "stacks/net",
        "--sandbox",
        "--detailed-exitcode",
    ])
    .success();
    // One VPC besides the default one, five subnets (two per zone and the NAT's), one
    // gateway of each kind: nothing made twice.
    let vpcs = held(&work, "ec2 vpc ");
    assert_eq!(vpcs.len(), 1, "{vpcs:?}");
    let subnets = held(&work, "ec2 subnet ");
    assert_eq!(subnets.len(), 5, "{subnets:?}");
    assert_eq!(held(&work, "ec2 internet gateway ").len(), 1);
    assert_eq!(held(&work, "ec2 nat gateway ").len(), 1);
    assert_eq!(held(&work, "ec2 address ").len(), 1);

    work.run(&["destroy", "-s", "stacks/net", "--sandbox", "--auto-approve"])
        .success();
    let list = work.run(&["sandbox", "list"]);
    list.success();
    assert_eq!(list.stdout, "The sandbox holds nothing.\n");
}

#[test]
fn destroying_a_network_in_use_fails_naming_what_holds_it_and_succeeds_once_freed() {
    let (work, _served) = network();
    work.run(&["apply", "-s", "stacks/net", "--sandbox", "--auto-approve"])
        .success();
    // A second stack puts a subnet of its own in the network's VPC.
    let state = work.json("state/sandbox/net.json");
    let user = format!(
        "[stack]\nname = \"user\"\n\n[providers.aws]\nregion = \"us-east-1\"\n\n\
         [aws_subnet.extra]\nvpc_id = \"{vpc}\"\ncidr = \"10.0.112.0/20\"\navailability_zone = \"us-east-1a\"\n",
        vpc = state["resources"]["module.network.aws_vpc.main"]["id"]
            .as_str()
            .expect("the VPC's id"),
    );
    work.write("stacks/user/stack.toml", &user);
    work.run(&["apply", "-s", "stacks/user", "--sandbox", "--auto-approve"])
        .success();

    let refused = work.run(&["destroy", "-s", "stacks/net", "--sandbox", "--auto-approve"]);
    refused.expect_code(1);
    let err = flat(&refused.stderr);
    assert!(
        err.contains("Error: destroy finished with 1 error(s):"),
        "a destroy says so: {}",
        refused.stderr
    );
    assert!(
        err.contains("module.network.aws_vpc.main: ec2:DeleteVpc failed: 400 DependencyViolation"),
        "{}",
        refused.stderr
    );
    assert!(
        err.contains("still holds subnet subnet-"),
        "names what holds it: {}",
        refused.stderr
    );

    work.run(&[
        "destroy",
        "-s",
        "stacks/user",
        "--sandbox",
        "--auto-approve",
    ])
    .success();
    work.run(&["destroy", "-s", "stacks/net", "--sandbox", "--auto-approve"])
        .success();
    let list = work.run(&["sandbox", "list"]);
    list.success();
    assert_eq!(list.stdout, "The sandbox holds nothing.\n");
}

/// The stack with the ACK controllers' role also allowed to pass `role` to SageMaker.
fn ack_may_also_pass(s: &str, role: &str) -> String {
    replace(
        s,
        r#"{ actions = ["iam:PassRole"], resources = ["${iam_role.sagemaker.arn}"]"#,
        &format!(
            r#"{{ actions = ["iam:PassRole"], resources = ["${{iam_role.sagemaker.arn}}", "{role}"]"#
        ),
    )
}

/// The stack without its ACK capability: nothing serves the Pipeline kind on the
/// cluster it creates.
fn without_capability(s: String) -> String {
    let start = s
        .find("# The ACK controllers, run by EKS")
        .expect("the capability block");
    let end = s[start..]
        .find("\n\n")
        .map(|i| start + i + 2)
        .expect("the block's end");
    format!("{}{}", &s[..start], &s[end..])
}

#[test]
fn a_pipeline_on_a_new_cluster_without_ack_is_refused_at_plan() {
    let work = work();
    let path = format!("{STACK}/stack.toml");
    work.write(&path, &without_capability(work.read(&path)));
    // Valid offline: whether the cluster serves the kind depends on whether it exists.
    work.run(&["validate", "-s", STACK]).success();
    let run = plan(&work);
    run.expect_code(1);
    let err = flat(&run.stderr);
    for said in [
        "stack.toml:166:20: sagemaker_pipeline.xgboost needs its cluster to serve Pipeline (sagemaker.services.k8s.aws/v1alpha1)",
        "nothing in this stack provides it on eks_cluster.ml, which this plan creates",
        "add an `eks_capability` with type = \"ACK\" on eks_cluster.ml",
        "with a `kubernetes_manifest`",
    ] {
        assert!(err.contains(said), "the error says {said:?}:\n{}", run.stderr);
    }
    let list = work.run(&["sandbox", "list"]);
    list.success();
    assert_eq!(list.stdout, "The sandbox holds nothing.\n");
}

#[test]
fn a_pipeline_on_an_existing_cluster_without_ack_is_refused_by_its_discovery() {
    // The cluster exists (applied on its own first) and nothing in the stack provides
    // the group: the plan asks the cluster, which serves no Pipeline.
    let work = work();
    let path = format!("{STACK}/stack.toml");
    work.write(&path, &without_capability(work.read(&path)));
    let scaled = [("TERRAIN_SANDBOX_TIME_SCALE", "0.2")];
    work.run_env(
        &[
            "apply",
            "-s",
            STACK,
            "--sandbox",
            "--auto-approve",
            "--target",
            "eks_node_group.system",
        ],
        &scaled,
    )
    .success();
    let before = work.run(&["sandbox", "list"]);
    let run = work.run_env(&["plan", "--no-color", "-s", STACK, "--sandbox"], &scaled);
    run.expect_code(1);
    let err = flat(&run.stderr);
    for said in [
        "sagemaker_pipeline.xgboost needs its cluster to serve Pipeline (sagemaker.services.k8s.aws/v1alpha1)",
        "nothing in this stack provides it, and eks_cluster.ml does not serve it (no CustomResourceDefinition)",
        "add an `eks_capability` with type = \"ACK\" on eks_cluster.ml",
    ] {
        assert!(err.contains(said), "the error says {said:?}:\n{}", run.stderr);
    }
    // Nothing changed by the refused plan.
    assert_eq!(work.run(&["sandbox", "list"]).stdout, before.stdout);
}

#[test]
fn a_capability_on_a_config_map_cluster_is_refused_at_plan() {
    refused(
        |s| {
            replace(
                &s,
                r#"authentication_mode = "API""#,
                r#"authentication_mode = "CONFIG_MAP""#,
            )
        },
        "stack.toml:97:13",
        &[
            "eks_capability.ack[0].cluster: eks_cluster.ml has authentication_mode = \"CONFIG_MAP\"",
            "EKS runs capabilities only on clusters with access entries",
        ],
    );
}

#[test]
fn a_capability_role_that_cannot_pass_the_pipeline_role_is_refused_at_plan() {
    refused(
        without_pass_role,
        "stack.toml:73:14",
        &[
            "iam_role.ack.statements: eks_capability.ack[0] submits sagemaker_pipeline.xgboost as this role",
            "SageMaker refuses a pipeline whose role the caller may not pass",
            "resources = [\"${iam_role.sagemaker.arn}\"]",
        ],
    );
}

#[test]
fn a_capability_role_eks_cannot_assume_is_refused_at_plan() {
    refused(
        |s| {
            replace(
                &s,
                r#"trust      = "${var.ack_controller == 'capability' ? 'eks-capabilities' : 'eks-pods'}""#,
                r#"trust      = "eks""#,
            )
        },
        "stack.toml:72:15",
        &[
            "eks_capability.ack[0] needs capabilities.eks.amazonaws.com to assume this role",
            "its trust does not allow `sts:AssumeRole` for capabilities.eks.amazonaws.com",
        ],
    );
}

#[test]
fn a_capability_of_a_type_terrain_does_not_manage_is_refused_at_plan() {
    refused(
        |s| replace(&s, r#"type     = "ACK""#, r#"type     = "KRO""#),
        "stack.toml:99:13",
        &["eks_capability.ack[0].type:"],
    );
}

/// The stack with `ack_controller` defaulting to the self-managed controller.
fn self_managed(s: String) -> String {
    replace(
        &s,
        r#"default = "capability""#,
        r#"default = "self-managed""#,
    )
}

/// `s` without the grant that lets `iam_role.ack` pass the step's role.
fn without_pass_role(s: String) -> String {
    let line = s
        .lines()
        .find(|l| {
            l.contains(r#"{ actions = ["iam:PassRole"], resources = ["${iam_role.sagemaker.arn}"]"#)
        })
        .expect("the PassRole grant")
        .to_string();
    replace(&s, &format!("{line}\n"), "")
}

#[test]
fn a_self_managed_controller_role_that_cannot_pass_the_pipeline_role_is_refused_at_plan() {
    refused(
        |s| without_pass_role(self_managed(s)),
        "stack.toml:73:14",
        &[
            "iam_role.ack.statements: module.ack[0].kubernetes_manifest.controller submits sagemaker_pipeline.xgboost as this role",
            "SageMaker refuses a pipeline whose role the caller may not pass",
        ],
    );
}

#[test]
fn a_self_managed_controller_role_pods_cannot_assume_is_refused_at_plan() {
    refused(
        |s| {
            replace(
                &self_managed(s),
                r#"trust      = "${var.ack_controller == 'capability' ? 'eks-capabilities' : 'eks-pods'}""#,
                r#"trust      = "eks-capabilities""#,
            )
        },
        "stack.toml:112:17",
        &[
            "module.ack[0].eks_pod_identity_association.controller.role_arn: iam_role.ack has trust =",
            "but EKS Pod Identity assumes the role as pods.eks.amazonaws.com",
        ],
    );
}

#[test]
fn a_bucket_in_another_region_than_the_controller_is_refused_at_plan() {
    let elsewhere = |s: String| {
        let s = replace(
            &s,
            "[providers.aws]\nregion = \"${var.region}\"\n",
            "[providers.aws]\nregion = \"${var.region}\"\n\n[providers.aws.eu]\nregion = \"eu-west-1\"\n",
        );
        replace(
            &s,
            "[s3_bucket.pipelines]\n",
            "[s3_bucket.pipelines]\nprovider = \"aws.eu\"\n",
        )
    };
    refused(
        elsewhere,
        "stack.toml:98:1",
        &["eks_capability.ack[0] submits sagemaker_pipeline.xgboost in us-east-1, but it reads s3_bucket.pipelines in eu-west-1"],
    );
    refused(
        |s| elsewhere(self_managed(s)),
        "ack-sagemaker-controller/main.toml:55:14",
        &["module.ack[0].kubernetes_manifest.controller.template: module.ack[0].kubernetes_manifest.controller submits sagemaker_pipeline.xgboost in us-east-1, but it reads s3_bucket.pipelines in eu-west-1"],
    );
}

/// The next number of a small linear congruential generator (Knuth's MMIX constants):
/// the trials' moments come from a seed printed with every failure.
fn next(state: &mut u64) -> u64 {
    *state = state
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    *state >> 33
}

/// One trial: the whole stack applied and SIGKILLed once `after` resources were created,
/// re-applied, re-planned clean, and destroyed; nothing made twice, nothing left.
fn killed_and_converged(after: usize, seed: u64) {
    let mut work = work();
    let _served = serve(&mut work);
    let out = File::create(work.join("killed.out")).expect("create killed.out");
    let mut child = work
        .command(&["apply", "-s", STACK, "--sandbox", "--auto-approve"], &[])
        .stdout(Stdio::from(out))
        .stderr(Stdio::null())
        .spawn()
        .expect("start the apply to kill");
    let deadline = Instant::now() + Duration::from_secs(600);
    let ended = loop {
        if created(&work).len() >= after {
            break false;
        }
        if child.try_wait().expect("poll the apply").is_some() {
            break true;
        }
        assert!(
            Instant::now() < deadline,
            "seed {seed}: {after} creates not reached in 600 s"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    if !ended {
        child.kill().expect("SIGKILL the apply");
    }
    child.wait().expect("reap the apply");
    let at_kill = created(&work);
    let again = work.run(&["apply", "-s", STACK, "--sandbox", "--auto-approve"]);
    assert_eq!(
        again.code,
        Some(0),
        "seed {seed}: the re-apply after a kill at {after} creates ({at_kill:?}) failed:\n{}{}",
        again.stdout,
        again.stderr
    );
    assert!(
        again.stdout.contains("execution_status = \"Succeeded\""),
        "seed {seed}: {}",
        again.stdout
    );
    work.run(&["plan", "-s", STACK, "--sandbox", "--detailed-exitcode"])
        .success();
    for (noun, count) in [
        ("eks cluster ", 1),
        ("eks capability ", 1),
        ("eks node group ", 2),
        ("sagemaker pipeline ", 1),
        ("sagemaker execution ", 1),
        ("ec2 vpc ", 1),
        ("ec2 subnet ", 5),
        ("iam role ", 4),
        ("kms key ", 1),
        ("s3 bucket ", 1),
        ("s3 object ", 3),
    ] {
        let lines = held(&work, noun);
        assert_eq!(
            lines.len(),
            count,
            "seed {seed}, killed after {after} creates: {noun}{lines:?}"
        );
    }
    work.run(&["destroy", "-s", STACK, "--sandbox", "--auto-approve"])
        .success();
    let left = work.run(&["sandbox", "list"]);
    left.success();
    let lines: Vec<&str> = left.stdout.lines().collect();
    assert!(
        lines.len() == 1 && lines[0].ends_with(" (PendingDeletion)"),
        "seed {seed}: left after destroy: {}",
        left.stdout
    );
}

/// SIGKILL trials of the whole stack (network, roles, key, cluster, node groups, ACK
/// capability, bucket, data, pipeline, execution): each apply is killed once a random
/// number of its 27 resources were created, and the re-apply converges with one
/// pipeline, one execution and nothing made twice. `TERRAIN_TRIAL_SEED` replays a seed.
#[test]
#[ignore = "long: four applies of the 27-resource stack killed at random moments, each re-applied and destroyed (about 8 minutes)"]
fn the_whole_stack_killed_at_random_moments_converges_with_one_execution() {
    let seed = std::env::var("TERRAIN_TRIAL_SEED")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_secs())
        });
    eprintln!("TERRAIN_TRIAL_SEED={seed}");
    let mut state = seed;
    for _ in 0..4 {
        let after = 1 + (next(&mut state) % 26) as usize;
        killed_and_converged(after, seed);
    }
}

#[test]
fn the_self_managed_controller_path_runs_the_pipeline_from_an_empty_sandbox() {
    // The stack's own switch: the Pod Identity agent, an association and the
    // controller's manifests (`stacks/modules/ack-sagemaker-controller`) in place of the
    // capability, for accounts whose policies do not allow capabilities.
    let work = work();
    let scaled = [("TERRAIN_SANDBOX_TIME_SCALE", "0.2")];
    let run = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend([
            "-s",
            STACK,
            "--sandbox",
            "--no-color",
            "--var",
            "ack_controller=self-managed",
        ]);
        work.run_env(&all, &scaled)
    };
    run(&["plan", "--detailed-exitcode"]).expect_code(2);
    let apply = run(&["apply", "--auto-approve"]);
    apply.success();
    assert!(
        apply.stdout.contains("execution_status = \"Succeeded\""),
        "{}",
        apply.stdout
    );
    // The controller was applied after its identity, the pipeline after the controller.
    let at = |what: &str| apply.at(what);
    assert!(
        at("module.ack[0].eks_pod_identity_association.controller: creation complete")
            < at("module.ack[0].kubernetes_manifest.controller: creating...")
    );
    assert!(
        at("module.ack[0].kubernetes_manifest.controller: creation complete")
            < at("sagemaker_pipeline.xgboost: creating...")
    );
    // It runs on the cluster's nodes: applied once they are up.
    for nodes in ["eks_node_group.system", "module.gpu.eks_node_group.main"] {
        assert!(
            at(&format!("{nodes}: creation complete"))
                < at("module.ack[0].kubernetes_manifest.controller: creating...")
        );
    }
    let held = work.run(&["sandbox", "list"]);
    held.success();
    for line in [
        "eks addon us-east-1/ml-pipelines/eks-pod-identity-agent",
        "eks pod identity association us-east-1/ml-pipelines/a-",
        "sagemaker pipeline us-east-1/my-kubernetes-pipeline",
    ] {
        assert!(held.stdout.contains(line), "{line} in:\n{}", held.stdout);
    }
    assert!(!held.stdout.contains("eks capability"), "{}", held.stdout);
    run(&["plan", "--detailed-exitcode"]).expect_code(0);
    let destroy = run(&["destroy", "--auto-approve"]);
    destroy.success();
    // The pipeline went while its controller still ran: before the controller's
    // manifest, whose objects go before the association that gives it its identity.
    let at = |what: &str| destroy.at(what);
    assert!(
        at("sagemaker_pipeline.xgboost: destruction complete")
            < at("module.ack[0].kubernetes_manifest.controller: destroying...")
    );
    // The controller went before the nodes it ran on.
    for nodes in ["eks_node_group.system", "module.gpu.eks_node_group.main"] {
        assert!(
            at("module.ack[0].kubernetes_manifest.controller: destruction complete")
                < at(&format!("{nodes}: destroying..."))
        );
    }
    let left = work.run(&["sandbox", "list"]);
    left.success();
    let lines: Vec<&str> = left.stdout.lines().collect();
    assert!(
        lines.len() == 1 && lines[0].ends_with(" (PendingDeletion)"),
        "{}",
        left.stdout
    );
}
