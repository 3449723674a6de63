//! The HTTP side of the sandbox: routes each request to an emulator by its first path
//! segment (`/container/`, `/file/`, `/storage/`) or to the control endpoints under
//! `/_sandbox/`, and around every API request applies faults, checks the bearer token,
//! settles finished operations, persists state and records the exchange.

use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use crate::faults::{FaultSpec, Faults, Injected};
use crate::gcp::error::{ApiError, Code};
use crate::gcp::operation::OpCtx;
use crate::gcp::Api;
use crate::http::{parse_query, ApiRequest, ApiResponse, Body};
use crate::persist::{self, World};
use crate::{Exchange, Timing};

/// Uploads beyond this are refused; the sandbox keeps objects in memory.
const MAX_BODY: usize = 64 * 1024 * 1024;

/// The shared state of one running sandbox.
pub(crate) struct App {
    world: Mutex<Stored>,
    pub faults: Faults,
    traffic: Mutex<Vec<Exchange>>,
    timing: Timing,
    state_file: Option<PathBuf>,
    /// Moves the sandbox clock ahead of the wall clock (see `Sandbox::advance_clock`).
    clock_offset_ms: AtomicI64,
}

struct Stored {
    world: World,
    /// The state file's current content, to skip rewriting it when nothing changed.
    saved: String,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking handler leaves at worst one half-applied request behind, which is no
    // reason to take the whole sandbox down for the tests still running against it.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl App {
    pub(crate) fn new(
        world: World,
        saved: String,
        timing: Timing,
        state_file: Option<PathBuf>,
    ) -> App {
        App {
            world: Mutex::new(Stored { world, saved }),
            faults: Faults::default(),
            traffic: Mutex::new(Vec::new()),
            timing,
            state_file,
            clock_offset_ms: AtomicI64::new(0),
        }
    }

    pub(crate) fn now(&self) -> DateTime<Utc> {
        Utc::now() + chrono::Duration::milliseconds(self.clock_offset_ms.load(Ordering::SeqCst))
    }

    pub(crate) fn advance_clock(&self, by: std::time::Duration) {
        let ms = i64::try_from(by.as_millis()).unwrap_or(i64::MAX / 4);
        self.clock_offset_ms.fetch_add(ms, Ordering::SeqCst);
    }

    pub(crate) fn traffic(&self) -> Vec<Exchange> {
        lock(&self.traffic).clone()
    }

    pub(crate) fn clear_traffic(&self) {
        lock(&self.traffic).clear();
    }

    /// Serves one API request and records it.
    pub(crate) fn serve(
        &self,
        api: Api,
        req: &ApiRequest,
        authorization: Option<&str>,
    ) -> ApiResponse {
        let (response, injected) = self.serve_unrecorded(api, req, authorization);
        lock(&self.traffic).push(Exchange {
            api: api.name().to_string(),
            method: req.method.to_string(),
            path: req.path.clone(),
            query: req
                .query
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join("&"),
            request: req.json(),
            status: response.status,
            response: response.json_body().cloned(),
            injected,
        });
        response
    }

    fn serve_unrecorded(
        &self,
        api: Api,
        req: &ApiRequest,
        authorization: Option<&str>,
    ) -> (ApiResponse, bool) {
        // Injected before anything else happens, so a retry is always safe.
        if let Some(injected) = self.faults.before_request() {
            return (injected_response(api, injected), true);
        }
        if !bearer_token_present(authorization) {
            let err = ApiError::new(
                Code::Unauthenticated,
                "Request is missing required authentication credential. Expected OAuth 2 access token, login cookie or other valid authentication credential.",
            );
            return (err.response(api), false);
        }
        let now = self.now();
        let response = {
            let mut stored = lock(&self.world);
            stored.world.gcp.settle(now);
            let ctx = OpCtx {
                now,
                scale: self.timing.scale,
                faults: &self.faults,
            };
            let response = stored.world.gcp.handle(api, req, &ctx);
            match self.persist(&mut stored) {
                Ok(()) => response,
                Err(message) => ApiError::internal(message).response(api),
            }
        };
        if req.is_mutating() && self.faults.lose_response() {
            let lost = Injected {
                status: 503,
                retry_after: None,
            };
            return (injected_response(api, lost), true);
        }
        (response, false)
    }

