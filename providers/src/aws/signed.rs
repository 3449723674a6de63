//! Hand-signed HTTP calls to the AWS APIs terrain builds no SDK crate for: EC2 (query
//! protocol, made and read by `ec2`) for the VPC network kinds and the capacity
//! preflight, Service Quotas (JSON 1.1) for the capacity preflight (`capacity`),
//! SageMaker (JSON 1.1) for the ACK kinds' cross-checks (`ack`), IAM (query protocol)
//! for `iam_role`, KMS (JSON 1.1) for `kms_key` and STS (query protocol) for
//! `aws_account`. Their SDK crates take minutes to build for a handful of calls;
//! `token.rs` presigns for STS the same way.
//!
//! This module owns what those calls share: the credentials (the chain the SDK clients
//! use, `config::sdk_config`, fetched again as they near expiry), one HTTP client with
//! the table's timeouts (kept for the run by `Signed::for_run`), SigV4 signing,
//! retries with backoff, reading JSON 1.1 and query-protocol errors, making a JSON 1.1
//! or a query-protocol call and reading its XML answer ([`Xml`]), and where each service
//! is reached. A service's endpoint is `[providers.aws] endpoints.<service>` (else
//! `endpoint`), else the environment's `AWS_ENDPOINT_URL_<SERVICE>`, else the global
//! endpoint the SDK chain found (`AWS_ENDPOINT_URL`, the profile's `endpoint_url`), else
//! the public one. IAM is global: one public endpoint per partition
//! (`iam.amazonaws.com`), signed for the partition's home region (us-east-1) whatever
//! the table's region.
//!
//! Throttling (429 or a throttling code), 5xx answers and broken connections are retried
//! with exponential backoff from 200 ms, as the SDK clients are configured, up to the
//! table's `max_attempts` capped by the caller. `retry_mode = "adaptive"` adds no
//! client-side rate limiter here: these are a few calls per apply, not a stream.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use aws_credential_types::Credentials;
use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
use aws_sigv4::sign::v4::SigningParams;
use aws_smithy_runtime_api::client::identity::Identity;
use serde_json::Value;

use super::config;
use super::token::encode;
use super::xml::Xml;
use crate::failure::{self, Cloud, Hint};
use crate::{Ctx, ProviderError};

/// An AWS service called by hand-signed HTTP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Service {
    /// The SigV4 signing name, which is also the service's key in `[providers.aws]
    /// endpoints` and the prefix of its call names (`sagemaker:DescribePipeline`).
    pub name: &'static str,
    /// The public host's labels before `.<region>.amazonaws.com`.
    pub host: &'static str,
    /// The environment variable overriding the endpoint, as the AWS SDKs name it.
    pub variable: &'static str,
    /// The `x-amz-target` prefix of its JSON 1.1 operations; empty for EC2's query
    /// protocol.
    pub target: &'static str,
}

/// Amazon EC2 (query protocol, XML answers).
pub const EC2: Service = Service {
    name: "ec2",
    host: "ec2",
    variable: "AWS_ENDPOINT_URL_EC2",
    target: "",
};

/// Service Quotas (JSON 1.1).
pub const SERVICE_QUOTAS: Service = Service {
    name: "servicequotas",
    host: "servicequotas",
    variable: "AWS_ENDPOINT_URL_SERVICE_QUOTAS",
    target: "ServiceQuotasV20190624",
};

/// Amazon SageMaker (JSON 1.1; botocore's `endpointPrefix` is `api.sagemaker`, its
/// signing name `sagemaker`).
pub const SAGEMAKER: Service = Service {
    name: "sagemaker",
    host: "api.sagemaker",
    variable: "AWS_ENDPOINT_URL_SAGEMAKER",
    target: "SageMaker",
};

/// AWS Identity and Access Management (query protocol, XML answers; global).
pub const IAM: Service = Service {
    name: "iam",
    host: "iam",
    variable: "AWS_ENDPOINT_URL_IAM",
    target: "",
};

/// AWS Key Management Service (JSON 1.1).
pub const KMS: Service = Service {
    name: "kms",
    host: "kms",
    variable: "AWS_ENDPOINT_URL_KMS",
    target: "TrentService",
};

