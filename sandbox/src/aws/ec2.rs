//! EC2 (the `ec2` query protocol: form-encoded `Action=…&Version=2016-11-15`, XML
//! answers): the protocol's answers, errors, filters and paging, which `vpc.rs` uses too,
//! and what capacity planning reads —
//! `DescribeInstanceTypeOfferings` (by region, Availability Zone or zone id, with the
//! `instance-type` and `location` filters and paging), `DescribeInstanceTypes` (vCPUs,
//! memory and GPUs of the instance types `instances.rs` knows, the shapes EKS nodes get
//! too, so a node's capacity and its type's description agree) and
//! `DescribeAvailabilityZones`. VPC networking (VPCs, subnets, gateways, addresses, NAT
//! gateways, route tables, tags) lives in `vpc.rs`, above this file; `aws/mod.rs`
//! dispatches a request to one or the other. The offering table is a snapshot of
//! us-east-1 (a–f), us-west-2 (a–d) and eu-west-1 (a–c): general-purpose families in
//! every zone, GPU families in some (g5 not in us-east-1e, us-west-2d or eu-west-1c; p4d
//! in a few); any other region gets zones a–c with the general-purpose families and g4dn.
//!
//! This file also owns the Auto Scaling launch failure of an EKS managed node group when
//! every zone of its subnets (as EKS finds them in `vpc.rs`) is out of its instance types
//! (`InsufficientInstanceCapacity`), worded as EKS reports it in a health issue.

use std::collections::BTreeMap;

use super::instances::{instance_gpus, instance_shape};
use super::query::{list, param};
use super::xml::Element;
use super::{AwsError, AwsResponse};
use crate::capacity::{glob, AwsCapacity};

const XMLNS: &str = "http://ec2.amazonaws.com/doc/2016-11-15/";

/// The sizes of each instance family the tables offer.
const FAMILIES: &[(&str, &[&str])] = &[
    (
        "t3",
        &["micro", "small", "medium", "large", "xlarge", "2xlarge"],
    ),
    (
        "m5",
        &[
            "large", "xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge", "24xlarge",
        ],
    ),
    (
        "c5",
        &[
            "large", "xlarge", "2xlarge", "4xlarge", "9xlarge", "12xlarge", "18xlarge", "24xlarge",
        ],
    ),
    (
        "r5",
        &[
            "large", "xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge", "24xlarge",
        ],
    ),
    (
        "m6i",
        &[
            "large", "xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge", "24xlarge",
            "32xlarge",
        ],
    ),
    (
        "c6i",
        &[
            "large", "xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge", "24xlarge",
            "32xlarge",
        ],
    ),
    (
        "r6i",
        &[
            "large", "xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge", "24xlarge",
            "32xlarge",
        ],
    ),
    (
        "g4dn",
        &[
            "xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge", "metal",
        ],
    ),
    (
        "g5",
        &[
            "xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge", "24xlarge",
            "48xlarge",
        ],
    ),
    (
        "g6",
        &[
            "xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge", "24xlarge",
            "48xlarge",
        ],
    ),
    (
        "g6e",
        &[
            "xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge", "24xlarge",
            "48xlarge",
        ],
    ),
    ("p3", &["2xlarge", "8xlarge", "16xlarge"]),
    ("p4d", &["24xlarge"]),
    ("p5", &["48xlarge"]),
];

/// A region: its zones (name suffix and zone id) and, per family, the suffixes of the
/// zones offering it.
struct Region {
    name: &'static str,
    zones: &'static [(&'static str, &'static str)],
    offerings: &'static [(&'static str, &'static str)],
}

const REGIONS: &[Region] = &[
    Region {
        name: "us-east-1",
        zones: &[
            ("a", "use1-az1"),
            ("b", "use1-az2"),
            ("c", "use1-az4"),
            ("d", "use1-az6"),
            ("e", "use1-az3"),
            ("f", "use1-az5"),
        ],
        offerings: &[
            ("t3", "abcdef"),
            ("m5", "abcdef"),
            ("c5", "abcdef"),
            ("r5", "abcdef"),
            ("m6i", "abcdf"),
            ("c6i", "abcdf"),
            ("r6i", "abcdf"),
            ("g4dn", "abcdf"),
            ("g5", "abcdf"),
            ("g6", "abcd"),
            ("g6e", "acd"),
            ("p3", "abcdf"),
            ("p4d", "ac"),
            ("p5", "a"),
        ],
    },
    Region {
        name: "us-west-2",
        zones: &[
            ("a", "usw2-az2"),
            ("b", "usw2-az1"),
            ("c", "usw2-az3"),
            ("d", "usw2-az4"),
        ],
        offerings: &[
            ("t3", "abcd"),
            ("m5", "abcd"),
            ("c5", "abcd"),
            ("r5", "abcd"),
            ("m6i", "abcd"),
            ("c6i", "abcd"),
            ("r6i", "abcd"),
            ("g4dn", "abcd"),
            ("g5", "abc"),
            ("g6", "abd"),
            ("g6e", "ab"),
            ("p3", "abc"),
            ("p4d", "ab"),
            ("p5", "b"),
        ],
    },
    Region {
        name: "eu-west-1",
        zones: &[("a", "euw1-az2"), ("b", "euw1-az3"), ("c", "euw1-az1")],
        offerings: &[
            ("t3", "abc"),
            ("m5", "abc"),
            ("c5", "abc"),
            ("r5", "abc"),
            ("m6i", "abc"),
            ("c6i", "abc"),
            ("r6i", "abc"),
            ("g4dn", "abc"),
            ("g5", "ab"),
            ("g6", "ab"),
            ("p3", "abc"),
            ("p4d", "c"),
        ],
    },
];

