//! The AWS provider (`[providers.aws]`): EKS clusters, managed node groups,
//! capabilities, add-ons and pod identity associations, S3 buckets and objects through
//! the AWS SDK for Rust, the VPC network (VPC, subnets, internet and NAT gateways, route
//! tables) through EC2's query protocol, SageMaker pipelines and executions submitted as
//! ACK custom resources on an EKS cluster (cross-checked with the SageMaker API), and IAM
//! roles, KMS keys and the account itself by hand-signed calls.
//!
//! Layout: `config` resolves settings and builds SDK clients, `signed` calls by
//! hand-signed HTTP the services terrain builds no SDK crate for (EC2, Service Quotas,
//! SageMaker, IAM, KMS, STS), `ec2` makes EC2 query calls and reads their XML, `policy`
//! holds IAM documents, `access` evaluates them, `iam_checks`, `pipeline_access` and
//! `network_checks` check the stack's IAM chains and network at plan, `token` makes the presigned STS token EKS's Kubernetes API accepts,
//! `catalog` holds the offline knowledge validation uses, `definition` validates
//! SageMaker pipeline definitions; one file per resource kind.
//!
//! Every object terrain creates carries the tags `managed-by=terrain` and
//! `terrain-address=<kind>.<name>`: when a create's response is lost and the retry finds
//! the object already there, those tags prove it is ours to adopt.

pub mod access;
pub mod ack;
mod ack_checks;
pub mod aws_account;
pub mod capacity;
pub mod catalog;
pub mod config;
pub mod definition;
pub mod ec2;
pub mod eks;
pub mod eks_addon;
pub mod eks_capability;
pub mod eks_cluster;
pub mod eks_node_group;
pub mod eks_pod_identity_association;
pub mod iam_checks;
pub mod iam_role;
pub mod internet_gateway;
pub mod kms_key;
pub mod nat_gateway;
pub mod network_checks;
mod pipeline_access;
pub mod policy;
pub mod route_table;
pub mod s3_bucket;
pub mod s3_object;
pub mod sagemaker_pipeline;
pub mod sagemaker_pipeline_execution;
pub mod signed;
pub mod subnet;
pub mod token;
pub mod vpc;
pub mod xml;

/// The kinds the stack-wide checks read: the IAM chain (roles, the buckets and keys
/// they reach, and what runs as them) and the network.
const STACK_KINDS: &[&str] = &[
    "aws_account",
    "iam_role",
    "kms_key",
    "s3_bucket",
    "eks_cluster",
    "eks_node_group",
    "eks_capability",
    "eks_addon",
    "eks_pod_identity_association",
    "sagemaker_pipeline",
    "sagemaker_pipeline_execution",
    "aws_vpc",
    "aws_subnet",
    "aws_internet_gateway",
    "aws_nat_gateway",
    "aws_route_table",
    // The ACK controller's own manifests (a self-managed controller), for `ack_checks`.
    "kubernetes_manifest",
];

/// The aws provider's table and capacity (see [`crate::provider::Provider`]).
pub struct Aws;

#[async_trait::async_trait]
impl crate::provider::Provider for Aws {
    fn name(&self) -> &'static str {
        "aws"
    }

    fn validate_config(&self, config: &serde_json::Value) -> Vec<crate::Invalid> {
        config::validate(config)
    }

    fn setting_keys(&self) -> Option<&'static [&'static str]> {
        Some(config::KEYS)
    }

    fn configure(
        &self,
        table: serde_json::Value,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> serde_json::Value {
        config::configure(table, env)
    }

    fn stack_kinds(&self) -> &'static [&'static str] {
        STACK_KINDS
    }

    fn check_stack(
        &self,
        resources: &[crate::protocol::StackResource],
    ) -> Vec<crate::protocol::StackFinding> {
        let mut found = iam_checks::check(resources);
        found.extend(network_checks::check(resources));
        ack_checks::check(&iam_checks::View::new(resources), &mut found);
        found
    }

    async fn preflight(
        &self,
        ctx: &crate::Ctx,
        needs: &[crate::Need],
    ) -> Result<Vec<crate::Finding>, crate::ProviderError> {
        capacity::preflight(ctx, needs).await
    }
}

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_runtime_api::client::result::SdkError;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;

use crate::failure::{self, Cloud};
use crate::{Ctx, ProviderError};

/// The tag every object terrain creates carries.
pub const MANAGED_BY: (&str, &str) = ("managed-by", "terrain");
/// The tag holding the creating resource's address.
pub const ADDRESS_TAG: &str = "terrain-address";

