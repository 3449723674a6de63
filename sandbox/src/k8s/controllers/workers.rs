//! What the batch-ML worker image (`…/batch-ml-workload`, the seed's) does while it
//! runs, instead of merely running for a while: it pops dataset paths from the Redis
//! list `datasets` one at a time (from the real redis-server behind the `redis-leader`
//! Service), trains on each for a simulated step, writes `model_cpt_<name>.pkl` and a
//! line of `report.txt` to `output/` on its shared volume, and exits 0 ("Queue empty,
//! exiting") once the list is empty. A preempted pod loses the item it was on; its
//! replacement goes on with the rest of the queue. `REDIS_HOST` and `QUEUE` in the
//! container's environment name another Service and list. Any other image behaves so when
//! its pod carries the annotation [`QUEUE_ANNOTATION`] (`<service>/<list>`).
//!
//! What each run took is kept per pod, container and restart, for the logs, until the
//! pod is gone.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration as StdDuration;

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::images::{is_redis_pod, normalize_image};
use super::{base, scaled};
use crate::k8s::obj;
use crate::k8s::store::ObjKey;
use crate::k8s::{ClusterState, SettleCtx};

/// The worker image's name, whatever its registry and tag.
const WORKER_IMAGE: &str = "batch-ml-workload";
/// The Service and list the seed's worker uses.
const DEFAULT_HOST: &str = "redis-leader";
const DEFAULT_QUEUE: &str = "datasets";
/// Where on the shared volume the seed's worker writes.
const SHARE: &str = "/mnt/fileserver";
/// A loopback Redis answers at once; the bound guards the sandbox's lock.
const REDIS_TIMEOUT: StdDuration = StdDuration::from_millis(500);

/// What one run of a worker container did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Drained {
    /// The items it took, in order, each with when it finished with it.
    pub items: Vec<(String, DateTime<Utc>)>,
    /// When it found the queue empty and exited.
    pub empty_at: Option<DateTime<Utc>>,
}

/// Pod annotation: the container drains this Redis list (`<service>/<list>`) as the
/// batch-ML worker does, whatever its image.
pub(crate) const QUEUE_ANNOTATION: &str = "sandbox.terrain.dev/queue";

/// Whether `image` is the batch-ML worker.
fn is_worker_image(image: &str) -> bool {
    normalize_image(image)
        .rsplit('/')
        .next()
        .is_some_and(|name| name.split(':').next() == Some(WORKER_IMAGE))
}

/// Whether the container running `image` in `pod` drains a queue: the batch-ML worker's
/// image, or any image its pod annotates with a queue.
pub(crate) fn is_queue_worker(pod: &Value, image: &str) -> bool {
    is_worker_image(image) || queue_annotation(pod).is_some()
}

/// The Service and list a pod's annotation names.
fn queue_annotation(pod: &Value) -> Option<(String, String)> {
    let value = obj::annotation(pod, QUEUE_ANNOTATION)?;
    let (service, list) = value.trim().split_once('/')?;
    (!service.is_empty() && !list.is_empty()).then(|| (service.to_string(), list.to_string()))
}

/// The key of one run's record.
pub(crate) fn run_key(pod: &Value, container: &str, restarts: i64) -> String {
    format!("{}/{container}/{restarts}", obj::uid(pod))
}

/// Where a worker's run stands after this pass.
pub(super) enum Drain {
    /// Busy with its current item (or waiting for its queue to come up).
    Working,
    /// Took the next item (something changed; the pass looks again).
    Took,
    /// Found the queue empty at this moment: it exits 0.
    Empty(DateTime<Utc>),
}

