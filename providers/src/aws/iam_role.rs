//! The `iam_role` kind: an IAM role with its trust policy (who may assume it, from
//! `policy::trust_document`), the managed policies attached to it, one inline policy
//! named `terrain` and its tags. Everything but the name and path changes in place.
//!
//! IAM is reached by hand-signed query-protocol calls (`signed::IAM`). Role names are
//! unique per account, so the name is the id: a create whose answer was lost finds the
//! role by name and adopts it when its tags say this address made it. Read reports the
//! trust and policies as they are live, in the stack's own spelling where they mean the
//! same (a preset name, a policy's name), so a change made outside terrain shows as
//! drift. Destroy detaches and deletes every policy on the role first, those attached
//! outside terrain included, and takes it out of its instance profiles.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::policy::{self, Document, Effect, StatementSpec};
use super::signed::{Signed, IAM};
use super::xml::Xml;
use super::{check_tags, code_of, is_ours, not_ours, tags_with_ours, user_tags};
use crate::local::duration::{format_duration, parse_duration};
use crate::schema::Fields;
use crate::{Ctx, Invalid, Kind, Live, ProviderError};

/// The kind `iam_role`.
#[derive(Debug, Clone, Copy, Default)]
pub struct IamRole;

/// The IAM API version the calls speak.
const VERSION: &str = "2010-05-08";
/// The name of the role's one inline policy, which `statements` writes.
pub const INLINE_POLICY: &str = "terrain";
/// IAM's code for a role or policy that does not exist.
const NO_SUCH_ENTITY: &str = "NoSuchEntity";
/// The session lengths IAM allows, in seconds.
const MIN_SESSION: u64 = 3600;
const MAX_SESSION: u64 = 12 * 3600;
/// IAM's default quota of managed policies per role can be raised to 20, not beyond.
const MAX_MANAGED_POLICIES: usize = 20;
/// The most characters of inline policy a role may hold (whitespace not counted).
const MAX_INLINE_CHARS: usize = 10_240;
/// How long calls right after CreateRole retry a NoSuchEntity: IAM is eventually
/// consistent about a new role for a few seconds.
const PROPAGATION: Duration = Duration::from_secs(60);

fn root_path() -> String {
    "/".to_string()
}

fn one_hour() -> String {
    "1h".to_string()
}

/// What a stack writes for an `iam_role`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    /// The role name, unique in the account: 1-64 letters, digits and `+=,.@_-`.
    #[terrain(force_new)]
    pub name: String,
    /// The role's path, `/` or `/division/team/`.
    #[serde(default = "root_path")]
    #[terrain(force_new)]
    pub path: String,
    /// What the role is for, shown in the console.
    pub description: Option<String>,
    /// Who may assume the role: a preset ("eks", "ec2", "sagemaker", "eks-capabilities",
    /// "eks-pods"), a list of presets, or a table { services, accounts, federated,
    /// actions, condition }.
    #[terrain(any)]
    pub trust: Value,
    /// Managed policies to attach: AWS managed policy names (AmazonEKSClusterPolicy) or
    /// policy ARNs.
    #[serde(default)]
    pub managed_policies: Vec<String>,
    /// The statements of the role's inline policy (named terrain); none: no inline
    /// policy.
    #[serde(default)]
    pub statements: Vec<StatementSpec>,
    /// How long a session of the role lasts at most, 1h to 12h.
    #[serde(default = "one_hour")]
    pub max_session: String,
    /// Role tags.
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
}

/// What `iam_role` reports after apply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Outputs {
    /// arn:aws:iam::ACCOUNT:role/PATH/NAME, what other resources name the role by.
    #[terrain(derived_from = [])]
    pub arn: String,
    /// The role name.
    #[terrain(derived_from = [])]
    pub name: String,
    /// IAM's stable id of the role (AROA…), which a role made again under the same name
    /// does not share.
    #[terrain(derived_from = [])]
    pub unique_id: String,
}

/// Checks a role name against IAM's rules.
pub fn check_name(name: &str) -> Result<(), String> {
    let n = name.chars().count();
    if n == 0 || n > 64 {
        return Err(format!(
            "{name:?} is not a valid IAM role name: it must be 1 to 64 characters long"
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "+=,.@_-".contains(*c)))
    {
        return Err(format!(
            "{name:?} is not a valid IAM role name: {c:?} is not allowed; use letters, digits and +=,.@_-"
        ));
    }
    Ok(())
}

/// Checks a role path against IAM's rules.
pub fn check_path(path: &str) -> Result<(), String> {
    let ok = path == "/"
        || (path.len() >= 2
            && path.len() <= 512
            && path.starts_with('/')
            && path.ends_with('/')
            && path.bytes().all(|b| (0x21..=0x7e).contains(&b)));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{path:?} is not an IAM path: write \"/\" or one that starts and ends with \"/\" (\"/ml/\"), up to 512 printable characters without spaces"
        ))
    }
}

/// The session length `text` means, in seconds, checked against IAM's range.
pub fn session_seconds(text: &str) -> Result<u64, String> {
    let d = parse_duration(text).ok_or_else(|| {
        format!("{text:?} is not a duration; write one like \"1h\", \"90m\" or \"12h\"")
    })?;
    if d.subsec_nanos() != 0 {
        return Err(format!("{text:?}: IAM takes whole seconds"));
    }
    let secs = d.as_secs();
    if !(MIN_SESSION..=MAX_SESSION).contains(&secs) {
        return Err(format!(
            "{text:?} is outside IAM's range of session lengths, 1h to 12h"
        ));
    }
    Ok(secs)
}

/// The managed policies' ARNs, in the stack's order.
fn policy_arns(names: &[String]) -> Result<Vec<String>, String> {
    names.iter().map(|n| policy::policy_arn(n)).collect()
}

/// The JSON text of the role's inline policy, `None` when it has no statements.
fn inline_text(statements: &[StatementSpec]) -> Result<Option<String>, String> {
    if statements.is_empty() {
        return Ok(None);
    }
    Ok(Some(
        policy::inline_document(statements)?.to_value().to_string(),
    ))
}

