//! What a SageMaker pipeline's roles must be allowed, checked at plan against the
//! definition: the pipeline's role and every step's `RoleArn` trust SageMaker; a step's
//! role may read each input `S3Uri` and write each `S3OutputPath` (and the other S3
//! outputs), and use the KMS key of a bucket the stack encrypts; a pipeline whose role
//! differs from a step's may pass that role to SageMaker (a warning when the pipeline's
//! role is a literal ARN, whose policies are outside the stack). The definition's S3 paths are
//! `Std:Join`s over `Parameters.*`, evaluated with each execution's parameters (the
//! definition's defaults when the stack runs none).

use std::collections::BTreeMap;

use serde_json::Value;

use super::access::{Decision, Request};
use super::iam_checks::{RoleView, View};
use crate::protocol::{StackFinding, StackResource};

/// One access a step needs.
struct Need {
    action: &'static str,
    resource: String,
    /// What it is for, in the finding (`read s3://b/train/ (step AbaloneTrain)`).
    what: String,
    /// The statement that grants it.
    grant: String,
}

/// Checks `pipeline`'s roles against its definition.
pub(super) fn check(view: &View<'_>, pipeline: &StackResource, out: &mut Vec<StackFinding>) {
    let pipeline_role = RoleView::at(view, pipeline, "role_arn");
    if let Some(role) = &pipeline_role {
        role.trusts_service(
            &pipeline.address,
            "sagemaker.amazonaws.com",
            &["sts:AssumeRole"],
            "the pipeline's role",
            out,
        );
    }
    let Some(definition) = definition(pipeline) else {
        return;
    };
    let runs = runs(view, pipeline, &definition);
    let steps = definition
        .get("Steps")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut seen = std::collections::BTreeSet::new();
    for step in &steps {
        let name = step.get("Name").and_then(Value::as_str).unwrap_or("?");
        let Some(args) = step.get("Arguments") else {
            continue;
        };
        let Some(role) = step_role(view, pipeline, args) else {
            continue;
        };
        let user = format!("{} (step {name})", pipeline.address);
        if seen.insert(role.address().to_string()) {
            role.trusts_service(
                &user,
                "sagemaker.amazonaws.com",
                &["sts:AssumeRole"],
                "the step's execution role",
                out,
            );
        }
        match (&pipeline_role, outside_role(pipeline)) {
            (Some(p), _) if p.address() != role.address() => pass_role(p, &role, &user, out),
            (None, Some(arn)) => out.push(StackFinding::warning(
                &pipeline.address,
                "role_arn",
                format!(
                    "{user}: the pipeline runs as {arn}, which the stack does not make, and starts the step as {}: that role must be allowed iam:PassRole on ${{{}.arn}} with iam:PassedToService = sagemaker.amazonaws.com, which terrain cannot check",
                    role.address(),
                    role.address()
                ),
            )),
            _ => {}
        }
        let mut needs = Vec::new();
        for params in &runs {
            s3_needs(view, args, params, name, &mut needs);
        }
        judge(&role, &user, needs, out);
    }
}

/// The pipeline's role when it is a literal ARN (a role made outside the stack, whose
/// policies the checks cannot read).
fn outside_role(pipeline: &StackResource) -> Option<&str> {
    if pipeline.referenced("role_arn").is_some() {
        return None;
    }
    pipeline
        .spec
        .get("role_arn")
        .and_then(Value::as_str)
        .filter(|a| a.starts_with("arn:"))
}

/// The definition's JSON, from its file or inline text.
fn definition(pipeline: &StackResource) -> Option<Value> {
    let text = match pipeline.spec.get("definition_file").and_then(Value::as_str) {
        Some(file) if !crate::protocol::is_unknown(&Value::String(file.to_string())) => {
            std::fs::read_to_string(file).ok()?
        }
        _ => pipeline.spec.get("definition")?.as_str()?.to_string(),
    };
    serde_json::from_str(&text).ok()
}

