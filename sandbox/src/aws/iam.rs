//! IAM (the query protocol: form-encoded `Action=…&Version=2010-05-08`, XML answers,
//! `<ErrorResponse>` errors), as far as terrain's roles need it: roles (create, read,
//! update, trust policy, tags, list, delete — refused while policies remain), their
//! attached managed policies and inline policies, and the AWS managed policy catalog
//! (`providers/data/aws-managed-policies.json`, read once) that `AttachRolePolicy`,
//! `GetPolicy` and `GetPolicyVersion` answer from. Policy documents are checked the way
//! IAM checks them (`MalformedPolicyDocument`) and returned URL-encoded, as IAM returns
//! them. IAM is global: roles are one set whatever region a request was signed for.
//!
//! This file also owns what a role is to the other emulators: [`role`] finds one by ARN
//! with its trust policy parsed, [`trusts`] says whether it lets a service assume it,
//! so EKS and SageMaker can refuse roles that do not exist or do not trust them, and
//! [`allows`] evaluates its policies for one request, so a controller acting as a role
//! (ACK) is refused what the role may not do.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::query::{list, param, params, respond, structs};
use super::xml::Element;
use super::{AwsError, AwsRequest, AwsResponse, ACCOUNT};
use crate::capacity::AwsCapacity;
use crate::http::percent_encode;

const XMLNS: &str = "https://iam.amazonaws.com/doc/2010-05-08/";
/// What IAM allows at most: managed policies per role (the default quota), tags per role.
const MAX_ATTACHED: usize = 10;
const MAX_TAGS: usize = 50;

/// Every emulated role.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub(crate) struct Iam {
    #[serde(default)]
    roles: Vec<Role>,
}

/// A role as GetRole reports it, with what is attached to it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Role {
    pub name: String,
    pub path: String,
    pub id: String,
    pub arn: String,
    pub created: DateTime<Utc>,
    /// The trust policy as sent (IAM answers it as sent, URL-encoded).
    pub trust_document: String,
    /// The same, parsed (checked to be a policy document when it was set).
    pub trust: Value,
    #[serde(default)]
    pub description: Option<String>,
    pub max_session_duration: i64,
    #[serde(default)]
    pub tags: Vec<(String, String)>,
    /// ARNs of the attached managed policies, in attachment order.
    #[serde(default)]
    pub attached: Vec<String>,
    /// Inline policies: name → document as sent.
    #[serde(default)]
    pub inline: BTreeMap<String, String>,
    /// Made from the capacity configuration (`AwsCapacity::roles`): the account had it
    /// before anything ran, so the inventory does not list it.
    #[serde(default)]
    pub configured: bool,
}

/// The role `arn` names, if it exists.
pub(crate) fn role<'a>(iam: &'a Iam, arn: &str) -> Option<&'a Role> {
    iam.roles.iter().find(|r| r.arn == arn)
}

/// Whether `role`'s trust policy lets `service_principal` (`eks.amazonaws.com`) assume
/// it: an `Allow` statement whose actions include `sts:AssumeRole` (or a wildcard
/// covering it) and whose principal is that service, or anyone (`"*"`).
pub(crate) fn trusts(role: &Role, service_principal: &str) -> bool {
    statements(&role.trust).iter().any(|s| {
        let allows = s["Effect"] == "Allow";
        let assumes = strings(&s["Action"]).iter().any(|a| {
            let a = a.to_ascii_lowercase();
            a == "sts:assumerole" || a == "sts:*" || a == "*"
        });
        let principal = &s["Principal"];
        let names = principal == "*"
            || strings(&principal["Service"]).contains(&service_principal)
            || strings(&principal["AWS"]).contains(&"*");
        allows && assumes && names
    })
}

/// What a role's identity policies say about one request, as IAM decides it for one
/// account: an explicit `Deny` wins, else an `Allow` grants, else the request is denied
/// implicitly. `keys` are the request's condition keys (`iam:PassedToService`).
/// Conditions with the `String*` and `Arn*` operators (and their `IfExists` forms) are
/// evaluated; a statement with any other operator is taken not to apply, so an
/// emulated controller is never allowed more than the cloud would allow it.
pub(crate) fn allows(role: &Role, action: &str, resource: &str, keys: &[(&str, &str)]) -> bool {
    let mut documents: Vec<Value> = role
        .attached
        .iter()
        .filter_map(|arn| managed_policy(arn).map(|(_, p)| p.document.clone()))
        .collect();
    documents.extend(
        role.inline
            .values()
            .filter_map(|text| serde_json::from_str::<Value>(text).ok()),
    );
    let mut allowed = false;
    for doc in &documents {
        for s in statements(doc) {
            if !applies(s, action, resource, keys) {
                continue;
            }
            match s["Effect"].as_str() {
                Some("Deny") => return false,
                Some("Allow") => allowed = true,
                _ => {}
            }
        }
    }
    allowed
}

/// The message IAM's callers relay when `role` may not do `action` on `resource`, as
/// the session a controller runs under sees it.
pub(crate) fn not_authorized(role: &Role, session: &str, action: &str, resource: &str) -> String {
    format!(
        "User: arn:aws:sts::{ACCOUNT}:assumed-role/{}/{session} is not authorized to perform: {action} on resource: {resource} because no identity-based policy allows the {action} action",
        role.name
    )
}

/// Whether statement `s` covers the request.
fn applies(s: &Value, action: &str, resource: &str, keys: &[(&str, &str)]) -> bool {
    let action_ok = match (s.get("Action"), s.get("NotAction")) {
        (Some(a), _) => strings(a)
            .iter()
            .any(|p| glob(&p.to_ascii_lowercase(), &action.to_ascii_lowercase())),
        (None, Some(n)) => !strings(n)
            .iter()
            .any(|p| glob(&p.to_ascii_lowercase(), &action.to_ascii_lowercase())),
        (None, None) => false,
    };
    let resource_ok = match (s.get("Resource"), s.get("NotResource")) {
        (Some(r), _) => strings(r).iter().any(|p| glob(p, resource)),
        (None, Some(n)) => !strings(n).iter().any(|p| glob(p, resource)),
        (None, None) => false,
    };
    action_ok && resource_ok && conditions_hold(&s["Condition"], keys)
}

/// Whether every condition of a statement holds for the request's keys.
fn conditions_hold(conditions: &Value, keys: &[(&str, &str)]) -> bool {
    let Some(ops) = conditions.as_object() else {
        return true;
    };
    ops.iter().all(|(op, tests)| {
        let (base, if_exists) = match op.strip_suffix("IfExists") {
            Some(b) => (b, true),
            None => (op.as_str(), false),
        };
        let like = match base {
            "StringEquals" | "ArnEquals" => false,
            "StringLike" | "ArnLike" => true,
            "StringEqualsIgnoreCase" => false,
            _ => return false,
        };
        let Some(tests) = tests.as_object() else {
            return false;
        };
        tests.iter().all(|(key, wanted)| {
            let found = keys
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(key))
                .map(|(_, v)| *v);
            match found {
                None => if_exists,
                Some(v) => strings(wanted).iter().any(|w| {
                    if like {
                        glob(w, v)
                    } else if base == "StringEqualsIgnoreCase" {
                        w.eq_ignore_ascii_case(v)
                    } else {
                        *w == v
                    }
                }),
            }
        })
    })
}

