//! The ACK SageMaker controller (aws-controllers-k8s/sagemaker-controller v1.9.1) as it
//! behaves for an emulated EKS cluster. An EKS cluster starts with neither its CRDs nor
//! a controller, as a real one does. An ACTIVE ACK capability installs the `Pipeline`
//! and `PipelineExecution` CRDs ([`install_crds`]) and runs the controller as the
//! capability's role ([`Controller`]: every SageMaker call is checked against the
//! role's policies, `iam:PassRole` of the pipeline's role included, and refused in
//! SageMaker's words). The controller reconciles the objects against the emulated
//! SageMaker — creates, updates and deletes pipelines, starts and stops executions — and writes
//! back the status the real controller writes (`ackResourceMetadata`, the ACK
//! conditions, the SageMaker fields), holding each object with its finalizer until the
//! SageMaker side is cleaned up.
//!
//! Like the real controller it compares the spec with what SageMaker reports rather than
//! remembering what it sent, so an edited spec, a pipeline deleted behind its back or a
//! sandbox restarted from its state file all converge on the next pass. One deliberate
//! difference: a condition keeps its `lastTransitionTime` while its status stays the
//! same (the real runtime restamps it on every reconcile), so a pass that finds nothing
//! new writes nothing.

use chrono::{DateTime, Utc};
use serde_json::{json, Map, Value};

use super::iam::{self, Iam, Role};
use super::sagemaker::{self, ExecutionSpec, ExecutionState, PipelineSpec, SageMaker};
use super::{AwsError, ACCOUNT};
use crate::faults::Faults;
use crate::k8s::api::{self, Outcome};
use crate::k8s::request::KubeRequest;
use crate::k8s::store::{timestamp, ObjKey, Store};
use crate::k8s::{ClusterState, SettleCtx};

const GROUP: &str = "sagemaker.services.k8s.aws";
const API_VERSION: &str = "sagemaker.services.k8s.aws/v1alpha1";
const PIPELINE_CRD: &str = "pipelines.sagemaker.services.k8s.aws";
const EXECUTION_CRD: &str = "pipelineexecutions.sagemaker.services.k8s.aws";
const PIPELINE_FINALIZER: &str = "finalizers.sagemaker.services.k8s.aws/Pipeline";
const EXECUTION_FINALIZER: &str = "finalizers.sagemaker.services.k8s.aws/PipelineExecution";
/// The tags ACK adds to every resource it creates.
const CONTROLLER_VERSION: &str = "sagemaker-v1.9.1";
const COMPONENT: &str = "ack-sagemaker-controller";

/// Who installs the CRDs of an ACK capability: EKS, from outside the cluster, as the
/// managed field's manager shows.
const CAPABILITY_MANAGER: &str = "eks-capabilities";

const SYNCED: &str = "ACK.ResourceSynced";
const TERMINAL: &str = "ACK.Terminal";
const RECOVERABLE: &str = "ACK.Recoverable";
/// The runtime's condition messages (`pkg/condition`).
const SYNCED_MESSAGE: &str = "Resource synced successfully";
const NOT_SYNCED_MESSAGE: &str = "Resource not synced";
const UNKNOWN_SYNCED_MESSAGE: &str =
    "Unable to determine if desired resource state matches latest observed state";
const TERMINAL_REASON: &str = "resource is in terminal condition";

/// One ACK condition as this pass computes it.
#[derive(Debug, Clone, PartialEq)]
struct Condition {
    kind: &'static str,
    status: &'static str,
    message: Option<String>,
    reason: Option<String>,
}

impl Condition {
    fn new(kind: &'static str, status: &'static str, message: impl Into<String>) -> Condition {
        Condition {
            kind,
            status,
            message: Some(message.into()),
            reason: None,
        }
    }

    fn because(mut self, reason: impl Into<String>) -> Condition {
        self.reason = Some(reason.into());
        self
    }
}

/// An error as the controller reports it in a condition: `Code: message`.
/// Who the controller acts as: the IAM role of the EKS capability, or of the pod
/// identity association of a self-managed controller's service account. Every
/// SageMaker call it makes is checked against that role's policies first, so a role that
/// may not pass the pipeline's role fails as the real controller reports it, in
/// SageMaker's words.
pub(crate) struct Controller<'a> {
    /// The role, or why the controller has no usable identity (the role is gone; its
    /// pods were given none), which every call then fails with.
    pub role: Result<&'a Role, AwsError>,
}

impl<'a> Controller<'a> {
    /// The controller acting as role `role_arn` (an error when it does not exist).
    pub(crate) fn acting_as(iam: &'a Iam, role_arn: &str) -> Controller<'a> {
        Controller {
            role: iam::role(iam, role_arn).ok_or_else(|| {
                AwsError::new(
                    403,
                    "AccessDeniedException",
                    format!("The role {role_arn} the controller runs as does not exist: it cannot be assumed"),
                )
            }),
        }
    }

    /// A self-managed controller whose service account has no pod identity: the AWS
    /// SDK finds no credentials and no call leaves the pod.
    pub(crate) fn without_credentials(namespace: &str, service_account: &str) -> Controller<'a> {
        Controller {
            role: Err(AwsError::new(
                400,
                "NoCredentialProviders",
                format!(
                    "get identity: get credentials: failed to refresh cached credentials: no EKS Pod Identity association (with the eks-pod-identity-agent add-on ACTIVE) gives service account {namespace}/{service_account} a role"
                ),
            )),
        }
    }
}

/// The session name the controller's calls carry in CloudTrail and in denials.
const SESSION: &str = "ack-sagemaker-controller";

