//! Capacity over HTTP, the way terrain and the official CLIs read it: Compute Engine's
//! zones, accelerator types and regional quotas, Cloud TPU's accelerator types, EC2's
//! instance type offerings and Availability Zones, and Service Quotas — with request
//! paths built from, and answers checked against, the official contracts in
//! `contracts/`. Then capacity at create time: a GKE node pool in a stocked-out zone fails
//! as GKE fails it and succeeds in another zone, a GPU pool without quota is refused,
//! regional usage follows the pools, and an EKS node group stocked out in every zone of
//! its subnets ends CREATE_FAILED. `gcloud` and the `aws` CLI are driven when installed.

use std::time::Duration;

use crate::common;
use common::assert_botocore;
use serde_json::{json, Value};
use terrain_sandbox::{Options, Sandbox, Timing};

const PROJECT: &str = "capacity-proj";

/// A contract kept in the repository, inflated when stored gzipped.
fn contract(path: &str) -> Value {
    terrain_contracts::json(path)
}

/// Where `value` strays from a discovery-document schema: properties the schema does not
/// have, values of the wrong type, strings outside an enum.
fn discovery_violations(doc: &Value, schema: &Value, value: &Value, at: &str) -> Vec<String> {
    if let Some(name) = schema["$ref"].as_str() {
        return discovery_violations(doc, &doc["schemas"][name], value, at);
    }
    let wrong = |what: &str| vec![format!("{at}: expected {what}, got {value}")];
    let mut out = Vec::new();
    match schema["type"].as_str().unwrap_or_default() {
        "object" => {
            let Some(obj) = value.as_object() else {
                return wrong("an object");
            };
            for (k, v) in obj {
                let here = format!("{at}.{k}");
                if let Some(p) = schema["properties"].get(k) {
                    out.extend(discovery_violations(doc, p, v, &here));
                } else if let Some(extra) = schema.get("additionalProperties") {
                    out.extend(discovery_violations(doc, extra, v, &here));
                } else {
                    out.push(format!("{here} is not a property"));
                }
            }
        }
        "array" => {
            let Some(items) = value.as_array() else {
                return wrong("an array");
            };
            for (i, v) in items.iter().enumerate() {
                out.extend(discovery_violations(
                    doc,
                    &schema["items"],
                    v,
                    &format!("{at}[{i}]"),
                ));
            }
        }
        "string" => match value.as_str() {
            None => return wrong("a string"),
            Some(s) => {
                if let Some(values) = schema["enum"].as_array() {
                    if !values.iter().any(|e| e == s) {
                        out.push(format!("{at}: {s:?} is not in the enum"));
                    }
                }
            }
        },
        "integer" if !value.is_i64() && !value.is_u64() => return wrong("an integer"),
        "number" if !value.is_number() => return wrong("a number"),
        "boolean" if !value.is_boolean() => return wrong("a boolean"),
        _ => {}
    }
    out
}

fn assert_discovery(doc: &Value, schema: &str, value: &Value) {
    let problems = discovery_violations(doc, &json!({"$ref": schema}), value, schema);
    assert!(problems.is_empty(), "{problems:#?}\nin {value:#}");
}

/// A discovery method's URL path (`v2/{+parent}/acceleratorTypes`) with its parameters
/// filled in.
fn method_path(doc: &Value, resource: &[&str], method: &str, params: &[(&str, &str)]) -> String {
    let mut at = doc;
    for r in resource {
        at = &at["resources"][*r];
    }
    let mut path = at["methods"][method]["path"]
        .as_str()
        .unwrap_or_else(|| panic!("{resource:?}.{method} is in the document"))
        .to_string();
    for (name, value) in params {
        path = path
            .replace(&format!("{{+{name}}}"), value)
            .replace(&format!("{{{name}}}"), value);
    }
    assert!(
        !path.contains('{'),
        "every parameter of {path} is filled in"
    );
    format!("{}{path}", doc["servicePath"].as_str().unwrap_or_default())
}

async fn start() -> Sandbox {
    Sandbox::start(Options {
        timing: Timing::instant(),
        ..Options::google_apis_on()
    })
    .await
    .expect("sandbox starts")
}

struct Http {
    client: reqwest::Client,
}

