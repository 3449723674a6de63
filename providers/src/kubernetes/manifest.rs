//! The `kubernetes_manifest` kind: any objects — from a YAML/JSON file (several
//! documents allowed) or written inline — applied with server-side apply, CRDs included.
//!
//! The content is part of the spec: `prepare` parses the file (or the inline manifest)
//! into the computed field `objects`, so an edited file shows in the plan as an in-place
//! update with the live YAML diff. Updates apply every object and delete the ones no
//! longer listed. Namespaces and CRDs go first (CRDs until Established, so their custom
//! resources can follow), then cluster-scoped objects, then namespaced ones; deletes go
//! in reverse.
//!
//! Objects are checked offline, before any cluster exists: the file's YAML (errors at
//! its own line and column), each document's shape, apiVersion, kind and name, the
//! kind against the Kubernetes 1.31 kinds of [`super::catalog`] (unserved versions,
//! removed APIs, misspelt kinds, kinds in the wrong group), the name rule and scope of
//! the kind, and unknown fields and wrong types (built-in kinds by their k8s-openapi
//! type, custom resources by their CRD's schema when the stack defines it). `prepare`
//! runs the checks of a file that need nothing else and fails at `file`;
//! `validate_peers` runs those needing the referenced resources (a custom kind on a
//! cluster this stack creates must have its CRD in this stack, or be an ACK SageMaker
//! kind), and every check of inline objects, at `manifest`. On an existing cluster a
//! kind of a group that is not Kubernetes' own is left to the API server.
//!
//! Id: the applied objects in apply order, comma-separated, each
//! `<apiVersion>/<kind>/<namespace>/<name>` (empty namespace when cluster-scoped).

use std::collections::BTreeSet;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::catalog::{self, FieldProblem, Lookup, Scope, Seg};
use super::{
    apply, check_cluster, check_dns_label, connect, delete_owned, id_of, marked, needs_cluster,
    ownership, parse_id, refs_of, refuse_strangers, set_path, ObjectRef, Ownership, MANAGED_BY,
};
use crate::protocol::{is_unknown, UNKNOWN};
use crate::schema::Fields;
use crate::{Ctx, Health, Invalid, Kind, Live, Peer, ProviderError};

/// The kind `kubernetes_manifest`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Manifest;

fn default_namespace() -> String {
    "default".into()
}

fn yes() -> bool {
    true
}

/// What a stack writes for a `kubernetes_manifest`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    #[terrain(doc = crate::kubernetes::CLUSTER_DOC, force_new)]
    pub cluster: Value,
    /// A YAML or JSON file of objects (several documents allowed), relative to the current
    /// directory.
    pub file: Option<String>,
    /// Values filled into `file` before it is read: each `${KEY}` of its text becomes the
    /// value (`template = { "var.region" = "${var.region}" }`). A key the file does not
    /// hold is an error; a `${…}` no key names stays as written.
    #[serde(default)]
    pub template: std::collections::BTreeMap<String, String>,
    /// Objects written inline: one object, or a list of them.
    #[terrain(any)]
    pub manifest: Option<Value>,
    /// The namespace of namespaced objects that name none.
    #[serde(default = "default_namespace")]
    pub namespace: String,
    /// Take over fields another field manager owns.
    #[serde(default)]
    pub force_conflicts: bool,
    /// Wait for CRDs, rollouts, Jobs and claims to be ready.
    #[serde(default = "yes")]
    pub wait: bool,
    /// API groups the controllers this manifest runs serve, beyond the groups of the
    /// CRDs it holds (`["sagemaker.services.k8s.aws"]` for the ACK SageMaker
    /// controller's Deployment): resources of those groups on the cluster are created
    /// after it and destroyed before it, while the controller can still lift their
    /// finalizers.
    #[serde(default)]
    pub serves: Vec<String>,
    /// Computed from file or manifest at plan time; do not set it.
    #[serde(default)]
    pub objects: Vec<Value>,
}

/// What `kubernetes_manifest` reports after apply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Outputs {
    /// The applied objects, APIVERSION/KIND/NAMESPACE/NAME, in apply order.
    pub object_ids: Vec<String>,
    /// How many objects were applied.
    pub count: i64,
}

const ID_SHAPE: &str =
    "APIVERSION/KIND/NAMESPACE/NAME[,…] (NAMESPACE empty for cluster-scoped objects)";
/// How many problems of a file one error lists.
const MAX_SHOWN: usize = 10;
const WAIT_TIMEOUT: Duration = Duration::from_secs(10 * 60);
const DELETE_TIMEOUT: Duration = Duration::from_secs(10 * 60);

/// One object of a manifest, with where it stands in its source.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// The object as written (any value: a document that is not a mapping is kept, so
    /// the checks can say so).
    pub object: Value,
    /// 1-based: the YAML document of a file, or the entry of an inline list.
    pub position: usize,
    /// 1-based: the item of a `List` inside that document or entry.
    pub item: Option<usize>,
}

/// Where a manifest's objects come from, for messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source<'a> {
    /// A YAML or JSON file, by the path the stack gives.
    File(&'a str),
    /// The inline `manifest` field.
    Inline,
}

impl Source<'_> {
    /// The spec field the objects come from.
    pub fn field(&self) -> &'static str {
        match self {
            Source::File(_) => "file",
            Source::Inline => "manifest",
        }
    }

    /// `document 2`, `document 2, item 1`, `entry 3`.
    fn label(&self, entry: &Entry) -> String {
        let unit = match self {
            Source::File(_) => "document",
            Source::Inline => "entry",
        };
        match entry.item {
            Some(item) => format!("{unit} {}, item {item}", entry.position),
            None => format!("{unit} {}", entry.position),
        }
    }
}

/// Pushes a document's objects: itself, or the items of a `List` (`kind: ConfigMapList`
/// and the like, as `kubectl get -o yaml` writes them).
fn push_document(document: Value, position: usize, out: &mut Vec<Entry>) {
    let is_list = document["kind"]
        .as_str()
        .is_some_and(|k| k.ends_with("List"))
        && document["items"].is_array();
    match document {
        Value::Null => {}
        Value::Object(mut map) if is_list => {
            if let Some(Value::Array(items)) = map.remove("items") {
                for (i, item) in items.into_iter().enumerate() {
                    if !item.is_null() {
                        out.push(Entry {
                            object: item,
                            position,
                            item: Some(i + 1),
                        });
                    }
                }
            }
        }
        other => out.push(Entry {
            object: other,
            position,
            item: None,
        }),
    }
}

/// The entries of an inline `manifest`: one object, or a list of them.
pub fn inline_entries(manifest: &Value) -> Vec<Entry> {
    let mut out = Vec::new();
    match manifest {
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                push_document(item.clone(), i + 1, &mut out);
            }
        }
        other => push_document(other.clone(), 1, &mut out),
    }
    out
}

/// The entries of a YAML (or JSON) text of one or more documents, read from `path`.
///
/// Fails, at the file's own line and column, when the text is not YAML; a document that
/// is not a mapping is an entry still (the checks say so).
pub fn read_entries(text: &str, path: &str) -> Result<Vec<Entry>, String> {
    let mut out = Vec::new();
    for (i, document) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
        let value = Value::deserialize(document).map_err(|e| yaml_error(path, i + 1, &e))?;
        push_document(value, i + 1, &mut out);
    }
    Ok(out)
}

/// `manifests/app.yaml:3:7: did not find expected key`, with the document when it is
/// not the first.
fn yaml_error(path: &str, document: usize, e: &serde_yaml_ng::Error) -> String {
    let message = e.to_string();
    let Some(at) = e.location() else {
        return format!("{path}: document {document}: {message}");
    };
    let (line, column) = (at.line(), at.column());
    let message = message.replacen(&format!(" at line {line} column {column}"), "", 1);
    if document > 1 {
        format!("{path}:{line}:{column}: {message} (document {document})")
    } else {
        format!("{path}:{line}:{column}: {message}")
    }
}

/// `text` with each `${KEY}` of `template` filled in.
///
/// Fails naming a key the text does not hold (a misspelt key would otherwise leave its
/// placeholder in the objects unnoticed).
fn fill(
    text: &str,
    template: &std::collections::BTreeMap<String, String>,
    path: &str,
) -> Result<String, String> {
    let mut out = text.to_string();
    for (key, value) in template {
        let placeholder = format!("${{{key}}}");
        if !out.contains(&placeholder) {
            return Err(format!(
                "{path}: template key {key:?} is not in the file (no `{placeholder}` to fill)"
            ));
        }
        out = out.replace(&placeholder, value);
    }
    Ok(out)
}

/// Reads a manifest file, fills in `template` and parses it; the error names the file
/// and says why.
fn read_file(
    path: &str,
    template: &std::collections::BTreeMap<String, String>,
) -> Result<Vec<Entry>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => {
            format!("{path}: no such file (a relative path is relative to the stack's directory)")
        }
        std::io::ErrorKind::InvalidData => {
            format!("{path}: not UTF-8 text; a manifest file is YAML or JSON")
        }
        _ if std::path::Path::new(path).is_dir() => {
            format!("{path}: is a directory; name a YAML or JSON file")
        }
        _ => format!("{path}: cannot read: {e}"),
    })?;
    read_entries(&fill(&text, template, path)?, path)
}

