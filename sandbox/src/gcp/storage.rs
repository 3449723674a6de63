//! The Cloud Storage emulator (storage v1 JSON API): buckets, created, patched and deleted
//! synchronously with GCS's rules (global names, merge-patch with null deletes,
//! metagenerations, "not empty" conflicts), and objects as the official clients move
//! them: the three upload protocols (`uploadType=media`, `multipart` and `resumable`, the
//! last with its sessions, 308 answers, status queries and cancels, kept in the state),
//! downloads from `/download/storage/v1/…` and `?alt=media` with byte ranges and the
//! `x-goog-*` headers clients validate with, list (with `delimiter`), get, delete,
//! preconditions and noncurrent versions. Objects carry `md5Hash` and `crc32c` computed
//! from their content. Media requests need headers both ways, so the HTTP side hands
//! this module the request headers and takes an [`Answer`] back.

use base64::Engine as _;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::error::{ApiError, Code};
use super::operation::OpCtx;
use super::schema::Rules;
use super::{parse_body, random_hex, set_or_remove, str_of, Api};
use crate::common::hash::fnv1a;
use crate::common::time::time_millis;
use crate::http::{percent_encode, ApiRequest, ApiResponse, Body};

/// How long after enabling uniform bucket-level access it can still be disabled.
const UBLA_LOCK_DAYS: i64 = 90;

/// The most one object may hold. The sandbox keeps objects in memory and in the state
/// file, so a resumable upload is held to what one media request may carry (the HTTP
/// side's body limit), however many chunks it arrives in.
const MAX_OBJECT_BYTES: u64 = 64 * 1024 * 1024;

/// GCS persists an unfinished resumable upload in whole units of 256 KiB: a chunk that is
/// not the last must be at least this long, and only whole units of it are kept.
const CHUNK_GRANULARITY: u64 = 256 * 1024;

/// A resumable upload session lasts a week from its start, as at Google; then its URI
/// answers 404 and the client has to start over.
const SESSION_DAYS: i64 = 7;

/// Object fields a client may set when it creates an object (the metadata part of a
/// multipart upload, the body that starts a resumable one); anything else in that JSON
/// is output-only and ignored, as GCS ignores it.
const WRITABLE_OBJECT_FIELDS: &[&str] = &[
    "contentType",
    "contentEncoding",
    "contentDisposition",
    "contentLanguage",
    "cacheControl",
    "customTime",
    "storageClass",
    "metadata",
];

const MULTI_REGIONS: &[&str] = &["US", "EU", "ASIA"];
const DUAL_REGIONS: &[&str] = &["NAM4", "EUR4", "EUR5", "EUR7", "EUR8", "ASIA1"];

/// The storage emulator's persisted state.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct State {
    #[serde(default)]
    buckets: Vec<BucketRecord>,
    /// Object generations only ever grow, even within one microsecond.
    #[serde(default)]
    last_generation: i64,
    /// Resumable uploads in progress, and finished ones whose URI still answers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    uploads: Vec<UploadSession>,
}

/// One resumable upload. Sessions live in the persisted state because at Google they
/// live on the server: a sandbox restarted mid-upload answers the client's status query
/// with the bytes it had, and the client resumes from there. They expire a week after
/// they start ([`SESSION_DAYS`]) rather than never, so abandoned uploads do not hold
/// memory forever.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct UploadSession {
    id: String,
    bucket: String,
    name: String,
    /// The writable object fields the initiating request set.
    resource: Map<String, Value>,
    /// The initiating request's query: its preconditions and `kmsKeyName` apply when
    /// the last byte arrives, as GCS applies them.
    query: Vec<(String, String)>,
    /// `X-Upload-Content-Length`, when the client declared the size up front.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    declared_size: Option<u64>,
    started_ms: i64,
    /// The bytes persisted so far (base64 in the state file).
    #[serde(with = "base64_bytes")]
    received: Vec<u8>,
    /// The object the upload created, once complete: a status query or a repeated last
    /// chunk answers with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    object: Option<Value>,
}

/// Serde for bytes kept as base64 text, so the state file stays JSON.
mod base64_bytes {
    use base64::Engine as _;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(data: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(data))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(serde::de::Error::custom)
    }
}

/// What a Cloud Storage request answers: the API response plus the headers media
/// requests carry (`Location`, `Range`, `Content-Range`, `x-goog-hash`, …), which the
/// transport-neutral [`ApiResponse`] has no room for.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Answer {
    pub response: ApiResponse,
    pub headers: Vec<(&'static str, String)>,
}

impl From<ApiResponse> for Answer {
    fn from(response: ApiResponse) -> Self {
        Answer {
            response,
            headers: Vec::new(),
        }
    }
}

impl Answer {
    fn with(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }

    fn empty(status: u16) -> Self {
        Answer::from(ApiResponse {
            status,
            body: Body::Empty,
            retry_after: None,
        })
    }
}

