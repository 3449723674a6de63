//! Ordering found from the stack's Kubernetes API groups: each kind says which groups
//! an object provides to its cluster (an ACK capability, a controller's manifests, the
//! CRDs a manifest holds) and which custom kinds it needs served (an ACK `Pipeline`).
//! A consumer depends on every provider of its group on the same cluster, without a
//! hand-written `depends_on`: it is created after them and destroyed before them, so
//! its finalizers are lifted while the controller still runs.
//!
//! A controller's manifest runs pods, so it also depends on the stack's node groups of
//! its cluster: created once there are nodes, destroyed while they still run it.
//!
//! "The same cluster" is the resource the `cluster` field (a node group's
//! `cluster_name`) references (`${eks_cluster.ml.kubernetes}` and
//! `${eks_cluster.ml.name}` are both `eks_cluster.ml`), or the literal value when it
//! references nothing. A need no
//! provider in the stack meets on a cluster the stack manages is kept as
//! [`Unserved`]: the plan refuses it when that cluster is yet to be created, and asks
//! the live cluster otherwise.

use std::collections::BTreeMap;

use terrain_providers::{ApiGroups, ApiKind};

use super::expr::{Node, NodeKind, Ref};
use super::ResourceConfig;
use crate::addr::Address;

/// A custom kind a resource needs on a cluster of the stack where nothing in the stack
/// provides its group.
#[derive(Debug, Clone, PartialEq)]
pub struct Unserved {
    /// The resource made of the custom kind.
    pub consumer: Address,
    pub kind: ApiKind,
    /// The stack's resource the consumer's `cluster` field references.
    pub cluster: Address,
}

/// Where a resource runs: the resource its `cluster` field references, or the field's
/// literal value as text; `None` without a `cluster` field.
fn cluster_of(rc: &ResourceConfig) -> Option<String> {
    let node = rc
        .body
        .at(&["cluster".to_string()])
        .or_else(|| rc.body.at(&["cluster_name".to_string()]))?;
    referenced(node)
        .map(|a| a.to_string())
        .or_else(|| match &node.kind {
            NodeKind::Literal(v) => Some(v.to_string()),
            _ => None,
        })
}

/// The first resource `node` references, in a whole reference, an interpolation or a
/// table of them.
fn referenced(node: &Node) -> Option<Address> {
    node.refs().into_iter().find_map(|(r, _)| match r {
        Ref::Resource { addr, .. } => Some(addr.clone()),
        _ => None,
    })
}

/// Whether what an object provides serves `group`: a pattern covers it and no
/// withheld group (`-sagemaker.services.k8s.aws`) names it.
pub fn serves(provides: &[String], group: &str) -> bool {
    let withheld = provides.iter().any(|p| p.strip_prefix('-') == Some(group));
    !withheld
        && provides
            .iter()
            .filter(|p| !p.starts_with('-'))
            .any(|p| covers(p, group))
}

/// Whether a provided group pattern (`sagemaker.services.k8s.aws`, or
/// `*.services.k8s.aws` for every ACK service) covers `group`.
pub fn covers(pattern: &str, group: &str) -> bool {
    match pattern.strip_prefix("*.") {
        Some(suffix) => group
            .strip_suffix(suffix)
            .is_some_and(|head| head.ends_with('.') && head.len() > 1),
        None => pattern == group,
    }
}

