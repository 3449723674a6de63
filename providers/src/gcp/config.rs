//! The `[providers.gcp]` table: project, region and zone (with the environment variables
//! gcloud and Terraform read as fallbacks), per-API endpoint overrides, credentials,
//! polling, retries and per-kind timeouts.
//!
//! Resolution is a pure function of the table and an environment lookup so that it can
//! be tested without touching the process environment.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use crate::local::duration::parse_duration;
use crate::ProviderError;

/// The three Google APIs the provider calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Api {
    Container,
    File,
    Storage,
}

impl Api {
    /// The API's short name, as in method ids (`container.projects…`) and gcloud's
    /// `api_endpoint_overrides/<name>` properties.
    pub fn name(self) -> &'static str {
        match self {
            Api::Container => "container",
            Api::File => "file",
            Api::Storage => "storage",
        }
    }

    /// The production root URL (the discovery document's `rootUrl`).
    fn default_root(self) -> &'static str {
        match self {
            Api::Container => "https://container.googleapis.com/",
            Api::File => "https://file.googleapis.com/",
            Api::Storage => "https://storage.googleapis.com/",
        }
    }

    const ALL: [Api; 3] = [Api::Container, Api::File, Api::Storage];
}

/// Where the access token comes from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum CredentialSource {
    /// Application Default Credentials (GOOGLE_APPLICATION_CREDENTIALS, gcloud's ADC
    /// file, the metadata server), optionally from an explicit key file.
    Adc { key_file: Option<String> },
    /// A file holding an OAuth access token (gcloud's `auth/access_token_file`).
    TokenFile(String),
    /// A token given in the environment (`GOOGLE_OAUTH_ACCESS_TOKEN`). Never printed.
    Token(String),
}

/// The provider's settings, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct GcpConfig {
    pub project: Option<String>,
    pub region: Option<String>,
    pub zone: Option<String>,
    /// Root URL per API, ending in `/`.
    pub roots: BTreeMap<Api, String>,
    pub credentials: CredentialSource,
    /// First delay between operation polls; grows to `max_poll_interval`.
    pub poll_interval: Duration,
    pub max_poll_interval: Duration,
    /// First delay between retries of a failed call (doubles, with jitter).
    pub retry_base_delay: Duration,
    pub max_retries: u32,
    /// How long one long operation of a kind may take, by kind name.
    pub timeouts: BTreeMap<String, Duration>,
    /// Upper bound on one HTTP request.
    pub request_timeout: Duration,
}

/// Keys `[providers.gcp]` accepts.
pub const KEYS: &[&str] = &[
    "project",
    "region",
    "zone",
    "credentials",
    "access_token_file",
    "endpoints",
    "poll_interval",
    "max_poll_interval",
    "retry_base_delay",
    "max_retries",
    "timeouts",
    "request_timeout",
];

/// Default operation timeouts: GKE documents cluster creation at up to tens of minutes.
pub fn default_timeout(kind: &str) -> Duration {
    let minutes = match kind {
        "gke_cluster" => 45,
        "gke_node_pool" | "filestore_instance" => 30,
        _ => 5,
    };
    Duration::from_secs(minutes * 60)
}

fn string(table: &Value, key: &str) -> Result<Option<String>, ProviderError> {
    match table.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(ProviderError::Config(format!(
            "gcp.{key}: expected a string, got {other}"
        ))),
    }
}

fn duration(table: &Value, key: &str, default: Duration) -> Result<Duration, ProviderError> {
    match string(table, key)? {
        None => Ok(default),
        Some(text) => parse_duration(&text).ok_or_else(|| {
            ProviderError::Config(format!(
                "gcp.{key}: {text:?} is not a duration; write e.g. \"2s\" or \"30m\""
            ))
        }),
    }
}

