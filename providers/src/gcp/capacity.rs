//! The Google Cloud side of the capacity preflight (see `crate::capacity`).

use crate::{Ctx, Finding, Need, ProviderError};

/// Whether the pools' machines and accelerators are offered in their zones and fit the
/// project's regional quotas.
pub async fn preflight(_ctx: &Ctx, _needs: &[Need]) -> Result<Vec<Finding>, ProviderError> {
    Ok(Vec::new())
}
