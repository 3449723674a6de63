//! The one place GCP requests are sent (the kinds' and the GCS state backend's): bearer
//! auth, JSON or raw (media) bodies, Google's error format (both the
//! `google.rpc.Status` shape of container/file and the JSON-API shape of storage),
//! retries with exponential backoff and jitter on 429/5xx and "operation in progress"
//! conflicts, honouring Retry-After.
//!
//! Kinds build [`Request`] values with plain functions and hand them here, so request
//! construction is testable without a server.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::Rng;
use reqwest::Method;
use serde_json::Value;

use super::auth::Tokens;
use super::config::{Api, GcpConfig};
use crate::failure::{self, Cloud};
use crate::{Ctx, ProviderError};

/// One API request, built without I/O.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The discovery method id, used in errors (`container.projects.locations.clusters.create`).
    pub call: &'static str,
    pub api: Api,
    pub method: Method,
    /// Path after the API root (`v1/projects/p/locations/l/clusters`).
    pub path: String,
    pub query: Vec<(String, String)>,
    pub body: Option<Value>,
    /// A raw body and its content type, for media uploads (instead of `body`).
    pub media: Option<(&'static str, Vec<u8>)>,
    /// Retries of a transport failure (and waits for an API just enabled), when fewer
    /// than the provider's: a check that can be skipped (the plan's capacity preflight)
    /// does not wait minutes for a network that is not there.
    pub transport_retries: Option<u32>,
    /// A 409 goes back to the caller at once instead of being waited out as another
    /// operation: an IAM policy write with a stale etag must start again from the read.
    pub returns_conflicts: bool,
}

impl Request {
    pub fn new(call: &'static str, api: Api, method: Method, path: impl Into<String>) -> Self {
        Self {
            call,
            api,
            method,
            path: path.into(),
            query: Vec::new(),
            body: None,
            media: None,
            transport_retries: None,
            returns_conflicts: false,
        }
    }

    pub fn get(call: &'static str, api: Api, path: impl Into<String>) -> Self {
        Self::new(call, api, Method::GET, path)
    }

    pub fn query(mut self, key: &str, value: impl Into<String>) -> Self {
        self.query.push((key.to_string(), value.into()));
        self
    }

    pub fn body(mut self, body: Value) -> Self {
        self.body = Some(body);
        self
    }

    /// At most `n` retries when the API cannot be reached.
    pub fn transport_retries(mut self, n: u32) -> Self {
        self.transport_retries = Some(n);
        self
    }

    /// Hands a 409 back at once (see `returns_conflicts`).
    pub fn returns_conflicts(mut self) -> Self {
        self.returns_conflicts = true;
        self
    }

    /// A raw body (a media upload) of `content_type`.
    pub fn media(mut self, content_type: &'static str, bytes: Vec<u8>) -> Self {
        self.media = Some((content_type, bytes));
        self
    }
}

/// An authenticated client for one provider configuration.
#[derive(Debug)]
pub struct Client {
    http: reqwest::Client,
    pub config: GcpConfig,
    tokens: Tokens,
}

/// The run's clients, by provider table.
type Clients = Mutex<HashMap<String, Arc<Client>>>;

/// The client for the provider configuration in `ctx`: one per provider table in a
/// run (kept in its session), so every resource of a provider instance shares one
/// connection pool and one token cache. Settings the table leaves out come from the
/// environment as the run sees it.
///
/// Fails when the configuration is invalid or the HTTP client cannot be built.
pub fn client(ctx: &Ctx) -> Result<Arc<Client>, ProviderError> {
    let key = ctx.config.to_string();
    let cache = ctx.session().slot::<Clients>("gcp.clients");
    let mut clients = cache
        .lock()
        .map_err(|_| ProviderError::Config("gcp client cache poisoned".to_string()))?;
    if let Some(c) = clients.get(&key) {
        return Ok(c.clone());
    }
    let config = GcpConfig::resolve(&ctx.config, &|name| ctx.env(name))?;
    let client = Arc::new(Client::new(config)?);
    clients.insert(key, client.clone());
    Ok(client)
}

/// How many clients a run's session holds (one per provider table it used).
pub fn clients_in(session: &crate::Session) -> usize {
    session
        .slot::<Clients>("gcp.clients")
        .lock()
        .map_or(0, |c| c.len())
}

