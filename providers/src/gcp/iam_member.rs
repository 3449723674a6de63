//! The `gcp_iam_member` kind: one principal granted one role on a project, a bucket or a
//! service account, without touching anyone else's bindings. Each write is a
//! read-modify-write of the resource's IAM policy carrying the etag it read; a write
//! that lost a race (409 on Resource Manager and IAM, 412 on Cloud Storage) starts again
//! from the read, so two writers never drop each other's members. Destroy removes only
//! this member from this role's binding.
//!
//! `kubernetes_service_account = { cluster, namespace, name }` names a Kubernetes service
//! account instead of a `member`: it becomes the principal GKE Workload Identity gives
//! the account, `principal://iam.googleapis.com/projects/NUMBER/locations/global/
//! workloadIdentityPools/PROJECT.svc.id.goog/subject/ns/NAMESPACE/sa/NAME` (the project's
//! pool, shared by its clusters; the number is read from Resource Manager), so a workload
//! needs no Google service account and no annotation.

use async_trait::async_trait;
use reqwest::Method;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::client::{client, segment, status_of, Client, Request};
use super::config::Api;
use super::roles;
use crate::schema::Fields;
use crate::{Ctx, Invalid, Kind, Live, Peer, ProviderError};

/// The kind `gcp_iam_member`.
#[derive(Debug, Clone, Copy, Default)]
pub struct GcpIamMember;

/// A Kubernetes service account, as the member of a binding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct KubernetesServiceAccount {
    #[terrain(doc = crate::kubernetes::CLUSTER_DOC)]
    pub cluster: Value,
    /// The account's namespace.
    pub namespace: String,
    /// The account's name.
    pub name: String,
}

/// An IAM condition: the binding applies only while `expression` (CEL) holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Condition {
    /// A short name, unique among the role's conditions.
    pub title: String,
    /// A CEL expression, e.g. `resource.name.startsWith("projects/_/buckets/b/objects/runs/")`.
    pub expression: String,
    /// What the condition is for.
    pub description: Option<String>,
}

/// What a stack writes for a `gcp_iam_member`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    /// A predefined role (`roles/storage.objectUser`) or a custom one
    /// (`projects/PROJECT/roles/NAME`).
    #[terrain(force_new)]
    pub role: String,
    /// Who is granted it: `user:EMAIL`, `group:EMAIL`, `serviceAccount:EMAIL`,
    /// `domain:DOMAIN`, `principal://…` or `principalSet://…`.
    #[terrain(force_new)]
    pub member: Option<String>,
    /// A Kubernetes service account, granted as its Workload Identity principal (instead
    /// of `member`).
    #[terrain(force_new)]
    pub kubernetes_service_account: Option<KubernetesServiceAccount>,
    /// Grant on this bucket.
    #[terrain(force_new)]
    pub bucket: Option<String>,
    /// Grant on this service account (its email): who may act as it.
    #[terrain(force_new)]
    pub service_account: Option<String>,
    /// Grant on this project (default: the provider's), when neither `bucket` nor
    /// `service_account` is set.
    #[terrain(force_new)]
    pub project: Option<String>,
    /// Limit the grant to when a condition holds.
    #[terrain(force_new)]
    pub condition: Option<Condition>,
}

/// What `gcp_iam_member` reports after apply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Outputs {
    /// The member as the policy holds it (the Workload Identity principal for a
    /// Kubernetes service account).
    #[terrain(derived_from = [])]
    pub member: String,
    /// The resource the binding is on: projects/P, b/BUCKET or
    /// projects/P/serviceAccounts/EMAIL.
    #[terrain(derived_from = [])]
    pub resource: String,
}

/// Where a binding lives.
#[derive(Debug, Clone, PartialEq)]
enum Target {
    Project(String),
    Bucket(String),
    Account(String),
}

