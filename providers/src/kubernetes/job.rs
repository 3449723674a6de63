//! The `kubernetes_job` kind: a batch/v1 Job running one container to completion,
//! placed on spot, GPU or TPU capacity or a given node pool, with secrets kept in a
//! Secret of its own. The pod template is immutable, so changing anything in it
//! replaces the Job; parallelism, retries, deadlines and the Job's own labels and
//! annotations update in place.
//!
//! Placement is checked at plan: by `validate` once the cluster and node pool are
//! known, and by `validate_peers` against their specs while the same stack has yet to
//! create them, so a Job whose pods could never be scheduled is refused before apply.
//!
//! Id: `batch/v1/Job/<namespace>/<name>`, followed by `,v1/Secret/<namespace>/<name>-env`
//! when the Job has `secret_env`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine;
use futures::{AsyncBufReadExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::LogParams;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::connect::{flavor, Flavor};
use super::placement::{
    instance_type_refusal, peer_refusals, place, placement, pool_placement, Asked, ClusterSide,
    Intent, Placement, PoolKind, PoolPeer, Tpu,
};
use super::{
    apply, check_cluster, check_dns_label, check_dns_subdomain, check_labels, check_qualified_name,
    connect, delete_owned, id_of, list_batch, list_key, marked, needs_cluster, ownership, parse_id,
    preview_marked, refuse_strangers, string_map, user_entries, with_managed_label, ObjectRef,
    Ownership, Resources,
};
use crate::local::duration::parse_duration;
use crate::protocol::{is_unknown, UNKNOWN};
use crate::schema::Fields;
use crate::{Ctx, Health, Invalid, Kind, LineSink, Live, Peer, ProviderError};

/// The kind `kubernetes_job`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Job;

/// A claim mounted into the Job's container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct ClaimMount {
    /// The PersistentVolumeClaim to mount.
    pub claim: String,
    /// Where it appears in the container.
    pub mount_path: String,
    /// Mount read-only.
    #[serde(default)]
    pub read_only: bool,
    /// A directory of the volume to mount instead of its root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_path: Option<String>,
}

fn default_namespace() -> String {
    "default".into()
}

fn one() -> i64 {
    1
}

fn six() -> i64 {
    6
}

fn on_failure() -> String {
    "OnFailure".into()
}

fn created() -> String {
    "created".into()
}

fn thirty_minutes() -> String {
    "30m".into()
}

/// What a stack writes for a `kubernetes_job`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    #[terrain(doc = crate::kubernetes::CLUSTER_DOC, force_new)]
    pub cluster: Value,
    /// The Job's name, also its container's.
    #[terrain(force_new)]
    pub name: String,
    /// The namespace.
    #[serde(default = "default_namespace")]
    #[terrain(force_new)]
    pub namespace: String,
    /// The container image.
    #[terrain(force_new)]
    pub image: String,
    /// The container's entrypoint; the image's when empty.
    #[serde(default)]
    #[terrain(force_new)]
    pub command: Vec<String>,
    /// Arguments to the entrypoint.
    #[serde(default)]
    #[terrain(force_new)]
    pub args: Vec<String>,
    /// Environment variables.
    #[serde(default)]
    #[terrain(force_new)]
    pub env: BTreeMap<String, String>,
    /// Secret environment variables, kept in the Secret <name>-env and never shown.
    #[serde(default)]
    #[terrain(force_new, sensitive)]
    pub secret_env: BTreeMap<String, String>,
    /// How many pods run at once.
    #[serde(default = "one")]
    pub parallelism: i64,
    /// How many pods must succeed.
    #[serde(default = "one")]
    #[terrain(force_new)]
    pub completions: i64,
    /// Failed pods allowed before the Job fails (backoffLimit).
    #[serde(default = "six")]
    pub retries: i64,
    /// OnFailure (restart the container in place) or Never (a new pod per retry).
    #[serde(default = "on_failure")]
    #[terrain(force_new)]
    pub restart_policy: String,
    /// Delete the Job this long after it finishes (a later apply then runs it again).
    pub ttl_seconds_after_finished: Option<i64>,
    /// Fail the Job after running this long.
    pub active_deadline_seconds: Option<i64>,
    /// Claims mounted into the container.
    #[serde(default)]
    #[terrain(force_new)]
    pub volumes: Vec<ClaimMount>,
    /// Run on spot capacity.
    #[serde(default)]
    #[terrain(force_new)]
    pub spot: bool,
    /// NVIDIA GPUs per pod.
    #[serde(default)]
    #[terrain(force_new)]
    pub gpus: i64,
    /// The GPU accelerator (nvidia-tesla-t4, nvidia-l4…), or on EKS the instance type
    /// (g5.xlarge).
    #[terrain(force_new)]
    pub gpu_type: Option<String>,
    /// A TPU slice to run on (GKE).
    #[terrain(force_new)]
    pub tpu: Option<Tpu>,
    /// A node pool's placement output ("${gke_node_pool.gpu.placement}") to run on.
    #[terrain(force_new, any)]
    pub node_pool: Option<Value>,
    /// CPU and memory per pod.
    #[terrain(force_new)]
    pub resources: Option<Resources>,
    /// Labels on the Job.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Annotations on the Job.
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    /// Labels on the Job's pods.
    #[serde(default)]
    #[terrain(force_new)]
    pub pod_labels: BTreeMap<String, String>,
    /// Annotations on the Job's pods.
    #[serde(default)]
    #[terrain(force_new)]
    pub pod_annotations: BTreeMap<String, String>,
    /// The Kubernetes service account the pods run as (default: the namespace's
    /// `default`); on GKE with Workload Identity, who they are to Google (see
    /// gcp_iam_member's kubernetes_service_account).
    #[terrain(force_new)]
    pub service_account: Option<String>,
    /// created (return once applied) or complete (follow the Job until it succeeds or
    /// fails).
    #[serde(default = "created")]
    pub wait: String,
    /// How long wait = "complete" may take (e.g. 30m, 2h).
    #[serde(default = "thirty_minutes")]
    pub wait_timeout: String,
}

impl Spec {
    fn secret_name(&self) -> String {
        format!("{}-env", self.name)
    }

    fn job_ref(&self) -> ObjectRef {
        ObjectRef::new("batch/v1", "Job", Some(&self.namespace), &self.name)
    }

    fn refs(&self) -> Vec<ObjectRef> {
        let mut refs = vec![self.job_ref()];
        if !self.secret_env.is_empty() {
            refs.push(ObjectRef::new(
                "v1",
                "Secret",
                Some(&self.namespace),
                &self.secret_name(),
            ));
        }
        refs
    }

    fn intent(&self) -> Intent {
        Intent {
            spot: self.spot,
            gpus: self.gpus,
            gpu_type: self.gpu_type.clone(),
            tpu: self.tpu.clone(),
            node_pool: self.node_pool.clone(),
        }
    }

    /// Whether placement must wait for values known only after apply (the cluster's
    /// flavor, the node pool).
    fn placement_unknown(&self) -> bool {
        let intent = self.intent();
        let needs_flavor = intent.spot || intent.gpus > 0 || intent.tpu.is_some();
        (needs_flavor && is_unknown(&self.cluster))
            || self.node_pool.as_ref().is_some_and(is_unknown)
    }

    fn timeout(&self) -> Duration {
        parse_duration(&self.wait_timeout).unwrap_or(Duration::from_secs(30 * 60))
    }
}

/// What `kubernetes_job` reports after apply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Outputs {
    /// The Job's name.
    pub job_name: String,
    /// The Job's namespace.
    pub namespace: String,
    /// The Job's uid.
    pub uid: String,
    /// Active, Complete or Failed.
    pub status: String,
    /// Pods that succeeded.
    pub succeeded: i64,
    /// Pods that failed.
    pub failed: i64,
}

const RESTART_POLICIES: &[&str] = &["OnFailure", "Never"];
const WAITS: &[&str] = &["created", "complete"];
const ID_SHAPE: &str = "batch/v1/Job/NAMESPACE/NAME[,v1/Secret/NAMESPACE/NAME-env]";
/// Labels the Job controller puts on its pods; not the stack's.
const CONTROLLER_LABELS: &[&str] = &[
    "batch.kubernetes.io/controller-uid",
    "batch.kubernetes.io/job-name",
    "controller-uid",
    "job-name",
];
const JOB_NAME_LABEL: &str = "batch.kubernetes.io/job-name";
const DELETE_TIMEOUT: Duration = Duration::from_secs(5 * 60);
/// How many of a failed pod's last log lines a failure shows.
const FAILURE_LOG_LINES: i64 = 20;

/// A volume name (a DNS-1123 label) for a claim.
fn volume_name(claim: &str, taken: &BTreeSet<String>) -> String {
    let base: String = claim
        .replace('.', "-")
        .chars()
        .take(56)
        .collect::<String>()
        .trim_end_matches('-')
        .to_string();
    let base = if base.is_empty() {
        "data".to_string()
    } else {
        base
    };
    let mut name = base.clone();
    let mut n = 1;
    while taken.contains(&name) {
        n += 1;
        name = format!("{base}-{n}");
    }
    name
}

/// The pod's volumes and the container's mounts, one volume per distinct claim.
fn volumes(mounts: &[ClaimMount]) -> (Vec<Value>, Vec<Value>) {
    let mut names: BTreeMap<&str, String> = BTreeMap::new();
    let mut taken = BTreeSet::new();
    let mut pod_volumes = Vec::new();
    let mut container_mounts = Vec::new();
    for m in mounts {
        let name = names
            .entry(m.claim.as_str())
            .or_insert_with(|| {
                let name = volume_name(&m.claim, &taken);
                taken.insert(name.clone());
                pod_volumes
                    .push(json!({"name": name, "persistentVolumeClaim": {"claimName": m.claim}}));
                name
            })
            .clone();
        let mut mount = json!({"name": name, "mountPath": m.mount_path});
        if m.read_only {
            mount["readOnly"] = json!(true);
        }
        if let Some(sub) = &m.sub_path {
            mount["subPath"] = json!(sub);
        }
        container_mounts.push(mount);
    }
    (pod_volumes, container_mounts)
}

/// The placement, or the unknown marker where it waits on values known after apply.
fn resolved_placement(spec: &Spec) -> Result<Option<Placement>, ProviderError> {
    if spec.placement_unknown() {
        return Ok(None);
    }
    placement(&flavor(&spec.cluster), &spec.intent())
        .map(Some)
        .map_err(|m| ProviderError::Unsupported(format!("{}: placement: {m}", Job::KIND)))
}

