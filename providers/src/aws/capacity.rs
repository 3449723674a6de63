//! The AWS side of the capacity preflight (see `crate::capacity`): whether each node
//! group's instance types are offered in the Availability Zones of its subnets
//! (`ec2:DescribeSubnets`, `ec2:DescribeInstanceTypeOfferings`), and whether the stack's
//! node groups together fit the account's EC2 vCPU quotas (`ec2:DescribeInstanceTypes`
//! for the vCPUs, `servicequotas:GetServiceQuota` for the limits).
//!
//! AWS reports no usage next to a vCPU quota, so the whole stack's demand (every node
//! group as planned, unchanged ones included) is compared with the limit, and messages
//! say that instances outside the stack count too. A node group is counted by its first
//! instance type: that is what EKS launches while it has capacity.
//!
//! EC2 (query protocol, XML answers: `ec2` makes the call and reads the document, this
//! file the items it needs) and Service Quotas (JSON 1.1) are called by hand-signed HTTP
//! through `signed`, which owns the credentials, signing, retries and endpoints (`endpoints.ec2`,
//! `endpoints.servicequotas`, `endpoint`, else `AWS_ENDPOINT_URL_EC2`,
//! `AWS_ENDPOINT_URL_SERVICE_QUOTAS`, `AWS_ENDPOINT_URL`, else the public ones): their
//! SDK crates would be large to build for four read calls. Throttling, 5xx answers and
//! broken connections are tried at most twice (and never more than `max_attempts`), as
//! the GCP check does: a check that can be skipped does not hold the plan for a network
//! that is not there.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::json;

use super::ec2::{self, Xml};
use super::signed::{Signed, SERVICE_QUOTAS};
use crate::capacity::{amount, Tally};
use crate::failure::{self, Cloud};
use crate::{Ctx, Demand, Finding, Need, ProviderError};
// Only the tests use these here: they check the JSON errors and public URLs the calls
// get from `signed`.
#[cfg(test)]
use super::signed::{json_error, public_url};
#[cfg(test)]
use serde_json::Value;

/// The call offering findings name.
const OFFERINGS_CALL: &str = "ec2:DescribeInstanceTypeOfferings";

/// Whether the node groups' instance types are offered in their subnets' zones and fit
/// the account's vCPU quotas. Fails, naming the call, when AWS cannot be asked.
pub async fn preflight(ctx: &Ctx, needs: &[Need]) -> Result<Vec<Finding>, ProviderError> {
    // Only what the stack will hold: AWS has no usage figure to subtract what is
    // already running from.
    let mut by_region: BTreeMap<&str, Vec<(&str, &Demand)>> = BTreeMap::new();
    for need in needs {
        for demand in &need.after {
            if demand.region.is_empty() || demand.machine_types.is_empty() {
                continue;
            }
            by_region
                .entry(demand.region.as_str())
                .or_default()
                .push((need.address.as_str(), demand));
        }
    }
    if by_region.is_empty() {
        return Ok(Vec::new());
    }
    let aws = Aws::new(ctx).await?;
    let mut findings = Vec::new();
    for (region, demands) in &by_region {
        let offered = offerings(&aws, region, demands).await?;
        findings.extend(offering_findings(&aws, region, demands, &offered).await?);
        findings.extend(quota_findings(&aws, region, demands, &offered).await?);
    }
    Ok(findings)
}

// ---------------------------------------------------------------- offerings

