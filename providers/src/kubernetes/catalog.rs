//! The offline catalog of built-in Kubernetes kinds that `kubernetes_manifest` checks
//! objects against without a cluster: every group/version/kind a Kubernetes 1.31 API
//! server serves, its scope (namespaced or cluster-scoped), the name rule it applies to
//! `metadata.name`, the API versions removed since 1.16 (so `batch/v1beta1 CronJob`
//! says when it went and what replaced it), the ACK SageMaker kinds terrain knows, and
//! a strict decoder that finds unknown fields and wrong types in a built-in object.
//!
//! Kinds and scopes come from the k8s-openapi crate's resource types where it has them
//! (its `Resource` trait carries the group, version, kind and scope), and by hand for
//! the few 1.31 versions the crate's oldest API (1.33) no longer has (flowcontrol
//! `v1beta3`, the 1.31 alpha versions); a unit test proves the whole set equal to the
//! Kubernetes 1.31 OpenAPI document in `contracts/kubernetes/`. Field checks
//! decode GA versions into the crate's 1.33 types: those only add fields to 1.31's, so
//! a field new in 1.32–1.33 passes here and is left to the server. Pre-release
//! versions (alpha, beta) changed shape between 1.31 and 1.33, so only their kind and
//! scope are checked.

use std::cell::RefCell;
use std::fmt;

use serde::de::{self, DeserializeOwned, DeserializeSeed, IntoDeserializer, Visitor};
use serde_json::Value;

use crate::protocol::is_unknown;

/// The Kubernetes minor version whose served kinds [`BUILT_IN`] lists.
pub const KUBERNETES_VERSION: &str = "1.31";

/// Whether objects of a kind live in a namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Namespaced,
    Cluster,
}

/// The scope of a k8s-openapi resource type, as a value.
trait ScopeOf {
    const SCOPE: Scope;
}

impl ScopeOf for k8s_openapi::NamespaceResourceScope {
    const SCOPE: Scope = Scope::Namespaced;
}

impl ScopeOf for k8s_openapi::ClusterResourceScope {
    const SCOPE: Scope = Scope::Cluster;
}

/// A problem with one field of an object, at a JSON path inside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldProblem {
    pub path: Vec<Seg>,
    pub message: String,
}

impl FieldProblem {
    /// A problem at `path`.
    pub fn new(path: Vec<Seg>, message: impl Into<String>) -> Self {
        Self {
            path,
            message: message.into(),
        }
    }
}

/// `spec.replicas: message`, or the message alone at the object itself.
impl fmt::Display for FieldProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", display_path(&self.path), self.message)
        }
    }
}

/// One step of a JSON path: a mapping key or a list index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seg {
    Key(String),
    Index(usize),
}

/// `spec.template.spec.containers[0].image`; keys that are not plain words (label keys
/// such as `app.kubernetes.io/name`) are bracketed: `metadata.labels["a.b/c"]`.
pub fn display_path(path: &[Seg]) -> String {
    let mut out = String::new();
    for seg in path {
        match seg {
            Seg::Index(i) => out.push_str(&format!("[{i}]")),
            Seg::Key(k)
                if !k.is_empty()
                    && k.chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '$') =>
            {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            Seg::Key(k) => out.push_str(&format!("[{k:?}]")),
        }
    }
    out
}

/// The value at `path` inside `value`.
pub fn value_at<'v>(value: &'v Value, path: &[Seg]) -> Option<&'v Value> {
    path.iter().try_fold(value, |v, seg| match seg {
        Seg::Key(k) => v.get(k.as_str()),
        Seg::Index(i) => v.get(*i),
    })
}

/// Removes the value at `path` inside `value` (a key from its mapping, an item from
/// its list); false when there is none.
fn remove_at(value: &mut Value, path: &[Seg]) -> bool {
    let Some((last, parent)) = path.split_last() else {
        return false;
    };
    let parent = parent.iter().try_fold(value, |v, seg| match seg {
        Seg::Key(k) => v.get_mut(k.as_str()),
        Seg::Index(i) => v.get_mut(*i),
    });
    match (parent, last) {
        (Some(Value::Object(map)), Seg::Key(k)) => map.shift_remove(k).is_some(),
        (Some(Value::Array(items)), Seg::Index(i)) if *i < items.len() => {
            items.remove(*i);
            true
        }
        _ => false,
    }
}

/// How Kubernetes checks the `metadata.name` of a kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameRule {
    /// A DNS-1123 subdomain, at most `max` characters (253 for most kinds).
    Subdomain { max: usize },
    /// A DNS-1123 label (Namespaces).
    Label,
    /// A DNS-1035 label, starting with a letter (Services).
    Dns1035Label,
    /// Any path segment: no `/` or `%`, not `.` or `..` (RBAC kinds, certificate
    /// requests, IP addresses, APIServices).
    PathSegment,
}

/// A kind the API server serves without a CRD.
#[derive(Debug, Clone, Copy)]
pub struct BuiltIn {
    /// The API group; empty for the core group.
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub scope: Scope,
    /// Decodes an object strictly; `None` for kinds checked by kind and scope only.
    fields: Option<fn(&Value) -> Strictly>,
}

impl BuiltIn {
    /// `apps/v1`, or `v1` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// Whether unknown fields and wrong types are checked for this kind (GA versions).
    pub fn checks_fields(&self) -> bool {
        self.fields.is_some()
    }

