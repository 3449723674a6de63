//! EKS Pod Identity, as the EKS model defines it: the add-ons API
//! (`/clusters/{name}/addons`: CreateAddon, DescribeAddon, ListAddons, DeleteAddon) for
//! the add-ons EKS publishes, `eks-pod-identity-agent` among them, `CREATING` →
//! `ACTIVE` and `DELETING` → gone on the sandbox clock; and pod identity associations
//! (`/clusters/{name}/pod-identity-associations`: Create, Describe, List, Update,
//! Delete), which give a Kubernetes service account an IAM role. EKS refuses what it
//! refuses in the cloud: an add-on it does not publish, a second add-on or association
//! of the same name or service account, a role that does not exist or does not trust
//! `pods.eks.amazonaws.com`.
//!
//! [`PodIdentity::role_of`] is what the rest of the sandbox asks: the role a service
//! account's pods act as, which only exists while the agent add-on is ACTIVE (without
//! it, pods get no credentials, as on a real cluster).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::iam::{self, Iam};
use super::{due, duration, AwsCtx, AwsError, ACCOUNT};

/// Realistic durations in seconds, multiplied by the sandbox's time scale.
mod base {
    pub const ADDON_CREATE: f64 = 60.0;
    pub const ADDON_DELETE: f64 = 30.0;
}

/// The add-ons EKS publishes that the sandbox knows, with the version it installs.
const ADDONS: &[(&str, &str)] = &[
    ("coredns", "v1.11.4-eksbuild.2"),
    ("eks-pod-identity-agent", "v1.3.8-eksbuild.2"),
    ("kube-proxy", "v1.31.10-eksbuild.2"),
    ("vpc-cni", "v1.19.5-eksbuild.1"),
];
/// The add-on that hands pods their association's credentials.
pub(crate) const AGENT: &str = "eks-pod-identity-agent";
/// The service principal an association's role must trust.
pub(crate) const PRINCIPAL: &str = "pods.eks.amazonaws.com";

const CREATING: &str = "CREATING";
const ACTIVE: &str = "ACTIVE";
const DELETING: &str = "DELETING";

/// One add-on of one cluster.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Addon {
    pub region: String,
    pub cluster: String,
    pub name: String,
    pub version: String,
    pub status: String,
    pub created_at: DateTime<Utc>,
    pub modified_at: DateTime<Utc>,
    /// When the running create or delete completes.
    pub until: Option<DateTime<Utc>>,
    #[serde(default)]
    pub tags: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    pub client_request_token: Option<String>,
}

impl Addon {
    fn arn(&self) -> String {
        format!(
            "arn:aws:eks:{}:{ACCOUNT}:addon/{}/{}/{}",
            self.region,
            self.cluster,
            self.name,
            &self.created_at.timestamp().to_string()
        )
    }

    /// As DescribeAddon answers it.
    fn render(&self) -> Value {
        json!({
            "addonName": self.name,
            "clusterName": self.cluster,
            "status": self.status,
            "addonVersion": self.version,
            "health": {"issues": []},
            "addonArn": self.arn(),
            "createdAt": self.created_at.timestamp() as f64,
            "modifiedAt": self.modified_at.timestamp() as f64,
            "tags": self.tags,
            "podIdentityAssociations": [],
        })
    }
}

/// One pod identity association.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Association {
    pub region: String,
    pub cluster: String,
    pub id: String,
    pub namespace: String,
    pub service_account: String,
    pub role_arn: String,
    pub created_at: DateTime<Utc>,
    pub modified_at: DateTime<Utc>,
    #[serde(default)]
    pub tags: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    pub client_request_token: Option<String>,
}

impl Association {
    fn arn(&self) -> String {
        format!(
            "arn:aws:eks:{}:{ACCOUNT}:podidentityassociation/{}/{}",
            self.region, self.cluster, self.id
        )
    }

    /// As DescribePodIdentityAssociation answers it.
    fn render(&self) -> Value {
        json!({
            "clusterName": self.cluster,
            "namespace": self.namespace,
            "serviceAccount": self.service_account,
            "roleArn": self.role_arn,
            "associationArn": self.arn(),
            "associationId": self.id,
            "tags": self.tags,
            "createdAt": self.created_at.timestamp() as f64,
            "modifiedAt": self.modified_at.timestamp() as f64,
            "disableSessionTags": false,
        })
    }

