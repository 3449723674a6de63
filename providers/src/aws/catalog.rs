//! The offline catalog of AWS facts the AWS provider checks stacks against without
//! touching the network, by topic: the regions that exist and their partitions (and
//! whether an ARN or a KMS key fits a region), identifier formats (ARNs, subnet and
//! security group ids, CIDRs, EKS names), resource tags, EKS Kubernetes versions and
//! the upgrade path between them, EC2 instance types (shape, CPU architecture, GPUs and
//! Neuron devices per instance) and EKS AMI types with the instances each can boot.
//!
//! Everything here is a snapshot of AWS documentation and the EKS and S3 API models
//! (botocore 1.44). Checks fail with a message listing what the catalog knows, so a
//! stale table shows up as a clear "unknown …" error pointing at the table to extend
//! rather than a confusing API error halfway through an apply.

use std::collections::BTreeMap;

// ---------------------------------------------------------------------------------
// Shared helpers
// ---------------------------------------------------------------------------------

/// "a, b or c".
fn or_list(items: &[&str]) -> String {
    match items.split_last() {
        None => String::new(),
        Some((last, [])) => (*last).to_string(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
    }
}

// ---------------------------------------------------------------------------------
// Regions
// ---------------------------------------------------------------------------------

/// An AWS region and the partition its ARNs name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Region {
    /// The region code (`us-east-1`).
    pub name: &'static str,
    /// `aws`, `aws-cn` or `aws-us-gov`.
    pub partition: &'static str,
}

const fn commercial(name: &'static str) -> Region {
    Region {
        name,
        partition: "aws",
    }
}

/// Every AWS region, as of January 2026: the commercial ones (opt-in regions included),
/// AWS GovCloud (US) and China. The commercial list is the S3 API model's
/// `BucketLocationConstraint` plus us-east-1 (checked by a test); a region opened since
/// is refused with a message naming this table: add it here.
static REGIONS: &[Region] = &[
    commercial("us-east-1"),
    commercial("us-east-2"),
    commercial("us-west-1"),
    commercial("us-west-2"),
    commercial("af-south-1"),
    commercial("ap-east-1"),
    commercial("ap-east-2"),
    commercial("ap-south-1"),
    commercial("ap-south-2"),
    commercial("ap-southeast-1"),
    commercial("ap-southeast-2"),
    commercial("ap-southeast-3"),
    commercial("ap-southeast-4"),
    commercial("ap-southeast-5"),
    commercial("ap-southeast-6"),
    commercial("ap-southeast-7"),
    commercial("ap-northeast-1"),
    commercial("ap-northeast-2"),
    commercial("ap-northeast-3"),
    commercial("ca-central-1"),
    commercial("ca-west-1"),
    commercial("eu-central-1"),
    commercial("eu-central-2"),
    commercial("eu-west-1"),
    commercial("eu-west-2"),
    commercial("eu-west-3"),
    commercial("eu-south-1"),
    commercial("eu-south-2"),
    commercial("eu-north-1"),
    commercial("il-central-1"),
    commercial("me-south-1"),
    commercial("me-central-1"),
    commercial("mx-central-1"),
    commercial("sa-east-1"),
    Region {
        name: "us-gov-east-1",
        partition: "aws-us-gov",
    },
    Region {
        name: "us-gov-west-1",
        partition: "aws-us-gov",
    },
    Region {
        name: "cn-north-1",
        partition: "aws-cn",
    },
    Region {
        name: "cn-northwest-1",
        partition: "aws-cn",
    },
];

/// Every region the catalog knows.
pub fn regions() -> &'static [Region] {
    REGIONS
}

/// The catalog's entry for `name`, when it is an AWS region.
pub fn region(name: &str) -> Option<&'static Region> {
    REGIONS.iter().find(|r| r.name == name)
}

/// Checks that `name` is an AWS region of the catalog.
///
/// Fails for an Availability Zone (naming its region), and for anything else with the
/// close regions (`us-east` → us-east-1, us-east-2) or, when none is close, all of them.
pub fn check_region(name: &str) -> Result<(), String> {
    if region(name).is_some() {
        return Ok(());
    }
    // An Availability Zone is its region and a letter: us-east-1a.
    let parent = name
        .strip_suffix(|c: char| c.is_ascii_lowercase())
        .filter(|p| p.ends_with(|c: char| c.is_ascii_digit()))
        .and_then(region);
    if let Some(r) = parent {
        return Err(format!(
            "`{name}` is an Availability Zone, not a region; its region is {}",
            r.name
        ));
    }
    let names: Vec<&str> = REGIONS.iter().map(|r| r.name).collect();
    // One did-you-mean for the crate: the GCP catalog's, written for region names too.
    let close = crate::gcp::catalog::close_matches(&name.replace('_', "-"), &names, 4);
    let advice = if close.is_empty() {
        format!("; the regions are {}", names.join(", "))
    } else {
        crate::gcp::catalog::did_you_mean_any(&close)
    };
    Err(format!("`{name}` is not an AWS region{advice}"))
}

/// Checks that an ARN's partition (`arn:aws-cn:…`) is the partition of `region`, where
/// the object using it is made: an ARN of another partition can never be used there.
/// Text that is not an ARN of a known partition passes (other checks report it).
pub fn check_arn_partition(arn: &str, region_name: &str) -> Result<(), String> {
    let mut parts = arn.splitn(3, ':');
    let (Some("arn"), Some(partition), Some(rest)) = (parts.next(), parts.next(), parts.next())
    else {
        return Ok(());
    };
    let Some(expected) = region(region_name).map(|r| r.partition) else {
        return Ok(());
    };
    if !PARTITIONS.contains(&partition) || partition == expected {
        return Ok(());
    }
    Err(format!(
        "`{arn}` is an ARN of the {partition} partition, but the provider's region {region_name} is in the {expected} partition, which cannot use it; write arn:{expected}:{rest}"
    ))
}

/// Checks the KMS key S3 encrypts a bucket with: a key id, an alias name or a key or
/// alias ARN (`arn:aws:kms:REGION:ACCOUNT:key/ID`). An ARN must name a catalog region
/// of its partition and, when `bucket_region` is known, the bucket's region, since S3
/// uses only keys in the bucket's region.
pub fn check_kms_key(key: &str, bucket_region: Option<&str>) -> Result<(), String> {
    if !key.starts_with("arn:") {
        return Ok(());
    }
    let shape = "expected a KMS key ARN such as arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab, an alias ARN (…:alias/NAME), a key id or alias/NAME";
    let parts: Vec<&str> = key.splitn(6, ':').collect();
    let [_, partition, service, key_region, account, resource] = parts.as_slice() else {
        return Err(format!("`{key}` is not an ARN; {shape}"));
    };
    if !PARTITIONS.contains(partition) || *service != "kms" {
        return Err(format!("`{key}` is not a KMS ARN; {shape}"));
    }
    if !(resource.starts_with("key/") || resource.starts_with("alias/")) {
        return Err(format!(
            "`{key}` names neither a key (key/ID) nor an alias (alias/NAME); {shape}"
        ));
    }
    if account.len() != 12 || !account.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "`{key}`: the account must be 12 digits, got {account:?}"
        ));
    }
    let Some(found) = region(key_region) else {
        return Err(match check_region(key_region) {
            Err(m) => format!("`{key}`: the key's region {m}"),
            Ok(()) => format!("`{key}` names no region"),
        });
    };
    if found.partition != *partition {
        return Err(format!(
            "`{key}`: {key_region} is in the {} partition, not {partition}; write arn:{}:kms:{key_region}:…",
            found.partition, found.partition
        ));
    }
    match bucket_region {
        Some(b) if b != *key_region => Err(format!(
            "the key is in {key_region} but the bucket would be made in {b} (the provider's region), and S3 encrypts only with a KMS key in the bucket's region; use a key in {b}"
        )),
        _ => Ok(()),
    }
}

