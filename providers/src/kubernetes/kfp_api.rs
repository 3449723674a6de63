//! The Kubeflow Pipelines REST API (v2beta1) as `kfp_pipeline` and `kfp_run` call it:
//! through the cluster API server's service proxy
//! (`/api/v1/namespaces/NS/services/ml-pipeline:8888/proxy/apis/v2beta1/…`), with the
//! cluster credentials terrain already has. No port-forward, no public endpoint, no
//! KFP token: whoever may proxy to the Service in the cluster may call the API.
//!
//! KFP's gateway speaks snake_case JSON and rejects fields it does not know, so the
//! bodies here carry only the fields of its API definitions. Its errors come in two
//! shapes (`{code, message}` from most calls, `{error_message, error_details}` from the
//! upload handlers), and the API server itself answers a Kubernetes `Status` when the
//! Service is missing or has no ready pod; all three become
//! [`ProviderError::Api`] naming the call (`kfp.pipelines.upload`).

use http::{Method, Request};
use serde_json::{json, Value};

use super::connect::Conn;
use crate::failure::Hint;
use crate::ProviderError;

/// The API group standing for KFP's REST API in the stack's ordering: the
/// `kubeflow-pipelines` module's manifest `serves` it, pipelines and runs need it.
pub const API_GROUP: &str = "pipelines.kubeflow.org";
pub const API_VERSION: &str = "pipelines.kubeflow.org/v2beta1";

/// What a KFP object of `kind` (`Pipeline`, `Run`) needs its cluster to serve.
pub fn needed(kind: &str) -> crate::ApiGroups {
    crate::ApiGroups {
        needs: vec![crate::ApiKind {
            group: API_GROUP.into(),
            api_version: API_VERSION.into(),
            kind: kind.into(),
        }],
        ..crate::ApiGroups::default()
    }
}

/// The Service of KFP's API server and its HTTP port, as KFP's manifests make them.
pub const SERVICE: &str = "ml-pipeline";
pub const PORT: u16 = 8888;
/// The largest pipeline file KFP's upload handler takes.
pub const MAX_UPLOAD: usize = 32 << 20;

/// KFP's API on one cluster, in the namespace its API server runs in.
pub struct Kfp {
    conn: Conn,
    namespace: String,
}

/// gRPC code numbers as names, for messages (`5` → `NOT_FOUND`).
fn grpc_code(code: i64) -> &'static str {
    match code {
        1 => "CANCELLED",
        2 => "UNKNOWN",
        3 => "INVALID_ARGUMENT",
        4 => "DEADLINE_EXCEEDED",
        5 => "NOT_FOUND",
        6 => "ALREADY_EXISTS",
        7 => "PERMISSION_DENIED",
        8 => "RESOURCE_EXHAUSTED",
        9 => "FAILED_PRECONDITION",
        10 => "ABORTED",
        12 => "UNIMPLEMENTED",
        13 => "INTERNAL",
        14 => "UNAVAILABLE",
        16 => "UNAUTHENTICATED",
        _ => "",
    }
}

/// Percent-encodes a query value or path segment.
fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn query(pairs: &[(&str, &str)]) -> String {
    let parts: Vec<String> = pairs
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| format!("{k}={}", encode(v)))
        .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!("?{}", parts.join("&"))
    }
}

