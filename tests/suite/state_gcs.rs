//! The GCS state backend against the shared conformance suite on the sandbox's Cloud
//! Storage, plus what only a remote store can get wrong: a writer whose generation was
//! replaced is refused, an upload whose answer was lost is retried without a fork, a
//! 503 burst is ridden out, a bucket without versions is refused unless allowed, and a
//! lock taken by another process names its holder.

use serde_json::json;
use terrain::state::gcs::{GcsBackend, GcsSettings};
use terrain::state::{conformance, Backend, LockInfo, State, StateError};
use terrain_providers::gcp::config::GcpConfig;
use terrain_sandbox::{Options, Sandbox, Timing};

const TOKEN: &str = "terrain-test-token";

async fn sandbox() -> Sandbox {
    Sandbox::start(Options {
        timing: Timing::instant(),
        ..Options::google_apis_on()
    })
    .await
    .expect("start the sandbox")
}

/// Settings for `prefix` in `bucket` on `sandbox`, the bucket made (versioned) on
/// first use, and the Google settings to reach it.
fn settings(sandbox: &Sandbox, bucket: &str, prefix: &str) -> (GcsSettings, GcpConfig) {
    let gcs = GcsSettings {
        bucket: bucket.to_string(),
        prefix: prefix.to_string(),
        name: "default".to_string(),
        kms_key_name: None,
        allow_unversioned: false,
        create_in_project: Some("team-project".to_string()),
    };
    (gcs, config(sandbox))
}

/// The Google settings of the sandbox's storage: its endpoint, a token, quick retries.
fn config(sandbox: &Sandbox) -> GcpConfig {
    let table = json!({
        "endpoints": {"storage": format!("{}/storage/", sandbox.url())},
        "retry_base_delay": "20ms",
    });
    GcpConfig::resolve(&table, &|k| {
        (k == "GOOGLE_OAUTH_ACCESS_TOKEN").then(|| TOKEN.to_string())
    })
    .expect("Google settings")
}

fn backend(settings: &(GcsSettings, GcpConfig)) -> GcsBackend {
    GcsBackend::new(settings.0.clone(), settings.1.clone()).expect("a GCS backend")
}

fn state(serial: u64, lineage: &str) -> State {
    let mut s = State::new();
    s.serial = serial;
    s.lineage = lineage.to_string();
    s
}

/// The generations of `object` the bucket keeps, oldest first, with their serials.
async fn versions(sandbox: &Sandbox, bucket: &str, object: &str) -> Vec<u64> {
    let http = reqwest::Client::new();
    let list: serde_json::Value = http
        .get(format!("{}/storage/storage/v1/b/{bucket}/o", sandbox.url()))
        .query(&[("versions", "true"), ("prefix", object)])
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("list")
        .json()
        .await
        .expect("list JSON");
    let mut out = Vec::new();
    for item in list["items"].as_array().into_iter().flatten() {
        if item["name"] != json!(object) {
            continue;
        }
        let bytes = http
            .get(format!(
                "{}/storage/storage/v1/b/{bucket}/o/{}",
                sandbox.url(),
                object.replace('/', "%2F")
            ))
            .query(&[
                ("alt", "media"),
                (
                    "generation",
                    item["generation"].as_str().unwrap_or_default(),
                ),
            ])
            .bearer_auth(TOKEN)
            .send()
            .await
            .expect("get a generation")
            .bytes()
            .await
            .expect("body");
        let s: State = serde_json::from_slice(&bytes).expect("a state");
        out.push(s.serial);
    }
    out
}

#[tokio::test]
async fn gcs_backend_passes_conformance_on_the_sandbox() {
    let sandbox = sandbox().await;
    let settings = settings(&sandbox, "team-state", "ml/stack");
    conformance::run(|| backend(&settings)).await;
}

