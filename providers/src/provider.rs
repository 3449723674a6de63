//! What a provider (a cloud) owns besides its kinds: the settings its
//! `[providers.<name>]` table takes and their offline checks, how the run's environment
//! completes the table, its checks across the stack's resources, and its capacity
//! preflight. Each cloud implements [`Provider`]
//! in its own folder; [`crate::registry`] lists them, one line each, so no code outside
//! a cloud's folder switches on its name.

use async_trait::async_trait;
use serde_json::Value;

use crate::protocol::{Planned, StackFinding, StackResource};
use crate::{Ctx, Finding, Invalid, Need, ProviderError};

/// A provider's table and capacity, as the engine and the stack checks use them.
#[async_trait]
pub trait Provider: Send + Sync {
    /// The name kinds and stacks give the provider (`gcp`, `aws`).
    fn name(&self) -> &'static str;

    /// Offline problems with the provider's table, each at the setting's key.
    fn validate_config(&self, _config: &Value) -> Vec<Invalid> {
        Vec::new()
    }

    /// The settings the table takes, when it has a fixed set: a table under another key
    /// of `[providers.<name>]` is an instance of the provider (`[providers.gcp.europe]`).
    fn setting_keys(&self) -> Option<&'static [&'static str]> {
        None
    }

    /// The table completed with what the run's environment gives.
    fn configure(&self, table: Value, _env: &dyn Fn(&str) -> Option<String>) -> Value {
        table
    }

    /// Whether the machines `needs` ask for are offered where they land and fit the
    /// quotas, for one provider instance (`ctx` carries its table).
    /// The kinds whose resources [`Provider::check_stack`] reads; the stack checks keep
    /// only those specs.
    fn stack_kinds(&self) -> &'static [&'static str] {
        &[]
    }

    /// Offline checks across resources (an IAM role's trust and policies against what
    /// the cluster, node group or pipeline using it needs; a network's subnets, zones
    /// and routes), on every resource of [`Provider::stack_kinds`], also when they are
    /// all created by the same stack.
    fn check_stack(&self, _resources: &[StackResource]) -> Vec<StackFinding> {
        Vec::new()
    }

    async fn preflight(&self, _ctx: &Ctx, _needs: &[Need]) -> Result<Vec<Finding>, ProviderError> {
        Ok(Vec::new())
    }

    /// Read-only questions to the cloud about what the plan's new resources name and the
    /// stack does not make (a role IAM must have, the bucket a grant is on), for one
    /// provider instance, before the plan promises anything: each problem found is a
    /// finding at the resource's field. Fails when the cloud cannot be asked; the plan
    /// then says the check was not made.
    async fn check_planned(
        &self,
        _ctx: &Ctx,
        _planned: &[Planned],
    ) -> Result<Vec<StackFinding>, ProviderError> {
        Ok(Vec::new())
    }

    /// Which of `services` (see [`crate::Resource::services`]) are off in the
    /// instance's project, read-only; the plan refuses resources calling one that the
    /// stack does not turn on.
    async fn services_off(
        &self,
        _ctx: &Ctx,
        _services: &[String],
    ) -> Result<Vec<String>, ProviderError> {
        Ok(Vec::new())
    }
}
