//! The `kubernetes` provider's object kinds end to end against the sandbox: a GKE
//! Autopilot cluster made by the `gke_cluster` kind, reached through its `kubernetes`
//! output (endpoint, CA, token file) and through a kubeconfig. Each kind goes create →
//! read (no diff) → update → preview → delete; a Job that exhausts its retries fails
//! with its pod's last log lines; a stranger's object is refused with `terrain import`;
//! a field another manager owns is a conflict until `force_conflicts`.

use std::sync::{Arc, Mutex, PoisonError};

use serde_json::{json, Value};
use terrain_providers::kubernetes::{apply, connect};
use terrain_providers::{Ctx, Health, ProviderError, Resource};
use terrain_sandbox::{Options, Sandbox, Timing};

/// A sandbox with one Autopilot cluster and its `kubernetes` output.
pub(crate) struct Env {
    pub(crate) sandbox: Sandbox,
    pub(crate) cluster: Value,
    pub(crate) client: terrain_providers::kubernetes::connect::Conn,
    pub(crate) dir: tempfile::TempDir,
}

pub(crate) fn kind(name: &str) -> Arc<dyn Resource> {
    terrain_providers::registry::builtin()
        .get(name)
        .unwrap_or_else(|| panic!("{name} is registered"))
        .clone()
}

pub(crate) fn ctx(address: &str) -> Ctx {
    Ctx::new(address, json!({}))
}

/// A context that keeps the progress messages it is sent.
pub(crate) fn recording(address: &str) -> (Ctx, Arc<Mutex<Vec<String>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&seen);
    let ctx = Ctx::new(address, json!({})).with_reporter(Arc::new(move |m: &str| {
        sink.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(m.to_string())
    }));
    (ctx, seen)
}

impl Env {
    pub(crate) async fn start() -> Env {
        let sandbox = Sandbox::start(Options {
            timing: Timing::scaled(0.01),
            ..Options::google_apis_on()
        })
        .await
        .expect("sandbox starts");
        let dir = tempfile::tempdir().expect("tempdir");
        let token = dir.path().join("token");
        std::fs::write(&token, "sandbox-token\n").expect("token file");
        let e = sandbox.gcp_endpoints();
        let gcp = json!({
            "project": "ml-project",
            "region": "us-central1",
            "access_token_file": token.display().to_string(),
            "poll_interval": "5ms",
            "max_poll_interval": "20ms",
            "retry_base_delay": "5ms",
            "endpoints": {"container": e.container, "file": e.file, "storage": e.storage},
        });
        let gke = kind("gke_cluster");
        let spec = gke.schema().with_defaults(
            &json!({"name": "batch", "mode": "autopilot", "location": "us-central1"}),
        );
        let created = gke
            .create(&Ctx::new("gke_cluster.batch", gcp), &spec)
            .await
            .expect("the cluster is created");
        let cluster = created.outputs["kubernetes"].clone();
        assert_eq!(cluster["flavor"], "gke");
        assert_eq!(cluster["autopilot"], true);
        let client = connect::client(&Ctx::new("test.connect", json!({})), &cluster)
            .await
            .expect("a client from the cluster's output");
        Env {
            sandbox,
            cluster,
            client,
            dir,
        }
    }

    /// The spec as the engine hands it over: defaults filled, local inputs prepared.
    pub(crate) fn spec(&self, kind_name: &str, fields: Value) -> Value {
        let mut spec = fields;
        spec["cluster"] = self.cluster.clone();
        let k = kind(kind_name);
        k.prepare(k.schema().with_defaults(&spec))
            .expect("the spec prepares")
    }
}

