//! The `kubernetes_redis` kind: a single Redis server (a Pod, or a one-replica
//! Deployment) behind a ClusterIP Service, used as a work queue by batch jobs.
//!
//! Id: `v1/Pod/<namespace>/<name>,v1/Service/<namespace>/<service>` (or
//! `apps/v1/Deployment/<namespace>/<name>,…` for `workload = "deployment"`). Labels
//! update in place; everything else replaces the server (and its in-memory data).

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::{
    apply, check_cluster, check_dns_label, check_dns_subdomain, check_labels, connect,
    delete_owned, id_of, live_pair, marked, needs_cluster, parse_id, preview_marked,
    refuse_strangers, string_map, user_entries, with_managed_label, ObjectRef, Resources,
};
use crate::schema::Fields;
use crate::{Ctx, Health, Invalid, Kind, Live, ProviderError};

/// The kind `kubernetes_redis`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Redis;

/// A claim mounted into the Redis container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Volume {
    /// The PersistentVolumeClaim to mount.
    #[terrain(force_new)]
    pub claim: String,
    /// Where it appears in the container.
    #[terrain(force_new)]
    pub mount_path: String,
}

fn default_name() -> String {
    "redis-leader".into()
}

fn default_namespace() -> String {
    "default".into()
}

fn default_image() -> String {
    "redis:7.2".into()
}

fn default_port() -> i64 {
    6379
}

fn default_workload() -> String {
    "pod".into()
}

/// What a stack writes for a `kubernetes_redis`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    #[terrain(doc = crate::kubernetes::CLUSTER_DOC, force_new)]
    pub cluster: Value,
    /// The server's name (Pod or Deployment), and its `app` label.
    #[serde(default = "default_name")]
    #[terrain(force_new)]
    pub name: String,
    /// The namespace.
    #[serde(default = "default_namespace")]
    #[terrain(force_new)]
    pub namespace: String,
    /// The Redis image.
    #[serde(default = "default_image")]
    #[terrain(force_new)]
    pub image: String,
    /// The port Redis listens on.
    #[serde(default = "default_port")]
    #[terrain(force_new)]
    pub port: i64,
    /// pod, or deployment to have the server restarted elsewhere when its node goes.
    #[serde(default = "default_workload")]
    #[terrain(force_new)]
    pub workload: String,
    /// A claim mounted into the server (e.g. the shared file store).
    #[terrain(force_new)]
    pub volume: Option<Volume>,
    /// The Service's name; the server's name when left out.
    #[terrain(force_new)]
    pub service_name: Option<String>,
    /// CPU and memory to reserve.
    #[terrain(force_new)]
    pub resources: Option<Resources>,
    /// Extra labels on the server and its Service.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

impl Spec {
    fn service(&self) -> String {
        self.service_name
            .clone()
            .unwrap_or_else(|| self.name.clone())
    }

    fn deployment(&self) -> bool {
        self.workload == "deployment"
    }

    fn refs(&self) -> Vec<ObjectRef> {
        let (api_version, kind) = if self.deployment() {
            ("apps/v1", "Deployment")
        } else {
            ("v1", "Pod")
        };
        vec![
            ObjectRef::new(api_version, kind, Some(&self.namespace), &self.name),
            ObjectRef::new("v1", "Service", Some(&self.namespace), &self.service()),
        ]
    }

    fn service_host(&self) -> String {
        format!("{}.{}.svc.cluster.local", self.service(), self.namespace)
    }
}

/// What `kubernetes_redis` reports after apply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Outputs {
    /// The Service's DNS name inside the cluster.
    pub service_host: String,
    /// The Redis port.
    pub port: i64,
    /// The pod serving now.
    pub pod_name: String,
    /// The namespace.
    pub namespace: String,
    /// {namespace, pod, port, service_host}, for kubernetes_queue_items' redis.
    pub endpoint: Value,
}

const WORKLOADS: &[&str] = &["pod", "deployment"];
/// Labels terrain sets itself, which a stack may not override.
const RESERVED_LABELS: &[&str] = &["app", "app.kubernetes.io/name", super::MANAGED_BY.0];
const ID_SHAPE: &str =
    "v1/Pod/NAMESPACE/NAME,v1/Service/NAMESPACE/SERVICE (or apps/v1/Deployment/NAMESPACE/NAME,…)";