impl Controller<'_> {
    /// Refuses `action` on `resource` (and passing `passes` to SageMaker) as SageMaker
    /// refuses a caller whose role does not allow it.
    fn may(&self, action: &str, resource: &str, passes: Option<&str>) -> Result<(), AwsError> {
        let role = self.role.as_ref().map_err(Clone::clone)?;
        let denied = |action: &str, resource: &str| {
            AwsError::new(
                400,
                "AccessDeniedException",
                iam::not_authorized(role, SESSION, action, resource),
            )
        };
        if !iam::allows(role, action, resource, &[]) {
            return Err(denied(action, resource));
        }
        if let Some(passed) = passes {
            let keys = [("iam:PassedToService", "sagemaker.amazonaws.com")];
            if !iam::allows(role, "iam:PassRole", passed, &keys) {
                return Err(denied("iam:PassRole", passed));
            }
        }
        Ok(())
    }
}

/// The ARN of pipeline `name` (or `name` itself when it is one).
fn pipeline_arn(region: &str, name: &str) -> String {
    if name.starts_with("arn:") {
        return name.to_string();
    }
    format!(
        "arn:aws:sagemaker:{region}:{ACCOUNT}:pipeline/{}",
        name.to_ascii_lowercase()
    )
}

fn describe(e: &AwsError) -> String {
    format!("{}: {}", e.code, e.message)
}

/// The conditions after a failed SageMaker call: terminal for a request SageMaker will
/// never accept as it stands, recoverable (retried on every pass) otherwise.
fn failure_conditions(e: &AwsError) -> Vec<Condition> {
    if e.code == "ValidationException" {
        vec![
            Condition::new(TERMINAL, "True", describe(e)),
            Condition::new(SYNCED, "False", NOT_SYNCED_MESSAGE).because(TERMINAL_REASON),
        ]
    } else {
        vec![
            Condition::new(RECOVERABLE, "True", describe(e)),
            Condition::new(SYNCED, "Unknown", UNKNOWN_SYNCED_MESSAGE).because(describe(e)),
        ]
    }
}

/// Replaces the object's conditions with `conditions`, keeping the transition time of
/// each one whose status did not change.
fn set_conditions(object: &mut Value, conditions: &[Condition], now: DateTime<Utc>) {
    let old: Vec<Value> = object["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let list: Vec<Value> = conditions
        .iter()
        .map(|c| {
            let since = old
                .iter()
                .find(|o| o["type"] == c.kind && o["status"] == c.status)
                .and_then(|o| o["lastTransitionTime"].as_str().map(str::to_string))
                .unwrap_or_else(|| timestamp(now));
            let mut v = json!({"type": c.kind, "status": c.status, "lastTransitionTime": since});
            if let Some(m) = &c.message {
                v["message"] = json!(m);
            }
            if let Some(r) = &c.reason {
                v["reason"] = json!(r);
            }
            v
        })
        .collect();
    status_mut(object).insert("conditions".into(), Value::Array(list));
}

fn status_mut(object: &mut Value) -> &mut Map<String, Value> {
    if !object.is_object() {
        *object = json!({});
    }
    if !object["status"].is_object() {
        object["status"] = json!({});
    }
    match object.get_mut("status").and_then(Value::as_object_mut) {
        Some(m) => m,
        None => unreachable!("status was just made an object"),
    }
}

fn metadata(arn: Option<&str>, region: &str) -> Value {
    let mut m = json!({"ownerAccountID": ACCOUNT, "region": region});
    if let Some(arn) = arn {
        m["arn"] = json!(arn);
    }
    m
}

fn deleting(object: &Value) -> bool {
    !object["metadata"]["deletionTimestamp"].is_null()
}

fn has_finalizer(object: &Value, finalizer: &str) -> bool {
    object["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| f.iter().any(|x| x == finalizer))
}

fn add_finalizer(object: &mut Value, finalizer: &str) {
    if has_finalizer(object, finalizer) {
        return;
    }
    let list = &mut object["metadata"]["finalizers"];
    match list.as_array_mut() {
        Some(l) => l.push(json!(finalizer)),
        None => *list = json!([finalizer]),
    }
}

/// Removes a finalizer, and the list with it when it is left empty, as the API server
/// shows no empty list.
fn remove_finalizer(object: &mut Value, finalizer: &str) {
    let Some(list) = object["metadata"]["finalizers"].as_array_mut() else {
        return;
    };
    list.retain(|f| f != finalizer);
    if list.is_empty() {
        if let Some(m) = object["metadata"].as_object_mut() {
            m.remove("finalizers");
        }
    }
}

fn text(spec: &Value, key: &str) -> Option<String> {
    spec[key].as_str().map(str::to_string)
}

fn parallelism(spec: &Value) -> Option<i64> {
    spec["parallelismConfiguration"]["maxParallelExecutionSteps"].as_i64()
}

/// The CreatePipeline request a Pipeline's spec asks for, with the tags ACK adds.
fn pipeline_spec(object: &Value) -> PipelineSpec {
    let spec = &object["spec"];
    let mut tags: Vec<(String, String)> = spec["tags"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| {
            Some((
                t["key"].as_str()?.to_string(),
                t["value"].as_str().unwrap_or_default().to_string(),
            ))
        })
        .collect();
    let namespace = object["metadata"]["namespace"]
        .as_str()
        .unwrap_or("default");
    for (k, v) in [
        ("services.k8s.aws/controller-version", CONTROLLER_VERSION),
        ("services.k8s.aws/namespace", namespace),
    ] {
        if !tags.iter().any(|(key, _)| key == k) {
            tags.push((k.to_string(), v.to_string()));
        }
    }
    PipelineSpec {
        name: text(spec, "pipelineName").unwrap_or_default(),
        display_name: text(spec, "pipelineDisplayName"),
        description: text(spec, "pipelineDescription"),
        role_arn: text(spec, "roleARN"),
        definition: text(spec, "pipelineDefinition"),
        parallelism: parallelism(spec),
        tags,
        client_request_token: None,
    }
}

/// The UpdatePipeline request that brings `current` to `desired`: only the members the
/// spec sets and SageMaker has otherwise; `None` when nothing differs.
fn pipeline_delta(current: &sagemaker::Pipeline, desired: &PipelineSpec) -> Option<PipelineSpec> {
    let differs = |want: &Option<String>, have: &str| want.as_deref().is_some_and(|w| w != have);
    let delta = PipelineSpec {
        name: desired.name.clone(),
        display_name: desired
            .display_name
            .clone()
            .filter(|_| differs(&desired.display_name, &current.display_name)),
        description: desired.description.clone().filter(|_| {
            differs(
                &desired.description,
                current.description.as_deref().unwrap_or_default(),
            )
        }),
        role_arn: desired
            .role_arn
            .clone()
            .filter(|_| differs(&desired.role_arn, &current.role_arn)),
        definition: desired
            .definition
            .clone()
            .filter(|_| differs(&desired.definition, &current.definition)),
        parallelism: desired
            .parallelism
            .filter(|p| current.parallelism != Some(*p)),
        tags: Vec::new(),
        client_request_token: None,
    };
    let empty = PipelineSpec {
        name: desired.name.clone(),
        ..PipelineSpec::default()
    };
    (delta != empty).then_some(delta)
}

/// The StartPipelineExecution request a PipelineExecution's spec asks for.
fn execution_spec(object: &Value) -> ExecutionSpec {
    let spec = &object["spec"];
    ExecutionSpec {
        pipeline: text(spec, "pipelineName").unwrap_or_default(),
        display_name: text(spec, "pipelineExecutionDisplayName"),
        description: text(spec, "pipelineExecutionDescription"),
        parallelism: parallelism(spec),
        parameters: spec["pipelineParameters"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| {
                Some((
                    p["name"].as_str()?.to_string(),
                    p["value"].as_str().unwrap_or_default().to_string(),
                ))
            })
            .collect(),
        client_request_token: None,
    }
}

/// Records a Warning Event about `object` once per distinct message (a failure seen on
/// every pass is one Event, not one per pass).
fn warn(
    store: &mut Store,
    object: &Value,
    kind: &str,
    reason: &str,
    message: &str,
    now: DateTime<Utc>,
) {
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    let uid = object["metadata"]["uid"].as_str().unwrap_or_default();
    let namespace = object["metadata"]["namespace"]
        .as_str()
        .unwrap_or("default");
    let hash = crate::common::hash::fnv1a(format!("{uid}/{reason}/{message}").as_bytes());
    let key = ObjKey::new("", "events", namespace, &format!("{name}.{hash:016x}"));
    if store.get(&key).is_some() {
        return;
    }
    let event = json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": key.name, "namespace": namespace},
        "involvedObject": {
            "apiVersion": API_VERSION,
            "kind": kind,
            "name": name,
            "namespace": namespace,
            "uid": uid,
        },
        "reason": reason,
        "message": message,
        "type": "Warning",
        "count": 1,
        "firstTimestamp": timestamp(now),
        "lastTimestamp": timestamp(now),
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": "",
    });
    store.insert_new(key, event, now);
}

