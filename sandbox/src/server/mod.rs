//! The HTTP side of the sandbox: routes each request to an emulator by its first path
//! segment (`/container/`, `/file/`, `/storage/` with Cloud Storage's media roots
//! `/upload/`, `/resumable/` and `/download/`, `/serviceusage/`, `/compute/`, `/tpu/`;
//! AWS by its signature) or to the control endpoints under `/_sandbox/` (traffic,
//! faults, state, clock, capacity), and owns the one pipeline
//! every API request goes through ([`Call`], [`App::call`]: faults, authentication,
//! settling, persisting, lost responses, the traffic record), the clusters' API servers
//! included. It also keeps
//! the emulated clusters' Kubernetes API servers in step with the clouds: one listener
//! per cluster (see `server/kube.rs`), started and stopped as clusters come and go.

mod kube;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use axum::body::Body as HttpBody;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use crate::aws::{self, AwsResponse};
use crate::capacity::CapacitySpec;
use crate::faults::{FaultSpec, Faults, Injected};
use crate::gcp::error::{ApiError, Code};
use crate::gcp::operation::OpCtx;
use crate::gcp::{self, Api};
use crate::http::{parse_query, ApiRequest, ApiResponse, Body};
use crate::k8s::processes::Processes;
use crate::k8s::{controllers, ClusterState, SettleCtx};
use crate::persist::{self, World};
use crate::{Exchange, SandboxError, Timing};

/// An emulated cluster whose API server listens.
#[derive(Debug, Clone)]
pub(crate) struct RunningCluster {
    pub key: String,
    pub name: String,
    /// The kubeconfig context name its cloud's CLI would give it.
    pub context: String,
    pub port: u16,
    pub ca_cert_pem: String,
}

/// Uploads beyond this are refused; the sandbox keeps objects in memory.
const MAX_BODY: usize = 64 * 1024 * 1024;
/// S3 requests may carry more: objects over 8 MB arrive as multipart upload parts of
/// any size up to S3's 5 GiB, and this is far more than any test sends in one.
const MAX_S3_BODY: usize = 512 * 1024 * 1024;

/// The shared state of one running sandbox.
pub(crate) struct App {
    /// Handed to the Kubernetes listeners, which must not keep the sandbox alive.
    me: Weak<App>,
    world: Mutex<Stored>,
    pub faults: Faults,
    traffic: Mutex<Vec<Exchange>>,
    timing: Timing,
    state_file: Option<PathBuf>,
    /// Moves the sandbox clock ahead of the wall clock (see `Sandbox::advance_clock`).
    clock_offset_ms: AtomicI64,
    /// Where volumes and process data live (see [`DataDir`]).
    data_dir: DataDir,
    pub processes: Processes,
    /// The running Kubernetes API servers, by cluster key; runtime only, never persisted.
    listeners: Mutex<BTreeMap<String, kube::Listener>>,
    /// The EKS clusters whose ACTIVE ACK capability this process has installed the CRDs
    /// for (when it became ACTIVE, or was first seen after a restart), so a CRD a client
    /// deletes stays deleted while the capability lasts.
    ack_applied: Mutex<BTreeSet<String>>,
}

/// The sandbox's data directory: `<state file>.data/`, or a fresh temporary directory
/// that is removed when the sandbox stops.
#[derive(Debug)]
pub(crate) struct DataDir {
    pub path: PathBuf,
    pub temporary: bool,
}

impl DataDir {
    /// Creates the data directory for a sandbox with (or without) a state file.
    pub(crate) fn create(state_file: Option<&Path>) -> Result<DataDir, SandboxError> {
        let (path, temporary) = match state_file {
            Some(file) => (persist::data_dir(file), false),
            None => (
                std::env::temp_dir().join(format!(
                    "terrain-sandbox-{}-{}",
                    std::process::id(),
                    crate::common::ids::random_hex(12)
                )),
                true,
            ),
        };
        std::fs::create_dir_all(&path).map_err(|source| SandboxError::DataDir {
            path: path.clone(),
            source,
        })?;
        Ok(DataDir { path, temporary })
    }
}

