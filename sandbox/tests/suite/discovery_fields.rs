//! Contract tests of the fields the Google emulators accept, held to the official
//! discovery documents in `contracts/gcp/` (read here independently of the sandbox's own
//! reading): the embedded documents are those contracts byte for byte; every method the
//! sandbox serves with a request body takes every field its request schema defines (each
//! emulated or named as not supported, none unknown) and refuses a made-up one with
//! Google's message; every other method with a body is not served; every field
//! `tables.rs` names exists. Also the fix these tests were written for: gcloud's
//! `clusters update --node-pool P --enable-autoscaling`.

use std::collections::BTreeSet;

use reqwest::{Method, StatusCode};
use serde_json::{json, Map, Value};
use terrain_sandbox::gcp::{discovery, tables};
use terrain_sandbox::{Options, Sandbox, Timing};

const PROJECT: &str = "proj";

/// How deep the sample bodies nest messages; recursive schemas stop here.
const DEPTH: usize = 6;

fn contract(api: &str) -> Value {
    let version = match api {
        "tpu" => "v2",
        "cloudresourcemanager" => "v3",
        _ => "v1",
    };
    terrain_contracts::discovery(api, version)
}

/// One served method with a request body, and how a client calls it.
struct Served {
    api: &'static str,
    id: &'static str,
    method: Method,
    /// Under the API's endpoint.
    path: &'static str,
    /// The request field the body binds to in Google's messages (Filestore's
    /// `instance`), or "" when the body is the whole request.
    root: &'static str,
}

const fn served(
    api: &'static str,
    id: &'static str,
    method: Method,
    path: &'static str,
    root: &'static str,
) -> Served {
    Served {
        api,
        id,
        method,
        path,
        root,
    }
}

