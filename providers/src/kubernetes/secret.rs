//! The `kubernetes_secret` kind: one Secret, its values either the stack's (`data`,
//! sensitive: hidden in plans, recorded as sensitive in state) or drawn inside the
//! apply (`generate`): passwords and keys that only pods of the cluster need, such as a
//! database's root password and the credentials of an in-cluster object store. A
//! generated value never leaves the apply that drew it: state, plans and outputs hold
//! only its key and length, so reading it takes access to the cluster's Secrets.
//!
//! A generated value is drawn once, when its key is missing from the live Secret (at
//! create, or after someone deleted the key) or when its length changes; every other
//! apply keeps the live value, so a database initialised with it keeps working. A
//! value the stack writes is taken back when it is changed in the cluster.
//!
//! Id: `v1/Secret/<namespace>/<name>`.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine as _;
use rand::distr::{Alphanumeric, SampleString};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::{
    apply, check_cluster, check_dns_label, check_dns_subdomain, check_labels, connect,
    delete_owned, id_of, mark_ours, needs_cluster, not_ours, ownership, parse_id, user_entries,
    with_managed_label, ObjectRef, Ownership,
};
use crate::schema::Fields;
use crate::{Ctx, Invalid, Kind, Live, ProviderError};

/// The kind `kubernetes_secret`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Secret;

/// The shortest and longest generated value: 16 letters and digits carry 95 bits.
const MIN_LENGTH: i64 = 16;
const MAX_LENGTH: i64 = 128;
/// The longest key the API server takes (a DNS subdomain's length).
const MAX_KEY: usize = 253;
const ID_SHAPE: &str = "v1/Secret/NAMESPACE/NAME";
const DELETE_TIMEOUT: Duration = Duration::from_secs(60);

fn default_namespace() -> String {
    "default".into()
}

fn opaque() -> String {
    "Opaque".into()
}

/// What a stack writes for a `kubernetes_secret`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    #[terrain(doc = crate::kubernetes::CLUSTER_DOC, force_new)]
    pub cluster: Value,
    /// The Secret's name.
    #[terrain(force_new)]
    pub name: String,
    /// Its namespace, which must exist (or be made by the stack).
    #[serde(default = "default_namespace")]
    #[terrain(force_new)]
    pub namespace: String,
    /// The Secret's type (`Opaque`, `kubernetes.io/basic-auth`, …); Kubernetes does not
    /// change it in place.
    #[serde(rename = "type", default = "opaque")]
    #[terrain(force_new)]
    pub secret_type: String,
    /// Labels besides terrain's own.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Values the stack writes, by key.
    #[serde(default)]
    #[terrain(sensitive)]
    pub data: BTreeMap<String, String>,
    /// Keys whose values are drawn in the cluster, with their length (16 to 128 letters
    /// and digits): `generate = { password = 32 }`. Only the keys and lengths are kept.
    /// A key missing from the live Secret, or given a new length, is drawn again.
    #[serde(default)]
    pub generate: BTreeMap<String, i64>,
}

/// What a `kubernetes_secret` reports: nothing secret.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Outputs {
    /// The Secret's name, for `secretKeyRef`s.
    pub name: String,
    /// Its namespace.
    pub namespace: String,
    /// Every key it holds (from `data` and `generate`), sorted.
    pub keys: Vec<String>,
}

fn target(spec: &Spec) -> ObjectRef {
    ObjectRef::new("v1", "Secret", Some(&spec.namespace), &spec.name)
}

fn outputs_of(spec: &Spec) -> Outputs {
    let mut keys: Vec<String> = spec
        .data
        .keys()
        .chain(spec.generate.keys())
        .cloned()
        .collect();
    keys.sort();
    keys.dedup();
    Outputs {
        name: spec.name.clone(),
        namespace: spec.namespace.clone(),
        keys,
    }
}

/// A Secret key's rule: letters, digits, `-`, `_` and `.`, at most 253 characters.
fn check_key(key: &str) -> Result<(), String> {
    if key.is_empty()
        || key.len() > MAX_KEY
        || !key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err(format!(
            "{key:?} is not a Secret key: use letters, digits, '-', '_' and '.', at most {MAX_KEY} characters"
        ));
    }
    Ok(())
}

/// `n` letters and digits from the operating system's generator.
fn draw(n: i64) -> String {
    let n = usize::try_from(n.clamp(MIN_LENGTH, MAX_LENGTH)).unwrap_or(32);
    Alphanumeric.sample_string(&mut rand::rng(), n)
}