fn health(h: Health) -> (bool, String) {
    (h.ready, h.summary)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nfs_volume_redis_and_job_lifecycle() {
    let env = Env::start().await;

    // The volume: a pre-bound PersistentVolume and claim, Bound on create.
    let nfs = kind("kubernetes_nfs_volume");
    let nfs_ctx = ctx("kubernetes_nfs_volume.fileserver");
    let nfs_spec = env.spec("kubernetes_nfs_volume", json!({"name": "fileserver", "claim_name": "fileserver-claim", "server": "10.0.0.2", "path": "/NFSVol", "capacity": "1024Gi"}));
    assert!(nfs.validate(&nfs_spec, &json!({})).is_empty());
    let volume = nfs
        .create(&nfs_ctx, &nfs_spec)
        .await
        .expect("volume created");
    assert_eq!(
        volume.id,
        "v1/PersistentVolume//fileserver,v1/PersistentVolumeClaim/default/fileserver-claim"
    );
    assert_eq!(volume.outputs["phase"], "Bound");
    assert_eq!(
        volume.spec, nfs_spec,
        "the live volume reads back as the spec, 1024Gi spelled as written"
    );
    let read = nfs
        .read(&nfs_ctx, &volume.id, &volume.spec)
        .await
        .expect("read")
        .expect("exists");
    assert_eq!(without_nulls(&read.spec), without_nulls(&nfs_spec));
    assert_eq!(
        health(
            nfs.health(&nfs_ctx, &volume.id, &volume.spec)
                .await
                .expect("health")
        ),
        (true, "Bound".to_string())
    );

    // Redis with the claim mounted, behind a Service.
    let redis = kind("kubernetes_redis");
    let redis_ctx = ctx("kubernetes_redis.queue");
    let redis_spec = env.spec(
        "kubernetes_redis",
        json!({"volume": {"claim": "fileserver-claim", "mount_path": "/mnt/fileserver"}}),
    );
    let server = redis
        .create(&redis_ctx, &redis_spec)
        .await
        .expect("redis created");
    assert_eq!(
        server.id,
        "v1/Pod/default/redis-leader,v1/Service/default/redis-leader"
    );
    assert_eq!(
        server.outputs["endpoint"],
        json!({"namespace": "default", "pod": "redis-leader", "port": 6379, "service_host": "redis-leader.default.svc.cluster.local"})
    );
    let read = redis
        .read(&redis_ctx, &server.id, &server.spec)
        .await
        .expect("read")
        .expect("exists");
    assert_eq!(
        without_nulls(&read.spec),
        without_nulls(&redis_spec),
        "a clean re-plan shows no change"
    );
    let mut labelled = redis_spec.clone();
    labelled["labels"] = json!({"team": "ml"});
    let preview = redis
        .preview(&redis_ctx, &server.id, &redis_spec, &labelled)
        .await
        .expect("preview")
        .expect("a diff");
    assert!(preview.contains("+    team: ml"), "{preview}");
    let updated = redis
        .update(&redis_ctx, &server.id, &redis_spec, &labelled)
        .await
        .expect("labels update in place");
    assert_eq!(updated.spec["labels"], json!({"team": "ml"}));
    let read = redis
        .read(&redis_ctx, &server.id, &labelled)
        .await
        .expect("read")
        .expect("exists");
    assert_eq!(without_nulls(&read.spec), without_nulls(&labelled));
    assert!(
        health(
            redis
                .health(&redis_ctx, &server.id, &labelled)
                .await
                .expect("health")
        )
        .0
    );

    // A spot Job followed to completion, then changed in place.
    let job = kind("kubernetes_job");
    let (job_ctx, progress) = recording("kubernetes_job.workload");
    let job_spec = env.spec(
        "kubernetes_job",
        json!({
            "name": "workload", "image": "us-docker.pkg.dev/google-samples/containers/gke/batch-ml-workload", "spot": true,
            "volumes": [{"claim": "fileserver-claim", "mount_path": "/mnt/fileserver"}], "secret_env": {"TOKEN": "s3cr3t"},
            "wait": "complete",
        }),
    );
    assert!(job.validate(&job_spec, &json!({})).is_empty());
    let run = job
        .create(&job_ctx, &job_spec)
        .await
        .expect("the job completes");
    assert_eq!(
        run.id,
        "batch/v1/Job/default/workload,v1/Secret/default/workload-env"
    );
    assert_eq!(
        (
            run.outputs["status"].clone(),
            run.outputs["succeeded"].clone()
        ),
        (json!("Complete"), json!(1))
    );
    assert!(progress
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .any(|m| m.starts_with("waiting for Job default/workload")));
    let live_job = apply::get(&env.client, "batch/v1", "Job", Some("default"), "workload")
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(
        live_job["spec"]["template"]["spec"]["nodeSelector"],
        json!({"cloud.google.com/gke-spot": "true"})
    );
    assert_eq!(
        live_job["metadata"]["annotations"]["terrain.dev/address"],
        "kubernetes_job.workload"
    );
    let read = job
        .read(&job_ctx, &run.id, &run.spec)
        .await
        .expect("read")
        .expect("exists");
    assert_eq!(
        without_nulls(&read.spec),
        without_nulls(&job_spec),
        "the secret env reads back too"
    );
    assert_eq!(
        health(
            job.health(&job_ctx, &run.id, &run.spec)
                .await
                .expect("health")
        ),
        (true, "Complete (1/1 succeeded)".to_string())
    );

    // Logs, read once and followed (the Job has finished, so following ends too).
    let mut seen = Vec::new();
    for follow in [false, true] {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&lines);
        let sink: terrain_providers::LineSink = Arc::new(move |l: &str| {
            sink.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(l.to_string())
        });
        job.logs(&job_ctx, &run.id, &run.spec, follow, sink)
            .await
            .expect("logs");
        let lines = lines.lock().unwrap_or_else(PoisonError::into_inner).clone();
        assert!(
            !lines.is_empty(),
            "the job's pod has logs (follow = {follow})"
        );
        seen.push(lines);
    }
    assert_eq!(
        seen[0], seen[1],
        "following a finished job shows the same lines once"
    );

    let mut wider = job_spec.clone();
    wider["parallelism"] = json!(2);
    let preview = job
        .preview(&job_ctx, &run.id, &job_spec, &wider)
        .await
        .expect("preview")
        .expect("a diff");
    assert!(
        preview.contains("--- live\n+++ planned\n")
            && preview.contains("-  parallelism: 1\n+  parallelism: 2\n"),
        "{preview}"
    );
    assert!(
        !preview.contains("czNjcjN0") && !preview.contains("s3cr3t"),
        "secrets never show: {preview}"
    );
    let updated = job
        .update(&job_ctx, &run.id, &job_spec, &wider)
        .await
        .expect("parallelism updates in place");
    assert_eq!(updated.spec["parallelism"], 2);
    let read = job
        .read(&job_ctx, &run.id, &wider)
        .await
        .expect("read")
        .expect("exists");
    assert_eq!(without_nulls(&read.spec), without_nulls(&wider));

    // A template change is a replace: its preview still diffs against the live Job.
    let mut other_image = wider.clone();
    other_image["image"] = json!("python:3.11");
    let preview = job
        .preview(&job_ctx, &run.id, &wider, &other_image)
        .await
        .expect("preview")
        .expect("a diff");
    assert!(preview.contains("+        image: python:3.11"), "{preview}");

    // Delete in dependency order; deleting again is fine.
    for (k, c, id, spec) in [
        (&job, &job_ctx, &run.id, &wider),
        (&redis, &redis_ctx, &server.id, &labelled),
        (&nfs, &nfs_ctx, &volume.id, &nfs_spec),
    ] {
        k.delete(c, id, spec).await.expect("deleted");
        assert!(
            k.read(c, id, spec).await.expect("read").is_none(),
            "{id} is gone"
        );
        k.delete(c, id, spec)
            .await
            .expect("deleting again succeeds");
    }
    drop(env.dir);
    env.sandbox.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_exhausts_its_retries_fails_with_its_logs() {
    let env = Env::start().await;
    let job = kind("kubernetes_job");
    let job_ctx = ctx("kubernetes_job.broken");
    let spec = env.spec(
        "kubernetes_job",
        json!({
            "name": "broken", "image": "python:3.11", "retries": 1, "restart_policy": "Never", "wait": "complete",
            "pod_annotations": {"sandbox.terrain.dev/exit-code": "3"},
        }),
    );
    let Err(e) = job.create(&job_ctx, &spec).await else {
        panic!("a job that always fails must fail")
    };
    let text = e.to_string();
    // The Job exists: the engine keeps it, tainted, for the next apply to replace.
    match &e {
        ProviderError::Tainted { id, error } => {
            assert_eq!(id, "batch/v1/Job/default/broken");
            assert!(matches!(**error, ProviderError::Failed { .. }), "{error:?}");
        }
        other => panic!("a failed Job is tainted, not {other:?}"),
    }
    assert!(text.starts_with("kubernetes wait jobs.batch/broken failed: BackoffLimitExceeded: Job has reached the specified backoff limit\nlast log lines of pod broken-"), "{text}");
    assert!(
        text.contains("exited with code 3"),
        "the pod's own last words: {text}"
    );
    let id = "batch/v1/Job/default/broken";
    assert_eq!(
        job.health(&job_ctx, id, &spec)
            .await
            .expect("health")
            .summary,
        "Failed: BackoffLimitExceeded"
    );
    job.delete(&job_ctx, id, &spec).await.expect("deleted");
    env.sandbox.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manifests_apply_crds_first_update_prune_and_report_conflicts() {
    let env = Env::start().await;
    let manifest = kind("kubernetes_manifest");
    let m_ctx = ctx("kubernetes_manifest.stack");
    let file = env.dir.path().join("objects.yaml");
    let crd = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
"#;
    let write = |extra: &str| {
        let text = format!(
            "{crd}---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: ml\n---\napiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\n  namespace: ml\nspec:\n  size: 3\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  epochs: \"3\"\n{extra}"
        );
        std::fs::write(&file, text).expect("write manifest");
    };
    write("");
    let fields = json!({"file": file.display().to_string(), "namespace": "ml"});
    let spec = env.spec("kubernetes_manifest", fields.clone());
    assert_eq!(spec["objects"].as_array().map(Vec::len), Some(4));
    let created = manifest.create(&m_ctx, &spec).await.expect("applied");
    assert_eq!(
        created.id,
        "apiextensions.k8s.io/v1/CustomResourceDefinition//widgets.example.com,v1/Namespace//ml,example.com/v1/Widget/ml/w,v1/ConfigMap/ml/settings"
    );
    let read = manifest
        .read(&m_ctx, &created.id, &created.spec)
        .await
        .expect("read")
        .expect("exists");
    assert_eq!(
        without_nulls(&read.spec),
        without_nulls(&spec),
        "a clean re-plan shows no change"
    );
    assert_eq!(
        health(
            manifest
                .health(&m_ctx, &created.id, &spec)
                .await
                .expect("health")
        ),
        (true, "4/4 ready".to_string())
    );

    // An edited file is an in-place update; the widget dropped from it is deleted.
    std::fs::write(
        &file,
        format!("{crd}---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: ml\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  epochs: \"4\"\n"),
    )
    .expect("rewrite manifest");
    let changed = env.spec("kubernetes_manifest", fields.clone());
    assert_ne!(changed, spec);
    let preview = manifest
        .preview(&m_ctx, &created.id, &spec, &changed)
        .await
        .expect("preview")
        .expect("a diff");
    assert!(
        preview.contains("-  epochs: '3'\n+  epochs: '4'\n"),
        "{preview}"
    );
    assert!(preview.contains("Widget ml/w (deleted):"), "{preview}");
    let updated = manifest
        .update(&m_ctx, &created.id, &spec, &changed)
        .await
        .expect("updated");
    assert!(!updated.id.contains("Widget"), "{}", updated.id);
    assert!(
        apply::get(&env.client, "example.com/v1", "Widget", Some("ml"), "w")
            .await
            .expect("get")
            .is_none(),
        "the dropped widget is gone"
    );

    // Someone else takes a field: the next apply is a conflict naming them and the remedy.
    let edit = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": "ml"}, "data": {"epochs": "9"}});
    let config_maps: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(env.client.kube(), "ml");
    config_maps
        .patch(
            "settings",
            &kube::api::PatchParams::apply("kubectl-edit").force(),
            &kube::api::Patch::Apply(&edit),
        )
        .await
        .expect("another manager takes the field");
    write("");
    let again = env.spec("kubernetes_manifest", fields.clone());
    let Err(e) = manifest.update(&m_ctx, &updated.id, &changed, &again).await else {
        panic!("a taken field must conflict")
    };
    let text = e.to_string();
    assert!(matches!(e, ProviderError::Conflict { .. }), "{e:?}");
    assert!(
        text.contains("kubectl-edit") && text.contains(".data.epochs"),
        "{text}"
    );
    assert!(
        text.contains("set force_conflicts = true on kubernetes_manifest.stack to take ownership"),
        "{text}"
    );
    let mut forced = again.clone();
    forced["force_conflicts"] = json!(true);
    let taken = manifest
        .update(&m_ctx, &updated.id, &changed, &forced)
        .await
        .expect("forced");
    let settings = apply::get(&env.client, "v1", "ConfigMap", Some("ml"), "settings")
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(settings["data"]["epochs"], "3");

    // A stranger's object of the same name is refused, naming terrain import.
    let stranger = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "theirs", "namespace": "default"}, "data": {}});
    apply::apply(&env.client, &stranger, false)
        .await
        .expect("someone else's object");
    let theirs = env.spec("kubernetes_manifest", json!({"manifest": stranger}));
    let Err(e) = manifest
        .create(&ctx("kubernetes_manifest.theirs"), &theirs)
        .await
    else {
        panic!("a stranger's object must be refused")
    };
    assert!(
        e.to_string()
            .contains("terrain import kubernetes_manifest.theirs v1/ConfigMap/default/theirs"),
        "{e}"
    );

    // Unknown kinds name their CRD.
    let gadget = env.spec("kubernetes_manifest", json!({"manifest": {"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "g"}}}));
    let Err(e) = manifest
        .create(&ctx("kubernetes_manifest.gadget"), &gadget)
        .await
    else {
        panic!("an unserved kind must fail")
    };
    assert!(e.to_string().contains("CustomResourceDefinition"), "{e}");

    manifest
        .delete(&m_ctx, &taken.id, &forced)
        .await
        .expect("deleted");
    assert!(manifest
        .read(&m_ctx, &taken.id, &forced)
        .await
        .expect("read")
        .is_none());
    env.sandbox.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubeconfig_reference_reaches_the_same_cluster() {
    let env = Env::start().await;
    let written = env.sandbox.kubeconfig(env.dir.path()).expect("kubeconfig");
    let (_, path) = written
        .iter()
        .find(|(name, _)| name == "batch")
        .expect("a kubeconfig for the cluster");
    let reference =
        json!({"kubeconfig": path.display().to_string(), "flavor": "gke", "autopilot": true});
    let client = connect::client(&Ctx::new("test.connect", json!({})), &reference)
        .await
        .expect("client from kubeconfig");
    let namespaces = apply::list(&client, "v1", "Namespace", None, "")
        .await
        .expect("list");
    assert!(
        namespaces
            .iter()
            .any(|n| n["metadata"]["name"] == "kube-system"),
        "{namespaces:?}"
    );
    env.sandbox.shutdown().await;
}

/// A spec as plans compare it: an absent field and a null one are the same.
pub(crate) fn without_nulls(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), without_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_nulls).collect()),
        other => other.clone(),
    }
}