/// Per instance type, the zones of `region` offering it (every zone, not only the
/// subnets': the messages say where else a type could run).
async fn offerings(
    aws: &Aws,
    region: &str,
    demands: &[(&str, &Demand)],
) -> Result<BTreeMap<String, BTreeSet<String>>, ProviderError> {
    let types: BTreeSet<&str> = demands
        .iter()
        .flat_map(|(_, d)| d.machine_types.iter().map(String::as_str))
        .collect();
    let types: Vec<&str> = types.into_iter().collect();
    let mut offered: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    // A filter takes a limited number of values.
    for chunk in types.chunks(100) {
        let mut params = vec![
            ("LocationType".to_string(), "availability-zone".to_string()),
            ("MaxResults".to_string(), "1000".to_string()),
            ("Filter.1.Name".to_string(), "instance-type".to_string()),
        ];
        for (i, t) in chunk.iter().enumerate() {
            params.push((format!("Filter.1.Value.{}", i + 1), (*t).to_string()));
        }
        for item in aws
            .ec2_items(
                region,
                "DescribeInstanceTypeOfferings",
                &params,
                "instanceTypeOfferingSet",
            )
            .await?
        {
            if let (Some(t), Some(zone)) = (item.text("instanceType"), item.text("location")) {
                offered
                    .entry(t.to_string())
                    .or_default()
                    .insert(zone.to_string());
            }
        }
    }
    Ok(offered)
}

/// The zone of each subnet the demands name, from `ec2:DescribeSubnets`.
async fn subnet_zones(
    aws: &Aws,
    region: &str,
    demands: &[(&str, &Demand)],
) -> Result<BTreeMap<String, String>, ProviderError> {
    // In the order the node groups list them, each once.
    let mut subnets: Vec<&str> = Vec::new();
    for (_, d) in demands {
        for s in &d.subnets {
            if !subnets.contains(&s.as_str()) {
                subnets.push(s);
            }
        }
    }
    let mut zones = BTreeMap::new();
    for chunk in subnets.chunks(200) {
        let params: Vec<(String, String)> = chunk
            .iter()
            .enumerate()
            .map(|(i, s)| (format!("SubnetId.{}", i + 1), (*s).to_string()))
            .collect();
        for item in aws
            .ec2_items(region, "DescribeSubnets", &params, "subnetSet")
            .await?
        {
            if let (Some(s), Some(zone)) = (item.text("subnetId"), item.text("availabilityZone")) {
                zones.insert(s.to_string(), zone.to_string());
            }
        }
    }
    Ok(zones)
}

/// `g5.xlarge is not offered`, `none of g5.xlarge, g6.xlarge is offered`.
fn not_offered(types: &[String]) -> String {
    match types {
        [one] => format!("{one} is not offered"),
        many => format!("none of {} is offered", many.join(", ")),
    }
}