impl Spec {
    /// The parts of the spec IAM is sent, worked out once: offline checks have passed,
    /// so failures here name the field and say it was not validated.
    fn parts(&self) -> Result<Parts, ProviderError> {
        let bad = |field: &str, m: String| ProviderError::invalid(field, m);
        Ok(Parts {
            trust: policy::trust_document(&self.trust)
                .map_err(|m| bad("trust", m))?
                .to_value()
                .to_string(),
            policies: policy_arns(&self.managed_policies)
                .map_err(|m| bad("managed_policies", m))?,
            inline: inline_text(&self.statements).map_err(|m| bad("statements", m))?,
            session: session_seconds(&self.max_session).map_err(|m| bad("max_session", m))?,
        })
    }
}

/// A spec as IAM takes it.
struct Parts {
    trust: String,
    policies: Vec<String>,
    inline: Option<String>,
    session: u64,
}

// ---------------------------------------------------------------- documents as written

/// Decodes IAM's URL-encoding of policy documents (RFC 3986: `%XX` escapes, `+` is a
/// plus). Text that already reads as JSON (starts with `{`) is as the API stored it.
pub fn decode_document(text: &str) -> Result<String, String> {
    let text = text.trim();
    if text.starts_with('{') {
        return Ok(text.to_string());
    }
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("a broken escape at byte {i} of a URL-encoded document"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "a URL-encoded document that is not UTF-8".to_string())
}

/// A document's statements in an order-free form, for telling whether two documents
/// say the same.
fn canonical(d: &Document) -> Vec<String> {
    let mut out: Vec<String> = d
        .statements
        .iter()
        .map(|s| {
            let mut s = s.clone();
            for p in [&mut s.principal, &mut s.not_principal]
                .into_iter()
                .flatten()
            {
                p.services.sort();
                p.aws.sort();
                p.federated.sort();
            }
            for v in [
                &mut s.actions,
                &mut s.not_actions,
                &mut s.resources,
                &mut s.not_resources,
            ] {
                v.sort();
            }
            for c in &mut s.conditions {
                c.values.sort();
            }
            s.conditions
                .sort_by(|a, b| (&a.operator, &a.key).cmp(&(&b.operator, &b.key)));
            s.to_value().to_string()
        })
        .collect();
    out.sort();
    out
}

/// Whether two documents grant the same.
pub fn same_document(a: &Document, b: &Document) -> bool {
    canonical(a) == canonical(b)
}

/// The live trust policy as `trust` would write it: the stack's own value when it makes
/// the same document; else the presets or the table it reads as; else the document.
pub fn trust_as_written(live: &Document, prior: Option<&Value>) -> Value {
    if let Some(prior) = prior {
        if policy::trust_document(prior).is_ok_and(|d| same_document(&d, live)) {
            return prior.clone();
        }
    }
    let presets: Option<Vec<&str>> = live
        .statements
        .iter()
        .map(|s| {
            policy::PRESETS.iter().map(|p| p.name).find(|name| {
                policy::trust_document(&json!(name)).is_ok_and(|d| {
                    same_document(
                        &d,
                        &Document {
                            statements: vec![s.clone()],
                        },
                    )
                })
            })
        })
        .collect();
    match presets {
        Some(names) if names.len() == 1 => return json!(names[0]),
        Some(names) if !names.is_empty() => return json!(names),
        _ => {}
    }
    if let [s] = live.statements.as_slice() {
        if let Some(table) = trust_table(s) {
            if policy::trust_document(&table).is_ok_and(|d| same_document(&d, live)) {
                return table;
            }
        }
    }
    live.to_value()
}

/// A trust statement as a `trust` table, when it is one.
fn trust_table(s: &policy::Statement) -> Option<Value> {
    let p = s.principal.as_ref()?;
    if s.effect != Effect::Allow
        || s.not_principal.is_some()
        || !s.not_actions.is_empty()
        || !s.resources.is_empty()
        || !s.not_resources.is_empty()
    {
        return None;
    }
    let mut table = serde_json::Map::new();
    if !p.services.is_empty() {
        table.insert("services".into(), json!(p.services));
    }
    if !p.aws.is_empty() {
        let accounts: Vec<String> = p
            .aws
            .iter()
            .map(|a| {
                a.strip_prefix("arn:aws:iam::")
                    .and_then(|rest| rest.strip_suffix(":root"))
                    .filter(|id| id.len() == 12 && id.bytes().all(|b| b.is_ascii_digit()))
                    .map_or_else(|| a.clone(), str::to_string)
            })
            .collect();
        table.insert("accounts".into(), json!(accounts));
    }
    if !p.federated.is_empty() {
        table.insert("federated".into(), json!(p.federated));
    }
    table.insert("actions".into(), json!(s.actions));
    if !s.conditions.is_empty() {
        table.insert("condition".into(), s.to_value()["Condition"].clone());
    }
    Some(Value::Object(table))
}

/// The attached policies as `managed_policies` would write them: each in the stack's
/// spelling when the stack names it, else an AWS managed policy by name and any other by
/// ARN; the stack's order first, the others after by ARN.
pub fn policies_as_written(live: &[String], prior: Option<&[String]>) -> Vec<String> {
    let mut left: BTreeSet<&str> = live.iter().map(String::as_str).collect();
    let mut out = Vec::new();
    for written in prior.unwrap_or_default() {
        if let Ok(arn) = policy::policy_arn(written) {
            if left.remove(arn.as_str()) {
                out.push(written.clone());
            }
        }
    }
    for arn in left {
        out.push(match policy::managed(arn) {
            Some(m) if m.arn() == arn => m.name.clone(),
            _ => arn.to_string(),
        });
    }
    out
}

