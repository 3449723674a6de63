//! The Google emulators over real HTTP, as a provider sees them: lifecycles of GKE
//! clusters and node pools, Filestore instances and GCS buckets, Google's error formats,
//! every fault mode, the control endpoints and state files that survive a restart.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use terrain_sandbox::gcp::discovery;
use terrain_sandbox::{Options, Sandbox, Timing};

const PROJECT: &str = "proj";

struct Client {
    http: reqwest::Client,
    sandbox: Sandbox,
}

struct Reply {
    status: StatusCode,
    body: Value,
    retry_after: Option<String>,
}

impl Client {
    async fn start(timing: Timing) -> Client {
        Self::with(Options {
            timing,
            ..Options::google_apis_on()
        })
        .await
    }

    async fn with(opts: Options) -> Client {
        Client {
            http: reqwest::Client::new(),
            sandbox: Sandbox::start(opts).await.expect("sandbox starts"),
        }
    }

    fn container(&self, path: &str) -> String {
        format!(
            "{}v1/projects/{PROJECT}/{path}",
            self.sandbox.gcp_endpoints().container
        )
    }

    fn file(&self, path: &str) -> String {
        format!(
            "{}v1/projects/{PROJECT}/{path}",
            self.sandbox.gcp_endpoints().file
        )
    }

    fn storage(&self, path: &str) -> String {
        format!("{}{path}", self.sandbox.gcp_endpoints().storage)
    }