    fn summary(&self) -> Value {
        json!({
            "clusterName": self.cluster,
            "namespace": self.namespace,
            "serviceAccount": self.service_account,
            "associationArn": self.arn(),
            "associationId": self.id,
        })
    }
}

/// Every add-on and association of every cluster.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub(crate) struct PodIdentity {
    #[serde(default)]
    addons: Vec<Addon>,
    #[serde(default)]
    associations: Vec<Association>,
}

fn invalid(message: impl Into<String>) -> AwsError {
    AwsError::new(400, "InvalidParameterException", message)
}

fn not_found(message: impl Into<String>) -> AwsError {
    AwsError::new(404, "ResourceNotFoundException", message)
}

fn in_use(message: impl Into<String>) -> AwsError {
    AwsError::new(409, "ResourceInUseException", message)
}

fn text(body: &Map<String, Value>, key: &str) -> Option<String> {
    body.get(key).and_then(Value::as_str).map(str::to_string)
}

fn tags(body: &Map<String, Value>) -> std::collections::BTreeMap<String, String> {
    body.get("tags")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default()
}

/// Refuses a role pods cannot assume, in EKS's words.
fn check_role(iam: &Iam, role_arn: &str) -> Result<(), AwsError> {
    match iam::role(iam, role_arn) {
        Some(role) if iam::trusts(role, PRINCIPAL) => Ok(()),
        Some(_) => Err(invalid(format!(
            "Trust policy of role provided does not allow EKS Pod Identity to assume it: {role_arn} must trust {PRINCIPAL} for sts:AssumeRole and sts:TagSession"
        ))),
        None => Err(invalid(format!("Role {role_arn} does not exist"))),
    }
}

impl PodIdentity {
    /// Completes the creates and deletes that are due.
    pub(crate) fn settle(&mut self, now: DateTime<Utc>) {
        for a in &mut self.addons {
            if a.status == CREATING && due(a.until, now) {
                a.status = ACTIVE.to_string();
                a.until = None;
            }
        }
        self.addons
            .retain(|a| !(a.status == DELETING && due(a.until, now)));
    }

    /// Whether cluster `cluster` has add-ons or associations (EKS deletes them with the
    /// cluster; the sandbox forgets them when it is gone).
    pub(crate) fn forget(&mut self, region: &str, cluster: &str) {
        self.addons
            .retain(|a| !(a.region == region && a.cluster == cluster));
        self.associations
            .retain(|a| !(a.region == region && a.cluster == cluster));
    }

    /// One line per add-on and association, for `Sandbox::inventory`.
    pub(crate) fn inventory(&self, region: &str, cluster: &str, out: &mut Vec<String>) {
        for a in self
            .addons
            .iter()
            .filter(|a| a.region == region && a.cluster == cluster)
        {
            out.push(format!("eks addon {region}/{cluster}/{}", a.name));
        }
        for a in self
            .associations
            .iter()
            .filter(|a| a.region == region && a.cluster == cluster)
        {
            out.push(format!(
                "eks pod identity association {region}/{cluster}/{} ({}/{})",
                a.id, a.namespace, a.service_account
            ));
        }
    }

    /// The role the pods of service account `namespace/service_account` of the cluster
    /// behind kube key `key` (`eks/<region>/<name>`) act as: its association's, while the
    /// agent add-on is ACTIVE.
    pub(crate) fn role_of(
        &self,
        key: &str,
        namespace: &str,
        service_account: &str,
    ) -> Option<&str> {
        let (region, cluster) = key.strip_prefix("eks/")?.split_once('/')?;
        let mine = |r: &str, c: &str| r == region && c == cluster;
        self.addons
            .iter()
            .any(|a| mine(&a.region, &a.cluster) && a.name == AGENT && a.status == ACTIVE)
            .then_some(())?;
        self.associations
            .iter()
            .find(|a| {
                mine(&a.region, &a.cluster)
                    && a.namespace == namespace
                    && a.service_account == service_account
            })
            .map(|a| a.role_arn.as_str())
    }

    // -------------------------------------------------------------------- add-ons

    fn addon_index(&self, region: &str, cluster: &str, name: &str) -> Result<usize, AwsError> {
        self.addons
            .iter()
            .position(|a| a.region == region && a.cluster == cluster && a.name == name)
            .ok_or_else(|| not_found(format!("No addon: {name} found in cluster: {cluster}")))
    }

