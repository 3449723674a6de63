//! The `s3_bucket` and `s3_object` kinds end to end, once against moto (the third-party
//! AWS emulator) and once against the sandbox's own S3, so neither can drift from the
//! other unnoticed: bucket create (versioning, aws:kms, lifecycle) → read equals spec →
//! update (versioning off is Suspended, tags) → object from a file → re-read → file
//! changed, new content_hash, re-upload with a new ETag → a second create of the key by
//! another address refused → destroy of the non-empty bucket refused without
//! force_destroy → emptied (every version) and deleted with it → gone, delete again Ok.
//! Also: existing buckets adopted or refused in us-east-1 and elsewhere, an object from
//! inline content, and the cost of a no-op refresh counted request by request: exactly
//! HeadBucket and the four setting reads, the lifecycle read only for a bucket with rules.
//!
//! Where moto 5.2.1 differs from real S3 the tests say so: its new buckets have no
//! public access block and no default encryption (S3 gives every new bucket both since
//! 2023; terrain sets the block explicitly at create and reads a missing encryption as
//! S3's default); it does not verify the SHA-256 checksum of an upload; and it names the root
//! element of GetBucketVersioning answers `GetBucketVersioningResponse` instead of
//! `VersioningConfiguration`, which the Rust SDK refuses, so moto is reached through
//! [`MotoProxy`], which corrects that and records request lines for the refresh count.
//! Conditional writes (`If-None-Match: *`, `If-Match`) behave as in S3 in both.

use crate::support::aws as support;
use crate::support::moto_proxy;

use std::collections::BTreeMap;

use moto_proxy::MotoProxy;
use serde_json::{json, Value};
use terrain_providers::aws::s3_bucket::{
    Encryption, LifecycleRule, PublicAccessBlock, S3Bucket, Spec as BucketSpec,
};
use terrain_providers::aws::s3_object::{S3Object, Spec as ObjectSpec};
use terrain_providers::{Ctx, Kind, ProviderError};
use terrain_sandbox::{Options, Sandbox, Timing};

fn ctx(address: &str, url: &str) -> Ctx {
    support::ctx(address, support::config(url))
}

fn bucket_spec(name: &str) -> BucketSpec {
    BucketSpec {
        name: name.into(),
        versioning: true,
        encryption: Encryption {
            algorithm: "aws:kms".into(),
            // The AWS managed key aws/s3: emulators need not know any KMS key.
            kms_key_id: None,
            bucket_key: true,
        },
        public_access_block: PublicAccessBlock {
            block_public_acls: true,
            ignore_public_acls: true,
            block_public_policy: true,
            restrict_public_buckets: true,
        },
        lifecycle: vec![
            LifecycleRule {
                id: "scratch".into(),
                prefix: "tmp/".into(),
                enabled: true,
                expiration_days: Some(7),
                noncurrent_expiration_days: None,
                abort_incomplete_upload_days: None,
            },
            LifecycleRule {
                id: "old-versions".into(),
                prefix: String::new(),
                enabled: true,
                expiration_days: None,
                noncurrent_expiration_days: Some(30),
                abort_incomplete_upload_days: Some(2),
            },
        ],
        tags: BTreeMap::from([("team".to_string(), "ml".to_string())]),
        force_destroy: false,
    }
}

fn plain_bucket(name: &str) -> BucketSpec {
    serde_json::from_value(json!({"name": name})).expect("minimal bucket spec")
}

fn object_spec(bucket: &str, key: &str, source: &std::path::Path) -> ObjectSpec {
    ObjectSpec {
        bucket: bucket.into(),
        key: key.into(),
        source: Some(source.display().to_string()),
        content: None,
        content_type: None,
        metadata: BTreeMap::from([("stage".to_string(), "train".to_string())]),
        content_hash: None,
    }
}

