//! Compute Engine (compute v1), as far as capacity planning reads it: `zones.list/get`,
//! `regions.list/get` with the regional `quotas` (limit and usage),
//! `machineTypes.list/get` (vCPUs and memory), and
//! `acceleratorTypes.list/get/aggregatedList` with the `filter` parameter. Served under
//! the `/compute/` root at `compute/v1/…`, the discovery document's `servicePath`.
//!
//! This file also owns what Compute Engine is to GKE: the table of which GPUs each zone
//! of us-central1, us-east1 and europe-west4 offers, what a node pool consumes of which
//! quota metric (vCPUs by machine family, GPUs, TPU chips, instances, boot disks), the
//! usage the emulated node pools add up to, and the errors GKE passes on when a pool
//! does not fit: `Insufficient regional quota …` (403, at the request) and the
//! `GCE_STOCKOUT` a pool's operation ends with. The configured limits and stockouts
//! come from `capacity.rs`; the defaults are here.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::error::{ApiError, Code};
use super::filter::Filter;
use super::int_of;
use super::kube::KubeCluster;
use super::machines::{self, is_zone};
use crate::capacity::{GcpCapacity, QuotaNames};
use crate::http::{ApiRequest, ApiResponse};

/// Where selfLinks point, as Compute Engine writes them.
const SELF_LINK_ROOT: &str = "https://www.googleapis.com/compute/v1";

/// The timestamp Compute Engine gives regions, zones and accelerator types.
const EPOCH: &str = "1969-12-31T16:00:00.000-08:00";

/// The regions the sandbox's Compute Engine has, with their ids.
const REGIONS: &[(&str, &str)] = &[
    ("us-central1", "1000"),
    ("us-east1", "1230"),
    ("europe-west4", "1300"),
];

/// Every zone and the GPU types it offers — a snapshot of Google's GPU regions table
/// (not everything everywhere: no L4 in us-central1-f, P100 only in a few zones, no T4
/// in us-east1-b).
const ZONES: &[(&str, &[&str])] = &[
    (
        "us-central1-a",
        &[
            "nvidia-tesla-t4",
            "nvidia-tesla-t4-vws",
            "nvidia-l4",
            "nvidia-tesla-v100",
            "nvidia-tesla-p4",
            "nvidia-tesla-p4-vws",
            "nvidia-tesla-a100",
            "nvidia-a100-80gb",
            "nvidia-h100-80gb",
            "nvidia-h100-mega-80gb",
        ],
    ),
    (
        "us-central1-b",
        &[
            "nvidia-tesla-t4",
            "nvidia-tesla-t4-vws",
            "nvidia-l4",
            "nvidia-tesla-v100",
            "nvidia-tesla-a100",
            "nvidia-h100-80gb",
        ],
    ),
    (
        "us-central1-c",
        &[
            "nvidia-tesla-t4",
            "nvidia-tesla-t4-vws",
            "nvidia-l4",
            "nvidia-tesla-v100",
            "nvidia-tesla-p100",
            "nvidia-tesla-p100-vws",
            "nvidia-tesla-p4",
            "nvidia-tesla-p4-vws",
            "nvidia-tesla-a100",
            "nvidia-a100-80gb",
            "nvidia-h100-80gb",
        ],
    ),
    (
        "us-central1-f",
        &[
            "nvidia-tesla-t4",
            "nvidia-tesla-t4-vws",
            "nvidia-tesla-v100",
            "nvidia-tesla-p100",
            "nvidia-tesla-p100-vws",
            "nvidia-tesla-a100",
        ],
    ),
    (
        "us-east1-b",
        &[
            "nvidia-l4",
            "nvidia-tesla-p100",
            "nvidia-tesla-p100-vws",
            "nvidia-tesla-a100",
        ],
    ),
    (
        "us-east1-c",
        &[
            "nvidia-tesla-t4",
            "nvidia-tesla-t4-vws",
            "nvidia-l4",
            "nvidia-tesla-v100",
            "nvidia-tesla-p100",
            "nvidia-tesla-p100-vws",
        ],
    ),
    (
        "us-east1-d",
        &[
            "nvidia-tesla-t4",
            "nvidia-tesla-t4-vws",
            "nvidia-l4",
            "nvidia-h100-80gb",
        ],
    ),
    (
        "europe-west4-a",
        &[
            "nvidia-tesla-t4",
            "nvidia-tesla-t4-vws",
            "nvidia-l4",
            "nvidia-tesla-v100",
            "nvidia-tesla-p100",
            "nvidia-tesla-p100-vws",
            "nvidia-tesla-a100",
            "nvidia-a100-80gb",
            "nvidia-h100-80gb",
        ],
    ),
    (
        "europe-west4-b",
        &[
            "nvidia-tesla-t4",
            "nvidia-tesla-t4-vws",
            "nvidia-l4",
            "nvidia-tesla-v100",
            "nvidia-tesla-p4",
            "nvidia-tesla-p4-vws",
            "nvidia-tesla-a100",
            "nvidia-h100-80gb",
        ],
    ),
    (
        "europe-west4-c",
        &[
            "nvidia-tesla-t4",
            "nvidia-tesla-t4-vws",
            "nvidia-l4",
            "nvidia-tesla-v100",
            "nvidia-tesla-p4",
            "nvidia-tesla-p4-vws",
            "nvidia-h100-80gb",
        ],
    ),
];

/// The CPU platforms every emulated zone reports.
const CPU_PLATFORMS: &[&str] = &[
    "Intel Broadwell",
    "Intel Cascade Lake",
    "Intel Ice Lake",
    "Intel Sapphire Rapids",
    "Intel Skylake",
    "AMD Genoa",
    "AMD Milan",
    "AMD Rome",
];

/// A GPU type: its description, how many one VM can take, and the regional quota
/// metrics it counts against on-demand and as Spot/preemptible (`None`: the metric is
/// not a regional Compute Engine quota, e.g. on-demand H100s).
struct Gpu {
    name: &'static str,
    description: &'static str,
    max_per_instance: i64,
    metric: Option<&'static str>,
    preemptible_metric: Option<&'static str>,
}

