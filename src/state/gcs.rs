//! The GCS state backend: the store under the shared protocol of [`super::remote`],
//! over the JSON API. The state is object `PREFIX/NAME.json` (`NAME` is `default` or
//! the environment's; its lock `NAME.json.lock`), written with `ifGenerationMatch` on
//! the generation this client last read or wrote (`0` when there was none), in the
//! bucket's default encryption or a customer-managed key (`kms_key_name`); deletes use
//! `ifGenerationMatch`. The bucket must keep versions unless the stack allows
//! otherwise; on `--sandbox` runs it is made, versioned, on first write. Calls that
//! fail with 429 or 5xx are retried with backoff.

use std::time::Duration;

use async_trait::async_trait;
use serde_json::{json, Value};
use terrain_providers::gcp::auth::Tokens;
use terrain_providers::gcp::config::CredentialSource;

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
    /// The JSON API's root (`https://storage.googleapis.com/` unless overridden).
    pub endpoint: Option<String>,
    /// Make the bucket, versioned, in this project when it does not exist (the
    /// sandbox's storage starts empty).
    pub create_in_project: Option<String>,
}

/// Attempts per call, the first included, when GCS answers 429 or 5xx.
const ATTEMPTS: u32 = 5;

/// The bucket of a GCS state, as the remote protocol ([`Remote`]) uses it.
pub struct GcsObjects {
    settings: GcsSettings,
    /// The state object's name (`PREFIX/NAME.json`), for messages.
    state: String,
    http: reqwest::Client,
    tokens: Tokens,
}

/// A state in a GCS bucket.
pub type GcsBackend = Remote<GcsObjects>;

/// One answer of the JSON API.
struct Answer {
    status: u16,
    body: Vec<u8>,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    /// The error message GCS gave (`error.message`), else the status alone.
    fn message(&self) -> String {
        self.json()["error"]["message"]
            .as_str()
            .map_or_else(|| format!("HTTP {}", self.status), str::to_string)
    }

    fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

impl GcsBackend {
    /// A client of the state `settings` name, authenticating with `credentials`.
    pub fn new(settings: GcsSettings, credentials: CredentialSource) -> Self {
        let prefix = settings.prefix.trim_end_matches('/');
        let state = if prefix.is_empty() {
            format!("{}.json", settings.name)
        } else {
            format!("{prefix}/{}.json", settings.name)
        };
        Remote::with(
            GcsObjects {
                settings,
                state: state.clone(),
                http: reqwest::Client::new(),
                tokens: Tokens::new(credentials),
            },
            state,
        )
    }
}

impl GcsObjects {
    fn location(&self) -> String {
        self.url(&self.state)
    }

    fn root(&self) -> String {
        let root = self
            .settings
            .endpoint
            .clone()
            .unwrap_or_else(|| "https://storage.googleapis.com/".to_string());
        if root.ends_with('/') {
            root
        } else {
            format!("{root}/")
        }
    }

    fn object_url(&self, name: &str) -> String {
        format!(
            "{}storage/v1/b/{}/o/{}",
            self.root(),
            self.settings.bucket,
            encode(name)
        )
    }

    fn remote(&self, call: &'static str, status: Option<u16>, message: String) -> StateError {
        StateError::Remote {
            location: self.location(),
            call,
            status,
            message,
        }
    }

    /// Sends the request `build` makes, retrying 429, 5xx and lost connections with
    /// backoff; `call` names it in errors.
    async fn send(
        &self,
        call: &'static str,
        build: impl Fn(&reqwest::Client) -> reqwest::RequestBuilder,
    ) -> Result<Answer, StateError> {
        let token = self.tokens.token().await.map_err(|e| StateError::Config {
            location: self.location(),
            message: e.to_string(),
        })?;
        let mut delay = Duration::from_millis(100);
        let mut attempt = 1;
        loop {
            let failed = match build(&self.http).bearer_auth(&token).send().await {
                Ok(response) => {
                    let status = response.status().as_u16();
                    let body = response
                        .bytes()
                        .await
                        .map_err(|e| {
                            self.remote(call, Some(status), format!("reading the answer: {e}"))
                        })?
                        .to_vec();
                    let answer = Answer { status, body };
                    if !(status == 429 || status >= 500) {
                        return Ok(answer);
                    }
                    self.remote(call, Some(status), answer.message())
                }
                Err(e) => self.remote(call, None, e.to_string()),
            };
            if attempt >= ATTEMPTS {
                return Err(failed);
            }
            attempt += 1;
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(5));
        }
    }

