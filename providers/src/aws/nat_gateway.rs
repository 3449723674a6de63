//! The `aws_nat_gateway` kind: a NAT gateway in a subnet, through which private
//! subnets reach the internet (public connectivity) or other networks (private).
//!
//! A public gateway gets an Elastic IP of its own (AllocateAddress), tagged with the
//! gateway's address tags, so a create interrupted between the two calls adopts that
//! address instead of leaking one; the gateway is created with a ClientToken derived
//! from the address, subnet and allocation, and followed from `pending` to `available`
//! (a `failed` gateway fails the create with EC2's FailureCode and FailureMessage).
//! Delete deletes the gateway, waits until it is `deleted`, then releases the address.
//! Subnet and connectivity force a new gateway; tags change in place.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::ec2::{self, Ec2, Params, Xml};
use super::{catalog, eks, is_ours};
use crate::schema::Fields;
use crate::{Ctx, Invalid, Kind, Live, ProviderError};

/// The kind `aws_nat_gateway`.
#[derive(Debug, Clone, Copy, Default)]
pub struct AwsNatGateway;

fn public() -> String {
    "public".to_string()
}

/// What a stack writes for an `aws_nat_gateway`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    /// The subnet the gateway lives in: a public subnet (routed to an internet gateway)
    /// for public connectivity.
    #[terrain(force_new)]
    pub subnet_id: String,
    /// "public" (an Elastic IP of its own, to the internet) or "private" (to other VPCs
    /// and on-premises networks only).
    #[serde(default = "public")]
    #[terrain(force_new)]
    pub connectivity: String,
    /// AWS tags on the gateway and its Elastic IP; a Name tag is the resource's name
    /// unless set here.
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
}

/// What `aws_nat_gateway` reports after apply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Outputs {
    /// The gateway id (nat-…), a route's nat_gateway_id.
    #[terrain(derived_from = [])]
    pub id: String,
    /// The Elastic IP's allocation id (eipalloc-…); none for a private gateway.
    #[terrain(derived_from = [])]
    pub allocation_id: Option<String>,
    /// The public IPv4 address traffic leaves from; none for a private gateway.
    #[terrain(derived_from = [])]
    pub public_ip: Option<String>,
    /// The gateway's private IPv4 address in its subnet.
    #[terrain(derived_from = [])]
    pub private_ip: String,
}

const DESCRIBE: &str = "DescribeNatGateways";
const SET: &str = "natGatewaySet";
const ADDRESSES: &str = "DescribeAddresses";
const ADDRESS_SET: &str = "addressesSet";
const CONNECTIVITY: &[&str] = &["public", "private"];

/// NAT gateways take one to a few minutes to become available, and to go.
const TIMEOUT: Duration = Duration::from_secs(900);

/// States of a gateway that is, or will be, gone.
fn is_gone(state: Option<&str>) -> bool {
    matches!(state, Some("deleted" | "deleting" | "failed"))
}

fn live_of(address: &str, gateway: &Xml, prior: Option<&Spec>) -> Live<AwsNatGateway> {
    let text = |name: &str| gateway.text(name).unwrap_or_default().to_string();
    let id = text("natGatewayId");
    let first = gateway.items("natGatewayAddressSet").next();
    let of_address = |name: &str| {
        first
            .and_then(|a| a.text(name))
            .filter(|v| !v.is_empty())
            .map(str::to_string)
    };
    let connectivity = gateway
        .text("connectivityType")
        .filter(|c| !c.is_empty())
        .map_or_else(public, str::to_string);
    Live {
        spec: Spec {
            subnet_id: text("subnetId"),
            connectivity,
            tags: ec2::spec_tags(&gateway.tags(), address, prior.map(|p| &p.tags)),
        },
        outputs: Outputs {
            id: id.clone(),
            allocation_id: of_address("allocationId"),
            public_ip: of_address("publicIp"),
            private_ip: of_address("privateIp").unwrap_or_default(),
        },
        id,
    }
}

/// The gateway, unless it is gone or going.
async fn describe(ec2: &Ec2, id: &str) -> Result<Option<Xml>, ProviderError> {
    Ok(ec2
        .describe_one(DESCRIBE, "NatGatewayId", id, SET)
        .await?
        .filter(|g| !is_gone(g.text("state"))))
}

/// The ClientToken of a create: the same for a retried request, different for another
/// subnet, address or `generation` (a token EC2 already spent on a deleted gateway).
fn client_token(address: &str, spec: &Spec, allocation: Option<&str>, generation: u32) -> String {
    let seed = format!(
        "{address}\n{}\n{}\n{}\n{generation}",
        spec.subnet_id,
        spec.connectivity,
        allocation.unwrap_or_default()
    );
    let digest = hex::encode(Sha256::digest(seed.as_bytes()));
    format!("terrain-{}", &digest[..32])
}