/// The live inline policy as `statements` would write it: the stack's own statements
/// when they make the same document, else each live statement as well as a
/// `StatementSpec` holds it.
pub fn statements_as_written(
    live: Option<&Document>,
    prior: Option<&[StatementSpec]>,
) -> Vec<StatementSpec> {
    let Some(live) = live else {
        return Vec::new();
    };
    if let Some(prior) = prior {
        if policy::inline_document(prior).is_ok_and(|d| same_document(&d, live)) {
            return prior.to_vec();
        }
    }
    live.statements
        .iter()
        .map(|s| {
            let v = s.to_value();
            StatementSpec {
                // NotAction and NotResource have no field: the statement then reads
                // with what it has, and differs from any the stack writes.
                actions: s.actions.clone(),
                resources: s.resources.clone(),
                effect: match s.effect {
                    Effect::Allow => "Allow".to_string(),
                    Effect::Deny => "Deny".to_string(),
                },
                condition: v.get("Condition").cloned(),
            }
        })
        .collect()
}

/// A live session length as `max_session` would write it: the stack's own text when it
/// means the same, else in hours when whole.
pub fn session_as_written(secs: u64, prior: Option<&str>) -> String {
    if let Some(p) = prior {
        if session_seconds(p).ok() == Some(secs)
            || parse_duration(p) == Some(Duration::from_secs(secs))
        {
            return p.to_string();
        }
    }
    format_duration(Duration::from_secs(secs))
}

// ---------------------------------------------------------------- the calls

fn param(name: impl Into<String>, value: impl Into<String>) -> (String, String) {
    (name.into(), value.into())
}

/// Tags as the query protocol lists them (`Tags.member.1.Key`).
fn tag_params(tags: &BTreeMap<String, String>) -> Vec<(String, String)> {
    tags.iter()
        .enumerate()
        .flat_map(|(i, (k, v))| {
            [
                param(format!("Tags.member.{}.Key", i + 1), k),
                param(format!("Tags.member.{}.Value", i + 1), v),
            ]
        })
        .collect()
}

/// A role as GetRole and CreateRole answer it.
#[derive(Debug, Clone, PartialEq)]
struct Role {
    name: String,
    path: String,
    arn: String,
    id: String,
    description: Option<String>,
    /// The trust policy's text, decoded.
    trust: Option<String>,
    max_session: u64,
    tags: BTreeMap<String, String>,
}

fn role_of(call: &str, role: Option<&Xml>) -> Result<Role, ProviderError> {
    let role = role.ok_or_else(|| {
        crate::failure::malformed(
            call,
            crate::failure::Cloud::Aws,
            200,
            "the answer has no Role",
            None,
        )
    })?;
    let text = |k: &str| role.text(k).unwrap_or_default().to_string();
    let trust = match role.text("AssumeRolePolicyDocument") {
        Some(t) if !t.trim().is_empty() => Some(decode_document(t).map_err(|m| {
            crate::failure::malformed(call, crate::failure::Cloud::Aws, 200, &m, None)
        })?),
        _ => None,
    };
    Ok(Role {
        name: text("RoleName"),
        path: text("Path"),
        arn: text("Arn"),
        id: text("RoleId"),
        description: role
            .text("Description")
            .filter(|d| !d.is_empty())
            .map(str::to_string),
        trust,
        max_session: role
            .text("MaxSessionDuration")
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(MIN_SESSION),
        tags: tags_of(role.find("Tags")),
    })
}

fn tags_of(list: Option<&Xml>) -> BTreeMap<String, String> {
    list.map(|l| {
        l.all("member")
            .map(|m| {
                (
                    m.text("Key").unwrap_or_default().to_string(),
                    m.text("Value").unwrap_or_default().to_string(),
                )
            })
            .collect()
    })
    .unwrap_or_default()
}

/// IAM for one provider table.
struct Iam {
    signed: Arc<Signed>,
}

impl Iam {
    async fn new(ctx: &Ctx) -> Result<Iam, ProviderError> {
        Ok(Iam {
            signed: Signed::for_run(ctx, "manage IAM roles", u32::MAX).await?,
        })
    }

    /// `action`'s result element (`<CreateRoleResult>`).
    async fn call(&self, action: &str, params: &[(String, String)]) -> Result<Xml, ProviderError> {
        let root = self
            .signed
            .query(&IAM, self.signed.region(), action, VERSION, params)
            .await?;
        Ok(root
            .find(&format!("{action}Result"))
            .cloned()
            .unwrap_or_default())
    }

