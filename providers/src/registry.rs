//! The registry of resource kinds: one line per kind in [`builtin`].

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use crate::provider::Provider;
use crate::{aws, gcp, kubernetes, local, Adapter, Invalid, Resource};

/// The providers with a table of their own, one line each.
static PROVIDERS: &[&dyn Provider] = &[&gcp::Gcp, &aws::Aws];

/// The provider named `name`, when it has a table of its own (`kubernetes` and `local`
/// have none).
pub fn provider(name: &str) -> Option<&'static dyn Provider> {
    PROVIDERS.iter().copied().find(|p| p.name() == name)
}

/// A stack-wide check of a provider without a table of its own: the kinds it reads,
/// and the check.
type TablelessCheck = (
    &'static [&'static str],
    fn(&[crate::protocol::StackResource]) -> Vec<crate::protocol::StackFinding>,
);

/// The stack-wide checks of providers without a table (`kubernetes`), one line each.
static TABLELESS_CHECKS: &[TablelessCheck] = &[(
    kubernetes::kfp_checks::STACK_KINDS,
    kubernetes::kfp_checks::check,
)];

/// Every kind some provider's stack-wide checks read.
pub fn stack_kinds() -> impl Iterator<Item = &'static str> {
    PROVIDERS
        .iter()
        .flat_map(|p| p.stack_kinds().iter().copied())
        .chain(TABLELESS_CHECKS.iter().flat_map(|(k, _)| k.iter().copied()))
}

/// Every provider's stack-wide checks over `resources`.
pub fn check_stack(
    resources: &[crate::protocol::StackResource],
) -> Vec<crate::protocol::StackFinding> {
    PROVIDERS
        .iter()
        .flat_map(|p| p.check_stack(resources))
        .chain(
            TABLELESS_CHECKS
                .iter()
                .flat_map(|(_, check)| check(resources)),
        )
        .collect()
}

/// All resource kinds terrain knows, by kind name.
#[derive(Clone, Default)]
pub struct Registry {
    kinds: BTreeMap<&'static str, Arc<dyn Resource>>,
}

impl Registry {
    /// An empty registry (tests add their own kinds).
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) a kind.
    pub fn register(&mut self, kind: Arc<dyn Resource>) -> &mut Self {
        self.kinds.insert(kind.kind(), kind);
        self
    }

    /// The kind named `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Resource>> {
        self.kinds.get(name)
    }

    /// Every kind name, sorted (for did-you-mean suggestions).
    pub fn names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.kinds.keys().copied()
    }

    /// Offline problems with the table of `provider` (`[providers.gcp]`,
    /// `[providers.aws]`), each at the setting's key; providers whose settings have no
    /// offline checks report none.
    pub fn validate_config(&self, provider: &str, config: &Value) -> Vec<Invalid> {
        self::provider(provider).map_or_else(Vec::new, |p| p.validate_config(config))
    }

    /// The settings provider `provider`'s table takes, when it has a fixed set: a
    /// table under another key of `[providers.<name>]` is an instance of the provider
    /// (`[providers.gcp.europe]`).
    pub fn setting_keys(&self, provider: &str) -> Option<&'static [&'static str]> {
        self::provider(provider).and_then(|p| p.setting_keys())
    }

    /// Every provider name that has at least one kind.
    pub fn providers(&self) -> Vec<&'static str> {
        let mut p: Vec<_> = self.kinds.values().map(|k| k.provider()).collect();
        p.sort_unstable();
        p.dedup();
        p
    }
}

/// The configure step of provider `provider`: its table (`[providers.<name>]`, or an
/// instance's) completed with what the run's environment gives. Every use of a provider
/// table (offline checks, plan, apply) goes through it, so none reads the environment
/// by itself.
pub fn configure(provider: &str, table: Value, env: &dyn Fn(&str) -> Option<String>) -> Value {
    match self::provider(provider) {
        Some(p) => p.configure(table, env),
        None => table,
    }
}

/// The capacity preflight of provider `provider` (see [`crate::capacity`]): whether the
/// machines `needs` ask for are offered where they land and fit the quotas, for one
/// provider instance (`ctx` carries its table). Providers without capacity find
/// nothing. Fails when the cloud cannot be asked (offline, no permission): the caller
/// says the check was skipped.
pub async fn preflight(
    provider: &str,
    ctx: &crate::Ctx,
    needs: &[crate::Need],
) -> Result<Vec<crate::Finding>, crate::ProviderError> {
    match self::provider(provider) {
        Some(p) => p.preflight(ctx, needs).await,
        None => Ok(Vec::new()),
    }
}

/// The read-only checks of what `planned` names in the cloud (see
/// [`crate::provider::Provider::check_planned`]).
pub async fn check_planned(
    provider: &str,
    ctx: &crate::Ctx,
    planned: &[crate::protocol::Planned],
) -> Result<Vec<crate::protocol::StackFinding>, crate::ProviderError> {
    match self::provider(provider) {
        Some(p) => p.check_planned(ctx, planned).await,
        None => Ok(Vec::new()),
    }
}