    /// Rewrites the state file if the world changed.
    fn persist(&self, stored: &mut Stored) -> Result<(), String> {
        let Some(path) = &self.state_file else {
            return Ok(());
        };
        let text = stored
            .world
            .to_json()
            .map_err(|e| format!("sandbox could not serialize its state: {e}"))?;
        if text == stored.saved {
            return Ok(());
        }
        persist::save(path, &text).map_err(|e| {
            format!(
                "sandbox could not save its state file {}: {e}",
                path.display()
            )
        })?;
        stored.saved = text;
        Ok(())
    }

    /// The `/_sandbox/` control endpoints; faults never apply to these.
    fn control(&self, method: &Method, path: &str, body: &[u8]) -> (StatusCode, Option<Value>) {
        match (method.as_str(), path.trim_matches('/')) {
            ("GET", "traffic") => (StatusCode::OK, serde_json::to_value(self.traffic()).ok()),
            ("DELETE", "traffic") => {
                self.clear_traffic();
                (StatusCode::NO_CONTENT, None)
            }
            ("GET", "faults") => (
                StatusCode::OK,
                serde_json::to_value(self.faults.spec()).ok(),
            ),
            ("POST", "faults") => match serde_json::from_slice::<FaultSpec>(body) {
                Ok(spec) => {
                    self.faults.apply(spec);
                    (
                        StatusCode::OK,
                        serde_json::to_value(self.faults.spec()).ok(),
                    )
                }
                Err(e) => (
                    StatusCode::BAD_REQUEST,
                    Some(json!({"error": format!("invalid fault description: {e}")})),
                ),
            },
            ("GET", "state") => {
                let mut stored = lock(&self.world);
                stored.world.gcp.settle(self.now());
                (StatusCode::OK, serde_json::to_value(&stored.world).ok())
            }
            ("POST", "clock") => {
                let secs = serde_json::from_slice::<Value>(body)
                    .ok()
                    .and_then(|v| v["advanceSecs"].as_f64())
                    .filter(|s| s.is_finite() && *s >= 0.0);
                match secs {
                    Some(secs) => {
                        self.advance_clock(std::time::Duration::from_secs_f64(secs));
                        (
                            StatusCode::OK,
                            Some(json!({"now": self.now().to_rfc3339()})),
                        )
                    }
                    None => (
                        StatusCode::BAD_REQUEST,
                        Some(json!({"error": "expected {\"advanceSecs\": <non-negative number>}"})),
                    ),
                }
            }
            _ => (
                StatusCode::NOT_FOUND,
                Some(
                    json!({"error": format!("no sandbox control endpoint {method} /_sandbox/{path}")}),
                ),
            ),
        }
    }
}

fn bearer_token_present(authorization: Option<&str>) -> bool {
    authorization
        .and_then(|h| h.split_once(' '))
        .is_some_and(|(scheme, token)| {
            scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty()
        })
}

fn injected_response(api: Api, injected: Injected) -> ApiResponse {
    let code = Code::from_http(injected.status);
    let message = match code {
        Code::ResourceExhausted => format!(
            "Quota exceeded for quota metric 'Requests' and limit 'Requests per minute' of service '{}.googleapis.com'.",
            api.name()
        ),
        Code::Internal => "Internal error encountered.".to_string(),
        _ => "The service is currently unavailable.".to_string(),
    };
    let mut response = ApiError::new(code, message)
        .with_status(injected.status)
        .response(api);
    response.retry_after = injected.retry_after;
    response
}

pub(crate) fn router(app: Arc<App>) -> Router {
    Router::new().fallback(handle).with_state(app)
}

async fn handle(State(app): State<Arc<App>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let bytes: Bytes = match axum::body::to_bytes(body, MAX_BODY).await {
        Ok(b) => b,
        Err(e) => {
            return (
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("could not read the request body: {e}"),
            )
                .into_response()
        }
    };
    let path = parts.uri.path().trim_start_matches('/');
    let (root, rest) = path.split_once('/').unwrap_or((path, ""));
    if root == "_sandbox" {
        let (status, value) = app.control(&parts.method, rest, &bytes);
        return json_response(status, value);
    }
    let Some(api) = Api::from_name(root) else {
        return (
            StatusCode::NOT_FOUND,
            format!("no API at /{root}/: the sandbox serves /container/, /file/ and /storage/"),
        )
            .into_response();
    };
    let header_str = |name: header::HeaderName| {
        parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let req = ApiRequest {
        method: parts.method.clone(),
        path: rest.to_string(),
        query: parse_query(parts.uri.query().unwrap_or("")),
        content_type: header_str(header::CONTENT_TYPE),
        body: bytes.to_vec(),
    };
    let authorization = header_str(header::AUTHORIZATION);
    // Synchronous on purpose: the state lock is a std mutex that is never held across an
    // await, and the state file is small enough to write inline.
    let response = app.serve(api, &req, authorization.as_deref());
    to_http(response)
}

fn json_response(status: StatusCode, value: Option<Value>) -> Response {
    match value {
        Some(v) => {
            let mut response = (status, v.to_string()).into_response();
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json; charset=UTF-8"),
            );
            response
        }
        None => status.into_response(),
    }
}

