//! What the stack's ACK controllers need, checked at plan across resources (the
//! cluster's authentication mode is the capability's own peer check). A controller is
//! an ACK capability (its role must trust EKS's capabilities principal) or a
//! self-managed one: a `kubernetes_manifest` that serves the SageMaker group, running as
//! a service account that an `eks_pod_identity_association` gives a role (whose trust
//! is the association's own check). Either submits the pipelines on its cluster as that
//! role, so the role must be allowed the SageMaker calls those pipelines and executions
//! cause (in the controller's region) and pass each pipeline's role to SageMaker; and
//! the buckets a pipeline reads must be in the controller's region, where SageMaker runs
//! its steps. A role of the stack is judged on its own policies (see `iam_checks`); a
//! literal ARN is not.

use serde_json::Value;

use super::access::{Decision, Request};
use super::iam_checks::{RoleView, View, ACCOUNT_STAND_IN};
use crate::protocol::{StackFinding, StackResource};

/// The principal EKS capabilities assume their role as.
const PRINCIPAL: &str = "capabilities.eks.amazonaws.com";

/// The API group the ACK SageMaker controller serves.
const GROUP: &str = "sagemaker.services.k8s.aws";

/// The address of the resource `r`'s `cluster` field references.
fn cluster_of(r: &StackResource) -> Option<&str> {
    r.referenced("cluster").map(|(address, _)| address)
}

/// A controller of the stack: the resource that is it, the field a finding about its
/// region belongs at, the role it acts as, and its region.
struct Controller<'a> {
    at: &'a StackResource,
    region_field: &'static str,
    role: RoleView<'a>,
    region: String,
}

/// The stack's checks of its ACK controllers.
pub fn check(view: &View<'_>, out: &mut Vec<StackFinding>) {
    for capability in view.of_kind("eks_capability") {
        if capability.spec["type"].as_str() != Some("ACK") {
            continue;
        }
        let Some(role) = RoleView::at(view, capability, "role_arn") else {
            continue;
        };
        role.trusts_service(
            &capability.address,
            PRINCIPAL,
            &["sts:AssumeRole", "sts:TagSession"],
            "the capability role",
            out,
        );
        let region = capability.config["region"]
            .as_str()
            .unwrap_or("us-east-1")
            .to_string();
        controls(
            view,
            &Controller {
                at: capability,
                region_field: "",
                role,
                region,
            },
            out,
        );
    }
    for manifest in view.of_kind("kubernetes_manifest") {
        let serves = manifest.spec["serves"]
            .as_array()
            .is_some_and(|groups| groups.iter().any(|g| g.as_str() == Some(GROUP)));
        if serves {
            self_managed(view, manifest, out);
        }
    }
}

