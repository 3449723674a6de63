//! The cloud APIs a plan's resources call (`Resource::services`), checked against the
//! live project before anything is applied, read-only like the capacity preflight: an
//! API that is off, and that no resource of the stack turns on (`Resource::enables`: a
//! `gcp_project_service`), fails the plan naming the API, the project, the resources
//! that call it and the block to add. A provider that cannot be asked is left to the
//! apply, whose call then says the same. Offline, a plan that would turn an API off
//! (`disable_on_destroy`) under resources the stack keeps is refused.

use std::collections::{BTreeMap, BTreeSet};

use crate::addr::Address;
use crate::plan::{Action, Plan, PlanError};

use super::{Engine, EngineError};

/// A provider instance and a cloud API (`container.googleapis.com`).
pub(crate) type InstanceApi = (String, String);

/// A project (or, for an instance that names none, the instance) and a cloud API.
type ProjectApi = (String, String);

/// What a plan asks of one project: through which instance (and resource's context),
/// the APIs its resources call that nothing turns on (with the callers), and the APIs
/// the plan turns on.
#[derive(Default)]
struct Asks {
    via: Option<(String, Address)>,
    instances: BTreeSet<String>,
    needed: BTreeMap<String, Vec<Address>>,
    turning_on: BTreeSet<String>,
}

impl Engine {
    /// Refuses a plan that deletes a resource turning an API off on destroy
    /// (`disable_on_destroy = true`) while resources of the stack calling that API in
    /// the same project stay: they would be left running on an API that is off.
    pub(crate) fn stranded(&self, plan: &Plan) -> Result<(), EngineError> {
        let instance_of = |c: &crate::plan::Change| {
            let kind = self.kind(&c.address, &c.kind).ok()?;
            let recorded = plan
                .refreshed
                .get(&c.address.to_string())
                .map(|r| r.provider.as_str());
            Some((self.instance(&c.address, kind.provider(), recorded), kind))
        };
        let project_of = |instance: &str| {
            self.provider_config(instance)
                .ok()
                .and_then(|c| c["project"].as_str().map(str::to_string))
                .unwrap_or_else(|| instance.to_string())
        };
        for c in plan.changes.iter().filter(|c| c.action == Action::Delete) {
            let Some(before) = plan.before(c) else {
                continue;
            };
            if before["disable_on_destroy"].as_bool() != Some(true) {
                continue;
            }
            let Some((instance, kind)) = instance_of(c) else {
                continue;
            };
            let Some(api) = kind.enables(before) else {
                continue;
            };
            let project = project_of(&instance);
            let kept: Vec<String> = plan
                .changes
                .iter()
                .filter(|u| u.action != Action::Delete && u.address != c.address)
                .filter(|u| {
                    let Some((i, k)) = instance_of(u) else {
                        return false;
                    };
                    plan.after(u)
                        .is_some_and(|after| k.services(&after).contains(&api.as_str()))
                        && project_of(&i) == project
                })
                .map(|u| u.address.to_string())
                .collect();
            if !kept.is_empty() {
                return Err(PlanError::ApiStranded {
                    address: Box::new(c.address.clone()),
                    message: format!(
                        "deleting it turns {api} off in project {project} (disable_on_destroy = true) under {}, which the stack keeps; delete them too, or set disable_on_destroy = false first to leave the API on",
                        kept.join(", ")
                    ),
                }
                .into());
            }
        }
        Ok(())
    }

