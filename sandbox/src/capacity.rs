//! The capacity the emulated clouds have: the quotas a Google Cloud project or an AWS
//! account is given (beyond the defaults of each cloud's tables) and the machines that
//! are out of stock where. This file owns that configuration and its JSON form — what
//! `POST /_sandbox/capacity`, `Sandbox::set_capacity` and the `TERRAIN_SANDBOX_CAPACITY`
//! variable take — and the matching of one request against it. What each cloud offers
//! where, its default quotas and how it fails live with that cloud's APIs:
//! `gcp/compute.rs` (zones, GPUs, regional quotas, GKE's stockout and quota errors),
//! `gcp/tpu.rs`, `aws/ec2.rs` (instance type offerings, ASG launch failures),
//! `aws/vpc.rs` (the configured subnets) and
//! `aws/servicequotas.rs`.
//!
//! ```json
//! {"gcp": {"quotas": [{"project": "p", "region": "us-central1", "metric": "NVIDIA_T4_GPUS", "limit": 0}],
//!          "stockouts": [{"zone": "us-central1-a", "machineType": "n1-standard-8"}]},
//!  "aws": {"quotas": [{"region": "us-east-1", "code": "L-DB2E81BA", "value": 0}],
//!          "stockouts": [{"zone": "us-east-1a", "instanceType": "g5.xlarge"}],
//!          "subnets": {"subnet-0a1b2c3d4e5f60001": "us-east-1a"}}}
//! ```
//!
//! A field left out of a quota or stockout matches everything (every project, zone,
//! machine type…); when several quota entries match, the last one wins. Machine and
//! instance types may use `*` as a wildcard (`g5.*`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The variable `Sandbox::start` reads a capacity from: the JSON itself, or the path of
/// a file holding it. It replaces whatever capacity the state file kept.
pub(crate) const CAPACITY_VAR: &str = "TERRAIN_SANDBOX_CAPACITY";

/// The whole capacity configuration, as `/_sandbox/capacity` reads and writes it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct CapacitySpec {
    #[serde(default)]
    pub gcp: GcpCapacity,
    #[serde(default)]
    pub aws: AwsCapacity,
}

/// Google Cloud: regional Compute Engine quotas and zonal stockouts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct GcpCapacity {
    #[serde(default)]
    pub quotas: Vec<GcpQuota>,
    #[serde(default)]
    pub stockouts: Vec<GcpStockout>,
}

/// One regional quota limit (`metric` as Compute Engine names it, e.g. `NVIDIA_T4_GPUS`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct GcpQuota {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    pub metric: String,
    pub limit: f64,
}

/// Machines Compute Engine cannot create in a zone right now.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct GcpStockout {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accelerator_type: Option<String>,
}

/// AWS: Service Quotas values, Availability Zone stockouts, and subnets and roles the
/// account has (made subnets of their region's default VPC, `aws/vpc.rs`; roles in
/// IAM, `aws/iam.rs`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct AwsCapacity {
    #[serde(default)]
    pub quotas: Vec<AwsQuota>,
    #[serde(default)]
    pub stockouts: Vec<AwsStockout>,
    /// Subnet id → Availability Zone name.
    #[serde(default)]
    pub subnets: BTreeMap<String, String>,
    /// IAM roles the account has (made in IAM when it is first called, like the
    /// subnets): role name → the service principal its trust policy lets assume it
    /// (`eks.amazonaws.com`).
    #[serde(default)]
    pub roles: BTreeMap<String, String>,
}

/// One applied quota value (`code` as Service Quotas names it, e.g. `L-DB2E81BA`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct AwsQuota {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    pub code: String,
    pub value: f64,
}

/// Instances EC2 cannot launch in an Availability Zone right now.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct AwsStockout {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_type: Option<String>,
    /// `ON_DEMAND` or `SPOT` (EKS's names); absent: both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_type: Option<String>,
}

/// Whether an optional filter admits `value` (absent admits everything).
fn admits(filter: &Option<String>, value: &str) -> bool {
    filter.as_deref().is_none_or(|f| f == value)
}

/// Whether an optional type pattern (with `*` wildcards) admits `value`.
fn admits_pattern(filter: &Option<String>, value: &str) -> bool {
    filter.as_deref().is_none_or(|f| glob(f, value))
}

/// `*` matches any run of characters and `?` any one, as EC2's filters match; everything
/// else matches itself.
pub(crate) fn glob(pattern: &str, value: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let v: Vec<char> = value.chars().collect();
    // The classic two-pointer match with one backtrack point per star.
    let (mut i, mut j) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while j < v.len() {
        if i < p.len() && (p[i] == '?' || p[i] == v[j]) {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == '*' {
            star = Some((i, j));
            i += 1;
        } else if let Some((si, sj)) = star {
            i = si + 1;
            j = sj + 1;
            star = Some((si, sj + 1));
        } else {
            return false;
        }
    }
    p[i..].iter().all(|c| *c == '*')
}

/// The quota names a cloud's emulator reports, which a capacity description may set.
/// Each cloud registers its own (`gcp::compute::QUOTA_NAMES`,
/// `aws::servicequotas::QUOTA_NAMES`) and the layer above hands them in: this layer
/// names no cloud's quotas.
#[derive(Debug, Clone, Copy)]
pub(crate) struct QuotaNames {
    /// What a name is, for the refusal (`a regional Compute Engine quota metric the
    /// sandbox reports`).
    pub what: &'static str,
    /// Every name, in the order the cloud reports them.
    pub names: fn() -> Vec<&'static str>,
}

/// The quota names of every cloud with a section in a capacity description.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clouds {
    pub gcp: QuotaNames,
    pub aws: QuotaNames,
}

