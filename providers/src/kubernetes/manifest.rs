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
//! Id: the applied objects in apply order, comma-separated, each
//! `<apiVersion>/<kind>/<namespace>/<name>` (empty namespace when cluster-scoped).

use std::collections::BTreeSet;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::{
    apply, check_cluster, check_dns_label, cluster_field, connect, delete_owned, id_of, marked,
    needs_cluster, ownership, parse_id, refs_of, refuse_strangers, set_path, ObjectRef, Ownership,
    MANAGED_BY,
};
use crate::{Ctx, Field, Health, Invalid, Kind, Live, ProviderError, Schema, Type};

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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    pub cluster: Value,
    /// A YAML or JSON file of objects, relative to the current directory.
    pub file: Option<String>,
    /// Objects written inline: one object or a list.
    pub manifest: Option<Value>,
    /// The namespace of namespaced objects that name none.
    #[serde(default = "default_namespace")]
    pub namespace: String,
    #[serde(default)]
    pub force_conflicts: bool,
    #[serde(default = "yes")]
    pub wait: bool,
    /// Computed by `prepare` from `file` or `manifest`: the objects, one per entry.
    #[serde(default)]
    pub objects: Vec<Value>,
}

/// What `kubernetes_manifest` reports after apply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Outputs {
    /// The applied objects, `<apiVersion>/<kind>/<namespace>/<name>`, in apply order.
    pub object_ids: Vec<String>,
    pub count: i64,
}

const ID_SHAPE: &str =
    "APIVERSION/KIND/NAMESPACE/NAME[,…] (NAMESPACE empty for cluster-scoped objects)";
const WAIT_TIMEOUT: Duration = Duration::from_secs(10 * 60);
const DELETE_TIMEOUT: Duration = Duration::from_secs(10 * 60);

/// Built-in kinds that live outside namespaces; other kinds (CRDs' included) are
/// resolved through discovery at apply time.
const CLUSTER_SCOPED: &[&str] = &[
    "Namespace",
    "Node",
    "PersistentVolume",
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "StorageClass",
    "PriorityClass",
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "APIService",
    "CSIDriver",
    "CSINode",
    "IngressClass",
    "RuntimeClass",
    "VolumeAttachment",
    "CertificateSigningRequest",
    "FlowSchema",
    "PriorityLevelConfiguration",
    "ComponentStatus",
];

/// The objects of a document: itself, or the items of a `List`.
fn flatten(document: Value, out: &mut Vec<Value>) {
    let is_list = document["kind"]
        .as_str()
        .is_some_and(|k| k.ends_with("List"))
        && document["items"].is_array();
    match document {
        Value::Array(items) => items.into_iter().for_each(|i| flatten(i, out)),
        Value::Null => {}
        Value::Object(mut map) if is_list => {
            if let Some(Value::Array(items)) = map.remove("items") {
                items.into_iter().for_each(|i| flatten(i, out));
            }
        }
        other => out.push(other),
    }
}

/// Checks that each entry is a named object.
fn check_objects(objects: &[Value], source: &str) -> Result<(), String> {
    let mut seen = BTreeSet::new();
    for (i, object) in objects.iter().enumerate() {
        if !object.is_object() {
            return Err(format!(
                "{source}: entry {}: expected an object, got {object}",
                i + 1
            ));
        }
        let target =
            ObjectRef::of(object).map_err(|m| format!("{source}: entry {}: {m}", i + 1))?;
        if !seen.insert(target.clone()) {
            return Err(format!("{source}: {} appears twice", target.describe()));
        }
    }
    if objects.is_empty() {
        return Err(format!("{source} holds no objects"));
    }
    Ok(())
}

/// The objects of a YAML (or JSON) text with one or more documents.
pub fn parse_documents(text: &str, source: &str) -> Result<Vec<Value>, String> {
    let mut out = Vec::new();
    for (i, document) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
        let value = Value::deserialize(document)
            .map_err(|e| format!("{source}: document {}: {e}", i + 1))?;
        flatten(value, &mut out);
    }
    check_objects(&out, source)?;
    Ok(out)
}

/// The objects a spec describes, from its file or its inline manifest.
fn parse(spec: &Spec) -> Result<Vec<Value>, ProviderError> {
    match (&spec.file, &spec.manifest) {
        (Some(path), None) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| ProviderError::io("read manifest file", path.clone(), e))?;
            parse_documents(&text, &format!("file {path}")).map_err(ProviderError::Unsupported)
        }
        (None, Some(inline)) => {
            let mut out = Vec::new();
            flatten(inline.clone(), &mut out);
            check_objects(&out, "manifest").map_err(ProviderError::Unsupported)?;
            Ok(out)
        }
        _ => Err(ProviderError::Unsupported(format!(
            "{}: set either `file` or `manifest`",
            Manifest::KIND
        ))),
    }
}

