//! IAM policies as Google's APIs hold them — on projects (Resource Manager), service
//! accounts (IAM) and buckets (Cloud Storage): bindings of a role to members with an
//! optional condition, and an etag that changes with every write. A set that carries an
//! etag other than the current one is refused, so two read-modify-writes racing cannot
//! lose each other's bindings; a set without one overwrites, as Google allows. Also
//! who a policy grants a permission to, through the predefined roles' permissions.

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::error::{ApiError, Code};
use super::roles;

/// One resource's policy.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Policy {
    /// Bumped by every write; the etag is derived from it.
    pub serial: u64,
    #[serde(default)]
    pub bindings: Vec<Value>,
}

/// What a policy may bind: the roles a resource supports (`None`: any existing role),
/// and whether a service account member exists.
pub(crate) struct Rules<'a> {
    /// The role prefixes the resource supports (`roles/storage.` for a bucket).
    pub role_prefixes: Option<&'a [&'a str]>,
    /// The custom roles' parent this resource may use (`projects/p/roles/`).
    pub custom_parent: &'a str,
    pub account_exists: &'a dyn Fn(&str) -> bool,
}

impl Policy {
    pub(crate) fn with(bindings: Vec<Value>) -> Policy {
        Policy {
            serial: 1,
            bindings,
        }
    }

    /// `BwY…`-style opaque etag, as Resource Manager and IAM answer.
    pub(crate) fn etag(&self) -> String {
        let mut bytes = vec![0x07, 0x06];
        bytes.extend_from_slice(&self.serial.to_be_bytes());
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }

    /// The policy as getIamPolicy answers it (`kind` and `resourceId` added by callers
    /// whose API has them).
    pub(crate) fn to_json(&self) -> Value {
        let version = if self.bindings.iter().any(|b| b.get("condition").is_some()) {
            3
        } else {
            1
        };
        let mut out = json!({"version": version, "etag": self.etag()});
        if !self.bindings.is_empty() {
            out["bindings"] = Value::Array(self.bindings.clone());
        }
        out
    }

