//! Container logs: deterministic lines derived from the pod's spec and where its lifecycle
//! stands (the image started, the command it runs, Redis's own startup lines, a job's
//! progress and how it ended — with the cloud's refusal when its results could not be
//! written — the batch-ML worker's items). Later output always extends
//! earlier output, so a follower polling these sees a growing log.

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::kubelet;
use super::workers;
use crate::k8s::obj;
use crate::k8s::store::ObjKey;
use crate::k8s::ClusterState;

pub(super) fn pod_logs(
    cluster: &ClusterState,
    namespace: &str,
    pod_name: &str,
    container: Option<&str>,
    now: DateTime<Utc>,
) -> Result<String, String> {
    let pod = cluster
        .store
        .get(&ObjKey::new("", "pods", namespace, pod_name))
        .ok_or_else(|| format!("pods \"{pod_name}\" not found"))?;
    let specs: Vec<&Value> = obj::items(&pod["spec"]["containers"])
        .iter()
        .chain(obj::items(&pod["spec"]["initContainers"]))
        .collect();
    let spec = match container {
        Some(c) => specs.iter().find(|s| s["name"] == c).copied(),
        None => specs.first().copied(),
    }
    .ok_or_else(|| {
        format!(
            "container {} is not valid for pod {pod_name}",
            container.unwrap_or_default()
        )
    })?;
    let name = spec["name"].as_str().unwrap_or_default();
    let status = obj::items(&pod["status"]["containerStatuses"])
        .iter()
        .chain(obj::items(&pod["status"]["initContainerStatuses"]))
        .find(|s| s["name"] == name);
    let state = status.map(|s| &s["state"]);
    let run = state.and_then(|s| {
        if !s["running"].is_null() {
            Some(&s["running"])
        } else if !s["terminated"].is_null() {
            Some(&s["terminated"])
        } else {
            None
        }
    });
    // A container waiting to restart still has the log of the run that ended.
    let run = run.or_else(|| {
        status
            .map(|s| &s["lastState"]["terminated"])
            .filter(|t| !t.is_null())
    });
    let Some(run) = run else {
        let reason = state
            .and_then(|s| s["waiting"]["reason"].as_str())
            .unwrap_or("ContainerCreating");
        return Err(format!(
            "container \"{name}\" in pod \"{pod_name}\" is waiting to start: {reason}"
        ));
    };
    let started = obj::parse_time(&run["startedAt"]).unwrap_or(now);
    let image = spec["image"].as_str().unwrap_or_default();
    let mut lines = Vec::new();
    if super::images::is_redis_image(image) && !kubelet::runs_to_completion(pod) {
        let ready = status.is_some_and(|s| s["ready"] == true);
        lines.extend(redis_lines(spec, started, ready));
    } else {
        lines.push(format!("Starting {image}"));
        let words: Vec<&str> = obj::items(&spec["command"])
            .iter()
            .chain(obj::items(&spec["args"]))
            .filter_map(Value::as_str)
            .collect();
        if !words.is_empty() {
            lines.push(format!("Running: {}", words.join(" ")));
        }
        if kubelet::runs_to_completion(pod) && workers::is_queue_worker(pod, image) {
            let key = workers::run_key(pod, name, kubelet::restarts(pod));
            lines.extend(workers::log_lines(cluster, &key, now));
        } else if kubelet::runs_to_completion(pod) {
            lines.push("Working...".to_string());
            if let Some(code) = run["exitCode"].as_i64() {
                let finished = obj::parse_time(&run["finishedAt"]).unwrap_or(now);
                let took = (finished - started).num_milliseconds().max(0) as f64 / 1000.0;
                for step in 1..=4 {
                    lines.push(format!(
                        "Progress: {}% ({:.1}s)",
                        step * 25,
                        took * f64::from(step) / 4.0
                    ));
                    if code != 0 && step == 2 {
                        break;
                    }
                }
                if code != 0 {
                    if let Some(denied) = kubelet::write_denied(cluster, pod) {
                        lines.push(format!("Error: writing results: {denied}"));
                    }
                }
                lines.push(if code == 0 {
                    "Completed".to_string()
                } else {
                    format!("Error: exited with code {code}")
                });
            }
        }
    }
    Ok(lines.into_iter().map(|l| l + "\n").collect())
}

