//! The network checked at plan, across the stack's resources: a cluster's subnets span
//! at least two Availability Zones; a node group's subnets reach the internet (a NAT
//! route for private ones; an internet gateway route and public addresses for public
//! ones), or its nodes cannot pull images nor join the cluster; subnets of one VPC do
//! not overlap; zones exist in their region. Subnets, route tables and gateways are
//! followed through the references that name them, so the checks hold when the
//! network is created by the same stack; subnets given as literal ids are not judged.

use super::iam_checks::View;
use crate::protocol::{StackFinding, StackResource};

/// The Availability Zone letters of the regions whose zones every account sees alike.
const ZONES: &[(&str, &str)] = &[
    ("us-east-1", "abcdef"),
    ("us-east-2", "abc"),
    ("us-west-2", "abcd"),
    ("eu-west-1", "abc"),
    ("eu-west-2", "abc"),
    ("eu-central-1", "abc"),
    ("eu-north-1", "abc"),
    ("ap-south-1", "abc"),
    ("ap-southeast-1", "abc"),
    ("ap-southeast-2", "abc"),
    ("ca-central-1", "abd"),
    ("sa-east-1", "abc"),
];

/// The zones of `region` when the table has them.
pub fn zones_of(region: &str) -> Option<Vec<String>> {
    ZONES
        .iter()
        .find(|(r, _)| *r == region)
        .map(|(r, letters)| letters.chars().map(|c| format!("{r}{c}")).collect())
}

/// The stack's checks of its network.
pub fn check(resources: &[StackResource]) -> Vec<StackFinding> {
    let view = View::new(resources);
    let mut out = Vec::new();
    for subnet in view.of_kind("aws_subnet") {
        zone_exists(&view, subnet, &mut out);
    }
    overlaps(&view, &mut out);
    for cluster in view.of_kind("eks_cluster") {
        two_zones(&view, cluster, &mut out);
    }
    for group in view.of_kind("eks_node_group") {
        for (i, subnet) in subnets(&view, group) {
            egress(&view, group, i, subnet, &mut out);
        }
    }
    out
}

/// The stack's subnets a resource's `subnet_ids` name, with their index.
fn subnets<'a>(view: &View<'a>, r: &StackResource) -> Vec<(usize, &'a StackResource)> {
    let n = r
        .spec
        .get("subnet_ids")
        .and_then(serde_json::Value::as_array)
        .map_or(0, Vec::len);
    (0..n)
        .filter_map(|i| Some((i, view.linked(r, &format!("subnet_ids.{i}"), "aws_subnet")?)))
        .collect()
}

fn zone_exists(view: &View<'_>, subnet: &StackResource, out: &mut Vec<StackFinding>) {
    let Some(zone) = view.text(subnet, "availability_zone") else {
        return;
    };
    let region = &zone[..zone.len().saturating_sub(1)];
    if let Some(zones) = zones_of(region) {
        if !zones.contains(&zone) {
            out.push(StackFinding::error(
                &subnet.address,
                "availability_zone",
                format!(
                    "{region} has no zone `{zone}`: its zones are {}",
                    zones.join(", ")
                ),
            ));
        }
    }
}

fn two_zones(view: &View<'_>, cluster: &StackResource, out: &mut Vec<StackFinding>) {
    let listed = cluster
        .spec
        .get("subnet_ids")
        .and_then(serde_json::Value::as_array)
        .map_or(0, Vec::len);
    let ours = subnets(view, cluster);
    if ours.is_empty() || ours.len() != listed {
        return;
    }
    let mut zones: Vec<(String, String)> = Vec::new();
    for (_, s) in &ours {
        let Some(zone) = view.text(s, "availability_zone") else {
            return;
        };
        zones.push((zone, s.address.clone()));
    }
    let mut distinct: Vec<&str> = zones.iter().map(|(z, _)| z.as_str()).collect();
    distinct.sort_unstable();
    distinct.dedup();
    if distinct.len() < 2 {
        out.push(StackFinding::error(
            &cluster.address,
            "subnet_ids",
            format!(
                "EKS needs subnets in at least two Availability Zones, and {} {} all in {}; add a subnet in another zone",
                zones.iter().map(|(_, a)| a.as_str()).collect::<Vec<_>>().join(", "),
                if zones.len() == 1 { "is" } else { "are" },
                distinct.first().copied().unwrap_or("one zone")
            ),
        ));
    }
}

