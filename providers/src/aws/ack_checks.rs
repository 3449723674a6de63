//! What the stack's ACK controllers need, checked at plan across resources (the
//! cluster's authentication mode is the capability's own peer check): its role must
//! trust EKS's capabilities principal; and the controller submits the stack's pipelines
//! and runs as that role,
//! so the role must be allowed the SageMaker calls those pipelines and executions cause
//! (in the provider's region) and pass each pipeline's role to SageMaker. A role of
//! the stack is judged on its own policies (see `iam_checks`); a literal ARN is not.

use super::access::{Decision, Request};
use super::iam_checks::{RoleView, View, ACCOUNT_STAND_IN};
use crate::protocol::{StackFinding, StackResource};

/// The principal EKS capabilities assume their role as.
const PRINCIPAL: &str = "capabilities.eks.amazonaws.com";

/// The address of the resource `r`'s `cluster` field references.
fn cluster_of(r: &StackResource) -> Option<&str> {
    r.referenced("cluster").map(|(address, _)| address)
}

/// The stack's checks of its ACK capabilities.
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
        let Some(on) = cluster_of(capability) else {
            continue;
        };
        let region = capability.config["region"].as_str().unwrap_or("us-east-1");
        for pipeline in view
            .of_kind("sagemaker_pipeline")
            .filter(|p| cluster_of(p) == Some(on))
        {
            submits(view, &role, capability, pipeline, region, out);
        }
        for execution in view
            .of_kind("sagemaker_pipeline_execution")
            .filter(|e| cluster_of(e) == Some(on))
        {
            if let Some(name) = view.text(execution, "pipeline_name") {
                let arn = pipeline_arn(region, &name);
                may(
                    &role,
                    capability,
                    &execution.address,
                    "sagemaker:StartPipelineExecution",
                    &arn,
                    out,
                );
            }
        }
    }
}

fn pipeline_arn(region: &str, name: &str) -> String {
    format!(
        "arn:aws:sagemaker:{region}:{ACCOUNT_STAND_IN}:pipeline/{}",
        name.to_ascii_lowercase()
    )
}

/// The calls the controller makes for `pipeline`, as the capability's role.
fn submits(
    view: &View<'_>,
    role: &RoleView<'_>,
    capability: &StackResource,
    pipeline: &StackResource,
    region: &str,
    out: &mut Vec<StackFinding>,
) {
    let Some(name) = view.text(pipeline, "pipeline_name") else {
        return;
    };
    let arn = pipeline_arn(region, &name);
    for action in ["sagemaker:CreatePipeline", "sagemaker:DescribePipeline"] {
        may(role, capability, &pipeline.address, action, &arn, out);
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
        capability.address, pipeline.address
    );
    judge(role, role.may(&req), message, out);
}

/// One SageMaker call the controller makes for `user` as the role.
fn may(
    role: &RoleView<'_>,
    capability: &StackResource,
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
        capability.address,
        shown.rsplit_once('/').map_or(shown.clone(), |(head, _)| format!("{head}/*"))
    );
    judge(role, role.may(&req), message, out);
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
