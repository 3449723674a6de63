//! The `aws_route_table` kind: a route table of a VPC, its routes (each to an internet
//! gateway or a NAT gateway) and the subnets associated with it.
//!
//! Routes and associations converge in place: CreateRoute, ReplaceRoute and DeleteRoute
//! by destination; AssociateRouteTable and DisassociateRouteTable by subnet. The `local`
//! route EC2 adds for the VPC's own block is implicit: never listed, never changed.
//! Delete disassociates the subnets first, as EC2 refuses to delete an associated
//! table. A create first looks for a table carrying this address's tags and adopts it.

use std::collections::BTreeMap;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::ec2::{self, Ec2, Params, Xml};
use super::{catalog, eks};
use crate::schema::Fields;
use crate::{Ctx, Invalid, Kind, Live, ProviderError};

/// The kind `aws_route_table`.
#[derive(Debug, Clone, Copy, Default)]
pub struct AwsRouteTable;

/// One route: a destination block and exactly one target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Route {
    /// The destination IPv4 block (0.0.0.0/0 for everything else).
    pub cidr: String,
    /// An internet gateway (igw-…) or virtual private gateway (vgw-…) to send it to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gateway_id: Option<String>,
    /// A NAT gateway (nat-…) to send it to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nat_gateway_id: Option<String>,
}

/// What a stack writes for an `aws_route_table`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    /// The VPC the table belongs to (an aws_vpc's id).
    #[terrain(force_new)]
    pub vpc_id: String,
    /// The routes besides the VPC's implicit local route, one per destination.
    #[serde(default)]
    pub routes: Vec<Route>,
    /// The subnets that use this table (each subnet uses one table; the others use the
    /// VPC's main table).
    #[serde(default)]
    pub subnet_ids: Vec<String>,
    /// AWS tags on the table; a Name tag is the resource's name unless set here.
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
}

/// What `aws_route_table` reports after apply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Outputs {
    /// The route table id (rtb-…).
    #[terrain(derived_from = [])]
    pub id: String,
    /// The association id (rtbassoc-…) of each associated subnet, by subnet id.
    #[terrain(derived_from = ["subnet_ids"])]
    pub association_ids: BTreeMap<String, String>,
}

const DESCRIBE: &str = "DescribeRouteTables";
const SET: &str = "routeTableSet";
const ID_PARAM: &str = "RouteTableId";

/// A route's target, as (gateway, NAT gateway).
type Target = (Option<String>, Option<String>);

/// The table's routes besides the local one, by destination.
fn routes_of(table: &Xml) -> BTreeMap<String, Target> {
    table
        .items("routeSet")
        .filter(|r| r.text("gatewayId") != Some("local"))
        .filter(|r| !matches!(r.text("origin"), Some("EnableVgwRoutePropagation")))
        .filter_map(|r| {
            let cidr = r.text("destinationCidrBlock").filter(|c| !c.is_empty())?;
            let of = |name: &str| r.text(name).filter(|v| !v.is_empty()).map(str::to_string);
            Some((cidr.to_string(), (of("gatewayId"), of("natGatewayId"))))
        })
        .collect()
}

/// The table's subnet associations: subnet id → association id.
fn associations_of(table: &Xml) -> BTreeMap<String, String> {
    table
        .items("associationSet")
        .filter(|a| a.text("main") != Some("true"))
        .filter(|a| {
            !matches!(
                a.at(&["associationState", "state"]),
                Some("disassociated" | "disassociating" | "failed")
            )
        })
        .filter_map(|a| {
            Some((
                a.text("subnetId").filter(|s| !s.is_empty())?.to_string(),
                a.text("routeTableAssociationId")?.to_string(),
            ))
        })
        .collect()
}

/// `items` in the order `prior` lists them (by `key`), the others after in their own.
fn in_prior_order<T, K: PartialEq>(
    mut items: Vec<T>,
    prior: &[K],
    key: impl Fn(&T) -> &K,
) -> Vec<T> {
    items.sort_by_key(|i| prior.iter().position(|p| p == key(i)).unwrap_or(usize::MAX));
    items
}

