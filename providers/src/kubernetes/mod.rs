//! Provider `kubernetes`: objects inside a cluster, applied with server-side apply.
//!
//! Layout: `connect` turns a `cluster` reference into a client, `apply` holds the
//! generic object operations (server-side apply, dry run, get, delete and wait, live
//! diff) over any kind the cluster serves, `adopt` finds and describes objects built by
//! hand for `terrain import --write`, `placement` maps scheduling intent (spot,
//! GPUs, TPUs, node pools) to node selectors and tolerations, `yaml_diff` renders
//! unified YAML diffs; one file per resource kind.
//!
//! Every object terrain creates carries the label `app.kubernetes.io/managed-by:
//! terrain` and the annotation `terrain.dev/address: <kind.name>`. A create that finds
//! a same-named object without them refuses to take it over and names `terrain import`;
//! one carrying them for this address is adopted (an earlier, interrupted create made
//! it). `read` treats an object marked for another address as not this resource's
//! (`Ok(None)`), but reads unmarked objects, so that imported objects stay readable.
//!
//! Kinds that generate their objects (volumes, Redis, Jobs) apply with `force`: every
//! field terrain sets is the stack's, so a field taken over by hand is taken back.
//! `kubernetes_manifest` applies the user's objects and leaves that choice to its
//! `force_conflicts`.
//!
//! Resource ids list the objects a resource is made of, comma-separated, each as
//! `<apiVersion>/<kind>/<namespace>/<name>` with an empty namespace for cluster-scoped
//! objects: `batch/v1/Job/default/train`, `v1/PersistentVolume//fileserver`.

pub mod adopt;
pub mod apply;
pub mod catalog;
pub mod connect;
pub mod dataset;
pub mod job;
pub mod kfp_api;
pub mod kfp_checks;
pub mod kfp_pipeline;
pub mod kfp_run;
pub mod kfp_spec;
pub mod manifest;
pub mod nfs_volume;
pub mod placement;
pub mod queue_items;
pub mod redis;
pub mod resp;
pub mod secret;
pub mod yaml_diff;

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::protocol::is_unknown;
use crate::schema::Fields;
use crate::{Ctx, Invalid, ProviderError};

/// The label every object terrain creates carries, with its value.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "terrain");
/// The annotation holding the creating resource's address.
pub const ADDRESS_ANNOTATION: &str = "terrain.dev/address";

/// The doc of the `cluster` field every kind of this provider has (a `Value`, required,
/// forcing replacement).
pub const CLUSTER_DOC: &str = "The cluster to apply to: a cluster's `kubernetes` output (\"${gke_cluster.main.kubernetes}\") or { kubeconfig = \"~/.kube/config\", context = \"…\" }.";

/// Checks the `cluster` reference offline (skipped while it is not known yet).
pub fn check_cluster(cluster: &Value, out: &mut Vec<Invalid>) {
    if is_unknown(cluster) {
        return;
    }
    if let Err((path, message)) = connect::check(cluster) {
        out.push(Invalid::at(&path, message));
    }
}

/// Adds terrain's label and address annotation to an object's metadata.
pub fn mark_ours(object: &mut Value, address: &str) {
    set_path(
        object,
        &["metadata", "labels", MANAGED_BY.0],
        json!(MANAGED_BY.1),
    );
    set_path(
        object,
        &["metadata", "annotations", ADDRESS_ANNOTATION],
        json!(address),
    );
}

/// Sets the value at `path`, turning whatever is in the way into objects.
pub fn set_path(target: &mut Value, path: &[&str], value: Value) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut at = target;
    for key in parents {
        if !at.is_object() {
            *at = json!({});
        }
        at = &mut at[*key];
    }
    if !at.is_object() {
        *at = json!({});
    }
    at[*last] = value;
}

/// Adds only terrain's label: rendered objects carry it, while the address annotation
/// is added at apply time (rendering does not know the address).
pub fn with_managed_label(labels: &BTreeMap<String, String>) -> Map<String, Value> {
    let mut out: Map<String, Value> = labels.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
    out.insert(MANAGED_BY.0.to_string(), json!(MANAGED_BY.1));
    out
}

