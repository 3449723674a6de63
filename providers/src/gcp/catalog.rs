//! The offline catalog of Google Cloud facts the GCP provider checks stacks against
//! without touching the network: GKE GPU accelerator types and the machine types they
//! attach to, TPU machine types and slice topologies, Filestore tiers and capacity
//! ranges, resource-name rules (GKE, Filestore, Cloud Storage, labels), the regions and
//! zones that exist (and whether a location lies in a given region), bucket locations,
//! node taints, OAuth scope aliases and machine-type syntax.
//!
//! Everything here is a snapshot of Google's documentation (2025–2026). Checks fail
//! with a message listing what the catalog knows, so a stale table shows up as a clear
//! "unknown …" error pointing at the table to extend rather than a confusing API error
//! halfway through an apply.

use std::collections::HashSet;

// ---------------------------------------------------------------------------------
// Shared helpers
// ---------------------------------------------------------------------------------

/// Levenshtein distance over chars; the inputs are short names, so the O(n·m) table
/// is cheaper than anything clever.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for i in 1..=a.len() {
        cur[0] = i;
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            cur[j] = (prev[j] + 1).min(cur[j - 1] + 1).min(prev[j - 1] + cost);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// The candidate a mistyped `input` most likely meant. Shorthands that name the last
/// part of a candidate ("t4" for "nvidia-tesla-t4") win over spelling distance, since
/// people often write the short product name.
fn did_you_mean<'c>(input: &str, candidates: &[&'c str]) -> Option<&'c str> {
    let needle = input.trim().to_ascii_lowercase();
    if needle.is_empty() {
        return None;
    }
    let exact = candidates.iter().find(|c| c.to_ascii_lowercase() == needle);
    if let Some(c) = exact {
        return Some(c);
    }
    let dashed = format!("-{needle}");
    let infix = format!("-{needle}-");
    let shorthand = candidates.iter().find(|c| {
        let lower = c.to_ascii_lowercase();
        lower.ends_with(&dashed) || lower.contains(&infix)
    });
    if let Some(c) = shorthand {
        return Some(c);
    }
    let limit = (needle.chars().count() / 3).clamp(1, 3);
    candidates
        .iter()
        .map(|c| (edit_distance(&needle, &c.to_ascii_lowercase()), *c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// " (did you mean `x`?)" or nothing.
fn hint(input: &str, candidates: &[&str]) -> String {
    match did_you_mean(input, candidates) {
        Some(c) => format!(" (did you mean `{c}`?)"),
        None => String::new(),
    }
}

/// "1, 2 or 4".
fn or_list<T: std::fmt::Display>(items: &[T]) -> String {
    let words: Vec<String> = items.iter().map(|i| i.to_string()).collect();
    match words.split_last() {
        None => String::new(),
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
    }
}

fn plural(n: u32, one: &str, many: &str) -> String {
    if n == 1 {
        format!("{n} {one}")
    } else {
        format!("{n} {many}")
    }
}

// ---------------------------------------------------------------------------------
// GPUs
// ---------------------------------------------------------------------------------

/// A GPU accelerator type GKE knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gpu {
    /// The accelerator type as the API and `gcloud --accelerator type=` spell it.
    pub name: &'static str,
    /// The product name for messages.
    pub display: &'static str,
    /// Machine families the GPU attaches to (`n1`) or comes built into (`g2`, `a2`, …).
    pub machine_families: &'static [&'static str],
    /// Allowed GPU counts per node.
    pub counts: &'static [u32],
}

// Source: https://cloud.google.com/compute/docs/gpus (GPU machine types) and
// https://cloud.google.com/kubernetes-engine/docs/how-to/gpus (GPUs on GKE Standard).
#[rustfmt::skip]
static GPUS: &[Gpu] = &[
    Gpu { name: "nvidia-l4", display: "NVIDIA L4", machine_families: &["g2"], counts: &[1, 2, 4, 8] },
    Gpu { name: "nvidia-tesla-t4", display: "NVIDIA T4", machine_families: &["n1"], counts: &[1, 2, 4] },
    Gpu { name: "nvidia-tesla-v100", display: "NVIDIA V100", machine_families: &["n1"], counts: &[1, 2, 4, 8] },
    Gpu { name: "nvidia-tesla-p4", display: "NVIDIA P4", machine_families: &["n1"], counts: &[1, 2, 4] },
    Gpu { name: "nvidia-tesla-a100", display: "NVIDIA A100 40GB", machine_families: &["a2"], counts: &[1, 2, 4, 8, 16] },
    Gpu { name: "nvidia-a100-80gb", display: "NVIDIA A100 80GB", machine_families: &["a2"], counts: &[1, 2, 4, 8] },
    Gpu { name: "nvidia-h100-80gb", display: "NVIDIA H100 80GB", machine_families: &["a3"], counts: &[1, 2, 4, 8] },
    Gpu { name: "nvidia-h100-mega-80gb", display: "NVIDIA H100 80GB Mega", machine_families: &["a3"], counts: &[8] },
    Gpu { name: "nvidia-h200-141gb", display: "NVIDIA H200 141GB", machine_families: &["a3"], counts: &[8] },
    Gpu { name: "nvidia-b200", display: "NVIDIA B200", machine_families: &["a4"], counts: &[8] },
    Gpu { name: "nvidia-gb200", display: "NVIDIA GB200", machine_families: &["a4x"], counts: &[4] },
    Gpu { name: "nvidia-rtx-pro-6000", display: "NVIDIA RTX PRO 6000", machine_families: &["g4"], counts: &[1, 2, 4, 8] },
];

/// Every GPU accelerator type GKE offers for new nodes.
pub fn gpus() -> &'static [Gpu] {
    GPUS
}

fn find_gpu(name: &str) -> Option<&'static Gpu> {
    GPUS.iter().find(|g| g.name == name)
}

fn gpu_names() -> Vec<&'static str> {
    GPUS.iter().map(|g| g.name).collect()
}

/// GPUs that still appear in old stacks and tutorials but can no longer be attached:
/// the K80 reached end of support on 2024-05-01
/// (https://cloud.google.com/compute/docs/eol/k80-eol); the P100 is no longer offered
/// for new GKE nodes. Each carries the replacement advice shown to the user.
static RETIRED_GPUS: &[(&str, &str)] = &[
    (
        "nvidia-tesla-k80",
        "use nvidia-tesla-t4 (closest on cost) or nvidia-l4 (current generation) instead",
    ),
    (
        "nvidia-tesla-p100",
        "use nvidia-tesla-t4 (same n1 machine types, lower cost) or nvidia-l4 (current generation, on g2 machine types) instead",
    ),
];

/// Machine types with GPUs built in: (machine type, accelerator type, GPU count).
/// Source: https://cloud.google.com/compute/docs/accelerator-optimized-machines
static BUILT_IN_GPUS: &[(&str, &str, u32)] = &[
    // G2: the L4 count is fixed by the machine size, not proportional to it.
    ("g2-standard-4", "nvidia-l4", 1),
    ("g2-standard-8", "nvidia-l4", 1),
    ("g2-standard-12", "nvidia-l4", 1),
    ("g2-standard-16", "nvidia-l4", 1),
    ("g2-standard-24", "nvidia-l4", 2),
    ("g2-standard-32", "nvidia-l4", 1),
    ("g2-standard-48", "nvidia-l4", 4),
    ("g2-standard-96", "nvidia-l4", 8),
    // A2 Standard (A100 40GB) and A2 Ultra (A100 80GB).
    ("a2-highgpu-1g", "nvidia-tesla-a100", 1),
    ("a2-highgpu-2g", "nvidia-tesla-a100", 2),
    ("a2-highgpu-4g", "nvidia-tesla-a100", 4),
    ("a2-highgpu-8g", "nvidia-tesla-a100", 8),
    ("a2-megagpu-16g", "nvidia-tesla-a100", 16),
    ("a2-ultragpu-1g", "nvidia-a100-80gb", 1),
    ("a2-ultragpu-2g", "nvidia-a100-80gb", 2),
    ("a2-ultragpu-4g", "nvidia-a100-80gb", 4),
    ("a2-ultragpu-8g", "nvidia-a100-80gb", 8),
    // A3 High / Edge (H100), A3 Mega (H100 Mega), A3 Ultra (H200).
    ("a3-highgpu-1g", "nvidia-h100-80gb", 1),
    ("a3-highgpu-2g", "nvidia-h100-80gb", 2),
    ("a3-highgpu-4g", "nvidia-h100-80gb", 4),
    ("a3-highgpu-8g", "nvidia-h100-80gb", 8),
    ("a3-edgegpu-8g", "nvidia-h100-80gb", 8),
    ("a3-megagpu-8g", "nvidia-h100-mega-80gb", 8),
    ("a3-ultragpu-8g", "nvidia-h200-141gb", 8),
    // A4 (B200) and A4X (GB200 superchips, four GPUs per VM).
    ("a4-highgpu-8g", "nvidia-b200", 8),
    ("a4x-highgpu-4g", "nvidia-gb200", 4),
    // G4 (RTX PRO 6000).
    ("g4-standard-48", "nvidia-rtx-pro-6000", 1),
    ("g4-standard-96", "nvidia-rtx-pro-6000", 2),
    ("g4-standard-192", "nvidia-rtx-pro-6000", 4),
    ("g4-standard-384", "nvidia-rtx-pro-6000", 8),
];

/// The accelerator a machine type implies when it comes with GPUs built in (the g2,
/// g4, a2, a3, a4 and a4x families): `("nvidia-l4", 1)` for `g2-standard-8`.
pub fn built_in_gpus(machine_type: &str) -> Option<(&'static str, u32)> {
    BUILT_IN_GPUS
        .iter()
        .find(|(mt, _, _)| *mt == machine_type)
        .map(|(_, gpu, count)| (*gpu, *count))
}

/// The family part of a machine type: `n1` for `n1-highmem-8`. The family-less legacy
/// custom form (`custom-4-15360`) is an N1 machine.
fn machine_family(machine_type: &str) -> &str {
    if machine_type.starts_with("custom-") {
        return "n1";
    }
    machine_type.split('-').next().unwrap_or(machine_type)
}

/// vCPUs of an N1 machine type, when its name says: `n1-standard-8` → 8,
/// `n1-custom-4-15360` / `custom-4-15360` → 4.
fn n1_vcpus(machine_type: &str) -> Option<u32> {
    let parts: Vec<&str> = machine_type.split('-').collect();
    match parts.as_slice() {
        ["custom", cpus, ..] | ["n1", "custom", cpus, ..] => cpus.parse().ok(),
        ["n1", _, cpus] => cpus.parse().ok(),
        _ => None,
    }
}

/// The most vCPUs an N1 machine may have for a given GPU type and count.
/// Source: https://cloud.google.com/compute/docs/gpus (N1 general-purpose machine types
/// table). GPUs outside this table have no N1 vCPU limit to check.
static N1_VCPU_LIMITS: &[(&str, &[(u32, u32)])] = &[
    ("nvidia-tesla-t4", &[(1, 48), (2, 48), (4, 96)]),
    ("nvidia-tesla-v100", &[(1, 12), (2, 24), (4, 48), (8, 96)]),
    ("nvidia-tesla-p4", &[(1, 24), (2, 48), (4, 96)]),
];

/// Predefined N1 sizes, for suggesting a smaller machine of the same series.
const N1_SIZES: &[u32] = &[1, 2, 4, 8, 16, 32, 64, 96];

fn unknown_gpu(accelerator_type: &str) -> String {
    let names = gpu_names();
    format!(
        "unknown GPU type `{accelerator_type}`{}; GKE offers: {}",
        hint(accelerator_type, &names),
        names.join(", ")
    )
}

/// Built-in machine types for one GPU, with their counts: "g2-standard-4 (1), …".
fn built_in_listing(gpu: &str) -> Vec<String> {
    BUILT_IN_GPUS
        .iter()
        .filter(|(_, g, _)| *g == gpu)
        .map(|(mt, _, n)| format!("{mt} ({n})"))
        .collect()
}

/// Checks an accelerator type and count against a machine type. Ok(()) or Err(message).
pub fn check_gpu(machine_type: &str, accelerator_type: &str, count: u32) -> Result<(), String> {
    if let Some((_, advice)) = RETIRED_GPUS.iter().find(|(n, _)| *n == accelerator_type) {
        return Err(format!(
            "`{accelerator_type}` is retired on GKE and can no longer be attached to new nodes; {advice}"
        ));
    }
    let gpu = find_gpu(accelerator_type).ok_or_else(|| unknown_gpu(accelerator_type))?;
    if count == 0 {
        return Err(format!(
            "a count of 0 attaches no {}; set a count of at least 1, or remove the accelerator to run without GPUs",
            gpu.name
        ));
    }

    if let Some((built_gpu, built_count)) = built_in_gpus(machine_type) {
        if built_gpu != gpu.name {
            return Err(format!(
                "`{machine_type}` comes with {built_count} × {built_gpu} built in and takes no other GPU; \
                 set the accelerator type to {built_gpu}, or for {} pick one of: {}",
                gpu.name,
                gpu_home(gpu)
            ));
        }
        if built_count != count {
            let fitting: Vec<&str> = BUILT_IN_GPUS
                .iter()
                .filter(|(_, g, n)| *g == gpu.name && *n == count)
                .map(|(mt, _, _)| *mt)
                .collect();
            let what_to_do = if fitting.is_empty() {
                format!(
                    "{} machine types come with {}",
                    gpu.name,
                    built_in_listing(gpu.name).join(", ")
                )
            } else {
                format!(
                    "for {} pick {}",
                    plural(count, "GPU", "GPUs"),
                    or_list(&fitting)
                )
            };
            return Err(format!(
                "`{machine_type}` comes with exactly {} built in, so the count must be {built_count}; \
                 the GPU count of this family is fixed by the machine type — {what_to_do}",
                plural(built_count, &format!("{} GPU", gpu.name), &format!("{} GPUs", gpu.name)),
            ));
        }
        return Ok(());
    }

    let family = machine_family(machine_type);
    if !gpu.machine_families.contains(&family) {
        let takes_no_gpus = !GPUS.iter().any(|g| g.machine_families.contains(&family));
        let tail = if takes_no_gpus {
            format!("; {family} machines take no GPUs")
        } else {
            String::new()
        };
        return Err(format!(
            "{} ({}) attaches only to {} machine types, and `{machine_type}` is in the {family} family{tail}; \
             use one of: {}",
            gpu.name,
            gpu.display,
            gpu.machine_families.join(" or "),
            gpu_home(gpu)
        ));
    }

    // The family matches. Families with built-in GPUs list every machine type, so a
    // miss here is a machine type the catalog does not know.
    if BUILT_IN_GPUS.iter().any(|(_, g, _)| *g == gpu.name) {
        return Err(format!(
            "`{machine_type}` is not a {family} machine type with {} GPUs; {family} machine types for {}: {}",
            gpu.name,
            gpu.name,
            built_in_listing(gpu.name).join(", ")
        ));
    }

    // Attachable GPUs (N1): the count comes from a fixed set.
    if !gpu.counts.contains(&count) {
        return Err(format!(
            "{} attaches to {family} machines in counts of {}, not {count}; set the count to one of those",
            gpu.name,
            or_list(gpu.counts)
        ));
    }
    check_n1_vcpus(machine_type, gpu, count)
}

