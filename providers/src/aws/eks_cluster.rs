//! The `eks_cluster` kind: an Amazon EKS control plane, with its endpoint access,
//! control plane logging and tags, and the `kubernetes` output the kubernetes_* kinds
//! connect through (host, CA, EKS token auth, flavor "eks").
//!
//! Endpoint access, logging and the authentication mode change in place
//! (UpdateClusterConfig, one kind of change per call, as EKS requires; the authentication
//! mode only one step along CONFIG_MAP → API_AND_CONFIG_MAP → API, never back), tags
//! through TagResource/UntagResource, and the Kubernetes version by
//! UpdateClusterVersion, one minor version per apply; name, IAM role, subnets and
//! security groups force a new cluster. Every update is followed to
//! its end (DescribeUpdate) and until the cluster is ACTIVE again; that plumbing, shared
//! with `eks_node_group`, is in `eks`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_eks::types::{
    AuthenticationMode, Cluster, CreateAccessConfigRequest, LogSetup, LogType, Logging,
    UpdateAccessConfigRequest, VpcConfigRequest,
};
use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::eks::{
    self, code_of, found, hash_map, in_prior_order, problems_line, retag, same_set, tag_map,
    wait_update, Creating, UpdateWait, IN_USE,
};
use super::{catalog, config, is_not_found, sdk_error, tags_with_ours, user_tags};
use crate::schema::Fields;
use crate::{Ctx, Health, Invalid, Kind, Live, ProviderError};

/// The kind `eks_cluster`.
#[derive(Debug, Clone, Copy, Default)]
pub struct EksCluster;

// serde's defaults, the same as the schema's (checked by `schema_mismatches`).
fn default_version() -> String {
    catalog::DEFAULT_EKS_VERSION.to_string()
}

fn yes() -> bool {
    true
}

fn anywhere() -> Vec<String> {
    vec!["0.0.0.0/0".to_string()]
}

/// What EKS gives a cluster created through its API without `accessConfig` (the console
/// picks API_AND_CONFIG_MAP instead; the API's documented default is CONFIG_MAP).
/// The authentication mode DescribeCluster reports; an answer without one (moto's) is
/// a cluster left at EKS's default, CONFIG_MAP.
fn live_authentication_mode(live: &Cluster) -> String {
    live.access_config()
        .and_then(|a| a.authentication_mode())
        .map_or_else(|| "CONFIG_MAP".to_string(), |m| m.as_str().to_string())
}

/// What a stack writes for an `eks_cluster`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    /// The cluster's name, unique in the region: letters, digits, '-' and '_', at most 100
    /// characters.
    #[terrain(force_new)]
    pub name: String,
    /// The Kubernetes minor version ("1.31"). Changing it UPGRADES the control plane in
    /// place (eks:UpdateClusterVersion, typically 10 to 25 minutes), one minor version per
    /// apply; downgrades are refused.
    #[serde(default = "default_version")]
    pub version: String,
    /// The IAM role EKS uses to manage the cluster (arn:aws:iam::ACCOUNT:role/NAME).
    #[terrain(force_new)]
    pub role_arn: String,
    /// At least two subnets in different Availability Zones for the control plane's network
    /// interfaces.
    #[terrain(force_new)]
    pub subnet_ids: Vec<String>,
    /// Extra security groups for the control plane's network interfaces (at most 5).
    #[serde(default)]
    #[terrain(force_new)]
    pub security_group_ids: Vec<String>,
    /// Whether the API server is reachable from the internet.
    #[serde(default = "yes")]
    pub endpoint_public_access: bool,
    /// Whether the API server is reachable from inside the VPC.
    #[serde(default)]
    pub endpoint_private_access: bool,
    /// IPv4 blocks allowed to reach the public endpoint.
    #[serde(default = "anywhere")]
    pub public_access_cidrs: Vec<String>,
    /// Control plane logs sent to CloudWatch: api, audit, authenticator, controllerManager,
    /// scheduler.
    #[serde(default)]
    pub logging: Vec<String>,
    /// How the cluster authenticates IAM principals: CONFIG_MAP (the aws-auth ConfigMap
    /// only), API_AND_CONFIG_MAP or API (access entries, which EKS capabilities need).
    /// Changed in place one step at a time along CONFIG_MAP → API_AND_CONFIG_MAP → API; EKS
    /// never goes back. Left out, a new cluster gets EKS's default (CONFIG_MAP) and an
    /// existing one keeps whatever it has.
    pub authentication_mode: Option<String>,
    /// AWS tags on the cluster.
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
}

/// What `eks_cluster` reports after apply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Outputs {
    /// The cluster's ARN.
    pub arn: String,
    /// The Kubernetes API server URL.
    pub endpoint: String,
    /// The cluster CA certificate, PEM.
    pub ca_certificate: String,
    /// The OIDC issuer URL, for IAM roles for service accounts.
    pub oidc_issuer: String,
    /// The EKS platform version (eks.N).
    pub platform_version: String,
    /// CREATING, ACTIVE, UPDATING, DELETING or FAILED.
    pub status: String,
    /// How to reach the Kubernetes API: the `cluster` of kubernetes_* resources.
    #[terrain(derived_from = [])]
    pub kubernetes: Value,
}

/// Authentication modes in the only order EKS moves a cluster through them: one step
/// forward per update, never back.
pub const AUTHENTICATION_MODES: &[&str] = &["CONFIG_MAP", "API_AND_CONFIG_MAP", "API"];

/// Control plane log types, in the API's order.
pub const LOG_TYPES: &[&str] = &[
    "api",
    "audit",
    "authenticator",
    "controllerManager",
    "scheduler",
];

const DESCRIBE: &str = "eks:DescribeCluster";
const CREATE: &str = "eks:CreateCluster";
const DELETE: &str = "eks:DeleteCluster";
const UPDATE_CONFIG: &str = "eks:UpdateClusterConfig";
const UPDATE_VERSION: &str = "eks:UpdateClusterVersion";
const LIST_NODEGROUPS: &str = "eks:ListNodegroups";

/// Creating a control plane takes 10–15 minutes; allow twice that.
const CREATE_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// A version upgrade takes up to ~25 minutes.
const UPGRADE_TIMEOUT: Duration = Duration::from_secs(60 * 60);
const CONFIG_TIMEOUT: Duration = Duration::from_secs(30 * 60);
const DELETE_TIMEOUT: Duration = Duration::from_secs(30 * 60);

