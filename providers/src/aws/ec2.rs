//! EC2's query protocol, for the kinds of the VPC network and for the capacity
//! preflight: one call through `signed` (form parameters with `Version=2016-11-15`, lists,
//! filters and `TagSpecification.N` numbered as EC2 reads them), its XML answer read into
//! a [`Node`] tree, its error (`<Response><Errors><Error><Code>`) as `ProviderError::Api`
//! naming the call (`ec2:CreateVpc`), and paging by `nextToken`.
//!
//! Beside the call, what the network kinds share: their run's client ([`Ec2`]), `*.NotFound`
//! codes as a missing object ([`is_not_found`]), the object an interrupted create left,
//! found by its `terrain-address` tag ([`Ec2::tagged`]), tags read and converged
//! (`tagSet`, CreateTags/DeleteTags), the `Name` tag the console shows, and ARNs.
//!
//! Answers are read with `roxmltree` into a generic tree: an element without child
//! elements holds its text, so no list of leaf names has to know every call's shape.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::signed::{Signed, EC2};
use super::token::encode;
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

/// The request body of `action` with `params`.
fn body(action: &str, params: &[(String, String)]) -> String {
    let mut body = format!("Action={action}&Version={VERSION}");
    for (name, value) in params {
        body.push('&');
        body.push_str(&encode(name));
        body.push('=');
        body.push_str(&encode(value));
    }
    body
}

// ---------------------------------------------------------------- the call

/// One EC2 call of `action` in `region`: its answer's document, checked to be
/// `action`'s (`<CreateVpcResponse>`).
///
/// Fails with `ProviderError::Api` naming the call (`ec2:CreateVpc`) with the answer's
/// status, code and message (see [`error`]); with status 0 when nothing answered; with
/// status 200 when the answer is not the action's XML document.
pub async fn call(
    signed: &Signed,
    region: &str,
    action: &str,
    params: &[(String, String)],
) -> Result<Node, ProviderError> {
    let call = format!("ec2:{action}");
    let text = signed
        .send(
            &call,
            &EC2,
            region,
            &[(
                "content-type",
                "application/x-www-form-urlencoded; charset=utf-8",
            )],
            body(action, params).as_bytes(),
            error,
        )
        .await?;
    let expected = format!("{action}Response");
    match parse(&text) {
        Ok(root) if root.name == expected => Ok(root),
        Ok(root) => Err(failure::malformed(
            call,
            Cloud::Aws,
            200,
            &format!("expected EC2's {expected} document, got <{}>", root.name),
            None,
        )),
        Err(e) => Err(failure::malformed(
            call,
            Cloud::Aws,
            200,
            &format!("not XML ({e})"),
            None,
        )),
    }
}

/// Every `item` of the answer's `set` (`vpcSet`) over all the pages of `action`.
pub async fn items(
    signed: &Signed,
    region: &str,
    action: &str,
    params: &[(String, String)],
    set: &str,
) -> Result<Vec<Node>, ProviderError> {
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
pub fn named(item: &Node, id_field: &str) -> Option<String> {
    let id = item.text(id_field)?;
    Some(match item.tags().get("Name") {
        Some(name) => format!("{id} ({name})"),
        None => id.to_string(),
    })
}

/// The code and message of an EC2 error document
/// (`<Response><Errors><Error><Code>…</Code><Message>…</Message>`).
pub(crate) fn error(text: &str) -> (String, String) {
    let error = parse(text).ok().and_then(|root| {
        let error = root.find("Errors")?.find("Error")?.clone();
        Some((
            error.text("Code").unwrap_or_default().to_string(),
            error.text("Message").unwrap_or_default().to_string(),
        ))
    });
    error.unwrap_or_else(|| (String::new(), failure::unreadable(text)))
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
    pub async fn call(&self, action: &str, params: &Params) -> Result<Node, ProviderError> {
        call(&self.signed, self.region(), action, params.pairs()).await
    }

    /// Every item of `set` over all pages (see [`items`]).
    pub async fn items(
        &self,
        action: &str,
        params: &Params,
        set: &str,
    ) -> Result<Vec<Node>, ProviderError> {
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
    ) -> Result<Option<Node>, ProviderError> {
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
    ) -> Result<Vec<Node>, ProviderError> {
        let params = Params::new().filter(&format!("tag:{ADDRESS_TAG}"), &[address]);
        Ok(self
            .items(action, &params, set)
            .await?
            .into_iter()
            .filter(|item| is_ours(&item.tags(), address))
            .collect())
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

// ---------------------------------------------------------------- XML

/// An element of an EC2 answer: its local name, its text when it has no child
/// elements, and its child elements.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Node {
    pub name: String,
    pub text: String,
    pub children: Vec<Node>,
}

impl Node {
    /// The first child element named `name`.
    pub fn find(&self, name: &str) -> Option<&Node> {
        self.children.iter().find(|c| c.name == name)
    }

    /// Every child element named `name`.
    pub fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Node> + 'a {
        self.children.iter().filter(move |c| c.name == name)
    }

    /// The text of the first child named `name`.
    pub fn text(&self, name: &str) -> Option<&str> {
        self.find(name).map(|c| c.text.as_str())
    }

    /// The text at a path of child names (`["enableDnsSupport", "value"]`).
    pub fn at(&self, path: &[&str]) -> Option<&str> {
        let mut node = self;
        for name in path {
            node = node.find(name)?;
        }
        Some(node.text.as_str())
    }

    /// The text of the first of `names` that is a child and not empty.
    pub fn first_text(&self, names: &[&str]) -> Option<&str> {
        names
            .iter()
            .find_map(|n| self.text(n).filter(|t| !t.is_empty()))
    }

    /// The `item`s of the child list `set` (`routeSet`), none when it is absent.
    pub fn items<'a>(&'a self, set: &'a str) -> impl Iterator<Item = &'a Node> + 'a {
        self.find(set).into_iter().flat_map(|s| s.all("item"))
    }

    /// The object's `tagSet` as a map.
    pub fn tags(&self) -> BTreeMap<String, String> {
        self.items("tagSet")
            .filter_map(|t| {
                Some((
                    t.text("key")?.to_string(),
                    t.text("value").unwrap_or_default().to_string(),
                ))
            })
            .collect()
    }
}

