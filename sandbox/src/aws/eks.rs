//! Amazon EKS (REST-JSON): clusters, managed node groups and their updates, with the
//! states EKS moves them through (CREATING → ACTIVE, UPDATING → ACTIVE, DELETING → gone)
//! on the sandbox clock. Changes an update asks for take effect when it completes, the
//! way EKS keeps reporting the old configuration while it works. This file also hands
//! the clusters to the Kubernetes side (`kube_clusters`): node groups become node pools
//! with the labels, taints and resources EKS nodes carry. EKS refuses here what it
//! refuses in the cloud: subnets the account does not have or all in one zone, a cluster
//! or node role that does not exist or does not trust EKS or EC2.

use std::collections::BTreeMap;

use base64::Engine as _;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::capabilities::{Capabilities, ClusterFacts};
use super::iam::{self, Iam};
use super::instances::{instance_gpus, instance_shape};
use super::pod_identity::PodIdentity;
use super::vpc::Network;
use super::{due, duration, AwsCtx, AwsError, AwsRequest, AwsResponse, ACCOUNT};
use crate::capacity::AwsCapacity;
use crate::k8s::{CloudCluster, NodePoolInfo};

/// Realistic durations in seconds, multiplied by the sandbox's time scale.
mod base {
    pub const CLUSTER_CREATE: f64 = 8.0;
    pub const CLUSTER_UPDATE: f64 = 3.0;
    pub const CLUSTER_DELETE: f64 = 3.0;
    pub const NODEGROUP_CREATE: f64 = 4.0;
    pub const NODEGROUP_UPDATE: f64 = 3.0;
    pub const NODEGROUP_DELETE: f64 = 3.0;
}

/// Kubernetes versions EKS offers, oldest first.
const VERSIONS: &[&str] = &["1.29", "1.30", "1.31", "1.32", "1.33", "1.34"];
const DEFAULT_VERSION: &str = "1.31";
const PLATFORM_VERSION: &str = "eks.1";
const LOG_TYPES: &[&str] = &[
    "api",
    "audit",
    "authenticator",
    "controllerManager",
    "scheduler",
];
const AMI_TYPES: &[&str] = &[
    "AL2_x86_64",
    "AL2_x86_64_GPU",
    "AL2_ARM_64",
    "CUSTOM",
    "BOTTLEROCKET_ARM_64",
    "BOTTLEROCKET_x86_64",
    "BOTTLEROCKET_ARM_64_FIPS",
    "BOTTLEROCKET_x86_64_FIPS",
    "BOTTLEROCKET_ARM_64_NVIDIA",
    "BOTTLEROCKET_x86_64_NVIDIA",
    "BOTTLEROCKET_ARM_64_NVIDIA_FIPS",
    "BOTTLEROCKET_x86_64_NVIDIA_FIPS",
    "WINDOWS_CORE_2019_x86_64",
    "WINDOWS_FULL_2019_x86_64",
    "WINDOWS_CORE_2022_x86_64",
    "WINDOWS_FULL_2022_x86_64",
    "WINDOWS_CORE_2025_x86_64",
    "WINDOWS_FULL_2025_x86_64",
    "AL2023_x86_64_STANDARD",
    "AL2023_ARM_64_STANDARD",
    "AL2023_x86_64_NEURON",
    "AL2023_x86_64_NVIDIA",
    "AL2023_ARM_64_NVIDIA",
];
const CAPACITY_TYPES: &[&str] = &["ON_DEMAND", "SPOT", "CAPACITY_BLOCK"];
const TAINT_EFFECTS: &[&str] = &["NO_SCHEDULE", "NO_EXECUTE", "PREFER_NO_SCHEDULE"];
const AUTH_MODES: &[&str] = &["API", "API_AND_CONFIG_MAP", "CONFIG_MAP"];
/// The authentication modes in the only order EKS moves a cluster through them: one step
/// forward per update, never back.
const AUTH_MODE_STEPS: &[&str] = &["CONFIG_MAP", "API_AND_CONFIG_MAP", "API"];

const CREATING: &str = "CREATING";
const ACTIVE: &str = "ACTIVE";
const UPDATING: &str = "UPDATING";
const DELETING: &str = "DELETING";
const FAILED: &str = "FAILED";
const CREATE_FAILED: &str = "CREATE_FAILED";

/// Every emulated EKS cluster, with its node groups and updates.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Eks {
    #[serde(default)]
    clusters: Vec<ClusterRecord>,
    /// The clusters' managed capabilities (ACK, KRO, Argo CD).
    #[serde(default)]
    pub(crate) capabilities: Capabilities,
    /// The clusters' add-ons and pod identity associations.
    #[serde(default)]
    pub(crate) pod_identity: PodIdentity,
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct ClusterRecord {
    region: String,
    name: String,
    status: String,
    version: String,
    role_arn: String,
    created_at: DateTime<Utc>,
    /// When the running create or delete completes.
    until: Option<DateTime<Utc>>,
    /// The failure a fault planned for the running create.
    failure: Option<String>,
    /// The Kubernetes API server's URL, once the sandbox serves one.
    endpoint: String,
    ca_cert_pem: String,
    /// The CA's private key, for the Kubernetes API server's serving certificate.
    ca_key_pem: String,
    /// The 32 hex digits of the OIDC issuer URL.
    oidc_id: String,
    /// `resourcesVpcConfig` as DescribeCluster shows it.
    vpc: Value,
    kubernetes_network_config: Value,
    /// The log types turned on.
    enabled_logs: Vec<String>,
    access_config: Value,
    tags: BTreeMap<String, String>,
    client_request_token: Option<String>,
    health_issues: Vec<Value>,
    updates: Vec<UpdateRecord>,
    nodegroups: Vec<NodegroupRecord>,
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct UpdateRecord {
    id: String,
    /// The node group the update is for; `None` for cluster updates.
    nodegroup: Option<String>,
    status: String,
    update_type: String,
    params: Vec<(String, String)>,
    created_at: DateTime<Utc>,
    until: Option<DateTime<Utc>>,
    failure: Option<String>,
    change: Option<Change>,
}

/// What an update does when it completes.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
enum Change {
    Version {
        version: String,
    },
    /// Keys to set in `resourcesVpcConfig`.
    Vpc {
        patch: Map<String, Value>,
    },
    Logging {
        enabled: Vec<String>,
    },
    /// The new `accessConfig.authenticationMode`.
    Access {
        authentication_mode: String,
    },
    Nodegroup {
        scaling: Option<Scaling>,
        add_labels: BTreeMap<String, String>,
        remove_labels: Vec<String>,
        add_taints: Vec<Taint>,
        remove_taints: Vec<Taint>,
        update_config: Option<Value>,
    },
}

#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Scaling {
    min_size: i64,
    max_size: i64,
    desired_size: i64,
}

#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Taint {
    key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    value: Option<String>,
    effect: String,
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct NodegroupRecord {
    name: String,
    /// The uuid at the end of the node group's ARN.
    uid: String,
    status: String,
    created_at: DateTime<Utc>,
    modified_at: DateTime<Utc>,
    until: Option<DateTime<Utc>>,
    failure: Option<String>,
    /// The health issue code the planned failure is reported with;
    /// `NodeCreationFailure` when unset.
    failure_code: Option<String>,
    scaling: Scaling,
    instance_types: Vec<String>,
    subnets: Vec<String>,
    ami_type: String,
    capacity_type: String,
    node_role: String,
    labels: BTreeMap<String, String>,
    taints: Vec<Taint>,
    disk_size: Option<i64>,
    tags: BTreeMap<String, String>,
    update_config: Value,
    remote_access: Value,
    launch_template: Value,
    version: String,
    release_version: String,
    client_request_token: Option<String>,
    health_issues: Vec<Value>,
}

/// `eks/<region>/<name>`, the Kubernetes side's key for a cluster.
fn kube_key(region: &str, name: &str) -> String {
    format!("eks/{region}/{name}")
}

/// Seconds since the epoch, as REST-JSON timestamps travel.
fn epoch(t: DateTime<Utc>) -> Value {
    json!(t.timestamp_millis() as f64 / 1000.0)
}

fn invalid(message: impl Into<String>) -> AwsError {
    AwsError::new(400, "InvalidParameterException", message)
}

fn in_use(message: impl Into<String>) -> AwsError {
    AwsError::new(409, "ResourceInUseException", message)
}

fn cluster_not_found(name: &str) -> AwsError {
    AwsError::new(
        404,
        "ResourceNotFoundException",
        format!("No cluster found for name: {name}."),
    )
}

fn nodegroup_not_found(name: &str) -> AwsError {
    AwsError::new(
        404,
        "ResourceNotFoundException",
        format!("No node group found for name: {name}."),
    )
}

/// The request body as an object (an empty body is an empty object).
fn body_of(req: &AwsRequest) -> Result<Map<String, Value>, AwsError> {
    match req.json()? {
        Value::Null => Ok(Map::new()),
        Value::Object(m) => Ok(m),
        _ => Err(AwsError::new(
            400,
            "SerializationException",
            "the request body must be a JSON object",
        )),
    }
}

/// An optional string member; any other type is an error.
fn opt_str(body: &Map<String, Value>, key: &str) -> Result<Option<String>, AwsError> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(invalid(format!("{key} must be a string"))),
    }
}

/// A required, non-empty string member.
fn req_str(body: &Map<String, Value>, key: &str) -> Result<String, AwsError> {
    opt_str(body, key)?
        .filter(|s| !s.is_empty())
        .ok_or_else(|| invalid(format!("{key} is required")))
}

fn opt_bool(body: &Map<String, Value>, key: &str) -> Result<Option<bool>, AwsError> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(invalid(format!("{key} must be a boolean"))),
    }
}

fn opt_int(body: &Map<String, Value>, key: &str) -> Result<Option<i64>, AwsError> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_i64()
            .map(Some)
            .ok_or_else(|| invalid(format!("{key} must be an integer"))),
    }
}

fn opt_strings(body: &Map<String, Value>, key: &str) -> Result<Option<Vec<String>>, AwsError> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| invalid(format!("{key} must be a list of strings")))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        Some(_) => Err(invalid(format!("{key} must be a list of strings"))),
    }
}

fn opt_object(
    body: &Map<String, Value>,
    key: &str,
) -> Result<Option<Map<String, Value>>, AwsError> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(m)) => Ok(Some(m.clone())),
        Some(_) => Err(invalid(format!("{key} must be an object"))),
    }
}

fn string_map(body: &Map<String, Value>, key: &str) -> Result<BTreeMap<String, String>, AwsError> {
    let Some(m) = opt_object(body, key)? else {
        return Ok(BTreeMap::new());
    };
    m.iter()
        .map(|(k, v)| {
            v.as_str()
                .map(|v| (k.clone(), v.to_string()))
                .ok_or_else(|| invalid(format!("{key} values must be strings")))
        })
        .collect()
}

/// Names of clusters and node groups: `^[0-9A-Za-z][A-Za-z0-9\-_]*`, up to `max`.
fn check_name(what: &str, name: &str, max: usize) -> Result<(), AwsError> {
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphanumeric());
    let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !first_ok || !rest_ok || name.len() > max {
        return Err(invalid(format!(
            "The {what} name {name:?} is invalid: it must start with a letter or digit, contain only letters, digits, hyphens and underscores, and be at most {max} characters long."
        )));
    }
    Ok(())
}

fn check_role_arn(member: &str, arn: &str) -> Result<(), AwsError> {
    let ok = arn
        .strip_prefix("arn:aws")
        .and_then(|rest| rest.split_once(":iam::"))
        .and_then(|(_, rest)| rest.split_once(":role/"))
        .is_some_and(|(account, role)| {
            account.len() == 12 && account.bytes().all(|b| b.is_ascii_digit()) && !role.is_empty()
        });
    if ok {
        Ok(())
    } else {
        Err(invalid(format!(
            "{member} {arn:?} is not a valid IAM role ARN (arn:aws:iam::<account>:role/<name>)"
        )))
    }
}

fn minor(version: &str) -> Option<(u32, u32)> {
    let (major, minor) = version.split_once('.')?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}

fn check_version(version: &str) -> Result<(), AwsError> {
    if VERSIONS.contains(&version) {
        Ok(())
    } else {
        Err(invalid(format!("unsupported Kubernetes version {version}")))
    }
}

/// The logging setup as EKS shows it: the enabled types, then the disabled ones.
fn render_logging(enabled: &[String]) -> Value {
    let on: Vec<&str> = LOG_TYPES
        .iter()
        .copied()
        .filter(|t| enabled.iter().any(|e| e == t))
        .collect();
    let off: Vec<&str> = LOG_TYPES
        .iter()
        .copied()
        .filter(|t| !on.contains(t))
        .collect();
    let mut setups = Vec::new();
    if !on.is_empty() {
        setups.push(json!({"types": on, "enabled": true}));
    }
    if !off.is_empty() {
        setups.push(json!({"types": off, "enabled": false}));
    }
    json!({"clusterLogging": setups})
}

