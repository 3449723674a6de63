//! The `[providers.gcp]` table: project, region and zone (with the environment variables
//! gcloud and Terraform read as fallbacks), per-API endpoint overrides, credentials,
//! polling, retries and per-kind timeouts.
//!
//! Resolution is a pure function of the table and an environment lookup so that it can
//! be tested without touching the process environment. [`validate`] checks every
//! setting of the table offline (regions and zones against the catalog), reporting each
//! problem at the setting's key.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use super::catalog;
use crate::local::duration::{format_duration, parse_duration};
use crate::protocol::is_unknown;
use crate::{Invalid, ProviderError};

/// The Google APIs the provider calls: those it manages objects with (GKE, Filestore,
/// Cloud Storage, Service Usage, IAM, Resource Manager), and the two its capacity
/// preflight reads (Compute Engine quotas, machine and accelerator types; Cloud TPU
/// accelerator types).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Api {
    Container,
    File,
    Storage,
    Compute,
    Tpu,
    ServiceUsage,
    Iam,
    ResourceManager,
}

impl Api {
    /// The API's short name, as in method ids (`container.projects…`) and gcloud's
    /// `api_endpoint_overrides/<name>` properties.
    pub fn name(self) -> &'static str {
        match self {
            Api::Container => "container",
            Api::File => "file",
            Api::Storage => "storage",
            Api::Compute => "compute",
            Api::Tpu => "tpu",
            Api::ServiceUsage => "serviceusage",
            Api::Iam => "iam",
            Api::ResourceManager => "cloudresourcemanager",
        }
    }

    /// The production root URL (the discovery document's `rootUrl`).
    fn default_root(self) -> &'static str {
        match self {
            Api::Container => "https://container.googleapis.com/",
            Api::File => "https://file.googleapis.com/",
            Api::Storage => "https://storage.googleapis.com/",
            Api::Compute => "https://compute.googleapis.com/",
            Api::Tpu => "https://tpu.googleapis.com/",
            Api::ServiceUsage => "https://serviceusage.googleapis.com/",
            Api::Iam => "https://iam.googleapis.com/",
            Api::ResourceManager => "https://cloudresourcemanager.googleapis.com/",
        }
    }

    /// The service name Service Usage knows the API by.
    pub fn service(self) -> &'static str {
        match self {
            Api::Container => "container.googleapis.com",
            Api::File => "file.googleapis.com",
            Api::Storage => "storage.googleapis.com",
            Api::Compute => "compute.googleapis.com",
            Api::Tpu => "tpu.googleapis.com",
            Api::ServiceUsage => "serviceusage.googleapis.com",
            Api::Iam => "iam.googleapis.com",
            Api::ResourceManager => "cloudresourcemanager.googleapis.com",
        }
    }

    const ALL: [Api; 8] = [
        Api::Container,
        Api::File,
        Api::Storage,
        Api::Compute,
        Api::Tpu,
        Api::ServiceUsage,
        Api::Iam,
        Api::ResourceManager,
    ];
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

    /// Resolves a table the engine has configured ([`configure`]): what the
    /// environment gives is in it already, so nothing is read here.
    pub fn from_ctx(table: &Value) -> Result<Self, ProviderError> {
        Self::resolve(table, &|_| None)
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

    /// The region when it is one of the catalog (not unknown, not made up): what
    /// offline checks of a resource's location compare against.
    pub fn catalog_region(&self) -> Option<&str> {
        self.region
            .as_deref()
            .filter(|r| catalog::region(r).is_some())
    }

    /// The operation timeout for `kind`.
    pub fn timeout(&self, kind: &str) -> Duration {
        self.timeouts
            .get(kind)
            .copied()
            .unwrap_or_else(|| default_timeout(kind))
    }
}

