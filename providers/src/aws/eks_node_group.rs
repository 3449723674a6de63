//! The `eks_node_group` kind: an EKS managed node group — instance types (GPU, Neuron,
//! Graviton), AMI type, On-Demand or Spot capacity, scaling bounds, Kubernetes labels
//! and taints.
//!
//! Scaling, labels and taints change in place (one UpdateNodegroupConfig, followed to
//! its end), tags through TagResource/UntagResource; instance types, AMI, capacity type,
//! subnets, disk size and the node role are fixed at creation, so changing them
//! replaces the group. The id is `CLUSTER/NAME`. The `placement` output tells
//! kubernetes_* workloads how to land on these nodes.
//!
//! Creation survives capacity shortages: a group that ends CREATE_FAILED for
//! `InsufficientInstanceCapacity` or `UnfulfillableCapacity` is deleted and made again
//! in each `fallback` subnet alone, then with each fallback instance type
//! ([`candidates`]); the `landed` output says where it went, and reads report the
//! declared spec for any of those placements, so a fallback is not drift. `fallback`
//! only steers create: changing it touches no API. A group that was made but did not
//! come out right (CREATE_FAILED, a wait that failed) is returned as tainted, so the
//! engine keeps it in the state and the next plan replaces it instead of leaving it
//! behind.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_eks::types::{
    AmiTypes, CapacityTypes, Nodegroup, NodegroupScalingConfig, Taint, TaintEffect,
    UpdateLabelsPayload, UpdateTaintsPayload,
};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::catalog::{self, Accel, Arch};
use super::eks::{
    self, code_of, found, hash_map, in_prior_order, problems_line, retag, same_set, tag_changes,
    tag_map, wait_update, Creating, UpdateWait, IN_USE,
};
use super::{config, is_not_found, sdk_error, tags_with_ours, user_tags};
use crate::kubernetes::{check_labels, check_qualified_name};
use crate::protocol::UNKNOWN;
use crate::schema::Fields;
use crate::{Ctx, Health, Invalid, Kind, Live, Peer, ProviderError};

/// The kind `eks_node_group`.
#[derive(Debug, Clone, Copy, Default)]
pub struct EksNodeGroup;

/// How many nodes the group keeps. Leave `desired` out when an autoscaler manages the
/// size: the group starts at `min` and later changes of its size are not drift.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Scaling {
    /// The fewest nodes (0 lets an idle GPU group cost nothing).
    pub min: i64,
    /// The most nodes (at least 1).
    pub max: i64,
    /// The nodes to run now, between min and max; leave out when an autoscaler manages the
    /// size (the group starts at min).
    pub desired: Option<i64>,
}

/// A Kubernetes taint on every node of the group, with EKS's effect spelling.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct NodeTaint {
    /// The taint key.
    pub key: String,
    /// The taint value (may be left out).
    pub value: Option<String>,
    /// NO_SCHEDULE, NO_EXECUTE or PREFER_NO_SCHEDULE.
    pub effect: String,
}

/// Where else create may put the group when its declared placement is out of
/// capacity: subnets to try one at a time, instance types to try one at a time with the
/// declared subnets. Only create reads it (see [`candidates`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Fallback {
    /// Subnets to try one at a time (in other Availability Zones), with the declared
    /// instance types.
    #[serde(default)]
    pub subnet_ids: Vec<String>,
    /// Instance types to try one at a time in the declared subnets; same architecture and
    /// accelerators as instance_types.
    #[serde(default)]
    pub instance_types: Vec<String>,
}

/// Where the group's nodes went: its subnets and instance types.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Landed {
    /// The subnets the nodes run in.
    pub subnet_ids: Vec<String>,
    /// The nodes' instance types.
    pub instance_types: Vec<String>,
}

// serde's defaults, the same as the schema's (checked by `schema_mismatches`).
fn m5_large() -> Vec<String> {
    vec!["m5.large".to_string()]
}

fn on_demand() -> String {
    "ON_DEMAND".to_string()
}

fn twenty() -> i64 {
    20
}

/// What a stack writes for an `eks_node_group`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    /// The EKS cluster's name ("${eks_cluster.NAME.name}").
    #[terrain(force_new)]
    pub cluster_name: String,
    /// The node group's name: letters, digits, '-' and '_', at most 63 characters.
    #[terrain(force_new)]
    pub name: String,
    /// The IAM role of the nodes (arn:aws:iam::ACCOUNT:role/NAME).
    #[terrain(force_new)]
    pub node_role_arn: String,
    /// The subnets the nodes run in.
    #[terrain(force_new)]
    pub subnet_ids: Vec<String>,
    /// EC2 instance types (GPU families such as g5, g6, p4d, p5 need a GPU AMI; Graviton
    /// families an ARM one).
    #[serde(default = "m5_large")]
    #[terrain(force_new)]
    pub instance_types: Vec<String>,
    /// The EKS AMI type; derived from the instance types when left out
    /// (AL2023_x86_64_STANDARD, or AL2023_x86_64_NVIDIA for GPU instances).
    #[terrain(force_new)]
    pub ami_type: Option<String>,
    /// ON_DEMAND or SPOT.
    #[serde(default = "on_demand")]
    #[terrain(force_new)]
    pub capacity_type: String,
    /// Node counts; changed in place.
    pub scaling: Scaling,
    /// Root volume size of each node in GiB.
    #[serde(default = "twenty")]
    #[terrain(force_new)]
    pub disk_size: i64,
    /// Kubernetes labels on the nodes; changed in place.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Kubernetes taints on the nodes; changed in place.
    #[serde(default)]
    pub taints: Vec<NodeTaint>,
    /// AWS tags on the node group.
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
    /// Where create tries next when the declared placement has no capacity
    /// (InsufficientInstanceCapacity); changing it changes nothing in the cloud.
    pub fallback: Option<Fallback>,
}

/// What `eks_node_group` reports after apply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Outputs {
    /// The node group's ARN.
    pub arn: String,
    /// CREATING, ACTIVE, UPDATING, DEGRADED, DELETING…
    pub status: String,
    /// How workloads land on these nodes: the `node_pool` of kubernetes_* resources.
    #[terrain(derived_from = ["name", "instance_types", "capacity_type", "taints"])]
    pub placement: Value,
    /// Where the group went: a fallback's subnet or instance type when the declared
    /// placement had no capacity.
    pub landed: Landed,
}

const CREATE: &str = "eks:CreateNodegroup";
const DESCRIBE: &str = "eks:DescribeNodegroup";
const DELETE: &str = "eks:DeleteNodegroup";
const UPDATE: &str = "eks:UpdateNodegroupConfig";
const ID_SHAPE: &str = "CLUSTER/NODEGROUP";

/// Taint effects, EKS's spelling and Kubernetes'.
const EFFECTS: &[(&str, &str)] = &[
    ("NO_SCHEDULE", "NoSchedule"),
    ("NO_EXECUTE", "NoExecute"),
    ("PREFER_NO_SCHEDULE", "PreferNoSchedule"),
];
const CAPACITY_TYPES: &[&str] = &["ON_DEMAND", "SPOT"];
/// EKS allows this many taints per node group.
const MAX_TAINTS: usize = 50;
/// EKS takes up to 20 instance types per node group.
const MAX_INSTANCE_TYPES: usize = 20;
/// The EKS label on every node of a managed node group.
pub const NODEGROUP_LABEL: &str = "eks.amazonaws.com/nodegroup";

/// Launching instances and joining them takes a few minutes; GPU AMIs take longer.
const CREATE_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// Scaling and taint changes may roll every node.
const UPDATE_TIMEOUT: Duration = Duration::from_secs(60 * 60);
const DELETE_TIMEOUT: Duration = Duration::from_secs(30 * 60);

// ---------------------------------------------------------------------------------
// Offline knowledge applied to a spec
// ---------------------------------------------------------------------------------

/// The architecture and accelerators of the group's instance types.
///
/// Fails, naming the instance type, when one is unknown or they disagree.
pub fn shape(instance_types: &[String]) -> Result<(Arch, Accel), String> {
    let parsed = instance_types
        .iter()
        .map(|t| catalog::instance_type(t))
        .collect::<Result<Vec<_>, _>>()?;
    catalog::common_shape(&parsed)
}

/// The AMI type the group runs: the spec's, else the default for its instance types.
pub fn resolved_ami_type(spec: &Spec) -> String {
    if let Some(ami) = &spec.ami_type {
        return ami.clone();
    }
    let (arch, accel) = shape(&spec.instance_types).unwrap_or((Arch::X86, Accel::None));
    catalog::default_ami_type(arch, accel).to_string()
}

/// GPUs per instance when the group has NVIDIA GPUs: the fewest of its instance types,
/// since a pod may land on any of them.
fn gpus_per_instance(instance_types: &[String]) -> Option<u32> {
    let parsed: Vec<catalog::InstanceType> = instance_types
        .iter()
        .filter_map(|t| catalog::instance_type(t).ok())
        .collect();
    if parsed.is_empty() || parsed.iter().any(|t| t.accel != Accel::Nvidia) {
        return None;
    }
    parsed.iter().map(|t| t.accelerators).min()
}

