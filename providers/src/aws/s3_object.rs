//! The `s3_object` kind: one object in an S3 bucket, uploaded from a local file
//! (`source`) or from a string in the stack (`content`) — a config file, a small
//! dataset, a pipeline script.
//!
//! The upload is trusted, not downloaded again: `prepare` hashes the bytes into
//! `content_hash` (sha256, hex), the upload carries that hash as its SHA-256 checksum
//! (S3 refuses bytes that do not match it) and as the metadata key
//! `terrain-content-sha256`, which `read` reports back. A changed file is therefore
//! `~ content_hash`, an in-place update that uploads again.
//!
//! Writes are conditional, so terrain never silently replaces an object it did not
//! write: create uploads only if the key is free (`If-None-Match: *`) and adopts an
//! object already there only when it carries this address and this content (an
//! earlier attempt whose answer was lost); update checks the object still has the
//! content terrain last recorded and uploads only over that exact version (`If-Match`).
//!
//! One PutObject per upload, so objects are limited to 5 GiB; multipart upload is not
//! supported yet. Ids are `BUCKET/KEY`.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::path::Path;

use async_trait::async_trait;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::Client;
use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::io::AsyncReadExt;

use super::s3_bucket::{check_bucket_name, client_region, partition};
use super::{config, is_not_found, sdk_error, status_of};
use crate::schema::Fields;
use crate::{Ctx, Invalid, Kind, Live, ProviderError};

/// The kind `s3_object`.
#[derive(Debug, Clone, Copy, Default)]
pub struct S3Object;

const PUT_OBJECT: &str = "s3:PutObject";
const HEAD_OBJECT: &str = "s3:HeadObject";
const DELETE_OBJECT: &str = "s3:DeleteObject";

/// The metadata key holding the sha256 (hex) of the uploaded bytes.
pub const HASH_KEY: &str = "terrain-content-sha256";
/// The metadata key holding the address that uploaded the object.
pub const ADDRESS_KEY: &str = "terrain-address";
/// The largest object one PutObject may upload.
pub const MAX_SIZE: u64 = 5 * 1024 * 1024 * 1024;
/// S3 allows 2 KB of user metadata (keys and values, UTF-8); terrain keeps this much of
/// it for its own two keys.
const METADATA_BUDGET: usize = 2048 - 256;
const OCTET_STREAM: &str = "application/octet-stream";

/// What a stack writes for an `s3_object`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    /// The bucket the object is in.
    #[terrain(force_new)]
    pub bucket: String,
    /// The object key (path in the bucket), without a leading '/'.
    #[terrain(force_new)]
    pub key: String,
    /// A local file to upload; relative paths start at the working directory. Set this or
    /// content.
    pub source: Option<String>,
    /// The object's content as text. Set this or source.
    pub content: Option<String>,
    /// The Content-Type S3 serves; guessed from the key's extension when left out
    /// (application/octet-stream when unknown).
    pub content_type: Option<String>,
    /// User metadata, served as x-amz-meta-* headers; lowercase keys.
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
    /// Computed by terrain, do not set: the sha256 (hex) of the content; a change uploads
    /// again.
    pub content_hash: Option<String>,
}

/// What `s3_object` reports after apply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Outputs {
    /// The object's ETag, without quotes.
    pub etag: String,
    /// The version id; null in a bucket without versioning.
    pub version_id: Option<String>,
    /// s3://BUCKET/KEY.
    pub uri: String,
    /// https://BUCKET.s3.REGION.amazonaws.com/KEY.
    pub url: String,
    /// The object's size in bytes.
    pub size: i64,
}

/// The content type for `key`, from its extension.
pub fn guess_content_type(key: &str) -> &'static str {
    let name = key.rsplit('/').next().unwrap_or(key);
    let Some((_, ext)) = name.rsplit_once('.') else {
        return OCTET_STREAM;
    };
    match ext.to_ascii_lowercase().as_str() {
        "json" => "application/json",
        "jsonl" | "ndjson" => "application/x-ndjson",
        "yaml" | "yml" => "application/yaml",
        "csv" => "text/csv",
        "tsv" => "text/tab-separated-values",
        "txt" | "log" => "text/plain",
        "md" => "text/markdown",
        "html" | "htm" => "text/html",
        "xml" => "application/xml",
        "py" => "text/x-python",
        "sh" => "text/x-shellscript",
        "parquet" => "application/vnd.apache.parquet",
        "gz" | "tgz" => "application/gzip",
        "zip" => "application/zip",
        "tar" => "application/x-tar",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        _ => OCTET_STREAM,
    }
}