/// A CustomResourceDefinition found in this manifest or in a manifest it references.
#[derive(Debug, Clone)]
struct Crd {
    /// `widgets.example.com`.
    name: String,
    group: String,
    kind: String,
    /// `None` while the CRD's scope is not known.
    scope: Option<Scope>,
    versions: Vec<CrdVersion>,
    /// `this manifest`, or the address of the manifest that defines it.
    origin: String,
}

#[derive(Debug, Clone)]
struct CrdVersion {
    name: String,
    served: bool,
    schema: Option<Value>,
}

/// The CRDs among `objects` (values not known yet leave a CRD out).
fn crds_in<'v>(objects: impl IntoIterator<Item = &'v Value>, origin: &str) -> Vec<Crd> {
    fn known(v: &Value) -> Option<&str> {
        v.as_str().filter(|s| !s.contains(UNKNOWN) && !s.is_empty())
    }
    objects
        .into_iter()
        .filter(|o| {
            o["apiVersion"] == "apiextensions.k8s.io/v1" && o["kind"] == "CustomResourceDefinition"
        })
        .filter_map(|o| {
            let spec = &o["spec"];
            let versions = spec["versions"]
                .as_array()
                .map(|vs| {
                    vs.iter()
                        .filter_map(|v| {
                            Some(CrdVersion {
                                name: known(&v["name"])?.to_string(),
                                served: v["served"].as_bool().unwrap_or(true),
                                schema: v["schema"]
                                    .get("openAPIV3Schema")
                                    .filter(|s| s.is_object())
                                    .cloned(),
                            })
                        })
                        .collect()
                })
                .unwrap_or_default();
            Some(Crd {
                name: known(&o["metadata"]["name"])
                    .unwrap_or_default()
                    .to_string(),
                group: known(&spec["group"])?.to_string(),
                kind: known(&spec["names"]["kind"])?.to_string(),
                scope: match spec["scope"].as_str() {
                    Some("Namespaced") => Some(Scope::Namespaced),
                    Some("Cluster") => Some(Scope::Cluster),
                    _ => None,
                },
                versions,
                origin: origin.to_string(),
            })
        })
        .collect()
}

/// The CRDs of the stack's manifests among `peers`.
fn peer_crds(peers: &[Peer]) -> Vec<Crd> {
    peers
        .iter()
        .filter(|p| p.kind == Manifest::KIND)
        .flat_map(|p| {
            let objects = p.spec["objects"].as_array().cloned().unwrap_or_default();
            crds_in(&objects, &p.address)
        })
        .collect()
}

/// The resource of this stack that creates the cluster, when one does: a `gke_cluster`
/// or `eks_cluster` among the peers, with `cluster` not a kubeconfig of its own.
fn cluster_creator<'p>(cluster: &Value, peers: &'p [Peer]) -> Option<&'p str> {
    if cluster.get("kubeconfig").is_some() {
        return None;
    }
    peers
        .iter()
        .find(|p| p.kind == "gke_cluster" || p.kind == "eks_cluster")
        .map(|p| p.address.as_str())
}

/// Which checks to run: those needing only the manifest (`prepare`), those needing the
/// referenced resources (`validate_peers`), or both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Local,
    Peers,
    All,
}

/// What the checks know besides the entries: the referenced manifests' CRDs and the
/// resource creating the cluster.
struct Context<'a> {
    source: Source<'a>,
    mode: Mode,
    peer_crds: Vec<Crd>,
    creator: Option<&'a str>,
}

/// `"a string"`, `"a list"`: what a value is, without quoting it.
fn a_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

/// A known, non-empty string field of an object: `Ok(None)` when absent or not known
/// until apply, `Err` when it is not a string.
fn text<'v>(object: &'v Value, path: &[&str]) -> Result<Option<&'v str>, String> {
    let value = path.iter().try_fold(object, |v, k| v.get(*k));
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(v) if is_unknown(v) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(format!(
            "{} must be a string, not {}",
            path.join("."),
            a_type(other)
        )),
    }
}

/// The problems of a manifest's entries, each `<label> (<apiVersion> <kind> <name>):
/// <problem>`, for the checks `ctx.mode` selects.
fn check_entries(entries: &[Entry], ctx: &Context<'_>) -> Vec<String> {
    let local = matches!(ctx.mode, Mode::Local | Mode::All);
    let own_crds = crds_in(entries.iter().map(|e| &e.object), "this manifest");
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    if entries.is_empty() && local {
        out.push("holds no objects".to_string());
    }
    for entry in entries {
        check_entry(entry, ctx, &own_crds, &mut seen, &mut out);
    }
    out
}

/// An object's identity in a manifest: apiVersion, kind, namespace and name.
type ObjectKey = (String, String, Option<String>, String);

/// Appends the problems of one entry to `out`, for the checks `ctx.mode` selects;
/// `own_crds` are the CRDs of its manifest, `seen` the objects of the entries before it.
fn check_entry(
    entry: &Entry,
    ctx: &Context<'_>,
    own_crds: &[Crd],
    seen: &mut BTreeSet<ObjectKey>,
    out: &mut Vec<String>,
) {
    let local = matches!(ctx.mode, Mode::Local | Mode::All);
    let peers = matches!(ctx.mode, Mode::Peers | Mode::All);
    let label = ctx.source.label(entry);
    let object = &entry.object;
    if is_unknown(object) && !object.is_object() {
        return;
    }
    if !object.is_object() {
        if local {
            out.push(format!(
                "{label} is {}, not a mapping (an object with apiVersion, kind and metadata)",
                a_type(object)
            ));
        }
        return;
    }
    let mut problems: Vec<String> = Vec::new();
    let mut later: Vec<String> = Vec::new();
    let fields = (
        text(object, &["apiVersion"]),
        text(object, &["kind"]),
        text(object, &["metadata", "name"]),
    );
    let (api_version, kind, name) = match fields {
        (Ok(a), Ok(k), Ok(n)) => (a, k, n),
        (a, k, n) => {
            if local {
                out.extend(
                    [a.err(), k.err(), n.err()]
                        .into_iter()
                        .flatten()
                        .map(|m| format!("{label}: {m}")),
                );
            }
            return;
        }
    };
    let described = match (api_version, kind, name) {
        (Some(a), Some(k), Some(n)) => format!("{label} ({a} {k} {n})"),
        (Some(a), Some(k), None) => format!("{label} ({a} {k})"),
        _ => label.clone(),
    };
    let namespace = check_identity(object, api_version, kind, name, &mut problems);
    let (Some(api_version), Some(kind)) = (api_version, kind) else {
        if local {
            out.extend(problems.into_iter().map(|m| format!("{described}: {m}")));
        }
        return;
    };
    let has_namespace = namespace.is_some() || unknown_at(object, &["metadata", "namespace"]);
    match catalog::lookup(api_version, kind) {
        Lookup::Refused(m) => problems.push(m),
        Lookup::BuiltIn(b) => check_built_in(object, b, name, has_namespace, &mut problems),
        Lookup::Custom => {
            let kind = CustomKind {
                api_version,
                kind,
                has_namespace,
            };
            check_custom(
                object,
                &kind,
                name,
                own_crds,
                ctx,
                &mut problems,
                &mut later,
            );
        }
    }
    if let Some(name) = name {
        let key = (
            api_version.to_string(),
            kind.to_string(),
            namespace.map(str::to_string),
            name.to_string(),
        );
        if !seen.insert(key) && local {
            problems.push("appears twice in this manifest".into());
        }
    }
    if local {
        out.extend(problems.iter().map(|m| format!("{described}: {m}")));
    }
    if peers {
        out.extend(later.iter().map(|m| format!("{described}: {m}")));
    }
}

/// Whether the value at `path` in `object` is not known until apply.
fn unknown_at(object: &Value, path: &[&str]) -> bool {
    path.iter()
        .try_fold(object, |v, k| v.get(*k))
        .is_some_and(is_unknown)
}

/// Adds to `problems` those of the object's apiVersion, kind, metadata, name and
/// namespace as written; returns its namespace when it is a known string.
fn check_identity<'v>(
    object: &'v Value,
    api_version: Option<&str>,
    kind: Option<&str>,
    name: Option<&str>,
    problems: &mut Vec<String>,
) -> Option<&'v str> {
    if api_version.is_none() && !unknown_at(object, &["apiVersion"]) {
        problems.push("no apiVersion".into());
    }
    if kind.is_none() && !unknown_at(object, &["kind"]) {
        problems.push("no kind".into());
    }
    let metadata = &object["metadata"];
    if !metadata.is_null() && !metadata.is_object() && !is_unknown(metadata) {
        problems.push(format!(
            "metadata must be a mapping, not {}",
            a_type(metadata)
        ));
    } else if name.is_none() && !unknown_at(object, &["metadata", "name"]) {
        if metadata.get("generateName").is_some() {
            problems.push(
                "metadata.generateName cannot be applied: server-side apply needs metadata.name"
                    .into(),
            );
        } else {
            problems.push("no metadata.name".into());
        }
    }
    let namespace = match text(object, &["metadata", "namespace"]) {
        Ok(ns) => ns,
        Err(m) => {
            problems.push(m);
            None
        }
    };
    if let Some(ns) = namespace {
        if let Err(m) = catalog::check_name(catalog::NameRule::Label, ns) {
            problems.push(format!("metadata.namespace: {m}"));
        }
    }
    namespace
}

