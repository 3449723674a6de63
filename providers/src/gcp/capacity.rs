//! The Google Cloud side of the plan's capacity preflight (see `crate::capacity`).
//!
//! For each node pool's [`Demand`]: is its machine type offered in the zones its nodes
//! land in (Compute `machineTypes.get`, which also gives the vCPUs quotas count), are
//! its GPUs (`acceleratorTypes.get`) or its TPU slice (Cloud TPU
//! `projects.locations.acceleratorTypes.get`) offered there, and do the project's
//! regional quotas (`regions.get`: limit and usage) hold what the run's pools add —
//! vCPUs by machine family, GPUs by model, TPU chips by generation, spot and
//! preemptible nodes against the `PREEMPTIBLE_*` quotas. The usage `regions.get`
//! reports already counts the live pools, so a pool asks only for what it adds.
//!
//! Every call is a read; one the API refuses or the network cannot reach fails the
//! whole preflight, which the plan then reports as not checked.

use std::collections::BTreeMap;

use serde_json::Value;

use super::catalog;
use super::client::{client, segment, status_of, Client, Request};
use super::config::Api;
use crate::capacity::{amount, nodes_text, Demand, Finding, Need, Tally};
use crate::{Ctx, ProviderError};

const REGIONS_GET: &str = "compute.regions.get";
const MACHINE_TYPES_GET: &str = "compute.machineTypes.get";
const ACCELERATOR_TYPES_GET: &str = "compute.acceleratorTypes.get";
const TPU_TYPES_GET: &str = "tpu.projects.locations.acceleratorTypes.get";

/// One try and one retry when the API cannot be reached: the preflight is skipped
/// rather than holding the plan for minutes.
const TRANSPORT_RETRIES: u32 = 1;

/// A region as `regions.get` describes it.
#[derive(Debug, Clone, Default)]
struct Region {
    /// Zone names, in order.
    zones: Vec<String>,
    /// Limit and usage by quota metric.
    quotas: BTreeMap<String, (f64, f64)>,
}

/// What the preflight has read so far (each lookup once per run of it).
struct Reader<'a> {
    ctx: &'a Ctx,
    client: std::sync::Arc<Client>,
    project: String,
    regions: BTreeMap<String, Option<Region>>,
    /// vCPUs of a machine type in a zone; `None` when the zone does not offer it.
    machines: BTreeMap<(String, String), Option<i64>>,
    /// Whether a zone offers a GPU (Compute) or TPU (Cloud TPU) accelerator type.
    accelerators: BTreeMap<(Api, String, String), bool>,
    /// Why Cloud TPU could not be asked (its API not enabled in the project, no
    /// permission): TPU slices then go unchecked, and the rest is checked all the same.
    tpu_refused: Option<ProviderError>,
}