/// Where a GPU can go, for messages: its built-in machine types, or "n1-standard-8, …".
fn gpu_home(gpu: &Gpu) -> String {
    let built = built_in_listing(gpu.name);
    if built.is_empty() {
        gpu.machine_families
            .iter()
            .map(|f| format!("{f}-standard-*, {f}-highmem-*, {f}-highcpu-* (or {f}-custom-*)"))
            .collect::<Vec<_>>()
            .join("; ")
    } else {
        built.join(", ")
    }
}

fn check_n1_vcpus(machine_type: &str, gpu: &Gpu, count: u32) -> Result<(), String> {
    let Some((_, limits)) = N1_VCPU_LIMITS.iter().find(|(g, _)| *g == gpu.name) else {
        return Ok(());
    };
    let Some(vcpus) = n1_vcpus(machine_type) else {
        return Ok(());
    };
    let Some((_, max)) = limits.iter().find(|(n, _)| *n == count) else {
        return Ok(());
    };
    if vcpus <= *max {
        return Ok(());
    }
    let more_gpus = limits
        .iter()
        .find(|(n, m)| *n > count && *m >= vcpus)
        .map(|(n, _)| format!("attach {n} GPUs, or "));
    let smaller = N1_SIZES
        .iter()
        .rev()
        .find(|s| **s <= *max)
        .and_then(|size| {
            let parts: Vec<&str> = machine_type.split('-').collect();
            match parts.as_slice() {
                ["n1", series, _] if *series != "custom" => {
                    Some(format!(" such as n1-{series}-{size}"))
                }
                _ => None,
            }
        })
        .unwrap_or_default();
    Err(format!(
        "`{machine_type}` has {vcpus} vCPUs, but an n1 machine with {} × {} allows at most {max}; \
         {}pick a machine type with at most {max} vCPUs{smaller}",
        count,
        gpu.name,
        more_gpus.unwrap_or_default()
    ))
}

// ---------------------------------------------------------------------------------
// TPUs
// ---------------------------------------------------------------------------------

/// A TPU machine type on GKE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tpu {
    /// The node pool machine type, e.g. `ct5lp-hightpu-4t`.
    pub machine_type: &'static str,
    /// The TPU generation: `v3`, `v4`, `v5e`, `v5p`, `v6e`, `tpu7x`.
    pub version: &'static str,
    /// The value GKE puts on the `cloud.google.com/gke-tpu-accelerator` node label.
    pub accelerator_label: &'static str,
    /// TPU chips on each VM (node).
    pub chips_per_vm: u32,
    /// The slice shapes this machine type runs, smallest first. A machine type with one
    /// topology is single-host only.
    pub topologies: &'static [&'static str],
    /// For 3D (v4, v5p, TPU7x) slices: the largest chip count a custom `AxBxC` shape
    /// beyond the listed ones may have; 0 when only the listed shapes are allowed.
    pub max_custom_chips: u32,
}

impl Tpu {
    /// 2 for `AxB` generations (v3, v5e, v6e), 3 for `AxBxC` ones (v4, v5p, TPU7x).
    pub fn dimensions(&self) -> usize {
        self.topologies.first().map_or(2, |t| t.split('x').count())
    }

    /// Whether the machine type only runs a single-host slice.
    pub fn single_host_only(&self) -> bool {
        self.topologies.len() == 1 && self.max_custom_chips == 0
    }
}

const TOPOLOGY_2D_MULTI: &[&str] = &["2x2", "2x4", "4x4", "4x8", "8x8", "8x16", "16x16"];
const TOPOLOGY_3D_LISTED: &[&str] = &["2x2x1", "2x2x2", "2x2x4", "2x4x4", "4x4x4"];

// Source: https://cloud.google.com/kubernetes-engine/docs/concepts/plan-tpus (machine
// types, topologies, node labels) and the per-version pages under
// https://cloud.google.com/tpu/docs (v5e, v5p, v6e, tpu7x).
#[rustfmt::skip]
static TPUS: &[Tpu] = &[
    // v3: the single-host device and the multi-host slice are separate machine types.
    Tpu { machine_type: "ct3-hightpu-4t", version: "v3", accelerator_label: "tpu-v3-device", chips_per_vm: 4, topologies: &["2x2"], max_custom_chips: 0 },
    Tpu { machine_type: "ct3p-hightpu-4t", version: "v3", accelerator_label: "tpu-v3-slice", chips_per_vm: 4, topologies: &["4x4", "4x8", "8x8", "8x16", "16x16"], max_custom_chips: 0 },
    // v4: 3D torus; beyond 64 chips any AxBxC with dimensions in multiples of 4.
    Tpu { machine_type: "ct4p-hightpu-4t", version: "v4", accelerator_label: "tpu-v4-podslice", chips_per_vm: 4, topologies: TOPOLOGY_3D_LISTED, max_custom_chips: 4096 },
    // v5e training/serving slices (ct5lp) and the serving-only single-host devices (ct5l).
    Tpu { machine_type: "ct5lp-hightpu-1t", version: "v5e", accelerator_label: "tpu-v5-lite-podslice", chips_per_vm: 1, topologies: &["1x1"], max_custom_chips: 0 },
    Tpu { machine_type: "ct5lp-hightpu-4t", version: "v5e", accelerator_label: "tpu-v5-lite-podslice", chips_per_vm: 4, topologies: TOPOLOGY_2D_MULTI, max_custom_chips: 0 },
    Tpu { machine_type: "ct5lp-hightpu-8t", version: "v5e", accelerator_label: "tpu-v5-lite-podslice", chips_per_vm: 8, topologies: &["2x4"], max_custom_chips: 0 },
    Tpu { machine_type: "ct5l-hightpu-1t", version: "v5e", accelerator_label: "tpu-v5-lite-device", chips_per_vm: 1, topologies: &["1x1"], max_custom_chips: 0 },
    Tpu { machine_type: "ct5l-hightpu-4t", version: "v5e", accelerator_label: "tpu-v5-lite-device", chips_per_vm: 4, topologies: &["2x2"], max_custom_chips: 0 },
    Tpu { machine_type: "ct5l-hightpu-8t", version: "v5e", accelerator_label: "tpu-v5-lite-device", chips_per_vm: 8, topologies: &["2x4"], max_custom_chips: 0 },
    // v5p: largest slice 16x16x24 (6144 chips), https://cloud.google.com/tpu/docs/v5p
    Tpu { machine_type: "ct5p-hightpu-4t", version: "v5p", accelerator_label: "tpu-v5p-slice", chips_per_vm: 4, topologies: TOPOLOGY_3D_LISTED, max_custom_chips: 6144 },
    // v6e (Trillium): same 2D shapes as v5e; 2x4 on ct6e-standard-4t spans two VMs.
    Tpu { machine_type: "ct6e-standard-1t", version: "v6e", accelerator_label: "tpu-v6e-slice", chips_per_vm: 1, topologies: &["1x1"], max_custom_chips: 0 },
    Tpu { machine_type: "ct6e-standard-4t", version: "v6e", accelerator_label: "tpu-v6e-slice", chips_per_vm: 4, topologies: TOPOLOGY_2D_MULTI, max_custom_chips: 0 },
    Tpu { machine_type: "ct6e-standard-8t", version: "v6e", accelerator_label: "tpu-v6e-slice", chips_per_vm: 8, topologies: &["2x4"], max_custom_chips: 0 },
    // TPU7x (Ironwood): 3D like v5p, 9216-chip pods, https://cloud.google.com/tpu/docs/tpu7x
    Tpu { machine_type: "tpu7x-standard-1t", version: "tpu7x", accelerator_label: "tpu7x", chips_per_vm: 1, topologies: &["1x1x1"], max_custom_chips: 0 },
    Tpu { machine_type: "tpu7x-standard-4t", version: "tpu7x", accelerator_label: "tpu7x", chips_per_vm: 4, topologies: TOPOLOGY_3D_LISTED, max_custom_chips: 9216 },
];

/// Every TPU machine type GKE offers.
pub fn tpus() -> &'static [Tpu] {
    TPUS
}

/// The TPU machine type with this name.
pub fn tpu(machine_type: &str) -> Option<&'static Tpu> {
    TPUS.iter().find(|t| t.machine_type == machine_type)
}

/// Whether a machine type belongs to a TPU family (`ct3…`, `ct4p-`, `ct5lp-`, `ct5p-`,
/// `ct6e-`, `tpu7x-`, …) even when the catalog does not know it, so callers can say
/// "unknown TPU machine type" rather than "not a TPU".
pub fn is_tpu_machine_type(machine_type: &str) -> bool {
    let family = machine_type.split('-').next().unwrap_or_default();
    if !machine_type.contains('-') {
        return false;
    }
    let starts_with_digit_after = |prefix: &str| {
        family
            .strip_prefix(prefix)
            .and_then(|rest| rest.chars().next())
            .is_some_and(|c| c.is_ascii_digit())
    };
    starts_with_digit_after("ct") || starts_with_digit_after("tpu")
}

fn tpu_names() -> Vec<&'static str> {
    TPUS.iter().map(|t| t.machine_type).collect()
}

/// Parses "AxB" or "AxBxC" into its dimensions.
fn parse_topology(topology: &str) -> Option<Vec<u32>> {
    let dims: Option<Vec<u32>> = topology
        .split('x')
        .map(|d| {
            if d.is_empty() || !d.bytes().all(|b| b.is_ascii_digit()) {
                None
            } else {
                d.parse::<u32>().ok().filter(|n| *n > 0)
            }
        })
        .collect();
    dims.filter(|d| d.len() == 2 || d.len() == 3)
}

fn topology_listing(t: &Tpu) -> String {
    let mut items: Vec<String> = t
        .topologies
        .iter()
        .map(|topo| {
            let chips: u32 = parse_topology(topo).map_or(0, |d| d.iter().product());
            let nodes = chips / t.chips_per_vm.max(1);
            format!("{topo} ({})", plural(nodes, "node", "nodes"))
        })
        .collect();
    if t.max_custom_chips > 0 {
        items.push(format!(
            "or any larger AxBxC with A ≤ B ≤ C, each a multiple of 4, up to {} chips",
            t.max_custom_chips
        ));
    }
    items.join(", ")
}

/// Checks a slice topology against a TPU machine type and returns the number of VMs
/// (nodes) the slice needs. 2D generations take `AxB`, 3D ones `AxBxC`; the product of
/// the dimensions is the chip count, which must fill whole VMs; single-host machine
/// types take only their one topology. Errors name the allowed topologies.
pub fn check_tpu_topology(machine_type: &str, topology: &str) -> Result<u32, String> {
    let Some(t) = tpu(machine_type) else {
        let names = tpu_names();
        return Err(if is_tpu_machine_type(machine_type) {
            format!(
                "unknown TPU machine type `{machine_type}`{}; GKE offers: {}",
                hint(machine_type, &names),
                names.join(", ")
            )
        } else {
            format!(
                "`{machine_type}` is not a TPU machine type, so it takes no TPU topology; \
                 TPU node pools use one of: {}",
                names.join(", ")
            )
        });
    };
    let allowed = topology_listing(t);
    if topology.contains('X') {
        return Err(format!(
            "write the topology with a lowercase x (`{}`); allowed for {machine_type}: {allowed}",
            topology.replace('X', "x")
        ));
    }
    let dims = parse_topology(topology).ok_or_else(|| {
        let example = t.topologies.first().copied().unwrap_or("2x2");
        format!(
            "`{topology}` is not a topology; write the chip grid as {} positive numbers joined by x, \
             like {example}; allowed for {machine_type}: {allowed}",
            if t.dimensions() == 3 { "three" } else { "two" }
        )
    })?;
    if dims.len() != t.dimensions() {
        return Err(format!(
            "`{topology}` is a {}D topology, but TPU {} ({machine_type}) slices are {}D; allowed: {allowed}",
            dims.len(),
            t.version,
            t.dimensions()
        ));
    }
    let chips: u64 = dims.iter().map(|d| u64::from(*d)).product();
    let chips_per_vm = u64::from(t.chips_per_vm);
    let nodes = |chips: u64| u32::try_from(chips / chips_per_vm).unwrap_or(u32::MAX);

    if t.topologies.contains(&topology) {
        return Ok(nodes(chips));
    }

    // Another machine type of the same generation may run this shape.
    // Another machine type of the same generation may run this shape; prefer those with
    // the same node label (ct5lp over the serving-only ct5l, say).
    let runs_it = |o: &&Tpu| {
        o.version == t.version
            && o.machine_type != t.machine_type
            && (o.topologies.contains(&topology) || custom_3d_ok(o, &dims, chips).is_ok())
    };
    let same_label: Vec<&str> = TPUS
        .iter()
        .filter(runs_it)
        .filter(|o| o.accelerator_label == t.accelerator_label)
        .map(|o| o.machine_type)
        .collect();
    let siblings: Vec<&str> = if same_label.is_empty() {
        TPUS.iter()
            .filter(runs_it)
            .map(|o| o.machine_type)
            .collect()
    } else {
        same_label
    };
    if t.single_host_only() {
        let instead = if siblings.is_empty() {
            String::new()
        } else {
            format!("; for {topology} use {}", or_list(&siblings))
        };
        return Err(format!(
            "{machine_type} is a single-host machine type that only runs topology {}{instead}",
            t.topologies.join(", ")
        ));
    }

    if t.max_custom_chips > 0 {
        return match custom_3d_ok(t, &dims, chips) {
            Ok(()) => Ok(nodes(chips)),
            Err(why) => Err(format!(
                "`{topology}` is not a TPU {} slice shape: {why}; allowed for {machine_type}: {allowed}",
                t.version
            )),
        };
    }

    let instead = if siblings.is_empty() {
        String::new()
    } else {
        format!(" ({topology} runs on {})", or_list(&siblings))
    };
    if !chips.is_multiple_of(chips_per_vm) {
        return Err(format!(
            "`{topology}` is {chips} chips, which does not fill whole {machine_type} VMs of {} chips each{instead}; \
             allowed: {allowed}",
            t.chips_per_vm
        ));
    }
    // A transposed shape ("4x2" for "2x4") is the commonest slip with 2D slices.
    let transposed = dims
        .iter()
        .rev()
        .map(|d| d.to_string())
        .collect::<Vec<_>>()
        .join("x");
    let transposed = if t.topologies.contains(&transposed.as_str()) {
        format!(" (write {transposed})")
    } else {
        String::new()
    };
    Err(format!(
        "`{topology}` is not a TPU {} slice shape for {machine_type}{transposed}{instead}; allowed: {allowed}",
        t.version
    ))
}

