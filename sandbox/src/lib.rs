//! terrain-sandbox: a local emulator of the cloud APIs terrain's providers call, for tests
//! and for running the official CLIs against (e.g. `gcloud` with endpoint overrides, or
//! `kubectl` with a kubeconfig from [`Sandbox::kubeconfig`]).
//! This file owns the public surface — starting and stopping a sandbox, its options and
//! timing, the traffic log, the capacity (quotas, stockouts) — while `gcp/` holds the
//! Google emulators (GKE, Filestore, Cloud Storage, Compute Engine and Cloud TPU
//! capacity), `aws/` the AWS ones, `k8s/` one Kubernetes API server per emulated cluster,
//! `server/` the HTTP wiring (`server/kube.rs` the clusters' API servers), `faults.rs`
//! fault injection and `capacity.rs` the capacity configuration (each cloud registers
//! its quota names, `quota_names`). Layers point one way: `common/`, `http.rs`,
//! `faults.rs` and `capacity.rs` at the bottom, `k8s/` above them, `gcp/` and `aws/`
//! above that, `persist.rs` and `server/` on top (`tests/suite/layout.rs` holds it).
//!
//! ```no_run
//! # async fn demo() -> Result<(), terrain_sandbox::SandboxError> {
//! use terrain_sandbox::{Options, Sandbox, Timing};
//! let sandbox = Sandbox::start(Options { timing: Timing::instant(), ..Options::default() }).await?;
//! let endpoints = sandbox.gcp_endpoints(); // point a GKE client at endpoints.container
//! sandbox.faults().burst(429, 2, 1);       // the next two requests are throttled
//! # sandbox.shutdown().await; Ok(()) }
//! ```

mod aws;
mod capacity;
mod common;
mod faults;
pub mod gcp;
mod http;
mod k8s;
mod persist;
mod server;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub use faults::{Burst, ErrorRateSpec, FaultSpec, Faults, OperationFailure};

/// How a sandbox starts.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Durations of long-running operations.
    pub timing: Timing,
    /// Loaded at start (a missing file is an empty sandbox) and rewritten atomically after
    /// every change, so state survives across processes such as CLI runs. Volumes and
    /// process data live in `<state_file>.data/` (without a state file, in a temporary
    /// directory removed when the sandbox stops).
    pub state_file: Option<PathBuf>,
    /// The port to listen on when it is free (a sandbox reopened from a state file keeps
    /// its address, so URLs recorded by clients stay valid); otherwise any free port.
    pub port: Option<u16>,
    /// Google APIs (`container.googleapis.com`) on in every project from the start, as
    /// if its owner had enabled them; otherwise a project starts as a new one does, with
    /// only Cloud Storage and Service Usage on. Replaces what a state file kept.
    pub enabled_apis: Option<Vec<String>>,
}

impl Options {
    /// Options whose projects have every Google API terrain calls on ([`GOOGLE_APIS`]),
    /// as a project set up by hand has: for work that is not about enabling APIs.
    pub fn google_apis_on() -> Options {
        Options {
            enabled_apis: Some(GOOGLE_APIS.iter().map(|a| a.to_string()).collect()),
            ..Options::default()
        }
    }
}

/// The Google APIs the sandbox emulates beyond a new project's: what a project whose
/// owner enabled everything terrain calls has on.
pub const GOOGLE_APIS: [&str; 6] = [
    "container.googleapis.com",
    "file.googleapis.com",
    "compute.googleapis.com",
    "tpu.googleapis.com",
    "iam.googleapis.com",
    "cloudresourcemanager.googleapis.com",
];

/// Durations of long-running operations: every base duration (cluster create ~6 s, node
/// pool ~3 s, Filestore ~4 s, deletes ~2 s) is multiplied by `scale`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Timing {
    pub scale: f64,
}

impl Default for Timing {
    /// Realistic but short: the base durations as they are.
    fn default() -> Self {
        Timing { scale: 1.0 }
    }
}

impl Timing {
    /// Every operation completes on the next poll.
    pub fn instant() -> Self {
        Timing { scale: 0.0 }
    }

    /// The base durations multiplied by `scale`.
    pub fn scaled(scale: f64) -> Self {
        Timing {
            scale: scale.max(0.0),
        }
    }
}

