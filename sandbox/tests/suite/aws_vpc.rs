//! EC2's VPC networking in the sandbox as clients see it: the query-protocol requests a
//! client sends and the XML answers checked against the botocore EC2 model (every
//! request parameter a member of the operation's input shape by its serialized name,
//! every answered element a member of the output shape by its `locationName`, errors in
//! EC2's `<Response><Errors>` format), then the official `aws` CLI creating a VPC, its
//! subnets, a NAT gateway and routes, being refused a VPC delete while they remain, and
//! EKS accepting only subnets EC2 has. The CLI part is skipped (with a message) when the
//! `aws` CLI is not installed.

use std::time::Duration;

use crate::common;
use common::assert_botocore;
use serde_json::{json, Value};
use terrain_sandbox::{Options, Sandbox, Timing};

fn ec2_model() -> Value {
    terrain_contracts::botocore("ec2", "2016-11-15")
}

/// The name a member travels under in an EC2 query request: `queryName`, else the
/// `locationName` capitalized, else the member name.
fn serialized_name(name: &str, member: &Value) -> String {
    if let Some(q) = member["queryName"].as_str() {
        return q.to_string();
    }
    match member["locationName"].as_str() {
        Some(l) => {
            let mut chars = l.chars();
            chars
                .next()
                .map(|c| c.to_uppercase().collect::<String>() + chars.as_str())
                .unwrap_or_default()
        }
        None => name.to_string(),
    }
}