// ---------------------------------------------------------------------------------
// Identifiers and formats
// ---------------------------------------------------------------------------------

/// The partitions ARNs may name (commercial, China, GovCloud).
const PARTITIONS: &[&str] = &["aws", "aws-cn", "aws-us-gov"];

/// Checks an IAM role ARN: `arn:aws:iam::<12-digit account>:role/<path/>name`.
pub fn check_role_arn(arn: &str) -> Result<(), String> {
    let shape = "expected an IAM role ARN such as arn:aws:iam::123456789012:role/eks-cluster";
    let parts: Vec<&str> = arn.splitn(6, ':').collect();
    let [prefix, partition, service, region, account, resource] = parts.as_slice() else {
        return Err(format!("{arn:?} is not an ARN; {shape}"));
    };
    if *prefix != "arn" || !PARTITIONS.contains(partition) {
        return Err(format!("{arn:?} is not an ARN; {shape}"));
    }
    if *service != "iam" || !region.is_empty() {
        return Err(format!("{arn:?} is not an IAM ARN; {shape}"));
    }
    if account.len() != 12 || !account.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "{arn:?}: the account must be 12 digits, got {account:?}; {shape}"
        ));
    }
    let Some(path_and_name) = resource.strip_prefix("role/") else {
        return Err(format!(
            "{arn:?} names an IAM {}, not a role; {shape}",
            resource.split('/').next().unwrap_or(resource)
        ));
    };
    let name = path_and_name.rsplit('/').next().unwrap_or_default();
    // IAM role names: 1–64 of letters, digits and +=,.@_-; paths use the same set.
    let allowed = |c: char| c.is_ascii_alphanumeric() || "+=,.@_-".contains(c);
    if name.is_empty() || name.len() > 64 || !name.chars().all(allowed) {
        return Err(format!(
            "{arn:?}: the role name must be 1 to 64 letters, digits or +=,.@_-; {shape}"
        ));
    }
    if !path_and_name.chars().all(|c| c == '/' || allowed(c)) {
        return Err(format!(
            "{arn:?}: the role path holds characters IAM does not allow"
        ));
    }
    Ok(())
}

/// Whether `id` is `<prefix>-` and 8 or 17 lowercase hex digits (EC2's two id lengths).
fn is_ec2_id(id: &str, prefix: &str) -> bool {
    id.strip_prefix(prefix)
        .and_then(|rest| rest.strip_prefix('-'))
        .is_some_and(|hex| {
            (hex.len() == 8 || hex.len() == 17)
                && hex
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        })
}

/// Checks a VPC subnet id (`subnet-0abc12345def67890`).
pub fn check_subnet_id(id: &str) -> Result<(), String> {
    if is_ec2_id(id, "subnet") {
        Ok(())
    } else {
        Err(format!(
            "{id:?} is not a subnet id; expected subnet- and 8 or 17 hex digits, such as subnet-0abc12345def67890"
        ))
    }
}

/// Checks the id of an EC2 network object: `prefix` (`vpc`, `igw`, `nat`) and 8 or 17
/// hex digits; `what` names it in the message (`a VPC id`).
pub fn check_ec2_id(id: &str, prefix: &str, what: &str) -> Result<(), String> {
    if is_ec2_id(id, prefix) {
        Ok(())
    } else {
        Err(format!(
            "{id:?} is not {what}; expected {prefix}- and 8 or 17 hex digits, such as {prefix}-0abc12345def67890"
        ))
    }
}

/// Checks a security group id (`sg-0abc12345def67890`).
pub fn check_security_group_id(id: &str) -> Result<(), String> {
    if is_ec2_id(id, "sg") {
        Ok(())
    } else {
        Err(format!(
            "{id:?} is not a security group id; expected sg- and 8 or 17 hex digits, such as sg-0abc12345def67890 (names are not accepted)"
        ))
    }
}

/// Checks an IPv4 CIDR block (`203.0.113.0/24`) with no bits set past the prefix.
pub fn check_ipv4_cidr(cidr: &str) -> Result<(), String> {
    let shape = "expected an IPv4 CIDR block such as 203.0.113.0/24";
    let Some((addr, len)) = cidr.split_once('/') else {
        return Err(format!("{cidr:?} has no prefix length; {shape}"));
    };
    let addr: std::net::Ipv4Addr = addr
        .parse()
        .map_err(|_| format!("{cidr:?} is not an IPv4 address block; {shape}"))?;
    let len: u32 = len
        .parse()
        .ok()
        .filter(|l| *l <= 32)
        .ok_or_else(|| format!("{cidr:?}: the prefix length must be 0 to 32; {shape}"))?;
    let bits = u32::from(addr);
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    if bits & !mask != 0 {
        let network = std::net::Ipv4Addr::from(bits & mask);
        return Err(format!(
            "{cidr:?} has host bits set; the block is {network}/{len}"
        ));
    }
    Ok(())
}

/// An IPv4 CIDR block as its network address and prefix length; `None` when it is not
/// one [`check_ipv4_cidr`] accepts.
pub fn ipv4_block(cidr: &str) -> Option<(u32, u32)> {
    check_ipv4_cidr(cidr).ok()?;
    let (addr, len) = cidr.split_once('/')?;
    let addr: std::net::Ipv4Addr = addr.parse().ok()?;
    Some((u32::from(addr), len.parse().ok()?))
}

/// The shortest prefix of a VPC's or subnet's IPv4 block (65,536 addresses).
pub const VPC_PREFIX_MIN: u32 = 16;
/// The longest prefix of a VPC's or subnet's IPv4 block (16 addresses).
pub const VPC_PREFIX_MAX: u32 = 28;

/// Checks a VPC's or subnet's IPv4 block: a CIDR block with a prefix of /16 to /28, as
/// EC2 allows.
pub fn check_vpc_cidr(cidr: &str) -> Result<(), String> {
    check_ipv4_cidr(cidr)?;
    match ipv4_block(cidr) {
        Some((_, len)) if (VPC_PREFIX_MIN..=VPC_PREFIX_MAX).contains(&len) => Ok(()),
        Some((_, len)) => Err(format!(
            "{cidr:?} is a /{len}; EC2 takes blocks from /{VPC_PREFIX_MIN} (65,536 addresses) to /{VPC_PREFIX_MAX} (16)"
        )),
        None => Err(format!("{cidr:?} is not an IPv4 CIDR block")),
    }
}