/// IAM's wildcard match: `*` any run of characters, `?` one character.
fn glob(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

/// IAM holding `roles`, for tests of what runs as them.
#[cfg(test)]
pub(crate) fn holding(roles: Vec<Role>) -> Iam {
    Iam { roles }
}

/// A role holding `attached` managed policies and `inline` documents, for tests of
/// what acts as it.
#[cfg(test)]
pub(crate) fn role_with(attached: &[&str], inline: &[&str]) -> Role {
    Role {
        name: "controller".into(),
        path: "/".into(),
        id: "AROAEXAMPLE".into(),
        arn: format!("arn:aws:iam::{ACCOUNT}:role/controller"),
        created: Utc::now(),
        trust_document: String::new(),
        trust: Value::Null,
        description: None,
        max_session_duration: 3600,
        tags: Vec::new(),
        attached: attached.iter().map(|a| a.to_string()).collect(),
        inline: inline
            .iter()
            .enumerate()
            .map(|(i, d)| (format!("p{i}"), d.to_string()))
            .collect(),
        configured: false,
    }
}

/// A statement list: `Statement` as an array, or the one statement object.
fn statements(doc: &Value) -> Vec<&Value> {
    match &doc["Statement"] {
        Value::Array(items) => items.iter().collect(),
        one @ Value::Object(_) => vec![one],
        _ => Vec::new(),
    }
}

/// A string or a list of strings, as policy elements are written.
fn strings(v: &Value) -> Vec<&str> {
    match v {
        Value::String(s) => vec![s.as_str()],
        Value::Array(items) => items.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

// ---------------------------------------------------------------- the managed catalog

/// An AWS managed policy of the catalog.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct ManagedPolicy {
    pub path: String,
    pub version: String,
    pub updated: String,
    pub document: Value,
}

#[derive(Deserialize)]
struct Catalog {
    policies: BTreeMap<String, ManagedPolicy>,
}

static CATALOG: LazyLock<BTreeMap<String, ManagedPolicy>> = LazyLock::new(|| {
    let text = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../providers/data/aws-managed-policies.json"
    ));
    // The file is checked in and read by a unit test: a parse failure is caught there.
    serde_json::from_str::<Catalog>(text)
        .map(|c| c.policies)
        .unwrap_or_default()
});

/// The AWS managed policy `arn` names (`arn:aws:iam::aws:policy<path><name>`): its name
/// and entry.
pub(crate) fn managed_policy(arn: &str) -> Option<(&'static str, &'static ManagedPolicy)> {
    let rest = arn.strip_prefix("arn:aws:iam::aws:policy")?;
    let (path, name) = rest.rsplit_once('/')?;
    let (name, policy) = CATALOG.get_key_value(name)?;
    (policy.path == format!("{path}/")).then_some((name.as_str(), policy))
}

fn managed_arn(name: &str, policy: &ManagedPolicy) -> String {
    format!("arn:aws:iam::aws:policy{}{name}", policy.path)
}

// ---------------------------------------------------------------- policy documents

fn malformed(message: impl Into<String>) -> AwsError {
    AwsError::new(400, "MalformedPolicyDocument", message)
}

/// Which rules a document is checked by: a role's trust policy names who may assume it
/// and has no resources; a permissions policy has resources and names no principal.
#[derive(Clone, Copy, PartialEq)]
enum PolicyKind {
    Trust,
    Permissions,
}

const TOP_ELEMENTS: &[&str] = &["Version", "Id", "Statement"];
const STATEMENT_ELEMENTS: &[&str] = &[
    "Sid",
    "Effect",
    "Principal",
    "NotPrincipal",
    "Action",
    "NotAction",
    "Resource",
    "NotResource",
    "Condition",
];
const TRUST_ACTIONS: &[&str] = &[
    "sts:AssumeRole",
    "sts:AssumeRoleWithSAML",
    "sts:AssumeRoleWithWebIdentity",
    "sts:SetSourceIdentity",
    "sts:TagSession",
    "sts:SetContext",
];

/// Checks `text` as IAM checks a policy document, with IAM's messages; the parsed
/// document when it passes.
fn check_policy(text: &str, kind: PolicyKind) -> Result<Value, AwsError> {
    let doc: Value =
        serde_json::from_str(text).map_err(|_| malformed("This policy contains invalid Json"))?;
    let list = check_syntax(&doc)?;
    // The grammar comes first: a malformed document of the old version is reported as
    // malformed, not as old.
    if doc.get("Version").and_then(Value::as_str) != Some("2012-10-17") {
        return Err(malformed(
            "Policy document must be version 2012-10-17 or greater.",
        ));
    }
    check_unique_sids(&list)?;
    for s in &list {
        check_actions_and_resources(s)?;
    }
    match kind {
        PolicyKind::Trust => check_trust_statements(&list)?,
        PolicyKind::Permissions => check_permission_statements(&list)?,
    }
    Ok(doc)
}

/// A policy element that may be one string or a list of strings.
fn string_or_strings(v: &Value) -> bool {
    match v {
        Value::String(_) => true,
        Value::Array(items) => items.iter().all(Value::is_string),
        _ => false,
    }
}

/// The grammar step of [`check_policy`]: the document's top-level elements and every
/// statement's; the statements when all are well-formed.
fn check_syntax(doc: &Value) -> Result<Vec<&Value>, AwsError> {
    let syntax = || malformed("Syntax errors in policy.");
    let Some(top) = doc.as_object() else {
        return Err(syntax());
    };
    if top.keys().any(|k| !TOP_ELEMENTS.contains(&k.as_str())) {
        return Err(syntax());
    }
    match top.get("Version") {
        None => {}
        Some(Value::String(v)) if v == "2012-10-17" || v == "2008-10-17" => {}
        Some(_) => return Err(syntax()),
    }
    if top.get("Id").is_some_and(|id| !id.is_string()) {
        return Err(syntax());
    }
    let list = statements(doc);
    if list.is_empty() {
        return Err(syntax());
    }
    for s in &list {
        check_statement_syntax(s)?;
    }
    Ok(list)
}

/// The grammar of one statement: known elements of the right types, and principals of
/// the kinds IAM recognises.
fn check_statement_syntax(s: &Value) -> Result<(), AwsError> {
    let syntax = || malformed("Syntax errors in policy.");
    let Some(obj) = s.as_object() else {
        return Err(syntax());
    };
    if obj
        .keys()
        .any(|k| !STATEMENT_ELEMENTS.contains(&k.as_str()))
        || (obj.contains_key("Action") && obj.contains_key("NotAction"))
        || (obj.contains_key("Resource") && obj.contains_key("NotResource"))
        || !matches!(
            obj.get("Effect").and_then(Value::as_str),
            Some("Allow" | "Deny")
        )
        || obj.get("Sid").is_some_and(|v| !v.is_string())
        || obj.get("Condition").is_some_and(|v| !v.is_object())
    {
        return Err(syntax());
    }
    for key in ["Action", "NotAction", "Resource", "NotResource"] {
        if obj.get(key).is_some_and(|v| !string_or_strings(v)) {
            return Err(syntax());
        }
    }
    for key in ["Principal", "NotPrincipal"] {
        if let Some(p) = obj.get(key) {
            let ok = p == "*"
                || p.as_object().is_some_and(|m| {
                    !m.is_empty()
                        && m.iter().all(|(k, v)| {
                            ["AWS", "Service", "Federated", "CanonicalUser"].contains(&k.as_str())
                                && string_or_strings(v)
                        })
                });
            if !ok {
                return Err(malformed("Invalid principal in policy"));
            }
        }
    }
    Ok(())
}

/// Statement ids, where given, are unique within the document.
fn check_unique_sids(list: &[&Value]) -> Result<(), AwsError> {
    let mut sids: Vec<&str> = Vec::new();
    for s in list {
        if let Some(sid) = s["Sid"].as_str().filter(|s| !s.is_empty()) {
            if sids.contains(&sid) {
                return Err(malformed(
                    "Statement IDs (SID) in a single policy must be unique.",
                ));
            }
            sids.push(sid);
        }
    }
    Ok(())
}

/// One statement's actions (present, each `vendor:action` or `*`) and resources (each
/// an ARN or `*`).
fn check_actions_and_resources(s: &Value) -> Result<(), AwsError> {
    let actions: Vec<&str> = strings(&s["Action"])
        .into_iter()
        .chain(strings(&s["NotAction"]))
        .collect();
    if actions.is_empty() {
        return Err(malformed("Policy statement must contain actions."));
    }
    for a in &actions {
        let parts: Vec<&str> = a.split(':').collect();
        match parts.as_slice() {
            ["*"] => {}
            [_] => {
                return Err(malformed(
                    "Actions/Conditions must be prefaced by a vendor, e.g., iam, sdb, ec2, etc.",
                ))
            }
            [vendor, _] => {
                if *vendor != "*"
                    && !vendor
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
                {
                    return Err(malformed(format!("Vendor {vendor} is not valid")));
                }
            }
            _ => return Err(malformed("Actions/Condition can contain only one colon.")),
        }
    }
    for r in strings(&s["Resource"])
        .into_iter()
        .chain(strings(&s["NotResource"]))
    {
        if r != "*" && !r.starts_with("arn:") {
            return Err(malformed(format!(
                "Resource {r} must be in ARN format or \"*\"."
            )));
        }
    }
    Ok(())
}

