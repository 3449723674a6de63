//! Every class of failed cloud call, provoked for real against the sandbox, moto and
//! loopback servers, through each way terrain calls a cloud: the S3 and GCS state
//! backends, an AWS SDK client (EKS), a hand-signed AWS client (SageMaker) and the Google
//! client. Each message must name the call, say what happened and what to do, and hold
//! no Rust debug struct, no raw body and no credential.

use std::io::{Read, Write};
use std::net::TcpListener;

use serde_json::json;
use terrain::state::gcs::{GcsBackend, GcsSettings};
use terrain::state::s3::{S3Backend, S3Settings};
use terrain::state::Backend;
use terrain_providers::aws::signed::{Signed, SAGEMAKER};
use terrain_providers::failure::{Hint, Unreachable};
use terrain_providers::gcp::client::{Client, Request};
use terrain_providers::gcp::config::{Api, GcpConfig};
use terrain_providers::{Ctx, ProviderError};
use terrain_sandbox::{Options, Sandbox, Timing};

use crate::support::aws as aws_support;

/// What a test's credentials are; none may appear in a message.
const SECRETS: &[&str] = &[
    "AKIDTERRAINTEST",
    "terrain-test-secret",
    "terrain-test-token-9f3a",
];

/// A loopback port nothing listens on.
fn closed_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("address").port()
}

/// A host name that never resolves (`.invalid` is reserved for that).
const NO_SUCH_HOST: &str = "http://terrain-no-such-host.invalid:9000";