    async fn send(
        &self,
        method: Method,
        url: &str,
        body: Option<Value>,
        token: Option<&str>,
    ) -> Reply {
        let mut req = self.http.request(method, url);
        if let Some(token) = token {
            req = req.bearer_auth(token);
        }
        if let Some(body) = body {
            req = req.json(&body);
        }
        let resp = req.send().await.expect("request reaches the sandbox");
        let status = resp.status();
        let retry_after = resp
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let text = resp.text().await.expect("response body");
        let body = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).expect("JSON response")
        };
        Reply {
            status,
            body,
            retry_after,
        }
    }

    async fn call(&self, method: Method, url: &str, body: Option<Value>) -> Reply {
        self.send(method, url, body, Some("test-token")).await
    }

    async fn ok(&self, method: Method, url: &str, body: Option<Value>) -> Value {
        let reply = self.call(method.clone(), url, body).await;
        assert_eq!(
            reply.status,
            StatusCode::OK,
            "{method} {url}: {}",
            reply.body
        );
        reply.body
    }

    /// Polls a GKE operation until DONE, as a provider does.
    async fn wait_container(&self, op: &Value) -> Value {
        let url = self.container(&format!(
            "locations/{}/operations/{}",
            op["location"].as_str().expect("location"),
            op["name"].as_str().expect("name")
        ));
        for _ in 0..100 {
            let now = self.ok(Method::GET, &url, None).await;
            assert_eq!(discovery::conforms("container", "Operation", &now), Ok(()));
            if now["status"] == "DONE" {
                return now;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("operation {op} never finished");
    }

    /// Polls a Filestore operation until done.
    async fn wait_file(&self, op: &Value) -> Value {
        let url = format!(
            "{}v1/{}",
            self.sandbox.gcp_endpoints().file,
            op["name"].as_str().expect("name")
        );
        for _ in 0..100 {
            let now = self.ok(Method::GET, &url, None).await;
            if now["done"] == true {
                return now;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("operation {op} never finished");
    }
}

fn gpu_cluster(name: &str) -> Value {
    json!({"cluster": {
        "name": name,
        "releaseChannel": {"channel": "RAPID"},
        "resourceLabels": {"env": "test"},
        "nodePools": [{
            "name": "system",
            "initialNodeCount": 1,
            "config": {"machineType": "e2-standard-4", "diskSizeGb": 50}
        }]
    }})
}

#[tokio::test]
async fn gke_cluster_and_node_pool_lifecycle() {
    let c = Client::start(Timing::instant()).await;
    let clusters = c.container("locations/us-central1/clusters");
    let op = c.ok(Method::POST, &clusters, Some(gpu_cluster("ml"))).await;
    assert_eq!(
        (op["operationType"].as_str(), op["status"].as_str()),
        (Some("CREATE_CLUSTER"), Some("RUNNING"))
    );
    let done = c.wait_container(&op).await;
    assert!(done.get("error").is_none());

    let cluster_url = format!("{clusters}/ml");
    let cluster = c.ok(Method::GET, &cluster_url, None).await;
    assert_eq!(
        discovery::conforms("container", "Cluster", &cluster),
        Ok(())
    );
    assert_eq!(cluster["status"], "RUNNING");
    // The cluster's own Kubernetes API server, on its loopback port.
    let endpoint = cluster["endpoint"].as_str().unwrap_or_default();
    assert!(endpoint.starts_with("127.0.0.1:"), "{endpoint}");
    assert_eq!(cluster["releaseChannel"]["channel"], "RAPID");
    assert_eq!(cluster["nodePools"][0]["config"]["diskSizeGb"], 50);

    // A GPU pool with the shapes the provider sends: int64 as number, taints, autoscaling.
    let pools = format!("{cluster_url}/nodePools");
    let pool = json!({"nodePool": {
        "name": "gpu",
        "initialNodeCount": 0,
        "config": {
            "machineType": "g2-standard-8",
            "spot": true,
            "accelerators": [{"acceleratorCount": 2, "acceleratorType": "nvidia-l4",
                "gpuDriverInstallationConfig": {"gpuDriverVersion": "DEFAULT"}}],
            "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NO_SCHEDULE"}],
            "labels": {"role": "gpu"}
        },
        "autoscaling": {"enabled": true, "totalMinNodeCount": 0, "totalMaxNodeCount": 4, "locationPolicy": "ANY"},
        "placementPolicy": {"type": "COMPACT"},
        "management": {"autoUpgrade": true, "autoRepair": true}
    }});
    let op = c.ok(Method::POST, &pools, Some(pool)).await;
    assert_eq!(op["operationType"], "CREATE_NODE_POOL");
    c.wait_container(&op).await;
    let gpu = c.ok(Method::GET, &format!("{pools}/gpu"), None).await;
    assert_eq!(discovery::conforms("container", "NodePool", &gpu), Ok(()));
    assert_eq!(gpu["status"], "RUNNING");
    assert_eq!(gpu["config"]["accelerators"][0]["acceleratorCount"], "2");
    assert!(
        gpu.get("initialNodeCount").is_none(),
        "zero is omitted like proto3 JSON"
    );
    let listed = c.ok(Method::GET, &pools, None).await;
    assert_eq!(listed["nodePools"].as_array().map(Vec::len), Some(2));

    for (verb, body) in [
        (":setSize", json!({"nodeCount": 2})),
        (
            ":setAutoscaling",
            json!({"autoscaling": {"enabled": true, "minNodeCount": 1, "maxNodeCount": 3}}),
        ),
        (
            ":setManagement",
            json!({"management": {"autoUpgrade": false, "autoRepair": true}}),
        ),
    ] {
        let op = c
            .ok(Method::POST, &format!("{pools}/gpu{verb}"), Some(body))
            .await;
        c.wait_container(&op).await;
    }
    let update = json!({"taints": {"taints": [{"key": "dedicated", "value": "ml", "effect": "NO_EXECUTE"}]},
        "labels": {"labels": {}}, "resourceLabels": {"labels": {"cost": "gpu"}}});
    let op = c
        .ok(Method::PUT, &format!("{pools}/gpu"), Some(update))
        .await;
    c.wait_container(&op).await;
    let gpu = c.ok(Method::GET, &format!("{pools}/gpu"), None).await;
    assert_eq!(
        gpu["autoscaling"],
        json!({"enabled": true, "minNodeCount": 1, "maxNodeCount": 3})
    );
    assert_eq!(gpu["management"], json!({"autoRepair": true}));
    assert_eq!(gpu["config"]["taints"][0]["effect"], "NO_EXECUTE");
    assert!(gpu["config"].get("labels").is_none());
    assert_eq!(gpu["config"]["resourceLabels"], json!({"cost": "gpu"}));
    let cluster = c.ok(Method::GET, &cluster_url, None).await;
    assert_eq!(
        cluster["currentNodeCount"],
        3 + 6,
        "1 x 3 zones + 2 x 3 zones"
    );

    let labels =
        json!({"resourceLabels": {"env": "prod"}, "labelFingerprint": cluster["labelFingerprint"]});
    let op = c
        .ok(
            Method::POST,
            &format!("{cluster_url}:setResourceLabels"),
            Some(labels),
        )
        .await;
    assert_eq!(op["operationType"], "SET_LABELS");
    c.wait_container(&op).await;
    let op = c
        .ok(
            Method::PUT,
            &cluster_url,
            Some(json!({"update": {"desiredReleaseChannel": {"channel": "STABLE"}}})),
        )
        .await;
    c.wait_container(&op).await;
    let cluster = c.ok(Method::GET, &cluster_url, None).await;
    assert_eq!(
        (
            cluster["resourceLabels"]["env"].as_str(),
            cluster["releaseChannel"]["channel"].as_str()
        ),
        (Some("prod"), Some("STABLE"))
    );

    let op = c.ok(Method::DELETE, &format!("{pools}/gpu"), None).await;
    c.wait_container(&op).await;
    let gone = c.call(Method::GET, &format!("{pools}/gpu"), None).await;
    assert_eq!(gone.status, StatusCode::NOT_FOUND);
    let op = c.ok(Method::DELETE, &cluster_url, None).await;
    c.wait_container(&op).await;
    let gone = c.call(Method::GET, &cluster_url, None).await;
    assert_eq!(gone.status, StatusCode::NOT_FOUND);
    assert_eq!(
        gone.body,
        json!({"error": {"code": 404, "message": "Not found: projects/proj/locations/us-central1/clusters/ml.", "status": "NOT_FOUND"}})
    );
    let ops = c
        .ok(Method::GET, &c.container("locations/-/operations"), None)
        .await;
    assert_eq!(
        discovery::conforms("container", "ListOperationsResponse", &ops),
        Ok(())
    );
    assert_eq!(ops["operations"].as_array().map(Vec::len), Some(10));

    let paths: Vec<String> = c
        .sandbox
        .traffic()
        .iter()
        .map(|e| format!("{} {}", e.method, e.path))
        .collect();
    assert_eq!(
        paths[0],
        "POST v1/projects/proj/locations/us-central1/clusters"
    );
    c.sandbox.shutdown().await;
}

#[tokio::test]
async fn realistic_timing_shows_progress_until_the_clock_moves() {
    let c = Client::start(Timing::default()).await;
    let clusters = c.container("locations/europe-west4-a/clusters");
    let op = c
        .ok(
            Method::POST,
            &clusters,
            Some(json!({"cluster": {"name": "slow", "initialNodeCount": 1}})),
        )
        .await;
    let cluster = c.ok(Method::GET, &format!("{clusters}/slow"), None).await;
    assert_eq!(cluster["status"], "PROVISIONING");
    assert_eq!(cluster["locations"], json!(["europe-west4-a"]));
    let busy = c
        .call(Method::DELETE, &format!("{clusters}/slow"), None)
        .await;
    assert_eq!(busy.status, StatusCode::BAD_REQUEST);
    assert_eq!(busy.body["error"]["status"], "FAILED_PRECONDITION");
    assert_eq!(
        busy.body["error"]["message"],
        format!(
            "Cluster is running incompatible operation {}.",
            op["name"].as_str().expect("name")
        )
    );
    c.sandbox.advance_clock(Duration::from_secs(3));
    let op_url = c.container(&format!(
        "locations/europe-west4-a/operations/{}",
        op["name"].as_str().expect("name")
    ));
    let mid = c.ok(Method::GET, &op_url, None).await;
    assert_eq!(mid["status"], "RUNNING");
    assert_eq!(mid["progress"]["stages"][0]["status"], "DONE");
    c.sandbox.advance_clock(Duration::from_secs(4));
    let cluster = c.ok(Method::GET, &format!("{clusters}/slow"), None).await;
    assert_eq!(cluster["status"], "RUNNING");
    c.sandbox.shutdown().await;
}

#[tokio::test]
async fn google_error_formats() {
    let c = Client::start(Timing::instant()).await;
    let clusters = c.container("locations/us-central1/clusters");
    let anonymous = c.send(Method::GET, &clusters, None, None).await;
    assert_eq!(anonymous.status, StatusCode::UNAUTHORIZED);
    assert_eq!(anonymous.body["error"]["status"], "UNAUTHENTICATED");
    let anonymous = c
        .send(
            Method::GET,
            &c.storage("storage/v1/b?project=p"),
            None,
            None,
        )
        .await;
    assert_eq!(anonymous.status, StatusCode::UNAUTHORIZED);
    assert_eq!(anonymous.body["error"]["errors"][0]["reason"], "required");

    let unknown = c
        .call(Method::POST, &clusters, Some(json!({"cluster": {"name": "x", "nodePools": [{"name": "p", "config": {"fooBar": 1}}]}})))
        .await;
    assert_eq!(unknown.status, StatusCode::BAD_REQUEST);
    assert_eq!(unknown.body["error"]["status"], "INVALID_ARGUMENT");
    assert_eq!(
        unknown.body["error"]["message"],
        "Invalid JSON payload received. Unknown name \"fooBar\" at 'cluster.node_pools[0].config': Cannot find field."
    );
    assert_eq!(
        unknown.body["error"]["details"][0]["@type"],
        "type.googleapis.com/google.rpc.BadRequest"
    );
    let bad_enum = c
        .call(
            Method::POST,
            &clusters,
            Some(json!({"cluster": {"name": "x", "releaseChannel": {"channel": "FAST"}}})),
        )
        .await;
    assert_eq!(
        bad_enum.body["error"]["message"],
        "Invalid value at 'cluster.release_channel.channel' (type.googleapis.com/google.container.v1.ReleaseChannel.Channel), \"FAST\""
    );
    let no_nodes = c
        .call(
            Method::POST,
            &clusters,
            Some(json!({"cluster": {"name": "x"}})),
        )
        .await;
    assert_eq!(
        no_nodes.body["error"]["message"],
        "Cluster.initial_node_count must be greater than zero."
    );

    let op = c
        .ok(
            Method::POST,
            &clusters,
            Some(json!({"cluster": {"name": "x", "initialNodeCount": 1}})),
        )
        .await;
    c.wait_container(&op).await;
    let dup = c
        .call(
            Method::POST,
            &clusters,
            Some(json!({"cluster": {"name": "x", "initialNodeCount": 1}})),
        )
        .await;
    assert_eq!(
        (dup.status, dup.body["error"]["status"].as_str()),
        (StatusCode::CONFLICT, Some("ALREADY_EXISTS"))
    );

    let op = c
        .ok(
            Method::POST,
            &clusters,
            Some(json!({"cluster": {"name": "auto", "autopilot": {"enabled": true}}})),
        )
        .await;
    c.wait_container(&op).await;
    let refused = c
        .call(
            Method::POST,
            &format!("{clusters}/auto/nodePools"),
            Some(json!({"nodePool": {"name": "gpu", "initialNodeCount": 1}})),
        )
        .await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST);
    assert_eq!(refused.body["error"]["status"], "FAILED_PRECONDITION");

    let no_route = c
        .call(
            Method::GET,
            &c.container("locations/us-central1/widgets"),
            None,
        )
        .await;
    assert_eq!(no_route.status, StatusCode::NOT_FOUND);
    let invalid = c
        .call(
            Method::POST,
            &c.storage("storage/v1/b?project=proj"),
            Some(json!({"name": "Bad Name"})),
        )
        .await;
    assert_eq!(invalid.body["error"]["errors"][0]["reason"], "invalid");
    c.sandbox.shutdown().await;
}