    /// Refuses the plan when a resource it creates or changes calls an API that is off
    /// and that nothing in the stack turns on. Returns the APIs that are off and that
    /// this plan turns on, per provider instance: their calls cannot be made before the
    /// apply (the capacity preflight skips those instances).
    pub(crate) async fn services(&self, plan: &Plan) -> Result<BTreeSet<InstanceApi>, EngineError> {
        // APIs are on or off per project, which several provider instances may share.
        let mut projects: BTreeMap<String, String> = BTreeMap::new();
        let mut asks: BTreeMap<String, Asks> = BTreeMap::new();
        let mut turned_on: BTreeSet<ProjectApi> = BTreeSet::new();
        let mut calls: Vec<(String, String, Address)> = Vec::new();
        for c in &plan.changes {
            if c.action == Action::Delete {
                continue;
            }
            let Ok(kind) = self.kind(&c.address, &c.kind) else {
                continue;
            };
            let Some(after) = plan.after(c) else {
                continue;
            };
            let recorded = plan
                .refreshed
                .get(&c.address.to_string())
                .map(|r| r.provider.as_str());
            let instance = self.instance(&c.address, kind.provider(), recorded);
            let project = projects
                .entry(instance.clone())
                .or_insert_with(|| {
                    self.provider_config(&instance)
                        .ok()
                        .and_then(|c| c["project"].as_str().map(str::to_string))
                        .unwrap_or_else(|| instance.clone())
                })
                .clone();
            let ask = asks.entry(project.clone()).or_default();
            ask.instances.insert(instance.clone());
            if let Some(api) = kind.enables(&after) {
                if c.action != Action::NoOp {
                    ask.turning_on.insert(api.clone());
                    ask.via
                        .get_or_insert_with(|| (instance.clone(), c.address.clone()));
                }
                turned_on.insert((project.clone(), api));
            }
            // What exists was made with its APIs on; a change or a new object calls them.
            if c.action != Action::NoOp {
                for api in kind.services(&after) {
                    calls.push((project.clone(), api.to_string(), c.address.clone()));
                }
                if !kind.services(&after).is_empty() {
                    ask.via
                        .get_or_insert_with(|| (instance.clone(), c.address.clone()));
                }
            }
        }
        for (project, api, address) in calls {
            if !turned_on.contains(&(project.clone(), api.clone())) {
                if let Some(ask) = asks.get_mut(&project) {
                    ask.needed.entry(api).or_default().push(address);
                }
            }
        }
        let mut pending = BTreeSet::new();
        for (project, ask) in asks {
            let Some((instance, first)) = &ask.via else {
                continue;
            };
            let apis: Vec<String> = ask
                .needed
                .keys()
                .chain(ask.turning_on.iter())
                .cloned()
                .collect();
            let Ok(ctx) = self.ctx(first, instance) else {
                continue;
            };
            let base = instance.split('.').next().unwrap_or(instance);
            // A provider that cannot be asked is left to the apply.
            let Ok(off) = terrain_providers::registry::services_off(base, &ctx, &apis).await else {
                continue;
            };
            let refused: Vec<(&String, &Vec<Address>)> = ask
                .needed
                .iter()
                .filter(|(api, _)| off.contains(api))
                .collect();
            if let Some((_, users)) = refused.first() {
                let address = users[0].clone();
                let at = self
                    .stack
                    .resources
                    .get(&address)
                    .map(|rc| self.stack.sources.locate(rc.span))
                    .unwrap_or_default();
                return Err(PlanError::ServicesOff {
                    address: Box::new(address),
                    at,
                    message: message(instance, &project, &refused),
                }
                .into());
            }
            for api in ask.turning_on.iter().filter(|api| off.contains(api)) {
                for i in &ask.instances {
                    pending.insert((i.clone(), api.clone()));
                }
            }
        }
        Ok(pending)
    }
}

/// The plan's error for the APIs `refused` (with the resources calling each) that are
/// off in `project`, naming the blocks that turn them on.
fn message(instance: &str, project: &str, refused: &[(&String, &Vec<Address>)]) -> String {
    let mut parts = Vec::new();
    let mut blocks = Vec::new();
    for (api, users) in refused {
        let names: Vec<String> = users.iter().map(ToString::to_string).collect();
        parts.push(format!("{api} (called by {})", names.join(", ")));
        let name = api.split('.').next().unwrap_or(api).replace('-', "_");
        let provider = if instance.contains('.') {
            format!("\nprovider = \"{instance}\"")
        } else {
            String::new()
        };
        blocks.push(format!(
            "[gcp_project_service.{name}]\nservice = \"{api}\"{provider}"
        ));
    }
    let (these, it) = if refused.len() == 1 {
        ("this API is", "it")
    } else {
        ("these APIs are", "them")
    };
    format!(
        "{these} off in project {project} and nothing in this stack turns {it} on: {}; add to the stack (the resources wait for {it}):\n\n{}",
        parts.join("; "),
        blocks.join("\n\n")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_names_each_api_its_callers_and_the_block() {
        let users = vec![
            Address::new("gke_cluster", "ml"),
            Address::new("gke_node_pool", "gpu"),
        ];
        let one = ("container.googleapis.com".to_string(), users);
        let text = message("gcp", "my-project", &[(&one.0, &one.1)]);
        assert!(text.starts_with("this API is off in project my-project and nothing in this stack turns it on: container.googleapis.com (called by gke_cluster.ml, gke_node_pool.gpu)"), "{text}");
        assert!(
            text.ends_with(
                "[gcp_project_service.container]\nservice = \"container.googleapis.com\""
            ),
            "{text}"
        );
        let two = (
            "file.googleapis.com".to_string(),
            vec![Address::new("filestore_instance", "nfs")],
        );
        let text = message("gcp.eu", "p", &[(&one.0, &one.1), (&two.0, &two.1)]);
        assert!(text.contains("these APIs are off"), "{text}");
        assert!(text.contains("[gcp_project_service.file]\nservice = \"file.googleapis.com\"\nprovider = \"gcp.eu\""), "{text}");
    }
}