/// AWS Security Token Service (query protocol, XML answers; regional endpoints).
pub const STS: Service = Service {
    name: "sts",
    host: "sts",
    variable: "AWS_ENDPOINT_URL_STS",
    target: "",
};

/// Every service this module reaches; their endpoints are resolved together.
const SERVICES: [Service; 6] = [EC2, SERVICE_QUOTAS, SAGEMAKER, IAM, KMS, STS];

/// The services with one endpoint per partition instead of one per region.
const GLOBAL: &[&str] = &[IAM.name];

impl Service {
    /// The region a request to this service from `region` is signed for: the
    /// partition's home region for a global service (IAM signs for us-east-1 in the
    /// `aws` partition), else `region` itself.
    pub fn signing_region<'a>(&self, region: &'a str) -> &'a str {
        if !GLOBAL.contains(&self.name) {
            return region;
        }
        if region.starts_with("cn-") {
            "cn-north-1"
        } else if region.starts_with("us-gov-") {
            "us-gov-west-1"
        } else {
            "us-east-1"
        }
    }

    /// The public endpoint of this service for `region`.
    pub fn public_url(&self, region: &str) -> String {
        if !GLOBAL.contains(&self.name) {
            return public_url(self.host, region);
        }
        // IAM's global endpoints: iam.amazonaws.com, iam.us-gov.amazonaws.com, and the
        // China partition's, which is named after its home region.
        if region.starts_with("cn-") {
            public_url(self.host, "cn-north-1")
        } else if region.starts_with("us-gov-") {
            format!("https://{}.us-gov.amazonaws.com/", self.host)
        } else {
            format!("https://{}.amazonaws.com/", self.host)
        }
    }
}

/// Signed calls for one provider table: its credentials, timeouts, attempts and
/// endpoints.
pub struct Signed {
    http: reqwest::Client,
    /// Where credentials come from, and the ones last fetched: fetched again only when
    /// they expire within [`REFRESH_BEFORE`] (keys from the environment never do).
    provider: SharedCredentialsProvider,
    credentials: Mutex<Credentials>,
    attempts: u32,
    /// The region the SDK chain resolved for the table.
    region: String,
    /// Endpoint overrides (table, then environment, then global) by service name;
    /// absent: the public endpoint.
    endpoints: BTreeMap<&'static str, String>,
}

/// Why one attempt failed.
enum Failure {
    /// No answer: connection refused, DNS, timeout, reset.
    Transport(reqwest::Error),
    /// The request could not be signed (no credentials, a bad endpoint URL).
    Local(String),
    /// An answer that is an error.
    Answer {
        status: u16,
        code: String,
        message: String,
        request_id: Option<String>,
    },
}

/// How long before their expiry temporary credentials are fetched again.
const REFRESH_BEFORE: Duration = Duration::from_secs(5 * 60);

/// The run's signed clients, by table, environment, purpose and attempts.
type Clients = Mutex<BTreeMap<String, Arc<Signed>>>;

/// AWS error codes that mean "slow down", worth retrying.
const THROTTLED: &[&str] = &[
    "RequestLimitExceeded",
    "Throttling",
    "ThrottlingException",
    "TooManyRequestsException",
    "RequestThrottled",
];

