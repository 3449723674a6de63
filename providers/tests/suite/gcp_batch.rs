//! Batch reads of the GCP kinds against the sandbox: `read_batch` (through the untyped
//! `Resource` face the engine drives) answers for each object exactly what `read` does,
//! with one list call per location (clusters, Filestore instances) or per cluster (node
//! pools) and no per-object GET; ids the list does not show, objects being deleted and
//! parents that are gone answer `None`; Filestore pages are followed to the end.

use std::future::Future;
use std::time::Duration;

use serde_json::{json, Value};
use terrain_providers::gcp::filestore::FilestoreInstance;
use terrain_providers::{Adapter, Ctx, Kind, Observed, Resource};
use terrain_sandbox::{Exchange, Sandbox, Timing};

const PROJECT: &str = "ml-project";

/// A sandbox with realistic operation durations (so a delete stays in progress while it
/// is read) and the `[providers.gcp]` table pointing at it.
struct Env {
    sandbox: Sandbox,
    gcp: Value,
    _dir: tempfile::TempDir,
}

use crate::support::gcp::kind;

impl Env {
    async fn start() -> Env {
        let started = crate::support::gcp::start(Timing::default(), PROJECT).await;
        Env {
            sandbox: started.sandbox,
            gcp: started.table,
            _dir: started.dir,
        }
    }

    fn ctx(&self, address: &str) -> Ctx {
        Ctx::new(address, self.gcp.clone())
    }

    /// Runs `work` while moving the sandbox clock on, so operations finish at once.
    async fn quickly<T>(&self, work: impl Future<Output = T>) -> T {
        let mut work = std::pin::pin!(work);
        loop {
            tokio::select! {
                out = &mut work => return out,
                () = tokio::time::sleep(Duration::from_millis(10)) => {
                    self.sandbox.advance_clock(Duration::from_secs(60));
                }
            }
        }
    }

    /// Creates one object of `kind_name` per spec, all at once; returns them in order.
    async fn create_all(&self, kind_name: &str, specs: &[Value]) -> Vec<Observed> {
        let k = kind(kind_name);
        let creates = specs.iter().map(|spec| {
            let k = k.clone();
            let spec = k.schema().with_defaults(spec);
            let ctx = self.ctx(&format!(
                "{kind_name}.{}",
                spec["name"].as_str().unwrap_or("x")
            ));
            async move {
                k.create(&ctx, &spec)
                    .await
                    .unwrap_or_else(|e| panic!("{kind_name} {spec} is created: {e}"))
            }
        });
        self.quickly(futures::future::join_all(creates)).await
    }

    /// Starts deleting `path` (under the API root `root`) without waiting for it.
    async fn start_delete(&self, root: &str, id: &str) {
        let answer = reqwest::Client::new()
            .delete(format!("{root}v1/{id}"))
            .bearer_auth("sandbox-token")
            .send()
            .await
            .expect("delete sent");
        assert!(answer.status().is_success(), "delete {id}: {answer:?}");
    }

    /// The GETs and lists of `api` since the traffic was last cleared, as `METHOD path?query`.
    fn reads(&self, api: &str) -> Vec<String> {
        self.sandbox
            .traffic()
            .into_iter()
            .filter(|x: &Exchange| x.api == api && x.method == "GET")
            .map(|x| {
                if x.query.is_empty() {
                    format!("GET {}", x.path)
                } else {
                    format!("GET {}?{}", x.path, x.query)
                }
            })
            .collect()
    }
}

/// Reads each of `items` alone, as the engine would without batches.
async fn read_each(k: &dyn Resource, ctx: &Ctx, items: &[(&str, &Value)]) -> Vec<Option<Observed>> {
    let mut out = Vec::new();
    for (id, prior) in items {
        out.push(
            k.read(ctx, id, prior)
                .await
                .unwrap_or_else(|e| panic!("read {id}: {e}")),
        );
    }
    out
}