/// The checks of a controller run from `manifest`: its Deployments' service accounts,
/// the roles the stack's pod identity associations give them, and what it submits.
fn self_managed(view: &View<'_>, manifest: &StackResource, out: &mut Vec<StackFinding>) {
    let objects = manifest.spec["objects"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for deployment in objects
        .iter()
        .filter(|o| o["kind"].as_str() == Some("Deployment"))
    {
        let namespace = deployment["metadata"]["namespace"]
            .as_str()
            .unwrap_or("default");
        let pod = &deployment["spec"]["template"]["spec"];
        let account = pod["serviceAccountName"].as_str().unwrap_or("default");
        let region = region_env(pod);
        let associations: Vec<&StackResource> = view
            .of_kind("eks_pod_identity_association")
            .filter(|a| {
                a.spec["namespace"].as_str() == Some(namespace)
                    && a.spec["service_account"].as_str() == Some(account)
            })
            .collect();
        if associations.is_empty() {
            out.push(StackFinding::warning(
                &manifest.address,
                "serves",
                format!(
                    "the controller runs as the service account {namespace}/{account}, which no eks_pod_identity_association of this stack gives a role: unless it gets credentials another way, every SageMaker call it makes fails; add an eks_pod_identity_association with namespace = \"{namespace}\" and service_account = \"{account}\""
                ),
            ));
            continue;
        }
        for association in associations {
            let Some(role) = RoleView::at(view, association, "role_arn") else {
                continue;
            };
            let region = region
                .clone()
                .or_else(|| association.config["region"].as_str().map(str::to_string))
                .unwrap_or_else(|| "us-east-1".to_string());
            controls(
                view,
                &Controller {
                    at: manifest,
                    region_field: "template",
                    role,
                    region,
                },
                out,
            );
        }
    }
}

/// The region a controller's pod calls AWS in: its containers' `AWS_REGION`.
fn region_env(pod: &Value) -> Option<String> {
    pod["containers"].as_array()?.iter().find_map(|c| {
        c["env"].as_array()?.iter().find_map(|e| {
            (e["name"].as_str() == Some("AWS_REGION"))
                .then(|| e["value"].as_str().map(str::to_string))
                .flatten()
        })
    })
}

/// What `controller` does for the pipelines and executions on its cluster.
fn controls(view: &View<'_>, controller: &Controller<'_>, out: &mut Vec<StackFinding>) {
    let Some(on) = cluster_of(controller.at) else {
        return;
    };
    let region = controller.region.as_str();
    for pipeline in view
        .of_kind("sagemaker_pipeline")
        .filter(|p| cluster_of(p) == Some(on))
    {
        submits(view, controller, pipeline, out);
        same_region(view, controller, pipeline, out);
    }
    for execution in view
        .of_kind("sagemaker_pipeline_execution")
        .filter(|e| cluster_of(e) == Some(on))
    {
        same_region(view, controller, execution, out);
        if let Some(name) = view.text(execution, "pipeline_name") {
            let arn = pipeline_arn(region, &name);
            may(
                controller,
                &execution.address,
                "sagemaker:StartPipelineExecution",
                &arn,
                out,
            );
        }
    }
}

/// The buckets `user` reads (through references in its spec) must be in the
/// controller's region: SageMaker runs the pipeline's steps there, and a training job
/// reads its S3 input only in its own region.
fn same_region(
    view: &View<'_>,
    controller: &Controller<'_>,
    user: &StackResource,
    out: &mut Vec<StackFinding>,
) {
    for bucket in view.referenced_of_kind(user, "s3_bucket") {
        let Some(there) = bucket.config["region"].as_str() else {
            continue;
        };
        if there != controller.region {
            out.push(StackFinding::error(
                &controller.at.address,
                controller.region_field,
                format!(
                    "{} submits {} in {}, but it reads {} in {there}: SageMaker runs the steps in the controller's region and a training job reads S3 only in its own; put the bucket and the controller in one region",
                    controller.at.address, user.address, controller.region, bucket.address
                ),
            ));
        }
    }
}

fn pipeline_arn(region: &str, name: &str) -> String {
    format!(
        "arn:aws:sagemaker:{region}:{ACCOUNT_STAND_IN}:pipeline/{}",
        name.to_ascii_lowercase()
    )
}

/// The calls the controller makes for `pipeline`, as its role.
fn submits(
    view: &View<'_>,
    controller: &Controller<'_>,
    pipeline: &StackResource,
    out: &mut Vec<StackFinding>,
) {
    let Some(name) = view.text(pipeline, "pipeline_name") else {
        return;
    };
    let arn = pipeline_arn(&controller.region, &name);
    for action in ["sagemaker:CreatePipeline", "sagemaker:DescribePipeline"] {
        may(controller, &pipeline.address, action, &arn, out);
    }
    let Some(passed) = view.text(pipeline, "role_arn") else {
        return;
    };
    let passed = passed.replace("<account>", ACCOUNT_STAND_IN);
    let req = Request::new("iam:PassRole", &passed)
        .with("iam:PassedToService", "sagemaker.amazonaws.com")
        .with("aws:PrincipalAccount", ACCOUNT_STAND_IN)
        .with("aws:ResourceAccount", ACCOUNT_STAND_IN);
    let passed_ref = pipeline
        .refs
        .get("role_arn")
        .cloned()
        .unwrap_or_else(|| passed.clone());
    let message = format!(
        "{} submits {} as this role, and SageMaker refuses a pipeline whose role the caller may not pass: the controller would report AccessDenied on every retry; add to statements: {{ actions = [\"iam:PassRole\"], resources = [\"{passed_ref}\"], condition = {{ StringEquals = {{ \"iam:PassedToService\" = \"sagemaker.amazonaws.com\" }} }} }}",
        controller.at.address, pipeline.address
    );
    judge(&controller.role, controller.role.may(&req), message, out);
}

/// One SageMaker call the controller makes for `user` as its role.
fn may(
    controller: &Controller<'_>,
    user: &str,
    action: &str,
    resource: &str,
    out: &mut Vec<StackFinding>,
) {
    let req = Request::new(action, resource)
        .with("aws:PrincipalAccount", ACCOUNT_STAND_IN)
        .with("aws:ResourceAccount", ACCOUNT_STAND_IN);
    let shown = resource.replace(ACCOUNT_STAND_IN, "<account>");
    let message = format!(
        "{} calls `{action}` on {shown} for {user} as this role, which does not allow it; add to statements: {{ actions = [\"{action}\"], resources = [\"{}\"] }}",
        controller.at.address,
        shown.rsplit_once('/').map_or(shown.clone(), |(head, _)| format!("{head}/*"))
    );
    judge(&controller.role, controller.role.may(&req), message, out);
}

/// An error when the role's own policies deny it, a warning when a policy the check
/// cannot read or a condition it cannot settle might grant it.
fn judge(role: &RoleView<'_>, decision: Decision, message: String, out: &mut Vec<StackFinding>) {
    match decision {
        Decision::Allowed => {}
        Decision::Denied { .. } if role.unread().is_empty() => {
            out.push(StackFinding::error(role.address(), "statements", message));
        }
        _ => out.push(StackFinding::warning(role.address(), "statements", message)),
    }
}