// ---------------------------------------------------------------------------------
// Requests, built apart from sending them
// ---------------------------------------------------------------------------------

/// The VPC configuration of CreateCluster: subnets, security groups and endpoint access.
pub fn vpc_config(spec: &Spec) -> VpcConfigRequest {
    VpcConfigRequest::builder()
        .set_subnet_ids(Some(spec.subnet_ids.clone()))
        .set_security_group_ids(Some(spec.security_group_ids.clone()))
        .endpoint_public_access(spec.endpoint_public_access)
        .endpoint_private_access(spec.endpoint_private_access)
        .set_public_access_cidrs(Some(spec.public_access_cidrs.clone()))
        .build()
}

/// The endpoint access part alone, for UpdateClusterConfig (subnets and security groups
/// force a new cluster, so they are never sent there).
pub fn access_config(spec: &Spec) -> VpcConfigRequest {
    VpcConfigRequest::builder()
        .endpoint_public_access(spec.endpoint_public_access)
        .endpoint_private_access(spec.endpoint_private_access)
        .set_public_access_cidrs(Some(spec.public_access_cidrs.clone()))
        .build()
}

/// The access configuration of CreateCluster: the authentication mode, and the creator
/// as a cluster admin (EKS refuses CONFIG_MAP without it, and it is EKS's default).
pub fn create_access_config(spec: &Spec) -> CreateAccessConfigRequest {
    CreateAccessConfigRequest::builder()
        .set_authentication_mode(
            spec.authentication_mode
                .as_deref()
                .map(AuthenticationMode::from),
        )
        .bootstrap_cluster_creator_admin_permissions(true)
        .build()
}

/// Whether EKS takes a cluster's authentication mode from `from` to `to` in one update.
///
/// Fails with why not: a step back, a skipped step, or a mode EKS does not have.
pub fn check_authentication_change(from: &str, to: &str) -> Result<(), String> {
    let step = |m: &str| AUTHENTICATION_MODES.iter().position(|s| *s == m);
    let (Some(a), Some(b)) = (step(from), step(to)) else {
        // An unknown mode is `validate`'s to report.
        return Ok(());
    };
    if b < a {
        Err(format!(
            "EKS cannot take a cluster back from {from} to {to}: access entries, once on, stay on; keep authentication_mode = \"{from}\", or replace the cluster (a new name)"
        ))
    } else if b > a + 1 {
        Err(format!(
            "EKS moves the authentication mode one step at a time ({}): set authentication_mode = \"{}\" and apply first, then \"{to}\"",
            AUTHENTICATION_MODES.join(" → "),
            AUTHENTICATION_MODES[a + 1]
        ))
    } else {
        Ok(())
    }
}

/// Control plane logging: the listed types enabled, every other type disabled
/// explicitly, so turning a type off is a change EKS sees.
pub fn logging_config(enabled: &[String]) -> Logging {
    let on: Vec<LogType> = LOG_TYPES
        .iter()
        .filter(|t| enabled.iter().any(|e| e == *t))
        .map(|t| LogType::from(*t))
        .collect();
    let off: Vec<LogType> = LOG_TYPES
        .iter()
        .filter(|t| !enabled.iter().any(|e| e == *t))
        .map(|t| LogType::from(*t))
        .collect();
    let mut b = Logging::builder();
    for (types, state) in [(on, true), (off, false)] {
        if !types.is_empty() {
            b = b.cluster_logging(
                LogSetup::builder()
                    .set_types(Some(types))
                    .enabled(state)
                    .build(),
            );
        }
    }
    b.build()
}

/// One UpdateClusterConfig call: EKS takes one kind of change per update.
#[derive(Debug, Clone, PartialEq)]
pub enum ConfigChange {
    Access(VpcConfigRequest),
    Logging(Logging),
    /// The authentication mode (`accessConfig`), one step forward.
    Authentication(UpdateAccessConfigRequest),
}

/// The UpdateClusterConfig calls that take `prior` to `spec`.
pub fn config_changes(prior: &Spec, spec: &Spec) -> Vec<ConfigChange> {
    let mut out = Vec::new();
    if prior.endpoint_public_access != spec.endpoint_public_access
        || prior.endpoint_private_access != spec.endpoint_private_access
        || !same_set(&prior.public_access_cidrs, &spec.public_access_cidrs)
    {
        out.push(ConfigChange::Access(access_config(spec)));
    }
    if !same_set(&prior.logging, &spec.logging) {
        out.push(ConfigChange::Logging(logging_config(&spec.logging)));
    }
    if let Some(mode) = spec
        .authentication_mode
        .as_deref()
        .filter(|m| prior.authentication_mode.as_deref() != Some(*m))
    {
        out.push(ConfigChange::Authentication(
            UpdateAccessConfigRequest::builder()
                .authentication_mode(AuthenticationMode::from(mode))
                .build(),
        ));
    }
    out
}

// ---------------------------------------------------------------------------------
// Reading
// ---------------------------------------------------------------------------------

/// The log types a live cluster has enabled, in the API's order.
pub fn enabled_logs(logging: Option<&Logging>) -> Vec<String> {
    let on: BTreeSet<&str> = logging
        .map(|l| l.cluster_logging())
        .unwrap_or_default()
        .iter()
        .filter(|s| s.enabled() == Some(true))
        .flat_map(|s| s.types().iter().map(LogType::as_str))
        .collect();
    LOG_TYPES
        .iter()
        .filter(|t| on.contains(*t))
        .map(|t| (*t).to_string())
        .collect()
}

/// The spec a live cluster shows; list orders follow `prior` where the items agree.
pub fn spec_of(live: &Cluster, prior: Option<&Spec>) -> Spec {
    let vpc = live.resources_vpc_config();
    let strings = |items: &[String]| items.to_vec();
    Spec {
        name: live.name().unwrap_or_default().to_string(),
        version: live.version().unwrap_or_default().to_string(),
        role_arn: live.role_arn().unwrap_or_default().to_string(),
        subnet_ids: in_prior_order(
            vpc.map(|v| strings(v.subnet_ids())).unwrap_or_default(),
            prior.map(|p| &p.subnet_ids),
        ),
        security_group_ids: in_prior_order(
            vpc.map(|v| strings(v.security_group_ids()))
                .unwrap_or_default(),
            prior.map(|p| &p.security_group_ids),
        ),
        endpoint_public_access: vpc.is_some_and(|v| v.endpoint_public_access()),
        endpoint_private_access: vpc.is_some_and(|v| v.endpoint_private_access()),
        public_access_cidrs: in_prior_order(
            vpc.map(|v| strings(v.public_access_cidrs()))
                .unwrap_or_default(),
            prior.map(|p| &p.public_access_cidrs),
        ),
        logging: in_prior_order(enabled_logs(live.logging()), prior.map(|p| &p.logging)),
        // Tracked when the stack sets it (a prior without it, or an import, leaves it to
        // the cluster); an answer without accessConfig (moto's) is EKS's default.
        authentication_mode: prior
            .is_none_or(|p| p.authentication_mode.is_some())
            .then(|| live_authentication_mode(live)),
        tags: user_tags(&tag_map(live.tags())),
    }
}

