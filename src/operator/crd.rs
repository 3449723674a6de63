//! The `Stack` custom resource (`terrain.dev/v1alpha1`): what a team hands the operator
//! (where the stack's files are, its variables, its state, how plans are approved and
//! drift handled) and the status the operator reports back. The CRD in
//! `deploy/crd.yaml` is generated from these types (`terrain operator crd`); a test
//! holds the checked-in file to them.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The API group and version of [`Stack`].
pub const API_VERSION: &str = "terrain.dev/v1alpha1";

/// A stack the operator keeps converged.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "terrain.dev",
    version = "v1alpha1",
    kind = "Stack",
    plural = "stacks",
    shortname = "tstack",
    namespaced,
    status = "StackStatus",
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Pending","type":"string","jsonPath":".status.pendingPlan.digest"}"#,
    printcolumn = r#"{"name":"Drifted","type":"string","jsonPath":".status.conditions[?(@.type==\"Drifted\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct StackSpec {
    /// Where the stack's files are.
    pub source: Source,
    /// The environment (`envs/NAME.toml` beside the stack), as `--env` gives it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<String>,
    /// Variable values, as `--var NAME=VALUE` gives them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub vars: BTreeMap<String, String>,
    /// Secrets whose keys are variables (each key a variable's name). Their values are
    /// never shown, in the status, Events or logs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub vars_from: Vec<VarsFrom>,
    /// The state's remote store, in place of the stack's `[backend]`. Either way it must
    /// be S3 or GCS: a pod's disk does not outlive it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<BackendSpec>,
    /// How often the stack is planned against the live objects (`30s`, `5m`, `1h`);
    /// each wait is jittered by up to a tenth so stacks do not plan in step.
    #[serde(default = "default_interval")]
    pub interval: String,
    /// Stops reconciling (nothing is planned or applied) until unset.
    #[serde(default)]
    pub suspend: bool,
    /// Which plans are applied.
    #[serde(default)]
    pub approval: Approval,
    /// What is done about changes made outside the stack.
    #[serde(default)]
    pub drift: DriftSpec,
    /// What deleting the Stack does to what it manages.
    #[serde(default)]
    pub deletion_policy: DeletionPolicy,
}

fn default_interval() -> String {
    "5m".to_string()
}

/// Where the stack's files come from: exactly one of `configMap` and `git`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Source {
    /// A ConfigMap in the Stack's namespace: each key a file of the stack's directory
    /// (`main.toml`, `envs__prod.toml` for `envs/prod.toml`: `__` stands for `/`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map: Option<ConfigMapSource>,
    /// A Git repository, fetched by the operator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git: Option<GitSource>,
}

/// A Git repository holding a stack's files.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
pub struct GitSource {
    /// `https://…`, or `file://…` for a repository on the operator's disk.
    pub url: String,
    /// A branch, a tag or a commit id.
    #[serde(rename = "ref", default = "default_ref")]
    pub reference: String,
    /// The stack's directory in the repository (the root by default).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub path: String,
}

fn default_ref() -> String {
    "main".to_string()
}

/// A ConfigMap holding a stack's files.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
pub struct ConfigMapSource {
    pub name: String,
}

/// A Secret whose keys are variables.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VarsFrom {
    pub secret_ref: SecretRef,
}

/// A Secret in the Stack's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
pub struct SecretRef {
    pub name: String,
}

/// A remote state store: exactly one of `s3` and `gcs`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct BackendSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3: Option<S3BackendSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gcs: Option<GcsBackendSpec>,
}

/// State in S3, as `[backend.s3]` gives it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct S3BackendSpec {
    pub bucket: String,
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kms_key_id: Option<String>,
}

/// State in GCS, as `[backend.gcs]` gives it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GcsBackendSpec {
    pub bucket: String,
    #[serde(default)]
    pub prefix: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kms_key_name: Option<String>,
}

/// Which plans the operator applies.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Approval {
    #[serde(default)]
    pub mode: ApprovalMode,
    /// The digest of the one plan approved (`sha256:…`, from `status.pendingPlan`);
    /// applied only while the plan made now has exactly this digest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved_plan: Option<String>,
}

/// How plans are approved.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ApprovalMode {
    /// Only the plan whose digest is `approvedPlan`.
    #[default]
    Manual,
    /// Every plan.
    Auto,
    /// Plans that destroy, replace and shrink nothing; others wait for `approvedPlan`.
    AutoIfNonDisruptive,
}

/// What is done about drift.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DriftSpec {
    #[serde(default)]
    pub mode: DriftMode,
    /// Fields whose outside changes are not drift (`ADDRESS.FIELD`, e.g.
    /// `gcs_bucket.data.labels`), besides those the kinds leave to autoscalers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ignore: Vec<String>,
}

/// What drift leads to.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum DriftMode {
    /// `Drifted=True`, an Event and a pending plan that puts it back, applied only once
    /// approved by digest (whatever the approval mode).
    #[default]
    Report,
    /// The plan that puts it back goes through the approval mode like any other.
    Correct,
}

/// What deleting the Stack does.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum DeletionPolicy {
    /// The objects and the state stay; the Stack goes.
    #[default]
    Orphan,
    /// The objects are destroyed first, by a destroy plan approved as any other.
    Destroy,
}

/// What the operator last saw and did.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StackStatus {
    /// The generation of the spec this status is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The plan waiting for approval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_plan: Option<PendingPlan>,
    /// An approved digest that no longer matches the plan (its inputs, the state or the
    /// live objects moved since): it is never applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub superseded_approval: Option<String>,
    /// The digest of the plan last applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_applied_digest: Option<String>,
    /// The content hash of the files and variables last applied: a plan with changes
    /// from the same inputs is drift.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_applied_inputs: Option<String>,
    /// When the stack was last planned (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_planned: Option<String>,
    /// The content hash of the files and variables last planned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planned_inputs: Option<String>,
    /// The last `terrain.dev/plan-requested` annotation a plan answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_request: Option<String>,
    /// Fields changed outside the stack (`ADDRESS.FIELD`), while `Drifted`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drifted: Vec<String>,
    /// The stack's non-sensitive outputs as of the last apply.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(with = "BTreeMap<String, serde_json::Value>")]
    pub outputs: BTreeMap<String, serde_json::Value>,
}

/// One condition, as `metav1.Condition` has it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    pub reason: String,
    #[serde(default)]
    pub message: String,
    pub last_transition_time: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// A plan waiting for approval.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PendingPlan {
    /// `sha256:…` of the canonical plan, the state serial and lineage it was made
    /// against, and the content of the files and variables it was made from.
    pub digest: String,
    pub serial: u64,
    pub lineage: String,
    pub add: u32,
    pub change: u32,
    pub replace: u32,
    pub destroy: u32,
    /// A destroy plan (the Stack is being deleted under `deletionPolicy: Destroy`).
    #[serde(default)]
    pub destroy_all: bool,
    /// Whether it destroys, replaces or shrinks anything, and what.
    pub disruptive: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disruptions: Vec<String>,
    /// The hourly cost change at the high end, in USD (`+1.23`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_delta: Option<String>,
    /// Where the plan is stored: beside the state, protected as the state is.
    pub location: String,
    /// The state it was made against (`gs://…`, `s3://…`).
    pub state: String,
    /// When it was made (RFC 3339).
    pub planned_at: String,
}
