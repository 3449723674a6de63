//! Test support shipped with the crate (not `cfg(test)`, because the engine's tests and
//! benchmark use it): [`TestCloud`], an in-memory cloud that records every call and can
//! inject latency, failures and drift, with its kinds `test_thing` and `test_pool`; and
//! [`schema_mismatches`], the check each kind uses to prove the schema derived from its
//! types agrees with what serde does with them.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::schema::Fields;
use crate::{Adapter, Ctx, Field, Invalid, Kind, Live, ProviderError, Registry, Schema};

/// A provider operation, as recorded in [`Call`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    Read,
    /// One list call that reads many objects ([`Kind::read_batch`]); recorded with the
    /// id `*`.
    List,
    Create,
    Update,
    Delete,
}

impl Op {
    fn verb(self) -> &'static str {
        match self {
            Op::Read => "get",
            Op::List => "list",
            Op::Create => "create",
            Op::Update => "update",
            Op::Delete => "delete",
        }
    }
}

/// One call a kind received, recorded when the call starts (so the log order is the
/// order the engine issued calls in, whatever their latency).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub op: Op,
    pub kind: String,
    /// The object's id; for create, the spec's name (which becomes the id).
    pub id: String,
    pub address: String,
}

/// What the cloud holds for one object.
#[derive(Debug, Clone)]
struct Stored {
    spec: Value,
    version: i64,
    /// The address whose create made it, as real clouds keep it in a label: a create
    /// for the same address adopts the object (an earlier create's answer was lost).
    address: Option<String>,
}

#[derive(Debug)]
struct Inner {
    latency: Duration,
    delays: HashMap<String, Duration>,
    failures: HashMap<(Op, String), usize>,
    /// Creates that make their object and then fail (see [`TestCloud::fail_after_create`]).
    broken: HashMap<String, usize>,
    recording: bool,
    /// Specs the next create or update of a name answers with instead of what it
    /// stored (see [`TestCloud::misreport`]).
    misreports: HashMap<String, Value>,
    calls: Vec<Call>,
    objects: BTreeMap<String, Stored>,
    creates: HashMap<String, usize>,
}

/// An in-memory cloud for tests. Clones share the same state, so a test keeps one
/// handle to inspect and steer while the engine drives the kinds bound to it.
#[derive(Clone, Debug)]
pub struct TestCloud {
    inner: Arc<Mutex<Inner>>,
}

impl Default for TestCloud {
    fn default() -> Self {
        Self::new()
    }
}

