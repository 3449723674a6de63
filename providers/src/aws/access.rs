//! The IAM evaluator the plan's checks ask "may this role do that?": a request (an
//! action on a resource, optionally by a principal, with the condition keys known about
//! it) against policy documents, answered as IAM does for one account: an explicit deny
//! wins, else an allow grants, else it is denied.
//!
//! What it cannot know it says so: a condition on a key the request does not settle (an
//! object's tags in a bucket the stack does not fill, the caller's source IP) or an
//! operator it does not implement makes the statement *undetermined*, and a decision
//! resting on one is [`Decision::Undetermined`], which the checks report as a warning
//! at most. Supported: the `String*`, `Arn*`, `Bool`, `Null` and numeric operators,
//! their `IfExists` forms and the `ForAnyValue:`/`ForAllValues:` qualifiers; `*` and `?`
//! in actions (case-insensitive) and resources; `NotAction`, `NotResource`,
//! `NotPrincipal`; policy variables resolved from the request's keys.

use std::collections::BTreeMap;

use super::policy::{Condition, Document, Effect, Principals, Statement};

/// Who is asking, for trust policies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// An AWS service (`eks.amazonaws.com`).
    Service(String),
    /// An IAM principal's ARN (a role, a user, an account's root).
    Aws(String),
}

/// One request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub action: String,
    /// The resource's ARN; ignored by statements without `Resource` (trust policies).
    pub resource: String,
    pub principal: Option<Principal>,
    /// Condition keys known about the request (lower-cased keys).
    pub keys: BTreeMap<String, Vec<String>>,
    /// Keys known to be absent from it (lower-cased); any other key is unknown.
    pub absent: Vec<String>,
}

impl Request {
    /// `action` on `resource`, with nothing known about its keys.
    pub fn new(action: &str, resource: &str) -> Self {
        Self {
            action: action.to_string(),
            resource: resource.to_string(),
            principal: None,
            keys: BTreeMap::new(),
            absent: Vec::new(),
        }
    }

    /// The same request by `principal`.
    pub fn by(mut self, principal: Principal) -> Self {
        self.principal = Some(principal);
        self
    }

    /// The same request with condition key `key` set to `value`.
    pub fn with(mut self, key: &str, value: &str) -> Self {
        self.keys
            .entry(key.to_lowercase())
            .or_default()
            .push(value.to_string());
        self
    }

    /// The same request with `key` (or, ending in `*`, every key it starts) known absent.
    pub fn without(mut self, key: &str) -> Self {
        self.absent.push(key.to_lowercase());
        self
    }

    fn lookup(&self, key: &str) -> Lookup<'_> {
        let key = key.to_lowercase();
        if let Some(v) = self.keys.get(&key) {
            return Lookup::Values(v);
        }
        let absent = self.absent.iter().any(|a| match a.strip_suffix('*') {
            Some(prefix) => key.starts_with(prefix),
            None => *a == key,
        });
        if absent {
            Lookup::Absent
        } else {
            Lookup::Unknown
        }
    }
}

enum Lookup<'a> {
    Values(&'a [String]),
    Absent,
    Unknown,
}

/// A three-valued truth: conditions may rest on what the plan cannot know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Truth {
    Yes,
    No,
    Unknown,
}

impl Truth {
    fn and(self, other: Truth) -> Truth {
        match (self, other) {
            (Truth::No, _) | (_, Truth::No) => Truth::No,
            (Truth::Yes, Truth::Yes) => Truth::Yes,
            _ => Truth::Unknown,
        }
    }
    fn not(self) -> Truth {
        match self {
            Truth::Yes => Truth::No,
            Truth::No => Truth::Yes,
            Truth::Unknown => Truth::Unknown,
        }
    }
    fn from(b: bool) -> Truth {
        if b {
            Truth::Yes
        } else {
            Truth::No
        }
    }
}

/// IAM's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// An allow applies and no deny can.
    Allowed,
    /// Nothing allows it, or a deny applies (`explicit`, naming the statement).
    Denied { explicit: Option<String> },
    /// It turns on a condition key or operator the plan cannot settle (`why`).
    Undetermined { why: String },
}

impl Decision {
    pub fn allowed(&self) -> bool {
        matches!(self, Decision::Allowed)
    }
    pub fn denied(&self) -> bool {
        matches!(self, Decision::Denied { .. })
    }
}

