//! Resource Manager (cloudresourcemanager v3, and v1, which `gcloud projects` calls):
//! `projects.get` — a project's number, which Workload Identity principals name — and
//! the project's IAM policy (`getIamPolicy`, `setIamPolicy` with etags). Every project the sandbox is asked about
//! exists, with a stable number (`storage::project_number`) and, until someone changes
//! it, the policy of a new project: its creator as owner.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::error::ApiError;
use super::operation::OpCtx;
use super::policy::{Policy, Rules};
use super::schema::Rules as BodyRules;
use super::{parse_body, Api};
use crate::http::{ApiRequest, ApiResponse};

/// Who a new sandbox project's policy names as owner.
pub(crate) const CREATOR: &str = "user:owner@example.com";

/// The projects whose policy changed from a new project's.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub(crate) struct State {
    #[serde(default)]
    policies: BTreeMap<String, Policy>,
}

/// The project id a `projects/{id or number}` path names, or the id itself.
fn project_id<'a>(named: &'a str, known: &'a BTreeMap<String, Policy>) -> &'a str {
    known
        .keys()
        .find(|id| super::storage::project_number(id) == named)
        .map_or(named, String::as_str)
}

impl State {
    /// The policy of `project`, as a new project has it until changed.
    pub(crate) fn policy(&self, project: &str) -> Policy {
        self.policies.get(project).cloned().unwrap_or_else(|| {
            Policy::with(vec![json!({"role": "roles/owner", "members": [CREATOR]})])
        })
    }

    pub(crate) fn handle(
        &mut self,
        req: &ApiRequest,
        _ctx: &OpCtx,
        account_exists: &dyn Fn(&str) -> bool,
    ) -> Result<ApiResponse, ApiError> {
        let segments = req.segments();
        let s: Vec<&str> = segments.iter().map(String::as_str).collect();
        match (req.method.as_str(), s.as_slice()) {
            ("GET", ["v3", "projects", named]) => {
                let id = project_id(named, &self.policies).to_string();
                Ok(ApiResponse::ok(project(&id)))
            }
            ("GET", ["v1", "projects", named]) => {
                let id = project_id(named, &self.policies).to_string();
                Ok(ApiResponse::ok(json!({
                    "projectNumber": super::storage::project_number(&id),
                    "projectId": id,
                    "lifecycleState": "ACTIVE",
                    "name": id,
                    "createTime": "2026-01-01T00:00:00.000Z",
                    "parent": {"type": "organization", "id": "123456789012"},
                })))
            }
            // v1's policy methods take and give the same messages as v3's.
            ("POST", ["v1" | "v3", "projects", action]) => {
                let (named, verb) = action
                    .rsplit_once(':')
                    .ok_or_else(|| ApiError::no_route("POST", &req.path))?;
                let id = project_id(named, &self.policies).to_string();
                match verb {
                    "getIamPolicy" => {
                        parse_body(
                            req,
                            Api::ResourceManager,
                            "GetIamPolicyRequest",
                            "",
                            BodyRules::PROTO3,
                        )?;
                        Ok(ApiResponse::ok(self.policy(&id).to_json()))
                    }
                    "setIamPolicy" => {
                        let body = parse_body(
                            req,
                            Api::ResourceManager,
                            "SetIamPolicyRequest",
                            "",
                            BodyRules::PROTO3,
                        )?;
                        let mut policy = self.policy(&id);
                        let custom = format!("projects/{id}/roles/");
                        policy.set(
                            &body["policy"],
                            &Rules {
                                role_prefixes: None,
                                custom_parent: &custom,
                                account_exists,
                            },
                        )?;
                        let out = policy.to_json();
                        self.policies.insert(id, policy);
                        Ok(ApiResponse::ok(out))
                    }
                    _ => Err(ApiError::no_route("POST", &req.path)),
                }
            }
            (method, _) => Err(ApiError::no_route(method, &req.path)),
        }
    }
}

/// A project as `projects.get` answers it.
fn project(id: &str) -> Value {
    json!({
        "name": format!("projects/{}", super::storage::project_number(id)),
        "parent": "organizations/123456789012",
        "projectId": id,
        "state": "ACTIVE",
        "displayName": id,
        "createTime": "2026-01-01T00:00:00.000Z",
        "updateTime": "2026-01-01T00:00:00.000Z",
        "etag": "W/\"a1b2c3d4e5f60718\"",
    })
}