/// The `ackResourceMetadata` and `conditions` members every ACK resource's status has.
fn ack_status_schema(properties: Value) -> Value {
    let mut members = json!({
        "ackResourceMetadata": {
            "description": "The metadata ACK keeps about the AWS resource (ARN, owner account, region).",
            "type": "object",
            "properties": {
                "arn": {"type": "string"},
                "ownerAccountID": {"type": "string"},
                "region": {"type": "string"},
            },
            "required": ["ownerAccountID", "region"],
        },
        "conditions": {
            "description": "The ACK conditions (ACK.ResourceSynced, ACK.Terminal, ACK.Recoverable…).",
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "lastTransitionTime": {"type": "string", "format": "date-time"},
                    "message": {"type": "string"},
                    "reason": {"type": "string"},
                    "status": {"type": "string"},
                    "type": {"type": "string"},
                },
                "required": ["status", "type"],
            },
        },
    });
    if let (Some(m), Some(extra)) = (members.as_object_mut(), properties.as_object()) {
        m.extend(extra.clone());
    }
    json!({
        "type": "object",
        "properties": members,
        // The controller writes what SageMaker reports; nothing of it is pruned.
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// A CustomResourceDefinition of the controller's chart: `kind` in the SageMaker group,
/// namespaced, one served and stored version `v1alpha1` with a status subresource.
fn crd(kind: &str, plural: &str, columns: Value, spec: Value, status: Value) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": format!("{plural}.{GROUP}"),
        },
        "spec": {
            "group": GROUP,
            "names": {
                "kind": kind,
                "listKind": format!("{kind}List"),
                "plural": plural,
                "singular": kind.to_lowercase(),
            },
            "scope": "Namespaced",
            "versions": [{
                "name": "v1alpha1",
                "served": true,
                "storage": true,
                "additionalPrinterColumns": columns,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {
                    "description": format!("{kind} is the Schema for the {kind}s API"),
                    "type": "object",
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "metadata": {"type": "object"},
                        "spec": spec,
                        "status": status,
                    },
                }},
            }],
        },
    })
}

/// A list of `{<name_key>, value}` string pairs (tags, pipeline parameters).
fn pairs_schema(name_key: &str) -> Value {
    json!({
        "type": "array",
        "items": {
            "type": "object",
            "properties": {name_key: {"type": "string"}, "value": {"type": "string"}},
        },
    })
}

fn parallelism_schema() -> Value {
    json!({
        "description": "The parallelism configuration applied to the pipeline.",
        "type": "object",
        "properties": {
            "maxParallelExecutionSteps": {"type": "integer", "format": "int64"},
        },
    })
}

