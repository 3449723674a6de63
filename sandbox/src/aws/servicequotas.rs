//! Service Quotas (JSON 1.1, `X-Amz-Target: ServiceQuotasV20190624.<Operation>`), as far
//! as capacity planning reads it: `GetServiceQuota`, `ListServiceQuotas` and
//! `GetAWSDefaultServiceQuota` for EC2's vCPU quotas per instance bucket (Standard, G
//! and VT, P — On-Demand and Spot), with their real codes and names. Values are the
//! configured ones (`capacity.rs`) for the account and region, else 64 vCPUs each: a
//! fresh account often has 0 for G and P, which would stop the example stacks; set 0 to
//! see that.
//!
//! This file also owns what those quotas are to an EKS managed node group: the vCPUs a
//! node group's instances take from their bucket and the Auto Scaling launch failure
//! (`VcpuLimitExceeded`, `MaxSpotInstanceCountExceeded`) when they do not fit.

use serde_json::{json, Map, Value};

use super::{AwsError, AwsRequest, AwsResponse, ACCOUNT};
use crate::capacity::{AwsCapacity, QuotaNames};

/// One EC2 vCPU quota: code, name, the usage metric's class, and whether it counts Spot
/// (`true`) or On-Demand instances.
pub(crate) struct Quota {
    pub code: &'static str,
    pub name: &'static str,
    class: &'static str,
    spot: bool,
    bucket: Bucket,
}

/// The instance buckets vCPU quotas are counted in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bucket {
    /// A, C, D, H, I, M, R, T and Z families.
    Standard,
    /// G and VT.
    G,
    /// P2, P3, P4 (and, On-Demand, P5).
    P,
    /// P5 Spot has a quota of its own.
    P5,
}

const DEFAULT_VCPUS: f64 = 64.0;

const QUOTAS: &[Quota] = &[
    Quota {
        code: "L-1216C47A",
        name: "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances",
        class: "Standard/OnDemand",
        spot: false,
        bucket: Bucket::Standard,
    },
    Quota {
        code: "L-34B43A08",
        name: "All Standard (A, C, D, H, I, M, R, T, Z) Spot Instance Requests",
        class: "Standard/Spot",
        spot: true,
        bucket: Bucket::Standard,
    },
    Quota {
        code: "L-DB2E81BA",
        name: "Running On-Demand G and VT instances",
        class: "G/OnDemand",
        spot: false,
        bucket: Bucket::G,
    },
    Quota {
        code: "L-3819A6DF",
        name: "All G and VT Spot Instance Requests",
        class: "G/Spot",
        spot: true,
        bucket: Bucket::G,
    },
    Quota {
        code: "L-417A185B",
        name: "Running On-Demand P instances",
        class: "P/OnDemand",
        spot: false,
        bucket: Bucket::P,
    },
    Quota {
        code: "L-7212CCBC",
        name: "All P4, P3 and P2 Spot Instance Requests",
        class: "P/Spot",
        spot: true,
        bucket: Bucket::P,
    },
    Quota {
        code: "L-C4BD4855",
        name: "All P5 Spot Instance Requests",
        class: "P5/Spot",
        spot: true,
        bucket: Bucket::P5,
    },
];

/// The quota with `code`.
pub(crate) fn quota(code: &str) -> Option<&'static Quota> {
    QUOTAS.iter().find(|q| q.code == code)
}

/// The EC2 quota codes Service Quotas reports, which a capacity description may set.
pub(crate) const QUOTA_NAMES: QuotaNames = QuotaNames {
    what: "an EC2 quota code the sandbox knows",
    names: codes,
};

/// Every quota code, in order.
fn codes() -> Vec<&'static str> {
    QUOTAS.iter().map(|q| q.code).collect()
}