/// Checks an object key: present, at most 1024 bytes, not starting with `/`.
pub fn check_key(key: &str) -> Result<(), String> {
    if key.is_empty() {
        return Err("must not be empty".into());
    }
    if key.len() > 1024 {
        return Err(format!(
            "is {} bytes long; S3 keys are at most 1024 bytes (UTF-8)",
            key.len()
        ));
    }
    if key.starts_with('/') {
        return Err(format!(
            "{key:?} starts with '/', which S3 keeps as part of the key (an empty first path segment); remove the leading '/'"
        ));
    }
    Ok(())
}

fn check_metadata(metadata: &BTreeMap<String, String>, out: &mut Vec<Invalid>) {
    let mut size = 0;
    for (k, v) in metadata {
        size += k.len() + v.len();
        if k.is_empty()
            || !k
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "-_.".contains(c))
        {
            out.push(Invalid::at(
                "metadata",
                format!("key {k:?}: use lowercase letters, digits, '-', '_' and '.' (S3 stores metadata keys lowercased)"),
            ));
        } else if k == HASH_KEY || k == ADDRESS_KEY {
            out.push(Invalid::at(
                "metadata",
                format!("key {k:?} is terrain's own; pick another key"),
            ));
        }
        if !v.chars().all(|c| c == ' ' || c.is_ascii_graphic()) {
            out.push(Invalid::at(
                "metadata",
                format!(
                    "the value of {k:?} must be printable ASCII (metadata travels in HTTP headers)"
                ),
            ));
        }
    }
    if size > METADATA_BUDGET {
        out.push(Invalid::at(
            "metadata",
            format!("{size} bytes of keys and values; at most {METADATA_BUDGET} (S3 allows 2 KB, terrain uses the rest)"),
        ));
    }
}

/// The error for content over the single-upload limit.
fn too_large(what: &str, size: u64) -> ProviderError {
    ProviderError::Unsupported(format!(
        "{what} is {size} bytes; s3_object uploads at most 5 GiB ({MAX_SIZE} bytes) in one PutObject, and multipart upload is not supported yet"
    ))
}

fn not_a_file(path: &str) -> ProviderError {
    ProviderError::Unsupported(format!("source: {path} is not a regular file"))
}

/// The sha256 (hex) and size of the file at `path`, read from disk as a stream.
pub fn hash_file(path: &str) -> Result<(String, u64), ProviderError> {
    let io = |e| ProviderError::io("read object source", path, e);
    let mut file = std::fs::File::open(Path::new(path)).map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if !meta.is_file() {
        return Err(not_a_file(path));
    }
    if meta.len() > MAX_SIZE {
        return Err(too_large(&format!("source {path}"), meta.len()));
    }
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    let mut size = 0u64;
    loop {
        let n = file.read(&mut buf).map_err(io)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        size += n as u64;
    }
    Ok((hex::encode(hasher.finalize()), size))
}

/// As [`hash_file`], on the async runtime (for an apply whose spec was not prepared).
async fn hash_file_async(path: &str) -> Result<(String, u64), ProviderError> {
    let io = |e| ProviderError::io("read object source", path, e);
    let mut file = tokio::fs::File::open(path).await.map_err(io)?;
    let meta = file.metadata().await.map_err(io)?;
    if !meta.is_file() {
        return Err(not_a_file(path));
    }
    if meta.len() > MAX_SIZE {
        return Err(too_large(&format!("source {path}"), meta.len()));
    }
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    let mut size = 0u64;
    loop {
        let n = file.read(&mut buf).await.map_err(io)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        size += n as u64;
    }
    Ok((hex::encode(hasher.finalize()), size))
}