impl TestCloud {
    /// An empty cloud with no latency, recording calls.
    pub fn new() -> Self {
        Self {
            inner: Arc::new(Mutex::new(Inner {
                latency: Duration::ZERO,
                delays: HashMap::new(),
                failures: HashMap::new(),
                broken: HashMap::new(),
                recording: true,
                misreports: HashMap::new(),
                calls: Vec::new(),
                objects: BTreeMap::new(),
                creates: HashMap::new(),
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A test that panicked while holding the lock must not turn every later
        // assertion into a confusing poison error; the state itself stays consistent
        // because no method panics half-way through a change.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Makes every call sleep `d` before doing anything.
    pub fn set_latency(&self, d: Duration) {
        self.lock().latency = d;
    }

    /// Adds `d` of latency to calls on the object named `name`.
    pub fn delay(&self, name: &str, d: Duration) {
        self.lock().delays.insert(name.to_string(), d);
    }

    /// Makes the next `times` creates of `name` store the object and then fail, as a
    /// run that does not succeed does: the error is [`ProviderError::Tainted`].
    pub fn fail_after_create(&self, name: &str, times: usize) {
        self.lock().broken.insert(name.to_string(), times);
    }

    /// Makes the next `times` calls of `op` on object `name` fail with a 500.
    pub fn fail(&self, op: Op, name: &str, times: usize) {
        self.lock().failures.insert((op, name.to_string()), times);
    }

    /// Every call recorded so far, in the order they started.
    pub fn calls(&self) -> Vec<Call> {
        self.lock().calls.clone()
    }

    /// Forgets the recorded calls.
    pub fn clear_calls(&self) {
        self.lock().calls.clear();
    }

    /// Turns call recording on or off (the benchmark turns it off so that the log's
    /// growth is not part of what it measures).
    pub fn set_recording(&self, on: bool) {
        self.lock().recording = on;
    }

    /// The objects that exist, id → live spec.
    pub fn objects(&self) -> BTreeMap<String, Value> {
        self.lock()
            .objects
            .iter()
            .map(|(id, o)| (id.clone(), o.spec.clone()))
            .collect()
    }

    /// How many creates of `name` have ever succeeded; more than one for an object the
    /// engine never meant to replace means it created a duplicate.
    pub fn creates_of(&self, name: &str) -> usize {
        self.lock().creates.get(name).copied().unwrap_or(0)
    }

    /// Sets the live spec of `name` as if changed outside terrain (creating the object
    /// when absent, without counting it as a create). Left-out fields take their
    /// defaults when read.
    pub fn set_live(&self, name: &str, spec: Value) {
        let mut inner = self.lock();
        match inner.objects.get_mut(name) {
            Some(stored) => stored.spec = spec,
            None => {
                inner.objects.insert(
                    name.to_string(),
                    Stored {
                        spec,
                        version: 1,
                        address: None,
                    },
                );
            }
        }
    }

    /// Makes the next create or update of `name` answer with `spec` merged over what it
    /// was asked for: a provider breaking its promise (the engine must notice).
    pub fn misreport(&self, name: &str, spec: Value) {
        self.lock().misreports.insert(name.to_string(), spec);
    }

    /// The answer for a create or update of `name` that stored `spec`.
    fn answer<S: Serialize + DeserializeOwned + Clone>(
        &self,
        name: &str,
        spec: &S,
    ) -> Result<S, ProviderError> {
        let Some(over) = self.lock().misreports.remove(name) else {
            return Ok(spec.clone());
        };
        let mut value = encode(spec)?;
        if let (Value::Object(base), Value::Object(extra)) = (&mut value, over) {
            base.extend(extra);
        }
        serde_json::from_value(value).map_err(|source| ProviderError::Decode {
            what: "misreported spec",
            source,
        })
    }

    /// Stores `name` as a create for `address` left it when its answer was lost (the
    /// run died mid-call): a later create for that address adopts it.
    pub fn set_made_by(&self, name: &str, spec: Value, address: &str) {
        self.lock().objects.insert(
            name.to_string(),
            Stored {
                spec,
                version: 1,
                address: Some(address.to_string()),
            },
        );
    }

    /// Deletes `name` as if done outside terrain.
    pub fn remove_live(&self, name: &str) {
        self.lock().objects.remove(name);
    }

    /// The builtin kinds plus the test kinds, bound to this cloud. Objects of both
    /// kinds share one namespace of ids, as names would in one project.
    pub fn registry(&self) -> Registry {
        let mut registry = crate::registry::builtin();
        registry.register(Arc::new(Adapter::new(TestThing {
            cloud: self.clone(),
        })));
        registry.register(Arc::new(Adapter::new(TestPool {
            cloud: self.clone(),
        })));
        registry
    }

    /// Records the call, waits out the latency, then consumes an injected failure if
    /// one is pending. The lock is released while sleeping so that concurrent calls
    /// really overlap.
    async fn enter(&self, op: Op, kind: &str, name: &str, ctx: &Ctx) -> Result<(), ProviderError> {
        let wait = {
            let mut inner = self.lock();
            if inner.recording {
                inner.calls.push(Call {
                    op,
                    kind: kind.to_string(),
                    id: name.to_string(),
                    address: ctx.address.clone(),
                });
            }
            inner.latency + inner.delays.get(name).copied().unwrap_or(Duration::ZERO)
        };
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        let mut inner = self.lock();
        if let Some(left) = inner.failures.get_mut(&(op, name.to_string())) {
            if *left > 0 {
                *left -= 1;
                return Err(ProviderError::api(
                    call_name(kind, op),
                    500,
                    "INTERNAL",
                    "injected failure",
                ));
            }
        }
        Ok(())
    }

    /// Whether this create of `name` is one [`TestCloud::fail_after_create`] asked for.
    fn comes_out_broken(&self, name: &str) -> bool {
        let mut inner = self.lock();
        match inner.broken.get_mut(name) {
            Some(left) if *left > 0 => {
                *left -= 1;
                true
            }
            _ => false,
        }
    }

    /// The live spec and version of `id`, decoded with `schema`'s defaults filled in
    /// (set_live may store a partial spec), or `None` when it does not exist.
    fn fetch<S: DeserializeOwned>(
        &self,
        schema: &Schema,
        id: &str,
    ) -> Result<Option<(S, i64)>, ProviderError> {
        let Some(stored) = self.lock().objects.get(id).cloned() else {
            return Ok(None);
        };
        let spec =
            serde_json::from_value(schema.with_defaults(&stored.spec)).map_err(|source| {
                ProviderError::Decode {
                    what: "live spec",
                    source,
                }
            })?;
        Ok(Some((spec, stored.version)))
    }

    /// Stores a new object at version 1 and counts the create; a conflict when `name`
    /// is taken, unless a create for the same `address` made it: then that object is
    /// adopted as it is (`true`), as real providers do with their address label.
    fn insert_new(
        &self,
        kind: &str,
        name: &str,
        spec: Value,
        address: &str,
    ) -> Result<bool, ProviderError> {
        let mut inner = self.lock();
        if let Some(existing) = inner.objects.get(name) {
            if existing.address.as_deref() == Some(address) {
                return Ok(true);
            }
            return Err(ProviderError::api(
                call_name(kind, Op::Create),
                409,
                "ALREADY_EXISTS",
                format!("{} {name:?} already exists", noun(kind)),
            ));
        }
        inner.objects.insert(
            name.to_string(),
            Stored {
                spec,
                version: 1,
                address: Some(address.to_string()),
            },
        );
        *inner.creates.entry(name.to_string()).or_insert(0) += 1;
        Ok(false)
    }

    /// Replaces the spec of `id` and returns its new version; not found when absent.
    fn overwrite(&self, kind: &str, id: &str, spec: Value) -> Result<i64, ProviderError> {
        let mut inner = self.lock();
        let Some(stored) = inner.objects.get_mut(id) else {
            return Err(ProviderError::api(
                call_name(kind, Op::Update),
                404,
                "NOT_FOUND",
                format!("{} {id:?} does not exist", noun(kind)),
            ));
        };
        stored.spec = spec;
        stored.version += 1;
        Ok(stored.version)
    }
}

/// What a kind's objects are called in messages: `thing`, `pool`.
fn noun(kind: &str) -> &str {
    kind.strip_prefix("test_").unwrap_or(kind)
}

/// The API method a call stands for: `test.things.create`, `test.pools.update`.
fn call_name(kind: &str, op: Op) -> String {
    format!("test.{}s.{}", noun(kind), op.verb())
}

/// The spec of `test_thing`: one field of each shape the engine must handle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct ThingSpec {
    /// The thing's name, which is also its id.
    #[terrain(force_new)]
    pub name: String,
    /// A free-form value, updatable in place.
    pub value: Option<String>,
    /// A non-negative size, updatable in place.
    #[serde(default = "default_size")]
    pub size: i64,
    /// Labels on the thing.
    pub tags: Option<BTreeMap<String, String>>,
    /// A secret, never printed.
    #[terrain(sensitive)]
    pub secret: Option<String>,
    /// An ordered list of strings.
    pub items: Option<Vec<String>>,
    /// Where the thing lives; changing it replaces the thing.
    #[terrain(force_new)]
    pub zone: Option<String>,
}

fn default_size() -> i64 {
    1
}

/// What `test_thing` reports after apply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct ThingOutputs {
    /// test:thing/<name>.
    pub arn: String,
    /// 1 on create, one more on each update.
    pub version: i64,
    /// https://<name>.test.
    pub endpoint: String,
}

/// The kind `test_thing` (provider `test`), whose objects live in a [`TestCloud`].
#[derive(Clone, Debug)]
pub struct TestThing {
    pub cloud: TestCloud,
}

impl TestThing {
    fn live(name: &str, spec: ThingSpec, version: i64) -> Live<Self> {
        Live {
            id: name.to_string(),
            spec,
            outputs: ThingOutputs {
                arn: format!("test:thing/{name}"),
                version,
                endpoint: format!("https://{name}.test"),
            },
        }
    }
}

fn encode<S: Serialize>(spec: &S) -> Result<Value, ProviderError> {
    serde_json::to_value(spec).map_err(|source| ProviderError::Decode {
        what: "spec",
        source,
    })
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

#[async_trait]
impl Kind for TestThing {
    type Spec = ThingSpec;
    type Outputs = ThingOutputs;
    const KIND: &'static str = "test_thing";
    const PROVIDER: &'static str = "test";

    fn validate(spec: &ThingSpec, _config: &serde_json::Value) -> Vec<Invalid> {
        let mut problems = Vec::new();
        if !valid_name(&spec.name) {
            problems.push(Invalid::at(
                "name",
                format!(
                    "{:?} is not a valid name: use lowercase letters, digits and '-', starting with a letter",
                    spec.name
                ),
            ));
        }
        if spec.size < 0 {
            problems.push(Invalid::at(
                "size",
                format!("must be 0 or more, got {}", spec.size),
            ));
        }
        problems
    }

    fn planned_id(spec: &ThingSpec, _config: &serde_json::Value) -> Option<String> {
        Some(spec.name.clone())
    }

    async fn read(
        &self,
        ctx: &Ctx,
        id: &str,
        _prior: Option<&ThingSpec>,
    ) -> Result<Option<Live<Self>>, ProviderError> {
        self.cloud.enter(Op::Read, Self::KIND, id, ctx).await?;
        let found = self.cloud.fetch::<ThingSpec>(&Self::schema(), id)?;
        Ok(found.map(|(spec, version)| Self::live(id, spec, version)))
    }

    /// Every thing is in one list, as a real API lists all objects of a kind.
    fn batch_key(
        _config: &serde_json::Value,
        _id: &str,
        _prior: Option<&ThingSpec>,
    ) -> Option<String> {
        Some(Self::KIND.to_string())
    }

    /// One list call (with the same latency as a read) answers for every object.
    async fn read_batch(
        &self,
        ctx: &Ctx,
        items: &[(String, Option<ThingSpec>)],
    ) -> Result<Vec<Option<Live<Self>>>, ProviderError> {
        self.cloud.enter(Op::List, Self::KIND, "*", ctx).await?;
        let schema = Self::schema();
        items
            .iter()
            .map(|(id, _)| {
                let found = self.cloud.fetch::<ThingSpec>(&schema, id)?;
                Ok(found.map(|(spec, version)| Self::live(id, spec, version)))
            })
            .collect()
    }

    async fn create(&self, ctx: &Ctx, spec: &ThingSpec) -> Result<Live<Self>, ProviderError> {
        self.cloud
            .enter(Op::Create, Self::KIND, &spec.name, ctx)
            .await?;
        if self
            .cloud
            .insert_new(Self::KIND, &spec.name, encode(spec)?, &ctx.address)?
        {
            if let Some((live, version)) = self.cloud.fetch(&Self::schema(), &spec.name)? {
                return Ok(Self::live(&spec.name, live, version));
            }
        }
        if self.cloud.comes_out_broken(&spec.name) {
            return Err(ProviderError::tainted(
                &spec.name,
                ProviderError::Failed {
                    call: call_name(Self::KIND, Op::Create),
                    message: "injected: the object came out broken".into(),
                },
            ));
        }
        Ok(Self::live(
            &spec.name,
            self.cloud.answer(&spec.name, spec)?,
            1,
        ))
    }

    async fn update(
        &self,
        ctx: &Ctx,
        id: &str,
        _prior: &ThingSpec,
        spec: &ThingSpec,
    ) -> Result<Live<Self>, ProviderError> {
        self.cloud.enter(Op::Update, Self::KIND, id, ctx).await?;
        let version = self.cloud.overwrite(Self::KIND, id, encode(spec)?)?;
        Ok(Self::live(id, self.cloud.answer(id, spec)?, version))
    }

    async fn delete(
        &self,
        ctx: &Ctx,
        id: &str,
        _prior: Option<&ThingSpec>,
    ) -> Result<(), ProviderError> {
        self.cloud.enter(Op::Delete, Self::KIND, id, ctx).await?;
        self.cloud.lock().objects.remove(id);
        Ok(())
    }
}

/// The spec of `test_pool`: a node pool in miniature, whose outputs each follow a
/// different part of the spec (see [`PoolOutputs`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct PoolSpec {
    /// The pool's name, which is also its id.
    #[terrain(force_new)]
    pub name: String,
    /// The machine type of the pool's nodes, updatable in place.
    #[serde(default = "default_machine")]
    pub machine: String,
    /// Labels on the pool's machines.
    pub machine_labels: Option<BTreeMap<String, String>>,
    /// Bounds on the node count, updatable in place.
    pub autoscaling: Option<Autoscaling>,
}

/// `test_pool`'s node-count bounds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Autoscaling {
    /// The fewest nodes.
    pub min: i64,
    /// The most nodes.
    pub max: i64,
}

fn default_machine() -> String {
    "small".to_string()
}

/// What `test_pool` reports after apply. `placement` follows `name` and `machine`,
/// `max_nodes` follows `autoscaling.max`, `cluster` follows nothing, and `generation`
/// declares nothing, so any update makes it unknown.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct PoolOutputs {
    /// <name>/<machine>, where workloads placed on the pool land.
    #[terrain(derived_from = ["name", "machine"])]
    pub placement: String,
    /// autoscaling.max, or 1 without autoscaling.
    #[terrain(derived_from = ["autoscaling.max"])]
    pub max_nodes: i64,
    /// The cluster the pool belongs to.
    #[terrain(derived_from = [])]
    pub cluster: String,
    /// 1 on create, one more on each update.
    pub generation: i64,
}

/// The kind `test_pool` (provider `test`), whose objects live in a [`TestCloud`]; every
/// field but `name` updates in place, as a GKE node pool's autoscaling does.
#[derive(Clone, Debug)]
pub struct TestPool {
    pub cloud: TestCloud,
}

impl TestPool {
    fn live(name: &str, spec: PoolSpec, version: i64) -> Live<Self> {
        let outputs = PoolOutputs {
            placement: format!("{name}/{}", spec.machine),
            max_nodes: spec.autoscaling.as_ref().map_or(1, |a| a.max),
            cluster: "test-cluster".to_string(),
            generation: version,
        };
        Live {
            id: name.to_string(),
            spec,
            outputs,
        }
    }
}

#[async_trait]
impl Kind for TestPool {
    type Spec = PoolSpec;
    type Outputs = PoolOutputs;
    const KIND: &'static str = "test_pool";
    const PROVIDER: &'static str = "test";

