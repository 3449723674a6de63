//! The Google Cloud emulators — GKE (container v1), Filestore (file v1), Cloud Storage
//! (storage v1, bucket IAM policies included), Service Usage (serviceusage v1: which APIs
//! each project has on, every other API's requests refused for a project where it is
//! off), IAM (iam v1: service accounts, predefined roles), Resource Manager
//! (cloudresourcemanager v3: project numbers and IAM policies), and the
//! capacity a plan reads: Compute Engine's zones, accelerator types and regional quotas
//! (compute v1) and Cloud TPU's accelerator types (tpu v2) — and what they share: the
//! persisted state (the configured capacity included), request-body parsing against the
//! official discovery documents (embedded by `discovery.rs`) and GKE-style operation
//! ids; `kube.rs` is what GKE is to the Kubernetes emulator.

pub(crate) mod compute;
pub(crate) mod container;
pub mod discovery;
pub(crate) mod error;
pub(crate) mod file;
pub(crate) mod filter;
pub(crate) mod iam;
pub(crate) mod identity;
pub(crate) mod kube;
pub(crate) mod machines;
pub(crate) mod operation;
pub(crate) mod policy;
pub(crate) mod resourcemanager;
pub(crate) mod roles;
pub mod schema;
pub(crate) mod serviceusage;
pub(crate) mod storage;
pub mod tables;
pub(crate) mod tpu;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::common::ids::random_hex;
use crate::http::{ApiRequest, ApiResponse};
use error::ApiError;
use operation::OpCtx;
use schema::{Rejection, Rules};

/// One of the emulated Google APIs, named by its root path segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Api {
    Container,
    File,
    Storage,
    ServiceUsage,
    Compute,
    Tpu,
    Iam,
    ResourceManager,
}

impl Api {
    pub(crate) const ALL: [Api; 8] = [
        Api::Container,
        Api::File,
        Api::Storage,
        Api::ServiceUsage,
        Api::Compute,
        Api::Tpu,
        Api::Iam,
        Api::ResourceManager,
    ];

    /// The root path segment and the name used in traffic records and faults.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Api::Container => "container",
            Api::File => "file",
            Api::Storage => "storage",
            Api::ServiceUsage => "serviceusage",
            Api::Compute => "compute",
            Api::Tpu => "tpu",
            Api::Iam => "iam",
            Api::ResourceManager => "cloudresourcemanager",
        }
    }

    pub(crate) fn from_name(name: &str) -> Option<Api> {
        Api::ALL.into_iter().find(|a| a.name() == name)
    }
}

/// Everything the Google emulators hold; serialized whole into the state file.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub(crate) struct GcpState {
    #[serde(default)]
    pub container: container::State,
    #[serde(default)]
    pub file: file::State,
    #[serde(default)]
    pub storage: storage::State,
    #[serde(default)]
    pub serviceusage: serviceusage::State,
    #[serde(default)]
    pub iam: iam::State,
    #[serde(default)]
    pub resourcemanager: resourcemanager::State,
    /// The quotas and stockouts configured at `/_sandbox/capacity`, which GKE's node
    /// pools run into and Compute Engine reports.
    #[serde(default)]
    pub capacity: crate::capacity::GcpCapacity,
}

impl GcpState {
    /// Applies the effect of every operation that has finished by `now`.
    pub(crate) fn settle(&mut self, now: DateTime<Utc>) {
        self.serviceusage.settle(now);
        self.container.settle(now);
        self.file.settle(now);
    }

    /// One line per resource the Google emulators hold (see `Sandbox::inventory`).
    pub(crate) fn inventory(&self, out: &mut Vec<String>) {
        self.container.inventory(out);
        self.file.inventory(out);
        self.storage.inventory(out);
        self.iam.inventory(out);
    }

    /// Serves one request of `api`; errors are rendered in that API's format. A request
    /// for a project where the API is off is refused as Google refuses it.
    pub(crate) fn handle(&mut self, api: Api, req: &ApiRequest, ctx: &OpCtx) -> ApiResponse {
        if let Some(project) = project_of(api, req) {
            if let Err(e) = self.serviceusage.check(api, &project, ctx.now) {
                return e.response(api);
            }
        }
        let iam = &self.iam;
        let account_exists = |email: &str| iam.exists(email);
        let result = match api {
            Api::Container => self
                .container
                .handle(req, ctx, &self.capacity, &account_exists),
            Api::File => self.file.handle(req, ctx),
            Api::Storage => self.storage.handle(req, ctx, &account_exists),
            Api::ServiceUsage => self.serviceusage.handle(req, ctx),
            Api::Compute => {
                compute::handle(req, &self.capacity, &|| self.container.kube_clusters())
            }
            Api::Tpu => tpu::handle(req),
            Api::Iam => self.iam.handle(req, ctx),
            Api::ResourceManager => self.resourcemanager.handle(req, ctx, &account_exists),
        };
        result.unwrap_or_else(|e| e.response(api))
    }
}

