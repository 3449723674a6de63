//! The S3 state backend against the shared conformance suite, on the sandbox's S3 and
//! on moto, plus what only a remote store can get wrong: a writer whose version was
//! replaced is refused, a state PUT whose answer was lost is retried without a fork, a
//! 503 burst is ridden out, a bucket without versions is refused unless allowed, the
//! state object is encrypted, and a lock taken by another process names its holder.

use crate::support::aws as aws_support;
use crate::support::moto_proxy;

use aws_sdk_s3::types::{BucketVersioningStatus, VersioningConfiguration};
use serde_json::json;
use terrain::state::s3::{S3Backend, S3Settings};
use terrain::state::{conformance, Backend, LockInfo, State, StateError};
use terrain_sandbox::{Options, Sandbox, Timing};

/// Where the buckets are: the sandbox (signed with its credentials) or moto.
struct Store {
    endpoint: String,
    sandbox: bool,
}

impl Store {
    fn settings(&self, bucket: &str, key: &str) -> S3Settings {
        S3Settings {
            bucket: bucket.to_string(),
            key: key.to_string(),
            region: Some("us-east-1".to_string()),
            endpoint: Some(self.endpoint.clone()),
            kms_key_id: None,
            allow_unversioned: false,
            sandbox: self.sandbox,
            create_bucket: false,
        }
    }

    async fn client(&self) -> aws_sdk_s3::Client {
        let config =
            json!({"region": "us-east-1", "endpoint": self.endpoint, "sandbox": self.sandbox});
        terrain_providers::aws::config::s3(&aws_support::ctx("test", config))
            .await
            .expect("S3 client")
    }

    /// A new bucket, keeping versions when `versioned`.
    async fn bucket(&self, name: &str, versioned: bool) {
        let client = self.client().await;
        client
            .create_bucket()
            .bucket(name)
            .send()
            .await
            .expect("create the bucket");
        if versioned {
            client
                .put_bucket_versioning()
                .bucket(name)
                .versioning_configuration(
                    VersioningConfiguration::builder()
                        .status(BucketVersioningStatus::Enabled)
                        .build(),
                )
                .send()
                .await
                .expect("enable versioning");
        }
    }
}

/// The S3 backend of `settings`, with the test's own AWS environment.
fn backend(settings: S3Settings) -> S3Backend {
    S3Backend::in_env(settings, aws_support::env())
}

async fn sandbox() -> (Sandbox, Store) {
    let sandbox = Sandbox::start(Options {
        timing: Timing::instant(),
        ..Options::google_apis_on()
    })
    .await
    .expect("start the sandbox");
    let store = Store {
        endpoint: sandbox.url(),
        sandbox: true,
    };
    (sandbox, store)
}

fn moto() -> (aws_support::Moto, moto_proxy::MotoProxy, Store) {
    let moto = aws_support::Moto::start();
    let proxy = moto_proxy::MotoProxy::start(&moto.url);
    let store = Store {
        endpoint: proxy.url.clone(),
        sandbox: false,
    };
    (moto, proxy, store)
}

#[tokio::test]
async fn s3_backend_passes_conformance_on_the_sandbox() {
    let (_sandbox, store) = sandbox().await;
    store.bucket("team-state", true).await;
    let settings = store.settings("team-state", "ml/stack.json");
    conformance::run(|| backend(settings.clone())).await;
}

#[tokio::test]
async fn s3_backend_passes_conformance_on_moto() {
    let (_moto, _proxy, store) = moto();
    store.bucket("team-state", true).await;
    let settings = store.settings("team-state", "ml/stack.json");
    conformance::run(|| backend(settings.clone())).await;
}

fn state(serial: u64, lineage: &str) -> State {
    let mut s = State::new();
    s.serial = serial;
    s.lineage = lineage.to_string();
    s
}