/// Who a live object belongs to, as far as its marks say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ownership {
    /// Marked for this address.
    Ours,
    /// Marked by terrain for another address.
    Other(String),
    /// Not marked by terrain.
    Unmarked,
}

/// Reads an object's marks against `address`.
pub fn ownership(object: &Value, address: &str) -> Ownership {
    let metadata = &object["metadata"];
    let managed = metadata["labels"][MANAGED_BY.0].as_str() == Some(MANAGED_BY.1);
    match metadata["annotations"][ADDRESS_ANNOTATION].as_str() {
        Some(a) if managed && a == address => Ownership::Ours,
        Some(a) if managed => Ownership::Other(a.to_string()),
        _ => Ownership::Unmarked,
    }
}

/// The error for a create that found a same-named object terrain did not make for
/// `address`.
pub fn not_ours(
    object: &ObjectRef,
    owner: &Ownership,
    kind: &str,
    address: &str,
    id: &str,
) -> ProviderError {
    let name = address.split_once('.').map_or(address, |(_, n)| n);
    let whose = match owner {
        Ownership::Other(other) => format!("belongs to {other}"),
        _ => format!("was not created by {address}"),
    };
    ProviderError::api(
        format!("kubernetes apply {}", object.describe()),
        409,
        "AlreadyExists",
        format!("{object} already exists and {whose}; bring it under terrain with `terrain import {kind}.{name} {id}`, or pick another name"),
    )
}

/// `objects` with terrain's marks for `address`, as they are applied.
pub fn marked(mut objects: Vec<Value>, address: &str) -> Vec<Value> {
    for object in &mut objects {
        mark_ours(object, address);
    }
    objects
}

/// The references of `objects`.
pub fn refs_of(objects: &[Value]) -> Result<Vec<ObjectRef>, ProviderError> {
    objects
        .iter()
        .map(|o| {
            ObjectRef::of(o).map_err(|m| ProviderError::Unsupported(format!("kubernetes: {m}")))
        })
        .collect()
}

/// Before a create: fails when any of `objects` already exists without this address's
/// marks (a stranger's object, which server-side apply would silently take over).
pub async fn refuse_strangers(
    client: &crate::kubernetes::connect::Conn,
    objects: &[Value],
    kind: &str,
    address: &str,
) -> Result<(), ProviderError> {
    let refs = refs_of(objects)?;
    let id = id_of(&refs);
    for target in &refs {
        if let Some(live) = apply::get_ref(client, target).await? {
            let owner = ownership(&live, address);
            if owner != Ownership::Ours {
                return Err(not_ours(target, &owner, kind, address, &id));
            }
        }
    }
    Ok(())
}

/// CPU and memory a container asks for.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Resources {
    /// CPU to reserve, a quantity such as 500m or 2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<String>,
    /// Memory to reserve and cap, a quantity such as 512Mi.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
}

impl Resources {
    /// Checks the quantities; problems are reported at `at.cpu` / `at.memory`.
    pub fn check(&self, at: &str, out: &mut Vec<Invalid>) {
        for (name, value) in [("cpu", &self.cpu), ("memory", &self.memory)] {
            if let Some(Err(m)) = value.as_deref().map(check_quantity) {
                out.push(Invalid::at(&format!("{at}.{name}"), m));
            }
        }
    }

    /// A container's `resources`: requests for both, a limit for memory (a CPU limit
    /// would throttle), plus `extra_limits` (accelerators).
    pub fn container(
        resources: Option<&Resources>,
        extra_limits: &BTreeMap<String, String>,
    ) -> Option<Value> {
        let mut requests = Map::new();
        let mut limits: Map<String, Value> = extra_limits
            .iter()
            .map(|(k, v)| (k.clone(), json!(v)))
            .collect();
        if let Some(r) = resources {
            if let Some(cpu) = &r.cpu {
                requests.insert("cpu".into(), json!(cpu));
            }
            if let Some(memory) = &r.memory {
                requests.insert("memory".into(), json!(memory));
                limits.insert("memory".into(), json!(memory));
            }
        }
        let mut out = Map::new();
        if !requests.is_empty() {
            out.insert("requests".into(), Value::Object(requests));
        }
        if !limits.is_empty() {
            out.insert("limits".into(), Value::Object(limits));
        }
        (!out.is_empty()).then_some(Value::Object(out))
    }