/// Adds to each consumer the providers of its groups on its cluster (as
/// [`ResourceConfig::implied`]), and returns the needs nothing in the stack meets on a
/// cluster the stack manages. `groups` are the resources' offline answers.
pub fn link(
    resources: &mut BTreeMap<Address, ResourceConfig>,
    groups: &BTreeMap<Address, ApiGroups>,
) -> Vec<Unserved> {
    let clusters: BTreeMap<&Address, String> = groups
        .keys()
        .filter_map(|a| Some((a, cluster_of(resources.get(a)?)?)))
        .collect();
    let mut implied: BTreeMap<Address, Vec<Address>> = BTreeMap::new();
    let mut unserved = Vec::new();
    for (consumer, g) in groups {
        let Some(on) = clusters.get(consumer) else {
            continue;
        };
        if g.pods {
            implied.entry(consumer.clone()).or_default().extend(
                groups
                    .iter()
                    .filter(|(n, ng)| ng.nodes && clusters.get(n) == Some(on))
                    .map(|(n, _)| n.clone()),
            );
        }
        for need in &g.needs {
            let providers: Vec<&Address> = groups
                .iter()
                .filter(|(p, pg)| {
                    *p != consumer
                        && clusters.get(p) == Some(on)
                        && serves(&pg.provides, &need.group)
                })
                .map(|(p, _)| p)
                .collect();
            if providers.is_empty() {
                let cluster = resources
                    .get(consumer)
                    .and_then(|rc| rc.body.at(&["cluster".to_string()]))
                    .and_then(referenced)
                    .filter(|a| resources.contains_key(a));
                if let Some(cluster) = cluster {
                    unserved.push(Unserved {
                        consumer: consumer.clone(),
                        kind: need.clone(),
                        cluster,
                    });
                }
            }
            implied
                .entry(consumer.clone())
                .or_default()
                .extend(providers.into_iter().cloned());
        }
    }
    for (consumer, mut providers) in implied {
        if let Some(rc) = resources.get_mut(&consumer) {
            providers.sort();
            providers.dedup();
            rc.implied = providers;
        }
    }
    unserved
}

/// The two ways to provide `u`'s kind on its cluster.
fn fixes(u: &Unserved) -> String {
    if u.kind.group == terrain_providers::kubernetes::kfp_api::API_GROUP {
        format!(
            "install Kubeflow Pipelines on {} with the kubeflow-pipelines module (stacks/modules/kubeflow-pipelines), whose manifest serves its API",
            u.cluster
        )
    } else if u.kind.group.ends_with(".services.k8s.aws") {
        format!(
            "add an `eks_capability` with type = \"ACK\" on {} (EKS runs the ACK controllers and installs their CRDs), or install the ACK controller and its CRDs on it with a `kubernetes_manifest`",
            u.cluster
        )
    } else {
        format!(
            "add the `kubernetes_manifest` that installs its CustomResourceDefinition (and the controller that serves it) on {}, or install it on the cluster before applying",
            u.cluster
        )
    }
}

/// The plan's error for a need nothing meets on a cluster this plan creates.
pub fn unserved_message(u: &Unserved) -> String {
    format!(
        "{} needs its cluster to serve {} ({}); nothing in this stack provides it on {}, which this plan creates: {}",
        u.consumer,
        u.kind.kind,
        u.kind.api_version,
        u.cluster,
        fixes(u)
    )
}

/// The plan's error for a need nothing meets on a live cluster that does not serve it.
pub fn live_message(u: &Unserved) -> String {
    let missing = if u.kind.group == terrain_providers::kubernetes::kfp_api::API_GROUP {
        "no ml-pipeline Service in kubeflow"
    } else {
        "no CustomResourceDefinition"
    };
    format!(
        "{} needs its cluster to serve {} ({}); nothing in this stack provides it, and {} does not serve it ({missing}): {}",
        u.consumer,
        u.kind.kind,
        u.kind.api_version,
        u.cluster,
        fixes(u)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wildcard_group_covers_every_service_of_its_suffix() {
        assert!(covers(
            "sagemaker.services.k8s.aws",
            "sagemaker.services.k8s.aws"
        ));
        assert!(covers("*.services.k8s.aws", "sagemaker.services.k8s.aws"));
        assert!(!covers("*.services.k8s.aws", "services.k8s.aws"));
        assert!(!covers(
            "*.services.k8s.aws",
            "sagemaker.services.k8s.aws.evil"
        ));
        assert!(!covers("s3.services.k8s.aws", "sagemaker.services.k8s.aws"));
        let ack = |withheld: &[&str]| {
            let mut p = vec!["*.services.k8s.aws".to_string()];
            p.extend(withheld.iter().map(|w| format!("-{w}.services.k8s.aws")));
            p
        };
        assert!(serves(&ack(&[]), "sagemaker.services.k8s.aws"));
        assert!(serves(&ack(&["s3"]), "sagemaker.services.k8s.aws"));
        assert!(!serves(&ack(&["sagemaker"]), "sagemaker.services.k8s.aws"));
    }
}