/// Every method the sandbox serves that takes a request body.
fn served_methods() -> Vec<Served> {
    vec![
        served(
            "container",
            "container.projects.locations.clusters.create",
            Method::POST,
            "v1/projects/proj/locations/us-central1/clusters",
            "",
        ),
        served(
            "container",
            "container.projects.zones.clusters.create",
            Method::POST,
            "v1/projects/proj/zones/us-central1-a/clusters",
            "",
        ),
        served(
            "container",
            "container.projects.locations.clusters.update",
            Method::PUT,
            "v1/projects/proj/locations/us-central1/clusters/c1",
            "",
        ),
        served(
            "container",
            "container.projects.zones.clusters.update",
            Method::PUT,
            "v1/projects/proj/zones/us-central1-a/clusters/c1",
            "",
        ),
        served(
            "container",
            "container.projects.locations.clusters.setResourceLabels",
            Method::POST,
            "v1/projects/proj/locations/us-central1/clusters/c1:setResourceLabels",
            "",
        ),
        served(
            "container",
            "container.projects.zones.clusters.resourceLabels",
            Method::POST,
            "v1/projects/proj/zones/us-central1-a/clusters/c1/resourceLabels",
            "",
        ),
        served(
            "container",
            "container.projects.locations.clusters.nodePools.create",
            Method::POST,
            "v1/projects/proj/locations/us-central1/clusters/c1/nodePools",
            "",
        ),
        served(
            "container",
            "container.projects.zones.clusters.nodePools.create",
            Method::POST,
            "v1/projects/proj/zones/us-central1-a/clusters/c1/nodePools",
            "",
        ),
        served(
            "container",
            "container.projects.locations.clusters.nodePools.update",
            Method::PUT,
            "v1/projects/proj/locations/us-central1/clusters/c1/nodePools/p1",
            "",
        ),
        served(
            "container",
            "container.projects.zones.clusters.nodePools.update",
            Method::POST,
            "v1/projects/proj/zones/us-central1-a/clusters/c1/nodePools/p1/update",
            "",
        ),
        served(
            "container",
            "container.projects.locations.clusters.nodePools.setAutoscaling",
            Method::POST,
            "v1/projects/proj/locations/us-central1/clusters/c1/nodePools/p1:setAutoscaling",
            "",
        ),
        served(
            "container",
            "container.projects.zones.clusters.nodePools.autoscaling",
            Method::POST,
            "v1/projects/proj/zones/us-central1-a/clusters/c1/nodePools/p1/autoscaling",
            "",
        ),
        served(
            "container",
            "container.projects.locations.clusters.nodePools.setSize",
            Method::POST,
            "v1/projects/proj/locations/us-central1/clusters/c1/nodePools/p1:setSize",
            "",
        ),
        served(
            "container",
            "container.projects.zones.clusters.nodePools.setSize",
            Method::POST,
            "v1/projects/proj/zones/us-central1-a/clusters/c1/nodePools/p1/setSize",
            "",
        ),
        served(
            "container",
            "container.projects.locations.clusters.nodePools.setManagement",
            Method::POST,
            "v1/projects/proj/locations/us-central1/clusters/c1/nodePools/p1:setManagement",
            "",
        ),
        served(
            "container",
            "container.projects.zones.clusters.nodePools.setManagement",
            Method::POST,
            "v1/projects/proj/zones/us-central1-a/clusters/c1/nodePools/p1/setManagement",
            "",
        ),
        served(
            "file",
            "file.projects.locations.instances.create",
            Method::POST,
            "v1/projects/proj/locations/us-central1-a/instances?instanceId=nfs1",
            "instance",
        ),
        served(
            "file",
            "file.projects.locations.instances.patch",
            Method::PATCH,
            "v1/projects/proj/locations/us-central1-a/instances/nfs1?updateMask=description",
            "instance",
        ),
        served(
            "storage",
            "storage.buckets.insert",
            Method::POST,
            "storage/v1/b?project=proj",
            "",
        ),
        served(
            "storage",
            "storage.buckets.patch",
            Method::PATCH,
            "storage/v1/b/bucket1",
            "",
        ),
        served(
            "serviceusage",
            "serviceusage.services.enable",
            Method::POST,
            "v1/projects/proj/services/pubsub.googleapis.com:enable",
            "",
        ),
        served(
            "serviceusage",
            "serviceusage.services.disable",
            Method::POST,
            "v1/projects/proj/services/pubsub.googleapis.com:disable",
            "",
        ),
        served(
            "storage",
            "storage.buckets.setIamPolicy",
            Method::PUT,
            "storage/v1/b/bucket1/iam",
            "",
        ),
        served(
            "iam",
            "iam.projects.serviceAccounts.create",
            Method::POST,
            "v1/projects/proj/serviceAccounts",
            "",
        ),
        served(
            "iam",
            "iam.projects.serviceAccounts.patch",
            Method::PATCH,
            "v1/projects/proj/serviceAccounts/runner@proj.iam.gserviceaccount.com",
            "",
        ),
        served(
            "iam",
            "iam.projects.serviceAccounts.setIamPolicy",
            Method::POST,
            "v1/projects/proj/serviceAccounts/runner@proj.iam.gserviceaccount.com:setIamPolicy",
            "",
        ),
        served(
            "cloudresourcemanager",
            "cloudresourcemanager.projects.getIamPolicy",
            Method::POST,
            "v3/projects/proj:getIamPolicy",
            "",
        ),
        served(
            "cloudresourcemanager",
            "cloudresourcemanager.projects.setIamPolicy",
            Method::POST,
            "v3/projects/proj:setIamPolicy",
            "",
        ),
    ]
}

fn endpoint(sandbox: &Sandbox, api: &str) -> String {
    let e = sandbox.gcp_endpoints();
    match api {
        "container" => e.container,
        "file" => e.file,
        "storage" => e.storage,
        "serviceusage" => e.serviceusage,
        "iam" => e.iam,
        "cloudresourcemanager" => e.cloudresourcemanager,
        other => panic!("no endpoint for {other}"),
    }
}

async fn send(method: Method, url: &str, body: &Value) -> (StatusCode, Value) {
    let resp = reqwest::Client::new()
        .request(method, url)
        .bearer_auth("test-token")
        .json(body)
        .send()
        .await
        .expect("request reaches the sandbox");
    let status = resp.status();
    let text = resp.text().await.expect("response body");
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, body)
}

