//! The Cloud Storage emulator (storage v1 JSON API): buckets, created, patched and deleted
//! synchronously with GCS's rules (global names, merge-patch with null deletes,
//! metagenerations, "not empty" conflicts), and enough of objects — media upload, list,
//! get, delete, noncurrent versions — for force-destroy and tests.

use base64::Engine as _;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::error::{ApiError, Code};
use super::operation::OpCtx;
use super::schema::Rules;
use super::tables;
use super::{parse_body, set_or_remove, str_of};
use crate::common::hash::fnv1a;
use crate::common::time::time_millis;
use crate::http::{percent_encode, ApiRequest, ApiResponse, Body};

/// How long after enabling uniform bucket-level access it can still be disabled.
const UBLA_LOCK_DAYS: i64 = 90;

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
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct BucketRecord {
    project: String,
    bucket: Value,
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
    pub(crate) fn handle(
        &mut self,
        req: &ApiRequest,
        ctx: &OpCtx,
    ) -> Result<ApiResponse, ApiError> {
        let segments = req.segments();
        let s: Vec<&str> = segments.iter().map(String::as_str).collect();
        let method = req.method.as_str();
        let now = ctx.now;
        match (method, s.as_slice()) {
            ("GET", ["storage", "v1", "b"]) => self.list_buckets(req),
            ("POST", ["storage", "v1", "b"]) => self.insert_bucket(req, now),
            ("GET", ["storage", "v1", "b", b]) => {
                Ok(ApiResponse::ok(self.bucket(b)?.bucket.clone()))
            }
            ("PATCH", ["storage", "v1", "b", b]) => self.patch_bucket(b, req, now),
            ("DELETE", ["storage", "v1", "b", b]) => self.delete_bucket(b, req),
            ("GET", ["storage", "v1", "b", b, "o"]) => self.list_objects(b, req),
            ("GET", ["storage", "v1", "b", b, "o", name @ ..]) if !name.is_empty() => {
                self.get_object(b, &name.join("/"), req)
            }
            ("DELETE", ["storage", "v1", "b", b, "o", name @ ..]) if !name.is_empty() => {
                self.delete_object(b, &name.join("/"), req, now)
            }
            ("POST", ["upload", "storage", "v1", "b", b, "o"]) => self.upload(b, req, now),
            _ => Err(ApiError::no_route(method, &req.path)),
        }
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
        let body = parse_body(req, &tables::BUCKET, "", Rules::JSON_API)?;
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
        let body = parse_body(req, &tables::BUCKET, "", Rules::JSON_API_PATCH)?;
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

    fn upload(
        &mut self,
        bucket: &str,
        req: &ApiRequest,
        now: DateTime<Utc>,
    ) -> Result<ApiResponse, ApiError> {
        let upload_type = req.param("uploadType").unwrap_or("");
        if upload_type != "media" {
            return Err(ApiError::invalid(format!(
                "Unsupported uploadType \"{upload_type}\": the sandbox accepts uploadType=media only."
            )));
        }
        let name = required(req, "name")?.to_string();
        let i = self.bucket_index(bucket)?;
        check_generation(&self.buckets[i], &name, req)?;
        let generation = (now.timestamp_micros()).max(self.last_generation + 1);
        self.last_generation = generation;
        let record = &mut self.buckets[i];
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
        let content_type = req
            .content_type
            .clone()
            .filter(|c| !c.is_empty())
            .unwrap_or_else(|| "application/octet-stream".to_string());
        let object = json!({
            "kind": "storage#object",
            "id": format!("{bucket}/{name}/{generation}"),
            "selfLink": format!("https://www.googleapis.com/storage/v1/b/{bucket}/o/{encoded}"),
            "mediaLink": format!("https://storage.googleapis.com/download/storage/v1/b/{bucket}/o/{encoded}?generation={generation}&alt=media"),
            "name": name,
            "bucket": bucket,
            "generation": generation.to_string(),
            "metageneration": "1",
            "contentType": content_type,
            "storageClass": str_of(&record.bucket, "storageClass"),
            "size": req.body.len().to_string(),
            "crc32c": base64::engine::general_purpose::STANDARD.encode(crc32c(&req.body).to_be_bytes()),
            "etag": base64::engine::general_purpose::STANDARD.encode(fnv1a(&req.body).to_be_bytes()),
            "timeCreated": stamp,
            "updated": stamp,
            "timeStorageClassUpdated": stamp,
        });
        let mut object = object;
        // A customer-managed key (the `kmsKeyName` parameter): GCS reports the key
        // version that encrypted the object.
        if let Some(key) = req.param("kmsKeyName").filter(|k| !k.is_empty()) {
            object["kmsKeyName"] = json!(format!("{key}/cryptoKeyVersions/1"));
        }
        record.objects.push(ObjectRecord {
            name,
            generation,
            live: true,
            object: object.clone(),
            data: base64::engine::general_purpose::STANDARD.encode(&req.body),
        });
        Ok(ApiResponse::ok(object))
    }

    fn list_objects(&self, bucket: &str, req: &ApiRequest) -> Result<ApiResponse, ApiError> {
        let record = self.bucket(bucket)?;
        let versions = req.param("versions") == Some("true");
        let prefix = req.param("prefix").unwrap_or("");
        let mut items: Vec<&ObjectRecord> = record
            .objects
            .iter()
            .filter(|o| (versions || o.live) && o.name.starts_with(prefix))
            .collect();
        items.sort_by(|a, b| (&a.name, a.generation).cmp(&(&b.name, b.generation)));
        let mut out = json!({"kind": "storage#objects"});
        set_or_remove(
            &mut out,
            "items",
            Value::Array(items.into_iter().map(|o| o.object.clone()).collect()),
        );
        Ok(ApiResponse::ok(out))
    }

    fn get_object(
        &self,
        bucket: &str,
        name: &str,
        req: &ApiRequest,
    ) -> Result<ApiResponse, ApiError> {
        let record = self.bucket(bucket)?;
        let i = object_index(record, bucket, name, req)?;
        check_generation(record, name, req)?;
        let object = &record.objects[i];
        if req.param("alt") == Some("media") {
            let data = base64::engine::general_purpose::STANDARD
                .decode(&object.data)
                .map_err(|e| ApiError::internal(format!("stored object data is corrupt: {e}")))?;
            return Ok(ApiResponse {
                status: 200,
                body: Body::Bytes {
                    content_type: str_of(&object.object, "contentType").to_string(),
                    data,
                },
                retry_after: None,
            });
        }
        Ok(ApiResponse::ok(object.object.clone()))
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
        check_generation(record, name, req)?;
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

/// `ifGenerationMatch` and `ifGenerationNotMatch` against the live generation of
/// `name` (0 when there is none: `ifGenerationMatch=0` writes only a new object), as
/// GCS answers them: 412 `conditionNotMet`.
fn check_generation(record: &BucketRecord, name: &str, req: &ApiRequest) -> Result<(), ApiError> {
    let live = record
        .objects
        .iter()
        .find(|o| o.name == name && o.live)
        .map_or(0, |o| o.generation);
    for (param, must_equal) in [("ifGenerationMatch", true), ("ifGenerationNotMatch", false)] {
        let Some(v) = req.param(param) else {
            continue;
        };
        let want: i64 = v
            .parse()
            .map_err(|_| ApiError::invalid(format!("Invalid value for {param}: \"{v}\"")))?;
        if (live == want) != must_equal {
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

/// CRC-32C (Castagnoli), the checksum GCS reports for objects.
fn crc32c(data: &[u8]) -> u32 {
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
        let resp = state.handle(&req, &ctx)?;
        if let Some(body) = resp.json_body() {
            let msg = match body["kind"].as_str() {
                Some("storage#bucket") => &tables::BUCKET,
                Some("storage#buckets") => &tables::BUCKETS,
                Some("storage#object") => &tables::OBJECT,
                _ => &tables::OBJECTS,
            };
            assert_eq!(msg.conforms(body), Ok(()), "{body}");
        }
        Ok(resp)
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
        json_of(state.handle(&req, &ctx).expect("upload"))
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
            s.handle(&req, &ctx)
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
}
