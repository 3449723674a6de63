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

use std::collections::BTreeMap;

use axum::http::Method;
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::xml::Element;
use super::{AwsCtx, AwsError, AwsRequest, AwsResponse, Service, ACCOUNT};
use crate::gcp::{random_hex, time_millis};
use crate::http::{parse_query, percent_decode, percent_encode};

/// The namespace of every S3 result document.
const NS: &str = "http://s3.amazonaws.com/doc/2006-03-01/";
const MAX_KEYS: usize = 1000;
const MAX_KEY_BYTES: usize = 1024;
/// User metadata (names and values of `x-amz-meta-*`) is limited to 2 KB.
const MAX_METADATA_BYTES: usize = 2048;
const MAX_DELETE_OBJECTS: usize = 1000;
const MAX_BUCKET_TAGS: usize = 50;
const MAX_OBJECT_TAGS: usize = 10;
/// Every part of a multipart upload but the last must be at least 5 MiB.
const MIN_PART_SIZE: u64 = 5 * 1024 * 1024;
const MAX_PART_NUMBER: u32 = 10_000;
/// The most parts ListParts and uploads ListMultipartUploads answer at once.
const MAX_LISTED_PARTS: usize = 1000;
const MAX_LISTED_UPLOADS: usize = 1000;
const MAX_LIFECYCLE_RULES: usize = 1000;
const MALFORMED_XML: &str =
    "The XML you provided was not well-formed or did not validate against our published schema";

/// `BucketLocationConstraint` in the model: every region a bucket can be created in, and
/// `EU`, the legacy alias of eu-west-1. us-east-1 is not one: it is the absence of one.
const LOCATION_CONSTRAINTS: &[&str] = &[
    "af-south-1",
    "ap-east-1",
    "ap-east-2",
    "ap-northeast-1",
    "ap-northeast-2",
    "ap-northeast-3",
    "ap-south-1",
    "ap-south-2",
    "ap-southeast-1",
    "ap-southeast-2",
    "ap-southeast-3",
    "ap-southeast-4",
    "ap-southeast-5",
    "ap-southeast-6",
    "ap-southeast-7",
    "ca-central-1",
    "ca-west-1",
    "cn-north-1",
    "cn-northwest-1",
    "EU",
    "eu-central-1",
    "eu-central-2",
    "eu-north-1",
    "eu-south-1",
    "eu-south-2",
    "eu-west-1",
    "eu-west-2",
    "eu-west-3",
    "il-central-1",
    "me-central-1",
    "me-south-1",
    "mx-central-1",
    "sa-east-1",
    "us-east-2",
    "us-gov-east-1",
    "us-gov-west-1",
    "us-west-1",
    "us-west-2",
];

/// Default encryption algorithms a bucket or object may use (`aws:fsx` and `aws:backup`
/// in the model's enum belong to other services' storage).
const SSE_ALGORITHMS: &[&str] = &["AES256", "aws:kms", "aws:kms:dsse"];

/// Storage classes an object can be written in and read back from at once (archive
/// classes need a restore first, which the sandbox does not emulate).
const STORAGE_CLASSES: &[&str] = &[
    "STANDARD",
    "REDUCED_REDUNDANCY",
    "STANDARD_IA",
    "ONEZONE_IA",
    "INTELLIGENT_TIERING",
    "GLACIER_IR",
];

const TRANSITION_STORAGE_CLASSES: &[&str] = &[
    "GLACIER",
    "STANDARD_IA",
    "ONEZONE_IA",
    "INTELLIGENT_TIERING",
    "DEEP_ARCHIVE",
    "GLACIER_IR",
];

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

/// Headers stored with an object and answered on GET and HEAD as they were sent.
const STORED_HEADERS: &[&str] = &[
    "cache-control",
    "content-disposition",
    "content-encoding",
    "content-language",
    "expires",
    "x-amz-website-redirect-location",
];

/// The `x-amz-checksum-*` algorithms and their digest lengths in bytes.
const CHECKSUM_ALGORITHMS: &[(&str, usize)] = &[
    ("crc32", 4),
    ("crc32c", 4),
    ("crc64nvme", 8),
    ("sha1", 20),
    ("sha256", 32),
    ("sha512", 64),
    ("md5", 16),
    ("xxhash64", 8),
    ("xxhash3", 8),
    ("xxhash128", 16),
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
    /// [`STORED_HEADERS`] as sent.
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

    // ------------------------------------------------------------ buckets

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

    fn list_buckets(&self, req: &AwsRequest) -> Outcome {
        let prefix = req.param("prefix").unwrap_or("");
        let region = req.param("bucket-region");
        let max = match req.param("max-buckets") {
            None => usize::MAX,
            Some(v) => v
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=10_000).contains(n))
                .ok_or_else(|| {
                    invalid_argument(
                        "The value of max-buckets must be between 1 and 10000",
                        "max-buckets",
                        v,
                    )
                })?,
        };
        let after = match req.param("continuation-token") {
            Some(token) => Some(decode_token(token, "continuation-token")?),
            None => None,
        };
        let mut matching = self.buckets.iter().filter(|(name, b)| {
            name.starts_with(prefix)
                && region.is_none_or(|r| r == b.region)
                && after.as_deref().is_none_or(|a| name.as_str() > a)
        });
        let mut list = Element::new("Buckets");
        let mut last = None;
        for (name, bucket) in matching.by_ref().take(max) {
            list.push(
                Element::new("Bucket")
                    .with(Element::leaf("Name", name.as_str()))
                    .with(Element::leaf("CreationDate", time_millis(bucket.created)))
                    .with(Element::leaf("BucketRegion", bucket.region.as_str())),
            );
            last = Some(name.as_str());
        }
        let mut result = Element::new("ListAllMyBucketsResult")
            .attr("xmlns", NS)
            .with(owner())
            .with(list);
        if let (Some(last), Some(_)) = (last, matching.next()) {
            result.push_leaf("ContinuationToken", encode_token(last));
        }
        if req.param("prefix").is_some() {
            result.push_leaf("Prefix", prefix);
        }
        Ok(xml(200, &result))
    }

    fn create_bucket(&mut self, name: &str, req: &AwsRequest, now: DateTime<Utc>) -> Outcome {
        check_bucket_name(name)?;
        let config = if req.body.iter().all(u8::is_ascii_whitespace) {
            None
        } else {
            let body = payload(req)?;
            let doc = Element::parse(&body.data).map_err(|_| malformed())?;
            if doc.name != "CreateBucketConfiguration" {
                return Err(malformed().into());
            }
            expect_children(
                &doc,
                &[
                    ("LocationConstraint", 1),
                    ("Location", 1),
                    ("Bucket", 1),
                    ("Tags", 1),
                ],
            )?;
            Some(doc)
        };
        if let Some(config) = &config {
            if config.find("Location").is_some() || config.find("Bucket").is_some() {
                return Err(not_emulated("directory buckets (S3 Express One Zone)").into());
            }
        }
        if req
            .header("x-amz-bucket-object-lock-enabled")
            .is_some_and(|v| v.eq_ignore_ascii_case("true"))
        {
            return Err(not_emulated("S3 Object Lock").into());
        }
        // Buckets enforce bucket-owner object ownership, which refuses ACLs other than
        // `private`; the ownerships that allow ACLs would need ACLs emulated.
        match req.header("x-amz-object-ownership") {
            None | Some("BucketOwnerEnforced") => {}
            Some(other) => {
                return Err(not_emulated(&format!("object ownership {other} (object ACLs)")).into())
            }
        }
        if req.header("x-amz-acl").is_some_and(|acl| acl != "private") {
            return Err(AwsError::new(
                400,
                "InvalidBucketAclWithObjectOwnership",
                "Bucket cannot have ACLs set with ObjectOwnership's BucketOwnerEnforced setting",
            )
            .into());
        }
        if self.buckets.contains_key(name) {
            return Err(AwsError::new(
                409,
                "BucketAlreadyOwnedByYou",
                "Your previous request to create the named bucket succeeded and you already own it.",
            )
            .with("BucketName", name)
            .into());
        }
        let constraint = config
            .as_ref()
            .and_then(|c| c.text_of("LocationConstraint"))
            .filter(|c| !c.is_empty());
        let region = match constraint {
            None if req.region == "us-east-1" => "us-east-1".to_string(),
            None => {
                return Err(AwsError::new(
                    400,
                    "IllegalLocationConstraintException",
                    "The unspecified location constraint is incompatible for the region specific endpoint this request was sent to.",
                )
                .into())
            }
            Some(c) if !LOCATION_CONSTRAINTS.contains(&c) => {
                return Err(AwsError::new(
                    400,
                    "InvalidLocationConstraint",
                    "The specified location-constraint is not valid",
                )
                .with("LocationConstraint", c)
                .into())
            }
            Some("EU") => "eu-west-1".to_string(),
            Some(c) => c.to_string(),
        };
        if region != req.region {
            let c = constraint.unwrap_or("unspecified");
            return Err(AwsError::new(
                400,
                "IllegalLocationConstraintException",
                format!("The {c} location constraint is incompatible for the region specific endpoint this request was sent to."),
            )
            .into());
        }
        let tags = match config.as_ref().and_then(|c| c.find("Tags")) {
            Some(tags) => parse_tags(tags, Tagged::Bucket)?,
            None => Vec::new(),
        };
        self.buckets.insert(
            name.to_string(),
            Bucket {
                region,
                location_constraint: constraint.map(str::to_string),
                created: now,
                versioning: None,
                mfa_delete: None,
                encryption: Encryption::default(),
                public_access_block: Some(PublicAccessBlock::ALL),
                lifecycle: None,
                transition_minimum_size: None,
                tags,
                objects: BTreeMap::new(),
                uploads: BTreeMap::new(),
            },
        );
        Ok(AwsResponse::empty(200).with_header("location", format!("/{name}")))
    }

    fn get_location(&self, name: &str) -> Outcome {
        let bucket = self.bucket(name)?;
        let mut doc = Element::new("LocationConstraint").attr("xmlns", NS);
        if let Some(c) = &bucket.location_constraint {
            doc.text = c.clone();
        }
        Ok(xml(200, &doc))
    }

    fn delete_bucket(&mut self, name: &str) -> Outcome {
        let bucket = self.bucket(name)?;
        // Noncurrent versions and delete markers count: a versioned bucket is empty only
        // when every version is gone.
        if !bucket.objects.is_empty() {
            let message = if bucket.versioning.is_some() {
                "The bucket you tried to delete is not empty. You must delete all versions in the bucket."
            } else {
                "The bucket you tried to delete is not empty"
            };
            return Err(AwsError::new(409, "BucketNotEmpty", message)
                .with("BucketName", name)
                .into());
        }
        self.buckets.remove(name);
        Ok(AwsResponse::empty(204))
    }

    // ------------------------------------------------------------ copies

    fn copy_object(
        &mut self,
        bucket: &str,
        key: &str,
        req: &AwsRequest,
        now: DateTime<Utc>,
    ) -> Outcome {
        let directive = req.header("x-amz-metadata-directive").unwrap_or("COPY");
        if !matches!(directive, "COPY" | "REPLACE") {
            return Err(invalid_argument(
                "Unknown metadata directive.",
                "x-amz-metadata-directive",
                directive,
            )
            .into());
        }
        let tagging = req.header("x-amz-tagging-directive").unwrap_or("COPY");
        if !matches!(tagging, "COPY" | "REPLACE") {
            return Err(invalid_argument(
                "Unknown tagging directive.",
                "x-amz-tagging-directive",
                tagging,
            )
            .into());
        }
        check_object_extras(req)?;
        let source = self.copy_source(req)?;
        let (src_bucket, src_key) = (source.bucket.clone(), source.key.clone());
        let source_version_id = source.version_id.clone();
        let mut copy = source.version.clone();
        let destination = self.bucket_mut(bucket)?;
        check_write_conditions(
            req,
            key,
            destination.objects.get(key).and_then(|v| v.last()),
        )?;
        let changes_encryption = req.header("x-amz-server-side-encryption").is_some();
        let changes_class = req.header("x-amz-storage-class").is_some();
        if src_bucket == bucket
            && src_key == key
            && directive == "COPY"
            && !changes_encryption
            && !changes_class
        {
            return Err(AwsError::new(
                400,
                "InvalidRequest",
                "This copy request is illegal because it is trying to copy an object to itself without changing the object's metadata, storage class, website redirect location or encryption attributes.",
            )
            .into());
        }
        if directive == "REPLACE" {
            copy.content_type = req
                .header("content-type")
                .unwrap_or("binary/octet-stream")
                .to_string();
            copy.headers = stored_headers(req);
            copy.metadata = user_metadata(req)?;
        }
        // The source's tags come along unless the request replaces them (with none when
        // it sends no `x-amz-tagging`).
        if tagging == "REPLACE" {
            copy.tags = header_tags(req)?;
        }
        copy.storage_class = storage_class(req)?.or(copy.storage_class);
        copy.sse = Some(object_sse(req, destination)?);
        copy.last_modified = now;
        let sse = copy.sse.clone();
        let etag = copy.etag.clone();
        let version_id = add_version(destination, key, copy);
        let result = Element::new("CopyObjectResult")
            .attr("xmlns", NS)
            .with(Element::leaf("ETag", quoted(&etag)))
            .with(Element::leaf("LastModified", time_millis(now)));
        let mut response = xml(200, &result);
        if let Some(id) = source_version_id {
            response = response.with_header("x-amz-copy-source-version-id", id);
        }
        if destination.versioning == Some(Versioning::Enabled) {
            response = response.with_header("x-amz-version-id", version_id);
        }
        response.headers.extend(sse.iter().flat_map(sse_headers));
        Ok(response)
    }

    /// The object version `x-amz-copy-source` names, once the `x-amz-copy-source-if-*`
    /// conditions hold; for CopyObject and UploadPartCopy.
    fn copy_source(&self, req: &AwsRequest) -> Result<CopySource<'_>, Fail> {
        let source = req.header("x-amz-copy-source").unwrap_or("");
        let (bucket, key, version_id) = parse_copy_source(source)?;
        let source_bucket = self.bucket(&bucket)?;
        let addresses_marker = version_id.as_deref().is_some_and(|id| {
            source_bucket
                .objects
                .get(&key)
                .and_then(|vs| vs.iter().find(|v| v.version_id == id))
                .is_some_and(|v| v.delete_marker)
        });
        if addresses_marker {
            return Err(AwsError::new(
                400,
                "InvalidRequest",
                "The source of a copy request may not specifically refer to a delete marker by version id.",
            )
            .into());
        }
        let version = select_version(source_bucket, &key, version_id.as_deref(), "PUT")?;
        if let Some(m) = req.header("x-amz-copy-source-if-match") {
            if !etag_matches(m, &version.etag) {
                return Err(precondition_failed("x-amz-copy-source-If-Match").into());
            }
        }
        if let Some(m) = req.header("x-amz-copy-source-if-none-match") {
            if etag_matches(m, &version.etag) {
                return Err(precondition_failed("x-amz-copy-source-If-None-Match").into());
            }
        }
        Ok(CopySource {
            version_id: source_bucket
                .versioning
                .is_some()
                .then(|| version.version_id.clone()),
            bucket,
            key,
            version,
        })
    }

    // ------------------------------------------------------------ multipart uploads

    /// The requests on one upload (`?uploadId=`): UploadPart, UploadPartCopy,
    /// CompleteMultipartUpload, AbortMultipartUpload and ListParts.
    fn multipart_request(
        &mut self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        req: &AwsRequest,
        now: DateTime<Utc>,
    ) -> Outcome {
        match req.method {
            Method::PUT if req.header("x-amz-copy-source").is_some() => {
                self.upload_part_copy(bucket, key, upload_id, req, now)
            }
            Method::PUT => upload_part(self.bucket_mut(bucket)?, key, upload_id, req, now),
            Method::POST => complete_multipart_upload(
                bucket,
                self.bucket_mut(bucket)?,
                key,
                upload_id,
                req,
                now,
            ),
            Method::DELETE => {
                let destination = self.bucket_mut(bucket)?;
                upload_of(destination, key, upload_id)?;
                destination.uploads.remove(upload_id);
                Ok(AwsResponse::empty(204))
            }
            Method::GET => list_parts(bucket, self.bucket(bucket)?, key, upload_id, req),
            _ => Err(method_not_allowed(&req.method, "OBJECT").into()),
        }
    }

    fn upload_part_copy(
        &mut self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        req: &AwsRequest,
        now: DateTime<Utc>,
    ) -> Outcome {
        let number = part_number(req)?;
        upload_of(self.bucket(bucket)?, key, upload_id)?;
        let source = self.copy_source(req)?;
        let source_version_id = source.version_id.clone();
        let whole = source.version.bytes()?;
        let data = match req.header("x-amz-copy-source-range") {
            Some(range) => copy_range(range, &whole)?.to_vec(),
            None => whole,
        };
        let upload = upload_of_mut(self.bucket_mut(bucket)?, key, upload_id)?;
        let checksum = part_checksum(upload, None, &data)?;
        let etag = add_part(upload, number, &data, checksum.clone(), now);
        let mut result = Element::new("CopyPartResult")
            .attr("xmlns", NS)
            .with(Element::leaf("ETag", quoted(&etag)))
            .with(Element::leaf("LastModified", time_millis(now)));
        if let Some(c) = &checksum {
            result.push_leaf(&c.element(), c.value.as_str());
        }
        let mut response = xml(200, &result);
        if let Some(id) = source_version_id {
            response = response.with_header("x-amz-copy-source-version-id", id);
        }
        response
            .headers
            .extend(upload.object.sse.iter().flat_map(sse_headers));
        Ok(response)
    }
}

/// What a copy reads: the source bucket and key, the version, and that version's ID
/// when the source bucket is versioned (answered as `x-amz-copy-source-version-id`).
struct CopySource<'a> {
    bucket: String,
    key: String,
    version: &'a Version,
    version_id: Option<String>,
}

// ------------------------------------------------------------ bucket configuration

fn get_versioning(bucket: &Bucket) -> AwsResponse {
    let mut doc = Element::new("VersioningConfiguration").attr("xmlns", NS);
    if let Some(status) = bucket.versioning {
        doc.push_leaf("Status", status.as_str());
    }
    if let Some(mfa) = &bucket.mfa_delete {
        doc.push_leaf("MfaDelete", mfa.as_str());
    }
    xml(200, &doc)
}

fn put_versioning(bucket: &mut Bucket, req: &AwsRequest) -> Outcome {
    let doc = configuration(req, "VersioningConfiguration")?;
    expect_children(&doc, &[("Status", 1), ("MfaDelete", 1)])?;
    let status = match doc.text_of("Status") {
        None => None,
        Some("Enabled") => Some(Versioning::Enabled),
        Some("Suspended") => Some(Versioning::Suspended),
        Some(_) => return Err(malformed().into()),
    };
    match doc.text_of("MfaDelete") {
        None => {}
        Some("Disabled") => bucket.mfa_delete = Some("Disabled".into()),
        Some("Enabled") => return Err(not_emulated("MFA delete").into()),
        Some(_) => return Err(malformed().into()),
    }
    if status.is_some() {
        bucket.versioning = status;
    }
    Ok(AwsResponse::empty(200))
}

fn get_encryption(bucket: &Bucket) -> AwsResponse {
    let e = &bucket.encryption;
    let mut default = Element::new("ApplyServerSideEncryptionByDefault")
        .with(Element::leaf("SSEAlgorithm", e.algorithm.as_str()));
    if let Some(key) = &e.kms_key_id {
        default.push_leaf("KMSMasterKeyID", key.as_str());
    }
    let mut rule = Element::new("Rule").with(default).with(Element::leaf(
        "BucketKeyEnabled",
        e.bucket_key_enabled.to_string(),
    ));
    if !e.blocked_types.is_empty() {
        let mut blocked = Element::new("BlockedEncryptionTypes");
        for t in &e.blocked_types {
            blocked.push_leaf("EncryptionType", t.as_str());
        }
        rule.push(blocked);
    }
    let doc = Element::new("ServerSideEncryptionConfiguration")
        .attr("xmlns", NS)
        .with(rule);
    xml(200, &doc)
}

fn put_encryption(bucket: &mut Bucket, req: &AwsRequest) -> Outcome {
    let doc = configuration(req, "ServerSideEncryptionConfiguration")?;
    expect_children(&doc, &[("Rule", 1)])?;
    let rule = doc.find("Rule").ok_or_else(malformed)?;
    expect_children(
        rule,
        &[
            ("ApplyServerSideEncryptionByDefault", 1),
            ("BucketKeyEnabled", 1),
            ("BlockedEncryptionTypes", 1),
        ],
    )?;
    let default = rule
        .find("ApplyServerSideEncryptionByDefault")
        .ok_or_else(malformed)?;
    expect_children(default, &[("SSEAlgorithm", 1), ("KMSMasterKeyID", 1)])?;
    let algorithm = default
        .text_of("SSEAlgorithm")
        .filter(|a| SSE_ALGORITHMS.contains(a))
        .ok_or_else(malformed)?;
    let kms_key_id = default.text_of("KMSMasterKeyID").map(str::to_string);
    if kms_key_id.is_some() && algorithm == "AES256" {
        return Err(invalid_argument(
            "a KMSMasterKeyID is not applicable if the default sse algorithm is not aws:kms or aws:kms:dsse",
            "ApplyServerSideEncryptionByDefault",
            "null",
        )
        .into());
    }
    let bucket_key_enabled = match rule.text_of("BucketKeyEnabled") {
        Some(v) => parse_bool(v)?,
        None => false,
    };
    let mut blocked_types = Vec::new();
    if let Some(blocked) = rule.find("BlockedEncryptionTypes") {
        expect_children(blocked, &[("EncryptionType", 2)])?;
        for t in blocked.all("EncryptionType") {
            if !matches!(t.text.as_str(), "NONE" | "SSE-C") {
                return Err(malformed().into());
            }
            blocked_types.push(t.text.clone());
        }
    }
    bucket.encryption = Encryption {
        algorithm: algorithm.to_string(),
        kms_key_id,
        bucket_key_enabled,
        blocked_types,
    };
    Ok(AwsResponse::empty(200))
}

fn get_public_access_block(name: &str, bucket: &Bucket) -> Outcome {
    let block = bucket.public_access_block.ok_or_else(|| {
        AwsError::new(
            404,
            "NoSuchPublicAccessBlockConfiguration",
            "The public access block configuration was not found",
        )
        .with("BucketName", name)
    })?;
    let mut doc = Element::new("PublicAccessBlockConfiguration").attr("xmlns", NS);
    for (field, value) in PublicAccessBlock::FIELDS.iter().zip(block.values()) {
        doc.push_leaf(field, value.to_string());
    }
    Ok(xml(200, &doc))
}