/// The bucket an instance type's vCPUs count in; `None` for families without a quota
/// here (F, Inf, Trn, X, DL, Mac, HPC…).
fn bucket(instance_type: &str, spot: bool) -> Option<Bucket> {
    let family = instance_type.split('.').next().unwrap_or_default();
    let letters: String = family
        .chars()
        .take_while(|c| c.is_ascii_alphabetic())
        .collect();
    match letters.as_str() {
        "g" | "vt" | "gr" => Some(Bucket::G),
        "p" if spot && family.starts_with("p5") => Some(Bucket::P5),
        "p" => Some(Bucket::P),
        "inf" | "trn" | "dl" | "mac" | "hpc" | "x" | "f" | "u" => None,
        l if l.starts_with(['a', 'c', 'd', 'h', 'i', 'm', 'r', 't', 'z']) => Some(Bucket::Standard),
        _ => None,
    }
}

/// The quota `instance_type`'s vCPUs count against with `capacity_type` (`ON_DEMAND`,
/// `SPOT`).
fn quota_for(instance_type: &str, capacity_type: &str) -> Option<&'static Quota> {
    let spot = capacity_type == "SPOT";
    let bucket = bucket(instance_type, spot)?;
    QUOTAS.iter().find(|q| q.spot == spot && q.bucket == bucket)
}

/// The value of `quota` in `region`: configured, else the default.
fn value(capacity: &AwsCapacity, region: &str, quota: &Quota) -> f64 {
    capacity
        .value(ACCOUNT, region, quota.code)
        .unwrap_or(DEFAULT_VCPUS)
}

/// vCPU counts in messages: `0`, `64`, `0.5`.
fn number(x: f64) -> String {
    if x.fract() == 0.0 {
        format!("{x:.0}")
    } else {
        format!("{x}")
    }
}

/// Why an Auto Scaling group cannot launch `desired` instances of `instance_type` when
/// `running` — the (instance type, capacity type, count) the region's node groups
/// already hold — counts against the same quota, as the message of EKS's
/// `AsgInstanceLaunchFailures` health issue. `None` when they fit.
pub(crate) fn launch_failure(
    capacity: &AwsCapacity,
    region: &str,
    instance_type: &str,
    capacity_type: &str,
    desired: i64,
    running: &[(String, String, i64)],
    vcpus: impl Fn(&str) -> i64,
) -> Option<String> {
    if desired <= 0 {
        return None;
    }
    let quota = quota_for(instance_type, capacity_type)?;
    let used: i64 = running
        .iter()
        .filter(|(t, c, _)| quota_for(t, c).is_some_and(|q| q.code == quota.code))
        .map(|(t, _, n)| vcpus(t) * n)
        .sum();
    let limit = value(capacity, region, quota);
    let need = (vcpus(instance_type) * desired) as f64;
    if need + used as f64 <= limit {
        return None;
    }
    Some(if quota.spot {
        "Could not launch Spot Instances. MaxSpotInstanceCountExceeded - Max spot instance count exceeded. Launching EC2 instance failed.".to_string()
    } else {
        format!(
            "Could not launch On-Demand Instances. VcpuLimitExceeded - You have requested more vCPU capacity than your current vCPU limit of {} allows for the instance bucket that the specified instance type belongs to. Please visit http://aws.amazon.com/contact-us/ec2-request to request an adjustment to this limit. Launching EC2 instance failed.",
            number(limit)
        )
    })
}

// ---------------------------------------------------------------- the API

fn render(quota: &Quota, region: &str, account: &str, value: f64) -> Value {
    json!({
        "ServiceCode": "ec2",
        "ServiceName": "Amazon Elastic Compute Cloud (Amazon EC2)",
        "QuotaArn": format!("arn:aws:servicequotas:{region}:{account}:ec2/{}", quota.code),
        "QuotaCode": quota.code,
        "QuotaName": quota.name,
        "Value": value,
        "Unit": "None",
        "Adjustable": true,
        "GlobalQuota": false,
        "UsageMetric": {
            "MetricNamespace": "AWS/Usage",
            "MetricName": "ResourceCount",
            "MetricDimensions": {
                "Class": quota.class,
                "Resource": "vCPU",
                "Service": "EC2",
                "Type": "Resource",
            },
            "MetricStatisticRecommendation": "Maximum",
        },
        "QuotaAppliedAtLevel": "ACCOUNT",
    })
}