impl Reader<'_> {
    /// Whether `zone` offers `name`, as what it is (read once, then cached).
    async fn is_offered(
        &mut self,
        what: Offering,
        zone: &str,
        name: &str,
    ) -> Result<bool, ProviderError> {
        match what {
            Offering::Machine => Ok(self.machine_cpus(zone, name).await?.is_some()),
            Offering::Gpu => self.offers(Api::Compute, zone, name).await,
            Offering::Tpu => self.offers(Api::Tpu, zone, name).await,
        }
    }

    async fn get(
        &self,
        call: &'static str,
        api: Api,
        path: String,
    ) -> Result<Option<Value>, ProviderError> {
        let req = Request::get(call, api, path).transport_retries(TRANSPORT_RETRIES);
        self.client.get_opt(self.ctx, &req).await
    }

    async fn region(&mut self, name: &str) -> Result<Option<Region>, ProviderError> {
        if let Some(r) = self.regions.get(name) {
            return Ok(r.clone());
        }
        let path = format!(
            "compute/v1/projects/{}/regions/{}",
            segment(&self.project),
            segment(name)
        );
        let region = self
            .get(REGIONS_GET, Api::Compute, path)
            .await?
            .map(|r| Region {
                zones: r["zones"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .filter_map(|url| url.rsplit('/').next())
                    .map(str::to_string)
                    .collect(),
                quotas: r["quotas"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|q| {
                        Some((
                            q["metric"].as_str()?.to_string(),
                            (q["limit"].as_f64()?, q["usage"].as_f64().unwrap_or(0.0)),
                        ))
                    })
                    .collect(),
            });
        self.regions.insert(name.to_string(), region.clone());
        Ok(region)
    }

    async fn machine_cpus(
        &mut self,
        zone: &str,
        machine: &str,
    ) -> Result<Option<i64>, ProviderError> {
        let key = (zone.to_string(), machine.to_string());
        if let Some(c) = self.machines.get(&key) {
            return Ok(*c);
        }
        let path = format!(
            "compute/v1/projects/{}/zones/{}/machineTypes/{}",
            segment(&self.project),
            segment(zone),
            segment(machine)
        );
        let cpus = self
            .get(MACHINE_TYPES_GET, Api::Compute, path)
            .await?
            .map(|m| m["guestCpus"].as_i64().unwrap_or(0));
        self.machines.insert(key, cpus);
        Ok(cpus)
    }

    async fn offers(
        &mut self,
        api: Api,
        zone: &str,
        accelerator: &str,
    ) -> Result<bool, ProviderError> {
        let key = (api, zone.to_string(), accelerator.to_string());
        if let Some(o) = self.accelerators.get(&key) {
            return Ok(*o);
        }
        let (call, path) = match api {
            Api::Tpu => (
                TPU_TYPES_GET,
                format!(
                    "v2/projects/{}/locations/{}/acceleratorTypes/{}",
                    segment(&self.project),
                    segment(zone),
                    segment(accelerator)
                ),
            ),
            _ => (
                ACCELERATOR_TYPES_GET,
                format!(
                    "compute/v1/projects/{}/zones/{}/acceleratorTypes/{}",
                    segment(&self.project),
                    segment(zone),
                    segment(accelerator)
                ),
            ),
        };
        let offered = match self.get(call, api, path).await {
            Ok(found) => found.is_some(),
            // Cloud TPU answers 400 for a zone it has no TPUs in at all.
            Err(e) if api == Api::Tpu && status_of(&e) == Some(400) => false,
            Err(e) if api == Api::Tpu && status_of(&e) == Some(403) => {
                self.tpu_refused.get_or_insert(e);
                true
            }
            Err(e) => return Err(e),
        };
        self.accelerators.insert(key, offered);
        Ok(offered)
    }
}

/// What one thing a pool needs is, for the offering checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Offering {
    Machine,
    Gpu,
    Tpu,
}

impl Offering {
    fn call(self) -> &'static str {
        match self {
            Offering::Machine => MACHINE_TYPES_GET,
            Offering::Gpu => ACCELERATOR_TYPES_GET,
            Offering::Tpu => TPU_TYPES_GET,
        }
    }

    fn noun(self) -> &'static str {
        match self {
            Offering::Machine => "machine type",
            Offering::Gpu => "accelerator",
            Offering::Tpu => "TPU slice",
        }
    }
}

