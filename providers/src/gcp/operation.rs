//! Waiting for Google long-running operations: GKE's own `Operation` (status PENDING →
//! RUNNING → DONE, with progress stages) and `google.longrunning.Operation` used by
//! Filestore (`done`, `error`, `metadata.statusDetail`). Polls with a growing interval,
//! reports progress, and turns an operation that ends in error into an error naming the
//! call and carrying the operation's status message.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::client::{Client, Request};
use super::config::Api;
use crate::{Ctx, ProviderError};

/// The `google.rpc.Code` name and the HTTP status Google maps it to.
pub fn rpc_code(code: i64) -> (&'static str, u16) {
    match code {
        1 => ("CANCELLED", 499),
        2 => ("UNKNOWN", 500),
        3 => ("INVALID_ARGUMENT", 400),
        4 => ("DEADLINE_EXCEEDED", 504),
        5 => ("NOT_FOUND", 404),
        6 => ("ALREADY_EXISTS", 409),
        7 => ("PERMISSION_DENIED", 403),
        8 => ("RESOURCE_EXHAUSTED", 429),
        9 => ("FAILED_PRECONDITION", 400),
        10 => ("ABORTED", 409),
        11 => ("OUT_OF_RANGE", 400),
        12 => ("UNIMPLEMENTED", 501),
        14 => ("UNAVAILABLE", 503),
        15 => ("DATA_LOSS", 500),
        16 => ("UNAUTHENTICATED", 401),
        _ => ("INTERNAL", 500),
    }
}

/// Where a poll stands.
#[derive(Debug, Clone, PartialEq)]
pub enum Poll {
    Running(String),
    Done,
    Failed {
        code: String,
        status: u16,
        message: String,
    },
}

/// Reads a GKE operation.
pub fn container_poll(op: &Value) -> Poll {
    let status = op["status"].as_str().unwrap_or("PENDING");
    if status == "DONE" || status == "ABORTING" {
        let err = &op["error"];
        if err.is_object() && (err["code"].as_i64().unwrap_or(0) != 0 || err["message"].is_string())
        {
            let (code, http) = rpc_code(err["code"].as_i64().unwrap_or(2));
            let message = err["message"]
                .as_str()
                .or(op["statusMessage"].as_str())
                .unwrap_or("")
                .to_string();
            return Poll::Failed {
                code: code.to_string(),
                status: http,
                message,
            };
        }
        if let Some(message) = op["statusMessage"].as_str().filter(|m| !m.is_empty()) {
            // Older operations carry failures only in statusMessage.
            if status == "ABORTING" || op["error"].is_object() {
                return Poll::Failed {
                    code: "ABORTED".to_string(),
                    status: 409,
                    message: message.to_string(),
                };
            }
        }
        return Poll::Done;
    }
    let mut text = format!(
        "{} {}",
        op["operationType"].as_str().unwrap_or("operation"),
        status.to_lowercase()
    );
    if let Some(stages) = op["progress"]["stages"]
        .as_array()
        .filter(|s| !s.is_empty())
    {
        let done = stages.iter().filter(|s| s["status"] == "DONE").count();
        if let Some(current) = stages.iter().find(|s| s["status"] == "RUNNING") {
            let name = current["name"]
                .as_str()
                .unwrap_or("")
                .to_lowercase()
                .replace('_', " ");
            text = format!("{text}: {name} (stage {} of {})", done + 1, stages.len());
        }
    }
    Poll::Running(text)
}

/// Reads a `google.longrunning.Operation`.
pub fn longrunning_poll(op: &Value) -> Poll {
    if op["done"].as_bool() == Some(true) {
        let err = &op["error"];
        if err.is_object() {
            let (code, http) = rpc_code(err["code"].as_i64().unwrap_or(2));
            return Poll::Failed {
                code: code.to_string(),
                status: http,
                message: err["message"].as_str().unwrap_or("").to_string(),
            };
        }
        return Poll::Done;
    }
    let verb = op["metadata"]["verb"].as_str().unwrap_or("operation");
    let detail = op["metadata"]["statusDetail"]
        .as_str()
        .filter(|d| !d.is_empty());
    Poll::Running(match detail {
        Some(d) => format!("{verb} running: {d}"),
        None => format!("{verb} running"),
    })
}

/// How to read one kind of operation.
pub struct OperationApi {
    api: Api,
    get_call: &'static str,
    read: fn(&Value) -> Poll,
}

/// GKE operations, read at `v1/projects/{p}/locations/{l}/operations/{name}`.
pub const CONTAINER: OperationApi = OperationApi {
    api: Api::Container,
    get_call: "container.projects.locations.operations.get",
    read: container_poll,
};

