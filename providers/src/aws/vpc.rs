//! The `aws_vpc` kind: an Amazon VPC with its IPv4 block, its DNS attributes and tags,
//! reporting its id, ARN, owner and main route table (which `aws_route_table` does not
//! manage: subnets without an association of their own use it).
//!
//! The block forces a new VPC; DNS support and DNS hostnames change in place
//! (ModifyVpcAttribute takes one attribute per call), tags through CreateTags and
//! DeleteTags. A create first looks for a VPC carrying this address's tags, so an apply
//! killed after CreateVpc adopts the VPC it made instead of making a second one.

use std::collections::BTreeMap;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::ec2::{self, Ec2, Params, Xml};
use super::{catalog, eks};
use crate::failure::Hint;
use crate::schema::Fields;
use crate::{Ctx, Invalid, Kind, Live, ProviderError};

/// The kind `aws_vpc`.
#[derive(Debug, Clone, Copy, Default)]
pub struct AwsVpc;

fn yes() -> bool {
    true
}

/// What a stack writes for an `aws_vpc`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    /// The VPC's IPv4 block, /16 (65,536 addresses) to /28 (16), such as 10.0.0.0/16; its
    /// subnets are carved out of it.
    #[terrain(force_new)]
    pub cidr: String,
    /// Whether the Amazon-provided DNS server resolves names in the VPC (EKS needs it).
    #[serde(default = "yes")]
    pub enable_dns_support: bool,
    /// Whether instances with public addresses get public DNS hostnames (EKS nodes need
    /// it to join their cluster); needs enable_dns_support.
    #[serde(default = "yes")]
    pub enable_dns_hostnames: bool,
    /// AWS tags on the VPC; a Name tag is the resource's name unless set here.
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
}

/// What `aws_vpc` reports after apply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Outputs {
    /// The VPC id (vpc-…).
    #[terrain(derived_from = [])]
    pub id: String,
    /// arn:aws:ec2:REGION:ACCOUNT:vpc/ID.
    #[terrain(derived_from = [])]
    pub arn: String,
    /// The route table EC2 made with the VPC, used by subnets without one of their own.
    #[terrain(derived_from = [])]
    pub main_route_table_id: String,
    /// The AWS account that owns the VPC.
    #[terrain(derived_from = [])]
    pub owner_id: String,
}

const DESCRIBE: &str = "DescribeVpcs";
const SET: &str = "vpcSet";
/// The DNS attributes, as ModifyVpcAttribute and DescribeVpcAttribute name them.
const DNS_SUPPORT: &str = "enableDnsSupport";
const DNS_HOSTNAMES: &str = "enableDnsHostnames";

/// A VPC as EC2 describes it, with its DNS attributes and main route table.
struct Described {
    vpc: Xml,
    dns_support: bool,
    dns_hostnames: bool,
    main_route_table_id: String,
}

async fn describe(ec2: &Ec2, id: &str) -> Result<Option<Described>, ProviderError> {
    let Some(vpc) = ec2.describe_one(DESCRIBE, "VpcId", id, SET).await? else {
        return Ok(None);
    };
    let attribute = |name: &'static str| async move {
        let params = Params::new().set("VpcId", id).set("Attribute", name);
        let answer = ec2.call("DescribeVpcAttribute", &params).await?;
        Ok::<bool, ProviderError>(answer.at(&[name, "value"]) == Some("true"))
    };
    let (Some(dns_support), Some(dns_hostnames)) = (
        ec2::found(attribute(DNS_SUPPORT).await)?,
        ec2::found(attribute(DNS_HOSTNAMES).await)?,
    ) else {
        return Ok(None);
    };
    let main = Params::new()
        .filter("vpc-id", &[id])
        .filter("association.main", &["true"]);
    let tables = ec2
        .items("DescribeRouteTables", &main, "routeTableSet")
        .await?;
    let main_route_table_id = tables
        .iter()
        .find(|t| {
            t.items("associationSet")
                .any(|a| a.text("main") == Some("true"))
        })
        .and_then(|t| t.text("routeTableId"))
        .unwrap_or_default()
        .to_string();
    Ok(Some(Described {
        vpc,
        dns_support,
        dns_hostnames,
        main_route_table_id,
    }))
}