fn message(body: &Value) -> String {
    body["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// A well-typed sample of everything discovery property `prop` can hold, to `depth`
/// more messages; counts the fields set in `fields`.
fn sample(
    doc: &Value,
    api: &str,
    name: &str,
    prop: &Value,
    depth: usize,
    fields: &mut usize,
) -> Value {
    if let Some(reference) = prop["$ref"].as_str() {
        return sample_object(doc, api, &doc["schemas"][reference], depth, fields);
    }
    let format = prop["format"].as_str().unwrap_or("");
    match prop["type"].as_str().unwrap_or("") {
        "string" => {
            if let Some(values) = prop["enum"].as_array() {
                // The last value: never the zero value proto3 would drop.
                return values.last().cloned().unwrap_or(json!(""));
            }
            match (format, api, name) {
                ("int64" | "uint64", _, _) => json!("7"),
                ("google-datetime" | "date-time", _, _) => json!("2024-01-02T03:04:05Z"),
                ("google-duration", _, _) => json!("60s"),
                ("byte", _, _) => json!("AAAA"),
                // Storage lists these values in prose; the sandbox holds requests to them.
                (_, "storage", "storageClass") => json!("NEARLINE"),
                (_, "storage", "publicAccessPrevention") => json!("enforced"),
                _ => json!("sample"),
            }
        }
        "integer" => json!(3),
        "number" => json!(1.5),
        "boolean" => json!(true),
        "any" => json!("sample"),
        "array" => json!([sample(doc, api, name, &prop["items"], depth, fields)]),
        "object" if prop["properties"].is_object() => sample_object(doc, api, prop, depth, fields),
        "object" if prop["additionalProperties"].is_object() => {
            json!({"key": sample(doc, api, name, &prop["additionalProperties"], depth, fields)})
        }
        _ => json!({}),
    }
}

fn sample_object(
    doc: &Value,
    api: &str,
    schema: &Value,
    depth: usize,
    fields: &mut usize,
) -> Value {
    let mut out = Map::new();
    if depth == 0 {
        return Value::Object(out);
    }
    for (name, prop) in schema["properties"].as_object().into_iter().flatten() {
        *fields += 1;
        out.insert(
            name.clone(),
            sample(doc, api, name, prop, depth - 1, fields),
        );
    }
    Value::Object(out)
}

fn snake(camel: &str) -> String {
    camel
        .chars()
        .flat_map(|c| {
            if c.is_ascii_uppercase() {
                vec!['_', c.to_ascii_lowercase()]
            } else {
                vec![c]
            }
        })
        .collect()
}

/// The properties of message `name` of `doc`: a schema, or a dotted path to an inline
/// object (`Bucket.iamConfiguration`), through arrays and maps.
fn properties<'a>(doc: &'a Value, name: &str) -> Option<&'a Map<String, Value>> {
    let mut parts = name.split('.');
    let mut schema = &doc["schemas"][parts.next()?];
    for part in parts {
        schema = &schema["properties"][part];
        while schema["properties"].is_null() {
            if schema["items"].is_object() {
                schema = &schema["items"];
            } else if schema["additionalProperties"].is_object() {
                schema = &schema["additionalProperties"];
            } else {
                return None;
            }
        }
    }
    schema["properties"].as_object()
}

#[test]
fn embedded_discovery_documents_are_the_contracts() {
    let apis = discovery::apis();
    assert_eq!(apis.len(), 6, "{apis:?}");
    for (api, contract) in apis {
        let embedded = discovery::source(api).expect("the embedded document inflates");
        assert!(
            embedded == terrain_contracts::bytes(contract),
            "{api}: the embedded document differs from contract {contract}"
        );
    }
}

#[test]
fn every_field_tables_names_is_in_the_discovery_documents() {
    let mut checked = 0;
    let mut problems = Vec::new();
    for profile in tables::PROFILES {
        let doc = contract(profile.api);
        let mut has = |message: &str, field: &str| {
            checked += 1;
            if !properties(&doc, message).is_some_and(|p| p.contains_key(field)) {
                problems.push(format!("{}: {message}.{field}", profile.api));
            }
        };
        for (message, fields) in profile.emulated {
            for field in *fields {
                has(message, field);
            }
        }
        for key in profile
            .output_only
            .iter()
            .chain(profile.enums.iter().map(|(k, _)| k))
        {
            let (message, field) = key.rsplit_once('.').expect("schema.field");
            has(message, field);
        }
        for (key, _) in profile.proto_names {
            match key.rsplit_once('.') {
                Some((message, field)) => has(message, field),
                // A schema: its first property stands for it.
                None => {
                    let first = properties(&doc, key)
                        .and_then(|p| p.keys().next().cloned())
                        .unwrap_or_default();
                    has(key, &first)
                }
            }
        }
    }
    assert!(
        problems.is_empty(),
        "not in discovery:\n{}",
        problems.join("\n")
    );
    assert!(checked > 150, "only {checked} entries checked");
}

