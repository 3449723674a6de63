//! What a plan's new resources name in the cloud without making it, asked read-only
//! before anything is applied (`Provider::check_planned`): a role IAM must have, the
//! bucket or service account a grant is on, the account a node pool's nodes run as. A
//! problem fails the plan at the resource's field, as an offline check would; nothing
//! is created. Each provider instance is asked once, with all its planned resources
//! (what the stack makes is not looked for). An instance whose project gets an API
//! turned on by this very plan is not asked (its calls cannot be made yet), and one that
//! cannot be asked is noted in the plan as not checked.

use std::collections::{BTreeMap, BTreeSet};

use terrain_providers::protocol::Planned;
use terrain_providers::Severity;

use crate::addr::Address;
use crate::plan::{Action, Plan, PlanError};

use super::{Engine, EngineError};

/// One provider instance's share: its planned resources, the first address (for the
/// call's context), the secrets its messages must not show, and whether it creates
/// anything (a plan that creates nothing asks nothing).
type Share = (Vec<Planned>, Address, Vec<String>, bool);

impl Engine {
    /// Asks each provider instance about what `plan` creates; returns the warnings for
    /// instances that could not be asked.
    pub(crate) async fn cloud_checks(
        &self,
        plan: &Plan,
        pending: &BTreeSet<(String, String)>,
    ) -> Result<Vec<String>, EngineError> {
        let mut by_instance: BTreeMap<String, Share> = BTreeMap::new();
        let mut addresses: BTreeMap<String, Address> = BTreeMap::new();
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
            let creates = matches!(c.action, Action::Create | Action::Replace);
            let share = by_instance
                .entry(instance)
                .or_insert_with(|| (Vec::new(), c.address.clone(), Vec::new(), false));
            share
                .2
                .extend(crate::desired::secret_values(&after, &c.sensitive_paths));
            share.3 |= creates;
            share.0.push(Planned {
                kind: c.kind.clone(),
                address: c.address.to_string(),
                spec: after.into_owned(),
                creates,
            });
            addresses.insert(c.address.to_string(), c.address.clone());
        }
        let mut warnings = Vec::new();
        for (instance, (planned, first, secrets, creates)) in by_instance {
            if !creates || pending.iter().any(|(i, _)| *i == instance) {
                continue;
            }
            let base = instance.split('.').next().unwrap_or(&instance);
            let hide = |text: &str| crate::desired::hide(text, &secrets, true);
            let found = match self.ctx(&first, &instance) {
                Ok(ctx) => terrain_providers::registry::check_planned(base, &ctx, &planned).await,
                Err(e) => Err(terrain_providers::ProviderError::Config(e.to_string())),
            };
            let findings = match found {
                Ok(findings) => findings,
                Err(e) => {
                    warnings.push(format!(
                        "what the new resources of provider {instance} name in the cloud was not checked: {}",
                        hide(&e.to_string())
                    ));
                    continue;
                }
            };
            let mut refused: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for f in &findings {
                let located = self.located_at(addresses.get(&f.address), &f.path);
                let text = format!("{located}{}: {}", f.path, hide(&f.message));
                match f.severity {
                    Severity::Error => refused.entry(f.address.clone()).or_default().push(text),
                    Severity::Warning => warnings.push(format!("{}: {text}", f.address)),
                }
            }
            if let Some((address, problems)) = refused.into_iter().next() {
                let address = addresses.get(&address).cloned().unwrap_or(first);
                return Err(PlanError::Invalid {
                    address: Box::new(address),
                    problems,
                }
                .into());
            }
        }
        Ok(warnings)
    }

    /// `file:line:col: ` of the value at dotted `path` of the resource at `address`
    /// (its block when the value is not written), or nothing.
    fn located_at(&self, address: Option<&Address>, path: &str) -> String {
        let Some(rc) = address.and_then(|a| self.stack.resources.get(a)) else {
            return String::new();
        };
        let path: Vec<String> = path
            .split('.')
            .filter(|p| !p.is_empty())
            .map(str::to_string)
            .collect();
        let span = rc.body.at(&path).map_or(rc.span, |n| n.span);
        format!("{}: ", self.stack.sources.locate(span))
    }
}