const GPUS: &[Gpu] = &[
    Gpu {
        name: "nvidia-tesla-t4",
        description: "NVIDIA T4",
        max_per_instance: 4,
        metric: Some("NVIDIA_T4_GPUS"),
        preemptible_metric: Some("PREEMPTIBLE_NVIDIA_T4_GPUS"),
    },
    Gpu {
        name: "nvidia-tesla-t4-vws",
        description: "NVIDIA Tesla T4 Virtual Workstation",
        max_per_instance: 4,
        metric: Some("NVIDIA_T4_VWS_GPUS"),
        preemptible_metric: Some("PREEMPTIBLE_NVIDIA_T4_VWS_GPUS"),
    },
    Gpu {
        name: "nvidia-l4",
        description: "NVIDIA L4",
        max_per_instance: 8,
        metric: Some("NVIDIA_L4_GPUS"),
        preemptible_metric: Some("PREEMPTIBLE_NVIDIA_L4_GPUS"),
    },
    Gpu {
        name: "nvidia-tesla-v100",
        description: "NVIDIA V100",
        max_per_instance: 8,
        metric: Some("NVIDIA_V100_GPUS"),
        preemptible_metric: Some("PREEMPTIBLE_NVIDIA_V100_GPUS"),
    },
    Gpu {
        name: "nvidia-tesla-p100",
        description: "NVIDIA Tesla P100",
        max_per_instance: 4,
        metric: Some("NVIDIA_P100_GPUS"),
        preemptible_metric: Some("PREEMPTIBLE_NVIDIA_P100_GPUS"),
    },
    Gpu {
        name: "nvidia-tesla-p100-vws",
        description: "NVIDIA Tesla P100 Virtual Workstation",
        max_per_instance: 4,
        metric: Some("NVIDIA_P100_VWS_GPUS"),
        preemptible_metric: Some("PREEMPTIBLE_NVIDIA_P100_VWS_GPUS"),
    },
    Gpu {
        name: "nvidia-tesla-p4",
        description: "NVIDIA Tesla P4",
        max_per_instance: 4,
        metric: Some("NVIDIA_P4_GPUS"),
        preemptible_metric: Some("PREEMPTIBLE_NVIDIA_P4_GPUS"),
    },
    Gpu {
        name: "nvidia-tesla-p4-vws",
        description: "NVIDIA Tesla P4 Virtual Workstation",
        max_per_instance: 4,
        metric: Some("NVIDIA_P4_VWS_GPUS"),
        preemptible_metric: Some("PREEMPTIBLE_NVIDIA_P4_VWS_GPUS"),
    },
    Gpu {
        name: "nvidia-tesla-a100",
        description: "NVIDIA A100 40GB",
        max_per_instance: 16,
        metric: Some("NVIDIA_A100_GPUS"),
        preemptible_metric: Some("PREEMPTIBLE_NVIDIA_A100_GPUS"),
    },
    Gpu {
        name: "nvidia-a100-80gb",
        description: "NVIDIA A100 80GB",
        max_per_instance: 8,
        metric: Some("NVIDIA_A100_80GB_GPUS"),
        preemptible_metric: Some("PREEMPTIBLE_NVIDIA_A100_80GB_GPUS"),
    },
    Gpu {
        name: "nvidia-h100-80gb",
        description: "NVIDIA H100 80GB",
        max_per_instance: 8,
        metric: None,
        preemptible_metric: Some("PREEMPTIBLE_NVIDIA_H100_GPUS"),
    },
    Gpu {
        name: "nvidia-h100-mega-80gb",
        description: "NVIDIA H100 80GB MEGA",
        max_per_instance: 8,
        metric: None,
        preemptible_metric: None,
    },
];

const CPU_LIMIT: f64 = 96.0;
const GPU_LIMIT: f64 = 16.0;
const TPU_LIMIT: f64 = 16.0;

/// The regional quota metrics `regions.get` reports, in its order, with the limits a
/// project has unless configured otherwise. Generous rather than a fresh project's
/// (24 CPUs, often 0 GPUs): the example stacks must run as they are — gke-accelerators
/// alone takes 72 vCPUs — and a regional pool of 2-GPU nodes resized to 2 per zone
/// takes 12 GPUs.
const METRICS: &[(&str, f64)] = &[
    ("CPUS", CPU_LIMIT),
    ("PREEMPTIBLE_CPUS", CPU_LIMIT),
    ("A2_CPUS", CPU_LIMIT),
    ("C2_CPUS", CPU_LIMIT),
    ("C2D_CPUS", CPU_LIMIT),
    ("C3_CPUS", CPU_LIMIT),
    ("M1_CPUS", CPU_LIMIT),
    ("M2_CPUS", CPU_LIMIT),
    ("M3_CPUS", CPU_LIMIT),
    ("N2_CPUS", CPU_LIMIT),
    ("N2D_CPUS", CPU_LIMIT),
    ("T2A_CPUS", CPU_LIMIT),
    ("T2D_CPUS", CPU_LIMIT),
    ("INSTANCES", 1000.0),
    ("DISKS_TOTAL_GB", 4096.0),
    ("SSD_TOTAL_GB", 4096.0),
    ("NVIDIA_T4_GPUS", GPU_LIMIT),
    ("PREEMPTIBLE_NVIDIA_T4_GPUS", GPU_LIMIT),
    ("NVIDIA_T4_VWS_GPUS", GPU_LIMIT),
    ("PREEMPTIBLE_NVIDIA_T4_VWS_GPUS", GPU_LIMIT),
    ("NVIDIA_L4_GPUS", GPU_LIMIT),
    ("PREEMPTIBLE_NVIDIA_L4_GPUS", GPU_LIMIT),
    ("NVIDIA_V100_GPUS", GPU_LIMIT),
    ("PREEMPTIBLE_NVIDIA_V100_GPUS", GPU_LIMIT),
    ("NVIDIA_P100_GPUS", GPU_LIMIT),
    ("PREEMPTIBLE_NVIDIA_P100_GPUS", GPU_LIMIT),
    ("NVIDIA_P100_VWS_GPUS", GPU_LIMIT),
    ("PREEMPTIBLE_NVIDIA_P100_VWS_GPUS", GPU_LIMIT),
    ("NVIDIA_P4_GPUS", GPU_LIMIT),
    ("PREEMPTIBLE_NVIDIA_P4_GPUS", GPU_LIMIT),
    ("NVIDIA_P4_VWS_GPUS", GPU_LIMIT),
    ("PREEMPTIBLE_NVIDIA_P4_VWS_GPUS", GPU_LIMIT),
    ("NVIDIA_A100_GPUS", GPU_LIMIT),
    ("PREEMPTIBLE_NVIDIA_A100_GPUS", GPU_LIMIT),
    ("NVIDIA_A100_80GB_GPUS", GPU_LIMIT),
    ("PREEMPTIBLE_NVIDIA_A100_80GB_GPUS", GPU_LIMIT),
    ("PREEMPTIBLE_NVIDIA_H100_GPUS", GPU_LIMIT),
    ("TPU_LITE_PODSLICE_V5", TPU_LIMIT),
    ("PREEMPTIBLE_TPU_LITE_PODSLICE_V5", TPU_LIMIT),
    ("TPU_LITE_DEVICE_V5", TPU_LIMIT),
    ("PREEMPTIBLE_TPU_LITE_DEVICE_V5", TPU_LIMIT),
    ("TPU_PODSLICE_V4", TPU_LIMIT),
    ("PREEMPTIBLE_TPU_PODSLICE_V4", TPU_LIMIT),
];