/// The sha256 (hex) of inline content.
pub fn hash_bytes(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The `x-amz-checksum-sha256` value for a hex content hash (base64 of the digest).
pub fn checksum_of(content_hash: &str) -> Result<String, ProviderError> {
    let digest = hex::decode(content_hash)
        .ok()
        .filter(|d| d.len() == 32)
        .ok_or_else(|| {
            ProviderError::Unsupported(format!(
                "content_hash {content_hash:?} is not a sha256 in hex; it is computed by terrain, leave it out"
            ))
        })?;
    Ok(base64::engine::general_purpose::STANDARD.encode(digest))
}

/// `BUCKET/KEY`.
pub fn id_of(bucket: &str, key: &str) -> String {
    format!("{bucket}/{key}")
}

/// The bucket and key of an id.
pub fn parse_id(id: &str) -> Result<(&str, &str), ProviderError> {
    id.split_once('/')
        .filter(|(b, k)| !b.is_empty() && !k.is_empty())
        .ok_or_else(|| {
            ProviderError::Unsupported(format!("{id:?} is not an s3_object id; use BUCKET/KEY"))
        })
}

/// A key as a URL path: every byte but unreserved characters and `/` percent-encoded.
fn url_path(key: &str) -> String {
    key.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The outputs of an object.
pub fn outputs_of(
    bucket: &str,
    key: &str,
    region: &str,
    etag: &str,
    version_id: Option<&str>,
    size: i64,
) -> Outputs {
    let (_, dns) = partition(region);
    Outputs {
        etag: etag.trim_matches('"').to_string(),
        // Objects written while versioning is suspended have the version id "null".
        version_id: version_id.filter(|v| *v != "null").map(str::to_string),
        uri: format!("s3://{bucket}/{key}"),
        url: format!("https://{bucket}.s3.{region}.{dns}/{}", url_path(key)),
        size,
    }
}

/// The metadata sent with an upload: the user's plus terrain's two keys.
pub fn upload_metadata(spec: &Spec, content_hash: &str, address: &str) -> HashMap<String, String> {
    let mut out: HashMap<String, String> = spec
        .metadata
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    out.insert(HASH_KEY.to_string(), content_hash.to_string());
    out.insert(ADDRESS_KEY.to_string(), address.to_string());
    out
}

/// What HeadObject showed.
#[derive(Debug, Clone, PartialEq)]
pub struct Head {
    pub etag: String,
    pub version_id: Option<String>,
    pub size: i64,
    pub content_type: Option<String>,
    /// All of it, terrain's keys included.
    pub metadata: BTreeMap<String, String>,
}

impl Head {
    /// The content hash terrain recorded at upload, if terrain uploaded this version.
    pub fn content_hash(&self) -> Option<&str> {
        self.metadata.get(HASH_KEY).map(String::as_str)
    }

    /// The address that uploaded this version, if terrain did.
    pub fn address(&self) -> Option<&str> {
        self.metadata.get(ADDRESS_KEY).map(String::as_str)
    }

    /// The metadata without terrain's keys.
    pub fn user_metadata(&self) -> BTreeMap<String, String> {
        self.metadata
            .iter()
            .filter(|(k, _)| k.as_str() != HASH_KEY && k.as_str() != ADDRESS_KEY)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}

/// The spec a live object shows; where the bytes came from is known only to `prior`.
pub fn spec_of(bucket: &str, key: &str, head: &Head, prior: Option<&Spec>) -> Spec {
    Spec {
        bucket: bucket.to_string(),
        key: key.to_string(),
        source: prior.and_then(|p| p.source.clone()),
        content: prior.and_then(|p| p.content.clone()),
        content_type: head.content_type.clone(),
        metadata: head.user_metadata(),
        content_hash: head.content_hash().map(str::to_string),
    }
}

async fn head_object(
    client: &Client,
    bucket: &str,
    key: &str,
) -> Result<Option<Head>, ProviderError> {
    match client.head_object().bucket(bucket).key(key).send().await {
        Ok(out) => Ok(Some(Head {
            etag: out.e_tag().unwrap_or_default().to_string(),
            version_id: out.version_id().map(str::to_string),
            size: out.content_length().unwrap_or_default(),
            content_type: out.content_type().map(str::to_string),
            metadata: out
                .metadata()
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
                        .collect()
                })
                .unwrap_or_default(),
        })),
        Err(e) => {
            let e = sdk_error(HEAD_OBJECT, e);
            if is_not_found(&e) {
                Ok(None)
            } else {
                Err(e)
            }
        }
    }
}

/// The spec completed as `prepare` would (for an apply whose spec was not prepared:
/// the engine prepares only specs fully known at plan time), and the content's size.
async fn complete(spec: &Spec) -> Result<(Spec, u64), ProviderError> {
    let mut done = spec.clone();
    if done.content_type.is_none() {
        done.content_type = Some(guess_content_type(&spec.key).to_string());
    }
    let size = match (&spec.source, &spec.content) {
        (Some(path), None) if spec.content_hash.is_some() => {
            let meta = tokio::fs::metadata(path)
                .await
                .map_err(|e| ProviderError::io("read object source", path, e))?;
            if !meta.is_file() {
                return Err(not_a_file(path));
            }
            if meta.len() > MAX_SIZE {
                return Err(too_large(&format!("source {path}"), meta.len()));
            }
            meta.len()
        }
        (Some(path), None) => {
            let (hash, size) = hash_file_async(path).await?;
            done.content_hash = Some(hash);
            size
        }
        (None, Some(content)) => {
            done.content_hash = Some(hash_bytes(content.as_bytes()));
            content.len() as u64
        }
        _ => {
            return Err(ProviderError::Unsupported(
                "set exactly one of source (a local file) or content (inline text)".into(),
            ))
        }
    };
    Ok((done, size))
}

/// The bytes of a completed spec: a file is streamed from disk (a retry reads it again)
/// and cut at `size`, the size it was hashed at; should it have changed since, its
/// bytes no longer match the checksum and S3 refuses them.
async fn stream(spec: &Spec, size: u64) -> Result<ByteStream, ProviderError> {
    match (&spec.source, &spec.content) {
        (Some(path), _) => ByteStream::read_from()
            .path(path)
            .length(aws_sdk_s3::primitives::Length::Exact(size))
            .build()
            .await
            .map_err(|e| ProviderError::io("read object source", path, std::io::Error::other(e))),
        (None, Some(content)) => Ok(ByteStream::from(content.clone().into_bytes())),
        (None, None) => Ok(ByteStream::from_static(b"")),
    }
}

/// How an upload is conditioned.
enum Condition<'a> {
    /// Only if the key is free.
    Absent,
    /// Only over this exact version (its ETag).
    Matches(&'a str),
}

/// Uploads `spec`'s bytes under `condition`; returns the completed spec and outputs.
async fn upload(
    ctx: &Ctx,
    client: &Client,
    spec: &Spec,
    condition: Condition<'_>,
) -> Result<Live<S3Object>, ProviderError> {
    let (done, size) = complete(spec).await?;
    let body = stream(&done, size).await?;
    let hash = done.content_hash.clone().unwrap_or_default();
    let mut put = client
        .put_object()
        .bucket(&spec.bucket)
        .key(&spec.key)
        .body(body)
        .content_length(i64::try_from(size).unwrap_or(i64::MAX))
        .set_content_type(done.content_type.clone())
        .set_metadata(Some(upload_metadata(spec, &hash, &ctx.address)))
        .checksum_sha256(checksum_of(&hash)?);
    put = match condition {
        Condition::Absent => put.if_none_match("*"),
        Condition::Matches(etag) => put.if_match(etag),
    };
    ctx.progress(&format!("uploading {size} bytes"));
    let out = put.send().await.map_err(|e| sdk_error(PUT_OBJECT, e))?;
    Ok(Live {
        id: id_of(&spec.bucket, &spec.key),
        outputs: outputs_of(
            &spec.bucket,
            &spec.key,
            &client_region(client),
            out.e_tag().unwrap_or_default(),
            out.version_id(),
            i64::try_from(size).unwrap_or(i64::MAX),
        ),
        spec: done,
    })
}

fn code_of(e: &ProviderError) -> &str {
    match e {
        ProviderError::Api { code, .. } => code,
        _ => "",
    }
}

/// A rejected upload, in terms of what the user should do.
fn explain(e: ProviderError, uri: &str) -> ProviderError {
    match code_of(&e) {
        // The checksum covers the bytes prepared at plan time.
        "BadDigest" | "InvalidDigest" | "XAmzContentChecksumMismatch" => ProviderError::api(
            PUT_OBJECT,
            400,
            code_of(&e).to_string(),
            format!("the bytes uploaded to {uri} do not match content_hash: the source changed after it was hashed; plan and apply again"),
        ),
        _ => e,
    }
}

fn changed_outside(uri: &str, detail: &str) -> ProviderError {
    ProviderError::api(
        PUT_OBJECT,
        412,
        "PreconditionFailed",
        format!("object {uri} changed outside terrain since the last apply{detail}; plan again to see the change before overwriting it"),
    )
}

#[async_trait]
impl Kind for S3Object {
    type Spec = Spec;
    type Outputs = Outputs;
    const KIND: &'static str = "s3_object";
    const PROVIDER: &'static str = "aws";

    fn validate(spec: &Spec, _config: &Value) -> Vec<Invalid> {
        let mut out = Vec::new();
        if let Err(m) = check_bucket_name(&spec.bucket) {
            out.push(Invalid::at("bucket", m));
        }
        if let Err(m) = check_key(&spec.key) {
            out.push(Invalid::at("key", m));
        }
        match (&spec.source, &spec.content) {
            (Some(_), Some(_)) => out.push(Invalid::at(
                "",
                "set either source (a local file) or content (inline text), not both",
            )),
            (None, None) => out.push(Invalid::at(
                "",
                "set source (a local file) or content (inline text)",
            )),
            (Some(s), None) if s.is_empty() => out.push(Invalid::at("source", "must not be empty")),
            (None, Some(c)) if c.len() as u64 > MAX_SIZE => out.push(Invalid::at(
                "content",
                too_large("content", c.len() as u64).to_string(),
            )),
            _ => {}
        }
        if spec.content_type.as_deref() == Some("") {
            out.push(Invalid::at(
                "content_type",
                "must not be empty; leave it out to guess it from the key",
            ));
        }
        check_metadata(&spec.metadata, &mut out);
        out
    }

    fn planned_id(spec: &Spec, _config: &Value) -> Option<String> {
        Some(id_of(&spec.bucket, &spec.key))
    }

    /// Hashes the content (a user's `content_hash` is overwritten) and fills the
    /// content type; a source over 5 GiB is refused here, before anything is uploaded.
    fn prepare(mut spec: Spec) -> Result<Spec, ProviderError> {
        let unknown = |v: &Option<String>| {
            v.as_deref()
                .is_some_and(|s| s.contains(crate::protocol::UNKNOWN))
        };
        if unknown(&spec.source) || unknown(&spec.content) {
            // Hashed once the content is known.
            spec.content_hash = Some(crate::protocol::UNKNOWN.to_string());
            if spec.content_type.is_none() && !spec.key.contains(crate::protocol::UNKNOWN) {
                spec.content_type = Some(guess_content_type(&spec.key).to_string());
            }
            return Ok(spec);
        }
        spec.content_hash = match (&spec.source, &spec.content) {
            (Some(path), None) => Some(
                hash_file(path)
                    .map_err(|e| {
                        ProviderError::invalid(
                            "source",
                            format!("{e} (relative paths start at the stack's directory)"),
                        )
                    })?
                    .0,
            ),
            (None, Some(content)) => Some(hash_bytes(content.as_bytes())),
            // Validation reports the combination.
            _ => return Ok(spec),
        };
        if spec.content_type.is_none() {
            spec.content_type = Some(guess_content_type(&spec.key).to_string());
        }
        Ok(spec)
    }

    async fn read(
        &self,
        ctx: &Ctx,
        id: &str,
        prior: Option<&Spec>,
    ) -> Result<Option<Live<Self>>, ProviderError> {
        let (bucket, key) = parse_id(id)?;
        let client = config::s3(ctx).await?;
        let Some(head) = head_object(&client, bucket, key).await? else {
            return Ok(None);
        };
        Ok(Some(Live {
            id: id.to_string(),
            spec: spec_of(bucket, key, &head, prior),
            outputs: outputs_of(
                bucket,
                key,
                &client_region(&client),
                &head.etag,
                head.version_id.as_deref(),
                head.size,
            ),
        }))
    }

    async fn create(&self, ctx: &Ctx, spec: &Spec) -> Result<Live<Self>, ProviderError> {
        let client = config::s3(ctx).await?;
        let uri = format!("s3://{}/{}", spec.bucket, spec.key);
        let err = match upload(ctx, &client, spec, Condition::Absent).await {
            Ok(live) => return Ok(live),
            Err(e) => e,
        };
        // 412: the key is taken. 409 ConditionalRequestConflict: another conditional
        // write to it is in flight. Either way, look at what is there.
        if !matches!(status_of(&err), Some(412) | Some(409)) {
            return Err(explain(err, &uri));
        }
        let (done, _) = complete(spec).await?;
        let existing = head_object(&client, &spec.bucket, &spec.key).await?;
        match existing {
            Some(head)
                if head.address() == Some(ctx.address.as_str())
                    && head.content_hash().is_some()
                    && head.content_hash() == done.content_hash.as_deref() =>
            {
                ctx.progress("adopting the object an earlier attempt uploaded");
                Ok(Live {
                    id: id_of(&spec.bucket, &spec.key),
                    outputs: outputs_of(
                        &spec.bucket,
                        &spec.key,
                        &client_region(&client),
                        &head.etag,
                        head.version_id.as_deref(),
                        head.size,
                    ),
                    spec: done,
                })
            }
            Some(head) => {
                let name = ctx
                    .address
                    .split_once('.')
                    .map_or(ctx.address.as_str(), |(_, n)| n);
                let owner = match head.address() {
                    Some(a) if a == ctx.address => {
                        "by this resource with other content".to_string()
                    }
                    Some(a) => format!("by {a}"),
                    None => "outside terrain".to_string(),
                };
                Err(ProviderError::api(
                    PUT_OBJECT,
                    412,
                    "PreconditionFailed",
                    format!("object {uri} already exists (uploaded {owner}); terrain does not overwrite objects it did not upload: bring it under terrain with `terrain import {}.{name} {}`, or pick another key", Self::KIND, id_of(&spec.bucket, &spec.key)),
                ))
            }
            // Gone again in between: the conflict was a write that did not last.
            None => upload(ctx, &client, spec, Condition::Absent)
                .await
                .map_err(|e| explain(e, &uri)),
        }
    }

    async fn update(
        &self,
        ctx: &Ctx,
        id: &str,
        prior: &Spec,
        spec: &Spec,
    ) -> Result<Live<Self>, ProviderError> {
        let (bucket, key) = parse_id(id)?;
        let uri = format!("s3://{bucket}/{key}");
        let client = config::s3(ctx).await?;
        // The state holds the content hash of the version terrain last saw, not its
        // ETag: check the live object still is that version, then upload over exactly
        // the version checked, so a write in between is refused rather than lost.
        let Some(head) = head_object(&client, bucket, key).await? else {
            return Err(ProviderError::api(
                HEAD_OBJECT,
                404,
                "NoSuchKey",
                format!("object {uri} was deleted outside terrain since the last apply; plan again to upload it anew"),
            ));
        };
        if head.content_hash() != prior.content_hash.as_deref() {
            return Err(changed_outside(&uri, ""));
        }
        match upload(ctx, &client, spec, Condition::Matches(&head.etag)).await {
            Ok(live) => Ok(live),
            Err(e) if status_of(&e) == Some(412) => {
                Err(changed_outside(&uri, " (its ETag no longer matches)"))
            }
            Err(e) => Err(explain(e, &uri)),
        }
    }

    async fn delete(
        &self,
        ctx: &Ctx,
        id: &str,
        _prior: Option<&Spec>,
    ) -> Result<(), ProviderError> {
        let (bucket, key) = parse_id(id)?;
        let client = config::s3(ctx).await?;
        // In a versioned bucket this adds a delete marker and keeps the old versions,
        // as `aws s3 rm` does; the bucket's force_destroy removes those.
        match client.delete_object().bucket(bucket).key(key).send().await {
            Ok(_) => Ok(()),
            Err(e) => {
                let e = sdk_error(DELETE_OBJECT, e);
                if is_not_found(&e) {
                    Ok(())
                } else {
                    Err(e)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::schema_mismatches;

    fn base() -> Spec {
        Spec {
            bucket: "ml-datasets".into(),
            key: "configs/train.yaml".into(),
            source: Some("train.yaml".into()),
            content: Some("epochs: 3\n".into()),
            content_type: Some("application/yaml".into()),
            metadata: BTreeMap::from([("team".to_string(), "ml".to_string())]),
            content_hash: Some(hash_bytes(b"epochs: 3\n")),
        }
    }

    fn inline(content: &str) -> Spec {
        Spec {
            source: None,
            content: Some(content.into()),
            content_type: None,
            metadata: BTreeMap::new(),
            content_hash: None,
            ..base()
        }
    }

    fn problems(spec: &Spec) -> Vec<(String, String)> {
        S3Object::validate(spec, &Value::Null)
            .into_iter()
            .map(|p| (p.path.join("."), p.message))
            .collect()
    }

    #[test]
    fn schema_matches_spec_and_outputs() {
        let outputs = outputs_of("b", "k", "us-east-1", "\"e\"", Some("v1"), 3);
        assert_eq!(
            schema_mismatches::<S3Object>(&base(), &outputs),
            Vec::<String>::new()
        );
    }

    #[test]
    fn content_types_are_guessed_from_the_extension() {
        for (key, expected) in [
            ("a/b/config.json", "application/json"),
            ("params.YAML", "application/yaml"),
            ("params.yml", "application/yaml"),
            ("data/train.csv", "text/csv"),
            ("notes.txt", "text/plain"),
            ("rows.jsonl", "application/x-ndjson"),
            ("model.bin", OCTET_STREAM),
            ("Makefile", OCTET_STREAM),
            ("dir.d/file", OCTET_STREAM),
            ("archive.tar.gz", "application/gzip"),
        ] {
            assert_eq!(guess_content_type(key), expected, "{key}");
        }
    }

    #[test]
    fn keys_are_checked_offline() {
        assert_eq!(check_key("a/b.txt"), Ok(()));
        assert_eq!(check_key(&"é".repeat(512)), Ok(()), "1024 bytes");
        assert!(check_key("").is_err());
        assert!(check_key(&"é".repeat(513))
            .expect_err("1026 bytes")
            .contains("1024 bytes"));
        assert!(check_key("/a")
            .expect_err("leading slash")
            .contains("leading '/'"));
    }

    #[test]
    fn validation_wants_exactly_one_source_and_clean_metadata() {
        assert!(problems(&inline("x")).is_empty());
        let both = base();
        assert_eq!(problems(&both)[0].0, "");
        assert!(problems(&both)[0].1.contains("not both"));
        let neither = Spec {
            content: None,
            ..inline("x")
        };
        assert!(problems(&neither)[0].1.contains("set source"));
        let bad = Spec {
            bucket: "Bad_Bucket".into(),
            key: "/k".into(),
            content_type: Some(String::new()),
            metadata: BTreeMap::from([
                ("Team".to_string(), "ml".to_string()),
                (HASH_KEY.to_string(), "x".to_string()),
                ("note".to_string(), "café".to_string()),
            ]),
            ..inline("x")
        };
        let paths: Vec<String> = problems(&bad).into_iter().map(|(p, _)| p).collect();
        assert_eq!(
            paths,
            [
                "bucket",
                "key",
                "content_type",
                "metadata",
                "metadata",
                "metadata"
            ]
        );
        let big = Spec {
            metadata: BTreeMap::from([("k".to_string(), "v".repeat(1800))]),
            ..inline("x")
        };
        assert!(problems(&big)[0].1.contains("at most 1792"));
    }

    #[test]
    fn prepare_hashes_content_and_fills_the_content_type() -> Result<(), ProviderError> {
        let prepared = S3Object::prepare(Spec {
            content_hash: Some("written by hand".into()),
            ..inline("hello")
        })?;
        assert_eq!(
            prepared.content_hash.as_deref(),
            Some("2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824")
        );
        assert_eq!(prepared.content_type.as_deref(), Some("application/yaml"));
        let typed = S3Object::prepare(Spec {
            content_type: Some("text/x-custom".into()),
            ..inline("hello")
        })?;
        assert_eq!(typed.content_type.as_deref(), Some("text/x-custom"));
        Ok(())
    }

    #[test]
    fn prepare_hashes_files_and_sees_changes() -> Result<(), ProviderError> {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("train.csv");
        std::fs::write(&path, "a,b\n1,2\n").expect("write");
        let spec = Spec {
            source: Some(path.display().to_string()),
            content: None,
            content_type: None,
            key: "data/train.csv".into(),
            ..base()
        };
        let first = S3Object::prepare(spec.clone())?;
        assert_eq!(first.content_hash, Some(hash_bytes(b"a,b\n1,2\n")));
        assert_eq!(first.content_type.as_deref(), Some("text/csv"));
        std::fs::write(&path, "a,b\n1,3\n").expect("write");
        let second = S3Object::prepare(spec.clone())?;
        assert_ne!(first.content_hash, second.content_hash);

        let missing = S3Object::prepare(Spec {
            source: Some(dir.path().join("nope").display().to_string()),
            ..spec.clone()
        })
        .expect_err("missing file");
        assert!(
            missing
                .to_string()
                .starts_with("source: read object source "),
            "{missing}"
        );
        let directory = S3Object::prepare(Spec {
            source: Some(dir.path().display().to_string()),
            ..spec.clone()
        })
        .expect_err("a directory");
        assert!(
            directory.to_string().contains("not a regular file"),
            "{directory}"
        );

        // Sparse: no disk space is used, but the size is over the limit.
        let huge = dir.path().join("huge.bin");
        std::fs::File::create(&huge)
            .and_then(|f| f.set_len(MAX_SIZE + 1))
            .expect("sparse file");
        let refused = S3Object::prepare(Spec {
            source: Some(huge.display().to_string()),
            ..spec
        })
        .expect_err("over 5 GiB");
        assert!(
            refused
                .to_string()
                .contains("multipart upload is not supported yet"),
            "{refused}"
        );
        Ok(())
    }

    #[test]
    fn checksum_is_the_base64_digest() -> Result<(), ProviderError> {
        // The SHA-256 of "hello", as S3 shows it in x-amz-checksum-sha256.
        assert_eq!(
            checksum_of(&hash_bytes(b"hello"))?,
            "LPJNul+wow4m6DsqxbninhsWHlwfp0JecwQzYpOLmCQ="
        );
        assert!(checksum_of("abc").is_err());
        Ok(())
    }

    #[test]
    fn live_object_reads_back_as_its_spec() {
        let s = Spec {
            source: None,
            ..base()
        };
        let hash = s.content_hash.clone().expect("hash");
        let meta = upload_metadata(&s, &hash, "s3_object.train");
        let head = Head {
            etag: "\"abc\"".into(),
            version_id: None,
            size: 10,
            content_type: s.content_type.clone(),
            metadata: meta.into_iter().collect(),
        };
        assert_eq!(head.address(), Some("s3_object.train"));
        assert_eq!(
            spec_of("ml-datasets", "configs/train.yaml", &head, Some(&s)),
            s
        );
        // On import nothing says where the bytes came from.
        let imported = spec_of("ml-datasets", "configs/train.yaml", &head, None);
        assert_eq!((imported.source, imported.content), (None, None));
        assert_eq!(imported.content_hash, Some(hash));
    }

    #[test]
    fn ids_and_outputs() -> Result<(), ProviderError> {
        assert_eq!(parse_id("b/a/b.txt")?, ("b", "a/b.txt"));
        assert!(parse_id("b").is_err());
        assert!(parse_id("b/").is_err());
        assert_eq!(
            S3Object::planned_id(&base(), &Value::Null).as_deref(),
            Some("ml-datasets/configs/train.yaml")
        );
        let o = outputs_of("b", "dir/a b+c.txt", "eu-west-1", "\"e1\"", Some("null"), 7);
        assert_eq!(
            o,
            Outputs {
                etag: "e1".into(),
                version_id: None,
                uri: "s3://b/dir/a b+c.txt".into(),
                url: "https://b.s3.eu-west-1.amazonaws.com/dir/a%20b%2Bc.txt".into(),
                size: 7,
            }
        );
        Ok(())
    }
}