/// Filestore operations, read at `v1/{name}`.
pub const FILE: OperationApi = OperationApi {
    api: Api::File,
    get_call: "file.projects.locations.operations.get",
    read: longrunning_poll,
};

/// Service Usage operations (enabling or disabling an API), read at `v1/{name}`.
pub const SERVICEUSAGE: OperationApi = OperationApi {
    api: Api::ServiceUsage,
    get_call: "serviceusage.operations.get",
    read: longrunning_poll,
};

/// Waits for the operation `op` (as returned by `call`) to finish.
///
/// `path` is the operation's path after the API root. Fails when the operation ends in
/// error (with its message), when polling fails, or after `timeout`.
pub async fn wait(
    ctx: &Ctx,
    client: &Client,
    kind: &OperationApi,
    call: &'static str,
    path: &str,
    first: &Value,
    timeout: Duration,
) -> Result<(), ProviderError> {
    let started = Instant::now();
    let mut interval = client.config.poll_interval;
    let mut current = first.clone();
    let mut last_report = String::new();
    loop {
        match (kind.read)(&current) {
            Poll::Done => return Ok(()),
            Poll::Failed {
                code,
                status,
                message,
            } => {
                let name = path.rsplit('/').next().unwrap_or(path);
                return Err(ProviderError::api(
                    format!("{call} (operation {name})"),
                    status,
                    code,
                    message,
                ));
            }
            Poll::Running(progress) => {
                if progress != last_report {
                    ctx.progress(&progress);
                    last_report = progress;
                }
            }
        }
        if started.elapsed() >= timeout {
            return Err(ProviderError::Timeout {
                call: call.to_string(),
                waiting_for: format!("operation {path} to finish (it goes on in the cloud; the next run adopts its result)"),
                after: timeout,
            });
        }
        tokio::time::sleep(interval).await;
        interval = interval.mul_f64(1.5).min(client.config.max_poll_interval);
        current = client
            .send(ctx, &Request::get(kind.get_call, kind.api, path))
            .await?;
    }
}

/// Polls `read` until it reports the object ready (`Some(true)`), for waits that have
/// no operation to follow (adopting an object another attempt created).
///
/// Fails when `read` fails, the object disappears, or after `timeout`.
pub async fn until_ready<F, Fut>(
    ctx: &Ctx,
    client: &Client,
    call: &'static str,
    what: &str,
    timeout: Duration,
    mut read: F,
) -> Result<(), ProviderError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<(bool, String)>, ProviderError>>,
{
    let started = Instant::now();
    let mut interval = client.config.poll_interval;
    loop {
        match read().await? {
            None => {
                return Err(ProviderError::api(
                    call,
                    404,
                    "NOT_FOUND",
                    format!("{what} disappeared while waiting for it to become ready"),
                ))
            }
            Some((true, _)) => return Ok(()),
            Some((false, state)) => ctx.progress(&format!("waiting for {what}: {state}")),
        }
        if started.elapsed() >= timeout {
            return Err(ProviderError::Timeout {
                call: call.to_string(),
                waiting_for: format!("{what} to become ready"),
                after: timeout,
            });
        }
        tokio::time::sleep(interval).await;
        interval = interval.mul_f64(1.5).min(client.config.max_poll_interval);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn gke_operation_states() {
        let running = json!({"status": "RUNNING", "operationType": "CREATE_CLUSTER", "progress": {"stages": [
            {"name": "CLUSTER_CONFIGURING", "status": "DONE"}, {"name": "CLUSTER_DEPLOYING", "status": "RUNNING"}, {"name": "CLUSTER_HEALTHCHECKING", "status": "PENDING"}]}});
        assert_eq!(
            container_poll(&running),
            Poll::Running("CREATE_CLUSTER running: cluster deploying (stage 2 of 3)".into())
        );
        assert_eq!(container_poll(&json!({"status": "DONE"})), Poll::Done);
        let failed = json!({"status": "DONE", "error": {"code": 9, "message": "quota exceeded"}, "statusMessage": "quota exceeded"});
        assert_eq!(
            container_poll(&failed),
            Poll::Failed {
                code: "FAILED_PRECONDITION".into(),
                status: 400,
                message: "quota exceeded".into()
            }
        );
    }

    #[test]
    fn longrunning_operation_states() {
        assert_eq!(
            longrunning_poll(
                &json!({"done": false, "metadata": {"verb": "create", "statusDetail": "allocating"}})
            ),
            Poll::Running("create running: allocating".into())
        );
        assert_eq!(
            longrunning_poll(&json!({"done": true, "response": {}})),
            Poll::Done
        );
        assert!(matches!(
            longrunning_poll(&json!({"done": true, "error": {"code": 13, "message": "boom"}})),
            Poll::Failed { status: 500, .. }
        ));
    }
}