/// What redis-server prints when it starts, dated from the container's start.
fn redis_lines(spec: &Value, started: DateTime<Utc>, ready: bool) -> Vec<String> {
    let image = spec["image"].as_str().unwrap_or_default();
    let tag = image
        .rsplit_once(':')
        .map(|(_, t)| t)
        .filter(|t| !t.contains('/'))
        .unwrap_or("latest");
    let numbers: Vec<&str> = tag
        .split(['.', '-'])
        .take_while(|p| p.chars().all(|c| c.is_ascii_digit()) && !p.is_empty())
        .collect();
    let version = match numbers.as_slice() {
        [a, b, c, ..] => format!("{a}.{b}.{c}"),
        [a, b] => format!("{a}.{b}.0"),
        [a] => format!("{a}.0.0"),
        [] => "7.4.2".to_string(),
    };
    let port = obj::items(&spec["ports"])
        .first()
        .and_then(|p| p["containerPort"].as_i64())
        .unwrap_or(6379);
    let at = |ms: i64, role: char| {
        let t = started + chrono::Duration::milliseconds(ms);
        format!("1:{role} {}", t.format("%d %b %Y %H:%M:%S%.3f"))
    };
    let mut lines = vec![
        format!("{} * oO0OoO0OoO0Oo Redis is starting oO0OoO0OoO0Oo", at(0, 'C')),
        format!("{} * Redis version={version}, bits=64, commit=00000000, modified=0, pid=1, just started", at(0, 'C')),
        format!("{} # Warning: no config file specified, using the default config. In order to specify a config file use redis-server /path/to/redis.conf", at(1, 'C')),
        format!("{} * monotonic clock: POSIX clock_gettime", at(2, 'M')),
        format!("{} * Running mode=standalone, port={port}.", at(2, 'M')),
        format!("{} * Server initialized", at(3, 'M')),
    ];
    if ready {
        lines.push(format!("{} * Ready to accept connections tcp", at(4, 'M')));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{self, Harness};
    use super::*;
    use serde_json::json;

    #[test]
    fn job_logs_grow_and_end_with_the_outcome() {
        let mut h = Harness::standard(vec![testkit::pool("default-pool", 1, 1)]);
        for (name, annotations) in [
            ("ok", json!({})),
            ("bad", json!({"sandbox.terrain.dev/exit-code": "2"})),
        ] {
            h.create("", "pods", "default", json!({
                "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "annotations": annotations},
                "spec": {"restartPolicy": "Never",
                         "containers": [{"name": "main", "image": "python:3.12", "command": ["python", "train.py"], "args": ["--epochs", "3"]}]},
            }));
        }
        h.settle();
        assert_eq!(
            pod_logs(&h.cluster, "default", "ok", None, h.now),
            Err(
                "container \"main\" in pod \"ok\" is waiting to start: ContainerCreating"
                    .to_string()
            )
        );
        h.advance(2.5);
        let running = pod_logs(&h.cluster, "default", "ok", None, h.now).expect("running logs");
        assert_eq!(
            running,
            "Starting python:3.12\nRunning: python train.py --epochs 3\nWorking...\n"
        );
        h.run_for(5.0);
        let done =
            pod_logs(&h.cluster, "default", "ok", Some("main"), h.now).expect("finished logs");
        assert!(done.starts_with(&running), "{done}");
        assert!(
            done.ends_with("Progress: 100% (3.0s)\nCompleted\n"),
            "{done}"
        );
        let failed = pod_logs(&h.cluster, "default", "bad", None, h.now).expect("failed logs");
        assert!(failed.ends_with("Error: exited with code 2\n"), "{failed}");
        assert_eq!(
            pod_logs(&h.cluster, "default", "nope", None, h.now),
            Err("pods \"nope\" not found".to_string())
        );
        assert_eq!(
            pod_logs(&h.cluster, "default", "ok", Some("side"), h.now),
            Err("container side is not valid for pod ok".to_string())
        );
    }

    #[test]
    fn redis_versions_come_from_the_tag() {
        let t = Utc::now();
        for (image, want) in [
            ("redis:7.2", "7.2.0"),
            ("docker.io/library/redis:6.0.5", "6.0.5"),
            ("redis", "7.4.2"),
            ("redis:7-alpine", "7.0.0"),
        ] {
            let lines = redis_lines(&json!({"image": image}), t, true);
            assert!(
                lines[1].contains(&format!("Redis version={want},")),
                "{image}: {}",
                lines[1]
            );
            assert!(lines
                .last()
                .is_some_and(|l| l.ends_with("Ready to accept connections tcp")));
        }
        assert!(!redis_lines(&json!({"image": "redis"}), t, false)
            .iter()
            .any(|l| l.contains("Ready to accept")));
    }
}
