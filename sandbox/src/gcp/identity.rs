//! Who a GKE pod is to Google, and what it may write: a snapshot, taken whenever the
//! clusters are reconciled, of the IAM state a pod's Cloud Storage write is checked
//! against (bucket and project policies, service accounts' impersonation policies) and
//! of each cluster's Workload Identity. A pod on a node that uses GKE's metadata server
//! acts as its Kubernetes service account's Workload Identity principal, or as the
//! Google service account that account names (`iam.gke.io/gcp-service-account`) when
//! that account lets it; any other pod acts as its node's service account. Nothing is
//! granted that the policies do not grant: the Compute Engine default account has no
//! roles in a new project.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::policy::workload_members;
use super::storage::project_number;
use super::GcpState;

/// The annotation naming the Google service account a Kubernetes one acts as.
pub(crate) const GSA_ANNOTATION: &str = "iam.gke.io/gcp-service-account";
const WRITE: &str = "storage.objects.create";

/// The IAM facts every cluster's pods are checked against.
#[derive(Debug, Default)]
pub(crate) struct Access {
    /// Bucket → members that may create objects in it (its policy and its project's).
    writers: BTreeMap<String, BTreeSet<String>>,
    /// Google service account → members allowed to act as it.
    impersonators: BTreeMap<String, BTreeSet<String>>,
}

impl Access {
    pub(crate) fn of(gcp: &GcpState) -> Access {
        let mut writers = BTreeMap::new();
        for (bucket, project, members) in gcp.storage.policies() {
            let number = project_number(&project);
            let project_policy = gcp.resourcemanager.policy(&project);
            let mut who: BTreeSet<String> = BTreeSet::new();
            for m in members.granted(WRITE) {
                // The convenience members stand for the project's basic-role holders.
                let basic = match m.split_once(':') {
                    Some(("projectOwner", n)) if n == number || n == project => Some("roles/owner"),
                    Some(("projectEditor", n)) if n == number || n == project => {
                        Some("roles/editor")
                    }
                    Some(("projectViewer", n)) if n == number || n == project => {
                        Some("roles/viewer")
                    }
                    _ => None,
                };
                match basic {
                    Some(role) => who.extend(project_policy.members_of(role)),
                    None => {
                        who.insert(m);
                    }
                }
            }
            who.extend(project_policy.granted(WRITE));
            writers.insert(bucket, who);
        }
        Access {
            writers,
            impersonators: gcp.iam.impersonators(),
        }
    }
}

/// One cluster's Workload Identity: whether it is on, and each pool's node service
/// account and metadata server.
#[derive(Debug, Default)]
pub(crate) struct ClusterIdentity {
    pub project: String,
    pub workload_identity: bool,
    pub autopilot: bool,
    /// Pool → (node service account email, uses GKE's metadata server).
    pub pools: BTreeMap<String, (String, bool)>,
}

impl ClusterIdentity {
    /// The identity of one cluster from its pools' node configs.
    pub(crate) fn of(
        project: &str,
        workload_identity: bool,
        autopilot: bool,
        pools: &[(String, Value)],
    ) -> Self {
        let default = format!(
            "{}-compute@developer.gserviceaccount.com",
            project_number(project)
        );
        ClusterIdentity {
            project: project.to_string(),
            workload_identity,
            autopilot,
            pools: pools
                .iter()
                .map(|(name, config)| {
                    let account = match config["serviceAccount"].as_str() {
                        None | Some("" | "default") => default.clone(),
                        Some(a) => a.to_string(),
                    };
                    let gke = config["workloadMetadataConfig"]["mode"] == "GKE_METADATA";
                    (name.clone(), (account, gke))
                })
                .collect(),
        }
    }

    /// Whether a pod on a node of `pool`, running as `namespace/account` (annotated with
    /// `annotations`), may create objects at `url` (`gs://BUCKET/PREFIX`); `Err` with
    /// the refusal Cloud Storage gives.
    pub(crate) fn may_write(
        &self,
        access: &Access,
        pool: &str,
        namespace: &str,
        account: &str,
        annotations: &Value,
        url: &str,
    ) -> Result<(), String> {
        let bucket = url
            .strip_prefix("gs://")
            .map(|rest| rest.split('/').next().unwrap_or_default())
            .unwrap_or_default();
        let number = project_number(&self.project);
        let metadata_server = self.autopilot
            || (self.workload_identity && self.pools.get(pool).is_some_and(|(_, gke)| *gke));
        let (members, who) = if metadata_server {
            let principals = workload_members(&self.project, &number, namespace, account);
            match annotations[GSA_ANNOTATION]
                .as_str()
                .filter(|g| !g.is_empty())
            {
                Some(gsa) => {
                    let allowed = access
                        .impersonators
                        .get(gsa)
                        .is_some_and(|m| principals.iter().any(|p| m.contains(p)));
                    if !allowed {
                        return Err(format!(
                            "403 Forbidden: Permission 'iam.serviceAccounts.getAccessToken' denied on resource (or it may not exist): the Kubernetes service account {namespace}/{account} may not act as {gsa} (grant roles/iam.workloadIdentityUser on {gsa} to {})",
                            principals[0]
                        ));
                    }
                    (vec![format!("serviceAccount:{gsa}")], gsa.to_string())
                }
                None => (principals.clone(), principals[0].clone()),
            }
        } else {
            let node_account = self
                .pools
                .get(pool)
                .map(|(a, _)| a.clone())
                .unwrap_or_else(|| format!("{number}-compute@developer.gserviceaccount.com"));
            (vec![format!("serviceAccount:{node_account}")], node_account)
        };
        let Some(writers) = access.writers.get(bucket) else {
            return Err(format!(
                "404 Not Found: The specified bucket does not exist: {bucket}"
            ));
        };
        if members.iter().any(|m| writers.contains(m)) {
            return Ok(());
        }
        Err(format!(
            "403 Forbidden: {who} does not have storage.objects.create access to the Google Cloud Storage object. Permission 'storage.objects.create' denied on resource (or it may not exist). ({url})"
        ))
    }
}