fn live_of(address: &str, table: &Xml, prior: Option<&Spec>) -> Live<AwsRouteTable> {
    let id = table.text("routeTableId").unwrap_or_default().to_string();
    let routes: Vec<Route> = routes_of(table)
        .into_iter()
        .map(|(cidr, (gateway_id, nat_gateway_id))| Route {
            cidr,
            gateway_id,
            nat_gateway_id,
        })
        .collect();
    let prior_cidrs: Vec<String> = prior
        .map(|p| p.routes.iter().map(|r| r.cidr.clone()).collect())
        .unwrap_or_default();
    let associations = associations_of(table);
    let subnets: Vec<String> = associations.keys().cloned().collect();
    let prior_subnets = prior.map(|p| p.subnet_ids.clone()).unwrap_or_default();
    Live {
        spec: Spec {
            vpc_id: table.text("vpcId").unwrap_or_default().to_string(),
            routes: in_prior_order(routes, &prior_cidrs, |r| &r.cidr),
            subnet_ids: in_prior_order(subnets, &prior_subnets, |s| s),
            tags: ec2::spec_tags(&table.tags(), address, prior.map(|p| &p.tags)),
        },
        outputs: Outputs {
            id: id.clone(),
            association_ids: associations,
        },
        id,
    }
}

async fn describe(ec2: &Ec2, id: &str) -> Result<Option<Xml>, ProviderError> {
    ec2.describe_one(DESCRIBE, ID_PARAM, id, SET).await
}

/// The parameters naming a route's destination and target.
fn route_params(id: &str, route: &Route) -> Params {
    let mut p = Params::new()
        .set(ID_PARAM, id)
        .set("DestinationCidrBlock", &route.cidr);
    if let Some(g) = &route.gateway_id {
        p = p.set("GatewayId", g);
    }
    if let Some(n) = &route.nat_gateway_id {
        p = p.set("NatGatewayId", n);
    }
    p
}

/// Creates, replaces and deletes routes until the table's are `wanted`.
async fn converge_routes(
    ec2: &Ec2,
    id: &str,
    live: &Xml,
    wanted: &[Route],
) -> Result<(), ProviderError> {
    let now = routes_of(live);
    for route in wanted {
        let target = (route.gateway_id.clone(), route.nat_gateway_id.clone());
        match now.get(&route.cidr) {
            None => {
                ec2.call("CreateRoute", &route_params(id, route)).await?;
            }
            Some(t) if *t != target => {
                ec2.call("ReplaceRoute", &route_params(id, route)).await?;
            }
            Some(_) => {}
        }
    }
    for cidr in now.keys().filter(|c| !wanted.iter().any(|r| &r.cidr == *c)) {
        let params = Params::new()
            .set(ID_PARAM, id)
            .set("DestinationCidrBlock", cidr);
        ec2::found(ec2.call("DeleteRoute", &params).await)?;
    }
    Ok(())
}

/// Associates and disassociates subnets until the table's are `wanted`.
async fn converge_associations(
    ec2: &Ec2,
    id: &str,
    live: &Xml,
    wanted: &[String],
) -> Result<(), ProviderError> {
    let now = associations_of(live);
    for (subnet, association) in &now {
        if !wanted.contains(subnet) {
            let params = Params::new().set("AssociationId", association);
            ec2::found(ec2.call("DisassociateRouteTable", &params).await)?;
        }
    }
    for subnet in wanted.iter().filter(|s| !now.contains_key(*s)) {
        let params = Params::new().set(ID_PARAM, id).set("SubnetId", subnet);
        ec2.call("AssociateRouteTable", &params).await?;
    }
    Ok(())
}

/// Brings table `live` to `spec` and reads it back.
async fn converge(
    ctx: &Ctx,
    ec2: &Ec2,
    live: &Xml,
    spec: &Spec,
) -> Result<Live<AwsRouteTable>, ProviderError> {
    let id = live.text("routeTableId").unwrap_or_default();
    converge_routes(ec2, id, live, &spec.routes).await?;
    converge_associations(ec2, id, live, &spec.subnet_ids).await?;
    let wanted = ec2::wanted_tags(&spec.tags, &[], &ctx.address);
    ec2.retag(id, &live.tags(), &wanted).await?;
    let read = describe(ec2, id).await?.ok_or_else(|| gone(id))?;
    Ok(live_of(&ctx.address, &read, Some(spec)))
}

fn gone(id: &str) -> ProviderError {
    ProviderError::api(
        "ec2:DescribeRouteTables",
        400,
        "InvalidRouteTableID.NotFound",
        format!("route table {id} disappeared while it was being applied"),
    )
}