/// The two CRDs of the controller that the sandbox's SageMaker serves: `Pipeline`, then
/// `PipelineExecution`.
pub(crate) fn crds() -> [Value; 2] {
    let age = json!({"jsonPath": ".metadata.creationTimestamp", "name": "AGE", "type": "date"});
    let pipeline = crd(
        "Pipeline",
        "pipelines",
        json!([
            {"jsonPath": ".status.pipelineStatus", "name": "STATUS", "type": "string"},
            age,
        ]),
        json!({
            "description": "The CreatePipeline request: what the pipeline should be.",
            "type": "object",
            "properties": {
                "parallelismConfiguration": parallelism_schema(),
                "pipelineDefinition": {
                    "description": "The JSON pipeline definition.",
                    "type": "string",
                },
                "pipelineDescription": {"type": "string"},
                "pipelineDisplayName": {"type": "string"},
                "pipelineName": {"type": "string"},
                "roleARN": {
                    "description": "The IAM role SageMaker assumes to run the pipeline.",
                    "type": "string",
                },
                "tags": pairs_schema("key"),
            },
            "required": ["pipelineName", "roleARN"],
        }),
        ack_status_schema(json!({
            "creationTime": {"type": "string", "format": "date-time"},
            "lastModifiedTime": {"type": "string", "format": "date-time"},
            "pipelineStatus": {"type": "string"},
        })),
    );
    let execution = crd(
        "PipelineExecution",
        "pipelineexecutions",
        json!([
            {"jsonPath": ".status.failureReason", "name": "FAILURE-REASON", "priority": 1, "type": "string"},
            {"jsonPath": ".status.pipelineExecutionStatus", "name": "STATUS", "type": "string"},
            age,
        ]),
        json!({
            "description": "The StartPipelineExecution request: which pipeline to run, and how.",
            "type": "object",
            "properties": {
                "parallelismConfiguration": parallelism_schema(),
                "pipelineExecutionDescription": {"type": "string"},
                "pipelineExecutionDisplayName": {"type": "string"},
                "pipelineName": {"type": "string"},
                "pipelineParameters": pairs_schema("name"),
            },
            "required": ["pipelineName"],
        }),
        ack_status_schema(json!({
            "creationTime": {"type": "string", "format": "date-time"},
            "failureReason": {"type": "string"},
            "lastModifiedTime": {"type": "string", "format": "date-time"},
            "pipelineExecutionStatus": {"type": "string"},
        })),
    );
    [pipeline, execution]
}

/// Creates whichever of the controller's CRDs the cluster lacks, through the cluster's
/// API as an ACK capability does (so they are validated, Established and owned by their
/// manager like any client's); a CRD already there, whoever installed it, is left as it is.
/// Returns the names of the CRDs created.
pub(crate) fn install_crds(cluster: &mut ClusterState, ctx: &SettleCtx) -> Vec<String> {
    let mut created = Vec::new();
    for crd in crds() {
        let name = crd["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if crd_installed(&cluster.store, &name) {
            continue;
        }
        let request = KubeRequest {
            method: axum::http::Method::POST,
            path: "/apis/apiextensions.k8s.io/v1/customresourcedefinitions".into(),
            query: Vec::new(),
            content_type: Some("application/json".into()),
            accept: Some("application/json".into()),
            user_agent: Some(CAPABILITY_MANAGER.into()),
            body: crd.to_string().into_bytes(),
            port_streams: false,
        };
        // The definitions are the sandbox's own and always valid; a refusal would leave
        // the cluster as one without the chart, which is what clients then see.
        if let Outcome::Done(response) = api::handle(cluster, &request, ctx) {
            if response.status == 201 {
                created.push(name);
            }
        }
    }
    created
}

fn crd_installed(store: &Store, name: &str) -> bool {
    store
        .get(&ObjKey::new(
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            "",
            name,
        ))
        .is_some()
}

/// The image repository of the controller's Deployment (the chart's default image).
const CONTROLLER_IMAGE: &str = "aws-controllers-k8s/sagemaker-controller";

/// A self-managed controller running in the cluster: the namespace and service account
/// of a Deployment of the controller's image with a replica available (its pods run),
/// as `kubectl apply` of the chart's manifests leaves it.
pub(crate) fn self_managed(cluster: &ClusterState) -> Option<(String, String)> {
    cluster
        .store
        .list("apps", "deployments", None)
        .into_iter()
        .map(|(_, d)| d)
        .find(|d| {
            d["status"]["availableReplicas"].as_i64().unwrap_or(0) > 0
                && d["spec"]["template"]["spec"]["containers"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| {
                        c["image"]
                            .as_str()
                            .is_some_and(|i| i.contains(CONTROLLER_IMAGE))
                    })
        })
        .map(|d| {
            let namespace = d["metadata"]["namespace"].as_str().unwrap_or("default");
            let account = d["spec"]["template"]["spec"]["serviceAccountName"]
                .as_str()
                .unwrap_or("default");
            (namespace.to_string(), account.to_string())
        })
}

/// One controller pass over a cluster's `Pipeline` and `PipelineExecution` objects.
pub(crate) fn settle(
    cluster: &mut ClusterState,
    sagemaker: &mut SageMaker,
    iam: &super::iam::Iam,
    who: &Controller<'_>,
    region: &str,
    now: DateTime<Utc>,
    scale: f64,
    faults: &Faults,
) {
    let store = &mut cluster.store;
    if crd_installed(store, PIPELINE_CRD) {
        let pipelines: Vec<(ObjKey, Value)> = store
            .list(GROUP, "pipelines", None)
            .into_iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for (key, object) in pipelines {
            reconcile_pipeline(store, &key, object, sagemaker, who, region, now);
        }
    }
    if crd_installed(store, EXECUTION_CRD) {
        let executions: Vec<(ObjKey, Value)> = store
            .list(GROUP, "pipelineexecutions", None)
            .into_iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for (key, object) in executions {
            reconcile_execution(
                store, &key, object, sagemaker, iam, who, region, now, scale, faults,
            );
        }
    }
    // Objects whose last finalizer this pass removed go now, not on the next request.
    store.finish_deletions();
}