/// A request header by name, case-insensitively (`headers` as the HTTP side passes them).
fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// Whether a request path's first segment is one of Cloud Storage's media endpoints,
/// which sit at the root of the host (`/upload/storage/v1/…`, `/resumable/upload/…`,
/// `/download/storage/v1/…`) rather than under the JSON API's `/storage/`.
pub(crate) fn is_media_root(segment: &str) -> bool {
    matches!(segment, "upload" | "resumable" | "download")
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct BucketRecord {
    project: String,
    bucket: Value,
    /// The bucket's IAM policy once set; until then a new bucket's (`bucket_policy`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    policy: Option<super::policy::Policy>,
    #[serde(default)]
    objects: Vec<ObjectRecord>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ObjectRecord {
    name: String,
    generation: i64,
    /// False for a noncurrent version kept by versioning.
    live: bool,
    object: Value,
    /// The content, base64-encoded so the state file stays JSON.
    data: String,
}

impl State {
    /// Serves one request without its headers (in-process callers and the shared Google
    /// pipeline); what needs headers — sessions, ranges — answers as if none were sent.
    pub(crate) fn handle(
        &mut self,
        req: &ApiRequest,
        ctx: &OpCtx,
        account_exists: &dyn Fn(&str) -> bool,
    ) -> Result<ApiResponse, ApiError> {
        self.route(req, &[], ctx, account_exists)
            .map(|answer| answer.response)
    }

    /// Serves one request with its headers (lowercase or not), errors rendered in the
    /// JSON API's format.
    pub(crate) fn serve(
        &mut self,
        req: &ApiRequest,
        headers: &[(String, String)],
        ctx: &OpCtx,
        account_exists: &dyn Fn(&str) -> bool,
    ) -> Answer {
        self.route(req, headers, ctx, account_exists)
            .unwrap_or_else(|e| Answer::from(e.response(Api::Storage)))
    }

    fn route(
        &mut self,
        req: &ApiRequest,
        headers: &[(String, String)],
        ctx: &OpCtx,
        account_exists: &dyn Fn(&str) -> bool,
    ) -> Result<Answer, ApiError> {
        let segments = req.segments();
        let mut s: Vec<&str> = segments.iter().map(String::as_str).collect();
        // The resumable protocol's own path names the same endpoint as the simple one.
        if s.starts_with(&["resumable", "upload"]) {
            s.remove(0);
        }
        let method = req.method.as_str();
        let now = ctx.now;
        self.expire_sessions(now);
        let answer = match (method, s.as_slice()) {
            ("GET", ["storage", "v1", "b"]) => self.list_buckets(req)?,
            ("POST", ["storage", "v1", "b"]) => self.insert_bucket(req, now)?,
            ("GET", ["storage", "v1", "b", b]) => ApiResponse::ok(self.bucket(b)?.bucket.clone()),
            ("PATCH", ["storage", "v1", "b", b]) => self.patch_bucket(b, req, now)?,
            ("DELETE", ["storage", "v1", "b", b]) => self.delete_bucket(b, req)?,
            ("GET", ["storage", "v1", "b", b, "iam"]) => {
                let i = self.bucket_index(b)?;
                ApiResponse::ok(bucket_policy_json(&self.buckets[i]))
            }
            ("PUT", ["storage", "v1", "b", b, "iam"]) => {
                let body = parse_body(req, Api::Storage, "Policy", "", Rules::JSON_API)?;
                let i = self.bucket_index(b)?;
                let record = &mut self.buckets[i];
                let mut policy = bucket_policy(record);
                let mut given = body.clone();
                // Cloud Storage's etags are its own (`CAE=`); the shared check compares
                // the opaque form, so translate a current one.
                if given["etag"].as_str() == Some(bucket_etag(policy.serial as i64).as_str()) {
                    given["etag"] = json!(policy.etag());
                }
                policy
                    .set(
                        &given,
                        &super::policy::Rules {
                            role_prefixes: Some(&["roles/storage."]),
                            custom_parent: &format!("projects/{}/roles/", record.project),
                            account_exists,
                        },
                    )
                    .map_err(|e| {
                        if e.code == Code::Aborted {
                            ApiError::precondition(
                                "At least one of the pre-conditions you specified did not hold.",
                            )
                            .with_status(412)
                        } else {
                            e
                        }
                    })?;
                record.policy = Some(policy);
                ApiResponse::ok(bucket_policy_json(record))
            }
            ("GET", ["storage", "v1", "b", b, "o"]) => self.list_objects(b, req)?,
            ("GET", ["storage", "v1", "b", b, "o", name @ ..])
            | ("GET", ["download", "storage", "v1", "b", b, "o", name @ ..])
                if !name.is_empty() =>
            {
                return self.get_object(b, &name.join("/"), req, headers)
            }
            ("DELETE", ["storage", "v1", "b", b, "o", name @ ..]) if !name.is_empty() => {
                self.delete_object(b, &name.join("/"), req, now)?
            }
            ("POST", ["upload", "storage", "v1", "b", b, "o"]) => {
                return self.insert_object(b, req, headers, now)
            }
            ("PUT", ["upload", "storage", "v1", "b", b, "o"]) => {
                return self.resume_upload(b, req, headers, now)
            }
            ("DELETE", ["upload", "storage", "v1", "b", b, "o"]) => {
                return self.cancel_upload(b, req)
            }
            _ => return Err(ApiError::no_route(method, &req.path)),
        };
        Ok(Answer::from(answer))
    }

    // ------------------------------------------------------------ buckets

    fn list_buckets(&self, req: &ApiRequest) -> Result<ApiResponse, ApiError> {
        let project = required(req, "project")?;
        let prefix = req.param("prefix").unwrap_or("");
        let mut items: Vec<&Value> = self
            .buckets
            .iter()
            .filter(|b| b.project == project)
            .map(|b| &b.bucket)
            .filter(|b| str_of(b, "name").starts_with(prefix))
            .collect();
        items.sort_by_key(|b| str_of(b, "name").to_string());
        let mut out = json!({"kind": "storage#buckets"});
        set_or_remove(&mut out, "items", json!(items));
        Ok(ApiResponse::ok(out))
    }

    fn insert_bucket(
        &mut self,
        req: &ApiRequest,
        now: DateTime<Utc>,
    ) -> Result<ApiResponse, ApiError> {
        let project = required(req, "project")?.to_string();
        let body = parse_body(req, Api::Storage, "Bucket", "", Rules::JSON_API)?;
        let name = str_of(&body, "name");
        if name.is_empty() {
            return Err(ApiError::invalid("Required").with_reason("required"));
        }
        check_bucket_name(name)?;
        if let Some(existing) = self
            .buckets
            .iter()
            .find(|b| str_of(&b.bucket, "name") == name)
        {
            let message = if existing.project == project {
                "Your previous request to create the named bucket succeeded and you already own it."
            } else {
                "The requested bucket name is not available. The bucket namespace is shared by all users of the system. Please select a different name and try again."
            };
            return Err(ApiError::new(Code::AlreadyExists, message));
        }
        let location = str_of(&body, "location");
        let location = if location.is_empty() {
            "US".to_string()
        } else {
            location.to_uppercase()
        };
        let location_type = location_type(&location)?;
        let stamp = time_millis(now);
        let mut bucket = Map::new();
        bucket.insert("kind".into(), json!("storage#bucket"));
        bucket.insert("id".into(), json!(name));
        bucket.insert(
            "selfLink".into(),
            json!(format!("https://www.googleapis.com/storage/v1/b/{name}")),
        );
        bucket.insert("projectNumber".into(), json!(project_number(&project)));
        bucket.insert("name".into(), json!(name));
        bucket.insert("timeCreated".into(), json!(stamp));
        bucket.insert("updated".into(), json!(stamp));
        bucket.insert("metageneration".into(), json!("1"));
        bucket.insert("location".into(), json!(location));
        bucket.insert("locationType".into(), json!(location_type));
        bucket.insert(
            "storageClass".into(),
            body.get("storageClass")
                .cloned()
                .unwrap_or(json!("STANDARD")),
        );
        bucket.insert("etag".into(), json!(bucket_etag(1)));
        if let Some(v) = body.get("versioning") {
            bucket.insert("versioning".into(), v.clone());
        }
        bucket.insert(
            "iamConfiguration".into(),
            iam_configuration(body.get("iamConfiguration"), None, now),
        );
        if let Some(labels) = body
            .get("labels")
            .filter(|l| l.as_object().is_some_and(|m| !m.is_empty()))
        {
            bucket.insert("labels".into(), labels.clone());
        }
        let bucket = Value::Object(bucket);
        self.buckets.push(BucketRecord {
            project,
            bucket: bucket.clone(),
            policy: None,
            objects: Vec::new(),
        });
        Ok(ApiResponse::ok(bucket))
    }

    fn patch_bucket(
        &mut self,
        name: &str,
        req: &ApiRequest,
        now: DateTime<Utc>,
    ) -> Result<ApiResponse, ApiError> {
        let body = parse_body(req, Api::Storage, "Bucket", "", Rules::JSON_API_PATCH)?;
        let i = self.bucket_index(name)?;
        check_metageneration(&self.buckets[i].bucket, req)?;
        let current = self.buckets[i].bucket.clone();
        if body.get("name").is_some_and(|n| n.as_str() != Some(name)) {
            return Err(ApiError::invalid("The name of a bucket cannot be changed."));
        }
        if body.get("location").is_some_and(|l| {
            !l.as_str()
                .unwrap_or("")
                .eq_ignore_ascii_case(str_of(&current, "location"))
        }) {
            return Err(ApiError::invalid(
                "The location of a bucket cannot be changed.",
            ));
        }
        let mut merged = current.clone();
        for (key, value) in body.as_object().into_iter().flatten() {
            match key.as_str() {
                "name" | "location" => {}
                "iamConfiguration" => {
                    let iam = iam_configuration(Some(value), current.get("iamConfiguration"), now);
                    merged["iamConfiguration"] = iam;
                }
                "storageClass" if value.is_null() => merged["storageClass"] = json!("STANDARD"),
                _ => merge_patch(&mut merged, key, value),
            }
        }
        let metageneration = super::int_of(&current, "metageneration") + 1;
        merged["metageneration"] = json!(metageneration.to_string());
        merged["updated"] = json!(time_millis(now));
        merged["etag"] = json!(bucket_etag(metageneration));
        self.buckets[i].bucket = merged.clone();
        Ok(ApiResponse::ok(merged))
    }

    fn delete_bucket(&mut self, name: &str, req: &ApiRequest) -> Result<ApiResponse, ApiError> {
        let i = self.bucket_index(name)?;
        check_metageneration(&self.buckets[i].bucket, req)?;
        // Noncurrent versions count: GCS refuses to delete a bucket holding any.
        if !self.buckets[i].objects.is_empty() {
            return Err(ApiError::new(
                Code::AlreadyExists,
                "The bucket you tried to delete is not empty.",
            ));
        }
        self.buckets.remove(i);
        Ok(ApiResponse::no_content())
    }

    // ------------------------------------------------------------ objects

    /// `POST /upload/storage/v1/b/{bucket}/o`: a whole object in one request (`media`,
    /// `multipart`) or the start of a resumable session.
    fn insert_object(
        &mut self,
        bucket: &str,
        req: &ApiRequest,
        headers: &[(String, String)],
        now: DateTime<Utc>,
    ) -> Result<Answer, ApiError> {
        let i = self.bucket_index(bucket)?;
        match req.param("uploadType").unwrap_or("") {
            "media" => {
                let spec = ObjectSpec::from_request(req, &Map::new(), req.content_type.as_deref())?;
                let object = self.put_object(i, &spec, &req.body, &req.query, now)?;
                Ok(Answer::from(ApiResponse::ok(object)))
            }
            "multipart" => {
                let content_type = req.content_type.as_deref().unwrap_or("");
                let parts = parse_multipart(content_type, &req.body)?;
                let metadata = json_object(&parts.metadata)?;
                let spec = ObjectSpec::from_request(req, &metadata, parts.media_type.as_deref())?;
                let object = self.put_object(i, &spec, &parts.media, &req.query, now)?;
                Ok(Answer::from(ApiResponse::ok(object)))
            }
            "resumable" => self.start_upload(i, req, headers, now),
            other => Err(ApiError::invalid(format!(
                "Invalid value for uploadType: \"{other}\". Expected media, multipart or resumable."
            ))
            .with_reason("invalidParameter")),
        }
    }

    /// Stores `data` as the new live generation of `spec.name` in bucket `i`, after the
    /// preconditions in `query` and any checksums the client sent; answers the object.
    fn put_object(
        &mut self,
        i: usize,
        spec: &ObjectSpec,
        data: &[u8],
        query: &[(String, String)],
        now: DateTime<Utc>,
    ) -> Result<Value, ApiError> {
        check_generation(&self.buckets[i], &spec.name, query)?;
        let md5 = base64::engine::general_purpose::STANDARD.encode(md5_digest(data));
        let crc = base64::engine::general_purpose::STANDARD.encode(crc32c(data).to_be_bytes());
        // A client that sent checksums with the metadata gets its upload refused when the
        // content does not match, as GCS refuses it.
        if let Some(sent) = spec.md5.as_deref().filter(|m| *m != md5) {
            return Err(ApiError::invalid(format!(
                "Provided MD5 hash \"{sent}\" doesn't match calculated MD5 hash \"{md5}\"."
            )));
        }
        if let Some(sent) = spec.crc32c.as_deref().filter(|c| *c != crc) {
            return Err(ApiError::invalid(format!(
                "Provided CRC32C \"{sent}\" doesn't match calculated CRC32C \"{crc}\"."
            )));
        }
        let generation = (now.timestamp_micros()).max(self.last_generation + 1);
        self.last_generation = generation;
        let record = &mut self.buckets[i];
        let bucket = str_of(&record.bucket, "name").to_string();
        let name = spec.name.clone();
        let versioned = record.bucket["versioning"]["enabled"] == Value::Bool(true);
        let stamp = time_millis(now);
        if versioned {
            for old in record
                .objects
                .iter_mut()
                .filter(|o| o.name == name && o.live)
            {
                old.live = false;
                old.object["timeDeleted"] = json!(stamp);
            }
        } else {
            record.objects.retain(|o| !(o.name == name && o.live));
        }
        let encoded = percent_encode(&name);
        let mut object = json!({
            "kind": "storage#object",
            "id": format!("{bucket}/{name}/{generation}"),
            "selfLink": format!("https://www.googleapis.com/storage/v1/b/{bucket}/o/{encoded}"),
            "mediaLink": format!("https://storage.googleapis.com/download/storage/v1/b/{bucket}/o/{encoded}?generation={generation}&alt=media"),
            "name": name,
            "bucket": bucket,
            "generation": generation.to_string(),
            "metageneration": "1",
            "contentType": spec.content_type,
            "storageClass": str_of(&record.bucket, "storageClass"),
            "size": data.len().to_string(),
            "md5Hash": md5,
            "crc32c": crc,
            "etag": base64::engine::general_purpose::STANDARD.encode(fnv1a(data).to_be_bytes()),
            "timeCreated": stamp,
            "updated": stamp,
            "timeStorageClassUpdated": stamp,
        });
        for (key, value) in &spec.fields {
            object[key.as_str()] = value.clone();
        }
        // A customer-managed key (the `kmsKeyName` parameter): GCS reports the key
        // version that encrypted the object.
        if let Some(key) = query
            .iter()
            .find(|(k, v)| k == "kmsKeyName" && !v.is_empty())
            .map(|(_, v)| v)
        {
            object["kmsKeyName"] = json!(format!("{key}/cryptoKeyVersions/1"));
        }
        record.objects.push(ObjectRecord {
            name,
            generation,
            live: true,
            object: object.clone(),
            data: base64::engine::general_purpose::STANDARD.encode(data),
        });
        Ok(object)
    }

    // ------------------------------------------------------------ resumable uploads

    /// Starts a resumable session: 200 with the session URI in `Location`, on the host
    /// the client called. Preconditions are checked now, so a doomed upload fails before
    /// its bytes travel, and again when it completes.
    fn start_upload(
        &mut self,
        i: usize,
        req: &ApiRequest,
        headers: &[(String, String)],
        now: DateTime<Utc>,
    ) -> Result<Answer, ApiError> {
        let metadata = json_object(&req.body)?;
        let spec =
            ObjectSpec::from_request(req, &metadata, header(headers, "x-upload-content-type"))?;
        check_generation(&self.buckets[i], &spec.name, &req.query)?;
        let declared_size = match header(headers, "x-upload-content-length") {
            Some(v) => Some(v.trim().parse::<u64>().map_err(|_| {
                ApiError::invalid(format!("Invalid X-Upload-Content-Length: \"{v}\""))
            })?),
            None => None,
        };
        if let Some(size) = declared_size {
            check_size(size)?;
        }
        let bucket = str_of(&self.buckets[i].bucket, "name").to_string();
        let id = random_hex(32);
        let mut resource = spec.fields.clone();
        resource.insert("contentType".into(), json!(spec.content_type));
        for (key, value) in [("md5Hash", &spec.md5), ("crc32c", &spec.crc32c)] {
            if let Some(v) = value {
                resource.insert(key.into(), json!(v));
            }
        }
        let location = format!(
            "{}/upload/storage/v1/b/{}/o?uploadType=resumable&name={}&upload_id={id}",
            origin(headers),
            percent_encode(&bucket),
            percent_encode(&spec.name),
        );
        self.uploads.push(UploadSession {
            id: id.clone(),
            bucket,
            name: spec.name,
            resource,
            query: req.query.clone(),
            declared_size,
            started_ms: now.timestamp_millis(),
            received: Vec::new(),
            object: None,
        });
        Ok(Answer::empty(200)
            .with("location", location)
            .with("x-guploader-uploadid", id))
    }

    /// `PUT` to a session URI: a chunk (`Content-Range: bytes a-b/total` or `a-b/*`),
    /// or a status query (`bytes */total`, `bytes */*`, empty body). Unfinished, it
    /// answers 308 with the bytes persisted in `Range` (none: no `Range`); finished,
    /// 200 with the object.
    fn resume_upload(
        &mut self,
        bucket: &str,
        req: &ApiRequest,
        headers: &[(String, String)],
        now: DateTime<Utc>,
    ) -> Result<Answer, ApiError> {
        let s = self.session_index(bucket, req)?;
        if let Some(object) = &self.uploads[s].object {
            return Ok(Answer::from(ApiResponse::ok(object.clone())));
        }
        // Without Content-Range the body is the whole object in one request.
        let range = match header(headers, "content-range") {
            Some(v) => ContentRange::parse(v)?,
            None => ContentRange::Chunk {
                first: 0,
                last: (req.body.len() as u64).checked_sub(1),
                total: Some(req.body.len() as u64),
            },
        };
        let session = &mut self.uploads[s];
        let held = session.received.len() as u64;
        match range {
            ContentRange::Query { total } => {
                if let Some(total) = total {
                    if total < held {
                        return Err(ApiError::invalid(format!(
                            "the upload already holds {held} bytes, more than the total of {total}"
                        )));
                    }
                    if total == held {
                        return self.complete_upload(s, now);
                    }
                }
                Ok(incomplete(held))
            }
            ContentRange::Chunk { first, last, total } => {
                let sent = req.body.len() as u64;
                let expected = last.map_or(0, |l| l + 1 - first);
                if sent != expected {
                    return Err(ApiError::invalid(format!(
                        "the Content-Range names {expected} bytes but the request carries {sent}"
                    )));
                }
                let total = match (total, session.declared_size) {
                    (Some(t), Some(d)) if t != d => {
                        return Err(ApiError::invalid(format!(
                            "the Content-Range total {t} differs from the X-Upload-Content-Length {d} the upload started with"
                        )))
                    }
                    (t, d) => t.or(d),
                };
                let end = first + sent;
                if let Some(total) = total.filter(|t| end > *t) {
                    return Err(ApiError::invalid(format!(
                        "the Content-Range ends past the total of {total} bytes"
                    )));
                }
                check_size(end.max(total.unwrap_or(0)))?;
                // A chunk that would leave a gap keeps nothing; the 308's Range tells
                // the client where to resume, as after any partly persisted chunk.
                if first > held {
                    return Ok(incomplete(held));
                }
                let last_chunk = total == Some(end);
                let keep_to = if last_chunk {
                    end
                } else {
                    if sent < CHUNK_GRANULARITY {
                        return Err(ApiError::invalid(format!(
                            "Invalid request.  The number of bytes uploaded is required to be equal or greater than {CHUNK_GRANULARITY}, except for the final request (it's recommended to be the exact multiple of {CHUNK_GRANULARITY}).  The received request contained {sent} bytes, which does not meet this requirement."
                        )));
                    }
                    end / CHUNK_GRANULARITY * CHUNK_GRANULARITY
                };
                // Bytes already persisted are skipped: a client resending an overlap
                // after a lost response must not duplicate them.
                if keep_to > held {
                    let from = usize::try_from(held - first).unwrap_or(usize::MAX);
                    let to = usize::try_from(keep_to - first).unwrap_or(usize::MAX);
                    if let Some(new) = req.body.get(from..to) {
                        session.received.extend_from_slice(new);
                    }
                }
                let held = session.received.len() as u64;
                if total == Some(held) {
                    return self.complete_upload(s, now);
                }
                Ok(incomplete(held))
            }
        }
    }

    /// The last byte arrived: the object is created under the session's preconditions,
    /// and the session keeps only the object, to answer a repeated request with.
    fn complete_upload(&mut self, s: usize, now: DateTime<Utc>) -> Result<Answer, ApiError> {
        let session = &self.uploads[s];
        let i = self.bucket_index(&session.bucket)?;
        let mut fields = session.resource.clone();
        let content_type = fields
            .remove("contentType")
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_else(|| "application/octet-stream".to_string());
        let take = |fields: &mut Map<String, Value>, key: &str| {
            fields
                .remove(key)
                .and_then(|v| v.as_str().map(str::to_string))
        };
        let md5 = take(&mut fields, "md5Hash");
        let crc32c = take(&mut fields, "crc32c");
        let spec = ObjectSpec {
            name: session.name.clone(),
            content_type,
            fields,
            md5,
            crc32c,
        };
        let query = session.query.clone();
        let data = std::mem::take(&mut self.uploads[s].received);
        match self.put_object(i, &spec, &data, &query, now) {
            Ok(object) => {
                self.uploads[s].object = Some(object.clone());
                Ok(Answer::from(ApiResponse::ok(object)))
            }
            Err(e) => {
                // The bytes stay, so the session can still be queried or cancelled.
                self.uploads[s].received = data;
                Err(e)
            }
        }
    }

    /// `DELETE` to a session URI cancels the upload: GCS answers 499, and the URI is
    /// gone afterwards.
    fn cancel_upload(&mut self, bucket: &str, req: &ApiRequest) -> Result<Answer, ApiError> {
        let s = self.session_index(bucket, req)?;
        self.uploads.remove(s);
        Ok(Answer::empty(499))
    }

    fn session_index(&self, bucket: &str, req: &ApiRequest) -> Result<usize, ApiError> {
        let id = required(req, "upload_id")?;
        self.uploads
            .iter()
            .position(|u| u.id == id && u.bucket == bucket)
            .ok_or_else(|| {
                ApiError::not_found(format!(
                    "no upload session {id} for bucket {bucket}: it was cancelled, it expired, or it never existed"
                ))
            })
    }

    /// Forgets sessions older than a week by the sandbox clock.
    fn expire_sessions(&mut self, now: DateTime<Utc>) {
        let cutoff = (now - chrono::Duration::days(SESSION_DAYS)).timestamp_millis();
        self.uploads.retain(|u| u.started_ms > cutoff);
    }

    fn list_objects(&self, bucket: &str, req: &ApiRequest) -> Result<ApiResponse, ApiError> {
        let record = self.bucket(bucket)?;
        let versions = req.param("versions") == Some("true");
        let prefix = req.param("prefix").unwrap_or("");
        let delimiter = req.param("delimiter").filter(|d| !d.is_empty());
        let mut items: Vec<&ObjectRecord> = Vec::new();
        // With a delimiter, names continuing past it after the prefix fold into one
        // "directory" each, listed under `prefixes` (how `gcloud storage ls` browses).
        let mut prefixes: Vec<String> = Vec::new();
        for o in record
            .objects
            .iter()
            .filter(|o| (versions || o.live) && o.name.starts_with(prefix))
        {
            let rest = &o.name[prefix.len()..];
            match delimiter.and_then(|d| rest.find(d).map(|at| at + d.len())) {
                Some(end) => prefixes.push(format!("{prefix}{}", &rest[..end])),
                None => items.push(o),
            }
        }
        items.sort_by(|a, b| (&a.name, a.generation).cmp(&(&b.name, b.generation)));
        prefixes.sort();
        prefixes.dedup();
        let mut out = json!({"kind": "storage#objects"});
        set_or_remove(&mut out, "prefixes", json!(prefixes));
        set_or_remove(
            &mut out,
            "items",
            Value::Array(items.into_iter().map(|o| o.object.clone()).collect()),
        );
        Ok(ApiResponse::ok(out))
    }

    /// The object's metadata, or with `alt=media` its content: whole (200) or the one
    /// byte range a `Range` header asks for (206 with `Content-Range`), with the
    /// `x-goog-*` headers clients check a download against.
    fn get_object(
        &self,
        bucket: &str,
        name: &str,
        req: &ApiRequest,
        headers: &[(String, String)],
    ) -> Result<Answer, ApiError> {
        let record = self.bucket(bucket)?;
        let i = object_index(record, bucket, name, req)?;
        check_generation(record, name, &req.query)?;
        let object = &record.objects[i];
        if req.param("alt") != Some("media") {
            return Ok(Answer::from(ApiResponse::ok(object.object.clone())));
        }
        let data = base64::engine::general_purpose::STANDARD
            .decode(&object.data)
            .map_err(|e| ApiError::internal(format!("stored object data is corrupt: {e}")))?;
        let meta = &object.object;
        // Objects stored before the sandbox recorded MD5s get theirs computed here.
        let md5 = match str_of(meta, "md5Hash") {
            "" => base64::engine::general_purpose::STANDARD.encode(md5_digest(&data)),
            m => m.to_string(),
        };
        let size = data.len() as u64;
        let encoding = match str_of(meta, "contentEncoding") {
            "" => "identity",
            e => e,
        };
        let described = |answer: Answer| {
            answer
                .with("x-goog-hash", format!("crc32c={}", str_of(meta, "crc32c")))
                .with("x-goog-hash", format!("md5={md5}"))
                .with("x-goog-generation", object.generation.to_string())
                .with("x-goog-metageneration", metageneration(meta).to_string())
                .with("x-goog-stored-content-length", size.to_string())
                .with("x-goog-stored-content-encoding", encoding)
                .with("x-goog-storage-class", str_of(meta, "storageClass"))
                .with("accept-ranges", "bytes")
        };
        let content_type = str_of(meta, "contentType").to_string();
        let (status, body, range) = match byte_range(header(headers, "range"), size) {
            RangeAsked::Whole => (200, data, None),
            RangeAsked::Part(first, last) => {
                let part = usize::try_from(first)
                    .ok()
                    .zip(usize::try_from(last).ok())
                    .and_then(|(f, l)| data.get(f..=l))
                    .map(<[u8]>::to_vec)
                    .unwrap_or_default();
                (206, part, Some(format!("bytes {first}-{last}/{size}")))
            }
            RangeAsked::Unsatisfiable => {
                let error = ApiError::new(Code::InvalidArgument, "Request range not satisfiable")
                    .with_status(416)
                    .with_reason("requestedRangeNotSatisfiable");
                return Ok(Answer::from(error.response(Api::Storage))
                    .with("content-range", format!("bytes */{size}")));
            }
        };
        let mut answer = described(Answer::from(ApiResponse {
            status,
            body: Body::Bytes {
                content_type,
                data: body,
            },
            retry_after: None,
        }));
        if let Some(range) = range {
            answer = answer.with("content-range", range);
        }
        Ok(answer)
    }

    fn delete_object(
        &mut self,
        bucket: &str,
        name: &str,
        req: &ApiRequest,
        now: DateTime<Utc>,
    ) -> Result<ApiResponse, ApiError> {
        let b = self.bucket_index(bucket)?;
        let record = &mut self.buckets[b];
        let i = object_index(record, bucket, name, req)?;
        check_generation(record, name, &req.query)?;
        let versioned = record.bucket["versioning"]["enabled"] == Value::Bool(true);
        // Deleting the live version of a versioned bucket's object keeps it as noncurrent;
        // deleting by generation, or without versioning, removes it for good.
        if versioned && req.param("generation").is_none() {
            let object = &mut record.objects[i];
            object.live = false;
            object.object["timeDeleted"] = json!(time_millis(now));
        } else {
            record.objects.remove(i);
        }
        Ok(ApiResponse::no_content())
    }

    /// One line per bucket and live object, for `Sandbox::inventory` (noncurrent
    /// versions are part of their bucket, not objects of their own).
    pub(crate) fn inventory(&self, out: &mut Vec<String>) {
        for b in &self.buckets {
            let name = str_of(&b.bucket, "name");
            out.push(format!("gcs bucket {name}"));
            for o in b.objects.iter().filter(|o| o.live) {
                out.push(format!("gcs object {name}/{}", o.name));
            }
        }
    }

    // ------------------------------------------------------------ lookups

    fn bucket_index(&self, name: &str) -> Result<usize, ApiError> {
        self.buckets
            .iter()
            .position(|b| str_of(&b.bucket, "name") == name)
            .ok_or_else(|| ApiError::not_found("The specified bucket does not exist."))
    }

    fn bucket(&self, name: &str) -> Result<&BucketRecord, ApiError> {
        Ok(&self.buckets[self.bucket_index(name)?])
    }
}

fn object_index(
    record: &BucketRecord,
    bucket: &str,
    name: &str,
    req: &ApiRequest,
) -> Result<usize, ApiError> {
    let generation = match req.param("generation") {
        Some(g) => Some(
            g.parse::<i64>()
                .map_err(|_| ApiError::invalid(format!("Invalid value for generation: \"{g}\"")))?,
        ),
        None => None,
    };
    record
        .objects
        .iter()
        .position(|o| {
            o.name == name
                && match generation {
                    Some(g) => o.generation == g,
                    None => o.live,
                }
        })
        .ok_or_else(|| ApiError::not_found(format!("No such object: {bucket}/{name}")))
}

fn required<'a>(req: &'a ApiRequest, param: &str) -> Result<&'a str, ApiError> {
    req.param(param).filter(|v| !v.is_empty()).ok_or_else(|| {
        ApiError::invalid(format!("Required parameter: {param}")).with_reason("required")
    })
}