/// The rules of a trust policy: only `sts:` assume actions, a principal, no resource.
fn check_trust_statements(list: &[&Value]) -> Result<(), AwsError> {
    for s in list {
        if strings(&s["Action"])
            .iter()
            .any(|a| !TRUST_ACTIONS.contains(a))
        {
            return Err(malformed(
                "Trust Policy statement actions can only be sts:AssumeRole, sts:AssumeRoleWithSAML,  and sts:AssumeRoleWithWebIdentity",
            ));
        }
        if s.get("Resource").is_some() || s.get("NotResource").is_some() {
            return Err(malformed("Has prohibited field Resource."));
        }
        if s.get("Principal").is_none() && s.get("NotPrincipal").is_none() {
            return Err(malformed("Missing required field Principal."));
        }
    }
    Ok(())
}

/// The rules of a permissions policy: resources, and no principal.
fn check_permission_statements(list: &[&Value]) -> Result<(), AwsError> {
    for s in list {
        if s.get("Principal").is_some() || s.get("NotPrincipal").is_some() {
            return Err(malformed("Policy document should not specify a principal."));
        }
        let resources: Vec<&str> = strings(&s["Resource"])
            .into_iter()
            .chain(strings(&s["NotResource"]))
            .collect();
        if resources.is_empty() {
            return Err(malformed("Policy statement must contain resources."));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------- validation

/// IAM's validation error for one parameter (`roleName`) and the constraint it breaks.
fn invalid(value: Option<&str>, member: &str, constraint: &str) -> AwsError {
    let value = value.map_or("null".to_string(), |v| format!("'{v}'"));
    AwsError::new(
        400,
        "ValidationError",
        format!(
            "1 validation error detected: Value {value} at '{member}' failed to satisfy constraint: {constraint}"
        ),
    )
}

/// A required parameter (`RoleName`, reported as `roleName`).
fn required<'a>(params: &'a [(String, String)], name: &str) -> Result<&'a str, AwsError> {
    param(params, name).ok_or_else(|| invalid(None, &lower_first(name), "Member must not be null"))
}

fn lower_first(name: &str) -> String {
    let mut chars = name.chars();
    chars
        .next()
        .map(|c| c.to_ascii_lowercase().to_string() + chars.as_str())
        .unwrap_or_default()
}

/// A name of pattern `[\w+=,.@-]+` and `max` characters at most (role and policy names).
fn check_name<'a>(
    params: &'a [(String, String)],
    param_name: &str,
    max: usize,
) -> Result<&'a str, AwsError> {
    let name = required(params, param_name)?;
    let member = lower_first(param_name);
    if name.is_empty() {
        return Err(invalid(
            Some(name),
            &member,
            "Member must have length greater than or equal to 1",
        ));
    }
    if name.chars().count() > max {
        return Err(invalid(
            Some(name),
            &member,
            &format!("Member must have length less than or equal to {max}"),
        ));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "_+=,.@-".contains(c))
    {
        return Err(invalid(
            Some(name),
            &member,
            "Member must satisfy regular expression pattern: [\\w+=,.@-]+",
        ));
    }
    Ok(name)
}

fn check_path(path: &str, member: &str) -> Result<(), AwsError> {
    let ok = path == "/"
        || (path.len() >= 3
            && path.len() <= 512
            && path.starts_with('/')
            && path.ends_with('/')
            && path.bytes().all(|b| (0x21..=0x7e).contains(&b)));
    if ok {
        Ok(())
    } else {
        Err(invalid(
            Some(path),
            member,
            "Member must satisfy regular expression pattern: (\\u002F)|(\\u002F[\\u0021-\\u007E]+\\u002F)",
        ))
    }
}

fn max_session_duration(params: &[(String, String)]) -> Result<Option<i64>, AwsError> {
    let Some(raw) = param(params, "MaxSessionDuration") else {
        return Ok(None);
    };
    let n: i64 = raw.parse().map_err(|_| {
        invalid(
            Some(raw),
            "maxSessionDuration",
            "Member must be a whole number",
        )
    })?;
    if n < 3600 {
        return Err(invalid(
            Some(raw),
            "maxSessionDuration",
            "Member must have value greater than or equal to 3600",
        ));
    }
    if n > 43200 {
        return Err(invalid(
            Some(raw),
            "maxSessionDuration",
            "Member must have value less than or equal to 43200",
        ));
    }
    Ok(Some(n))
}

fn description(params: &[(String, String)]) -> Result<Option<String>, AwsError> {
    match param(params, "Description") {
        Some(d) if d.chars().count() > 1000 => Err(invalid(
            Some(d),
            "description",
            "Member must have length less than or equal to 1000",
        )),
        d => Ok(d.map(str::to_string)),
    }
}

/// `Tags.member.N.Key/Value`, checked as IAM checks them.
fn tags(params: &[(String, String)]) -> Result<Vec<(String, String)>, AwsError> {
    let mut out: Vec<(String, String)> = Vec::new();
    for t in structs(params, "Tags.member") {
        let key = t.get("Key").cloned();
        let Some(key) = key else {
            return Err(invalid(None, "tags.member.key", "Member must not be null"));
        };
        let value = t.get("Value").cloned().unwrap_or_default();
        if key.is_empty() || key.chars().count() > 128 {
            return Err(invalid(
                Some(&key),
                "tags.member.key",
                "Member must have length between 1 and 128",
            ));
        }
        if value.chars().count() > 256 {
            return Err(invalid(
                Some(&value),
                "tags.member.value",
                "Member must have length less than or equal to 256",
            ));
        }
        if out.iter().any(|(k, _)| k.eq_ignore_ascii_case(&key)) {
            return Err(AwsError::new(
                400,
                "InvalidInput",
                "Duplicate tag keys found. Please note that Tag keys are case insensitive.",
            ));
        }
        out.push((key, value));
    }
    if out.len() > MAX_TAGS {
        return Err(invalid(
            None,
            "tags",
            "Member must have length less than or equal to 50",
        ));
    }
    Ok(out)
}

fn no_role(name: &str) -> AwsError {
    AwsError::new(
        404,
        "NoSuchEntity",
        format!("The role with name {name} cannot be found."),
    )
}

// ---------------------------------------------------------------- answers

fn iso(t: &DateTime<Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn tag_list(tags: &[(String, String)]) -> Element {
    let mut list = Element::new("Tags");
    for (k, v) in tags {
        list.push(
            Element::new("member")
                .with(Element::leaf("Key", k))
                .with(Element::leaf("Value", v)),
        );
    }
    list
}

impl Role {
    /// The `Role` element; ListRoles leaves the tags out, as IAM does.
    fn element(&self, name: &str, with_tags: bool) -> Element {
        let mut e = Element::new(name)
            .with(Element::leaf("Path", &self.path))
            .with(Element::leaf("RoleName", &self.name))
            .with(Element::leaf("RoleId", &self.id))
            .with(Element::leaf("Arn", &self.arn))
            .with(Element::leaf("CreateDate", iso(&self.created)))
            .with(Element::leaf(
                "AssumeRolePolicyDocument",
                percent_encode(&self.trust_document),
            ));
        if let Some(d) = &self.description {
            e.push_leaf("Description", d);
        }
        e.push_leaf("MaxSessionDuration", self.max_session_duration.to_string());
        if with_tags && !self.tags.is_empty() {
            e.push(tag_list(&self.tags));
        }
        e
    }
}

/// `MaxItems` (1–1000, default 100) and `Marker` (an offset this API handed out).
fn page<T: Clone>(
    params: &[(String, String)],
    items: &[T],
) -> Result<(Vec<T>, Option<String>), AwsError> {
    let max = match param(params, "MaxItems") {
        None => 100,
        Some(raw) => match raw.parse::<usize>() {
            Ok(n) if (1..=1000).contains(&n) => n,
            _ => {
                return Err(invalid(
                    Some(raw),
                    "maxItems",
                    "Member must have value between 1 and 1000",
                ))
            }
        },
    };
    let start = match param(params, "Marker") {
        None => 0,
        Some(m) => m
            .parse::<usize>()
            .ok()
            .filter(|n| *n <= items.len())
            .ok_or_else(|| AwsError::new(400, "InvalidInput", "Invalid Marker."))?,
    };
    let end = (start + max).min(items.len());
    let next = (end < items.len()).then(|| end.to_string());
    Ok((items[start..end].to_vec(), next))
}

fn paged(list_name: &str, items: Vec<Element>, next: Option<String>) -> Vec<Element> {
    let mut list = Element::new(list_name);
    for i in items {
        list.push(i);
    }
    let mut out = vec![
        list,
        Element::leaf("IsTruncated", next.is_some().to_string()),
    ];
    if let Some(m) = next {
        out.push(Element::leaf("Marker", m));
    }
    out
}

/// An id of IAM's form: a four-letter prefix and 17 upper-case letters and digits.
fn unique_id(prefix: &str, seed: Option<&str>) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    let mut n: u128 = match seed {
        Some(s) => {
            u128::from(crate::common::hash::fnv64(&[prefix, s])) << 64
                | u128::from(crate::common::hash::fnv64(&[s, prefix]))
        }
        None => rand::random(),
    };
    let mut out = prefix.to_string();
    for _ in 0..17 {
        out.push(char::from(ALPHABET[(n % 32) as usize]));
        n /= 32;
    }
    out
}

