//! The S3 state backend: the state is one object written with server-side encryption
//! (SSE-S3, or SSE-KMS with `kms_key_id`) and a condition on the version this client
//! last read or wrote (`If-Match` on its ETag, `If-None-Match: *` when there was none),
//! so a writer that lost its lock cannot clobber a newer state. The bucket must keep
//! versions (every save is a version to roll back to) unless the stack allows
//! otherwise (on `--sandbox` runs the bucket is made, versioned, on first use). The
//! lock is an object beside the state, `KEY.lock`, created with `If-None-Match: *` and
//! holding the [`LockInfo`] of its holder.

use std::sync::Mutex;

use async_trait::async_trait;
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{
    BucketLocationConstraint, BucketVersioningStatus, CreateBucketConfiguration,
    ServerSideEncryption, VersioningConfiguration,
};
use aws_sdk_s3::Client;
use aws_smithy_types::error::display::DisplayErrorContext;
use serde_json::json;
use terrain_providers::Ctx;
use tokio::sync::OnceCell;

use super::{Backend, LockInfo, State, StateError, Unchecked};

/// Where an S3 state lives and how it is written (the `[backend.s3]` table).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Settings {
    pub bucket: String,
    /// The state object's key; the lock is `KEY.lock`.
    pub key: String,
    /// The bucket's region; else the AWS default chain's.
    pub region: Option<String>,
    /// An S3-compatible endpoint (implies path-style addressing).
    pub endpoint: Option<String>,
    /// SSE-KMS with this key for the state object; SSE-S3 when unset.
    pub kms_key_id: Option<String>,
    /// Accept a bucket that keeps no versions.
    pub allow_unversioned: bool,
    /// Sign with the sandbox's fixed credentials instead of the default chain.
    pub sandbox: bool,
    /// Make the bucket, keeping versions, when it does not exist (the sandbox's S3
    /// starts empty); a real bucket is the team's to create.
    pub create_bucket: bool,
}

/// What this client knows of the stored state object.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    /// Nothing read or written yet.
    Nothing,
    /// Read or written, and absent then.
    Absent,
    /// Read or written with this ETag.
    Etag(String),
}

/// A state in an S3 bucket.
pub struct S3Backend {
    settings: S3Settings,
    client: OnceCell<Client>,
    /// Checked once per client: a refused bucket is refused before anything is read.
    versioning: OnceCell<()>,
    seen: Mutex<Seen>,
}

/// An S3 call's failure: its HTTP status (when one came back) and the SDK's account.
struct CallError {
    status: Option<u16>,
    code: Option<String>,
    message: String,
}

fn call_error<E, R>(e: &SdkError<E, R>) -> CallError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug + HasStatus,
{
    let service = e.as_service_error();
    let code = service.and_then(|s| s.code()).map(str::to_string);
    // S3's own code and message when it answered; the SDK's account of a failure to
    // reach it otherwise (never the raw response, which may quote the request).
    let message = match (service, &code) {
        (Some(s), Some(code)) => format!("{code}: {}", s.message().unwrap_or("no message")),
        _ => DisplayErrorContext(e).to_string(),
    };
    CallError {
        status: e.raw_response().map(HasStatus::status),
        code,
        message,
    }
}

/// The HTTP status of a raw response.
trait HasStatus {
    fn status(&self) -> u16;
}

impl HasStatus for aws_smithy_runtime_api::http::Response {
    fn status(&self) -> u16 {
        self.status().as_u16()
    }
}

impl S3Backend {
    pub fn new(settings: S3Settings) -> Self {
        Self {
            settings,
            client: OnceCell::new(),
            versioning: OnceCell::new(),
            seen: Mutex::new(Seen::Nothing),
        }
    }

    fn lock_key(&self) -> String {
        format!("{}.lock", self.settings.key)
    }

    fn remote(&self, call: &'static str, e: CallError) -> StateError {
        StateError::Remote {
            location: self.location(),
            call,
            status: e.status,
            message: e.message,
        }
    }

