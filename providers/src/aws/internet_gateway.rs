//! The `aws_internet_gateway` kind: an internet gateway attached to a VPC, the target of
//! public subnets' default route.
//!
//! The VPC it is attached to changes in place (DetachInternetGateway from the old one,
//! AttachInternetGateway to the new), tags through CreateTags and DeleteTags; delete
//! detaches it first, as EC2 refuses to delete an attached gateway. A create first looks
//! for a gateway carrying this address's tags and adopts it.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::catalog;
use super::ec2::{self, Ec2, Params, Xml};
use super::eks::{self, code_of};
use crate::schema::Fields;
use crate::{Ctx, Invalid, Kind, Live, ProviderError};

/// The kind `aws_internet_gateway`.
#[derive(Debug, Clone, Copy, Default)]
pub struct AwsInternetGateway;

/// What a stack writes for an `aws_internet_gateway`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    /// The VPC the gateway is attached to (an aws_vpc's id); changing it moves the
    /// gateway in place. Left out, the gateway stays detached.
    pub vpc_id: Option<String>,
    /// AWS tags on the gateway; a Name tag is the resource's name unless set here.
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
}

/// What `aws_internet_gateway` reports after apply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Outputs {
    /// The gateway id (igw-…), a route's gateway_id.
    #[terrain(derived_from = [])]
    pub id: String,
}

const DESCRIBE: &str = "DescribeInternetGateways";
const SET: &str = "internetGatewaySet";
const ID_PARAM: &str = "InternetGatewayId";

/// How long a detach is retried while EC2 says the VPC still has public addresses
/// mapped (a NAT gateway being deleted releases its own).
const DETACH_TIMEOUT: Duration = Duration::from_secs(600);

/// The VPCs the gateway is attached to (attaching or attached).
fn attached(gateway: &Xml) -> Vec<String> {
    gateway
        .items("attachmentSet")
        .filter(|a| !matches!(a.text("state"), Some("detached" | "detaching")))
        .filter_map(|a| a.text("vpcId").map(str::to_string))
        .collect()
}

fn live_of(address: &str, gateway: &Xml, prior: Option<&Spec>) -> Live<AwsInternetGateway> {
    let id = gateway
        .text("internetGatewayId")
        .unwrap_or_default()
        .to_string();
    Live {
        spec: Spec {
            vpc_id: attached(gateway).into_iter().next(),
            tags: ec2::spec_tags(&gateway.tags(), address, prior.map(|p| &p.tags)),
        },
        outputs: Outputs { id: id.clone() },
        id,
    }
}

async fn describe(ec2: &Ec2, id: &str) -> Result<Option<Xml>, ProviderError> {
    ec2.describe_one(DESCRIBE, ID_PARAM, id, SET).await
}

/// Detaches gateway `id` from `vpc`, retrying while EC2 answers DependencyViolation;
/// a gateway already detached is fine.
async fn detach(ctx: &Ctx, ec2: &Ec2, id: &str, vpc: &str) -> Result<(), ProviderError> {
    let params = Params::new().set(ID_PARAM, id).set("VpcId", vpc);
    super::wait_for(
        ctx,
        "ec2:DetachInternetGateway",
        &format!(
            "internet gateway {id} to detach from {vpc} (public addresses still mapped in the VPC)"
        ),
        DETACH_TIMEOUT,
        ec2::POLL,
        || async {
            match ec2.call("DetachInternetGateway", &params).await {
                Ok(_) => Ok(Some(())),
                Err(e) if ec2::is_not_found(&e) || code_of(&e) == "Gateway.NotAttached" => {
                    Ok(Some(()))
                }
                Err(e) if code_of(&e) == "DependencyViolation" => Ok(None),
                Err(e) => Err(e),
            }
        },
    )
    .await
}