/// A bucket or object name as one path segment of a URL.
pub fn segment(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The HTTP status of an API error, if `e` is one.
pub fn status_of(e: &ProviderError) -> Option<u16> {
    match e {
        ProviderError::Api { status, .. } => Some(*status),
        _ => None,
    }
}

/// How many times a call waits out another operation on the same object (at up to
/// 32 s each, about half an hour).
const BUSY_WAITS: u32 = 60;

/// Whether the object is busy with another operation: GKE answers 400
/// FAILED_PRECONDITION ("incompatible operation") or 409 while one runs on a cluster.
fn busy(status: u16, code: &str, message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    let says_busy = m.contains("incompatible operation")
        || m.contains("operation in progress")
        || m.contains("please try again");
    match status {
        409 => code == "ABORTED" || says_busy,
        400 => code == "FAILED_PRECONDITION" && says_busy,
        _ => false,
    }
}

/// How many times a call refused because its API is off is retried: an API enabled
/// moments ago takes a while to reach every Google front end (about a minute at the
/// default base delay; the plan has already refused an API that nothing turns on).
const PROPAGATION_WAITS: u32 = 6;

/// The service an error says is off in the project (`ErrorInfo` reason
/// SERVICE_DISABLED), if it says so.
fn disabled_service(body: &str) -> Option<String> {
    let json: Value = serde_json::from_str(body).ok()?;
    json["error"]["details"]
        .as_array()?
        .iter()
        .find(|d| d["reason"] == "SERVICE_DISABLED")
        .and_then(|d| d["metadata"]["service"].as_str())
        .map(str::to_string)
}

/// Whether a failed call may be retried as is.
fn retryable(status: u16, code: &str, message: &str) -> bool {
    matches!(status, 429 | 500 | 502 | 503 | 504) || busy(status, code, message)
}

/// Parses Google's error body into (code, message).
fn parse_error(status: u16, body: &str) -> (String, String) {
    let json: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    let err = &json["error"];
    // An answer that is not Google's error format (a proxy's page) is described, never
    // quoted: it may echo the request.
    let message = err["message"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| failure::unreadable(body));
    let code = err["status"]
        .as_str()
        .or_else(|| err["errors"][0]["reason"].as_str())
        .map(str::to_string)
        .unwrap_or_else(|| {
            reqwest::StatusCode::from_u16(status)
                .ok()
                .and_then(|s| s.canonical_reason())
                .unwrap_or("")
                .to_string()
        });
    (code, message)
}

impl Client {
    /// A client for `config`.
    ///
    /// Fails when the TLS backend cannot be initialised.
    pub fn new(config: GcpConfig) -> Result<Self, ProviderError> {
        let http = reqwest::Client::builder()
            .timeout(config.request_timeout)
            .connect_timeout(Duration::from_secs(20))
            .user_agent(concat!("terrain/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ProviderError::Config(format!("http client: {e}")))?;
        let tokens = Tokens::new(config.credentials.clone());
        Ok(Self {
            http,
            config,
            tokens,
        })
    }

    fn url(&self, req: &Request) -> String {
        format!("{}{}", self.config.root(req.api), req.path)
    }

    /// Sends `req`, retrying transient failures; returns the JSON body (`Null` when empty).
    ///
    /// Fails with the API's error (status, code, message) once retries are exhausted or
    /// the error is not transient.
    pub async fn send(&self, ctx: &Ctx, req: &Request) -> Result<Value, ProviderError> {
        let bytes = self.send_raw(ctx, req).await?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(Value::Null);
        }
        serde_json::from_slice(&bytes).map_err(|e| {
            failure::malformed(
                req.call,
                Cloud::Google,
                200,
                &format!("not JSON ({e})"),
                None,
            )
        })
    }

    /// Like [`send`](Self::send), but returns the body as it came (a media download).
    pub async fn send_raw(&self, ctx: &Ctx, req: &Request) -> Result<Vec<u8>, ProviderError> {
        let mut attempt = 0u32;
        let mut busy_waits = 0u32;
        let mut propagation_waits = 0u32;
        loop {
            let (err, retry_after) = match self.once(req).await {
                Ok(v) => return Ok(v),
                Err(Failure::Api {
                    status,
                    code,
                    message,
                    retry_after: _,
                    disabled: Some(service),
                }) => {
                    // A check that can be skipped does not wait for an enablement either.
                    let most = req
                        .transport_retries
                        .map_or(PROPAGATION_WAITS, |n| n.min(PROPAGATION_WAITS));
                    if propagation_waits < most {
                        propagation_waits += 1;
                        let delay = self.backoff(propagation_waits);
                        ctx.progress(&format!(
                            "{} answered that {service} is off; waiting {:.1}s for an enablement to propagate",
                            req.call,
                            delay.as_secs_f64()
                        ));
                        tokio::time::sleep(delay).await;
                        continue;
                    }
                    let project = self.config.project.as_deref().unwrap_or("PROJECT");
                    return Err(failure::answered(
                        req.call,
                        Cloud::Google,
                        status,
                        code,
                        &format!("{message} Turn it on from the stack with [gcp_project_service.NAME] service = \"{service}\" (the resources calling it wait for it), or run `gcloud services enable {service} --project {project}`."),
                        None,
                        Some(propagation_waits + 1),
                    ));
                }
                Err(Failure::Api {
                    status,
                    code,
                    message,
                    retry_after,
                    disabled: None,
                }) => {
                    // Another operation on the same cluster is a wait, not a failure: it
                    // may run for many minutes, so it has its own, larger budget.
                    let conflict = req.returns_conflicts && status == 409;
                    if !conflict && busy(status, &code, &message) && busy_waits < BUSY_WAITS {
                        busy_waits += 1;
                        let delay = retry_after.unwrap_or_else(|| self.backoff(busy_waits.min(6)));
                        ctx.progress(&format!(
                            "waiting for another operation to finish ({}); retrying in {:.1}s",
                            req.call,
                            delay.as_secs_f64()
                        ));
                        tokio::time::sleep(delay).await;
                        continue;
                    }
                    if conflict
                        || !retryable(status, &code, &message)
                        || attempt >= self.config.max_retries
                    {
                        return Err(failure::answered(
                            req.call,
                            Cloud::Google,
                            status,
                            code,
                            &message,
                            None,
                            Some(attempt + 1),
                        ));
                    }
                    (format!("{status} {code}"), retry_after)
                }
                Err(Failure::Transport(e)) => {
                    let most = req
                        .transport_retries
                        .map_or(self.config.max_retries, |n| n.min(self.config.max_retries));
                    let root = self.config.root(req.api);
                    let failed = failure::unreachable(req.call, Cloud::Google, Some(root), &e);
                    if attempt >= most {
                        return Err(failed);
                    }
                    let said = match &failed {
                        ProviderError::Api { message, .. } => message.clone(),
                        other => other.to_string(),
                    };
                    (said, None)
                }
                Err(Failure::Fatal(e)) => return Err(e),
            };
            attempt += 1;
            let delay = retry_after.unwrap_or_else(|| self.backoff(attempt));
            ctx.progress(&format!(
                "{} answered {err}; retrying in {:.1}s (attempt {attempt} of {})",
                req.call,
                delay.as_secs_f64(),
                self.config.max_retries
            ));
            tokio::time::sleep(delay).await;
        }
    }

    /// Like [`send`](Self::send) for a read: a 404 is `Ok(None)`.
    pub async fn get_opt(&self, ctx: &Ctx, req: &Request) -> Result<Option<Value>, ProviderError> {
        match self.send(ctx, req).await {
            Ok(v) => Ok(Some(v)),
            Err(e) if status_of(&e) == Some(404) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Exponential backoff with jitter: base·2^(n-1), capped at 32 s, then a random
    /// point in its upper half so that many clients do not retry in step.
    fn backoff(&self, attempt: u32) -> Duration {
        let exp = self
            .config
            .retry_base_delay
            .saturating_mul(1u32 << attempt.saturating_sub(1).min(10));
        let capped = exp.min(Duration::from_secs(32));
        let factor: f64 = rand::rng().random_range(0.5..=1.0);
        capped.mul_f64(factor)
    }

    async fn once(&self, req: &Request) -> Result<Vec<u8>, Failure> {
        let token = self.tokens.token().await.map_err(Failure::Fatal)?;
        let mut builder = self
            .http
            .request(req.method.clone(), self.url(req))
            .bearer_auth(token)
            .query(&req.query);
        if let Some(body) = &req.body {
            builder = builder.json(body);
        }
        if let Some((content_type, bytes)) = &req.media {
            builder = builder
                .header(reqwest::header::CONTENT_TYPE, *content_type)
                .body(bytes.clone());
        }
        let response = builder.send().await.map_err(Failure::Transport)?;
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let bytes = response.bytes().await.map_err(Failure::Transport)?;
        if (200..300).contains(&status) {
            return Ok(bytes.to_vec());
        }
        let body = String::from_utf8_lossy(&bytes);
        let (code, message) = parse_error(status, &body);
        Err(Failure::Api {
            status,
            code,
            message,
            retry_after,
            disabled: disabled_service(&body),
        })
    }
}

enum Failure {
    Api {
        status: u16,
        code: String,
        message: String,
        retry_after: Option<Duration>,
        /// The service the project has off, when that is why the call failed.
        disabled: Option<String>,
    },
    Transport(reqwest::Error),
    Fatal(ProviderError),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_google_error_shapes() {
        let rpc = r#"{"error": {"code": 404, "message": "Not found: projects/p/locations/l/clusters/c.", "status": "NOT_FOUND"}}"#;
        assert_eq!(
            parse_error(404, rpc),
            (
                "NOT_FOUND".to_string(),
                "Not found: projects/p/locations/l/clusters/c.".to_string()
            )
        );
        let storage = r#"{"error": {"code": 409, "message": "The bucket you tried to delete is not empty.", "errors": [{"domain": "global", "reason": "conflict", "message": "x"}]}}"#;
        assert_eq!(parse_error(409, storage).0, "conflict");
        assert_eq!(
            parse_error(502, "<html>bad gateway</html>"),
            (
                "Bad Gateway".to_string(),
                "an error answer not in the API's error format (an HTML page, 24 bytes)"
                    .to_string()
            )
        );
    }

    #[test]
    fn an_api_that_is_off_is_read_from_the_error_info() {
        let off = r#"{"error": {"code": 403, "message": "Kubernetes Engine API has not been used in project 1 before or it is disabled.", "status": "PERMISSION_DENIED",
            "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "SERVICE_DISABLED", "domain": "googleapis.com",
                "metadata": {"service": "container.googleapis.com", "consumer": "projects/1"}}]}}"#;
        assert_eq!(
            disabled_service(off).as_deref(),
            Some("container.googleapis.com")
        );
        // Any other 403 is not a disabled API, whatever its message says.
        let denied = r#"{"error": {"code": 403, "message": "has not been used in project", "status": "PERMISSION_DENIED",
            "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "IAM_PERMISSION_DENIED"}]}}"#;
        assert_eq!(disabled_service(denied), None);
        assert_eq!(disabled_service("<html>403</html>"), None);
    }

    #[test]
    fn retries_only_transient_failures() {
        for (status, code, message, want) in [
            (429, "RESOURCE_EXHAUSTED", "", true),
            (503, "UNAVAILABLE", "", true),
            (500, "INTERNAL", "", true),
            (409, "ABORTED", "", true),
            (
                409,
                "ALREADY_EXISTS",
                "Already exists: projects/p/locations/l/clusters/c.",
                false,
            ),
            (
                400,
                "FAILED_PRECONDITION",
                "Cluster is running incompatible operation operation-1.",
                true,
            ),
            (
                400,
                "FAILED_PRECONDITION",
                "Autopilot clusters do not support node pools",
                false,
            ),
            (400, "INVALID_ARGUMENT", "", false),
            (404, "NOT_FOUND", "", false),
        ] {
            assert_eq!(
                retryable(status, code, message),
                want,
                "{status} {code} {message}"
            );
        }
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        let mut config = GcpConfig::resolve(&serde_json::json!({}), &|_| None).expect("config");
        config.retry_base_delay = Duration::from_secs(1);
        let c = Client::new(config).expect("client");
        for attempt in 1..20 {
            let d = c.backoff(attempt);
            let full =
                Duration::from_secs(1u64 << (attempt - 1).min(10)).min(Duration::from_secs(32));
            assert!(d >= full / 2 && d <= full, "attempt {attempt}: {d:?}");
        }
    }
}