/// The project a request of `api` is for: the segment after `projects/` in its path,
/// or a Cloud Storage request's `project` parameter (a bucket's own calls name none, and
/// Cloud Storage is on in every project unless disabled). `None` for Service Usage.
fn project_of(api: Api, req: &ApiRequest) -> Option<String> {
    if api == Api::ServiceUsage {
        return None;
    }
    let segments = req.segments();
    let named = segments
        .iter()
        .position(|s| s == "projects")
        .and_then(|i| segments.get(i + 1))
        // `projects/p:getIamPolicy` names the project `p`.
        .map(|s| s.split(':').next().unwrap_or_default().to_string())
        // `projects/-/serviceAccounts/NAME@PROJECT.iam.gserviceaccount.com`: the
        // account's project.
        .and_then(|p| {
            if p != "-" {
                return Some(p);
            }
            segments
                .iter()
                .find_map(|s| s.split(':').next()?.split_once('@'))
                .and_then(|(_, domain)| domain.strip_suffix(".iam.gserviceaccount.com"))
                .map(str::to_string)
        });
    named.or_else(|| {
        (api == Api::Storage)
            .then(|| req.param("project").map(str::to_string))
            .flatten()
    })
}

/// Parses and canonicalizes a JSON request body against message `message` of `api`'s
/// discovery document (see `schema.rs`); an empty body is an empty message. A body
/// Google would refuse is refused with Google's message; one setting fields the sandbox
/// does not emulate is answered UNIMPLEMENTED, naming each of them.
pub(crate) fn parse_body(
    req: &ApiRequest,
    api: Api,
    message: &str,
    root: &str,
    rules: Rules,
) -> Result<Value, ApiError> {
    let value: Value = if req.body.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else {
        serde_json::from_slice(&req.body).map_err(|e| {
            ApiError::invalid(format!("Invalid JSON payload received. {e}."))
                .with_reason("parseError")
        })?
    };
    if !value.is_object() {
        return Err(ApiError::invalid(format!(
            "Invalid JSON payload received. Expected an object, got {value}."
        ))
        .with_reason("parseError"));
    }
    let doc = discovery::document(api.name()).map_err(|e| ApiError::internal(e.to_string()))?;
    doc.canonicalize(message, &value, root, rules)
        .map_err(|rejection| {
            let (code, violations) = match rejection {
                Rejection::Invalid(v) => (error::Code::InvalidArgument, v),
                Rejection::Unsupported(v) => (error::Code::Unimplemented, v),
            };
            let message = violations
                .iter()
                .map(|v| v.message.as_str())
                .collect::<Vec<_>>()
                .join("\n");
            let field_violations: Vec<Value> = violations
                .iter()
                .map(|v| json!({"field": v.field, "description": v.message}))
                .collect();
            let mut err = ApiError::new(code, message);
            err.details = vec![json!({
                "@type": "type.googleapis.com/google.rpc.BadRequest",
                "fieldViolations": field_violations,
            })];
            err
        })
}

/// A GKE-style operation id: `operation-<millis>-<hex>`.
pub(crate) fn operation_id(now: DateTime<Utc>) -> String {
    format!("operation-{}-{}", now.timestamp_millis(), random_hex(8))
}

/// A string field of a JSON object, or "".
pub(crate) fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

/// An integer field sent as number or string (canonical bodies use both), or 0.
pub(crate) fn int_of(v: &Value, key: &str) -> i64 {
    match v.get(key) {
        Some(Value::Number(n)) => n.as_i64().unwrap_or(0),
        Some(Value::String(s)) => s.parse().unwrap_or(0),
        _ => 0,
    }
}

/// Sets `key` to `value`, or removes it when `value` is an empty map, list or null, as a
/// proto3 server omits empty fields.
pub(crate) fn set_or_remove(obj: &mut Value, key: &str, value: Value) {
    let empty = match &value {
        Value::Null => true,
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    };
    if let Some(map) = obj.as_object_mut() {
        if empty {
            map.remove(key);
        } else {
            map.insert(key.to_string(), value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::Method;

    #[test]
    fn bad_bodies_become_invalid_argument_with_field_violations() {
        let req = ApiRequest::new(
            Method::POST,
            "x",
            Some(json!({"cluster": {"releaseChannel": {"channel": "FAST"}}})),
        );
        let err = parse_body(
            &req,
            Api::Container,
            "CreateClusterRequest",
            "",
            Rules::PROTO3,
        )
        .expect_err("FAST is not a channel");
        assert_eq!(err.code, error::Code::InvalidArgument);
        assert_eq!(
            err.message,
            "Invalid value at 'cluster.release_channel.channel' (type.googleapis.com/google.container.v1.ReleaseChannel.Channel), \"FAST\""
        );
        assert_eq!(
            err.details[0]["fieldViolations"][0]["field"],
            "cluster.release_channel.channel"
        );
        let mut req = ApiRequest::new(Method::POST, "x", None);
        req.body = b"{nope".to_vec();
        assert!(parse_body(&req, Api::Container, "Cluster", "", Rules::PROTO3).is_err());
        req.body = b"[]".to_vec();
        assert!(parse_body(&req, Api::Container, "Cluster", "", Rules::PROTO3).is_err());
    }

    #[test]
    fn fields_google_has_but_the_sandbox_lacks_are_unimplemented_and_named() {
        let req = ApiRequest::new(
            Method::PUT,
            "x",
            Some(json!({"update": {"desiredLoggingService": "none"}})),
        );
        let err = parse_body(
            &req,
            Api::Container,
            "UpdateClusterRequest",
            "",
            Rules::PROTO3,
        )
        .expect_err("desiredLoggingService is not emulated");
        assert_eq!(err.code, error::Code::Unimplemented);
        assert_eq!(
            err.message,
            "ClusterUpdate.desiredLoggingService (update.desired_logging_service) is not supported by the sandbox."
        );
    }
}