/// Asserts the batch answered exactly what reading each object alone does, and that
/// the objects `shown` (by index) were found.
fn assert_same(batch: &[Option<Observed>], alone: &[Option<Observed>], shown: &[usize]) {
    assert_eq!(batch.len(), alone.len());
    for (i, (b, a)) in batch.iter().zip(alone).enumerate() {
        assert_eq!(b, a, "item {i}: the batch and a read disagree");
        assert_eq!(b.is_some(), shown.contains(&i), "item {i}: {b:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusters_are_read_with_one_list_per_location() {
    let env = Env::start().await;
    let gke = kind("gke_cluster");
    let created = env
        .create_all(
            "gke_cluster",
            &[
                json!({"name": "batch", "mode": "autopilot", "location": "us-central1"}),
                // Its location is the provider's region, which its spec leaves out.
                json!({"name": "train", "labels": {"team": "ml"}}),
                json!({"name": "gpu", "location": "us-central1-a"}),
                json!({"name": "doomed", "location": "us-central1-a"}),
            ],
        )
        .await;
    let [batch, train, gpu, doomed] = &created[..] else {
        panic!("four clusters")
    };
    // One being torn down is as good as gone, for a read as for a list.
    env.start_delete(&env.sandbox.gcp_endpoints().container, &doomed.id)
        .await;
    let missing = format!("projects/{PROJECT}/locations/us-central1/clusters/never-made");
    let null = Value::Null;
    let items: Vec<(&str, &Value)> = vec![
        (&batch.id, &batch.spec),
        (&missing, &null),
        (&train.id, &train.spec),
        (&gpu.id, &null),
        (&doomed.id, &doomed.spec),
    ];
    assert!(items
        .iter()
        .all(|(id, prior)| gke.batch_key(&env.gcp, id, prior).is_some()));

    env.sandbox.clear_traffic();
    let ctx = env.ctx("gke_cluster (list of 5)");
    let found = gke.read_batch(&ctx, &items).await.expect("batch read");
    let mut calls = env.reads("container");
    calls.sort();
    assert_eq!(
        calls,
        [
            format!("GET v1/projects/{PROJECT}/locations/us-central1-a/clusters"),
            format!("GET v1/projects/{PROJECT}/locations/us-central1/clusters"),
        ]
    );
    let alone = read_each(gke.as_ref(), &ctx, &items).await;
    assert_same(&found, &alone, &[0, 2, 3]);
    // The reads agree with what create reported, and a prior that leaves out nothing
    // the API cannot report changes nothing.
    assert_eq!(found[0].as_ref().map(|o| &o.spec), Some(&batch.spec));
    assert_eq!(found[2].as_ref().map(|o| &o.spec), Some(&train.spec));
    assert_eq!(train.spec["location"], Value::Null);
    assert_eq!(found[2].as_ref().map(|o| &o.outputs), Some(&train.outputs));
    assert_eq!(
        found[3].as_ref().map(|o| &o.outputs["kubernetes"]),
        Some(&gpu.outputs["kubernetes"])
    );
    env.sandbox.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_pools_are_read_with_one_list_per_cluster() {
    let env = Env::start().await;
    let clusters = env
        .create_all(
            "gke_cluster",
            &[
                json!({"name": "gpu", "location": "us-central1-a"}),
                json!({"name": "cpu", "location": "us-central1-b"}),
            ],
        )
        .await;
    let (gpu, cpu) = (&clusters[0].id, &clusters[1].id);
    let pools = env
        .create_all(
            "gke_node_pool",
            &[
                json!({"name": "t4", "cluster": gpu, "machine_type": "n1-standard-8",
                    "autoscaling": {"min": 0, "max": 4}, "spot": true,
                    "gpu": {"type": "nvidia-tesla-t4", "count": 1},
                    "taints": ["nvidia.com/gpu=present:NoSchedule"]}),
                json!({"name": "small", "cluster": gpu, "node_count": 1, "labels": {"pool": "small"}}),
                json!({"name": "doomed", "cluster": gpu, "node_count": 1}),
                json!({"name": "general", "cluster": cpu, "machine_type": "e2-standard-4", "node_count": 2}),
            ],
        )
        .await;
    let [t4, small, doomed, general] = &pools[..] else {
        panic!("four pools")
    };
    env.start_delete(&env.sandbox.gcp_endpoints().container, &doomed.id)
        .await;
    let np = kind("gke_node_pool");
    let missing = format!("{gpu}/nodePools/never-made");
    let orphan = format!("projects/{PROJECT}/locations/us-central1-a/clusters/gone/nodePools/p");
    let null = Value::Null;
    let items: Vec<(&str, &Value)> = vec![
        (&t4.id, &t4.spec),
        (&general.id, &general.spec),
        (&missing, &null),
        (&small.id, &null),
        (&doomed.id, &doomed.spec),
        (&orphan, &null),
    ];
    env.sandbox.clear_traffic();
    let ctx = env.ctx("gke_node_pool (list of 6)");
    let found = np.read_batch(&ctx, &items).await.expect("batch read");
    let mut calls = env.reads("container");
    calls.sort();
    assert_eq!(
        calls,
        [
            format!("GET v1/projects/{PROJECT}/locations/us-central1-a/clusters/gone/nodePools"),
            format!("GET v1/{gpu}/nodePools"),
            format!("GET v1/{cpu}/nodePools"),
        ]
    );
    let alone = read_each(np.as_ref(), &ctx, &items).await;
    assert_same(&found, &alone, &[0, 1, 3]);
    assert_eq!(found[0].as_ref().map(|o| &o.spec), Some(&t4.spec));
    assert_eq!(found[0].as_ref().map(|o| &o.outputs), Some(&t4.outputs));
    assert_eq!(found[1].as_ref().map(|o| &o.spec), Some(&general.spec));
    env.sandbox.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filestore_instances_are_read_with_one_paged_list_per_location() {
    let env = Env::start().await;
    let spec = |name: &str, location: &str, capacity: i64| {
        json!({"name": name, "location": location, "tier": "BASIC_HDD",
            "share": {"name": "vol1", "capacity_gb": capacity}, "labels": {"app": name}})
    };
    let created = env
        .create_all(
            "filestore_instance",
            &[
                spec("nfs-c", "us-central1-b", 1024),
                spec("nfs-a", "us-central1-b", 2048),
                spec("nfs-b", "us-central1-b", 1024),
                spec("doomed", "us-central1-b", 1024),
                spec("nfs-z", "us-central1-c", 1024),
            ],
        )
        .await;
    let [c, a, b, doomed, z] = &created[..] else {
        panic!("five instances")
    };
    env.start_delete(&env.sandbox.gcp_endpoints().file, &doomed.id)
        .await;
    let fs = kind("filestore_instance");
    let missing = format!("projects/{PROJECT}/locations/us-central1-b/instances/never-made");
    let null = Value::Null;
    let items: Vec<(&str, &Value)> = vec![
        (&a.id, &a.spec),
        (&missing, &null),
        (&c.id, &null),
        (&z.id, &z.spec),
        (&doomed.id, &doomed.spec),
        (&b.id, &b.spec),
    ];
    let ctx = env.ctx("filestore_instance (list of 6)");
    let alone = read_each(fs.as_ref(), &ctx, &items).await;

    // The untyped face, with the API's own page size: one list per location.
    env.sandbox.clear_traffic();
    let found = fs.read_batch(&ctx, &items).await.expect("batch read");
    let mut calls = env.reads("file");
    calls.sort();
    assert_eq!(
        calls,
        [
            format!("GET v1/projects/{PROJECT}/locations/us-central1-b/instances"),
            format!("GET v1/projects/{PROJECT}/locations/us-central1-c/instances"),
        ]
    );
    assert_same(&found, &alone, &[0, 2, 3, 5]);
    assert_eq!(found[0].as_ref().map(|o| &o.spec), Some(&a.spec));
    assert_eq!(found[5].as_ref().map(|o| &o.outputs), Some(&b.outputs));

    // Pages of one instance: every page is followed, each with the token of the last.
    let typed = Adapter::new(FilestoreInstance);
    let typed_items: Vec<(String, Option<<FilestoreInstance as Kind>::Spec>)> = items
        .iter()
        .map(|(id, prior)| {
            let prior = (!prior.is_null()).then(|| {
                serde_json::from_value(fs.schema().with_defaults(prior)).expect("spec decodes")
            });
            (id.to_string(), prior)
        })
        .collect();
    env.sandbox.clear_traffic();
    let paged = typed
        .inner()
        .read_listed(&ctx, &typed_items, Some(1))
        .await
        .expect("paged batch read");
    let calls = env.reads("file");
    let in_b: Vec<&String> = calls
        .iter()
        .filter(|c| c.contains("us-central1-b"))
        .collect();
    // nfs-a, nfs-b, nfs-c (and the instance being deleted, while it is): a page each.
    assert!(in_b.len() >= 3, "{calls:#?}");
    assert!(in_b[0].ends_with("?pageSize=1"), "{calls:#?}");
    assert!(
        in_b[1..].iter().all(|c| c.contains("pageToken=")),
        "{calls:#?}"
    );
    let paged: Vec<Option<Value>> = paged
        .into_iter()
        .map(|l| l.map(|l| json!({"id": l.id, "spec": l.spec, "outputs": l.outputs})))
        .collect();
    let want: Vec<Option<Value>> = found
        .iter()
        .map(|o| {
            o.as_ref()
                .map(|o| json!({"id": o.id, "spec": o.spec, "outputs": o.outputs}))
        })
        .collect();
    assert_eq!(paged, want);
    env.sandbox.shutdown().await;
}

#[test]
fn batch_keys_group_siblings_and_only_siblings() {
    let config = |container: &str, file: &str| {
        json!({"project": PROJECT, "access_token_file": "/tmp/token",
            "endpoints": {"container": container, "file": file}})
    };
    let here = config("http://127.0.0.1:1/container/", "http://127.0.0.1:1/file/");
    let null = Value::Null;
    let key = |k: &str, config: &Value, id: &str| kind(k).batch_key(config, id, &null);
    let cluster = |p: &str, l: &str, n: &str| format!("projects/{p}/locations/{l}/clusters/{n}");

    // Clusters: by project and location.
    let c1 = key("gke_cluster", &here, &cluster("p", "us-central1", "a"));
    assert!(c1.is_some());
    assert_eq!(
        c1,
        key("gke_cluster", &here, &cluster("p", "us-central1", "b"))
    );
    assert_ne!(
        c1,
        key("gke_cluster", &here, &cluster("p", "us-central1-a", "a"))
    );
    assert_ne!(
        c1,
        key("gke_cluster", &here, &cluster("q", "us-central1", "a"))
    );

    // Node pools: by cluster.
    let pool = |c: &str, n: &str| format!("{c}/nodePools/{n}");
    let a = cluster("p", "us-central1", "a");
    let p1 = key("gke_node_pool", &here, &pool(&a, "x"));
    assert!(p1.is_some());
    assert_eq!(p1, key("gke_node_pool", &here, &pool(&a, "y")));
    assert_ne!(
        p1,
        key(
            "gke_node_pool",
            &here,
            &pool(&cluster("p", "us-central1", "b"), "x")
        )
    );
    assert_ne!(
        p1,
        key(
            "gke_node_pool",
            &here,
            &pool(&cluster("q", "us-central1", "a"), "x")
        )
    );
    assert_ne!(p1, c1, "a cluster list is not a pool list");

    // Filestore: by project and location.
    let inst = |p: &str, l: &str, n: &str| format!("projects/{p}/locations/{l}/instances/{n}");
    let f1 = key(
        "filestore_instance",
        &here,
        &inst("p", "us-central1-b", "x"),
    );
    assert!(f1.is_some());
    assert_eq!(
        f1,
        key(
            "filestore_instance",
            &here,
            &inst("p", "us-central1-b", "y")
        )
    );
    assert_ne!(
        f1,
        key(
            "filestore_instance",
            &here,
            &inst("p", "us-central1-c", "x")
        )
    );
    assert_ne!(
        f1,
        key(
            "filestore_instance",
            &here,
            &inst("q", "us-central1-b", "x")
        )
    );

    // Another endpoint or another account is another list, and the key says only
    // where a token comes from.
    let there = config("http://127.0.0.1:2/container/", "http://127.0.0.1:2/file/");
    assert_ne!(
        c1,
        key("gke_cluster", &there, &cluster("p", "us-central1", "a"))
    );
    assert_ne!(
        f1,
        key(
            "filestore_instance",
            &there,
            &inst("p", "us-central1-b", "x")
        )
    );
    assert_eq!(
        p1,
        key(
            "gke_node_pool",
            &config("http://127.0.0.1:1/container/", "http://elsewhere/"),
            &pool(&a, "x")
        )
    );
    let mut other_account = here.clone();
    other_account["access_token_file"] = json!("/tmp/other-token");
    assert_ne!(
        c1,
        key(
            "gke_cluster",
            &other_account,
            &cluster("p", "us-central1", "a")
        )
    );

    // Ids of the wrong shape, and tables that do not resolve, are read alone.
    assert_eq!(key("gke_cluster", &here, "projects/p/locations/l"), None);
    assert_eq!(key("gke_node_pool", &here, &a), None);
    assert_eq!(key("filestore_instance", &here, "nfs"), None);
    assert_eq!(
        key(
            "gke_cluster",
            &json!({"max_retries": "many"}),
            &cluster("p", "l", "a")
        ),
        None
    );
    assert_eq!(
        key(
            "gke_cluster",
            &json!({"endpoints": {"container": terrain_providers::protocol::UNKNOWN}}),
            &cluster("p", "l", "a")
        ),
        None
    );
}