    /// The resources a live container shows, in the stack's spelling. A stack that set
    /// none reads back none: some clusters (GKE Autopilot) fill in their own.
    pub fn from_live(live: &Value, prior: Option<&Resources>) -> Option<Resources> {
        let prior = prior?;
        let read = |name: &str, was: &Option<String>| {
            live["requests"][name]
                .as_str()
                .map(|q| same_spelling(was.as_deref(), q))
        };
        let out = Resources {
            cpu: read("cpu", &prior.cpu),
            memory: read("memory", &prior.memory),
        };
        (out != Resources::default()).then_some(out)
    }
}

/// One object, as named in resource ids.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectRef {
    pub api_version: String,
    pub kind: String,
    /// `None` for cluster-scoped objects.
    pub namespace: Option<String>,
    pub name: String,
}

impl ObjectRef {
    /// A reference to a namespaced object (`namespace` `None`: cluster-scoped).
    pub fn new(api_version: &str, kind: &str, namespace: Option<&str>, name: &str) -> Self {
        Self {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
            namespace: namespace.map(str::to_string),
            name: name.to_string(),
        }
    }

    /// The reference of a manifest.
    pub fn of(object: &Value) -> Result<Self, String> {
        let field = |name: &str| object[name].as_str().filter(|s| !s.is_empty());
        let api_version = field("apiVersion").ok_or("the object has no apiVersion")?;
        let kind = field("kind").ok_or("the object has no kind")?;
        let name = object["metadata"]["name"]
            .as_str()
            .filter(|s| !s.is_empty())
            .ok_or_else(|| format!("the {kind} has no metadata.name"))?;
        let namespace = object["metadata"]["namespace"]
            .as_str()
            .filter(|s| !s.is_empty());
        Ok(Self::new(api_version, kind, namespace, name))
    }

    /// Parses `<apiVersion>/<kind>/<namespace>/<name>` (the apiVersion may hold a slash).
    pub fn parse(text: &str) -> Option<Self> {
        let mut parts = text.rsplitn(4, '/');
        let name = parts.next()?;
        let namespace = parts.next()?;
        let kind = parts.next()?;
        let api_version = parts.next()?;
        let valid_version = match api_version.split_once('/') {
            Some((group, version)) => {
                !group.is_empty() && !version.is_empty() && !version.contains('/')
            }
            None => !api_version.is_empty(),
        };
        (valid_version && !kind.is_empty() && !name.is_empty()).then(|| {
            Self::new(
                api_version,
                kind,
                (!namespace.is_empty()).then_some(namespace),
                name,
            )
        })
    }

    /// `Job default/train`, for messages.
    pub fn describe(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{} {ns}/{}", self.kind, self.name),
            None => format!("{} {}", self.kind, self.name),
        }
    }
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{}/{}/{}",
            self.api_version,
            self.kind,
            self.namespace.as_deref().unwrap_or_default(),
            self.name
        )
    }
}