/// The rule for 3D slices larger than the listed shapes: each dimension a multiple of 4,
/// written smallest first, within the generation's largest slice.
fn custom_3d_ok(t: &Tpu, dims: &[u32], chips: u64) -> Result<(), String> {
    if t.max_custom_chips == 0 || dims.len() != 3 {
        return Err("only the listed shapes are allowed".to_string());
    }
    if chips <= 64 {
        return Err(format!(
            "slices of {chips} chips use one of the listed shapes"
        ));
    }
    if dims.iter().any(|d| !d.is_multiple_of(4)) {
        return Err("beyond 64 chips every dimension must be a multiple of 4".to_string());
    }
    if !(dims[0] <= dims[1] && dims[1] <= dims[2]) {
        let mut sorted = dims.to_vec();
        sorted.sort_unstable();
        return Err(format!(
            "dimensions go smallest first (write {}x{}x{})",
            sorted[0], sorted[1], sorted[2]
        ));
    }
    if chips > u64::from(t.max_custom_chips) {
        return Err(format!(
            "{chips} chips is more than the largest TPU {} slice of {} chips",
            t.version, t.max_custom_chips
        ));
    }
    Ok(())
}

/// For the legacy Cloud TPU resource names Pods used to request
/// (`cloud-tpus.google.com/v2`, `cloud-tpus.google.com/v3`,
/// `cloud-tpus.google.com/preemptible-v2`, …): the message explaining that TPU slice node
/// pools requesting `google.com/tpu` replace them. `None` for any other resource name.
pub fn legacy_tpu_resource(name: &str) -> Option<String> {
    let rest = name.strip_prefix("cloud-tpus.google.com/")?;
    let version = rest.trim_start_matches("preemptible-");
    Some(format!(
        "`{name}` is the resource of the retired Cloud TPU Node integration (TPU {version}), which GKE no longer \
         schedules; request `google.com/tpu` chips instead and run the Pod on a TPU slice node pool \
         (a TPU machine type such as ct5lp-hightpu-4t or ct6e-standard-4t with a topology), selected with the \
         cloud.google.com/gke-tpu-accelerator and cloud.google.com/gke-tpu-topology node labels"
    ))
}

// ---------------------------------------------------------------------------------
// Filestore
// ---------------------------------------------------------------------------------

/// A Filestore service tier as the `file.googleapis.com/v1` API spells it. Capacities
/// are in the API's `capacityGb` unit, which is GiB despite the name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FilestoreTier {
    pub name: &'static str,
    pub min_gb: u64,
    pub max_gb: u64,
    /// The instance location is a zone (BASIC_*, ZONAL, HIGH_SCALE_SSD) rather than a
    /// region (REGIONAL, ENTERPRISE).
    pub zonal: bool,
    /// Whether capacity can be reduced after creation (Basic tiers only grow).
    pub shrinkable: bool,
    /// For an old alias, the name the API prefers now (STANDARD → BASIC_HDD).
    pub legacy: Option<&'static str>,
}

/// 63.9 TiB, the Basic tiers' ceiling, in GiB.
const BASIC_MAX_GB: u64 = 65_434;

// Source: https://cloud.google.com/filestore/docs/service-tiers and the per-tier pages
// (service-tiers-zonal, service-tiers-regional).
#[rustfmt::skip]
static FILESTORE_TIERS: &[FilestoreTier] = &[
    FilestoreTier { name: "BASIC_HDD", min_gb: 1024, max_gb: BASIC_MAX_GB, zonal: true, shrinkable: false, legacy: None },
    FilestoreTier { name: "BASIC_SSD", min_gb: 2560, max_gb: BASIC_MAX_GB, zonal: true, shrinkable: false, legacy: None },
    // Zonal: 1–9.75 TiB in 256 GiB steps, then 10–100 TiB in 2.5 TiB steps.
    FilestoreTier { name: "ZONAL", min_gb: 1024, max_gb: 102_400, zonal: true, shrinkable: true, legacy: None },
    // Regional: the lower range starts at 100 GiB since custom performance arrived
    // (https://cloud.google.com/filestore/docs/service-tiers-regional).
    FilestoreTier { name: "REGIONAL", min_gb: 100, max_gb: 102_400, zonal: false, shrinkable: true, legacy: None },
    FilestoreTier { name: "ENTERPRISE", min_gb: 1024, max_gb: 10_240, zonal: false, shrinkable: true, legacy: None },
    // The former high scale tier, superseded by ZONAL's upper range but still accepted.
    FilestoreTier { name: "HIGH_SCALE_SSD", min_gb: 10_240, max_gb: 102_400, zonal: true, shrinkable: true, legacy: None },
    FilestoreTier { name: "STANDARD", min_gb: 1024, max_gb: BASIC_MAX_GB, zonal: true, shrinkable: false, legacy: Some("BASIC_HDD") },
    FilestoreTier { name: "PREMIUM", min_gb: 2560, max_gb: BASIC_MAX_GB, zonal: true, shrinkable: false, legacy: Some("BASIC_SSD") },
];

/// Every Filestore tier name the API accepts, current names first.
pub fn filestore_tiers() -> &'static [FilestoreTier] {
    FILESTORE_TIERS
}

/// The tier with this exact API name.
pub fn filestore_tier(name: &str) -> Option<&'static FilestoreTier> {
    FILESTORE_TIERS.iter().find(|t| t.name == name)
}

/// "2560 GB (2.5 TiB)" when the size is a round number of TiB, else "1000 GB".
fn gb_with_tib(gb: u64) -> String {
    let hundredths = gb * 100 / 1024;
    if gb >= 1024 && (gb * 100).is_multiple_of(1024) {
        let whole = hundredths / 100;
        let frac = hundredths % 100;
        let tib = if frac == 0 {
            whole.to_string()
        } else if frac.is_multiple_of(10) {
            format!("{whole}.{}", frac / 10)
        } else {
            format!("{whole}.{frac:02}")
        };
        format!("{gb} GB ({tib} TiB)")
    } else {
        format!("{gb} GB")
    }
}

/// Checks a share capacity (in the API's GB, which are GiB) against a tier's range.
pub fn check_filestore_capacity(tier: &str, capacity_gb: u64) -> Result<(), String> {
    let Some(t) = filestore_tier(tier) else {
        let names: Vec<&str> = FILESTORE_TIERS.iter().map(|t| t.name).collect();
        return Err(format!(
            "unknown Filestore tier `{tier}`{}; tiers: {}",
            hint(tier, &names),
            names.join(", ")
        ));
    };
    let range = format!("{} shares hold {}–{} GB", t.name, t.min_gb, t.max_gb);
    if capacity_gb < t.min_gb {
        let gke_note = if t.name == "BASIC_HDD" || t.name == "STANDARD" {
            " (smaller BASIC_HDD shares exist only when the GKE Filestore CSI driver provisions them)"
        } else {
            ""
        };
        return Err(format!(
            "{} is below {}'s minimum of {}; {range}{gke_note}",
            gb_with_tib(capacity_gb),
            t.name,
            gb_with_tib(t.min_gb)
        ));
    }
    if capacity_gb > t.max_gb {
        return Err(format!(
            "{} is above {}'s maximum of {}; {range}",
            gb_with_tib(capacity_gb),
            t.name,
            gb_with_tib(t.max_gb)
        ));
    }
    Ok(())
}

/// Longest Filestore file share name.
pub const FILESTORE_SHARE_NAME_MAX: usize = 16;

/// File share names: a letter first, then letters, digits and underscores, at most 16
/// characters (https://cloud.google.com/filestore/docs/creating-instances).
pub fn check_share_name(name: &str) -> Result<(), String> {
    let suggestion = {
        let s: String = name
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        let s = s.trim_start_matches(|c: char| !c.is_ascii_alphabetic());
        let s: String = s.chars().take(FILESTORE_SHARE_NAME_MAX).collect();
        if s.is_empty() || s == name {
            String::new()
        } else {
            format!(" (try `{s}`)")
        }
    };
    let Some(first) = name.chars().next() else {
        return Err(format!(
            "a file share needs a name: 1–{FILESTORE_SHARE_NAME_MAX} letters, digits and underscores, starting with a letter"
        ));
    };
    let len = name.chars().count();
    if len > FILESTORE_SHARE_NAME_MAX {
        return Err(format!(
            "`{name}` is {len} characters; file share names are at most {FILESTORE_SHARE_NAME_MAX}{suggestion}"
        ));
    }
    if !first.is_ascii_alphabetic() {
        return Err(format!(
            "`{name}` starts with `{first}`; file share names start with a letter{suggestion}"
        ));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '_'))
    {
        return Err(format!(
            "`{name}` contains `{bad}`; file share names use only letters, digits and underscores{suggestion}"
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------
// Resource names
// ---------------------------------------------------------------------------------

/// Longest GKE cluster name (https://cloud.google.com/kubernetes-engine/docs/how-to/creating-a-zonal-cluster).
pub const GKE_CLUSTER_NAME_MAX: usize = 40;
/// Longest GKE node pool name.
pub const GKE_NODE_POOL_NAME_MAX: usize = 40;
/// Longest Filestore instance id.
pub const FILESTORE_INSTANCE_ID_MAX: usize = 63;

/// The closest valid RFC 1035 label to `name`, for "try `…`" hints.
fn rfc1035_suggestion(name: &str, max: usize) -> Option<String> {
    let mut s: String = name
        .to_ascii_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_lowercase() || c.is_ascii_digit() {
                c
            } else {
                '-'
            }
        })
        .collect();
    while s.contains("--") {
        s = s.replace("--", "-");
    }
    let s = s.trim_start_matches(|c: char| !c.is_ascii_lowercase());
    let s: String = s.chars().take(max).collect();
    let s = s.trim_end_matches('-').to_string();
    (!s.is_empty() && s != name).then_some(s)
}

/// RFC 1035 label: a lowercase letter first, then lowercase letters, digits and hyphens,
/// not ending with a hyphen, 1..=max characters. GKE cluster and node pool names
/// ([`GKE_CLUSTER_NAME_MAX`], [`GKE_NODE_POOL_NAME_MAX`]) and Filestore instance ids
/// ([`FILESTORE_INSTANCE_ID_MAX`]) follow it.
pub fn check_rfc1035(name: &str, max: usize) -> Result<(), String> {
    let try_this = match rfc1035_suggestion(name, max) {
        Some(s) => format!(" (try `{s}`)"),
        None => String::new(),
    };
    let Some(first) = name.chars().next() else {
        return Err(format!(
            "an empty name is not allowed; use 1–{max} lowercase letters, digits and hyphens, starting with a letter"
        ));
    };
    let len = name.chars().count();
    if len > max {
        return Err(format!(
            "`{name}` is {len} characters; the limit is {max}{try_this}"
        ));
    }
    if name.chars().any(|c| c.is_ascii_uppercase()) {
        return Err(format!(
            "`{name}` has uppercase letters; names use lowercase letters, digits and hyphens{try_this}"
        ));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-'))
    {
        return Err(format!(
            "`{name}` contains `{bad}`; names use only lowercase letters, digits and hyphens{try_this}"
        ));
    }
    if !first.is_ascii_lowercase() {
        return Err(format!(
            "`{name}` starts with `{first}`; names start with a lowercase letter{try_this}"
        ));
    }
    if name.ends_with('-') {
        return Err(format!(
            "`{name}` ends with a hyphen; names end with a letter or digit{try_this}"
        ));
    }
    Ok(())
}

fn is_dotted_ipv4(name: &str) -> bool {
    let parts: Vec<&str> = name.split('.').collect();
    parts.len() == 4
        && parts.iter().all(|p| {
            !p.is_empty()
                && p.len() <= 3
                && p.bytes().all(|b| b.is_ascii_digit())
                && p.parse::<u16>().is_ok_and(|n| n <= 255)
        })
}

/// Whether a bucket name contains "google" or a look-alike ("g00gle", "goog1e").
fn mentions_google(name: &str) -> bool {
    let folded: String = name
        .chars()
        .map(|c| match c {
            '0' => 'o',
            '1' => 'l',
            '3' => 'e',
            other => other,
        })
        .collect();
    // "gooogle" and friends: collapse runs of o to two.
    let mut collapsed = String::with_capacity(folded.len());
    let mut run = 0;
    for c in folded.chars() {
        if c == 'o' {
            run += 1;
            if run > 2 {
                continue;
            }
        } else {
            run = 0;
        }
        collapsed.push(c);
    }
    collapsed.contains("google")
}

/// Cloud Storage bucket naming rules (https://cloud.google.com/storage/docs/buckets#naming):
/// 3–63 characters, or up to 222 with dots where each dot-separated part is at most 63;
/// lowercase letters, digits, dashes, underscores and dots; starting and ending with a
/// letter or digit; not an IP address; not starting with "goog"; not containing "google"
/// or a close misspelling.
pub fn check_bucket_name(name: &str) -> Result<(), String> {
    let len = name.chars().count();
    let dotted = name.contains('.');
    if len < 3 {
        return Err(format!(
            "`{name}` is {len} characters; bucket names have at least 3"
        ));
    }
    if !dotted && len > 63 {
        return Err(format!(
            "`{name}` is {len} characters; bucket names have at most 63 (222 when split into dot-separated parts of up to 63)"
        ));
    }
    if dotted && len > 222 {
        return Err(format!(
            "`{name}` is {len} characters; dotted bucket names have at most 222"
        ));
    }
    if name.chars().any(|c| c.is_ascii_uppercase()) {
        return Err(format!(
            "`{name}` has uppercase letters; bucket names are lowercase (`{}`)",
            name.to_ascii_lowercase()
        ));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '_' | '.')))
    {
        return Err(format!(
            "`{name}` contains `{bad}`; bucket names use only lowercase letters, digits, dashes, underscores and dots"
        ));
    }
    let alnum = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    if !alnum(name.chars().next()) || !alnum(name.chars().last()) {
        return Err(format!(
            "`{name}` must start and end with a lowercase letter or digit"
        ));
    }
    if dotted {
        if let Some(part) = name.split('.').find(|p| p.is_empty() || p.len() > 63) {
            return Err(if part.is_empty() {
                format!("`{name}` has two dots in a row; each dot-separated part needs at least one character")
            } else {
                format!(
                    "`{name}` has a dot-separated part of {} characters; each part has at most 63",
                    part.len()
                )
            });
        }
    }
    if is_dotted_ipv4(name) {
        return Err(format!(
            "`{name}` is an IP address; bucket names can't be IP addresses — use a word-based name"
        ));
    }
    if name.starts_with("goog") {
        return Err(format!(
            "`{name}` starts with \"goog\", which Cloud Storage reserves; pick another prefix"
        ));
    }
    if mentions_google(name) {
        return Err(format!(
            "`{name}` contains \"google\" or a look-alike, which Cloud Storage rejects; pick a name without it"
        ));
    }
    Ok(())
}

