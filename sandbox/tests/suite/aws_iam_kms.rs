//! IAM, STS and KMS in the sandbox: every request sent and every answer received checked
//! against the botocore models in `contracts/` (query-protocol XML element by element,
//! KMS's JSON member by member, required members included); the official `aws` CLI
//! creating and reading roles, managed policy attachments, keys, aliases and the
//! caller's identity; the refusals IAM and KMS make, with their codes; faults injected
//! in each service's own terms; and roles and keys surviving a restart.

use std::time::Duration;

use crate::aws_eks_sagemaker::Aws;
use crate::common::{assert_botocore, botocore_violations};
use serde_json::{json, Value};
use terrain_sandbox::{Options, Sandbox, Timing};

const TRUST_EKS: &str = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"eks.amazonaws.com"},"Action":"sts:AssumeRole"}]}"#;
/// Codes KMS answers that its model does not declare: the common validation error, and
/// the refusal of the `alias/aws/` names kept for AWS managed keys.
const KMS_ERRORS_OUTSIDE_THE_MODEL: &[&str] = &["ValidationException", "NotAuthorizedException"];
const EKS_POLICY: &str = "arn:aws:iam::aws:policy/AmazonEKSClusterPolicy";

fn iam_model() -> Value {
    terrain_contracts::botocore("iam", "2010-05-08")
}

fn sts_model() -> Value {
    terrain_contracts::botocore("sts", "2011-06-15")
}

fn kms_model() -> Value {
    terrain_contracts::botocore("kms", "2014-11-01")
}

async fn start(state_file: Option<std::path::PathBuf>) -> Sandbox {
    Sandbox::start(Options {
        timing: Timing::instant(),
        state_file,
        ..Options::google_apis_on()
    })
    .await
    .expect("sandbox starts")
}

// ------------------------------------------------------------ raw requests

/// RFC 3986 percent-encoding of a form value.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// Signed for `service` in `region`: the sandbox routes by the credential scope and,
/// like any emulator without the caller's secret, cannot check the signature itself.
fn signed(
    http: &reqwest::Client,
    url: &str,
    service: &str,
    region: &str,
) -> reqwest::RequestBuilder {
    http.post(url).header(
        "authorization",
        format!("AWS4-HMAC-SHA256 Credential=AKIDSANDBOX/20261121/{region}/{service}/aws4_request, SignedHeaders=host;x-amz-date, Signature=0"),
    )
}

struct Answer {
    status: u16,
    body: String,
}

/// Where a query-protocol request's parameters stray from the operation's input shape:
/// a parameter that is no member (by its first segment: `Tags.member.1.Key` is `Tags`),
/// a required member left out.
fn query_request_violations(model: &Value, op: &str, params: &[(&str, &str)]) -> Vec<String> {
    let Some(input) = model["operations"][op]["input"]["shape"].as_str() else {
        return if params.is_empty() {
            Vec::new()
        } else {
            vec![format!("{op} takes no input")]
        };
    };
    let shape = &model["shapes"][input];
    let mut out = Vec::new();
    for (k, _) in params {
        let first = k.split('.').next().unwrap_or_default();
        if shape["members"].get(first).is_none() {
            out.push(format!("{op}: {k} is not a member of {input}"));
        }
    }
    for r in shape["required"].as_array().into_iter().flatten() {
        let r = r.as_str().unwrap_or_default();
        if !params.iter().any(|(k, _)| k.split('.').next() == Some(r)) {
            out.push(format!("{op}: required {r} left out"));
        }
    }
    out
}