/// Every field of every served method's request schema (to `DEPTH` messages) is accepted:
/// the answer is never Google's refusal of an unknown name or an ill-typed value, and a
/// body setting fields the sandbox does not emulate is answered UNIMPLEMENTED naming
/// fields the document has. A made-up field is refused with Google's message, at the
/// top and one message down.
#[tokio::test]
async fn every_request_field_of_every_served_method_is_accepted_and_no_other() {
    let sandbox = Sandbox::start(Options {
        timing: Timing::instant(),
        ..Options::google_apis_on()
    })
    .await
    .expect("sandbox starts");
    let mut walked_fields = 0;
    let mut named = 0;
    let mut unimplemented = 0;
    let mut problems = Vec::new();
    let methods = served_methods();
    for m in &methods {
        let doc = contract(m.api);
        let method =
            find_method(&doc, m.id).unwrap_or_else(|| panic!("{} is not in discovery", m.id));
        assert_eq!(method["httpMethod"], m.method.as_str(), "{}", m.id);
        let schema_name = method["request"]["$ref"]
            .as_str()
            .unwrap_or_else(|| panic!("{} has no request body", m.id));
        let schema = &doc["schemas"][schema_name];
        let url = format!("{}{}", endpoint(&sandbox, m.api), m.path);

        let mut fields = 0;
        let body = sample_object(&doc, m.api, schema, DEPTH, &mut fields);
        walked_fields += fields;
        let (status, answer) = send(m.method.clone(), &url, &body).await;
        let text = message(&answer);
        if text.contains("Unknown name") || text.contains("Invalid value") {
            problems.push(format!("{}: {status} {text}", m.id));
        } else if status == StatusCode::NOT_IMPLEMENTED {
            for line in text.lines() {
                named += 1;
                let field = line
                    .strip_suffix(" is not supported by the sandbox.")
                    .and_then(|l| l.split_once(' '))
                    .map(|(f, _)| f);
                let exists = field
                    .and_then(|f| f.rsplit_once('.'))
                    .is_some_and(|(msg, f)| {
                        properties(&doc, msg).is_some_and(|p| p.contains_key(f))
                    });
                if !exists {
                    problems.push(format!("{}: {line:?} names no field of the document", m.id));
                }
            }
            unimplemented += 1;
        } else if status == StatusCode::BAD_REQUEST && answer["error"]["details"].is_array() {
            // Field violations come only from reading the body.
            problems.push(format!("{}: {status} {text}", m.id));
        }

        let prefix = |at: &str| {
            if at.is_empty() {
                String::new()
            } else {
                format!(" at '{at}'")
            }
        };
        let mut bad = body.clone();
        bad["madeUpField"] = json!(1);
        let (status, answer) = send(m.method.clone(), &url, &bad).await;
        let want = format!(
            "Invalid JSON payload received. Unknown name \"madeUpField\"{}: Cannot find field.",
            prefix(m.root)
        );
        if status != StatusCode::BAD_REQUEST || !message(&answer).lines().any(|l| l == want) {
            problems.push(format!(
                "{}: made-up field: {status} {}",
                m.id,
                message(&answer)
            ));
        }
        // One message down: the first field whose value is a message.
        let nested = schema["properties"]
            .as_object()
            .into_iter()
            .flatten()
            .find(|(_, p)| p["$ref"].is_string());
        if let Some((name, _)) = nested {
            let mut bad = json!({});
            bad[name] = json!({"madeUpField": 1});
            let at = if m.root.is_empty() {
                snake(name)
            } else {
                format!("{}.{}", m.root, snake(name))
            };
            let want = format!(
                "Invalid JSON payload received. Unknown name \"madeUpField\" at '{at}': Cannot find field."
            );
            let (status, answer) = send(m.method.clone(), &url, &bad).await;
            if status != StatusCode::BAD_REQUEST || message(&answer) != want {
                problems.push(format!(
                    "{}: nested made-up field: {status} {}",
                    m.id,
                    message(&answer)
                ));
            }
        }
    }
    sandbox.shutdown().await;
    eprintln!(
        "{} methods, {walked_fields} fields sent, {unimplemented} answers naming {named} fields not emulated",
        methods.len()
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert_eq!(methods.len(), 28);
    // The rest emulate every field they define (serviceusage's, the container
    // set* requests) and answer for the missing cluster.
    assert!(
        unimplemented >= 10,
        "only {unimplemented} answers named unsupported fields"
    );
    assert!(walked_fields > 4000, "only {walked_fields} fields walked");
    assert!(named > 300, "only {named} unsupported fields named");
}

fn find_method<'a>(resource: &'a Value, id: &str) -> Option<&'a Value> {
    for method in resource["methods"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(_, m)| m)
    {
        if method["id"] == id {
            return Some(method);
        }
    }
    resource["resources"]
        .as_object()
        .into_iter()
        .flatten()
        .find_map(|(_, r)| find_method(r, id))
}

