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
use serde_json::json;
use terrain_providers::failure::{self, Cloud, Hint};
use terrain_providers::{Ctx, EnvFn, ProviderError, Session};
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

/// The status and code of a failed call, for the answers the protocol expects (a missing
/// key, a condition that did not hold).
fn answer_of(e: &ProviderError) -> (u16, &str) {
    match e {
        ProviderError::Api { status, code, .. } => (*status, code.as_str()),
        _ => (0, ""),
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

    /// Where the client sends its calls: the configured endpoint, else S3's public one
    /// for the region (named in errors when nothing answers).
    fn endpoint(&self) -> Option<String> {
        let s = &self.settings;
        s.endpoint.clone().or_else(|| {
            s.region
                .as_deref()
                .map(|r| format!("https://s3.{r}.amazonaws.com"))
        })
    }

    /// `e`, a failed SDK call, as terrain's error for this state.
    fn call_error<E>(&self, call: &'static str, e: &SdkError<E, HttpResponse>) -> ProviderError
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        terrain_providers::aws::sdk_error_at(call, self.endpoint().as_deref(), e)
    }

    fn remote(&self, error: ProviderError) -> StateError {
        StateError::Remote {
            location: self.location(),
            error,
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
            let e = self.call_error("s3.CreateBucket", &e);
            if answer_of(&e).1 != "BucketAlreadyOwnedByYou" {
                return Err(self.remote(e));
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
            .map_err(|e| self.remote(self.call_error("s3.PutBucketVersioning", &e)))?;
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
            Err(e) => {
                let e = self.call_error("s3.GetBucketVersioning", &e);
                let missing = answer_of(&e).1 == "NoSuchBucket";
                if missing && !self.settings.create_bucket {
                    let b = &self.settings.bucket;
                    return Err(self.remote(e.with_hint(Hint::Do(format!(
                        "create it, keeping versions: `aws s3api create-bucket --bucket {b}` then `aws s3api put-bucket-versioning --bucket {b} --versioning-configuration Status=Enabled`"
                    )))));
                }
                if !missing {
                    return Err(self.remote(e));
                }
                if !create {
                    return Ok(None);
                }
                self.create_bucket(client).await?;
                Ok(Some(true))
            }
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
                let e = self.call_error("s3.GetObject", &e);
                if answer_of(&e).0 == 404 {
                    return Ok(None);
                }
                return Err(self.remote(e));
            }
        };
        let etag = out.e_tag().unwrap_or_default().to_string();
        let bytes = out.body.collect().await.map_err(|e| {
            self.remote(failure::unreachable(
                "s3.GetObject",
                Cloud::Aws,
                self.endpoint().as_deref(),
                &e,
            ))
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
                let e = self.call_error("s3.PutObject", &e);
                let (status, code) = answer_of(&e);
                let refused = matches!(status, 412 | 409)
                    || matches!(code, "PreconditionFailed" | "ConditionalRequestConflict");
                if refused {
                    Ok(None)
                } else {
                    Err(self.remote(e))
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
                let e = self.call_error("s3.DeleteObject", &e);
                if matches!(answer_of(&e).0, 404 | 412) {
                    Ok(())
                } else {
                    Err(self.remote(e))
                }
            }
        }
    }
}
