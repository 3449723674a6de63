//! The `kubernetes_nfs_volume` kind: an NFS share (a Filestore instance's) made
//! mountable by pods, as a PersistentVolume pre-bound to a PersistentVolumeClaim.
//!
//! Id: `v1/PersistentVolume//<name>,v1/PersistentVolumeClaim/<namespace>/<claim>`.
//! Every field forces replacement: a claim's request cannot shrink and a volume's
//! source cannot change.

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::{
    apply, check_cluster, check_dns_label, check_dns_subdomain, check_quantity, connect,
    delete_owned, id_of, live_pair, marked, needs_cluster, parse_id, preview_marked,
    refuse_strangers, same_spelling, with_managed_label, ObjectRef,
};
use crate::schema::Fields;
use crate::{Ctx, Health, Invalid, Kind, Live, ProviderError};

/// The kind `kubernetes_nfs_volume`.
#[derive(Debug, Clone, Copy, Default)]
pub struct NfsVolume;

fn default_namespace() -> String {
    "default".into()
}

fn default_capacity() -> String {
    "1Ti".into()
}

fn read_write_many() -> Vec<String> {
    vec!["ReadWriteMany".into()]
}

fn retain() -> String {
    "Retain".into()
}

/// What a stack writes for a `kubernetes_nfs_volume`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    #[terrain(doc = crate::kubernetes::CLUSTER_DOC, force_new)]
    pub cluster: Value,
    /// The PersistentVolume's name (e.g. fileserver).
    #[terrain(force_new)]
    pub name: String,
    /// The PersistentVolumeClaim's name; <name>-claim when left out.
    #[terrain(force_new)]
    pub claim_name: Option<String>,
    /// The claim's namespace.
    #[serde(default = "default_namespace")]
    #[terrain(force_new)]
    pub namespace: String,
    /// The NFS server's IP address or host (a Filestore instance's ip_address).
    #[terrain(force_new)]
    pub server: String,
    /// The exported path (e.g. /NFSVol, a Filestore instance's share_path).
    #[terrain(force_new)]
    pub path: String,
    /// The volume's size, a quantity such as 1Ti.
    #[serde(default = "default_capacity")]
    #[terrain(force_new)]
    pub capacity: String,
    /// ReadWriteMany, ReadWriteOnce, ReadOnlyMany or ReadWriteOncePod.
    #[serde(default = "read_write_many")]
    #[terrain(force_new)]
    pub access_modes: Vec<String>,
    /// The storage class; "" so that no dynamic provisioner takes the claim.
    #[serde(default)]
    #[terrain(force_new)]
    pub storage_class: String,
    /// NFS mount options (e.g. nfsvers=4.1).
    #[serde(default)]
    #[terrain(force_new)]
    pub mount_options: Vec<String>,
    /// What happens to the volume when its claim goes: Retain, Delete or Recycle.
    #[serde(default = "retain")]
    #[terrain(force_new)]
    pub reclaim_policy: String,
}

impl Spec {
    /// The claim's name.
    pub fn claim(&self) -> String {
        self.claim_name
            .clone()
            .unwrap_or_else(|| format!("{}-claim", self.name))
    }

    fn refs(&self) -> Vec<ObjectRef> {
        vec![
            ObjectRef::new("v1", "PersistentVolume", None, &self.name),
            ObjectRef::new(
                "v1",
                "PersistentVolumeClaim",
                Some(&self.namespace),
                &self.claim(),
            ),
        ]
    }
}

/// What `kubernetes_nfs_volume` reports after apply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Outputs {
    /// The claim pods mount.
    pub claim_name: String,
    /// The PersistentVolume's name.
    pub volume_name: String,
    /// The claim's namespace.
    pub namespace: String,
    /// The claim's phase: Bound once usable.
    pub phase: String,
}

