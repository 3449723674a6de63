//! EC2's query protocol, for the kinds of the VPC network and for the capacity
//! preflight: one call through `signed` (form parameters with `Version=2016-11-15`, lists,
//! filters and `TagSpecification.N` numbered as EC2 reads them) as a query-protocol call
//! (`Signed::query`, which reads the answer into an [`Xml`] tree and EC2's error
//! `<Response><Errors><Error><Code>` into `ProviderError::Api` naming the call,
//! `ec2:CreateVpc`), and paging by `nextToken`.
//!
//! Beside the call, what the network kinds share: their run's client ([`Ec2`]), `*.NotFound`
//! codes as a missing object ([`is_not_found`]), the object an interrupted create left,
//! found by its `terrain-address` tag ([`Ec2::tagged`]), tags read and converged
//! (`tagSet`, CreateTags/DeleteTags), the `Name` tag the console shows, and ARNs.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::signed::{Signed, EC2};
pub use super::xml::Xml;
use super::{is_ours, ADDRESS_TAG};
use crate::failure::{self, Cloud};
use crate::{Ctx, ProviderError};

/// The EC2 API version every call names.
pub const VERSION: &str = "2016-11-15";

/// Most values of one filter, and most ids of one Describe call, EC2 takes.
pub const MOST_VALUES: usize = 200;

// ---------------------------------------------------------------- parameters

/// The form parameters of one call, numbered as EC2's query protocol wants them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Params {
    pairs: Vec<(String, String)>,
    filters: usize,
    tag_specifications: usize,
}

impl Params {
    /// No parameters.
    pub fn new() -> Self {
        Self::default()
    }

    /// `name=value`.
    pub fn set(mut self, name: &str, value: impl Into<String>) -> Self {
        self.pairs.push((name.to_string(), value.into()));
        self
    }

    /// `prefix.1=a&prefix.2=b` (`VpcId.1`, `SubnetId.2`).
    pub fn list<S: AsRef<str>>(mut self, prefix: &str, values: &[S]) -> Self {
        for (i, v) in values.iter().enumerate() {
            self.pairs
                .push((format!("{prefix}.{}", i + 1), v.as_ref().to_string()));
        }
        self
    }

    /// The next `Filter.N` with `name` and its `values`.
    pub fn filter<S: AsRef<str>>(mut self, name: &str, values: &[S]) -> Self {
        self.filters += 1;
        let n = self.filters;
        self.pairs
            .push((format!("Filter.{n}.Name"), name.to_string()));
        self = self.list(&format!("Filter.{n}.Value"), values);
        self
    }

    /// The next `TagSpecification.N`: `tags` on the `resource_type` (`vpc`, `subnet`)
    /// the call creates.
    pub fn tag_specification(
        mut self,
        resource_type: &str,
        tags: &BTreeMap<String, String>,
    ) -> Self {
        self.tag_specifications += 1;
        let n = self.tag_specifications;
        self.pairs.push((
            format!("TagSpecification.{n}.ResourceType"),
            resource_type.to_string(),
        ));
        for (i, (k, v)) in tags.iter().enumerate() {
            let at = format!("TagSpecification.{n}.Tag.{}", i + 1);
            self.pairs.push((format!("{at}.Key"), k.clone()));
            self.pairs.push((format!("{at}.Value"), v.clone()));
        }
        self
    }

    /// The pairs, in order.
    pub fn pairs(&self) -> &[(String, String)] {
        &self.pairs
    }
}

// ---------------------------------------------------------------- the call

/// One EC2 call of `action` in `region` (see [`Signed::query`]): its answer's document,
/// checked to be `action`'s (`<CreateVpcResponse>`); failures name the call
/// (`ec2:CreateVpc`).
pub async fn call(
    signed: &Signed,
    region: &str,
    action: &str,
    params: &[(String, String)],
) -> Result<Xml, ProviderError> {
    signed.query(&EC2, region, action, VERSION, params).await
}

