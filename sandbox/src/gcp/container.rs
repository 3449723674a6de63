//! The GKE emulator (container v1): clusters, node pools and the operations that create,
//! change and delete them, served on both the `locations` paths and the older `zones`
//! aliases. Changes requested by an operation take effect when it completes, the way GKE
//! reports the old configuration while it reconciles; a cluster with a running operation
//! refuses further mutations like GKE ("Cluster is running incompatible operation").

use std::time::Duration;

use base64::Engine as _;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::error::ApiError;
use super::kube::{KubeCluster, KubePool};
use super::machines::is_zone;
use super::operation::{progress, Lro, OpCtx};
use super::schema::Rules;
use super::{compute, int_of, operation_id, parse_body, set_or_remove, str_of, Api};
use crate::capacity::GcpCapacity;
use crate::common::ca::cluster_ca;
use crate::common::hash::fingerprint;
use crate::common::ids::random_hex;
use crate::common::time::{time_nanos, time_secs};
use crate::http::{ApiRequest, ApiResponse};

const CLUSTER_CREATE: Duration = Duration::from_secs(6);
const CLUSTER_DELETE: Duration = Duration::from_secs(2);
const CLUSTER_UPDATE: Duration = Duration::from_secs(2);
const SET_LABELS: Duration = Duration::from_secs(1);
const POOL_CREATE: Duration = Duration::from_secs(3);
const POOL_DELETE: Duration = Duration::from_secs(2);
const POOL_UPDATE: Duration = Duration::from_secs(2);
const POOL_SETTING: Duration = Duration::from_secs(1);

const SELF_LINK_ROOT: &str = "https://container.googleapis.com/v1";

/// GKE versions the sandbox offers, newest first; the channel defaults pick from these.
const VERSIONS: &[&str] = &[
    "1.33.2-gke.1240000",
    "1.32.4-gke.1415000",
    "1.31.8-gke.1113000",
    "1.30.12-gke.1086000",
];

/// Default node service account scopes, as GKE fills them in.
const DEFAULT_SCOPES: &[&str] = &[
    "https://www.googleapis.com/auth/devstorage.read_only",
    "https://www.googleapis.com/auth/logging.write",
    "https://www.googleapis.com/auth/monitoring",
    "https://www.googleapis.com/auth/service.management.readonly",
    "https://www.googleapis.com/auth/servicecontrol",
    "https://www.googleapis.com/auth/trace.append",
];

/// The GKE emulator's persisted state.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct State {
    #[serde(default)]
    clusters: Vec<ClusterRecord>,
    #[serde(default)]
    operations: Vec<Op>,
    /// Allocates distinct pod ranges to clusters.
    #[serde(default)]
    next_range: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ClusterRecord {
    project: String,
    location: String,
    name: String,
    /// The Cluster resource without the parts derived from pools at read time.
    cluster: Value,
    pools: Vec<PoolRecord>,
    /// The cluster CA's private key, kept for the Kubernetes API emulator to sign its
    /// serving certificate with.
    ca_key_pem: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PoolRecord {
    name: String,
    pool: Value,
    /// Nodes per zone. NodePool has no current-size field (initialNodeCount stays as
    /// created), so the size lives here and shows in Cluster.currentNodeCount.
    size: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Op {
    name: String,
    project: String,
    location: String,
    op_type: String,
    cluster: String,
    pool: Option<String>,
    target_link: String,
    lro: Lro,
    action: Action,
    /// Set when Compute Engine could not make the pool's nodes (a stockout): the status
    /// the pool is left in when the operation fails, instead of a failed create leaving
    /// no pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    failed_pool_status: Option<String>,
}

/// What an operation does to the objects when it completes.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
enum Action {
    CreateCluster,
    DeleteCluster,
    UpdateCluster { update: Value },
    SetLabels { labels: Value },
    CreatePool,
    DeletePool,
    UpdatePool { update: Value },
    SetAutoscaling { autoscaling: Value },
    SetSize { count: i64 },
    SetManagement { management: Value },
}

/// The `projects/{p}/locations/{l}` part of a request.
#[derive(Debug, Clone, Copy)]
struct Loc<'a> {
    project: &'a str,
    location: &'a str,
}

impl Loc<'_> {
    fn cluster_path(&self, cluster: &str) -> String {
        format!(
            "projects/{}/locations/{}/clusters/{cluster}",
            self.project, self.location
        )
    }

    fn pool_path(&self, cluster: &str, pool: &str) -> String {
        format!("{}/nodePools/{pool}", self.cluster_path(cluster))
    }

    fn matches(&self, project: &str, location: &str) -> bool {
        self.project == project && (self.location == "-" || self.location == location)
    }
}

fn kube_key(project: &str, location: &str, name: &str) -> String {
    format!("gke/projects/{project}/locations/{location}/clusters/{name}")
}

impl State {
    /// One line per cluster and node pool the emulator holds, for `Sandbox::inventory`;
    /// a cluster or pool being deleted is still held until its operation completes.
    pub(crate) fn inventory(&self, out: &mut Vec<String>) {
        for c in &self.clusters {
            let path = format!("{}/{}/{}", c.project, c.location, c.name);
            out.push(format!("gke cluster {path}"));
            for p in &c.pools {
                out.push(format!("gke node pool {path}/{}", p.name));
            }
        }
    }

    /// Every cluster, with what its Kubernetes API server is built from.
    pub(crate) fn kube_clusters(&self) -> Vec<KubeCluster> {
        self.clusters
            .iter()
            .map(|c| {
                let ca_cert_pem = base64::engine::general_purpose::STANDARD
                    .decode(str_of(&c.cluster["masterAuth"], "clusterCaCertificate"))
                    .ok()
                    .and_then(|b| String::from_utf8(b).ok())
                    .unwrap_or_default();
                KubeCluster {
                    key: kube_key(&c.project, &c.location, &c.name),
                    name: c.name.clone(),
                    project: c.project.clone(),
                    workload_identity: c.cluster.get("workloadIdentityConfig").is_some(),
                    ca_cert_pem,
                    ca_key_pem: c.ca_key_pem.clone(),
                    autopilot: c.cluster["autopilot"]["enabled"] == Value::Bool(true),
                    version: str_of(&c.cluster, "currentMasterVersion").to_string(),
                    pools: c
                        .pools
                        .iter()
                        .map(|p| KubePool {
                            name: p.name.clone(),
                            config: p.pool.get("config").cloned().unwrap_or_else(|| json!({})),
                            size: p.size,
                            zones: string_list(&p.pool, "locations").len().max(1) as i64,
                            autoscaling: p.pool.get("autoscaling").cloned().unwrap_or(Value::Null),
                            placement_policy: p
                                .pool
                                .get("placementPolicy")
                                .cloned()
                                .unwrap_or(Value::Null),
                            version: p.pool["version"].as_str().map(str::to_string),
                        })
                        .collect(),
                }
            })
            .collect()
    }

    /// Points a cluster's `endpoint` at its Kubernetes API server (`127.0.0.1:PORT`); the
    /// only place the endpoint is set.
    pub(crate) fn set_endpoint(&mut self, key: &str, endpoint: &str) {
        for c in &mut self.clusters {
            if kube_key(&c.project, &c.location, &c.name) == key
                && c.cluster["endpoint"].as_str() != Some(endpoint)
            {
                c.cluster["endpoint"] = json!(endpoint);
            }
        }
    }

    /// Serves one GKE request; `capacity` is what node pools that make nodes run into
    /// (regional quotas, stockouts).
    pub(crate) fn handle(
        &mut self,
        req: &ApiRequest,
        ctx: &OpCtx,
        capacity: &GcpCapacity,
        account_exists: &dyn Fn(&str) -> bool,
    ) -> Result<ApiResponse, ApiError> {
        let segments = req.segments();
        let s: Vec<&str> = segments.iter().map(String::as_str).collect();
        let method = req.method.as_str();
        let no_route = || ApiError::no_route(method, &req.path);
        let ["v1", "projects", project, scope @ ("locations" | "zones"), location, rest @ ..] =
            s.as_slice()
        else {
            return Err(no_route());
        };
        let loc = Loc { project, location };
        let zonal = *scope == "zones";
        match (method, rest) {
            ("GET", ["clusters"]) => Ok(self.list_clusters(loc)),
            ("POST", ["clusters"]) => self.create_cluster(loc, req, ctx, account_exists),
            (_, ["clusters", name]) => {
                let (cluster, verb) = split_verb(name);
                match (method, verb) {
                    ("GET", None) => self.get_cluster(loc, cluster),
                    ("PUT", None) => self.update_cluster(loc, cluster, req, ctx),
                    ("DELETE", None) => self.delete_cluster(loc, cluster, ctx),
                    ("POST", Some("setResourceLabels")) => self.set_labels(loc, cluster, req, ctx),
                    _ => Err(no_route()),
                }
            }
            ("POST", ["clusters", cluster, "resourceLabels"]) if zonal => {
                self.set_labels(loc, cluster, req, ctx)
            }
            ("GET", ["clusters", cluster, "nodePools"]) => self.list_pools(loc, cluster),
            ("POST", ["clusters", cluster, "nodePools"]) => {
                self.create_pool(loc, cluster, req, ctx, capacity, account_exists)
            }
            (_, ["clusters", cluster, "nodePools", name]) => {
                let (pool, verb) = split_verb(name);
                match (method, verb) {
                    ("GET", None) => self.get_pool(loc, cluster, pool),
                    ("PUT", None) => {
                        self.pool_change(loc, cluster, pool, "update", req, ctx, capacity)
                    }
                    ("DELETE", None) => self.delete_pool(loc, cluster, pool, ctx),
                    ("POST", Some(v @ ("setAutoscaling" | "setSize" | "setManagement"))) => {
                        self.pool_change(loc, cluster, pool, v, req, ctx, capacity)
                    }
                    _ => Err(no_route()),
                }
            }
            ("POST", ["clusters", cluster, "nodePools", pool, action]) if zonal => {
                let verb = match *action {
                    "autoscaling" => "setAutoscaling",
                    "setSize" => "setSize",
                    "setManagement" => "setManagement",
                    "update" => "update",
                    _ => return Err(no_route()),
                };
                self.pool_change(loc, cluster, pool, verb, req, ctx, capacity)
            }
            ("GET", ["operations"]) => Ok(self.list_operations(loc, ctx.now)),
            ("GET", ["operations", name]) => self.get_operation(loc, name, ctx.now),
            _ => Err(no_route()),
        }
    }

    // ------------------------------------------------------------ clusters

    fn list_clusters(&self, loc: Loc) -> ApiResponse {
        let clusters: Vec<Value> = self
            .clusters
            .iter()
            .filter(|c| loc.matches(&c.project, &c.location))
            .map(render_cluster)
            .collect();
        let mut out = json!({});
        set_or_remove(&mut out, "clusters", Value::Array(clusters));
        ApiResponse::ok(out)
    }

