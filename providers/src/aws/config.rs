//! `[providers.aws]`: region, profile, endpoint overrides, retries and timeouts, and the
//! SDK clients built from them. Credentials come from the SDK's default chain
//! (environment, shared profile, SSO, container and instance metadata), its environment
//! step read from the run's environment as the engine passes it; a stack never holds
//! keys. Clients are built once per distinct configuration and shared, because
//! loading the chain may read files or call the metadata service.
//!
//! ```toml
//! [providers.aws]
//! region = "us-west-2"
//! profile = "ml"                        # optional
//! endpoint = "http://127.0.0.1:5000"    # optional: one URL for every service (sandbox, moto)
//! endpoints = { s3 = "http://…" }       # optional: per service (see SERVICES)
//! retry_mode = "standard"               # or "adaptive" (client-side rate limiting)
//! max_attempts = 5
//! connect_timeout_secs = 10
//! attempt_timeout_secs = 60
//! sandbox = true                        # set by `--sandbox`: the sandbox's fixed credentials
//! ```
//!
//! [`validate`] checks every setting offline (the region against the catalog),
//! reporting each problem at the setting's key.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, Region, SdkConfig};
use serde::Deserialize;
use serde_json::Value;

use super::catalog;
// The crate's one did-you-mean and URL check live with the GCP provider, which had them
// first; they know nothing of Google.
use crate::gcp::catalog::{close_matches, did_you_mean_any};
use crate::gcp::config::check_url;
use crate::protocol::is_unknown;
use crate::{Ctx, Invalid, ProviderError};

/// How the SDK retries throttling and transient errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum RetryMode {
    /// Exponential backoff with jitter and a retry quota.
    #[default]
    Standard,
    /// Standard plus a client-side rate limiter that slows down after throttling.
    Adaptive,
}

fn five() -> u32 {
    5
}

fn ten() -> u64 {
    10
}

fn sixty() -> u64 {
    60
}

/// The resolved `[providers.aws]` table.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AwsConfig {
    /// Falls back to `AWS_REGION` / `AWS_DEFAULT_REGION`, then the profile's region.
    #[serde(default)]
    pub region: Option<String>,
    #[serde(default)]
    pub profile: Option<String>,
    /// One endpoint for every service (the sandbox, moto, LocalStack).
    #[serde(default)]
    pub endpoint: Option<String>,
    /// Per-service endpoints (`ec2`, `eks`, `iam`, `kms`, `s3`, `sagemaker`,
    /// `servicequotas`, `sts`), overriding `endpoint`.
    #[serde(default)]
    pub endpoints: BTreeMap<String, String>,
    #[serde(default)]
    pub retry_mode: RetryMode,
    /// Attempts per call, the first included.
    #[serde(default = "five")]
    pub max_attempts: u32,
    #[serde(default = "ten")]
    pub connect_timeout_secs: u64,
    /// Per attempt: a hung connection is abandoned and retried rather than waited on.
    #[serde(default = "sixty")]
    pub attempt_timeout_secs: u64,
    /// Signs with the fixed, non-secret credentials the local sandbox accepts instead of
    /// the default chain (`terrain … --sandbox` sets this with `endpoint`).
    #[serde(default)]
    pub sandbox: bool,
}

/// The access key the sandbox's requests are signed with (it checks the signature's
/// shape and scope, not the key, so this is no secret).
pub const SANDBOX_ACCESS_KEY: &str = "TERRAINSANDBOX";

/// The services terrain calls (`ec2` and `servicequotas` only to read capacity at plan
/// time).
pub const SERVICES: &[&str] = &[
    "ec2",
    "eks",
    "iam",
    "kms",
    "s3",
    "sagemaker",
    "servicequotas",
    "sts",
];

impl AwsConfig {
    /// Reads the provider table (`Value::Null` or `{}` when the stack has none).
    pub fn from_ctx(config: &Value) -> Result<AwsConfig, ProviderError> {
        let table = if config.is_null() {
            Value::Object(Default::default())
        } else {
            config.clone()
        };
        let cfg: AwsConfig = serde_json::from_value(table)
            .map_err(|e| ProviderError::Config(format!("[providers.aws]: {e}")))?;
        if let Some(unknown) = cfg
            .endpoints
            .keys()
            .find(|k| !SERVICES.contains(&k.as_str()))
        {
            return Err(ProviderError::Config(format!(
                "[providers.aws] endpoints: unknown service {unknown:?}; use {}",
                SERVICES.join(", ")
            )));
        }
        if cfg.max_attempts == 0 {
            return Err(ProviderError::Config(
                "[providers.aws] max_attempts must be at least 1".into(),
            ));
        }
        Ok(cfg)
    }