/// Whether block `inner` lies inside block `outer`; `None` when either is not a block.
pub fn cidr_within(inner: &str, outer: &str) -> Option<bool> {
    let (i, ilen) = ipv4_block(inner)?;
    let (o, olen) = ipv4_block(outer)?;
    let mask = if olen == 0 {
        0
    } else {
        u32::MAX << (32 - olen)
    };
    Some(ilen >= olen && i & mask == o)
}

/// The longest EKS cluster name.
pub const EKS_CLUSTER_NAME_MAX: usize = 100;
/// The longest EKS node group name.
pub const EKS_NODE_GROUP_NAME_MAX: usize = 63;
/// The longest EKS capability name. The API model states no bound (only "alphanumeric
/// characters, hyphens, and underscores"): 64 is an assumption, to correct when EKS
/// documents one.
pub const EKS_CAPABILITY_NAME_MAX: usize = 64;

/// Checks an EKS cluster, node group or capability name: letters, digits, `-` and `_`,
/// starting with a letter or digit, at most `max` characters (the `ClusterName` pattern
/// of the API).
pub fn check_eks_name(name: &str, max: usize) -> Result<(), String> {
    if name.is_empty() {
        return Err("must not be empty".into());
    }
    if name.chars().count() > max {
        return Err(format!(
            "{name:?} is {} characters long; at most {max} are allowed",
            name.chars().count()
        ));
    }
    if !name.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        return Err(format!("{name:?} must start with a letter or digit"));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_'))
    {
        return Err(format!(
            "{name:?} holds {bad:?}; only letters, digits, '-' and '_' are allowed"
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------
// Tags
// ---------------------------------------------------------------------------------

/// The most tags an EKS resource (or S3 bucket) carries.
pub const MAX_TAGS: usize = 50;
/// Tags terrain adds to everything it creates (`managed-by`, `terrain-address`).
pub const OUR_TAGS: usize = 2;

/// Checks user tags: at most [`MAX_TAGS`] minus terrain's own, keys of 1–128
/// characters not starting with the reserved `aws:`, values of at most 256.
pub fn check_tags(tags: &BTreeMap<String, String>) -> Result<(), String> {
    let room = MAX_TAGS - OUR_TAGS;
    if tags.len() > room {
        return Err(format!(
            "{} tags; at most {room} are allowed (AWS allows {MAX_TAGS}, terrain uses {OUR_TAGS})",
            tags.len()
        ));
    }
    for (key, value) in tags {
        if key.is_empty() || key.chars().count() > 128 {
            return Err(format!("key {key:?} must be 1 to 128 characters"));
        }
        if key.to_ascii_lowercase().starts_with("aws:") {
            return Err(format!("key {key:?}: the aws: prefix is reserved for AWS"));
        }
        if key == super::MANAGED_BY.0 || key == super::ADDRESS_TAG {
            return Err(format!("key {key:?} is terrain's own; pick another key"));
        }
        if value.chars().count() > 256 {
            return Err(format!("value of {key:?} is longer than 256 characters"));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------
// EKS Kubernetes versions
// ---------------------------------------------------------------------------------

/// The version a new cluster gets when the stack names none.
pub const DEFAULT_EKS_VERSION: &str = "1.31";

/// Kubernetes minor versions EKS offers for new clusters and upgrades, oldest first
/// (standard and extended support). Source:
/// https://docs.aws.amazon.com/eks/latest/userguide/kubernetes-versions.html
pub const EKS_VERSIONS: &[&str] = &["1.29", "1.30", "1.31", "1.32", "1.33", "1.34"];

/// The last Kubernetes version with Amazon Linux 2 AMIs; AL2 AMIs end there.
/// Source: https://docs.aws.amazon.com/eks/latest/userguide/al2-ami-deprecation.html
pub const LAST_AL2_VERSION: &str = "1.32";

/// The minor number of `1.N`.
pub fn eks_minor(version: &str) -> Option<u32> {
    let minor = version.strip_prefix("1.")?;
    if minor.is_empty() || minor.len() > 3 || !minor.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    minor.parse().ok()
}

/// Checks that EKS offers `version` (a `major.minor` such as "1.31").
pub fn check_eks_version(version: &str) -> Result<(), String> {
    let known = EKS_VERSIONS.join(", ");
    let Some(minor) = eks_minor(version) else {
        return Err(format!(
            "{version:?} is not a Kubernetes minor version; EKS takes \"1.N\" without a patch number, one of {known}"
        ));
    };
    if EKS_VERSIONS.contains(&version) {
        return Ok(());
    }
    let oldest = EKS_VERSIONS
        .first()
        .and_then(|v| eks_minor(v))
        .unwrap_or_default();
    if minor < oldest {
        Err(format!(
            "Kubernetes {version} is past the end of EKS extended support; use one of {known}"
        ))
    } else {
        Err(format!(
            "Kubernetes {version} is not an EKS version terrain knows ({known})"
        ))
    }
}

/// The versions to apply one after another to go from `from` to `to`: EKS upgrades the
/// control plane one minor version per UpdateClusterVersion and never downgrades.
/// `Ok(vec![])` when they are the same.
pub fn upgrade_path(from: &str, to: &str) -> Result<Vec<String>, String> {
    let (Some(a), Some(b)) = (eks_minor(from), eks_minor(to)) else {
        return Err(format!(
            "cannot tell how to go from {from:?} to {to:?}: versions are \"1.N\""
        ));
    };
    if b < a {
        return Err(format!(
            "EKS cannot downgrade a cluster ({from} → {to}); keep version = \"{from}\", or replace the cluster by changing its name"
        ));
    }
    Ok((a + 1..=b).map(|m| format!("1.{m}")).collect())
}

/// Checks that `from` → `to` is a single EKS upgrade step; the message lists the
/// versions to apply in turn.
pub fn check_upgrade(from: &str, to: &str) -> Result<(), String> {
    let path = upgrade_path(from, to)?;
    if path.len() > 1 {
        let steps: Vec<String> = path.iter().map(|v| format!("\"{v}\"")).collect();
        return Err(format!(
            "EKS upgrades one minor version at a time: {from} → {to} skips {}; set version = {}, apply, and repeat for {}",
            path[..path.len() - 1].join(", "),
            steps[0],
            steps[1..].join(", then ")
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------
// EC2 instance types
// ---------------------------------------------------------------------------------

/// A CPU architecture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    X86,
    Arm,
}

impl Arch {
    fn describe(self) -> &'static str {
        match self {
            Arch::X86 => "x86_64",
            Arch::Arm => "arm64 (Graviton)",
        }
    }
}

/// What accelerates an instance, as far as AMIs care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accel {
    None,
    /// NVIDIA GPUs: need an AMI with the NVIDIA driver.
    Nvidia,
    /// AWS Inferentia or Trainium: need an AMI with the Neuron driver.
    Neuron,
}

/// An instance type as far as the catalog knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceType {
    /// The family (`g5`, `p4d`, `m7i-flex`).
    pub family: String,
    /// The size (`xlarge`, `48xlarge`, `metal`).
    pub size: String,
    pub arch: Arch,
    pub accel: Accel,
    /// GPUs (or Neuron devices) per instance; 0 without accelerators.
    pub accelerators: u32,
}

/// An accelerated instance family: its accelerator, product name and per-size count.
struct AccelFamily {
    family: &'static str,
    accel: Accel,
    arch: Arch,
    product: &'static str,
    sizes: &'static [(&'static str, u32)],
}

const SMALL_TO_16X: &[(&str, u32)] = &[
    ("xlarge", 1),
    ("2xlarge", 1),
    ("4xlarge", 1),
    ("8xlarge", 1),
    ("16xlarge", 1),
    ("12xlarge", 4),
    ("24xlarge", 4),
    ("48xlarge", 8),
];

// Source: https://aws.amazon.com/ec2/instance-types/#Accelerated_Computing (GPUs and
// Neuron devices per instance size).
#[rustfmt::skip]
static ACCEL_FAMILIES: &[AccelFamily] = &[
    AccelFamily { family: "p3", accel: Accel::Nvidia, arch: Arch::X86, product: "NVIDIA V100", sizes: &[("2xlarge", 1), ("8xlarge", 4), ("16xlarge", 8)] },
    AccelFamily { family: "p3dn", accel: Accel::Nvidia, arch: Arch::X86, product: "NVIDIA V100", sizes: &[("24xlarge", 8)] },
    AccelFamily { family: "p4d", accel: Accel::Nvidia, arch: Arch::X86, product: "NVIDIA A100", sizes: &[("24xlarge", 8)] },
    AccelFamily { family: "p4de", accel: Accel::Nvidia, arch: Arch::X86, product: "NVIDIA A100 80GB", sizes: &[("24xlarge", 8)] },
    AccelFamily { family: "p5", accel: Accel::Nvidia, arch: Arch::X86, product: "NVIDIA H100", sizes: &[("4xlarge", 1), ("48xlarge", 8)] },
    AccelFamily { family: "p5e", accel: Accel::Nvidia, arch: Arch::X86, product: "NVIDIA H200", sizes: &[("48xlarge", 8)] },
    AccelFamily { family: "p5en", accel: Accel::Nvidia, arch: Arch::X86, product: "NVIDIA H200", sizes: &[("48xlarge", 8)] },
    AccelFamily { family: "p6-b200", accel: Accel::Nvidia, arch: Arch::X86, product: "NVIDIA B200", sizes: &[("48xlarge", 8)] },
    AccelFamily { family: "g3s", accel: Accel::Nvidia, arch: Arch::X86, product: "NVIDIA M60", sizes: &[("xlarge", 1)] },
    AccelFamily { family: "g3", accel: Accel::Nvidia, arch: Arch::X86, product: "NVIDIA M60", sizes: &[("4xlarge", 1), ("8xlarge", 2), ("16xlarge", 4)] },
    AccelFamily { family: "g4dn", accel: Accel::Nvidia, arch: Arch::X86, product: "NVIDIA T4", sizes: &[("xlarge", 1), ("2xlarge", 1), ("4xlarge", 1), ("8xlarge", 1), ("16xlarge", 1), ("12xlarge", 4), ("metal", 8)] },
    AccelFamily { family: "g5", accel: Accel::Nvidia, arch: Arch::X86, product: "NVIDIA A10G", sizes: SMALL_TO_16X },
    AccelFamily { family: "g5g", accel: Accel::Nvidia, arch: Arch::Arm, product: "NVIDIA T4G", sizes: &[("xlarge", 1), ("2xlarge", 1), ("4xlarge", 1), ("8xlarge", 1), ("16xlarge", 2), ("metal", 2)] },
    AccelFamily { family: "g6", accel: Accel::Nvidia, arch: Arch::X86, product: "NVIDIA L4", sizes: SMALL_TO_16X },
    AccelFamily { family: "gr6", accel: Accel::Nvidia, arch: Arch::X86, product: "NVIDIA L4", sizes: &[("4xlarge", 1), ("8xlarge", 1)] },
    AccelFamily { family: "g6e", accel: Accel::Nvidia, arch: Arch::X86, product: "NVIDIA L40S", sizes: SMALL_TO_16X },
    AccelFamily { family: "inf1", accel: Accel::Neuron, arch: Arch::X86, product: "AWS Inferentia", sizes: &[("xlarge", 1), ("2xlarge", 1), ("6xlarge", 4), ("24xlarge", 16)] },
    AccelFamily { family: "inf2", accel: Accel::Neuron, arch: Arch::X86, product: "AWS Inferentia2", sizes: &[("xlarge", 1), ("8xlarge", 1), ("24xlarge", 6), ("48xlarge", 12)] },
    AccelFamily { family: "trn1", accel: Accel::Neuron, arch: Arch::X86, product: "AWS Trainium", sizes: &[("2xlarge", 1), ("32xlarge", 16)] },
    AccelFamily { family: "trn1n", accel: Accel::Neuron, arch: Arch::X86, product: "AWS Trainium", sizes: &[("32xlarge", 16)] },
    AccelFamily { family: "trn2", accel: Accel::Neuron, arch: Arch::X86, product: "AWS Trainium2", sizes: &[("48xlarge", 16)] },
];

/// Accelerated families EKS AMIs cannot drive, with the advice shown instead.
static UNSUPPORTED_FAMILIES: &[(&str, &str)] = &[
    ("p2", "the K80 GPUs of p2 instances are not supported by current NVIDIA drivers or EKS GPU AMIs; use g4dn (T4) or g5 (A10G)"),
    ("g4ad", "g4ad instances carry AMD GPUs, for which EKS has no AMI; use g4dn (NVIDIA T4) or g5 (NVIDIA A10G)"),
    ("dl1", "dl1 instances carry Habana Gaudi accelerators, for which EKS has no AMI; use p4d or trn1"),
];

/// Instance classes (the letters before the generation) that are always accelerated:
/// a family of these classes missing from the table is unknown, not plain.
const ACCELERATED_CLASSES: &[&str] = &["p", "g", "gr", "inf", "trn", "dl"];

/// Whether `size` is an EC2 size word: nano … xlarge, `<n>xlarge`, metal, `metal-<n>xl`.
fn is_size(size: &str) -> bool {
    const WORDS: &[&str] = &[
        "nano", "micro", "small", "medium", "large", "xlarge", "metal",
    ];
    if WORDS.contains(&size) {
        return true;
    }
    let digits_then = |s: &str, suffix: &str| {
        s.strip_suffix(suffix)
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    };
    digits_then(size, "xlarge")
        || size
            .strip_prefix("metal-")
            .is_some_and(|rest| digits_then(rest, "xl"))
}

/// Splits a family into its class letters, generation and attribute suffix:
/// `m7i-flex` → (`m`, 7, `i-flex`).
fn family_parts(family: &str) -> Option<(&str, u32, &str)> {
    let class_end = family.find(|c: char| !c.is_ascii_lowercase())?;
    let (class, rest) = family.split_at(class_end);
    let gen_end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    let (generation, attributes) = rest.split_at(gen_end);
    if class.is_empty() || generation.is_empty() {
        return None;
    }
    if !attributes
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    {
        return None;
    }
    Some((class, generation.parse().ok()?, attributes))
}

/// Parses and classifies an instance type (`g5.xlarge`).
///
/// Fails when the name is not shaped like an EC2 instance type, names an accelerated
/// family the catalog does not know or EKS cannot drive, or a size its family lacks.
pub fn instance_type(name: &str) -> Result<InstanceType, String> {
    let shape = "expected family.size such as m5.large, g5.xlarge or p4d.24xlarge";
    let Some((family, size)) = name.split_once('.') else {
        return Err(format!("{name:?} is not an EC2 instance type; {shape}"));
    };
    let Some((class, _, attributes)) = family_parts(family) else {
        return Err(format!("{name:?} is not an EC2 instance type; {shape}"));
    };
    if !is_size(size) {
        return Err(format!(
            "{name:?} is not an EC2 instance type: {size:?} is not a size (large, xlarge, 2xlarge, …, metal); {shape}"
        ));
    }
    if let Some((_, advice)) = UNSUPPORTED_FAMILIES.iter().find(|(f, _)| *f == family) {
        return Err(format!("{name}: {advice}"));
    }
    if let Some(known) = ACCEL_FAMILIES.iter().find(|f| f.family == family) {
        let Some((_, count)) = known.sizes.iter().find(|(s, _)| *s == size) else {
            let sizes: Vec<&str> = known.sizes.iter().map(|(s, _)| *s).collect();
            return Err(format!(
                "{name}: {family} ({}) comes in sizes {}",
                known.product,
                or_list(&sizes)
            ));
        };
        return Ok(InstanceType {
            family: family.to_string(),
            size: size.to_string(),
            arch: known.arch,
            accel: known.accel,
            accelerators: *count,
        });
    }
    if ACCELERATED_CLASSES.contains(&class) {
        let families: Vec<&str> = ACCEL_FAMILIES.iter().map(|f| f.family).collect();
        return Err(format!(
            "{name}: {family} is an accelerated instance family terrain does not know; known families: {}",
            families.join(", ")
        ));
    }
    // Graviton families carry a `g` right after the generation (m7g, c7gn, r6gd,
    // im4gn, is4gen); a1 is the first Graviton generation.
    let arch = if attributes.starts_with('g') || family == "a1" {
        Arch::Arm
    } else {
        Arch::X86
    };
    Ok(InstanceType {
        family: family.to_string(),
        size: size.to_string(),
        arch,
        accel: Accel::None,
        accelerators: 0,
    })
}

// ---------------------------------------------------------------------------------
// EKS AMI types
// ---------------------------------------------------------------------------------

/// An EKS AMI type (`amiType`): the architecture and accelerator drivers it ships.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AmiType {
    pub name: &'static str,
    pub arch: Arch,
    /// Which accelerators its drivers serve; `None` means plain instances only.
    pub accel: &'static [Accel],
    /// Amazon Linux 2, which EKS stopped building after [`LAST_AL2_VERSION`].
    pub al2: bool,
}

const PLAIN: &[Accel] = &[Accel::None];
const NVIDIA: &[Accel] = &[Accel::Nvidia];
const NEURON: &[Accel] = &[Accel::Neuron];
// The AL2 accelerated AMI carries both the NVIDIA and the Neuron drivers.
const AL2_ACCELERATED: &[Accel] = &[Accel::Nvidia, Accel::Neuron];

// The `AMITypes` enum of the EKS API model (botocore 1.44), with what each AMI serves.
// Source: https://docs.aws.amazon.com/eks/latest/APIReference/API_Nodegroup.html
#[rustfmt::skip]
static AMI_TYPES: &[AmiType] = &[
    AmiType { name: "AL2_x86_64", arch: Arch::X86, accel: PLAIN, al2: true },
    AmiType { name: "AL2_x86_64_GPU", arch: Arch::X86, accel: AL2_ACCELERATED, al2: true },
    AmiType { name: "AL2_ARM_64", arch: Arch::Arm, accel: PLAIN, al2: true },
    AmiType { name: "CUSTOM", arch: Arch::X86, accel: PLAIN, al2: false },
    AmiType { name: "BOTTLEROCKET_ARM_64", arch: Arch::Arm, accel: PLAIN, al2: false },
    AmiType { name: "BOTTLEROCKET_x86_64", arch: Arch::X86, accel: PLAIN, al2: false },
    AmiType { name: "BOTTLEROCKET_ARM_64_FIPS", arch: Arch::Arm, accel: PLAIN, al2: false },
    AmiType { name: "BOTTLEROCKET_x86_64_FIPS", arch: Arch::X86, accel: PLAIN, al2: false },
    AmiType { name: "BOTTLEROCKET_ARM_64_NVIDIA", arch: Arch::Arm, accel: NVIDIA, al2: false },
    AmiType { name: "BOTTLEROCKET_x86_64_NVIDIA", arch: Arch::X86, accel: NVIDIA, al2: false },
    AmiType { name: "BOTTLEROCKET_ARM_64_NVIDIA_FIPS", arch: Arch::Arm, accel: NVIDIA, al2: false },
    AmiType { name: "BOTTLEROCKET_x86_64_NVIDIA_FIPS", arch: Arch::X86, accel: NVIDIA, al2: false },
    AmiType { name: "WINDOWS_CORE_2019_x86_64", arch: Arch::X86, accel: PLAIN, al2: false },
    AmiType { name: "WINDOWS_FULL_2019_x86_64", arch: Arch::X86, accel: PLAIN, al2: false },
    AmiType { name: "WINDOWS_CORE_2022_x86_64", arch: Arch::X86, accel: PLAIN, al2: false },
    AmiType { name: "WINDOWS_FULL_2022_x86_64", arch: Arch::X86, accel: PLAIN, al2: false },
    AmiType { name: "WINDOWS_CORE_2025_x86_64", arch: Arch::X86, accel: PLAIN, al2: false },
    AmiType { name: "WINDOWS_FULL_2025_x86_64", arch: Arch::X86, accel: PLAIN, al2: false },
    AmiType { name: "AL2023_x86_64_STANDARD", arch: Arch::X86, accel: PLAIN, al2: false },
    AmiType { name: "AL2023_ARM_64_STANDARD", arch: Arch::Arm, accel: PLAIN, al2: false },
    AmiType { name: "AL2023_x86_64_NEURON", arch: Arch::X86, accel: NEURON, al2: false },
    AmiType { name: "AL2023_x86_64_NVIDIA", arch: Arch::X86, accel: NVIDIA, al2: false },
    AmiType { name: "AL2023_ARM_64_NVIDIA", arch: Arch::Arm, accel: NVIDIA, al2: false },
];

/// Every AMI type EKS managed node groups take.
pub fn ami_types() -> &'static [AmiType] {
    AMI_TYPES
}

/// The AMI type named `name`.
pub fn ami_type(name: &str) -> Option<&'static AmiType> {
    AMI_TYPES.iter().find(|a| a.name == name)
}

/// The AMI type a node group gets when the stack names none: Amazon Linux 2023 in the
/// instances' architecture, with the NVIDIA or Neuron drivers their accelerators need.
pub fn default_ami_type(arch: Arch, accel: Accel) -> &'static str {
    match (arch, accel) {
        (Arch::X86, Accel::None) => "AL2023_x86_64_STANDARD",
        (Arch::X86, Accel::Nvidia) => "AL2023_x86_64_NVIDIA",
        (Arch::X86, Accel::Neuron) => "AL2023_x86_64_NEURON",
        (Arch::Arm, Accel::Nvidia) => "AL2023_ARM_64_NVIDIA",
        // No Graviton instance carries Neuron devices; the standard AMI is the closest.
        (Arch::Arm, Accel::None | Accel::Neuron) => "AL2023_ARM_64_STANDARD",
    }
}

/// The AMI types that fit instances of `arch` with `accel`, for messages.
fn fitting(arch: Arch, accel: Accel) -> Vec<&'static str> {
    AMI_TYPES
        .iter()
        .filter(|a| a.arch == arch && a.accel.contains(&accel) && a.name != "CUSTOM")
        .filter(|a| !a.name.starts_with("WINDOWS") || accel == Accel::None)
        .map(|a| a.name)
        .collect()
}