/// The metrics `regions.get` reports, which a capacity description may set.
pub(crate) const QUOTA_NAMES: QuotaNames = QuotaNames {
    what: "a regional Compute Engine quota metric the sandbox reports",
    names: metric_names,
};

/// The metrics `regions.get` reports, in order.
fn metric_names() -> Vec<&'static str> {
    METRICS.iter().map(|(m, _)| *m).collect()
}

/// The limit of `metric` in `project`'s `region`: configured, else the default.
fn limit(capacity: &GcpCapacity, project: &str, region: &str, metric: &str) -> f64 {
    capacity.limit(project, region, metric).unwrap_or_else(|| {
        METRICS
            .iter()
            .find(|(m, _)| *m == metric)
            .map_or(0.0, |(_, l)| *l)
    })
}

/// The region of a zone (`us-central1-a` → `us-central1`) or of a region (itself).
pub(crate) fn region_of(location: &str) -> &str {
    if is_zone(location) {
        location.rsplit_once('-').map_or(location, |(r, _)| r)
    } else {
        location
    }
}

fn gpu(name: &str) -> Option<&'static Gpu> {
    GPUS.iter().find(|g| g.name == name)
}

// ---------------------------------------------------------------- what a node consumes

/// The vCPUs of a machine type: the shapes the Kubernetes side gives its nodes, so a
/// node's capacity and its quota agree; unknown types count as an e2-medium.
fn machine_cpus(machine_type: &str) -> i64 {
    machines::known_machine_shape(machine_type).map_or(2, |(cpus, _)| cpus)
}

/// The TPU chips of a TPU machine type and the quota metrics they count against
/// (on-demand, Spot); `None` for other machine types. v5p and v6e chips are Cloud TPU
/// quotas, not regional Compute Engine ones.
fn tpu_chips(machine_type: &str) -> Option<(i64, Option<(&'static str, &'static str)>)> {
    let parts: Vec<&str> = machine_type.split('-').collect();
    let [family, _, chips] = parts.as_slice() else {
        return None;
    };
    let chips: i64 = chips.strip_suffix('t')?.parse().ok()?;
    let metrics = match *family {
        "ct5lp" => Some(("TPU_LITE_PODSLICE_V5", "PREEMPTIBLE_TPU_LITE_PODSLICE_V5")),
        "ct5l" => Some(("TPU_LITE_DEVICE_V5", "PREEMPTIBLE_TPU_LITE_DEVICE_V5")),
        "ct4p" => Some(("TPU_PODSLICE_V4", "PREEMPTIBLE_TPU_PODSLICE_V4")),
        "ct5p" | "ct6e" => None,
        _ => return None,
    };
    Some((chips, metrics))
}

/// The vCPU quota metric of a machine family: most families share `CPUS`, these have
/// their own.
fn cpu_metric(machine_type: &str) -> &'static str {
    match machine_type.split('-').next().unwrap_or_default() {
        "a2" => "A2_CPUS",
        "c2" => "C2_CPUS",
        "c2d" => "C2D_CPUS",
        "c3" => "C3_CPUS",
        "m1" => "M1_CPUS",
        "m2" => "M2_CPUS",
        "m3" => "M3_CPUS",
        "n2" => "N2_CPUS",
        "n2d" => "N2D_CPUS",
        "t2a" => "T2A_CPUS",
        "t2d" => "T2D_CPUS",
        _ => "CPUS",
    }
}

/// The accelerator types a pool's nodes carry: the configured ones, else the machine's.
pub(crate) fn accelerator_types(config: &Value) -> Vec<String> {
    let configured: Vec<String> = config["accelerators"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a["acceleratorType"].as_str().map(str::to_string))
        .collect();
    if !configured.is_empty() {
        return configured;
    }
    let machine = config["machineType"].as_str().unwrap_or("e2-medium");
    machines::bundled_gpus(machine)
        .map(|(g, _)| vec![g.to_string()])
        .unwrap_or_default()
}

/// What `nodes` VMs of a node pool's `config` take from each quota metric.
pub(crate) fn demand(config: &Value, nodes: i64) -> BTreeMap<&'static str, f64> {
    let mut out: BTreeMap<&'static str, f64> = BTreeMap::new();
    if nodes <= 0 {
        return out;
    }
    let n = nodes as f64;
    let mut add = |metric: &'static str, amount: f64| {
        if amount > 0.0 {
            *out.entry(metric).or_default() += amount;
        }
    };
    let machine = config["machineType"].as_str().unwrap_or("e2-medium");
    // Spot VMs count against the preemptible quotas, as preemptible ones do.
    let spot = config["spot"] == Value::Bool(true) || config["preemptible"] == Value::Bool(true);
    add("INSTANCES", n);
    let disk_gb = match int_of(config, "diskSizeGb") {
        0 => 100,
        gb => gb,
    } as f64;
    match config["diskType"].as_str().unwrap_or("pd-balanced") {
        "pd-standard" => add("DISKS_TOTAL_GB", disk_gb * n),
        "pd-balanced" | "pd-ssd" => add("SSD_TOTAL_GB", disk_gb * n),
        // Hyperdisks have quotas of their own that regions.get does not report.
        _ => {}
    }
    if let Some((chips, metrics)) = tpu_chips(machine) {
        // A TPU VM's host CPUs come with its chips; only the chips are a quota.
        if let Some((on_demand, preemptible)) = metrics {
            add(if spot { preemptible } else { on_demand }, chips as f64 * n);
        }
        return out;
    }
    let cpus = machine_cpus(machine) as f64;
    add(
        if spot {
            "PREEMPTIBLE_CPUS"
        } else {
            cpu_metric(machine)
        },
        cpus * n,
    );
    let configured: Vec<(String, i64)> = config["accelerators"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| {
            let count = int_of(a, "acceleratorCount");
            a["acceleratorType"]
                .as_str()
                .map(|t| (t.to_string(), count))
        })
        .collect();
    let gpus = if configured.is_empty() {
        machines::bundled_gpus(machine)
            .map(|(g, c)| vec![(g.to_string(), c)])
            .unwrap_or_default()
    } else {
        configured
    };
    for (name, count) in gpus {
        let metric = gpu(&name).and_then(|g| if spot { g.preemptible_metric } else { g.metric });
        if let Some(metric) = metric {
            add(metric, count as f64 * n);
        }
    }
    out
}