/// Root URLs of the emulated Google APIs, each ending in `/`, to use as a client's root
/// URL (the part before `v1/…` or `storage/v1/…`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GcpEndpoints {
    pub container: String,
    pub file: String,
    pub storage: String,
    pub serviceusage: String,
    pub iam: String,
    pub cloudresourcemanager: String,
    /// Compute Engine's root: its paths are `compute/v1/…` under it, so gcloud's
    /// override is this plus `compute/v1/`.
    pub compute: String,
    pub tpu: String,
}

/// One API request and its response, as recorded in the traffic log.
#[derive(Clone, Debug, Serialize)]
pub struct Exchange {
    /// The Google API's root (`container`, `file`, `storage`, `serviceusage`, `iam`,
    /// `cloudresourcemanager`,
    /// `compute`, `tpu`), the AWS service's signing name (`eks`, `s3`, `sagemaker`,
    /// `ec2`, `servicequotas`, `iam`, `sts`, `kms`), or `kubernetes` for a cluster's API server.
    pub api: String,
    pub method: String,
    /// The path after the API root, e.g. `v1/projects/p/locations/l/clusters` or
    /// `storage/v1/b/x`, still percent-encoded. Kubernetes requests are prefixed with
    /// the cluster's name: `batch/api/v1/namespaces/default/pods`.
    pub path: String,
    /// The decoded query string, `k=v` pairs joined by `&`.
    pub query: String,
    /// The JSON request body, if there was one.
    pub request: Option<serde_json::Value>,
    pub status: u16,
    /// The JSON response body, if there was one.
    pub response: Option<serde_json::Value>,
    /// True when a fault produced the response.
    pub injected: bool,
}