/// What the instance types of one node group have in common: one architecture and one
/// kind of accelerator, since one AMI boots them all.
///
/// Fails naming the instance types that disagree.
pub fn common_shape(types: &[InstanceType]) -> Result<(Arch, Accel), String> {
    let Some(first) = types.first() else {
        return Err("at least one instance type is needed".into());
    };
    let name = |t: &InstanceType| format!("{}.{}", t.family, t.size);
    if let Some(other) = types.iter().find(|t| t.arch != first.arch) {
        return Err(format!(
            "{} is {} but {} is {}; one AMI boots a node group, so put them in separate node groups",
            name(first),
            first.arch.describe(),
            name(other),
            other.arch.describe()
        ));
    }
    let describe = |a: Accel| match a {
        Accel::None => "no accelerators",
        Accel::Nvidia => "NVIDIA GPUs",
        Accel::Neuron => "Neuron devices",
    };
    if let Some(other) = types.iter().find(|t| t.accel != first.accel) {
        return Err(format!(
            "{} has {} but {} has {}; one AMI boots a node group, so put them in separate node groups",
            name(first),
            describe(first.accel),
            name(other),
            describe(other.accel)
        ));
    }
    Ok((first.arch, first.accel))
}

/// Checks that AMI type `ami` boots instances of `arch` with `accel` (`example` names one
/// of them for the message).
pub fn check_ami_fits(ami: &str, arch: Arch, accel: Accel, example: &str) -> Result<(), String> {
    let Some(found) = ami_type(ami) else {
        let names: Vec<&str> = AMI_TYPES.iter().map(|a| a.name).collect();
        let hint = names
            .iter()
            .find(|n| n.eq_ignore_ascii_case(ami))
            .map(|n| format!(" (did you mean {n}?)"))
            .unwrap_or_default();
        return Err(format!(
            "{ami:?} is not an EKS AMI type{hint}; use one of {}",
            names.join(", ")
        ));
    };
    if found.name == "CUSTOM" {
        return Err("CUSTOM AMIs come from a launch template, which eks_node_group does not manage; leave ami_type out or pick an EKS AMI type".into());
    }
    let fits = fitting(arch, accel);
    let advice = format!(
        "set ami_type to {} or leave it out (default {})",
        or_list(&fits),
        default_ami_type(arch, accel)
    );
    if found.arch != arch {
        return Err(format!(
            "{ami} is an {} AMI but {example} is {}; {advice}",
            found.arch.describe(),
            arch.describe()
        ));
    }
    if !found.accel.contains(&accel) {
        let message = match accel {
            Accel::Nvidia => format!("{example} has NVIDIA GPUs, which need a GPU AMI with the NVIDIA driver; {ami} has none"),
            Accel::Neuron => format!("{example} has AWS Neuron devices, which need an AMI with the Neuron driver; {ami} has none"),
            Accel::None if found.accel.contains(&Accel::Nvidia) => format!("{ami} is a GPU AMI but {example} has no NVIDIA GPU"),
            Accel::None => format!("{ami} is an accelerator AMI but {example} has no accelerator"),
        };
        return Err(format!("{message}; {advice}"));
    }
    Ok(())
}