/// The project and location of a GKE cluster key (`gke/projects/{p}/locations/{l}/…`).
fn cluster_place(cluster: &KubeCluster) -> Option<(&str, &str)> {
    let parts: Vec<&str> = cluster.key.split('/').collect();
    match parts.as_slice() {
        ["gke", "projects", project, "locations", location, ..] => Some((project, location)),
        _ => None,
    }
}

/// What the node pools of `project`'s clusters in `region` hold, by quota metric.
pub(crate) fn usage(
    clusters: &[KubeCluster],
    project: &str,
    region: &str,
) -> BTreeMap<&'static str, f64> {
    let mut out: BTreeMap<&'static str, f64> = BTreeMap::new();
    for cluster in clusters {
        let Some((p, location)) = cluster_place(cluster) else {
            continue;
        };
        if p != project || region_of(location) != region {
            continue;
        }
        for pool in &cluster.pools {
            for (metric, amount) in demand(&pool.config, pool.size * pool.zones) {
                *out.entry(metric).or_default() += amount;
            }
        }
    }
    out
}

/// Compute Engine's number format in quota messages: `'4.0'`.
fn quota_number(x: f64) -> String {
    if x.fract() == 0.0 {
        format!("{x:.1}")
    } else {
        format!("{x}")
    }
}

/// GKE's answer to a node pool request that needs more of `project`'s regional quota
/// than is left: 403 with `Insufficient regional quota to satisfy request: …` for the
/// metric short (numbered, one per line, when several are).
pub(crate) fn check_quota(
    capacity: &GcpCapacity,
    clusters: &[KubeCluster],
    project: &str,
    region: &str,
    demand: &BTreeMap<&'static str, f64>,
) -> Result<(), ApiError> {
    let used = usage(clusters, project, region);
    let mut short = Vec::new();
    // In regions.get's order, so messages name CPUs before GPUs.
    for (metric, _) in METRICS {
        let Some(need) = demand.get(metric).copied().filter(|n| *n > 0.0) else {
            continue;
        };
        let limit = limit(capacity, project, region, metric);
        let available = (limit - used.get(metric).copied().unwrap_or(0.0)).max(0.0);
        if need > available {
            short.push(format!(
                "insufficient regional quota to satisfy request: resource \"{metric}\": request requires '{}' and is short '{}'. project has a quota of '{}' with '{}' available. View and manage quotas at https://console.cloud.google.com/iam-admin/quotas?usage=USED&project={project}.",
                quota_number(need),
                quota_number(need - available),
                quota_number(limit),
                quota_number(available),
            ));
        }
    }
    let message = match short.as_slice() {
        [] => return Ok(()),
        [one] => format!("I{}", &one[1..]),
        many => many
            .iter()
            .enumerate()
            .map(|(i, m)| format!("({}) {m}", i + 1))
            .collect::<Vec<_>>()
            .join("\n"),
    };
    Err(ApiError::new(Code::PermissionDenied, message))
}

/// A Go duration as Go prints it (`3s`, `1.5s`, `0s`), as GKE's IGM messages show it.
fn go_duration(ms: u64) -> String {
    let (secs, frac) = (ms / 1000, ms % 1000);
    if frac == 0 {
        format!("{secs}s")
    } else {
        let frac = format!("{frac:03}");
        format!("{secs}.{}s", frac.trim_end_matches('0'))
    }
}

/// The message a node pool operation ends with when every one of its zones is out of
/// its machines: GKE's `GCE_STOCKOUT` from the instance group managers. `None` when a
/// zone has capacity (a stockout in one zone of several leaves the others to create
/// the nodes) or no node is to be made (`nodes_per_zone` 0, e.g. an autoscaled pool
/// starting empty).
#[allow(clippy::too_many_arguments)]
pub(crate) fn stockout(
    capacity: &GcpCapacity,
    project: &str,
    cluster: &str,
    pool: &str,
    zones: &[String],
    config: &Value,
    nodes_per_zone: i64,
    took_ms: u64,
) -> Option<String> {
    if nodes_per_zone <= 0 || zones.is_empty() {
        return None;
    }
    let machine = config["machineType"].as_str().unwrap_or("e2-medium");
    let accelerators = accelerator_types(config);
    if !zones
        .iter()
        .all(|z| capacity.stocked_out(z, machine, &accelerators))
    {
        return None;
    }
    let expected = nodes_per_zone * zones.len() as i64;
    let hash = crate::common::hash::fnv64(&[project, cluster, pool]);
    let short = |s: &str, n: usize| s.chars().take(n).collect::<String>();
    let instance = format!(
        "gke-{}-{}-{:08x}-{}",
        short(cluster, 14),
        short(pool, 14),
        hash & 0xffff_ffff,
        short(&format!("{:x}", hash >> 40), 4)
    );
    let zones_text = zones
        .iter()
        .map(|z| {
            format!(
                "The zone 'projects/{project}/zones/{z}' does not have enough resources available to fulfill the request."
            )
        })
        .collect::<Vec<_>>()
        .join(" ");
    Some(format!(
        "Google Compute Engine: Not all instances running in IGM after {}. Expected {expected}, running 0, transitioning {expected}. Current errors: [GCE_STOCKOUT]: Instance '{instance}' creation failed: {zones_text}  Try a different zone, or try again later.",
        go_duration(took_ms)
    ))
}

// ---------------------------------------------------------------- the API

fn not_found(resource: &str) -> ApiError {
    ApiError::not_found(format!("The resource '{resource}' was not found"))
}

