//! EKS capabilities (`/clusters/{name}/capabilities`): the managed ACK, KRO and Argo CD
//! controllers EKS runs outside a cluster, as the EKS model defines them —
//! CreateCapability, DescribeCapability, UpdateCapability, DeleteCapability and
//! ListCapabilities, `CREATING` → `ACTIVE`, `DELETING` → gone on the sandbox clock. EKS
//! refuses here what it refuses in the cloud: a second capability of one type on a
//! cluster, a `deletePropagationPolicy` other than `RETAIN`, a cluster whose
//! authentication mode has no access entries (`CONFIG_MAP`), a role that does not exist
//! or does not trust `capabilities.eks.amazonaws.com`. An ACTIVE ACK capability is what
//! puts the ACK SageMaker CRDs in the cluster and runs the controller as its role
//! ([`Capabilities::ack_role`]; the server wires it to `ack.rs`).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::iam::{self, Iam};
use super::{due, duration, AwsCtx, AwsError, ACCOUNT};

/// Realistic durations in seconds, multiplied by the sandbox's time scale.
mod base {
    pub const CREATE: f64 = 240.0;
    pub const DELETE: f64 = 120.0;
}

/// The capability types the EKS model names.
pub(crate) const TYPES: &[&str] = &["ACK", "KRO", "ARGOCD"];
/// The service principal a capability's role must trust.
pub(crate) const PRINCIPAL: &str = "capabilities.eks.amazonaws.com";

const CREATING: &str = "CREATING";
const ACTIVE: &str = "ACTIVE";
const DELETING: &str = "DELETING";

/// One capability of one cluster.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Capability {
    pub region: String,
    pub cluster: String,
    pub name: String,
    pub kind: String,
    pub role_arn: String,
    pub status: String,
    pub created_at: DateTime<Utc>,
    pub modified_at: DateTime<Utc>,
    /// When the running create or delete completes.
    pub until: Option<DateTime<Utc>>,
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
    #[serde(default)]
    pub configuration: Value,
    #[serde(default)]
    pub client_request_token: Option<String>,
}

impl Capability {
    fn arn(&self) -> String {
        format!(
            "arn:aws:eks:{}:{ACCOUNT}:capability/{}/{}/{}",
            self.region,
            self.cluster,
            self.kind.to_ascii_lowercase(),
            self.name
        )
    }

    /// As DescribeCapability answers it.
    pub(crate) fn render(&self) -> Value {
        json!({
            "capabilityName": self.name,
            "arn": self.arn(),
            "clusterName": self.cluster,
            "type": self.kind,
            "roleArn": self.role_arn,
            "status": self.status,
            "version": "v1",
            "configuration": self.configuration,
            "tags": self.tags,
            "health": {"issues": []},
            "createdAt": self.created_at.timestamp() as f64,
            "modifiedAt": self.modified_at.timestamp() as f64,
            "deletePropagationPolicy": "RETAIN",
        })
    }

    /// As ListCapabilities summarises it.
    fn summary(&self) -> Value {
        json!({
            "capabilityName": self.name,
            "arn": self.arn(),
            "type": self.kind,
            "status": self.status,
            "version": "v1",
            "createdAt": self.created_at.timestamp() as f64,
            "modifiedAt": self.modified_at.timestamp() as f64,
        })
    }

    /// Whether the capability runs: its controllers act in the cluster.
    pub(crate) fn is_active(&self) -> bool {
        self.status == ACTIVE
    }
}

/// Every capability of every cluster.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub(crate) struct Capabilities {
    #[serde(default)]
    items: Vec<Capability>,
}

fn invalid(message: impl Into<String>) -> AwsError {
    AwsError::new(400, "InvalidParameterException", message)
}

fn not_found(name: &str) -> AwsError {
    AwsError::new(
        404,
        "ResourceNotFoundException",
        format!("No capability found for name: {name}"),
    )
}

/// What a capability request needs to know of its cluster.
pub(crate) struct ClusterFacts<'a> {
    pub region: &'a str,
    pub name: &'a str,
    /// `accessConfig.authenticationMode`.
    pub authentication_mode: &'a str,
    pub active: bool,
}

impl Capabilities {
    /// Moves every running create or delete to where the clock says it is.
    pub(crate) fn settle(&mut self, now: DateTime<Utc>) {
        for c in &mut self.items {
            if c.status == CREATING && due(c.until, now) {
                c.status = ACTIVE.to_string();
                c.until = None;
            }
        }
        self.items
            .retain(|c| !(c.status == DELETING && due(c.until, now)));
    }