    /// The rule this kind's `metadata.name` follows (`k8s.io/kubernetes/pkg/apis/*/validation`).
    pub fn name_rule(&self) -> NameRule {
        match (self.group, self.kind) {
            ("", "Namespace") => NameRule::Label,
            ("", "Service") => NameRule::Dns1035Label,
            // The Job controller puts the name in the `batch.kubernetes.io/job-name` label
            // of its pods, and label values are at most 63 characters.
            ("batch", "Job") => NameRule::Subdomain { max: 63 },
            // A CronJob's Jobs are named `<name>-<11 characters>`.
            ("batch", "CronJob") => NameRule::Subdomain { max: 52 },
            ("storage.k8s.io", "CSIDriver") => NameRule::Subdomain { max: 63 },
            ("rbac.authorization.k8s.io", _)
            | ("certificates.k8s.io", _)
            | ("networking.k8s.io", "IPAddress")
            | ("apiregistration.k8s.io", _)
            | ("internal.apiserver.k8s.io", _)
            | ("authentication.k8s.io", _)
            | ("authorization.k8s.io", _) => NameRule::PathSegment,
            _ => NameRule::Subdomain { max: 253 },
        }
    }

    /// The field problems of `object` (an object of this kind): unknown fields, with
    /// the likely meant name, and the first wrong type. `status` is not checked, and
    /// values not known until apply stand for whatever type the field wants.
    pub fn check_fields(&self, object: &Value) -> Vec<FieldProblem> {
        let Some(decode) = self.fields else {
            return Vec::new();
        };
        let mut working = object.clone();
        if let Some(map) = working.as_object_mut() {
            map.shift_remove("status");
        }
        // A decode stops at its first wrong type; one on a value not known yet (the
        // marker is a string wherever it stands) only means "not known", so that value
        // leaves and the decode runs again.
        for _ in 0..64 {
            let outcome = decode(&working);
            match outcome.error {
                Some(e)
                    if value_at(&working, &e.path).is_some_and(is_unknown)
                        && remove_at(&mut working, &e.path) => {}
                error => {
                    let mut out = outcome.unknown;
                    out.extend(error);
                    return out;
                }
            }
        }
        Vec::new()
    }
}

/// The served kind of a k8s-openapi type, with strict field checks.
macro_rules! typed {
    ($t:ty) => {
        BuiltIn {
            group: <$t as k8s_openapi::Resource>::GROUP,
            version: <$t as k8s_openapi::Resource>::VERSION,
            kind: <$t as k8s_openapi::Resource>::KIND,
            scope: <<$t as k8s_openapi::Resource>::Scope as ScopeOf>::SCOPE,
            fields: Some(strictly::<$t> as fn(&Value) -> Strictly),
        }
    };
}

/// The served kind of a k8s-openapi type whose shape moved since 1.31 (pre-release
/// versions): kind and scope only.
macro_rules! served {
    ($t:ty) => {
        BuiltIn {
            group: <$t as k8s_openapi::Resource>::GROUP,
            version: <$t as k8s_openapi::Resource>::VERSION,
            kind: <$t as k8s_openapi::Resource>::KIND,
            scope: <<$t as k8s_openapi::Resource>::Scope as ScopeOf>::SCOPE,
            fields: None,
        }
    };
}

/// A 1.31 kind k8s-openapi no longer has.
const fn by_hand(
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    scope: Scope,
) -> BuiltIn {
    BuiltIn {
        group,
        version,
        kind,
        scope,
        fields: None,
    }
}