impl Http {
    fn new() -> Http {
        Http {
            client: reqwest::Client::new(),
        }
    }

    async fn google(
        &self,
        method: reqwest::Method,
        url: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut req = self.client.request(method, url).bearer_auth("test-token");
        if let Some(body) = body {
            req = req.json(&body);
        }
        let resp = req.send().await.expect("request reaches the sandbox");
        let status = resp.status().as_u16();
        let text = resp.text().await.expect("a body");
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    async fn get(&self, url: &str) -> Value {
        let (status, body) = self.google(reqwest::Method::GET, url, None).await;
        assert_eq!(status, 200, "GET {url}: {body}");
        body
    }

    async fn post(&self, url: &str, body: Value) -> Value {
        let (status, body) = self.google(reqwest::Method::POST, url, Some(body)).await;
        assert_eq!(status, 200, "POST {url}: {body}");
        body
    }

    /// An AWS request signed (in form only: the sandbox reads the credential scope) for
    /// `service` in `region`.
    async fn aws(
        &self,
        url: &str,
        service: &str,
        region: &str,
        headers: &[(&str, &str)],
        body: String,
    ) -> (u16, String) {
        let auth = format!(
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20260101/{region}/{service}/aws4_request, SignedHeaders=host;x-amz-date, Signature=0"
        );
        let mut req = self
            .client
            .post(url)
            .header("authorization", auth)
            .body(body);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let resp = req.send().await.expect("request reaches the sandbox");
        (resp.status().as_u16(), resp.text().await.expect("a body"))
    }
}

/// Polls a GKE operation until it is DONE.
async fn wait(http: &Http, sandbox: &Sandbox, location: &str, op: &Value) -> Value {
    let name = op["name"].as_str().expect("an operation name");
    let url = format!(
        "{}v1/projects/{PROJECT}/locations/{location}/operations/{name}",
        sandbox.gcp_endpoints().container
    );
    for _ in 0..100 {
        let op = http.get(&url).await;
        if op["status"] == "DONE" {
            return op;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("operation {name} never finished");
}

fn quota<'a>(region: &'a Value, metric: &str) -> &'a Value {
    region["quotas"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|q| q["metric"] == metric)
        .unwrap_or_else(|| panic!("{metric} is reported"))
}

#[tokio::test]
async fn compute_and_tpu_answers_follow_their_discovery_documents() {
    let sandbox = start().await;
    let http = Http::new();
    let e = sandbox.gcp_endpoints();
    {
        let doc = contract("gcp/compute.v1.json.gz");
        let zone = [("project", PROJECT), ("zone", "us-central1-a")];
        let list = http
            .get(&format!(
                "{}{}",
                e.compute,
                method_path(&doc, &["acceleratorTypes"], "list", &zone)
            ))
            .await;
        assert_discovery(&doc, "AcceleratorTypeList", &list);
        let names: Vec<&str> = list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t["name"].as_str())
            .collect();
        assert!(
            names.contains(&"nvidia-tesla-t4") && names.contains(&"nvidia-l4"),
            "{names:?}"
        );
        let get = [
            ("project", PROJECT),
            ("zone", "us-central1-a"),
            ("acceleratorType", "nvidia-l4"),
        ];
        let l4 = http
            .get(&format!(
                "{}{}",
                e.compute,
                method_path(&doc, &["acceleratorTypes"], "get", &get)
            ))
            .await;
        assert_discovery(&doc, "AcceleratorType", &l4);
        let machine = [
            ("project", PROJECT),
            ("zone", "us-central1-a"),
            ("machineType", "n1-standard-8"),
        ];
        let n1 = http
            .get(&format!(
                "{}{}",
                e.compute,
                method_path(&doc, &["machineTypes"], "get", &machine)
            ))
            .await;
        assert_discovery(&doc, "MachineType", &n1);
        assert_eq!(n1["guestCpus"], 8);
        let machines = http
            .get(&format!(
                "{}{}",
                e.compute,
                method_path(&doc, &["machineTypes"], "list", &zone)
            ))
            .await;
        assert_discovery(&doc, "MachineTypeList", &machines);
        let agg = http
            .get(&format!(
                "{}{}?filter=name+eq+nvidia-l4",
                e.compute,
                method_path(
                    &doc,
                    &["acceleratorTypes"],
                    "aggregatedList",
                    &[("project", PROJECT)]
                )
            ))
            .await;
        assert_discovery(&doc, "AcceleratorTypeAggregatedList", &agg);
        assert!(
            agg["items"]["zones/us-central1-f"].get("warning").is_some(),
            "no L4 in us-central1-f"
        );
        let region = http
            .get(&format!(
                "{}{}",
                e.compute,
                method_path(
                    &doc,
                    &["regions"],
                    "get",
                    &[("project", PROJECT), ("region", "europe-west4")]
                )
            ))
            .await;
        assert_discovery(&doc, "Region", &region);
        let regions = http
            .get(&format!(
                "{}{}",
                e.compute,
                method_path(&doc, &["regions"], "list", &[("project", PROJECT)])
            ))
            .await;
        assert_discovery(&doc, "RegionList", &regions);
        let zones = http
            .get(&format!(
                "{}{}",
                e.compute,
                method_path(&doc, &["zones"], "list", &[("project", PROJECT)])
            ))
            .await;
        assert_discovery(&doc, "ZoneList", &zones);
        let one = http
            .get(&format!(
                "{}{}",
                e.compute,
                method_path(&doc, &["zones"], "get", &zone)
            ))
            .await;
        assert_discovery(&doc, "Zone", &one);
        let (status, missing) = http
            .google(
                reqwest::Method::GET,
                &format!(
                    "{}compute/v1/projects/{PROJECT}/zones/us-central1-z",
                    e.compute
                ),
                None,
            )
            .await;
        assert_eq!(status, 404);
        assert_eq!(missing["error"]["errors"][0]["reason"], "notFound");
    }
    {
        let doc = contract("gcp/tpu.v2.json");
        let loc = [(
            "parent",
            &*format!("projects/{PROJECT}/locations/us-central1-a"),
        )];
        let list = http
            .get(&format!(
                "{}{}",
                e.tpu,
                method_path(
                    &doc,
                    &["projects", "locations", "acceleratorTypes"],
                    "list",
                    &loc
                )
            ))
            .await;
        assert_discovery(&doc, "ListAcceleratorTypesResponse", &list);
        let types: Vec<&str> = list["acceleratorTypes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t["type"].as_str())
            .collect();
        assert!(types.contains(&"v5litepod-4"), "{types:?}");
        let name =
            format!("projects/{PROJECT}/locations/europe-west4-b/acceleratorTypes/v5litepod-8");
        let one = http
            .get(&format!(
                "{}{}",
                e.tpu,
                method_path(
                    &doc,
                    &["projects", "locations", "acceleratorTypes"],
                    "get",
                    &[("name", &name)]
                )
            ))
            .await;
        assert_discovery(&doc, "AcceleratorType", &one);
        assert_eq!(
            one["acceleratorConfigs"][0],
            json!({"type": "V5LITE_POD", "topology": "2x4"})
        );
        let locations = http
            .get(&format!(
                "{}{}",
                e.tpu,
                method_path(
                    &doc,
                    &["projects", "locations"],
                    "list",
                    &[("name", &format!("projects/{PROJECT}"))]
                )
            ))
            .await;
        assert_discovery(&doc, "ListLocationsResponse", &locations);
    }
    sandbox.shutdown().await;
}

#[tokio::test]
async fn a_node_pool_in_a_stocked_out_zone_fails_as_gke_fails_it_and_another_zone_works() {
    let sandbox = start().await;
    let http = Http::new();
    let container = format!(
        "{}v1/projects/{PROJECT}/locations",
        sandbox.gcp_endpoints().container
    );
    for zone in ["us-central1-a", "us-central1-b"] {
        let op = http
            .post(
                &format!("{container}/{zone}/clusters"),
                json!({"cluster": {"name": zone, "initialNodeCount": 1}}),
            )
            .await;
        wait(&http, &sandbox, zone, &op).await;
    }
    sandbox
        .set_capacity(json!({"gcp": {"stockouts": [{"zone": "us-central1-a", "machineType": "n1-standard-8"}]}}))
        .expect("capacity set");
    let pool = json!({"nodePool": {"name": "gpu", "initialNodeCount": 1, "config": {
        "machineType": "n1-standard-8",
        "accelerators": [{"acceleratorType": "nvidia-tesla-t4", "acceleratorCount": 1}]}}});
    let op = http
        .post(
            &format!("{container}/us-central1-a/clusters/us-central1-a/nodePools"),
            pool.clone(),
        )
        .await;
    let done = wait(&http, &sandbox, "us-central1-a", &op).await;
    let message = done["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("[GCE_STOCKOUT]")
            && message.contains(&format!(
                "The zone 'projects/{PROJECT}/zones/us-central1-a' does not have enough resources available to fulfill the request."
            )),
        "{done:#}"
    );
    let failed = http
        .get(&format!(
            "{container}/us-central1-a/clusters/us-central1-a/nodePools/gpu"
        ))
        .await;
    assert_eq!(failed["status"], "ERROR", "GKE leaves the pool in ERROR");

    let op = http
        .post(
            &format!("{container}/us-central1-b/clusters/us-central1-b/nodePools"),
            pool,
        )
        .await;
    let done = wait(&http, &sandbox, "us-central1-b", &op).await;
    assert!(done.get("error").is_none(), "{done:#}");
    let made = http
        .get(&format!(
            "{container}/us-central1-b/clusters/us-central1-b/nodePools/gpu"
        ))
        .await;
    assert_eq!(made["status"], "RUNNING");

    // Usage follows the pools: the made pool's node, not the failed one's.
    let region = http
        .get(&format!(
            "{}compute/v1/projects/{PROJECT}/regions/us-central1",
            sandbox.gcp_endpoints().compute
        ))
        .await;
    assert_eq!(quota(&region, "NVIDIA_T4_GPUS")["usage"], 1.0);
    // Two e2-medium default pools (2 vCPUs each) and one n1-standard-8.
    assert_eq!(quota(&region, "CPUS")["usage"], 12.0);
    assert_eq!(quota(&region, "INSTANCES")["usage"], 3.0);
    sandbox.shutdown().await;
}

#[tokio::test]
async fn a_gpu_pool_without_quota_is_refused_and_usage_reflects_existing_pools() {
    let sandbox = start().await;
    let http = Http::new();
    let e = sandbox.gcp_endpoints();
    let clusters = format!(
        "{}v1/projects/{PROJECT}/locations/us-central1/clusters",
        e.container
    );
    let op = http
        .post(
            &clusters,
            json!({"cluster": {"name": "ml", "nodePools": [{"name": "system", "initialNodeCount": 1,
            "config": {"machineType": "e2-standard-4"}}]}}),
        )
        .await;
    wait(&http, &sandbox, "us-central1", &op).await;
    let l4 = json!({"nodePool": {"name": "l4", "initialNodeCount": 1, "locations": ["us-central1-a", "us-central1-b"],
        "config": {"machineType": "g2-standard-24", "spot": true,
            "accelerators": [{"acceleratorType": "nvidia-l4", "acceleratorCount": 2}]}}});
    let op = http.post(&format!("{clusters}/ml/nodePools"), l4).await;
    wait(&http, &sandbox, "us-central1", &op).await;
    let region_url = format!(
        "{}compute/v1/projects/{PROJECT}/regions/us-central1",
        e.compute
    );
    let region = http.get(&region_url).await;
    assert_eq!(
        quota(&region, "PREEMPTIBLE_NVIDIA_L4_GPUS")["usage"],
        4.0,
        "2 nodes × 2 L4s, Spot"
    );
    assert_eq!(quota(&region, "PREEMPTIBLE_CPUS")["usage"], 48.0);
    assert_eq!(
        quota(&region, "CPUS")["usage"],
        12.0,
        "3 zones × e2-standard-4"
    );
    assert_eq!(quota(&region, "NVIDIA_L4_GPUS")["usage"], 0.0);

    let (status, set) = http
        .google(
            reqwest::Method::POST,
            &format!("{}/_sandbox/capacity", sandbox.url()),
            Some(json!({"gcp": {"quotas": [{"project": PROJECT, "region": "us-central1", "metric": "NVIDIA_T4_GPUS", "limit": 0}]}})),
        )
        .await;
    assert_eq!(status, 200, "{set}");
    let t4 = json!({"nodePool": {"name": "t4", "initialNodeCount": 1, "locations": ["us-central1-c"],
        "config": {"machineType": "n1-standard-8",
            "accelerators": [{"acceleratorType": "nvidia-tesla-t4", "acceleratorCount": 4}]}}});
    let (status, refused) = http
        .google(
            reqwest::Method::POST,
            &format!("{clusters}/ml/nodePools"),
            Some(t4),
        )
        .await;
    assert_eq!(status, 403, "{refused}");
    assert_eq!(refused["error"]["status"], "PERMISSION_DENIED");
    assert_eq!(
        refused["error"]["message"],
        format!("Insufficient regional quota to satisfy request: resource \"NVIDIA_T4_GPUS\": request requires '4.0' and is short '4.0'. project has a quota of '0.0' with '0.0' available. View and manage quotas at https://console.cloud.google.com/iam-admin/quotas?usage=USED&project={PROJECT}.")
    );
    let region = http.get(&region_url).await;
    assert_eq!(
        quota(&region, "NVIDIA_T4_GPUS"),
        &json!({"metric": "NVIDIA_T4_GPUS", "limit": 0.0, "usage": 0.0})
    );
    let read_back = http
        .get(&format!("{}/_sandbox/capacity", sandbox.url()))
        .await;
    assert_eq!(read_back["gcp"]["quotas"][0]["limit"], 0.0);
    sandbox.shutdown().await;
}

#[tokio::test]
async fn ec2_offerings_and_service_quotas_answer_in_their_protocols() {
    let sandbox = start().await;
    let http = Http::new();
    let url = sandbox.url();
    let form = [(
        "content-type",
        "application/x-www-form-urlencoded; charset=utf-8",
    )];
    let (status, xml) = http
        .aws(
            &url,
            "ec2",
            "us-west-2",
            &form,
            "Action=DescribeInstanceTypeOfferings&Version=2016-11-15&LocationType=availability-zone&Filter.1.Name=instance-type&Filter.1.Value.1=g5.xlarge".into(),
        )
        .await;
    assert_eq!(status, 200, "{xml}");
    assert!(xml.contains("<DescribeInstanceTypeOfferingsResponse xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15/\">"), "{xml}");
    for zone in ["us-west-2a", "us-west-2b", "us-west-2c"] {
        assert!(
            xml.contains(&format!("<location>{zone}</location>")),
            "{zone}: {xml}"
        );
    }
    assert!(
        !xml.contains("<location>us-west-2d</location>"),
        "no g5 in us-west-2d: {xml}"
    );
    let (status, err) = http
        .aws(
            &url,
            "ec2",
            "us-east-1",
            &form,
            "Action=TerminateInstances&Version=2016-11-15".into(),
        )
        .await;
    assert_eq!(status, 400);
    assert!(
        err.contains("<Response><Errors><Error><Code>InvalidAction</Code>"),
        "{err}"
    );

    sandbox
        .set_capacity(
            json!({"aws": {"quotas": [{"region": "us-east-1", "code": "L-DB2E81BA", "value": 0}]}}),
        )
        .expect("capacity set");
    let target = [
        ("content-type", "application/x-amz-json-1.1"),
        ("x-amz-target", "ServiceQuotasV20190624.GetServiceQuota"),
    ];
    let (status, body) = http
        .aws(
            &url,
            "servicequotas",
            "us-east-1",
            &target,
            json!({"ServiceCode": "ec2", "QuotaCode": "L-DB2E81BA"}).to_string(),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let got: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(got["Quota"]["Value"], 0.0);
    {
        let model = contract("aws/botocore-1.44.5/service-quotas/2019-06-24/service-2.json.gz");
        assert_botocore(&model, "GetServiceQuotaResponse", &got);
        assert_eq!(model["metadata"]["targetPrefix"], "ServiceQuotasV20190624");
    }
    let (_, west) = http
        .aws(
            &url,
            "servicequotas",
            "us-west-2",
            &target,
            json!({"ServiceCode": "ec2", "QuotaCode": "L-DB2E81BA"}).to_string(),
        )
        .await;
    assert!(
        west.contains("\"Value\":64.0"),
        "other regions keep the default: {west}"
    );
    let (status, missing) = http
        .aws(
            &url,
            "servicequotas",
            "us-east-1",
            &target,
            json!({"ServiceCode": "ec2", "QuotaCode": "L-00000000"}).to_string(),
        )
        .await;
    assert_eq!(status, 400);
    assert!(
        missing.contains("\"__type\":\"NoSuchResourceException\""),
        "{missing}"
    );
    sandbox.shutdown().await;
}

#[tokio::test]
async fn an_eks_node_group_stocked_out_in_every_zone_of_its_subnets_ends_create_failed() {
    let sandbox = start().await;
    let http = Http::new();
    let url = sandbox.url();
    sandbox
        .set_capacity(json!({"aws": {
            "stockouts": [{"zone": "us-east-1a", "instanceType": "g5.xlarge"}],
            "subnets": {"subnet-in-a": "us-east-1a", "subnet-in-b": "us-east-1b"},
            "roles": {"eks": "eks.amazonaws.com", "node": "ec2.amazonaws.com"},
        }}))
        .expect("capacity set");
    let json_type = [("content-type", "application/json")];
    let (status, body) = http
        .aws(
            &format!("{url}/clusters"),
            "eks",
            "us-east-1",
            &json_type,
            json!({"name": "ml", "roleArn": "arn:aws:iam::123456789012:role/eks", "resourcesVpcConfig": {"subnetIds": ["subnet-in-a", "subnet-in-b"]}}).to_string(),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let group = |name: &str, subnets: &[&str]| {
        json!({"nodegroupName": name, "nodeRole": "arn:aws:iam::123456789012:role/node", "subnets": subnets,
            "instanceTypes": ["g5.xlarge"], "scalingConfig": {"minSize": 1, "maxSize": 2, "desiredSize": 1}})
        .to_string()
    };
    for (name, subnets) in [
        ("stuck", vec!["subnet-in-a"]),
        ("spread", vec!["subnet-in-a", "subnet-in-b"]),
    ] {
        let (status, body) = http
            .aws(
                &format!("{url}/clusters/ml/node-groups"),
                "eks",
                "us-east-1",
                &json_type,
                group(name, &subnets),
            )
            .await;
        assert_eq!(status, 200, "{body}");
    }
    let describe = |name: &str| {
        let http = &http;
        let url = format!("{}/clusters/ml/node-groups/{name}", sandbox.url());
        async move {
            let auth = "AWS4-HMAC-SHA256 Credential=AK/20260101/us-east-1/eks/aws4_request, SignedHeaders=host, Signature=0";
            let resp = http
                .client
                .get(&url)
                .header("authorization", auth)
                .send()
                .await
                .expect("reaches the sandbox");
            resp.json::<Value>().await.expect("JSON")
        }
    };
    let stuck = describe("stuck").await;
    assert_eq!(stuck["nodegroup"]["status"], "CREATE_FAILED", "{stuck:#}");
    let issue = &stuck["nodegroup"]["health"]["issues"][0];
    assert_eq!(issue["code"], "AsgInstanceLaunchFailures");
    assert!(
        issue["message"].as_str().is_some_and(|m| m.contains(
            "InsufficientInstanceCapacity - We currently do not have sufficient g5.xlarge capacity in the Availability Zone you requested (us-east-1a)."
        )),
        "{issue}"
    );
    let spread = describe("spread").await;
    assert_eq!(spread["nodegroup"]["status"], "ACTIVE", "{spread:#}");
    {
        let model = contract("aws/botocore-1.44.5/eks/2017-11-01/service-2.json.gz");
        assert_botocore(&model, "DescribeNodegroupResponse", &stuck);
    }
    sandbox.shutdown().await;
}

#[tokio::test]
async fn capacity_is_kept_with_the_state_file_and_bad_descriptions_are_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let state = dir.path().join("cloud.json");
    let opts = || Options {
        timing: Timing::instant(),
        state_file: Some(state.clone()),
        ..Options::google_apis_on()
    };
    let sandbox = Sandbox::start(opts()).await.expect("starts");
    let spec = json!({"gcp": {"quotas": [{"metric": "NVIDIA_L4_GPUS", "limit": 0.0}], "stockouts": []},
                      "aws": {"quotas": [], "stockouts": [{"zone": "eu-west-1a"}], "subnets": {}, "roles": {}}});
    sandbox.set_capacity(spec.clone()).expect("set");
    let err = sandbox
        .set_capacity(json!({"aws": {"quotas": [{"code": "L-12345678", "value": 1}]}}))
        .expect_err("unknown code");
    assert!(err.to_string().contains("L-1216C47A"), "{err}");
    sandbox.shutdown().await;
    let again = Sandbox::start(opts()).await.expect("restarts");
    assert_eq!(again.capacity(), spec, "the state file kept it");
    again.shutdown().await;
}

// ---------------------------------------------------------------- official CLIs

fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(tool).is_file()))
}