/// One step of worker container `spec` of `pod`, running since `started` in its
/// `restarts`-th restart.
pub(super) fn drain(
    cluster: &mut ClusterState,
    ctx: &SettleCtx<'_>,
    pod: &Value,
    spec: &Value,
    started: DateTime<Utc>,
    restarts: i64,
) -> Drain {
    let name = spec["name"].as_str().unwrap_or_default();
    let key = run_key(pod, name, restarts);
    let record = cluster.drained.get(&key).cloned().unwrap_or_default();
    if let Some(at) = record.empty_at {
        return Drain::Empty(at);
    }
    // Each item takes one simulated step; the next is taken once the last is done.
    let step = scaled(ctx, base::JOB_RUN / 2.0).max(Duration::milliseconds(1));
    let due = record.items.last().map_or(started, |(_, done)| *done);
    if due > ctx.now {
        return Drain::Working;
    }
    let env = |var: &str| {
        obj::items(&spec["env"])
            .iter()
            .find(|e| e["name"] == var)
            .and_then(|e| e["value"].as_str())
            .map(str::to_string)
    };
    let (host, queue) = queue_annotation(pod).unwrap_or_else(|| {
        (
            env("REDIS_HOST").unwrap_or_else(|| DEFAULT_HOST.to_string()),
            env("QUEUE").unwrap_or_else(|| DEFAULT_QUEUE.to_string()),
        )
    });
    let namespace = pod["metadata"]["namespace"].as_str().unwrap_or("default");
    let Some(addr) = redis_behind(cluster, ctx, namespace, &host) else {
        // No queue to reach yet: the worker retries its connection.
        return Drain::Working;
    };
    let Ok(popped) = lpop(addr, &queue) else {
        return Drain::Working;
    };
    let mut record = record;
    match popped {
        None => record.empty_at = Some(due),
        Some(item) => {
            let done = due + step;
            write_outputs(cluster, ctx, pod, spec, &item);
            record.items.push((item, done));
        }
    }
    let empty_at = record.empty_at;
    cluster.drained.insert(key, record);
    match empty_at {
        Some(at) => Drain::Empty(at),
        None => Drain::Took,
    }
}

/// Drops the records of pods that no longer exist, so the saved sandbox does not keep
/// every run there ever was.
pub(super) fn forget_gone(cluster: &mut ClusterState) {
    if cluster.drained.is_empty() {
        return;
    }
    let uids: std::collections::BTreeSet<String> = cluster
        .store
        .list("", "pods", None)
        .into_iter()
        .map(|(_, p)| obj::uid(p).to_string())
        .collect();
    cluster
        .drained
        .retain(|key, _| key.split('/').next().is_some_and(|uid| uids.contains(uid)));
}

/// The redis-server behind Service `host` of `namespace` (its selector's running Redis
/// pod), or behind a Redis pod of that name.
fn redis_behind(
    cluster: &ClusterState,
    ctx: &SettleCtx<'_>,
    namespace: &str,
    host: &str,
) -> Option<SocketAddr> {
    let service = cluster
        .store
        .get(&ObjKey::new("", "services", namespace, host));
    let selector = service.map(|s| s["spec"]["selector"].clone());
    let pods = obj::list_where(&cluster.store, "", "pods", Some(namespace), |p| {
        p["status"]["phase"] == "Running"
            && is_redis_pod(p)
            && match &selector {
                Some(Value::Object(sel)) if !sel.is_empty() => sel
                    .iter()
                    .all(|(k, v)| p["metadata"]["labels"][k.as_str()] == *v),
                _ => obj::name(p) == host,
            }
    });
    pods.iter()
        .find_map(|(_, p)| ctx.processes.redis_addr(obj::uid(p)))
}

/// `LPOP queue` on the Redis at `addr`: the item, or `None` when the list is empty.
fn lpop(addr: SocketAddr, queue: &str) -> std::io::Result<Option<String>> {
    let mut stream = TcpStream::connect_timeout(&addr, REDIS_TIMEOUT)?;
    stream.set_read_timeout(Some(REDIS_TIMEOUT))?;
    stream.set_write_timeout(Some(REDIS_TIMEOUT))?;
    // One write: the command in pieces would wait on Nagle's algorithm between them.
    let command = format!("*2\r\n$4\r\nLPOP\r\n${}\r\n{queue}\r\n", queue.len());
    stream.write_all(command.as_bytes())?;
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let line = line.trim_end();
    if line == "$-1" || line == "_" {
        return Ok(None);
    }
    let Some(len) = line.strip_prefix('$').and_then(|n| n.parse::<usize>().ok()) else {
        return Err(std::io::Error::other(format!("unexpected reply {line:?}")));
    };
    let mut item = vec![0; len + 2];
    std::io::Read::read_exact(&mut reader, &mut item)?;
    item.truncate(len);
    Ok(Some(String::from_utf8_lossy(&item).into_owned()))
}