/// The user's tags plus terrain's own.
pub fn tags_with_ours(tags: &BTreeMap<String, String>, address: &str) -> BTreeMap<String, String> {
    let mut out = tags.clone();
    out.insert(MANAGED_BY.0.to_string(), MANAGED_BY.1.to_string());
    out.insert(ADDRESS_TAG.to_string(), address.to_string());
    out
}

/// A live object's tags without terrain's own.
pub fn user_tags(tags: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    tags.iter()
        .filter(|(k, _)| k.as_str() != MANAGED_BY.0 && k.as_str() != ADDRESS_TAG)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Whether a live object's tags say this address created it.
pub fn is_ours(tags: &BTreeMap<String, String>, address: &str) -> bool {
    tags.get(ADDRESS_TAG).map(String::as_str) == Some(address)
        && tags.get(MANAGED_BY.0).map(String::as_str) == Some(MANAGED_BY.1)
}

/// The error for a create that found a same-named object terrain did not make.
pub fn not_ours(call: &str, what: &str, id: &str, kind: &str, address: &str) -> ProviderError {
    let name = address.split_once('.').map_or(address, |(_, n)| n);
    ProviderError::api(
        call,
        409,
        "AlreadyExists",
        format!("{what} {id} already exists and was not created by {address}; bring it under terrain with `terrain import {kind}.{name} {id}` or pick another name"),
    )
}

/// The most tags IAM and KMS (like most AWS services) allow on one object.
const MAX_TAGS: usize = 50;

/// Checks a stack's tags against the limits `service` shares with most of AWS: 50 tags
/// with terrain's own two among them, keys of 1 to 128 characters that neither start
/// with `aws:` nor are terrain's, values of at most 256 characters; problems at `tags`.
pub fn check_tags(service: &str, tags: &BTreeMap<String, String>, out: &mut Vec<crate::Invalid>) {
    let most = MAX_TAGS - 2;
    if tags.len() > most {
        out.push(crate::Invalid::at(
            "tags",
            format!(
                "at most {most} tags ({service} allows {MAX_TAGS}, terrain uses 2), got {}",
                tags.len()
            ),
        ));
    }
    for (k, v) in tags {
        if k.is_empty() || k.chars().count() > 128 {
            out.push(crate::Invalid::at(
                "tags",
                format!("tag key {k:?} must be 1 to 128 characters long"),
            ));
        } else if k.to_ascii_lowercase().starts_with("aws:") {
            out.push(crate::Invalid::at(
                "tags",
                format!("tag key {k:?}: the prefix aws: is reserved for AWS"),
            ));
        } else if k == MANAGED_BY.0 || k == ADDRESS_TAG {
            out.push(crate::Invalid::at(
                "tags",
                format!("tag key {k:?} is terrain's own; pick another key"),
            ));
        }
        if v.chars().count() > 256 {
            out.push(crate::Invalid::at(
                "tags",
                format!("the value of tag {k:?} must be at most 256 characters long"),
            ));
        }
    }
}

/// The service's error code of an API error ("" for other errors).
pub fn code_of(e: &ProviderError) -> &str {
    match e {
        ProviderError::Api { code, .. } => code,
        _ => "",
    }
}

/// An SDK error as a provider error naming the call (`eks:CreateCluster`): see
/// [`sdk_error_at`]; for clients whose endpoint the caller does not know.
pub fn sdk_error<E>(call: &str, err: SdkError<E, HttpResponse>) -> ProviderError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    sdk_error_at(call, None, &err)
}