impl Drop for App {
    fn drop(&mut self) {
        self.stop();
    }
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
        data_dir: DataDir,
    ) -> Arc<App> {
        Arc::new_cyclic(|me| App {
            me: me.clone(),
            world: Mutex::new(Stored { world, saved }),
            faults: Faults::default(),
            traffic: Mutex::new(Vec::new()),
            timing,
            state_file,
            clock_offset_ms: AtomicI64::new(0),
            processes: Processes::new(data_dir.path.clone()),
            data_dir,
            listeners: Mutex::new(BTreeMap::new()),
            ack_applied: Mutex::new(BTreeSet::new()),
        })
    }

    fn settle_ctx(&self, now: DateTime<Utc>) -> SettleCtx<'_> {
        SettleCtx {
            now,
            scale: self.timing.scale,
            processes: &self.processes,
            data_dir: &self.data_dir.path,
            spot_reclaims: self.faults.reclaims(),
        }
    }

    /// Makes the Kubernetes side match the clouds: every GKE cluster gets its API server
    /// state and a running listener, its endpoint points there, and clusters that are
    /// gone are torn down. An EKS cluster whose ACK capability became ACTIVE gets the
    /// ACK SageMaker CRDs it lacks. Listeners start only
    /// inside a tokio runtime.
    fn reconcile(&self, world: &mut World) {
        let now = self.now();
        let access = std::sync::Arc::new(gcp::identity::Access::of(&world.gcp));
        let clusters = gcp::kube::gke_clusters(world.gcp.container.kube_clusters(), access);
        let mut removed = world.kubernetes.reconcile("gke/", clusters, now);
        removed.extend(
            world
                .kubernetes
                .reconcile("eks/", world.aws.eks.kube_clusters(), now),
        );
        let ctx = self.settle_ctx(now);
        {
            // An ACK capability installs the CRDs once it is ACTIVE (again after a
            // restart, or after it was deleted and made anew), as EKS does.
            let mut applied = lock(&self.ack_applied);
            let capabilities = &world.aws.eks.capabilities;
            applied.retain(|key| {
                world.kubernetes.clusters.contains_key(key) && capabilities.ack_role(key).is_some()
            });
            for (key, cluster) in world.kubernetes.clusters.iter_mut() {
                if capabilities.ack_role(key).is_some() && applied.insert(key.clone()) {
                    aws::ack::install_crds(cluster, &ctx);
                }
            }
        }
        let mut listeners = lock(&self.listeners);
        for (key, cluster) in removed {
            listeners.remove(&key);
            controllers::teardown(&cluster, &ctx);
        }
        if tokio::runtime::Handle::try_current().is_ok() {
            for (key, cluster) in world.kubernetes.clusters.iter_mut() {
                if listeners.contains_key(key) {
                    continue;
                }
                // A listener that cannot start is retried on the next request; until then
                // the cluster has no endpoint, which is what clients see.
                if let Ok(listener) = kube::start(
                    self.me.clone(),
                    key,
                    &cluster.name,
                    cluster.cloud.clone(),
                    cluster.port,
                    &cluster.ca_cert_pem,
                    &cluster.ca_key_pem,
                ) {
                    cluster.port = listener.port;
                    listeners.insert(key.clone(), listener);
                }
            }
        }
        for (key, cluster) in &world.kubernetes.clusters {
            if !listeners.contains_key(key) {
                continue;
            }
            // GKE reports a bare address, EKS a URL.
            if key.starts_with("eks/") {
                world
                    .aws
                    .eks
                    .set_endpoint(key, &format!("https://127.0.0.1:{}", cluster.port));
            } else {
                world
                    .gcp
                    .container
                    .set_endpoint(key, &format!("127.0.0.1:{}", cluster.port));
            }
        }
    }

    /// Settles the clouds and every cluster, and persists: what `Sandbox::start` and
    /// `/_sandbox/state` do.
    pub(crate) fn settle_everything(&self) -> Result<(), String> {
        let now = self.now();
        let mut stored = lock(&self.world);
        stored.world.gcp.settle(now);
        stored.world.aws.settle(now);
        self.reconcile(&mut stored.world);
        let ctx = self.settle_ctx(now);
        let World {
            kubernetes, aws, ..
        } = &mut stored.world;
        for (key, cluster) in kubernetes.clusters.iter_mut() {
            controllers::settle(cluster, &ctx);
            run_ack(key, cluster, aws, &ctx, &self.faults);
        }
        self.persist(&mut stored)
    }

    /// Runs `f` on one cluster under the state lock, after settling the clouds and the
    /// cluster, then persists. `None` when the cluster is gone; `Some(Err)` when the
    /// state could not be saved.
    pub(crate) fn with_cluster<R>(
        &self,
        key: &str,
        f: impl FnOnce(&mut ClusterState, &SettleCtx) -> R,
    ) -> Option<Result<R, String>> {
        let now = self.now();
        let mut stored = lock(&self.world);
        stored.world.gcp.settle(now);
        stored.world.aws.settle(now);
        let result = self.on_cluster(&mut stored.world, key, now, f);
        let saved = self.persist(&mut stored);
        result.map(|r| saved.map(|()| r))
    }

    /// Runs `f` on the first cluster named `name`, as [`App::with_cluster`] does.
    pub(crate) fn with_cluster_named<R>(
        &self,
        name: &str,
        f: impl FnOnce(&mut ClusterState, &SettleCtx) -> R,
    ) -> Option<Result<R, String>> {
        let key = lock(&self.world)
            .world
            .kubernetes
            .clusters
            .iter()
            .find(|(_, c)| c.name == name)
            .map(|(k, _)| k.clone())?;
        self.with_cluster(&key, f)
    }

    /// `(key, cluster name, port, CA PEM)` of every cluster with a running API server.
    pub(crate) fn running_clusters(&self) -> Vec<RunningCluster> {
        let stored = lock(&self.world);
        let listeners = lock(&self.listeners);
        stored
            .world
            .kubernetes
            .clusters
            .iter()
            .filter(|(k, _)| listeners.contains_key(*k))
            .map(|(k, c)| RunningCluster {
                context: c.cloud.context_name(k, &c.name),
                key: k.clone(),
                name: c.name.clone(),
                port: c.port,
                ca_cert_pem: c.ca_cert_pem.clone(),
            })
            .collect()
    }

    /// Everything the sandbox holds once finished operations are settled, one line each
    /// (see `Sandbox::inventory`), sorted.
    pub(crate) fn inventory(&self) -> Vec<String> {
        // A state file that cannot be written is reported by the next API request; the
        // inventory describes what the sandbox holds either way.
        let _ = self.settle_everything();
        let stored = lock(&self.world);
        let mut out = Vec::new();
        stored.world.gcp.inventory(&mut out);
        stored.world.aws.inventory(&mut out);
        for key in lock(&self.listeners).keys() {
            out.push(format!("kubernetes api server {key}"));
        }
        out.sort();
        out
    }

    /// Adds an exchange to the traffic log.
    pub(crate) fn record(&self, exchange: Exchange) {
        lock(&self.traffic).push(exchange);
    }

    /// Closes every Kubernetes listener and waits until their ports are free, so a
    /// sandbox started next can take them over.
    pub(crate) async fn close_listeners(&self) {
        let listeners = std::mem::take(&mut *lock(&self.listeners));
        for (_, listener) in listeners {
            listener.close().await;
        }
    }

    /// Stops the Kubernetes listeners and the processes behind pods, and removes a
    /// temporary data directory; safe to call more than once.
    pub(crate) fn stop(&self) {
        lock(&self.listeners).clear();
        self.processes.stop_all();
        if self.data_dir.temporary {
            // Best effort: a leftover temporary directory is harmless.
            let _ = std::fs::remove_dir_all(&self.data_dir.path);
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
    /// Serves one call through the pipeline every emulated API shares, in this order:
    /// an injected fault answers before anything happens (so a retry is always safe);
    /// the call's own authentication; the call under the world lock, after settling
    /// what came due, followed by reconciling the clusters with the clouds and saving
    /// the state; for a call that may change something, maybe a lost response (the
    /// effect happened, the answer never arrived); and the exchange recorded.
    pub(crate) fn call<C: Call>(&self, call: &C) -> C::Response {
        let (response, injected) = self.pass(call);
        lock(&self.traffic).push(call.exchange(&response, injected));
        response
    }

    /// [`App::call`] without the record, for a caller that records once it knows how the
    /// exchange ended (a stream upgrade can still be refused); also whether a fault made
    /// the response.
    pub(crate) fn pass<C: Call>(&self, call: &C) -> (C::Response, bool) {
        if let Some(injected) = self.faults.before_request() {
            return (call.injected(injected), true);
        }
        if let Some(refusal) = call.authenticate() {
            return (refusal, false);
        }
        let now = self.now();
        let response = {
            let mut stored = lock(&self.world);
            stored.world.gcp.settle(now);
            stored.world.aws.settle(now);
            let response = call.run(self, &mut stored.world, now);
            self.reconcile(&mut stored.world);
            match self.persist(&mut stored) {
                Ok(()) => response,
                Err(message) => call.unsaved(message),
            }
        };
        if call.may_lose_response() && self.faults.lose_response() {
            let lost = Injected {
                status: 503,
                retry_after: None,
            };
            return (call.injected(lost), true);
        }
        (response, false)
    }

    /// Serves one Google Cloud request and records it.
    pub(crate) fn serve(
        &self,
        api: Api,
        req: &ApiRequest,
        authorization: Option<&str>,
    ) -> ApiResponse {
        self.call(&GcpCall {
            api,
            req,
            authorization,
        })
    }

    /// Serves one Cloud Storage request with its headers and records it.
    pub(crate) fn serve_storage(
        &self,
        req: &ApiRequest,
        headers: &[(String, String)],
        authorization: Option<&str>,
    ) -> gcp::storage::Answer {
        self.call(&StorageCall {
            gcp: GcpCall {
                api: Api::Storage,
                req,
                authorization,
            },
            headers,
        })
    }

    /// Serves one AWS request and records it.
    pub(crate) fn serve_aws(&self, service: aws::Service, req: &aws::AwsRequest) -> AwsResponse {
        self.call(&AwsCall { service, req })
    }

    /// Runs `f` on the cluster `key` of `world`, after reconciling the clusters with the
    /// clouds and settling the cluster, with the ACK controller's passes around it.
    /// `None` when there is no such cluster.
    pub(crate) fn on_cluster<R>(
        &self,
        world: &mut World,
        key: &str,
        now: DateTime<Utc>,
        f: impl FnOnce(&mut ClusterState, &SettleCtx) -> R,
    ) -> Option<R> {
        self.reconcile(world);
        let ctx = self.settle_ctx(now);
        let World {
            kubernetes, aws, ..
        } = world;
        kubernetes.clusters.get_mut(key).map(|cluster| {
            controllers::settle(cluster, &ctx);
            run_ack(key, cluster, aws, &ctx, &self.faults);
            let result = f(cluster, &ctx);
            // What the request changed (a new Pipeline) is picked up at once, as the
            // controller's watch would.
            run_ack(key, cluster, aws, &ctx, &self.faults);
            result
        })
    }

    /// The capacity the clouds are configured with.
    pub(crate) fn capacity(&self) -> CapacitySpec {
        let stored = lock(&self.world);
        CapacitySpec {
            gcp: stored.world.gcp.capacity.clone(),
            aws: stored.world.aws.capacity.clone(),
        }
    }

    /// Replaces the clouds' capacity and saves it with the state.
    pub(crate) fn set_capacity(&self, spec: CapacitySpec) -> Result<(), String> {
        let mut stored = lock(&self.world);
        stored.world.gcp.capacity = spec.gcp;
        stored.world.aws.capacity = spec.aws;
        self.persist(&mut stored)
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
                if let Err(message) = self.settle_everything() {
                    return (
                        StatusCode::INTERNAL_SERVER_ERROR,
                        Some(json!({"error": message})),
                    );
                }
                let stored = lock(&self.world);
                (StatusCode::OK, serde_json::to_value(&stored.world).ok())
            }
            ("GET", "capacity") => (StatusCode::OK, serde_json::to_value(self.capacity()).ok()),
            // POST replaces the whole capacity (what it leaves out goes back to the
            // defaults); DELETE resets it.
            ("POST" | "DELETE", "capacity") => {
                let spec = if method == Method::DELETE {
                    Ok(CapacitySpec::default())
                } else {
                    serde_json::from_slice::<Value>(body)
                        .map_err(|e| format!("invalid capacity description: {e}"))
                        .and_then(|v| CapacitySpec::from_json(v, &crate::quota_names()))
                };
                match spec {
                    Ok(spec) => match self.set_capacity(spec) {
                        Ok(()) => (StatusCode::OK, serde_json::to_value(self.capacity()).ok()),
                        Err(message) => (
                            StatusCode::INTERNAL_SERVER_ERROR,
                            Some(json!({"error": message})),
                        ),
                    },
                    Err(message) => (StatusCode::BAD_REQUEST, Some(json!({"error": message}))),
                }
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

/// One request to an emulated API, as the shared pipeline ([`App::call`]) sees it: each
/// API answers faults and refusals in its own error format and records its own exchange.
pub(crate) trait Call {
    type Response;
    /// The answer an injected fault gives.
    fn injected(&self, injected: Injected) -> Self::Response;
    /// The API's own authentication: the refusal when the credentials do not pass.
    fn authenticate(&self) -> Option<Self::Response>;
    /// The call itself, under the world lock.
    fn run(&self, app: &App, world: &mut World, now: DateTime<Utc>) -> Self::Response;
    /// The answer when the state could not be saved after the call.
    fn unsaved(&self, message: String) -> Self::Response;
    /// Whether the response may be lost after the effect (a call that changes something).
    fn may_lose_response(&self) -> bool;
    /// What the traffic log keeps of the call.
    fn exchange(&self, response: &Self::Response, injected: bool) -> Exchange;
}

/// A Google Cloud request.
struct GcpCall<'a> {
    api: Api,
    req: &'a ApiRequest,
    authorization: Option<&'a str>,
}

impl Call for GcpCall<'_> {
    type Response = ApiResponse;

    fn injected(&self, injected: Injected) -> ApiResponse {
        injected_response(self.api, injected)
    }

    fn authenticate(&self) -> Option<ApiResponse> {
        (!bearer_token_present(self.authorization)).then(|| {
            ApiError::new(
                Code::Unauthenticated,
                "Request is missing required authentication credential. Expected OAuth 2 access token, login cookie or other valid authentication credential.",
            )
            .response(self.api)
        })
    }

    fn run(&self, app: &App, world: &mut World, now: DateTime<Utc>) -> ApiResponse {
        let ctx = OpCtx {
            now,
            scale: app.timing.scale,
            faults: &app.faults,
        };
        world.gcp.handle(self.api, self.req, &ctx)
    }

    fn unsaved(&self, message: String) -> ApiResponse {
        ApiError::internal(message).response(self.api)
    }

    fn may_lose_response(&self) -> bool {
        self.req.is_mutating()
    }

    fn exchange(&self, response: &ApiResponse, injected: bool) -> Exchange {
        Exchange {
            api: self.api.name().to_string(),
            method: self.req.method.to_string(),
            path: self.req.path.clone(),
            query: self
                .req
                .query
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join("&"),
            request: self.req.json(),
            status: response.status,
            response: response.json_body().cloned(),
            injected,
        }
    }
}

/// A Cloud Storage request: a Google call whose headers matter both ways (upload
/// sessions, byte ranges, download hashes); everything but the call itself is the
/// Google pipeline's.
struct StorageCall<'a> {
    gcp: GcpCall<'a>,
    headers: &'a [(String, String)],
}

