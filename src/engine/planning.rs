//! Planning: the stack's desired specs against the refreshed state, with what the
//! providers say each update will change on the live object; then, read-only, the
//! cloud APIs the plan needs on, what its new resources name in the cloud, and capacity.

use std::collections::BTreeMap;

use crate::addr::Address;
use crate::plan::{self, Action, Change, Plan, PlanInputs};
use crate::state::State;

use super::{hide_secrets, secret_values, Base, Engine, EngineError, Refresh};

impl Engine {
    /// Refreshes and plans. `stack_path` and `variables` are recorded for `plan -out`.
    pub async fn plan(
        &self,
        destroy: bool,
        targets: &[Address],
        stack_path: &str,
        variables: &[(String, String)],
    ) -> Result<(Plan, Base), EngineError> {
        let stored = self.backend.load().await?;
        let existed = stored.is_some();
        let mut state = stored.unwrap_or_default();
        // The stored entries move into the refreshed state (those found in sync as
        // they are), so the plan holds one copy of the state, not two.
        let mut resources = std::mem::take(&mut state.resources);
        // `[[moved]]` entries rename stored objects before anything is read, so a
        // renamed resource is planned as the same object.
        let renamed = crate::stack::moved::rename(&self.stack.moved, &mut resources);
        let Refresh {
            state: refreshed,
            drift,
            mut warnings,
            mut learned,
        } = if self.settings.refresh {
            self.refresh(&state, resources).await?
        } else {
            Refresh {
                state: State {
                    resources,
                    outputs: state.outputs.clone(),
                    ..state.clone_header()
                },
                drift: BTreeMap::new(),
                warnings: vec![
                    "refresh skipped (--refresh=false): the plan compares the stack with the state as last recorded, and capacity is not checked".to_string(),
                ],
                learned: false,
            }
        };
        learned |= !renamed.moved.is_empty();
        warnings.extend(renamed.skipped);
        let env = self.env();
        let mut changes = plan::compute(
            &self.stack,
            &refreshed,
            &drift,
            &PlanInputs {
                destroy,
                targets,
                env: &env,
            },
        )?;
        if self.settings.refresh {
            self.live_diffs(&mut changes, &mut warnings).await;
        }
        if !destroy {
            warnings.extend(self.stack.warnings.iter().cloned());
        }
        warnings.sort();
        let plan = Plan {
            format_version: plan::PLAN_FORMAT_VERSION,
            terrain_version: env!("CARGO_PKG_VERSION").to_string(),
            stack: self.stack.name.clone(),
            stack_path: stack_path.to_string(),
            stack_hash: self.stack.source_hash.clone(),
            destroy,
            targets: targets.to_vec(),
            variables: variables.to_vec(),
            environment: (self.stack.environment != crate::stack::DEFAULT_ENVIRONMENT)
                .then(|| self.stack.environment.clone()),
            var_files: Vec::new(),
            // No stored state yet: the plan is for "no state", whatever lineage the
            // first save will pick.
            lineage: if existed {
                state.lineage.clone()
            } else {
                String::new()
            },
            serial: state.serial,
            changes,
            moved: renamed
                .moved
                .into_iter()
                .map(|(from, to)| plan::Moved { from, to })
                .collect(),
            refreshed: refreshed.resources,
            warnings,
            cost: None,
        };
        let mut plan = Plan {
            cost: Some(self.cost_of(&plan)),
            ..plan
        };
        self.stranded(&plan)?;
        if self.settings.refresh && !destroy {
            let pending = self.services(&plan).await?;
            self.served(&plan).await?;
            let unchecked = self.cloud_checks(&plan, &pending).await?;
            plan.warnings.extend(unchecked);
            let (errors, found) = self.preflight(&plan, &pending).await?;
            if !errors.is_empty() {
                return Err(EngineError::Capacity(errors));
            }
            plan.warnings.extend(found);
        }
        Ok((plan, Base { state, learned }))
    }
    /// Asks each existing cluster whether it serves the custom kinds the plan creates on
    /// it when nothing in the stack provides them (see `stack::api_groups`): a kind it
    /// does not serve fails the plan, naming the two ways to provide it. A cluster that
    /// cannot be asked is left to the apply, which says the same when it gets there.
    async fn served(&self, plan: &Plan) -> Result<(), EngineError> {
        for u in &self.stack.unserved {
            let Some(c) = plan
                .changes
                .iter()
                .find(|c| c.address == u.consumer && c.action == Action::Create)
            else {
                continue;
            };
            let Some(cluster) = c.after.as_ref().map(|a| &a["cluster"]) else {
                continue;
            };
            if terrain_providers::protocol::is_unknown(cluster) {
                continue;
            }
            let Ok(kind) = self.kind(&c.address, &c.kind) else {
                continue;
            };
            let Ok(ctx) = self.ctx(
                &c.address,
                &self.instance(&c.address, kind.provider(), None),
            ) else {
                continue;
            };
            let served = terrain_providers::kubernetes::serves(
                &ctx,
                cluster,
                &u.kind.api_version,
                &u.kind.kind,
            )
            .await;
            if let Ok(false) = served {
                let span = self.stack.resources.get(&u.consumer).map(|rc| {
                    rc.body
                        .at(&["cluster".to_string()])
                        .map_or(rc.span, |n| n.span)
                });
                return Err(plan::PlanError::Unserved {
                    address: Box::new(u.consumer.clone()),
                    at: span
                        .map(|s| self.stack.sources.locate(s))
                        .unwrap_or_default(),
                    message: crate::stack::api_groups::live_message(u),
                }
                .into());
            }
        }
        Ok(())
    }

    /// Asks the providers what each update or replace will change on the live object.
    /// A failure does not fail the plan (the change itself is known): it becomes a
    /// warning, since the same call at apply time will say more.
    async fn live_diffs(&self, changes: &mut [Change], warnings: &mut Vec<String>) {
        let wanted: Vec<usize> = changes
            .iter()
            .enumerate()
            .filter(|(_, c)| matches!(c.action, Action::Update | Action::Replace))
            .filter(|(_, c)| {
                c.id.is_some()
                    && c.after
                        .as_ref()
                        .is_some_and(|a| !terrain_providers::protocol::is_unknown(a))
            })
            .map(|(i, _)| i)
            .collect();
        let previews = futures::future::join_all(wanted.iter().map(|&i| {
            let c = &changes[i];
            async move {
                let kind = self.kind(&c.address, &c.kind).ok()?;
                let ctx = self
                    .ctx(
                        &c.address,
                        &self.instance(&c.address, kind.provider(), None),
                    )
                    .ok()?;
                let (id, before, after) = (c.id.as_deref()?, c.before.as_ref()?, c.after.as_ref()?);
                Some(
                    kind.preview(&ctx, id, before, after)
                        .await
                        .map_err(|e| format!("{}: live diff unavailable: {e}", c.address)),
                )
            }
        }))
        .await;
        for (i, preview) in wanted.into_iter().zip(previews) {
            match preview {
                Some(Ok(diff)) => {
                    let secrets = secret_values(&changes[i]);
                    changes[i].live_diff = diff.map(|d| hide_secrets(d, &secrets));
                }
                Some(Err(warning)) => warnings.push(warning),
                None => {}
            }
        }
    }
}
