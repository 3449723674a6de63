//! The provider protocol: the typed [`Kind`] trait a resource kind implements, and the
//! untyped [`Resource`] adapter the engine drives.
//!
//! Contract, for every kind:
//! - `validate` is offline and pure;
//! - `read` returns `Ok(None)` when the object is gone (a missing object is a value);
//! - `create` and `update` return once the object is ready, with its outputs;
//! - `delete` is idempotent: deleting what is already gone succeeds;
//! - the schema is the `Spec` and `Outputs` types' (`#[derive(Fields)]`): fields whose
//!   change forces replacement are marked `#[terrain(force_new)]` on them;
//! - `planned_id` names the object before it exists where the API allows it, so an
//!   interrupted create can be found and adopted instead of created twice.

use std::sync::Arc;

use async_trait::async_trait;
use serde::{de::DeserializeOwned, Serialize};
use serde_json::Value;

use crate::session::{EnvFn, Session};
use crate::{Field, ProviderError, Schema, Type};

/// Receives progress messages from long operations (`creating: 40%`).
pub type Reporter = Arc<dyn Fn(&str) + Send + Sync>;

/// What a provider call gets besides the spec: the provider instance's configuration,
/// the run's [`Session`] (its configured clients and caches), the environment as the
/// run sees it, and a way to report progress.
#[derive(Clone)]
pub struct Ctx {
    /// The resource address (`kind.name`), for messages.
    pub address: String,
    /// The provider instance's table (`[providers.<name>]`, or `[providers.<name>.<alias>]`),
    /// as JSON (empty object when absent).
    pub config: Value,
    session: Arc<Session>,
    env: EnvFn,
    reporter: Option<Reporter>,
    /// The planned id of this address's create that an earlier run started and was
    /// interrupted in (see [`Ctx::resuming`]).
    resuming: Option<String>,
}

impl std::fmt::Debug for Ctx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

impl Ctx {
    /// A context for `address` with provider configuration `config`.
    ///
    /// It has a session of its own and the process environment: the engine gives every
    /// call of one run the run's session and environment ([`Ctx::in_run`]).
    pub fn new(address: impl Into<String>, config: Value) -> Self {
        Self {
            address: address.into(),
            config,
            session: Session::new(),
            env: crate::session::process_env(),
            reporter: None,
            resuming: None,
        }
    }

    /// This context for a create that resumes one an earlier run started for the same
    /// address and planned id, and was interrupted in before it recorded anything: the
    /// journal holds the intent, so an object under that id that carries none of
    /// terrain's marks (the kill came between the create and the marking) is this
    /// address's own.
    pub fn resuming(mut self, planned_id: impl Into<String>) -> Self {
        self.resuming = Some(planned_id.into());
        self
    }

    /// The planned id of the interrupted create this call resumes, if it does.
    pub fn resumes(&self) -> Option<&str> {
        self.resuming.as_deref()
    }

    /// This context in the run with `session` and environment `env`.
    pub fn in_run(mut self, session: Arc<Session>, env: EnvFn) -> Self {
        self.session = session;
        self.env = env;
        self
    }

    /// The run's shared clients and caches.
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// The run's session, to hand to a context made for another call.
    pub fn session_handle(&self) -> Arc<Session> {
        self.session.clone()
    }

    /// An environment variable as the run sees it.
    pub fn env(&self, name: &str) -> Option<String> {
        (self.env)(name)
    }

    /// The environment as the run sees it, for code that reads several variables.
    pub fn env_fn(&self) -> &EnvFn {
        &self.env
    }

    /// Routes progress messages to `reporter`.
    pub fn with_reporter(mut self, reporter: Reporter) -> Self {
        self.reporter = Some(reporter);
        self
    }

    /// Reports progress of a long operation.
    pub fn progress(&self, message: &str) {
        if let Some(r) = &self.reporter {
            r(message);
        }
    }
}

/// A problem found by offline validation, at a path inside the spec (`share.capacity_gb`;
/// empty for the resource as a whole).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    pub path: Vec<String>,
    pub message: String,
}

impl Invalid {
    /// A problem with the field at dotted `path`.
    pub fn at(path: &str, message: impl Into<String>) -> Self {
        Self {
            path: if path.is_empty() {
                Vec::new()
            } else {
                path.split('.').map(str::to_string).collect()
            },
            message: message.into(),
        }
    }
}

/// `path: message`, or the message alone for a problem of the whole resource.
impl std::fmt::Display for Invalid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path.join("."), self.message)
        }
    }
}

/// A resource another one references, as far as its spec is known offline: lets a kind
/// check combinations across resources (a node pool on an Autopilot cluster).
#[derive(Debug, Clone, PartialEq)]
pub struct Peer {
    pub kind: String,
    pub address: String,
    /// Defaults filled; values that depend on other resources are unknown.
    pub spec: Value,
}