/// Adds to `problems` those of an object of the built-in kind `b`: its name, its
/// namespace against the kind's scope, its fields.
fn check_built_in(
    object: &Value,
    b: &catalog::BuiltIn,
    name: Option<&str>,
    has_namespace: bool,
    problems: &mut Vec<String>,
) {
    if let Some(name) = name {
        if let Err(m) = catalog::check_name(b.name_rule(), name) {
            problems.push(format!("metadata.name: {m}"));
        }
        if b.kind == "CustomResourceDefinition" {
            let plural = text(object, &["spec", "names", "plural"]).ok().flatten();
            let group = text(object, &["spec", "group"]).ok().flatten();
            if let (Some(plural), Some(group)) = (plural, group) {
                let want = format!("{plural}.{group}");
                if name != want {
                    problems.push(format!(
                        "metadata.name: a CRD is named <spec.names.plural>.<spec.group>, here {want:?}"
                    ));
                }
            }
        }
    }
    if b.scope == Scope::Cluster && has_namespace {
        problems.push(format!(
            "metadata.namespace: a {} is cluster-scoped; remove metadata.namespace",
            b.kind
        ));
    }
    problems.extend(b.check_fields(object).iter().map(ToString::to_string));
}

/// A custom resource's kind as an object states it, and whether it has a namespace.
struct CustomKind<'a> {
    api_version: &'a str,
    kind: &'a str,
    has_namespace: bool,
}

/// Adds the problems of a custom resource of `custom`: its name to `problems`, and the
/// checks against its CRD to `problems` when this manifest defines it, else to `later`
/// (checks that need the referenced resources).
fn check_custom(
    object: &Value,
    custom: &CustomKind<'_>,
    name: Option<&str>,
    own_crds: &[Crd],
    ctx: &Context<'_>,
    problems: &mut Vec<String>,
    later: &mut Vec<String>,
) {
    let CustomKind {
        api_version,
        kind,
        has_namespace,
    } = *custom;
    if let Some(Err(m)) =
        name.map(|n| catalog::check_name(catalog::NameRule::Subdomain { max: 253 }, n))
    {
        problems.push(format!("metadata.name: {m}"));
    }
    let (group, version) = catalog::split_api_version(api_version).unwrap_or_default();
    let defined = |crds: &[Crd]| {
        crds.iter()
            .find(|c| c.group == group && c.kind == kind)
            .cloned()
    };
    if let Some(crd) = defined(own_crds) {
        problems.extend(against_crd(object, version, &crd, has_namespace));
    } else if let Some(crd) = defined(&ctx.peer_crds) {
        later.extend(against_crd(object, version, &crd, has_namespace));
    } else if let Some(scope) = catalog::ack_sagemaker(group, version, kind) {
        if scope == Scope::Cluster && has_namespace {
            later.push(format!(
                "metadata.namespace: a {kind} is cluster-scoped; remove metadata.namespace"
            ));
        }
    } else if let Some(creator) = ctx.creator {
        later.push(format!(
            "no CRD defines {group}/{version} {kind}: the cluster is new ({creator} creates it), so it serves only the built-in kinds of Kubernetes {} and the CRDs of this stack; add the CRD to this manifest or to a kubernetes_manifest this one references or lists in depends_on",
            catalog::KUBERNETES_VERSION
        ));
    }
}

/// The problems of a custom resource against its CRD: a version the CRD does not
/// serve, a namespace on a cluster-scoped kind, fields its schema does not have.
fn against_crd(object: &Value, version: &str, crd: &Crd, has_namespace: bool) -> Vec<String> {
    let mut out = Vec::new();
    let which = if crd.name.is_empty() {
        format!("the CRD of {} ({})", crd.kind, crd.origin)
    } else {
        format!("the CRD {} ({})", crd.name, crd.origin)
    };
    match crd.versions.iter().find(|v| v.name == version) {
        Some(v) if v.served => {
            if let Some(schema) = &v.schema {
                let mut problems = Vec::new();
                check_schema(object, schema, &mut Vec::new(), true, &mut problems);
                out.extend(problems.iter().map(ToString::to_string));
            }
        }
        found => {
            let served: Vec<String> = crd
                .versions
                .iter()
                .filter(|v| v.served)
                .map(|v| format!("{}/{}", crd.group, v.name))
                .collect();
            let not = if found.is_some() {
                "has served: false for"
            } else {
                "does not define"
            };
            out.push(format!(
                "{which} {not} version {version}; it serves {}",
                if served.is_empty() {
                    "no version".to_string()
                } else {
                    served.join(", ")
                }
            ));
        }
    }
    if crd.scope == Some(Scope::Cluster) && has_namespace {
        out.push(format!(
            "metadata.namespace: a {} is cluster-scoped ({which}); remove metadata.namespace",
            crd.kind
        ));
    }
    out
}

/// Checks `value` against a CRD's structural `openAPIV3Schema`: fields the schema does
/// not declare (unless it keeps unknown fields) and the types of scalars, lists and
/// mappings. At the top, `apiVersion`, `kind`, `metadata` and `status` are the API
/// server's and are not checked. Values not known until apply pass.
fn check_schema(
    value: &Value,
    schema: &Value,
    path: &mut Vec<Seg>,
    top: bool,
    out: &mut Vec<FieldProblem>,
) {
    if value.is_null() || is_unknown(value) {
        return;
    }
    let preserve = schema["x-kubernetes-preserve-unknown-fields"] == true;
    if schema["x-kubernetes-int-or-string"] == true {
        if !(value.is_string() || value.as_f64().is_some_and(|f| f.fract() == 0.0)) {
            out.push(FieldProblem::new(
                path.clone(),
                format!("expected an integer or a string, got {}", a_type(value)),
            ));
        }
        return;
    }
    let want = schema["type"].as_str().unwrap_or_default();
    let fits = match want {
        "" => true,
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        "number" => value.is_number(),
        "integer" => {
            value.is_i64() || value.is_u64() || value.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        _ => true,
    };
    if !fits {
        let got = match value {
            Value::String(s) => format!("string {}", catalog::quote_short(s)),
            Value::Number(n) => format!("number {n}"),
            Value::Bool(b) => format!("boolean {b}"),
            other => a_type(other).to_string(),
        };
        out.push(FieldProblem::new(
            path.clone(),
            format!("expected {want}, got {got}"),
        ));
        return;
    }
    match value {
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items").filter(|s| s.is_object()) {
                for (i, item) in items.iter().enumerate() {
                    path.push(Seg::Index(i));
                    check_schema(item, item_schema, path, false, out);
                    path.pop();
                }
            }
        }
        Value::Object(map) => {
            let properties = schema["properties"].as_object();
            let additional = &schema["additionalProperties"];
            let embedded = schema["x-kubernetes-embedded-resource"] == true;
            let declared: Vec<&str> = properties
                .map(|p| p.keys().map(String::as_str).collect())
                .unwrap_or_default();
            for (key, item) in map {
                let server_owned = ((top || embedded)
                    && matches!(key.as_str(), "apiVersion" | "kind" | "metadata"))
                    || (top && key == "status");
                if server_owned {
                    continue;
                }
                path.push(Seg::Key(key.clone()));
                match properties.and_then(|p| p.get(key)) {
                    Some(field_schema) => check_schema(item, field_schema, path, false, out),
                    None if additional.is_object() => {
                        check_schema(item, additional, path, false, out)
                    }
                    None if preserve || *additional == true => {}
                    // An object with neither properties nor a rule for other keys is
                    // free-form only when it says so; otherwise the server prunes (or,
                    // validating strictly, refuses) every key.
                    None if properties.is_none() && want != "object" => {}
                    None => {
                        let hint = catalog::did_you_mean(key, &declared)
                            .map(|f| format!(" (did you mean `{f}`?)"))
                            .unwrap_or_default();
                        out.push(FieldProblem::new(
                            path.clone(),
                            format!("unknown field{hint}"),
                        ));
                    }
                }
                path.pop();
            }
        }
        _ => {}
    }
}

/// The problems of `spec`'s objects that `mode` selects, each naming its source:
/// `(field, message)`, the message starting with the file's path for a file.
fn problems(spec: &Value, peers: &[Peer], mode: Mode) -> Vec<(&'static str, String)> {
    let file = spec.get("file").filter(|f| !f.is_null());
    let inline = spec.get("manifest").filter(|m| !m.is_null());
    let (source, entries) = match (file, inline) {
        (Some(Value::String(path)), None)
            if !is_unknown(&json!(path)) && !path.trim().is_empty() =>
        {
            let template = template_of(spec);
            if template.values().any(|v| v.contains(UNKNOWN)) {
                // Filled in once its values are known.
                return Vec::new();
            }
            match read_file(path, &template) {
                Ok(entries) => (Source::File(path), entries),
                Err(m) if mode != Mode::Peers => return vec![("file", m)],
                Err(_) => return Vec::new(),
            }
        }
        (None, Some(inline)) if !(inline.is_string() && is_unknown(inline)) => {
            (Source::Inline, inline_entries(inline))
        }
        _ => return Vec::new(),
    };
    named_problems(source, &entries, &spec["cluster"], peers, mode)
}

