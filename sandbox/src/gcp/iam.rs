//! IAM (iam v1): service accounts (create, get, list, patch, delete) with their own IAM
//! policies (who may act as or impersonate them), and `roles.get` of the predefined
//! roles (see `roles.rs`). As in Google, a service account is not readable for a moment
//! after its create returns (`VISIBLE_AFTER`): callers must retry a 404 that follows a
//! create. Custom roles are not emulated; a project's custom role reads as not found.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::error::ApiError;
use super::operation::OpCtx;
use super::policy::{Policy, Rules};
use super::schema::Rules as BodyRules;
use super::{parse_body, roles, str_of, Api};
use crate::common::hash::fnv64;
use crate::http::{ApiRequest, ApiResponse};

/// How long a new service account stays unreadable after its create returns.
const VISIBLE_AFTER: Duration = Duration::from_secs(2);

/// One service account.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Account {
    project: String,
    account: Value,
    /// When it becomes readable (created + `VISIBLE_AFTER`, scaled).
    visible: DateTime<Utc>,
    #[serde(default)]
    policy: Policy,
}

/// Every project's service accounts, by email.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub(crate) struct State {
    #[serde(default)]
    accounts: BTreeMap<String, Account>,
}

/// `[a-z]([-a-z0-9]*[a-z0-9])`, 6 to 30 characters: what IAM takes as an account id.
fn check_account_id(id: &str) -> Result<(), ApiError> {
    let ok = (6..=30).contains(&id.len())
        && id.starts_with(|c: char| c.is_ascii_lowercase())
        && id.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && id
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if ok {
        Ok(())
    } else {
        Err(ApiError::invalid(format!(
            "Invalid account ID: {id}. The account ID must be between 6 and 30 characters, start with a lowercase letter, and consist of lowercase alphanumeric characters and dashes."
        )))
    }
}

impl State {
    /// Whether the service account `email` exists (readable or not yet).
    pub(crate) fn exists(&self, email: &str) -> bool {
        self.accounts.contains_key(email)
    }

    /// Each service account's members allowed to act as it: those granted
    /// `iam.serviceAccounts.getAccessToken` on it (Workload Identity's impersonation
    /// goes through `roles/iam.workloadIdentityUser`).
    pub(crate) fn impersonators(&self) -> BTreeMap<String, BTreeSet<String>> {
        self.accounts
            .iter()
            .map(|(email, a)| {
                let who = a
                    .policy
                    .granted("iam.serviceAccounts.getAccessToken")
                    .into_iter()
                    .collect();
                (email.clone(), who)
            })
            .collect()
    }

    pub(crate) fn handle(
        &mut self,
        req: &ApiRequest,
        ctx: &OpCtx,
    ) -> Result<ApiResponse, ApiError> {
        let segments = req.segments();
        let s: Vec<&str> = segments.iter().map(String::as_str).collect();
        match (req.method.as_str(), s.as_slice()) {
            ("GET", ["v1", "roles", role]) => role_of(&format!("roles/{role}")),
            ("GET", ["v1", "projects", project, "roles", role]) => Err(ApiError::not_found(
                format!("The role named projects/{project}/roles/{role} was not found."),
            )),
            ("POST", ["v1", "projects", project, "serviceAccounts"]) => {
                self.create(project, req, ctx.now, ctx.scale)
            }
            ("GET", ["v1", "projects", project, "serviceAccounts"]) => {
                Ok(ApiResponse::ok(self.list(project, ctx.now)))
            }
            ("GET", ["v1", "projects", _, "serviceAccounts", email]) => self
                .readable(email, ctx.now)
                .map(|a| ApiResponse::ok(a.account.clone())),
            ("PATCH", ["v1", "projects", _, "serviceAccounts", email]) => {
                let body = parse_body(
                    req,
                    Api::Iam,
                    "PatchServiceAccountRequest",
                    "",
                    BodyRules::PROTO3,
                )?;
                let account = self.readable_mut(email, ctx.now)?;
                let mask = str_of(&body, "updateMask");
                for field in ["displayName", "description"] {
                    if mask.split(',').any(|m| m.trim() == field) {
                        account.account[field] = body["serviceAccount"][field].clone();
                    }
                }
                Ok(ApiResponse::ok(account.account.clone()))
            }
            ("DELETE", ["v1", "projects", _, "serviceAccounts", email]) => {
                self.readable(email, ctx.now)?;
                self.accounts.remove(*email);
                Ok(ApiResponse::ok(json!({})))
            }
            ("POST", ["v1", "projects", _, "serviceAccounts", action]) => {
                let (email, verb) = action
                    .rsplit_once(':')
                    .ok_or_else(|| ApiError::no_route("POST", &req.path))?;
                match verb {
                    "getIamPolicy" => {
                        let account = self.readable(email, ctx.now)?;
                        Ok(ApiResponse::ok(account.policy.to_json()))
                    }
                    "setIamPolicy" => {
                        let body = parse_body(
                            req,
                            Api::Iam,
                            "SetIamPolicyRequest",
                            "",
                            BodyRules::PROTO3,
                        )?;
                        let exists: Vec<String> = self.accounts.keys().cloned().collect();
                        let project = self.readable(email, ctx.now)?.project.clone();
                        let custom = format!("projects/{project}/roles/");
                        let account = self.readable_mut(email, ctx.now)?;
                        account.policy.set(
                            &body["policy"],
                            &Rules {
                                role_prefixes: Some(&[
                                    "roles/iam.",
                                    "roles/owner",
                                    "roles/editor",
                                    "roles/viewer",
                                ]),
                                custom_parent: &custom,
                                account_exists: &|e| exists.iter().any(|x| x == e),
                            },
                        )?;
                        Ok(ApiResponse::ok(account.policy.to_json()))
                    }
                    _ => Err(ApiError::no_route("POST", &req.path)),
                }
            }
            (method, _) => Err(ApiError::no_route(method, &req.path)),
        }
    }

