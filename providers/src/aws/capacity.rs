//! The AWS side of the capacity preflight (see `crate::capacity`).

use crate::{Ctx, Finding, Need, ProviderError};

/// Whether the node groups' instance types are offered in their subnets' zones and fit
/// the account's vCPU quotas.
pub async fn preflight(_ctx: &Ctx, _needs: &[Need]) -> Result<Vec<Finding>, ProviderError> {
    Ok(Vec::new())
}