/// A resource of the stack as the stack-wide checks see it offline (see
/// [`crate::provider::Provider::check_stack`]): its spec with defaults filled and values
/// not known until apply marked, and, for every field whose value references other
/// resources, that value as written (`${iam_role.exec.arn}`,
/// `s3://${s3_bucket.data.name}`), so a check can follow an unknown ARN to the role
/// the same stack creates.
#[derive(Debug, Clone, PartialEq)]
pub struct StackResource {
    pub kind: String,
    pub address: String,
    pub spec: Value,
    /// The provider table of its provider instance, configured (its `region`…).
    pub config: Value,
    /// Dotted spec path → the value as written, for values with references.
    pub refs: std::collections::BTreeMap<String, String>,
    /// Dotted spec path → (address, attribute path) for values that are exactly one
    /// reference to a resource's attribute.
    pub links: std::collections::BTreeMap<String, (String, String)>,
}

impl StackResource {
    /// The resource and attribute the value at `path` is exactly a reference to
    /// (`${iam_role.exec.arn}` → `("iam_role.exec", "arn")`).
    pub fn referenced(&self, path: &str) -> Option<(&str, &str)> {
        self.links
            .get(path)
            .map(|(a, attr)| (a.as_str(), attr.as_str()))
    }
}

/// A resource of a plan as the provider's read-only checks against the cloud see it
/// (see [`crate::provider::Provider::check_planned`]): its desired spec, with values
/// not known until apply marked, and whether the plan creates it (or replaces it).
#[derive(Debug, Clone, PartialEq)]
pub struct Planned {
    pub kind: String,
    pub address: String,
    pub spec: Value,
    pub creates: bool,
}

/// What a stack-wide check found: at a resource's field, an error (the plan fails) or a
/// warning (shown under it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StackFinding {
    pub severity: crate::Severity,
    pub address: String,
    /// The dotted spec path the finding is about (empty: the resource as a whole).
    pub path: String,
    pub message: String,
}

impl StackFinding {
    pub fn error(address: &str, path: &str, message: impl Into<String>) -> Self {
        Self {
            severity: crate::Severity::Error,
            address: address.to_string(),
            path: path.to_string(),
            message: message.into(),
        }
    }

    pub fn warning(address: &str, path: &str, message: impl Into<String>) -> Self {
        Self {
            severity: crate::Severity::Warning,
            address: address.to_string(),
            path: path.to_string(),
            message: message.into(),
        }
    }
}

/// An object as it exists, untyped: its id, its spec as the API reports it, and the
/// attributes known only after apply.
#[derive(Debug, Clone, PartialEq)]
pub struct Observed {
    pub id: String,
    pub spec: Value,
    pub outputs: Value,
}

/// A custom resource kind an object needs its cluster to serve: `group` is what a
/// provider must offer (`sagemaker.services.k8s.aws`), `api_version` and `kind` what
/// a live cluster is asked about.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ApiKind {
    pub group: String,
    pub api_version: String,
    pub kind: String,
}

/// The Kubernetes API groups an object makes its cluster serve, and those it needs
/// served, read offline from its spec. The engine orders a consumer after the
/// providers of its groups on the same cluster (the resource its `cluster` field
/// references), and so destroys it first, while its controller still runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApiGroups {
    /// Groups served once the object exists: the CRDs it holds, the controllers it runs.
    /// `*.suffix` stands for every group ending in `.suffix`; `-group` withholds one
    /// group a wildcard would cover (an ACK service turned off).
    pub provides: Vec<String>,
    /// Custom resource kinds the object is made of.
    pub needs: Vec<ApiKind>,
    /// The object runs a controller's pods on the cluster's nodes: it is created after
    /// the stack's node groups of that cluster and destroyed before them, so the
    /// controller still runs while what it serves is deleted.
    pub pods: bool,
    /// The object is nodes of its cluster (a node group or pool).
    pub nodes: bool,
}

impl ApiGroups {
    pub fn is_empty(&self) -> bool {
        self.provides.is_empty() && self.needs.is_empty() && !self.pods && !self.nodes
    }

    /// The groups of nodes of a cluster.
    pub fn nodes() -> ApiGroups {
        ApiGroups {
            nodes: true,
            ..ApiGroups::default()
        }
    }
}