    /// The capabilities of one cluster.
    pub(crate) fn of<'a>(
        &'a self,
        region: &'a str,
        cluster: &'a str,
    ) -> impl Iterator<Item = &'a Capability> + 'a {
        self.items
            .iter()
            .filter(move |c| c.region == region && c.cluster == cluster)
    }

    /// The role the ACK controllers of the cluster behind kube key `key`
    /// (`eks/<region>/<name>`) run as: its ACTIVE ACK capability's, if it has one.
    pub(crate) fn ack_role(&self, key: &str) -> Option<&str> {
        let (region, cluster) = key.strip_prefix("eks/")?.split_once('/')?;
        self.items
            .iter()
            .find(|c| {
                c.region == region && c.cluster == cluster && c.kind == "ACK" && c.is_active()
            })
            .map(|c| c.role_arn.as_str())
    }

    /// The tags of the capability `arn` names, for TagResource and UntagResource.
    pub(crate) fn tags_of(&mut self, arn: &str) -> Option<&mut BTreeMap<String, String>> {
        self.items
            .iter_mut()
            .find(|c| c.arn() == arn)
            .map(|c| &mut c.tags)
    }

    /// Forgets a deleted cluster's capabilities.
    pub(crate) fn forget(&mut self, region: &str, cluster: &str) {
        self.items
            .retain(|c| !(c.region == region && c.cluster == cluster));
    }

    fn index(&self, region: &str, cluster: &str, name: &str) -> Result<usize, AwsError> {
        self.items
            .iter()
            .position(|c| c.region == region && c.cluster == cluster && c.name == name)
            .ok_or_else(|| not_found(name))
    }

    /// CreateCapability.
    pub(crate) fn create(
        &mut self,
        cluster: &ClusterFacts<'_>,
        body: &Map<String, Value>,
        ctx: &AwsCtx,
        iam: &Iam,
    ) -> Result<Value, AwsError> {
        let text = |k: &str| body.get(k).and_then(Value::as_str).map(str::to_string);
        let required = |k: &str| text(k).ok_or_else(|| invalid(format!("{k} is required")));
        let name = required("capabilityName")?;
        let kind = required("type")?;
        let role_arn = required("roleArn")?;
        let propagation = required("deletePropagationPolicy")?;
        let token = text("clientRequestToken");
        if let Ok(i) = self.index(cluster.region, cluster.name, &name) {
            let existing = &self.items[i];
            if token.is_some() && existing.client_request_token == token {
                return Ok(json!({"capability": existing.render()}));
            }
            return Err(AwsError::new(
                409,
                "ResourceInUseException",
                format!("Capability already exists with name: {name}"),
            ));
        }
        if !TYPES.contains(&kind.as_str()) {
            return Err(invalid(format!(
                "type {kind} is not one of {}",
                TYPES.join(", ")
            )));
        }
        if propagation != "RETAIN" {
            return Err(invalid(format!(
                "deletePropagationPolicy {propagation} is not one of RETAIN"
            )));
        }
        if !cluster.active {
            return Err(AwsError::new(
                400,
                "InvalidRequestException",
                format!("Cluster '{}' is not in ACTIVE status", cluster.name),
            ));
        }
        if cluster.authentication_mode == "CONFIG_MAP" {
            return Err(invalid(
                "Capabilities require the cluster's authentication mode to be API or API_AND_CONFIG_MAP",
            ));
        }
        if self
            .of(cluster.region, cluster.name)
            .any(|c| c.kind == kind)
        {
            return Err(AwsError::new(
                409,
                "ResourceInUseException",
                format!(
                    "A capability of type {kind} already exists on cluster {}",
                    cluster.name
                ),
            ));
        }
        match iam::role(iam, &role_arn) {
            Some(role) if iam::trusts(role, PRINCIPAL) => {}
            _ => {
                return Err(invalid(format!(
                    "Role with arn: {role_arn}, could not be assumed because it does not exist or the trusted entity is not correct"
                )))
            }
        }
        let tags = body
            .get("tags")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                    .collect()
            })
            .unwrap_or_default();
        let capability = Capability {
            region: cluster.region.to_string(),
            cluster: cluster.name.to_string(),
            name,
            kind,
            role_arn,
            status: CREATING.to_string(),
            created_at: ctx.now,
            modified_at: ctx.now,
            until: Some(ctx.now + duration(ctx, base::CREATE)),
            tags,
            configuration: body.get("configuration").cloned().unwrap_or(json!({})),
            client_request_token: token,
        };
        let rendered = capability.render();
        self.items.push(capability);
        Ok(json!({"capability": rendered}))
    }

    /// DescribeCapability.
    pub(crate) fn describe(
        &self,
        region: &str,
        cluster: &str,
        name: &str,
    ) -> Result<Value, AwsError> {
        let i = self.index(region, cluster, name)?;
        Ok(json!({"capability": self.items[i].render()}))
    }

    /// ListCapabilities (one page: a cluster holds one capability of each type).
    pub(crate) fn list(&self, region: &str, cluster: &str) -> Value {
        let items: Vec<Value> = self.of(region, cluster).map(Capability::summary).collect();
        json!({"capabilities": items})
    }

    /// UpdateCapability: a new role (held to the same trust) or configuration.
    pub(crate) fn update(
        &mut self,
        cluster: &ClusterFacts<'_>,
        name: &str,
        body: &Map<String, Value>,
        ctx: &AwsCtx,
        iam: &Iam,
    ) -> Result<Value, AwsError> {
        let i = self.index(cluster.region, cluster.name, name)?;
        if let Some(role_arn) = body.get("roleArn").and_then(Value::as_str) {
            match iam::role(iam, role_arn) {
                Some(role) if iam::trusts(role, PRINCIPAL) => {}
                _ => {
                    return Err(invalid(format!(
                        "Role with arn: {role_arn}, could not be assumed because it does not exist or the trusted entity is not correct"
                    )))
                }
            }
            self.items[i].role_arn = role_arn.to_string();
        }
        if let Some(configuration) = body.get("configuration") {
            self.items[i].configuration = configuration.clone();
        }
        self.items[i].modified_at = ctx.now;
        let id = crate::common::ids::new_uid();
        Ok(json!({"update": {
            "id": id,
            "status": "Successful",
            "type": "CapabilityUpdate",
            "params": [],
            "createdAt": ctx.now.timestamp() as f64,
            "errors": [],
        }}))
    }

    /// DeleteCapability: `DELETING`, then gone; the objects its controllers made stay
    /// (`RETAIN`), their finalizers no longer served.
    pub(crate) fn delete(
        &mut self,
        region: &str,
        cluster: &str,
        name: &str,
        ctx: &AwsCtx,
    ) -> Result<Value, AwsError> {
        let i = self.index(region, cluster, name)?;
        let c = &mut self.items[i];
        if c.status != DELETING {
            c.status = DELETING.to_string();
            c.modified_at = ctx.now;
            c.until = Some(ctx.now + duration(ctx, base::DELETE));
        }
        Ok(json!({"capability": c.render()}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::Faults;

    const TRUST: &str = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"capabilities.eks.amazonaws.com"},"Action":["sts:AssumeRole","sts:TagSession"]}]}"#;

    fn iam_with(roles: &[(&str, &str)]) -> Iam {
        let mut iam = Iam::default();
        let spec = crate::capacity::CapacitySpec::from_json(
            json!({"aws": {"roles": roles.iter().map(|(n, p)| (n.to_string(), json!(p))).collect::<Map<String, Value>>()}}),
            &crate::quota_names(),
        )
        .expect("valid");
        iam.adopt(&spec.aws, Utc::now());
        iam
    }

    fn body(v: Value) -> Map<String, Value> {
        v.as_object().cloned().expect("an object")
    }

    #[test]
    fn a_capability_is_created_once_per_type_and_only_with_a_trusting_role() {
        let _ = TRUST;
        let faults = Faults::default();
        let now = DateTime::<Utc>::from_timestamp(1_700_000_000, 0).expect("a time");
        let ctx = AwsCtx {
            now,
            scale: 1.0,
            faults: &faults,
        };
        let iam = iam_with(&[("ack", PRINCIPAL), ("nodes", "ec2.amazonaws.com")]);
        let arn = |n: &str| format!("arn:aws:iam::{ACCOUNT}:role/{n}");
        let cluster = ClusterFacts {
            region: "us-east-1",
            name: "ml",
            authentication_mode: "API",
            active: true,
        };
        let mut caps = Capabilities::default();
        let ask = |name: &str, role: &str| {
            body(
                json!({"capabilityName": name, "type": "ACK", "roleArn": arn(role),
                        "deletePropagationPolicy": "RETAIN"}),
            )
        };
        let e = caps
            .create(&cluster, &ask("ack", "nodes"), &ctx, &iam)
            .expect_err("a role EC2 trusts");
        assert!(e.message.contains("could not be assumed"), "{}", e.message);
        let made = caps
            .create(&cluster, &ask("ack", "ack"), &ctx, &iam)
            .expect("created");
        assert_eq!(made["capability"]["status"], "CREATING");
        let e = caps
            .create(&cluster, &ask("second", "ack"), &ctx, &iam)
            .expect_err("one per type");
        assert_eq!(e.code, "ResourceInUseException");
        let config_map = ClusterFacts {
            authentication_mode: "CONFIG_MAP",
            name: "old",
            ..cluster
        };
        let e = caps
            .create(&config_map, &ask("ack", "ack"), &ctx, &iam)
            .expect_err("no access entries");
        assert!(e.message.contains("authentication mode"), "{}", e.message);

        caps.settle(now + chrono::Duration::seconds(300));
        assert!(caps.of("us-east-1", "ml").all(Capability::is_active));
        let listed = caps.list("us-east-1", "ml");
        assert_eq!(listed["capabilities"][0]["status"], "ACTIVE");
        caps.delete("us-east-1", "ml", "ack", &ctx)
            .expect("deleting");
        caps.settle(now + chrono::Duration::seconds(600));
        assert_eq!(caps.of("us-east-1", "ml").count(), 0);
        assert_eq!(
            caps.describe("us-east-1", "ml", "ack")
                .expect_err("gone")
                .code,
            "ResourceNotFoundException"
        );
    }
}