/// The whole life of a bucket and an object in it, against the emulator at `url`.
async fn bucket_and_object_lifecycle(url: &str) -> Result<(), ProviderError> {
    let name = "terrain-s3-lifecycle";
    let bctx = ctx("s3_bucket.data", url);
    let spec = bucket_spec(name);
    let client = terrain_providers::aws::config::s3(&bctx).await?;

    let created = S3Bucket.create(&bctx, &spec).await?;
    assert_eq!(created.id, name);
    assert_eq!(created.spec, spec);
    assert_eq!(created.outputs.arn, format!("arn:aws:s3:::{name}"));
    assert_eq!(created.outputs.region, "us-east-1");
    assert_eq!(created.outputs.url, format!("s3://{name}"));
    assert_eq!(
        created.outputs.domain_name,
        format!("{name}.s3.us-east-1.amazonaws.com")
    );

    let read = S3Bucket
        .read(&bctx, name, Some(&spec))
        .await?
        .expect("the bucket exists");
    assert_eq!(read.outputs, created.outputs);
    // moto gives new buckets no public access block (real S3 turns all four on); create
    // sets it explicitly, so both read back as the spec.
    assert_eq!(read.spec, spec, "read equals spec");

    // Two versions of one object while versioning is on, for force_destroy to find.
    for body in ["v1", "v2"] {
        client
            .put_object()
            .bucket(name)
            .key("tmp/scratch.txt")
            .body(body.as_bytes().to_vec().into())
            .send()
            .await
            .map_err(|e| terrain_providers::aws::sdk_error("s3:PutObject", e))?;
    }

    // Update: versioning off (Suspended), one more tag, lifecycle unchanged.
    let next = BucketSpec {
        versioning: false,
        tags: BTreeMap::from([
            ("team".to_string(), "ml".to_string()),
            ("stage".to_string(), "prod".to_string()),
        ]),
        ..spec.clone()
    };
    let updated = S3Bucket.update(&bctx, name, &read.spec, &next).await?;
    assert_eq!(updated.spec, next);
    let read = S3Bucket
        .read(&bctx, name, Some(&next))
        .await?
        .expect("the bucket exists");
    assert_eq!(read.spec, next, "read equals the updated spec");
    let status = client
        .get_bucket_versioning()
        .bucket(name)
        .send()
        .await
        .map_err(|e| terrain_providers::aws::sdk_error("s3:GetBucketVersioning", e))?;
    assert_eq!(
        status.status().map(|s| s.as_str()),
        Some("Suspended"),
        "versioning off on a versioned bucket is Suspended"
    );
    let tags = client
        .get_bucket_tagging()
        .bucket(name)
        .send()
        .await
        .map_err(|e| terrain_providers::aws::sdk_error("s3:GetBucketTagging", e))?;
    let tags: BTreeMap<&str, &str> = tags
        .tag_set()
        .iter()
        .map(|t| (t.key(), t.value()))
        .collect();
    assert_eq!(
        tags.get("managed-by"),
        Some(&"terrain"),
        "ownership tags kept"
    );
    assert_eq!(tags.get("terrain-address"), Some(&"s3_bucket.data"));
    assert_eq!(tags.get("stage"), Some(&"prod"));

    // An object from a local file.
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("train.csv");
    std::fs::write(&file, "x,y\n1,2\n").expect("write the source");
    let octx = ctx("s3_object.train", url);
    let object = S3Object::prepare(object_spec(name, "data/train.csv", &file))?;
    assert_eq!(object.content_type.as_deref(), Some("text/csv"));
    let first = S3Object.create(&octx, &object).await?;
    let id = format!("{name}/data/train.csv");
    assert_eq!(first.id, id);
    assert_eq!(first.spec, object);
    assert_eq!(first.outputs.size, 8);
    assert_eq!(first.outputs.uri, format!("s3://{name}/data/train.csv"));
    assert_eq!(
        first.outputs.url,
        format!("https://{name}.s3.us-east-1.amazonaws.com/data/train.csv")
    );
    assert!(!first.outputs.etag.is_empty() && !first.outputs.etag.contains('"'));
    // Written while versioning is suspended: the "null" version, reported as none.
    assert_eq!(first.outputs.version_id, None);

    let reread = S3Object
        .read(&octx, &id, Some(&object))
        .await?
        .expect("the object exists");
    assert_eq!(reread.spec, object, "read equals spec");
    assert_eq!(reread.outputs, first.outputs);

    // The create's answer was lost and it runs again: the object is ours, adopted.
    let again = S3Object.create(&octx, &object).await?;
    assert_eq!(again.outputs.etag, first.outputs.etag);

    // The file changes: a new content_hash, and update uploads again.
    std::fs::write(&file, "x,y\n1,2\n3,4\n").expect("rewrite the source");
    let changed = S3Object::prepare(object_spec(name, "data/train.csv", &file))?;
    assert_ne!(changed.content_hash, object.content_hash, "~ content_hash");
    let second = S3Object.update(&octx, &id, &reread.spec, &changed).await?;
    assert_ne!(second.outputs.etag, first.outputs.etag);
    assert_eq!(second.outputs.size, 12);
    let reread = S3Object
        .read(&octx, &id, Some(&changed))
        .await?
        .expect("the object exists");
    assert_eq!(reread.spec, changed);
    assert_eq!(reread.outputs.etag, second.outputs.etag);

    // Another address creating the same key is refused, even with the same bytes.
    let err = S3Object
        .create(&ctx("s3_object.copy", url), &changed)
        .await
        .expect_err("the key is taken");
    let msg = err.to_string();
    assert!(msg.starts_with("s3:PutObject failed: 412"), "{msg}");
    assert!(
        msg.contains("already exists (uploaded by s3_object.train)"),
        "{msg}"
    );
    assert!(msg.contains("data/train.csv"), "{msg}");

    // A write outside terrain since the last apply is not silently overwritten.
    client
        .put_object()
        .bucket(name)
        .key("data/train.csv")
        .body(b"someone else".to_vec().into())
        .send()
        .await
        .map_err(|e| terrain_providers::aws::sdk_error("s3:PutObject", e))?;
    std::fs::write(&file, "x,y\n5,6\n").expect("rewrite the source");
    let third = S3Object::prepare(object_spec(name, "data/train.csv", &file))?;
    let err = S3Object
        .update(&octx, &id, &reread.spec, &third)
        .await
        .expect_err("changed outside terrain");
    assert!(
        err.to_string()
            .contains("changed outside terrain since the last apply"),
        "{err}"
    );
    // After a refresh the plan shows that change, and the update goes through.
    let refreshed = S3Object
        .read(&octx, &id, Some(&reread.spec))
        .await?
        .expect("the object exists");
    assert_eq!(refreshed.spec.content_hash, None, "not uploaded by terrain");
    S3Object.update(&octx, &id, &refreshed.spec, &third).await?;

    // Destroy of a bucket that holds objects, without force_destroy: refused, clearly.
    let err = S3Bucket
        .delete(&bctx, name, Some(&next))
        .await
        .expect_err("the bucket holds objects");
    let msg = err.to_string();
    assert!(
        msg.starts_with("s3:DeleteBucket failed: 409 BucketNotEmpty"),
        "{msg}"
    );
    assert!(msg.contains("still holds objects"), "{msg}");
    assert!(msg.contains("force_destroy = true"), "{msg}");

    // With it: every version and delete marker goes, then the bucket.
    S3Object.delete(&octx, &id, Some(&third)).await?;
    let force = BucketSpec {
        force_destroy: true,
        ..next.clone()
    };
    S3Bucket.delete(&bctx, name, Some(&force)).await?;
    assert!(S3Bucket.read(&bctx, name, Some(&force)).await?.is_none());
    S3Bucket.delete(&bctx, name, Some(&force)).await?;
    assert!(S3Object.read(&octx, &id, Some(&third)).await?.is_none());
    S3Object.delete(&octx, &id, Some(&third)).await?;
    Ok(())
}