#[tokio::test]
async fn gcs_writer_whose_generation_was_replaced_is_refused_and_overwrites_nothing() {
    let sandbox = sandbox().await;
    let settings = settings(&sandbox, "team-state", "stack");
    backend(&settings)
        .save(&state(1, "l"))
        .await
        .expect("first save");
    let (a, b) = (backend(&settings), backend(&settings));
    a.load().await.expect("a loads");
    b.load().await.expect("b loads");
    b.save(&state(2, "l")).await.expect("b saves");
    let err = a.save(&state(2, "l-forked")).await.expect_err("a is stale");
    assert!(matches!(err, StateError::Stale { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("gs://team-state/stack/default.json changed since this run read it"),
        "{err}"
    );
    let stored = backend(&settings)
        .load()
        .await
        .expect("load")
        .expect("state");
    assert_eq!((stored.serial, stored.lineage.as_str()), (2, "l"));
}

#[tokio::test]
async fn gcs_upload_whose_answer_was_lost_is_retried_without_a_fork() {
    let sandbox = sandbox().await;
    let settings = settings(&sandbox, "team-state", "stack");
    let b = backend(&settings);
    b.load().await.expect("load");
    b.save(&state(1, "l")).await.expect("first save");
    sandbox.faults().fail_after_effect(1);
    b.save(&state(2, "l"))
        .await
        .expect("a retried save succeeds");
    assert_eq!(
        sandbox.faults().spec().fail_after_effect,
        None,
        "the answer was lost"
    );
    b.save(&state(3, "l")).await.expect("and the next one too");
    assert_eq!(
        versions(&sandbox, "team-state", "stack/default.json").await,
        vec![1, 2, 3],
        "one generation per save, none forked"
    );
}

#[tokio::test]
async fn gcs_503_burst_is_ridden_out() {
    let sandbox = sandbox().await;
    let settings = settings(&sandbox, "team-state", "stack");
    let b = backend(&settings);
    b.load().await.expect("load");
    sandbox.faults().burst(503, 3, 0);
    b.save(&state(1, "l")).await.expect("saved after the burst");
    assert_eq!(
        sandbox.faults().spec().burst,
        None,
        "the burst was answered"
    );
    assert_eq!(b.load().await.expect("load").map(|s| s.serial), Some(1));
}

#[tokio::test]
async fn gcs_bucket_without_versions_is_refused_unless_allowed() {
    let sandbox = sandbox().await;
    reqwest::Client::new()
        .post(format!("{}/storage/storage/v1/b", sandbox.url()))
        .query(&[("project", "team-project")])
        .bearer_auth(TOKEN)
        .json(&json!({"name": "plain-state"}))
        .send()
        .await
        .expect("create")
        .error_for_status()
        .expect("created");
    let mut settings = settings(&sandbox, "plain-state", "stack");
    let err = backend(&settings).load().await.expect_err("refused");
    let text = err.to_string();
    assert!(matches!(err, StateError::Unversioned { .. }), "{text}");
    assert!(
        text.contains("gcloud storage buckets update gs://plain-state --versioning")
            && text.contains("[backend.gcs]"),
        "{text}"
    );
    settings.0.allow_unversioned = true;
    let b = backend(&settings);
    assert!(b.load().await.expect("allowed").is_none());
    b.save(&state(1, "l")).await.expect("save");
}

#[tokio::test]
async fn gcs_lock_held_elsewhere_names_its_holder_and_the_unlock_command() {
    let sandbox = sandbox().await;
    let settings = settings(&sandbox, "team-state", "stack");
    let holder = LockInfo {
        id: "0b9f7c1e-2222-4333-8444-a55566667777".into(),
        who: "ci@runner-3".into(),
        pid: 77,
        operation: "destroy".into(),
        created: "2026-11-26T10:00:00Z".into(),
        lease: None,
    };
    backend(&settings).lock(&holder).await.expect("lock");
    let err = backend(&settings)
        .lock(&LockInfo::new("apply"))
        .await
        .expect_err("held");
    let text = err.to_string();
    assert!(
        text.contains(
            "gs://team-state/stack/default.json is locked by ci@runner-3 (pid 77) for `destroy`"
        ),
        "{text}"
    );
    assert!(
        text.contains("terrain force-unlock 0b9f7c1e-2222-4333-8444-a55566667777"),
        "{text}"
    );
    backend(&settings)
        .force_unlock(&holder.id)
        .await
        .expect("force-unlock");
    assert!(backend(&settings)
        .lock_info()
        .await
        .expect("info")
        .is_none());
}

#[tokio::test]
async fn gcs_state_is_written_with_the_customer_managed_key() {
    let sandbox = sandbox().await;
    let mut settings = settings(&sandbox, "team-state", "stack");
    let key = "projects/team-project/locations/us/keyRings/state/cryptoKeys/terrain";
    settings.0.kms_key_name = Some(key.to_string());
    backend(&settings).save(&state(1, "l")).await.expect("save");
    let meta: serde_json::Value = reqwest::Client::new()
        .get(format!(
            "{}/storage/storage/v1/b/team-state/o/stack%2Fdefault.json",
            sandbox.url()
        ))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("get")
        .json()
        .await
        .expect("JSON");
    assert_eq!(
        meta["kmsKeyName"],
        json!(format!("{key}/cryptoKeyVersions/1"))
    );
}
