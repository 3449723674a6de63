//! The `kubernetes` provider's data kinds end to end against the sandbox: a GKE cluster
//! whose Redis pod is backed by a real redis-server and whose NFS volume is a directory.
//! Queue items are pushed, read back from that Redis through a port-forward, taken
//! back on update and delete, and pushed again after a Redis restart; datasets are
//! copied through a helper pod and through an existing pod, listed via exec, mirrored
//! on update and removed on destroy only when asked.

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::AttachParams;
use serde_json::{json, Value};
use terrain_providers::kubernetes::dataset::{self, Dataset};
use terrain_providers::kubernetes::queue_items::{self, QueueItems};
use terrain_providers::kubernetes::resp::Connection;
use terrain_providers::kubernetes::{apply, connect};
use terrain_providers::{Ctx, Health, Kind, ProviderError};
use terrain_sandbox::{Options, Sandbox, Timing};
use tokio::io::AsyncReadExt;

const REDIS_SERVER: &str = "/usr/bin/redis-server";
const PROJECT: &str = "proj";
const LOCATION: &str = "us-central1";
const WAIT: Duration = Duration::from_secs(60);

/// A sandbox with one GKE cluster holding an NFS volume claimed as `fileserver` and a
/// Redis pod `redis-leader` that mounts it at `/mnt/fileserver`.
struct Env {
    sandbox: Sandbox,
    cluster: Value,
    client: terrain_providers::kubernetes::connect::Conn,
    _kubeconfigs: tempfile::TempDir,
}

async fn cloud(
    http: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    body: Option<Value>,
) -> Value {
    let mut req = http.request(method, url).bearer_auth("cloud-token");
    if let Some(body) = body {
        req = req.json(&body);
    }
    let resp = req.send().await.expect("the container API answers");
    let status = resp.status();
    let body: Value = resp.json().await.expect("JSON");
    assert!(status.is_success(), "{url}: {status} {body}");
    body
}

fn ctx(address: &str) -> Ctx {
    Ctx::new(address, json!({}))
}

fn redis_pod() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "redis-leader", "namespace": "default", "labels": {"app": "redis"}},
        "spec": {
            "containers": [{
                "name": "redis",
                "image": "redis:7.2",
                "ports": [{"containerPort": 6379}],
                "volumeMounts": [{"name": "data", "mountPath": "/mnt/fileserver"}],
            }],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "fileserver"}}],
        },
    })
}

impl Env {
    async fn start() -> Option<Env> {
        if !Path::new(REDIS_SERVER).exists() {
            eprintln!("skipped: {REDIS_SERVER} is not installed (apt-get install redis-server)");
            return None;
        }
        let sandbox = Sandbox::start(Options {
            timing: Timing::instant(),
            ..Options::google_apis_on()
        })
        .await
        .expect("sandbox starts");
        let http = reqwest::Client::new();
        let clusters = format!(
            "{}v1/projects/{PROJECT}/locations/{LOCATION}/clusters",
            sandbox.gcp_endpoints().container
        );
        let op = cloud(
            &http,
            reqwest::Method::POST,
            &clusters,
            Some(json!({"cluster": {"name": "batch", "initialNodeCount": 1}})),
        )
        .await;
        let op_url = format!(
            "{}v1/projects/{PROJECT}/locations/{LOCATION}/operations/{}",
            sandbox.gcp_endpoints().container,
            op["name"].as_str().expect("operation name")
        );
        let mut done = false;
        for _ in 0..200 {
            if cloud(&http, reqwest::Method::GET, &op_url, None).await["status"] == "DONE" {
                done = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(done, "the cluster was never created");

        let kubeconfigs = tempfile::tempdir().expect("tempdir");
        let written = sandbox.kubeconfig(kubeconfigs.path()).expect("kubeconfig");
        let (_, path) = written
            .iter()
            .find(|(name, _)| name == "batch")
            .expect("a kubeconfig for the cluster");
        let cluster = json!({"kubeconfig": path.display().to_string()});
        let client = connect::client(&ctx("test.connect"), &cluster)
            .await
            .expect("client");

        let volume = json!({
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": "fileserver"},
            "spec": {
                "capacity": {"storage": "1Ti"},
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "",
                "nfs": {"server": "10.0.0.2", "path": "/NFSVol"},
            },
        });
        let claim = json!({
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "fileserver", "namespace": "default"},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "",
                "volumeName": "fileserver",
                "resources": {"requests": {"storage": "1Ti"}},
            },
        });
        let env = Env {
            sandbox,
            cluster,
            client,
            _kubeconfigs: kubeconfigs,
        };
        for object in [volume, claim] {
            apply::apply(&env.client, &object, true)
                .await
                .expect("applied");
        }
        let setup = ctx("test.setup");
        apply::wait_until(
            &env.client,
            "v1",
            "PersistentVolumeClaim",
            Some("default"),
            "fileserver",
            &setup,
            WAIT,
            "the claim to bind",
            |c| Ok(c["status"]["phase"] == "Bound"),
        )
        .await
        .expect("the claim binds");
        env.start_redis().await;
        Some(env)
    }

