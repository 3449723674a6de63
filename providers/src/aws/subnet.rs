//! The `aws_subnet` kind: a subnet of a VPC in one Availability Zone, with its IPv4
//! block, whether instances launched in it get public addresses, and the role tag the
//! AWS Load Balancer Controller picks subnets by (`kubernetes.io/role/elb` for
//! internet-facing load balancers, `kubernetes.io/role/internal-elb` for internal ones).
//!
//! VPC, block and zone force a new subnet; public addresses on launch change in place
//! (ModifySubnetAttribute), the role and other tags through CreateTags and DeleteTags. A
//! create first looks for a subnet carrying this address's tags and adopts it.

use std::collections::BTreeMap;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::ec2::{self, Ec2, Params, Xml};
use super::{catalog, config, eks};
use crate::failure::Hint;
use crate::schema::Fields;
use crate::{Ctx, Invalid, Kind, Live, Peer, ProviderError};

/// The kind `aws_subnet`.
#[derive(Debug, Clone, Copy, Default)]
pub struct AwsSubnet;

/// What a stack writes for an `aws_subnet`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    /// The VPC the subnet is in (an aws_vpc's id).
    #[terrain(force_new)]
    pub vpc_id: String,
    /// The subnet's IPv4 block, /16 to /28, inside the VPC's block and overlapping no
    /// other subnet of it; computed from `carve` when that is set instead.
    #[serde(default)]
    #[terrain(force_new)]
    pub cidr: String,
    /// The block carved out of a larger one instead of written out, as Terraform's
    /// `cidrsubnet`: `{ from = "${aws_vpc.main.cidr}", newbits = 4, netnum = 2 }` is the
    /// third /20 of a /16. Numbered blocks stay where they are when others are added.
    pub carve: Option<Carve>,
    /// The Availability Zone (us-east-1a), in the provider's region.
    #[terrain(force_new)]
    pub availability_zone: String,
    /// Whether instances launched in the subnet get a public IPv4 address (billed per
    /// hour by AWS).
    #[serde(default)]
    pub map_public_ip_on_launch: bool,
    /// "public" tags the subnet for internet-facing load balancers
    /// (kubernetes.io/role/elb = 1), "private" for internal ones
    /// (kubernetes.io/role/internal-elb = 1); left out, neither.
    pub role: Option<String>,
    /// AWS tags on the subnet; a Name tag is the resource's name unless set here.
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
}

/// A block carved out of a larger one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Carve {
    /// The block to carve from (the VPC's).
    pub from: String,
    /// How many bits longer the subnet's prefix is than `from`'s (4: a /16 into /20s).
    pub newbits: u32,
    /// Which of those blocks, from 0.
    pub netnum: u32,
}

/// The `netnum`th block of `newbits` more bits inside `from` (Terraform's cidrsubnet).
pub fn carve(from: &str, newbits: u32, netnum: u32) -> Result<String, String> {
    let (base, len) =
        catalog::ipv4_block(from).ok_or_else(|| format!("{from:?} is not an IPv4 CIDR block"))?;
    let prefix = len + newbits;
    if newbits == 0 || prefix > 32 {
        return Err(format!("a /{len} cannot be carved into /{prefix}s"));
    }
    let count = 1u64 << newbits;
    if u64::from(netnum) >= count {
        return Err(format!(
            "{from} holds {count} blocks of /{prefix} (0 to {}); netnum {netnum} is past them",
            count - 1
        ));
    }
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    let start = (base & mask) | (netnum << (32 - prefix));
    Ok(format!("{}/{prefix}", std::net::Ipv4Addr::from(start)))
}

/// What `aws_subnet` reports after apply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Outputs {
    /// The subnet id (subnet-…).
    #[terrain(derived_from = [])]
    pub id: String,
    /// arn:aws:ec2:REGION:ACCOUNT:subnet/ID.
    #[terrain(derived_from = [])]
    pub arn: String,
    /// The zone's id (use1-az1), the same physical zone in every account.
    #[terrain(derived_from = [])]
    pub availability_zone_id: String,
}

const DESCRIBE: &str = "DescribeSubnets";
const SET: &str = "subnetSet";
/// The roles and the tag each adds.
const ROLES: &[(&str, &str)] = &[
    ("public", "kubernetes.io/role/elb"),
    ("private", "kubernetes.io/role/internal-elb"),
];