/// The untyped face of a resource kind, which the engine uses.
#[async_trait]
pub trait Resource: Send + Sync {
    /// The kind's name as written in stacks (`local_file`).
    fn kind(&self) -> &'static str;
    /// The provider it belongs to (`local`, `gcp`, …): the `[providers.<name>]` table.
    fn provider(&self) -> &'static str;
    /// The kind's fields and reported attributes.
    fn schema(&self) -> &Schema;
    /// Offline checks beyond types: names, ranges, combinations. `spec` has defaults
    /// filled and may hold unknown values (see [`is_unknown`]); skip checks on those.
    /// `config` is the provider's `[providers.<name>]` table (project, region…).
    fn validate(&self, spec: &Value, config: &Value) -> Vec<Invalid>;
    /// Offline checks against the resources this one references (see [`Peer`]).
    fn validate_peers(&self, _spec: &Value, _peers: &[Peer]) -> Vec<Invalid> {
        Vec::new()
    }
    /// Checks that the object can go from `prior` (its refreshed spec) to `spec` by an
    /// in-place update, before anything is applied: the changes an API refuses (an EKS
    /// upgrade that skips a minor version, a downgrade) fail the plan rather than the
    /// apply. `spec` may hold unknown values; skip checks on those.
    fn validate_change(&self, _prior: &Value, _spec: &Value) -> Vec<Invalid> {
        Vec::new()
    }
    /// What the object bills for (see [`crate::usage`]), read offline from `spec`
    /// (defaults filled; it may hold unknown values), the provider's table and the
    /// resources it references. The default bills nothing.
    fn usage(&self, _spec: &Value, _config: &Value, _peers: &[Peer]) -> Vec<crate::Usage> {
        Vec::new()
    }
    /// Whether objects of this kind can bill at all: a plan prices only those, so a
    /// stack of free kinds costs no pricing work.
    fn bills(&self) -> bool {
        false
    }
    /// What the object's nodes ask of their cloud's capacity (see [`crate::capacity`]),
    /// read offline as [`Resource::usage`] is. The default asks for nothing.
    fn demand(&self, _spec: &Value, _config: &Value, _peers: &[Peer]) -> Vec<crate::Demand> {
        Vec::new()
    }
    /// Whether objects of this kind run nodes at all: a plan's capacity preflight reads
    /// only those.
    fn needs_capacity(&self) -> bool {
        false
    }
    /// How `terrain import --write` writes a block of this kind (see [`Writes`]).
    fn writes(&self) -> Writes {
        Writes::No
    }
    /// The API groups the object provides to and needs from its cluster (see
    /// [`ApiGroups`]), read offline from `spec` (defaults filled, maybe unknown values).
    /// The cloud APIs objects of this kind call, which must be on in their project
    /// (`container.googleapis.com`): the plan asks which are off, and orders the object
    /// after the resource of the stack that [`Resource::enables`] its API.
    fn services(&self, _spec: &Value) -> Vec<&'static str> {
        Vec::new()
    }
    /// The cloud API the object turns on in its project, for kinds that do.
    fn enables(&self, _spec: &Value) -> Option<String> {
        None
    }
    fn api_groups(&self, _spec: &Value) -> ApiGroups {
        ApiGroups::default()
    }
    /// The id the object will have, when it can be known before create (ids often
    /// include provider settings such as the project, hence `config`).
    fn planned_id(&self, spec: &Value, config: &Value) -> Option<String>;
    /// Reads the object; `Ok(None)` when it is gone. `prior` is the last applied spec
    /// (`Value::Null` on import).
    async fn read(
        &self,
        ctx: &Ctx,
        id: &str,
        prior: &Value,
    ) -> Result<Option<Observed>, ProviderError>;
    /// The list call that reads this object together with others of its kind, when the
    /// API has one that returns them in full (Kubernetes objects of one kind and namespace,
    /// the node pools of one cluster): objects with equal keys are refreshed by one
    /// [`Resource::read_batch`]. `None`: the object is read alone.
    fn batch_key(&self, _config: &Value, _id: &str, _prior: &Value) -> Option<String> {
        None
    }
    /// Reads objects that share one [`Resource::batch_key`] with one list call (following
    /// its pages). Answers, in the order of `items` (`(id, prior)`), each object as
    /// [`Resource::read`] reports it, or `None` when the list does not show it. The
    /// default reads each one alone.
    async fn read_batch(
        &self,
        ctx: &Ctx,
        items: &[(&str, &Value)],
    ) -> Result<Vec<Option<Observed>>, ProviderError> {
        let mut out = Vec::with_capacity(items.len());
        for (id, prior) in items {
            out.push(self.read(ctx, id, prior).await?);
        }
        Ok(out)
    }
    /// Creates the object and returns once it is ready.
    async fn create(&self, ctx: &Ctx, spec: &Value) -> Result<Observed, ProviderError>;
    /// Updates in place the fields that changed between `prior` and `spec`.
    async fn update(
        &self,
        ctx: &Ctx,
        id: &str,
        prior: &Value,
        spec: &Value,
    ) -> Result<Observed, ProviderError>;
    /// Deletes the object; succeeds when it is already gone.
    async fn delete(&self, ctx: &Ctx, id: &str, prior: &Value) -> Result<(), ProviderError>;
    /// Completes a fully known spec from local inputs before it is diffed: a dataset's
    /// content hash, a queue's items listed from a directory. Runs at plan and again at
    /// apply; fails when those inputs cannot be read. The default changes nothing.
    fn prepare(&self, spec: Value) -> Result<Value, ProviderError> {
        Ok(spec)
    }
    /// The plain objects the resource is made of (Kubernetes manifests), for
    /// `terrain render`; `None` for kinds that have no such form. `spec` may hold unknown
    /// values, which stay in the output as the [`UNKNOWN`] marker.
    fn render(&self, _spec: &Value, _config: &Value) -> Option<Result<Vec<Value>, ProviderError>> {
        None
    }
    /// Extra detail for a planned update or replace, computed against the live object
    /// (a unified YAML diff of a dry-run apply). `Ok(None)` when the kind has none.
    async fn preview(
        &self,
        _ctx: &Ctx,
        _id: &str,
        _prior: &Value,
        _spec: &Value,
    ) -> Result<Option<String>, ProviderError> {
        Ok(None)
    }
    /// Live readiness, for `terrain status`. By default: whether the object exists.
    async fn health(&self, ctx: &Ctx, id: &str, prior: &Value) -> Result<Health, ProviderError> {
        Ok(match self.read(ctx, id, prior).await? {
            Some(_) => Health {
                ready: true,
                summary: "exists".into(),
            },
            None => Health {
                ready: false,
                summary: "missing".into(),
            },
        })
    }
    /// Streams the object's logs line by line into `sink`; with `follow`, until the
    /// object finishes. Kinds without logs answer `ProviderError::Unsupported`.
    async fn logs(
        &self,
        _ctx: &Ctx,
        _id: &str,
        _prior: &Value,
        _follow: bool,
        _sink: LineSink,
    ) -> Result<(), ProviderError> {
        Err(ProviderError::Unsupported(format!(
            "{} has no logs",
            self.kind()
        )))
    }
}