/// A bucket name this account holds outside terrain is refused on create, in us-east-1
/// (where CreateBucket answers 200 for it) and elsewhere (BucketAlreadyOwnedByYou); one
/// terrain made for the same address (a create whose answer was lost) is adopted.
async fn existing_buckets_are_adopted_or_refused(url: &str) -> Result<(), ProviderError> {
    for region in ["us-east-1", "eu-west-1"] {
        let config = json!({"region": region, "endpoint": url, "max_attempts": 3});
        let foreign = format!("terrain-s3-foreign-{region}");
        let client =
            terrain_providers::aws::config::s3(&support::ctx("s3_bucket.x", config.clone()))
                .await?;
        let mut create = client.create_bucket().bucket(&foreign);
        if region != "us-east-1" {
            create = create.create_bucket_configuration(
                aws_sdk_s3::types::CreateBucketConfiguration::builder()
                    .location_constraint(region.into())
                    .build(),
            );
        }
        create
            .send()
            .await
            .map_err(|e| terrain_providers::aws::sdk_error("s3:CreateBucket", e))?;
        let err = S3Bucket
            .create(
                &support::ctx("s3_bucket.mine", config.clone()),
                &plain_bucket(&foreign),
            )
            .await
            .expect_err("not ours");
        assert!(
            err.to_string()
                .contains(&format!("terrain import s3_bucket.mine {foreign}")),
            "{region}: {err}"
        );

        // A create killed between CreateBucket and its tagging is resumed: the
        // untagged bucket under the planned name is this address's, and only then.
        let resumed = S3Bucket
            .create(
                &support::ctx("s3_bucket.mine", config.clone()).resuming(foreign.clone()),
                &plain_bucket(&foreign),
            )
            .await?;
        assert_eq!(resumed.id, foreign, "{region}");
        let tags = client
            .get_bucket_tagging()
            .bucket(&foreign)
            .send()
            .await
            .map_err(|e| terrain_providers::aws::sdk_error("s3:GetBucketTagging", e))?;
        assert!(
            tags.tag_set().iter().any(|t| t.value() == "s3_bucket.mine"),
            "{region}: marked once adopted: {:?}",
            tags.tag_set()
        );

        let owned = format!("terrain-s3-owned-{region}");
        let octx = support::ctx("s3_bucket.owned", config.clone());
        let created = S3Bucket.create(&octx, &plain_bucket(&owned)).await?;
        assert_eq!(created.outputs.region, region);
        assert_eq!(
            created.outputs.domain_name,
            format!("{owned}.s3.{region}.amazonaws.com")
        );
        let adopted = S3Bucket.create(&octx, &plain_bucket(&owned)).await?;
        assert_eq!(adopted.id, owned, "{region}");
        let read = S3Bucket
            .read(&octx, &owned, None)
            .await?
            .expect("the bucket exists");
        assert_eq!(read.outputs.region, region);
        assert_eq!(
            read.spec,
            plain_bucket(&owned),
            "{region}: adopted as specified"
        );
        S3Bucket.delete(&octx, &owned, None).await?;
    }
    Ok(())
}