/// Where a query-protocol XML element strays from `shape`: elements that are no member,
/// required members missing, list items not named `member`, numbers, booleans and
/// dates that are not, strings outside an enum.
fn query_violations(model: &Value, shape: &str, node: roxmltree::Node, at: &str) -> Vec<String> {
    let s = &model["shapes"][shape];
    let mut out = Vec::new();
    let text = node.text().unwrap_or_default();
    let children: Vec<roxmltree::Node> = node.children().filter(|c| c.is_element()).collect();
    match s["type"].as_str().unwrap_or_default() {
        "structure" => {
            let members = s["members"].as_object().cloned().unwrap_or_default();
            let wire =
                |name: &str, m: &Value| m["locationName"].as_str().unwrap_or(name).to_string();
            for child in &children {
                let name = child.tag_name().name();
                match members.iter().find(|(n, m)| wire(n, m) == name) {
                    Some((_, m)) => out.extend(query_violations(
                        model,
                        m["shape"].as_str().unwrap_or_default(),
                        *child,
                        &format!("{at}.{name}"),
                    )),
                    None => out.push(format!("{at}: {name} is not a member of {shape}")),
                }
            }
            for r in s["required"].as_array().into_iter().flatten() {
                let r = r.as_str().unwrap_or_default();
                let name = wire(r, &members[r]);
                if !children.iter().any(|c| c.tag_name().name() == name) {
                    out.push(format!("{at}: required {r} of {shape} missing"));
                }
            }
        }
        "list" => {
            let item = s["member"]["locationName"].as_str().unwrap_or("member");
            for child in &children {
                if child.tag_name().name() != item {
                    out.push(format!(
                        "{at}: list item {} is not {item}",
                        child.tag_name().name()
                    ));
                }
                out.extend(query_violations(
                    model,
                    s["member"]["shape"].as_str().unwrap_or_default(),
                    *child,
                    &format!("{at}.{item}"),
                ));
            }
        }
        "integer" | "long" if text.parse::<i64>().is_err() => {
            out.push(format!("{at}: {text:?} is not a whole number"))
        }
        "boolean" if text != "true" && text != "false" => {
            out.push(format!("{at}: {text:?} is not a boolean"))
        }
        "timestamp" if chrono::DateTime::parse_from_rfc3339(text).is_err() => {
            out.push(format!("{at}: {text:?} is not an ISO 8601 date"))
        }
        "string" => {
            if !children.is_empty() {
                out.push(format!("{at}: a string with child elements"));
            }
            if let Some(values) = s["enum"].as_array() {
                if !values.iter().any(|v| v == text) {
                    out.push(format!("{at}: {text:?} is not a value of {shape}"));
                }
            }
        }
        _ => {}
    }
    out
}

/// Checks a whole query-protocol answer to `op`: the `<OpResponse>` envelope, the
/// result wrapper against the output shape (or no wrapper when the operation has no
/// output), and the request id.
fn assert_query_answer(model: &Value, op: &str, body: &str) {
    let doc = roxmltree::Document::parse(body).expect("well-formed XML");
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), format!("{op}Response"), "{body}");
    let output = &model["operations"][op]["output"];
    let mut problems = Vec::new();
    let mut saw_metadata = false;
    for child in root.children().filter(|c| c.is_element()) {
        let name = child.tag_name().name();
        if name == "ResponseMetadata" {
            saw_metadata = child.children().any(|c| {
                c.tag_name().name() == "RequestId" && c.text().is_some_and(|t| !t.is_empty())
            });
        } else if Some(name) == output["resultWrapper"].as_str() {
            let shape = output["shape"].as_str().unwrap_or_default();
            problems.extend(query_violations(model, shape, child, shape));
        } else {
            problems.push(format!("{op}: unexpected element {name}"));
        }
    }
    if let Some(wrapper) = output["resultWrapper"].as_str() {
        if !root.children().any(|c| c.tag_name().name() == wrapper) {
            problems.push(format!("{op}: no {wrapper}"));
        }
    }
    assert!(saw_metadata, "{op}: no request id in {body}");
    assert!(problems.is_empty(), "{problems:#?}\nin {body}");
}

/// Required members of `shape` missing from `value`, at any depth.
fn json_missing_required(model: &Value, shape: &str, value: &Value, at: &str) -> Vec<String> {
    let s = &model["shapes"][shape];
    let mut out = Vec::new();
    match s["type"].as_str().unwrap_or_default() {
        "structure" => {
            for r in s["required"].as_array().into_iter().flatten() {
                let r = r.as_str().unwrap_or_default();
                if value.get(r).is_none() {
                    out.push(format!("{at}: required {r} of {shape} missing"));
                }
            }
            for (k, v) in value.as_object().into_iter().flatten() {
                if let Some(member) = s["members"][k]["shape"].as_str() {
                    out.extend(json_missing_required(
                        model,
                        member,
                        v,
                        &format!("{at}.{k}"),
                    ));
                }
            }
        }
        "list" => {
            let member = s["member"]["shape"].as_str().unwrap_or_default();
            for (i, v) in value.as_array().into_iter().flatten().enumerate() {
                out.extend(json_missing_required(
                    model,
                    member,
                    v,
                    &format!("{at}[{i}]"),
                ));
            }
        }
        _ => {}
    }
    out
}