/// The tag `role` adds.
fn role_tag(role: Option<&str>) -> Option<&'static str> {
    ROLES
        .iter()
        .find(|(r, _)| Some(*r) == role)
        .map(|(_, t)| *t)
}

fn live_of(region: &str, address: &str, subnet: &Xml, prior: Option<&Spec>) -> Live<AwsSubnet> {
    let text = |name: &str| subnet.text(name).unwrap_or_default().to_string();
    let id = text("subnetId");
    let live_tags = subnet.tags();
    let role = ROLES
        .iter()
        .find(|(_, tag)| live_tags.get(*tag).map(String::as_str) == Some("1"))
        .map(|(r, _)| (*r).to_string());
    let mut tags = ec2::spec_tags(&live_tags, address, prior.map(|p| &p.tags));
    // The role's tag is the role, unless the stack also wrote it as a tag.
    if let Some(tag) = role_tag(role.as_deref()) {
        if !prior.is_some_and(|p| p.tags.contains_key(tag)) {
            tags.remove(tag);
        }
    }
    let arn = subnet
        .text("subnetArn")
        .filter(|a| !a.is_empty())
        .map(str::to_string)
        .unwrap_or_else(|| ec2::arn(region, &text("ownerId"), "subnet", &id));
    Live {
        spec: Spec {
            vpc_id: text("vpcId"),
            cidr: text("cidrBlock"),
            carve: prior.and_then(|p| p.carve.clone()),
            availability_zone: text("availabilityZone"),
            map_public_ip_on_launch: subnet.text("mapPublicIpOnLaunch") == Some("true"),
            role,
            tags,
        },
        outputs: Outputs {
            id: id.clone(),
            arn,
            availability_zone_id: text("availabilityZoneId"),
        },
        id,
    }
}

async fn read_live(
    ec2: &Ec2,
    address: &str,
    id: &str,
    prior: Option<&Spec>,
) -> Result<Option<Live<AwsSubnet>>, ProviderError> {
    Ok(ec2
        .describe_one(DESCRIBE, "SubnetId", id, SET)
        .await?
        .map(|s| live_of(ec2.region(), address, &s, prior)))
}

/// The subnet once EC2 reports it `available`.
async fn wait_available(ctx: &Ctx, ec2: &Ec2, id: &str) -> Result<Xml, ProviderError> {
    super::wait_for(
        ctx,
        "ec2:DescribeSubnets",
        &format!("subnet {id} to become available"),
        std::time::Duration::from_secs(300),
        ec2::POLL,
        || async {
            let subnet = ec2.describe_one(DESCRIBE, "SubnetId", id, SET).await?;
            Ok(subnet.filter(|s| s.text("state") == Some("available")))
        },
    )
    .await
}

/// Brings subnet `live` to `spec` (public addresses on launch, tags) and reads it back.
async fn converge(
    ctx: &Ctx,
    ec2: &Ec2,
    live: &Xml,
    spec: &Spec,
) -> Result<Live<AwsSubnet>, ProviderError> {
    let id = live.text("subnetId").unwrap_or_default();
    let public = live.text("mapPublicIpOnLaunch") == Some("true");
    if public != spec.map_public_ip_on_launch {
        let params = Params::new().set("SubnetId", id).set(
            "MapPublicIpOnLaunch.Value",
            spec.map_public_ip_on_launch.to_string(),
        );
        ec2.call("ModifySubnetAttribute", &params).await?;
    }
    ec2.retag(id, &live.tags(), &wanted_tags(ctx, spec)).await?;
    read_live(ec2, &ctx.address, id, Some(spec))
        .await?
        .ok_or_else(|| gone(id))
}

fn wanted_tags(ctx: &Ctx, spec: &Spec) -> BTreeMap<String, String> {
    let role: Vec<(&str, &str)> = role_tag(spec.role.as_deref())
        .map(|t| (t, "1"))
        .into_iter()
        .collect();
    ec2::wanted_tags(&spec.tags, &role, &ctx.address)
}

fn gone(id: &str) -> ProviderError {
    ProviderError::api(
        "ec2:DescribeSubnets",
        400,
        "InvalidSubnetID.NotFound",
        format!("subnet {id} disappeared while it was being applied"),
    )
}

