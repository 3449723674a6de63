//! The pod subresources that reach a container: logs (tail, follow), and the first half
//! of exec and port-forward (checked here under the state lock, streamed by
//! `server/kube.rs`).

use super::*;

pub(super) fn pod<'a>(cluster: &'a ClusterState, t: &Target) -> Result<&'a Value, StatusError> {
    cluster
        .store
        .get(&t.key())
        .ok_or_else(|| StatusError::not_found("", "pods", t.name()))
}

pub(super) fn container_names(pod: &Value) -> Vec<String> {
    pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["name"].as_str().map(str::to_string))
        .collect()
}

/// The container a log or exec request means, as the API server picks it.
pub(super) fn pick_container(
    pod: &Value,
    asked: Option<&str>,
    name: &str,
) -> Result<String, StatusError> {
    let names = container_names(pod);
    match asked.filter(|c| !c.is_empty()) {
        Some(c) if names.iter().any(|n| n == c) => Ok(c.to_string()),
        Some(c) => Err(StatusError::bad_request(format!(
            "container {c} is not valid for pod {name}"
        ))),
        None => {
            if let Some(default) =
                pod["metadata"]["annotations"]["kubectl.kubernetes.io/default-container"].as_str()
            {
                if names.iter().any(|n| n == default) {
                    return Ok(default.to_string());
                }
            }
            match names.as_slice() {
                [one] => Ok(one.clone()),
                [] => Err(StatusError::bad_request(format!(
                    "pod {name} has no containers"
                ))),
                many => Err(StatusError::bad_request(format!(
                    "a container name must be specified for pod {name}, choose one of: [{}]",
                    many.join(" ")
                ))),
            }
        }
    }
}

/// What a followed log stream needs to keep going.
#[derive(Debug, Clone)]
pub(crate) struct LogFollow {
    pub namespace: String,
    pub pod: String,
    pub container: String,
    /// The first chunk (the log so far, after `tailLines`).
    pub initial: String,
    /// How much of the full log has been sent.
    pub sent: usize,
}

pub(super) fn tail(text: &str, lines: Option<usize>) -> String {
    match lines {
        None => text.to_string(),
        Some(n) => {
            let all: Vec<&str> = text.split_inclusive('\n').collect();
            all[all.len().saturating_sub(n)..].concat()
        }
    }
}

pub(super) fn logs(
    cluster: &ClusterState,
    t: &Target,
    req: &KubeRequest,
    now: DateTime<Utc>,
) -> Outcome {
    let result = (|| {
        let p = pod(cluster, t)?;
        let container = pick_container(p, req.param("container"), t.name())?;
        if req.flag("previous") {
            let restarted = p["status"]["containerStatuses"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| {
                    c["name"] == container.as_str() && c["lastState"].get("terminated").is_some()
                });
            if !restarted {
                return Err(StatusError::bad_request(format!(
                    "previous terminated container \"{container}\" in pod \"{}\" not found",
                    t.name()
                )));
            }
        }
        let text = controllers::pod_logs(cluster, t.ns(), t.name(), Some(&container), now)
            .map_err(StatusError::bad_request)?;
        let lines = req.param("tailLines").and_then(|n| n.parse::<usize>().ok());
        let mut shown = tail(&text, lines);
        if let Some(limit) = req
            .param("limitBytes")
            .and_then(|n| n.parse::<usize>().ok())
        {
            let mut cut = limit.min(shown.len());
            while !shown.is_char_boundary(cut) {
                cut -= 1;
            }
            shown.truncate(cut);
        }
        if req.flag("follow") {
            return Ok(Outcome::FollowLog(LogFollow {
                namespace: t.ns().to_string(),
                pod: t.name().to_string(),
                container,
                initial: shown,
                sent: text.len(),
            }));
        }
        Ok(Outcome::Done(ApiResponse {
            status: 200,
            body: Body::Bytes {
                content_type: "text/plain".into(),
                data: shown.into_bytes(),
            },
            retry_after: None,
        }))
    })();
    result.unwrap_or_else(Outcome::from)
}

/// One poll of a followed log: the new text, and whether the stream is over (the pod
/// finished or is gone).
pub(crate) fn follow_poll(
    cluster: &ClusterState,
    follow: &mut LogFollow,
    now: DateTime<Utc>,
) -> (String, bool) {
    let key = ObjKey::new("", "pods", &follow.namespace, &follow.pod);
    let Some(pod) = cluster.store.get(&key) else {
        return (String::new(), true);
    };
    let finished = matches!(
        pod["status"]["phase"].as_str(),
        Some("Succeeded" | "Failed")
    );
    let text = controllers::pod_logs(
        cluster,
        &follow.namespace,
        &follow.pod,
        Some(&follow.container),
        now,
    )
    .unwrap_or_default();
    if text.len() < follow.sent {
        // The container restarted: its log starts over.
        follow.sent = 0;
    }
    let mut start = follow.sent;
    while start < text.len() && !text.is_char_boundary(start) {
        start += 1;
    }
    let new = text.get(start..).unwrap_or("").to_string();
    follow.sent = text.len();
    (new, finished)
}

pub(super) fn running_pod<'a>(
    cluster: &'a ClusterState,
    t: &Target,
) -> Result<&'a Value, StatusError> {
    let p = pod(cluster, t)?;
    if p["status"]["phase"] != "Running" {
        return Err(StatusError::bad_request(format!(
            "unable to upgrade connection: pod {} is not running",
            t.name()
        )));
    }
    Ok(p)
}

pub(super) fn exec(
    cluster: &ClusterState,
    t: &Target,
    req: &KubeRequest,
    ctx: &SettleCtx,
) -> Outcome {
    let result = (|| {
        let p = running_pod(cluster, t)?;
        let container = pick_container(p, req.param("container"), t.name())?;
        let command: Vec<String> = req
            .params("command")
            .into_iter()
            .map(str::to_string)
            .collect();
        if command.is_empty() {
            return Err(StatusError::bad_request(
                "you must specify at least 1 command",
            ));
        }
        let mounts = volumes::mounts(cluster, ctx.data_dir, t.ns(), t.name(), Some(&container))
            .map_err(StatusError::bad_request)?;
        let redis = volumes::redis_of(cluster, ctx.processes, t.ns(), t.name());
        let env = environment::container_env(cluster, p, &container);
        Ok(Outcome::Exec(ExecTarget {
            command,
            env,
            mounts,
            redis,
            stdin: req.flag("stdin"),
            stdout: req.param("stdout").is_none() || req.flag("stdout"),
            stderr: req.param("stderr").is_none() || req.flag("stderr"),
        }))
    })();
    result.unwrap_or_else(Outcome::from)
}

pub(super) fn portforward(
    cluster: &ClusterState,
    t: &Target,
    req: &KubeRequest,
    ctx: &SettleCtx,
) -> Outcome {
    let result = (|| {
        running_pod(cluster, t)?;
        let mut ports = Vec::new();
        for p in req.params("ports").into_iter().flat_map(|p| p.split(',')) {
            let port: u16 = p
                .trim()
                .parse()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| StatusError::bad_request(format!("invalid port {p:?}")))?;
            ports.push((
                port,
                volumes::port_target(cluster, ctx.processes, t.ns(), t.name(), port),
            ));
        }
        if ports.is_empty() && !req.port_streams {
            return Err(StatusError::bad_request(
                "at least one port must be given with the ports parameter",
            ));
        }
        Ok(Outcome::PortForward(ports))
    })();
    result.unwrap_or_else(Outcome::from)
}