    fn validate(spec: &PoolSpec, _config: &serde_json::Value) -> Vec<Invalid> {
        let mut problems = Vec::new();
        if !valid_name(&spec.name) {
            problems.push(Invalid::at(
                "name",
                format!(
                    "{:?} is not a valid name: use lowercase letters, digits and '-', starting with a letter",
                    spec.name
                ),
            ));
        }
        if let Some(a) = &spec.autoscaling {
            if a.min < 0 || a.min > a.max {
                problems.push(Invalid::at(
                    "autoscaling",
                    format!("needs 0 <= min <= max, got min {} and max {}", a.min, a.max),
                ));
            }
        }
        problems
    }

    fn validate_change(prior: &PoolSpec, spec: &PoolSpec) -> Vec<Invalid> {
        // As some node pool APIs do: machines grow in place but never shrink.
        const SIZES: [&str; 3] = ["small", "medium", "large"];
        let rank = |m: &str| SIZES.iter().position(|s| *s == m);
        match (rank(&prior.machine), rank(&spec.machine)) {
            (Some(from), Some(to)) if to < from => vec![Invalid::at(
                "machine",
                format!(
                    "{} machines cannot shrink to {} in place; rename the pool to replace it",
                    prior.machine, spec.machine
                ),
            )],
            _ => Vec::new(),
        }
    }