    /// The endpoint override for `service`, if any.
    pub fn endpoint_for(&self, service: &str) -> Option<&str> {
        self.endpoints
            .get(service)
            .or(self.endpoint.as_ref())
            .map(String::as_str)
    }

    /// The region the SDK will use: the table's, else the environment's (as the run
    /// sees it).
    pub fn region_or_env(&self, ctx: &Ctx) -> Option<String> {
        self.region
            .clone()
            .or_else(|| ctx.env("AWS_REGION"))
            .or_else(|| ctx.env("AWS_DEFAULT_REGION"))
            .filter(|r| !r.is_empty())
    }
}

/// The provider's configure step: the stack's table with the region the environment
/// gives (AWS_REGION, AWS_DEFAULT_REGION) written in where the table names none. The
/// SDK's own chains (credentials, profiles, endpoint variables) are read by the SDK.
pub fn configure(table: Value, env: &dyn Fn(&str) -> Option<String>) -> Value {
    let mut map = match table {
        Value::Object(map) => map,
        Value::Null => serde_json::Map::new(),
        other => return other,
    };
    if !map.contains_key("region") {
        if let Some(region) = ["AWS_REGION", "AWS_DEFAULT_REGION"]
            .iter()
            .find_map(|n| env(n).filter(|v| !v.is_empty()))
        {
            map.insert("region".into(), Value::String(region));
        }
    }
    Value::Object(map)
}

/// Keys `[providers.aws]` accepts (the fields of [`AwsConfig`]).
pub const KEYS: &[&str] = &[
    "region",
    "profile",
    "endpoint",
    "endpoints",
    "retry_mode",
    "max_attempts",
    "connect_timeout_secs",
    "attempt_timeout_secs",
    "sandbox",
];

/// Problems with a `[providers.aws]` table found without the network or the
/// environment, each at the setting's key (`region`, `endpoints.s3`): unknown settings,
/// wrong types, a region missing from the catalog, endpoints that are not http(s) URLs,
/// an unknown retry mode, and attempts or timeouts below 1. Values not known until
/// apply, and unset ones (`null`), are skipped.
pub fn validate(config: &Value) -> Vec<Invalid> {
    let mut out = Vec::new();
    let table = match config {
        Value::Object(table) => table,
        Value::Null => return out,
        other if is_unknown(other) => return out,
        other => {
            out.push(Invalid::at(
                "",
                format!("[providers.aws] must be a table, got {other}"),
            ));
            return out;
        }
    };
    for (key, value) in table {
        let at = key.as_str();
        // Objects are checked entry by entry: one unknown entry spares only itself.
        if value.is_null() || (!value.is_object() && is_unknown(value)) {
            continue;
        }
        let problem = match at {
            "region" => string_setting(value).and_then(|r| catalog::check_region(&r)),
            "profile" => string_setting(value).map(drop),
            "endpoint" => string_setting(value).and_then(|u| check_url(&u)),
            "endpoints" => match value {
                Value::Object(entries) => {
                    for (service, url) in entries {
                        if url.is_null() || is_unknown(url) {
                            continue;
                        }
                        let checked = if SERVICES.contains(&service.as_str()) {
                            string_setting(url).and_then(|u| check_url(&u))
                        } else {
                            Err(unknown_entry("service", service, SERVICES))
                        };
                        if let Err(m) = checked {
                            out.push(Invalid::at(&format!("endpoints.{service}"), m));
                        }
                    }
                    Ok(())
                }
                other => Err(format!("expected a table of service = URL, got {other}")),
            },
            "retry_mode" => string_setting(value).and_then(|m| {
                const MODES: &[&str] = &["standard", "adaptive"];
                if MODES.contains(&m.as_str()) {
                    Ok(())
                } else {
                    Err(format!(
                        "`{m}` is not a retry mode{}; use standard or adaptive",
                        did_you_mean_any(&close_matches(&m, MODES, 1))
                    ))
                }
            }),
            "max_attempts" => match value.as_u64().map(u32::try_from) {
                Some(Ok(n)) if n >= 1 => Ok(()),
                Some(Ok(_)) => Err("must be at least 1 (the first attempt counts)".to_string()),
                _ => Err(format!(
                    "expected a whole number of attempts (the default is 5), got {value}"
                )),
            },
            "connect_timeout_secs" | "attempt_timeout_secs" => match value.as_u64() {
                Some(n) if n >= 1 => Ok(()),
                Some(_) => Err("must be at least 1 second".to_string()),
                None => Err(format!("expected a whole number of seconds, got {value}")),
            },
            "sandbox" => match value {
                Value::Bool(_) => Ok(()),
                other => Err(format!("expected true or false, got {other}")),
            },
            _ => Err(unknown_entry("setting of [providers.aws]", at, KEYS)),
        };
        if let Err(m) = problem {
            out.push(Invalid::at(at, m));
        }
    }
    out
}