fn reconcile_pipeline(
    store: &mut Store,
    key: &ObjKey,
    old: Value,
    sagemaker: &mut SageMaker,
    who: &Controller<'_>,
    region: &str,
    now: DateTime<Utc>,
) {
    let mut object = old.clone();
    let desired = pipeline_spec(&object);
    if deleting(&object) {
        if !has_finalizer(&object, PIPELINE_FINALIZER) {
            return;
        }
        let arn = pipeline_arn(region, &desired.name);
        match who
            .may("sagemaker:DeletePipeline", &arn, None)
            .and_then(|()| sagemaker.delete_pipeline(region, &desired.name))
        {
            Ok(_) => remove_finalizer(&mut object, PIPELINE_FINALIZER),
            Err(e) if e.code == "ResourceNotFound" => {
                remove_finalizer(&mut object, PIPELINE_FINALIZER);
            }
            Err(e) => set_conditions(&mut object, &failure_conditions(&e), now),
        }
        store.update(key, object);
        return;
    }
    add_finalizer(&mut object, PIPELINE_FINALIZER);
    let arn = pipeline_arn(region, &desired.name);
    let result = match sagemaker.pipeline(region, &desired.name) {
        None => who
            .may(
                "sagemaker:CreatePipeline",
                &arn,
                desired.role_arn.as_deref(),
            )
            .and_then(|()| sagemaker.create_pipeline(region, &desired, now).map(|_| ())),
        Some(current) => match pipeline_delta(current, &desired) {
            Some(delta) => who
                .may(
                    "sagemaker:UpdatePipeline",
                    &arn,
                    desired.role_arn.as_deref(),
                )
                .and_then(|()| sagemaker.update_pipeline(region, &delta, now).map(|_| ())),
            None => Ok(()),
        },
    };
    match result.map(|()| sagemaker.pipeline(region, &desired.name)) {
        Ok(Some(p)) => {
            let status = status_mut(&mut object);
            status.insert("ackResourceMetadata".into(), metadata(Some(&p.arn), region));
            status.insert("pipelineStatus".into(), json!("Active"));
            status.insert("creationTime".into(), json!(timestamp(p.created)));
            status.insert("lastModifiedTime".into(), json!(timestamp(p.modified)));
            set_conditions(
                &mut object,
                &[Condition::new(SYNCED, "True", SYNCED_MESSAGE)],
                now,
            );
        }
        Ok(None) => {}
        Err(e) => {
            let status = status_mut(&mut object);
            if !status.contains_key("ackResourceMetadata") {
                status.insert("ackResourceMetadata".into(), metadata(None, region));
            }
            set_conditions(&mut object, &failure_conditions(&e), now);
            warn(store, &object, "Pipeline", "SyncFailed", &describe(&e), now);
        }
    }
    if object != old {
        store.update(key, object);
    }
}

#[allow(clippy::too_many_arguments)]
fn reconcile_execution(
    store: &mut Store,
    key: &ObjKey,
    old: Value,
    sagemaker: &mut SageMaker,
    iam: &super::iam::Iam,
    who: &Controller<'_>,
    region: &str,
    now: DateTime<Utc>,
    scale: f64,
    faults: &Faults,
) {
    let mut object = old.clone();
    let arn = old["status"]["ackResourceMetadata"]["arn"]
        .as_str()
        .map(str::to_string);
    let current = arn.as_deref().and_then(|a| sagemaker.execution(a));
    if deleting(&object) {
        if !has_finalizer(&object, EXECUTION_FINALIZER) {
            return;
        }
        // A running execution is stopped, and the object held until it has stopped.
        let state = match (&arn, &current) {
            (Some(arn), Some(s)) if s.status == sagemaker::EXECUTING => {
                match who
                    .may("sagemaker:StopPipelineExecution", arn, None)
                    .and_then(|()| sagemaker.stop_execution(arn, now, scale))
                {
                    Ok(_) => sagemaker.execution(arn),
                    Err(e) => {
                        set_conditions(&mut object, &failure_conditions(&e), now);
                        current.clone()
                    }
                }
            }
            _ => current.clone(),
        };
        match state {
            Some(s) if s.status == sagemaker::EXECUTING || s.status == sagemaker::STOPPING => {
                mirror_execution(&mut object, arn.as_deref(), &s, region, now);
            }
            _ => remove_finalizer(&mut object, EXECUTION_FINALIZER),
        }
        if object != old {
            store.update(key, object);
        }
        return;
    }
    add_finalizer(&mut object, EXECUTION_FINALIZER);
    let started = match (&arn, current) {
        (Some(arn), Some(state)) => Ok((arn.clone(), state)),
        // Never started, or gone from SageMaker (its pipeline was deleted): start one,
        // as the real controller creates a resource its read no longer finds.
        _ => {
            let spec = execution_spec(&object);
            who.may(
                "sagemaker:StartPipelineExecution",
                &pipeline_arn(region, &spec.pipeline),
                None,
            )
            .and_then(|()| {
                sagemaker.start_execution(
                    region,
                    &spec,
                    now,
                    scale,
                    // A planned SageMaker failure applies to runs the controller starts too.
                    faults
                        .take_operation_failure("sagemaker")
                        .map(|(_, message)| message),
                    iam,
                )
            })
            .and_then(|arn| {
                sagemaker
                    .execution(&arn)
                    .map(|state| (arn.clone(), state))
                    .ok_or_else(|| {
                        AwsError::new(
                            400,
                            "ResourceNotFound",
                            format!("Pipeline execution '{arn}' does not exist."),
                        )
                    })
            })
        }
    };
    match started {
        Ok((arn, state)) => {
            mirror_execution(&mut object, Some(&arn), &state, region, now);
            if state.status == sagemaker::FAILED {
                let reason = state.failure_reason.clone().unwrap_or_default();
                warn(
                    store,
                    &object,
                    "PipelineExecution",
                    "ExecutionFailed",
                    &format!("pipeline execution {arn} failed: {reason}"),
                    now,
                );
            }
        }
        Err(e) => {
            let status = status_mut(&mut object);
            if !status.contains_key("ackResourceMetadata") {
                status.insert("ackResourceMetadata".into(), metadata(None, region));
            }
            set_conditions(&mut object, &failure_conditions(&e), now);
            warn(
                store,
                &object,
                "PipelineExecution",
                "SyncFailed",
                &describe(&e),
                now,
            );
        }
    }
    if object != old {
        store.update(key, object);
    }
}

