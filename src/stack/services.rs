//! Ordering found from the cloud APIs the stack's resources call: a resource is created
//! after the resource of the stack that turns its API on in its project (a
//! `gcp_project_service` of a provider instance configured for the same project),
//! without a hand-written `depends_on`, and destroyed before it. Whether an API no resource turns on is on in
//! the live project is the plan's to ask (see `engine/services.rs`).

use std::collections::BTreeMap;

use super::ResourceConfig;
use crate::addr::Address;

/// The APIs a resource calls and turns on, read offline from its spec.
#[derive(Debug, Clone, PartialEq)]
pub struct Services {
    /// Its provider instance's project (the instance's name when it names none):
    /// APIs are on or off per project.
    pub project: String,
    pub uses: Vec<&'static str>,
    pub enables: Option<String>,
}

/// Adds to each resource the resources of its project that turn on an API it calls
/// (as [`ResourceConfig::implied`]).
pub fn link(
    resources: &mut BTreeMap<Address, ResourceConfig>,
    services: &BTreeMap<Address, Services>,
) {
    for (user, s) in services {
        let enablers: Vec<Address> = services
            .iter()
            .filter(|(a, e)| {
                *a != user
                    && e.project == s.project
                    && e.enables
                        .as_deref()
                        .is_some_and(|api| s.uses.contains(&api))
            })
            .map(|(a, _)| a.clone())
            .collect();
        if enablers.is_empty() {
            continue;
        }
        if let Some(rc) = resources.get_mut(user) {
            rc.implied.extend(enablers);
            rc.implied.sort();
            rc.implied.dedup();
        }
    }
}