fn put_public_access_block(bucket: &mut Bucket, req: &AwsRequest) -> Outcome {
    let doc = configuration(req, "PublicAccessBlockConfiguration")?;
    let allowed: Vec<(&str, usize)> = PublicAccessBlock::FIELDS.iter().map(|f| (*f, 1)).collect();
    expect_children(&doc, &allowed)?;
    let flag = |name: &str| -> Result<bool, AwsError> {
        doc.text_of(name).map(parse_bool).unwrap_or(Ok(false))
    };
    bucket.public_access_block = Some(PublicAccessBlock {
        block_public_acls: flag("BlockPublicAcls")?,
        ignore_public_acls: flag("IgnorePublicAcls")?,
        block_public_policy: flag("BlockPublicPolicy")?,
        restrict_public_buckets: flag("RestrictPublicBuckets")?,
    });
    Ok(AwsResponse::empty(200))
}

fn get_lifecycle(name: &str, bucket: &Bucket) -> Outcome {
    let rules = bucket.lifecycle.as_ref().ok_or_else(|| {
        AwsError::new(
            404,
            "NoSuchLifecycleConfiguration",
            "The lifecycle configuration does not exist",
        )
        .with("BucketName", name)
    })?;
    let mut doc = rules.clone();
    doc.attrs = vec![("xmlns".into(), NS.into())];
    Ok(xml(200, &doc).with_header(
        "x-amz-transition-default-minimum-object-size",
        transition_minimum_size(bucket),
    ))
}

fn transition_minimum_size(bucket: &Bucket) -> String {
    bucket
        .transition_minimum_size
        .clone()
        .unwrap_or_else(|| "all_storage_classes_128K".into())
}

fn put_lifecycle(bucket: &mut Bucket, req: &AwsRequest) -> Outcome {
    let mut doc = configuration(req, "LifecycleConfiguration")?;
    validate_lifecycle(&mut doc)?;
    let minimum = match req.header("x-amz-transition-default-minimum-object-size") {
        None => None,
        Some(v @ ("varies_by_storage_class" | "all_storage_classes_128K")) => Some(v.to_string()),
        Some(v) => {
            return Err(invalid_argument(
                "Invalid value for x-amz-transition-default-minimum-object-size",
                "x-amz-transition-default-minimum-object-size",
                v,
            )
            .into())
        }
    };
    doc.attrs.clear();
    bucket.lifecycle = Some(doc);
    bucket.transition_minimum_size = minimum;
    Ok(AwsResponse::empty(200).with_header(
        "x-amz-transition-default-minimum-object-size",
        transition_minimum_size(bucket),
    ))
}

/// Checks a lifecycle configuration against S3's schema and rules, and gives rules
/// without an ID the random one S3 assigns.
fn validate_lifecycle(doc: &mut Element) -> Result<(), AwsError> {
    expect_children(doc, &[("Rule", MAX_LIFECYCLE_RULES)])?;
    if doc.children.is_empty() {
        return Err(malformed());
    }
    let mut ids: Vec<String> = Vec::new();
    for rule in &mut doc.children {
        validate_rule(rule)?;
        let id = match rule.text_of("ID") {
            Some(id) => id.to_string(),
            None => {
                let id = B64.encode(random_hex(36));
                rule.children.insert(0, Element::leaf("ID", id.as_str()));
                id
            }
        };
        if ids.contains(&id) {
            return Err(invalid_argument(
                "Rule ID must be unique. Found same ID for more than one rule",
                "ID",
                &id,
            ));
        }
        ids.push(id);
    }
    Ok(())
}

fn validate_rule(rule: &Element) -> Result<(), AwsError> {
    const UNBOUNDED: usize = usize::MAX;
    expect_children(
        rule,
        &[
            ("ID", 1),
            ("Prefix", 1),
            ("Filter", 1),
            ("Status", 1),
            ("Expiration", 1),
            ("Transition", UNBOUNDED),
            ("NoncurrentVersionTransition", UNBOUNDED),
            ("NoncurrentVersionExpiration", 1),
            ("AbortIncompleteMultipartUpload", 1),
        ],
    )?;
    if let Some(id) = rule.text_of("ID") {
        if id.chars().count() > 255 {
            return Err(invalid_argument(
                "ID length should not exceed allowed limit of 255",
                "ID",
                id,
            ));
        }
    }
    if !matches!(rule.text_of("Status"), Some("Enabled" | "Disabled")) {
        return Err(malformed());
    }
    // A rule selects objects by the V2 `Filter` or the deprecated rule-level `Prefix`,
    // exactly one of them.
    let mut has_tags = false;
    match (rule.find("Filter"), rule.find("Prefix")) {
        (Some(filter), None) => {
            let allowed = [
                ("Prefix", 1),
                ("Tag", 1),
                ("ObjectSizeGreaterThan", 1),
                ("ObjectSizeLessThan", 1),
                ("And", 1),
            ];
            expect_children(filter, &allowed)?;
            if filter.children.len() > 1 {
                return Err(malformed());
            }
            if let Some(tag) = filter.find("Tag") {
                validate_filter_tag(tag)?;
                has_tags = true;
            }
            if let Some(and) = filter.find("And") {
                expect_children(
                    and,
                    &[
                        ("Prefix", 1),
                        ("Tag", UNBOUNDED),
                        ("ObjectSizeGreaterThan", 1),
                        ("ObjectSizeLessThan", 1),
                    ],
                )?;
                for tag in and.all("Tag") {
                    validate_filter_tag(tag)?;
                    has_tags = true;
                }
                for size in ["ObjectSizeGreaterThan", "ObjectSizeLessThan"] {
                    if let Some(v) = and.text_of(size) {
                        parse_int(v)?;
                    }
                }
            }
            for size in ["ObjectSizeGreaterThan", "ObjectSizeLessThan"] {
                if let Some(v) = filter.text_of(size) {
                    parse_int(v)?;
                }
            }
        }
        (None, Some(_)) => {}
        _ => return Err(malformed()),
    }
    let mut actions = 0;
    if let Some(expiration) = rule.find("Expiration") {
        actions += 1;
        expect_children(
            expiration,
            &[("Date", 1), ("Days", 1), ("ExpiredObjectDeleteMarker", 1)],
        )?;
        if expiration.children.len() != 1 {
            return Err(malformed());
        }
        if let Some(days) = expiration.text_of("Days") {
            positive(
                days,
                "'Days' for Expiration action must be a positive integer",
                "Days",
            )?;
        }
        if let Some(date) = expiration.text_of("Date") {
            check_midnight(date)?;
        }
        if let Some(flag) = expiration.text_of("ExpiredObjectDeleteMarker") {
            parse_bool(flag)?;
        }
    }
    for transition in rule.all("Transition") {
        actions += 1;
        expect_children(transition, &[("Date", 1), ("Days", 1), ("StorageClass", 1)])?;
        let class = transition
            .text_of("StorageClass")
            .filter(|c| TRANSITION_STORAGE_CLASSES.contains(c))
            .ok_or_else(malformed)?;
        match (transition.text_of("Days"), transition.text_of("Date")) {
            (Some(days), None) => {
                let days = parse_int(days)?;
                if days < 0 {
                    return Err(invalid_argument(
                        "'Days' in Transition action must be a non-negative integer",
                        "Days",
                        &days.to_string(),
                    ));
                }
                if matches!(class, "STANDARD_IA" | "ONEZONE_IA") && days < 30 {
                    return Err(invalid_argument(
                        &format!("'Days' in Transition action must be greater than or equal to 30 for storageClass '{class}'"),
                        "Days",
                        &days.to_string(),
                    ));
                }
            }
            (None, Some(date)) => check_midnight(date)?,
            _ => return Err(malformed()),
        }
    }
    for transition in rule.all("NoncurrentVersionTransition") {
        actions += 1;
        expect_children(
            transition,
            &[
                ("NoncurrentDays", 1),
                ("StorageClass", 1),
                ("NewerNoncurrentVersions", 1),
            ],
        )?;
        transition
            .text_of("StorageClass")
            .filter(|c| TRANSITION_STORAGE_CLASSES.contains(c))
            .ok_or_else(malformed)?;
        let days = transition.text_of("NoncurrentDays").ok_or_else(malformed)?;
        if parse_int(days)? < 0 {
            return Err(invalid_argument(
                "'NoncurrentDays' in NoncurrentVersionTransition action must be a non-negative integer",
                "NoncurrentDays",
                days,
            ));
        }
        if let Some(n) = transition.text_of("NewerNoncurrentVersions") {
            positive(
                n,
                "'NewerNoncurrentVersions' must be a positive integer",
                "NewerNoncurrentVersions",
            )?;
        }
    }
    if let Some(expiration) = rule.find("NoncurrentVersionExpiration") {
        actions += 1;
        expect_children(
            expiration,
            &[("NoncurrentDays", 1), ("NewerNoncurrentVersions", 1)],
        )?;
        let days = expiration.text_of("NoncurrentDays").ok_or_else(malformed)?;
        positive(
            days,
            "'NoncurrentDays' for NoncurrentVersionExpiration action must be a positive integer",
            "NoncurrentDays",
        )?;
        if let Some(n) = expiration.text_of("NewerNoncurrentVersions") {
            positive(
                n,
                "'NewerNoncurrentVersions' must be a positive integer",
                "NewerNoncurrentVersions",
            )?;
        }
    }
    if let Some(abort) = rule.find("AbortIncompleteMultipartUpload") {
        actions += 1;
        expect_children(abort, &[("DaysAfterInitiation", 1)])?;
        let days = abort.text_of("DaysAfterInitiation").ok_or_else(malformed)?;
        positive(
            days,
            "'DaysAfterInitiation' for AbortIncompleteMultipartUpload action must be a positive integer",
            "DaysAfterInitiation",
        )?;
        if has_tags {
            return Err(AwsError::new(
                400,
                "InvalidRequest",
                "AbortIncompleteMultipartUpload cannot be specified with Tags.",
            ));
        }
    }
    if actions == 0 {
        return Err(AwsError::new(
            400,
            "InvalidRequest",
            "At least one action needs to be specified in a rule",
        ));
    }
    Ok(())
}

fn validate_filter_tag(tag: &Element) -> Result<(), AwsError> {
    expect_children(tag, &[("Key", 1), ("Value", 1)])?;
    if tag.find("Key").is_none() || tag.find("Value").is_none() {
        return Err(malformed());
    }
    Ok(())
}

/// Lifecycle dates must be midnight UTC (`2027-01-01T00:00:00.000Z`).
fn check_midnight(date: &str) -> Result<(), AwsError> {
    let parsed = DateTime::parse_from_rfc3339(date).map_err(|_| malformed())?;
    if parsed.with_timezone(&Utc).time() != chrono::NaiveTime::MIN {
        return Err(invalid_argument(
            "'Date' must be at midnight GMT",
            "Date",
            date,
        ));
    }
    Ok(())
}

fn positive(text: &str, message: &str, name: &str) -> Result<i64, AwsError> {
    let n = parse_int(text)?;
    if n <= 0 {
        return Err(invalid_argument(message, name, text));
    }
    Ok(n)
}

fn get_tagging(name: &str, bucket: &Bucket) -> Outcome {
    if bucket.tags.is_empty() {
        return Err(
            AwsError::new(404, "NoSuchTagSet", "The TagSet does not exist")
                .with("BucketName", name)
                .into(),
        );
    }
    Ok(xml(200, &tagging(&bucket.tags)))
}

fn put_tagging(bucket: &mut Bucket, req: &AwsRequest) -> Outcome {
    bucket.tags = tagging_document(req, Tagged::Bucket)?;
    Ok(AwsResponse::empty(204))
}

/// A tagging request's `<Tagging><TagSet>…</TagSet></Tagging>`, checked.
fn tagging_document(req: &AwsRequest, tagged: Tagged) -> Result<Vec<(String, String)>, AwsError> {
    let doc = configuration(req, "Tagging")?;
    expect_children(&doc, &[("TagSet", 1)])?;
    let set = doc.find("TagSet").ok_or_else(malformed)?;
    parse_tags(set, tagged)
}

/// What tags are put on: buckets and objects have different limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tagged {
    Bucket,
    Object,
}

/// A `TagSet` (or CreateBucket's `Tags`): `<Tag><Key/><Value/></Tag>…`.
fn parse_tags(set: &Element, tagged: Tagged) -> Result<Vec<(String, String)>, AwsError> {
    expect_children(set, &[("Tag", usize::MAX)])?;
    let mut pairs = Vec::new();
    for tag in &set.children {
        expect_children(tag, &[("Key", 1), ("Value", 1)])?;
        let key = tag.text_of("Key").ok_or_else(malformed)?;
        let value = tag.text_of("Value").ok_or_else(malformed)?;
        pairs.push((key.to_string(), value.to_string()));
    }
    check_tags(pairs, tagged)
}

/// `x-amz-tagging`: object tags as a URL query string (`k1=v1&k2=v2`).
fn header_tags(req: &AwsRequest) -> Result<Vec<(String, String)>, AwsError> {
    match req.header("x-amz-tagging") {
        Some(raw) => check_tags(parse_query(raw), Tagged::Object),
        None => Ok(Vec::new()),
    }
}

/// Checks tags as S3 does: at most 50 on a bucket and 10 on an object, keys up to 128
/// and values up to 256 characters of a limited set, no `aws:` keys, no key twice.
fn check_tags(
    pairs: Vec<(String, String)>,
    tagged: Tagged,
) -> Result<Vec<(String, String)>, AwsError> {
    let invalid = |message: &str| AwsError::new(400, "InvalidTag", message);
    match tagged {
        Tagged::Bucket if pairs.len() > MAX_BUCKET_TAGS => {
            return Err(invalid("Bucket tag count cannot be greater than 50"));
        }
        Tagged::Object if pairs.len() > MAX_OBJECT_TAGS => {
            return Err(AwsError::new(
                400,
                "BadRequest",
                "Object tags cannot be greater than 10",
            ));
        }
        _ => {}
    }
    let allowed = |c: char| c.is_alphanumeric() || c.is_whitespace() || "_.:/=+-@".contains(c);
    let mut tags: Vec<(String, String)> = Vec::new();
    for (key, value) in pairs {
        if key.chars().count() > 128 {
            return Err(invalid("The TagKey you have provided is too long, max 128"));
        }
        if value.chars().count() > 256 {
            return Err(invalid(
                "The TagValue you have provided is too long, max 256",
            ));
        }
        if key.is_empty() || !key.chars().all(allowed) {
            return Err(invalid("The TagKey you have provided is invalid"));
        }
        if !value.chars().all(allowed) {
            return Err(invalid("The TagValue you have provided is invalid"));
        }
        if key.starts_with("aws:") {
            return Err(invalid("System tags cannot be added/updated by requester"));
        }
        if tags.iter().any(|(k, _)| *k == key) {
            return Err(invalid("Cannot provide multiple Tags with the same key"));
        }
        tags.push((key, value));
    }
    Ok(tags)
}

// ------------------------------------------------------------ listing

/// A key or, with a delimiter, a common prefix standing for every key under it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Listed<'a> {
    Key(&'a str),
    Prefix(&'a str),
}

impl Listed<'_> {
    fn name(&self) -> &str {
        match self {
            Listed::Key(k) | Listed::Prefix(k) => k,
        }
    }
}

/// The keys under `prefix` in order, those with `delimiter` after the prefix rolled up
/// into one common prefix each. Keys sharing a prefix are adjacent in sorted order, so
/// comparing with the last entry is enough to roll them up.
fn roll_up<'a>(
    keys: impl Iterator<Item = &'a str>,
    prefix: &str,
    delimiter: &str,
) -> Vec<Listed<'a>> {
    let mut out: Vec<Listed<'a>> = Vec::new();
    for key in keys.filter(|k| k.starts_with(prefix)) {
        let common = (!delimiter.is_empty())
            .then(|| key[prefix.len()..].find(delimiter))
            .flatten()
            .map(|i| &key[..prefix.len() + i + delimiter.len()]);
        match common {
            Some(p) if out.last() == Some(&Listed::Prefix(p)) => {}
            Some(p) => out.push(Listed::Prefix(p)),
            None => out.push(Listed::Key(key)),
        }
    }
    out
}

/// The list parameters every list operation shares.
struct ListParams<'a> {
    prefix: &'a str,
    delimiter: &'a str,
    max_keys: usize,
    url_encoded: bool,
}

fn list_params(req: &AwsRequest) -> Result<ListParams<'_>, AwsError> {
    let max_keys = match req.param("max-keys") {
        None => MAX_KEYS,
        Some(v) => {
            let n = v.parse::<i64>().map_err(|_| {
                invalid_argument(
                    "Provided max-keys not an integer or within integer range",
                    "max-keys",
                    v,
                )
            })?;
            if n < 0 {
                return Err(invalid_argument(
                    "Argument maxKeys must be an integer between 0 and 2147483647",
                    "maxKeys",
                    v,
                ));
            }
            usize::try_from(n).unwrap_or(MAX_KEYS).min(MAX_KEYS)
        }
    };
    let url_encoded = match req.param("encoding-type") {
        None => false,
        Some("url") => true,
        Some(other) => {
            return Err(invalid_argument(
                "Invalid Encoding Method specified in Request",
                "encoding-type",
                other,
            ))
        }
    };
    Ok(ListParams {
        prefix: req.param("prefix").unwrap_or(""),
        delimiter: req.param("delimiter").unwrap_or(""),
        max_keys,
        url_encoded,
    })
}

impl ListParams<'_> {
    /// A key or prefix as the response writes it: URL-encoded when the client asked
    /// (`encoding-type=url`, which botocore always sends).
    fn out(&self, s: &str) -> String {
        if self.url_encoded {
            url_encode(s)
        } else {
            s.to_string()
        }
    }

    /// The elements every list result starts with.
    fn header(&self, doc: &mut Element, name: &str) {
        doc.push_leaf("Name", name);
        doc.push_leaf("Prefix", self.out(self.prefix));
        if !self.delimiter.is_empty() {
            doc.push_leaf("Delimiter", self.out(self.delimiter));
        }
        doc.push_leaf("MaxKeys", self.max_keys.to_string());
        if self.url_encoded {
            doc.push_leaf("EncodingType", "url");
        }
    }

    fn common_prefix(&self, prefix: &str) -> Element {
        Element::new("CommonPrefixes").with(Element::leaf("Prefix", self.out(prefix)))
    }

    fn contents(&self, key: &str, v: &Version, with_owner: bool) -> Element {
        let mut e = Element::new("Contents")
            .with(Element::leaf("Key", self.out(key)))
            .with(Element::leaf("LastModified", time_millis(v.last_modified)))
            .with(Element::leaf("ETag", quoted(&v.etag)));
        if let Some(c) = &v.checksum {
            e.push_leaf("ChecksumAlgorithm", c.algorithm.to_uppercase());
            e.push_leaf("ChecksumType", c.kind());
        }
        e.push_leaf("Size", v.size.to_string());
        e.push_leaf("StorageClass", v.storage_class());
        if with_owner {
            e.push(owner());
        }
        e
    }
}

/// The current (not deleted) version of every key, in key order.
fn current_objects(bucket: &Bucket) -> impl Iterator<Item = (&str, &Version)> {
    bucket.objects.iter().filter_map(|(k, versions)| {
        versions
            .last()
            .filter(|v| !v.delete_marker)
            .map(|v| (k.as_str(), v))
    })
}

fn list_objects_v2(name: &str, bucket: &Bucket, req: &AwsRequest) -> Outcome {
    let params = list_params(req)?;
    let start_after = req.param("start-after").unwrap_or("");
    let token = match req.param("continuation-token") {
        Some(t) => Some(decode_token(t, "continuation-token")?),
        None => None,
    };
    let current: BTreeMap<&str, &Version> = current_objects(bucket).collect();
    let keys = current.keys().copied().filter(|k| *k > start_after);
    let entries: Vec<Listed> = roll_up(keys, params.prefix, params.delimiter)
        .into_iter()
        .filter(|e| token.as_deref().is_none_or(|t| e.name() > t))
        .collect();
    let page = &entries[..entries.len().min(params.max_keys)];
    let truncated = params.max_keys > 0 && page.len() < entries.len();
    let mut doc = Element::new("ListBucketResult").attr("xmlns", NS);
    params.header(&mut doc, name);
    if let Some(t) = req.param("continuation-token") {
        doc.push_leaf("ContinuationToken", t);
    }
    if let (true, Some(last)) = (truncated, page.last()) {
        doc.push_leaf("NextContinuationToken", encode_token(last.name()));
    }
    if !start_after.is_empty() {
        doc.push_leaf("StartAfter", params.out(start_after));
    }
    doc.push_leaf("KeyCount", page.len().to_string());
    doc.push_leaf("IsTruncated", truncated.to_string());
    let with_owner = req.param("fetch-owner") == Some("true");
    push_entries(&mut doc, &params, page, |key| {
        current
            .get(key)
            .map(|v| params.contents(key, v, with_owner))
    });
    Ok(xml(200, &doc))
}

fn list_objects_v1(name: &str, bucket: &Bucket, req: &AwsRequest) -> Outcome {
    let params = list_params(req)?;
    let marker = req.param("marker").unwrap_or("");
    let current: BTreeMap<&str, &Version> = current_objects(bucket).collect();
    let keys = current.keys().copied().filter(|k| *k > marker);
    let entries: Vec<Listed> = roll_up(keys, params.prefix, params.delimiter)
        .into_iter()
        .filter(|e| e.name() > marker)
        .collect();
    let page = &entries[..entries.len().min(params.max_keys)];
    let truncated = params.max_keys > 0 && page.len() < entries.len();
    let mut doc = Element::new("ListBucketResult").attr("xmlns", NS);
    params.header(&mut doc, name);
    doc.push_leaf("Marker", params.out(marker));
    // S3 sends NextMarker only with a delimiter; without one the last key is the marker.
    if let (true, false, Some(last)) = (truncated, params.delimiter.is_empty(), page.last()) {
        doc.push_leaf("NextMarker", params.out(last.name()));
    }
    doc.push_leaf("IsTruncated", truncated.to_string());
    push_entries(&mut doc, &params, page, |key| {
        current.get(key).map(|v| params.contents(key, v, true))
    });
    Ok(xml(200, &doc))
}