/// The provider's configure step: the stack's table with what the environment gives
/// written in where the table is silent (project, region, zone, endpoint overrides,
/// the access token file), so every later use of the table, offline or not, sees one
/// configuration. Secrets are not copied: a token in GOOGLE_OAUTH_ACCESS_TOKEN is read
/// by the client, from the run's environment, when it is built.
pub fn configure(table: Value, env: &dyn Fn(&str) -> Option<String>) -> Value {
    let mut map = match table {
        Value::Object(map) => map,
        Value::Null => serde_json::Map::new(),
        other => return other,
    };
    let env_any = |names: &[&str]| names.iter().find_map(|n| env(n).filter(|v| !v.is_empty()));
    for (key, names) in [
        (
            "project",
            &[
                "GOOGLE_CLOUD_PROJECT",
                "GOOGLE_PROJECT",
                "CLOUDSDK_CORE_PROJECT",
            ][..],
        ),
        ("region", &["GOOGLE_REGION", "CLOUDSDK_COMPUTE_REGION"][..]),
        ("zone", &["GOOGLE_ZONE", "CLOUDSDK_COMPUTE_ZONE"][..]),
        (
            "access_token_file",
            &["CLOUDSDK_AUTH_ACCESS_TOKEN_FILE"][..],
        ),
    ] {
        if !map.contains_key(key) {
            if let Some(v) = env_any(names) {
                map.insert(key.to_string(), Value::String(v));
            }
        }
    }
    for api in Api::ALL {
        let var = format!(
            "CLOUDSDK_API_ENDPOINT_OVERRIDES_{}",
            api.name().to_uppercase()
        );
        let Some(url) = env(&var).filter(|v| !v.is_empty()) else {
            continue;
        };
        let endpoints = map
            .entry("endpoints")
            .or_insert_with(|| Value::Object(serde_json::Map::new()));
        if let Value::Object(e) = endpoints {
            e.entry(api.name()).or_insert(Value::String(url));
        }
    }
    Value::Object(map)
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
    // gcloud's overrides include the service path (`…/storage/v1/`, `…/compute/v1/`);
    // requests here carry it themselves.
    let service_path = match api {
        Api::Storage => Some("storage/v1/"),
        Api::Compute => Some("compute/v1/"),
        _ => None,
    };
    if let Some(stripped) = service_path.and_then(|p| root.strip_suffix(p)) {
        root = stripped.to_string();
    }
    root
}

/// The kinds whose long operations `timeouts` bounds.
pub const TIMEOUT_KINDS: &[&str] = &["gke_cluster", "gke_node_pool", "filestore_instance"];

/// Problems with a `[providers.gcp]` table found without the network or the
/// environment, each at the setting's key (`region`, `timeouts.gke_cluster`): unknown
/// settings, wrong types, a project id of the wrong shape, a region or zone missing from
/// the catalog or a zone outside `region`, durations that do not parse, retries out of
/// range and endpoints that are not http(s) URLs. Values not known until apply, and
/// unset ones (`null`), are skipped.
pub fn validate(config: &Value) -> Vec<Invalid> {
    let mut out = Vec::new();
    let table = match config {
        Value::Object(table) => table,
        Value::Null => return out,
        other if is_unknown(other) => return out,
        other => {
            out.push(Invalid::at(
                "",
                format!("[providers.gcp] must be a table, got {other}"),
            ));
            return out;
        }
    };
    let known = |v: &Value| !v.is_null() && !is_unknown(v);
    let mut durations: BTreeMap<&str, Duration> = BTreeMap::new();
    for (key, value) in table {
        let at = key.as_str();
        // Objects are checked entry by entry: one unknown entry spares only itself.
        if value.is_null() || (!value.is_object() && is_unknown(value)) {
            continue;
        }
        let problem = match at {
            "project" => string_setting(value).and_then(|p| check_project_id(&p)),
            "region" => string_setting(value).and_then(|r| catalog::check_region(&r)),
            "zone" => string_setting(value).and_then(|z| {
                let region = table
                    .get("region")
                    .filter(|r| known(r))
                    .and_then(Value::as_str)
                    .filter(|r| catalog::region(r).is_some());
                match region {
                    Some(r) => catalog::check_zone_in_region(&z, r),
                    None => catalog::check_zone(&z),
                }
            }),
            "credentials" | "access_token_file" => string_setting(value).map(drop),
            "poll_interval" | "max_poll_interval" | "retry_base_delay" | "request_timeout" => {
                let example = match at {
                    "max_poll_interval" => "15s",
                    "retry_base_delay" => "1s",
                    "request_timeout" => "60s",
                    _ => "2s",
                };
                duration_setting(value, example).map(|d| {
                    durations.insert(at, d);
                })
            }
            "max_retries" => match value.as_u64().map(u32::try_from) {
                Some(Ok(_)) => Ok(()),
                _ => Err(format!(
                    "expected a small non-negative integer (the default is 8), got {value}"
                )),
            },
            "endpoints" => {
                check_entries(value, at, &mut out, |name, url| {
                    if !Api::ALL.iter().any(|a| a.name() == name) {
                        let names: Vec<&str> = Api::ALL.iter().map(|a| a.name()).collect();
                        return Err(unknown_entry("API", name, &names));
                    }
                    string_setting(url).and_then(|u| check_url(&u))
                });
                Ok(())
            }
            "timeouts" => {
                check_entries(value, at, &mut out, |kind, d| {
                    if !TIMEOUT_KINDS.contains(&kind) {
                        return Err(unknown_entry(
                            "kind with long operations",
                            kind,
                            TIMEOUT_KINDS,
                        ));
                    }
                    duration_setting(d, "40m").map(drop)
                });
                Ok(())
            }
            _ => Err(unknown_entry("setting of [providers.gcp]", at, KEYS)),
        };
        if let Err(m) = problem {
            out.push(Invalid::at(at, m));
        }
    }
    if let (Some(first), Some(max)) = (
        durations.get("poll_interval"),
        durations.get("max_poll_interval"),
    ) {
        if max < first {
            out.push(Invalid::at(
                "max_poll_interval",
                format!(
                    "{} is shorter than poll_interval ({}); polls start at poll_interval and grow to max_poll_interval",
                    format_duration(*max),
                    format_duration(*first)
                ),
            ));
        }
    }
    out
}