/// The id of a resource made of `objects`.
pub fn id_of(objects: &[ObjectRef]) -> String {
    objects
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// Parses a resource id into its objects; `shape` documents the kind's id for the error.
pub fn parse_id(kind: &str, id: &str, shape: &str) -> Result<Vec<ObjectRef>, ProviderError> {
    let bad = || {
        ProviderError::Unsupported(format!(
            "{kind}: {id:?} is not an id of this kind; expected {shape}"
        ))
    };
    if id.is_empty() {
        return Err(bad());
    }
    id.split(',')
        .map(|part| ObjectRef::parse(part.trim()).ok_or_else(bad))
        .collect()
}

/// The two live objects a resource is made of (a volume and its claim, a workload and
/// its Service), or `None` when either is gone or belongs to another resource. `what`
/// names the pair for the error on an id that does not hold two objects.
pub async fn live_pair(
    client: &crate::kubernetes::connect::Conn,
    refs: &[ObjectRef],
    address: &str,
    kind: &str,
    what: &str,
) -> Result<Option<(Value, Value)>, ProviderError> {
    let [first_ref, second_ref] = refs else {
        return Err(ProviderError::Unsupported(format!(
            "{kind}: expected {what} in the id, got {}",
            id_of(refs)
        )));
    };
    let (Some(first), Some(second)) = (
        apply::get_ref(client, first_ref).await?,
        apply::get_ref(client, second_ref).await?,
    ) else {
        return Ok(None);
    };
    let foreign = |o: &Value| matches!(ownership(o, address), Ownership::Other(_));
    if foreign(&first) || foreign(&second) {
        return Ok(None);
    }
    Ok(Some((first, second)))
}

/// Deletes, one after the other and each until gone, the objects of `refs` that are
/// not another resource's (`reverse`: last first, e.g. a claim before its volume).
/// Objects already gone are skipped, so a repeated delete succeeds.
pub async fn delete_owned(
    cluster: &Value,
    refs: &[ObjectRef],
    reverse: bool,
    ctx: &crate::Ctx,
    timeout: std::time::Duration,
) -> Result<(), ProviderError> {
    let client = connect::client(ctx, cluster).await?;
    let ordered: Vec<&ObjectRef> = if reverse {
        refs.iter().rev().collect()
    } else {
        refs.iter().collect()
    };
    for target in ordered {
        if let Some(live) = apply::get_ref(&client, target).await? {
            if matches!(ownership(&live, &ctx.address), Ownership::Other(_)) {
                continue;
            }
            apply::delete_ref(&client, target, ctx, timeout).await?;
        }
    }
    Ok(())
}

/// The live diff of replacing a resource's objects `prior` by `objects`, both marked
/// as the resource's own (see [`apply::preview`]).
pub async fn preview_marked(
    cluster: &Value,
    prior: Vec<Value>,
    objects: Vec<Value>,
    ctx: &crate::Ctx,
) -> Result<Option<String>, ProviderError> {
    let client = connect::client(ctx, cluster).await?;
    apply::preview(
        &client,
        &marked(prior, &ctx.address),
        &marked(objects, &ctx.address),
        false,
    )
    .await
}

/// The error for reading without the cluster reference (an import whose `cluster` is
/// only known after apply).
pub fn needs_cluster(kind: &str) -> ProviderError {
    ProviderError::Unsupported(format!(
        "{kind}: reading an object needs the resource's `cluster`; import works when `cluster` is known without applying (e.g. {{ kubeconfig = \"~/.kube/config\" }})"
    ))
}

/// The batch key (see [`crate::Kind::batch_key`]) of reading `target` with a list of its
/// kind: the cluster connection ([`connect::connection_key`]), the apiVersion and kind,
/// and the namespace (empty for a cluster-scoped kind), so objects on different
/// clusters, of different kinds or in different namespaces never share a list. `None`
/// when the cluster reference is malformed or not known yet.
pub fn list_key(cluster: &Value, target: &ObjectRef) -> Option<String> {
    let connection = connect::connection_key(cluster)?;
    Some(format!(
        "{}/{} in {:?} on {connection}",
        target.api_version,
        target.kind,
        target.namespace.as_deref().unwrap_or_default()
    ))
}

/// One list call answering a batch read of terrain's `kind`: for each of `items`
/// (`(id, prior)`, all sharing one batch key), the listed object `plan` names for it, or
/// `None` when the list does not show it or it may not be reported as the item's (see
/// [`batch_reportable`]).
///
/// `plan` gives an item's cluster reference and the object its read would get; items
/// without a prior, whose plan is `None`, or whose [`list_key`] differs from the first
/// planned item's are answered `None` (the engine reads those alone). The list is of the
/// first planned item's object kind, in its namespace (`None`: the kind must be
/// cluster-scoped), of the objects with terrain's label, every page followed.
///
/// Fails when the cluster cannot be reached or the list call fails.
pub async fn list_batch<S>(
    ctx: &Ctx,
    items: &[(String, Option<S>)],
    plan: impl Fn(&str, &S) -> Option<(Value, ObjectRef)>,
    kind: &str,
) -> Result<Vec<Option<Value>>, ProviderError> {
    let planned: Vec<Option<(String, Value, ObjectRef)>> = items
        .iter()
        .map(|(id, prior)| {
            let (cluster, target) = plan(id, prior.as_ref()?)?;
            Some((list_key(&cluster, &target)?, cluster, target))
        })
        .collect();
    let Some((key, cluster, first)) = planned.iter().flatten().next() else {
        return Ok(vec![None; items.len()]);
    };
    let client = connect::client(ctx, cluster).await?;
    let listed = apply::list(
        &client,
        &first.api_version,
        &first.kind,
        first.namespace.as_deref(),
        &format!("{}={}", MANAGED_BY.0, MANAGED_BY.1),
    )
    .await?;
    let by_name: BTreeMap<&str, &Value> = listed
        .iter()
        .filter_map(|o| Some((o["metadata"]["name"].as_str()?, o)))
        .collect();
    let repeated = repeated_ids(items);
    Ok(planned
        .iter()
        .zip(items)
        .map(|(p, (id, _))| match p {
            Some((k, _, target)) if k == key => by_name
                .get(target.name.as_str())
                .filter(|o| batch_reportable(o, kind, repeated.contains(id.as_str())))
                .map(|o| (*o).clone()),
            _ => None,
        })
        .collect())
}

/// Whether a batch read may report a listed `object` for an item of `kind`, as far as
/// its marks go.
///
/// `read` drops an object marked for another address than its own (`ctx.address`); a
/// batch read cannot make that check exactly, because the list call has no address per
/// item (the engine names its context after the list). So: an unmarked object is
/// reported, as `read` reports it; an object marked for an address of another kind is
/// another resource's whatever the item's address, and is dropped; an object marked
/// for an address of this kind is taken as the item's own (an id is recorded under one
/// address), unless `repeated` (its id is asked for more than once in the batch). A
/// dropped object is answered `None`, which makes the engine read it alone, with the
/// exact check.
fn batch_reportable(object: &Value, kind: &str, repeated: bool) -> bool {
    let metadata = &object["metadata"];
    let managed = metadata["labels"][MANAGED_BY.0].as_str() == Some(MANAGED_BY.1);
    match metadata["annotations"][ADDRESS_ANNOTATION].as_str() {
        Some(address) if managed => {
            !repeated && address.split_once('.').map(|(k, _)| k) == Some(kind)
        }
        _ => true,
    }
}

/// The ids asked for more than once among `items`.
fn repeated_ids<S>(items: &[(String, S)]) -> std::collections::BTreeSet<&str> {
    let mut seen = std::collections::BTreeSet::new();
    items
        .iter()
        .filter(|(id, _)| !seen.insert(id.as_str()))
        .map(|(id, _)| id.as_str())
        .collect()
}

/// Checks a DNS-1123 label (`[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63 characters):
/// namespaces, Service names, container names.
pub fn check_dns_label(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("must not be empty".into());
    }
    if name.len() > 63 {
        return Err(format!("{name:?} is longer than 63 characters"));
    }
    let ok_chars = name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    let ok_ends = !name.starts_with('-') && !name.ends_with('-');
    if ok_chars && ok_ends {
        Ok(())
    } else {
        Err(format!(
            "{name:?} is not a valid DNS-1123 label: use lowercase letters, digits and '-', starting and ending with a letter or digit"
        ))
    }
}

