//! Amazon S3 (REST-XML, path-style addressing: `/{bucket}` and `/{bucket}/{key…}`):
//! buckets with their region, versioning, default encryption, public access block,
//! lifecycle rules and tags; objects with versions and delete markers, tags, conditional
//! writes and reads, ranges, checksums and `aws-chunked` bodies; copies; multipart
//! uploads (parts uploaded or copied from a range of another object, then completed
//! into one object with S3's `-N` ETag and composite or full-object checksum); and the
//! list operations with delimiters and pagination. Element names, status codes, headers
//! and error codes follow the botocore model (`s3/2006-03-01/service-2.json`).
//!
//! Where S3 changed over time, today's behaviour is emulated: new buckets are encrypted
//! with SSE-S3 and block all public access (since 2023); creating a bucket you already
//! own answers 409 `BucketAlreadyOwnedByYou` in every region (legacy us-east-1 answered
//! 200); a request signed for another region than the bucket's answers 301
//! `PermanentRedirect` naming the bucket's region, as a regional endpoint does.
//! Lifecycle rules are validated and stored but never run; checksums of the algorithms
//! the sandbox can compute (MD5, CRC32, CRC32C, CRC64NVME, SHA-1, SHA-256) are verified,
//! the others stored as sent. Objects persist with the sandbox state, their bytes base64
//! in the state file like Cloud Storage objects, and so do the parts of multipart uploads
//! in progress (an upload is part of its bucket and goes with it).
//!
//! This file routes a request to its operation and owns what the operations share: the
//! persisted model (buckets, object versions, multipart uploads and their parts), the
//! lookup of an addressed bucket and the error answers. The operations live by seam:
//! `bucket.rs` creates, deletes, lists and locates buckets; `bucket_config.rs` holds their
//! versioning, default encryption, public access block and lifecycle configurations;
//! `tagging.rs` the tags of buckets and objects; `objects.rs` writes, reads and deletes
//! objects (DeleteObjects too); `copy.rs` copies them; `listing.rs` lists them and their
//! versions; `multipart.rs` runs multipart uploads. Below those, `body.rs` reads request
//! bodies (`aws-chunked` framing, integrity checks, configuration documents), `digest.rs`
//! computes checksums and hashes, and `format.rs` makes IDs, tokens, ETags, dates and XML
//! answers.

mod body;
mod bucket;
mod bucket_config;
mod copy;
mod digest;
mod format;
mod listing;
mod multipart;
mod objects;
mod tagging;
#[cfg(test)]
mod testkit;

use std::collections::BTreeMap;

use axum::http::Method;
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::xml::Element;
use super::{AwsCtx, AwsError, AwsRequest, AwsResponse, Service, ACCOUNT};
use crate::common::ids::random_hex;
use crate::http::percent_decode;
use bucket_config::{
    get_encryption, get_lifecycle, get_public_access_block, get_versioning, put_encryption,
    put_lifecycle, put_public_access_block, put_versioning,
};
use format::checksum_element;
use listing::{current_objects, list_object_versions, list_objects_v1, list_objects_v2};
use multipart::{create_multipart_upload, list_multipart_uploads};
use objects::{delete_object, delete_objects, get_object, put_object};
use tagging::{
    delete_object_tagging, get_object_tagging, get_tagging, put_object_tagging, put_tagging,
};

/// The namespace of every S3 result document.
const NS: &str = "http://s3.amazonaws.com/doc/2006-03-01/";
const MAX_KEY_BYTES: usize = 1024;
const MALFORMED_XML: &str =
    "The XML you provided was not well-formed or did not validate against our published schema";

/// Default encryption algorithms a bucket or object may use (`aws:fsx` and `aws:backup`
/// in the model's enum belong to other services' storage).
const SSE_ALGORITHMS: &[&str] = &["AES256", "aws:kms", "aws:kms:dsse"];

