//! Multipart uploads: CreateMultipartUpload (with its checksum algorithm and type),
//! UploadPart and UploadPartCopy (a range of another object), CompleteMultipartUpload
//! (the part list checked, S3's `-N` ETag, a composite or full-object checksum),
//! AbortMultipartUpload, ListParts and ListMultipartUploads. An upload in progress is part
//! of its bucket and persists with it.

use std::collections::BTreeMap;

use axum::http::Method;
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use chrono::{DateTime, Utc};

use super::body::{expect_children, integrity, payload, CHECKSUM_ALGORITHMS};
use super::digest;
use super::format::{hex, owner, quoted, random_id, unhex, xml};
use super::listing::{list_params, roll_up, Listed};
use super::objects::{
    add_version, check_object_extras, check_write_conditions, new_object, sse_headers,
};
use super::{
    invalid_argument, malformed, method_not_allowed, no_such_upload, stored_bytes, Bucket,
    Checksum, Outcome, Part, Upload, Versioning, NS, S3,
};
use crate::aws::xml::Element;
use crate::aws::{AwsError, AwsRequest, AwsResponse};
use crate::common::time::time_millis;
use crate::http::percent_encode;

/// Every part of a multipart upload but the last must be at least 5 MiB.
const MIN_PART_SIZE: u64 = 5 * 1024 * 1024;
const MAX_PART_NUMBER: u32 = 10_000;
/// The most parts ListParts and uploads ListMultipartUploads answer at once.
const MAX_LISTED_PARTS: usize = 1000;
const MAX_LISTED_UPLOADS: usize = 1000;

impl S3 {
    /// The requests on one upload (`?uploadId=`): UploadPart, UploadPartCopy,
    /// CompleteMultipartUpload, AbortMultipartUpload and ListParts.
    pub(super) fn multipart_request(
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

pub(super) fn create_multipart_upload(
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

/// CompleteMultipartUpload: the part list checked against the upload, the parts joined
/// into the object (with S3's `-N` ETag and the upload's checksum), and the upload
/// replaced by it.
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
    let listed = listed_parts(&doc, upload_id)?;
    let parts = matched_parts(upload, &listed, upload_id)?;
    check_part_sizes(&parts)?;
    check_write_conditions(req, key, bucket.objects.get(key).and_then(|v| v.last()))?;
    let (data, etag) = join_parts(&parts)?;
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
    let checksum = object_checksum(upload, &parts, &data);
    check_sent_checksum(req, checksum.as_ref())?;

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

/// The part list of a CompleteMultipartUpload body: each part's number, ETag and
/// element, at least one, in ascending order of part number.
fn listed_parts<'a>(
    doc: &'a Element,
    upload_id: &str,
) -> Result<Vec<(u32, &'a str, &'a Element)>, AwsError> {
    if doc.name != "CompleteMultipartUpload" {
        return Err(malformed());
    }
    expect_children(doc, &[("Part", MAX_PART_NUMBER as usize)])?;
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
        return Err(malformed());
    }
    if listed.windows(2).any(|w| w[0].0 >= w[1].0) {
        return Err(AwsError::new(
            400,
            "InvalidPartOrder",
            "The list of parts was not in ascending order. Parts must be ordered by part number.",
        )
        .with("UploadId", upload_id));
    }
    Ok(listed)
}

/// The uploaded part each listed part names: its ETag must match, and so must its
/// checksum when the upload has a checksum algorithm.
fn matched_parts<'a>(
    upload: &'a Upload,
    listed: &[(u32, &str, &Element)],
    upload_id: &str,
) -> Result<Vec<(u32, &'a Part)>, AwsError> {
    let mut parts: Vec<(u32, &Part)> = Vec::new();
    for (number, etag, element) in listed {
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
                    ))
                }
                Some(sent) if sent.trim() != stored.value => return Err(invalid_part()),
                Some(_) => {}
            }
        }
        parts.push((*number, part));
    }
    Ok(parts)
}

/// Every part but the last is at least [`MIN_PART_SIZE`].
fn check_part_sizes(parts: &[(u32, &Part)]) -> Result<(), AwsError> {
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
        .with("ETag", quoted(&part.etag)));
    }
    Ok(())
}

/// The object's content, the parts' in order, and its multipart ETag.
fn join_parts(parts: &[(u32, &Part)]) -> Result<(Vec<u8>, String), AwsError> {
    let mut data = Vec::with_capacity(parts.iter().map(|(_, p)| p.size as usize).sum());
    let mut md5s = Vec::with_capacity(parts.len() * 16);
    for (_, part) in parts {
        data.extend(stored_bytes(&part.data)?);
        md5s.extend(
            unhex(&part.etag).ok_or_else(|| {
                AwsError::new(500, "InternalError", "a stored part ETag is corrupt")
            })?,
        );
    }
    // S3's multipart ETag: the MD5 of the parts' binary MD5s, and how many there are.
    let etag = format!("{}-{}", hex(&digest::md5(&md5s)), parts.len());
    Ok((data, etag))
}

/// The object's checksum with the upload's algorithm, if it has one: of the part
/// checksums (`-N`, like the ETag) for a composite upload, else of the whole content.
fn object_checksum(upload: &Upload, parts: &[(u32, &Part)], data: &[u8]) -> Option<Checksum> {
    let count = parts.len();
    match &upload.checksum_algorithm {
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
        Some(algorithm) => digest::compute(algorithm, data).map(|d| Checksum {
            algorithm: algorithm.clone(),
            value: B64.encode(d),
            composite: false,
        }),
    }
}

/// A full-object checksum the client sent (`x-amz-checksum-<algorithm>`) must match
/// the one computed; a composite one is not compared.
fn check_sent_checksum(req: &AwsRequest, checksum: Option<&Checksum>) -> Result<(), AwsError> {
    if let Some(c) = checksum.filter(|c| !c.composite) {
        if let Some(sent) = req.header(&format!("x-amz-checksum-{}", c.algorithm)) {
            if sent.trim() != c.value {
                return Err(AwsError::new(
                    400,
                    "BadDigest",
                    format!(
                        "The {} you specified did not match the calculated checksum.",
                        c.algorithm.to_uppercase()
                    ),
                ));
            }
        }
    }
    Ok(())
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

pub(super) fn list_multipart_uploads(name: &str, bucket: &Bucket, req: &AwsRequest) -> Outcome {
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

#[cfg(test)]
mod tests {
    use super::super::testkit::{texts, Harness, Reply};
    use super::*;

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