/// Request parameters the operation's input shape has no member for.
fn request_violations(model: &Value, action: &str, params: &[(&str, String)]) -> Vec<String> {
    let input = model["operations"][action]["input"]["shape"]
        .as_str()
        .unwrap_or_default();
    let members = model["shapes"][input]["members"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let names: Vec<String> = members.iter().map(|(n, m)| serialized_name(n, m)).collect();
    params
        .iter()
        .filter(|(k, _)| *k != "Action" && *k != "Version")
        .filter_map(|(k, _)| {
            let top = k.split('.').next().unwrap_or_default();
            (!names.iter().any(|n| n == top)).then(|| format!("{action}: no input member {top}"))
        })
        .collect()
}

/// Where an XML answer strays from an output shape: elements with no member of that
/// `locationName`, list items not named as the model names them, numbers, booleans and
/// enum strings that are not.
fn answer_violations(model: &Value, shape: &str, node: roxmltree::Node, at: &str) -> Vec<String> {
    let s = &model["shapes"][shape];
    let mut out = Vec::new();
    let elements = node.children().filter(|c| c.is_element());
    let text = node.text().unwrap_or_default();
    match s["type"].as_str().unwrap_or_default() {
        "structure" => {
            let members = s["members"].as_object().cloned().unwrap_or_default();
            for child in elements {
                let name = child.tag_name().name();
                match members
                    .iter()
                    .find(|(n, m)| m["locationName"].as_str().unwrap_or(n.as_str()) == name)
                {
                    Some((_, m)) => out.extend(answer_violations(
                        model,
                        m["shape"].as_str().unwrap_or_default(),
                        child,
                        &format!("{at}.{name}"),
                    )),
                    None => out.push(format!("{at}: {shape} has no member {name}")),
                }
            }
        }
        "list" => {
            let item = s["member"]["locationName"].as_str().unwrap_or("member");
            for child in elements {
                if child.tag_name().name() != item {
                    out.push(format!(
                        "{at}: list item {} is not {item}",
                        child.tag_name().name()
                    ));
                }
                out.extend(answer_violations(
                    model,
                    s["member"]["shape"].as_str().unwrap_or_default(),
                    child,
                    &format!("{at}.{item}"),
                ));
            }
        }
        "integer" | "long" if text.parse::<i64>().is_err() => {
            out.push(format!("{at}: {text:?} is not a whole number"))
        }
        "boolean" if text != "true" && text != "false" => {
            out.push(format!("{at}: {text:?} is not a boolean"))
        }
        // EC2 reports an attached internet gateway as `available`, a value outside the
        // model's enum (clients such as Terraform's provider wait for it).
        "string" if shape == "AttachmentStatus" && text == "available" => {}
        "string" => {
            if let Some(values) = s["enum"].as_array() {
                if !values.iter().any(|v| v == text) {
                    out.push(format!("{at}: {text:?} is not one of {shape}'s values"));
                }
            }
        }
        _ => {}
    }
    out
}

/// EC2 over HTTP: form-encoded requests signed (in form: the sandbox reads the
/// credential scope) for `ec2` in us-east-1.
struct Ec2 {
    url: String,
    client: reqwest::Client,
    model: Value,
}

impl Ec2 {
    async fn send(&self, params: &[(&str, String)]) -> (u16, String) {
        let body: String = params
            .iter()
            .map(|(k, v)| format!("{k}={}", urlencode(v)))
            .collect::<Vec<_>>()
            .join("&");
        let resp = self
            .client
            .post(&self.url)
            .header(
                "authorization",
                "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20260101/us-east-1/ec2/aws4_request, SignedHeaders=host;x-amz-date, Signature=0",
            )
            .header("content-type", "application/x-www-form-urlencoded; charset=utf-8")
            .body(format!("Version=2016-11-15&{body}"))
            .send()
            .await
            .expect("the sandbox answers");
        (resp.status().as_u16(), resp.text().await.expect("a body"))
    }

    /// A call that must succeed, its request and answer checked against the model; the
    /// answer's text at `path` (element names below the root).
    async fn ok(&self, params: &[(&str, String)], path: &[&str]) -> String {
        let action = params
            .iter()
            .find(|(k, _)| *k == "Action")
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        let problems = request_violations(&self.model, &action, params);
        assert!(problems.is_empty(), "{problems:#?}");
        let (status, xml) = self.send(params).await;
        assert_eq!(status, 200, "{action}: {xml}");
        let doc = roxmltree::Document::parse(&xml).expect("well-formed XML");
        let root = doc.root_element();
        assert_eq!(root.tag_name().name(), format!("{action}Response"));
        assert_eq!(
            root.tag_name().namespace(),
            Some("http://ec2.amazonaws.com/doc/2016-11-15/")
        );
        if let Some(shape) = self.model["operations"][action.as_str()]["output"]["shape"].as_str() {
            let mut problems = Vec::new();
            for child in root.children().filter(|c| c.is_element()) {
                if child.tag_name().name() == "requestId" {
                    continue;
                }
                let members = self.model["shapes"][shape]["members"]
                    .as_object()
                    .cloned()
                    .unwrap_or_default();
                let name = child.tag_name().name();
                match members
                    .iter()
                    .find(|(n, m)| m["locationName"].as_str().unwrap_or(n.as_str()) == name)
                {
                    Some((_, m)) => problems.extend(answer_violations(
                        &self.model,
                        m["shape"].as_str().unwrap_or_default(),
                        child,
                        &format!("{shape}.{name}"),
                    )),
                    None => problems.push(format!("{shape} has no member {name}")),
                }
            }
            assert!(problems.is_empty(), "{action}: {problems:#?}\n{xml}");
        }
        let mut at = root;
        for name in path {
            at = at
                .children()
                .find(|c| c.tag_name().name() == *name)
                .unwrap_or_else(|| panic!("no {name} in {xml}"));
        }
        at.text().unwrap_or_default().to_string()
    }

    /// A call EC2 must refuse with `code`, in EC2's error format; the message.
    async fn refused(&self, params: &[(&str, String)], code: &str) -> String {
        let (status, xml) = self.send(params).await;
        assert_eq!(status, 400, "{xml}");
        let doc = roxmltree::Document::parse(&xml).expect("well-formed XML");
        let root = doc.root_element();
        assert_eq!(root.tag_name().name(), "Response", "{xml}");
        let error = root
            .descendants()
            .find(|n| n.tag_name().name() == "Error")
            .expect("an Error element");
        let text_of = |name: &str| {
            error
                .children()
                .find(|c| c.tag_name().name() == name)
                .and_then(|c| c.text())
                .unwrap_or_default()
                .to_string()
        };
        assert_eq!(text_of("Code"), code, "{xml}");
        assert!(
            root.children().any(|c| c.tag_name().name() == "RequestID"),
            "{xml}"
        );
        text_of("Message")
    }
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn p(k: &'static str, v: &str) -> (&'static str, String) {
    (k, v.to_string())
}

#[tokio::test]
async fn vpc_requests_and_answers_follow_the_botocore_model() {
    let sandbox = Sandbox::start(Options {
        timing: Timing::instant(),
        ..Options::google_apis_on()
    })
    .await
    .expect("sandbox starts");
    let ec2 = Ec2 {
        url: sandbox.url(),
        client: reqwest::Client::new(),
        model: ec2_model(),
    };
    let default_vpc = ec2
        .ok(
            &[
                p("Action", "DescribeVpcs"),
                p("Filter.1.Name", "is-default"),
                p("Filter.1.Value.1", "true"),
            ],
            &["vpcSet", "item", "vpcId"],
        )
        .await;
    assert!(
        default_vpc.starts_with("vpc-") && default_vpc.len() == 21,
        "{default_vpc}"
    );
    let vpc = ec2
        .ok(
            &[
                p("Action", "CreateVpc"),
                p("CidrBlock", "10.0.0.0/16"),
                p("TagSpecification.1.ResourceType", "vpc"),
                p("TagSpecification.1.Tag.1.Key", "managed-by"),
                p("TagSpecification.1.Tag.1.Value", "terrain"),
            ],
            &["vpc", "vpcId"],
        )
        .await;
    ec2.ok(
        &[
            p("Action", "ModifyVpcAttribute"),
            p("VpcId", &vpc),
            p("EnableDnsHostnames.Value", "true"),
        ],
        &[],
    )
    .await;
    let hostnames = ec2
        .ok(
            &[
                p("Action", "DescribeVpcAttribute"),
                p("VpcId", &vpc),
                p("Attribute", "enableDnsHostnames"),
            ],
            &["enableDnsHostnames", "value"],
        )
        .await;
    assert_eq!(hostnames, "true");
    let subnet = ec2
        .ok(
            &[
                p("Action", "CreateSubnet"),
                p("VpcId", &vpc),
                p("CidrBlock", "10.0.0.0/24"),
                p("AvailabilityZone", "us-east-1a"),
            ],
            &["subnet", "subnetId"],
        )
        .await;
    ec2.refused(
        &[
            p("Action", "CreateSubnet"),
            p("VpcId", &vpc),
            p("CidrBlock", "10.0.0.128/25"),
            p("AvailabilityZone", "us-east-1b"),
        ],
        "InvalidSubnet.Conflict",
    )
    .await;
    ec2.ok(
        &[
            p("Action", "ModifySubnetAttribute"),
            p("SubnetId", &subnet),
            p("MapPublicIpOnLaunch.Value", "true"),
        ],
        &[],
    )
    .await;
    let igw = ec2
        .ok(
            &[p("Action", "CreateInternetGateway")],
            &["internetGateway", "internetGatewayId"],
        )
        .await;
    ec2.ok(
        &[
            p("Action", "AttachInternetGateway"),
            p("InternetGatewayId", &igw),
            p("VpcId", &vpc),
        ],
        &[],
    )
    .await;
    ec2.ok(
        &[
            p("Action", "DescribeInternetGateways"),
            p("InternetGatewayId.1", &igw),
        ],
        &[],
    )
    .await;
    let eip = ec2
        .ok(
            &[p("Action", "AllocateAddress"), p("Domain", "vpc")],
            &["allocationId"],
        )
        .await;
    let nat = ec2
        .ok(
            &[
                p("Action", "CreateNatGateway"),
                p("SubnetId", &subnet),
                p("AllocationId", &eip),
                p("ClientToken", "nat-token"),
                p("TagSpecification.1.ResourceType", "natgateway"),
                p("TagSpecification.1.Tag.1.Key", "Name"),
                p("TagSpecification.1.Tag.1.Value", "egress"),
            ],
            &["natGateway", "natGatewayId"],
        )
        .await;
    let state = ec2
        .ok(
            &[
                p("Action", "DescribeNatGateways"),
                p("NatGatewayId.1", &nat),
            ],
            &["natGatewaySet", "item", "state"],
        )
        .await;
    assert_eq!(state, "available", "instant timing");
    ec2.ok(
        &[p("Action", "DescribeAddresses"), p("AllocationId.1", &eip)],
        &[],
    )
    .await;
    let table = ec2
        .ok(
            &[p("Action", "CreateRouteTable"), p("VpcId", &vpc)],
            &["routeTable", "routeTableId"],
        )
        .await;
    ec2.ok(
        &[
            p("Action", "CreateRoute"),
            p("RouteTableId", &table),
            p("DestinationCidrBlock", "0.0.0.0/0"),
            p("NatGatewayId", &nat),
        ],
        &["return"],
    )
    .await;
    ec2.ok(
        &[
            p("Action", "ReplaceRoute"),
            p("RouteTableId", &table),
            p("DestinationCidrBlock", "0.0.0.0/0"),
            p("GatewayId", &igw),
        ],
        &[],
    )
    .await;
    let association = ec2
        .ok(
            &[
                p("Action", "AssociateRouteTable"),
                p("RouteTableId", &table),
                p("SubnetId", &subnet),
            ],
            &["associationId"],
        )
        .await;
    let found = ec2
        .ok(
            &[
                p("Action", "DescribeRouteTables"),
                p("Filter.1.Name", "association.subnet-id"),
                p("Filter.1.Value.1", &subnet),
            ],
            &["routeTableSet", "item", "routeTableId"],
        )
        .await;
    assert_eq!(found, table);
    ec2.ok(
        &[
            p("Action", "CreateTags"),
            p("ResourceId.1", &subnet),
            p("Tag.1.Key", "kubernetes.io/role/internal-elb"),
            p("Tag.1.Value", "1"),
        ],
        &[],
    )
    .await;
    let tagged = ec2
        .ok(
            &[
                p("Action", "DescribeTags"),
                p("Filter.1.Name", "resource-id"),
                p("Filter.1.Value.1", &subnet),
            ],
            &["tagSet", "item", "key"],
        )
        .await;
    assert_eq!(tagged, "kubernetes.io/role/internal-elb");
    ec2.ok(
        &[
            p("Action", "DescribeSubnets"),
            p("Filter.1.Name", "tag-key"),
            p("Filter.1.Value.1", "kubernetes.io/role/internal-elb"),
        ],
        &["subnetSet", "item", "subnetId"],
    )
    .await;
    ec2.ok(
        &[
            p("Action", "DeleteTags"),
            p("ResourceId.1", &subnet),
            p("Tag.1.Key", "kubernetes.io/role/internal-elb"),
        ],
        &[],
    )
    .await;

    // Deletes in the wrong order are refused, as EC2 refuses them.
    let message = ec2
        .refused(
            &[p("Action", "DeleteVpc"), p("VpcId", &vpc)],
            "DependencyViolation",
        )
        .await;
    assert_eq!(
        message,
        format!("The vpc '{vpc}' has dependencies and cannot be deleted.")
    );
    ec2.refused(
        &[p("Action", "DeleteSubnet"), p("SubnetId", &subnet)],
        "DependencyViolation",
    )
    .await;
    ec2.refused(
        &[p("Action", "ReleaseAddress"), p("AllocationId", &eip)],
        "InvalidIPAddress.InUse",
    )
    .await;
    ec2.refused(
        &[
            p("Action", "DeleteInternetGateway"),
            p("InternetGatewayId", &igw),
        ],
        "DependencyViolation",
    )
    .await;
    ec2.refused(
        &[p("Action", "DeleteRouteTable"), p("RouteTableId", &table)],
        "DependencyViolation",
    )
    .await;
    // And in the right one they pass.
    ec2.ok(
        &[p("Action", "DeleteNatGateway"), p("NatGatewayId", &nat)],
        &["natGatewayId"],
    )
    .await;
    let state = ec2
        .ok(
            &[
                p("Action", "DescribeNatGateways"),
                p("NatGatewayId.1", &nat),
            ],
            &["natGatewaySet", "item", "state"],
        )
        .await;
    assert_eq!(state, "deleted");
    for step in [
        vec![p("Action", "ReleaseAddress"), p("AllocationId", &eip)],
        vec![
            p("Action", "DisassociateRouteTable"),
            p("AssociationId", &association),
        ],
        vec![p("Action", "DeleteRouteTable"), p("RouteTableId", &table)],
        vec![p("Action", "DeleteSubnet"), p("SubnetId", &subnet)],
        vec![
            p("Action", "DetachInternetGateway"),
            p("InternetGatewayId", &igw),
            p("VpcId", &vpc),
        ],
        vec![
            p("Action", "DeleteInternetGateway"),
            p("InternetGatewayId", &igw),
        ],
        vec![p("Action", "DeleteVpc"), p("VpcId", &vpc)],
    ] {
        ec2.ok(&step, &[]).await;
    }
    let message = ec2
        .refused(
            &[p("Action", "DescribeVpcs"), p("VpcId.1", &vpc)],
            "InvalidVpcID.NotFound",
        )
        .await;
    assert_eq!(message, format!("The vpc ID '{vpc}' does not exist"));
    ec2.refused(
        &[
            p("Action", "DescribeNatGateways"),
            p("NatGatewayId.1", "nat-0123456789abcdef0"),
        ],
        "NatGatewayNotFound",
    )
    .await;
    // Only the default VPC is left, and the deleted NAT gateway while it is described.
    let held = sandbox.inventory();
    assert!(
        held.iter().all(|l| l.starts_with("ec2 nat gateway")),
        "{held:?}"
    );
    sandbox.shutdown().await;
}

/// The official aws CLI pointed at the sandbox, with no trace of the developer's own
/// configuration or credentials.
struct Cli {
    url: String,
    home: tempfile::TempDir,
}

struct Out {
    ok: bool,
    stdout: String,
    stderr: String,
}

impl Cli {
    async fn run(&self, args: &[&str]) -> Out {
        let mut cmd = tokio::process::Command::new("aws");
        cmd.arg("--endpoint-url")
            .arg(&self.url)
            .args(["--region", "us-east-1", "--output", "json"])
            .args(args)
            .env("AWS_ACCESS_KEY_ID", "x")
            .env("AWS_SECRET_ACCESS_KEY", "y")
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .env("AWS_CONFIG_FILE", "/nonexistent")
            .env("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
            .env("HOME", self.home.path())
            .env_remove("AWS_PROFILE")
            .env_remove("AWS_SESSION_TOKEN")
            .env_remove("AWS_DEFAULT_REGION");
        let out = tokio::time::timeout(Duration::from_secs(120), cmd.output())
            .await
            .expect("the aws CLI finishes within two minutes")
            .expect("the aws CLI runs");
        Out {
            ok: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    async fn json(&self, args: &[&str]) -> Value {
        let out = self.run(args).await;
        assert!(
            out.ok,
            "aws {} failed:\n{}{}",
            args.join(" "),
            out.stdout,
            out.stderr
        );
        if out.stdout.trim().is_empty() {
            return Value::Null;
        }
        serde_json::from_str(&out.stdout).expect("the aws CLI prints JSON")
    }

    /// A command the service must refuse with `code`; the CLI's message.
    async fn fails(&self, args: &[&str], code: &str) -> String {
        let out = self.run(args).await;
        assert!(!out.ok, "aws {} succeeded: {}", args.join(" "), out.stdout);
        assert!(
            out.stderr.contains(&format!("An error occurred ({code})")),
            "aws {}: {}",
            args.join(" "),
            out.stderr
        );
        out.stderr
    }
}

/// `assert_botocore` for what the CLI prints: it prints timestamps as ISO 8601 text where
/// the model (and the wire, in JSON protocols) has numbers, so those are checked as text
/// and then given to the shape check as numbers.
fn assert_cli(model: &Value, shape: &str, value: &Value) {
    fn times(v: &mut Value) {
        match v {
            Value::Object(map) => {
                for (k, item) in map.iter_mut() {
                    if k.ends_with("Time") {
                        if let Some(text) = item.as_str() {
                            let parsed = chrono::DateTime::parse_from_rfc3339(text)
                                .unwrap_or_else(|e| panic!("{k}: {text:?} is not ISO 8601: {e}"));
                            *item = json!(parsed.timestamp());
                        }
                    } else {
                        times(item);
                    }
                }
            }
            Value::Array(items) => items.iter_mut().for_each(times),
            _ => {}
        }
    }
    let mut value = value.clone();
    times(&mut value);
    assert_botocore(model, shape, &value);
}

fn on_path(tool: &str) -> bool {
    std::process::Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_aws_cli_builds_a_vpc_and_eks_takes_only_its_real_subnets() {
    if !on_path("aws") {
        eprintln!("skipping: the aws CLI is not installed");
        return;
    }
    let sandbox = Sandbox::start(Options {
        timing: Timing::scaled(0.2),
        ..Options::google_apis_on()
    })
    .await
    .expect("sandbox starts");
    let aws = Cli {
        url: sandbox.url(),
        home: tempfile::tempdir().expect("temp dir"),
    };
    let model = ec2_model();

    let defaults = aws
        .json(&[
            "ec2",
            "describe-subnets",
            "--filters",
            "Name=default-for-az,Values=true",
        ])
        .await;
    assert_cli(&model, "DescribeSubnetsResult", &defaults);
    let default_subnets: Vec<&Value> = defaults["Subnets"]
        .as_array()
        .into_iter()
        .flatten()
        .collect();
    assert_eq!(default_subnets.len(), 6, "one per zone of us-east-1");
    assert_eq!(default_subnets[0]["CidrBlock"], "172.31.0.0/20");
    assert_eq!(default_subnets[0]["MapPublicIpOnLaunch"], true);

    let vpc = aws
        .json(&[
            "ec2",
            "create-vpc",
            "--cidr-block",
            "10.0.0.0/16",
            "--tag-specifications",
            "ResourceType=vpc,Tags=[{Key=Name,Value=ml}]",
        ])
        .await;
    assert_cli(&model, "CreateVpcResult", &vpc);
    assert_eq!(vpc["Vpc"]["Tags"], json!([{"Key": "Name", "Value": "ml"}]));
    let vpc_id = vpc["Vpc"]["VpcId"].as_str().unwrap_or_default().to_string();
    let refused = aws
        .fails(
            &["ec2", "create-vpc", "--cidr-block", "10.0.0.0/8"],
            "InvalidVpc.Range",
        )
        .await;
    assert!(
        refused.contains("The CIDR '10.0.0.0/8' is invalid."),
        "{refused}"
    );

    let mut subnets = Vec::new();
    for (cidr, zone) in [("10.0.0.0/24", "us-east-1a"), ("10.0.1.0/24", "us-east-1b")] {
        let made = aws
            .json(&[
                "ec2",
                "create-subnet",
                "--vpc-id",
                &vpc_id,
                "--cidr-block",
                cidr,
                "--availability-zone",
                zone,
            ])
            .await;
        assert_cli(&model, "CreateSubnetResult", &made);
        assert_eq!(made["Subnet"]["AvailabilityZone"], zone);
        assert_eq!(made["Subnet"]["AvailableIpAddressCount"], 251);
        subnets.push(
            made["Subnet"]["SubnetId"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        );
    }
    aws.fails(
        &[
            "ec2",
            "create-subnet",
            "--vpc-id",
            &vpc_id,
            "--cidr-block",
            "10.0.1.0/25",
        ],
        "InvalidSubnet.Conflict",
    )
    .await;
    let listed = aws
        .json(&[
            "ec2",
            "describe-subnets",
            "--filters",
            &format!("Name=vpc-id,Values={vpc_id}"),
        ])
        .await;
    assert_cli(&model, "DescribeSubnetsResult", &listed);
    assert_eq!(listed["Subnets"].as_array().map(Vec::len), Some(2));

    let igw = aws.json(&["ec2", "create-internet-gateway"]).await;
    assert_cli(&model, "CreateInternetGatewayResult", &igw);
    let igw_id = igw["InternetGateway"]["InternetGatewayId"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    aws.json(&[
        "ec2",
        "attach-internet-gateway",
        "--internet-gateway-id",
        &igw_id,
        "--vpc-id",
        &vpc_id,
    ])
    .await;
    let eip = aws
        .json(&["ec2", "allocate-address", "--domain", "vpc"])
        .await;
    assert_cli(&model, "AllocateAddressResult", &eip);
    let nat = aws
        .json(&[
            "ec2",
            "create-nat-gateway",
            "--subnet-id",
            &subnets[0],
            "--allocation-id",
            eip["AllocationId"].as_str().unwrap_or_default(),
        ])
        .await;
    assert_cli(&model, "CreateNatGatewayResult", &nat);
    assert_eq!(nat["NatGateway"]["State"], "pending");
    let nat_id = nat["NatGateway"]["NatGatewayId"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let mut state = String::new();
    for _ in 0..40 {
        let described = aws
            .json(&["ec2", "describe-nat-gateways", "--nat-gateway-ids", &nat_id])
            .await;
        assert_cli(&model, "DescribeNatGatewaysResult", &described);
        state = described["NatGateways"][0]["State"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if state == "available" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(state, "available");

    let table = aws
        .json(&["ec2", "create-route-table", "--vpc-id", &vpc_id])
        .await;
    assert_cli(&model, "CreateRouteTableResult", &table);
    let table_id = table["RouteTable"]["RouteTableId"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    aws.json(&[
        "ec2",
        "create-route",
        "--route-table-id",
        &table_id,
        "--destination-cidr-block",
        "0.0.0.0/0",
        "--nat-gateway-id",
        &nat_id,
    ])
    .await;
    aws.fails(
        &[
            "ec2",
            "create-route",
            "--route-table-id",
            &table_id,
            "--destination-cidr-block",
            "0.0.0.0/0",
            "--gateway-id",
            &igw_id,
        ],
        "RouteAlreadyExists",
    )
    .await;
    aws.json(&[
        "ec2",
        "associate-route-table",
        "--route-table-id",
        &table_id,
        "--subnet-id",
        &subnets[1],
    ])
    .await;
    let tables = aws
        .json(&[
            "ec2",
            "describe-route-tables",
            "--filters",
            &format!("Name=vpc-id,Values={vpc_id}"),
        ])
        .await;
    assert_cli(&model, "DescribeRouteTablesResult", &tables);
    let tables = tables["RouteTables"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(tables.len(), 2, "the main table and ours");
    let ours = tables
        .iter()
        .find(|t| t["RouteTableId"] == table_id.as_str())
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        ours["Routes"],
        json!([
            {"DestinationCidrBlock": "10.0.0.0/16", "GatewayId": "local", "State": "active", "Origin": "CreateRouteTable"},
            {"DestinationCidrBlock": "0.0.0.0/0", "NatGatewayId": nat_id, "State": "active", "Origin": "CreateRoute"},
        ])
    );
    assert_eq!(ours["Associations"][0]["SubnetId"], subnets[1].as_str());

    let refused = aws
        .fails(
            &["ec2", "delete-vpc", "--vpc-id", &vpc_id],
            "DependencyViolation",
        )
        .await;
    assert!(
        refused.contains(&format!(
            "The vpc '{vpc_id}' has dependencies and cannot be deleted."
        )),
        "{refused}"
    );

    // The cluster role, made with the CLI as a user would, trusting EKS.
    let trust = |service: &str| {
        json!({"Version": "2012-10-17", "Statement": [{"Effect": "Allow",
            "Principal": {"Service": service}, "Action": ["sts:AssumeRole", "sts:TagSession"]}]})
        .to_string()
    };
    for (name, service) in [
        ("eks-cluster", "eks.amazonaws.com"),
        ("ec2-only", "ec2.amazonaws.com"),
    ] {
        aws.json(&[
            "iam",
            "create-role",
            "--role-name",
            name,
            "--assume-role-policy-document",
            &trust(service),
        ])
        .await;
    }
    let got = aws
        .json(&["iam", "get-role", "--role-name", "eks-cluster"])
        .await;
    let role = "arn:aws:iam::123456789012:role/eks-cluster";
    assert_eq!(got["Role"]["Arn"], role);

    // EKS takes the VPC's subnets, spread over two zones, and nothing EC2 does not have.
    let config = format!("subnetIds={},{}", subnets[0], subnets[1]);
    let cluster = aws
        .json(&[
            "eks",
            "create-cluster",
            "--name",
            "ml",
            "--role-arn",
            role,
            "--resources-vpc-config",
            &config,
        ])
        .await;
    assert_eq!(
        cluster["cluster"]["resourcesVpcConfig"]["vpcId"],
        vpc_id.as_str()
    );
    let refused = aws
        .fails(
            &[
                "eks",
                "create-cluster",
                "--name",
                "typo",
                "--role-arn",
                role,
                "--resources-vpc-config",
                &format!("subnetIds={},subnet-0123456789abcdef0", subnets[0]),
            ],
            "InvalidParameterException",
        )
        .await;
    assert!(
        refused.contains("The subnet ID 'subnet-0123456789abcdef0' does not exist"),
        "{refused}"
    );
    let refused = aws
        .fails(
            &[
                "eks",
                "create-cluster",
                "--name",
                "one-zone",
                "--role-arn",
                role,
                "--resources-vpc-config",
                &format!("subnetIds={}", subnets[0]),
            ],
            "InvalidParameterException",
        )
        .await;
    assert!(
        refused.contains("Subnets specified must be in at least two different AZs"),
        "{refused}"
    );
    // Nor a role the account does not have, or one that does not trust EKS.
    for (arn, said) in [
        (
            "arn:aws:iam::123456789012:role/nobody",
            "Role with arn: arn:aws:iam::123456789012:role/nobody, could not be assumed because it does not exist or the trusted entity is not correct",
        ),
        (
            "arn:aws:iam::123456789012:role/ec2-only",
            "Following required service principals [eks.amazonaws.com] were not found in the trust relationships of clusterRole arn:aws:iam::123456789012:role/ec2-only",
        ),
    ] {
        let refused = aws
            .fails(
                &[
                    "eks",
                    "create-cluster",
                    "--name",
                    "other",
                    "--role-arn",
                    arn,
                    "--resources-vpc-config",
                    &config,
                ],
                "InvalidParameterException",
            )
            .await;
        assert!(refused.contains(said), "{refused}");
    }
    // The cluster's network interfaces keep its subnets.
    aws.json(&["ec2", "delete-nat-gateway", "--nat-gateway-id", &nat_id])
        .await;
    aws.fails(
        &["ec2", "delete-subnet", "--subnet-id", &subnets[1]],
        "DependencyViolation",
    )
    .await;
    sandbox.shutdown().await;
}