/// Every kind a Kubernetes 1.31 API server serves (alpha versions included: a cluster
/// may enable them), proven against the 1.31 OpenAPI document by a test.
pub static BUILT_IN: &[BuiltIn] = &[
    typed!(k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration),
    typed!(k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy),
    typed!(k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicyBinding),
    typed!(k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration),
    by_hand("admissionregistration.k8s.io", "v1alpha1", "ValidatingAdmissionPolicy", Scope::Cluster),
    by_hand("admissionregistration.k8s.io", "v1alpha1", "ValidatingAdmissionPolicyBinding", Scope::Cluster),
    served!(k8s_openapi::api::admissionregistration::v1beta1::ValidatingAdmissionPolicy),
    served!(k8s_openapi::api::admissionregistration::v1beta1::ValidatingAdmissionPolicyBinding),
    typed!(k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition),
    typed!(k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService),
    typed!(k8s_openapi::api::apps::v1::ControllerRevision),
    typed!(k8s_openapi::api::apps::v1::DaemonSet),
    typed!(k8s_openapi::api::apps::v1::Deployment),
    typed!(k8s_openapi::api::apps::v1::ReplicaSet),
    typed!(k8s_openapi::api::apps::v1::StatefulSet),
    typed!(k8s_openapi::api::authentication::v1::SelfSubjectReview),
    typed!(k8s_openapi::api::authentication::v1::TokenReview),
    by_hand("authentication.k8s.io", "v1alpha1", "SelfSubjectReview", Scope::Cluster),
    by_hand("authentication.k8s.io", "v1beta1", "SelfSubjectReview", Scope::Cluster),
    typed!(k8s_openapi::api::authorization::v1::LocalSubjectAccessReview),
    typed!(k8s_openapi::api::authorization::v1::SelfSubjectAccessReview),
    typed!(k8s_openapi::api::authorization::v1::SelfSubjectRulesReview),
    typed!(k8s_openapi::api::authorization::v1::SubjectAccessReview),
    typed!(k8s_openapi::api::autoscaling::v1::HorizontalPodAutoscaler),
    typed!(k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler),
    typed!(k8s_openapi::api::batch::v1::CronJob),
    typed!(k8s_openapi::api::batch::v1::Job),
    typed!(k8s_openapi::api::certificates::v1::CertificateSigningRequest),
    served!(k8s_openapi::api::certificates::v1alpha1::ClusterTrustBundle),
    typed!(k8s_openapi::api::coordination::v1::Lease),
    by_hand("coordination.k8s.io", "v1alpha1", "LeaseCandidate", Scope::Namespaced),
    typed!(k8s_openapi::api::discovery::v1::EndpointSlice),
    typed!(k8s_openapi::api::events::v1::Event),
    typed!(k8s_openapi::api::flowcontrol::v1::FlowSchema),
    typed!(k8s_openapi::api::flowcontrol::v1::PriorityLevelConfiguration),
    by_hand("flowcontrol.apiserver.k8s.io", "v1beta3", "FlowSchema", Scope::Cluster),
    by_hand("flowcontrol.apiserver.k8s.io", "v1beta3", "PriorityLevelConfiguration", Scope::Cluster),
    served!(k8s_openapi::api::apiserverinternal::v1alpha1::StorageVersion),
    typed!(k8s_openapi::api::networking::v1::Ingress),
    typed!(k8s_openapi::api::networking::v1::IngressClass),
    typed!(k8s_openapi::api::networking::v1::NetworkPolicy),
    served!(k8s_openapi::api::networking::v1beta1::IPAddress),
    served!(k8s_openapi::api::networking::v1beta1::ServiceCIDR),
    typed!(k8s_openapi::api::node::v1::RuntimeClass),
    typed!(k8s_openapi::api::policy::v1::PodDisruptionBudget),
    typed!(k8s_openapi::api::rbac::v1::ClusterRole),
    typed!(k8s_openapi::api::rbac::v1::ClusterRoleBinding),
    typed!(k8s_openapi::api::rbac::v1::Role),
    typed!(k8s_openapi::api::rbac::v1::RoleBinding),
    served!(k8s_openapi::api::resource::v1alpha3::DeviceClass),
    by_hand("resource.k8s.io", "v1alpha3", "PodSchedulingContext", Scope::Namespaced),
    served!(k8s_openapi::api::resource::v1alpha3::ResourceClaim),
    served!(k8s_openapi::api::resource::v1alpha3::ResourceClaimTemplate),
    served!(k8s_openapi::api::resource::v1alpha3::ResourceSlice),
    typed!(k8s_openapi::api::scheduling::v1::PriorityClass),
    typed!(k8s_openapi::api::storage::v1::CSIDriver),
    typed!(k8s_openapi::api::storage::v1::CSINode),
    typed!(k8s_openapi::api::storage::v1::CSIStorageCapacity),
    typed!(k8s_openapi::api::storage::v1::StorageClass),
    typed!(k8s_openapi::api::storage::v1::VolumeAttachment),
    served!(k8s_openapi::api::storage::v1alpha1::VolumeAttributesClass),
    served!(k8s_openapi::api::storage::v1beta1::VolumeAttributesClass),
    served!(k8s_openapi::api::storagemigration::v1alpha1::StorageVersionMigration),
    typed!(k8s_openapi::api::core::v1::Binding),
    typed!(k8s_openapi::api::core::v1::ComponentStatus),
    typed!(k8s_openapi::api::core::v1::ConfigMap),
    typed!(k8s_openapi::api::core::v1::Endpoints),
    typed!(k8s_openapi::api::core::v1::Event),
    typed!(k8s_openapi::api::core::v1::LimitRange),
    typed!(k8s_openapi::api::core::v1::Namespace),
    typed!(k8s_openapi::api::core::v1::Node),
    typed!(k8s_openapi::api::core::v1::PersistentVolume),
    typed!(k8s_openapi::api::core::v1::PersistentVolumeClaim),
    typed!(k8s_openapi::api::core::v1::Pod),
    typed!(k8s_openapi::api::core::v1::PodTemplate),
    typed!(k8s_openapi::api::core::v1::ReplicationController),
    typed!(k8s_openapi::api::core::v1::ResourceQuota),
    typed!(k8s_openapi::api::core::v1::Secret),
    typed!(k8s_openapi::api::core::v1::Service),
    typed!(k8s_openapi::api::core::v1::ServiceAccount),
];

/// API versions removed from Kubernetes since 1.16: group, version, kinds, the release
/// that removed them (the Kubernetes deprecated API migration guide).
const REMOVED: &[(&str, &str, &[&str], &str)] = &[
    (
        "extensions",
        "v1beta1",
        &[
            "Deployment",
            "DaemonSet",
            "ReplicaSet",
            "NetworkPolicy",
            "PodSecurityPolicy",
        ],
        "1.16",
    ),
    ("extensions", "v1beta1", &["Ingress"], "1.22"),
    (
        "apps",
        "v1beta1",
        &["Deployment", "StatefulSet", "ControllerRevision"],
        "1.16",
    ),
    (
        "apps",
        "v1beta2",
        &[
            "Deployment",
            "StatefulSet",
            "DaemonSet",
            "ReplicaSet",
            "ControllerRevision",
        ],
        "1.16",
    ),
    (
        "networking.k8s.io",
        "v1beta1",
        &["Ingress", "IngressClass"],
        "1.22",
    ),
    (
        "apiextensions.k8s.io",
        "v1beta1",
        &["CustomResourceDefinition"],
        "1.22",
    ),
    (
        "admissionregistration.k8s.io",
        "v1beta1",
        &[
            "MutatingWebhookConfiguration",
            "ValidatingWebhookConfiguration",
        ],
        "1.22",
    ),
    ("apiregistration.k8s.io", "v1beta1", &["APIService"], "1.22"),
    ("authentication.k8s.io", "v1beta1", &["TokenReview"], "1.22"),
    (
        "authorization.k8s.io",
        "v1beta1",
        &[
            "SubjectAccessReview",
            "LocalSubjectAccessReview",
            "SelfSubjectAccessReview",
            "SelfSubjectRulesReview",
        ],
        "1.22",
    ),
    (
        "certificates.k8s.io",
        "v1beta1",
        &["CertificateSigningRequest"],
        "1.22",
    ),
    ("coordination.k8s.io", "v1beta1", &["Lease"], "1.22"),
    (
        "rbac.authorization.k8s.io",
        "v1beta1",
        &["ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"],
        "1.22",
    ),
    ("scheduling.k8s.io", "v1beta1", &["PriorityClass"], "1.22"),
    (
        "storage.k8s.io",
        "v1beta1",
        &["CSIDriver", "CSINode", "StorageClass", "VolumeAttachment"],
        "1.22",
    ),
    ("batch", "v1beta1", &["CronJob"], "1.25"),
    ("discovery.k8s.io", "v1beta1", &["EndpointSlice"], "1.25"),
    ("events.k8s.io", "v1beta1", &["Event"], "1.25"),
    (
        "autoscaling",
        "v2beta1",
        &["HorizontalPodAutoscaler"],
        "1.25",
    ),
    (
        "policy",
        "v1beta1",
        &["PodDisruptionBudget", "PodSecurityPolicy"],
        "1.25",
    ),
    ("node.k8s.io", "v1beta1", &["RuntimeClass"], "1.25"),
    (
        "autoscaling",
        "v2beta2",
        &["HorizontalPodAutoscaler"],
        "1.26",
    ),
    (
        "flowcontrol.apiserver.k8s.io",
        "v1beta1",
        &["FlowSchema", "PriorityLevelConfiguration"],
        "1.26",
    ),
    ("storage.k8s.io", "v1beta1", &["CSIStorageCapacity"], "1.27"),
    (
        "flowcontrol.apiserver.k8s.io",
        "v1beta2",
        &["FlowSchema", "PriorityLevelConfiguration"],
        "1.29",
    ),
];