/// The Job (and its Secret, when it has secret env), as applied (without the address
/// annotation).
pub fn objects(spec: &Spec) -> Result<Vec<Value>, ProviderError> {
    let placement = resolved_placement(spec)?;
    let mut container = json!({"name": spec.name, "image": spec.image});
    if !spec.command.is_empty() {
        container["command"] = json!(spec.command);
    }
    if !spec.args.is_empty() {
        container["args"] = json!(spec.args);
    }
    if !spec.env.is_empty() {
        container["env"] = Value::Array(
            spec.env
                .iter()
                .map(|(k, v)| json!({"name": k, "value": v}))
                .collect(),
        );
    }
    if !spec.secret_env.is_empty() {
        container["envFrom"] = json!([{"secretRef": {"name": spec.secret_name()}}]);
    }
    let limits = placement
        .as_ref()
        .map(|p| p.limits.clone())
        .unwrap_or_default();
    if let Some(resources) = Resources::container(spec.resources.as_ref(), &limits) {
        container["resources"] = resources;
    }
    let (pod_volumes, mounts) = volumes(&spec.volumes);
    if !mounts.is_empty() {
        container["volumeMounts"] = Value::Array(mounts);
    }
    let mut pod = json!({"restartPolicy": spec.restart_policy, "containers": [container]});
    if let Some(account) = &spec.service_account {
        pod["serviceAccountName"] = json!(account);
    }
    if !pod_volumes.is_empty() {
        pod["volumes"] = Value::Array(pod_volumes);
    }
    match &placement {
        Some(p) => {
            if !p.node_selector.is_empty() {
                pod["nodeSelector"] = string_map(&p.node_selector);
            }
            if !p.tolerations.is_empty() {
                pod["tolerations"] = Value::Array(p.tolerations.clone());
            }
        }
        None => {
            pod["nodeSelector"] = json!(UNKNOWN);
            pod["tolerations"] = json!(UNKNOWN);
        }
    }
    let mut template = json!({"spec": pod});
    if !spec.pod_labels.is_empty() {
        template["metadata"]["labels"] = string_map(&spec.pod_labels);
    }
    if !spec.pod_annotations.is_empty() {
        template["metadata"]["annotations"] = string_map(&spec.pod_annotations);
    }
    let mut job_spec = json!({
        "parallelism": spec.parallelism,
        "completions": spec.completions,
        "backoffLimit": spec.retries,
        "template": template,
    });
    if let Some(ttl) = spec.ttl_seconds_after_finished {
        job_spec["ttlSecondsAfterFinished"] = json!(ttl);
    }
    if let Some(deadline) = spec.active_deadline_seconds {
        job_spec["activeDeadlineSeconds"] = json!(deadline);
    }
    let mut metadata = json!({"name": spec.name, "namespace": spec.namespace, "labels": with_managed_label(&spec.labels)});
    if !spec.annotations.is_empty() {
        metadata["annotations"] = string_map(&spec.annotations);
    }
    let mut out = vec![
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": job_spec}),
    ];
    if !spec.secret_env.is_empty() {
        let b64 = base64::engine::general_purpose::STANDARD;
        let data: serde_json::Map<String, Value> = spec
            .secret_env
            .iter()
            .map(|(k, v)| (k.clone(), json!(b64.encode(v))))
            .collect();
        out.push(json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": spec.secret_name(), "namespace": spec.namespace, "labels": with_managed_label(&BTreeMap::new())},
            "type": "Opaque",
            "data": data,
        }));
    }
    Ok(out)
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// The secret env a live Secret holds.
fn secret_env_of(secret: Option<&Value>) -> BTreeMap<String, String> {
    let b64 = base64::engine::general_purpose::STANDARD;
    secret
        .and_then(|s| s["data"].as_object())
        .map(|data| {
            data.iter()
                .map(|(k, v)| {
                    let decoded = v
                        .as_str()
                        .and_then(|t| b64.decode(t).ok())
                        .and_then(|b| String::from_utf8(b).ok())
                        .unwrap_or_default();
                    (k.clone(), decoded)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The spec a live Job (and Secret) show. Placement and waiting come from `prior`: the
/// pod template cannot change in place, and waiting is terrain's own behaviour.
fn spec_of(job: &Value, secret: Option<&Value>, prior: &Spec) -> Spec {
    let s = &job["spec"];
    let pod = &s["template"]["spec"];
    let container = &pod["containers"][0];
    let claims: BTreeMap<&str, &str> = pod["volumes"]
        .as_array()
        .map(|vs| {
            vs.iter()
                .filter_map(|v| {
                    Some((
                        v["name"].as_str()?,
                        v["persistentVolumeClaim"]["claimName"].as_str()?,
                    ))
                })
                .collect()
        })
        .unwrap_or_default();
    let volumes = container["volumeMounts"]
        .as_array()
        .map(|ms| {
            ms.iter()
                .filter_map(|m| {
                    Some(ClaimMount {
                        claim: claims.get(m["name"].as_str()?)?.to_string(),
                        mount_path: m["mountPath"].as_str()?.to_string(),
                        read_only: m["readOnly"].as_bool().unwrap_or(false),
                        sub_path: m["subPath"]
                            .as_str()
                            .filter(|p| !p.is_empty())
                            .map(str::to_string),
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    let env = container["env"]
        .as_array()
        .map(|es| {
            es.iter()
                .filter_map(|e| {
                    Some((
                        e["name"].as_str()?.to_string(),
                        e["value"].as_str().unwrap_or_default().to_string(),
                    ))
                })
                .collect()
        })
        .unwrap_or_default();
    let mut pod_labels = user_entries(&s["template"]["metadata"]["labels"], &prior.pod_labels);
    pod_labels.retain(|k, _| !CONTROLLER_LABELS.contains(&k.as_str()));
    let mut labels = user_entries(&job["metadata"]["labels"], &prior.labels);
    labels.retain(|k, _| !CONTROLLER_LABELS.contains(&k.as_str()));
    Spec {
        cluster: prior.cluster.clone(),
        name: job["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        namespace: job["metadata"]["namespace"]
            .as_str()
            .unwrap_or("default")
            .to_string(),
        image: container["image"].as_str().unwrap_or_default().to_string(),
        command: strings(&container["command"]),
        args: strings(&container["args"]),
        env,
        secret_env: secret_env_of(secret),
        parallelism: s["parallelism"].as_i64().unwrap_or(1),
        completions: s["completions"].as_i64().unwrap_or(1),
        retries: s["backoffLimit"].as_i64().unwrap_or(6),
        restart_policy: pod["restartPolicy"]
            .as_str()
            .unwrap_or("OnFailure")
            .to_string(),
        ttl_seconds_after_finished: s["ttlSecondsAfterFinished"].as_i64(),
        active_deadline_seconds: s["activeDeadlineSeconds"].as_i64(),
        volumes,
        spot: prior.spot,
        gpus: prior.gpus,
        gpu_type: prior.gpu_type.clone(),
        tpu: prior.tpu.clone(),
        node_pool: prior.node_pool.clone(),
        resources: Resources::from_live(&container["resources"], prior.resources.as_ref()),
        labels,
        annotations: user_entries(&job["metadata"]["annotations"], &prior.annotations),
        pod_labels,
        pod_annotations: user_entries(
            &s["template"]["metadata"]["annotations"],
            &prior.pod_annotations,
        ),
        service_account: match pod["serviceAccountName"].as_str() {
            // The API server fills in `default`; a stack that names none keeps it unnamed.
            Some("default") if prior.service_account.is_none() => None,
            other => other.map(str::to_string),
        },
        wait: prior.wait.clone(),
        wait_timeout: prior.wait_timeout.clone(),
    }
}

fn status_of(job: &Value) -> &'static str {
    match apply::job_finished(job) {
        Ok(true) => "Complete",
        Ok(false) => "Active",
        Err(_) => "Failed",
    }
}

fn outputs_of(job: &Value) -> Outputs {
    let status = &job["status"];
    Outputs {
        job_name: job["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        namespace: job["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        uid: job["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        status: status_of(job).to_string(),
        succeeded: status["succeeded"].as_i64().unwrap_or(0),
        failed: status["failed"].as_i64().unwrap_or(0),
    }
}

/// The resource a live Job (and its Secret) show under `id`: what `read`, `read_batch`
/// and apply report.
fn live_of(id: &str, job: &Value, secret: Option<&Value>, prior: &Spec) -> Live<Job> {
    Live {
        id: id.to_string(),
        spec: spec_of(job, secret, prior),
        outputs: outputs_of(job),
    }
}

/// What reading `id` with a list takes: the cluster and the Job. `None` for ids a list
/// cannot answer (read alone): a Job without a namespace (read in the client's default
/// one), or a first object that is not a Job, or a second that is not a Secret of the
/// Job's namespace.
fn job_plan(id: &str, prior: &Spec) -> Option<(Value, ObjectRef)> {
    let refs = parse_id(Job::KIND, id, ID_SHAPE).ok()?;
    let (job, rest) = refs.split_first()?;
    let is = |r: &ObjectRef, api_version: &str, kind: &str| {
        r.api_version == api_version && r.kind == kind && r.namespace.is_some()
    };
    let fits = is(job, "batch/v1", "Job")
        && match rest {
            [] => true,
            [secret] => is(secret, "v1", "Secret") && secret.namespace == job.namespace,
            _ => false,
        };
    fits.then(|| (prior.cluster.clone(), job.clone()))
}

/// The Secret of `id` (its second object), for the list of the Job's namespace's
/// Secrets; `None` when the Job has none or `id` is read alone.
fn secret_plan(id: &str, prior: &Spec) -> Option<(Value, ObjectRef)> {
    let (cluster, _) = job_plan(id, prior)?;
    let refs = parse_id(Job::KIND, id, ID_SHAPE).ok()?;
    Some((cluster, refs.get(1)?.clone()))
}

/// `Complete (1/1 succeeded)`, `Running (1 active)`, `Failed: BackoffLimitExceeded`.
fn health_line(job: &Value) -> String {
    let status = &job["status"];
    let count = |key: &str| status[key].as_i64().unwrap_or(0);
    match apply::job_finished(job) {
        Ok(true) => format!(
            "Complete ({}/{} succeeded)",
            count("succeeded"),
            job["spec"]["completions"].as_i64().unwrap_or(1)
        ),
        Ok(false) => format!("Running ({} active)", count("active")),
        Err(reason) => format!("Failed: {}", reason.split(':').next().unwrap_or("Failed")),
    }
}

/// Progress while following a Job: `running: 1 active, 0 succeeded`.
fn progress_line(job: &Value) -> String {
    let status = &job["status"];
    let count = |key: &str| status[key].as_i64().unwrap_or(0);
    let mut line = format!(
        "running: {} active, {} succeeded",
        count("active"),
        count("succeeded")
    );
    if count("failed") > 0 {
        line.push_str(&format!(", {} failed", count("failed")));
    }
    line
}

fn pods_api(client: &crate::kubernetes::connect::Conn, namespace: &str) -> kube::Api<Pod> {
    kube::Api::namespaced(client.kube(), namespace)
}

/// The Job's pods, oldest first.
async fn job_pods(
    client: &crate::kubernetes::connect::Conn,
    spec_namespace: &str,
    job: &str,
) -> Result<Vec<Value>, ProviderError> {
    let mut pods = apply::list(
        client,
        "v1",
        "Pod",
        Some(spec_namespace),
        &format!("{JOB_NAME_LABEL}={job}"),
    )
    .await?;
    pods.sort_by(|a, b| {
        a["metadata"]["creationTimestamp"]
            .as_str()
            .cmp(&b["metadata"]["creationTimestamp"].as_str())
    });
    Ok(pods)
}

/// The last log lines of the Job's most recent failed pod (else its most recent pod),
/// for a failure message; empty when there are none to show.
async fn failure_logs(
    client: &crate::kubernetes::connect::Conn,
    namespace: &str,
    job: &str,
) -> String {
    let Ok(pods) = job_pods(client, namespace, job).await else {
        return String::new();
    };
    let failed_container = |p: &&Value| {
        p["status"]["phase"] == "Failed"
            || p["status"]["containerStatuses"]
                .as_array()
                .is_some_and(|cs| {
                    cs.iter().any(|c| {
                        c["lastState"]["terminated"]["exitCode"]
                            .as_i64()
                            .is_some_and(|code| code != 0)
                    })
                })
    };
    let Some(pod) = pods.iter().rev().find(failed_container).or(pods.last()) else {
        return String::new();
    };
    let name = pod["metadata"]["name"].as_str().unwrap_or_default();
    let api = pods_api(client, namespace);
    let tail = |previous: bool| LogParams {
        tail_lines: Some(FAILURE_LOG_LINES),
        previous,
        ..LogParams::default()
    };
    // With restartPolicy OnFailure the failed run is the container's previous one.
    let mut text = api.logs(name, &tail(false)).await.unwrap_or_default();
    if text.trim().is_empty() {
        text = api.logs(name, &tail(true)).await.unwrap_or_default();
    }
    if text.trim().is_empty() {
        return String::new();
    }
    format!("\nlast log lines of pod {name}:\n{}", text.trim_end())
}

async fn apply_and_wait(ctx: &Ctx, spec: &Spec, create: bool) -> Result<Live<Job>, ProviderError> {
    let client = connect::client(ctx, &spec.cluster).await?;
    let objects = marked(objects(spec)?, &ctx.address);
    if create {
        refuse_strangers(&client, &objects, Job::KIND, &ctx.address).await?;
    }
    // The Secret first, so the Job's pods find it when they start. The stack is the
    // source of truth for every field terrain sets, so fields taken over by hand
    // (`kubectl edit`) are taken back.
    let ordered: Vec<Value> = objects.iter().rev().cloned().collect();
    let applied = apply::apply_all(&client, &ordered, true).await?;
    let mut job = applied.last().map(|a| a.object.clone()).unwrap_or_default();
    if spec.wait == "complete" {
        let what = format!("Job {}/{} to complete", spec.namespace, spec.name);
        let progress = apply::Progress::new(ctx);
        let waited = apply::wait_until(
            &client,
            "batch/v1",
            "Job",
            Some(&spec.namespace),
            &spec.name,
            ctx,
            spec.timeout(),
            &what,
            |j| {
                let finished = apply::job_finished(j);
                if finished == Ok(false) {
                    progress.report(&progress_line(j));
                }
                finished
            },
        )
        .await;
        job = match waited {
            Ok(j) => j,
            Err(ProviderError::Failed { call, message }) => {
                let logs = failure_logs(&client, &spec.namespace, &spec.name).await;
                let failed = ProviderError::Failed {
                    call,
                    message: format!("{message}{logs}"),
                };
                // A new Job that failed stays for inspection, tainted: applying the same
                // spec again would not run it again, so the next apply replaces it.
                return Err(if create {
                    ProviderError::tainted(id_of(&spec.refs()), failed)
                } else {
                    failed
                });
            }
            Err(e) => return Err(e),
        };
    }
    let secret = match spec.secret_env.is_empty() {
        true => None,
        false => applied.first().map(|a| a.object.clone()),
    };
    Ok(live_of(&id_of(&spec.refs()), &job, secret.as_ref(), spec))
}

/// Streams one pod's log lines into `sink`, prefixed with the pod's name when the Job
/// has several pods. A follow that the connection cuts short is resumed, skipping the
/// lines already sent (logs are append-only).
async fn stream_pod(
    api: kube::Api<Pod>,
    pod: String,
    prefix: bool,
    follow: bool,
    sink: LineSink,
) -> Result<(), ProviderError> {
    let call = format!("kubernetes logs pods/{pod}");
    let mut sent = 0usize;
    loop {
        let params = LogParams {
            follow,
            ..LogParams::default()
        };
        let stream = api
            .log_stream(&pod, &params)
            .await
            .map_err(|e| apply::api_error(call.clone(), e))?;
        let mut lines = stream.lines();
        let mut seen = 0usize;
        let ended = loop {
            match lines.try_next().await {
                Ok(Some(line)) => {
                    seen += 1;
                    if seen > sent {
                        sent = seen;
                        if prefix {
                            sink(&format!("[{pod}] {line}"));
                        } else {
                            sink(&line);
                        }
                    }
                }
                Ok(None) => break true,
                Err(_) if follow => break false,
                Err(e) => return Err(ProviderError::api(call, 0, "", e.to_string())),
            }
        };
        if ended || !follow {
            return Ok(());
        }
        let still_running = api
            .get_opt(&pod)
            .await
            .ok()
            .flatten()
            .is_some_and(|p| p.status.and_then(|s| s.phase).as_deref() == Some("Running"));
        if !still_running {
            return Ok(());
        }
    }
}

fn started(pod: &Value) -> bool {
    matches!(
        pod["status"]["phase"].as_str(),
        Some("Running" | "Succeeded" | "Failed")
    )
}

/// The node pool of the same stack that `node_pool` names: the one pool among the
/// peers while `node_pool` is unknown (with several, which one it names is not known
/// offline), else the pool of that name.
fn pool_peer<'a>(node_pool: &Value, peers: &'a [Peer]) -> Option<&'a Peer> {
    let mut pools = peers
        .iter()
        .filter(|p| matches!(p.kind.as_str(), "gke_node_pool" | "eks_node_group"));
    let found = match node_pool {
        Value::Null => return None,
        v if is_unknown(v) => pools.next()?,
        v => {
            let name = v["pool"].as_str()?;
            let mut named = pools.filter(|p| p.spec["name"] == name);
            let found = named.next()?;
            if named.next().is_some() {
                return None;
            }
            return Some(found);
        }
    };
    if pools.next().is_some() {
        return None;
    }
    Some(found)
}

#[async_trait]
impl Kind for Job {
    type Spec = Spec;
    type Outputs = Outputs;
    const KIND: &'static str = "kubernetes_job";
    const PROVIDER: &'static str = "kubernetes";
    const WRITES: crate::protocol::Writes = crate::protocol::Writes::AsManifest;
    const RENDERS: bool = true;
    const BILLS: bool = true;

    /// On GKE Autopilot, a Job's pods bill by what they request while they run (from
    /// none, once done, to `parallelism` pods); elsewhere its nodes bill, as their pool.
    fn usage(spec: &Value, _config: &Value, peers: &[Peer]) -> Vec<crate::Usage> {
        let autopilot = ClusterSide::of(&spec["cluster"], peers)
            .is_some_and(|c| c.flavor == Flavor::Gke { autopilot: true });
        if !autopilot {
            return Vec::new();
        }
        let location = crate::usage::known(&spec["cluster"]["location"])
            .map(str::to_string)
            .or_else(|| {
                peers
                    .iter()
                    .find(|p| p.kind == "gke_cluster")
                    .and_then(|p| crate::usage::known(&p.spec["location"]).map(str::to_string))
            })
            .unwrap_or_default();
        let region = crate::usage::gcp_region(&location);
        let pods = spec["parallelism"].as_f64().unwrap_or(1.0);
        // Autopilot's defaults for a general-purpose pod that asks for nothing.
        let request = |name: &str, default: f64| {
            crate::usage::known(&spec["resources"][name])
                .and_then(super::quantity_value)
                .unwrap_or(default)
        };
        let cpu = request("cpu", 0.5);
        let gib = request("memory", 2.0 * 1024.0 * 1024.0 * 1024.0) / (1024.0 * 1024.0 * 1024.0);
        let spot = spec["spot"] == true;
        let pods_text = format!("0–{pods} pods while running");
        let mut out = vec![
            crate::Usage::fixed(
                "autopilot.vcpu",
                "",
                &region,
                0.0,
                format!("{pods_text} × {cpu} vCPU"),
            )
            .ranging(0.0, pods * cpu)
            .spot(spot),
            crate::Usage::fixed(
                "autopilot.memory",
                "",
                &region,
                0.0,
                format!("{pods_text} × {gib} GiB"),
            )
            .ranging(0.0, pods * gib)
            .spot(spot),
        ];
        let gpus = spec["gpus"].as_f64().unwrap_or(0.0);
        if gpus > 0.0 {
            let kind = crate::usage::known(&spec["gpu_type"]).unwrap_or("nvidia-tesla-t4");
            out.push(
                crate::Usage::fixed(
                    "autopilot.gpu",
                    kind,
                    &region,
                    0.0,
                    format!("{pods_text} × {gpus} {kind}"),
                )
                .ranging(0.0, pods * gpus)
                .spot(spot),
            );
        }
        out
    }

    fn validate(spec: &Spec, _config: &Value) -> Vec<Invalid> {
        let mut out = Vec::new();
        check_cluster(&spec.cluster, &mut out);
        // Labels carry the Job's name (job-name), so it must fit a label.
        if let Err(m) = check_dns_label(&spec.name) {
            out.push(Invalid::at("name", m));
        }
        if let Err(m) = check_dns_label(&spec.namespace) {
            out.push(Invalid::at("namespace", m));
        }
        if spec.image.trim().is_empty() || spec.image.contains(char::is_whitespace) {
            out.push(Invalid::at(
                "image",
                format!("{:?} is not an image reference", spec.image),
            ));
        }
        let env_name = |k: &str| {
            let mut chars = k.chars();
            chars
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == '.' || c == '-')
                && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
        };
        for (field, map) in [("env", &spec.env), ("secret_env", &spec.secret_env)] {
            if let Some(bad) = map.keys().find(|k| !env_name(k)) {
                out.push(Invalid::at(
                    field,
                    format!("{bad:?} is not a valid environment variable name"),
                ));
            }
        }
        if let Some(both) = spec.env.keys().find(|k| spec.secret_env.contains_key(*k)) {
            out.push(Invalid::at(
                "secret_env",
                format!("{both:?} is also in env; set it in one of them"),
            ));
        }
        for (field, value, min) in [
            ("parallelism", spec.parallelism, 1),
            ("completions", spec.completions, 1),
            ("retries", spec.retries, 0),
            ("gpus", spec.gpus, 0),
        ] {
            if value < min {
                out.push(Invalid::at(
                    field,
                    format!("must be {min} or more, got {value}"),
                ));
            }
        }
        if !RESTART_POLICIES.contains(&spec.restart_policy.as_str()) {
            out.push(Invalid::at(
                "restart_policy",
                format!(
                    "{:?} is not a Job restart policy; use \"OnFailure\" or \"Never\"",
                    spec.restart_policy
                ),
            ));
        }
        if spec.ttl_seconds_after_finished.is_some_and(|t| t < 0) {
            out.push(Invalid::at(
                "ttl_seconds_after_finished",
                "must be 0 or more",
            ));
        }
        if spec.active_deadline_seconds.is_some_and(|t| t < 1) {
            out.push(Invalid::at("active_deadline_seconds", "must be 1 or more"));
        }
        let mut paths = BTreeSet::new();
        for (i, v) in spec.volumes.iter().enumerate() {
            if let Err(m) = check_dns_subdomain(&v.claim) {
                out.push(Invalid::at(&format!("volumes.{i}.claim"), m));
            }
            if !v.mount_path.starts_with('/') {
                out.push(Invalid::at(
                    &format!("volumes.{i}.mount_path"),
                    format!("{:?} is not an absolute path", v.mount_path),
                ));
            } else if !paths.insert(v.mount_path.as_str()) {
                out.push(Invalid::at(
                    &format!("volumes.{i}.mount_path"),
                    format!("{:?} is mounted twice", v.mount_path),
                ));
            }
            if v.sub_path
                .as_deref()
                .is_some_and(|p| p.starts_with('/') || p.split('/').any(|part| part == ".."))
            {
                out.push(Invalid::at(
                    &format!("volumes.{i}.sub_path"),
                    "must be a relative path inside the volume, without ..",
                ));
            }
        }
        if let Some(resources) = &spec.resources {
            resources.check("resources", &mut out);
        }
        for (field, map) in [("labels", &spec.labels), ("pod_labels", &spec.pod_labels)] {
            if let Err(m) = check_labels(map) {
                out.push(Invalid::at(field, m));
            }
        }
        for (field, map) in [
            ("annotations", &spec.annotations),
            ("pod_annotations", &spec.pod_annotations),
        ] {
            if let Some(Err(m)) = map
                .keys()
                .map(|k| check_qualified_name(k).map_err(|m| format!("key {k:?}: {m}")))
                .find(Result::is_err)
            {
                out.push(Invalid::at(field, m));
            }
        }
        if !WAITS.contains(&spec.wait.as_str()) {
            out.push(Invalid::at(
                "wait",
                format!(
                    "{:?} is not a wait mode; use \"created\" or \"complete\"",
                    spec.wait
                ),
            ));
        }
        if parse_duration(&spec.wait_timeout).is_none() {
            out.push(Invalid::at(
                "wait_timeout",
                format!(
                    "{:?} is not a duration; write e.g. \"30m\" or \"2h\"",
                    spec.wait_timeout
                ),
            ));
        }
        // Negative GPUs are reported above; placement would only say it again.
        if !spec.placement_unknown() && spec.gpus >= 0 {
            if let Err(r) = place(&flavor(&spec.cluster), &spec.intent()) {
                out.push(Invalid::at(&r.field, r.message));
            }
        }
        out
    }

    fn validate_peers(spec: &Value, peers: &[Peer]) -> Vec<Invalid> {
        // `validate` places the Job once the cluster's flavor and the node pool are
        // known. When the cluster or the pool is created by the same stack they are
        // not, and the plan must still promise a Job that can be scheduled: their
        // specs (the peers) say what they will be.
        let asked = Asked::of(spec);
        let pool_peer = pool_peer(&spec["node_pool"], peers);
        let pool = pool_peer.and_then(PoolPeer::of);
        let needs_flavor = spec["spot"] == true
            || spec["gpus"].as_i64().is_some_and(|n| n > 0)
            || !spec["tpu"].is_null();
        let waits =
            (needs_flavor && is_unknown(&spec["cluster"])) || is_unknown(&spec["node_pool"]);
        let placed_by_validate = !waits;
        if placed_by_validate {
            // All but one rule ran in `validate`: the group's `placement` output names
            // only its first instance type, so only its spec can refuse the others.
            return pool
                .as_ref()
                .and_then(|p| instance_type_refusal(&asked, p))
                .map(|r| Invalid::at(&r.field, r.message))
                .into_iter()
                .collect();
        }
        let cluster = ClusterSide::of(&spec["cluster"], peers);
        let mut refusals = peer_refusals(&asked, cluster.as_ref(), pool.as_ref());
        // Then the placement apply will compute, with the pool's `placement` output
        // computed from its spec: whatever apply would refuse, the plan refuses, even
        // where no rule above names the peer.
        let flavor = cluster
            .map(|c| c.flavor)
            .or(match pool.as_ref().map(|p| p.kind) {
                Some(PoolKind::EksNodeGroup) => Some(Flavor::Eks),
                // Node pools exist on Standard clusters only.
                Some(PoolKind::GkeNodePool) => Some(Flavor::Gke { autopilot: false }),
                None => None,
            });
        let node_pool = match &spec["node_pool"] {
            Value::Null => Some(None),
            v if is_unknown(v) => pool_peer.and_then(pool_placement).map(Some),
            v => Some(Some(v.clone())),
        };
        // A pool of the other cloud is refused above; placing on it would only add noise.
        let other_cloud = refusals.iter().any(|r| r.field == "node_pool");
        let intent = node_pool
            .and_then(|p| Intent::known(spec, p))
            .filter(|_| !other_cloud);
        if let (Some(flavor), Some(intent)) = (flavor, intent) {
            if let Err(r) = place(&flavor, &intent) {
                let fresh = !refusals.iter().any(|known| known.field == r.field);
                if fresh && !r.message.contains(UNKNOWN) {
                    refusals.push(r);
                }
            }
        }
        refusals
            .into_iter()
            .map(|r| Invalid::at(&r.field, r.message))
            .collect()
    }

    fn render(spec: &Spec, _config: &Value) -> Option<Result<Vec<Value>, ProviderError>> {
        Some(objects(spec))
    }

    async fn read(
        &self,
        ctx: &Ctx,
        id: &str,
        prior: Option<&Spec>,
    ) -> Result<Option<Live<Self>>, ProviderError> {
        let refs = parse_id(Self::KIND, id, ID_SHAPE)?;
        let prior = prior.ok_or_else(|| needs_cluster(Self::KIND))?;
        let client = connect::client(ctx, &prior.cluster).await?;
        let Some(job) = apply::get_ref(&client, &refs[0]).await? else {
            return Ok(None);
        };
        if matches!(ownership(&job, &ctx.address), Ownership::Other(_)) {
            return Ok(None);
        }
        let secret = match refs.get(1) {
            Some(r) => apply::get_ref(&client, r).await?,
            None => None,
        };
        Ok(Some(live_of(id, &job, secret.as_ref(), prior)))
    }

    /// The Jobs of one namespace on one cluster are read with one list call.
    fn batch_key(_config: &Value, id: &str, prior: Option<&Spec>) -> Option<String> {
        let (cluster, job) = job_plan(id, prior?)?;
        list_key(&cluster, &job)
    }

    /// Lists the namespace's Jobs, and its Secrets when a listed Job has one, both with
    /// terrain's label (`app.kubernetes.io/managed-by=terrain`). A Job or Secret the list
    /// does not show (an imported object without the label, or one whose label was
    /// removed by hand) is answered `None`, and the engine reads that Job alone, which
    /// finds it: `read` gets objects by name, label or not. So does a Job marked for
    /// another resource (see [`list_batch`]), and one whose Secrets cannot be listed (a
    /// role allowed to get Secrets but not to list them).
    async fn read_batch(
        &self,
        ctx: &Ctx,
        items: &[(String, Option<Spec>)],
    ) -> Result<Vec<Option<Live<Self>>>, ProviderError> {
        let jobs = list_batch(ctx, items, job_plan, Self::KIND).await?;
        let with_secret = |(id, prior): &(String, Option<Spec>)| {
            prior.as_ref().is_some_and(|p| secret_plan(id, p).is_some())
        };
        let secrets = if items
            .iter()
            .zip(&jobs)
            .any(|(i, j)| j.is_some() && with_secret(i))
        {
            list_batch(ctx, items, secret_plan, Self::KIND)
                .await
                .unwrap_or_else(|_| vec![None; items.len()])
        } else {
            vec![None; items.len()]
        };
        Ok(items
            .iter()
            .zip(jobs)
            .zip(secrets)
            .map(|((item, job), secret)| {
                let (id, prior) = item;
                let (job, prior) = (job?, prior.as_ref()?);
                if with_secret(item) && secret.is_none() {
                    return None;
                }
                Some(live_of(id, &job, secret.as_ref(), prior))
            })
            .collect())
    }

    async fn create(&self, ctx: &Ctx, spec: &Spec) -> Result<Live<Self>, ProviderError> {
        apply_and_wait(ctx, spec, true).await
    }

    async fn update(
        &self,
        ctx: &Ctx,
        _id: &str,
        _prior: &Spec,
        spec: &Spec,
    ) -> Result<Live<Self>, ProviderError> {
        apply_and_wait(ctx, spec, false).await
    }

    async fn delete(&self, ctx: &Ctx, id: &str, prior: Option<&Spec>) -> Result<(), ProviderError> {
        let refs = parse_id(Self::KIND, id, ID_SHAPE)?;
        let prior = prior.ok_or_else(|| needs_cluster(Self::KIND))?;
        // The Job first: its pods may still read the Secret.
        delete_owned(&prior.cluster, &refs, false, ctx, DELETE_TIMEOUT).await
    }

    async fn preview(
        &self,
        ctx: &Ctx,
        _id: &str,
        prior: &Spec,
        spec: &Spec,
    ) -> Result<Option<String>, ProviderError> {
        preview_marked(&spec.cluster, objects(prior)?, objects(spec)?, ctx).await
    }

    async fn health(
        &self,
        ctx: &Ctx,
        id: &str,
        prior: Option<&Spec>,
    ) -> Result<Option<Health>, ProviderError> {
        let refs = parse_id(Self::KIND, id, ID_SHAPE)?;
        let prior = prior.ok_or_else(|| needs_cluster(Self::KIND))?;
        let client = connect::client(ctx, &prior.cluster).await?;
        let job = apply::get_ref(&client, &refs[0])
            .await?
            .filter(|j| !matches!(ownership(j, &ctx.address), Ownership::Other(_)));
        Ok(Some(match job {
            None => Health {
                ready: false,
                summary: "missing".into(),
            },
            Some(job) => {
                let finished = apply::job_finished(&job);
                // A Job applied without waiting is fine while it runs.
                let ready =
                    finished == Ok(true) || (finished == Ok(false) && prior.wait == "created");
                Health {
                    ready,
                    summary: health_line(&job),
                }
            }
        }))
    }

    async fn logs(
        &self,
        ctx: &Ctx,
        id: &str,
        prior: Option<&Spec>,
        follow: bool,
        sink: LineSink,
    ) -> Result<(), ProviderError> {
        let refs = parse_id(Self::KIND, id, ID_SHAPE)?;
        let prior = prior.ok_or_else(|| needs_cluster(Self::KIND))?;
        let client = connect::client(ctx, &prior.cluster).await?;
        let job_ref = &refs[0];
        let namespace = job_ref
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let api = pods_api(&client, &namespace);
        let several = prior.parallelism > 1 || prior.completions > 1;
        if !follow {
            for pod in job_pods(&client, &namespace, &job_ref.name)
                .await?
                .iter()
                .filter(|p| started(p))
            {
                let name = pod["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                stream_pod(api.clone(), name, several, false, Arc::clone(&sink)).await?;
            }
            return Ok(());
        }
        // Following: stream every pod as it starts, until the Job has finished and
        // every stream has ended.
        let mut streaming = BTreeSet::new();
        let mut tasks = Vec::new();
        loop {
            for pod in job_pods(&client, &namespace, &job_ref.name)
                .await?
                .iter()
                .filter(|p| started(p))
            {
                let name = pod["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                if streaming.insert(name.clone()) {
                    tasks.push(tokio::spawn(stream_pod(
                        api.clone(),
                        name,
                        several,
                        true,
                        Arc::clone(&sink),
                    )));
                }
            }
            let finished = match apply::get_ref(&client, job_ref).await? {
                None => true,
                Some(job) => apply::job_finished(&job) != Ok(false),
            };
            if finished && tasks.iter().all(|t| t.is_finished()) {
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        for task in tasks {
            task.await
                .map_err(|e| ProviderError::api("kubernetes logs", 0, "", e.to_string()))??;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubernetes::connect::tests::gke_reference;
    use crate::testing::schema_mismatches;

    fn base() -> Spec {
        Spec {
            cluster: gke_reference(),
            name: "workload".into(),
            namespace: "default".into(),
            image: "us-docker.pkg.dev/google-samples/containers/gke/batch-ml-workload".into(),
            command: vec![],
            args: vec![],
            env: BTreeMap::new(),
            secret_env: BTreeMap::new(),
            parallelism: 1,
            completions: 1,
            retries: 6,
            restart_policy: "OnFailure".into(),
            ttl_seconds_after_finished: None,
            active_deadline_seconds: None,
            volumes: vec![ClaimMount {
                claim: "fileserver-claim".into(),
                mount_path: "/mnt/fileserver".into(),
                read_only: false,
                sub_path: None,
            }],
            spot: true,
            gpus: 0,
            gpu_type: None,
            tpu: None,
            node_pool: None,
            resources: None,
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            pod_labels: BTreeMap::new(),
            pod_annotations: BTreeMap::new(),
            service_account: None,
            wait: "complete".into(),
            wait_timeout: "30m".into(),
        }
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// Every field set (GKE Standard, so the GPU needs no Autopilot provisioning).
    fn full() -> Spec {
        let mut cluster = gke_reference();
        cluster["autopilot"] = json!(false);
        Spec {
            cluster,
            command: vec!["python".into(), "train.py".into()],
            args: vec!["--epochs".into(), "3".into()],
            env: map(&[("QUEUE", "redis-leader")]),
            secret_env: map(&[("TOKEN", "s3cr3t")]),
            parallelism: 2,
            completions: 4,
            retries: 3,
            restart_policy: "Never".into(),
            ttl_seconds_after_finished: Some(600),
            active_deadline_seconds: Some(3600),
            volumes: vec![
                ClaimMount {
                    claim: "fileserver-claim".into(),
                    mount_path: "/mnt/fileserver".into(),
                    read_only: false,
                    sub_path: None,
                },
                ClaimMount {
                    claim: "fileserver-claim".into(),
                    mount_path: "/data".into(),
                    read_only: true,
                    sub_path: Some("datasets".into()),
                },
            ],
            spot: true,
            gpus: 1,
            gpu_type: Some("nvidia-tesla-t4".into()),
            tpu: None,
            node_pool: Some(json!({
                "pool": "gpu",
                "node_selector": {"cloud.google.com/gke-nodepool": "gpu", "cloud.google.com/gke-accelerator": "nvidia-tesla-t4"},
                "taints": [{"key": "dedicated", "value": "ml", "effect": "NO_SCHEDULE"}],
                "accelerator": {"type": "nvidia-tesla-t4", "count": 1},
                "tpu": null,
                "spot": true,
            })),
            resources: Some(Resources {
                cpu: Some("4".into()),
                memory: Some("16Gi".into()),
            }),
            labels: map(&[("team", "ml")]),
            annotations: map(&[("example.com/owner", "ml-team")]),
            pod_labels: map(&[("role", "worker")]),
            pod_annotations: map(&[("example.com/trace", "on")]),
            service_account: Some("trainer".into()),
            ..base()
        }
    }

    #[test]
    fn schema_matches_spec_and_outputs() {
        let mut spec = full();
        // The schema check needs every field set; the TPU comes from another spec.
        spec.tpu = Some(Tpu {
            kind: "tpu-v5-lite-podslice".into(),
            topology: "2x4".into(),
            chips: 4,
        });
        let outputs = outputs_of(
            &json!({"metadata": {"name": "workload", "namespace": "default", "uid": "u"}, "status": {"succeeded": 1}}),
        );
        assert_eq!(
            schema_mismatches::<Job>(&spec, &outputs),
            Vec::<String>::new()
        );
    }

    #[test]
    fn renders_the_scenario_job_on_spot_capacity() {
        let objects = objects(&base()).expect("renders");
        assert_eq!(
            objects,
            vec![json!({
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": "workload", "namespace": "default", "labels": {"app.kubernetes.io/managed-by": "terrain"}},
                "spec": {
                    "parallelism": 1,
                    "completions": 1,
                    "backoffLimit": 6,
                    "template": {"spec": {
                        "restartPolicy": "OnFailure",
                        "containers": [{
                            "name": "workload",
                            "image": "us-docker.pkg.dev/google-samples/containers/gke/batch-ml-workload",
                            "volumeMounts": [{"name": "fileserver-claim", "mountPath": "/mnt/fileserver"}],
                        }],
                        "volumes": [{"name": "fileserver-claim", "persistentVolumeClaim": {"claimName": "fileserver-claim"}}],
                        "nodeSelector": {"cloud.google.com/gke-spot": "true"},
                        "tolerations": [{"key": "cloud.google.com/gke-spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"}],
                    }},
                },
            })]
        );
    }

    #[test]
    fn renders_every_field() {
        let objects = objects(&full()).expect("renders");
        assert_eq!(objects.len(), 2);
        let job = &objects[0];
        assert_eq!(
            job["metadata"]["labels"],
            json!({"app.kubernetes.io/managed-by": "terrain", "team": "ml"})
        );
        assert_eq!(
            job["metadata"]["annotations"],
            json!({"example.com/owner": "ml-team"})
        );
        let spec = &job["spec"];
        assert_eq!(
            (
                spec["parallelism"].clone(),
                spec["completions"].clone(),
                spec["backoffLimit"].clone()
            ),
            (json!(2), json!(4), json!(3))
        );
        assert_eq!(
            (
                spec["ttlSecondsAfterFinished"].clone(),
                spec["activeDeadlineSeconds"].clone()
            ),
            (json!(600), json!(3600))
        );
        let template = &spec["template"];
        assert_eq!(
            template["metadata"],
            json!({"labels": {"role": "worker"}, "annotations": {"example.com/trace": "on"}})
        );
        let pod = &template["spec"];
        assert_eq!(pod["restartPolicy"], "Never");
        assert_eq!(
            pod["nodeSelector"],
            json!({"cloud.google.com/gke-nodepool": "gpu", "cloud.google.com/gke-accelerator": "nvidia-tesla-t4"})
        );
        assert_eq!(
            pod["tolerations"],
            json!([
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"},
            ])
        );
        assert_eq!(
            pod["volumes"],
            json!([{"name": "fileserver-claim", "persistentVolumeClaim": {"claimName": "fileserver-claim"}}])
        );
        let container = &pod["containers"][0];
        assert_eq!(
            container,
            &json!({
                "name": "workload",
                "image": "us-docker.pkg.dev/google-samples/containers/gke/batch-ml-workload",
                "command": ["python", "train.py"],
                "args": ["--epochs", "3"],
                "env": [{"name": "QUEUE", "value": "redis-leader"}],
                "envFrom": [{"secretRef": {"name": "workload-env"}}],
                "resources": {"requests": {"cpu": "4", "memory": "16Gi"}, "limits": {"memory": "16Gi", "nvidia.com/gpu": "1"}},
                "volumeMounts": [
                    {"name": "fileserver-claim", "mountPath": "/mnt/fileserver"},
                    {"name": "fileserver-claim", "mountPath": "/data", "readOnly": true, "subPath": "datasets"},
                ],
            })
        );
        assert_eq!(
            objects[1],
            json!({
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "workload-env", "namespace": "default", "labels": {"app.kubernetes.io/managed-by": "terrain"}},
                "type": "Opaque",
                "data": {"TOKEN": "czNjcjN0"},
            })
        );
        assert_eq!(
            id_of(&full().refs()),
            "batch/v1/Job/default/workload,v1/Secret/default/workload-env"
        );
        assert_eq!(
            parse_id(Job::KIND, &id_of(&full().refs()), ID_SHAPE).expect("parses"),
            full().refs()
        );
    }

    #[test]
    fn unknown_cluster_leaves_placement_for_later() {
        let spec = Spec {
            cluster: json!(UNKNOWN),
            ..base()
        };
        let objects = objects(&spec).expect("renders");
        assert_eq!(
            objects[0]["spec"]["template"]["spec"]["nodeSelector"],
            json!(UNKNOWN)
        );
        let plain = Spec {
            cluster: json!(UNKNOWN),
            spot: false,
            ..base()
        };
        let objects = super::objects(&plain).expect("renders");
        assert!(
            objects[0]["spec"]["template"]["spec"]
                .get("nodeSelector")
                .is_none(),
            "nothing to place"
        );
    }

    #[test]
    fn live_job_reads_back_as_the_spec() {
        for spec in [base(), full()] {
            let mut objects = marked(objects(&spec).expect("renders"), "kubernetes_job.workload");
            // What the API server and the Job controller add.
            let job = &mut objects[0];
            job["metadata"]["uid"] = json!("9f1c");
            job["spec"]["template"]["metadata"]["labels"]["batch.kubernetes.io/job-name"] =
                json!("workload");
            job["spec"]["template"]["metadata"]["labels"]["controller-uid"] = json!("9f1c");
            job["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] =
                json!("IfNotPresent");
            job["status"] = json!({"active": 1});
            let secret = objects.get(1).cloned();
            assert_eq!(spec_of(&objects[0], secret.as_ref(), &spec), spec);
            assert_eq!(outputs_of(&objects[0]).status, "Active");
        }
    }

    #[test]
    fn statuses_and_health_lines() {
        let cases = [
            (
                json!({"spec": {"completions": 1}, "status": {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}}),
                "Complete",
                "Complete (1/1 succeeded)",
            ),
            (
                json!({"spec": {"completions": 1}, "status": {"active": 1}}),
                "Active",
                "Running (1 active)",
            ),
            (
                json!({"status": {"failed": 7, "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit"}]}}),
                "Failed",
                "Failed: BackoffLimitExceeded",
            ),
        ];
        for (job, status, line) in cases {
            assert_eq!(status_of(&job), status, "{job}");
            assert_eq!(health_line(&job), line, "{job}");
        }
        assert_eq!(
            progress_line(&json!({"status": {"active": 1}})),
            "running: 1 active, 0 succeeded"
        );
        assert_eq!(
            progress_line(&json!({"status": {"active": 1, "succeeded": 2, "failed": 1}})),
            "running: 1 active, 2 succeeded, 1 failed"
        );
    }

    #[test]
    fn volume_names_are_labels_and_unique() {
        let taken = BTreeSet::from(["data-claim".to_string()]);
        assert_eq!(volume_name("data.claim", &taken), "data-claim-2");
        assert_eq!(volume_name(&"a".repeat(80), &BTreeSet::new()).len(), 56);
        assert!(check_dns_label(&volume_name("x.y.z", &BTreeSet::new())).is_ok());
    }

    #[test]
    fn validation_table() {
        let cases: Vec<(Spec, &str, &str)> = vec![
            (base(), "", ""),
            (full(), "", ""),
            (
                Spec {
                    name: "Train".into(),
                    ..base()
                },
                "name",
                "DNS-1123 label",
            ),
            (
                Spec {
                    image: String::new(),
                    ..base()
                },
                "image",
                "not an image reference",
            ),
            (
                Spec {
                    env: map(&[("1X", "v")]),
                    ..base()
                },
                "env",
                "not a valid environment variable name",
            ),
            (
                Spec {
                    env: map(&[("T", "v")]),
                    secret_env: map(&[("T", "s")]),
                    ..base()
                },
                "secret_env",
                "also in env",
            ),
            (
                Spec {
                    parallelism: 0,
                    ..base()
                },
                "parallelism",
                "must be 1 or more",
            ),
            (
                Spec {
                    retries: -1,
                    ..base()
                },
                "retries",
                "must be 0 or more",
            ),
            (
                Spec {
                    restart_policy: "Always".into(),
                    ..base()
                },
                "restart_policy",
                "not a Job restart policy",
            ),
            (
                Spec {
                    active_deadline_seconds: Some(0),
                    ..base()
                },
                "active_deadline_seconds",
                "1 or more",
            ),
            (
                Spec {
                    volumes: vec![ClaimMount {
                        claim: "c".into(),
                        mount_path: "data".into(),
                        read_only: false,
                        sub_path: None,
                    }],
                    ..base()
                },
                "volumes.0.mount_path",
                "absolute",
            ),
            (
                Spec {
                    volumes: vec![ClaimMount {
                        claim: "c".into(),
                        mount_path: "/d".into(),
                        read_only: false,
                        sub_path: Some("../x".into()),
                    }],
                    ..base()
                },
                "volumes.0.sub_path",
                "relative path",
            ),
            (
                Spec {
                    wait: "finished".into(),
                    ..base()
                },
                "wait",
                "use \"created\" or \"complete\"",
            ),
            (
                Spec {
                    wait_timeout: "soon".into(),
                    ..base()
                },
                "wait_timeout",
                "not a duration",
            ),
            (
                Spec { gpus: 1, ..base() },
                "gpu_type",
                "GPUs on GKE Autopilot need gpu_type",
            ),
            (
                Spec {
                    cluster: json!({"kubeconfig": "k"}),
                    ..base()
                },
                "spot",
                "spot = true needs to know how the cluster labels spot nodes",
            ),
            (
                Spec {
                    annotations: map(&[("bad key", "v")]),
                    ..base()
                },
                "annotations",
                "key \"bad key\"",
            ),
            (
                Spec {
                    resources: Some(Resources {
                        cpu: None,
                        memory: Some("lots".into()),
                    }),
                    ..base()
                },
                "resources.memory",
                "not a quantity",
            ),
        ];
        for (spec, path, message) in cases {
            let problems = Job::validate(&spec, &Value::Null);
            if message.is_empty() {
                assert!(problems.is_empty(), "{problems:?}");
            } else {
                assert!(
                    problems
                        .iter()
                        .any(|p| p.path.join(".") == path && p.message.contains(message)),
                    "want {path}: {message}, got {problems:?}"
                );
            }
        }
    }

    #[test]
    fn placement_waits_for_an_unknown_cluster() {
        let spec = Spec {
            cluster: json!(UNKNOWN),
            gpus: 1,
            ..base()
        };
        assert!(Job::validate(&spec, &Value::Null)
            .iter()
            .all(|p| !p.message.contains("placement")));
        let peers = [crate::Peer {
            kind: "gke_cluster".into(),
            address: "gke_cluster.batch".into(),
            spec: json!({"name": "batch", "mode": "autopilot"}),
        }];
        let value = serde_json::to_value(&spec).expect("encodes");
        let problems = Job::validate_peers(&value, &peers);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(problems[0].path, vec!["gpu_type".to_string()]);
        let typed = Spec {
            gpu_type: Some("nvidia-l4".into()),
            ..spec
        };
        assert!(
            Job::validate_peers(&serde_json::to_value(&typed).expect("encodes"), &peers).is_empty()
        );
    }

    // ---- placement against the node pool and cluster of the same stack ----------

    fn peer(kind: &str, address: &str, spec: Value) -> Peer {
        Peer {
            kind: kind.into(),
            address: address.into(),
            spec,
        }
    }

    /// A `gke_node_pool` as the engine hands it over: defaults filled, its cluster's
    /// id unknown; `with` overrides fields.
    fn gke_pool(name: &str, with: Value) -> Peer {
        let mut spec = json!({
            "name": name,
            "cluster": UNKNOWN,
            "machine_type": "n1-standard-8",
            "node_count": null,
            "autoscaling": null,
            "gpu": {"type": "nvidia-tesla-t4", "count": 1, "driver": "default"},
            "tpu": null,
            "spot": false,
            "preemptible": false,
            "taints": [],
            "labels": {},
            "scopes": ["gke-default"],
            "disk_size_gb": null,
            "disk_type": null,
        });
        merge(&mut spec, with);
        peer("gke_node_pool", &format!("gke_node_pool.{name}"), spec)
    }

    fn eks_group(name: &str, with: Value) -> Peer {
        let mut spec = json!({
            "cluster_name": UNKNOWN,
            "name": name,
            "node_role_arn": "arn:aws:iam::123456789012:role/eks-nodes",
            "subnet_ids": ["subnet-0a1b2c3d4e5f60001"],
            "instance_types": ["g5.xlarge"],
            "ami_type": null,
            "capacity_type": "ON_DEMAND",
            "scaling": {"min": 0, "max": 2, "desired": null},
            "disk_size": 20,
            "labels": {},
            "taints": [],
            "tags": {},
        });
        merge(&mut spec, with);
        peer("eks_node_group", &format!("eks_node_group.{name}"), spec)
    }

    fn gke_cluster(mode: &str) -> Peer {
        peer(
            "gke_cluster",
            "gke_cluster.batch",
            json!({"name": "batch", "location": "us-central1", "mode": mode}),
        )
    }

    fn eks_cluster() -> Peer {
        peer(
            "eks_cluster",
            "eks_cluster.ml",
            json!({"name": "ml-pipelines", "version": "1.31", "role_arn": "arn:aws:iam::123456789012:role/eks-cluster"}),
        )
    }

    fn merge(spec: &mut Value, with: Value) {
        if let (Some(target), Value::Object(fields)) = (spec.as_object_mut(), with) {
            target.extend(fields);
        }
    }

    /// A Job asking `spot`, `gpus`, `gpu_type` or `tpu` as `with` says, on nothing else.
    fn asking(with: Value) -> Spec {
        let mut value = serde_json::to_value(Spec {
            spot: false,
            volumes: vec![],
            ..base()
        })
        .expect("encodes");
        merge(&mut value, with);
        serde_json::from_value(value).expect("decodes")
    }

    /// The Job on a cluster and pool both created by the same stack: `cluster` and
    /// `node_pool` are unknown offline.
    fn same_stack(spec: &Spec) -> Value {
        let mut value = serde_json::to_value(spec).expect("encodes");
        value["cluster"] = json!(UNKNOWN);
        value["node_pool"] = json!(UNKNOWN);
        value
    }

    /// The Job once its GKE Standard cluster and `pool` exist: both references known,
    /// `node_pool` the pool's `placement` output.
    fn known_on(spec: &Spec, pool: &Peer) -> Spec {
        let placement = match pool.kind.as_str() {
            "gke_node_pool" => crate::gcp::node_pool::placement(
                &serde_json::from_value(pool.spec.clone()).expect("pool decodes"),
            ),
            _ => crate::aws::eks_node_group::placement(
                &serde_json::from_value(pool.spec.clone()).expect("group decodes"),
            ),
        };
        let mut cluster = gke_reference();
        cluster["autopilot"] = json!(false);
        if pool.kind == "eks_node_group" {
            cluster = json!({"kubeconfig": "~/.kube/config", "flavor": "eks"});
        }
        Spec {
            cluster,
            node_pool: Some(placement),
            ..spec.clone()
        }
    }

    /// `path: message` of each problem.
    fn shown(problems: &[Invalid]) -> Vec<String> {
        problems.iter().map(ToString::to_string).collect()
    }

    /// Problems at placement's fields (the known reference in tests is not checked
    /// against a live cluster, so other fields stay out of it).
    fn placement_problems(problems: Vec<Invalid>) -> Vec<String> {
        let fields = ["spot", "gpus", "gpu_type", "tpu", "node_pool"];
        shown(
            &problems
                .into_iter()
                .filter(|p| p.path.first().is_some_and(|f| fields.contains(&f.as_str())))
                .collect::<Vec<_>>(),
        )
    }

    /// Asserts one refusal at `path` whose message has `want`, both offline with the
    /// pool and cluster of the same stack (from their specs) and once everything is
    /// known (from `validate`, with no second report from the peers).
    fn refused_both_ways(spec: &Spec, peers: &[Peer], path: &str, same: &str, known: &str) {
        let same_stack = same_stack(spec);
        let offline = shown(&Job::validate_peers(&same_stack, peers));
        assert!(
            offline.len() == 1
                && offline[0].starts_with(&format!("{path}: "))
                && offline[0].contains(same),
            "same stack: want one {path}: …{same}…, got {offline:?}"
        );
        let pool = peers
            .iter()
            .find(|p| p.kind.ends_with("node_pool") || p.kind == "eks_node_group")
            .expect("a pool");
        let known_spec = known_on(spec, pool);
        let mut problems = placement_problems(Job::validate(&known_spec, &Value::Null));
        let known_value = serde_json::to_value(&known_spec).expect("encodes");
        problems.extend(shown(&Job::validate_peers(&known_value, peers)));
        assert!(
            problems.len() == 1
                && problems[0].starts_with(&format!("{path}: "))
                && problems[0].contains(known),
            "known: want one {path}: …{known}…, got {problems:?}"
        );
    }

    fn accepted_both_ways(spec: &Spec, peers: &[Peer]) {
        let offline = shown(&Job::validate_peers(&same_stack(spec), peers));
        assert_eq!(offline, Vec::<String>::new(), "same stack");
        let pool = peers
            .iter()
            .find(|p| p.kind.ends_with("node_pool") || p.kind == "eks_node_group")
            .expect("a pool");
        let known_spec = known_on(spec, pool);
        let mut problems = placement_problems(Job::validate(&known_spec, &Value::Null));
        let known_value = serde_json::to_value(&known_spec).expect("encodes");
        problems.extend(shown(&Job::validate_peers(&known_value, peers)));
        assert_eq!(problems, Vec::<String>::new(), "known");
    }

    #[test]
    fn job_asking_4_gpus_on_a_1_gpu_pool_of_the_same_stack_is_refused() {
        let peers = [gke_cluster("standard"), gke_pool("gpu", json!({}))];
        refused_both_ways(
            &asking(json!({"gpus": 4})),
            &peers,
            "gpus",
            "asks for 4 GPUs per pod, but gke_node_pool.gpu nodes have 1 (gpu.count = 1); set gpus = 1 or fewer",
            "asks for 4 GPUs per pod, but node pool gpu has 1 GPU(s) per node",
        );
        accepted_both_ways(&asking(json!({"gpus": 1})), &peers);
        // Built into the machine type: a g2-standard-24 has two L4s.
        let g2 = [gke_pool(
            "l4",
            json!({"machine_type": "g2-standard-24", "gpu": null}),
        )];
        refused_both_ways(
            &asking(json!({"gpus": 4})),
            &g2,
            "gpus",
            "gke_node_pool.l4 nodes have 2 (machine_type = \"g2-standard-24\")",
            "node pool l4 has 2 GPU(s) per node",
        );
    }

    #[test]
    fn job_asking_4_gpus_on_a_pool_of_the_same_stack_on_a_known_cluster_is_refused() {
        // The cluster exists already; only the pool is new.
        let spec = Spec {
            cluster: {
                let mut c = gke_reference();
                c["autopilot"] = json!(false);
                c
            },
            ..asking(json!({"gpus": 4}))
        };
        let mut value = serde_json::to_value(&spec).expect("encodes");
        value["node_pool"] = json!(UNKNOWN);
        let problems = shown(&Job::validate_peers(&value, &[gke_pool("gpu", json!({}))]));
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0]
                .starts_with("gpus: asks for 4 GPUs per pod, but gke_node_pool.gpu nodes have 1"),
            "{problems:?}"
        );
        assert!(
            placement_problems(Job::validate(&spec_with_unknown_pool(spec), &Value::Null))
                .is_empty(),
            "validate leaves an unknown pool to the peer check"
        );
    }

    fn spec_with_unknown_pool(spec: Spec) -> Spec {
        Spec {
            node_pool: Some(json!(UNKNOWN)),
            ..spec
        }
    }

    #[test]
    fn job_gpu_type_other_than_the_pools_accelerator_is_refused() {
        let peers = [gke_cluster("standard"), gke_pool("gpu", json!({}))];
        refused_both_ways(
            &asking(json!({"gpus": 1, "gpu_type": "nvidia-l4"})),
            &peers,
            "gpu_type",
            "asks for nvidia-l4, but gke_node_pool.gpu nodes have nvidia-tesla-t4 (gpu.type = \"nvidia-tesla-t4\")",
            "gpu_type selects cloud.google.com/gke-accelerator=nvidia-l4 but node pool gpu selects cloud.google.com/gke-accelerator=nvidia-tesla-t4",
        );
        accepted_both_ways(
            &asking(json!({"gpus": 1, "gpu_type": "nvidia-tesla-t4"})),
            &peers,
        );
    }

    #[test]
    fn job_asking_spot_on_an_on_demand_pool_is_refused() {
        let gke = [gke_cluster("standard"), gke_pool("gpu", json!({}))];
        refused_both_ways(
            &asking(json!({"spot": true, "gpus": 1})),
            &gke,
            "spot",
            "asks for spot capacity, but gke_node_pool.gpu nodes are on-demand (neither spot nor preemptible is set); set spot = false, or set spot = true on gke_node_pool.gpu",
            "asks for spot capacity, but node pool gpu is not a spot pool",
        );
        let eks = [eks_cluster(), eks_group("gpu", json!({}))];
        refused_both_ways(
            &asking(json!({"spot": true, "gpus": 1})),
            &eks,
            "spot",
            "eks_node_group.gpu nodes are on-demand (capacity_type = \"ON_DEMAND\"); set spot = false, or set capacity_type = \"SPOT\" on eks_node_group.gpu",
            "node pool gpu is not a spot pool",
        );
        for spot_pool in [
            gke_pool("gpu", json!({"spot": true})),
            gke_pool("gpu", json!({"preemptible": true})),
        ] {
            accepted_both_ways(&asking(json!({"spot": true, "gpus": 1})), &[spot_pool]);
        }
        accepted_both_ways(
            &asking(json!({"spot": true, "gpus": 1})),
            &[eks_group("gpu", json!({"capacity_type": "SPOT"}))],
        );
    }

    #[test]
    fn job_without_spot_on_a_spot_pool_is_accepted() {
        // spot = false asks for nothing: the pods run on the pool's spot nodes.
        accepted_both_ways(
            &asking(json!({"gpus": 1})),
            &[gke_pool("gpu", json!({"spot": true}))],
        );
        accepted_both_ways(
            &asking(json!({"gpus": 1})),
            &[eks_group("gpu", json!({"capacity_type": "SPOT"}))],
        );
    }

    #[test]
    fn job_asking_gpus_on_a_pool_without_gpus_is_refused() {
        let cpu = [gke_pool(
            "cpu",
            json!({"machine_type": "e2-standard-4", "gpu": null}),
        )];
        refused_both_ways(
            &asking(json!({"gpus": 1})),
            &cpu,
            "gpus",
            "asks for 1 GPU per pod, but gke_node_pool.cpu nodes have none (machine_type = \"e2-standard-4\" and no gpu); set gpus = 0, or give gke_node_pool.cpu GPUs",
            "asks for 1 GPU per pod, but node pool cpu has no GPUs",
        );
        let plain = [eks_group("cpu", json!({"instance_types": ["m5.large"]}))];
        refused_both_ways(
            &asking(json!({"gpus": 1})),
            &plain,
            "gpus",
            "eks_node_group.cpu nodes have none (instance_types = [\"m5.large\"])",
            "node pool cpu has no GPUs",
        );
        accepted_both_ways(&asking(json!({})), &cpu);
    }

    #[test]
    fn a_tainted_pool_is_not_refused_since_placement_tolerates_its_taints() {
        // The gke-gpu-pipelines training Job: preemptible T4s behind a taint.
        let pool = gke_pool(
            "preemptible_gpu",
            json!({
                "name": "preemptible-gpu-pool",
                "machine_type": "n1-highmem-8",
                "gpu": {"type": "nvidia-tesla-t4", "count": 4, "driver": "disabled"},
                "preemptible": true,
                "autoscaling": {"min": 0, "max": 4},
                "taints": ["preemptible=true:NoSchedule"],
                "scopes": ["cloud-platform"],
            }),
        );
        accepted_both_ways(&asking(json!({"gpus": 1})), std::slice::from_ref(&pool));
        accepted_both_ways(
            &asking(json!({"gpus": 4, "spot": true})),
            std::slice::from_ref(&pool),
        );
        let known = known_on(&asking(json!({"gpus": 1})), &pool);
        let rendered = objects(&known).expect("renders");
        assert!(
            rendered[0]["spec"]["template"]["spec"]["tolerations"]
                .as_array()
                .is_some_and(|t| t.contains(&json!({"key": "preemptible", "operator": "Equal", "value": "true", "effect": "NoSchedule"}))),
            "{}",
            rendered[0]["spec"]["template"]["spec"]
        );
    }

    fn tpu_pool() -> Peer {
        gke_pool(
            "tpu",
            json!({
                "name": "tpu-v5e-pool",
                "machine_type": "ct5lp-hightpu-4t",
                "gpu": null,
                "tpu": {"topology": "2x2"},
                "node_count": 0,
                "autoscaling": {"min": 0, "max": 1},
            }),
        )
    }

    fn asking_tpu(kind: &str, topology: &str, chips: i64) -> Spec {
        asking(json!({"tpu": {"type": kind, "topology": topology, "chips": chips}}))
    }

    #[test]
    fn job_asking_a_tpu_on_a_pool_without_tpus_is_refused() {
        refused_both_ways(
            &asking_tpu("tpu-v5-lite-podslice", "2x2", 4),
            &[gke_pool("gpu", json!({}))],
            "tpu",
            "asks for a TPU slice, but gke_node_pool.gpu nodes have no TPUs (machine_type = \"n1-standard-8\" and no tpu)",
            "asks for a TPU slice, but node pool gpu has no TPUs",
        );
    }

    #[test]
    fn job_asking_another_tpu_than_the_pools_slice_is_refused() {
        let peers = [gke_cluster("standard"), tpu_pool()];
        // The gke-accelerators TPU Job fits its pool.
        accepted_both_ways(&asking_tpu("tpu-v5-lite-podslice", "2x2", 4), &peers);
        refused_both_ways(
            &asking_tpu("tpu-v5-lite-podslice", "2x4", 4),
            &peers,
            "tpu.topology",
            "asks for a 2x4 slice, but gke_node_pool.tpu is a 2x2 slice (machine_type = \"ct5lp-hightpu-4t\", tpu.topology = \"2x2\")",
            "tpu.topology selects cloud.google.com/gke-tpu-topology=2x4 but node pool tpu-v5e-pool selects cloud.google.com/gke-tpu-topology=2x2",
        );
        refused_both_ways(
            &asking_tpu("tpu-v5p-slice", "2x2", 4),
            &peers,
            "tpu.type",
            "asks for tpu-v5p-slice, but gke_node_pool.tpu nodes are tpu-v5-lite-podslice",
            "tpu.type selects cloud.google.com/gke-tpu-accelerator=tpu-v5p-slice but node pool tpu-v5e-pool selects",
        );
        refused_both_ways(
            &asking_tpu("tpu-v5-lite-podslice", "2x2", 8),
            &peers,
            "tpu.chips",
            "asks for 8 TPU chips per pod, but gke_node_pool.tpu nodes have 4",
            "asks for 8 TPU chips per pod, but node pool tpu-v5e-pool has 4 TPU chip(s) per node",
        );
    }

    #[test]
    fn job_asking_a_tpu_on_an_eks_cluster_of_the_same_stack_is_refused() {
        let spec = asking_tpu("tpu-v5-lite-podslice", "2x2", 4);
        let mut value = serde_json::to_value(&spec).expect("encodes");
        value["cluster"] = json!(UNKNOWN);
        let problems = shown(&Job::validate_peers(&value, &[eks_cluster()]));
        assert_eq!(
            problems,
            vec!["tpu: asks for a TPU slice, but eks_cluster.ml is an EKS cluster; TPUs run on GKE only: remove tpu, or run the job on a GKE cluster".to_string()]
        );
        // On an EKS node group of the same stack too, named as such.
        let on_group = shown(&Job::validate_peers(
            &same_stack(&spec),
            &[eks_group("gpu", json!({}))],
        ));
        assert_eq!(on_group.len(), 1, "{on_group:?}");
        assert!(
            on_group[0].contains("eks_node_group.gpu is an EKS node group"),
            "{on_group:?}"
        );
        // Known: the reference says eks.
        let known = Spec {
            cluster: json!({"kubeconfig": "~/.kube/config", "flavor": "eks"}),
            ..spec
        };
        assert_eq!(
            placement_problems(Job::validate(&known, &Value::Null)),
            vec!["tpu: TPUs run on GKE only; this cluster's flavor is eks".to_string()]
        );
    }

    #[test]
    fn job_with_a_gke_node_pool_on_an_eks_cluster_is_refused() {
        let spec = asking(json!({"gpus": 1}));
        let problems = shown(&Job::validate_peers(
            &same_stack(&spec),
            &[eks_cluster(), gke_pool("gpu", json!({}))],
        ));
        assert_eq!(
            problems,
            vec!["node_pool: gke_node_pool.gpu is a GKE node pool, but eks_cluster.ml is an EKS cluster: use an eks_node_group's placement (\"${eks_node_group.NAME.placement}\")".to_string()]
        );
        let reverse = shown(&Job::validate_peers(
            &same_stack(&spec),
            &[gke_cluster("standard"), eks_group("gpu", json!({}))],
        ));
        assert_eq!(reverse.len(), 1, "{reverse:?}");
        assert!(
            reverse[0].starts_with("node_pool: eks_node_group.gpu is an EKS node group, but gke_cluster.batch is a GKE cluster"),
            "{reverse:?}"
        );
    }

    #[test]
    fn job_naming_an_accelerator_as_gpu_type_on_an_eks_cluster_is_refused() {
        let spec = asking(json!({"gpus": 1, "gpu_type": "nvidia-tesla-t4"}));
        let mut value = serde_json::to_value(&spec).expect("encodes");
        value["cluster"] = json!(UNKNOWN);
        let problems = shown(&Job::validate_peers(&value, &[eks_cluster()]));
        assert_eq!(
            problems,
            vec!["gpu_type: \"nvidia-tesla-t4\" is not an EC2 instance type, but eks_cluster.ml is an EKS cluster, where gpu_type names the GPU instance type (e.g. \"g5.xlarge\")".to_string()]
        );
        let known = Spec {
            cluster: json!({"kubeconfig": "~/.kube/config", "flavor": "eks"}),
            ..spec
        };
        assert_eq!(
            placement_problems(Job::validate(&known, &Value::Null)),
            vec!["gpu_type: on EKS, gpu_type names the GPU instance type (e.g. \"g5.xlarge\"); \"nvidia-tesla-t4\" is not one".to_string()]
        );
    }

    #[test]
    fn eks_job_instance_type_the_node_group_does_not_launch_is_refused() {
        let peers = [
            eks_cluster(),
            eks_group(
                "gpu",
                json!({"instance_types": ["g5.xlarge", "g5.2xlarge"]}),
            ),
        ];
        // Known too: the group's placement names only g5.xlarge, so only the peer
        // check can tell, and it does once everything is known as well.
        refused_both_ways(
            &asking(json!({"gpus": 1, "gpu_type": "g5.12xlarge"})),
            &peers,
            "gpu_type",
            "asks for instance type g5.12xlarge, but eks_node_group.gpu launches only g5.xlarge, g5.2xlarge (instance_types = [\"g5.xlarge\",\"g5.2xlarge\"])",
            "eks_node_group.gpu launches only g5.xlarge, g5.2xlarge",
        );
        accepted_both_ways(
            &asking(json!({"gpus": 1, "gpu_type": "g5.2xlarge"})),
            &peers,
        );
    }

    #[test]
    fn eks_job_asking_more_gpus_than_the_node_group_instances_have_is_refused() {
        refused_both_ways(
            &asking(json!({"gpus": 4})),
            &[eks_cluster(), eks_group("gpu", json!({}))],
            "gpus",
            "asks for 4 GPUs per pod, but eks_node_group.gpu nodes have 1 (instance_types = [\"g5.xlarge\"])",
            "node pool gpu has 1 GPU(s) per node",
        );
        accepted_both_ways(
            &asking(json!({"gpus": 4})),
            &[eks_group("gpu", json!({"instance_types": ["g5.12xlarge"]}))],
        );
    }

    #[test]
    fn on_autopilot_a_jobs_pods_bill_their_requests_while_they_run() {
        let spec = asking(
            json!({"parallelism": 3, "spot": true, "resources": {"cpu": "2", "memory": "8Gi"}}),
        );
        let mut value = serde_json::to_value(&spec).expect("encodes");
        value["cluster"] = json!(UNKNOWN);
        let usage = Job::usage(&value, &json!({}), &[gke_cluster("autopilot")]);
        let got: Vec<(&str, f64, f64, bool, &str)> = usage
            .iter()
            .map(|u| (u.meter.as_str(), u.min, u.max, u.spot, u.region.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("autopilot.vcpu", 0.0, 6.0, true, "us-central1"),
                ("autopilot.memory", 0.0, 24.0, true, "us-central1"),
            ]
        );
        // On Standard the pool's nodes bill, not the pods.
        assert!(Job::usage(&value, &json!({}), &[gke_cluster("standard")]).is_empty());
    }

    #[test]
    fn gpus_on_an_autopilot_cluster_of_the_same_stack_need_a_type() {
        let spec = asking(json!({"gpus": 1}));
        let mut value = serde_json::to_value(&spec).expect("encodes");
        value["cluster"] = json!(UNKNOWN);
        let problems = shown(&Job::validate_peers(&value, &[gke_cluster("autopilot")]));
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].starts_with(
                "gpu_type: gke_cluster.batch is a GKE Autopilot cluster, where GPUs need gpu_type"
            ),
            "{problems:?}"
        );
        assert!(Job::validate_peers(&value, &[gke_cluster("standard")]).is_empty());
    }

    #[test]
    fn pool_settings_not_known_offline_wait_for_apply() {
        let spec = asking(json!({"gpus": 4, "spot": true, "gpu_type": "nvidia-l4"}));
        let vague = gke_pool(
            "gpu",
            json!({"gpu": {"type": UNKNOWN, "count": UNKNOWN, "driver": "default"}, "spot": UNKNOWN}),
        );
        assert_eq!(
            shown(&Job::validate_peers(&same_stack(&spec), &[vague])),
            Vec::<String>::new()
        );
        // Two pools referenced: which one `node_pool` names is not known offline.
        let two = [gke_pool("a", json!({})), gke_pool("b", json!({}))];
        assert_eq!(
            shown(&Job::validate_peers(&same_stack(&spec), &two)),
            Vec::<String>::new()
        );
        // The Job's own values unknown: nothing to compare yet.
        let mut unknown_ask = same_stack(&asking(json!({})));
        unknown_ask["gpus"] = json!(UNKNOWN);
        unknown_ask["spot"] = json!(UNKNOWN);
        assert_eq!(
            shown(&Job::validate_peers(
                &unknown_ask,
                &[gke_pool("cpu", json!({"gpu": null}))]
            )),
            Vec::<String>::new()
        );
        // No message ever quotes the marker.
        let named_later = gke_pool("gpu", json!({"name": UNKNOWN}));
        for problem in shown(&Job::validate_peers(&same_stack(&spec), &[named_later])) {
            assert!(!problem.contains(UNKNOWN), "{problem:?}");
        }
    }
}