/// Any other region: zones a–c, the general-purpose families and g4dn in each.
const FALLBACK_OFFERINGS: &[(&str, &str)] = &[
    ("t3", "abc"),
    ("m5", "abc"),
    ("c5", "abc"),
    ("r5", "abc"),
    ("m6i", "abc"),
    ("c6i", "abc"),
    ("r6i", "abc"),
    ("g4dn", "abc"),
];

/// The zones of `region`: (name, zone id), in order.
pub(crate) fn zones(region: &str) -> Vec<(String, String)> {
    match REGIONS.iter().find(|r| r.name == region) {
        Some(r) => r
            .zones
            .iter()
            .map(|(s, id)| (format!("{region}{s}"), (*id).to_string()))
            .collect(),
        None => {
            // Zone ids are `<short region>-az<n>`; `us-east-2` → `use2`.
            let short: String = region
                .split('-')
                .enumerate()
                .map(|(i, p)| {
                    if i == 0 {
                        p.to_string()
                    } else {
                        p.chars().take(1).collect()
                    }
                })
                .collect();
            ["a", "b", "c"]
                .iter()
                .enumerate()
                .map(|(i, s)| (format!("{region}{s}"), format!("{short}-az{}", i + 1)))
                .collect()
        }
    }
}

/// Every (zone, instance type) `region` offers, zones in order.
fn offerings(region: &str) -> Vec<(String, String)> {
    let table = REGIONS
        .iter()
        .find(|r| r.name == region)
        .map_or(FALLBACK_OFFERINGS, |r| r.offerings);
    let mut out = Vec::new();
    for (zone, _) in zones(region) {
        let suffix = zone.trim_start_matches(region);
        for (family, in_zones) in table {
            if !in_zones.contains(suffix) {
                continue;
            }
            let sizes = FAMILIES
                .iter()
                .find(|(f, _)| f == family)
                .map_or(&[][..], |(_, s)| *s);
            for size in sizes {
                out.push((zone.clone(), format!("{family}.{size}")));
            }
        }
    }
    out
}

/// Whether `zone` of `region` offers `instance_type`.
pub(crate) fn offered(region: &str, zone: &str, instance_type: &str) -> bool {
    offerings(region)
        .iter()
        .any(|(z, t)| z == zone && t == instance_type)
}

/// Why an Auto Scaling group of `instance_types` over `subnets` cannot launch its first
/// instance, as the message of EKS's `AsgInstanceLaunchFailures` health issue: every
/// zone of its subnets is out of every one of its instance types. `None` when a zone
/// has capacity or no instance is wanted.
pub(crate) fn launch_failure(
    capacity: &AwsCapacity,
    region: &str,
    instance_types: &[String],
    zones: &[String],
    capacity_type: &str,
    desired: i64,
) -> Option<String> {
    if desired <= 0 || instance_types.is_empty() {
        return None;
    }
    let out = |zone: &str, t: &str| capacity.stocked_out(zone, t, capacity_type);
    if !zones
        .iter()
        .all(|z| instance_types.iter().all(|t| out(z, t)))
    {
        return None;
    }
    if capacity_type == "SPOT" {
        return Some(
            "Could not launch Spot Instances. InsufficientInstanceCapacity - There is no Spot capacity available that matches your request. Launching EC2 instance failed."
                .to_string(),
        );
    }
    let t = instance_types.first()?;
    let zone = zones.first().cloned().unwrap_or_default();
    let elsewhere: Vec<String> = self::zones(region)
        .into_iter()
        .map(|(z, _)| z)
        .filter(|z| offered(region, z, t) && !out(z, t))
        .collect();
    let choose = if elsewhere.is_empty() {
        String::new()
    } else {
        format!(
            " You can currently get {t} capacity by not specifying an Availability Zone in your request or choosing {}.",
            elsewhere.join(", ")
        )
    };
    Some(format!(
        "Could not launch On-Demand Instances. InsufficientInstanceCapacity - We currently do not have sufficient {t} capacity in the Availability Zone you requested ({zone}). Our system will be working on provisioning additional capacity.{choose} Launching EC2 instance failed."
    ))
}