/// The object preconditions against the live version of `name`, as GCS answers them
/// (412 `conditionNotMet`): `ifGenerationMatch` / `ifGenerationNotMatch` (a missing
/// object has generation 0, so `ifGenerationMatch=0` writes only a new object) and
/// `ifMetagenerationMatch` / `ifMetagenerationNotMatch` (a missing object matches none).
/// `query` is a request's, or the one a resumable upload started with.
fn check_generation(
    record: &BucketRecord,
    name: &str,
    query: &[(String, String)],
) -> Result<(), ApiError> {
    let live = record.objects.iter().find(|o| o.name == name && o.live);
    let generation = live.map_or(0, |o| o.generation);
    let meta = live.map(|o| metageneration(&o.object));
    let checks: [(&str, &dyn Fn(i64) -> bool); 4] = [
        ("ifGenerationMatch", &|want| generation == want),
        ("ifGenerationNotMatch", &|want| generation != want),
        ("ifMetagenerationMatch", &|want| meta == Some(want)),
        ("ifMetagenerationNotMatch", &|want| meta != Some(want)),
    ];
    for (param, holds) in checks {
        let Some((_, v)) = query.iter().find(|(k, _)| k == param) else {
            continue;
        };
        let want: i64 = v
            .parse()
            .map_err(|_| ApiError::invalid(format!("Invalid value for {param}: \"{v}\"")))?;
        if !holds(want) {
            return Err(ApiError::new(
                Code::FailedPrecondition,
                "At least one of the pre-conditions you specified did not hold.",
            )
            .with_status(412)
            .with_reason("conditionNotMet"));
        }
    }
    Ok(())
}

