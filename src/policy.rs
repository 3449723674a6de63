//! Guardrails as code: Rego policies evaluated in-process over a plan.
//!
//! A policy is a Rego package (`.rego` files from the directories `--policy DIR` and
//! `[stack] policies` name) with `deny` and `warn` rules: sets of messages, each a
//! string or an object `{"msg": …, "address": …}` naming the resource concerned. They
//! are evaluated over the plan as `plan --json` writes it (every change's action and
//! full desired spec, with placement and cost where known), with the stack's name,
//! environment and variables beside it; secrets are absent from all of it, as from any
//! output. A deny fails the plan, a warn is shown under it. `test_` rules are the
//! policies' own tests (`terrain policy test`), as `opa test` runs them.
//!
//! Evaluation is regorus's, in this process: no OPA binary.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::plan::Plan;
use crate::stack::Stack;

/// Why policies could not be loaded or evaluated.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("could not read the policies at {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: no .rego files there")]
    Empty { path: PathBuf },
    /// A file that does not parse; regorus's message names file:line:col.
    #[error("{message}")]
    Parse { path: PathBuf, message: String },
    #[error("policy {rule}: {message}")]
    Evaluate { rule: String, message: String },
}

/// A loaded set of policies.
pub struct Policies {
    engine: regorus::Engine,
    /// Each package (`data.terrain.gpu_pools_tainted`) with the files that make it up
    /// and the `test_` rules they declare.
    packages: BTreeMap<String, Package>,
}

#[derive(Debug, Default)]
struct Package {
    /// Each `test_` rule and the file declaring it.
    tests: Vec<(String, PathBuf)>,
}

/// What one `deny` or `warn` rule said about the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The package, without `data.` (`terrain.gpu_pools_tainted`).
    pub policy: String,
    pub address: Option<String>,
    pub message: String,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.address {
            Some(a) => write!(f, "{}: {a}: {}", self.policy, self.message),
            None => write!(f, "{}: {}", self.policy, self.message),
        }
    }
}

/// What the policies said about a plan.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verdict {
    pub denies: Vec<Finding>,
    pub warns: Vec<Finding>,
}

/// One `test_` rule's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestResult {
    /// `data.terrain.gpu_pools_tainted.test_untainted_pool_is_denied`.
    pub rule: String,
    pub file: PathBuf,
    /// `None` when it passed; else why not (false, undefined, an error).
    pub failure: Option<String>,
}

/// The `.rego` files under `path` (a file, or a directory read recursively), sorted so
/// that every run loads them in the same order.
fn rego_files(path: &Path) -> Result<Vec<PathBuf>, PolicyError> {
    let read = |source| PolicyError::Read {
        path: path.to_path_buf(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(read)?;
    if meta.is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut out = Vec::new();
    let mut dirs = vec![path.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).map_err(read)? {
            let entry = entry.map_err(read)?;
            let p = entry.path();
            if entry.file_type().map_err(read)?.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|e| e == "rego") {
                out.push(p);
            }
        }
    }
    out.sort();
    if out.is_empty() {
        return Err(PolicyError::Empty {
            path: path.to_path_buf(),
        });
    }
    Ok(out)
}

/// The `test_` rules a policy file declares: rule heads at the start of a line, as
/// `opa test` finds them by name.
fn test_rules(text: &str) -> Vec<String> {
    let mut out: Vec<String> = text
        .lines()
        .filter_map(|line| {
            let name: String = line
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            (name.starts_with("test_") && name.len() < line.len()).then_some(name)
        })
        .collect();
    out.dedup();
    out
}

impl Policies {
    /// Loads every `.rego` file under `paths` (files or directories), in Rego v1,
    /// naming files as the paths do.
    ///
    /// Fails on the first file that cannot be read or does not parse, naming it with
    /// the line and column.
    pub fn load(paths: &[PathBuf]) -> Result<Self, PolicyError> {
        Self::load_from(paths, None)
    }

    /// [`Policies::load`], naming files in messages relative to `base` (where the user
    /// started from) when they are under it.
    pub fn load_from(paths: &[PathBuf], base: Option<&Path>) -> Result<Self, PolicyError> {
        let mut engine = regorus::Engine::new();
        let mut packages: BTreeMap<String, Package> = BTreeMap::new();
        // The stack's directories and `--policy` may name the same files: each is
        // loaded once (twice would be two definitions of every rule).
        let mut seen = std::collections::BTreeSet::new();
        for path in paths {
            for file in rego_files(path)? {
                if !seen.insert(std::fs::canonicalize(&file).unwrap_or_else(|_| file.clone())) {
                    continue;
                }
                let text = std::fs::read_to_string(&file).map_err(|source| PolicyError::Read {
                    path: file.clone(),
                    source,
                })?;
                let tests = test_rules(&text);
                let shown = base
                    .and_then(|b| file.strip_prefix(b).ok())
                    .unwrap_or(&file)
                    .to_path_buf();
                let package = engine
                    .add_policy(shown.display().to_string(), text)
                    .map_err(|e| PolicyError::Parse {
                        path: shown.clone(),
                        message: located(&e.to_string()),
                    })?;
                let entry = packages.entry(package).or_default();
                entry
                    .tests
                    .extend(tests.into_iter().map(|t| (t, shown.clone())));
            }
        }
        Ok(Self { engine, packages })
    }

