//! The AWS provider (`[providers.aws]`): EKS clusters and managed node groups, S3 buckets
//! and objects through the AWS SDK for Rust, and SageMaker pipelines and executions
//! submitted as ACK custom resources on an EKS cluster (cross-checked with the SageMaker
//! API).
//!
//! Layout: `config` resolves settings and builds SDK clients, `signed` calls by
//! hand-signed HTTP the services terrain builds no SDK crate for (EC2, Service Quotas,
//! SageMaker), `token` makes the presigned STS token EKS's Kubernetes API accepts,
//! `catalog` holds the offline knowledge validation uses, `definition` validates
//! SageMaker pipeline definitions; one file per resource kind.
//!
//! Every object terrain creates carries the tags `managed-by=terrain` and
//! `terrain-address=<kind>.<name>`: when a create's response is lost and the retry finds
//! the object already there, those tags prove it is ours to adopt.

pub mod ack;
pub mod capacity;
pub mod catalog;
pub mod config;
pub mod definition;
pub mod eks;
pub mod eks_cluster;
pub mod eks_node_group;
pub mod s3_bucket;
pub mod s3_object;
pub mod sagemaker_pipeline;
pub mod sagemaker_pipeline_execution;
pub mod signed;
pub mod token;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_runtime_api::client::result::SdkError;
use aws_smithy_types::error::display::DisplayErrorContext;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;

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

/// An SDK error as a provider error naming the call (`eks:CreateCluster`): the HTTP
/// status and the service's error code and message when the service answered, else what
/// went wrong on the way (timeout, connection refused, no credentials).
pub fn sdk_error<E>(call: &str, err: SdkError<E, HttpResponse>) -> ProviderError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    match &err {
        SdkError::ServiceError(service) => {
            let status = service.raw().status().as_u16();
            let e = service.err();
            let code = e
                .code()
                .map(str::to_string)
                .unwrap_or_else(|| match status {
                    404 => "NotFound".into(),
                    _ => String::new(),
                });
            let message = e.message().map(str::to_string).unwrap_or_default();
            ProviderError::api(call, status, code, message)
        }
        SdkError::ResponseError(r) => {
            let status = r.raw().status().as_u16();
            ProviderError::api(call, status, "", DisplayErrorContext(&err).to_string())
        }
        _ => ProviderError::api(call, 0, "", DisplayErrorContext(&err).to_string()),
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
