//! The schemas of the kinds an emulated API server serves, shared by the OpenAPI documents
//! (`openapi.rs`), server-side apply (`apply.rs`) and strict field validation: built-in
//! kinds from k8s-openapi's schemars output plus the Kubernetes extensions that output
//! lacks (one table, [`EXTENSIONS`], proven equal to the 1.31 swagger by a test), custom
//! resources from their CRD's `openAPIV3Schema`, and a cursor that walks either.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, OnceLock};

use k8s_openapi::api::{
    apps, batch, coordination, core, events, networking, policy, rbac, scheduling, storage,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiextensions;
use k8s_openapi::schemars::generate::SchemaSettings;
use k8s_openapi::schemars::{JsonSchema, SchemaGenerator};
use serde_json::{json, Map, Value};

/// Where an OpenAPI v3 reference points.
pub(crate) const V3_REF: &str = "#/components/schemas/";
/// Where a swagger 2.0 reference points.
pub(crate) const V2_REF: &str = "#/definitions/";
pub(crate) const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
/// The body schema of PATCH operations.
pub(crate) const PATCH: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Patch";

/// `(definition, field, list-type, list-map-keys, patch-merge-key, patch-strategy,
/// map-type)`: the Kubernetes extensions of the served built-in kinds' definitions, `""`
/// (or no keys) where the swagger has none; field `""` is the definition itself.
pub(crate) type Extension = (
    &'static str,
    &'static str,
    &'static str,
    &'static [&'static str],
    &'static str,
    &'static str,
    &'static str,
);