/// Most labels one resource may carry.
pub const MAX_LABELS: usize = 64;

fn label_char_ok(c: char) -> bool {
    // International letters are allowed as long as they are not uppercase; letters
    // without case (CJK, …) count as lowercase.
    c.is_ascii_digit() || c == '_' || c == '-' || (c.is_alphabetic() && !c.is_uppercase())
}

/// GCP labels (https://cloud.google.com/resource-manager/docs/labels-overview): keys are
/// 1–63 characters starting with a lowercase letter; keys and values use lowercase
/// letters (international ones included), digits, `_` and `-`; values are 0–63
/// characters; at most 64 labels, keys unique.
pub fn check_labels<'a>(
    labels: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<(), String> {
    let mut seen: HashSet<&str> = HashSet::new();
    for (key, value) in labels {
        if !seen.insert(key) {
            return Err(format!(
                "key `{key}` appears twice; each label key can be set once"
            ));
        }
        if seen.len() > MAX_LABELS {
            return Err(format!(
                "more than {MAX_LABELS} labels; a resource carries at most {MAX_LABELS}"
            ));
        }
        let Some(first) = key.chars().next() else {
            return Err(
                "a label key is empty; keys are 1–63 characters starting with a lowercase letter"
                    .to_string(),
            );
        };
        let key_len = key.chars().count();
        if key_len > 63 || key.len() > 128 {
            return Err(format!(
                "key `{key}` is {key_len} characters; label keys have at most 63"
            ));
        }
        if key.chars().any(char::is_uppercase) {
            return Err(format!(
                "key `{key}` has uppercase letters; label keys are lowercase (`{}`)",
                key.to_lowercase()
            ));
        }
        if !first.is_alphabetic() || first.is_uppercase() {
            return Err(format!(
                "key `{key}` starts with `{first}`; label keys start with a lowercase letter"
            ));
        }
        if let Some(bad) = key.chars().find(|c| !label_char_ok(*c)) {
            return Err(format!(
                "key `{key}` contains `{bad}`; label keys use lowercase letters, digits, `_` and `-`"
            ));
        }
        let value_len = value.chars().count();
        if value_len > 63 || value.len() > 128 {
            return Err(format!(
                "value of `{key}` is {value_len} characters; label values have at most 63"
            ));
        }
        if value.chars().any(char::is_uppercase) {
            return Err(format!(
                "value `{value}` of `{key}` has uppercase letters; label values are lowercase (`{}`)",
                value.to_lowercase()
            ));
        }
        if let Some(bad) = value.chars().find(|c| !label_char_ok(*c)) {
            return Err(format!(
                "value `{value}` of `{key}` contains `{bad}`; label values use lowercase letters, digits, `_` and `-`"
            ));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------
// Locations
// ---------------------------------------------------------------------------------

/// A Google Cloud region and the zones it has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Region {
    /// The region's name (`us-central1`).
    pub name: &'static str,
    /// The letters of its zones: `us-central1` has a, b, c and f.
    pub zones: &'static [&'static str],
}

const ABC: &[&str] = &["a", "b", "c"];

/// Every public Google Cloud region and its zones, as of January 2026
/// (https://cloud.google.com/compute/docs/regions-zones). A region opened since is
/// refused with a message naming this table: add it here.
#[rustfmt::skip]
static REGIONS: &[Region] = &[
    Region { name: "africa-south1", zones: ABC },
    Region { name: "asia-east1", zones: ABC },
    Region { name: "asia-east2", zones: ABC },
    Region { name: "asia-northeast1", zones: ABC },
    Region { name: "asia-northeast2", zones: ABC },
    Region { name: "asia-northeast3", zones: ABC },
    Region { name: "asia-south1", zones: ABC },
    Region { name: "asia-south2", zones: ABC },
    Region { name: "asia-southeast1", zones: ABC },
    Region { name: "asia-southeast2", zones: ABC },
    Region { name: "australia-southeast1", zones: ABC },
    Region { name: "australia-southeast2", zones: ABC },
    Region { name: "europe-central2", zones: ABC },
    Region { name: "europe-north1", zones: ABC },
    Region { name: "europe-north2", zones: ABC },
    Region { name: "europe-southwest1", zones: ABC },
    Region { name: "europe-west1", zones: &["b", "c", "d"] },
    Region { name: "europe-west2", zones: ABC },
    Region { name: "europe-west3", zones: ABC },
    Region { name: "europe-west4", zones: ABC },
    Region { name: "europe-west6", zones: ABC },
    Region { name: "europe-west8", zones: ABC },
    Region { name: "europe-west9", zones: ABC },
    Region { name: "europe-west10", zones: ABC },
    Region { name: "europe-west12", zones: ABC },
    Region { name: "me-central1", zones: ABC },
    Region { name: "me-central2", zones: ABC },
    Region { name: "me-west1", zones: ABC },
    Region { name: "northamerica-northeast1", zones: ABC },
    Region { name: "northamerica-northeast2", zones: ABC },
    Region { name: "northamerica-south1", zones: ABC },
    Region { name: "southamerica-east1", zones: ABC },
    Region { name: "southamerica-west1", zones: ABC },
    Region { name: "us-central1", zones: &["a", "b", "c", "f"] },
    Region { name: "us-east1", zones: &["b", "c", "d"] },
    Region { name: "us-east4", zones: ABC },
    Region { name: "us-east5", zones: ABC },
    Region { name: "us-south1", zones: ABC },
    Region { name: "us-west1", zones: ABC },
    Region { name: "us-west2", zones: ABC },
    Region { name: "us-west3", zones: ABC },
    Region { name: "us-west4", zones: ABC },
];

/// Every region the catalog knows, with its zones.
pub fn regions() -> &'static [Region] {
    REGIONS
}

/// The catalog's entry for `name`, when it is a Google Cloud region.
pub fn region(name: &str) -> Option<&'static Region> {
    REGIONS.iter().find(|r| r.name == name)
}

/// Whether `zone` is a zone of a catalog region (`us-central1-f` is, `us-central1-d`
/// is not).
pub fn is_known_zone(zone: &str) -> bool {
    region_of_zone(zone)
        .and_then(region)
        .zip(zone.rsplit_once('-'))
        .is_some_and(|(r, (_, letter))| r.zones.contains(&letter))
}

fn region_names() -> Vec<&'static str> {
    REGIONS.iter().map(|r| r.name).collect()
}

fn zone_names() -> Vec<String> {
    REGIONS
        .iter()
        .flat_map(|r| r.zones.iter().map(move |z| format!("{}-{z}", r.name)))
        .collect()
}

/// The candidates a mistyped `input` most likely meant, best first, at most `max`:
/// those that extend it (`us-west` → us-west1, …), else those at the smallest edit
/// distance within a third of its length. Empty when nothing is close.
pub(crate) fn close_matches<'c>(input: &str, candidates: &[&'c str], max: usize) -> Vec<&'c str> {
    let needle = input.trim().to_ascii_lowercase();
    if needle.is_empty() {
        return Vec::new();
    }
    let extending: Vec<&str> = candidates
        .iter()
        .filter(|c| c.len() > needle.len() && c.to_ascii_lowercase().starts_with(&needle))
        .copied()
        .collect();
    if (1..=max).contains(&extending.len()) {
        return extending;
    }
    let limit = (needle.chars().count() / 3).clamp(1, 3);
    let scored: Vec<(usize, &str)> = candidates
        .iter()
        .map(|c| (edit_distance(&needle, &c.to_ascii_lowercase()), *c))
        .filter(|(d, _)| *d <= limit)
        .collect();
    let Some(best) = scored.iter().map(|(d, _)| *d).min() else {
        return Vec::new();
    };
    scored
        .into_iter()
        .filter(|(d, _)| *d == best)
        .map(|(_, c)| c)
        .take(max)
        .collect()
}

/// "; did you mean `a`, `b`?" or nothing.
pub(crate) fn did_you_mean_any(matches: &[&str]) -> String {
    if matches.is_empty() {
        return String::new();
    }
    let quoted: Vec<String> = matches.iter().map(|m| format!("`{m}`")).collect();
    format!("; did you mean {}?", quoted.join(", "))
}

/// What follows "is not a Google Cloud region" for `input`: close names, else the
/// regions of the same area (`europe-…`), else every region.
fn region_advice(input: &str) -> String {
    let names = region_names();
    let close = close_matches(input, &names, 4);
    if !close.is_empty() {
        return did_you_mean_any(&close);
    }
    let area = input
        .split('-')
        .next()
        .unwrap_or_default()
        .to_ascii_lowercase();
    let same_area: Vec<&str> = names
        .iter()
        .filter(|n| n.split('-').next() == Some(area.as_str()))
        .copied()
        .collect();
    if same_area.is_empty() {
        format!("; the regions are {}", names.join(", "))
    } else {
        format!("; {area} regions are {}", same_area.join(", "))
    }
}

/// Checks that `name` is a Google Cloud region of the catalog.
///
/// Fails for a zone (naming its region), a made-up region (`us-west9`, with the close
/// ones) or anything else.
pub fn check_region(name: &str) -> Result<(), String> {
    if region(name).is_some() {
        return Ok(());
    }
    if let Some(parent) = region_of_zone(name).filter(|r| region(r).is_some()) {
        return Err(format!(
            "`{name}` is a zone, not a region; its region is {parent}"
        ));
    }
    Err(format!(
        "`{name}` is not a Google Cloud region{}",
        region_advice(name)
    ))
}

/// Checks that `name` is a zone of a catalog region.
///
/// Fails for a region (listing its zones), a zone letter the region does not have
/// (`us-central1-z`: "us-central1 has zones a, b, c, f"), a zone of a made-up region, or
/// anything else.
pub fn check_zone(name: &str) -> Result<(), String> {
    if is_known_zone(name) {
        return Ok(());
    }
    if let Some(r) = region(name) {
        return Err(format!(
            "`{name}` is a region, not a zone; its zones are {}",
            zone_list(r)
        ));
    }
    if let Some(r) = region_of_zone(name).and_then(region) {
        return Err(format!(
            "`{name}` is not a Google Cloud zone: {} has zones {}",
            r.name,
            r.zones.join(", ")
        ));
    }
    let zones = zone_names();
    let refs: Vec<&str> = zones.iter().map(String::as_str).collect();
    let close = close_matches(name, &refs, 4);
    if !close.is_empty() {
        return Err(format!(
            "`{name}` is not a Google Cloud zone{}",
            did_you_mean_any(&close)
        ));
    }
    match region_of_zone(name) {
        Some(parent) => Err(format!(
            "`{name}` is not a Google Cloud zone: `{parent}` is not a Google Cloud region{}",
            region_advice(parent)
        )),
        None => Err(format!(
            "`{name}` is not a zone; a zone is a region, a hyphen and a letter, such as us-central1-a"
        )),
    }
}

/// "us-central1-a, us-central1-b, us-central1-c or us-central1-f".
fn zone_list(r: &Region) -> String {
    let zones: Vec<String> = r.zones.iter().map(|z| format!("{}-{z}", r.name)).collect();
    or_list(&zones)
}

/// Checks that `zone` is a catalog zone in `region`.
///
/// Fails when the zone does not exist (as [`check_zone`]) or lies in another region.
pub fn check_zone_in_region(zone: &str, region_name: &str) -> Result<(), String> {
    check_zone(zone)?;
    match region_of_zone(zone) {
        Some(parent) if parent == region_name => Ok(()),
        Some(parent) => Err(format!(
            "zone `{zone}` is in {parent}, not {region_name}{}",
            region(region_name)
                .map(|r| format!("; {region_name} has zones {}", r.zones.join(", ")))
                .unwrap_or_default()
        )),
        None => Err(format!("`{zone}` is not a zone")),
    }
}

/// Checks that `location` is a catalog region or zone (a GKE cluster's location).
///
/// Fails as [`check_region`] or [`check_zone`] for what it looks like, and for text
/// that is neither.
pub fn check_location(location: &str) -> Result<(), String> {
    if is_region(location) {
        return check_region(location);
    }
    if is_zone(location) {
        return check_zone(location);
    }
    let mut names: Vec<String> = region_names().into_iter().map(str::to_string).collect();
    names.extend(zone_names());
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    Err(format!(
        "`{location}` is neither a region (us-central1) nor a zone (us-central1-a){}",
        did_you_mean_any(&close_matches(location, &refs, 4))
    ))
}