fn policy_element(name: &str, p: &ManagedPolicy, attachments: usize) -> Element {
    Element::new("Policy")
        .with(Element::leaf("PolicyName", name))
        .with(Element::leaf("PolicyId", unique_id("ANPA", Some(name))))
        .with(Element::leaf("Arn", managed_arn(name, p)))
        .with(Element::leaf("Path", &p.path))
        .with(Element::leaf("DefaultVersionId", &p.version))
        .with(Element::leaf("AttachmentCount", attachments.to_string()))
        .with(Element::leaf("PermissionsBoundaryUsageCount", "0"))
        .with(Element::leaf("IsAttachable", "true"))
        .with(Element::leaf("CreateDate", catalog_date(&p.updated)))
        .with(Element::leaf("UpdateDate", catalog_date(&p.updated)))
}

/// The catalog's `2015-02-06T18:39:46+00:00` as IAM writes dates.
fn catalog_date(s: &str) -> String {
    DateTime::parse_from_rfc3339(s)
        .map(|t| iso(&t.with_timezone(&Utc)))
        .unwrap_or_else(|_| s.to_string())
}

fn no_policy(arn: &str) -> AwsError {
    AwsError::new(
        404,
        "NoSuchEntity",
        format!("Policy {arn} does not exist or is not attachable."),
    )
}

fn check_policy_arn(arn: &str) -> Result<(), AwsError> {
    let parts: Vec<&str> = arn.splitn(6, ':').collect();
    if parts.len() == 6 && parts[0] == "arn" && parts[2] == "iam" && parts[5].starts_with("policy/")
    {
        Ok(())
    } else {
        Err(AwsError::new(
            400,
            "InvalidInput",
            format!("ARN {arn} is not valid."),
        ))
    }
}

// ---------------------------------------------------------------- the API

impl Iam {
    fn index(&self, name: &str) -> Result<usize, AwsError> {
        // Role names are unique without regard to case, and found that way.
        self.roles
            .iter()
            .position(|r| r.name.eq_ignore_ascii_case(name))
            .ok_or_else(|| no_role(name))
    }

    /// How many roles have the managed policy `arn` attached.
    fn attachments(&self, arn: &str) -> usize {
        self.roles
            .iter()
            .filter(|r| r.attached.iter().any(|a| a == arn))
            .count()
    }

    /// One line per role, for `Sandbox::inventory`.
    pub(crate) fn inventory(&self, out: &mut Vec<String>) {
        for r in self.roles.iter().filter(|r| !r.configured) {
            out.push(format!("iam role {}{}", r.path, r.name));
        }
    }

    /// Makes the roles the capacity configuration names that IAM does not have yet,
    /// each trusting its service principal.
    pub(crate) fn adopt(&mut self, capacity: &AwsCapacity, now: DateTime<Utc>) {
        for (name, principal) in &capacity.roles {
            if self.index(name).is_ok() {
                continue;
            }
            let trust = serde_json::json!({
                "Version": "2012-10-17",
                "Statement": [{"Effect": "Allow", "Principal": {"Service": principal}, "Action": "sts:AssumeRole"}],
            });
            self.roles.push(Role {
                name: name.clone(),
                path: "/".to_string(),
                id: unique_id("AROA", None),
                arn: format!("arn:aws:iam::{ACCOUNT}:role/{name}"),
                created: now,
                trust_document: trust.to_string(),
                trust,
                description: None,
                max_session_duration: 3600,
                tags: Vec::new(),
                attached: Vec::new(),
                inline: BTreeMap::new(),
                configured: true,
            });
        }
    }

    /// Serves one IAM query-protocol request.
    pub(crate) fn handle(
        &mut self,
        req: &AwsRequest,
        now: DateTime<Utc>,
    ) -> Result<AwsResponse, AwsError> {
        let p = params(req);
        let action = param(&p, "Action").unwrap_or_default().to_string();
        let result = |children: Vec<Element>| respond(XMLNS, &action, Some(children));
        let done = |(): ()| respond(XMLNS, &action, None);
        match action.as_str() {
            "CreateRole" => self.create_role(&p, now).map(result),
            "GetRole" => self.get_role(&p).map(result),
            "DeleteRole" => self.delete_role(&p).map(done),
            "UpdateRole" => self.update_role(&p).map(|()| result(Vec::new())),
            "UpdateAssumeRolePolicy" => self.update_assume_role_policy(&p).map(done),
            "TagRole" => self.tag_role(&p).map(done),
            "UntagRole" => self.untag_role(&p).map(done),
            "ListRoleTags" => self.list_role_tags(&p).map(result),
            "ListRoles" => self.list_roles(&p).map(result),
            "AttachRolePolicy" => self.attach_role_policy(&p).map(done),
            "DetachRolePolicy" => self.detach_role_policy(&p).map(done),
            "ListAttachedRolePolicies" => self.list_attached_role_policies(&p).map(result),
            "PutRolePolicy" => self.put_role_policy(&p).map(done),
            "GetRolePolicy" => self.get_role_policy(&p).map(result),
            "DeleteRolePolicy" => self.delete_role_policy(&p).map(done),
            "ListRolePolicies" => self.list_role_policies(&p).map(result),
            "ListInstanceProfilesForRole" => self.list_instance_profiles_for_role(&p).map(result),
            "GetPolicy" => self.get_policy(&p).map(result),
            "GetPolicyVersion" => get_policy_version(&p).map(result),
            "" => Err(AwsError::new(
                400,
                "MissingAction",
                "The request must contain the parameter Action",
            )),
            other => Err(AwsError::new(
                400,
                "InvalidAction",
                format!("Could not find operation {other} for version 2010-05-08"),
            )),
        }
    }

    /// CreateRole: every parameter is checked before the name is looked up, so a bad
    /// request is refused as bad even when the role exists.
    fn create_role(
        &mut self,
        p: &[(String, String)],
        now: DateTime<Utc>,
    ) -> Result<Vec<Element>, AwsError> {
        let name = check_name(p, "RoleName", 64)?;
        let path = param(p, "Path").unwrap_or("/");
        check_path(path, "path")?;
        let document = required(p, "AssumeRolePolicyDocument")?;
        let trust = check_policy(document, PolicyKind::Trust)?;
        let description = description(p)?;
        let max = max_session_duration(p)?.unwrap_or(3600);
        let tags = tags(p)?;
        if self.index(name).is_ok() {
            return Err(AwsError::new(
                409,
                "EntityAlreadyExists",
                format!("Role with name {name} already exists."),
            ));
        }
        let role = Role {
            name: name.to_string(),
            path: path.to_string(),
            id: unique_id("AROA", None),
            arn: format!("arn:aws:iam::{ACCOUNT}:role{path}{name}"),
            created: now,
            trust_document: document.to_string(),
            trust,
            description,
            max_session_duration: max,
            tags,
            attached: Vec::new(),
            inline: BTreeMap::new(),
            configured: false,
        };
        let element = role.element("Role", true);
        self.roles.push(role);
        Ok(vec![element])
    }

    /// GetRole: the role with its tags, and an empty `RoleLastUsed` (nothing here
    /// assumes roles).
    fn get_role(&self, p: &[(String, String)]) -> Result<Vec<Element>, AwsError> {
        let name = required(p, "RoleName")?;
        let role = &self.roles[self.index(name)?];
        Ok(vec![role
            .element("Role", true)
            .with(Element::new("RoleLastUsed"))])
    }