fn live_of(ec2: &Ec2, address: &str, d: &Described, prior: Option<&Spec>) -> Live<AwsVpc> {
    let id = d.vpc.text("vpcId").unwrap_or_default().to_string();
    let owner = d.vpc.text("ownerId").unwrap_or_default().to_string();
    Live {
        spec: Spec {
            cidr: d.vpc.text("cidrBlock").unwrap_or_default().to_string(),
            enable_dns_support: d.dns_support,
            enable_dns_hostnames: d.dns_hostnames,
            tags: ec2::spec_tags(&d.vpc.tags(), address, prior.map(|p| &p.tags)),
        },
        outputs: Outputs {
            arn: ec2.arn(&owner, "vpc", &id),
            id: id.clone(),
            main_route_table_id: d.main_route_table_id.clone(),
            owner_id: owner,
        },
        id,
    }
}

async fn read_live(
    ec2: &Ec2,
    address: &str,
    id: &str,
    prior: Option<&Spec>,
) -> Result<Option<Live<AwsVpc>>, ProviderError> {
    Ok(describe(ec2, id)
        .await?
        .map(|d| live_of(ec2, address, &d, prior)))
}

/// The VPC once EC2 reports it `available`.
async fn wait_available(ctx: &Ctx, ec2: &Ec2, id: &str) -> Result<(), ProviderError> {
    super::wait_for(
        ctx,
        "ec2:DescribeVpcs",
        &format!("VPC {id} to become available"),
        std::time::Duration::from_secs(300),
        ec2::POLL,
        || async {
            let vpc = ec2.describe_one(DESCRIBE, "VpcId", id, SET).await?;
            Ok(vpc
                .filter(|v| v.text("state") == Some("available"))
                .map(|_| ()))
        },
    )
    .await
}

/// Sets the DNS attributes that differ from `live`, one per call: support first when
/// turning it on, hostnames first when turning support off (EC2 refuses hostnames
/// without support).
async fn set_dns(
    ec2: &Ec2,
    id: &str,
    live: (bool, bool),
    spec: &Spec,
) -> Result<(), ProviderError> {
    let mut steps = vec![
        (DNS_SUPPORT, live.0, spec.enable_dns_support),
        (DNS_HOSTNAMES, live.1, spec.enable_dns_hostnames),
    ];
    if !spec.enable_dns_support {
        steps.reverse();
    }
    for (name, now, wanted) in steps {
        if now == wanted {
            continue;
        }
        let key = format!("{}{}.Value", &name[..1].to_ascii_uppercase(), &name[1..]);
        let params = Params::new().set("VpcId", id).set(&key, wanted.to_string());
        ec2.call("ModifyVpcAttribute", &params).await?;
    }
    Ok(())
}

/// Brings VPC `id` to `spec` (DNS attributes, tags) and reads it back.
async fn converge(
    ctx: &Ctx,
    ec2: &Ec2,
    id: &str,
    spec: &Spec,
) -> Result<Live<AwsVpc>, ProviderError> {
    let Some(d) = describe(ec2, id).await? else {
        return Err(gone(id));
    };
    set_dns(ec2, id, (d.dns_support, d.dns_hostnames), spec).await?;
    let wanted = ec2::wanted_tags(&spec.tags, &[], &ctx.address);
    ec2.retag(id, &d.vpc.tags(), &wanted).await?;
    read_live(ec2, &ctx.address, id, Some(spec))
        .await?
        .ok_or_else(|| gone(id))
}

fn gone(id: &str) -> ProviderError {
    ProviderError::api(
        "ec2:DescribeVpcs",
        400,
        "InvalidVpcID.NotFound",
        format!("VPC {id} disappeared while it was being applied"),
    )
}