    async fn start_redis(&self) -> String {
        apply::apply(&self.client, &redis_pod(), true)
            .await
            .expect("applied");
        let pod = apply::wait_until(
            &self.client,
            "v1",
            "Pod",
            Some("default"),
            "redis-leader",
            &ctx("test.setup"),
            WAIT,
            "redis to be ready",
            apply::pod_ready,
        )
        .await
        .expect("redis runs");
        pod["metadata"]["uid"].as_str().expect("a uid").to_string()
    }

    async fn restart_redis(&self) -> String {
        apply::delete_and_wait(
            &self.client,
            "v1",
            "Pod",
            Some("default"),
            "redis-leader",
            &ctx("test.setup"),
            WAIT,
        )
        .await
        .expect("deleted");
        self.start_redis().await
    }

    fn pods(&self) -> kube::Api<Pod> {
        kube::Api::namespaced(self.client.kube(), "default")
    }

    /// The Redis list, read through a port-forward of its own.
    async fn queued(&self, list: &str) -> Vec<String> {
        let mut forward = self
            .pods()
            .portforward("redis-leader", &[6379])
            .await
            .expect("port-forward");
        let stream = forward.take_stream(6379).expect("a stream");
        let mut conn = Connection::new(stream);
        let items = conn.lrange_all(list).await.expect("lrange");
        drop(conn);
        forward.abort();
        items
    }

    /// What `command` prints in the Redis pod.
    async fn exec(&self, command: &[&str]) -> String {
        let mut attached = self
            .pods()
            .exec(
                "redis-leader",
                command.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
                &AttachParams::default().stdout(true).stderr(false),
            )
            .await
            .expect("exec");
        let mut out = String::new();
        attached
            .stdout()
            .expect("stdout")
            .read_to_string(&mut out)
            .await
            .expect("read stdout");
        let status = attached.take_status().expect("status").await;
        assert!(
            status.as_ref().and_then(|s| s.status.as_deref()) == Some("Success")
                || command[0] == "find",
            "{command:?}: {status:?}"
        );
        out
    }

    /// The files under `dir` in the Redis pod, relative to it, sorted.
    async fn files(&self, dir: &str) -> Vec<String> {
        let listing = self.exec(&["find", dir, "-type", "f"]).await;
        let mut files: Vec<String> = listing
            .lines()
            .filter_map(|l| l.strip_prefix(&format!("{dir}/")))
            .map(str::to_string)
            .collect();
        files.sort();
        files
    }