impl GcpConfig {
    /// Resolves the provider table; `env` looks up environment variables.
    ///
    /// Fails when a value has the wrong type or a duration does not parse.
    pub fn resolve(
        table: &Value,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, ProviderError> {
        let env_any = |names: &[&str]| names.iter().find_map(|n| env(n).filter(|v| !v.is_empty()));
        if let Value::Object(map) = table {
            if let Some(unknown) = map.keys().find(|k| !KEYS.contains(&k.as_str())) {
                return Err(ProviderError::Config(format!(
                    "gcp.{unknown}: unknown setting; known: {}",
                    KEYS.join(", ")
                )));
            }
        }
        let project = string(table, "project")?.or_else(|| {
            env_any(&[
                "GOOGLE_CLOUD_PROJECT",
                "GOOGLE_PROJECT",
                "CLOUDSDK_CORE_PROJECT",
            ])
        });
        let region = string(table, "region")?
            .or_else(|| env_any(&["GOOGLE_REGION", "CLOUDSDK_COMPUTE_REGION"]));
        let zone =
            string(table, "zone")?.or_else(|| env_any(&["GOOGLE_ZONE", "CLOUDSDK_COMPUTE_ZONE"]));

        let endpoints = table.get("endpoints").cloned().unwrap_or(Value::Null);
        let mut roots = BTreeMap::new();
        for api in Api::ALL {
            let var = format!(
                "CLOUDSDK_API_ENDPOINT_OVERRIDES_{}",
                api.name().to_uppercase()
            );
            let given =
                string(&endpoints, api.name())?.or_else(|| env(&var).filter(|v| !v.is_empty()));
            roots.insert(
                api,
                given.map_or_else(
                    || api.default_root().to_string(),
                    |g| normalize_root(api, &g),
                ),
            );
        }

        let credentials = credential_source(
            string(table, "access_token_file")?,
            string(table, "credentials")?,
            env,
        );

        let mut timeouts = BTreeMap::new();
        if let Some(Value::Object(t)) = table.get("timeouts") {
            for (kind, value) in t {
                let text = value.as_str().unwrap_or_default();
                let d = parse_duration(text).ok_or_else(|| {
                    ProviderError::Config(format!(
                        "gcp.timeouts.{kind}: {value} is not a duration; write e.g. \"40m\""
                    ))
                })?;
                timeouts.insert(kind.clone(), d);
            }
        }
        let max_retries = match table.get("max_retries") {
            None | Some(Value::Null) => 8,
            Some(v) => v
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| {
                    ProviderError::Config(format!(
                        "gcp.max_retries: expected a small non-negative integer, got {v}"
                    ))
                })?,
        };
        Ok(Self {
            project,
            region,
            zone,
            roots,
            credentials,
            poll_interval: duration(table, "poll_interval", Duration::from_secs(2))?,
            max_poll_interval: duration(table, "max_poll_interval", Duration::from_secs(15))?,
            retry_base_delay: duration(table, "retry_base_delay", Duration::from_secs(1))?,
            max_retries,
            timeouts,
            request_timeout: duration(table, "request_timeout", Duration::from_secs(60))?,
        })
    }

    /// Resolves with the process environment.
    pub fn from_ctx(table: &Value) -> Result<Self, ProviderError> {
        Self::resolve(table, &|name| std::env::var(name).ok())
    }

    /// The project, or an error saying how to set it.
    pub fn project(&self) -> Result<&str, ProviderError> {
        self.project.as_deref().ok_or_else(|| {
            ProviderError::Config(
                "no project: set `project` in [providers.gcp] or GOOGLE_CLOUD_PROJECT".to_string(),
            )
        })
    }

    /// The root URL of `api`, ending in `/`.
    pub fn root(&self, api: Api) -> &str {
        self.roots
            .get(&api)
            .map_or(api.default_root(), String::as_str)
    }

    /// The operation timeout for `kind`.
    pub fn timeout(&self, kind: &str) -> Duration {
        self.timeouts
            .get(kind)
            .copied()
            .unwrap_or_else(|| default_timeout(kind))
    }
}