/// The table's region when it is set, known and in the catalog: what offline checks of
/// region-bearing fields (ARNs, KMS keys) compare against. The environment is not read.
pub fn catalog_region(config: &Value) -> Option<&str> {
    config
        .get("region")
        .and_then(Value::as_str)
        .filter(|r| catalog::region(r).is_some())
}

fn string_setting(value: &Value) -> Result<String, String> {
    value
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| format!("expected a string, got {value}"))
}

/// "unknown setting of …; did you mean `x`? known: a, b".
fn unknown_entry(what: &str, name: &str, known: &[&str]) -> String {
    format!(
        "unknown {what}{}; known: {}",
        did_you_mean_any(&close_matches(name, known, 3)),
        known.join(", ")
    )
}

/// The run's loaded SDK configurations, by provider table.
type Loaded = Mutex<BTreeMap<String, SdkConfig>>;

/// What `sdk_config` loads for a table in an environment: the keys the environment
/// gives (none when the table names a profile or the sandbox), the region, and the key
/// the run keeps the loaded configuration under.
struct Loading {
    keys: Option<(String, String)>,
    region: Option<String>,
    key: String,
}

fn loading(env: &crate::EnvFn, cfg: &AwsConfig) -> Loading {
    let var = |name: &str| env(name).filter(|v| !v.is_empty());
    let keys = match (&cfg.profile, cfg.sandbox) {
        (None, false) => var("AWS_ACCESS_KEY_ID").zip(var("AWS_SECRET_ACCESS_KEY")),
        _ => None,
    };
    let region = cfg
        .region
        .clone()
        .or_else(|| var("AWS_REGION"))
        .or_else(|| var("AWS_DEFAULT_REGION"));
    // Runs with other keys or regions load apart (the key id names them, never the
    // secret).
    let key = format!("{cfg:?} {region:?} {:?}", keys.as_ref().map(|(id, _)| id));
    Loading { keys, region, key }
}

/// The key a run keeps what it loads for `cfg` in environment `env` under: equal for
/// two calls exactly when `sdk_config` gives them the same configuration.
pub(crate) fn run_key(env: &crate::EnvFn, cfg: &AwsConfig) -> String {
    loading(env, cfg).key
}