#[tokio::test]
async fn filestore_instance_lifecycle() {
    let c = Client::start(Timing::instant()).await;
    let instances = c.file("locations/us-central1-b/instances");
    let body = json!({"tier": "BASIC_HDD", "description": "datasets",
        "fileShares": [{"name": "share1", "capacityGb": "1024"}],
        "networks": [{"network": "default", "modes": ["MODE_IPV4"]}]});
    let op = c
        .ok(
            Method::POST,
            &format!("{instances}?instanceId=nfs"),
            Some(body.clone()),
        )
        .await;
    assert_eq!(
        op["metadata"]["@type"],
        "type.googleapis.com/google.cloud.common.OperationMetadata"
    );
    assert_eq!(op["done"], false);
    let done = c.wait_file(&op).await;
    assert_eq!(done["response"]["state"], "READY");
    let second = c
        .ok(
            Method::POST,
            &format!("{instances}?instanceId=nfs2"),
            Some(body),
        )
        .await;
    c.wait_file(&second).await;

    let nfs = c.ok(Method::GET, &format!("{instances}/nfs"), None).await;
    assert_eq!(discovery::conforms("file", "Instance", &nfs), Ok(()));
    assert_eq!(
        nfs["name"],
        "projects/proj/locations/us-central1-b/instances/nfs"
    );
    assert_eq!(nfs["state"], "READY");
    let nfs2 = c.ok(Method::GET, &format!("{instances}/nfs2"), None).await;
    assert_ne!(
        nfs["networks"][0]["ipAddresses"],
        nfs2["networks"][0]["ipAddresses"]
    );
    let all = c
        .ok(Method::GET, &c.file("locations/-/instances"), None)
        .await;
    assert_eq!(all["instances"].as_array().map(Vec::len), Some(2));

    let grow =
        json!({"fileShares": [{"name": "share1", "capacityGb": 2048}], "labels": {"tier": "hot"}});
    let op = c
        .ok(
            Method::PATCH,
            &format!("{instances}/nfs?updateMask=fileShares,labels"),
            Some(grow),
        )
        .await;
    assert_eq!(op["metadata"]["verb"], "update");
    c.wait_file(&op).await;
    let nfs = c.ok(Method::GET, &format!("{instances}/nfs"), None).await;
    assert_eq!(
        (
            nfs["fileShares"][0]["capacityGb"].as_str(),
            nfs["labels"]["tier"].as_str()
        ),
        (Some("2048"), Some("hot"))
    );
    let shrink = c
        .call(
            Method::PATCH,
            &format!("{instances}/nfs?updateMask=fileShares"),
            Some(json!({"fileShares": [{"name": "share1", "capacityGb": 1024}]})),
        )
        .await;
    assert_eq!(
        (shrink.status, shrink.body["error"]["status"].as_str()),
        (StatusCode::BAD_REQUEST, Some("INVALID_ARGUMENT"))
    );

    let op = c
        .ok(Method::DELETE, &format!("{instances}/nfs"), None)
        .await;
    let done = c.wait_file(&op).await;
    assert_eq!(
        done["response"]["@type"],
        "type.googleapis.com/google.protobuf.Empty"
    );
    let gone = c.call(Method::GET, &format!("{instances}/nfs"), None).await;
    assert_eq!(gone.status, StatusCode::NOT_FOUND);
    c.sandbox.shutdown().await;
}

