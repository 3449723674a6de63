//! Google API errors: the canonical codes, and their two wire formats — the
//! `google.rpc.Status` JSON of container/file and the legacy JSON-API format of storage.
//! See https://cloud.google.com/apis/design/errors and
//! https://cloud.google.com/storage/docs/json_api/v1/status-codes.

use serde_json::{json, Value};

use super::Api;
use crate::http::ApiResponse;

/// The canonical error codes the emulators answer with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Code {
    InvalidArgument,
    FailedPrecondition,
    NotFound,
    AlreadyExists,
    Aborted,
    ResourceExhausted,
    Unavailable,
    Internal,
    /// A request Google would serve that the sandbox does not emulate.
    Unimplemented,
    Unauthenticated,
    PermissionDenied,
}

impl Code {
    pub(crate) fn http(self) -> u16 {
        match self {
            Code::InvalidArgument | Code::FailedPrecondition => 400,
            Code::NotFound => 404,
            Code::AlreadyExists | Code::Aborted => 409,
            Code::ResourceExhausted => 429,
            Code::Unavailable => 503,
            Code::Internal => 500,
            Code::Unimplemented => 501,
            Code::Unauthenticated => 401,
            Code::PermissionDenied => 403,
        }
    }

    pub(crate) fn status(self) -> &'static str {
        match self {
            Code::InvalidArgument => "INVALID_ARGUMENT",
            Code::FailedPrecondition => "FAILED_PRECONDITION",
            Code::NotFound => "NOT_FOUND",
            Code::AlreadyExists => "ALREADY_EXISTS",
            Code::Aborted => "ABORTED",
            Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
            Code::Unavailable => "UNAVAILABLE",
            Code::Internal => "INTERNAL",
            Code::Unimplemented => "UNIMPLEMENTED",
            Code::Unauthenticated => "UNAUTHENTICATED",
            Code::PermissionDenied => "PERMISSION_DENIED",
        }
    }

    /// The storage JSON API's `reason` for this code.
    fn storage_reason(self) -> &'static str {
        match self {
            Code::InvalidArgument => "invalid",
            Code::FailedPrecondition => "conditionNotMet",
            Code::NotFound => "notFound",
            Code::AlreadyExists | Code::Aborted => "conflict",
            Code::ResourceExhausted => "rateLimitExceeded",
            Code::Unavailable | Code::Internal => "backendError",
            Code::Unimplemented => "notImplemented",
            Code::Unauthenticated => "required",
            Code::PermissionDenied => "forbidden",
        }
    }

    /// The code an injected HTTP status stands for; unknown 5xx count as unavailable.
    pub(crate) fn from_http(status: u16) -> Code {
        match status {
            400 => Code::InvalidArgument,
            401 => Code::Unauthenticated,
            403 => Code::PermissionDenied,
            404 => Code::NotFound,
            409 => Code::Aborted,
            429 => Code::ResourceExhausted,
            500 => Code::Internal,
            501 => Code::Unimplemented,
            _ => Code::Unavailable,
        }
    }
}

/// An error answer of one of the Google APIs.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ApiError {
    pub code: Code,
    /// The HTTP status, normally `code.http()`; injected faults may use any status.
    pub http: u16,
    pub message: String,
    /// Overrides the storage `reason` derived from the code.
    pub reason: Option<&'static str>,
    /// `google.rpc.Status.details` entries (e.g. a `BadRequest` with field violations).
    pub details: Vec<Value>,
}

impl ApiError {
    pub(crate) fn new(code: Code, message: impl Into<String>) -> Self {
        ApiError {
            code,
            http: code.http(),
            message: message.into(),
            reason: None,
            details: Vec::new(),
        }
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Self::new(Code::InvalidArgument, message)
    }

    pub(crate) fn precondition(message: impl Into<String>) -> Self {
        Self::new(Code::FailedPrecondition, message)
    }