/// Appends `Contents` for the keys of a page, then `CommonPrefixes`, as S3 orders them.
fn push_entries<'a>(
    doc: &mut Element,
    params: &ListParams,
    page: &[Listed<'a>],
    contents: impl Fn(&'a str) -> Option<Element>,
) {
    for entry in page {
        if let Listed::Key(key) = entry {
            if let Some(e) = contents(key) {
                doc.push(e);
            }
        }
    }
    for entry in page {
        if let Listed::Prefix(p) = entry {
            doc.push(params.common_prefix(p));
        }
    }
}

/// One row of ListObjectVersions.
enum VersionRow<'a> {
    Version {
        key: &'a str,
        version: &'a Version,
        latest: bool,
    },
    Prefix(&'a str),
}

fn list_object_versions(name: &str, bucket: &Bucket, req: &AwsRequest) -> Outcome {
    let params = list_params(req)?;
    let key_marker = req.param("key-marker").unwrap_or("");
    let version_marker = req.param("version-id-marker").unwrap_or("");
    if !version_marker.is_empty() && key_marker.is_empty() {
        return Err(invalid_argument(
            "A version-id marker cannot be specified without a key marker.",
            "version-id-marker",
            version_marker,
        )
        .into());
    }
    let listed = roll_up(
        bucket.objects.keys().map(String::as_str),
        params.prefix,
        params.delimiter,
    );
    let mut rows: Vec<VersionRow> = Vec::new();
    for entry in listed {
        match entry {
            Listed::Prefix(p) => {
                if key_marker.is_empty() || p > key_marker {
                    rows.push(VersionRow::Prefix(p));
                }
            }
            Listed::Key(key) => {
                if !key_marker.is_empty() && key < key_marker {
                    continue;
                }
                let Some(versions) = bucket.objects.get(key) else {
                    continue;
                };
                // Newest first; on the marker's key, only the versions after the marker.
                let newest_first = versions.iter().rev().enumerate();
                let skip = if key == key_marker {
                    match versions
                        .iter()
                        .rev()
                        .position(|v| v.version_id == version_marker)
                    {
                        Some(i) if !version_marker.is_empty() => i + 1,
                        _ => versions.len(),
                    }
                } else {
                    0
                };
                for (i, version) in newest_first.skip(skip) {
                    rows.push(VersionRow::Version {
                        key,
                        version,
                        latest: i == 0,
                    });
                }
            }
        }
    }
    let page_len = rows.len().min(params.max_keys);
    let truncated = params.max_keys > 0 && page_len < rows.len();
    let mut doc = Element::new("ListVersionsResult").attr("xmlns", NS);
    params.header(&mut doc, name);
    doc.push_leaf("KeyMarker", params.out(key_marker));
    doc.push_leaf("VersionIdMarker", version_marker);
    if truncated {
        match &rows[page_len - 1] {
            VersionRow::Version { key, version, .. } => {
                doc.push_leaf("NextKeyMarker", params.out(key));
                doc.push_leaf("NextVersionIdMarker", version.version_id.as_str());
            }
            VersionRow::Prefix(p) => doc.push_leaf("NextKeyMarker", params.out(p)),
        }
    }
    doc.push_leaf("IsTruncated", truncated.to_string());
    for row in &rows[..page_len] {
        if let VersionRow::Version {
            key,
            version,
            latest,
        } = row
        {
            let mut e = Element::new(if version.delete_marker {
                "DeleteMarker"
            } else {
                "Version"
            });
            e.push_leaf("Key", params.out(key));
            e.push_leaf("VersionId", version.version_id.as_str());
            e.push_leaf("IsLatest", latest.to_string());
            e.push_leaf("LastModified", time_millis(version.last_modified));
            if !version.delete_marker {
                e.push_leaf("ETag", quoted(&version.etag));
                if let Some(c) = &version.checksum {
                    e.push_leaf("ChecksumAlgorithm", c.algorithm.to_uppercase());
                    e.push_leaf("ChecksumType", c.kind());
                }
                e.push_leaf("Size", version.size.to_string());
                e.push_leaf("StorageClass", version.storage_class());
            }
            e.push(owner());
            doc.push(e);
        }
    }
    for row in &rows[..page_len] {
        if let VersionRow::Prefix(p) = row {
            doc.push(params.common_prefix(p));
        }
    }
    Ok(xml(200, &doc))
}

// ------------------------------------------------------------ objects

fn put_object(bucket: &mut Bucket, key: &str, req: &AwsRequest, now: DateTime<Utc>) -> Outcome {
    check_object_extras(req)?;
    let body = payload(req)?;
    let checksum = integrity(req, &body, false)?;
    check_write_conditions(req, key, bucket.objects.get(key).and_then(|v| v.last()))?;
    let mut version = new_object(req, bucket, now)?;
    let sse = version.sse.clone();
    let etag = hex(&digest::md5(&body.data));
    version.etag = etag.clone();
    version.size = body.data.len() as u64;
    version.checksum = checksum.clone();
    version.data = B64.encode(&body.data);
    let version_id = add_version(bucket, key, version);
    let mut response = AwsResponse::empty(200).with_header("etag", quoted(&etag));
    if bucket.versioning == Some(Versioning::Enabled) {
        response = response.with_header("x-amz-version-id", version_id);
    }
    response.headers.extend(sse.iter().flat_map(sse_headers));
    if let Some(c) = checksum {
        response = response
            .with_header(&format!("x-amz-checksum-{}", c.algorithm), c.value.as_str())
            .with_header("x-amz-checksum-type", c.kind());
    }
    Ok(response)
}

/// A new object without content, as a PutObject or CreateMultipartUpload request
/// describes it: content type, stored headers, metadata, storage class, encryption and
/// tags.
fn new_object(req: &AwsRequest, bucket: &Bucket, now: DateTime<Utc>) -> Result<Version, AwsError> {
    Ok(Version {
        version_id: String::new(),
        delete_marker: false,
        last_modified: now,
        etag: String::new(),
        size: 0,
        content_type: req
            .header("content-type")
            .unwrap_or("binary/octet-stream")
            .to_string(),
        storage_class: storage_class(req)?,
        headers: stored_headers(req),
        metadata: user_metadata(req)?,
        sse: Some(object_sse(req, bucket)?),
        checksum: None,
        tags: header_tags(req)?,
        data: String::new(),
    })
}

/// Adds a version of `key` as the bucket's versioning state says: a new version ID when
/// enabled; otherwise the `null` version, replacing the previous one. Returns its ID.
fn add_version(bucket: &mut Bucket, key: &str, mut version: Version) -> String {
    let versions = bucket.objects.entry(key.to_string()).or_default();
    if bucket.versioning == Some(Versioning::Enabled) {
        version.version_id = new_version_id();
    } else {
        version.version_id = "null".into();
        versions.retain(|v| v.version_id != "null");
    }
    let id = version.version_id.clone();
    versions.push(version);
    id
}

/// `If-None-Match: *` (create only if absent) and `If-Match: "etag"` (replace only that
/// content) on writes; a delete marker counts as absent.
fn check_write_conditions(
    req: &AwsRequest,
    key: &str,
    latest: Option<&Version>,
) -> Result<(), AwsError> {
    let current = latest.filter(|v| !v.delete_marker);
    if let Some(condition) = req.header("if-none-match") {
        if condition.trim() != "*" {
            return Err(AwsError::new(
                501,
                "NotImplemented",
                "A header you provided implies functionality that is not implemented",
            )
            .with("Header", "If-None-Match"));
        }
        if current.is_some() {
            return Err(precondition_failed("If-None-Match"));
        }
    }
    if let Some(condition) = req.header("if-match") {
        match current {
            None => return Err(no_such_key(key)),
            Some(v) if !etag_matches(condition, &v.etag) => {
                return Err(precondition_failed("If-Match"))
            }
            Some(_) => {}
        }
    }
    Ok(())
}

fn get_object(bucket: &Bucket, key: &str, req: &AwsRequest) -> Outcome {
    let head = req.method == Method::HEAD;
    let version = select_version(bucket, key, req.param("versionId"), req.method.as_str())?;
    if let Some(response) = read_conditions(req, version)? {
        return Ok(response);
    }
    let data = version.bytes()?;
    let total = data.len() as u64;
    let mut headers = object_headers(bucket, version);
    let (status, body) = match req.header("range").and_then(|r| parse_range(r, total)) {
        None => (200, data),
        Some(Ok((start, end))) => {
            headers.push((
                "content-range".into(),
                format!("bytes {start}-{end}/{total}"),
            ));
            let range = usize::try_from(start).unwrap_or(usize::MAX)
                ..=usize::try_from(end).unwrap_or(usize::MAX);
            (206, data.get(range).map(<[u8]>::to_vec).unwrap_or_default())
        }
        Some(Err(())) => {
            return Err(AwsError::new(
                416,
                "InvalidRange",
                "The requested range is not satisfiable",
            )
            .with("RangeRequested", req.header("range").unwrap_or(""))
            .with("ActualObjectSize", total.to_string())
            .into())
        }
    };
    // A checksum describes the whole object: S3 answers it only when asked, and not for
    // a range.
    let checksum_mode = req
        .header("x-amz-checksum-mode")
        .is_some_and(|m| m.eq_ignore_ascii_case("enabled"));
    if let (true, 200, Some(c)) = (checksum_mode, status, &version.checksum) {
        headers.push((format!("x-amz-checksum-{}", c.algorithm), c.value.clone()));
        headers.push(("x-amz-checksum-type".into(), c.kind().into()));
    }
    // `response-content-type` and friends override what is stored, for this answer.
    for (param, header) in [
        ("response-content-type", "content-type"),
        ("response-content-disposition", "content-disposition"),
        ("response-content-encoding", "content-encoding"),
        ("response-content-language", "content-language"),
        ("response-cache-control", "cache-control"),
        ("response-expires", "expires"),
    ] {
        if let Some(value) = req.param(param) {
            headers.retain(|(k, _)| k != header);
            headers.push((header.into(), value.into()));
        }
    }
    if head {
        // Without a body the length must be stated, as HEAD answers do.
        headers.push(("content-length".into(), body.len().to_string()));
    }
    Ok(AwsResponse {
        status,
        headers,
        body: if head { Vec::new() } else { body },
    })
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
            ("last-modified".to_string(), http_date(v.last_modified)),
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

/// The conditional-read headers in the order S3 (RFC 7232) evaluates them: a failed
/// `If-Match`/`If-Unmodified-Since` is 412, a matching `If-None-Match` or an unmodified
/// `If-Modified-Since` is 304.
fn read_conditions(req: &AwsRequest, v: &Version) -> Result<Option<AwsResponse>, AwsError> {
    let modified = v.last_modified.timestamp();
    let date = |name: &str| {
        req.header(name)
            .and_then(|d| DateTime::parse_from_rfc2822(d).ok())
            .map(|d| d.timestamp())
    };
    if let Some(m) = req.header("if-match") {
        if !etag_matches(m, &v.etag) {
            return Err(precondition_failed("If-Match"));
        }
    } else if date("if-unmodified-since").is_some_and(|t| modified > t) {
        return Err(precondition_failed("If-Unmodified-Since"));
    }
    let not_modified = match req.header("if-none-match") {
        Some(m) => etag_matches(m, &v.etag),
        None => date("if-modified-since").is_some_and(|t| modified <= t),
    };
    Ok(not_modified.then(|| {
        AwsResponse::empty(304)
            .with_header("etag", quoted(&v.etag))
            .with_header("last-modified", http_date(v.last_modified))
    }))
}

/// A single `bytes=` range resolved against the object size: `None` when there is no
/// usable range (S3 then answers the whole object), `Err` when it cannot be satisfied.
fn parse_range(header: &str, size: u64) -> Option<Result<(u64, u64), ()>> {
    let spec = header.trim().strip_prefix("bytes=")?;
    if spec.contains(',') {
        return None;
    }
    let (first, last) = spec.split_once('-')?;
    let (first, last) = (first.trim(), last.trim());
    if first.is_empty() {
        let suffix: u64 = last.parse().ok()?;
        if suffix == 0 || size == 0 {
            return Some(Err(()));
        }
        return Some(Ok((size.saturating_sub(suffix), size - 1)));
    }
    let start: u64 = first.parse().ok()?;
    let end = if last.is_empty() {
        u64::MAX
    } else {
        let end: u64 = last.parse().ok()?;
        if end < start {
            return None;
        }
        end
    };
    if start >= size {
        return Some(Err(()));
    }
    Some(Ok((start, end.min(size - 1))))
}

/// The headers GET and HEAD answer for a version.
fn object_headers(bucket: &Bucket, v: &Version) -> Vec<(String, String)> {
    let mut headers = vec![
        ("content-type".to_string(), v.content_type.clone()),
        ("etag".to_string(), quoted(&v.etag)),
        ("last-modified".to_string(), http_date(v.last_modified)),
        ("accept-ranges".to_string(), "bytes".to_string()),
    ];
    if bucket.versioning.is_some() || v.version_id != "null" {
        headers.push(("x-amz-version-id".into(), v.version_id.clone()));
    }
    if let Some(sse) = &v.sse {
        headers.extend(sse_headers(sse));
    }
    if v.storage_class() != "STANDARD" {
        headers.push(("x-amz-storage-class".into(), v.storage_class().to_string()));
    }
    if !v.tags.is_empty() {
        headers.push(("x-amz-tagging-count".into(), v.tags.len().to_string()));
    }
    headers.extend(v.headers.iter().cloned());
    headers.extend(
        v.metadata
            .iter()
            .map(|(k, value)| (format!("x-amz-meta-{k}"), value.clone())),
    );
    headers
}

fn delete_object(bucket: &mut Bucket, key: &str, req: &AwsRequest, now: DateTime<Utc>) -> Outcome {
    if let Some(condition) = req.header("if-match") {
        let current = bucket
            .objects
            .get(key)
            .and_then(|v| v.last())
            .filter(|v| !v.delete_marker);
        match current {
            None => return Err(no_such_key(key).into()),
            Some(v) if !etag_matches(condition, &v.etag) => {
                return Err(precondition_failed("If-Match").into())
            }
            Some(_) => {}
        }
    }
    let version_id = req.param("versionId");
    if version_id == Some("") {
        return Err(
            invalid_argument("Version id cannot be the empty string", "versionId", "").into(),
        );
    }
    let removal = delete_one(bucket, key, version_id, now);
    let mut response = AwsResponse::empty(204);
    if let Some(marker) = &removal.marker {
        response = response
            .with_header("x-amz-delete-marker", "true")
            .with_header("x-amz-version-id", marker.clone());
    } else if let Some(id) = &removal.version_id {
        response = response.with_header("x-amz-version-id", id.clone());
    }
    Ok(response)
}

/// What a delete did: the version it removed by ID, and the delete marker it added or
/// removed.
#[derive(Debug, PartialEq, Eq)]
struct Removal {
    version_id: Option<String>,
    marker: Option<String>,
}

/// Deletes as DeleteObject does. By version ID: that version goes for good (deleting one
/// that does not exist is not an error). Without: the object goes when versioning was
/// never enabled; otherwise a delete marker becomes current — with a new ID when
/// versioning is enabled, as the `null` version (replacing it) when suspended.
fn delete_one(
    bucket: &mut Bucket,
    key: &str,
    version_id: Option<&str>,
    now: DateTime<Utc>,
) -> Removal {
    let removal = match (version_id, bucket.versioning) {
        (Some(id), _) => {
            let mut marker = None;
            if let Some(versions) = bucket.objects.get_mut(key) {
                if let Some(i) = versions.iter().position(|v| v.version_id == id) {
                    if versions.remove(i).delete_marker {
                        marker = Some(id.to_string());
                    }
                }
            }
            Removal {
                version_id: Some(id.to_string()),
                marker,
            }
        }
        (None, None) => {
            bucket.objects.remove(key);
            Removal {
                version_id: None,
                marker: None,
            }
        }
        (None, Some(state)) => {
            let id = match state {
                Versioning::Enabled => new_version_id(),
                Versioning::Suspended => "null".to_string(),
            };
            let versions = bucket.objects.entry(key.to_string()).or_default();
            if state == Versioning::Suspended {
                versions.retain(|v| v.version_id != "null");
            }
            versions.push(Version::delete_marker(id.clone(), now));
            Removal {
                version_id: None,
                marker: Some(id),
            }
        }
    };
    if bucket.objects.get(key).is_some_and(Vec::is_empty) {
        bucket.objects.remove(key);
    }
    removal
}

fn delete_objects(bucket: &mut Bucket, req: &AwsRequest, now: DateTime<Utc>) -> Outcome {
    let doc = configuration(req, "Delete")?;
    expect_children(&doc, &[("Object", MAX_DELETE_OBJECTS), ("Quiet", 1)])?;
    let quiet = match doc.text_of("Quiet") {
        Some(q) => parse_bool(q)?,
        None => false,
    };
    let mut targets = Vec::new();
    for object in doc.all("Object") {
        expect_children(
            object,
            &[
                ("Key", 1),
                ("VersionId", 1),
                ("ETag", 1),
                ("LastModifiedTime", 1),
                ("Size", 1),
            ],
        )?;
        let key = object.text_of("Key").ok_or_else(malformed)?;
        targets.push((key, object.text_of("VersionId"), object.text_of("ETag")));
    }
    if targets.is_empty() {
        return Err(malformed().into());
    }
    let mut result = Element::new("DeleteResult").attr("xmlns", NS);
    for (key, version_id, etag) in targets {
        let failure = if key.is_empty() || key.len() > MAX_KEY_BYTES {
            Some(("KeyTooLongError", "Your key is too long"))
        } else if version_id == Some("") {
            Some(("InvalidArgument", "Version id cannot be the empty string"))
        } else if let Some(etag) = etag {
            let versions = bucket.objects.get(key);
            let addressed = match version_id {
                Some(id) => versions.and_then(|vs| vs.iter().find(|v| v.version_id == id)),
                None => versions.and_then(|vs| vs.last()),
            };
            match addressed {
                None => Some(("NoSuchKey", "The specified key does not exist.")),
                Some(v) if v.delete_marker => {
                    Some(("NoSuchKey", "The specified key does not exist."))
                }
                Some(v) if etag_matches(etag, &v.etag) => None,
                Some(_) => Some((
                    "PreconditionFailed",
                    "At least one of the pre-conditions you specified did not hold",
                )),
            }
        } else {
            None
        };
        if let Some((code, message)) = failure {
            let mut error = Element::new("Error").with(Element::leaf("Key", key));
            if let Some(id) = version_id {
                error.push_leaf("VersionId", id);
            }
            error.push_leaf("Code", code);
            error.push_leaf("Message", message);
            result.push(error);
            continue;
        }
        let removal = delete_one(bucket, key, version_id, now);
        if quiet {
            continue;
        }
        let mut deleted = Element::new("Deleted").with(Element::leaf("Key", key));
        if let Some(id) = &removal.version_id {
            deleted.push_leaf("VersionId", id.as_str());
        }
        if let Some(marker) = &removal.marker {
            deleted.push_leaf("DeleteMarker", "true");
            deleted.push_leaf("DeleteMarkerVersionId", marker.as_str());
        }
        result.push(deleted);
    }
    Ok(xml(200, &result))
}

/// `x-amz-copy-source`: `[/]bucket/key[?versionId=id]`, URL-encoded.
fn parse_copy_source(source: &str) -> Result<(String, String, Option<String>), AwsError> {
    let invalid = || {
        AwsError::new(
            400,
            "InvalidArgument",
            "Copy Source must mention the source bucket and key: sourcebucket/sourcekey",
        )
        .with("ArgumentName", "x-amz-copy-source")
        .with("ArgumentValue", source)
    };
    let (path, version) = match source.split_once("?versionId=") {
        Some((p, v)) => (p, Some(percent_decode(v))),
        None => (source, None),
    };
    let path = percent_decode(path.trim_start_matches('/'));
    let (bucket, key) = path.split_once('/').ok_or_else(invalid)?;
    if bucket.is_empty() || key.is_empty() {
        return Err(invalid());
    }
    Ok((bucket.to_string(), key.to_string(), version))
}

/// Refuses object ACLs, which every emulated bucket refuses as S3 does under
/// bucket-owner-enforced ownership.
fn check_object_extras(req: &AwsRequest) -> Result<(), AwsError> {
    let acl = req
        .header("x-amz-acl")
        .is_some_and(|acl| !matches!(acl, "private" | "bucket-owner-full-control"));
    let grants = req
        .headers
        .iter()
        .any(|(k, _)| k.to_ascii_lowercase().starts_with("x-amz-grant-"));
    if acl || grants {
        return Err(AwsError::new(
            400,
            "AccessControlListNotSupported",
            "The bucket does not allow ACLs",
        ));
    }
    Ok(())
}

/// How a new object is encrypted: as the request asks, else as the bucket's default.
fn object_sse(req: &AwsRequest, bucket: &Bucket) -> Result<Sse, AwsError> {
    if req
        .header("x-amz-server-side-encryption-customer-algorithm")
        .is_some()
    {
        return Err(not_emulated("SSE-C (customer-provided keys)"));
    }
    let key_header = req.header("x-amz-server-side-encryption-aws-kms-key-id");
    let default = &bucket.encryption;
    let (algorithm, key) = match req.header("x-amz-server-side-encryption") {
        Some(a) => {
            if !SSE_ALGORITHMS.contains(&a) {
                return Err(invalid_argument(
                    "The encryption method specified is not supported",
                    "x-amz-server-side-encryption",
                    a,
                ));
            }
            let same_as_default = default.algorithm == a;
            let key = key_header
                .map(str::to_string)
                .or_else(|| default.kms_key_id.clone().filter(|_| same_as_default));
            (a.to_string(), key)
        }
        None => (
            default.algorithm.clone(),
            key_header
                .map(str::to_string)
                .or_else(|| default.kms_key_id.clone()),
        ),
    };
    let kms = algorithm != "AES256";
    if !kms && key_header.is_some() {
        return Err(invalid_argument(
            "a KMS key ID is only valid with the aws:kms or aws:kms:dsse encryption method",
            "x-amz-server-side-encryption-aws-kms-key-id",
            key_header.unwrap_or(""),
        ));
    }
    let bucket_key_enabled = kms
        && match req.header("x-amz-server-side-encryption-bucket-key-enabled") {
            Some(v) => v.eq_ignore_ascii_case("true"),
            None => default.bucket_key_enabled,
        };
    Ok(Sse {
        kms_key_id: kms.then(|| kms_key_arn(key.as_deref(), &bucket.region)),
        algorithm,
        bucket_key_enabled,
    })
}

/// S3 reports the KMS key of an object as an ARN, whatever form it was given in; without
/// one it is the AWS-managed `aws/s3` key.
fn kms_key_arn(key: Option<&str>, region: &str) -> String {
    match key {
        Some(k) if k.starts_with("arn:") => k.to_string(),
        Some(k) if k.starts_with("alias/") => format!("arn:aws:kms:{region}:{ACCOUNT}:{k}"),
        Some(k) => format!("arn:aws:kms:{region}:{ACCOUNT}:key/{k}"),
        None => format!("arn:aws:kms:{region}:{ACCOUNT}:alias/aws/s3"),
    }
}

fn sse_headers(sse: &Sse) -> Vec<(String, String)> {
    let mut headers = vec![(
        "x-amz-server-side-encryption".to_string(),
        sse.algorithm.clone(),
    )];
    if let Some(key) = &sse.kms_key_id {
        headers.push((
            "x-amz-server-side-encryption-aws-kms-key-id".into(),
            key.clone(),
        ));
    }
    if sse.bucket_key_enabled {
        headers.push((
            "x-amz-server-side-encryption-bucket-key-enabled".into(),
            "true".into(),
        ));
    }
    headers
}

fn storage_class(req: &AwsRequest) -> Result<Option<String>, AwsError> {
    match req.header("x-amz-storage-class") {
        None => Ok(None),
        Some(c) if STORAGE_CLASSES.contains(&c) => Ok(Some(c.to_string())),
        Some(c @ ("GLACIER" | "DEEP_ARCHIVE")) => Err(not_emulated(&format!(
            "the {c} storage class (objects that need a restore)"
        ))),
        Some(c) => Err(AwsError::new(
            400,
            "InvalidStorageClass",
            "The storage class you specified is not valid",
        )
        .with("StorageClassRequested", c)),
    }
}

fn stored_headers(req: &AwsRequest) -> Vec<(String, String)> {
    STORED_HEADERS
        .iter()
        .filter_map(|name| {
            let value = req.header(name)?;
            // The transfer framing is not part of the object.
            let value = if *name == "content-encoding" {
                value
                    .split(',')
                    .map(str::trim)
                    .filter(|e| !e.eq_ignore_ascii_case("aws-chunked") && !e.is_empty())
                    .collect::<Vec<_>>()
                    .join(",")
            } else {
                value.to_string()
            };
            (!value.is_empty()).then(|| (name.to_string(), value))
        })
        .collect()
}

fn user_metadata(req: &AwsRequest) -> Result<Vec<(String, String)>, AwsError> {
    let metadata: Vec<(String, String)> = req
        .headers
        .iter()
        .filter_map(|(k, v)| {
            k.to_ascii_lowercase()
                .strip_prefix("x-amz-meta-")
                .map(|name| (name.to_string(), v.clone()))
        })
        .collect();
    let size: usize = metadata.iter().map(|(k, v)| k.len() + v.len()).sum();
    if size > MAX_METADATA_BYTES {
        return Err(AwsError::new(
            400,
            "MetadataTooLarge",
            "Your metadata headers exceed the maximum allowed metadata size",
        )
        .with("Size", size.to_string())
        .with("MaxSizeAllowed", MAX_METADATA_BYTES.to_string()));
    }
    Ok(metadata)
}

// ------------------------------------------------------------ object tags

/// `<Tagging><TagSet>…</TagSet></Tagging>`, as GetBucketTagging and GetObjectTagging
/// answer.
fn tagging(tags: &[(String, String)]) -> Element {
    let mut set = Element::new("TagSet");
    for (k, v) in tags {
        set.push(
            Element::new("Tag")
                .with(Element::leaf("Key", k.as_str()))
                .with(Element::leaf("Value", v.as_str())),
        );
    }
    Element::new("Tagging").attr("xmlns", NS).with(set)
}

/// The version the object tagging operations address (`?versionId=`, else the current
/// one), as GetObject would; they answer its ID the way GetObject does.
fn tagged_version<'a>(
    bucket: &'a mut Bucket,
    key: &str,
    req: &AwsRequest,
) -> Result<&'a mut Version, Fail> {
    let id = select_version(bucket, key, req.param("versionId"), req.method.as_str())?
        .version_id
        .clone();
    bucket
        .objects
        .get_mut(key)
        .and_then(|vs| vs.iter_mut().find(|v| v.version_id == id))
        .ok_or_else(|| no_such_key(key).into())
}