#[tokio::test]
async fn storage_buckets_and_objects() {
    let c = Client::start(Timing::instant()).await;
    let bucket = c
        .ok(Method::POST, &c.storage("storage/v1/b?project=proj"), Some(json!({"name": "ml-data", "location": "us-central1",
            "storageClass": "STANDARD", "versioning": {"enabled": true}, "labels": {"team": "ml"},
            "iamConfiguration": {"uniformBucketLevelAccess": {"enabled": true}, "publicAccessPrevention": "enforced"}})))
        .await;
    assert_eq!(discovery::conforms("storage", "Bucket", &bucket), Ok(()));
    assert_eq!(bucket["location"], "US-CENTRAL1");

    let upload = c.storage("upload/storage/v1/b/ml-data/o?uploadType=media&name=runs%2F1.json");
    let resp = c
        .http
        .post(&upload)
        .bearer_auth("t")
        .body("{\"loss\": 0.1}")
        .send()
        .await
        .expect("upload");
    assert_eq!(resp.status(), StatusCode::OK);
    let object: Value = resp.json().await.expect("object JSON");
    assert_eq!(
        (object["name"].as_str(), object["size"].as_str()),
        (Some("runs/1.json"), Some("13"))
    );
    let media = c
        .http
        .get(c.storage("storage/v1/b/ml-data/o/runs%2F1.json?alt=media"))
        .bearer_auth("t")
        .send()
        .await
        .expect("download");
    assert_eq!(media.text().await.expect("text"), "{\"loss\": 0.1}");

    let patched = c
        .ok(
            Method::PATCH,
            &c.storage("storage/v1/b/ml-data"),
            Some(json!({"labels": {"team": null, "owner": "me"}})),
        )
        .await;
    assert_eq!(patched["labels"], json!({"owner": "me"}));
    assert_eq!(patched["metageneration"], "2");

    // force_destroy: delete every version, then the bucket.
    let not_empty = c
        .call(Method::DELETE, &c.storage("storage/v1/b/ml-data"), None)
        .await;
    assert_eq!(not_empty.status, StatusCode::CONFLICT);
    assert_eq!(
        not_empty.body["error"]["message"],
        "The bucket you tried to delete is not empty."
    );
    let deleted = c
        .call(
            Method::DELETE,
            &c.storage("storage/v1/b/ml-data/o/runs%2F1.json"),
            None,
        )
        .await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT);
    let still = c
        .call(Method::DELETE, &c.storage("storage/v1/b/ml-data"), None)
        .await;
    assert_eq!(
        still.status,
        StatusCode::CONFLICT,
        "a noncurrent version remains"
    );
    let versions = c
        .ok(
            Method::GET,
            &c.storage("storage/v1/b/ml-data/o?versions=true"),
            None,
        )
        .await;
    for item in versions["items"].as_array().expect("versions") {
        let url = c.storage(&format!(
            "storage/v1/b/ml-data/o/runs%2F1.json?generation={}",
            item["generation"].as_str().expect("generation")
        ));
        assert_eq!(
            c.call(Method::DELETE, &url, None).await.status,
            StatusCode::NO_CONTENT
        );
    }
    let gone = c
        .call(Method::DELETE, &c.storage("storage/v1/b/ml-data"), None)
        .await;
    assert_eq!(
        (gone.status, gone.body.clone()),
        (StatusCode::NO_CONTENT, Value::Null)
    );
    let list = c
        .ok(Method::GET, &c.storage("storage/v1/b?project=proj"), None)
        .await;
    assert_eq!(list, json!({"kind": "storage#buckets"}));
    c.sandbox.shutdown().await;
}

