//! The GCS state backend: the store under the shared protocol of [`super::remote`],
//! over the JSON API through the providers' one GCP client (auth, retries with backoff
//! on 429 and 5xx, Google's error format). The state is object `PREFIX/NAME.json`
//! (`NAME` is `default` or the environment's; its lock `NAME.json.lock`), written with
//! `ifGenerationMatch` on the generation this client last read or wrote (`0` when there
//! was none), in the bucket's default encryption or a customer-managed key
//! (`kms_key_name`); deletes use `ifGenerationMatch`. The bucket must keep versions
//! unless the stack allows otherwise; on `--sandbox` runs it is made, versioned, on
//! first write.

use async_trait::async_trait;
use reqwest::Method;
use serde_json::{json, Value};
use terrain_providers::failure::{self, Cloud};
use terrain_providers::gcp::client::{segment, status_of, Client, Request};
use terrain_providers::gcp::config::{Api, GcpConfig};
use terrain_providers::{Ctx, ProviderError};

use super::remote::{Objects, Remote};
use super::StateError;

/// Where a GCS state lives and how it is written (the `[backend.gcs]` table).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GcsSettings {
    pub bucket: String,
    /// The folder of the state: `PREFIX/NAME.json`.
    pub prefix: String,
    /// The state's name in the folder: `default`, or the environment's.
    pub name: String,
    /// A Cloud KMS key for the state object; the bucket's default encryption otherwise.
    pub kms_key_name: Option<String>,
    /// Accept a bucket that keeps no versions.
    pub allow_unversioned: bool,
    /// Make the bucket, versioned, in this project when it does not exist (the
    /// sandbox's storage starts empty).
    pub create_in_project: Option<String>,
}

/// The bucket of a GCS state, as the remote protocol ([`Remote`]) uses it.
pub struct GcsObjects {
    settings: GcsSettings,
    /// The state object's name (`PREFIX/NAME.json`), for messages.
    state: String,
    client: Client,
    /// Progress of retried calls goes nowhere: the state backend has no reporter.
    ctx: Ctx,
}

/// A state in a GCS bucket.
pub type GcsBackend = Remote<GcsObjects>;

impl GcsBackend {
    /// A client of the state `settings` name, with the Google settings `config` (the
    /// storage endpoint, credentials and retries, as a `[providers.gcp]` table gives
    /// them).
    pub fn new(settings: GcsSettings, config: GcpConfig) -> Result<Self, StateError> {
        let prefix = settings.prefix.trim_end_matches('/');
        let state = if prefix.is_empty() {
            format!("{}.json", settings.name)
        } else {
            format!("{prefix}/{}.json", settings.name)
        };
        let location = format!("gs://{}/{state}", settings.bucket);
        let client = Client::new(config).map_err(|e| StateError::Config {
            location: location.clone(),
            message: e.to_string(),
        })?;
        Ok(Remote::with(
            GcsObjects {
                settings,
                state: state.clone(),
                client,
                ctx: Ctx::new(location, Value::Null),
            },
            state,
        ))
    }
}

impl GcsObjects {
    fn location(&self) -> String {
        self.url(&self.state)
    }

    fn object_path(&self, name: &str) -> String {
        format!(
            "storage/v1/b/{}/o/{}",
            segment(&self.settings.bucket),
            segment(name)
        )
    }

    /// Sends `req`; an API error whose status is in `expected` is `Ok(Err(status))`.
    async fn send(
        &self,
        req: &Request,
        expected: &[u16],
    ) -> Result<Result<Vec<u8>, u16>, StateError> {
        match self.client.send_raw(&self.ctx, req).await {
            Ok(bytes) => Ok(Ok(bytes)),
            Err(e) => match status_of(&e) {
                Some(status) if expected.contains(&status) => Ok(Err(status)),
                _ => Err(self.failed(e)),
            },
        }
    }

    fn failed(&self, e: ProviderError) -> StateError {
        StateError::Remote {
            location: self.location(),
            error: e,
        }
    }