fn with_version_id(response: AwsResponse, bucket_versioned: bool, v: &Version) -> AwsResponse {
    if bucket_versioned || v.version_id != "null" {
        response.with_header("x-amz-version-id", v.version_id.clone())
    } else {
        response
    }
}

fn get_object_tagging(bucket: &mut Bucket, key: &str, req: &AwsRequest) -> Outcome {
    let versioned = bucket.versioning.is_some();
    let v = tagged_version(bucket, key, req)?;
    Ok(with_version_id(xml(200, &tagging(&v.tags)), versioned, v))
}

fn put_object_tagging(bucket: &mut Bucket, key: &str, req: &AwsRequest) -> Outcome {
    let tags = tagging_document(req, Tagged::Object)?;
    let versioned = bucket.versioning.is_some();
    let v = tagged_version(bucket, key, req)?;
    v.tags = tags;
    Ok(with_version_id(AwsResponse::empty(200), versioned, v))
}

fn delete_object_tagging(bucket: &mut Bucket, key: &str, req: &AwsRequest) -> Outcome {
    let versioned = bucket.versioning.is_some();
    let v = tagged_version(bucket, key, req)?;
    v.tags.clear();
    Ok(with_version_id(AwsResponse::empty(204), versioned, v))
}

// ------------------------------------------------------------ multipart uploads

fn create_multipart_upload(
    name: &str,
    bucket: &mut Bucket,
    key: &str,
    req: &AwsRequest,
    now: DateTime<Utc>,
) -> Outcome {
    check_object_extras(req)?;
    let (checksum_algorithm, composite) = upload_checksum(req)?;
    let object = new_object(req, bucket, now)?;
    let upload_id = random_id(64);
    let mut response = xml(
        200,
        &Element::new("InitiateMultipartUploadResult")
            .attr("xmlns", NS)
            .with(Element::leaf("Bucket", name))
            .with(Element::leaf("Key", key))
            .with(Element::leaf("UploadId", upload_id.as_str())),
    );
    response
        .headers
        .extend(object.sse.iter().flat_map(sse_headers));
    if let Some(algorithm) = &checksum_algorithm {
        response = response
            .with_header("x-amz-checksum-algorithm", algorithm.to_uppercase())
            .with_header(
                "x-amz-checksum-type",
                if composite {
                    "COMPOSITE"
                } else {
                    "FULL_OBJECT"
                },
            );
    }
    bucket.uploads.insert(
        upload_id,
        Upload {
            key: key.to_string(),
            initiated: now,
            object,
            checksum_algorithm,
            composite,
            parts: BTreeMap::new(),
        },
    );
    Ok(response)
}

/// `x-amz-checksum-algorithm` and `x-amz-checksum-type` of CreateMultipartUpload: the
/// algorithm (lowercase) and whether the object's checksum will be composite. CRC-64/NVME
/// only has full-object checksums and the others default to composite; full-object ones
/// exist only for the CRCs.
fn upload_checksum(req: &AwsRequest) -> Result<(Option<String>, bool), AwsError> {
    let invalid = |message: String| AwsError::new(400, "InvalidRequest", message);
    let algorithm = match req.header("x-amz-checksum-algorithm") {
        None => None,
        Some(sent) => {
            let lower = sent.trim().to_ascii_lowercase();
            if !CHECKSUM_ALGORITHMS.iter().any(|(a, _)| *a == lower) {
                return Err(invalid(format!(
                    "Checksum algorithm provided is unsupported. Please try again with any of the valid types: [{}]",
                    CHECKSUM_ALGORITHMS
                        .iter()
                        .map(|(a, _)| a.to_uppercase())
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
            Some(lower)
        }
    };
    let kind = req
        .header("x-amz-checksum-type")
        .map(|t| t.trim().to_ascii_uppercase());
    match (algorithm, kind.as_deref()) {
        (None, None) => Ok((None, false)),
        (None, Some(_)) => Err(invalid(
            "The x-amz-checksum-type header can only be used with the x-amz-checksum-algorithm header.".into(),
        )),
        (Some(a), None) => {
            let composite = a != "crc64nvme";
            Ok((Some(a), composite))
        }
        (Some(a), Some("COMPOSITE")) if a != "crc64nvme" => Ok((Some(a), true)),
        (Some(a), Some("FULL_OBJECT")) if matches!(a.as_str(), "crc32" | "crc32c" | "crc64nvme") => {
            Ok((Some(a), false))
        }
        (Some(a), Some(kind @ ("COMPOSITE" | "FULL_OBJECT"))) => Err(invalid(format!(
            "The {kind} checksum type cannot be used with the {a} checksum algorithm."
        ))),
        (Some(_), Some(other)) => Err(invalid_argument(
            "Value for x-amz-checksum-type header is invalid.",
            "x-amz-checksum-type",
            other,
        )),
    }
}

/// The upload `upload_id` of `key`; a known ID of another key is no upload of this one.
fn upload_of<'a>(bucket: &'a Bucket, key: &str, upload_id: &str) -> Result<&'a Upload, AwsError> {
    bucket
        .uploads
        .get(upload_id)
        .filter(|u| u.key == key)
        .ok_or_else(|| no_such_upload(upload_id))
}

fn upload_of_mut<'a>(
    bucket: &'a mut Bucket,
    key: &str,
    upload_id: &str,
) -> Result<&'a mut Upload, AwsError> {
    bucket
        .uploads
        .get_mut(upload_id)
        .filter(|u| u.key == key)
        .ok_or_else(|| no_such_upload(upload_id))
}

fn part_number(req: &AwsRequest) -> Result<u32, AwsError> {
    let raw = req.param("partNumber").unwrap_or("");
    raw.parse::<u32>()
        .ok()
        .filter(|n| (1..=MAX_PART_NUMBER).contains(n))
        .ok_or_else(|| {
            invalid_argument(
                "Part number must be an integer between 1 and 10000, inclusive",
                "partNumber",
                raw,
            )
        })
}

/// The checksum a part is stored with. An upload created with an algorithm takes parts
/// with a checksum of that algorithm only, and computes it for parts sent without one,
/// so the object's checksum can be made from them.
fn part_checksum(
    upload: &Upload,
    sent: Option<Checksum>,
    data: &[u8],
) -> Result<Option<Checksum>, AwsError> {
    let Some(expected) = &upload.checksum_algorithm else {
        return Ok(sent);
    };
    match sent {
        Some(c) if c.algorithm == *expected => Ok(Some(c)),
        Some(c) => Err(AwsError::new(
            400,
            "InvalidRequest",
            format!(
                "Checksum Type mismatch occurred, expected checksum Type: {expected}, actual checksum Type: {}",
                c.algorithm
            ),
        )),
        None => Ok(digest::compute(expected, data).map(|d| Checksum {
            algorithm: expected.clone(),
            value: B64.encode(d),
            composite: false,
        })),
    }
}

/// Stores part `number` (replacing an earlier upload of it) and returns its ETag.
fn add_part(
    upload: &mut Upload,
    number: u32,
    data: &[u8],
    checksum: Option<Checksum>,
    now: DateTime<Utc>,
) -> String {
    let etag = hex(&digest::md5(data));
    upload.parts.insert(
        number,
        Part {
            last_modified: now,
            etag: etag.clone(),
            size: data.len() as u64,
            checksum,
            data: B64.encode(data),
        },
    );
    etag
}

fn upload_part(
    bucket: &mut Bucket,
    key: &str,
    upload_id: &str,
    req: &AwsRequest,
    now: DateTime<Utc>,
) -> Outcome {
    let number = part_number(req)?;
    let upload = upload_of_mut(bucket, key, upload_id)?;
    let body = payload(req)?;
    let sent = integrity(req, &body, false)?;
    let checksum = part_checksum(upload, sent, &body.data)?;
    let etag = add_part(upload, number, &body.data, checksum.clone(), now);
    let mut response = AwsResponse::empty(200).with_header("etag", quoted(&etag));
    response
        .headers
        .extend(upload.object.sse.iter().flat_map(sse_headers));
    if let Some(c) = checksum {
        response = response.with_header(&format!("x-amz-checksum-{}", c.algorithm), c.value);
    }
    Ok(response)
}

/// `x-amz-copy-source-range: bytes=first-last`: both offsets, inside the source.
fn copy_range<'a>(header: &str, data: &'a [u8]) -> Result<&'a [u8], AwsError> {
    let malformed_range = || {
        invalid_argument(
            "The x-amz-copy-source-range value must be of the form bytes=first-last where first and last are the zero-based offsets of the first and last bytes to copy",
            "x-amz-copy-source-range",
            header,
        )
    };
    let (first, last) = header
        .trim()
        .strip_prefix("bytes=")
        .and_then(|r| r.split_once('-'))
        .ok_or_else(malformed_range)?;
    let first: usize = first.trim().parse().map_err(|_| malformed_range())?;
    let last: usize = last.trim().parse().map_err(|_| malformed_range())?;
    if first > last || last >= data.len() {
        return Err(AwsError::new(
            400,
            "InvalidArgument",
            format!(
                "Range specified is not valid for source object of size: {}",
                data.len()
            ),
        )
        .with("ArgumentName", "x-amz-copy-source-range")
        .with("ArgumentValue", header));
    }
    Ok(&data[first..=last])
}

/// The `Part` children a CompleteMultipartUpload part list may have.
const COMPLETED_PART_FIELDS: &[(&str, usize)] = &[
    ("PartNumber", 1),
    ("ETag", 1),
    ("ChecksumCRC32", 1),
    ("ChecksumCRC32C", 1),
    ("ChecksumCRC64NVME", 1),
    ("ChecksumSHA1", 1),
    ("ChecksumSHA256", 1),
    ("ChecksumSHA512", 1),
    ("ChecksumMD5", 1),
    ("ChecksumXXHASH64", 1),
    ("ChecksumXXHASH3", 1),
    ("ChecksumXXHASH128", 1),
];

fn complete_multipart_upload(
    name: &str,
    bucket: &mut Bucket,
    key: &str,
    upload_id: &str,
    req: &AwsRequest,
    now: DateTime<Utc>,
) -> Outcome {
    let upload = upload_of(bucket, key, upload_id)?;
    // The body is the part list; an `x-amz-checksum-*` header here is the object's
    // checksum, not the body's, so only the framing is undone.
    let body = payload(req)?;
    let doc = Element::parse(&body.data).map_err(|_| malformed())?;
    if doc.name != "CompleteMultipartUpload" {
        return Err(malformed().into());
    }
    expect_children(&doc, &[("Part", MAX_PART_NUMBER as usize)])?;
    let mut listed: Vec<(u32, &str, &Element)> = Vec::new();
    for part in doc.all("Part") {
        expect_children(part, COMPLETED_PART_FIELDS)?;
        let number = part
            .text_of("PartNumber")
            .and_then(|n| n.trim().parse::<u32>().ok())
            .ok_or_else(malformed)?;
        let etag = part.text_of("ETag").ok_or_else(malformed)?;
        listed.push((number, etag, part));
    }
    if listed.is_empty() {
        return Err(malformed().into());
    }
    if listed.windows(2).any(|w| w[0].0 >= w[1].0) {
        return Err(AwsError::new(
            400,
            "InvalidPartOrder",
            "The list of parts was not in ascending order. Parts must be ordered by part number.",
        )
        .with("UploadId", upload_id)
        .into());
    }
    let mut parts: Vec<(u32, &Part)> = Vec::new();
    for (number, etag, element) in &listed {
        let invalid_part = || {
            AwsError::new(
                400,
                "InvalidPart",
                "One or more of the specified parts could not be found.  The part may not have been uploaded, or the specified entity tag may not match the part's entity tag.",
            )
            .with("UploadId", upload_id)
            .with("PartNumber", number.to_string())
            .with("ETag", *etag)
        };
        let part = upload
            .parts
            .get(number)
            .filter(|p| p.etag == etag.trim().trim_matches('"'))
            .ok_or_else(invalid_part)?;
        // Parts of an upload with a checksum algorithm are listed with their checksums.
        if let (Some(algorithm), Some(stored)) = (&upload.checksum_algorithm, &part.checksum) {
            match element.text_of(&stored.element()) {
                None => {
                    return Err(AwsError::new(
                        400,
                        "InvalidRequest",
                        format!("The upload was created using a {algorithm} checksum. The complete request must include the checksum for each part. It was missing for part {number} in the request."),
                    )
                    .into())
                }
                Some(sent) if sent.trim() != stored.value => return Err(invalid_part().into()),
                Some(_) => {}
            }
        }
        parts.push((*number, part));
    }
    if let Some((number, part)) = parts[..parts.len() - 1]
        .iter()
        .find(|(_, p)| p.size < MIN_PART_SIZE)
    {
        return Err(AwsError::new(
            400,
            "EntityTooSmall",
            "Your proposed upload is smaller than the minimum allowed size",
        )
        .with("ProposedSize", part.size.to_string())
        .with("MinSizeAllowed", MIN_PART_SIZE.to_string())
        .with("PartNumber", number.to_string())
        .with("ETag", quoted(&part.etag))
        .into());
    }
    check_write_conditions(req, key, bucket.objects.get(key).and_then(|v| v.last()))?;

    let mut data = Vec::with_capacity(parts.iter().map(|(_, p)| p.size as usize).sum());
    let mut md5s = Vec::with_capacity(parts.len() * 16);
    for (_, part) in &parts {
        data.extend(stored_bytes(&part.data)?);
        md5s.extend(
            unhex(&part.etag).ok_or_else(|| {
                AwsError::new(500, "InternalError", "a stored part ETag is corrupt")
            })?,
        );
    }
    if let Some(sent) = req.header("x-amz-mp-object-size") {
        if sent.trim().parse::<usize>().ok() != Some(data.len()) {
            return Err(AwsError::new(
                400,
                "InvalidRequest",
                format!("The provided 'x-amz-mp-object-size' header value {sent} does not match what was computed: {}", data.len()),
            )
            .into());
        }
    }
    let count = parts.len();
    // S3's multipart ETag: the MD5 of the parts' binary MD5s, and how many there are.
    let etag = format!("{}-{count}", hex(&digest::md5(&md5s)));
    let checksum = match &upload.checksum_algorithm {
        None => None,
        Some(algorithm) if upload.composite => {
            let digests: Option<Vec<Vec<u8>>> = parts
                .iter()
                .map(|(_, p)| p.checksum.as_ref().and_then(|c| B64.decode(&c.value).ok()))
                .collect();
            digests
                .and_then(|d| digest::compute(algorithm, &d.concat()))
                .map(|d| Checksum {
                    algorithm: algorithm.clone(),
                    value: format!("{}-{count}", B64.encode(d)),
                    composite: true,
                })
        }
        Some(algorithm) => digest::compute(algorithm, &data).map(|d| Checksum {
            algorithm: algorithm.clone(),
            value: B64.encode(d),
            composite: false,
        }),
    };
    if let Some(c) = checksum.as_ref().filter(|c| !c.composite) {
        if let Some(sent) = req.header(&format!("x-amz-checksum-{}", c.algorithm)) {
            if sent.trim() != c.value {
                return Err(AwsError::new(
                    400,
                    "BadDigest",
                    format!(
                        "The {} you specified did not match the calculated checksum.",
                        c.algorithm.to_uppercase()
                    ),
                )
                .into());
            }
        }
    }

    let Some(upload) = bucket.uploads.remove(upload_id) else {
        return Err(no_such_upload(upload_id).into());
    };
    let mut object = upload.object;
    object.last_modified = now;
    object.etag = etag.clone();
    object.size = data.len() as u64;
    object.checksum = checksum.clone();
    object.data = B64.encode(&data);
    let sse = object.sse.clone();
    let version_id = add_version(bucket, key, object);
    let mut result = Element::new("CompleteMultipartUploadResult")
        .attr("xmlns", NS)
        .with(Element::leaf("Location", location(req, name, key)))
        .with(Element::leaf("Bucket", name))
        .with(Element::leaf("Key", key))
        .with(Element::leaf("ETag", quoted(&etag)));
    if let Some(c) = &checksum {
        result.push_leaf(&c.element(), c.value.as_str());
        result.push_leaf("ChecksumType", c.kind());
    }
    let mut response = xml(200, &result);
    if bucket.versioning == Some(Versioning::Enabled) {
        response = response.with_header("x-amz-version-id", version_id);
    }
    response.headers.extend(sse.iter().flat_map(sse_headers));
    Ok(response)
}

/// The URL of an object as CompleteMultipartUpload reports it: path-style, on the host
/// the request was sent to.
fn location(req: &AwsRequest, bucket: &str, key: &str) -> String {
    let key = key
        .split('/')
        .map(percent_encode)
        .collect::<Vec<_>>()
        .join("/");
    match req.header("host") {
        Some(host) => format!("http://{host}/{bucket}/{key}"),
        None => format!("/{bucket}/{key}"),
    }
}

/// A non-negative integer list parameter (`max-parts`, `max-uploads`), at most `max`.
fn list_limit(req: &AwsRequest, param: &str, max: usize) -> Result<usize, AwsError> {
    match req.param(param) {
        None => Ok(max),
        Some(v) => v
            .parse::<i64>()
            .ok()
            .filter(|n| *n >= 0)
            .map(|n| usize::try_from(n).unwrap_or(max).min(max))
            .ok_or_else(|| {
                invalid_argument(
                    &format!("Provided {param} not an integer or within integer range"),
                    param,
                    v,
                )
            }),
    }
}

/// Who started an upload: the account, as `Owner` names it.
fn initiator() -> Element {
    let mut e = owner();
    e.name = "Initiator".into();
    e
}

fn list_parts(
    name: &str,
    bucket: &Bucket,
    key: &str,
    upload_id: &str,
    req: &AwsRequest,
) -> Outcome {
    let upload = upload_of(bucket, key, upload_id)?;
    let max = list_limit(req, "max-parts", MAX_LISTED_PARTS)?;
    let marker = match req.param("part-number-marker") {
        None => 0,
        Some(v) => v.parse::<u32>().map_err(|_| {
            invalid_argument(
                "Provided part-number-marker not an integer or within integer range",
                "part-number-marker",
                v,
            )
        })?,
    };
    let rest: Vec<(&u32, &Part)> = upload.parts.range(marker.saturating_add(1)..).collect();
    let page = &rest[..rest.len().min(max)];
    let truncated = page.len() < rest.len();
    let mut doc = Element::new("ListPartsResult")
        .attr("xmlns", NS)
        .with(Element::leaf("Bucket", name))
        .with(Element::leaf("Key", key))
        .with(Element::leaf("UploadId", upload_id))
        .with(initiator())
        .with(owner())
        .with(Element::leaf("StorageClass", upload.object.storage_class()))
        .with(Element::leaf("PartNumberMarker", marker.to_string()));
    if let Some((last, _)) = page.last() {
        doc.push_leaf("NextPartNumberMarker", last.to_string());
    }
    doc.push_leaf("MaxParts", max.to_string());
    doc.push_leaf("IsTruncated", truncated.to_string());
    for (number, part) in page {
        let mut e = Element::new("Part")
            .with(Element::leaf("PartNumber", number.to_string()))
            .with(Element::leaf(
                "LastModified",
                time_millis(part.last_modified),
            ))
            .with(Element::leaf("ETag", quoted(&part.etag)))
            .with(Element::leaf("Size", part.size.to_string()));
        if let Some(c) = &part.checksum {
            e.push_leaf(&c.element(), c.value.as_str());
        }
        doc.push(e);
    }
    if let Some(algorithm) = &upload.checksum_algorithm {
        doc.push_leaf("ChecksumAlgorithm", algorithm.to_uppercase());
        doc.push_leaf(
            "ChecksumType",
            if upload.composite {
                "COMPOSITE"
            } else {
                "FULL_OBJECT"
            },
        );
    }
    Ok(xml(200, &doc))
}

