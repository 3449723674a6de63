//! Kubeflow Pipelines 2.17's REST API (v2beta1), emulated per cluster and reached the way
//! clients reach a real install: through the API server's service proxy to the
//! `ml-pipeline` Service (`api/proxy.rs` decides when KFP is installed and hands requests
//! here). This file owns the KFP database kept with the cluster ([`KfpState`]: pipelines,
//! versions, experiments, runs), the request as the emulator sees it ([`KfpRequest`]), the
//! routing of a path to a handler and the grpc-gateway error shapes; `api.rs` the
//! handlers, `multipart.rs` the upload bodies, `runs.rs` the run controller that turns a
//! run's tasks into pods, `tests.rs` the tests that go through the service proxy.

pub(crate) mod api;
pub(crate) mod multipart;
pub(crate) mod runs;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use axum::http::Method;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::ClusterState;
use crate::http::ApiResponse;

/// The image KFP's API server runs (`ghcr.io/kubeflow/kfp-api-server:2.17.0`); a Service
/// whose pods run it is KFP's.
pub(crate) const API_SERVER_IMAGE: &str = "kfp-api-server";
/// The API server's HTTP port (its gRPC one, 8887, is not proxied).
pub(crate) const HTTP_PORT: i64 = 8888;
/// The timestamp KFP writes for "not yet" (a run's `finished_at` until it ends).
pub(crate) const EPOCH: &str = "1970-01-01T00:00:00Z";
/// The experiment runs without one go into.
pub(crate) const DEFAULT_EXPERIMENT: &str = "Default";
/// The service account runs use unless they name one.
pub(crate) const DEFAULT_SERVICE_ACCOUNT: &str = "pipeline-runner";

/// KFP's database: everything the API stores, by id.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub(crate) struct KfpState {
    #[serde(default)]
    pub pipelines: BTreeMap<String, Pipeline>,
    #[serde(default)]
    pub versions: BTreeMap<String, PipelineVersion>,
    #[serde(default)]
    pub experiments: BTreeMap<String, Experiment>,
    #[serde(default)]
    pub runs: BTreeMap<String, Run>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Pipeline {
    pub pipeline_id: String,
    pub name: String,
    pub display_name: String,
    pub description: String,
    pub created_at: String,
    pub namespace: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct PipelineVersion {
    pub pipeline_id: String,
    pub pipeline_version_id: String,
    pub name: String,
    pub display_name: String,
    pub description: String,
    pub created_at: String,
    /// The PipelineSpec document.
    pub spec: Value,
    /// The platform document (`platforms:`), when the upload had one.
    #[serde(default)]
    pub platform: Option<Value>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Experiment {
    pub experiment_id: String,
    pub display_name: String,
    pub description: String,
    pub created_at: String,
    pub namespace: String,
    pub storage_state: String,
    pub last_run_created_at: String,
}

/// One entry of a run's or a task's `state_history`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct StateEntry {
    pub update_time: String,
    pub state: String,
}

/// One pipeline task of a run, with every attempt's pod.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Task {
    pub task_id: String,
    /// The task's key in `root.dag.tasks`.
    pub key: String,
    /// `taskInfo.name`.
    pub display_name: String,
    pub create_time: String,
    #[serde(default)]
    pub start_time: Option<String>,
    #[serde(default)]
    pub end_time: Option<String>,
    pub state: String,
    #[serde(default)]
    pub error: Option<String>,
    /// Every attempt's pod, oldest first; the last is the current attempt.
    #[serde(default)]
    pub pods: Vec<String>,
    /// When the next attempt may start (a retry waiting out its backoff).
    #[serde(default)]
    pub retry_at: Option<DateTime<Utc>>,
    #[serde(default)]
    pub state_history: Vec<StateEntry>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Run {
    pub run_id: String,
    pub experiment_id: String,
    pub display_name: String,
    pub description: String,
    pub storage_state: String,
    pub pipeline_id: String,
    pub pipeline_version_id: String,
    pub runtime_config: Value,
    pub service_account: String,
    pub created_at: String,
    pub scheduled_at: String,
    pub finished_at: String,
    pub state: String,
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default)]
    pub tasks: Vec<Task>,
    #[serde(default)]
    pub state_history: Vec<StateEntry>,
    /// The Kubernetes namespace KFP runs in (the `ml-pipeline` Service's): the pods'.
    pub kube_namespace: String,
    /// The Argo workflow name the run's pods are named after (`gpu-training-x7k2p`).
    pub workflow: String,
    /// The version's PipelineSpec as it was when the run was created (KFP keeps the run's
    /// own copy, so deleting the version leaves the run alone).
    pub spec: Value,
    #[serde(default)]
    pub platform: Option<Value>,
}

impl KfpState {
    /// Nothing stored yet (KFP not used on this cluster): not worth a line in the state file.
    pub(crate) fn is_empty(&self) -> bool {
        self.pipelines.is_empty()
            && self.versions.is_empty()
            && self.experiments.is_empty()
            && self.runs.is_empty()
    }
}

impl Run {
    pub(crate) fn active(&self) -> bool {
        matches!(self.state.as_str(), "PENDING" | "RUNNING" | "CANCELING")
    }
}

/// One request to KFP's API server, as the service proxy hands it over.
pub(crate) struct KfpRequest<'a> {
    pub method: &'a Method,
    /// The path on the KFP server (`/apis/v2beta1/pipelines`), percent-decoded segments
    /// joined again.
    pub path: &'a str,
    pub query: &'a [(String, String)],
    pub content_type: Option<&'a str>,
    pub body: &'a [u8],
    /// The Kubernetes namespace KFP is installed in.
    pub kube_namespace: &'a str,
    pub now: DateTime<Utc>,
}