    fn get_cluster(&self, loc: Loc, name: &str) -> Result<ApiResponse, ApiError> {
        let i = self.cluster_index(loc, name)?;
        Ok(ApiResponse::ok(render_cluster(&self.clusters[i])))
    }

    /// CreateCluster: the request checked, its node pools built and its network ranges
    /// chosen, then the cluster recorded as PROVISIONING under a CREATE_CLUSTER
    /// operation.
    fn create_cluster(
        &mut self,
        loc: Loc,
        req: &ApiRequest,
        ctx: &OpCtx,
        account_exists: &dyn Fn(&str) -> bool,
    ) -> Result<ApiResponse, ApiError> {
        let body = parse_body(
            req,
            Api::Container,
            "CreateClusterRequest",
            "",
            Rules::PROTO3,
        )?;
        let Some(input) = body.get("cluster") else {
            return Err(ApiError::invalid("Cluster is required."));
        };
        let region = region_of(loc.location)?;
        let name = str_of(input, "name");
        check_name("cluster.name", name)?;
        if self.find(loc.project, loc.location, name).is_some() {
            return Err(ApiError::exists(format!(
                "Already exists: {}.",
                loc.cluster_path(name)
            )));
        }
        let autopilot = input["autopilot"]["enabled"] == Value::Bool(true);
        let locations: Vec<String> = match input.get("locations").and_then(Value::as_array) {
            Some(list) => list
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect(),
            None => default_zones(loc.location),
        };
        check_zones("cluster.locations", &locations, &region)?;
        let pool_inputs = cluster_pool_inputs(input, autopilot)?;
        let release_channel = input
            .get("releaseChannel")
            .cloned()
            .unwrap_or_else(|| json!({"channel": "REGULAR"}));
        let channel = str_of(&release_channel, "channel");
        let version = resolve_version(
            "cluster.initial_cluster_version",
            input.get("initialClusterVersion").and_then(Value::as_str),
            channel,
        )?;
        let workload_pool = workload_pool(loc, input, autopilot)?;
        let mut pools = build_pools(loc, name, &pool_inputs, &locations, &version, &region)?;
        for (p, pool) in pools.iter_mut().enumerate() {
            let field = format!("cluster.node_pools[{p}].config");
            identity_defaults(&field, &mut pool.pool["config"], workload_pool.is_some())?;
            check_account(&field, &pool.pool["config"], account_exists)?;
        }

        let (ca_pem, ca_key_pem) = cluster_ca(name)
            .map_err(|e| ApiError::internal(format!("could not generate the cluster CA: {e}")))?;
        let range = self.next_range;
        self.next_range += 1;
        let (ip_policy, pod_range) = ip_allocation(input, range);
        let mut cluster = cluster_resource(
            loc,
            input,
            NewCluster {
                name,
                version,
                locations,
                release_channel,
                ip_policy,
                pod_range,
                ca_pem,
            },
            ctx.now,
        );
        if let Some(pool) = workload_pool {
            cluster["workloadIdentityConfig"] = json!({"workloadPool": pool});
        }
        self.clusters.push(ClusterRecord {
            project: loc.project.to_string(),
            location: loc.location.to_string(),
            name: name.to_string(),
            cluster,
            pools,
            ca_key_pem,
        });
        let op = self.start(
            loc,
            name,
            None,
            "CREATE_CLUSTER",
            CLUSTER_CREATE,
            Action::CreateCluster,
            ctx,
        );
        Ok(ApiResponse::ok(op))
    }

    fn update_cluster(
        &mut self,
        loc: Loc,
        name: &str,
        req: &ApiRequest,
        ctx: &OpCtx,
    ) -> Result<ApiResponse, ApiError> {
        let body = parse_body(
            req,
            Api::Container,
            "UpdateClusterRequest",
            "",
            Rules::PROTO3,
        )?;
        let i = self.cluster_index(loc, name)?;
        self.check_idle(loc, name)?;
        let mut update = body.get("update").cloned().unwrap_or_else(|| json!({}));
        // `desiredNodePoolId` only says which pool the pool-level fields are for.
        let changes = update.as_object().map_or(0, |m| {
            m.keys().filter(|k| *k != "desiredNodePoolId").count()
        });
        if changes == 0 {
            return Err(ApiError::invalid(
                "UpdateClusterRequest.update must set one of desired_release_channel, desired_master_version, desired_node_pool_autoscaling or desired_workload_identity_config.",
            ));
        }
        if let Some(wi) = update.get("desiredWorkloadIdentityConfig") {
            let autopilot = self.clusters[i].cluster["autopilot"]["enabled"] == Value::Bool(true);
            let pool = str_of(wi, "workloadPool");
            if autopilot && pool.is_empty() {
                return Err(ApiError::invalid(
                    "Workload Identity cannot be disabled on Autopilot clusters.",
                ));
            }
            if !pool.is_empty() {
                workload_pool(loc, &json!({"workloadIdentityConfig": wi}), false)?;
            }
        }
        // The pool whose autoscaling changes, as nodePools.setAutoscaling changes it.
        let pool = match update.get("desiredNodePoolAutoscaling") {
            None => None,
            Some(autoscaling) => {
                let pool = str_of(&update, "desiredNodePoolId");
                if pool.is_empty() {
                    return Err(ApiError::invalid(
                        "update.desired_node_pool_id must be set to change update.desired_node_pool_autoscaling.",
                    ));
                }
                self.check_standard(i)?;
                self.pool_index(loc, name, pool)?;
                check_autoscaling("update.desired_node_pool_autoscaling", autoscaling)?;
                Some(pool.to_string())
            }
        };
        let cluster = &self.clusters[i].cluster;
        let only_version = changes == 1 && update.get("desiredMasterVersion").is_some();
        if let Some(requested) = update.get("desiredMasterVersion").and_then(Value::as_str) {
            let channel = str_of(&cluster["releaseChannel"], "channel");
            let version =
                resolve_version("update.desired_master_version", Some(requested), channel)?;
            let current = str_of(cluster, "currentMasterVersion");
            if version_key(&version) < version_key(current) {
                return Err(ApiError::invalid(format!(
                    "Master version \"{version}\" is older than the current version \"{current}\"; downgrades are not supported."
                )));
            }
            update["desiredMasterVersion"] = json!(version);
        }
        let op_type = if only_version {
            "UPGRADE_MASTER"
        } else {
            "UPDATE_CLUSTER"
        };
        self.clusters[i].cluster["status"] = json!("RECONCILING");
        if let Some(pool) = &pool {
            if let Ok((_, p)) = self.pool_index(loc, name, pool) {
                self.clusters[i].pools[p].pool["status"] = json!("RECONCILING");
            }
        }
        let op = self.start(
            loc,
            name,
            pool.as_deref(),
            op_type,
            CLUSTER_UPDATE,
            Action::UpdateCluster { update },
            ctx,
        );
        Ok(ApiResponse::ok(op))
    }

    fn set_labels(
        &mut self,
        loc: Loc,
        name: &str,
        req: &ApiRequest,
        ctx: &OpCtx,
    ) -> Result<ApiResponse, ApiError> {
        let body = parse_body(req, Api::Container, "SetLabelsRequest", "", Rules::PROTO3)?;
        let i = self.cluster_index(loc, name)?;
        self.check_idle(loc, name)?;
        let current = str_of(&self.clusters[i].cluster, "labelFingerprint");
        if str_of(&body, "labelFingerprint") != current {
            return Err(ApiError::precondition(
                "Labels could not be set due to fingerprint mismatch.",
            ));
        }
        let labels = body
            .get("resourceLabels")
            .cloned()
            .unwrap_or_else(|| json!({}));
        let op = self.start(
            loc,
            name,
            None,
            "SET_LABELS",
            SET_LABELS,
            Action::SetLabels { labels },
            ctx,
        );
        Ok(ApiResponse::ok(op))
    }

    fn delete_cluster(
        &mut self,
        loc: Loc,
        name: &str,
        ctx: &OpCtx,
    ) -> Result<ApiResponse, ApiError> {
        let i = self.cluster_index(loc, name)?;
        self.check_idle(loc, name)?;
        let record = &mut self.clusters[i];
        record.cluster["status"] = json!("STOPPING");
        for pool in &mut record.pools {
            pool.pool["status"] = json!("STOPPING");
        }
        let op = self.start(
            loc,
            name,
            None,
            "DELETE_CLUSTER",
            CLUSTER_DELETE,
            Action::DeleteCluster,
            ctx,
        );
        Ok(ApiResponse::ok(op))
    }

    // ------------------------------------------------------------ node pools

    fn list_pools(&self, loc: Loc, cluster: &str) -> Result<ApiResponse, ApiError> {
        let i = self.cluster_index(loc, cluster)?;
        let pools: Vec<Value> = self.clusters[i]
            .pools
            .iter()
            .map(|p| p.pool.clone())
            .collect();
        let mut out = json!({});
        set_or_remove(&mut out, "nodePools", Value::Array(pools));
        Ok(ApiResponse::ok(out))
    }

    fn get_pool(&self, loc: Loc, cluster: &str, pool: &str) -> Result<ApiResponse, ApiError> {
        let (i, p) = self.pool_index(loc, cluster, pool)?;
        Ok(ApiResponse::ok(self.clusters[i].pools[p].pool.clone()))
    }

    fn create_pool(
        &mut self,
        loc: Loc,
        cluster: &str,
        req: &ApiRequest,
        ctx: &OpCtx,
        capacity: &GcpCapacity,
        account_exists: &dyn Fn(&str) -> bool,
    ) -> Result<ApiResponse, ApiError> {
        let body = parse_body(
            req,
            Api::Container,
            "CreateNodePoolRequest",
            "",
            Rules::PROTO3,
        )?;
        let i = self.cluster_index(loc, cluster)?;
        self.check_standard(i)?;
        self.check_idle(loc, cluster)?;
        let Some(input) = body.get("nodePool") else {
            return Err(ApiError::invalid(
                "CreateNodePoolRequest.node_pool is required.",
            ));
        };
        let record = &self.clusters[i];
        let name = str_of(input, "name");
        if record.pools.iter().any(|p| p.name == name) {
            return Err(ApiError::exists(format!(
                "Already exists: {}.",
                loc.pool_path(cluster, name)
            )));
        }
        let locations = string_list(&record.cluster, "locations");
        let version = str_of(&record.cluster, "currentMasterVersion").to_string();
        let region = region_of(&record.location)?;
        let identity = record.cluster.get("workloadIdentityConfig").is_some();
        let mut pool = build_pool(
            loc,
            cluster,
            input,
            "node_pool",
            &locations,
            &version,
            &region,
        )?;
        identity_defaults("node_pool.config", &mut pool.pool["config"], identity)?;
        check_account("node_pool.config", &pool.pool["config"], account_exists)?;
        let pool_name = pool.name.clone();
        // GKE asks Compute Engine for the nodes' quota before it accepts the request,
        // and learns of a stockout only while the instance groups create the nodes.
        let zones = string_list(&pool.pool, "locations");
        let nodes = pool.size * zones.len() as i64;
        let demand = compute::demand(&pool.pool["config"], nodes);
        compute::check_quota(
            capacity,
            &self.kube_clusters(),
            loc.project,
            &region,
            &demand,
        )?;
        let config = pool.pool["config"].clone();
        let size = pool.size;
        let record = &mut self.clusters[i];
        record.pools.push(pool);
        record.cluster["status"] = json!("RECONCILING");
        let op = self.start(
            loc,
            cluster,
            Some(&pool_name),
            "CREATE_NODE_POOL",
            POOL_CREATE,
            Action::CreatePool,
            ctx,
        );
        let op = self.plan_stockout(
            capacity, loc, cluster, &pool_name, &zones, &config, size, "ERROR", op, ctx,
        );
        Ok(ApiResponse::ok(op))
    }