/// `us-east-1e (subnet-1), us-east-1f (subnet-2, subnet-3)`.
fn zones_text(zones: &[(String, Vec<String>)]) -> String {
    zones
        .iter()
        .map(|(zone, subnets)| format!("{zone} ({})", subnets.join(", ")))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Where in `region` the types are offered: `it is offered in us-east-1a, us-east-1b`,
/// or type by type when there are several.
fn offered_elsewhere(
    region: &str,
    types: &[String],
    offered: &BTreeMap<String, BTreeSet<String>>,
) -> String {
    let zones_of = |t: &str| -> Option<String> {
        offered
            .get(t)
            .filter(|z| !z.is_empty())
            .map(|z| z.iter().cloned().collect::<Vec<_>>().join(", "))
    };
    match types {
        [one] => match zones_of(one) {
            Some(zones) => format!("it is offered in {zones}"),
            None => format!("it is not offered anywhere in {region}"),
        },
        many => many
            .iter()
            .map(|t| match zones_of(t) {
                Some(zones) => format!("{t} is offered in {zones}"),
                None => format!("{t} is not offered anywhere in {region}"),
            })
            .collect::<Vec<_>>()
            .join("; "),
    }
}

/// An error for each node group whose subnets' zones offer none of its instance types
/// (or, without subnets, whose region offers none), and a warning for each with some
/// zones its nodes cannot launch in.
async fn offering_findings(
    aws: &Aws,
    region: &str,
    demands: &[(&str, &Demand)],
    offered: &BTreeMap<String, BTreeSet<String>>,
) -> Result<Vec<Finding>, ProviderError> {
    let zone_of = if demands.iter().any(|(_, d)| !d.subnets.is_empty()) {
        subnet_zones(aws, region, demands).await?
    } else {
        BTreeMap::new()
    };
    let offers = |zone: &str, types: &[String]| {
        types
            .iter()
            .any(|t| offered.get(t).is_some_and(|z| z.contains(zone)))
    };
    let mut findings = Vec::new();
    for (address, d) in demands {
        let types = &d.machine_types;
        if d.subnets.is_empty() {
            if !types
                .iter()
                .any(|t| offered.get(t).is_some_and(|z| !z.is_empty()))
            {
                findings.push(Finding::error(
                    vec![address.to_string()],
                    format!(
                        "{address}: {} in {region} ({OFFERINGS_CALL})",
                        not_offered(types)
                    ),
                ));
            }
            continue;
        }
        // The zones the group's subnets are in, in subnet order, with their subnets.
        let mut zones: Vec<(String, Vec<String>)> = Vec::new();
        for s in &d.subnets {
            // A subnet EC2 did not describe has no zone to check.
            let Some(zone) = zone_of.get(s) else { continue };
            match zones.iter_mut().find(|(z, _)| z == zone) {
                Some((_, subnets)) => subnets.push(s.clone()),
                None => zones.push((zone.clone(), vec![s.clone()])),
            }
        }
        let (lacking, fine): (Vec<_>, Vec<_>) =
            zones.into_iter().partition(|(z, _)| !offers(z, types));
        if lacking.is_empty() {
            continue;
        }
        if fine.is_empty() {
            let whose = match (lacking.len(), d.subnets.len()) {
                (1, 1) => "the zone of its subnet",
                (1, _) => "the zone of its subnets",
                _ => "the zones of its subnets",
            };
            findings.push(Finding::error(
                vec![address.to_string()],
                format!(
                    "{address}: {} in {}, {whose} ({OFFERINGS_CALL}); {}",
                    not_offered(types),
                    zones_text(&lacking),
                    offered_elsewhere(region, types, offered)
                ),
            ));
        } else {
            let launch_in: Vec<&str> = fine.iter().map(|(z, _)| z.as_str()).collect();
            findings.push(Finding::warning(
                vec![address.to_string()],
                format!(
                    "{address}: {} in {}, so its nodes cannot launch there and land only in {} ({OFFERINGS_CALL})",
                    not_offered(types),
                    zones_text(&lacking),
                    launch_in.join(", ")
                ),
            ));
        }
    }
    Ok(findings)
}

// ---------------------------------------------------------------- quotas

/// An EC2 vCPU quota, named as Service Quotas names it (the reply's name is preferred).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Quota {
    code: &'static str,
    name: &'static str,
}

const STANDARD: Quota = Quota {
    code: "L-1216C47A",
    name: "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances",
};
const STANDARD_SPOT: Quota = Quota {
    code: "L-34B43A08",
    name: "All Standard (A, C, D, H, I, M, R, T, Z) Spot Instance Requests",
};
const G: Quota = Quota {
    code: "L-DB2E81BA",
    name: "Running On-Demand G and VT instances",
};
const G_SPOT: Quota = Quota {
    code: "L-3819A6DF",
    name: "All G and VT Spot Instance Requests",
};
const P: Quota = Quota {
    code: "L-417A185B",
    name: "Running On-Demand P instances",
};
const P_SPOT: Quota = Quota {
    code: "L-7212CCBC",
    name: "All P4, P3 and P2 Spot Instance Requests",
};
const P5_SPOT: Quota = Quota {
    code: "L-C4BD4855",
    name: "All P5 Spot Instance Requests",
};