#[tokio::test]
async fn burst_then_success_with_retry_after() {
    let c = Client::start(Timing::instant()).await;
    c.sandbox.faults().burst(429, 2, 7);
    let url = c.storage("storage/v1/b?project=proj");
    for _ in 0..2 {
        let reply = c
            .call(Method::POST, &url, Some(json!({"name": "bkt-1"})))
            .await;
        assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(reply.retry_after.as_deref(), Some("7"));
        assert_eq!(
            reply.body["error"]["errors"][0]["reason"],
            "rateLimitExceeded"
        );
    }
    c.ok(Method::POST, &url, Some(json!({"name": "bkt-1"})))
        .await;
    let list = c.ok(Method::GET, &url, None).await;
    assert_eq!(
        list["items"].as_array().map(Vec::len),
        Some(1),
        "throttled creates had no effect"
    );
    let injected: Vec<bool> = c.sandbox.traffic().iter().map(|e| e.injected).collect();
    assert_eq!(injected, [true, true, false, false]);

    c.sandbox.faults().burst(429, 1, 1);
    let reply = c
        .call(Method::GET, &c.container("locations/-/clusters"), None)
        .await;
    assert_eq!(reply.body["error"]["status"], "RESOURCE_EXHAUSTED");
    c.sandbox.shutdown().await;
}