    fn delete_pool(
        &mut self,
        loc: Loc,
        cluster: &str,
        pool: &str,
        ctx: &OpCtx,
    ) -> Result<ApiResponse, ApiError> {
        let i = self.cluster_index(loc, cluster)?;
        self.check_standard(i)?;
        let (i, p) = self.pool_index(loc, cluster, pool)?;
        self.check_idle(loc, cluster)?;
        self.clusters[i].pools[p].pool["status"] = json!("STOPPING");
        self.clusters[i].cluster["status"] = json!("RECONCILING");
        let op = self.start(
            loc,
            cluster,
            Some(pool),
            "DELETE_NODE_POOL",
            POOL_DELETE,
            Action::DeletePool,
            ctx,
        );
        Ok(ApiResponse::ok(op))
    }

    /// The node pool mutations other than create and delete: `update` (PUT), and the
    /// `setAutoscaling`, `setSize` and `setManagement` verbs.
    #[allow(clippy::too_many_arguments)]
    fn pool_change(
        &mut self,
        loc: Loc,
        cluster: &str,
        pool: &str,
        verb: &str,
        req: &ApiRequest,
        ctx: &OpCtx,
        capacity: &GcpCapacity,
    ) -> Result<ApiResponse, ApiError> {
        let table = match verb {
            "update" => "UpdateNodePoolRequest",
            "setAutoscaling" => "SetNodePoolAutoscalingRequest",
            "setSize" => "SetNodePoolSizeRequest",
            _ => "SetNodePoolManagementRequest",
        };
        let body = parse_body(req, Api::Container, table, "", Rules::PROTO3)?;
        let i = self.cluster_index(loc, cluster)?;
        self.check_standard(i)?;
        let (i, p) = self.pool_index(loc, cluster, pool)?;
        self.check_idle(loc, cluster)?;
        let record = &self.clusters[i];
        let (op_type, duration, action) = match verb {
            "update" => {
                let mut update = Map::new();
                if body["workloadMetadataConfig"]["mode"] == "GKE_METADATA"
                    && record.cluster.get("workloadIdentityConfig").is_none()
                {
                    return Err(no_workload_identity("workload_metadata_config.mode"));
                }
                for key in [
                    "taints",
                    "labels",
                    "resourceLabels",
                    "imageType",
                    "workloadMetadataConfig",
                ] {
                    if let Some(v) = body.get(key) {
                        update.insert(key.to_string(), v.clone());
                    }
                }
                if let Some(taints) = body["taints"]["taints"].as_array() {
                    for (t, taint) in taints.iter().enumerate() {
                        check_taint(&format!("taints.taints[{t}]"), taint)?;
                    }
                }
                if let Some(requested) = body.get("nodeVersion").and_then(Value::as_str) {
                    let master = str_of(&record.cluster, "currentMasterVersion");
                    let version = match requested {
                        "-" | "latest" => master.to_string(),
                        v => resolve_version("node_version", Some(v), "")?,
                    };
                    if version_key(&version) > version_key(master) {
                        return Err(ApiError::invalid(format!(
                            "Node version \"{version}\" must not be newer than the master version \"{master}\"."
                        )));
                    }
                    update.insert("nodeVersion".to_string(), json!(version));
                }
                if update.is_empty() {
                    return Err(ApiError::invalid(
                        "UpdateNodePoolRequest must change at least one of node_version, image_type, taints, labels or resource_labels.",
                    ));
                }
                (
                    "UPGRADE_NODES",
                    POOL_UPDATE,
                    Action::UpdatePool {
                        update: Value::Object(update),
                    },
                )
            }
            "setAutoscaling" => {
                let autoscaling = body
                    .get("autoscaling")
                    .cloned()
                    .unwrap_or_else(|| json!({}));
                check_autoscaling("autoscaling", &autoscaling)?;
                (
                    "UPDATE_CLUSTER",
                    POOL_SETTING,
                    Action::SetAutoscaling { autoscaling },
                )
            }
            "setSize" => {
                let count = int_of(&body, "nodeCount");
                if count < 0 {
                    return Err(ApiError::invalid(format!(
                        "Invalid value for field \"node_count\": {count}. Must be at least 0."
                    )));
                }
                // Growing needs quota for the new nodes, as creating them does.
                let current = &record.pools[p];
                let zones = string_list(&current.pool, "locations");
                let added = (count - current.size).max(0);
                let demand = compute::demand(&current.pool["config"], added * zones.len() as i64);
                let region = region_of(&record.location)?;
                compute::check_quota(
                    capacity,
                    &self.kube_clusters(),
                    loc.project,
                    &region,
                    &demand,
                )?;
                ("SET_NODE_POOL_SIZE", POOL_UPDATE, Action::SetSize { count })
            }
            _ => {
                let management = body.get("management").cloned().unwrap_or_else(|| json!({}));
                (
                    "SET_NODE_POOL_MANAGEMENT",
                    POOL_SETTING,
                    Action::SetManagement { management },
                )
            }
        };
        let grows = match &action {
            Action::SetSize { count } => (count - self.clusters[i].pools[p].size).max(0),
            _ => 0,
        };
        let zones = string_list(&self.clusters[i].pools[p].pool, "locations");
        let config = self.clusters[i].pools[p].pool["config"].clone();
        self.clusters[i].pools[p].pool["status"] = json!("RECONCILING");
        let op = self.start(loc, cluster, Some(pool), op_type, duration, action, ctx);
        // A resize that cannot get its new nodes fails; the pool keeps its old size.
        let op = self.plan_stockout(
            capacity,
            loc,
            cluster,
            pool,
            &zones,
            &config,
            grows,
            "RUNNING_WITH_ERROR",
            op,
            ctx,
        );
        Ok(ApiResponse::ok(op))
    }

    /// Makes the operation just started (`op`, as rendered) end with GKE's
    /// `GCE_STOCKOUT` when every zone of the pool is out of its machines and
    /// `nodes_per_zone` new nodes are wanted, leaving the pool in `status`; returns the
    /// operation as rendered. A failure a fault already planned stays.
    #[allow(clippy::too_many_arguments)]
    fn plan_stockout(
        &mut self,
        capacity: &GcpCapacity,
        loc: Loc,
        cluster: &str,
        pool: &str,
        zones: &[String],
        config: &Value,
        nodes_per_zone: i64,
        status: &str,
        op: Value,
        ctx: &OpCtx,
    ) -> Value {
        let Some(last) = self.operations.last_mut() else {
            return op;
        };
        if last.lro.failure.is_some() {
            return op;
        }
        let Some(message) = compute::stockout(
            capacity,
            loc.project,
            cluster,
            pool,
            zones,
            config,
            nodes_per_zone,
            last.lro.duration_ms,
        ) else {
            return op;
        };
        // GKE reports a stockout as StatusCondition GCE_STOCKOUT, whose canonical code
        // is RESOURCE_EXHAUSTED.
        last.lro.failure = Some(super::operation::RpcStatus { code: 8, message });
        last.failed_pool_status = Some(status.to_string());
        render_op(last, ctx.now)
    }

    // ------------------------------------------------------------ operations

    fn list_operations(&self, loc: Loc, now: DateTime<Utc>) -> ApiResponse {
        let ops: Vec<Value> = self
            .operations
            .iter()
            .filter(|o| loc.matches(&o.project, &o.location))
            .map(|o| render_op(o, now))
            .collect();
        let mut out = json!({});
        set_or_remove(&mut out, "operations", Value::Array(ops));
        ApiResponse::ok(out)
    }

    fn get_operation(
        &self,
        loc: Loc,
        name: &str,
        now: DateTime<Utc>,
    ) -> Result<ApiResponse, ApiError> {
        self.operations
            .iter()
            .find(|o| o.name == name && loc.matches(&o.project, &o.location))
            .map(|o| ApiResponse::ok(render_op(o, now)))
            .ok_or_else(|| {
                ApiError::not_found(format!(
                    "Not found: projects/{}/locations/{}/operations/{name}.",
                    loc.project, loc.location
                ))
            })
    }

    /// Records a new operation and returns it as the response renders it.
    #[allow(clippy::too_many_arguments)]
    fn start(
        &mut self,
        loc: Loc,
        cluster: &str,
        pool: Option<&str>,
        op_type: &str,
        base: Duration,
        action: Action,
        ctx: &OpCtx,
    ) -> Value {
        let target = match pool {
            Some(p) => loc.pool_path(cluster, p),
            None => loc.cluster_path(cluster),
        };
        let op = Op {
            name: operation_id(ctx.now),
            project: loc.project.to_string(),
            location: loc.location.to_string(),
            op_type: op_type.to_string(),
            cluster: cluster.to_string(),
            pool: pool.map(str::to_string),
            target_link: format!("{SELF_LINK_ROOT}/{target}"),
            lro: ctx.start(Api::Container, base),
            action,
            failed_pool_status: None,
        };
        let rendered = render_op(&op, ctx.now);
        self.operations.push(op);
        rendered
    }

    /// Applies every operation that has finished by `now`, in the order they finished.
    pub(crate) fn settle(&mut self, now: DateTime<Utc>) {
        let mut due: Vec<usize> = (0..self.operations.len())
            .filter(|&i| self.operations[i].lro.due(now))
            .collect();
        due.sort_by_key(|&i| self.operations[i].lro.end());
        for i in due {
            self.operations[i].lro.settled = true;
            let op = self.operations[i].clone();
            self.complete(&op);
        }
    }