/// Receives log lines (without their newline).
pub type LineSink = Arc<dyn Fn(&str) + Send + Sync>;

/// Live readiness of one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    pub ready: bool,
    /// One line: `Bound`, `1/1 ready`, `Complete (3/3 succeeded)`, `Failed: BackoffLimitExceeded`.
    pub summary: String,
}

/// The marker the engine puts where a value is not known until apply. Providers never
/// see it in create/update; `validate` and `planned_id` may, and must skip such values.
pub const UNKNOWN: &str = "\u{1}terrain:known-after-apply\u{1}";

/// Whether `value` is, or contains, a value not known until apply.
pub fn is_unknown(value: &Value) -> bool {
    match value {
        Value::String(s) => s.contains(UNKNOWN),
        Value::Array(items) => items.iter().any(is_unknown),
        Value::Object(map) => map.values().any(is_unknown),
        _ => false,
    }
}

/// The paths of the values in `value` not known until apply.
fn unknown_paths(value: &Value, at: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    match value {
        Value::String(s) if s.contains(UNKNOWN) => out.push(at.clone()),
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                at.push(i.to_string());
                unknown_paths(v, at, out);
                at.pop();
            }
        }
        Value::Object(map) => {
            for (k, v) in map {
                at.push(k.clone());
                unknown_paths(v, at, out);
                at.pop();
            }
        }
        _ => {}
    }
}

/// `problems` without those on a value of `spec` not known until apply, or on a field
/// holding one (`gpu` when `gpu.type` is unknown), or quoting one: the engine checks
/// again at apply time with every value known. A problem of the whole resource (empty
/// path) stays. `stand_ins` are the unknown values given a placeholder to decode (see
/// [`with_stand_ins`]): a check comparing one with its neighbours (`min` ≤ `max`)
/// read the placeholder, so problems on its siblings are dropped too.
fn without_unknowns(
    spec: &Value,
    stand_ins: &[Vec<String>],
    problems: Vec<Invalid>,
) -> Vec<Invalid> {
    let mut unknown = Vec::new();
    unknown_paths(spec, &mut Vec::new(), &mut unknown);
    problems
        .into_iter()
        .filter(|p| {
            let touches = |u: &Vec<String>| {
                p.path.starts_with(u) || (!p.path.is_empty() && u.starts_with(&p.path))
            };
            let sibling = |u: &Vec<String>| {
                !p.path.is_empty()
                    && p.path.len() == u.len()
                    && p.path[..p.path.len() - 1] == u[..u.len() - 1]
            };
            !p.message.contains(UNKNOWN)
                && !unknown.iter().any(touches)
                && !stand_ins.iter().any(sibling)
        })
        .collect()
}

/// `spec` with each unknown value whose field is not a string given a stand-in of its
/// type (0, false, an empty list or table), so the typed spec decodes and a kind's
/// checks run on everything that is known (an unknown string holds the marker and
/// decodes as it is). Returns the paths given a stand-in.
fn with_stand_ins(fields: &[Field], spec: &Value) -> (Value, Vec<Vec<String>>) {
    let mut out = Vec::new();
    let value = stand_in_fields(fields, spec, &mut Vec::new(), &mut out);
    (value, out)
}