/// The ACK SageMaker controller's group and version.
pub const ACK_SAGEMAKER: (&str, &str) = ("sagemaker.services.k8s.aws", "v1alpha1");

/// The ACK SageMaker kinds terrain knows (`sagemaker_pipeline` and
/// `sagemaker_pipeline_execution` submit them), with their scope; proven against the
/// controller's CRDs in `contracts/ack-sagemaker/` by a test.
pub const ACK_SAGEMAKER_KINDS: &[(&str, Scope)] = &[
    ("Pipeline", Scope::Namespaced),
    ("PipelineExecution", Scope::Namespaced),
];

/// The scope of an ACK SageMaker kind terrain knows.
pub fn ack_sagemaker(group: &str, version: &str, kind: &str) -> Option<Scope> {
    if (group, version) != ACK_SAGEMAKER {
        return None;
    }
    ACK_SAGEMAKER_KINDS
        .iter()
        .find(|(k, _)| *k == kind)
        .map(|(_, scope)| *scope)
}

/// `(group, version)` of an apiVersion (`apps/v1`, or `v1` for the core group); `None`
/// when it is not of that shape.
pub fn split_api_version(api_version: &str) -> Option<(&str, &str)> {
    let (group, version) = match api_version.split_once('/') {
        Some((group, version)) => (group, version),
        None => ("", api_version),
    };
    let ok = !version.is_empty()
        && !version.contains('/')
        && (api_version.contains('/') != group.is_empty());
    ok.then_some((group, version))
}

/// Whether `group` is one of Kubernetes' own API groups (served now or in the past):
/// its kinds are known here, so an unknown one is a mistake on any cluster.
pub fn is_builtin_group(group: &str) -> bool {
    BUILT_IN.iter().any(|b| b.group == group) || REMOVED.iter().any(|r| r.0 == group)
}

/// What the catalog says about an apiVersion and kind.
#[derive(Debug, Clone)]
pub enum Lookup {
    /// A kind Kubernetes serves.
    BuiltIn(&'static BuiltIn),
    /// Nothing serves it, and the message says why and what to write instead.
    Refused(String),
    /// Not a built-in group: a custom resource, served once its CRD is.
    Custom,
}

/// Looks up `kind` in `api_version`.
pub fn lookup(api_version: &str, kind: &str) -> Lookup {
    let Some((group, version)) = split_api_version(api_version) else {
        return Lookup::Refused(format!(
            "apiVersion {api_version:?} is not VERSION or GROUP/VERSION (e.g. v1, apps/v1)"
        ));
    };
    if let Some(b) = BUILT_IN
        .iter()
        .find(|b| b.group == group && b.version == version && b.kind == kind)
    {
        return Lookup::BuiltIn(b);
    }
    if let Some((_, _, _, release)) = REMOVED
        .iter()
        .find(|(g, v, kinds, _)| *g == group && *v == version && kinds.contains(&kind))
    {
        return Lookup::Refused(format!(
            "{api_version} {kind} was removed in Kubernetes {release}; {}",
            successor(kind, group)
        ));
    }
    if !is_builtin_group(group) {
        if group.contains('.') {
            return Lookup::Custom;
        }
        let mut message = format!(
            "no API group {group:?}: it is not one of Kubernetes' own groups, and a CRD's group contains a dot"
        );
        if let Some(b) = serving(kind).first() {
            message.push_str(&format!("; {kind} is {}", b.api_version()));
        }
        return Lookup::Refused(message);
    }
    let group_name = if group.is_empty() {
        "the core group".to_string()
    } else {
        group.to_string()
    };
    let same_group: Vec<&BuiltIn> = serving(kind)
        .into_iter()
        .filter(|b| b.group == group)
        .collect();
    if !same_group.is_empty() {
        let versions: Vec<&str> = same_group.iter().map(|b| b.version).collect();
        let best = same_group
            .iter()
            .find(|b| is_ga(b.version))
            .unwrap_or(&same_group[0]);
        return Lookup::Refused(format!(
            "no Kubernetes version serves {api_version} {kind}; {group_name} serves {kind} as {} (use {})",
            or_list(&versions),
            best.api_version()
        ));
    }
    let elsewhere = serving(kind);
    if let Some(b) = elsewhere
        .iter()
        .find(|b| is_ga(b.version))
        .or(elsewhere.first())
    {
        return Lookup::Refused(format!(
            "{group_name} has no kind {kind}; {kind} is {} (apiVersion: {})",
            b.api_version(),
            b.api_version()
        ));
    }
    let version_served = BUILT_IN
        .iter()
        .any(|b| b.group == group && b.version == version);
    let mut message = if version_served {
        format!("{api_version} has no kind {kind}")
    } else {
        let versions: Vec<&str> = {
            let mut v: Vec<&str> = BUILT_IN
                .iter()
                .filter(|b| b.group == group)
                .map(|b| b.version)
                .collect();
            v.dedup();
            v
        };
        format!(
            "no Kubernetes version serves {api_version} ({group_name} serves {})",
            or_list(&versions)
        )
    };
    let kinds: Vec<&str> = {
        // Kinds of this group first: a misspelt ConfigMap is more likely than a kind
        // of another group.
        let mut k: Vec<&str> = BUILT_IN
            .iter()
            .filter(|b| b.group == group)
            .map(|b| b.kind)
            .collect();
        k.extend(BUILT_IN.iter().filter(|b| b.group != group).map(|b| b.kind));
        k
    };
    if let Some(meant) = did_you_mean(kind, &kinds) {
        let b = serving(meant);
        let at = b
            .iter()
            .find(|b| b.group == group && is_ga(b.version))
            .or(b.iter().find(|b| is_ga(b.version)))
            .or(b.first());
        match at {
            Some(b) => message.push_str(&format!(" (did you mean {meant}, {}?)", b.api_version())),
            None => message.push_str(&format!(" (did you mean {meant}?)")),
        }
    }
    Lookup::Refused(message)
}

/// "use apps/v1", or that the kind has no successor.
fn successor(kind: &str, group: &str) -> String {
    let all = serving(kind);
    let best = all
        .iter()
        .find(|b| b.group == group && is_ga(b.version))
        .or(all.iter().find(|b| is_ga(b.version)))
        .or(all.first());
    match best {
        Some(b) => format!("use {}", b.api_version()),
        None => format!("Kubernetes {KUBERNETES_VERSION} has no {kind}"),
    }
}

/// The built-in entries serving `kind`, in catalog order.
fn serving(kind: &str) -> Vec<&'static BuiltIn> {
    BUILT_IN.iter().filter(|b| b.kind == kind).collect()
}