    fn planned_id(spec: &PoolSpec, _config: &serde_json::Value) -> Option<String> {
        Some(spec.name.clone())
    }

    async fn read(
        &self,
        ctx: &Ctx,
        id: &str,
        _prior: Option<&PoolSpec>,
    ) -> Result<Option<Live<Self>>, ProviderError> {
        self.cloud.enter(Op::Read, Self::KIND, id, ctx).await?;
        let found = self.cloud.fetch::<PoolSpec>(&Self::schema(), id)?;
        Ok(found.map(|(spec, version)| Self::live(id, spec, version)))
    }

    async fn create(&self, ctx: &Ctx, spec: &PoolSpec) -> Result<Live<Self>, ProviderError> {
        self.cloud
            .enter(Op::Create, Self::KIND, &spec.name, ctx)
            .await?;
        if self
            .cloud
            .insert_new(Self::KIND, &spec.name, encode(spec)?, &ctx.address)?
        {
            if let Some((live, version)) = self.cloud.fetch(&Self::schema(), &spec.name)? {
                return Ok(Self::live(&spec.name, live, version));
            }
        }
        Ok(Self::live(&spec.name, spec.clone(), 1))
    }

    async fn update(
        &self,
        ctx: &Ctx,
        id: &str,
        _prior: &PoolSpec,
        spec: &PoolSpec,
    ) -> Result<Live<Self>, ProviderError> {
        self.cloud.enter(Op::Update, Self::KIND, id, ctx).await?;
        let version = self.cloud.overwrite(Self::KIND, id, encode(spec)?)?;
        Ok(Self::live(id, spec.clone(), version))
    }