impl QuotaNames {
    /// Refuses a name the cloud does not report, listing those it does.
    fn check(&self, name: &str) -> Result<(), String> {
        let names = (self.names)();
        if names.contains(&name) {
            return Ok(());
        }
        Err(format!(
            "invalid capacity description: {name:?} is not {}; use one of {}",
            self.what,
            names.join(", ")
        ))
    }
}

impl CapacitySpec {
    /// Parses and checks a capacity description: unknown fields, quota names `clouds`
    /// do not report, and negative limits are refused (a typo would otherwise silently
    /// configure nothing).
    pub(crate) fn from_json(
        value: serde_json::Value,
        clouds: &Clouds,
    ) -> Result<CapacitySpec, String> {
        let spec: CapacitySpec = serde_json::from_value(value)
            .map_err(|e| format!("invalid capacity description: {e}"))?;
        spec.check(clouds)?;
        Ok(spec)
    }

    fn check(&self, clouds: &Clouds) -> Result<(), String> {
        for q in &self.gcp.quotas {
            clouds.gcp.check(&q.metric)?;
            if !(q.limit.is_finite() && q.limit >= 0.0) {
                return Err(format!(
                    "invalid capacity description: the limit of {} must be a number ≥ 0",
                    q.metric
                ));
            }
        }
        for q in &self.aws.quotas {
            clouds.aws.check(&q.code)?;
            if !(q.value.is_finite() && q.value >= 0.0) {
                return Err(format!(
                    "invalid capacity description: the value of {} must be a number ≥ 0",
                    q.code
                ));
            }
        }
        for s in &self.aws.stockouts {
            if let Some(t) = &s.capacity_type {
                if t != "ON_DEMAND" && t != "SPOT" {
                    return Err(format!(
                        "invalid capacity description: capacityType {t:?} is not ON_DEMAND or SPOT"
                    ));
                }
            }
        }
        Ok(())
    }

    /// The capacity `TERRAIN_SANDBOX_CAPACITY` describes, when it is set: JSON text, or
    /// the path of a JSON file.
    pub(crate) fn from_env(clouds: &Clouds) -> Result<Option<CapacitySpec>, String> {
        let raw = std::env::var_os(CAPACITY_VAR).map(|v| v.to_string_lossy().into_owned());
        CapacitySpec::from_var(raw.as_deref(), clouds)
    }

    /// [`CapacitySpec::from_env`] for the variable's value.
    fn from_var(raw: Option<&str>, clouds: &Clouds) -> Result<Option<CapacitySpec>, String> {
        let Some(raw) = raw.filter(|r| !r.trim().is_empty()) else {
            return Ok(None);
        };
        let text = if raw.trim_start().starts_with('{') {
            raw.to_string()
        } else {
            std::fs::read_to_string(raw.trim())
                .map_err(|e| format!("{CAPACITY_VAR}: could not read {}: {e}", raw.trim()))?
        };
        let value: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| format!("{CAPACITY_VAR}: not valid JSON: {e}"))?;
        CapacitySpec::from_json(value, clouds)
            .map(Some)
            .map_err(|e| format!("{CAPACITY_VAR}: {e}"))
    }
}

impl GcpCapacity {
    /// The configured limit of `metric` in `project`'s `region`, when one is set.
    pub(crate) fn limit(&self, project: &str, region: &str, metric: &str) -> Option<f64> {
        self.quotas
            .iter()
            .rev()
            .find(|q| {
                q.metric == metric && admits(&q.project, project) && admits(&q.region, region)
            })
            .map(|q| q.limit)
    }

    /// Whether `zone` cannot create a `machine_type` VM with these accelerator types.
    pub(crate) fn stocked_out(
        &self,
        zone: &str,
        machine_type: &str,
        accelerators: &[String],
    ) -> bool {
        self.stockouts.iter().any(|s| {
            admits(&s.zone, zone)
                && admits_pattern(&s.machine_type, machine_type)
                && s.accelerator_type
                    .as_ref()
                    .is_none_or(|a| accelerators.iter().any(|have| glob(a, have)))
        })
    }
}

impl AwsCapacity {
    /// The configured value of quota `code` for `account` in `region`, when one is set.
    pub(crate) fn value(&self, account: &str, region: &str, code: &str) -> Option<f64> {
        self.quotas
            .iter()
            .rev()
            .find(|q| q.code == code && admits(&q.account, account) && admits(&q.region, region))
            .map(|q| q.value)
    }

