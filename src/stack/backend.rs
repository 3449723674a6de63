//! Where a stack's state lives: one `[backend.<type>]` table (`local`, `s3`, `gcs`), or the
//! older `[stack] backend = { type = "local", path = … }`. Checked and evaluated at
//! load: values may use variables and the environment but never resource attributes
//! (the state must be found before anything is read), and a value derived from a
//! sensitive variable is never echoed in a message.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::expr::{Node, NodeKind, Ref};
use super::load::Entry;
use super::source::{did_you_mean, Diagnostic, Sources, Span};
use super::{BackendConfig, Variable};
use crate::state::gcs::GcsSettings;
use crate::state::s3::S3Settings;
use std::collections::BTreeMap;

/// The backend types a stack may name.
pub const TYPES: [&str; 3] = ["local", "s3", "gcs"];

const LOCAL_KEYS: [&str; 1] = ["path"];
const GCS_KEYS: [&str; 4] = ["bucket", "prefix", "kms_key_name", "allow_unversioned"];
const S3_KEYS: [&str; 6] = [
    "bucket",
    "key",
    "region",
    "endpoint",
    "kms_key_id",
    "allow_unversioned",
];

/// What the stack says about its backend.
pub struct Declared<'a> {
    /// `[backend.<type>]` tables, each with the span of its type.
    pub tables: &'a [Entry],
    /// `[stack] backend = {…}`: its local path (already joined to the stack's
    /// directory) and the span of the key, when written.
    pub legacy: Option<(Option<PathBuf>, Span)>,
}

/// The backend of a stack named `name` in `dir`, and the problems found.
pub fn check(
    sources: &Sources,
    declared: &Declared<'_>,
    name: &str,
    dir: &Path,
    variables: &BTreeMap<String, Variable>,
    env: &dyn Fn(&str) -> Option<String>,
) -> (BackendConfig, Vec<Diagnostic>) {
    let default = || BackendConfig::Local {
        path: PathBuf::from("state").join(format!("{name}.json")),
    };
    let mut diags = Vec::new();
    match (declared.tables, &declared.legacy) {
        ([], None) => (default(), diags),
        ([], Some((path, _))) => (
            path.clone()
                .map_or_else(default, |path| BackendConfig::Local { path }),
            diags,
        ),
        ([(kind, span, node)], legacy) => {
            if let Some((_, at)) = legacy {
                diags.push(
                    Diagnostic::at(
                        *at,
                        format!(
                            "[stack] backend and [backend.{kind}] both say where the state lives"
                        ),
                        "second backend",
                    )
                    .help("keep one: [backend.<type>] is the current form"),
                );
            }
            let mut values = Values {
                what: format!("backend.{kind}"),
                written: Vec::new(),
                variables,
                env,
                diags: &mut diags,
            };
            let config = match kind.as_str() {
                "local" => values.local(node, name, dir),
                "s3" => values.s3(node, *span),
                "gcs" => values.gcs(node, *span),
                other => {
                    diags.push(
                        Diagnostic::at(
                            *span,
                            format!("backend type `{other}` is not supported"),
                            "unknown backend",
                        )
                        .help(
                            did_you_mean(other, TYPES).unwrap_or_else(|| {
                                format!("supported backends: {}", TYPES.join(", "))
                            }),
                        ),
                    );
                    None
                }
            };
            (config.unwrap_or_else(default), diags)
        }
        ([(first, first_span, _), (second, second_span, _), ..], _) => {
            diags.push(
                Diagnostic::at(
                    *second_span,
                    format!("a stack has one backend, but [backend.{first}] and [backend.{second}] are both written"),
                    "second backend",
                )
                .help(format!("[backend.{first}] is at {}; keep one", sources.locate(*first_span))),
            );
            (default(), diags)
        }
    }
}

/// Evaluates the values of one backend table.
struct Values<'a, 'd> {
    what: String,
    /// Keys written in the table, whether or not their values evaluated.
    written: Vec<String>,
    variables: &'a BTreeMap<String, Variable>,
    env: &'a dyn Fn(&str) -> Option<String>,
    diags: &'d mut Vec<Diagnostic>,
}

/// One evaluated value: what it is, where, and whether it derives from a secret.
struct Got {
    value: Value,
    span: Span,
    secret: bool,
}

impl Got {
    /// The value as messages may show it.
    fn shown(&self) -> String {
        if self.secret {
            crate::desired::HIDDEN.to_string()
        } else {
            match &self.value {
                Value::String(s) => format!("`{s}`"),
                other => other.to_string(),
            }
        }
    }
}