fn k8s_effect(effect: &str) -> &str {
    EFFECTS
        .iter()
        .find(|(eks, _)| *eks == effect)
        .map_or(effect, |(_, k8s)| k8s)
}

/// The group as a placement target: its node selector, taints in Kubernetes' spelling,
/// its GPUs (`{type: <instance type>, count}`, or null), no TPU, and whether it is Spot.
pub fn placement(spec: &Spec) -> Value {
    let taints: Vec<Value> = spec
        .taints
        .iter()
        .map(|t| json!({"key": t.key, "value": t.value, "effect": k8s_effect(&t.effect)}))
        .collect();
    let accelerator = match (
        gpus_per_instance(&spec.instance_types),
        spec.instance_types.first(),
    ) {
        (Some(count), Some(first)) => json!({"type": first, "count": count}),
        _ => Value::Null,
    };
    json!({
        "pool": spec.name,
        "node_selector": {NODEGROUP_LABEL: spec.name},
        "taints": taints,
        "accelerator": accelerator,
        "tpu": null,
        "spot": spec.capacity_type == "SPOT",
    })
}

// ---------------------------------------------------------------------------------
// Requests, built apart from sending them
// ---------------------------------------------------------------------------------

fn to_i32(n: i64) -> i32 {
    // Validation bounds every count; saturate rather than wrap if one slips through.
    i32::try_from(n).unwrap_or(if n < 0 { i32::MIN } else { i32::MAX })
}

/// The scaling configuration: `desired` when the stack sets it, else the live size
/// kept inside the new bounds (`live_desired`), else `min`.
pub fn scaling_config(scaling: &Scaling, live_desired: Option<i64>) -> NodegroupScalingConfig {
    let desired = scaling.desired.unwrap_or_else(|| {
        live_desired.map_or(scaling.min, |d| {
            d.clamp(scaling.min, scaling.max.max(scaling.min))
        })
    });
    NodegroupScalingConfig::builder()
        .min_size(to_i32(scaling.min))
        .max_size(to_i32(scaling.max))
        .desired_size(to_i32(desired))
        .build()
}

fn taint_api(t: &NodeTaint) -> Taint {
    Taint::builder()
        .key(&t.key)
        .set_value(t.value.clone())
        .effect(TaintEffect::from(t.effect.as_str()))
        .build()
}

/// The CreateNodegroup taints.
pub fn taints_api(taints: &[NodeTaint]) -> Vec<Taint> {
    taints.iter().map(taint_api).collect()
}

/// The label changes of UpdateNodegroupConfig: `None` when there are none.
pub fn label_changes(
    prior: &BTreeMap<String, String>,
    spec: &BTreeMap<String, String>,
) -> Option<UpdateLabelsPayload> {
    let (set, remove) = tag_changes(prior, spec);
    if set.is_empty() && remove.is_empty() {
        return None;
    }
    Some(
        UpdateLabelsPayload::builder()
            .set_add_or_update_labels((!set.is_empty()).then(|| hash_map(set)))
            .set_remove_labels((!remove.is_empty()).then_some(remove))
            .build(),
    )
}

/// The taint changes of UpdateNodegroupConfig: EKS knows a taint by key and effect, so a
/// new value is an add-or-update and a taint whose key and effect are gone is removed.
/// `None` when there are none.
pub fn taint_changes(prior: &[NodeTaint], spec: &[NodeTaint]) -> Option<UpdateTaintsPayload> {
    let add: Vec<Taint> = spec
        .iter()
        .filter(|t| !prior.contains(t))
        .map(taint_api)
        .collect();
    let remove: Vec<Taint> = prior
        .iter()
        .filter(|p| !spec.iter().any(|t| t.key == p.key && t.effect == p.effect))
        .map(taint_api)
        .collect();
    if add.is_empty() && remove.is_empty() {
        return None;
    }
    Some(
        UpdateTaintsPayload::builder()
            .set_add_or_update_taints((!add.is_empty()).then_some(add))
            .set_remove_taints((!remove.is_empty()).then_some(remove))
            .build(),
    )
}

// ---------------------------------------------------------------------------------
// Fallbacks
// ---------------------------------------------------------------------------------

/// One placement a create tries: the subnets and instance types of the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub subnet_ids: Vec<String>,
    pub instance_types: Vec<String>,
}

impl Candidate {
    /// How a progress line names this candidate as the next one tried.
    fn as_fallback(&self, spec: &Spec) -> String {
        if self.subnet_ids != spec.subnet_ids {
            format!("fallback subnet {}", self.subnet_ids.join(", "))
        } else {
            format!("fallback instance type {}", self.instance_types.join(", "))
        }
    }

    /// `g5.xlarge in subnet-…`, for the list of what was tried.
    fn describe(&self) -> String {
        format!(
            "{} in {}",
            self.instance_types.join("/"),
            self.subnet_ids.join(", ")
        )
    }
}

/// The placements a create tries, in order: the declared subnets and instance types;
/// each fallback subnet alone with the declared instance types; each fallback instance
/// type alone in the declared subnets.
pub fn candidates(spec: &Spec) -> Vec<Candidate> {
    let mut out = vec![Candidate {
        subnet_ids: spec.subnet_ids.clone(),
        instance_types: spec.instance_types.clone(),
    }];
    if let Some(f) = &spec.fallback {
        out.extend(f.subnet_ids.iter().map(|s| Candidate {
            subnet_ids: vec![s.clone()],
            instance_types: spec.instance_types.clone(),
        }));
        out.extend(f.instance_types.iter().map(|t| Candidate {
            subnet_ids: spec.subnet_ids.clone(),
            instance_types: vec![t.clone()],
        }));
    }
    // Validation refuses repeats; were one to slip through, trying it again would only
    // repeat its failure.
    let mut seen = Vec::new();
    out.retain(|c| {
        let new = !seen.contains(c);
        if new {
            seen.push(c.clone());
        }
        new
    });
    out
}

/// The capacity error in a failed group's reason — EC2's `InsufficientInstanceCapacity`
/// or `UnfulfillableCapacity`, as the `AsgInstanceLaunchFailures` health issue quotes
/// it — or `None` when the group failed for another reason (a vCPU quota, a subnet
/// without free addresses), which another placement would not fix.
pub fn capacity_reason(message: &str) -> Option<&'static str> {
    ["InsufficientInstanceCapacity", "UnfulfillableCapacity"]
        .into_iter()
        .find(|code| message.contains(code))
}

/// The error a create ends with after the placements `tried` (`types in subnets (why)`
/// each, and whether it was capacity): `error` itself when only the declared
/// placement was tried, else one naming every placement tried before it.
fn after_tries(error: ProviderError, tried: &[(String, bool)]) -> ProviderError {
    if tried.len() < 2 {
        return error;
    }
    let list: Vec<String> = tried.iter().map(|(t, _)| t.clone()).collect();
    let message = if tried.iter().all(|(_, capacity)| *capacity) {
        format!(
            "every placement tried was out of capacity: {}; the last attempt failed: {error}",
            list.join("; ")
        )
    } else {
        format!(
            "tried {}; the last attempt failed: {error}",
            list.join("; ")
        )
    };
    ProviderError::Failed {
        call: CREATE.to_string(),
        message,
    }
}

/// Problems with `fallback`, at `fallback.subnet_ids.N` and `fallback.instance_types.N`:
/// a fallback with nothing in it, malformed subnet ids, instance types EC2 does not
/// have or that the group's AMI cannot boot (another architecture or accelerator) or
/// with fewer GPUs than its placement promises, and anything listed twice or already
/// declared.
fn check_fallback(spec: &Spec, f: &Fallback, out: &mut Vec<Invalid>) {
    if f.subnet_ids.is_empty() && f.instance_types.is_empty() {
        out.push(Invalid::at(
            "fallback",
            "names no fallback; list subnet_ids = [\"subnet-…\", …] or instance_types = [\"g5.2xlarge\", …], or leave fallback out",
        ));
    }
    for (i, id) in f.subnet_ids.iter().enumerate() {
        let at = format!("fallback.subnet_ids.{i}");
        if let Err(m) = catalog::check_subnet_id(id) {
            out.push(Invalid::at(&at, m));
        } else if f.subnet_ids[..i].contains(id) {
            out.push(Invalid::at(&at, format!("{id} is listed twice")));
        } else if spec.subnet_ids.contains(id) {
            out.push(Invalid::at(
                &at,
                format!("{id} is in subnet_ids already; a fallback subnet is tried alone, so name one in another Availability Zone"),
            ));
        }
    }
    // The AMI is chosen from the declared types at creation, and the placement output
    // promises their GPUs: a fallback must keep both true.
    let declared = shape(&spec.instance_types).ok();
    let gpus = gpus_per_instance(&spec.instance_types);
    for (i, t) in f.instance_types.iter().enumerate() {
        let at = format!("fallback.instance_types.{i}");
        let parsed = match catalog::instance_type(t) {
            Ok(p) => p,
            Err(m) => {
                out.push(Invalid::at(&at, m));
                continue;
            }
        };
        if f.instance_types[..i].contains(t) {
            out.push(Invalid::at(&at, format!("{t} is listed twice")));
        } else if spec.instance_types.contains(t) {
            out.push(Invalid::at(
                &at,
                format!("{t} is in instance_types already"),
            ));
        } else if let Some((arch, accel)) = declared {
            if parsed.arch != arch || parsed.accel != accel {
                out.push(Invalid::at(
                    &at,
                    format!(
                        "{t} is {} with {}, but the group's instance types are {} with {}; its AMI is chosen for them at creation, so a fallback needs the same architecture and accelerators",
                        arch_words(parsed.arch),
                        accel_words(parsed.accel),
                        arch_words(arch),
                        accel_words(accel)
                    ),
                ));
            } else if let Some(n) = gpus.filter(|n| parsed.accelerators < *n) {
                out.push(Invalid::at(
                    &at,
                    format!(
                        "{t} has {} GPU(s), fewer than the {n} per node this group's placement promises its workloads",
                        parsed.accelerators
                    ),
                ));
            }
        }
    }
}