impl Target {
    fn of(spec: &Spec, config_project: Option<&str>) -> Result<Target, ProviderError> {
        if let Some(b) = &spec.bucket {
            return Ok(Target::Bucket(b.clone()));
        }
        if let Some(a) = &spec.service_account {
            return Ok(Target::Account(a.clone()));
        }
        spec.project
            .clone()
            .or_else(|| config_project.map(str::to_string))
            .map(Target::Project)
            .ok_or_else(|| {
                ProviderError::Config(
                    "gcp_iam_member: no project; set `project` or `project` in [providers.gcp]"
                        .into(),
                )
            })
    }

    fn resource(&self) -> String {
        match self {
            Target::Project(p) => format!("projects/{p}"),
            Target::Bucket(b) => format!("b/{b}"),
            Target::Account(a) => format!("projects/-/serviceAccounts/{a}"),
        }
    }

    fn parse(resource: &str) -> Option<Target> {
        if let Some(b) = resource.strip_prefix("b/") {
            return Some(Target::Bucket(b.to_string()));
        }
        if let Some(a) = resource.strip_prefix("projects/-/serviceAccounts/") {
            return Some(Target::Account(a.to_string()));
        }
        resource
            .strip_prefix("projects/")
            .filter(|p| !p.contains('/'))
            .map(|p| Target::Project(p.to_string()))
    }

    fn calls(&self) -> (&'static str, &'static str) {
        match self {
            Target::Project(_) => (
                "cloudresourcemanager.projects.getIamPolicy",
                "cloudresourcemanager.projects.setIamPolicy",
            ),
            Target::Bucket(_) => (
                "storage.buckets.getIamPolicy",
                "storage.buckets.setIamPolicy",
            ),
            Target::Account(_) => (
                "iam.projects.serviceAccounts.getIamPolicy",
                "iam.projects.serviceAccounts.setIamPolicy",
            ),
        }
    }