/// Where tokens come from, given the explicit settings and the environment, in gcloud's
/// order: an access token file (`access_token_file`, else CLOUDSDK_AUTH_ACCESS_TOKEN_FILE),
/// else a token in GOOGLE_OAUTH_ACCESS_TOKEN, else Application Default Credentials
/// (from the `credentials` key file when given).
pub fn credential_source(
    access_token_file: Option<String>,
    credentials: Option<String>,
    env: &dyn Fn(&str) -> Option<String>,
) -> CredentialSource {
    let env_set = |name: &str| env(name).filter(|v| !v.is_empty());
    if let Some(file) = access_token_file
        .filter(|f| !f.is_empty())
        .or_else(|| env_set("CLOUDSDK_AUTH_ACCESS_TOKEN_FILE"))
    {
        CredentialSource::TokenFile(file)
    } else if let Some(token) = env_set("GOOGLE_OAUTH_ACCESS_TOKEN") {
        CredentialSource::Token(token)
    } else {
        CredentialSource::Adc {
            key_file: credentials.filter(|c| !c.is_empty()),
        }
    }
}

/// Accepts both a root URL and gcloud's storage override form (`…/storage/v1/`), and
/// makes sure it ends in `/`.
fn normalize_root(api: Api, given: &str) -> String {
    let mut root = given.trim().to_string();
    if !root.ends_with('/') {
        root.push('/');
    }
    if api == Api::Storage {
        if let Some(stripped) = root.strip_suffix("storage/v1/") {
            root = stripped.to_string();
        }
    }
    root
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn table_wins_over_environment_and_environment_fills_gaps() {
        let env = env_of(&[
            ("GOOGLE_CLOUD_PROJECT", "from-env"),
            ("CLOUDSDK_COMPUTE_REGION", "europe-west4"),
        ]);
        let c = GcpConfig::resolve(&json!({"project": "p"}), &env).expect("resolves");
        assert_eq!(c.project.as_deref(), Some("p"));
        assert_eq!(c.region.as_deref(), Some("europe-west4"));
        assert_eq!(c.root(Api::Container), "https://container.googleapis.com/");
        assert_eq!(c.credentials, CredentialSource::Adc { key_file: None });
        assert_eq!(c.timeout("gke_cluster"), Duration::from_secs(45 * 60));
    }

    #[test]
    fn endpoint_overrides_from_table_or_gcloud_variables() {
        let env = env_of(&[
            (
                "CLOUDSDK_API_ENDPOINT_OVERRIDES_FILE",
                "http://127.0.0.1:9/file",
            ),
            (
                "CLOUDSDK_API_ENDPOINT_OVERRIDES_STORAGE",
                "http://127.0.0.1:9/storage/storage/v1/",
            ),
            ("CLOUDSDK_AUTH_ACCESS_TOKEN_FILE", "/tmp/token"),
        ]);
        let c = GcpConfig::resolve(
            &json!({"endpoints": {"container": "http://127.0.0.1:9/container/"}}),
            &env,
        )
        .expect("resolves");
        assert_eq!(c.root(Api::Container), "http://127.0.0.1:9/container/");
        assert_eq!(c.root(Api::File), "http://127.0.0.1:9/file/");
        assert_eq!(c.root(Api::Storage), "http://127.0.0.1:9/storage/");
        assert_eq!(
            c.credentials,
            CredentialSource::TokenFile("/tmp/token".into())
        );
    }

    #[test]
    fn bad_settings_are_named() {
        let none = env_of(&[]);
        let e =
            GcpConfig::resolve(&json!({"poll_interval": "soon"}), &none).expect_err("bad duration");
        assert!(e.to_string().contains("gcp.poll_interval"), "{e}");
        let e = GcpConfig::resolve(&json!({"projet": "p"}), &none).expect_err("unknown key");
        assert!(e.to_string().contains("gcp.projet: unknown setting"), "{e}");
        let e = GcpConfig::resolve(&json!({"timeouts": {"gke_cluster": 5}}), &none)
            .expect_err("bad timeout");
        assert!(e.to_string().contains("gcp.timeouts.gke_cluster"), "{e}");
        let c = GcpConfig::resolve(&json!({}), &none).expect("empty is fine");
        assert!(c
            .project()
            .expect_err("no project")
            .to_string()
            .contains("GOOGLE_CLOUD_PROJECT"));
    }
}