/// The values of the Secret to apply: the stack's, and for each generated key the live
/// value when it is kept (present, and its length not changed from `prior`), else a
/// new one.
fn values(
    spec: &Spec,
    live: Option<&BTreeMap<String, String>>,
    prior: Option<&Spec>,
) -> BTreeMap<String, String> {
    let mut out = spec.data.clone();
    for (key, &length) in &spec.generate {
        let same_length = prior.is_none_or(|p| p.generate.get(key) == Some(&length));
        let kept = live
            .and_then(|l| l.get(key))
            .filter(|_| same_length)
            .cloned();
        out.insert(key.clone(), kept.unwrap_or_else(|| draw(length)));
    }
    out
}

/// The Secret as applied: every value base64-encoded under `data` (server-side apply
/// tracks `data` keys; `stringData` is write-only and would leave them unowned).
fn object(spec: &Spec, values: &BTreeMap<String, String>, address: &str) -> Value {
    let engine = base64::engine::general_purpose::STANDARD;
    let data: Map<String, Value> = values
        .iter()
        .map(|(k, v)| (k.clone(), json!(engine.encode(v))))
        .collect();
    let mut object = json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": spec.name,
            "namespace": spec.namespace,
            "labels": with_managed_label(&spec.labels),
        },
        "type": spec.secret_type,
        "data": data,
    });
    mark_ours(&mut object, address);
    object
}