/// An object resource's metageneration (1 for objects no one has patched).
fn metageneration(object: &Value) -> i64 {
    match super::int_of(object, "metageneration") {
        0 => 1,
        m => m,
    }
}

/// Refuses objects over [`MAX_OBJECT_BYTES`].
fn check_size(size: u64) -> Result<(), ApiError> {
    if size > MAX_OBJECT_BYTES {
        return Err(ApiError::invalid(format!(
            "an object of {size} bytes is over the sandbox's limit of {MAX_OBJECT_BYTES} bytes: it keeps objects in memory"
        ))
        .with_status(413)
        .with_reason("uploadTooLarge"));
    }
    Ok(())
}

/// The scheme and host a session URI names: the host the client called (the sandbox
/// serves plain HTTP), or Google's when the request came with no `Host`.
fn origin(headers: &[(String, String)]) -> String {
    match header(headers, "host").filter(|h| !h.is_empty()) {
        Some(host) => format!("http://{host}"),
        None => "https://storage.googleapis.com".to_string(),
    }
}

/// 308 Resume Incomplete: `Range` names the bytes persisted, and is left out when
/// there are none, as GCS leaves it out.
fn incomplete(held: u64) -> Answer {
    let answer = Answer::empty(308);
    match held.checked_sub(1) {
        Some(last) => answer.with("range", format!("bytes=0-{last}")),
        None => answer,
    }
}

/// A resumable upload's `Content-Range`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ContentRange {
    /// `bytes */total` or `bytes */*`: how far did the upload get (and, with the total,
    /// finish it if everything is there).
    Query { total: Option<u64> },
    /// `bytes first-last/total` or `bytes first-last/*`; `last` is `None` only for an
    /// empty body sent without a `Content-Range`.
    Chunk {
        first: u64,
        last: Option<u64>,
        total: Option<u64>,
    },
}

impl ContentRange {
    fn parse(value: &str) -> Result<ContentRange, ApiError> {
        let invalid = || ApiError::invalid(format!("Invalid Content-Range: \"{value}\""));
        let spec = value
            .trim()
            .strip_prefix("bytes")
            .map(str::trim_start)
            .ok_or_else(invalid)?;
        let (range, total) = spec.split_once('/').ok_or_else(invalid)?;
        let number = |s: &str| s.trim().parse::<u64>().map_err(|_| invalid());
        let total = match total.trim() {
            "*" => None,
            t => Some(number(t)?),
        };
        if range.trim() == "*" {
            return Ok(ContentRange::Query { total });
        }
        let (first, last) = range.split_once('-').ok_or_else(invalid)?;
        let (first, last) = (number(first)?, number(last)?);
        if last < first {
            return Err(invalid());
        }
        Ok(ContentRange::Chunk {
            first,
            last: Some(last),
            total,
        })
    }
}

/// What a download's `Range` header asks for, against an object of `size` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RangeAsked {
    /// No header, or one GCS serves whole (several ranges, or not a byte range).
    Whole,
    /// The inclusive byte range to send with 206.
    Part(u64, u64),
    /// Starts at or past the end: 416.
    Unsatisfiable,
}

fn byte_range(value: Option<&str>, size: u64) -> RangeAsked {
    let Some(spec) = value.and_then(|v| v.trim().strip_prefix("bytes=")) else {
        return RangeAsked::Whole;
    };
    if spec.contains(',') {
        return RangeAsked::Whole;
    }
    let Some((first, last)) = spec.trim().split_once('-') else {
        return RangeAsked::Whole;
    };
    let (first, last) = (first.trim(), last.trim());
    match (first.parse::<u64>().ok(), last.parse::<u64>().ok()) {
        // `bytes=-n`: the last n bytes.
        (None, Some(n)) if first.is_empty() => {
            if n == 0 || size == 0 {
                RangeAsked::Unsatisfiable
            } else {
                RangeAsked::Part(size.saturating_sub(n), size - 1)
            }
        }
        (Some(f), l) if l.is_some() || last.is_empty() => {
            if l.is_some_and(|l| l < f) {
                RangeAsked::Whole
            } else if f >= size {
                RangeAsked::Unsatisfiable
            } else {
                RangeAsked::Part(f, l.map_or(size - 1, |l| l.min(size - 1)))
            }
        }
        _ => RangeAsked::Whole,
    }
}

/// What a request says of the object it creates: its name, content type, the other
/// writable fields, and checksums the content must match.
#[derive(Debug, Clone)]
struct ObjectSpec {
    name: String,
    content_type: String,
    /// Writable fields other than `contentType`, validated.
    fields: Map<String, Value>,
    md5: Option<String>,
    crc32c: Option<String>,
}

impl ObjectSpec {
    /// From the `name` parameter and the metadata JSON (a multipart upload's first part,
    /// the body starting a resumable one); the content type falls back to `media_type`
    /// (the media part's, `X-Upload-Content-Type`, a media upload's `Content-Type`).
    fn from_request(
        req: &ApiRequest,
        metadata: &Map<String, Value>,
        media_type: Option<&str>,
    ) -> Result<ObjectSpec, ApiError> {
        let in_body = metadata.get("name").and_then(Value::as_str);
        let in_query = req.param("name").filter(|n| !n.is_empty());
        let name = match (in_body, in_query) {
            (Some(b), Some(q)) if b != q => {
                return Err(ApiError::invalid(format!(
                    "Value '{b}' in content does not agree with value '{q}'. This can happen when a value set through a parameter is inconsistent with a value set in the request."
                )))
            }
            (_, Some(n)) | (Some(n), None) if !n.is_empty() => n.to_string(),
            _ => {
                return Err(
                    ApiError::invalid("Required parameter: name").with_reason("required")
                )
            }
        };
        let mut fields = Map::new();
        for key in WRITABLE_OBJECT_FIELDS {
            match metadata.get(*key) {
                None | Some(Value::Null) => {}
                Some(Value::Object(map)) if *key == "metadata" => {
                    let mut custom = Map::new();
                    for (k, v) in map {
                        match v {
                            Value::Null => {}
                            Value::String(_) => {
                                custom.insert(k.clone(), v.clone());
                            }
                            other => {
                                custom.insert(k.clone(), json!(other.to_string()));
                            }
                        }
                    }
                    if !custom.is_empty() {
                        fields.insert("metadata".into(), Value::Object(custom));
                    }
                }
                Some(Value::String(v)) if *key != "metadata" => {
                    fields.insert((*key).to_string(), json!(v));
                }
                Some(other) => {
                    return Err(ApiError::invalid(format!(
                        "Invalid value for {key}: {other}"
                    )))
                }
            }
        }
        if let Some(encoding) = req.param("contentEncoding").filter(|e| !e.is_empty()) {
            fields.insert("contentEncoding".into(), json!(encoding));
        }
        let content_type = fields
            .remove("contentType")
            .and_then(|v| v.as_str().map(str::to_string))
            .or_else(|| media_type.filter(|t| !t.is_empty()).map(str::to_string))
            .unwrap_or_else(|| "application/octet-stream".to_string());
        let checksum = |key: &str| {
            metadata
                .get(key)
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        Ok(ObjectSpec {
            name,
            content_type,
            fields,
            md5: checksum("md5Hash"),
            crc32c: checksum("crc32c"),
        })
    }
}

/// A JSON object from a metadata body (empty: no fields), or a parse error as Google
/// words it.
fn json_object(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Map::new());
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(ApiError::invalid(format!(
            "Invalid JSON payload received. Expected an object, got {other}."
        ))
        .with_reason("parseError")),
        Err(e) => Err(
            ApiError::invalid(format!("Invalid JSON payload received. {e}."))
                .with_reason("parseError"),
        ),
    }
}

/// A `multipart/related` upload body: the metadata part and the media part.
#[derive(Debug, Clone, PartialEq)]
struct Multipart {
    metadata: Vec<u8>,
    media_type: Option<String>,
    media: Vec<u8>,
}

/// Splits a `multipart/related` body (RFC 2046) into its two parts. Line breaks may be
/// CRLF or bare LF — Python's email generator, which gcloud's apitools uses, writes LF —
/// and the boundary parameter may be quoted either way (apitools quotes it with `'`).
fn parse_multipart(content_type: &str, body: &[u8]) -> Result<Multipart, ApiError> {
    let invalid = |why: &str| ApiError::invalid(format!("invalid multipart/related body: {why}"));
    let (mime, params) = content_type.split_once(';').unwrap_or((content_type, ""));
    if !mime.trim().eq_ignore_ascii_case("multipart/related") {
        return Err(ApiError::invalid(format!(
            "uploadType=multipart needs a multipart/related body, not {:?}",
            mime.trim()
        )));
    }
    let boundary = params
        .split(';')
        .filter_map(|p| p.split_once('='))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("boundary"))
        .map(|(_, v)| v.trim().trim_matches(|c| c == '"' || c == '\''))
        .filter(|b| !b.is_empty())
        .ok_or_else(|| invalid("the Content-Type names no boundary"))?;
    let delimiter = [b"--".as_slice(), boundary.as_bytes()].concat();
    /// A part's headers (lowercase names) and content.
    type Part<'a> = (Vec<(String, String)>, &'a [u8]);
    let mut parts: Vec<Part> = Vec::new();
    let mut at = find(body, &delimiter, 0).ok_or_else(|| invalid("no boundary line"))?;
    loop {
        let after = at + delimiter.len();
        if body.get(after..after + 2) == Some(b"--".as_slice()) {
            break;
        }
        // The rest of the boundary line (transport padding) and its line break.
        let line_end = find(body, b"\n", after).ok_or_else(|| invalid("a truncated part"))?;
        let crlf = line_end > 0 && body[line_end - 1] == b'\r';
        let start = line_end + 1;
        let next = find(body, &[b"\n".as_slice(), &delimiter].concat(), start)
            .ok_or_else(|| invalid("a part without a closing boundary"))?;
        // The line break before a boundary belongs to the boundary.
        let end = if crlf && next > start && body[next - 1] == b'\r' {
            next - 1
        } else {
            next
        };
        let part = &body[start..end.max(start)];
        let blank = if crlf {
            b"\r\n\r\n".as_slice()
        } else {
            b"\n\n"
        };
        let (head, content) = if part.starts_with(if crlf { b"\r\n" } else { b"\n" }) {
            (&part[..0], &part[if crlf { 2 } else { 1 }..])
        } else {
            match find(part, blank, 0) {
                Some(h) => (&part[..h], &part[h + blank.len()..]),
                None => return Err(invalid("a part without a blank line after its headers")),
            }
        };
        let headers = String::from_utf8_lossy(head)
            .lines()
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        parts.push((headers, content));
        at = next + 1;
    }
    match parts.as_slice() {
        [(_, metadata), (media_headers, media)] => Ok(Multipart {
            metadata: metadata.to_vec(),
            media_type: header(media_headers, "content-type").map(str::to_string),
            media: media.to_vec(),
        }),
        _ => Err(invalid(&format!(
            "expected a metadata part and a media part, found {} parts",
            parts.len()
        ))),
    }
}