    /// How many packages are loaded.
    pub fn len(&self) -> usize {
        self.packages.len()
    }

    pub fn is_empty(&self) -> bool {
        self.packages.is_empty()
    }

    /// Evaluates every package's `deny` and `warn` over `input`.
    ///
    /// Fails when a rule cannot be evaluated (a builtin's error, a conflict), naming it.
    pub fn evaluate(&mut self, input: &Value) -> Result<Verdict, PolicyError> {
        self.engine.set_input(regorus::Value::from(input.clone()));
        let mut verdict = Verdict::default();
        let packages: Vec<String> = self.packages.keys().cloned().collect();
        for package in packages {
            let policy = package.trim_start_matches("data.").to_string();
            for (rule, out) in [("deny", &mut verdict.denies), ("warn", &mut verdict.warns)] {
                let path = format!("{package}.{rule}");
                let value = match self.engine.eval_rule(path.clone()) {
                    Ok(v) => v,
                    // A package without the rule says nothing of that kind.
                    Err(e) if is_missing_rule(&e.to_string()) => continue,
                    Err(e) => {
                        return Err(PolicyError::Evaluate {
                            rule: path.trim_start_matches("data.").to_string(),
                            message: e.to_string().trim_end().to_string(),
                        })
                    }
                };
                let value = serde_json::to_value(&value).unwrap_or(Value::Null);
                out.extend(findings(&policy, &value));
            }
        }
        for list in [&mut verdict.denies, &mut verdict.warns] {
            list.sort_by(|a, b| {
                (&a.address, &a.policy, &a.message).cmp(&(&b.address, &b.policy, &b.message))
            });
            list.dedup();
        }
        Ok(verdict)
    }

    /// Runs every `test_` rule; a test passes when it evaluates to true.
    pub fn test(&mut self) -> Vec<TestResult> {
        self.engine.set_input(regorus::Value::new_object());
        let mut out = Vec::new();
        let tests: Vec<(String, PathBuf)> = self
            .packages
            .iter()
            .flat_map(|(package, p)| {
                p.tests
                    .iter()
                    .map(move |(test, file)| (format!("{package}.{test}"), file.clone()))
            })
            .collect();
        for (rule, file) in tests {
            let failure = match self.engine.eval_rule(rule.clone()) {
                Ok(regorus::Value::Undefined) => Some("undefined".to_string()),
                Ok(v) => match serde_json::to_value(&v).unwrap_or(Value::Null) {
                    Value::Bool(true) => None,
                    Value::Bool(false) => Some("false".to_string()),
                    other => Some(format!("{other}, not true")),
                },
                Err(e) => Some(e.to_string().trim_end().to_string()),
            };
            out.push(TestResult {
                rule,
                file,
                failure,
            });
        }
        out
    }
}

/// regorus's report (`--> file:line:col`, the source lines, `error: what`) as one
/// `file:line:col: what` line followed by the source lines, as terrain reports stack
/// errors.
fn located(report: &str) -> String {
    let lines: Vec<&str> = report.trim().lines().collect();
    let at = lines
        .iter()
        .find_map(|l| l.trim_start().strip_prefix("--> "))
        .map(str::trim);
    let what = lines
        .iter()
        .find_map(|l| l.trim_start().strip_prefix("error: "))
        .map(str::trim);
    match (at, what) {
        (Some(at), Some(what)) => {
            let source: Vec<&str> = lines
                .iter()
                .skip_while(|l| !l.trim_start().starts_with("-->"))
                .skip(1)
                .take_while(|l| !l.trim_start().starts_with("error: "))
                .copied()
                .collect();
            format!("{at}: {what}\n{}", source.join("\n"))
        }
        _ => report.trim().to_string(),
    }
}

/// Whether regorus refused `eval_rule` because the package has no such rule.
fn is_missing_rule(message: &str) -> bool {
    message.contains("not a valid rule path")
        || message.contains("not found")
        || message.contains("no rule")
}

/// The messages of one `deny`/`warn` value: a set (array) of strings or objects with
/// `msg` and `address` (or `resource`); undefined says nothing.
fn findings(policy: &str, value: &Value) -> Vec<Finding> {
    let items: Vec<&Value> = match value {
        Value::Array(items) => items.iter().collect(),
        Value::String(_) | Value::Object(_) => vec![value],
        _ => Vec::new(),
    };
    items
        .into_iter()
        .filter_map(|item| match item {
            Value::String(s) => Some(Finding {
                policy: policy.to_string(),
                address: None,
                message: s.clone(),
            }),
            Value::Object(o) => {
                let message = o
                    .get("msg")
                    .or_else(|| o.get("message"))
                    .and_then(Value::as_str)?
                    .to_string();
                let address = o
                    .get("address")
                    .or_else(|| o.get("resource"))
                    .and_then(Value::as_str)
                    .map(str::to_string);
                Some(Finding {
                    policy: policy.to_string(),
                    address,
                    message,
                })
            }
            _ => None,
        })
        .collect()
}

