//! Turning a `cluster` reference into a Kubernetes client.
//!
//! A reference is either an endpoint (a GKE cluster's `kubernetes` output: `host`,
//! `ca_certificate` as base64 of the PEM, and `auth`) or an existing kubeconfig
//! (`kubeconfig`, optional `context`); both may say which `flavor` of cluster it is,
//! which decides how workloads are placed. Clients are cached per cluster for the whole
//! process; a client reached by endpoint renews its bearer token in the background well
//! before it expires (each auth type has its own token lifetime), so a client held
//! through a wait of hours keeps working. Tokens never appear in messages.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, RwLock, Weak};
use std::time::{Duration, Instant};

use base64::Engine;
use kube::config::{KubeConfigOptions, Kubeconfig};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::gcp::auth::Tokens;
use crate::gcp::config::credential_source;
use crate::session::{EnvFn, Session};
use crate::{Ctx, ProviderError};

/// What kind of cluster a reference points at: decides node labels for spot capacity,
/// accelerators and TPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    Gke { autopilot: bool },
    Eks,
    Generic,
}

impl Flavor {
    /// `gke`, `gke autopilot`, `eks` or `generic`, for messages.
    pub fn describe(self) -> &'static str {
        match self {
            Flavor::Gke { autopilot: false } => "gke",
            Flavor::Gke { autopilot: true } => "gke autopilot",
            Flavor::Eks => "eks",
            Flavor::Generic => "generic",
        }
    }
}

/// The flavor a reference declares; an endpoint with Google auth is GKE, anything
/// undeclared is generic.
pub fn flavor(cluster: &Value) -> Flavor {
    let autopilot = cluster["autopilot"].as_bool().unwrap_or(false);
    match cluster["flavor"].as_str() {
        Some("gke") => Flavor::Gke { autopilot },
        Some("eks") => Flavor::Eks,
        Some(_) => Flavor::Generic,
        None if cluster["auth"]["type"] == "google" => Flavor::Gke { autopilot },
        None => Flavor::Generic,
    }
}

const EXPECTED: &str = "expected a cluster reference such as \"${gke_cluster.main.kubernetes}\" or { kubeconfig = \"~/.kube/config\" }";
const FLAVORS: &[&str] = &["gke", "eks", "generic"];

/// How terrain proves who it is to an API server given by endpoint. One variant per
/// cloud's token scheme.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Auth {
    /// A Google OAuth access token (GKE), from the given token file or key file, else
    /// from the environment as for the `gcp` provider.
    Google {
        access_token_file: Option<String>,
        credentials: Option<String>,
    },
    /// An EKS token (`aws eks get-token`): a presigned STS request signed with the AWS
    /// credentials of the default chain, for the given profile when set.
    Aws {
        cluster_name: String,
        region: String,
        profile: Option<String>,
        sts_endpoint: Option<String>,
        /// Signed with the sandbox's fixed credentials (`--sandbox` runs).
        sandbox: bool,
    },
}

