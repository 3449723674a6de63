//! The GKE side of the emulated clusters: GKE's clusters and node pools in the Kubernetes
//! emulator's cloud-neutral terms (machine shapes, the labels, taints and extended
//! resources GKE gives its nodes), and [`GkeCloud`], the [`CloudSide`] GKE's nodes, tokens,
//! contexts and system add-ons (kube-dns, kube-proxy) follow.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{json, Value};

use super::identity::{Access, ClusterIdentity};
use super::machines::{bundled_gpus, known_machine_shape};
use crate::common::hash::fnv64;
use crate::k8s::cloud::DNS_SERVICE_IP;
use crate::k8s::obj::stable_suffix;
use crate::k8s::{CloudCluster, CloudSide, NodePoolInfo};

/// A cluster as the Kubernetes emulator needs to know it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct KubeCluster {
    /// `gke/projects/{p}/locations/{l}/clusters/{n}`, the cluster's selfLink path.
    pub key: String,
    pub name: String,
    pub project: String,
    /// Whether the cluster has Workload Identity (`workloadIdentityConfig`).
    pub workload_identity: bool,
    pub ca_cert_pem: String,
    pub ca_key_pem: String,
    pub autopilot: bool,
    pub pools: Vec<KubePool>,
    /// `currentMasterVersion` (`1.32.4-gke.1415000`).
    pub version: String,
}

/// A node pool as the Kubernetes emulator needs to know it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct KubePool {
    pub name: String,
    /// The NodeConfig (machine type, spot, accelerators, taints, labels…).
    pub config: Value,
    /// Nodes per zone.
    pub size: i64,
    /// How many zones the pool spans.
    pub zones: i64,
    pub autoscaling: Value,
    pub placement_policy: Value,
    /// The pool's node version, when it says.
    pub version: Option<String>,
}

/// A GKE cluster, Standard or Autopilot.
#[derive(Debug)]
pub(crate) struct GkeCloud {
    pub autopilot: bool,
    /// Who its pods are to Google (see `identity.rs`).
    pub identity: ClusterIdentity,
    pub access: Arc<Access>,
}

impl GkeCloud {
    /// A cluster whose pods no IAM policy grants anything.
    #[cfg(test)]
    pub(crate) fn plain(autopilot: bool) -> Self {
        GkeCloud {
            autopilot,
            identity: ClusterIdentity::default(),
            access: Arc::new(Access::default()),
        }
    }
}

impl CloudSide for GkeCloud {
    fn describe(&self) -> &'static str {
        if self.autopilot {
            "GKE Autopilot"
        } else {
            "GKE Standard"
        }
    }

    fn pool_label(&self) -> &'static str {
        "cloud.google.com/gke-nodepool"
    }

    fn provisions_per_pod(&self) -> bool {
        self.autopilot
    }

    fn tolerates_extended_resources(&self) -> bool {
        true
    }

    fn pool_node_name(&self, cluster: &str, pool: &str, index: i64) -> String {
        // `gke-<cluster>-<pool>-<instance group hash>-<suffix>`, as GKE names its VMs.
        let group = fnv64(&[cluster, pool]) as u32;
        let suffix = stable_suffix(&[cluster, pool, &index.to_string()], 4);
        format!("gke-{cluster}-{pool}-{group:08x}-{suffix}")
    }

    fn pod_node_name(&self, cluster: &str, pod_uid: &str) -> String {
        // Autopilot's auto-provisioned nodes: `gk3-<cluster>-nap-<hash>`.
        format!(
            "gk3-{cluster}-nap-{:08x}",
            fnv64(&[cluster, pod_uid]) as u32
        )
    }

    fn pod_node_machine(
        &self,
        labels: &mut BTreeMap<String, String>,
        extended: &BTreeMap<String, i64>,
    ) -> String {
        // Autopilot picks a machine for what the pod asks: TPU chips, GPUs, or neither.
        let machine_type = labels
            .get("node.kubernetes.io/instance-type")
            .cloned()
            .unwrap_or_else(|| {
                if extended.contains_key("google.com/tpu") {
                    "ct5lp-hightpu-4t".into()
                } else if extended.contains_key("nvidia.com/gpu") {
                    "g2-standard-8".into()
                } else {
                    "e2-standard-4".into()
                }
            });
        if labels
            .get("cloud.google.com/gke-spot")
            .is_some_and(|v| v == "true")
        {
            labels.insert("cloud.google.com/gke-provisioning".into(), "spot".into());
        }
        let family = machine_type.split('-').next().unwrap_or_default();
        labels.insert("cloud.google.com/machine-family".into(), family.to_string());
        machine_type
    }

    fn provider_id(&self, zone: &str, node: &str) -> String {
        format!("gce://sandbox/{zone}/{node}")
    }

    fn may_write(
        &self,
        node: &Value,
        namespace: &str,
        account: &str,
        annotations: &Value,
        url: &str,
    ) -> Result<(), String> {
        let pool = node["metadata"]["labels"][self.pool_label()]
            .as_str()
            .unwrap_or_default();
        self.identity
            .may_write(&self.access, pool, namespace, account, annotations, url)
    }

    fn node_os(&self) -> (&'static str, &'static str) {
        ("Container-Optimized OS from Google", "containerd://1.7.24")
    }

    fn accepts_token(&self, _token: &str) -> bool {
        // GKE takes any Google access token the sandbox handed out; their presence is
        // what the API server checks.
        true
    }

    fn device_env(&self, node: &Value, resource: &str, count: i64) -> Vec<(String, String)> {
        if resource != "google.com/tpu" {
            return Vec::new();
        }
        // What GKE sets in a TPU container, here for a single-host slice: the worker is
        // the only one, and the slice is named from the node's TPU labels.
        let labels = &node["metadata"]["labels"];
        let accelerator = labels["cloud.google.com/gke-tpu-accelerator"]
            .as_str()
            .unwrap_or_default();
        let topology = labels["cloud.google.com/gke-tpu-topology"]
            .as_str()
            .unwrap_or_default();
        let mut env = vec![
            ("TPU_WORKER_ID".to_string(), "0".to_string()),
            ("TPU_WORKER_HOSTNAMES".to_string(), "localhost".to_string()),
            ("TPU_SKIP_MDS_QUERY".to_string(), "true".to_string()),
            (
                "TPU_VISIBLE_CHIPS".to_string(),
                (0..count)
                    .map(|i| i.to_string())
                    .collect::<Vec<_>>()
                    .join(","),
            ),
        ];
        if let Some(kind) = tpu_accelerator_type(accelerator, topology) {
            env.push(("TPU_ACCELERATOR_TYPE".to_string(), kind));
        }
        if !topology.is_empty() {
            env.push(("TPU_TOPOLOGY".to_string(), topology.to_string()));
        }
        env
    }

    fn system_objects(&self, _key: &str, version: &str) -> Vec<Value> {
        let mut objects = kube_dns();
        if !self.autopilot {
            // Autopilot uses Dataplane V2, whose agent (anetd) does kube-proxy's work;
            // Standard clusters without it run kube-proxy on every node.
            objects.push(kube_proxy(version));
        }
        objects.extend(storage_classes());
        objects
    }

    fn context_name(&self, key: &str, name: &str) -> String {
        // `gcloud container clusters get-credentials` names contexts
        // `gke_<project>_<location>_<name>`.
        let parts: Vec<&str> = key.strip_prefix("gke/").unwrap_or(key).split('/').collect();
        match parts.as_slice() {
            ["projects", project, "locations", location, "clusters", cluster] => {
                format!("gke_{project}_{location}_{cluster}")
            }
            _ => name.to_string(),
        }
    }
}