/// The CA certificate as PEM: EKS reports base64 of the PEM. Data that does not decode
/// to a PEM (some emulators report random text) is passed on as reported, and the
/// Kubernetes connection says what is wrong with it when it is used.
pub fn pem_of(data: &str) -> String {
    base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .filter(|pem| pem.trim_start().starts_with("-----BEGIN"))
        .unwrap_or_else(|| data.to_string())
}

/// Where a cluster's token comes from: what the `kubernetes` output's `auth` holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenSource {
    pub region: String,
    /// The `[providers.aws]` profile, when set.
    pub profile: Option<String>,
    /// The STS endpoint override (`endpoints.sts` or `endpoint`), when set.
    pub sts_endpoint: Option<String>,
    /// Signed with the sandbox's fixed credentials.
    pub sandbox: bool,
}

impl TokenSource {
    fn of(ctx: &Ctx, cfg: &config::AwsConfig, eks: &aws_sdk_eks::Client) -> TokenSource {
        TokenSource {
            region: eks
                .config()
                .region()
                .map(|r| r.to_string())
                .or_else(|| cfg.region_or_env(ctx))
                .unwrap_or_default(),
            profile: cfg.profile.clone(),
            sts_endpoint: cfg.endpoint_for("sts").map(str::to_string),
            sandbox: cfg.sandbox,
        }
    }
}

/// The `kubernetes` output: never a token, only where to get one.
pub fn kubernetes_output(live: &Cluster, source: &TokenSource) -> Value {
    let name = live.name().unwrap_or_default();
    let mut auth = json!({"type": "aws", "cluster_name": name, "region": source.region});
    if let Some(p) = &source.profile {
        auth["profile"] = json!(p);
    }
    if let Some(e) = &source.sts_endpoint {
        auth["sts_endpoint"] = json!(e);
    }
    if source.sandbox {
        auth["sandbox"] = json!(true);
    }
    let endpoint = live.endpoint().unwrap_or_default();
    json!({
        "host": endpoint.trim_end_matches('/'),
        "ca_certificate": pem_of(live.certificate_authority().and_then(|c| c.data()).unwrap_or_default()),
        "auth": auth,
        "flavor": "eks",
        "name": name,
    })
}

/// The outputs of a live cluster.
pub fn outputs_of(live: &Cluster, source: &TokenSource) -> Outputs {
    Outputs {
        arn: live.arn().unwrap_or_default().to_string(),
        endpoint: live
            .endpoint()
            .unwrap_or_default()
            .trim_end_matches('/')
            .to_string(),
        ca_certificate: pem_of(
            live.certificate_authority()
                .and_then(|c| c.data())
                .unwrap_or_default(),
        ),
        oidc_issuer: live
            .identity()
            .and_then(|i| i.oidc())
            .and_then(|o| o.issuer())
            .unwrap_or_default()
            .to_string(),
        platform_version: live.platform_version().unwrap_or_default().to_string(),
        status: live
            .status()
            .map(|s| s.as_str())
            .unwrap_or_default()
            .to_string(),
        kubernetes: kubernetes_output(live, source),
    }
}

/// The cluster named `name`; `None` when there is none.
async fn describe(eks: &aws_sdk_eks::Client, name: &str) -> Result<Option<Cluster>, ProviderError> {
    let answer = eks.describe_cluster().name(name).send().await;
    Ok(found(DESCRIBE, answer)?.and_then(|out| out.cluster().cloned()))
}

/// The health issues of a cluster, one line (EKS's resource ids left out).
fn cluster_issues(live: &Cluster) -> String {
    problems_line(
        live.health()
            .map(|h| h.issues())
            .unwrap_or_default()
            .iter()
            .map(|i| (i.code().map(|c| c.as_str()), i.message(), &[][..])),
        "EKS reports no health issue",
    )
}

/// Waits until cluster `name` is ACTIVE; fails when it is FAILED or being deleted.
async fn wait_active(
    ctx: &Ctx,
    eks: &aws_sdk_eks::Client,
    name: &str,
    call: &str,
    waiting_for: &str,
    timeout: Duration,
) -> Result<Cluster, ProviderError> {
    eks::wait_active(
        ctx,
        call,
        waiting_for,
        timeout,
        // Right after CreateCluster the cluster may not be visible yet: keep waiting.
        || describe(eks, name),
        |live, status| match status {
            "FAILED" => Some(format!(
                "cluster {name} is FAILED: {}",
                cluster_issues(live)
            )),
            "DELETING" => Some(format!("cluster {name} is being deleted")),
            _ => None,
        },
    )
    .await
}

/// A one-line description of a version change for plans; says why it will be refused.
pub fn describe_version_change(from: &str, to: &str) -> Option<String> {
    if from == to {
        return None;
    }
    Some(match catalog::check_upgrade(from, to) {
        Ok(()) => format!("control plane upgrade {from} → {to} in place (eks:UpdateClusterVersion, typically 10 to 25 minutes); node groups keep their Kubernetes version until they are upgraded"),
        Err(m) => format!("version: {m}; apply stops before changing anything"),
    })
}

/// A one-line description of an authentication mode change for plans: it cannot be
/// undone.
pub fn describe_authentication_change(from: &str, to: &str) -> Option<String> {
    (from != to).then(|| format!("authentication mode {from} → {to} in place (eks:UpdateClusterConfig); EKS cannot change it back"))
}

fn gone(name: &str) -> ProviderError {
    eks::gone(DESCRIBE, &format!("cluster {name}"))
}

#[async_trait]
impl Kind for EksCluster {
    type Spec = Spec;
    type Outputs = Outputs;
    const KIND: &'static str = "eks_cluster";
    const PROVIDER: &'static str = "aws";
    const WRITES: crate::protocol::Writes = crate::protocol::Writes::FromId;
    const BILLS: bool = true;

