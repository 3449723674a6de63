//! How the Kubernetes emulator sees the cloud a cluster lives in. Everything that differs
//! between clouds — how nodes are named and labelled, their provider ids and OS image,
//! whether the cloud makes a node per pod (Autopilot), what a pod's identity may write, how
//! bearer tokens are checked, what
//! kubeconfig contexts are called, which system add-ons a fresh cluster runs — comes
//! through [`CloudSide`], which each cloud's module implements. The emulator itself names
//! no cloud.

use std::fmt::Debug;
use std::sync::Arc;

/// The address clouds give their cluster DNS Service (`kube-dns`): the tenth of the
/// emulator's Service range (10.96.0.0/16), as GKE, EKS and kubeadm put it. Services are
/// allocated from 10.96.1.0 up, so no other Service is handed this one.
pub(crate) const DNS_SERVICE_IP: &str = "10.96.0.10";

/// One cloud's answers about its clusters' Kubernetes side.
pub(crate) trait CloudSide: Debug + Send + Sync {
    /// The cloud and mode, as listings show it (`GKE Autopilot`).
    fn describe(&self) -> &'static str;
    /// The node label naming the pool a node belongs to.
    fn pool_label(&self) -> &'static str;
    /// The cloud makes a node for each pod that needs one, instead of declared pools
    /// (GKE Autopilot).
    fn provisions_per_pod(&self) -> bool;
    /// The API server runs the ExtendedResourceToleration admission plugin, as GKE's
    /// does (it taints GPU and TPU nodes with the resource's name): a new pod asking for
    /// an extended resource tolerates the taint of that name.
    fn tolerates_extended_resources(&self) -> bool {
        false
    }
    /// The name of VM `index` of `pool`; stable, so a settle finds the nodes it made before.
    fn pool_node_name(&self, cluster: &str, pool: &str, index: i64) -> String;
    /// The name of the node made for the pod `pod_uid` (when [`Self::provisions_per_pod`]).
    fn pod_node_name(&self, cluster: &str, pod_uid: &str) -> String;
    /// The machine type of the node the cloud makes for a pod (when
    /// [`Self::provisions_per_pod`]) that selects `labels` and asks for the extended
    /// resources `extended` (`nvidia.com/gpu` → 2), adding to `labels` what the cloud
    /// labels such a node with (its provisioning, its machine family). By default the
    /// type the pod selects (`node.kubernetes.io/instance-type`), else a general one.
    fn pod_node_machine(
        &self,
        labels: &mut std::collections::BTreeMap<String, String>,
        _extended: &std::collections::BTreeMap<String, i64>,
    ) -> String {
        labels
            .get("node.kubernetes.io/instance-type")
            .cloned()
            .unwrap_or_else(|| "general".to_string())
    }
    /// Whether a pod on `node` running as the Kubernetes service account
    /// `namespace/account` (whose annotations are `annotations`) may create objects at
    /// `url` (`gs://BUCKET/PREFIX`): `Err` with the cloud storage's refusal when it may
    /// not. Clouds that do not check say yes.
    fn may_write(
        &self,
        _node: &serde_json::Value,
        _namespace: &str,
        _account: &str,
        _annotations: &serde_json::Value,
        _url: &str,
    ) -> Result<(), String> {
        Ok(())
    }
    /// A node's `spec.providerID`.
    fn provider_id(&self, zone: &str, node: &str) -> String;
    /// The node's OS image and container runtime, as `status.nodeInfo` reports them.
    fn node_os(&self) -> (&'static str, &'static str);
    /// Whether the API server accepts this bearer token (its presence is checked first).
    fn accepts_token(&self, token: &str) -> bool;
    /// The kubeconfig context name the cloud's CLI gives the cluster `key` named `name`.
    fn context_name(&self, key: &str, name: &str) -> String;
    /// The manifests of the system add-ons the cloud puts in a new cluster (its DNS
    /// Deployment and Service, kube-proxy, network agents, with their ServiceAccounts and
    /// ConfigMaps), each with `apiVersion`, `kind`, `metadata.name` and
    /// `metadata.namespace`. They are created once, when the cluster's API server state is
    /// made, with the defaulting any create gets, so the controllers run them like any
    /// workload. `key` is the cluster's key (`eks/<region>/<name>`: image registries are
    /// regional), `version` its control plane's (kube-proxy runs the nodes' version).
    fn system_objects(&self, key: &str, version: &str) -> Vec<serde_json::Value>;
    /// What the cloud's device plugins and webhooks tell a container given `count` of the
    /// extended resource `resource` on `node` (the emulator adds NVIDIA's itself: that
    /// plugin is the same on every cloud).
    fn device_env(
        &self,
        _node: &serde_json::Value,
        _resource: &str,
        _count: i64,
    ) -> Vec<(String, String)> {
        Vec::new()
    }
}

/// The cloud of a cluster state read back from disk, until the next reconcile hands the
/// real one over (every request reconciles first, so nothing is served with it).
#[derive(Debug)]
pub(crate) struct Unknown;

impl CloudSide for Unknown {
    fn describe(&self) -> &'static str {
        "unknown"
    }
    fn pool_label(&self) -> &'static str {
        "sandbox.terrain.dev/pool"
    }
    fn provisions_per_pod(&self) -> bool {
        false
    }
    fn pool_node_name(&self, cluster: &str, pool: &str, index: i64) -> String {
        format!("{cluster}-{pool}-{index}")
    }
    fn pod_node_name(&self, cluster: &str, pod_uid: &str) -> String {
        format!("{cluster}-{pod_uid}")
    }
    fn provider_id(&self, zone: &str, node: &str) -> String {
        format!("sandbox://{zone}/{node}")
    }
    fn node_os(&self) -> (&'static str, &'static str) {
        ("Linux", "containerd://1.7.24")
    }
    fn accepts_token(&self, _token: &str) -> bool {
        true
    }
    fn context_name(&self, _key: &str, name: &str) -> String {
        name.to_string()
    }
    fn system_objects(&self, _key: &str, _version: &str) -> Vec<serde_json::Value> {
        // A state read back from disk already has whatever its cloud put in it.
        Vec::new()
    }
}

pub(crate) fn unknown() -> Arc<dyn CloudSide> {
    Arc::new(Unknown)
}

/// Cluster states show their cloud as [`CloudSide::describe`] says it.
pub(crate) fn serialize<S: serde::Serializer>(
    cloud: &Arc<dyn CloudSide>,
    s: S,
) -> Result<S::Ok, S::Error> {
    s.serialize_str(cloud.describe())
}