/// The StorageClasses every GKE cluster has: `standard-rwo` (balanced persistent disks
/// through the Compute Engine PD CSI driver) is the default, so a claim that names no
/// class gets a disk once a pod that uses it is scheduled.
fn storage_classes() -> Vec<Value> {
    let class = |name: &str, provisioner: &str, disk: &str, binding: &str, default: bool| {
        let mut sc = json!({
            "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": name, "labels": {"addonmanager.kubernetes.io/mode": "EnsureExists"}},
            "provisioner": provisioner,
            "parameters": {"type": disk},
            "reclaimPolicy": "Delete",
            "volumeBindingMode": binding,
            "allowVolumeExpansion": true,
        });
        if default {
            sc["metadata"]["annotations"] =
                json!({"storageclass.kubernetes.io/is-default-class": "true"});
        }
        sc
    };
    vec![
        class(
            "premium-rwo",
            "pd.csi.storage.gke.io",
            "pd-ssd",
            "WaitForFirstConsumer",
            false,
        ),
        class(
            "standard",
            "kubernetes.io/gce-pd",
            "pd-standard",
            "Immediate",
            false,
        ),
        class(
            "standard-rwo",
            "pd.csi.storage.gke.io",
            "pd-balanced",
            "WaitForFirstConsumer",
            true,
        ),
    ]
}

/// The tag of GKE's kube-dns images (kube-dns, dnsmasq-nanny and the sidecar share it).
const KUBE_DNS_TAG: &str = "1.23.0-gke.9";

/// The labels GKE's addon manager puts on the add-ons it keeps reconciled.
fn addon_labels(app: &str) -> Value {
    json!({
        "addonmanager.kubernetes.io/mode": "Reconcile",
        "k8s-app": app,
        "kubernetes.io/cluster-service": "true",
    })
}

/// One kube-dns container: GKE's image, its ports and requests.
fn dns_container(name: &str, image: &str, args: &[&str], ports: Value, requests: Value) -> Value {
    let mut c = json!({
        "name": name,
        "image": format!("gke.gcr.io/{image}"),
        "args": args,
        "resources": {"requests": requests},
        "securityContext": {"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
                            "runAsUser": 1001, "runAsGroup": 1001},
    });
    if ports.as_array().is_some_and(|p| !p.is_empty()) {
        c["ports"] = ports;
    }
    c
}