/// Bucket subresources S3 has and the sandbox does not emulate: asking for one is a 501,
/// never a silent fall-through to ListObjects or CreateBucket.
const BUCKET_SUBRESOURCES_NOT_EMULATED: &[&str] = &[
    "abac",
    "accelerate",
    "acl",
    "analytics",
    "cors",
    "intelligent-tiering",
    "inventory",
    "logging",
    "metadataConfiguration",
    "metadataTable",
    "metrics",
    "notification",
    "object-lock",
    "ownershipControls",
    "policy",
    "policyStatus",
    "replication",
    "requestPayment",
    "session",
    "website",
];

const OBJECT_SUBRESOURCES_NOT_EMULATED: &[&str] = &[
    "acl",
    "attributes",
    "legal-hold",
    "renameObject",
    "restore",
    "retention",
    "select",
    "torrent",
];

/// The bucket subresources the sandbox serves.
const BUCKET_SUBRESOURCES: &[&str] = &[
    "delete",
    "encryption",
    "lifecycle",
    "location",
    "publicAccessBlock",
    "tagging",
    "uploads",
    "versioning",
    "versions",
];

/// Every emulated bucket and object.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub(crate) struct S3 {
    #[serde(default)]
    buckets: BTreeMap<String, Bucket>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Bucket {
    region: String,
    /// What GetBucketLocation answers: none in us-east-1, `EU` when created with that
    /// alias, the region otherwise.
    #[serde(default)]
    location_constraint: Option<String>,
    created: DateTime<Utc>,
    /// None until versioning is first configured; a bucket never returns to that state.
    #[serde(default)]
    versioning: Option<Versioning>,
    #[serde(default)]
    mfa_delete: Option<String>,
    #[serde(default)]
    encryption: Encryption,
    #[serde(default)]
    public_access_block: Option<PublicAccessBlock>,
    /// The `LifecycleConfiguration` document as validated (rule IDs filled in).
    #[serde(default)]
    lifecycle: Option<Element>,
    #[serde(default)]
    transition_minimum_size: Option<String>,
    /// Empty when the bucket has no tag set.
    #[serde(default)]
    tags: Vec<(String, String)>,
    /// Every version of every key, oldest first; the last one is current.
    #[serde(default)]
    objects: BTreeMap<String, Vec<Version>>,
    /// Multipart uploads in progress, by upload ID.
    #[serde(default)]
    uploads: BTreeMap<String, Upload>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
enum Versioning {
    Enabled,
    Suspended,
}

impl Versioning {
    fn as_str(self) -> &'static str {
        match self {
            Versioning::Enabled => "Enabled",
            Versioning::Suspended => "Suspended",
        }
    }
}

/// A bucket's default encryption (`ServerSideEncryptionConfiguration` with one rule).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Encryption {
    algorithm: String,
    #[serde(default)]
    kms_key_id: Option<String>,
    #[serde(default)]
    bucket_key_enabled: bool,
    #[serde(default)]
    blocked_types: Vec<String>,
}

impl Default for Encryption {
    /// SSE-S3, what every bucket has had since January 2023.
    fn default() -> Self {
        Encryption {
            algorithm: "AES256".into(),
            kms_key_id: None,
            bucket_key_enabled: false,
            blocked_types: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PublicAccessBlock {
    block_public_acls: bool,
    ignore_public_acls: bool,
    block_public_policy: bool,
    restrict_public_buckets: bool,
}

impl PublicAccessBlock {
    /// What new buckets get since April 2023.
    const ALL: PublicAccessBlock = PublicAccessBlock {
        block_public_acls: true,
        ignore_public_acls: true,
        block_public_policy: true,
        restrict_public_buckets: true,
    };

    const FIELDS: [&'static str; 4] = [
        "BlockPublicAcls",
        "IgnorePublicAcls",
        "BlockPublicPolicy",
        "RestrictPublicBuckets",
    ];

    fn values(self) -> [bool; 4] {
        [
            self.block_public_acls,
            self.ignore_public_acls,
            self.block_public_policy,
            self.restrict_public_buckets,
        ]
    }
}

/// How an object version is encrypted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Sse {
    algorithm: String,
    /// The key's ARN, for SSE-KMS and DSSE-KMS.
    #[serde(default)]
    kms_key_id: Option<String>,
    #[serde(default)]
    bucket_key_enabled: bool,
}

/// An `x-amz-checksum-<algorithm>` of an object: the lowercase algorithm and the base64
/// digest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Checksum {
    algorithm: String,
    value: String,
    /// A multipart object's checksum of its part checksums (`…-N`, type `COMPOSITE`)
    /// rather than of its content (`FULL_OBJECT`).
    #[serde(default)]
    composite: bool,
}

impl Checksum {
    /// The `x-amz-checksum-type` / `ChecksumType` of the checksum.
    fn kind(&self) -> &'static str {
        if self.composite {
            "COMPOSITE"
        } else {
            "FULL_OBJECT"
        }
    }