/// Checks each entry of a table setting (`endpoints`, `timeouts`), reporting at
/// `at.<entry>`; unknown entries are skipped.
fn check_entries(
    value: &Value,
    at: &str,
    out: &mut Vec<Invalid>,
    check: impl Fn(&str, &Value) -> Result<(), String>,
) {
    let Value::Object(entries) = value else {
        out.push(Invalid::at(at, format!("expected a table, got {value}")));
        return;
    };
    for (name, v) in entries {
        if v.is_null() || is_unknown(v) {
            continue;
        }
        if let Err(m) = check(name, v) {
            out.push(Invalid::at(&format!("{at}.{name}"), m));
        }
    }
}

/// "unknown setting of …; did you mean `x`? known: a, b".
fn unknown_entry(what: &str, name: &str, known: &[&str]) -> String {
    format!(
        "unknown {what}{}; known: {}",
        catalog::did_you_mean_any(&catalog::close_matches(name, known, 3)),
        known.join(", ")
    )
}

fn string_setting(value: &Value) -> Result<String, String> {
    value
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| format!("expected a string, got {value}"))
}

fn duration_setting(value: &Value, example: &str) -> Result<Duration, String> {
    let text = string_setting(value)?;
    match parse_duration(&text) {
        Some(d) if d.is_zero() => Err(format!(
            "{text:?} is no time at all; write e.g. \"{example}\""
        )),
        Some(d) => Ok(d),
        None => Err(format!(
            "{text:?} is not a duration; write e.g. \"{example}\" (units ms, s, m, h)"
        )),
    }
}

/// Checks an endpoint override: an absolute http or https URL with a host.
pub fn check_url(url: &str) -> Result<(), String> {
    let example = "write e.g. \"http://127.0.0.1:8080/\"";
    match reqwest::Url::parse(url) {
        Ok(u) if !matches!(u.scheme(), "http" | "https") => {
            Err(format!("`{url}` is not an http or https URL; {example}"))
        }
        Ok(u) if u.host_str().is_none_or(str::is_empty) => {
            Err(format!("`{url}` names no host; {example}"))
        }
        Ok(_) => Ok(()),
        Err(e) => Err(format!("`{url}` is not a URL ({e}); {example}")),
    }
}