fn arch_words(arch: Arch) -> &'static str {
    match arch {
        Arch::X86 => "x86_64",
        Arch::Arm => "arm64 (Graviton)",
    }
}

fn accel_words(accel: Accel) -> &'static str {
    match accel {
        Accel::None => "no accelerators",
        Accel::Nvidia => "NVIDIA GPUs",
        Accel::Neuron => "Neuron devices",
    }
}

// ---------------------------------------------------------------------------------
// Reading
// ---------------------------------------------------------------------------------

/// The spec a live node group shows; what the API cannot report, or reports in another
/// order, follows `prior`.
pub fn spec_of(live: &Nodegroup, prior: Option<&Spec>) -> Spec {
    let instance_types = live.instance_types().to_vec();
    let live_ami = live.ami_type().map(|a| a.as_str().to_string());
    // A left-out AMI type stays left out while the live one is what it defaults to, so
    // neither plans nor imports show a change that would replace the group.
    let ami_type = match (prior, live_ami) {
        (Some(p), ami) if p.ami_type.is_some() => ami,
        (_, Some(ami)) => {
            let derived = shape(&instance_types)
                .map(|(arch, accel)| catalog::default_ami_type(arch, accel))
                .ok();
            (derived != Some(ami.as_str())).then_some(ami)
        }
        (_, None) => None,
    };
    let scaling = live.scaling_config();
    let taints: Vec<NodeTaint> = live
        .taints()
        .iter()
        .map(|t| NodeTaint {
            key: t.key().unwrap_or_default().to_string(),
            value: t.value().filter(|v| !v.is_empty()).map(str::to_string),
            effect: t
                .effect()
                .map(|e| e.as_str())
                .unwrap_or_default()
                .to_string(),
        })
        .collect();
    let taints = match prior {
        Some(p)
            if p.taints.iter().collect::<BTreeSet<_>>()
                == taints.iter().collect::<BTreeSet<_>>() =>
        {
            p.taints.clone()
        }
        _ => taints,
    };
    let subnets = live.subnets().to_vec();
    // A group that landed on one of the prior's fallbacks is the group the stack
    // declared.
    let declared = prior.filter(|p| {
        candidates(p).iter().any(|c| {
            same_set(&c.subnet_ids, &subnets) && same_set(&c.instance_types, &instance_types)
        })
    });
    let (subnet_ids, instance_types) = match declared {
        Some(p) => (p.subnet_ids.clone(), p.instance_types.clone()),
        None => (
            in_prior_order(subnets, prior.map(|p| &p.subnet_ids)),
            in_prior_order(instance_types, prior.map(|p| &p.instance_types)),
        ),
    };
    Spec {
        cluster_name: live.cluster_name().unwrap_or_default().to_string(),
        name: live.nodegroup_name().unwrap_or_default().to_string(),
        node_role_arn: live.node_role().unwrap_or_default().to_string(),
        subnet_ids,
        instance_types,
        ami_type,
        capacity_type: live
            .capacity_type()
            .map_or("ON_DEMAND", |c| c.as_str())
            .to_string(),
        scaling: Scaling {
            min: scaling.and_then(|s| s.min_size()).map_or(0, i64::from),
            max: scaling.and_then(|s| s.max_size()).map_or(0, i64::from),
            // Only tracked when the stack sets it: an autoscaler moves it otherwise.
            desired: match prior {
                Some(p) if p.scaling.desired.is_some() => {
                    scaling.and_then(|s| s.desired_size()).map(i64::from)
                }
                _ => None,
            },
        },
        disk_size: live.disk_size().map_or(twenty(), i64::from),
        labels: tag_map(live.labels()),
        taints,
        tags: user_tags(&tag_map(live.tags())),
        // Never sent to EKS: what the stack last applied.
        fallback: prior.and_then(|p| p.fallback.clone()),
    }
}

fn outputs_of(live: &Nodegroup, spec: &Spec) -> Outputs {
    Outputs {
        arn: live.nodegroup_arn().unwrap_or_default().to_string(),
        status: live
            .status()
            .map(|s| s.as_str())
            .unwrap_or_default()
            .to_string(),
        placement: placement(spec),
        landed: Landed {
            subnet_ids: live.subnets().to_vec(),
            instance_types: live.instance_types().to_vec(),
        },
    }
}

/// `(cluster, name)` of an id (see [`ID_SHAPE`]).
fn parts(id: &str) -> Result<(&str, &str), ProviderError> {
    eks::parts(id, EksNodeGroup::KIND, ID_SHAPE)
}

/// The node group; `None` when it (or its cluster) does not exist.
async fn describe(
    eks: &aws_sdk_eks::Client,
    cluster: &str,
    name: &str,
) -> Result<Option<Nodegroup>, ProviderError> {
    let answer = eks
        .describe_nodegroup()
        .cluster_name(cluster)
        .nodegroup_name(name)
        .send()
        .await;
    Ok(found(DESCRIBE, answer)?.and_then(|out| out.nodegroup().cloned()))
}

/// The health issues of a node group, one line.
pub fn health_issues(live: &Nodegroup) -> String {
    problems_line(
        live.health()
            .map(|h| h.issues())
            .unwrap_or_default()
            .iter()
            .map(|i| (i.code().map(|c| c.as_str()), i.message(), i.resource_ids())),
        "EKS reports no health issue",
    )
}

/// Waits until the node group is ACTIVE (see [`eks::wait_part_active`]).
async fn wait_active(
    ctx: &Ctx,
    eks: &aws_sdk_eks::Client,
    (cluster, name): (&str, &str),
    call: &str,
    waiting_for: &str,
    timeout: Duration,
) -> Result<Nodegroup, ProviderError> {
    let part = eks::Part {
        noun: "node group",
        cluster,
        name,
    };
    // Right after the create it may not be visible yet: the wait keeps waiting.
    let describe = || describe(eks, cluster, name);
    eks::wait_part_active(
        ctx,
        part,
        (call, waiting_for),
        timeout,
        describe,
        health_issues,
    )
    .await
}

/// Waits until the node group no longer exists (see [`eks::wait_part_gone`]).
async fn wait_gone(
    ctx: &Ctx,
    eks: &aws_sdk_eks::Client,
    (cluster, name): (&str, &str),
) -> Result<(), ProviderError> {
    let part = eks::Part {
        noun: "node group",
        cluster,
        name,
    };
    let describe = || describe(eks, cluster, name);
    eks::wait_part_gone(ctx, part, DELETE, DELETE_TIMEOUT, describe, health_issues).await
}

/// Deletes the node group and waits until it is gone; a group (or cluster) already
/// gone is fine, one already being deleted is waited for.
async fn remove(
    ctx: &Ctx,
    eks: &aws_sdk_eks::Client,
    (cluster, name): (&str, &str),
) -> Result<(), ProviderError> {
    match eks
        .delete_nodegroup()
        .cluster_name(cluster)
        .nodegroup_name(name)
        .send()
        .await
        .map_err(|e| sdk_error(DELETE, e))
    {
        Ok(_) => {}
        // The group, or its whole cluster, is already gone.
        Err(e) if is_not_found(&e) => return Ok(()),
        // Already being deleted (an earlier attempt): wait for the end below.
        Err(e) if code_of(&e) == IN_USE => {
            eks::already_deleting(e, || describe(eks, cluster, name)).await?;
        }
        Err(e) => return Err(e),
    }
    wait_gone(ctx, eks, (cluster, name)).await
}

fn gone(id: &str) -> ProviderError {
    eks::gone(DESCRIBE, &format!("node group {id}"))
}