fn zone_url(project: &str, zone: &str) -> String {
    format!("{SELF_LINK_ROOT}/projects/{project}/zones/{zone}")
}

fn region_url(project: &str, region: &str) -> String {
    format!("{SELF_LINK_ROOT}/projects/{project}/regions/{region}")
}

fn zone_names(region: &str) -> Vec<&'static str> {
    ZONES
        .iter()
        .map(|(z, _)| *z)
        .filter(|z| region_of(z) == region)
        .collect()
}

/// A stable numeric id for a catalog entry, as Compute Engine gives every resource one.
fn id_of(name: &str) -> String {
    (crate::common::hash::fnv64(&["compute", name]) % 9_000_000_000_000 + 1_000_000_000_000)
        .to_string()
}

fn render_zone(project: &str, zone: &str) -> Value {
    json!({
        "kind": "compute#zone",
        "id": id_of(zone),
        "creationTimestamp": EPOCH,
        "name": zone,
        "description": zone,
        "status": "UP",
        "region": region_url(project, region_of(zone)),
        "selfLink": zone_url(project, zone),
        "availableCpuPlatforms": CPU_PLATFORMS,
        "supportsPzs": false,
    })
}

fn render_region(
    project: &str,
    region: &str,
    id: &str,
    capacity: &GcpCapacity,
    clusters: &[KubeCluster],
) -> Value {
    let used = usage(clusters, project, region);
    let quotas: Vec<Value> = METRICS
        .iter()
        .map(|(metric, _)| {
            json!({
                "metric": metric,
                "limit": limit(capacity, project, region, metric),
                "usage": used.get(metric).copied().unwrap_or(0.0),
            })
        })
        .collect();
    let zones: Vec<String> = zone_names(region)
        .into_iter()
        .map(|z| zone_url(project, z))
        .collect();
    json!({
        "kind": "compute#region",
        "id": id,
        "creationTimestamp": EPOCH,
        "name": region,
        "description": region,
        "status": "UP",
        "zones": zones,
        "quotas": quotas,
        "selfLink": region_url(project, region),
        "supportsPzs": false,
    })
}

fn render_accelerator_type(project: &str, zone: &str, gpu: &Gpu) -> Value {
    json!({
        "kind": "compute#acceleratorType",
        "id": id_of(&format!("{zone}/{}", gpu.name)),
        "creationTimestamp": EPOCH,
        "name": gpu.name,
        "description": gpu.description,
        "zone": zone_url(project, zone),
        "selfLink": format!("{}/acceleratorTypes/{}", zone_url(project, zone), gpu.name),
        "maximumCardsPerInstance": gpu.max_per_instance,
    })
}

fn accelerator_types_in(project: &str, zone: &str) -> Vec<Value> {
    ZONES
        .iter()
        .filter(|(z, _)| *z == zone)
        .flat_map(|(_, gpus)| gpus.iter())
        .filter_map(|name| gpu(name))
        .map(|g| render_accelerator_type(project, zone, g))
        .collect()
}

/// The machine families a zone lists in full (`machineTypes.list`): shared-core e2 and
/// the general-purpose sizes; `machineTypes.get` also answers any other shape the
/// sandbox knows, where its GPUs are sold.
const LISTED_MACHINES: &[&str] = &[
    "e2-micro",
    "e2-small",
    "e2-medium",
    "e2-standard-2",
    "e2-standard-4",
    "e2-standard-8",
    "e2-standard-16",
    "n1-standard-1",
    "n1-standard-2",
    "n1-standard-4",
    "n1-standard-8",
    "n1-standard-16",
    "n1-highmem-8",
    "n2-standard-4",
    "n2-standard-8",
    "n2-standard-16",
];

/// `machine` as `zone` serves it: a shape the sandbox knows, in a zone that sells the
/// GPUs it comes with (an a2 only where A100s are, a g2 only where L4s are).
fn machine_type(project: &str, zone: &str, machine: &str) -> Option<Value> {
    let (cpus, memory_mb) = machines::known_machine_shape(machine)?;
    let bundled = machines::bundled_gpus(machine);
    if let Some((gpu, _)) = bundled {
        let sold = ZONES
            .iter()
            .any(|(z, gpus)| *z == zone && gpus.contains(&gpu));
        if !sold {
            return None;
        }
    }
    let shared = matches!(machine, "e2-micro" | "e2-small" | "e2-medium");
    let mut out = json!({
        "kind": "compute#machineType",
        "id": id_of(machine),
        "creationTimestamp": EPOCH,
        "name": machine,
        "description": format!("{cpus} vCPUs, {} GB RAM", memory_mb as f64 / 1024.0),
        "guestCpus": cpus,
        "memoryMb": memory_mb,
        "maximumPersistentDisks": if shared { 16 } else { 128 },
        "maximumPersistentDisksSizeGb": if shared { "3072" } else { "263168" },
        "zone": zone,
        "selfLink": format!("{}/machineTypes/{machine}", zone_url(project, zone)),
        "isSharedCpu": shared,
        "architecture": "X86_64",
    });
    if let Some((gpu, count)) = bundled {
        out["accelerators"] =
            json!([{"guestAcceleratorType": gpu, "guestAcceleratorCount": count}]);
    }
    Some(out)
}

fn machine_types_in(project: &str, zone: &str) -> Vec<Value> {
    LISTED_MACHINES
        .iter()
        .filter_map(|m| machine_type(project, zone, m))
        .collect()
}

fn filter_of(req: &ApiRequest) -> Result<Option<Filter>, ApiError> {
    match req.param("filter").map(str::trim).filter(|f| !f.is_empty()) {
        None => Ok(None),
        Some(text) => Filter::parse(text).map(Some).map_err(|()| {
            ApiError::invalid(format!(
                "Invalid value for field 'filter': '{text}'. Invalid list filter expression."
            ))
        }),
    }
}

fn keep(filter: &Option<Filter>, items: Vec<Value>) -> Vec<Value> {
    match filter {
        Some(f) => items.into_iter().filter(|i| f.matches(i)).collect(),
        None => items,
    }
}