    /// The resource's policy (version 3, so conditional bindings come back whole);
    /// `None` when the resource is gone.
    async fn get(&self, ctx: &Ctx, c: &Client) -> Result<Option<Value>, ProviderError> {
        let (call, _) = self.calls();
        let req = match self {
            Target::Project(p) => Request::new(
                call,
                Api::ResourceManager,
                Method::POST,
                format!("v3/projects/{}:getIamPolicy", segment(p)),
            )
            .body(json!({"options": {"requestedPolicyVersion": 3}})),
            Target::Bucket(b) => Request::get(
                call,
                Api::Storage,
                format!("storage/v1/b/{}/iam", segment(b)),
            )
            .query("optionsRequestedPolicyVersion", "3"),
            Target::Account(a) => Request::new(
                call,
                Api::Iam,
                Method::POST,
                format!("v1/projects/-/serviceAccounts/{}:getIamPolicy", segment(a)),
            )
            .query("options.requestedPolicyVersion", "3"),
        };
        match c.send(ctx, &req).await {
            Ok(v) => Ok(Some(v)),
            Err(e) if status_of(&e) == Some(404) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Writes `policy` (carrying the etag it was read with); `Ok(false)` when another
    /// writer got there first.
    async fn set(&self, ctx: &Ctx, c: &Client, policy: Value) -> Result<bool, ProviderError> {
        let (_, call) = self.calls();
        let req = match self {
            Target::Project(p) => Request::new(
                call,
                Api::ResourceManager,
                Method::POST,
                format!("v3/projects/{}:setIamPolicy", segment(p)),
            )
            .body(json!({"policy": policy})),
            Target::Bucket(b) => Request::new(
                call,
                Api::Storage,
                Method::PUT,
                format!("storage/v1/b/{}/iam", segment(b)),
            )
            .body(policy),
            Target::Account(a) => Request::new(
                call,
                Api::Iam,
                Method::POST,
                format!("v1/projects/-/serviceAccounts/{}:setIamPolicy", segment(a)),
            )
            .body(json!({"policy": policy})),
        }
        .returns_conflicts();
        match c.send(ctx, &req).await {
            Ok(_) => Ok(true),
            Err(e) if matches!(status_of(&e), Some(409 | 412)) => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// How many times a policy write that lost a race starts again from the read.
const RACES: u32 = 10;
const PROJECTS_GET: &str = "cloudresourcemanager.projects.get";

fn condition_json(c: &Condition) -> Value {
    let mut out = json!({"title": c.title, "expression": c.expression});
    if let Some(d) = &c.description {
        out["description"] = json!(d);
    }
    out
}

/// Whether a binding is the one for `role` under `condition` (same title and
/// expression; no condition matches only an unconditional binding).
fn same_binding(b: &Value, role: &str, condition: Option<&Value>) -> bool {
    b["role"] == role
        && match (b.get("condition").filter(|c| !c.is_null()), condition) {
            (None, None) => true,
            (Some(have), Some(want)) => {
                have["title"] == want["title"] && have["expression"] == want["expression"]
            }
            _ => false,
        }
}

/// Whether `policy` grants `member` `role` under `condition`.
pub fn has(policy: &Value, role: &str, member: &str, condition: Option<&Value>) -> bool {
    policy["bindings"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|b| {
            same_binding(b, role, condition)
                && b["members"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|m| m == member)
        })
}

/// Adds `member` to `role`'s binding (made when missing); everything else is kept as
/// read. False when it was there already.
pub fn add(policy: &mut Value, role: &str, member: &str, condition: Option<&Value>) -> bool {
    if has(policy, role, member, condition) {
        return false;
    }
    if !policy["bindings"].is_array() {
        policy["bindings"] = json!([]);
    }
    let Some(bindings) = policy["bindings"].as_array_mut() else {
        return false;
    };
    match bindings
        .iter_mut()
        .find(|b| same_binding(b, role, condition))
    {
        Some(b) => {
            if !b["members"].is_array() {
                b["members"] = json!([]);
            }
            if let Some(members) = b["members"].as_array_mut() {
                members.push(json!(member));
            }
        }
        None => {
            let mut b = json!({"role": role, "members": [member]});
            if let Some(c) = condition {
                b["condition"] = c.clone();
            }
            bindings.push(b);
        }
    }
    if condition.is_some() {
        policy["version"] = json!(3);
    }
    true
}

/// Removes `member` from `role`'s binding, and the binding when it is left empty;
/// everything else is kept as read. False when it was not there.
pub fn remove(policy: &mut Value, role: &str, member: &str, condition: Option<&Value>) -> bool {
    if !has(policy, role, member, condition) {
        return false;
    }
    if let Some(bindings) = policy["bindings"].as_array_mut() {
        for b in bindings
            .iter_mut()
            .filter(|b| same_binding(b, role, condition))
        {
            if let Some(members) = b["members"].as_array_mut() {
                members.retain(|m| m != member);
            }
        }
        bindings.retain(|b| b["members"].as_array().is_some_and(|m| !m.is_empty()));
    }
    if policy
        .get("bindings")
        .and_then(Value::as_array)
        .is_some_and(Vec::is_empty)
    {
        // An empty list would be read as "remove every binding" by nothing, but Google
        // omits it; so do we.
        if let Some(map) = policy.as_object_mut() {
            map.remove("bindings");
        }
    }
    true
}

/// Offline check of a member's form.
pub fn check_member(member: &str) -> Result<(), String> {
    let ok = match member.split_once(':') {
        _ if member == "allUsers" || member == "allAuthenticatedUsers" => true,
        _ if member.starts_with("principal://") || member.starts_with("principalSet://") => {
            member.starts_with("principal://iam.googleapis.com/")
                || member.starts_with("principalSet://iam.googleapis.com/")
        }
        Some(("user" | "group", email)) => is_email(email),
        Some(("serviceAccount", email)) => {
            is_email(email) || (email.contains(".svc.id.goog[") && email.ends_with(']'))
        }
        Some(("domain", d)) => d.contains('.') && !d.contains('@'),
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{member:?} is not an IAM member: write user:EMAIL, group:EMAIL, serviceAccount:EMAIL, domain:DOMAIN, principal://iam.googleapis.com/… or principalSet://iam.googleapis.com/… (or use kubernetes_service_account for a workload)"
        ))
    }
}

fn is_email(s: &str) -> bool {
    s.split_once('@')
        .is_some_and(|(local, domain)| !local.is_empty() && domain.contains('.'))
}

/// The Workload Identity principal of Kubernetes service account `namespace/name` in
/// project `project` (number `number`).
pub fn workload_principal(project: &str, number: &str, namespace: &str, name: &str) -> String {
    format!("principal://iam.googleapis.com/projects/{number}/locations/global/workloadIdentityPools/{project}.svc.id.goog/subject/ns/{namespace}/sa/{name}")
}

/// The id: resource, role, member and condition title, `|`-separated.
fn id_of(target: &Target, role: &str, member: &str, condition: Option<&Condition>) -> String {
    let mut id = format!("{}|{role}|{member}", target.resource());
    if let Some(c) = condition {
        id.push('|');
        id.push_str(&c.title);
    }
    id
}

/// The resource, role and member of an id.
fn parts(id: &str) -> Result<(Target, &str, &str), ProviderError> {
    let bad = || {
        super::bad_id(
            GcpIamMember::KIND,
            id,
            "RESOURCE|ROLE|MEMBER[|CONDITION TITLE]",
        )
    };
    let mut parts = id.splitn(4, '|');
    let (Some(resource), Some(role), Some(member)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(bad());
    };
    Ok((Target::parse(resource).ok_or_else(bad)?, role, member))
}

/// The member a spec grants: `member`, or the Kubernetes service account's principal
/// (which needs the project number).
async fn member_of(ctx: &Ctx, c: &Client, spec: &Spec) -> Result<String, ProviderError> {
    if let Some(m) = &spec.member {
        return Ok(m.clone());
    }
    let Some(ksa) = &spec.kubernetes_service_account else {
        return Err(ProviderError::Config(
            "gcp_iam_member: set `member` or `kubernetes_service_account`".into(),
        ));
    };
    let project = ksa.cluster["project"]
        .as_str()
        .map(str::to_string)
        .or_else(|| c.config.project.clone())
        .ok_or_else(|| {
            ProviderError::Config("gcp_iam_member: the cluster's project is not known".into())
        })?;
    let live = c
        .send(
            ctx,
            &Request::get(
                PROJECTS_GET,
                Api::ResourceManager,
                format!("v3/projects/{}", segment(&project)),
            ),
        )
        .await?;
    let number = live["name"]
        .as_str()
        .and_then(|n| n.strip_prefix("projects/"))
        .ok_or_else(|| {
            ProviderError::api(
                PROJECTS_GET,
                200,
                "",
                format!("project {project} has no number in its answer"),
            )
        })?;
    Ok(workload_principal(
        &project,
        number,
        &ksa.namespace,
        &ksa.name,
    ))
}

#[async_trait]
impl Kind for GcpIamMember {
    type Spec = Spec;
    type Outputs = Outputs;
    const KIND: &'static str = "gcp_iam_member";
    const PROVIDER: &'static str = "gcp";
    const WRITES: crate::protocol::Writes = crate::protocol::Writes::FromId;

    fn validate(spec: &Spec, _config: &Value) -> Vec<Invalid> {
        let mut out = Vec::new();
        if !crate::protocol::is_unknown(&json!(spec.role)) {
            if let Err(m) = roles::check(&spec.role) {
                out.push(Invalid::at("role", m));
            }
        }
        match (&spec.member, &spec.kubernetes_service_account) {
            (Some(_), Some(_)) => out.push(Invalid::at(
                "kubernetes_service_account",
                "set `member` or `kubernetes_service_account`, not both",
            )),
            (None, None) => out.push(Invalid::at(
                "",
                "name who is granted the role: `member = \"serviceAccount:…\"` or `kubernetes_service_account = { cluster = …, namespace = …, name = … }`",
            )),
            (Some(m), None) if !crate::protocol::is_unknown(&json!(m)) => {
                if let Err(e) = check_member(m) {
                    out.push(Invalid::at("member", e));
                }
            }
            _ => {}
        }
        let targets = [
            spec.bucket.is_some(),
            spec.service_account.is_some(),
            spec.project.is_some(),
        ];
        if targets.iter().filter(|t| **t).count() > 1 {
            out.push(Invalid::at(
                "",
                "grant on one resource: set at most one of `project`, `bucket` and `service_account`",
            ));
        }
        if let Some(c) = &spec.condition {
            if c.title.trim().is_empty() {
                out.push(Invalid::at("condition.title", "a condition needs a title"));
            }
            if c.expression.trim().is_empty() {
                out.push(Invalid::at(
                    "condition.expression",
                    "a condition needs an expression",
                ));
            }
        }
        out
    }

    fn validate_peers(_spec: &Value, peers: &[Peer]) -> Vec<Invalid> {
        peers
            .iter()
            .filter(|p| {
                p.kind == "gke_cluster"
                    && p.spec["mode"] != "autopilot"
                    && p.spec["workload_identity"] == Value::Bool(false)
            })
            .map(|p| {
                Invalid::at(
                    "kubernetes_service_account.cluster",
                    format!("{} has workload_identity = false, so its pods cannot act as their Kubernetes service accounts and this grant would reach nobody; set workload_identity = true on {}", p.address, p.address),
                )
            })
            .collect()
    }

    fn services(spec: &Value) -> Vec<&'static str> {
        let mut out = if spec["bucket"].is_string() {
            vec![Api::Storage.service()]
        } else if spec["service_account"].is_string() {
            vec![Api::Iam.service()]
        } else {
            vec![Api::ResourceManager.service()]
        };
        if !spec["kubernetes_service_account"].is_null()
            && !out.contains(&Api::ResourceManager.service())
        {
            // The principal names the project's number.
            out.push(Api::ResourceManager.service());
        }
        if !out.contains(&Api::Iam.service()) {
            // The plan asks IAM whether the role exists (roles.get).
            out.push(Api::Iam.service());
        }
        out
    }

    async fn read(
        &self,
        ctx: &Ctx,
        id: &str,
        prior: Option<&Spec>,
    ) -> Result<Option<Live<Self>>, ProviderError> {
        let (target, role, member) = parts(id)?;
        let c = client(ctx)?;
        let condition = prior.and_then(|p| p.condition.clone());
        let Some(policy) = target.get(ctx, &c).await? else {
            return Ok(None);
        };
        let wanted = condition.as_ref().map(condition_json);
        if !has(&policy, role, member, wanted.as_ref()) {
            return Ok(None);
        }
        let spec = match prior {
            Some(p) => p.clone(),
            None => Spec {
                role: role.to_string(),
                member: Some(member.to_string()),
                kubernetes_service_account: None,
                bucket: match &target {
                    Target::Bucket(b) => Some(b.clone()),
                    _ => None,
                },
                service_account: match &target {
                    Target::Account(a) => Some(a.clone()),
                    _ => None,
                },
                project: match &target {
                    Target::Project(p) => Some(p.clone()),
                    _ => None,
                },
                condition: None,
            },
        };
        Ok(Some(Live {
            id: id.to_string(),
            spec,
            outputs: Outputs {
                member: member.to_string(),
                resource: target.resource(),
            },
        }))
    }

    async fn create(&self, ctx: &Ctx, spec: &Spec) -> Result<Live<Self>, ProviderError> {
        let c = client(ctx)?;
        let target = Target::of(spec, c.config.project.as_deref())?;
        let member = member_of(ctx, &c, spec).await?;
        let condition = spec.condition.as_ref().map(condition_json);
        let (get_call, set_call) = target.calls();
        for race in 0..=RACES {
            let Some(mut policy) = target.get(ctx, &c).await? else {
                return Err(ProviderError::api(
                    get_call,
                    404,
                    "NOT_FOUND",
                    format!(
                        "{} does not exist, so nothing can be granted on it",
                        target.resource()
                    ),
                ));
            };
            if !add(&mut policy, &spec.role, &member, condition.as_ref())
                || target.set(ctx, &c, policy).await?
            {
                break;
            }
            if race == RACES {
                return Err(ProviderError::api(
                    set_call,
                    409,
                    "ABORTED",
                    format!(
                        "{} kept changing under {RACES} attempts to add {member}; try again",
                        target.resource()
                    ),
                ));
            }
            ctx.progress(&format!(
                "{} changed while granting {}; reading it again",
                target.resource(),
                spec.role
            ));
        }
        let id = id_of(&target, &spec.role, &member, spec.condition.as_ref());
        Ok(Live {
            id,
            spec: spec.clone(),
            outputs: Outputs {
                member,
                resource: target.resource(),
            },
        })
    }

    async fn update(
        &self,
        ctx: &Ctx,
        _id: &str,
        _prior: &Spec,
        spec: &Spec,
    ) -> Result<Live<Self>, ProviderError> {
        // Every field is force-new: an update only re-asserts the grant.
        self.create(ctx, spec).await
    }

    async fn delete(&self, ctx: &Ctx, id: &str, prior: Option<&Spec>) -> Result<(), ProviderError> {
        let (target, role, member) = parts(id)?;
        let c = client(ctx)?;
        let condition = prior.and_then(|p| p.condition.as_ref()).map(condition_json);
        let (_, set_call) = target.calls();
        for race in 0..=RACES {
            let Some(mut policy) = target.get(ctx, &c).await? else {
                return Ok(());
            };
            if !remove(&mut policy, role, member, condition.as_ref())
                || target.set(ctx, &c, policy).await?
            {
                return Ok(());
            }
            if race == RACES {
                return Err(ProviderError::api(
                    set_call,
                    409,
                    "ABORTED",
                    format!(
                        "{} kept changing under {RACES} attempts to remove {member}; try again",
                        target.resource()
                    ),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::schema_mismatches;

    fn spec() -> Spec {
        Spec {
            role: "roles/storage.objectUser".into(),
            member: Some("serviceAccount:runner@p.iam.gserviceaccount.com".into()),
            kubernetes_service_account: None,
            bucket: Some("data".into()),
            service_account: None,
            project: None,
            condition: None,
        }
    }

    #[test]
    fn schema_matches_spec_and_outputs() {
        let mut full = spec();
        full.condition = Some(Condition {
            title: "runs".into(),
            expression: "true".into(),
            description: Some("d".into()),
        });
        full.kubernetes_service_account = Some(KubernetesServiceAccount {
            cluster: json!({"project": "p"}),
            namespace: "kubeflow".into(),
            name: "pipeline-runner".into(),
        });
        let outputs = Outputs {
            member: "user:a@example.com".into(),
            resource: "b/data".into(),
        };
        // The schema check wants every field set at once; validation allows one target.
        full.service_account = Some("runner@p.iam.gserviceaccount.com".into());
        full.project = Some("p".into());
        assert_eq!(
            schema_mismatches::<GcpIamMember>(&full, &outputs),
            Vec::<String>::new()
        );
    }

    #[test]
    fn adding_keeps_everyone_elses_bindings_and_removing_only_takes_ours() {
        let mut policy = json!({"etag": "x", "bindings": [
            {"role": "roles/storage.objectUser", "members": ["user:someone@example.com"]},
            {"role": "roles/viewer", "members": ["group:team@example.com"]},
        ]});
        let me = "serviceAccount:runner@p.iam.gserviceaccount.com";
        assert!(add(&mut policy, "roles/storage.objectUser", me, None));
        assert!(
            !add(&mut policy, "roles/storage.objectUser", me, None),
            "already there"
        );
        assert_eq!(
            policy["bindings"][0]["members"],
            json!(["user:someone@example.com", me])
        );
        assert_eq!(
            policy["etag"], "x",
            "the etag read goes back with the write"
        );
        assert!(remove(&mut policy, "roles/storage.objectUser", me, None));
        assert_eq!(
            policy["bindings"][0]["members"],
            json!(["user:someone@example.com"])
        );
        assert_eq!(policy["bindings"][1]["role"], "roles/viewer");
        assert!(!remove(&mut policy, "roles/storage.objectUser", me, None));
    }

    #[test]
    fn conditional_grants_are_their_own_bindings() {
        let mut policy = json!({"bindings": [{"role": "roles/storage.objectUser", "members": ["user:a@example.com"]}]});
        let c = json!({"title": "runs", "expression": "resource.name.startsWith(\"x\")"});
        assert!(add(
            &mut policy,
            "roles/storage.objectUser",
            "user:a@example.com",
            Some(&c)
        ));
        assert_eq!(policy["version"], 3);
        assert_eq!(policy["bindings"].as_array().map(Vec::len), Some(2));
        assert!(remove(
            &mut policy,
            "roles/storage.objectUser",
            "user:a@example.com",
            Some(&c)
        ));
        assert!(has(
            &policy,
            "roles/storage.objectUser",
            "user:a@example.com",
            None
        ));
    }

    #[test]
    fn two_writers_racing_both_keep_their_member() {
        // Both read the same policy; the first write wins, the second is refused for its
        // stale etag, reads again and adds its member to what the first wrote.
        let start = json!({"etag": "1", "bindings": []});
        let (mut a, mut b) = (start.clone(), start.clone());
        add(
            &mut a,
            "roles/storage.objectUser",
            "user:a@example.com",
            None,
        );
        add(
            &mut b,
            "roles/storage.objectUser",
            "user:b@example.com",
            None,
        );
        let mut server = a.clone();
        server["etag"] = json!("2");
        assert_ne!(b["etag"], server["etag"], "b's write is refused");
        let mut b = server.clone();
        add(
            &mut b,
            "roles/storage.objectUser",
            "user:b@example.com",
            None,
        );
        assert_eq!(
            b["bindings"][0]["members"],
            json!(["user:a@example.com", "user:b@example.com"])
        );
    }

    #[test]
    fn members_roles_and_targets_are_checked_offline() {
        for ok in [
            "user:a@example.com",
            "serviceAccount:runner@p.iam.gserviceaccount.com",
            "serviceAccount:p.svc.id.goog[kubeflow/pipeline-runner]",
            "group:ml@example.com",
            "domain:example.com",
            "principal://iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/p.svc.id.goog/subject/ns/a/sa/b",
        ] {
            assert!(check_member(ok).is_ok(), "{ok}");
        }
        for bad in [
            "a@example.com",
            "user:nobody",
            "serviceaccount:x@y.z",
            "principal://evil.example/x",
        ] {
            assert!(check_member(bad).is_err(), "{bad}");
        }
        let mut s = spec();
        s.role = "roles/storage.objectAdmn".into();
        s.project = Some("p".into());
        s.member = Some("runner@p.iam.gserviceaccount.com".into());
        let found: Vec<String> = GcpIamMember::validate(&s, &json!({}))
            .iter()
            .map(|i| i.to_string())
            .collect();
        assert_eq!(found.len(), 3, "{found:?}");
        assert!(
            found[0].contains("did you mean `roles/storage.objectAdmin`"),
            "{found:?}"
        );
    }

    #[test]
    fn the_workload_principal_is_the_projects_pool() {
        assert_eq!(
            workload_principal("ml-prod", "123456789012", "kubeflow", "pipeline-runner"),
            "principal://iam.googleapis.com/projects/123456789012/locations/global/workloadIdentityPools/ml-prod.svc.id.goog/subject/ns/kubeflow/sa/pipeline-runner"
        );
    }
}