fn stand_in_fields(
    fields: &[Field],
    value: &Value,
    at: &mut Vec<String>,
    out: &mut Vec<Vec<String>>,
) -> Value {
    let Value::Object(map) = value else {
        return value.clone();
    };
    Value::Object(
        map.iter()
            .map(|(k, v)| {
                at.push(k.clone());
                let filled = match fields.iter().find(|f| f.name == k) {
                    Some(f) => stand_in_value(&f.ty, v, at, out),
                    None => v.clone(),
                };
                at.pop();
                (k.clone(), filled)
            })
            .collect(),
    )
}

fn stand_in_value(
    ty: &Type,
    value: &Value,
    at: &mut Vec<String>,
    out: &mut Vec<Vec<String>>,
) -> Value {
    match (ty, value) {
        (Type::String | Type::Any, _) => value.clone(),
        (_, Value::String(s)) if s.contains(UNKNOWN) => {
            out.push(at.clone());
            stand_in(ty)
        }
        (Type::Object(fields), Value::Object(_)) => stand_in_fields(fields, value, at, out),
        (Type::Map(inner), Value::Object(map)) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    at.push(k.clone());
                    let filled = stand_in_value(inner, v, at, out);
                    at.pop();
                    (k.clone(), filled)
                })
                .collect(),
        ),
        (Type::List(inner), Value::Array(items)) => Value::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    at.push(i.to_string());
                    let filled = stand_in_value(inner, v, at, out);
                    at.pop();
                    filled
                })
                .collect(),
        ),
        _ => value.clone(),
    }
}

/// A value of type `ty` that decodes: required fields of tables filled in turn.
fn stand_in(ty: &Type) -> Value {
    match ty {
        Type::String | Type::Any => Value::String(UNKNOWN.to_string()),
        Type::Int => Value::from(0),
        Type::Float => Value::from(0.0),
        Type::Bool => Value::Bool(false),
        Type::List(_) => Value::Array(Vec::new()),
        Type::Map(_) => Value::Object(Default::default()),
        Type::Object(fields) => Value::Object(
            fields
                .iter()
                .filter(|f| f.required)
                .map(|f| (f.name.to_string(), stand_in(&f.ty)))
                .collect(),
        ),
    }
}

/// Puts the unknown marker back at `paths` of `value` (after a stand-in served).
fn restore_unknowns(value: &mut Value, paths: &[Vec<String>]) {
    for path in paths {
        if let Some(slot) = slot_at(value, path) {
            *slot = Value::String(UNKNOWN.to_string());
        }
    }
}

fn slot_at<'a>(value: &'a mut Value, path: &[String]) -> Option<&'a mut Value> {
    let Some((first, rest)) = path.split_first() else {
        return Some(value);
    };
    let next = match value {
        Value::Object(map) => map.get_mut(first)?,
        Value::Array(items) => items.get_mut(first.parse::<usize>().ok()?)?,
        _ => return None,
    };
    slot_at(next, rest)
}

/// A typed object as it exists.
#[derive(Debug, Clone, PartialEq)]
pub struct Live<K: Kind> {
    pub id: String,
    pub spec: K::Spec,
    pub outputs: K::Outputs,
}

/// How `terrain import --write` writes the block of an object it imports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Writes {
    /// From the object its id names: `read` gives every field of the block.
    FromId,
    /// A Kubernetes object found on a cluster, written out as a manifest file (the kind
    /// Kubernetes objects built by hand are adopted as).
    Manifest,
    /// A Kubernetes object terrain renders from fields: adopted as the [`Writes::Manifest`]
    /// kind instead.
    AsManifest,
    /// Not written: declare the block by hand, then import.
    No,
}