fn methods_with_bodies<'a>(resource: &'a Value, out: &mut Vec<&'a Value>) {
    for (_, method) in resource["methods"].as_object().into_iter().flatten() {
        if method["request"].is_object() {
            out.push(method);
        }
    }
    for (_, r) in resource["resources"].as_object().into_iter().flatten() {
        methods_with_bodies(r, out);
    }
}

/// The served list is complete: every other method with a request body of the six
/// documents is answered as a route the sandbox does not implement.
#[tokio::test]
async fn methods_with_bodies_not_listed_as_served_are_not_served() {
    let sandbox = Sandbox::start(Options {
        timing: Timing::instant(),
        ..Options::google_apis_on()
    })
    .await
    .expect("sandbox starts");
    let served: BTreeSet<&str> = served_methods().iter().map(|m| m.id).collect();
    let mut unserved = 0;
    let mut problems = Vec::new();
    for api in [
        "container",
        "file",
        "storage",
        "serviceusage",
        "iam",
        "cloudresourcemanager",
    ] {
        let doc = contract(api);
        let mut methods = Vec::new();
        methods_with_bodies(&doc, &mut methods);
        for method in methods {
            let id = method["id"].as_str().unwrap_or_default();
            if served.contains(id) {
                continue;
            }
            unserved += 1;
            let template = method["flatPath"]
                .as_str()
                .or(method["path"].as_str())
                .unwrap_or_default();
            let mut path = String::new();
            let mut rest = template;
            while let Some(open) = rest.find('{') {
                path.push_str(&rest[..open]);
                path.push_str("x1");
                rest = rest[open..]
                    .find('}')
                    .map_or("", |close| &rest[open + close + 1..]);
            }
            path.push_str(rest);
            let url = format!(
                "{}{}{path}",
                endpoint(&sandbox, api),
                doc["servicePath"].as_str().unwrap_or_default()
            );
            let verb: Method = method["httpMethod"]
                .as_str()
                .unwrap_or("POST")
                .parse()
                .expect("an HTTP method");
            let (status, answer) = send(verb, &url, &json!({})).await;
            if status != StatusCode::NOT_FOUND
                || !message(&answer).contains("The sandbox does not implement")
            {
                problems.push(format!("{id} ({url}): {status} {}", message(&answer)));
            }
        }
    }
    sandbox.shutdown().await;
    assert!(
        problems.is_empty(),
        "served but not listed:\n{}",
        problems.join("\n")
    );
    eprintln!("{unserved} methods with bodies not served");
    assert!(unserved > 60, "only {unserved} methods checked");
}

// ------------------------------------------------------------ clusters update