/// One row of ListMultipartUploads.
enum UploadRow<'a> {
    Upload(&'a str, &'a Upload),
    Prefix(&'a str),
}

fn list_multipart_uploads(name: &str, bucket: &Bucket, req: &AwsRequest) -> Outcome {
    let params = list_params(req)?;
    let max = list_limit(req, "max-uploads", MAX_LISTED_UPLOADS)?;
    let key_marker = req.param("key-marker").unwrap_or("");
    let id_marker = req.param("upload-id-marker").unwrap_or("");
    // By key, then oldest first, as S3 lists them.
    let mut uploads: Vec<(&str, &Upload)> = bucket
        .uploads
        .iter()
        .map(|(id, u)| (id.as_str(), u))
        .collect();
    uploads.sort_by(|a, b| (&a.1.key, a.1.initiated, a.0).cmp(&(&b.1.key, b.1.initiated, b.0)));
    let mut keys: Vec<&str> = uploads.iter().map(|(_, u)| u.key.as_str()).collect();
    keys.dedup();
    let mut rows: Vec<UploadRow> = Vec::new();
    for entry in roll_up(keys.into_iter(), params.prefix, params.delimiter) {
        match entry {
            Listed::Prefix(p) => {
                if key_marker.is_empty() || p > key_marker {
                    rows.push(UploadRow::Prefix(p));
                }
            }
            Listed::Key(key) => {
                let of_key = uploads.iter().filter(|(_, u)| u.key == key);
                if key > key_marker {
                    rows.extend(of_key.map(|(id, u)| UploadRow::Upload(id, u)));
                } else if key == key_marker && !id_marker.is_empty() {
                    // On the marker's key, the uploads after the marked one.
                    rows.extend(
                        of_key
                            .skip_while(|(id, _)| *id != id_marker)
                            .skip(1)
                            .map(|(id, u)| UploadRow::Upload(id, u)),
                    );
                }
            }
        }
    }
    let page_len = rows.len().min(max);
    let truncated = page_len < rows.len();
    let mut doc = Element::new("ListMultipartUploadsResult")
        .attr("xmlns", NS)
        .with(Element::leaf("Bucket", name))
        .with(Element::leaf("KeyMarker", params.out(key_marker)))
        .with(Element::leaf("UploadIdMarker", id_marker));
    if truncated && page_len > 0 {
        match &rows[page_len - 1] {
            UploadRow::Upload(id, u) => {
                doc.push_leaf("NextKeyMarker", params.out(&u.key));
                doc.push_leaf("NextUploadIdMarker", *id);
            }
            UploadRow::Prefix(p) => doc.push_leaf("NextKeyMarker", params.out(p)),
        }
    }
    if !params.delimiter.is_empty() {
        doc.push_leaf("Delimiter", params.out(params.delimiter));
    }
    doc.push_leaf("Prefix", params.out(params.prefix));
    doc.push_leaf("MaxUploads", max.to_string());
    doc.push_leaf("IsTruncated", truncated.to_string());
    for row in &rows[..page_len] {
        if let UploadRow::Upload(id, u) = row {
            let mut e = Element::new("Upload")
                .with(Element::leaf("Key", params.out(&u.key)))
                .with(Element::leaf("UploadId", *id))
                .with(initiator())
                .with(owner())
                .with(Element::leaf("StorageClass", u.object.storage_class()))
                .with(Element::leaf("Initiated", time_millis(u.initiated)));
            if let Some(algorithm) = &u.checksum_algorithm {
                e.push_leaf("ChecksumAlgorithm", algorithm.to_uppercase());
                e.push_leaf(
                    "ChecksumType",
                    if u.composite {
                        "COMPOSITE"
                    } else {
                        "FULL_OBJECT"
                    },
                );
            }
            doc.push(e);
        }
    }
    for row in &rows[..page_len] {
        if let UploadRow::Prefix(p) = row {
            doc.push(params.common_prefix(p));
        }
    }
    if params.url_encoded {
        doc.push_leaf("EncodingType", "url");
    }
    Ok(xml(200, &doc))
}

// ------------------------------------------------------------ request bodies

/// A request body with any `aws-chunked` framing removed, and the trailing headers the
/// framing carried (flexible checksums sent after the data).
#[derive(Debug, PartialEq, Eq)]
struct Payload {
    data: Vec<u8>,
    trailers: Vec<(String, String)>,
}

fn payload(req: &AwsRequest) -> Result<Payload, AwsError> {
    let chunked = req.header("content-encoding").is_some_and(|e| {
        e.split(',')
            .any(|e| e.trim().eq_ignore_ascii_case("aws-chunked"))
    }) || req
        .header("x-amz-content-sha256")
        .is_some_and(|h| h.starts_with("STREAMING-"));
    if !chunked {
        return Ok(Payload {
            data: req.body.clone(),
            trailers: Vec::new(),
        });
    }
    let declared = req
        .header("x-amz-decoded-content-length")
        .ok_or_else(|| {
            AwsError::new(
                411,
                "MissingContentLength",
                "You must provide the Content-Length HTTP header.",
            )
        })?
        .trim()
        .parse::<usize>()
        .map_err(|_| {
            invalid_argument(
                "x-amz-decoded-content-length is not a number",
                "x-amz-decoded-content-length",
                req.header("x-amz-decoded-content-length").unwrap_or(""),
            )
        })?;
    let incomplete = |detail: String| {
        AwsError::new(
            400,
            "IncompleteBody",
            format!("The request body terminated unexpectedly: {detail}"),
        )
    };
    let decoded = decode_aws_chunked(&req.body).map_err(incomplete)?;
    if decoded.data.len() != declared {
        return Err(incomplete(format!(
            "{} bytes decoded, x-amz-decoded-content-length says {declared}",
            decoded.data.len()
        )));
    }
    if let Some(named) = req.header("x-amz-trailer") {
        for name in named.split(',').map(|n| n.trim().to_ascii_lowercase()) {
            if !decoded.trailers.iter().any(|(k, _)| *k == name) {
                return Err(incomplete(format!("the trailer {name} is missing")));
            }
        }
    }
    Ok(decoded)
}

/// Decodes `aws-chunked`: `hex-size[;chunk-signature=…]\r\n<data>\r\n` chunks, a
/// zero-size last chunk, then trailer lines (`x-amz-checksum-crc32:…`) and an empty line.
/// Chunk signatures are not checked: that needs the caller's secret key.
fn decode_aws_chunked(body: &[u8]) -> Result<Payload, String> {
    fn line<'a>(body: &'a [u8], pos: &mut usize) -> Result<&'a str, String> {
        let rest = &body[*pos..];
        let (text, used) = match rest.windows(2).position(|w| w == b"\r\n") {
            Some(i) => (&rest[..i], i + 2),
            None => (rest, rest.len()),
        };
        *pos += used;
        std::str::from_utf8(text).map_err(|_| "a chunk header is not text".to_string())
    }
    let mut pos = 0;
    let mut data = Vec::new();
    loop {
        if pos >= body.len() {
            return Err("the body ends before the last (zero-size) chunk".into());
        }
        let header = line(body, &mut pos)?;
        let size_hex = header.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_hex, 16)
            .map_err(|_| format!("{size_hex:?} is not a chunk size"))?;
        if size == 0 {
            break;
        }
        let end = pos
            .checked_add(size)
            .filter(|end| end.saturating_add(2) <= body.len())
            .ok_or_else(|| format!("a chunk of {size} bytes runs past the end of the body"))?;
        data.extend_from_slice(&body[pos..end]);
        if &body[end..end + 2] != b"\r\n" {
            return Err("a chunk is not followed by CRLF".into());
        }
        pos = end + 2;
    }
    let mut trailers = Vec::new();
    while pos < body.len() {
        let text = line(body, &mut pos)?;
        if text.is_empty() {
            break;
        }
        let (name, value) = text
            .split_once(':')
            .ok_or_else(|| format!("the trailer {text:?} has no `:`"))?;
        trailers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
    }
    if body[pos..].iter().any(|b| !b.is_ascii_whitespace()) {
        return Err("content after the trailers".into());
    }
    Ok(Payload { data, trailers })
}

/// Checks `Content-MD5` and the `x-amz-checksum-*` header or trailer against the body,
/// and returns the checksum to store. `required` is for the operations S3 refuses
/// without one (bucket configurations, DeleteObjects).
fn integrity(
    req: &AwsRequest,
    body: &Payload,
    required: bool,
) -> Result<Option<Checksum>, AwsError> {
    let md5 = req.header("content-md5");
    if let Some(sent) = md5 {
        let valid = B64
            .decode(sent.trim())
            .ok()
            .filter(|d| d.len() == 16)
            .ok_or_else(|| {
                AwsError::new(
                    400,
                    "InvalidDigest",
                    "The Content-MD5 you specified was invalid.",
                )
                .with("Content-MD5", sent)
            })?;
        let actual = digest::md5(&body.data);
        if valid != actual {
            return Err(AwsError::new(
                400,
                "BadDigest",
                "The Content-MD5 you specified did not match what we received.",
            )
            .with("ExpectedDigest", sent)
            .with("CalculatedDigest", B64.encode(actual)));
        }
    }
    let sent: Vec<(&str, usize, &str)> = req
        .headers
        .iter()
        .chain(body.trailers.iter())
        .filter_map(|(name, value)| {
            let algorithm = name.to_ascii_lowercase();
            let algorithm = algorithm.strip_prefix("x-amz-checksum-")?.to_string();
            CHECKSUM_ALGORITHMS
                .iter()
                .find(|(a, _)| *a == algorithm)
                .map(|(a, len)| (*a, *len, value.as_str()))
        })
        .collect();
    if sent.len() > 1 {
        return Err(AwsError::new(
            400,
            "InvalidRequest",
            "Expecting a single x-amz-checksum- header. Multiple checksum Types are not allowed.",
        ));
    }
    let Some(&(algorithm, len, value)) = sent.first() else {
        if req.header("x-amz-sdk-checksum-algorithm").is_some() {
            return Err(AwsError::new(
                400,
                "InvalidRequest",
                "x-amz-sdk-checksum-algorithm specified, but no corresponding x-amz-checksum-* or x-amz-trailer headers were found.",
            ));
        }
        if required && md5.is_none() {
            return Err(AwsError::new(
                400,
                "InvalidRequest",
                "Missing required header for this request: Content-MD5",
            ));
        }
        return Ok(None);
    };
    let value = value.trim();
    let digest = B64
        .decode(value)
        .ok()
        .filter(|d| d.len() == len)
        .ok_or_else(|| {
            AwsError::new(
                400,
                "InvalidRequest",
                format!("Value for x-amz-checksum-{algorithm} header is invalid."),
            )
        })?;
    if let Some(actual) = digest::compute(algorithm, &body.data) {
        if actual != digest {
            return Err(AwsError::new(
                400,
                "BadDigest",
                format!(
                    "The {} you specified did not match the calculated checksum.",
                    algorithm.to_uppercase()
                ),
            ));
        }
    }
    Ok(Some(Checksum {
        algorithm: algorithm.to_string(),
        value: value.to_string(),
        composite: false,
    }))
}

/// The XML document of a configuration request, whose root must be `root`; S3 refuses
/// these without an integrity header.
fn configuration(req: &AwsRequest, root: &str) -> Result<Element, AwsError> {
    let body = payload(req)?;
    integrity(req, &body, true)?;
    let doc = Element::parse(&body.data).map_err(|_| malformed())?;
    if doc.name != root {
        return Err(malformed());
    }
    Ok(doc)
}

/// Refuses children not in `allowed` or appearing more often than their maximum.
fn expect_children(element: &Element, allowed: &[(&str, usize)]) -> Result<(), AwsError> {
    for (name, max) in allowed {
        if element.all(name).count() > *max {
            return Err(malformed());
        }
    }
    if element
        .children
        .iter()
        .all(|c| allowed.iter().any(|(name, _)| *name == c.name))
    {
        Ok(())
    } else {
        Err(malformed())
    }
}

fn parse_bool(text: &str) -> Result<bool, AwsError> {
    match text {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(malformed()),
    }
}

fn parse_int(text: &str) -> Result<i64, AwsError> {
    text.parse::<i64>().map_err(|_| malformed())
}

// ------------------------------------------------------------ names, tokens, formats

/// General purpose bucket naming rules
/// (https://docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html).
fn check_bucket_name(name: &str) -> Result<(), AwsError> {
    let b = name.as_bytes();
    let edge = |c: Option<&u8>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    let ip_like = name.split('.').count() == 4 && name.split('.').all(|p| p.parse::<u8>().is_ok());
    let ok = (3..=63).contains(&b.len())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'-' | b'.'))
        && edge(b.first())
        && edge(b.last())
        && !name.contains("..")
        && !ip_like
        && !["xn--", "sthree-", "amzn-s3-demo-"]
            .iter()
            .any(|p| name.starts_with(p))
        && !["-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3"]
            .iter()
            .any(|s| name.ends_with(s));
    if ok {
        Ok(())
    } else {
        Err(AwsError::new(
            400,
            "InvalidBucketName",
            "The specified bucket is not valid.",
        )
        .with("BucketName", name))
    }
}

/// A version ID as S3 makes them: 32 URL-safe characters.
fn new_version_id() -> String {
    random_id(32)
}

/// `len` random URL-safe characters, as S3's version and upload IDs are made of.
fn random_id(len: usize) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._";
    (0..len)
        .map(|_| ALPHABET[rand::random_range(0..ALPHABET.len())] as char)
        .collect()
}

/// Continuation tokens are opaque to clients; the sandbox's carry the last key listed.
fn encode_token(last: &str) -> String {
    B64.encode(last)
}

fn decode_token(token: &str, param: &str) -> Result<String, AwsError> {
    B64.decode(token)
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .ok_or_else(|| {
            invalid_argument("The continuation token provided is incorrect", param, token)
        })
}

/// S3's `encoding-type=url`: everything but unreserved characters and `/` escaped, space
/// as `+` (botocore decodes with `unquote_plus`).
fn url_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'/' => {
                out.push(b as char)
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// Whether an `If-Match`/`If-None-Match` value (`*`, or quoted ETags separated by
/// commas) names `etag`.
fn etag_matches(condition: &str, etag: &str) -> bool {
    condition
        .split(',')
        .map(str::trim)
        .any(|c| c == "*" || c.trim_start_matches("W/").trim_matches('"') == etag)
}

fn quoted(etag: &str) -> String {
    format!("\"{etag}\"")
}

/// RFC 7231 dates, as `Last-Modified` carries them.
fn http_date(t: DateTime<Utc>) -> String {
    t.format("%a, %d %b %Y %H:%M:%S GMT").to_string()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| {
            text.get(i..i + 2)
                .and_then(|pair| u8::from_str_radix(pair, 16).ok())
        })
        .collect()
}

/// The XML element of an `x-amz-checksum-<algorithm>` value (`ChecksumCRC32`).
fn checksum_element(algorithm: &str) -> String {
    format!("Checksum{}", algorithm.to_uppercase())
}

/// The owner of everything: the sandbox account's canonical user ID (64 hex digits, as
/// S3's are), derived from the account number so it is stable.
fn owner() -> Element {
    Element::new("Owner").with(Element::leaf(
        "ID",
        hex(&digest::sha256(ACCOUNT.as_bytes())),
    ))
}

fn xml(status: u16, doc: &Element) -> AwsResponse {
    AwsResponse::xml(status, &doc.render())
}

// ------------------------------------------------------------ errors