/// A resource kind, typed. Implement this, then register `Adapter::new(kind)`.
#[async_trait]
pub trait Kind: Send + Sync + 'static {
    /// What a stack writes: its fields, docs, defaults and flags are the kind's schema
    /// (`#[derive(Fields)]`).
    type Spec: Serialize
        + DeserializeOwned
        + Send
        + Sync
        + Clone
        + std::fmt::Debug
        + PartialEq
        + crate::schema::Fields;
    /// What the kind reports once applied, likewise.
    type Outputs: Serialize
        + DeserializeOwned
        + Send
        + Sync
        + Clone
        + std::fmt::Debug
        + PartialEq
        + crate::schema::Fields;
    /// The kind's name as written in stacks.
    const KIND: &'static str;
    /// The provider it belongs to.
    const PROVIDER: &'static str;
    /// Whether objects of the kind bill (see [`Resource::bills`]); set with
    /// [`Kind::usage`].
    const BILLS: bool = false;
    /// Whether objects of the kind run nodes (see [`Resource::needs_capacity`]); set
    /// with [`Kind::demand`].
    const NEEDS_CAPACITY: bool = false;
    /// How `terrain import --write` writes a block of the kind (see [`Writes`]).
    const WRITES: Writes = Writes::No;

    /// The kind's fields, as its `Spec` and `Outputs` types declare them.
    fn schema() -> Schema {
        Schema::of::<Self::Spec, Self::Outputs>()
    }
    /// Offline checks on a fully known spec; `config` is the provider's table.
    fn validate(_spec: &Self::Spec, _config: &Value) -> Vec<Invalid> {
        Vec::new()
    }
    /// Offline checks against referenced resources; `spec` may hold unknown values.
    fn validate_peers(_spec: &Value, _peers: &[Peer]) -> Vec<Invalid> {
        Vec::new()
    }
    /// Checks that an in-place update can take the object from `prior` to `spec` (see
    /// [`Resource::validate_change`]); `spec` may hold the unknown marker in strings.
    fn validate_change(_prior: &Self::Spec, _spec: &Self::Spec) -> Vec<Invalid> {
        Vec::new()
    }
    /// What the object bills for (see [`Resource::usage`]); untyped, as `spec` may hold
    /// unknown values.
    fn usage(_spec: &Value, _config: &Value, _peers: &[Peer]) -> Vec<crate::Usage> {
        Vec::new()
    }
    /// What the object's nodes ask of their cloud (see [`Resource::demand`]); untyped,
    /// as `spec` may hold unknown values.
    fn demand(_spec: &Value, _config: &Value, _peers: &[Peer]) -> Vec<crate::Demand> {
        Vec::new()
    }
    /// The API groups the object provides to and needs from its cluster (see
    /// [`Resource::api_groups`]); untyped, as `spec` may hold unknown values.
    fn api_groups(_spec: &Value) -> ApiGroups {
        ApiGroups::default()
    }
    /// The cloud APIs the object calls (see [`Resource::services`]); `spec` may hold
    /// unknown values.
    fn services(_spec: &Value) -> Vec<&'static str> {
        Vec::new()
    }
    /// The cloud API the object turns on (see [`Resource::enables`]).
    fn enables(_spec: &Value) -> Option<String> {
        None
    }
    /// The id the object will have, when known before create.
    fn planned_id(_spec: &Self::Spec, _config: &Value) -> Option<String> {
        None
    }
    async fn read(
        &self,
        ctx: &Ctx,
        id: &str,
        prior: Option<&Self::Spec>,
    ) -> Result<Option<Live<Self>>, ProviderError>
    where
        Self: Sized;
    /// The list call that reads this object together with others (see
    /// [`Resource::batch_key`]); `None` (the default) reads it alone.
    fn batch_key(_config: &Value, _id: &str, _prior: Option<&Self::Spec>) -> Option<String> {
        None
    }
    /// Reads objects sharing one [`Kind::batch_key`] with one list call (see
    /// [`Resource::read_batch`]); the default reads each one alone.
    async fn read_batch(
        &self,
        ctx: &Ctx,
        items: &[(String, Option<Self::Spec>)],
    ) -> Result<Vec<Option<Live<Self>>>, ProviderError>
    where
        Self: Sized,
    {
        let mut out = Vec::with_capacity(items.len());
        for (id, prior) in items {
            out.push(self.read(ctx, id, prior.as_ref()).await?);
        }
        Ok(out)
    }
    async fn create(&self, ctx: &Ctx, spec: &Self::Spec) -> Result<Live<Self>, ProviderError>
    where
        Self: Sized;
    async fn update(
        &self,
        ctx: &Ctx,
        id: &str,
        prior: &Self::Spec,
        spec: &Self::Spec,
    ) -> Result<Live<Self>, ProviderError>
    where
        Self: Sized;
    async fn delete(
        &self,
        ctx: &Ctx,
        id: &str,
        prior: Option<&Self::Spec>,
    ) -> Result<(), ProviderError>
    where
        Self: Sized;
    /// Completes a fully known spec from local inputs (see [`Resource::prepare`]).
    fn prepare(spec: Self::Spec) -> Result<Self::Spec, ProviderError> {
        Ok(spec)
    }
    /// Whether the kind has a rendered form: set it when implementing `render`, so a spec
    /// that cannot decode yet is reported rather than shown as having no manifests.
    const RENDERS: bool = false;
    /// The plain objects the resource is made of (see [`Resource::render`]).
    fn render(_spec: &Self::Spec, _config: &Value) -> Option<Result<Vec<Value>, ProviderError>> {
        None
    }
    /// Extra plan detail for an update or replace (see [`Resource::preview`]).
    async fn preview(
        &self,
        _ctx: &Ctx,
        _id: &str,
        _prior: &Self::Spec,
        _spec: &Self::Spec,
    ) -> Result<Option<String>, ProviderError>
    where
        Self: Sized,
    {
        Ok(None)
    }
    /// Live readiness; `None` falls back to "exists"/"missing" from `read`.
    async fn health(
        &self,
        _ctx: &Ctx,
        _id: &str,
        _prior: Option<&Self::Spec>,
    ) -> Result<Option<Health>, ProviderError>
    where
        Self: Sized,
    {
        Ok(None)
    }
    /// Streams logs (see [`Resource::logs`]).
    async fn logs(
        &self,
        _ctx: &Ctx,
        _id: &str,
        _prior: Option<&Self::Spec>,
        _follow: bool,
        _sink: LineSink,
    ) -> Result<(), ProviderError>
    where
        Self: Sized,
    {
        Err(ProviderError::Unsupported(format!(
            "{} has no logs",
            Self::KIND
        )))
    }
}