/// Writes SageMaker's view of an execution into the object's status, with
/// `ACK.ResourceSynced` False while it runs and True once it has ended, worded as the
/// controller's `SetSyncedCondition` words it.
fn mirror_execution(
    object: &mut Value,
    arn: Option<&str>,
    state: &ExecutionState,
    region: &str,
    now: DateTime<Utc>,
) {
    let meta = metadata(arn, region);
    let status = status_mut(object);
    status.insert("ackResourceMetadata".into(), meta);
    status.insert("pipelineExecutionStatus".into(), json!(state.status));
    match &state.failure_reason {
        Some(r) => {
            status.insert("failureReason".into(), json!(r));
        }
        None => {
            status.remove("failureReason");
        }
    }
    status.insert("creationTime".into(), json!(timestamp(state.created)));
    status.insert("lastModifiedTime".into(), json!(timestamp(state.modified)));
    let running = state.status == sagemaker::EXECUTING || state.status == sagemaker::STOPPING;
    let message = format!("PipelineExecution is in {} status.", state.status);
    set_conditions(
        object,
        &[Condition::new(
            SYNCED,
            if running { "False" } else { "True" },
            message,
        )],
        now,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROLE: &str = "arn:aws:iam::123456789012:role/SageMakerRole";

    struct Harness {
        cluster: ClusterState,
        sm: SageMaker,
        /// The role the controller acts as.
        role: Role,
        secs: i64,
    }

    impl Harness {
        fn new(with_crds: bool) -> Harness {
            let mut cluster = ClusterState::new(
                "ml",
                std::sync::Arc::new(crate::aws::kube::EksCloud),
                String::new(),
                String::new(),
                Vec::new(),
                "v1.31.8-sandbox".to_string(),
                Utc::now(),
            );
            if with_crds {
                for name in [PIPELINE_CRD, EXECUTION_CRD] {
                    cluster.store.insert_new(
                        ObjKey::new("apiextensions.k8s.io", "customresourcedefinitions", "", name),
                        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition"}),
                        Utc::now(),
                    );
                }
            }
            Harness {
                cluster,
                sm: SageMaker::default(),
                role: iam::role_with(&["arn:aws:iam::aws:policy/AmazonSageMakerFullAccess"], &[]),
                secs: 0,
            }
        }

        fn now(&self) -> DateTime<Utc> {
            DateTime::<Utc>::from_timestamp(1_700_000_000 + self.secs, 0).expect("valid time")
        }

        fn pass(&mut self, secs: i64) {
            self.secs = secs;
            let now = self.now();
            self.sm.settle(now);
            let who = Controller {
                role: Ok(&self.role),
            };
            settle(
                &mut self.cluster,
                &mut self.sm,
                &crate::aws::iam::Iam::default(),
                &who,
                "us-west-2",
                now,
                1.0,
                &Faults::default(),
            );
        }

        fn put(&mut self, resource: &str, object: Value) {
            let name = object["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let key = ObjKey::new(GROUP, resource, "default", &name);
            match self.cluster.store.get(&key).cloned() {
                Some(mut old) => {
                    old["spec"] = object["spec"].clone();
                    self.cluster.store.update(&key, old);
                }
                None => {
                    self.cluster.store.insert_new(key, object, self.now());
                }
            }
        }

        fn get(&self, resource: &str, name: &str) -> Option<Value> {
            self.cluster
                .store
                .get(&ObjKey::new(GROUP, resource, "default", name))
                .cloned()
        }

        fn delete(&mut self, resource: &str, name: &str) {
            let now = self.now();
            self.cluster
                .store
                .delete(&ObjKey::new(GROUP, resource, "default", name), now);
        }

        fn condition(&self, resource: &str, name: &str, kind: &str) -> Value {
            self.get(resource, name)
                .and_then(|o| {
                    o["status"]["conditions"]
                        .as_array()
                        .and_then(|c| c.iter().find(|c| c["type"] == kind).cloned())
                })
                .unwrap_or(Value::Null)
        }
    }

    fn definition(steps: usize) -> String {
        let steps: Vec<Value> = (0..steps)
            .map(|i| json!({"Name": format!("Step{i}"), "Type": "Training", "Arguments": {}}))
            .collect();
        json!({"Version": "2020-12-01", "Steps": steps}).to_string()
    }

    fn pipeline(name: &str, definition: &str) -> Value {
        json!({
            "apiVersion": API_VERSION, "kind": "Pipeline",
            "metadata": {"name": name},
            "spec": {"pipelineName": name, "roleARN": ROLE, "pipelineDefinition": definition,
                     "tags": [{"key": "team", "value": "ml"}]},
        })
    }

    fn execution(name: &str, pipeline: &str) -> Value {
        json!({
            "apiVersion": API_VERSION, "kind": "PipelineExecution",
            "metadata": {"name": name},
            "spec": {"pipelineName": pipeline, "pipelineExecutionDisplayName": name},
        })
    }

    #[test]
    fn nothing_happens_without_the_crds() {
        let mut h = Harness::new(false);
        h.put("pipelines", pipeline("p", &definition(1)));
        h.pass(0);
        assert!(h.sm.pipeline("us-west-2", "p").is_none());
        assert!(h
            .get("pipelines", "p")
            .is_some_and(|p| p["status"].is_null()));
    }

    #[test]
    fn a_controller_role_that_cannot_pass_the_pipeline_role_is_refused_as_sagemaker_refuses_it() {
        let mut h = Harness::new(true);
        // Allowed to create pipelines, not to pass their role.
        h.role = iam::role_with(
            &[],
            &[
                r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"sagemaker:*","Resource":"*"}]}"#,
            ],
        );
        h.put("pipelines", pipeline("train", &definition(1)));
        h.pass(0);
        assert!(h.sm.pipeline("us-west-2", "train").is_none());
        let recoverable = h.condition("pipelines", "train", RECOVERABLE);
        assert_eq!(recoverable["status"], "True");
        let message = recoverable["message"].as_str().unwrap_or_default();
        assert!(
            message.starts_with("AccessDeniedException: User: arn:aws:sts::123456789012:assumed-role/controller/ack-sagemaker-controller is not authorized to perform: iam:PassRole on resource: arn:aws:iam::123456789012:role/SageMakerRole"),
            "{message}"
        );
        assert_eq!(
            h.condition("pipelines", "train", SYNCED)["status"],
            "Unknown"
        );

        // Once the role may pass it, the next pass creates the pipeline.
        h.role = iam::role_with(&["arn:aws:iam::aws:policy/AmazonSageMakerFullAccess"], &[]);
        h.pass(5);
        assert!(h.sm.pipeline("us-west-2", "train").is_some());
        assert_eq!(h.condition("pipelines", "train", SYNCED)["status"], "True");
    }

    #[test]
    fn pipelines_are_created_synced_updated_and_deleted() {
        let mut h = Harness::new(true);
        h.put("pipelines", pipeline("train", &definition(1)));
        h.pass(0);
        let p = h.get("pipelines", "train").expect("stored");
        assert_eq!(p["metadata"]["finalizers"], json!([PIPELINE_FINALIZER]));
        let arn = "arn:aws:sagemaker:us-west-2:123456789012:pipeline/train";
        assert_eq!(
            p["status"]["ackResourceMetadata"],
            json!({"ownerAccountID": ACCOUNT, "region": "us-west-2", "arn": arn})
        );
        assert_eq!(p["status"]["pipelineStatus"], "Active");
        let synced = h.condition("pipelines", "train", SYNCED);
        assert_eq!(
            (synced["status"].clone(), synced["message"].clone()),
            (json!("True"), json!(SYNCED_MESSAGE))
        );
        let made =
            h.sm.pipeline("us-west-2", "train")
                .expect("created in SageMaker");
        assert!(made.tags.contains(&("team".into(), "ml".into())));
        assert!(made
            .tags
            .contains(&("services.k8s.aws/namespace".into(), "default".into())));

        let version = h.cluster.store.resource_version;
        h.pass(5);
        assert_eq!(
            h.cluster.store.resource_version, version,
            "nothing new, nothing written"
        );

        h.put("pipelines", pipeline("train", &definition(2)));
        h.pass(6);
        let updated = h.sm.pipeline("us-west-2", "train").expect("still there");
        assert_eq!(updated.version_id, 2);
        assert_eq!(updated.definition, definition(2));

        h.delete("pipelines", "train");
        h.pass(7);
        assert!(
            h.get("pipelines", "train").is_none(),
            "finalizer removed, object gone"
        );
        assert!(h.sm.pipeline("us-west-2", "train").is_none());
    }

    #[test]
    fn a_bad_definition_is_terminal_until_fixed() {
        let mut h = Harness::new(true);
        h.put(
            "pipelines",
            pipeline("bad", r#"{"Version": "2020-12-01", "Steps": []}"#),
        );
        h.pass(0);
        let terminal = h.condition("pipelines", "bad", TERMINAL);
        assert_eq!(terminal["status"], "True");
        assert_eq!(
            terminal["message"],
            "ValidationException: Invalid pipeline definition: Steps must not be empty"
        );
        assert_eq!(h.condition("pipelines", "bad", SYNCED)["status"], "False");
        let events = h.cluster.store.list("", "events", Some("default"));
        assert_eq!(events.len(), 1);
        let version = h.cluster.store.resource_version;
        h.pass(1);
        assert_eq!(
            h.cluster.store.resource_version, version,
            "the same failure writes nothing"
        );
        h.put("pipelines", pipeline("bad", &definition(1)));
        h.pass(2);
        assert_eq!(h.condition("pipelines", "bad", TERMINAL), Value::Null);
        assert_eq!(h.condition("pipelines", "bad", SYNCED)["status"], "True");
    }

    #[test]
    fn executions_wait_for_their_pipeline_then_mirror_sagemaker() {
        let mut h = Harness::new(true);
        h.put("pipelineexecutions", execution("run", "later"));
        h.pass(0);
        let recoverable = h.condition("pipelineexecutions", "run", RECOVERABLE);
        assert_eq!(recoverable["status"], "True");
        assert_eq!(
            recoverable["message"],
            "ResourceNotFound: Pipeline 'arn:aws:sagemaker:us-west-2:123456789012:pipeline/later' does not exist."
        );
        h.put("pipelines", pipeline("later", &definition(2)));
        h.pass(1);
        let run = h.get("pipelineexecutions", "run").expect("stored");
        assert_eq!(run["status"]["pipelineExecutionStatus"], "Executing");
        assert_eq!(
            h.condition("pipelineexecutions", "run", RECOVERABLE),
            Value::Null
        );
        let synced = h.condition("pipelineexecutions", "run", SYNCED);
        assert_eq!(
            (synced["status"].clone(), synced["message"].clone()),
            (
                json!("False"),
                json!("PipelineExecution is in Executing status.")
            )
        );
        let arn = run["status"]["ackResourceMetadata"]["arn"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(arn.contains(":pipeline/later/execution/"), "{arn}");
        h.pass(5);
        let run = h.get("pipelineexecutions", "run").expect("stored");
        assert_eq!(run["status"]["pipelineExecutionStatus"], "Succeeded");
        assert_eq!(
            h.condition("pipelineexecutions", "run", SYNCED)["status"],
            "True"
        );
        assert_eq!(
            run["status"]["ackResourceMetadata"]["arn"], arn,
            "one execution, not one per pass"
        );
    }

    #[test]
    fn deleting_a_running_execution_stops_it_first() {
        let mut h = Harness::new(true);
        h.put("pipelines", pipeline("p", &definition(5)));
        h.put("pipelineexecutions", execution("run", "p"));
        h.pass(0);
        let arn = h.get("pipelineexecutions", "run").expect("stored")["status"]
            ["ackResourceMetadata"]["arn"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        h.delete("pipelineexecutions", "run");
        h.pass(1);
        assert_eq!(
            h.sm.execution(&arn).map(|e| e.status),
            Some("Stopping".to_string())
        );
        assert!(
            h.get("pipelineexecutions", "run").is_some(),
            "held while stopping"
        );
        h.pass(3);
        assert_eq!(
            h.sm.execution(&arn).map(|e| e.status),
            Some("Stopped".to_string())
        );
        assert!(h.get("pipelineexecutions", "run").is_none());
    }

    #[test]
    fn the_chart_installs_established_crds_once_and_never_over_a_clients() {
        let dir = tempfile::tempdir().expect("temp dir");
        let processes = crate::k8s::processes::Processes::new(dir.path().to_path_buf());
        let ctx = SettleCtx {
            now: Utc::now(),
            scale: 0.0,
            processes: &processes,
            data_dir: dir.path(),
            spot_reclaims: None,
        };
        let mut h = Harness::new(false);
        assert_eq!(
            install_crds(&mut h.cluster, &ctx),
            [PIPELINE_CRD, EXECUTION_CRD]
        );
        for name in [PIPELINE_CRD, EXECUTION_CRD] {
            let crd = h
                .cluster
                .store
                .get(&ObjKey::new(
                    "apiextensions.k8s.io",
                    "customresourcedefinitions",
                    "",
                    name,
                ))
                .cloned()
                .expect("installed");
            let established = crd["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Established" && c["status"] == "True");
            assert!(established, "{crd:#}");
            assert_eq!(
                crd["metadata"]["managedFields"][0]["manager"],
                CAPABILITY_MANAGER
            );
            assert_eq!(crd["status"]["storedVersions"], json!(["v1alpha1"]));
        }
        let version = h.cluster.store.resource_version;
        assert!(install_crds(&mut h.cluster, &ctx).is_empty());
        assert_eq!(
            h.cluster.store.resource_version, version,
            "nothing rewritten"
        );

        // The controller reconciles what the installed CRDs serve.
        h.put("pipelines", pipeline("p", &definition(1)));
        h.pass(0);
        assert_eq!(h.condition("pipelines", "p", SYNCED)["status"], "True");

        // A cluster whose client installed the CRDs keeps its own.
        let mut h = Harness::new(true);
        assert_eq!(install_crds(&mut h.cluster, &ctx), Vec::<String>::new());
        let kept = h
            .cluster
            .store
            .get(&ObjKey::new(
                "apiextensions.k8s.io",
                "customresourcedefinitions",
                "",
                PIPELINE_CRD,
            ))
            .expect("still there");
        assert!(kept["metadata"]["labels"].is_null(), "{kept:#}");
    }

    #[test]
    fn the_chart_crds_describe_the_objects_the_controller_reads() {
        let [pipeline, execution] = crds();
        let version = |crd: &Value| crd["spec"]["versions"][0].clone();
        assert_eq!(pipeline["metadata"]["name"], PIPELINE_CRD);
        assert_eq!(execution["metadata"]["name"], EXECUTION_CRD);
        for (crd, kind, plural) in [
            (&pipeline, "Pipeline", "pipelines"),
            (&execution, "PipelineExecution", "pipelineexecutions"),
        ] {
            assert_eq!(
                format!(
                    "{}/{}",
                    crd["spec"]["group"].as_str().unwrap_or_default(),
                    version(crd)["name"].as_str().unwrap_or_default()
                ),
                API_VERSION
            );
            assert_eq!(crd["spec"]["names"]["kind"], kind);
            assert_eq!(crd["spec"]["names"]["plural"], plural);
            assert_eq!(crd["spec"]["names"]["listKind"], format!("{kind}List"));
            assert_eq!(crd["spec"]["scope"], "Namespaced");
            assert_eq!(version(crd)["subresources"], json!({"status": {}}));
            let status = &version(crd)["schema"]["openAPIV3Schema"]["properties"]["status"];
            assert_eq!(status["x-kubernetes-preserve-unknown-fields"], true);
        }
        let spec = |crd: &Value| {
            version(crd)["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"].clone()
        };
        let p = spec(&pipeline);
        for member in [
            "pipelineName",
            "pipelineDisplayName",
            "pipelineDescription",
            "pipelineDefinition",
            "roleARN",
        ] {
            assert_eq!(p[member]["type"], "string", "{member}");
        }
        assert_eq!(
            p["parallelismConfiguration"]["properties"]["maxParallelExecutionSteps"]["type"],
            "integer"
        );
        assert_eq!(p["tags"]["items"]["properties"]["key"]["type"], "string");
        let e = spec(&execution);
        for member in [
            "pipelineName",
            "pipelineExecutionDescription",
            "pipelineExecutionDisplayName",
        ] {
            assert_eq!(e[member]["type"], "string", "{member}");
        }
        assert_eq!(
            e["pipelineParameters"]["items"]["properties"]["value"]["type"],
            "string"
        );
        let columns = |crd: &Value| -> Vec<(String, String)> {
            version(crd)["additionalPrinterColumns"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| {
                    (
                        c["name"].as_str().unwrap_or_default().to_string(),
                        c["jsonPath"].as_str().unwrap_or_default().to_string(),
                    )
                })
                .collect()
        };
        assert!(columns(&pipeline).contains(&("STATUS".into(), ".status.pipelineStatus".into())));
        assert!(columns(&execution)
            .contains(&("STATUS".into(), ".status.pipelineExecutionStatus".into())));
    }

    #[test]
    fn conditions_keep_their_transition_time_while_unchanged() {
        let mut object = json!({});
        let now = Utc::now();
        let later = now + chrono::Duration::seconds(30);
        set_conditions(&mut object, &[Condition::new(SYNCED, "False", "a")], now);
        set_conditions(&mut object, &[Condition::new(SYNCED, "False", "b")], later);
        assert_eq!(
            object["status"]["conditions"][0]["lastTransitionTime"],
            timestamp(now)
        );
        set_conditions(&mut object, &[Condition::new(SYNCED, "True", "c")], later);
        assert_eq!(
            object["status"]["conditions"][0]["lastTransitionTime"],
            timestamp(later)
        );
    }
}