    async fn helper_pods(&self) -> Vec<String> {
        let list = self
            .pods()
            .list(&Default::default())
            .await
            .expect("list pods");
        list.items
            .into_iter()
            .filter_map(|p| p.metadata.name)
            .filter(|n| n.starts_with("terrain-dataset-"))
            .collect()
    }
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

#[tokio::test]
async fn queue_items_land_in_the_pods_redis_and_follow_the_stack() -> Result<(), ProviderError> {
    let Some(env) = Env::start().await else {
        return Ok(());
    };
    let ctx = ctx("kubernetes_queue_items.shards");
    let files = tempfile::tempdir().expect("tempdir");
    for name in ["b.jsonl", "a.jsonl", "notes.txt"] {
        std::fs::write(files.path().join(name), name).expect("write");
    }
    let spec = |items: &[&str]| {
        QueueItems::prepare(queue_items::Spec {
            cluster: env.cluster.clone(),
            redis: json!({"namespace": "default", "pod": "redis-leader", "port": 6379, "service_host": "redis-leader.default.svc.cluster.local"}),
            list: "datasets".into(),
            items: strings(items),
            from: Some(queue_items::FromDir {
                dir: files.path().display().to_string(),
                glob: "*.jsonl".into(),
                prefix: "/mnt/fileserver/".into(),
            }),
            password: None,
            resolved: None,
        })
    };

    let first = spec(&["warmup"])?;
    let created = QueueItems.create(&ctx, &first).await?;
    let pushed = strings(&[
        "warmup",
        "/mnt/fileserver/a.jsonl",
        "/mnt/fileserver/b.jsonl",
    ]);
    assert_eq!(env.queued("datasets").await, pushed);
    assert_eq!(created.outputs.pushed, pushed);
    assert_eq!(created.outputs.count, 3);
    let uid = created.outputs.redis_pod_uid.clone();
    assert!(
        !uid.is_empty() && created.id.ends_with(&format!("@{uid}")),
        "{}",
        created.id
    );

    let read = QueueItems
        .read(&ctx, &created.id, Some(&created.spec))
        .await?
        .expect("still there");
    assert_eq!(
        (&read.spec, &read.outputs),
        (&created.spec, &created.outputs)
    );
    let health = QueueItems
        .health(&ctx, &created.id, Some(&created.spec))
        .await?;
    assert_eq!(
        health,
        Some(Health {
            ready: true,
            summary: "3 of 3 still queued".into()
        })
    );

    // "warmup" leaves the stack and "c.jsonl" appears: only the new file is pushed.
    std::fs::write(files.path().join("c.jsonl"), "c").expect("write");
    let second = spec(&[])?;
    let updated = QueueItems
        .update(&ctx, &created.id, &created.spec, &second)
        .await?;
    assert_eq!(
        env.queued("datasets").await,
        strings(&[
            "/mnt/fileserver/a.jsonl",
            "/mnt/fileserver/b.jsonl",
            "/mnt/fileserver/c.jsonl"
        ])
    );
    assert_eq!(updated.id, created.id);

    // Redis restarts empty: the items read as gone, and a create pushes them again.
    let new_uid = env.restart_redis().await;
    assert_ne!(new_uid, uid);
    assert!(QueueItems
        .read(&ctx, &updated.id, Some(&updated.spec))
        .await?
        .is_none());
    let health = QueueItems
        .health(&ctx, &updated.id, Some(&updated.spec))
        .await?
        .expect("health");
    assert!(!health.ready, "{health:?}");
    // Nothing of ours is in the new Redis: deleting the old record is a no-op.
    QueueItems
        .delete(&ctx, &updated.id, Some(&updated.spec))
        .await?;
    let again = QueueItems.create(&ctx, &second).await?;
    assert_eq!(again.outputs.redis_pod_uid, new_uid);
    assert_eq!(env.queued("datasets").await, again.outputs.pushed);

    QueueItems
        .delete(&ctx, &again.id, Some(&again.spec))
        .await?;
    assert_eq!(env.queued("datasets").await, Vec::<String>::new());
    env.sandbox.shutdown().await;
    Ok(())
}

fn write(dir: &Path, rel: &str, content: &str) {
    let path = dir.join(rel);
    std::fs::create_dir_all(path.parent().expect("has a parent")).expect("mkdir");
    std::fs::write(path, content).expect("write");
}

#[tokio::test]
async fn datasets_are_copied_mirrored_and_kept_or_removed() -> Result<(), ProviderError> {
    let Some(env) = Env::start().await else {
        return Ok(());
    };
    let ctx = ctx("kubernetes_dataset.shards");
    let source = tempfile::tempdir().expect("tempdir");
    write(source.path(), "train/shard-0.jsonl", "{\"x\":0}\n");
    write(source.path(), "train/shard-1.jsonl", "{\"x\":1}\n");
    write(source.path(), "README.md", "# shards\n");
    let spec = |path: &str, pod: Option<dataset::PodRef>, delete_on_destroy: bool| {
        Dataset::prepare(dataset::Spec {
            cluster: env.cluster.clone(),
            source: source.path().display().to_string(),
            claim: "fileserver".into(),
            namespace: "default".into(),
            path: path.into(),
            pod,
            image: "busybox:1.36".into(),
            content_hash: None,
            files: None,
            delete_on_destroy,
        })
    };

    // Through a helper pod, which is gone afterwards.
    let first = spec("/datasets", None, true)?;
    let created = Dataset.create(&ctx, &first).await?;
    assert_eq!(
        env.files("/mnt/fileserver/datasets").await,
        strings(&["README.md", "train/shard-0.jsonl", "train/shard-1.jsonl"])
    );
    assert_eq!(
        env.exec(&["cat", "/mnt/fileserver/datasets/train/shard-1.jsonl"])
            .await,
        "{\"x\":1}\n"
    );
    assert_eq!(created.outputs.files, 3);
    assert_eq!(created.outputs.bytes, 8 + 8 + 9);
    assert_eq!(
        Some(created.outputs.content_hash.clone()),
        first.content_hash
    );
    assert_eq!(created.spec, first);
    assert_eq!(env.helper_pods().await, Vec::<String>::new());

    let read = Dataset
        .read(&ctx, &created.id, Some(&created.spec))
        .await?
        .expect("the claim exists");
    assert_eq!(
        (&read.spec, &read.outputs),
        (&created.spec, &created.outputs)
    );
    let health = Dataset
        .health(&ctx, &created.id, Some(&created.spec))
        .await?
        .expect("health");
    assert!(
        health.ready && health.summary.starts_with("copied 3 files (hash "),
        "{health:?}"
    );

    // A changed, a removed and an added file: the update mirrors the source.
    write(source.path(), "train/shard-1.jsonl", "{\"x\":11}\n");
    std::fs::remove_file(source.path().join("README.md")).expect("rm");
    write(source.path(), "val/shard-0.jsonl", "{\"v\":0}\n");
    let second = spec("/datasets", None, true)?;
    assert_ne!(second.content_hash, first.content_hash);
    let updated = Dataset
        .update(&ctx, &created.id, &created.spec, &second)
        .await?;
    assert_eq!(
        env.files("/mnt/fileserver/datasets").await,
        strings(&[
            "train/shard-0.jsonl",
            "train/shard-1.jsonl",
            "val/shard-0.jsonl"
        ])
    );
    assert_eq!(
        env.exec(&["cat", "/mnt/fileserver/datasets/train/shard-1.jsonl"])
            .await,
        "{\"x\":11}\n"
    );
    assert_eq!(updated.spec.content_hash, second.content_hash);
    assert_eq!(env.helper_pods().await, Vec::<String>::new());

    // Through the Redis pod, into another directory, kept on destroy.
    let through_pod = spec(
        "/models",
        Some(dataset::PodRef {
            name: "redis-leader".into(),
            mount_path: "/mnt/fileserver".into(),
        }),
        false,
    )?;
    let kept = Dataset.create(&ctx, &through_pod).await?;
    assert_eq!(
        env.files("/mnt/fileserver/models").await,
        strings(&[
            "train/shard-0.jsonl",
            "train/shard-1.jsonl",
            "val/shard-0.jsonl"
        ])
    );
    Dataset.delete(&ctx, &kept.id, Some(&kept.spec)).await?;
    assert_eq!(
        env.files("/mnt/fileserver/models").await.len(),
        3,
        "delete_on_destroy is off"
    );

    Dataset
        .delete(&ctx, &updated.id, Some(&updated.spec))
        .await?;
    assert_eq!(
        env.files("/mnt/fileserver/datasets").await,
        Vec::<String>::new()
    );
    assert_eq!(
        env.files("/mnt/fileserver/models").await.len(),
        3,
        "only its own path is removed"
    );
    assert_eq!(env.helper_pods().await, Vec::<String>::new());

    // Without the claim the dataset reads as gone.
    apply::delete_and_wait(
        &env.client,
        "v1",
        "Pod",
        Some("default"),
        "redis-leader",
        &ctx,
        WAIT,
    )
    .await?;
    apply::delete_and_wait(
        &env.client,
        "v1",
        "PersistentVolumeClaim",
        Some("default"),
        "fileserver",
        &ctx,
        WAIT,
    )
    .await?;
    assert!(Dataset
        .read(&ctx, &kept.id, Some(&kept.spec))
        .await?
        .is_none());
    env.sandbox.shutdown().await;
    Ok(())
}