// ---------------------------------------------------------------- the API

pub(super) fn invalid(message: impl Into<String>) -> AwsError {
    AwsError::new(400, "InvalidParameterValue", message)
}

/// `Filter.N.Name` / `Filter.N.Value.M`, in index order.
pub(super) fn filters(params: &[(String, String)]) -> Vec<(String, Vec<String>)> {
    let mut by_index: BTreeMap<u32, (String, BTreeMap<u32, String>)> = BTreeMap::new();
    for (k, v) in params {
        let Some(rest) = k.strip_prefix("Filter.") else {
            continue;
        };
        let Some((n, field)) = rest.split_once('.') else {
            continue;
        };
        let Ok(n) = n.parse::<u32>() else { continue };
        let entry = by_index.entry(n).or_default();
        if field == "Name" {
            entry.0 = v.clone();
        } else if let Some(m) = field
            .strip_prefix("Value.")
            .and_then(|m| m.parse::<u32>().ok())
        {
            entry.1.insert(m, v.clone());
        }
    }
    by_index
        .into_values()
        .map(|(name, values)| (name, values.into_values().collect()))
        .collect()
}

pub(super) fn respond(action: &str, mut children: Vec<Element>) -> AwsResponse {
    let mut root = Element::new(&format!("{action}Response")).attr("xmlns", XMLNS);
    root.push_leaf("requestId", crate::common::ids::new_uid());
    for child in children.drain(..) {
        root.push(child);
    }
    AwsResponse::xml(200, &root.render())
}

fn describe_instance_type_offerings(
    region: &str,
    params: &[(String, String)],
) -> Result<AwsResponse, AwsError> {
    let location_type = param(params, "LocationType").unwrap_or("region");
    if ![
        "region",
        "availability-zone",
        "availability-zone-id",
        "outpost",
    ]
    .contains(&location_type)
    {
        return Err(invalid(format!(
            "The value '{location_type}' is not valid for LocationType; use region, availability-zone, availability-zone-id or outpost"
        )));
    }
    let ids: BTreeMap<String, String> = zones(region).into_iter().collect();
    let mut rows: Vec<(String, String)> = match location_type {
        "region" => {
            let mut types: Vec<String> = offerings(region).into_iter().map(|(_, t)| t).collect();
            types.sort();
            types.dedup();
            types.into_iter().map(|t| (region.to_string(), t)).collect()
        }
        "availability-zone" => offerings(region),
        "availability-zone-id" => offerings(region)
            .into_iter()
            .map(|(z, t)| (ids.get(&z).cloned().unwrap_or(z), t))
            .collect(),
        // The sandbox has no Outposts.
        _ => Vec::new(),
    };
    for (name, values) in filters(params) {
        match name.as_str() {
            "location" => rows.retain(|(l, _)| values.iter().any(|v| glob(v, l))),
            "instance-type" => rows.retain(|(_, t)| values.iter().any(|v| glob(v, t))),
            other => return Err(invalid(format!("The filter '{other}' is invalid"))),
        }
    }
    let (page, next) = paginate(params, rows, 5, 1000)?;
    let mut set = Element::new("instanceTypeOfferingSet");
    for (location, t) in page {
        set.push(
            Element::new("item")
                .with(Element::leaf("instanceType", t))
                .with(Element::leaf("locationType", location_type))
                .with(Element::leaf("location", location)),
        );
    }
    let mut children = vec![set];
    if let Some(next) = next {
        children.push(Element::leaf("nextToken", next));
    }
    Ok(respond("DescribeInstanceTypeOfferings", children))
}

/// One page of `rows` by `MaxResults` (`min`..=`max`) and `NextToken` (an offset).
pub(super) fn paginate<T>(
    params: &[(String, String)],
    rows: Vec<T>,
    min: usize,
    max: usize,
) -> Result<(Vec<T>, Option<String>), AwsError> {
    let start = match param(params, "NextToken").filter(|t| !t.is_empty()) {
        None => 0,
        Some(t) => t.parse::<usize>().map_err(|_| {
            AwsError::new(
                400,
                "InvalidPaginationToken",
                format!("The pagination token '{t}' is invalid."),
            )
        })?,
    };
    let size = match param(params, "MaxResults") {
        None => usize::MAX,
        Some(m) => m
            .parse::<usize>()
            .ok()
            .filter(|m| (min..=max).contains(m))
            .ok_or_else(|| invalid(format!("Value ( {m} ) for parameter MaxResults is invalid. Parameter must be between {min} and {max}.")))?,
    };
    let total = rows.len();
    let page: Vec<T> = rows.into_iter().skip(start).take(size).collect();
    let next = (size != usize::MAX && start + size < total).then(|| (start + size).to_string());
    Ok((page, next))
}