    fn complete(&mut self, op: &Op) {
        let Some(ci) = self.find(&op.project, &op.location, &op.cluster) else {
            return;
        };
        let failed = op.lro.failure.is_some();
        let pool_index = op
            .pool
            .as_ref()
            .and_then(|name| self.clusters[ci].pools.iter().position(|p| &p.name == name));
        let record = &mut self.clusters[ci];
        match (&op.action, failed) {
            (Action::CreateCluster, true) | (Action::DeleteCluster, false) => {
                self.clusters.remove(ci);
                return;
            }
            // A pool Compute Engine could not make nodes for stays, in ERROR.
            (Action::CreatePool, true) if op.failed_pool_status.is_some() => {}
            (Action::CreatePool, true) | (Action::DeletePool, false) => {
                if let Some(p) = pool_index {
                    record.pools.remove(p);
                }
            }
            (_, true) => {}
            (Action::CreateCluster | Action::CreatePool, false) => {}
            (Action::UpdateCluster { update }, false) => {
                if let Some(channel) = update.get("desiredReleaseChannel") {
                    record.cluster["releaseChannel"] = channel.clone();
                }
                if let Some(version) = update.get("desiredMasterVersion") {
                    record.cluster["currentMasterVersion"] = version.clone();
                }
                if let Some(wi) = update.get("desiredWorkloadIdentityConfig") {
                    let pool = str_of(wi, "workloadPool");
                    let value = if pool.is_empty() {
                        Value::Null
                    } else {
                        json!({"workloadPool": pool})
                    };
                    set_or_remove(&mut record.cluster, "workloadIdentityConfig", value);
                }
                if let (Some(autoscaling), Some(p)) =
                    (update.get("desiredNodePoolAutoscaling"), pool_index)
                {
                    set_autoscaling(&mut record.pools[p], autoscaling);
                }
            }
            (Action::SetLabels { labels }, false) => {
                record.cluster["labelFingerprint"] = json!(fingerprint(labels));
                set_or_remove(&mut record.cluster, "resourceLabels", labels.clone());
            }
            (Action::UpdatePool { update }, false) => {
                if let Some(p) = pool_index {
                    let pool = &mut record.pools[p].pool;
                    let config = &mut pool["config"];
                    if let Some(t) = update.get("taints") {
                        set_or_remove(
                            config,
                            "taints",
                            t.get("taints").cloned().unwrap_or(Value::Null),
                        );
                    }
                    if let Some(l) = update.get("labels") {
                        set_or_remove(
                            config,
                            "labels",
                            l.get("labels").cloned().unwrap_or(Value::Null),
                        );
                    }
                    if let Some(l) = update.get("resourceLabels") {
                        set_or_remove(
                            config,
                            "resourceLabels",
                            l.get("labels").cloned().unwrap_or(Value::Null),
                        );
                    }
                    if let Some(image) = update.get("imageType") {
                        config["imageType"] = image.clone();
                    }
                    if let Some(mode) = update.get("workloadMetadataConfig") {
                        config["workloadMetadataConfig"] = mode.clone();
                    }
                    if let Some(version) = update.get("nodeVersion") {
                        pool["version"] = version.clone();
                    }
                }
            }
            (Action::SetAutoscaling { autoscaling }, false) => {
                if let Some(p) = pool_index {
                    set_autoscaling(&mut record.pools[p], autoscaling);
                }
            }
            (Action::SetSize { count }, false) => {
                if let Some(p) = pool_index {
                    record.pools[p].size = *count;
                }
            }
            (Action::SetManagement { management }, false) => {
                if let Some(p) = pool_index {
                    record.pools[p].pool["management"] = management.clone();
                }
            }
        }
        // Operations on one cluster never overlap (check_idle), so whatever this one
        // changed, the cluster and its pools are now at rest.
        record.cluster["status"] = json!("RUNNING");
        for pool in &mut record.pools {
            pool.pool["status"] = json!("RUNNING");
            if let Some(m) = pool.pool.as_object_mut() {
                m.remove("statusMessage");
            }
        }
        if let (true, Some(status), Some(p)) = (failed, &op.failed_pool_status, pool_index) {
            let pool = &mut record.pools[p];
            pool.pool["status"] = json!(status);
            if let Some(error) = &op.lro.failure {
                pool.pool["statusMessage"] = json!(error.message);
            }
            // A pool whose create failed this way has no nodes (and holds no quota).
            if matches!(op.action, Action::CreatePool) {
                pool.size = 0;
            }
        }
    }

    // ------------------------------------------------------------ lookups

    fn find(&self, project: &str, location: &str, name: &str) -> Option<usize> {
        self.clusters
            .iter()
            .position(|c| c.project == project && c.location == location && c.name == name)
    }

    fn cluster_index(&self, loc: Loc, name: &str) -> Result<usize, ApiError> {
        self.find(loc.project, loc.location, name)
            .ok_or_else(|| ApiError::not_found(format!("Not found: {}.", loc.cluster_path(name))))
    }

    fn pool_index(&self, loc: Loc, cluster: &str, pool: &str) -> Result<(usize, usize), ApiError> {
        let i = self.cluster_index(loc, cluster)?;
        let p = self.clusters[i]
            .pools
            .iter()
            .position(|p| p.name == pool)
            .ok_or_else(|| {
                ApiError::not_found(format!("Not found: {}.", loc.pool_path(cluster, pool)))
            })?;
        Ok((i, p))
    }

    /// GKE runs one operation per cluster at a time and rejects the rest.
    fn check_idle(&self, loc: Loc, cluster: &str) -> Result<(), ApiError> {
        match self.operations.iter().find(|o| {
            !o.lro.settled
                && o.project == loc.project
                && o.location == loc.location
                && o.cluster == cluster
        }) {
            Some(op) => Err(ApiError::precondition(format!(
                "Cluster is running incompatible operation {}.",
                op.name
            ))),
            None => Ok(()),
        }
    }

    fn check_standard(&self, i: usize) -> Result<(), ApiError> {
        if self.clusters[i].cluster["autopilot"]["enabled"] == Value::Bool(true) {
            return Err(ApiError::precondition(
                "Autopilot clusters do not support node pool operations: GKE manages their node pools.",
            ));
        }
        Ok(())
    }
}

// ---------------------------------------------------------------- rendering

fn render_cluster(record: &ClusterRecord) -> Value {
    let mut cluster = record.cluster.clone();
    // GKE reports the first node pool's config and version in these deprecated fields.
    if let Some(first) = record.pools.first() {
        if let Some(config) = first.pool.get("config") {
            cluster["nodeConfig"] = config.clone();
        }
        if let Some(version) = first.pool.get("version") {
            cluster["currentNodeVersion"] = version.clone();
        }
    }
    // An Autopilot cluster (no pool of its own here) runs its nodes at the control
    // plane's version, and GKE says so: gcloud's describe needs the field.
    if cluster.get("currentNodeVersion").is_none() {
        if let Some(master) = cluster.get("currentMasterVersion").cloned() {
            cluster["currentNodeVersion"] = master;
        }
    }
    let pools: Vec<Value> = record.pools.iter().map(|p| p.pool.clone()).collect();
    set_or_remove(&mut cluster, "nodePools", Value::Array(pools));
    let nodes: i64 = record
        .pools
        .iter()
        .map(|p| p.size * string_list(&p.pool, "locations").len().max(1) as i64)
        .sum();
    if nodes > 0 {
        cluster["currentNodeCount"] = json!(nodes);
    }
    cluster
}

fn render_op(op: &Op, now: DateTime<Utc>) -> Value {
    let done = op.lro.settled;
    let mut out = json!({
        "name": op.name,
        "zone": op.location,
        "operationType": op.op_type,
        "status": if done { "DONE" } else { "RUNNING" },
        "selfLink": format!(
            "{SELF_LINK_ROOT}/projects/{}/locations/{}/operations/{}",
            op.project, op.location, op.name
        ),
        "targetLink": op.target_link,
        "location": op.location,
        "startTime": time_nanos(op.lro.start),
    });
    if done {
        out["endTime"] = json!(time_nanos(op.lro.end()));
    }
    out["progress"] = progress(steps(&op.op_type), op.lro.fraction(now), done);
    if let Some(error) = op.lro.error() {
        out["statusMessage"] = json!(error.message);
        out["error"] = json!({"code": error.code, "message": error.message});
    }
    out
}

/// The progress stages each operation type reports, with their relative lengths.
fn steps(op_type: &str) -> &'static [(&'static str, i64)] {
    match op_type {
        "CREATE_CLUSTER" => &[
            ("CLUSTER_CONFIGURING", 7),
            ("CLUSTER_DEPLOYING", 9),
            ("CLUSTER_HEALTHCHECKING", 2),
        ],
        "DELETE_CLUSTER" => &[("CLUSTER_DELETING", 4)],
        "CREATE_NODE_POOL" => &[("NODE_POOL_CREATING", 4), ("NODE_POOL_HEALTHCHECKING", 1)],
        "DELETE_NODE_POOL" => &[("NODE_POOL_DELETING", 3)],
        "UPGRADE_NODES" | "SET_NODE_POOL_SIZE" => &[("NODES_UPDATING", 4)],
        _ => &[("CLUSTER_UPDATING", 2)],
    }
}

// ---------------------------------------------------------------- building and checks

/// The node pools a CreateCluster request asks for, in their request form: an Autopilot
/// cluster's none, a standard cluster's `nodePools`, or the `default-pool` that
/// `initialNodeCount` and `nodeConfig` describe.
fn cluster_pool_inputs(input: &Value, autopilot: bool) -> Result<Vec<Value>, ApiError> {
    let initial_count = int_of(input, "initialNodeCount");
    let requested_pools = input
        .get("nodePools")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    // Autopilot clusters have GKE-managed node pools that cannot be operated on; the
    // sandbox lists none rather than inventing their configuration.
    if autopilot {
        // gcloud's create-auto always sends one `default-pool` with nothing but OAuth
        // scopes (or a service account), which GKE accepts and replaces with the pools
        // it manages; anything more is refused.
        let gclouds_default = |p: &Value| {
            p["name"] == "default-pool"
                && p["config"].as_object().is_none_or(|c| {
                    c.keys()
                        .all(|k| k == "oauthScopes" || k == "serviceAccount")
                })
                && p.as_object().is_some_and(|m| {
                    m.keys()
                        .all(|k| ["name", "config", "initialNodeCount"].contains(&k.as_str()))
                })
        };
        let extra_pools = match requested_pools.as_slice() {
            [] => false,
            [only] => !gclouds_default(only),
            _ => true,
        };
        if extra_pools || initial_count > 0 || input.get("nodeConfig").is_some() {
            return Err(ApiError::invalid(
                "Autopilot clusters do not support node pools, initial_node_count or node_config: GKE manages their nodes.",
            ));
        }
        return Ok(Vec::new());
    }
    match (initial_count > 0, requested_pools.is_empty()) {
        (false, true) => Err(ApiError::invalid(
            "Cluster.initial_node_count must be greater than zero.",
        )),
        (true, false) => Err(ApiError::invalid(
            "Cluster.initial_node_count and Cluster.node_pools are mutually exclusive: set the node count on each node pool.",
        )),
        (true, true) => {
            let mut pool = json!({"name": "default-pool", "initialNodeCount": initial_count});
            if let Some(config) = input.get("nodeConfig") {
                pool["config"] = config.clone();
            }
            Ok(vec![pool])
        }
        (false, false) => {
            if input.get("nodeConfig").is_some() {
                return Err(ApiError::invalid(
                    "Cluster.node_config is only allowed with Cluster.initial_node_count; set config on each node pool.",
                ));
            }
            Ok(requested_pools)
        }
    }
}