/// The Elastic IP this address allocated before (an interrupted create), else a new
/// one tagged as the gateway is.
async fn allocation(ctx: &Ctx, ec2: &Ec2, spec: &Spec) -> Result<String, ProviderError> {
    let left = ec2.tagged(ADDRESSES, ADDRESS_SET, &ctx.address).await?;
    // One the address tags mark but that serves another gateway is not free.
    let free = left
        .iter()
        .filter(|a| a.text("associationId").is_none_or(str::is_empty))
        .find_map(|a| a.text("allocationId"));
    if let Some(id) = free {
        return Ok(id.to_string());
    }
    let tags = ec2::wanted_tags(&spec.tags, &[], &ctx.address);
    let params = Params::new()
        .set("Domain", "vpc")
        .tag_specification("elastic-ip", &tags);
    let made = ec2.call("AllocateAddress", &params).await?;
    Ok(made.text("allocationId").unwrap_or_default().to_string())
}

/// Creates the gateway; its id.
async fn create_gateway(ctx: &Ctx, ec2: &Ec2, spec: &Spec) -> Result<String, ProviderError> {
    let allocation = match spec.connectivity.as_str() {
        "public" => Some(allocation(ctx, ec2, spec).await?),
        _ => None,
    };
    let tags = ec2::wanted_tags(&spec.tags, &[], &ctx.address);
    for generation in 0..5 {
        let mut params = Params::new()
            .set("SubnetId", &spec.subnet_id)
            .set("ConnectivityType", &spec.connectivity)
            .set(
                "ClientToken",
                client_token(&ctx.address, spec, allocation.as_deref(), generation),
            )
            .tag_specification("natgateway", &tags);
        if let Some(a) = &allocation {
            params = params.set("AllocationId", a);
        }
        let made = ec2.call("CreateNatGateway", &params).await?;
        let gateway = made.find("natGateway");
        // A token EC2 already spent answers with the gateway it made then: when that
        // one is gone, ask again with the next token.
        if gateway.is_some_and(|g| matches!(g.text("state"), Some("deleted" | "deleting"))) {
            continue;
        }
        if let Some(id) = gateway.and_then(|g| g.text("natGatewayId")) {
            return Ok(id.to_string());
        }
    }
    Err(crate::failure::malformed(
        "ec2:CreateNatGateway",
        crate::failure::Cloud::Aws,
        200,
        "no answer named a new NAT gateway",
        None,
    ))
}

/// The gateway once `available`; fails with EC2's reason when it goes `failed`.
async fn wait_available(ctx: &Ctx, ec2: &Ec2, id: &str) -> Result<Xml, ProviderError> {
    super::wait_for(
        ctx,
        "ec2:DescribeNatGateways",
        &format!("NAT gateway {id} to become available"),
        TIMEOUT,
        ec2::POLL,
        || async {
            let gateway = ec2.describe_one(DESCRIBE, "NatGatewayId", id, SET).await?;
            let state = gateway.as_ref().and_then(|g| g.text("state"));
            match (state, &gateway) {
                (Some("available"), Some(g)) => Ok(Some(g.clone())),
                (Some("failed"), Some(g)) => Err(ProviderError::Failed {
                    call: "ec2:CreateNatGateway".into(),
                    message: format!(
                        "NAT gateway {id} failed: {}: {}",
                        g.text("failureCode").unwrap_or_default(),
                        g.text("failureMessage").unwrap_or_default()
                    ),
                }),
                (Some("deleted" | "deleting"), _) => Err(ProviderError::Failed {
                    call: "ec2:CreateNatGateway".into(),
                    message: format!("NAT gateway {id} is being deleted"),
                }),
                _ => Ok(None),
            }
        },
    )
    .await
}

/// Retags the gateway, and its Elastic IP when this address allocated it.
async fn retag(ctx: &Ctx, ec2: &Ec2, gateway: &Xml, spec: &Spec) -> Result<(), ProviderError> {
    let wanted = ec2::wanted_tags(&spec.tags, &[], &ctx.address);
    let id = gateway.text("natGatewayId").unwrap_or_default();
    ec2.retag(id, &gateway.tags(), &wanted).await?;
    for allocation in allocations(gateway) {
        let Some(address) = ec2
            .describe_one(ADDRESSES, "AllocationId", &allocation, ADDRESS_SET)
            .await?
        else {
            continue;
        };
        let tags = address.tags();
        if is_ours(&tags, &ctx.address) {
            ec2.retag(&allocation, &tags, &wanted).await?;
        }
    }
    Ok(())
}