    /// CreateAddon.
    pub(crate) fn create_addon(
        &mut self,
        (region, cluster): (&str, &str),
        body: &Map<String, Value>,
        ctx: &AwsCtx,
    ) -> Result<Value, AwsError> {
        let name = text(body, "addonName").ok_or_else(|| invalid("addonName is required"))?;
        let token = text(body, "clientRequestToken");
        if let Ok(i) = self.addon_index(region, cluster, &name) {
            let existing = &self.addons[i];
            if token.is_some() && existing.client_request_token == token {
                return Ok(json!({"addon": existing.render()}));
            }
            return Err(in_use(format!(
                "Addon already exists with name: {name} for cluster: {cluster}"
            )));
        }
        let Some((_, latest)) = ADDONS.iter().find(|(n, _)| *n == name) else {
            return Err(invalid(format!("Addon {name} specified is not supported")));
        };
        let version = text(body, "addonVersion").unwrap_or_else(|| latest.to_string());
        let addon = Addon {
            region: region.to_string(),
            cluster: cluster.to_string(),
            name,
            version,
            status: CREATING.to_string(),
            created_at: ctx.now,
            modified_at: ctx.now,
            until: Some(ctx.now + duration(ctx, base::ADDON_CREATE)),
            tags: tags(body),
            client_request_token: token,
        };
        let rendered = addon.render();
        self.addons.push(addon);
        Ok(json!({"addon": rendered}))
    }

    /// DescribeAddon.
    pub(crate) fn describe_addon(
        &self,
        region: &str,
        cluster: &str,
        name: &str,
    ) -> Result<Value, AwsError> {
        let i = self.addon_index(region, cluster, name)?;
        Ok(json!({"addon": self.addons[i].render()}))
    }

    /// ListAddons (one page).
    pub(crate) fn list_addons(&self, region: &str, cluster: &str) -> Value {
        let names: Vec<&str> = self
            .addons
            .iter()
            .filter(|a| a.region == region && a.cluster == cluster)
            .map(|a| a.name.as_str())
            .collect();
        json!({"addons": names})
    }

    /// DeleteAddon: `DELETING`, then gone.
    pub(crate) fn delete_addon(
        &mut self,
        region: &str,
        cluster: &str,
        name: &str,
        ctx: &AwsCtx,
    ) -> Result<Value, AwsError> {
        let i = self.addon_index(region, cluster, name)?;
        let a = &mut self.addons[i];
        if a.status != DELETING {
            a.status = DELETING.to_string();
            a.modified_at = ctx.now;
            a.until = Some(ctx.now + duration(ctx, base::ADDON_DELETE));
        }
        Ok(json!({"addon": a.render()}))
    }

    // --------------------------------------------------------------- associations

    fn association_index(&self, region: &str, cluster: &str, id: &str) -> Result<usize, AwsError> {
        self.associations
            .iter()
            .position(|a| a.region == region && a.cluster == cluster && a.id == id)
            .ok_or_else(|| not_found(format!("No Pod Identity Association found for id: {id}")))
    }

    /// CreatePodIdentityAssociation.
    pub(crate) fn create_association(
        &mut self,
        (region, cluster): (&str, &str),
        body: &Map<String, Value>,
        ctx: &AwsCtx,
        iam: &Iam,
    ) -> Result<Value, AwsError> {
        let required = |k: &str| text(body, k).ok_or_else(|| invalid(format!("{k} is required")));
        let namespace = required("namespace")?;
        let service_account = required("serviceAccount")?;
        let role_arn = required("roleArn")?;
        let token = text(body, "clientRequestToken");
        if let Some(existing) = self.associations.iter().find(|a| {
            a.region == region
                && a.cluster == cluster
                && a.namespace == namespace
                && a.service_account == service_account
        }) {
            if token.is_some() && existing.client_request_token == token {
                return Ok(json!({"association": existing.render()}));
            }
            return Err(in_use(format!(
                "Association already exists: {} for namespace: {namespace} and service account: {service_account}",
                existing.id
            )));
        }
        check_role(iam, &role_arn)?;
        let suffix: String = crate::common::ids::new_uid()
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .take(17)
            .collect();
        let association = Association {
            region: region.to_string(),
            cluster: cluster.to_string(),
            id: format!("a-{}", suffix.to_ascii_lowercase()),
            namespace,
            service_account,
            role_arn,
            created_at: ctx.now,
            modified_at: ctx.now,
            tags: tags(body),
            client_request_token: token,
        };
        let rendered = association.render();
        self.associations.push(association);
        Ok(json!({"association": rendered}))
    }