/// The SDK configuration for a provider table: credentials chain, region, retries and
/// timeouts (endpoints are set per client). Loaded once per provider table in a run
/// (kept in its session), so every client of one provider instance shares one
/// credentials cache.
///
/// The environment is the run's (`env`, what the engine passes down), not read behind
/// its back: keys in `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY` (and
/// `AWS_SESSION_TOKEN`) are the credentials, as they are first in the SDK's chain, and
/// `AWS_REGION`/`AWS_DEFAULT_REGION` the region where the table names none; the rest
/// of the chain (profiles, SSO, metadata) is the SDK's. A table naming a `profile`
/// takes its credentials from that profile.
pub async fn sdk_config(
    session: &crate::Session,
    env: &crate::EnvFn,
    cfg: &AwsConfig,
) -> Result<SdkConfig, ProviderError> {
    let var = |name: &str| env(name).filter(|v| !v.is_empty());
    let Loading { keys, region, key } = loading(env, cfg);
    let cache = session.slot::<Loaded>("aws.sdk_configs");
    if let Some(found) = cache
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(&key)
    {
        return Ok(found.clone());
    }
    let retry = match cfg.retry_mode {
        RetryMode::Standard => RetryConfig::standard(),
        RetryMode::Adaptive => RetryConfig::adaptive(),
    }
    .with_max_attempts(cfg.max_attempts)
    .with_initial_backoff(Duration::from_millis(200));
    let timeouts = TimeoutConfig::builder()
        .connect_timeout(Duration::from_secs(cfg.connect_timeout_secs))
        .operation_attempt_timeout(Duration::from_secs(cfg.attempt_timeout_secs))
        .build();
    let mut loader = aws_config::defaults(BehaviorVersion::latest())
        .retry_config(retry)
        .timeout_config(timeouts);
    if let Some(region) = region {
        loader = loader.region(Region::new(region));
    }
    if let Some(profile) = &cfg.profile {
        loader = loader.profile_name(profile);
    }
    if cfg.sandbox {
        loader = loader.credentials_provider(aws_credential_types::Credentials::new(
            SANDBOX_ACCESS_KEY,
            "terrain-sandbox-secret",
            None,
            None,
            "terrain-sandbox",
        ));
    }
    if let Some((id, secret)) = keys {
        loader = loader.credentials_provider(aws_credential_types::Credentials::new(
            id,
            secret,
            var("AWS_SESSION_TOKEN"),
            None,
            "Environment",
        ));
    }
    let loaded = loader.load().await;
    if loaded.region().is_none() {
        return Err(ProviderError::Config(
            "no AWS region: set region in [providers.aws], or AWS_REGION in the environment".into(),
        ));
    }
    if loaded.credentials_provider().is_none() {
        return Err(ProviderError::Config(
            "no AWS credentials provider: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, or run `aws sso login`; or run with --sandbox to try the stack without an account".into(),
        ));
    }
    cache
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(key, loaded.clone());
    Ok(loaded)
}

/// The provider table of `ctx`, resolved.
pub fn of(ctx: &Ctx) -> Result<AwsConfig, ProviderError> {
    AwsConfig::from_ctx(&ctx.config)
}

/// An EKS client for `ctx`'s provider table.
pub async fn eks(ctx: &Ctx) -> Result<aws_sdk_eks::Client, ProviderError> {
    let cfg = of(ctx)?;
    let sdk = sdk_config(ctx.session(), ctx.env_fn(), &cfg).await?;
    let mut b = aws_sdk_eks::config::Builder::from(&sdk);
    if let Some(url) = cfg.endpoint_for("eks") {
        b = b.endpoint_url(url);
    }
    Ok(aws_sdk_eks::Client::from_conf(b.build()))
}

/// An S3 client for `ctx`'s provider table; path-style addressing whenever the endpoint
/// is overridden (emulators on loopback have no per-bucket host names).
pub async fn s3(ctx: &Ctx) -> Result<aws_sdk_s3::Client, ProviderError> {
    let cfg = of(ctx)?;
    let sdk = sdk_config(ctx.session(), ctx.env_fn(), &cfg).await?;
    let mut b = aws_sdk_s3::config::Builder::from(&sdk);
    if let Some(url) = cfg.endpoint_for("s3") {
        b = b.endpoint_url(url);
    }
    // The SDK also takes endpoints from AWS_ENDPOINT_URL(_S3) and the shared config.
    if cfg.endpoint_for("s3").is_some() || sdk.endpoint_url().is_some() || env_endpoint(ctx, "S3") {
        b = b.force_path_style(true);
    }
    Ok(aws_sdk_s3::Client::from_conf(b.build()))
}