/// The live Secret's values, decoded (a value that is not UTF-8 is kept lossily: it
/// only ever compares unequal to the stack's).
fn live_values(live: &Value) -> BTreeMap<String, String> {
    let engine = base64::engine::general_purpose::STANDARD;
    live["data"]
        .as_object()
        .map(|data| {
            data.iter()
                .filter_map(|(k, v)| {
                    let bytes = engine.decode(v.as_str()?).ok()?;
                    Some((k.clone(), String::from_utf8_lossy(&bytes).into_owned()))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The spec as the live Secret shows it, from `prior`'s point of view: the stack's keys
/// with their live values, the generated keys that are still there, the labels the
/// stack set.
fn spec_of(live: &Value, prior: &Spec) -> Spec {
    let values = live_values(live);
    let labels = live["metadata"]["labels"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect::<BTreeMap<_, _>>()
        })
        .unwrap_or_default();
    Spec {
        cluster: prior.cluster.clone(),
        name: prior.name.clone(),
        namespace: prior.namespace.clone(),
        secret_type: live["type"].as_str().unwrap_or("Opaque").to_string(),
        labels: user_entries(&json!(labels), &prior.labels),
        data: prior
            .data
            .keys()
            .filter_map(|k| Some((k.clone(), values.get(k)?.clone())))
            .collect(),
        generate: prior
            .generate
            .iter()
            .filter(|(k, _)| values.contains_key(*k))
            .map(|(k, v)| (k.clone(), *v))
            .collect(),
    }
}

async fn apply_secret(
    ctx: &Ctx,
    spec: &Spec,
    prior: Option<&Spec>,
    create: bool,
) -> Result<Live<Secret>, ProviderError> {
    let client = connect::client(ctx, &spec.cluster).await?;
    let live = apply::get_ref(&client, &target(spec)).await?;
    if let Some(live) = live.as_ref().filter(|_| create) {
        let owner = ownership(live, &ctx.address);
        if owner != Ownership::Ours {
            let id = id_of(&[target(spec)]);
            return Err(not_ours(
                &target(spec),
                &owner,
                Secret::KIND,
                &ctx.address,
                &id,
            ));
        }
    }
    let live_values = live.as_ref().map(live_values);
    // An earlier, interrupted create of this address keeps the values it drew.
    let values = values(spec, live_values.as_ref(), prior);
    apply::apply(&client, &object(spec, &values, &ctx.address), true).await?;
    Ok(Live {
        id: id_of(&[target(spec)]),
        outputs: outputs_of(spec),
        spec: spec.clone(),
    })
}

#[async_trait]
impl Kind for Secret {
    type Spec = Spec;
    type Outputs = Outputs;
    const KIND: &'static str = "kubernetes_secret";
    const PROVIDER: &'static str = "kubernetes";

    fn validate(spec: &Spec, _config: &Value) -> Vec<Invalid> {
        let mut out = Vec::new();
        check_cluster(&spec.cluster, &mut out);
        if let Err(m) = check_dns_subdomain(&spec.name) {
            out.push(Invalid::at("name", m));
        }
        if let Err(m) = check_dns_label(&spec.namespace) {
            out.push(Invalid::at("namespace", m));
        }
        if spec.secret_type.trim().is_empty() {
            out.push(Invalid::at(
                "type",
                "must not be empty; Opaque is the default",
            ));
        }
        if let Err(m) = check_labels(&spec.labels) {
            out.push(Invalid::at("labels", m));
        }
        // Keys only: a value is a secret, and a message about it must not show it.
        for key in spec.data.keys() {
            if let Err(m) = check_key(key) {
                out.push(Invalid::at(&format!("data.{key}"), m));
            }
        }
        for (key, &length) in &spec.generate {
            if let Err(m) = check_key(key) {
                out.push(Invalid::at(&format!("generate.{key}"), m));
            }
            if spec.data.contains_key(key) {
                out.push(Invalid::at(
                    &format!("generate.{key}"),
                    format!("{key:?} is also in `data`: a key is either written or generated"),
                ));
            }
            if !(MIN_LENGTH..=MAX_LENGTH).contains(&length) {
                out.push(Invalid::at(
                    &format!("generate.{key}"),
                    format!("a generated value is {MIN_LENGTH} to {MAX_LENGTH} characters long, got {length}"),
                ));
            }
        }
        if spec.data.is_empty() && spec.generate.is_empty() {
            out.push(Invalid::at(
                "data",
                "a Secret needs at least one key, in `data` or `generate`",
            ));
        }
        out
    }

    fn planned_id(spec: &Spec, _config: &Value) -> Option<String> {
        Some(id_of(&[target(spec)]))
    }

    async fn read(
        &self,
        ctx: &Ctx,
        id: &str,
        prior: Option<&Spec>,
    ) -> Result<Option<Live<Self>>, ProviderError> {
        let refs = parse_id(Self::KIND, id, ID_SHAPE)?;
        let [secret] = refs.as_slice() else {
            return Err(ProviderError::Unsupported(format!(
                "{}: {id:?} names {} objects; expected {ID_SHAPE}",
                Self::KIND,
                refs.len()
            )));
        };
        let prior = prior.ok_or_else(|| needs_cluster(Self::KIND))?;
        let client = connect::client(ctx, &prior.cluster).await?;
        let Some(live) = apply::get_ref(&client, secret).await? else {
            return Ok(None);
        };
        if matches!(ownership(&live, &ctx.address), Ownership::Other(_)) {
            return Ok(None);
        }
        let spec = spec_of(&live, prior);
        Ok(Some(Live {
            id: id.to_string(),
            outputs: outputs_of(&spec),
            spec,
        }))
    }

    async fn create(&self, ctx: &Ctx, spec: &Spec) -> Result<Live<Self>, ProviderError> {
        apply_secret(ctx, spec, None, true).await
    }

    async fn update(
        &self,
        ctx: &Ctx,
        _id: &str,
        prior: &Spec,
        spec: &Spec,
    ) -> Result<Live<Self>, ProviderError> {
        apply_secret(ctx, spec, Some(prior), false).await
    }

    async fn delete(&self, ctx: &Ctx, id: &str, prior: Option<&Spec>) -> Result<(), ProviderError> {
        let refs = parse_id(Self::KIND, id, ID_SHAPE)?;
        let prior = prior.ok_or_else(|| needs_cluster(Self::KIND))?;
        delete_owned(&prior.cluster, &refs, false, ctx, DELETE_TIMEOUT).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubernetes::connect::tests::gke_reference;
    use crate::testing::schema_mismatches;

    fn base() -> Spec {
        Spec {
            cluster: gke_reference(),
            name: "mysql-secret".into(),
            namespace: "kubeflow".into(),
            secret_type: "Opaque".into(),
            labels: BTreeMap::new(),
            data: BTreeMap::from([("username".to_string(), "root".to_string())]),
            generate: BTreeMap::from([("password".to_string(), 32)]),
        }
    }

    fn messages(spec: &Spec) -> Vec<String> {
        Secret::validate(spec, &json!({}))
            .into_iter()
            .map(|p| format!("{}: {}", p.path.join("."), p.message))
            .collect()
    }

    #[test]
    fn schema_agrees_with_serde() {
        let spec = Spec {
            labels: BTreeMap::from([("app".to_string(), "mysql".to_string())]),
            ..base()
        };
        assert_eq!(
            schema_mismatches::<Secret>(&spec, &outputs_of(&spec)),
            Vec::<String>::new()
        );
    }

    #[test]
    fn data_is_sensitive_and_generated_values_are_not_in_the_spec() {
        let schema = Secret::schema();
        assert!(schema.field("data").is_some_and(|f| f.sensitive));
        assert!(schema.field("generate").is_some_and(|f| !f.sensitive));
        let spec = base();
        let values = values(&spec, None, None);
        let password = &values["password"];
        assert_eq!(password.len(), 32);
        assert!(password.chars().all(|c| c.is_ascii_alphanumeric()));
        let recorded = serde_json::to_string(&(&spec, outputs_of(&spec))).unwrap();
        assert!(!recorded.contains(password.as_str()), "{recorded}");
    }

    #[test]
    fn a_generated_value_is_kept_unless_missing_or_its_length_changes() {
        let spec = base();
        let live = BTreeMap::from([
            ("username".to_string(), "root".to_string()),
            ("password".to_string(), "k".repeat(32)),
        ]);
        assert_eq!(
            values(&spec, Some(&live), Some(&spec))["password"],
            "k".repeat(32)
        );
        // An interrupted create's values are adopted too.
        assert_eq!(values(&spec, Some(&live), None)["password"], "k".repeat(32));
        let longer = Spec {
            generate: BTreeMap::from([("password".to_string(), 40)]),
            ..base()
        };
        let redrawn = values(&longer, Some(&live), Some(&spec));
        assert_eq!(redrawn["password"].len(), 40);
        let gone = BTreeMap::from([("username".to_string(), "root".to_string())]);
        let drawn = values(&spec, Some(&gone), Some(&spec));
        assert_eq!(drawn["password"].len(), 32);
        // Two draws differ.
        assert_ne!(drawn["password"], values(&spec, None, None)["password"]);
    }

    #[test]
    fn reading_shows_the_stack_keys_and_drops_a_deleted_generated_key() {
        let engine = base64::engine::general_purpose::STANDARD;
        let live = json!({
            "type": "Opaque",
            "metadata": {"labels": {"app.kubernetes.io/managed-by": "terrain"}},
            "data": {"username": engine.encode("admin"), "extra": engine.encode("x")},
        });
        let read = spec_of(&live, &base());
        assert_eq!(read.data["username"], "admin");
        assert!(!read.data.contains_key("extra"));
        assert!(read.generate.is_empty(), "{read:?}");
        assert!(read.labels.is_empty(), "{read:?}");
    }

    #[test]
    fn the_applied_object_holds_every_value_base64_under_data() {
        let spec = base();
        let values = BTreeMap::from([
            ("username".to_string(), "root".to_string()),
            ("password".to_string(), "p".repeat(16)),
        ]);
        let o = object(&spec, &values, "kubernetes_secret.mysql");
        assert_eq!(o["data"]["username"], "cm9vdA==");
        assert_eq!(
            o["metadata"]["labels"]["app.kubernetes.io/managed-by"],
            "terrain"
        );
        assert_eq!(
            o["metadata"]["annotations"]["terrain.dev/address"],
            "kubernetes_secret.mysql"
        );
        assert!(o.get("stringData").is_none());
    }

    #[test]
    fn bad_keys_lengths_and_overlaps_are_refused_without_values() {
        let mut spec = base();
        spec.data.insert("bad key".into(), "hunter2".into());
        spec.data.insert("password".into(), "hunter2".into());
        spec.generate.insert("short".into(), 8);
        let found = messages(&spec);
        assert!(
            found.iter().any(|m| m.starts_with("data.bad key: ")),
            "{found:?}"
        );
        assert!(
            found
                .iter()
                .any(|m| m.starts_with("generate.password: ") && m.contains("also in `data`")),
            "{found:?}"
        );
        assert!(
            found
                .iter()
                .any(|m| m.starts_with("generate.short: ") && m.contains("got 8")),
            "{found:?}"
        );
        assert!(found.iter().all(|m| !m.contains("hunter2")), "{found:?}");
        let empty = Spec {
            data: BTreeMap::new(),
            generate: BTreeMap::new(),
            ..base()
        };
        assert_eq!(messages(&empty).len(), 1, "{:?}", messages(&empty));
        assert!(messages(&base()).is_empty(), "{:?}", messages(&base()));
    }
}