/// The log types a `logging` member turns on, starting from `current`.
fn apply_logging(
    current: &[String],
    logging: &Map<String, Value>,
) -> Result<Vec<String>, AwsError> {
    let mut enabled: Vec<String> = current.to_vec();
    let setups = match logging.get("clusterLogging") {
        None | Some(Value::Null) => return Ok(enabled),
        Some(Value::Array(a)) => a,
        Some(_) => return Err(invalid("logging.clusterLogging must be a list")),
    };
    for setup in setups {
        let Some(setup) = setup.as_object() else {
            return Err(invalid("logging.clusterLogging entries must be objects"));
        };
        let on = opt_bool(setup, "enabled")?.unwrap_or(false);
        for t in opt_strings(setup, "types")?.unwrap_or_default() {
            if !LOG_TYPES.contains(&t.as_str()) {
                return Err(invalid(format!(
                    "Invalid log type {t}; valid types are {}",
                    LOG_TYPES.join(", ")
                )));
            }
            enabled.retain(|e| *e != t);
            if on {
                enabled.push(t);
            }
        }
    }
    Ok(enabled)
}

/// `n` hex digits derived from `seed`, for ids that must stay the same for the same
/// input (a VPC per subnet, an AMI per release).
fn stable_hex(seed: &str, n: usize) -> String {
    let mut out = String::new();
    let mut i = 0u8;
    while out.len() < n {
        out.push_str(&format!(
            "{:016x}",
            crate::common::hash::fnv1a(format!("{seed}/{i}").as_bytes())
        ));
        i = i.wrapping_add(1);
    }
    out.truncate(n);
    out
}

fn parse_taint(v: &Value, field: &str) -> Result<Taint, AwsError> {
    let Some(t) = v.as_object() else {
        return Err(invalid(format!("{field} entries must be objects")));
    };
    let key = opt_str(t, "key")?.unwrap_or_default();
    if key.is_empty() || key.len() > 63 {
        return Err(invalid(format!(
            "{field}: a taint key must be 1 to 63 characters"
        )));
    }
    let value = opt_str(t, "value")?;
    if value.as_ref().is_some_and(|v| v.len() > 63) {
        return Err(invalid(format!(
            "{field}: a taint value must be at most 63 characters"
        )));
    }
    let effect = opt_str(t, "effect")?.unwrap_or_default();
    if !TAINT_EFFECTS.contains(&effect.as_str()) {
        return Err(invalid(format!(
            "{field}: taint effect {effect:?} is not one of {}",
            TAINT_EFFECTS.join(", ")
        )));
    }
    Ok(Taint { key, value, effect })
}

fn parse_taints(v: Option<&Value>, field: &str) -> Result<Vec<Taint>, AwsError> {
    match v {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items.iter().map(|t| parse_taint(t, field)).collect(),
        Some(_) => Err(invalid(format!("{field} must be a list"))),
    }
}

fn check_labels(labels: &BTreeMap<String, String>) -> Result<(), AwsError> {
    for (k, v) in labels {
        if k.is_empty() || k.len() > 63 || v.is_empty() || v.len() > 63 {
            return Err(invalid(format!(
                "Label {k}={v} is invalid: keys and values must be 1 to 63 characters"
            )));
        }
    }
    Ok(())
}

/// Checks a complete scaling configuration the way EKS words its complaints.
fn check_scaling(s: &Scaling) -> Result<(), AwsError> {
    if s.max_size < 1 {
        return Err(invalid(format!(
            "Maximum capacity {} should be greater than or equal to 1",
            s.max_size
        )));
    }
    if s.min_size < 0 || s.desired_size < 0 {
        return Err(invalid("Capacity values must not be negative"));
    }
    if s.min_size > s.desired_size {
        return Err(invalid(format!(
            "Minimum capacity {} can't be greater than desired size {}",
            s.min_size, s.desired_size
        )));
    }
    if s.desired_size > s.max_size {
        return Err(invalid(format!(
            "Desired capacity {} can't be greater than max size {}",
            s.desired_size, s.max_size
        )));
    }
    Ok(())
}

/// `scalingConfig` laid over `base`.
fn merge_scaling(base: &Scaling, v: &Map<String, Value>) -> Result<Scaling, AwsError> {
    Ok(Scaling {
        min_size: opt_int(v, "minSize")?.unwrap_or(base.min_size),
        max_size: opt_int(v, "maxSize")?.unwrap_or(base.max_size),
        desired_size: opt_int(v, "desiredSize")?.unwrap_or(base.desired_size),
    })
}

/// A Kubernetes minor version as an EKS API server and its kubelets report it
/// (`1.31` → `v1.31.5-eks-5d632ec`).
fn server_version(version: &str) -> String {
    let release = release_version(version);
    let patch = release.split('-').next().unwrap_or(version);
    format!("v{patch}-eks-5d632ec")
}

/// The node image release EKS picks for a Kubernetes version.
fn release_version(version: &str) -> String {
    let patch = match version {
        "1.29" => "1.29.13",
        "1.30" => "1.30.9",
        "1.31" => "1.31.5",
        "1.32" => "1.32.1",
        "1.33" => "1.33.0",
        "1.34" => "1.34.0",
        other => other,
    };
    format!("{patch}-20250212")
}

fn node_effect(effect: &str) -> &str {
    match effect {
        "NO_SCHEDULE" => "NoSchedule",
        "NO_EXECUTE" => "NoExecute",
        "PREFER_NO_SCHEDULE" => "PreferNoSchedule",
        other => other,
    }
}

impl NodegroupRecord {
    fn arn(&self, region: &str, cluster: &str) -> String {
        format!(
            "arn:aws:eks:{region}:{ACCOUNT}:nodegroup/{cluster}/{}/{}",
            self.name, self.uid
        )
    }

    fn image_id(&self, region: &str) -> String {
        format!(
            "ami-{}",
            stable_hex(
                &format!("{region}/{}/{}", self.ami_type, self.release_version),
                17
            )
        )
    }

    fn render(&self, region: &str, cluster: &str) -> Value {
        let mut ng = json!({
            "nodegroupName": self.name,
            "nodegroupArn": self.arn(region, cluster),
            "clusterName": cluster,
            "version": self.version,
            "releaseVersion": self.release_version,
            "createdAt": epoch(self.created_at),
            "modifiedAt": epoch(self.modified_at),
            "status": self.status,
            "capacityType": self.capacity_type,
            "scalingConfig": self.scaling,
            "instanceTypes": self.instance_types,
            "subnets": self.subnets,
            "amiType": self.ami_type,
            "nodeRole": self.node_role,
            "labels": self.labels,
            "health": {"issues": self.health_issues},
            "updateConfig": self.update_config,
            "tags": self.tags,
        });
        if !self.taints.is_empty() {
            ng["taints"] = json!(self.taints);
        }
        if let Some(disk) = self.disk_size {
            ng["diskSize"] = json!(disk);
        }
        if !self.remote_access.is_null() {
            ng["remoteAccess"] = self.remote_access.clone();
        }
        if !self.launch_template.is_null() {
            ng["launchTemplate"] = self.launch_template.clone();
        }
        if self.status != CREATING && self.status != CREATE_FAILED {
            ng["resources"] = json!({
                "autoScalingGroups": [{"name": format!("eks-{}-{}", self.name, self.uid)}],
            });
        }
        ng
    }

    /// The node pool the Kubernetes side builds this node group's nodes from.
    fn node_pool(&self, region: &str) -> NodePoolInfo {
        let instance_type = self
            .instance_types
            .first()
            .cloned()
            .unwrap_or_else(|| "t3.medium".to_string());
        let mut labels = self.labels.clone();
        for (k, v) in [
            ("eks.amazonaws.com/nodegroup", self.name.clone()),
            ("eks.amazonaws.com/capacityType", self.capacity_type.clone()),
            ("eks.amazonaws.com/nodegroup-image", self.image_id(region)),
            ("node.kubernetes.io/instance-type", instance_type.clone()),
            ("topology.kubernetes.io/region", region.to_string()),
            ("topology.kubernetes.io/zone", format!("{region}a")),
        ] {
            labels.insert(k.to_string(), v);
        }
        let taints = self
            .taints
            .iter()
            .map(|t| {
                let mut taint = json!({"key": t.key, "effect": node_effect(&t.effect)});
                if let Some(v) = t.value.as_deref().filter(|v| !v.is_empty()) {
                    taint["value"] = json!(v);
                }
                taint
            })
            .collect();
        let mut extended_resources = BTreeMap::new();
        if let Some(gpus) = instance_gpus(&instance_type) {
            extended_resources.insert("nvidia.com/gpu".to_string(), gpus.to_string());
        }
        let (cpu, memory_mib) = instance_shape(&instance_type);
        NodePoolInfo {
            name: self.name.clone(),
            machine_type: instance_type,
            node_count: self.scaling.desired_size,
            max_nodes: self.scaling.max_size.max(self.scaling.desired_size),
            labels,
            taints,
            extended_resources,
            cpu: cpu.to_string(),
            memory: format!("{memory_mib}Mi"),
            version: Some(server_version(&self.version)),
        }
    }

    /// Applies what a completed update asked for.
    fn apply(&mut self, change: &Change) {
        let Change::Nodegroup {
            scaling,
            add_labels,
            remove_labels,
            add_taints,
            remove_taints,
            update_config,
        } = change
        else {
            return;
        };
        if let Some(s) = scaling {
            self.scaling = s.clone();
        }
        for k in remove_labels {
            self.labels.remove(k);
        }
        self.labels
            .extend(add_labels.iter().map(|(k, v)| (k.clone(), v.clone())));
        self.taints.retain(|t| {
            !remove_taints
                .iter()
                .any(|r| r.key == t.key && r.effect == t.effect)
        });
        for t in add_taints {
            self.taints
                .retain(|old| !(old.key == t.key && old.effect == t.effect));
            self.taints.push(t.clone());
        }
        if let Some(u) = update_config {
            self.update_config = u.clone();
        }
    }
}

impl UpdateRecord {
    fn render(&self) -> Value {
        let params: Vec<Value> = self
            .params
            .iter()
            .map(|(t, v)| json!({"type": t, "value": v}))
            .collect();
        let errors: Vec<Value> = self
            .failure
            .iter()
            .filter(|_| self.status == "Failed")
            .map(|m| json!({"errorCode": "Unknown", "errorMessage": m, "resourceIds": []}))
            .collect();
        json!({
            "id": self.id,
            "status": self.status,
            "type": self.update_type,
            "params": params,
            "createdAt": epoch(self.created_at),
            "errors": errors,
        })
    }
}

impl ClusterRecord {
    fn arn(&self) -> String {
        format!(
            "arn:aws:eks:{}:{ACCOUNT}:cluster/{}",
            self.region, self.name
        )
    }

    fn has_control_plane(&self) -> bool {
        matches!(self.status.as_str(), ACTIVE | UPDATING | DELETING)
    }

    fn render(&self) -> Value {
        let mut c = json!({
            "name": self.name,
            "arn": self.arn(),
            "createdAt": epoch(self.created_at),
            "version": self.version,
            "roleArn": self.role_arn,
            "resourcesVpcConfig": self.vpc,
            "kubernetesNetworkConfig": self.kubernetes_network_config,
            "logging": render_logging(&self.enabled_logs),
            "identity": {"oidc": {"issuer": format!(
                "https://oidc.eks.{}.amazonaws.com/id/{}", self.region, self.oidc_id
            )}},
            "status": self.status,
            "certificateAuthority": {},
            "platformVersion": PLATFORM_VERSION,
            "tags": self.tags,
            "health": {"issues": self.health_issues},
            "accessConfig": self.access_config,
            "upgradePolicy": {"supportType": "EXTENDED"},
        });
        // EKS shows the endpoint and CA once the control plane is up.
        if self.has_control_plane() {
            if !self.endpoint.is_empty() {
                c["endpoint"] = json!(self.endpoint);
            }
            c["certificateAuthority"] = json!({
                "data": base64::engine::general_purpose::STANDARD.encode(&self.ca_cert_pem),
            });
        }
        if let Some(token) = &self.client_request_token {
            c["clientRequestToken"] = json!(token);
        }
        c
    }

    fn nodegroup_index(&self, name: &str) -> Result<usize, AwsError> {
        self.nodegroups
            .iter()
            .position(|n| n.name == name)
            .ok_or_else(|| nodegroup_not_found(name))
    }