const ACCESS_MODES: &[&str] = &[
    "ReadWriteOnce",
    "ReadOnlyMany",
    "ReadWriteMany",
    "ReadWriteOncePod",
];
const RECLAIM_POLICIES: &[&str] = &["Retain", "Delete", "Recycle"];
const ID_SHAPE: &str = "v1/PersistentVolume//NAME,v1/PersistentVolumeClaim/NAMESPACE/CLAIM";
const BIND_TIMEOUT: Duration = Duration::from_secs(5 * 60);
const DELETE_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// The PersistentVolume and its claim, as applied (without the address annotation).
pub fn objects(spec: &Spec) -> Vec<Value> {
    let labels = Value::Object(with_managed_label(&Default::default()));
    let claim = spec.claim();
    let mut volume = json!({
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": spec.name, "labels": labels},
        "spec": {
            "capacity": {"storage": spec.capacity},
            "accessModes": spec.access_modes,
            "persistentVolumeReclaimPolicy": spec.reclaim_policy,
            "storageClassName": spec.storage_class,
            "nfs": {"server": spec.server, "path": spec.path},
            // Pre-bound, so no other claim can take the share.
            "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": spec.namespace, "name": claim},
        },
    });
    if !spec.mount_options.is_empty() {
        volume["spec"]["mountOptions"] = json!(spec.mount_options);
    }
    let claim = json!({
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": claim, "namespace": spec.namespace, "labels": labels},
        "spec": {
            "accessModes": spec.access_modes,
            // "" keeps dynamic provisioners away: the claim binds to this volume only.
            "storageClassName": spec.storage_class,
            "volumeName": spec.name,
            "resources": {"requests": {"storage": spec.capacity}},
        },
    });
    vec![volume, claim]
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// The spec the live volume and claim show.
fn spec_of(volume: &Value, claim: &Value, prior: &Spec) -> Spec {
    let v = &volume["spec"];
    let name = volume["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let claim_name = claim["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    Spec {
        cluster: prior.cluster.clone(),
        // A stack that leaves the claim's name to the default keeps it that way.
        claim_name: if prior.claim_name.is_none() && claim_name == format!("{name}-claim") {
            None
        } else {
            Some(claim_name)
        },
        name,
        namespace: claim["metadata"]["namespace"]
            .as_str()
            .unwrap_or("default")
            .to_string(),
        server: v["nfs"]["server"].as_str().unwrap_or_default().to_string(),
        path: v["nfs"]["path"].as_str().unwrap_or_default().to_string(),
        capacity: same_spelling(
            Some(&prior.capacity),
            v["capacity"]["storage"].as_str().unwrap_or_default(),
        ),
        access_modes: strings(&v["accessModes"]),
        storage_class: v["storageClassName"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        mount_options: strings(&v["mountOptions"]),
        reclaim_policy: v["persistentVolumeReclaimPolicy"]
            .as_str()
            .unwrap_or("Retain")
            .to_string(),
    }
}

fn outputs_of(spec: &Spec, claim: &Value) -> Outputs {
    Outputs {
        claim_name: spec.claim(),
        volume_name: spec.name.clone(),
        namespace: spec.namespace.clone(),
        phase: claim["status"]["phase"]
            .as_str()
            .unwrap_or("Pending")
            .to_string(),
    }
}

async fn apply_and_bind(
    ctx: &Ctx,
    spec: &Spec,
    create: bool,
) -> Result<Live<NfsVolume>, ProviderError> {
    let client = connect::client(ctx, &spec.cluster).await?;
    let objects = marked(objects(spec), &ctx.address);
    if create {
        refuse_strangers(&client, &objects, NfsVolume::KIND, &ctx.address).await?;
    }
    // Every field terrain sets is the stack's: take back any edited by hand.
    apply::apply_all(&client, &objects, true).await?;
    let claim = spec.claim();
    apply::wait_until(
        &client,
        "v1",
        "PersistentVolumeClaim",
        Some(&spec.namespace),
        &claim,
        ctx,
        BIND_TIMEOUT,
        &format!("claim {}/{claim} to bind", spec.namespace),
        |c| apply::readiness(c).unwrap_or(Ok(true)),
    )
    .await?;
    let refs = spec.refs();
    let (volume, claim) = live_pair(
        &client,
        &refs,
        &ctx.address,
        NfsVolume::KIND,
        "a volume and a claim",
    )
    .await?
    .ok_or_else(|| {
        ProviderError::api(
            "kubernetes get",
            404,
            "NotFound",
            format!(
                "the volume or claim of {} vanished right after it was applied",
                ctx.address
            ),
        )
    })?;
    Ok(Live {
        id: id_of(&refs),
        spec: spec_of(&volume, &claim, spec),
        outputs: outputs_of(spec, &claim),
    })
}

#[async_trait]
impl Kind for NfsVolume {
    type Spec = Spec;
    type Outputs = Outputs;
    const KIND: &'static str = "kubernetes_nfs_volume";
    const PROVIDER: &'static str = "kubernetes";
    const WRITES: crate::protocol::Writes = crate::protocol::Writes::AsManifest;
    const RENDERS: bool = true;

    fn validate(spec: &Spec, _config: &Value) -> Vec<Invalid> {
        let mut out = Vec::new();
        check_cluster(&spec.cluster, &mut out);
        if let Err(m) = check_dns_subdomain(&spec.name) {
            out.push(Invalid::at("name", m));
        }
        if let Some(claim) = &spec.claim_name {
            if let Err(m) = check_dns_subdomain(claim) {
                out.push(Invalid::at("claim_name", m));
            }
        }
        if let Err(m) = check_dns_label(&spec.namespace) {
            out.push(Invalid::at("namespace", m));
        }
        if spec.server.trim().is_empty() || spec.server.contains(['/', ' ']) {
            out.push(Invalid::at(
                "server",
                format!(
                    "{:?} is not an NFS server address; write its IP address or host name",
                    spec.server
                ),
            ));
        }
        if !spec.path.starts_with('/') {
            out.push(Invalid::at(
                "path",
                format!(
                    "{:?} is not an absolute export path; write e.g. \"/NFSVol\"",
                    spec.path
                ),
            ));
        }
        if let Err(m) = check_quantity(&spec.capacity) {
            out.push(Invalid::at("capacity", m));
        }
        if spec.access_modes.is_empty() {
            out.push(Invalid::at(
                "access_modes",
                "must name at least one access mode, e.g. [\"ReadWriteMany\"]",
            ));
        }
        for mode in spec
            .access_modes
            .iter()
            .filter(|m| !ACCESS_MODES.contains(&m.as_str()))
        {
            out.push(Invalid::at(
                "access_modes",
                format!(
                    "{mode:?} is not an access mode; use {}",
                    ACCESS_MODES.join(", ")
                ),
            ));
        }
        if !RECLAIM_POLICIES.contains(&spec.reclaim_policy.as_str()) {
            out.push(Invalid::at(
                "reclaim_policy",
                format!(
                    "{:?} is not a reclaim policy; use {}",
                    spec.reclaim_policy,
                    RECLAIM_POLICIES.join(", ")
                ),
            ));
        }
        if spec.mount_options.iter().any(|o| o.trim().is_empty()) {
            out.push(Invalid::at(
                "mount_options",
                "mount options must not be empty",
            ));
        }
        out
    }

    fn render(spec: &Spec, _config: &Value) -> Option<Result<Vec<Value>, ProviderError>> {
        Some(Ok(objects(spec)))
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
        let Some((volume, claim)) = live_pair(
            &client,
            &refs,
            &ctx.address,
            NfsVolume::KIND,
            "a volume and a claim",
        )
        .await?
        else {
            return Ok(None);
        };
        let spec = spec_of(&volume, &claim, prior);
        Ok(Some(Live {
            id: id.to_string(),
            outputs: outputs_of(&spec, &claim),
            spec,
        }))
    }

    async fn create(&self, ctx: &Ctx, spec: &Spec) -> Result<Live<Self>, ProviderError> {
        apply_and_bind(ctx, spec, true).await
    }

    async fn update(
        &self,
        ctx: &Ctx,
        _id: &str,
        _prior: &Spec,
        spec: &Spec,
    ) -> Result<Live<Self>, ProviderError> {
        apply_and_bind(ctx, spec, false).await
    }

    async fn delete(&self, ctx: &Ctx, id: &str, prior: Option<&Spec>) -> Result<(), ProviderError> {
        let refs = parse_id(Self::KIND, id, ID_SHAPE)?;
        let prior = prior.ok_or_else(|| needs_cluster(Self::KIND))?;
        // The claim first: the volume is released only once its claim is gone.
        delete_owned(&prior.cluster, &refs, true, ctx, DELETE_TIMEOUT).await
    }

    async fn preview(
        &self,
        ctx: &Ctx,
        _id: &str,
        prior: &Spec,
        spec: &Spec,
    ) -> Result<Option<String>, ProviderError> {
        preview_marked(&spec.cluster, objects(prior), objects(spec), ctx).await
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
        Ok(Some(
            match live_pair(
                &client,
                &refs,
                &ctx.address,
                NfsVolume::KIND,
                "a volume and a claim",
            )
            .await?
            {
                None => Health {
                    ready: false,
                    summary: "missing".into(),
                },
                Some((_, claim)) => {
                    let phase = claim["status"]["phase"]
                        .as_str()
                        .unwrap_or("Pending")
                        .to_string();
                    Health {
                        ready: phase == "Bound",
                        summary: phase,
                    }
                }
            },
        ))
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
            name: "fileserver".into(),
            claim_name: Some("fileserver-claim".into()),
            namespace: "default".into(),
            server: "10.0.0.2".into(),
            path: "/NFSVol".into(),
            capacity: "1Ti".into(),
            access_modes: vec!["ReadWriteMany".into()],
            storage_class: String::new(),
            mount_options: vec!["nfsvers=3".into()],
            reclaim_policy: "Retain".into(),
        }
    }

    #[test]
    fn schema_matches_spec_and_outputs() {
        let outputs = outputs_of(&base(), &json!({"status": {"phase": "Bound"}}));
        assert_eq!(
            schema_mismatches::<NfsVolume>(&base(), &outputs),
            Vec::<String>::new()
        );
    }

    #[test]
    fn renders_a_pre_bound_volume_and_claim() {
        let objects = objects(&base());
        let labels = json!({"app.kubernetes.io/managed-by": "terrain"});
        assert_eq!(
            objects,
            vec![
                json!({
                    "apiVersion": "v1", "kind": "PersistentVolume",
                    "metadata": {"name": "fileserver", "labels": labels},
                    "spec": {
                        "capacity": {"storage": "1Ti"},
                        "accessModes": ["ReadWriteMany"],
                        "persistentVolumeReclaimPolicy": "Retain",
                        "storageClassName": "",
                        "nfs": {"server": "10.0.0.2", "path": "/NFSVol"},
                        "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": "default", "name": "fileserver-claim"},
                        "mountOptions": ["nfsvers=3"],
                    },
                }),
                json!({
                    "apiVersion": "v1", "kind": "PersistentVolumeClaim",
                    "metadata": {"name": "fileserver-claim", "namespace": "default", "labels": labels},
                    "spec": {
                        "accessModes": ["ReadWriteMany"],
                        "storageClassName": "",
                        "volumeName": "fileserver",
                        "resources": {"requests": {"storage": "1Ti"}},
                    },
                }),
            ]
        );
        let unnamed = Spec {
            claim_name: None,
            mount_options: vec![],
            ..base()
        };
        let objects = super::objects(&unnamed);
        assert_eq!(objects[1]["metadata"]["name"], "fileserver-claim");
        assert!(objects[0]["spec"].get("mountOptions").is_none());
    }

    #[test]
    fn live_objects_read_back_as_the_spec() {
        let spec = Spec {
            capacity: "1024Gi".into(),
            claim_name: None,
            ..base()
        };
        let mut objects = marked(objects(&spec), "kubernetes_nfs_volume.fileserver");
        // What the API server does: canonical quantities, defaults, status.
        objects[0]["spec"]["capacity"]["storage"] = json!("1Ti");
        objects[0]["spec"]["volumeMode"] = json!("Filesystem");
        objects[1]["status"] = json!({"phase": "Bound"});
        assert_eq!(spec_of(&objects[0], &objects[1], &spec), spec);
        let named = base();
        assert_eq!(
            spec_of(&objects[0], &objects[1], &named)
                .claim_name
                .as_deref(),
            Some("fileserver-claim")
        );
        assert_eq!(
            outputs_of(&spec, &objects[1]),
            Outputs {
                claim_name: "fileserver-claim".into(),
                volume_name: "fileserver".into(),
                namespace: "default".into(),
                phase: "Bound".into()
            }
        );
    }

    #[test]
    fn ids_name_both_objects() {
        assert_eq!(
            id_of(&base().refs()),
            "v1/PersistentVolume//fileserver,v1/PersistentVolumeClaim/default/fileserver-claim"
        );
        assert_eq!(
            parse_id(NfsVolume::KIND, &id_of(&base().refs()), ID_SHAPE).expect("parses"),
            base().refs()
        );
    }

    #[test]
    fn validation_table() {
        let cases: Vec<(Spec, &str, &str)> = vec![
            (base(), "", ""),
            (
                Spec {
                    name: "File_Server".into(),
                    ..base()
                },
                "name",
                "DNS-1123",
            ),
            (
                Spec {
                    claim_name: Some("Claim".into()),
                    ..base()
                },
                "claim_name",
                "DNS-1123",
            ),
            (
                Spec {
                    namespace: "a.b".into(),
                    ..base()
                },
                "namespace",
                "DNS-1123 label",
            ),
            (
                Spec {
                    server: String::new(),
                    ..base()
                },
                "server",
                "not an NFS server address",
            ),
            (
                Spec {
                    path: "NFSVol".into(),
                    ..base()
                },
                "path",
                "absolute export path",
            ),
            (
                Spec {
                    capacity: "1TB".into(),
                    ..base()
                },
                "capacity",
                "is not a quantity",
            ),
            (
                Spec {
                    access_modes: vec!["RWX".into()],
                    ..base()
                },
                "access_modes",
                "\"RWX\" is not an access mode",
            ),
            (
                Spec {
                    access_modes: vec![],
                    ..base()
                },
                "access_modes",
                "at least one",
            ),
            (
                Spec {
                    reclaim_policy: "Keep".into(),
                    ..base()
                },
                "reclaim_policy",
                "not a reclaim policy",
            ),
            (
                Spec {
                    cluster: json!("batch"),
                    ..base()
                },
                "cluster",
                "expected a cluster reference",
            ),
        ];
        for (spec, path, message) in cases {
            let problems = NfsVolume::validate(&spec, &Value::Null);
            if path.is_empty() {
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
