//! The S3 emulator as the official `aws` CLI (v1) sees it: bucket configuration,
//! versioned objects with conditional writes, listings, delete markers, batch deletes,
//! `aws s3 cp/ls/rb`, and region redirects; an `aws-chunked` upload as SDKs send it over
//! TLS (the CLI only frames bodies that way on https endpoints); and the XML of the list
//! and encryption answers checked element by element against the botocore model in
//! `contracts/`. Skipped (with a message) when the CLI is not installed.

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};
use terrain_sandbox::{Options, Sandbox, Timing};

const S3_MODEL: &str = "aws/botocore-1.44.5/s3/2006-03-01/service-2.json.gz";

fn aws_on_path() -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join("aws").is_file()))
}

async fn start() -> Sandbox {
    Sandbox::start(Options {
        timing: Timing::instant(),
        ..Options::google_apis_on()
    })
    .await
    .expect("sandbox starts")
}

struct Run {
    ok: bool,
    stdout: String,
    stderr: String,
}

/// The `aws` CLI pointed at the sandbox, with nothing from the developer's own AWS
/// setup (profiles, regions, endpoints) leaking in.
struct Aws<'a> {
    sandbox: &'a Sandbox,
}

impl Aws<'_> {
    async fn run_in(&self, region: &str, args: &[&str]) -> Run {
        let mut cmd = tokio::process::Command::new("aws");
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("AWS_") {
                cmd.env_remove(key);
            }
        }
        cmd.args(["--endpoint-url", &self.sandbox.url(), "--region", region])
            .args(["--output", "json"])
            .args(args)
            .env("AWS_ACCESS_KEY_ID", "x")
            .env("AWS_SECRET_ACCESS_KEY", "y")
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .env("AWS_CONFIG_FILE", "/nonexistent")
            .env("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
            .env("AWS_MAX_ATTEMPTS", "1");
        let out = tokio::time::timeout(Duration::from_secs(120), cmd.output())
            .await
            .expect("aws finishes within two minutes")
            .expect("aws runs");
        Run {
            ok: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Runs in us-east-1 and fails the test with the CLI's output when the command fails.
    async fn ok(&self, args: &[&str]) -> String {
        self.ok_in("us-east-1", args).await
    }

    async fn ok_in(&self, region: &str, args: &[&str]) -> String {
        let run = self.run_in(region, args).await;
        assert!(
            run.ok,
            "aws {} failed:\nstdout:\n{}\nstderr:\n{}",
            args.join(" "),
            run.stdout,
            run.stderr
        );
        run.stdout
    }

    async fn json(&self, args: &[&str]) -> Value {
        self.json_in("us-east-1", args).await
    }

    async fn json_in(&self, region: &str, args: &[&str]) -> Value {
        let text = self.ok_in(region, args).await;
        if text.trim().is_empty() {
            return Value::Null;
        }
        serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("aws {args:?} printed no JSON ({e}):\n{text}"))
    }

    /// Runs a command that must fail with `error` (an S3 error code, or `404` for HEAD)
    /// in its message.
    async fn fails(&self, args: &[&str], error: &str) -> String {
        let run = self.run_in("us-east-1", args).await;
        assert!(
            !run.ok,
            "aws {} should fail with {error}:\n{}",
            args.join(" "),
            run.stdout
        );
        assert!(
            run.stderr.contains(&format!("({error})")),
            "aws {} should fail with {error}, got:\n{}",
            args.join(" "),
            run.stderr
        );
        run.stderr
    }
}

fn path_str(p: &Path) -> &str {
    p.to_str().expect("temporary paths are UTF-8")
}

/// Bytes that are not text, so any mangling on the way shows.
fn content(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 8) as u8)
        .collect()
}