/// Checks that AMI type `ami` exists for Kubernetes `version` (Amazon Linux 2 stops at
/// [`LAST_AL2_VERSION`]).
pub fn check_ami_for_version(ami: &str, version: &str) -> Result<(), String> {
    let (Some(found), Some(minor), Some(last)) = (
        ami_type(ami),
        eks_minor(version),
        eks_minor(LAST_AL2_VERSION),
    ) else {
        return Ok(());
    };
    if found.al2 && minor > last {
        let replacement = ami.replace("AL2_", "AL2023_").replace("_GPU", "_NVIDIA");
        let replacement = if ami_type(&replacement).is_some() {
            replacement
        } else {
            format!("{ami}_STANDARD").replace("AL2_", "AL2023_")
        };
        return Err(format!(
            "EKS builds Amazon Linux 2 AMIs up to Kubernetes {LAST_AL2_VERSION}; the cluster runs {version}: use {replacement}"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_come_from_the_catalog() {
        for ok in [
            "us-east-1",
            "ap-southeast-7",
            "mx-central-1",
            "us-gov-west-1",
            "cn-northwest-1",
        ] {
            assert_eq!(check_region(ok), Ok(()), "{ok}");
        }
        assert_eq!(
            check_region("us-east").expect_err("no number"),
            "`us-east` is not an AWS region; did you mean `us-east-1`, `us-east-2`?"
        );
        let cases = [
            ("us-east-3", "did you mean `us-east-1`, `us-east-2`?"),
            (
                "eu-west-4",
                "did you mean `eu-west-1`, `eu-west-2`, `eu-west-3`?",
            ),
            ("us_west_2", "did you mean `us-west-2`?"),
            ("US-EAST-1", "did you mean `us-east-1`?"),
            (
                "us-east-1a",
                "`us-east-1a` is an Availability Zone, not a region; its region is us-east-1",
            ),
            (
                "mars-north-1",
                "is not an AWS region; the regions are us-east-1, us-east-2",
            ),
            ("", "is not an AWS region; the regions are"),
        ];
        for (name, want) in cases {
            let e = check_region(name).expect_err(name);
            assert!(e.contains(want), "{name}: {e}");
            assert!(!e.ends_with('.'), "{e}");
        }
        let partitions: Vec<&str> = regions().iter().map(|r| r.partition).collect();
        assert!(partitions.iter().all(|p| PARTITIONS.contains(p)));
        assert_eq!(region("cn-north-1").map(|r| r.partition), Some("aws-cn"));
        assert_eq!(
            region("us-gov-east-1").map(|r| r.partition),
            Some("aws-us-gov")
        );
    }

    #[test]
    fn regions_match_the_s3_api_model() {
        // Every region a bucket can be made in is a region; `EU` is eu-west-1's legacy
        // alias, and us-east-1 is the absence of a constraint.
        let model = terrain_contracts::botocore("s3", "2006-03-01");
        let mut constraints: Vec<String> = model["shapes"]["BucketLocationConstraint"]["enum"]
            .as_array()
            .expect("BucketLocationConstraint enum")
            .iter()
            .filter_map(|v| v.as_str().filter(|r| *r != "EU").map(str::to_string))
            .chain(["us-east-1".to_string()])
            .collect();
        constraints.sort();
        let mut ours: Vec<String> = regions().iter().map(|r| r.name.to_string()).collect();
        ours.sort();
        assert_eq!(ours, constraints);
    }

    #[test]
    fn arns_belong_to_the_region_partition() {
        let role = "arn:aws:iam::123456789012:role/eks";
        assert_eq!(check_arn_partition(role, "us-east-1"), Ok(()));
        assert_eq!(check_arn_partition("not-an-arn", "cn-north-1"), Ok(()));
        assert_eq!(check_arn_partition(role, "us-west9"), Ok(()));
        assert_eq!(
            check_arn_partition(role, "cn-north-1").expect_err("wrong partition"),
            "`arn:aws:iam::123456789012:role/eks` is an ARN of the aws partition, but the provider's region cn-north-1 is in the aws-cn partition, which cannot use it; write arn:aws-cn:iam::123456789012:role/eks"
        );
        assert!(
            check_arn_partition("arn:aws-us-gov:iam::123456789012:role/eks", "us-east-1")
                .expect_err("gov")
                .contains("write arn:aws:iam::")
        );
    }

    #[test]
    fn kms_keys_live_in_the_bucket_region() {
        let key = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab";
        for ok in ["1234abcd-12ab-34cd-56ef-1234567890ab", "alias/ml", key] {
            assert_eq!(check_kms_key(ok, Some("us-east-1")), Ok(()), "{ok}");
        }
        assert_eq!(check_kms_key(key, None), Ok(()));
        assert_eq!(
            check_kms_key("arn:aws:kms:eu-west-1:123456789012:alias/ml", None),
            Ok(())
        );
        let cases = [
            (key, Some("eu-west-1"), "the key is in us-east-1 but the bucket would be made in eu-west-1"),
            ("arn:aws:kms:us-east:123456789012:key/k", None, "the key's region `us-east` is not an AWS region; did you mean `us-east-1`, `us-east-2`?"),
            ("arn:aws:kms:us-west9:123456789012:key/k", None, "not an AWS region"),
            ("arn:aws:kms:cn-north-1:123456789012:key/k", None, "cn-north-1 is in the aws-cn partition, not aws"),
            ("arn:aws:kms", None, "not an ARN"),
            ("arn:aws:s3:::bucket", None, "not a KMS ARN"),
            ("arn:aws:kms:us-east-1:123456789012:grant/g", None, "names neither a key"),
            ("arn:aws:kms:us-east-1:1234:key/k", None, "12 digits"),
        ];
        for (k, bucket, want) in cases {
            let e = check_kms_key(k, bucket).expect_err(k);
            assert!(e.contains(want), "{k}: {e}");
        }
    }

    #[test]
    fn role_arns() {
        let good = [
            "arn:aws:iam::123456789012:role/eks-cluster",
            "arn:aws:iam::123456789012:role/service-role/AmazonEKS_CNI+x=y,z.w@v",
            "arn:aws-cn:iam::123456789012:role/r",
        ];
        for arn in good {
            assert_eq!(check_role_arn(arn), Ok(()), "{arn}");
        }
        let bad = [
            ("eks-cluster", "not an ARN"),
            ("arn:aws:s3:::bucket/x", "not an IAM ARN"),
            ("arn:aws:iam::1234:role/r", "12 digits"),
            (
                "arn:aws:iam::123456789012:user/alice",
                "names an IAM user, not a role",
            ),
            (
                "arn:aws:iam::123456789012:role/",
                "role name must be 1 to 64",
            ),
            (
                "arn:aws:iam::123456789012:role/has space",
                "role name must be",
            ),
            (
                "arn:aws:iam:us-east-1:123456789012:role/r",
                "not an IAM ARN",
            ),
        ];
        for (arn, want) in bad {
            let e = check_role_arn(arn).expect_err(arn);
            assert!(e.contains(want), "{arn}: {e}");
        }
    }

    #[test]
    fn ec2_ids_and_cidrs() {
        assert!(check_subnet_id("subnet-0abc12345def67890").is_ok());
        assert!(check_subnet_id("subnet-1a2b3c4d").is_ok());
        assert!(check_subnet_id("subnet-XYZ").is_err());
        assert!(check_subnet_id("sg-1a2b3c4d").is_err());
        assert!(check_security_group_id("sg-0abc12345def67890").is_ok());
        assert!(check_security_group_id("default")
            .expect_err("a name")
            .contains("names are not accepted"));
        assert!(check_ipv4_cidr("0.0.0.0/0").is_ok());
        assert!(check_ipv4_cidr("203.0.113.0/24").is_ok());
        assert!(check_ipv4_cidr("203.0.113.7/24")
            .expect_err("host bits")
            .contains("203.0.113.0/24"));
        assert!(check_ipv4_cidr("203.0.113.0").is_err());
        assert!(check_ipv4_cidr("203.0.113.0/33").is_err());
    }

    #[test]
    fn eks_names() {
        assert!(check_eks_name("ml-prod_1", EKS_CLUSTER_NAME_MAX).is_ok());
        assert!(check_eks_name("-ml", EKS_CLUSTER_NAME_MAX).is_err());
        assert!(check_eks_name("ml.prod", EKS_CLUSTER_NAME_MAX)
            .expect_err("dot")
            .contains("'.'"));
        assert!(check_eks_name(&"a".repeat(64), EKS_NODE_GROUP_NAME_MAX)
            .expect_err("long")
            .contains("at most 63"));
        assert!(check_eks_name("", EKS_CLUSTER_NAME_MAX).is_err());
    }

    #[test]
    fn tags_leave_room_for_ours() {
        let many: BTreeMap<String, String> = (0..49)
            .map(|i| (format!("k{i}"), "v".to_string()))
            .collect();
        assert!(check_tags(&many)
            .expect_err("too many")
            .contains("at most 48"));
        let reserved = BTreeMap::from([("aws:cost".to_string(), "x".to_string())]);
        assert!(check_tags(&reserved)
            .expect_err("reserved")
            .contains("reserved"));
        let ours = BTreeMap::from([("managed-by".to_string(), "me".to_string())]);
        assert!(check_tags(&ours).is_err());
        assert!(check_tags(&BTreeMap::from([("team".to_string(), "ml".to_string())])).is_ok());
    }

    #[test]
    fn versions_and_upgrade_paths() {
        assert!(check_eks_version(DEFAULT_EKS_VERSION).is_ok());
        assert!(check_eks_version("1.31.2")
            .expect_err("patch")
            .contains("without a patch number"));
        assert!(check_eks_version("1.21")
            .expect_err("old")
            .contains("end of EKS extended support"));
        assert!(check_eks_version("1.99")
            .expect_err("new")
            .contains("not an EKS version terrain knows"));
        assert_eq!(upgrade_path("1.30", "1.31"), Ok(vec!["1.31".to_string()]));
        assert_eq!(upgrade_path("1.31", "1.31"), Ok(vec![]));
        assert_eq!(
            upgrade_path("1.29", "1.32"),
            Ok(vec!["1.30".into(), "1.31".into(), "1.32".into()])
        );
        assert!(check_upgrade("1.30", "1.31").is_ok());
        let skip = check_upgrade("1.29", "1.31").expect_err("skips");
        assert_eq!(skip, "EKS upgrades one minor version at a time: 1.29 → 1.31 skips 1.30; set version = \"1.30\", apply, and repeat for \"1.31\"");
        let skip = check_upgrade("1.29", "1.32").expect_err("skips two");
        assert!(skip.contains("skips 1.30, 1.31"), "{skip}");
        assert!(
            skip.contains("repeat for \"1.31\", then \"1.32\""),
            "{skip}"
        );
        assert!(check_upgrade("1.31", "1.30")
            .expect_err("down")
            .contains("cannot downgrade"));
    }

    #[test]
    fn instance_types_are_classified() {
        let cases: &[(&str, Arch, Accel, u32)] = &[
            ("m5.large", Arch::X86, Accel::None, 0),
            ("m7i-flex.2xlarge", Arch::X86, Accel::None, 0),
            ("c7gn.16xlarge", Arch::Arm, Accel::None, 0),
            ("m6g.metal", Arch::Arm, Accel::None, 0),
            ("is4gen.xlarge", Arch::Arm, Accel::None, 0),
            ("a1.large", Arch::Arm, Accel::None, 0),
            ("r7iz.metal-16xl", Arch::X86, Accel::None, 0),
            ("g4dn.xlarge", Arch::X86, Accel::Nvidia, 1),
            ("g4dn.12xlarge", Arch::X86, Accel::Nvidia, 4),
            ("g5.48xlarge", Arch::X86, Accel::Nvidia, 8),
            ("g5g.16xlarge", Arch::Arm, Accel::Nvidia, 2),
            ("g6e.12xlarge", Arch::X86, Accel::Nvidia, 4),
            ("p4d.24xlarge", Arch::X86, Accel::Nvidia, 8),
            ("p5.48xlarge", Arch::X86, Accel::Nvidia, 8),
            ("p6-b200.48xlarge", Arch::X86, Accel::Nvidia, 8),
            ("p3.8xlarge", Arch::X86, Accel::Nvidia, 4),
            ("inf2.48xlarge", Arch::X86, Accel::Neuron, 12),
            ("trn1.32xlarge", Arch::X86, Accel::Neuron, 16),
        ];
        for (name, arch, accel, n) in cases {
            let t = instance_type(name).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(
                (t.arch, t.accel, t.accelerators),
                (*arch, *accel, *n),
                "{name}"
            );
        }
        let bad = [
            ("m5-large", "family.size"),
            ("n1-standard-8", "family.size"),
            ("m5.huge", "not a size"),
            ("g5.3xlarge", "comes in sizes"),
            ("p2.xlarge", "K80"),
            ("g4ad.xlarge", "AMD"),
            (
                "g9.xlarge",
                "accelerated instance family terrain does not know",
            ),
            ("5m.large", "family.size"),
        ];
        for (name, want) in bad {
            let e = instance_type(name).expect_err(name);
            assert!(e.contains(want), "{name}: {e}");
        }
    }

    #[test]
    fn ami_types_match_the_api_model() {
        // The reference model lists every AMI type the API takes; the catalog must too.
        let model = terrain_contracts::botocore("eks", "2017-11-01");
        let mut enum_values: Vec<String> = model["shapes"]["AMITypes"]["enum"]
            .as_array()
            .expect("AMITypes enum")
            .iter()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect();
        enum_values.sort();
        let mut ours: Vec<String> = AMI_TYPES.iter().map(|a| a.name.to_string()).collect();
        ours.sort();
        assert_eq!(ours, enum_values);
    }

    #[test]
    fn amis_fit_instances() {
        assert_eq!(
            default_ami_type(Arch::X86, Accel::Nvidia),
            "AL2023_x86_64_NVIDIA"
        );
        assert_eq!(
            default_ami_type(Arch::Arm, Accel::None),
            "AL2023_ARM_64_STANDARD"
        );
        assert!(check_ami_fits(
            "AL2023_x86_64_NVIDIA",
            Arch::X86,
            Accel::Nvidia,
            "g5.xlarge"
        )
        .is_ok());
        assert!(check_ami_fits("AL2_x86_64_GPU", Arch::X86, Accel::Neuron, "inf2.xlarge").is_ok());
        assert!(check_ami_fits(
            "BOTTLEROCKET_x86_64_NVIDIA",
            Arch::X86,
            Accel::Nvidia,
            "p5.48xlarge"
        )
        .is_ok());
        let cases = [
            (
                "AL2023_x86_64_STANDARD",
                Arch::X86,
                Accel::Nvidia,
                "g5.xlarge has NVIDIA GPUs",
            ),
            (
                "AL2023_x86_64_NVIDIA",
                Arch::X86,
                Accel::None,
                "is a GPU AMI but m5.large has no NVIDIA GPU",
            ),
            (
                "AL2023_x86_64_STANDARD",
                Arch::Arm,
                Accel::None,
                "is an x86_64 AMI",
            ),
            (
                "AL2023_x86_64_NVIDIA",
                Arch::Arm,
                Accel::Nvidia,
                "AL2023_ARM_64_NVIDIA",
            ),
            (
                "al2023_x86_64_nvidia",
                Arch::X86,
                Accel::Nvidia,
                "did you mean AL2023_x86_64_NVIDIA",
            ),
            ("CUSTOM", Arch::X86, Accel::None, "launch template"),
        ];
        for (ami, arch, accel, want) in cases {
            let example = match (arch, accel) {
                (_, Accel::Nvidia) => "g5.xlarge",
                (Arch::Arm, _) => "m7g.large",
                _ => "m5.large",
            };
            let e = check_ami_fits(ami, arch, accel, example).expect_err(ami);
            assert!(e.contains(want), "{ami}: {e}");
        }
    }

    #[test]
    fn node_groups_need_one_shape() {
        let t = |n: &str| instance_type(n).expect(n);
        assert_eq!(
            common_shape(&[t("g5.xlarge"), t("g5.2xlarge")]),
            Ok((Arch::X86, Accel::Nvidia))
        );
        assert!(common_shape(&[t("m5.large"), t("g5.xlarge")])
            .expect_err("mixed")
            .contains("separate node groups"));
        assert!(common_shape(&[t("m5.large"), t("m7g.large")])
            .expect_err("mixed arch")
            .contains("arm64"));
    }

    #[test]
    fn amazon_linux_2_stops_at_1_32() {
        assert!(check_ami_for_version("AL2_x86_64", "1.32").is_ok());
        assert!(check_ami_for_version("AL2023_x86_64_STANDARD", "1.33").is_ok());
        let e = check_ami_for_version("AL2_x86_64_GPU", "1.33").expect_err("gone");
        assert!(e.contains("AL2023_x86_64_NVIDIA"), "{e}");
        let e = check_ami_for_version("AL2_ARM_64", "1.34").expect_err("gone");
        assert!(e.contains("AL2023_ARM_64_STANDARD"), "{e}");
    }
}