    /// DeleteRole: refused while managed policies are attached or inline ones remain.
    fn delete_role(&mut self, p: &[(String, String)]) -> Result<(), AwsError> {
        let name = required(p, "RoleName")?;
        let i = self.index(name)?;
        let role = &self.roles[i];
        if !role.attached.is_empty() {
            return Err(AwsError::new(
                409,
                "DeleteConflict",
                "Cannot delete entity, must detach all policies first.",
            ));
        }
        if !role.inline.is_empty() {
            return Err(AwsError::new(
                409,
                "DeleteConflict",
                "Cannot delete entity, must delete policies first.",
            ));
        }
        self.roles.remove(i);
        Ok(())
    }

    /// UpdateRole: the description and maximum session duration, each only when given.
    fn update_role(&mut self, p: &[(String, String)]) -> Result<(), AwsError> {
        let name = required(p, "RoleName")?;
        let i = self.index(name)?;
        let description = description(p)?;
        let max = max_session_duration(p)?;
        let role = &mut self.roles[i];
        if let Some(d) = description {
            role.description = Some(d);
        }
        if let Some(m) = max {
            role.max_session_duration = m;
        }
        Ok(())
    }

    /// UpdateAssumeRolePolicy: a new trust policy, checked as CreateRole checks it.
    fn update_assume_role_policy(&mut self, p: &[(String, String)]) -> Result<(), AwsError> {
        let name = required(p, "RoleName")?;
        let document = required(p, "PolicyDocument")?;
        let i = self.index(name)?;
        let trust = check_policy(document, PolicyKind::Trust)?;
        let role = &mut self.roles[i];
        role.trust_document = document.to_string();
        role.trust = trust;
        Ok(())
    }

    /// TagRole: tags merged into the role's, keys compared without regard to case; the
    /// role keeps its tags when the merge would pass the limit.
    fn tag_role(&mut self, p: &[(String, String)]) -> Result<(), AwsError> {
        let name = required(p, "RoleName")?;
        let i = self.index(name)?;
        let given = tags(p)?;
        let role = &mut self.roles[i];
        let mut merged = role.tags.clone();
        for (k, v) in given {
            match merged
                .iter_mut()
                .find(|(have, _)| have.eq_ignore_ascii_case(&k))
            {
                Some(entry) => entry.1 = v,
                None => merged.push((k, v)),
            }
        }
        if merged.len() > MAX_TAGS {
            return Err(AwsError::new(
                409,
                "LimitExceeded",
                "The number of tags has reached the maximum limit.",
            ));
        }
        role.tags = merged;
        Ok(())
    }

    /// UntagRole: keys the role does not have are no error.
    fn untag_role(&mut self, p: &[(String, String)]) -> Result<(), AwsError> {
        let name = required(p, "RoleName")?;
        let i = self.index(name)?;
        let keys = list(p, "TagKeys.member");
        self.roles[i]
            .tags
            .retain(|(k, _)| !keys.iter().any(|g| g.eq_ignore_ascii_case(k)));
        Ok(())
    }

    /// ListRoleTags: one page of the role's tags.
    fn list_role_tags(&self, p: &[(String, String)]) -> Result<Vec<Element>, AwsError> {
        let name = required(p, "RoleName")?;
        let role = &self.roles[self.index(name)?];
        let (items, next) = page(p, &role.tags)?;
        let items = items
            .iter()
            .map(|(k, v)| {
                Element::new("member")
                    .with(Element::leaf("Key", k))
                    .with(Element::leaf("Value", v))
            })
            .collect();
        Ok(paged("Tags", items, next))
    }

    /// ListRoles: one page of the roles under `PathPrefix`, by name without regard to
    /// case.
    fn list_roles(&self, p: &[(String, String)]) -> Result<Vec<Element>, AwsError> {
        let prefix = param(p, "PathPrefix").unwrap_or("/");
        let mut roles: Vec<&Role> = self
            .roles
            .iter()
            .filter(|r| r.path.starts_with(prefix))
            .collect();
        roles.sort_by(|a, b| {
            a.name
                .to_ascii_lowercase()
                .cmp(&b.name.to_ascii_lowercase())
        });
        let (items, next) = page(p, &roles)?;
        let items = items.iter().map(|r| r.element("member", false)).collect();
        Ok(paged("Roles", items, next))
    }

    /// AttachRolePolicy: a catalog policy, once (attaching it again changes nothing),
    /// within the role's quota.
    fn attach_role_policy(&mut self, p: &[(String, String)]) -> Result<(), AwsError> {
        let name = required(p, "RoleName")?;
        let arn = required(p, "PolicyArn")?;
        check_policy_arn(arn)?;
        let i = self.index(name)?;
        if managed_policy(arn).is_none() {
            return Err(no_policy(arn));
        }
        let role = &mut self.roles[i];
        if !role.attached.iter().any(|a| a == arn) {
            if role.attached.len() >= MAX_ATTACHED {
                return Err(AwsError::new(
                    409,
                    "LimitExceeded",
                    format!("Cannot exceed quota for PoliciesPerRole: {MAX_ATTACHED}"),
                ));
            }
            role.attached.push(arn.to_string());
        }
        Ok(())
    }

    /// DetachRolePolicy: a policy that is not attached is an error.
    fn detach_role_policy(&mut self, p: &[(String, String)]) -> Result<(), AwsError> {
        let name = required(p, "RoleName")?;
        let arn = required(p, "PolicyArn")?;
        check_policy_arn(arn)?;
        let i = self.index(name)?;
        let role = &mut self.roles[i];
        let Some(at) = role.attached.iter().position(|a| a == arn) else {
            return Err(AwsError::new(
                404,
                "NoSuchEntity",
                format!("Policy {arn} was not found."),
            ));
        };
        role.attached.remove(at);
        Ok(())
    }

    /// ListAttachedRolePolicies: one page of the role's managed policies under
    /// `PathPrefix`, in attachment order.
    fn list_attached_role_policies(
        &self,
        p: &[(String, String)],
    ) -> Result<Vec<Element>, AwsError> {
        let name = required(p, "RoleName")?;
        let prefix = param(p, "PathPrefix").unwrap_or("/");
        let role = &self.roles[self.index(name)?];
        let attached: Vec<(&str, &ManagedPolicy)> = role
            .attached
            .iter()
            .filter_map(|a| managed_policy(a))
            .filter(|(_, m)| m.path.starts_with(prefix))
            .collect();
        let (items, next) = page(p, &attached)?;
        let items = items
            .iter()
            .map(|(n, m)| {
                Element::new("member")
                    .with(Element::leaf("PolicyName", *n))
                    .with(Element::leaf("PolicyArn", managed_arn(n, m)))
            })
            .collect();
        Ok(paged("AttachedPolicies", items, next))
    }

    /// PutRolePolicy: an inline permissions policy, added or replaced.
    fn put_role_policy(&mut self, p: &[(String, String)]) -> Result<(), AwsError> {
        let name = required(p, "RoleName")?;
        let policy = check_name(p, "PolicyName", 128)?;
        let document = required(p, "PolicyDocument")?;
        let i = self.index(name)?;
        check_policy(document, PolicyKind::Permissions)?;
        self.roles[i]
            .inline
            .insert(policy.to_string(), document.to_string());
        Ok(())
    }