/// A KMS answer checked against the operation's output shape.
fn assert_kms_answer(model: &Value, op: &str, value: &Value) {
    let Some(shape) = model["operations"][op]["output"]["shape"].as_str() else {
        assert!(
            value.as_object().is_none_or(|o| o.is_empty()),
            "{op} has no output: {value}"
        );
        return;
    };
    let mut problems = botocore_violations(model, shape, value, shape);
    problems.extend(json_missing_required(model, shape, value, shape));
    assert!(problems.is_empty(), "{problems:#?}\nin {value:#}");
}

struct Client {
    http: reqwest::Client,
    url: String,
    iam: Value,
    sts: Value,
    kms: Value,
}

impl Client {
    fn new(sandbox: &Sandbox) -> Client {
        Client {
            http: reqwest::Client::new(),
            url: sandbox.url(),
            iam: iam_model(),
            sts: sts_model(),
            kms: kms_model(),
        }
    }

    /// A query-protocol call whose parameters are checked against the model first.
    async fn query(&self, service: &str, op: &str, params: &[(&str, &str)]) -> Answer {
        let (model, version) = match service {
            "iam" => (&self.iam, "2010-05-08"),
            _ => (&self.sts, "2011-06-15"),
        };
        let problems = query_request_violations(model, op, params);
        assert!(problems.is_empty(), "{problems:#?}");
        let mut body = format!("Action={op}&Version={version}");
        for (k, v) in params {
            body.push_str(&format!("&{k}={}", encode(v)));
        }
        let resp = signed(&self.http, &self.url, service, "us-east-1")
            .header(
                "content-type",
                "application/x-www-form-urlencoded; charset=utf-8",
            )
            .body(body)
            .send()
            .await
            .expect("the sandbox answers");
        Answer {
            status: resp.status().as_u16(),
            body: resp.text().await.expect("a body"),
        }
    }

    /// An IAM call that must succeed; its answer is checked against the model.
    async fn iam_ok(&self, op: &str, params: &[(&str, &str)]) -> String {
        let a = self.query("iam", op, params).await;
        assert_eq!(a.status, 200, "{op}: {}", a.body);
        assert_query_answer(&self.iam, op, &a.body);
        a.body
    }

    /// An IAM call that must fail with `status` and `code`, in IAM's error format.
    async fn iam_fails(
        &self,
        op: &str,
        params: &[(&str, &str)],
        status: u16,
        code: &str,
    ) -> String {
        let a = self.query("iam", op, params).await;
        assert_eq!(a.status, status, "{op}: {}", a.body);
        assert_iam_error(&a.body, code);
        a.body
    }

