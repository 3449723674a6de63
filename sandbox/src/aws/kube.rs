//! The EKS side of the emulated clusters: [`EksCloud`], the [`CloudSide`] EKS's nodes,
//! tokens and kubeconfig contexts follow.

use super::{eks_token_valid, ACCOUNT};
use crate::common::hash::fnv64;
use crate::k8s::CloudSide;

/// An EKS cluster.
#[derive(Debug)]
pub(crate) struct EksCloud;

impl CloudSide for EksCloud {
    fn describe(&self) -> &'static str {
        "EKS"
    }

    fn pool_label(&self) -> &'static str {
        "eks.amazonaws.com/nodegroup"
    }

    fn provisions_per_pod(&self) -> bool {
        false
    }

    fn pool_node_name(&self, cluster: &str, pool: &str, index: i64) -> String {
        // EC2 instances are named by their private DNS name.
        let h = fnv64(&[cluster, pool, &index.to_string()]);
        format!("ip-10-0-{}-{}.ec2.internal", (h >> 8) % 256, h % 254 + 1)
    }

    fn pod_node_name(&self, cluster: &str, pod_uid: &str) -> String {
        // EKS makes no node per pod; a name in its scheme all the same.
        let h = fnv64(&[cluster, pod_uid]);
        format!("ip-10-1-{}-{}.ec2.internal", (h >> 8) % 256, h % 254 + 1)
    }

    fn provider_id(&self, zone: &str, node: &str) -> String {
        format!("aws:///{zone}/i-{:017x}", fnv64(&[node]) >> 4)
    }

    fn node_os(&self) -> (&'static str, &'static str) {
        ("Amazon Linux 2023.6.20250203", "containerd://1.7.25")
    }

    fn accepts_token(&self, token: &str) -> bool {
        // EKS authenticates with a presigned STS GetCallerIdentity request.
        eks_token_valid(token).is_ok()
    }

    fn context_name(&self, key: &str, name: &str) -> String {
        // `aws eks update-kubeconfig` names contexts by the cluster ARN.
        let region = key
            .strip_prefix("eks/")
            .and_then(|k| k.split('/').next())
            .unwrap_or_default();
        format!("arn:aws:eks:{region}:{ACCOUNT}:cluster/{name}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contexts_are_named_by_the_cluster_arn() {
        assert_eq!(
            EksCloud.context_name("eks/us-east-1/x", "x"),
            "arn:aws:eks:us-east-1:123456789012:cluster/x"
        );
    }

    #[test]
    fn nodes_are_named_by_their_private_dns_name() {
        let n = EksCloud.pool_node_name("ml", "gpu", 0);
        assert!(
            n.starts_with("ip-10-0-") && n.ends_with(".ec2.internal"),
            "{n}"
        );
        assert!(!EksCloud.accepts_token("not-a-presigned-url"));
    }
}