/// The parameter values of each run of the pipeline the stack makes (its executions'),
/// over the definition's defaults; the defaults alone when it makes none.
fn runs(
    view: &View<'_>,
    pipeline: &StackResource,
    definition: &Value,
) -> Vec<BTreeMap<String, String>> {
    let defaults: BTreeMap<String, String> = definition
        .get("Parameters")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|p| {
            let name = p.get("Name")?.as_str()?;
            let value = p.get("DefaultValue")?;
            Some((
                name.to_string(),
                value
                    .as_str()
                    .map_or_else(|| value.to_string(), str::to_string),
            ))
        })
        .collect();
    let mut out: Vec<BTreeMap<String, String>> = view
        .of_kind("sagemaker_pipeline_execution")
        .filter(|e| {
            e.referenced("pipeline_name")
                .is_some_and(|(a, _)| a == pipeline.address)
        })
        .map(|e| {
            let mut params = defaults.clone();
            if let Some(Value::Object(given)) = e.spec.get("parameters") {
                for k in given.keys() {
                    match view.text(e, &format!("parameters.{k}")) {
                        Some(v) => params.insert(k.clone(), v),
                        // Unknown: no S3 path made from it is judged.
                        None => params.remove(k),
                    };
                }
            }
            params
        })
        .collect();
    if out.is_empty() {
        out.push(defaults);
    }
    out
}

/// The stack's role a step's `RoleArn` names: a placeholder the pipeline fills from
/// the stack (`substitutions`), or a literal naming one of the stack's roles.
fn step_role<'a>(view: &View<'a>, pipeline: &StackResource, args: &Value) -> Option<RoleView<'a>> {
    let arn = args.get("RoleArn")?.as_str()?;
    if pipeline
        .spec
        .get("substitutions")
        .and_then(|s| s.get(arn))
        .is_some()
    {
        return RoleView::at(view, pipeline, &format!("substitutions.{arn}"));
    }
    RoleView::named(view, arn)
}

/// A definition value (`"s3://…"`, `{"Get": "Parameters.X"}`, `{"Std:Join": …}`) with
/// `params`; `None` when it rests on something not known here.
fn eval(v: &Value, params: &BTreeMap<String, String>) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Object(m) => {
            if let Some(Value::String(get)) = m.get("Get") {
                return params.get(get.strip_prefix("Parameters.")?).cloned();
            }
            let join = m.get("Std:Join")?;
            let on = join.get("On").and_then(Value::as_str).unwrap_or("");
            let parts: Option<Vec<String>> = join
                .get("Values")?
                .as_array()?
                .iter()
                .map(|p| eval(p, params))
                .collect();
            Some(parts?.join(on))
        }
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// The S3 reads and writes a step's arguments ask for.
fn s3_needs(
    view: &View<'_>,
    args: &Value,
    params: &BTreeMap<String, String>,
    step: &str,
    out: &mut Vec<Need>,
) {
    let mut found: Vec<(bool, String)> = Vec::new();
    walk(args, false, params, &mut found);
    for (write, uri) in found {
        let Some((bucket, key)) = uri
            .strip_prefix("s3://")
            .map(|r| r.split_once('/').unwrap_or((r, "")))
        else {
            continue;
        };
        // A stand-in object under the prefix: policies grant prefixes with `*`.
        let object = format!("arn:aws:s3:::{bucket}/{key}object");
        let shown = format!("s3://{bucket}/{key}");
        let (action, verb) = if write {
            ("s3:PutObject", "write")
        } else {
            ("s3:GetObject", "read")
        };
        out.push(Need {
            action,
            resource: object,
            what: format!("{verb} {shown} (step {step})"),
            grant: format!(
                "{{ actions = [\"{action}\"], resources = [\"arn:aws:s3:::{bucket}/{key}*\"] }}"
            ),
        });
        if let Some(key_arn) = bucket_key(view, bucket) {
            let action = if write {
                "kms:GenerateDataKey"
            } else {
                "kms:Decrypt"
            };
            out.push(Need {
                action,
                resource: key_arn.clone(),
                what: format!("{verb} {shown}, encrypted with the bucket's KMS key (step {step})"),
                grant: format!(
                    "{{ actions = [\"kms:Decrypt\", \"kms:GenerateDataKey\"], resources = [\"${{{}}}\"] }}",
                    key_reference(view, bucket).unwrap_or(key_arn)
                ),
            });
        }
    }
}