/// The error for an answer with status `status` and body `body` to `call`.
fn answer_error(call: &str, status: u16, body: &[u8], service: &str, ns: &str) -> ProviderError {
    let parsed: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let (code, message) = if parsed["kind"] == "Status" {
        // The API server's own answer: the Service or its pods are not there.
        (
            parsed["reason"].as_str().unwrap_or_default().to_string(),
            parsed["message"].as_str().unwrap_or_default().to_string(),
        )
    } else if let Some(m) = parsed["error_message"].as_str() {
        let details = parsed["error_details"].as_str().unwrap_or_default();
        let message = if details.is_empty() || details == m {
            m.to_string()
        } else {
            format!("{m} ({details})")
        };
        (String::new(), message)
    } else if let Some(m) = parsed["message"].as_str() {
        (
            grpc_code(parsed["code"].as_i64().unwrap_or(0)).to_string(),
            m.to_string(),
        )
    } else {
        // Not JSON: a proxy or a gateway in between; its first line says enough.
        let text = String::from_utf8_lossy(body);
        (
            String::new(),
            text.lines()
                .next()
                .unwrap_or_default()
                .chars()
                .take(300)
                .collect(),
        )
    };
    let mut error = ProviderError::api(call, status, code, message);
    if status == 503 || (status == 404 && parsed["kind"] == "Status") {
        error = error.with_hint(Hint::Do(format!(
            "the cluster has no ready {service} Service in {ns}: install Kubeflow Pipelines on it (the kubeflow-pipelines module) and wait for its API server"
        )));
    }
    error
}

impl Kfp {
    pub fn new(conn: Conn, namespace: &str) -> Kfp {
        Kfp {
            conn,
            namespace: namespace.to_string(),
        }
    }

    /// The connection to the cluster, for what KFP has no endpoint for (pod logs).
    pub fn conn(&self) -> &Conn {
        &self.conn
    }

    fn url(&self, path: &str) -> String {
        format!(
            "/api/v1/namespaces/{}/services/{SERVICE}:{PORT}/proxy/apis/v2beta1/{path}",
            self.namespace
        )
    }

    /// One call; `Ok(None)` for a 404 from KFP when `missing_ok` (not from the API
    /// server: a missing Service is an error, not a missing object).
    async fn send(
        &self,
        call: &str,
        method: Method,
        path: &str,
        content_type: Option<&str>,
        body: Vec<u8>,
        missing_ok: bool,
    ) -> Result<Option<Value>, ProviderError> {
        let mut request = Request::builder().method(method).uri(self.url(path));
        if let Some(ct) = content_type {
            request = request.header(http::header::CONTENT_TYPE, ct);
        }
        request = request.header(http::header::ACCEPT, "application/json");
        let request = request
            .body(kube::client::Body::from(body))
            .map_err(|e| ProviderError::api(call, 0, "", e.to_string()))?;
        let response = self
            .conn
            .send(request)
            .await
            .map_err(|e| super::apply::api_error(call.to_string(), e))?;
        let status = response.status().as_u16();
        let bytes = response
            .into_body()
            .collect_bytes()
            .await
            .map_err(|e| super::apply::api_error(call.to_string(), e))?;
        if (200..300).contains(&status) {
            if bytes.is_empty() {
                return Ok(Some(json!({})));
            }
            return serde_json::from_slice(&bytes).map(Some).map_err(|e| {
                ProviderError::api(
                    call,
                    status,
                    "",
                    format!("the answer is not KFP's JSON: {e}"),
                )
            });
        }
        let from_kfp = serde_json::from_slice::<Value>(&bytes)
            .is_ok_and(|v| v["kind"] != "Status" && v.is_object());
        if status == 404 && missing_ok && from_kfp {
            return Ok(None);
        }
        Err(answer_error(call, status, &bytes, SERVICE, &self.namespace))
    }

    async fn get(&self, call: &str, path: &str) -> Result<Option<Value>, ProviderError> {
        self.send(call, Method::GET, path, None, Vec::new(), true)
            .await
    }

    async fn post(&self, call: &str, path: &str, body: &Value) -> Result<Value, ProviderError> {
        let body = serde_json::to_vec(body).unwrap_or_default();
        Ok(self
            .send(
                call,
                Method::POST,
                path,
                Some("application/json"),
                body,
                false,
            )
            .await?
            .unwrap_or_default())
    }

    /// A DELETE; a 404 from KFP is success (already gone).
    async fn delete(&self, call: &str, path: &str) -> Result<(), ProviderError> {
        self.send(call, Method::DELETE, path, None, Vec::new(), true)
            .await
            .map(|_| ())
    }