    /// Moves this cluster's running work to where the clock says it is.
    fn settle(&mut self, now: DateTime<Utc>) {
        if self.status == CREATING && due(self.until, now) {
            self.until = None;
            match self.failure.take() {
                Some(message) => {
                    self.status = FAILED.to_string();
                    self.health_issues = vec![json!({
                        "code": "InternalFailure",
                        "message": message,
                        "resourceIds": [self.arn()],
                    })];
                }
                None => self.status = ACTIVE.to_string(),
            }
        }
        for i in 0..self.updates.len() {
            let update = &self.updates[i];
            if update.status != "InProgress" || !due(update.until, now) {
                continue;
            }
            let failed = update.failure.is_some();
            let change = update.change.clone();
            let target = update.nodegroup.clone();
            let finished = update.until.unwrap_or(now);
            if !failed {
                if let Some(change) = &change {
                    self.apply(target.as_deref(), change);
                }
            }
            let update = &mut self.updates[i];
            update.status = if failed { "Failed" } else { "Successful" }.to_string();
            update.until = None;
            match target {
                Some(ng) => {
                    if let Some(n) = self.nodegroups.iter_mut().find(|n| n.name == ng) {
                        if n.status == UPDATING {
                            n.status = ACTIVE.to_string();
                        }
                        n.modified_at = finished;
                    }
                }
                None => {
                    if self.status == UPDATING {
                        self.status = ACTIVE.to_string();
                    }
                }
            }
        }
        for n in &mut self.nodegroups {
            if n.status == CREATING && due(n.until, now) {
                n.until = None;
                n.modified_at = now;
                match n.failure.take() {
                    Some(message) => {
                        n.status = CREATE_FAILED.to_string();
                        let code = n
                            .failure_code
                            .take()
                            .unwrap_or_else(|| "NodeCreationFailure".to_string());
                        n.health_issues = vec![json!({
                            "code": code,
                            "message": message,
                            "resourceIds": [format!("eks-{}-{}", n.name, n.uid)],
                        })];
                    }
                    None => n.status = ACTIVE.to_string(),
                }
            }
        }
        self.nodegroups
            .retain(|n| !(n.status == DELETING && due(n.until, now)));
    }

    fn apply(&mut self, nodegroup: Option<&str>, change: &Change) {
        match (nodegroup, change) {
            (Some(ng), change) => {
                if let Some(n) = self.nodegroups.iter_mut().find(|n| n.name == ng) {
                    n.apply(change);
                }
            }
            (None, Change::Version { version }) => self.version = version.clone(),
            (None, Change::Vpc { patch }) => {
                for (k, v) in patch {
                    self.vpc[k.as_str()] = v.clone();
                }
            }
            (None, Change::Logging { enabled }) => self.enabled_logs = enabled.clone(),
            (
                None,
                Change::Access {
                    authentication_mode,
                },
            ) => match self.access_config.as_object_mut() {
                Some(access) => {
                    access.insert("authenticationMode".into(), json!(authentication_mode));
                }
                None => self.access_config = json!({"authenticationMode": authentication_mode}),
            },
            (None, Change::Nodegroup { .. }) => {}
        }
    }

    /// Refuses a change unless the cluster is ACTIVE, in EKS's words.
    fn check_changeable(&self) -> Result<(), AwsError> {
        match self.status.as_str() {
            ACTIVE => Ok(()),
            UPDATING => Err(in_use("Update already in progress")),
            status => Err(in_use(format!(
                "Cluster {} is in {status} state; it must be ACTIVE to be changed",
                self.name
            ))),
        }
    }

    fn start_update(
        &mut self,
        ctx: &AwsCtx,
        nodegroup: Option<String>,
        update_type: &str,
        params: Vec<(String, String)>,
        change: Change,
        secs: f64,
    ) -> Value {
        let update = UpdateRecord {
            id: crate::common::ids::new_uid(),
            nodegroup,
            status: "InProgress".to_string(),
            update_type: update_type.to_string(),
            params,
            created_at: ctx.now,
            until: Some(ctx.now + duration(ctx, secs)),
            failure: ctx
                .faults
                .take_operation_failure("eks")
                .map(|(_, message)| message),
            change: Some(change),
        };
        let rendered = update.render();
        self.updates.push(update);
        rendered
    }
}

/// The Availability Zone of each subnet, or EKS's refusal of the first that EC2 does
/// not know in `region`.
fn known_subnets(
    network: &Network,
    region: &str,
    subnets: &[String],
) -> Result<Vec<String>, AwsError> {
    network.subnet_zones(region, subnets).map_err(|unknown| {
        invalid(format!(
            "The subnet ID '{}' does not exist",
            unknown.first().map(String::as_str).unwrap_or_default()
        ))
    })
}

/// EKS's refusal of a role (`which`: `clusterRole`, `nodeRole`) that does not exist or
/// whose trust policy does not let `principal` assume it, in EKS's words.
fn assumable(iam: &Iam, which: &str, arn: &str, principal: &str) -> Result<(), AwsError> {
    let Some(role) = iam::role(iam, arn) else {
        return Err(invalid(format!(
            "Role with arn: {arn}, could not be assumed because it does not exist or the trusted entity is not correct"
        )));
    };
    if !iam::trusts(role, principal) {
        return Err(invalid(format!(
            "Following required service principals [{principal}] were not found in the trust relationships of {which} {arn}"
        )));
    }
    Ok(())
}

/// A new node group's instance types (`t3.medium` when none), AMI type (the NVIDIA one
/// when a type has GPUs) and capacity type (`ON_DEMAND` when none), as its create asks.
fn machines(body: &Map<String, Value>) -> Result<(Vec<String>, String, String), AwsError> {
    let instance_types = opt_strings(body, "instanceTypes")?
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| vec!["t3.medium".to_string()]);
    let gpu = instance_types.iter().any(|t| instance_gpus(t).is_some());
    let ami_type = match opt_str(body, "amiType")? {
        Some(t) if !AMI_TYPES.contains(&t.as_str()) => {
            return Err(invalid(format!(
                "amiType {t} is not one of {}",
                AMI_TYPES.join(", ")
            )))
        }
        Some(t) => t,
        None if gpu => "AL2023_x86_64_NVIDIA".to_string(),
        None => "AL2023_x86_64_STANDARD".to_string(),
    };
    let capacity_type = opt_str(body, "capacityType")?.unwrap_or_else(|| "ON_DEMAND".into());
    if !CAPACITY_TYPES.contains(&capacity_type.as_str()) {
        return Err(invalid(format!(
            "capacityType {capacity_type} is not one of {}",
            CAPACITY_TYPES.join(", ")
        )));
    }
    Ok((instance_types, ami_type, capacity_type))
}

/// The Auto Scaling group a new node group launches its first instances with.
struct Launch<'a> {
    region: &'a str,
    instance_types: &'a [String],
    subnets: &'a [String],
    capacity_type: &'a str,
    desired: i64,
}

impl Launch<'_> {
    /// Why its first instances cannot launch: the vCPU quota (`running` being what the
    /// region's groups already run), else every zone of its subnets out of capacity.
    fn failure(&self, around: &Around<'_>, running: &[(String, String, i64)]) -> Option<String> {
        let capacity = around.capacity;
        self.instance_types
            .first()
            .and_then(|t| {
                super::servicequotas::launch_failure(
                    capacity,
                    self.region,
                    t,
                    self.capacity_type,
                    self.desired,
                    running,
                    |t| instance_shape(t).0,
                )
            })
            .or_else(|| {
                // Subnets EC2 does not know launch nothing; EKS refused them before.
                let zones = around
                    .network
                    .subnet_zones(self.region, self.subnets)
                    .ok()?;
                super::ec2::launch_failure(
                    capacity,
                    self.region,
                    self.instance_types,
                    &zones,
                    self.capacity_type,
                    self.desired,
                )
            })
    }
}

/// What EKS reads of the other emulators: the capacity node groups run into (vCPU
/// quotas, stockouts), the VPCs their subnets are in, the roles they run as.
#[derive(Clone, Copy)]
pub(crate) struct Around<'a> {
    pub capacity: &'a AwsCapacity,
    pub network: &'a Network,
    pub iam: &'a Iam,
}

fn ok(value: Value) -> AwsResponse {
    AwsResponse::json(200, "application/json", &value)
}

impl Eks {
    /// One line per cluster, node group and capability, for `Sandbox::inventory`; one
    /// being deleted is still held until the delete completes, and a failed one until
    /// it is deleted, as EKS keeps it.
    pub(crate) fn inventory(&self, out: &mut Vec<String>) {
        for c in &self.clusters {
            out.push(format!("eks cluster {}/{}", c.region, c.name));
            for n in &c.nodegroups {
                out.push(format!("eks node group {}/{}/{}", c.region, c.name, n.name));
            }
            self.pod_identity.inventory(&c.region, &c.name, out);
            for cap in self.capabilities.of(&c.region, &c.name) {
                out.push(format!(
                    "eks capability {}/{}/{} ({})",
                    c.region, c.name, cap.name, cap.kind
                ));
            }
        }
    }

    /// The subnets of `region` EKS has network interfaces in: every cluster's and node
    /// group's, until they are gone.
    pub(crate) fn subnets_in_use(&self, region: &str) -> std::collections::BTreeSet<String> {
        let mut out = std::collections::BTreeSet::new();
        for c in self.clusters.iter().filter(|c| c.region == region) {
            out.extend(
                c.vpc["subnetIds"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|s| s.as_str().map(str::to_string)),
            );
            for n in &c.nodegroups {
                out.extend(n.subnets.iter().cloned());
            }
        }
        out
    }

    /// Moves every running create, update and delete to where the clock says it is.
    pub(crate) fn settle(&mut self, now: DateTime<Utc>) {
        for c in &mut self.clusters {
            c.settle(now);
        }
        for c in &self.clusters {
            if c.status == DELETING && due(c.until, now) {
                self.capabilities.forget(&c.region, &c.name);
                self.pod_identity.forget(&c.region, &c.name);
            }
        }
        self.clusters
            .retain(|c| !(c.status == DELETING && due(c.until, now)));
        self.capabilities.settle(now);
        self.pod_identity.settle(now);
    }

    /// Serves one EKS request, with what it reads of the other emulators (`around`).
    pub(crate) fn handle(
        &mut self,
        req: &AwsRequest,
        ctx: &AwsCtx,
        around: &Around<'_>,
    ) -> Result<AwsResponse, AwsError> {
        let Around { network, iam, .. } = *around;
        let segments = req.segments();
        let s: Vec<&str> = segments.iter().map(String::as_str).collect();
        let region = req.region.as_str();
        match (req.method.as_str(), s.as_slice()) {
            ("POST", ["clusters"]) => self.create_cluster(region, req, ctx, network, iam),
            ("GET", ["clusters"]) => Ok(self.list_clusters(region, req)),
            ("GET", ["clusters", name]) => {
                let i = self.cluster_index(region, name)?;
                Ok(ok(json!({"cluster": self.clusters[i].render()})))
            }
            ("DELETE", ["clusters", name]) => self.delete_cluster(region, name, ctx),
            ("POST", ["clusters", name, "update-config"]) => {
                self.update_cluster_config(region, name, req, ctx)
            }
            ("POST", ["clusters", name, "updates"]) => {
                self.update_cluster_version(region, name, req, ctx)
            }
            ("GET", ["clusters", name, "updates"]) => self.list_updates(region, name, req),
            ("GET", ["clusters", name, "updates", id]) => {
                self.describe_update(region, name, id, req)
            }
            ("POST", ["clusters", name, "node-groups"]) => {
                self.create_nodegroup(region, name, req, ctx, around)
            }
            ("GET", ["clusters", name, "node-groups"]) => self.list_nodegroups(region, name, req),
            ("GET", ["clusters", name, "node-groups", ng]) => {
                let i = self.cluster_index(region, name)?;
                let c = &self.clusters[i];
                let n = c.nodegroup_index(ng)?;
                Ok(ok(
                    json!({"nodegroup": c.nodegroups[n].render(region, name)}),
                ))
            }
            ("DELETE", ["clusters", name, "node-groups", ng]) => {
                self.delete_nodegroup(region, name, ng, ctx)
            }
            ("POST", ["clusters", name, "node-groups", ng, "update-config"]) => {
                self.update_nodegroup_config(region, name, ng, req, ctx)
            }
            (_, ["clusters", name, "capabilities", ..]) => {
                self.capability_request(region, name, req, ctx, iam)
            }
            (
                _,
                ["clusters", name, "addons", ..]
                | ["clusters", name, "pod-identity-associations", ..],
            ) => self.pod_identity_request(region, name, req, ctx, iam),
            (method @ ("GET" | "POST" | "DELETE"), ["tags", arn @ ..]) if !arn.is_empty() => {
                // A client that does not escape the ARN's slashes splits it into segments.
                self.tags(method, &arn.join("/"), req)
            }
            (method, _) => Err(AwsError::new(
                404,
                "UnknownOperationException",
                format!(
                    "the sandbox's EKS has no operation at {method} {}",
                    req.path
                ),
            )),
        }
    }