    /// Replaces the bindings with `given`'s (a `Policy` body) if its etag, when it has
    /// one, is the current one. A stale etag is `Aborted` (Resource Manager and IAM's
    /// 409; Cloud Storage answers 412, see `stale`).
    pub(crate) fn set(&mut self, given: &Value, rules: &Rules<'_>) -> Result<(), ApiError> {
        if let Some(etag) = given["etag"].as_str() {
            if etag != self.etag() {
                return Err(ApiError::new(
                    Code::Aborted,
                    "There were concurrent policy changes. Please retry the whole read-modify-write with exponential backoff.",
                ));
            }
        }
        let mut bindings = Vec::new();
        for b in given["bindings"].as_array().into_iter().flatten() {
            let role = b["role"].as_str().unwrap_or_default();
            check_role(role, rules)?;
            let members: Vec<&str> = b["members"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            for m in &members {
                check_member(m, rules)?;
            }
            if members.is_empty() {
                // Google drops a binding left with no members.
                continue;
            }
            let mut binding = json!({"role": role, "members": members});
            if let Some(c) = b.get("condition").filter(|c| !c.is_null()) {
                if c["expression"].as_str().unwrap_or_default().is_empty() {
                    return Err(ApiError::invalid(format!(
                        "Condition of the binding for role {role} has no expression."
                    )));
                }
                binding["condition"] = c.clone();
            }
            bindings.push(binding);
        }
        self.bindings = bindings;
        self.serial += 1;
        Ok(())
    }

    /// The members unconditional bindings grant `permission`.
    pub(crate) fn granted(&self, permission: &str) -> Vec<String> {
        self.bindings
            .iter()
            .filter(|b| {
                b.get("condition").is_none()
                    && roles::grants(b["role"].as_str().unwrap_or_default(), permission)
            })
            .flat_map(|b| b["members"].as_array().cloned().unwrap_or_default())
            .filter_map(|m| m.as_str().map(str::to_string))
            .collect()
    }

    /// The members bound to `role` without a condition.
    pub(crate) fn members_of(&self, role: &str) -> Vec<String> {
        self.bindings
            .iter()
            .filter(|b| b.get("condition").is_none() && b["role"] == role)
            .flat_map(|b| b["members"].as_array().cloned().unwrap_or_default())
            .filter_map(|m| m.as_str().map(str::to_string))
            .collect()
    }
}

fn check_role(role: &str, rules: &Rules<'_>) -> Result<(), ApiError> {
    let custom = role.contains("/roles/");
    if custom {
        if !role.starts_with(rules.custom_parent) && !role.starts_with("organizations/") {
            return Err(ApiError::invalid(format!(
                "Role {role} is not supported for this resource."
            )));
        }
        return Ok(());
    }
    if roles::get(role).is_none() {
        return Err(ApiError::invalid(format!(
            "Role {role} is not supported for this resource."
        )));
    }
    if let Some(prefixes) = rules.role_prefixes {
        if !prefixes.iter().any(|p| role.starts_with(p)) {
            return Err(ApiError::invalid(format!(
                "Role {role} is not supported for this resource."
            )));
        }
    }
    Ok(())
}

fn check_member(member: &str, rules: &Rules<'_>) -> Result<(), ApiError> {
    let ok = match member.split_once(':') {
        _ if member == "allUsers" || member == "allAuthenticatedUsers" => true,
        _ if member.starts_with("principal://") || member.starts_with("principalSet://") => {
            member.contains("/workloadIdentityPools/") || member.contains("/workforcePools/")
        }
        Some(("serviceAccount", email)) => {
            if email.ends_with(".iam.gserviceaccount.com") && !(rules.account_exists)(email) {
                return Err(ApiError::invalid(format!(
                    "Service account {email} does not exist."
                )));
            }
            email.contains('@') || (email.contains(".svc.id.goog[") && email.ends_with(']'))
        }
        Some(("user" | "group", email)) => email.contains('@'),
        Some(("domain", d)) => d.contains('.'),
        Some((
            "projectOwner"
            | "projectEditor"
            | "projectViewer"
            | "deleted:user"
            | "deleted:serviceAccount",
            _,
        )) => true,
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(ApiError::invalid(format!(
            "Invalid argument: member {member:?} is not a valid principal: write it as user:EMAIL, serviceAccount:EMAIL, group:EMAIL, domain:DOMAIN or principal://…"
        )))
    }
}

/// The members a Kubernetes service account acts as under GKE Workload Identity in
/// `project` (number `number`): the principal of the project's pool, and the older
/// `serviceAccount:PROJECT.svc.id.goog[NS/NAME]` form of the same identity.
pub(crate) fn workload_members(
    project: &str,
    number: &str,
    namespace: &str,
    name: &str,
) -> Vec<String> {
    vec![
        format!("principal://iam.googleapis.com/projects/{number}/locations/global/workloadIdentityPools/{project}.svc.id.goog/subject/ns/{namespace}/sa/{name}"),
        format!("serviceAccount:{project}.svc.id.goog[{namespace}/{name}]"),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> Rules<'static> {
        Rules {
            role_prefixes: None,
            custom_parent: "projects/p/roles/",
            account_exists: &|e| e.starts_with("runner@"),
        }
    }

    #[test]
    fn a_stale_etag_is_refused_and_a_current_one_bumps_it() {
        let mut p = Policy::with(vec![
            json!({"role": "roles/owner", "members": ["user:a@example.com"]}),
        ]);
        let first = p.etag();
        let mut next = p.to_json();
        next["bindings"]
            .as_array_mut()
            .expect("bindings")
            .push(json!({"role": "roles/storage.objectUser", "members": ["serviceAccount:runner@p.iam.gserviceaccount.com"]}));
        p.set(&next, &rules()).expect("current etag");
        assert_ne!(p.etag(), first);
        let err = p.set(&next, &rules()).expect_err("stale");
        assert_eq!(err.code, Code::Aborted);
        assert_eq!(
            p.granted("storage.objects.create"),
            // Basic roles hold no object permissions: the catalog's Owner has none.
            ["serviceAccount:runner@p.iam.gserviceaccount.com"]
        );
    }

    #[test]
    fn unknown_roles_missing_accounts_and_bad_members_are_refused() {
        let mut p = Policy::default();
        for (bindings, says) in [
            (
                json!([{"role": "roles/storage.objectAdmn", "members": ["user:a@x.com"]}]),
                "not supported",
            ),
            (
                json!([{"role": "roles/viewer", "members": ["serviceAccount:ghost@p.iam.gserviceaccount.com"]}]),
                "does not exist",
            ),
            (
                json!([{"role": "roles/viewer", "members": ["a@x.com"]}]),
                "not a valid principal",
            ),
        ] {
            let err = p
                .set(&json!({"bindings": bindings}), &rules())
                .expect_err("refused");
            assert!(err.message.contains(says), "{}", err.message);
        }
        let bucket = Rules {
            role_prefixes: Some(&["roles/storage."]),
            ..rules()
        };
        let err = p
            .set(&json!({"bindings": [{"role": "roles/container.admin", "members": ["user:a@x.com"]}]}), &bucket)
            .expect_err("not a bucket role");
        assert!(err.message.contains("not supported for this resource"));
    }
}