fn allocations(gateway: &Xml) -> Vec<String> {
    gateway
        .items("natGatewayAddressSet")
        .filter_map(|a| a.text("allocationId"))
        .filter(|a| !a.is_empty())
        .map(str::to_string)
        .collect()
}

/// Releases the Elastic IPs `allocations` that carry this address's tags; gone ones
/// are fine.
async fn release(ctx: &Ctx, ec2: &Ec2, allocations: &[String]) -> Result<(), ProviderError> {
    for allocation in allocations {
        let Some(address) = ec2
            .describe_one(ADDRESSES, "AllocationId", allocation, ADDRESS_SET)
            .await?
        else {
            continue;
        };
        if !is_ours(&address.tags(), &ctx.address) {
            continue;
        }
        let params = Params::new().set("AllocationId", allocation);
        ec2::found(ec2.call("ReleaseAddress", &params).await)?;
    }
    Ok(())
}

#[async_trait]
impl Kind for AwsNatGateway {
    type Spec = Spec;
    type Outputs = Outputs;
    const KIND: &'static str = "aws_nat_gateway";
    const PROVIDER: &'static str = "aws";
    const WRITES: crate::protocol::Writes = crate::protocol::Writes::FromId;
    const BILLS: bool = true;

    fn validate(spec: &Spec, config: &Value) -> Vec<Invalid> {
        let mut out = Vec::new();
        if let Err(m) = catalog::check_subnet_id(&spec.subnet_id) {
            out.push(Invalid::at("subnet_id", m));
        }
        if !CONNECTIVITY.contains(&spec.connectivity.as_str()) {
            out.push(Invalid::at(
                "connectivity",
                format!(
                    "{:?} is not a NAT gateway connectivity; use \"public\" or \"private\"",
                    spec.connectivity
                ),
            ));
        }
        eks::check_tags_and_config(&spec.tags, config, &mut out);
        out
    }

    /// The gateway's hours, and a public one's IPv4 address hours; data processed is
    /// billed by the GB on top.
    fn usage(spec: &Value, config: &Value, _peers: &[crate::Peer]) -> Vec<crate::Usage> {
        let region = crate::usage::known(&config["region"]).unwrap_or_default();
        let mut out = vec![crate::Usage::fixed(
            "vpc.nat_gateway",
            "",
            region,
            1.0,
            "NAT gateway (data processed billed apart)".to_string(),
        )];
        if spec["connectivity"] != "private" {
            out.push(crate::Usage::fixed(
                "vpc.public_ipv4",
                "",
                region,
                1.0,
                "its public IPv4 address".to_string(),
            ));
        }
        out
    }

    async fn read(
        &self,
        ctx: &Ctx,
        id: &str,
        prior: Option<&Spec>,
    ) -> Result<Option<Live<Self>>, ProviderError> {
        let ec2 = Ec2::of(ctx).await?;
        Ok(describe(&ec2, id)
            .await?
            .map(|g| live_of(&ctx.address, &g, prior)))
    }

    async fn create(&self, ctx: &Ctx, spec: &Spec) -> Result<Live<Self>, ProviderError> {
        let ec2 = Ec2::of(ctx).await?;
        // A gateway this address made before its create's answer was lost.
        let left = ec2.tagged(DESCRIBE, SET, &ctx.address).await?;
        let id = match left
            .iter()
            .filter(|g| !is_gone(g.text("state")))
            .find_map(|g| g.text("natGatewayId"))
        {
            Some(id) => id.to_string(),
            None => create_gateway(ctx, &ec2, spec).await?,
        };
        let gateway = wait_available(ctx, &ec2, &id).await?;
        retag(ctx, &ec2, &gateway, spec).await?;
        Ok(live_of(&ctx.address, &gateway, Some(spec)))
    }

    async fn update(
        &self,
        ctx: &Ctx,
        id: &str,
        _prior: &Spec,
        spec: &Spec,
    ) -> Result<Live<Self>, ProviderError> {
        let ec2 = Ec2::of(ctx).await?;
        let gone = || {
            ProviderError::api(
                "ec2:DescribeNatGateways",
                400,
                "NatGatewayNotFound",
                format!("NAT gateway {id} is gone"),
            )
        };
        let gateway = describe(&ec2, id).await?.ok_or_else(gone)?;
        retag(ctx, &ec2, &gateway, spec).await?;
        let read = describe(&ec2, id).await?.ok_or_else(gone)?;
        Ok(live_of(&ctx.address, &read, Some(spec)))
    }