impl Call for StorageCall<'_> {
    type Response = gcp::storage::Answer;

    fn injected(&self, injected: Injected) -> Self::Response {
        self.gcp.injected(injected).into()
    }

    fn authenticate(&self) -> Option<Self::Response> {
        self.gcp.authenticate().map(Into::into)
    }

    fn run(&self, app: &App, world: &mut World, now: DateTime<Utc>) -> Self::Response {
        let ctx = OpCtx {
            now,
            scale: app.timing.scale,
            faults: &app.faults,
        };
        let gcp = &mut world.gcp;
        let iam = &gcp.iam;
        gcp.storage
            .serve(self.gcp.req, self.headers, &ctx, &|email| iam.exists(email))
    }

    fn unsaved(&self, message: String) -> Self::Response {
        self.gcp.unsaved(message).into()
    }

    fn may_lose_response(&self) -> bool {
        self.gcp.may_lose_response()
    }

    fn exchange(&self, response: &Self::Response, injected: bool) -> Exchange {
        self.gcp.exchange(&response.response, injected)
    }
}

/// An AWS request (SigV4-signed for one service).
struct AwsCall<'a> {
    service: aws::Service,
    req: &'a aws::AwsRequest,
}

impl Call for AwsCall<'_> {
    type Response = AwsResponse;

    fn injected(&self, injected: Injected) -> AwsResponse {
        aws::injected(
            self.service,
            self.req,
            injected.status,
            injected.retry_after,
        )
    }

    fn authenticate(&self) -> Option<AwsResponse> {
        // The signature's presence routed the request here; the sandbox accepts its
        // own access key and any other, as moto does.
        None
    }

    fn run(&self, app: &App, world: &mut World, now: DateTime<Utc>) -> AwsResponse {
        let ctx = aws::AwsCtx {
            now,
            scale: app.timing.scale,
            faults: &app.faults,
        };
        world.aws.handle(self.service, self.req, &ctx)
    }

    fn unsaved(&self, message: String) -> AwsResponse {
        aws::AwsError::new(500, "InternalError", message).response(self.service, self.req)
    }

    fn may_lose_response(&self) -> bool {
        self.req.method != Method::GET && self.req.method != Method::HEAD
    }

    fn exchange(&self, response: &AwsResponse, injected: bool) -> Exchange {
        let json_of = |body: &[u8]| serde_json::from_slice::<Value>(body).ok();
        Exchange {
            api: self.service.name().to_string(),
            method: self.req.method.to_string(),
            path: self.req.path.trim_start_matches('/').to_string(),
            query: self
                .req
                .query
                .iter()
                .map(|(k, v)| {
                    if v.is_empty() {
                        k.clone()
                    } else {
                        format!("{k}={v}")
                    }
                })
                .collect::<Vec<_>>()
                .join("&"),
            request: json_of(&self.req.body),
            status: response.status,
            response: json_of(&response.body),
            injected,
        }
    }
}