/// Problems with the taints, at their paths.
fn check_taints(taints: &[NodeTaint], out: &mut Vec<Invalid>) {
    if taints.len() > MAX_TAINTS {
        out.push(Invalid::at(
            "taints",
            format!(
                "{} taints; EKS allows at most {MAX_TAINTS} per node group",
                taints.len()
            ),
        ));
    }
    let mut seen = BTreeSet::new();
    for (i, t) in taints.iter().enumerate() {
        if let Err(m) = check_qualified_name(&t.key) {
            out.push(Invalid::at(
                &format!("taints.{i}.key"),
                format!("{:?}: {m}", t.key),
            ));
        } else if let Some(v) = &t.value {
            // Taint values follow the label value rules.
            if let Err(m) = check_labels(&BTreeMap::from([(t.key.clone(), v.clone())])) {
                out.push(Invalid::at(&format!("taints.{i}.value"), m));
            }
        }
        if let Some((eks, _)) = EFFECTS.iter().find(|(_, k8s)| *k8s == t.effect) {
            out.push(Invalid::at(
                &format!("taints.{i}.effect"),
                format!("{} is the Kubernetes spelling; EKS takes {eks}", t.effect),
            ));
        } else if !EFFECTS.iter().any(|(eks, _)| *eks == t.effect) {
            out.push(Invalid::at(
                &format!("taints.{i}.effect"),
                format!(
                    "{:?} is not a taint effect; use NO_SCHEDULE, NO_EXECUTE or PREFER_NO_SCHEDULE",
                    t.effect
                ),
            ));
        } else if !seen.insert((&t.key, &t.effect)) {
            out.push(Invalid::at(
                &format!("taints.{i}"),
                format!(
                    "a taint {} with effect {} is already listed; EKS keeps one per key and effect",
                    t.key, t.effect
                ),
            ));
        }
    }
}

/// Problems with instance types and the AMI type, at their paths.
fn check_machines(spec: &Spec, out: &mut Vec<Invalid>) {
    if spec.instance_types.is_empty() {
        out.push(Invalid::at(
            "instance_types",
            "at least one instance type is needed (such as \"m5.large\")",
        ));
        return;
    }
    if spec.instance_types.len() > MAX_INSTANCE_TYPES {
        out.push(Invalid::at(
            "instance_types",
            format!(
                "{} instance types; EKS takes at most {MAX_INSTANCE_TYPES}",
                spec.instance_types.len()
            ),
        ));
    }
    let mut parsed = Vec::new();
    for (i, t) in spec.instance_types.iter().enumerate() {
        match catalog::instance_type(t) {
            Ok(p) => parsed.push(p),
            Err(m) => out.push(Invalid::at(&format!("instance_types.{i}"), m)),
        }
    }
    if parsed.len() != spec.instance_types.len() {
        return;
    }
    let (arch, accel) = match catalog::common_shape(&parsed) {
        Ok(shape) => shape,
        Err(m) => {
            out.push(Invalid::at("instance_types", m));
            return;
        }
    };
    if let Some(ami) = &spec.ami_type {
        if let Err(m) = catalog::check_ami_fits(ami, arch, accel, &spec.instance_types[0]) {
            out.push(Invalid::at("ami_type", m));
        }
    }
}

#[async_trait]
impl Kind for EksNodeGroup {
    type Spec = Spec;
    type Outputs = Outputs;
    const KIND: &'static str = "eks_node_group";
    const PROVIDER: &'static str = "aws";
    const WRITES: crate::protocol::Writes = crate::protocol::Writes::FromId;
    const BILLS: bool = true;
    const NEEDS_CAPACITY: bool = true;

    fn validate(spec: &Spec, config: &Value) -> Vec<Invalid> {
        let mut out = Vec::new();
        if let Err(m) = catalog::check_eks_name(&spec.cluster_name, catalog::EKS_CLUSTER_NAME_MAX) {
            out.push(Invalid::at("cluster_name", m));
        }
        if let Err(m) = catalog::check_eks_name(&spec.name, catalog::EKS_NODE_GROUP_NAME_MAX) {
            out.push(Invalid::at("name", m));
        }
        if let Err(m) = catalog::check_role_arn(&spec.node_role_arn) {
            out.push(Invalid::at("node_role_arn", m));
        } else if let Some(region) = config::catalog_region(config) {
            if let Err(m) = catalog::check_arn_partition(&spec.node_role_arn, region) {
                out.push(Invalid::at("node_role_arn", m));
            }
        }
        if spec.subnet_ids.is_empty() {
            out.push(Invalid::at("subnet_ids", "at least one subnet is needed"));
        }
        eks::check_subnet_ids(&spec.subnet_ids, &mut out);
        check_machines(spec, &mut out);
        if !CAPACITY_TYPES.contains(&spec.capacity_type.as_str()) {
            let m = if spec.capacity_type == "CAPACITY_BLOCK" {
                "CAPACITY_BLOCK needs a launch template with a capacity reservation, which eks_node_group does not manage; use ON_DEMAND or SPOT".to_string()
            } else {
                format!(
                    "{:?} is not a capacity type; use ON_DEMAND or SPOT",
                    spec.capacity_type
                )
            };
            out.push(Invalid::at("capacity_type", m));
        }
        let s = &spec.scaling;
        if s.min < 0 {
            out.push(Invalid::at(
                "scaling.min",
                format!("must be 0 or more, got {}", s.min),
            ));
        }
        if s.max < 1 {
            out.push(Invalid::at(
                "scaling.max",
                format!("must be at least 1, got {}", s.max),
            ));
        } else if s.max < s.min {
            out.push(Invalid::at(
                "scaling.max",
                format!(
                    "{} is below min ({}); max must be at least min",
                    s.max, s.min
                ),
            ));
        }
        if let Some(d) = s.desired {
            if d < s.min || d > s.max {
                out.push(Invalid::at(
                    "scaling.desired",
                    format!("{d} is outside min–max ({}–{})", s.min, s.max),
                ));
            }
        }
        if !(1..=16_384).contains(&spec.disk_size) {
            out.push(Invalid::at(
                "disk_size",
                format!(
                    "{} GiB; EBS root volumes are 1 to 16384 GiB",
                    spec.disk_size
                ),
            ));
        }
        if let Err(m) = check_labels(&spec.labels) {
            out.push(Invalid::at("labels", m));
        } else if let Some((k, _)) = spec.labels.iter().find(|(_, v)| v.is_empty()) {
            out.push(Invalid::at(
                "labels",
                format!("value of {k:?} is empty; EKS node group labels need a value"),
            ));
        }
        check_taints(&spec.taints, &mut out);
        eks::check_tags_and_config(&spec.tags, config, &mut out);
        if let Some(f) = &spec.fallback {
            check_fallback(spec, f, &mut out);
        }
        out
    }

    fn validate_peers(spec: &Value, peers: &[Peer]) -> Vec<Invalid> {
        // Amazon Linux 2 AMIs stop at Kubernetes 1.32: check against the cluster's version.
        let Some(ami) = spec["ami_type"].as_str().filter(|a| !a.contains(UNKNOWN)) else {
            return Vec::new();
        };
        peers
            .iter()
            .filter(|p| p.kind == "eks_cluster")
            .filter_map(|p| {
                let version = p.spec["version"]
                    .as_str()
                    .filter(|v| !v.contains(UNKNOWN))?;
                catalog::check_ami_for_version(ami, version)
                    .err()
                    .map(|m| Invalid::at("ami_type", format!("{}: {m}", p.address)))
            })
            .collect()
    }

    /// The group's instances between its scaling bounds, priced by its first instance
    /// type (EKS launches that one while it has capacity).
    fn usage(spec: &Value, config: &Value, _peers: &[crate::Peer]) -> Vec<crate::Usage> {
        let Ok(typed) = serde_json::from_value::<Spec>(spec.clone()) else {
            return Vec::new();
        };
        let Some(instance) = typed.instance_types.first() else {
            return Vec::new();
        };
        let region = crate::usage::known(&config["region"]).unwrap_or_default();
        let (min, max) = (typed.scaling.min, typed.scaling.max);
        let nodes = crate::capacity::nodes_text(min, max);
        let others = if typed.instance_types.len() > 1 {
            format!(" (first of {})", typed.instance_types.join(", "))
        } else {
            String::new()
        };
        vec![crate::Usage::fixed(
            "ec2.instance",
            instance,
            region,
            0.0,
            format!("{nodes} × {instance}{others}"),
        )
        .ranging(min as f64, max as f64)
        .spot(typed.capacity_type == "SPOT")]
    }

    /// The group's instances at its desired size (EKS starts it there; the minimum when
    /// none is set) and at its maximum, over its subnets.
    fn api_groups(_spec: &Value) -> crate::ApiGroups {
        crate::ApiGroups::nodes()
    }