/// Every `item` of the answer's `set` (`vpcSet`) over all the pages of `action`.
pub async fn items(
    signed: &Signed,
    region: &str,
    action: &str,
    params: &[(String, String)],
    set: &str,
) -> Result<Vec<Xml>, ProviderError> {
    let mut items = Vec::new();
    let mut token: Option<String> = None;
    // Bounded, so a server that keeps answering with a token cannot loop us.
    for _ in 0..1000 {
        let mut page = params.to_vec();
        if let Some(t) = &token {
            page.push(("NextToken".to_string(), t.clone()));
        }
        let root = call(signed, region, action, &page).await?;
        if let Some(found) = root.find(set) {
            items.extend(found.all("item").cloned());
        }
        token = root
            .text("nextToken")
            .filter(|t| !t.is_empty())
            .map(str::to_string);
        if token.is_none() {
            break;
        }
    }
    Ok(items)
}

/// Whether an EC2 error is `DependencyViolation` (a delete refused while something
/// still uses the object).
pub fn is_dependency_violation(e: &ProviderError) -> bool {
    matches!(e, ProviderError::Api { code, .. } if code == "DependencyViolation")
}

/// `id (Name)` for an item with a Name tag, `id` otherwise.
pub fn named(item: &Xml, id_field: &str) -> Option<String> {
    let id = item.text(id_field)?;
    Some(match item.tags().get("Name") {
        Some(name) => format!("{id} ({name})"),
        None => id.to_string(),
    })
}

/// Whether an EC2 error says the object does not exist: `InvalidVpcID.NotFound`,
/// `NatGatewayNotFound`, `InvalidAllocationID.NotFound`, and the codes
/// [`super::is_not_found`] knows.
pub fn is_not_found(e: &ProviderError) -> bool {
    match e {
        ProviderError::Api { code, .. } if code.ends_with("NotFound") => true,
        _ => super::is_not_found(e),
    }
}

