//! The VPC network kinds (`aws_vpc`, `aws_subnet`, `aws_internet_gateway`,
//! `aws_nat_gateway`, `aws_route_table`) end to end against moto, driven through the
//! untyped adapter as the engine drives them, so the EC2 query calls, their parameters
//! and the XML answers are checked against someone else's idea of EC2.
//!
//! For every kind: create → read back equals the spec → update in place → read back →
//! delete → read is None → deleting again succeeds. A create repeated from the same
//! address (an apply killed after the create call) adopts what the first one made, so
//! each object exists once; a VPC delete while a subnet remains fails naming the call
//! and EC2's DependencyViolation.

use crate::support::aws as support;

use serde_json::{json, Value};
use terrain_providers::aws::ec2::{Ec2, Params};
use terrain_providers::aws::internet_gateway::AwsInternetGateway;
use terrain_providers::aws::nat_gateway::AwsNatGateway;
use terrain_providers::aws::route_table::AwsRouteTable;
use terrain_providers::aws::subnet::AwsSubnet;
use terrain_providers::aws::vpc::AwsVpc;
use terrain_providers::{Adapter, Ctx, Observed, ProviderError, Resource};

/// A spec as plans compare it: defaults filled, absent and null the same.
fn planned(kind: &dyn Resource, spec: &Value) -> Value {
    without_nulls(&kind.schema().with_defaults(spec))
}

fn without_nulls(v: &Value) -> Value {
    match v {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), without_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_nulls).collect()),
        other => other.clone(),
    }
}

/// Creates `spec` at `ctx`'s address, checks it validates and reads back as itself.
async fn create(kind: &dyn Resource, ctx: &Ctx, spec: &Value) -> Result<Observed, ProviderError> {
    let full = kind.schema().with_defaults(spec);
    assert_eq!(kind.validate(&full, &ctx.config), vec![], "{spec}");
    let made = kind.create(ctx, &full).await?;
    assert_eq!(
        without_nulls(&made.spec),
        planned(kind, spec),
        "{}",
        ctx.address
    );
    read_back(kind, ctx, &made.id, spec).await?;
    Ok(made)
}

/// Updates `id` from `prior` to `spec` in place; reads it back.
async fn update(
    kind: &dyn Resource,
    ctx: &Ctx,
    id: &str,
    prior: &Value,
    spec: &Value,
) -> Result<Value, ProviderError> {
    let schema = kind.schema();
    let after = kind
        .update(
            ctx,
            id,
            &schema.with_defaults(prior),
            &schema.with_defaults(spec),
        )
        .await?;
    assert_eq!(
        without_nulls(&after.spec),
        planned(kind, spec),
        "{}",
        ctx.address
    );
    read_back(kind, ctx, id, spec).await
}

/// Reads `id` and checks the live spec is what the stack asked for; its outputs.
async fn read_back(
    kind: &dyn Resource,
    ctx: &Ctx,
    id: &str,
    spec: &Value,
) -> Result<Value, ProviderError> {
    let wanted = kind.schema().with_defaults(spec);
    let observed = kind
        .read(ctx, id, &wanted)
        .await?
        .unwrap_or_else(|| panic!("{id} exists"));
    assert_eq!(observed.id, id);
    assert_eq!(
        without_nulls(&observed.spec),
        planned(kind, spec),
        "{id} reads back as its spec"
    );
    Ok(observed.outputs)
}

/// Deletes `id`, checks it is gone, and that deleting again succeeds.
async fn delete(
    kind: &dyn Resource,
    ctx: &Ctx,
    id: &str,
    spec: &Value,
) -> Result<(), ProviderError> {
    let prior = kind.schema().with_defaults(spec);
    kind.delete(ctx, id, &prior).await?;
    assert!(kind.read(ctx, id, &prior).await?.is_none(), "{id} is gone");
    kind.delete(ctx, id, &prior).await?;
    Ok(())
}

fn s(v: &Value) -> String {
    v.as_str()
        .unwrap_or_else(|| panic!("a string: {v}"))
        .to_string()
}