pub(crate) fn bearer_token_present(authorization: Option<&str>) -> bool {
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
        Code::PermissionDenied => "The caller does not have permission".to_string(),
        _ => "The service is currently unavailable.".to_string(),
    };
    let mut response = ApiError::new(code, message)
        .with_status(injected.status)
        .response(api);
    response.retry_after = injected.retry_after;
    response
}

pub(crate) fn router(app: Arc<App>) -> Router {
    Router::new()
        .route(INVENTORY_PATH, axum::routing::get(inventory))
        .fallback(handle)
        .with_state(app)
}

/// Where the sandbox lists what it holds (a JSON array of strings), for
/// `terrain sandbox list` against a served sandbox. No cloud API has this path.
pub(crate) const INVENTORY_PATH: &str = "/_sandbox/inventory";

async fn inventory(State(app): State<Arc<App>>) -> Response {
    axum::Json(app.inventory()).into_response()
}

async fn handle(State(app): State<Arc<App>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let header_str = |name: header::HeaderName| {
        parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    // AWS clients sign with SigV4; the signature's scope names the service.
    let raw_query = parts.uri.query().unwrap_or("");
    let signature = aws::signature(header_str(header::AUTHORIZATION).as_deref(), raw_query);
    let s3 = signature.as_ref().is_some_and(|s| s.service == "s3");
    let limit = if s3 { MAX_S3_BODY } else { MAX_BODY };
    let bytes = match read_body(&parts.headers, body, limit).await {
        Ok(b) => b,
        Err(BodyError::TooLarge(declared)) if s3 => {
            return entity_too_large(&parts.method, declared, limit)
        }
        Err(e) => {
            return (
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("could not read the request body: {e}"),
            )
                .into_response()
        }
    };
    if let Some(signature) = signature {
        let Some(service) = aws::Service::from_signing_name(&signature.service) else {
            return (
                StatusCode::NOT_FOUND,
                format!(
                    "the sandbox does not emulate the AWS service {:?}; it serves eks, s3, sagemaker, ec2, servicequotas, iam, sts and kms",
                    signature.service
                ),
            )
                .into_response();
        };
        let req = aws::AwsRequest {
            method: parts.method.clone(),
            path: parts.uri.path().to_string(),
            query: parse_query(raw_query),
            headers: parts
                .headers
                .iter()
                .filter_map(|(k, v)| {
                    v.to_str()
                        .ok()
                        .map(|v| (k.as_str().to_string(), v.to_string()))
                })
                .collect(),
            body: bytes,
            region: signature.region,
        };
        return aws_to_http(app.serve_aws(service, &req));
    }
    let path = parts.uri.path().trim_start_matches('/');
    let (root, rest) = path.split_once('/').unwrap_or((path, ""));
    if root == "_sandbox" {
        let (status, value) = app.control(&parts.method, rest, &bytes);
        return json_response(status, value);
    }
    // Cloud Storage's media endpoints (`/upload/…`, `/resumable/upload/…`,
    // `/download/…`) sit at the host's root, where clients put them whatever their
    // endpoint override says; the storage emulator routes them by their full path.
    let (root, rest) = if gcp::storage::is_media_root(root) {
        (Api::Storage.name(), path)
    } else {
        (root, rest)
    };
    let Some(api) = Api::from_name(root) else {
        return (
            StatusCode::NOT_FOUND,
            format!("no API at /{root}/: the sandbox serves /container/, /file/, /storage/, /serviceusage/, /iam/, /cloudresourcemanager/, /compute/ and /tpu/, and AWS requests signed for eks, s3, sagemaker, ec2, servicequotas, iam, sts or kms at /"),
        )
            .into_response();
    };
    let req = ApiRequest {
        method: parts.method.clone(),
        path: rest.to_string(),
        query: parse_query(parts.uri.query().unwrap_or("")),
        content_type: header_str(header::CONTENT_TYPE),
        body: bytes,
    };
    let authorization = header_str(header::AUTHORIZATION);
    // Synchronous on purpose: the state lock is a std mutex that is never held across an
    // await, and the state file is small enough to write inline.
    if api == Api::Storage {
        // Storage reads headers (ranges, upload sessions) and answers with some.
        let mut headers: Vec<(String, String)> = parts
            .headers
            .iter()
            .filter_map(|(k, v)| Some((k.as_str().to_string(), v.to_str().ok()?.to_string())))
            .collect();
        if !parts.headers.contains_key(header::HOST) {
            if let Some(authority) = parts.uri.authority() {
                headers.push(("host".to_string(), authority.to_string()));
            }
        }
        let answer = app.serve_storage(&req, &headers, authorization.as_deref());
        let mut out = to_http(answer.response);
        for (name, value) in answer.headers {
            if let (Ok(name), Ok(value)) = (
                header::HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(&value),
            ) {
                out.headers_mut().append(name, value);
            }
        }
        return out;
    }
    let response = app.serve(api, &req, authorization.as_deref());
    to_http(response)
}

/// Why a request body was not read.
#[derive(Debug)]
enum BodyError {
    /// Longer than the limit; the length when the request declared it.
    TooLarge(Option<u64>),
    Read(axum::Error),
}

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BodyError::TooLarge(_) => write!(f, "length limit exceeded"),
            BodyError::Read(e) => write!(f, "{e}"),
        }
    }
}