    fn demand(spec: &Value, config: &Value, _peers: &[crate::Peer]) -> Vec<crate::Demand> {
        let Ok(typed) = serde_json::from_value::<Spec>(spec.clone()) else {
            return Vec::new();
        };
        let known_types = spec["instance_types"]
            .as_array()
            .is_some_and(|a| a.iter().all(|t| crate::usage::known(t).is_some()));
        if typed.instance_types.is_empty() || !known_types {
            return Vec::new();
        }
        let region = crate::usage::known(&config["region"])
            .unwrap_or_default()
            .to_string();
        let count = |n: i64| u32::try_from(n.max(0)).unwrap_or(0);
        let at_start = count(typed.scaling.desired.unwrap_or(typed.scaling.min));
        let at_most = count(typed.scaling.max).max(at_start);
        let subnets: Vec<String> = spec["subnet_ids"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| crate::usage::known(s).map(str::to_string))
            .collect();
        let first = &typed.instance_types[0];
        let others = if typed.instance_types.len() > 1 {
            format!(" (first of {})", typed.instance_types.join(", "))
        } else {
            String::new()
        };
        vec![crate::Demand {
            region,
            zones: Vec::new(),
            zone_count: 0,
            subnets,
            machine_types: typed.instance_types.clone(),
            fallback_zones: Vec::new(),
            accelerators: Vec::new(),
            tpu: None,
            spot: typed.capacity_type == "SPOT",
            nodes: (at_start, at_most),
            basis: format!(
                "{} × {first}{others}",
                crate::capacity::nodes_text(at_start.into(), at_most.into())
            ),
        }]
    }

    fn planned_id(spec: &Spec, _config: &Value) -> Option<String> {
        Some(format!("{}/{}", spec.cluster_name, spec.name))
    }

    async fn read(
        &self,
        ctx: &Ctx,
        id: &str,
        prior: Option<&Spec>,
    ) -> Result<Option<Live<Self>>, ProviderError> {
        let (cluster, name) = parts(id)?;
        let eks = config::eks(ctx).await?;
        let Some(live) = describe(&eks, cluster, name).await? else {
            return Ok(None);
        };
        // A group being deleted is as good as gone: planning must create a new one.
        if eks::is_deleting(&live) {
            return Ok(None);
        }
        let spec = spec_of(&live, prior);
        Ok(Some(Live {
            id: id.to_string(),
            outputs: outputs_of(&live, &spec),
            spec,
        }))
    }

    /// Tries each placement of [`candidates`] in turn while the last one failed for
    /// capacity, deleting each failed group before the next try; see the module docs.
    async fn create(&self, ctx: &Ctx, spec: &Spec) -> Result<Live<Self>, ProviderError> {
        let eks = config::eks(ctx).await?;
        let (cluster, name) = (spec.cluster_name.as_str(), spec.name.as_str());
        let id = format!("{cluster}/{name}");
        let tags = hash_map(tags_with_ours(&spec.tags, &ctx.address));
        let what = Creating {
            call: CREATE,
            noun: "node group",
            name,
            id: &id,
            kind: Self::KIND,
        };
        let candidates = candidates(spec);
        // Each failed placement, `types in subnets (why)`, and whether it was capacity.
        let mut tried: Vec<(String, bool)> = Vec::new();
        for (i, candidate) in candidates.iter().enumerate() {
            let send = || {
                eks.create_nodegroup()
                    .cluster_name(cluster)
                    .nodegroup_name(name)
                    .node_role(&spec.node_role_arn)
                    .set_subnets(Some(candidate.subnet_ids.clone()))
                    .set_instance_types(Some(candidate.instance_types.clone()))
                    .ami_type(AmiTypes::from(resolved_ami_type(spec).as_str()))
                    .capacity_type(CapacityTypes::from(spec.capacity_type.as_str()))
                    .scaling_config(scaling_config(&spec.scaling, None))
                    .disk_size(to_i32(spec.disk_size))
                    .set_labels(Some(hash_map(spec.labels.clone())))
                    .set_taints(Some(taints_api(&spec.taints)))
                    .set_tags(Some(tags.clone()))
                    .send()
            };
            // Refused: this attempt made nothing (an earlier one's group was deleted).
            eks::create_or_adopt(
                ctx,
                &what,
                send,
                || describe(&eks, cluster, name),
                || wait_gone(ctx, &eks, (cluster, name)),
            )
            .await
            .map_err(|e| after_tries(e, &tried))?;
            let error = match wait_active(
                ctx,
                &eks,
                (cluster, name),
                CREATE,
                &format!("creating node group {name} of EKS cluster {cluster}"),
                CREATE_TIMEOUT,
            )
            .await
            {
                Ok(live) => {
                    let spec = spec_of(&live, Some(spec));
                    return Ok(Live {
                        id,
                        outputs: outputs_of(&live, &spec),
                        spec,
                    });
                }
                Err(e) => e,
            };
            let reason = capacity_reason(&error.to_string());
            tried.push((
                format!("{} ({})", candidate.describe(), reason.unwrap_or("failed")),
                reason.is_some(),
            ));
            let (Some(reason), Some(next)) = (reason, candidates.get(i + 1)) else {
                // Another placement cannot fix it, or none is left: keep this group.
                return Err(ProviderError::tainted(&id, after_tries(error, &tried)));
            };
            let plural = candidate.subnet_ids.len() > 1;
            ctx.progress(&format!(
                "{} {} no {} capacity ({reason}): trying {}",
                candidate.subnet_ids.join(", "),
                if plural { "have" } else { "has" },
                candidate.instance_types.join("/"),
                next.as_fallback(spec)
            ));
            // The failed group holds the name: it goes before the next try. Should it
            // not go, it is what the state keeps.
            remove(ctx, &eks, (cluster, name))
                .await
                .map_err(|e| ProviderError::tainted(&id, e))?;
        }
        // Not reached: the last candidate's failure returns above.
        Err(ProviderError::tainted(
            &id,
            ProviderError::Failed {
                call: CREATE.to_string(),
                message: format!("node group {id}: no placement left to try"),
            },
        ))
    }

    async fn update(
        &self,
        ctx: &Ctx,
        id: &str,
        prior: &Spec,
        spec: &Spec,
    ) -> Result<Live<Self>, ProviderError> {
        let (cluster, name) = parts(id)?;
        let eks = config::eks(ctx).await?;
        let current = describe(&eks, cluster, name)
            .await?
            .ok_or_else(|| gone(id))?;
        let mut request = eks
            .update_nodegroup_config()
            .cluster_name(cluster)
            .nodegroup_name(name);
        let mut changed = Vec::new();
        if prior.scaling != spec.scaling {
            let live_desired = current
                .scaling_config()
                .and_then(|s| s.desired_size())
                .map(i64::from);
            request = request.scaling_config(scaling_config(&spec.scaling, live_desired));
            changed.push("scaling");
        }
        if let Some(labels) = label_changes(&prior.labels, &spec.labels) {
            request = request.labels(labels);
            changed.push("labels");
        }
        if let Some(taints) = taint_changes(&prior.taints, &spec.taints) {
            request = request.taints(taints);
            changed.push("taints");
        }
        if !changed.is_empty() {
            let out = request.send().await.map_err(|e| sdk_error(UPDATE, e))?;
            let waiting_for = format!(
                "updating the {} of node group {name}",
                changed.join(" and ")
            );
            let how = UpdateWait {
                cluster,
                nodegroup: Some(name),
                capability: None,
                call: UPDATE,
                waiting_for: &waiting_for,
                timeout: UPDATE_TIMEOUT,
            };
            wait_update(ctx, &eks, out.update(), &how).await?;
            wait_active(
                ctx,
                &eks,
                (cluster, name),
                UPDATE,
                &waiting_for,
                UPDATE_TIMEOUT,
            )
            .await?;
        }
        if prior.tags != spec.tags {
            let arn = current.nodegroup_arn().unwrap_or_default();
            retag(&eks, arn, &current, &spec.tags).await?;
        }
        let live = describe(&eks, cluster, name)
            .await?
            .ok_or_else(|| gone(id))?;
        let spec = spec_of(&live, Some(spec));
        Ok(Live {
            id: id.to_string(),
            outputs: outputs_of(&live, &spec),
            spec,
        })
    }

    async fn delete(
        &self,
        ctx: &Ctx,
        id: &str,
        _prior: Option<&Spec>,
    ) -> Result<(), ProviderError> {
        let (cluster, name) = parts(id)?;
        let eks = config::eks(ctx).await?;
        remove(ctx, &eks, (cluster, name)).await
    }