/// A loopback HTTP server answering every request with `status` and `body` (which
/// quotes a secret, to prove bodies are never printed).
fn garbage_server(status: u16, body: &'static str) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("address"));
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let mut buf = [0u8; 65536];
            let _ = stream.read(&mut buf);
            let _ = write!(
                stream,
                "HTTP/1.1 {status} Whatever\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    url
}

const GARBAGE: &str =
    "<html><body>proxy says: AWS_SECRET_ACCESS_KEY=terrain-test-secret</body></html>";

/// Whether `text` holds a Rust debug rendering: `Name { `, `Name(Name(`, `Some("`.
fn debug_struct(text: &str) -> Option<String> {
    let words: Vec<&str> = text.split(' ').collect();
    for (i, w) in words.iter().enumerate() {
        let name = w.trim_start_matches(|c: char| !c.is_ascii_alphanumeric());
        let upper = name.chars().next().is_some_and(|c| c.is_ascii_uppercase());
        if upper
            && words.get(i + 1) == Some(&"{")
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
        {
            return Some(format!("{name} {{"));
        }
        for glued in [
            "(DispatchFailure",
            "(ConnectorError",
            "(Some(",
            "Error(",
            "Kind(",
            "(\"",
            "Some(\"",
        ] {
            if w.contains(glued) && upper {
                return Some(w.to_string());
            }
        }
    }
    None
}

/// Checks one message and returns it for the summary.
fn check(class: &str, call: &str, e: &dyn std::fmt::Display, expect: &[&str]) -> String {
    let text = e.to_string();
    assert!(
        text.contains(call),
        "{class}: the call {call} is named in: {text}"
    );
    if let Some(found) = debug_struct(&text) {
        panic!("{class}: a debug struct ({found}) in: {text}");
    }
    for secret in SECRETS {
        assert!(!text.contains(secret), "{class}: a credential in: {text}");
    }
    assert!(!text.contains("<html"), "{class}: a raw body in: {text}");
    assert!(text.len() < 900, "{class}: {} bytes: {text}", text.len());
    for want in expect {
        assert!(
            text.contains(want),
            "{class}: {want:?} missing from: {text}"
        );
    }
    // Shown with --nocapture, to read the messages as a user would.
    println!("{class}: {text}");
    format!("{class}: {text}")
}

async fn sandbox() -> Sandbox {
    Sandbox::start(Options {
        timing: Timing::instant(),
        ..Options::google_apis_on()
    })
    .await
    .expect("start the sandbox")
}

fn s3_settings(endpoint: &str, sandbox: bool, bucket: &str) -> S3Settings {
    S3Settings {
        bucket: bucket.to_string(),
        key: "x.json".to_string(),
        region: Some("us-east-1".to_string()),
        endpoint: Some(endpoint.to_string()),
        kms_key_id: None,
        allow_unversioned: false,
        sandbox,
        create_bucket: false,
    }
}

async fn s3_load(settings: S3Settings) -> terrain::state::StateError {
    S3Backend::in_env(settings, aws_support::env())
        .load()
        .await
        .err()
        .expect("the load fails")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_state_errors_name_the_call_and_what_to_do() {
    let call = "s3.GetBucketVersioning";
    let refused = format!("http://127.0.0.1:{}", closed_port());
    let e = s3_load(s3_settings(&refused, false, "nope-bucket")).await;
    check(
        "refused",
        call,
        &e,
        &[
            "state s3://nope-bucket/x.json",
            &format!("cannot reach {refused}: connection refused"),
            "check that the endpoint is right",
        ],
    );

    let e = s3_load(s3_settings(NO_SUCH_HOST, false, "nope-bucket")).await;
    check(
        "dns",
        call,
        &e,
        &["does not resolve", "check the host name"],
    );

    let sandbox = sandbox().await;
    let e = s3_load(s3_settings(&sandbox.url(), true, "nope-bucket")).await;
    check(
        "404",
        call,
        &e,
        &[
            "404 NoSuchBucket",
            "put-bucket-versioning --bucket nope-bucket",
        ],
    );

    sandbox.faults().burst(503, 100, 0);
    let e = s3_load(s3_settings(&sandbox.url(), true, "nope-bucket")).await;
    check("throttled", call, &e, &["503 SlowDown", "kept throttling"]);
    sandbox.faults().burst(503, 0, 0);

    // Credentials moto does not know: 403 InvalidAccessKeyId.
    let strict = aws_support::Moto::start_strict();
    let e = s3_load(s3_settings(&strict.url, false, "nope-bucket")).await;
    check(
        "403",
        call,
        &e,
        &["403 InvalidAccessKeyId", "the credentials were refused"],
    );

    // moto 5.2.1's GetBucketVersioning answer has a root element the SDK refuses.
    let moto = aws_support::Moto::start();
    let config = aws_support::config(&moto.url);
    terrain_providers::aws::config::s3(&aws_support::ctx("test", config))
        .await
        .expect("an S3 client")
        .create_bucket()
        .bucket("odd-store")
        .send()
        .await
        .expect("make the bucket");
    let e = s3_load(s3_settings(&moto.url, false, "odd-store")).await;
    check(
        "malformed",
        call,
        &e,
        &[
            "could not be read",
            "expected VersioningConfiguration",
            "S3-compatible ones",
        ],
    );
    assert!(!e.to_string().contains("likely a bug"), "{e}");
}

/// An EKS SDK client for `endpoint` (the sandbox's credentials when `sandbox`).
async fn eks_describe(endpoint: &str, sandbox: bool) -> ProviderError {
    let config =
        json!({"region": "us-east-1", "endpoint": endpoint, "sandbox": sandbox, "max_attempts": 2});
    let client = terrain_providers::aws::config::eks(&aws_support::ctx("eks_cluster.x", config))
        .await
        .expect("an EKS client");
    let err = client
        .describe_cluster()
        .name("nope")
        .send()
        .await
        .err()
        .expect("the call fails");
    terrain_providers::aws::sdk_error("eks:DescribeCluster", err)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aws_sdk_errors_name_the_call_and_what_to_do() {
    let call = "eks:DescribeCluster";
    let e = eks_describe(&format!("http://127.0.0.1:{}", closed_port()), false).await;
    check("refused", call, &e, &["connection refused"]);
    assert!(
        matches!(
            e.hint(),
            Some(Hint::Unreachable {
                how: Unreachable::Refused,
                ..
            })
        ),
        "{e}"
    );

    let e = eks_describe(NO_SUCH_HOST, false).await;
    check("dns", call, &e, &["does not resolve"]);

    let sandbox = sandbox().await;
    let e = eks_describe(&sandbox.url(), true).await;
    check(
        "404",
        call,
        &e,
        &["404 ResourceNotFoundException", "(request id "],
    );

    sandbox.faults().burst(429, 100, 0);
    let e = eks_describe(&sandbox.url(), true).await;
    check(
        "throttled",
        call,
        &e,
        &["429 ThrottlingException", "kept throttling"],
    );
    sandbox.faults().burst(429, 0, 0);

    let strict = aws_support::Moto::start_strict();
    let e = eks_describe(&strict.url, false).await;
    check("403", call, &e, &["403"]);

    let e = eks_describe(&garbage_server(200, GARBAGE), false).await;
    check(
        "malformed",
        call,
        &e,
        &["could not be read", "does not use"],
    );
}

/// DescribePipeline through the hand-signed client at `endpoint`.
async fn sagemaker_describe(endpoint: &str, sandbox: bool) -> ProviderError {
    let config =
        json!({"region": "us-east-1", "endpoint": endpoint, "sandbox": sandbox, "max_attempts": 2});
    let ctx = aws_support::ctx("sagemaker_pipeline.x", config);
    let signed = Signed::new(&ctx, "test", 2).await.expect("a signed client");
    signed
        .json11(
            &SAGEMAKER,
            "us-east-1",
            "DescribePipeline",
            &json!({"PipelineName": "nope"}),
        )
        .await
        .err()
        .expect("the call fails")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aws_signed_errors_name_the_call_and_what_to_do() {
    let call = "sagemaker:DescribePipeline";
    let refused = format!("http://127.0.0.1:{}", closed_port());
    let e = sagemaker_describe(&refused, false).await;
    check(
        "refused",
        call,
        &e,
        &["connection refused", &format!("cannot reach {refused}/")],
    );

    let e = sagemaker_describe(NO_SUCH_HOST, false).await;
    check("dns", call, &e, &["does not resolve"]);

    let sandbox = sandbox().await;
    let e = sagemaker_describe(&sandbox.url(), true).await;
    check("404", call, &e, &["ResourceNotFound"]);

    sandbox.faults().burst(429, 100, 0);
    let e = sagemaker_describe(&sandbox.url(), true).await;
    check(
        "throttled",
        call,
        &e,
        &["ThrottlingException", "kept throttling after 2 attempts"],
    );
    sandbox.faults().burst(429, 0, 0);

    let strict = aws_support::Moto::start_strict();
    let e = sagemaker_describe(&strict.url, false).await;
    check("403", call, &e, &["403", "not in the API's error format"]);

    let e = sagemaker_describe(&garbage_server(200, GARBAGE), false).await;
    check(
        "malformed",
        call,
        &e,
        &["could not be read: not JSON", "does not use"],
    );
    let e = sagemaker_describe(&garbage_server(502, GARBAGE), false).await;
    check("502 page", call, &e, &["502", "an HTML page"]);
}

/// The Google client for a container endpoint at `root`, with a token that must never
/// be printed.
fn google(root: &str, dir: &tempfile::TempDir) -> (Client, Ctx) {
    let token = dir.path().join("token");
    std::fs::write(&token, "terrain-test-token-9f3a\n").expect("token file");
    let table = json!({
        "project": "p",
        "access_token_file": token.display().to_string(),
        "retry_base_delay": "5ms",
        "max_retries": 2,
        "endpoints": {"container": format!("{}/", root.trim_end_matches('/')), "storage": format!("{}/", root.trim_end_matches('/'))},
    });
    let config = GcpConfig::resolve(&table, &|_| None).expect("Google settings");
    (
        Client::new(config).expect("a client"),
        Ctx::new("gke_cluster.x", table),
    )
}

async fn cluster_get(root: &str) -> ProviderError {
    let dir = tempfile::tempdir().expect("tempdir");
    let (client, ctx) = google(root, &dir);
    let req = Request::get(
        "container.projects.locations.clusters.get",
        Api::Container,
        "v1/projects/p/locations/us-central1/clusters/nope",
    );
    client.send(&ctx, &req).await.err().expect("the call fails")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn google_errors_name_the_call_and_what_to_do() {
    let call = "container.projects.locations.clusters.get";
    let e = cluster_get(&format!("http://127.0.0.1:{}", closed_port())).await;
    check(
        "refused",
        call,
        &e,
        &["connection refused", "check that the endpoint"],
    );

    let e = cluster_get(NO_SUCH_HOST).await;
    check("dns", call, &e, &["does not resolve"]);

    let sandbox = sandbox().await;
    let container = sandbox.gcp_endpoints().container;
    let e = cluster_get(&container).await;
    check("404", call, &e, &["404 NOT_FOUND"]);

    sandbox.faults().burst(403, 1, 0);
    let e = cluster_get(&container).await;
    check(
        "403",
        call,
        &e,
        &[
            "403 PERMISSION_DENIED",
            "lacks the permission for container.projects.locations.clusters.get",
        ],
    );

    sandbox.faults().burst(429, 100, 0);
    let e = cluster_get(&container).await;
    check(
        "throttled",
        call,
        &e,
        &["429 RESOURCE_EXHAUSTED", "kept throttling after 3 attempts"],
    );
    sandbox.faults().burst(429, 0, 0);

    let e = cluster_get(&garbage_server(200, GARBAGE)).await;
    check(
        "malformed",
        call,
        &e,
        &["could not be read: not JSON", "does not use"],
    );
    let e = cluster_get(&garbage_server(502, GARBAGE)).await;
    check("502 page", call, &e, &["502 Bad Gateway", "an HTML page"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gcs_state_errors_name_the_call_and_what_to_do() {
    let dir = tempfile::tempdir().expect("tempdir");
    let settings = GcsSettings {
        bucket: "nope-bucket".to_string(),
        prefix: "stack".to_string(),
        name: "default".to_string(),
        kms_key_name: None,
        allow_unversioned: false,
        create_in_project: None,
    };
    let refused = format!("http://127.0.0.1:{}", closed_port());
    let (client, _) = google(&refused, &dir);
    let e = GcsBackend::new(settings.clone(), client.config.clone())
        .expect("a backend")
        .load()
        .await
        .err()
        .expect("the load fails");
    check(
        "refused",
        "storage.buckets.get",
        &e,
        &["state gs://nope-bucket/", "connection refused"],
    );

    let sandbox = sandbox().await;
    let (client, _) = google(&sandbox.gcp_endpoints().storage, &dir);
    let e = GcsBackend::new(settings, client.config.clone())
        .expect("a backend")
        .load()
        .await
        .err()
        .expect("the load fails");
    check(
        "404",
        "storage.buckets.get",
        &e,
        &["404", "bucket nope-bucket does not exist", "--versioning"],
    );
}

#[test]
fn the_debug_struct_check_can_fail() {
    assert!(
        debug_struct("dispatch failure (DispatchFailure(DispatchFailure { source: x }))").is_some()
    );
    assert!(debug_struct("got StartEl { name: Name { local: \"x\" } }").is_some());
    assert!(debug_struct(
        "cannot reach http://x/: connection refused (Connection refused (os error 111))"
    )
    .is_none());
}