/// Reads a request body of at most `limit` bytes. A declared `Content-Length` over the
/// limit is refused before anything is read, as S3 refuses it.
async fn read_body(
    headers: &HeaderMap,
    body: HttpBody,
    limit: usize,
) -> Result<Vec<u8>, BodyError> {
    use futures::StreamExt as _;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let too_large = |n: u64| usize::try_from(n).map_or(true, |n| n > limit);
    if declared.is_some_and(too_large) {
        return Err(BodyError::TooLarge(declared));
    }
    let mut out = Vec::new();
    let mut stream = body.into_data_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(BodyError::Read)?;
        if out.len() + chunk.len() > limit {
            return Err(BodyError::TooLarge(None));
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

/// S3's answer to a body over the limit: `EntityTooLarge` in its XML error format.
fn entity_too_large(method: &Method, declared: Option<u64>, limit: usize) -> Response {
    // Only the method shapes an error answer (HEAD has no body).
    let req = aws::AwsRequest {
        method: method.clone(),
        path: String::new(),
        query: Vec::new(),
        headers: Vec::new(),
        body: Vec::new(),
        region: String::new(),
    };
    let mut error = aws::AwsError::new(
        400,
        "EntityTooLarge",
        "Your proposed upload exceeds the maximum allowed size",
    );
    if let Some(size) = declared {
        error = error.with("ProposedSize", size.to_string());
    }
    let error = error.with("MaxSizeAllowed", limit.to_string());
    aws_to_http(error.response(aws::Service::S3, &req))
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

fn aws_to_http(response: AwsResponse) -> Response {
    let status = StatusCode::from_u16(response.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut out = (status, response.body).into_response();
    let headers = out.headers_mut();
    // Without a body the content type axum guessed for bytes must not stay.
    headers.remove(header::CONTENT_TYPE);
    for (name, value) in response.headers {
        if let (Ok(name), Ok(value)) = (
            header::HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(&value),
        ) {
            headers.append(name, value);
        }
    }
    out
}

/// Runs the ACK SageMaker controller on an EKS cluster where one runs: an ACTIVE ACK
/// capability's, acting as the capability's role, or a self-managed one (the chart's
/// Deployment running in the cluster), acting as its service account's pod identity.
/// Nothing reconciles the ACK objects of a cluster without either, as on a real cluster
/// with the CRDs but no controller.
fn run_ack(
    key: &str,
    cluster: &mut ClusterState,
    aws: &mut aws::AwsWorld,
    ctx: &SettleCtx,
    faults: &Faults,
) {
    let Some(region) = key.strip_prefix("eks/").and_then(|k| k.split('/').next()) else {
        return;
    };
    let who = if let Some(role_arn) = aws.eks.capabilities.ack_role(key) {
        aws::ack::Controller::acting_as(&aws.iam, role_arn)
    } else if let Some((namespace, account)) = aws::ack::self_managed(cluster) {
        match aws.eks.pod_identity.role_of(key, &namespace, &account) {
            Some(role_arn) => aws::ack::Controller::acting_as(&aws.iam, role_arn),
            None => aws::ack::Controller::without_credentials(&namespace, &account),
        }
    } else {
        return;
    };
    aws::ack::settle(
        cluster,
        &mut aws.sagemaker,
        &aws.iam,
        &who,
        region,
        ctx.now,
        ctx.scale,
        faults,
    );
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

    /// An app whose projects have every Google API on.
    fn app() -> Arc<App> {
        let mut world = World::new();
        let apis: Vec<String> = crate::GOOGLE_APIS.iter().map(|a| a.to_string()).collect();
        world.gcp.serviceusage.set_baseline(&apis);
        App::new(
            world,
            String::new(),
            Timing::instant(),
            None,
            DataDir::create(None).expect("data dir"),
        )
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

    #[test]
    fn capacity_is_set_read_back_and_reset_at_the_control_endpoint() {
        let app = app();
        let body = br#"{"gcp": {"quotas": [{"project": "p", "region": "us-central1", "metric": "NVIDIA_T4_GPUS", "limit": 0}],
                                "stockouts": [{"zone": "us-central1-a", "machineType": "n1-standard-8"}]},
                        "aws": {"quotas": [{"region": "us-east-1", "code": "L-DB2E81BA", "value": 0}],
                                "stockouts": [{"zone": "us-east-1a", "instanceType": "g5.xlarge"}]}}"#;
        let (status, set) = app.control(&Method::POST, "capacity", body);
        assert_eq!(status, StatusCode::OK);
        let set = set.unwrap_or_default();
        assert_eq!(set["gcp"]["stockouts"][0]["machineType"], "n1-standard-8");
        assert_eq!(set["aws"]["quotas"][0]["value"], 0.0);
        assert_eq!(app.control(&Method::GET, "capacity", b"").1, Some(set));
        let (_, state) = app.control(&Method::GET, "state", b"");
        let state = state.unwrap_or_default();
        assert_eq!(
            state["gcp"]["capacity"]["quotas"][0]["metric"], "NVIDIA_T4_GPUS",
            "kept with the state"
        );
        assert_eq!(
            state["aws"]["capacity"]["stockouts"][0]["zone"],
            "us-east-1a"
        );
        let region = ApiRequest::new(
            Method::GET,
            "compute/v1/projects/p/regions/us-central1",
            None,
        );
        let answer = app.serve(Api::Compute, &region, Some("Bearer t"));
        assert_eq!(answer.status, 200);
        let t4 = answer
            .json_body()
            .and_then(|r| r["quotas"].as_array().cloned())
            .unwrap_or_default()
            .into_iter()
            .find(|q| q["metric"] == "NVIDIA_T4_GPUS");
        assert_eq!(t4.map(|q| q["limit"].clone()), Some(json!(0.0)));
        let (status, err) = app.control(
            &Method::POST,
            "capacity",
            br#"{"gcp": {"quotas": [{"metric": "T4", "limit": 1}]}}"#,
        );
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(err.is_some_and(|e| e["error"]
            .as_str()
            .is_some_and(|m| m.contains("NVIDIA_T4_GPUS"))));
        let (status, reset) = app.control(&Method::DELETE, "capacity", b"");
        assert_eq!(status, StatusCode::OK);
        assert_eq!(
            reset,
            Some(
                json!({"gcp": {"quotas": [], "stockouts": []}, "aws": {"quotas": [], "stockouts": [], "subnets": {}, "roles": {}}})
            )
        );
    }

    #[test]
    fn gke_clusters_get_a_kubernetes_api_and_lose_it_with_the_cluster() {
        let app = app();
        let root = "v1/projects/p/locations/us-central1/clusters";
        let create = ApiRequest::new(
            Method::POST,
            root,
            Some(json!({"cluster": {"name": "k", "initialNodeCount": 2}})),
        );
        assert_eq!(
            app.serve(Api::Container, &create, Some("Bearer t")).status,
            200
        );
        let key = "gke/projects/p/locations/us-central1/clusters/k";
        let (status, state) = app.control(&Method::GET, "state", b"");
        assert_eq!(status, StatusCode::OK);
        let cluster = state
            .as_ref()
            .map(|s| s["kubernetes"]["clusters"][key].clone())
            .unwrap_or_default();
        assert_eq!(cluster["name"], "k");
        assert_eq!(cluster["cloud"], "GKE Standard");
        assert_eq!(
            cluster["nodePools"][0]["nodeCount"], 6,
            "two nodes in each of three zones"
        );
        let delete = ApiRequest::new(Method::DELETE, &format!("{root}/k"), None);
        assert_eq!(
            app.serve(Api::Container, &delete, Some("Bearer t")).status,
            200
        );
        let (_, state) = app.control(&Method::GET, "state", b"");
        assert_eq!(
            state.map(|s| s["kubernetes"]["clusters"].clone()),
            Some(json!({})),
            "the cluster's API server state goes with it"
        );
    }

    #[tokio::test]
    async fn clusters_get_a_listener_inside_a_runtime() {
        let app = app();
        let create = ApiRequest::new(
            Method::POST,
            "v1/projects/p/locations/us-central1/clusters",
            Some(json!({"cluster": {"name": "k", "initialNodeCount": 1}})),
        );
        app.serve(Api::Container, &create, Some("Bearer t"));
        let running = app.running_clusters();
        assert_eq!(running.len(), 1, "a listener runs inside a runtime");
        let cluster = &running[0];
        assert_eq!(cluster.name, "k");
        assert_eq!(cluster.context, "gke_p_us-central1_k");
        assert_ne!(cluster.port, 0);
        let list = app.with_cluster(&cluster.key, |cluster, _| {
            cluster.store.list("", "namespaces", None).len()
        });
        assert_eq!(list, Some(Ok(4)));
        assert!(app.with_cluster("gke/nope", |_, _| ()).is_none());
        app.close_listeners().await;
        assert!(app.running_clusters().is_empty());
    }
}