#[tokio::test]
async fn error_rate_is_reproducible_and_can_be_disabled() {
    let run = |seed| async move {
        let c = Client::start(Timing::instant()).await;
        c.sandbox.faults().set_error_rate(503, 0.3, seed);
        let mut pattern = Vec::new();
        for _ in 0..30 {
            let reply = c
                .call(Method::GET, &c.container("locations/-/clusters"), None)
                .await;
            if reply.status == StatusCode::SERVICE_UNAVAILABLE {
                assert_eq!(reply.body["error"]["status"], "UNAVAILABLE");
            }
            pattern.push(reply.status.as_u16());
        }
        c.sandbox.faults().set_error_rate(503, 0.0, seed);
        let after = c
            .call(Method::GET, &c.container("locations/-/clusters"), None)
            .await;
        assert_eq!(after.status, StatusCode::OK);
        c.sandbox.shutdown().await;
        pattern
    };
    let first = run(42).await;
    assert_eq!(first, run(42).await);
    let failures = first.iter().filter(|s| **s == 503).count();
    assert!((2..=20).contains(&failures), "{failures} of 30 failed");
}

#[tokio::test]
async fn failing_operations_leave_no_object() {
    let c = Client::start(Timing::instant()).await;
    c.sandbox
        .faults()
        .fail_next_operation("container", "Insufficient regional quota: GPUS_ALL_REGIONS");
    let clusters = c.container("locations/us-central1/clusters");
    let op = c
        .ok(Method::POST, &clusters, Some(gpu_cluster("doomed")))
        .await;
    let done = c.wait_container(&op).await;
    assert_eq!(done["error"]["code"], 13);
    assert_eq!(
        done["error"]["message"],
        "Insufficient regional quota: GPUS_ALL_REGIONS"
    );
    assert_eq!(
        c.call(Method::GET, &format!("{clusters}/doomed"), None)
            .await
            .status,
        StatusCode::NOT_FOUND
    );

    c.sandbox
        .faults()
        .fail_next_operation_with("file", 9, "network is not peered");
    let body = json!({"tier": "ZONAL", "fileShares": [{"name": "s", "capacityGb": 1024}], "networks": [{"network": "vpc"}]});
    let op = c
        .ok(
            Method::POST,
            &c.file("locations/us-central1-a/instances?instanceId=f"),
            Some(body),
        )
        .await;
    let done = c.wait_file(&op).await;
    assert_eq!(
        done["error"],
        json!({"code": 9, "message": "network is not peered"})
    );
    let gone = c
        .call(
            Method::GET,
            &c.file("locations/us-central1-a/instances/f"),
            None,
        )
        .await;
    assert_eq!(gone.status, StatusCode::NOT_FOUND);
    c.sandbox.shutdown().await;
}

