//! The EKS side of the emulated clusters: [`EksCloud`], the [`CloudSide`] EKS's nodes,
//! tokens, kubeconfig contexts and default add-ons (CoreDNS, kube-proxy, the VPC CNI's
//! aws-node) follow.

use serde_json::{json, Value};

use super::{eks_token_valid, ACCOUNT};
use crate::common::hash::fnv64;
use crate::k8s::cloud::DNS_SERVICE_IP;
use crate::k8s::CloudSide;

/// The account of the ECR registries EKS's add-on images live in (that of most regions;
/// a few opt-in regions have their own).
const ADDON_REGISTRY_ACCOUNT: &str = "602401143452";
/// The default add-ons' versions for the clusters the sandbox makes.
const COREDNS_TAG: &str = "v1.11.4-eksbuild.2";
const VPC_CNI_TAG: &str = "v1.19.2-eksbuild.1";
const NETWORK_POLICY_AGENT_TAG: &str = "v1.1.6-eksbuild.1";

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
        let region = region(key);
        format!("arn:aws:eks:{region}:{ACCOUNT}:cluster/{name}")
    }

    fn system_objects(&self, key: &str, version: &str) -> Vec<Value> {
        // What EKS installs in every new cluster (unless told to bootstrap without its
        // default networking add-ons, which the sandbox's clusters do not ask for).
        let registry = format!(
            "{ADDON_REGISTRY_ACCOUNT}.dkr.ecr.{}.amazonaws.com",
            region(key)
        );
        let cluster = key.rsplit('/').next().unwrap_or_default();
        let mut objects = coredns(&registry);
        objects.push(service_account("kube-proxy", "kube-proxy"));
        objects.push(kube_proxy(&registry, version));
        objects.push(service_account("aws-node", "aws-node"));
        objects.push(aws_node(&registry, cluster));
        objects
    }
}

/// The region of the cluster key `eks/<region>/<name>`.
fn region(key: &str) -> &str {
    key.strip_prefix("eks/")
        .and_then(|k| k.split('/').next())
        .unwrap_or_default()
}

fn service_account(name: &str, app: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": name, "namespace": "kube-system",
                     "labels": {"app.kubernetes.io/name": app, "eks.amazonaws.com/component": app}},
    })
}

/// The node affinity of EKS's add-ons: Linux EC2 nodes of either architecture (Fargate
/// and Auto Mode nodes run their own).
fn linux_ec2_nodes(exclude_virtual: bool) -> Value {
    let mut terms = vec![
        json!({"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}),
        json!({"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64", "arm64"]}),
    ];
    if exclude_virtual {
        terms.push(
            json!({"key": "eks.amazonaws.com/compute-type", "operator": "NotIn",
                          "values": ["fargate", "hybrid", "auto"]}),
        );
    }
    json!({"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": terms}]}})
}