/// `Ok(None)` for an error saying the object is gone; the answer, or other errors, as
/// they are.
pub fn found<T>(answer: Result<T, ProviderError>) -> Result<Option<T>, ProviderError> {
    match answer {
        Ok(v) => Ok(Some(v)),
        Err(e) if is_not_found(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

// ---------------------------------------------------------------- the kinds' client

/// How often the network kinds poll a state: NAT gateways take a minute or two.
pub const POLL: std::time::Duration = std::time::Duration::from_secs(10);

/// The EC2 client of the network kinds, for one provider table and its region.
#[derive(Clone)]
pub struct Ec2 {
    signed: Arc<Signed>,
}

impl Ec2 {
    /// The run's client for `ctx`'s provider table.
    pub async fn of(ctx: &Ctx) -> Result<Ec2, ProviderError> {
        Ok(Ec2 {
            signed: Signed::for_run(ctx, "manage the VPC network", u32::MAX).await?,
        })
    }

    /// The region calls go to.
    pub fn region(&self) -> &str {
        self.signed.region()
    }

    /// One call (see [`call`]).
    pub async fn call(&self, action: &str, params: &Params) -> Result<Xml, ProviderError> {
        call(&self.signed, self.region(), action, params.pairs()).await
    }

    /// Every item of `set` over all pages (see [`items`]).
    pub async fn items(
        &self,
        action: &str,
        params: &Params,
        set: &str,
    ) -> Result<Vec<Xml>, ProviderError> {
        items(&self.signed, self.region(), action, params.pairs(), set).await
    }

    /// The one item `action` describes with `id_param.1 = id`; `None` when EC2 says it
    /// is gone (a `*.NotFound` code, or no item).
    pub async fn describe_one(
        &self,
        action: &str,
        id_param: &str,
        id: &str,
        set: &str,
    ) -> Result<Option<Xml>, ProviderError> {
        let params = Params::new().list(id_param, &[id]);
        Ok(
            found(self.items(action, &params, set).await)?.and_then(|mut items| {
                // An item names other objects too (a subnet its VPC): the id may be in any
                // of the id fields.
                let at = items
                    .iter()
                    .position(|i| ID_FIELDS.iter().any(|f| i.text(f) == Some(id)));
                at.map(|i| items.swap_remove(i))
            }),
        )
    }

    /// The items of `set` carrying `address`'s tags (`managed-by` and
    /// `terrain-address`): what an interrupted create of `address` left. The filter asks
    /// EC2 for them; the tags are checked again here, as not every emulator filters.
    pub async fn tagged(
        &self,
        action: &str,
        set: &str,
        address: &str,
    ) -> Result<Vec<Xml>, ProviderError> {
        let params = Params::new().filter(&format!("tag:{ADDRESS_TAG}"), &[address]);
        Ok(self
            .items(action, &params, set)
            .await?
            .into_iter()
            .filter(|item| is_ours(&item.tags(), address))
            .collect())
    }

    /// What a create of `address` works on: the object an earlier create of it left
    /// when its answer was lost (found by its address tags, see [`Ec2::tagged`]),
    /// else the `element` of the answer to a new `action` with `params` (which tag it).
    pub async fn adopt_or_create(
        &self,
        (describe, set): (&str, &str),
        address: &str,
        (action, params): (&str, &Params),
        element: &str,
    ) -> Result<Xml, ProviderError> {
        if let Some(left) = self
            .tagged(describe, set, address)
            .await?
            .into_iter()
            .next()
        {
            return Ok(left);
        }
        let made = self.call(action, params).await?;
        made.find(element).cloned().ok_or_else(|| {
            failure::malformed(
                format!("ec2:{action}"),
                Cloud::Aws,
                200,
                &format!("the answer has no {element}"),
                None,
            )
        })
    }

    /// Makes `id`'s tags `wanted`: CreateTags for new or changed values, DeleteTags for
    /// keys no longer wanted.
    pub async fn retag(
        &self,
        id: &str,
        live: &BTreeMap<String, String>,
        wanted: &BTreeMap<String, String>,
    ) -> Result<(), ProviderError> {
        let changed: Vec<(&String, &String)> = wanted
            .iter()
            .filter(|(k, v)| live.get(*k) != Some(*v))
            .collect();
        if !changed.is_empty() {
            let mut params = Params::new().list("ResourceId", &[id]);
            for (i, (k, v)) in changed.iter().enumerate() {
                params = params
                    .set(&format!("Tag.{}.Key", i + 1), k.as_str())
                    .set(&format!("Tag.{}.Value", i + 1), v.as_str());
            }
            self.call("CreateTags", &params).await?;
        }
        let removed: Vec<&String> = live.keys().filter(|k| !wanted.contains_key(*k)).collect();
        if !removed.is_empty() {
            let mut params = Params::new().list("ResourceId", &[id]);
            for (i, k) in removed.iter().enumerate() {
                params = params.set(&format!("Tag.{}.Key", i + 1), k.as_str());
            }
            self.call("DeleteTags", &params).await?;
        }
        Ok(())
    }

    /// `arn:aws:ec2:REGION:OWNER:TYPE/ID` in the region's partition.
    pub fn arn(&self, owner: &str, resource: &str, id: &str) -> String {
        arn(self.region(), owner, resource, id)
    }
}

/// The fields an item's own id is in, by kind of object.
const ID_FIELDS: &[&str] = &[
    "vpcId",
    "subnetId",
    "internetGatewayId",
    "natGatewayId",
    "routeTableId",
    "allocationId",
];

/// `arn:PARTITION:ec2:REGION:OWNER:RESOURCE/ID`.
pub fn arn(region: &str, owner: &str, resource: &str, id: &str) -> String {
    let partition = if region.starts_with("cn-") {
        "aws-cn"
    } else if region.starts_with("us-gov-") {
        "aws-us-gov"
    } else {
        "aws"
    };
    format!("arn:{partition}:ec2:{region}:{owner}:{resource}/{id}")
}

/// The resource's name in its address (`aws_vpc.main` → `main`): the `Name` tag the
/// console shows.
pub fn name_of(address: &str) -> &str {
    address.split_once('.').map_or(address, |(_, n)| n)
}

/// The tags an object of `address` gets: the user's, `Name` = the resource's name unless
/// the user set one, then `extra` (a subnet's role tag) and terrain's own.
pub fn wanted_tags(
    user: &BTreeMap<String, String>,
    extra: &[(&str, &str)],
    address: &str,
) -> BTreeMap<String, String> {
    let mut tags = user.clone();
    tags.entry("Name".to_string())
        .or_insert_with(|| name_of(address).to_string());
    for (k, v) in extra {
        tags.insert((*k).to_string(), (*v).to_string());
    }
    super::tags_with_ours(&tags, address)
}

/// A live object's tags as its spec states them: without terrain's own, and without
/// the `Name` terrain adds when the stack did not write it (`prior` tags, none on
/// import).
pub fn spec_tags(
    live: &BTreeMap<String, String>,
    address: &str,
    prior: Option<&BTreeMap<String, String>>,
) -> BTreeMap<String, String> {
    let mut tags = super::user_tags(live);
    let written = prior.is_some_and(|p| p.contains_key("Name"));
    if !written && tags.get("Name").map(String::as_str) == Some(name_of(address)) {
        tags.remove("Name");
    }
    tags
}

#[cfg(test)]
mod tests {
    use super::super::signed::query_error;
    use super::*;

    #[test]
    fn parameters_are_numbered_as_ec2_reads_them() {
        let tags = BTreeMap::from([
            ("Name".to_string(), "main".to_string()),
            ("team".to_string(), "ml".to_string()),
        ]);
        let p = Params::new()
            .set("CidrBlock", "10.0.0.0/16")
            .list("VpcId", &["vpc-1", "vpc-2"])
            .filter("tag:terrain-address", &["aws_vpc.main"])
            .filter("state", &["pending", "available"])
            .tag_specification("vpc", &tags);
        let got: Vec<String> = p.pairs().iter().map(|(k, v)| format!("{k}={v}")).collect();
        assert_eq!(
            got,
            [
                "CidrBlock=10.0.0.0/16",
                "VpcId.1=vpc-1",
                "VpcId.2=vpc-2",
                "Filter.1.Name=tag:terrain-address",
                "Filter.1.Value.1=aws_vpc.main",
                "Filter.2.Name=state",
                "Filter.2.Value.1=pending",
                "Filter.2.Value.2=available",
                "TagSpecification.1.ResourceType=vpc",
                "TagSpecification.1.Tag.1.Key=Name",
                "TagSpecification.1.Tag.1.Value=main",
                "TagSpecification.1.Tag.2.Key=team",
                "TagSpecification.1.Tag.2.Value=ml",
            ]
        );
    }

    #[test]
    fn errors_name_their_code_and_not_found_codes_are_recognised() {
        assert_eq!(
            query_error("<Response><Errors><Error><Code>DependencyViolation</Code><Message>The vpc 'vpc-1' has dependencies and cannot be deleted.</Message></Error></Errors><RequestID>x</RequestID></Response>"),
            ("DependencyViolation".to_string(), "The vpc 'vpc-1' has dependencies and cannot be deleted.".to_string())
        );
        let (code, said) = query_error("<html>bad gateway</html>");
        assert_eq!(code, "");
        assert!(said.contains("not in the API's error format"), "{said}");
        for code in [
            "InvalidVpcID.NotFound",
            "InvalidSubnetID.NotFound",
            "NatGatewayNotFound",
            "InvalidAllocationID.NotFound",
        ] {
            assert!(
                is_not_found(&ProviderError::api("ec2:X", 400, code, "")),
                "{code}"
            );
        }
        assert!(!is_not_found(&ProviderError::api(
            "ec2:DeleteVpc",
            400,
            "DependencyViolation",
            ""
        )));
    }

    #[test]
    fn names_tags_and_arns() {
        assert_eq!(name_of("aws_vpc.main"), "main");
        let user = BTreeMap::from([("team".to_string(), "ml".to_string())]);
        let wanted = wanted_tags(&user, &[("kubernetes.io/role/elb", "1")], "aws_subnet.a");
        assert_eq!(wanted["Name"], "a");
        assert_eq!(wanted["kubernetes.io/role/elb"], "1");
        assert!(is_ours(&wanted, "aws_subnet.a"));
        // The Name terrain added reads back as absent; one the stack wrote stays.
        assert_eq!(
            spec_tags(
                &wanted_tags(&user, &[], "aws_subnet.a"),
                "aws_subnet.a",
                None
            ),
            user
        );
        let named = BTreeMap::from([("Name".to_string(), "a".to_string())]);
        assert_eq!(
            spec_tags(
                &wanted_tags(&named, &[], "aws_subnet.a"),
                "aws_subnet.a",
                Some(&named)
            ),
            named
        );
        assert_eq!(
            arn("cn-north-1", "123456789012", "vpc", "vpc-1"),
            "arn:aws-cn:ec2:cn-north-1:123456789012:vpc/vpc-1"
        );
        assert_eq!(
            arn("us-east-1", "123456789012", "vpc", "vpc-1"),
            "arn:aws:ec2:us-east-1:123456789012:vpc/vpc-1"
        );
    }
}