/// GKE's cluster DNS: the `kube-dns` Deployment (two replicas, as kube-dns-autoscaler keeps
/// a small cluster), its ServiceAccount and the `kube-dns` Service at the fixed address
/// pods' resolv.conf names.
fn kube_dns() -> Vec<Value> {
    let mut labels = addon_labels("kube-dns");
    let mut pod_labels = json!({"k8s-app": "kube-dns"});
    for l in [&mut labels, &mut pod_labels] {
        l["components.gke.io/gke-managed-components"] = json!("true");
    }
    let containers = vec![
        dns_container(
            "kubedns",
            &format!("k8s-dns-kube-dns:{KUBE_DNS_TAG}"),
            &["--domain=cluster.local.", "--dns-port=10053", "--config-dir=/kube-dns-config", "--v=2"],
            json!([
                {"containerPort": 10053, "name": "dns-local", "protocol": "UDP"},
                {"containerPort": 10053, "name": "dns-tcp-local", "protocol": "TCP"},
                {"containerPort": 10055, "name": "metrics", "protocol": "TCP"},
            ]),
            json!({"cpu": "100m", "memory": "70Mi"}),
        ),
        dns_container(
            "dnsmasq",
            &format!("k8s-dns-dnsmasq-nanny:{KUBE_DNS_TAG}"),
            &["-v=2", "-logtostderr", "-configDir=/etc/k8s/dns/dnsmasq-nanny", "-restartDnsmasq=true",
              "--", "-k", "--cache-size=1000", "--no-negcache", "--dns-forward-max=1500",
              "--log-facility=-", "--server=/cluster.local/127.0.0.1#10053",
              "--server=/in-addr.arpa/127.0.0.1#10053", "--server=/ip6.arpa/127.0.0.1#10053"],
            json!([
                {"containerPort": 53, "name": "dns", "protocol": "UDP"},
                {"containerPort": 53, "name": "dns-tcp", "protocol": "TCP"},
            ]),
            json!({"cpu": "150m", "memory": "20Mi"}),
        ),
        dns_container(
            "sidecar",
            &format!("k8s-dns-sidecar:{KUBE_DNS_TAG}"),
            &["--v=2", "--logtostderr",
              "--probe=kubedns,127.0.0.1:10053,kubernetes.default.svc.cluster.local,5,SRV",
              "--probe=dnsmasq,127.0.0.1:53,kubernetes.default.svc.cluster.local,5,SRV"],
            json!([{"containerPort": 10054, "name": "metrics", "protocol": "TCP"}]),
            json!({"cpu": "10m", "memory": "20Mi"}),
        ),
        dns_container(
            "prometheus-to-sd",
            "prometheus-to-sd:v0.11.12-gke.11",
            &["--source=kubedns:http://localhost:10054?allowlisted=probe_kubedns_latency_ms,probe_kubedns_errors,dnsmasq_misses,dnsmasq_hits",
              "--stackdriver-prefix=container.googleapis.com/internal/addons", "--v=2"],
            json!([]),
            json!({"cpu": "1m", "memory": "5Mi"}),
        ),
    ];
    vec![
        json!({
            "apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "kube-dns", "namespace": "kube-system", "labels": addon_labels("kube-dns")},
        }),
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "kube-dns", "namespace": "kube-system", "labels": labels},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"k8s-app": "kube-dns"}},
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "10%", "maxUnavailable": 0}},
                "template": {
                    "metadata": {
                        "labels": pod_labels,
                        "annotations": {"components.gke.io/component-name": "kubedns",
                                        "prometheus.io/port": "10054", "prometheus.io/scrape": "true"},
                    },
                    "spec": {
                        "priorityClassName": "system-cluster-critical",
                        "serviceAccountName": "kube-dns",
                        // Its own upstream is the node's resolver, not itself.
                        "dnsPolicy": "Default",
                        "nodeSelector": {"kubernetes.io/os": "linux"},
                        // Only GKE's system taints: kube-dns stays off tainted GPU and TPU
                        // pools, as on GKE.
                        "tolerations": [
                            {"key": "CriticalAddonsOnly", "operator": "Exists"},
                            {"key": "components.gke.io/gke-managed-components", "operator": "Exists"},
                        ],
                        "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
                            "weight": 100,
                            "podAffinityTerm": {
                                "labelSelector": {"matchExpressions": [{"key": "k8s-app", "operator": "In", "values": ["kube-dns"]}]},
                                "topologyKey": "kubernetes.io/hostname",
                            },
                        }]}},
                        "securityContext": {"fsGroup": 65534, "supplementalGroups": [65534],
                                            "seccompProfile": {"type": "RuntimeDefault"}},
                        "containers": containers,
                        "volumes": [{"name": "kube-dns-config",
                                     "configMap": {"name": "kube-dns", "optional": true}}],
                    },
                },
            },
        }),
        dns_service(addon_labels("kube-dns"), "KubeDNS"),
    ]
}

/// The `kube-dns` Service: GKE's DNS at its fixed address, on UDP and TCP port 53.
fn dns_service(mut labels: Value, display_name: &str) -> Value {
    labels["kubernetes.io/name"] = json!(display_name);
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "kube-dns", "namespace": "kube-system", "labels": labels},
        "spec": {
            "type": "ClusterIP",
            "clusterIP": DNS_SERVICE_IP,
            "selector": {"k8s-app": "kube-dns"},
            "ports": [
                {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
            ],
        },
    })
}