    async fn create_bucket(&self, project: &str) -> Result<(), StateError> {
        let url = format!("{}storage/v1/b", self.root());
        let body = json!({"name": self.settings.bucket, "versioning": {"enabled": true}});
        let answer = self
            .send("storage.buckets.insert", |c| {
                c.post(&url).query(&[("project", project)]).json(&body)
            })
            .await?;
        if answer.ok() || answer.status == 409 {
            Ok(())
        } else {
            Err(self.remote(
                "storage.buckets.insert",
                Some(answer.status),
                answer.message(),
            ))
        }
    }
}

#[async_trait]
impl Objects for GcsObjects {
    type Version = i64;

    fn url(&self, name: &str) -> String {
        format!("gs://{}/{name}", self.settings.bucket)
    }

    async fn versioning(&self, create: bool) -> Result<Option<bool>, StateError> {
        let url = format!("{}storage/v1/b/{}", self.root(), self.settings.bucket);
        let answer = self.send("storage.buckets.get", |c| c.get(&url)).await?;
        if answer.status == 404 {
            if let Some(project) = &self.settings.create_in_project {
                if !create {
                    return Ok(None);
                }
                self.create_bucket(project).await?;
                return Ok(Some(true));
            }
        }
        if !answer.ok() {
            return Err(self.remote("storage.buckets.get", Some(answer.status), answer.message()));
        }
        Ok(Some(
            answer.json()["versioning"]["enabled"] == Value::Bool(true),
        ))
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
        let url = self.object_url(name);
        let meta = self.send("storage.objects.get", |c| c.get(&url)).await?;
        if meta.status == 404 {
            return Ok(None);
        }
        if !meta.ok() {
            return Err(self.remote("storage.objects.get", Some(meta.status), meta.message()));
        }
        let generation = meta.json()["generation"]
            .as_str()
            .and_then(|g| g.parse::<i64>().ok())
            .ok_or_else(|| {
                self.remote(
                    "storage.objects.get",
                    Some(meta.status),
                    "the object has no generation".into(),
                )
            })?;
        // That generation exactly: a write landing in between is not mixed in.
        let g = generation.to_string();
        let media = self
            .send("storage.objects.get", |c| {
                c.get(&url)
                    .query(&[("alt", "media"), ("generation", g.as_str())])
            })
            .await?;
        match media.status {
            404 => Ok(None),
            _ if media.ok() => Ok(Some((media.body, generation))),
            s => Err(self.remote("storage.objects.get", Some(s), media.message())),
        }
    }

    async fn put_if(
        &self,
        name: &str,
        body: Vec<u8>,
        expected: Option<&i64>,
    ) -> Result<Option<i64>, StateError> {
        // `ifGenerationMatch=0`: only if there is no object.
        let generation = expected.copied().unwrap_or(0);
        let url = format!(
            "{}upload/storage/v1/b/{}/o",
            self.root(),
            self.settings.bucket
        );
        let g = generation.to_string();
        let answer = self
            .send("storage.objects.insert", |c| {
                let mut query = vec![
                    ("uploadType", "media"),
                    ("name", name),
                    ("ifGenerationMatch", g.as_str()),
                ];
                if let Some(k) = &self.settings.kms_key_name {
                    query.push(("kmsKeyName", k.as_str()));
                }
                c.post(&url)
                    .query(&query)
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .body(body.clone())
            })
            .await?;
        match answer.status {
            412 => Ok(None),
            _ if answer.ok() => answer.json()["generation"]
                .as_str()
                .and_then(|g| g.parse().ok())
                .map(Some)
                .ok_or_else(|| {
                    self.remote(
                        "storage.objects.insert",
                        Some(answer.status),
                        "the answer has no generation".into(),
                    )
                }),
            s => Err(self.remote("storage.objects.insert", Some(s), answer.message())),
        }
    }

    async fn delete_if(&self, name: &str, generation: &i64) -> Result<(), StateError> {
        let url = self.object_url(name);
        let g = generation.to_string();
        let answer = self
            .send("storage.objects.delete", |c| {
                c.delete(&url).query(&[("ifGenerationMatch", g.as_str())])
            })
            .await?;
        if answer.ok() || answer.status == 404 || answer.status == 412 {
            Ok(())
        } else {
            Err(self.remote(
                "storage.objects.delete",
                Some(answer.status),
                answer.message(),
            ))
        }
    }
}

/// `name` as one path segment of a URL.
fn encode(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