fn describe_availability_zones(
    region: &str,
    params: &[(String, String)],
) -> Result<AwsResponse, AwsError> {
    let mut rows = zones(region);
    let names = list(params, "ZoneName");
    if !names.is_empty() {
        if let Some(bad) = names.iter().find(|n| !rows.iter().any(|(z, _)| z == *n)) {
            return Err(invalid(format!("The zone '{bad}' does not exist.")));
        }
        rows.retain(|(z, _)| names.contains(z));
    }
    let ids = list(params, "ZoneId");
    if !ids.is_empty() {
        rows.retain(|(_, id)| ids.contains(id));
    }
    for (name, values) in filters(params) {
        let admits = |v: &str| values.iter().any(|p| glob(p, v));
        match name.as_str() {
            "zone-name" => rows.retain(|(z, _)| admits(z)),
            "zone-id" => rows.retain(|(_, id)| admits(id)),
            "region-name" | "group-name" => rows.retain(|_| admits(region)),
            "state" => rows.retain(|_| admits("available")),
            "zone-type" => rows.retain(|_| admits("availability-zone")),
            "opt-in-status" => rows.retain(|_| admits("opt-in-not-required")),
            other => return Err(invalid(format!("The filter '{other}' is invalid"))),
        }
    }
    let mut info = Element::new("availabilityZoneInfo");
    for (zone, id) in rows {
        info.push(
            Element::new("item")
                .with(Element::leaf("zoneName", zone))
                .with(Element::leaf("zoneState", "available"))
                .with(Element::leaf("regionName", region))
                .with(Element::new("messageSet"))
                .with(Element::leaf("zoneId", id))
                .with(Element::leaf("optInStatus", "opt-in-not-required"))
                .with(Element::leaf("groupName", region))
                .with(Element::leaf("networkBorderGroup", region))
                .with(Element::leaf("zoneType", "availability-zone")),
        );
    }
    Ok(respond("DescribeAvailabilityZones", vec![info]))
}

/// Every instance type the tables know, family by family.
fn known_types() -> Vec<String> {
    FAMILIES
        .iter()
        .flat_map(|(family, sizes)| sizes.iter().map(move |size| format!("{family}.{size}")))
        .collect()
}

/// The GPU of an instance family: (name, manufacturer, memory of one GPU in MiB), as
/// `DescribeInstanceTypes` names them.
fn gpu_model(family: &str) -> Option<(&'static str, &'static str, i64)> {
    const GIB: i64 = 1024;
    Some(match family {
        "g4dn" => ("T4", "NVIDIA", 16 * GIB),
        "g5" => ("A10G", "NVIDIA", 24 * GIB),
        "g6" => ("L4", "NVIDIA", 24 * GIB),
        "g6e" => ("L40S", "NVIDIA", 48 * GIB),
        "p3" => ("V100", "NVIDIA", 16 * GIB),
        "p4d" => ("A100", "NVIDIA", 40 * GIB),
        "p5" => ("H100", "NVIDIA", 80 * GIB),
        _ => return None,
    })
}

/// One `instanceTypeSet` item: vCPUs, memory and, for GPU types, the GPUs.
fn instance_type_info(instance_type: &str) -> Element {
    let (family, size) = instance_type.split_once('.').unwrap_or((instance_type, ""));
    let (vcpus, memory_mib) = instance_shape(instance_type);
    let mut item = Element::new("item")
        .with(Element::leaf("instanceType", instance_type))
        .with(Element::leaf("bareMetal", (size == "metal").to_string()))
        .with(Element::new("vCpuInfo").with(Element::leaf("defaultVCpus", vcpus.to_string())))
        .with(Element::new("memoryInfo").with(Element::leaf("sizeInMiB", memory_mib.to_string())));
    if let (Some(count), Some((name, manufacturer, memory))) =
        (instance_gpus(instance_type), gpu_model(family))
    {
        let gpu = Element::new("item")
            .with(Element::leaf("name", name))
            .with(Element::leaf("manufacturer", manufacturer))
            .with(Element::leaf("count", count.to_string()))
            .with(Element::new("memoryInfo").with(Element::leaf("sizeInMiB", memory.to_string())));
        item.push(
            Element::new("gpuInfo")
                .with(Element::new("gpus").with(gpu))
                .with(Element::leaf(
                    "totalGpuMemoryInMiB",
                    (count * memory).to_string(),
                )),
        );
    }
    item
}