async fn run(mut cmd: tokio::process::Command, what: String) -> String {
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let out = tokio::time::timeout(Duration::from_secs(120), cmd.output())
        .await
        .unwrap_or_else(|_| panic!("{what} finishes within two minutes"))
        .unwrap_or_else(|e| panic!("{what} runs: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{what} failed ({}):\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gcloud_lists_accelerator_types_and_describes_regional_quotas() {
    if !on_path("gcloud") {
        println!("skipped: gcloud is not on PATH");
        return;
    }
    let sandbox = start().await;
    sandbox
        .set_capacity(json!({"gcp": {"quotas": [{"region": "us-central1", "metric": "NVIDIA_L4_GPUS", "limit": 2}]}}))
        .expect("capacity set");
    let dir = tempfile::tempdir().expect("temp dir");
    let token = dir.path().join("token");
    std::fs::write(&token, "gcloud-token\n").expect("token file");
    let config = dir.path().join("gcloud-config");
    std::fs::create_dir(&config).expect("config dir");
    let e = sandbox.gcp_endpoints();
    let gcloud = |args: &[&str]| {
        let mut cmd = tokio::process::Command::new("gcloud");
        cmd.args(args);
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("CLOUDSDK_") {
                cmd.env_remove(key);
            }
        }
        cmd.env("CLOUDSDK_CONFIG", &config)
            // gcloud's override for an API names its service path too.
            .env(
                "CLOUDSDK_API_ENDPOINT_OVERRIDES_COMPUTE",
                format!("{}compute/v1/", e.compute),
            )
            .env("CLOUDSDK_API_ENDPOINT_OVERRIDES_TPU", &e.tpu)
            .env("CLOUDSDK_AUTH_ACCESS_TOKEN_FILE", &token)
            .env("CLOUDSDK_CORE_PROJECT", PROJECT)
            .env("CLOUDSDK_CORE_DISABLE_PROMPTS", "1")
            .env("CLOUDSDK_COMPONENT_MANAGER_DISABLE_UPDATE_CHECK", "1")
            .env("CLOUDSDK_CORE_DISABLE_USAGE_REPORTING", "1");
        run(cmd, format!("gcloud {}", args.join(" ")))
    };
    let listed = gcloud(&[
        "compute",
        "accelerator-types",
        "list",
        "--filter",
        "zone:us-central1-a",
        "--format=json",
    ])
    .await;
    let listed: Value = serde_json::from_str(&listed).expect("JSON");
    let mut names: Vec<&str> = listed
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str())
        .collect();
    names.sort_unstable();
    assert!(
        names.contains(&"nvidia-tesla-t4") && names.contains(&"nvidia-l4"),
        "{names:?}"
    );
    assert!(
        listed.as_array().into_iter().flatten().all(|t| t["zone"]
            .as_str()
            .is_some_and(|z| z.ends_with("/us-central1-a"))),
        "{listed:#}"
    );
    let region = gcloud(&[
        "compute",
        "regions",
        "describe",
        "us-central1",
        "--format=json",
    ])
    .await;
    let region: Value = serde_json::from_str(&region).expect("JSON");
    assert_eq!(quota(&region, "NVIDIA_L4_GPUS")["limit"], 2.0);
    assert_eq!(quota(&region, "CPUS")["usage"], 0.0);
    // The TPU VM commands read tpu v2, the older ones v1.
    for group in [&["compute", "tpus", "tpu-vm"][..], &["compute", "tpus"][..]] {
        let mut args = group.to_vec();
        args.extend([
            "accelerator-types",
            "list",
            "--zone",
            "us-central1-a",
            "--format=json",
        ]);
        let tpus: Value = serde_json::from_str(&gcloud(&args).await).expect("JSON");
        assert!(
            tpus.as_array()
                .into_iter()
                .flatten()
                .any(|t| t["type"] == "v5litepod-4"),
            "{tpus:#}"
        );
    }
    let none = gcloud(&[
        "compute",
        "tpus",
        "tpu-vm",
        "accelerator-types",
        "list",
        "--zone",
        "us-central1-c",
        "--format=json",
    ])
    .await;
    let none: Value = serde_json::from_str(&none).expect("JSON");
    assert!(
        !none.as_array().into_iter().flatten().any(|t| t["type"]
            .as_str()
            .is_some_and(|t| t.starts_with("v5litepod"))),
        "no v5e in us-central1-c: {none:#}"
    );
    sandbox.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_aws_cli_reads_offerings_zones_and_quotas() {
    if !on_path("aws") {
        println!("skipped: the aws CLI is not on PATH");
        return;
    }
    let sandbox = start().await;
    sandbox
        .set_capacity(
            json!({"aws": {"quotas": [{"region": "us-east-1", "code": "L-417A185B", "value": 0}]}}),
        )
        .expect("capacity set");
    let home = tempfile::tempdir().expect("temp dir");
    let url = sandbox.url();
    let aws = |args: &[&str]| {
        let mut cmd = tokio::process::Command::new("aws");
        cmd.arg("--endpoint-url")
            .arg(&url)
            .args(["--region", "us-east-1", "--output", "json"])
            .args(args)
            .env("AWS_ACCESS_KEY_ID", "x")
            .env("AWS_SECRET_ACCESS_KEY", "y")
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .env("AWS_CONFIG_FILE", "/nonexistent")
            .env("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
            .env("HOME", home.path())
            .env_remove("AWS_PROFILE")
            .env_remove("AWS_SESSION_TOKEN")
            .env_remove("AWS_DEFAULT_REGION");
        run(cmd, format!("aws {}", args.join(" ")))
    };
    let ec2 = contract("aws/botocore-1.44.5/ec2/2016-11-15/service-2.json.gz");
    let quotas = contract("aws/botocore-1.44.5/service-quotas/2019-06-24/service-2.json.gz");
    let offerings = aws(&[
        "ec2",
        "describe-instance-type-offerings",
        "--location-type",
        "availability-zone",
        "--filters",
        "Name=instance-type,Values=p4d.24xlarge",
    ])
    .await;
    let offerings: Value = serde_json::from_str(&offerings).expect("JSON");
    {
        let model = &ec2;
        assert_botocore(model, "DescribeInstanceTypeOfferingsResult", &offerings);
    }
    let zones: Vec<&str> = offerings["InstanceTypeOfferings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|o| o["Location"].as_str())
        .collect();
    assert_eq!(zones, ["us-east-1a", "us-east-1c"], "p4d in few zones");
    let azs = aws(&["ec2", "describe-availability-zones"]).await;
    let azs: Value = serde_json::from_str(&azs).expect("JSON");
    {
        let model = &ec2;
        assert_botocore(model, "DescribeAvailabilityZonesResult", &azs);
    }
    assert_eq!(azs["AvailabilityZones"].as_array().map(Vec::len), Some(6));
    let p = aws(&[
        "service-quotas",
        "get-service-quota",
        "--service-code",
        "ec2",
        "--quota-code",
        "L-417A185B",
    ])
    .await;
    let p: Value = serde_json::from_str(&p).expect("JSON");
    {
        let model = &quotas;
        assert_botocore(model, "GetServiceQuotaResponse", &p);
    }
    assert_eq!(p["Quota"]["QuotaName"], "Running On-Demand P instances");
    assert_eq!(p["Quota"]["Value"], 0.0);
    let all = aws(&[
        "service-quotas",
        "list-service-quotas",
        "--service-code",
        "ec2",
    ])
    .await;
    let all: Value = serde_json::from_str(&all).expect("JSON");
    {
        let model = &quotas;
        assert_botocore(model, "ListServiceQuotasResponse", &all);
    }
    let codes: Vec<&str> = all["Quotas"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|q| q["QuotaCode"].as_str())
        .collect();
    for code in [
        "L-1216C47A",
        "L-DB2E81BA",
        "L-3819A6DF",
        "L-34B43A08",
        "L-417A185B",
    ] {
        assert!(codes.contains(&code), "{code} in {codes:?}");
    }
    sandbox.shutdown().await;
}