/// Checks a project id's shape: 6 to 30 lowercase letters, digits and hyphens, starting
/// with a letter and not ending with a hyphen; a legacy domain-scoped id
/// (`example.com:my-project`) is checked after its domain.
///
/// Fails naming the rule broken; a project number is refused because the ids the APIs
/// return name the project by its id.
pub fn check_project_id(project: &str) -> Result<(), String> {
    let id = match project.rsplit_once(':') {
        Some((domain, id)) if !domain.is_empty() => id,
        _ => project,
    };
    let rules = "a project id is 6 to 30 lowercase letters, digits and hyphens, starting with a letter and not ending with a hyphen";
    let problem = if !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()) {
        "looks like a project number; write the project id (`gcloud projects describe NUMBER --format='value(projectId)'`)"
            .to_string()
    } else if !(6..=30).contains(&id.len()) {
        format!("is {} characters long", id.len())
    } else if let Some(c) = id
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-'))
    {
        format!("holds {c:?}")
    } else if !id.starts_with(|c: char| c.is_ascii_lowercase()) {
        "does not start with a letter".to_string()
    } else if id.ends_with('-') {
        "ends with a hyphen".to_string()
    } else {
        return Ok(());
    };
    Err(format!("`{project}` {problem}; {rules}"))
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

    /// The problems of a table as (path, message) pairs.
    fn problems(table: Value) -> Vec<(String, String)> {
        validate(&table)
            .into_iter()
            .map(|p| (p.path.join("."), p.message))
            .collect()
    }

    #[test]
    fn valid_tables_have_no_problems() {
        assert!(problems(Value::Null).is_empty());
        assert!(problems(json!({})).is_empty());
        let full = json!({
            "project": "batch-aiml-project",
            "region": "europe-west1",
            "zone": "europe-west1-d",
            "credentials": "/keys/sa.json",
            "access_token_file": "",
            "endpoints": {"container": "http://127.0.0.1:9/container/", "file": "https://file.example.com/", "storage": "http://[::1]:9/storage/storage/v1/"},
            "poll_interval": "100ms",
            "max_poll_interval": "500ms",
            "retry_base_delay": "50ms",
            "max_retries": 0,
            "timeouts": {"gke_cluster": "1h30m", "gke_node_pool": "40m", "filestore_instance": "30m"},
            "request_timeout": "2m",
        });
        assert_eq!(problems(full), Vec::<(String, String)>::new());
        // The sandbox's overrides unset credentials with null.
        assert!(
            problems(json!({"credentials": null, "project": "example.com:batch-ml"})).is_empty()
        );
    }

    #[test]
    fn each_setting_is_checked_at_its_key() {
        let cases: &[(Value, &str, &str)] = &[
            (
                json!({"region": "us-west9"}),
                "region",
                "`us-west9` is not a Google Cloud region; did you mean `us-west1`",
            ),
            (
                json!({"region": "us-central1-a"}),
                "region",
                "is a zone, not a region; its region is us-central1",
            ),
            (json!({"region": 1}), "region", "expected a string, got 1"),
            (
                json!({"zone": "us-central1-z"}),
                "zone",
                "us-central1 has zones a, b, c, f",
            ),
            (
                json!({"zone": "europe-west1-a"}),
                "zone",
                "europe-west1 has zones b, c, d",
            ),
            (
                json!({"region": "us-central1", "zone": "europe-west1-b"}),
                "zone",
                "zone `europe-west1-b` is in europe-west1, not us-central1",
            ),
            (json!({"project": "My_Project"}), "project", "holds 'M'"),
            (
                json!({"project": "ml"}),
                "project",
                "`ml` is 2 characters long; a project id is 6 to 30",
            ),
            (
                json!({"project": "1-batch-ml"}),
                "project",
                "does not start with a letter",
            ),
            (
                json!({"project": "batch-ml-"}),
                "project",
                "ends with a hyphen",
            ),
            (
                json!({"project": "123456789012"}),
                "project",
                "looks like a project number",
            ),
            (
                json!({"poll_interval": "soon"}),
                "poll_interval",
                "\"soon\" is not a duration; write e.g. \"2s\"",
            ),
            (
                json!({"request_timeout": "0s"}),
                "request_timeout",
                "no time at all",
            ),
            (
                json!({"poll_interval": "10s", "max_poll_interval": "5s"}),
                "max_poll_interval",
                "5s is shorter than poll_interval (10s)",
            ),
            (
                json!({"max_retries": -1}),
                "max_retries",
                "non-negative integer",
            ),
            (
                json!({"max_retries": 1.5}),
                "max_retries",
                "non-negative integer",
            ),
            (
                json!({"timeouts": {"gke_cluster": 5}}),
                "timeouts.gke_cluster",
                "expected a string, got 5",
            ),
            (
                json!({"timeouts": {"gke_clustr": "40m"}}),
                "timeouts.gke_clustr",
                "did you mean `gke_cluster`?",
            ),
            (
                json!({"timeouts": {"gke_cluster": "forever"}}),
                "timeouts.gke_cluster",
                "is not a duration",
            ),
            (json!({"timeouts": "40m"}), "timeouts", "expected a table"),
            (
                json!({"endpoints": {"storge": "http://x/"}}),
                "endpoints.storge",
                "did you mean `storage`?",
            ),
            (
                json!({"endpoints": {"file": "ftp://127.0.0.1:9/file"}}),
                "endpoints.file",
                "`ftp://127.0.0.1:9/file` is not an http or https URL",
            ),
            (
                json!({"endpoints": {"file": "127.0.0.1:9/file"}}),
                "endpoints.file",
                "is not a URL",
            ),
            (
                json!({"endpoints": {"file": "not a url"}}),
                "endpoints.file",
                "is not a URL",
            ),
            (
                json!({"projet": "p"}),
                "projet",
                "unknown setting of [providers.gcp]; did you mean `project`?",
            ),
        ];
        for (table, path, want) in cases {
            let got = problems(table.clone());
            assert!(
                got.iter().any(|(p, m)| p == path && m.contains(want)),
                "{table}: want {path}: {want}, got {got:?}"
            );
        }
        assert!(matches!(validate(&json!("gcp")).as_slice(), [p] if p.path.is_empty()));
    }

    #[test]
    fn unknown_values_are_left_for_apply() {
        let unknown = crate::protocol::UNKNOWN;
        let table = json!({
            "region": unknown,
            "zone": format!("{unknown}-a"),
            "project": unknown,
            "timeouts": {"gke_cluster": unknown, "gke_node_pool": "soon"},
        });
        assert_eq!(
            problems(table),
            vec![(
                "timeouts.gke_node_pool".to_string(),
                "\"soon\" is not a duration; write e.g. \"40m\" (units ms, s, m, h)".to_string()
            )]
        );
    }
}