/// The vCPU quota `instance_type`'s instances count against, On-Demand or Spot; `None`
/// for the families with quotas of their own that are not checked here (Inf, Trn, DL,
/// F, X, U, Mac, HPC…).
fn quota_for(instance_type: &str, spot: bool) -> Option<Quota> {
    let family = instance_type.split('.').next().unwrap_or_default();
    let letters: String = family
        .chars()
        .take_while(|c| c.is_ascii_alphabetic())
        .collect();
    let (on_demand, spot_quota) = match letters.as_str() {
        "g" | "gr" | "vt" => (G, G_SPOT),
        // P5 Spot instances have a quota of their own.
        "p" if family.starts_with("p5") => (P, P5_SPOT),
        "p" => (P, P_SPOT),
        // Inf, Trn, DL, HPC and Mac start like standard families but are not.
        "inf" | "trn" | "dl" | "mac" | "hpc" | "x" | "f" | "u" => return None,
        l if l.starts_with(['a', 'c', 'd', 'h', 'i', 'm', 'r', 't', 'z']) => {
            (STANDARD, STANDARD_SPOT)
        }
        _ => return None,
    };
    Some(if spot { spot_quota } else { on_demand })
}

/// The default vCPUs of each instance type, from `ec2:DescribeInstanceTypes`.
async fn vcpus(
    aws: &Aws,
    region: &str,
    types: &BTreeSet<&str>,
) -> Result<BTreeMap<String, f64>, ProviderError> {
    let types: Vec<&str> = types.iter().copied().collect();
    let mut out = BTreeMap::new();
    // The call takes at most 100 types.
    for chunk in types.chunks(100) {
        let params: Vec<(String, String)> = chunk
            .iter()
            .enumerate()
            .map(|(i, t)| (format!("InstanceType.{}", i + 1), (*t).to_string()))
            .collect();
        for item in aws
            .ec2_items(region, "DescribeInstanceTypes", &params, "instanceTypeSet")
            .await?
        {
            let vcpus = item
                .find("vCpuInfo")
                .and_then(|v| v.text("defaultVCpus"))
                .and_then(|v| v.parse::<f64>().ok());
            if let (Some(t), Some(v)) = (item.text("instanceType"), vcpus) {
                out.insert(t.to_string(), v);
            }
        }
    }
    Ok(out)
}

/// An error for each quota the stack's node groups exceed at their desired sizes, a
/// warning for each they exceed only at their maximum.
async fn quota_findings(
    aws: &Aws,
    region: &str,
    demands: &[(&str, &Demand)],
    offered: &BTreeMap<String, BTreeSet<String>>,
) -> Result<Vec<Finding>, ProviderError> {
    // Types the region does not offer were reported already, and EC2 would refuse to
    // describe them.
    let firsts: BTreeSet<&str> = demands
        .iter()
        .filter_map(|(_, d)| {
            let t = d.machine_types.first()?;
            quota_for(t, d.spot)?;
            offered.get(t).filter(|z| !z.is_empty())?;
            Some(t.as_str())
        })
        .collect();
    if firsts.is_empty() {
        return Ok(Vec::new());
    }
    let vcpus = vcpus(aws, region, &firsts).await?;
    let mut tallies: BTreeMap<&'static str, (Quota, Tally)> = BTreeMap::new();
    for (address, d) in demands {
        let Some(t) = d.machine_types.first() else {
            continue;
        };
        let (Some(quota), Some(v)) = (quota_for(t, d.spot), vcpus.get(t)) else {
            continue;
        };
        let (at_start, at_most) = d.nodes;
        tallies
            .entry(quota.code)
            .or_insert_with(|| (quota, Tally::default()))
            .1
            .add(
                address,
                (f64::from(at_start) * v, f64::from(at_most) * v),
                (0.0, 0.0),
                &format!("{}, {} vCPUs each", d.basis, amount(*v)),
            );
    }
    let mut findings = Vec::new();
    for (quota, tally) in tallies.into_values() {
        if tally.shares.is_empty() {
            continue;
        }
        let Some((limit, name)) = aws.quota(region, quota.code).await? else {
            continue;
        };
        let name = name.unwrap_or_else(|| quota.name.to_string());
        let code = quota.code;
        let head = format!(
            "quota {code} ({name}) in {region}: {} vCPUs (servicequotas:GetServiceQuota)",
            amount(limit)
        );
        let request = format!(
            "  to ask for more: aws service-quotas request-service-quota-increase --service-code ec2 --quota-code {code} --desired-value {} --region {region}",
            amount(tally.max)
        );
        let who = tally.listing("    ");
        if tally.min > limit {
            findings.push(Finding::error(
                tally.addresses(),
                format!(
                    "{head}\n  the stack's node groups need {} at their desired size and {} at their maximum, and instances outside the stack count too:\n{who}\n{request}",
                    amount(tally.min),
                    amount(tally.max),
                ),
            ));
        } else if tally.max > limit {
            findings.push(Finding::warning(
                tally.addresses(),
                format!(
                    "{head}\n  enough for the node groups' desired size ({}) but not their maximum ({}), and instances outside the stack count too: the autoscaler may stop short\n{who}\n{request}",
                    amount(tally.min),
                    amount(tally.max),
                ),
            ));
        }
    }
    Ok(findings)
}

