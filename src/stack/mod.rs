//! Stacks: TOML files → a validated [`Stack`] (addresses resolved, references checked
//! against the kinds' schemas, variables given values, graph acyclic). Nothing past
//! this module touches raw TOML.
//!
//! Two phases: [`load`] reads and parses every file into nodes that keep their spans
//! (the modules the stack calls too), then [`check`] validates them against the
//! registry, after [`module`] has inlined module calls and [`expand`] has made one
//! resource per `count`/`for_each` instance; [`moved`] checks `[[moved]]` entries.
//! Every problem found is reported at once with file:line:col.

pub mod api_groups;
pub mod backend;
pub mod check;
pub mod expand;
pub mod expr;
pub mod fmt;
pub mod load;
pub mod module;
pub mod moved;
pub mod pricing;
pub mod services;
pub mod source;
pub mod write;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;
use terrain_providers::{Registry, Resource};

use crate::addr::Address;
pub use expr::{Node, NodeKind, Part, Ref};
pub use source::{Diagnostic, Sources, Span, StackErrors};

/// The environment of a run without `--env`.
pub const DEFAULT_ENVIRONMENT: &str = "default";

/// A validated stack.
#[derive(Clone)]
pub struct Stack {
    pub name: String,
    /// The directory holding the stack's files.
    pub dir: PathBuf,
    pub sources: Sources,
    /// A hash of every file's path and content: a saved plan is only applied to the
    /// stack it was made from.
    pub source_hash: String,
    pub backend: BackendConfig,
    /// The environment this stack was loaded for (`${env}`).
    pub environment: String,
    /// `[providers.<name>]` tables, and each instance's (`[providers.gcp.europe]`)
    /// under `gcp.europe`.
    pub providers: BTreeMap<String, Node>,
    pub variables: BTreeMap<String, Variable>,
    pub resources: BTreeMap<Address, ResourceConfig>,
    pub outputs: BTreeMap<String, OutputConfig>,
    /// `[[moved]]` entries, in the order written.
    pub moved: Vec<moved::Move>,
    /// `[pricing]` and `[stack] budget`.
    pub pricing: pricing::Pricing,
    /// `[stack] policies`: directories or files of Rego guardrails every plan is held
    /// to, from the stack's directory.
    pub policies: Vec<std::path::PathBuf>,
    /// What the providers' stack-wide checks warn about (an IAM grant the stack cannot
    /// see), `address.field: message`; shown by validate and under every plan.
    pub warnings: Vec<String>,
    /// Custom kinds resources need on a cluster of the stack where nothing in the stack
    /// provides them: the plan decides from the cluster's state (see [`api_groups`]).
    pub unserved: Vec<api_groups::Unserved>,
}

impl Stack {
    /// The `[providers.<name>]` table with variables and environment filled in (an empty
    /// table when the stack has none), through the provider's configure step.
    pub fn provider_config(
        &self,
        name: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<serde_json::Value, crate::eval::EvalError> {
        let table = match self.providers.get(name) {
            None => serde_json::Value::Object(serde_json::Map::new()),
            Some(node) => {
                let scope = crate::desired::variables_only(&self.variables, env);
                crate::eval::eval(node, &scope)?.value
            }
        };
        let base = name.split_once('.').map_or(name, |(b, _)| b);
        Ok(terrain_providers::registry::configure(base, table, env))
    }
}

impl std::fmt::Debug for Stack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stack")
            .field("name", &self.name)
            .field("resources", &self.resources.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// Where the stack's state lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackendConfig {
    /// A JSON file on this machine.
    Local { path: PathBuf },
    /// An object in an S3 bucket.
    S3(crate::state::s3::S3Settings),
    /// An object in a GCS bucket.
    Gcs(crate::state::gcs::GcsSettings),
}

/// A variable with its value for this run.
#[derive(Debug, Clone)]
pub struct Variable {
    pub value: Value,
    pub sensitive: bool,
    pub span: Span,
}

/// `lifecycle = { … }` of a resource.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lifecycle {
    /// A plan that would delete or replace the resource fails.
    pub prevent_destroy: bool,
    /// On replace, create the new object before deleting the old one.
    pub create_before_destroy: bool,
    /// Spec fields (dotted paths) whose differences are ignored after create.
    pub ignore_changes: Vec<String>,
}

/// One resource of the stack.
#[derive(Clone)]
pub struct ResourceConfig {
    pub addr: Address,
    /// The span of the resource's name in its table header.
    pub span: Span,
    /// The spec fields (meta keys such as `depends_on` removed), a table node.
    pub body: Node,
    pub depends_on: Vec<Address>,
    /// Dependencies found from the stack rather than written: the providers of the
    /// Kubernetes API groups this resource needs on its cluster (see [`api_groups`]),
    /// the resources turning on the cloud APIs it calls (see [`services`]).
    pub implied: Vec<Address>,
    pub lifecycle: Lifecycle,
    /// Extra spec fields (dotted paths) to treat as secret, beyond the schema's own.
    pub sensitive: Vec<String>,
    /// The provider instance that manages it: its kind's provider (`gcp`), or an
    /// instance of it (`gcp.europe`, from `provider = "gcp.europe"`).
    pub provider: String,
    /// The kind's implementation.
    pub resource: Arc<dyn Resource>,
}

impl ResourceConfig {
    /// Every resource this one depends on: referenced, listed in `depends_on` or implied
    /// by the API groups it needs, sorted.
    /// Never itself: a validated stack has no self-reference (the load reports one as a
    /// cycle, at the reference), and the graph code assumes no self edges.
    pub fn dependencies(&self) -> Vec<Address> {
        let mut deps: Vec<Address> = self
            .body
            .refs()
            .into_iter()
            .filter_map(|(r, _)| match r {
                Ref::Resource { addr, .. } => Some(addr.clone()),
                _ => None,
            })
            .chain(self.depends_on.iter().cloned())
            .chain(self.implied.iter().cloned())
            .filter(|a| *a != self.addr)
            .collect();
        deps.sort();
        deps.dedup();
        deps
    }
}

/// An output of the stack.
#[derive(Debug, Clone)]
pub struct OutputConfig {
    pub value: Node,
    pub sensitive: bool,
    pub description: Option<String>,
    pub span: Span,
}

/// What to load and with which inputs.
pub struct LoadOptions<'a> {
    /// A stack file, or a directory whose `*.toml` files form one stack.
    pub path: &'a Path,
    /// `--var name=value` from the command line, in order given.
    pub vars: &'a [(String, String)],
    /// Variables files, lowest precedence first: the environment's (`envs/NAME.toml`),
    /// then each `--var-file`. Their values override defaults and `TERRAIN_VAR_*`;
    /// `--var` overrides them.
    pub var_files: &'a [PathBuf],
    /// The environment this run is for (`--env`; [`DEFAULT_ENVIRONMENT`] without
    /// one), which `${env}` gives.
    pub environment: &'a str,
    /// Reads an environment variable (the process environment outside tests).
    pub env: &'a dyn Fn(&str) -> Option<String>,
    pub registry: &'a Registry,
}

/// Loads and validates a stack.
///
/// Fails with every problem found (parse errors, unknown keys, wrong types, bad
/// references, unknown kinds, cycles), each located in its file.
pub fn load(opts: &LoadOptions<'_>) -> Result<Stack, StackErrors> {
    let raw = load::read(opts)?;
    check::check(raw, opts)
}