/// `gcloud container clusters update C --node-pool P --enable-autoscaling --min-nodes 1
/// --max-nodes 5` sends `desiredNodePoolId` and `desiredNodePoolAutoscaling` in a
/// ClusterUpdate; the sandbox once refused them as unknown.
#[tokio::test]
async fn clusters_update_node_pool_autoscaling_is_accepted() {
    let sandbox = Sandbox::start(Options {
        timing: Timing::instant(),
        ..Options::google_apis_on()
    })
    .await
    .expect("sandbox starts");
    let clusters = format!(
        "{}v1/projects/{PROJECT}/locations/us-central1/clusters",
        sandbox.gcp_endpoints().container
    );
    let create = json!({"cluster": {"name": "c1", "nodePools": [
        {"name": "workers", "initialNodeCount": 1, "config": {"machineType": "e2-standard-4"}},
        {"name": "other", "initialNodeCount": 1, "config": {"machineType": "e2-standard-4"}},
    ]}});
    let (status, op) = send(Method::POST, &clusters, &create).await;
    assert_eq!(status, StatusCode::OK, "{op}");
    wait(&sandbox, &op).await;

    let cluster = format!("{clusters}/c1");
    let update = json!({
        "name": format!("projects/{PROJECT}/locations/us-central1/clusters/c1"),
        "update": {
            "desiredNodePoolId": "workers",
            "desiredNodePoolAutoscaling": {"enabled": true, "minNodeCount": 1, "maxNodeCount": 5},
        },
    });
    let (status, op) = send(Method::PUT, &cluster, &update).await;
    assert_eq!(status, StatusCode::OK, "{op}");
    assert_eq!(op["operationType"], "UPDATE_CLUSTER");
    assert_eq!(discovery::conforms("container", "Operation", &op), Ok(()));
    let done = wait(&sandbox, &op).await;
    assert!(done.get("error").is_none(), "{done}");

    let (_, pool) = send(
        Method::GET,
        &format!("{cluster}/nodePools/workers"),
        &Value::Null,
    )
    .await;
    assert_eq!(
        pool["autoscaling"],
        json!({"enabled": true, "minNodeCount": 1, "maxNodeCount": 5}),
        "{pool}"
    );
    assert_eq!(discovery::conforms("container", "NodePool", &pool), Ok(()));
    let (_, other) = send(
        Method::GET,
        &format!("{cluster}/nodePools/other"),
        &Value::Null,
    )
    .await;
    assert!(
        other.get("autoscaling").is_none(),
        "the other pool changed: {other}"
    );

    // As nodePools.setAutoscaling answers: a missing pool is NOT_FOUND, and so is
    // bad limits INVALID_ARGUMENT; without a pool id the request is invalid.
    let cases = [
        (
            json!({"desiredNodePoolId": "nope", "desiredNodePoolAutoscaling": {"enabled": true, "maxNodeCount": 2}}),
            StatusCode::NOT_FOUND,
            "Not found: projects/proj/locations/us-central1/clusters/c1/nodePools/nope.",
        ),
        (
            json!({"desiredNodePoolAutoscaling": {"enabled": true, "maxNodeCount": 2}}),
            StatusCode::BAD_REQUEST,
            "update.desired_node_pool_id must be set to change update.desired_node_pool_autoscaling.",
        ),
        (
            json!({"desiredNodePoolId": "workers", "desiredNodePoolAutoscaling": {"enabled": true, "minNodeCount": 4, "maxNodeCount": 2}}),
            StatusCode::BAD_REQUEST,
            "update.desired_node_pool_autoscaling: autoscaling limits must satisfy 0 <= min (4) <= max (2) and max >= 1.",
        ),
        (
            json!({"desiredNodePoolId": "workers", "desiredImageType": "UBUNTU_CONTAINERD"}),
            StatusCode::NOT_IMPLEMENTED,
            "ClusterUpdate.desiredImageType (update.desired_image_type) is not supported by the sandbox.",
        ),
    ];
    for (update, want_status, want) in cases {
        let (status, answer) = send(Method::PUT, &cluster, &json!({"update": update})).await;
        assert_eq!(
            (status, message(&answer).as_str()),
            (want_status, want),
            "{update}"
        );
    }
    // Disabling goes through the same way.
    let off = json!({"update": {"desiredNodePoolId": "workers", "desiredNodePoolAutoscaling": {}}});
    let (status, op) = send(Method::PUT, &cluster, &off).await;
    assert_eq!(status, StatusCode::OK, "{op}");
    wait(&sandbox, &op).await;
    let (_, pool) = send(
        Method::GET,
        &format!("{cluster}/nodePools/workers"),
        &Value::Null,
    )
    .await;
    assert_eq!(pool["autoscaling"], json!({}), "{pool}");
    sandbox.shutdown().await;
}

/// Polls a GKE operation until DONE.
async fn wait(sandbox: &Sandbox, op: &Value) -> Value {
    let url = format!(
        "{}v1/projects/{PROJECT}/locations/{}/operations/{}",
        sandbox.gcp_endpoints().container,
        op["location"].as_str().expect("location"),
        op["name"].as_str().expect("name")
    );
    for _ in 0..200 {
        let (_, now) = send(Method::GET, &url, &Value::Null).await;
        if now["status"] == "DONE" {
            return now;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("operation {op} never finished");
}