    /// The clusters with a Kubernetes API, keyed `eks/<region>/<name>`: every one not
    /// failed or being deleted, with its running node groups as node pools.
    pub(crate) fn kube_clusters(&self) -> Vec<CloudCluster> {
        self.clusters
            .iter()
            .filter(|c| c.status != DELETING && c.status != FAILED)
            .map(|c| CloudCluster {
                version: server_version(&c.version),
                key: kube_key(&c.region, &c.name),
                name: c.name.clone(),
                cloud: std::sync::Arc::new(super::kube::EksCloud),
                ca_cert_pem: c.ca_cert_pem.clone(),
                ca_key_pem: c.ca_key_pem.clone(),
                node_pools: c
                    .nodegroups
                    .iter()
                    .filter(|n| n.status == ACTIVE || n.status == UPDATING)
                    .map(|n| n.node_pool(&c.region))
                    .collect(),
            })
            .collect()
    }

    /// Points a cluster's `endpoint` at its emulated API server; the only place the
    /// endpoint is set. DescribeCluster shows it once the cluster is ACTIVE.
    pub(crate) fn set_endpoint(&mut self, key: &str, endpoint: &str) {
        for c in &mut self.clusters {
            if kube_key(&c.region, &c.name) == key && c.endpoint != endpoint {
                c.endpoint = endpoint.to_string();
            }
        }
    }

    fn cluster_index(&self, region: &str, name: &str) -> Result<usize, AwsError> {
        self.clusters
            .iter()
            .position(|c| c.region == region && c.name == name)
            .ok_or_else(|| cluster_not_found(name))
    }

    // ------------------------------------------------------------ clusters

    fn create_cluster(
        &mut self,
        region: &str,
        req: &AwsRequest,
        ctx: &AwsCtx,
        vpcs: &Network,
        iam: &Iam,
    ) -> Result<AwsResponse, AwsError> {
        let body = body_of(req)?;
        let name = req_str(&body, "name")?;
        check_name("cluster", &name, 100)?;
        let role_arn = req_str(&body, "roleArn")?;
        let Some(vpc_in) = opt_object(&body, "resourcesVpcConfig")? else {
            return Err(invalid("resourcesVpcConfig is required"));
        };
        let token = opt_str(&body, "clientRequestToken")?;
        if let Ok(i) = self.cluster_index(region, &name) {
            let existing = &self.clusters[i];
            // A retried create (same idempotency token) answers like the first one did.
            if token.is_some() && existing.client_request_token == token {
                return Ok(ok(json!({"cluster": existing.render()})));
            }
            return Err(in_use(format!("Cluster already exists with name: {name}")));
        }
        check_role_arn("roleArn", &role_arn)?;
        let subnets = opt_strings(&vpc_in, "subnetIds")?.unwrap_or_default();
        if subnets.is_empty() {
            return Err(invalid(
                "resourcesVpcConfig.subnetIds must name at least one subnet",
            ));
        }
        let version = opt_str(&body, "version")?.unwrap_or_else(|| DEFAULT_VERSION.into());
        check_version(&version)?;
        let public = opt_bool(&vpc_in, "endpointPublicAccess")?.unwrap_or(true);
        let private = opt_bool(&vpc_in, "endpointPrivateAccess")?.unwrap_or(false);
        if !public && !private {
            return Err(invalid(
                "Cluster must have either public or private API server endpoint access enabled",
            ));
        }
        let cidrs = opt_strings(&vpc_in, "publicAccessCidrs")?
            .unwrap_or_else(|| vec!["0.0.0.0/0".to_string()]);
        let mut vpc = json!({
            "subnetIds": subnets,
            "securityGroupIds": opt_strings(&vpc_in, "securityGroupIds")?.unwrap_or_default(),
            "clusterSecurityGroupId": format!("sg-{}", stable_hex(&format!("{region}/{name}/sg"), 17)),
            "vpcId": "",
            "endpointPublicAccess": public,
            "endpointPrivateAccess": private,
            "publicAccessCidrs": cidrs,
        });
        let network_in = opt_object(&body, "kubernetesNetworkConfig")?.unwrap_or_default();
        let ip_family = opt_str(&network_in, "ipFamily")?.unwrap_or_else(|| "ipv4".into());
        if ip_family != "ipv4" && ip_family != "ipv6" {
            return Err(invalid(format!(
                "kubernetesNetworkConfig.ipFamily {ip_family:?} is not ipv4 or ipv6"
            )));
        }
        let mut network = json!({
            "serviceIpv4Cidr": opt_str(&network_in, "serviceIpv4Cidr")?.unwrap_or_else(|| "10.100.0.0/16".into()),
            "ipFamily": ip_family,
            "elasticLoadBalancing": {"enabled": false},
        });
        if ip_family == "ipv6" {
            network["serviceIpv6Cidr"] = json!("fd00:ec2::/108");
        }
        let enabled_logs = match opt_object(&body, "logging")? {
            Some(logging) => apply_logging(&[], &logging)?,
            None => Vec::new(),
        };
        let access_in = opt_object(&body, "accessConfig")?.unwrap_or_default();
        let auth_mode =
            opt_str(&access_in, "authenticationMode")?.unwrap_or_else(|| "CONFIG_MAP".into());
        if !AUTH_MODES.contains(&auth_mode.as_str()) {
            return Err(invalid(format!(
                "accessConfig.authenticationMode {auth_mode:?} is not one of {}",
                AUTH_MODES.join(", ")
            )));
        }
        let tags = string_map(&body, "tags")?;
        // The request is well-formed; now what EC2 knows of its subnets.
        let zones = known_subnets(vpcs, region, &subnets)?;
        assumable(iam, "clusterRole", &role_arn, "eks.amazonaws.com")?;
        let distinct: std::collections::BTreeSet<&String> = zones.iter().collect();
        if distinct.len() < 2 {
            return Err(invalid(
                "Subnets specified must be in at least two different AZs",
            ));
        }
        vpc["vpcId"] = json!(vpcs.subnet_vpc(region, &subnets[0]).unwrap_or_default());
        let (ca_cert_pem, ca_key_pem) = crate::common::ca::cluster_ca(&name).map_err(|e| {
            AwsError::new(
                500,
                "ServerException",
                format!("could not generate the cluster CA: {e}"),
            )
        })?;
        let record = ClusterRecord {
            region: region.to_string(),
            name: name.clone(),
            status: CREATING.to_string(),
            version,
            role_arn,
            created_at: ctx.now,
            until: Some(ctx.now + duration(ctx, base::CLUSTER_CREATE)),
            failure: ctx
                .faults
                .take_operation_failure("eks")
                .map(|(_, message)| message),
            endpoint: String::new(),
            ca_cert_pem,
            ca_key_pem,
            oidc_id: crate::common::ids::random_hex(32).to_uppercase(),
            vpc,
            kubernetes_network_config: network,
            enabled_logs,
            access_config: json!({"authenticationMode": auth_mode}),
            tags,
            client_request_token: token,
            health_issues: Vec::new(),
            updates: Vec::new(),
            nodegroups: Vec::new(),
        };
        let rendered = record.render();
        self.clusters.push(record);
        Ok(ok(json!({"cluster": rendered})))
    }

    fn list_clusters(&self, region: &str, req: &AwsRequest) -> AwsResponse {
        let names: Vec<String> = self
            .clusters
            .iter()
            .filter(|c| c.region == region)
            .map(|c| c.name.clone())
            .collect();
        ok(page(names, "clusters", req))
    }

    fn delete_cluster(
        &mut self,
        region: &str,
        name: &str,
        ctx: &AwsCtx,
    ) -> Result<AwsResponse, AwsError> {
        let i = self.cluster_index(region, name)?;
        let c = &mut self.clusters[i];
        if c.status == DELETING {
            return Ok(ok(json!({"cluster": c.render()})));
        }
        if !c.nodegroups.is_empty() {
            return Err(in_use("Cluster has nodegroups attached"));
        }
        if self.capabilities.of(region, name).next().is_some() {
            return Err(in_use("Cluster has capabilities attached"));
        }
        let c = &mut self.clusters[i];
        if c.status == UPDATING {
            return Err(in_use(format!(
                "Cannot delete because cluster {name} currently has an update in progress"
            )));
        }
        c.status = DELETING.to_string();
        c.until = Some(ctx.now + duration(ctx, base::CLUSTER_DELETE));
        c.failure = None;
        Ok(ok(json!({"cluster": c.render()})))
    }

    fn update_cluster_config(
        &mut self,
        region: &str,
        name: &str,
        req: &AwsRequest,
        ctx: &AwsCtx,
    ) -> Result<AwsResponse, AwsError> {
        let i = self.cluster_index(region, name)?;
        let body = body_of(req)?;
        let vpc_in = opt_object(&body, "resourcesVpcConfig")?;
        let logging = opt_object(&body, "logging")?;
        let access_in = opt_object(&body, "accessConfig")?;
        let c = &mut self.clusters[i];
        let (update_type, params, change) = match (vpc_in, logging, access_in) {
            (None, None, None) => {
                return Err(invalid(
                    "No changes requested: give resourcesVpcConfig, logging or accessConfig",
                ))
            }
            (None, Some(logging), None) => {
                c.check_changeable()?;
                let enabled = apply_logging(&c.enabled_logs, &logging)?;
                let mut sorted_new = enabled.clone();
                sorted_new.sort();
                let mut sorted_old = c.enabled_logs.clone();
                sorted_old.sort();
                if sorted_new == sorted_old {
                    return Err(invalid("No changes needed for the logging config provided"));
                }
                let value = render_logging(&enabled).to_string();
                (
                    "LoggingUpdate",
                    vec![("ClusterLogging".to_string(), value)],
                    Change::Logging { enabled },
                )
            }
            (Some(vpc_in), None, None) => {
                c.check_changeable()?;
                vpc_update(c, &vpc_in)?
            }
            (None, None, Some(access_in)) => {
                c.check_changeable()?;
                access_update(c, &access_in)?
            }
            _ => return Err(invalid("Only one type of update can be allowed.")),
        };
        let update = c.start_update(ctx, None, update_type, params, change, base::CLUSTER_UPDATE);
        c.status = UPDATING.to_string();
        Ok(ok(json!({"update": update})))
    }

    fn update_cluster_version(
        &mut self,
        region: &str,
        name: &str,
        req: &AwsRequest,
        ctx: &AwsCtx,
    ) -> Result<AwsResponse, AwsError> {
        let i = self.cluster_index(region, name)?;
        let body = body_of(req)?;
        let version = req_str(&body, "version")?;
        let c = &mut self.clusters[i];
        c.check_changeable()?;
        check_version(&version)?;
        let next = minor(&c.version).map(|(major, m)| (major, m + 1));
        if minor(&version) != next {
            return Err(invalid(format!(
                "Unsupported Kubernetes minor version update from {} to {version}",
                c.version
            )));
        }
        let update = c.start_update(
            ctx,
            None,
            "VersionUpdate",
            vec![
                ("Version".to_string(), version.clone()),
                ("PlatformVersion".to_string(), PLATFORM_VERSION.to_string()),
            ],
            Change::Version { version },
            base::CLUSTER_UPDATE,
        );
        c.status = UPDATING.to_string();
        Ok(ok(json!({"update": update})))
    }

    fn list_updates(
        &self,
        region: &str,
        name: &str,
        req: &AwsRequest,
    ) -> Result<AwsResponse, AwsError> {
        let c = &self.clusters[self.cluster_index(region, name)?];
        let nodegroup = req.param("nodegroupName");
        if let Some(ng) = nodegroup {
            c.nodegroup_index(ng)?;
        }
        let ids: Vec<String> = c
            .updates
            .iter()
            .filter(|u| u.nodegroup.as_deref() == nodegroup)
            .map(|u| u.id.clone())
            .collect();
        Ok(ok(page(ids, "updateIds", req)))
    }

    fn describe_update(
        &self,
        region: &str,
        name: &str,
        id: &str,
        req: &AwsRequest,
    ) -> Result<AwsResponse, AwsError> {
        let c = &self.clusters[self.cluster_index(region, name)?];
        let nodegroup = req.param("nodegroupName");
        if let Some(ng) = nodegroup {
            c.nodegroup_index(ng)?;
        }
        c.updates
            .iter()
            .find(|u| u.id == id && (nodegroup.is_none() || u.nodegroup.as_deref() == nodegroup))
            .map(|u| ok(json!({"update": u.render()})))
            .ok_or_else(|| {
                AwsError::new(
                    404,
                    "ResourceNotFoundException",
                    format!("No update found for ID: {id}"),
                )
            })
    }

    // ------------------------------------------------------------ pod identity