/// Checks a DNS-1123 subdomain (dot-separated labels, at most 253 characters): the
/// names of most objects (Pods, Jobs, PersistentVolumes, claims).
pub fn check_dns_subdomain(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("must not be empty".into());
    }
    if name.len() > 253 {
        return Err(format!("{name:?} is longer than 253 characters"));
    }
    if name.split('.').all(|part| check_dns_label(part).is_ok()) {
        Ok(())
    } else {
        Err(format!(
            "{name:?} is not a valid DNS-1123 subdomain: use lowercase letters, digits, '-' and '.', starting and ending with a letter or digit"
        ))
    }
}

/// Checks a resource quantity (`1Ti`, `500m`, `2`, `1.5Gi`, `1e3`).
pub fn check_quantity(q: &str) -> Result<(), String> {
    const SUFFIXES: &[&str] = &[
        "", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "n", "u", "m", "k", "M", "G", "T", "P", "E",
    ];
    let bad =
        || format!("{q:?} is not a quantity; write e.g. \"1Ti\", \"512Mi\", \"500m\" or \"2\"");
    let unsigned = q.strip_prefix(['+', '-']).unwrap_or(q);
    let digits_end = unsigned
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(unsigned.len());
    let (number, suffix) = unsigned.split_at(digits_end);
    let number_ok = !number.is_empty() && number != "." && number.matches('.').count() <= 1;
    if !number_ok {
        return Err(bad());
    }
    let suffix_ok = SUFFIXES.contains(&suffix)
        || suffix
            .strip_prefix(['e', 'E'])
            .map(|exp| exp.strip_prefix(['+', '-']).unwrap_or(exp))
            .is_some_and(|exp| !exp.is_empty() && exp.chars().all(|c| c.is_ascii_digit()));
    if suffix_ok {
        Ok(())
    } else {
        Err(bad())
    }
}