const READY_TIMEOUT: Duration = Duration::from_secs(10 * 60);
const DELETE_TIMEOUT: Duration = Duration::from_secs(5 * 60);

fn pod_labels(spec: &Spec) -> BTreeMap<String, String> {
    let mut labels = spec.labels.clone();
    labels.insert("app".into(), spec.name.clone());
    labels.insert("app.kubernetes.io/name".into(), "redis".into());
    labels
}

fn pod_spec(spec: &Spec) -> Value {
    let port = spec.port.to_string();
    let mut container = json!({
        "name": "redis",
        "image": spec.image,
        "ports": [{"name": "redis", "containerPort": spec.port, "protocol": "TCP"}],
        "readinessProbe": {
            "exec": {"command": ["redis-cli", "-p", port, "ping"]},
            "initialDelaySeconds": 1,
            "periodSeconds": 5,
        },
    });
    if spec.port != default_port() {
        container["args"] = json!(["--port", port]);
    }
    if let Some(resources) = Resources::container(spec.resources.as_ref(), &BTreeMap::new()) {
        container["resources"] = resources;
    }
    let mut pod = json!({"containers": [container]});
    if let Some(volume) = &spec.volume {
        pod["containers"][0]["volumeMounts"] =
            json!([{"name": "data", "mountPath": volume.mount_path}]);
        pod["volumes"] =
            json!([{"name": "data", "persistentVolumeClaim": {"claimName": volume.claim}}]);
    }
    pod
}

/// The server (Pod or Deployment) and its Service, as applied (without the address
/// annotation).
pub fn objects(spec: &Spec) -> Vec<Value> {
    let labels = Value::Object(with_managed_label(&pod_labels(spec)));
    let selector = json!({"app": spec.name});
    let metadata = json!({"name": spec.name, "namespace": spec.namespace, "labels": labels});
    let workload = if spec.deployment() {
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": metadata,
            "spec": {
                "replicas": 1,
                // One server holds the queue: never run two side by side.
                "strategy": {"type": "Recreate"},
                "selector": {"matchLabels": selector},
                "template": {"metadata": {"labels": string_map(&pod_labels(spec))}, "spec": pod_spec(spec)},
            },
        })
    } else {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod_spec(spec)})
    };
    let service = json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": spec.service(), "namespace": spec.namespace, "labels": labels},
        "spec": {
            "type": "ClusterIP",
            "selector": selector,
            "ports": [{"name": "redis", "port": spec.port, "targetPort": spec.port, "protocol": "TCP"}],
        },
    });
    vec![workload, service]
}