/// The objects to apply: parsed (when `prepare` has not run), with the default
/// namespace on namespaced objects that name none (by the built-in table; discovery
/// corrects it at apply time) and terrain's label.
fn objects(spec: &Spec) -> Result<Vec<Value>, ProviderError> {
    let parsed = if spec.objects.is_empty() {
        parse(spec)?
    } else {
        spec.objects.clone()
    };
    Ok(parsed
        .into_iter()
        .map(|object| {
            // Objects saved with `kubectl get -o yaml` carry server bookkeeping that an
            // apply must not send back.
            let mut object = apply::strip_noise(&object);
            let kind = object["kind"].as_str().unwrap_or_default();
            if !CLUSTER_SCOPED.contains(&kind)
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
    client: &kube::Client,
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
    client: &kube::Client,
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
    let client = connect::client(&spec.cluster).await?;
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

#[async_trait]
impl Kind for Manifest {
    type Spec = Spec;
    type Outputs = Outputs;
    const KIND: &'static str = "kubernetes_manifest";
    const PROVIDER: &'static str = "kubernetes";
    const RENDERS: bool = true;

    fn schema() -> Schema {
        Schema {
            fields: vec![
                cluster_field(),
                Field::new("file", Type::String, "A YAML or JSON file of objects (several documents allowed), relative to the current directory."),
                Field::new("manifest", Type::Any, "Objects written inline: one object, or a list of them."),
                Field::new("namespace", Type::String, "The namespace of namespaced objects that name none.").default(json!("default")),
                Field::new("force_conflicts", Type::Bool, "Take over fields another field manager owns.").default(json!(false)),
                Field::new("wait", Type::Bool, "Wait for CRDs, rollouts, Jobs and claims to be ready.").default(json!(true)),
                Field::new("objects", Type::List(Box::new(Type::Any)), "Computed from file or manifest at plan time; do not set it.").default(json!([])),
            ],
            outputs: vec![
                Field::new("object_ids", Type::List(Box::new(Type::String)), "The applied objects, APIVERSION/KIND/NAMESPACE/NAME, in apply order."),
                Field::new("count", Type::Int, "How many objects were applied."),
            ],
        }
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
            (None, Some(inline)) => {
                let mut objects = Vec::new();
                flatten(inline.clone(), &mut objects);
                if let Err(m) = check_objects(&objects, "manifest") {
                    out.push(Invalid::at(
                        "manifest",
                        m.trim_start_matches("manifest: ").to_string(),
                    ));
                }
            }
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

    fn prepare(mut spec: Spec) -> Result<Spec, ProviderError> {
        spec.objects = parse(&Spec {
            objects: Vec::new(),
            ..spec.clone()
        })?;
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
        let client = connect::client(&prior.cluster).await?;
        let mut present = Vec::new();
        for target in &refs {
            match apply::get_ref(&client, target).await? {
                Some(live) if !matches!(ownership(&live, &ctx.address), Ownership::Other(_)) => {
                    present.push(target.clone())
                }
                _ => {}
            }
        }
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
        let client = connect::client(&spec.cluster).await?;
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
        let client = connect::client(&prior.cluster).await?;
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

    fn inline() -> Spec {
        Spec {
            cluster: gke_reference(),
            file: None,
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
        let objects = parse_documents(YAML, "file x.yaml").expect("parses");
        let kinds: Vec<&str> = objects.iter().filter_map(|o| o["kind"].as_str()).collect();
        assert_eq!(kinds, ["Namespace", "ConfigMap", "Widget"]);
        assert_eq!(objects[1]["data"]["epochs"], "3");
        let json = parse_documents(
            r#"{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}"#,
            "file c.json",
        )
        .expect("JSON is YAML");
        assert_eq!(json.len(), 1);
    }

    #[test]
    fn bad_files_say_where() {
        let cases = [
            ("kind: ConfigMap\nmetadata: {name: c}\n", "file f: entry 1: the object has no apiVersion"),
            ("apiVersion: v1\nkind: ConfigMap\n", "file f: entry 1: the ConfigMap has no metadata.name"),
            ("a: [1\n", "file f: document 1:"),
            ("", "file f holds no objects"),
            ("- 3\n", "file f: entry 1: expected an object, got 3"),
            (
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n",
                "file f: ConfigMap c appears twice",
            ),
        ];
        for (text, want) in cases {
            let e = parse_documents(text, "file f").expect_err(text);
            assert!(e.starts_with(want), "{text:?}: {e}");
        }
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
        let missing = Spec {
            file: Some(dir.path().join("nope.yaml").to_string_lossy().into_owned()),
            ..spec
        };
        let e = Manifest::prepare(missing).expect_err("no file");
        assert!(e.to_string().contains("read manifest file"), "{e}");
        Ok(())
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
    }

    #[test]
    fn foundations_go_first() {
        let objects = parse_documents(YAML, "f").expect("parses");
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
                    manifest: Some(json!({"kind": "ConfigMap"})),
                    ..inline()
                },
                "manifest",
                "entry 1: the object has no apiVersion",
            ),
            (
                Spec {
                    manifest: Some(json!([])),
                    ..inline()
                },
                "manifest",
                "holds no objects",
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
    }
}