/// Whether a version is GA (`v1`, `v2`), not alpha or beta.
fn is_ga(version: &str) -> bool {
    version
        .strip_prefix('v')
        .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
}

/// "a", "a or b", "a, b or c".
fn or_list(items: &[&str]) -> String {
    match items.split_last() {
        None => String::new(),
        Some((last, [])) => (*last).to_string(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
    }
}

/// Edit distance over chars counting a swap of neighbours as one edit (`sepc` is one
/// from `spec`); names are short, so the full table is cheap.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

/// The candidate a mistyped `input` most likely meant: the same name in another case,
/// or the closest within a third of its length (at least 1, at most 3 edits).
pub fn did_you_mean<'c>(input: &str, candidates: &[&'c str]) -> Option<&'c str> {
    let needle = input.to_ascii_lowercase();
    if needle.is_empty() {
        return None;
    }
    if let Some(c) = candidates.iter().find(|c| c.to_ascii_lowercase() == needle) {
        return Some(c);
    }
    let limit = (needle.chars().count() / 3).clamp(1, 3);
    let mut best: Option<(usize, &'c str)> = None;
    for c in candidates {
        let d = edit_distance(&needle, &c.to_ascii_lowercase());
        if d <= limit && best.is_none_or(|(bd, _)| d < bd) {
            best = Some((d, c));
        }
    }
    best.map(|(_, c)| c)
}

/// Checks `name` against a kind's rule; the error says what the rule is.
pub fn check_name(rule: NameRule, name: &str) -> Result<(), String> {
    match rule {
        NameRule::Label => dns_label(name, false),
        NameRule::Dns1035Label => dns_label(name, true),
        NameRule::Subdomain { max } => {
            if name.len() > max {
                return Err(format!(
                    "{} is longer than {max} characters",
                    quote_short(name)
                ));
            }
            let ok = !name.is_empty()
                && name.split('.').all(|part| {
                    !part.is_empty()
                        && part
                            .chars()
                            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                        && !part.starts_with('-')
                        && !part.ends_with('-')
                });
            if ok {
                Ok(())
            } else {
                Err(format!("{} is not a valid DNS-1123 subdomain: use lowercase letters, digits, '-' and '.', starting and ending with a letter or digit", quote_short(name)))
            }
        }
        NameRule::PathSegment => {
            if name == "." || name == ".." {
                Err(format!("{name:?} is not a valid name"))
            } else if name.contains('/') || name.contains('%') {
                Err(format!("{} may not contain '/' or '%'", quote_short(name)))
            } else {
                Ok(())
            }
        }
    }
}

fn dns_label(name: &str, letter_first: bool) -> Result<(), String> {
    if name.len() > 63 {
        return Err(format!(
            "{} is longer than 63 characters",
            quote_short(name)
        ));
    }
    let chars_ok = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    let first_ok = name.chars().next().is_some_and(|c| {
        if letter_first {
            c.is_ascii_lowercase()
        } else {
            c.is_ascii_lowercase() || c.is_ascii_digit()
        }
    });
    let last_ok = !name.ends_with('-');
    if chars_ok && first_ok && last_ok {
        Ok(())
    } else if letter_first {
        Err(format!("{} is not a valid DNS-1035 label: use lowercase letters, digits and '-', starting with a letter and ending with a letter or digit", quote_short(name)))
    } else {
        Err(format!("{} is not a valid DNS-1123 label: use lowercase letters, digits and '-', starting and ending with a letter or digit", quote_short(name)))
    }
}

/// `"value"`, cut to 64 characters: messages never carry a whole long value.
pub fn quote_short(value: &str) -> String {
    if value.chars().count() <= 64 {
        format!("{value:?}")
    } else {
        let cut: String = value.chars().take(61).collect();
        format!("{:?}", format!("{cut}..."))
    }
}

// ---------------------------------------------------------------------------------
// Strict decoding of built-in objects
// ---------------------------------------------------------------------------------

/// What a strict decode found: every unknown field met before it stopped, and the
/// wrong type that stopped it.
struct Strictly {
    unknown: Vec<FieldProblem>,
    error: Option<FieldProblem>,
}

