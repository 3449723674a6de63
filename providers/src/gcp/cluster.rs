//! The `gke_cluster` kind: a GKE cluster, Autopilot or Standard, in a region or a zone.
//!
//! Standard clusters are created bare: GKE insists on a node pool at creation, so the
//! cluster starts with a one-node `default-pool` which is removed once the cluster is
//! running (Terraform's `remove_default_node_pool`), and pools come from `gke_node_pool`.
//! Labels and the release channel change in place; mode, location, network and
//! subnetwork force a new cluster.

use std::collections::BTreeMap;

use async_trait::async_trait;
use reqwest::Method;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::client::{client, status_of, Request};
use super::config::{Api, CredentialSource, GcpConfig};
use super::{
    by_parent, catalog, id_parts, is_ours, labels_with_ours, list_key, not_ours, operation,
    user_labels,
};
use crate::schema::Fields;
use crate::{Ctx, Invalid, Kind, Live, ProviderError};

/// The kind `gke_cluster`.
#[derive(Debug, Clone, Copy, Default)]
pub struct GkeCluster;

// serde's defaults, the same as the schema's (checked by `schema_mismatches`).
fn standard() -> String {
    "standard".into()
}

fn default_network() -> String {
    "default".into()
}

fn regular() -> String {
    "regular".into()
}

/// What a stack writes for a `gke_cluster`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    /// The cluster's name (RFC 1035, at most 40 characters).
    #[terrain(force_new)]
    pub name: String,
    /// A region (regional cluster) or zone (zonal cluster); defaults to the provider's
    /// region.
    #[terrain(force_new)]
    pub location: Option<String>,
    /// "autopilot" (Google manages nodes) or "standard" (you add gke_node_pool resources).
    #[serde(default = "standard")]
    #[terrain(force_new)]
    pub mode: String,
    /// The VPC network; Filestore instances must be on the same one.
    #[serde(default = "default_network")]
    #[terrain(force_new)]
    pub network: String,
    /// The subnetwork; GKE picks the network's default when left out.
    #[terrain(force_new)]
    pub subnetwork: Option<String>,
    /// rapid, regular, stable, extended or none.
    #[serde(default = "regular")]
    pub release_channel: String,
    /// Free text.
    #[terrain(force_new)]
    pub description: Option<String>,
    /// GCP labels on the cluster.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// GKE Workload Identity: pods act as their Kubernetes service accounts, which
    /// `gcp_iam_member` can grant roles to (the project's pool, PROJECT.svc.id.goog).
    /// New clusters have it unless this is false; Autopilot always has it. On a cluster
    /// made without it, only an explicit `true` turns it on: existing node pools keep
    /// the Compute Engine metadata server until their `workload_metadata` is "gke",
    /// which recreates their nodes.
    pub workload_identity: Option<bool>,
}

/// What `gke_cluster` reports after apply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Outputs {
    /// The Kubernetes API server's address.
    pub endpoint: String,
    /// The cluster CA certificate, base64-encoded PEM.
    pub ca_certificate: String,
    /// Where the cluster runs.
    pub location: String,
    /// The cluster's API URL.
    pub self_link: String,
    /// The control plane's Kubernetes version.
    pub kubernetes_version: String,
    /// The project holding the cluster.
    pub project: String,
    /// How to reach the Kubernetes API: the `cluster` of kubernetes_* resources.
    #[terrain(derived_from = [])]
    pub kubernetes: Value,
}

const CHANNELS: &[(&str, &str)] = &[
    ("rapid", "RAPID"),
    ("regular", "REGULAR"),
    ("stable", "STABLE"),
    ("extended", "EXTENDED"),
    ("none", "UNSPECIFIED"),
];

