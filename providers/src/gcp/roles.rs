//! Google Cloud's predefined IAM roles and their permissions, embedded from
//! `contracts/gcp/roles/` (origin and version in the contracts manifest): the offline
//! knowledge a plan checks roles with — a role that does not exist, with the nearest
//! real one; what a service account is granted by the stack's bindings.

use std::collections::BTreeMap;
use std::io::Read;
use std::sync::OnceLock;

use serde::Deserialize;

const RAW: &[u8] = include_bytes!("../../../contracts/gcp/roles/predefined-roles.json.gz");

#[derive(Debug, Deserialize)]
struct Role {
    #[serde(default)]
    stage: String,
    #[serde(default)]
    permissions: Vec<String>,
}

#[derive(Debug, Deserialize)]
struct Catalog {
    roles: BTreeMap<String, Role>,
}

fn catalog() -> &'static BTreeMap<String, Role> {
    static READ: OnceLock<BTreeMap<String, Role>> = OnceLock::new();
    READ.get_or_init(|| {
        let mut text = String::new();
        // The copy is checked against its manifest by the contracts' test; one that
        // does not inflate leaves the catalog empty, which `known` reports as such.
        flate2::read::GzDecoder::new(RAW)
            .read_to_string(&mut text)
            .ok()
            .and_then(|_| serde_json::from_str::<Catalog>(&text).ok())
            .map(|c| c.roles)
            .unwrap_or_default()
    })
}

/// Whether the catalog was read (it always is, unless the embedded copy is corrupt).
pub fn known() -> bool {
    !catalog().is_empty()
}

/// Whether the predefined role `role` grants `permission`.
pub fn grants(role: &str, permission: &str) -> bool {
    catalog().get(role).is_some_and(|r| {
        r.permissions
            .binary_search_by(|p| p.as_str().cmp(permission))
            .is_ok()
    })
}

/// Whether `role` is a custom role's name (`projects/P/roles/R`, `organizations/O/roles/R`).
pub fn is_custom(role: &str) -> bool {
    let parts: Vec<&str> = role.split('/').collect();
    matches!(parts.as_slice(), [scope, id, "roles", name]
        if (*scope == "projects" || *scope == "organizations") && !id.is_empty() && !name.is_empty())
}

/// Offline check of a role's name: a custom role's shape, or a predefined role the
/// catalog holds. A near miss of one is an error naming the nearest ones; a deprecated
/// role says so; a name close to none is left to the plan's `roles.get`.
pub fn check(role: &str) -> Result<(), String> {
    if is_custom(role) {
        return Ok(());
    }
    let Some(rest) = role.strip_prefix("roles/") else {
        return Err(format!(
            "{role:?} is not a role: write a predefined role as \"roles/NAME\" (e.g. \"roles/storage.objectUser\") or a custom one as \"projects/PROJECT/roles/NAME\""
        ));
    };
    if !known() {
        return Ok(());
    }
    match catalog().get(role) {
        Some(r) if r.stage == "DEPRECATED" => Err(format!(
            "{role} is deprecated; Google no longer grants it to new bindings"
        )),
        Some(_) => Ok(()),
        // A near miss is a typo; a name close to nothing may be a role newer than the
        // catalog, which the plan asks IAM about (`roles.get`).
        None => {
            let names: Vec<&str> = catalog().keys().map(String::as_str).collect();
            let close = super::catalog::close_matches(role, &names, 3);
            if close.is_empty() && rest.contains('.') {
                return Ok(());
            }
            let hint = super::catalog::did_you_mean_any(&close);
            Err(format!(
                "{role} is not a predefined Google Cloud role{hint}{}",
                if rest.contains('.') {
                    ""
                } else {
                    " (predefined roles are named SERVICE.ROLE, e.g. roles/storage.objectUser)"
                }
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_are_checked_offline_with_the_nearest_real_one() {
        assert!(known());
        assert!(check("roles/storage.objectUser").is_ok());
        assert!(check("roles/container.defaultNodeServiceAccount").is_ok());
        assert!(check("projects/p/roles/trainer").is_ok());
        let e = check("roles/storage.objectAdmn").expect_err("near miss");
        assert!(
            e.contains("did you mean `roles/storage.objectAdmin`"),
            "{e}"
        );
        assert!(check("storage.objectAdmin").is_err());
        assert!(
            check("roles/owner2").is_err(),
            "SERVICE.ROLE or a near miss"
        );
        assert!(
            check("roles/brandnewservice.runner").is_ok(),
            "left to roles.get"
        );
        assert!(check("projects/p/roles/").is_err());
    }

    #[test]
    fn permissions_come_from_the_catalog() {
        assert!(grants("roles/storage.objectUser", "storage.objects.create"));
        assert!(!grants(
            "roles/storage.objectViewer",
            "storage.objects.create"
        ));
        assert!(grants(
            "roles/iam.workloadIdentityUser",
            "iam.serviceAccounts.getAccessToken"
        ));
        assert!(grants(
            "roles/artifactregistry.reader",
            "artifactregistry.repositories.downloadArtifacts"
        ));
    }
}