/// The first index of `needle` in `haystack` at or after `from`.
fn find(haystack: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    if needle.is_empty() || from > haystack.len() {
        return None;
    }
    haystack[from..]
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|p| p + from)
}

/// The MD5 digest GCS reports as `md5Hash`.
fn md5_digest(data: &[u8]) -> [u8; 16] {
    use md5::Digest as _;
    md5::Md5::digest(data).into()
}

fn check_metageneration(bucket: &Value, req: &ApiRequest) -> Result<(), ApiError> {
    match req.param("ifMetagenerationMatch") {
        Some(want) if want != str_of(bucket, "metageneration") => {
            Err(ApiError::new(Code::FailedPrecondition, "Precondition Failed").with_status(412))
        }
        _ => Ok(()),
    }
}

/// RFC 7396 merge of one top-level field: objects merge recursively, null deletes,
/// anything else replaces; an object left empty is dropped (GCS omits empty labels).
fn merge_patch(target: &mut Value, key: &str, patch: &Value) {
    let Some(map) = target.as_object_mut() else {
        return;
    };
    match patch {
        Value::Null => {
            map.remove(key);
        }
        Value::Object(fields) => {
            let slot = map.entry(key.to_string()).or_insert_with(|| json!({}));
            if !slot.is_object() {
                *slot = json!({});
            }
            for (k, v) in fields {
                merge_patch(slot, k, v);
            }
            if slot.as_object().is_some_and(Map::is_empty) && key == "labels" {
                map.remove(key);
            }
        }
        other => {
            map.insert(key.to_string(), other.clone());
        }
    }
}

/// The full iamConfiguration GCS reports: uniform access mirrored into its old name
/// `bucketPolicyOnly`, with a `lockedTime` 90 days after it was enabled.
fn iam_configuration(input: Option<&Value>, previous: Option<&Value>, now: DateTime<Utc>) -> Value {
    let empty = json!({});
    let input = input.filter(|v| !v.is_null()).unwrap_or(&empty);
    let previous = previous.unwrap_or(&empty);
    let enabled = input["uniformBucketLevelAccess"]["enabled"]
        .as_bool()
        .or_else(|| input["bucketPolicyOnly"]["enabled"].as_bool())
        .or_else(|| previous["uniformBucketLevelAccess"]["enabled"].as_bool())
        .unwrap_or(false);
    let mut access = json!({"enabled": enabled});
    if enabled {
        let was_enabled = previous["uniformBucketLevelAccess"]["enabled"] == Value::Bool(true);
        let locked = previous["uniformBucketLevelAccess"]["lockedTime"]
            .as_str()
            .filter(|_| was_enabled)
            .map(str::to_string)
            .unwrap_or_else(|| time_millis(now + chrono::Duration::days(UBLA_LOCK_DAYS)));
        access["lockedTime"] = json!(locked);
    }
    let prevention = input["publicAccessPrevention"]
        .as_str()
        .or_else(|| previous["publicAccessPrevention"].as_str())
        .unwrap_or("inherited");
    json!({
        "bucketPolicyOnly": access,
        "uniformBucketLevelAccess": access,
        "publicAccessPrevention": prevention,
    })
}

/// GCS's bucket naming rules (https://cloud.google.com/storage/docs/buckets#naming).
fn check_bucket_name(name: &str) -> Result<(), ApiError> {
    let b = name.as_bytes();
    let edge_ok = |c: Option<&u8>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    let max = if name.contains('.') { 222 } else { 63 };
    let ip_like = name.split('.').count() == 4 && name.split('.').all(|p| p.parse::<u8>().is_ok());
    let ok = (3..=max).contains(&b.len())
        && b.iter().all(|c| {
            c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'-' | b'_' | b'.')
        })
        && edge_ok(b.first())
        && edge_ok(b.last())
        && name
            .split('.')
            .all(|part| !part.is_empty() && part.len() <= 63)
        && !name.starts_with("goog")
        && !name.contains("google")
        && !ip_like;
    if ok {
        Ok(())
    } else {
        Err(ApiError::invalid(format!("Invalid bucket name: '{name}'")))
    }
}

fn location_type(location: &str) -> Result<&'static str, ApiError> {
    if MULTI_REGIONS.contains(&location) {
        return Ok("multi-region");
    }
    if DUAL_REGIONS.contains(&location) {
        return Ok("dual-region");
    }
    let parts: Vec<&str> = location.split('-').collect();
    let region = parts.len() == 2
        && parts[0].bytes().all(|c| c.is_ascii_uppercase())
        && parts[1].bytes().any(|c| c.is_ascii_digit())
        && parts[1]
            .bytes()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit());
    if region {
        Ok("region")
    } else {
        Err(ApiError::invalid(format!("Invalid location: '{location}'")).with_reason("invalid"))
    }
}

/// A bucket's IAM policy: the one set, or what a new bucket has (its project's owners
/// and editors own it, its viewers read it).
fn bucket_policy(record: &BucketRecord) -> super::policy::Policy {
    record.policy.clone().unwrap_or_else(|| {
        let number = project_number(&record.project);
        super::policy::Policy::with(vec![
            json!({"role": "roles/storage.legacyBucketOwner", "members": [format!("projectEditor:{number}"), format!("projectOwner:{number}")]}),
            json!({"role": "roles/storage.legacyBucketReader", "members": [format!("projectViewer:{number}")]}),
        ])
    })
}

fn bucket_policy_json(record: &BucketRecord) -> Value {
    let policy = bucket_policy(record);
    let mut out = policy.to_json();
    out["kind"] = json!("storage#policy");
    out["resourceId"] = json!(format!(
        "projects/_/buckets/{}",
        str_of(&record.bucket, "name")
    ));
    out["etag"] = json!(bucket_etag(policy.serial as i64));
    if out.get("bindings").is_none() {
        out["bindings"] = json!([]);
    }
    out
}

impl State {
    /// Every bucket with its project and IAM policy.
    pub(crate) fn policies(&self) -> Vec<(String, String, super::policy::Policy)> {
        self.buckets
            .iter()
            .map(|b| {
                (
                    str_of(&b.bucket, "name").to_string(),
                    b.project.clone(),
                    bucket_policy(b),
                )
            })
            .collect()
    }
}

/// A stable 12-digit project number derived from the project id.
pub(crate) fn project_number(project: &str) -> String {
    (100_000_000_000 + fnv1a(project.as_bytes()) % 900_000_000_000).to_string()
}

/// GCS bucket etags are the base64 of a tiny protobuf holding the metageneration
/// (`CAE=` for 1).
fn bucket_etag(metageneration: i64) -> String {
    let mut bytes = vec![0x08];
    let mut n = metageneration.max(0) as u64;
    loop {
        let low = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            bytes.push(low);
            break;
        }
        bytes.push(low | 0x80);
    }
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) of every byte value: one
/// table lookup per byte instead of eight shifts, since whole objects are hashed.
const CRC32C_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = i as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
};