    fn validate(spec: &Spec, config: &Value) -> Vec<Invalid> {
        let mut out = Vec::new();
        if let Err(m) = catalog::check_eks_name(&spec.name, catalog::EKS_CLUSTER_NAME_MAX) {
            out.push(Invalid::at("name", m));
        }
        if let Err(m) = catalog::check_eks_version(&spec.version) {
            out.push(Invalid::at("version", m));
        }
        if let Err(m) = catalog::check_role_arn(&spec.role_arn) {
            out.push(Invalid::at("role_arn", m));
        } else if let Some(region) = config::catalog_region(config) {
            if let Err(m) = catalog::check_arn_partition(&spec.role_arn, region) {
                out.push(Invalid::at("role_arn", m));
            }
        }
        if spec.subnet_ids.len() < 2 {
            out.push(Invalid::at(
                "subnet_ids",
                format!(
                    "EKS needs at least two subnets in different Availability Zones; {} given",
                    spec.subnet_ids.len()
                ),
            ));
        }
        eks::check_subnet_ids(&spec.subnet_ids, &mut out);
        if spec.security_group_ids.len() > 5 {
            out.push(Invalid::at(
                "security_group_ids",
                format!(
                    "at most 5 security groups; {} given",
                    spec.security_group_ids.len()
                ),
            ));
        }
        for (i, id) in spec.security_group_ids.iter().enumerate() {
            if let Err(m) = catalog::check_security_group_id(id) {
                out.push(Invalid::at(&format!("security_group_ids.{i}"), m));
            }
        }
        if !spec.endpoint_public_access && !spec.endpoint_private_access {
            out.push(Invalid::at(
                "endpoint_public_access",
                "the API server needs an endpoint: set endpoint_public_access or endpoint_private_access to true",
            ));
        }
        if spec.endpoint_public_access && spec.public_access_cidrs.is_empty() {
            out.push(Invalid::at(
                "public_access_cidrs",
                "a public endpoint needs at least one allowed block (\"0.0.0.0/0\" for anywhere)",
            ));
        }
        for (i, cidr) in spec.public_access_cidrs.iter().enumerate() {
            if let Err(m) = catalog::check_ipv4_cidr(cidr) {
                out.push(Invalid::at(&format!("public_access_cidrs.{i}"), m));
            }
        }
        if let Some(mode) = spec
            .authentication_mode
            .as_ref()
            .filter(|m| !AUTHENTICATION_MODES.contains(&m.as_str()))
        {
            out.push(Invalid::at(
                "authentication_mode",
                format!(
                    "{mode:?} is not an EKS authentication mode; use CONFIG_MAP, API_AND_CONFIG_MAP or API"
                ),
            ));
        }
        let mut seen = BTreeSet::new();
        for (i, t) in spec.logging.iter().enumerate() {
            if !LOG_TYPES.contains(&t.as_str()) {
                out.push(Invalid::at(
                    &format!("logging.{i}"),
                    format!(
                        "{t:?} is not a control plane log type; use {}",
                        LOG_TYPES.join(", ")
                    ),
                ));
            } else if !seen.insert(t) {
                out.push(Invalid::at(
                    &format!("logging.{i}"),
                    format!("{t} is listed twice"),
                ));
            }
        }
        eks::check_tags_and_config(&spec.tags, config, &mut out);
        out
    }

    fn validate_change(prior: &Spec, spec: &Spec) -> Vec<Invalid> {
        // `prior` is the refreshed spec, so its version and authentication mode are the
        // live ones: the plan refuses what UpdateClusterVersion and UpdateClusterConfig
        // would, before anything is applied.
        let mut out = Vec::new();
        if prior.version != spec.version {
            if let Err(m) = catalog::check_upgrade(&prior.version, &spec.version) {
                out.push(Invalid::at("version", m));
            }
        }
        if let (Some(from), Some(to)) = (&prior.authentication_mode, &spec.authentication_mode) {
            if let Err(m) = check_authentication_change(from, to) {
                out.push(Invalid::at("authentication_mode", m));
            }
        }
        out
    }

    /// EKS's cluster fee (standard support).
    fn usage(_spec: &Value, config: &Value, _peers: &[crate::Peer]) -> Vec<crate::Usage> {
        let region = crate::usage::known(&config["region"]).unwrap_or_default();
        vec![crate::Usage::fixed(
            "eks.cluster",
            "standard",
            region,
            1.0,
            "cluster fee".to_string(),
        )]
    }

    fn planned_id(spec: &Spec, _config: &Value) -> Option<String> {
        // Cluster names are unique per account and region: the name is the id.
        Some(spec.name.clone())
    }

    async fn read(
        &self,
        ctx: &Ctx,
        id: &str,
        prior: Option<&Spec>,
    ) -> Result<Option<Live<Self>>, ProviderError> {
        let cfg = config::of(ctx)?;
        let eks = config::eks(ctx).await?;
        let Some(live) = describe(&eks, id).await? else {
            return Ok(None);
        };
        // A cluster being torn down is as good as gone: planning must create a new one.
        if eks::is_deleting(&live) {
            return Ok(None);
        }
        Ok(Some(Live {
            id: id.to_string(),
            spec: spec_of(&live, prior),
            outputs: outputs_of(&live, &TokenSource::of(ctx, &cfg, &eks)),
        }))
    }

    async fn create(&self, ctx: &Ctx, spec: &Spec) -> Result<Live<Self>, ProviderError> {
        let cfg = config::of(ctx)?;
        let eks = config::eks(ctx).await?;
        let name = spec.name.as_str();
        let tags = hash_map(tags_with_ours(&spec.tags, &ctx.address));
        let send = || {
            eks.create_cluster()
                .name(name)
                .version(&spec.version)
                .role_arn(&spec.role_arn)
                .resources_vpc_config(vpc_config(spec))
                .logging(logging_config(&spec.logging))
                .access_config(create_access_config(spec))
                .set_tags(Some(tags.clone()))
                .send()
        };
        let what = Creating {
            call: CREATE,
            noun: "cluster",
            name,
            id: name,
            kind: Self::KIND,
        };
        eks::create_or_adopt(
            ctx,
            &what,
            send,
            || describe(&eks, name),
            || wait_gone(ctx, &eks, name),
        )
        .await?;
        let live = wait_active(
            ctx,
            &eks,
            name,
            CREATE,
            &format!("creating EKS cluster {name}"),
            CREATE_TIMEOUT,
        )
        .await?;
        Ok(Live {
            id: name.to_string(),
            spec: spec_of(&live, Some(spec)),
            outputs: outputs_of(&live, &TokenSource::of(ctx, &cfg, &eks)),
        })
    }