    /// A KMS call, its JSON body checked against the input shape first.
    async fn kms(&self, region: &str, op: &str, body: Value) -> (u16, Value) {
        if let Some(input) = self.kms["operations"][op]["input"]["shape"].as_str() {
            let mut problems = botocore_violations(&self.kms, input, &body, input);
            problems.extend(json_missing_required(&self.kms, input, &body, input));
            assert!(problems.is_empty(), "{problems:#?}");
        }
        let resp = signed(&self.http, &self.url, "kms", region)
            .header("x-amz-target", format!("TrentService.{op}"))
            .header("content-type", "application/x-amz-json-1.1")
            .body(body.to_string())
            .send()
            .await
            .expect("the sandbox answers");
        let status = resp.status().as_u16();
        let text = resp.text().await.expect("a body");
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    async fn kms_ok(&self, op: &str, body: Value) -> Value {
        let (status, value) = self.kms("us-east-1", op, body).await;
        assert_eq!(status, 200, "{op}: {value}");
        assert_kms_answer(&self.kms, op, &value);
        value
    }

    async fn kms_fails(&self, op: &str, body: Value, code: &str) -> String {
        let (status, value) = self.kms("us-east-1", op, body).await;
        assert_eq!(
            (status, value["__type"].as_str()),
            (400, Some(code)),
            "{op}: {value}"
        );
        assert!(
            self.kms["shapes"]
                .get(code)
                .is_some_and(|s| s["exception"] == true)
                || KMS_ERRORS_OUTSIDE_THE_MODEL.contains(&code),
            "{code} is not an error of the KMS model"
        );
        value["message"].as_str().unwrap_or_default().to_string()
    }
}

fn assert_iam_error(body: &str, code: &str) {
    let doc = roxmltree::Document::parse(body).expect("well-formed XML");
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "ErrorResponse", "{body}");
    assert_eq!(
        root.tag_name().namespace(),
        Some("https://iam.amazonaws.com/doc/2010-05-08/")
    );
    let error = root
        .children()
        .find(|c| c.tag_name().name() == "Error")
        .expect("an Error element");
    let text = |n: &str| {
        error
            .children()
            .find(|c| c.tag_name().name() == n)
            .and_then(|c| c.text())
            .unwrap_or_default()
            .to_string()
    };
    assert_eq!(text("Code"), code, "{body}");
    assert_eq!(text("Type"), "Sender", "{body}");
    assert!(!text("Message").is_empty(), "{body}");
    assert!(
        root.children().any(|c| c.tag_name().name() == "RequestId"),
        "{body}"
    );
}

fn element_text(body: &str, name: &str) -> Option<String> {
    let doc = roxmltree::Document::parse(body).ok()?;
    doc.descendants()
        .find(|n| n.tag_name().name() == name)
        .and_then(|n| n.text())
        .map(str::to_string)
}

// ------------------------------------------------------------ the tests

#[tokio::test]
async fn iam_and_sts_answers_follow_the_botocore_models() {
    let sandbox = start(None).await;
    let c = Client::new(&sandbox);
    let made = c
        .iam_ok(
            "CreateRole",
            &[
                ("RoleName", "eks-cluster"),
                ("Path", "/ml/"),
                ("AssumeRolePolicyDocument", TRUST_EKS),
                ("Description", "the cluster's role"),
                ("MaxSessionDuration", "7200"),
                ("Tags.member.1.Key", "managed-by"),
                ("Tags.member.1.Value", "terrain"),
            ],
        )
        .await;
    assert_eq!(
        element_text(&made, "Arn").as_deref(),
        Some("arn:aws:iam::123456789012:role/ml/eks-cluster")
    );
    let got = c.iam_ok("GetRole", &[("RoleName", "eks-cluster")]).await;
    // IAM answers policy documents URL-encoded.
    assert_eq!(
        element_text(&got, "AssumeRolePolicyDocument").as_deref(),
        Some(encode(TRUST_EKS).as_str())
    );
    c.iam_ok(
        "UpdateRole",
        &[("RoleName", "eks-cluster"), ("Description", "d")],
    )
    .await;
    c.iam_ok(
        "UpdateAssumeRolePolicy",
        &[("RoleName", "eks-cluster"), ("PolicyDocument", TRUST_EKS)],
    )
    .await;
    c.iam_ok(
        "TagRole",
        &[
            ("RoleName", "eks-cluster"),
            ("Tags.member.1.Key", "team"),
            ("Tags.member.1.Value", "ml"),
        ],
    )
    .await;
    c.iam_ok(
        "UntagRole",
        &[("RoleName", "eks-cluster"), ("TagKeys.member.1", "team")],
    )
    .await;
    c.iam_ok("ListRoleTags", &[("RoleName", "eks-cluster")])
        .await;
    c.iam_ok("ListRoles", &[("PathPrefix", "/ml/"), ("MaxItems", "10")])
        .await;
    c.iam_ok(
        "AttachRolePolicy",
        &[("RoleName", "eks-cluster"), ("PolicyArn", EKS_POLICY)],
    )
    .await;
    c.iam_ok("ListAttachedRolePolicies", &[("RoleName", "eks-cluster")])
        .await;
    let inline = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"kms:DescribeKey","Resource":"*"}]}"#;
    c.iam_ok(
        "PutRolePolicy",
        &[
            ("RoleName", "eks-cluster"),
            ("PolicyName", "keys"),
            ("PolicyDocument", inline),
        ],
    )
    .await;
    c.iam_ok(
        "GetRolePolicy",
        &[("RoleName", "eks-cluster"), ("PolicyName", "keys")],
    )
    .await;
    c.iam_ok("ListRolePolicies", &[("RoleName", "eks-cluster")])
        .await;
    let policy = c.iam_ok("GetPolicy", &[("PolicyArn", EKS_POLICY)]).await;
    assert_eq!(
        element_text(&policy, "AttachmentCount").as_deref(),
        Some("1")
    );
    let version = element_text(&policy, "DefaultVersionId").expect("a default version");
    c.iam_ok(
        "GetPolicyVersion",
        &[("PolicyArn", EKS_POLICY), ("VersionId", &version)],
    )
    .await;
    c.iam_ok(
        "DeleteRolePolicy",
        &[("RoleName", "eks-cluster"), ("PolicyName", "keys")],
    )
    .await;
    c.iam_ok(
        "DetachRolePolicy",
        &[("RoleName", "eks-cluster"), ("PolicyArn", EKS_POLICY)],
    )
    .await;
    c.iam_ok("DeleteRole", &[("RoleName", "eks-cluster")]).await;

    let me = c.query("sts", "GetCallerIdentity", &[]).await;
    assert_eq!(me.status, 200, "{}", me.body);
    assert_query_answer(&c.sts, "GetCallerIdentity", &me.body);
    assert_eq!(
        element_text(&me.body, "Account").as_deref(),
        Some("123456789012")
    );
    sandbox.shutdown().await;
}