/// kube-proxy on every node of a Standard cluster, at the nodes' version. GKE runs it as a
/// static pod (`kube-proxy-<node>`); the emulator has no static pods, so a DaemonSet that
/// tolerates every taint stands in for them and puts one on every node, GPU and TPU
/// nodes included, as GKE does.
fn kube_proxy(version: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "kube-proxy", "namespace": "kube-system",
                     "labels": {"k8s-app": "kube-proxy", "component": "kube-proxy", "tier": "node"}},
        "spec": {
            "selector": {"matchLabels": {"k8s-app": "kube-proxy"}},
            "template": {
                "metadata": {"labels": {"k8s-app": "kube-proxy", "component": "kube-proxy", "tier": "node"}},
                "spec": {
                    "priorityClassName": "system-node-critical",
                    "hostNetwork": true,
                    "nodeSelector": {"kubernetes.io/os": "linux"},
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [{
                        "name": "kube-proxy",
                        "image": format!("gke.gcr.io/kube-proxy-amd64:{version}"),
                        "command": ["/bin/sh", "-c",
                                    "exec kube-proxy --kubeconfig=/var/lib/kube-proxy/kubeconfig --cluster-cidr=10.4.0.0/14 --oom-score-adj=-998 --v=2 --iptables-sync-period=1m --iptables-min-sync-period=10s 1>>/var/log/kube-proxy.log 2>&1"],
                        "resources": {"requests": {"cpu": "100m"}},
                        "securityContext": {"privileged": true},
                    }],
                },
            },
        },
    })
}

/// The Cloud TPU accelerator type of a slice (`v5litepod-4`, `v4-8`) from GKE's node
/// labels: v4 and v5p count TensorCores (two per chip), the lite and v6e slices chips.
fn tpu_accelerator_type(accelerator: &str, topology: &str) -> Option<String> {
    let chips: i64 = topology
        .split('x')
        .map(|d| d.parse::<i64>().ok())
        .product::<Option<i64>>()?;
    let name = match accelerator {
        "tpu-v4-podslice" => format!("v4-{}", chips * 2),
        "tpu-v5p-slice" => format!("v5p-{}", chips * 2),
        "tpu-v5-lite-podslice" | "tpu-v5-lite-device" => format!("v5litepod-{chips}"),
        "tpu-v6e-slice" => format!("v6e-{chips}"),
        _ => return None,
    };
    Some(name)
}

/// The GKE clusters in cloud-neutral terms.
pub(crate) fn gke_clusters(clusters: Vec<KubeCluster>, access: Arc<Access>) -> Vec<CloudCluster> {
    clusters
        .into_iter()
        .map(|c| CloudCluster {
            cloud: Arc::new(GkeCloud {
                autopilot: c.autopilot,
                identity: ClusterIdentity::of(
                    &c.project,
                    c.workload_identity,
                    c.autopilot,
                    &c.pools
                        .iter()
                        .map(|p| (p.name.clone(), p.config.clone()))
                        .collect::<Vec<_>>(),
                ),
                access: access.clone(),
            }),
            node_pools: c.pools.iter().map(gke_node_pool).collect(),
            version: format!("v{}", c.version),
            key: c.key,
            name: c.name,
            ca_cert_pem: c.ca_cert_pem,
            ca_key_pem: c.ca_key_pem,
        })
        .collect()
}

/// vCPUs and memory (MiB) of a Compute Engine machine type; unknown types count as
/// e2-medium.
fn machine_shape(machine_type: &str) -> (i64, i64) {
    known_machine_shape(machine_type).unwrap_or((2, 4096))
}

/// A TPU machine type's accelerator label value, chip count and default topology.
fn tpu_shape(machine_type: &str) -> Option<(&'static str, i64, &'static str)> {
    let parts: Vec<&str> = machine_type.split('-').collect();
    let [family, _, chips] = parts.as_slice() else {
        return None;
    };
    let chips: i64 = chips.strip_suffix('t')?.parse().ok()?;
    let (accelerator, three_d) = match *family {
        "ct4p" => ("tpu-v4-podslice", true),
        "ct5p" => ("tpu-v5p-slice", true),
        "ct5lp" => ("tpu-v5-lite-podslice", false),
        "ct5l" => ("tpu-v5-lite-device", false),
        "ct6e" => ("tpu-v6e-slice", false),
        _ => return None,
    };
    let topology = match (three_d, chips) {
        (true, _) => "2x2x1",
        (false, 1) => "1x1",
        (false, 4) => "2x2",
        (false, 8) => "2x4",
        (false, _) => "1x1",
    };
    Some((accelerator, chips, topology))
}

fn gke_effect(effect: &str) -> &str {
    match effect {
        "NO_SCHEDULE" => "NoSchedule",
        "PREFER_NO_SCHEDULE" => "PreferNoSchedule",
        "NO_EXECUTE" => "NoExecute",
        other => other,
    }
}