    /// The role named `name`; `None` when there is none.
    async fn get_role(&self, name: &str) -> Result<Option<Role>, ProviderError> {
        match self.call("GetRole", &[param("RoleName", name)]).await {
            Ok(r) => role_of("iam:GetRole", r.find("Role")).map(Some),
            Err(e) if code_of(&e) == NO_SUCH_ENTITY => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Every page of a list call: the `member`s of `list` in each result.
    async fn list_all(
        &self,
        action: &str,
        name: &str,
        list: &str,
    ) -> Result<Vec<Xml>, ProviderError> {
        let mut out = Vec::new();
        let mut marker: Option<String> = None;
        // Bounded, so an endpoint that keeps answering with a marker cannot loop us.
        for _ in 0..1000 {
            let mut params = vec![param("RoleName", name)];
            if let Some(m) = &marker {
                params.push(param("Marker", m.clone()));
            }
            let result = self.call(action, &params).await?;
            if let Some(l) = result.find(list) {
                out.extend(l.all("member").cloned());
            }
            marker = result
                .text("Marker")
                .filter(|_| result.text("IsTruncated") == Some("true"))
                .map(str::to_string);
            if marker.is_none() {
                break;
            }
        }
        Ok(out)
    }

    /// The ARNs of the managed policies attached to the role.
    async fn attached(&self, name: &str) -> Result<Vec<String>, ProviderError> {
        Ok(self
            .list_all("ListAttachedRolePolicies", name, "AttachedPolicies")
            .await?
            .iter()
            .filter_map(|m| m.text("PolicyArn").map(str::to_string))
            .collect())
    }

    /// The role's inline policy named `terrain`, decoded; `None` when it has none.
    async fn inline(&self, name: &str) -> Result<Option<String>, ProviderError> {
        let params = [param("RoleName", name), param("PolicyName", INLINE_POLICY)];
        match self.call("GetRolePolicy", &params).await {
            Ok(r) => r
                .text("PolicyDocument")
                .map(|t| {
                    decode_document(t).map_err(|m| {
                        crate::failure::malformed(
                            "iam:GetRolePolicy",
                            crate::failure::Cloud::Aws,
                            200,
                            &m,
                            None,
                        )
                    })
                })
                .transpose(),
            Err(e) if code_of(&e) == NO_SUCH_ENTITY => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn attach(&self, name: &str, arn: &str) -> Result<(), ProviderError> {
        self.call(
            "AttachRolePolicy",
            &[param("RoleName", name), param("PolicyArn", arn)],
        )
        .await
        .map(drop)
    }

    async fn detach(&self, name: &str, arn: &str) -> Result<(), ProviderError> {
        match self
            .call(
                "DetachRolePolicy",
                &[param("RoleName", name), param("PolicyArn", arn)],
            )
            .await
        {
            Err(e) if code_of(&e) == NO_SUCH_ENTITY => Ok(()),
            other => other.map(drop),
        }
    }

    async fn put_inline(&self, name: &str, document: &str) -> Result<(), ProviderError> {
        self.call(
            "PutRolePolicy",
            &[
                param("RoleName", name),
                param("PolicyName", INLINE_POLICY),
                param("PolicyDocument", document),
            ],
        )
        .await
        .map(drop)
    }

    async fn delete_inline(&self, name: &str, policy: &str) -> Result<(), ProviderError> {
        match self
            .call(
                "DeleteRolePolicy",
                &[param("RoleName", name), param("PolicyName", policy)],
            )
            .await
        {
            Err(e) if code_of(&e) == NO_SUCH_ENTITY => Ok(()),
            other => other.map(drop),
        }
    }
}

/// Runs `step` on a role just created, retrying while IAM does not know the role
/// everywhere yet (NoSuchEntity for a few seconds after CreateRole).
async fn on_new_role<F, Fut>(ctx: &Ctx, name: &str, mut step: F) -> Result<(), ProviderError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), ProviderError>>,
{
    let started = Instant::now();
    let mut delay = Duration::from_millis(200);
    loop {
        match step().await {
            Err(e) if code_of(&e) == NO_SUCH_ENTITY && started.elapsed() < PROPAGATION => {
                ctx.progress(&format!("waiting for role {name} to propagate"));
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
            other => return other,
        }
    }
}

fn outputs_of(role: &Role) -> Outputs {
    Outputs {
        arn: role.arn.clone(),
        name: role.name.clone(),
        unique_id: role.id.clone(),
    }
}

/// Reads the whole role as a spec, or `None` when it is gone.
async fn read_live(
    iam: &Iam,
    name: &str,
    prior: Option<&Spec>,
) -> Result<Option<Live<IamRole>>, ProviderError> {
    let Some(role) = iam.get_role(name).await? else {
        return Ok(None);
    };
    let (attached, inline) = futures::join!(iam.attached(name), iam.inline(name));
    let gone = |e: &ProviderError| code_of(e) == NO_SUCH_ENTITY;
    let attached = match attached {
        Ok(a) => a,
        Err(e) if gone(&e) => return Ok(None),
        Err(e) => return Err(e),
    };
    let inline = inline?;
    let malformed = |call: &str, m: String| {
        crate::failure::malformed(call, crate::failure::Cloud::Aws, 200, &m, None)
    };
    let trust = match &role.trust {
        Some(text) => {
            let doc = Document::parse_text(text).map_err(|m| malformed("iam:GetRole", m))?;
            trust_as_written(&doc, prior.map(|p| &p.trust))
        }
        None => Value::Null,
    };
    let inline_doc = inline
        .as_deref()
        .map(Document::parse_text)
        .transpose()
        .map_err(|m| malformed("iam:GetRolePolicy", m))?;
    let spec = Spec {
        name: role.name.clone(),
        path: role.path.clone(),
        description: role.description.clone(),
        trust,
        managed_policies: policies_as_written(
            &attached,
            prior.map(|p| p.managed_policies.as_slice()),
        ),
        statements: statements_as_written(
            inline_doc.as_ref(),
            prior.map(|p| p.statements.as_slice()),
        ),
        max_session: session_as_written(role.max_session, prior.map(|p| p.max_session.as_str())),
        tags: user_tags(&role.tags),
    };
    Ok(Some(Live {
        id: role.name.clone(),
        outputs: outputs_of(&role),
        spec,
    }))
}

/// Takes the role from `from` (its live spec) to `spec`, call by call; only what
/// differs is sent.
async fn converge(
    ctx: &Ctx,
    iam: &Iam,
    name: &str,
    from: &Spec,
    spec: &Spec,
) -> Result<(), ProviderError> {
    let want = spec.parts()?;
    let had_trust = policy::trust_document(&from.trust).ok();
    let trust_same = had_trust
        .as_ref()
        .is_some_and(|d| policy::trust_document(&spec.trust).is_ok_and(|w| same_document(d, &w)));
    if !trust_same {
        iam.call(
            "UpdateAssumeRolePolicy",
            &[
                param("RoleName", name),
                param("PolicyDocument", want.trust.clone()),
            ],
        )
        .await?;
    }
    if from.description != spec.description || from.max_session != spec.max_session {
        iam.call(
            "UpdateRole",
            &[
                param("RoleName", name),
                param("Description", spec.description.clone().unwrap_or_default()),
                param("MaxSessionDuration", want.session.to_string()),
            ],
        )
        .await?;
    }
    // Policies a live spec names by something policy_arn refuses are detached by ARN
    // below: what it lists came from IAM, so its ARNs are in `had`.
    let had: BTreeSet<String> = from
        .managed_policies
        .iter()
        .map(|p| policy::policy_arn(p).unwrap_or_else(|_| p.clone()))
        .collect();
    let wanted: BTreeSet<&str> = want.policies.iter().map(String::as_str).collect();
    for arn in &want.policies {
        if !had.contains(arn) {
            ctx.progress(&format!("attaching {arn}"));
            iam.attach(name, arn).await?;
        }
    }
    for arn in &had {
        if !wanted.contains(arn.as_str()) {
            ctx.progress(&format!("detaching {arn}"));
            iam.detach(name, arn).await?;
        }
    }
    let had_inline = policy::inline_document(&from.statements).ok();
    match &want.inline {
        Some(text) => {
            let same = !from.statements.is_empty()
                && had_inline.as_ref().is_some_and(|d| {
                    policy::inline_document(&spec.statements).is_ok_and(|w| same_document(d, &w))
                });
            if !same {
                iam.put_inline(name, text).await?;
            }
        }
        None if !from.statements.is_empty() => iam.delete_inline(name, INLINE_POLICY).await?,
        None => {}
    }
    if from.tags != spec.tags {
        let ours = tags_with_ours(&spec.tags, &ctx.address);
        let changed: BTreeMap<String, String> = ours
            .iter()
            .filter(|(k, v)| from.tags.get(*k) != Some(*v))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if !changed.is_empty() {
            let mut params = vec![param("RoleName", name)];
            params.extend(tag_params(&changed));
            iam.call("TagRole", &params).await?;
        }
        let removed: Vec<&String> = from
            .tags
            .keys()
            .filter(|k| !ours.contains_key(*k))
            .collect();
        if !removed.is_empty() {
            let mut params = vec![param("RoleName", name)];
            params.extend(
                removed
                    .iter()
                    .enumerate()
                    .map(|(i, k)| param(format!("TagKeys.member.{}", i + 1), k.as_str())),
            );
            iam.call("UntagRole", &params).await?;
        }
    }
    Ok(())
}

fn gone_error(call: &str, name: &str) -> ProviderError {
    ProviderError::api(
        call,
        404,
        NO_SUCH_ENTITY,
        format!("role {name} is gone; it was deleted outside terrain, plan again to recreate it"),
    )
}

#[async_trait]
impl Kind for IamRole {
    type Spec = Spec;
    type Outputs = Outputs;
    const KIND: &'static str = "iam_role";
    const PROVIDER: &'static str = "aws";
    const WRITES: crate::protocol::Writes = crate::protocol::Writes::FromId;

    fn validate(spec: &Spec, _config: &Value) -> Vec<Invalid> {
        let mut out = Vec::new();
        if let Err(m) = check_name(&spec.name) {
            out.push(Invalid::at("name", m));
        }
        if let Err(m) = check_path(&spec.path) {
            out.push(Invalid::at("path", m));
        }
        if let Some(d) = &spec.description {
            if d.chars().count() > 1000 {
                out.push(Invalid::at(
                    "description",
                    "must be at most 1000 characters long",
                ));
            }
            if let Some(c) = d.chars().find(
                |c| !matches!(*c, '\t' | '\n' | '\r' | '\u{20}'..='\u{7e}' | '\u{a1}'..='\u{ff}'),
            ) {
                out.push(Invalid::at(
                    "description",
                    format!("{c:?} is not allowed in an IAM description (printable Latin-1 only)"),
                ));
            }
        }
        if let Err(m) = policy::trust_document(&spec.trust) {
            out.push(Invalid::at("trust", m));
        }
        let mut seen = BTreeSet::new();
        for (i, name) in spec.managed_policies.iter().enumerate() {
            match policy::policy_arn(name) {
                Ok(arn) => {
                    if !seen.insert(arn.clone()) {
                        out.push(Invalid::at(
                            &format!("managed_policies.{i}"),
                            format!("{arn} is listed twice"),
                        ));
                    }
                }
                Err(m) => out.push(Invalid::at(&format!("managed_policies.{i}"), m)),
            }
        }
        if spec.managed_policies.len() > MAX_MANAGED_POLICIES {
            out.push(Invalid::at(
                "managed_policies",
                format!(
                    "IAM attaches at most {MAX_MANAGED_POLICIES} managed policies to a role (10 unless the account's quota was raised), got {}",
                    spec.managed_policies.len()
                ),
            ));
        }
        let mut all_valid = true;
        for (i, s) in spec.statements.iter().enumerate() {
            if let Err(m) = s.statement() {
                all_valid = false;
                out.push(Invalid::at(&format!("statements.{i}"), m));
            }
        }
        if all_valid {
            if let Ok(Some(text)) = inline_text(&spec.statements) {
                let size = text.chars().filter(|c| !c.is_whitespace()).count();
                if size > MAX_INLINE_CHARS {
                    out.push(Invalid::at(
                        "statements",
                        format!("the inline policy is {size} characters; IAM allows {MAX_INLINE_CHARS} per role: attach a managed policy instead"),
                    ));
                }
            }
        }
        if let Err(m) = session_seconds(&spec.max_session) {
            out.push(Invalid::at("max_session", m));
        }
        check_tags("IAM", &spec.tags, &mut out);
        out
    }

    fn planned_id(spec: &Spec, _config: &Value) -> Option<String> {
        // Role names are unique per account (IAM is global): the name is the id.
        Some(spec.name.clone())
    }

    async fn read(
        &self,
        ctx: &Ctx,
        id: &str,
        prior: Option<&Spec>,
    ) -> Result<Option<Live<Self>>, ProviderError> {
        read_live(&Iam::new(ctx).await?, id, prior).await
    }

    async fn create(&self, ctx: &Ctx, spec: &Spec) -> Result<Live<Self>, ProviderError> {
        let iam = Iam::new(ctx).await?;
        let parts = spec.parts()?;
        let mut params = vec![
            param("RoleName", &spec.name),
            param("Path", &spec.path),
            param("AssumeRolePolicyDocument", parts.trust.clone()),
            param("MaxSessionDuration", parts.session.to_string()),
        ];
        if let Some(d) = &spec.description {
            params.push(param("Description", d));
        }
        params.extend(tag_params(&tags_with_ours(&spec.tags, &ctx.address)));
        let role = match iam.call("CreateRole", &params).await {
            Ok(r) => role_of("iam:CreateRole", r.find("Role"))?,
            Err(e) if code_of(&e) == "EntityAlreadyExists" => {
                return adopt(ctx, &iam, spec).await;
            }
            Err(e) => return Err(e),
        };
        for arn in &parts.policies {
            on_new_role(ctx, &spec.name, || iam.attach(&spec.name, arn)).await?;
        }
        if let Some(text) = &parts.inline {
            on_new_role(ctx, &spec.name, || iam.put_inline(&spec.name, text)).await?;
        }
        Ok(Live {
            id: spec.name.clone(),
            spec: spec.clone(),
            outputs: outputs_of(&role),
        })
    }

    async fn update(
        &self,
        ctx: &Ctx,
        id: &str,
        prior: &Spec,
        spec: &Spec,
    ) -> Result<Live<Self>, ProviderError> {
        let iam = Iam::new(ctx).await?;
        // From the live role rather than `prior`: a policy attached or a tag set outside
        // terrain since the last refresh is then put right too.
        let live = read_live(&iam, id, Some(prior))
            .await?
            .ok_or_else(|| gone_error("iam:GetRole", id))?;
        converge(ctx, &iam, id, &live.spec, spec)
            .await
            .map_err(|e| {
                if code_of(&e) == NO_SUCH_ENTITY {
                    gone_error(call_of(&e), id)
                } else {
                    e
                }
            })?;
        Ok(Live {
            id: id.to_string(),
            spec: spec.clone(),
            outputs: live.outputs,
        })
    }

    async fn delete(
        &self,
        ctx: &Ctx,
        id: &str,
        _prior: Option<&Spec>,
    ) -> Result<(), ProviderError> {
        let iam = Iam::new(ctx).await?;
        let gone = |e: &ProviderError| code_of(e) == NO_SUCH_ENTITY;
        // A policy attached between the listing and DeleteRole makes it answer
        // DeleteConflict: list again, a few times.
        for _attempt in 0..3 {
            let emptied = async {
                for arn in iam.attached(id).await? {
                    iam.detach(id, &arn).await?;
                }
                for member in iam.list_all("ListRolePolicies", id, "PolicyNames").await? {
                    iam.delete_inline(id, &member.text).await?;
                }
                for profile in iam
                    .list_all("ListInstanceProfilesForRole", id, "InstanceProfiles")
                    .await?
                {
                    let Some(profile) = profile.text("InstanceProfileName") else {
                        continue;
                    };
                    ctx.progress(&format!(
                        "removing the role from instance profile {profile}"
                    ));
                    match iam
                        .call(
                            "RemoveRoleFromInstanceProfile",
                            &[param("InstanceProfileName", profile), param("RoleName", id)],
                        )
                        .await
                    {
                        Err(e) if !gone(&e) => return Err(e),
                        _ => {}
                    }
                }
                Ok(())
            };
            match emptied.await {
                Ok(()) => {}
                Err(e) if gone(&e) => return Ok(()),
                Err(e) => return Err(e),
            }
            match iam.call("DeleteRole", &[param("RoleName", id)]).await {
                Ok(_) => return Ok(()),
                Err(e) if gone(&e) => return Ok(()),
                Err(e) if code_of(&e) == "DeleteConflict" => continue,
                Err(e) => return Err(e),
            }
        }
        Err(ProviderError::api(
            "iam:DeleteRole",
            409,
            "DeleteConflict",
            format!("role {id} keeps getting policies attached while destroy detaches them"),
        ))
    }
}

/// Takes over the role named as the spec's when its tags say `ctx.address` made it (an
/// earlier create whose answer was lost), bringing it to `spec`.
async fn adopt(ctx: &Ctx, iam: &Iam, spec: &Spec) -> Result<Live<IamRole>, ProviderError> {
    let live = read_live(iam, &spec.name, Some(spec))
        .await?
        .ok_or_else(|| gone_error("iam:GetRole", &spec.name))?;
    let tags = iam
        .get_role(&spec.name)
        .await?
        .map(|r| r.tags)
        .unwrap_or_default();
    if !is_ours(&tags, &ctx.address) {
        return Err(not_ours(
            "iam:CreateRole",
            "role",
            &spec.name,
            IamRole::KIND,
            &ctx.address,
        ));
    }
    if live.spec.path != spec.path {
        return Err(ProviderError::api(
            "iam:CreateRole",
            409,
            "EntityAlreadyExists",
            format!(
                "role {} exists with path {}, not {}; a path cannot change in place: delete the role or write path = {:?}",
                spec.name, live.spec.path, spec.path, live.spec.path
            ),
        ));
    }
    ctx.progress("adopting the role an earlier attempt created");
    converge(ctx, iam, &spec.name, &live.spec, spec).await?;
    Ok(Live {
        id: spec.name.clone(),
        spec: spec.clone(),
        outputs: live.outputs,
    })
}

fn call_of(e: &ProviderError) -> &str {
    match e {
        ProviderError::Api { call, .. } => call,
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::schema_mismatches;

    fn spec() -> Spec {
        Spec {
            name: "ml-cluster".into(),
            path: "/ml/".into(),
            description: Some("the EKS control plane".into()),
            trust: json!("eks"),
            managed_policies: vec![
                "AmazonEKSClusterPolicy".into(),
                "arn:aws:iam::111122223333:policy/team/ReadData".into(),
            ],
            statements: vec![serde_json::from_value(json!({
                "actions": ["s3:GetObject"],
                "resources": ["arn:aws:s3:::data/*"],
            }))
            .expect("a statement")],
            max_session: "2h".into(),
            tags: BTreeMap::from([("team".to_string(), "ml".to_string())]),
        }
    }

    fn problems(s: &Spec) -> Vec<String> {
        IamRole::validate(s, &Value::Null)
            .into_iter()
            .map(|p| p.to_string())
            .collect()
    }

    #[test]
    fn schema_matches_spec_and_outputs() {
        let outputs = Outputs {
            arn: "arn:aws:iam::123456789012:role/ml/ml-cluster".into(),
            name: "ml-cluster".into(),
            unique_id: "AROAEXAMPLE".into(),
        };
        assert_eq!(
            schema_mismatches::<IamRole>(&spec(), &outputs),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_full_spec_is_valid() {
        assert_eq!(problems(&spec()), Vec::<String>::new());
    }

    #[test]
    fn names_follow_iams_rules() {
        for ok in ["a", "ml-cluster", "Role_1+=,.@-", &"x".repeat(64)] {
            assert_eq!(check_name(ok), Ok(()), "{ok}");
        }
        for (bad, why) in [
            ("", "1 to 64"),
            (&"x".repeat(65) as &str, "1 to 64"),
            ("ml cluster", "' ' is not allowed"),
            ("ml/cluster", "'/' is not allowed"),
            ("rôle", "'ô' is not allowed"),
        ] {
            let e = check_name(bad).expect_err(bad);
            assert!(e.contains(why), "{bad}: {e}");
        }
        let mut s = spec();
        s.name = "ml:cluster".into();
        assert!(
            matches!(problems(&s).as_slice(), [p] if p.starts_with("name: ")),
            "{:?}",
            problems(&s)
        );
    }

    #[test]
    fn the_rules_are_iams_own() {
        let model = terrain_contracts::json("aws/botocore-1.44.5/iam/2010-05-08/service-2.json");
        let shape = |n: &str| model["shapes"][n].clone();
        assert_eq!(shape("roleNameType")["pattern"], json!("[\\w+=,.@-]+"));
        assert_eq!(
            (
                shape("roleNameType")["min"].clone(),
                shape("roleNameType")["max"].clone()
            ),
            (json!(1), json!(64))
        );
        assert_eq!(shape("pathType")["max"], json!(512));
        assert_eq!(
            (
                shape("roleMaxSessionDurationType")["min"].as_u64(),
                shape("roleMaxSessionDurationType")["max"].as_u64()
            ),
            (Some(MIN_SESSION), Some(MAX_SESSION))
        );
        assert_eq!(shape("roleDescriptionType")["max"], json!(1000));
    }

    #[test]
    fn paths_follow_iams_rules() {
        for ok in ["/", "/ml/", "/a/b/c/"] {
            assert_eq!(check_path(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "ml",
            "/ml",
            "ml/",
            "/m l/",
            &format!("/{}/", "a".repeat(511)),
        ] {
            assert!(check_path(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn trust_errors_are_reported_at_trust() {
        let mut s = spec();
        for (trust, says) in [
            (json!("ekz"), "unknown trust `ekz`"),
            (json!(["eks", 3]), "a list of trust presets holds names"),
            (json!({"service": ["x"]}), "unknown trust key `service`"),
            (json!({"actions": ["sts:AssumeRole"]}), "at least one of"),
            (json!(42), "a preset's name, a list of them, or a table"),
        ] {
            s.trust = trust.clone();
            let p = problems(&s);
            assert!(
                matches!(p.as_slice(), [one] if one.starts_with("trust: ") && one.contains(says)),
                "{trust}: {p:?}"
            );
        }
    }

    #[test]
    fn unknown_managed_policies_are_refused_with_a_did_you_mean() {
        let mut s = spec();
        s.managed_policies = vec![
            "AmazonEKSClusterPolicy".into(),
            "AmazonEKSWorkerNodePolicyy".into(),
            "arn:aws:iam::123:role/x".into(),
            "arn:aws:iam::aws:policy/AmazonEKSClusterPolicy".into(),
        ];
        let p = problems(&s);
        assert_eq!(p.len(), 3, "{p:?}");
        assert!(
            p[0].starts_with("managed_policies.1: ")
                && p[0].contains("did you mean `AmazonEKSWorkerNodePolicy`"),
            "{p:?}"
        );
        assert!(p[1].starts_with("managed_policies.2: ") && p[1].contains("not a policy ARN"));
        assert!(p[2].starts_with("managed_policies.3: ") && p[2].contains("listed twice"));
    }

    #[test]
    fn statements_are_checked_one_by_one() {
        let mut s = spec();
        s.statements = vec![
            serde_json::from_value(json!({"actions": ["s3:GetObject"]})).expect("ok"),
            serde_json::from_value(json!({"actions": ["s3:GetObject"], "effect": "Permit"}))
                .expect("decodes"),
            serde_json::from_value(json!({"actions": []})).expect("decodes"),
        ];
        let p = problems(&s);
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(p[0].starts_with("statements.1: ") && p[0].contains("Allow or Deny"));
        assert!(p[1].starts_with("statements.2: ") && p[1].contains("Action"));
    }

    #[test]
    fn sessions_last_one_to_twelve_hours() {
        assert_eq!(session_seconds("1h"), Ok(3600));
        assert_eq!(session_seconds("12h"), Ok(43_200));
        assert_eq!(session_seconds("1h30m"), Ok(5400));
        for (bad, says) in [
            ("59m", "1h to 12h"),
            ("13h", "1h to 12h"),
            ("1 hour", "not a duration"),
            ("3600500ms", "whole seconds"),
        ] {
            let e = session_seconds(bad).expect_err(bad);
            assert!(e.contains(says), "{bad}: {e}");
        }
        let mut s = spec();
        s.max_session = "24h".into();
        assert!(matches!(problems(&s).as_slice(), [p] if p.starts_with("max_session: ")));
    }

    #[test]
    fn tags_that_are_terrains_or_awss_are_refused() {
        let mut s = spec();
        s.tags = BTreeMap::from([
            ("aws:team".to_string(), "x".to_string()),
            ("terrain-address".to_string(), "x".to_string()),
        ]);
        assert_eq!(problems(&s).len(), 2, "{:?}", problems(&s));
    }

    #[test]
    fn url_encoded_documents_are_decoded() {
        let encoded = "%7B%22Version%22%3A%222012-10-17%22%2C%22Statement%22%3A%5B%7B%22Effect%22%3A%22Allow%22%2C%22Principal%22%3A%7B%22Service%22%3A%22eks.amazonaws.com%22%7D%2C%22Action%22%3A%5B%22sts%3AAssumeRole%22%2C%22sts%3ATagSession%22%5D%7D%5D%7D";
        let text = decode_document(encoded).expect("decodes");
        let doc = Document::parse_text(&text).expect("a document");
        let eks = policy::trust_document(&json!("eks")).expect("preset");
        assert!(same_document(&doc, &eks));
        // Plain JSON is taken as it is, a `%` in it included.
        let plain = r#"{"Statement": {"Effect": "Allow", "Action": "s3:*", "Resource": "arn:aws:s3:::a%20b"}}"#;
        assert_eq!(decode_document(plain).expect("plain"), plain);
        // A plus is a plus (RFC 3986), and multi-byte characters survive.
        assert_eq!(decode_document("a+b%C3%A9").expect("decodes"), "a+bé");
        assert!(decode_document("%7").is_err());
        assert!(decode_document("%FF").is_err(), "not UTF-8");
    }

    #[test]
    fn live_trust_reads_in_the_stacks_spelling() {
        let eks = policy::trust_document(&json!("eks")).expect("preset");
        assert_eq!(trust_as_written(&eks, Some(&json!("eks"))), json!("eks"));
        // On import, a preset's document reads as its name.
        assert_eq!(trust_as_written(&eks, None), json!("eks"));
        let two = policy::trust_document(&json!(["ec2", "sagemaker"])).expect("presets");
        assert_eq!(trust_as_written(&two, None), json!(["ec2", "sagemaker"]));
        // Another account's trust reads as a table that makes the same document.
        let table = json!({"accounts": ["111122223333"]});
        let doc = policy::trust_document(&table).expect("table");
        let read = trust_as_written(&doc, None);
        assert_eq!(read["accounts"], json!(["111122223333"]));
        assert!(same_document(
            &policy::trust_document(&read).expect("a table"),
            &doc
        ));
        // Drift: a trust changed outside terrain reads as what it is, not as the prior.
        let ec2 = policy::trust_document(&json!("ec2")).expect("preset");
        assert_eq!(trust_as_written(&ec2, Some(&json!("eks"))), json!("ec2"));
        // A document no `trust` value makes reads as the document.
        let deny = Document::parse(&json!({"Statement": [{"Effect": "Deny", "Principal": "*", "Action": "sts:AssumeRole"}]})).expect("doc");
        assert_eq!(trust_as_written(&deny, None), deny.to_value());
    }

    #[test]
    fn live_policies_read_in_the_stacks_spelling() {
        let live = vec![
            "arn:aws:iam::aws:policy/AmazonEKSClusterPolicy".to_string(),
            "arn:aws:iam::111122223333:policy/Extra".to_string(),
            "arn:aws:iam::aws:policy/AmazonS3ReadOnlyAccess".to_string(),
        ];
        let prior = vec![
            "arn:aws:iam::aws:policy/AmazonS3ReadOnlyAccess".to_string(),
            "AmazonEKSClusterPolicy".to_string(),
            "AmazonEKSWorkerNodePolicy".to_string(),
        ];
        assert_eq!(
            policies_as_written(&live, Some(&prior)),
            vec![
                "arn:aws:iam::aws:policy/AmazonS3ReadOnlyAccess".to_string(),
                "AmazonEKSClusterPolicy".to_string(),
                "arn:aws:iam::111122223333:policy/Extra".to_string(),
            ]
        );
        assert_eq!(
            policies_as_written(&live[..1], None),
            vec!["AmazonEKSClusterPolicy".to_string()]
        );
    }

    #[test]
    fn live_statements_and_sessions_read_in_the_stacks_spelling() {
        let s = spec();
        let doc = policy::inline_document(&s.statements).expect("doc");
        assert_eq!(
            statements_as_written(Some(&doc), Some(&s.statements)),
            s.statements
        );
        assert_eq!(statements_as_written(None, Some(&s.statements)), vec![]);
        let changed = Document::parse(&json!({"Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*", "Condition": {"Bool": {"aws:SecureTransport": "true"}}}]})).expect("doc");
        let read = statements_as_written(Some(&changed), Some(&s.statements));
        assert_eq!(read.len(), 1);
        assert_eq!(read[0].actions, vec!["s3:*"]);
        assert_eq!(
            read[0].condition,
            Some(json!({"Bool": {"aws:SecureTransport": "true"}}))
        );
        assert_eq!(session_as_written(5400, Some("90m")), "90m");
        assert_eq!(session_as_written(7200, Some("1h")), "2h");
        assert_eq!(session_as_written(3600, None), "1h");
    }

    #[test]
    fn roles_read_from_iams_answer() {
        let xml = r#"<GetRoleResponse xmlns="https://iam.amazonaws.com/doc/2010-05-08/">
  <GetRoleResult>
    <Role>
      <Path>/ml/</Path>
      <AssumeRolePolicyDocument>%7B%22Version%22%3A%222012-10-17%22%2C%22Statement%22%3A%5B%5D%7D</AssumeRolePolicyDocument>
      <MaxSessionDuration>7200</MaxSessionDuration>
      <RoleId>AROAEXAMPLE</RoleId>
      <RoleName>ml-cluster</RoleName>
      <Arn>arn:aws:iam::123456789012:role/ml/ml-cluster</Arn>
      <Tags><member><Key>team</Key><Value>ml</Value></member></Tags>
    </Role>
  </GetRoleResult>
</GetRoleResponse>"#;
        let root = Xml::parse(xml).expect("xml");
        let role =
            role_of("iam:GetRole", root.find_at(&["GetRoleResult", "Role"])).expect("a role");
        assert_eq!(role.name, "ml-cluster");
        assert_eq!(role.path, "/ml/");
        assert_eq!(role.max_session, 7200);
        assert_eq!(role.description, None);
        assert_eq!(
            role.trust.as_deref(),
            Some(r#"{"Version":"2012-10-17","Statement":[]}"#)
        );
        assert_eq!(role.tags.get("team").map(String::as_str), Some("ml"));
    }
}