/// A list response: `kind`, `id`, the page of `items` (`maxResults`, `pageToken`) and
/// `nextPageToken` when more remain.
fn list(
    req: &ApiRequest,
    kind: &str,
    id: &str,
    self_link: String,
    items: Vec<Value>,
) -> Result<Value, ApiError> {
    let start = match req.param("pageToken").filter(|t| !t.is_empty()) {
        None => 0,
        Some(t) => t.parse::<usize>().map_err(|_| {
            ApiError::invalid(format!(
                "Invalid value for field 'pageToken': '{t}'. Invalid page token."
            ))
        })?,
    };
    let max = match req.param("maxResults") {
        None => 500,
        Some(m) => m
            .parse::<usize>()
            .ok()
            .filter(|m| *m > 0)
            .map(|m| m.min(500))
            .ok_or_else(|| {
                ApiError::invalid(format!(
                    "Invalid value for field 'maxResults': '{m}'. Must be between 0 and 500."
                ))
            })?,
    };
    let total = items.len();
    let page: Vec<Value> = items.into_iter().skip(start).take(max).collect();
    let mut out = json!({"kind": kind, "id": id, "items": page, "selfLink": self_link});
    if start + max < total {
        out["nextPageToken"] = json!((start + max).to_string());
    }
    Ok(out)
}

