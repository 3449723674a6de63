//! The `gcp_service_account` kind: a Google service account in the provider's project
//! (IAM `projects.serviceAccounts`), for nodes and workloads to run as instead of the
//! Compute Engine default account. `account_id` is fixed; the display name and
//! description change in place.
//!
//! IAM is eventually consistent: an account is not readable for a moment after its
//! create returns, so create waits until a read finds it. A create whose answer was lost
//! finds the account already there (409); it is adopted only when its display name and
//! description are the ones this resource asks for, as service accounts carry no labels
//! to prove whose they are.

use async_trait::async_trait;
use reqwest::Method;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::client::{client, segment, status_of, Request};
use super::config::Api;
use crate::schema::Fields;
use crate::{Ctx, Invalid, Kind, Live, ProviderError};

/// The kind `gcp_service_account`.
#[derive(Debug, Clone, Copy, Default)]
pub struct GcpServiceAccount;

/// What a stack writes for a `gcp_service_account`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    /// The part of the email before `@`: 6–30 lowercase letters, digits and dashes,
    /// starting with a letter.
    #[terrain(force_new)]
    pub account_id: String,
    /// A human-readable name.
    pub display_name: Option<String>,
    /// What the account is for.
    pub description: Option<String>,
}

/// What `gcp_service_account` reports after apply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Outputs {
    /// ACCOUNT_ID@PROJECT.iam.gserviceaccount.com.
    #[terrain(derived_from = [])]
    pub email: String,
    /// The account as an IAM member: serviceAccount:EMAIL.
    #[terrain(derived_from = [])]
    pub member: String,
    /// The account's numeric id.
    #[terrain(derived_from = [])]
    pub unique_id: String,
    /// projects/PROJECT/serviceAccounts/EMAIL.
    #[terrain(derived_from = [])]
    pub name: String,
}

const CREATE: &str = "iam.projects.serviceAccounts.create";
const GET: &str = "iam.projects.serviceAccounts.get";
const PATCH: &str = "iam.projects.serviceAccounts.patch";
const DELETE: &str = "iam.projects.serviceAccounts.delete";

/// How long a new account may take to become readable.
const VISIBLE: std::time::Duration = std::time::Duration::from_secs(120);

/// Whether `id` is an account id IAM accepts.
pub fn check_account_id(id: &str) -> Result<(), String> {
    let ok = (6..=30).contains(&id.len())
        && id.starts_with(|c: char| c.is_ascii_lowercase())
        && id.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && id
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{id:?} is not a service account id: 6 to 30 lowercase letters, digits and dashes, starting with a letter and not ending with a dash"
        ))
    }
}

/// The email of account `id` in `project`.
pub fn email_of(id: &str, project: &str) -> String {
    format!("{id}@{project}.iam.gserviceaccount.com")
}

fn path(project: &str, email: &str) -> String {
    format!(
        "v1/projects/{}/serviceAccounts/{}",
        segment(project),
        segment(email)
    )
}

/// The project and email of an id (`projects/P/serviceAccounts/EMAIL`).
fn parts(id: &str) -> Result<(&str, &str), ProviderError> {
    match super::id_parts(id, &["projects", "serviceAccounts"]).as_deref() {
        Some([project, email]) => Ok((project, email)),
        _ => Err(super::bad_id(
            GcpServiceAccount::KIND,
            id,
            "projects/PROJECT/serviceAccounts/EMAIL",
        )),
    }
}

fn live_of(id: &str, live: &Value) -> Live<GcpServiceAccount> {
    let text = |k: &str| {
        live[k]
            .as_str()
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    };
    let email = text("email").unwrap_or_default();
    Live {
        id: id.to_string(),
        spec: Spec {
            account_id: email.split('@').next().unwrap_or_default().to_string(),
            display_name: text("displayName"),
            description: text("description"),
        },
        outputs: Outputs {
            member: format!("serviceAccount:{email}"),
            unique_id: text("uniqueId").unwrap_or_default(),
            name: text("name").unwrap_or_default(),
            email,
        },
    }
}

#[async_trait]
impl Kind for GcpServiceAccount {
    type Spec = Spec;
    type Outputs = Outputs;
    const KIND: &'static str = "gcp_service_account";
    const PROVIDER: &'static str = "gcp";
    const WRITES: crate::protocol::Writes = crate::protocol::Writes::FromId;

    fn validate(spec: &Spec, _config: &Value) -> Vec<Invalid> {
        let mut out = Vec::new();
        if let Err(m) = check_account_id(&spec.account_id) {
            out.push(Invalid::at("account_id", m));
        }
        if spec
            .display_name
            .as_ref()
            .is_some_and(|d| d.chars().count() > 100)
        {
            out.push(Invalid::at("display_name", "at most 100 characters"));
        }
        if spec
            .description
            .as_ref()
            .is_some_and(|d| d.chars().count() > 256)
        {
            out.push(Invalid::at("description", "at most 256 characters"));
        }
        out
    }