#[tokio::test]
async fn iam_refuses_what_iam_refuses() {
    let sandbox = start(None).await;
    let c = Client::new(&sandbox);
    let role = [
        ("RoleName", "node"),
        ("AssumeRolePolicyDocument", TRUST_EKS),
    ];
    c.iam_ok("CreateRole", &role).await;
    c.iam_fails("CreateRole", &role, 409, "EntityAlreadyExists")
        .await;
    c.iam_fails("GetRole", &[("RoleName", "nope")], 404, "NoSuchEntity")
        .await;
    c.iam_fails(
        "CreateRole",
        &[
            ("RoleName", "bad"),
            ("AssumeRolePolicyDocument", "{\"Statement\": 1"),
        ],
        400,
        "MalformedPolicyDocument",
    )
    .await;
    c.iam_fails(
        "CreateRole",
        &[
            ("RoleName", "bad name"),
            ("AssumeRolePolicyDocument", TRUST_EKS),
        ],
        400,
        "ValidationError",
    )
    .await;
    c.iam_fails(
        "AttachRolePolicy",
        &[
            ("RoleName", "node"),
            ("PolicyArn", "arn:aws:iam::aws:policy/NoSuchPolicy"),
        ],
        404,
        "NoSuchEntity",
    )
    .await;
    c.iam_ok(
        "AttachRolePolicy",
        &[("RoleName", "node"), ("PolicyArn", EKS_POLICY)],
    )
    .await;
    c.iam_fails("DeleteRole", &[("RoleName", "node")], 409, "DeleteConflict")
        .await;
    c.iam_fails(
        "DetachRolePolicy",
        &[
            ("RoleName", "node"),
            (
                "PolicyArn",
                "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy",
            ),
        ],
        404,
        "NoSuchEntity",
    )
    .await;
    for code in [
        "EntityAlreadyExists",
        "NoSuchEntity",
        "MalformedPolicyDocument",
        "DeleteConflict",
        "LimitExceeded",
    ] {
        assert!(
            c.iam["shapes"]
                .as_object()
                .into_iter()
                .flatten()
                .any(|(_, s)| s["error"]["code"] == code),
            "{code} is not an error of the IAM model"
        );
    }
    sandbox.shutdown().await;
}

