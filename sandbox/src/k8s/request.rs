//! One Kubernetes API request as the emulated API server's handlers see it (method,
//! path, query, content type, body), with what the handlers read of it: parameters,
//! flags, the field manager and the body as JSON, YAML or protobuf. Below the handlers
//! (`api/`) and the documents (`openapi.rs`), which both take it.

use axum::http::Method;
use serde_json::Value;

use super::status::StatusError;

/// One Kubernetes API request, as the handlers see it.
#[derive(Debug, Clone)]
pub(crate) struct KubeRequest {
    pub method: Method,
    /// The request path, still percent-encoded, starting with `/`.
    pub path: String,
    pub query: Vec<(String, String)>,
    pub content_type: Option<String>,
    pub accept: Option<String>,
    pub user_agent: Option<String>,
    pub body: Vec<u8>,
    /// A port-forward whose client names each stream's port as it opens it (SPDY, or
    /// SPDY tunnelled in a WebSocket), so the query names none.
    pub port_streams: bool,
}

impl KubeRequest {
    pub(crate) fn param(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    pub(crate) fn params(&self, name: &str) -> Vec<&str> {
        self.query
            .iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    pub(crate) fn flag(&self, name: &str) -> bool {
        matches!(self.param(name), Some("true" | "1" | "True"))
    }

    pub(crate) fn accept(&self) -> &str {
        self.accept.as_deref().unwrap_or("")
    }

    /// The field manager of a write: `fieldManager`, else the client's User-Agent name.
    pub(crate) fn manager(&self) -> String {
        if let Some(m) = self.param("fieldManager").filter(|m| !m.is_empty()) {
            return m.to_string();
        }
        self.user_agent
            .as_deref()
            .and_then(|ua| ua.split('/').next())
            .map(str::trim)
            .filter(|m| !m.is_empty())
            .unwrap_or("unknown")
            .to_string()
    }

    /// The body as JSON (or YAML, for apply patches; or protobuf, as `kubectl create`
    /// sends some kinds).
    pub(crate) fn body_value(&self) -> Result<Value, StatusError> {
        if self.body.iter().all(u8::is_ascii_whitespace) {
            return Err(StatusError::bad_request("the request body is empty"));
        }
        let protobuf = self
            .content_type
            .as_deref()
            .is_some_and(|c| c.starts_with("application/vnd.kubernetes.protobuf"));
        if protobuf || super::protobuf::is_protobuf(&self.body) {
            return super::protobuf::decode(&self.body).map_err(|e| {
                StatusError::bad_request(format!(
                    "the request body is not a valid protobuf object: {e}"
                ))
            });
        }
        match serde_json::from_slice::<Value>(&self.body) {
            Ok(v) => Ok(v),
            Err(json_err) => {
                let is_yaml = self
                    .content_type
                    .as_deref()
                    .is_some_and(|c| c.contains("yaml"));
                if !is_yaml {
                    return Err(StatusError::bad_request(format!(
                        "the request body is not valid JSON: {json_err}"
                    )));
                }
                serde_yaml_ng::from_slice::<Value>(&self.body).map_err(|e| {
                    StatusError::bad_request(format!("the request body is not valid YAML: {e}"))
                })
            }
        }
    }
}