    pub(crate) fn not_found(message: impl Into<String>) -> Self {
        Self::new(Code::NotFound, message)
    }

    pub(crate) fn exists(message: impl Into<String>) -> Self {
        Self::new(Code::AlreadyExists, message)
    }

    pub(crate) fn internal(message: impl Into<String>) -> Self {
        Self::new(Code::Internal, message)
    }

    pub(crate) fn with_reason(mut self, reason: &'static str) -> Self {
        self.reason = Some(reason);
        self
    }

    pub(crate) fn with_status(mut self, http: u16) -> Self {
        self.http = http;
        self
    }

    /// The route exists in the real API but the sandbox does not serve it (or the method
    /// is wrong); Google's front end answers such requests with 404 too.
    pub(crate) fn no_route(method: &str, path: &str) -> Self {
        Self::not_found(format!("The sandbox does not implement {method} {path}."))
    }

    /// The JSON error body in the format of `api`.
    pub(crate) fn body(&self, api: Api) -> Value {
        match api {
            // Compute Engine answers in the same legacy JSON-API format as storage.
            Api::Storage | Api::Compute => {
                let mut error = json!({
                    "code": self.http,
                    "message": self.message,
                    "errors": [{
                        "domain": "global",
                        "reason": self.reason.unwrap_or(self.code.storage_reason()),
                        "message": self.message,
                    }],
                });
                // Errors Google's front end answers (an API that is off) carry the
                // canonical status and details in both formats.
                if !self.details.is_empty() {
                    error["status"] = json!(self.code.status());
                    error["details"] = Value::Array(self.details.clone());
                }
                json!({ "error": error })
            }
            Api::Container
            | Api::File
            | Api::ServiceUsage
            | Api::Tpu
            | Api::Iam
            | Api::ResourceManager => {
                let mut error = json!({
                    "code": self.http,
                    "message": self.message,
                    "status": self.code.status(),
                });
                if !self.details.is_empty() {
                    error["details"] = Value::Array(self.details.clone());
                }
                json!({ "error": error })
            }
        }
    }

    pub(crate) fn response(&self, api: Api) -> ApiResponse {
        ApiResponse::json(self.http, self.body(api))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_map_to_http_statuses_as_google_does() {
        let table = [
            (Code::InvalidArgument, 400, "INVALID_ARGUMENT"),
            (Code::FailedPrecondition, 400, "FAILED_PRECONDITION"),
            (Code::NotFound, 404, "NOT_FOUND"),
            (Code::AlreadyExists, 409, "ALREADY_EXISTS"),
            (Code::Aborted, 409, "ABORTED"),
            (Code::ResourceExhausted, 429, "RESOURCE_EXHAUSTED"),
            (Code::Unavailable, 503, "UNAVAILABLE"),
            (Code::Internal, 500, "INTERNAL"),
            (Code::Unimplemented, 501, "UNIMPLEMENTED"),
            (Code::Unauthenticated, 401, "UNAUTHENTICATED"),
            (Code::PermissionDenied, 403, "PERMISSION_DENIED"),
        ];
        for (code, http, status) in table {
            assert_eq!((code.http(), code.status()), (http, status));
            assert_eq!(Code::from_http(http).http(), http, "{status}");
        }
    }

    #[test]
    fn renders_both_formats() {
        let e = ApiError::not_found("Not found: projects/p/locations/l/clusters/c.");
        assert_eq!(
            e.body(Api::Container),
            json!({"error": {"code": 404, "message": "Not found: projects/p/locations/l/clusters/c.", "status": "NOT_FOUND"}})
        );
        let e = ApiError::new(
            Code::Aborted,
            "The bucket you tried to delete is not empty.",
        );
        assert_eq!(
            e.body(Api::Storage),
            json!({"error": {"code": 409, "message": "The bucket you tried to delete is not empty.",
                "errors": [{"domain": "global", "reason": "conflict", "message": "The bucket you tried to delete is not empty."}]}})
        );
    }
}