/// An object from inline content: its type guessed from the key, its id and outputs.
async fn inline_object(url: &str) -> Result<(), ProviderError> {
    let name = "terrain-s3-inline";
    S3Bucket
        .create(&ctx("s3_bucket.cfg", url), &plain_bucket(name))
        .await?;
    let octx = ctx("s3_object.params", url);
    let spec = S3Object::prepare(ObjectSpec {
        bucket: name.into(),
        key: "configs/params.json".into(),
        source: None,
        content: Some("{\"epochs\": 3}".into()),
        content_type: None,
        metadata: BTreeMap::new(),
        content_hash: None,
    })?;
    assert_eq!(spec.content_type.as_deref(), Some("application/json"));
    let created = S3Object.create(&octx, &spec).await?;
    assert_eq!(created.outputs.size, 13);
    let id = format!("{name}/configs/params.json");
    let read = S3Object
        .read(&octx, &id, Some(&spec))
        .await?
        .expect("the object exists");
    assert_eq!(read.spec, spec);
    assert_eq!(read.outputs, created.outputs);
    // Unprepared (its values were unknown at plan time): completed at apply.
    let unprepared = ObjectSpec {
        content_type: None,
        content_hash: None,
        ..spec.clone()
    };
    let updated = S3Object.update(&octx, &id, &read.spec, &unprepared).await?;
    assert_eq!(updated.spec, spec);
    S3Object.delete(&octx, &id, Some(&spec)).await?;
    assert!(S3Object.read(&octx, &id, Some(&spec)).await?.is_none());
    S3Bucket
        .delete(&ctx("s3_bucket.cfg", url), name, None)
        .await?;
    Ok(())
}

/// The requests a no-op refresh of one bucket costs, as `(method, subresource)`.
fn expected_refresh(with_lifecycle: bool) -> Vec<(String, String)> {
    let mut out = vec![
        ("GET".to_string(), "encryption".to_string()),
        ("GET".to_string(), "publicAccessBlock".to_string()),
        ("GET".to_string(), "tagging".to_string()),
        ("GET".to_string(), "versioning".to_string()),
        ("HEAD".to_string(), String::new()),
    ];
    if with_lifecycle {
        out.push(("GET".to_string(), "lifecycle".to_string()));
        out.sort();
    }
    out
}

/// The subresource of a query string (`versioning`, `tagging`…), empty for none.
fn subresource(query: &str) -> String {
    query
        .split('&')
        .map(|p| p.split('=').next().unwrap_or_default())
        .find(|k| !k.is_empty() && *k != "x-id")
        .unwrap_or_default()
        .to_string()
}

// moto

/// moto behind [`MotoProxy`], and the proxy's URL to send requests to.
fn moto() -> (support::Moto, MotoProxy) {
    let moto = support::Moto::start();
    let proxy = MotoProxy::start(&moto.url);
    (moto, proxy)
}

#[tokio::test]
async fn moto_bucket_and_object_lifecycle() -> Result<(), ProviderError> {
    let (_moto, proxy) = moto();
    bucket_and_object_lifecycle(&proxy.url).await
}

#[tokio::test]
async fn moto_existing_buckets_are_adopted_or_refused() -> Result<(), ProviderError> {
    let (_moto, proxy) = moto();
    existing_buckets_are_adopted_or_refused(&proxy.url).await
}