/// Turns a typed [`Kind`] into the untyped [`Resource`] the engine drives.
pub struct Adapter<K: Kind> {
    kind: K,
    schema: Schema,
}

impl<K: Kind> Adapter<K> {
    /// Wraps `kind`, computing its schema once.
    pub fn new(kind: K) -> Self {
        Self {
            kind,
            schema: K::schema(),
        }
    }

    /// The wrapped kind.
    pub fn inner(&self) -> &K {
        &self.kind
    }

    fn decode(&self, spec: &Value) -> Result<K::Spec, ProviderError> {
        serde_json::from_value(self.schema.with_defaults(spec)).map_err(|source| {
            ProviderError::Decode {
                what: "spec",
                source,
            }
        })
    }

    fn decode_prior(&self, prior: &Value) -> Result<Option<K::Spec>, ProviderError> {
        if prior.is_null() {
            Ok(None)
        } else {
            self.decode(prior).map(Some)
        }
    }
}

fn encode<K: Kind>(live: Live<K>) -> Result<Observed, ProviderError> {
    Ok(Observed {
        id: live.id,
        spec: serde_json::to_value(&live.spec).map_err(|source| ProviderError::Decode {
            what: "live spec",
            source,
        })?,
        outputs: serde_json::to_value(&live.outputs).map_err(|source| ProviderError::Decode {
            what: "outputs",
            source,
        })?,
    })
}