    /// A multipart upload of `file` under the form field `uploadfile`.
    async fn upload(
        &self,
        call: &str,
        path: &str,
        filename: &str,
        file: &[u8],
    ) -> Result<Value, ProviderError> {
        if file.len() > MAX_UPLOAD {
            return Err(ProviderError::api(
                call,
                0,
                "",
                format!(
                    "the pipeline file is {} bytes; KFP takes at most {MAX_UPLOAD}",
                    file.len()
                ),
            ));
        }
        let boundary = format!("terrain-{:016x}", rand::random::<u64>());
        let mut body = Vec::with_capacity(file.len() + 256);
        body.extend_from_slice(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"uploadfile\"; filename=\"{}\"\r\nContent-Type: application/x-yaml\r\n\r\n",
                filename.replace('"', "")
            )
            .as_bytes(),
        );
        body.extend_from_slice(file);
        body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
        let ct = format!("multipart/form-data; boundary={boundary}");
        Ok(self
            .send(call, Method::POST, path, Some(&ct), body, false)
            .await?
            .unwrap_or_default())
    }

    /// The pipeline named `name`, or `None`.
    pub async fn pipeline_by_name(&self, name: &str) -> Result<Option<Value>, ProviderError> {
        self.get(
            "kfp.pipelines.getByName",
            &format!(
                "pipelines/names/{}{}",
                encode(name),
                query(&[("namespace", "")])
            ),
        )
        .await
    }

    /// Uploads a new pipeline (KFP makes its first version from the same file).
    pub async fn upload_pipeline(
        &self,
        name: &str,
        display_name: &str,
        description: &str,
        file: &[u8],
    ) -> Result<Value, ProviderError> {
        let path = format!(
            "pipelines/upload{}",
            query(&[
                ("name", name),
                ("display_name", display_name),
                ("description", description),
            ])
        );
        self.upload("kfp.pipelines.upload", &path, &format!("{name}.yaml"), file)
            .await
    }

    /// Uploads `file` as a new version of `pipeline_id`.
    pub async fn upload_version(
        &self,
        pipeline_id: &str,
        name: &str,
        description: &str,
        file: &[u8],
    ) -> Result<Value, ProviderError> {
        let path = format!(
            "pipelines/upload_version{}",
            query(&[
                ("name", name),
                ("display_name", name),
                ("description", description),
                ("pipelineid", pipeline_id),
            ])
        );
        self.upload(
            "kfp.pipelines.uploadVersion",
            &path,
            &format!("{name}.yaml"),
            file,
        )
        .await
    }

    /// Every version of a pipeline, oldest first.
    pub async fn versions(&self, pipeline_id: &str) -> Result<Vec<Value>, ProviderError> {
        let mut out = Vec::new();
        let mut token = String::new();
        loop {
            let path = format!(
                "pipelines/{}/versions{}",
                encode(pipeline_id),
                query(&[
                    ("page_size", "100"),
                    ("page_token", &token),
                    ("sort_by", "created_at"),
                ])
            );
            let Some(page) = self.get("kfp.pipelineVersions.list", &path).await? else {
                return Ok(out);
            };
            out.extend(
                page["pipeline_versions"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default(),
            );
            token = page["next_page_token"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            if token.is_empty() {
                return Ok(out);
            }
        }
    }

    pub async fn delete_version(&self, pipeline_id: &str, id: &str) -> Result<(), ProviderError> {
        self.delete(
            "kfp.pipelineVersions.delete",
            &format!("pipelines/{}/versions/{}", encode(pipeline_id), encode(id)),
        )
        .await
    }

    pub async fn delete_pipeline(&self, id: &str) -> Result<(), ProviderError> {
        self.delete("kfp.pipelines.delete", &format!("pipelines/{}", encode(id)))
            .await
    }

    /// The experiment named `name`, or `None`.
    pub async fn find_experiment(&self, name: &str) -> Result<Option<Value>, ProviderError> {
        let filter = json!({"predicates": [{"key": "display_name", "operation": "EQUALS", "string_value": name}]})
            .to_string();
        let path = format!(
            "experiments{}",
            query(&[("filter", &filter), ("page_size", "10")])
        );
        Ok(self
            .get("kfp.experiments.list", &path)
            .await?
            .and_then(|page| {
                page["experiments"]
                    .as_array()
                    .and_then(|e| e.iter().find(|e| e["display_name"] == name).cloned())
            }))
    }

    /// The experiment named `name`, made when there is none.
    pub async fn experiment(&self, name: &str) -> Result<Value, ProviderError> {
        if let Some(found) = self.find_experiment(name).await? {
            return Ok(found);
        }
        self.post(
            "kfp.experiments.create",
            "experiments",
            &json!({"display_name": name}),
        )
        .await
    }

    pub async fn create_run(&self, run: &Value) -> Result<Value, ProviderError> {
        self.post("kfp.runs.create", "runs", run).await
    }

    pub async fn run(&self, id: &str) -> Result<Option<Value>, ProviderError> {
        self.get("kfp.runs.get", &format!("runs/{}", encode(id)))
            .await
    }

    /// Runs of an experiment whose display name is `name`, newest first.
    pub async fn runs_named(
        &self,
        experiment_id: &str,
        name: &str,
    ) -> Result<Vec<Value>, ProviderError> {
        let filter = json!({"predicates": [{"key": "display_name", "operation": "EQUALS", "string_value": name}]})
            .to_string();
        let path = format!(
            "runs{}",
            query(&[
                ("experiment_id", experiment_id),
                ("filter", &filter),
                ("page_size", "100"),
                ("sort_by", "created_at desc"),
            ])
        );
        Ok(self
            .get("kfp.runs.list", &path)
            .await?
            .and_then(|page| page["runs"].as_array().cloned())
            .unwrap_or_default())
    }

    pub async fn delete_run(&self, id: &str) -> Result<(), ProviderError> {
        self.delete("kfp.runs.delete", &format!("runs/{}", encode(id)))
            .await
    }

    pub async fn archive_run(&self, id: &str) -> Result<(), ProviderError> {
        self.post(
            "kfp.runs.archive",
            &format!("runs/{}:archive", encode(id)),
            &json!({}),
        )
        .await
        .map(|_| ())
    }

    pub async fn terminate_run(&self, id: &str) -> Result<(), ProviderError> {
        self.post(
            "kfp.runs.terminate",
            &format!("runs/{}:terminate", encode(id)),
            &json!({}),
        )
        .await
        .map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_of_each_shape_name_the_call_and_the_code() {
        let kfp = br#"{"error":"x","code":5,"message":"Pipeline abc not found","details":[]}"#;
        let shown = answer_error("kfp.pipelines.get", 404, kfp, SERVICE, "kubeflow").to_string();
        assert_eq!(
            shown,
            "kfp.pipelines.get failed: 404 NOT_FOUND: Pipeline abc not found"
        );
        let upload = br#"{"error_message":"Failed to create a pipeline","error_details":"The name x already exists"}"#;
        let shown =
            answer_error("kfp.pipelines.upload", 409, upload, SERVICE, "kubeflow").to_string();
        assert_eq!(
            shown,
            "kfp.pipelines.upload failed: 409: Failed to create a pipeline (The name x already exists)"
        );
        let status = br#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"no endpoints available for service \"ml-pipeline\"","reason":"ServiceUnavailable","code":503}"#;
        let shown =
            answer_error("kfp.pipelines.upload", 503, status, SERVICE, "kubeflow").to_string();
        assert!(
            shown.starts_with("kfp.pipelines.upload failed: 503 ServiceUnavailable: no endpoints available for service \"ml-pipeline\"; "),
            "{shown}"
        );
        assert!(shown.contains("install Kubeflow Pipelines"), "{shown}");
    }

    #[test]
    fn query_values_are_encoded() {
        assert_eq!(
            query(&[("filter", r#"{"a": "b c"}"#), ("empty", "")]),
            "?filter=%7B%22a%22%3A%20%22b%20c%22%7D"
        );
    }
}