#[tokio::test]
async fn kms_answers_and_refusals_follow_the_botocore_model() {
    let sandbox = start(None).await;
    let c = Client::new(&sandbox);
    let made = c
        .kms_ok(
            "CreateKey",
            json!({"Description": "state", "Tags": [{"TagKey": "managed-by", "TagValue": "terrain"}]}),
        )
        .await;
    let id = made["KeyMetadata"]["KeyId"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let arn = made["KeyMetadata"]["Arn"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert_eq!(arn, format!("arn:aws:kms:us-east-1:123456789012:key/{id}"));
    c.kms_ok(
        "CreateAlias",
        json!({"AliasName": "alias/state", "TargetKeyId": id}),
    )
    .await;
    let message = c
        .kms_fails(
            "CreateAlias",
            json!({"AliasName": "alias/state", "TargetKeyId": id}),
            "AlreadyExistsException",
        )
        .await;
    assert!(message.contains("alias/state"), "{message}");
    c.kms_fails(
        "CreateAlias",
        json!({"AliasName": "alias/aws/mine", "TargetKeyId": id}),
        "NotAuthorizedException",
    )
    .await;
    let d = c
        .kms_ok("DescribeKey", json!({"KeyId": "alias/state"}))
        .await;
    assert_eq!(d["KeyMetadata"]["KeyId"], json!(id));
    c.kms_ok("ListKeys", json!({"Limit": 10})).await;
    c.kms_ok("ListAliases", json!({"KeyId": id})).await;
    c.kms_ok("EnableKeyRotation", json!({"KeyId": id})).await;
    c.kms_ok("GetKeyRotationStatus", json!({"KeyId": id})).await;
    c.kms_ok("DisableKeyRotation", json!({"KeyId": id})).await;
    c.kms_ok(
        "UpdateKeyDescription",
        json!({"KeyId": id, "Description": "terrain state"}),
    )
    .await;
    c.kms_ok(
        "TagResource",
        json!({"KeyId": id, "Tags": [{"TagKey": "team", "TagValue": "ml"}]}),
    )
    .await;
    c.kms_ok("UntagResource", json!({"KeyId": id, "TagKeys": ["team"]}))
        .await;
    c.kms_ok("ListResourceTags", json!({"KeyId": id})).await;
    c.kms_ok("DisableKey", json!({"KeyId": id})).await;
    c.kms_ok("EnableKey", json!({"KeyId": id})).await;
    let scheduled = c
        .kms_ok(
            "ScheduleKeyDeletion",
            json!({"KeyId": id, "PendingWindowInDays": 7}),
        )
        .await;
    assert_eq!(scheduled["KeyState"], "PendingDeletion");
    c.kms_fails(
        "ScheduleKeyDeletion",
        json!({"KeyId": id}),
        "KMSInvalidStateException",
    )
    .await;
    c.kms_fails(
        "GetKeyRotationStatus",
        json!({"KeyId": id}),
        "KMSInvalidStateException",
    )
    .await;
    // The alias of a key pending deletion is still listed.
    let aliases = c.kms_ok("ListAliases", json!({})).await;
    assert_eq!(aliases["Aliases"][0]["TargetKeyId"], json!(id));
    c.kms_ok("CancelKeyDeletion", json!({"KeyId": id})).await;
    let d = c.kms_ok("DescribeKey", json!({"KeyId": arn})).await;
    assert_eq!(d["KeyMetadata"]["KeyState"], "Disabled");
    c.kms_ok(
        "UpdateAlias",
        json!({"AliasName": "alias/state", "TargetKeyId": id}),
    )
    .await;
    c.kms_ok("DeleteAlias", json!({"AliasName": "alias/state"}))
        .await;
    c.kms_fails(
        "DescribeKey",
        json!({"KeyId": "alias/state"}),
        "NotFoundException",
    )
    .await;
    // Keys belong to their region.
    let (status, other) = c
        .kms("eu-west-1", "DescribeKey", json!({"KeyId": id}))
        .await;
    assert_eq!(
        (status, other["__type"].as_str()),
        (400, Some("NotFoundException"))
    );
    sandbox.shutdown().await;
}

#[tokio::test]
async fn faults_answer_in_each_services_terms() {
    let sandbox = start(None).await;
    let c = Client::new(&sandbox);
    sandbox.faults().burst(429, 1, 2);
    let a = c.query("iam", "ListRoles", &[]).await;
    assert_eq!(a.status, 400, "{}", a.body);
    assert_eq!(element_text(&a.body, "Code").as_deref(), Some("Throttling"));
    c.iam_ok("ListRoles", &[]).await;
    sandbox.faults().burst(429, 1, 2);
    let (status, body) = c.kms("us-east-1", "ListKeys", json!({})).await;
    assert_eq!(
        (status, body["__type"].as_str()),
        (400, Some("ThrottlingException"))
    );
    sandbox.faults().burst(500, 1, 0);
    let a = c.query("sts", "GetCallerIdentity", &[]).await;
    assert_eq!(a.status, 500, "{}", a.body);
    assert_eq!(element_text(&a.body, "Type").as_deref(), Some("Receiver"));
    sandbox.shutdown().await;
}

#[tokio::test]
async fn roles_and_keys_survive_a_restart() {
    let dir = tempfile::tempdir().expect("temp dir");
    let state = dir.path().join("state.json");
    let sandbox = start(Some(state.clone())).await;
    let c = Client::new(&sandbox);
    c.iam_ok(
        "CreateRole",
        &[
            ("RoleName", "kept"),
            ("AssumeRolePolicyDocument", TRUST_EKS),
        ],
    )
    .await;
    c.iam_ok(
        "AttachRolePolicy",
        &[("RoleName", "kept"), ("PolicyArn", EKS_POLICY)],
    )
    .await;
    let made = c.kms_ok("CreateKey", json!({})).await;
    let id = made["KeyMetadata"]["KeyId"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    c.kms_ok(
        "CreateAlias",
        json!({"AliasName": "alias/kept", "TargetKeyId": id}),
    )
    .await;
    sandbox.shutdown().await;

    let again = start(Some(state)).await;
    let c = Client::new(&again);
    let listed = c
        .iam_ok("ListAttachedRolePolicies", &[("RoleName", "kept")])
        .await;
    assert_eq!(
        element_text(&listed, "PolicyArn").as_deref(),
        Some(EKS_POLICY)
    );
    let d = c
        .kms_ok("DescribeKey", json!({"KeyId": "alias/kept"}))
        .await;
    assert_eq!(d["KeyMetadata"]["KeyId"], json!(id));
    assert!(
        again.inventory().iter().any(|l| l == "iam role /kept"),
        "{:?}",
        again.inventory()
    );
    again.shutdown().await;
}

#[tokio::test]
async fn the_aws_cli_manages_roles_keys_and_aliases() {
    let sandbox = start(None).await;
    let Some(aws) = Aws::new(&sandbox).await else {
        return;
    };
    let kms = kms_model();

    let made = aws
        .json(&[
            "iam",
            "create-role",
            "--role-name",
            "eks-cluster",
            "--assume-role-policy-document",
            TRUST_EKS,
            "--tags",
            "Key=managed-by,Value=terrain",
        ])
        .await;
    assert_eq!(
        made["Role"]["Arn"],
        "arn:aws:iam::123456789012:role/eks-cluster"
    );
    let got = aws
        .json(&["iam", "get-role", "--role-name", "eks-cluster"])
        .await;
    // The CLI decodes the URL-encoded document into JSON, as against AWS.
    let trust: Value = serde_json::from_str(TRUST_EKS).expect("JSON");
    assert_eq!(got["Role"]["AssumeRolePolicyDocument"], trust);
    assert_eq!(got["Role"]["MaxSessionDuration"], 3600);
    assert!(got["Role"]["RoleId"]
        .as_str()
        .is_some_and(|id| id.starts_with("AROA")));
    aws.json(&[
        "iam",
        "attach-role-policy",
        "--role-name",
        "eks-cluster",
        "--policy-arn",
        EKS_POLICY,
    ])
    .await;
    let attached = aws
        .json(&[
            "iam",
            "list-attached-role-policies",
            "--role-name",
            "eks-cluster",
        ])
        .await;
    assert_eq!(
        attached["AttachedPolicies"],
        json!([{"PolicyName": "AmazonEKSClusterPolicy", "PolicyArn": EKS_POLICY}])
    );
    let policy = aws
        .json(&["iam", "get-policy", "--policy-arn", EKS_POLICY])
        .await;
    assert_eq!(policy["Policy"]["AttachmentCount"], 1);

    // The refusals, as the CLI reports them.
    let conflict = aws
        .fails(
            &["iam", "delete-role", "--role-name", "eks-cluster"],
            "DeleteConflict",
        )
        .await;
    assert!(
        conflict.contains("must detach all policies first"),
        "{conflict}"
    );
    aws.fails(
        &[
            "iam",
            "attach-role-policy",
            "--role-name",
            "eks-cluster",
            "--policy-arn",
            "arn:aws:iam::aws:policy/AmazonEKSClusterPolicyy",
        ],
        "NoSuchEntity",
    )
    .await;
    aws.fails(
        &[
            "iam",
            "create-role",
            "--role-name",
            "broken",
            "--assume-role-policy-document",
            r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"eks.amazonaws.com"},"Action":"sts:AssumeRole","Resource":"*"}]}"#,
        ],
        "MalformedPolicyDocument",
    )
    .await;
    aws.fails(
        &[
            "iam",
            "create-role",
            "--role-name",
            "eks-cluster",
            "--assume-role-policy-document",
            TRUST_EKS,
        ],
        "EntityAlreadyExists",
    )
    .await;
    aws.json(&[
        "iam",
        "detach-role-policy",
        "--role-name",
        "eks-cluster",
        "--policy-arn",
        EKS_POLICY,
    ])
    .await;
    aws.json(&["iam", "delete-role", "--role-name", "eks-cluster"])
        .await;
    aws.fails(
        &["iam", "get-role", "--role-name", "eks-cluster"],
        "NoSuchEntity",
    )
    .await;

    let me = aws.json(&["sts", "get-caller-identity"]).await;
    assert_eq!(me["Account"], "123456789012");
    assert_eq!(me["Arn"], "arn:aws:iam::123456789012:user/sandbox");
    assert_botocore(&sts_model(), "GetCallerIdentityResponse", &me);

    let key = aws
        .json(&[
            "kms",
            "create-key",
            "--description",
            "terrain state",
            "--tags",
            "TagKey=managed-by,TagValue=terrain",
        ])
        .await;
    assert_kms_answer(&kms, "CreateKey", &key);
    let id = key["KeyMetadata"]["KeyId"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    aws.json(&[
        "kms",
        "create-alias",
        "--alias-name",
        "alias/terrain-state",
        "--target-key-id",
        &id,
    ])
    .await;
    aws.fails(
        &[
            "kms",
            "create-alias",
            "--alias-name",
            "alias/terrain-state",
            "--target-key-id",
            &id,
        ],
        "AlreadyExistsException",
    )
    .await;
    let described = aws
        .json(&["kms", "describe-key", "--key-id", "alias/terrain-state"])
        .await;
    assert_kms_answer(&kms, "DescribeKey", &described);
    assert_eq!(described["KeyMetadata"]["KeyId"], json!(id));
    assert_eq!(described["KeyMetadata"]["KeyState"], "Enabled");
    let scheduled = aws
        .json(&[
            "kms",
            "schedule-key-deletion",
            "--key-id",
            &id,
            "--pending-window-in-days",
            "7",
        ])
        .await;
    assert_kms_answer(&kms, "ScheduleKeyDeletion", &scheduled);
    assert_eq!(scheduled["KeyState"], "PendingDeletion");
    assert_eq!(scheduled["PendingWindowInDays"], 7);
    aws.fails(
        &["kms", "schedule-key-deletion", "--key-id", &id],
        "KMSInvalidStateException",
    )
    .await;

    // Seven days on, the key and its alias are gone.
    sandbox.advance_clock(Duration::from_secs(7 * 24 * 3600 + 1));
    aws.fails(
        &["kms", "describe-key", "--key-id", &id],
        "NotFoundException",
    )
    .await;
    let aliases = aws.json(&["kms", "list-aliases"]).await;
    assert_eq!(aliases["Aliases"], json!([]));
    sandbox.shutdown().await;
}