    /// The add-on and pod identity association calls of cluster `name`
    /// (`pod_identity.rs`).
    fn pod_identity_request(
        &mut self,
        region: &str,
        name: &str,
        req: &AwsRequest,
        ctx: &AwsCtx,
        iam: &Iam,
    ) -> Result<AwsResponse, AwsError> {
        let i = self.cluster_index(region, name)?;
        if self.clusters[i].status != ACTIVE && req.method.as_str() == "POST" {
            return Err(AwsError::new(
                400,
                "InvalidRequestException",
                format!("Cluster '{name}' is not in ACTIVE status"),
            ));
        }
        let segments = req.segments();
        let s: Vec<&str> = segments.iter().map(String::as_str).collect();
        let p = &mut self.pod_identity;
        let answer = match (req.method.as_str(), s.as_slice()) {
            ("POST", [_, _, "addons"]) => p.create_addon((region, name), &body_of(req)?, ctx)?,
            ("GET", [_, _, "addons"]) => p.list_addons(region, name),
            ("GET", [_, _, "addons", addon]) => p.describe_addon(region, name, addon)?,
            ("DELETE", [_, _, "addons", addon]) => p.delete_addon(region, name, addon, ctx)?,
            ("POST", [_, _, "pod-identity-associations"]) => {
                p.create_association((region, name), &body_of(req)?, ctx, iam)?
            }
            ("GET", [_, _, "pod-identity-associations"]) => p.list_associations(
                region,
                name,
                req.param("namespace"),
                req.param("serviceAccount"),
            ),
            ("GET", [_, _, "pod-identity-associations", id]) => {
                p.describe_association(region, name, id)?
            }
            ("POST", [_, _, "pod-identity-associations", id]) => {
                p.update_association((region, name), id, &body_of(req)?, ctx, iam)?
            }
            ("DELETE", [_, _, "pod-identity-associations", id]) => {
                p.delete_association(region, name, id)?
            }
            (method, _) => {
                return Err(AwsError::new(
                    404,
                    "UnknownOperationException",
                    format!("{method} {} is not an EKS operation", req.path),
                ))
            }
        };
        Ok(ok(answer))
    }

    // ------------------------------------------------------------ capabilities

    /// The capability calls of cluster `name` (`capabilities.rs`).
    fn capability_request(
        &mut self,
        region: &str,
        name: &str,
        req: &AwsRequest,
        ctx: &AwsCtx,
        iam: &Iam,
    ) -> Result<AwsResponse, AwsError> {
        let i = self.cluster_index(region, name)?;
        let c = &self.clusters[i];
        let mode = c.access_config["authenticationMode"]
            .as_str()
            .unwrap_or("CONFIG_MAP")
            .to_string();
        let facts = ClusterFacts {
            region,
            name,
            authentication_mode: &mode,
            active: c.status == ACTIVE,
        };
        let segments = req.segments();
        let s: Vec<&str> = segments.iter().map(String::as_str).collect();
        let answer = match (req.method.as_str(), s.as_slice()) {
            ("POST", [_, _, _]) => self.capabilities.create(&facts, &body_of(req)?, ctx, iam)?,
            ("GET", [_, _, _]) => self.capabilities.list(region, name),
            ("GET", [_, _, _, cap]) => self.capabilities.describe(region, name, cap)?,
            ("POST", [_, _, _, cap]) => {
                self.capabilities
                    .update(&facts, cap, &body_of(req)?, ctx, iam)?
            }
            ("DELETE", [_, _, _, cap]) => self.capabilities.delete(region, name, cap, ctx)?,
            (method, _) => {
                return Err(AwsError::new(
                    404,
                    "UnknownOperationException",
                    format!(
                        "the sandbox's EKS has no operation at {method} {}",
                        req.path
                    ),
                ))
            }
        };
        Ok(ok(answer))
    }

    // ------------------------------------------------------------ node groups

    fn create_nodegroup(
        &mut self,
        region: &str,
        cluster: &str,
        req: &AwsRequest,
        ctx: &AwsCtx,
        around: &Around<'_>,
    ) -> Result<AwsResponse, AwsError> {
        let Around { network, iam, .. } = *around;
        let running = self.running(region);
        let i = self.cluster_index(region, cluster)?;
        let body = body_of(req)?;
        let name = req_str(&body, "nodegroupName")?;
        check_name("nodegroup", &name, 63)?;
        let token = opt_str(&body, "clientRequestToken")?;
        let c = &mut self.clusters[i];
        if let Some(existing) = c.nodegroups.iter().find(|n| n.name == name) {
            if token.is_some() && existing.client_request_token == token {
                return Ok(ok(json!({"nodegroup": existing.render(region, cluster)})));
            }
            return Err(in_use(format!(
                "NodeGroup already exists with name {name} and cluster name {cluster}"
            )));
        }
        if c.status != ACTIVE {
            return Err(AwsError::new(
                400,
                "InvalidRequestException",
                format!("Cluster '{cluster}' is not in ACTIVE status"),
            ));
        }
        let node_role = req_str(&body, "nodeRole")?;
        check_role_arn("nodeRole", &node_role)?;
        let subnets = opt_strings(&body, "subnets")?.unwrap_or_default();
        if subnets.is_empty() {
            return Err(invalid("subnets must name at least one subnet"));
        }
        known_subnets(network, region, &subnets)?;
        assumable(iam, "nodeRole", &node_role, "ec2.amazonaws.com")?;
        let defaults = Scaling {
            min_size: 2,
            max_size: 2,
            desired_size: 2,
        };
        let scaling = match opt_object(&body, "scalingConfig")? {
            Some(s) => merge_scaling(&defaults, &s)?,
            None => defaults,
        };
        check_scaling(&scaling)?;
        let launch_template = opt_object(&body, "launchTemplate")?.map(Value::Object);
        let (instance_types, ami_type, capacity_type) = machines(&body)?;
        let labels = string_map(&body, "labels")?;
        check_labels(&labels)?;
        let taints = parse_taints(body.get("taints"), "taints")?;
        if taints.len() > 50 {
            return Err(invalid("A node group can have at most 50 taints"));
        }
        let version = opt_str(&body, "version")?.unwrap_or_else(|| c.version.clone());
        check_version(&version)?;
        if minor(&version) > minor(&c.version) {
            return Err(invalid(format!(
                "Requested Nodegroup version {version} is invalid: it is newer than the cluster version {}",
                c.version
            )));
        }
        let release =
            opt_str(&body, "releaseVersion")?.unwrap_or_else(|| release_version(&version));
        let disk_size = match opt_int(&body, "diskSize")? {
            Some(d) if d < 1 => return Err(invalid("diskSize must be at least 1")),
            Some(d) => Some(d),
            // With a launch template the template sets the disk.
            None if launch_template.is_some() => None,
            None => Some(20),
        };
        // EKS accepts the node group; its Auto Scaling group then fails to launch the
        // first instances when the vCPU quota or every zone's capacity is exhausted, and
        // the group ends CREATE_FAILED with that as a health issue. A failure a fault
        // planned comes first.
        let fault = ctx
            .faults
            .take_operation_failure("eks")
            .map(|(_, message)| message);
        let launch = if fault.is_some() {
            None
        } else {
            let group = Launch {
                region,
                instance_types: &instance_types,
                subnets: &subnets,
                capacity_type: &capacity_type,
                desired: scaling.desired_size,
            };
            group.failure(around, &running)
        };
        let failure_code = launch
            .as_ref()
            .map(|_| "AsgInstanceLaunchFailures".to_string());
        let record = NodegroupRecord {
            name: name.clone(),
            uid: crate::common::ids::new_uid(),
            status: CREATING.to_string(),
            created_at: ctx.now,
            modified_at: ctx.now,
            until: Some(ctx.now + duration(ctx, base::NODEGROUP_CREATE)),
            failure: fault.or(launch),
            failure_code,
            scaling,
            instance_types,
            subnets,
            ami_type,
            capacity_type,
            node_role,
            labels,
            taints,
            disk_size,
            tags: string_map(&body, "tags")?,
            update_config: opt_object(&body, "updateConfig")?
                .map(Value::Object)
                .unwrap_or_else(|| json!({"maxUnavailable": 1})),
            remote_access: opt_object(&body, "remoteAccess")?
                .map(Value::Object)
                .unwrap_or(Value::Null),
            launch_template: launch_template.unwrap_or(Value::Null),
            version,
            release_version: release,
            client_request_token: token,
            health_issues: Vec::new(),
        };
        let rendered = record.render(region, cluster);
        c.nodegroups.push(record);
        Ok(ok(json!({"nodegroup": rendered})))
    }

    /// What the region's node groups already run (first instance type, capacity type,
    /// desired size), for the vCPU quotas their Auto Scaling groups launch under (a failed
    /// group runs nothing).
    fn running(&self, region: &str) -> Vec<(String, String, i64)> {
        self.clusters
            .iter()
            .filter(|c| c.region == region)
            .flat_map(|c| c.nodegroups.iter())
            .filter(|n| n.status != CREATE_FAILED)
            .filter_map(|n| {
                n.instance_types
                    .first()
                    .map(|t| (t.clone(), n.capacity_type.clone(), n.scaling.desired_size))
            })
            .collect()
    }

    fn list_nodegroups(
        &self,
        region: &str,
        cluster: &str,
        req: &AwsRequest,
    ) -> Result<AwsResponse, AwsError> {
        let c = &self.clusters[self.cluster_index(region, cluster)?];
        let names: Vec<String> = c.nodegroups.iter().map(|n| n.name.clone()).collect();
        Ok(ok(page(names, "nodegroups", req)))
    }

    fn delete_nodegroup(
        &mut self,
        region: &str,
        cluster: &str,
        name: &str,
        ctx: &AwsCtx,
    ) -> Result<AwsResponse, AwsError> {
        let i = self.cluster_index(region, cluster)?;
        let c = &mut self.clusters[i];
        let n = c.nodegroup_index(name)?;
        let ng = &mut c.nodegroups[n];
        if ng.status != DELETING {
            ng.status = DELETING.to_string();
            ng.until = Some(ctx.now + duration(ctx, base::NODEGROUP_DELETE));
            ng.failure = None;
            ng.modified_at = ctx.now;
        }
        Ok(ok(json!({"nodegroup": ng.render(region, cluster)})))
    }

    fn update_nodegroup_config(
        &mut self,
        region: &str,
        cluster: &str,
        name: &str,
        req: &AwsRequest,
        ctx: &AwsCtx,
    ) -> Result<AwsResponse, AwsError> {
        let i = self.cluster_index(region, cluster)?;
        let body = body_of(req)?;
        let c = &mut self.clusters[i];
        let n = c.nodegroup_index(name)?;
        let ng = &c.nodegroups[n];
        if ng.status != ACTIVE {
            return Err(in_use(format!(
                "Nodegroup {name} cannot be updated as it is currently not in Active State"
            )));
        }
        let mut params: Vec<(String, String)> = Vec::new();
        let scaling = match opt_object(&body, "scalingConfig")? {
            Some(s) => {
                let merged = merge_scaling(&ng.scaling, &s)?;
                check_scaling(&merged)?;
                for (member, param) in [
                    ("minSize", "MinSize"),
                    ("maxSize", "MaxSize"),
                    ("desiredSize", "DesiredSize"),
                ] {
                    if let Some(v) = opt_int(&s, member)? {
                        params.push((param.to_string(), v.to_string()));
                    }
                }
                Some(merged)
            }
            None => None,
        };
        let labels = opt_object(&body, "labels")?.unwrap_or_default();
        let add_labels = string_map(&labels, "addOrUpdateLabels")?;
        check_labels(&add_labels)?;
        let remove_labels = opt_strings(&labels, "removeLabels")?.unwrap_or_default();
        if let Some(k) = remove_labels.iter().find(|k| add_labels.contains_key(*k)) {
            return Err(invalid(format!(
                "Label {k} cannot be both added and removed in one update"
            )));
        }
        if !add_labels.is_empty() {
            params.push(("LabelsToAdd".to_string(), json!(add_labels).to_string()));
        }
        if !remove_labels.is_empty() {
            params.push((
                "LabelsToRemove".to_string(),
                json!(remove_labels).to_string(),
            ));
        }
        let taints = opt_object(&body, "taints")?.unwrap_or_default();
        let add_taints = parse_taints(taints.get("addOrUpdateTaints"), "taints.addOrUpdateTaints")?;
        let remove_taints = parse_taints(taints.get("removeTaints"), "taints.removeTaints")?;
        if !add_taints.is_empty() {
            params.push(("TaintsToAdd".to_string(), json!(add_taints).to_string()));
        }
        if !remove_taints.is_empty() {
            params.push((
                "TaintsToRemove".to_string(),
                json!(remove_taints).to_string(),
            ));
        }
        let update_config = opt_object(&body, "updateConfig")?.map(Value::Object);
        if let Some(u) = &update_config {
            if let Some(v) = u.get("maxUnavailable") {
                params.push(("MaxUnavailable".to_string(), v.to_string()));
            }
            if let Some(v) = u.get("maxUnavailablePercentage") {
                params.push(("MaxUnavailablePercentage".to_string(), v.to_string()));
            }
        }
        if params.is_empty() && update_config.is_none() {
            return Err(invalid(
                "No changes requested: give scalingConfig, labels, taints or updateConfig",
            ));
        }
        let mut taints_after = ng.taints.clone();
        taints_after.retain(|t| {
            !remove_taints
                .iter()
                .any(|r| r.key == t.key && r.effect == t.effect)
        });
        for t in &add_taints {
            taints_after.retain(|old| !(old.key == t.key && old.effect == t.effect));
            taints_after.push(t.clone());
        }
        if taints_after.len() > 50 {
            return Err(invalid("A node group can have at most 50 taints"));
        }
        let change = Change::Nodegroup {
            scaling,
            add_labels,
            remove_labels,
            add_taints,
            remove_taints,
            update_config,
        };
        let update = c.start_update(
            ctx,
            Some(name.to_string()),
            "ConfigUpdate",
            params,
            change,
            base::NODEGROUP_UPDATE,
        );
        let ng = &mut c.nodegroups[n];
        ng.status = UPDATING.to_string();
        ng.modified_at = ctx.now;
        Ok(ok(json!({"update": update})))
    }