#[async_trait]
impl Kind for AwsSubnet {
    type Spec = Spec;
    type Outputs = Outputs;
    const KIND: &'static str = "aws_subnet";
    const PROVIDER: &'static str = "aws";
    const WRITES: crate::protocol::Writes = crate::protocol::Writes::FromId;

    fn validate(spec: &Spec, config: &Value) -> Vec<Invalid> {
        let mut out = Vec::new();
        if let Err(m) = catalog::check_ec2_id(&spec.vpc_id, "vpc", "a VPC id") {
            out.push(Invalid::at("vpc_id", m));
        }
        match (&spec.carve, spec.cidr.is_empty()) {
            (Some(_), false) => out.push(Invalid::at(
                "carve",
                "set either `cidr` or `carve`, not both",
            )),
            (None, true) => out.push(Invalid::at(
                "cidr",
                "a subnet needs its block: `cidr = \"10.0.0.0/20\"`, or `carve = { from = …, newbits = …, netnum = … }`",
            )),
            (Some(c), true) => {
                if !crate::protocol::is_unknown(&Value::String(c.from.clone())) {
                    if let Err(m) = carve(&c.from, c.newbits, c.netnum)
                        .and_then(|cidr| catalog::check_vpc_cidr(&cidr))
                    {
                        out.push(Invalid::at("carve", m));
                    }
                }
            }
            (None, false) => {
                if let Err(m) = catalog::check_vpc_cidr(&spec.cidr) {
                    out.push(Invalid::at("cidr", m));
                }
            }
        }
        let zone = &spec.availability_zone;
        let region = crate::usage::aws_region(zone);
        if region == *zone || catalog::region(&region).is_none() {
            out.push(Invalid::at(
                "availability_zone",
                format!("{zone:?} is not an Availability Zone; expected a region and a letter, such as us-east-1a"),
            ));
        } else if let Some(provider) = config::catalog_region(config).filter(|r| *r != region) {
            out.push(Invalid::at(
                "availability_zone",
                format!("{zone} is in {region}, but the provider's region is {provider}"),
            ));
        }
        if let Some(role) = spec.role.as_deref().filter(|r| role_tag(Some(r)).is_none()) {
            out.push(Invalid::at(
                "role",
                format!("{role:?} is not a subnet role; use \"public\" (internet-facing load balancers) or \"private\" (internal ones)"),
            ));
        }
        eks::check_tags_and_config(&spec.tags, config, &mut out);
        out
    }

    /// A carved block is computed now, so the plan shows it and a change of the block
    /// carved from replaces the subnet.
    fn prepare(mut spec: Spec) -> Result<Spec, ProviderError> {
        if let (Some(c), true) = (&spec.carve, spec.cidr.is_empty()) {
            spec.cidr = if crate::protocol::is_unknown(&Value::String(c.from.clone())) {
                crate::protocol::UNKNOWN.to_string()
            } else {
                carve(&c.from, c.newbits, c.netnum)
                    .map_err(|m| ProviderError::invalid("carve", m))?
            };
        }
        Ok(spec)
    }

    /// The block must lie inside the VPC's, when the VPC is in the stack.
    fn validate_peers(spec: &Value, peers: &[Peer]) -> Vec<Invalid> {
        let Some(cidr) = crate::usage::known(&spec["cidr"]) else {
            return Vec::new();
        };
        peers
            .iter()
            .filter(|p| p.kind == "aws_vpc")
            .filter_map(|p| {
                let vpc = crate::usage::known(&p.spec["cidr"])?;
                match catalog::cidr_within(cidr, vpc)? {
                    true => None,
                    false => Some(Invalid::at(
                        "cidr",
                        format!("{cidr} is outside {}'s block {vpc}: a subnet's block must lie inside its VPC's", p.address),
                    )),
                }
            })
            .collect()
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
        let params = Params::new()
            .set("VpcId", &spec.vpc_id)
            .set("CidrBlock", &spec.cidr)
            .set("AvailabilityZone", &spec.availability_zone)
            .tag_specification("subnet", &wanted_tags(ctx, spec));
        let subnet = ec2
            .adopt_or_create(
                (DESCRIBE, SET),
                &ctx.address,
                ("CreateSubnet", &params),
                "subnet",
            )
            .await?;
        let id = subnet.text("subnetId").unwrap_or_default().to_string();
        let live = wait_available(ctx, &ec2, &id).await?;
        converge(ctx, &ec2, &live, spec).await
    }