/// Checks that an object placed at `location` (a catalog region or zone) ends up in
/// the provider's `provider_region`; `what` names the object for the message ("the
/// cluster").
///
/// Fails when the location's region is another one, saying where the object would be
/// made and how to make the two agree.
pub fn check_location_in_region(
    location: &str,
    provider_region: &str,
    what: &str,
) -> Result<(), String> {
    let (kind, actual) = match region_of_zone(location) {
        Some(parent) => ("zone", parent),
        None => ("region", location),
    };
    if actual == provider_region {
        return Ok(());
    }
    let instead = match (kind, region(provider_region)) {
        ("zone", Some(r)) => format!("pick a zone of {provider_region} ({})", zone_list(r)),
        _ => format!("set location = \"{provider_region}\""),
    };
    let relation = if kind == "zone" {
        "is not in"
    } else {
        "is not"
    };
    Err(format!(
        "{kind} `{location}` {relation} the provider's region {provider_region}: {what} would be made in {actual}, not {provider_region}; \
         {instead}, or set region = \"{actual}\" in [providers.gcp]"
    ))
}

/// A region's shape: `^[a-z]+-[a-z]+[0-9]+$` (`us-central1`, `northamerica-northeast2`).
/// Says nothing about whether it exists: [`check_region`] does.
pub fn is_region(s: &str) -> bool {
    let Some((area, place)) = s.split_once('-') else {
        return false;
    };
    let letters = place.trim_end_matches(|c: char| c.is_ascii_digit());
    !area.is_empty()
        && area.bytes().all(|b| b.is_ascii_lowercase())
        && !letters.is_empty()
        && letters.len() < place.len()
        && letters.bytes().all(|b| b.is_ascii_lowercase())
}

/// A zone's shape: a region, a hyphen and one lowercase letter (`us-central1-a`). Says
/// nothing about whether it exists: [`check_zone`] does.
pub fn is_zone(s: &str) -> bool {
    region_of_zone(s).is_some()
}

/// The region a zone-shaped name is in: `us-central1-a` → `us-central1`.
pub fn region_of_zone(zone: &str) -> Option<&str> {
    let (region, letter) = zone.rsplit_once('-')?;
    let one_letter = letter.len() == 1 && letter.bytes().all(|b| b.is_ascii_lowercase());
    (one_letter && is_region(region)).then_some(region)
}

/// Cloud Storage multi-regions (https://cloud.google.com/storage/docs/locations).
const BUCKET_MULTI_REGIONS: &[&str] = &["US", "EU", "ASIA"];
/// Predefined dual-regions; configurable dual-regions are a multi-region location plus
/// a custom placement, not a location code of their own.
const BUCKET_DUAL_REGIONS: &[&str] = &["ASIA1", "EUR4", "EUR5", "EUR7", "EUR8", "NAM4"];

/// Bucket locations: a catalog region, a predefined dual-region (NAM4, EUR4, ASIA1, …)
/// or a multi-region (US, EU, ASIA); case-insensitive, as the API is.
pub fn check_bucket_location(location: &str) -> Result<(), String> {
    let upper = location.to_ascii_uppercase();
    if BUCKET_MULTI_REGIONS.contains(&upper.as_str())
        || BUCKET_DUAL_REGIONS.contains(&upper.as_str())
    {
        return Ok(());
    }
    let lower = location.to_ascii_lowercase();
    if region(&lower).is_some() {
        return Ok(());
    }
    if let Some(parent) = region_of_zone(&lower).filter(|r| region(r).is_some()) {
        return Err(format!(
            "`{location}` is a zone; buckets live in a region, dual-region or multi-region — use {parent}"
        ));
    }
    if is_region(&lower) {
        return Err(format!(
            "`{location}` is not a Google Cloud region{}",
            region_advice(&lower)
        ));
    }
    let codes: Vec<&str> = BUCKET_MULTI_REGIONS
        .iter()
        .chain(BUCKET_DUAL_REGIONS)
        .copied()
        .collect();
    Err(format!(
        "`{location}` is not a bucket location{}; use a region such as us-central1, a dual-region ({}) or a multi-region ({})",
        hint(location, &codes),
        BUCKET_DUAL_REGIONS.join(", "),
        BUCKET_MULTI_REGIONS.join(", ")
    ))
}

// ---------------------------------------------------------------------------------
// Node taints
// ---------------------------------------------------------------------------------

/// (gcloud spelling, API enum).
const TAINT_EFFECTS: &[(&str, &str)] = &[
    ("NoSchedule", "NO_SCHEDULE"),
    ("PreferNoSchedule", "PREFER_NO_SCHEDULE"),
    ("NoExecute", "NO_EXECUTE"),
];

fn k8s_name_ok(name: &str) -> bool {
    let alnum = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    name.len() <= 63
        && alnum(name.chars().next())
        && alnum(name.chars().last())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

fn dns_subdomain_ok(prefix: &str) -> bool {
    prefix.len() <= 253
        && prefix.split('.').all(|label| {
            let alnum =
                |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
            !label.is_empty()
                && label.len() <= 63
                && alnum(label.chars().next())
                && alnum(label.chars().last())
                && label
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        })
}

fn check_taint_key(key: &str) -> Result<(), String> {
    if key.is_empty() {
        return Err(
            "the taint has no key; write key=value:Effect, e.g. dedicated=gpu:NoSchedule"
                .to_string(),
        );
    }
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        if !dns_subdomain_ok(p) {
            return Err(format!(
                "taint key prefix `{p}` is not a DNS subdomain; use lowercase labels joined by dots, like example.com/name"
            ));
        }
    }
    if !k8s_name_ok(name) {
        return Err(format!(
            "taint key `{key}` is not a Kubernetes label key; the name part is 1–63 characters of letters, digits, \
             `-`, `_` and `.`, starting and ending with a letter or digit"
        ));
    }
    Ok(())
}

/// Node taints as gcloud writes them: `key=value:Effect` (or `key:Effect` for an empty
/// value), Effect one of NoSchedule, PreferNoSchedule, NoExecute. Returns (key, value,
/// API enum "NO_SCHEDULE" | "PREFER_NO_SCHEDULE" | "NO_EXECUTE"). The API enum is also
/// accepted as the effect, since Terraform-style configs write it that way.
pub fn parse_taint(s: &str) -> Result<(String, String, &'static str), String> {
    let s = s.trim();
    let Some((kv, effect)) = s.rsplit_once(':') else {
        return Err(format!(
            "`{s}` has no effect; write key=value:Effect with Effect one of NoSchedule, PreferNoSchedule, NoExecute"
        ));
    };
    let api = TAINT_EFFECTS
        .iter()
        .find(|(g, a)| *g == effect || *a == effect)
        .map(|(_, a)| *a)
        .ok_or_else(|| {
            let names: Vec<&str> = TAINT_EFFECTS.iter().map(|(g, _)| *g).collect();
            let close = TAINT_EFFECTS
                .iter()
                .find(|(g, a)| {
                    let folded = effect.replace('_', "").to_ascii_lowercase();
                    g.to_ascii_lowercase() == folded
                        || a.replace('_', "").to_ascii_lowercase() == folded
                })
                .map(|(g, _)| format!(" (did you mean `{g}`?)"))
                .unwrap_or_else(|| hint(effect, &names));
            format!(
                "`{effect}` is not a taint effect{close}; use {}",
                or_list(&names)
            )
        })?;
    let (key, value) = kv.split_once('=').unwrap_or((kv, ""));
    check_taint_key(key)?;
    if !value.is_empty() && !k8s_name_ok(value) {
        return Err(format!(
            "taint value `{value}` is not a Kubernetes label value; use up to 63 letters, digits, `-`, `_` and `.`, \
             starting and ending with a letter or digit"
        ));
    }
    Ok((key.to_string(), value.to_string(), api))
}

/// The gcloud form of a taint: ("preemptible", "true", "NO_SCHEDULE") →
/// "preemptible=true:NoSchedule"; an empty value gives "key:Effect". The effect may be
/// given in either spelling; an unknown effect is written through unchanged.
pub fn format_taint(key: &str, value: &str, effect: &str) -> String {
    let effect = TAINT_EFFECTS
        .iter()
        .find(|(g, a)| *g == effect || *a == effect)
        .map_or(effect, |(g, _)| *g);
    if value.is_empty() {
        format!("{key}:{effect}")
    } else {
        format!("{key}={value}:{effect}")
    }
}

// ---------------------------------------------------------------------------------
// OAuth scopes
// ---------------------------------------------------------------------------------

const SCOPE_PREFIX: &str = "https://www.googleapis.com/auth/";

/// The aliases `gcloud --scopes` accepts, as suffixes of [`SCOPE_PREFIX`]
/// (https://cloud.google.com/sdk/gcloud/reference/container/node-pools/create, --scopes).
static SCOPE_ALIASES: &[(&str, &[&str])] = &[
    ("bigquery", &["bigquery"]),
    ("cloud-platform", &["cloud-platform"]),
    ("cloud-source-repos", &["source.full_control"]),
    ("cloud-source-repos-ro", &["source.read_only"]),
    ("compute-ro", &["compute.readonly"]),
    ("compute-rw", &["compute"]),
    ("datastore", &["datastore"]),
    (
        "default",
        &[
            "devstorage.read_only",
            "logging.write",
            "monitoring.write",
            "pubsub",
            "service.management.readonly",
            "servicecontrol",
            "trace.append",
        ],
    ),
    (
        "gke-default",
        &[
            "devstorage.read_only",
            "logging.write",
            "monitoring",
            "service.management.readonly",
            "servicecontrol",
            "trace.append",
        ],
    ),
    ("logging-write", &["logging.write"]),
    ("monitoring", &["monitoring"]),
    ("monitoring-read", &["monitoring.read"]),
    ("monitoring-write", &["monitoring.write"]),
    ("pubsub", &["pubsub"]),
    ("service-control", &["servicecontrol"]),
    ("service-management", &["service.management.readonly"]),
    ("sql", &["sqlservice"]),
    ("sql-admin", &["sqlservice.admin"]),
    ("storage-full", &["devstorage.full_control"]),
    ("storage-ro", &["devstorage.read_only"]),
    ("storage-rw", &["devstorage.read_write"]),
    ("taskqueue", &["taskqueue"]),
    ("trace", &["trace.append"]),
    ("userinfo-email", &["userinfo.email"]),
];

/// Expands gcloud scope aliases ("cloud-platform", "storage-ro", "gke-default", …) to
/// full scope URLs; full URLs pass through. Duplicates are dropped, order kept.
pub fn expand_scopes(scopes: &[String]) -> Result<Vec<String>, String> {
    let mut out: Vec<String> = Vec::new();
    let push = |url: String, out: &mut Vec<String>| {
        if !out.contains(&url) {
            out.push(url);
        }
    };
    for scope in scopes {
        let scope = scope.trim();
        if scope.starts_with("https://") {
            push(scope.to_string(), &mut out);
            continue;
        }
        let Some((_, suffixes)) = SCOPE_ALIASES.iter().find(|(alias, _)| *alias == scope) else {
            let aliases: Vec<&str> = SCOPE_ALIASES.iter().map(|(a, _)| *a).collect();
            return Err(format!(
                "unknown scope alias `{scope}`{}; use a full {SCOPE_PREFIX}… URL or one of: {}",
                hint(scope, &aliases),
                aliases.join(", ")
            ));
        };
        for suffix in *suffixes {
            push(format!("{SCOPE_PREFIX}{suffix}"), &mut out);
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------
// Machine types
// ---------------------------------------------------------------------------------

const MACHINE_TYPE_FORMAT: &str =
    "machine types look like FAMILY-SERIES-SIZE (n1-highmem-8, e2-standard-4, \
     a3-highgpu-8g, ct5lp-hightpu-4t) or FAMILY-custom-VCPUS-MEMORY_MB (n1-custom-4-15360)";

/// Checks the VCPUS-MEMORY_MB[-ext] tail of a custom machine type, or the
/// E2 shared-core `micro|small|medium-MEMORY_MB` form.
fn check_custom_tail(machine_type: &str, tail: &[&str]) -> Result<(), String> {
    let number = |s: &str| -> Option<u64> {
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
    };
    let memory = match tail {
        [kind, mem] if matches!(*kind, "micro" | "small" | "medium") => number(mem),
        [cpus, mem] | [cpus, mem, "ext"] => match number(cpus) {
            Some(0) | None => None,
            Some(_) => number(mem),
        },
        _ => None,
    };
    let Some(memory) = memory else {
        return Err(format!(
            "`{machine_type}` is not a custom machine type; write FAMILY-custom-VCPUS-MEMORY_MB, e.g. n1-custom-4-15360 \
             (add -ext for extended memory)"
        ));
    };
    // Custom machine memory comes in 256 MB steps
    // (https://cloud.google.com/compute/docs/instances/creating-instance-with-custom-machine-type).
    if memory == 0 || !memory.is_multiple_of(256) {
        let down = memory / 256 * 256;
        let up = down + 256;
        let options = if down == 0 {
            format!("{up}")
        } else {
            format!("{down} or {up}")
        };
        return Err(format!(
            "`{machine_type}` asks for {memory} MB; custom machine memory is a multiple of 256 MB — use {options}"
        ));
    }
    Ok(())
}

/// Machine type syntax: predefined (`n1-highmem-8`, `e2-micro`, `c3-standard-4-lssd`),
/// accelerator-optimized (`a3-highgpu-8g`), TPU (`ct5lp-hightpu-4t`) and custom
/// (`n1-custom-4-15360`, `e2-custom-4-8192`, legacy `custom-4-15360`). Whether the type
/// exists in a zone is left to the plan's capacity preflight; this catches shapes and
/// families that can never be right.
pub fn check_machine_type(machine_type: &str) -> Result<(), String> {
    if machine_type.is_empty() {
        return Err(format!("no machine type given; {MACHINE_TYPE_FORMAT}"));
    }
    if machine_type.chars().any(|c| c.is_ascii_uppercase()) {
        return Err(format!(
            "`{machine_type}` has uppercase letters; machine types are lowercase (`{}`)",
            machine_type.to_ascii_lowercase()
        ));
    }
    if let Some(bad) = machine_type
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-'))
    {
        let fixed: String = machine_type
            .chars()
            .map(|c| {
                if matches!(c, '_' | ' ' | '.' | '/') {
                    '-'
                } else {
                    c
                }
            })
            .collect();
        let suggestion = if fixed != machine_type && check_machine_type(&fixed).is_ok() {
            format!(" (did you mean `{fixed}`?)")
        } else {
            String::new()
        };
        return Err(format!(
            "`{machine_type}` contains `{bad}`{suggestion}; {MACHINE_TYPE_FORMAT}"
        ));
    }
    let parts: Vec<&str> = machine_type.split('-').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(format!(
            "`{machine_type}` has an empty part between hyphens; {MACHINE_TYPE_FORMAT}"
        ));
    }
    if parts[0] == "custom" {
        return check_custom_tail(machine_type, &parts[1..]);
    }
    let family = parts[0];
    let family_ok = family
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase())
        && family.chars().any(|c| c.is_ascii_digit());
    if !family_ok || parts.len() < 2 {
        return Err(format!(
            "`{machine_type}` does not start with a machine family such as n1, e2, n2d, c3 or a3; {MACHINE_TYPE_FORMAT}"
        ));
    }
    if !is_machine_family(family) {
        let families = machine_families();
        return Err(format!(
            "`{machine_type}`: Compute Engine has no machine family `{family}`{}; its families are {}",
            hint(family, &families),
            families.join(", ")
        ));
    }
    if parts[1] == "custom" {
        return check_custom_tail(machine_type, &parts[2..]);
    }
    Ok(())
}

/// The machine families of Compute Engine's general-purpose, compute-, memory-,
/// storage- and accelerator-optimized series, from
/// https://cloud.google.com/compute/docs/machine-resource; TPU families come from the
/// TPU table. A name outside them is a typo or a family this catalog predates.
static MACHINE_FAMILIES: &[&str] = &[
    "a2", "a3", "a4", "a4x", "c2", "c2d", "c3", "c3d", "c4", "c4a", "c4d", "e2", "f1", "g1", "g2",
    "g4", "h3", "h4d", "m1", "m2", "m3", "m4", "n1", "n2", "n2d", "n4", "n4a", "n4d", "t2a", "t2d",
    "x4", "z3",
];

/// Every machine family, TPU families included, sorted.
fn machine_families() -> Vec<&'static str> {
    let mut out: Vec<&'static str> = MACHINE_FAMILIES.to_vec();
    for t in TPUS {
        let family = machine_family(t.machine_type);
        if !out.contains(&family) {
            out.push(family);
        }
    }
    out.sort_unstable();
    out
}