fn no_such_service(code: &str) -> AwsError {
    AwsError::new(
        400,
        "NoSuchResourceException",
        format!("The request failed because the specified service does not exist. (the sandbox's Service Quotas has only ec2's vCPU quotas, not {code:?})"),
    )
}

fn illegal(message: impl Into<String>) -> AwsError {
    AwsError::new(400, "IllegalArgumentException", message)
}

fn string_member(body: &Map<String, Value>, name: &str) -> Result<Option<String>, AwsError> {
    match body.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(AwsError::new(
            400,
            "SerializationException",
            format!("{name} must be a string"),
        )),
    }
}

fn required(body: &Map<String, Value>, name: &str) -> Result<String, AwsError> {
    string_member(body, name)?.ok_or_else(|| {
        AwsError::new(
            400,
            "ValidationException",
            format!("1 validation error detected: Value null at '{}' failed to satisfy constraint: Member must not be null", lower_first(name)),
        )
    })
}

fn lower_first(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_lowercase().chain(c).collect())
        .unwrap_or_default()
}

/// The quota a Get names, after checking its service.
fn named(body: &Map<String, Value>) -> Result<&'static Quota, AwsError> {
    let service = required(body, "ServiceCode")?;
    let code = required(body, "QuotaCode")?;
    if service != "ec2" {
        return Err(no_such_service(&service));
    }
    quota(&code).ok_or_else(|| {
        AwsError::new(
            400,
            "NoSuchResourceException",
            format!("The request failed because the specified quota does not exist. (the sandbox knows {})", codes().join(", ")),
        )
    })
}