    /// The role and inline policy name GetRolePolicy and DeleteRolePolicy address: the
    /// role's index and the policy name.
    fn role_policy<'a>(&self, p: &'a [(String, String)]) -> Result<(usize, &'a str), AwsError> {
        let name = required(p, "RoleName")?;
        let policy = required(p, "PolicyName")?;
        let i = self.index(name)?;
        Ok((i, policy))
    }

    /// GetRolePolicy: the inline policy's document, URL-encoded as IAM returns it.
    fn get_role_policy(&self, p: &[(String, String)]) -> Result<Vec<Element>, AwsError> {
        let (i, policy) = self.role_policy(p)?;
        let role = &self.roles[i];
        let document = role
            .inline
            .get(policy)
            .ok_or_else(|| no_role_policy(policy))?;
        Ok(vec![
            Element::leaf("RoleName", &role.name),
            Element::leaf("PolicyName", policy),
            Element::leaf("PolicyDocument", percent_encode(document)),
        ])
    }

    /// DeleteRolePolicy: an inline policy the role does not have is an error.
    fn delete_role_policy(&mut self, p: &[(String, String)]) -> Result<(), AwsError> {
        let (i, policy) = self.role_policy(p)?;
        self.roles[i]
            .inline
            .remove(policy)
            .ok_or_else(|| no_role_policy(policy))?;
        Ok(())
    }

    /// ListRolePolicies: one page of the role's inline policy names.
    fn list_role_policies(&self, p: &[(String, String)]) -> Result<Vec<Element>, AwsError> {
        let name = required(p, "RoleName")?;
        let role = &self.roles[self.index(name)?];
        let names: Vec<&String> = role.inline.keys().collect();
        let (items, next) = page(p, &names)?;
        let items = items.iter().map(|n| Element::leaf("member", *n)).collect();
        Ok(paged("PolicyNames", items, next))
    }

    /// ListInstanceProfilesForRole: always an empty page. The sandbox makes no instance
    /// profiles (no EC2 instances are launched outside node groups): a role is in none,
    /// as a new role is on AWS.
    fn list_instance_profiles_for_role(
        &self,
        p: &[(String, String)],
    ) -> Result<Vec<Element>, AwsError> {
        let name = required(p, "RoleName")?;
        self.index(name)?;
        let none: Vec<&String> = Vec::new();
        let (items, next) = page(p, &none)?;
        let items = items.iter().map(|n| Element::leaf("member", *n)).collect();
        Ok(paged("InstanceProfiles", items, next))
    }

    /// GetPolicy: a catalog policy, with how many roles have it attached.
    fn get_policy(&self, p: &[(String, String)]) -> Result<Vec<Element>, AwsError> {
        let arn = required(p, "PolicyArn")?;
        check_policy_arn(arn)?;
        let (name, policy) = managed_policy(arn).ok_or_else(|| {
            AwsError::new(404, "NoSuchEntity", format!("Policy {arn} was not found."))
        })?;
        Ok(vec![policy_element(name, policy, self.attachments(arn))])
    }
}

/// GetPolicyVersion: a catalog policy's one version, its document URL-encoded. Needs no
/// role, so no `Iam`.
fn get_policy_version(p: &[(String, String)]) -> Result<Vec<Element>, AwsError> {
    let arn = required(p, "PolicyArn")?;
    let version = required(p, "VersionId")?;
    check_policy_arn(arn)?;
    let (_, policy) = managed_policy(arn)
        .filter(|(_, m)| m.version == version)
        .ok_or_else(|| {
            AwsError::new(
                404,
                "NoSuchEntity",
                format!("Policy {arn} version {version} does not exist or is not attachable."),
            )
        })?;
    Ok(vec![Element::new("PolicyVersion")
        .with(Element::leaf(
            "Document",
            percent_encode(&policy.document.to_string()),
        ))
        .with(Element::leaf("VersionId", &policy.version))
        .with(Element::leaf("IsDefaultVersion", "true"))
        .with(Element::leaf(
            "CreateDate",
            catalog_date(&policy.updated),
        ))])
}