fn describe_instance_types(
    region: &str,
    params: &[(String, String)],
) -> Result<AwsResponse, AwsError> {
    // Without IncludeUnsupportedInRegion, EC2 knows only the types the region offers.
    let mut universe: Vec<String> = if param(params, "IncludeUnsupportedInRegion") == Some("true") {
        known_types()
    } else {
        offerings(region).into_iter().map(|(_, t)| t).collect()
    };
    universe.sort();
    universe.dedup();
    let asked = list(params, "InstanceType");
    let mut rows = if asked.is_empty() {
        universe
    } else {
        let missing: Vec<&str> = asked
            .iter()
            .filter(|t| !universe.contains(t))
            .map(String::as_str)
            .collect();
        if !missing.is_empty() {
            return Err(AwsError::new(
                400,
                "InvalidInstanceType",
                format!(
                    "The following supplied instance types do not exist: [{}]",
                    missing.join(", ")
                ),
            ));
        }
        let mut rows: Vec<String> = Vec::new();
        for t in asked {
            if !rows.contains(&t) {
                rows.push(t);
            }
        }
        rows
    };
    for (name, values) in filters(params) {
        match name.as_str() {
            "instance-type" => rows.retain(|t| values.iter().any(|v| glob(v, t))),
            other => return Err(invalid(format!("The filter '{other}' is invalid"))),
        }
    }
    let (page, next) = paginate(params, rows, 5, 100)?;
    let mut set = Element::new("instanceTypeSet");
    for t in page {
        set.push(instance_type_info(&t));
    }
    let mut children = vec![set];
    if let Some(next) = next {
        children.push(Element::leaf("nextToken", next));
    }
    Ok(respond("DescribeInstanceTypes", children))
}

