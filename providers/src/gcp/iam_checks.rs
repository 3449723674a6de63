//! Checks across a stack's Google identities. Offline (`check`), also when the
//! accounts, bindings and pools are all created by the same stack: what a node pool's
//! service account is granted (logs and metrics; the Artifact Registry its workloads
//! pull from), and the basic roles no workload identity should hold. Permissions come
//! from the predefined roles catalog (`roles.rs`); a custom role's are not known
//! offline, so a binding of one counts as granting what is asked. At plan, read-only
//! (`check_planned`): the roles a new grant names exist in IAM (`roles.get`), and the
//! bucket or service account it is on, or a new pool's nodes run as, exists when the
//! stack does not make it.

use std::collections::BTreeSet;

use serde_json::Value;

use super::client::{client, segment, status_of, Request};
use super::config::Api;
use super::roles;
use super::service_account::email_of;
use crate::protocol::{is_unknown, Planned, StackFinding, StackResource};
use crate::{Ctx, ProviderError};

/// The kinds these checks read.
pub const STACK_KINDS: &[&str] = &[
    "gke_node_pool",
    "gcp_service_account",
    "gcp_iam_member",
    "kubernetes_job",
    "kubernetes_manifest",
];

/// What a node needs to report its logs and metrics (`roles/container.defaultNodeServiceAccount`).
const NODE_PERMISSIONS: [&str; 2] = ["logging.logEntries.create", "monitoring.timeSeries.create"];
/// What pulling an image from Artifact Registry needs.
const PULL: &str = "artifactregistry.repositories.downloadArtifacts";

/// The stack's service account a value names (`${gcp_service_account.nodes.email}`,
/// `serviceAccount:${gcp_service_account.nodes.email}`, `${…member}`).
fn account_named(r: &StackResource, path: &str) -> Option<String> {
    if let Some((address, _)) = r.referenced(path) {
        return address
            .starts_with("gcp_service_account.")
            .then(|| address.to_string());
    }
    let written = r.refs.get(path)?;
    let start = written.find("${gcp_service_account.")? + 2;
    let rest = &written[start..];
    let name_end = rest["gcp_service_account.".len()..]
        .find(['.', '}'])
        .map(|i| i + "gcp_service_account.".len())?;
    Some(rest[..name_end].to_string())
}

/// The roles the stack grants `account` on its project (bindings on a bucket or an
/// account do not reach the nodes' logs, metrics or registries).
fn project_roles<'a>(resources: &'a [StackResource], account: &str) -> Vec<&'a str> {
    resources
        .iter()
        .filter(|r| r.kind == "gcp_iam_member")
        .filter(|r| r.spec["bucket"].is_null() && r.spec["service_account"].is_null())
        .filter(|r| account_named(r, "member").as_deref() == Some(account))
        .filter_map(|r| r.spec["role"].as_str())
        .collect()
}

fn granted(roles_held: &[&str], permission: &str) -> bool {
    roles_held
        .iter()
        .any(|r| roles::is_custom(r) || roles::grants(r, permission))
}

/// Whether any string in `v` names an Artifact Registry image (`REGION-docker.pkg.dev/…`).
fn pulls_from_artifact_registry(v: &Value) -> bool {
    match v {
        Value::String(s) => s.contains("-docker.pkg.dev/"),
        Value::Array(items) => items.iter().any(pulls_from_artifact_registry),
        Value::Object(m) => m.values().any(pulls_from_artifact_registry),
        _ => false,
    }
}

/// Every finding of these checks.
pub fn check(resources: &[StackResource]) -> Vec<StackFinding> {
    let mut out = Vec::new();
    let registry = resources
        .iter()
        .filter(|r| r.kind == "kubernetes_job" || r.kind == "kubernetes_manifest")
        .find(|r| pulls_from_artifact_registry(&r.spec));
    for pool in resources.iter().filter(|r| r.kind == "gke_node_pool") {
        let Some(account) = account_named(pool, "service_account") else {
            continue;
        };
        let held = project_roles(resources, &account);
        if !NODE_PERMISSIONS.iter().all(|p| granted(&held, p)) {
            out.push(StackFinding::warning(
                &pool.address,
                "service_account",
                format!("its nodes run as {account}, which the stack does not grant roles/container.defaultNodeServiceAccount on the project: the nodes cannot write their logs and metrics; add a gcp_iam_member with that role and member = \"${{{account}.member}}\""),
            ));
        }
        if let Some(workload) = registry {
            if !granted(&held, PULL) {
                out.push(StackFinding::warning(
                    &pool.address,
                    "service_account",
                    format!("{} pulls images from Artifact Registry, but {account}, which the nodes run as, is not granted roles/artifactregistry.reader: the pulls will fail with 403; grant it on the project or the repository", workload.address),
                ));
            }
        }
    }
    for grant in resources.iter().filter(|r| r.kind == "gcp_iam_member") {
        let role = grant.spec["role"].as_str().unwrap_or_default();
        let workload = !grant.spec["kubernetes_service_account"].is_null()
            || grant.spec["member"]
                .as_str()
                .is_some_and(|m| m.contains(".svc.id.goog"));
        if workload && (role == "roles/owner" || role == "roles/editor") {
            out.push(StackFinding::warning(
                &grant.address,
                "role",
                format!("{role} to a workload identity gives every pod running as it the whole project; grant only what the workload needs (roles/storage.objectUser on its bucket, …)"),
            ));
        }
    }
    out
}

/// A known, non-empty string at `key` of `spec`.
fn known<'a>(spec: &'a Value, key: &str) -> Option<&'a str> {
    spec[key]
        .as_str()
        .filter(|v| !v.is_empty() && !is_unknown(&Value::String(v.to_string())))
}