impl Signed {
    /// The client for `ctx`'s provider table; `purpose` (`read EC2 capacity`) says in
    /// errors what the credentials were wanted for. Each call is tried at most
    /// `max_attempts` of the table, and at most `most_attempts` (at least once).
    ///
    /// Fails when the table is invalid or has no region, or no credentials are found.
    pub async fn new(
        ctx: &Ctx,
        purpose: &str,
        most_attempts: u32,
    ) -> Result<Signed, ProviderError> {
        let cfg = config::of(ctx)?;
        let sdk = config::sdk_config(ctx.session(), ctx.env_fn(), &cfg).await?;
        let provider = sdk.credentials_provider().ok_or_else(|| {
            ProviderError::Config(format!(
                "no AWS credentials provider to {purpose} with: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE; or run with --sandbox to try the stack without an account"
            ))
        })?;
        let credentials = provider.provide_credentials().await.map_err(|e| {
            ProviderError::Config(format!(
                "no AWS credentials to {purpose} with: {}; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE (run `aws sso login` for SSO profiles); or run with --sandbox to try the stack without an account",
                failure::chain(&e)
            ))
        })?;
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(cfg.connect_timeout_secs))
            .timeout(Duration::from_secs(cfg.attempt_timeout_secs))
            .build()
            .map_err(|e| {
                ProviderError::Config(format!("aws: the HTTP client to {purpose} with: {e}"))
            })?;
        let global = sdk.endpoint_url().map(str::to_string);
        let endpoints = SERVICES
            .iter()
            .filter_map(|service| {
                let url = cfg
                    .endpoint_for(service.name)
                    .map(str::to_string)
                    .or_else(|| ctx.env(service.variable).filter(|v| !v.is_empty()))
                    .or_else(|| global.clone())?;
                Some((service.name, url))
            })
            .collect();
        Ok(Signed {
            http,
            provider,
            credentials: Mutex::new(credentials),
            attempts: cfg.max_attempts.clamp(1, most_attempts.max(1)),
            // `sdk_config` fails without a region, so this is never empty in practice.
            region: sdk.region().map(|r| r.to_string()).unwrap_or_default(),
            endpoints,
        })
    }

    /// The run's client for `ctx`'s provider table (made by [`Signed::new`] on first
    /// use): calls repeated within a run, as the cross-checks polling a controller make
    /// them, share one HTTP client and its connections, and fetch credentials once
    /// until they near expiry.
    pub async fn for_run(
        ctx: &Ctx,
        purpose: &str,
        most_attempts: u32,
    ) -> Result<Arc<Signed>, ProviderError> {
        let cfg = config::of(ctx)?;
        let key = format!(
            "{purpose} {most_attempts} {}",
            config::run_key(ctx.env_fn(), &cfg)
        );
        let clients = ctx.session().slot::<Clients>("aws.signed_clients");
        if let Some(found) = clients
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key)
        {
            return Ok(found.clone());
        }
        let made = Arc::new(Signed::new(ctx, purpose, most_attempts).await?);
        clients
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(key)
            .or_insert_with(|| made.clone());
        Ok(made)
    }

    /// The identity to sign with: the credentials last fetched, or fresh ones when
    /// those expire within [`REFRESH_BEFORE`].
    async fn identity(&self) -> Result<Identity, String> {
        let held = self
            .credentials
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let fresh = held
            .expiry()
            .is_none_or(|at| at > SystemTime::now() + REFRESH_BEFORE);
        if fresh {
            return Ok(Identity::from(held));
        }
        let renewed = self
            .provider
            .provide_credentials()
            .await
            .map_err(|e| format!("renewing AWS credentials: {}", failure::chain(&e)))?;
        *self
            .credentials
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = renewed.clone();
        Ok(Identity::from(renewed))
    }

    /// The region the table's SDK chain resolved: where the SDK clients call.
    pub fn region(&self) -> &str {
        &self.region
    }

    /// The URL of `service` in `region`: the override, else the public endpoint.
    pub fn url(&self, service: &Service, region: &str) -> String {
        match self.endpoints.get(service.name) {
            Some(base) => format!("{}/", base.trim_end_matches('/')),
            None => service.public_url(region),
        }
    }

    /// One JSON 1.1 call: `operation` of `service` (`SageMaker.DescribePipeline`) in
    /// `region` with `body`; the answer's document.
    ///
    /// Fails with `ProviderError::Api` naming the call (`sagemaker:DescribePipeline`),
    /// with the answer's status, code (`__type` without its namespace) and message; with
    /// status 0 when nothing answered; with status 200 when the answer is not JSON.
    pub async fn json11(
        &self,
        service: &Service,
        region: &str,
        operation: &str,
        body: &Value,
    ) -> Result<Value, ProviderError> {
        let call = format!("{}:{operation}", service.name);
        let target = format!("{}.{operation}", service.target);
        let text = self
            .send(
                &call,
                service,
                region,
                &[
                    ("content-type", "application/x-amz-json-1.1"),
                    ("x-amz-target", target.as_str()),
                ],
                body.to_string().as_bytes(),
                json_error,
            )
            .await?;
        // An operation without output may answer with an empty body.
        if text.trim().is_empty() {
            return Ok(Value::Object(serde_json::Map::new()));
        }
        serde_json::from_str(&text).map_err(|e| {
            failure::malformed(call, Cloud::Aws, 200, &format!("not JSON ({e})"), None)
        })
    }

    /// One query-protocol call (IAM, STS, EC2): `action` of `service` at API `version`
    /// in `region` with `params`, form-encoded; the answer's document, checked to be
    /// `<{action}Response>`.
    ///
    /// Fails with `ProviderError::Api` naming the call (`iam:CreateRole`), with the
    /// answer's status, code and message (`<ErrorResponse><Error><Code>`, or EC2's
    /// `<Response><Errors><Error><Code>`); with status 0 when nothing answered; with
    /// status 200 when the answer is not that XML document.
    pub async fn query(
        &self,
        service: &Service,
        region: &str,
        action: &str,
        version: &str,
        params: &[(String, String)],
    ) -> Result<Xml, ProviderError> {
        let call = format!("{}:{action}", service.name);
        let mut body = format!("Action={}&Version={}", encode(action), encode(version));
        for (name, value) in params {
            body.push('&');
            body.push_str(&encode(name));
            body.push('=');
            body.push_str(&encode(value));
        }
        let text = self
            .send(
                &call,
                service,
                region,
                &[(
                    "content-type",
                    "application/x-www-form-urlencoded; charset=utf-8",
                )],
                body.as_bytes(),
                query_error,
            )
            .await?;
        let expected = format!("{action}Response");
        match Xml::parse(&text) {
            Ok(root) if root.name == expected => Ok(root),
            Ok(root) => Err(failure::malformed(
                call,
                Cloud::Aws,
                200,
                &format!("expected the {expected} document, got <{}>", root.name),
                None,
            )),
            Err(e) => Err(failure::malformed(
                call,
                Cloud::Aws,
                200,
                &format!("not XML ({e})"),
                None,
            )),
        }
    }

    /// Sends a signed POST of `body` for `call`, retrying throttling, 5xx answers and
    /// lost connections; the answer's text on success. `read_error` reads an error
    /// answer's code and message as the service's protocol writes them.
    pub(crate) async fn send(
        &self,
        call: &str,
        service: &Service,
        region: &str,
        headers: &[(&str, &str)],
        body: &[u8],
        read_error: fn(&str) -> (String, String),
    ) -> Result<String, ProviderError> {
        let url = self.url(service, region);
        let mut attempt = 1;
        loop {
            let failure = match self
                .attempt(service, region, &url, headers, body, read_error)
                .await
            {
                Ok(text) => return Ok(text),
                Err(failure) => failure,
            };
            let retry = match &failure {
                Failure::Transport(_) | Failure::Local(_) => true,
                Failure::Answer { status, code, .. } => {
                    *status >= 500 || *status == 429 || THROTTLED.contains(&code.as_str())
                }
            };
            if !retry || attempt >= self.attempts {
                return Err(match failure {
                    Failure::Transport(e) => failure::unreachable(call, Cloud::Aws, Some(&url), &e),
                    Failure::Local(message) => ProviderError::api(call, 0, "", message)
                        .with_hint(Hint::Credentials(Cloud::Aws)),
                    Failure::Answer {
                        status,
                        code,
                        message,
                        request_id,
                    } => failure::answered(
                        call,
                        Cloud::Aws,
                        status,
                        code,
                        &message,
                        request_id,
                        Some(attempt),
                    ),
                });
            }
            // Exponential backoff from 200 ms, as the SDK clients are configured.
            let delay = Duration::from_millis(200u64 << (attempt - 1).min(5));
            tokio::time::sleep(delay).await;
            attempt += 1;
        }
    }

    async fn attempt(
        &self,
        service: &Service,
        region: &str,
        url: &str,
        headers: &[(&str, &str)],
        body: &[u8],
        read_error: fn(&str) -> (String, String),
    ) -> Result<String, Failure> {
        let identity = self.identity().await.map_err(Failure::Local)?;
        let signed = self
            .sign(&identity, service, region, url, headers, body)
            .map_err(Failure::Local)?;
        let mut request = self.http.post(url).body(body.to_vec());
        for (name, value) in headers.iter().copied() {
            request = request.header(name, value);
        }
        for (name, value) in &signed {
            request = request.header(name.as_str(), value.as_str());
        }
        let response = request.send().await.map_err(Failure::Transport)?;
        let status = response.status().as_u16();
        let request_id = failure::AWS_REQUEST_ID_HEADERS
            .iter()
            .find_map(|h| response.headers().get(*h)?.to_str().ok())
            .map(str::to_string);
        let text = response.text().await.map_err(Failure::Transport)?;
        if (200..300).contains(&status) {
            return Ok(text);
        }
        let (code, message) = read_error(&text);
        Err(Failure::Answer {
            status,
            code,
            message,
            request_id,
        })
    }

    /// The SigV4 headers for a POST of `body` to `url`.
    fn sign(
        &self,
        identity: &Identity,
        service: &Service,
        region: &str,
        url: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<Vec<(String, String)>, String> {
        let params = SigningParams::builder()
            .identity(identity)
            .region(service.signing_region(region))
            .name(service.name)
            .time(SystemTime::now())
            .settings(SigningSettings::default())
            .build()
            .map_err(|e| format!("signing parameters: {e}"))?
            .into();
        let request = SignableRequest::new(
            "POST",
            url,
            headers.iter().copied(),
            SignableBody::Bytes(body),
        )
        .map_err(|e| format!("the endpoint {url:?} is not a URL: {e}"))?;
        let (instructions, _signature) = sign(request, &params)
            .map_err(|e| format!("signing failed: {e}"))?
            .into_parts();
        Ok(instructions
            .headers()
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect())
    }
}