/// The checkpoint and the report line for `item`, on the worker's shared volume.
fn write_outputs(
    cluster: &ClusterState,
    ctx: &SettleCtx<'_>,
    pod: &Value,
    spec: &Value,
    item: &str,
) {
    let Ok(mounts) = crate::k8s::volumes::container_mounts(cluster, ctx.data_dir, pod, spec) else {
        return;
    };
    let Some(share) = mounts
        .iter()
        .find(|m| m.path.trim_end_matches('/') == SHARE)
        .or_else(|| mounts.iter().find(|m| !m.read_only))
        .filter(|m| !m.read_only)
    else {
        return;
    };
    let out = share.host.join("output");
    let stem = std::path::Path::new(item)
        .file_stem()
        .map_or_else(|| "item".to_string(), |s| s.to_string_lossy().into_owned());
    // A worker that cannot write still drains its queue, as the real one would log.
    let _ = std::fs::create_dir_all(&out).and_then(|()| {
        std::fs::write(
            out.join(format!("model_cpt_{stem}.pkl")),
            format!("checkpoint after training on {item}\n"),
        )?;
        let mut report = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(out.join("report.txt"))?;
        writeln!(report, "{item}: trained, checkpoint model_cpt_{stem}.pkl")
    });
}

/// The worker's log lines for one run so far.
pub(super) fn log_lines(cluster: &ClusterState, key: &str, now: DateTime<Utc>) -> Vec<String> {
    let mut lines = vec![format!("Connecting to {DEFAULT_HOST}")];
    let Some(record) = cluster.drained.get(key) else {
        return lines;
    };
    for (item, done) in &record.items {
        lines.push(format!("Processing {item}"));
        if *done <= now {
            let stem = std::path::Path::new(item)
                .file_stem()
                .map_or_else(String::new, |s| s.to_string_lossy().into_owned());
            lines.push(format!("Saved checkpoint model_cpt_{stem}.pkl"));
        }
    }
    if record.empty_at.is_some_and(|at| at <= now) {
        lines.push("Queue empty, exiting".to_string());
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_worker_image_is_known_whatever_its_registry_and_tag() {
        for image in [
            "us-docker.pkg.dev/google-samples/containers/gke/batch-ml-workload",
            "us-docker.pkg.dev/google-samples/containers/gke/batch-ml-workload:latest",
            "batch-ml-workload:v2",
        ] {
            assert!(is_worker_image(image), "{image}");
        }
        for image in ["python:3.12", "batch-ml-workload-exporter", "redis:7.2"] {
            assert!(!is_worker_image(image), "{image}");
        }
    }

    #[test]
    fn the_records_of_pods_that_are_gone_are_forgotten() {
        use super::super::testkit::{self, Harness};
        let mut h = Harness::standard(vec![testkit::pool("default-pool", 1, 1)]);
        h.create("", "pods", "default", serde_json::json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "worker"},
            "spec": {"containers": [{"name": "main", "image": "busybox", "command": ["sleep", "infinity"]}]},
        }));
        let pod = h.get("", "pods", "default", "worker");
        let kept = run_key(&pod, "main", 0);
        h.cluster.drained.insert(kept.clone(), Drained::default());
        h.cluster
            .drained
            .insert("gone-uid/main/0".into(), Drained::default());
        h.settle();
        assert_eq!(h.cluster.drained.keys().collect::<Vec<_>>(), [&kept]);
    }

    /// `RPUSH queue items…` and `LLEN queue` on a real Redis.
    fn redis(addr: SocketAddr, args: &[&str]) -> String {
        use std::io::Read;
        let mut stream = TcpStream::connect(addr).expect("connect to redis");
        let mut command = format!("*{}\r\n", args.len());
        for a in args {
            command.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        stream.write_all(command.as_bytes()).expect("send");
        let mut buf = [0u8; 64];
        let n = stream.read(&mut buf).expect("reply");
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }

    #[test]
    fn a_preempted_worker_is_replaced_and_the_replacement_drains_the_rest_of_the_queue() {
        use super::super::testkit::{self, Harness};
        use serde_json::json;
        if std::process::Command::new("redis-server")
            .arg("--version")
            .output()
            .is_err()
        {
            eprintln!("skipping: redis-server is not installed (scripts/deps.sh installs it)");
            return;
        }
        let mut h = Harness::standard(vec![
            testkit::pool("default-pool", 1, 1),
            testkit::pool("spot", 1, 1),
        ]);
        let on = |pool: &str| json!({"cloud.google.com/gke-nodepool": pool});
        h.create("", "pods", "default", json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "redis-leader", "labels": {"app": "redis"}},
            "spec": {"nodeSelector": on("default-pool"),
                     "containers": [{"name": "leader", "image": "redis:7.2", "ports": [{"containerPort": 6379}]}]},
        }));
        h.create(
            "",
            "services",
            "default",
            json!({
                "apiVersion": "v1", "kind": "Service", "metadata": {"name": "redis-leader"},
                "spec": {"selector": {"app": "redis"}, "ports": [{"port": 6379}]},
            }),
        );
        let mut addr = None;
        for _ in 0..200 {
            h.advance(0.5);
            addr =
                crate::k8s::volumes::redis_of(&h.cluster, &h.processes, "default", "redis-leader");
            if addr.is_some()
                && h.get("", "pods", "default", "redis-leader")["status"]["containerStatuses"][0]
                    ["ready"]
                    == true
            {
                break;
            }
            std::thread::sleep(StdDuration::from_millis(50));
        }
        let addr = addr.expect("redis is up");
        assert_eq!(
            redis(
                addr,
                &["RPUSH", "shards", "s/1.csv", "s/2.csv", "s/3.csv", "s/4.csv"]
            ),
            ":4\r\n"
        );
        // Not the worker's image: the annotation makes it drain `shards`.
        h.create(
            "batch",
            "jobs",
            "default",
            json!({
                "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train"},
                "spec": {"backoffLimit": 3, "template": {
                    "metadata": {"annotations": {QUEUE_ANNOTATION: "redis-leader/shards"}},
                    "spec": {"restartPolicy": "Never", "nodeSelector": on("spot"),
                             "containers": [{"name": "main", "image": "python:3.12"}]}}},
            }),
        );
        let mut first = None;
        for _ in 0..100 {
            h.advance(0.5);
            first = h
                .list("", "pods", "default")
                .into_iter()
                .find(|p| obj::name(p).starts_with("train-"))
                .filter(|p| cluster_took(&h.cluster, p) >= 1);
            if first.is_some() {
                break;
            }
        }
        let first = first.expect("the first worker took an item");
        let took_before = cluster_took(&h.cluster, &first);
        let name = obj::name(&first).to_string();
        assert!(crate::k8s::controllers::preempt(
            &mut h.cluster,
            "default",
            &name,
            h.now
        ));
        let mut job = Value::Null;
        for _ in 0..200 {
            h.advance(0.5);
            job = h.get("batch", "jobs", "default", "train");
            if job["status"]["succeeded"] == 1 {
                break;
            }
        }
        assert_eq!(job["status"]["succeeded"], 1, "{job}");
        assert_eq!(
            job["status"]["failed"], 1,
            "the preempted pod counts as failed: {job}"
        );
        assert_eq!(
            redis(addr, &["LLEN", "shards"]),
            ":0\r\n",
            "the queue is drained"
        );
        let workers: Vec<Value> = h
            .list("", "pods", "default")
            .into_iter()
            .filter(|p| obj::name(p).starts_with("train-"))
            .collect();
        assert_eq!(workers.len(), 2, "the preempted pod and its replacement");
        let second = workers
            .iter()
            .find(|p| obj::uid(p) != obj::uid(&first))
            .expect("a replacement");
        let rest = cluster_took(&h.cluster, second);
        assert_eq!(
            took_before + rest,
            4,
            "the replacement went on where the preempted worker stopped"
        );
        assert!(rest >= 1);
        let record = &h.cluster.drained[&run_key(second, "main", 0)];
        assert!(record.empty_at.is_some(), "it exited on the empty queue");
    }

    /// Items the pod's first run of `main` has taken.
    fn cluster_took(cluster: &ClusterState, pod: &Value) -> usize {
        cluster
            .drained
            .get(&run_key(pod, "main", 0))
            .map_or(0, |r| r.items.len())
    }

    #[test]
    fn lpop_reads_an_item_and_the_empty_reply() {
        use std::io::Read;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let server = std::thread::spawn(move || {
            for reply in [&b"$5\r\na b c\r\n"[..], b"$-1\r\n"] {
                let (mut conn, _) = listener.accept().expect("accept");
                let mut buf = [0u8; 64];
                let n = conn.read(&mut buf).expect("read the command");
                assert_eq!(&buf[..n], b"*2\r\n$4\r\nLPOP\r\n$8\r\ndatasets\r\n");
                conn.write_all(reply).expect("reply");
            }
        });
        assert_eq!(
            lpop(addr, "datasets").expect("item"),
            Some("a b c".to_string())
        );
        assert_eq!(lpop(addr, "datasets").expect("empty"), None);
        server.join().expect("server");
    }
}