    async fn update(
        &self,
        ctx: &Ctx,
        id: &str,
        _prior: &Spec,
        spec: &Spec,
    ) -> Result<Live<Self>, ProviderError> {
        let ec2 = Ec2::of(ctx).await?;
        let live = ec2
            .describe_one(DESCRIBE, "SubnetId", id, SET)
            .await?
            .ok_or_else(|| gone(id))?;
        converge(ctx, &ec2, &live, spec).await
    }

    async fn delete(
        &self,
        ctx: &Ctx,
        id: &str,
        _prior: Option<&Spec>,
    ) -> Result<(), ProviderError> {
        let ec2 = Ec2::of(ctx).await?;
        let params = Params::new().set("SubnetId", id);
        match ec2::found(ec2.call("DeleteSubnet", &params).await) {
            Err(e) if ec2::is_dependency_violation(&e) => {
                let held = holders(&ec2, id).await;
                Err(e.with_hint(Hint::Do(held)))
            }
            other => other.map(|_| ()),
        }
    }
}

/// What subnet `id` still holds, as a hint: NAT gateways in it, or else the network
/// interfaces EKS clusters, load balancers and instances put there. Best effort.
async fn holders(ec2: &Ec2, id: &str) -> String {
    let params = Params::new().filter("subnet-id", &[id]);
    let nats: Vec<String> = ec2
        .items("DescribeNatGateways", &params, "natGatewaySet")
        .await
        .unwrap_or_default()
        .iter()
        .filter(|n| !matches!(n.text("state"), Some("deleted" | "failed")))
        .filter_map(|n| ec2::named(n, "natGatewayId"))
        .collect();
    if !nats.is_empty() {
        return format!(
            "{id} holds NAT gateway {}: destroy it first (another stack, or by hand), then destroy again",
            nats.join(", ")
        );
    }
    format!(
        "network interfaces still use {id} (EKS clusters, load balancers, instances): `aws ec2 describe-network-interfaces --filters Name=subnet-id,Values={id}` lists them; destroy what uses them first"
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn blocks_are_carved_as_cidrsubnet_carves_them() {
        assert_eq!(carve("10.0.0.0/16", 4, 0).as_deref(), Ok("10.0.0.0/20"));
        assert_eq!(carve("10.0.0.0/16", 4, 9).as_deref(), Ok("10.0.144.0/20"));
        assert_eq!(carve("10.0.0.0/16", 4, 15).as_deref(), Ok("10.0.240.0/20"));
        assert_eq!(carve("172.31.0.0/16", 8, 3).as_deref(), Ok("172.31.3.0/24"));
        let e = carve("10.0.0.0/16", 4, 16).expect_err("past the end");
        assert!(e.contains("0 to 15"), "{e}");
        assert!(carve("10.0.0.0/30", 4, 0).is_err());
    }

    use super::*;
    use crate::aws::eks::testing::assert_validation;
    use crate::testing::schema_mismatches;
    use serde_json::json;

    fn base() -> Spec {
        Spec {
            vpc_id: "vpc-0a1b2c3d4e5f60001".into(),
            cidr: "10.0.1.0/24".into(),
            carve: None,
            availability_zone: "us-east-1a".into(),
            map_public_ip_on_launch: false,
            role: None,
            tags: BTreeMap::new(),
        }
    }

    #[test]
    fn validation_checks_ids_blocks_zones_and_roles() {
        let with = |f: fn(&mut Spec)| {
            let mut s = base();
            f(&mut s);
            s
        };
        let cases = vec![
            (base(), "", ""),
            (with(|s| s.role = Some("public".into())), "", ""),
            (with(|s| s.role = Some("private".into())), "", ""),
            (
                with(|s| s.role = Some("internal".into())),
                "role",
                "\"internal\" is not a subnet role",
            ),
            (
                with(|s| s.vpc_id = "main".into()),
                "vpc_id",
                "is not a VPC id",
            ),
            (with(|s| s.cidr = "10.0.1.0/29".into()), "cidr", "is a /29"),
            (
                with(|s| s.cidr = "10.0.1.0/8".into()),
                "cidr",
                "host bits set",
            ),
            (
                with(|s| s.availability_zone = "us-east-1".into()),
                "availability_zone",
                "not an Availability Zone",
            ),
            (
                with(|s| s.availability_zone = "mars-east-1a".into()),
                "availability_zone",
                "not an Availability Zone",
            ),
            (
                with(|s| s.availability_zone = "eu-west-1a".into()),
                "availability_zone",
                "eu-west-1a is in eu-west-1, but the provider's region is us-east-1",
            ),
        ];
        assert_validation::<AwsSubnet>(cases, &json!({"region": "us-east-1"}));
    }

    fn peer(cidr: &str) -> Peer {
        Peer {
            kind: "aws_vpc".into(),
            address: "aws_vpc.main".into(),
            spec: json!({"cidr": cidr}),
        }
    }

    #[test]
    fn a_subnet_outside_its_vpc_is_refused_naming_both_blocks() {
        let spec = |cidr: &str| json!({"vpc_id": crate::protocol::UNKNOWN, "cidr": cidr});
        assert!(AwsSubnet::validate_peers(&spec("10.0.1.0/24"), &[peer("10.0.0.0/16")]).is_empty());
        assert!(AwsSubnet::validate_peers(&spec("10.0.0.0/16"), &[peer("10.0.0.0/16")]).is_empty());
        let out = AwsSubnet::validate_peers(&spec("10.1.0.0/24"), &[peer("10.0.0.0/16")]);
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(out[0].path, ["cidr"]);
        assert_eq!(
            out[0].message,
            "10.1.0.0/24 is outside aws_vpc.main's block 10.0.0.0/16: a subnet's block must lie inside its VPC's"
        );
        // Larger than the VPC: outside too.
        assert_eq!(
            AwsSubnet::validate_peers(&spec("10.0.0.0/16"), &[peer("10.0.0.0/20")]).len(),
            1
        );
        // Unknown blocks are checked at apply.
        assert!(
            AwsSubnet::validate_peers(&spec("10.1.0.0/24"), &[peer(crate::protocol::UNKNOWN)])
                .is_empty()
        );
        assert!(
            AwsSubnet::validate_peers(&spec(crate::protocol::UNKNOWN), &[peer("10.0.0.0/16")])
                .is_empty()
        );
    }

    #[test]
    fn the_role_reads_back_from_its_tag() {
        let node = |tags: &[(&str, &str)]| Xml {
            name: "item".into(),
            text: String::new(),
            children: vec![Xml {
                name: "tagSet".into(),
                text: String::new(),
                children: tags
                    .iter()
                    .map(|(k, v)| Xml {
                        name: "item".into(),
                        text: String::new(),
                        children: vec![
                            Xml {
                                name: "key".into(),
                                text: (*k).into(),
                                children: vec![],
                            },
                            Xml {
                                name: "value".into(),
                                text: (*v).into(),
                                children: vec![],
                            },
                        ],
                    })
                    .collect(),
            }],
        };
        let tags = [
            ("kubernetes.io/role/internal-elb", "1"),
            ("Name", "a"),
            ("managed-by", "terrain"),
            ("terrain-address", "aws_subnet.a"),
            ("team", "ml"),
        ];
        let live = live_of("us-east-1", "aws_subnet.a", &node(&tags), None);
        assert_eq!(live.spec.role.as_deref(), Some("private"));
        assert_eq!(
            live.spec.tags,
            BTreeMap::from([("team".to_string(), "ml".to_string())])
        );
    }

    #[test]
    fn schema_matches_spec_and_outputs() {
        let full = Spec {
            role: Some("public".into()),
            map_public_ip_on_launch: true,
            tags: BTreeMap::from([("team".to_string(), "ml".to_string())]),
            carve: Some(Carve {
                from: "10.0.0.0/16".into(),
                newbits: 8,
                netnum: 1,
            }),
            ..base()
        };
        let outputs = Outputs {
            id: "subnet-0a1b2c3d4e5f60001".into(),
            arn: "arn:aws:ec2:us-east-1:123456789012:subnet/subnet-0a1b2c3d4e5f60001".into(),
            availability_zone_id: "use1-az1".into(),
        };
        assert_eq!(
            schema_mismatches::<AwsSubnet>(&full, &outputs),
            Vec::<String>::new()
        );
    }
}