    async fn health(
        &self,
        ctx: &Ctx,
        id: &str,
        _prior: Option<&Spec>,
    ) -> Result<Option<Health>, ProviderError> {
        let (cluster, name) = parts(id)?;
        let eks = config::eks(ctx).await?;
        let live = describe(&eks, cluster, name).await?;
        Ok(Some(eks::health_of(
            live.as_ref(),
            eks::BROKEN,
            health_issues,
            |live| {
                let desired = live
                    .scaling_config()
                    .and_then(|s| s.desired_size())
                    .unwrap_or_default();
                format!("{desired} nodes desired")
            },
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aws::eks::testing::assert_validation;
    use crate::kubernetes::connect::Flavor;
    use crate::kubernetes::placement::{self as place, Intent};
    use crate::testing::schema_mismatches;
    use aws_sdk_eks::types::{Issue, NodegroupHealth, NodegroupIssueCode, NodegroupStatus};

    fn base() -> Spec {
        Spec {
            cluster_name: "ml".into(),
            name: "gpu".into(),
            node_role_arn: "arn:aws:iam::123456789012:role/eks-node".into(),
            subnet_ids: vec!["subnet-0aaaaaaaaaaaaaaaa".into()],
            instance_types: vec!["g5.xlarge".into()],
            ami_type: None,
            capacity_type: "SPOT".into(),
            scaling: Scaling {
                min: 0,
                max: 4,
                desired: Some(1),
            },
            disk_size: 100,
            labels: BTreeMap::from([("team".to_string(), "ml".to_string())]),
            taints: vec![NodeTaint {
                key: "nvidia.com/gpu".into(),
                value: Some("true".into()),
                effect: "NO_SCHEDULE".into(),
            }],
            tags: BTreeMap::new(),
            fallback: None,
        }
    }

    /// A node group as DescribeNodegroup reports one made from `s`.
    fn live_of(s: &Spec, address: &str) -> Nodegroup {
        Nodegroup::builder()
            .nodegroup_name(&s.name)
            .nodegroup_arn(format!(
                "arn:aws:eks:us-west-2:123456789012:nodegroup/{}/{}/uuid",
                s.cluster_name, s.name
            ))
            .cluster_name(&s.cluster_name)
            .status(NodegroupStatus::Active)
            .capacity_type(CapacityTypes::from(s.capacity_type.as_str()))
            .scaling_config(scaling_config(&s.scaling, None))
            .set_instance_types(Some(s.instance_types.clone()))
            .set_subnets(Some(s.subnet_ids.iter().rev().cloned().collect()))
            .ami_type(AmiTypes::from(resolved_ami_type(s).as_str()))
            .node_role(&s.node_role_arn)
            .set_labels(Some(hash_map(s.labels.clone())))
            .set_taints(Some(taints_api(&s.taints).into_iter().rev().collect()))
            .disk_size(to_i32(s.disk_size))
            .set_tags(Some(hash_map(tags_with_ours(&s.tags, address))))
            .build()
    }

    #[test]
    fn usage_is_the_first_instance_type_between_the_scaling_bounds() {
        let spec = serde_json::to_value(base()).expect("a spec");
        let usage = EksNodeGroup::usage(&spec, &json!({"region": "us-east-1"}), &[]);
        assert_eq!(usage.len(), 1);
        let u = &usage[0];
        assert_eq!(
            (u.meter.as_str(), u.item.as_str(), u.region.as_str()),
            ("ec2.instance", "g5.xlarge", "us-east-1")
        );
        assert!(u.spot);
        assert_eq!(u.min, 0.0);
    }

    #[test]
    fn schema_matches_spec_and_outputs() {
        let full = Spec {
            ami_type: Some("AL2023_x86_64_NVIDIA".into()),
            tags: BTreeMap::from([("team".to_string(), "ml".to_string())]),
            fallback: Some(Fallback {
                subnet_ids: vec!["subnet-0bbbbbbbbbbbbbbbb".into()],
                instance_types: vec!["g5.2xlarge".into()],
            }),
            ..base()
        };
        let outputs = outputs_of(&live_of(&full, "eks_node_group.gpu"), &full);
        assert_eq!(
            schema_mismatches::<EksNodeGroup>(&full, &outputs),
            Vec::<String>::new()
        );
    }

    #[test]
    fn live_group_reads_back_as_its_spec() {
        let two_taints = Spec {
            taints: vec![
                NodeTaint {
                    key: "b".into(),
                    value: None,
                    effect: "NO_EXECUTE".into(),
                },
                NodeTaint {
                    key: "a".into(),
                    value: Some("1".into()),
                    effect: "PREFER_NO_SCHEDULE".into(),
                },
            ],
            subnet_ids: vec![
                "subnet-0aaaaaaaaaaaaaaaa".into(),
                "subnet-0bbbbbbbbbbbbbbbb".into(),
            ],
            ..base()
        };
        let explicit_ami = Spec {
            ami_type: Some("BOTTLEROCKET_x86_64_NVIDIA".into()),
            ..base()
        };
        let autoscaled = Spec {
            scaling: Scaling {
                min: 1,
                max: 3,
                desired: None,
            },
            instance_types: vec!["m7g.large".into()],
            capacity_type: "ON_DEMAND".into(),
            taints: vec![],
            ..base()
        };
        for s in [base(), two_taints, explicit_ami, autoscaled] {
            assert_eq!(spec_of(&live_of(&s, "eks_node_group.gpu"), Some(&s)), s);
        }
    }

    #[test]
    fn import_leaves_derived_values_out() {
        let s = base();
        let imported = spec_of(&live_of(&s, "eks_node_group.gpu"), None);
        assert_eq!(
            imported.ami_type, None,
            "the default AMI reads back as left out"
        );
        assert_eq!(
            imported.scaling.desired, None,
            "desired is not tracked without a stack value"
        );
        assert!(imported.tags.is_empty(), "terrain's tags are hidden");
        let al2 = Spec {
            ami_type: Some("AL2_x86_64_GPU".into()),
            ..base()
        };
        assert_eq!(
            spec_of(&live_of(&al2, "eks_node_group.gpu"), None)
                .ami_type
                .as_deref(),
            Some("AL2_x86_64_GPU"),
            "a non-default AMI is reported"
        );
    }

    #[test]
    fn create_request_parts() {
        assert_eq!(resolved_ami_type(&base()), "AL2023_x86_64_NVIDIA");
        assert_eq!(
            resolved_ami_type(&Spec {
                instance_types: vec!["m5.large".into()],
                ..base()
            }),
            "AL2023_x86_64_STANDARD"
        );
        assert_eq!(
            resolved_ami_type(&Spec {
                instance_types: vec!["c7g.xlarge".into()],
                ..base()
            }),
            "AL2023_ARM_64_STANDARD"
        );
        assert_eq!(
            resolved_ami_type(&Spec {
                instance_types: vec!["inf2.xlarge".into()],
                ..base()
            }),
            "AL2023_x86_64_NEURON"
        );
        let scaling = scaling_config(
            &Scaling {
                min: 0,
                max: 4,
                desired: None,
            },
            None,
        );
        assert_eq!(
            (
                scaling.min_size(),
                scaling.max_size(),
                scaling.desired_size()
            ),
            (Some(0), Some(4), Some(0))
        );
        let kept = scaling_config(
            &Scaling {
                min: 1,
                max: 2,
                desired: None,
            },
            Some(5),
        );
        assert_eq!(
            kept.desired_size(),
            Some(2),
            "the live size is kept inside the new bounds"
        );
        let taints = taints_api(&base().taints);
        assert_eq!(taints[0].key(), Some("nvidia.com/gpu"));
        assert_eq!(taints[0].value(), Some("true"));
        assert_eq!(taints[0].effect(), Some(&TaintEffect::NoSchedule));
    }

    #[test]
    fn label_diffs() {
        let prior = BTreeMap::from([
            ("a".to_string(), "1".to_string()),
            ("b".to_string(), "2".to_string()),
        ]);
        let spec = BTreeMap::from([
            ("a".to_string(), "1".to_string()),
            ("b".to_string(), "3".to_string()),
            ("c".to_string(), "4".to_string()),
        ]);
        let changes = label_changes(&prior, &spec).expect("changes");
        let added: BTreeMap<String, String> = tag_map(changes.add_or_update_labels());
        assert_eq!(
            added,
            BTreeMap::from([
                ("b".to_string(), "3".to_string()),
                ("c".to_string(), "4".to_string())
            ])
        );
        assert!(changes.remove_labels().is_empty());
        let removed = label_changes(&spec, &BTreeMap::new()).expect("removals");
        assert_eq!(removed.remove_labels(), ["a", "b", "c"]);
        assert!(removed.add_or_update_labels().is_none());
        assert!(label_changes(&prior, &prior).is_none());
    }

    #[test]
    fn taint_diffs_key_on_key_and_effect() {
        let t = |k: &str, v: Option<&str>, e: &str| NodeTaint {
            key: k.into(),
            value: v.map(str::to_string),
            effect: e.into(),
        };
        let prior = vec![
            t("gpu", Some("true"), "NO_SCHEDULE"),
            t("old", None, "NO_EXECUTE"),
            t("moved", None, "NO_SCHEDULE"),
        ];
        let spec = vec![
            t("gpu", Some("yes"), "NO_SCHEDULE"),
            t("moved", None, "PREFER_NO_SCHEDULE"),
            t("new", None, "NO_SCHEDULE"),
        ];
        let changes = taint_changes(&prior, &spec).expect("changes");
        let keys = |ts: &[Taint]| -> Vec<(String, String)> {
            ts.iter()
                .map(|t| {
                    (
                        t.key().unwrap_or_default().to_string(),
                        t.effect()
                            .map(|e| e.as_str().to_string())
                            .unwrap_or_default(),
                    )
                })
                .collect()
        };
        assert_eq!(
            keys(changes.add_or_update_taints()),
            vec![
                ("gpu".into(), "NO_SCHEDULE".into()),
                ("moved".into(), "PREFER_NO_SCHEDULE".into()),
                ("new".into(), "NO_SCHEDULE".into())
            ]
        );
        assert_eq!(changes.add_or_update_taints()[0].value(), Some("yes"));
        assert_eq!(
            keys(changes.remove_taints()),
            vec![
                ("old".into(), "NO_EXECUTE".into()),
                ("moved".into(), "NO_SCHEDULE".into())
            ]
        );
        assert!(taint_changes(&prior, &prior).is_none());
        let reordered: Vec<NodeTaint> = prior.iter().rev().cloned().collect();
        assert!(taint_changes(&prior, &reordered).is_none());
    }

    #[test]
    fn placement_feeds_the_kubernetes_placement_rules() {
        let p = placement(&base());
        assert_eq!(
            p,
            json!({
                "pool": "gpu",
                "node_selector": {"eks.amazonaws.com/nodegroup": "gpu"},
                "taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}],
                "accelerator": {"type": "g5.xlarge", "count": 1},
                "tpu": null,
                "spot": true,
            })
        );
        // A GPU job on this group: its selector, a toleration for its taint, a GPU limit.
        let ok = place::placement(
            &Flavor::Eks,
            &Intent {
                spot: true,
                gpus: 1,
                node_pool: Some(p.clone()),
                ..Intent::default()
            },
        )
        .expect("fits");
        assert_eq!(
            ok.node_selector.get(NODEGROUP_LABEL).map(String::as_str),
            Some("gpu")
        );
        assert!(ok.tolerations.contains(&json!({"key": "nvidia.com/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"})));
        assert_eq!(
            ok.limits.get("nvidia.com/gpu").map(String::as_str),
            Some("1")
        );
        let too_many = place::placement(
            &Flavor::Eks,
            &Intent {
                gpus: 2,
                node_pool: Some(p),
                ..Intent::default()
            },
        );
        assert!(too_many
            .expect_err("one GPU per node")
            .contains("1 GPU(s) per node"));
        // The fewest GPUs of mixed sizes, and none for plain or Neuron instances.
        let mixed = placement(&Spec {
            instance_types: vec!["g5.12xlarge".into(), "g5.xlarge".into()],
            ..base()
        });
        assert_eq!(
            mixed["accelerator"],
            json!({"type": "g5.12xlarge", "count": 1})
        );
        let plain = placement(&Spec {
            instance_types: vec!["m5.large".into()],
            capacity_type: "ON_DEMAND".into(),
            ..base()
        });
        assert_eq!(plain["accelerator"], Value::Null);
        assert_eq!(plain["spot"], false);
        let value_less = placement(&Spec {
            taints: vec![NodeTaint {
                key: "dedicated".into(),
                value: None,
                effect: "NO_EXECUTE".into(),
            }],
            ..base()
        });
        assert_eq!(
            value_less["taints"],
            json!([{"key": "dedicated", "value": null, "effect": "NoExecute"}])
        );
    }

    #[test]
    fn health_issues_are_listed() {
        let live = Nodegroup::builder()
            .health(
                NodegroupHealth::builder()
                    .issues(
                        Issue::builder()
                            .code(NodegroupIssueCode::InsufficientFreeAddresses)
                            .message("subnet is full")
                            .resource_ids("subnet-0aaaaaaaaaaaaaaaa")
                            .build(),
                    )
                    .build(),
            )
            .build();
        assert_eq!(
            health_issues(&live),
            "InsufficientFreeAddresses: subnet is full (subnet-0aaaaaaaaaaaaaaaa)"
        );
    }

    #[test]
    fn ids() {
        assert_eq!(parts("ml/gpu").ok(), Some(("ml", "gpu")));
        for bad in ["ml", "/gpu", "ml/", "a/b/c"] {
            assert!(parts(bad).is_err(), "{bad}");
        }
        assert_eq!(
            EksNodeGroup::planned_id(&base(), &Value::Null).as_deref(),
            Some("ml/gpu")
        );
    }

    #[test]
    fn validation_table() {
        let t = |k: &str, e: &str| NodeTaint {
            key: k.into(),
            value: None,
            effect: e.into(),
        };
        let cases: Vec<(Spec, &str, &str)> = vec![
            (base(), "", ""),
            (Spec { instance_types: vec!["m5.large".into()], capacity_type: "ON_DEMAND".into(), ..base() }, "", ""),
            (Spec { ami_type: Some("AL2023_x86_64_STANDARD".into()), ..base() }, "ami_type", "g5.xlarge has NVIDIA GPUs, which need a GPU AMI"),
            (Spec { ami_type: Some("AL2023_x86_64_STANDARD".into()), ..base() }, "ami_type", "set ami_type to AL2_x86_64_GPU, BOTTLEROCKET_x86_64_NVIDIA, BOTTLEROCKET_x86_64_NVIDIA_FIPS or AL2023_x86_64_NVIDIA or leave it out"),
            (Spec { instance_types: vec!["m5.large".into()], ami_type: Some("AL2023_x86_64_NVIDIA".into()), ..base() }, "ami_type", "is a GPU AMI but m5.large has no NVIDIA GPU"),
            (Spec { instance_types: vec!["m7g.large".into()], ami_type: Some("AL2023_x86_64_STANDARD".into()), ..base() }, "ami_type", "is an x86_64 AMI but m7g.large is arm64"),
            (Spec { instance_types: vec!["g5g.xlarge".into()], ami_type: Some("AL2023_x86_64_NVIDIA".into()), ..base() }, "ami_type", "AL2023_ARM_64_NVIDIA"),
            (Spec { ami_type: Some("AL2023_X86_64_GPU".into()), ..base() }, "ami_type", "is not an EKS AMI type"),
            (Spec { instance_types: vec!["g5.xlarge".into(), "m5.large".into()], ..base() }, "instance_types", "separate node groups"),
            (Spec { instance_types: vec!["m5-large".into()], ..base() }, "instance_types.0", "not an EC2 instance type"),
            (Spec { instance_types: vec!["g5.3xlarge".into()], ..base() }, "instance_types.0", "comes in sizes"),
            (Spec { instance_types: vec![], ..base() }, "instance_types", "at least one instance type"),
            (Spec { capacity_type: "spot".into(), ..base() }, "capacity_type", "use ON_DEMAND or SPOT"),
            (Spec { capacity_type: "CAPACITY_BLOCK".into(), ..base() }, "capacity_type", "launch template"),
            (Spec { scaling: Scaling { min: -1, max: 4, desired: None }, ..base() }, "scaling.min", "0 or more"),
            (Spec { scaling: Scaling { min: 0, max: 0, desired: None }, ..base() }, "scaling.max", "at least 1"),
            (Spec { scaling: Scaling { min: 3, max: 2, desired: None }, ..base() }, "scaling.max", "below min"),
            (Spec { scaling: Scaling { min: 1, max: 2, desired: Some(3) }, ..base() }, "scaling.desired", "outside min–max (1–2)"),
            (Spec { disk_size: 0, ..base() }, "disk_size", "1 to 16384"),
            (Spec { labels: BTreeMap::from([("bad key!".to_string(), "x".to_string())]), ..base() }, "labels", "key \"bad key!\""),
            (Spec { labels: BTreeMap::from([("team".to_string(), String::new())]), ..base() }, "labels", "need a value"),
            (Spec { taints: vec![t("gpu", "NoSchedule")], ..base() }, "taints.0.effect", "EKS takes NO_SCHEDULE"),
            (Spec { taints: vec![t("gpu", "SOMETIMES")], ..base() }, "taints.0.effect", "not a taint effect"),
            (Spec { taints: vec![t("bad key", "NO_SCHEDULE")], ..base() }, "taints.0.key", "name part"),
            (Spec { taints: vec![t("gpu", "NO_SCHEDULE"), t("gpu", "NO_SCHEDULE")], ..base() }, "taints.1", "already listed"),
            (Spec { taints: vec![NodeTaint { key: "gpu".into(), value: Some("-bad-".into()), effect: "NO_SCHEDULE".into() }], ..base() }, "taints.0.value", "at most 63"),
            (Spec { node_role_arn: "eks-node".into(), ..base() }, "node_role_arn", "not an ARN"),
            (Spec { subnet_ids: vec![], ..base() }, "subnet_ids", "at least one subnet"),
            (Spec { subnet_ids: vec!["subnet-zz".into()], ..base() }, "subnet_ids.0", "not a subnet id"),
            (Spec { name: "gpu pool".into(), ..base() }, "name", "only letters"),
            (Spec { cluster_name: "-ml".into(), ..base() }, "cluster_name", "start with a letter or digit"),
        ];
        assert_validation::<EksNodeGroup>(cases, &Value::Null);
        let gov = vec![(
            base(),
            "node_role_arn",
            "the provider's region us-gov-west-1 is in the aws-us-gov partition",
        )];
        assert_validation::<EksNodeGroup>(gov, &json!({"region": "us-gov-west-1"}));
        assert_validation::<EksNodeGroup>(vec![(base(), "", "")], &json!({"region": "eu-west-1"}));
    }

    #[test]
    fn amazon_linux_2_against_the_cluster_version() {
        let peer = |version: &str| Peer {
            kind: "eks_cluster".into(),
            address: "eks_cluster.ml".into(),
            spec: json!({"version": version}),
        };
        let al2 = json!({"ami_type": "AL2_x86_64_GPU"});
        let problems = EksNodeGroup::validate_peers(&al2, &[peer("1.33")]);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(problems[0].path, vec!["ami_type"]);
        assert!(
            problems[0].message.starts_with(
                "eks_cluster.ml: EKS builds Amazon Linux 2 AMIs up to Kubernetes 1.32"
            ),
            "{problems:?}"
        );
        assert!(EksNodeGroup::validate_peers(&al2, &[peer("1.32")]).is_empty());
        assert!(EksNodeGroup::validate_peers(&json!({}), &[peer("1.33")]).is_empty());
        assert!(EksNodeGroup::validate_peers(&al2, &[peer(UNKNOWN)]).is_empty());
    }

    fn with_fallback(subnet_ids: &[&str], instance_types: &[&str]) -> Spec {
        Spec {
            fallback: Some(Fallback {
                subnet_ids: subnet_ids.iter().map(|s| s.to_string()).collect(),
                instance_types: instance_types.iter().map(|t| t.to_string()).collect(),
            }),
            ..base()
        }
    }

    const B: &str = "subnet-0bbbbbbbbbbbbbbbb";
    const C: &str = "subnet-0cccccccccccccccc";

    #[test]
    fn candidates_try_each_fallback_subnet_then_each_fallback_instance_type() {
        let c = |subnets: &[&str], types: &[&str]| Candidate {
            subnet_ids: subnets.iter().map(|s| s.to_string()).collect(),
            instance_types: types.iter().map(|t| t.to_string()).collect(),
        };
        let declared = c(&["subnet-0aaaaaaaaaaaaaaaa"], &["g5.xlarge"]);
        assert_eq!(candidates(&base()), vec![declared.clone()]);
        let spec = with_fallback(&[B, C], &["g5.2xlarge", "g6.xlarge"]);
        let all = candidates(&spec);
        assert_eq!(
            all,
            vec![
                declared,
                c(&[B], &["g5.xlarge"]),
                c(&[C], &["g5.xlarge"]),
                c(&["subnet-0aaaaaaaaaaaaaaaa"], &["g5.2xlarge"]),
                c(&["subnet-0aaaaaaaaaaaaaaaa"], &["g6.xlarge"]),
            ]
        );
        assert_eq!(all[1].as_fallback(&spec), format!("fallback subnet {B}"));
        assert_eq!(
            all[3].as_fallback(&spec),
            "fallback instance type g5.2xlarge"
        );
    }

    #[test]
    fn only_capacity_failures_fall_back() {
        // What wait_active reports for the sandbox's (and EKS's) CREATE_FAILED group.
        let launch = "eks:CreateNodegroup failed: node group gpu of cluster ml is CREATE_FAILED: AsgInstanceLaunchFailures: Could not launch On-Demand Instances. InsufficientInstanceCapacity - We currently do not have sufficient g5.xlarge capacity in the Availability Zone you requested (us-east-1a). (eks-gpu-1)";
        assert_eq!(
            capacity_reason(launch),
            Some("InsufficientInstanceCapacity")
        );
        assert_eq!(
            capacity_reason("AsgInstanceLaunchFailures: Could not launch Spot Instances. UnfulfillableCapacity - Unable to fulfill capacity due to your request configuration."),
            Some("UnfulfillableCapacity")
        );
        for other in [
            "AsgInstanceLaunchFailures: Could not launch On-Demand Instances. VcpuLimitExceeded - You have requested more vCPU capacity than your current vCPU limit of 8 allows",
            "InsufficientFreeAddresses: subnet is full",
            "NodeCreationFailure: Instances failed to join the kubernetes cluster",
        ] {
            assert_eq!(capacity_reason(other), None, "{other}");
        }
        let tried = vec![
            (
                "g5.xlarge in subnet-a (InsufficientInstanceCapacity)".to_string(),
                true,
            ),
            ("g5.2xlarge in subnet-a (failed)".to_string(), false),
        ];
        let e = after_tries(ProviderError::Unsupported("boom".into()), &tried);
        assert_eq!(
            e.to_string(),
            "eks:CreateNodegroup failed: tried g5.xlarge in subnet-a (InsufficientInstanceCapacity); g5.2xlarge in subnet-a (failed); the last attempt failed: boom"
        );
        let alone = after_tries(ProviderError::Unsupported("boom".into()), &tried[..1]);
        assert_eq!(alone.to_string(), "boom");
    }

    #[test]
    fn a_group_on_a_fallback_reads_back_as_declared_and_says_where_it_landed() {
        let spec = with_fallback(&[B], &["g5.2xlarge"]);
        for placed in candidates(&spec) {
            let live = live_of(
                &Spec {
                    subnet_ids: placed.subnet_ids.clone(),
                    instance_types: placed.instance_types.clone(),
                    ..spec.clone()
                },
                "eks_node_group.gpu",
            );
            assert_eq!(spec_of(&live, Some(&spec)), spec, "{placed:?}");
            let landed = outputs_of(&live, &spec).landed;
            assert_eq!(
                (landed.subnet_ids, landed.instance_types),
                (placed.subnet_ids.clone(), placed.instance_types.clone())
            );
        }
        // Not a candidate: drift, shown as the live group is.
        let elsewhere = live_of(
            &Spec {
                instance_types: vec!["g6.xlarge".into()],
                ..spec.clone()
            },
            "eks_node_group.gpu",
        );
        assert_eq!(
            spec_of(&elsewhere, Some(&spec)).instance_types,
            ["g6.xlarge"]
        );
        let fallback_type = live_of(&candidate_spec(&spec, 2), "eks_node_group.gpu");
        assert_eq!(
            spec_of(&fallback_type, Some(&base())).instance_types,
            ["g5.2xlarge"],
            "without the prior's fallback it is drift"
        );
        // The fallback itself is the prior's: changing it is no change of the group.
        let other = with_fallback(&[C], &[]);
        assert_eq!(
            spec_of(&live_of(&base(), "x.y"), Some(&other)).fallback,
            other.fallback
        );
    }

    fn candidate_spec(spec: &Spec, i: usize) -> Spec {
        let c = &candidates(spec)[i];
        Spec {
            subnet_ids: c.subnet_ids.clone(),
            instance_types: c.instance_types.clone(),
            ..spec.clone()
        }
    }

    #[test]
    fn fallback_validation() {
        let cases: Vec<(Spec, &str, &str)> = vec![
            (with_fallback(&[B, C], &["g5.2xlarge", "g6.xlarge"]), "", ""),
            (with_fallback(&[], &[]), "fallback", "names no fallback"),
            (
                with_fallback(&["subnet-zz"], &[]),
                "fallback.subnet_ids.0",
                "not a subnet id",
            ),
            (
                with_fallback(&[B, B], &[]),
                "fallback.subnet_ids.1",
                "listed twice",
            ),
            (
                with_fallback(&["subnet-0aaaaaaaaaaaaaaaa"], &[]),
                "fallback.subnet_ids.0",
                "in subnet_ids already",
            ),
            (
                with_fallback(&[], &["g5.2xlarge", "g5.2xlarge"]),
                "fallback.instance_types.1",
                "listed twice",
            ),
            (
                with_fallback(&[], &["g5.xlarge"]),
                "fallback.instance_types.0",
                "in instance_types already",
            ),
            (
                with_fallback(&[], &["g5-2xlarge"]),
                "fallback.instance_types.0",
                "not an EC2 instance type",
            ),
            (
                with_fallback(&[], &["m5.large"]),
                "fallback.instance_types.0",
                "same architecture and accelerators",
            ),
            (
                with_fallback(&[], &["g5g.xlarge"]),
                "fallback.instance_types.0",
                "arm64",
            ),
            (
                Spec {
                    instance_types: vec!["g5.12xlarge".into()],
                    ..with_fallback(&[], &["g5.2xlarge"])
                },
                "fallback.instance_types.0",
                "fewer than the 4 per node",
            ),
        ];
        assert_validation::<EksNodeGroup>(cases, &Value::Null);
    }
}