/// A re-plan reads the Jobs of one namespace with one list (and their Secrets with one
/// more): `read_batch` answers for each Job exactly what `read` does, and `None` for
/// one that is gone, so the engine reads that one alone before calling it gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_of_one_namespace_are_read_with_one_list() {
    let env = Env::start().await;
    let job = kind("kubernetes_job");
    let mut items = Vec::new();
    for (name, secret) in [("shard-a", false), ("shard-b", true), ("shard-c", false)] {
        let mut fields = json!({"name": name, "image": "python:3.11", "wait": "created"});
        if secret {
            fields["secret_env"] = json!({"API_KEY": "s3cr3t"});
        }
        let spec = env.spec("kubernetes_job", fields);
        let made = job
            .create(&ctx(&format!("kubernetes_job.{name}")), &spec)
            .await
            .expect("the job is created");
        items.push((made.id, spec));
    }
    let keys: Vec<Option<String>> = items
        .iter()
        .map(|(id, spec)| job.batch_key(&json!({}), id, spec))
        .collect();
    assert!(keys[0].is_some(), "a Job with a namespace is listed");
    assert!(
        keys.iter().all(|k| *k == keys[0]),
        "one namespace, one key: {keys:?}"
    );
    // Another namespace is another list.
    let other = env.spec(
        "kubernetes_job",
        json!({"name": "x", "namespace": "other", "image": "python:3.11"}),
    );
    assert_ne!(
        job.batch_key(&json!({}), "batch/v1/Job/other/x", &other),
        keys[0]
    );

    // The third Job goes away outside terrain.
    kind("kubernetes_job")
        .delete(&ctx("kubernetes_job.shard-c"), &items[2].0, &items[2].1)
        .await
        .expect("deleted");
    let asked: Vec<(&str, &Value)> = items.iter().map(|(id, s)| (id.as_str(), s)).collect();
    let batch = job
        .read_batch(&ctx("kubernetes_job (list of 3)"), &asked)
        .await
        .expect("the batch read");
    assert_eq!(batch.len(), 3);
    for (i, (id, spec)) in items.iter().enumerate().take(2) {
        let alone = job
            .read(
                &ctx(&format!("kubernetes_job.shard-{}", ["a", "b"][i])),
                id,
                spec,
            )
            .await
            .expect("read")
            .expect("still there");
        let listed = batch[i].as_ref().expect("the list shows it");
        assert_eq!(listed.id, alone.id);
        assert_eq!(
            listed.spec, alone.spec,
            "{id}: the list reads what a get reads"
        );
        assert_eq!(listed.outputs, alone.outputs);
    }
    assert_eq!(
        batch[1].as_ref().map(|o| o.spec["secret_env"].clone()),
        Some(json!({"API_KEY": "s3cr3t"})),
        "the Job's Secret comes from the list of Secrets"
    );
    assert!(batch[2].is_none(), "a deleted Job is not in the list");
    env.sandbox.shutdown().await;
}