#[tokio::test]
async fn vpc_and_subnets_live_update_in_place_and_go_in_order() -> Result<(), ProviderError> {
    let moto = support::Moto::start();
    let config = support::config(&moto.url);
    let vpcs = Adapter::new(AwsVpc);
    let subnets = Adapter::new(AwsSubnet);

    let vpc_ctx = support::ctx("aws_vpc.main", config.clone());
    let vpc = json!({"cidr": "10.0.0.0/16", "tags": {"team": "ml"}});
    let made = create(&vpcs, &vpc_ctx, &vpc).await?;
    let vpc_id = made.id.clone();
    assert!(vpc_id.starts_with("vpc-"), "{vpc_id}");
    assert_eq!(made.outputs["id"], vpc_id.as_str());
    assert!(
        s(&made.outputs["main_route_table_id"]).starts_with("rtb-"),
        "{}",
        made.outputs
    );
    let owner = s(&made.outputs["owner_id"]);
    assert_eq!(
        made.outputs["arn"],
        format!("arn:aws:ec2:us-east-1:{owner}:vpc/{vpc_id}")
    );
    // The console's Name is the resource's name; it does not show in the spec.
    let ec2 = Ec2::of(&vpc_ctx).await?;
    let tagged = ec2.tagged("DescribeVpcs", "vpcSet", "aws_vpc.main").await?;
    assert_eq!(tagged.len(), 1);
    assert_eq!(
        tagged[0].tags().get("Name").map(String::as_str),
        Some("main")
    );

    // DNS hostnames off, a tag changed: in place.
    let vpc2 =
        json!({"cidr": "10.0.0.0/16", "enable_dns_hostnames": false, "tags": {"team": "research"}});
    let outputs = update(&vpcs, &vpc_ctx, &vpc_id, &vpc, &vpc2).await?;
    assert_eq!(outputs, made.outputs, "outputs follow no updatable field");

    // A public subnet for load balancers, then private and mapping public addresses.
    let subnet_ctx = support::ctx("aws_subnet.a", config.clone());
    let subnet = json!({"vpc_id": vpc_id, "cidr": "10.0.1.0/24", "availability_zone": "us-east-1a", "role": "public"});
    let sub = create(&subnets, &subnet_ctx, &subnet).await?;
    assert!(
        s(&sub.outputs["arn"]).ends_with(&format!(":subnet/{}", sub.id)),
        "{}",
        sub.outputs
    );
    assert!(
        !s(&sub.outputs["availability_zone_id"]).is_empty(),
        "{}",
        sub.outputs
    );
    let tags = ec2
        .tagged("DescribeSubnets", "subnetSet", "aws_subnet.a")
        .await?[0]
        .tags();
    assert_eq!(
        tags.get("kubernetes.io/role/elb").map(String::as_str),
        Some("1")
    );
    let subnet2 = json!({"vpc_id": vpc_id, "cidr": "10.0.1.0/24", "availability_zone": "us-east-1a", "role": "private", "map_public_ip_on_launch": true, "tags": {"tier": "app"}});
    update(&subnets, &subnet_ctx, &sub.id, &subnet, &subnet2).await?;
    let tags = ec2
        .tagged("DescribeSubnets", "subnetSet", "aws_subnet.a")
        .await?[0]
        .tags();
    assert_eq!(
        tags.get("kubernetes.io/role/internal-elb")
            .map(String::as_str),
        Some("1")
    );
    assert!(!tags.contains_key("kubernetes.io/role/elb"), "{tags:?}");

    // The VPC cannot go while its subnet remains: EC2 says why, naming the call.
    let refused = vpcs
        .delete(&vpc_ctx, &vpc_id, &vpcs.schema().with_defaults(&vpc2))
        .await
        .expect_err("a subnet remains");
    assert!(
        matches!(&refused, ProviderError::Api { call, code, .. } if call == "ec2:DeleteVpc" && code == "DependencyViolation"),
        "{refused:?}"
    );
    assert!(
        refused.to_string().starts_with("ec2:DeleteVpc failed: "),
        "{refused}"
    );

    delete(&subnets, &subnet_ctx, &sub.id, &subnet2).await?;
    delete(&vpcs, &vpc_ctx, &vpc_id, &vpc2).await?;
    Ok(())
}