/// Problems with one route, at `routes.N`.
fn check_route(i: usize, route: &Route, out: &mut Vec<Invalid>) {
    let at = |field: &str| format!("routes.{i}.{field}");
    if let Err(m) = catalog::check_ipv4_cidr(&route.cidr) {
        out.push(Invalid::at(&at("cidr"), m));
    }
    match (&route.gateway_id, &route.nat_gateway_id) {
        (None, None) => out.push(Invalid::at(
            &format!("routes.{i}"),
            format!(
                "the route to {} has no target: set gateway_id or nat_gateway_id",
                route.cidr
            ),
        )),
        (Some(_), Some(_)) => out.push(Invalid::at(
            &format!("routes.{i}"),
            format!(
                "the route to {} has two targets: set only one of gateway_id and nat_gateway_id",
                route.cidr
            ),
        )),
        (Some(g), None) if g == "local" => out.push(Invalid::at(
            &at("gateway_id"),
            "the local route is implicit in every route table: leave it out",
        )),
        (Some(g), None) => {
            if catalog::check_ec2_id(g, "igw", "").is_err()
                && catalog::check_ec2_id(g, "vgw", "").is_err()
            {
                out.push(Invalid::at(
                    &at("gateway_id"),
                    format!("{g:?} is not an internet gateway (igw-…) or virtual private gateway (vgw-…) id"),
                ));
            }
        }
        (None, Some(n)) => {
            if let Err(m) = catalog::check_ec2_id(n, "nat", "a NAT gateway id") {
                out.push(Invalid::at(&at("nat_gateway_id"), m));
            }
        }
    }
}

#[async_trait]
impl Kind for AwsRouteTable {
    type Spec = Spec;
    type Outputs = Outputs;
    const KIND: &'static str = "aws_route_table";
    const PROVIDER: &'static str = "aws";
    const WRITES: crate::protocol::Writes = crate::protocol::Writes::FromId;