    // ------------------------------------------------------------ tags

    fn tags(&mut self, method: &str, arn: &str, req: &AwsRequest) -> Result<AwsResponse, AwsError> {
        let not_found = || {
            AwsError::new(
                404,
                "NotFoundException",
                format!("Resource not found: {arn}"),
            )
        };
        let tags = self.tags_of(arn).ok_or_else(not_found)?;
        match method {
            "GET" => Ok(ok(json!({"tags": tags}))),
            "POST" => {
                let body = body_of(req)?;
                let add = string_map(&body, "tags")
                    .map_err(|e| AwsError::new(400, "BadRequestException", e.message))?;
                if add.is_empty() {
                    return Err(AwsError::new(
                        400,
                        "BadRequestException",
                        "tags must name at least one tag",
                    ));
                }
                tags.extend(add);
                Ok(ok(json!({})))
            }
            _ => {
                for (k, v) in &req.query {
                    if k == "tagKeys" {
                        tags.remove(v);
                    }
                }
                Ok(ok(json!({})))
            }
        }
    }

    fn tags_of(&mut self, arn: &str) -> Option<&mut BTreeMap<String, String>> {
        for c in &mut self.clusters {
            if c.arn() == arn {
                return Some(&mut c.tags);
            }
            let (region, cluster) = (c.region.clone(), c.name.clone());
            if let Some(n) = c
                .nodegroups
                .iter_mut()
                .find(|n| n.arn(&region, &cluster) == arn)
            {
                return Some(&mut n.tags);
            }
        }
        self.capabilities.tags_of(arn)
    }
}