    fn services(_spec: &Value) -> Vec<&'static str> {
        vec![Api::Iam.service()]
    }

    fn planned_id(spec: &Spec, config: &Value) -> Option<String> {
        let project = config["project"].as_str()?;
        Some(format!(
            "projects/{project}/serviceAccounts/{}",
            email_of(&spec.account_id, project)
        ))
    }

    async fn read(
        &self,
        ctx: &Ctx,
        id: &str,
        _prior: Option<&Spec>,
    ) -> Result<Option<Live<Self>>, ProviderError> {
        let (project, email) = parts(id)?;
        let c = client(ctx)?;
        Ok(
            c.get_opt(ctx, &Request::get(GET, Api::Iam, path(project, email)))
                .await?
                .map(|live| live_of(id, &live)),
        )
    }

    async fn create(&self, ctx: &Ctx, spec: &Spec) -> Result<Live<Self>, ProviderError> {
        let c = client(ctx)?;
        let project = c.config.project()?.to_string();
        let email = email_of(&spec.account_id, &project);
        let id = format!("projects/{project}/serviceAccounts/{email}");
        let mut account = json!({});
        if let Some(d) = &spec.display_name {
            account["displayName"] = json!(d);
        }
        if let Some(d) = &spec.description {
            account["description"] = json!(d);
        }
        let req = Request::new(
            CREATE,
            Api::Iam,
            Method::POST,
            format!("v1/projects/{}/serviceAccounts", segment(&project)),
        )
        .body(json!({"accountId": spec.account_id, "serviceAccount": account}))
        .returns_conflicts();
        match c.send(ctx, &req).await {
            Ok(_) => {}
            Err(e) if status_of(&e) == Some(409) => {
                let theirs = self.read(ctx, &id, None).await?;
                let ours = theirs.as_ref().is_some_and(|l| {
                    l.spec.display_name == spec.display_name
                        && l.spec.description == spec.description
                });
                if !ours {
                    return Err(ProviderError::api(
                        CREATE,
                        409,
                        "ALREADY_EXISTS",
                        format!("service account {email} already exists and was not made by this resource (its display name or description differ); bring it under the stack with `terrain import gcp_service_account.NAME {id}` or pick another account_id"),
                    ));
                }
            }
            Err(e) => return Err(e),
        }
        // Readable a moment after the create returns.
        let started = std::time::Instant::now();
        loop {
            if let Some(live) = self.read(ctx, &id, Some(spec)).await? {
                return Ok(live);
            }
            if started.elapsed() > VISIBLE {
                return Err(ProviderError::api(
                    GET,
                    404,
                    "NOT_FOUND",
                    format!(
                        "service account {email} was created but is still not readable after {}s",
                        VISIBLE.as_secs()
                    ),
                ));
            }
            ctx.progress(&format!(
                "waiting for service account {email} to become readable"
            ));
            tokio::time::sleep(c.config.poll_interval).await;
        }
    }

    async fn update(
        &self,
        ctx: &Ctx,
        id: &str,
        prior: &Spec,
        spec: &Spec,
    ) -> Result<Live<Self>, ProviderError> {
        let (project, email) = parts(id)?;
        let mut mask = Vec::new();
        let mut account = json!({});
        if prior.display_name != spec.display_name {
            mask.push("displayName");
            account["displayName"] = json!(spec.display_name.clone().unwrap_or_default());
        }
        if prior.description != spec.description {
            mask.push("description");
            account["description"] = json!(spec.description.clone().unwrap_or_default());
        }
        if !mask.is_empty() {
            let c = client(ctx)?;
            let req = Request::new(PATCH, Api::Iam, Method::PATCH, path(project, email))
                .body(json!({"serviceAccount": account, "updateMask": mask.join(",")}));
            c.send(ctx, &req).await?;
        }
        self.read(ctx, id, Some(spec)).await?.ok_or_else(|| {
            ProviderError::api(
                GET,
                404,
                "NOT_FOUND",
                format!("service account {email} is gone"),
            )
        })
    }

    async fn delete(
        &self,
        ctx: &Ctx,
        id: &str,
        _prior: Option<&Spec>,
    ) -> Result<(), ProviderError> {
        let (project, email) = parts(id)?;
        let c = client(ctx)?;
        let req = Request::new(DELETE, Api::Iam, Method::DELETE, path(project, email));
        match c.send(ctx, &req).await {
            Ok(_) => Ok(()),
            Err(e) if status_of(&e) == Some(404) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::schema_mismatches;

    #[test]
    fn schema_matches_spec_and_outputs() {
        let spec = Spec {
            account_id: "gpu-nodes".into(),
            display_name: Some("GPU nodes".into()),
            description: Some("what the GPU pools run as".into()),
        };
        let outputs = Outputs {
            email: "gpu-nodes@p.iam.gserviceaccount.com".into(),
            member: "serviceAccount:gpu-nodes@p.iam.gserviceaccount.com".into(),
            unique_id: "100000000000000000001".into(),
            name: "projects/p/serviceAccounts/gpu-nodes@p.iam.gserviceaccount.com".into(),
        };
        assert_eq!(
            schema_mismatches::<GcpServiceAccount>(&spec, &outputs),
            Vec::<String>::new()
        );
    }

    #[test]
    fn account_ids_are_checked_offline() {
        assert!(check_account_id("gpu-nodes").is_ok());
        assert!(check_account_id("kfp-runner-1").is_ok());
        for bad in [
            "short",
            "Gpu-nodes",
            "gpu_nodes",
            "gpu-nodes-",
            "1gpu-nodes",
            &"a".repeat(31),
        ] {
            assert!(check_account_id(bad).is_err(), "{bad}");
        }
    }
}