const CREATE: &str = "container.projects.locations.clusters.create";
const GET: &str = "container.projects.locations.clusters.get";
const LIST: &str = "container.projects.locations.clusters.list";
const DELETE: &str = "container.projects.locations.clusters.delete";
const UPDATE: &str = "container.projects.locations.clusters.update";
const SET_LABELS: &str = "container.projects.locations.clusters.setResourceLabels";
const DELETE_POOL: &str = "container.projects.locations.clusters.nodePools.delete";
const LIST_POOLS: &str = "container.projects.locations.clusters.nodePools.list";
const ID_SHAPE: &str = "projects/PROJECT/locations/LOCATION/clusters/NAME";

impl Spec {
    /// The location: the spec's, else the provider's region, else its zone.
    pub fn location_in(&self, config: &GcpConfig) -> Option<String> {
        self.location
            .clone()
            .or_else(|| config.region.clone())
            .or_else(|| config.zone.clone())
    }
}

fn channel_api(channel: &str) -> &'static str {
    CHANNELS
        .iter()
        .find(|(name, _)| *name == channel)
        .map_or("REGULAR", |(_, api)| api)
}

fn channel_of(api: &str) -> &'static str {
    CHANNELS
        .iter()
        .find(|(_, a)| *a == api)
        .map_or("none", |(name, _)| name)
}

/// The CreateClusterRequest body.
pub fn create_body(spec: &Spec, project: &str, address: &str) -> Value {
    let mut cluster = json!({
        "name": spec.name,
        "network": spec.network,
        "resourceLabels": labels_with_ours(&spec.labels, address),
        "releaseChannel": {"channel": channel_api(&spec.release_channel)},
    });
    if let Some(s) = &spec.subnetwork {
        cluster["subnetwork"] = json!(s);
    }
    if let Some(d) = &spec.description {
        cluster["description"] = json!(d);
    }
    if spec.mode == "autopilot" {
        cluster["autopilot"] = json!({"enabled": true});
    } else {
        // GKE requires a node pool at creation; this one is removed once the cluster runs.
        cluster["initialNodeCount"] = json!(1);
    }
    if spec.mode == "autopilot" || spec.workload_identity != Some(false) {
        cluster["workloadIdentityConfig"] = json!({"workloadPool": workload_pool(project)});
    }
    json!({ "cluster": cluster })
}

/// The project's Workload Identity pool, shared by all its clusters.
pub fn workload_pool(project: &str) -> String {
    format!("{project}.svc.id.goog")
}

/// The spec a live cluster shows; fields the API cannot report come from `prior`.
pub fn spec_of(live: &Value, prior: Option<&Spec>) -> Spec {
    let subnetwork = live["subnetwork"].as_str().map(str::to_string);
    Spec {
        name: live["name"].as_str().unwrap_or_default().to_string(),
        // A stack that leaves the location to the provider's region keeps it that way.
        location: match prior {
            Some(p) if p.location.is_none() => None,
            _ => Some(live["location"].as_str().unwrap_or_default().to_string()),
        },
        mode: if live["autopilot"]["enabled"].as_bool() == Some(true) {
            "autopilot"
        } else {
            "standard"
        }
        .to_string(),
        network: live["network"].as_str().unwrap_or("default").to_string(),
        // GKE fills in a subnetwork when none is given; only compare it when the stack names one.
        subnetwork: match prior {
            Some(p) if p.subnetwork.is_none() => None,
            _ => subnetwork,
        },
        release_channel: channel_of(
            live["releaseChannel"]["channel"]
                .as_str()
                .unwrap_or("UNSPECIFIED"),
        )
        .to_string(),
        description: live["description"]
            .as_str()
            .filter(|d| !d.is_empty())
            .map(str::to_string),
        labels: user_labels(&live["resourceLabels"]),
        // Left to the default, it is compared only once the stack says; an imported
        // Autopilot cluster has it by definition, so import does not write it.
        workload_identity: match prior {
            Some(p) if p.workload_identity.is_none() => None,
            None if live["autopilot"]["enabled"].as_bool() == Some(true) => None,
            _ => Some(
                live["workloadIdentityConfig"]["workloadPool"]
                    .as_str()
                    .is_some_and(|p| !p.is_empty()),
            ),
        },
    }
}