impl Values<'_, '_> {
    fn err(&mut self, span: Span, message: String, label: &str) {
        self.diags.push(Diagnostic::at(span, message, label));
    }

    /// The table's entries, each evaluated; unknown keys reported.
    fn entries(&mut self, node: &Node, allowed: &[&str]) -> BTreeMap<String, Got> {
        let NodeKind::Table(entries) = &node.kind else {
            let what = self.what.clone();
            self.err(
                node.span,
                format!("[{what}] must be a table"),
                "expected a table",
            );
            return BTreeMap::new();
        };
        let mut out = BTreeMap::new();
        for (key, kspan, value) in entries {
            if !allowed.contains(&key.as_str()) {
                let mut d = Diagnostic::at(
                    *kspan,
                    format!("{}: unknown key `{key}`", self.what),
                    "unknown key",
                );
                d.help = Some(
                    did_you_mean(key, allowed.iter().copied())
                        .unwrap_or_else(|| format!("allowed keys: {}", allowed.join(", "))),
                );
                self.diags.push(d);
                continue;
            }
            self.written.push(key.clone());
            if let Some(got) = self.eval(key, value) {
                out.insert(key.clone(), got);
            }
        }
        out
    }

    fn eval(&mut self, key: &str, node: &Node) -> Option<Got> {
        let mut refused = false;
        for (r, span) in node.refs() {
            if let Ref::Resource { addr, .. } = r {
                refused = true;
                self.err(
                    span,
                    format!(
                        "{}.{key}: a backend value may use variables but not resource attributes (`{addr}`): the state must be found before anything is read",
                        self.what
                    ),
                    "resource reference",
                );
            }
        }
        if refused {
            return None;
        }
        let scope = crate::desired::variables_only(self.variables, self.env);
        match crate::eval::eval(node, &scope) {
            Ok(e) => Some(Got {
                value: e.value,
                span: node.span,
                secret: !e.sensitive_paths.is_empty(),
            }),
            Err(e) => {
                self.err(
                    e.span,
                    format!("{}.{key}: {}", self.what, e.message),
                    "here",
                );
                None
            }
        }
    }

    fn string(&mut self, got: Option<&Got>, key: &str) -> Option<String> {
        let got = got?;
        match &got.value {
            Value::String(s) => Some(s.clone()),
            _ => {
                self.err(
                    got.span,
                    format!("{}.{key} must be a string", self.what),
                    "expected a string",
                );
                None
            }
        }
    }

    fn required(
        &mut self,
        values: &BTreeMap<String, Got>,
        key: &str,
        table: Span,
    ) -> Option<String> {
        if !self.written.iter().any(|k| k == key) {
            self.err(
                table,
                format!("{}: `{key}` is required", self.what),
                "missing key",
            );
            return None;
        }
        self.string(values.get(key), key)
    }

    /// Reports `check`'s complaint about `got`, hiding a secret value.
    fn checked(
        &mut self,
        got: Option<&Got>,
        key: &str,
        check: impl Fn(&str) -> Result<(), String>,
    ) {
        let Some(got) = got else { return };
        let Value::String(s) = &got.value else { return };
        if let Err(message) = check(s) {
            let message = if got.secret {
                // The value and every sensitive variable's, and anything quoted that
                // looks like them (a suggested rewrite).
                let mut secrets = vec![s.clone()];
                secrets.extend(self.variables.values().filter(|v| v.sensitive).map(|v| {
                    match &v.value {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    }
                }));
                crate::desired::hide(&message, &secrets, true)
            } else {
                message
            };
            self.err(
                got.span,
                format!("{}.{key}: {message}", self.what),
                "invalid value",
            );
        }
    }

    fn local(&mut self, node: &Node, name: &str, dir: &Path) -> Option<BackendConfig> {
        let values = self.entries(node, &LOCAL_KEYS);
        let path = match values.get("path") {
            Some(_) => dir.join(self.string(values.get("path"), "path")?),
            None => PathBuf::from("state").join(format!("{name}.json")),
        };
        Some(BackendConfig::Local { path })
    }