/// Every extension of every definition the served built-in kinds reach, as the
/// Kubernetes 1.31 swagger has them (`extensions_equal_the_reference_swagger` keeps this
/// honest). Server-side apply merges and owns lists by these, and the OpenAPI documents
/// carry them.
#[rustfmt::skip]
pub(crate) const EXTENSIONS: &[Extension] = &[
    ("io.k8s.api.apps.v1.DaemonSetStatus", "conditions", "map", &["type"], "type", "merge", ""),
    ("io.k8s.api.apps.v1.DeploymentSpec", "strategy", "", &[], "", "retainKeys", ""),
    ("io.k8s.api.apps.v1.DeploymentStatus", "conditions", "map", &["type"], "type", "merge", ""),
    ("io.k8s.api.apps.v1.ReplicaSetStatus", "conditions", "map", &["type"], "type", "merge", ""),
    ("io.k8s.api.apps.v1.StatefulSetSpec", "volumeClaimTemplates", "atomic", &[], "", "", ""),
    ("io.k8s.api.apps.v1.StatefulSetStatus", "conditions", "map", &["type"], "type", "merge", ""),
    ("io.k8s.api.batch.v1.CronJobStatus", "active", "atomic", &[], "", "", ""),
    ("io.k8s.api.batch.v1.JobStatus", "conditions", "atomic", &[], "type", "merge", ""),
    ("io.k8s.api.batch.v1.PodFailurePolicy", "rules", "atomic", &[], "", "", ""),
    ("io.k8s.api.batch.v1.PodFailurePolicyOnExitCodesRequirement", "values", "set", &[], "", "", ""),
    ("io.k8s.api.batch.v1.PodFailurePolicyRule", "onPodConditions", "atomic", &[], "", "", ""),
    ("io.k8s.api.batch.v1.SuccessPolicy", "rules", "atomic", &[], "", "", ""),
    ("io.k8s.api.batch.v1.UncountedTerminatedPods", "failed", "set", &[], "", "", ""),
    ("io.k8s.api.batch.v1.UncountedTerminatedPods", "succeeded", "set", &[], "", "", ""),
    ("io.k8s.api.core.v1.Capabilities", "add", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.Capabilities", "drop", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.CephFSPersistentVolumeSource", "monitors", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.CephFSVolumeSource", "monitors", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.ConfigMapKeySelector", "", "", &[], "", "", "atomic"),
    ("io.k8s.api.core.v1.ConfigMapProjection", "items", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.ConfigMapVolumeSource", "items", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.Container", "args", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.Container", "command", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.Container", "env", "map", &["name"], "name", "merge", ""),
    ("io.k8s.api.core.v1.Container", "envFrom", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.Container", "ports", "map", &["containerPort", "protocol"], "containerPort", "merge", ""),
    ("io.k8s.api.core.v1.Container", "resizePolicy", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.Container", "volumeDevices", "map", &["devicePath"], "devicePath", "merge", ""),
    ("io.k8s.api.core.v1.Container", "volumeMounts", "map", &["mountPath"], "mountPath", "merge", ""),
    ("io.k8s.api.core.v1.ContainerImage", "names", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.ContainerStatus", "allocatedResourcesStatus", "map", &["name"], "name", "merge", ""),
    ("io.k8s.api.core.v1.ContainerStatus", "volumeMounts", "map", &["mountPath"], "mountPath", "merge", ""),
    ("io.k8s.api.core.v1.DownwardAPIProjection", "items", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.DownwardAPIVolumeSource", "items", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.EndpointAddress", "", "", &[], "", "", "atomic"),
    ("io.k8s.api.core.v1.EndpointPort", "", "", &[], "", "", "atomic"),
    ("io.k8s.api.core.v1.EndpointSubset", "addresses", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.EndpointSubset", "notReadyAddresses", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.EndpointSubset", "ports", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.Endpoints", "subsets", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.EphemeralContainer", "args", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.EphemeralContainer", "command", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.EphemeralContainer", "env", "map", &["name"], "name", "merge", ""),
    ("io.k8s.api.core.v1.EphemeralContainer", "envFrom", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.EphemeralContainer", "ports", "map", &["containerPort", "protocol"], "containerPort", "merge", ""),
    ("io.k8s.api.core.v1.EphemeralContainer", "resizePolicy", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.EphemeralContainer", "volumeDevices", "map", &["devicePath"], "devicePath", "merge", ""),
    ("io.k8s.api.core.v1.EphemeralContainer", "volumeMounts", "map", &["mountPath"], "mountPath", "merge", ""),
    ("io.k8s.api.core.v1.ExecAction", "command", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.FCVolumeSource", "targetWWNs", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.FCVolumeSource", "wwids", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.HTTPGetAction", "httpHeaders", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.HostAlias", "hostnames", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.ISCSIPersistentVolumeSource", "portals", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.ISCSIVolumeSource", "portals", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.LinuxContainerUser", "supplementalGroups", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.LoadBalancerIngress", "ports", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.LoadBalancerStatus", "ingress", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.LocalObjectReference", "", "", &[], "", "", "atomic"),
    ("io.k8s.api.core.v1.NamespaceSpec", "finalizers", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.NamespaceStatus", "conditions", "map", &["type"], "type", "merge", ""),
    ("io.k8s.api.core.v1.NodeAffinity", "preferredDuringSchedulingIgnoredDuringExecution", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.NodeSelector", "", "", &[], "", "", "atomic"),
    ("io.k8s.api.core.v1.NodeSelector", "nodeSelectorTerms", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.NodeSelectorRequirement", "values", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.NodeSelectorTerm", "", "", &[], "", "", "atomic"),
    ("io.k8s.api.core.v1.NodeSelectorTerm", "matchExpressions", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.NodeSelectorTerm", "matchFields", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.NodeSpec", "podCIDRs", "set", &[], "", "merge", ""),
    ("io.k8s.api.core.v1.NodeSpec", "taints", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.NodeStatus", "addresses", "map", &["type"], "type", "merge", ""),
    ("io.k8s.api.core.v1.NodeStatus", "conditions", "map", &["type"], "type", "merge", ""),
    ("io.k8s.api.core.v1.NodeStatus", "images", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.NodeStatus", "runtimeHandlers", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.NodeStatus", "volumesAttached", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.NodeStatus", "volumesInUse", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.ObjectFieldSelector", "", "", &[], "", "", "atomic"),
    ("io.k8s.api.core.v1.ObjectReference", "", "", &[], "", "", "atomic"),
    ("io.k8s.api.core.v1.PersistentVolumeClaimSpec", "accessModes", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.PersistentVolumeClaimStatus", "accessModes", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.PersistentVolumeClaimStatus", "allocatedResourceStatuses", "", &[], "", "", "granular"),
    ("io.k8s.api.core.v1.PersistentVolumeClaimStatus", "conditions", "map", &["type"], "type", "merge", ""),
    ("io.k8s.api.core.v1.PersistentVolumeSpec", "accessModes", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.PersistentVolumeSpec", "claimRef", "", &[], "", "", "granular"),
    ("io.k8s.api.core.v1.PersistentVolumeSpec", "mountOptions", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.PodAffinity", "preferredDuringSchedulingIgnoredDuringExecution", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.PodAffinity", "requiredDuringSchedulingIgnoredDuringExecution", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.PodAffinityTerm", "matchLabelKeys", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.PodAffinityTerm", "mismatchLabelKeys", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.PodAffinityTerm", "namespaces", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.PodAntiAffinity", "preferredDuringSchedulingIgnoredDuringExecution", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.PodAntiAffinity", "requiredDuringSchedulingIgnoredDuringExecution", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.PodDNSConfig", "nameservers", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.PodDNSConfig", "options", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.PodDNSConfig", "searches", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.PodSecurityContext", "supplementalGroups", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.PodSecurityContext", "sysctls", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.PodSpec", "containers", "map", &["name"], "name", "merge", ""),
    ("io.k8s.api.core.v1.PodSpec", "ephemeralContainers", "map", &["name"], "name", "merge", ""),
    ("io.k8s.api.core.v1.PodSpec", "hostAliases", "map", &["ip"], "ip", "merge", ""),
    ("io.k8s.api.core.v1.PodSpec", "imagePullSecrets", "map", &["name"], "name", "merge", ""),
    ("io.k8s.api.core.v1.PodSpec", "initContainers", "map", &["name"], "name", "merge", ""),
    ("io.k8s.api.core.v1.PodSpec", "nodeSelector", "", &[], "", "", "atomic"),
    ("io.k8s.api.core.v1.PodSpec", "readinessGates", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.PodSpec", "resourceClaims", "map", &["name"], "name", "merge,retainKeys", ""),
    ("io.k8s.api.core.v1.PodSpec", "schedulingGates", "map", &["name"], "name", "merge", ""),
    ("io.k8s.api.core.v1.PodSpec", "tolerations", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.PodSpec", "topologySpreadConstraints", "map", &["topologyKey", "whenUnsatisfiable"], "topologyKey", "merge", ""),
    ("io.k8s.api.core.v1.PodSpec", "volumes", "map", &["name"], "name", "merge,retainKeys", ""),
    ("io.k8s.api.core.v1.PodStatus", "conditions", "map", &["type"], "type", "merge", ""),
    ("io.k8s.api.core.v1.PodStatus", "containerStatuses", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.PodStatus", "ephemeralContainerStatuses", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.PodStatus", "hostIPs", "atomic", &[], "ip", "merge", ""),
    ("io.k8s.api.core.v1.PodStatus", "initContainerStatuses", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.PodStatus", "podIPs", "map", &["ip"], "ip", "merge", ""),
    ("io.k8s.api.core.v1.PodStatus", "resourceClaimStatuses", "map", &["name"], "name", "merge,retainKeys", ""),
    ("io.k8s.api.core.v1.ProjectedVolumeSource", "sources", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.RBDPersistentVolumeSource", "monitors", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.RBDVolumeSource", "monitors", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.ResourceFieldSelector", "", "", &[], "", "", "atomic"),
    ("io.k8s.api.core.v1.ResourceRequirements", "claims", "map", &["name"], "", "", ""),
    ("io.k8s.api.core.v1.ResourceStatus", "resources", "map", &["resourceID"], "", "", ""),
    ("io.k8s.api.core.v1.SecretKeySelector", "", "", &[], "", "", "atomic"),
    ("io.k8s.api.core.v1.SecretProjection", "items", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.SecretReference", "", "", &[], "", "", "atomic"),
    ("io.k8s.api.core.v1.SecretVolumeSource", "items", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.ServiceAccount", "imagePullSecrets", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.ServiceAccount", "secrets", "map", &["name"], "name", "merge", ""),
    ("io.k8s.api.core.v1.ServiceSpec", "clusterIPs", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.ServiceSpec", "externalIPs", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.ServiceSpec", "ipFamilies", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.ServiceSpec", "loadBalancerSourceRanges", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.ServiceSpec", "ports", "map", &["port", "protocol"], "port", "merge", ""),
    ("io.k8s.api.core.v1.ServiceSpec", "selector", "", &[], "", "", "atomic"),
    ("io.k8s.api.core.v1.ServiceStatus", "conditions", "map", &["type"], "type", "merge", ""),
    ("io.k8s.api.core.v1.TopologySelectorLabelRequirement", "values", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.TopologySelectorTerm", "", "", &[], "", "", "atomic"),
    ("io.k8s.api.core.v1.TopologySelectorTerm", "matchLabelExpressions", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.TopologySpreadConstraint", "matchLabelKeys", "atomic", &[], "", "", ""),
    ("io.k8s.api.core.v1.TypedLocalObjectReference", "", "", &[], "", "", "atomic"),
    ("io.k8s.api.networking.v1.IPBlock", "except", "atomic", &[], "", "", ""),
    ("io.k8s.api.networking.v1.NetworkPolicyEgressRule", "ports", "atomic", &[], "", "", ""),
    ("io.k8s.api.networking.v1.NetworkPolicyEgressRule", "to", "atomic", &[], "", "", ""),
    ("io.k8s.api.networking.v1.NetworkPolicyIngressRule", "from", "atomic", &[], "", "", ""),
    ("io.k8s.api.networking.v1.NetworkPolicyIngressRule", "ports", "atomic", &[], "", "", ""),
    ("io.k8s.api.networking.v1.NetworkPolicySpec", "egress", "atomic", &[], "", "", ""),
    ("io.k8s.api.networking.v1.NetworkPolicySpec", "ingress", "atomic", &[], "", "", ""),
    ("io.k8s.api.networking.v1.NetworkPolicySpec", "policyTypes", "atomic", &[], "", "", ""),
    ("io.k8s.api.policy.v1.PodDisruptionBudgetSpec", "selector", "", &[], "", "replace", ""),
    ("io.k8s.api.policy.v1.PodDisruptionBudgetStatus", "conditions", "map", &["type"], "type", "merge", ""),
    ("io.k8s.api.rbac.v1.AggregationRule", "clusterRoleSelectors", "atomic", &[], "", "", ""),
    ("io.k8s.api.rbac.v1.ClusterRole", "rules", "atomic", &[], "", "", ""),
    ("io.k8s.api.rbac.v1.ClusterRoleBinding", "subjects", "atomic", &[], "", "", ""),
    ("io.k8s.api.rbac.v1.PolicyRule", "apiGroups", "atomic", &[], "", "", ""),
    ("io.k8s.api.rbac.v1.PolicyRule", "nonResourceURLs", "atomic", &[], "", "", ""),
    ("io.k8s.api.rbac.v1.PolicyRule", "resourceNames", "atomic", &[], "", "", ""),
    ("io.k8s.api.rbac.v1.PolicyRule", "resources", "atomic", &[], "", "", ""),
    ("io.k8s.api.rbac.v1.PolicyRule", "verbs", "atomic", &[], "", "", ""),
    ("io.k8s.api.rbac.v1.Role", "rules", "atomic", &[], "", "", ""),
    ("io.k8s.api.rbac.v1.RoleBinding", "subjects", "atomic", &[], "", "", ""),
    ("io.k8s.api.rbac.v1.RoleRef", "", "", &[], "", "", "atomic"),
    ("io.k8s.api.rbac.v1.Subject", "", "", &[], "", "", "atomic"),
    ("io.k8s.api.storage.v1.StorageClass", "allowedTopologies", "atomic", &[], "", "", ""),
    ("io.k8s.api.storage.v1.StorageClass", "mountOptions", "atomic", &[], "", "", ""),
    ("io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinitionNames", "categories", "atomic", &[], "", "", ""),
    ("io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinitionNames", "shortNames", "atomic", &[], "", "", ""),
    ("io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinitionSpec", "versions", "atomic", &[], "", "", ""),
    ("io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinitionStatus", "conditions", "map", &["type"], "", "", ""),
    ("io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinitionStatus", "storedVersions", "atomic", &[], "", "", ""),
    ("io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinitionVersion", "additionalPrinterColumns", "atomic", &[], "", "", ""),
    ("io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinitionVersion", "selectableFields", "atomic", &[], "", "", ""),
    ("io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaProps", "allOf", "atomic", &[], "", "", ""),
    ("io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaProps", "anyOf", "atomic", &[], "", "", ""),
    ("io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaProps", "enum", "atomic", &[], "", "", ""),
    ("io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaProps", "oneOf", "atomic", &[], "", "", ""),
    ("io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaProps", "required", "atomic", &[], "", "", ""),
    ("io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaProps", "x-kubernetes-list-map-keys", "atomic", &[], "", "", ""),
    ("io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaProps", "x-kubernetes-validations", "map", &["rule"], "rule", "merge", ""),
    ("io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.WebhookConversion", "conversionReviewVersions", "atomic", &[], "", "", ""),
    ("io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector", "", "", &[], "", "", "atomic"),
    ("io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector", "matchExpressions", "atomic", &[], "", "", ""),
    ("io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelectorRequirement", "values", "atomic", &[], "", "", ""),
    ("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", "finalizers", "set", &[], "", "merge", ""),
    ("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", "managedFields", "atomic", &[], "", "", ""),
    ("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", "ownerReferences", "map", &["uid"], "uid", "merge", ""),
    ("io.k8s.apimachinery.pkg.apis.meta.v1.OwnerReference", "", "", &[], "", "", "atomic"),
];

/// The `default`s of list-map key fields that items may omit: the real server's v3
/// schemas carry them (the v2 swagger and k8s-openapi do not), and server-side apply keys
/// an item that omits one by its default, as structured-merge-diff does.
pub(crate) const KEY_DEFAULTS: &[(&str, &str, &str)] = &[
    ("io.k8s.api.core.v1.ContainerPort", "protocol", "TCP"),
    ("io.k8s.api.core.v1.ServicePort", "protocol", "TCP"),
];

/// The `x-kubernetes-*` members one [`EXTENSIONS`] row stands for.
pub(crate) fn extension_members(row: &Extension) -> Vec<(&'static str, Value)> {
    let &(_, _, list_type, keys, merge_key, strategy, map_type) = row;
    let mut out = Vec::new();
    if !list_type.is_empty() {
        out.push(("x-kubernetes-list-type", json!(list_type)));
    }
    if !keys.is_empty() {
        out.push(("x-kubernetes-list-map-keys", json!(keys)));
    }
    if !merge_key.is_empty() {
        out.push(("x-kubernetes-patch-merge-key", json!(merge_key)));
    }
    if !strategy.is_empty() {
        out.push(("x-kubernetes-patch-strategy", json!(strategy)));
    }
    if !map_type.is_empty() {
        out.push(("x-kubernetes-map-type", json!(map_type)));
    }
    out
}

macro_rules! builtin_kinds {
    ($($group:literal $version:literal $kind:literal => $ty:ty;)*) => {
        /// Generates every served built-in kind's schema into `generator`:
        /// `(group, version, kind, definition)`.
        fn register(
            generator: &mut SchemaGenerator,
        ) -> Vec<(&'static str, &'static str, &'static str, String)> {
            vec![$({
                generator.subschema_for::<$ty>();
                ($group, $version, $kind, <$ty as JsonSchema>::schema_name().into_owned())
            }),*]
        }
    };
}

// The kinds of discovery's built-in table; `every_served_builtin_has_a_schema_with_its_gvk`
// fails when that table gains a kind this list lacks.
builtin_kinds! {
    "" "v1" "Namespace" => core::v1::Namespace;
    "" "v1" "Pod" => core::v1::Pod;
    "" "v1" "Service" => core::v1::Service;
    "" "v1" "Endpoints" => core::v1::Endpoints;
    "" "v1" "PersistentVolume" => core::v1::PersistentVolume;
    "" "v1" "PersistentVolumeClaim" => core::v1::PersistentVolumeClaim;
    "" "v1" "ConfigMap" => core::v1::ConfigMap;
    "" "v1" "Secret" => core::v1::Secret;
    "" "v1" "ServiceAccount" => core::v1::ServiceAccount;
    "" "v1" "Event" => core::v1::Event;
    "" "v1" "Node" => core::v1::Node;
    "apps" "v1" "Deployment" => apps::v1::Deployment;
    "apps" "v1" "ReplicaSet" => apps::v1::ReplicaSet;
    "apps" "v1" "DaemonSet" => apps::v1::DaemonSet;
    "apps" "v1" "StatefulSet" => apps::v1::StatefulSet;
    "batch" "v1" "Job" => batch::v1::Job;
    "batch" "v1" "CronJob" => batch::v1::CronJob;
    "rbac.authorization.k8s.io" "v1" "Role" => rbac::v1::Role;
    "rbac.authorization.k8s.io" "v1" "RoleBinding" => rbac::v1::RoleBinding;
    "rbac.authorization.k8s.io" "v1" "ClusterRole" => rbac::v1::ClusterRole;
    "rbac.authorization.k8s.io" "v1" "ClusterRoleBinding" => rbac::v1::ClusterRoleBinding;
    "storage.k8s.io" "v1" "StorageClass" => storage::v1::StorageClass;
    "apiextensions.k8s.io" "v1" "CustomResourceDefinition" => apiextensions::CustomResourceDefinition;
    "events.k8s.io" "v1" "Event" => events::v1::Event;
    "coordination.k8s.io" "v1" "Lease" => coordination::v1::Lease;
    "policy" "v1" "PodDisruptionBudget" => policy::v1::PodDisruptionBudget;
    "scheduling.k8s.io" "v1" "PriorityClass" => scheduling::v1::PriorityClass;
    "networking.k8s.io" "v1" "NetworkPolicy" => networking::v1::NetworkPolicy;
}

/// The built-in kinds' schemas, generated once per process.
pub(crate) struct Builtins {
    /// Every definition the served built-in kinds reach, OpenAPI v3 style (references
    /// with siblings wrapped in `allOf`), with [`EXTENSIONS`] and [`KEY_DEFAULTS`] added.
    pub defs: Map<String, Value>,
    /// `(group, version, kind, definition)` of each served built-in kind.
    pub kinds: Vec<(&'static str, &'static str, &'static str, String)>,
}

impl Builtins {
    fn definition_of(&self, group: &str, version: &str, kind: &str) -> Option<&str> {
        self.kinds
            .iter()
            .find(|(g, v, k, _)| *g == group && *v == version && *k == kind)
            .map(|(_, _, _, name)| name.as_str())
    }
}

/// The built-in schemas; the first call generates them (a few milliseconds), so nothing
/// pays for them until a client asks for OpenAPI or applies.
pub(crate) fn builtins() -> &'static Builtins {
    static BUILTINS: OnceLock<Builtins> = OnceLock::new();
    BUILTINS.get_or_init(generate)
}

fn generate() -> Builtins {
    let mut generator = SchemaGenerator::new(SchemaSettings::openapi3());
    let kinds = register(&mut generator);
    let mut defs = generator.take_definitions(true);
    for (group, version, kind, name) in &kinds {
        if let Some(Value::Object(def)) = defs.get_mut(name) {
            // k8s-openapi requires metadata (its Rust field is not optional); the API
            // server's schemas do not, and explain would print it as -required-.
            if let Some(Value::Array(required)) = def.get_mut("required") {
                required.retain(|r| r != "metadata");
            }
            if def
                .get("required")
                .and_then(Value::as_array)
                .is_some_and(Vec::is_empty)
            {
                def.remove("required");
            }
            def.insert(
                "x-kubernetes-group-version-kind".into(),
                json!([{"group": group, "kind": kind, "version": version}]),
            );
        }
    }
    for row in EXTENSIONS {
        if let Some(target) = member_mut(&mut defs, row.0, row.1) {
            for (key, value) in extension_members(row) {
                target.insert(key.into(), value);
            }
        }
    }
    for &(def, field, default) in KEY_DEFAULTS {
        if let Some(target) = member_mut(&mut defs, def, field) {
            target.insert("default".into(), json!(default));
        }
    }
    defs.insert(
        PATCH.into(),
        json!({
            "description": "Patch is provided to give a concrete name and type to the Kubernetes PATCH request body.",
            "type": "object",
        }),
    );
    Builtins { defs, kinds }
}

/// A definition (`field` empty) or one of its properties, ready for siblings: a bare
/// reference is wrapped in `allOf`, as the API server's v3 schemas do, because OpenAPI
/// 3.0 ignores the siblings of a `$ref`.
fn member_mut<'a>(
    defs: &'a mut Map<String, Value>,
    def: &str,
    field: &str,
) -> Option<&'a mut Map<String, Value>> {
    let d = defs.get_mut(def)?.as_object_mut()?;
    if field.is_empty() {
        return Some(d);
    }
    let prop = d.get_mut("properties")?.as_object_mut()?.get_mut(field)?;
    if let Some(reference) = prop.as_object_mut().and_then(|p| p.remove("$ref")) {
        prop["allOf"] = json!([{"$ref": reference}]);
    }
    prop.as_object_mut()
}

/// The definition name the API server gives a custom resource: the group's labels
/// reversed, then version and kind (`aws.k8s.services.sagemaker.v1alpha1.Pipeline`).
pub(crate) fn crd_definition_name(group: &str, version: &str, kind: &str) -> String {
    let reversed: Vec<&str> = group.split('.').rev().collect();
    format!("{}.{version}.{kind}", reversed.join("."))
}

const API_VERSION_DOC: &str = "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources";
const KIND_DOC: &str = "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds";
const METADATA_DOC: &str = "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

/// A custom resource version's schema as the API server publishes it: the CRD's
/// `openAPIV3Schema` (or, without one, an object that keeps unknown fields) with
/// `apiVersion`, `kind` and `metadata` declared and the kind's GVK.
pub(crate) fn crd_schema(crd: &Value, version: &str) -> Option<Value> {
    let spec = &crd["spec"];
    let group = spec["group"].as_str()?;
    let kind = spec["names"]["kind"].as_str()?;
    let served = spec["versions"]
        .as_array()?
        .iter()
        .find(|v| v["name"] == version)?;
    let mut schema = served["schema"]["openAPIV3Schema"].clone();
    if !schema.is_object() {
        schema = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
    }
    if !schema["properties"].is_object() {
        schema["properties"] = json!({});
    }
    schema["properties"]["apiVersion"] = json!({"description": API_VERSION_DOC, "type": "string"});
    schema["properties"]["kind"] = json!({"description": KIND_DOC, "type": "string"});
    schema["properties"]["metadata"] = json!({
        "allOf": [{"$ref": format!("{V3_REF}{OBJECT_META}")}],
        "description": METADATA_DOC,
    });
    schema["x-kubernetes-group-version-kind"] =
        json!([{"group": group, "kind": kind, "version": version}]);
    Some(schema)
}

/// `(group, version, kind)`.
type Gvk = (String, String, String);

/// A CRD's published schema per GVK, with the fingerprint it was built from.
type Registry = HashMap<Gvk, (String, Arc<Value>)>;

/// What a CRD last published per served version, fingerprinted by the CRD's uid and
/// resourceVersion. Process-wide because apply has no handle on the cluster; two
/// sandboxes serving one GVK with different schemas would share the last one seen.
fn crd_registry() -> &'static Mutex<Registry> {
    static CRDS: OnceLock<Mutex<Registry>> = OnceLock::new();
    CRDS.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Remembers the schemas a stored CRD publishes, so apply and validation can find them by
/// GVK. Cheap when nothing changed: discovery calls it for every CRD on every request.
pub(crate) fn register_crd(crd: &Value) {
    let spec = &crd["spec"];
    let (Some(group), Some(kind)) = (spec["group"].as_str(), spec["names"]["kind"].as_str()) else {
        return;
    };
    let fingerprint = format!(
        "{}/{}",
        crd["metadata"]["uid"].as_str().unwrap_or_default(),
        crd["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or_default()
    );
    let mut registry = crd_registry()
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    for version in spec["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v["name"].as_str())
    {
        let key = (group.to_string(), version.to_string(), kind.to_string());
        if registry.get(&key).is_some_and(|(f, _)| *f == fingerprint) {
            continue;
        }
        if let Some(schema) = crd_schema(crd, version) {
            registry.insert(key, (fingerprint.clone(), Arc::new(schema)));
        }
    }
}

/// The schema of one kind, for walking with [`Node`].
pub(crate) enum Root {
    Builtin(&'static Value),
    Crd(Arc<Value>),
    /// Neither built in nor registered: walked with the old heuristics.
    Unknown,
}

impl Root {
    /// The schema of `kind` at `api_version` (`v1`, `apps/v1`).
    pub(crate) fn of(api_version: &str, kind: &str) -> Root {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let b = builtins();
        if let Some(def) = b
            .definition_of(group, version, kind)
            .and_then(|name| b.defs.get(name))
        {
            return Root::Builtin(def);
        }
        let registry = crd_registry()
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        match registry.get(&(group.to_string(), version.to_string(), kind.to_string())) {
            Some((_, schema)) => Root::Crd(schema.clone()),
            None => Root::Unknown,
        }
    }

    /// The schema of an object, by its own apiVersion and kind.
    pub(crate) fn of_object(object: &Value) -> Root {
        match (object["apiVersion"].as_str(), object["kind"].as_str()) {
            (Some(api_version), Some(kind)) => Root::of(api_version, kind),
            _ => Root::Unknown,
        }
    }

    pub(crate) fn node(&self) -> Node<'_> {
        match self {
            Root::Builtin(v) => Node { schema: Some(v) },
            Root::Crd(v) => Node {
                schema: Some(v.as_ref()),
            },
            Root::Unknown => Node::UNKNOWN,
        }
    }
}

/// How a list's items are told apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ListKind<'a> {
    /// Replaced and owned whole.
    Atomic,
    /// Scalars owned one by one (`v:"x"`).
    Set,
    /// Objects owned one by one by these key fields (`k:{"name":"x"}`).
    Map(Vec<&'a str>),
}

/// A place in a schema; unknown where there is no schema (or it keeps unknown fields).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Node<'a> {
    schema: Option<&'a Value>,
}

impl<'a> Node<'a> {
    pub(crate) const UNKNOWN: Node<'static> = Node { schema: None };

    pub(crate) fn is_known(self) -> bool {
        self.schema.is_some()
    }

    /// The schema behind references and single-reference `allOf`s.
    fn resolved(self) -> Option<&'a Value> {
        let defs = &builtins().defs;
        let mut s = self.schema?;
        // Bounded: definitions do not alias each other, but a bad CRD could.
        for _ in 0..8 {
            if let Some(reference) = s.get("$ref").and_then(Value::as_str) {
                s = defs.get(reference.strip_prefix(V3_REF)?)?;
            } else if let Some([only]) = s.get("allOf").and_then(Value::as_array).map(Vec::as_slice)
            {
                s = only;
            } else {
                break;
            }
        }
        Some(s)
    }

    /// An extension (or `default`) on this place or on the definition it refers to; the
    /// place's own wins, as a field's `granular` over its type's `atomic`.
    pub(crate) fn ext(self, key: &str) -> Option<&'a Value> {
        self.schema?
            .get(key)
            .or_else(|| self.resolved().and_then(|r| r.get(key)))
    }

    /// A field's schema, and whether the schema declares it (rather than a free-form map
    /// entry): unknown for undeclared fields of a closed object.
    pub(crate) fn field(self, name: &str) -> (Node<'a>, bool) {
        let Some(s) = self.resolved() else {
            return (Node::UNKNOWN, false);
        };
        if let Some(p) = s.get("properties").and_then(|p| p.get(name)) {
            return (Node { schema: Some(p) }, true);
        }
        match s.get("additionalProperties") {
            Some(ap) if ap.is_object() => (Node { schema: Some(ap) }, false),
            _ => (Node::UNKNOWN, false),
        }
    }

    pub(crate) fn items(self) -> Node<'a> {
        Node {
            schema: self.resolved().and_then(|s| s.get("items")),
        }
    }

    /// Whether this map is owned and replaced whole.
    pub(crate) fn map_atomic(self) -> bool {
        self.ext("x-kubernetes-map-type").and_then(Value::as_str) == Some("atomic")
    }

    /// A known schema's list kind: `x-kubernetes-list-type`, else the patch strategy
    /// (merge with a key is a map, merge without one a set), else atomic — the rules of
    /// kube-openapi's schema conversion. `None` where the schema is unknown.
    pub(crate) fn list_kind(self) -> Option<ListKind<'a>> {
        self.schema?;
        let str_ext = |k: &str| self.ext(k).and_then(Value::as_str);
        Some(match str_ext("x-kubernetes-list-type") {
            Some("atomic") => ListKind::Atomic,
            Some("set") => ListKind::Set,
            Some("map") => ListKind::Map(
                self.ext("x-kubernetes-list-map-keys")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .collect(),
            ),
            _ => {
                let merge = str_ext("x-kubernetes-patch-strategy")
                    .is_some_and(|s| s.split(',').any(|p| p == "merge"));
                match (merge, str_ext("x-kubernetes-patch-merge-key")) {
                    (true, Some(key)) => ListKind::Map(vec![key]),
                    (true, None) => ListKind::Set,
                    _ => ListKind::Atomic,
                }
            }
        })
    }

    /// Whether this place keeps fields its schema does not declare.
    fn open(self) -> bool {
        let Some(s) = self.resolved() else {
            return true;
        };
        s.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true))
            || s.get("properties").is_none_or(|p| !p.is_object())
            || s.get("additionalProperties").is_some_and(Value::is_object)
    }
}

/// An undeclared field: where a decoder reports it (`spec.containers[0].bogus`) and where
/// server-side apply does (`.spec.containers[name="c"].bogus`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Undeclared {
    pub decoder_path: String,
    pub apply_path: String,
}

/// The fields of `value` its schema does not declare, in document order. Patch directives
/// (`$patch`, `$setElementOrder/…`, `$retainKeys`, …) are skipped when `directives`.
pub(crate) fn undeclared_fields(node: Node, value: &Value, directives: bool) -> Vec<Undeclared> {
    fn walk(
        node: Node,
        value: &Value,
        directives: bool,
        decoder: &mut String,
        apply: &mut String,
        out: &mut Vec<Undeclared>,
    ) {
        if !node.is_known() {
            return;
        }
        match value {
            Value::Object(m) => {
                let closed = !node.open();
                for (k, child) in m {
                    if directives && k.starts_with('$') {
                        continue;
                    }
                    let (d_len, a_len) = (decoder.len(), apply.len());
                    if !decoder.is_empty() {
                        decoder.push('.');
                    }
                    decoder.push_str(k);
                    apply.push('.');
                    apply.push_str(k);
                    let (child_node, declared) = node.field(k);
                    if closed && !declared {
                        out.push(Undeclared {
                            decoder_path: decoder.clone(),
                            apply_path: apply.clone(),
                        });
                    } else {
                        walk(child_node, child, directives, decoder, apply, out);
                    }
                    decoder.truncate(d_len);
                    apply.truncate(a_len);
                }
            }
            Value::Array(items) => {
                let kind = node.list_kind();
                let item_node = node.items();
                for (i, item) in items.iter().enumerate() {
                    let (d_len, a_len) = (decoder.len(), apply.len());
                    decoder.push_str(&format!("[{i}]"));
                    apply.push_str(&item_display(kind.as_ref(), item_node, item, i));
                    walk(item_node, item, directives, decoder, apply, out);
                    decoder.truncate(d_len);
                    apply.truncate(a_len);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(
        node,
        value,
        directives,
        &mut String::new(),
        &mut String::new(),
        &mut out,
    );
    out
}

/// How structured-merge-diff prints a list item in a path: `[name="c"]`, `[="x"]`, `[0]`.
fn item_display(kind: Option<&ListKind>, item_node: Node, item: &Value, index: usize) -> String {
    match kind {
        Some(ListKind::Map(keys)) => {
            let mut sorted: Vec<&str> = keys.clone();
            sorted.sort_unstable();
            let parts: Vec<String> = sorted
                .iter()
                .filter_map(|k| {
                    let v = item
                        .get(*k)
                        .or_else(|| item_node.field(k).0.ext("default"))?;
                    Some(format!("{k}={v}"))
                })
                .collect();
            format!("[{}]", parts.join(","))
        }
        Some(ListKind::Set) => format!("[={item}]"),
        _ => format!("[{index}]"),
    }
}

/// Every definition `roots` reach through references, the roots included.
pub(crate) fn closure<'a>(
    defs: &Map<String, Value>,
    roots: impl IntoIterator<Item = &'a Value>,
) -> BTreeSet<String> {
    fn refs(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                if let Some(r) = m.get("$ref").and_then(Value::as_str) {
                    if let Some(name) = r.strip_prefix(V3_REF) {
                        out.push(name.to_string());
                    }
                }
                m.values().for_each(|c| refs(c, out));
            }
            Value::Array(a) => a.iter().for_each(|c| refs(c, out)),
            _ => {}
        }
    }
    let mut seen = BTreeSet::new();
    let mut todo = Vec::new();
    for root in roots {
        refs(root, &mut todo);
    }
    while let Some(name) = todo.pop() {
        if seen.insert(name.clone()) {
            if let Some(def) = defs.get(&name) {
                refs(def, &mut todo);
            }
        }
    }
    seen
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn reference_swagger() -> Value {
        terrain_contracts::kubernetes_swagger()
    }

    /// `(definition, field) → extension members` of a table or a swagger.
    type Found = BTreeMap<(String, String), Vec<(String, Value)>>;

    fn table() -> Found {
        let mut out = Found::new();
        for row in EXTENSIONS {
            let members = extension_members(row)
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect();
            let previous = out.insert((row.0.to_string(), row.1.to_string()), members);
            assert!(previous.is_none(), "{}.{} is listed twice", row.0, row.1);
        }
        out
    }

    #[test]
    fn extensions_equal_the_reference_swagger() {
        let swagger = reference_swagger();
        let defs = &swagger["definitions"];
        let served: Vec<(&str, &str, &str)> = builtins()
            .kinds
            .iter()
            .map(|(g, v, k, _)| (*g, *v, *k))
            .collect();
        let mut roots = Vec::new();
        for (group, version, kind) in served {
            let gvk = json!({"group": group, "version": version, "kind": kind});
            let (name, _) = defs
                .as_object()
                .into_iter()
                .flatten()
                .find(|(_, d)| {
                    d["x-kubernetes-group-version-kind"]
                        .as_array()
                        .is_some_and(|l| l.contains(&gvk))
                })
                .unwrap_or_else(|| panic!("{gvk} is in the swagger"));
            roots.push(name.clone());
        }
        // Every definition the served kinds reach, by walking `#/definitions/` references.
        let mut reached = BTreeSet::new();
        let mut todo = roots;
        while let Some(name) = todo.pop() {
            if !reached.insert(name.clone()) {
                continue;
            }
            fn refs(v: &Value, out: &mut Vec<String>) {
                match v {
                    Value::Object(m) => {
                        if let Some(r) = m.get("$ref").and_then(Value::as_str) {
                            if let Some(n) = r.strip_prefix(V2_REF) {
                                out.push(n.to_string());
                            }
                        }
                        m.values().for_each(|c| refs(c, out));
                    }
                    Value::Array(a) => a.iter().for_each(|c| refs(c, out)),
                    _ => {}
                }
            }
            refs(&defs[&name], &mut todo);
        }
        let keys = [
            "x-kubernetes-list-type",
            "x-kubernetes-list-map-keys",
            "x-kubernetes-patch-merge-key",
            "x-kubernetes-patch-strategy",
            "x-kubernetes-map-type",
        ];
        let members = |v: &Value| -> Vec<(String, Value)> {
            keys.iter()
                .filter_map(|k| v.get(*k).map(|x| (k.to_string(), x.clone())))
                .collect()
        };
        let mut want = Found::new();
        for name in &reached {
            let def = &defs[name];
            let own = members(def);
            if !own.is_empty() {
                want.insert((name.clone(), String::new()), own);
            }
            for (field, prop) in def["properties"].as_object().into_iter().flatten() {
                let found = members(prop);
                if !found.is_empty() {
                    want.insert((name.clone(), field.clone()), found);
                }
            }
        }
        let have = table();
        let missing: Vec<_> = want
            .iter()
            .filter(|(k, v)| have.get(*k) != Some(v))
            .collect();
        let extra: Vec<_> = have
            .iter()
            .filter(|(k, v)| want.get(*k) != Some(v))
            .collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "EXTENSIONS differs from the swagger:\nmissing or different: {missing:#?}\nnot in the swagger: {extra:#?}"
        );
    }

    #[test]
    fn extensions_land_on_the_generated_schemas() {
        let defs = &builtins().defs;
        for row in EXTENSIONS {
            let def = &defs[row.0];
            assert!(def.is_object(), "k8s-openapi has {}", row.0);
            let target = if row.1.is_empty() {
                def
            } else {
                &def["properties"][row.1]
            };
            for (key, value) in extension_members(row) {
                assert_eq!(target.get(key), Some(&value), "{}.{} {key}", row.0, row.1);
            }
        }
        let port = &defs["io.k8s.api.core.v1.ContainerPort"]["properties"]["protocol"];
        assert_eq!(port["default"], "TCP");
        // A reference given siblings is wrapped, as OpenAPI 3.0 ignores a $ref's siblings.
        let selector = &defs["io.k8s.api.core.v1.ServiceSpec"]["properties"]["selector"];
        assert_eq!(selector["x-kubernetes-map-type"], "atomic");
    }

    #[test]
    fn every_served_builtin_has_a_schema_with_its_gvk() {
        let b = builtins();
        for rt in crate::k8s::discovery::builtin_types() {
            let name = b
                .definition_of(&rt.group, &rt.version, &rt.kind)
                .unwrap_or_else(|| panic!("{} {} has no schema", rt.api_version(), rt.kind));
            let def = &b.defs[name];
            assert_eq!(
                def["x-kubernetes-group-version-kind"],
                json!([{"group": rt.group, "kind": rt.kind, "version": rt.version}]),
                "{name}"
            );
            assert!(def["properties"]["metadata"].is_object(), "{name}");
            assert!(
                !def["required"]
                    .as_array()
                    .is_some_and(|r| r.contains(&json!("metadata"))),
                "{name} does not require metadata"
            );
        }
    }

    #[test]
    fn nodes_walk_lists_and_maps_by_their_extensions() {
        let pod = Root::of("v1", "Pod");
        let spec = pod.node().field("spec").0;
        let containers = spec.field("containers").0;
        assert_eq!(containers.list_kind(), Some(ListKind::Map(vec!["name"])));
        let container = containers.items();
        assert_eq!(
            container.field("ports").0.list_kind(),
            Some(ListKind::Map(vec!["containerPort", "protocol"]))
        );
        assert_eq!(
            container.field("args").0.list_kind(),
            Some(ListKind::Atomic)
        );
        let meta = pod.node().field("metadata").0;
        assert_eq!(meta.field("finalizers").0.list_kind(), Some(ListKind::Set));
        let (labels, declared) = meta.field("labels");
        assert!(declared);
        let (label, declared) = labels.field("app");
        assert!(
            label.is_known() && !declared,
            "a map entry is not a declared field"
        );
        assert!(spec.field("nodeSelector").0.map_atomic());
        let deploy = Root::of("apps/v1", "Deployment");
        assert!(deploy
            .node()
            .field("spec")
            .0
            .field("selector")
            .0
            .map_atomic());
        assert!(Root::of("example.com/v1", "Nothing")
            .node()
            .list_kind()
            .is_none());
    }

    #[test]
    fn a_crd_publishes_its_schema_with_metadata_and_gvk() {
        let crd = json!({
            "metadata": {"name": "widgets.example.com", "uid": "u1", "resourceVersion": "1"},
            "spec": {"group": "example.com", "names": {"kind": "Widget", "plural": "widgets"},
                "versions": [{"name": "v1", "served": true, "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {"spec": {"type": "object", "properties": {
                        "tags": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
                        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}}}]}
        });
        assert_eq!(
            crd_definition_name("sagemaker.services.k8s.aws", "v1alpha1", "Pipeline"),
            "aws.k8s.services.sagemaker.v1alpha1.Pipeline"
        );
        let schema = crd_schema(&crd, "v1").expect("schema");
        assert_eq!(
            schema["x-kubernetes-group-version-kind"],
            json!([{"group": "example.com", "kind": "Widget", "version": "v1"}])
        );
        assert_eq!(
            schema["properties"]["metadata"]["allOf"][0]["$ref"],
            format!("{V3_REF}{OBJECT_META}")
        );
        register_crd(&crd);
        let root = Root::of("example.com/v1", "Widget");
        let spec = root.node().field("spec").0;
        assert_eq!(spec.field("tags").0.list_kind(), Some(ListKind::Set));
        let meta = root.node().field("metadata").0;
        assert_eq!(
            meta.field("ownerReferences").0.list_kind(),
            Some(ListKind::Map(vec!["uid"]))
        );
        let found = undeclared_fields(
            root.node(),
            &json!({"metadata": {"name": "w", "bogus": 1}, "spec": {"tags": ["a"], "free": {"x": 1}, "nope": 2}}),
            false,
        );
        let paths: Vec<&str> = found.iter().map(|u| u.decoder_path.as_str()).collect();
        assert_eq!(paths, ["metadata.bogus", "spec.nope"]);
    }

    #[test]
    fn undeclared_fields_are_reported_in_both_path_styles() {
        let root = Root::of("v1", "Service");
        let found = undeclared_fields(
            root.node(),
            &json!({"spec": {"ports": [{"port": 80, "bogus": true}], "selector": {"any": "thing"}}}),
            false,
        );
        assert_eq!(
            found,
            [Undeclared {
                decoder_path: "spec.ports[0].bogus".into(),
                apply_path: ".spec.ports[port=80,protocol=\"TCP\"].bogus".into(),
            }]
        );
    }
}