/// Decodes `object` as a `T`, reporting the fields `T` does not have.
///
/// k8s-openapi's types skip unknown fields, as the API server's lenient decoder does;
/// the server's strict field validation (what `kubectl apply` asks for) refuses them,
/// so this decoder compares each object's keys with the fields its type declares.
fn strictly<T: DeserializeOwned>(object: &Value) -> Strictly {
    let unknown = RefCell::new(Vec::new());
    let result = T::deserialize(Strict {
        value: object,
        path: Vec::new(),
        unknown: &unknown,
    });
    Strictly {
        unknown: unknown.into_inner(),
        error: result
            .err()
            .map(|e| FieldProblem::new(e.path.unwrap_or_default(), shorten(&e.message))),
    }
}

/// A decode message without long quoted values.
fn shorten(message: &str) -> String {
    if message.chars().count() <= 160 {
        return message.to_string();
    }
    let cut: String = message.chars().take(157).collect();
    format!("{cut}...")
}

/// A decode error and where it happened.
#[derive(Debug)]
struct DeError {
    path: Option<Vec<Seg>>,
    message: String,
}

impl DeError {
    /// Places the error at `path` unless a deeper value placed it already.
    fn at(mut self, path: &[Seg]) -> Self {
        if self.path.is_none() {
            self.path = Some(path.to_vec());
        }
        self
    }
}

impl fmt::Display for DeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for DeError {}

impl de::Error for DeError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Self {
            path: None,
            message: msg.to_string(),
        }
    }
}

/// A deserializer over a borrowed JSON value that keeps its path and records the
/// keys a struct does not declare.
struct Strict<'a, 'u> {
    value: &'a Value,
    path: Vec<Seg>,
    unknown: &'u RefCell<Vec<FieldProblem>>,
}

impl<'a, 'u> Strict<'a, 'u> {
    fn child(&self, value: &'a Value, seg: Seg) -> Self {
        let mut path = self.path.clone();
        path.push(seg);
        Self {
            value,
            path,
            unknown: self.unknown,
        }
    }
}

impl<'de, 'a, 'u> de::Deserializer<'de> for Strict<'a, 'u> {
    type Error = DeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        let at = self.path.clone();
        let result = match self.value {
            Value::Null => visitor.visit_unit(),
            Value::Bool(b) => visitor.visit_bool(*b),
            Value::Number(n) => {
                if let Some(u) = n.as_u64() {
                    visitor.visit_u64(u)
                } else if let Some(i) = n.as_i64() {
                    visitor.visit_i64(i)
                } else {
                    visitor.visit_f64(n.as_f64().unwrap_or(f64::NAN))
                }
            }
            Value::String(s) => visitor.visit_str(s),
            Value::Array(items) => visitor.visit_seq(SeqAccess {
                items: items.iter().enumerate(),
                parent: self,
            }),
            Value::Object(map) => visitor.visit_map(MapAccess {
                entries: map.iter(),
                pending: None,
                fields: None,
                parent: self,
            }),
        };
        result.map_err(|e| e.at(&at))
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        let at = self.path.clone();
        match self.value {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
        .map_err(|e| e.at(&at))
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        let at = self.path.clone();
        visitor.visit_newtype_struct(self).map_err(|e| e.at(&at))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        match self.value {
            Value::Object(map) => {
                let at = self.path.clone();
                visitor
                    .visit_map(MapAccess {
                        entries: map.iter(),
                        pending: None,
                        fields: Some(fields),
                        parent: self,
                    })
                    .map_err(|e| e.at(&at))
            }
            _ => self.deserialize_any(visitor),
        }
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        visitor.visit_unit()
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct seq tuple tuple_struct map enum identifier
    }
}

struct SeqAccess<'a, 'u> {
    items: std::iter::Enumerate<std::slice::Iter<'a, Value>>,
    parent: Strict<'a, 'u>,
}

impl<'de, 'a, 'u> de::SeqAccess<'de> for SeqAccess<'a, 'u> {
    type Error = DeError;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, DeError> {
        match self.items.next() {
            Some((i, item)) => seed
                .deserialize(self.parent.child(item, Seg::Index(i)))
                .map(Some),
            None => Ok(None),
        }
    }
}

struct MapAccess<'a, 'u> {
    entries: serde_json::map::Iter<'a>,
    pending: Option<(&'a String, &'a Value)>,
    /// The fields of the struct being decoded; `None` for a map (any key).
    fields: Option<&'static [&'static str]>,
    parent: Strict<'a, 'u>,
}