    /// The `generation` of an object resource in `bytes`.
    fn generation(&self, call: &'static str, bytes: &[u8]) -> Result<i64, StateError> {
        serde_json::from_slice::<Value>(bytes)
            .ok()
            .and_then(|v| v["generation"].as_str()?.parse().ok())
            .ok_or_else(|| {
                self.failed(failure::malformed(
                    call,
                    Cloud::Google,
                    200,
                    "the answer has no generation",
                    None,
                ))
            })
    }

    async fn create_bucket(&self, project: &str) -> Result<(), StateError> {
        let req = Request::new(
            "storage.buckets.insert",
            Api::Storage,
            Method::POST,
            "storage/v1/b",
        )
        .query("project", project)
        .body(json!({"name": self.settings.bucket, "versioning": {"enabled": true}}));
        // 409: made already by a concurrent run of the same sandbox.
        self.send(&req, &[409]).await.map(|_| ())
    }
}

#[async_trait]
impl Objects for GcsObjects {
    type Version = i64;

    fn url(&self, name: &str) -> String {
        format!("gs://{}/{name}", self.settings.bucket)
    }

    async fn versioning(&self, create: bool) -> Result<Option<bool>, StateError> {
        let req = Request::get(
            "storage.buckets.get",
            Api::Storage,
            format!("storage/v1/b/{}", segment(&self.settings.bucket)),
        );
        match self.send(&req, &[404]).await? {
            Ok(bytes) => {
                let bucket: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                Ok(Some(bucket["versioning"]["enabled"] == Value::Bool(true)))
            }
            Err(_) => match &self.settings.create_in_project {
                Some(_) if !create => Ok(None),
                Some(project) => {
                    self.create_bucket(project).await?;
                    Ok(Some(true))
                }
                None => Err(self.failed(ProviderError::api(
                    req.call,
                    404,
                    "notFound",
                    format!(
                        "bucket {} does not exist; create it with versioning (`gcloud storage buckets create gs://{} --versioning`)",
                        self.settings.bucket, self.settings.bucket
                    ),
                ))),
            },
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
                "gcloud storage buckets update gs://{} --versioning",
                self.settings.bucket
            ),
            table: "backend.gcs",
        }
    }

    async fn get(&self, name: &str) -> Result<Option<(Vec<u8>, i64)>, StateError> {
        const CALL: &str = "storage.objects.get";
        let path = self.object_path(name);
        let Ok(meta) = self
            .send(&Request::get(CALL, Api::Storage, &path), &[404])
            .await?
        else {
            return Ok(None);
        };
        let generation = self.generation(CALL, &meta)?;
        // That generation exactly: a write landing in between is not mixed in.
        let media = Request::get(CALL, Api::Storage, path)
            .query("alt", "media")
            .query("generation", generation.to_string());
        Ok(self
            .send(&media, &[404])
            .await?
            .ok()
            .map(|bytes| (bytes, generation)))
    }

    async fn put_if(
        &self,
        name: &str,
        body: Vec<u8>,
        expected: Option<&i64>,
    ) -> Result<Option<i64>, StateError> {
        const CALL: &str = "storage.objects.insert";
        // `ifGenerationMatch=0`: only if there is no object.
        let generation = expected.copied().unwrap_or(0);
        let mut req = Request::new(
            CALL,
            Api::Storage,
            Method::POST,
            format!("upload/storage/v1/b/{}/o", segment(&self.settings.bucket)),
        )
        .query("uploadType", "media")
        .query("name", name)
        .query("ifGenerationMatch", generation.to_string())
        .media("application/json", body);
        if let Some(k) = &self.settings.kms_key_name {
            req = req.query("kmsKeyName", k.clone());
        }
        match self.send(&req, &[412]).await? {
            Ok(bytes) => self.generation(CALL, &bytes).map(Some),
            Err(_) => Ok(None),
        }
    }

    async fn delete_if(&self, name: &str, generation: &i64) -> Result<(), StateError> {
        let req = Request::new(
            "storage.objects.delete",
            Api::Storage,
            Method::DELETE,
            self.object_path(name),
        )
        .query("ifGenerationMatch", generation.to_string());
        self.send(&req, &[404, 412]).await.map(|_| ())
    }
}