fn to_http(response: ApiResponse) -> Response {
    let status = StatusCode::from_u16(response.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut out = match response.body {
        Body::Json(v) => json_response(status, Some(v)),
        Body::Empty => status.into_response(),
        Body::Bytes { content_type, data } => {
            let mut r = (status, data).into_response();
            if let Ok(v) = HeaderValue::from_str(&content_type) {
                r.headers_mut().insert(header::CONTENT_TYPE, v);
            }
            r
        }
    };
    if let Some(secs) = response.retry_after {
        out.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app() -> App {
        App::new(World::new(), String::new(), Timing::instant(), None)
    }

    #[test]
    fn requests_need_a_bearer_token() {
        let app = app();
        let req = ApiRequest::new(Method::GET, "v1/projects/p/locations/-/clusters", None);
        for header in [None, Some("Bearer "), Some("Basic abc"), Some("token")] {
            let resp = app.serve(Api::Container, &req, header);
            assert_eq!(resp.status, 401, "{header:?}");
            assert_eq!(
                resp.json_body().map(|b| b["error"]["status"].clone()),
                Some(json!("UNAUTHENTICATED"))
            );
        }
        assert_eq!(
            app.serve(Api::Container, &req, Some("Bearer t")).status,
            200
        );
        assert_eq!(
            app.serve(Api::Container, &req, Some("bearer t")).status,
            200
        );
    }

    #[test]
    fn faults_come_before_effects_except_lost_responses() {
        let app = app();
        let create = ApiRequest::new(
            Method::POST,
            "storage/v1/b?project=p",
            Some(json!({"name": "bkt"})),
        );
        app.faults.burst(429, 1, 2);
        let resp = app.serve(Api::Storage, &create, Some("Bearer t"));
        assert_eq!((resp.status, resp.retry_after), (429, Some(2)));
        assert_eq!(
            resp.json_body()
                .map(|b| b["error"]["errors"][0]["reason"].clone()),
            Some(json!("rateLimitExceeded"))
        );
        app.faults.fail_after_effect(1);
        assert_eq!(
            app.serve(Api::Storage, &create, Some("Bearer t")).status,
            503
        );
        let retry = app.serve(Api::Storage, &create, Some("Bearer t"));
        assert_eq!(retry.status, 409, "the lost create did happen");
        let traffic = app.traffic();
        assert_eq!(
            traffic
                .iter()
                .map(|e| (e.status, e.injected))
                .collect::<Vec<_>>(),
            [(429, true), (503, true), (409, false)]
        );
        assert_eq!(traffic[0].path, "storage/v1/b");
        assert_eq!(traffic[0].query, "project=p");
        assert_eq!(traffic[0].request, Some(json!({"name": "bkt"})));
    }

    #[test]
    fn control_endpoints_set_faults_and_move_the_clock() {
        let app = app();
        let (status, _) = app.control(
            &Method::POST,
            "faults",
            br#"{"burst": {"status": 503, "count": 1}}"#,
        );
        assert_eq!(status, StatusCode::OK);
        assert_eq!(app.faults.spec().burst.map(|b| b.count), Some(1));
        let (status, _) = app.control(&Method::POST, "faults", b"{\"nope\": 1}");
        assert_eq!(status, StatusCode::BAD_REQUEST);
        let before = app.now();
        let (status, _) = app.control(&Method::POST, "clock", br#"{"advanceSecs": 60}"#);
        assert_eq!(status, StatusCode::OK);
        assert!(app.now() - before >= chrono::Duration::seconds(60));
        assert_eq!(
            app.control(&Method::GET, "nothing", b"").0,
            StatusCode::NOT_FOUND
        );
    }
}