impl<'de, 'a, 'u> de::MapAccess<'de> for MapAccess<'a, 'u> {
    type Error = DeError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, DeError> {
        match self.entries.next() {
            Some((key, value)) => {
                self.pending = Some((key, value));
                if let Some(fields) = self.fields.filter(|f| !f.contains(&key.as_str())) {
                    let mut path = self.parent.path.clone();
                    path.push(Seg::Key(key.clone()));
                    let hint = did_you_mean(key, fields)
                        .map(|f| format!(" (did you mean `{f}`?)"))
                        .unwrap_or_default();
                    self.parent
                        .unknown
                        .borrow_mut()
                        .push(FieldProblem::new(path, format!("unknown field{hint}")));
                }
                let key: de::value::StrDeserializer<'_, DeError> = key.as_str().into_deserializer();
                seed.deserialize(key).map(Some)
            }
            None => Ok(None),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, DeError> {
        match self.pending.take() {
            Some((key, value)) => seed.deserialize(self.parent.child(value, Seg::Key(key.clone()))),
            None => Err(de::Error::custom("a value was asked for before its key")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::BTreeSet;

    /// The kinds the 1.31 OpenAPI document serves: every group/version/kind a
    /// non-watch operation of a resource path (not a subresource) names, namespaced
    /// when its path holds `/namespaces/{namespace}/`.
    fn served_by_reference(swagger: &Value) -> BTreeSet<(String, String, String, bool)> {
        let mut out = BTreeSet::new();
        let Some(paths) = swagger["paths"].as_object() else {
            return out;
        };
        for (path, ops) in paths {
            let Some(ops) = ops.as_object() else { continue };
            for op in ops.values() {
                let gvk = &op["x-kubernetes-group-version-kind"];
                let action = op["x-kubernetes-action"].as_str().unwrap_or_default();
                if !gvk.is_object()
                    || !["post", "get", "put", "patch", "delete", "list"].contains(&action)
                {
                    continue;
                }
                // `/api/v1/...` or `/apis/<group>/<version>/...`.
                let rest: Vec<&str> = path.split('/').skip(1).collect();
                let rest = if rest.first() == Some(&"api") {
                    &rest[2..]
                } else {
                    &rest[3..]
                };
                let namespaced =
                    rest.len() >= 2 && rest[0] == "namespaces" && rest[1] == "{namespace}";
                let resource = if namespaced { &rest[2..] } else { rest };
                if resource.is_empty() || resource.len() > 2 || resource[0] == "watch" {
                    continue;
                }
                out.insert((
                    gvk["group"].as_str().unwrap_or_default().to_string(),
                    gvk["version"].as_str().unwrap_or_default().to_string(),
                    gvk["kind"].as_str().unwrap_or_default().to_string(),
                    namespaced,
                ));
            }
        }
        // A kind served both ways (none in 1.31) counts as namespaced.
        let namespaced: BTreeSet<_> = out
            .iter()
            .filter(|k| k.3)
            .map(|k| (k.0.clone(), k.1.clone(), k.2.clone()))
            .collect();
        out.retain(|k| k.3 || !namespaced.contains(&(k.0.clone(), k.1.clone(), k.2.clone())));
        out
    }

    #[test]
    fn the_catalog_is_exactly_what_kubernetes_1_31_serves() {
        let swagger = terrain_contracts::kubernetes_swagger();
        let reference = served_by_reference(&swagger);
        assert!(reference.len() > 70, "read {} kinds", reference.len());
        let ours: BTreeSet<(String, String, String, bool)> = BUILT_IN
            .iter()
            .map(|b| {
                (
                    b.group.to_string(),
                    b.version.to_string(),
                    b.kind.to_string(),
                    b.scope == Scope::Namespaced,
                )
            })
            .collect();
        assert_eq!(ours.len(), BUILT_IN.len(), "no kind twice");
        let missing: Vec<_> = reference.difference(&ours).collect();
        let extra: Vec<_> = ours.difference(&reference).collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "missing from the catalog: {missing:?}; not served by 1.31: {extra:?}"
        );
        // Removed versions are really gone in 1.31.
        for (group, version, kinds, _) in REMOVED {
            for kind in *kinds {
                assert!(
                    !reference
                        .iter()
                        .any(|k| k.0 == *group && k.1 == *version && k.2 == *kind),
                    "{group}/{version} {kind} is still served"
                );
            }
        }
    }

    #[test]
    fn strict_checks_cover_exactly_the_ga_versions() {
        for b in BUILT_IN {
            assert_eq!(
                b.checks_fields(),
                is_ga(b.version),
                "{} {}",
                b.api_version(),
                b.kind
            );
        }
    }

    #[test]
    fn the_ack_sagemaker_kinds_match_the_controllers_crds() {
        let dir = terrain_contracts::dir().join("ack-sagemaker");
        let mut found = BTreeSet::new();
        for entry in std::fs::read_dir(&dir).expect("read ack-sagemaker") {
            let path = entry.expect("entry").path();
            if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("read CRD");
            let crd: Value = serde_yaml_ng::from_str(&text).expect("CRD is YAML");
            assert_eq!(crd["kind"], "CustomResourceDefinition");
            let group = crd["spec"]["group"].as_str().expect("group");
            let kind = crd["spec"]["names"]["kind"].as_str().expect("kind");
            let namespaced = crd["spec"]["scope"] == "Namespaced";
            for version in crd["spec"]["versions"].as_array().expect("versions") {
                let v = version["name"].as_str().expect("version name");
                found.insert((
                    group.to_string(),
                    v.to_string(),
                    kind.to_string(),
                    namespaced,
                ));
            }
        }
        let ours: BTreeSet<_> = ACK_SAGEMAKER_KINDS
            .iter()
            .map(|(k, s)| {
                (
                    ACK_SAGEMAKER.0.to_string(),
                    ACK_SAGEMAKER.1.to_string(),
                    k.to_string(),
                    *s == Scope::Namespaced,
                )
            })
            .collect();
        assert_eq!(ours, found);
        assert!(ours.iter().any(|k| k.2 == "Pipeline"));
        assert!(ours.iter().any(|k| k.2 == "PipelineExecution"));
    }

    fn refused(api_version: &str, kind: &str) -> String {
        match lookup(api_version, kind) {
            Lookup::Refused(m) => m,
            other => panic!("{api_version} {kind}: {other:?}"),
        }
    }

    #[test]
    fn unserved_kinds_say_what_to_write() {
        let cases = [
            (
                "apps/v9",
                "Deployment",
                "apps serves Deployment as v1 (use apps/v1)",
            ),
            (
                "v1",
                "ConfigMapp",
                "v1 has no kind ConfigMapp (did you mean ConfigMap, v1?)",
            ),
            ("v1", "configmap", "did you mean ConfigMap, v1?"),
            (
                "batch/v1beta1",
                "CronJob",
                "was removed in Kubernetes 1.25; use batch/v1",
            ),
            ("apps/v1", "Job", "apps has no kind Job; Job is batch/v1"),
            (
                "extensions/v1beta1",
                "Ingress",
                "removed in Kubernetes 1.22; use networking.k8s.io/v1",
            ),
            (
                "policy/v1beta1",
                "PodSecurityPolicy",
                "removed in Kubernetes 1.25; Kubernetes 1.31 has no PodSecurityPolicy",
            ),
            (
                "v2",
                "ConfigMap",
                "the core group serves ConfigMap as v1 (use v1)",
            ),
            ("app/v1", "Deployment", "no API group \"app\""),
            ("app/v1", "Deployment", "Deployment is apps/v1"),
            ("apps/v1/x", "Deployment", "is not VERSION or GROUP/VERSION"),
            (
                "apps/v9",
                "Widget",
                "no Kubernetes version serves apps/v9 (apps serves v1)",
            ),
        ];
        for (api_version, kind, want) in cases {
            let m = refused(api_version, kind);
            assert!(m.contains(want), "{api_version} {kind}: {m}");
        }
        assert!(matches!(lookup("example.com/v1", "Widget"), Lookup::Custom));
        assert!(
            matches!(lookup("apps/v1", "Deployment"), Lookup::BuiltIn(b) if b.scope == Scope::Namespaced)
        );
        assert!(
            matches!(lookup("rbac.authorization.k8s.io/v1", "ClusterRole"), Lookup::BuiltIn(b) if b.scope == Scope::Cluster)
        );
    }

    fn fields_of(api_version: &str, kind: &str, object: Value) -> Vec<String> {
        let Lookup::BuiltIn(b) = lookup(api_version, kind) else {
            panic!("{api_version} {kind} is built in");
        };
        b.check_fields(&object)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn unknown_fields_and_wrong_types_name_their_path() {
        let deployment = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "labels": {"app.kubernetes.io/name": "web"}},
            "spec": {
                "replica": 3,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [
                    {"name": "web", "imagee": "nginx", "resources": {"limits": {"cpu": 1, "memory": "1Gi"}},
                     "ports": [{"containerPort": 80}]}
                ]}}
            },
            "status": {"whatever": true}
        });
        assert_eq!(
            fields_of("apps/v1", "Deployment", deployment),
            [
                "spec.replica: unknown field (did you mean `replicas`?)",
                "spec.template.spec.containers[0].imagee: unknown field (did you mean `image`?)",
            ]
        );
        let typed = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
                           "spec": {"replicas": "three", "selector": {}, "template": {}}});
        assert_eq!(
            fields_of("apps/v1", "Deployment", typed),
            ["spec.replicas: invalid type: string \"three\", expected i32"]
        );
        let config_map = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "lables": {}}, "dta": {"a": "1"}});
        assert_eq!(
            fields_of("v1", "ConfigMap", config_map),
            [
                "metadata.lables: unknown field (did you mean `labels`?)",
                "dta: unknown field (did you mean `data`?)",
            ]
        );
        let numbers = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"epochs": 3}});
        assert_eq!(
            fields_of("v1", "ConfigMap", numbers),
            ["data.epochs: invalid type: integer `3`, expected a string"]
        );
    }

    #[test]
    fn values_known_only_after_apply_fit_any_type() {
        let marker = crate::protocol::UNKNOWN;
        let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"replicas": marker, "paused": marker, "selector": {}, "template": {"spec": {"containers": [
                {"name": "web", "image": format!("gcr.io/{marker}/web"), "imagee": marker}]}}}});
        assert_eq!(
            fields_of("apps/v1", "Deployment", deployment),
            ["spec.template.spec.containers[0].imagee: unknown field (did you mean `image`?)"]
        );
    }

    #[test]
    fn crds_and_kubectl_output_decode_cleanly() {
        let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com", "creationTimestamp": null},
            "spec": {"group": "example.com", "scope": "Namespaced",
                "names": {"kind": "Widget", "plural": "widgets", "listKind": "WidgetList", "singular": "widget"},
                "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                    "type": "object", "x-kubernetes-preserve-unknown-fields": true,
                    "properties": {"spec": {"type": "object", "properties": {"size": {"type": "integer", "default": 1},
                        "ref": {"$ref": "#/x"}, "port": {"x-kubernetes-int-or-string": true}}}}}}}]}});
        assert_eq!(
            fields_of("apiextensions.k8s.io/v1", "CustomResourceDefinition", crd),
            Vec::<String>::new()
        );
        let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
            "type": "Opaque", "data": {"k": "dmFsdWU="}, "stringData": {"x": "y"}});
        assert_eq!(fields_of("v1", "Secret", secret), Vec::<String>::new());
        let service = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
            "spec": {"ports": [{"port": 80, "targetPort": "http"}], "selector": {"app": "web"}}});
        assert_eq!(fields_of("v1", "Service", service), Vec::<String>::new());
    }

    #[test]
    fn names_follow_the_rule_of_their_kind() {
        let rule = |av: &str, kind: &str| match lookup(av, kind) {
            Lookup::BuiltIn(b) => b.name_rule(),
            other => panic!("{other:?}"),
        };
        let cases = [
            ("v1", "Namespace", "ml", true),
            ("v1", "Namespace", "ml.team", false),
            ("v1", "Service", "1web", false),
            ("v1", "Service", "web-1", true),
            ("v1", "ConfigMap", "settings.v1", true),
            ("v1", "ConfigMap", "Settings", false),
            ("v1", "ConfigMap", "a_b", false),
            (
                "rbac.authorization.k8s.io/v1",
                "ClusterRole",
                "system:controller:x",
                true,
            ),
            ("rbac.authorization.k8s.io/v1", "ClusterRole", "a/b", false),
            ("batch/v1", "CronJob", &"c".repeat(53), false),
            ("batch/v1", "CronJob", &"c".repeat(52), true),
            ("batch/v1", "Job", &"j".repeat(64), false),
            ("apps/v1", "Deployment", &"d".repeat(64), true),
        ];
        for (av, kind, name, ok) in cases {
            assert_eq!(
                check_name(rule(av, kind), name).is_ok(),
                ok,
                "{kind} {name}"
            );
        }
    }

    #[test]
    fn paths_read_like_kubectl_explain() {
        let path = vec![
            Seg::Key("metadata".into()),
            Seg::Key("labels".into()),
            Seg::Key("app.kubernetes.io/name".into()),
        ];
        assert_eq!(
            display_path(&path),
            "metadata.labels[\"app.kubernetes.io/name\"]"
        );
        let path = vec![
            Seg::Key("spec".into()),
            Seg::Key("containers".into()),
            Seg::Index(0),
            Seg::Key("image".into()),
        ];
        assert_eq!(display_path(&path), "spec.containers[0].image");
    }
}
