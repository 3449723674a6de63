//! The `s3_bucket` kind: an S3 general purpose bucket for datasets, model artifacts and
//! pipeline files. Versioning, default encryption, the public access block, lifecycle
//! rules and tags change in place; the name is fixed (and global across all accounts).
//!
//! Refresh is lean on purpose, since it runs for every bucket on every plan: one
//! HeadBucket plus one read per managed setting, all in flight at once, and the
//! lifecycle configuration only when the last applied spec has rules. Create sends only
//! what differs from the defaults S3 gives every new bucket since 2023 (SSE-S3
//! encryption, all four public access blocks on, versioning off); update sends only the
//! settings that changed. Destroy refuses a bucket that still holds objects unless
//! `force_destroy = true`, which deletes every object version and delete marker first.
//!
//! The request values are built by plain functions ([`create_settings`],
//! [`update_settings`], [`lifecycle_configuration`], …) so they can be tested without a
//! server; [`send_setting`] and the `Kind` methods send them.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use aws_sdk_s3::types as s3t;
use aws_sdk_s3::Client;
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_runtime_api::client::result::SdkError;
use aws_smithy_types::error::operation::BuildError;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{config, is_not_found, is_ours, not_ours, sdk_error, tags_with_ours, user_tags};
use super::{ADDRESS_TAG, MANAGED_BY};
use crate::schema::Fields;
use crate::{Ctx, Invalid, Kind, Live, ProviderError};

/// The kind `s3_bucket`.
#[derive(Debug, Clone, Copy, Default)]
pub struct S3Bucket;

const HEAD_BUCKET: &str = "s3:HeadBucket";
const CREATE_BUCKET: &str = "s3:CreateBucket";
const DELETE_BUCKET: &str = "s3:DeleteBucket";
const GET_VERSIONING: &str = "s3:GetBucketVersioning";
const PUT_VERSIONING: &str = "s3:PutBucketVersioning";
const GET_ENCRYPTION: &str = "s3:GetBucketEncryption";
const PUT_ENCRYPTION: &str = "s3:PutBucketEncryption";
const GET_PUBLIC_ACCESS_BLOCK: &str = "s3:GetPublicAccessBlock";
const PUT_PUBLIC_ACCESS_BLOCK: &str = "s3:PutPublicAccessBlock";
const GET_TAGGING: &str = "s3:GetBucketTagging";
const PUT_TAGGING: &str = "s3:PutBucketTagging";
const GET_LIFECYCLE: &str = "s3:GetBucketLifecycleConfiguration";
const PUT_LIFECYCLE: &str = "s3:PutBucketLifecycleConfiguration";
const DELETE_LIFECYCLE: &str = "s3:DeleteBucketLifecycle";
const LIST_VERSIONS: &str = "s3:ListObjectVersions";
const DELETE_OBJECTS: &str = "s3:DeleteObjects";

/// The region whose CreateBucket takes no LocationConstraint.
const US_EAST_1: &str = "us-east-1";
/// The default encryption algorithm, the one every new bucket starts with.
const AES256: &str = "AES256";
const ALGORITHMS: &[&str] = &[AES256, "aws:kms", "aws:kms:dsse"];
/// S3 allows 50 tags per bucket; terrain's own two count against that.
const MAX_USER_TAGS: usize = 48;
/// S3 allows 1000 lifecycle rules per bucket.
const MAX_RULES: usize = 1000;
/// Keys per ListObjectVersions page and per DeleteObjects request (both S3's maximum).
const BATCH: i32 = 1000;
/// How long settings sent right after CreateBucket retry a NoSuchBucket: S3 is
/// eventually consistent about new buckets for a short while.
const PROPAGATION: Duration = Duration::from_secs(120);

fn aes256() -> String {
    AES256.into()
}

fn yes() -> bool {
    true
}

/// Default encryption for new objects.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Encryption {
    /// AES256 (SSE-S3), aws:kms (SSE-KMS) or aws:kms:dsse (dual-layer SSE-KMS).
    #[serde(default = "aes256")]
    pub algorithm: String,
    /// The KMS key for aws:kms or aws:kms:dsse; the AWS managed key aws/s3 when left out.
    /// Not allowed with AES256.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kms_key_id: Option<String>,
    /// Use an S3 Bucket Key to cut KMS requests (takes effect with aws:kms).
    #[serde(default)]
    pub bucket_key: bool,
}

impl Default for Encryption {
    fn default() -> Self {
        Self {
            algorithm: aes256(),
            kms_key_id: None,
            bucket_key: false,
        }
    }
}

impl Encryption {
    /// Whether this is what S3 gives a new bucket, so create need not send it.
    fn is_new_bucket_default(&self) -> bool {
        *self == Self::default()
    }
}

/// The bucket's public access block; all four on is S3's default for new buckets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct PublicAccessBlock {
    /// Refuse public ACLs.
    #[serde(default = "yes")]
    pub block_public_acls: bool,
    /// Ignore public ACLs already set.
    #[serde(default = "yes")]
    pub ignore_public_acls: bool,
    /// Refuse bucket policies that grant public access.
    #[serde(default = "yes")]
    pub block_public_policy: bool,
    /// Limit access under a public policy to AWS services and the owner account.
    #[serde(default = "yes")]
    pub restrict_public_buckets: bool,
}

impl Default for PublicAccessBlock {
    fn default() -> Self {
        Self::all(true)
    }
}

impl PublicAccessBlock {
    fn all(on: bool) -> Self {
        Self {
            block_public_acls: on,
            ignore_public_acls: on,
            block_public_policy: on,
            restrict_public_buckets: on,
        }
    }
}

/// One lifecycle rule, for the objects under `prefix`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct LifecycleRule {
    /// A name for the rule, unique in the bucket.
    pub id: String,
    /// The key prefix the rule applies to; empty for the whole bucket.
    #[serde(default)]
    pub prefix: String,
    /// Whether the rule is in effect.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Expire current object versions this many days after they are written.
    pub expiration_days: Option<i64>,
    /// Delete old versions this many days after they stop being current.
    pub noncurrent_expiration_days: Option<i64>,
    /// Abort multipart uploads not completed this many days after they start.
    pub abort_incomplete_upload_days: Option<i64>,
}

/// What a stack writes for an `s3_bucket`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    /// The bucket name, global across all AWS accounts: 3-63 lowercase letters, digits,
    /// hyphens and dots.
    #[terrain(force_new)]
    pub name: String,
    /// Keep every version of overwritten and deleted objects; turning it off on a versioned
    /// bucket suspends versioning (existing versions stay, S3 cannot unversion a bucket).
    #[serde(default)]
    pub versioning: bool,
    /// Default encryption of new objects.
    #[serde(default)]
    pub encryption: Encryption,
    /// S3 Block Public Access for the bucket; all on by default.
    #[serde(default)]
    pub public_access_block: PublicAccessBlock,
    /// Lifecycle rules: expiration of objects, of old versions and of abandoned multipart
    /// uploads.
    #[serde(default)]
    pub lifecycle: Vec<LifecycleRule>,
    /// Bucket tags.
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
    /// Let destroy delete every object version in the bucket first.
    #[serde(default)]
    pub force_destroy: bool,
}