#[tokio::test]
async fn a_writer_whose_version_was_replaced_is_refused_and_overwrites_nothing() {
    let (_sandbox, store) = sandbox().await;
    store.bucket("team-state", true).await;
    let settings = store.settings("team-state", "stack.json");
    let first = backend(settings.clone());
    first.save(&state(1, "l")).await.expect("first save");

    // Two runs read serial 1; the second saves first (the first one's lock was broken).
    let (a, b) = (backend(settings.clone()), backend(settings.clone()));
    a.load().await.expect("a loads");
    b.load().await.expect("b loads");
    b.save(&state(2, "l")).await.expect("b saves");
    let err = a.save(&state(2, "l-forked")).await.expect_err("a is stale");
    assert!(matches!(err, StateError::Stale { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("s3://team-state/stack.json changed since this run read it"),
        "{err}"
    );
    let stored = backend(settings)
        .load()
        .await
        .expect("load")
        .expect("state");
    assert_eq!(
        (stored.serial, stored.lineage.as_str()),
        (2, "l"),
        "b's state stands"
    );
}

#[tokio::test]
async fn a_state_put_whose_answer_was_lost_is_retried_without_a_fork() {
    let (sandbox, store) = sandbox().await;
    store.bucket("team-state", true).await;
    let settings = store.settings("team-state", "stack.json");
    let backend = backend(settings.clone());
    backend.load().await.expect("load");
    backend.save(&state(1, "l")).await.expect("first save");
    // The next PUT lands but its answer is a 503: the SDK sends it again, now against
    // an ETag that moved; the backend finds its own write there.
    sandbox.faults().fail_after_effect(1);
    backend
        .save(&state(2, "l"))
        .await
        .expect("a retried save succeeds");
    assert_eq!(
        sandbox.faults().spec().fail_after_effect,
        None,
        "the PUT's answer was lost"
    );
    backend
        .save(&state(3, "l"))
        .await
        .expect("and the next one too");
    let client = store.client().await;
    let versions = client
        .list_object_versions()
        .bucket("team-state")
        .prefix("stack.json")
        .send()
        .await
        .expect("list versions");
    let serials: Vec<u64> = {
        let mut out = Vec::new();
        for v in versions.versions() {
            let got = client
                .get_object()
                .bucket("team-state")
                .key("stack.json")
                .version_id(v.version_id().unwrap_or_default())
                .send()
                .await
                .expect("get a version");
            let bytes = got.body.collect().await.expect("body").into_bytes();
            let s: State = serde_json::from_slice(&bytes).expect("a state");
            assert_eq!(s.lineage, "l");
            out.push(s.serial);
        }
        out.sort_unstable();
        out
    };
    assert_eq!(serials, vec![1, 2, 3], "one version per save, none forked");
}

#[tokio::test]
async fn a_503_burst_is_ridden_out() {
    let (sandbox, store) = sandbox().await;
    store.bucket("team-state", true).await;
    let backend = backend(store.settings("team-state", "stack.json"));
    backend.load().await.expect("load");
    sandbox.faults().burst(503, 2, 0);
    backend
        .save(&state(1, "l"))
        .await
        .expect("saved after the burst");
    assert_eq!(
        sandbox.faults().spec().burst,
        None,
        "the burst was answered"
    );
    assert_eq!(
        backend.load().await.expect("load").map(|s| s.serial),
        Some(1)
    );
}

#[tokio::test]
async fn a_bucket_without_versions_is_refused_unless_allowed() {
    let (_sandbox, store) = sandbox().await;
    store.bucket("plain", false).await;
    let mut settings = store.settings("plain", "stack.json");
    let err = backend(settings.clone()).load().await.expect_err("refused");
    assert!(matches!(err, StateError::Unversioned { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("bucket plain does not keep object versions"),
        "{text}"
    );
    assert!(text.contains("allow_unversioned = true"), "{text}");
    settings.allow_unversioned = true;
    let backend = backend(settings);
    assert!(backend.load().await.expect("allowed").is_none());
    backend.save(&state(1, "l")).await.expect("save");
}

#[tokio::test]
async fn the_state_object_is_encrypted_at_rest() {
    let (_sandbox, store) = sandbox().await;
    store.bucket("team-state", true).await;
    let mut settings = store.settings("team-state", "stack.json");
    backend(settings.clone())
        .save(&state(1, "l"))
        .await
        .expect("save");
    let client = store.client().await;
    let head = client
        .head_object()
        .bucket("team-state")
        .key("stack.json")
        .send()
        .await
        .expect("head");
    assert_eq!(
        head.server_side_encryption().map(|s| s.as_str()),
        Some("AES256")
    );

    settings.key = "kms.json".into();
    settings.kms_key_id = Some("arn:aws:kms:us-east-1:123456789012:key/terrain-state".into());
    backend(settings).save(&state(1, "l")).await.expect("save");
    let head = client
        .head_object()
        .bucket("team-state")
        .key("kms.json")
        .send()
        .await
        .expect("head");
    assert_eq!(
        head.server_side_encryption().map(|s| s.as_str()),
        Some("aws:kms")
    );
    assert_eq!(
        head.ssekms_key_id(),
        Some("arn:aws:kms:us-east-1:123456789012:key/terrain-state")
    );
}

#[tokio::test]
async fn a_lock_held_elsewhere_names_its_holder_and_the_unlock_command() {
    let (_sandbox, store) = sandbox().await;
    store.bucket("team-state", true).await;
    let settings = store.settings("team-state", "stack.json");
    let holder = LockInfo {
        id: "7d1c0c52-1111-4222-8333-944455556666".into(),
        who: "ci@runner-7".into(),
        pid: 4242,
        operation: "apply".into(),
        created: "2026-11-26T10:00:00Z".into(),
        lease: None,
    };
    backend(settings.clone()).lock(&holder).await.expect("lock");
    let err = backend(settings.clone())
        .lock(&LockInfo::new("apply"))
        .await
        .expect_err("held");
    let text = err.to_string();
    assert!(
        text.contains("s3://team-state/stack.json is locked by ci@runner-7 (pid 4242) for `apply`"),
        "{text}"
    );
    assert!(
        text.contains("terrain force-unlock 7d1c0c52-1111-4222-8333-944455556666"),
        "{text}"
    );
    backend(settings.clone())
        .force_unlock(&holder.id)
        .await
        .expect("force-unlock");
    assert!(backend(settings).lock_info().await.expect("info").is_none());
}