/// An SDK error as a provider error naming the call and built by [`failure`]: the HTTP
/// status, the service's code and message and the request id when the service answered;
/// what the SDK could not read when the answer did not follow the API; what went wrong on
/// the way to `endpoint` (refused, DNS, timeout) when nothing answered; never the SDK's
/// debug structs.
pub fn sdk_error_at<E>(
    call: &str,
    endpoint: Option<&str>,
    err: &SdkError<E, HttpResponse>,
) -> ProviderError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let request_id = err.raw_response().and_then(|r| {
        failure::AWS_REQUEST_ID_HEADERS
            .iter()
            .find_map(|h| r.headers().get(*h))
            .map(str::to_string)
    });
    match err {
        SdkError::ServiceError(service) => {
            let raw = service.raw();
            let status = raw.status().as_u16();
            let e = service.err();
            // A success status the SDK could not read, or an error answer it found no
            // code or message in, reaches here as an unhandled service error whose
            // source says what was wrong with the answer.
            if (200..300).contains(&status)
                || (e.code().is_none() && e.message().is_none() && e.source().is_some())
            {
                let what = e.source().map(failure::chain).unwrap_or_default();
                return failure::malformed(call, Cloud::Aws, status, &what, request_id);
            }
            // Answers without a body (HEAD) carry no code: the status's name stands in.
            let code = e.code().map(str::to_string).unwrap_or_else(|| {
                http::StatusCode::from_u16(status)
                    .ok()
                    .and_then(|s| s.canonical_reason())
                    .unwrap_or("")
                    .replace(' ', "")
            });
            let message = e.message().unwrap_or_default();
            let out = failure::answered(call, Cloud::Aws, status, code, message, request_id, None);
            // S3 answers a bucket of another region with a redirect naming its region.
            match raw.headers().get("x-amz-bucket-region") {
                Some(region) if matches!(status, 301 | 307 | 400) => {
                    out.with_hint(failure::Hint::WrongRegion {
                        region: region.to_string(),
                    })
                }
                _ => out,
            }
        }
        SdkError::ResponseError(r) => {
            let status = r.raw().status().as_u16();
            let what = std::error::Error::source(err)
                .map(failure::chain)
                .unwrap_or_default();
            failure::malformed(call, Cloud::Aws, status, &what, request_id)
        }
        SdkError::ConstructionFailure(_) => {
            // Building the request failed before anything was sent: most often no
            // credentials could be found.
            let what = failure::chain(err);
            let credentials = what.contains("credential");
            let out = ProviderError::api(call, 0, "", what);
            if credentials {
                out.with_hint(failure::Hint::Credentials(Cloud::Aws))
            } else {
                out
            }
        }
        _ => failure::unreachable(call, Cloud::Aws, endpoint, err),
    }
}

/// The HTTP status of an API error.
pub fn status_of(e: &ProviderError) -> Option<u16> {
    match e {
        ProviderError::Api { status, .. } => Some(*status),
        _ => None,
    }
}

/// Whether an error says the object does not exist.
pub fn is_not_found(e: &ProviderError) -> bool {
    match e {
        ProviderError::Api { status, code, .. } => {
            *status == 404
                || matches!(
                    code.as_str(),
                    "ResourceNotFoundException"
                        | "ResourceNotFound"
                        | "NoSuchBucket"
                        | "NoSuchKey"
                        | "NotFound"
                )
        }
        _ => false,
    }
}

/// Polls `check` until it answers `Some`, reporting `progress` messages, for at most
/// `timeout`; polls every `every` (shortened against emulators, which finish quickly).
pub async fn wait_for<T, F, Fut>(
    ctx: &Ctx,
    call: &str,
    waiting_for: &str,
    timeout: Duration,
    every: Duration,
    mut check: F,
) -> Result<T, ProviderError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>, ProviderError>>,
{
    let started = Instant::now();
    let mut delay = every.min(Duration::from_millis(100));
    // Said once: the engine reports the elapsed time of a long wait on its own, and a
    // line per poll would repeat the same words.
    let mut said = false;
    loop {
        if let Some(done) = check().await? {
            return Ok(done);
        }
        if started.elapsed() >= timeout {
            return Err(ProviderError::Timeout {
                call: call.to_string(),
                waiting_for: waiting_for.to_string(),
                after: timeout,
            });
        }
        if !said {
            ctx.progress(waiting_for);
            said = true;
        }
        tokio::time::sleep(delay).await;
        // Start fast (emulators finish in milliseconds), settle at the real cadence.
        delay = (delay * 2).min(every);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_mark_ownership() {
        let tags = tags_with_ours(
            &BTreeMap::from([("team".to_string(), "ml".to_string())]),
            "s3_bucket.data",
        );
        assert!(is_ours(&tags, "s3_bucket.data"));
        assert!(!is_ours(&tags, "s3_bucket.other"));
        assert_eq!(
            user_tags(&tags),
            BTreeMap::from([("team".to_string(), "ml".to_string())])
        );
    }

    #[test]
    fn not_found_is_recognised_by_status_or_code() {
        assert!(is_not_found(&ProviderError::api(
            "s3:HeadBucket",
            404,
            "",
            ""
        )));
        assert!(is_not_found(&ProviderError::api(
            "sagemaker:DescribePipeline",
            400,
            "ResourceNotFound",
            ""
        )));
        assert!(!is_not_found(&ProviderError::api(
            "eks:CreateCluster",
            409,
            "ResourceInUseException",
            ""
        )));
    }
}