    fn seen(&self) -> Seen {
        self.seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn set_seen(&self, seen: Seen) {
        *self
            .seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = seen;
    }

    /// The client, built on first use from the AWS default chain (or the sandbox's
    /// credentials), the region and the endpoint.
    async fn client(&self) -> Result<&Client, StateError> {
        self.client
            .get_or_try_init(|| async {
                let s = &self.settings;
                let config = json!({
                    "region": s.region,
                    "endpoint": s.endpoint,
                    "sandbox": s.sandbox,
                });
                terrain_providers::aws::config::s3(&Ctx::new(self.location(), config))
                    .await
                    .map_err(|e| StateError::Config {
                        location: self.location(),
                        message: e.to_string(),
                    })
            })
            .await
    }

    /// Refuses a bucket that keeps no versions unless allowed: a bad save would then
    /// overwrite the only copy of the state. With `create` (a write), a missing bucket
    /// is made when the settings allow it; without, it is `Ok(false)`, for a read to find
    /// no state there.
    async fn check_versioning(&self, create: bool) -> Result<bool, StateError> {
        let checked = self
            .versioning
            .get_or_try_init(|| async {
                if self.settings.allow_unversioned {
                    return Ok(());
                }
                let client = self.client().await.map_err(Unchecked::Failed)?;
                let asked = client
                    .get_bucket_versioning()
                    .bucket(&self.settings.bucket)
                    .send()
                    .await;
                let out = match asked {
                    Err(e)
                        if self.settings.create_bucket
                            && call_error(&e).code.as_deref() == Some("NoSuchBucket") =>
                    {
                        if !create {
                            return Err(Unchecked::NoBucket);
                        }
                        return self.create_bucket(client).await.map_err(Unchecked::Failed);
                    }
                    other => other.map_err(|e| {
                        Unchecked::Failed(self.remote("s3.GetBucketVersioning", call_error(&e)))
                    })?,
                };
                if out.status() == Some(&BucketVersioningStatus::Enabled) {
                    Ok(())
                } else {
                    Err(Unchecked::Failed(StateError::Unversioned {
                        location: self.location(),
                        bucket: self.settings.bucket.clone(),
                        enable: format!(
                            "aws s3api put-bucket-versioning --bucket {} --versioning-configuration Status=Enabled",
                            self.settings.bucket
                        ),
                        table: "backend.s3",
                    }))
                }
            })
            .await;
        match checked {
            Ok(()) => Ok(true),
            Err(Unchecked::NoBucket) => Ok(false),
            Err(Unchecked::Failed(e)) => Err(e),
        }
    }

    /// Makes the bucket, keeping versions.
    async fn create_bucket(&self, client: &Client) -> Result<(), StateError> {
        let bucket = &self.settings.bucket;
        let mut create = client.create_bucket().bucket(bucket);
        if let Some(region) = self
            .settings
            .region
            .as_deref()
            .filter(|r| *r != "us-east-1")
        {
            create = create.create_bucket_configuration(
                CreateBucketConfiguration::builder()
                    .location_constraint(BucketLocationConstraint::from(region))
                    .build(),
            );
        }
        // Made already by a concurrent run of the same sandbox: as good as made here.
        if let Err(e) = create.send().await {
            let e = call_error(&e);
            if e.code.as_deref() != Some("BucketAlreadyOwnedByYou") {
                return Err(self.remote("s3.CreateBucket", e));
            }
        }
        client
            .put_bucket_versioning()
            .bucket(bucket)
            .versioning_configuration(
                VersioningConfiguration::builder()
                    .status(BucketVersioningStatus::Enabled)
                    .build(),
            )
            .send()
            .await
            .map_err(|e| self.remote("s3.PutBucketVersioning", call_error(&e)))?;
        Ok(())
    }

    /// The object at `key` and its ETag; `None` when there is none.
    async fn get(&self, key: &str) -> Result<Option<(Vec<u8>, String)>, StateError> {
        let client = self.client().await?;
        let out = match client
            .get_object()
            .bucket(&self.settings.bucket)
            .key(key)
            .send()
            .await
        {
            Ok(out) => out,
            Err(e) if e.as_service_error().is_some_and(|s| s.is_no_such_key()) => return Ok(None),
            Err(e) => {
                let e = call_error(&e);
                if e.status == Some(404) {
                    return Ok(None);
                }
                return Err(self.remote("s3.GetObject", e));
            }
        };
        let etag = out.e_tag().unwrap_or_default().to_string();
        let bytes = out.body.collect().await.map_err(|e| {
            self.remote(
                "s3.GetObject",
                CallError {
                    status: None,
                    code: None,
                    message: format!("reading the body: {e}"),
                },
            )
        })?;
        Ok(Some((bytes.into_bytes().to_vec(), etag)))
    }

    /// Writes `body` at `key` under `condition`; the new ETag, or the failure (a 412
    /// when the condition did not hold).
    async fn put(
        &self,
        key: &str,
        body: Vec<u8>,
        condition: &Seen,
    ) -> Result<Result<String, CallError>, StateError> {
        let client = self.client().await?;
        let mut put = client
            .put_object()
            .bucket(&self.settings.bucket)
            .key(key)
            .content_type("application/json")
            .body(ByteStream::from(body));
        put = match &self.settings.kms_key_id {
            Some(k) => put
                .server_side_encryption(ServerSideEncryption::AwsKms)
                .ssekms_key_id(k),
            None => put.server_side_encryption(ServerSideEncryption::Aes256),
        };
        put = match condition {
            Seen::Nothing => put,
            Seen::Absent => put.if_none_match("*"),
            Seen::Etag(e) => put.if_match(e),
        };
        Ok(match put.send().await {
            Ok(out) => Ok(out.e_tag().unwrap_or_default().to_string()),
            Err(e) => Err(call_error(&e)),
        })
    }

    /// The lock record and its object's ETag, if locked.
    async fn lock_record(&self) -> Result<Option<(LockInfo, String)>, StateError> {
        let Some((bytes, etag)) = self.get(&self.lock_key()).await? else {
            return Ok(None);
        };
        // A record that does not decode still means the state is locked.
        let info = serde_json::from_slice(&bytes).unwrap_or_else(|_| LockInfo {
            id: "unknown".into(),
            who: "unknown".into(),
            pid: 0,
            operation: "unknown".into(),
            created: "unknown".into(),
        });
        Ok(Some((info, etag)))
    }

    /// Deletes the lock object if it is still the one with `etag`.
    async fn delete_lock(&self, etag: &str) -> Result<(), StateError> {
        let client = self.client().await?;
        client
            .delete_object()
            .bucket(&self.settings.bucket)
            .key(self.lock_key())
            .if_match(etag)
            .send()
            .await
            .map_err(|e| self.remote("s3.DeleteObject", call_error(&e)))?;
        Ok(())
    }

    /// Releases the lock if its id is `id`.
    async fn release(&self, id: &str) -> Result<(), StateError> {
        let Some((holder, etag)) = self.lock_record().await? else {
            return Err(StateError::NotLocked {
                location: self.location(),
            });
        };
        if holder.id != id {
            return Err(StateError::LockMismatch {
                location: self.location(),
                given: id.to_string(),
                found: holder.id,
            });
        }
        self.delete_lock(&etag).await
    }
}

#[async_trait]
impl Backend for S3Backend {
    fn location(&self) -> String {
        format!("s3://{}/{}", self.settings.bucket, self.settings.key)
    }