/// Why a sandbox could not start.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("could not listen on 127.0.0.1")]
    Bind(#[source] std::io::Error),
    #[error("could not read the sandbox state file {path}")]
    ReadState {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the sandbox state file {path} is not valid JSON state")]
    ParseState {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error(
        "the sandbox state file {path} has format version {found}, this sandbox reads version 1"
    )]
    StateVersion { path: PathBuf, found: u32 },
    #[error("could not serialize the sandbox state")]
    SerializeState(#[source] serde_json::Error),
    /// The state file could not be written; the message names the file and why.
    #[error("{0}")]
    SaveState(String),
    #[error("could not create the sandbox data directory {path}")]
    DataDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The capacity description (`Sandbox::set_capacity`, `TERRAIN_SANDBOX_CAPACITY`)
    /// is not one; the message says why.
    #[error("{0}")]
    Capacity(String),
    #[error("could not write the kubeconfig {path}")]
    Kubeconfig {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// A running sandbox serving HTTP on 127.0.0.1; it stops on [`Sandbox::shutdown`] or
/// when dropped.
pub struct Sandbox {
    addr: SocketAddr,
    app: Arc<server::App>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandbox").field("addr", &self.addr).finish()
    }
}

impl Sandbox {
    /// Binds 127.0.0.1 on a free port and serves in a tokio task. Fails when the state
    /// file cannot be read or parsed, or no port can be bound.
    pub async fn start(opts: Options) -> Result<Sandbox, SandboxError> {
        let (mut world, saved) = match &opts.state_file {
            Some(path) => {
                let world = persist::load(path)?;
                // What the file holds (or would hold): it is written only once this changes.
                let saved = world.to_json().map_err(SandboxError::SerializeState)?;
                (world, saved)
            }
            None => (persist::World::new(), String::new()),
        };
        // `terrain sandbox serve` users configure capacity through the environment; it
        // replaces what the state file kept, and is saved with the state from then on.
        if let Some(spec) =
            capacity::CapacitySpec::from_env(&quota_names()).map_err(SandboxError::Capacity)?
        {
            world.gcp.capacity = spec.gcp;
            world.aws.capacity = spec.aws;
        }
        if let Some(apis) = &opts.enabled_apis {
            world.gcp.serviceusage.set_baseline(apis);
        }
        let data_dir = server::DataDir::create(opts.state_file.as_deref())?;
        let preferred = match opts.port {
            Some(port) if port != 0 => tokio::net::TcpListener::bind(("127.0.0.1", port))
                .await
                .ok(),
            _ => None,
        };
        let listener = match preferred {
            Some(listener) => listener,
            None => tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .map_err(SandboxError::Bind)?,
        };
        let addr = listener.local_addr().map_err(SandboxError::Bind)?;
        let app = server::App::new(world, saved, opts.timing, opts.state_file, data_dir);
        // Persisted clusters get their API servers back (on their old ports if free), and
        // those with an ACTIVE ACK capability its CRDs where they lack them.
        app.settle_everything().map_err(SandboxError::SaveState)?;
        let router = server::router(app.clone());
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let shutdown = async {
                let _ = stopped.await;
            };
            // The only error is the listener failing, after which there is nothing to
            // serve; clients then see connection errors, which is the honest signal.
            let _ = axum::serve(listener, router)
                .with_graceful_shutdown(shutdown)
                .await;
        });
        Ok(Sandbox {
            addr,
            app,
            stop: Some(stop),
            task: Some(task),
        })
    }

    /// The path, under [`Sandbox::url`], where a GET returns [`Sandbox::inventory`] as a
    /// JSON array of strings.
    pub const INVENTORY_PATH: &'static str = server::INVENTORY_PATH;

    /// The base URL, `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The port the sandbox listens on.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Everything the sandbox holds, one line each, sorted: `gke cluster p/l/name`,
    /// `gke node pool p/l/cluster/pool`, `filestore instance p/l/id`, `gcs bucket b`,
    /// `gcs object b/name`, `eks cluster region/name`, `eks node group
    /// region/cluster/name`, `s3 bucket b`, `s3 object b/key`, `sagemaker pipeline
    /// region/name`, `sagemaker execution region/pipeline/id`, `ec2 vpc|subnet|internet
    /// gateway|address|nat gateway|route table region/id` for what was made beyond each
    /// region's default VPC and the configured subnets, and `kubernetes api server
    /// <cluster key>` for every running API server. Operations that have finished by the
    /// sandbox clock are settled first, so a resource is listed until its delete
    /// completes (one still deleting counts as held). Noncurrent object versions are not
    /// listed; they belong to their bucket.
    pub fn inventory(&self) -> Vec<String> {
        self.app.inventory()
    }

    /// Root URLs of the Google APIs.
    pub fn gcp_endpoints(&self) -> GcpEndpoints {
        let url = self.url();
        GcpEndpoints {
            container: format!("{url}/container/"),
            file: format!("{url}/file/"),
            storage: format!("{url}/storage/"),
            serviceusage: format!("{url}/serviceusage/"),
            iam: format!("{url}/iam/"),
            cloudresourcemanager: format!("{url}/cloudresourcemanager/"),
            compute: format!("{url}/compute/"),
            tpu: format!("{url}/tpu/"),
        }
    }

    /// Replaces the emulated clouds' capacity — quotas, stockouts, subnet zones — with
    /// `spec`, in the JSON form `POST /_sandbox/capacity` takes:
    /// `{"gcp": {"quotas": [{"project", "region", "metric", "limit"}], "stockouts":
    /// [{"zone", "machineType", "acceleratorType"}]}, "aws": {"quotas": [{"account",
    /// "region", "code", "value"}], "stockouts": [{"zone", "instanceType",
    /// "capacityType"}], "subnets": {"subnet-…": "us-east-1a"}}}`. What is left out is
    /// the default; an unknown field, metric or quota code is an error.
    pub fn set_capacity(&self, spec: serde_json::Value) -> Result<(), SandboxError> {
        let spec = capacity::CapacitySpec::from_json(spec, &quota_names())
            .map_err(SandboxError::Capacity)?;
        self.app.set_capacity(spec).map_err(SandboxError::SaveState)
    }

    /// The capacity configured, in the JSON form [`Sandbox::set_capacity`] takes.
    pub fn capacity(&self) -> serde_json::Value {
        serde_json::to_value(self.app.capacity()).unwrap_or_default()
    }

    /// The fault switches of this sandbox.
    pub fn faults(&self) -> Faults {
        self.app.faults.clone()
    }

    /// Every API request and response so far, in order.
    pub fn traffic(&self) -> Vec<Exchange> {
        self.app.traffic()
    }

    /// Forgets the recorded traffic.
    pub fn clear_traffic(&self) {
        self.app.clear_traffic();
    }

    /// Moves the sandbox clock forward, so running operations finish without waiting.
    pub fn advance_clock(&self, by: std::time::Duration) {
        self.app.advance_clock(by);
    }

    /// Writes one kubeconfig per cluster with a running API server to
    /// The cloud CLI command that writes a kubeconfig entry for each running cluster,
    /// as it works against this sandbox (with the overrides `terrain sandbox serve`
    /// prints): `gcloud container clusters get-credentials …` for GKE, `aws eks
    /// update-kubeconfig …` for EKS. Cluster names and commands.
    pub fn credentials_commands(&self) -> Vec<(String, String)> {
        let url = self.url();
        self.app
            .running_clusters()
            .into_iter()
            .filter_map(|cluster| {
                let (key, name) = (cluster.key, cluster.name);
                let parts: Vec<&str> = key.split('/').collect();
                let command = match parts.as_slice() {
                    ["gke", "projects", project, "locations", location, "clusters", _] => format!(
                        "gcloud container clusters get-credentials {name} --location {location} --project {project}"
                    ),
                    ["eks", region, _] => format!(
                        "aws --endpoint-url {url} eks update-kubeconfig --name {name} --region {region}"
                    ),
                    _ => return None,
                };
                Some((name, command))
            })
            .collect()
    }

    /// `<dir>/<cluster name>.kubeconfig` (owner-only), each with a single context named
    /// like the cloud CLI names it (`gke_<project>_<location>_<name>`); returns the
    /// cluster names and files.
    pub fn kubeconfig(&self, dir: &Path) -> Result<Vec<(String, PathBuf)>, SandboxError> {
        std::fs::create_dir_all(dir).map_err(|source| SandboxError::Kubeconfig {
            path: dir.to_path_buf(),
            source,
        })?;
        let mut written = Vec::new();
        for cluster in self.app.running_clusters() {
            let (key, name, port, ca_pem) =
                (cluster.key, cluster.name, cluster.port, cluster.ca_cert_pem);
            let path = dir.join(format!("{name}.kubeconfig"));
            let token = match key.strip_prefix("eks/").and_then(|k| k.split('/').next()) {
                Some(region) => aws::sandbox_eks_token(region, &name),
                None => k8s::kubeconfig::TOKEN.to_string(),
            };
            let text = k8s::kubeconfig::render(
                &cluster.context,
                &format!("https://127.0.0.1:{port}"),
                &ca_pem,
                &token,
            )
            .map_err(|message| SandboxError::Kubeconfig {
                path: path.clone(),
                source: std::io::Error::other(message),
            })?;
            k8s::kubeconfig::write(&path, &text).map_err(|source| SandboxError::Kubeconfig {
                path: path.clone(),
                source,
            })?;
            written.push((name, path));
        }
        Ok(written)
    }

    /// The loopback address of the real redis-server behind a Redis pod of the cluster
    /// named `cluster_name` (to read a queue back with any Redis client); `None` when
    /// there is no such pod or its server is not up.
    pub fn redis_address(
        &self,
        cluster_name: &str,
        namespace: &str,
        pod: &str,
    ) -> Option<std::net::SocketAddr> {
        self.app
            .with_cluster_named(cluster_name, |cluster, ctx| {
                k8s::volumes::redis_of(cluster, ctx.processes, namespace, pod)
            })
            .and_then(Result::ok)
            .flatten()
    }

    /// Preempts a running pod of the cluster named `cluster_name` as a spot reclaim
    /// would; false when there is no such cluster or pod.
    pub fn preempt_pod(&self, cluster_name: &str, namespace: &str, pod: &str) -> bool {
        let now = self.app.now();
        matches!(
            self.app.with_cluster_named(cluster_name, |cluster, _| {
                k8s::controllers::preempt(cluster, namespace, pod, now)
            }),
            Some(Ok(true))
        )
    }

    /// Stops serving and waits (briefly) for open connections to finish.
    pub async fn shutdown(mut self) {
        self.app.close_listeners().await;
        self.app.stop();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let abort = task.abort_handle();
            if tokio::time::timeout(std::time::Duration::from_secs(5), task)
                .await
                .is_err()
            {
                // A client holding a connection open must not hang the caller's shutdown.
                abort.abort();
            }
        }
    }
}

/// Each cloud's quota names, which capacity descriptions are checked against: the
/// capacity layer names no cloud's quotas; the clouds register theirs here.
pub(crate) fn quota_names() -> capacity::Clouds {
    capacity::Clouds {
        gcp: gcp::compute::QUOTA_NAMES,
        aws: aws::servicequotas::QUOTA_NAMES,
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        self.app.stop();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}