/// Whether `text` matches IAM wildcard `pattern` (`*` any run, `?` one character).
pub fn wildcard(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    let (mut pi, mut ti) = (0, 0);
    let (mut star, mut mark) = (None, 0);
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

/// Policy variables (`${aws:username}`) replaced from the request's keys; `None` when
/// one is not known. `${*}`, `${?}` and `${$}` stand for the characters themselves.
fn substitute(pattern: &str, req: &Request) -> Option<String> {
    if !pattern.contains("${") {
        return Some(pattern.to_string());
    }
    let mut out = String::new();
    let mut rest = pattern;
    while let Some(i) = rest.find("${") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 2..];
        let end = after.find('}')?;
        let name = &after[..end];
        match name {
            "*" | "?" | "$" => out.push_str(name),
            key => match req.lookup(key) {
                Lookup::Values([one]) => out.push_str(one),
                _ => return None,
            },
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Some(out)
}

fn action_matches(patterns: &[String], action: &str) -> bool {
    let action = action.to_lowercase();
    patterns
        .iter()
        .any(|p| wildcard(&p.to_lowercase(), &action))
}

/// Whether the resource patterns match; unknown when one holds an unknown variable.
fn resource_matches(patterns: &[String], req: &Request) -> Truth {
    let mut unknown = false;
    for p in patterns {
        match substitute(p, req) {
            Some(p) if wildcard(&p, &req.resource) => return Truth::Yes,
            Some(_) => {}
            None => unknown = true,
        }
    }
    if unknown {
        Truth::Unknown
    } else {
        Truth::No
    }
}

fn principal_matches(p: &Principals, who: &Option<Principal>) -> bool {
    if p.anyone {
        return true;
    }
    match who {
        Some(Principal::Service(s)) => p.services.iter().any(|x| x == s),
        Some(Principal::Aws(arn)) => p.aws.iter().any(|x| {
            x == arn
                || (x.ends_with(":root")
                    && arn.split(':').nth(4) == x.split(':').nth(4)
                    && arn.starts_with("arn:aws:iam::"))
                || (x.len() == 12 && arn.split(':').nth(4) == Some(x.as_str()))
        }),
        None => false,
    }
}

/// Whether `statement` applies to `req`, before its effect.
fn applies(s: &Statement, req: &Request) -> Truth {
    let action = if s.actions.is_empty() {
        !action_matches(&s.not_actions, &req.action)
    } else {
        action_matches(&s.actions, &req.action)
    };
    if !action {
        return Truth::No;
    }
    if let Some(p) = &s.principal {
        if !principal_matches(p, &req.principal) {
            return Truth::No;
        }
    }
    if let Some(p) = &s.not_principal {
        if principal_matches(p, &req.principal) {
            return Truth::No;
        }
    }
    let resource = if !s.resources.is_empty() {
        resource_matches(&s.resources, req)
    } else if !s.not_resources.is_empty() {
        resource_matches(&s.not_resources, req).not()
    } else {
        Truth::Yes
    };
    s.conditions
        .iter()
        .fold(resource, |t, c| t.and(condition(c, req)))
}

/// One condition against the request.
fn condition(c: &Condition, req: &Request) -> Truth {
    let mut op = c.operator.as_str();
    let (any, all) = if let Some(rest) = op.strip_prefix("ForAnyValue:") {
        op = rest;
        (true, false)
    } else if let Some(rest) = op.strip_prefix("ForAllValues:") {
        op = rest;
        (false, true)
    } else {
        (false, false)
    };
    let if_exists = op.ends_with("IfExists");
    let op = op.trim_end_matches("IfExists");
    let values = match req.lookup(&c.key) {
        Lookup::Unknown => return Truth::Unknown,
        Lookup::Absent => {
            return match op {
                "Null" => Truth::from(c.values.iter().any(|v| v == "true")),
                _ if if_exists || all => Truth::Yes,
                // A negated operator on a missing key is true, as IAM evaluates it.
                _ if op.contains("Not") => Truth::Yes,
                _ => Truth::No,
            };
        }
        Lookup::Values(v) => v,
    };
    if op == "Null" {
        return Truth::from(c.values.iter().any(|v| v == "false"));
    }
    let Some(test) = operator(op) else {
        return Truth::Unknown;
    };
    let mut wanted = Vec::new();
    for v in &c.values {
        match substitute(v, req) {
            Some(v) => wanted.push(v),
            None => return Truth::Unknown,
        }
    }
    let one = |value: &str| test(value, &wanted);
    if all {
        Truth::from(values.iter().all(|v| one(v)))
    } else if any || values.len() == 1 {
        Truth::from(values.iter().any(|v| one(v)))
    } else {
        // A multivalued key without a qualifier: IAM compares each value; any match.
        Truth::from(values.iter().any(|v| one(v)))
    }
}

type Test = fn(&str, &[String]) -> bool;

/// The test an operator makes of one value against the condition's values.
fn operator(op: &str) -> Option<Test> {
    Some(match op {
        "StringEquals" | "ArnEquals" => |v, w| w.iter().any(|x| x == v),
        "StringNotEquals" | "ArnNotEquals" => |v, w| w.iter().all(|x| x != v),
        "StringEqualsIgnoreCase" => |v, w| w.iter().any(|x| x.eq_ignore_ascii_case(v)),
        "StringNotEqualsIgnoreCase" => |v, w| w.iter().all(|x| !x.eq_ignore_ascii_case(v)),
        "StringLike" | "ArnLike" => |v, w| w.iter().any(|x| wildcard(x, v)),
        "StringNotLike" | "ArnNotLike" => |v, w| w.iter().all(|x| !wildcard(x, v)),
        "Bool" => |v, w| w.iter().any(|x| x.eq_ignore_ascii_case(v)),
        "NumericEquals" => |v, w| numeric(v, w, |a, b| a == b),
        "NumericNotEquals" => |v, w| numeric(v, w, |a, b| a != b),
        "NumericLessThan" => |v, w| numeric(v, w, |a, b| a < b),
        "NumericLessThanEquals" => |v, w| numeric(v, w, |a, b| a <= b),
        "NumericGreaterThan" => |v, w| numeric(v, w, |a, b| a > b),
        "NumericGreaterThanEquals" => |v, w| numeric(v, w, |a, b| a >= b),
        _ => return None,
    })
}

fn numeric(v: &str, w: &[String], cmp: fn(f64, f64) -> bool) -> bool {
    let Ok(v) = v.parse::<f64>() else {
        return false;
    };
    w.iter()
        .filter_map(|x| x.parse::<f64>().ok())
        .any(|x| cmp(v, x))
}

/// A statement that decided (or could decide) a request, for messages.
fn label(s: &Statement, doc: &str) -> String {
    match &s.sid {
        Some(sid) => format!("{doc} (statement {sid})"),
        None => doc.to_string(),
    }
}

/// `req` against `policies` (each with a name for messages), as IAM decides for one
/// account: explicit deny, else allow, else implicit deny.
pub fn evaluate(policies: &[(&str, &Document)], req: &Request) -> Decision {
    let mut allowed = false;
    let mut maybe_allowed: Option<String> = None;
    let mut maybe_denied: Option<String> = None;
    for (name, doc) in policies {
        for s in &doc.statements {
            let t = applies(s, req);
            match (s.effect, t) {
                (Effect::Deny, Truth::Yes) => {
                    return Decision::Denied {
                        explicit: Some(label(s, name)),
                    }
                }
                (Effect::Deny, Truth::Unknown) => {
                    maybe_denied.get_or_insert_with(|| label(s, name));
                }
                (Effect::Allow, Truth::Yes) => allowed = true,
                (Effect::Allow, Truth::Unknown) => {
                    maybe_allowed.get_or_insert_with(|| label(s, name));
                }
                (_, Truth::No) => {}
            }
        }
    }
    match (allowed, maybe_denied, maybe_allowed) {
        (true, None, _) => Decision::Allowed,
        (true, Some(deny), _) => Decision::Undetermined {
            why: format!("a deny in {deny} may apply"),
        },
        (false, _, Some(allow)) => Decision::Undetermined {
            why: format!("only {allow} could allow it, on a condition the plan cannot settle"),
        },
        (false, _, None) => Decision::Denied { explicit: None },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aws::policy::{managed, trust_document};
    use serde_json::json;

    fn doc(v: serde_json::Value) -> Document {
        Document::parse(&v).expect("valid document")
    }

    #[test]
    fn wildcards_match_as_iam_does() {
        assert!(wildcard("s3:Get*", "s3:GetObject"));
        assert!(wildcard(
            "arn:aws:s3:::*sagemaker*",
            "arn:aws:s3:::my-sagemaker-data/x"
        ));
        assert!(!wildcard(
            "arn:aws:s3:::*sagemaker*",
            "arn:aws:s3:::ml-pipelines-1/x"
        ));
        assert!(wildcard("ec2:Describe?pc*", "ec2:DescribeVpcs"));
        assert!(wildcard("*", ""));
        assert!(!wildcard("a?c", "ac"));
    }

    #[test]
    fn actions_are_case_insensitive_resources_are_not() {
        let d = doc(
            json!({"Statement": [{"Effect": "Allow", "Action": "S3:getobject",
                                          "Resource": "arn:aws:s3:::Data/*"}]}),
        );
        let p = [("inline", &d)];
        assert!(evaluate(&p, &Request::new("s3:GetObject", "arn:aws:s3:::Data/k")).allowed());
        assert!(evaluate(&p, &Request::new("s3:GetObject", "arn:aws:s3:::data/k")).denied());
    }

    #[test]
    fn explicit_deny_wins_over_any_allow() {
        let allow =
            doc(json!({"Statement": {"Effect": "Allow", "Action": "s3:*", "Resource": "*"}}));
        let deny = doc(json!({"Statement": {"Sid": "NoDelete", "Effect": "Deny",
                                             "Action": "s3:DeleteObject", "Resource": "*"}}));
        let p = [("admin", &allow), ("guard", &deny)];
        assert_eq!(
            evaluate(&p, &Request::new("s3:DeleteObject", "arn:aws:s3:::b/k")),
            Decision::Denied {
                explicit: Some("guard (statement NoDelete)".to_string())
            }
        );
        assert!(evaluate(&p, &Request::new("s3:GetObject", "arn:aws:s3:::b/k")).allowed());
    }

    #[test]
    fn not_action_and_not_resource_invert() {
        let d = doc(
            json!({"Statement": {"Effect": "Allow", "NotAction": "iam:*",
                                          "NotResource": "arn:aws:s3:::secret/*"}}),
        );
        let p = [("d", &d)];
        assert!(evaluate(&p, &Request::new("s3:GetObject", "arn:aws:s3:::b/k")).allowed());
        assert!(evaluate(&p, &Request::new("iam:PassRole", "*")).denied());
        assert!(evaluate(&p, &Request::new("s3:GetObject", "arn:aws:s3:::secret/k")).denied());
    }

    #[test]
    fn conditions_on_known_absent_and_unknown_keys() {
        let d = doc(
            json!({"Statement": {"Effect": "Allow", "Action": "iam:PassRole",
            "Resource": "*",
            "Condition": {"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}}}}),
        );
        let p = [("pass", &d)];
        let req = Request::new("iam:PassRole", "arn:aws:iam::1:role/x");
        assert!(evaluate(
            &p,
            &req.clone()
                .with("iam:PassedToService", "sagemaker.amazonaws.com")
        )
        .allowed());
        assert!(evaluate(
            &p,
            &req.clone()
                .with("iam:PassedToService", "glue.amazonaws.com")
        )
        .denied());
        assert!(evaluate(&p, &req.clone().without("iam:PassedToService")).denied());
        assert!(matches!(evaluate(&p, &req), Decision::Undetermined { .. }));
    }

    #[test]
    fn if_exists_null_and_qualifiers() {
        let d = doc(json!({"Statement": [
            {"Effect": "Allow", "Action": "s3:PutObject", "Resource": "*",
             "Condition": {"StringEqualsIfExists": {"s3:x-amz-server-side-encryption": "aws:kms"}}},
            {"Effect": "Allow", "Action": "s3:GetObject", "Resource": "*",
             "Condition": {"Null": {"aws:TokenIssueTime": "true"}}},
            {"Effect": "Allow", "Action": "ec2:CreateTags", "Resource": "*",
             "Condition": {"ForAllValues:StringEquals": {"aws:TagKeys": ["team", "env"]}}}
        ]}));
        let p = [("d", &d)];
        let put = Request::new("s3:PutObject", "arn:aws:s3:::b/k");
        assert!(evaluate(&p, &put.clone().without("s3:x-amz-server-side-encryption")).allowed());
        assert!(evaluate(&p, &put.with("s3:x-amz-server-side-encryption", "AES256")).denied());
        let get = Request::new("s3:GetObject", "arn:aws:s3:::b/k");
        assert!(evaluate(&p, &get.clone().without("aws:TokenIssueTime")).allowed());
        assert!(evaluate(&p, &get.with("aws:TokenIssueTime", "2026-01-01")).denied());
        let tags = Request::new("ec2:CreateTags", "*")
            .with("aws:TagKeys", "team")
            .with("aws:TagKeys", "env");
        assert!(evaluate(&p, &tags).allowed());
        let extra = Request::new("ec2:CreateTags", "*")
            .with("aws:TagKeys", "team")
            .with("aws:TagKeys", "owner");
        assert!(evaluate(&p, &extra).denied());
    }

    #[test]
    fn policy_variables_resolve_from_known_keys() {
        let d = doc(
            json!({"Statement": {"Effect": "Allow", "Action": "s3:GetObject",
            "Resource": "arn:aws:s3:::home/${aws:username}/*"}}),
        );
        let p = [("d", &d)];
        let req = Request::new("s3:GetObject", "arn:aws:s3:::home/ana/notes");
        assert!(evaluate(&p, &req.clone().with("aws:username", "ana")).allowed());
        assert!(evaluate(&p, &req.clone().with("aws:username", "bo")).denied());
        assert!(matches!(evaluate(&p, &req), Decision::Undetermined { .. }));
    }

    #[test]
    fn unsupported_operators_are_undetermined_not_allowed() {
        let d = doc(
            json!({"Statement": {"Effect": "Allow", "Action": "s3:*", "Resource": "*",
            "Condition": {"IpAddress": {"aws:SourceIp": "10.0.0.0/8"}}}}),
        );
        let req = Request::new("s3:GetObject", "arn:aws:s3:::b/k").with("aws:SourceIp", "10.1.2.3");
        assert!(matches!(
            evaluate(&[("d", &d)], &req),
            Decision::Undetermined { .. }
        ));
    }

    #[test]
    fn trust_policies_match_the_service_principal_and_action() {
        let t = trust_document(&json!("eks")).expect("preset");
        let p = [("trust", &t)];
        let eks = Principal::Service("eks.amazonaws.com".into());
        let role = "arn:aws:iam::123456789012:role/cluster";
        assert!(evaluate(&p, &Request::new("sts:AssumeRole", role).by(eks.clone())).allowed());
        assert!(evaluate(&p, &Request::new("sts:TagSession", role).by(eks)).allowed());
        let ec2 = Principal::Service("ec2.amazonaws.com".into());
        assert!(evaluate(&p, &Request::new("sts:AssumeRole", role).by(ec2)).denied());
        let acct = trust_document(&json!({"accounts": ["111122223333"]})).expect("table");
        let someone = Principal::Aws("arn:aws:iam::111122223333:role/ci".into());
        assert!(evaluate(
            &[("t", &acct)],
            &Request::new("sts:AssumeRole", role).by(someone)
        )
        .allowed());
    }

    /// The trap: AmazonSageMakerFullAccess reaches only buckets named for SageMaker.
    #[test]
    fn sagemaker_full_access_reaches_only_sagemaker_named_buckets() {
        let full = managed("AmazonSageMakerFullAccess").expect("in the catalog");
        let p = [("AmazonSageMakerFullAccess", &full.document)];
        let put = |bucket: &str| {
            Request::new(
                "s3:PutObject",
                &format!("arn:aws:s3:::{bucket}/out/model.tar.gz"),
            )
            .without("s3:ExistingObjectTag/*")
        };
        assert!(evaluate(&p, &put("my-sagemaker-bucket")).allowed());
        assert!(evaluate(&p, &put("ml-pipelines-123456789012")).denied());
        let get = Request::new(
            "s3:GetObject",
            "arn:aws:s3:::ml-pipelines-123456789012/train/x",
        );
        // Objects tagged SageMaker=true would be readable: unknown unless the tags are.
        assert!(matches!(
            evaluate(&p, &get.clone()),
            Decision::Undetermined { .. }
        ));
        assert!(evaluate(&p, &get.without("s3:ExistingObjectTag/*")).denied());
        let pass = Request::new("iam:PassRole", "arn:aws:iam::123456789012:role/exec");
        assert!(evaluate(
            &p,
            &pass
                .clone()
                .with("iam:PassedToService", "sagemaker.amazonaws.com")
        )
        .allowed());
        assert!(evaluate(&p, &pass.with("iam:PassedToService", "eks.amazonaws.com")).denied());
        let kms = Request::new("kms:Decrypt", "arn:aws:kms:us-east-1:123456789012:key/k");
        assert!(evaluate(&p, &kms).denied());
    }
}