/// The problems of `entries` that `mode` selects, as [`problems`] gives them.
fn named_problems(
    source: Source<'_>,
    entries: &[Entry],
    cluster: &Value,
    peers: &[Peer],
    mode: Mode,
) -> Vec<(&'static str, String)> {
    let ctx = Context {
        source,
        mode,
        peer_crds: peer_crds(peers),
        creator: cluster_creator(cluster, peers),
    };
    check_entries(entries, &ctx)
        .into_iter()
        .map(|m| match source {
            Source::File(path) => ("file", format!("{path}: {m}")),
            Source::Inline => ("manifest", m),
        })
        .collect()
}

/// The `template` table of an untyped spec.
fn template_of(spec: &Value) -> std::collections::BTreeMap<String, String> {
    spec["template"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
        .collect()
}

/// The objects a spec describes, from its file or its inline manifest (unchecked: the
/// checks ran at plan time).
fn parse(spec: &Spec) -> Result<Vec<Value>, ProviderError> {
    let entries = match (&spec.file, &spec.manifest) {
        (Some(path), None) => {
            read_file(path, &spec.template).map_err(|m| ProviderError::invalid("file", m))?
        }
        (None, Some(inline)) => inline_entries(inline),
        _ => {
            return Err(ProviderError::Unsupported(format!(
                "{}: set either `file` or `manifest`",
                Manifest::KIND
            )))
        }
    };
    Ok(entries.into_iter().map(|e| e.object).collect())
}

/// Whether `object` goes without a namespace: a cluster-scoped built-in kind, or a
/// custom resource whose CRD (among `crds`) says so. Discovery settles the rest at apply
/// time.
fn cluster_scoped(object: &Value, crds: &[Crd]) -> bool {
    let (Some(api_version), Some(kind)) = (object["apiVersion"].as_str(), object["kind"].as_str())
    else {
        return false;
    };
    match catalog::lookup(api_version, kind) {
        Lookup::BuiltIn(b) => b.scope == Scope::Cluster,
        _ => {
            let group = catalog::split_api_version(api_version).map_or("", |(g, _)| g);
            crds.iter()
                .any(|c| c.group == group && c.kind == kind && c.scope == Some(Scope::Cluster))
        }
    }
}

/// The objects to apply: parsed (when `prepare` has not run), with the default
/// namespace on namespaced objects that name none and terrain's label.
fn objects(spec: &Spec) -> Result<Vec<Value>, ProviderError> {
    let parsed = if spec.objects.is_empty() {
        parse(spec)?
    } else {
        spec.objects.clone()
    };
    let crds = crds_in(&parsed, "this manifest");
    Ok(parsed
        .into_iter()
        .map(|object| {
            // Objects saved with `kubectl get -o yaml` carry server bookkeeping that an
            // apply must not send back.
            let mut object = apply::strip_noise(&object);
            if !cluster_scoped(&object, &crds)
                && object["metadata"]["namespace"]
                    .as_str()
                    .is_none_or(str::is_empty)
            {
                set_path(
                    &mut object,
                    &["metadata", "namespace"],
                    json!(spec.namespace),
                );
            }
            set_path(
                &mut object,
                &["metadata", "labels", MANAGED_BY.0],
                json!(MANAGED_BY.1),
            );
            object
        })
        .collect())
}

/// Namespaces and CRDs, which the rest may need, come first.
fn foundation(object: &Value) -> bool {
    matches!(
        object["kind"].as_str(),
        Some("Namespace" | "CustomResourceDefinition")
    )
}

/// How long a kind whose CRD was just established may take to appear in discovery.
const DISCOVERY_SETTLE: Duration = Duration::from_secs(10);

/// Whether `target`'s kind is namespaced; after CRDs were applied (`fresh_crds`), a
/// kind not served yet is looked up again for a while, since the API server publishes
/// a new group shortly after its CRD is established.
async fn kind_scope(
    client: &crate::kubernetes::connect::Conn,
    target: &ObjectRef,
    fresh_crds: bool,
) -> Result<Option<bool>, ProviderError> {
    let started = tokio::time::Instant::now();
    loop {
        let found = apply::is_namespaced(client, &target.api_version, &target.kind).await?;
        if found.is_some() || !fresh_crds || started.elapsed() >= DISCOVERY_SETTLE {
            return Ok(found);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Puts the namespace where the cluster wants it (discovery knows the scope of every
/// kind it serves, CRDs' included) and orders cluster-scoped objects first.
async fn scoped(
    client: &crate::kubernetes::connect::Conn,
    objects: Vec<Value>,
    fresh_crds: bool,
) -> Result<Vec<Value>, ProviderError> {
    let mut cluster = Vec::new();
    let mut namespaced = Vec::new();
    for mut object in objects {
        let target = ObjectRef::of(&object)
            .map_err(|m| ProviderError::Unsupported(format!("{}: {m}", Manifest::KIND)))?;
        // A kind the cluster does not serve stays as written: applying it names its CRD.
        match kind_scope(client, &target, fresh_crds).await? {
            Some(false) => {
                if let Some(meta) = object["metadata"].as_object_mut() {
                    meta.remove("namespace");
                }
                cluster.push(object);
            }
            _ => namespaced.push(object),
        }
    }
    cluster.extend(namespaced);
    Ok(cluster)
}

/// Applies `spec`'s objects in order and waits for them; deletes the objects of
/// `prior_id` no longer wanted. Returns the applied objects, in apply order.
async fn apply_objects(
    ctx: &Ctx,
    spec: &Spec,
    prior_id: Option<&str>,
) -> Result<Vec<Value>, ProviderError> {
    let client = connect::client(ctx, &spec.cluster).await?;
    let wanted = marked(objects(spec)?, &ctx.address);
    if prior_id.is_none() {
        refuse_strangers(&client, &wanted, Manifest::KIND, &ctx.address).await?;
    }
    let (first, rest): (Vec<Value>, Vec<Value>) = wanted.into_iter().partition(foundation);
    let mut applied = Vec::new();
    let fresh_crds = first
        .iter()
        .any(|o| o["kind"] == "CustomResourceDefinition");
    for object in scoped(&client, first, false).await? {
        let live = apply::apply(&client, &object, spec.force_conflicts).await?;
        if object["kind"] == "CustomResourceDefinition" {
            // Its custom resources cannot be applied before the API serves them.
            let target = ObjectRef::of(&object).map_err(ProviderError::Unsupported)?;
            apply::wait_until(
                &client,
                &target.api_version,
                &target.kind,
                None,
                &target.name,
                ctx,
                WAIT_TIMEOUT,
                &format!("CRD {} to be established", target.name),
                |o| apply::readiness(o).unwrap_or(Ok(true)),
            )
            .await?;
        }
        applied.push(live);
    }
    for object in scoped(&client, rest, fresh_crds).await? {
        applied.push(apply::apply(&client, &object, spec.force_conflicts).await?);
    }
    if spec.wait {
        for object in &applied {
            if apply::readiness(object).is_none() {
                continue;
            }
            let target = ObjectRef::of(object).map_err(ProviderError::Unsupported)?;
            let what = format!("{} to be ready", target.describe());
            let progress = apply::Progress::new(ctx);
            let ready = apply::wait_until(
                &client,
                &target.api_version,
                &target.kind,
                target.namespace.as_deref(),
                &target.name,
                ctx,
                WAIT_TIMEOUT,
                &what,
                |o| {
                    let ready = apply::readiness(o).unwrap_or(Ok(true));
                    if ready == Ok(false) {
                        progress.report(&format!("{}: {}", target.describe(), apply::summary(o)));
                    }
                    ready
                },
            );
            ready.await?;
        }
    }
    if let Some(prior_id) = prior_id {
        let now = refs_of(&applied)?;
        for gone in parse_id(Manifest::KIND, prior_id, ID_SHAPE)?
            .iter()
            .rev()
            .filter(|r| !now.contains(r))
        {
            if let Some(live) = apply::get_ref(&client, gone).await? {
                if !matches!(ownership(&live, &ctx.address), Ownership::Other(_)) {
                    ctx.progress(&format!(
                        "deleting {}, no longer in the manifest",
                        gone.describe()
                    ));
                    apply::delete_ref(&client, gone, ctx, DELETE_TIMEOUT).await?;
                }
            }
        }
    }
    Ok(applied)
}

fn outputs_of(refs: &[ObjectRef]) -> Outputs {
    Outputs {
        object_ids: refs.iter().map(ToString::to_string).collect(),
        count: i64::try_from(refs.len()).unwrap_or(i64::MAX),
    }
}

/// Whether a spec object is the one `live` names (an id leaves out the namespace of a
/// cluster-scoped object the stack may have given one).
fn same_object(object: &Value, live: &ObjectRef, default_namespace: &str) -> bool {
    let Ok(target) = ObjectRef::of(object) else {
        return false;
    };
    let namespace = target.namespace.as_deref().unwrap_or(default_namespace);
    target.api_version == live.api_version
        && target.kind == live.kind
        && target.name == live.name
        && live.namespace.as_deref().is_none_or(|ns| ns == namespace)
}

/// How many objects of one kind and namespace a manifest holds before a read lists them
/// with one call instead of getting each (an install of 70 objects reads with ~15).
const LIST_FROM: usize = 3;

/// Each of `refs` as the cluster has it (`None`: gone), in order. Objects of one kind and
/// namespace are listed together once there are [`LIST_FROM`] of them; CRDs are always
/// read one by one, since a cluster's CRDs together run to megabytes. A list the
/// caller may not make (403), or of a kind no longer served (404), falls back to reading
/// each object.
async fn read_objects(
    client: &connect::Conn,
    refs: &[ObjectRef],
) -> Result<Vec<Option<Value>>, ProviderError> {
    let mut groups: std::collections::BTreeMap<(&str, &str, Option<&str>), usize> =
        std::collections::BTreeMap::new();
    for r in refs {
        *groups
            .entry((
                r.api_version.as_str(),
                r.kind.as_str(),
                r.namespace.as_deref(),
            ))
            .or_default() += 1;
    }
    let mut listed: std::collections::BTreeMap<(&str, &str, Option<&str>), Vec<Value>> =
        std::collections::BTreeMap::new();
    for (&(api_version, kind, namespace), &n) in &groups {
        if n < LIST_FROM || kind == "CustomResourceDefinition" {
            continue;
        }
        match apply::list(client, api_version, kind, namespace, "").await {
            Ok(items) => {
                listed.insert((api_version, kind, namespace), items);
            }
            Err(e) if matches!(apply::status_of(&e), Some(403 | 404)) => {}
            Err(e) => return Err(e),
        }
    }
    let mut out = Vec::with_capacity(refs.len());
    for r in refs {
        let key = (
            r.api_version.as_str(),
            r.kind.as_str(),
            r.namespace.as_deref(),
        );
        match listed.get(&key) {
            Some(items) => out.push(
                items
                    .iter()
                    .find(|o| o["metadata"]["name"].as_str() == Some(r.name.as_str()))
                    .cloned(),
            ),
            None => out.push(apply::get_ref(client, r).await?),
        }
    }
    Ok(out)
}

/// The groups of the CRDs the manifest holds and those it `serves` (provided), and the
/// custom kinds of its other objects whose group it does not provide itself (needed from
/// another resource of the stack, or from the live cluster).
fn api_groups(spec: &Value) -> crate::ApiGroups {
    let objects = spec["objects"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut provides: Vec<String> = objects
        .iter()
        .filter(|o| {
            o["kind"] == "CustomResourceDefinition"
                && o["apiVersion"]
                    .as_str()
                    .is_some_and(|v| v.starts_with("apiextensions.k8s.io/"))
        })
        .filter_map(|o| o["spec"]["group"].as_str().map(str::to_string))
        .collect();
    provides.extend(
        spec["serves"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_string),
    );
    provides.sort();
    provides.dedup();
    let mut needs: Vec<crate::ApiKind> = objects
        .iter()
        .filter_map(|o| {
            let api_version = o["apiVersion"].as_str()?;
            let kind = o["kind"].as_str()?;
            let (group, _) = catalog::split_api_version(api_version)?;
            (!group.is_empty()
                && !catalog::is_builtin_group(group)
                && !provides.iter().any(|p| p == group))
            .then(|| crate::ApiKind {
                group: group.to_string(),
                api_version: api_version.to_string(),
                kind: kind.to_string(),
            })
        })
        .collect();
    needs.sort();
    needs.dedup();
    // A manifest that serves groups runs their controller: on the cluster's nodes.
    let pods = spec["serves"].as_array().is_some_and(|s| !s.is_empty());
    crate::ApiGroups {
        provides,
        needs,
        pods,
        nodes: false,
    }
}

#[async_trait]
impl Kind for Manifest {
    type Spec = Spec;
    type Outputs = Outputs;
    const KIND: &'static str = "kubernetes_manifest";
    const PROVIDER: &'static str = "kubernetes";
    const WRITES: crate::protocol::Writes = crate::protocol::Writes::Manifest;
    const RENDERS: bool = true;

    fn api_groups(spec: &Value) -> crate::ApiGroups {
        api_groups(spec)
    }

    fn validate(spec: &Spec, _config: &Value) -> Vec<Invalid> {
        let mut out = Vec::new();
        check_cluster(&spec.cluster, &mut out);
        match (&spec.file, &spec.manifest) {
            (Some(_), Some(_)) => {
                out.push(Invalid::at("", "set either `file` or `manifest`, not both"))
            }
            (None, None) => out.push(Invalid::at(
                "",
                "set `file` (a YAML or JSON file) or `manifest` (objects written inline)",
            )),
            (Some(file), None) if file.trim().is_empty() => {
                out.push(Invalid::at("file", "must name a file"))
            }
            // The objects themselves are checked by `prepare` (a file) and
            // `validate_peers` (inline objects, which may hold values known only after
            // apply: one of those must not exempt the other objects, as a problem on
            // `manifest` here would be dropped whole).
            _ => {}
        }
        if let Err(m) = check_dns_label(&spec.namespace) {
            out.push(Invalid::at("namespace", m));
        }
        if !spec.objects.is_empty() {
            out.push(Invalid::at(
                "objects",
                "is computed from `file` or `manifest`; leave it out",
            ));
        }
        out
    }

    fn validate_peers(spec: &Value, peers: &[Peer]) -> Vec<Invalid> {
        let mode = match spec.get("manifest") {
            Some(m) if !m.is_null() => Mode::All,
            _ => Mode::Peers,
        };
        problems(spec, peers, mode)
            .into_iter()
            .map(|(field, message)| Invalid::at(field, message))
            .collect()
    }

    /// Reads the file into `objects` and checks them offline (everything but what
    /// needs the referenced resources: see `validate_peers`); inline objects are only
    /// listed. A `file` not known until apply leaves `objects` empty.
    fn prepare(mut spec: Spec) -> Result<Spec, ProviderError> {
        match (&spec.file, &spec.manifest) {
            (Some(path), None)
                if !path.trim().is_empty()
                    && !path.contains(UNKNOWN)
                    && !spec.template.values().any(|v| v.contains(UNKNOWN)) =>
            {
                let entries = read_file(path, &spec.template)
                    .map_err(|m| ProviderError::invalid("file", m))?;
                let found = named_problems(
                    Source::File(path),
                    &entries,
                    &spec.cluster,
                    &[],
                    Mode::Local,
                );
                if !found.is_empty() {
                    let shown: Vec<&str> = found
                        .iter()
                        .take(MAX_SHOWN)
                        .map(|(_, m)| m.as_str())
                        .collect();
                    let mut message = shown.join("\n");
                    if found.len() > MAX_SHOWN {
                        message.push_str(&format!("\n(and {} more)", found.len() - MAX_SHOWN));
                    }
                    return Err(ProviderError::invalid("file", message));
                }
                spec.objects = entries.into_iter().map(|e| e.object).collect();
            }
            (None, Some(inline)) => {
                spec.objects = inline_entries(inline)
                    .into_iter()
                    .map(|e| e.object)
                    .collect();
            }
            _ => spec.objects = Vec::new(),
        }
        Ok(spec)
    }

    fn render(spec: &Spec, _config: &Value) -> Option<Result<Vec<Value>, ProviderError>> {
        Some(objects(spec))
    }

    async fn read(
        &self,
        ctx: &Ctx,
        id: &str,
        prior: Option<&Spec>,
    ) -> Result<Option<Live<Self>>, ProviderError> {
        let refs = parse_id(Self::KIND, id, ID_SHAPE)?;
        let prior = prior.ok_or_else(|| needs_cluster(Self::KIND))?;
        let client = connect::client(ctx, &prior.cluster).await?;
        let live = read_objects(&client, &refs).await?;
        let present: Vec<ObjectRef> = refs
            .iter()
            .zip(live)
            .filter(|(_, live)| {
                live.as_ref()
                    .is_some_and(|l| !matches!(ownership(l, &ctx.address), Ownership::Other(_)))
            })
            .map(|(r, _)| r.clone())
            .collect();
        if present.is_empty() {
            return Ok(None);
        }
        // Objects deleted behind terrain's back drop out, so the plan puts them back.
        let mut spec = prior.clone();
        spec.objects
            .retain(|o| present.iter().any(|r| same_object(o, r, &prior.namespace)));
        Ok(Some(Live {
            id: id_of(&present),
            outputs: outputs_of(&present),
            spec,
        }))
    }

    async fn create(&self, ctx: &Ctx, spec: &Spec) -> Result<Live<Self>, ProviderError> {
        let refs = refs_of(&apply_objects(ctx, spec, None).await?)?;
        Ok(Live {
            id: id_of(&refs),
            outputs: outputs_of(&refs),
            spec: spec.clone(),
        })
    }

    async fn update(
        &self,
        ctx: &Ctx,
        id: &str,
        _prior: &Spec,
        spec: &Spec,
    ) -> Result<Live<Self>, ProviderError> {
        let refs = refs_of(&apply_objects(ctx, spec, Some(id)).await?)?;
        Ok(Live {
            id: id_of(&refs),
            outputs: outputs_of(&refs),
            spec: spec.clone(),
        })
    }

    async fn delete(&self, ctx: &Ctx, id: &str, prior: Option<&Spec>) -> Result<(), ProviderError> {
        let refs = parse_id(Self::KIND, id, ID_SHAPE)?;
        let prior = prior.ok_or_else(|| needs_cluster(Self::KIND))?;
        delete_owned(&prior.cluster, &refs, true, ctx, DELETE_TIMEOUT).await
    }

    async fn preview(
        &self,
        ctx: &Ctx,
        _id: &str,
        prior: &Spec,
        spec: &Spec,
    ) -> Result<Option<String>, ProviderError> {
        let client = connect::client(ctx, &spec.cluster).await?;
        let before = scoped(&client, marked(objects(prior)?, &ctx.address), false).await?;
        let after = scoped(&client, marked(objects(spec)?, &ctx.address), false).await?;
        apply::preview(&client, &before, &after, spec.force_conflicts).await
    }

    async fn health(
        &self,
        ctx: &Ctx,
        id: &str,
        prior: Option<&Spec>,
    ) -> Result<Option<Health>, ProviderError> {
        let refs = parse_id(Self::KIND, id, ID_SHAPE)?;
        let prior = prior.ok_or_else(|| needs_cluster(Self::KIND))?;
        let client = connect::client(ctx, &prior.cluster).await?;
        let (mut ready, mut missing, mut waiting) = (0usize, Vec::new(), Vec::new());
        for target in &refs {
            match apply::get_ref(&client, target)
                .await?
                .filter(|o| !matches!(ownership(o, &ctx.address), Ownership::Other(_)))
            {
                None => missing.push(target.describe()),
                Some(live) => match apply::readiness(&live) {
                    None | Some(Ok(true)) => ready += 1,
                    _ => waiting.push(format!("{}: {}", target.describe(), apply::summary(&live))),
                },
            }
        }
        let mut summary = format!("{ready}/{} ready", refs.len());
        if let Some(first) = missing.first() {
            summary.push_str(&format!("; missing {first}"));
        } else if let Some(first) = waiting.first() {
            summary.push_str(&format!("; {first}"));
        }
        Ok(Some(Health {
            ready: ready == refs.len(),
            summary,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubernetes::connect::tests::gke_reference;
    use crate::testing::schema_mismatches;

    const YAML: &str = "\
apiVersion: v1
kind: Namespace
metadata:
  name: ml
---
# a comment-only document is skipped
---
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: ConfigMap
  metadata:
    name: settings
  data:
    epochs: \"3\"
- apiVersion: example.com/v1
  kind: Widget
  metadata:
    name: w
    namespace: ml
";

    const CRD: &str = "\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {kind: Widget, plural: widgets, singular: widget, listKind: WidgetList}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer}
              color: {type: string}
              extra: {type: object, x-kubernetes-preserve-unknown-fields: true}
              port: {x-kubernetes-int-or-string: true}
";

    fn inline() -> Spec {
        Spec {
            cluster: gke_reference(),
            file: None,
            template: std::collections::BTreeMap::new(),
            serves: Vec::new(),
            manifest: Some(json!([
                {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "runner"},
                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"}, "subjects": []},
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"}, "data": {"a": "1"}},
            ])),
            namespace: "batch".into(),
            force_conflicts: false,
            wait: true,
            objects: Vec::new(),
        }
    }

    fn existing_cluster() -> Value {
        json!({"kubeconfig": "~/.kube/config"})
    }

    fn peer(kind: &str, address: &str, spec: Value) -> Peer {
        Peer {
            kind: kind.into(),
            address: address.into(),
            spec,
        }
    }

    /// A `gke_cluster` of this stack, and the `cluster` value a manifest on it has
    /// before apply.
    fn new_gke_cluster() -> (Value, Vec<Peer>) {
        (
            json!(crate::protocol::UNKNOWN),
            vec![peer(
                "gke_cluster",
                "gke_cluster.main",
                json!({"name": "main"}),
            )],
        )
    }

    /// The problems of `text` read as the file `path`, with every check.
    fn file_problems(text: &str, path: &str, cluster: &Value, peers: &[Peer]) -> Vec<String> {
        match read_entries(text, path) {
            Ok(entries) => named_problems(Source::File(path), &entries, cluster, peers, Mode::All)
                .into_iter()
                .map(|(field, m)| {
                    assert_eq!(field, "file");
                    m
                })
                .collect(),
            Err(m) => vec![m],
        }
    }

    fn local(text: &str) -> Vec<String> {
        file_problems(text, "manifests/app.yaml", &existing_cluster(), &[])
    }

    fn inline_problems(manifest: Value, cluster: Value, peers: &[Peer]) -> Vec<Invalid> {
        let spec = serde_json::to_value(Spec {
            cluster,
            manifest: Some(manifest),
            ..inline()
        })
        .expect("spec encodes");
        Manifest::validate_peers(&spec, peers)
    }

    fn assert_one(problems: &[String], want: &str) {
        assert!(
            problems.len() == 1 && problems[0].contains(want),
            "want one problem with {want:?}, got {problems:#?}"
        );
    }

    #[test]
    fn schema_matches_spec_and_outputs() {
        let full = Spec {
            file: Some("objects.yaml".into()),
            force_conflicts: true,
            objects: vec![json!({"kind": "ConfigMap"})],
            ..inline()
        };
        let outputs = outputs_of(&[ObjectRef::new("v1", "ConfigMap", Some("batch"), "settings")]);
        assert_eq!(
            outputs.object_ids,
            vec!["v1/ConfigMap/batch/settings".to_string()]
        );
        assert_eq!(
            schema_mismatches::<Manifest>(&full, &outputs),
            Vec::<String>::new()
        );
    }

    #[test]
    fn files_parse_into_objects() {
        let entries = read_entries(YAML, "x.yaml").expect("parses");
        let kinds: Vec<&str> = entries
            .iter()
            .filter_map(|e| e.object["kind"].as_str())
            .collect();
        assert_eq!(kinds, ["Namespace", "ConfigMap", "Widget"]);
        assert_eq!(entries[1].object["data"]["epochs"], "3");
        assert_eq!((entries[1].position, entries[1].item), (3, Some(1)));
        let json = read_entries(
            r#"{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}"#,
            "c.json",
        )
        .expect("JSON is YAML");
        assert_eq!(json.len(), 1);
        assert_eq!(
            local(YAML),
            Vec::<String>::new(),
            "a Widget on an existing cluster waits for the live check"
        );
    }

    #[test]
    fn yaml_syntax_errors_carry_the_files_line_and_column() {
        let problems = local("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n data: x\n");
        assert_one(
            &problems,
            "manifests/app.yaml:5:2: did not find expected key",
        );
        assert!(!problems[0].contains("at line 5 column 2"), "{problems:?}");
        let second = local("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n---\na: [1\n");
        assert!(
            second[0].starts_with("manifests/app.yaml:") && second[0].ends_with("(document 2)"),
            "{second:?}"
        );
        let json = local("{\"apiVersion\": \"v1\",, }");
        assert!(json[0].starts_with("manifests/app.yaml:1:"), "{json:?}");
    }

    #[test]
    fn structural_problems_name_the_document() {
        let cases = [
            ("", "manifests/app.yaml: holds no objects"),
            ("# nothing\n", "manifests/app.yaml: holds no objects"),
            ("- 3\n", "manifests/app.yaml: document 1 is a list, not a mapping"),
            ("just text\n", "manifests/app.yaml: document 1 is a string, not a mapping"),
            ("kind: ConfigMap\nmetadata: {name: c}\n", "manifests/app.yaml: document 1: no apiVersion"),
            ("apiVersion: v1\nmetadata: {name: c}\n", "manifests/app.yaml: document 1: no kind"),
            ("apiVersion: v1\nkind: ConfigMap\n", "manifests/app.yaml: document 1 (v1 ConfigMap): no metadata.name"),
            (
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {generateName: c-}\n",
                "metadata.generateName cannot be applied: server-side apply needs metadata.name",
            ),
            ("apiVersion: 1\nkind: ConfigMap\nmetadata: {name: c}\n", "document 1: apiVersion must be a string, not a number"),
            (
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: My_Settings}\n",
                "manifests/app.yaml: document 1 (v1 ConfigMap My_Settings): metadata.name: \"My_Settings\" is not a valid DNS-1123 subdomain",
            ),
            ("apiVersion: v1\nkind: Namespace\nmetadata: {name: ml.team}\n", "is not a valid DNS-1123 label"),
            ("apiVersion: v1\nkind: Service\nmetadata: {name: 1web}\n", "is not a valid DNS-1035 label"),
            ("apiVersion: batch/v1\nkind: CronJob\nmetadata: {name: a-very-long-cron-job-name-that-goes-past-fifty-two-chars}\n", "is longer than 52 characters"),
            ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: Team_A}\n", "metadata.namespace: \"Team_A\" is not a valid DNS-1123 label"),
            (
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n",
                "manifests/app.yaml: document 2 (v1 ConfigMap c): appears twice in this manifest",
            ),
        ];
        for (text, want) in cases {
            let problems = local(text);
            assert_one(&problems, want);
        }
        // RBAC names are path segments, not DNS names.
        assert_eq!(
            local("apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: \"system:runner\"}\nrules: []\n"),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_namespace_on_a_cluster_scoped_kind_is_refused() {
        for kind in ["ClusterRole", "Namespace", "PersistentVolume"] {
            let api_version = if kind == "ClusterRole" {
                "rbac.authorization.k8s.io/v1"
            } else {
                "v1"
            };
            let text = format!(
                "apiVersion: {api_version}\nkind: {kind}\nmetadata: {{name: x, namespace: ml}}\n"
            );
            assert_one(
                &local(&text),
                &format!(
                    "metadata.namespace: a {kind} is cluster-scoped; remove metadata.namespace"
                ),
            );
        }
    }

    #[test]
    fn kinds_no_cluster_serves_are_refused_with_the_fix() {
        let cases = [
            (
                "apps/v9",
                "Deployment",
                "apps serves Deployment as v1 (use apps/v1)",
            ),
            (
                "v1",
                "ConfigMapp",
                "v1 has no kind ConfigMapp (did you mean ConfigMap, v1?)",
            ),
            (
                "batch/v1beta1",
                "CronJob",
                "batch/v1beta1 CronJob was removed in Kubernetes 1.25; use batch/v1",
            ),
            ("apps/v1", "Job", "apps has no kind Job; Job is batch/v1"),
        ];
        for (api_version, kind, want) in cases {
            let text =
                format!("apiVersion: {api_version}\nkind: {kind}\nmetadata: {{name: web}}\n");
            let problems = local(&text);
            assert_one(
                &problems,
                &format!("manifests/app.yaml: document 1 ({api_version} {kind} web): "),
            );
            assert_one(&problems, want);
            // The same on a cluster this stack creates.
            let (cluster, peers) = new_gke_cluster();
            assert_one(&file_problems(&text, "m.yaml", &cluster, &peers), want);
        }
    }

    const DEPLOYMENT: &str = "\
apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
data: {a: \"1\"}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replica: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: web
        imagee: nginx
";

    #[test]
    fn unknown_fields_of_built_in_kinds_name_document_and_path() {
        assert_eq!(
            local(DEPLOYMENT),
            [
                "manifests/app.yaml: document 2 (apps/v1 Deployment web): spec.replica: unknown field (did you mean `replicas`?)",
                "manifests/app.yaml: document 2 (apps/v1 Deployment web): spec.template.spec.containers[0].imagee: unknown field (did you mean `image`?)",
            ]
        );
        assert_one(
            &local("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndta: {a: b}\n"),
            "manifests/app.yaml: document 1 (v1 ConfigMap c): dta: unknown field (did you mean `data`?)",
        );
        assert_one(
            &local("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec: {replicas: three, selector: {}, template: {}}\n"),
            "document 1 (apps/v1 Deployment web): spec.replicas: invalid type: string \"three\", expected i32",
        );
        assert_one(
            &local("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, labells: {a: b}}\n"),
            "metadata.labells: unknown field (did you mean `labels`?)",
        );
    }

    #[test]
    fn a_template_fills_the_file_and_a_key_it_lacks_is_refused() -> Result<(), ProviderError> {
        let dir = tempfile::tempdir().map_err(|e| ProviderError::io("tempdir", "", e))?;
        let path = dir.path().join("cm.yaml");
        std::fs::write(
            &path,
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  region: ${var.region}\n  script: echo ${HOME}\n",
        )
        .map_err(|e| ProviderError::io("write", "cm.yaml", e))?;
        let file = Some(path.to_string_lossy().into_owned());
        let filled = Manifest::prepare(Spec {
            file: file.clone(),
            manifest: None,
            template: [("var.region".to_string(), "eu-west-1".to_string())].into(),
            ..inline()
        })?;
        assert_eq!(filled.objects[0]["data"]["region"], "eu-west-1");
        assert_eq!(
            filled.objects[0]["data"]["script"], "echo ${HOME}",
            "no key, left as written"
        );
        match Manifest::prepare(Spec {
            file,
            manifest: None,
            template: [("var.regoin".to_string(), "eu-west-1".to_string())].into(),
            ..inline()
        }) {
            Err(ProviderError::Invalid { field, message }) => {
                assert_eq!(field, "file");
                assert!(
                    message.contains("template key \"var.regoin\" is not in the file"),
                    "{message}"
                );
            }
            other => panic!("a misspelt key is refused: {other:?}"),
        }
        Ok(())
    }

    #[test]
    fn prepare_refuses_a_bad_file_at_the_file_field() -> Result<(), ProviderError> {
        let dir = tempfile::tempdir().map_err(|e| ProviderError::io("tempdir", "", e))?;
        let path = dir.path().join("app.yaml");
        std::fs::write(&path, DEPLOYMENT).map_err(|e| ProviderError::io("write", "app.yaml", e))?;
        let path = path.to_string_lossy().into_owned();
        let spec = Spec {
            file: Some(path.clone()),
            manifest: None,
            ..inline()
        };
        match Manifest::prepare(spec) {
            Err(ProviderError::Invalid { field, message }) => {
                assert_eq!(field, "file");
                assert_eq!(message.lines().count(), 2, "{message}");
                assert!(
                    message.starts_with(&format!(
                        "{path}: document 2 (apps/v1 Deployment web): spec.replica: unknown field"
                    )),
                    "{message}"
                );
            }
            other => panic!("want an invalid file, got {other:?}"),
        }
        let missing = Spec {
            file: Some("manifests/nope.yaml".into()),
            manifest: None,
            ..inline()
        };
        match Manifest::prepare(missing) {
            Err(ProviderError::Invalid { field, message }) => {
                assert_eq!(field, "file");
                assert_eq!(
                    message,
                    "manifests/nope.yaml: no such file (a relative path is relative to the stack's directory)"
                );
            }
            other => panic!("want a missing file, got {other:?}"),
        }
        Ok(())
    }

    #[test]
    fn prepare_skips_a_file_not_known_until_apply() -> Result<(), ProviderError> {
        let spec = Spec {
            cluster: json!(crate::protocol::UNKNOWN),
            file: Some(crate::protocol::UNKNOWN.into()),
            manifest: None,
            ..inline()
        };
        let prepared = Manifest::prepare(spec)?;
        assert!(prepared.objects.is_empty());
        Ok(())
    }

    #[test]
    fn prepare_reads_the_file_and_a_changed_file_changes_the_spec() -> Result<(), ProviderError> {
        let dir = tempfile::tempdir().map_err(|e| ProviderError::io("tempdir", "", e))?;
        let path = dir.path().join("objects.yaml");
        std::fs::write(&path, YAML).map_err(|e| ProviderError::io("write", "objects.yaml", e))?;
        let spec = Spec {
            file: Some(path.to_string_lossy().into_owned()),
            manifest: None,
            ..inline()
        };
        let first = Manifest::prepare(spec.clone())?;
        assert_eq!(first.objects.len(), 3);
        std::fs::write(&path, YAML.replace("epochs: \"3\"", "epochs: \"4\""))
            .map_err(|e| ProviderError::io("write", "objects.yaml", e))?;
        let second = Manifest::prepare(spec.clone())?;
        assert_ne!(first, second, "an edited file is a changed spec");
        assert_eq!(
            Manifest::prepare(second.clone())?,
            second,
            "preparing again changes nothing"
        );
        Ok(())
    }

    #[test]
    fn inline_objects_get_the_same_checks_at_manifest() {
        let problems = inline_problems(
            json!([
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "dta": {}},
                {"apiVersion": "apps/v9", "kind": "Deployment", "metadata": {"name": "web"}},
                {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "r", "namespace": "ml"}},
                {"kind": "ConfigMap"},
            ]),
            existing_cluster(),
            &[],
        );
        let shown: Vec<String> = problems.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                "manifest: entry 1 (v1 ConfigMap c): dta: unknown field (did you mean `data`?)",
                "manifest: entry 2 (apps/v9 Deployment web): no Kubernetes version serves apps/v9 Deployment; apps serves Deployment as v1 (use apps/v1)",
                "manifest: entry 3 (rbac.authorization.k8s.io/v1 ClusterRole r): metadata.namespace: a ClusterRole is cluster-scoped; remove metadata.namespace",
                "manifest: entry 4: no apiVersion",
                "manifest: entry 4: no metadata.name",
            ]
        );
        let empty = inline_problems(json!([]), existing_cluster(), &[]);
        assert_eq!(empty, vec![Invalid::at("manifest", "holds no objects")]);
    }

    #[test]
    fn values_known_after_apply_exempt_only_themselves() {
        // Rule "unknown is partial": one reference inside an inline manifest must not
        // hide the mistakes of its other objects.
        let marker = crate::protocol::UNKNOWN;
        let problems = inline_problems(
            json!([
                {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": marker},
                 "spec": {"replicas": marker, "selector": {}, "template": {}}},
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "dta": {"bucket": marker}},
                {"apiVersion": marker, "kind": "Anything", "metadata": {"name": "x"}},
            ]),
            existing_cluster(),
            &[],
        );
        let shown: Vec<String> = problems.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            ["manifest: entry 2 (v1 ConfigMap c): dta: unknown field (did you mean `data`?)"]
        );
    }

    const WIDGET: &str =
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\nspec: {size: 3}\n";

    #[test]
    fn custom_kinds_on_a_cluster_the_stack_creates_need_a_crd_in_the_stack() {
        let (cluster, peers) = new_gke_cluster();
        assert_one(
            &file_problems(WIDGET, "m.yaml", &cluster, &peers),
            "m.yaml: document 1 (example.com/v1 Widget w): no CRD defines example.com/v1 Widget: the cluster is new (gke_cluster.main creates it)",
        );
        // As a resource's check: at `file`, from validate_peers.
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("w.yaml");
        std::fs::write(&path, WIDGET).expect("write");
        let spec =
            json!({"cluster": cluster, "file": path.to_string_lossy(), "namespace": "default"});
        let problems = Manifest::validate_peers(&spec, &peers);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(problems[0].path, ["file"]);
        // The CRD in the same manifest, or in a manifest it references, defines it.
        assert_eq!(
            file_problems(&format!("{CRD}---\n{WIDGET}"), "m.yaml", &cluster, &peers),
            Vec::<String>::new()
        );
        assert_eq!(
            file_problems(&format!("{WIDGET}---\n{CRD}"), "m.yaml", &cluster, &peers),
            Vec::<String>::new(),
            "CRDs are applied first wherever they stand"
        );
        let crds = read_entries(CRD, "crds.yaml").expect("CRD parses");
        let mut with_crds = peers.clone();
        with_crds.push(peer(
            "kubernetes_manifest",
            "kubernetes_manifest.crds",
            json!({"cluster": crate::protocol::UNKNOWN, "objects": [crds[0].object.clone()]}),
        ));
        assert_eq!(
            file_problems(WIDGET, "m.yaml", &cluster, &with_crds),
            Vec::<String>::new()
        );
        // The same for inline objects, on EKS.
        let eks = vec![peer("eks_cluster", "eks_cluster.ml", json!({}))];
        let widget =
            json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}});
        let problems = inline_problems(widget, json!(crate::protocol::UNKNOWN), &eks);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].message.contains("eks_cluster.ml creates it"),
            "{problems:?}"
        );
    }

    #[test]
    fn ack_sagemaker_kinds_need_no_crd_in_the_stack() {
        let eks = vec![peer("eks_cluster", "eks_cluster.ml", json!({}))];
        for kind in ["Pipeline", "PipelineExecution"] {
            let object = json!({"apiVersion": "sagemaker.services.k8s.aws/v1alpha1", "kind": kind, "metadata": {"name": "p"}});
            assert_eq!(
                inline_problems(object, json!(crate::protocol::UNKNOWN), &eks),
                Vec::<Invalid>::new()
            );
        }
        let unknown = json!({"apiVersion": "sagemaker.services.k8s.aws/v1alpha1", "kind": "TrainingJob", "metadata": {"name": "t"}});
        assert_eq!(
            inline_problems(unknown, json!(crate::protocol::UNKNOWN), &eks).len(),
            1
        );
    }

    #[test]
    fn custom_kinds_on_an_existing_cluster_wait_for_the_live_check() {
        let peers = vec![peer("gke_cluster", "gke_cluster.other", json!({}))];
        assert_eq!(
            file_problems(WIDGET, "m.yaml", &existing_cluster(), &[]),
            Vec::<String>::new()
        );
        assert_eq!(
            file_problems(WIDGET, "m.yaml", &existing_cluster(), &peers),
            Vec::<String>::new(),
            "a kubeconfig names a cluster that exists, whatever else the stack creates"
        );
        // Built-in groups are known on any cluster.
        assert_one(
            &file_problems(
                "apiVersion: apps/v9\nkind: Deployment\nmetadata: {name: web}\n",
                "m.yaml",
                &existing_cluster(),
                &[],
            ),
            "apps serves Deployment as v1",
        );
    }

    #[test]
    fn custom_resources_are_checked_against_their_crd() {
        let (cluster, peers) = new_gke_cluster();
        let cases = [
            ("apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\nspec: {sise: 3}\n", "spec.sise: unknown field (did you mean `size`?)"),
            ("apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\nspec: {size: three}\n", "spec.size: expected integer, got string \"three\""),
            ("apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\nspec: {color: 3}\n", "spec.color: expected string, got number 3"),
            ("apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\nsepc: {}\n", "sepc: unknown field (did you mean `spec`?)"),
            ("apiVersion: example.com/v2\nkind: Widget\nmetadata: {name: w}\n", "the CRD widgets.example.com (this manifest) does not define version v2; it serves example.com/v1"),
            ("apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: W}\n", "metadata.name: \"W\" is not a valid DNS-1123 subdomain"),
        ];
        for (widget, want) in cases {
            let text = format!("{CRD}---\n{widget}");
            assert_one(&file_problems(&text, "m.yaml", &cluster, &peers), want);
            assert_one(
                &file_problems(&text, "m.yaml", &existing_cluster(), &[]),
                want,
            );
        }
        let free = format!("{CRD}---\napiVersion: example.com/v1\nkind: Widget\nmetadata: {{name: w}}\nspec: {{extra: {{any: [1, 2]}}, port: http}}\n");
        assert_eq!(
            file_problems(&free, "m.yaml", &cluster, &peers),
            Vec::<String>::new()
        );
        let cluster_scoped = CRD.replace("scope: Namespaced", "scope: Cluster");
        let text = format!("{cluster_scoped}---\napiVersion: example.com/v1\nkind: Widget\nmetadata: {{name: w, namespace: ml}}\n");
        assert_one(
            &file_problems(&text, "m.yaml", &cluster, &peers),
            "a Widget is cluster-scoped",
        );
    }

    #[test]
    fn the_ack_sagemaker_crds_pass_every_check() {
        let (cluster, peers) = new_gke_cluster();
        for file in [
            "sagemaker.services.k8s.aws_pipelines.yaml",
            "sagemaker.services.k8s.aws_pipelineexecutions.yaml",
        ] {
            let text = terrain_contracts::text(&format!("ack-sagemaker/{file}"));
            assert_eq!(
                file_problems(&text, file, &cluster, &peers),
                Vec::<String>::new()
            );
        }
    }

    #[test]
    fn renders_with_namespaces_and_labels() {
        let spec = Manifest::prepare(inline()).expect("inline parses");
        let rendered = objects(&spec).expect("renders");
        assert_eq!(
            rendered,
            vec![
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                       "metadata": {"name": "runner", "labels": {"app.kubernetes.io/managed-by": "terrain"}},
                       "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"}, "subjects": []}),
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": "settings", "namespace": "batch", "labels": {"app.kubernetes.io/managed-by": "terrain"}},
                       "data": {"a": "1"}}),
            ]
        );
        let applied = marked(rendered, "kubernetes_manifest.rbac");
        assert_eq!(
            applied[1]["metadata"]["annotations"],
            json!({"terrain.dev/address": "kubernetes_manifest.rbac"})
        );
        // A custom resource whose CRD is cluster-scoped gets no namespace.
        let crd = read_entries(
            &CRD.replace("scope: Namespaced", "scope: Cluster"),
            "c.yaml",
        )
        .expect("parses");
        let spec = Spec {
            manifest: Some(
                json!([crd[0].object, {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}]),
            ),
            ..inline()
        };
        let rendered = objects(&Manifest::prepare(spec).expect("prepares")).expect("renders");
        assert!(
            rendered[1]["metadata"].get("namespace").is_none(),
            "{:?}",
            rendered[1]
        );
    }

    #[test]
    fn foundations_go_first() {
        let objects: Vec<Value> = read_entries(YAML, "f")
            .expect("parses")
            .into_iter()
            .map(|e| e.object)
            .collect();
        let (first, rest): (Vec<Value>, Vec<Value>) = objects.into_iter().partition(foundation);
        assert_eq!(first.len(), 1);
        assert_eq!(first[0]["kind"], "Namespace");
        assert_eq!(rest.len(), 2);
    }

    #[test]
    fn spec_objects_match_their_live_ids() {
        let config_map =
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"}});
        assert!(same_object(
            &config_map,
            &ObjectRef::new("v1", "ConfigMap", Some("batch"), "settings"),
            "batch"
        ));
        assert!(!same_object(
            &config_map,
            &ObjectRef::new("v1", "ConfigMap", Some("other"), "settings"),
            "batch"
        ));
        let widget =
            json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}});
        assert!(
            same_object(
                &widget,
                &ObjectRef::new("example.com/v1", "Widget", None, "w"),
                "batch"
            ),
            "cluster-scoped CRs have no namespace in the id"
        );
    }

    #[test]
    fn validation_table() {
        let cases: Vec<(Spec, &str, &str)> = vec![
            (inline(), "", ""),
            (
                Spec {
                    file: Some("x.yaml".into()),
                    ..inline()
                },
                "",
                "not both",
            ),
            (
                Spec {
                    manifest: None,
                    ..inline()
                },
                "",
                "set `file`",
            ),
            (
                Spec {
                    file: Some(" ".into()),
                    manifest: None,
                    ..inline()
                },
                "file",
                "must name a file",
            ),
            (
                Spec {
                    objects: vec![json!({})],
                    ..inline()
                },
                "objects",
                "leave it out",
            ),
            (
                Spec {
                    namespace: "Batch".into(),
                    ..inline()
                },
                "namespace",
                "DNS-1123",
            ),
            (
                Spec {
                    cluster: json!(3),
                    ..inline()
                },
                "cluster",
                "expected a cluster reference",
            ),
        ];
        for (spec, path, message) in cases {
            let problems = Manifest::validate(&spec, &Value::Null);
            if message.is_empty() {
                assert!(problems.is_empty(), "{problems:?}");
            } else {
                assert!(
                    problems
                        .iter()
                        .any(|p| p.path.join(".") == path && p.message.contains(message)),
                    "want {path}: {message}, got {problems:?}"
                );
            }
        }
        let good = serde_json::to_value(inline()).expect("encodes");
        assert_eq!(Manifest::validate_peers(&good, &[]), Vec::<Invalid>::new());
    }
}