/// The tree of an XML document (namespaces dropped: EC2 puts every element in one).
pub fn parse(xml: &str) -> Result<Node, String> {
    let doc = roxmltree::Document::parse(xml).map_err(|e| e.to_string())?;
    Ok(tree(doc.root_element()))
}

fn tree(el: roxmltree::Node<'_, '_>) -> Node {
    let children: Vec<Node> = el.children().filter(|c| c.is_element()).map(tree).collect();
    let text = if children.is_empty() {
        el.children()
            .filter_map(|c| c.text())
            .collect::<String>()
            .trim()
            .to_string()
    } else {
        String::new()
    };
    Node {
        name: el.tag_name().name().to_string(),
        text,
        children,
    }
}

#[cfg(test)]
mod tests {
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
        assert_eq!(
            body("CreateVpc", &p.pairs()[..1]),
            "Action=CreateVpc&Version=2016-11-15&CidrBlock=10.0.0.0%2F16"
        );
    }

    #[test]
    fn answers_read_as_a_tree_with_text_at_the_leaves() {
        let xml = r#"<?xml version="1.0" encoding="UTF-8"?>
<DescribeVpcsResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">
    <requestId>r-1</requestId>
    <vpcSet>
        <item>
            <vpcId>vpc-0a1b</vpcId><cidrBlock>10.0.0.0/16</cidrBlock>
            <tagSet><item><key>Name</key><value>main &amp; more</value></item><item><key>empty</key><value/></item></tagSet>
        </item>
    </vpcSet>
</DescribeVpcsResponse>"#;
        let root = parse(xml).expect("xml");
        assert_eq!(root.name, "DescribeVpcsResponse");
        let vpc = root.items("vpcSet").next().expect("one vpc");
        assert_eq!(vpc.text("vpcId"), Some("vpc-0a1b"));
        assert_eq!(vpc.first_text(ID_FIELDS), Some("vpc-0a1b"));
        assert_eq!(
            vpc.tags(),
            BTreeMap::from([
                ("Name".to_string(), "main & more".to_string()),
                ("empty".to_string(), String::new()),
            ])
        );
        assert_eq!(
            root.at(&["vpcSet", "item", "cidrBlock"]),
            Some("10.0.0.0/16")
        );
        assert_eq!(root.items("subnetSet").count(), 0);
    }

    #[test]
    fn errors_name_their_code_and_not_found_codes_are_recognised() {
        assert_eq!(
            error("<Response><Errors><Error><Code>DependencyViolation</Code><Message>The vpc 'vpc-1' has dependencies and cannot be deleted.</Message></Error></Errors><RequestID>x</RequestID></Response>"),
            ("DependencyViolation".to_string(), "The vpc 'vpc-1' has dependencies and cannot be deleted.".to_string())
        );
        let (code, said) = error("<html>bad gateway</html>");
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