/// CRC-32C, the checksum GCS reports for objects (`crc32c`, big-endian in base64).
fn crc32c(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in data {
        crc = CRC32C_TABLE[((crc ^ u32::from(byte)) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::Faults;
    use axum::http::Method;

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::<Utc>::from_timestamp(1_700_000_000 + secs, 0).expect("valid time")
    }

    fn call(
        state: &mut State,
        t: i64,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<ApiResponse, ApiError> {
        let faults = Faults::default();
        let ctx = OpCtx {
            now: at(t),
            scale: 1.0,
            faults: &faults,
        };
        let req = ApiRequest::new(method, path, body);
        let resp = state.handle(&req, &ctx, &|_| true)?;
        if let Some(body) = resp.json_body() {
            assert_shape(body);
        }
        Ok(resp)
    }

    /// Checks a JSON API answer against the discovery schema of its kind, strictly (see
    /// `schema.rs`): every field Google has, typed as Google types it.
    fn assert_shape(body: &Value) {
        let schema = match body["kind"].as_str() {
            Some("storage#bucket") => "Bucket",
            Some("storage#buckets") => "Buckets",
            Some("storage#object") => "Object",
            _ => "Objects",
        };
        assert_eq!(
            crate::gcp::discovery::conforms("storage", schema, body),
            Ok(()),
            "{body}"
        );
    }

    /// The official storage discovery document, kept in the repository (`contracts/`).
    fn discovery() -> Value {
        terrain_contracts::discovery("storage", "v1")
    }

    fn json_of(resp: ApiResponse) -> Value {
        resp.json_body().cloned().unwrap_or(Value::Null)
    }

    fn upload(state: &mut State, t: i64, bucket: &str, name: &str, data: &[u8]) -> Value {
        let faults = Faults::default();
        let ctx = OpCtx {
            now: at(t),
            scale: 1.0,
            faults: &faults,
        };
        let mut req = ApiRequest::new(
            Method::POST,
            &format!(
                "upload/storage/v1/b/{bucket}/o?uploadType=media&name={}",
                percent_encode(name)
            ),
            None,
        );
        req.body = data.to_vec();
        json_of(state.handle(&req, &ctx, &|_| true).expect("upload"))
    }

    #[test]
    fn generation_preconditions_guard_writes_reads_and_deletes() {
        let mut s = State::default();
        call(
            &mut s,
            0,
            Method::POST,
            "storage/v1/b?project=p",
            Some(json!({"name": "state-1"})),
        )
        .expect("bucket");
        let faults = Faults::default();
        let ctx = OpCtx {
            now: at(1),
            scale: 1.0,
            faults: &faults,
        };
        let put = |s: &mut State, query: &str, data: &[u8]| {
            let mut req = ApiRequest::new(
                Method::POST,
                &format!("upload/storage/v1/b/state-1/o?uploadType=media&name=state.json{query}"),
                None,
            );
            req.body = data.to_vec();
            s.handle(&req, &ctx, &|_| true)
        };
        // ifGenerationMatch=0: only a new object.
        let first = json_of(put(&mut s, "&ifGenerationMatch=0", b"one").expect("create"));
        let g1 = first["generation"]
            .as_str()
            .expect("generation")
            .to_string();
        let again = put(&mut s, "&ifGenerationMatch=0", b"two").expect_err("exists");
        assert_eq!((again.http, again.reason), (412, Some("conditionNotMet")));
        // A write against the generation read succeeds once; the stale one fails.
        let second =
            json_of(put(&mut s, &format!("&ifGenerationMatch={g1}"), b"two").expect("update"));
        let g2 = second["generation"]
            .as_str()
            .expect("generation")
            .to_string();
        assert_ne!(g1, g2);
        let stale = put(&mut s, &format!("&ifGenerationMatch={g1}"), b"three").expect_err("stale");
        assert_eq!(stale.http, 412);
        let read = call(
            &mut s,
            2,
            Method::GET,
            &format!("storage/v1/b/state-1/o/state.json?ifGenerationNotMatch={g2}"),
            None,
        )
        .expect_err("unchanged");
        assert_eq!(read.http, 412);
        let gone = call(
            &mut s,
            2,
            Method::DELETE,
            &format!("storage/v1/b/state-1/o/state.json?ifGenerationMatch={g1}"),
            None,
        )
        .expect_err("not that generation");
        assert_eq!(gone.http, 412);
        call(
            &mut s,
            2,
            Method::DELETE,
            &format!("storage/v1/b/state-1/o/state.json?ifGenerationMatch={g2}"),
            None,
        )
        .expect("deleted");
    }

    #[test]
    fn bucket_create_patch_delete() {
        let mut s = State::default();
        let b = json_of(call(&mut s, 0, Method::POST, "storage/v1/b?project=p",
            Some(json!({"name": "data-1", "location": "us-central1", "labels": {"a": "1", "b": "2"},
                "iamConfiguration": {"uniformBucketLevelAccess": {"enabled": true}}}))).expect("create"));
        assert_eq!(
            (b["location"].as_str(), b["locationType"].as_str()),
            (Some("US-CENTRAL1"), Some("region"))
        );
        assert_eq!(
            (
                b["storageClass"].as_str(),
                b["metageneration"].as_str(),
                b["etag"].as_str()
            ),
            (Some("STANDARD"), Some("1"), Some("CAE="))
        );
        assert_eq!(b["iamConfiguration"]["bucketPolicyOnly"]["enabled"], true);
        assert!(b["iamConfiguration"]["uniformBucketLevelAccess"]["lockedTime"].is_string());

        let dup = call(
            &mut s,
            1,
            Method::POST,
            "storage/v1/b?project=p",
            Some(json!({"name": "data-1"})),
        )
        .expect_err("dup");
        assert_eq!((dup.http, dup.message.as_str()), (409, "Your previous request to create the named bucket succeeded and you already own it."));
        let taken = call(
            &mut s,
            1,
            Method::POST,
            "storage/v1/b?project=q",
            Some(json!({"name": "data-1"})),
        )
        .expect_err("taken");
        assert!(taken
            .message
            .starts_with("The requested bucket name is not available."));

        let patched = json_of(call(&mut s, 2, Method::PATCH, "storage/v1/b/data-1",
            Some(json!({"labels": {"a": null, "c": "3"}, "versioning": {"enabled": true}, "storageClass": "NEARLINE"}))).expect("patch"));
        assert_eq!(patched["labels"], json!({"b": "2", "c": "3"}));
        assert_eq!(
            (patched["metageneration"].as_str(), patched["etag"].as_str()),
            (Some("2"), Some("CAI="))
        );
        assert_eq!(patched["versioning"], json!({"enabled": true}));
        assert_eq!(
            patched["iamConfiguration"], b["iamConfiguration"],
            "untouched by the patch"
        );
        let stale = call(
            &mut s,
            3,
            Method::PATCH,
            "storage/v1/b/data-1?ifMetagenerationMatch=1",
            Some(json!({})),
        )
        .expect_err("stale");
        assert_eq!(stale.http, 412);
        let bad = call(
            &mut s,
            3,
            Method::PATCH,
            "storage/v1/b/data-1",
            Some(json!({"storageClass": "GLACIER"})),
        )
        .expect_err("bad class");
        assert_eq!(bad.code, Code::InvalidArgument);

        let list =
            json_of(call(&mut s, 4, Method::GET, "storage/v1/b?project=p", None).expect("list"));
        assert_eq!(list["items"][0]["name"], "data-1");
        assert_eq!(
            json_of(call(&mut s, 4, Method::GET, "storage/v1/b?project=q", None).expect("list")),
            json!({"kind": "storage#buckets"})
        );
        assert_eq!(
            call(&mut s, 5, Method::DELETE, "storage/v1/b/data-1", None)
                .expect("delete")
                .status,
            204
        );
        let gone = call(&mut s, 6, Method::GET, "storage/v1/b/data-1", None).expect_err("gone");
        assert_eq!(
            (gone.http, gone.message.as_str()),
            (404, "The specified bucket does not exist.")
        );
        assert_eq!(
            gone.body(crate::gcp::Api::Storage)["error"]["errors"][0]["reason"],
            "notFound"
        );
    }

    #[test]
    fn bucket_names_and_locations_are_validated() {
        let mut s = State::default();
        for name in [
            "ab",
            "Bad",
            "-x-",
            "goog-data",
            "my-google-bucket",
            "192.168.1.1",
            "a..b",
            "x_",
        ] {
            let err = call(
                &mut s,
                0,
                Method::POST,
                "storage/v1/b?project=p",
                Some(json!({"name": name})),
            )
            .expect_err(name);
            assert_eq!(err.message, format!("Invalid bucket name: '{name}'"));
        }
        for name in ["abc", "a_b-c.d", "0data"] {
            call(
                &mut s,
                0,
                Method::POST,
                "storage/v1/b?project=p",
                Some(json!({"name": name})),
            )
            .expect(name);
        }
        let err = call(
            &mut s,
            0,
            Method::POST,
            "storage/v1/b?project=p",
            Some(json!({"name": "xy1", "location": "moon"})),
        )
        .expect_err("moon");
        assert_eq!(err.message, "Invalid location: 'MOON'");
        let err = call(
            &mut s,
            0,
            Method::POST,
            "storage/v1/b",
            Some(json!({"name": "xy1"})),
        )
        .expect_err("no project");
        assert_eq!(err.reason, Some("required"));
        let b = json_of(
            call(
                &mut s,
                0,
                Method::POST,
                "storage/v1/b?project=p",
                Some(json!({"name": "xy2", "location": "eu"})),
            )
            .expect("eu"),
        );
        assert_eq!(b["locationType"], "multi-region");
    }

    #[test]
    fn versioned_objects_keep_noncurrent_versions_that_block_bucket_delete() {
        let mut s = State::default();
        call(
            &mut s,
            0,
            Method::POST,
            "storage/v1/b?project=p",
            Some(json!({"name": "vers", "versioning": {"enabled": true}})),
        )
        .expect("create");
        let first = upload(&mut s, 1, "vers", "dir/a.txt", b"one");
        assert_eq!(
            (first["size"].as_str(), first["name"].as_str()),
            (Some("3"), Some("dir/a.txt"))
        );
        let second = upload(&mut s, 1, "vers", "dir/a.txt", b"two!");
        assert!(
            super::super::int_of(&second, "generation")
                > super::super::int_of(&first, "generation")
        );
        let live =
            json_of(call(&mut s, 2, Method::GET, "storage/v1/b/vers/o", None).expect("list"));
        assert_eq!(live["items"].as_array().map(Vec::len), Some(1));
        let all = json_of(
            call(
                &mut s,
                2,
                Method::GET,
                "storage/v1/b/vers/o?versions=true",
                None,
            )
            .expect("list"),
        );
        assert_eq!(all["items"].as_array().map(Vec::len), Some(2));
        assert!(all["items"][0]["timeDeleted"].is_string());

        let media = call(
            &mut s,
            2,
            Method::GET,
            "storage/v1/b/vers/o/dir%2Fa.txt?alt=media",
            None,
        )
        .expect("media");
        assert_eq!(
            media.body,
            Body::Bytes {
                content_type: "application/octet-stream".into(),
                data: b"two!".to_vec()
            }
        );
        call(
            &mut s,
            3,
            Method::DELETE,
            "storage/v1/b/vers/o/dir%2Fa.txt",
            None,
        )
        .expect("delete live");
        call(
            &mut s,
            3,
            Method::GET,
            "storage/v1/b/vers/o/dir%2Fa.txt",
            None,
        )
        .expect_err("no live version");
        let old = format!(
            "storage/v1/b/vers/o/dir%2Fa.txt?generation={}",
            str_of(&first, "generation")
        );
        call(&mut s, 3, Method::GET, &old, None).expect("noncurrent by generation");
        let err =
            call(&mut s, 4, Method::DELETE, "storage/v1/b/vers", None).expect_err("not empty");
        assert_eq!(
            (err.http, err.message.as_str()),
            (409, "The bucket you tried to delete is not empty.")
        );
        call(&mut s, 4, Method::DELETE, &old, None).expect("purge first");
        let newer = format!(
            "storage/v1/b/vers/o/dir%2Fa.txt?generation={}",
            str_of(&second, "generation")
        );
        call(&mut s, 4, Method::DELETE, &newer, None).expect("purge second");
        call(&mut s, 5, Method::DELETE, "storage/v1/b/vers", None).expect("empty now");
    }

    #[test]
    fn checksums_match_known_vectors() {
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(b""), 0);
        assert_eq!(bucket_etag(1), "CAE=");
        assert_eq!(bucket_etag(300), "CKwC");
        assert_eq!(project_number("p").len(), 12);
    }
    // ------------------------------------------------------------ media protocols

    /// One request with headers, as the HTTP side hands it over; successful JSON
    /// answers are checked for shape.
    fn send(
        state: &mut State,
        t: i64,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        content_type: Option<&str>,
        body: &[u8],
    ) -> Answer {
        let faults = Faults::default();
        let ctx = OpCtx {
            now: at(t),
            scale: 1.0,
            faults: &faults,
        };
        let mut req = ApiRequest::new(method, path, None);
        req.content_type = content_type.map(str::to_string);
        req.body = body.to_vec();
        let headers: Vec<(String, String)> = headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let answer = state.serve(&req, &headers, &ctx, &|_| true);
        if let Some(json) = answer
            .response
            .json_body()
            .filter(|_| answer.response.status < 300)
        {
            assert_shape(json);
        }
        answer
    }

    fn headers_named<'a>(answer: &'a Answer, name: &str) -> Vec<&'a str> {
        answer
            .headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }

    fn header_named<'a>(answer: &'a Answer, name: &str) -> Option<&'a str> {
        headers_named(answer, name).first().copied()
    }

    fn with_bucket(name: &str) -> State {
        let mut s = State::default();
        call(
            &mut s,
            0,
            Method::POST,
            "storage/v1/b?project=p",
            Some(json!({"name": name})),
        )
        .expect("bucket");
        s
    }

    fn media(answer: &Answer) -> &[u8] {
        match &answer.response.body {
            Body::Bytes { data, .. } => data,
            other => panic!("expected media, got {other:?}"),
        }
    }

    /// Starts a resumable upload and returns the session's path and query, relative to
    /// the host as the HTTP side routes it.
    fn start_session(s: &mut State, t: i64, query: &str, body: Value, size: Option<u64>) -> String {
        let size = size.map(|n| n.to_string());
        let mut headers = vec![
            ("Host", "sandbox.test:8080"),
            ("X-Upload-Content-Type", "text/csv"),
        ];
        if let Some(size) = &size {
            headers.push(("X-Upload-Content-Length", size));
        }
        let started = send(
            s,
            t,
            Method::POST,
            &format!("upload/storage/v1/b/ups/o?uploadType=resumable{query}"),
            &headers,
            Some("application/json; charset=UTF-8"),
            body.to_string().as_bytes(),
        );
        assert_eq!(started.response.status, 200, "{started:?}");
        let location = header_named(&started, "location")
            .expect("a Location")
            .to_string();
        location
            .strip_prefix("http://sandbox.test:8080/")
            .unwrap_or_else(|| panic!("the session URI names the host the client used: {location}"))
            .to_string()
    }

    fn put_chunk(s: &mut State, t: i64, session: &str, range: &str, body: &[u8]) -> Answer {
        send(
            s,
            t,
            Method::PUT,
            session,
            &[("Content-Range", range)],
            Some("text/csv"),
            body,
        )
    }

    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 % 251) as u8).collect()
    }

    const KIB256: usize = 256 * 1024;

    #[test]
    fn multipart_upload_takes_name_type_and_metadata_from_the_first_part() {
        let mut s = with_bucket("ups");
        // As apitools writes it: LF line breaks, the boundary quoted with '.
        let body = b"--===============7330845974216740156==\nContent-Type: application/json\nMIME-Version: 1.0\n\n{\"name\": \"dir/a.txt\", \"contentType\": \"text/plain\", \"metadata\": {\"team\": \"ml\"}, \"cacheControl\": \"no-cache\", \"size\": \"99\"}\n--===============7330845974216740156==\nContent-Type: text/plain\nMIME-Version: 1.0\nContent-Transfer-Encoding: binary\n\nline one\n--not the boundary\nline two\n\n--===============7330845974216740156==--\n";
        let created = send(
            &mut s,
            1,
            Method::POST,
            "upload/storage/v1/b/ups/o?uploadType=multipart",
            &[],
            Some("multipart/related; boundary='===============7330845974216740156=='"),
            body,
        );
        assert_eq!(created.response.status, 200, "{created:?}");
        let object = json_of(created.response);
        assert_eq!(object["name"], "dir/a.txt");
        assert_eq!(object["contentType"], "text/plain");
        assert_eq!(object["metadata"], json!({"team": "ml"}));
        assert_eq!(object["cacheControl"], "no-cache");
        let content = b"line one\n--not the boundary\nline two\n";
        assert_eq!(
            object["size"],
            content.len().to_string(),
            "output-only size is ignored"
        );
        assert_eq!(
            object["md5Hash"],
            base64::engine::general_purpose::STANDARD.encode(md5_digest(content))
        );
        let read = send(
            &mut s,
            2,
            Method::GET,
            "storage/v1/b/ups/o/dir%2Fa.txt?alt=media",
            &[],
            None,
            b"",
        );
        assert_eq!(media(&read), content);

        // CRLF line breaks and a quoted boundary, the name in the query, the type from
        // the media part.
        let body = b"--xyz\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n{}\r\n--xyz\r\nContent-Type: image/png\r\n\r\n\x89PNG\r\n--xyz--\r\n";
        let created = send(
            &mut s,
            3,
            Method::POST,
            "upload/storage/v1/b/ups/o?uploadType=multipart&name=b.png",
            &[],
            Some("multipart/related; boundary=\"xyz\""),
            body,
        );
        let object = json_of(created.response);
        assert_eq!(
            (
                object["name"].as_str(),
                object["contentType"].as_str(),
                object["size"].as_str()
            ),
            (Some("b.png"), Some("image/png"), Some("4"))
        );

        let clash = send(
            &mut s,
            4,
            Method::POST,
            "upload/storage/v1/b/ups/o?uploadType=multipart&name=other",
            &[],
            Some("multipart/related; boundary=xyz"),
            b"--xyz\r\nContent-Type: application/json\r\n\r\n{\"name\": \"b.png\"}\r\n--xyz\r\n\r\nx\r\n--xyz--",
        );
        assert_eq!(clash.response.status, 400);
        let one_part = send(
            &mut s,
            4,
            Method::POST,
            "upload/storage/v1/b/ups/o?uploadType=multipart&name=c",
            &[],
            Some("multipart/related; boundary=xyz"),
            b"--xyz\r\nContent-Type: application/json\r\n\r\n{}\r\n--xyz--",
        );
        assert_eq!(one_part.response.status, 400);
    }

    #[test]
    fn multipart_upload_honours_preconditions_and_checksums_sent_with_it() {
        let mut s = with_bucket("ups");
        let part = |meta: Value, data: &str| {
            format!("--b\r\nContent-Type: application/json\r\n\r\n{meta}\r\n--b\r\nContent-Type: text/plain\r\n\r\n{data}\r\n--b--\r\n").into_bytes()
        };
        let post = |s: &mut State, query: &str, body: &[u8]| {
            send(
                s,
                1,
                Method::POST,
                &format!("upload/storage/v1/b/ups/o?uploadType=multipart{query}"),
                &[],
                Some("multipart/related; boundary=b"),
                body,
            )
        };
        let first = post(
            &mut s,
            "&ifGenerationMatch=0",
            &part(json!({"name": "k"}), "one"),
        );
        let generation = json_of(first.response)["generation"]
            .as_str()
            .expect("generation")
            .to_string();
        let again = post(
            &mut s,
            "&ifGenerationMatch=0",
            &part(json!({"name": "k"}), "two"),
        );
        assert_eq!(again.response.status, 412);
        let stale_meta = post(
            &mut s,
            "&ifMetagenerationMatch=2",
            &part(json!({"name": "k"}), "two"),
        );
        assert_eq!(stale_meta.response.status, 412);
        let wrong = post(
            &mut s,
            &format!("&ifGenerationNotMatch={generation}"),
            &part(json!({"name": "k"}), "two"),
        );
        assert_eq!(wrong.response.status, 412);
        let right = post(
            &mut s,
            &format!("&ifGenerationMatch={generation}&ifMetagenerationMatch=1"),
            &part(
                json!({"name": "k", "md5Hash": "XrY7u+Ae7tCTyyK7j1rNww==", "crc32c": "yZRlqg=="}),
                "hello world",
            ),
        );
        assert_eq!(right.response.status, 200, "{right:?}");
        let object = json_of(right.response);
        assert_eq!(
            (object["md5Hash"].as_str(), object["crc32c"].as_str()),
            (Some("XrY7u+Ae7tCTyyK7j1rNww=="), Some("yZRlqg=="))
        );
        let corrupt = post(
            &mut s,
            "",
            &part(
                json!({"name": "k", "md5Hash": "XrY7u+Ae7tCTyyK7j1rNww=="}),
                "hello world!",
            ),
        );
        assert_eq!(corrupt.response.status, 400);
        assert!(json_of(corrupt.response)["error"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("Provided MD5 hash")));
        let unknown = post(&mut s, "", b"");
        assert_eq!(unknown.response.status, 400);
        let bad_type = send(
            &mut s,
            1,
            Method::POST,
            "upload/storage/v1/b/ups/o?uploadType=chunked&name=x",
            &[],
            None,
            b"x",
        );
        assert_eq!(bad_type.response.status, 400);
    }

    #[test]
    fn resumable_upload_answers_308_with_the_persisted_range_until_the_last_chunk() {
        let mut s = with_bucket("ups");
        let data = pattern(2 * KIB256 + 1000);
        let total = data.len();
        let session = start_session(
            &mut s,
            1,
            "&ifGenerationMatch=0",
            json!({"name": "runs/big.csv", "metadata": {"run": "7"}}),
            Some(total as u64),
        );
        assert!(
            session.starts_with(
                "upload/storage/v1/b/ups/o?uploadType=resumable&name=runs%2Fbig.csv&upload_id="
            ),
            "{session}"
        );
        assert_eq!(
            call(
                &mut s,
                1,
                Method::GET,
                "storage/v1/b/ups/o/runs%2Fbig.csv",
                None
            )
            .expect_err("not there yet")
            .http,
            404,
            "only a completed upload makes an object"
        );
        let first = put_chunk(
            &mut s,
            2,
            &session,
            &format!("bytes 0-{}/{total}", KIB256 - 1),
            &data[..KIB256],
        );
        assert_eq!(
            (first.response.status, header_named(&first, "range")),
            (308, Some("bytes=0-262143"))
        );
        assert_eq!(first.response.body, Body::Empty);
        // Streaming clients do not know the total until the end.
        let second = put_chunk(
            &mut s,
            3,
            &session,
            &format!("bytes {KIB256}-{}/*", 2 * KIB256 - 1),
            &data[KIB256..2 * KIB256],
        );
        assert_eq!(
            (second.response.status, header_named(&second, "range")),
            (308, Some("bytes=0-524287"))
        );
        let last = put_chunk(
            &mut s,
            4,
            &session,
            &format!("bytes {}-{}/{total}", 2 * KIB256, total - 1),
            &data[2 * KIB256..],
        );
        assert_eq!(last.response.status, 200, "{last:?}");
        let object = json_of(last.response);
        assert_eq!(
            (object["name"].as_str(), object["contentType"].as_str()),
            (Some("runs/big.csv"), Some("text/csv"))
        );
        assert_eq!(object["metadata"], json!({"run": "7"}));
        assert_eq!(object["size"], total.to_string());
        assert_eq!(
            object["crc32c"],
            base64::engine::general_purpose::STANDARD.encode(crc32c(&data).to_be_bytes())
        );
        let read = send(
            &mut s,
            5,
            Method::GET,
            "download/storage/v1/b/ups/o/runs%2Fbig.csv?alt=media",
            &[],
            None,
            b"",
        );
        assert_eq!(media(&read), data.as_slice());
        // A repeated last chunk (its answer was lost) gets the object again, not a copy.
        let repeat = put_chunk(
            &mut s,
            6,
            &session,
            &format!("bytes {}-{}/{total}", 2 * KIB256, total - 1),
            &data[2 * KIB256..],
        );
        assert_eq!(json_of(repeat.response)["generation"], object["generation"]);
    }

    #[test]
    fn resumable_chunks_keep_whole_256_kib_units_and_skip_bytes_already_held() {
        let mut s = with_bucket("ups");
        let data = pattern(3 * KIB256);
        let session = start_session(&mut s, 1, "&name=u.bin", json!({}), None);
        let small = put_chunk(&mut s, 2, &session, "bytes 0-999/*", &data[..1000]);
        assert_eq!(
            small.response.status, 400,
            "a chunk under 256 KiB must be the last"
        );
        // 1.5 units sent: one is kept, and the Range says so.
        let ragged = KIB256 + KIB256 / 2;
        let partial = put_chunk(
            &mut s,
            3,
            &session,
            &format!("bytes 0-{}/*", ragged - 1),
            &data[..ragged],
        );
        assert_eq!(header_named(&partial, "range"), Some("bytes=0-262143"));
        // A gap keeps nothing.
        let gap = put_chunk(
            &mut s,
            4,
            &session,
            &format!("bytes {}-{}/*", 2 * KIB256, 3 * KIB256 - 1),
            &data[2 * KIB256..],
        );
        assert_eq!(
            (gap.response.status, header_named(&gap, "range")),
            (308, Some("bytes=0-262143"))
        );
        // Resending from before the persisted end: the overlap is not stored twice.
        let overlap = put_chunk(
            &mut s,
            5,
            &session,
            &format!("bytes {}-{}/{}", KIB256 / 2, 3 * KIB256 - 1, 3 * KIB256),
            &data[KIB256 / 2..],
        );
        assert_eq!(overlap.response.status, 200, "{overlap:?}");
        let read = send(
            &mut s,
            6,
            Method::GET,
            "storage/v1/b/ups/o/u.bin?alt=media",
            &[],
            None,
            b"",
        );
        assert_eq!(media(&read), data.as_slice());
        let mismatch = start_session(&mut s, 7, "&name=v.bin", json!({}), Some(10));
        let wrong_total = put_chunk(&mut s, 7, &mismatch, "bytes 0-10/11", &pattern(11));
        assert_eq!(
            wrong_total.response.status, 400,
            "X-Upload-Content-Length said 10"
        );
        let short_body = put_chunk(&mut s, 7, &mismatch, "bytes 0-9/10", &pattern(9));
        assert_eq!(short_body.response.status, 400);
        let too_big = send(
            &mut s,
            8,
            Method::POST,
            "upload/storage/v1/b/ups/o?uploadType=resumable&name=huge",
            &[(
                "X-Upload-Content-Length",
                &(MAX_OBJECT_BYTES + 1).to_string(),
            )],
            None,
            b"",
        );
        assert_eq!(too_big.response.status, 413);
    }

    #[test]
    fn status_query_reports_the_bytes_received_and_finishes_a_complete_upload() {
        let mut s = with_bucket("ups");
        let data = pattern(2 * KIB256);
        let session = start_session(
            &mut s,
            1,
            "",
            json!({"name": "q.bin", "contentType": "application/x-q"}),
            None,
        );
        let nothing = put_chunk(&mut s, 2, &session, "bytes */*", b"");
        assert_eq!(
            (nothing.response.status, header_named(&nothing, "range")),
            (308, None),
            "no Range before any byte"
        );
        put_chunk(
            &mut s,
            3,
            &session,
            &format!("bytes 0-{}/*", KIB256 - 1),
            &data[..KIB256],
        );
        let some = put_chunk(&mut s, 4, &session, &format!("bytes */{}", data.len()), b"");
        assert_eq!(
            (some.response.status, header_named(&some, "range")),
            (308, Some("bytes=0-262143"))
        );
        let done = put_chunk(
            &mut s,
            5,
            &session,
            &format!("bytes {KIB256}-{}/*", data.len() - 1),
            &data[KIB256..],
        );
        assert_eq!(
            (done.response.status, header_named(&done, "range")),
            (308, Some("bytes=0-524287")),
            "without the total the upload cannot know it is complete"
        );
        // The last bytes arrived with `/*`: an empty request naming the total finishes
        // it, as apitools finishes a stream that ended on a chunk boundary.
        let finish = put_chunk(&mut s, 6, &session, &format!("bytes */{}", data.len()), b"");
        assert_eq!(finish.response.status, 200, "{finish:?}");
        let object = json_of(finish.response);
        assert_eq!(
            (object["size"].as_str(), object["contentType"].as_str()),
            (Some("524288"), Some("application/x-q"))
        );
        let later = put_chunk(&mut s, 7, &session, "bytes */*", b"");
        assert_eq!(
            json_of(later.response)["generation"],
            object["generation"],
            "a finished session answers with its object"
        );
        let bad = put_chunk(
            &mut s,
            7,
            &session.replace("upload_id=", "upload_id=x"),
            "bytes */*",
            b"",
        );
        assert_eq!(bad.response.status, 404);
    }

    #[test]
    fn resumable_session_survives_a_restart_and_expires_after_a_week() {
        let mut s = with_bucket("ups");
        let data = pattern(KIB256 + 10);
        let session = start_session(
            &mut s,
            1,
            "",
            json!({"name": "r.bin"}),
            Some(data.len() as u64),
        );
        put_chunk(
            &mut s,
            2,
            &session,
            &format!("bytes 0-{}/{}", KIB256 - 1, data.len()),
            &data[..KIB256],
        );
        // What the state file holds is all a restarted sandbox has.
        let saved = serde_json::to_string(&s).expect("state serializes");
        let mut restarted: State = serde_json::from_str(&saved).expect("state loads");
        let status = put_chunk(&mut restarted, 3, &session, "bytes */*", b"");
        assert_eq!(
            (status.response.status, header_named(&status, "range")),
            (308, Some("bytes=0-262143"))
        );
        let rest = put_chunk(
            &mut restarted,
            4,
            &session,
            &format!("bytes {KIB256}-{}/{}", data.len() - 1, data.len()),
            &data[KIB256..],
        );
        assert_eq!(rest.response.status, 200);

        let stale = start_session(&mut restarted, 10, "", json!({"name": "s.bin"}), None);
        let week = 7 * 24 * 3600;
        assert_eq!(
            put_chunk(&mut restarted, 10 + week - 1, &stale, "bytes */*", b"")
                .response
                .status,
            308
        );
        assert_eq!(
            put_chunk(&mut restarted, 10 + week, &stale, "bytes */*", b"")
                .response
                .status,
            404,
            "expired"
        );
        let empty = serde_json::to_value(State::default()).expect("serializes");
        assert!(
            empty.get("uploads").is_none(),
            "state without sessions keeps its old shape"
        );
    }

    #[test]
    fn cancelled_upload_answers_499_and_its_uri_is_gone() {
        let mut s = with_bucket("ups");
        let session = start_session(&mut s, 1, "", json!({"name": "c.bin"}), None);
        put_chunk(
            &mut s,
            2,
            &session,
            &format!("bytes 0-{}/*", KIB256 - 1),
            &pattern(KIB256),
        );
        let cancelled = send(&mut s, 3, Method::DELETE, &session, &[], None, b"");
        assert_eq!(
            (cancelled.response.status, &cancelled.response.body),
            (499, &Body::Empty)
        );
        assert_eq!(
            put_chunk(&mut s, 4, &session, "bytes */*", b"")
                .response
                .status,
            404
        );
        assert_eq!(
            send(&mut s, 4, Method::DELETE, &session, &[], None, b"")
                .response
                .status,
            404
        );
        assert!(
            call(&mut s, 4, Method::GET, "storage/v1/b/ups/o/c.bin", None).is_err(),
            "no object"
        );
    }

    #[test]
    fn preconditions_of_a_resumable_upload_apply_at_its_start_and_its_end() {
        let mut s = with_bucket("ups");
        upload(&mut s, 1, "ups", "p.txt", b"old");
        let doomed = send(
            &mut s,
            2,
            Method::POST,
            "upload/storage/v1/b/ups/o?uploadType=resumable&name=p.txt&ifGenerationMatch=0",
            &[],
            None,
            b"",
        );
        assert_eq!(
            doomed.response.status, 412,
            "refused before any byte travels"
        );
        let session = start_session(
            &mut s,
            3,
            "&ifGenerationMatch=0",
            json!({"name": "q.txt"}),
            None,
        );
        upload(&mut s, 4, "ups", "q.txt", b"raced");
        let last = put_chunk(&mut s, 5, &session, "bytes 0-2/3", b"new");
        assert_eq!(last.response.status, 412, "someone created q.txt meanwhile");
        let read = send(
            &mut s,
            6,
            Method::GET,
            "storage/v1/b/ups/o/q.txt?alt=media",
            &[],
            None,
            b"",
        );
        assert_eq!(media(&read), b"raced");
    }

    #[test]
    fn downloads_honour_range_and_generation_with_the_headers_clients_validate() {
        let mut s = with_bucket("ups");
        let old = upload(&mut s, 1, "ups", "d.txt", b"first version");
        let data = b"0123456789abcdef";
        let object = upload(&mut s, 2, "ups", "d.txt", data);
        for path in [
            "download/storage/v1/b/ups/o/d.txt?alt=media",
            "storage/v1/b/ups/o/d.txt?alt=media",
        ] {
            let whole = send(&mut s, 3, Method::GET, path, &[], None, b"");
            assert_eq!(
                (whole.response.status, media(&whole)),
                (200, data.as_slice())
            );
            assert_eq!(
                headers_named(&whole, "x-goog-hash"),
                [
                    format!("crc32c={}", str_of(&object, "crc32c")),
                    format!(
                        "md5={}",
                        base64::engine::general_purpose::STANDARD.encode(md5_digest(data))
                    ),
                ]
            );
            assert_eq!(
                header_named(&whole, "x-goog-generation"),
                object["generation"].as_str()
            );
            assert_eq!(header_named(&whole, "x-goog-metageneration"), Some("1"));
            assert_eq!(
                header_named(&whole, "x-goog-stored-content-length"),
                Some("16")
            );
            assert_eq!(header_named(&whole, "content-range"), None);
        }
        let cases: [(&str, u16, &[u8], Option<&str>); 7] = [
            ("bytes=2-5", 206, b"2345", Some("bytes 2-5/16")),
            ("bytes=10-", 206, b"abcdef", Some("bytes 10-15/16")),
            ("bytes=-3", 206, b"def", Some("bytes 13-15/16")),
            ("bytes=14-99", 206, b"ef", Some("bytes 14-15/16")),
            ("bytes=0-", 206, data, Some("bytes 0-15/16")),
            ("bytes=0-1,4-5", 200, data, None),
            ("bytes=16-", 416, b"", Some("bytes */16")),
        ];
        for (range, status, body, content_range) in cases {
            let got = send(
                &mut s,
                4,
                Method::GET,
                "download/storage/v1/b/ups/o/d.txt?alt=media",
                &[("Range", range)],
                None,
                b"",
            );
            assert_eq!(got.response.status, status, "{range}");
            assert_eq!(
                header_named(&got, "content-range"),
                content_range,
                "{range}"
            );
            if status != 416 {
                assert_eq!(media(&got), body, "{range}");
            }
        }
        let older = send(
            &mut s,
            5,
            Method::GET,
            &format!(
                "download/storage/v1/b/ups/o/d.txt?alt=media&generation={}",
                str_of(&old, "generation")
            ),
            &[("Range", "bytes=0-4")],
            None,
            b"",
        );
        assert_eq!(
            older.response.status, 404,
            "an unversioned bucket keeps no old generation"
        );
        let metadata = send(
            &mut s,
            5,
            Method::GET,
            "storage/v1/b/ups/o/d.txt",
            &[("Range", "bytes=0-1")],
            None,
            b"",
        );
        assert_eq!(json_of(metadata.response)["md5Hash"], object["md5Hash"]);
    }

    #[test]
    fn listing_with_a_delimiter_folds_deeper_names_into_prefixes() {
        let mut s = with_bucket("ups");
        for name in ["a.txt", "dir/b.txt", "dir/sub/c.txt", "other/d.txt"] {
            upload(&mut s, 1, "ups", name, b"x");
        }
        let top = json_of(
            call(
                &mut s,
                2,
                Method::GET,
                "storage/v1/b/ups/o?delimiter=%2F",
                None,
            )
            .expect("list"),
        );
        assert_eq!(top["prefixes"], json!(["dir/", "other/"]));
        assert_eq!(
            top["items"]
                .as_array()
                .map(|i| i.iter().map(|o| o["name"].clone()).collect::<Vec<_>>()),
            Some(vec![json!("a.txt")])
        );
        let dir = json_of(
            call(
                &mut s,
                2,
                Method::GET,
                "storage/v1/b/ups/o?delimiter=%2F&prefix=dir%2F",
                None,
            )
            .expect("list"),
        );
        assert_eq!(dir["prefixes"], json!(["dir/sub/"]));
        assert_eq!(dir["items"][0]["name"], "dir/b.txt");
        let flat = json_of(call(&mut s, 2, Method::GET, "storage/v1/b/ups/o", None).expect("list"));
        assert_eq!(flat["items"].as_array().map(Vec::len), Some(4));
    }

    #[test]
    fn upload_paths_are_the_ones_the_discovery_document_names() {
        let doc = discovery();
        let protocols =
            &doc["resources"]["objects"]["methods"]["insert"]["mediaUpload"]["protocols"];
        let mut s = with_bucket("ups");
        for (protocol, upload_type) in [("simple", "media"), ("resumable", "resumable")] {
            let path = protocols[protocol]["path"]
                .as_str()
                .expect("a path")
                .replace("{bucket}", "ups");
            let answer = send(
                &mut s,
                1,
                Method::POST,
                &format!(
                    "{}?uploadType={upload_type}&name={protocol}",
                    path.trim_start_matches('/')
                ),
                &[],
                None,
                b"",
            );
            assert_eq!(answer.response.status, 200, "{protocol}: {answer:?}");
        }
        // The object's checksums are the documented encodings: base64 of the MD5 digest
        // and of the big-endian CRC32C.
        let object = upload(&mut s, 2, "ups", "hello", b"hello world");
        assert_eq!(
            (object["md5Hash"].as_str(), object["crc32c"].as_str()),
            (Some("XrY7u+Ae7tCTyyK7j1rNww=="), Some("yZRlqg=="))
        );
        assert!(
            doc["schemas"]["Object"]["properties"]["crc32c"]["description"]
                .as_str()
                .is_some_and(|d| d.contains("big-endian"))
        );
    }

    #[test]
    fn crc32c_table_agrees_with_the_bitwise_definition() {
        fn bitwise(data: &[u8]) -> u32 {
            let mut crc = !0u32;
            for &byte in data {
                crc ^= u32::from(byte);
                for _ in 0..8 {
                    crc = if crc & 1 != 0 {
                        (crc >> 1) ^ 0x82F6_3B78
                    } else {
                        crc >> 1
                    };
                }
            }
            !crc
        }
        for len in [0, 1, 7, 255, 4096] {
            let data = pattern(len);
            assert_eq!(crc32c(&data), bitwise(&data), "{len} bytes");
        }
    }

    #[test]
    fn content_ranges_parse_as_clients_send_them() {
        assert_eq!(
            ContentRange::parse("bytes 0-9/10"),
            Ok(ContentRange::Chunk {
                first: 0,
                last: Some(9),
                total: Some(10)
            })
        );
        assert_eq!(
            ContentRange::parse("bytes 5-9/*"),
            Ok(ContentRange::Chunk {
                first: 5,
                last: Some(9),
                total: None
            })
        );
        assert_eq!(
            ContentRange::parse("bytes */10"),
            Ok(ContentRange::Query { total: Some(10) })
        );
        assert_eq!(
            ContentRange::parse("bytes */*"),
            Ok(ContentRange::Query { total: None })
        );
        for bad in ["bytes 9-5/10", "0-9/10", "bytes 0-9", "bytes a-b/c"] {
            assert!(ContentRange::parse(bad).is_err(), "{bad}");
        }
    }
}