/// Whether a read answered 404; any other failure means the cloud could not be asked.
async fn missing(ctx: &Ctx, req: Request) -> Result<bool, ProviderError> {
    let c = client(ctx)?;
    match c.send(ctx, &req.transport_retries(0)).await {
        Ok(_) => Ok(false),
        Err(e) if status_of(&e) == Some(404) => Ok(true),
        Err(e) => Err(e),
    }
}

/// The plan's read-only checks: every predefined role a new grant names is asked of
/// IAM once; a grant's bucket or service account, and a new pool's service account,
/// named as written rather than made by the plan, must exist.
pub async fn check_planned(
    ctx: &Ctx,
    planned: &[Planned],
) -> Result<Vec<StackFinding>, ProviderError> {
    let project = ctx.config["project"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let buckets: BTreeSet<&str> = planned
        .iter()
        .filter(|p| p.kind == "gcs_bucket")
        .filter_map(|p| known(&p.spec, "name"))
        .collect();
    let accounts: BTreeSet<String> = planned
        .iter()
        .filter(|p| p.kind == "gcp_service_account")
        .filter_map(|p| known(&p.spec, "account_id"))
        .map(|id| email_of(id, &project))
        .collect();
    let mut out = Vec::new();
    let mut asked_roles: BTreeSet<String> = BTreeSet::new();
    for p in planned.iter().filter(|p| p.creates) {
        match p.kind.as_str() {
            "gcp_iam_member" => {
                if let Some(role) = known(&p.spec, "role").filter(|r| r.starts_with("roles/")) {
                    if asked_roles.insert(role.to_string())
                        && missing(
                            ctx,
                            Request::get("iam.roles.get", Api::Iam, format!("v1/{role}")),
                        )
                        .await?
                    {
                        out.push(StackFinding::error(
                            &p.address,
                            "role",
                            format!("IAM has no role {role} (iam.roles.get answered 404); grant a role `gcloud iam roles list` shows, or a custom one as projects/PROJECT/roles/NAME"),
                        ));
                    }
                }
                if let Some(bucket) = known(&p.spec, "bucket").filter(|b| !buckets.contains(b)) {
                    if missing(
                        ctx,
                        Request::get(
                            "storage.buckets.get",
                            Api::Storage,
                            format!("storage/v1/b/{}", segment(bucket)),
                        ),
                    )
                    .await?
                    {
                        out.push(StackFinding::error(
                            &p.address,
                            "bucket",
                            format!("there is no bucket {bucket}: the stack does not make it and Cloud Storage has none (storage.buckets.get answered 404)"),
                        ));
                    }
                }
                if let Some(email) =
                    known(&p.spec, "service_account").filter(|a| !accounts.contains(*a))
                {
                    if missing(ctx, account_read(email)).await? {
                        out.push(StackFinding::error(
                            &p.address,
                            "service_account",
                            format!("there is no service account {email}: the stack does not make it and IAM has none (iam.projects.serviceAccounts.get answered 404)"),
                        ));
                    }
                }
            }
            "gke_node_pool" => {
                if let Some(email) =
                    known(&p.spec, "service_account").filter(|a| !accounts.contains(*a))
                {
                    if missing(ctx, account_read(email)).await? {
                        out.push(StackFinding::error(
                            &p.address,
                            "service_account",
                            format!("the nodes cannot run as {email}: the stack does not make it and IAM has no such service account (iam.projects.serviceAccounts.get answered 404)"),
                        ));
                    }
                }
            }
            _ => {}
        }
    }
    Ok(out)
}

fn account_read(email: &str) -> Request {
    Request::get(
        "iam.projects.serviceAccounts.get",
        Api::Iam,
        format!("v1/projects/-/serviceAccounts/{}", segment(email)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::BTreeMap;

    fn resource(kind: &str, name: &str, spec: Value, refs: &[(&str, &str)]) -> StackResource {
        StackResource {
            kind: kind.into(),
            address: format!("{kind}.{name}"),
            spec,
            config: json!({}),
            refs: refs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            links: BTreeMap::new(),
        }
    }

    fn pool() -> StackResource {
        resource(
            "gke_node_pool",
            "gpu",
            json!({"service_account": null}),
            &[("service_account", "${gcp_service_account.nodes.email}")],
        )
    }

    fn grant(role: &str) -> StackResource {
        resource(
            "gcp_iam_member",
            role,
            json!({"role": role, "member": null}),
            &[(
                "member",
                "serviceAccount:${gcp_service_account.nodes.email}",
            )],
        )
    }

    #[test]
    fn a_node_account_without_the_node_role_is_warned_about() {
        let found = check(&[pool()]);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0]
            .message
            .contains("roles/container.defaultNodeServiceAccount"));
        assert!(check(&[pool(), grant("roles/container.defaultNodeServiceAccount")]).is_empty());
    }

    #[test]
    fn artifact_registry_images_need_the_reader_role() {
        let job = resource(
            "kubernetes_job",
            "train",
            json!({"image": "us-docker.pkg.dev/p/ml/trainer:1"}),
            &[],
        );
        let found = check(&[
            pool(),
            grant("roles/container.defaultNodeServiceAccount"),
            job.clone(),
        ]);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].message.contains("roles/artifactregistry.reader"));
        assert!(check(&[
            pool(),
            grant("roles/container.defaultNodeServiceAccount"),
            grant("roles/artifactregistry.reader"),
            job
        ])
        .is_empty());
    }

    #[test]
    fn basic_roles_to_a_workload_are_warned_about() {
        let editor = resource(
            "gcp_iam_member",
            "wide",
            json!({"role": "roles/editor", "kubernetes_service_account": {"namespace": "a", "name": "b"}}),
            &[],
        );
        let found = check(&[editor]);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].path, "role");
    }
}