/// The spec the live workload and Service show.
fn spec_of(workload: &Value, service: &Value, prior: &Spec) -> Spec {
    let deployment = workload["kind"] == "Deployment";
    let pod = if deployment {
        &workload["spec"]["template"]["spec"]
    } else {
        &workload["spec"]
    };
    let container = &pod["containers"][0];
    let name = workload["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let service_name = service["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let volume = pod["volumes"].as_array().and_then(|volumes| {
        let claim = volumes
            .iter()
            .find_map(|v| v["persistentVolumeClaim"]["claimName"].as_str())?;
        let mount_path = container["volumeMounts"].as_array()?.first()?["mountPath"].as_str()?;
        Some(Volume {
            claim: claim.to_string(),
            mount_path: mount_path.to_string(),
        })
    });
    let mut labels = user_entries(&workload["metadata"]["labels"], &prior.labels);
    labels.retain(|k, _| !RESERVED_LABELS.contains(&k.as_str()));
    Spec {
        cluster: prior.cluster.clone(),
        service_name: if prior.service_name.is_none() && service_name == name {
            None
        } else {
            Some(service_name)
        },
        name,
        namespace: workload["metadata"]["namespace"]
            .as_str()
            .unwrap_or("default")
            .to_string(),
        image: container["image"].as_str().unwrap_or_default().to_string(),
        port: container["ports"][0]["containerPort"]
            .as_i64()
            .unwrap_or(default_port()),
        workload: if deployment { "deployment" } else { "pod" }.to_string(),
        volume,
        resources: Resources::from_live(&container["resources"], prior.resources.as_ref()),
        labels,
    }
}

fn outputs_of(spec: &Spec, pod_name: &str) -> Outputs {
    Outputs {
        service_host: spec.service_host(),
        port: spec.port,
        pod_name: pod_name.to_string(),
        namespace: spec.namespace.clone(),
        endpoint: json!({"namespace": spec.namespace, "pod": pod_name, "port": spec.port, "service_host": spec.service_host()}),
    }
}

/// The pod serving now: the Pod itself, or the Deployment's newest running pod (empty
/// while there is none).
async fn serving_pod(
    client: &crate::kubernetes::connect::Conn,
    workload: &Value,
    spec: &Spec,
) -> Result<String, ProviderError> {
    if workload["kind"] != "Deployment" {
        return Ok(spec.name.clone());
    }
    let mut pods = apply::list(
        client,
        "v1",
        "Pod",
        Some(&spec.namespace),
        &format!("app={}", spec.name),
    )
    .await?;
    pods.retain(|p| p["metadata"]["deletionTimestamp"].is_null());
    pods.sort_by_key(|p| {
        (
            apply::pod_ready(p) == Ok(true),
            p["metadata"]["creationTimestamp"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        )
    });
    Ok(pods
        .last()
        .and_then(|p| p["metadata"]["name"].as_str())
        .unwrap_or_default()
        .to_string())
}

async fn apply_and_wait(
    ctx: &Ctx,
    spec: &Spec,
    create: bool,
) -> Result<Live<Redis>, ProviderError> {
    let client = connect::client(ctx, &spec.cluster).await?;
    let objects = marked(objects(spec), &ctx.address);
    if create {
        refuse_strangers(&client, &objects, Redis::KIND, &ctx.address).await?;
    }
    // Every field terrain sets is the stack's: take back any edited by hand.
    apply::apply_all(&client, &objects, true).await?;
    let refs = spec.refs();
    let workload = &refs[0];
    let what = format!("redis {} to be ready", workload.describe());
    let progress = apply::Progress::new(ctx);
    apply::wait_until(
        &client,
        &workload.api_version,
        &workload.kind,
        Some(&spec.namespace),
        &spec.name,
        ctx,
        READY_TIMEOUT,
        &what,
        |o| {
            let ready = apply::readiness(o).unwrap_or(Ok(true));
            if ready == Ok(false) {
                progress.report(&format!(
                    "redis {}: {}",
                    workload.describe(),
                    apply::summary(o)
                ));
            }
            ready
        },
    )
    .await?;
    let (live_workload, service) = live_pair(
        &client,
        &refs,
        &ctx.address,
        Redis::KIND,
        "a workload and a Service",
    )
    .await?
    .ok_or_else(|| {
        ProviderError::api(
            "kubernetes get",
            404,
            "NotFound",
            format!(
                "the redis server of {} vanished right after it was applied",
                ctx.address
            ),
        )
    })?;
    let pod = serving_pod(&client, &live_workload, spec).await?;
    Ok(Live {
        id: id_of(&refs),
        spec: spec_of(&live_workload, &service, spec),
        outputs: outputs_of(spec, &pod),
    })
}

#[async_trait]
impl Kind for Redis {
    type Spec = Spec;
    type Outputs = Outputs;
    const KIND: &'static str = "kubernetes_redis";
    const PROVIDER: &'static str = "kubernetes";
    const WRITES: crate::protocol::Writes = crate::protocol::Writes::AsManifest;
    const RENDERS: bool = true;

    fn validate(spec: &Spec, _config: &Value) -> Vec<Invalid> {
        let mut out = Vec::new();
        check_cluster(&spec.cluster, &mut out);
        // Pod names must be labels too: they become the pod's host name.
        if let Err(m) = check_dns_label(&spec.name) {
            out.push(Invalid::at("name", m));
        }
        if let Err(m) = check_dns_label(&spec.namespace) {
            out.push(Invalid::at("namespace", m));
        }
        if let Some(service) = &spec.service_name {
            if let Err(m) = check_dns_label(service) {
                out.push(Invalid::at("service_name", m));
            }
        }
        if spec.image.trim().is_empty() || spec.image.contains(char::is_whitespace) {
            out.push(Invalid::at(
                "image",
                format!("{:?} is not an image reference", spec.image),
            ));
        }
        if !(1..=65535).contains(&spec.port) {
            out.push(Invalid::at(
                "port",
                format!("must be between 1 and 65535, got {}", spec.port),
            ));
        }
        if !WORKLOADS.contains(&spec.workload.as_str()) {
            out.push(Invalid::at(
                "workload",
                format!(
                    "{:?} is not a workload; use \"pod\" or \"deployment\"",
                    spec.workload
                ),
            ));
        }
        if let Some(volume) = &spec.volume {
            if let Err(m) = check_dns_subdomain(&volume.claim) {
                out.push(Invalid::at("volume.claim", m));
            }
            if !volume.mount_path.starts_with('/') {
                out.push(Invalid::at(
                    "volume.mount_path",
                    format!("{:?} is not an absolute path", volume.mount_path),
                ));
            }
        }
        if let Some(resources) = &spec.resources {
            resources.check("resources", &mut out);
        }
        if let Err(m) = check_labels(&spec.labels) {
            out.push(Invalid::at("labels", m));
        }
        if let Some(reserved) = spec
            .labels
            .keys()
            .find(|k| RESERVED_LABELS.contains(&k.as_str()))
        {
            out.push(Invalid::at(
                "labels",
                format!("{reserved:?} is set by terrain (the Service selects pods by it)"),
            ));
        }
        out
    }

    fn render(spec: &Spec, _config: &Value) -> Option<Result<Vec<Value>, ProviderError>> {
        Some(Ok(objects(spec)))
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
        let Some((workload, service)) = live_pair(
            &client,
            &refs,
            &ctx.address,
            Redis::KIND,
            "a workload and a Service",
        )
        .await?
        else {
            return Ok(None);
        };
        let spec = spec_of(&workload, &service, prior);
        let pod = serving_pod(&client, &workload, &spec).await?;
        Ok(Some(Live {
            id: id.to_string(),
            outputs: outputs_of(&spec, &pod),
            spec,
        }))
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
        delete_owned(&prior.cluster, &refs, true, ctx, DELETE_TIMEOUT).await
    }

    async fn preview(
        &self,
        ctx: &Ctx,
        _id: &str,
        prior: &Spec,
        spec: &Spec,
    ) -> Result<Option<String>, ProviderError> {
        preview_marked(&spec.cluster, objects(prior), objects(spec), ctx).await
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
        Ok(Some(
            match live_pair(
                &client,
                &refs,
                &ctx.address,
                Redis::KIND,
                "a workload and a Service",
            )
            .await?
            {
                None => Health {
                    ready: false,
                    summary: "missing".into(),
                },
                Some((workload, _)) => Health {
                    ready: apply::readiness(&workload) == Some(Ok(true)),
                    summary: apply::summary(&workload),
                },
            },
        ))
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
            name: "redis-leader".into(),
            namespace: "default".into(),
            image: "redis:7.2".into(),
            port: 6379,
            workload: "pod".into(),
            volume: Some(Volume {
                claim: "fileserver-claim".into(),
                mount_path: "/mnt/fileserver".into(),
            }),
            service_name: Some("queue".into()),
            resources: Some(Resources {
                cpu: Some("250m".into()),
                memory: Some("256Mi".into()),
            }),
            labels: BTreeMap::from([("team".to_string(), "ml".to_string())]),
        }
    }

    fn minimal() -> Spec {
        Spec {
            volume: None,
            service_name: None,
            resources: None,
            labels: BTreeMap::new(),
            ..base()
        }
    }

    #[test]
    fn schema_matches_spec_and_outputs() {
        assert_eq!(
            schema_mismatches::<Redis>(&base(), &outputs_of(&base(), "redis-leader")),
            Vec::<String>::new()
        );
    }

    #[test]
    fn renders_a_pod_with_its_claim_and_a_service() {
        let labels = json!({"app": "redis-leader", "app.kubernetes.io/name": "redis", "app.kubernetes.io/managed-by": "terrain", "team": "ml"});
        let objects = objects(&base());
        assert_eq!(
            objects,
            vec![
                json!({
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": "redis-leader", "namespace": "default", "labels": labels},
                    "spec": {
                        "containers": [{
                            "name": "redis",
                            "image": "redis:7.2",
                            "ports": [{"name": "redis", "containerPort": 6379, "protocol": "TCP"}],
                            "readinessProbe": {"exec": {"command": ["redis-cli", "-p", "6379", "ping"]}, "initialDelaySeconds": 1, "periodSeconds": 5},
                            "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "256Mi"}},
                            "volumeMounts": [{"name": "data", "mountPath": "/mnt/fileserver"}],
                        }],
                        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "fileserver-claim"}}],
                    },
                }),
                json!({
                    "apiVersion": "v1", "kind": "Service",
                    "metadata": {"name": "queue", "namespace": "default", "labels": labels},
                    "spec": {
                        "type": "ClusterIP",
                        "selector": {"app": "redis-leader"},
                        "ports": [{"name": "redis", "port": 6379, "targetPort": 6379, "protocol": "TCP"}],
                    },
                }),
            ]
        );
    }

    #[test]
    fn renders_a_deployment_on_request() {
        let spec = Spec {
            workload: "deployment".into(),
            port: 6380,
            ..minimal()
        };
        let objects = objects(&spec);
        let deployment = &objects[0];
        assert_eq!(deployment["kind"], "Deployment");
        assert_eq!(
            deployment["spec"]["selector"],
            json!({"matchLabels": {"app": "redis-leader"}})
        );
        assert_eq!(
            deployment["spec"]["template"]["metadata"]["labels"],
            json!({"app": "redis-leader", "app.kubernetes.io/name": "redis"})
        );
        assert_eq!(
            deployment["spec"]["template"]["spec"]["containers"][0]["args"],
            json!(["--port", "6380"])
        );
        assert_eq!(objects[1]["metadata"]["name"], "redis-leader");
        assert_eq!(
            id_of(&spec.refs()),
            "apps/v1/Deployment/default/redis-leader,v1/Service/default/redis-leader"
        );
    }

    #[test]
    fn live_objects_read_back_as_the_spec() {
        for spec in [
            base(),
            minimal(),
            Spec {
                workload: "deployment".into(),
                ..base()
            },
        ] {
            let mut objects = marked(objects(&spec), "kubernetes_redis.queue");
            // Server defaults that are not part of the spec.
            objects[0]["metadata"]["uid"] = json!("u-1");
            objects[0]["status"] = json!({"phase": "Running"});
            objects[1]["spec"]["clusterIP"] = json!("10.0.0.9");
            assert_eq!(spec_of(&objects[0], &objects[1], &spec), spec);
        }
        // Autopilot fills in resources a stack left out: not drift.
        let mut objects = marked(objects(&minimal()), "kubernetes_redis.queue");
        objects[0]["spec"]["containers"][0]["resources"] =
            json!({"requests": {"cpu": "500m", "memory": "2Gi"}});
        assert_eq!(
            spec_of(&objects[0], &objects[1], &minimal()).resources,
            None
        );
    }

    #[test]
    fn outputs_name_the_endpoint() {
        let outputs = outputs_of(&base(), "redis-leader");
        assert_eq!(outputs.service_host, "queue.default.svc.cluster.local");
        assert_eq!(
            outputs.endpoint,
            json!({"namespace": "default", "pod": "redis-leader", "port": 6379, "service_host": "queue.default.svc.cluster.local"})
        );
        assert_eq!(
            id_of(&base().refs()),
            "v1/Pod/default/redis-leader,v1/Service/default/queue"
        );
    }

    #[test]
    fn validation_table() {
        let cases: Vec<(Spec, &str, &str)> = vec![
            (base(), "", ""),
            (minimal(), "", ""),
            (
                Spec {
                    name: "redis.leader".into(),
                    ..base()
                },
                "name",
                "DNS-1123 label",
            ),
            (Spec { port: 0, ..base() }, "port", "between 1 and 65535"),
            (
                Spec {
                    workload: "statefulset".into(),
                    ..base()
                },
                "workload",
                "use \"pod\" or \"deployment\"",
            ),
            (
                Spec {
                    image: "redis 7".into(),
                    ..base()
                },
                "image",
                "not an image reference",
            ),
            (
                Spec {
                    volume: Some(Volume {
                        claim: "c".into(),
                        mount_path: "mnt".into(),
                    }),
                    ..base()
                },
                "volume.mount_path",
                "absolute",
            ),
            (
                Spec {
                    resources: Some(Resources {
                        cpu: Some("lots".into()),
                        memory: None,
                    }),
                    ..base()
                },
                "resources.cpu",
                "is not a quantity",
            ),
            (
                Spec {
                    labels: BTreeMap::from([("app".to_string(), "x".to_string())]),
                    ..base()
                },
                "labels",
                "set by terrain",
            ),
        ];
        for (spec, path, message) in cases {
            let problems = Redis::validate(&spec, &Value::Null);
            if path.is_empty() {
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
}