#[async_trait]
impl<K: Kind> Resource for Adapter<K> {
    fn kind(&self) -> &'static str {
        K::KIND
    }

    fn provider(&self) -> &'static str {
        K::PROVIDER
    }

    fn schema(&self) -> &Schema {
        &self.schema
    }

    fn validate(&self, spec: &Value, config: &Value) -> Vec<Invalid> {
        if !is_unknown(spec) {
            return match self.decode(spec) {
                Ok(typed) => K::validate(&typed, config),
                Err(e) => vec![Invalid::at("", e.to_string())],
            };
        }
        // Values known only after apply (another resource's id) must not hide mistakes
        // in the rest of the spec: unknown strings decode as they are (they hold the
        // marker), other unknowns get a stand-in, so the kind's checks run; problems
        // on an unknown field, or quoting one, are dropped, and the engine validates
        // again at apply time with every value known.
        let (decodable, stand_ins) = with_stand_ins(&self.schema.fields, spec);
        // A typed field that cannot hold the marker (an enum) still fails to decode:
        // that spec waits for apply, where it is validated whole.
        let Ok(typed) = self.decode(&decodable) else {
            return Vec::new();
        };
        without_unknowns(spec, &stand_ins, K::validate(&typed, config))
    }

    fn validate_peers(&self, spec: &Value, peers: &[Peer]) -> Vec<Invalid> {
        K::validate_peers(spec, peers)
    }

    fn usage(&self, spec: &Value, config: &Value, peers: &[Peer]) -> Vec<crate::Usage> {
        K::usage(&self.schema.with_defaults(spec), config, peers)
    }

    fn bills(&self) -> bool {
        K::BILLS
    }

    fn demand(&self, spec: &Value, config: &Value, peers: &[Peer]) -> Vec<crate::Demand> {
        K::demand(&self.schema.with_defaults(spec), config, peers)
    }

    fn needs_capacity(&self) -> bool {
        K::NEEDS_CAPACITY
    }

    fn writes(&self) -> Writes {
        K::WRITES
    }

    fn api_groups(&self, spec: &Value) -> ApiGroups {
        K::api_groups(spec)
    }

    fn services(&self, spec: &Value) -> Vec<&'static str> {
        K::services(spec)
    }

    fn enables(&self, spec: &Value) -> Option<String> {
        K::enables(spec)
    }

    fn validate_change(&self, prior: &Value, spec: &Value) -> Vec<Invalid> {
        // A prior that no longer decodes (state from an older schema) has nothing to
        // compare against; the update itself will say what it cannot do.
        let Ok(before) = self.decode(prior) else {
            return Vec::new();
        };
        let Ok(after) = self.decode(spec) else {
            return Vec::new();
        };
        without_unknowns(spec, &[], K::validate_change(&before, &after))
    }

    fn planned_id(&self, spec: &Value, config: &Value) -> Option<String> {
        if is_unknown(spec) || is_unknown(config) {
            return None;
        }
        self.decode(spec)
            .ok()
            .and_then(|s| K::planned_id(&s, config))
    }

    async fn read(
        &self,
        ctx: &Ctx,
        id: &str,
        prior: &Value,
    ) -> Result<Option<Observed>, ProviderError> {
        let prior = self.decode_prior(prior)?;
        match self.kind.read(ctx, id, prior.as_ref()).await? {
            Some(live) => encode(live).map(Some),
            None => Ok(None),
        }
    }

    fn batch_key(&self, config: &Value, id: &str, prior: &Value) -> Option<String> {
        let prior = self.decode_prior(prior).ok()?;
        K::batch_key(config, id, prior.as_ref())
    }

    async fn read_batch(
        &self,
        ctx: &Ctx,
        items: &[(&str, &Value)],
    ) -> Result<Vec<Option<Observed>>, ProviderError> {
        let mut typed = Vec::with_capacity(items.len());
        for (id, prior) in items {
            typed.push((id.to_string(), self.decode_prior(prior)?));
        }
        let live = self.kind.read_batch(ctx, &typed).await?;
        // The typed priors go before the answers are encoded: a list of thousands
        // holds one copy of them at a time.
        drop(typed);
        if live.len() != items.len() {
            return Err(ProviderError::Unsupported(format!(
                "{}: a batch read of {} objects answered {}",
                K::KIND,
                items.len(),
                live.len()
            )));
        }
        live.into_iter()
            .map(|l| l.map(encode).transpose())
            .collect()
    }

    async fn create(&self, ctx: &Ctx, spec: &Value) -> Result<Observed, ProviderError> {
        let spec = self.decode(spec)?;
        encode(self.kind.create(ctx, &spec).await?)
    }

    async fn update(
        &self,
        ctx: &Ctx,
        id: &str,
        prior: &Value,
        spec: &Value,
    ) -> Result<Observed, ProviderError> {
        let prior = self.decode(prior)?;
        let spec = self.decode(spec)?;
        encode(self.kind.update(ctx, id, &prior, &spec).await?)
    }

    async fn delete(&self, ctx: &Ctx, id: &str, prior: &Value) -> Result<(), ProviderError> {
        let prior = self.decode_prior(prior)?;
        self.kind.delete(ctx, id, prior.as_ref()).await
    }

    fn prepare(&self, spec: Value) -> Result<Value, ProviderError> {
        // A spec still waiting on other resources is prepared as far as it can be
        // (kinds skip inputs that are unknown); stand-ins go back to unknown after.
        let (decodable, stand_ins) = with_stand_ins(&self.schema.fields, &spec);
        let typed = self.decode(&decodable)?;
        let prepared = K::prepare(typed.clone())?;
        // Unchanged specs keep their exact shape: a round trip through the typed spec
        // would add nulls for absent optional fields, which plans show differently.
        if prepared == typed {
            return Ok(spec);
        }
        let mut value = serde_json::to_value(prepared).map_err(|source| ProviderError::Decode {
            what: "prepared spec",
            source,
        })?;
        restore_unknowns(&mut value, &stand_ins);
        Ok(value)
    }

    fn render(&self, spec: &Value, config: &Value) -> Option<Result<Vec<Value>, ProviderError>> {
        match self.decode(spec) {
            Ok(spec) => K::render(&spec, config),
            // A spec that does not decode (an unknown number) renders once it is known.
            Err(e) => K::RENDERS.then_some(Err(e)),
        }
    }

    async fn preview(
        &self,
        ctx: &Ctx,
        id: &str,
        prior: &Value,
        spec: &Value,
    ) -> Result<Option<String>, ProviderError> {
        let prior = self.decode(prior)?;
        let spec = self.decode(spec)?;
        self.kind.preview(ctx, id, &prior, &spec).await
    }

    async fn health(&self, ctx: &Ctx, id: &str, prior: &Value) -> Result<Health, ProviderError> {
        let typed = self.decode_prior(prior)?;
        if let Some(h) = self.kind.health(ctx, id, typed.as_ref()).await? {
            return Ok(h);
        }
        Ok(match self.kind.read(ctx, id, typed.as_ref()).await? {
            Some(_) => Health {
                ready: true,
                summary: "exists".into(),
            },
            None => Health {
                ready: false,
                summary: "missing".into(),
            },
        })
    }

    async fn logs(
        &self,
        ctx: &Ctx,
        id: &str,
        prior: &Value,
        follow: bool,
        sink: LineSink,
    ) -> Result<(), ProviderError> {
        let prior = self.decode_prior(prior)?;
        self.kind.logs(ctx, id, prior.as_ref(), follow, sink).await
    }
}