    fn validate(spec: &Spec, config: &Value) -> Vec<Invalid> {
        let mut out = Vec::new();
        if let Err(m) = catalog::check_ec2_id(&spec.vpc_id, "vpc", "a VPC id") {
            out.push(Invalid::at("vpc_id", m));
        }
        for (i, route) in spec.routes.iter().enumerate() {
            check_route(i, route, &mut out);
            if spec.routes[..i].iter().any(|r| r.cidr == route.cidr) {
                out.push(Invalid::at(
                    &format!("routes.{i}.cidr"),
                    format!(
                        "{} has two routes; a table has one per destination",
                        route.cidr
                    ),
                ));
            }
        }
        eks::check_subnet_ids(&spec.subnet_ids, &mut out);
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
            .map(|t| live_of(&ctx.address, &t, prior)))
    }

    async fn create(&self, ctx: &Ctx, spec: &Spec) -> Result<Live<Self>, ProviderError> {
        let ec2 = Ec2::of(ctx).await?;
        let tags = ec2::wanted_tags(&spec.tags, &[], &ctx.address);
        let params = Params::new()
            .set("VpcId", &spec.vpc_id)
            .tag_specification("route-table", &tags);
        let live = ec2
            .adopt_or_create(
                (DESCRIBE, SET),
                &ctx.address,
                ("CreateRouteTable", &params),
                "routeTable",
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
        converge_associations(&ec2, id, &live, &[]).await?;
        let params = Params::new().set(ID_PARAM, id);
        ec2::found(ec2.call("DeleteRouteTable", &params).await).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aws::eks::testing::assert_validation;
    use crate::testing::schema_mismatches;
    use serde_json::json;

    fn route(cidr: &str, gateway: Option<&str>, nat: Option<&str>) -> Route {
        Route {
            cidr: cidr.into(),
            gateway_id: gateway.map(str::to_string),
            nat_gateway_id: nat.map(str::to_string),
        }
    }

    fn base() -> Spec {
        Spec {
            vpc_id: "vpc-0a1b2c3d4e5f60001".into(),
            routes: vec![route("0.0.0.0/0", Some("igw-0a1b2c3d4e5f60001"), None)],
            subnet_ids: vec!["subnet-0a1b2c3d4e5f60001".into()],
            tags: BTreeMap::new(),
        }
    }

    #[test]
    fn validation_wants_exactly_one_target_per_route() {
        let with = |routes: Vec<Route>| Spec { routes, ..base() };
        let cases = vec![
            (base(), "", ""),
            (
                with(vec![route(
                    "0.0.0.0/0",
                    None,
                    Some("nat-0a1b2c3d4e5f60001"),
                )]),
                "",
                "",
            ),
            (
                with(vec![route("0.0.0.0/0", None, None)]),
                "routes.0",
                "the route to 0.0.0.0/0 has no target",
            ),
            (
                with(vec![route(
                    "0.0.0.0/0",
                    Some("igw-0a1b2c3d4e5f60001"),
                    Some("nat-0a1b2c3d4e5f60001"),
                )]),
                "routes.0",
                "has two targets",
            ),
            (
                with(vec![route("10.0.0.0/16", Some("local"), None)]),
                "routes.0.gateway_id",
                "the local route is implicit",
            ),
            (
                with(vec![route(
                    "0.0.0.0/0",
                    Some("nat-0a1b2c3d4e5f60001"),
                    None,
                )]),
                "routes.0.gateway_id",
                "is not an internet gateway",
            ),
            (
                with(vec![route(
                    "0.0.0.0/0",
                    None,
                    Some("igw-0a1b2c3d4e5f60001"),
                )]),
                "routes.0.nat_gateway_id",
                "is not a NAT gateway id",
            ),
            (
                with(vec![route(
                    "0.0.0.1/0",
                    Some("igw-0a1b2c3d4e5f60001"),
                    None,
                )]),
                "routes.0.cidr",
                "host bits set",
            ),
            (
                with(vec![
                    route("0.0.0.0/0", Some("igw-0a1b2c3d4e5f60001"), None),
                    route("0.0.0.0/0", None, Some("nat-0a1b2c3d4e5f60001")),
                ]),
                "routes.1.cidr",
                "has two routes",
            ),
            (
                Spec {
                    subnet_ids: vec!["a".into()],
                    ..base()
                },
                "subnet_ids.0",
                "is not a subnet id",
            ),
            (
                Spec {
                    vpc_id: "x".into(),
                    ..base()
                },
                "vpc_id",
                "is not a VPC id",
            ),
        ];
        assert_validation::<AwsRouteTable>(cases, &json!({"region": "us-east-1"}));
    }

    #[test]
    fn live_routes_leave_out_the_local_one_and_follow_the_prior_order() {
        let xml = r#"<item><routeTableId>rtb-1</routeTableId><vpcId>vpc-1</vpcId>
            <routeSet>
              <item><destinationCidrBlock>10.0.0.0/16</destinationCidrBlock><gatewayId>local</gatewayId></item>
              <item><destinationCidrBlock>0.0.0.0/0</destinationCidrBlock><natGatewayId>nat-1</natGatewayId></item>
              <item><destinationCidrBlock>192.168.0.0/16</destinationCidrBlock><gatewayId>igw-1</gatewayId></item>
            </routeSet>
            <associationSet>
              <item><routeTableAssociationId>rtbassoc-b</routeTableAssociationId><subnetId>subnet-b</subnetId><main>false</main></item>
              <item><routeTableAssociationId>rtbassoc-a</routeTableAssociationId><subnetId>subnet-a</subnetId><main>false</main></item>
            </associationSet></item>"#;
        let table = Xml::parse(xml).expect("xml");
        let prior = Spec {
            vpc_id: "vpc-1".into(),
            routes: vec![
                route("192.168.0.0/16", Some("igw-1"), None),
                route("0.0.0.0/0", None, Some("nat-1")),
            ],
            subnet_ids: vec!["subnet-b".into(), "subnet-a".into()],
            tags: BTreeMap::new(),
        };
        let live = live_of("aws_route_table.private", &table, Some(&prior));
        assert_eq!(live.spec, prior);
        assert_eq!(
            live.outputs.association_ids,
            BTreeMap::from([
                ("subnet-a".to_string(), "rtbassoc-a".to_string()),
                ("subnet-b".to_string(), "rtbassoc-b".to_string()),
            ])
        );
    }

    #[test]
    fn schema_matches_spec_and_outputs() {
        let full = Spec {
            tags: BTreeMap::from([("team".to_string(), "ml".to_string())]),
            ..base()
        };
        let outputs = Outputs {
            id: "rtb-0a1b2c3d4e5f60001".into(),
            association_ids: BTreeMap::from([(
                "subnet-0a1b2c3d4e5f60001".to_string(),
                "rtbassoc-0a1b2c3d4e5f60001".to_string(),
            )]),
        };
        assert_eq!(
            schema_mismatches::<AwsRouteTable>(&full, &outputs),
            Vec::<String>::new()
        );
    }
}