/// Which of `services` are off for `provider`'s instance (see
/// [`crate::provider::Provider::services_off`]).
pub async fn services_off(
    provider: &str,
    ctx: &crate::Ctx,
    services: &[String],
) -> Result<Vec<String>, crate::ProviderError> {
    match self::provider(provider) {
        Some(p) => p.services_off(ctx, services).await,
        None => Ok(Vec::new()),
    }
}

/// The kinds shipped with terrain.
pub fn builtin() -> Registry {
    let mut r = Registry::new();
    r.register(Arc::new(Adapter::new(local::file::LocalFile)));
    r.register(Arc::new(Adapter::new(local::random_id::RandomId)));
    r.register(Arc::new(Adapter::new(local::time_sleep::TimeSleep)));
    r.register(Arc::new(Adapter::new(gcp::cluster::GkeCluster)));
    r.register(Arc::new(Adapter::new(gcp::node_pool::GkeNodePool)));
    r.register(Arc::new(Adapter::new(gcp::filestore::FilestoreInstance)));
    r.register(Arc::new(Adapter::new(gcp::bucket::GcsBucket)));
    r.register(Arc::new(Adapter::new(
        gcp::project_service::GcpProjectService,
    )));
    r.register(Arc::new(Adapter::new(
        gcp::service_account::GcpServiceAccount,
    )));
    r.register(Arc::new(Adapter::new(gcp::iam_member::GcpIamMember)));
    r.register(Arc::new(Adapter::new(kubernetes::manifest::Manifest)));
    r.register(Arc::new(Adapter::new(kubernetes::secret::Secret)));
    r.register(Arc::new(Adapter::new(kubernetes::nfs_volume::NfsVolume)));
    r.register(Arc::new(Adapter::new(kubernetes::redis::Redis)));
    r.register(Arc::new(Adapter::new(kubernetes::job::Job)));
    r.register(Arc::new(Adapter::new(kubernetes::queue_items::QueueItems)));
    r.register(Arc::new(Adapter::new(kubernetes::dataset::Dataset)));
    r.register(Arc::new(Adapter::new(
        kubernetes::kfp_pipeline::KfpPipeline,
    )));
    r.register(Arc::new(Adapter::new(kubernetes::kfp_run::KfpRun)));
    r.register(Arc::new(Adapter::new(aws::eks_cluster::EksCluster)));
    r.register(Arc::new(Adapter::new(aws::eks_node_group::EksNodeGroup)));
    r.register(Arc::new(Adapter::new(aws::eks_capability::EksCapability)));
    r.register(Arc::new(Adapter::new(aws::eks_addon::EksAddon)));
    r.register(Arc::new(Adapter::new(
        aws::eks_pod_identity_association::EksPodIdentityAssociation,
    )));
    r.register(Arc::new(Adapter::new(aws::s3_bucket::S3Bucket)));
    r.register(Arc::new(Adapter::new(aws::s3_object::S3Object)));
    r.register(Arc::new(Adapter::new(aws::iam_role::IamRole)));
    r.register(Arc::new(Adapter::new(aws::kms_key::KmsKey)));
    r.register(Arc::new(Adapter::new(aws::aws_account::AwsAccount)));
    r.register(Arc::new(Adapter::new(aws::vpc::AwsVpc)));
    r.register(Arc::new(Adapter::new(aws::subnet::AwsSubnet)));
    r.register(Arc::new(Adapter::new(
        aws::internet_gateway::AwsInternetGateway,
    )));
    r.register(Arc::new(Adapter::new(aws::nat_gateway::AwsNatGateway)));
    r.register(Arc::new(Adapter::new(aws::route_table::AwsRouteTable)));
    r.register(Arc::new(Adapter::new(
        aws::sagemaker_pipeline::SageMakerPipeline,
    )));
    r.register(Arc::new(Adapter::new(
        aws::sagemaker_pipeline_execution::SageMakerPipelineExecution,
    )));
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn provider_tables_are_validated_by_their_provider() {
        let r = builtin();
        let bad = json!({"region": "us-west9"});
        let gcp = r.validate_config("gcp", &bad);
        assert!(
            matches!(gcp.as_slice(), [p] if p.path == ["region"] && p.message.contains("not a Google Cloud region")),
            "{gcp:?}"
        );
        let aws = r.validate_config("aws", &json!({"region": "us-east"}));
        assert!(
            matches!(aws.as_slice(), [p] if p.path == ["region"] && p.message.contains("not an AWS region")),
            "{aws:?}"
        );
        assert!(r.validate_config("kubernetes", &bad).is_empty());
        assert!(r.validate_config("local", &bad).is_empty());
    }
}