fn no_such_bucket(name: &str) -> AwsError {
    AwsError::new(404, "NoSuchBucket", "The specified bucket does not exist")
        .with("BucketName", name)
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

// ------------------------------------------------------------ digests

/// The digests S3 checks request bodies with (`Content-MD5`, flexible checksums) and its
/// ETags: the hashes from the RustCrypto crates, the CRCs (a table each) here.
mod digest {
    /// The digest of `data` with the `x-amz-checksum-<algorithm>` algorithm, when the
    /// sandbox can compute it.
    pub(super) fn compute(algorithm: &str, data: &[u8]) -> Option<Vec<u8>> {
        Some(match algorithm {
            "crc32" => crc32(data, 0xEDB8_8320).to_be_bytes().to_vec(),
            "crc32c" => crc32(data, 0x82F6_3B78).to_be_bytes().to_vec(),
            "crc64nvme" => crc64(data, 0x9A6C_9329_AC4B_C9B5).to_be_bytes().to_vec(),
            "sha1" => sha1(data).to_vec(),
            "sha256" => sha256(data).to_vec(),
            "md5" => md5(data).to_vec(),
            _ => return None,
        })
    }

    /// A reflected CRC-32 with initial value and final XOR all ones (CRC-32 with
    /// 0xEDB88320, CRC-32C with 0x82F63B78).
    pub(super) fn crc32(data: &[u8], poly: u32) -> u32 {
        let mut table = [0u32; 256];
        for (i, slot) in table.iter_mut().enumerate() {
            let mut c = i as u32;
            for _ in 0..8 {
                c = if c & 1 != 0 { (c >> 1) ^ poly } else { c >> 1 };
            }
            *slot = c;
        }
        !data.iter().fold(!0u32, |c, b| {
            table[((c ^ u32::from(*b)) & 0xFF) as usize] ^ (c >> 8)
        })
    }

    /// The reflected CRC-64 of the same shape (CRC-64/NVME with 0x9A6C9329AC4BC9B5).
    pub(super) fn crc64(data: &[u8], poly: u64) -> u64 {
        let mut table = [0u64; 256];
        for (i, slot) in table.iter_mut().enumerate() {
            let mut c = i as u64;
            for _ in 0..8 {
                c = if c & 1 != 0 { (c >> 1) ^ poly } else { c >> 1 };
            }
            *slot = c;
        }
        !data.iter().fold(!0u64, |c, b| {
            table[((c ^ u64::from(*b)) & 0xFF) as usize] ^ (c >> 8)
        })
    }

    /// MD5, for `Content-MD5` and ETags.
    pub(super) fn md5(data: &[u8]) -> [u8; 16] {
        use md5::Digest as _;
        md5::Md5::digest(data).into()
    }

    /// SHA-1, for `x-amz-checksum-sha1`.
    pub(super) fn sha1(data: &[u8]) -> [u8; 20] {
        use sha1::Digest as _;
        sha1::Sha1::digest(data).into()
    }

    /// SHA-256, for `x-amz-checksum-sha256`.
    pub(super) fn sha256(data: &[u8]) -> [u8; 32] {
        use sha2::Digest as _;
        sha2::Sha256::digest(data).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::Faults;

    /// An S3 emulator driven through `handle`, as the server drives it.
    struct Harness {
        s3: S3,
        faults: Faults,
        now: DateTime<Utc>,
    }

    struct Reply {
        status: u16,
        headers: Vec<(String, String)>,
        body: String,
        doc: Option<Element>,
    }

    impl Reply {
        fn header(&self, name: &str) -> Option<&str> {
            self.headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_str())
        }

        fn code(&self) -> Option<&str> {
            self.doc.as_ref().and_then(|d| d.text_of("Code"))
        }

        fn doc(&self) -> &Element {
            self.doc.as_ref().expect("an XML body")
        }
    }

    impl Harness {
        fn new() -> Self {
            Harness {
                s3: S3::default(),
                faults: Faults::default(),
                now: DateTime::parse_from_rfc3339("2026-11-21T10:00:00Z")
                    .expect("valid time")
                    .with_timezone(&Utc),
            }
        }

        fn send(&mut self, req: AwsRequest) -> Reply {
            let ctx = AwsCtx {
                now: self.now,
                scale: 0.0,
                faults: &self.faults,
            };
            let response = self
                .s3
                .handle(&req, &ctx)
                .unwrap_or_else(|e| e.response(Service::S3, &req));
            let body = String::from_utf8_lossy(&response.body).into_owned();
            let doc = body
                .split_once("?>")
                .and_then(|(_, xml)| Element::parse(xml.trim().as_bytes()).ok());
            Reply {
                status: response.status,
                headers: response.headers,
                body,
                doc,
            }
        }

        fn call(
            &mut self,
            method: Method,
            path: &str,
            headers: &[(&str, &str)],
            body: &[u8],
        ) -> Reply {
            self.send(AwsRequest::new(method, path, headers, body))
        }

        fn in_region(&mut self, region: &str, method: Method, path: &str, body: &[u8]) -> Reply {
            let mut req = AwsRequest::new(method, path, &[], body);
            req.region = region.to_string();
            self.send(req)
        }

        /// A configuration request with the Content-MD5 S3 requires.
        fn configure(&mut self, method: Method, path: &str, body: &str) -> Reply {
            let md5 = B64.encode(digest::md5(body.as_bytes()));
            self.call(method, path, &[("content-md5", &md5)], body.as_bytes())
        }

        fn put(&mut self, path: &str, data: &[u8]) -> Reply {
            self.call(Method::PUT, path, &[], data)
        }
    }

    fn texts<'a>(doc: &'a Element, name: &'a str, field: &str) -> Vec<&'a str> {
        doc.all(name).filter_map(|e| e.text_of(field)).collect()
    }

    #[test]
    fn digests_match_published_test_vectors() {
        assert_eq!(hex(&digest::md5(b"")), "d41d8cd98f00b204e9800998ecf8427e");
        assert_eq!(
            hex(&digest::md5(b"abc")),
            "900150983cd24fb0d6963f7d28e17f72"
        );
        let long =
            b"12345678901234567890123456789012345678901234567890123456789012345678901234567890";
        assert_eq!(hex(&digest::md5(long)), "57edf4a22be3c955ac49da2e2107b67a");
        assert_eq!(
            hex(&digest::sha1(b"abc")),
            "a9993e364706816aba3e25717850c26c9cd0d89d"
        );
        assert_eq!(
            hex(&digest::sha256(b"abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            hex(&digest::sha256(
                b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"
            )),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
        );
        assert_eq!(digest::crc32(b"123456789", 0xEDB8_8320), 0xCBF4_3926);
        assert_eq!(digest::crc32(b"123456789", 0x82F6_3B78), 0xE306_9283);
        assert_eq!(
            digest::crc64(b"123456789", 0x9A6C_9329_AC4B_C9B5),
            0xAE8B_1486_0A79_9888
        );
    }

    #[test]
    fn aws_chunked_bodies_decode() {
        // STREAMING-AWS4-HMAC-SHA256-PAYLOAD: signed chunks, no trailer.
        let signed = b"5;chunk-signature=aaaa\r\nhello\r\n6;chunk-signature=bbbb\r\n world\r\n0;chunk-signature=cccc\r\n\r\n";
        assert_eq!(
            decode_aws_chunked(signed),
            Ok(Payload {
                data: b"hello world".to_vec(),
                trailers: vec![]
            })
        );
        // STREAMING-UNSIGNED-PAYLOAD-TRAILER: bare sizes, then the checksum trailer.
        let crc = B64.encode(digest::crc32(b"hello world", 0xEDB8_8320).to_be_bytes());
        let unsigned = format!("b\r\nhello world\r\n0\r\nx-amz-checksum-crc32:{crc}\r\n\r\n");
        let decoded = decode_aws_chunked(unsigned.as_bytes()).expect("decodes");
        assert_eq!(decoded.data, b"hello world");
        assert_eq!(
            decoded.trailers,
            vec![("x-amz-checksum-crc32".to_string(), crc.clone())]
        );
        // A chunk larger than 9 bytes has a multi-digit hex size; data may hold CRLF.
        let data: Vec<u8> = (0..=255u8).cycle().take(8192 + 17).collect();
        let mut body = b"2000;chunk-signature=x\r\n".to_vec();
        body.extend_from_slice(&data[..8192]);
        body.extend_from_slice(b"\r\n11;chunk-signature=y\r\n");
        body.extend_from_slice(&data[8192..]);
        body.extend_from_slice(b"\r\n0;chunk-signature=z\r\nx-amz-checksum-sha256:abc\r\nx-amz-trailer-signature:def\r\n\r\n");
        let decoded = decode_aws_chunked(&body).expect("decodes");
        assert_eq!(decoded.data, data);
        assert_eq!(decoded.trailers.len(), 2);
        // An empty payload is just the last chunk.
        assert_eq!(decode_aws_chunked(b"0\r\n\r\n").map(|p| p.data), Ok(vec![]));

        for bad in [
            &b""[..],
            b"5\r\nhello\r\n",
            b"5\r\nhel",
            b"zz\r\nhello\r\n0\r\n\r\n",
            b"5\r\nhelloXX0\r\n\r\n",
            b"0\r\nx-amz-checksum-crc32\r\n\r\n",
            b"0\r\n\r\ngarbage",
            b"ffffffffffffffffff\r\n",
        ] {
            assert!(
                decode_aws_chunked(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn chunked_uploads_are_stored_decoded_and_checked() {
        let mut h = Harness::new();
        assert_eq!(h.put("/bkt", b"").status, 200);
        let crc = B64.encode(digest::crc32(b"hello world", 0xEDB8_8320).to_be_bytes());
        let body = format!("b\r\nhello world\r\n0\r\nx-amz-checksum-crc32:{crc}\r\n\r\n");
        let headers = [
            ("content-encoding", "aws-chunked"),
            ("x-amz-content-sha256", "STREAMING-UNSIGNED-PAYLOAD-TRAILER"),
            ("x-amz-decoded-content-length", "11"),
            ("x-amz-trailer", "x-amz-checksum-crc32"),
            ("x-amz-sdk-checksum-algorithm", "CRC32"),
        ];
        let r = h.call(Method::PUT, "/bkt/k", &headers, body.as_bytes());
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(
            r.header("etag"),
            Some("\"5eb63bbbe01eeed093cb22bb8f5acdc3\"")
        );
        assert_eq!(r.header("x-amz-checksum-crc32"), Some(crc.as_str()));
        let got = h.call(
            Method::GET,
            "/bkt/k",
            &[("x-amz-checksum-mode", "ENABLED")],
            b"",
        );
        assert_eq!(got.body, "hello world");
        assert_eq!(got.header("x-amz-checksum-crc32"), Some(crc.as_str()));
        // The framing is not the object's content encoding.
        assert_eq!(got.header("content-encoding"), None);

        let wrong_length = [
            ("content-encoding", "aws-chunked"),
            ("x-amz-decoded-content-length", "12"),
        ];
        let r = h.call(Method::PUT, "/bkt/k", &wrong_length, body.as_bytes());
        assert_eq!((r.status, r.code()), (400, Some("IncompleteBody")));
        let no_length = [("content-encoding", "aws-chunked")];
        assert_eq!(
            h.call(Method::PUT, "/bkt/k", &no_length, body.as_bytes())
                .status,
            411
        );
        let bad_crc = "b\r\nhello world\r\n0\r\nx-amz-checksum-crc32:AAAAAA==\r\n\r\n";
        let r = h.call(Method::PUT, "/bkt/k", &headers, bad_crc.as_bytes());
        assert_eq!((r.status, r.code()), (400, Some("BadDigest")));
        let missing_trailer = "b\r\nhello world\r\n0\r\n\r\n";
        let r = h.call(Method::PUT, "/bkt/k", &headers, missing_trailer.as_bytes());
        assert_eq!((r.status, r.code()), (400, Some("IncompleteBody")));
    }

    #[test]
    fn integrity_headers_are_verified() {
        let mut h = Harness::new();
        h.put("/bkt", b"");
        let md5 = B64.encode(digest::md5(b"data"));
        assert_eq!(
            h.call(Method::PUT, "/bkt/k", &[("content-md5", &md5)], b"data")
                .status,
            200
        );
        let r = h.call(Method::PUT, "/bkt/k", &[("content-md5", &md5)], b"other");
        assert_eq!((r.status, r.code()), (400, Some("BadDigest")));
        let r = h.call(Method::PUT, "/bkt/k", &[("content-md5", "nope")], b"data");
        assert_eq!((r.status, r.code()), (400, Some("InvalidDigest")));
        let sha = B64.encode(digest::sha256(b"data"));
        let r = h.call(
            Method::PUT,
            "/bkt/k",
            &[("x-amz-checksum-sha256", &sha)],
            b"data",
        );
        assert_eq!(r.status, 200);
        let r = h.call(
            Method::PUT,
            "/bkt/k",
            &[("x-amz-checksum-sha256", &sha)],
            b"date",
        );
        assert_eq!((r.status, r.code()), (400, Some("BadDigest")));
        let crc = B64.encode(digest::crc32(b"data", 0x82F6_3B78).to_be_bytes());
        let both = [
            ("x-amz-checksum-sha256", sha.as_str()),
            ("x-amz-checksum-crc32c", crc.as_str()),
        ];
        assert_eq!(
            h.call(Method::PUT, "/bkt/k", &both, b"data").code(),
            Some("InvalidRequest")
        );
        let r = h.call(
            Method::PUT,
            "/bkt/k",
            &[("x-amz-checksum-crc32c", "AAA")],
            b"data",
        );
        assert_eq!(r.code(), Some("InvalidRequest"));
        let r = h.call(
            Method::PUT,
            "/bkt/k",
            &[("x-amz-sdk-checksum-algorithm", "CRC32")],
            b"data",
        );
        assert_eq!(r.code(), Some("InvalidRequest"));
        // Bucket configurations need one of them.
        let versioning =
            "<VersioningConfiguration><Status>Enabled</Status></VersioningConfiguration>";
        let r = h.call(Method::PUT, "/bkt?versioning", &[], versioning.as_bytes());
        assert_eq!((r.status, r.code()), (400, Some("InvalidRequest")));
        let crc32 = B64.encode(digest::crc32(versioning.as_bytes(), 0xEDB8_8320).to_be_bytes());
        let r = h.call(
            Method::PUT,
            "/bkt?versioning",
            &[("x-amz-checksum-crc32", &crc32)],
            versioning.as_bytes(),
        );
        assert_eq!(r.status, 200, "{}", r.body);
    }

    #[test]
    fn buckets_are_global_and_live_in_one_region() {
        let mut h = Harness::new();
        let eu = "<CreateBucketConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><LocationConstraint>eu-west-1</LocationConstraint></CreateBucketConfiguration>";
        let cases: &[(&str, &str, &str, u16, Option<&str>)] = &[
            ("us-east-1", "/plain", "", 200, None),
            ("eu-west-1", "/in-eu", eu, 200, None),
            ("us-east-1", "/plain", "", 409, Some("BucketAlreadyOwnedByYou")),
            ("eu-west-1", "/plain", eu, 409, Some("BucketAlreadyOwnedByYou")),
            ("eu-west-1", "/no-constraint", "", 400, Some("IllegalLocationConstraintException")),
            ("us-east-1", "/wrong-endpoint", eu, 400, Some("IllegalLocationConstraintException")),
            ("us-east-1", "/explicit-us-east-1", "<CreateBucketConfiguration><LocationConstraint>us-east-1</LocationConstraint></CreateBucketConfiguration>", 400, Some("InvalidLocationConstraint")),
            ("us-east-1", "/mars", "<CreateBucketConfiguration><LocationConstraint>mars-1</LocationConstraint></CreateBucketConfiguration>", 400, Some("InvalidLocationConstraint")),
            ("eu-west-1", "/legacy-eu", "<CreateBucketConfiguration><LocationConstraint>EU</LocationConstraint></CreateBucketConfiguration>", 200, None),
            ("us-east-1", "/bad-xml", "<CreateBucketConfiguration>", 400, Some("MalformedXML")),
            ("us-east-1", "/wrong-root", "<Other/>", 400, Some("MalformedXML")),
            ("us-east-1", "/Upper", "", 400, Some("InvalidBucketName")),
            ("us-east-1", "/ab", "", 400, Some("InvalidBucketName")),
            ("us-east-1", "/a..b", "", 400, Some("InvalidBucketName")),
            ("us-east-1", "/192.168.1.1", "", 400, Some("InvalidBucketName")),
            ("us-east-1", "/-dash", "", 400, Some("InvalidBucketName")),
            ("us-east-1", "/xn--punycode", "", 400, Some("InvalidBucketName")),
            ("us-east-1", "/ends--x-s3", "", 400, Some("InvalidBucketName")),
            ("us-east-1", "/has_underscore", "", 400, Some("InvalidBucketName")),
        ];
        for (region, path, body, status, code) in cases {
            let r = h.in_region(region, Method::PUT, path, body.as_bytes());
            assert_eq!(
                (r.status, r.code()),
                (*status, *code),
                "PUT {path} in {region}: {}",
                r.body
            );
        }
        let location = |h: &mut Harness, path: &str| {
            let r = h.in_region("us-east-1", Method::GET, path, b"");
            (r.status, r.doc.map(|d| d.text))
        };
        assert_eq!(
            location(&mut h, "/plain?location"),
            (200, Some(String::new()))
        );
        assert_eq!(
            location(&mut h, "/in-eu?location"),
            (200, Some("eu-west-1".into()))
        );
        assert_eq!(
            location(&mut h, "/legacy-eu?location"),
            (200, Some("EU".into()))
        );
        let head = h.in_region("eu-west-1", Method::HEAD, "/in-eu", b"");
        assert_eq!(
            (head.status, head.header("x-amz-bucket-region")),
            (200, Some("eu-west-1"))
        );
        assert!(head.body.is_empty());
        // Addressed through another region's endpoint, a bucket redirects to its own.
        let moved = h.in_region("us-east-1", Method::HEAD, "/in-eu", b"");
        assert_eq!(
            (moved.status, moved.header("x-amz-bucket-region")),
            (301, Some("eu-west-1"))
        );
        assert!(moved.body.is_empty());
        let moved = h.in_region("us-east-1", Method::GET, "/in-eu?list-type=2", b"");
        assert_eq!(moved.code(), Some("PermanentRedirect"));
        let missing = h.in_region("us-east-1", Method::HEAD, "/nowhere", b"");
        assert_eq!((missing.status, missing.body.as_str()), (404, ""));
        let list = h.call(Method::GET, "/", &[], b"");
        let buckets = list.doc().find("Buckets").expect("Buckets");
        assert_eq!(
            texts(buckets, "Bucket", "Name"),
            ["in-eu", "legacy-eu", "plain"]
        );
        assert_eq!(
            texts(buckets, "Bucket", "BucketRegion"),
            ["eu-west-1", "eu-west-1", "us-east-1"]
        );
        let paged = h.call(Method::GET, "/?max-buckets=2", &[], b"");
        let token = paged
            .doc()
            .text_of("ContinuationToken")
            .expect("a token")
            .to_string();
        let rest = h.call(
            Method::GET,
            &format!(
                "/?max-buckets=2&continuation-token={}",
                crate::http::percent_encode(&token)
            ),
            &[],
            b"",
        );
        let names = texts(
            rest.doc().find("Buckets").expect("Buckets"),
            "Bucket",
            "Name",
        );
        assert_eq!(names, ["plain"]);
        assert!(rest.doc().find("ContinuationToken").is_none());
    }

    #[test]
    fn new_buckets_have_todays_defaults() {
        let mut h = Harness::new();
        h.put("/bkt", b"");
        let versioning = h.call(Method::GET, "/bkt?versioning", &[], b"");
        assert_eq!(
            versioning.doc().render(),
            format!("<VersioningConfiguration xmlns=\"{NS}\"/>")
        );
        let encryption = h.call(Method::GET, "/bkt?encryption", &[], b"");
        let rule = encryption.doc().find("Rule").expect("a rule");
        assert_eq!(
            rule.find("ApplyServerSideEncryptionByDefault")
                .and_then(|d| d.text_of("SSEAlgorithm")),
            Some("AES256")
        );
        let block = h.call(Method::GET, "/bkt?publicAccessBlock", &[], b"");
        assert_eq!(
            PublicAccessBlock::FIELDS.map(|f| block.doc().text_of(f).map(str::to_string)),
            PublicAccessBlock::FIELDS.map(|_| Some("true".to_string()))
        );
        assert_eq!(
            h.call(Method::DELETE, "/bkt?publicAccessBlock", &[], b"")
                .status,
            204
        );
        let gone = h.call(Method::GET, "/bkt?publicAccessBlock", &[], b"");
        assert_eq!(
            (gone.status, gone.code()),
            (404, Some("NoSuchPublicAccessBlockConfiguration"))
        );
        let kms = "<ServerSideEncryptionConfiguration><Rule><ApplyServerSideEncryptionByDefault><SSEAlgorithm>aws:kms</SSEAlgorithm><KMSMasterKeyID>k-1</KMSMasterKeyID></ApplyServerSideEncryptionByDefault><BucketKeyEnabled>true</BucketKeyEnabled></Rule></ServerSideEncryptionConfiguration>";
        assert_eq!(h.configure(Method::PUT, "/bkt?encryption", kms).status, 200);
        let put = h.put("/bkt/k", b"x");
        assert_eq!(put.header("x-amz-server-side-encryption"), Some("aws:kms"));
        assert_eq!(
            put.header("x-amz-server-side-encryption-aws-kms-key-id"),
            Some("arn:aws:kms:us-east-1:123456789012:key/k-1")
        );
        assert_eq!(
            put.header("x-amz-server-side-encryption-bucket-key-enabled"),
            Some("true")
        );
        assert_eq!(
            h.call(Method::DELETE, "/bkt?encryption", &[], b"").status,
            204
        );
        assert_eq!(
            h.put("/bkt/k", b"x").header("x-amz-server-side-encryption"),
            Some("AES256")
        );
        for bad in [
            "<ServerSideEncryptionConfiguration><Rule><ApplyServerSideEncryptionByDefault><SSEAlgorithm>ROT13</SSEAlgorithm></ApplyServerSideEncryptionByDefault></Rule></ServerSideEncryptionConfiguration>",
            "<ServerSideEncryptionConfiguration/>",
            "<ServerSideEncryptionConfiguration><Rule><Unknown/></Rule></ServerSideEncryptionConfiguration>",
        ] {
            assert_eq!(h.configure(Method::PUT, "/bkt?encryption", bad).code(), Some("MalformedXML"), "{bad}");
        }
        let key_with_aes = "<ServerSideEncryptionConfiguration><Rule><ApplyServerSideEncryptionByDefault><SSEAlgorithm>AES256</SSEAlgorithm><KMSMasterKeyID>k</KMSMasterKeyID></ApplyServerSideEncryptionByDefault></Rule></ServerSideEncryptionConfiguration>";
        assert_eq!(
            h.configure(Method::PUT, "/bkt?encryption", key_with_aes)
                .code(),
            Some("InvalidArgument")
        );
    }

    #[test]
    fn versioning_keeps_versions_and_delete_markers() {
        let mut h = Harness::new();
        h.put("/bkt", b"");
        // Before versioning: one `null` version, replaced in place, deleted for good.
        h.put("/bkt/k", b"v0");
        let r = h.call(Method::DELETE, "/bkt/k", &[], b"");
        assert_eq!((r.status, r.header("x-amz-delete-marker")), (204, None));
        assert!(h.s3.buckets["bkt"].objects.is_empty());
        h.put("/bkt/k", b"null-version");
        let enable = "<VersioningConfiguration><Status>Enabled</Status></VersioningConfiguration>";
        assert_eq!(
            h.configure(Method::PUT, "/bkt?versioning", enable).status,
            200
        );
        let v1 = h
            .put("/bkt/k", b"one")
            .header("x-amz-version-id")
            .expect("a version id")
            .to_string();
        let v2 = h
            .put("/bkt/k", b"two")
            .header("x-amz-version-id")
            .expect("a version id")
            .to_string();
        assert_ne!(v1, v2);
        assert_eq!(v1.len(), 32);
        assert_eq!(h.call(Method::GET, "/bkt/k", &[], b"").body, "two");
        assert_eq!(
            h.call(Method::GET, &format!("/bkt/k?versionId={v1}"), &[], b"")
                .body,
            "one"
        );
        assert_eq!(
            h.call(Method::GET, "/bkt/k?versionId=null", &[], b"").body,
            "null-version"
        );
        let missing = h.call(Method::GET, "/bkt/k?versionId=nope", &[], b"");
        assert_eq!(
            (missing.status, missing.code()),
            (404, Some("NoSuchVersion"))
        );

        let deleted = h.call(Method::DELETE, "/bkt/k", &[], b"");
        assert_eq!(deleted.header("x-amz-delete-marker"), Some("true"));
        let marker = deleted
            .header("x-amz-version-id")
            .expect("marker id")
            .to_string();
        let get = h.call(Method::GET, "/bkt/k", &[], b"");
        assert_eq!((get.status, get.code()), (404, Some("NoSuchKey")));
        assert_eq!(get.header("x-amz-delete-marker"), Some("true"));
        let head = h.call(Method::HEAD, "/bkt/k", &[], b"");
        assert_eq!(
            (
                head.status,
                head.header("x-amz-delete-marker"),
                head.body.as_str()
            ),
            (404, Some("true"), "")
        );
        let at_marker = h.call(Method::GET, &format!("/bkt/k?versionId={marker}"), &[], b"");
        assert_eq!(
            (at_marker.status, at_marker.code()),
            (405, Some("MethodNotAllowed"))
        );

        let list = h.call(Method::GET, "/bkt?versions", &[], b"");
        let doc = list.doc();
        let rows: Vec<(String, String, String)> = doc
            .children
            .iter()
            .filter(|c| c.name == "Version" || c.name == "DeleteMarker")
            .map(|c| {
                (
                    c.name.clone(),
                    c.text_of("VersionId").unwrap_or("").to_string(),
                    c.text_of("IsLatest").unwrap_or("").to_string(),
                )
            })
            .collect();
        assert_eq!(
            rows,
            vec![
                ("DeleteMarker".into(), marker.clone(), "true".into()),
                ("Version".into(), v2.clone(), "false".into()),
                ("Version".into(), v1.clone(), "false".into()),
                ("Version".into(), "null".into(), "false".into()),
            ]
        );
        // The current listing skips a deleted key; the bucket is still not empty.
        let v2_list = h.call(Method::GET, "/bkt?list-type=2", &[], b"");
        assert_eq!(v2_list.doc().text_of("KeyCount"), Some("0"));
        let refused = h.call(Method::DELETE, "/bkt", &[], b"");
        assert_eq!(
            (refused.status, refused.code()),
            (409, Some("BucketNotEmpty"))
        );

        // Deleting the marker by ID brings the previous version back.
        let undelete = h.call(
            Method::DELETE,
            &format!("/bkt/k?versionId={marker}"),
            &[],
            b"",
        );
        assert_eq!(undelete.header("x-amz-delete-marker"), Some("true"));
        assert_eq!(undelete.header("x-amz-version-id"), Some(marker.as_str()));
        assert_eq!(h.call(Method::GET, "/bkt/k", &[], b"").body, "two");

        // Suspended: writes and deletes replace the `null` version, keeping the others.
        let suspend =
            "<VersioningConfiguration><Status>Suspended</Status></VersioningConfiguration>";
        assert_eq!(
            h.configure(Method::PUT, "/bkt?versioning", suspend).status,
            200
        );
        let put = h.put("/bkt/k", b"suspended");
        assert_eq!(put.header("x-amz-version-id"), None);
        let ids: Vec<String> = h.s3.buckets["bkt"].objects["k"]
            .iter()
            .map(|v| v.version_id.clone())
            .collect();
        assert_eq!(ids, vec![v1.clone(), v2.clone(), "null".to_string()]);
        let deleted = h.call(Method::DELETE, "/bkt/k", &[], b"");
        assert_eq!(deleted.header("x-amz-version-id"), Some("null"));
        let versions = &h.s3.buckets["bkt"].objects["k"];
        assert_eq!(versions.len(), 3);
        assert!(versions[2].delete_marker);

        for id in [v1.as_str(), v2.as_str(), "null"] {
            assert_eq!(
                h.call(Method::DELETE, &format!("/bkt/k?versionId={id}"), &[], b"")
                    .status,
                204
            );
        }
        assert_eq!(h.call(Method::DELETE, "/bkt", &[], b"").status, 204);
        let gone = h.call(Method::HEAD, "/bkt", &[], b"");
        assert_eq!(gone.status, 404);
        let bad = "<VersioningConfiguration><Status>On</Status></VersioningConfiguration>";
        h.put("/cee", b"");
        assert_eq!(
            h.configure(Method::PUT, "/cee?versioning", bad).code(),
            Some("MalformedXML")
        );
    }

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
    fn delete_objects_reports_each_key() {
        let mut h = Harness::new();
        h.put("/bkt", b"");
        let enable = "<VersioningConfiguration><Status>Enabled</Status></VersioningConfiguration>";
        h.configure(Method::PUT, "/bkt?versioning", enable);
        let v1 = h
            .put("/bkt/a", b"1")
            .header("x-amz-version-id")
            .unwrap_or("")
            .to_string();
        h.put("/bkt/b", b"2");
        let body = format!(
            "<Delete><Object><Key>a</Key><VersionId>{v1}</VersionId></Object><Object><Key>b</Key></Object><Object><Key>never</Key></Object><Object><Key>b</Key><ETag>\"wrong\"</ETag></Object></Delete>"
        );
        let r = h.configure(Method::POST, "/bkt?delete", &body);
        assert_eq!(r.status, 200, "{}", r.body);
        let doc = r.doc();
        assert_eq!(doc.name, "DeleteResult");
        let deleted: Vec<&Element> = doc.all("Deleted").collect();
        assert_eq!(deleted.len(), 3);
        assert_eq!(deleted[0].text_of("VersionId"), Some(v1.as_str()));
        assert_eq!(deleted[0].text_of("DeleteMarker"), None);
        assert_eq!(deleted[1].text_of("DeleteMarker"), Some("true"));
        assert!(deleted[1].text_of("DeleteMarkerVersionId").is_some());
        let errors: Vec<&Element> = doc.all("Error").collect();
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].text_of("Code"), Some("NoSuchKey"));
        assert!(!h.s3.buckets["bkt"].objects.contains_key("a"));
        let quiet = "<Delete><Quiet>true</Quiet><Object><Key>x</Key></Object></Delete>";
        let r = h.configure(Method::POST, "/bkt?delete", quiet);
        assert_eq!(r.doc().children.len(), 0);
        assert_eq!(
            h.call(Method::POST, "/bkt?delete", &[], quiet.as_bytes())
                .code(),
            Some("InvalidRequest")
        );
        for bad in [
            "<Delete/>",
            "<Delete><Object/></Delete>",
            "<Delete><Object><Key>a</Key><Bogus/></Object></Delete>",
            "not xml",
        ] {
            assert_eq!(
                h.configure(Method::POST, "/bkt?delete", bad).code(),
                Some("MalformedXML"),
                "{bad}"
            );
        }
    }

    #[test]
    fn conditional_requests() {
        let mut h = Harness::new();
        h.put("/bkt", b"");
        let star = [("if-none-match", "*")];
        assert_eq!(h.call(Method::PUT, "/bkt/k", &star, b"first").status, 200);
        let again = h.call(Method::PUT, "/bkt/k", &star, b"second");
        assert_eq!(
            (again.status, again.code()),
            (412, Some("PreconditionFailed"))
        );
        let etag = format!("\"{}\"", hex(&digest::md5(b"first")));
        assert_eq!(
            h.call(Method::PUT, "/bkt/k", &[("if-match", &etag)], b"second")
                .status,
            200
        );
        let stale = h.call(Method::PUT, "/bkt/k", &[("if-match", &etag)], b"third");
        assert_eq!(stale.status, 412);
        let absent = h.call(Method::PUT, "/bkt/new", &[("if-match", &etag)], b"x");
        assert_eq!(absent.code(), Some("NoSuchKey"));
        assert_eq!(
            h.call(Method::PUT, "/bkt/k", &[("if-none-match", "\"abc\"")], b"x")
                .status,
            501
        );
        let current = format!("\"{}\"", hex(&digest::md5(b"second")));
        assert_eq!(
            h.call(Method::GET, "/bkt/k", &[("if-none-match", &current)], b"")
                .status,
            304
        );
        assert_eq!(
            h.call(Method::GET, "/bkt/k", &[("if-match", &etag)], b"")
                .status,
            412
        );
        assert_eq!(
            h.call(Method::GET, "/bkt/k", &[("if-match", &current)], b"")
                .status,
            200
        );
        let later = "Sun, 22 Nov 2026 10:00:00 GMT";
        let earlier = "Fri, 20 Nov 2026 10:00:00 GMT";
        assert_eq!(
            h.call(Method::GET, "/bkt/k", &[("if-modified-since", later)], b"")
                .status,
            304
        );
        assert_eq!(
            h.call(
                Method::GET,
                "/bkt/k",
                &[("if-modified-since", earlier)],
                b""
            )
            .status,
            200
        );
        assert_eq!(
            h.call(
                Method::GET,
                "/bkt/k",
                &[("if-unmodified-since", earlier)],
                b""
            )
            .status,
            412
        );
    }

    #[test]
    fn reads_answer_headers_and_ranges() {
        let mut h = Harness::new();
        h.put("/bkt", b"");
        let headers = [
            ("content-type", "text/plain"),
            ("x-amz-meta-owner", "ml-team"),
            ("cache-control", "no-cache"),
        ];
        h.call(Method::PUT, "/bkt/dir/file.txt", &headers, b"0123456789");
        let r = h.call(Method::GET, "/bkt/dir/file.txt", &[], b"");
        assert_eq!(r.header("content-type"), Some("text/plain"));
        assert_eq!(r.header("x-amz-meta-owner"), Some("ml-team"));
        assert_eq!(r.header("cache-control"), Some("no-cache"));
        assert_eq!(
            r.header("last-modified"),
            Some("Sat, 21 Nov 2026 10:00:00 GMT")
        );
        assert_eq!(r.header("x-amz-version-id"), None);
        assert!(r.header("x-amz-request-id").is_some());
        let head = h.call(Method::HEAD, "/bkt/dir/file.txt", &[], b"");
        assert_eq!(
            (
                head.status,
                head.header("content-length"),
                head.body.as_str()
            ),
            (200, Some("10"), "")
        );
        let cases = [
            ("bytes=2-4", 206, "234", Some("bytes 2-4/10")),
            ("bytes=7-", 206, "789", Some("bytes 7-9/10")),
            ("bytes=-3", 206, "789", Some("bytes 7-9/10")),
            ("bytes=5-100", 206, "56789", Some("bytes 5-9/10")),
            ("bytes=4-2", 200, "0123456789", None),
            ("bytes=0-1,4-5", 200, "0123456789", None),
            ("items=0-1", 200, "0123456789", None),
        ];
        for (range, status, body, content_range) in cases {
            let r = h.call(Method::GET, "/bkt/dir/file.txt", &[("range", range)], b"");
            assert_eq!(
                (r.status, r.body.as_str(), r.header("content-range")),
                (status, body, content_range),
                "{range}"
            );
        }
        let r = h.call(
            Method::GET,
            "/bkt/dir/file.txt",
            &[("range", "bytes=10-")],
            b"",
        );
        assert_eq!((r.status, r.code()), (416, Some("InvalidRange")));
        let r = h.call(
            Method::GET,
            "/bkt/dir/file.txt?response-content-type=application/json",
            &[],
            b"",
        );
        assert_eq!(r.header("content-type"), Some("application/json"));
        let r = h.call(Method::GET, "/bkt/missing", &[], b"");
        assert_eq!(
            (r.status, r.code(), r.doc().text_of("Key")),
            (404, Some("NoSuchKey"), Some("missing"))
        );
        assert_eq!(
            h.call(Method::GET, "/nobucket/k", &[], b"").code(),
            Some("NoSuchBucket")
        );
        assert_eq!(h.put("/bkt/", b"").code(), Some("BucketAlreadyOwnedByYou"));
        let long = format!("/bkt/{}", "k".repeat(1025));
        assert_eq!(h.put(&long, b"").code(), Some("KeyTooLongError"));
        let big = "v".repeat(2100);
        assert_eq!(
            h.call(Method::PUT, "/bkt/m", &[("x-amz-meta-big", &big)], b"")
                .code(),
            Some("MetadataTooLarge")
        );
    }

    #[test]
    fn listing_rolls_up_and_pages() {
        let mut h = Harness::new();
        h.put("/bkt", b"");
        for key in ["a.txt", "dir/x", "dir/y", "dir/sub/z", "e f+g", "zz"] {
            h.put(
                &format!("/bkt/{}", crate::http::percent_encode(key)),
                b"data",
            );
        }
        let r = h.call(Method::GET, "/bkt?list-type=2&delimiter=/", &[], b"");
        let doc = r.doc();
        assert_eq!(texts(doc, "Contents", "Key"), ["a.txt", "e f+g", "zz"]);
        assert_eq!(texts(doc, "CommonPrefixes", "Prefix"), ["dir/"]);
        assert_eq!(doc.text_of("KeyCount"), Some("4"));
        let r = h.call(
            Method::GET,
            "/bkt?list-type=2&prefix=dir/&delimiter=/",
            &[],
            b"",
        );
        assert_eq!(texts(r.doc(), "Contents", "Key"), ["dir/x", "dir/y"]);
        assert_eq!(texts(r.doc(), "CommonPrefixes", "Prefix"), ["dir/sub/"]);
        let r = h.call(Method::GET, "/bkt?list-type=2&encoding-type=url", &[], b"");
        assert!(texts(r.doc(), "Contents", "Key").contains(&"e+f%2Bg"));

        // Two at a time: every key once, the common prefix counting as one entry.
        let mut seen = Vec::new();
        let mut token: Option<String> = None;
        for _ in 0..10 {
            let mut path = "/bkt?list-type=2&delimiter=/&max-keys=2".to_string();
            if let Some(t) = &token {
                path.push_str(&format!(
                    "&continuation-token={}",
                    crate::http::percent_encode(t)
                ));
            }
            let r = h.call(Method::GET, &path, &[], b"");
            let doc = r.doc();
            for c in &doc.children {
                match c.name.as_str() {
                    "Contents" => seen.push(c.text_of("Key").unwrap_or("").to_string()),
                    "CommonPrefixes" => seen.push(c.text_of("Prefix").unwrap_or("").to_string()),
                    _ => {}
                }
            }
            token = doc.text_of("NextContinuationToken").map(str::to_string);
            assert_eq!(doc.text_of("IsTruncated") == Some("true"), token.is_some());
            if token.is_none() {
                break;
            }
        }
        seen.sort();
        assert_eq!(seen, ["a.txt", "dir/", "e f+g", "zz"]);
        let r = h.call(Method::GET, "/bkt?list-type=2&start-after=dir/y", &[], b"");
        assert_eq!(texts(r.doc(), "Contents", "Key"), ["e f+g", "zz"]);
        let r = h.call(
            Method::GET,
            "/bkt?list-type=2&continuation-token=%%%",
            &[],
            b"",
        );
        assert_eq!(r.code(), Some("InvalidArgument"));
        let r = h.call(Method::GET, "/bkt?list-type=2&max-keys=0", &[], b"");
        assert_eq!(
            (r.doc().text_of("KeyCount"), r.doc().text_of("IsTruncated")),
            (Some("0"), Some("false"))
        );
        // ListObjects (v1) pages with markers.
        let r = h.call(Method::GET, "/bkt?max-keys=2", &[], b"");
        assert_eq!(texts(r.doc(), "Contents", "Key"), ["a.txt", "dir/sub/z"]);
        assert_eq!(r.doc().text_of("IsTruncated"), Some("true"));
        let r = h.call(Method::GET, "/bkt?marker=dir/sub/z", &[], b"");
        assert_eq!(
            texts(r.doc(), "Contents", "Key"),
            ["dir/x", "dir/y", "e f+g", "zz"]
        );

        // Versions page by key and version ID markers.
        let enable = "<VersioningConfiguration><Status>Enabled</Status></VersioningConfiguration>";
        h.configure(Method::PUT, "/bkt?versioning", enable);
        h.put("/bkt/zz", b"again");
        let mut rows = Vec::new();
        let mut markers: Option<(String, String)> = None;
        for _ in 0..10 {
            let mut path = "/bkt?versions&max-keys=3".to_string();
            if let Some((k, v)) = &markers {
                path.push_str(&format!(
                    "&key-marker={}&version-id-marker={v}",
                    crate::http::percent_encode(k)
                ));
            }
            let r = h.call(Method::GET, &path, &[], b"");
            let doc = r.doc();
            rows.extend(doc.all("Version").map(|v| {
                format!(
                    "{}@{}",
                    v.text_of("Key").unwrap_or(""),
                    v.text_of("VersionId").unwrap_or("")
                )
            }));
            markers = doc.text_of("NextKeyMarker").map(|k| {
                (
                    k.to_string(),
                    doc.text_of("NextVersionIdMarker").unwrap_or("").to_string(),
                )
            });
            if doc.text_of("IsTruncated") != Some("true") {
                break;
            }
        }
        assert_eq!(rows.len(), 7, "{rows:?}");
        assert_eq!(rows.iter().filter(|r| r.starts_with("zz@")).count(), 2);
    }

    #[test]
    fn lifecycle_rules_are_validated() {
        let rule = |body: &str| {
            format!("<LifecycleConfiguration><Rule>{body}</Rule></LifecycleConfiguration>")
        };
        let cases: &[(&str, u16, Option<&str>)] = &[
            ("<ID>logs</ID><Filter><Prefix>logs/</Prefix></Filter><Status>Enabled</Status><Expiration><Days>30</Days></Expiration>", 200, None),
            ("<Filter/><Status>Enabled</Status><NoncurrentVersionExpiration><NoncurrentDays>7</NoncurrentDays></NoncurrentVersionExpiration><AbortIncompleteMultipartUpload><DaysAfterInitiation>1</DaysAfterInitiation></AbortIncompleteMultipartUpload>", 200, None),
            ("<Prefix>old/</Prefix><Status>Disabled</Status><Transition><Days>30</Days><StorageClass>STANDARD_IA</StorageClass></Transition>", 200, None),
            ("<Filter><And><Prefix>a/</Prefix><Tag><Key>k</Key><Value>v</Value></Tag></And></Filter><Status>Enabled</Status><Expiration><Date>2027-01-01T00:00:00.000Z</Date></Expiration>", 200, None),
            ("<Filter/><Status>Enabled</Status>", 400, Some("InvalidRequest")),
            ("<Filter/><Status>Maybe</Status><Expiration><Days>1</Days></Expiration>", 400, Some("MalformedXML")),
            ("<Status>Enabled</Status><Expiration><Days>1</Days></Expiration>", 400, Some("MalformedXML")),
            ("<Prefix/><Filter/><Status>Enabled</Status><Expiration><Days>1</Days></Expiration>", 400, Some("MalformedXML")),
            ("<Filter/><Status>Enabled</Status><Expiration><Days>0</Days></Expiration>", 400, Some("InvalidArgument")),
            ("<Filter/><Status>Enabled</Status><Expiration><Days>x</Days></Expiration>", 400, Some("MalformedXML")),
            ("<Filter/><Status>Enabled</Status><Expiration><Days>1</Days><Date>2027-01-01T00:00:00Z</Date></Expiration>", 400, Some("MalformedXML")),
            ("<Filter/><Status>Enabled</Status><Expiration><Date>2027-01-01T10:00:00Z</Date></Expiration>", 400, Some("InvalidArgument")),
            ("<Filter/><Status>Enabled</Status><Transition><Days>5</Days><StorageClass>STANDARD_IA</StorageClass></Transition>", 400, Some("InvalidArgument")),
            ("<Filter/><Status>Enabled</Status><Transition><Days>5</Days><StorageClass>TAPE</StorageClass></Transition>", 400, Some("MalformedXML")),
            ("<Filter><Tag><Key>k</Key><Value>v</Value></Tag></Filter><Status>Enabled</Status><AbortIncompleteMultipartUpload><DaysAfterInitiation>1</DaysAfterInitiation></AbortIncompleteMultipartUpload>", 400, Some("InvalidRequest")),
            ("<Filter><Prefix>a</Prefix><Tag><Key>k</Key><Value>v</Value></Tag></Filter><Status>Enabled</Status><Expiration><Days>1</Days></Expiration>", 400, Some("MalformedXML")),
            ("<Filter/><Status>Enabled</Status><Expiration><Days>1</Days></Expiration><Extra/>", 400, Some("MalformedXML")),
        ];
        let mut h = Harness::new();
        h.put("/bkt", b"");
        let missing = h.call(Method::GET, "/bkt?lifecycle", &[], b"");
        assert_eq!(
            (missing.status, missing.code()),
            (404, Some("NoSuchLifecycleConfiguration"))
        );
        for (body, status, code) in cases {
            let r = h.configure(Method::PUT, "/bkt?lifecycle", &rule(body));
            assert_eq!((r.status, r.code()), (*status, *code), "{body}: {}", r.body);
        }
        let twice = "<LifecycleConfiguration><Rule><ID>a</ID><Filter/><Status>Enabled</Status><Expiration><Days>1</Days></Expiration></Rule><Rule><ID>a</ID><Filter/><Status>Enabled</Status><Expiration><Days>2</Days></Expiration></Rule></LifecycleConfiguration>";
        assert_eq!(
            h.configure(Method::PUT, "/bkt?lifecycle", twice).code(),
            Some("InvalidArgument")
        );
        assert_eq!(
            h.configure(Method::PUT, "/bkt?lifecycle", "<LifecycleConfiguration/>")
                .code(),
            Some("MalformedXML")
        );
        // The last accepted configuration is what GET answers, IDs filled in.
        let got = h.call(Method::GET, "/bkt?lifecycle", &[], b"");
        assert_eq!(
            got.header("x-amz-transition-default-minimum-object-size"),
            Some("all_storage_classes_128K")
        );
        let stored = got.doc().find("Rule").expect("a rule");
        assert!(stored.text_of("ID").is_some_and(|id| !id.is_empty()));
        assert_eq!(
            stored.find("Expiration").and_then(|e| e.text_of("Date")),
            Some("2027-01-01T00:00:00.000Z")
        );
        assert_eq!(
            h.call(Method::DELETE, "/bkt?lifecycle", &[], b"").status,
            204
        );
        assert_eq!(h.call(Method::GET, "/bkt?lifecycle", &[], b"").status, 404);
    }

    #[test]
    fn tags_are_validated() {
        let mut h = Harness::new();
        h.put("/bkt", b"");
        assert_eq!(
            h.call(Method::GET, "/bkt?tagging", &[], b"").code(),
            Some("NoSuchTagSet")
        );
        let set = |tags: &str| format!("<Tagging><TagSet>{tags}</TagSet></Tagging>");
        let tag = |k: &str, v: &str| format!("<Tag><Key>{k}</Key><Value>{v}</Value></Tag>");
        let ok = set(&(tag("team", "ml") + &tag("cost-center", "42")));
        assert_eq!(h.configure(Method::PUT, "/bkt?tagging", &ok).status, 204);
        let got = h.call(Method::GET, "/bkt?tagging", &[], b"");
        let tag_set = got.doc().find("TagSet").expect("TagSet");
        assert_eq!(texts(tag_set, "Tag", "Key"), ["team", "cost-center"]);
        for bad in [
            set(&(tag("a", "1") + &tag("a", "2"))),
            set(&tag("aws:reserved", "x")),
            set(&tag(&"k".repeat(129), "x")),
            set(&tag("k", &"v".repeat(257))),
            set(&tag("", "x")),
            set(&tag("bad*key", "x")),
            set(&(0..51)
                .map(|i| tag(&format!("k{i}"), "v"))
                .collect::<String>()),
        ] {
            assert_eq!(
                h.configure(Method::PUT, "/bkt?tagging", &bad).code(),
                Some("InvalidTag"),
                "{bad}"
            );
        }
        assert_eq!(h.call(Method::DELETE, "/bkt?tagging", &[], b"").status, 204);
        assert_eq!(h.call(Method::GET, "/bkt?tagging", &[], b"").status, 404);
    }

    #[test]
    fn copies_take_content_and_optionally_metadata() {
        let mut h = Harness::new();
        h.put("/src", b"");
        h.put("/dst", b"");
        h.call(
            Method::PUT,
            "/src/a",
            &[("x-amz-meta-k", "v"), ("content-type", "text/csv")],
            b"rows",
        );
        let r = h.call(
            Method::PUT,
            "/dst/b",
            &[("x-amz-copy-source", "/src/a")],
            b"",
        );
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.doc().name, "CopyObjectResult");
        assert_eq!(
            r.doc().text_of("ETag"),
            Some(quoted(&hex(&digest::md5(b"rows")))).as_deref()
        );
        let got = h.call(Method::GET, "/dst/b", &[], b"");
        assert_eq!(
            (
                got.body.as_str(),
                got.header("x-amz-meta-k"),
                got.header("content-type")
            ),
            ("rows", Some("v"), Some("text/csv"))
        );
        let replaced = [
            ("x-amz-copy-source", "src/a"),
            ("x-amz-metadata-directive", "REPLACE"),
            ("x-amz-meta-n", "1"),
        ];
        h.call(Method::PUT, "/dst/c", &replaced, b"");
        let got = h.call(Method::GET, "/dst/c", &[], b"");
        assert_eq!(
            (got.header("x-amz-meta-k"), got.header("x-amz-meta-n")),
            (None, Some("1"))
        );
        let itself = h.call(
            Method::PUT,
            "/src/a",
            &[("x-amz-copy-source", "/src/a")],
            b"",
        );
        assert_eq!(itself.code(), Some("InvalidRequest"));
        let missing = h.call(
            Method::PUT,
            "/dst/d",
            &[("x-amz-copy-source", "/src/none")],
            b"",
        );
        assert_eq!(missing.code(), Some("NoSuchKey"));
        let public = h.call(Method::PUT, "/dst/e", &[("x-amz-acl", "public-read")], b"x");
        assert_eq!(public.code(), Some("AccessControlListNotSupported"));
        let no_key = h.call(Method::PUT, "/dst/d", &[("x-amz-copy-source", "src")], b"");
        assert_eq!(no_key.code(), Some("InvalidArgument"));
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

    /// `len` bytes of text that differ between parts (`seed`), so a part out of place
    /// shows.
    fn text_part(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| b'a' + ((i + usize::from(seed)) % 26) as u8)
            .collect()
    }

    impl Harness {
        /// CreateMultipartUpload; the upload ID.
        fn initiate(&mut self, path: &str, headers: &[(&str, &str)]) -> String {
            let r = self.call(Method::POST, &format!("{path}?uploads"), headers, b"");
            assert_eq!(r.status, 200, "{}", r.body);
            assert_eq!(r.doc().name, "InitiateMultipartUploadResult");
            r.doc()
                .text_of("UploadId")
                .expect("an upload id")
                .to_string()
        }

        /// UploadPart; the reply (its `etag` header is the part's ETag).
        fn part(&mut self, path: &str, id: &str, number: u32, data: &[u8]) -> Reply {
            let path = format!("{path}?partNumber={number}&uploadId={id}");
            self.call(Method::PUT, &path, &[], data)
        }

        fn complete(&mut self, path: &str, id: &str, parts: &[(u32, &str)]) -> Reply {
            self.complete_with(path, id, parts, &[])
        }

        fn complete_with(
            &mut self,
            path: &str,
            id: &str,
            parts: &[(u32, &str)],
            headers: &[(&str, &str)],
        ) -> Reply {
            let list: String = parts
                .iter()
                .map(|(n, etag)| {
                    format!("<Part><PartNumber>{n}</PartNumber><ETag>{etag}</ETag></Part>")
                })
                .collect();
            let body = format!("<CompleteMultipartUpload>{list}</CompleteMultipartUpload>");
            self.call(
                Method::POST,
                &format!("{path}?uploadId={id}"),
                headers,
                body.as_bytes(),
            )
        }
    }

    #[test]
    fn multipart_uploads_complete_into_one_object() {
        let mut h = Harness::new();
        h.put("/bkt", b"");
        let id = h.initiate(
            "/bkt/big",
            &[
                ("content-type", "application/x-tar"),
                ("x-amz-meta-origin", "unit"),
                ("x-amz-tagging", "team=ml&stage=raw%20data"),
            ],
        );
        let parts = [
            text_part(MIN_PART_SIZE as usize, 0),
            text_part(MIN_PART_SIZE as usize, 1),
            text_part(1024, 2),
        ];
        let mut etags = Vec::new();
        for (i, data) in parts.iter().enumerate() {
            let r = h.part("/bkt/big", &id, i as u32 + 1, data);
            assert_eq!(r.status, 200, "{}", r.body);
            let etag = r.header("etag").expect("an etag").to_string();
            assert_eq!(etag, quoted(&hex(&digest::md5(data))));
            assert_eq!(r.header("x-amz-server-side-encryption"), Some("AES256"));
            etags.push(etag);
        }
        // Part numbers are 1 to 10000.
        for bad in [0, 10_001] {
            let r = h.part("/bkt/big", &id, bad, b"x");
            assert_eq!((r.status, r.code()), (400, Some("InvalidArgument")));
        }
        let listed = h.call(Method::GET, &format!("/bkt/big?uploadId={id}"), &[], b"");
        assert_eq!(listed.doc().name, "ListPartsResult");
        assert_eq!(texts(listed.doc(), "Part", "PartNumber"), ["1", "2", "3"]);
        assert_eq!(
            texts(listed.doc(), "Part", "Size"),
            ["5242880", "5242880", "1024"]
        );
        let paged = h.call(
            Method::GET,
            &format!("/bkt/big?uploadId={id}&max-parts=2&part-number-marker=1"),
            &[],
            b"",
        );
        assert_eq!(texts(paged.doc(), "Part", "PartNumber"), ["2", "3"]);
        assert_eq!(paged.doc().text_of("IsTruncated"), Some("false"));
        let uploads = h.call(Method::GET, "/bkt?uploads", &[], b"");
        assert_eq!(texts(uploads.doc(), "Upload", "UploadId"), [id.as_str()]);
        // Nothing is visible until the upload completes.
        assert_eq!(h.call(Method::GET, "/bkt/big", &[], b"").status, 404);

        let r = h.complete(
            "/bkt/big",
            &id,
            &[(1, &etags[0]), (2, &etags[1]), (3, &etags[2])],
        );
        assert_eq!(r.status, 200, "{}", r.body);
        let md5s: Vec<u8> = parts.iter().flat_map(|p| digest::md5(p)).collect();
        let expected = format!("\"{}-3\"", hex(&digest::md5(&md5s)));
        assert_eq!(r.doc().text_of("ETag"), Some(expected.as_str()));
        assert_eq!(r.doc().text_of("Key"), Some("big"));
        let got = h.call(Method::GET, "/bkt/big", &[], b"");
        assert_eq!(got.body.as_bytes(), parts.concat().as_slice());
        assert_eq!(got.header("etag"), Some(expected.as_str()));
        assert_eq!(got.header("content-type"), Some("application/x-tar"));
        assert_eq!(got.header("x-amz-meta-origin"), Some("unit"));
        assert_eq!(got.header("x-amz-tagging-count"), Some("2"));
        // The upload is gone with its parts.
        let again = h.complete("/bkt/big", &id, &[(1, &etags[0])]);
        assert_eq!((again.status, again.code()), (404, Some("NoSuchUpload")));
        let uploads = h.call(Method::GET, "/bkt?uploads", &[], b"");
        assert!(uploads.doc().find("Upload").is_none());
        let tags = h.call(Method::GET, "/bkt/big?tagging", &[], b"");
        let set = tags.doc().find("TagSet").expect("TagSet");
        assert_eq!(texts(set, "Tag", "Value"), ["ml", "raw data"]);
    }

    #[test]
    fn completing_checks_the_part_list() {
        let mut h = Harness::new();
        h.put("/bkt", b"");
        let small = text_part(1024, 0);
        let big = text_part(MIN_PART_SIZE as usize, 1);
        let id = h.initiate("/bkt/k", &[]);
        let e1 = h
            .part("/bkt/k", &id, 1, &big)
            .header("etag")
            .map(str::to_string);
        let e2 = h
            .part("/bkt/k", &id, 2, &small)
            .header("etag")
            .map(str::to_string);
        let e3 = h
            .part("/bkt/k", &id, 3, &small)
            .header("etag")
            .map(str::to_string);
        let (e1, e2, e3) = (
            e1.expect("etag 1"),
            e2.expect("etag 2"),
            e3.expect("etag 3"),
        );
        let too_small = h.complete("/bkt/k", &id, &[(1, &e1), (2, &e2), (3, &e3)]);
        assert_eq!(
            (too_small.status, too_small.code()),
            (400, Some("EntityTooSmall"))
        );
        assert_eq!(too_small.doc().text_of("PartNumber"), Some("2"));
        let wrong = h.complete("/bkt/k", &id, &[(1, &e2), (2, &e2)]);
        assert_eq!((wrong.status, wrong.code()), (400, Some("InvalidPart")));
        let missing = h.complete("/bkt/k", &id, &[(1, &e1), (4, &e2)]);
        assert_eq!(missing.code(), Some("InvalidPart"));
        let order = h.complete("/bkt/k", &id, &[(2, &e2), (1, &e1)]);
        assert_eq!(order.code(), Some("InvalidPartOrder"));
        let twice = h.complete("/bkt/k", &id, &[(1, &e1), (1, &e1)]);
        assert_eq!(twice.code(), Some("InvalidPartOrder"));
        let empty = h.complete("/bkt/k", &id, &[]);
        assert_eq!(empty.code(), Some("MalformedXML"));
        let unknown = h.complete("/bkt/k", "nope", &[(1, &e1)]);
        assert_eq!(
            (unknown.status, unknown.code()),
            (404, Some("NoSuchUpload"))
        );
        assert_eq!(unknown.doc().text_of("UploadId"), Some("nope"));
        // Another key's upload ID is no upload of this key.
        let other = h.complete("/bkt/other", &id, &[(1, &e1)]);
        assert_eq!(other.code(), Some("NoSuchUpload"));

        // Conditional writes, as PutObject's.
        h.put("/bkt/k", b"already here");
        let star = [("if-none-match", "*")];
        let exists = h.complete_with("/bkt/k", &id, &[(1, &e1), (2, &e2)], &star);
        assert_eq!(
            (exists.status, exists.code()),
            (412, Some("PreconditionFailed"))
        );
        let stale = [("if-match", "\"0123\"")];
        let r = h.complete_with("/bkt/k", &id, &[(1, &e1), (2, &e2)], &stale);
        assert_eq!(r.status, 412);
        // Parts left out of the list are dropped; the last part may be small.
        let current = quoted(&hex(&digest::md5(b"already here")));
        let r = h.complete_with(
            "/bkt/k",
            &id,
            &[(1, &e1), (3, &e3)],
            &[("if-match", &current)],
        );
        assert_eq!(r.status, 200, "{}", r.body);
        let got = h.call(Method::GET, "/bkt/k", &[], b"");
        assert_eq!(got.body.len(), big.len() + small.len());
        assert!(got.header("etag").is_some_and(|e| e.ends_with("-2\"")));

        // Aborting discards the upload.
        let id = h.initiate("/bkt/k", &[]);
        h.part("/bkt/k", &id, 1, b"x");
        let path = format!("/bkt/k?uploadId={id}");
        assert_eq!(h.call(Method::DELETE, &path, &[], b"").status, 204);
        let r = h.call(Method::DELETE, &path, &[], b"");
        assert_eq!((r.status, r.code()), (404, Some("NoSuchUpload")));
        assert_eq!(h.part("/bkt/k", &id, 1, b"x").code(), Some("NoSuchUpload"));
        assert_eq!(
            h.call(Method::GET, &path, &[], b"").code(),
            Some("NoSuchUpload")
        );

        // A bucket with uploads in progress but no objects can be deleted; they go.
        h.put("/spare", b"");
        h.initiate("/spare/k", &[]);
        assert_eq!(h.call(Method::DELETE, "/spare", &[], b"").status, 204);
    }

    #[test]
    fn multipart_checksums_are_composite_or_full_object() {
        let mut h = Harness::new();
        h.put("/bkt", b"");
        let big = text_part(MIN_PART_SIZE as usize, 3);
        let small = b"tail".to_vec();
        let crc = |d: &[u8]| digest::crc32(d, 0xEDB8_8320).to_be_bytes();
        let id = h.initiate("/bkt/c", &[("x-amz-checksum-algorithm", "CRC32")]);
        // A part with the checksum sent, and one the sandbox computes.
        let sent = B64.encode(crc(&big));
        let path = format!("/bkt/c?partNumber=1&uploadId={id}");
        let r = h.call(Method::PUT, &path, &[("x-amz-checksum-crc32", &sent)], &big);
        assert_eq!(r.header("x-amz-checksum-crc32"), Some(sent.as_str()));
        let r = h.part("/bkt/c", &id, 2, &small);
        let computed = B64.encode(crc(&small));
        assert_eq!(r.header("x-amz-checksum-crc32"), Some(computed.as_str()));
        let mismatched = h.call(
            Method::PUT,
            &path,
            &[("x-amz-checksum-sha256", &B64.encode(digest::sha256(&big)))],
            &big,
        );
        assert_eq!(mismatched.code(), Some("InvalidRequest"));
        let e1 = quoted(&hex(&digest::md5(&big)));
        let e2 = quoted(&hex(&digest::md5(&small)));
        // The part checksums must be in the list.
        let without = h.complete("/bkt/c", &id, &[(1, &e1), (2, &e2)]);
        assert_eq!(without.code(), Some("InvalidRequest"));
        let body = format!(
            "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>{e1}</ETag><ChecksumCRC32>{sent}</ChecksumCRC32></Part><Part><PartNumber>2</PartNumber><ETag>{e2}</ETag><ChecksumCRC32>{computed}</ChecksumCRC32></Part></CompleteMultipartUpload>"
        );
        let r = h.call(
            Method::POST,
            &format!("/bkt/c?uploadId={id}"),
            &[],
            body.as_bytes(),
        );
        assert_eq!(r.status, 200, "{}", r.body);
        let composite = format!("{}-2", B64.encode(crc(&[crc(&big), crc(&small)].concat())));
        assert_eq!(r.doc().text_of("ChecksumCRC32"), Some(composite.as_str()));
        assert_eq!(r.doc().text_of("ChecksumType"), Some("COMPOSITE"));
        let got = h.call(
            Method::HEAD,
            "/bkt/c",
            &[("x-amz-checksum-mode", "ENABLED")],
            b"",
        );
        assert_eq!(got.header("x-amz-checksum-crc32"), Some(composite.as_str()));
        assert_eq!(got.header("x-amz-checksum-type"), Some("COMPOSITE"));

        // CRC-64/NVME checksums are of the whole object.
        let id = h.initiate("/bkt/f", &[("x-amz-checksum-algorithm", "CRC64NVME")]);
        let e1 = h.part("/bkt/f", &id, 1, &big);
        let e2 = h.part("/bkt/f", &id, 2, &small);
        let part_sums: Vec<String> = [&e1, &e2]
            .iter()
            .map(|r| {
                r.header("x-amz-checksum-crc64nvme")
                    .unwrap_or("")
                    .to_string()
            })
            .collect();
        let list: String = [(1, &e1, &part_sums[0]), (2, &e2, &part_sums[1])]
            .iter()
            .map(|(n, r, sum)| {
                format!(
                    "<Part><PartNumber>{n}</PartNumber><ETag>{}</ETag><ChecksumCRC64NVME>{sum}</ChecksumCRC64NVME></Part>",
                    r.header("etag").unwrap_or("")
                )
            })
            .collect();
        let body = format!("<CompleteMultipartUpload>{list}</CompleteMultipartUpload>");
        let whole = B64.encode(
            digest::crc64(
                &[big.as_slice(), small.as_slice()].concat(),
                0x9A6C_9329_AC4B_C9B5,
            )
            .to_be_bytes(),
        );
        let r = h.call(
            Method::POST,
            &format!("/bkt/f?uploadId={id}"),
            &[("x-amz-checksum-crc64nvme", "AAAAAAAAAAA=")],
            body.as_bytes(),
        );
        assert_eq!(r.code(), Some("BadDigest"));
        let r = h.call(
            Method::POST,
            &format!("/bkt/f?uploadId={id}"),
            &[("x-amz-checksum-crc64nvme", &whole)],
            body.as_bytes(),
        );
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.doc().text_of("ChecksumCRC64NVME"), Some(whole.as_str()));
        assert_eq!(r.doc().text_of("ChecksumType"), Some("FULL_OBJECT"));

        for (headers, code) in [
            (
                &[("x-amz-checksum-algorithm", "ROT13")][..],
                "InvalidRequest",
            ),
            (
                &[("x-amz-checksum-type", "COMPOSITE")][..],
                "InvalidRequest",
            ),
            (
                &[
                    ("x-amz-checksum-algorithm", "CRC64NVME"),
                    ("x-amz-checksum-type", "COMPOSITE"),
                ][..],
                "InvalidRequest",
            ),
            (
                &[
                    ("x-amz-checksum-algorithm", "SHA256"),
                    ("x-amz-checksum-type", "FULL_OBJECT"),
                ][..],
                "InvalidRequest",
            ),
        ] {
            let r = h.call(Method::POST, "/bkt/x?uploads", headers, b"");
            assert_eq!(r.code(), Some(code), "{headers:?}");
        }
    }

    #[test]
    fn parts_can_be_copied_from_ranges_of_objects() {
        let mut h = Harness::new();
        h.put("/bkt", b"");
        let source = text_part(MIN_PART_SIZE as usize + 100, 5);
        h.put("/bkt/src", &source);
        let id = h.initiate("/bkt/dst", &[]);
        let copy = |h: &mut Harness, number: u32, range: Option<&str>| {
            let mut headers = vec![("x-amz-copy-source", "/bkt/src")];
            if let Some(r) = range {
                headers.push(("x-amz-copy-source-range", r));
            }
            h.call(
                Method::PUT,
                &format!("/bkt/dst?partNumber={number}&uploadId={id}"),
                &headers,
                b"",
            )
        };
        let first = copy(&mut h, 1, Some(&format!("bytes=0-{}", MIN_PART_SIZE - 1)));
        assert_eq!(first.status, 200, "{}", first.body);
        assert_eq!(first.doc().name, "CopyPartResult");
        let e1 = first.doc().text_of("ETag").unwrap_or("").to_string();
        assert_eq!(
            e1,
            quoted(&hex(&digest::md5(&source[..MIN_PART_SIZE as usize])))
        );
        let rest = format!("bytes={}-{}", MIN_PART_SIZE, source.len() - 1);
        let second = copy(&mut h, 2, Some(&rest));
        let e2 = second.doc().text_of("ETag").unwrap_or("").to_string();
        for bad in ["0-10", "bytes=10", "bytes=a-b", "bytes=-5"] {
            let r = copy(&mut h, 3, Some(bad));
            assert_eq!(r.code(), Some("InvalidArgument"), "{bad}");
        }
        let beyond = copy(&mut h, 3, Some(&format!("bytes=0-{}", source.len())));
        assert!(
            beyond.body.contains("Range specified is not valid"),
            "{}",
            beyond.body
        );
        let r = h.complete("/bkt/dst", &id, &[(1, &e1), (2, &e2)]);
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(
            h.call(Method::GET, "/bkt/dst", &[], b"").body.as_bytes(),
            source
        );
        let gone = h.call(
            Method::PUT,
            &format!("/bkt/dst?partNumber=1&uploadId={id}"),
            &[("x-amz-copy-source", "/bkt/src")],
            b"",
        );
        assert_eq!(gone.code(), Some("NoSuchUpload"));
    }

    #[test]
    fn uploads_list_by_key_with_prefixes_and_pages() {
        let mut h = Harness::new();
        h.put("/bkt", b"");
        let mut ids = Vec::new();
        for key in ["a/1", "a/2", "b", "b", "c"] {
            ids.push(h.initiate(&format!("/bkt/{key}"), &[]));
            h.now += chrono::Duration::seconds(1);
        }
        let r = h.call(Method::GET, "/bkt?uploads&delimiter=/", &[], b"");
        assert_eq!(texts(r.doc(), "Upload", "Key"), ["b", "b", "c"]);
        assert_eq!(texts(r.doc(), "CommonPrefixes", "Prefix"), ["a/"]);
        // Two at a time: every upload once, in order.
        let mut seen = Vec::new();
        let mut markers: Option<(String, String)> = None;
        for _ in 0..10 {
            let mut path = "/bkt?uploads&max-uploads=2".to_string();
            if let Some((k, id)) = &markers {
                path.push_str(&format!("&key-marker={k}&upload-id-marker={id}"));
            }
            let r = h.call(Method::GET, &path, &[], b"");
            let doc = r.doc();
            seen.extend(
                texts(doc, "Upload", "UploadId")
                    .into_iter()
                    .map(str::to_string),
            );
            if doc.text_of("IsTruncated") != Some("true") {
                break;
            }
            markers = Some((
                doc.text_of("NextKeyMarker").unwrap_or("").to_string(),
                doc.text_of("NextUploadIdMarker").unwrap_or("").to_string(),
            ));
        }
        assert_eq!(seen, ids);
        let r = h.call(
            Method::GET,
            "/bkt?uploads&prefix=a/&key-marker=a/1",
            &[],
            b"",
        );
        assert_eq!(texts(r.doc(), "Upload", "UploadId"), [ids[1].as_str()]);
    }

    #[test]
    fn objects_carry_tags() {
        let mut h = Harness::new();
        h.put("/bkt", b"");
        h.call(Method::PUT, "/bkt/k", &[("x-amz-tagging", "a=1&b=2")], b"x");
        let got = h.call(Method::GET, "/bkt/k?tagging", &[], b"");
        assert_eq!(got.doc().name, "Tagging");
        let set = got.doc().find("TagSet").expect("TagSet");
        assert_eq!(texts(set, "Tag", "Key"), ["a", "b"]);
        let body = "<Tagging><TagSet><Tag><Key>c</Key><Value>3</Value></Tag></TagSet></Tagging>";
        assert_eq!(h.configure(Method::PUT, "/bkt/k?tagging", body).status, 200);
        let got = h.call(Method::GET, "/bkt/k?tagging", &[], b"");
        let set = got.doc().find("TagSet").expect("TagSet");
        assert_eq!(texts(set, "Tag", "Key"), ["c"]);
        // Integrity is required as for bucket configurations.
        let r = h.call(Method::PUT, "/bkt/k?tagging", &[], body.as_bytes());
        assert_eq!(r.code(), Some("InvalidRequest"));
        // Copies keep tags unless told to replace them.
        h.call(
            Method::PUT,
            "/bkt/kept",
            &[("x-amz-copy-source", "/bkt/k")],
            b"",
        );
        let replaced = [
            ("x-amz-copy-source", "/bkt/k"),
            ("x-amz-tagging-directive", "REPLACE"),
            ("x-amz-tagging", "d=4"),
        ];
        h.call(Method::PUT, "/bkt/replaced", &replaced, b"");
        for (key, expected) in [("kept", "c"), ("replaced", "d")] {
            let got = h.call(Method::GET, &format!("/bkt/{key}?tagging"), &[], b"");
            let set = got.doc().find("TagSet").expect("TagSet");
            assert_eq!(texts(set, "Tag", "Key"), [expected], "{key}");
        }
        let bad_directive = [
            ("x-amz-copy-source", "/bkt/k"),
            ("x-amz-tagging-directive", "MERGE"),
        ];
        assert_eq!(
            h.call(Method::PUT, "/bkt/x", &bad_directive, b"").code(),
            Some("InvalidArgument")
        );
        assert_eq!(
            h.call(Method::DELETE, "/bkt/k?tagging", &[], b"").status,
            204
        );
        let got = h.call(Method::GET, "/bkt/k?tagging", &[], b"");
        assert_eq!(got.status, 200);
        assert_eq!(got.doc().find("TagSet").map(|s| s.children.len()), Some(0));
        assert_eq!(got.header("x-amz-version-id"), None);
        let eleven: Vec<String> = (0..11).map(|i| format!("k{i}=v")).collect();
        let r = h.call(
            Method::PUT,
            "/bkt/many",
            &[("x-amz-tagging", &eleven.join("&"))],
            b"x",
        );
        assert_eq!(r.code(), Some("BadRequest"));
        let r = h.call(
            Method::PUT,
            "/bkt/sys",
            &[("x-amz-tagging", "aws:x=1")],
            b"x",
        );
        assert_eq!(r.code(), Some("InvalidTag"));
        let missing = h.call(Method::GET, "/bkt/none?tagging", &[], b"");
        assert_eq!(missing.code(), Some("NoSuchKey"));

        // On a versioned bucket, each version has its own tags.
        let enable = "<VersioningConfiguration><Status>Enabled</Status></VersioningConfiguration>";
        h.configure(Method::PUT, "/bkt?versioning", enable);
        let v1 = h
            .call(Method::PUT, "/bkt/v", &[("x-amz-tagging", "n=1")], b"1")
            .header("x-amz-version-id")
            .unwrap_or("")
            .to_string();
        h.call(Method::PUT, "/bkt/v", &[("x-amz-tagging", "n=2")], b"2");
        let old = h.call(
            Method::GET,
            &format!("/bkt/v?tagging&versionId={v1}"),
            &[],
            b"",
        );
        assert_eq!(old.header("x-amz-version-id"), Some(v1.as_str()));
        let set = old.doc().find("TagSet").expect("TagSet");
        assert_eq!(texts(set, "Tag", "Value"), ["1"]);
    }

    #[test]
    fn uploads_in_progress_survive_serialization() {
        let mut h = Harness::new();
        h.put("/bkt", b"");
        let id = h.initiate("/bkt/k", &[("x-amz-meta-a", "1")]);
        let etag = h
            .part("/bkt/k", &id, 1, b"only part")
            .header("etag")
            .map(str::to_string);
        let saved = serde_json::to_string(&h.s3).expect("serializes");
        let mut restored = Harness::new();
        restored.s3 = serde_json::from_str(&saved).expect("deserializes");
        let r = restored.complete("/bkt/k", &id, &[(1, &etag.expect("an etag"))]);
        assert_eq!(r.status, 200, "{}", r.body);
        let got = restored.call(Method::GET, "/bkt/k", &[], b"");
        assert_eq!(
            (got.body.as_str(), got.header("x-amz-meta-a")),
            ("only part", Some("1"))
        );
    }
}