/// Builds each of a new cluster's node pools ([`build_pool`]); their names are unique.
fn build_pools(
    loc: Loc,
    cluster: &str,
    pool_inputs: &[Value],
    locations: &[String],
    version: &str,
    region: &str,
) -> Result<Vec<PoolRecord>, ApiError> {
    let mut pools: Vec<PoolRecord> = Vec::new();
    for (i, pool_input) in pool_inputs.iter().enumerate() {
        let field = format!("cluster.node_pools[{i}]");
        let pool = build_pool(loc, cluster, pool_input, &field, locations, version, region)?;
        if pools.iter().any(|p| p.name == pool.name) {
            return Err(ApiError::invalid(format!(
                "Node pool names must be unique: \"{}\" appears twice.",
                pool.name
            )));
        }
        pools.push(pool);
    }
    Ok(pools)
}

/// The services range every cluster reports, and a VPC-native one gets by default.
const SERVICES_RANGE: &str = "34.118.224.0/20";

/// A new cluster's `ipAllocationPolicy`, with the ranges GKE fills in, and its pod
/// range; `range` is the cluster's number, which keeps pod ranges of clusters apart.
fn ip_allocation(input: &Value, range: u32) -> (Value, String) {
    let pod_range = format!("10.{}.0.0/14", (range * 4) % 256);
    // An explicit policy without useIpAliases means routes-based; none means GKE's
    // default, VPC-native.
    let mut ip_policy = input
        .get("ipAllocationPolicy")
        .cloned()
        .unwrap_or_else(|| json!({"useIpAliases": true}));
    if ip_policy["useIpAliases"] == Value::Bool(true) {
        if ip_policy.get("clusterIpv4CidrBlock").is_none() {
            ip_policy["clusterIpv4CidrBlock"] = json!(pod_range);
        }
        if ip_policy.get("servicesIpv4CidrBlock").is_none() {
            ip_policy["servicesIpv4CidrBlock"] = json!(SERVICES_RANGE);
        }
    }
    let pod_range = ip_policy
        .get("clusterIpv4CidrBlock")
        .and_then(Value::as_str)
        .map(str::to_string)
        .or_else(|| {
            input
                .get("clusterIpv4Cidr")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .unwrap_or(pod_range);
    (ip_policy, pod_range)
}

/// What CreateCluster settled before writing the cluster resource.
struct NewCluster<'a> {
    name: &'a str,
    version: String,
    locations: Vec<String>,
    release_channel: Value,
    ip_policy: Value,
    pod_range: String,
    ca_pem: String,
}

/// The Cluster resource a new cluster starts as: the request's fields, GKE's defaults
/// for those it left out, and what CreateCluster settled. The map keeps insertion
/// order, so the order here is the order of the answer's fields.
fn cluster_resource(loc: Loc, input: &Value, new: NewCluster<'_>, now: DateTime<Utc>) -> Value {
    let labels = input
        .get("resourceLabels")
        .cloned()
        .unwrap_or_else(|| json!({}));
    let mut cluster = Map::new();
    let mut put = |k: &str, v: Value| {
        cluster.insert(k.to_string(), v);
    };
    put("name", json!(new.name));
    for key in ["description", "initialNodeCount", "initialClusterVersion"] {
        if let Some(v) = input.get(key) {
            put(key, v.clone());
        }
    }
    put(
        "masterAuth",
        json!({"clusterCaCertificate": base64::engine::general_purpose::STANDARD.encode(new.ca_pem)}),
    );
    put(
        "loggingService",
        input
            .get("loggingService")
            .cloned()
            .unwrap_or(json!("logging.googleapis.com/kubernetes")),
    );
    put(
        "monitoringService",
        input
            .get("monitoringService")
            .cloned()
            .unwrap_or(json!("monitoring.googleapis.com/kubernetes")),
    );
    put(
        "network",
        input.get("network").cloned().unwrap_or(json!("default")),
    );
    put("clusterIpv4Cidr", json!(new.pod_range));
    put(
        "subnetwork",
        input.get("subnetwork").cloned().unwrap_or(json!("default")),
    );
    put("locations", json!(new.locations));
    if labels.as_object().is_some_and(|m| !m.is_empty()) {
        put("resourceLabels", labels.clone());
    }
    put("labelFingerprint", json!(fingerprint(&labels)));
    put("ipAllocationPolicy", new.ip_policy);
    put("releaseChannel", new.release_channel);
    put(
        "autopilot",
        input.get("autopilot").cloned().unwrap_or(json!({})),
    );
    put(
        "selfLink",
        json!(format!("{SELF_LINK_ROOT}/{}", loc.cluster_path(new.name))),
    );
    put("zone", json!(loc.location));
    put("currentMasterVersion", json!(new.version));
    put("createTime", json!(time_secs(now)));
    put("status", json!("PROVISIONING"));
    put("nodeIpv4CidrSize", json!(24));
    put("servicesIpv4Cidr", json!(SERVICES_RANGE));
    put("location", json!(loc.location));
    put("id", json!(random_hex(64)));
    Value::Object(cluster)
}

/// Builds a node pool from its request form, filling GKE's defaults.
fn build_pool(
    loc: Loc,
    cluster: &str,
    input: &Value,
    field: &str,
    cluster_locations: &[String],
    master_version: &str,
    region: &str,
) -> Result<PoolRecord, ApiError> {
    let name = str_of(input, "name");
    check_name(&format!("{field}.name"), name)?;
    let count = int_of(input, "initialNodeCount");
    if count < 0 {
        return Err(ApiError::invalid(format!(
            "Invalid value for field \"{field}.initial_node_count\": {count}. Must be at least 0."
        )));
    }
    let mut config = json!({
        "machineType": "e2-medium",
        "diskSizeGb": 100,
        "oauthScopes": DEFAULT_SCOPES,
        "serviceAccount": "default",
        "imageType": "COS_CONTAINERD",
        "diskType": "pd-balanced",
    });
    if let Some(given) = input.get("config").and_then(Value::as_object) {
        for (k, v) in given {
            config[k.as_str()] = v.clone();
        }
    }
    check_config(&format!("{field}.config"), &config)?;
    let locations = match input.get("locations").and_then(Value::as_array) {
        Some(list) => list
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect(),
        None => cluster_locations.to_vec(),
    };
    check_zones(&format!("{field}.locations"), &locations, region)?;
    if let Some(autoscaling) = input.get("autoscaling") {
        check_autoscaling(&format!("{field}.autoscaling"), autoscaling)?;
    }
    let version = match input.get("version").and_then(Value::as_str) {
        None | Some("-" | "latest") => master_version.to_string(),
        Some(v) => resolve_version(&format!("{field}.version"), Some(v), "")?,
    };
    if version_key(&version) > version_key(master_version) {
        return Err(ApiError::invalid(format!(
            "Node version \"{version}\" must not be newer than the master version \"{master_version}\"."
        )));
    }
    let mut pool = Map::new();
    pool.insert("name".into(), json!(name));
    pool.insert("config".into(), config);
    if count > 0 {
        pool.insert("initialNodeCount".into(), json!(count));
    }
    pool.insert("locations".into(), json!(locations));
    for key in ["autoscaling", "placementPolicy"] {
        if let Some(v) = input.get(key) {
            pool.insert(key.into(), v.clone());
        }
    }
    pool.insert(
        "upgradeSettings".into(),
        input
            .get("upgradeSettings")
            .cloned()
            .unwrap_or_else(|| json!({"maxSurge": 1, "strategy": "SURGE"})),
    );
    pool.insert(
        "management".into(),
        input
            .get("management")
            .cloned()
            .unwrap_or_else(|| json!({"autoUpgrade": true, "autoRepair": true})),
    );
    pool.insert(
        "selfLink".into(),
        json!(format!("{SELF_LINK_ROOT}/{}", loc.pool_path(cluster, name))),
    );
    pool.insert("version".into(), json!(version));
    let groups: Vec<String> = locations
        .iter()
        .map(|zone| {
            let id = fingerprint(&json!([loc.project, cluster, name, zone]));
            format!(
                "https://www.googleapis.com/compute/v1/projects/{}/zones/{zone}/instanceGroupManagers/gke-{cluster}-{name}-{id}-grp",
                loc.project
            )
        })
        .collect();
    pool.insert("instanceGroupUrls".into(), json!(groups));
    pool.insert("status".into(), json!("PROVISIONING"));
    pool.insert("podIpv4CidrSize".into(), json!(24));
    Ok(PoolRecord {
        name: name.to_string(),
        pool: Value::Object(pool),
        size: count,
    })
}

/// The Workload Identity pool a cluster create asks for: the project's own
/// (`PROJECT.svc.id.goog`) and no other; Autopilot clusters always have it.
fn workload_pool(loc: Loc, input: &Value, autopilot: bool) -> Result<Option<String>, ApiError> {
    let own = format!("{}.svc.id.goog", loc.project);
    match input["workloadIdentityConfig"]["workloadPool"].as_str() {
        Some(pool) if !pool.is_empty() && pool != own => Err(ApiError::invalid(format!(
            "Workload pool \"{pool}\" is invalid: it must be the project's pool, \"{own}\"."
        ))),
        Some(pool) if !pool.is_empty() => Ok(Some(own)),
        _ if autopilot => Ok(Some(own)),
        _ => Ok(None),
    }
}

fn no_workload_identity(field: &str) -> ApiError {
    ApiError::invalid(format!(
        "{field}: GKE_METADATA requires Workload Identity to be enabled on the cluster."
    ))
}

/// A new pool's metadata server: GKE's (Workload Identity) by default on a cluster that
/// has Workload Identity, which it also needs.
fn identity_defaults(field: &str, config: &mut Value, identity: bool) -> Result<(), ApiError> {
    let mode = config["workloadMetadataConfig"]["mode"]
        .as_str()
        .map(str::to_string);
    match mode.as_deref() {
        Some("GKE_METADATA") if !identity => Err(no_workload_identity(&format!(
            "{field}.workload_metadata_config.mode"
        ))),
        None if identity => {
            config["workloadMetadataConfig"] = json!({"mode": "GKE_METADATA"});
            Ok(())
        }
        _ => Ok(()),
    }
}

/// A node service account that IAM does not hold is refused, as GKE refuses it.
fn check_account(
    field: &str,
    config: &Value,
    account_exists: &dyn Fn(&str) -> bool,
) -> Result<(), ApiError> {
    let account = str_of(config, "serviceAccount");
    if account.is_empty() || account == "default" || account_exists(account) {
        return Ok(());
    }
    Err(ApiError::invalid(format!(
        "{field}.service_account: Service account \"{account}\" does not exist."
    )))
}

fn check_config(field: &str, config: &Value) -> Result<(), ApiError> {
    if config["spot"] == Value::Bool(true) && config["preemptible"] == Value::Bool(true) {
        return Err(ApiError::invalid(format!(
            "{field}: spot and preemptible cannot both be set."
        )));
    }
    if int_of(config, "diskSizeGb") < 10 {
        return Err(ApiError::invalid(format!(
            "Invalid value for field \"{field}.disk_size_gb\": {}. Must be at least 10.",
            int_of(config, "diskSizeGb")
        )));
    }
    for (a, accel) in config["accelerators"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        if int_of(accel, "acceleratorCount") < 1 || str_of(accel, "acceleratorType").is_empty() {
            return Err(ApiError::invalid(format!(
                "{field}.accelerators[{a}]: accelerator_type and a positive accelerator_count are required."
            )));
        }
    }
    for (t, taint) in config["taints"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        check_taint(&format!("{field}.taints[{t}]"), taint)?;
    }
    Ok(())
}

fn check_taint(field: &str, taint: &Value) -> Result<(), ApiError> {
    if str_of(taint, "key").is_empty() || str_of(taint, "effect").is_empty() {
        return Err(ApiError::invalid(format!(
            "{field}: a taint needs a key and an effect (NO_SCHEDULE, PREFER_NO_SCHEDULE or NO_EXECUTE)."
        )));
    }
    Ok(())
}

/// What nodePools.setAutoscaling, and clusters.update with a desired node pool
/// autoscaling, do to the pool when their operation completes.
fn set_autoscaling(pool: &mut PoolRecord, autoscaling: &Value) {
    pool.pool["autoscaling"] = autoscaling.clone();
}

fn check_autoscaling(field: &str, autoscaling: &Value) -> Result<(), ApiError> {
    if autoscaling["enabled"] != Value::Bool(true) {
        return Ok(());
    }
    let per_zone =
        autoscaling.get("minNodeCount").is_some() || autoscaling.get("maxNodeCount").is_some();
    let total = autoscaling.get("totalMinNodeCount").is_some()
        || autoscaling.get("totalMaxNodeCount").is_some();
    if per_zone && total {
        return Err(ApiError::invalid(format!(
            "{field}: per-zone (min/max_node_count) and total (total_min/max_node_count) limits are mutually exclusive."
        )));
    }
    let (min, max) = if total {
        (
            int_of(autoscaling, "totalMinNodeCount"),
            int_of(autoscaling, "totalMaxNodeCount"),
        )
    } else {
        (
            int_of(autoscaling, "minNodeCount"),
            int_of(autoscaling, "maxNodeCount"),
        )
    };
    if min < 0 || max < 1 || min > max {
        return Err(ApiError::invalid(format!(
            "{field}: autoscaling limits must satisfy 0 <= min ({min}) <= max ({max}) and max >= 1."
        )));
    }
    Ok(())
}

/// GKE's rule for cluster and node pool names.
fn check_name(field: &str, name: &str) -> Result<(), ApiError> {
    let bytes = name.as_bytes();
    let ok = !bytes.is_empty()
        && bytes.len() <= 40
        && bytes[0].is_ascii_lowercase()
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes.last().is_some_and(|b| *b != b'-');
    if ok {
        Ok(())
    } else {
        Err(ApiError::invalid(format!(
            "Invalid value for field \"{field}\": \"{name}\". Must be a match of regex '(?:[a-z](?:[-a-z0-9]{{0,38}}[a-z0-9])?)' (only alphanumerics and '-' allowed, must start with a letter and end with an alphanumeric, and must be no longer than 40 characters)."
        )))
    }
}

/// The region of a zone or region, or an error when `location` is neither.
fn region_of(location: &str) -> Result<String, ApiError> {
    let parts: Vec<&str> = location.split('-').collect();
    let well_formed = (parts.len() == 2 || is_zone(location))
        && parts[0].bytes().all(|b| b.is_ascii_lowercase())
        && !parts[0].is_empty()
        && parts[1].bytes().any(|b| b.is_ascii_digit())
        && parts[1]
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    if !well_formed {
        return Err(ApiError::invalid(format!(
            "Location \"{location}\" is not a valid zone or region."
        )));
    }
    Ok(format!("{}-{}", parts[0], parts[1]))
}

/// The zones GKE spreads a cluster over when none are given.
fn default_zones(location: &str) -> Vec<String> {
    if is_zone(location) {
        vec![location.to_string()]
    } else {
        ["a", "b", "c"]
            .iter()
            .map(|z| format!("{location}-{z}"))
            .collect()
    }
}

fn check_zones(field: &str, zones: &[String], region: &str) -> Result<(), ApiError> {
    for zone in zones {
        if !is_zone(zone) || !zone.starts_with(&format!("{region}-")) {
            return Err(ApiError::invalid(format!(
                "Invalid value for field \"{field}\": \"{zone}\" is not a zone of {region}."
            )));
        }
    }
    Ok(())
}

/// Resolves a requested version (`latest`, `-`, `1.31`, `1.31.8` or a full version) to a
/// full GKE version; the channel picks the default.
fn resolve_version(
    field: &str,
    requested: Option<&str>,
    channel: &str,
) -> Result<String, ApiError> {
    let default = match channel {
        "RAPID" => VERSIONS[0],
        "STABLE" | "EXTENDED" => VERSIONS[2],
        _ => VERSIONS[1],
    };
    let v = match requested {
        None | Some("" | "-" | "latest") => return Ok(default.to_string()),
        Some(v) => v,
    };
    if VERSIONS.contains(&v) || full_version(v) {
        return Ok(v.to_string());
    }
    VERSIONS
        .iter()
        .find(|known| known.starts_with(&format!("{v}.")) || known.starts_with(&format!("{v}-")))
        .map(|known| known.to_string())
        .ok_or_else(|| {
            ApiError::invalid(format!(
                "Invalid value for field \"{field}\": \"{v}\" is not a supported version; use one of {}.",
                VERSIONS.join(", ")
            ))
        })
}

fn full_version(v: &str) -> bool {
    let Some((semver, gke)) = v.split_once("-gke.") else {
        return false;
    };
    let parts: Vec<&str> = semver.split('.').collect();
    parts.len() == 3
        && parts
            .iter()
            .chain([&gke])
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

/// An ordering key for GKE versions: `1.31.8-gke.1113000` → (1, 31, 8, 1113000).
fn version_key(v: &str) -> (u64, u64, u64, u64) {
    let (semver, gke) = v.split_once("-gke.").unwrap_or((v, "0"));
    let mut parts = semver.split('.').map(|p| p.parse::<u64>().unwrap_or(0));
    (
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
        gke.parse().unwrap_or(0),
    )
}

fn split_verb(segment: &str) -> (&str, Option<&str>) {
    match segment.split_once(':') {
        Some((name, verb)) => (name, Some(verb)),
        None => (segment, None),
    }
}

fn string_list(v: &Value, key: &str) -> Vec<String> {
    v.get(key)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::Faults;
    use crate::gcp::error::Code;
    use axum::http::Method;

    const ROOT: &str = "v1/projects/p/locations/us-central1";

    fn clusters() -> String {
        format!("{ROOT}/clusters")
    }

    fn cluster(name: &str) -> String {
        format!("{ROOT}/clusters/{name}")
    }

    fn pool(cluster: &str, pool: &str) -> String {
        format!("{ROOT}/clusters/{cluster}/nodePools/{pool}")
    }

    /// The emulator and a test clock; every request settles first, as the server does,
    /// and every response must conform to the official resource shape.
    #[derive(Default)]
    struct Harness {
        state: State,
        faults: Faults,
        capacity: GcpCapacity,
        now: i64,
    }

    impl Harness {
        fn at(&mut self, secs: i64) -> &mut Self {
            self.now = secs;
            self
        }

        fn send(
            &mut self,
            method: Method,
            path: &str,
            body: Option<Value>,
        ) -> Result<Value, ApiError> {
            let now =
                DateTime::<Utc>::from_timestamp(1_700_000_000 + self.now, 0).expect("valid time");
            let ctx = OpCtx {
                now,
                scale: 1.0,
                faults: &self.faults,
            };
            self.state.settle(now);
            let req = ApiRequest::new(method, path, body);
            let body = self
                .state
                .handle(&req, &ctx, &self.capacity, &|_| true)?
                .json_body()
                .cloned()
                .unwrap_or(Value::Null);
            let msg = if req.method != Method::GET || path.contains("/operations/") {
                "Operation"
            } else if path.ends_with("/operations") {
                "ListOperationsResponse"
            } else if path.ends_with("/nodePools") {
                "ListNodePoolsResponse"
            } else if path.contains("/nodePools/") {
                "NodePool"
            } else if path.ends_with("/clusters") {
                "ListClustersResponse"
            } else {
                "Cluster"
            };
            assert_eq!(
                crate::gcp::discovery::conforms("container", msg, &body),
                Ok(()),
                "{} {path}",
                req.method
            );
            Ok(body)
        }

        fn get(&mut self, path: &str) -> Result<Value, ApiError> {
            self.send(Method::GET, path, None)
        }

        fn post(&mut self, path: &str, body: Value) -> Result<Value, ApiError> {
            self.send(Method::POST, path, Some(body))
        }

        fn put(&mut self, path: &str, body: Value) -> Result<Value, ApiError> {
            self.send(Method::PUT, path, Some(body))
        }

        fn delete(&mut self, path: &str) -> Result<Value, ApiError> {
            self.send(Method::DELETE, path, None)
        }
    }

    fn gpu_cluster() -> Value {
        json!({"cluster": {
            "name": "c1",
            "resourceLabels": {"team": "ml"},
            "nodePools": [{
                "name": "gpu",
                "initialNodeCount": 1,
                "config": {
                    "machineType": "g2-standard-8",
                    "accelerators": [{"acceleratorCount": 1, "acceleratorType": "nvidia-l4",
                        "gpuDriverInstallationConfig": {"gpuDriverVersion": "LATEST"}}],
                    "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NO_SCHEDULE"}]
                },
                "autoscaling": {"enabled": true, "minNodeCount": 0, "maxNodeCount": 3}
            }]
        }})
    }

    #[test]
    fn clusters_are_described_for_their_kubernetes_api() {
        let mut h = Harness::default();
        let body = json!({"cluster": {"name": "k", "nodePools": [{
            "name": "gpu", "initialNodeCount": 2,
            "config": {"machineType": "g2-standard-8", "spot": true},
            "autoscaling": {"enabled": true, "maxNodeCount": 4}
        }]}});
        h.post(&clusters(), body).expect("create");
        h.at(100).get(&cluster("k")).expect("running");
        let described = h.state.kube_clusters();
        assert_eq!(described.len(), 1);
        let c = &described[0];
        assert_eq!(c.key, "gke/projects/p/locations/us-central1/clusters/k");
        assert!(c.ca_cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(c.ca_key_pem.contains("PRIVATE KEY"));
        assert!(!c.autopilot);
        let p = &c.pools[0];
        assert_eq!((p.name.as_str(), p.size, p.zones), ("gpu", 2, 3));
        assert_eq!(p.config["spot"], true);
        assert_eq!(p.autoscaling["maxNodeCount"], 4);
        assert!(h.get(&cluster("k")).expect("get").get("endpoint").is_none());
        h.state.set_endpoint(&c.key, "127.0.0.1:4443");
        h.state
            .set_endpoint("gke/projects/p/locations/us-central1/clusters/other", "x");
        assert_eq!(
            h.get(&cluster("k")).expect("get")["endpoint"],
            "127.0.0.1:4443"
        );
    }

    #[test]
    fn cluster_lifecycle_follows_the_clock() {
        let mut h = Harness::default();
        let op = h.at(0).post(&clusters(), gpu_cluster()).expect("create");
        assert_eq!(
            (op["operationType"].as_str(), op["status"].as_str()),
            (Some("CREATE_CLUSTER"), Some("RUNNING"))
        );
        let op_path = format!("{ROOT}/operations/{}", str_of(&op, "name"));

        let c = h.at(3).get(&cluster("c1")).expect("get");
        assert_eq!(c["status"], "PROVISIONING");
        assert_eq!(c["nodePools"][0]["status"], "PROVISIONING");
        assert_eq!(
            c["nodePools"][0]["config"]["accelerators"][0]["acceleratorCount"],
            "1"
        );
        let mid = h.get(&op_path).expect("op");
        assert_eq!(mid["progress"]["stages"][0]["status"], "DONE");
        assert_eq!(mid["progress"]["stages"][1]["status"], "RUNNING");

        let done = h.at(6).get(&op_path).expect("op");
        assert_eq!(done["status"], "DONE");
        assert!(done.get("endTime").is_some());
        let c = h.get(&cluster("c1")).expect("get");
        assert_eq!(c["status"], "RUNNING");
        assert_eq!(
            c["locations"],
            json!(["us-central1-a", "us-central1-b", "us-central1-c"])
        );
        assert_eq!(c["currentNodeCount"], 3);
        assert_eq!(c["releaseChannel"]["channel"], "REGULAR");
        assert_eq!(
            c["selfLink"],
            "https://container.googleapis.com/v1/projects/p/locations/us-central1/clusters/c1"
        );
        let ca = base64::engine::general_purpose::STANDARD
            .decode(str_of(&c["masterAuth"], "clusterCaCertificate"))
            .expect("base64 CA");
        assert!(String::from_utf8_lossy(&ca).starts_with("-----BEGIN CERTIFICATE-----"));

        let op = h.at(7).delete(&cluster("c1")).expect("delete");
        assert_eq!(op["operationType"], "DELETE_CLUSTER");
        let c = h.at(8).get(&cluster("c1")).expect("still there");
        assert_eq!(c["status"], "STOPPING");
        let gone = h.at(9).get(&cluster("c1")).expect_err("deleted");
        assert_eq!(gone.code, Code::NotFound);
        assert_eq!(
            gone.message,
            "Not found: projects/p/locations/us-central1/clusters/c1."
        );
    }

    #[test]
    fn changes_apply_when_their_operation_completes() {
        let mut h = Harness::default();
        h.at(0).post(&clusters(), gpu_cluster()).expect("create");
        let gpu = pool("c1", "gpu");
        let busy = h
            .at(1)
            .post(&format!("{gpu}:setSize"), json!({"nodeCount": 2}))
            .expect_err("create still running");
        assert_eq!(busy.code, Code::FailedPrecondition);
        assert!(busy
            .message
            .starts_with("Cluster is running incompatible operation operation-"));

        h.at(10)
            .post(&format!("{gpu}:setSize"), json!({"nodeCount": "2"}))
            .expect("resize");
        let c = h.at(11).get(&cluster("c1")).expect("get");
        assert_eq!(c["currentNodeCount"], 3, "old size while resizing");
        assert_eq!(c["nodePools"][0]["status"], "RECONCILING");
        assert_eq!(
            h.at(12).get(&cluster("c1")).expect("get")["currentNodeCount"],
            6
        );

        let update =
            json!({"taints": {"taints": []}, "labels": {"labels": {"a": "b"}}, "nodeVersion": "-"});
        h.at(20).put(&gpu, update).expect("update pool");
        let p = h.at(30).get(&gpu).expect("get pool");
        assert!(p["config"].get("taints").is_none());
        assert_eq!(p["config"]["labels"], json!({"a": "b"}));

        let c = h.get(&cluster("c1")).expect("get");
        let labels = format!("{}:setResourceLabels", cluster("c1"));
        let stale = json!({"resourceLabels": {"x": "y"}, "labelFingerprint": "nope"});
        let err = h
            .at(31)
            .post(&labels, stale)
            .expect_err("fingerprint mismatch");
        assert_eq!(
            (err.code, err.message.as_str()),
            (
                Code::FailedPrecondition,
                "Labels could not be set due to fingerprint mismatch."
            )
        );
        let fresh =
            json!({"resourceLabels": {"x": "y"}, "labelFingerprint": c["labelFingerprint"]});
        h.post(&labels, fresh).expect("labels");
        let c2 = h.at(40).get(&cluster("c1")).expect("get");
        assert_eq!(c2["resourceLabels"], json!({"x": "y"}));
        assert_ne!(c2["labelFingerprint"], c["labelFingerprint"]);

        let update = json!({"update": {"desiredReleaseChannel": {"channel": "STABLE"}, "desiredMasterVersion": "1.33"}});
        h.at(41).put(&cluster("c1"), update).expect("update");
        let c = h.at(42).get(&cluster("c1")).expect("get");
        assert_eq!(c["status"], "RECONCILING");
        assert_eq!(
            c["releaseChannel"]["channel"], "REGULAR",
            "unchanged until done"
        );
        let c = h.at(50).get(&cluster("c1")).expect("get");
        assert_eq!(c["releaseChannel"]["channel"], "STABLE");
        assert_eq!(c["currentMasterVersion"], VERSIONS[0]);
        let downgrade = json!({"update": {"desiredMasterVersion": "1.30"}});
        assert!(h.put(&cluster("c1"), downgrade).is_err());
    }

    #[test]
    fn create_errors_match_gke() {
        let mut h = Harness::default();
        let cases: Vec<(Value, Code, &str)> = vec![
            (
                json!({"cluster": {"name": "c"}}),
                Code::InvalidArgument,
                "Cluster.initial_node_count must be greater than zero.",
            ),
            (
                json!({"cluster": {"name": "Bad_Name", "initialNodeCount": 1}}),
                Code::InvalidArgument,
                "Invalid value for field \"cluster.name\"",
            ),
            (
                json!({"cluster": {"name": "c", "releaseChannel": {"channel": "FAST"}}}),
                Code::InvalidArgument,
                "Invalid value at 'cluster.release_channel.channel' (type.googleapis.com/google.container.v1.ReleaseChannel.Channel), \"FAST\"",
            ),
            (
                json!({"cluster": {"name": "c", "nodePools": [{"name": "p", "config": {"fooBar": 1}}]}}),
                Code::InvalidArgument,
                "Invalid JSON payload received. Unknown name \"fooBar\" at 'cluster.node_pools[0].config': Cannot find field.",
            ),
            (
                json!({"cluster": {"name": "c", "initialNodeCount": 1, "locations": ["europe-west4-a"]}}),
                Code::InvalidArgument,
                "is not a zone of us-central1",
            ),
            (
                json!({"cluster": {"name": "c", "autopilot": {"enabled": true}, "initialNodeCount": 1}}),
                Code::InvalidArgument,
                "Autopilot clusters do not support node pools",
            ),
            (
                json!({"cluster": {"name": "c", "autopilot": {"enabled": true},
                    "nodePools": [{"name": "gpu", "initialNodeCount": 1}]}}),
                Code::InvalidArgument,
                "Autopilot clusters do not support node pools",
            ),
            (
                json!({"cluster": {"name": "c", "nodePools": [{"name": "p", "config": {"spot": true, "preemptible": true}}]}}),
                Code::InvalidArgument,
                "spot and preemptible cannot both be set",
            ),
        ];
        for (body, code, message) in cases {
            let err = h.post(&clusters(), body.clone()).expect_err("rejected");
            assert_eq!(err.code, code, "{body}");
            assert!(err.message.contains(message), "{body}: {}", err.message);
        }
        let body = json!({"cluster": {"name": "c", "initialNodeCount": 2}});
        h.post(&clusters(), body.clone()).expect("create");
        assert_eq!(
            h.post(&clusters(), body).expect_err("exists").code,
            Code::AlreadyExists
        );
        let c = h.at(9).get(&cluster("c")).expect("get");
        assert_eq!(c["nodePools"][0]["name"], "default-pool");
        assert_eq!(c["nodeConfig"]["machineType"], "e2-medium");
    }

    #[test]
    fn autopilot_clusters_refuse_node_pool_operations() {
        let mut h = Harness::default();
        // What `gcloud container clusters create-auto` sends: a default pool GKE replaces.
        let body = json!({"cluster": {"name": "auto", "autopilot": {"enabled": true},
            "nodePools": [{"name": "default-pool", "initialNodeCount": 1,
                "config": {"oauthScopes": ["https://www.googleapis.com/auth/devstorage.read_only"]}}]}});
        h.at(0).post(&clusters(), body).expect("create");
        let pools = format!("{}/nodePools", cluster("auto"));
        let err = h
            .at(60)
            .post(
                &pools,
                json!({"nodePool": {"name": "gpu", "initialNodeCount": 1}}),
            )
            .expect_err("autopilot");
        assert_eq!(err.code, Code::FailedPrecondition);
        assert!(err
            .message
            .contains("Autopilot clusters do not support node pool operations"));
        assert_eq!(h.get(&pools).expect("list"), json!({}));
        // Regression: gcloud's describe of an Autopilot cluster crashed on a missing
        // node version ("The value is not a valid SemVer string: [None]").
        let c = h.at(600).get(&cluster("auto")).expect("describe");
        assert!(c["currentNodeVersion"].is_string(), "{c}");
        assert_eq!(c["currentNodeVersion"], c["currentMasterVersion"]);
    }

    #[test]
    fn failed_operations_leave_no_object_and_report_the_error() {
        let mut h = Harness::default();
        h.at(0).post(&clusters(), gpu_cluster()).expect("create");
        h.faults.fail_next_operation("container", "out of GPUs");
        let body = json!({"nodePool": {"name": "more", "initialNodeCount": 1}});
        let op = h
            .at(10)
            .post(&format!("{}/nodePools", cluster("c1")), body)
            .expect("create pool");
        let op = h
            .at(20)
            .get(&format!("{ROOT}/operations/{}", str_of(&op, "name")))
            .expect("op");
        assert_eq!(op["status"], "DONE");
        assert_eq!(op["error"], json!({"code": 13, "message": "out of GPUs"}));
        assert_eq!(op["statusMessage"], "out of GPUs");
        assert_eq!(
            h.get(&pool("c1", "more")).expect_err("gone").code,
            Code::NotFound
        );
        assert_eq!(h.get(&cluster("c1")).expect("cluster")["status"], "RUNNING");
    }

    #[test]
    fn zonal_aliases_and_wildcard_locations_serve_the_same_objects() {
        let mut h = Harness::default();
        let zone = "v1/projects/p/zones/us-central1-a";
        let body = |name: &str| json!({"cluster": {"name": name, "initialNodeCount": 1}});
        h.at(0)
            .post(&format!("{zone}/clusters"), body("z"))
            .expect("create via zones");
        h.post(&clusters(), body("r")).expect("create regional");
        let c = h
            .at(10)
            .get("v1/projects/p/locations/us-central1-a/clusters/z")
            .expect("get");
        assert_eq!(
            (c["zone"].as_str(), c["currentNodeCount"].as_i64()),
            (Some("us-central1-a"), Some(1))
        );
        let all = h.get("v1/projects/p/locations/-/clusters").expect("list");
        assert_eq!(all["clusters"].as_array().map(Vec::len), Some(2));
        assert_eq!(
            h.get("v1/projects/other/locations/-/clusters")
                .expect("list"),
            json!({})
        );
        let resize = format!("{zone}/clusters/z/nodePools/default-pool/setSize");
        h.post(&resize, json!({"nodeCount": 4}))
            .expect("zonal setSize");
        let ops = h
            .at(20)
            .get("v1/projects/p/zones/-/operations")
            .expect("ops");
        assert_eq!(ops["operations"].as_array().map(Vec::len), Some(3));
        let p = h
            .get(&format!("{zone}/clusters/z/nodePools/default-pool"))
            .expect("pool");
        assert_eq!(
            p["initialNodeCount"], 1,
            "initialNodeCount stays as created"
        );
    }

    #[test]
    fn versions_and_locations_resolve_like_gke() {
        assert_eq!(
            resolve_version("f", None, "RAPID").expect("default"),
            VERSIONS[0]
        );
        assert_eq!(
            resolve_version("f", Some("latest"), "").expect("latest"),
            VERSIONS[1]
        );
        assert_eq!(
            resolve_version("f", Some("1.31"), "").expect("minor"),
            VERSIONS[2]
        );
        assert_eq!(
            resolve_version("f", Some("1.29.1-gke.5"), "").expect("full"),
            "1.29.1-gke.5"
        );
        assert!(resolve_version("f", Some("2.0"), "").is_err());
        assert!(version_key(VERSIONS[0]) > version_key(VERSIONS[1]));
        assert!(is_zone("us-central1-a") && !is_zone("us-central1"));
        assert!(region_of("nowhere").is_err());
        assert_eq!(region_of("europe-west4-b").expect("zone"), "europe-west4");
        assert_eq!(default_zones("europe-west4-b"), ["europe-west4-b"]);
    }

    fn capacity(spec: Value) -> GcpCapacity {
        crate::capacity::CapacitySpec::from_json(json!({"gcp": spec}), &crate::quota_names())
            .expect("valid capacity")
            .gcp
    }

    fn t4_pool(name: &str, nodes: i64, gpus: i64) -> Value {
        json!({"nodePool": {"name": name, "initialNodeCount": nodes, "config": {
            "machineType": "n1-standard-8",
            "accelerators": [{"acceleratorType": "nvidia-tesla-t4", "acceleratorCount": gpus}],
        }}})
    }

    /// A zonal cluster in `zone`, running at second 10.
    fn zonal_cluster(h: &mut Harness, name: &str, zone: &str) -> String {
        let root = format!("v1/projects/p/locations/{zone}/clusters");
        h.at(0)
            .post(
                &root,
                json!({"cluster": {"name": name, "initialNodeCount": 1}}),
            )
            .expect("create cluster");
        h.at(10).get(&format!("{root}/{name}")).expect("running");
        format!("{root}/{name}")
    }

    #[test]
    fn a_pool_in_a_stocked_out_zone_ends_in_error_as_gke_leaves_it() {
        let mut h = Harness {
            capacity: capacity(
                json!({"stockouts": [{"zone": "us-central1-a", "machineType": "n1-standard-8"}]}),
            ),
            ..Harness::default()
        };
        let a = zonal_cluster(&mut h, "a", "us-central1-a");
        let op = h
            .at(20)
            .post(&format!("{a}/nodePools"), t4_pool("gpu", 2, 1))
            .expect("GKE accepts the request");
        assert_eq!(op["status"], "RUNNING");
        assert!(op.get("error").is_none(), "no error before it ends");
        let op = h
            .at(30)
            .get(&format!(
                "v1/projects/p/locations/us-central1-a/operations/{}",
                str_of(&op, "name")
            ))
            .expect("operation");
        assert_eq!(op["status"], "DONE");
        assert_eq!(op["error"]["code"], 8);
        let message = op["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.starts_with("Google Compute Engine: Not all instances running in IGM after 3s. Expected 2, running 0, transitioning 2. Current errors: [GCE_STOCKOUT]: Instance 'gke-a-gpu-")
                && message.contains("The zone 'projects/p/zones/us-central1-a' does not have enough resources available to fulfill the request."),
            "{message}"
        );
        assert_eq!(op["statusMessage"], op["error"]["message"]);
        let failed = h
            .get(&format!("{a}/nodePools/gpu"))
            .expect("the pool stays");
        assert_eq!(failed["status"], "ERROR");
        assert_eq!(failed["statusMessage"], op["error"]["message"]);
        assert_eq!(h.get(&a).expect("cluster")["status"], "RUNNING");
        let kube = h.state.kube_clusters();
        assert_eq!(
            kube[0]
                .pools
                .iter()
                .find(|p| p.name == "gpu")
                .map(|p| p.size),
            Some(0),
            "no nodes"
        );
        h.at(40)
            .delete(&format!("{a}/nodePools/gpu"))
            .expect("an ERROR pool can be deleted");

        // The same pool in another zone is made; so is one spread over a stocked-out
        // zone and one with capacity.
        let b = zonal_cluster(&mut h, "b", "us-central1-b");
        h.at(50)
            .post(&format!("{b}/nodePools"), t4_pool("gpu", 2, 1))
            .expect("create");
        assert_eq!(
            h.at(60).get(&format!("{b}/nodePools/gpu")).expect("pool")["status"],
            "RUNNING"
        );
        h.at(70)
            .post(
                &clusters(),
                json!({"cluster": {"name": "r", "initialNodeCount": 1}}),
            )
            .expect("regional cluster");
        let mut spread = t4_pool("gpu", 1, 1);
        spread["nodePool"]["locations"] = json!(["us-central1-a", "us-central1-b"]);
        h.at(80)
            .post(&format!("{}/nodePools", cluster("r")), spread)
            .expect("create");
        assert_eq!(
            h.at(90).get(&pool("r", "gpu")).expect("pool")["status"],
            "RUNNING"
        );
        // An autoscaled pool starting empty makes no node, so nothing is short yet.
        let mut empty = t4_pool("later", 0, 1);
        empty["nodePool"]["autoscaling"] =
            json!({"enabled": true, "minNodeCount": 0, "maxNodeCount": 3});
        h.at(100)
            .post(&format!("{a}/nodePools"), empty)
            .expect("create");
        assert_eq!(
            h.at(110)
                .get(&format!("{a}/nodePools/later"))
                .expect("pool")["status"],
            "RUNNING"
        );
    }

    #[test]
    fn a_pool_beyond_the_regional_quota_is_refused_with_gkes_403() {
        let mut h = Harness {
            capacity: capacity(
                json!({"quotas": [{"project": "p", "region": "us-central1", "metric": "NVIDIA_T4_GPUS", "limit": 0}]}),
            ),
            ..Harness::default()
        };
        let a = zonal_cluster(&mut h, "a", "us-central1-a");
        let err = h
            .at(20)
            .post(&format!("{a}/nodePools"), t4_pool("gpu", 1, 4))
            .expect_err("no T4 quota");
        assert_eq!((err.code, err.http), (Code::PermissionDenied, 403));
        assert_eq!(
            err.message,
            "Insufficient regional quota to satisfy request: resource \"NVIDIA_T4_GPUS\": request requires '4.0' and is short '4.0'. project has a quota of '0.0' with '0.0' available. View and manage quotas at https://console.cloud.google.com/iam-admin/quotas?usage=USED&project=p."
        );
        assert_eq!(
            h.get(&format!("{a}/nodePools/gpu"))
                .expect_err("not made")
                .code,
            Code::NotFound
        );
        assert_eq!(
            h.get(&a).expect("cluster")["status"],
            "RUNNING",
            "no operation started"
        );

        // Quota counts what the region's pools already hold.
        h.capacity = capacity(json!({"quotas": [{"metric": "NVIDIA_T4_GPUS", "limit": 6}]}));
        h.at(30)
            .post(&format!("{a}/nodePools"), t4_pool("first", 1, 4))
            .expect("4 of 6");
        let err = h
            .at(40)
            .post(&format!("{a}/nodePools"), t4_pool("second", 1, 4))
            .expect_err("only 2 left");
        assert!(err.message.contains("request requires '4.0' and is short '2.0'. project has a quota of '6.0' with '2.0' available."), "{}", err.message);
        // Other projects and regions have quota of their own.
        let eu = "v1/projects/p/locations/europe-west4-a/clusters";
        h.at(50)
            .post(
                eu,
                json!({"cluster": {"name": "eu", "initialNodeCount": 1}}),
            )
            .expect("cluster");
        h.at(60)
            .post(&format!("{eu}/eu/nodePools"), t4_pool("gpu", 1, 4))
            .expect("europe-west4 has its own");
    }

    #[test]
    fn growing_a_pool_needs_quota_and_capacity_for_the_new_nodes() {
        let mut h = Harness::default();
        let a = zonal_cluster(&mut h, "a", "us-central1-a");
        h.at(20)
            .post(&format!("{a}/nodePools"), t4_pool("gpu", 1, 2))
            .expect("create");
        h.at(30)
            .get(&format!("{a}/nodePools/gpu"))
            .expect("running");
        let resize = format!("{a}/nodePools/gpu:setSize");
        let err = h
            .post(&resize, json!({"nodeCount": 9}))
            .expect_err("18 T4s exceed the default 16");
        assert_eq!(err.code, Code::PermissionDenied);
        assert!(
            err.message
                .contains("request requires '16.0' and is short '2.0'"),
            "{}",
            err.message
        );

        h.capacity = capacity(
            json!({"stockouts": [{"zone": "us-central1-a", "acceleratorType": "nvidia-tesla-t4"}]}),
        );
        let op = h
            .at(40)
            .post(&resize, json!({"nodeCount": 3}))
            .expect("accepted");
        let op = h
            .at(50)
            .get(&format!(
                "v1/projects/p/locations/us-central1-a/operations/{}",
                str_of(&op, "name")
            ))
            .expect("operation");
        assert!(
            op["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("[GCE_STOCKOUT]")),
            "{op}"
        );
        let pool = h.get(&format!("{a}/nodePools/gpu")).expect("pool");
        assert_eq!(pool["status"], "RUNNING_WITH_ERROR");
        assert_eq!(
            h.get(&a).expect("cluster")["currentNodeCount"],
            2,
            "the old size stays"
        );
        // Shrinking needs nothing new.
        h.at(60)
            .post(&resize, json!({"nodeCount": 0}))
            .expect("shrink");
        let pool = h.at(70).get(&format!("{a}/nodePools/gpu")).expect("pool");
        assert_eq!(pool["status"], "RUNNING");
        assert!(pool.get("statusMessage").is_none());
    }
}