    /// The element naming it in XML answers (`ChecksumCRC32`).
    fn element(&self) -> String {
        checksum_element(&self.algorithm)
    }
}

/// One version of a key: an object, or a delete marker (which has no content).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Version {
    /// `null` for versions written while versioning was never enabled or suspended.
    version_id: String,
    #[serde(default)]
    delete_marker: bool,
    last_modified: DateTime<Utc>,
    /// The MD5 of the content in hex, without quotes.
    #[serde(default)]
    etag: String,
    #[serde(default)]
    size: u64,
    #[serde(default)]
    content_type: String,
    #[serde(default)]
    storage_class: Option<String>,
    /// `objects::STORED_HEADERS` as sent.
    #[serde(default)]
    headers: Vec<(String, String)>,
    /// `x-amz-meta-*` without the prefix.
    #[serde(default)]
    metadata: Vec<(String, String)>,
    #[serde(default)]
    sse: Option<Sse>,
    #[serde(default)]
    checksum: Option<Checksum>,
    /// Object tags, in the order they were set.
    #[serde(default)]
    tags: Vec<(String, String)>,
    /// The content, base64-encoded so the state file stays JSON.
    #[serde(default)]
    data: String,
}

impl Version {
    fn delete_marker(version_id: String, now: DateTime<Utc>) -> Version {
        Version {
            version_id,
            delete_marker: true,
            last_modified: now,
            etag: String::new(),
            size: 0,
            content_type: String::new(),
            storage_class: None,
            headers: Vec::new(),
            metadata: Vec::new(),
            sse: None,
            checksum: None,
            tags: Vec::new(),
            data: String::new(),
        }
    }

    fn bytes(&self) -> Result<Vec<u8>, AwsError> {
        stored_bytes(&self.data)
    }

    fn storage_class(&self) -> &str {
        self.storage_class.as_deref().unwrap_or("STANDARD")
    }
}

/// A multipart upload in progress: the object it becomes, and the parts so far.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Upload {
    key: String,
    initiated: DateTime<Utc>,
    /// The object without its content: type, headers, metadata, storage class,
    /// encryption and tags as CreateMultipartUpload set them.
    object: Version,
    /// `x-amz-checksum-algorithm` (lowercase): every part gets a checksum with it, and
    /// the object one from them.
    #[serde(default)]
    checksum_algorithm: Option<String>,
    /// Whether the object's checksum is of the part checksums (`COMPOSITE`) rather than
    /// of the whole content (`FULL_OBJECT`).
    #[serde(default)]
    composite: bool,
    #[serde(default)]
    parts: BTreeMap<u32, Part>,
}

/// One uploaded part; uploading the same number again replaces it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Part {
    last_modified: DateTime<Utc>,
    /// The MD5 of the part in hex, without quotes.
    etag: String,
    size: u64,
    #[serde(default)]
    checksum: Option<Checksum>,
    /// The content, base64-encoded as object content is.
    data: String,
}

/// Decodes stored (base64) object or part content.
fn stored_bytes(data: &str) -> Result<Vec<u8>, AwsError> {
    B64.decode(data).map_err(|e| {
        AwsError::new(
            500,
            "InternalError",
            format!("the stored object data is corrupt: {e}"),
        )
    })
}

/// An error answer, with the headers S3 sends along with some errors (the region of a
/// bucket addressed in the wrong one, `x-amz-delete-marker` on a deleted key).
struct Fail {
    error: AwsError,
    headers: Vec<(String, String)>,
}