/// `https://ec2.us-east-1.amazonaws.com/` for host `ec2`, `.com.cn` in the China
/// regions.
pub(crate) fn public_url(host: &str, region: &str) -> String {
    let domain = if region.starts_with("cn-") {
        "amazonaws.com.cn"
    } else {
        "amazonaws.com"
    };
    format!("https://{host}.{region}.{domain}/")
}

/// The code and message of a JSON 1.1 error (`{"__type": "…#Code", "message": …}`).
pub(crate) fn json_error(text: &str) -> (String, String) {
    let Ok(body) = serde_json::from_str::<Value>(text) else {
        return (String::new(), failure::unreadable(text));
    };
    let kind = body["__type"]
        .as_str()
        .or(body["code"].as_str())
        .unwrap_or_default();
    let code = kind.rsplit('#').next().unwrap_or(kind);
    // Some services append the error's documentation URL after a colon.
    let code = code.split(':').next().unwrap_or(code);
    let message = body["message"]
        .as_str()
        .or(body["Message"].as_str())
        .unwrap_or_default();
    (code.to_string(), message.to_string())
}

/// The code and message of a query-protocol error: `<ErrorResponse><Error><Code>…`
/// (IAM, STS) or EC2's `<Response><Errors><Error><Code>…`.
pub(crate) fn query_error(text: &str) -> (String, String) {
    let error = Xml::parse(text).ok().and_then(|root| {
        let error = match root.name.as_str() {
            "ErrorResponse" => root.find("Error")?,
            "Response" => root.find("Errors")?.find("Error")?,
            _ => return None,
        };
        Some((
            error.text("Code").unwrap_or_default().to_string(),
            error.text("Message").unwrap_or_default().to_string(),
        ))
    });
    error.unwrap_or_else(|| (String::new(), failure::unreadable(text)))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;
    use terrain_sandbox::{Options, Sandbox, Timing};

    use super::*;
    use crate::session::Session;

    async fn sandbox() -> Sandbox {
        Sandbox::start(Options {
            timing: Timing::instant(),
            ..Options::default()
        })
        .await
        .expect("the sandbox starts")
    }

    /// A context with `table` as `[providers.aws]` and `env` as its whole environment.
    fn ctx(table: Value, env: &[(&'static str, &'static str)]) -> Ctx {
        let env: BTreeMap<&'static str, &'static str> = env.iter().copied().collect();
        Ctx::new("sagemaker_pipeline.train", table).in_run(
            Session::new(),
            Arc::new(move |name: &str| env.get(name).map(|v| v.to_string())),
        )
    }

    #[test]
    fn every_service_is_one_the_table_can_point_elsewhere() {
        for service in SERVICES {
            assert!(
                config::SERVICES.contains(&service.name),
                "endpoints.{} is not accepted by [providers.aws]",
                service.name
            );
        }
    }

    #[tokio::test]
    async fn endpoints_come_from_the_table_then_the_environment_then_the_public_ones() {
        let table = json!({
            "region": "eu-west-1",
            "sandbox": true,
            "endpoints": {"ec2": "http://127.0.0.1:1/ec2/"},
        });
        let env = [("AWS_ENDPOINT_URL_SAGEMAKER", "http://127.0.0.1:2")];
        let signed = Signed::new(&ctx(table, &env), "test", 5)
            .await
            .expect("a client");
        assert_eq!(signed.region(), "eu-west-1");
        assert_eq!(signed.url(&EC2, "eu-west-1"), "http://127.0.0.1:1/ec2/");
        assert_eq!(signed.url(&SAGEMAKER, "eu-west-1"), "http://127.0.0.1:2/");
        assert_eq!(
            signed.url(&SERVICE_QUOTAS, "cn-north-1"),
            "https://servicequotas.cn-north-1.amazonaws.com.cn/"
        );
        // One endpoint for every service beats the environment's per-service one.
        let table =
            json!({"region": "eu-west-1", "sandbox": true, "endpoint": "http://127.0.0.1:3"});
        let signed = Signed::new(&ctx(table, &env), "test", 5)
            .await
            .expect("a client");
        assert_eq!(signed.url(&SAGEMAKER, "eu-west-1"), "http://127.0.0.1:3/");
        let table = json!({"region": "eu-west-1", "sandbox": true});
        let signed = Signed::new(&ctx(table, &[]), "test", 5)
            .await
            .expect("a client");
        assert_eq!(
            signed.url(&SAGEMAKER, "eu-west-1"),
            "https://api.sagemaker.eu-west-1.amazonaws.com/"
        );
        assert_eq!(
            signed.url(&SAGEMAKER, "cn-northwest-1"),
            "https://api.sagemaker.cn-northwest-1.amazonaws.com.cn/"
        );
    }

    #[tokio::test]
    async fn attempts_are_the_tables_capped_by_the_caller() {
        let table = json!({"region": "us-east-1", "sandbox": true, "max_attempts": 4});
        let attempts = |cap| {
            let table = table.clone();
            async move {
                Signed::new(&ctx(table, &[]), "test", cap)
                    .await
                    .expect("a client")
                    .attempts
            }
        };
        assert_eq!(attempts(2).await, 2);
        assert_eq!(attempts(u32::MAX).await, 4);
        assert_eq!(attempts(0).await, 1, "always one attempt");
    }

    #[tokio::test]
    async fn json_calls_are_accepted_by_the_sandbox_and_errors_name_the_call() {
        let sandbox = sandbox().await;
        let table = json!({"region": "us-east-1", "endpoint": sandbox.url(), "sandbox": true, "max_attempts": 2});
        let signed = Signed::new(&ctx(table, &[]), "test", u32::MAX)
            .await
            .expect("a client");
        let definition = json!({"Version": "2020-12-01", "Steps": [{"Name": "Train", "Type": "Training", "Arguments": {}}]});
        let created = signed
            .json11(
                &SAGEMAKER,
                "us-east-1",
                "CreatePipeline",
                &json!({
                    "PipelineName": "abalone",
                    "RoleArn": "arn:aws:iam::123456789012:role/SageMakerExecution",
                    "PipelineDefinition": definition.to_string(),
                }),
            )
            .await
            .expect("created");
        let arn = created["PipelineArn"].as_str().unwrap_or_default();
        assert_eq!(
            arn,
            "arn:aws:sagemaker:us-east-1:123456789012:pipeline/abalone"
        );
        // A 503 is retried: the second attempt is answered.
        sandbox.faults().burst(503, 1, 0);
        let described = signed
            .json11(
                &SAGEMAKER,
                "us-east-1",
                "DescribePipeline",
                &json!({"PipelineName": "abalone"}),
            )
            .await
            .expect("described");
        assert_eq!(described["PipelineArn"], arn);
        let e = signed
            .json11(
                &SAGEMAKER,
                "us-east-1",
                "DescribePipeline",
                &json!({"PipelineName": "missing"}),
            )
            .await
            .expect_err("no such pipeline");
        assert!(super::super::is_not_found(&e), "{e}");
        let text = e.to_string();
        // The sandbox, as SageMaker, answers with a request id, which the error keeps.
        let (said, request_id) = text.split_once(" (request id ").expect("a request id");
        assert_eq!(
            said,
            "sagemaker:DescribePipeline failed: 400 ResourceNotFound: Pipeline 'arn:aws:sagemaker:us-east-1:123456789012:pipeline/missing' does not exist."
        );
        assert!(request_id.ends_with(')') && request_id.len() > 8, "{text}");
        sandbox.shutdown().await;
    }

    #[tokio::test]
    async fn iam_is_global_and_signed_for_its_partitions_home_region() {
        let table = json!({"region": "eu-west-1", "sandbox": true});
        let signed = Signed::new(&ctx(table, &[]), "test", 5)
            .await
            .expect("a client");
        assert_eq!(signed.url(&IAM, "eu-west-1"), "https://iam.amazonaws.com/");
        assert_eq!(IAM.signing_region("eu-west-1"), "us-east-1");
        assert_eq!(
            signed.url(&IAM, "cn-northwest-1"),
            "https://iam.cn-north-1.amazonaws.com.cn/"
        );
        assert_eq!(IAM.signing_region("cn-northwest-1"), "cn-north-1");
        assert_eq!(
            signed.url(&IAM, "us-gov-east-1"),
            "https://iam.us-gov.amazonaws.com/"
        );
        assert_eq!(IAM.signing_region("us-gov-east-1"), "us-gov-west-1");
        // The regional services keep their region.
        assert_eq!(
            signed.url(&STS, "eu-west-1"),
            "https://sts.eu-west-1.amazonaws.com/"
        );
        assert_eq!(STS.signing_region("eu-west-1"), "eu-west-1");
        assert_eq!(KMS.signing_region("eu-west-1"), "eu-west-1");
        assert_eq!(
            signed.url(&EC2, "eu-west-1"),
            "https://ec2.eu-west-1.amazonaws.com/"
        );
        // An override is used as it is, whatever the service.
        let table = json!({"region": "eu-west-1", "sandbox": true, "endpoints": {"iam": "http://127.0.0.1:4"}});
        let signed = Signed::new(&ctx(table, &[]), "test", 5)
            .await
            .expect("a client");
        assert_eq!(signed.url(&IAM, "eu-west-1"), "http://127.0.0.1:4/");
    }

    #[test]
    fn query_errors_and_answers_are_read_as_xml_trees() {
        assert_eq!(
            query_error(
                r#"<ErrorResponse xmlns="https://iam.amazonaws.com/doc/2010-05-08/"><Error><Type>Sender</Type><Code>NoSuchEntity</Code><Message>Role x not found</Message></Error><RequestId>r</RequestId></ErrorResponse>"#
            ),
            ("NoSuchEntity".to_string(), "Role x not found".to_string())
        );
        assert_eq!(
            query_error("<Response><Errors><Error><Code>UnauthorizedOperation</Code><Message>no</Message></Error></Errors><RequestID>x</RequestID></Response>"),
            ("UnauthorizedOperation".to_string(), "no".to_string())
        );
        let (code, said) = query_error("<html><body>bad gateway</body></html>");
        assert_eq!(code, "");
        assert!(said.contains("not in the API's error format"), "{said}");
        // One name, a leaf in one list and a table in another.
        let root = Xml::parse(
            "<R><PolicyNames><member>terrain</member></PolicyNames><Tags>\n  <member><Key>k</Key><Value>v &amp; w</Value></member>\n</Tags></R>",
        )
        .expect("xml");
        let names: Vec<&str> = root
            .find("PolicyNames")
            .map(|l| l.all("member").map(|m| m.text.as_str()).collect())
            .unwrap_or_default();
        assert_eq!(names, vec!["terrain"]);
        let tag = root.find_at(&["Tags", "member"]).expect("a tag");
        assert_eq!(tag.text("Value"), Some("v & w"));
        assert_eq!(tag.text, "", "a table has no text");
    }

    #[test]
    fn json_errors_are_read_with_or_without_a_namespace() {
        assert_eq!(
            json_error(
                r#"{"__type": "com.amazonaws.sagemaker#ResourceNotFound", "Message": "gone"}"#
            ),
            ("ResourceNotFound".to_string(), "gone".to_string())
        );
        assert_eq!(
            json_error(r#"{"__type": "ValidationException", "message": "bad"}"#),
            ("ValidationException".to_string(), "bad".to_string())
        );
        assert_eq!(
            json_error(""),
            (
                String::new(),
                "an error answer with an empty body".to_string()
            )
        );
        // An answer that is not the API's error format is described, never quoted.
        let (_, said) = json_error("<html><body>AWS_SECRET_ACCESS_KEY=abc</body></html>");
        assert_eq!(
            said,
            "an error answer not in the API's error format (an HTML page, 51 bytes)"
        );
    }

    #[tokio::test]
    async fn a_run_keeps_one_client_per_table_and_environment() {
        let table = json!({"region": "us-east-1", "max_attempts": 2});
        let keys = [
            ("AWS_ACCESS_KEY_ID", "AKIDONE"),
            ("AWS_SECRET_ACCESS_KEY", "one-secret"),
        ];
        let run = ctx(table.clone(), &keys);
        let first = Signed::for_run(&run, "test", 3).await.expect("a client");
        let again = Signed::for_run(&run, "test", 3).await.expect("a client");
        assert!(Arc::ptr_eq(&first, &again), "one client for the run");
        // Another environment in the same run (session).
        let env: crate::EnvFn = Arc::new(|name: &str| match name {
            "AWS_ACCESS_KEY_ID" => Some("AKIDTWO".into()),
            "AWS_SECRET_ACCESS_KEY" => Some("two-secret".into()),
            _ => None,
        });
        let other_keys =
            Ctx::new("sagemaker_pipeline.other", table.clone()).in_run(run.session_handle(), env);
        let other = Signed::for_run(&other_keys, "test", 3)
            .await
            .expect("a client");
        assert!(!Arc::ptr_eq(&first, &other), "other keys, another client");
        let another_run = Signed::for_run(&ctx(table, &keys), "test", 3)
            .await
            .expect("a client");
        assert!(
            !Arc::ptr_eq(&first, &another_run),
            "another run, another client"
        );
    }

    #[tokio::test]
    async fn credentials_near_their_expiry_are_fetched_again() {
        let soon = SystemTime::now() + Duration::from_secs(60);
        let later = SystemTime::now() + Duration::from_secs(3600);
        let renewed = Credentials::new("AKIDRENEWED", "renewed", None, Some(later), "test");
        let client = |held: Credentials| Signed {
            http: reqwest::Client::new(),
            provider: SharedCredentialsProvider::new(renewed.clone()),
            credentials: Mutex::new(held),
            attempts: 1,
            region: "us-east-1".into(),
            endpoints: BTreeMap::new(),
        };
        let access_key = |identity: Identity| {
            identity
                .data::<Credentials>()
                .expect("AWS credentials")
                .access_key_id()
                .to_string()
        };

        let expiring = client(Credentials::new("AKIDOLD", "old", None, Some(soon), "test"));
        assert_eq!(
            access_key(expiring.identity().await.expect("renewed")),
            "AKIDRENEWED"
        );
        assert_eq!(
            expiring
                .credentials
                .lock()
                .expect("not poisoned")
                .access_key_id(),
            "AKIDRENEWED",
            "kept for the next call"
        );
        let lasting = client(Credentials::new(
            "AKIDOLD",
            "old",
            None,
            Some(later),
            "test",
        ));
        assert_eq!(
            access_key(lasting.identity().await.expect("held")),
            "AKIDOLD"
        );
        let static_keys = client(Credentials::new("AKIDSTATIC", "static", None, None, "test"));
        assert_eq!(
            access_key(static_keys.identity().await.expect("held")),
            "AKIDSTATIC"
        );
    }
}
