//! Objects: PutObject, GetObject and HeadObject (versions, conditional reads, ranges,
//! response header overrides), DeleteObject and DeleteObjects (delete markers on
//! versioned buckets), conditional writes, and what a write stores with an object: its
//! encryption, storage class, headers and user metadata.

use axum::http::Method;
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use chrono::{DateTime, Utc};

use super::body::{configuration, expect_children, integrity, parse_bool, payload};
use super::digest;
use super::format::{etag_matches, hex, http_date, new_version_id, quoted, xml};
use super::tagging::header_tags;
use super::{
    invalid_argument, malformed, no_such_key, not_emulated, precondition_failed, select_version,
    Bucket, Outcome, Sse, Version, Versioning, MAX_KEY_BYTES, NS, SSE_ALGORITHMS,
};
use crate::aws::xml::Element;
use crate::aws::{AwsError, AwsRequest, AwsResponse, ACCOUNT};

/// User metadata (names and values of `x-amz-meta-*`) is limited to 2 KB.
const MAX_METADATA_BYTES: usize = 2048;
const MAX_DELETE_OBJECTS: usize = 1000;

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

/// Headers stored with an object and answered on GET and HEAD as they were sent.
const STORED_HEADERS: &[&str] = &[
    "cache-control",
    "content-disposition",
    "content-encoding",
    "content-language",
    "expires",
    "x-amz-website-redirect-location",
];

pub(super) fn put_object(
    bucket: &mut Bucket,
    key: &str,
    req: &AwsRequest,
    now: DateTime<Utc>,
) -> Outcome {
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
pub(super) fn new_object(
    req: &AwsRequest,
    bucket: &Bucket,
    now: DateTime<Utc>,
) -> Result<Version, AwsError> {
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
pub(super) fn add_version(bucket: &mut Bucket, key: &str, mut version: Version) -> String {
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
pub(super) fn check_write_conditions(
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

pub(super) fn get_object(bucket: &Bucket, key: &str, req: &AwsRequest) -> Outcome {
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

pub(super) fn delete_object(
    bucket: &mut Bucket,
    key: &str,
    req: &AwsRequest,
    now: DateTime<Utc>,
) -> Outcome {
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

pub(super) fn delete_objects(bucket: &mut Bucket, req: &AwsRequest, now: DateTime<Utc>) -> Outcome {
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

/// Refuses object ACLs, which every emulated bucket refuses as S3 does under
/// bucket-owner-enforced ownership.
pub(super) fn check_object_extras(req: &AwsRequest) -> Result<(), AwsError> {
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
pub(super) fn object_sse(req: &AwsRequest, bucket: &Bucket) -> Result<Sse, AwsError> {
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

pub(super) fn sse_headers(sse: &Sse) -> Vec<(String, String)> {
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

pub(super) fn storage_class(req: &AwsRequest) -> Result<Option<String>, AwsError> {
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

pub(super) fn stored_headers(req: &AwsRequest) -> Vec<(String, String)> {
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

pub(super) fn user_metadata(req: &AwsRequest) -> Result<Vec<(String, String)>, AwsError> {
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

#[cfg(test)]
mod tests {
    use axum::http::Method;

    use super::super::testkit::Harness;
    use super::*;

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
}