#[tokio::test]
async fn moto_inline_object() -> Result<(), ProviderError> {
    let (_moto, proxy) = moto();
    inline_object(&proxy.url).await
}

#[tokio::test]
async fn moto_noop_refresh_costs_five_requests() -> Result<(), ProviderError> {
    let (_moto, proxy) = moto();
    let c = ctx("s3_bucket.plain", &proxy.url);

    let plain = plain_bucket("terrain-s3-refresh");
    S3Bucket.create(&c, &plain).await?;
    proxy.clear();
    S3Bucket
        .read(&c, &plain.name, Some(&plain))
        .await?
        .expect("exists");
    assert_eq!(requests(&proxy), expected_refresh(false));

    let ruled = bucket_spec("terrain-s3-refresh-rules");
    S3Bucket.create(&c, &ruled).await?;
    proxy.clear();
    S3Bucket
        .read(&c, &ruled.name, Some(&ruled))
        .await?
        .expect("exists");
    assert_eq!(requests(&proxy), expected_refresh(true));
    Ok(())
}

// The sandbox

async fn sandbox() -> Sandbox {
    Sandbox::start(Options {
        timing: Timing::instant(),
        ..Default::default()
    })
    .await
    .expect("sandbox starts")
}

#[tokio::test]
async fn sandbox_bucket_and_object_lifecycle() -> Result<(), ProviderError> {
    let sandbox = sandbox().await;
    bucket_and_object_lifecycle(&sandbox.url()).await
}

#[tokio::test]
async fn sandbox_existing_buckets_are_adopted_or_refused() -> Result<(), ProviderError> {
    let sandbox = sandbox().await;
    existing_buckets_are_adopted_or_refused(&sandbox.url()).await
}

#[tokio::test]
async fn sandbox_inline_object() -> Result<(), ProviderError> {
    let sandbox = sandbox().await;
    inline_object(&sandbox.url()).await
}

#[tokio::test]
async fn sandbox_noop_refresh_costs_five_requests() -> Result<(), ProviderError> {
    let sandbox = sandbox().await;
    let url = sandbox.url();
    let c = ctx("s3_bucket.plain", &url);
    let requests = |sandbox: &Sandbox| {
        let mut out: Vec<(String, String)> = sandbox
            .traffic()
            .into_iter()
            .filter(|x| x.api == "s3")
            .map(|x| (x.method, subresource(&x.query)))
            .collect();
        out.sort();
        out
    };

    let plain = plain_bucket("terrain-s3-refresh");
    let created = S3Bucket.create(&c, &plain).await?;
    sandbox.clear_traffic();
    let read = S3Bucket
        .read(&c, &plain.name, Some(&plain))
        .await?
        .expect("exists");
    assert_eq!(read.spec, created.spec, "a no-op refresh");
    assert_eq!(requests(&sandbox), expected_refresh(false));

    let ruled = bucket_spec("terrain-s3-refresh-rules");
    S3Bucket.create(&c, &ruled).await?;
    sandbox.clear_traffic();
    let read = S3Bucket
        .read(&c, &ruled.name, Some(&ruled))
        .await?
        .expect("exists");
    assert_eq!(read.spec, ruled, "a no-op refresh");
    assert_eq!(requests(&sandbox), expected_refresh(true));
    Ok(())
}

/// The untyped face the engine sees: the schema's defaults fill a stack's sparse
/// table, and validation reports offline what S3 would refuse.
#[test]
fn stacks_are_validated_offline() {
    use terrain_providers::{Adapter, Resource};
    let bucket = Adapter::new(S3Bucket);
    let problems = bucket.validate(
        &json!({"name": "Bad..Name", "encryption": {"kms_key_id": "k"}}),
        &Value::Null,
    );
    let paths: Vec<String> = problems.iter().map(|p| p.path.join(".")).collect();
    assert_eq!(paths, ["name", "encryption.kms_key_id"]);
    let object = Adapter::new(S3Object);
    assert_eq!(
        object
            .planned_id(
                &json!({"bucket": "b-1", "key": "a/b", "content": "x"}),
                &Value::Null
            )
            .as_deref(),
        Some("b-1/a/b")
    );
}

/// `(method, subresource)` of each request the proxy saw, sorted (they run concurrently).
fn requests(proxy: &MotoProxy) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = proxy
        .lines()
        .iter()
        .map(|line| {
            let mut parts = line.split(' ');
            let method = parts.next().unwrap_or_default().to_string();
            let target = parts.next().unwrap_or_default();
            let query = target.split_once('?').map_or("", |(_, q)| q);
            (method, subresource(query))
        })
        .collect();
    out.sort();
    out
}