fn is_machine_family(family: &str) -> bool {
    MACHINE_FAMILIES.contains(&family)
        || TPUS
            .iter()
            .any(|t| machine_family(t.machine_type) == family)
}

// ---------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;

    fn err_of<T: std::fmt::Debug>(r: Result<T, String>) -> String {
        match r {
            Ok(v) => panic!("expected an error, got Ok({v:?})"),
            Err(e) => e,
        }
    }

    /// Messages are lowercase at the start (acronyms and quoted names aside) and never
    /// end with a period, so callers can prefix a field path.
    fn assert_message_style(msg: &str) {
        let first = msg.chars().next().expect("message is not empty");
        assert!(
            first.is_lowercase() || first == '`' || first.is_ascii_digit(),
            "message should start lowercase: {msg}"
        );
        assert!(
            !msg.ends_with('.'),
            "message should not end with a period: {msg}"
        );
    }

    #[test]
    fn edit_distance_and_suggestions() {
        assert_eq!(edit_distance("", ""), 0);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("nvidia-l4", "nvidia-l4"), 0);
        let names = gpu_names();
        let cases: &[(&str, Option<&str>)] = &[
            ("nvidia-tesla-t5", Some("nvidia-tesla-t4")),
            ("t4", Some("nvidia-tesla-t4")),
            ("l4", Some("nvidia-l4")),
            ("h100-80gb", Some("nvidia-h100-80gb")),
            ("NVIDIA-L4", Some("nvidia-l4")),
            ("something-else", None),
        ];
        for (input, want) in cases {
            assert_eq!(did_you_mean(input, &names), *want, "input {input}");
        }
        assert_eq!(or_list(&[1, 2, 4]), "1, 2 or 4");
        assert_eq!(or_list(&[8]), "8");
    }

    #[test]
    fn gpu_table_is_consistent_with_built_in_machine_types() {
        for gpu in gpus() {
            let built: Vec<u32> = BUILT_IN_GPUS
                .iter()
                .filter(|(_, g, _)| *g == gpu.name)
                .map(|(_, _, n)| *n)
                .collect();
            if built.is_empty() {
                assert_eq!(
                    gpu.machine_families,
                    &["n1"],
                    "{} has no built-in machine types",
                    gpu.name
                );
                continue;
            }
            for n in &built {
                assert!(gpu.counts.contains(n), "{} lists no count {n}", gpu.name);
            }
            for n in gpu.counts {
                assert!(
                    built.contains(n),
                    "{} count {n} has no machine type",
                    gpu.name
                );
            }
        }
        for (mt, gpu, _) in BUILT_IN_GPUS {
            let g = find_gpu(gpu).expect("built-in GPU is in the table");
            assert!(
                g.machine_families.contains(&machine_family(mt)),
                "{mt} family for {gpu}"
            );
            assert!(check_machine_type(mt).is_ok(), "{mt} is well formed");
        }
        let mut names: Vec<&str> = gpu_names();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), gpus().len(), "GPU names are unique");
    }

    #[test]
    fn check_gpu_cases() {
        // (machine type, accelerator, count, None = ok / Some(substring of the error))
        let cases: &[(&str, &str, u32, Option<&str>)] = &[
            ("n1-standard-4", "nvidia-tesla-k80", 1, Some("use nvidia-tesla-t4 (closest on cost) or nvidia-l4 (current generation) instead")),
            ("n1-standard-4", "nvidia-tesla-k80", 1, Some("`nvidia-tesla-k80` is retired on GKE and can no longer be attached to new nodes")),
            ("n1-standard-4", "nvidia-tesla-p100", 1, Some("`nvidia-tesla-p100` is retired")),
            ("n1-highmem-8", "nvidia-tesla-t4", 1, None),
            ("n1-highmem-8", "nvidia-tesla-t4", 2, None),
            ("n1-highmem-8", "nvidia-tesla-t4", 4, None),
            ("n1-highmem-8", "nvidia-tesla-t4", 3, Some("counts of 1, 2 or 4, not 3; set the count to one of those")),
            ("n1-highmem-8", "nvidia-tesla-t4", 8, Some("not 8")),
            ("n1-standard-8", "nvidia-tesla-v100", 8, None),
            ("n1-standard-8", "nvidia-tesla-p4", 4, None),
            ("n1-custom-4-15360", "nvidia-tesla-t4", 1, None),
            ("custom-4-15360", "nvidia-tesla-t4", 1, None),
            ("n1-highmem-8", "nvidia-tesla-t4", 0, Some("a count of 0")),
            // N1 vCPU limits per GPU count.
            ("n1-highmem-96", "nvidia-tesla-t4", 1, Some("allows at most 48")),
            ("n1-highmem-96", "nvidia-tesla-t4", 1, Some("attach 4 GPUs")),
            ("n1-highmem-96", "nvidia-tesla-t4", 1, Some("such as n1-highmem-32")),
            ("n1-highmem-96", "nvidia-tesla-t4", 4, None),
            ("n1-standard-16", "nvidia-tesla-v100", 1, Some("at most 12")),
            ("n1-standard-8", "nvidia-tesla-v100", 1, None),
            ("n1-custom-64-65536", "nvidia-tesla-v100", 4, Some("at most 48")),
            // G2: fixed L4 counts.
            ("g2-standard-8", "nvidia-l4", 1, None),
            ("g2-standard-8", "nvidia-l4", 2, Some("comes with exactly 1 nvidia-l4 GPU built in")),
            ("g2-standard-8", "nvidia-l4", 2, Some("for 2 GPUs pick g2-standard-24")),
            ("g2-standard-24", "nvidia-l4", 2, None),
            ("g2-standard-48", "nvidia-l4", 4, None),
            ("g2-standard-96", "nvidia-l4", 8, None),
            ("g2-standard-32", "nvidia-l4", 1, None),
            ("g2-standard-8", "nvidia-l4", 3, Some("nvidia-l4 machine types come with g2-standard-4 (1)")),
            ("g2-standard-6", "nvidia-l4", 1, Some("is not a g2 machine type")),
            ("n1-highmem-8", "nvidia-l4", 1, Some("attaches only to g2 machine types")),
            ("n1-highmem-8", "nvidia-l4", 1, Some("g2-standard-4 (1)")),
            ("e2-standard-4", "nvidia-tesla-t4", 1, Some("is in the e2 family; e2 machines take no GPUs")),
            ("e2-standard-4", "nvidia-tesla-t4", 1, Some("attaches only to n1 machine types")),
            ("g2-standard-8", "nvidia-tesla-t4", 1, Some("comes with 1 × nvidia-l4 built in")),
            // A2 / A3 / A4.
            ("a2-highgpu-8g", "nvidia-tesla-a100", 8, None),
            ("a2-highgpu-8g", "nvidia-tesla-a100", 4, Some("for 4 GPUs pick a2-highgpu-4g")),
            ("a2-megagpu-16g", "nvidia-tesla-a100", 16, None),
            ("a2-ultragpu-4g", "nvidia-a100-80gb", 4, None),
            ("a2-ultragpu-4g", "nvidia-tesla-a100", 4, Some("set the accelerator type to nvidia-a100-80gb")),
            ("a3-highgpu-8g", "nvidia-h100-80gb", 8, None),
            ("a3-highgpu-1g", "nvidia-h100-80gb", 1, None),
            ("a3-megagpu-8g", "nvidia-h100-mega-80gb", 8, None),
            ("a3-megagpu-8g", "nvidia-h100-80gb", 8, Some("nvidia-h100-mega-80gb")),
            ("a3-ultragpu-8g", "nvidia-h200-141gb", 8, None),
            ("a4-highgpu-8g", "nvidia-b200", 8, None),
            ("n1-standard-8", "nvidia-h100-80gb", 8, Some("attaches only to a3 machine types")),
            // Unknown types.
            ("n1-standard-4", "nvidia-tesla-t5", 1, Some("unknown GPU type `nvidia-tesla-t5` (did you mean `nvidia-tesla-t4`?); GKE offers: nvidia-l4, nvidia-tesla-t4")),
            ("n1-standard-4", "quantum-chip", 1, Some("unknown GPU type `quantum-chip`; GKE offers:")),
        ];
        for (mt, acc, count, want) in cases {
            let got = check_gpu(mt, acc, *count);
            match want {
                None => assert!(got.is_ok(), "{mt} {acc} x{count}: {got:?}"),
                Some(sub) => {
                    let e = err_of(got);
                    assert!(e.contains(sub), "{mt} {acc} x{count}: `{e}` lacks `{sub}`");
                    assert_message_style(&e);
                }
            }
        }
    }

    #[test]
    fn built_in_gpu_lookup() {
        let cases: &[(&str, Option<(&str, u32)>)] = &[
            ("g2-standard-8", Some(("nvidia-l4", 1))),
            ("g2-standard-24", Some(("nvidia-l4", 2))),
            ("a2-highgpu-2g", Some(("nvidia-tesla-a100", 2))),
            ("a2-ultragpu-8g", Some(("nvidia-a100-80gb", 8))),
            ("a3-highgpu-8g", Some(("nvidia-h100-80gb", 8))),
            ("a3-megagpu-8g", Some(("nvidia-h100-mega-80gb", 8))),
            ("a3-ultragpu-8g", Some(("nvidia-h200-141gb", 8))),
            ("n1-standard-8", None),
            ("e2-medium", None),
        ];
        for (mt, want) in cases {
            assert_eq!(built_in_gpus(mt), *want, "{mt}");
        }
    }

    #[test]
    fn tpu_table_is_consistent() {
        for t in tpus() {
            assert!(is_tpu_machine_type(t.machine_type), "{}", t.machine_type);
            assert_eq!(tpu(t.machine_type), Some(t));
            assert!(
                check_machine_type(t.machine_type).is_ok(),
                "{}",
                t.machine_type
            );
            for topo in t.topologies {
                let dims = parse_topology(topo).expect("listed topology parses");
                assert_eq!(dims.len(), t.dimensions(), "{} {topo}", t.machine_type);
                let chips: u32 = dims.iter().product();
                assert_eq!(
                    chips % t.chips_per_vm,
                    0,
                    "{} {topo} fills whole VMs",
                    t.machine_type
                );
                assert!(
                    check_tpu_topology(t.machine_type, topo).is_ok(),
                    "{} {topo}",
                    t.machine_type
                );
            }
        }
        assert_eq!(tpu("n1-standard-8"), None);
        let v5e = tpu("ct5lp-hightpu-4t").expect("v5e 4t is known");
        assert_eq!(v5e.version, "v5e");
        assert_eq!(v5e.accelerator_label, "tpu-v5-lite-podslice");
        assert_eq!(v5e.chips_per_vm, 4);
        let labels: &[(&str, &str)] = &[
            ("ct5p-hightpu-4t", "tpu-v5p-slice"),
            ("ct4p-hightpu-4t", "tpu-v4-podslice"),
            ("ct6e-standard-4t", "tpu-v6e-slice"),
            ("tpu7x-standard-4t", "tpu7x"),
        ];
        for (mt, label) in labels {
            assert_eq!(tpu(mt).map(|t| t.accelerator_label), Some(*label), "{mt}");
        }
    }

    #[test]
    fn check_tpu_topology_cases() {
        // (machine type, topology, Ok(nodes) / Err(substring))
        let cases: &[(&str, &str, Result<u32, &str>)] = &[
            ("ct5lp-hightpu-4t", "2x2", Ok(1)),
            ("ct5lp-hightpu-4t", "2x4", Ok(2)),
            ("ct5lp-hightpu-4t", "4x4", Ok(4)),
            ("ct5lp-hightpu-4t", "8x8", Ok(16)),
            ("ct5lp-hightpu-4t", "16x16", Ok(64)),
            ("ct5lp-hightpu-4t", "3x3", Err("`3x3` is 9 chips, which does not fill whole")),
            ("ct5lp-hightpu-4t", "3x3", Err("allowed: 2x2 (1 node), 2x4 (2 nodes), 4x4 (4 nodes)")),
            ("ct5lp-hightpu-4t", "4x2", Err("not a TPU v5e slice shape for ct5lp-hightpu-4t (write 2x4)")),
            ("ct5lp-hightpu-4t", "2x2x1", Err("is a 3D topology, but TPU v5e")),
            ("ct5lp-hightpu-4t", "2X2", Err("lowercase x")),
            ("ct5lp-hightpu-4t", "big", Err("`big` is not a topology")),
            ("ct5lp-hightpu-4t", "0x2", Err("is not a topology")),
            ("ct5lp-hightpu-1t", "1x1", Ok(1)),
            ("ct5lp-hightpu-1t", "2x2", Err("single-host machine type that only runs topology 1x1; for 2x2 use ct5lp-hightpu-4t")),
            ("ct5lp-hightpu-8t", "2x4", Ok(1)),
            ("ct5lp-hightpu-8t", "4x4", Err("single-host")),
            ("ct6e-standard-4t", "2x4", Ok(2)),
            ("ct6e-standard-4t", "16x16", Ok(64)),
            ("ct6e-standard-8t", "2x4", Ok(1)),
            ("ct5p-hightpu-4t", "2x2x1", Ok(1)),
            ("ct5p-hightpu-4t", "2x2x2", Ok(2)),
            ("ct5p-hightpu-4t", "2x4x4", Ok(8)),
            ("ct5p-hightpu-4t", "4x4x4", Ok(16)),
            ("ct5p-hightpu-4t", "4x4x8", Ok(32)),
            ("ct5p-hightpu-4t", "8x12x16", Ok(384)),
            ("ct5p-hightpu-4t", "16x16x24", Ok(1536)),
            ("ct5p-hightpu-4t", "16x16x32", Err("more than the largest TPU v5p slice of 6144 chips")),
            ("ct5p-hightpu-4t", "8x4x4", Err("write 4x4x8")),
            ("ct5p-hightpu-4t", "4x4x6", Err("multiple of 4")),
            ("ct5p-hightpu-4t", "1x2x2", Err("use one of the listed shapes")),
            ("ct5p-hightpu-4t", "2x2", Err("is a 2D topology, but TPU v5p")),
            ("ct4p-hightpu-4t", "2x2x4", Ok(4)),
            ("ct4p-hightpu-4t", "8x8x8", Ok(128)),
            ("tpu7x-standard-4t", "2x2x1", Ok(1)),
            ("tpu7x-standard-4t", "4x8x8", Ok(64)),
            ("ct3p-hightpu-4t", "4x4", Ok(4)),
            ("ct3-hightpu-4t", "4x4", Err("for 4x4 use ct3p-hightpu-4t")),
            ("ct9z-hightpu-4t", "2x2", Err("unknown TPU machine type `ct9z-hightpu-4t`")),
            ("ct5lp-hightpu-2t", "2x2", Err("did you mean `ct5lp-hightpu-1t`?")),
            ("n1-standard-8", "2x2", Err("is not a TPU machine type")),
        ];
        for (mt, topo, want) in cases {
            let got = check_tpu_topology(mt, topo);
            match want {
                Ok(nodes) => assert_eq!(got, Ok(*nodes), "{mt} {topo}"),
                Err(sub) => {
                    let e = err_of(got);
                    assert!(e.contains(sub), "{mt} {topo}: `{e}` lacks `{sub}`");
                    assert_message_style(&e);
                }
            }
        }
    }

    #[test]
    fn tpu_machine_type_detection() {
        let cases: &[(&str, bool)] = &[
            ("ct5lp-hightpu-4t", true),
            ("ct4p-hightpu-4t", true),
            ("ct5p-hightpu-4t", true),
            ("ct6e-standard-8t", true),
            ("tpu7x-standard-4t", true),
            ("ct9-future-4t", true),
            ("n1-standard-8", false),
            ("c3-standard-4", false),
            ("ct", false),
            ("tpu", false),
            ("ctx-standard-4", false),
            ("", false),
        ];
        for (mt, want) in cases {
            assert_eq!(is_tpu_machine_type(mt), *want, "{mt}");
        }
    }

    #[test]
    fn legacy_tpu_resources() {
        for name in [
            "cloud-tpus.google.com/v2",
            "cloud-tpus.google.com/v3",
            "cloud-tpus.google.com/preemptible-v2",
            "cloud-tpus.google.com/preemptible-v3",
        ] {
            let msg = legacy_tpu_resource(name).expect("legacy resource is recognised");
            assert!(msg.contains("google.com/tpu"), "{msg}");
            assert!(msg.contains(name), "{msg}");
            assert_message_style(&msg);
        }
        let msg = legacy_tpu_resource("cloud-tpus.google.com/preemptible-v2").expect("recognised");
        assert!(msg.contains("TPU v2"), "{msg}");
        assert_eq!(legacy_tpu_resource("google.com/tpu"), None);
        assert_eq!(legacy_tpu_resource("nvidia.com/gpu"), None);
    }

    #[test]
    fn filestore_tiers_and_capacity() {
        let hdd = filestore_tier("BASIC_HDD").expect("BASIC_HDD is known");
        assert!(hdd.zonal && !hdd.shrinkable && hdd.legacy.is_none());
        assert_eq!(
            filestore_tier("STANDARD").and_then(|t| t.legacy),
            Some("BASIC_HDD")
        );
        assert_eq!(
            filestore_tier("PREMIUM").and_then(|t| t.legacy),
            Some("BASIC_SSD")
        );
        assert_eq!(filestore_tier("ENTERPRISE").map(|t| t.zonal), Some(false));
        assert_eq!(filestore_tier("REGIONAL").map(|t| t.zonal), Some(false));
        assert_eq!(filestore_tier("basic_hdd"), None);
        for t in filestore_tiers() {
            assert!(t.min_gb < t.max_gb, "{}", t.name);
            if let Some(current) = t.legacy {
                let c = filestore_tier(current).expect("legacy tier points at a known tier");
                assert_eq!(
                    (c.min_gb, c.max_gb, c.zonal),
                    (t.min_gb, t.max_gb, t.zonal),
                    "{}",
                    t.name
                );
            }
        }

        let cases: &[(&str, u64, Option<&str>)] = &[
            ("BASIC_HDD", 1024, None),
            ("BASIC_HDD", 65_434, None),
            ("BASIC_HDD", 1000, Some("1000 GB is below BASIC_HDD's minimum of 1024 GB (1 TiB); BASIC_HDD shares hold 1024–65434 GB")),
            ("BASIC_HDD", 1000, Some("GKE Filestore CSI driver")),
            ("BASIC_HDD", 70_000, Some("above BASIC_HDD's maximum of 65434 GB")),
            ("BASIC_SSD", 1024, Some("1024 GB (1 TiB) is below BASIC_SSD's minimum of 2560 GB (2.5 TiB); BASIC_SSD shares hold 2560–65434 GB")),
            ("BASIC_SSD", 2560, None),
            ("STANDARD", 1024, None),
            ("PREMIUM", 1024, Some("below PREMIUM's minimum")),
            ("ZONAL", 1024, None),
            ("ZONAL", 102_400, None),
            ("ZONAL", 102_401, Some("maximum of 102400 GB (100 TiB)")),
            ("REGIONAL", 1024, None),
            ("ENTERPRISE", 10_240, None),
            ("ENTERPRISE", 20_480, Some("above ENTERPRISE's maximum of 10240 GB (10 TiB)")),
            ("HIGH_SCALE_SSD", 2560, Some("minimum of 10240 GB (10 TiB)")),
            ("basic_hdd", 1024, Some("unknown Filestore tier `basic_hdd` (did you mean `BASIC_HDD`?); tiers: BASIC_HDD, BASIC_SSD")),
            ("GOLD", 1024, Some("unknown Filestore tier `GOLD`")),
        ];
        for (tier, gb, want) in cases {
            let got = check_filestore_capacity(tier, *gb);
            match want {
                None => assert!(got.is_ok(), "{tier} {gb}: {got:?}"),
                Some(sub) => {
                    let e = err_of(got);
                    assert!(e.contains(sub), "{tier} {gb}: `{e}` lacks `{sub}`");
                    assert_message_style(&e);
                }
            }
        }
        assert_eq!(gb_with_tib(2560), "2560 GB (2.5 TiB)");
        assert_eq!(gb_with_tib(9984), "9984 GB (9.75 TiB)");
        assert_eq!(gb_with_tib(1000), "1000 GB");
    }

    #[test]
    fn share_names() {
        let cases: &[(&str, Option<&str>)] = &[
            ("NFSVol", None),
            ("vol1", None),
            ("share_01", None),
            ("abcdefghijklmnop", None),
            ("nfs-vol", Some("contains `-`; file share names use only letters, digits and underscores (try `nfs_vol`)")),
            ("1share", Some("starts with `1`")),
            ("_share", Some("starts with `_`")),
            ("abcdefghijklmnopq", Some("17 characters; file share names are at most 16")),
            ("", Some("a file share needs a name")),
        ];
        for (name, want) in cases {
            let got = check_share_name(name);
            match want {
                None => assert!(got.is_ok(), "{name}: {got:?}"),
                Some(sub) => {
                    let e = err_of(got);
                    assert!(e.contains(sub), "{name}: `{e}` lacks `{sub}`");
                    assert_message_style(&e);
                }
            }
        }
    }

    #[test]
    fn rfc1035_names() {
        let cases: &[(&str, usize, Option<&str>)] = &[
            ("kubeflow", GKE_CLUSTER_NAME_MAX, None),
            ("a", GKE_CLUSTER_NAME_MAX, None),
            ("gpu-pool-1", GKE_NODE_POOL_NAME_MAX, None),
            ("a234567890123456789012345678901234567890", GKE_CLUSTER_NAME_MAX, None),
            ("a2345678901234567890123456789012345678901", GKE_CLUSTER_NAME_MAX, Some("41 characters; the limit is 40")),
            ("My-Cluster", GKE_CLUSTER_NAME_MAX, Some("uppercase letters; names use lowercase letters, digits and hyphens (try `my-cluster`)")),
            ("my_cluster", GKE_CLUSTER_NAME_MAX, Some("contains `_`")),
            ("my_cluster", GKE_CLUSTER_NAME_MAX, Some("(try `my-cluster`)")),
            ("1cluster", GKE_CLUSTER_NAME_MAX, Some("starts with `1`; names start with a lowercase letter (try `cluster`)")),
            ("-cluster", GKE_CLUSTER_NAME_MAX, Some("starts with `-`")),
            ("cluster-", GKE_CLUSTER_NAME_MAX, Some("ends with a hyphen; names end with a letter or digit (try `cluster`)")),
            ("", GKE_CLUSTER_NAME_MAX, Some("an empty name is not allowed")),
            ("nfs.share", FILESTORE_INSTANCE_ID_MAX, Some("contains `.`")),
        ];
        for (name, max, want) in cases {
            let got = check_rfc1035(name, *max);
            match want {
                None => assert!(got.is_ok(), "{name}: {got:?}"),
                Some(sub) => {
                    let e = err_of(got);
                    assert!(e.contains(sub), "{name}: `{e}` lacks `{sub}`");
                    assert_message_style(&e);
                }
            }
        }
    }

    #[test]
    fn bucket_names() {
        let long_part = "a".repeat(64);
        let dotted_ok = format!("{}.{}.{}", "a".repeat(63), "b".repeat(63), "c".repeat(63));
        let dotted_long = format!(
            "{}.{}.{}.{}",
            "a".repeat(63),
            "b".repeat(63),
            "c".repeat(63),
            "d".repeat(40)
        );
        let with_long_part = format!("x.{long_part}");
        let cases: Vec<(&str, Option<&str>)> = vec![
            ("kubeflow-my-project", None),
            ("my_bucket.example.com", None),
            ("abc", None),
            ("a1-b2_c3", None),
            (dotted_ok.as_str(), None),
            ("Goog-x", Some("uppercase")),
            ("goog-x", Some("starts with \"goog\"")),
            ("my-google-bucket", Some("contains \"google\"")),
            ("my-g00gle-bucket", Some("look-alike")),
            ("goog1e-data", Some("starts with \"goog\"")),
            ("data-go0gle", Some("look-alike")),
            ("192.168.1.1", Some("is an IP address")),
            ("ab", Some("at least 3")),
            (long_part.as_str(), Some("at most 63")),
            (
                with_long_part.as_str(),
                Some("dot-separated part of 64 characters"),
            ),
            (dotted_long.as_str(), Some("at most 222")),
            ("-bucket", Some("must start and end")),
            ("bucket_", Some("must start and end")),
            ("my..bucket", Some("two dots in a row")),
            ("my bucket", Some("contains ` `")),
        ];
        for (name, want) in cases {
            let got = check_bucket_name(name);
            match want {
                None => assert!(got.is_ok(), "{name}: {got:?}"),
                Some(sub) => {
                    let e = err_of(got);
                    assert!(e.contains(sub), "{name}: `{e}` lacks `{sub}`");
                    assert_message_style(&e);
                }
            }
        }
        assert!(!is_dotted_ipv4("256.1.1.1"));
        assert!(is_dotted_ipv4("10.0.0.1"));
    }

    #[test]
    fn labels() {
        let ok: &[&[(&str, &str)]] = &[
            &[],
            &[("env", "prod"), ("team", "")],
            &[("cost-center", "ml_42")],
            &[("größe", "klein")],
            &[("名前", "値")],
        ];
        for set in ok {
            assert!(check_labels(set.iter().copied()).is_ok(), "{set:?}");
        }
        let too_long = "a".repeat(64);
        let bad: Vec<(Vec<(&str, &str)>, &str)> = vec![
            (
                vec![("Env", "prod")],
                "uppercase letters; label keys are lowercase (`env`)",
            ),
            (vec![("1env", "prod")], "starts with `1`"),
            (vec![("", "prod")], "a label key is empty"),
            (
                vec![("env", "Prod")],
                "value `Prod` of `env` has uppercase letters",
            ),
            (vec![("env", "a.b")], "contains `.`"),
            (vec![("env.name", "x")], "contains `.`"),
            (vec![(too_long.as_str(), "x")], "at most 63"),
            (vec![("env", too_long.as_str())], "at most 63"),
            (vec![("env", "a"), ("env", "b")], "appears twice"),
        ];
        for (set, sub) in bad {
            let e = err_of(check_labels(set.iter().copied()));
            assert!(e.contains(sub), "{set:?}: `{e}` lacks `{sub}`");
            assert_message_style(&e);
        }
        let keys: Vec<String> = (0..65).map(|i| format!("k{i}")).collect();
        let many: Vec<(&str, &str)> = keys.iter().map(|k| (k.as_str(), "v")).collect();
        assert!(err_of(check_labels(many.iter().copied())).contains("at most 64"));
        assert!(check_labels(many[..64].iter().copied()).is_ok());
    }

    #[test]
    fn regions_and_zones() {
        let cases: &[(&str, bool, bool, Option<&str>)] = &[
            ("us-central1", true, false, None),
            ("europe-west4", true, false, None),
            ("northamerica-northeast2", true, false, None),
            ("us-central1-a", false, true, Some("us-central1")),
            ("asia-southeast1-c", false, true, Some("asia-southeast1")),
            ("us-central", false, false, None),
            ("us-central1-ab", false, false, None),
            ("us-central1-1", false, false, None),
            ("US-CENTRAL1", false, false, None),
            ("central1", false, false, None),
            ("us-central1-a-b", false, false, None),
            ("", false, false, None),
        ];
        for (s, region, zone, parent) in cases {
            assert_eq!(is_region(s), *region, "is_region({s})");
            assert_eq!(is_zone(s), *zone, "is_zone({s})");
            assert_eq!(region_of_zone(s), *parent, "region_of_zone({s})");
        }
    }

    #[test]
    fn the_region_catalog_is_well_formed() {
        let names = region_names();
        assert_eq!(names.len(), 42, "{names:?}");
        let unique: HashSet<&str> = names.iter().copied().collect();
        assert_eq!(unique.len(), names.len(), "a region is listed twice");
        for r in regions() {
            assert!(is_region(r.name), "{}", r.name);
            assert!(r.zones.len() >= 3, "{} has fewer than three zones", r.name);
            for z in r.zones {
                let zone = format!("{}-{z}", r.name);
                assert!(is_zone(&zone) && is_known_zone(&zone), "{zone}");
            }
        }
    }

    #[test]
    fn regions_come_from_the_catalog() {
        for ok in [
            "us-central1",
            "europe-west12",
            "northamerica-south1",
            "africa-south1",
            "me-central2",
        ] {
            assert_eq!(check_region(ok), Ok(()), "{ok}");
        }
        let cases: &[(&str, &str)] = &[
            (
                "us-west9",
                "`us-west9` is not a Google Cloud region; did you mean `us-west1`",
            ),
            (
                "us-west",
                "did you mean `us-west1`, `us-west2`, `us-west3`, `us-west4`?",
            ),
            ("us-centrl1", "did you mean `us-central1`?"),
            ("US-CENTRAL1", "did you mean `us-central1`?"),
            ("europe-west5", "did you mean `europe-west"),
            (
                "us-central1-a",
                "`us-central1-a` is a zone, not a region; its region is us-central1",
            ),
            ("mars-north1", "the regions are africa-south1, "),
            (
                "antarctica-south7",
                "is not a Google Cloud region; the regions are",
            ),
            ("asia-middle1", "asia regions are asia-east1, asia-east2"),
        ];
        for (name, want) in cases {
            let e = err_of(check_region(name));
            assert!(e.contains(want), "{name}: `{e}` lacks `{want}`");
            assert_message_style(&e);
        }
    }

    #[test]
    fn zones_come_from_the_catalog() {
        for ok in [
            "us-central1-f",
            "us-east1-b",
            "europe-west1-d",
            "asia-southeast1-c",
        ] {
            assert_eq!(check_zone(ok), Ok(()), "{ok}");
        }
        let cases: &[(&str, &str)] = &[
            ("us-central1-z", "`us-central1-z` is not a Google Cloud zone: us-central1 has zones a, b, c, f"),
            ("us-central1-d", "us-central1 has zones a, b, c, f"),
            ("europe-west1-a", "europe-west1 has zones b, c, d"),
            ("us-east1-a", "us-east1 has zones b, c, d"),
            ("us-west9-a", "did you mean `us-west1-a`"),
            ("us-central1", "`us-central1` is a region, not a zone; its zones are us-central1-a, us-central1-b, us-central1-c or us-central1-f"),
            ("mars-north1-a", "`mars-north1` is not a Google Cloud region"),
            ("zone-a", "a zone is a region, a hyphen and a letter"),
        ];
        for (name, want) in cases {
            let e = err_of(check_zone(name));
            assert!(e.contains(want), "{name}: `{e}` lacks `{want}`");
            assert_message_style(&e);
        }
    }

    #[test]
    fn zones_in_regions() {
        assert_eq!(check_zone_in_region("us-central1-b", "us-central1"), Ok(()));
        let e = err_of(check_zone_in_region("europe-west1-b", "us-central1"));
        assert_eq!(
            e,
            "zone `europe-west1-b` is in europe-west1, not us-central1; us-central1 has zones a, b, c, f"
        );
        let e = err_of(check_zone_in_region("us-central1-z", "us-central1"));
        assert!(e.contains("us-central1 has zones a, b, c, f"), "{e}");
    }

    #[test]
    fn locations_are_regions_or_zones_of_the_catalog() {
        for ok in ["us-central1", "us-central1-a", "europe-west4-b"] {
            assert_eq!(check_location(ok), Ok(()), "{ok}");
        }
        let cases: &[(&str, &str)] = &[
            ("us-west9", "did you mean `us-west1`"),
            ("us-central1-z", "us-central1 has zones a, b, c, f"),
            (
                "central",
                "`central` is neither a region (us-central1) nor a zone (us-central1-a)",
            ),
            ("us-central-1", "did you mean `us-central1`"),
        ];
        for (loc, want) in cases {
            let e = err_of(check_location(loc));
            assert!(e.contains(want), "{loc}: `{e}` lacks `{want}`");
            assert_message_style(&e);
        }
    }

    #[test]
    fn locations_must_lie_in_the_provider_region() {
        assert_eq!(
            check_location_in_region("us-central1", "us-central1", "the cluster"),
            Ok(())
        );
        assert_eq!(
            check_location_in_region("us-central1-f", "us-central1", "the cluster"),
            Ok(())
        );
        let e = err_of(check_location_in_region(
            "europe-west1-b",
            "us-central1",
            "the cluster",
        ));
        assert_eq!(
            e,
            "zone `europe-west1-b` is not in the provider's region us-central1: the cluster would be made in europe-west1, not us-central1; \
             pick a zone of us-central1 (us-central1-a, us-central1-b, us-central1-c or us-central1-f), or set region = \"europe-west1\" in [providers.gcp]"
        );
        let e = err_of(check_location_in_region(
            "europe-west4",
            "us-central1",
            "the instance",
        ));
        assert!(
            e.starts_with("region `europe-west4` is not the provider's region us-central1: the instance would be made in europe-west4, not us-central1; set location = \"us-central1\""),
            "{e}"
        );
        assert_message_style(&e);
    }

    #[test]
    fn close_matches_prefer_extensions_then_distance() {
        let names = ["us-east-1", "us-east-2", "us-gov-east-1", "eu-west-1"];
        assert_eq!(
            close_matches("us-east", &names, 4),
            vec!["us-east-1", "us-east-2"]
        );
        assert_eq!(close_matches("us-est-1", &names, 4), vec!["us-east-1"]);
        assert_eq!(close_matches("eu-west-4", &names, 4), vec!["eu-west-1"]);
        assert!(close_matches("ap-south-1", &names, 4).is_empty());
        assert!(close_matches("", &names, 4).is_empty());
        assert_eq!(did_you_mean_any(&["a", "b"]), "; did you mean `a`, `b`?");
        assert_eq!(did_you_mean_any(&[]), "");
    }

    #[test]
    fn bucket_locations() {
        for ok in [
            "US",
            "eu",
            "Asia",
            "NAM4",
            "eur4",
            "ASIA1",
            "us-central1",
            "EUROPE-WEST4",
        ] {
            assert!(check_bucket_location(ok).is_ok(), "{ok}");
        }
        let cases: &[(&str, &str)] = &[
            ("us-central1-a", "is a zone; buckets live in a region, dual-region or multi-region — use us-central1"),
            ("NAM5", "did you mean `NAM4`?"),
            ("mars", "is not a bucket location"),
            ("us-west9", "`us-west9` is not a Google Cloud region; did you mean `us-west1`"),
            ("europe-west7", "is not a Google Cloud region"),
        ];
        for (loc, sub) in cases {
            let e = err_of(check_bucket_location(loc));
            assert!(e.contains(sub), "{loc}: `{e}` lacks `{sub}`");
            assert_message_style(&e);
        }
    }

    #[test]
    fn taints_parse_and_format() {
        let cases: &[(&str, (&str, &str, &str))] = &[
            (
                "preemptible=true:NoSchedule",
                ("preemptible", "true", "NO_SCHEDULE"),
            ),
            (
                "dedicated=gpu:PreferNoSchedule",
                ("dedicated", "gpu", "PREFER_NO_SCHEDULE"),
            ),
            (
                "nvidia.com/gpu=present:NoExecute",
                ("nvidia.com/gpu", "present", "NO_EXECUTE"),
            ),
            (
                "google.com/tpu:NoSchedule",
                ("google.com/tpu", "", "NO_SCHEDULE"),
            ),
            (
                "cloud.google.com/gke-spot=true:NO_SCHEDULE",
                ("cloud.google.com/gke-spot", "true", "NO_SCHEDULE"),
            ),
            ("  key=v1.2_x:NoSchedule ", ("key", "v1.2_x", "NO_SCHEDULE")),
        ];
        for (input, (k, v, e)) in cases {
            let got = parse_taint(input).expect("taint parses");
            assert_eq!(got, (k.to_string(), v.to_string(), *e), "{input}");
            let round = format_taint(&got.0, &got.1, got.2);
            let again = parse_taint(&round).expect("formatted taint parses");
            assert_eq!(again, got, "round trip of {input} via {round}");
        }
        assert_eq!(
            format_taint("preemptible", "true", "NO_SCHEDULE"),
            "preemptible=true:NoSchedule"
        );
        assert_eq!(
            format_taint("google.com/tpu", "", "NO_EXECUTE"),
            "google.com/tpu:NoExecute"
        );
        assert_eq!(
            format_taint("a", "b", "PreferNoSchedule"),
            "a=b:PreferNoSchedule"
        );

        let bad: &[(&str, &str)] = &[
            ("dedicated=gpu", "has no effect"),
            ("dedicated=gpu:noschedule", "did you mean `NoSchedule`?"),
            ("dedicated=gpu:Evict", "is not a taint effect"),
            ("=gpu:NoSchedule", "has no key"),
            ("-bad=gpu:NoSchedule", "not a Kubernetes label key"),
            ("Example.com/x=y:NoSchedule", "not a DNS subdomain"),
            ("a/b/c=y:NoSchedule", "not a Kubernetes label key"),
            ("key=bad value:NoSchedule", "not a Kubernetes label value"),
            ("key=a=b:NoSchedule", "not a Kubernetes label value"),
        ];
        for (input, sub) in bad {
            let e = err_of(parse_taint(input));
            assert!(e.contains(sub), "{input}: `{e}` lacks `{sub}`");
            assert_message_style(&e);
        }
    }

    #[test]
    fn scope_expansion() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<String>>();
        let got = expand_scopes(&s(&["cloud-platform"])).expect("alias expands");
        assert_eq!(got, s(&["https://www.googleapis.com/auth/cloud-platform"]));

        let got = expand_scopes(&s(&["storage-ro", "logging-write", "monitoring"]))
            .expect("aliases expand");
        assert_eq!(
            got,
            s(&[
                "https://www.googleapis.com/auth/devstorage.read_only",
                "https://www.googleapis.com/auth/logging.write",
                "https://www.googleapis.com/auth/monitoring",
            ])
        );

        let got = expand_scopes(&s(&["gke-default", "storage-ro"])).expect("gke-default expands");
        assert_eq!(got.len(), 6, "duplicates dropped: {got:?}");
        assert_eq!(
            got[0],
            "https://www.googleapis.com/auth/devstorage.read_only"
        );
        assert!(got.contains(&"https://www.googleapis.com/auth/trace.append".to_string()));

        let url = "https://www.googleapis.com/auth/userinfo.email";
        assert_eq!(
            expand_scopes(&s(&[url, "userinfo-email"])).expect("url passes"),
            s(&[url])
        );
        assert_eq!(
            expand_scopes(&[]).expect("empty is fine"),
            Vec::<String>::new()
        );

        let e = err_of(expand_scopes(&s(&["storage-read"])));
        assert!(e.contains("unknown scope alias `storage-read`"), "{e}");
        assert!(e.contains("did you mean `storage-ro`?"), "{e}");
        assert!(e.contains("cloud-platform, cloud-source-repos"), "{e}");
        assert_message_style(&e);
        for (alias, urls) in SCOPE_ALIASES {
            assert!(!urls.is_empty(), "{alias}");
        }
    }

    #[test]
    fn machine_types() {
        let ok = [
            "n1-highmem-8",
            "n1-standard-1",
            "e2-micro",
            "e2-medium",
            "f1-micro",
            "n2d-standard-2",
            "c3-standard-4-lssd",
            "a3-highgpu-8g",
            "ct5lp-hightpu-4t",
            "tpu7x-standard-4t",
            "n1-custom-4-15360",
            "n1-custom-4-15360-ext",
            "e2-custom-4-8192",
            "e2-custom-medium-4096",
            "custom-4-15360",
        ];
        for mt in ok {
            assert!(
                check_machine_type(mt).is_ok(),
                "{mt}: {:?}",
                check_machine_type(mt)
            );
        }
        let bad: &[(&str, &str)] = &[
            (
                "n1_highmem_8",
                "contains `_` (did you mean `n1-highmem-8`?)",
            ),
            ("n1_highmem_8", "machine types look like FAMILY-SERIES-SIZE"),
            ("highmem", "does not start with a machine family"),
            ("standard-4", "does not start with a machine family"),
            ("n1", "does not start with a machine family"),
            (
                "N1-standard-4",
                "uppercase letters; machine types are lowercase (`n1-standard-4`)",
            ),
            ("n1--standard", "empty part"),
            ("n1-custom-4", "not a custom machine type"),
            ("n1-custom-0-1024", "not a custom machine type"),
            ("n1-custom-four-1024", "not a custom machine type"),
            (
                "n1-custom-4-15000",
                "multiple of 256 MB — use 14848 or 15104",
            ),
            ("", "no machine type given"),
            // A family Compute Engine does not have, with the nearest one.
            ("n9-mega-8", "no machine family `n9` (did you mean `n1`?)"),
            ("c5-standard-4", "no machine family `c5`"),
            ("ct9-hightpu-4t", "its families are a2, a3"),
        ];
        for (mt, sub) in bad {
            let e = err_of(check_machine_type(mt));
            assert!(e.contains(sub), "{mt}: `{e}` lacks `{sub}`");
            assert_message_style(&e);
        }
    }
}