#[async_trait]
impl Kind for AwsVpc {
    type Spec = Spec;
    type Outputs = Outputs;
    const KIND: &'static str = "aws_vpc";
    const PROVIDER: &'static str = "aws";
    const WRITES: crate::protocol::Writes = crate::protocol::Writes::FromId;

    fn validate(spec: &Spec, config: &Value) -> Vec<Invalid> {
        let mut out = Vec::new();
        if let Err(m) = catalog::check_vpc_cidr(&spec.cidr) {
            out.push(Invalid::at("cidr", m));
        }
        if spec.enable_dns_hostnames && !spec.enable_dns_support {
            out.push(Invalid::at(
                "enable_dns_hostnames",
                "DNS hostnames need DNS support: set enable_dns_support = true, or enable_dns_hostnames = false",
            ));
        }
        eks::check_tags_and_config(&spec.tags, config, &mut out);
        out
    }

    async fn read(
        &self,
        ctx: &Ctx,
        id: &str,
        prior: Option<&Spec>,
    ) -> Result<Option<Live<Self>>, ProviderError> {
        let ec2 = Ec2::of(ctx).await?;
        read_live(&ec2, &ctx.address, id, prior).await
    }

    async fn create(&self, ctx: &Ctx, spec: &Spec) -> Result<Live<Self>, ProviderError> {
        let ec2 = Ec2::of(ctx).await?;
        let tags = ec2::wanted_tags(&spec.tags, &[], &ctx.address);
        let params = Params::new()
            .set("CidrBlock", &spec.cidr)
            .tag_specification("vpc", &tags);
        let vpc = ec2
            .adopt_or_create((DESCRIBE, SET), &ctx.address, ("CreateVpc", &params), "vpc")
            .await?;
        let id = vpc.text("vpcId").unwrap_or_default().to_string();
        wait_available(ctx, &ec2, &id).await?;
        // A failure from here leaves a tagged VPC the next create adopts and finishes.
        converge(ctx, &ec2, &id, spec).await
    }

    async fn update(
        &self,
        ctx: &Ctx,
        id: &str,
        _prior: &Spec,
        spec: &Spec,
    ) -> Result<Live<Self>, ProviderError> {
        let ec2 = Ec2::of(ctx).await?;
        converge(ctx, &ec2, id, spec).await
    }

    async fn delete(
        &self,
        ctx: &Ctx,
        id: &str,
        _prior: Option<&Spec>,
    ) -> Result<(), ProviderError> {
        let ec2 = Ec2::of(ctx).await?;
        // EC2 refuses while subnets, gateways or interfaces remain (DependencyViolation)
        // without saying which: the error names them, so whoever reads it knows what to
        // destroy first.
        let params = Params::new().set("VpcId", id);
        match ec2::found(ec2.call("DeleteVpc", &params).await) {
            Err(e) if ec2::is_dependency_violation(&e) => {
                let held = holders(&ec2, id).await;
                Err(e.with_hint(Hint::Do(held)))
            }
            other => other.map(|_| ()),
        }
    }
}