    fn s3(&mut self, node: &Node, table: Span) -> Option<BackendConfig> {
        let values = self.entries(node, &S3_KEYS);
        let bucket = self.required(&values, "bucket", table);
        let key = self.required(&values, "key", table);
        self.checked(
            values.get("bucket"),
            "bucket",
            terrain_providers::aws::s3_bucket::check_bucket_name,
        );
        self.checked(values.get("key"), "key", check_key);
        let region = self.string(values.get("region"), "region");
        self.checked(
            values.get("region"),
            "region",
            terrain_providers::aws::catalog::check_region,
        );
        let endpoint = self.string(values.get("endpoint"), "endpoint");
        self.checked(values.get("endpoint"), "endpoint", check_endpoint);
        let kms_key_id = self.string(values.get("kms_key_id"), "kms_key_id");
        let key_region = region.clone();
        self.checked(values.get("kms_key_id"), "kms_key_id", |k| {
            terrain_providers::aws::catalog::check_kms_key(k, key_region.as_deref())
        });
        let allow_unversioned = self.allow_unversioned(&values);
        Some(BackendConfig::S3(S3Settings {
            bucket: bucket?,
            key: key?,
            region,
            endpoint,
            kms_key_id,
            allow_unversioned,
            sandbox: false,
            create_bucket: false,
        }))
    }
}

impl Values<'_, '_> {
    fn allow_unversioned(&mut self, values: &BTreeMap<String, Got>) -> bool {
        match values.get("allow_unversioned") {
            None => false,
            Some(Got {
                value: Value::Bool(b),
                ..
            }) => *b,
            Some(got) => {
                let (span, shown) = (got.span, got.shown());
                self.err(
                    span,
                    format!(
                        "{}.allow_unversioned must be true or false, not {shown}",
                        self.what
                    ),
                    "expected a boolean",
                );
                false
            }
        }
    }

    fn gcs(&mut self, node: &Node, table: Span) -> Option<BackendConfig> {
        let values = self.entries(node, &GCS_KEYS);
        let bucket = self.required(&values, "bucket", table);
        self.checked(
            values.get("bucket"),
            "bucket",
            terrain_providers::gcp::catalog::check_bucket_name,
        );
        let prefix = self
            .string(values.get("prefix"), "prefix")
            .unwrap_or_default();
        self.checked(values.get("prefix"), "prefix", check_prefix);
        let kms_key_name = self.string(values.get("kms_key_name"), "kms_key_name");
        self.checked(
            values.get("kms_key_name"),
            "kms_key_name",
            check_kms_key_name,
        );
        let allow_unversioned = self.allow_unversioned(&values);
        Some(BackendConfig::Gcs(GcsSettings {
            bucket: bucket?,
            prefix,
            name: super::DEFAULT_ENVIRONMENT.to_string(),
            kms_key_name,
            allow_unversioned,
            create_in_project: None,
        }))
    }
}

/// A folder for the state in a GCS bucket: no leading slash.
fn check_prefix(prefix: &str) -> Result<(), String> {
    if prefix.starts_with('/') {
        return Err(format!(
            "`{prefix}` starts with `/`; object names do not (write `{}`)",
            prefix.trim_start_matches('/')
        ));
    }
    Ok(())
}

/// A Cloud KMS key: `projects/P/locations/L/keyRings/R/cryptoKeys/K`.
fn check_kms_key_name(key: &str) -> Result<(), String> {
    let parts: Vec<&str> = key.split('/').collect();
    match parts.as_slice() {
        ["projects", p, "locations", l, "keyRings", r, "cryptoKeys", k]
            if [p, l, r, k].iter().all(|s| !s.is_empty()) =>
        {
            Ok(())
        }
        _ => Err(format!(
            "`{key}` is not a Cloud KMS key name; write projects/PROJECT/locations/LOCATION/keyRings/RING/cryptoKeys/KEY"
        )),
    }
}

/// An object key for the state: not empty, not a "folder", no leading slash.
fn check_key(key: &str) -> Result<(), String> {
    if key.is_empty() || key.ends_with('/') {
        return Err(
            "the state's object key must name an object (`ml/stack.json`), not a folder".into(),
        );
    }
    if key.starts_with('/') {
        return Err(format!(
            "`{key}` starts with `/`; S3 keys do not (write `{}`)",
            key.trim_start_matches('/')
        ));
    }
    if key.len() > 1019 {
        return Err("the key is longer than S3's 1,024 bytes once `.lock` is added".into());
    }
    Ok(())
}

/// An endpoint URL: http or https, with a host.
fn check_endpoint(url: &str) -> Result<(), String> {
    match url.split_once("://") {
        Some(("http" | "https", rest)) if !rest.is_empty() && !rest.starts_with('/') => Ok(()),
        _ => Err(format!(
            "`{url}` is not an http(s) URL such as http://127.0.0.1:9000"
        )),
    }
}