    async fn load(&self) -> Result<Option<State>, StateError> {
        if !self.check_versioning(false).await? {
            return Ok(None);
        }
        match self.get(&self.settings.key).await? {
            None => {
                self.set_seen(Seen::Absent);
                Ok(None)
            }
            Some((bytes, etag)) => {
                let state = super::decode(&bytes, &self.location())?;
                self.set_seen(Seen::Etag(etag));
                Ok(Some(state))
            }
        }
    }

    async fn save(&self, state: &State) -> Result<(), StateError> {
        self.check_versioning(true).await?;
        let mut bytes = serde_json::to_vec_pretty(state).map_err(|source| StateError::Encode {
            location: self.location(),
            source,
        })?;
        bytes.push(b'\n');
        let mut condition = self.seen();
        if condition == Seen::Nothing {
            // A client that never read the state writes over whatever is there now,
            // but still not over a write that lands in between.
            condition = match self.get(&self.settings.key).await? {
                Some((_, etag)) => Seen::Etag(etag),
                None => Seen::Absent,
            };
        }
        match self
            .put(&self.settings.key, bytes.clone(), &condition)
            .await?
        {
            Ok(etag) => {
                self.set_seen(Seen::Etag(etag));
                Ok(())
            }
            Err(e) if e.status == Some(412) || e.code.as_deref() == Some("PreconditionFailed") => {
                // A retried PUT whose first attempt landed (its answer lost) finds its
                // own write: that is success, not a rival.
                if let Some((stored, etag)) = self.get(&self.settings.key).await? {
                    if stored == bytes {
                        self.set_seen(Seen::Etag(etag));
                        return Ok(());
                    }
                }
                Err(StateError::Stale {
                    location: self.location(),
                })
            }
            Err(e) => Err(self.remote("s3.PutObject", e)),
        }
    }

    async fn lock(&self, info: &LockInfo) -> Result<(), StateError> {
        self.check_versioning(true).await?;
        let body = serde_json::to_vec_pretty(info).map_err(|source| StateError::Encode {
            location: self.location(),
            source,
        })?;
        // A lock released between our refused write and our read of it: try again.
        for _ in 0..3 {
            match self
                .put(&self.lock_key(), body.clone(), &Seen::Absent)
                .await?
            {
                Ok(_) => return Ok(()),
                Err(e)
                    if e.status == Some(412)
                        || e.status == Some(409)
                        || e.code.as_deref() == Some("PreconditionFailed") =>
                {
                    if let Some((holder, etag)) = self.lock_record().await? {
                        // Our own lock, written by an attempt whose answer was lost.
                        if holder == *info {
                            return Ok(());
                        }
                        // A killed run's lock: taken over (its writes were conditional,
                        // so nothing it left can be lost).
                        if super::lock::abandoned(&holder) {
                            self.delete_lock(&etag).await?;
                            continue;
                        }
                        return Err(StateError::LockHeld {
                            location: self.location(),
                            holder: Box::new(holder),
                        });
                    }
                }
                Err(e) => return Err(self.remote("s3.PutObject", e)),
            }
        }
        Err(StateError::Remote {
            location: self.location(),
            call: "s3.PutObject",
            status: Some(412),
            message: "the lock object kept changing while taking the lock".into(),
        })
    }

    async fn unlock(&self, id: &str) -> Result<(), StateError> {
        self.release(id).await
    }

    async fn lock_info(&self) -> Result<Option<LockInfo>, StateError> {
        Ok(self.lock_record().await?.map(|(info, _)| info))
    }

    async fn force_unlock(&self, id: &str) -> Result<(), StateError> {
        self.release(id).await
    }
}