    fn create(
        &mut self,
        project: &str,
        req: &ApiRequest,
        now: DateTime<Utc>,
        scale: f64,
    ) -> Result<ApiResponse, ApiError> {
        let body = parse_body(
            req,
            Api::Iam,
            "CreateServiceAccountRequest",
            "",
            BodyRules::PROTO3,
        )?;
        let id = str_of(&body, "accountId");
        check_account_id(id)?;
        let email = format!("{id}@{project}.iam.gserviceaccount.com");
        if self.accounts.contains_key(&email) {
            return Err(ApiError::exists(format!(
                "Service account {id} already exists within project projects/{project}."
            )));
        }
        let given = &body["serviceAccount"];
        // 21 digits, as Google's unique ids have.
        let unique = format!("1{:020}", fnv64(&[&email, &now.to_rfc3339()]));
        let mut account = json!({
            "name": format!("projects/{project}/serviceAccounts/{email}"),
            "projectId": project,
            "uniqueId": unique,
            "email": email,
            "etag": "MDEwMjE5MjA=",
            "oauth2ClientId": unique,
        });
        for field in ["displayName", "description"] {
            if let Some(v) = given[field].as_str().filter(|v| !v.is_empty()) {
                account[field] = json!(v);
            }
        }
        let lag = chrono::Duration::milliseconds((VISIBLE_AFTER.as_millis() as f64 * scale) as i64);
        self.accounts.insert(
            email.clone(),
            Account {
                project: project.to_string(),
                account: account.clone(),
                visible: now + lag,
                policy: Policy::default(),
            },
        );
        Ok(ApiResponse::ok(account))
    }

    fn list(&self, project: &str, now: DateTime<Utc>) -> Value {
        let accounts: Vec<Value> = self
            .accounts
            .values()
            .filter(|a| a.project == project && a.visible <= now)
            .map(|a| a.account.clone())
            .collect();
        if accounts.is_empty() {
            json!({})
        } else {
            json!({ "accounts": accounts })
        }
    }

    fn readable(&self, email: &str, now: DateTime<Utc>) -> Result<&Account, ApiError> {
        self.accounts
            .get(email)
            .filter(|a| a.visible <= now)
            .ok_or_else(|| not_found(email))
    }

    fn readable_mut(&mut self, email: &str, now: DateTime<Utc>) -> Result<&mut Account, ApiError> {
        self.accounts
            .get_mut(email)
            .filter(|a| a.visible <= now)
            .ok_or_else(|| not_found(email))
    }

    /// One line per service account (see `Sandbox::inventory`).
    pub(crate) fn inventory(&self, out: &mut Vec<String>) {
        for (email, a) in &self.accounts {
            out.push(format!("gcp iam service account {}/{email}", a.project));
        }
    }
}

fn not_found(email: &str) -> ApiError {
    ApiError::not_found(format!("Unknown service account: {email}"))
}

/// `roles.get` of a predefined role.
fn role_of(name: &str) -> Result<ApiResponse, ApiError> {
    let role = roles::get(name)
        .ok_or_else(|| ApiError::not_found(format!("The role named {name} was not found.")))?;
    let mut out = json!({
        "name": name,
        "title": role.title,
        "includedPermissions": role.permissions,
        "etag": "AA==",
    });
    if !role.stage.is_empty() {
        out["stage"] = json!(role.stage);
    }
    Ok(ApiResponse::ok(out))
}