    async fn delete(
        &self,
        ctx: &Ctx,
        id: &str,
        _prior: Option<&PoolSpec>,
    ) -> Result<(), ProviderError> {
        self.cloud.enter(Op::Delete, Self::KIND, id, ctx).await?;
        self.cloud.lock().objects.remove(id);
        Ok(())
    }
}

/// Every way `K::schema()` disagrees with `K::Spec` and `K::Outputs`, given `full`, a
/// spec with every field set (no `None`), and any `outputs`. Empty when they agree.
/// Kinds derive their schema from those types (`#[derive(Fields)]`), so each kind's
/// call of this is a test of the derive against what serde does with its types (a
/// `Described` impl or a `#[terrain(any)]` that does not fit serde's output shows here).
///
/// Checks that the serialized field names are exactly the schema's; that values fit
/// the schema's types; that a spec holding only the required fields deserializes, and
/// serializes back with the schema's defaults and `null` for the other optional fields;
/// that leaving out a required field, or adding an unknown one, is refused; and that
/// the schema's defaults and serde's give the same spec.
pub fn schema_mismatches<K: Kind>(full: &K::Spec, outputs: &K::Outputs) -> Vec<String> {
    let schema = K::schema();
    let mut problems = Vec::new();

    let full_value = match serde_json::to_value(full) {
        Ok(Value::Object(map)) => map,
        other => {
            return vec![format!(
                "the full spec does not serialize to a table: {other:?}"
            )]
        }
    };
    compare_names("spec", &schema.fields, &full_value, &mut problems);
    for field in &schema.fields {
        match full_value.get(field.name) {
            Some(Value::Null) => problems.push(format!(
                "spec.{}: the full example must set every field",
                field.name
            )),
            Some(v) if !field.ty.accepts(v) => problems.push(format!(
                "spec.{}: serde writes {v}, which is not a {}",
                field.name,
                field.ty.describe()
            )),
            _ => {}
        }
    }

    let minimal: serde_json::Map<String, Value> = schema
        .fields
        .iter()
        .filter(|f| f.required)
        .filter_map(|f| {
            full_value
                .get(f.name)
                .map(|v| (f.name.to_string(), v.clone()))
        })
        .collect();
    match serde_json::from_value::<K::Spec>(Value::Object(minimal.clone())) {
        Err(e) => problems.push(format!(
            "a spec of only the required fields does not deserialize: {e}"
        )),
        Ok(spec) => {
            let back = serde_json::to_value(&spec).unwrap_or(Value::Null);
            for field in schema.fields.iter().filter(|f| !f.required) {
                let expected = field.default.clone().unwrap_or(Value::Null);
                let got = back.get(field.name);
                if got != Some(&expected) {
                    problems.push(format!(
                        "spec.{}: left out, serde gives {got:?} but the schema says {expected}",
                        field.name
                    ));
                }
            }
            match serde_json::from_value::<K::Spec>(
                schema.with_defaults(&Value::Object(minimal.clone())),
            ) {
                Ok(filled) if filled == spec => {}
                Ok(filled) => problems.push(format!(
                    "schema defaults give {filled:?} but serde defaults give {spec:?}"
                )),
                Err(e) => problems.push(format!(
                    "the spec with schema defaults filled does not deserialize: {e}"
                )),
            }
        }
    }
    for field in schema.fields.iter().filter(|f| f.required) {
        let mut without = minimal.clone();
        without.remove(field.name);
        if serde_json::from_value::<K::Spec>(Value::Object(without)).is_ok() {
            problems.push(format!(
                "spec.{}: the schema requires it but serde accepts a spec without it",
                field.name
            ));
        }
    }
    for field in schema
        .fields
        .iter()
        .filter(|f| f.required && f.default.is_some())
    {
        problems.push(format!(
            "spec.{}: a required field cannot have a default",
            field.name
        ));
    }
    // From the full spec, which deserializes, so only the extra key can be refused.
    let mut unknown = full_value;
    unknown.insert("no_such_field".to_string(), json!(1));
    if serde_json::from_value::<K::Spec>(Value::Object(unknown)).is_ok() {
        problems
            .push("serde accepts unknown fields: add #[serde(deny_unknown_fields)]".to_string());
    }

    match serde_json::to_value(outputs) {
        Ok(Value::Object(map)) => {
            compare_names("outputs", &schema.outputs, &map, &mut problems);
            for field in &schema.outputs {
                if let Some(v) = map.get(field.name) {
                    if !v.is_null() && !field.ty.accepts(v) {
                        problems.push(format!(
                            "outputs.{}: serde writes {v}, which is not a {}",
                            field.name,
                            field.ty.describe()
                        ));
                    }
                }
            }
        }
        other => problems.push(format!(
            "the outputs do not serialize to a table: {other:?}"
        )),
    }
    problems
}

fn compare_names(
    what: &str,
    fields: &[Field],
    map: &serde_json::Map<String, Value>,
    problems: &mut Vec<String>,
) {
    let in_schema: BTreeSet<&str> = fields.iter().map(|f| f.name).collect();
    let in_serde: BTreeSet<&str> = map.keys().map(String::as_str).collect();
    for name in in_schema.difference(&in_serde) {
        problems.push(format!(
            "{what}.{name}: in the schema but not serialized (skipped or misnamed?)"
        ));
    }
    for name in in_serde.difference(&in_schema) {
        problems.push(format!("{what}.{name}: serialized but not in the schema"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Field, Schema, Type};
    use std::collections::BTreeMap;

    fn ctx(address: &str) -> Ctx {
        Ctx::new(address, json!({}))
    }

    fn full_spec() -> ThingSpec {
        ThingSpec {
            name: "alpha".into(),
            value: Some("v".into()),
            size: 3,
            tags: Some(BTreeMap::from([("team".to_string(), "ml".to_string())])),
            secret: Some("s3cret".into()),
            items: Some(vec!["a".into(), "b".into()]),
            zone: Some("z1".into()),
        }
    }

    fn thing(cloud: &TestCloud) -> TestThing {
        TestThing {
            cloud: cloud.clone(),
        }
    }

    fn minimal(name: &str) -> ThingSpec {
        ThingSpec {
            name: name.into(),
            value: None,
            size: 1,
            tags: None,
            secret: None,
            items: None,
            zone: None,
        }
    }

    #[test]
    fn schema_agrees_with_serde() {
        let outputs = ThingOutputs {
            arn: "test:thing/alpha".into(),
            version: 1,
            endpoint: "https://alpha.test".into(),
        };
        assert_eq!(
            schema_mismatches::<TestThing>(&full_spec(), &outputs),
            Vec::<String>::new()
        );
    }

    fn full_pool() -> PoolSpec {
        PoolSpec {
            name: "gpu".into(),
            machine: "a100".into(),
            machine_labels: Some(BTreeMap::from([("team".to_string(), "ml".to_string())])),
            autoscaling: Some(Autoscaling { min: 0, max: 4 }),
        }
    }

    #[test]
    fn pool_schema_agrees_with_serde() {
        let outputs = PoolOutputs {
            placement: "gpu/a100".into(),
            max_nodes: 4,
            cluster: "test-cluster".into(),
            generation: 1,
        };
        assert_eq!(
            schema_mismatches::<TestPool>(&full_pool(), &outputs),
            Vec::<String>::new()
        );
    }

    #[test]
    fn pool_outputs_declare_what_they_follow() {
        let schema = TestPool::schema();
        let follows = |name: &str| schema.output(name).and_then(|f| f.derived_from);
        assert_eq!(follows("placement"), Some(&["name", "machine"][..]));
        assert_eq!(follows("max_nodes"), Some(&["autoscaling.max"][..]));
        assert_eq!(follows("cluster"), Some(&[][..]));
        assert_eq!(follows("generation"), None);
        // The test thing declares nothing: any update makes its outputs unknown.
        assert!(TestThing::schema()
            .outputs
            .iter()
            .all(|f| f.derived_from.is_none()));
    }

    #[test]
    fn pool_validate_checks_name_and_bounds() {
        let config = serde_json::Value::Null;
        assert!(TestPool::validate(&full_pool(), &config).is_empty());
        let mut bad = full_pool();
        bad.name = "GPU".into();
        bad.autoscaling = Some(Autoscaling { min: 3, max: 2 });
        let paths: Vec<_> = TestPool::validate(&bad, &config)
            .into_iter()
            .map(|p| p.path.join("."))
            .collect();
        assert_eq!(paths, ["name", "autoscaling"]);
        bad.name = "gpu".into();
        bad.autoscaling = Some(Autoscaling { min: -1, max: 2 });
        assert_eq!(
            TestPool::validate(&bad, &config),
            vec![Invalid::at(
                "autoscaling",
                "needs 0 <= min <= max, got min -1 and max 2"
            )]
        );
    }

    #[tokio::test]
    async fn pool_outputs_follow_the_spec_and_generation_counts_updates(
    ) -> Result<(), ProviderError> {
        let cloud = TestCloud::new();
        let pool = TestPool {
            cloud: cloud.clone(),
        };
        let created = pool.create(&ctx("test_pool.gpu"), &full_pool()).await?;
        assert_eq!(
            created.outputs,
            PoolOutputs {
                placement: "gpu/a100".into(),
                max_nodes: 4,
                cluster: "test-cluster".into(),
                generation: 1,
            }
        );
        let mut bare = full_pool();
        bare.autoscaling = None;
        bare.machine = "h100".into();
        let updated = pool
            .update(&ctx("test_pool.gpu"), "gpu", &full_pool(), &bare)
            .await?;
        assert_eq!(updated.outputs.placement, "gpu/h100");
        assert_eq!(updated.outputs.max_nodes, 1, "no autoscaling: one node");
        assert_eq!(updated.outputs.generation, 2);
        let read = pool
            .read(&ctx("test_pool.gpu"), "gpu", None)
            .await?
            .expect("exists");
        assert_eq!(read.outputs, updated.outputs);

        // Its errors name its own API, and ids are shared with test_thing.
        let err = thing(&cloud)
            .create(&ctx("test_thing.gpu"), &minimal("gpu"))
            .await
            .expect_err("the name is taken");
        assert_eq!(
            err.to_string(),
            "test.things.create failed: 409 ALREADY_EXISTS: thing \"gpu\" already exists"
        );
        pool.delete(&ctx("test_pool.gpu"), "gpu", None).await?;
        let err = pool
            .update(&ctx("test_pool.gpu"), "gpu", &bare, &bare)
            .await
            .expect_err("gone");
        assert_eq!(
            err.to_string(),
            "test.pools.update failed: 404 NOT_FOUND: pool \"gpu\" does not exist"
        );
        let calls: Vec<(Op, String)> = cloud.calls().into_iter().map(|c| (c.op, c.kind)).collect();
        let pool = |op| (op, "test_pool".to_string());
        assert_eq!(
            calls,
            [
                pool(Op::Create),
                pool(Op::Update),
                pool(Op::Read),
                (Op::Create, "test_thing".to_string()),
                pool(Op::Delete),
                pool(Op::Update),
            ]
        );
        Ok(())
    }

    #[test]
    fn schema_mismatches_catches_disagreement() {
        // Its types say one thing and the hand-written schema below another, which is
        // what the check must catch.
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
        struct Bad {
            /// A name.
            name: String,
            /// Something extra.
            #[serde(skip_serializing_if = "Option::is_none")]
            extra: Option<String>,
            /// A size.
            size: i64,
        }
        struct BadKind;
        #[async_trait]
        impl Kind for BadKind {
            type Spec = Bad;
            type Outputs = Value;
            const KIND: &'static str = "bad";
            const PROVIDER: &'static str = "test";
            fn schema() -> Schema {
                Schema {
                    fields: vec![
                        Field::new("name", Type::Int, "").required(),
                        Field::new("size", Type::Int, "").default(json!(1)),
                        Field::new("gone", Type::String, ""),
                    ],
                    outputs: vec![Field::new("id", Type::String, "")],
                }
            }
            async fn read(
                &self,
                _: &Ctx,
                _: &str,
                _: Option<&Bad>,
            ) -> Result<Option<Live<Self>>, ProviderError> {
                Ok(None)
            }
            async fn create(&self, _: &Ctx, _: &Bad) -> Result<Live<Self>, ProviderError> {
                Err(ProviderError::Unsupported("test".into()))
            }
            async fn update(
                &self,
                _: &Ctx,
                _: &str,
                _: &Bad,
                _: &Bad,
            ) -> Result<Live<Self>, ProviderError> {
                Err(ProviderError::Unsupported("test".into()))
            }
            async fn delete(&self, _: &Ctx, _: &str, _: Option<&Bad>) -> Result<(), ProviderError> {
                Ok(())
            }
        }
        let bad = Bad {
            name: "a".into(),
            extra: Some("x".into()),
            size: 2,
        };
        let problems = schema_mismatches::<BadKind>(&bad, &json!({"id": "x", "more": 1}));
        let joined = problems.join("\n");
        for expected in [
            "spec.gone: in the schema but not serialized",
            "spec.extra: serialized but not in the schema",
            "spec.name: serde writes \"a\", which is not a integer",
            "only the required fields does not deserialize",
            "deny_unknown_fields",
            "outputs.more: serialized but not in the schema",
        ] {
            assert!(
                joined.contains(expected),
                "missing {expected:?} in:\n{joined}"
            );
        }
    }

    #[test]
    fn validate_checks_name_and_size() {
        assert!(TestThing::validate(&full_spec(), &serde_json::Value::Null).is_empty());
        assert!(TestThing::validate(&minimal("a-1"), &serde_json::Value::Null).is_empty());
        for name in ["", "Alpha", "1abc", "a_b", "a b"] {
            let problems = TestThing::validate(&minimal(name), &serde_json::Value::Null);
            assert_eq!(problems.len(), 1, "{name:?}");
            assert_eq!(problems[0].path, vec!["name".to_string()]);
            assert!(
                problems[0].message.contains("lowercase letters"),
                "{}",
                problems[0].message
            );
        }
        let mut negative = minimal("a");
        negative.size = -1;
        assert_eq!(
            TestThing::validate(&negative, &serde_json::Value::Null),
            vec![Invalid::at("size", "must be 0 or more, got -1")]
        );
        negative.size = 0;
        assert!(TestThing::validate(&negative, &serde_json::Value::Null).is_empty());
    }

    #[test]
    fn planned_id_is_the_name() {
        assert_eq!(
            TestThing::planned_id(&full_spec(), &serde_json::Value::Null).as_deref(),
            Some("alpha")
        );
    }

    #[tokio::test]
    async fn create_read_update_delete_round_trip() -> Result<(), ProviderError> {
        let cloud = TestCloud::new();
        let kind = thing(&cloud);
        let created = kind.create(&ctx("test_thing.a"), &full_spec()).await?;
        assert_eq!(created.id, "alpha");
        assert_eq!(
            created.outputs,
            ThingOutputs {
                arn: "test:thing/alpha".into(),
                version: 1,
                endpoint: "https://alpha.test".into()
            }
        );
        let read = kind
            .read(&ctx("test_thing.a"), "alpha", None)
            .await?
            .expect("just created");
        // Live<K> derives PartialEq, which demands K: PartialEq; compare the parts.
        assert_eq!(
            (&read.id, &read.spec, &read.outputs),
            (&created.id, &created.spec, &created.outputs)
        );

        let mut changed = full_spec();
        changed.value = Some("w".into());
        let updated = kind
            .update(&ctx("test_thing.a"), "alpha", &full_spec(), &changed)
            .await?;
        assert_eq!(updated.outputs.version, 2);
        assert_eq!(updated.spec, changed);
        let updated = kind
            .update(&ctx("test_thing.a"), "alpha", &changed, &changed)
            .await?;
        assert_eq!(updated.outputs.version, 3);
        assert_eq!(
            cloud.objects().get("alpha"),
            Some(&serde_json::to_value(&changed).expect("serializes"))
        );

        kind.delete(&ctx("test_thing.a"), "alpha", Some(&changed))
            .await?;
        assert!(cloud.objects().is_empty());
        assert!(kind
            .read(&ctx("test_thing.a"), "alpha", None)
            .await?
            .is_none());
        // Deleting again is idempotent.
        kind.delete(&ctx("test_thing.a"), "alpha", None).await?;

        let ops: Vec<(Op, String, String)> = cloud
            .calls()
            .into_iter()
            .map(|c| (c.op, c.id, c.address))
            .collect();
        let expected: Vec<(Op, String, String)> = [
            Op::Create,
            Op::Read,
            Op::Update,
            Op::Update,
            Op::Delete,
            Op::Read,
            Op::Delete,
        ]
        .into_iter()
        .map(|op| (op, "alpha".to_string(), "test_thing.a".to_string()))
        .collect();
        assert_eq!(ops, expected);
        assert!(cloud.calls().iter().all(|c| c.kind == "test_thing"));
        Ok(())
    }

    #[tokio::test]
    async fn create_of_existing_object_is_a_conflict_and_not_counted() -> Result<(), ProviderError>
    {
        let cloud = TestCloud::new();
        let kind = thing(&cloud);
        kind.create(&ctx("test_thing.a"), &minimal("a")).await?;
        // Another address's create of the same name is refused; the same address's
        // adopts (its earlier answer was lost), without counting a create.
        let err = kind
            .create(&ctx("test_thing.other"), &minimal("a"))
            .await
            .expect_err("already exists");
        kind.create(&ctx("test_thing.a"), &minimal("a")).await?;
        assert!(
            matches!(err, ProviderError::Api { status: 409, ref code, .. } if code == "ALREADY_EXISTS"),
            "{err}"
        );
        assert_eq!(cloud.creates_of("a"), 1);
        assert_eq!(cloud.creates_of("never"), 0);

        // A create after a delete counts again: that is how a test spots a replacement.
        kind.delete(&ctx("test_thing.a"), "a", None).await?;
        kind.create(&ctx("test_thing.a"), &minimal("a")).await?;
        assert_eq!(cloud.creates_of("a"), 2);
        Ok(())
    }

    #[tokio::test]
    async fn update_of_missing_object_is_not_found() {
        let cloud = TestCloud::new();
        let err = thing(&cloud)
            .update(&ctx("test_thing.a"), "a", &minimal("a"), &minimal("a"))
            .await
            .expect_err("nothing to update");
        assert!(
            matches!(err, ProviderError::Api { status: 404, .. }),
            "{err}"
        );
    }

    #[tokio::test]
    async fn injected_failures_fail_that_many_calls_of_that_op_on_that_object(
    ) -> Result<(), ProviderError> {
        let cloud = TestCloud::new();
        let kind = thing(&cloud);
        cloud.fail(Op::Create, "a", 2);
        for _ in 0..2 {
            let err = kind
                .create(&ctx("test_thing.a"), &minimal("a"))
                .await
                .expect_err("injected");
            assert_eq!(
                err.to_string(),
                "test.things.create failed: 500 INTERNAL: injected failure"
            );
        }
        assert!(cloud.objects().is_empty(), "a failed create makes nothing");
        assert_eq!(cloud.creates_of("a"), 0);
        // Other objects and other ops are unaffected.
        kind.create(&ctx("test_thing.b"), &minimal("b")).await?;
        kind.create(&ctx("test_thing.a"), &minimal("a")).await?;
        assert_eq!(cloud.creates_of("a"), 1);

        cloud.fail(Op::Delete, "a", 1);
        assert!(kind.delete(&ctx("test_thing.a"), "a", None).await.is_err());
        assert!(
            cloud.objects().contains_key("a"),
            "a failed delete deletes nothing"
        );
        kind.delete(&ctx("test_thing.a"), "a", None).await?;
        assert!(!cloud.objects().contains_key("a"));

        cloud.fail(Op::Read, "b", 1);
        assert!(kind.read(&ctx("test_thing.b"), "b", None).await.is_err());
        assert!(kind.read(&ctx("test_thing.b"), "b", None).await?.is_some());

        cloud.fail(Op::Update, "b", 1);
        assert!(kind
            .update(&ctx("test_thing.b"), "b", &minimal("b"), &minimal("b"))
            .await
            .is_err());
        let updated = kind
            .update(&ctx("test_thing.b"), "b", &minimal("b"), &minimal("b"))
            .await?;
        assert_eq!(
            updated.outputs.version, 2,
            "the failed update did not bump the version"
        );
        // Failed calls are recorded too.
        assert_eq!(cloud.calls().len(), 10);
        Ok(())
    }

    #[tokio::test]
    async fn drift_and_outside_deletion_show_up_on_read() -> Result<(), ProviderError> {
        let cloud = TestCloud::new();
        let kind = thing(&cloud);
        kind.create(&ctx("test_thing.a"), &full_spec()).await?;
        cloud.set_live("alpha", json!({"name": "alpha", "value": "drifted"}));
        let read = kind
            .read(&ctx("test_thing.a"), "alpha", None)
            .await?
            .expect("exists");
        assert_eq!(read.spec.value.as_deref(), Some("drifted"));
        assert_eq!(
            read.spec.size, 1,
            "left-out fields read back as their defaults"
        );
        assert_eq!(read.spec.tags, None);
        assert_eq!(cloud.creates_of("alpha"), 1, "drift is not a create");

        cloud.remove_live("alpha");
        assert!(kind
            .read(&ctx("test_thing.a"), "alpha", None)
            .await?
            .is_none());

        // set_live on an absent object makes it exist, as if created by hand.
        cloud.set_live("manual", json!({"name": "manual"}));
        let read = kind
            .read(&ctx("test_thing.m"), "manual", None)
            .await?
            .expect("exists");
        assert_eq!(read.spec, minimal("manual"));
        assert_eq!(cloud.creates_of("manual"), 0);
        Ok(())
    }

    #[tokio::test]
    async fn recording_can_be_turned_off_and_cleared() -> Result<(), ProviderError> {
        let cloud = TestCloud::new();
        let kind = thing(&cloud);
        kind.create(&ctx("test_thing.a"), &minimal("a")).await?;
        assert_eq!(cloud.calls().len(), 1);
        cloud.clear_calls();
        assert!(cloud.calls().is_empty());
        cloud.set_recording(false);
        kind.read(&ctx("test_thing.a"), "a", None).await?;
        assert!(cloud.calls().is_empty());
        cloud.set_recording(true);
        kind.read(&ctx("test_thing.a"), "a", None).await?;
        assert_eq!(cloud.calls().len(), 1);
        Ok(())
    }

    #[tokio::test(start_paused = true)]
    async fn latency_and_per_object_delay_are_slept() -> Result<(), ProviderError> {
        let cloud = TestCloud::new();
        let kind = thing(&cloud);
        cloud.set_latency(Duration::from_millis(100));
        cloud.delay("slow", Duration::from_secs(5));
        let start = tokio::time::Instant::now();
        kind.create(&ctx("test_thing.a"), &minimal("fast")).await?;
        assert_eq!(start.elapsed(), Duration::from_millis(100));
        let start = tokio::time::Instant::now();
        kind.create(&ctx("test_thing.b"), &minimal("slow")).await?;
        assert_eq!(start.elapsed(), Duration::from_millis(5100));
        Ok(())
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_calls_overlap_instead_of_queueing_on_the_lock() -> Result<(), ProviderError>
    {
        let cloud = TestCloud::new();
        cloud.set_latency(Duration::from_secs(1));
        let kind = thing(&cloud);
        let (ctx_a, ctx_b, spec_a, spec_b) = (
            ctx("test_thing.a"),
            ctx("test_thing.b"),
            minimal("a"),
            minimal("b"),
        );
        let start = tokio::time::Instant::now();
        let (a, b) = tokio::join!(kind.create(&ctx_a, &spec_a), kind.create(&ctx_b, &spec_b));
        a?;
        b?;
        assert_eq!(start.elapsed(), Duration::from_secs(1));
        Ok(())
    }

    #[tokio::test]
    async fn registry_drives_the_test_kind_through_the_adapter() -> Result<(), ProviderError> {
        let cloud = TestCloud::new();
        let registry = cloud.registry();
        assert!(
            registry.get("local_file").is_some(),
            "builtin kinds are included"
        );
        let resource = registry.get("test_thing").expect("test kind is registered");
        assert_eq!(resource.provider(), "test");
        assert!(registry.get("test_pool").is_some(), "so is the pool");
        let observed = resource
            .create(&ctx("test_thing.a"), &json!({"name": "a"}))
            .await?;
        assert_eq!(observed.id, "a");
        assert_eq!(observed.spec["size"], json!(1));
        assert_eq!(observed.spec["value"], Value::Null);
        assert_eq!(cloud.creates_of("a"), 1);
        assert_eq!(
            resource
                .planned_id(&json!({"name": "a"}), &serde_json::Value::Null)
                .as_deref(),
            Some("a")
        );
        let problems =
            resource.validate(&json!({"name": "A", "size": -2}), &serde_json::Value::Null);
        let paths: Vec<_> = problems.iter().map(|p| p.path.join(".")).collect();
        assert_eq!(paths, ["name", "size"]);
        Ok(())
    }

    #[test]
    fn unknown_values_do_not_hide_other_mistakes() {
        let registry = TestCloud::new().registry();
        let resource = registry.get("test_thing").expect("test kind is registered");
        let unknown = crate::protocol::UNKNOWN;
        // The unknown name is not judged; the bad size still is.
        let problems = resource.validate(&json!({"name": unknown, "size": -2}), &Value::Null);
        let paths: Vec<_> = problems.iter().map(|p| p.path.join(".")).collect();
        assert_eq!(paths, ["size"]);
        // An unknown number cannot be typed: the checks wait for apply.
        assert!(resource
            .validate(&json!({"name": "A", "size": unknown}), &Value::Null)
            .is_empty());
    }
}