    /// DescribePodIdentityAssociation.
    pub(crate) fn describe_association(
        &self,
        region: &str,
        cluster: &str,
        id: &str,
    ) -> Result<Value, AwsError> {
        let i = self.association_index(region, cluster, id)?;
        Ok(json!({"association": self.associations[i].render()}))
    }

    /// ListPodIdentityAssociations (one page), filtered by `namespace` and
    /// `serviceAccount` when given.
    pub(crate) fn list_associations(
        &self,
        region: &str,
        cluster: &str,
        namespace: Option<&str>,
        service_account: Option<&str>,
    ) -> Value {
        let items: Vec<Value> = self
            .associations
            .iter()
            .filter(|a| a.region == region && a.cluster == cluster)
            .filter(|a| namespace.is_none_or(|n| a.namespace == n))
            .filter(|a| service_account.is_none_or(|s| a.service_account == s))
            .map(Association::summary)
            .collect();
        json!({"associations": items})
    }

    /// UpdatePodIdentityAssociation: a new role, held to the same trust.
    pub(crate) fn update_association(
        &mut self,
        (region, cluster): (&str, &str),
        id: &str,
        body: &Map<String, Value>,
        ctx: &AwsCtx,
        iam: &Iam,
    ) -> Result<Value, AwsError> {
        let i = self.association_index(region, cluster, id)?;
        if let Some(role_arn) = text(body, "roleArn") {
            check_role(iam, &role_arn)?;
            self.associations[i].role_arn = role_arn;
        }
        self.associations[i].modified_at = ctx.now;
        Ok(json!({"association": self.associations[i].render()}))
    }

    /// DeletePodIdentityAssociation: gone at once.
    pub(crate) fn delete_association(
        &mut self,
        region: &str,
        cluster: &str,
        id: &str,
    ) -> Result<Value, AwsError> {
        let i = self.association_index(region, cluster, id)?;
        let gone = self.associations.remove(i);
        Ok(json!({"association": gone.render()}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::Faults;

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
    fn a_service_account_acts_as_its_role_only_while_the_agent_runs() {
        let faults = Faults::default();
        let now = Utc::now();
        let ctx = AwsCtx {
            now,
            scale: 1.0,
            faults: &faults,
        };
        let iam = iam_with(&[("pods", PRINCIPAL), ("nodes", "ec2.amazonaws.com")]);
        let mut p = PodIdentity::default();
        let at = ("us-east-1", "ml");
        let key = "eks/us-east-1/ml";
        let association = |role: &str| {
            body(
                json!({"namespace": "ack-system", "serviceAccount": "ack", "roleArn": format!("arn:aws:iam::{ACCOUNT}:role/{role}")}),
            )
        };
        let refused = p
            .create_association(at, &association("nodes"), &ctx, &iam)
            .expect_err("a role pods cannot assume");
        assert!(refused.message.contains(PRINCIPAL), "{refused:?}");
        let made = p
            .create_association(at, &association("pods"), &ctx, &iam)
            .expect("created");
        assert!(made["association"]["associationId"]
            .as_str()
            .is_some_and(|id| id.starts_with("a-")));
        let again = p
            .create_association(at, &association("pods"), &ctx, &iam)
            .expect_err("one per service account");
        assert_eq!(again.code, "ResourceInUseException");
        // No agent, no credentials.
        assert_eq!(p.role_of(key, "ack-system", "ack"), None);
        let unknown = p
            .create_addon(at, &body(json!({"addonName": "nope"})), &ctx)
            .expect_err("not an add-on EKS publishes");
        assert_eq!(unknown.code, "InvalidParameterException");
        p.create_addon(at, &body(json!({"addonName": AGENT})), &ctx)
            .expect("created");
        assert_eq!(p.role_of(key, "ack-system", "ack"), None, "still CREATING");
        p.settle(now + chrono::Duration::seconds(61));
        assert_eq!(
            p.role_of(key, "ack-system", "ack"),
            Some("arn:aws:iam::123456789012:role/pods")
        );
        assert_eq!(p.role_of(key, "ack-system", "other"), None);
        assert_eq!(p.role_of("eks/us-east-1/other", "ack-system", "ack"), None);
        p.delete_addon("us-east-1", "ml", AGENT, &ctx)
            .expect("deleted");
        assert_eq!(p.role_of(key, "ack-system", "ack"), None, "DELETING");
    }
}