impl Auth {
    /// How long a client built with this auth may be reused: about two thirds of the
    /// token's life, so no request goes out with a token about to expire.
    fn max_client_age(&self) -> Duration {
        match self {
            Auth::Google { .. } => GOOGLE_CLIENT_AGE,
            Auth::Aws { .. } => AWS_CLIENT_AGE,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Reference {
    Endpoint {
        host: String,
        ca_der: Vec<Vec<u8>>,
        auth: Auth,
    },
    Kubeconfig {
        path: String,
        context: Option<String>,
    },
}

/// A problem with the reference: the path inside the spec (`cluster.auth`) and why.
type Problem = (String, String);

fn problem(path: &str, message: impl Into<String>) -> Problem {
    (path.to_string(), message.into())
}

fn optional_string(cluster: &Value, key: &str, path: &str) -> Result<Option<String>, Problem> {
    match &cluster[key] {
        Value::Null => Ok(None),
        Value::String(s) if s.is_empty() => Ok(None),
        Value::String(s) => Ok(Some(s.clone())),
        other => Err(problem(
            &format!("{path}.{key}"),
            format!("expected a string, got {other}"),
        )),
    }
}

/// Checks a reference offline; the error is the path of the problem and a message.
pub fn check(cluster: &Value) -> Result<(), (String, String)> {
    parse(cluster).map(|_| ())
}

fn parse(cluster: &Value) -> Result<Reference, Problem> {
    if !cluster.is_object() {
        return Err(problem("cluster", EXPECTED));
    }
    match cluster.get("flavor") {
        None | Some(Value::Null) => {}
        Some(Value::String(f)) if FLAVORS.contains(&f.as_str()) => {}
        Some(other) => {
            return Err(problem(
                "cluster.flavor",
                format!("expected one of gke, eks, generic, got {other}"),
            ))
        }
    }
    match cluster.get("autopilot") {
        None | Some(Value::Null) | Some(Value::Bool(false)) => {}
        Some(Value::Bool(true)) if !matches!(flavor(cluster), Flavor::Gke { .. }) => {
            return Err(problem(
                "cluster.autopilot",
                "autopilot clusters are GKE clusters: set flavor = \"gke\"",
            ));
        }
        Some(Value::Bool(true)) => {}
        Some(other) => {
            return Err(problem(
                "cluster.autopilot",
                format!("expected a boolean, got {other}"),
            ))
        }
    }
    if let Some(path) = optional_string(cluster, "kubeconfig", "cluster")? {
        if cluster.get("host").is_some() {
            return Err(problem(
                "cluster",
                "give either `kubeconfig` or `host`, not both",
            ));
        }
        let context = optional_string(cluster, "context", "cluster")?;
        return Ok(Reference::Kubeconfig { path, context });
    }
    let Some(host) = optional_string(cluster, "host", "cluster")? else {
        return Err(problem("cluster", EXPECTED));
    };
    let host = if host.contains("://") {
        host
    } else {
        format!("https://{host}")
    };
    if !(host.starts_with("https://") || host.starts_with("http://")) || kube_url(&host).is_none() {
        return Err(problem(
            "cluster.host",
            format!("{host:?} is not an https URL of an API server"),
        ));
    }
    let ca = optional_string(cluster, "ca_certificate", "cluster")?.ok_or_else(|| {
        problem(
            "cluster.ca_certificate",
            "missing: the base64-encoded PEM of the cluster's CA certificate",
        )
    })?;
    let ca_der = ca_certificates(&ca).map_err(|m| problem("cluster.ca_certificate", m))?;
    let auth = &cluster["auth"];
    let auth = match auth["type"].as_str() {
        Some("google") => Auth::Google {
            access_token_file: optional_string(auth, "access_token_file", "cluster.auth")?,
            credentials: optional_string(auth, "credentials", "cluster.auth")?,
        },
        Some("aws") => {
            let required = |key: &str| {
                optional_string(auth, key, "cluster.auth")?.ok_or_else(|| {
                    problem(
                        &format!("cluster.auth.{key}"),
                        "missing: EKS auth needs { type = \"aws\", cluster_name, region }, as an eks_cluster's `kubernetes` output has",
                    )
                })
            };
            Auth::Aws {
                cluster_name: required("cluster_name")?,
                region: required("region")?,
                profile: optional_string(auth, "profile", "cluster.auth")?,
                sts_endpoint: optional_string(auth, "sts_endpoint", "cluster.auth")?,
                sandbox: auth
                    .get("sandbox")
                    .and_then(Value::as_bool)
                    .unwrap_or(false),
            }
        }
        Some(other) => {
            return Err(problem(
                "cluster.auth.type",
                format!("{other:?} is not a supported auth type; expected \"google\" or \"aws\""),
            ))
        }
        None => return Err(problem(
            "cluster.auth",
            "missing: expected { type = \"google\" } or { type = \"aws\", cluster_name, region }",
        )),
    };
    Ok(Reference::Endpoint { host, ca_der, auth })
}

fn kube_url(host: &str) -> Option<kube::Config> {
    host.parse().ok().map(kube::Config::new)
}

/// The DER certificates in a base64-encoded PEM (or in the PEM itself).
fn ca_certificates(text: &str) -> Result<Vec<Vec<u8>>, String> {
    let pem = if text.trim_start().starts_with("-----BEGIN") {
        text.as_bytes().to_vec()
    } else {
        base64::engine::general_purpose::STANDARD
            .decode(text.trim())
            .map_err(|e| format!("not base64: {e}"))?
    };
    let certs = CertificateDer::pem_slice_iter(&pem)
        .map(|c| c.map(|c| c.to_vec()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("not a PEM certificate: {e}"))?;
    if certs.is_empty() {
        return Err("holds no PEM certificate".into());
    }
    Ok(certs)
}

/// Expands a leading `~/` to the home directory (`HOME` as the run sees it).
fn expand_home(path: &str, env: &EnvFn) -> String {
    match (path.strip_prefix("~/"), env("HOME")) {
        (Some(rest), Some(home)) if !home.is_empty() => {
            format!("{}/{rest}", home.trim_end_matches('/'))
        }
        _ => path.to_string(),
    }
}

/// GKE tokens live an hour: rebuilding at half-life leaves every request a valid one.
const GOOGLE_CLIENT_AGE: Duration = Duration::from_secs(30 * 60);
/// EKS accepts a token for 15 minutes after it was signed: rebuild after 10.
const AWS_CLIENT_AGE: Duration = Duration::from_secs(10 * 60);
/// Kubeconfig users get fresh credentials from their own plugins; the client is
/// rebuilt at the same pace as GKE's.
const KUBECONFIG_CLIENT_AGE: Duration = GOOGLE_CLIENT_AGE;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// Generous, because waits poll and log streams idle; a stalled server still fails.
const READ_TIMEOUT: Duration = Duration::from_secs(120);
const WRITE_TIMEOUT: Duration = Duration::from_secs(60);

/// What the API server serves, as discovered: `(apiVersion, kind)` → the resource
/// and whether it is namespaced. Kept per connection: two clusters may serve a kind
/// differently (a CRD installed on one only).
pub type Discovery = Mutex<HashMap<(String, String), (kube::discovery::ApiResource, bool)>>;

/// A connection to one cluster: its client (which it dereferences to) and what its
/// API server was found to serve.
#[derive(Clone)]
pub struct Conn {
    client: kube::Client,
    discovery: Arc<Discovery>,
}

impl std::ops::Deref for Conn {
    type Target = kube::Client;
    fn deref(&self) -> &kube::Client {
        &self.client
    }
}

impl Conn {
    /// The client, to build typed APIs with.
    pub fn kube(&self) -> kube::Client {
        self.client.clone()
    }

    /// What the API server was found to serve.
    pub fn discovery(&self) -> &Discovery {
        &self.discovery
    }

    /// A connection over `client` that has discovered nothing yet (tests, and clients
    /// made outside a run).
    pub fn fresh(client: kube::Client) -> Self {
        Self {
            client,
            discovery: Arc::default(),
        }
    }
}

struct Cached {
    conn: Conn,
    built: Instant,
}

/// The run's connections, by [`Reference::key`].
type Connections = Mutex<HashMap<String, Cached>>;

impl Reference {
    /// The cache key: what identifies the server and the identity used on it (the CA
    /// certificates by their SHA-256, which keeps the key short).
    fn key(&self) -> String {
        match self {
            Reference::Endpoint { host, ca_der, auth } => {
                let mut ca = Sha256::new();
                for der in ca_der {
                    ca.update((der.len() as u64).to_be_bytes());
                    ca.update(der);
                }
                format!("{host} {auth:?} ca:{}", hex::encode(ca.finalize()))
            }
            Reference::Kubeconfig { path, context } => format!("kubeconfig {path} {context:?}"),
        }
    }

    /// How long a client for this reference may be reused.
    fn max_client_age(&self) -> Duration {
        match self {
            Reference::Endpoint { auth, .. } => auth.max_client_age(),
            Reference::Kubeconfig { .. } => KUBECONFIG_CLIENT_AGE,
        }
    }

    async fn config(&self, env: &EnvFn) -> Result<kube::Config, ProviderError> {
        let mut config = match self {
            Reference::Endpoint { host, ca_der, .. } => {
                let mut config = kube_url(host).ok_or_else(|| {
                    ProviderError::Config(format!("cluster.host: {host:?} is not a URL"))
                })?;
                config.root_cert = Some(ca_der.clone());
                // The bearer token is added per request by [`Bearer`], which keeps it
                // fresh: a client held through a long wait outlives a token.
                config
            }
            Reference::Kubeconfig { path, context } => {
                let file = expand_home(path, env);
                let kubeconfig = Kubeconfig::read_from(&file).map_err(|e| {
                    ProviderError::Config(format!("cluster: cannot read kubeconfig {file}: {e}"))
                })?;
                let options = KubeConfigOptions {
                    context: context.clone(),
                    ..KubeConfigOptions::default()
                };
                kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                    .await
                    .map_err(|e| {
                        ProviderError::Config(format!("cluster: kubeconfig {file}: {e}"))
                    })?
            }
        };
        config.connect_timeout = Some(CONNECT_TIMEOUT);
        config.read_timeout = Some(READ_TIMEOUT);
        config.write_timeout = Some(WRITE_TIMEOUT);
        Ok(config)
    }
}

/// What selects the connection `cluster` makes: the server, the CA it is trusted
/// with and the identity used on it (for a kubeconfig, its path and context), the same
/// key clients are cached by. References with equal keys reach the same API server
/// with the same client, so their objects can be read by one list call. `None` for a
/// reference that is malformed or not known yet. Holds no token.
pub fn connection_key(cluster: &Value) -> Option<String> {
    if crate::protocol::is_unknown(cluster) {
        return None;
    }
    parse(cluster).ok().map(|r| r.key())
}

/// A connection to the cluster `cluster` refers to, kept for the run (in its
/// session) per cluster and rebuilt before its token expires (after 30 minutes for
/// GKE, 10 for EKS).
///
/// Fails with `Config` when the reference is malformed, the kubeconfig cannot be read
/// or no credentials are found; with `Api` (`kubernetes connect`) when the client
/// cannot be built.
pub async fn client(ctx: &Ctx, cluster: &Value) -> Result<Conn, ProviderError> {
    let reference = parse(cluster)
        .map_err(|(path, message)| ProviderError::Config(format!("{path}: {message}")))?;
    let key = reference.key();
    let max_age = reference.max_client_age();
    let connections = ctx.session().slot::<Connections>("kubernetes.connections");
    {
        let cache = connections.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(c) = cache.get(&key).filter(|c| c.built.elapsed() < max_age) {
            return Ok(c.conn.clone());
        }
    }
    let config = reference.config(ctx.env_fn()).await?;
    // Both ring and aws-lc-rs are compiled in, so rustls cannot pick a provider by
    // itself; installing fails harmlessly when one is already installed.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let builder = kube::client::ClientBuilder::try_from(config)
        .map_err(|e| ProviderError::api("kubernetes connect", 0, "", e.to_string()))?;
    let client = match &reference {
        Reference::Endpoint { auth, .. } => {
            let token = Arc::new(RwLock::new(
                fetch_token(ctx.session(), ctx.env_fn(), auth).await?,
            ));
            keep_fresh(
                Arc::downgrade(&token),
                auth.clone(),
                Arc::downgrade(&ctx.session_handle()),
                ctx.env_fn().clone(),
            );
            builder.with_layer(&BearerLayer { token }).build()
        }
        Reference::Kubeconfig { .. } => builder.build(),
    };
    // A rebuilt client keeps what was discovered: the server is the same.
    let mut cache = connections.lock().unwrap_or_else(PoisonError::into_inner);
    let discovery = cache
        .get(&key)
        .map(|c| c.conn.discovery.clone())
        .unwrap_or_default();
    let conn = Conn { client, discovery };
    cache.insert(
        key,
        Cached {
            conn: conn.clone(),
            built: Instant::now(),
        },
    );
    Ok(conn)
}

/// A fresh bearer token for `auth` (never shown in messages).
async fn fetch_token(session: &Session, env: &EnvFn, auth: &Auth) -> Result<String, ProviderError> {
    Ok(match auth {
        Auth::Google {
            access_token_file,
            credentials,
        } => {
            let source =
                credential_source(access_token_file.clone(), credentials.clone(), &|name| {
                    env(name)
                });
            Tokens::new(source).token().await?
        }
        Auth::Aws {
            cluster_name,
            region,
            profile,
            sts_endpoint,
            sandbox,
        } => {
            crate::aws::token::eks_token(
                session,
                env,
                cluster_name,
                region,
                profile.as_deref(),
                sts_endpoint.as_deref(),
                *sandbox,
            )
            .await?
        }
    })
}

/// How often a client's token is renewed: well within its lifetime (an EKS token lasts
/// 15 minutes, a Google access token an hour), so a request never carries an expired one.
fn refresh_every(auth: &Auth) -> Duration {
    match auth {
        Auth::Google { .. } => Duration::from_secs(20 * 60),
        Auth::Aws { .. } => Duration::from_secs(5 * 60),
    }
}

/// Renews the token in `slot` until the client holding it is gone. A failed renewal
/// keeps the current token and tries again a minute later.
/// The task holds the run's session weakly: it ends with the run.
fn keep_fresh(slot: Weak<RwLock<String>>, auth: Auth, session: Weak<Session>, env: EnvFn) {
    let every = refresh_every(&auth);
    tokio::spawn(async move {
        let mut wait = every;
        loop {
            tokio::time::sleep(wait).await;
            if slot.strong_count() == 0 {
                return;
            }
            let Some(session) = session.upgrade() else {
                return;
            };
            wait = match fetch_token(&session, &env, &auth).await {
                Ok(token) => {
                    let Some(slot) = slot.upgrade() else { return };
                    *slot.write().unwrap_or_else(PoisonError::into_inner) = token;
                    every
                }
                Err(_) => Duration::from_secs(60).min(every),
            };
        }
    });
}

/// Adds `Authorization: Bearer <token>` to every request, from a slot kept fresh by
/// [`keep_fresh`]: a client built once serves a wait of hours.
#[derive(Clone)]
struct BearerLayer {
    token: Arc<RwLock<String>>,
}

impl<S> tower::Layer<S> for BearerLayer {
    type Service = Bearer<S>;

    fn layer(&self, inner: S) -> Bearer<S> {
        Bearer {
            inner,
            token: self.token.clone(),
        }
    }
}

/// The service [`BearerLayer`] makes.
struct Bearer<S> {
    inner: S,
    token: Arc<RwLock<String>>,
}

impl<S, B> tower::Service<http::Request<B>> for Bearer<S>
where
    S: tower::Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        let header = {
            let token = self.token.read().unwrap_or_else(PoisonError::into_inner);
            http::HeaderValue::from_str(&format!("Bearer {}", token.as_str()))
        };
        if let Ok(mut value) = header {
            // Kept out of debug output and HTTP/2 header compression tables.
            value.set_sensitive(true);
            request
                .headers_mut()
                .insert(http::header::AUTHORIZATION, value);
        }
        self.inner.call(request)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Answers every request with the Authorization header it carried.
    struct Echo;

    impl tower::Service<http::Request<()>> for Echo {
        type Response = Option<http::HeaderValue>;
        type Error = std::convert::Infallible;
        type Future = std::future::Ready<Result<Self::Response, Self::Error>>;

        fn poll_ready(
            &mut self,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Result<(), Self::Error>> {
            std::task::Poll::Ready(Ok(()))
        }

        fn call(&mut self, request: http::Request<()>) -> Self::Future {
            std::future::ready(Ok(request
                .headers()
                .get(http::header::AUTHORIZATION)
                .cloned()))
        }
    }

    #[tokio::test]
    async fn every_request_carries_the_token_renewed_last() {
        use tower::{Layer, Service};
        let token = Arc::new(RwLock::new("k8s-aws-v1.first".to_string()));
        let mut service = BearerLayer {
            token: token.clone(),
        }
        .layer(Echo);
        let sent = service
            .call(http::Request::new(()))
            .await
            .expect("echo")
            .expect("an Authorization header");
        assert_eq!(sent, "Bearer k8s-aws-v1.first");
        assert!(sent.is_sensitive(), "kept out of debug output");
        // A renewal in the background reaches the next request of the same client.
        *token.write().expect("slot") = "k8s-aws-v1.second".to_string();
        let sent = service
            .call(http::Request::new(()))
            .await
            .expect("echo")
            .expect("an Authorization header");
        assert_eq!(sent, "Bearer k8s-aws-v1.second");
    }
    use serde_json::json;

    /// A self-signed CA certificate (GKE reports its PEM base64-encoded).
    pub(crate) const CA_PEM: &str = "-----BEGIN CERTIFICATE-----
MIIBizCCATGgAwIBAgIUPsKioPLVfJocIyTRISagD+8bClcwCgYIKoZIzj0EAwIw
GjEYMBYGA1UEAwwPdGVycmFpbi10ZXN0LWNhMCAXDTI2MTEyMTAyNDI0M1oYDzIx
MjYxMDI4MDI0MjQzWjAaMRgwFgYDVQQDDA90ZXJyYWluLXRlc3QtY2EwWTATBgcq
hkjOPQIBBggqhkjOPQMBBwNCAATMRq/3OtgfG+EKH2POOo877PVwf516HPIethLr
pYmIv1mugzr4YQhosWIVaAlrp7t7vuvtjfTx8cAWhgznFFRoo1MwUTAdBgNVHQ4E
FgQUJTKd3IT/5776zB+NDBoZJzXp378wHwYDVR0jBBgwFoAUJTKd3IT/5776zB+N
DBoZJzXp378wDwYDVR0TAQH/BAUwAwEB/zAKBggqhkjOPQQDAgNIADBFAiEA0Jq9
j91E+rt0L6rpsimQwo2kBbIMrnjSou/TqIMfE1QCIBLzpfn/4Tw6iht+LynHoZOP
441Pnf9qdk/jqsa3gYJV
-----END CERTIFICATE-----
";

    pub(crate) fn gke_reference() -> Value {
        json!({
            "host": "https://127.0.0.1:34567",
            "ca_certificate": base64::engine::general_purpose::STANDARD.encode(CA_PEM),
            "auth": {"type": "google", "access_token_file": "/tmp/token"},
            "flavor": "gke",
            "autopilot": true,
            "name": "batch",
            "location": "us-central1",
            "project": "p",
        })
    }

    #[test]
    fn flavors_follow_the_reference() {
        let cases = [
            (gke_reference(), Flavor::Gke { autopilot: true }),
            (json!({"kubeconfig": "k", "flavor": "eks"}), Flavor::Eks),
            (json!({"kubeconfig": "k"}), Flavor::Generic),
            (
                json!({"kubeconfig": "k", "flavor": "gke"}),
                Flavor::Gke { autopilot: false },
            ),
            (
                json!({"host": "h", "auth": {"type": "google"}}),
                Flavor::Gke { autopilot: false },
            ),
            (json!("${gke_cluster.x.kubernetes}"), Flavor::Generic),
        ];
        for (reference, want) in cases {
            assert_eq!(flavor(&reference), want, "{reference}");
        }
    }

    #[test]
    fn references_parse() {
        let endpoint = parse(&gke_reference()).expect("valid");
        match endpoint {
            Reference::Endpoint { host, ca_der, auth } => {
                assert_eq!(host, "https://127.0.0.1:34567");
                assert_eq!(ca_der.len(), 1);
                assert_eq!(
                    auth,
                    Auth::Google {
                        access_token_file: Some("/tmp/token".into()),
                        credentials: None
                    }
                );
            }
            other => panic!("expected an endpoint, got {other:?}"),
        }
        let mut bare = gke_reference();
        bare["host"] = json!("34.1.2.3");
        assert!(
            matches!(parse(&bare), Ok(Reference::Endpoint { host, .. }) if host == "https://34.1.2.3")
        );
        let mut pem = gke_reference();
        pem["ca_certificate"] = json!(CA_PEM);
        assert!(parse(&pem).is_ok(), "a plain PEM is accepted too");
        assert_eq!(
            parse(&json!({"kubeconfig": "~/.kube/config", "context": "kind-x"})),
            Ok(Reference::Kubeconfig {
                path: "~/.kube/config".into(),
                context: Some("kind-x".into())
            })
        );
    }

    #[test]
    fn eks_references_parse_and_refresh_sooner() {
        let eks = json!({
            "host": "https://ABC.gr7.us-west-2.eks.amazonaws.com",
            "ca_certificate": CA_PEM,
            "auth": {"type": "aws", "cluster_name": "ml", "region": "us-west-2", "sts_endpoint": "http://127.0.0.1:5000"},
            "flavor": "eks",
            "name": "ml",
        });
        let parsed = parse(&eks).expect("valid");
        let Reference::Endpoint { auth, .. } = &parsed else {
            panic!("expected an endpoint, got {parsed:?}");
        };
        assert_eq!(
            auth,
            &Auth::Aws {
                cluster_name: "ml".into(),
                region: "us-west-2".into(),
                profile: None,
                sts_endpoint: Some("http://127.0.0.1:5000".into()),
                sandbox: false,
            }
        );
        assert_eq!(flavor(&eks), Flavor::Eks);
        // EKS tokens live 15 minutes, GKE tokens an hour.
        assert_eq!(parsed.max_client_age(), Duration::from_secs(600));
        let gke = parse(&gke_reference()).expect("valid");
        assert_eq!(gke.max_client_age(), Duration::from_secs(1800));
    }

    #[test]
    fn malformed_references_say_what_to_write() {
        let with = |key: &str, value: Value| {
            let mut r = gke_reference();
            r[key] = value;
            r
        };
        let cases = [
            (json!("batch"), "cluster", "expected a cluster reference such as \"${gke_cluster.main.kubernetes}\" or { kubeconfig = \"~/.kube/config\" }"),
            (json!({}), "cluster", "expected a cluster reference"),
            (json!({"kubeconfig": 3}), "cluster.kubeconfig", "expected a string"),
            (json!({"kubeconfig": "k", "flavor": "aks"}), "cluster.flavor", "expected one of gke, eks, generic"),
            (json!({"kubeconfig": "k", "autopilot": true}), "cluster.autopilot", "set flavor = \"gke\""),
            (json!({"kubeconfig": "k", "host": "h"}), "cluster", "not both"),
            (with("ca_certificate", json!("%%%")), "cluster.ca_certificate", "not base64"),
            (with("ca_certificate", json!("aGVsbG8=")), "cluster.ca_certificate", "holds no PEM certificate"),
            (with("ca_certificate", Value::Null), "cluster.ca_certificate", "missing"),
            (with("auth", Value::Null), "cluster.auth", "expected { type = \"google\" } or { type = \"aws\", cluster_name, region }"),
            (with("auth", json!({"type": "azure"})), "cluster.auth.type", "not a supported auth type; expected \"google\" or \"aws\""),
            (with("auth", json!({"type": "aws"})), "cluster.auth.cluster_name", "missing: EKS auth needs"),
            (with("auth", json!({"type": "aws", "cluster_name": "ml"})), "cluster.auth.region", "missing"),
            (with("auth", json!({"type": "aws", "cluster_name": "ml", "region": "us-east-1", "profile": 3})), "cluster.auth.profile", "expected a string"),
            (with("host", json!("ftp://x")), "cluster.host", "not an https URL"),
        ];
        for (reference, path, message) in cases {
            let (got_path, got) = check(&reference).expect_err(&reference.to_string());
            assert_eq!(got_path, path, "{reference}");
            assert!(got.contains(message), "{reference}: {got}");
        }
    }

    #[test]
    fn home_is_expanded_from_the_runs_environment() {
        let env: EnvFn = Arc::new(|name| (name == "HOME").then(|| "/home/ml/".to_string()));
        assert_eq!(expand_home("~/x", &env), "/home/ml/x");
        assert_eq!(expand_home("/etc/k", &env), "/etc/k");
        let none: EnvFn = Arc::new(|_| None);
        assert_eq!(expand_home("~/x", &none), "~/x");
    }

    #[tokio::test]
    async fn unreadable_kubeconfig_is_a_config_error() {
        let ctx = Ctx::new("kubernetes_job.x", json!({}));
        let Err(e) = client(
            &ctx,
            &json!({"kubeconfig": "/nonexistent/terrain/kubeconfig"}),
        )
        .await
        else {
            panic!("a missing kubeconfig must fail");
        };
        assert!(matches!(e, ProviderError::Config(_)), "{e:?}");
        assert!(
            e.to_string()
                .contains("cluster: cannot read kubeconfig /nonexistent/terrain/kubeconfig"),
            "{e}"
        );
    }

    /// When the run's connection to `reference` was built, if it has one.
    fn built(ctx: &Ctx, reference: &Value) -> Option<Instant> {
        let key = parse(reference).expect("valid").key();
        ctx.session()
            .slot::<Connections>("kubernetes.connections")
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key)
            .map(|c| c.built)
    }

    #[tokio::test]
    async fn connections_are_kept_per_cluster_for_the_run_and_never_shared_across_runs(
    ) -> Result<(), ProviderError> {
        let dir = tempfile::tempdir().map_err(|e| ProviderError::io("tempdir", "", e))?;
        let token = dir.path().join("token");
        std::fs::write(&token, "secret-token\n")
            .map_err(|e| ProviderError::io("write", "token", e))?;
        let mut reference = gke_reference();
        reference["auth"]["access_token_file"] = json!(token.to_string_lossy());
        reference["host"] = json!("https://127.0.0.1:1");
        let run = Ctx::new("kubernetes_job.a", json!({}));
        client(&run, &reference).await?;
        let key = parse(&reference).expect("valid").key();
        assert!(
            !key.contains("secret-token"),
            "the cache key holds no token"
        );
        let first = built(&run, &reference).expect("kept for the run");
        // Another call of the same run (another resource) reuses it.
        let same_run = Ctx::new("kubernetes_job.b", json!({}))
            .in_run(run.session_handle(), crate::session::process_env());
        client(&same_run, &reference).await?;
        assert_eq!(
            built(&run, &reference),
            Some(first),
            "the second call reuses it"
        );
        // Another run has its own.
        let other_run = Ctx::new("kubernetes_job.a", json!({}));
        assert_eq!(built(&other_run, &reference), None);
        client(&other_run, &reference).await?;
        assert_ne!(built(&other_run, &reference), Some(first));
        Ok(())
    }
}