#[tokio::test]
async fn gateways_and_route_tables_converge_in_place() -> Result<(), ProviderError> {
    let moto = support::Moto::start();
    let config = support::config(&moto.url);
    let (vpcs, subnets) = (Adapter::new(AwsVpc), Adapter::new(AwsSubnet));
    let gateways = Adapter::new(AwsInternetGateway);
    let nats = Adapter::new(AwsNatGateway);
    let tables = Adapter::new(AwsRouteTable);

    let ctx = |address: &str| support::ctx(address, config.clone());
    let vpc_a = create(&vpcs, &ctx("aws_vpc.a"), &json!({"cidr": "10.0.0.0/16"}))
        .await?
        .id;
    let vpc_b = create(&vpcs, &ctx("aws_vpc.b"), &json!({"cidr": "10.1.0.0/16"}))
        .await?
        .id;
    let subnet =
        |cidr: &str, zone: &str| json!({"vpc_id": vpc_a, "cidr": cidr, "availability_zone": zone});
    let public = create(
        &subnets,
        &ctx("aws_subnet.public"),
        &subnet("10.0.0.0/24", "us-east-1a"),
    )
    .await?
    .id;
    let one = create(
        &subnets,
        &ctx("aws_subnet.one"),
        &subnet("10.0.1.0/24", "us-east-1a"),
    )
    .await?
    .id;
    let two = create(
        &subnets,
        &ctx("aws_subnet.two"),
        &subnet("10.0.2.0/24", "us-east-1b"),
    )
    .await?
    .id;

    // The internet gateway moves between VPCs in place.
    let igw_ctx = ctx("aws_internet_gateway.main");
    let igw_spec = json!({"vpc_id": vpc_b});
    let igw = create(&gateways, &igw_ctx, &igw_spec).await?;
    assert!(
        igw.id.starts_with("igw-") && igw.outputs["id"] == igw.id.as_str(),
        "{igw:?}"
    );
    let igw_spec2 = json!({"vpc_id": vpc_a, "tags": {"team": "ml"}});
    update(&gateways, &igw_ctx, &igw.id, &igw_spec, &igw_spec2).await?;

    // A public NAT gateway with an address of its own.
    let nat_ctx = ctx("aws_nat_gateway.main");
    let nat_spec = json!({"subnet_id": public});
    let nat = create(&nats, &nat_ctx, &nat_spec).await?;
    assert!(nat.id.starts_with("nat-"), "{}", nat.id);
    let allocation = s(&nat.outputs["allocation_id"]);
    assert!(allocation.starts_with("eipalloc-"), "{}", nat.outputs);
    assert!(!s(&nat.outputs["public_ip"]).is_empty() && !s(&nat.outputs["private_ip"]).is_empty());
    let ec2 = Ec2::of(&nat_ctx).await?;
    let addresses = ec2
        .tagged("DescribeAddresses", "addressesSet", "aws_nat_gateway.main")
        .await?;
    assert_eq!(addresses.len(), 1, "the address carries the gateway's tags");
    let nat_spec2 = json!({"subnet_id": public, "tags": {"team": "ml"}});
    update(&nats, &nat_ctx, &nat.id, &nat_spec, &nat_spec2).await?;

    // Routes and associations converge: one replaced, one added, one subnet swapped.
    let rt_ctx = ctx("aws_route_table.private");
    let rt_spec = json!({"vpc_id": vpc_a, "routes": [{"cidr": "0.0.0.0/0", "gateway_id": igw.id}], "subnet_ids": [one]});
    let rt = create(&tables, &rt_ctx, &rt_spec).await?;
    assert!(rt.id.starts_with("rtb-"), "{}", rt.id);
    assert_eq!(
        rt.outputs["association_ids"].as_object().map(|m| m.len()),
        Some(1)
    );
    let rt_spec2 = json!({
        "vpc_id": vpc_a,
        "routes": [
            {"cidr": "0.0.0.0/0", "nat_gateway_id": nat.id},
            {"cidr": "192.168.0.0/16", "gateway_id": igw.id},
        ],
        "subnet_ids": [two],
    });
    let outputs = update(&tables, &rt_ctx, &rt.id, &rt_spec, &rt_spec2).await?;
    let associations = outputs["association_ids"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    assert_eq!(associations.keys().collect::<Vec<_>>(), [&two], "{outputs}");

    delete(&tables, &rt_ctx, &rt.id, &rt_spec2).await?;
    delete(&nats, &nat_ctx, &nat.id, &nat_spec2).await?;
    let left = ec2
        .items("DescribeAddresses", &Params::new(), "addressesSet")
        .await?;
    assert!(
        left.iter()
            .all(|a| a.text("allocationId") != Some(allocation.as_str())),
        "the address is released"
    );
    delete(&gateways, &igw_ctx, &igw.id, &igw_spec2).await?;
    Ok(())
}

#[tokio::test]
async fn a_create_repeated_after_an_interruption_adopts_what_the_first_made(
) -> Result<(), ProviderError> {
    let moto = support::Moto::start();
    let config = support::config(&moto.url);
    let ctx = |address: &str| support::ctx(address, config.clone());
    let ec2 = Ec2::of(&ctx("aws_vpc.main")).await?;
    let count = |action: &'static str, set: &'static str, address: &'static str| {
        let ec2 = ec2.clone();
        async move { ec2.tagged(action, set, address).await.map(|v| v.len()) }
    };

    let vpcs = Adapter::new(AwsVpc);
    let vpc = json!({"cidr": "10.0.0.0/16"});
    let first = create(&vpcs, &ctx("aws_vpc.main"), &vpc).await?;
    let again = create(&vpcs, &ctx("aws_vpc.main"), &vpc).await?;
    assert_eq!(first.id, again.id);
    assert_eq!(count("DescribeVpcs", "vpcSet", "aws_vpc.main").await?, 1);

    let subnets = Adapter::new(AwsSubnet);
    let subnet =
        json!({"vpc_id": first.id, "cidr": "10.0.0.0/24", "availability_zone": "us-east-1a"});
    let a = create(&subnets, &ctx("aws_subnet.a"), &subnet).await?;
    assert_eq!(
        a.id,
        create(&subnets, &ctx("aws_subnet.a"), &subnet).await?.id
    );
    assert_eq!(
        count("DescribeSubnets", "subnetSet", "aws_subnet.a").await?,
        1
    );

    let gateways = Adapter::new(AwsInternetGateway);
    let igw = json!({"vpc_id": first.id});
    let g = create(&gateways, &ctx("aws_internet_gateway.main"), &igw).await?;
    assert_eq!(
        g.id,
        create(&gateways, &ctx("aws_internet_gateway.main"), &igw)
            .await?
            .id
    );
    assert_eq!(
        count(
            "DescribeInternetGateways",
            "internetGatewaySet",
            "aws_internet_gateway.main"
        )
        .await?,
        1
    );

    let nats = Adapter::new(AwsNatGateway);
    let nat = json!({"subnet_id": a.id});
    let n = create(&nats, &ctx("aws_nat_gateway.main"), &nat).await?;
    let n2 = create(&nats, &ctx("aws_nat_gateway.main"), &nat).await?;
    assert_eq!(n.id, n2.id);
    assert_eq!(n.outputs["allocation_id"], n2.outputs["allocation_id"]);
    assert_eq!(
        count(
            "DescribeNatGateways",
            "natGatewaySet",
            "aws_nat_gateway.main"
        )
        .await?,
        1
    );
    assert_eq!(
        count("DescribeAddresses", "addressesSet", "aws_nat_gateway.main").await?,
        1
    );

    let tables = Adapter::new(AwsRouteTable);
    let rt = json!({"vpc_id": first.id, "routes": [{"cidr": "0.0.0.0/0", "gateway_id": g.id}], "subnet_ids": [a.id]});
    let t = create(&tables, &ctx("aws_route_table.public"), &rt).await?;
    assert_eq!(
        t.id,
        create(&tables, &ctx("aws_route_table.public"), &rt)
            .await?
            .id
    );
    assert_eq!(
        count(
            "DescribeRouteTables",
            "routeTableSet",
            "aws_route_table.public"
        )
        .await?,
        1
    );
    Ok(())
}