// ---------------------------------------------------------------- the calls

/// Attempts per capacity call at most: a check that can be skipped does not hold the
/// plan for a network that is not there.
const CHECK_ATTEMPTS: u32 = 2;

/// Signed calls to EC2 and Service Quotas for one provider table.
struct Aws(Signed);

impl Aws {
    async fn new(ctx: &Ctx) -> Result<Aws, ProviderError> {
        Ok(Aws(
            Signed::new(ctx, "read EC2 capacity", CHECK_ATTEMPTS).await?
        ))
    }

    /// Every `item` of `set` over all the pages of an EC2 call (see [`ec2::items`]).
    async fn ec2_items(
        &self,
        region: &str,
        action: &str,
        params: &[(String, String)],
        set: &str,
    ) -> Result<Vec<Xml>, ProviderError> {
        ec2::items(&self.0, region, action, params, set).await
    }

    /// The applied value of EC2 quota `code` in `region` and its name; the default when
    /// no value is applied; `None` when Service Quotas does not know the quota.
    async fn quota(
        &self,
        region: &str,
        code: &str,
    ) -> Result<Option<(f64, Option<String>)>, ProviderError> {
        let body = json!({"ServiceCode": "ec2", "QuotaCode": code});
        for operation in ["GetServiceQuota", "GetAWSDefaultServiceQuota"] {
            match self
                .0
                .json11(&SERVICE_QUOTAS, region, operation, &body)
                .await
            {
                Ok(answer) => {
                    let quota = &answer["Quota"];
                    let value = quota["Value"].as_f64().ok_or_else(|| {
                        failure::malformed(
                            format!("servicequotas:{operation}"),
                            Cloud::Aws,
                            200,
                            "the answer has no Quota.Value",
                            None,
                        )
                    })?;
                    let name = quota["QuotaName"].as_str().map(str::to_string);
                    return Ok(Some((value, name)));
                }
                Err(ProviderError::Api { code, .. }) if code == "NoSuchResourceException" => {}
                Err(e) => return Err(e),
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use terrain_sandbox::{Options, Sandbox, Timing};

    const GPU: &str = "eks_node_group.gpu";
    const SUBNET_A: &str = "subnet-0a1b2c3d4e5f60001";
    const SUBNET_B: &str = "subnet-0a1b2c3d4e5f60002";
    /// Configured into us-east-1e, where the sandbox offers no g5.
    const SUBNET_E: &str = "subnet-0eeeeeeeeeeeeeeee";

    /// A sandbox with `capacity`; the account has subnets A and B (in us-east-1a and b)
    /// unless `capacity` places subnets itself, as EC2 refuses subnets it does not have.
    async fn sandbox(mut capacity: Value) -> Sandbox {
        let aws = &mut capacity["aws"];
        if aws.get("subnets").is_none() {
            aws["subnets"] = json!({SUBNET_A: "us-east-1a", SUBNET_B: "us-east-1b"});
        }
        let sandbox = Sandbox::start(Options {
            timing: Timing::instant(),
            ..Options::default()
        })
        .await
        .expect("the sandbox starts");
        sandbox.set_capacity(capacity).expect("a valid capacity");
        sandbox
    }

    fn ctx(endpoint: &str) -> Ctx {
        Ctx::new(
            GPU,
            json!({"region": "us-east-1", "endpoint": endpoint, "sandbox": true, "max_attempts": 1}),
        )
    }

    /// A node group's demand as `eks_node_group` reads it.
    fn demand(instance_type: &str, nodes: (u32, u32), subnets: &[&str]) -> Demand {
        Demand {
            region: "us-east-1".into(),
            subnets: subnets.iter().map(|s| s.to_string()).collect(),
            machine_types: vec![instance_type.to_string()],
            nodes,
            basis: format!(
                "{} × {instance_type}",
                crate::capacity::nodes_text(nodes.0.into(), nodes.1.into())
            ),
            ..Demand::default()
        }
    }

    fn need(address: &str, after: Demand) -> Need {
        Need {
            address: address.into(),
            after: vec![after],
            before: Vec::new(),
        }
    }

    #[tokio::test]
    async fn a_gpu_quota_of_zero_is_an_error_naming_the_quota_the_need_and_the_request() {
        let sandbox = sandbox(json!({"aws": {"quotas": [
            {"region": "us-east-1", "code": "L-DB2E81BA", "value": 0}
        ]}}))
        .await;
        let needs = [need(
            GPU,
            demand("g5.xlarge", (2, 4), &[SUBNET_A, SUBNET_B]),
        )];
        let found = preflight(&ctx(&sandbox.url()), &needs)
            .await
            .expect("checked");
        assert_eq!(
            found,
            [Finding::error(
                vec![GPU.to_string()],
                "quota L-DB2E81BA (Running On-Demand G and VT instances) in us-east-1: 0 vCPUs (servicequotas:GetServiceQuota)
  the stack's node groups need 8 at their desired size and 16 at their maximum, and instances outside the stack count too:
    eks_node_group.gpu: 2–4 nodes × g5.xlarge, 4 vCPUs each
  to ask for more: aws service-quotas request-service-quota-increase --service-code ec2 --quota-code L-DB2E81BA --desired-value 16 --region us-east-1".to_string()
            )]
        );
    }

    #[tokio::test]
    async fn node_groups_fitting_the_quota_only_at_their_desired_size_are_a_warning() {
        let sandbox = sandbox(json!({"aws": {"quotas": [
            {"region": "us-east-1", "code": "L-DB2E81BA", "value": 12}
        ]}}))
        .await;
        // Two groups share the bucket; an unchanged one counts as much as a new one,
        // since AWS reports no usage to tell them apart.
        let unchanged = demand("g5.xlarge", (1, 2), &[SUBNET_A]);
        let needs = [
            need(GPU, demand("g5.2xlarge", (1, 1), &[SUBNET_A])),
            Need {
                address: "eks_node_group.infer".into(),
                after: vec![unchanged.clone()],
                before: vec![unchanged],
            },
        ];
        let found = preflight(&ctx(&sandbox.url()), &needs)
            .await
            .expect("checked");
        assert_eq!(
            found,
            [Finding::warning(
                vec!["eks_node_group.gpu".to_string(), "eks_node_group.infer".to_string()],
                "quota L-DB2E81BA (Running On-Demand G and VT instances) in us-east-1: 12 vCPUs (servicequotas:GetServiceQuota)
  enough for the node groups' desired size (12) but not their maximum (16), and instances outside the stack count too: the autoscaler may stop short
    eks_node_group.gpu: 1 node × g5.2xlarge, 8 vCPUs each
    eks_node_group.infer: 1–2 nodes × g5.xlarge, 4 vCPUs each
  to ask for more: aws service-quotas request-service-quota-increase --service-code ec2 --quota-code L-DB2E81BA --desired-value 16 --region us-east-1".to_string()
            )]
        );
    }

    #[tokio::test]
    async fn an_instance_type_offered_in_none_of_its_subnets_zones_is_an_error_saying_where_it_is()
    {
        let sandbox = sandbox(json!({"aws": {"subnets": {SUBNET_E: "us-east-1e"}}})).await;
        let needs = [need(GPU, demand("g5.xlarge", (1, 2), &[SUBNET_E]))];
        let found = preflight(&ctx(&sandbox.url()), &needs)
            .await
            .expect("checked");
        assert_eq!(
            found,
            [Finding::error(
                vec![GPU.to_string()],
                format!("eks_node_group.gpu: g5.xlarge is not offered in us-east-1e ({SUBNET_E}), the zone of its subnet (ec2:DescribeInstanceTypeOfferings); it is offered in us-east-1a, us-east-1b, us-east-1c, us-east-1d, us-east-1f")
            )],
            "no quota finding: 64 vCPUs by default"
        );
    }

    #[tokio::test]
    async fn a_subnet_zone_without_the_instance_type_is_a_warning_naming_it() {
        let sandbox = sandbox(json!({"aws": {"subnets": {
            SUBNET_E: "us-east-1e", SUBNET_A: "us-east-1a"
        }}}))
        .await;
        let needs = [need(
            GPU,
            demand("g5.xlarge", (1, 2), &[SUBNET_A, SUBNET_E]),
        )];
        let found = preflight(&ctx(&sandbox.url()), &needs)
            .await
            .expect("checked");
        assert_eq!(
            found,
            [Finding::warning(
                vec![GPU.to_string()],
                format!("eks_node_group.gpu: g5.xlarge is not offered in us-east-1e ({SUBNET_E}), so its nodes cannot launch there and land only in us-east-1a (ec2:DescribeInstanceTypeOfferings)")
            )]
        );
    }

    #[tokio::test]
    async fn an_instance_type_the_region_does_not_offer_is_an_error_without_subnets() {
        let sandbox = sandbox(json!({})).await;
        let mut p5 = demand("p5.48xlarge", (1, 1), &[]);
        p5.region = "eu-west-1".into();
        let found = preflight(&ctx(&sandbox.url()), &[need(GPU, p5)])
            .await
            .expect("checked");
        assert_eq!(
            found,
            [Finding::error(
                vec![GPU.to_string()],
                "eks_node_group.gpu: p5.48xlarge is not offered in eu-west-1 (ec2:DescribeInstanceTypeOfferings)".to_string()
            )]
        );
    }

    #[tokio::test]
    async fn an_unchanged_healthy_stack_has_no_findings() {
        let sandbox = sandbox(json!({})).await;
        let gpu = demand("g5.xlarge", (2, 4), &[SUBNET_A, SUBNET_B]);
        let mut spot = demand("m5.large", (1, 3), &[SUBNET_A, SUBNET_B]);
        spot.spot = true;
        let mut unplaced = demand("g5.xlarge", (1, 1), &[]);
        unplaced.region = String::new();
        let needs = [
            Need {
                address: GPU.into(),
                after: vec![gpu.clone()],
                before: vec![gpu],
            },
            Need {
                address: "eks_node_group.cpu".into(),
                after: vec![spot.clone()],
                before: vec![spot],
            },
            need("eks_node_group.later", unplaced),
        ];
        let found = preflight(&ctx(&sandbox.url()), &needs)
            .await
            .expect("checked");
        assert_eq!(found, []);
    }

    #[tokio::test]
    async fn an_unreachable_endpoint_fails_naming_the_call() {
        // A port that was free a moment ago: nothing listens there.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        let needs = [need(GPU, demand("g5.xlarge", (2, 4), &[SUBNET_A]))];
        let e = preflight(&ctx(&format!("http://127.0.0.1:{port}")), &needs)
            .await
            .expect_err("nothing answers");
        let message = e.to_string();
        assert!(
            message.starts_with("ec2:DescribeInstanceTypeOfferings failed: "),
            "{message}"
        );
        // Nothing to check: nothing is called.
        assert_eq!(
            preflight(&ctx(&format!("http://127.0.0.1:{port}")), &[])
                .await
                .expect("nothing asked"),
            []
        );
    }

    #[tokio::test]
    async fn throttling_is_retried_and_an_error_answer_fails_naming_the_call() {
        let sandbox = sandbox(json!({})).await;
        let needs = [need(GPU, demand("g5.xlarge", (2, 4), &[SUBNET_A]))];
        // EC2 throttles with 503 RequestLimitExceeded; the second attempt is answered.
        sandbox.faults().burst(503, 1, 0);
        let mut config = ctx(&sandbox.url()).config;
        config["max_attempts"] = json!(2);
        let retried = preflight(&Ctx::new(GPU, config), &needs)
            .await
            .expect("answered on the second attempt");
        assert_eq!(retried, []);
        sandbox.faults().burst(500, 1, 0);
        let e = preflight(&ctx(&sandbox.url()), &needs)
            .await
            .expect_err("one attempt only");
        assert_eq!(
            e.to_string(),
            "ec2:DescribeInstanceTypeOfferings failed: 500 InternalError: An internal error has occurred"
        );
    }

    #[test]
    fn instance_families_count_against_their_vcpu_quotas() {
        let code = |t: &str, spot: bool| quota_for(t, spot).map(|q| q.code);
        assert_eq!(code("m5.large", false), Some("L-1216C47A"));
        assert_eq!(code("c7gn.large", true), Some("L-34B43A08"));
        assert_eq!(code("g5.xlarge", false), Some("L-DB2E81BA"));
        assert_eq!(code("vt1.3xlarge", true), Some("L-3819A6DF"));
        assert_eq!(code("p4d.24xlarge", false), Some("L-417A185B"));
        assert_eq!(code("p4d.24xlarge", true), Some("L-7212CCBC"));
        assert_eq!(code("p5.48xlarge", false), Some("L-417A185B"));
        assert_eq!(code("p5.48xlarge", true), Some("L-C4BD4855"));
        for own_quota in [
            "inf2.xlarge",
            "trn1.32xlarge",
            "dl1.24xlarge",
            "x2idn.16xlarge",
        ] {
            assert_eq!(code(own_quota, false), None, "{own_quota}");
        }
    }

    #[test]
    fn errors_are_read_as_each_protocol_writes_them() {
        assert_eq!(
            super::super::signed::query_error("<Response><Errors><Error><Code>UnauthorizedOperation</Code><Message>You are not authorized to perform this operation.</Message></Error></Errors><RequestID>x</RequestID></Response>"),
            ("UnauthorizedOperation".to_string(), "You are not authorized to perform this operation.".to_string())
        );
        assert_eq!(
            json_error(
                r#"{"__type": "com.amazonaws.servicequotas#AccessDeniedException", "Message": "no"}"#
            ),
            ("AccessDeniedException".to_string(), "no".to_string())
        );
        assert_eq!(
            json_error("<html>bad gateway</html>"),
            (
                String::new(),
                "an error answer not in the API's error format (an HTML page, 24 bytes)"
                    .to_string()
            )
        );
        assert_eq!(super::super::token::encode("g5.*"), "g5.%2A");
        assert_eq!(
            public_url("servicequotas", "cn-north-1"),
            "https://servicequotas.cn-north-1.amazonaws.com.cn/"
        );
    }
}