/// Whether the pools' machines, GPUs and TPU slices are offered in their zones and fit
/// the project's regional quotas. See the module documentation.
pub async fn preflight(ctx: &Ctx, needs: &[Need]) -> Result<Vec<Finding>, ProviderError> {
    if needs
        .iter()
        .filter(|n| n.after != n.before)
        .all(|n| n.after.iter().all(|d| d.region.is_empty()))
    {
        return Ok(Vec::new());
    }
    let c = client(ctx)?;
    let project = c.config.project()?.to_string();
    let mut reader = Reader {
        ctx,
        client: c,
        project,
        regions: BTreeMap::new(),
        machines: BTreeMap::new(),
        accelerators: BTreeMap::new(),
        tpu_refused: None,
    };
    let mut findings = Vec::new();
    let mut tallies: BTreeMap<(String, String), Tally> = BTreeMap::new();
    // An unchanged pool is already counted in the usage and already runs where it is.
    for need in needs.iter().filter(|n| n.after != n.before) {
        for (i, demand) in need.after.iter().enumerate() {
            if demand.region.is_empty() || demand.machine_types.is_empty() {
                continue;
            }
            let Some(region) = reader.region(&demand.region).await? else {
                continue;
            };
            check_fallback(&mut reader, &need.address, demand, &region, &mut findings).await?;
            let Some(cpus) =
                check_offered(&mut reader, &need.address, demand, &region, &mut findings).await?
            else {
                continue;
            };
            let want = units(demand, cpus);
            // What the live object holds of the same quotas, already in the usage.
            let mut held: BTreeMap<String, (f64, f64, String)> = BTreeMap::new();
            if let Some(before) = need.before.get(i) {
                let before_cpus = match before.zones.first().or(region.zones.first()) {
                    Some(zone) => match before.machine_types.first() {
                        Some(m) => reader.machine_cpus(zone, m).await?.unwrap_or(0),
                        None => 0,
                    },
                    None => 0,
                };
                held = units(before, before_cpus);
            }
            for (metric, (min, max, basis)) in want {
                let had = held.get(&metric).map_or((0.0, 0.0), |h| (h.0, h.1));
                tallies
                    .entry((demand.region.clone(), metric))
                    .or_default()
                    .add(&need.address, (min, max), had, &basis);
            }
        }
    }
    for ((region_name, metric), tally) in tallies {
        let Some(Some(region)) = reader.regions.get(&region_name) else {
            continue;
        };
        // A metric regions.get does not report has no regional limit to check.
        let Some(&(limit, usage)) = region.quotas.get(&metric) else {
            continue;
        };
        let left = (limit - usage).max(0.0);
        if tally.max <= left {
            continue;
        }
        let project = &reader.project;
        let head = format!(
            "quota {metric} in {region_name} (project {project}): {} left of {}, {} in use (compute.regions.get)",
            amount(left),
            amount(limit),
            amount(usage)
        );
        let request = format!(
            "  to ask for more: the console's Quotas page (IAM & Admin → Quotas & System Limits), metric compute.googleapis.com/{}, region {region_name}",
            metric.to_lowercase()
        );
        let who = tally.listing("    ");
        if tally.min > left {
            findings.push(Finding::error(
                tally.addresses(),
                format!(
                    "{head}\n  the stack's node pools need {} more at their initial size and {} at their maximum:\n{who}\n{request}",
                    amount(tally.min),
                    amount(tally.max),
                ),
            ));
        } else {
            findings.push(Finding::warning(
                tally.addresses(),
                format!(
                    "{head}\n  enough for the node pools' initial size ({}) but not their maximum ({}): the autoscaler will stop short\n{who}\n{request}",
                    amount(tally.min),
                    amount(tally.max),
                ),
            ));
        }
    }
    if let Some(e) = reader.tpu_refused.take() {
        let tpu_pools: Vec<String> = needs
            .iter()
            .filter(|n| n.after.iter().any(|d| d.tpu.is_some()))
            .map(|n| n.address.clone())
            .collect();
        findings.push(Finding::warning(
            tpu_pools.clone(),
            format!(
                "TPU slices not checked for {}: {e} (enable tpu.googleapis.com in the project to have them checked)",
                tpu_pools.join(", ")
            ),
        ));
    }
    Ok(findings)
}