/// What VPC `id` still holds, as a hint: its subnets, attached internet gateways,
/// route tables other than the main one and NAT gateways not yet deleted. Best effort:
/// when the describes fail, the hint says where to look.
async fn holders(ec2: &Ec2, id: &str) -> String {
    let vpc = Params::new().filter("vpc-id", &[id]);
    let attached = Params::new().filter("attachment.vpc-id", &[id]);
    let mut held: Vec<String> = Vec::new();
    let lookups: [(&str, &Params, &str, &str, &str); 4] = [
        ("DescribeSubnets", &vpc, "subnetSet", "subnetId", "subnet"),
        (
            "DescribeInternetGateways",
            &attached,
            "internetGatewaySet",
            "internetGatewayId",
            "internet gateway",
        ),
        (
            "DescribeRouteTables",
            &vpc,
            "routeTableSet",
            "routeTableId",
            "route table",
        ),
        (
            "DescribeNatGateways",
            &vpc,
            "natGatewaySet",
            "natGatewayId",
            "NAT gateway",
        ),
    ];
    for (action, params, set, field, noun) in lookups {
        let Ok(items) = ec2.items(action, params, set).await else {
            continue;
        };
        for item in &items {
            let main = item
                .find("associationSet")
                .is_some_and(|a| a.all("item").any(|i| i.text("main") == Some("true")));
            let gone = matches!(item.text("state"), Some("deleted" | "deleting" | "failed"))
                && noun == "NAT gateway";
            if main || gone {
                continue;
            }
            if let Some(n) = ec2::named(item, field) {
                held.push(format!("{noun} {n}"));
            }
        }
    }
    if held.is_empty() {
        return format!(
            "something still uses {id} (network interfaces of load balancers, EKS clusters or instances): `aws ec2 describe-network-interfaces --filters Name=vpc-id,Values={id}` lists them; destroy what uses them first"
        );
    }
    format!(
        "{id} still holds {}: destroy what made them first (another stack, or by hand), then destroy again",
        held.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aws::eks::testing::assert_validation;
    use crate::testing::schema_mismatches;
    use serde_json::json;

    fn base() -> Spec {
        Spec {
            cidr: "10.0.0.0/16".into(),
            enable_dns_support: true,
            enable_dns_hostnames: true,
            tags: BTreeMap::new(),
        }
    }

    #[test]
    fn validation_checks_the_block_its_size_and_dns() {
        let with = |f: fn(&mut Spec)| {
            let mut s = base();
            f(&mut s);
            s
        };
        let cases = vec![
            (base(), "", ""),
            (with(|s| s.cidr = "10.0.0.0/28".into()), "", ""),
            (
                with(|s| s.cidr = "10.0.0.0/15".into()),
                "cidr",
                "is a /15; EC2 takes blocks from /16",
            ),
            (
                with(|s| s.cidr = "10.0.0.0/29".into()),
                "cidr",
                "to /28 (16)",
            ),
            (
                with(|s| s.cidr = "10.0.1.0/16".into()),
                "cidr",
                "host bits set; the block is 10.0.0.0/16",
            ),
            (
                with(|s| s.cidr = "10.0.0.0".into()),
                "cidr",
                "no prefix length",
            ),
            (
                with(|s| s.cidr = "fd00::/56".into()),
                "cidr",
                "not an IPv4 address block",
            ),
            (
                with(|s| s.enable_dns_support = false),
                "enable_dns_hostnames",
                "DNS hostnames need DNS support",
            ),
            (
                with(|s| {
                    s.enable_dns_support = false;
                    s.enable_dns_hostnames = false;
                }),
                "",
                "",
            ),
            (
                with(|s| s.tags = BTreeMap::from([("terrain-address".into(), "x".into())])),
                "tags",
                "terrain's own",
            ),
        ];
        assert_validation::<AwsVpc>(cases, &json!({"region": "us-east-1"}));
    }

    #[test]
    fn schema_matches_spec_and_outputs() {
        let full = Spec {
            tags: BTreeMap::from([("team".to_string(), "ml".to_string())]),
            ..base()
        };
        let outputs = Outputs {
            id: "vpc-0a1b2c3d4e5f60001".into(),
            arn: "arn:aws:ec2:us-east-1:123456789012:vpc/vpc-0a1b2c3d4e5f60001".into(),
            main_route_table_id: "rtb-0a1b2c3d4e5f60001".into(),
            owner_id: "123456789012".into(),
        };
        assert_eq!(
            schema_mismatches::<AwsVpc>(&full, &outputs),
            Vec::<String>::new()
        );
        let schema = AwsVpc::schema();
        assert!(schema.field("cidr").is_some_and(|f| f.force_new));
        assert!(schema
            .field("enable_dns_support")
            .is_some_and(|f| !f.force_new));
    }
}