fn decoded(secret: &Value, key: &str) -> Option<String> {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(secret["data"][key].as_str()?)
        .ok()?;
    String::from_utf8(bytes).ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_draw_generated_values_in_the_cluster_and_keep_them() {
    let env = Env::start().await;
    let secret = kind("kubernetes_secret");
    let c = ctx("kubernetes_secret.db");
    let spec = env.spec(
        "kubernetes_secret",
        json!({"name": "db", "data": {"username": "root"}, "generate": {"password": 24}}),
    );
    let get = || async {
        apply::get(&env.client, "v1", "Secret", Some("default"), "db")
            .await
            .expect("get")
    };
    let created = secret.create(&c, &spec).await.expect("created");
    assert_eq!(created.id, "v1/Secret/default/db");
    assert_eq!(created.outputs["keys"], json!(["password", "username"]));
    let live = get().await.expect("the Secret exists");
    let password = decoded(&live, "password").expect("a generated password");
    assert_eq!(password.len(), 24);
    assert!(password.chars().all(|ch| ch.is_ascii_alphanumeric()));
    assert_eq!(decoded(&live, "username").as_deref(), Some("root"));
    let recorded = format!("{}{}{}", created.id, created.spec, created.outputs);
    assert!(
        !recorded.contains(&password),
        "the value stays in the cluster"
    );

    // A clean re-plan shows nothing, and an update keeps the drawn value.
    let read = secret
        .read(&c, &created.id, &created.spec)
        .await
        .expect("read")
        .expect("exists");
    assert_eq!(without_nulls(&read.spec), without_nulls(&spec));
    let labelled = env.spec(
        "kubernetes_secret",
        json!({"name": "db", "data": {"username": "root"}, "generate": {"password": 24},
               "labels": {"team": "ml"}}),
    );
    secret
        .update(&c, &created.id, &spec, &labelled)
        .await
        .expect("updated");
    let live = get().await.expect("exists");
    assert_eq!(
        decoded(&live, "password").as_deref(),
        Some(password.as_str())
    );
    assert_eq!(live["metadata"]["labels"]["team"], "ml");

    // Someone removes the password and changes the username: the read shows both, and
    // the update draws a new password and puts the username back.
    let mut edited = live.clone();
    edited["data"] = json!({"username": "YWRtaW4="});
    edited["metadata"]["managedFields"] = Value::Null;
    let secrets: kube::Api<kube::api::DynamicObject> = kube::Api::namespaced_with(
        env.client.kube(),
        "default",
        &kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&()),
    );
    secrets
        .replace(
            "db",
            &kube::api::PostParams::default(),
            &serde_json::from_value(edited).expect("an object"),
        )
        .await
        .expect("edited by hand");
    let drifted = secret
        .read(&c, &created.id, &labelled)
        .await
        .expect("read")
        .expect("exists");
    assert_eq!(drifted.spec["data"], json!({"username": "admin"}));
    assert_eq!(drifted.spec["generate"], json!({}));
    secret
        .update(&c, &created.id, &drifted.spec, &labelled)
        .await
        .expect("converged");
    let live = get().await.expect("exists");
    let redrawn = decoded(&live, "password").expect("drawn again");
    assert_eq!(redrawn.len(), 24);
    assert_ne!(redrawn, password);
    assert_eq!(decoded(&live, "username").as_deref(), Some("root"));

    // A stranger's Secret of the same name is refused on create.
    let other = ctx("kubernetes_secret.other");
    let err = secret
        .create(&other, &spec)
        .await
        .expect_err("the Secret belongs to kubernetes_secret.db");
    assert!(
        err.to_string().contains("belongs to kubernetes_secret.db"),
        "{err}"
    );

    secret
        .delete(&c, &created.id, &labelled)
        .await
        .expect("deleted");
    secret
        .delete(&c, &created.id, &labelled)
        .await
        .expect("a second delete finds nothing to do");
    assert!(secret
        .read(&c, &created.id, &labelled)
        .await
        .expect("read")
        .is_none());
    env.sandbox.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manifest_reads_many_objects_of_one_kind_with_one_list() {
    let env = Env::start().await;
    let manifest = kind("kubernetes_manifest");
    let m_ctx = ctx("kubernetes_manifest.settings");
    let objects: Vec<Value> = (0..5)
        .map(|i| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": format!("settings-{i}")}, "data": {"i": i.to_string()}})
        })
        .chain([json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}})])
        .collect();
    let spec = env.spec(
        "kubernetes_manifest",
        json!({"manifest": objects, "namespace": "default"}),
    );
    let created = manifest.create(&m_ctx, &spec).await.expect("applied");
    // One ConfigMap goes away outside terrain.
    let maps: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(env.client.kube(), "default");
    maps.delete("settings-3", &Default::default())
        .await
        .expect("deleted by hand");
    env.sandbox.clear_traffic();
    let read = manifest
        .read(&m_ctx, &created.id, &created.spec)
        .await
        .expect("read")
        .expect("exists");
    let calls: Vec<String> = env
        .sandbox
        .traffic()
        .iter()
        .filter(|e| e.api == "kubernetes")
        .map(|e| format!("{} {}", e.method, e.path))
        .collect();
    assert_eq!(
        calls.iter().filter(|c| c.contains("/configmaps")).count(),
        1,
        "five ConfigMaps, one list: {calls:?}"
    );
    assert!(!read.id.contains("settings-3"), "{}", read.id);
    assert_eq!(read.spec["objects"].as_array().map(Vec::len), Some(5));
    assert!(
        read.id.contains("v1/ConfigMap/default/settings-4"),
        "{}",
        read.id
    );
    env.sandbox.shutdown().await;
}