/// What `s3_bucket` reports after apply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Outputs {
    /// arn:aws:s3:::NAME.
    pub arn: String,
    /// The region the bucket is in.
    pub region: String,
    /// s3://NAME.
    pub url: String,
    /// NAME.s3.REGION.amazonaws.com, the bucket's regional endpoint.
    pub domain_name: String,
}

/// Checks a general purpose bucket name against S3's naming rules; the error says which
/// rule the name breaks.
pub fn check_bucket_name(name: &str) -> Result<(), String> {
    let fail = |why: &str| Err(format!("{name:?} is not a valid S3 bucket name: {why}"));
    if name.len() < 3 || name.len() > 63 {
        return fail("it must be 3 to 63 characters long");
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-' || *c == '.'))
    {
        return fail(&format!(
            "{c:?} is not allowed; use lowercase letters, digits, hyphens and dots"
        ));
    }
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    if !edge(name.chars().next()) || !edge(name.chars().last()) {
        return fail("it must start and end with a letter or digit");
    }
    if name.contains("..") {
        return fail("it must not contain two adjacent dots");
    }
    if name.parse::<Ipv4Addr>().is_ok() {
        return fail("it must not look like an IP address");
    }
    for prefix in ["xn--", "sthree-", "amzn-s3-demo-"] {
        if name.starts_with(prefix) {
            return fail(&format!("the prefix {prefix:?} is reserved"));
        }
    }
    for suffix in ["-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3"] {
        if name.ends_with(suffix) {
            return fail(&format!("the suffix {suffix:?} is reserved"));
        }
    }
    Ok(())
}

fn check_encryption(e: &Encryption, out: &mut Vec<Invalid>) {
    if !ALGORITHMS.contains(&e.algorithm.as_str()) {
        out.push(Invalid::at(
            "encryption.algorithm",
            format!(
                "{:?} is not an S3 encryption algorithm; use {}",
                e.algorithm,
                ALGORITHMS.join(", ")
            ),
        ));
        return;
    }
    match e.kms_key_id.as_deref() {
        Some(_) if e.algorithm == AES256 => out.push(Invalid::at(
            "encryption.kms_key_id",
            "a KMS key applies to aws:kms and aws:kms:dsse only; remove kms_key_id or set algorithm = \"aws:kms\"",
        )),
        Some("") => out.push(Invalid::at(
            "encryption.kms_key_id",
            "must not be empty; leave it out to use the AWS managed key aws/s3",
        )),
        _ => {}
    }
    if e.bucket_key && e.algorithm == "aws:kms:dsse" {
        out.push(Invalid::at(
            "encryption.bucket_key",
            "S3 Bucket Keys are not supported with aws:kms:dsse; set bucket_key = false or use aws:kms",
        ));
    }
}

fn check_days(path: &str, days: Option<i64>, out: &mut Vec<Invalid>) {
    if let Some(d) = days {
        if d < 1 || i32::try_from(d).is_err() {
            out.push(Invalid::at(
                path,
                format!("must be a number of days from 1, got {d}"),
            ));
        }
    }
}

fn check_lifecycle(rules: &[LifecycleRule], out: &mut Vec<Invalid>) {
    if rules.len() > MAX_RULES {
        out.push(Invalid::at(
            "lifecycle",
            format!("S3 allows at most {MAX_RULES} rules, got {}", rules.len()),
        ));
    }
    let mut seen = BTreeSet::new();
    for (i, rule) in rules.iter().enumerate() {
        let at = |field: &str| format!("lifecycle.{i}.{field}");
        if rule.id.is_empty() || rule.id.len() > 255 {
            out.push(Invalid::at(&at("id"), "must be 1 to 255 characters long"));
        } else if !seen.insert(rule.id.as_str()) {
            out.push(Invalid::at(
                &at("id"),
                format!(
                    "{:?} is used by another rule; rule ids must be unique",
                    rule.id
                ),
            ));
        }
        if rule.prefix.len() > 1024 {
            out.push(Invalid::at(&at("prefix"), "must be at most 1024 bytes"));
        }
        if rule.expiration_days.is_none()
            && rule.noncurrent_expiration_days.is_none()
            && rule.abort_incomplete_upload_days.is_none()
        {
            out.push(Invalid::at(
                &format!("lifecycle.{i}"),
                format!(
                    "rule {:?} has no action; set expiration_days, noncurrent_expiration_days or abort_incomplete_upload_days",
                    rule.id
                ),
            ));
        }
        check_days(&at("expiration_days"), rule.expiration_days, out);
        check_days(
            &at("noncurrent_expiration_days"),
            rule.noncurrent_expiration_days,
            out,
        );
        check_days(
            &at("abort_incomplete_upload_days"),
            rule.abort_incomplete_upload_days,
            out,
        );
    }
}

fn check_tags(tags: &BTreeMap<String, String>, out: &mut Vec<Invalid>) {
    if tags.len() > MAX_USER_TAGS {
        out.push(Invalid::at(
            "tags",
            format!(
                "at most {MAX_USER_TAGS} tags (S3 allows 50, terrain uses 2), got {}",
                tags.len()
            ),
        ));
    }
    for (k, v) in tags {
        if k.is_empty() || k.chars().count() > 128 {
            out.push(Invalid::at(
                "tags",
                format!("tag key {k:?} must be 1 to 128 characters long"),
            ));
        } else if k.starts_with("aws:") {
            out.push(Invalid::at(
                "tags",
                format!("tag key {k:?}: the prefix aws: is reserved for AWS"),
            ));
        } else if k == MANAGED_BY.0 || k == ADDRESS_TAG {
            out.push(Invalid::at(
                "tags",
                format!("tag key {k:?} is terrain's own; pick another key"),
            ));
        }
        if v.chars().count() > 256 {
            out.push(Invalid::at(
                "tags",
                format!("the value of tag {k:?} must be at most 256 characters long"),
            ));
        }
    }
}

/// One bucket setting to send, with its whole new value.
#[derive(Debug, Clone, PartialEq)]
pub enum Setting {
    /// The complete tag set, terrain's own tags included (PutBucketTagging replaces).
    Tags(BTreeMap<String, String>),
    Versioning(bool),
    Encryption(Encryption),
    PublicAccessBlock(PublicAccessBlock),
    /// The complete rule list; empty deletes the lifecycle configuration.
    Lifecycle(Vec<LifecycleRule>),
}

/// What create sends after CreateBucket: the tags always (they mark the bucket as
/// terrain's, first, so a retry can tell it is ours), the public access block always (a
/// security setting must not rest on a service default that S3-compatible endpoints and
/// older accounts do not share), then only what differs from the settings S3 gives
/// every new bucket.
pub fn create_settings(spec: &Spec, address: &str) -> Vec<Setting> {
    let mut out = vec![
        Setting::Tags(tags_with_ours(&spec.tags, address)),
        Setting::PublicAccessBlock(spec.public_access_block),
    ];
    if spec.versioning {
        out.push(Setting::Versioning(true));
    }
    if !spec.encryption.is_new_bucket_default() {
        out.push(Setting::Encryption(spec.encryption.clone()));
    }
    if !spec.lifecycle.is_empty() {
        out.push(Setting::Lifecycle(spec.lifecycle.clone()));
    }
    out
}

/// What update sends to take `prior` to `spec`: only the settings that changed.
pub fn update_settings(prior: &Spec, spec: &Spec, address: &str) -> Vec<Setting> {
    let mut out = Vec::new();
    if prior.tags != spec.tags {
        out.push(Setting::Tags(tags_with_ours(&spec.tags, address)));
    }
    if prior.versioning != spec.versioning {
        out.push(Setting::Versioning(spec.versioning));
    }
    if prior.encryption != spec.encryption {
        out.push(Setting::Encryption(spec.encryption.clone()));
    }
    if prior.public_access_block != spec.public_access_block {
        out.push(Setting::PublicAccessBlock(spec.public_access_block));
    }
    if prior.lifecycle != spec.lifecycle {
        out.push(Setting::Lifecycle(spec.lifecycle.clone()));
    }
    out
}

fn built<T>(call: &str, r: Result<T, BuildError>) -> Result<T, ProviderError> {
    r.map_err(|e| ProviderError::api(call, 0, "InvalidRequest", e.to_string()))
}

/// The tag set of a PutBucketTagging.
pub fn tagging(tags: &BTreeMap<String, String>) -> Result<s3t::Tagging, ProviderError> {
    let set = tags
        .iter()
        .map(|(k, v)| built(PUT_TAGGING, s3t::Tag::builder().key(k).value(v).build()))
        .collect::<Result<Vec<_>, _>>()?;
    built(
        PUT_TAGGING,
        s3t::Tagging::builder().set_tag_set(Some(set)).build(),
    )
}

/// The configuration of a PutBucketEncryption.
pub fn encryption_configuration(
    e: &Encryption,
) -> Result<s3t::ServerSideEncryptionConfiguration, ProviderError> {
    let default = built(
        PUT_ENCRYPTION,
        s3t::ServerSideEncryptionByDefault::builder()
            .sse_algorithm(s3t::ServerSideEncryption::from(e.algorithm.as_str()))
            .set_kms_master_key_id(e.kms_key_id.clone())
            .build(),
    )?;
    let rule = s3t::ServerSideEncryptionRule::builder()
        .apply_server_side_encryption_by_default(default)
        .bucket_key_enabled(e.bucket_key)
        .build();
    built(
        PUT_ENCRYPTION,
        s3t::ServerSideEncryptionConfiguration::builder()
            .rules(rule)
            .build(),
    )
}

/// The encryption a GetBucketEncryption answer shows. A bucket without a configuration
/// reads as SSE-S3: S3 encrypts every bucket's new objects with it since January 2023,
/// and only emulators still report none.
pub fn encryption_of(config: Option<&s3t::ServerSideEncryptionConfiguration>) -> Encryption {
    let Some(rule) = config.and_then(|c| c.rules().first()) else {
        return Encryption::default();
    };
    let by_default = rule.apply_server_side_encryption_by_default();
    Encryption {
        algorithm: by_default.map_or_else(aes256, |d| d.sse_algorithm().as_str().to_string()),
        kms_key_id: by_default
            .and_then(|d| d.kms_master_key_id())
            .map(str::to_string),
        bucket_key: rule.bucket_key_enabled().unwrap_or(false),
    }
}

/// The configuration of a PutPublicAccessBlock.
pub fn public_access_block_configuration(
    p: &PublicAccessBlock,
) -> s3t::PublicAccessBlockConfiguration {
    s3t::PublicAccessBlockConfiguration::builder()
        .block_public_acls(p.block_public_acls)
        .ignore_public_acls(p.ignore_public_acls)
        .block_public_policy(p.block_public_policy)
        .restrict_public_buckets(p.restrict_public_buckets)
        .build()
}

/// The public access block a GetPublicAccessBlock answer shows (`None`: the bucket has
/// none, which blocks nothing).
pub fn public_access_block_of(
    config: Option<&s3t::PublicAccessBlockConfiguration>,
) -> PublicAccessBlock {
    let Some(c) = config else {
        return PublicAccessBlock::all(false);
    };
    PublicAccessBlock {
        block_public_acls: c.block_public_acls().unwrap_or(false),
        ignore_public_acls: c.ignore_public_acls().unwrap_or(false),
        block_public_policy: c.block_public_policy().unwrap_or(false),
        restrict_public_buckets: c.restrict_public_buckets().unwrap_or(false),
    }
}

/// Days as the API takes them; validation has checked the range.
fn days(d: i64) -> i32 {
    i32::try_from(d).unwrap_or(i32::MAX)
}

/// The configuration of a PutBucketLifecycleConfiguration: each rule filters on its
/// prefix (an empty prefix is the whole bucket).
pub fn lifecycle_configuration(
    rules: &[LifecycleRule],
) -> Result<s3t::BucketLifecycleConfiguration, ProviderError> {
    let rules = rules
        .iter()
        .map(|r| {
            built(
                PUT_LIFECYCLE,
                s3t::LifecycleRule::builder()
                    .id(&r.id)
                    .filter(
                        s3t::LifecycleRuleFilter::builder()
                            .prefix(&r.prefix)
                            .build(),
                    )
                    .status(if r.enabled {
                        s3t::ExpirationStatus::Enabled
                    } else {
                        s3t::ExpirationStatus::Disabled
                    })
                    .set_expiration(
                        r.expiration_days
                            .map(|d| s3t::LifecycleExpiration::builder().days(days(d)).build()),
                    )
                    .set_noncurrent_version_expiration(r.noncurrent_expiration_days.map(|d| {
                        s3t::NoncurrentVersionExpiration::builder()
                            .noncurrent_days(days(d))
                            .build()
                    }))
                    .set_abort_incomplete_multipart_upload(r.abort_incomplete_upload_days.map(
                        |d| {
                            s3t::AbortIncompleteMultipartUpload::builder()
                                .days_after_initiation(days(d))
                                .build()
                        },
                    ))
                    .build(),
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    built(
        PUT_LIFECYCLE,
        s3t::BucketLifecycleConfiguration::builder()
            .set_rules(Some(rules))
            .build(),
    )
}

/// The rules a GetBucketLifecycleConfiguration answer shows. Parts terrain does not
/// manage (transitions, tag and size filters) are not represented.
pub fn lifecycle_of(rules: &[s3t::LifecycleRule]) -> Vec<LifecycleRule> {
    rules
        .iter()
        .map(|r| LifecycleRule {
            id: r.id().unwrap_or_default().to_string(),
            // The filter's prefix, or the deprecated rule-level one older rules carry.
            #[allow(deprecated)]
            prefix: r
                .filter()
                .and_then(|f| f.prefix())
                .or(r.prefix())
                .unwrap_or_default()
                .to_string(),
            enabled: *r.status() == s3t::ExpirationStatus::Enabled,
            expiration_days: r.expiration().and_then(|e| e.days()).map(i64::from),
            noncurrent_expiration_days: r
                .noncurrent_version_expiration()
                .and_then(|e| e.noncurrent_days())
                .map(i64::from),
            abort_incomplete_upload_days: r
                .abort_incomplete_multipart_upload()
                .and_then(|a| a.days_after_initiation())
                .map(i64::from),
        })
        .collect()
}

/// A tag set as a map.
pub fn tags_of(set: &[s3t::Tag]) -> BTreeMap<String, String> {
    set.iter()
        .map(|t| (t.key().to_string(), t.value().to_string()))
        .collect()
}

/// The AWS partition and DNS suffix of `region`.
pub(crate) fn partition(region: &str) -> (&'static str, &'static str) {
    if region.starts_with("cn-") {
        ("aws-cn", "amazonaws.com.cn")
    } else if region.starts_with("us-gov-") {
        ("aws-us-gov", "amazonaws.com")
    } else {
        ("aws", "amazonaws.com")
    }
}

/// The outputs of bucket `name` in `region`.
pub fn outputs_of(name: &str, region: &str) -> Outputs {
    let (partition, dns) = partition(region);
    Outputs {
        arn: format!("arn:{partition}:s3:::{name}"),
        region: region.to_string(),
        url: format!("s3://{name}"),
        domain_name: format!("{name}.s3.{region}.{dns}"),
    }
}

/// The region `client` sends to (what create puts new buckets in).
pub(crate) fn client_region(client: &Client) -> String {
    client
        .config()
        .region()
        .map_or_else(|| US_EAST_1.to_string(), |r| r.to_string())
}

fn code_of(e: &ProviderError) -> &str {
    match e {
        ProviderError::Api { code, .. } => code,
        _ => "",
    }
}

/// The `x-amz-bucket-region` header of an error answer: S3 names the bucket's region
/// when it redirects (301) a request sent to another region's endpoint.
fn region_header<E>(err: &SdkError<E, HttpResponse>) -> Option<String> {
    let raw = match err {
        SdkError::ServiceError(s) => s.raw(),
        SdkError::ResponseError(r) => r.raw(),
        _ => return None,
    };
    raw.headers().get("x-amz-bucket-region").map(str::to_string)
}

/// What HeadBucket says about a name.
enum Head {
    /// It exists and this account may read it; its region.
    Ours(String),
    Missing,
}

/// HeadBucket: `Missing` on 404; a bucket in another region, or one this account may
/// not read, is an error saying so.
async fn head(client: &Client, name: &str) -> Result<Head, ProviderError> {
    match client.head_bucket().bucket(name).send().await {
        Ok(out) => Ok(Head::Ours(
            out.bucket_region()
                .map_or_else(|| client_region(client), str::to_string),
        )),
        Err(err) => {
            let elsewhere = region_header(&err);
            let e = sdk_error(HEAD_BUCKET, err);
            match (super::status_of(&e), elsewhere) {
                (Some(404), _) => Ok(Head::Missing),
                (Some(301), Some(region)) => Err(ProviderError::api(
                    HEAD_BUCKET,
                    301,
                    "PermanentRedirect",
                    format!(
                        "bucket {name} is in region {region}, not {}; set region = \"{region}\" in [providers.aws] (or a provider for that region)",
                        client_region(client)
                    ),
                )),
                _ => Err(e),
            }
        }
    }
}

/// Sends one setting.
pub async fn send_setting(
    client: &Client,
    name: &str,
    setting: &Setting,
) -> Result<(), ProviderError> {
    match setting {
        Setting::Tags(tags) => client
            .put_bucket_tagging()
            .bucket(name)
            .tagging(tagging(tags)?)
            .send()
            .await
            .map(drop)
            .map_err(|e| sdk_error(PUT_TAGGING, e)),
        Setting::Versioning(on) => client
            .put_bucket_versioning()
            .bucket(name)
            .versioning_configuration(
                s3t::VersioningConfiguration::builder()
                    .status(if *on {
                        s3t::BucketVersioningStatus::Enabled
                    } else {
                        // Versioning once enabled can only be suspended: existing
                        // versions stay, new writes get a null version id.
                        s3t::BucketVersioningStatus::Suspended
                    })
                    .build(),
            )
            .send()
            .await
            .map(drop)
            .map_err(|e| sdk_error(PUT_VERSIONING, e)),
        Setting::Encryption(e) => client
            .put_bucket_encryption()
            .bucket(name)
            .server_side_encryption_configuration(encryption_configuration(e)?)
            .send()
            .await
            .map(drop)
            .map_err(|e| sdk_error(PUT_ENCRYPTION, e)),
        Setting::PublicAccessBlock(p) => client
            .put_public_access_block()
            .bucket(name)
            .public_access_block_configuration(public_access_block_configuration(p))
            .send()
            .await
            .map(drop)
            .map_err(|e| sdk_error(PUT_PUBLIC_ACCESS_BLOCK, e)),
        Setting::Lifecycle(rules) if rules.is_empty() => client
            .delete_bucket_lifecycle()
            .bucket(name)
            .send()
            .await
            .map(drop)
            .map_err(|e| sdk_error(DELETE_LIFECYCLE, e)),
        Setting::Lifecycle(rules) => client
            .put_bucket_lifecycle_configuration()
            .bucket(name)
            .lifecycle_configuration(lifecycle_configuration(rules)?)
            .send()
            .await
            .map(drop)
            .map_err(|e| sdk_error(PUT_LIFECYCLE, e)),
    }
}

/// Sends a setting to a bucket just created, retrying while S3 does not know the bucket
/// everywhere yet (NoSuchBucket for a short while after CreateBucket).
async fn send_to_new_bucket(
    ctx: &Ctx,
    client: &Client,
    name: &str,
    setting: &Setting,
) -> Result<(), ProviderError> {
    let started = Instant::now();
    let mut delay = Duration::from_millis(200);
    loop {
        match send_setting(client, name, setting).await {
            Err(e) if is_not_found(&e) && started.elapsed() < PROPAGATION => {
                ctx.progress(&format!("waiting for bucket {name} to propagate"));
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
            other => return other,
        }
    }
}

/// The error for a name another account holds.
fn taken(name: &str, detail: &str) -> ProviderError {
    ProviderError::api(
        CREATE_BUCKET,
        409,
        "BucketAlreadyExists",
        format!("the bucket name {name} is taken{detail}; bucket names are global across all AWS accounts, pick another name"),
    )
}

/// Reads the whole bucket as a spec, or `None` when it is gone.
async fn read_live(
    client: &Client,
    name: &str,
    prior: Option<&Spec>,
) -> Result<Option<Live<S3Bucket>>, ProviderError> {
    // The lifecycle configuration is read only when the last apply set rules (or on
    // import, where nothing is known): rules added outside terrain to a bucket without
    // any are not noticed, which saves a request per bucket on every refresh.
    let want_lifecycle = prior.is_none_or(|p| !p.lifecycle.is_empty());
    let lifecycle = async {
        if want_lifecycle {
            Some(
                client
                    .get_bucket_lifecycle_configuration()
                    .bucket(name)
                    .send()
                    .await,
            )
        } else {
            None
        }
    };
    let (head, versioning, encryption, access, tagging, lifecycle) = futures::join!(
        head(client, name),
        client.get_bucket_versioning().bucket(name).send(),
        client.get_bucket_encryption().bucket(name).send(),
        client.get_public_access_block().bucket(name).send(),
        client.get_bucket_tagging().bucket(name).send(),
        lifecycle,
    );
    let region = match head? {
        Head::Missing => return Ok(None),
        Head::Ours(region) => region,
    };
    // A bucket deleted between HeadBucket and the other reads is gone too.
    let gone = |e: &ProviderError| code_of(e) == "NoSuchBucket";
    let versioning = match versioning.map_err(|e| sdk_error(GET_VERSIONING, e)) {
        Ok(out) => out.status() == Some(&s3t::BucketVersioningStatus::Enabled),
        Err(e) if gone(&e) => return Ok(None),
        Err(e) => return Err(e),
    };
    let encryption = match encryption.map_err(|e| sdk_error(GET_ENCRYPTION, e)) {
        Ok(out) => encryption_of(out.server_side_encryption_configuration()),
        Err(e) if code_of(&e) == "ServerSideEncryptionConfigurationNotFoundError" => {
            encryption_of(None)
        }
        Err(e) if gone(&e) => return Ok(None),
        Err(e) => return Err(e),
    };
    let public_access_block = match access.map_err(|e| sdk_error(GET_PUBLIC_ACCESS_BLOCK, e)) {
        Ok(out) => public_access_block_of(out.public_access_block_configuration()),
        Err(e) if code_of(&e) == "NoSuchPublicAccessBlockConfiguration" => {
            public_access_block_of(None)
        }
        Err(e) if gone(&e) => return Ok(None),
        Err(e) => return Err(e),
    };
    let tags = match tagging.map_err(|e| sdk_error(GET_TAGGING, e)) {
        Ok(out) => tags_of(out.tag_set()),
        Err(e) if code_of(&e) == "NoSuchTagSet" => BTreeMap::new(),
        Err(e) if gone(&e) => return Ok(None),
        Err(e) => return Err(e),
    };
    let lifecycle = match lifecycle.map(|r| r.map_err(|e| sdk_error(GET_LIFECYCLE, e))) {
        None => Vec::new(),
        Some(Ok(out)) => lifecycle_of(out.rules()),
        Some(Err(e)) if code_of(&e) == "NoSuchLifecycleConfiguration" => Vec::new(),
        Some(Err(e)) if gone(&e) => return Ok(None),
        Some(Err(e)) => return Err(e),
    };
    Ok(Some(Live {
        id: name.to_string(),
        spec: Spec {
            name: name.to_string(),
            versioning,
            encryption,
            public_access_block,
            lifecycle,
            tags: user_tags(&tags),
            // terrain's own setting, not the bucket's.
            force_destroy: prior.is_some_and(|p| p.force_destroy),
        },
        outputs: outputs_of(name, &region),
    }))
}

/// Takes over a bucket this account already owns when its tags say `ctx.address` made
/// it (an earlier create whose answer was lost), bringing its settings to `spec`.
async fn adopt(ctx: &Ctx, client: &Client, spec: &Spec) -> Result<Live<S3Bucket>, ProviderError> {
    let tags = match client.get_bucket_tagging().bucket(&spec.name).send().await {
        Ok(out) => tags_of(out.tag_set()),
        Err(e) => {
            let e = sdk_error(GET_TAGGING, e);
            if code_of(&e) != "NoSuchTagSet" {
                return Err(e);
            }
            BTreeMap::new()
        }
    };
    // A create of this address that was killed between CreateBucket and its tagging
    // left the bucket with no tags at all; the journal says it is this address's.
    let interrupted = tags.is_empty() && ctx.resumes() == Some(spec.name.as_str());
    if !is_ours(&tags, &ctx.address) && !interrupted {
        return Err(not_ours(
            CREATE_BUCKET,
            "bucket",
            &spec.name,
            S3Bucket::KIND,
            &ctx.address,
        ));
    }
    ctx.progress("adopting the bucket an earlier attempt created");
    let live = read_live(client, &spec.name, None)
        .await?
        .ok_or_else(|| gone_error(GET_TAGGING, &spec.name))?;
    let mut settings = update_settings(&live.spec, spec, &ctx.address);
    if interrupted && !settings.iter().any(|s| matches!(s, Setting::Tags(_))) {
        // The marks the interrupted create never wrote.
        settings.push(Setting::Tags(tags_with_ours(&spec.tags, &ctx.address)));
    }
    for setting in settings {
        send_to_new_bucket(ctx, client, &spec.name, &setting).await?;
    }
    Ok(Live {
        id: spec.name.clone(),
        spec: spec.clone(),
        outputs: live.outputs,
    })
}

fn gone_error(call: &str, name: &str) -> ProviderError {
    ProviderError::api(
        call,
        404,
        "NoSuchBucket",
        format!("bucket {name} is gone; it was deleted outside terrain, plan again to recreate it"),
    )
}

/// The object versions and delete markers on one ListObjectVersions page, and whether
/// more pages follow.
async fn count_first_page(client: &Client, name: &str) -> Result<(usize, bool), ProviderError> {
    let page = client
        .list_object_versions()
        .bucket(name)
        .max_keys(BATCH)
        .send()
        .await
        .map_err(|e| sdk_error(LIST_VERSIONS, e))?;
    Ok((
        page.versions().len() + page.delete_markers().len(),
        page.is_truncated().unwrap_or(false),
    ))
}

/// The error for destroying a bucket that still holds objects without `force_destroy`.
pub fn not_empty_error(name: &str, count: usize, more: bool) -> ProviderError {
    let how_many = if more {
        format!("at least {count}")
    } else {
        count.to_string()
    };
    ProviderError::api(
        DELETE_BUCKET,
        409,
        "BucketNotEmpty",
        format!("bucket {name} still holds objects ({how_many} object versions and delete markers); delete them first, or set force_destroy = true on the bucket to let destroy delete them"),
    )
}

/// Deletes every object version and delete marker, page by page; returns how many.
async fn empty(ctx: &Ctx, client: &Client, name: &str) -> Result<usize, ProviderError> {
    let mut deleted = 0;
    let mut markers: (Option<String>, Option<String>) = (None, None);
    // A full pass that found objects is followed by another from the start, catching
    // what was written meanwhile; bounded so a bucket that keeps refilling cannot hold
    // destroy forever.
    let mut found_this_pass = false;
    for _page in 0..100_000 {
        let page = client
            .list_object_versions()
            .bucket(name)
            .max_keys(BATCH)
            .set_key_marker(markers.0.clone())
            .set_version_id_marker(markers.1.clone())
            .send()
            .await
            .map_err(|e| sdk_error(LIST_VERSIONS, e))?;
        let ids = page
            .versions()
            .iter()
            .map(|v| (v.key(), v.version_id()))
            .chain(
                page.delete_markers()
                    .iter()
                    .map(|m| (m.key(), m.version_id())),
            )
            .filter_map(|(k, v)| {
                k.map(|k| {
                    built(
                        DELETE_OBJECTS,
                        s3t::ObjectIdentifier::builder()
                            .key(k)
                            .set_version_id(v.map(str::to_string))
                            .build(),
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        if !ids.is_empty() {
            found_this_pass = true;
            let n = ids.len();
            let out = client
                .delete_objects()
                .bucket(name)
                .delete(built(
                    DELETE_OBJECTS,
                    s3t::Delete::builder()
                        .set_objects(Some(ids))
                        .quiet(true)
                        .build(),
                )?)
                .send()
                .await
                .map_err(|e| sdk_error(DELETE_OBJECTS, e))?;
            if let Some(first) = out.errors().first() {
                return Err(ProviderError::api(
                    DELETE_OBJECTS,
                    0,
                    first.code().unwrap_or_default(),
                    format!(
                        "could not delete {} of {n} objects in bucket {name}, first {:?} version {:?}: {}",
                        out.errors().len(),
                        first.key().unwrap_or_default(),
                        first.version_id().unwrap_or_default(),
                        first.message().unwrap_or_default()
                    ),
                ));
            }
            deleted += n;
            ctx.progress(&format!("deleted {deleted} object versions"));
        }
        if page.is_truncated().unwrap_or(false) {
            markers = (
                page.next_key_marker().map(str::to_string),
                page.next_version_id_marker().map(str::to_string),
            );
        } else if found_this_pass {
            markers = (None, None);
            found_this_pass = false;
        } else {
            return Ok(deleted);
        }
    }
    Err(ProviderError::api(
        LIST_VERSIONS,
        409,
        "BucketNotEmpty",
        format!("bucket {name} keeps receiving objects while destroy empties it"),
    ))
}

#[async_trait]
impl Kind for S3Bucket {
    type Spec = Spec;
    type Outputs = Outputs;
    const KIND: &'static str = "s3_bucket";
    const PROVIDER: &'static str = "aws";
    const WRITES: crate::protocol::Writes = crate::protocol::Writes::FromId;
    const BILLS: bool = true;

    fn validate(spec: &Spec, config: &Value) -> Vec<Invalid> {
        let mut out = Vec::new();
        if let Err(m) = check_bucket_name(&spec.name) {
            out.push(Invalid::at("name", m));
        }
        check_encryption(&spec.encryption, &mut out);
        // The bucket is made in the provider's region, and S3 takes only a KMS key of
        // that region.
        let kms = spec.encryption.algorithm.starts_with("aws:kms");
        if let Some(key) = spec.encryption.kms_key_id.as_deref().filter(|_| kms) {
            let region = config::catalog_region(config);
            if let Err(m) = super::catalog::check_kms_key(key, region) {
                out.push(Invalid::at("encryption.kms_key_id", m));
            }
        }
        check_lifecycle(&spec.lifecycle, &mut out);
        check_tags(&spec.tags, &mut out);
        out
    }

    /// Storage by class, per GiB-month of what is stored (not known before); objects
    /// land in STANDARD until a lifecycle rule moves them.
    fn usage(_spec: &Value, config: &Value, _peers: &[crate::Peer]) -> Vec<crate::Usage> {
        let region = crate::usage::known(&config["region"]).unwrap_or_default();
        vec![crate::Usage::fixed(
            "s3.storage",
            "STANDARD",
            region,
            0.0,
            "STANDARD storage, by what is stored".to_string(),
        )]
    }

    fn planned_id(spec: &Spec, _config: &Value) -> Option<String> {
        Some(spec.name.clone())
    }

    async fn read(
        &self,
        ctx: &Ctx,
        id: &str,
        prior: Option<&Spec>,
    ) -> Result<Option<Live<Self>>, ProviderError> {
        read_live(&config::s3(ctx).await?, id, prior).await
    }

    async fn create(&self, ctx: &Ctx, spec: &Spec) -> Result<Live<Self>, ProviderError> {
        let client = config::s3(ctx).await?;
        let region = client_region(&client);
        if region == US_EAST_1 {
            // For legacy compatibility CreateBucket in us-east-1 answers 200 for a bucket
            // this account already owns, instead of BucketAlreadyOwnedByYou: look first,
            // so an existing bucket is never silently taken over.
            match head(&client, &spec.name).await {
                Ok(Head::Missing) => {}
                Ok(Head::Ours(_)) => return adopt(ctx, &client, spec).await,
                Err(e) if super::status_of(&e) == Some(403) => {
                    return Err(taken(&spec.name, " by another AWS account"))
                }
                Err(e) => return Err(e),
            }
        }
        let mut create = client.create_bucket().bucket(&spec.name);
        if region != US_EAST_1 {
            create = create.create_bucket_configuration(
                s3t::CreateBucketConfiguration::builder()
                    .location_constraint(s3t::BucketLocationConstraint::from(region.as_str()))
                    .build(),
            );
        }
        if let Err(e) = create.send().await {
            let e = sdk_error(CREATE_BUCKET, e);
            return match code_of(&e) {
                "BucketAlreadyOwnedByYou" => adopt(ctx, &client, spec).await,
                "BucketAlreadyExists" => Err(taken(&spec.name, " by another AWS account")),
                _ => Err(e),
            };
        }
        for setting in create_settings(spec, &ctx.address) {
            send_to_new_bucket(ctx, &client, &spec.name, &setting).await?;
        }
        Ok(Live {
            id: spec.name.clone(),
            spec: spec.clone(),
            outputs: outputs_of(&spec.name, &region),
        })
    }

    async fn update(
        &self,
        ctx: &Ctx,
        id: &str,
        prior: &Spec,
        spec: &Spec,
    ) -> Result<Live<Self>, ProviderError> {
        let client = config::s3(ctx).await?;
        // One at a time: S3 may answer OperationAborted to concurrent changes of one
        // bucket's configuration.
        for setting in update_settings(prior, spec, &ctx.address) {
            send_setting(&client, id, &setting).await.map_err(|e| {
                if code_of(&e) == "NoSuchBucket" {
                    gone_error(call_of(&e), id)
                } else {
                    e
                }
            })?;
        }
        Ok(Live {
            id: id.to_string(),
            spec: spec.clone(),
            outputs: outputs_of(id, &client_region(&client)),
        })
    }

    async fn delete(&self, ctx: &Ctx, id: &str, prior: Option<&Spec>) -> Result<(), ProviderError> {
        let client = config::s3(ctx).await?;
        let force = prior.is_some_and(|p| p.force_destroy);
        // Try the delete first: an empty bucket costs one request, force or not.
        for _attempt in 0..3 {
            let err = match client.delete_bucket().bucket(id).send().await {
                Ok(_) => return Ok(()),
                Err(e) => sdk_error(DELETE_BUCKET, e),
            };
            if code_of(&err) == "NoSuchBucket" || super::status_of(&err) == Some(404) {
                return Ok(());
            }
            if code_of(&err) != "BucketNotEmpty" {
                return Err(err);
            }
            if !force {
                let (count, more) = count_first_page(&client, id).await?;
                return Err(not_empty_error(id, count, more));
            }
            empty(ctx, &client, id).await?;
        }
        Err(ProviderError::api(
            DELETE_BUCKET,
            409,
            "BucketNotEmpty",
            format!("bucket {id} keeps receiving objects while destroy empties it"),
        ))
    }
}

fn call_of(e: &ProviderError) -> &str {
    match e {
        ProviderError::Api { call, .. } => call,
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::schema_mismatches;
    use serde_json::json;

    fn rule(id: &str) -> LifecycleRule {
        LifecycleRule {
            id: id.into(),
            prefix: "tmp/".into(),
            enabled: true,
            expiration_days: Some(30),
            noncurrent_expiration_days: Some(7),
            abort_incomplete_upload_days: Some(2),
        }
    }

    fn base() -> Spec {
        Spec {
            name: "ml-datasets-prod".into(),
            versioning: true,
            encryption: Encryption {
                algorithm: "aws:kms".into(),
                kms_key_id: Some("alias/ml".into()),
                bucket_key: true,
            },
            public_access_block: PublicAccessBlock {
                block_public_policy: false,
                ..PublicAccessBlock::default()
            },
            lifecycle: vec![rule("tmp")],
            tags: BTreeMap::from([("team".to_string(), "ml".to_string())]),
            force_destroy: true,
        }
    }

    fn minimal(name: &str) -> Spec {
        serde_json::from_value(json!({"name": name})).expect("minimal spec")
    }

    #[test]
    fn schema_matches_spec_and_outputs() {
        assert_eq!(
            schema_mismatches::<S3Bucket>(&base(), &outputs_of("b", "us-west-2")),
            Vec::<String>::new()
        );
        // Nested defaults too: a spec that leaves the tables out reads like one that
        // spells out their defaults.
        let filled = S3Bucket::schema()
            .with_defaults(&json!({"name": "b", "lifecycle": [{"id": "x", "expiration_days": 1}]}));
        let typed: Spec = serde_json::from_value(filled).expect("decodes");
        assert_eq!(typed.encryption, Encryption::default());
        assert_eq!(typed.public_access_block, PublicAccessBlock::all(true));
        assert_eq!(typed.lifecycle[0].prefix, "");
        assert!(typed.lifecycle[0].enabled);
    }

    #[test]
    fn bucket_names_follow_the_s3_rules() {
        let good = [
            "abc",
            "ml-datasets-2024",
            "my.bucket.name",
            "1bucket",
            "a".repeat(63).as_str(),
            "192.168.5.4.x",
            "xn-ok",
            "bucket-s3alias-not-at-end",
        ]
        .map(str::to_string);
        for name in &good {
            assert_eq!(check_bucket_name(name), Ok(()), "{name}");
        }
        let bad: &[(&str, &str)] = &[
            ("ab", "3 to 63"),
            (&"a".repeat(64), "3 to 63"),
            ("My-Bucket", "'M' is not allowed"),
            ("my_bucket", "'_' is not allowed"),
            ("-bucket", "start and end"),
            ("bucket-", "start and end"),
            (".bucket", "start and end"),
            ("my..bucket", "two adjacent dots"),
            ("192.168.5.4", "IP address"),
            ("xn--bucket", "prefix \"xn--\""),
            ("sthree-bucket", "prefix \"sthree-\""),
            ("amzn-s3-demo-bucket", "prefix \"amzn-s3-demo-\""),
            ("bucket-s3alias", "suffix \"-s3alias\""),
            ("bucket--ol-s3", "suffix \"--ol-s3\""),
            ("bucket.mrap", "suffix \".mrap\""),
            ("bucket--x-s3", "suffix \"--x-s3\""),
            ("bucket--table-s3", "suffix \"--table-s3\""),
        ];
        for (name, why) in bad {
            let err = check_bucket_name(name).expect_err(name);
            assert!(err.contains(why), "{name}: {err}");
        }
    }

    fn problems(spec: &Spec) -> Vec<(String, String)> {
        S3Bucket::validate(spec, &Value::Null)
            .into_iter()
            .map(|p| (p.path.join("."), p.message))
            .collect()
    }

    #[test]
    fn encryption_rules_are_checked_offline() {
        assert!(problems(&base()).is_empty());
        let with = |algorithm: &str, kms: Option<&str>, bucket_key: bool| Spec {
            encryption: Encryption {
                algorithm: algorithm.into(),
                kms_key_id: kms.map(str::to_string),
                bucket_key,
            },
            ..minimal("b-b")
        };
        assert!(
            problems(&with("aws:kms", None, false)).is_empty(),
            "AWS managed key"
        );
        assert!(problems(&with("aws:kms:dsse", Some("k"), false)).is_empty());
        assert!(problems(&with("AES256", None, false)).is_empty());
        let cases = [
            (
                with("AES256", Some("k"), false),
                "encryption.kms_key_id",
                "aws:kms",
            ),
            (
                with("aws:kms", Some(""), false),
                "encryption.kms_key_id",
                "empty",
            ),
            (
                with("aws:kms:dsse", None, true),
                "encryption.bucket_key",
                "not supported",
            ),
            (
                with("SSE-C", None, false),
                "encryption.algorithm",
                "AES256, aws:kms, aws:kms:dsse",
            ),
        ];
        for (spec, path, says) in cases {
            let got = problems(&spec);
            assert_eq!(got.len(), 1, "{got:?}");
            assert_eq!(got[0].0, path);
            assert!(got[0].1.contains(says), "{}", got[0].1);
        }
    }

    #[test]
    fn kms_keys_are_in_the_bucket_region() {
        let with_key = |key: &str| Spec {
            encryption: Encryption {
                algorithm: "aws:kms".into(),
                kms_key_id: Some(key.into()),
                bucket_key: true,
            },
            ..minimal("b-b")
        };
        let in_region = |spec: &Spec, region: &str| -> Vec<(String, String)> {
            S3Bucket::validate(spec, &json!({"region": region}))
                .into_iter()
                .map(|p| (p.path.join("."), p.message))
                .collect()
        };
        let key =
            with_key("arn:aws:kms:eu-west-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab");
        assert!(in_region(&key, "eu-west-1").is_empty());
        assert!(
            problems(&key).is_empty(),
            "no provider region: nothing to compare"
        );
        let elsewhere = in_region(&key, "us-east-1");
        assert!(
            matches!(elsewhere.as_slice(), [(p, m)] if p == "encryption.kms_key_id" && m.contains("the key is in eu-west-1 but the bucket would be made in us-east-1")),
            "{elsewhere:?}"
        );
        let made_up = problems(&with_key("arn:aws:kms:eu-west-9:123456789012:alias/ml"));
        assert!(
            matches!(made_up.as_slice(), [(p, m)] if p == "encryption.kms_key_id" && m.contains("`eu-west-9` is not an AWS region; did you mean `eu-west-1`")),
            "{made_up:?}"
        );
        assert!(in_region(&with_key("alias/ml"), "us-east-1").is_empty());
    }

    #[test]
    fn lifecycle_rules_need_an_action_and_unique_ids() {
        let none = LifecycleRule {
            expiration_days: None,
            noncurrent_expiration_days: None,
            abort_incomplete_upload_days: None,
            ..rule("idle")
        };
        let zero = LifecycleRule {
            expiration_days: Some(0),
            ..rule("zero")
        };
        let spec = Spec {
            lifecycle: vec![rule("a"), rule("a"), none, zero, rule("")],
            ..minimal("b-b")
        };
        let got: Vec<String> = problems(&spec).into_iter().map(|(p, _)| p).collect();
        assert_eq!(
            got,
            [
                "lifecycle.1.id",
                "lifecycle.2",
                "lifecycle.3.expiration_days",
                "lifecycle.4.id"
            ]
        );
    }

    #[test]
    fn tags_leave_room_for_terrains_own() {
        let mut tags: BTreeMap<String, String> = (0..49)
            .map(|i| (format!("k{i}"), "v".to_string()))
            .collect();
        let spec = Spec {
            tags: tags.clone(),
            ..minimal("b-b")
        };
        assert!(problems(&spec)[0].1.contains("at most 48"));
        tags = BTreeMap::from([
            ("aws:cost".to_string(), "x".to_string()),
            ("managed-by".to_string(), "me".to_string()),
        ]);
        let got = problems(&Spec {
            tags,
            ..minimal("b-b")
        });
        assert_eq!(got.len(), 2, "{got:?}");
    }

    #[test]
    fn create_sends_tags_public_access_and_what_differs_from_new_bucket_defaults() {
        let plain = create_settings(&minimal("b-b"), "s3_bucket.data");
        assert_eq!(
            plain,
            vec![
                Setting::Tags(BTreeMap::from([
                    ("managed-by".to_string(), "terrain".to_string()),
                    ("terrain-address".to_string(), "s3_bucket.data".to_string()),
                ])),
                Setting::PublicAccessBlock(PublicAccessBlock::default()),
            ]
        );
        let full = create_settings(&base(), "s3_bucket.data");
        let kinds: Vec<&str> = full
            .iter()
            .map(|s| match s {
                Setting::Tags(_) => "tags",
                Setting::Versioning(_) => "versioning",
                Setting::Encryption(_) => "encryption",
                Setting::PublicAccessBlock(_) => "public_access_block",
                Setting::Lifecycle(_) => "lifecycle",
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "tags",
                "public_access_block",
                "versioning",
                "encryption",
                "lifecycle"
            ]
        );
        // AES256 with a bucket key is not the default and is sent.
        let keyed = Spec {
            encryption: Encryption {
                bucket_key: true,
                ..Encryption::default()
            },
            ..minimal("b-b")
        };
        assert_eq!(create_settings(&keyed, "a.b").len(), 3);
    }

    #[test]
    fn update_sends_only_the_changed_settings() {
        assert!(update_settings(&base(), &base(), "a.b").is_empty());
        let next = Spec {
            versioning: false,
            lifecycle: vec![],
            force_destroy: false,
            tags: BTreeMap::new(),
            ..base()
        };
        assert_eq!(
            update_settings(&base(), &next, "s3_bucket.data"),
            vec![
                Setting::Tags(tags_with_ours(&BTreeMap::new(), "s3_bucket.data")),
                Setting::Versioning(false),
                Setting::Lifecycle(vec![]),
            ]
        );
    }

    #[test]
    fn lifecycle_rules_map_to_the_api_and_back() -> Result<(), ProviderError> {
        let rules = vec![
            rule("tmp"),
            LifecycleRule {
                id: "uploads".into(),
                prefix: String::new(),
                enabled: false,
                expiration_days: None,
                noncurrent_expiration_days: None,
                abort_incomplete_upload_days: Some(3),
            },
        ];
        let config = lifecycle_configuration(&rules)?;
        let api = config.rules();
        assert_eq!(api.len(), 2);
        assert_eq!(api[0].id(), Some("tmp"));
        assert_eq!(api[0].filter().and_then(|f| f.prefix()), Some("tmp/"));
        assert_eq!(api[0].status(), &s3t::ExpirationStatus::Enabled);
        assert_eq!(api[0].expiration().and_then(|e| e.days()), Some(30));
        assert_eq!(
            api[0]
                .noncurrent_version_expiration()
                .and_then(|e| e.noncurrent_days()),
            Some(7)
        );
        assert_eq!(api[1].status(), &s3t::ExpirationStatus::Disabled);
        assert!(api[1].expiration().is_none());
        assert_eq!(
            api[1]
                .abort_incomplete_multipart_upload()
                .and_then(|a| a.days_after_initiation()),
            Some(3)
        );
        assert_eq!(lifecycle_of(api), rules);
        Ok(())
    }

    #[test]
    fn live_settings_read_back_as_the_spec() -> Result<(), ProviderError> {
        let s = base();
        let enc = encryption_configuration(&s.encryption)?;
        assert_eq!(encryption_of(Some(&enc)), s.encryption);
        assert_eq!(encryption_of(None), Encryption::default());
        let pab = public_access_block_configuration(&s.public_access_block);
        assert_eq!(public_access_block_of(Some(&pab)), s.public_access_block);
        assert_eq!(public_access_block_of(None), PublicAccessBlock::all(false));
        let tagged = tagging(&tags_with_ours(&s.tags, "s3_bucket.data"))?;
        let live = tags_of(tagged.tag_set());
        assert!(is_ours(&live, "s3_bucket.data"));
        assert_eq!(user_tags(&live), s.tags);
        Ok(())
    }

    #[test]
    fn outputs_name_the_bucket_in_its_partition() {
        assert_eq!(
            outputs_of("data", "eu-west-1"),
            Outputs {
                arn: "arn:aws:s3:::data".into(),
                region: "eu-west-1".into(),
                url: "s3://data".into(),
                domain_name: "data.s3.eu-west-1.amazonaws.com".into(),
            }
        );
        assert_eq!(outputs_of("d", "cn-north-1").arn, "arn:aws-cn:s3:::d");
        assert_eq!(
            outputs_of("d", "cn-north-1").domain_name,
            "d.s3.cn-north-1.amazonaws.com.cn"
        );
    }

    #[test]
    fn not_empty_error_says_how_many_and_the_remedy() {
        let e = not_empty_error("data", 1000, true).to_string();
        assert!(
            e.starts_with("s3:DeleteBucket failed: 409 BucketNotEmpty"),
            "{e}"
        );
        assert!(e.contains("at least 1000"), "{e}");
        assert!(e.contains("force_destroy = true"), "{e}");
        assert!(not_empty_error("data", 3, false)
            .to_string()
            .contains("(3 object"));
    }

    #[test]
    fn planned_id_is_the_name() {
        assert_eq!(
            S3Bucket::planned_id(&base(), &Value::Null).as_deref(),
            Some("ml-datasets-prod")
        );
    }
}