    async fn update(
        &self,
        ctx: &Ctx,
        id: &str,
        prior: &Spec,
        spec: &Spec,
    ) -> Result<Live<Self>, ProviderError> {
        let cfg = config::of(ctx)?;
        let eks = config::eks(ctx).await?;
        let current = describe(&eks, id).await?.ok_or_else(|| gone(id))?;
        // The live version decides the step, whatever the last apply recorded; check it
        // before changing anything, so a refused upgrade leaves the cluster untouched.
        let from = current.version().unwrap_or(&prior.version).to_string();
        if from != spec.version {
            catalog::check_upgrade(&from, &spec.version).map_err(|m| {
                ProviderError::Unsupported(format!("{UPDATE_VERSION}: version: {m}"))
            })?;
        }
        // Likewise the live authentication mode (absent: EKS's default).
        let mode = live_authentication_mode(&current);
        if let Some(to) = &spec.authentication_mode {
            check_authentication_change(&mode, to).map_err(|m| {
                ProviderError::Unsupported(format!("{UPDATE_CONFIG}: authentication_mode: {m}"))
            })?;
        }
        for change in config_changes(prior, spec) {
            let (what, request) = match change {
                // Already there (changed outside terrain since the last apply): EKS
                // refuses an update that changes nothing.
                ConfigChange::Authentication(_)
                    if spec.authentication_mode.as_deref() == Some(mode.as_str()) =>
                {
                    continue
                }
                ConfigChange::Access(vpc) => (
                    "endpoint access",
                    eks.update_cluster_config()
                        .name(id)
                        .resources_vpc_config(vpc),
                ),
                ConfigChange::Logging(logging) => (
                    "logging",
                    eks.update_cluster_config().name(id).logging(logging),
                ),
                ConfigChange::Authentication(access) => (
                    "authentication mode",
                    eks.update_cluster_config().name(id).access_config(access),
                ),
            };
            let out = request
                .send()
                .await
                .map_err(|e| sdk_error(UPDATE_CONFIG, e))?;
            let waiting_for = format!("updating the {what} of EKS cluster {id}");
            let how = UpdateWait {
                cluster: id,
                nodegroup: None,
                capability: None,
                call: UPDATE_CONFIG,
                waiting_for: &waiting_for,
                timeout: CONFIG_TIMEOUT,
            };
            wait_update(ctx, &eks, out.update(), &how).await?;
            wait_active(ctx, &eks, id, UPDATE_CONFIG, &waiting_for, CONFIG_TIMEOUT).await?;
        }
        if prior.tags != spec.tags {
            let arn = current.arn().unwrap_or_default();
            retag(&eks, arn, &current, &spec.tags).await?;
        }
        if from != spec.version {
            let waiting_for = format!("upgrading {from} → {}", spec.version);
            ctx.progress(&waiting_for);
            let out = eks
                .update_cluster_version()
                .name(id)
                .version(&spec.version)
                .send()
                .await
                .map_err(|e| sdk_error(UPDATE_VERSION, e))?;
            let how = UpdateWait {
                cluster: id,
                nodegroup: None,
                capability: None,
                call: UPDATE_VERSION,
                waiting_for: &waiting_for,
                timeout: UPGRADE_TIMEOUT,
            };
            wait_update(ctx, &eks, out.update(), &how).await?;
            wait_active(ctx, &eks, id, UPDATE_VERSION, &waiting_for, UPGRADE_TIMEOUT).await?;
        }
        let live = describe(&eks, id).await?.ok_or_else(|| gone(id))?;
        Ok(Live {
            id: id.to_string(),
            spec: spec_of(&live, Some(spec)),
            outputs: outputs_of(&live, &TokenSource::of(ctx, &cfg, &eks)),
        })
    }

    async fn delete(
        &self,
        ctx: &Ctx,
        id: &str,
        _prior: Option<&Spec>,
    ) -> Result<(), ProviderError> {
        let eks = config::eks(ctx).await?;
        match eks
            .delete_cluster()
            .name(id)
            .send()
            .await
            .map_err(|e| sdk_error(DELETE, e))
        {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => return Ok(()),
            Err(e) if code_of(&e) == IN_USE => {
                let groups = eks
                    .list_nodegroups()
                    .cluster_name(id)
                    .send()
                    .await
                    .map_err(|e| sdk_error(LIST_NODEGROUPS, e))?
                    .nodegroups()
                    .to_vec();
                if !groups.is_empty() {
                    return Err(still_has_node_groups(id, &groups, e));
                }
                // Already being deleted (an earlier attempt): wait for the end below.
                eks::already_deleting(e, || describe(&eks, id)).await?;
            }
            Err(e) => return Err(e),
        }
        wait_gone(ctx, &eks, id).await
    }

    async fn preview(
        &self,
        _ctx: &Ctx,
        _id: &str,
        prior: &Spec,
        spec: &Spec,
    ) -> Result<Option<String>, ProviderError> {
        let lines: Vec<String> = [
            describe_version_change(&prior.version, &spec.version),
            match (&prior.authentication_mode, &spec.authentication_mode) {
                (Some(from), Some(to)) => describe_authentication_change(from, to),
                _ => None,
            },
        ]
        .into_iter()
        .flatten()
        .collect();
        Ok((!lines.is_empty()).then(|| lines.join("; ")))
    }

    async fn health(
        &self,
        ctx: &Ctx,
        id: &str,
        _prior: Option<&Spec>,
    ) -> Result<Option<Health>, ProviderError> {
        let eks = config::eks(ctx).await?;
        let live = describe(&eks, id).await?;
        Ok(Some(eks::health_of(
            live.as_ref(),
            &["FAILED"],
            cluster_issues,
            |live| format!("Kubernetes {}", live.version().unwrap_or_default()),
        )))
    }
}

/// The refusal of a cluster delete while node groups remain, naming them.
fn still_has_node_groups(cluster: &str, groups: &[String], cause: ProviderError) -> ProviderError {
    let (status, code) = match &cause {
        ProviderError::Api { status, code, .. } => (*status, code.clone()),
        _ => (409, "ResourceInUseException".to_string()),
    };
    let first = groups.first().map(String::as_str).unwrap_or_default();
    ProviderError::api(
        DELETE,
        status,
        code,
        format!(
            "cluster {cluster} still has node groups {}: EKS deletes a cluster only without them; terrain deletes its own eks_node_group resources first, so these were made outside this stack: delete them (`aws eks delete-nodegroup --cluster-name {cluster} --nodegroup-name {first}`) or import them, then apply again",
            groups.join(", ")
        ),
    )
}