/// Brings gateway `live` to `spec` (its VPC, its tags) and reads it back.
async fn converge(
    ctx: &Ctx,
    ec2: &Ec2,
    live: &Xml,
    spec: &Spec,
) -> Result<Live<AwsInternetGateway>, ProviderError> {
    let id = live.text("internetGatewayId").unwrap_or_default();
    let now = attached(live);
    for vpc in now.iter().filter(|v| spec.vpc_id.as_ref() != Some(*v)) {
        detach(ctx, ec2, id, vpc).await?;
    }
    if let Some(vpc) = spec.vpc_id.as_ref().filter(|v| !now.contains(v)) {
        let params = Params::new().set(ID_PARAM, id).set("VpcId", vpc);
        ec2.call("AttachInternetGateway", &params).await?;
    }
    let wanted = ec2::wanted_tags(&spec.tags, &[], &ctx.address);
    ec2.retag(id, &live.tags(), &wanted).await?;
    let read = describe(ec2, id).await?.ok_or_else(|| gone(id))?;
    Ok(live_of(&ctx.address, &read, Some(spec)))
}

fn gone(id: &str) -> ProviderError {
    ProviderError::api(
        "ec2:DescribeInternetGateways",
        400,
        "InvalidInternetGatewayID.NotFound",
        format!("internet gateway {id} disappeared while it was being applied"),
    )
}

#[async_trait]
impl Kind for AwsInternetGateway {
    type Spec = Spec;
    type Outputs = Outputs;
    const KIND: &'static str = "aws_internet_gateway";
    const PROVIDER: &'static str = "aws";
    const WRITES: crate::protocol::Writes = crate::protocol::Writes::FromId;

    fn validate(spec: &Spec, config: &Value) -> Vec<Invalid> {
        let mut out = Vec::new();
        if let Some(vpc) = &spec.vpc_id {
            if let Err(m) = catalog::check_ec2_id(vpc, "vpc", "a VPC id") {
                out.push(Invalid::at("vpc_id", m));
            }
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
        Ok(describe(&ec2, id)
            .await?
            .map(|g| live_of(&ctx.address, &g, prior)))
    }

    async fn create(&self, ctx: &Ctx, spec: &Spec) -> Result<Live<Self>, ProviderError> {
        let ec2 = Ec2::of(ctx).await?;
        let tags = ec2::wanted_tags(&spec.tags, &[], &ctx.address);
        let params = Params::new().tag_specification("internet-gateway", &tags);
        let live = ec2
            .adopt_or_create(
                (DESCRIBE, SET),
                &ctx.address,
                ("CreateInternetGateway", &params),
                "internetGateway",
            )
            .await?;
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
        let live = describe(&ec2, id).await?.ok_or_else(|| gone(id))?;
        converge(ctx, &ec2, &live, spec).await
    }

    async fn delete(
        &self,
        ctx: &Ctx,
        id: &str,
        _prior: Option<&Spec>,
    ) -> Result<(), ProviderError> {
        let ec2 = Ec2::of(ctx).await?;
        let Some(live) = describe(&ec2, id).await? else {
            return Ok(());
        };
        for vpc in attached(&live) {
            detach(ctx, &ec2, id, &vpc).await?;
        }
        let params = Params::new().set(ID_PARAM, id);
        ec2::found(ec2.call("DeleteInternetGateway", &params).await).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aws::eks::testing::assert_validation;
    use crate::testing::schema_mismatches;
    use serde_json::json;

    #[test]
    fn validation_checks_the_vpc_id() {
        let spec = |vpc: Option<&str>| Spec {
            vpc_id: vpc.map(str::to_string),
            tags: BTreeMap::new(),
        };
        let cases = vec![
            (spec(Some("vpc-0a1b2c3d4e5f60001")), "", ""),
            (spec(None), "", ""),
            (
                spec(Some("igw-0a1b2c3d4e5f60001")),
                "vpc_id",
                "is not a VPC id",
            ),
        ];
        assert_validation::<AwsInternetGateway>(cases, &json!({"region": "us-east-1"}));
    }

    #[test]
    fn schema_matches_spec_and_outputs() {
        let full = Spec {
            vpc_id: Some("vpc-0a1b2c3d4e5f60001".into()),
            tags: BTreeMap::from([("team".to_string(), "ml".to_string())]),
        };
        let outputs = Outputs {
            id: "igw-0a1b2c3d4e5f60001".into(),
        };
        assert_eq!(
            schema_mismatches::<AwsInternetGateway>(&full, &outputs),
            Vec::<String>::new()
        );
    }
}