#[tokio::test]
async fn lost_responses_take_effect_so_retries_find_the_object() {
    let c = Client::start(Timing::instant()).await;
    c.sandbox.faults().fail_after_effect(1);
    let clusters = c.container("locations/us-central1/clusters");
    let lost = c
        .call(Method::POST, &clusters, Some(gpu_cluster("once")))
        .await;
    assert_eq!(lost.status, StatusCode::SERVICE_UNAVAILABLE);
    let retry = c
        .call(Method::POST, &clusters, Some(gpu_cluster("once")))
        .await;
    assert_eq!(retry.body["error"]["status"], "ALREADY_EXISTS");
    let list = c.ok(Method::GET, &clusters, None).await;
    assert_eq!(list["clusters"].as_array().map(Vec::len), Some(1));
    let traffic = c.sandbox.traffic();
    assert!(traffic[0].injected && !traffic[1].injected);
    c.sandbox.shutdown().await;
}

#[tokio::test]
async fn slow_operations_stretch_durations() {
    let c = Client::start(Timing::scaled(0.01)).await;
    c.sandbox.faults().slow_operations(1000.0);
    let clusters = c.container("locations/us-central1/clusters");
    c.ok(
        Method::POST,
        &clusters,
        Some(json!({"cluster": {"name": "slow", "initialNodeCount": 1}})),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let cluster = c.ok(Method::GET, &format!("{clusters}/slow"), None).await;
    assert_eq!(cluster["status"], "PROVISIONING", "60 s, not 60 ms");
    c.sandbox.advance_clock(Duration::from_secs(61));
    let cluster = c.ok(Method::GET, &format!("{clusters}/slow"), None).await;
    assert_eq!(cluster["status"], "RUNNING");
    c.sandbox.shutdown().await;
}

#[tokio::test]
async fn control_endpoints_over_http() {
    let c = Client::start(Timing::instant()).await;
    let faults_url = format!("{}/_sandbox/faults", c.sandbox.url());
    let resp = c
        .http
        .post(&faults_url)
        .json(&json!({"burst": {"status": 503, "count": 1, "retryAfterSecs": 2}}))
        .send()
        .await
        .expect("set faults");
    assert_eq!(resp.status(), StatusCode::OK);
    // Control endpoints are never subject to faults, and need no token.
    let spec: Value = c
        .http
        .get(&faults_url)
        .send()
        .await
        .expect("get faults")
        .json()
        .await
        .expect("JSON");
    assert_eq!(spec["burst"]["count"], 1);
    let reply = c
        .call(Method::GET, &c.file("locations/-/instances"), None)
        .await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    let reply = c
        .call(Method::GET, &c.file("locations/-/instances"), None)
        .await;
    assert_eq!(reply.status, StatusCode::OK);

    let traffic: Value = c
        .http
        .get(format!("{}/_sandbox/traffic", c.sandbox.url()))
        .send()
        .await
        .expect("traffic")
        .json()
        .await
        .expect("JSON");
    assert_eq!(traffic[0]["api"], "file");
    assert_eq!(traffic[0]["path"], "v1/projects/proj/locations/-/instances");
    assert_eq!(traffic[0]["injected"], true);
    assert_eq!(traffic.as_array().map(Vec::len), Some(2));
    c.sandbox.clear_traffic();
    assert!(c.sandbox.traffic().is_empty());
    c.http
        .post(&faults_url)
        .json(&json!({"clear": true}))
        .send()
        .await
        .expect("clear");
    assert_eq!(
        c.sandbox.faults().spec(),
        terrain_sandbox::FaultSpec::default()
    );
    c.sandbox.shutdown().await;
}

#[tokio::test]
async fn state_file_survives_a_restart() {
    let dir = tempfile::tempdir().expect("temp dir");
    let state_file = dir.path().join("sandbox.json");
    let opts = || Options {
        timing: Timing::default(),
        state_file: Some(state_file.clone()),
        ..Options::google_apis_on()
    };
    let c = Client::with(opts()).await;
    let clusters = c.container("locations/us-central1/clusters");
    let op = c
        .ok(Method::POST, &clusters, Some(gpu_cluster("keep")))
        .await;
    c.ok(
        Method::POST,
        &c.storage("storage/v1/b?project=proj"),
        Some(json!({"name": "keep-bucket"})),
    )
    .await;
    c.sandbox.shutdown().await;
    assert!(state_file.exists());

    // A new process: the cluster and its running operation are still there, and the
    // operation finishes against the wall clock.
    let c = Client::with(opts()).await;
    let clusters = c.container("locations/us-central1/clusters");
    let cluster = c.ok(Method::GET, &format!("{clusters}/keep"), None).await;
    assert_eq!(cluster["status"], "PROVISIONING");
    c.sandbox.advance_clock(Duration::from_secs(10));
    let done = c.wait_container(&op).await;
    assert_eq!(done["status"], "DONE");
    c.ok(Method::GET, &c.storage("storage/v1/b/keep-bucket"), None)
        .await;
    c.sandbox.shutdown().await;

    let c = Client::with(opts()).await;
    let clusters = c.container("locations/us-central1/clusters");
    let cluster = c.ok(Method::GET, &format!("{clusters}/keep"), None).await;
    assert_eq!(cluster["status"], "RUNNING", "completion was persisted");
    c.sandbox.shutdown().await;

    std::fs::write(&state_file, "{broken").expect("corrupt the file");
    let err = Sandbox::start(opts())
        .await
        .expect_err("corrupt state is refused");
    assert!(err.to_string().contains("not valid JSON state"), "{err}");
}

#[tokio::test]
async fn the_inventory_lists_what_is_held_until_its_delete_completes() {
    let c = Client::start(Timing::default()).await;
    assert_eq!(c.sandbox.inventory(), Vec::<String>::new());
    assert_eq!(
        c.sandbox.url(),
        format!("http://127.0.0.1:{}", c.sandbox.port())
    );
    let clusters = c.container("locations/us-central1/clusters");
    c.ok(Method::POST, &clusters, Some(gpu_cluster("inv")))
        .await;
    let instances = c.file("locations/us-central1-b/instances");
    c.ok(
        Method::POST,
        &format!("{instances}?instanceId=inv-nfs"),
        Some(json!({"tier": "BASIC_HDD",
            "fileShares": [{"name": "share1", "capacityGb": "1024"}],
            "networks": [{"network": "default", "modes": ["MODE_IPV4"]}]})),
    )
    .await;
    c.ok(
        Method::POST,
        &c.storage("storage/v1/b?project=proj"),
        Some(json!({"name": "inv-bucket"})),
    )
    .await;
    let upload = c.storage("upload/storage/v1/b/inv-bucket/o?uploadType=media&name=runs%2F1.json");
    let resp = c
        .http
        .post(&upload)
        .bearer_auth("t")
        .body("{}")
        .send()
        .await
        .expect("upload");
    assert_eq!(resp.status(), StatusCode::OK);

    // Still being created counts as held.
    let everything = [
        "filestore instance proj/us-central1-b/inv-nfs",
        "gcs bucket inv-bucket",
        "gcs object inv-bucket/runs/1.json",
        "gke cluster proj/us-central1/inv",
        "gke node pool proj/us-central1/inv/system",
        "kubernetes api server gke/projects/proj/locations/us-central1/clusters/inv",
    ];
    assert_eq!(c.sandbox.inventory(), everything);
    c.sandbox.advance_clock(Duration::from_secs(60));
    assert_eq!(c.sandbox.inventory(), everything);

    c.ok(Method::DELETE, &format!("{clusters}/inv"), None).await;
    c.ok(Method::DELETE, &format!("{instances}/inv-nfs"), None)
        .await;
    let object = c.storage("storage/v1/b/inv-bucket/o/runs%2F1.json");
    assert_eq!(
        c.call(Method::DELETE, &object, None).await.status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        c.call(Method::DELETE, &c.storage("storage/v1/b/inv-bucket"), None)
            .await
            .status,
        StatusCode::NO_CONTENT
    );
    // Deletes that take time hold their resources until they complete.
    let deleting = c.sandbox.inventory();
    for line in [
        "filestore instance proj/us-central1-b/inv-nfs",
        "gke cluster proj/us-central1/inv",
    ] {
        assert!(deleting.iter().any(|l| l == line), "{line} in {deleting:?}");
    }
    assert!(
        !deleting.iter().any(|l| l.starts_with("gcs ")),
        "{deleting:?}"
    );
    c.sandbox.advance_clock(Duration::from_secs(60));
    assert_eq!(c.sandbox.inventory(), Vec::<String>::new());
    c.sandbox.shutdown().await;
}