impl KfpRequest<'_> {
    pub(crate) fn param(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A failed call as grpc-gateway answers it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct KfpError {
    pub code: i64,
    pub message: String,
}

impl KfpError {
    pub(crate) fn not_found(message: impl Into<String>) -> KfpError {
        KfpError {
            code: 5,
            message: message.into(),
        }
    }

    pub(crate) fn invalid(message: impl Into<String>) -> KfpError {
        KfpError {
            code: 3,
            message: message.into(),
        }
    }

    pub(crate) fn exists(message: impl Into<String>) -> KfpError {
        KfpError {
            code: 6,
            message: message.into(),
        }
    }

    pub(crate) fn precondition(message: impl Into<String>) -> KfpError {
        KfpError {
            code: 9,
            message: message.into(),
        }
    }

    /// The HTTP status grpc-gateway maps the gRPC code to.
    pub(crate) fn http_status(&self) -> u16 {
        match self.code {
            3 | 9 | 11 => 400,
            5 => 404,
            6 | 10 => 409,
            7 => 403,
            // Only the upload handlers answer RESOURCE_EXHAUSTED (a package too large).
            8 => 413,
            12 => 501,
            14 => 503,
            16 => 401,
            _ => 500,
        }
    }

    /// `{"error", "code", "message", "details"}`, grpc-gateway's error body.
    pub(crate) fn response(&self) -> ApiResponse {
        ApiResponse::json(
            self.http_status(),
            json!({"error": self.message, "code": self.code, "message": self.message, "details": []}),
        )
    }

    /// `{"error_message", "error_details"}`: what the upload handlers (plain HTTP
    /// handlers beside the gateway in KFP) answer.
    pub(crate) fn upload_response(&self) -> ApiResponse {
        ApiResponse::json(
            self.http_status(),
            json!({"error_message": self.message, "error_details": self.message}),
        )
    }
}

/// Serves one request to KFP's API server.
pub(crate) fn serve(cluster: &mut ClusterState, req: &KfpRequest<'_>) -> ApiResponse {
    let segs: Vec<&str> = req.path.split('/').filter(|s| !s.is_empty()).collect();
    let Some(rest) = segs.strip_prefix(&["apis", "v2beta1"]) else {
        return not_found_route();
    };
    let m = req.method;
    let wrong_method = || {
        ApiResponse::json(
            405,
            json!({"error": "Method Not Allowed", "code": 12, "message": "Method Not Allowed", "details": []}),
        )
    };
    let result = match rest {
        ["healthz"] => match *m {
            Method::GET => Ok(api::healthz()),
            _ => return wrong_method(),
        },
        ["pipelines", "upload"] => {
            return match *m {
                Method::POST => {
                    api::upload_pipeline(cluster, req).unwrap_or_else(|e| e.upload_response())
                }
                _ => wrong_method(),
            }
        }
        ["pipelines", "upload_version"] => {
            return match *m {
                Method::POST => {
                    api::upload_version(cluster, req).unwrap_or_else(|e| e.upload_response())
                }
                _ => wrong_method(),
            }
        }
        ["pipelines"] => match *m {
            Method::GET => api::list_pipelines(cluster, req),
            Method::POST => api::create_pipeline(cluster, req),
            _ => return wrong_method(),
        },
        ["pipelines", "names", name] => match *m {
            Method::GET => api::pipeline_by_name(cluster, req, name),
            _ => return wrong_method(),
        },
        ["pipelines", id] => match *m {
            Method::GET => api::get_pipeline(cluster, id),
            Method::DELETE => api::delete_pipeline(cluster, req, id),
            _ => return wrong_method(),
        },
        ["pipelines", id, "versions"] => match *m {
            Method::GET => api::list_versions(cluster, req, id),
            _ => return wrong_method(),
        },
        ["pipelines", id, "versions", vid] => match *m {
            Method::GET => api::get_version(cluster, id, vid),
            Method::DELETE => api::delete_version(cluster, id, vid),
            _ => return wrong_method(),
        },
        ["experiments"] => match *m {
            Method::GET => api::list_experiments(cluster, req),
            Method::POST => api::create_experiment(cluster, req),
            _ => return wrong_method(),
        },
        ["experiments", id] => match *m {
            Method::GET => api::get_experiment(cluster, id),
            Method::DELETE => api::delete_experiment(cluster, id),
            _ => return wrong_method(),
        },
        ["runs"] => match *m {
            Method::GET => api::list_runs(cluster, req),
            Method::POST => api::create_run(cluster, req),
            _ => return wrong_method(),
        },
        ["runs", id] => match id.split_once(':') {
            Some((id, action)) => match *m {
                Method::POST => api::run_action(cluster, req, id, action),
                _ => return wrong_method(),
            },
            None => match *m {
                Method::GET => api::get_run(cluster, id),
                Method::DELETE => api::delete_run(cluster, req, id),
                _ => return wrong_method(),
            },
        },
        _ => return not_found_route(),
    };
    match result {
        Ok(value) => ApiResponse::json(200, value),
        Err(e) => e.response(),
    }
}

/// What grpc-gateway answers for a path no method serves.
fn not_found_route() -> ApiResponse {
    KfpError::not_found("Not Found").response()
}