fn md5_etag(run: &Value) -> String {
    run["ETag"].as_str().unwrap_or("").to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_aws_cli_manages_versioned_buckets() {
    if !aws_on_path() {
        println!("skipped: aws is not on PATH");
        return;
    }
    let sandbox = start().await;
    let aws = Aws { sandbox: &sandbox };
    let dir = tempfile::tempdir().expect("temporary directory");
    let bucket = "terrain-ml-data";

    let created = aws
        .json(&["s3api", "create-bucket", "--bucket", bucket])
        .await;
    assert_eq!(created["Location"], json!(format!("/{bucket}")));
    aws.fails(
        &["s3api", "create-bucket", "--bucket", bucket],
        "BucketAlreadyOwnedByYou",
    )
    .await;
    aws.fails(
        &["s3api", "create-bucket", "--bucket", "Not_A_Bucket"],
        "InvalidBucketName",
    )
    .await;
    let head = aws
        .json(&["s3api", "head-bucket", "--bucket", bucket])
        .await;
    assert_eq!(head["BucketRegion"], json!("us-east-1"));

    // Today's defaults, then the configuration a stack applies.
    let versioning = aws
        .json(&["s3api", "get-bucket-versioning", "--bucket", bucket])
        .await;
    assert_eq!(versioning.get("Status"), None, "{versioning}");
    let block = aws
        .json(&["s3api", "get-public-access-block", "--bucket", bucket])
        .await;
    assert_eq!(
        block["PublicAccessBlockConfiguration"],
        json!({"BlockPublicAcls": true, "IgnorePublicAcls": true, "BlockPublicPolicy": true, "RestrictPublicBuckets": true})
    );
    aws.ok(&[
        "s3api",
        "put-bucket-versioning",
        "--bucket",
        bucket,
        "--versioning-configuration",
        "Status=Enabled",
    ])
    .await;
    let versioning = aws
        .json(&["s3api", "get-bucket-versioning", "--bucket", bucket])
        .await;
    assert_eq!(versioning["Status"], json!("Enabled"));

    let encryption = json!({"Rules": [{
        "ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "aws:kms", "KMSMasterKeyID": "alias/ml-data"},
        "BucketKeyEnabled": true
    }]});
    aws.ok(&[
        "s3api",
        "put-bucket-encryption",
        "--bucket",
        bucket,
        "--server-side-encryption-configuration",
        &encryption.to_string(),
    ])
    .await;
    let got = aws
        .json(&["s3api", "get-bucket-encryption", "--bucket", bucket])
        .await;
    assert_eq!(got["ServerSideEncryptionConfiguration"], encryption);

    aws.ok(&[
        "s3api",
        "put-public-access-block",
        "--bucket",
        bucket,
        "--public-access-block-configuration",
        "BlockPublicAcls=true,IgnorePublicAcls=true,BlockPublicPolicy=true,RestrictPublicBuckets=false",
    ])
    .await;
    let block = aws
        .json(&["s3api", "get-public-access-block", "--bucket", bucket])
        .await;
    assert_eq!(
        block["PublicAccessBlockConfiguration"]["RestrictPublicBuckets"],
        json!(false)
    );

    let lifecycle = json!({"Rules": [
        {"ID": "expire-scratch", "Filter": {"Prefix": "scratch/"}, "Status": "Enabled",
         "Expiration": {"Days": 7}},
        {"ID": "old-versions", "Filter": {}, "Status": "Enabled",
         "NoncurrentVersionExpiration": {"NoncurrentDays": 30},
         "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 2}}
    ]});
    let lifecycle_file = dir.path().join("lifecycle.json");
    std::fs::write(&lifecycle_file, lifecycle.to_string()).expect("write lifecycle");
    aws.ok(&[
        "s3api",
        "put-bucket-lifecycle-configuration",
        "--bucket",
        bucket,
        "--lifecycle-configuration",
        &format!("file://{}", path_str(&lifecycle_file)),
    ])
    .await;
    let got = aws
        .json(&[
            "s3api",
            "get-bucket-lifecycle-configuration",
            "--bucket",
            bucket,
        ])
        .await;
    assert_eq!(got["Rules"], lifecycle["Rules"]);
    assert_eq!(
        got["TransitionDefaultMinimumObjectSize"],
        json!("all_storage_classes_128K")
    );
    aws.ok(&[
        "s3api",
        "put-bucket-tagging",
        "--bucket",
        bucket,
        "--tagging",
        "TagSet=[{Key=team,Value=ml},{Key=stack,Value=terrain}]",
    ])
    .await;
    let tags = aws
        .json(&["s3api", "get-bucket-tagging", "--bucket", bucket])
        .await;
    assert_eq!(
        tags["TagSet"],
        json!([{"Key": "team", "Value": "ml"}, {"Key": "stack", "Value": "terrain"}])
    );

    // A create-only write succeeds once.
    let first = content(3000, 1);
    let first_file = dir.path().join("first.bin");
    std::fs::write(&first_file, &first).expect("write first");
    let key = "datasets/train/part-0.bin";
    let put = aws
        .json(&[
            "s3api",
            "put-object",
            "--bucket",
            bucket,
            "--key",
            key,
            "--body",
            path_str(&first_file),
            "--content-type",
            "application/x-parquet",
            "--metadata",
            "source=unit",
            "--if-none-match",
            "*",
        ])
        .await;
    let v1 = put["VersionId"].as_str().unwrap_or("").to_string();
    assert_eq!(v1.len(), 32, "{put}");
    assert_eq!(put["ServerSideEncryption"], json!("aws:kms"));
    assert_eq!(
        put["SSEKMSKeyId"],
        json!("arn:aws:kms:us-east-1:123456789012:alias/ml-data")
    );
    assert_eq!(put["BucketKeyEnabled"], json!(true));
    // botocore sends a CRC32 of the body; the sandbox checked it and echoes it.
    assert!(put["ChecksumCRC32"].is_string(), "{put}");
    let first_etag = md5_etag(&put);
    assert_eq!(first_etag.len(), 34, "{put}");
    aws.fails(
        &[
            "s3api",
            "put-object",
            "--bucket",
            bucket,
            "--key",
            key,
            "--body",
            path_str(&first_file),
            "--if-none-match",
            "*",
        ],
        "PreconditionFailed",
    )
    .await;

    let downloaded = dir.path().join("downloaded.bin");
    let got = aws
        .json(&[
            "s3api",
            "get-object",
            "--bucket",
            bucket,
            "--key",
            key,
            path_str(&downloaded),
        ])
        .await;
    assert_eq!(std::fs::read(&downloaded).expect("downloaded"), first);
    assert_eq!(got["ContentLength"], json!(3000));
    assert_eq!(got["ContentType"], json!("application/x-parquet"));
    assert_eq!(got["Metadata"], json!({"source": "unit"}));
    assert_eq!(got["VersionId"], json!(v1));
    assert_eq!(md5_etag(&got), first_etag);
    let head = aws
        .json(&["s3api", "head-object", "--bucket", bucket, "--key", key])
        .await;
    assert_eq!(head["ContentLength"], json!(3000));
    assert!(head["LastModified"].as_str().is_some_and(|t| !t.is_empty()));

    // Overwrite (guarded by the current ETag), then delete: a delete marker.
    let second = content(1200, 2);
    let second_file = dir.path().join("second.bin");
    std::fs::write(&second_file, &second).expect("write second");
    let put = aws
        .json(&[
            "s3api",
            "put-object",
            "--bucket",
            bucket,
            "--key",
            key,
            "--body",
            path_str(&second_file),
            "--if-match",
            &first_etag,
        ])
        .await;
    let v2 = put["VersionId"].as_str().unwrap_or("").to_string();
    assert_ne!(v1, v2);
    aws.json(&[
        "s3api",
        "put-object",
        "--bucket",
        bucket,
        "--key",
        "datasets/README",
        "--body",
        path_str(&second_file),
    ])
    .await;
    let listed = aws
        .json(&[
            "s3api",
            "list-objects-v2",
            "--no-paginate",
            "--bucket",
            bucket,
            "--prefix",
            "datasets/",
            "--delimiter",
            "/",
        ])
        .await;
    assert_eq!(listed["KeyCount"], json!(2), "{listed}");
    assert_eq!(listed["Contents"][0]["Key"], json!("datasets/README"));
    assert_eq!(listed["Contents"][0]["Size"], json!(1200));
    assert_eq!(
        listed["CommonPrefixes"],
        json!([{"Prefix": "datasets/train/"}])
    );
    let listed = aws
        .json(&["s3api", "list-objects-v2", "--bucket", bucket])
        .await;
    let keys: Vec<&str> = listed["Contents"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["Key"].as_str())
        .collect();
    assert_eq!(keys, ["datasets/README", key]);

    let deleted = aws
        .json(&["s3api", "delete-object", "--bucket", bucket, "--key", key])
        .await;
    assert_eq!(deleted["DeleteMarker"], json!(true));
    let marker = deleted["VersionId"].as_str().unwrap_or("").to_string();
    aws.fails(
        &[
            "s3api",
            "get-object",
            "--bucket",
            bucket,
            "--key",
            key,
            path_str(&downloaded),
        ],
        "NoSuchKey",
    )
    .await;
    let old = aws
        .json(&[
            "s3api",
            "get-object",
            "--bucket",
            bucket,
            "--key",
            key,
            "--version-id",
            &v1,
            path_str(&downloaded),
        ])
        .await;
    assert_eq!(old["VersionId"], json!(v1));
    assert_eq!(std::fs::read(&downloaded).expect("downloaded"), first);

    let versions = aws
        .json(&[
            "s3api",
            "list-object-versions",
            "--bucket",
            bucket,
            "--prefix",
            "datasets/train/",
        ])
        .await;
    let version_ids: Vec<(&str, bool)> = versions["Versions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|v| {
            (
                v["VersionId"].as_str().unwrap_or(""),
                v["IsLatest"] == json!(true),
            )
        })
        .collect();
    assert_eq!(version_ids, [(v2.as_str(), false), (v1.as_str(), false)]);
    assert_eq!(
        versions["DeleteMarkers"],
        json!([{
            "Owner": versions["DeleteMarkers"][0]["Owner"],
            "Key": key,
            "VersionId": marker,
            "IsLatest": true,
            "LastModified": versions["DeleteMarkers"][0]["LastModified"],
        }])
    );

    aws.fails(
        &["s3api", "delete-bucket", "--bucket", bucket],
        "BucketNotEmpty",
    )
    .await;
    let everything = aws
        .json(&["s3api", "list-object-versions", "--bucket", bucket])
        .await;
    let objects: Vec<Value> = ["Versions", "DeleteMarkers"]
        .iter()
        .flat_map(|list| everything[list].as_array().cloned().unwrap_or_default())
        .map(|v| json!({"Key": v["Key"], "VersionId": v["VersionId"]}))
        .collect();
    assert_eq!(objects.len(), 4, "{everything}");
    let batch = aws
        .json(&[
            "s3api",
            "delete-objects",
            "--bucket",
            bucket,
            "--delete",
            &json!({"Objects": objects}).to_string(),
        ])
        .await;
    assert_eq!(
        batch["Deleted"].as_array().map(Vec::len),
        Some(4),
        "{batch}"
    );
    assert_eq!(batch.get("Errors"), None, "{batch}");
    aws.ok(&["s3api", "delete-bucket", "--bucket", bucket])
        .await;
    aws.fails(&["s3api", "head-bucket", "--bucket", bucket], "404")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aws_s3_copies_lists_and_removes() {
    if !aws_on_path() {
        println!("skipped: aws is not on PATH");
        return;
    }
    let sandbox = start().await;
    let aws = Aws { sandbox: &sandbox };
    let dir = tempfile::tempdir().expect("temporary directory");
    aws.ok(&["s3", "mb", "s3://terrain-transfer"]).await;
    let data = content(48 * 1024 + 7, 3);
    let local = dir.path().join("weights.bin");
    std::fs::write(&local, &data).expect("write weights");
    aws.ok(&[
        "s3",
        "cp",
        path_str(&local),
        "s3://terrain-transfer/models/v1/weights.bin",
    ])
    .await;
    aws.ok(&[
        "s3",
        "cp",
        path_str(&local),
        "s3://terrain-transfer/models/v2/weights bin+1.bin",
    ])
    .await;
    let top = aws.ok(&["s3", "ls", "s3://terrain-transfer/models/"]).await;
    assert!(top.contains("PRE v1/") && top.contains("PRE v2/"), "{top}");
    let all = aws
        .ok(&["s3", "ls", "--recursive", "s3://terrain-transfer"])
        .await;
    let lines: Vec<&str> = all.lines().collect();
    assert_eq!(lines.len(), 2, "{all}");
    assert!(
        lines[0].contains(&format!("{} models/v1/weights.bin", data.len())),
        "{all}"
    );
    assert!(lines[1].ends_with("models/v2/weights bin+1.bin"), "{all}");
    // A copy between keys, then both back to disk.
    aws.ok(&[
        "s3",
        "cp",
        "s3://terrain-transfer/models/v1/weights.bin",
        "s3://terrain-transfer/models/latest/weights.bin",
    ])
    .await;
    let back = dir.path().join("back.bin");
    aws.ok(&[
        "s3",
        "cp",
        "s3://terrain-transfer/models/latest/weights.bin",
        path_str(&back),
    ])
    .await;
    assert_eq!(std::fs::read(&back).expect("downloaded"), data);
    aws.ok(&["s3", "rm", "s3://terrain-transfer/models/v1/weights.bin"])
        .await;
    let all = aws
        .ok(&["s3", "ls", "--recursive", "s3://terrain-transfer"])
        .await;
    assert_eq!(all.lines().count(), 2, "{all}");
    aws.ok(&["s3", "rb", "--force", "s3://terrain-transfer"])
        .await;
    let buckets = aws.json(&["s3api", "list-buckets"]).await;
    assert_eq!(buckets["Buckets"], json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buckets_live_in_their_region() {
    if !aws_on_path() {
        println!("skipped: aws is not on PATH");
        return;
    }
    let sandbox = start().await;
    let aws = Aws { sandbox: &sandbox };
    let bucket = "terrain-eu-data";
    aws.ok_in(
        "eu-west-1",
        &[
            "s3api",
            "create-bucket",
            "--bucket",
            bucket,
            "--create-bucket-configuration",
            "LocationConstraint=eu-west-1",
        ],
    )
    .await;
    let run = aws
        .run_in(
            "eu-west-1",
            &[
                "s3api",
                "create-bucket",
                "--bucket",
                "terrain-no-constraint",
            ],
        )
        .await;
    assert!(
        run.stderr.contains("(IllegalLocationConstraintException)"),
        "{}",
        run.stderr
    );
    aws.fails(
        &[
            "s3api",
            "create-bucket",
            "--bucket",
            bucket,
            "--create-bucket-configuration",
            "LocationConstraint=eu-west-1",
        ],
        "BucketAlreadyOwnedByYou",
    )
    .await;
    let location = aws
        .json(&["s3api", "get-bucket-location", "--bucket", bucket])
        .await;
    assert_eq!(location["LocationConstraint"], json!("eu-west-1"));
    let head = aws
        .json_in("eu-west-1", &["s3api", "head-bucket", "--bucket", bucket])
        .await;
    assert_eq!(head["BucketRegion"], json!("eu-west-1"));
    // Signed for us-east-1, the request is redirected; botocore re-signs for eu-west-1.
    let listed = aws
        .json(&[
            "s3api",
            "list-objects-v2",
            "--no-paginate",
            "--bucket",
            bucket,
        ])
        .await;
    assert_eq!(listed["KeyCount"], json!(0), "{listed}");
    let redirected = sandbox
        .traffic()
        .iter()
        .any(|e| e.status == 301 && e.path == bucket && e.method == "GET");
    assert!(
        redirected,
        "the us-east-1 request was answered without a redirect"
    );
    let buckets = aws.json(&["s3api", "list-buckets"]).await;
    assert_eq!(buckets["Buckets"][0]["Name"], json!(bucket));
    assert_eq!(buckets["Buckets"][0]["BucketRegion"], json!("eu-west-1"));
}

// ------------------------------------------------------------ raw HTTP

/// A request the sandbox routes to S3: it reads the service and region from the SigV4
/// credential scope and, like any emulator without the caller's secret, cannot verify
/// the signature itself.
fn signed(http: &reqwest::Client, method: reqwest::Method, url: &str) -> reqwest::RequestBuilder {
    http.request(method, url).header(
        "authorization",
        "AWS4-HMAC-SHA256 Credential=AKIDSANDBOX/20261121/us-east-1/s3/aws4_request, SignedHeaders=host;x-amz-date, Signature=0",
    )
}

/// CRC-32 (IEEE), bitwise: the checksum the SDKs put in the `aws-chunked` trailer.
fn crc32(data: &[u8]) -> u32 {
    !data.iter().fold(!0u32, |mut c, b| {
        c ^= u32::from(*b);
        for _ in 0..8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0xEDB8_8320
            } else {
                c >> 1
            };
        }
        c
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aws_chunked_uploads_are_decoded() {
    use base64::Engine as _;
    let sandbox = start().await;
    let http = reqwest::Client::new();
    let base = sandbox.url();
    let made = signed(
        &http,
        reqwest::Method::PUT,
        &format!("{base}/terrain-chunked"),
    )
    .send()
    .await
    .expect("create bucket");
    assert_eq!(made.status(), 200);

    // STREAMING-UNSIGNED-PAYLOAD-TRAILER: what the CLI and the Rust SDK send over TLS.
    let data = content(20_000, 4);
    let crc = base64::engine::general_purpose::STANDARD.encode(crc32(&data).to_be_bytes());
    let mut body = Vec::new();
    for chunk in data.chunks(8192) {
        body.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        body.extend_from_slice(chunk);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("0\r\nx-amz-checksum-crc32:{crc}\r\n\r\n").as_bytes());
    let put = signed(
        &http,
        reqwest::Method::PUT,
        &format!("{base}/terrain-chunked/unsigned.bin"),
    )
    .header("content-encoding", "aws-chunked")
    .header("x-amz-content-sha256", "STREAMING-UNSIGNED-PAYLOAD-TRAILER")
    .header("x-amz-decoded-content-length", data.len().to_string())
    .header("x-amz-trailer", "x-amz-checksum-crc32")
    .header("x-amz-sdk-checksum-algorithm", "CRC32")
    .body(body)
    .send()
    .await
    .expect("chunked put");
    assert_eq!(put.status(), 200, "{:?}", put.text().await);
    assert_eq!(
        put.headers()
            .get("x-amz-checksum-crc32")
            .and_then(|v| v.to_str().ok()),
        Some(crc.as_str())
    );

    // STREAMING-AWS4-HMAC-SHA256-PAYLOAD: signed chunks, no trailer.
    let mut body = Vec::new();
    for chunk in data.chunks(9000) {
        body.extend_from_slice(
            format!("{:x};chunk-signature={}\r\n", chunk.len(), "0".repeat(64)).as_bytes(),
        );
        body.extend_from_slice(chunk);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("0;chunk-signature={}\r\n\r\n", "0".repeat(64)).as_bytes());
    let put = signed(
        &http,
        reqwest::Method::PUT,
        &format!("{base}/terrain-chunked/signed.bin"),
    )
    .header("x-amz-content-sha256", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD")
    .header("content-encoding", "aws-chunked,gzip")
    .header("x-amz-decoded-content-length", data.len().to_string())
    .body(body)
    .send()
    .await
    .expect("signed chunked put");
    assert_eq!(put.status(), 200, "{:?}", put.text().await);

    for key in ["unsigned.bin", "signed.bin"] {
        let got = signed(
            &http,
            reqwest::Method::GET,
            &format!("{base}/terrain-chunked/{key}"),
        )
        .header("x-amz-checksum-mode", "ENABLED")
        .send()
        .await
        .expect("get");
        assert_eq!(got.status(), 200);
        let encoding = got
            .headers()
            .get("content-encoding")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let bytes = got.bytes().await.expect("body");
        assert_eq!(bytes.as_ref(), data.as_slice(), "{key}");
        // The framing is gone; a real content encoding sent alongside it stays.
        let expected = (key == "signed.bin").then(|| "gzip".to_string());
        assert_eq!(encoding, expected, "{key}");
    }
    let head = signed(
        &http,
        reqwest::Method::HEAD,
        &format!("{base}/terrain-chunked/unsigned.bin"),
    )
    .send()
    .await
    .expect("head");
    assert_eq!(
        head.headers()
            .get("content-length")
            .and_then(|v| v.to_str().ok()),
        Some(data.len().to_string().as_str())
    );

    // A trailer that does not match the data is refused.
    let mut body = format!("{:x}\r\n", data.len()).into_bytes();
    body.extend_from_slice(&data);
    body.extend_from_slice(b"\r\n0\r\nx-amz-checksum-crc32:AAAAAA==\r\n\r\n");
    let bad = signed(
        &http,
        reqwest::Method::PUT,
        &format!("{base}/terrain-chunked/bad.bin"),
    )
    .header("content-encoding", "aws-chunked")
    .header("x-amz-decoded-content-length", data.len().to_string())
    .header("x-amz-trailer", "x-amz-checksum-crc32")
    .body(body)
    .send()
    .await
    .expect("bad put");
    assert_eq!(bad.status(), 400);
    assert!(bad
        .text()
        .await
        .unwrap_or_default()
        .contains("<Code>BadDigest</Code>"));
}

// ------------------------------------------------------------ the botocore model

/// An XML element as the model check needs it.
#[derive(Debug)]
struct Node {
    name: String,
    attrs: String,
    text: String,
    children: Vec<Node>,
}

/// Reads the sandbox's own answers: elements, attributes (kept raw), text with the five
/// entities; no comments or CDATA, which it never writes.
fn parse_xml(doc: &str) -> Node {
    fn element(s: &str, pos: &mut usize) -> Node {
        assert_eq!(&s[*pos..*pos + 1], "<", "an element at {pos}");
        let end = *pos + s[*pos..].find('>').expect("a closed tag");
        let tag = &s[*pos + 1..end];
        *pos = end + 1;
        let self_closing = tag.ends_with('/');
        let tag = tag.trim_end_matches('/');
        let (name, attrs) = tag.split_once(' ').unwrap_or((tag, ""));
        let mut node = Node {
            name: name.to_string(),
            attrs: attrs.to_string(),
            text: String::new(),
            children: Vec::new(),
        };
        if self_closing {
            return node;
        }
        loop {
            if s[*pos..].starts_with("</") {
                let close = *pos + s[*pos..].find('>').expect("a closed end tag");
                assert_eq!(&s[*pos + 2..close], name, "matching end tag");
                *pos = close + 1;
                return node;
            }
            if s[*pos..].starts_with('<') {
                node.children.push(element(s, pos));
            } else {
                let len = s[*pos..].find('<').expect("more markup");
                node.text.push_str(
                    &s[*pos..*pos + len]
                        .replace("&lt;", "<")
                        .replace("&gt;", ">")
                        .replace("&quot;", "\"")
                        .replace("&apos;", "'")
                        .replace("&amp;", "&"),
                );
                *pos += len;
            }
        }
    }
    let body = doc.trim();
    let body = match body.strip_prefix("<?xml") {
        Some(rest) => rest[rest.find("?>").expect("declaration end") + 2..].trim(),
        None => body,
    };
    let mut pos = 0;
    let root = element(body, &mut pos);
    assert_eq!(pos, body.len(), "one root element");
    root
}

fn load_model() -> Value {
    terrain_contracts::json(S3_MODEL)
}

/// Checks `node` against `shape` the way botocore's REST-XML parser reads it: every
/// child must be a member under its serialized name (a flattened list's items under the
/// list member's `locationName`), lists hold items of the member shape, scalars hold
/// values of their type.
fn check_shape(model: &Value, node: &Node, shape_name: &str, path: &str, seen: &mut Vec<String>) {
    let shapes = &model["shapes"];
    let shape = &shapes[shape_name];
    match shape["type"].as_str().unwrap_or("") {
        "structure" => {
            let members = shape["members"].as_object().expect("members");
            for child in &node.children {
                let member = members.iter().find(|(key, m)| {
                    serialized_name(shapes, key, m) == child.name && m.get("location").is_none()
                });
                let Some((key, m)) = member else {
                    panic!(
                        "{path}/{}: not a member of {shape_name} in the botocore model",
                        child.name
                    );
                };
                let member_shape = m["shape"].as_str().unwrap_or("");
                let child_path = format!("{path}/{}", child.name);
                seen.push(format!("{shape_name}.{key}"));
                let target = &shapes[member_shape];
                if target["type"] == json!("list") {
                    let item = target["member"]["shape"].as_str().unwrap_or("");
                    if flattened(m, target) {
                        check_shape(model, child, item, &child_path, seen);
                    } else {
                        let item_name = target["member"]["locationName"]
                            .as_str()
                            .unwrap_or("member");
                        for entry in &child.children {
                            assert_eq!(entry.name, item_name, "{child_path}: list item name");
                            check_shape(model, entry, item, &child_path, seen);
                        }
                    }
                } else {
                    check_shape(model, child, member_shape, &child_path, seen);
                }
            }
        }
        kind => {
            assert!(
                node.children.is_empty(),
                "{path}: {kind} with child elements"
            );
            let text = node.text.as_str();
            let valid = match kind {
                "boolean" => text == "true" || text == "false",
                "integer" | "long" => text.parse::<i64>().is_ok(),
                "timestamp" => {
                    text.len() == 24
                        && text.ends_with('Z')
                        && text.as_bytes()[10] == b'T'
                        && text.as_bytes()[19] == b'.'
                }
                _ => shape["enum"]
                    .as_array()
                    .is_none_or(|values| values.iter().any(|v| v == text)),
            };
            assert!(
                valid,
                "{path}: {text:?} is not a valid {shape_name} ({kind})"
            );
        }
    }
}

fn serialized_name(shapes: &Value, key: &str, member: &Value) -> String {
    let target = &shapes[member["shape"].as_str().unwrap_or("")];
    if target["type"] == json!("list") && flattened(member, target) {
        if let Some(name) = target["member"]["locationName"].as_str() {
            return name.to_string();
        }
    }
    member["locationName"].as_str().unwrap_or(key).to_string()
}

fn flattened(member: &Value, list: &Value) -> bool {
    member["flattened"] == json!(true) || list["flattened"] == json!(true)
}

/// The output shape of `operation`, and the root element its answer must have: the
/// payload member's name for outputs with an XML payload; otherwise the model does not
/// name the root, and `documented_root` (from the S3 API reference) is checked.
fn output_root(model: &Value, operation: &str, documented_root: &str) -> (String, String) {
    let output = model["operations"][operation]["output"]["shape"]
        .as_str()
        .expect("an output shape")
        .to_string();
    let shape = &model["shapes"][&output];
    match shape["payload"].as_str() {
        Some(payload) => {
            let member = &shape["members"][payload];
            let name = member["locationName"]
                .as_str()
                .unwrap_or(payload)
                .to_string();
            (member["shape"].as_str().unwrap_or("").to_string(), name)
        }
        None => (output, documented_root.to_string()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_match_the_botocore_model() {
    let model = load_model();
    let sandbox = start().await;
    let http = reqwest::Client::new();
    let base = sandbox.url();
    let send =
        |method: reqwest::Method, path: &str, body: Vec<u8>, headers: Vec<(&str, String)>| {
            let mut req = signed(&http, method, &format!("{base}{path}")).body(body);
            for (k, v) in headers {
                req = req.header(k, v);
            }
            req.send()
        };
    let ok =
        |status: reqwest::StatusCode, what: &str| assert!(status.is_success(), "{what}: {status}");
    ok(
        send(reqwest::Method::PUT, "/terrain-model", vec![], vec![])
            .await
            .expect("create")
            .status(),
        "create",
    );
    let versioning =
        b"<VersioningConfiguration><Status>Enabled</Status></VersioningConfiguration>".to_vec();
    use base64::Engine as _;
    let checksum_of = |body: &[u8]| {
        // The CRC32 header is accepted where S3 requires an integrity check.
        (
            "x-amz-checksum-crc32",
            base64::engine::general_purpose::STANDARD.encode(crc32(body).to_be_bytes()),
        )
    };
    let header = checksum_of(&versioning);
    ok(
        send(
            reqwest::Method::PUT,
            "/terrain-model?versioning",
            versioning,
            vec![header],
        )
        .await
        .expect("versioning")
        .status(),
        "versioning",
    );
    let kms = b"<ServerSideEncryptionConfiguration><Rule><ApplyServerSideEncryptionByDefault><SSEAlgorithm>aws:kms:dsse</SSEAlgorithm><KMSMasterKeyID>k-1</KMSMasterKeyID></ApplyServerSideEncryptionByDefault><BucketKeyEnabled>false</BucketKeyEnabled><BlockedEncryptionTypes><EncryptionType>SSE-C</EncryptionType></BlockedEncryptionTypes></Rule></ServerSideEncryptionConfiguration>".to_vec();
    let header = checksum_of(&kms);
    ok(
        send(
            reqwest::Method::PUT,
            "/terrain-model?encryption",
            kms,
            vec![header],
        )
        .await
        .expect("encryption")
        .status(),
        "encryption",
    );
    for key in ["a/1", "a/2", "b", "c d&e"] {
        let path = format!(
            "/terrain-model/{}",
            key.replace(' ', "%20").replace('&', "%26")
        );
        let sum = checksum_of(key.as_bytes());
        ok(
            send(
                reqwest::Method::PUT,
                &path,
                key.as_bytes().to_vec(),
                vec![sum],
            )
            .await
            .expect("put")
            .status(),
            key,
        );
    }
    ok(
        send(
            reqwest::Method::PUT,
            "/terrain-model/b",
            b"again".to_vec(),
            vec![],
        )
        .await
        .expect("put")
        .status(),
        "overwrite",
    );
    ok(
        send(
            reqwest::Method::DELETE,
            "/terrain-model/a/2",
            vec![],
            vec![],
        )
        .await
        .expect("delete")
        .status(),
        "delete",
    );

    let cases = [
        (
            "ListObjectsV2",
            "/terrain-model?list-type=2&delimiter=/&max-keys=2&fetch-owner=true",
            "ListBucketResult",
        ),
        (
            "ListObjectsV2",
            "/terrain-model?list-type=2&encoding-type=url&start-after=a",
            "ListBucketResult",
        ),
        (
            "ListObjectVersions",
            "/terrain-model?versions",
            "ListVersionsResult",
        ),
        (
            "ListObjectVersions",
            "/terrain-model?versions&delimiter=/&max-keys=2&encoding-type=url",
            "ListVersionsResult",
        ),
        ("GetBucketEncryption", "/terrain-model?encryption", ""),
        ("ListBuckets", "/", "ListAllMyBucketsResult"),
        (
            "GetBucketVersioning",
            "/terrain-model?versioning",
            "VersioningConfiguration",
        ),
        (
            "GetPublicAccessBlock",
            "/terrain-model?publicAccessBlock",
            "",
        ),
    ];
    let mut seen = Vec::new();
    for (operation, path, documented_root) in cases {
        let response = send(reqwest::Method::GET, path, vec![], vec![])
            .await
            .expect("get");
        assert_eq!(response.status(), 200, "{operation}");
        assert!(
            response.headers().contains_key("x-amz-request-id"),
            "{operation}"
        );
        let text = response.text().await.expect("body");
        let root = parse_xml(&text);
        let (shape, root_name) = output_root(&model, operation, documented_root);
        assert_eq!(root.name, root_name, "{operation}: root element\n{text}");
        assert_eq!(
            root.attrs, "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"",
            "{operation}: namespace"
        );
        check_shape(&model, &root, &shape, &root.name, &mut seen);
    }
    // The answers carried what matters, not just nothing invalid.
    for member in [
        "ListObjectsV2Output.Contents",
        "ListObjectsV2Output.CommonPrefixes",
        "ListObjectsV2Output.KeyCount",
        "ListObjectsV2Output.IsTruncated",
        "ListObjectsV2Output.NextContinuationToken",
        "ListObjectsV2Output.StartAfter",
        "ListObjectsV2Output.EncodingType",
        "Object.Owner",
        "Object.ChecksumAlgorithm",
        "ListObjectVersionsOutput.Versions",
        "ListObjectVersionsOutput.DeleteMarkers",
        "ListObjectVersionsOutput.NextKeyMarker",
        "ListObjectVersionsOutput.NextVersionIdMarker",
        "ListObjectVersionsOutput.CommonPrefixes",
        "ObjectVersion.IsLatest",
        "DeleteMarkerEntry.VersionId",
        "ServerSideEncryptionConfiguration.Rules",
        "ServerSideEncryptionRule.ApplyServerSideEncryptionByDefault",
        "ServerSideEncryptionRule.BucketKeyEnabled",
        "ServerSideEncryptionRule.BlockedEncryptionTypes",
        "BlockedEncryptionTypes.EncryptionType",
        "ServerSideEncryptionByDefault.KMSMasterKeyID",
        "ListBucketsOutput.Buckets",
        "Bucket.BucketRegion",
        "PublicAccessBlockConfiguration.RestrictPublicBuckets",
    ] {
        assert!(
            seen.iter().any(|s| s == member),
            "no answer carried {member}"
        );
    }

    // Errors name the code, and the key or bucket, in S3's error document.
    let missing = send(reqwest::Method::GET, "/terrain-model/nope", vec![], vec![])
        .await
        .expect("get");
    assert_eq!(missing.status(), 404);
    let error = parse_xml(&missing.text().await.expect("body"));
    let fields: Vec<(&str, &str)> = error
        .children
        .iter()
        .map(|c| (c.name.as_str(), c.text.as_str()))
        .collect();
    assert_eq!(
        &fields[..3],
        &[
            ("Code", "NoSuchKey"),
            ("Message", "The specified key does not exist."),
            ("Key", "nope")
        ]
    );
    assert_eq!(fields[3].0, "RequestId");
    let head = send(reqwest::Method::HEAD, "/terrain-model/nope", vec![], vec![])
        .await
        .expect("head");
    assert_eq!(head.status(), 404);
    assert!(head.bytes().await.expect("body").is_empty());
}

// ------------------------------------------------------------ multipart uploads and tags

const MIB: usize = 1024 * 1024;

fn md5(data: &[u8]) -> [u8; 16] {
    use md5::Digest as _;
    md5::Md5::digest(data).into()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn b64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// One answer of the sandbox, read whole.
struct Answer {
    status: u16,
    headers: reqwest::header::HeaderMap,
    body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    fn xml(&self) -> Node {
        parse_xml(&self.text())
    }

    /// The `Code` of an S3 error document.
    fn code(&self) -> Option<String> {
        let doc = self.xml();
        (doc.name == "Error").then(|| text_of(&doc, "Code").unwrap_or("").to_string())
    }
}

fn child<'a>(node: &'a Node, name: &str) -> Option<&'a Node> {
    node.children.iter().find(|c| c.name == name)
}

fn text_of<'a>(node: &'a Node, name: &str) -> Option<&'a str> {
    child(node, name).map(|c| c.text.as_str())
}

fn texts<'a>(node: &'a Node, name: &str, field: &str) -> Vec<&'a str> {
    node.children
        .iter()
        .filter(|c| c.name == name)
        .filter_map(|c| text_of(c, field))
        .collect()
}

/// Signed S3 requests with the headers an SDK sends, answers read whole.
struct S3Http {
    http: reqwest::Client,
    base: String,
}

impl S3Http {
    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Vec<u8>,
    ) -> Answer {
        let mut req = signed(&self.http, method, &format!("{}{path}", self.base)).body(body);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let response = req.send().await.expect("the sandbox answers");
        Answer {
            status: response.status().as_u16(),
            headers: response.headers().clone(),
            body: response.bytes().await.expect("a body").to_vec(),
        }
    }

    /// CreateMultipartUpload; the answer, whose `UploadId` is the upload's ID.
    async fn initiate(&self, path: &str, headers: &[(&str, &str)]) -> (Answer, String) {
        let answer = self
            .send(
                reqwest::Method::POST,
                &format!("{path}?uploads"),
                headers,
                vec![],
            )
            .await;
        assert_eq!(answer.status, 200, "{}", answer.text());
        let id = text_of(&answer.xml(), "UploadId")
            .expect("an upload id")
            .to_string();
        (answer, id)
    }

    /// UploadPart with a CRC32 header, as SDKs send parts over plain HTTP; the ETag.
    async fn part(&self, path: &str, id: &str, number: u32, data: &[u8]) -> String {
        let crc = b64(&crc32(data).to_be_bytes());
        let answer = self
            .send(
                reqwest::Method::PUT,
                &format!("{path}?partNumber={number}&uploadId={id}"),
                &[
                    ("x-amz-checksum-crc32", &crc),
                    ("x-amz-sdk-checksum-algorithm", "CRC32"),
                ],
                data.to_vec(),
            )
            .await;
        assert_eq!(answer.status, 200, "part {number}: {}", answer.text());
        assert_eq!(answer.header("x-amz-checksum-crc32"), Some(crc.as_str()));
        answer.header("etag").expect("an etag").to_string()
    }

    async fn complete(
        &self,
        path: &str,
        id: &str,
        parts: &[(u32, &str)],
        headers: &[(&str, &str)],
    ) -> Answer {
        let list: String = parts
            .iter()
            .map(|(n, etag)| {
                format!("<Part><ETag>{etag}</ETag><PartNumber>{n}</PartNumber></Part>")
            })
            .collect();
        let body = format!(
            "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">{list}</CompleteMultipartUpload>"
        );
        self.send(
            reqwest::Method::POST,
            &format!("{path}?uploadId={id}"),
            headers,
            body.into_bytes(),
        )
        .await
    }
}

/// The `aws-chunked` body the SDKs send over TLS: unsigned chunks and a CRC32 trailer.
fn chunked_with_crc32(data: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    for chunk in data.chunks(64 * 1024) {
        body.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        body.extend_from_slice(chunk);
        body.extend_from_slice(b"\r\n");
    }
    let crc = b64(&crc32(data).to_be_bytes());
    body.extend_from_slice(format!("0\r\nx-amz-checksum-crc32:{crc}\r\n\r\n").as_bytes());
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multipart_uploads_and_object_tags() {
    let model = load_model();
    let sandbox = start().await;
    let s3 = S3Http {
        http: reqwest::Client::new(),
        base: sandbox.url(),
    };
    // Every XML answer is checked against the botocore model at the end.
    let mut answers: Vec<(&str, &str, String)> = Vec::new();
    let made = s3
        .send(reqwest::Method::PUT, "/terrain-parts", &[], vec![])
        .await;
    assert_eq!(made.status, 200);

    // Create → three parts (5 MiB, 5 MiB, 1 KiB) → list → complete.
    let (created, id) = s3
        .initiate(
            "/terrain-parts/big.bin",
            &[
                ("content-type", "application/octet-stream"),
                ("x-amz-meta-origin", "multipart"),
                ("x-amz-tagging", "team=ml&stage=raw"),
            ],
        )
        .await;
    let doc = created.xml();
    assert_eq!(doc.name, "InitiateMultipartUploadResult");
    assert_eq!(text_of(&doc, "Bucket"), Some("terrain-parts"));
    assert_eq!(text_of(&doc, "Key"), Some("big.bin"));
    assert_eq!(
        created.header("x-amz-server-side-encryption"),
        Some("AES256")
    );
    answers.push((
        "CreateMultipartUpload",
        "InitiateMultipartUploadResult",
        created.text(),
    ));
    let parts = [content(5 * MIB, 1), content(5 * MIB, 2), content(1024, 3)];
    let e1 = s3.part("/terrain-parts/big.bin", &id, 1, &parts[0]).await;
    // The second part as SDKs send it over TLS.
    let chunked = s3
        .send(
            reqwest::Method::PUT,
            &format!("/terrain-parts/big.bin?partNumber=2&uploadId={id}"),
            &[
                ("content-encoding", "aws-chunked"),
                ("x-amz-content-sha256", "STREAMING-UNSIGNED-PAYLOAD-TRAILER"),
                ("x-amz-decoded-content-length", &parts[1].len().to_string()),
                ("x-amz-trailer", "x-amz-checksum-crc32"),
                ("x-amz-sdk-checksum-algorithm", "CRC32"),
            ],
            chunked_with_crc32(&parts[1]),
        )
        .await;
    assert_eq!(chunked.status, 200, "{}", chunked.text());
    let e2 = chunked.header("etag").expect("an etag").to_string();
    let e3 = s3.part("/terrain-parts/big.bin", &id, 3, &parts[2]).await;
    for (etag, data) in [(&e1, &parts[0]), (&e2, &parts[1]), (&e3, &parts[2])] {
        assert_eq!(*etag, format!("\"{}\"", hex(&md5(data))));
    }
    let listed = s3
        .send(
            reqwest::Method::GET,
            &format!("/terrain-parts/big.bin?uploadId={id}"),
            &[],
            vec![],
        )
        .await;
    let doc = listed.xml();
    assert_eq!(doc.name, "ListPartsResult");
    assert_eq!(texts(&doc, "Part", "PartNumber"), ["1", "2", "3"]);
    assert_eq!(texts(&doc, "Part", "ETag"), [&e1, &e2, &e3]);
    assert_eq!(texts(&doc, "Part", "Size"), ["5242880", "5242880", "1024"]);
    answers.push(("ListParts", "ListPartsResult", listed.text()));
    let uploads = s3
        .send(reqwest::Method::GET, "/terrain-parts?uploads", &[], vec![])
        .await;
    assert_eq!(texts(&uploads.xml(), "Upload", "UploadId"), [id.as_str()]);
    answers.push((
        "ListMultipartUploads",
        "ListMultipartUploadsResult",
        uploads.text(),
    ));
    let completed = s3
        .complete(
            "/terrain-parts/big.bin",
            &id,
            &[(1, &e1), (2, &e2), (3, &e3)],
            &[("if-none-match", "*")],
        )
        .await;
    assert_eq!(completed.status, 200, "{}", completed.text());
    let md5s: Vec<u8> = parts.iter().flat_map(|p| md5(p)).collect();
    let etag = format!("\"{}-3\"", hex(&md5(&md5s)));
    let doc = completed.xml();
    assert_eq!(text_of(&doc, "ETag"), Some(etag.as_str()));
    assert_eq!(text_of(&doc, "Bucket"), Some("terrain-parts"));
    assert!(
        text_of(&doc, "Location").is_some_and(|l| l.ends_with("/terrain-parts/big.bin")),
        "{}",
        completed.text()
    );
    answers.push((
        "CompleteMultipartUpload",
        "CompleteMultipartUploadResult",
        completed.text(),
    ));
    let got = s3
        .send(reqwest::Method::GET, "/terrain-parts/big.bin", &[], vec![])
        .await;
    assert_eq!(got.status, 200);
    assert!(
        got.body == parts.concat(),
        "the object is the parts in order"
    );
    assert_eq!(got.header("etag"), Some(etag.as_str()));
    assert_eq!(got.header("x-amz-meta-origin"), Some("multipart"));
    assert_eq!(got.header("x-amz-tagging-count"), Some("2"));
    let uploads = s3
        .send(reqwest::Method::GET, "/terrain-parts?uploads", &[], vec![])
        .await;
    assert!(
        child(&uploads.xml(), "Upload").is_none(),
        "{}",
        uploads.text()
    );

    // What completion refuses.
    let (_, id) = s3.initiate("/terrain-parts/bad.bin", &[]).await;
    let small = content(1024, 4);
    let f1 = s3.part("/terrain-parts/bad.bin", &id, 1, &parts[0]).await;
    let f2 = s3.part("/terrain-parts/bad.bin", &id, 2, &small).await;
    let f3 = s3.part("/terrain-parts/bad.bin", &id, 3, &small).await;
    let too_small = s3
        .complete(
            "/terrain-parts/bad.bin",
            &id,
            &[(1, &f1), (2, &f2), (3, &f3)],
            &[],
        )
        .await;
    assert_eq!(
        (too_small.status, too_small.code().as_deref()),
        (400, Some("EntityTooSmall"))
    );
    let wrong = s3
        .complete("/terrain-parts/bad.bin", &id, &[(1, &f2), (2, &f2)], &[])
        .await;
    assert_eq!(
        (wrong.status, wrong.code().as_deref()),
        (400, Some("InvalidPart"))
    );
    let order = s3
        .complete("/terrain-parts/bad.bin", &id, &[(2, &f2), (1, &f1)], &[])
        .await;
    assert_eq!(order.code().as_deref(), Some("InvalidPartOrder"));
    let aborted = s3
        .send(
            reqwest::Method::DELETE,
            &format!("/terrain-parts/bad.bin?uploadId={id}"),
            &[],
            vec![],
        )
        .await;
    assert_eq!(aborted.status, 204);
    for method in [reqwest::Method::GET, reqwest::Method::DELETE] {
        let gone = s3
            .send(
                method.clone(),
                &format!("/terrain-parts/bad.bin?uploadId={id}"),
                &[],
                vec![],
            )
            .await;
        assert_eq!(
            (gone.status, gone.code().as_deref()),
            (404, Some("NoSuchUpload")),
            "{method}"
        );
        assert_eq!(text_of(&gone.xml(), "UploadId"), Some(id.as_str()));
    }
    // A create-only completion over an existing key.
    let (_, id) = s3.initiate("/terrain-parts/big.bin", &[]).await;
    let g1 = s3.part("/terrain-parts/big.bin", &id, 1, &small).await;
    let exists = s3
        .complete(
            "/terrain-parts/big.bin",
            &id,
            &[(1, &g1)],
            &[("if-none-match", "*")],
        )
        .await;
    assert_eq!(
        (exists.status, exists.code().as_deref()),
        (412, Some("PreconditionFailed"))
    );

    // UploadPartCopy: two ranges of the object, then completed into a new one.
    let (_, id) = s3.initiate("/terrain-parts/copy.bin", &[]).await;
    let mut copied = Vec::new();
    for (number, range) in [(1, (0, 5 * MIB - 1)), (2, (5 * MIB, 5 * MIB + 999))] {
        let answer = s3
            .send(
                reqwest::Method::PUT,
                &format!("/terrain-parts/copy.bin?partNumber={number}&uploadId={id}"),
                &[
                    ("x-amz-copy-source", "terrain-parts/big.bin"),
                    (
                        "x-amz-copy-source-range",
                        &format!("bytes={}-{}", range.0, range.1),
                    ),
                ],
                vec![],
            )
            .await;
        assert_eq!(answer.status, 200, "{}", answer.text());
        let doc = answer.xml();
        assert_eq!(doc.name, "CopyPartResult");
        let whole = parts.concat();
        let expected = format!("\"{}\"", hex(&md5(&whole[range.0..=range.1])));
        assert_eq!(text_of(&doc, "ETag"), Some(expected.as_str()));
        answers.push(("UploadPartCopy", "", answer.text()));
        copied.push(expected);
    }
    let beyond = s3
        .send(
            reqwest::Method::PUT,
            &format!("/terrain-parts/copy.bin?partNumber=3&uploadId={id}"),
            &[
                ("x-amz-copy-source", "terrain-parts/big.bin"),
                ("x-amz-copy-source-range", "bytes=0-99999999"),
            ],
            vec![],
        )
        .await;
    assert_eq!(beyond.code().as_deref(), Some("InvalidArgument"));
    let done = s3
        .complete(
            "/terrain-parts/copy.bin",
            &id,
            &[(1, &copied[0]), (2, &copied[1])],
            &[],
        )
        .await;
    assert_eq!(done.status, 200, "{}", done.text());
    let got = s3
        .send(reqwest::Method::GET, "/terrain-parts/copy.bin", &[], vec![])
        .await;
    assert!(
        got.body == parts.concat()[..5 * MIB + 1000],
        "the copy is the two ranges"
    );

    // Object tags: set at creation, replaced, read, removed.
    let tags = s3
        .send(
            reqwest::Method::GET,
            "/terrain-parts/big.bin?tagging",
            &[],
            vec![],
        )
        .await;
    let tag_set = child(&tags.xml(), "TagSet").map(|s| texts(s, "Tag", "Key").join(","));
    assert_eq!(tag_set.as_deref(), Some("team,stage"));
    let tagging =
        b"<Tagging><TagSet><Tag><Key>owner</Key><Value>data team</Value></Tag></TagSet></Tagging>"
            .to_vec();
    let md5_header = b64(&md5(&tagging));
    let put = s3
        .send(
            reqwest::Method::PUT,
            "/terrain-parts/big.bin?tagging",
            &[("content-md5", &md5_header)],
            tagging,
        )
        .await;
    assert_eq!(put.status, 200, "{}", put.text());
    let tags = s3
        .send(
            reqwest::Method::GET,
            "/terrain-parts/big.bin?tagging",
            &[],
            vec![],
        )
        .await;
    let doc = tags.xml();
    let set = child(&doc, "TagSet").expect("TagSet");
    assert_eq!(texts(set, "Tag", "Value"), ["data team"]);
    answers.push(("GetObjectTagging", "Tagging", tags.text()));
    let deleted = s3
        .send(
            reqwest::Method::DELETE,
            "/terrain-parts/big.bin?tagging",
            &[],
            vec![],
        )
        .await;
    assert_eq!(deleted.status, 204);
    let tags = s3
        .send(
            reqwest::Method::GET,
            "/terrain-parts/big.bin?tagging",
            &[],
            vec![],
        )
        .await;
    assert_eq!(
        child(&tags.xml(), "TagSet").map(|s| s.children.len()),
        Some(0)
    );

    let mut seen = Vec::new();
    for (operation, documented_root, text) in &answers {
        let root = parse_xml(text);
        let (shape, root_name) = output_root(&model, operation, documented_root);
        assert_eq!(root.name, root_name, "{operation}: root element\n{text}");
        assert_eq!(
            root.attrs, "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"",
            "{operation}: namespace"
        );
        check_shape(&model, &root, &shape, &root.name, &mut seen);
    }
    for member in [
        "CreateMultipartUploadOutput.UploadId",
        "ListPartsOutput.Parts",
        "ListPartsOutput.Initiator",
        "ListPartsOutput.IsTruncated",
        "Part.ETag",
        "Part.Size",
        "Part.ChecksumCRC32",
        "ListMultipartUploadsOutput.Uploads",
        "MultipartUpload.Initiated",
        "CompleteMultipartUploadOutput.ETag",
        "CompleteMultipartUploadOutput.Location",
        "CopyPartResult.ETag",
        "CopyPartResult.LastModified",
        "GetObjectTaggingOutput.TagSet",
        "Tag.Value",
    ] {
        assert!(
            seen.iter().any(|s| s == member),
            "no answer carried {member}"
        );
    }
}

/// Sends request headers declaring a `content-length` body and none of it, and reads
/// the answer: the sandbox refuses an oversized body before reading it.
async fn declare_body(sandbox: &Sandbox, head: &str) -> String {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", sandbox.port()))
        .await
        .expect("connect");
    stream.write_all(head.as_bytes()).await.expect("send");
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut answer))
        .await
        .expect("answered within 30 s")
        .expect("read");
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_bodies_are_refused_in_each_apis_terms() {
    let sandbox = start().await;
    let s3 = declare_body(
        &sandbox,
        "PUT /terrain-huge/k HTTP/1.1\r\nHost: sandbox\r\nAuthorization: AWS4-HMAC-SHA256 Credential=AKIDSANDBOX/20261121/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=0\r\nContent-Length: 600000000\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(s3.starts_with("HTTP/1.1 400"), "{s3}");
    assert!(s3.contains("<Code>EntityTooLarge</Code>"), "{s3}");
    assert!(
        s3.contains("<ProposedSize>600000000</ProposedSize>"),
        "{s3}"
    );
    assert!(
        s3.contains("<MaxSizeAllowed>536870912</MaxSizeAllowed>"),
        "{s3}"
    );
    // Other APIs keep the smaller limit and a plain answer.
    let gcs = declare_body(
        &sandbox,
        "POST /storage/v1/b?project=p HTTP/1.1\r\nHost: sandbox\r\nAuthorization: Bearer t\r\nContent-Length: 100000000\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(gcs.starts_with("HTTP/1.1 413"), "{gcs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aws_s3_cp_moves_big_files_in_parts() {
    if !aws_on_path() {
        println!("skipped: aws is not on PATH");
        return;
    }
    let sandbox = start().await;
    let aws = Aws { sandbox: &sandbox };
    let dir = tempfile::tempdir().expect("temporary directory");
    aws.ok(&["s3", "mb", "s3://terrain-big"]).await;
    // 20 MiB: three parts at the CLI's 8 MiB chunk size.
    let data = content(20 * MIB, 7);
    let local = dir.path().join("big.bin");
    std::fs::write(&local, &data).expect("write big file");
    aws.ok(&["s3", "cp", path_str(&local), "s3://terrain-big/big.bin"])
        .await;
    let head = aws
        .json(&[
            "s3api",
            "head-object",
            "--bucket",
            "terrain-big",
            "--key",
            "big.bin",
        ])
        .await;
    assert_eq!(head["ContentLength"], json!(data.len()), "{head}");
    assert!(
        md5_etag(&head).ends_with("-3\""),
        "a multipart ETag: {head}"
    );
    // The CLI uploads parts with CRC32 checksums; the object's is made of theirs.
    let checksum = aws
        .json(&[
            "s3api",
            "head-object",
            "--bucket",
            "terrain-big",
            "--key",
            "big.bin",
            "--checksum-mode",
            "ENABLED",
        ])
        .await;
    assert_eq!(checksum["ChecksumType"], json!("COMPOSITE"), "{checksum}");
    assert!(
        checksum["ChecksumCRC32"]
            .as_str()
            .is_some_and(|c| c.ends_with("-3")),
        "{checksum}"
    );
    aws.ok(&[
        "s3api",
        "put-object-tagging",
        "--bucket",
        "terrain-big",
        "--key",
        "big.bin",
        "--tagging",
        "TagSet=[{Key=team,Value=ml}]",
    ])
    .await;

    let tags = aws
        .json(&[
            "s3api",
            "get-object-tagging",
            "--bucket",
            "terrain-big",
            "--key",
            "big.bin",
        ])
        .await;
    assert_eq!(tags["TagSet"], json!([{"Key": "team", "Value": "ml"}]));

    // S3 to S3 over 8 MB: UploadPartCopy.
    aws.ok(&[
        "s3",
        "cp",
        "s3://terrain-big/big.bin",
        "s3://terrain-big/big2.bin",
    ])
    .await;
    let copied_parts = sandbox
        .traffic()
        .iter()
        .filter(|e| e.method == "PUT" && e.path == "terrain-big/big2.bin")
        .filter(|e| e.query.contains("partNumber=") && e.status == 200)
        .count();
    assert_eq!(copied_parts, 3, "the copy went in parts");

    let back = dir.path().join("back.bin");
    aws.ok(&["s3", "cp", "s3://terrain-big/big2.bin", path_str(&back)])
        .await;
    assert!(
        std::fs::read(&back).expect("downloaded") == data,
        "the bytes came back"
    );

    // The s3api view of an upload left in progress, and its abort.
    let created = aws
        .json(&[
            "s3api",
            "create-multipart-upload",
            "--bucket",
            "terrain-big",
            "--key",
            "pending.bin",
        ])
        .await;
    let id = created["UploadId"].as_str().unwrap_or("").to_string();
    let uploads = aws
        .json(&["s3api", "list-multipart-uploads", "--bucket", "terrain-big"])
        .await;
    assert_eq!(
        uploads["Uploads"][0]["Key"],
        json!("pending.bin"),
        "{uploads}"
    );
    assert_eq!(uploads["Uploads"][0]["UploadId"], json!(id));
    aws.ok(&[
        "s3api",
        "abort-multipart-upload",
        "--bucket",
        "terrain-big",
        "--key",
        "pending.bin",
        "--upload-id",
        &id,
    ])
    .await;
    aws.fails(
        &[
            "s3api",
            "list-parts",
            "--bucket",
            "terrain-big",
            "--key",
            "pending.bin",
            "--upload-id",
            &id,
        ],
        "NoSuchUpload",
    )
    .await;
    aws.ok(&["s3", "rb", "--force", "s3://terrain-big"]).await;
}