/// An update about to start: its type, its params and what it changes.
type UpdatePlan = (&'static str, Vec<(String, String)>, Change);

/// What an `update-config` with `resourcesVpcConfig` changes: endpoint access, or the
/// subnets and security groups — one kind per update, as EKS insists.
fn vpc_update(c: &ClusterRecord, vpc_in: &Map<String, Value>) -> Result<UpdatePlan, AwsError> {
    let public = opt_bool(vpc_in, "endpointPublicAccess")?;
    let private = opt_bool(vpc_in, "endpointPrivateAccess")?;
    let cidrs = opt_strings(vpc_in, "publicAccessCidrs")?;
    let subnets = opt_strings(vpc_in, "subnetIds")?;
    let groups = opt_strings(vpc_in, "securityGroupIds")?;
    let access = public.is_some() || private.is_some() || cidrs.is_some();
    let network = subnets.is_some() || groups.is_some();
    if access && network {
        return Err(invalid("Only one type of update can be allowed."));
    }
    let mut patch = Map::new();
    let mut params = Vec::new();
    if network {
        if let Some(s) = subnets {
            if s.is_empty() {
                return Err(invalid("subnetIds must name at least one subnet"));
            }
            params.push(("Subnets".to_string(), json!(s).to_string()));
            patch.insert("subnetIds".into(), json!(s));
        }
        if let Some(g) = groups {
            params.push(("SecurityGroups".to_string(), json!(g).to_string()));
            patch.insert("securityGroupIds".into(), json!(g));
        }
        return Ok(("VpcConfigUpdate", params, Change::Vpc { patch }));
    }
    if !access {
        return Err(invalid(
            "No changes requested: give endpoint access settings, publicAccessCidrs, subnetIds or securityGroupIds",
        ));
    }
    let current_public = c.vpc["endpointPublicAccess"].as_bool().unwrap_or(true);
    let current_private = c.vpc["endpointPrivateAccess"].as_bool().unwrap_or(false);
    let current_cidrs: Vec<String> = c.vpc["publicAccessCidrs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect();
    let new_public = public.unwrap_or(current_public);
    let new_private = private.unwrap_or(current_private);
    let new_cidrs = cidrs.clone().unwrap_or_else(|| current_cidrs.clone());
    if !new_public && !new_private {
        return Err(invalid(
            "Cluster must have either public or private API server endpoint access enabled",
        ));
    }
    if new_public == current_public && new_private == current_private && new_cidrs == current_cidrs
    {
        return Err(invalid(format!(
            "Cluster is already at the desired configuration with endpointPrivateAccess: {current_private} , endpointPublicAccess: {current_public}, and Public Endpoint Restrictions: [{}]",
            current_cidrs.join(", ")
        )));
    }
    if let Some(p) = public {
        params.push(("EndpointPublicAccess".to_string(), p.to_string()));
        patch.insert("endpointPublicAccess".into(), json!(p));
    }
    if let Some(p) = private {
        params.push(("EndpointPrivateAccess".to_string(), p.to_string()));
        patch.insert("endpointPrivateAccess".into(), json!(p));
    }
    if let Some(cidrs) = cidrs {
        params.push(("PublicAccessCidrs".to_string(), json!(cidrs).to_string()));
        patch.insert("publicAccessCidrs".into(), json!(cidrs));
    }
    Ok(("EndpointAccessUpdate", params, Change::Vpc { patch }))
}

/// What an `update-config` with `accessConfig` changes: the authentication mode, one
/// step along CONFIG_MAP → API_AND_CONFIG_MAP → API. EKS refuses a step back or a skipped
/// step with the same InvalidParameterException (access entries, once on, stay on).
fn access_update(
    c: &ClusterRecord,
    access_in: &Map<String, Value>,
) -> Result<UpdatePlan, AwsError> {
    let Some(mode) = opt_str(access_in, "authenticationMode")? else {
        return Err(invalid(
            "No changes requested: give accessConfig.authenticationMode",
        ));
    };
    if !AUTH_MODES.contains(&mode.as_str()) {
        return Err(invalid(format!(
            "accessConfig.authenticationMode {mode:?} is not one of {}",
            AUTH_MODES.join(", ")
        )));
    }
    let current = c.access_config["authenticationMode"]
        .as_str()
        .unwrap_or("CONFIG_MAP");
    if mode == current {
        return Err(invalid(
            "No changes needed for the authentication mode provided",
        ));
    }
    let step = |m: &str| AUTH_MODE_STEPS.iter().position(|s| *s == m);
    if step(&mode) != step(current).map(|i| i + 1) {
        return Err(invalid(format!(
            "Unsupported authentication mode update from {current} to {mode}"
        )));
    }
    Ok((
        "AccessConfigUpdate",
        vec![("AuthenticationMode".to_string(), mode.clone())],
        Change::Access {
            authentication_mode: mode,
        },
    ))
}

/// One page of `items` under `key`, after the `nextToken` offset, `maxResults` long.
fn page(items: Vec<String>, key: &str, req: &AwsRequest) -> Value {
    let start: usize = req
        .param("nextToken")
        .and_then(|t| t.parse().ok())
        .unwrap_or(0);
    let max: usize = req
        .param("maxResults")
        .and_then(|m| m.parse().ok())
        .filter(|m| *m > 0)
        .unwrap_or(100);
    let end = start.saturating_add(max).min(items.len());
    let slice: Vec<String> = items
        .get(start..end)
        .map(<[String]>::to_vec)
        .unwrap_or_default();
    let mut out = json!({ key: slice });
    if end < items.len() {
        out["nextToken"] = json!(end.to_string());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::Faults;
    use axum::http::Method;

    /// The emulator and a test clock: every request settles first, as the server does.
    struct Harness {
        eks: Eks,
        faults: Faults,
        capacity: AwsCapacity,
        network: Network,
        iam: Iam,
        secs: i64,
        region: String,
    }

    impl Harness {
        fn new() -> Harness {
            Harness {
                eks: Eks::default(),
                faults: Faults::default(),
                capacity: capacity(json!({})),
                network: Network::default(),
                iam: Iam::default(),
                secs: 0,
                region: "us-east-1".into(),
            }
        }

        fn now(&self) -> DateTime<Utc> {
            DateTime::<Utc>::from_timestamp(1_700_000_000 + self.secs, 0).expect("valid time")
        }

        fn at(&mut self, secs: i64) -> &mut Self {
            self.secs = secs;
            self
        }

        fn send(
            &mut self,
            method: Method,
            path: &str,
            body: Option<Value>,
        ) -> Result<Value, AwsError> {
            let now = self.now();
            self.eks.settle(now);
            let bytes = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
            let mut req = AwsRequest::new(method, path, &[], &bytes);
            req.region = self.region.clone();
            let ctx = AwsCtx {
                now,
                scale: 1.0,
                faults: &self.faults,
            };
            self.network.touch(&self.region, &self.capacity);
            self.iam.adopt(&self.capacity, now);
            let around = Around {
                capacity: &self.capacity,
                network: &self.network,
                iam: &self.iam,
            };
            let resp = self.eks.handle(&req, &ctx, &around)?;
            assert_eq!(resp.status, 200);
            Ok(resp.json_body().unwrap_or(Value::Null))
        }

        fn get(&mut self, path: &str) -> Result<Value, AwsError> {
            self.send(Method::GET, path, None)
        }

        fn post(&mut self, path: &str, body: Value) -> Result<Value, AwsError> {
            self.send(Method::POST, path, Some(body))
        }

        fn delete(&mut self, path: &str) -> Result<Value, AwsError> {
            self.send(Method::DELETE, path, None)
        }
    }

    fn cluster_body(name: &str) -> Value {
        json!({
            "name": name,
            "roleArn": "arn:aws:iam::123456789012:role/eks",
            "resourcesVpcConfig": {"subnetIds": ["subnet-a", "subnet-b"]},
        })
    }

    fn nodegroup_body(name: &str) -> Value {
        json!({
            "nodegroupName": name,
            "nodeRole": "arn:aws:iam::123456789012:role/node",
            "subnets": ["subnet-a"],
            "instanceTypes": ["g5.12xlarge"],
            "scalingConfig": {"minSize": 0, "maxSize": 3, "desiredSize": 1},
            "labels": {"team": "ml"},
            "taints": [{"key": "gpu", "value": "true", "effect": "NO_SCHEDULE"}],
            "capacityType": "SPOT",
        })
    }

    fn active_cluster(h: &mut Harness, name: &str) {
        h.at(0)
            .post("/clusters", cluster_body(name))
            .expect("created");
        let c = h
            .at(9)
            .get(&format!("/clusters/{name}"))
            .expect("described");
        assert_eq!(c["cluster"]["status"], ACTIVE);
    }

    #[test]
    fn clusters_move_through_their_states_on_the_clock() {
        let mut h = Harness::new();
        let made = h
            .at(0)
            .post("/clusters", cluster_body("ml"))
            .expect("created");
        let c = &made["cluster"];
        assert_eq!(c["status"], CREATING);
        assert_eq!(c["version"], DEFAULT_VERSION);
        assert_eq!(c["arn"], "arn:aws:eks:us-east-1:123456789012:cluster/ml");
        assert!(c.get("endpoint").is_none());
        assert_eq!(c["certificateAuthority"], json!({}));
        let issuer = c["identity"]["oidc"]["issuer"].as_str().unwrap_or_default();
        let id = issuer
            .strip_prefix("https://oidc.eks.us-east-1.amazonaws.com/id/")
            .unwrap_or_default();
        assert!(
            id.len() == 32
                && id
                    .chars()
                    .all(|c| c.is_ascii_digit() || c.is_ascii_uppercase()),
            "{issuer}"
        );
        assert!(c["createdAt"].is_number());
        assert_eq!(
            h.at(7).get("/clusters/ml").expect("described")["cluster"]["status"],
            CREATING
        );
        h.eks
            .set_endpoint("eks/us-east-1/ml", "https://127.0.0.1:4443");
        let c = h.at(8).get("/clusters/ml").expect("described");
        assert_eq!(c["cluster"]["status"], ACTIVE);
        assert_eq!(c["cluster"]["endpoint"], "https://127.0.0.1:4443");
        let ca = c["cluster"]["certificateAuthority"]["data"]
            .as_str()
            .unwrap_or_default();
        let pem = base64::engine::general_purpose::STANDARD
            .decode(ca)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"), "{pem}");
        let deleted = h.at(10).delete("/clusters/ml").expect("deleting");
        assert_eq!(deleted["cluster"]["status"], DELETING);
        assert!(h.at(12).get("/clusters/ml").is_ok());
        let gone = h.at(13).get("/clusters/ml").expect_err("gone");
        assert_eq!(
            (gone.status, gone.code.as_str(), gone.message.as_str()),
            (
                404,
                "ResourceNotFoundException",
                "No cluster found for name: ml."
            )
        );
    }

    #[test]
    fn clusters_and_node_groups_refuse_subnets_ec2_does_not_know_or_one_zone() {
        let mut h = Harness::new();
        let with_subnets = |subnets: &[&str]| {
            let mut body = cluster_body("ml");
            body["resourcesVpcConfig"]["subnetIds"] = json!(subnets);
            body
        };
        let err = h
            .post(
                "/clusters",
                with_subnets(&["subnet-a", "subnet-0123456789abcdef0"]),
            )
            .expect_err("unknown subnet");
        assert_eq!(
            (err.status, err.code.as_str(), err.message.as_str()),
            (
                400,
                "InvalidParameterException",
                "The subnet ID 'subnet-0123456789abcdef0' does not exist"
            )
        );
        let err = h
            .post("/clusters", with_subnets(&["subnet-a"]))
            .expect_err("one zone");
        assert_eq!(
            (err.code.as_str(), err.message.as_str()),
            (
                "InvalidParameterException",
                "Subnets specified must be in at least two different AZs"
            )
        );
        // The cluster's VPC is its subnets' (here the default VPC).
        active_cluster(&mut h, "ml");
        let c = h.get("/clusters/ml").expect("described");
        let vpc = c["cluster"]["resourcesVpcConfig"]["vpcId"]
            .as_str()
            .unwrap_or_default();
        assert_eq!(
            h.network.subnet_vpc("us-east-1", "subnet-a").as_deref(),
            Some(vpc)
        );
        assert!(vpc.starts_with("vpc-"), "{vpc}");
        let mut ng = nodegroup_body("gpu");
        ng["subnets"] = json!(["subnet-0123456789abcdef0"]);
        let err = h
            .post("/clusters/ml/node-groups", ng)
            .expect_err("unknown subnet");
        assert_eq!(
            (err.code.as_str(), err.message.as_str()),
            (
                "InvalidParameterException",
                "The subnet ID 'subnet-0123456789abcdef0' does not exist"
            )
        );
        assert_eq!(
            h.eks
                .subnets_in_use("us-east-1")
                .into_iter()
                .collect::<Vec<_>>(),
            ["subnet-a", "subnet-b"]
        );
    }

    #[test]
    fn create_errors_match_eks() {
        let mut h = Harness::new();
        let cases = [
            (
                json!({"roleArn": "arn:aws:iam::123456789012:role/r", "resourcesVpcConfig": {"subnetIds": ["s"]}}),
                "name",
            ),
            (
                json!({"name": "a", "resourcesVpcConfig": {"subnetIds": ["s"]}}),
                "roleArn",
            ),
            (
                json!({"name": "a", "roleArn": "arn:aws:iam::123456789012:role/r"}),
                "resourcesVpcConfig",
            ),
            (
                json!({"name": "a", "roleArn": "arn:aws:iam::123456789012:role/r", "resourcesVpcConfig": {"subnetIds": []}}),
                "subnetIds",
            ),
            (
                json!({"name": "a", "roleArn": "arn:aws:iam::123456789012:role/r", "resourcesVpcConfig": {"subnetIds": ["s"]}, "version": "1.12"}),
                "unsupported Kubernetes version",
            ),
            (
                json!({"name": "-a", "roleArn": "arn:aws:iam::123456789012:role/r", "resourcesVpcConfig": {"subnetIds": ["s"]}}),
                "name",
            ),
            (
                json!({"name": "a", "roleArn": "role", "resourcesVpcConfig": {"subnetIds": ["s"]}}),
                "IAM role",
            ),
            (
                json!({"name": "a", "roleArn": "arn:aws:iam::123456789012:role/r", "resourcesVpcConfig": {"subnetIds": ["s"]}, "logging": {"clusterLogging": [{"types": ["nope"], "enabled": true}]}}),
                "log type",
            ),
        ];
        for (body, needle) in cases {
            let e = h.post("/clusters", body.clone()).expect_err("rejected");
            assert_eq!(
                (e.status, e.code.as_str()),
                (400, "InvalidParameterException"),
                "{body}"
            );
            assert!(e.message.contains(needle), "{body}: {}", e.message);
        }
        h.post("/clusters", cluster_body("a")).expect("created");
        let dup = h
            .post("/clusters", cluster_body("a"))
            .expect_err("duplicate");
        assert_eq!(
            (dup.status, dup.code.as_str()),
            (409, "ResourceInUseException")
        );
        assert_eq!(dup.message, "Cluster already exists with name: a");
        let mut retry = cluster_body("b");
        retry["clientRequestToken"] = json!("t-1");
        let first = h.post("/clusters", retry.clone()).expect("created");
        let again = h
            .post("/clusters", retry)
            .expect("a retried create answers the same");
        assert_eq!(first["cluster"]["arn"], again["cluster"]["arn"]);
        h.region = "eu-west-1".into();
        let mut elsewhere = cluster_body("a");
        elsewhere["resourcesVpcConfig"]["subnetIds"] = json!(["subnet-ea", "subnet-eb"]);
        h.post("/clusters", elsewhere)
            .expect("the same name in another region is another cluster");
        let list = h.get("/clusters").expect("listed");
        assert_eq!(list["clusters"], json!(["a"]));
    }

    #[test]
    fn version_updates_go_one_minor_at_a_time() {
        let mut h = Harness::new();
        active_cluster(&mut h, "ml");
        let e = h
            .post("/clusters/ml/updates", json!({"version": "1.33"}))
            .expect_err("two minors");
        assert_eq!(e.code, "InvalidParameterException");
        assert_eq!(
            e.message,
            "Unsupported Kubernetes minor version update from 1.31 to 1.33"
        );
        let u = h
            .post("/clusters/ml/updates", json!({"version": "1.32"}))
            .expect("one minor");
        assert_eq!(u["update"]["status"], "InProgress");
        assert_eq!(u["update"]["type"], "VersionUpdate");
        let id = u["update"]["id"].as_str().unwrap_or_default().to_string();
        let busy = h
            .post("/clusters/ml/updates", json!({"version": "1.33"}))
            .expect_err("busy");
        assert_eq!(
            (busy.code.as_str(), busy.message.as_str()),
            ("ResourceInUseException", "Update already in progress")
        );
        let c = h.get("/clusters/ml").expect("described");
        assert_eq!(c["cluster"]["status"], UPDATING);
        assert_eq!(
            c["cluster"]["version"], "1.31",
            "the old version until done"
        );
        let done = h
            .at(12)
            .get(&format!("/clusters/ml/updates/{id}"))
            .expect("update");
        assert_eq!(done["update"]["status"], "Successful");
        let c = h.get("/clusters/ml").expect("described");
        assert_eq!(
            (
                c["cluster"]["status"].clone(),
                c["cluster"]["version"].clone()
            ),
            (json!(ACTIVE), json!("1.32"))
        );
        let ids = h.get("/clusters/ml/updates").expect("listed");
        assert_eq!(ids["updateIds"], json!([id]));
        assert_eq!(
            h.get("/clusters/ml/updates/nope")
                .expect_err("unknown")
                .code,
            "ResourceNotFoundException"
        );
    }

    #[test]
    fn config_updates_change_endpoint_access_and_logging() {
        let mut h = Harness::new();
        active_cluster(&mut h, "ml");
        let both = h
            .post(
                "/clusters/ml/update-config",
                json!({"resourcesVpcConfig": {"endpointPrivateAccess": true}, "logging": {"clusterLogging": []}}),
            )
            .expect_err("two kinds");
        assert_eq!(both.message, "Only one type of update can be allowed.");
        let same = h
            .post(
                "/clusters/ml/update-config",
                json!({"resourcesVpcConfig": {"endpointPublicAccess": true}}),
            )
            .expect_err("no change");
        assert!(
            same.message
                .starts_with("Cluster is already at the desired configuration"),
            "{}",
            same.message
        );
        let u = h
            .post(
                "/clusters/ml/update-config",
                json!({"resourcesVpcConfig": {"endpointPrivateAccess": true, "publicAccessCidrs": ["10.0.0.0/8"]}}),
            )
            .expect("access update");
        assert_eq!(u["update"]["type"], "EndpointAccessUpdate");
        h.at(13);
        let vpc = &h.get("/clusters/ml").expect("described")["cluster"]["resourcesVpcConfig"];
        assert_eq!(vpc["endpointPrivateAccess"], true);
        assert_eq!(vpc["publicAccessCidrs"], json!(["10.0.0.0/8"]));
        let u = h
            .post(
                "/clusters/ml/update-config",
                json!({"logging": {"clusterLogging": [{"types": ["api", "audit"], "enabled": true}]}}),
            )
            .expect("logging update");
        assert_eq!(u["update"]["type"], "LoggingUpdate");
        h.at(17);
        let logging = &h.get("/clusters/ml").expect("described")["cluster"]["logging"];
        assert_eq!(
            logging["clusterLogging"][0],
            json!({"types": ["api", "audit"], "enabled": true})
        );
        let none = h
            .post(
                "/clusters/ml/update-config",
                json!({"logging": {"clusterLogging": [{"types": ["api"], "enabled": true}]}}),
            )
            .expect_err("nothing new");
        assert_eq!(
            none.message,
            "No changes needed for the logging config provided"
        );
    }

    #[test]
    fn authentication_mode_moves_one_step_towards_api_and_never_back() {
        let mut h = Harness::new();
        active_cluster(&mut h, "ml");
        let c = h.get("/clusters/ml").expect("described");
        assert_eq!(
            c["cluster"]["accessConfig"]["authenticationMode"], "CONFIG_MAP",
            "EKS's default without accessConfig"
        );
        let access = |mode: &str| json!({"accessConfig": {"authenticationMode": mode}});
        let skip = h
            .post("/clusters/ml/update-config", access("API"))
            .expect_err("a skipped step");
        assert_eq!(
            (skip.status, skip.code.as_str(), skip.message.as_str()),
            (
                400,
                "InvalidParameterException",
                "Unsupported authentication mode update from CONFIG_MAP to API"
            )
        );
        let two = h
            .post(
                "/clusters/ml/update-config",
                json!({"accessConfig": {"authenticationMode": "API_AND_CONFIG_MAP"}, "logging": {"clusterLogging": []}}),
            )
            .expect_err("two kinds");
        assert_eq!(two.message, "Only one type of update can be allowed.");
        let u = h
            .post("/clusters/ml/update-config", access("API_AND_CONFIG_MAP"))
            .expect("one step");
        assert_eq!(u["update"]["type"], "AccessConfigUpdate");
        assert_eq!(
            u["update"]["params"],
            json!([{"type": "AuthenticationMode", "value": "API_AND_CONFIG_MAP"}])
        );
        h.at(13);
        let c = h.get("/clusters/ml").expect("described");
        assert_eq!(
            c["cluster"]["accessConfig"]["authenticationMode"],
            "API_AND_CONFIG_MAP"
        );
        for back in ["CONFIG_MAP", "API_AND_CONFIG_MAP"] {
            let e = h
                .post("/clusters/ml/update-config", access(back))
                .expect_err("not back, not the same");
            assert_eq!(e.code, "InvalidParameterException", "{back}");
        }
        h.post("/clusters/ml/update-config", access("API"))
            .expect("the last step");
        h.at(26);
        let c = h.get("/clusters/ml").expect("described");
        assert_eq!(c["cluster"]["accessConfig"]["authenticationMode"], "API");
        let back = h
            .post("/clusters/ml/update-config", access("API_AND_CONFIG_MAP"))
            .expect_err("never back");
        assert_eq!(
            back.message,
            "Unsupported authentication mode update from API to API_AND_CONFIG_MAP"
        );
        let bad = h
            .post("/clusters/ml/update-config", access("IAM"))
            .expect_err("no such mode");
        assert!(bad.message.contains("is not one of"), "{}", bad.message);
    }

    #[test]
    fn nodegroups_become_node_pools_with_eks_labels() {
        let mut h = Harness::new();
        h.at(0)
            .post("/clusters", cluster_body("ml"))
            .expect("created");
        let early = h
            .post("/clusters/ml/node-groups", nodegroup_body("gpu"))
            .expect_err("cluster creating");
        assert_eq!(early.code, "InvalidRequestException");
        h.at(9);
        let ng = h
            .post("/clusters/ml/node-groups", nodegroup_body("gpu"))
            .expect("created");
        assert_eq!(ng["nodegroup"]["status"], CREATING);
        assert_eq!(ng["nodegroup"]["amiType"], "AL2023_x86_64_NVIDIA");
        assert!(
            h.eks.kube_clusters()[0].node_pools.is_empty(),
            "no nodes until the group is ACTIVE"
        );
        h.at(13)
            .get("/clusters/ml/node-groups/gpu")
            .expect("described");
        let pools = &h.eks.kube_clusters()[0].node_pools;
        let [pool] = pools.as_slice() else {
            panic!("one pool: {pools:?}");
        };
        for (k, v) in [
            ("team", "ml"),
            ("eks.amazonaws.com/nodegroup", "gpu"),
            ("eks.amazonaws.com/capacityType", "SPOT"),
            ("node.kubernetes.io/instance-type", "g5.12xlarge"),
        ] {
            assert_eq!(pool.labels.get(k).map(String::as_str), Some(v), "{k}");
        }
        assert!(pool.labels["eks.amazonaws.com/nodegroup-image"].starts_with("ami-"));
        assert_eq!(
            pool.taints,
            vec![json!({"key": "gpu", "value": "true", "effect": "NoSchedule"})]
        );
        assert_eq!(
            pool.extended_resources
                .get("nvidia.com/gpu")
                .map(String::as_str),
            Some("4")
        );
        assert_eq!(
            (pool.cpu.as_str(), pool.memory.as_str()),
            ("48", "196608Mi")
        );
        assert_eq!((pool.node_count, pool.max_nodes), (1, 3));
        let key = h.eks.kube_clusters()[0].key.clone();
        assert_eq!(key, "eks/us-east-1/ml");

        let bad = h
            .post(
                "/clusters/ml/node-groups/gpu/update-config",
                json!({"scalingConfig": {"desiredSize": 5}}),
            )
            .expect_err("over max");
        assert_eq!(
            bad.message,
            "Desired capacity 5 can't be greater than max size 3"
        );
        let u = h
            .post(
                "/clusters/ml/node-groups/gpu/update-config",
                json!({"scalingConfig": {"desiredSize": 2},
                       "labels": {"addOrUpdateLabels": {"tier": "a"}, "removeLabels": ["team"]},
                       "taints": {"removeTaints": [{"key": "gpu", "value": "true", "effect": "NO_SCHEDULE"}]}}),
            )
            .expect("update");
        let id = u["update"]["id"].as_str().unwrap_or_default().to_string();
        assert_eq!(u["update"]["type"], "ConfigUpdate");
        assert_eq!(
            h.get("/clusters/ml/node-groups/gpu").expect("described")["nodegroup"]["status"],
            UPDATING
        );
        h.at(17);
        let d = h
            .get(&format!("/clusters/ml/updates/{id}?nodegroupName=gpu"))
            .expect("update");
        assert_eq!(d["update"]["status"], "Successful");
        let ng = h.get("/clusters/ml/node-groups/gpu").expect("described");
        assert_eq!(ng["nodegroup"]["scalingConfig"]["desiredSize"], 2);
        assert_eq!(ng["nodegroup"]["labels"], json!({"tier": "a"}));
        assert!(ng["nodegroup"].get("taints").is_none());
        let pool = &h.eks.kube_clusters()[0].node_pools[0];
        assert_eq!(pool.node_count, 2);
        assert!(pool.taints.is_empty());

        let busy = h.delete("/clusters/ml").expect_err("node groups attached");
        assert_eq!(
            (busy.status, busy.code.as_str(), busy.message.as_str()),
            (
                409,
                "ResourceInUseException",
                "Cluster has nodegroups attached"
            )
        );
        h.delete("/clusters/ml/node-groups/gpu").expect("deleting");
        h.at(21);
        assert_eq!(
            h.get("/clusters/ml/node-groups").expect("listed")["nodegroups"],
            json!([])
        );
        h.delete("/clusters/ml").expect("deleting");
        assert!(h.eks.kube_clusters().is_empty(), "no API while deleting");
    }

    #[test]
    fn failed_operations_end_failed() {
        let mut h = Harness::new();
        h.faults.fail_next_operation("eks", "no capacity");
        h.at(0)
            .post("/clusters", cluster_body("ml"))
            .expect("created");
        let c = h.at(9).get("/clusters/ml").expect("described");
        assert_eq!(c["cluster"]["status"], FAILED);
        assert_eq!(
            c["cluster"]["health"]["issues"][0]["message"],
            "no capacity"
        );
        assert!(h.eks.kube_clusters().is_empty());
    }

    #[test]
    fn instance_types_map_to_shapes_and_gpus() {
        let cases = [
            ("m5.large", (2, 8192), None),
            ("m5.xlarge", (4, 16384), None),
            ("c5.2xlarge", (8, 16384), None),
            ("r5.large", (2, 16384), None),
            ("t3.medium", (2, 4096), None),
            ("p3.2xlarge", (8, 62464), Some(1)),
            ("p4d.24xlarge", (96, 1179648), Some(8)),
            ("g4dn.xlarge", (4, 16384), Some(1)),
            ("g4dn.metal", (96, 393216), Some(8)),
            ("g5.48xlarge", (192, 786432), Some(8)),
            ("g6.12xlarge", (48, 196608), Some(4)),
            ("mystery", (2, 8192), None),
        ];
        for (t, shape, gpus) in cases {
            assert_eq!(instance_shape(t), shape, "{t}");
            assert_eq!(instance_gpus(t), gpus, "{t}");
        }
    }

    #[test]
    fn tags_and_pages() {
        let mut h = Harness::new();
        for name in ["a", "b", "c"] {
            h.post("/clusters", cluster_body(name)).expect("created");
        }
        let first = h.get("/clusters?maxResults=2").expect("page");
        assert_eq!(first["clusters"], json!(["a", "b"]));
        let token = first["nextToken"].as_str().unwrap_or_default().to_string();
        let rest = h
            .get(&format!("/clusters?maxResults=2&nextToken={token}"))
            .expect("page");
        assert_eq!(rest["clusters"], json!(["c"]));
        assert!(rest.get("nextToken").is_none());
        let arn = "arn%3Aaws%3Aeks%3Aus-east-1%3A123456789012%3Acluster%2Fa";
        h.post(&format!("/tags/{arn}"), json!({"tags": {"team": "ml"}}))
            .expect("tagged");
        assert_eq!(
            h.get(&format!("/tags/{arn}")).expect("tags")["tags"],
            json!({"team": "ml"})
        );
        h.delete(&format!("/tags/{arn}?tagKeys=team"))
            .expect("untagged");
        assert_eq!(
            h.get(&format!("/tags/{arn}")).expect("tags")["tags"],
            json!({})
        );
        assert_eq!(
            h.get("/tags/arn%3Aaws%3Aeks%3Aus-east-1%3A123456789012%3Acluster%2Fz")
                .expect_err("unknown")
                .code,
            "NotFoundException"
        );
    }

    #[test]
    fn state_survives_a_json_round_trip() {
        let mut h = Harness::new();
        active_cluster(&mut h, "ml");
        h.post("/clusters/ml/node-groups", nodegroup_body("gpu"))
            .expect("created");
        let text = serde_json::to_string(&h.eks).expect("serializes");
        let back: Eks = serde_json::from_str(&text).expect("reads back");
        let facts = |e: &Eks| -> Vec<String> {
            e.kube_clusters()
                .iter()
                .map(|c| {
                    format!(
                        "{} {} {} {:?}",
                        c.key,
                        c.version,
                        c.cloud.describe(),
                        c.node_pools
                    )
                })
                .collect()
        };
        assert_eq!(facts(&back), facts(&h.eks));
        let empty: Eks =
            serde_json::from_str(r#"{"clusters": [{"name": "x"}]}"#).expect("defaults fill in");
        assert_eq!(empty.clusters[0].name, "x");
    }

    /// A capacity configuration; unless it names roles, `eks` (trusting EKS) and `node`
    /// (trusting EC2); unless it names subnets, the ones the tests' clusters
    /// and node groups use: `subnet-a`/`subnet-b` in us-east-1a/b, `subnet-wa`/`-wb` in
    /// us-west-2 and `subnet-ea`/`-eb` in eu-west-1.
    fn capacity(mut spec: Value) -> AwsCapacity {
        if spec.get("roles").is_none() {
            spec["roles"] = json!({"eks": "eks.amazonaws.com", "node": "ec2.amazonaws.com"});
        }
        if spec.get("subnets").is_none() {
            spec["subnets"] = json!({
                "subnet-a": "us-east-1a",
                "subnet-b": "us-east-1b",
                "subnet-wa": "us-west-2a",
                "subnet-wb": "us-west-2b",
                "subnet-ea": "eu-west-1a",
                "subnet-eb": "eu-west-1b",
            });
        }
        crate::capacity::CapacitySpec::from_json(json!({"aws": spec}), &crate::quota_names())
            .expect("valid capacity")
            .aws
    }

    fn on_demand_g5(name: &str, subnets: &[&str], desired: i64) -> Value {
        json!({
            "nodegroupName": name,
            "nodeRole": "arn:aws:iam::123456789012:role/node",
            "subnets": subnets,
            "instanceTypes": ["g5.xlarge"],
            "scalingConfig": {"minSize": 0, "maxSize": 4, "desiredSize": desired},
        })
    }

    #[test]
    fn a_node_group_stocked_out_in_every_zone_ends_create_failed() {
        let mut h = Harness::new();
        h.capacity = capacity(json!({
            "stockouts": [{"zone": "us-east-1a", "instanceType": "g5.xlarge"}],
            "subnets": {"subnet-a": "us-east-1a", "subnet-a1": "us-east-1a", "subnet-a2": "us-east-1a", "subnet-b": "us-east-1b"},
        }));
        active_cluster(&mut h, "ml");
        let ng = h
            .at(10)
            .post(
                "/clusters/ml/node-groups",
                on_demand_g5("gpu", &["subnet-a1", "subnet-a2"], 1),
            )
            .expect("EKS accepts the node group");
        assert_eq!(ng["nodegroup"]["status"], CREATING);
        let ng = h
            .at(20)
            .get("/clusters/ml/node-groups/gpu")
            .expect("described");
        assert_eq!(ng["nodegroup"]["status"], CREATE_FAILED);
        let issue = &ng["nodegroup"]["health"]["issues"][0];
        assert_eq!(issue["code"], "AsgInstanceLaunchFailures");
        assert!(
            issue["message"].as_str().is_some_and(|m| m.starts_with(
                "Could not launch On-Demand Instances. InsufficientInstanceCapacity - We currently do not have sufficient g5.xlarge capacity in the Availability Zone you requested (us-east-1a)."
            )),
            "{issue}"
        );
        assert!(
            h.eks.kube_clusters()[0].node_pools.is_empty(),
            "a failed group has no nodes"
        );
        // Subnets in a zone with capacity get their nodes.
        h.post(
            "/clusters/ml/node-groups",
            on_demand_g5("spread", &["subnet-a1", "subnet-b"], 1),
        )
        .expect("created");
        let ng = h
            .at(30)
            .get("/clusters/ml/node-groups/spread")
            .expect("described");
        assert_eq!(ng["nodegroup"]["status"], ACTIVE);
    }

    #[test]
    fn a_node_group_beyond_its_vcpu_quota_fails_to_launch() {
        let mut h = Harness::new();
        h.capacity = capacity(
            json!({"quotas": [{"region": "us-east-1", "code": "L-DB2E81BA", "value": 8}]}),
        );
        active_cluster(&mut h, "ml");
        h.at(10)
            .post(
                "/clusters/ml/node-groups",
                on_demand_g5("two", &["subnet-a"], 2),
            )
            .expect("8 vCPUs fit");
        h.at(20)
            .post(
                "/clusters/ml/node-groups",
                on_demand_g5("more", &["subnet-a"], 1),
            )
            .expect("accepted");
        let ng = h
            .at(30)
            .get("/clusters/ml/node-groups/more")
            .expect("described");
        assert_eq!(ng["nodegroup"]["status"], CREATE_FAILED);
        assert_eq!(
            ng["nodegroup"]["health"]["issues"][0]["message"],
            "Could not launch On-Demand Instances. VcpuLimitExceeded - You have requested more vCPU capacity than your current vCPU limit of 8 allows for the instance bucket that the specified instance type belongs to. Please visit http://aws.amazon.com/contact-us/ec2-request to request an adjustment to this limit. Launching EC2 instance failed."
        );
        assert_eq!(
            h.get("/clusters/ml/node-groups/two").expect("described")["nodegroup"]["status"],
            ACTIVE
        );
        // Other regions count apart.
        h.region = "us-west-2".into();
        let mut west = cluster_body("west");
        west["resourcesVpcConfig"]["subnetIds"] = json!(["subnet-wa", "subnet-wb"]);
        h.at(30).post("/clusters", west).expect("created");
        h.at(40)
            .post(
                "/clusters/west/node-groups",
                on_demand_g5("gpu", &["subnet-wa"], 2),
            )
            .expect("accepted");
        let ng = h
            .at(50)
            .get("/clusters/west/node-groups/gpu")
            .expect("described");
        assert_eq!(ng["nodegroup"]["status"], ACTIVE);
    }
}