/// The document policies read (`input`): the plan as `plan --json` writes it, with the
/// stack's name, environment and variables (a sensitive variable's value is `null`,
/// named in `sensitive_variables`).
pub fn input(stack: &Stack, plan: &Plan) -> Value {
    let mut doc = crate::output::plan::to_json(plan);
    let mut variables = serde_json::Map::new();
    let mut sensitive = Vec::new();
    for (name, v) in &stack.variables {
        if v.sensitive {
            sensitive.push(name.clone());
            variables.insert(name.clone(), Value::Null);
        } else {
            variables.insert(name.clone(), v.value.clone());
        }
    }
    if let Value::Object(map) = &mut doc {
        map.insert("stack".into(), json!(stack.name));
        map.insert("environment".into(), json!(stack.environment));
        map.insert("variables".into(), Value::Object(variables));
        map.insert("sensitive_variables".into(), json!(sensitive));
    }
    doc
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).expect("write a policy");
        p
    }

    #[test]
    fn deny_and_warn_sets_become_findings_with_their_resource() {
        let dir = tempfile::tempdir().expect("tempdir");
        write(
            dir.path(),
            "buckets.rego",
            r#"package terrain.buckets

deny contains {"msg": "buckets must keep versions", "address": c.address} if {
    some c in input.changes
    c.kind == "gcs_bucket"
    not c.after.versioning
}

warn contains "two buckets or more" if count([c | some c in input.changes; c.kind == "gcs_bucket"]) > 1
"#,
        );
        let mut p = Policies::load(&[dir.path().to_path_buf()]).expect("loads");
        let input = json!({"changes": [
            {"address": "gcs_bucket.a", "kind": "gcs_bucket", "after": {"versioning": false}},
            {"address": "gcs_bucket.b", "kind": "gcs_bucket", "after": {"versioning": true}},
        ]});
        let v = p.evaluate(&input).expect("evaluates");
        assert_eq!(
            v.denies,
            [Finding {
                policy: "terrain.buckets".into(),
                address: Some("gcs_bucket.a".into()),
                message: "buckets must keep versions".into(),
            }]
        );
        assert_eq!(v.warns.len(), 1);
        assert_eq!(
            v.warns[0].to_string(),
            "terrain.buckets: two buckets or more"
        );
    }

    #[test]
    fn a_package_without_warn_or_with_nothing_to_say_finds_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        write(
            dir.path(),
            "only_deny.rego",
            "package terrain.only_deny\n\ndeny contains \"never\" if input.nothing_here\n",
        );
        write(
            dir.path(),
            "helpers.rego",
            "package terrain.helpers\n\ngpus := 16\n",
        );
        let mut p = Policies::load(&[dir.path().to_path_buf()]).expect("loads");
        let v = p.evaluate(&json!({"changes": []})).expect("evaluates");
        assert_eq!(v, Verdict::default());
    }

    #[test]
    fn a_policy_that_does_not_parse_is_located_by_file_and_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        write(
            dir.path(),
            "bad.rego",
            "package terrain.bad\n\ndeny contains msg if {\n    msg := \n}\n",
        );
        let err = Policies::load(&[dir.path().to_path_buf()])
            .err()
            .expect("refused");
        let text = err.to_string();
        let first = text.lines().next().unwrap_or_default();
        assert!(first.contains("bad.rego:4:"), "{text}");
        assert!(first.ends_with("while parsing set"), "{text}");
    }

    #[test]
    fn test_rules_pass_fail_and_name_themselves() {
        let dir = tempfile::tempdir().expect("tempdir");
        write(
            dir.path(),
            "p.rego",
            "package terrain.p\n\ndeny contains \"no\" if input.x == 1\n",
        );
        write(
            dir.path(),
            "p_test.rego",
            "package terrain.p\n\ntest_denies_one if {\n    deny[\"no\"] with input as {\"x\": 1}\n}\n\ntest_wrongly_denies_two if {\n    deny[\"no\"] with input as {\"x\": 2}\n}\n",
        );
        let mut p = Policies::load(&[dir.path().to_path_buf()]).expect("loads");
        let results = p.test();
        let by_name: BTreeMap<&str, &Option<String>> = results
            .iter()
            .map(|r| (r.rule.as_str(), &r.failure))
            .collect();
        assert_eq!(by_name["data.terrain.p.test_denies_one"], &None);
        assert!(by_name["data.terrain.p.test_wrongly_denies_two"].is_some());
    }

    #[test]
    fn test_rule_heads_are_found_by_name() {
        assert_eq!(
            test_rules("package x\ntest_a if { true }\n  test_not_a_head := 1\ntest_b := true\n"),
            ["test_a", "test_b"]
        );
    }
}