impl From<AwsError> for Fail {
    fn from(error: AwsError) -> Self {
        Fail {
            error,
            headers: Vec::new(),
        }
    }
}

type Outcome = Result<AwsResponse, Fail>;

/// What a request addresses.
#[derive(Debug, PartialEq, Eq)]
enum Target {
    Service,
    Bucket(String),
    Object(String, String),
}

/// Splits a path-style path. The key is everything after the bucket's slash, decoded as
/// a whole, so `a//b` and `dir/` stay as they are.
fn target(path: &str) -> Target {
    let rest = path.strip_prefix('/').unwrap_or(path);
    match rest.split_once('/') {
        None if rest.is_empty() => Target::Service,
        None | Some((_, "")) => Target::Bucket(percent_decode(rest.trim_end_matches('/'))),
        Some((bucket, key)) => Target::Object(percent_decode(bucket), percent_decode(key)),
    }
}

impl S3 {
    /// One line per bucket and current object, for `Sandbox::inventory` (noncurrent
    /// versions and delete markers are part of their bucket, not objects of their own).
    pub(crate) fn inventory(&self, out: &mut Vec<String>) {
        for (name, bucket) in &self.buckets {
            out.push(format!("s3 bucket {name}"));
            for (key, _) in current_objects(bucket) {
                out.push(format!("s3 object {name}/{key}"));
            }
        }
    }

    pub(crate) fn handle(
        &mut self,
        req: &AwsRequest,
        ctx: &AwsCtx,
    ) -> Result<AwsResponse, AwsError> {
        match self.route(req, ctx.now) {
            Ok(mut response) => {
                response = response
                    .with_header("x-amz-request-id", random_hex(16).to_uppercase())
                    .with_header("x-amz-id-2", B64.encode(random_hex(48)));
                Ok(response)
            }
            Err(Fail { error, headers }) if headers.is_empty() => Err(error),
            Err(Fail { error, headers }) => {
                let mut response = error.response(Service::S3, req);
                response.headers.extend(headers);
                Ok(response)
            }
        }
    }

    fn route(&mut self, req: &AwsRequest, now: DateTime<Utc>) -> Outcome {
        if let Some(owner) = req.header("x-amz-expected-bucket-owner") {
            if owner != ACCOUNT {
                return Err(AwsError::new(403, "AccessDenied", "Access Denied").into());
            }
        }
        match target(&req.path) {
            Target::Service if req.method == Method::GET => self.list_buckets(req),
            Target::Service => Err(method_not_allowed(&req.method, "SERVICE").into()),
            Target::Bucket(bucket) => self.bucket_request(&bucket, req, now),
            Target::Object(bucket, key) => self.object_request(&bucket, &key, req, now),
        }
    }