/// The error for an inline policy the role does not have.
fn no_role_policy(policy: &str) -> AwsError {
    AwsError::new(
        404,
        "NoSuchEntity",
        format!("The role policy with name {policy} cannot be found."),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::Method;

    const TRUST_EKS: &str = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"eks.amazonaws.com"},"Action":"sts:AssumeRole"}]}"#;

    #[test]
    fn a_role_may_pass_a_role_only_as_its_policies_say() {
        let exec = "arn:aws:iam::123456789012:role/exec";
        let to_sagemaker = [("iam:PassedToService", "sagemaker.amazonaws.com")];
        let full = role_with(&["arn:aws:iam::aws:policy/AmazonSageMakerFullAccess"], &[]);
        assert!(allows(&full, "iam:PassRole", exec, &to_sagemaker));
        assert!(allows(
            &full,
            "sagemaker:CreatePipeline",
            "arn:aws:sagemaker:us-east-1:123456789012:pipeline/p",
            &[]
        ));
        // The managed policy passes roles to SageMaker only.
        assert!(!allows(
            &full,
            "iam:PassRole",
            exec,
            &[("iam:PassedToService", "ec2.amazonaws.com")]
        ));
        let nothing = role_with(&[], &[]);
        assert!(!allows(&nothing, "iam:PassRole", exec, &to_sagemaker));
        let narrow = role_with(
            &[],
            &[
                r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"iam:Pass*","Resource":"arn:aws:iam::*:role/ex?c"}]}"#,
            ],
        );
        assert!(allows(&narrow, "iam:PassRole", exec, &to_sagemaker));
        assert!(!allows(
            &narrow,
            "iam:PassRole",
            "arn:aws:iam::123456789012:role/other",
            &to_sagemaker
        ));
        let denied = role_with(
            &["arn:aws:iam::aws:policy/AmazonSageMakerFullAccess"],
            &[
                r#"{"Version":"2012-10-17","Statement":[{"Effect":"Deny","Action":"iam:PassRole","Resource":"*"}]}"#,
            ],
        );
        assert!(!allows(&denied, "iam:PassRole", exec, &to_sagemaker));
        assert!(not_authorized(&nothing, "ack", "iam:PassRole", exec).starts_with(
            "User: arn:aws:sts::123456789012:assumed-role/controller/ack is not authorized to perform: iam:PassRole on resource: arn:aws:iam::123456789012:role/exec"
        ));
    }

    fn call(iam: &mut Iam, body: &str) -> Result<Element, AwsError> {
        let req = AwsRequest::new(
            Method::POST,
            "/",
            &[("content-type", "application/x-www-form-urlencoded")],
            body.as_bytes(),
        );
        let resp = iam.handle(&req, Utc::now())?;
        assert_eq!(resp.status, 200);
        Ok(Element::parse(&resp.body).expect("well-formed XML"))
    }

    fn form(pairs: &[(&str, &str)]) -> String {
        pairs
            .iter()
            .map(|(k, v)| format!("{k}={}", percent_encode(v)))
            .collect::<Vec<_>>()
            .join("&")
    }

    fn create(iam: &mut Iam, name: &str, trust: &str) -> Result<Element, AwsError> {
        call(
            iam,
            &form(&[
                ("Action", "CreateRole"),
                ("Version", "2010-05-08"),
                ("RoleName", name),
                ("AssumeRolePolicyDocument", trust),
            ]),
        )
    }

    #[test]
    fn the_catalog_parses_and_names_the_eks_policies() {
        assert!(CATALOG.len() > 50, "{}", CATALOG.len());
        let (name, p) = managed_policy("arn:aws:iam::aws:policy/AmazonEKSClusterPolicy")
            .expect("in the catalog");
        assert_eq!(name, "AmazonEKSClusterPolicy");
        assert_eq!(p.path, "/");
        assert!(
            managed_policy("arn:aws:iam::aws:policy/service-role/AmazonEKSClusterPolicy").is_none()
        );
        assert!(managed_policy("arn:aws:iam::aws:policy/NoSuchPolicy").is_none());
        assert!(
            managed_policy("arn:aws:iam::aws:policy/service-role/AmazonEBSCSIDriverPolicy")
                .is_some()
        );
    }

    #[test]
    fn roles_are_created_read_and_refused_twice() {
        let mut iam = Iam::default();
        let made = create(&mut iam, "eks-cluster", TRUST_EKS).expect("created");
        let role = made
            .find("CreateRoleResult")
            .and_then(|r| r.find("Role"))
            .cloned()
            .unwrap_or_default();
        assert_eq!(
            role.text_of("Arn"),
            Some("arn:aws:iam::123456789012:role/eks-cluster")
        );
        let id = role.text_of("RoleId").unwrap_or_default();
        assert!(id.starts_with("AROA") && id.len() == 21, "{id}");
        assert!(id[4..]
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit()));
        assert_eq!(
            role.text_of("AssumeRolePolicyDocument"),
            Some(percent_encode(TRUST_EKS).as_str())
        );
        let again = create(&mut iam, "EKS-Cluster", TRUST_EKS).expect_err("exists");
        assert_eq!(
            (again.status, again.code.as_str()),
            (409, "EntityAlreadyExists")
        );
        let got = call(&mut iam, "Action=GetRole&RoleName=eks-cluster").expect("found");
        assert!(got.find("GetRoleResult").is_some());
        let none = call(&mut iam, "Action=GetRole&RoleName=nope").expect_err("missing");
        assert_eq!((none.status, none.code.as_str()), (404, "NoSuchEntity"));
        assert_eq!(none.message, "The role with name nope cannot be found.");
    }

    #[test]
    fn names_paths_and_durations_are_checked() {
        let mut iam = Iam::default();
        for bad in ["", "a b", "x/y", &"r".repeat(65)] {
            let e = create(&mut iam, bad, TRUST_EKS).expect_err("bad name");
            assert_eq!(e.code, "ValidationError", "{bad:?}");
        }
        assert!(create(&mut iam, &"r".repeat(64), TRUST_EKS).is_ok());
        assert!(create(&mut iam, "a+=,.@_-1", TRUST_EKS).is_ok());
        let body = form(&[
            ("Action", "CreateRole"),
            ("RoleName", "p"),
            ("Path", "no-slash"),
            ("AssumeRolePolicyDocument", TRUST_EKS),
        ]);
        assert_eq!(
            call(&mut iam, &body).expect_err("path").code,
            "ValidationError"
        );
        for (d, ok) in [
            ("3599", false),
            ("3600", true),
            ("43200", true),
            ("43201", false),
        ] {
            let body = form(&[
                ("Action", "CreateRole"),
                ("RoleName", &format!("d{d}")),
                ("MaxSessionDuration", d),
                ("AssumeRolePolicyDocument", TRUST_EKS),
            ]);
            assert_eq!(call(&mut iam, &body).is_ok(), ok, "{d}");
        }
        let body = form(&[
            ("Action", "CreateRole"),
            ("RoleName", "pathed"),
            ("Path", "/ml/"),
            ("AssumeRolePolicyDocument", TRUST_EKS),
        ]);
        call(&mut iam, &body).expect("created");
        assert!(role(&iam, "arn:aws:iam::123456789012:role/ml/pathed").is_some());
        assert!(role(&iam, "arn:aws:iam::123456789012:role/pathed").is_none());
    }

    #[test]
    fn policy_documents_are_checked_as_iam_checks_them() {
        let trust = |doc: &str| check_policy(doc, PolicyKind::Trust).map_err(|e| e.message);
        let perms = |doc: &str| check_policy(doc, PolicyKind::Permissions).map_err(|e| e.message);
        assert!(trust(TRUST_EKS).is_ok());
        assert_eq!(trust("{"), Err("This policy contains invalid Json".into()));
        assert_eq!(trust("[]"), Err("Syntax errors in policy.".into()));
        assert_eq!(
            trust(r#"{"Version":"2012-10-17","Statement":[]}"#),
            Err("Syntax errors in policy.".into())
        );
        assert_eq!(
            trust(
                r#"{"Version":"2012-10-17","Statement":{"Effect":"Maybe","Principal":"*","Action":"sts:AssumeRole"}}"#
            ),
            Err("Syntax errors in policy.".into())
        );
        assert_eq!(
            trust(r#"{"Statement":{"Effect":"Allow","Principal":"*","Action":"sts:AssumeRole"}}"#),
            Err("Policy document must be version 2012-10-17 or greater.".into())
        );
        assert_eq!(
            trust(r#"{"Version":"2012-10-17","Statement":{"Effect":"Allow","Principal":{"Service":"eks.amazonaws.com"},"Action":"s3:GetObject"}}"#),
            Err("Trust Policy statement actions can only be sts:AssumeRole, sts:AssumeRoleWithSAML,  and sts:AssumeRoleWithWebIdentity".into())
        );
        assert_eq!(
            trust(
                r#"{"Version":"2012-10-17","Statement":{"Effect":"Allow","Principal":"*","Action":"sts:AssumeRole","Resource":"*"}}"#
            ),
            Err("Has prohibited field Resource.".into())
        );
        assert_eq!(
            trust(
                r#"{"Version":"2012-10-17","Statement":{"Effect":"Allow","Principal":{"Robot":"x"},"Action":"sts:AssumeRole"}}"#
            ),
            Err("Invalid principal in policy".into())
        );
        let s3 = r#"{"Version":"2012-10-17","Statement":[{"Sid":"A","Effect":"Allow","Action":["s3:GetObject"],"Resource":"arn:aws:s3:::b/*"}]}"#;
        assert!(perms(s3).is_ok());
        assert_eq!(
            perms(r#"{"Version":"2012-10-17","Statement":{"Effect":"Allow","Action":"s3:*"}}"#),
            Err("Policy statement must contain resources.".into())
        );
        assert_eq!(
            perms(r#"{"Version":"2012-10-17","Statement":{"Effect":"Allow","Resource":"*"}}"#),
            Err("Policy statement must contain actions.".into())
        );
        assert_eq!(
            perms(
                r#"{"Version":"2012-10-17","Statement":{"Effect":"Allow","Action":"GetObject","Resource":"*"}}"#
            ),
            Err(
                "Actions/Conditions must be prefaced by a vendor, e.g., iam, sdb, ec2, etc.".into()
            )
        );
        assert_eq!(
            perms(
                r#"{"Version":"2012-10-17","Statement":{"Effect":"Allow","Action":"s3:*","Resource":"bucket"}}"#
            ),
            Err("Resource bucket must be in ARN format or \"*\".".into())
        );
        assert_eq!(
            perms(
                TRUST_EKS
                    .replace("\"Action\"", "\"Resource\":\"*\",\"Action\"")
                    .as_str()
            ),
            Err("Policy document should not specify a principal.".into())
        );
        assert_eq!(
            perms(
                r#"{"Version":"2012-10-17","Statement":[{"Sid":"A","Effect":"Allow","Action":"s3:*","Resource":"*"},{"Sid":"A","Effect":"Deny","Action":"s3:*","Resource":"*"}]}"#
            ),
            Err("Statement IDs (SID) in a single policy must be unique.".into())
        );
    }

    #[test]
    fn roles_with_policies_cannot_be_deleted() {
        let mut iam = Iam::default();
        create(&mut iam, "node", TRUST_EKS).expect("created");
        let arn = "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy";
        call(
            &mut iam,
            &form(&[
                ("Action", "AttachRolePolicy"),
                ("RoleName", "node"),
                ("PolicyArn", arn),
            ]),
        )
        .expect("attached");
        // Attaching twice changes nothing.
        call(
            &mut iam,
            &form(&[
                ("Action", "AttachRolePolicy"),
                ("RoleName", "node"),
                ("PolicyArn", arn),
            ]),
        )
        .expect("attached");
        let listed =
            call(&mut iam, "Action=ListAttachedRolePolicies&RoleName=node").expect("listed");
        let arns: Vec<String> = listed
            .find("ListAttachedRolePoliciesResult")
            .and_then(|r| r.find("AttachedPolicies"))
            .map(|l| {
                l.all("member")
                    .filter_map(|m| m.text_of("PolicyArn"))
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(arns, [arn]);
        let e = call(&mut iam, "Action=DeleteRole&RoleName=node").expect_err("attached");
        assert_eq!((e.status, e.code.as_str()), (409, "DeleteConflict"));
        let missing = "arn:aws:iam::aws:policy/NoSuchPolicy";
        let e = call(
            &mut iam,
            &form(&[
                ("Action", "AttachRolePolicy"),
                ("RoleName", "node"),
                ("PolicyArn", missing),
            ]),
        )
        .expect_err("no such policy");
        assert_eq!((e.status, e.code.as_str()), (404, "NoSuchEntity"));
        let e = call(
            &mut iam,
            &form(&[
                ("Action", "AttachRolePolicy"),
                ("RoleName", "node"),
                ("PolicyArn", "nonsense"),
            ]),
        )
        .expect_err("not an arn");
        assert_eq!(e.code, "InvalidInput");
        let counted = call(
            &mut iam,
            &form(&[("Action", "GetPolicy"), ("PolicyArn", arn)]),
        )
        .expect("found");
        assert_eq!(
            counted
                .find("GetPolicyResult")
                .and_then(|r| r.find("Policy"))
                .and_then(|p| p.text_of("AttachmentCount")),
            Some("1")
        );
        call(
            &mut iam,
            &form(&[
                ("Action", "DetachRolePolicy"),
                ("RoleName", "node"),
                ("PolicyArn", arn),
            ]),
        )
        .expect("detached");
        let e = call(
            &mut iam,
            &form(&[
                ("Action", "DetachRolePolicy"),
                ("RoleName", "node"),
                ("PolicyArn", arn),
            ]),
        )
        .expect_err("not attached");
        assert_eq!(e.code, "NoSuchEntity");

        let inline = r#"{"Version":"2012-10-17","Statement":{"Effect":"Allow","Action":"s3:GetObject","Resource":"*"}}"#;
        call(
            &mut iam,
            &form(&[
                ("Action", "PutRolePolicy"),
                ("RoleName", "node"),
                ("PolicyName", "read"),
                ("PolicyDocument", inline),
            ]),
        )
        .expect("put");
        let got = call(
            &mut iam,
            "Action=GetRolePolicy&RoleName=node&PolicyName=read",
        )
        .expect("got");
        assert_eq!(
            got.find("GetRolePolicyResult")
                .and_then(|r| r.text_of("PolicyDocument")),
            Some(percent_encode(inline).as_str())
        );
        let e = call(&mut iam, "Action=DeleteRole&RoleName=node").expect_err("inline");
        assert_eq!(
            e.message,
            "Cannot delete entity, must delete policies first."
        );
        call(
            &mut iam,
            "Action=DeleteRolePolicy&RoleName=node&PolicyName=read",
        )
        .expect("deleted");
        assert_eq!(
            call(
                &mut iam,
                "Action=DeleteRolePolicy&RoleName=node&PolicyName=read"
            )
            .expect_err("gone")
            .code,
            "NoSuchEntity"
        );
        call(&mut iam, "Action=DeleteRole&RoleName=node").expect("deleted");
    }

    #[test]
    fn no_more_than_ten_managed_policies_per_role() {
        let mut iam = Iam::default();
        create(&mut iam, "many", TRUST_EKS).expect("created");
        let arns: Vec<String> = CATALOG
            .iter()
            .map(|(n, p)| managed_arn(n, p))
            .take(11)
            .collect();
        for arn in &arns[..10] {
            call(
                &mut iam,
                &form(&[
                    ("Action", "AttachRolePolicy"),
                    ("RoleName", "many"),
                    ("PolicyArn", arn),
                ]),
            )
            .expect("attached");
        }
        let e = call(
            &mut iam,
            &form(&[
                ("Action", "AttachRolePolicy"),
                ("RoleName", "many"),
                ("PolicyArn", &arns[10]),
            ]),
        )
        .expect_err("over the quota");
        assert_eq!((e.status, e.code.as_str()), (409, "LimitExceeded"));
    }

    #[test]
    fn trust_says_which_services_may_assume_a_role() {
        let mut iam = Iam::default();
        create(&mut iam, "cluster", TRUST_EKS).expect("created");
        let both = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Deny","Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"},{"Effect":"Allow","Principal":{"Service":["sagemaker.amazonaws.com","ec2.amazonaws.com"]},"Action":["sts:AssumeRole","sts:TagSession"]}]}"#;
        create(&mut iam, "worker", both).expect("created");
        let web = r#"{"Version":"2012-10-17","Statement":{"Effect":"Allow","Principal":{"Federated":"arn:aws:iam::123456789012:oidc-provider/x"},"Action":"sts:AssumeRoleWithWebIdentity"}}"#;
        create(&mut iam, "irsa", web).expect("created");
        let get =
            |n: &str| role(&iam, &format!("arn:aws:iam::123456789012:role/{n}")).expect("exists");
        assert!(trusts(get("cluster"), "eks.amazonaws.com"));
        assert!(!trusts(get("cluster"), "ec2.amazonaws.com"));
        assert!(trusts(get("worker"), "ec2.amazonaws.com"));
        assert!(trusts(get("worker"), "sagemaker.amazonaws.com"));
        assert!(!trusts(get("worker"), "eks.amazonaws.com"));
        assert!(!trusts(get("irsa"), "eks.amazonaws.com"));
        assert!(role(&iam, "arn:aws:iam::123456789012:role/nope").is_none());
    }

    #[test]
    fn roles_are_updated_tagged_and_listed() {
        let mut iam = Iam::default();
        let body = form(&[
            ("Action", "CreateRole"),
            ("RoleName", "b"),
            ("AssumeRolePolicyDocument", TRUST_EKS),
            ("Tags.member.1.Key", "team"),
            ("Tags.member.1.Value", "ml"),
        ]);
        call(&mut iam, &body).expect("created");
        create(&mut iam, "a", TRUST_EKS).expect("created");
        let dup = form(&[
            ("Action", "CreateRole"),
            ("RoleName", "c"),
            ("AssumeRolePolicyDocument", TRUST_EKS),
            ("Tags.member.1.Key", "k"),
            ("Tags.member.2.Key", "K"),
        ]);
        assert_eq!(
            call(&mut iam, &dup).expect_err("duplicate").code,
            "InvalidInput"
        );
        call(
            &mut iam,
            &form(&[
                ("Action", "UpdateRole"),
                ("RoleName", "b"),
                ("Description", "d"),
                ("MaxSessionDuration", "7200"),
            ]),
        )
        .expect("updated");
        call(
            &mut iam,
            &form(&[
                ("Action", "TagRole"),
                ("RoleName", "b"),
                ("Tags.member.1.Key", "TEAM"),
                ("Tags.member.1.Value", "infra"),
                ("Tags.member.2.Key", "x"),
                ("Tags.member.2.Value", "1"),
            ]),
        )
        .expect("tagged");
        call(&mut iam, "Action=UntagRole&RoleName=b&TagKeys.member.1=x").expect("untagged");
        let tags = call(&mut iam, "Action=ListRoleTags&RoleName=b").expect("listed");
        let tags: Vec<(String, String)> = tags
            .find("ListRoleTagsResult")
            .and_then(|r| r.find("Tags"))
            .map(|l| {
                l.all("member")
                    .map(|m| {
                        (
                            m.text_of("Key").unwrap_or_default().into(),
                            m.text_of("Value").unwrap_or_default().into(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(tags, [("team".to_string(), "infra".to_string())]);
        let got = call(&mut iam, "Action=GetRole&RoleName=b").expect("got");
        let role = got
            .find("GetRoleResult")
            .and_then(|r| r.find("Role"))
            .cloned()
            .unwrap_or_default();
        assert_eq!(role.text_of("Description"), Some("d"));
        assert_eq!(role.text_of("MaxSessionDuration"), Some("7200"));
        let web = r#"{"Version":"2012-10-17","Statement":{"Effect":"Allow","Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}}"#;
        call(
            &mut iam,
            &form(&[
                ("Action", "UpdateAssumeRolePolicy"),
                ("RoleName", "b"),
                ("PolicyDocument", web),
            ]),
        )
        .expect("updated");
        assert_eq!(
            call(
                &mut iam,
                &form(&[
                    ("Action", "UpdateAssumeRolePolicy"),
                    ("RoleName", "b"),
                    ("PolicyDocument", "{}")
                ])
            )
            .expect_err("malformed")
            .code,
            "MalformedPolicyDocument"
        );
        let page = call(&mut iam, "Action=ListRoles&MaxItems=1").expect("listed");
        let result = page.find("ListRolesResult").cloned().unwrap_or_default();
        assert_eq!(result.text_of("IsTruncated"), Some("true"));
        assert_eq!(
            result
                .find("Roles")
                .and_then(|r| r.find("member"))
                .and_then(|m| m.text_of("RoleName")),
            Some("a")
        );
        let next = call(&mut iam, "Action=ListRoles&MaxItems=1&Marker=1").expect("listed");
        assert_eq!(
            next.find("ListRolesResult")
                .and_then(|r| r.text_of("IsTruncated")),
            Some("false")
        );
        assert_eq!(
            call(&mut iam, "Action=ListRoles&MaxItems=0")
                .expect_err("bad")
                .code,
            "ValidationError"
        );
        assert_eq!(
            call(&mut iam, "Action=CreateUser")
                .expect_err("not served")
                .code,
            "InvalidAction"
        );
    }

    #[test]
    fn managed_policy_versions_are_url_encoded() {
        let mut iam = Iam::default();
        let arn = "arn:aws:iam::aws:policy/AdministratorAccess";
        let v = call(
            &mut iam,
            &form(&[
                ("Action", "GetPolicyVersion"),
                ("PolicyArn", arn),
                ("VersionId", "v1"),
            ]),
        )
        .expect("found");
        let doc = v
            .find("GetPolicyVersionResult")
            .and_then(|r| r.find("PolicyVersion"))
            .and_then(|p| p.text_of("Document"))
            .map(crate::http::percent_decode)
            .unwrap_or_default();
        let doc: Value = serde_json::from_str(&doc).expect("JSON once decoded");
        assert_eq!(doc["Statement"][0]["Action"], "*");
        assert_eq!(
            call(
                &mut iam,
                &form(&[
                    ("Action", "GetPolicyVersion"),
                    ("PolicyArn", arn),
                    ("VersionId", "v9")
                ])
            )
            .expect_err("no such version")
            .code,
            "NoSuchEntity"
        );
    }
}