    async fn delete(
        &self,
        ctx: &Ctx,
        id: &str,
        _prior: Option<&Spec>,
    ) -> Result<(), ProviderError> {
        let ec2 = Ec2::of(ctx).await?;
        let described = ec2.describe_one(DESCRIBE, "NatGatewayId", id, SET).await?;
        let mut addresses = described.as_ref().map(allocations).unwrap_or_default();
        // An address allocated for a gateway that never came up is released too.
        for a in ec2.tagged(ADDRESSES, ADDRESS_SET, &ctx.address).await? {
            if let Some(allocation) = a.text("allocationId") {
                if !addresses.iter().any(|x| x == allocation) {
                    addresses.push(allocation.to_string());
                }
            }
        }
        if let Some(gateway) = &described {
            if gateway.text("state") != Some("deleted") {
                let params = Params::new().set("NatGatewayId", id);
                ec2::found(ec2.call("DeleteNatGateway", &params).await)?;
                super::wait_for(
                    ctx,
                    "ec2:DescribeNatGateways",
                    &format!("NAT gateway {id} to be deleted"),
                    TIMEOUT,
                    ec2::POLL,
                    || async {
                        let now = ec2.describe_one(DESCRIBE, "NatGatewayId", id, SET).await?;
                        Ok(match now.as_ref().and_then(|g| g.text("state")) {
                            None | Some("deleted") => Some(()),
                            _ => None,
                        })
                    },
                )
                .await?;
            }
        }
        release(ctx, &ec2, &addresses).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aws::eks::testing::assert_validation;
    use crate::testing::schema_mismatches;
    use serde_json::json;

    fn base() -> Spec {
        Spec {
            subnet_id: "subnet-0a1b2c3d4e5f60001".into(),
            connectivity: "public".into(),
            tags: BTreeMap::new(),
        }
    }

    #[test]
    fn validation_checks_the_subnet_and_connectivity() {
        let cases = vec![
            (base(), "", ""),
            (
                Spec {
                    connectivity: "private".into(),
                    ..base()
                },
                "",
                "",
            ),
            (
                Spec {
                    connectivity: "internet".into(),
                    ..base()
                },
                "connectivity",
                "\"internet\" is not a NAT gateway connectivity",
            ),
            (
                Spec {
                    subnet_id: "vpc-0a1b2c3d4e5f60001".into(),
                    ..base()
                },
                "subnet_id",
                "is not a subnet id",
            ),
        ];
        assert_validation::<AwsNatGateway>(cases, &json!({"region": "us-east-1"}));
    }

    #[test]
    fn usage_is_the_gateway_and_a_public_ones_address_by_the_hour() {
        let config = json!({"region": "us-east-1"});
        let public = AwsNatGateway::usage(
            &json!({"subnet_id": "subnet-1", "connectivity": "public"}),
            &config,
            &[],
        );
        let meters: Vec<(&str, &str, f64)> = public
            .iter()
            .map(|u| (u.meter.as_str(), u.region.as_str(), u.max))
            .collect();
        assert_eq!(
            meters,
            [
                ("vpc.nat_gateway", "us-east-1", 1.0),
                ("vpc.public_ipv4", "us-east-1", 1.0)
            ]
        );
        let private = AwsNatGateway::usage(
            &json!({"subnet_id": "subnet-1", "connectivity": "private"}),
            &config,
            &[],
        );
        assert_eq!(private.len(), 1);
        assert_eq!(private[0].meter, "vpc.nat_gateway");
    }

    #[test]
    fn client_tokens_repeat_for_a_retry_and_differ_otherwise() {
        let spec = base();
        let token = client_token("aws_nat_gateway.a", &spec, Some("eipalloc-1"), 0);
        assert!(token.len() <= 64, "EC2 takes at most 64 characters");
        assert_eq!(
            token,
            client_token("aws_nat_gateway.a", &spec, Some("eipalloc-1"), 0)
        );
        for other in [
            client_token("aws_nat_gateway.b", &spec, Some("eipalloc-1"), 0),
            client_token("aws_nat_gateway.a", &spec, Some("eipalloc-2"), 0),
            client_token("aws_nat_gateway.a", &spec, Some("eipalloc-1"), 1),
        ] {
            assert_ne!(token, other);
        }
    }

    #[test]
    fn schema_matches_spec_and_outputs() {
        let full = Spec {
            tags: BTreeMap::from([("team".to_string(), "ml".to_string())]),
            ..base()
        };
        let outputs = Outputs {
            id: "nat-0a1b2c3d4e5f60001".into(),
            allocation_id: Some("eipalloc-0a1b2c3d4e5f60001".into()),
            public_ip: Some("203.0.113.10".into()),
            private_ip: "10.0.0.10".into(),
        };
        assert_eq!(
            schema_mismatches::<AwsNatGateway>(&full, &outputs),
            Vec::<String>::new()
        );
    }
}
