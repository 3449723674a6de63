//! What a plan's or a state's resources cost: each billing resource's spec, with the
//! specs of what it references, read as usage by its kind and priced by the cost model
//! (`crate::cost`); secrets that a usage line would quote are hidden.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::addr::Address;
use crate::plan::{Action, Change, Plan};
use crate::state::State;

use crate::engine::Engine;

impl Engine {
    /// What `plan` costs (see `cost.rs`): each resource's usage as its kind reads it from
    /// the live spec (before) and the desired one (after), with the specs of what it
    /// references, priced from the run's catalog.
    pub fn cost_of(&self, plan: &Plan) -> crate::cost::PlanCost {
        let by_address: BTreeMap<&Address, &Change> =
            plan.changes.iter().map(|c| (&c.address, c)).collect();
        // The specs of what `c` references, and their secret values (a cost line must not
        // show a location or machine type that came from a sensitive value).
        let peers = |c: &Change, after: bool| peers_of(plan, &by_address, c, after);
        let mut out = crate::cost::PlanCost {
            max_hourly: self.stack.pricing.max_hourly,
            ..Default::default()
        };
        let mut configs = BTreeMap::new();
        for c in &plan.changes {
            // Most kinds bill nothing: no spec is copied for them.
            if !self.kind(&c.address, &c.kind).is_ok_and(|k| k.bills()) {
                continue;
            }
            let recorded = plan
                .refreshed
                .get(&c.address.to_string())
                .map(|r| r.provider.as_str());
            if let Some(before) = plan.before(c) {
                let (peers, secrets) = peers(c, false);
                let billed = Billed {
                    address: &c.address,
                    kind: &c.kind,
                    recorded,
                    spec: before,
                    sensitive_paths: &c.sensitive_paths,
                    peers: &peers,
                    peer_secrets: secrets,
                };
                if let Some(priced) = self.price(&mut configs, billed) {
                    out.before.0 += priced.hourly.0;
                    out.before.1 += priced.hourly.1;
                }
            }
            if c.action == Action::Delete {
                continue;
            }
            let Some(after) = plan.after(c) else {
                continue;
            };
            let (peers, secrets) = peers(c, true);
            let billed = Billed {
                address: &c.address,
                kind: &c.kind,
                recorded,
                spec: &after,
                sensitive_paths: &c.sensitive_paths,
                peers: &peers,
                peer_secrets: secrets,
            };
            if let Some(priced) = self.price(&mut configs, billed) {
                out.after.0 += priced.hourly.0;
                out.after.1 += priced.hourly.1;
                out.resources.push(priced);
            }
        }
        out
    }
    /// What the objects of `state` cost as last applied (`terrain cost`), offline.
    pub fn cost_of_state(&self, state: &State) -> crate::cost::PlanCost {
        use terrain_providers::Peer;
        let mut out = crate::cost::PlanCost {
            max_hourly: self.stack.pricing.max_hourly,
            ..Default::default()
        };
        let mut configs = BTreeMap::new();
        for (address, r) in &state.resources {
            let Ok(addr) = address.parse::<Address>() else {
                continue;
            };
            if !self.kind(&addr, &r.kind).is_ok_and(|k| k.bills()) {
                continue;
            }
            let mut peer_secrets = Vec::new();
            let peers: Vec<Peer> = r
                .dependencies
                .iter()
                .filter_map(|d| {
                    state.resources.get(d).map(|p| {
                        peer_secrets.extend(crate::desired::secret_values(
                            &p.spec,
                            &spec_paths(&p.sensitive_paths),
                        ));
                        Peer {
                            kind: p.kind.clone(),
                            address: d.clone(),
                            spec: p.spec.clone(),
                        }
                    })
                })
                .collect();
            let own_paths = spec_paths(&r.sensitive_paths);
            let billed = Billed {
                address: &addr,
                kind: &r.kind,
                recorded: Some(&r.provider),
                spec: &r.spec,
                sensitive_paths: &own_paths,
                peers: &peers,
                peer_secrets,
            };
            if let Some(priced) = self.price(&mut configs, billed) {
                out.after.0 += priced.hourly.0;
                out.after.1 += priced.hourly.1;
                out.resources.push(priced);
            }
        }
        out.before = out.after;
        out
    }
    /// One resource's spec priced; `None` when it bills for nothing (or its kind or
    /// provider table is unknown, which fails the run elsewhere). `configs` keeps each
    /// provider instance's table, evaluated once per pricing.
    fn price(
        &self,
        configs: &mut BTreeMap<String, Option<Value>>,
        billed: Billed<'_>,
    ) -> Option<crate::cost::ResourceCost> {
        let kind = self
            .kind(billed.address, billed.kind)
            .ok()
            .filter(|k| k.bills())?;
        let instance = self.instance(billed.address, kind.provider(), billed.recorded);
        let config = configs
            .entry(instance)
            .or_insert_with_key(|instance| self.provider_config(instance).ok())
            .as_ref()?;
        let usage = kind.usage(billed.spec, config, billed.peers);
        if usage.is_empty() {
            return None;
        }
        let mut priced =
            crate::cost::resource(&billed.address.to_string(), &usage, &self.settings.catalog);
        // What a kind says of its usage quotes its spec (a machine type, a location): a
        // value that came from a secret is priced, then hidden there as everywhere else.
        let mut secrets = crate::desired::secret_values(billed.spec, billed.sensitive_paths);
        secrets.extend(billed.peer_secrets);
        if !secrets.is_empty() {
            for line in &mut priced.lines {
                let u = &mut line.usage;
                for text in [&mut u.item, &mut u.region, &mut u.basis] {
                    *text = crate::desired::hide(text, &secrets, true);
                }
            }
        }
        Some(priced)
    }
}

/// The specs of what `c` references in `plan` (as planned, or as live when `after` is
/// false), and their secret values: what a kind reads its usage or capacity from must
/// not show a location or machine type that came from a sensitive value.
pub(crate) fn peers_of(
    plan: &Plan,
    by_address: &BTreeMap<&Address, &Change>,
    c: &Change,
    after: bool,
) -> (Vec<terrain_providers::Peer>, Vec<String>) {
    let mut secrets = Vec::new();
    let peers = c
        .dependencies
        .iter()
        .filter_map(|d| by_address.get(d))
        .filter_map(|p| {
            let spec = if after {
                plan.after(p).map(std::borrow::Cow::into_owned)
            } else {
                plan.before(p).cloned()
            }?;
            secrets.extend(crate::desired::secret_values(&spec, &p.sensitive_paths));
            Some(terrain_providers::Peer {
                kind: p.kind.clone(),
                address: p.address.to_string(),
                spec,
            })
        })
        .collect();
    (peers, secrets)
}

/// One resource to price: its spec, the secrets that must not show in its cost lines, and
/// what it references.
struct Billed<'a> {
    address: &'a Address,
    kind: &'a str,
    /// The provider instance the state records for it.
    recorded: Option<&'a str>,
    spec: &'a Value,
    /// Its secret spec paths.
    sensitive_paths: &'a [String],
    peers: &'a [terrain_providers::Peer],
    /// Secret values of the resources it references.
    peer_secrets: Vec<String>,
}

/// The spec paths among a state entry's sensitive paths (`spec.password` → `password`).
fn spec_paths(paths: &[String]) -> Vec<String> {
    paths
        .iter()
        .filter_map(|p| p.strip_prefix("spec."))
        .map(str::to_string)
        .collect()
}
