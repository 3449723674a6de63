//! The plan's capacity preflight: what the planned node pools and node groups ask of
//! their clouds (each kind's `Demand`, read from the planned spec and from the live one
//! it changes, with the specs of what it references, so a pool on a cluster the same
//! stack creates is checked in that cluster's zones), handed to each provider instance
//! once for all its resources. The providers read quotas and offerings
//! (`terrain_providers::capacity`); this step only gathers, hides secrets and sorts what
//! they find into plan errors and warnings. A provider that cannot be asked (offline,
//! no permission), or whose project gets an API turned on by this very plan, is noted
//! in the plan as not checked; it never fails the plan.

use std::collections::{BTreeMap, BTreeSet};

use terrain_providers::{Need, Severity};

use crate::addr::Address;
use crate::engine::{Engine, EngineError};
use crate::plan::{Action, Change, Plan};
use crate::pricing::peers_of;

impl Engine {
    /// Checks `plan`'s demands against the clouds: the errors (not even the minimum
    /// fits, a machine not offered where it must run) and the warnings (the maximum
    /// does not fit; the check could not be made), each naming the resources, the
    /// quota or offering and the call. A provider instance none of whose nodes change
    /// is not asked.
    pub(crate) async fn preflight(
        &self,
        plan: &Plan,
        pending: &BTreeSet<(String, String)>,
    ) -> Result<(Vec<String>, Vec<String>), EngineError> {
        let by_address: BTreeMap<&Address, &Change> =
            plan.changes.iter().map(|c| (&c.address, c)).collect();
        // Per provider instance: its needs, the first address (for the call's
        // context), and the secrets its messages must not show.
        let mut by_instance: BTreeMap<String, (Vec<Need>, Address, Vec<String>)> = BTreeMap::new();
        let mut configs: BTreeMap<String, Option<serde_json::Value>> = BTreeMap::new();
        for c in &plan.changes {
            if c.action == Action::Delete {
                continue;
            }
            let Ok(kind) = self.kind(&c.address, &c.kind) else {
                continue;
            };
            if !kind.needs_capacity() {
                continue;
            }
            let recorded = plan
                .refreshed
                .get(&c.address.to_string())
                .map(|r| r.provider.as_str());
            let instance = self.instance(&c.address, kind.provider(), recorded);
            let Some(config) = configs
                .entry(instance.clone())
                .or_insert_with_key(|i| self.provider_config(i).ok())
                .clone()
            else {
                continue;
            };
            let Some(after) = plan.after(c) else {
                continue;
            };
            let (peers, mut secrets) = peers_of(plan, &by_address, c, true);
            secrets.extend(crate::desired::secret_values(&after, &c.sensitive_paths));
            let demands = kind.demand(&after, &config, &peers);
            if demands.is_empty() {
                continue;
            }
            let before = match plan.before(c) {
                Some(live) if c.action != Action::Create => {
                    let (live_peers, live_secrets) = peers_of(plan, &by_address, c, false);
                    secrets.extend(live_secrets);
                    secrets.extend(crate::desired::secret_values(live, &c.sensitive_paths));
                    kind.demand(live, &config, &live_peers)
                }
                _ => Vec::new(),
            };
            let entry = by_instance
                .entry(instance)
                .or_insert_with(|| (Vec::new(), c.address.clone(), Vec::new()));
            entry.0.push(Need {
                address: c.address.to_string(),
                after: demands,
                before,
            });
            entry.2.extend(secrets);
        }
        let (mut errors, mut warnings) = (Vec::new(), Vec::new());
        for (instance, (needs, first, secrets)) in by_instance {
            // A project whose APIs this plan turns on cannot be asked before the apply.
            let turning_on: Vec<&str> = pending
                .iter()
                .filter(|(i, _)| *i == instance)
                .map(|(_, api)| api.as_str())
                .collect();
            if !turning_on.is_empty() {
                warnings.push(format!(
                    "capacity not checked for provider {instance}: this apply turns on {} first",
                    turning_on.join(", ")
                ));
                continue;
            }
            // A plan that changes no node asks its cloud nothing: what runs already fits.
            if needs.iter().all(|n| n.after == n.before) {
                continue;
            }
            let base = instance.split('.').next().unwrap_or(&instance);
            let hide = |text: &str| crate::desired::hide(text, &secrets, true);
            let found = match self.ctx(&first, &instance) {
                Ok(ctx) => terrain_providers::registry::preflight(base, &ctx, &needs).await,
                Err(e) => {
                    warnings.push(format!(
                        "capacity not checked for provider {instance}: {}",
                        hide(&e.to_string())
                    ));
                    continue;
                }
            };
            match found {
                Ok(findings) => {
                    for f in findings {
                        let message = hide(&f.message);
                        match f.severity {
                            Severity::Error => errors.push(message),
                            Severity::Warning => warnings.push(format!("capacity: {message}")),
                        }
                    }
                }
                Err(e) => warnings.push(format!(
                    "capacity not checked for provider {instance}: {}",
                    hide(&e.to_string())
                )),
            }
        }
        Ok((errors, warnings))
    }
}