    fn bucket_request(&mut self, name: &str, req: &AwsRequest, now: DateTime<Utc>) -> Outcome {
        let method = req.method.as_str();
        if let Some(sub) = BUCKET_SUBRESOURCES_NOT_EMULATED
            .iter()
            .find(|s| req.has_param(s))
        {
            return Err(not_emulated(&format!("{method} /{name}?{sub}")).into());
        }
        let sub = BUCKET_SUBRESOURCES
            .iter()
            .copied()
            .find(|s| req.has_param(s));
        match (method, sub) {
            ("PUT", None) => return self.create_bucket(name, req, now),
            // Answered in any region: it is how clients find a bucket's region.
            ("GET", Some("location")) => return self.get_location(name),
            _ => {}
        }
        self.check_region(name, req)?;
        let bucket = self.bucket_mut(name)?;
        match (method, sub) {
            ("HEAD", None) => Ok(AwsResponse::empty(200)
                .with_header("x-amz-bucket-region", bucket.region.clone())
                .with_header("x-amz-access-point-alias", "false")),
            ("DELETE", None) => self.delete_bucket(name),
            ("GET", None) => match req.param("list-type") {
                Some("2") => list_objects_v2(name, bucket, req),
                Some(other) => Err(invalid_argument(
                    "Invalid List Type specified in Request",
                    "list-type",
                    other,
                )
                .into()),
                None => list_objects_v1(name, bucket, req),
            },
            ("GET", Some("versions")) => list_object_versions(name, bucket, req),
            ("GET", Some("versioning")) => Ok(get_versioning(bucket)),
            ("PUT", Some("versioning")) => put_versioning(bucket, req),
            ("GET", Some("encryption")) => Ok(get_encryption(bucket)),
            ("PUT", Some("encryption")) => put_encryption(bucket, req),
            ("DELETE", Some("encryption")) => {
                // A bucket cannot be unencrypted: deleting the configuration restores
                // the SSE-S3 default.
                bucket.encryption = Encryption::default();
                Ok(AwsResponse::empty(204))
            }
            ("GET", Some("publicAccessBlock")) => get_public_access_block(name, bucket),
            ("PUT", Some("publicAccessBlock")) => put_public_access_block(bucket, req),
            ("DELETE", Some("publicAccessBlock")) => {
                bucket.public_access_block = None;
                Ok(AwsResponse::empty(204))
            }
            ("GET", Some("lifecycle")) => get_lifecycle(name, bucket),
            ("PUT", Some("lifecycle")) => put_lifecycle(bucket, req),
            ("DELETE", Some("lifecycle")) => {
                bucket.lifecycle = None;
                bucket.transition_minimum_size = None;
                Ok(AwsResponse::empty(204))
            }
            ("GET", Some("tagging")) => get_tagging(name, bucket),
            ("PUT", Some("tagging")) => put_tagging(bucket, req),
            ("DELETE", Some("tagging")) => {
                bucket.tags.clear();
                Ok(AwsResponse::empty(204))
            }
            ("POST", Some("delete")) => delete_objects(bucket, req, now),
            ("GET", Some("uploads")) => list_multipart_uploads(name, bucket, req),
            _ => Err(method_not_allowed(&req.method, "BUCKET").into()),
        }
    }

    fn object_request(
        &mut self,
        bucket: &str,
        key: &str,
        req: &AwsRequest,
        now: DateTime<Utc>,
    ) -> Outcome {
        if let Some(sub) = OBJECT_SUBRESOURCES_NOT_EMULATED
            .iter()
            .find(|s| req.has_param(s))
        {
            let method = req.method.as_str();
            return Err(not_emulated(&format!("{method} /{bucket}/{key}?{sub}")).into());
        }
        self.check_region(bucket, req)?;
        if key.len() > MAX_KEY_BYTES {
            return Err(
                AwsError::new(400, "KeyTooLongError", "Your key is too long")
                    .with("Size", key.len().to_string())
                    .with("MaxSizeAllowed", MAX_KEY_BYTES.to_string())
                    .into(),
            );
        }
        if req.has_param("uploads") {
            return match req.method {
                Method::POST => {
                    create_multipart_upload(bucket, self.bucket_mut(bucket)?, key, req, now)
                }
                _ => Err(method_not_allowed(&req.method, "OBJECT").into()),
            };
        }
        if let Some(upload_id) = req.param("uploadId") {
            return self.multipart_request(bucket, key, upload_id, req, now);
        }
        if req.has_param("tagging") {
            let bucket = self.bucket_mut(bucket)?;
            return match req.method {
                Method::GET => get_object_tagging(bucket, key, req),
                Method::PUT => put_object_tagging(bucket, key, req),
                Method::DELETE => delete_object_tagging(bucket, key, req),
                _ => Err(method_not_allowed(&req.method, "OBJECT").into()),
            };
        }
        match req.method {
            Method::PUT if req.header("x-amz-copy-source").is_some() => {
                self.copy_object(bucket, key, req, now)
            }
            Method::PUT => put_object(self.bucket_mut(bucket)?, key, req, now),
            Method::GET | Method::HEAD => get_object(self.bucket(bucket)?, key, req),
            Method::DELETE => delete_object(self.bucket_mut(bucket)?, key, req, now),
            _ => Err(method_not_allowed(&req.method, "OBJECT").into()),
        }
    }

    // ------------------------------------------------------------ bucket lookup

    fn bucket(&self, name: &str) -> Result<&Bucket, AwsError> {
        self.buckets.get(name).ok_or_else(|| no_such_bucket(name))
    }