/// Every S3 location in a step's arguments, with whether it is written.
fn walk(
    v: &Value,
    output: bool,
    params: &BTreeMap<String, String>,
    found: &mut Vec<(bool, String)>,
) {
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                let out = output || k.contains("Output");
                match k.as_str() {
                    "S3OutputPath" => {
                        if let Some(uri) = eval(child, params) {
                            found.push((true, uri));
                        }
                    }
                    "S3Uri" => {
                        if let Some(uri) = eval(child, params) {
                            found.push((out, uri));
                        }
                    }
                    _ => walk(child, out, params, found),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|i| walk(i, output, params, found)),
        _ => {}
    }
}

/// The stack's bucket named `bucket`.
fn bucket_of<'a>(view: &View<'a>, bucket: &str) -> Option<&'a StackResource> {
    view.of_kind("s3_bucket")
        .find(|b| view.text(b, "name").as_deref() == Some(bucket))
}

/// The KMS key ARN (or its stand-in) a bucket of the stack encrypts objects with.
fn bucket_key(view: &View<'_>, bucket: &str) -> Option<String> {
    let b = bucket_of(view, bucket)?;
    let algorithm = view.text(b, "encryption.algorithm")?;
    if !algorithm.starts_with("aws:kms") {
        return None;
    }
    view.text(b, "encryption.kms_key_id")
}

/// How the stack names the key of `bucket` (`kms_key.data.arn`), for the statement to add.
fn key_reference(view: &View<'_>, bucket: &str) -> Option<String> {
    let b = bucket_of(view, bucket)?;
    let (address, attr) = b.referenced("encryption.kms_key_id")?;
    Some(format!("{address}.{attr}"))
}

/// Findings for the needs `role` does not meet.
fn judge(role: &RoleView<'_>, user: &str, needs: Vec<Need>, out: &mut Vec<StackFinding>) {
    let mut said = std::collections::BTreeSet::new();
    for need in needs {
        if !said.insert((need.action, need.resource.clone())) {
            continue;
        }
        let req = Request::new(need.action, &need.resource)
            .with("aws:PrincipalAccount", super::iam_checks::ACCOUNT_STAND_IN)
            .with("aws:ResourceAccount", super::iam_checks::ACCOUNT_STAND_IN);
        let decision = role.may(&req);
        // The account is known only at apply: say so rather than show the stand-in.
        let what = need
            .what
            .replace(super::iam_checks::ACCOUNT_STAND_IN, "<account>");
        let message = |why: &str| {
            format!(
                "{user} runs as this role, which {why} `{}` to {what}; add to statements: {}",
                need.action, need.grant
            )
        };
        match decision {
            Decision::Allowed => {}
            Decision::Denied { explicit: Some(by) } => out.push(StackFinding::error(
                role.address(),
                "statements",
                message(&format!("is denied by {by}")).replace(
                    "; add to statements: ",
                    "; remove that deny or narrow it; the grant: ",
                ),
            )),
            Decision::Denied { explicit: None } if role.unread().is_empty() => out.push(
                StackFinding::error(role.address(), "statements", message("is not allowed")),
            ),
            Decision::Denied { .. } => out.push(StackFinding::warning(
                role.address(),
                "statements",
                message(&format!(
                    "may not be allowed (unless {} grants it)",
                    role.unread().join(", ")
                )),
            )),
            Decision::Undetermined { why } => out.push(StackFinding::warning(
                role.address(),
                "statements",
                message(&format!("may not be allowed ({why})")),
            )),
        }
    }
}

/// The pipeline's role must be allowed to pass the step's role to SageMaker.
fn pass_role(
    pipeline: &RoleView<'_>,
    step: &RoleView<'_>,
    user: &str,
    out: &mut Vec<StackFinding>,
) {
    let req = Request::new("iam:PassRole", step.arn())
        .with("iam:PassedToService", "sagemaker.amazonaws.com");
    let denied = match pipeline.may(&req) {
        Decision::Allowed => return,
        Decision::Denied { .. } if pipeline.unread().is_empty() => true,
        _ => false,
    };
    let message = format!(
        "{user}: the pipeline runs as this role and starts the step as {}, so it must pass that role to SageMaker; add to statements: {{ actions = [\"iam:PassRole\"], resources = [\"${{{}.arn}}\"], condition = {{ StringEquals = {{ \"iam:PassedToService\" = \"sagemaker.amazonaws.com\" }} }} }}",
        step.address(),
        step.address()
    );
    out.push(if denied {
        StackFinding::error(pipeline.address(), "statements", message)
    } else {
        StackFinding::warning(pipeline.address(), "statements", message)
    });
}