    /// Whether `zone` cannot launch `instance_type` with `capacity_type` (`ON_DEMAND`,
    /// `SPOT`).
    pub(crate) fn stocked_out(&self, zone: &str, instance_type: &str, capacity_type: &str) -> bool {
        self.stockouts.iter().any(|s| {
            admits(&s.zone, zone)
                && admits_pattern(&s.instance_type, instance_type)
                && admits(&s.capacity_type, capacity_type)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_last_matching_quota_wins_and_absent_fields_match_everything() {
        let spec = CapacitySpec::from_json(
            json!({"gcp": {"quotas": [
                {"metric": "CPUS", "limit": 48},
                {"project": "p", "region": "us-central1", "metric": "CPUS", "limit": 0},
            ]}}),
            &crate::quota_names(),
        )
        .expect("valid");
        assert_eq!(spec.gcp.limit("p", "us-central1", "CPUS"), Some(0.0));
        assert_eq!(spec.gcp.limit("p", "europe-west4", "CPUS"), Some(48.0));
        assert_eq!(spec.gcp.limit("q", "us-central1", "CPUS"), Some(48.0));
        assert_eq!(spec.gcp.limit("p", "us-central1", "NVIDIA_L4_GPUS"), None);
    }

    #[test]
    fn typos_are_refused_rather_than_configuring_nothing() {
        for bad in [
            json!({"gcp": {"quotas": [{"metric": "T4_GPUS", "limit": 1}]}}),
            json!({"gcp": {"quotas": [{"metric": "CPUS", "limit": -1}]}}),
            json!({"gcp": {"stockout": []}}),
            json!({"aws": {"quotas": [{"code": "L-NOPE", "value": 1}]}}),
            json!({"aws": {"stockouts": [{"capacityType": "spot"}]}}),
            json!({"azure": {}}),
        ] {
            assert!(
                CapacitySpec::from_json(bad.clone(), &crate::quota_names()).is_err(),
                "{bad}"
            );
        }
        assert_eq!(
            CapacitySpec::from_json(json!({}), &crate::quota_names())
                .expect("empty is the default"),
            CapacitySpec::default()
        );
    }

    #[test]
    fn stockouts_match_zones_types_and_wildcards() {
        let spec = CapacitySpec::from_json(json!({
            "gcp": {"stockouts": [{"zone": "us-central1-a", "acceleratorType": "nvidia-tesla-t4"},
                                  {"machineType": "a2-*"}]},
            "aws": {"stockouts": [{"zone": "us-east-1a", "instanceType": "g5.*", "capacityType": "SPOT"}]},
        }), &crate::quota_names())
        .expect("valid");
        let t4 = vec!["nvidia-tesla-t4".to_string()];
        assert!(spec.gcp.stocked_out("us-central1-a", "n1-standard-8", &t4));
        assert!(!spec.gcp.stocked_out("us-central1-b", "n1-standard-8", &t4));
        assert!(!spec.gcp.stocked_out("us-central1-a", "n1-standard-8", &[]));
        assert!(spec.gcp.stocked_out("europe-west4-a", "a2-highgpu-1g", &[]));
        assert!(spec.aws.stocked_out("us-east-1a", "g5.xlarge", "SPOT"));
        assert!(!spec.aws.stocked_out("us-east-1a", "g5.xlarge", "ON_DEMAND"));
        assert!(!spec.aws.stocked_out("us-east-1b", "g5.xlarge", "SPOT"));
    }

    #[test]
    fn the_variable_holds_json_or_names_a_file() {
        assert_eq!(
            CapacitySpec::from_var(None, &crate::quota_names()),
            Ok(None)
        );
        assert_eq!(
            CapacitySpec::from_var(Some("  "), &crate::quota_names()),
            Ok(None)
        );
        let text = r#"{"aws": {"quotas": [{"code": "L-417A185B", "value": 0}]}}"#;
        let inline = CapacitySpec::from_var(Some(text), &crate::quota_names())
            .expect("valid")
            .expect("set");
        assert_eq!(
            inline.aws.value("123456789012", "us-east-1", "L-417A185B"),
            Some(0.0)
        );
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("capacity.json");
        std::fs::write(&path, text).expect("write");
        let from_file = CapacitySpec::from_var(path.to_str(), &crate::quota_names())
            .expect("valid")
            .expect("set");
        assert_eq!(from_file, inline);
        let missing =
            CapacitySpec::from_var(Some("/nonexistent/capacity.json"), &crate::quota_names())
                .expect_err("no file");
        assert!(
            missing.starts_with("TERRAIN_SANDBOX_CAPACITY: could not read"),
            "{missing}"
        );
        assert!(CapacitySpec::from_var(Some("{nope"), &crate::quota_names()).is_err());
    }

    #[test]
    fn globs_match_like_ec2_filters() {
        assert!(glob("g5.*", "g5.xlarge"));
        assert!(glob("*", ""));
        assert!(glob("p?d.*", "p4d.24xlarge"));
        assert!(glob("*.2xlarge", "g5.2xlarge"));
        assert!(!glob("g5.*", "g6.xlarge"));
        assert!(!glob("g5", "g5.xlarge"));
        assert!(glob("a*b*c", "aXXbYYc"));
        assert!(!glob("a*b*c", "aXXbYY"));
    }
}
