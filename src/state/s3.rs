//! The S3 state backend: the store under the shared protocol of [`super::remote`]. The
//! state is object `KEY` (its lock `KEY.lock`), written with server-side encryption
//! (SSE-S3, or SSE-KMS with `kms_key_id`) and `If-Match` on the ETag this client last
//! read or wrote (`If-None-Match: *` when there was none); deletes use `If-Match`. The
//! bucket must keep versions (every save is a version to roll back to) unless the stack
//! allows otherwise; on `--sandbox` runs it is made, versioned, on first write.

use async_trait::async_trait;
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{
    BucketLocationConstraint, BucketVersioningStatus, CreateBucketConfiguration,
    ServerSideEncryption, VersioningConfiguration,
};
use aws_sdk_s3::Client;
use aws_smithy_runtime_api::http::Response as HttpResponse;
use aws_smithy_types::error::display::DisplayErrorContext;
use serde_json::json;
use terrain_providers::{Ctx, EnvFn, Session};
use tokio::sync::OnceCell;

use super::remote::{Objects, Remote};
use super::StateError;

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

/// The bucket of an S3 state, as the remote protocol ([`Remote`]) uses it.
pub struct S3Objects {
    settings: S3Settings,
    /// The environment the AWS credential chain reads (keys, region).
    env: EnvFn,
    client: OnceCell<Client>,
}

/// A state in an S3 bucket.
pub type S3Backend = Remote<S3Objects>;

/// An S3 call's failure: its HTTP status (when one came back) and the SDK's account.
struct CallError {
    status: Option<u16>,
    code: Option<String>,
    message: String,
}

fn call_error<E>(e: &SdkError<E, HttpResponse>) -> CallError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
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
        status: e.raw_response().map(|r| r.status().as_u16()),
        code,
        message,
    }
}

impl S3Backend {
    /// The state `settings` name, with the credentials the process environment gives.
    pub fn new(settings: S3Settings) -> Self {
        Self::in_env(settings, terrain_providers::session::process_env())
    }

    /// The state `settings` name, with the credentials environment `env` gives (the
    /// tests' own, beside others in one process).
    pub fn in_env(settings: S3Settings, env: EnvFn) -> Self {
        let key = settings.key.clone();
        Remote::with(
            S3Objects {
                settings,
                env,
                client: OnceCell::new(),
            },
            key,
        )
    }
}

impl S3Objects {
    fn location(&self) -> String {
        self.url(&self.settings.key)
    }

    fn remote(&self, call: &'static str, e: CallError) -> StateError {
        StateError::Remote {
            location: self.location(),
            call,
            status: e.status,
            message: e.message,
        }
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
                let ctx =
                    Ctx::new(self.location(), config).in_run(Session::new(), self.env.clone());
                terrain_providers::aws::config::s3(&ctx)
                    .await
                    .map_err(|e| StateError::Config {
                        location: self.location(),
                        message: e.to_string(),
                    })
            })
            .await
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
}

#[async_trait]
impl Objects for S3Objects {
    type Version = String;

    fn url(&self, name: &str) -> String {
        format!("s3://{}/{name}", self.settings.bucket)
    }

    async fn versioning(&self, create: bool) -> Result<Option<bool>, StateError> {
        let client = self.client().await?;
        let asked = client
            .get_bucket_versioning()
            .bucket(&self.settings.bucket)
            .send()
            .await;
        match asked {
            Ok(out) => Ok(Some(out.status() == Some(&BucketVersioningStatus::Enabled))),
            Err(e)
                if self.settings.create_bucket
                    && call_error(&e).code.as_deref() == Some("NoSuchBucket") =>
            {
                if !create {
                    return Ok(None);
                }
                self.create_bucket(client).await?;
                Ok(Some(true))
            }
            Err(e) => Err(self.remote("s3.GetBucketVersioning", call_error(&e))),
        }
    }

    fn allows_unversioned(&self) -> bool {
        self.settings.allow_unversioned
    }

    fn unversioned(&self) -> StateError {
        StateError::Unversioned {
            location: self.location(),
            bucket: self.settings.bucket.clone(),
            enable: format!(
                "aws s3api put-bucket-versioning --bucket {} --versioning-configuration Status=Enabled",
                self.settings.bucket
            ),
            table: "backend.s3",
        }
    }

    async fn get(&self, name: &str) -> Result<Option<(Vec<u8>, String)>, StateError> {
        let client = self.client().await?;
        let out = match client
            .get_object()
            .bucket(&self.settings.bucket)
            .key(name)
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

    async fn put_if(
        &self,
        name: &str,
        body: Vec<u8>,
        expected: Option<&String>,
    ) -> Result<Option<String>, StateError> {
        let client = self.client().await?;
        let mut put = client
            .put_object()
            .bucket(&self.settings.bucket)
            .key(name)
            .content_type("application/json")
            .body(ByteStream::from(body));
        put = match &self.settings.kms_key_id {
            Some(k) => put
                .server_side_encryption(ServerSideEncryption::AwsKms)
                .ssekms_key_id(k),
            None => put.server_side_encryption(ServerSideEncryption::Aes256),
        };
        put = match expected {
            None => put.if_none_match("*"),
            Some(etag) => put.if_match(etag),
        };
        match put.send().await {
            Ok(out) => Ok(Some(out.e_tag().unwrap_or_default().to_string())),
            // 412: the condition did not hold; 409: a concurrent conditional write won.
            Err(e) => {
                let e = call_error(&e);
                let refused = matches!(e.status, Some(412 | 409))
                    || matches!(
                        e.code.as_deref(),
                        Some("PreconditionFailed" | "ConditionalRequestConflict")
                    );
                if refused {
                    Ok(None)
                } else {
                    Err(self.remote("s3.PutObject", e))
                }
            }
        }
    }

    async fn delete_if(&self, name: &str, etag: &String) -> Result<(), StateError> {
        let client = self.client().await?;
        match client
            .delete_object()
            .bucket(&self.settings.bucket)
            .key(name)
            .if_match(etag)
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(e) => {
                let e = call_error(&e);
                if matches!(e.status, Some(404 | 412)) {
                    Ok(())
                } else {
                    Err(self.remote("s3.DeleteObject", e))
                }
            }
        }
    }
}