fn outputs_of(live: &Value, project: &str, config: &GcpConfig) -> Outputs {
    let endpoint = live["endpoint"].as_str().unwrap_or_default();
    // Only where credentials live, never a token: outputs are stored in state.
    let auth = match &config.credentials {
        CredentialSource::TokenFile(path) => json!({"type": "google", "access_token_file": path}),
        CredentialSource::Adc {
            key_file: Some(path),
        } => json!({"type": "google", "credentials": path}),
        CredentialSource::Adc { key_file: None } | CredentialSource::Token(_) => {
            json!({"type": "google"})
        }
    };
    let kubernetes = json!({
        "host": if endpoint.is_empty() { String::new() } else { format!("https://{endpoint}") },
        "ca_certificate": live["masterAuth"]["clusterCaCertificate"],
        "auth": auth,
        "flavor": "gke",
        "autopilot": live["autopilot"]["enabled"].as_bool().unwrap_or(false),
        "name": live["name"],
        "location": live["location"],
        "project": project,
    });
    Outputs {
        kubernetes,
        endpoint: live["endpoint"].as_str().unwrap_or_default().to_string(),
        ca_certificate: live["masterAuth"]["clusterCaCertificate"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        location: live["location"].as_str().unwrap_or_default().to_string(),
        self_link: live["selfLink"].as_str().unwrap_or_default().to_string(),
        kubernetes_version: live["currentMasterVersion"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        project: project.to_string(),
    }
}

/// A spec's location relative to the spec's (after the spec has been validated).
fn location(spec: &Spec, config: &GcpConfig) -> Result<String, ProviderError> {
    spec.location_in(config).ok_or_else(|| {
        ProviderError::Config(
            "gke_cluster: no location; set `location` or `region` in [providers.gcp]".to_string(),
        )
    })
}

/// The parts of a cluster id: project, location, name.
fn id_of(id: &str) -> Result<Vec<&str>, ProviderError> {
    id_parts(id, &["projects", "locations", "clusters"])
        .ok_or_else(|| super::bad_id(GkeCluster::KIND, id, ID_SHAPE))
}

/// The object `read` reports for the live cluster `live` with id `id`, whose parts are
/// `parts`; `None` for a cluster being torn down, which is as good as gone: planning
/// must create a new one. Shared by `read` and `read_batch`.
fn live_of(
    id: &str,
    parts: &[&str],
    live: &Value,
    prior: Option<&Spec>,
    config: &GcpConfig,
) -> Option<Live<GkeCluster>> {
    if live["status"] == "STOPPING" {
        return None;
    }
    Some(Live {
        id: id.to_string(),
        spec: spec_of(live, prior),
        outputs: outputs_of(live, parts[0], config),
    })
}

/// Whether `listed`, a cluster from the list of the id's location, is the cluster `parts`
/// names.
fn is_cluster(listed: &Value, parts: &[&str]) -> bool {
    listed["name"].as_str() == Some(parts[2])
        && listed["location"].as_str().is_none_or(|l| l == parts[1])
}

fn cluster_path(id: &str) -> String {
    format!("v1/{id}")
}

fn operation_path(project: &str, location: &str, op: &Value) -> String {
    format!(
        "v1/projects/{project}/locations/{location}/operations/{}",
        op["name"].as_str().unwrap_or_default()
    )
}

async fn get(ctx: &Ctx, id: &str) -> Result<Option<Value>, ProviderError> {
    let c = client(ctx)?;
    c.get_opt(ctx, &Request::get(GET, Api::Container, cluster_path(id)))
        .await
}

/// Waits until a cluster another attempt created is RUNNING.
async fn wait_running(
    ctx: &Ctx,
    id: &str,
    timeout: std::time::Duration,
) -> Result<(), ProviderError> {
    let c = client(ctx)?;
    operation::until_ready(ctx, &c, GET, &format!("cluster {id}"), timeout, || async {
        match get(ctx, id).await? {
            None => Ok(None),
            Some(live) => {
                let status = live["status"]
                    .as_str()
                    .unwrap_or("PROVISIONING")
                    .to_string();
                if status == "ERROR" || status == "DEGRADED" {
                    return Err(ProviderError::api(
                        GET,
                        200,
                        status,
                        live["statusMessage"]
                            .as_str()
                            .unwrap_or("cluster is unhealthy")
                            .to_string(),
                    ));
                }
                Ok(Some((status == "RUNNING", status.to_lowercase())))
            }
        }
    })
    .await
}

#[async_trait]
impl Kind for GkeCluster {
    type Spec = Spec;
    type Outputs = Outputs;
    const KIND: &'static str = "gke_cluster";
    const PROVIDER: &'static str = "gcp";
    const WRITES: crate::protocol::Writes = crate::protocol::Writes::FromId;
    const BILLS: bool = true;

    fn validate(spec: &Spec, config: &Value) -> Vec<Invalid> {
        let mut out = Vec::new();
        if let Err(m) = catalog::check_rfc1035(&spec.name, catalog::GKE_CLUSTER_NAME_MAX) {
            out.push(Invalid::at("name", m));
        }
        if !["autopilot", "standard"].contains(&spec.mode.as_str()) {
            out.push(Invalid::at(
                "mode",
                format!(
                    "{:?} is not a mode; use \"autopilot\" or \"standard\"",
                    spec.mode
                ),
            ));
        }
        if !CHANNELS.iter().any(|(c, _)| *c == spec.release_channel) {
            out.push(Invalid::at(
                "release_channel",
                format!(
                    "{:?} is not a release channel; use rapid, regular, stable, extended or none",
                    spec.release_channel
                ),
            ));
        } else if spec.mode == "autopilot" && spec.release_channel == "none" {
            out.push(Invalid::at("release_channel", "Autopilot clusters are always enrolled in a release channel; use rapid, regular, stable or extended"));
        }
        if spec.mode == "autopilot" && spec.workload_identity == Some(false) {
            out.push(Invalid::at(
                "workload_identity",
                "Autopilot clusters always have Workload Identity; remove workload_identity = false",
            ));
        }
        if let Err(m) =
            catalog::check_labels(spec.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        {
            out.push(Invalid::at("labels", m));
        }
        let config = super::validation_config(config, &mut out);
        match spec
            .location
            .clone()
            .or_else(|| config.as_ref().and_then(|c| spec.location_in(c)))
        {
            None => out.push(Invalid::at(
                "",
                "no location: set `location`, or `region` in [providers.gcp]",
            )),
            // A location taken from the provider is checked with the provider's table.
            Some(loc) if spec.location.is_none() => {
                if spec.mode == "autopilot" {
                    if let Some(region) = catalog::region_of_zone(&loc) {
                        out.push(Invalid::at("", format!("Autopilot clusters are regional; set location = {region:?} instead of taking the provider's zone {loc:?}")));
                    }
                }
            }
            Some(loc) => {
                if let Err(m) = catalog::check_location(&loc) {
                    out.push(Invalid::at("location", m));
                } else if let (true, Some(region)) =
                    (spec.mode == "autopilot", catalog::region_of_zone(&loc))
                {
                    out.push(Invalid::at("location", format!("Autopilot clusters are regional; use the region {region:?} instead of the zone {loc:?}")));
                } else if let Some(region) = config.as_ref().and_then(GcpConfig::catalog_region) {
                    if let Err(m) = catalog::check_location_in_region(&loc, region, "the cluster") {
                        out.push(Invalid::at("location", m));
                    }
                }
            }
        }
        out
    }

    /// GKE's cluster management fee, by mode.
    fn usage(spec: &Value, config: &Value, _peers: &[crate::Peer]) -> Vec<crate::Usage> {
        let mode = crate::usage::known(&spec["mode"]).unwrap_or("standard");
        let region = crate::usage::gcp_location(&spec["location"], config)
            .map(|l| crate::usage::gcp_region(&l))
            .unwrap_or_default();
        vec![crate::Usage::fixed(
            "gke.cluster",
            mode,
            &region,
            1.0,
            format!("{mode} cluster fee"),
        )]
    }

    fn services(_spec: &Value) -> Vec<&'static str> {
        vec!["container.googleapis.com", "compute.googleapis.com"]
    }

    fn planned_id(spec: &Spec, config: &Value) -> Option<String> {
        let config = GcpConfig::from_ctx(config).ok()?;
        let location = spec.location_in(&config)?;
        Some(format!(
            "projects/{}/locations/{location}/clusters/{}",
            config.project.as_deref()?,
            spec.name
        ))
    }

    async fn read(
        &self,
        ctx: &Ctx,
        id: &str,
        prior: Option<&Spec>,
    ) -> Result<Option<Live<Self>>, ProviderError> {
        let parts = id_of(id)?;
        let Some(live) = get(ctx, id).await? else {
            return Ok(None);
        };
        Ok(live_of(id, &parts, &live, prior, &client(ctx)?.config))
    }

    /// The clusters of one location are listed together.
    fn batch_key(config: &Value, id: &str, _prior: Option<&Spec>) -> Option<String> {
        let p = id_of(id).ok()?;
        list_key(
            config,
            Api::Container,
            &format!("projects/{}/locations/{}/clusters", p[0], p[1]),
        )
    }

    /// One `clusters.list` per location among `items` (GKE does not page it).
    async fn read_batch(
        &self,
        ctx: &Ctx,
        items: &[(String, Option<Spec>)],
    ) -> Result<Vec<Option<Live<Self>>>, ProviderError> {
        let c = client(ctx)?;
        let groups = by_parent(items, |id| {
            id_of(id).map(|p| format!("projects/{}/locations/{}", p[0], p[1]))
        })?;
        let mut out: Vec<Option<Live<Self>>> = items.iter().map(|_| None).collect();
        for (parent, indices) in groups {
            let req = Request::get(LIST, Api::Container, format!("v1/{parent}/clusters"));
            // A location that is not there lists nothing; each object is then read alone.
            let listed = c.get_opt(ctx, &req).await?.unwrap_or(Value::Null);
            let clusters = listed["clusters"].as_array().map_or(&[][..], Vec::as_slice);
            for i in indices {
                let (id, prior) = &items[i];
                let parts = id_of(id)?;
                out[i] = clusters
                    .iter()
                    .find(|l| is_cluster(l, &parts))
                    .and_then(|live| live_of(id, &parts, live, prior.as_ref(), &c.config));
            }
        }
        Ok(out)
    }

    async fn create(&self, ctx: &Ctx, spec: &Spec) -> Result<Live<Self>, ProviderError> {
        let c = client(ctx)?;
        let project = c.config.project()?.to_string();
        let location = location(spec, &c.config)?;
        let id = format!(
            "projects/{project}/locations/{location}/clusters/{}",
            spec.name
        );
        let timeout = c.config.timeout(Self::KIND);
        let req = Request::new(
            CREATE,
            Api::Container,
            Method::POST,
            format!("v1/projects/{project}/locations/{location}/clusters"),
        )
        .body(create_body(spec, &project, &ctx.address));
        match c.send(ctx, &req).await {
            Ok(op) => {
                operation::wait(
                    ctx,
                    &c,
                    &operation::CONTAINER,
                    CREATE,
                    &operation_path(&project, &location, &op),
                    &op,
                    timeout,
                )
                .await?
            }
            Err(e) if status_of(&e) == Some(409) => {
                // Our earlier attempt (lost response, interrupted run) or someone else's.
                let live = get(ctx, &id).await?.ok_or(e)?;
                if !is_ours(&live["resourceLabels"], &ctx.address) {
                    return Err(not_ours(CREATE, "cluster", &id, Self::KIND, &ctx.address));
                }
                ctx.progress("adopting the cluster an earlier attempt created");
                wait_running(ctx, &id, timeout).await?;
            }
            Err(e) => return Err(e),
        }
        if spec.mode == "standard" {
            let pool = format!("v1/{id}/nodePools/default-pool");
            match c
                .send(
                    ctx,
                    &Request::new(DELETE_POOL, Api::Container, Method::DELETE, pool),
                )
                .await
            {
                Ok(op) => {
                    operation::wait(
                        ctx,
                        &c,
                        &operation::CONTAINER,
                        DELETE_POOL,
                        &operation_path(&project, &location, &op),
                        &op,
                        timeout,
                    )
                    .await?
                }
                Err(e) if status_of(&e) == Some(404) => {}
                Err(e) => return Err(e),
            }
        }
        self.read(ctx, &id, Some(spec)).await?.ok_or_else(|| {
            ProviderError::api(
                GET,
                404,
                "NOT_FOUND",
                format!("cluster {id} vanished right after it was created"),
            )
        })
    }

    async fn update(
        &self,
        ctx: &Ctx,
        id: &str,
        prior: &Spec,
        spec: &Spec,
    ) -> Result<Live<Self>, ProviderError> {
        let parts = id_parts(id, &["projects", "locations", "clusters"])
            .ok_or_else(|| super::bad_id(Self::KIND, id, ID_SHAPE))?;
        let (project, location) = (parts[0], parts[1]);
        let c = client(ctx)?;
        let timeout = c.config.timeout(Self::KIND);
        // One `clusters.update` per change: GKE takes one desired field at a time.
        let mut updates = Vec::new();
        if prior.release_channel != spec.release_channel {
            updates.push(
                json!({"desiredReleaseChannel": {"channel": channel_api(&spec.release_channel)}}),
            );
        }
        if let Some(on) = spec
            .workload_identity
            .filter(|on| prior.workload_identity != Some(*on))
        {
            let pool = if on {
                workload_pool(project)
            } else {
                String::new()
            };
            updates.push(json!({"desiredWorkloadIdentityConfig": {"workloadPool": pool}}));
        }
        for update in updates {
            let req = Request::new(UPDATE, Api::Container, Method::PUT, cluster_path(id))
                .body(json!({ "update": update }));
            let op = c.send(ctx, &req).await?;
            operation::wait(
                ctx,
                &c,
                &operation::CONTAINER,
                UPDATE,
                &operation_path(project, location, &op),
                &op,
                timeout,
            )
            .await?;
        }
        if prior.labels != spec.labels {
            // The fingerprint guards against concurrent label edits; read it fresh.
            let live = get(ctx, id).await?.ok_or_else(|| {
                ProviderError::api(GET, 404, "NOT_FOUND", format!("cluster {id} is gone"))
            })?;
            let body = json!({
                "resourceLabels": labels_with_ours(&spec.labels, &ctx.address),
                "labelFingerprint": live["labelFingerprint"],
            });
            let op = c
                .send(
                    ctx,
                    &Request::new(
                        SET_LABELS,
                        Api::Container,
                        Method::POST,
                        format!("v1/{id}:setResourceLabels"),
                    )
                    .body(body),
                )
                .await?;
            operation::wait(
                ctx,
                &c,
                &operation::CONTAINER,
                SET_LABELS,
                &operation_path(project, location, &op),
                &op,
                timeout,
            )
            .await?;
        }
        self.read(ctx, id, Some(spec)).await?.ok_or_else(|| {
            ProviderError::api(GET, 404, "NOT_FOUND", format!("cluster {id} is gone"))
        })
    }

    /// Turning Workload Identity on for a running cluster says which node pools it does
    /// not reach yet: pools made without it keep the Compute Engine metadata server
    /// (their pods act as the node's account) until their `workload_metadata` is "gke",
    /// which recreates their nodes.
    async fn preview(
        &self,
        ctx: &Ctx,
        id: &str,
        prior: &Spec,
        spec: &Spec,
    ) -> Result<Option<String>, ProviderError> {
        if spec.workload_identity != Some(true) || prior.workload_identity == Some(true) {
            return Ok(None);
        }
        let c = client(ctx)?;
        let listed = c
            .get_opt(
                ctx,
                &Request::get(LIST_POOLS, Api::Container, format!("v1/{id}/nodePools")),
            )
            .await?
            .unwrap_or(Value::Null);
        let behind: Vec<&str> = listed["nodePools"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| p["config"]["workloadMetadataConfig"]["mode"] != "GKE_METADATA")
            .filter_map(|p| p["name"].as_str())
            .collect();
        Ok(Some(if behind.is_empty() {
            "turns Workload Identity on; every node pool already uses GKE's metadata server"
                .to_string()
        } else {
            format!(
                "turns Workload Identity on, but node pools {} keep the Compute Engine metadata server (their pods still act as the node's service account) until their workload_metadata = \"gke\", which recreates their nodes",
                behind.join(", ")
            )
        }))
    }

    async fn delete(
        &self,
        ctx: &Ctx,
        id: &str,
        _prior: Option<&Spec>,
    ) -> Result<(), ProviderError> {
        let parts = id_parts(id, &["projects", "locations", "clusters"])
            .ok_or_else(|| super::bad_id(Self::KIND, id, ID_SHAPE))?;
        let c = client(ctx)?;
        match c
            .send(
                ctx,
                &Request::new(DELETE, Api::Container, Method::DELETE, cluster_path(id)),
            )
            .await
        {
            Ok(op) => {
                operation::wait(
                    ctx,
                    &c,
                    &operation::CONTAINER,
                    DELETE,
                    &operation_path(parts[0], parts[1], &op),
                    &op,
                    c.config.timeout(Self::KIND),
                )
                .await
            }
            Err(e) if status_of(&e) == Some(404) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::schema_mismatches;

    fn spec(mode: &str, location: Option<&str>) -> Spec {
        Spec {
            name: "batch-aiml".into(),
            location: location.map(str::to_string),
            mode: mode.into(),
            network: "default".into(),
            subnetwork: None,
            release_channel: "regular".into(),
            description: None,
            labels: BTreeMap::new(),
            workload_identity: None,
        }
    }

    #[test]
    fn schema_matches_spec_and_outputs() {
        let full = Spec {
            subnetwork: Some("default".into()),
            description: Some("batch".into()),
            labels: BTreeMap::from([("team".to_string(), "ml".to_string())]),
            workload_identity: Some(true),
            ..spec("standard", Some("us-central1"))
        };
        let config = GcpConfig::resolve(&json!({"project": "p"}), &|_| None).expect("config");
        let outputs = outputs_of(&json!({"endpoint": "10.0.0.1"}), "p", &config);
        assert_eq!(
            schema_mismatches::<GkeCluster>(&full, &outputs),
            Vec::<String>::new()
        );
    }

    #[test]
    fn autopilot_and_standard_bodies() {
        let auto = create_body(
            &spec("autopilot", Some("us-central1")),
            "p",
            "gke_cluster.batch",
        );
        assert_eq!(auto["cluster"]["autopilot"], json!({"enabled": true}));
        assert!(auto["cluster"].get("initialNodeCount").is_none());
        assert_eq!(
            auto["cluster"]["resourceLabels"]["terrain-address"],
            "gke_cluster-batch"
        );
        assert_eq!(auto["cluster"]["releaseChannel"]["channel"], "REGULAR");
        let std = create_body(
            &spec("standard", Some("us-central1-a")),
            "p",
            "gke_cluster.gpu",
        );
        assert_eq!(std["cluster"]["initialNodeCount"], 1);
        assert!(std["cluster"].get("autopilot").is_none());
    }

    #[test]
    fn live_cluster_reads_back_as_the_spec_that_made_it() {
        for s in [
            spec("autopilot", Some("us-central1")),
            spec("standard", None),
        ] {
            let mut live = create_body(&s, "p", "gke_cluster.batch")["cluster"].clone();
            live["location"] = json!("us-central1");
            live["subnetwork"] = json!("default");
            assert_eq!(spec_of(&live, Some(&s)), s);
        }
    }

    #[test]
    fn validation_table() {
        let cfg = json!({"project": "p", "region": "us-central1"});
        let cases: &[(Spec, &str)] = &[
            (spec("autopilot", Some("us-central1")), ""),
            (spec("standard", Some("us-central1-a")), ""),
            (
                spec("autopilot", Some("us-central1-a")),
                "Autopilot clusters are regional",
            ),
            (
                spec("standard", Some("europe-west4-a")),
                "not in the provider's region",
            ),
            (spec("serverless", Some("us-central1")), "is not a mode"),
            (spec("standard", Some("central")), "neither a region"),
            (
                Spec {
                    name: "Batch_AIML".into(),
                    ..spec("standard", None)
                },
                "name",
            ),
            (
                Spec {
                    release_channel: "fast".into(),
                    ..spec("standard", None)
                },
                "not a release channel",
            ),
        ];
        for (s, want) in cases {
            let problems = GkeCluster::validate(s, &cfg);
            if want.is_empty() {
                assert!(problems.is_empty(), "{s:?}: {problems:?}");
            } else {
                assert!(
                    problems
                        .iter()
                        .any(|p| p.message.contains(want) || p.path.join(".") == *want),
                    "{s:?}: want {want}, got {problems:?}"
                );
            }
        }
        assert!(
            GkeCluster::validate(&spec("standard", None), &json!({"project": "p"}))
                .iter()
                .any(|p| p.message.contains("no location"))
        );
    }

    #[test]
    fn locations_come_from_the_catalog_and_lie_in_the_provider_region() {
        let in_us = json!({"project": "p", "region": "us-central1"});
        let problems = |s: Spec, cfg: &Value| -> Vec<(String, String)> {
            GkeCluster::validate(&s, cfg)
                .into_iter()
                .map(|p| (p.path.join("."), p.message))
                .collect()
        };
        let cases: &[(Spec, &str)] = &[
            (spec("standard", Some("us-west9")), "`us-west9` is not a Google Cloud region; did you mean `us-west1`"),
            (spec("standard", Some("us-central1-z")), "`us-central1-z` is not a Google Cloud zone: us-central1 has zones a, b, c, f"),
            (spec("standard", Some("europe-west1-a")), "europe-west1 has zones b, c, d"),
            (
                spec("standard", Some("europe-west1-b")),
                "zone `europe-west1-b` is not in the provider's region us-central1: the cluster would be made in europe-west1, not us-central1",
            ),
            (spec("autopilot", Some("europe-west1")), "region `europe-west1` is not the provider's region us-central1"),
        ];
        for (s, want) in cases {
            let got = problems(s.clone(), &in_us);
            assert!(
                got.iter().any(|(p, m)| p == "location" && m.contains(want)),
                "{:?}: want {want}, got {got:?}",
                s.location
            );
        }
        // Without a provider region any real location goes; a made-up provider region is
        // the provider table's problem, not the cluster's.
        let nowhere = json!({"project": "p"});
        assert!(problems(spec("standard", Some("europe-west1-b")), &nowhere).is_empty());
        let made_up = json!({"project": "p", "region": "us-west9"});
        assert!(problems(spec("standard", Some("europe-west1-b")), &made_up).is_empty());
        assert!(problems(spec("autopilot", None), &made_up).is_empty());
        let unknown = json!({"project": "p", "region": crate::protocol::UNKNOWN});
        assert!(problems(spec("standard", Some("europe-west1-b")), &unknown).is_empty());
        // A zone from the provider still cannot hold an Autopilot cluster.
        let zone_only = json!({"project": "p", "zone": "us-central1-a"});
        assert!(problems(spec("autopilot", None), &zone_only)
            .iter()
            .any(|(p, m)| p.is_empty() && m.contains("Autopilot clusters are regional")));
    }

    #[test]
    fn planned_id_uses_the_provider_project_and_region() {
        let cfg = json!({"project": "p", "region": "us-central1"});
        assert_eq!(
            GkeCluster::planned_id(&spec("autopilot", None), &cfg).as_deref(),
            Some("projects/p/locations/us-central1/clusters/batch-aiml")
        );
    }
}