/// How a subnet reaches the internet, from the route table the stack associates it with.
fn egress(
    view: &View<'_>,
    group: &StackResource,
    index: usize,
    subnet: &StackResource,
    out: &mut Vec<StackFinding>,
) {
    let tables: Vec<&StackResource> = view
        .of_kind("aws_route_table")
        .filter(|t| {
            let n = t
                .spec
                .get("subnet_ids")
                .and_then(serde_json::Value::as_array)
                .map_or(0, Vec::len);
            (0..n).any(|i| {
                t.referenced(&format!("subnet_ids.{i}"))
                    .is_some_and(|(a, _)| a == subnet.address)
            })
        })
        .collect();
    let mut nat = false;
    let mut gateway = false;
    for t in &tables {
        let routes = t
            .spec
            .get("routes")
            .and_then(serde_json::Value::as_array)
            .cloned()
            .unwrap_or_default();
        for (i, r) in routes.iter().enumerate() {
            if view.text(t, &format!("routes.{i}.cidr")).as_deref() != Some("0.0.0.0/0") {
                continue;
            }
            let set = |k: &str| r.get(k).is_some_and(|v| !v.is_null());
            nat |= set("nat_gateway_id");
            gateway |= set("gateway_id");
        }
    }
    let at = format!("subnet_ids.{index}");
    let public_ip = subnet
        .spec
        .get("map_public_ip_on_launch")
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(false);
    if nat || (gateway && public_ip) {
        return;
    }
    let message = if gateway {
        format!(
            "{}'s nodes get no public address in {} (map_public_ip_on_launch = false), so its internet gateway route does not reach them: they cannot pull images nor join the cluster; set map_public_ip_on_launch = true or route the subnet through a NAT gateway",
            group.address, subnet.address
        )
    } else if tables.is_empty() {
        format!(
            "{} has no route table of the stack, so only its VPC's main table (local routes) applies: {}'s nodes cannot pull images nor join the cluster; associate it with a route table routing 0.0.0.0/0 to a NAT gateway",
            subnet.address, group.address
        )
    } else {
        format!(
            "{} routes nothing to the internet ({} has no 0.0.0.0/0 route): {}'s nodes cannot pull images nor join the cluster; add a route {{ cidr = \"0.0.0.0/0\", nat_gateway_id = … }}",
            subnet.address,
            tables.iter().map(|t| t.address.as_str()).collect::<Vec<_>>().join(", "),
            group.address
        )
    };
    out.push(StackFinding::error(&group.address, &at, message));
}

/// Subnets of the same VPC whose ranges overlap.
fn overlaps(view: &View<'_>, out: &mut Vec<StackFinding>) {
    let subnets: Vec<(&StackResource, String, (u32, u32))> = view
        .of_kind("aws_subnet")
        .filter_map(|s| {
            let vpc = s
                .referenced("vpc_id")
                .map(|(a, _)| a.to_string())
                .or_else(|| view.text(s, "vpc_id"))?;
            let range = range(&view.text(s, "cidr")?)?;
            Some((s, vpc, range))
        })
        .collect();
    for (i, (a, vpc_a, ra)) in subnets.iter().enumerate() {
        for (b, vpc_b, rb) in &subnets[i + 1..] {
            if vpc_a == vpc_b && ra.0 <= rb.1 && rb.0 <= ra.1 {
                out.push(StackFinding::error(
                    &b.address,
                    "cidr",
                    format!(
                        "overlaps {}'s range in the same VPC; subnets of a VPC take disjoint ranges",
                        a.address
                    ),
                ));
            }
        }
    }
}