    fn bucket_mut(&mut self, name: &str) -> Result<&mut Bucket, AwsError> {
        self.buckets
            .get_mut(name)
            .ok_or_else(|| no_such_bucket(name))
    }

    /// A bucket is served only by its own region's endpoint; elsewhere S3 answers a 301
    /// naming the right one (which SDKs follow by re-signing for that region).
    fn check_region(&self, name: &str, req: &AwsRequest) -> Result<(), Fail> {
        let bucket = self.bucket(name)?;
        if bucket.region == req.region {
            return Ok(());
        }
        Err(Fail {
            error: AwsError::new(
                301,
                "PermanentRedirect",
                "The bucket you are attempting to access must be addressed using the specified endpoint. Please send all future requests to this endpoint.",
            )
            .with("Endpoint", format!("{name}.s3.{}.amazonaws.com", bucket.region))
            .with("Bucket", name),
            headers: vec![("x-amz-bucket-region".into(), bucket.region.clone())],
        })
    }
}

// ------------------------------------------------------------ errors

fn no_such_bucket(name: &str) -> AwsError {
    AwsError::new(404, "NoSuchBucket", "The specified bucket does not exist")
        .with("BucketName", name)
}

/// The version a read addresses: the current one, or `?versionId=`. A delete marker is
/// a 404 when current and a 405 when addressed by ID, both saying it is a marker.
fn select_version<'a>(
    bucket: &'a Bucket,
    key: &str,
    version_id: Option<&str>,
    method: &str,
) -> Result<&'a Version, Fail> {
    let versions = bucket.objects.get(key);
    let marker_headers = |v: &Version| {
        vec![
            ("x-amz-delete-marker".to_string(), "true".to_string()),
            ("x-amz-version-id".to_string(), v.version_id.clone()),
            (
                "last-modified".to_string(),
                format::http_date(v.last_modified),
            ),
        ]
    };
    match version_id {
        None => {
            let latest = versions
                .and_then(|v| v.last())
                .ok_or_else(|| no_such_key(key))?;
            if latest.delete_marker {
                return Err(Fail {
                    error: no_such_key(key),
                    headers: marker_headers(latest),
                });
            }
            Ok(latest)
        }
        Some("") => {
            Err(invalid_argument("Version id cannot be the empty string", "versionId", "").into())
        }
        Some(id) => {
            let found = versions
                .and_then(|vs| vs.iter().find(|v| v.version_id == id))
                .ok_or_else(|| {
                    AwsError::new(
                        404,
                        "NoSuchVersion",
                        "The specified version does not exist.",
                    )
                    .with("Key", key)
                    .with("VersionId", id)
                })?;
            if found.delete_marker {
                let mut headers = marker_headers(found);
                headers.push(("allow".into(), "DELETE".into()));
                return Err(Fail {
                    error: method_not_allowed_on(method, "DeleteMarker"),
                    headers,
                });
            }
            Ok(found)
        }
    }
}

fn no_such_key(key: &str) -> AwsError {
    AwsError::new(404, "NoSuchKey", "The specified key does not exist.").with("Key", key)
}

fn no_such_upload(upload_id: &str) -> AwsError {
    AwsError::new(
        404,
        "NoSuchUpload",
        "The specified upload does not exist. The upload ID may be invalid, or the upload may have been aborted or completed.",
    )
    .with("UploadId", upload_id)
}

fn malformed() -> AwsError {
    AwsError::new(400, "MalformedXML", MALFORMED_XML)
}

fn precondition_failed(condition: &str) -> AwsError {
    AwsError::new(
        412,
        "PreconditionFailed",
        "At least one of the pre-conditions you specified did not hold",
    )
    .with("Condition", condition)
}

fn invalid_argument(message: &str, name: &str, value: &str) -> AwsError {
    AwsError::new(400, "InvalidArgument", message)
        .with("ArgumentName", name)
        .with("ArgumentValue", value)
}

fn method_not_allowed(method: &Method, resource: &str) -> AwsError {
    method_not_allowed_on(method.as_str(), resource)
}