/// A GKE node pool as the Kubernetes side sees it: the labels, taints and extended
/// resources GKE puts on its nodes.
pub(crate) fn gke_node_pool(pool: &KubePool) -> NodePoolInfo {
    let config = &pool.config;
    let machine_type = config["machineType"]
        .as_str()
        .unwrap_or("e2-medium")
        .to_string();
    let mut labels = BTreeMap::new();
    for (k, v) in config["labels"].as_object().into_iter().flatten() {
        if let Some(v) = v.as_str() {
            labels.insert(k.clone(), v.to_string());
        }
    }
    labels.insert("cloud.google.com/gke-nodepool".into(), pool.name.clone());
    labels.insert(
        "cloud.google.com/machine-family".into(),
        machine_type
            .split('-')
            .next()
            .unwrap_or_default()
            .to_string(),
    );
    labels.insert(
        "node.kubernetes.io/instance-type".into(),
        machine_type.clone(),
    );
    if config["spot"] == Value::Bool(true) {
        labels.insert("cloud.google.com/gke-spot".into(), "true".into());
    }
    if config["preemptible"] == Value::Bool(true) {
        labels.insert("cloud.google.com/gke-preemptible".into(), "true".into());
    }
    let mut taints: Vec<Value> = config["taints"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| {
            let mut taint = json!({
                "key": t["key"].as_str().unwrap_or_default(),
                "effect": gke_effect(t["effect"].as_str().unwrap_or_default()),
            });
            if let Some(v) = t["value"].as_str().filter(|v| !v.is_empty()) {
                taint["value"] = json!(v);
            }
            taint
        })
        .collect();
    let mut add_taint = |key: &str| {
        if !taints.iter().any(|t| t["key"] == key) {
            taints.push(json!({"key": key, "value": "present", "effect": "NoSchedule"}));
        }
    };
    let mut extended_resources = BTreeMap::new();
    let configured: Vec<(String, i64)> = config["accelerators"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| {
            let kind = a["acceleratorType"].as_str()?.to_string();
            let count = match &a["acceleratorCount"] {
                Value::String(s) => s.parse().ok(),
                other => other.as_i64(),
            }?;
            Some((kind, count))
        })
        .collect();
    let gpus = match configured.first() {
        Some((kind, _)) => Some((kind.clone(), configured.iter().map(|(_, c)| c).sum::<i64>())),
        None => bundled_gpus(&machine_type).map(|(k, c)| (k.to_string(), c)),
    };
    if let Some((kind, count)) = gpus {
        labels.insert("cloud.google.com/gke-accelerator".into(), kind);
        extended_resources.insert("nvidia.com/gpu".into(), count.to_string());
        add_taint("nvidia.com/gpu");
    }
    if let Some((accelerator, chips, default_topology)) = tpu_shape(&machine_type) {
        let topology = pool.placement_policy["tpuTopology"]
            .as_str()
            .filter(|t| !t.is_empty())
            .unwrap_or(default_topology);
        labels.insert(
            "cloud.google.com/gke-tpu-accelerator".into(),
            accelerator.into(),
        );
        labels.insert("cloud.google.com/gke-tpu-topology".into(), topology.into());
        extended_resources.insert("google.com/tpu".into(), chips.to_string());
        add_taint("google.com/tpu");
    }
    let node_count = pool.size * pool.zones;
    let autoscaling = &pool.autoscaling;
    let max_nodes = if autoscaling["enabled"] == Value::Bool(true) {
        let number = |key: &str| match &autoscaling[key] {
            Value::String(s) => s.parse::<i64>().ok(),
            other => other.as_i64(),
        };
        number("totalMaxNodeCount")
            .or_else(|| number("maxNodeCount").map(|m| m * pool.zones))
            .unwrap_or(node_count)
            .max(node_count)
    } else {
        node_count
    };
    let (cpu, memory_mib) = machine_shape(&machine_type);
    NodePoolInfo {
        name: pool.name.clone(),
        machine_type,
        node_count,
        max_nodes,
        labels,
        taints,
        extended_resources,
        cpu: cpu.to_string(),
        memory: format!("{memory_mib}Mi"),
        version: pool.version.as_ref().map(|v| format!("v{v}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(config: Value) -> KubePool {
        KubePool {
            name: "p".into(),
            config,
            size: 2,
            zones: 3,
            autoscaling: Value::Null,
            placement_policy: Value::Null,
            version: Some("1.32.4-gke.1415000".into()),
        }
    }

    /// A pool config and the labels, extended resources and taints its nodes get.
    type PoolCase = (
        Value,
        &'static [(&'static str, &'static str)],
        &'static [(&'static str, &'static str)],
        &'static [&'static str],
    );

    #[test]
    fn node_pools_get_gke_labels_taints_and_resources() {
        let cases: Vec<PoolCase> = vec![
            (
                json!({"machineType": "e2-standard-4", "labels": {"role": "cpu"}}),
                &[
                    ("cloud.google.com/gke-nodepool", "p"),
                    ("cloud.google.com/machine-family", "e2"),
                    ("node.kubernetes.io/instance-type", "e2-standard-4"),
                    ("role", "cpu"),
                ],
                &[],
                &[],
            ),
            (
                json!({"machineType": "g2-standard-8", "spot": true,
                       "accelerators": [{"acceleratorType": "nvidia-l4", "acceleratorCount": "2"}],
                       "taints": [{"key": "dedicated", "value": "ml", "effect": "NO_EXECUTE"}]}),
                &[
                    ("cloud.google.com/gke-spot", "true"),
                    ("cloud.google.com/gke-accelerator", "nvidia-l4"),
                ],
                &[("nvidia.com/gpu", "2")],
                &[
                    "dedicated=ml:NoExecute",
                    "nvidia.com/gpu=present:NoSchedule",
                ],
            ),
            (
                json!({"machineType": "n1-standard-4", "preemptible": true}),
                &[("cloud.google.com/gke-preemptible", "true")],
                &[],
                &[],
            ),
            (
                json!({"machineType": "ct5lp-hightpu-4t"}),
                &[
                    (
                        "cloud.google.com/gke-tpu-accelerator",
                        "tpu-v5-lite-podslice",
                    ),
                    ("cloud.google.com/gke-tpu-topology", "2x2"),
                ],
                &[("google.com/tpu", "4")],
                &["google.com/tpu=present:NoSchedule"],
            ),
            (
                json!({"machineType": "a2-highgpu-1g"}),
                &[("cloud.google.com/gke-accelerator", "nvidia-tesla-a100")],
                &[("nvidia.com/gpu", "1")],
                &["nvidia.com/gpu=present:NoSchedule"],
            ),
        ];
        for (config, labels, resources, taints) in cases {
            let info = gke_node_pool(&pool(config.clone()));
            for (k, v) in labels {
                assert_eq!(
                    info.labels.get(*k).map(String::as_str),
                    Some(*v),
                    "{config}: {k}"
                );
            }
            let got: Vec<(&str, &str)> = info
                .extended_resources
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            assert_eq!(got, resources.to_vec(), "{config}");
            let got: Vec<String> = info
                .taints
                .iter()
                .map(|t| {
                    format!(
                        "{}={}:{}",
                        t["key"].as_str().unwrap_or(""),
                        t["value"].as_str().unwrap_or(""),
                        t["effect"].as_str().unwrap_or("")
                    )
                })
                .collect();
            assert_eq!(got, taints.to_vec(), "{config}");
            assert_eq!(info.node_count, 6, "size per zone times zones");
        }
    }

    #[test]
    fn machine_shapes_and_autoscaling_ceilings() {
        let cases = [
            ("e2-medium", (2, 4096)),
            ("e2-standard-8", (8, 32768)),
            ("n2-highmem-4", (4, 32768)),
            ("n1-standard-1", (1, 3840)),
            ("ct5lp-hightpu-4t", (112, 196608)),
            ("mystery", (2, 4096)),
        ];
        for (machine, want) in cases {
            assert_eq!(machine_shape(machine), want, "{machine}");
        }
        let mut p = pool(json!({"machineType": "e2-medium"}));
        p.autoscaling = json!({"enabled": true, "maxNodeCount": 4});
        assert_eq!(gke_node_pool(&p).max_nodes, 12);
        p.autoscaling = json!({"enabled": true, "totalMaxNodeCount": "5"});
        assert_eq!(
            gke_node_pool(&p).max_nodes,
            6,
            "never below the current size"
        );
        p.autoscaling = json!({"enabled": false, "maxNodeCount": 9});
        assert_eq!(gke_node_pool(&p).max_nodes, 6);
    }

    #[test]
    fn a_tpu_container_learns_its_slice_from_the_node() {
        let node = json!({"metadata": {"labels": {
            "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
            "cloud.google.com/gke-tpu-topology": "2x2",
        }}});
        let env: BTreeMap<String, String> = GkeCloud::plain(false)
            .device_env(&node, "google.com/tpu", 4)
            .into_iter()
            .collect();
        assert_eq!(env["TPU_ACCELERATOR_TYPE"], "v5litepod-4");
        assert_eq!(env["TPU_TOPOLOGY"], "2x2");
        assert_eq!(env["TPU_WORKER_ID"], "0");
        assert_eq!(env["TPU_VISIBLE_CHIPS"], "0,1,2,3");
        assert_eq!(
            tpu_accelerator_type("tpu-v4-podslice", "2x2x1").as_deref(),
            Some("v4-8")
        );
        assert_eq!(tpu_accelerator_type("tpu-v9", "2x2"), None);
        assert!(GkeCloud::plain(false)
            .device_env(&node, "nvidia.com/gpu", 1)
            .is_empty());
    }

    #[test]
    fn contexts_are_named_like_gcloud() {
        assert_eq!(
            GkeCloud::plain(false).context_name(
                "gke/projects/p/locations/us-central1/clusters/batch",
                "batch"
            ),
            "gke_p_us-central1_batch"
        );
    }

    const KEY: &str = "gke/projects/p/locations/us-central1/clusters/batch";

    /// A cluster's Kubernetes side as the sandbox makes it from GKE's report, after a few
    /// instant settles (nodes, then scheduling, then the kubelet).
    fn settled(autopilot: bool, pools: Vec<NodePoolInfo>) -> crate::k8s::ClusterState {
        use crate::k8s::{controllers, processes::Processes, KubeState, SettleCtx};
        let mut now = chrono::Utc::now();
        let mut state = KubeState::default();
        state.reconcile(
            "gke/",
            vec![CloudCluster {
                key: KEY.into(),
                name: "batch".into(),
                cloud: Arc::new(GkeCloud::plain(autopilot)),
                ca_cert_pem: String::new(),
                ca_key_pem: String::new(),
                node_pools: pools,
                version: "v1.32.4-gke.1415000".into(),
            }],
            now,
        );
        let mut cluster = state
            .clusters
            .remove(KEY)
            .expect("the cluster's API server");
        let dir = tempfile::tempdir().expect("a temporary directory");
        let processes = Processes::new(dir.path().to_path_buf());
        for _ in 0..4 {
            now += chrono::Duration::seconds(1);
            let ctx = SettleCtx {
                now,
                scale: 0.0,
                processes: &processes,
                data_dir: dir.path(),
                spot_reclaims: None,
            };
            controllers::settle(&mut cluster, &ctx);
        }
        cluster
    }

    /// `(k8s-app label, phase, node)` of the kube-system pods, whose names start with
    /// their workload's.
    fn system_pods(cluster: &crate::k8s::ClusterState) -> Vec<(String, String, String)> {
        cluster
            .store
            .list("", "pods", Some("kube-system"))
            .into_iter()
            .map(|(k, p)| {
                let app = p["metadata"]["labels"]["k8s-app"]
                    .as_str()
                    .unwrap_or_default();
                assert!(k.name.starts_with(&format!("{app}-")), "{}", k.name);
                (
                    app.to_string(),
                    p["status"]["phase"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    p["spec"]["nodeName"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                )
            })
            .collect()
    }

    #[test]
    fn gke_declares_kube_dns_and_on_standard_kube_proxy() {
        let names = |autopilot: bool| -> Vec<String> {
            GkeCloud::plain(autopilot)
                .system_objects(KEY, "v1.32.4-gke.1415000")
                .iter()
                .map(|o| {
                    format!(
                        "{}/{}",
                        o["kind"].as_str().unwrap_or(""),
                        o["metadata"]["name"].as_str().unwrap_or("")
                    )
                })
                .collect()
        };
        assert_eq!(
            names(false),
            [
                "ServiceAccount/kube-dns",
                "Deployment/kube-dns",
                "Service/kube-dns",
                "DaemonSet/kube-proxy",
                "StorageClass/premium-rwo",
                "StorageClass/standard",
                "StorageClass/standard-rwo"
            ]
        );
        assert_eq!(
            names(true),
            [
                "ServiceAccount/kube-dns",
                "Deployment/kube-dns",
                "Service/kube-dns",
                "StorageClass/premium-rwo",
                "StorageClass/standard",
                "StorageClass/standard-rwo"
            ],
            "Autopilot's Dataplane V2 has no kube-proxy"
        );
        let objects = GkeCloud::plain(false).system_objects(KEY, "v1.32.4-gke.1415000");
        assert!(objects
            .iter()
            .filter(|o| o["kind"] != "StorageClass")
            .all(|o| o["metadata"]["namespace"] == "kube-system"));
        let dns = &objects[1];
        assert_eq!(dns["spec"]["replicas"], 2);
        assert_eq!(dns["metadata"]["labels"]["k8s-app"], "kube-dns");
        assert_eq!(
            dns["metadata"]["labels"]["components.gke.io/gke-managed-components"],
            "true"
        );
        let pod = &dns["spec"]["template"]["spec"];
        assert_eq!(pod["priorityClassName"], "system-cluster-critical");
        assert!(pod["tolerations"].as_array().is_some_and(
            |t| t.contains(&json!({"key": "CriticalAddonsOnly", "operator": "Exists"}))
        ));
        assert_eq!(
            pod["containers"][0]["image"],
            format!("gke.gcr.io/k8s-dns-kube-dns:{KUBE_DNS_TAG}")
        );
        let svc = &objects[2];
        assert_eq!(svc["spec"]["clusterIP"], "10.96.0.10");
        assert_eq!(
            svc["spec"]["ports"],
            json!([{"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                   {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53}])
        );
        let proxy = &objects[3]["spec"]["template"]["spec"];
        assert_eq!(proxy["tolerations"], json!([{"operator": "Exists"}]));
        assert_eq!(
            proxy["containers"][0]["image"], "gke.gcr.io/kube-proxy-amd64:v1.32.4-gke.1415000",
            "kube-proxy runs the nodes' version"
        );
    }

    #[test]
    fn a_standard_cluster_runs_kube_dns_and_kube_proxy_on_its_pool() {
        let mut p = pool(json!({"machineType": "e2-standard-4"}));
        p.zones = 1;
        let cluster = settled(false, vec![gke_node_pool(&p)]);
        let svc = cluster
            .store
            .get(&crate::k8s::ObjKey::new(
                "",
                "services",
                "kube-system",
                "kube-dns",
            ))
            .expect("the kube-dns Service");
        assert_eq!(svc["spec"]["clusterIPs"], json!(["10.96.0.10"]));
        assert!(
            svc["metadata"]["uid"].is_string() && svc["metadata"]["creationTimestamp"].is_string()
        );
        for (group, resource, name) in [
            ("", "serviceaccounts", "kube-dns"),
            ("apps", "daemonsets", "kube-proxy"),
        ] {
            assert!(
                cluster
                    .store
                    .get(&crate::k8s::ObjKey::new(
                        group,
                        resource,
                        "kube-system",
                        name
                    ))
                    .is_some(),
                "{resource}/{name}"
            );
        }
        let deployment = cluster
            .store
            .get(&crate::k8s::ObjKey::new(
                "apps",
                "deployments",
                "kube-system",
                "kube-dns",
            ))
            .expect("the kube-dns Deployment");
        assert_eq!(
            deployment["spec"]["template"]["spec"]["schedulerName"], "default-scheduler",
            "defaulted as a create is"
        );
        let pods = system_pods(&cluster);
        let running = |prefix: &str| {
            pods.iter()
                .filter(|(p, phase, node)| p == prefix && phase == "Running" && !node.is_empty())
                .count()
        };
        assert_eq!(running("kube-dns"), 2, "{pods:?}");
        assert_eq!(running("kube-proxy"), 2, "one per node: {pods:?}");
        assert_eq!(pods.len(), 4, "{pods:?}");
        let endpoints = cluster
            .store
            .get(&crate::k8s::ObjKey::new(
                "",
                "endpoints",
                "kube-system",
                "kube-dns",
            ))
            .expect("kube-dns endpoints");
        assert_eq!(
            endpoints["subsets"][0]["addresses"]
                .as_array()
                .map(Vec::len),
            Some(2),
            "{endpoints}"
        );
    }

    #[test]
    fn dns_stays_off_gpu_pools_but_scales_an_untainted_pool_from_zero() {
        let mut gpu = pool(json!({"machineType": "g2-standard-8"}));
        gpu.zones = 1;
        gpu.size = 1;
        let cluster = settled(false, vec![gke_node_pool(&gpu)]);
        let pods = system_pods(&cluster);
        let dns: Vec<_> = pods.iter().filter(|(p, ..)| p == "kube-dns").collect();
        assert_eq!(dns.len(), 2, "{pods:?}");
        assert!(
            dns.iter()
                .all(|(_, phase, node)| phase == "Pending" && node.is_empty()),
            "{pods:?}"
        );
        assert!(
            pods.iter()
                .any(|(p, phase, _)| p == "kube-proxy" && phase == "Running"),
            "kube-proxy tolerates the GPU taint: {pods:?}"
        );

        let mut cpu = pool(json!({"machineType": "e2-standard-4"}));
        cpu.name = "cpu".into();
        cpu.zones = 1;
        cpu.size = 0;
        cpu.autoscaling = json!({"enabled": true, "maxNodeCount": 3});
        let cluster = settled(false, vec![gke_node_pool(&gpu), gke_node_pool(&cpu)]);
        let pods = system_pods(&cluster);
        let cpu_nodes: Vec<String> = cluster
            .store
            .list("", "nodes", None)
            .into_iter()
            .filter(|(_, n)| n["metadata"]["labels"]["cloud.google.com/gke-nodepool"] == "cpu")
            .map(|(k, _)| k.name.clone())
            .collect();
        assert_eq!(
            cpu_nodes.len(),
            1,
            "the autoscaler adds a node for kube-dns"
        );
        assert!(
            pods.iter()
                .filter(|(p, ..)| p == "kube-dns")
                .all(|(_, phase, node)| phase == "Running" && *node == cpu_nodes[0]),
            "{pods:?}"
        );
    }

    #[test]
    fn autopilot_runs_kube_dns_on_nodes_made_for_it() {
        let cluster = settled(true, Vec::new());
        let pods = system_pods(&cluster);
        assert_eq!(pods.len(), 2, "kube-dns only: {pods:?}");
        assert!(
            pods.iter().all(|(p, phase, node)| p == "kube-dns"
                && phase == "Running"
                && node.starts_with("gk3-batch-nap-")),
            "{pods:?}"
        );
    }

    #[test]
    fn autopilot_makes_a_node_per_pod_standard_does_not() {
        assert!(GkeCloud::plain(true).provisions_per_pod());
        assert!(!GkeCloud::plain(false).provisions_per_pod());
        assert!(GkeCloud::plain(true)
            .pod_node_name("batch", "uid")
            .starts_with("gk3-batch-nap-"));
        let a = GkeCloud::plain(false).pool_node_name("batch", "gpu", 0);
        assert!(a.starts_with("gke-batch-gpu-"), "{a}");
        assert_ne!(a, GkeCloud::plain(false).pool_node_name("batch", "gpu", 1));
    }
}