/// The first and last address of an IPv4 CIDR.
pub fn range(cidr: &str) -> Option<(u32, u32)> {
    let (ip, len) = cidr.split_once('/')?;
    let len: u32 = len.parse().ok().filter(|l| *l <= 32)?;
    let octets: Vec<u32> = ip
        .split('.')
        .map(|o| o.parse::<u8>().ok().map(u32::from))
        .collect::<Option<_>>()?;
    if octets.len() != 4 {
        return None;
    }
    let addr = octets.iter().fold(0u32, |a, o| (a << 8) | o);
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    Some((addr & mask, (addr & mask) | !mask))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aws::iam_checks::tests::resource;
    use serde_json::json;

    const U: &str = crate::protocol::UNKNOWN;

    fn vpc() -> StackResource {
        resource("aws_vpc", "main", json!({"cidr": "10.0.0.0/16"}), &[])
    }

    fn subnet(name: &str, cidr: &str, zone: &str, public: bool) -> StackResource {
        resource(
            "aws_subnet",
            name,
            json!({"vpc_id": U, "cidr": cidr, "availability_zone": zone,
                   "map_public_ip_on_launch": public}),
            &[("vpc_id", "${aws_vpc.main.id}")],
        )
    }

    fn uses(kind: &str, name: &str, subnets: &[&str]) -> StackResource {
        let refs: Vec<(String, String)> = subnets
            .iter()
            .enumerate()
            .map(|(i, s)| (format!("subnet_ids.{i}"), format!("${{aws_subnet.{s}.id}}")))
            .collect();
        let refs: Vec<(&str, &str)> = refs.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
        resource(
            kind,
            name,
            json!({"subnet_ids": vec![U; subnets.len()]}),
            &refs,
        )
    }

    fn table(name: &str, route: Option<(&str, &str)>, subnets: &[&str]) -> StackResource {
        let mut refs: Vec<(String, String)> = subnets
            .iter()
            .enumerate()
            .map(|(i, s)| (format!("subnet_ids.{i}"), format!("${{aws_subnet.{s}.id}}")))
            .collect();
        let routes = match route {
            Some((key, target)) => {
                refs.push((format!("routes.0.{key}"), format!("${{{target}.id}}")));
                json!([{"cidr": "0.0.0.0/0", key: U}])
            }
            None => json!([]),
        };
        let refs: Vec<(&str, &str)> = refs.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
        resource(
            "aws_route_table",
            name,
            json!({"vpc_id": U, "routes": routes, "subnet_ids": vec![U; subnets.len()]}),
            &refs,
        )
    }

    fn shown(found: &[StackFinding]) -> Vec<String> {
        found
            .iter()
            .map(|f| format!("{}.{}: {}", f.address, f.path, f.message))
            .collect()
    }

    #[test]
    fn a_cluster_in_one_zone_is_refused() {
        let one = [
            vpc(),
            subnet("a", "10.0.0.0/20", "us-east-1a", false),
            subnet("b", "10.0.16.0/20", "us-east-1a", false),
            uses("eks_cluster", "ml", &["a", "b"]),
        ];
        let found = shown(&check(&one));
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].starts_with("eks_cluster.ml.subnet_ids: EKS needs subnets in at least two"),
            "{found:?}"
        );
        let two = [
            vpc(),
            subnet("a", "10.0.0.0/20", "us-east-1a", false),
            subnet("b", "10.0.16.0/20", "us-east-1b", false),
            uses("eks_cluster", "ml", &["a", "b"]),
        ];
        assert!(check(&two).is_empty(), "{:?}", shown(&check(&two)));
    }

    #[test]
    fn private_node_subnets_need_a_nat_route() {
        let base = || {
            vec![
                vpc(),
                subnet("a", "10.0.0.0/20", "us-east-1a", false),
                uses("eks_node_group", "gpu", &["a"]),
                resource("aws_nat_gateway", "nat", json!({}), &[]),
                resource("aws_internet_gateway", "igw", json!({}), &[]),
            ]
        };
        let mut none = base();
        let found = shown(&check(&none));
        assert!(
            found[0].contains("no route table of the stack"),
            "{found:?}"
        );
        none.push(table("private", None, &["a"]));
        let found = shown(&check(&none));
        assert!(
            found[0].contains("routes nothing to the internet"),
            "{found:?}"
        );
        let mut nat = base();
        nat.push(table(
            "private",
            Some(("nat_gateway_id", "aws_nat_gateway.nat")),
            &["a"],
        ));
        assert!(check(&nat).is_empty(), "{:?}", shown(&check(&nat)));
        let mut igw = base();
        igw.push(table(
            "public",
            Some(("gateway_id", "aws_internet_gateway.igw")),
            &["a"],
        ));
        let found = shown(&check(&igw));
        assert!(found[0].contains("no public address"), "{found:?}");
    }

    #[test]
    fn overlapping_subnets_and_missing_zones_are_refused() {
        let found = shown(&check(&[
            vpc(),
            subnet("a", "10.0.0.0/20", "us-east-1a", false),
            subnet("b", "10.0.8.0/24", "us-east-1g", false),
        ]));
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(
            found
                .iter()
                .any(|f| f.starts_with("aws_subnet.b.availability_zone: us-east-1 has no zone")),
            "{found:?}"
        );
        assert!(
            found
                .iter()
                .any(|f| f.starts_with("aws_subnet.b.cidr: overlaps aws_subnet.a")),
            "{found:?}"
        );
    }

    #[test]
    fn cidr_ranges() {
        assert_eq!(range("10.0.0.0/16"), Some((0x0a00_0000, 0x0a00_ffff)));
        assert_eq!(range("10.0.1.7/24"), Some((0x0a00_0100, 0x0a00_01ff)));
        assert_eq!(range("10.0.0.0/33"), None);
        assert_eq!(range("10.0.0/16"), None);
    }
}