/// Answers EC2's capacity reads (instance type offerings, instance types, zones);
/// `None` for any other action, which VPC networking (`vpc.rs`) answers.
pub(crate) fn capacity_read(
    action: &str,
    region: &str,
    params: &[(String, String)],
) -> Option<Result<AwsResponse, AwsError>> {
    Some(match action {
        "DescribeInstanceTypeOfferings" => describe_instance_type_offerings(region, params),
        "DescribeInstanceTypes" => describe_instance_types(region, params),
        "DescribeAvailabilityZones" => describe_availability_zones(region, params),
        _ => return None,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::aws::vpc::Network;
    use crate::aws::{AwsCtx, AwsRequest};
    use axum::http::Method;
    use std::collections::BTreeSet;

    fn call(region: &str, body: &str) -> Result<Element, AwsError> {
        call_with(&AwsCapacity::default(), region, body)
    }

    fn call_with(capacity: &AwsCapacity, region: &str, body: &str) -> Result<Element, AwsError> {
        call_in(&mut Network::default(), capacity, region, body)
    }

    /// One EC2 call against `network` at the real time, durations unscaled.
    pub(crate) fn call_in(
        network: &mut Network,
        capacity: &AwsCapacity,
        region: &str,
        body: &str,
    ) -> Result<Element, AwsError> {
        call_at(network, capacity, region, body, chrono::Utc::now())
    }

    /// One EC2 call against `network` at `now` (settled first, as the server does).
    pub(crate) fn call_at(
        network: &mut Network,
        capacity: &AwsCapacity,
        region: &str,
        body: &str,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<Element, AwsError> {
        network.settle(now);
        let faults = crate::faults::Faults::default();
        let ctx = AwsCtx {
            now,
            scale: 1.0,
            faults: &faults,
        };
        let mut req = AwsRequest::new(
            Method::POST,
            "/",
            &[(
                "content-type",
                "application/x-www-form-urlencoded; charset=utf-8",
            )],
            body.as_bytes(),
        );
        req.region = region.to_string();
        let resp = crate::aws::ec2_request(&req, &ctx, network, capacity, &BTreeSet::new())?;
        assert_eq!(resp.status, 200);
        let xml = Element::parse(&resp.body).expect("well-formed XML");
        Ok(xml)
    }

    fn offered_in(xml: &Element) -> Vec<(String, String)> {
        xml.find("instanceTypeOfferingSet")
            .into_iter()
            .flat_map(|s| s.all("item"))
            .map(|i| {
                (
                    i.text_of("location").unwrap_or_default().to_string(),
                    i.text_of("instanceType").unwrap_or_default().to_string(),
                )
            })
            .collect()
    }

    #[test]
    fn g5_and_p4d_are_offered_in_some_zones_only() {
        let xml = call(
            "us-east-1",
            "Action=DescribeInstanceTypeOfferings&Version=2016-11-15&LocationType=availability-zone&Filter.1.Name=instance-type&Filter.1.Value.1=g5.xlarge",
        )
        .expect("answered");
        assert_eq!(xml.name, "DescribeInstanceTypeOfferingsResponse");
        let zones: Vec<String> = offered_in(&xml).into_iter().map(|(z, _)| z).collect();
        assert_eq!(
            zones,
            [
                "us-east-1a",
                "us-east-1b",
                "us-east-1c",
                "us-east-1d",
                "us-east-1f"
            ]
        );
        let p4d = call(
            "us-west-2",
            "Action=DescribeInstanceTypeOfferings&LocationType=availability-zone&Filter.1.Name=instance-type&Filter.1.Value.1=p4d.*",
        )
        .expect("answered");
        assert_eq!(offered_in(&p4d).len(), 2);
        let one_zone = call(
            "eu-west-1",
            "Action=DescribeInstanceTypeOfferings&LocationType=availability-zone&Filter.1.Name=location&Filter.1.Value.1=eu-west-1c&Filter.2.Name=instance-type&Filter.2.Value.1=g5.*&Filter.2.Value.2=g4dn.xlarge",
        )
        .expect("answered");
        assert_eq!(
            offered_in(&one_zone),
            [("eu-west-1c".to_string(), "g4dn.xlarge".to_string())]
        );
        let by_region = call("us-east-1", "Action=DescribeInstanceTypeOfferings&Filter.1.Name=instance-type&Filter.1.Value.1=p5.48xlarge")
            .expect("answered");
        assert_eq!(
            offered_in(&by_region),
            [("us-east-1".to_string(), "p5.48xlarge".to_string())]
        );
        let ids = call("us-east-1", "Action=DescribeInstanceTypeOfferings&LocationType=availability-zone-id&Filter.1.Name=instance-type&Filter.1.Value.1=p5.48xlarge")
            .expect("answered");
        assert_eq!(
            offered_in(&ids),
            [("use1-az1".to_string(), "p5.48xlarge".to_string())]
        );
    }

    #[test]
    fn offerings_page_and_refuse_unknown_filters() {
        let page = call(
            "us-east-1",
            "Action=DescribeInstanceTypeOfferings&LocationType=availability-zone&MaxResults=5",
        )
        .expect("answered");
        assert_eq!(offered_in(&page).len(), 5);
        assert_eq!(page.text_of("nextToken"), Some("5"));
        let next = call("us-east-1", "Action=DescribeInstanceTypeOfferings&LocationType=availability-zone&MaxResults=5&NextToken=5")
            .expect("answered");
        assert_eq!(next.text_of("nextToken"), Some("10"));
        let err = call(
            "us-east-1",
            "Action=DescribeInstanceTypeOfferings&Filter.1.Name=vcpus&Filter.1.Value.1=4",
        )
        .expect_err("unknown filter");
        assert_eq!(err.code, "InvalidParameterValue");
        assert!(call(
            "us-east-1",
            "Action=DescribeInstanceTypeOfferings&MaxResults=1"
        )
        .is_err());
        assert_eq!(
            call("us-east-1", "Action=RunInstances")
                .expect_err("not served")
                .code,
            "InvalidAction"
        );
    }

    #[test]
    fn availability_zones_list_the_signed_region() {
        let xml = call(
            "us-west-2",
            "Action=DescribeAvailabilityZones&Version=2016-11-15",
        )
        .expect("answered");
        let zones: Vec<&str> = xml
            .find("availabilityZoneInfo")
            .into_iter()
            .flat_map(|i| i.all("item"))
            .filter_map(|i| i.text_of("zoneName"))
            .collect();
        assert_eq!(
            zones,
            ["us-west-2a", "us-west-2b", "us-west-2c", "us-west-2d"]
        );
        let one = call(
            "us-east-1",
            "Action=DescribeAvailabilityZones&ZoneName.1=us-east-1e",
        )
        .expect("answered");
        let item = one
            .find("availabilityZoneInfo")
            .and_then(|i| i.find("item"))
            .cloned()
            .unwrap_or_default();
        assert_eq!(item.text_of("zoneId"), Some("use1-az3"));
        assert_eq!(item.text_of("zoneState"), Some("available"));
        assert!(call(
            "us-east-1",
            "Action=DescribeAvailabilityZones&ZoneName.1=us-east-1z"
        )
        .is_err());
        let other = zones_of("us-east-2");
        assert_eq!(
            other,
            [
                ("us-east-2a".to_string(), "use2-az1".to_string()),
                ("us-east-2b".to_string(), "use2-az2".to_string()),
                ("us-east-2c".to_string(), "use2-az3".to_string())
            ]
        );
    }

    fn zones_of(region: &str) -> Vec<(String, String)> {
        zones(region)
    }

    #[test]
    fn a_node_group_fails_to_launch_only_when_every_zone_is_out() {
        let capacity = crate::capacity::CapacitySpec::from_json(serde_json::json!({"aws": {
            "stockouts": [{"zone": "us-east-1a", "instanceType": "g5.xlarge"}],
            "subnets": {"subnet-a": "us-east-1a", "subnet-b": "us-east-1a", "subnet-c": "us-east-1b"},
        }}), &crate::quota_names())
        .expect("valid")
        .aws;
        let mut network = Network::default();
        network.touch("us-east-1", &capacity);
        let g5 = vec!["g5.xlarge".to_string()];
        let one = vec!["subnet-a".to_string()];
        let fails = |types: &[String], subnets: &[String], capacity_type: &str, desired: i64| {
            let zones = network.subnet_zones("us-east-1", subnets).ok()?;
            launch_failure(
                &capacity,
                "us-east-1",
                types,
                &zones,
                capacity_type,
                desired,
            )
        };
        let message = fails(&g5, &one, "ON_DEMAND", 1).expect("stocked out");
        assert_eq!(
            message,
            "Could not launch On-Demand Instances. InsufficientInstanceCapacity - We currently do not have sufficient g5.xlarge capacity in the Availability Zone you requested (us-east-1a). Our system will be working on provisioning additional capacity. You can currently get g5.xlarge capacity by not specifying an Availability Zone in your request or choosing us-east-1b, us-east-1c, us-east-1d, us-east-1f. Launching EC2 instance failed."
        );
        let two = vec!["subnet-a".to_string(), "subnet-c".to_string()];
        assert_eq!(
            fails(&g5, &two, "ON_DEMAND", 1),
            None,
            "us-east-1b has capacity"
        );
        let both_in_a = vec!["subnet-a".to_string(), "subnet-b".to_string()];
        assert_eq!(
            network.subnet_zones("us-east-1", &both_in_a),
            Ok(vec!["us-east-1a".to_string(), "us-east-1a".to_string()])
        );
        assert!(fails(&g5, &both_in_a, "SPOT", 2).is_some_and(|m| m.contains("no Spot capacity")));
        let mixed = vec!["g5.xlarge".to_string(), "g5.2xlarge".to_string()];
        assert_eq!(
            fails(&mixed, &one, "ON_DEMAND", 1),
            None,
            "another type fits"
        );
        assert_eq!(fails(&g5, &one, "ON_DEMAND", 0), None, "nothing to launch");
        let unknown = vec![
            "subnet-a".to_string(),
            "subnet-0ffffffffffffffff".to_string(),
        ];
        assert_eq!(
            network.subnet_zones("us-east-1", &unknown),
            Err(vec!["subnet-0ffffffffffffffff".to_string()])
        );
        assert_eq!(
            fails(&g5, &unknown, "ON_DEMAND", 1),
            None,
            "launches nothing"
        );
    }

    pub(crate) fn items<'a>(xml: &'a Element, set: &str) -> Vec<&'a Element> {
        xml.find(set)
            .into_iter()
            .flat_map(|s| s.all("item"))
            .collect()
    }

    #[test]
    fn instance_types_describe_the_vcpus_memory_and_gpus_nodes_get() {
        let xml = call(
            "us-east-1",
            "Action=DescribeInstanceTypes&Version=2016-11-15&InstanceType.1=g5.xlarge&InstanceType.2=m5.large",
        )
        .expect("answered");
        assert_eq!(xml.name, "DescribeInstanceTypesResponse");
        let got = items(&xml, "instanceTypeSet");
        assert_eq!(got.len(), 2);
        let g5 = got[0];
        assert_eq!(g5.text_of("instanceType"), Some("g5.xlarge"));
        let vcpus = |item: &Element| {
            item.find("vCpuInfo")
                .and_then(|v| v.text_of("defaultVCpus"))
                .map(str::to_string)
        };
        // The same shape an EKS node of the type reports.
        assert_eq!(vcpus(g5), Some(instance_shape("g5.xlarge").0.to_string()));
        assert_eq!(vcpus(g5).as_deref(), Some("4"));
        assert_eq!(
            g5.find("memoryInfo").and_then(|m| m.text_of("sizeInMiB")),
            Some("16384")
        );
        let gpu = g5
            .find("gpuInfo")
            .and_then(|g| g.find("gpus"))
            .and_then(|g| g.find("item"))
            .cloned()
            .unwrap_or_default();
        assert_eq!(gpu.text_of("name"), Some("A10G"));
        assert_eq!(gpu.text_of("manufacturer"), Some("NVIDIA"));
        assert_eq!(gpu.text_of("count"), Some("1"));
        let m5 = got[1];
        assert_eq!(vcpus(m5).as_deref(), Some("2"));
        assert!(m5.find("gpuInfo").is_none(), "no GPUs on m5");

        let p4d = call(
            "us-west-2",
            "Action=DescribeInstanceTypes&Filter.1.Name=instance-type&Filter.1.Value.1=p4d.*",
        )
        .expect("answered");
        let p4d: Vec<&Element> = items(&p4d, "instanceTypeSet");
        assert_eq!(p4d.len(), 1);
        assert_eq!(vcpus(p4d[0]).as_deref(), Some("96"));

        let page =
            call("us-east-1", "Action=DescribeInstanceTypes&MaxResults=5").expect("answered");
        assert_eq!(items(&page, "instanceTypeSet").len(), 5);
        assert_eq!(page.text_of("nextToken"), Some("5"));
    }

    #[test]
    fn unknown_instance_types_are_refused_as_ec2_refuses_them() {
        let err = call(
            "us-east-1",
            "Action=DescribeInstanceTypes&InstanceType.1=g5.xlarge&InstanceType.2=g5.xlarg",
        )
        .expect_err("no such type");
        assert_eq!(
            (err.status, err.code.as_str()),
            (400, "InvalidInstanceType")
        );
        assert_eq!(
            err.message,
            "The following supplied instance types do not exist: [g5.xlarg]"
        );
        // p5 is not offered in eu-west-1: unknown there unless asked to include it.
        assert!(call(
            "eu-west-1",
            "Action=DescribeInstanceTypes&InstanceType.1=p5.48xlarge"
        )
        .is_err());
        let anywhere = call(
            "eu-west-1",
            "Action=DescribeInstanceTypes&InstanceType.1=p5.48xlarge&IncludeUnsupportedInRegion=true",
        )
        .expect("answered");
        assert_eq!(items(&anywhere, "instanceTypeSet").len(), 1);
        let err = call(
            "us-east-1",
            "Action=DescribeInstanceTypes&Filter.1.Name=vcpu-info.default-vcpus&Filter.1.Value.1=4",
        )
        .expect_err("unknown filter");
        assert_eq!(err.code, "InvalidParameterValue");
    }

    /// Where an XML answer strays from a botocore output shape: elements the shape has
    /// no member for (by `locationName`), list items not named as the model names them,
    /// numbers and booleans that are not, strings outside an enum.
    pub(crate) fn botocore_violations(
        model: &serde_json::Value,
        shape: &str,
        el: &Element,
        at: &str,
    ) -> Vec<String> {
        let s = &model["shapes"][shape];
        let mut out = Vec::new();
        match s["type"].as_str().unwrap_or_default() {
            "structure" => {
                let members = s["members"].as_object().cloned().unwrap_or_default();
                for child in &el.children {
                    let found = members.iter().find(|(name, m)| {
                        m["locationName"].as_str().unwrap_or(name.as_str()) == child.name
                    });
                    match found {
                        Some((_, m)) => out.extend(botocore_violations(
                            model,
                            m["shape"].as_str().unwrap_or_default(),
                            child,
                            &format!("{at}.{}", child.name),
                        )),
                        None => out.push(format!("{at}: no member {}", child.name)),
                    }
                }
            }
            "list" => {
                let item = s["member"]["locationName"].as_str().unwrap_or("member");
                for child in &el.children {
                    if child.name != item {
                        out.push(format!("{at}: list item {} is not {item}", child.name));
                    }
                    out.extend(botocore_violations(
                        model,
                        s["member"]["shape"].as_str().unwrap_or_default(),
                        child,
                        &format!("{at}.{item}"),
                    ));
                }
            }
            "integer" | "long" => {
                if el.text.parse::<i64>().is_err() {
                    out.push(format!("{at}: {:?} is not a whole number", el.text));
                }
            }
            "timestamp" => {
                if chrono::DateTime::parse_from_rfc3339(&el.text).is_err() {
                    out.push(format!("{at}: {:?} is not an ISO 8601 time", el.text));
                }
            }
            "boolean" => {
                if el.text != "true" && el.text != "false" {
                    out.push(format!("{at}: {:?} is not a boolean", el.text));
                }
            }
            "string" => {
                if let Some(values) = s["enum"].as_array() {
                    if !values.iter().any(|v| v == el.text.as_str()) {
                        out.push(format!("{at}: {:?} is not one of {values:?}", el.text));
                    }
                }
            }
            other => out.push(format!("{at}: unexpected shape type {other:?} ({shape})")),
        }
        out
    }

    #[test]
    fn instance_types_follow_the_botocore_model() {
        let model = terrain_contracts::botocore("ec2", "2016-11-15");
        let capacity = AwsCapacity::default();
        let cases = [
            (
                "DescribeInstanceTypesResult",
                "Action=DescribeInstanceTypes&InstanceType.1=g5.48xlarge&InstanceType.2=t3.micro&InstanceType.3=g4dn.metal",
            ),
            ("DescribeInstanceTypesResult", "Action=DescribeInstanceTypes&MaxResults=5"),
            (
                "DescribeAvailabilityZonesResult",
                "Action=DescribeAvailabilityZones",
            ),
        ];
        for (shape, body) in cases {
            let mut xml = call_with(&capacity, "us-east-1", body).expect("answered");
            // The envelope's request id is the protocol's, not the operation's.
            xml.children.retain(|c| c.name != "requestId");
            let problems = botocore_violations(&model, shape, &xml, shape);
            assert!(problems.is_empty(), "{body}: {problems:#?}");
        }
    }
}