/// The CoreDNS add-on: its Corefile, ServiceAccount, the `coredns` Deployment (two
/// replicas) and the `kube-dns` Service at the address pods' resolv.conf names.
fn coredns(registry: &str) -> Vec<Value> {
    let labels = json!({"eks.amazonaws.com/component": "coredns", "k8s-app": "kube-dns"});
    let corefile = ".:53 {
    errors
    health {
        lameduck 5s
      }
    ready
    kubernetes cluster.local in-addr.arpa ip6.arpa {
      pods insecure
      fallthrough in-addr.arpa ip6.arpa
    }
    prometheus :9153
    forward . /etc/resolv.conf
    cache 30
    loop
    reload
    loadbalance
}
";
    let mut deployment_labels = labels.clone();
    deployment_labels["kubernetes.io/name"] = json!("CoreDNS");
    vec![
        service_account("coredns", "coredns"),
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "coredns", "namespace": "kube-system", "labels": labels},
            "data": {"Corefile": corefile},
        }),
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "coredns", "namespace": "kube-system", "labels": deployment_labels},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": labels},
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 1}},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "priorityClassName": "system-cluster-critical",
                        "serviceAccountName": "coredns",
                        // Its own upstream is the node's resolver, not itself.
                        "dnsPolicy": "Default",
                        // No taint of a GPU node group is tolerated: CoreDNS stays off them.
                        "tolerations": [
                            {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"},
                            {"key": "CriticalAddonsOnly", "operator": "Exists"},
                        ],
                        "affinity": {
                            "nodeAffinity": linux_ec2_nodes(false),
                            "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
                                "weight": 100,
                                "podAffinityTerm": {
                                    "labelSelector": {"matchExpressions": [{"key": "k8s-app", "operator": "In", "values": ["kube-dns"]}]},
                                    "topologyKey": "kubernetes.io/hostname",
                                },
                            }]},
                        },
                        "containers": [{
                            "name": "coredns",
                            "image": format!("{registry}/eks/coredns:{COREDNS_TAG}"),
                            "args": ["-conf", "/etc/coredns/Corefile"],
                            "ports": [
                                {"containerPort": 53, "name": "dns", "protocol": "UDP"},
                                {"containerPort": 53, "name": "dns-tcp", "protocol": "TCP"},
                                {"containerPort": 9153, "name": "metrics", "protocol": "TCP"},
                            ],
                            "resources": {"limits": {"memory": "170Mi"}, "requests": {"cpu": "100m", "memory": "70Mi"}},
                            "securityContext": {"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
                                                "capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]}},
                            "volumeMounts": [{"name": "config-volume", "mountPath": "/etc/coredns", "readOnly": true}],
                        }],
                        "volumes": [{"name": "config-volume",
                                     "configMap": {"name": "coredns", "items": [{"key": "Corefile", "path": "Corefile"}]}}],
                    },
                },
            },
        }),
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "kube-dns", "namespace": "kube-system",
                         "labels": {"eks.amazonaws.com/component": "kube-dns", "k8s-app": "kube-dns",
                                    "kubernetes.io/cluster-service": "true", "kubernetes.io/name": "CoreDNS"},
                         "annotations": {"prometheus.io/port": "9153", "prometheus.io/scrape": "true"}},
            "spec": {
                "type": "ClusterIP",
                "clusterIP": DNS_SERVICE_IP,
                "selector": {"k8s-app": "kube-dns"},
                "ports": [
                    {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                    {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
                    {"name": "metrics", "port": 9153, "protocol": "TCP", "targetPort": 9153},
                ],
            },
        }),
    ]
}

/// The kube-proxy add-on, at the control plane's Kubernetes version (`v1.31.5-eks-…` →
/// `v1.31.5-minimal-eksbuild.2`). Node agents tolerate every taint, so they run on GPU
/// node groups too.
fn kube_proxy(registry: &str, version: &str) -> Value {
    let release = version
        .split(['-', '+'])
        .next()
        .filter(|v| !v.is_empty())
        .unwrap_or(version);
    let labels = json!({"k8s-app": "kube-proxy", "eks.amazonaws.com/component": "kube-proxy"});
    json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "kube-proxy", "namespace": "kube-system", "labels": labels},
        "spec": {
            "selector": {"matchLabels": {"k8s-app": "kube-proxy"}},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "10%"}},
            "template": {
                "metadata": {"labels": {"k8s-app": "kube-proxy"}},
                "spec": {
                    "priorityClassName": "system-node-critical",
                    "serviceAccountName": "kube-proxy",
                    "hostNetwork": true,
                    "tolerations": [{"operator": "Exists"}],
                    "affinity": {"nodeAffinity": linux_ec2_nodes(true)},
                    "containers": [{
                        "name": "kube-proxy",
                        "image": format!("{registry}/eks/kube-proxy:{release}-minimal-eksbuild.2"),
                        "command": ["kube-proxy", "--v=2", "--config=/var/lib/kube-proxy-config/config",
                                    "--hostname-override=$(NODE_NAME)"],
                        "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
                        "resources": {"requests": {"cpu": "100m"}},
                        "securityContext": {"privileged": true},
                    }],
                },
            },
        },
    })
}