/// Serves one Service Quotas request; only reads.
pub(crate) fn handle(req: &AwsRequest, capacity: &AwsCapacity) -> Result<AwsResponse, AwsError> {
    let target = req.header("x-amz-target").unwrap_or_default();
    let Some(op) = target.strip_prefix("ServiceQuotasV20190624.") else {
        return Err(AwsError::new(
            400,
            "UnknownOperationException",
            format!("the X-Amz-Target {target:?} names no Service Quotas operation"),
        ));
    };
    let body = match req.json()? {
        Value::Null => Map::new(),
        Value::Object(m) => m,
        _ => {
            return Err(AwsError::new(
                400,
                "SerializationException",
                "the request body must be a JSON object",
            ))
        }
    };
    let region = req.region.as_str();
    let out = match op {
        "GetServiceQuota" => {
            let q = named(&body)?;
            json!({"Quota": render(q, region, ACCOUNT, value(capacity, region, q))})
        }
        "GetAWSDefaultServiceQuota" => {
            // The default belongs to no account: its ARN has none.
            let q = named(&body)?;
            json!({"Quota": render(q, region, "", DEFAULT_VCPUS)})
        }
        "ListServiceQuotas" => {
            let service = required(&body, "ServiceCode")?;
            if service != "ec2" {
                return Err(no_such_service(&service));
            }
            let only = string_member(&body, "QuotaCode")?;
            let items: Vec<Value> = QUOTAS
                .iter()
                .filter(|q| only.as_deref().is_none_or(|c| c == q.code))
                .map(|q| render(q, region, ACCOUNT, value(capacity, region, q)))
                .collect();
            let start = match string_member(&body, "NextToken")? {
                None => 0,
                Some(t) => t.parse::<usize>().map_err(|_| {
                    AwsError::new(
                        400,
                        "InvalidPaginationTokenException",
                        "Invalid pagination token",
                    )
                })?,
            };
            let max = match body.get("MaxResults") {
                None | Some(Value::Null) => 100,
                Some(v) => v
                    .as_u64()
                    .filter(|m| (1..=100).contains(m))
                    .map(|m| m as usize)
                    .ok_or_else(|| illegal("MaxResults must be between 1 and 100"))?,
            };
            let total = items.len();
            let page: Vec<Value> = items.into_iter().skip(start).take(max).collect();
            let mut out = json!({"Quotas": page});
            if start + max < total {
                out["NextToken"] = json!((start + max).to_string());
            }
            out
        }
        other => {
            return Err(AwsError::new(
                400,
                "UnknownOperationException",
                format!("the sandbox's Service Quotas does not serve {other}"),
            ))
        }
    };
    Ok(AwsResponse::json(200, "application/x-amz-json-1.1", &out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::Method;

    fn call(capacity: &AwsCapacity, op: &str, body: Value) -> Result<Value, AwsError> {
        let target = format!("ServiceQuotasV20190624.{op}");
        let bytes = body.to_string();
        let req = AwsRequest::new(
            Method::POST,
            "/",
            &[("x-amz-target", &target)],
            bytes.as_bytes(),
        );
        let resp = handle(&req, capacity)?;
        Ok(resp.json_body().unwrap_or(Value::Null))
    }

    #[test]
    fn quotas_have_real_codes_names_and_configured_values() {
        let capacity = crate::capacity::CapacitySpec::from_json(
            json!({"aws": {"quotas": [
                {"region": "us-east-1", "code": "L-DB2E81BA", "value": 0}
            ]}}),
            &crate::quota_names(),
        )
        .expect("valid")
        .aws;
        let got = call(
            &capacity,
            "GetServiceQuota",
            json!({"ServiceCode": "ec2", "QuotaCode": "L-DB2E81BA"}),
        )
        .expect("served");
        assert_eq!(
            got["Quota"]["QuotaName"],
            "Running On-Demand G and VT instances"
        );
        assert_eq!(got["Quota"]["Value"], 0.0);
        assert_eq!(
            got["Quota"]["QuotaArn"],
            "arn:aws:servicequotas:us-east-1:123456789012:ec2/L-DB2E81BA"
        );
        assert_eq!(
            got["Quota"]["UsageMetric"]["MetricDimensions"]["Class"],
            "G/OnDemand"
        );
        let standard = call(
            &capacity,
            "GetServiceQuota",
            json!({"ServiceCode": "ec2", "QuotaCode": "L-1216C47A"}),
        )
        .expect("served");
        assert_eq!(standard["Quota"]["Value"], 64.0);
        let default = call(
            &capacity,
            "GetAWSDefaultServiceQuota",
            json!({"ServiceCode": "ec2", "QuotaCode": "L-DB2E81BA"}),
        )
        .expect("served");
        assert_eq!(default["Quota"]["Value"], 64.0);
        let all = call(
            &capacity,
            "ListServiceQuotas",
            json!({"ServiceCode": "ec2", "MaxResults": 4}),
        )
        .expect("listed");
        assert_eq!(all["Quotas"].as_array().map(Vec::len), Some(4));
        assert_eq!(all["NextToken"], "4");
        let rest = call(
            &capacity,
            "ListServiceQuotas",
            json!({"ServiceCode": "ec2", "NextToken": "4"}),
        )
        .expect("listed");
        assert_eq!(
            rest["Quotas"].as_array().map(Vec::len),
            Some(QUOTAS.len() - 4)
        );
        for (body, code) in [
            (
                json!({"ServiceCode": "ec2", "QuotaCode": "L-NOPE"}),
                "NoSuchResourceException",
            ),
            (
                json!({"ServiceCode": "lambda", "QuotaCode": "L-1216C47A"}),
                "NoSuchResourceException",
            ),
            (json!({"ServiceCode": "ec2"}), "ValidationException"),
        ] {
            assert_eq!(
                call(&capacity, "GetServiceQuota", body)
                    .expect_err("refused")
                    .code,
                code
            );
        }
    }

    #[test]
    fn instances_count_against_their_bucket() {
        assert_eq!(
            quota_for("g5.xlarge", "ON_DEMAND").map(|q| q.code),
            Some("L-DB2E81BA")
        );
        assert_eq!(
            quota_for("g4dn.xlarge", "SPOT").map(|q| q.code),
            Some("L-3819A6DF")
        );
        assert_eq!(
            quota_for("vt1.3xlarge", "ON_DEMAND").map(|q| q.code),
            Some("L-DB2E81BA")
        );
        assert_eq!(
            quota_for("p4d.24xlarge", "ON_DEMAND").map(|q| q.code),
            Some("L-417A185B")
        );
        assert_eq!(
            quota_for("p5.48xlarge", "ON_DEMAND").map(|q| q.code),
            Some("L-417A185B")
        );
        assert_eq!(
            quota_for("p5.48xlarge", "SPOT").map(|q| q.code),
            Some("L-C4BD4855")
        );
        assert_eq!(
            quota_for("p3.2xlarge", "SPOT").map(|q| q.code),
            Some("L-7212CCBC")
        );
        assert_eq!(
            quota_for("m6i.large", "ON_DEMAND").map(|q| q.code),
            Some("L-1216C47A")
        );
        assert_eq!(
            quota_for("t3.medium", "SPOT").map(|q| q.code),
            Some("L-34B43A08")
        );
        assert_eq!(quota_for("inf2.xlarge", "ON_DEMAND").map(|q| q.code), None);
    }

    #[test]
    fn launches_beyond_the_vcpu_limit_fail_as_asg_reports_it() {
        let capacity = crate::capacity::CapacitySpec::from_json(
            json!({"aws": {"quotas": [
                {"code": "L-DB2E81BA", "value": 0}, {"code": "L-1216C47A", "value": 8}
            ]}}),
            &crate::quota_names(),
        )
        .expect("valid")
        .aws;
        // A g5.xlarge and an m5.xlarge have 4 vCPUs each.
        let vcpus = |_: &str| 4;
        let msg = launch_failure(
            &capacity,
            "us-east-1",
            "g5.xlarge",
            "ON_DEMAND",
            1,
            &[],
            vcpus,
        )
        .expect("over");
        assert_eq!(
            msg,
            "Could not launch On-Demand Instances. VcpuLimitExceeded - You have requested more vCPU capacity than your current vCPU limit of 0 allows for the instance bucket that the specified instance type belongs to. Please visit http://aws.amazon.com/contact-us/ec2-request to request an adjustment to this limit. Launching EC2 instance failed."
        );
        assert_eq!(
            launch_failure(
                &capacity,
                "us-east-1",
                "m5.xlarge",
                "ON_DEMAND",
                2,
                &[],
                vcpus
            ),
            None
        );
        let running = vec![("m5.xlarge".to_string(), "ON_DEMAND".to_string(), 1)];
        assert!(launch_failure(
            &capacity,
            "us-east-1",
            "m5.xlarge",
            "ON_DEMAND",
            2,
            &running,
            vcpus
        )
        .is_some());
        let spot = vec![("m5.xlarge".to_string(), "SPOT".to_string(), 5)];
        assert_eq!(
            launch_failure(
                &capacity,
                "us-east-1",
                "m5.xlarge",
                "ON_DEMAND",
                2,
                &spot,
                vcpus
            ),
            None,
            "spot has its own quota"
        );
        assert!(
            launch_failure(&capacity, "us-east-1", "g5.xlarge", "SPOT", 20, &[], vcpus)
                .is_some_and(|m| m.contains("MaxSpotInstanceCountExceeded"))
        );
        assert_eq!(
            launch_failure(
                &capacity,
                "us-east-1",
                "g5.xlarge",
                "ON_DEMAND",
                0,
                &[],
                vcpus
            ),
            None
        );
    }
}