fn method_not_allowed_on(method: &str, resource: &str) -> AwsError {
    AwsError::new(
        405,
        "MethodNotAllowed",
        "The specified method is not allowed against this resource.",
    )
    .with("Method", method)
    .with("ResourceType", resource)
}

fn not_emulated(what: &str) -> AwsError {
    AwsError::new(
        501,
        "NotImplemented",
        format!("the sandbox does not emulate {what}"),
    )
}

#[cfg(test)]
mod tests {
    use super::format::{etag_matches, url_encode};
    use super::testkit::Harness;
    use super::*;

    #[test]
    fn the_inventory_lists_buckets_and_current_keys_only() {
        let mut h = Harness::new();
        h.put("/bkt", b"");
        let enable = "<VersioningConfiguration><Status>Enabled</Status></VersioningConfiguration>";
        assert_eq!(
            h.configure(Method::PUT, "/bkt?versioning", enable).status,
            200
        );
        h.put("/bkt/kept", b"1");
        h.put("/bkt/kept", b"2");
        h.put("/bkt/dir/gone", b"x");
        assert_eq!(
            h.call(Method::DELETE, "/bkt/dir/gone", &[], b"").status,
            204
        );
        let mut out = Vec::new();
        h.s3.inventory(&mut out);
        assert_eq!(out, ["s3 bucket bkt", "s3 object bkt/kept"]);
    }

    #[test]
    fn requests_route_by_path_and_subresource() {
        assert_eq!(target("/"), Target::Service);
        assert_eq!(target("/bkt"), Target::Bucket("bkt".into()));
        assert_eq!(target("/bkt/"), Target::Bucket("bkt".into()));
        assert_eq!(
            target("/bkt/a%2Fb//c/"),
            Target::Object("bkt".into(), "a/b//c/".into())
        );
        assert_eq!(
            target("/bkt/%20lead"),
            Target::Object("bkt".into(), " lead".into())
        );
        let mut h = Harness::new();
        h.put("/bkt", b"");
        assert_eq!(h.call(Method::GET, "/bkt?acl", &[], b"").status, 501);
        assert_eq!(h.call(Method::PUT, "/bkt?policy", &[], b"{}").status, 501);
        assert_eq!(
            h.call(Method::GET, "/bkt/k?retention", &[], b"").status,
            501
        );
        assert_eq!(
            h.call(Method::GET, "/bkt/k?uploads", &[], b"").code(),
            Some("MethodNotAllowed")
        );
        assert_eq!(
            h.call(Method::DELETE, "/bkt?versioning", &[], b"").code(),
            Some("MethodNotAllowed")
        );
        assert_eq!(
            h.call(Method::GET, "/bkt?list-type=3", &[], b"").code(),
            Some("InvalidArgument")
        );
        let other_owner = [("x-amz-expected-bucket-owner", "999999999999")];
        assert_eq!(
            h.call(Method::GET, "/bkt?list-type=2", &other_owner, b"")
                .status,
            403
        );
        assert_eq!(url_encode("a b+c/d~é"), "a+b%2Bc/d~%C3%A9");
        assert!(etag_matches("\"x\", \"y\"", "y"));
        assert!(etag_matches("*", "anything"));
        assert!(!etag_matches("\"x\"", "y"));
    }

    #[test]
    fn state_survives_serialization() {
        let mut h = Harness::new();
        h.put("/bkt", b"");
        h.call(
            Method::PUT,
            "/bkt/k",
            &[("x-amz-meta-a", "1")],
            &[0, 1, 2, 255],
        );
        let saved = serde_json::to_string(&h.s3).expect("serializes");
        let mut restored = Harness::new();
        restored.s3 = serde_json::from_str(&saved).expect("deserializes");
        let r = restored.call(Method::GET, "/bkt/k", &[], b"");
        assert_eq!(r.status, 200);
        assert_eq!(r.header("x-amz-meta-a"), Some("1"));
        assert_eq!(
            restored.s3.buckets["bkt"].objects["k"][0].bytes().ok(),
            Some(vec![0, 1, 2, 255])
        );
    }
}