/// Serves one Compute Engine request; only reads, so nothing in the state changes.
/// `clusters` lists GKE's clusters (what their pools use of the regions' quotas), read
/// only for the regions' answers.
pub(crate) fn handle(
    req: &ApiRequest,
    capacity: &GcpCapacity,
    clusters: &dyn Fn() -> Vec<KubeCluster>,
) -> Result<ApiResponse, ApiError> {
    let segments = req.segments();
    let s: Vec<&str> = segments.iter().map(String::as_str).collect();
    let method = req.method.as_str();
    let ["compute", "v1", "projects", project, rest @ ..] = s.as_slice() else {
        return Err(ApiError::no_route(method, &req.path));
    };
    if method != "GET" {
        return Err(ApiError::no_route(method, &req.path));
    }
    let root = format!("{SELF_LINK_ROOT}/projects/{project}");
    let body = match rest {
        ["zones"] => {
            let items = ZONES.iter().map(|(z, _)| render_zone(project, z)).collect();
            let items = keep(&filter_of(req)?, items);
            list(
                req,
                "compute#zoneList",
                &format!("projects/{project}/zones"),
                format!("{root}/zones"),
                items,
            )?
        }
        ["zones", zone] => {
            if !ZONES.iter().any(|(z, _)| z == zone) {
                return Err(not_found(&format!("projects/{project}/zones/{zone}")));
            }
            render_zone(project, zone)
        }
        ["regions"] => {
            let clusters = clusters();
            let items = REGIONS
                .iter()
                .map(|(r, id)| render_region(project, r, id, capacity, &clusters))
                .collect();
            let items = keep(&filter_of(req)?, items);
            list(
                req,
                "compute#regionList",
                &format!("projects/{project}/regions"),
                format!("{root}/regions"),
                items,
            )?
        }
        ["regions", region] => {
            let Some((_, id)) = REGIONS.iter().find(|(r, _)| r == region) else {
                return Err(not_found(&format!("projects/{project}/regions/{region}")));
            };
            render_region(project, region, id, capacity, &clusters())
        }
        ["zones", zone, "acceleratorTypes"] => {
            if !ZONES.iter().any(|(z, _)| z == zone) {
                return Err(not_found(&format!("projects/{project}/zones/{zone}")));
            }
            let items = keep(&filter_of(req)?, accelerator_types_in(project, zone));
            list(
                req,
                "compute#acceleratorTypeList",
                &format!("projects/{project}/zones/{zone}/acceleratorTypes"),
                format!("{root}/zones/{zone}/acceleratorTypes"),
                items,
            )?
        }
        ["zones", zone, "acceleratorTypes", name] => accelerator_types_in(project, zone)
            .into_iter()
            .find(|t| t["name"] == *name)
            .ok_or_else(|| {
                not_found(&format!(
                    "projects/{project}/zones/{zone}/acceleratorTypes/{name}"
                ))
            })?,
        ["zones", zone, "machineTypes"] => {
            if !ZONES.iter().any(|(z, _)| z == zone) {
                return Err(not_found(&format!("projects/{project}/zones/{zone}")));
            }
            let items = keep(&filter_of(req)?, machine_types_in(project, zone));
            list(
                req,
                "compute#machineTypeList",
                &format!("projects/{project}/zones/{zone}/machineTypes"),
                format!("{root}/zones/{zone}/machineTypes"),
                items,
            )?
        }
        ["zones", zone, "machineTypes", name] => {
            if !ZONES.iter().any(|(z, _)| z == zone) {
                return Err(not_found(&format!("projects/{project}/zones/{zone}")));
            }
            machine_type(project, zone, name).ok_or_else(|| {
                not_found(&format!(
                    "projects/{project}/zones/{zone}/machineTypes/{name}"
                ))
            })?
        }
        ["aggregated", "acceleratorTypes"] => {
            let filter = filter_of(req)?;
            let mut items = serde_json::Map::new();
            for (zone, _) in ZONES {
                let scope = format!("zones/{zone}");
                let found = keep(&filter, accelerator_types_in(project, zone));
                let entry = if found.is_empty() {
                    json!({"warning": {
                        "code": "NO_RESULTS_ON_PAGE",
                        "message": format!("There are no results for scope '{scope}' on this page."),
                        "data": [{"key": "scope", "value": scope}],
                    }})
                } else {
                    json!({"acceleratorTypes": found})
                };
                items.insert(scope, entry);
            }
            json!({
                "kind": "compute#acceleratorTypeAggregatedList",
                "id": format!("projects/{project}/aggregated/acceleratorTypes"),
                "items": items,
                "selfLink": format!("{root}/aggregated/acceleratorTypes"),
            })
        }
        _ => return Err(ApiError::no_route(method, &req.path)),
    };
    Ok(ApiResponse::ok(body))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gcp::container;
    use axum::http::Method;

    fn get(
        path: &str,
        capacity: &GcpCapacity,
        container: &container::State,
    ) -> Result<Value, ApiError> {
        let req = ApiRequest::new(Method::GET, path, None);
        handle(&req, capacity, &|| container.kube_clusters())
            .map(|r| r.json_body().cloned().unwrap_or(Value::Null))
    }

    fn names(list: &Value) -> Vec<String> {
        list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|i| i["name"].as_str().map(str::to_string))
            .collect()
    }

    #[test]
    fn machine_types_give_vcpus_and_exist_only_where_their_gpus_are_sold() {
        let (cap, gke) = (GcpCapacity::default(), container::State::default());
        let n1 = get(
            "compute/v1/projects/p/zones/us-central1-a/machineTypes/n1-standard-8",
            &cap,
            &gke,
        )
        .expect("n1-standard-8");
        assert_eq!(n1["guestCpus"], 8);
        assert_eq!(n1["memoryMb"], 30720);
        assert_eq!(n1["zone"], "us-central1-a");
        let a2 = get(
            "compute/v1/projects/p/zones/us-central1-a/machineTypes/a2-highgpu-2g",
            &cap,
            &gke,
        )
        .expect("a2 where A100s are");
        assert_eq!(a2["guestCpus"], 24);
        assert_eq!(
            a2["accelerators"][0]["guestAcceleratorType"],
            "nvidia-tesla-a100"
        );
        // us-central1-f has no L4s, so no g2 machines.
        let g2 = get(
            "compute/v1/projects/p/zones/us-central1-f/machineTypes/g2-standard-8",
            &cap,
            &gke,
        )
        .expect_err("no g2 without L4s");
        assert_eq!(g2.http, 404);
        assert!(get(
            "compute/v1/projects/p/zones/us-central1-a/machineTypes/n9-mystery-4",
            &cap,
            &gke,
        )
        .is_err());
        let list = get(
            "compute/v1/projects/p/zones/us-east1-b/machineTypes",
            &cap,
            &gke,
        )
        .expect("list");
        assert!(names(&list).contains(&"e2-medium".to_string()));
        // The shape every field has is the discovery document's (checked in the
        // sandbox's contract tests for every Compute response).
        assert_eq!(list["kind"], "compute#machineTypeList");
    }

    #[test]
    fn zones_offer_some_gpus_not_every_gpu_everywhere() {
        let (cap, gke) = (GcpCapacity::default(), container::State::default());
        for zone in ["us-central1-a", "us-central1-b", "us-central1-c"] {
            let list = get(
                &format!("compute/v1/projects/p/zones/{zone}/acceleratorTypes"),
                &cap,
                &gke,
            )
            .expect("list");
            let names = names(&list);
            assert!(
                names.contains(&"nvidia-tesla-t4".to_string()),
                "{zone}: {names:?}"
            );
            assert!(
                names.contains(&"nvidia-l4".to_string()),
                "{zone}: {names:?}"
            );
            assert_eq!(list["kind"], "compute#acceleratorTypeList");
        }
        let f = get(
            "compute/v1/projects/p/zones/us-central1-f/acceleratorTypes",
            &cap,
            &gke,
        )
        .expect("list");
        assert!(!names(&f).contains(&"nvidia-l4".to_string()));
        let t4 = get(
            "compute/v1/projects/p/zones/us-central1-a/acceleratorTypes/nvidia-tesla-t4",
            &cap,
            &gke,
        )
        .expect("get");
        assert_eq!(t4["maximumCardsPerInstance"], 4);
        assert_eq!(
            t4["zone"],
            "https://www.googleapis.com/compute/v1/projects/p/zones/us-central1-a"
        );
        let missing = get(
            "compute/v1/projects/p/zones/us-east1-b/acceleratorTypes/nvidia-tesla-t4",
            &cap,
            &gke,
        )
        .expect_err("no T4 in us-east1-b");
        assert_eq!(
            missing.message,
            "The resource 'projects/p/zones/us-east1-b/acceleratorTypes/nvidia-tesla-t4' was not found"
        );
        let bad_zone =
            get("compute/v1/projects/p/zones/us-central1-z", &cap, &gke).expect_err("no such zone");
        assert_eq!(bad_zone.code, Code::NotFound);
    }

    #[test]
    fn filters_and_aggregated_lists_find_where_a_gpu_is_sold() {
        let (cap, gke) = (GcpCapacity::default(), container::State::default());
        let list = get(
            "compute/v1/projects/p/zones/us-central1-a/acceleratorTypes?filter=name+eq+nvidia-tesla-t4.*",
            &cap,
            &gke,
        )
        .expect("filtered");
        assert_eq!(names(&list), ["nvidia-tesla-t4", "nvidia-tesla-t4-vws"]);
        let agg = get(
            "compute/v1/projects/p/aggregated/acceleratorTypes?filter=name+eq+nvidia-tesla-p100",
            &cap,
            &gke,
        )
        .expect("aggregated");
        let with: Vec<&String> = agg["items"]
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(_, v)| v.get("acceleratorTypes").is_some())
            .map(|(k, _)| k)
            .collect();
        assert_eq!(
            with,
            [
                "zones/us-central1-c",
                "zones/us-central1-f",
                "zones/us-east1-b",
                "zones/us-east1-c",
                "zones/europe-west4-a"
            ]
        );
        assert_eq!(
            agg["items"]["zones/us-central1-a"]["warning"]["code"],
            "NO_RESULTS_ON_PAGE"
        );
        let bad = get(
            "compute/v1/projects/p/aggregated/acceleratorTypes?filter=name+like+x",
            &cap,
            &gke,
        )
        .expect_err("bad filter");
        assert_eq!(bad.code, Code::InvalidArgument);
        let page = get("compute/v1/projects/p/zones?maxResults=4", &cap, &gke).expect("page");
        assert_eq!(names(&page).len(), 4);
        assert_eq!(page["nextPageToken"], "4");
        let rest = get(
            "compute/v1/projects/p/zones?maxResults=400&pageToken=4",
            &cap,
            &gke,
        )
        .expect("next page");
        assert_eq!(names(&rest).len(), ZONES.len() - 4);
        assert!(rest.get("nextPageToken").is_none());
    }

    #[test]
    fn regions_report_configured_limits_and_default_ones() {
        let cap = crate::capacity::CapacitySpec::from_json(
            json!({"gcp": {"quotas": [
                {"project": "p", "region": "us-central1", "metric": "NVIDIA_T4_GPUS", "limit": 0}
            ]}}),
            &crate::quota_names(),
        )
        .expect("valid")
        .gcp;
        let gke = container::State::default();
        let region = get("compute/v1/projects/p/regions/us-central1", &cap, &gke).expect("region");
        let quota = |metric: &str| {
            region["quotas"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|q| q["metric"] == metric)
                .cloned()
                .unwrap_or(Value::Null)
        };
        assert_eq!(
            quota("NVIDIA_T4_GPUS"),
            json!({"metric": "NVIDIA_T4_GPUS", "limit": 0.0, "usage": 0.0})
        );
        assert_eq!(quota("CPUS")["limit"], 96.0);
        assert_eq!(quota("NVIDIA_L4_GPUS")["limit"], 16.0);
        assert_eq!(region["zones"].as_array().map(Vec::len), Some(4));
        let other = get("compute/v1/projects/q/regions/us-central1", &cap, &gke).expect("region");
        assert!(other["quotas"][16]["limit"]
            .as_f64()
            .is_some_and(|l| l > 0.0));
        let all = get("compute/v1/projects/p/regions", &cap, &gke).expect("regions");
        assert_eq!(names(&all), ["us-central1", "us-east1", "europe-west4"]);
        assert!(get("compute/v1/projects/p/regions/mars1", &cap, &gke).is_err());
    }

    #[test]
    fn pools_consume_cpus_gpus_tpu_chips_and_disks_by_family() {
        let t4 = json!({"machineType": "n1-standard-8", "diskSizeGb": 100, "diskType": "pd-balanced",
            "accelerators": [{"acceleratorType": "nvidia-tesla-t4", "acceleratorCount": "2"}]});
        let d = demand(&t4, 3);
        assert_eq!(d.get("CPUS"), Some(&24.0));
        assert_eq!(d.get("NVIDIA_T4_GPUS"), Some(&6.0));
        assert_eq!(d.get("INSTANCES"), Some(&3.0));
        assert_eq!(d.get("SSD_TOTAL_GB"), Some(&300.0));
        let spot =
            json!({"machineType": "g2-standard-24", "spot": true, "diskType": "pd-standard"});
        let d = demand(&spot, 1);
        assert_eq!(d.get("PREEMPTIBLE_CPUS"), Some(&24.0));
        assert_eq!(
            d.get("PREEMPTIBLE_NVIDIA_L4_GPUS"),
            Some(&2.0),
            "a g2-standard-24 has two L4s"
        );
        assert_eq!(d.get("DISKS_TOTAL_GB"), Some(&100.0));
        assert_eq!(
            demand(&json!({"machineType": "n2-standard-4"}), 1).get("N2_CPUS"),
            Some(&4.0)
        );
        assert_eq!(
            demand(&json!({"machineType": "a2-highgpu-2g"}), 1).get("A2_CPUS"),
            Some(&24.0)
        );
        let tpu = demand(&json!({"machineType": "ct5lp-hightpu-4t"}), 2);
        assert_eq!(tpu.get("TPU_LITE_PODSLICE_V5"), Some(&8.0));
        assert_eq!(tpu.get("CPUS"), None, "TPU hosts take no CPU quota");
        assert!(demand(&t4, 0).is_empty());
    }

    #[test]
    fn quota_errors_read_like_gkes() {
        let cap = crate::capacity::CapacitySpec::from_json(
            json!({"gcp": {"quotas": [
                {"metric": "NVIDIA_T4_GPUS", "limit": 0}, {"metric": "CPUS", "limit": 10}
            ]}}),
            &crate::quota_names(),
        )
        .expect("valid")
        .gcp;
        let one = demand(
            &json!({"machineType": "n1-standard-4", "accelerators": [{"acceleratorType": "nvidia-tesla-t4", "acceleratorCount": 4}]}),
            1,
        );
        let err = check_quota(&cap, &[], "p", "us-central1", &one).expect_err("short");
        assert_eq!((err.code, err.http), (Code::PermissionDenied, 403));
        assert_eq!(
            err.message,
            "Insufficient regional quota to satisfy request: resource \"NVIDIA_T4_GPUS\": request requires '4.0' and is short '4.0'. project has a quota of '0.0' with '0.0' available. View and manage quotas at https://console.cloud.google.com/iam-admin/quotas?usage=USED&project=p."
        );
        let two = demand(
            &json!({"machineType": "n1-standard-8", "accelerators": [{"acceleratorType": "nvidia-tesla-t4", "acceleratorCount": 1}]}),
            2,
        );
        let err = check_quota(&cap, &[], "p", "us-central1", &two).expect_err("short twice");
        assert!(err.message.starts_with("(1) insufficient regional quota to satisfy request: resource \"CPUS\": request requires '16.0' and is short '6.0'. project has a quota of '10.0' with '10.0' available."), "{}", err.message);
        assert!(
            err.message.contains(
                "\n(2) insufficient regional quota to satisfy request: resource \"NVIDIA_T4_GPUS\""
            ),
            "{}",
            err.message
        );
        assert!(check_quota(
            &cap,
            &[],
            "p",
            "us-central1",
            &demand(&json!({"machineType": "e2-medium"}), 2)
        )
        .is_ok());
    }

    #[test]
    fn a_stockout_fails_a_pool_only_when_every_zone_is_out() {
        let cap = crate::capacity::CapacitySpec::from_json(
            json!({"gcp": {"stockouts": [
                {"zone": "us-central1-a", "machineType": "n1-standard-8"}
            ]}}),
            &crate::quota_names(),
        )
        .expect("valid")
        .gcp;
        let config = json!({"machineType": "n1-standard-8"});
        let a = vec!["us-central1-a".to_string()];
        let message = stockout(&cap, "p", "c", "gpu", &a, &config, 1, 3000).expect("stocked out");
        assert!(message.starts_with("Google Compute Engine: Not all instances running in IGM after 3s. Expected 1, running 0, transitioning 1. Current errors: [GCE_STOCKOUT]: Instance 'gke-c-gpu-"), "{message}");
        assert!(message.ends_with("creation failed: The zone 'projects/p/zones/us-central1-a' does not have enough resources available to fulfill the request.  Try a different zone, or try again later."), "{message}");
        let spread = vec!["us-central1-a".to_string(), "us-central1-b".to_string()];
        assert_eq!(
            stockout(&cap, "p", "c", "gpu", &spread, &config, 1, 3000),
            None
        );
        assert_eq!(
            stockout(&cap, "p", "c", "gpu", &a, &config, 0, 3000),
            None,
            "no node to make"
        );
        assert_eq!(
            stockout(
                &cap,
                "p",
                "c",
                "gpu",
                &a,
                &json!({"machineType": "n1-standard-4"}),
                1,
                3000
            ),
            None
        );
        assert_eq!(go_duration(1500), "1.5s");
    }
}