/// The Amazon VPC CNI's node agent, `aws-node`: its init container sets up the node, then
/// the CNI daemon and the network policy agent run beside each other.
fn aws_node(registry: &str, cluster: &str) -> Value {
    let version = VPC_CNI_TAG.split('-').next().unwrap_or(VPC_CNI_TAG);
    json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "aws-node", "namespace": "kube-system",
                     "labels": {"app.kubernetes.io/instance": "aws-vpc-cni", "app.kubernetes.io/name": "aws-node",
                                "app.kubernetes.io/version": version, "k8s-app": "aws-node"}},
        "spec": {
            "selector": {"matchLabels": {"k8s-app": "aws-node"}},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "10%"}},
            "template": {
                "metadata": {"labels": {"app.kubernetes.io/instance": "aws-vpc-cni",
                                        "app.kubernetes.io/name": "aws-node", "k8s-app": "aws-node"}},
                "spec": {
                    "priorityClassName": "system-node-critical",
                    "serviceAccountName": "aws-node",
                    "hostNetwork": true,
                    "terminationGracePeriodSeconds": 10,
                    "tolerations": [{"operator": "Exists"}],
                    "affinity": {"nodeAffinity": linux_ec2_nodes(true)},
                    "initContainers": [{
                        "name": "aws-vpc-cni-init",
                        "image": format!("{registry}/amazon-k8s-cni-init:{VPC_CNI_TAG}"),
                        "env": [{"name": "DISABLE_TCP_EARLY_DEMUX", "value": "false"},
                                {"name": "ENABLE_IPv6", "value": "false"}],
                        "resources": {"requests": {"cpu": "25m"}},
                        "securityContext": {"privileged": true},
                    }],
                    "containers": [
                        {
                            "name": "aws-node",
                            "image": format!("{registry}/amazon-k8s-cni:{VPC_CNI_TAG}"),
                            "ports": [{"containerPort": 61678, "name": "metrics", "protocol": "TCP"}],
                            "env": [
                                {"name": "CLUSTER_NAME", "value": cluster},
                                {"name": "AWS_VPC_K8S_CNI_LOGLEVEL", "value": "DEBUG"},
                                {"name": "ENABLE_PREFIX_DELEGATION", "value": "false"},
                                {"name": "VPC_CNI_VERSION", "value": version},
                                {"name": "MY_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                            ],
                            "resources": {"requests": {"cpu": "25m"}},
                            "securityContext": {"capabilities": {"add": ["NET_ADMIN", "NET_RAW"]}},
                        },
                        {
                            "name": "aws-eks-nodeagent",
                            "image": format!("{registry}/amazon/aws-network-policy-agent:{NETWORK_POLICY_AGENT_TAG}"),
                            "args": ["--enable-ipv6=false", "--enable-network-policy=false",
                                     "--enable-cloudwatch-logs=false", "--enable-policy-event-logs=false",
                                     "--log-file=/var/log/aws-routed-eni/network-policy-agent.log",
                                     "--metrics-bind-addr=:8162", "--health-probe-bind-addr=:8163",
                                     "--conntrack-cache-cleanup-period=300"],
                            "env": [{"name": "MY_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
                            "resources": {"requests": {"cpu": "25m"}},
                            "securityContext": {"privileged": true, "capabilities": {"add": ["NET_ADMIN"]}},
                        },
                    ],
                },
            },
        },
    })
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

    const KEY: &str = "eks/eu-west-1/ml";

    #[test]
    fn eks_declares_coredns_kube_proxy_and_aws_node_from_its_regional_registry() {
        let objects = EksCloud.system_objects(KEY, "v1.31.5-eks-5d632ec");
        let names: Vec<String> = objects
            .iter()
            .map(|o| {
                format!(
                    "{}/{}",
                    o["kind"].as_str().unwrap_or(""),
                    o["metadata"]["name"].as_str().unwrap_or("")
                )
            })
            .collect();
        assert_eq!(
            names,
            [
                "ServiceAccount/coredns",
                "ConfigMap/coredns",
                "Deployment/coredns",
                "Service/kube-dns",
                "ServiceAccount/kube-proxy",
                "DaemonSet/kube-proxy",
                "ServiceAccount/aws-node",
                "DaemonSet/aws-node",
            ]
        );
        assert!(objects
            .iter()
            .all(|o| o["metadata"]["namespace"] == "kube-system"));
        let image = |i: usize, container: usize| {
            objects[i]["spec"]["template"]["spec"]["containers"][container]["image"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        };
        assert_eq!(
            image(2, 0),
            "602401143452.dkr.ecr.eu-west-1.amazonaws.com/eks/coredns:v1.11.4-eksbuild.2"
        );
        assert_eq!(
            image(5, 0),
            "602401143452.dkr.ecr.eu-west-1.amazonaws.com/eks/kube-proxy:v1.31.5-minimal-eksbuild.2"
        );
        assert_eq!(
            image(7, 0),
            "602401143452.dkr.ecr.eu-west-1.amazonaws.com/amazon-k8s-cni:v1.19.2-eksbuild.1"
        );
        let coredns = &objects[2]["spec"];
        assert_eq!(coredns["replicas"], 2);
        assert_eq!(
            coredns["template"]["spec"]["priorityClassName"],
            "system-cluster-critical"
        );
        assert_eq!(objects[3]["spec"]["clusterIP"], "10.96.0.10");
        for ds in [5, 7] {
            assert_eq!(
                objects[ds]["spec"]["template"]["spec"]["tolerations"],
                json!([{"operator": "Exists"}]),
                "node agents tolerate every taint"
            );
        }
        assert_eq!(
            objects[7]["spec"]["template"]["spec"]["containers"][0]["env"][0],
            json!({"name": "CLUSTER_NAME", "value": "ml"})
        );
    }

    #[test]
    fn an_eks_cluster_runs_its_add_ons_on_its_node_group() {
        use std::collections::BTreeMap;

        use crate::k8s::{
            controllers, processes::Processes, CloudCluster, KubeState, NodePoolInfo, ObjKey,
            SettleCtx,
        };
        let group = |name: &str, count: i64, taint: bool| NodePoolInfo {
            name: name.into(),
            machine_type: "m5.xlarge".into(),
            node_count: count,
            max_nodes: count,
            labels: BTreeMap::from([
                ("eks.amazonaws.com/nodegroup".to_string(), name.to_string()),
                (
                    "topology.kubernetes.io/zone".to_string(),
                    "eu-west-1a".to_string(),
                ),
            ]),
            taints: if taint {
                vec![json!({"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"})]
            } else {
                Vec::new()
            },
            extended_resources: BTreeMap::new(),
            cpu: "4".into(),
            memory: "16Gi".into(),
            version: None,
        };
        let mut now = chrono::Utc::now();
        let mut state = KubeState::default();
        state.reconcile(
            "eks/",
            vec![CloudCluster {
                key: KEY.into(),
                name: "ml".into(),
                cloud: std::sync::Arc::new(EksCloud),
                ca_cert_pem: String::new(),
                ca_key_pem: String::new(),
                node_pools: vec![group("cpu", 2, false), group("gpu", 1, true)],
                version: "v1.31.5-eks-5d632ec".into(),
            }],
            now,
        );
        let mut cluster = state
            .clusters
            .remove(KEY)
            .expect("the cluster's API server");
        let declared = EksCloud.system_objects(KEY, "v1.31.5-eks-5d632ec").len();
        let stored = cluster
            .store
            .keys()
            .iter()
            .filter(|k| k.namespace == "kube-system")
            .count();
        assert_eq!(stored, declared, "every add-on object is accepted");
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
        let pods: Vec<(String, String, String)> = cluster
            .store
            .list("", "pods", Some("kube-system"))
            .into_iter()
            .map(|(k, p)| {
                (
                    k.name.clone(),
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
            .collect();
        let running_on = |prefix: &str, pool: &str| {
            pods.iter()
                .filter(|(name, phase, node)| {
                    name.starts_with(prefix)
                        && phase == "Running"
                        && cluster
                            .store
                            .get(&ObjKey::new("", "nodes", "", node))
                            .is_some_and(|n| {
                                n["metadata"]["labels"]["eks.amazonaws.com/nodegroup"] == pool
                            })
                })
                .count()
        };
        assert_eq!(running_on("coredns-", "cpu"), 2, "{pods:?}");
        assert_eq!(
            running_on("coredns-", "gpu"),
            0,
            "the GPU taint keeps CoreDNS off"
        );
        for agent in ["kube-proxy-", "aws-node-"] {
            assert_eq!(running_on(agent, "cpu"), 2, "{agent}: {pods:?}");
            assert_eq!(running_on(agent, "gpu"), 1, "{agent}: {pods:?}");
        }
        assert_eq!(pods.len(), 8, "{pods:?}");
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
