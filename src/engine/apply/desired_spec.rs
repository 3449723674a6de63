//! The spec a create or an update applies: computed by the pipeline plan uses, now with
//! every dependency's real values, held to what the plan promised, and what of it is
//! secret; and the check that the provider made what it was asked.

use serde_json::Value;

use crate::desired::{self, StackScope};
use crate::eval::lookup;
use crate::plan::Step;

use super::super::persist::Persister;
use super::super::{Engine, EngineError};
use super::Target;

/// The spec an operation applies, with what the state records beside it.
pub(super) struct Applied {
    pub spec: Value,
    /// The provider's configuration for the resource's instance.
    pub config: Value,
    /// Secret state paths (`spec.…`, `outputs.…`), as the entry records them.
    pub sensitive: Vec<String>,
    /// Secret spec paths, as the desired spec computed them.
    pub secret_paths: Vec<String>,
    /// The addresses the resource depends on, as the entry records them.
    pub dependencies: Vec<String>,
    /// Fields whose differences are ignored (the stack's `ignore_changes`).
    pub ignore_changes: Vec<String>,
}

impl Engine {
    /// The spec `step` applies to `target`, or why it cannot be applied: not in the
    /// stack, its provider unusable, a reference without a value, or a value that now
    /// differs from the plan (a plan is a promise).
    pub(super) fn applied_spec(
        &self,
        target: &Target<'_>,
        step: Step,
        persister: &Persister,
    ) -> Result<Applied, EngineError> {
        let change = target.change;
        let rc = self
            .stack
            .resources
            .get(target.address())
            .ok_or_else(|| target.failed("not in the stack"))?;
        let config = self
            .provider_config(&target.instance)
            .map_err(|e| target.failed(e.to_string()))?;
        let entry = |k: &str| persister.snapshot_entry(k);
        let prior = persister
            .snapshot_entry(&target.key)
            .filter(|r| r.id.is_some() && !desired::resumes_create(r));
        let peers = desired::applied_peers(rc, &entry);
        let computed = {
            let env = self.env();
            let applied = desired::Applied {
                resources: &self.stack.resources,
                entry: &entry,
            };
            let scope = StackScope {
                variables: &self.stack.variables,
                env: &env,
                attributes: &applied,
            };
            desired::compute(
                rc,
                &scope,
                &desired::Inputs {
                    config: &config,
                    peers: &peers,
                    prior: if step == Step::Update {
                        prior.as_ref().map(|r| &r.spec)
                    } else {
                        None
                    },
                },
            )
        }
        .map_err(|e| target.failed(format!("invalid spec: {e}")))?;
        let mut sensitive: Vec<String> = change
            .sensitive_paths
            .iter()
            .chain(&computed.sensitive)
            .map(|p| format!("spec.{p}"))
            .collect();
        sensitive.extend(
            target
                .kind
                .schema()
                .outputs
                .iter()
                .filter(|f| f.sensitive)
                .map(|f| format!("outputs.{}", f.name)),
        );
        sensitive.sort();
        sensitive.dedup();
        let spec = computed.spec;
        // The plan is a promise: what it showed as known is what is applied.
        if let Some(planned) = &change.after {
            let broken = desired::broken_promises(planned, &spec, &rc.lifecycle.ignore_changes);
            if !broken.is_empty() {
                return Err(target.failed(format!(
                    "the spec now differs from the plan at {}; nothing was changed for this resource; run `terrain plan` again",
                    broken.join(", ")
                )));
            }
        }
        Ok(Applied {
            spec,
            config,
            sensitive,
            secret_paths: computed.sensitive,
            dependencies: change
                .dependencies
                .iter()
                .map(ToString::to_string)
                .collect(),
            ignore_changes: rc.lifecycle.ignore_changes.clone(),
        })
    }

    /// The error when the provider reports an object that differs from the spec it was
    /// given (a bug in the provider); `None` when it made what it was asked.
    pub(super) fn inconsistent(
        &self,
        target: &Target<'_>,
        applied: &Applied,
        observed: &terrain_providers::Observed,
    ) -> Option<EngineError> {
        let spec = &applied.spec;
        let broken = desired::broken_promises(spec, &observed.spec, &applied.ignore_changes);
        if broken.is_empty() {
            return None;
        }
        let secrets = desired::secret_values(spec, &applied.secret_paths);
        let shown: Vec<String> = broken
            .iter()
            .map(|p| {
                if applied.secret_paths.iter().any(|s| desired::overlaps(s, p)) {
                    return format!("{p} ({})", desired::HIDDEN);
                }
                let path: Vec<String> = p.split('.').map(str::to_string).collect();
                // A secret may still hide inside a wider value.
                let show = |v: Option<&Value>| {
                    desired::hide(
                        &v.map_or("null".to_string(), ToString::to_string),
                        &secrets,
                        false,
                    )
                };
                format!(
                    "{p}: planned {}, got {}",
                    show(lookup(spec, &path)),
                    show(lookup(&observed.spec, &path))
                )
            })
            .collect();
        Some(target.failed(format!(
            "the provider produced an inconsistent result: {}; the object is recorded as the provider reported it, and the next plan shows the difference (this is a bug in the {} provider)",
            shown.join("; "),
            target.kind.provider()
        )))
    }
}