/// Whether the environment overrides `service`'s endpoint (`AWS_ENDPOINT_URL_S3`,
/// `AWS_ENDPOINT_URL`), which the SDK honours by itself.
fn env_endpoint(ctx: &Ctx, service: &str) -> bool {
    [
        format!("AWS_ENDPOINT_URL_{service}"),
        "AWS_ENDPOINT_URL".to_string(),
    ]
    .iter()
    .any(|k| ctx.env(k).is_some_and(|v| !v.is_empty()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tables_resolve_with_defaults() {
        let cfg = AwsConfig::from_ctx(&json!({"region": "us-west-2", "endpoint": "http://127.0.0.1:1", "endpoints": {"s3": "http://s3"}})).expect("valid");
        assert_eq!(cfg.max_attempts, 5);
        assert_eq!(cfg.retry_mode, RetryMode::Standard);
        assert_eq!(cfg.endpoint_for("s3"), Some("http://s3"));
        assert_eq!(cfg.endpoint_for("eks"), Some("http://127.0.0.1:1"));
        assert!(AwsConfig::from_ctx(&Value::Null).is_ok());
    }

    #[test]
    fn bad_tables_say_what_is_wrong() {
        let e = AwsConfig::from_ctx(&json!({"endpoints": {"lambda": "x"}}))
            .expect_err("unknown service");
        assert!(e.to_string().contains("unknown service \"lambda\""), "{e}");
        let e = AwsConfig::from_ctx(&json!({"regoin": "x"})).expect_err("typo");
        assert!(e.to_string().contains("regoin"), "{e}");
        let e = AwsConfig::from_ctx(&json!({"retry_mode": "eager"})).expect_err("mode");
        assert!(e.to_string().contains("eager"), "{e}");
    }

    #[test]
    fn keys_are_the_fields_of_the_config() {
        // A table with every key resolves, so KEYS and the struct agree.
        let all: serde_json::Map<String, Value> =
            KEYS.iter().map(|k| (k.to_string(), Value::Null)).collect();
        let mut table = Value::Object(all);
        table["endpoints"] = json!({});
        table["retry_mode"] = json!("standard");
        table["max_attempts"] = json!(5);
        table["connect_timeout_secs"] = json!(10);
        table["attempt_timeout_secs"] = json!(60);
        table["sandbox"] = json!(false);
        assert!(AwsConfig::from_ctx(&table).is_ok(), "{table}");
    }

    fn problems(table: Value) -> Vec<(String, String)> {
        validate(&table)
            .into_iter()
            .map(|p| (p.path.join("."), p.message))
            .collect()
    }

    #[test]
    fn valid_tables_have_no_problems() {
        assert!(problems(Value::Null).is_empty());
        let full = json!({
            "region": "us-gov-west-1",
            "profile": "ml",
            "endpoint": "http://127.0.0.1:5000",
            "endpoints": {"s3": "https://s3.example.com", "eks": "http://127.0.0.1:1/"},
            "retry_mode": "adaptive",
            "max_attempts": 3,
            "connect_timeout_secs": 5,
            "attempt_timeout_secs": 30,
            "sandbox": true,
        });
        assert_eq!(problems(full), Vec::<(String, String)>::new());
        // The sandbox's overrides unset the profile with null.
        assert!(problems(json!({"profile": null, "endpoints": {}})).is_empty());
    }

    #[test]
    fn each_setting_is_checked_at_its_key() {
        let cases: &[(Value, &str, &str)] = &[
            (
                json!({"region": "us-east"}),
                "region",
                "`us-east` is not an AWS region; did you mean `us-east-1`, `us-east-2`?",
            ),
            (
                json!({"region": "us-west-2b"}),
                "region",
                "is an Availability Zone, not a region; its region is us-west-2",
            ),
            (
                json!({"region": ["us-east-1"]}),
                "region",
                "expected a string",
            ),
            (
                json!({"regoin": "us-east-1"}),
                "regoin",
                "unknown setting of [providers.aws]; did you mean `region`?",
            ),
            (
                json!({"endpoint": "localhost:5000"}),
                "endpoint",
                "`localhost:5000` is not an http or https URL",
            ),
            (
                json!({"endpoints": {"lambda": "http://x"}}),
                "endpoints.lambda",
                "unknown service; known: ec2, eks, iam, kms, s3, sagemaker, servicequotas, sts",
            ),
            (
                json!({"endpoints": {"s4": "http://x"}}),
                "endpoints.s4",
                "did you mean `s3`?",
            ),
            (
                json!({"endpoints": {"s3": "nowhere"}}),
                "endpoints.s3",
                "is not a URL",
            ),
            (
                json!({"endpoints": "http://x"}),
                "endpoints",
                "expected a table",
            ),
            (
                json!({"retry_mode": "adaptiv"}),
                "retry_mode",
                "`adaptiv` is not a retry mode; did you mean `adaptive`?",
            ),
            (json!({"max_attempts": 0}), "max_attempts", "at least 1"),
            (json!({"max_attempts": "5"}), "max_attempts", "whole number"),
            (
                json!({"connect_timeout_secs": 0}),
                "connect_timeout_secs",
                "at least 1 second",
            ),
            (
                json!({"attempt_timeout_secs": 2.5}),
                "attempt_timeout_secs",
                "whole number of seconds",
            ),
            (
                json!({"sandbox": "yes"}),
                "sandbox",
                "expected true or false",
            ),
        ];
        for (table, path, want) in cases {
            let got = problems(table.clone());
            assert!(
                got.iter().any(|(p, m)| p == path && m.contains(want)),
                "{table}: want {path}: {want}, got {got:?}"
            );
        }
        assert!(matches!(validate(&json!(3)).as_slice(), [p] if p.path.is_empty()));
    }

    #[test]
    fn unknown_values_are_left_for_apply() {
        let unknown = crate::protocol::UNKNOWN;
        let table = json!({"region": unknown, "endpoints": {"s3": unknown, "eks": "x"}});
        assert_eq!(problems(table.clone()).len(), 1, "{:?}", problems(table));
        assert_eq!(catalog_region(&json!({"region": unknown})), None);
        assert_eq!(catalog_region(&json!({"region": "us-west9"})), None);
        assert_eq!(
            catalog_region(&json!({"region": "eu-west-1"})),
            Some("eu-west-1")
        );
    }

    /// A context whose environment is `vars` (and nothing else).
    fn ctx_with(config: Value, vars: &[(&'static str, &'static str)]) -> Ctx {
        let vars: Vec<(&'static str, &'static str)> = vars.to_vec();
        let env: crate::EnvFn = std::sync::Arc::new(move |name: &str| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        });
        Ctx::new("s3_bucket.b", config).in_run(crate::Session::new(), env)
    }

    async fn access_key(sdk: &SdkConfig) -> String {
        use aws_credential_types::provider::ProvideCredentials;
        let provider = sdk.credentials_provider().expect("a provider");
        let creds = provider.provide_credentials().await.expect("credentials");
        creds.access_key_id().to_string()
    }

    #[tokio::test]
    async fn keys_and_region_come_from_the_contexts_environment_not_the_processes() {
        let ctx = ctx_with(
            json!({}),
            &[
                ("AWS_ACCESS_KEY_ID", "AKIDFROMTHECONTEXT"),
                ("AWS_SECRET_ACCESS_KEY", "context-secret"),
                ("AWS_REGION", "eu-west-3"),
            ],
        );
        let cfg = of(&ctx).expect("valid");
        let sdk = sdk_config(ctx.session(), ctx.env_fn(), &cfg)
            .await
            .expect("loads");
        assert_eq!(sdk.region().map(|r| r.as_ref()), Some("eu-west-3"));
        assert_eq!(access_key(&sdk).await, "AKIDFROMTHECONTEXT");

        // Another environment in the same session loads apart: no keys are shared.
        let env: crate::EnvFn = std::sync::Arc::new(|name: &str| match name {
            "AWS_ACCESS_KEY_ID" => Some("AKIDANOTHERRUN".into()),
            "AWS_SECRET_ACCESS_KEY" => Some("other-secret".into()),
            _ => None,
        });
        let other = Ctx::new("s3_bucket.c", json!({"region": "us-east-2"}))
            .in_run(ctx.session_handle(), env);
        let cfg = of(&other).expect("valid");
        let sdk = sdk_config(other.session(), other.env_fn(), &cfg)
            .await
            .expect("loads");
        assert_eq!(sdk.region().map(|r| r.as_ref()), Some("us-east-2"));
        assert_eq!(access_key(&sdk).await, "AKIDANOTHERRUN");
    }

    #[tokio::test]
    async fn the_sandbox_signs_with_its_own_keys_whatever_the_environment_holds() {
        let ctx = ctx_with(
            json!({"region": "us-east-1", "sandbox": true}),
            &[
                ("AWS_ACCESS_KEY_ID", "AKIDFROMTHECONTEXT"),
                ("AWS_SECRET_ACCESS_KEY", "context-secret"),
            ],
        );
        let cfg = of(&ctx).expect("valid");
        let sdk = sdk_config(ctx.session(), ctx.env_fn(), &cfg)
            .await
            .expect("loads");
        assert_eq!(access_key(&sdk).await, SANDBOX_ACCESS_KEY);
    }
}