/// Checks that `demand`'s machine type, GPUs and TPU slice are offered where its nodes
/// land, adding a finding for each that is not; returns the machine type's vCPUs, or
/// `None` when it is offered nowhere it must run (quotas are then beside the point).
async fn check_offered(
    reader: &mut Reader<'_>,
    address: &str,
    demand: &Demand,
    region: &Region,
    findings: &mut Vec<Finding>,
) -> Result<Option<i64>, ProviderError> {
    let machine = &demand.machine_types[0];
    let mut wanted: Vec<(Offering, String)> = vec![(Offering::Machine, machine.clone())];
    match &demand.tpu {
        Some(tpu) => wanted.push((Offering::Tpu, tpu.clone())),
        None => {
            // GPUs a machine carries come with it: its type being offered is enough.
            if catalog::built_in_gpus(machine).is_none() {
                for (gpu, _) in &demand.accelerators {
                    wanted.push((Offering::Gpu, gpu.clone()));
                }
            }
        }
    }
    let mut cpus = None;
    let mut ok = true;
    for (what, name) in wanted {
        // Where the nodes go, or where GKE may put them.
        let candidates = if demand.zones.is_empty() {
            region.zones.clone()
        } else {
            demand.zones.clone()
        };
        let mut offered_in = Vec::new();
        for zone in &candidates {
            let here = reader.is_offered(what, zone, &name).await?;
            if what == Offering::Machine && here && cpus.is_none() {
                cpus = reader.machine_cpus(zone, &name).await?;
            }
            if here {
                offered_in.push(zone.clone());
            }
        }
        let region_name = &demand.region;
        if !demand.zones.is_empty() {
            let missing: Vec<&String> = demand
                .zones
                .iter()
                .filter(|z| !offered_in.contains(z))
                .collect();
            if missing.is_empty() {
                continue;
            }
            // Where else in the region it is, so the message says where to go.
            let mut elsewhere = Vec::new();
            for zone in region.zones.iter().filter(|z| !demand.zones.contains(z)) {
                if reader.is_offered(what, zone, &name).await? {
                    elsewhere.push(zone.clone());
                }
            }
            let where_else = if elsewhere.is_empty() {
                format!("no zone of {region_name} offers it")
            } else {
                format!(
                    "{region_name} offers it in {}: place the pool's cluster in one of those zones",
                    elsewhere.join(", ")
                )
            };
            ok = false;
            findings.push(Finding::error(
                vec![address.to_string()],
                format!(
                    "{address}: {} {name} is not offered in {} ({}); {where_else}.",
                    what.noun(),
                    missing
                        .iter()
                        .map(|z| z.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                    what.call()
                ),
            ));
        } else if offered_in.is_empty() {
            ok = false;
            findings.push(Finding::error(
                vec![address.to_string()],
                format!(
                    "{address}: {} {name} is not offered in any zone of {region_name} ({}).",
                    what.noun(),
                    what.call()
                ),
            ));
        } else if (offered_in.len() as u32) < demand.zone_count {
            findings.push(Finding::warning(
                vec![address.to_string()],
                format!(
                    "{address}: {} {name} is offered in only {} of {region_name} ({}), and GKE spreads a regional cluster's pools over {} zones it picks: the pool fails where it is not offered. Make the cluster zonal in one of those zones.",
                    what.noun(),
                    offered_in.join(", "),
                    what.call(),
                    demand.zone_count
                ),
            ));
        }
    }
    Ok(if ok { Some(cpus.unwrap_or(0)) } else { None })
}

/// Checks a pool's fallback as its declared placement is checked: each fallback zone is
/// a zone of the region that offers the pool's GPUs or TPU slice and at least one of its
/// machine types; each fallback machine type is offered somewhere it would be tried (the
/// declared zones, or the region's when GKE picks them, and the fallback zones). A
/// fallback that can never be used is an error, found before anything is created.
async fn check_fallback(
    reader: &mut Reader<'_>,
    address: &str,
    demand: &Demand,
    region: &Region,
    findings: &mut Vec<Finding>,
) -> Result<(), ProviderError> {
    let region_name = &demand.region;
    let mut accelerators: Vec<(Offering, &str)> = Vec::new();
    match &demand.tpu {
        Some(tpu) => accelerators.push((Offering::Tpu, tpu)),
        None => {
            if let Some(machine) = demand.machine_types.first() {
                if catalog::built_in_gpus(machine).is_none() {
                    accelerators.extend(
                        demand
                            .accelerators
                            .iter()
                            .map(|(g, _)| (Offering::Gpu, g.as_str())),
                    );
                }
            }
        }
    }
    for zone in &demand.fallback_zones {
        if !region.zones.contains(zone) {
            findings.push(Finding::error(
                vec![address.to_string()],
                format!(
                    "{address}: fallback zone {zone} is not a zone of {region_name} ({REGIONS_GET}); its zones are {}.",
                    region.zones.join(", ")
                ),
            ));
            continue;
        }
        let mut missing = None;
        for (what, name) in &accelerators {
            if !reader.is_offered(*what, zone, name).await? {
                missing = Some((*what, *name));
                break;
            }
        }
        if let Some((what, name)) = missing {
            findings.push(Finding::error(
                vec![address.to_string()],
                format!(
                    "{address}: fallback zone {zone} does not offer {} {name} ({}), so the pool's nodes could not be made there; name zones that do, or leave it out.",
                    what.noun(),
                    what.call()
                ),
            ));
            continue;
        }
        let mut any = false;
        for machine in &demand.machine_types {
            if reader.is_offered(Offering::Machine, zone, machine).await? {
                any = true;
                break;
            }
        }
        if !any {
            findings.push(Finding::error(
                vec![address.to_string()],
                format!(
                    "{address}: fallback zone {zone} offers none of the pool's machine types ({}) ({MACHINE_TYPES_GET}); name zones that do, or leave it out.",
                    demand.machine_types.join(", ")
                ),
            ));
            continue;
        }
    }
    let declared = if demand.zones.is_empty() {
        region.zones.clone()
    } else {
        demand.zones.clone()
    };
    let tried: Vec<String> = declared
        .into_iter()
        .chain(
            demand
                .fallback_zones
                .iter()
                .filter(|z| region.zones.contains(z))
                .cloned(),
        )
        .collect();
    for machine in demand.machine_types.iter().skip(1) {
        let mut offered = false;
        for zone in &tried {
            if reader.is_offered(Offering::Machine, zone, machine).await? {
                offered = true;
                break;
            }
        }
        if offered {
            continue;
        }
        // Where else in the region it is, so the message says what would work.
        let mut elsewhere = Vec::new();
        for zone in region.zones.iter().filter(|z| !tried.contains(z)) {
            if reader.is_offered(Offering::Machine, zone, machine).await? {
                elsewhere.push(zone.clone());
            }
        }
        let where_else = if elsewhere.is_empty() {
            format!("no zone of {region_name} offers it")
        } else {
            format!(
                "{region_name} offers it in {}: add one of those to fallback.zones",
                elsewhere.join(", ")
            )
        };
        findings.push(Finding::error(
            vec![address.to_string()],
            format!(
                "{address}: fallback machine type {machine} is not offered in {} ({MACHINE_TYPES_GET}); {where_else}.",
                tried.join(", ")
            ),
        ));
    }
    Ok(())
}

/// What `demand`'s nodes take of each quota metric at creation and at the most, with
/// how that came about: vCPUs by family, GPUs by model, TPU chips by generation.
fn units(demand: &Demand, cpus: i64) -> BTreeMap<String, (f64, f64, String)> {
    let mut out = BTreeMap::new();
    let Some(machine) = demand.machine_types.first() else {
        return out;
    };
    let (start, most) = (f64::from(demand.nodes.0), f64::from(demand.nodes.1));
    let nodes = nodes_text(demand.nodes.0.into(), demand.nodes.1.into());
    let spot = demand.spot;
    if let Some(tpu) = catalog::tpu(machine) {
        if let Some(metric) = tpu_metric(machine, spot) {
            let chips = f64::from(tpu.chips_per_vm);
            out.insert(
                metric,
                (
                    start * chips,
                    most * chips,
                    format!("{nodes} × {} chips ({machine})", tpu.chips_per_vm),
                ),
            );
        }
        return out;
    }
    if cpus > 0 {
        let per = cpus as f64;
        out.insert(
            cpu_metric(machine, spot),
            (
                start * per,
                most * per,
                format!("{nodes} × {machine}, {cpus} vCPUs each"),
            ),
        );
    }
    let gpus: Vec<(String, u32)> = match catalog::built_in_gpus(machine) {
        Some((gpu, n)) => vec![(gpu.to_string(), n)],
        None => demand.accelerators.clone(),
    };
    for (gpu, count) in gpus {
        let per = f64::from(count);
        let entry = out
            .entry(gpu_metric(&gpu, spot))
            .or_insert((0.0, 0.0, String::new()));
        entry.0 += start * per;
        entry.1 += most * per;
        entry.2 = format!("{nodes} × {count} {gpu}");
    }
    out
}

/// The regional vCPU quota a machine family counts against: most share `CPUS`, some
/// families have their own; spot and preemptible vCPUs count as `PREEMPTIBLE_CPUS`.
fn cpu_metric(machine: &str, spot: bool) -> String {
    if spot {
        return "PREEMPTIBLE_CPUS".to_string();
    }
    let family = machine.split('-').next().unwrap_or_default();
    match family {
        "a2" | "c2" | "c2d" | "c3" | "m1" | "m2" | "m3" | "n2" | "n2d" | "t2a" | "t2d" => {
            format!("{}_CPUS", family.to_uppercase())
        }
        _ => "CPUS".to_string(),
    }
}

/// The regional quota of a GPU model: `nvidia-tesla-t4` → `NVIDIA_T4_GPUS`,
/// `nvidia-a100-80gb` → `NVIDIA_A100_80GB_GPUS`, with `PREEMPTIBLE_` for spot.
fn gpu_metric(gpu: &str, spot: bool) -> String {
    let model = gpu
        .trim_start_matches("nvidia-")
        .trim_start_matches("tesla-");
    // The H100s' quotas are named for the chip, not its memory.
    let model = if model.starts_with("h100") {
        model.replace("-80gb", "")
    } else {
        model.to_string()
    };
    let metric = format!("NVIDIA_{}_GPUS", model.replace('-', "_").to_uppercase());
    if spot {
        format!("PREEMPTIBLE_{metric}")
    } else {
        metric
    }
}

/// The regional quota a GKE TPU machine type's chips count against, when Compute
/// Engine has one (v4, v5e); v5p, v6e and later are Cloud TPU quotas.
fn tpu_metric(machine: &str, spot: bool) -> Option<String> {
    let metric = match machine.split('-').next().unwrap_or_default() {
        "ct5lp" => "TPU_LITE_PODSLICE_V5",
        "ct5l" => "TPU_LITE_DEVICE_V5",
        "ct4p" => "TPU_PODSLICE_V4",
        _ => return None,
    };
    Some(if spot {
        format!("PREEMPTIBLE_{metric}")
    } else {
        metric.to_string()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Offline, the preflight gives up after one retry, naming the call, instead of
    /// holding the plan through the provider's eight.
    #[tokio::test]
    async fn an_unreachable_compute_api_fails_at_once_naming_the_call() {
        let dir = tempfile::tempdir().expect("tempdir");
        let token = dir.path().join("token");
        std::fs::write(&token, "t\n").expect("token file");
        let config = serde_json::json!({
            "project": "p",
            "access_token_file": token.display().to_string(),
            "retry_base_delay": "1ms",
            "max_retries": 8,
            "endpoints": {"compute": "http://127.0.0.1:9/"},
        });
        let ctx = Ctx::new("gke_node_pool.gpu", config);
        let need = Need {
            address: "gke_node_pool.gpu".into(),
            after: vec![Demand {
                region: "us-central1".into(),
                machine_types: vec!["n1-standard-8".into()],
                nodes: (1, 1),
                ..Demand::default()
            }],
            before: Vec::new(),
        };
        let started = std::time::Instant::now();
        let e = preflight(&ctx, &[need]).await.expect_err("nothing listens");
        assert!(
            e.to_string().starts_with("compute.regions.get failed"),
            "{e}"
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(20));
    }

    /// A project without the Cloud TPU API enabled: its 403 leaves the TPU slice
    /// unchecked (and says so) while Compute Engine's quotas are checked all the same.
    #[tokio::test]
    async fn a_disabled_tpu_api_leaves_the_slice_unchecked_and_the_quotas_checked() {
        // A project with Compute Engine on and Cloud TPU off, as the sandbox keeps it.
        let sandbox = terrain_sandbox::Sandbox::start(terrain_sandbox::Options {
            timing: terrain_sandbox::Timing::instant(),
            enabled_apis: Some(vec!["compute.googleapis.com".to_string()]),
            ..terrain_sandbox::Options::default()
        })
        .await
        .expect("the sandbox starts");
        sandbox
            .set_capacity(serde_json::json!({"gcp": {"quotas": [
                {"metric": "TPU_LITE_PODSLICE_V5", "limit": 0}
            ]}}))
            .expect("a valid capacity");
        let dir = tempfile::tempdir().expect("tempdir");
        let token = dir.path().join("token");
        std::fs::write(&token, "t\n").expect("token file");
        let e = sandbox.gcp_endpoints();
        let ctx = Ctx::new(
            "gke_node_pool.tpu",
            serde_json::json!({
                "project": "tpu-project",
                "access_token_file": token.display().to_string(),
                "retry_base_delay": "1ms",
                "endpoints": {"compute": e.compute, "tpu": e.tpu},
            }),
        );
        let need = Need {
            address: "gke_node_pool.tpu".into(),
            after: vec![Demand {
                region: "us-central1".into(),
                zones: vec!["us-central1-a".into()],
                zone_count: 1,
                machine_types: vec!["ct5lp-hightpu-4t".into()],
                tpu: Some("v5litepod-4".into()),
                nodes: (1, 1),
                basis: "1 node × ct5lp-hightpu-4t".into(),
                ..Demand::default()
            }],
            before: Vec::new(),
        };
        let found = preflight(&ctx, &[need]).await.expect("checked");
        assert_eq!(found.len(), 2, "{found:#?}");
        assert_eq!(found[0].severity, crate::Severity::Error);
        assert!(
            found[0]
                .message
                .starts_with("quota TPU_LITE_PODSLICE_V5 in us-central1"),
            "{}",
            found[0].message
        );
        assert_eq!(found[1].severity, crate::Severity::Warning);
        assert!(
            found[1].message.starts_with("TPU slices not checked for gke_node_pool.tpu: tpu.projects.locations.acceleratorTypes.get failed: 403"),
            "{}",
            found[1].message
        );
    }

    #[test]
    fn quota_metrics_are_named_as_compute_engine_names_them() {
        assert_eq!(gpu_metric("nvidia-tesla-t4", false), "NVIDIA_T4_GPUS");
        assert_eq!(
            gpu_metric("nvidia-tesla-t4", true),
            "PREEMPTIBLE_NVIDIA_T4_GPUS"
        );
        assert_eq!(gpu_metric("nvidia-l4", false), "NVIDIA_L4_GPUS");
        assert_eq!(
            gpu_metric("nvidia-a100-80gb", false),
            "NVIDIA_A100_80GB_GPUS"
        );
        assert_eq!(
            gpu_metric("nvidia-h100-80gb", true),
            "PREEMPTIBLE_NVIDIA_H100_GPUS"
        );
        assert_eq!(
            gpu_metric("nvidia-tesla-t4-vws", false),
            "NVIDIA_T4_VWS_GPUS"
        );
        assert_eq!(cpu_metric("n1-standard-8", false), "CPUS");
        assert_eq!(cpu_metric("n2-standard-8", false), "N2_CPUS");
        assert_eq!(cpu_metric("a2-highgpu-1g", true), "PREEMPTIBLE_CPUS");
        assert_eq!(
            tpu_metric("ct5lp-hightpu-4t", false).as_deref(),
            Some("TPU_LITE_PODSLICE_V5")
        );
        assert_eq!(tpu_metric("ct6e-standard-4t", false), None);
    }

    #[test]
    fn units_count_vcpus_gpus_and_tpu_chips_per_node() {
        let demand = Demand {
            region: "us-central1".into(),
            zones: vec!["us-central1-a".into()],
            zone_count: 1,
            machine_types: vec!["n1-standard-8".into()],
            accelerators: vec![("nvidia-tesla-t4".into(), 2)],
            spot: true,
            nodes: (1, 4),
            ..Demand::default()
        };
        let u = units(&demand, 8);
        assert_eq!(u["PREEMPTIBLE_CPUS"].0, 8.0);
        assert_eq!(u["PREEMPTIBLE_CPUS"].1, 32.0);
        assert_eq!(
            (
                u["PREEMPTIBLE_NVIDIA_T4_GPUS"].0,
                u["PREEMPTIBLE_NVIDIA_T4_GPUS"].1
            ),
            (2.0, 8.0)
        );
        // A g2 carries its L4s; an accelerator list is not added twice.
        let g2 = Demand {
            machine_types: vec!["g2-standard-24".into()],
            accelerators: vec![("nvidia-l4".into(), 2)],
            spot: false,
            nodes: (2, 2),
            ..demand.clone()
        };
        let u = units(&g2, 24);
        assert_eq!(u["NVIDIA_L4_GPUS"].1, 4.0);
        assert_eq!(u["CPUS"].1, 48.0);
        let tpu = Demand {
            machine_types: vec!["ct5lp-hightpu-4t".into()],
            accelerators: Vec::new(),
            tpu: Some("v5litepod-16".into()),
            spot: false,
            nodes: (4, 4),
            ..demand
        };
        let u = units(&tpu, 112);
        assert_eq!(u.len(), 1, "a TPU VM's host CPUs are not a quota: {u:?}");
        assert_eq!(u["TPU_LITE_PODSLICE_V5"].1, 16.0);
    }
}