/// Waits until cluster `name` no longer exists.
async fn wait_gone(ctx: &Ctx, eks: &aws_sdk_eks::Client, name: &str) -> Result<(), ProviderError> {
    eks::wait_gone(
        ctx,
        DELETE,
        &format!("deleting EKS cluster {name}"),
        DELETE_TIMEOUT,
        || describe(eks, name),
        // A cluster's deletion has no failed state to report: it ends or times out.
        |_: &Cluster, _| None,
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aws::eks::testing::assert_validation;
    use crate::testing::schema_mismatches;
    use aws_sdk_eks::types::{
        AccessConfigResponse, Certificate, ClusterStatus, Identity, Oidc, VpcConfigResponse,
    };

    fn spec() -> Spec {
        Spec {
            name: "ml".into(),
            version: "1.31".into(),
            role_arn: "arn:aws:iam::123456789012:role/eks-cluster".into(),
            subnet_ids: vec![
                "subnet-0aaaaaaaaaaaaaaaa".into(),
                "subnet-0bbbbbbbbbbbbbbbb".into(),
            ],
            security_group_ids: vec![],
            endpoint_public_access: true,
            endpoint_private_access: false,
            public_access_cidrs: vec!["0.0.0.0/0".into()],
            logging: vec![],
            authentication_mode: Some("CONFIG_MAP".into()),
            tags: BTreeMap::new(),
        }
    }

    const CA_PEM: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

    /// A cluster as DescribeCluster reports one made from `s`.
    fn live_of(s: &Spec, address: &str) -> Cluster {
        let vpc = VpcConfigResponse::builder()
            .set_subnet_ids(Some(s.subnet_ids.iter().rev().cloned().collect()))
            .set_security_group_ids(Some(s.security_group_ids.clone()))
            .cluster_security_group_id("sg-0cccccccccccccccc")
            .endpoint_public_access(s.endpoint_public_access)
            .endpoint_private_access(s.endpoint_private_access)
            .set_public_access_cidrs(Some(s.public_access_cidrs.clone()))
            .build();
        Cluster::builder()
            .name(&s.name)
            .arn(format!(
                "arn:aws:eks:us-west-2:123456789012:cluster/{}",
                s.name
            ))
            .version(&s.version)
            .endpoint("https://ABCDEF.gr7.us-west-2.eks.amazonaws.com")
            .role_arn(&s.role_arn)
            .resources_vpc_config(vpc)
            .logging(logging_config(&s.logging))
            .access_config(
                AccessConfigResponse::builder()
                    .set_authentication_mode(
                        s.authentication_mode
                            .as_deref()
                            .map(AuthenticationMode::from),
                    )
                    .build(),
            )
            .identity(
                Identity::builder()
                    .oidc(
                        Oidc::builder()
                            .issuer("https://oidc.eks.us-west-2.amazonaws.com/id/ABC")
                            .build(),
                    )
                    .build(),
            )
            .status(ClusterStatus::Active)
            .certificate_authority(
                Certificate::builder()
                    .data(base64::engine::general_purpose::STANDARD.encode(CA_PEM))
                    .build(),
            )
            .platform_version("eks.4")
            .set_tags(Some(hash_map(tags_with_ours(&s.tags, address))))
            .build()
    }

    fn source() -> TokenSource {
        TokenSource {
            region: "us-west-2".into(),
            profile: None,
            sts_endpoint: None,
            sandbox: false,
        }
    }

    #[test]
    fn schema_matches_spec_and_outputs() {
        let full = Spec {
            security_group_ids: vec!["sg-0aaaaaaaaaaaaaaaa".into()],
            logging: vec!["api".into()],
            authentication_mode: Some("API".into()),
            tags: BTreeMap::from([("team".to_string(), "ml".to_string())]),
            ..spec()
        };
        let outputs = outputs_of(&live_of(&full, "eks_cluster.ml"), &source());
        assert_eq!(
            schema_mismatches::<EksCluster>(&full, &outputs),
            Vec::<String>::new()
        );
    }

    #[test]
    fn live_cluster_reads_back_as_the_spec_that_made_it() {
        let full = Spec {
            security_group_ids: vec!["sg-0aaaaaaaaaaaaaaaa".into()],
            logging: vec!["scheduler".into(), "api".into()],
            endpoint_private_access: true,
            public_access_cidrs: vec!["203.0.113.0/24".into(), "198.51.100.0/24".into()],
            authentication_mode: Some("API_AND_CONFIG_MAP".into()),
            tags: BTreeMap::from([("team".to_string(), "ml".to_string())]),
            ..spec()
        };
        for s in [spec(), full] {
            let live = live_of(&s, "eks_cluster.ml");
            assert_eq!(spec_of(&live, Some(&s)), s);
        }
        // On import (no prior) lists come in EKS's order and terrain's tags are hidden.
        let s = Spec {
            logging: vec!["scheduler".into(), "api".into()],
            ..spec()
        };
        let imported = spec_of(&live_of(&s, "eks_cluster.ml"), None);
        assert_eq!(imported.logging, vec!["api", "scheduler"]);
        assert!(imported.tags.is_empty());
        // An answer without accessConfig is a cluster at EKS's default.
        let mut bare = live_of(&spec(), "eks_cluster.ml");
        bare.access_config = None;
        assert_eq!(
            spec_of(&bare, None).authentication_mode.as_deref(),
            Some("CONFIG_MAP")
        );
    }

    #[test]
    fn outputs_carry_the_kubernetes_connection_and_no_secret() {
        let live = live_of(&spec(), "eks_cluster.ml");
        let out = outputs_of(&live, &source());
        assert_eq!(out.ca_certificate, CA_PEM);
        assert_eq!(
            out.endpoint,
            "https://ABCDEF.gr7.us-west-2.eks.amazonaws.com"
        );
        assert_eq!(
            out.oidc_issuer,
            "https://oidc.eks.us-west-2.amazonaws.com/id/ABC"
        );
        assert_eq!(out.status, "ACTIVE");
        assert_eq!(
            out.kubernetes,
            json!({
                "host": "https://ABCDEF.gr7.us-west-2.eks.amazonaws.com",
                "ca_certificate": CA_PEM,
                "auth": {"type": "aws", "cluster_name": "ml", "region": "us-west-2"},
                "flavor": "eks",
                "name": "ml",
            })
        );
        assert!(crate::kubernetes::connect::check(&out.kubernetes).is_ok());
        let with_overrides = outputs_of(
            &live,
            &TokenSource {
                region: "us-east-1".into(),
                profile: Some("ml".into()),
                sts_endpoint: Some("http://127.0.0.1:5000".into()),
                sandbox: false,
            },
        );
        assert_eq!(
            with_overrides.kubernetes["auth"],
            json!({"type": "aws", "cluster_name": "ml", "region": "us-east-1", "profile": "ml", "sts_endpoint": "http://127.0.0.1:5000"})
        );
    }

    #[test]
    fn ca_data_that_is_no_pem_is_passed_on() {
        assert_eq!(pem_of("bm90IGEgY2VydA=="), "bm90IGEgY2VydA==");
        assert_eq!(pem_of("%%%"), "%%%");
    }

    #[test]
    fn create_request_parts() {
        let s = Spec {
            security_group_ids: vec!["sg-0aaaaaaaaaaaaaaaa".into()],
            logging: vec!["audit".into(), "api".into()],
            ..spec()
        };
        let vpc = vpc_config(&s);
        assert_eq!(vpc.subnet_ids(), s.subnet_ids.as_slice());
        assert_eq!(vpc.security_group_ids(), s.security_group_ids.as_slice());
        assert_eq!(vpc.endpoint_public_access(), Some(true));
        assert_eq!(vpc.endpoint_private_access(), Some(false));
        let logging = logging_config(&s.logging);
        let setups: Vec<(Vec<&str>, Option<bool>)> = logging
            .cluster_logging()
            .iter()
            .map(|l| (l.types().iter().map(LogType::as_str).collect(), l.enabled()))
            .collect();
        assert_eq!(
            setups,
            vec![
                (vec!["api", "audit"], Some(true)),
                (
                    vec!["authenticator", "controllerManager", "scheduler"],
                    Some(false)
                ),
            ]
        );
        let none = logging_config(&[]);
        assert_eq!(none.cluster_logging().len(), 1);
        assert_eq!(none.cluster_logging()[0].enabled(), Some(false));
        let access = create_access_config(&Spec {
            authentication_mode: Some("API".into()),
            ..spec()
        });
        assert_eq!(access.authentication_mode(), Some(&AuthenticationMode::Api));
        assert_eq!(
            access.bootstrap_cluster_creator_admin_permissions(),
            Some(true)
        );
    }

    #[test]
    fn updates_split_into_one_change_per_call() {
        let prior = spec();
        assert!(config_changes(&prior, &prior).is_empty());
        let reordered = Spec {
            public_access_cidrs: vec!["0.0.0.0/0".into()],
            ..prior.clone()
        };
        assert!(config_changes(&prior, &reordered).is_empty());
        let both = Spec {
            endpoint_private_access: true,
            logging: vec!["audit".into()],
            ..prior.clone()
        };
        let changes = config_changes(&prior, &both);
        assert_eq!(changes.len(), 2);
        match &changes[0] {
            ConfigChange::Access(vpc) => {
                assert_eq!(vpc.endpoint_private_access(), Some(true));
                assert!(
                    vpc.subnet_ids().is_empty(),
                    "subnets are never sent in an update"
                );
            }
            other => panic!("expected access first, got {other:?}"),
        }
        assert!(
            matches!(&changes[1], ConfigChange::Logging(l) if l.cluster_logging()[0].types() == [LogType::Audit])
        );
        // The authentication mode is an update of its own, after the others.
        let all = Spec {
            authentication_mode: Some("API_AND_CONFIG_MAP".into()),
            ..both
        };
        let changes = config_changes(&prior, &all);
        assert_eq!(changes.len(), 3);
        assert!(
            matches!(&changes[2], ConfigChange::Authentication(a) if a.authentication_mode() == Some(&AuthenticationMode::ApiAndConfigMap))
        );
    }

    #[test]
    fn authentication_mode_changes_go_one_step_towards_api_and_never_back() {
        let at = |from: &str, to: &str| {
            let prior = Spec {
                authentication_mode: Some(from.into()),
                ..spec()
            };
            let next = Spec {
                authentication_mode: Some(to.into()),
                ..spec()
            };
            <EksCluster as Kind>::validate_change(&prior, &next)
        };
        assert!(at("CONFIG_MAP", "CONFIG_MAP").is_empty());
        assert!(at("CONFIG_MAP", "API_AND_CONFIG_MAP").is_empty());
        assert!(at("API_AND_CONFIG_MAP", "API").is_empty());
        let skip = at("CONFIG_MAP", "API");
        assert!(
            matches!(skip.as_slice(), [p] if p.path == ["authentication_mode"] && p.message.contains("set authentication_mode = \"API_AND_CONFIG_MAP\" and apply first")),
            "{skip:?}"
        );
        for (from, to) in [
            ("API", "API_AND_CONFIG_MAP"),
            ("API", "CONFIG_MAP"),
            ("API_AND_CONFIG_MAP", "CONFIG_MAP"),
        ] {
            let back = at(from, to);
            assert!(
                matches!(back.as_slice(), [p] if p.path == ["authentication_mode"] && p.message.contains(&format!("cannot take a cluster back from {from} to {to}"))),
                "{back:?}"
            );
        }
        // A mode EKS does not have is validate's problem, not a change's.
        assert!(at("CONFIG_MAP", "IAM").is_empty());
        assert_eq!(
            describe_authentication_change("CONFIG_MAP", "API_AND_CONFIG_MAP").as_deref(),
            Some("authentication mode CONFIG_MAP → API_AND_CONFIG_MAP in place (eks:UpdateClusterConfig); EKS cannot change it back")
        );
        assert_eq!(describe_authentication_change("API", "API"), None);
    }

    #[test]
    fn version_changes_are_described_for_plans() {
        assert_eq!(describe_version_change("1.31", "1.31"), None);
        assert!(describe_version_change("1.30", "1.31")
            .is_some_and(|d| d.contains("upgrade 1.30 → 1.31")));
        assert!(describe_version_change("1.29", "1.31")
            .is_some_and(|d| d.contains("set version = \"1.30\"")));
        assert!(
            describe_version_change("1.31", "1.30").is_some_and(|d| d.contains("cannot downgrade"))
        );
    }

    #[test]
    fn version_changes_that_eks_refuses_fail_the_plan() {
        let at = |from: &str, to: &str| {
            let prior = Spec {
                version: from.into(),
                ..spec()
            };
            let next = Spec {
                version: to.into(),
                ..spec()
            };
            <EksCluster as Kind>::validate_change(&prior, &next)
        };
        assert!(at("1.30", "1.31").is_empty(), "one minor step is an update");
        assert!(at("1.31", "1.31").is_empty());
        let skip = at("1.29", "1.31");
        assert_eq!(skip.len(), 1);
        assert_eq!(skip[0].path, vec!["version".to_string()]);
        assert!(
            skip[0].message.contains("skips 1.30"),
            "{}",
            skip[0].message
        );
        assert!(at("1.31", "1.30")[0].message.contains("cannot downgrade"));
        // Through the untyped face the engine uses: an unknown version is left for apply.
        let resource = crate::protocol::Adapter::new(EksCluster);
        let json = |v: &str| {
            let mut value = serde_json::to_value(spec()).expect("spec encodes");
            value["version"] = json!(v);
            value
        };
        let refused =
            crate::protocol::Resource::validate_change(&resource, &json("1.29"), &json("1.31"));
        assert_eq!(refused.len(), 1);
        let unknown = crate::protocol::UNKNOWN.to_string();
        assert!(crate::protocol::Resource::validate_change(
            &resource,
            &json("1.29"),
            &json(&unknown)
        )
        .is_empty());
    }

    #[test]
    fn validation_table() {
        let cases: Vec<(Spec, &str, &str)> = vec![
            (spec(), "", ""),
            (
                Spec {
                    name: "ml.prod".into(),
                    ..spec()
                },
                "name",
                "only letters, digits",
            ),
            (
                Spec {
                    version: "1.31.4".into(),
                    ..spec()
                },
                "version",
                "without a patch number",
            ),
            (
                Spec {
                    version: "1.20".into(),
                    ..spec()
                },
                "version",
                "end of EKS extended support",
            ),
            (
                Spec {
                    role_arn: "eks-cluster".into(),
                    ..spec()
                },
                "role_arn",
                "not an ARN",
            ),
            (
                Spec {
                    role_arn: "arn:aws:iam::123456789012:user/alice".into(),
                    ..spec()
                },
                "role_arn",
                "not a role",
            ),
            (
                Spec {
                    subnet_ids: vec!["subnet-0aaaaaaaaaaaaaaaa".into()],
                    ..spec()
                },
                "subnet_ids",
                "at least two subnets in different Availability Zones",
            ),
            (
                Spec {
                    subnet_ids: vec!["subnet-0aaaaaaaaaaaaaaaa".into(), "subnet-x".into()],
                    ..spec()
                },
                "subnet_ids.1",
                "not a subnet id",
            ),
            (
                Spec {
                    subnet_ids: vec![
                        "subnet-0aaaaaaaaaaaaaaaa".into(),
                        "subnet-0aaaaaaaaaaaaaaaa".into(),
                    ],
                    ..spec()
                },
                "subnet_ids.1",
                "listed twice",
            ),
            (
                Spec {
                    security_group_ids: vec!["default".into()],
                    ..spec()
                },
                "security_group_ids.0",
                "not a security group id",
            ),
            (
                Spec {
                    endpoint_public_access: false,
                    ..spec()
                },
                "endpoint_public_access",
                "needs an endpoint",
            ),
            (
                Spec {
                    public_access_cidrs: vec![],
                    ..spec()
                },
                "public_access_cidrs",
                "at least one allowed block",
            ),
            (
                Spec {
                    public_access_cidrs: vec!["10.0.0.1/8".into()],
                    ..spec()
                },
                "public_access_cidrs.0",
                "host bits",
            ),
            (
                Spec {
                    logging: vec!["controller".into()],
                    ..spec()
                },
                "logging.0",
                "not a control plane log type",
            ),
            (
                Spec {
                    authentication_mode: Some("API".into()),
                    ..spec()
                },
                "",
                "",
            ),
            (
                Spec {
                    authentication_mode: Some("api".into()),
                    ..spec()
                },
                "authentication_mode",
                "not an EKS authentication mode",
            ),
            (
                Spec {
                    tags: BTreeMap::from([("aws:x".to_string(), "1".to_string())]),
                    ..spec()
                },
                "tags",
                "reserved",
            ),
        ];
        assert_validation::<EksCluster>(cases, &json!({"region": "us-west-2"}));
        let bad_config = EksCluster::validate(&spec(), &json!({"regoin": "x"}));
        assert!(
            bad_config
                .iter()
                .any(|p| p.path.is_empty() && p.message.contains("regoin")),
            "{bad_config:?}"
        );
    }

    #[test]
    fn the_role_is_in_the_partition_of_the_provider_region() {
        let china = json!({"region": "cn-north-1"});
        let problems = EksCluster::validate(&spec(), &china);
        assert!(
            matches!(problems.as_slice(), [p] if p.path == ["role_arn"] && p.message.contains("the provider's region cn-north-1 is in the aws-cn partition") && p.message.contains("write arn:aws-cn:iam::123456789012:role/eks-cluster")),
            "{problems:?}"
        );
        let cn_role = Spec {
            role_arn: "arn:aws-cn:iam::123456789012:role/eks-cluster".into(),
            ..spec()
        };
        assert!(EksCluster::validate(&cn_role, &china).is_empty());
        // A made-up or absent provider region is the provider table's problem.
        assert!(EksCluster::validate(&cn_role, &json!({"region": "us-east"})).is_empty());
        assert!(EksCluster::validate(&cn_role, &Value::Null).is_empty());
    }

    #[test]
    fn planned_id_is_the_name() {
        assert_eq!(
            EksCluster::planned_id(&spec(), &Value::Null).as_deref(),
            Some("ml")
        );
    }

    #[test]
    fn delete_refusal_names_the_node_groups() {
        let cause = ProviderError::api(
            DELETE,
            409,
            "ResourceInUseException",
            "Cluster has nodegroups attached",
        );
        let e = still_has_node_groups("ml", &["gpu".to_string(), "manual".to_string()], cause);
        let m = e.to_string();
        assert!(m.starts_with("eks:DeleteCluster failed: 409 ResourceInUseException: cluster ml still has node groups gpu, manual"), "{m}");
        assert!(m.contains("--nodegroup-name gpu"), "{m}");
    }
}