/// The value of a quantity (`1Ti` → 1099511627776), for comparing two spellings.
pub fn quantity_value(q: &str) -> Option<f64> {
    check_quantity(q).ok()?;
    let digits_end = q
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(q.len());
    let (number, suffix) = q.split_at(digits_end);
    let number: f64 = number.parse().ok()?;
    let binary = |power: i32| 1024f64.powi(power);
    let multiplier = match suffix {
        "" => 1.0,
        "Ki" => binary(1),
        "Mi" => binary(2),
        "Gi" => binary(3),
        "Ti" => binary(4),
        "Pi" => binary(5),
        "Ei" => binary(6),
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        exponent => 10f64.powi(exponent[1..].parse().ok()?),
    };
    Some(number * multiplier)
}

/// The quantity to report for a live value: the stack's own spelling when it means the
/// same (the API server rewrites `1024Gi` as `1Ti`), so a re-plan shows no change.
pub fn same_spelling(prior: Option<&str>, live: &str) -> String {
    match (prior, prior.and_then(quantity_value), quantity_value(live)) {
        (Some(p), Some(a), Some(b))
            if (a - b).abs() <= f64::EPSILON * a.abs().max(b.abs()) * 4.0 =>
        {
            p.to_string()
        }
        _ => live.to_string(),
    }
}

/// Checks label keys and values (`prefix/name`, name at most 63 characters of
/// alphanumerics, `-`, `_`, `.`; values likewise or empty).
pub fn check_labels(labels: &BTreeMap<String, String>) -> Result<(), String> {
    for (key, value) in labels {
        check_qualified_name(key).map_err(|m| format!("key {key:?}: {m}"))?;
        if !value.is_empty() && !is_label_word(value) {
            return Err(format!(
                "value {value:?} of {key:?}: at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
            ));
        }
    }
    Ok(())
}

/// Checks an annotation or label key: an optional DNS subdomain prefix and `/`, then a
/// name of at most 63 characters.
pub fn check_qualified_name(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        check_dns_subdomain(p).map_err(|m| format!("prefix: {m}"))?;
    }
    if is_label_word(name) {
        Ok(())
    } else {
        Err("the name part must be at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit".into())
    }
}

