//! Google Cloud's predefined IAM roles and the permissions each grants, embedded from
//! `contracts/gcp/roles/` (its origin is in the contracts manifest): what `roles.get`
//! answers, which roles a policy may bind, and which permissions a binding gives. Read
//! once, on first use.

use std::collections::BTreeMap;
use std::io::Read;
use std::sync::OnceLock;

use serde::Deserialize;

const RAW: &[u8] = include_bytes!("../../../contracts/gcp/roles/predefined-roles.json.gz");

/// One predefined role.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Role {
    #[serde(default)]
    pub title: String,
    #[serde(default)]
    pub stage: String,
    #[serde(default)]
    pub permissions: Vec<String>,
}

#[derive(Debug, Deserialize)]
struct Catalog {
    roles: BTreeMap<String, Role>,
}

fn catalog() -> &'static BTreeMap<String, Role> {
    static READ: OnceLock<BTreeMap<String, Role>> = OnceLock::new();
    READ.get_or_init(|| {
        let mut text = String::new();
        // The file is checked against its manifest by the contracts' own test; a copy
        // that does not inflate leaves the catalog empty, which every role check shows.
        let read = flate2::read::GzDecoder::new(RAW).read_to_string(&mut text);
        read.ok()
            .and_then(|_| serde_json::from_str::<Catalog>(&text).ok())
            .map(|c| c.roles)
            .unwrap_or_default()
    })
}

/// The predefined role `name` (`roles/storage.objectAdmin`).
pub(crate) fn get(name: &str) -> Option<&'static Role> {
    catalog().get(name)
}

/// Whether the predefined role `role` grants `permission` (custom roles grant nothing
/// here: the sandbox does not hold their permissions).
pub(crate) fn grants(role: &str, permission: &str) -> bool {
    get(role).is_some_and(|r| {
        r.permissions
            .binary_search_by(|p| p.as_str().cmp(permission))
            .is_ok()
    })
}

/// How many predefined roles the catalog holds.
#[cfg(test)]
pub(crate) fn count() -> usize {
    catalog().len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_catalog_holds_the_roles_workloads_use() {
        assert!(count() > 1000, "{}", count());
        assert!(grants("roles/storage.objectUser", "storage.objects.create"));
        assert!(grants(
            "roles/storage.objectCreator",
            "storage.objects.create"
        ));
        assert!(!grants(
            "roles/storage.objectViewer",
            "storage.objects.create"
        ));
        assert!(grants(
            "roles/container.defaultNodeServiceAccount",
            "logging.logEntries.create"
        ));
        assert!(get("roles/storage.objectAdmn").is_none());
    }
}