fn is_label_word(word: &str) -> bool {
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    !word.is_empty()
        && word.len() <= 63
        && edge(word.chars().next())
        && edge(word.chars().last())
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// A string map as a JSON object.
pub fn string_map(map: &BTreeMap<String, String>) -> Value {
    Value::Object(map.iter().map(|(k, v)| (k.clone(), json!(v))).collect())
}

/// A JSON object of strings as a map, leaving out terrain's own marks.
pub fn user_strings(value: &Value) -> BTreeMap<String, String> {
    value
        .as_object()
        .map(|m| {
            m.iter()
                .filter(|(k, _)| k.as_str() != MANAGED_BY.0 && k.as_str() != ADDRESS_ANNOTATION)
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default()
}

/// A live object's labels or annotations as a stack wrote them: without terrain's marks
/// and without the keys the system adds (`*.kubernetes.io/…`, `*.k8s.io/…`), unless the
/// stack set them itself (`prior`).
pub fn user_entries(live: &Value, prior: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut out = user_strings(live);
    out.retain(|k, _| prior.contains_key(k) || !system_key(k));
    out
}

fn system_key(key: &str) -> bool {
    key.split_once('/').is_some_and(|(prefix, _)| {
        ["kubernetes.io", "k8s.io"]
            .iter()
            .any(|d| prefix == *d || prefix.ends_with(&format!(".{d}")))
    })
}

/// Whether the live cluster `cluster` (a `cluster` value, as kinds take it) serves
/// `kind` in `api_version`, by its discovery: what the plan asks of an existing cluster
/// when nothing in the stack provides a custom kind a resource needs.
pub async fn serves(
    ctx: &Ctx,
    cluster: &Value,
    api_version: &str,
    kind: &str,
) -> Result<bool, ProviderError> {
    let client = connect::client(ctx, cluster).await?;
    if api_version == kfp_api::API_VERSION {
        // KFP's REST API is no Kubernetes API: it is served once its API server's
        // Service exists (in KFP's default namespace; kinds that name another are
        // checked when they call it).
        let service = ObjectRef::new("v1", "Service", Some("kubeflow"), kfp_api::SERVICE);
        return Ok(apply::get_ref(&client, &service).await?.is_some());
    }
    Ok(apply::is_namespaced(&client, api_version, kind)
        .await?
        .is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_refs_round_trip_through_ids() {
        let refs = vec![
            ObjectRef::new("batch/v1", "Job", Some("default"), "train"),
            ObjectRef::new("v1", "PersistentVolume", None, "fileserver"),
            ObjectRef::new("example.com/v1alpha1", "Widget", Some("ml"), "w.1"),
        ];
        let id = id_of(&refs);
        assert_eq!(id, "batch/v1/Job/default/train,v1/PersistentVolume//fileserver,example.com/v1alpha1/Widget/ml/w.1");
        assert_eq!(parse_id("k", &id, "shape").expect("parses"), refs);
    }

    #[test]
    fn bad_ids_are_refused_with_the_shape() {
        for bad in [
            "",
            "train",
            "Job/default/train",
            "/Job/default/train",
            "batch/v1/Job/default/",
            "a/b/c/Job/ns/n",
            "v1/Pod/ns/a,",
        ] {
            let e = parse_id("kubernetes_job", bad, "batch/v1/Job/NAMESPACE/NAME").expect_err(bad);
            assert!(
                e.to_string()
                    .contains("expected batch/v1/Job/NAMESPACE/NAME"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn marks_decide_ownership() {
        let mut object = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"app": "x"}}});
        assert_eq!(
            ownership(&object, "kubernetes_redis.a"),
            Ownership::Unmarked
        );
        mark_ours(&mut object, "kubernetes_redis.a");
        assert_eq!(
            object["metadata"]["labels"],
            json!({"app": "x", "app.kubernetes.io/managed-by": "terrain"})
        );
        assert_eq!(
            object["metadata"]["annotations"],
            json!({"terrain.dev/address": "kubernetes_redis.a"})
        );
        assert_eq!(ownership(&object, "kubernetes_redis.a"), Ownership::Ours);
        assert_eq!(
            ownership(&object, "kubernetes_redis.b"),
            Ownership::Other("kubernetes_redis.a".into())
        );
        let e = not_ours(
            &ObjectRef::of(&object).expect("named"),
            &Ownership::Unmarked,
            "kubernetes_redis",
            "kubernetes_redis.b",
            "v1/Pod//p",
        );
        let text = e.to_string();
        assert!(
            text.contains("terrain import kubernetes_redis.b v1/Pod//p"),
            "{text}"
        );
        assert!(
            text.contains("was not created by kubernetes_redis.b"),
            "{text}"
        );
    }

    #[test]
    fn name_checks() {
        for ok in ["a", "redis-leader", "a1", "0abc"] {
            assert_eq!(check_dns_label(ok), Ok(()), "{ok}");
            assert_eq!(check_dns_subdomain(ok), Ok(()), "{ok}");
        }
        assert_eq!(check_dns_subdomain("a.b-c"), Ok(()));
        for bad in ["", "A", "a_b", "-a", "a-", "a.b"] {
            assert!(check_dns_label(bad).is_err(), "{bad}");
        }
        for bad in ["", "a..b", "Ab", ".a"] {
            assert!(check_dns_subdomain(bad).is_err(), "{bad}");
        }
        assert!(check_dns_label(&"a".repeat(64)).is_err());
    }

    #[test]
    fn quantity_table() {
        for ok in [
            "1Ti", "512Mi", "500m", "2", "1.5Gi", "1e3", "0.5", "+1", "100k", "1E-2",
        ] {
            assert_eq!(check_quantity(ok), Ok(()), "{ok}");
        }
        for bad in ["", "Ti", "1TB", "1.2.3", "one", "1 Gi", "1e", "."] {
            let e = check_quantity(bad).expect_err(bad);
            assert!(e.contains("is not a quantity"), "{e}");
        }
    }

    #[test]
    fn quantities_compare_by_value() {
        let cases = [
            ("1Ti", Some(1024f64.powi(4))),
            ("1024Gi", Some(1024f64.powi(4))),
            ("500m", Some(0.5)),
            ("2", Some(2.0)),
            ("1e3", Some(1000.0)),
            ("1.5k", Some(1500.0)),
            ("x", None),
        ];
        for (q, want) in cases {
            assert_eq!(quantity_value(q), want, "{q}");
        }
        assert_eq!(same_spelling(Some("1024Gi"), "1Ti"), "1024Gi");
        assert_eq!(same_spelling(Some("2Ti"), "1Ti"), "1Ti");
        assert_eq!(same_spelling(None, "1Ti"), "1Ti");
    }

    #[test]
    fn system_keys_are_not_the_stacks() {
        let live = json!({"team": "ml", "batch.kubernetes.io/job-name": "w", "k8s.io/x": "1", "example.com/y": "2", "app.kubernetes.io/managed-by": "terrain"});
        let none = BTreeMap::new();
        assert_eq!(
            user_entries(&live, &none),
            BTreeMap::from([
                ("team".to_string(), "ml".to_string()),
                ("example.com/y".to_string(), "2".to_string())
            ])
        );
        let asked = BTreeMap::from([("k8s.io/x".to_string(), "1".to_string())]);
        assert!(
            user_entries(&live, &asked).contains_key("k8s.io/x"),
            "a key the stack set stays"
        );
    }

    #[test]
    fn label_checks() {
        let ok = BTreeMap::from([
            ("app.kubernetes.io/name".to_string(), "redis".to_string()),
            ("team".to_string(), String::new()),
        ]);
        assert_eq!(check_labels(&ok), Ok(()));
        let bad_key = BTreeMap::from([("-x".to_string(), "v".to_string())]);
        assert!(check_labels(&bad_key)
            .expect_err("bad key")
            .contains("key \"-x\""));
        let bad_value = BTreeMap::from([("k".to_string(), "a b".to_string())]);
        assert!(check_labels(&bad_value)
            .expect_err("bad value")
            .contains("value \"a b\""));
    }
}
