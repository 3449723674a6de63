//! Compatibility with the official `gcloud` CLI: objects created over HTTP must be listed
//! and described by `gcloud container` and `gcloud filestore` pointed at the sandbox with
//! endpoint overrides, and `gcloud storage` must copy objects both ways (one-request and
//! chunked resumable uploads, validated downloads), list, print, describe and remove
//! them; `gcloud iam` and `gcloud projects` must manage service accounts and the IAM
//! policies of projects and buckets. Skipped (with a message) when gcloud is not installed. gcloud takes seconds per
//! command, so the invocations are few and each test shares one sandbox.

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};
use terrain_sandbox::{Options, Sandbox, Timing};

const PROJECT: &str = "sandbox-proj";

fn gcloud_on_path() -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join("gcloud").is_file()))
}

/// A private gcloud configuration directory and access-token file.
struct Home {
    dir: tempfile::TempDir,
}

impl Home {
    fn new() -> Home {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("token"), "gcloud-token\n").expect("token file");
        std::fs::create_dir(dir.path().join("gcloud-config")).expect("config dir");
        Home { dir }
    }

    fn token_file(&self) -> std::path::PathBuf {
        self.dir.path().join("token")
    }

    fn config_dir(&self) -> std::path::PathBuf {
        self.dir.path().join("gcloud-config")
    }

    /// gcloud with this configuration, pointed at `sandbox`.
    fn gcloud<'a>(&'a self, sandbox: &'a Sandbox) -> Gcloud<'a> {
        Gcloud {
            config_dir: self.config_dir(),
            token_file: self.token_file(),
            sandbox,
        }
    }
}

struct Gcloud<'a> {
    config_dir: std::path::PathBuf,
    token_file: std::path::PathBuf,
    sandbox: &'a Sandbox,
}

impl Gcloud<'_> {
    /// Runs gcloud with a private configuration pointed at the sandbox; returns stdout
    /// and fails the test with gcloud's stderr when the command fails.
    async fn run(&self, args: &[&str]) -> String {
        self.run_with_input(args, None).await
    }

    /// [`Gcloud::run`] with `input` on gcloud's stdin (for `gcloud storage cp -`).
    async fn run_with_input(&self, args: &[&str], input: Option<&[u8]>) -> String {
        let (ok, stdout, stderr) = self.output(args, input).await;
        assert!(
            ok,
            "gcloud {} failed:\nstdout:\n{stdout}\nstderr:\n{stderr}",
            args.join(" "),
        );
        stdout
    }

    /// Runs gcloud expecting it to fail; returns its stderr.
    async fn fails(&self, args: &[&str]) -> String {
        let (ok, stdout, stderr) = self.output(args, None).await;
        assert!(!ok, "gcloud {} succeeded:\n{stdout}", args.join(" "));
        stderr
    }

    /// Runs gcloud: whether it succeeded, its stdout and its stderr.
    async fn output(&self, args: &[&str], input: Option<&[u8]>) -> (bool, String, String) {
        let endpoints = self.sandbox.gcp_endpoints();
        let mut cmd = tokio::process::Command::new("gcloud");
        cmd.args(args);
        // Nothing from the developer's own gcloud setup may leak into the test.
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("CLOUDSDK_") {
                cmd.env_remove(key);
            }
        }
        cmd.env("CLOUDSDK_CONFIG", &self.config_dir)
            .env(
                "CLOUDSDK_API_ENDPOINT_OVERRIDES_CONTAINER",
                &endpoints.container,
            )
            .env("CLOUDSDK_API_ENDPOINT_OVERRIDES_FILE", &endpoints.file)
            .env(
                "CLOUDSDK_API_ENDPOINT_OVERRIDES_SERVICEUSAGE",
                &endpoints.serviceusage,
            )
            .env("CLOUDSDK_API_ENDPOINT_OVERRIDES_IAM", &endpoints.iam)
            .env(
                "CLOUDSDK_API_ENDPOINT_OVERRIDES_CLOUDRESOURCEMANAGER",
                &endpoints.cloudresourcemanager,
            )
            // The storage override names the JSON API's root, `…/storage/v1/`, as
            // `terrain sandbox serve` prints it.
            .env(
                "CLOUDSDK_API_ENDPOINT_OVERRIDES_STORAGE",
                format!("{}storage/v1/", endpoints.storage),
            )
            .env("CLOUDSDK_AUTH_ACCESS_TOKEN_FILE", &self.token_file)
            .env("CLOUDSDK_CORE_PROJECT", PROJECT)
            .env("CLOUDSDK_CORE_DISABLE_PROMPTS", "1")
            .env("CLOUDSDK_COMPONENT_MANAGER_DISABLE_UPDATE_CHECK", "1")
            .env("CLOUDSDK_CORE_DISABLE_USAGE_REPORTING", "1")
            // Small thresholds keep the storage tests fast: files from 256 KiB up go
            // resumable, and streams go in 256 KiB chunks (GCS's chunk granularity).
            .env("CLOUDSDK_STORAGE_RESUMABLE_THRESHOLD", "262144")
            .env("CLOUDSDK_STORAGE_UPLOAD_CHUNK_SIZE", "262144")
            .env(
                "CLOUDSDK_STORAGE_PARALLEL_COMPOSITE_UPLOAD_ENABLED",
                "False",
            );
        cmd.stdin(if input.is_some() {
            std::process::Stdio::piped()
        } else {
            std::process::Stdio::null()
        })
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
        let mut child = cmd.spawn().expect("gcloud runs");
        if let (Some(input), Some(mut stdin)) = (input, child.stdin.take()) {
            use tokio::io::AsyncWriteExt as _;
            stdin
                .write_all(input)
                .await
                .expect("gcloud reads its stdin");
            // Closing stdin ends the stream gcloud uploads.
            drop(stdin);
        }
        let out = tokio::time::timeout(Duration::from_secs(120), child.wait_with_output())
            .await
            .expect("gcloud finishes within two minutes")
            .expect("gcloud runs");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        (out.status.success(), stdout, stderr)
    }

    async fn json(&self, args: &[&str]) -> Value {
        let text = self.run(args).await;
        serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("gcloud {args:?} printed no JSON ({e}):\n{text}"))
    }
}

async fn post(http: &reqwest::Client, url: &str, body: Value) -> Value {
    let resp = http
        .post(url)
        .bearer_auth("setup-token")
        .json(&body)
        .send()
        .await
        .expect("request reaches the sandbox");
    let status = resp.status();
    let body: Value = resp.json().await.expect("JSON response");
    assert!(status.is_success(), "POST {url}: {status} {body}");
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gcloud_lists_and_describes_sandbox_objects() {
    if !gcloud_on_path() {
        println!("skipped: gcloud is not on PATH");
        return;
    }
    let sandbox = Sandbox::start(Options {
        timing: Timing::instant(),
        ..Options::google_apis_on()
    })
    .await
    .expect("sandbox starts");
    let endpoints = sandbox.gcp_endpoints();
    let http = reqwest::Client::new();

    let container = format!("{}v1/projects/{PROJECT}/locations", endpoints.container);
    post(
        &http,
        &format!("{container}/us-central1/clusters"),
        json!({"cluster": {
            "name": "ml",
            "resourceLabels": {"team": "ml"},
            "nodePools": [
                {"name": "system", "initialNodeCount": 1, "config": {"machineType": "e2-standard-4"}},
                {"name": "gpu", "initialNodeCount": 1, "config": {"machineType": "g2-standard-8",
                    "accelerators": [{"acceleratorCount": "1", "acceleratorType": "nvidia-l4"}]}}
            ]
        }}),
    )
    .await;
    post(
        &http,
        &format!("{container}/us-central1-a/clusters"),
        json!({"cluster": {"name": "zonal", "initialNodeCount": 2}}),
    )
    .await;
    post(
        &http,
        &format!(
            "{}v1/projects/{PROJECT}/locations/us-central1-b/instances?instanceId=nfs",
            endpoints.file
        ),
        json!({"tier": "BASIC_HDD", "fileShares": [{"name": "vol1", "capacityGb": 1024}],
            "networks": [{"network": "default"}]}),
    )
    .await;
    sandbox.clear_traffic();

    let home = Home::new();
    let gcloud = home.gcloud(&sandbox);

    // Instant timing: the operations finished on the first read gcloud makes.
    let clusters = gcloud
        .json(&["container", "clusters", "list", "--format=json"])
        .await;
    let mut names: Vec<&str> = clusters
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["ml", "zonal"]);
    assert!(clusters
        .as_array()
        .into_iter()
        .flatten()
        .all(|c| c["status"] == "RUNNING"));

    let ml = gcloud
        .json(&[
            "container",
            "clusters",
            "describe",
            "ml",
            "--region",
            "us-central1",
            "--format=json",
        ])
        .await;
    assert_eq!(
        (ml["name"].as_str(), ml["location"].as_str()),
        (Some("ml"), Some("us-central1"))
    );
    assert_eq!(ml["resourceLabels"]["team"], "ml");
    assert_eq!(
        ml["nodePools"][1]["config"]["accelerators"][0]["acceleratorCount"],
        "1"
    );

    let zonal = gcloud
        .json(&[
            "container",
            "clusters",
            "describe",
            "zonal",
            "--zone",
            "us-central1-a",
            "--format=json",
        ])
        .await;
    assert_eq!(
        (zonal["zone"].as_str(), zonal["currentNodeCount"].as_i64()),
        (Some("us-central1-a"), Some(2))
    );

    // A mutation through gcloud exercises the operation format: gcloud polls it to DONE.
    gcloud
        .run(&[
            "container",
            "node-pools",
            "create",
            "extra",
            "--cluster",
            "ml",
            "--region",
            "us-central1",
            "--num-nodes",
            "1",
            "--machine-type",
            "n2-standard-2",
        ])
        .await;
    let pools = gcloud
        .run(&[
            "container",
            "node-pools",
            "list",
            "--cluster",
            "ml",
            "--region",
            "us-central1",
        ])
        .await;
    let header = pools.lines().next().unwrap_or("");
    for column in ["NAME", "MACHINE_TYPE", "DISK_SIZE_GB", "NODE_VERSION"] {
        assert!(
            header.contains(column),
            "node-pools list header {header:?} lacks {column}"
        );
    }
    for cell in ["system", "gpu", "g2-standard-8", "extra", "n2-standard-2"] {
        assert!(
            pools.contains(cell),
            "node-pools list lacks {cell}:\n{pools}"
        );
    }

    gcloud
        .run(&[
            "filestore",
            "instances",
            "create",
            "scratch",
            "--zone",
            "us-central1-a",
            "--tier",
            "BASIC_SSD",
            "--file-share",
            "name=scratch,capacity=2.5TB",
            "--network",
            "name=default",
        ])
        .await;
    let instances = gcloud.run(&["filestore", "instances", "list"]).await;
    let mut lines = instances.lines();
    let header = lines.next().unwrap_or("");
    for column in [
        "INSTANCE_NAME",
        "LOCATION",
        "TIER",
        "CAPACITY_GB",
        "FILE_SHARE_NAME",
        "IP_ADDRESS",
        "STATE",
    ] {
        assert!(
            header.contains(column),
            "filestore list header {header:?} lacks {column}"
        );
    }
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split_whitespace().collect()).collect();
    let expected = [
        [
            "nfs",
            "us-central1-b",
            "BASIC_HDD",
            "1024",
            "vol1",
            "10.200.0.2",
            "READY",
        ],
        [
            "scratch",
            "us-central1-a",
            "BASIC_SSD",
            "2560",
            "scratch",
            "10.200.0.10",
            "READY",
        ],
    ];
    for cells in expected {
        assert!(
            rows.iter().any(|row| cells.iter().all(|c| row.contains(c))),
            "no filestore row with {cells:?} in:\n{instances}"
        );
    }

    let nfs = gcloud
        .json(&[
            "filestore",
            "instances",
            "describe",
            "nfs",
            "--zone",
            "us-central1-b",
            "--format=json",
        ])
        .await;
    assert_eq!(
        nfs["name"],
        format!("projects/{PROJECT}/locations/us-central1-b/instances/nfs")
    );
    assert_eq!(nfs["fileShares"][0]["capacityGb"], "1024");

    let calls: Vec<String> = sandbox
        .traffic()
        .iter()
        .map(|e| format!("{} {} /{}/{}", e.status, e.method, e.api, e.path))
        .collect();
    println!("paths gcloud called:\n{}", calls.join("\n"));
    assert!(
        sandbox.traffic().iter().all(|e| e.status == 200),
        "gcloud saw errors:\n{}",
        calls.join("\n")
    );
    sandbox.shutdown().await;
}

/// The official storage discovery document, kept in the repository.
fn storage_discovery() -> Value {
    terrain_contracts::discovery("storage", "v1")
}

/// Fields of `value` that discovery schema `schema` lacks or types differently
/// (strings, objects and string maps, one level into referenced schemas).
fn shape_problems(doc: &Value, schema: &str, value: &Value) -> Vec<String> {
    let props = &doc["schemas"][schema]["properties"];
    let mut problems = Vec::new();
    for (key, v) in value.as_object().into_iter().flatten() {
        let Some(prop) = props.get(key) else {
            problems.push(format!("{schema}.{key} is not in the discovery document"));
            continue;
        };
        let ok = match prop["type"].as_str() {
            Some("string") => v.is_string(),
            Some("boolean") => v.is_boolean(),
            Some("array") => v.is_array(),
            Some("object") => v.is_object(),
            _ if prop.get("$ref").is_some() => v.is_object(),
            _ => true,
        };
        if !ok {
            problems.push(format!("{schema}.{key}: {v} is not a {}", prop["type"]));
        }
    }
    problems
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gcloud_storage_copies_objects_both_ways() {
    if !gcloud_on_path() {
        println!("skipped: gcloud is not on PATH");
        return;
    }
    let sandbox = Sandbox::start(Options {
        timing: Timing::instant(),
        ..Options::google_apis_on()
    })
    .await
    .expect("sandbox starts");
    let endpoints = sandbox.gcp_endpoints();
    let http = reqwest::Client::new();
    let bucket = "gcloud-cp-bucket";
    post(
        &http,
        &format!("{}storage/v1/b?project={PROJECT}", endpoints.storage),
        json!({"name": bucket}),
    )
    .await;
    sandbox.clear_traffic();

    let home = Home::new();
    let gcloud = home.gcloud(&sandbox);
    let small = b"hello from gcloud storage cp\n".to_vec();
    // Over the 256 KiB resumable threshold, and not a whole number of 256 KiB chunks.
    let big: Vec<u8> = (0..3 * 256 * 1024 + 12_345)
        .map(|i: usize| (i * 31 % 251) as u8)
        .collect();
    let small_file = home.dir.path().join("small.txt");
    let big_file = home.dir.path().join("big.bin");
    std::fs::write(&small_file, &small).expect("small file");
    std::fs::write(&big_file, &big).expect("big file");
    let gs = |name: &str| format!("gs://{bucket}/{name}");
    let path = |p: &Path| p.to_str().expect("a UTF-8 path").to_string();

    // A small file goes up in one request; a big one resumable; a stream of unknown
    // length resumable in 256 KiB chunks.
    gcloud
        .run(&["storage", "cp", &path(&small_file), &gs("small.txt")])
        .await;
    gcloud
        .run(&["storage", "cp", &path(&big_file), &gs("data/big.bin")])
        .await;
    gcloud
        .run_with_input(
            &["storage", "cp", "-", &gs("data/streamed.bin")],
            Some(&big),
        )
        .await;
    let uploads: Vec<(String, String, u16)> = sandbox
        .traffic()
        .iter()
        .filter(|e| e.path.starts_with("upload/") || e.path.starts_with("resumable/"))
        .map(|e| (e.method.clone(), e.query.clone(), e.status))
        .collect();
    println!("uploads gcloud made:\n{uploads:#?}");
    assert!(
        uploads.iter().any(|(m, q, s)| m == "POST"
            && q.contains("uploadType=multipart")
            && q.contains("name=small.txt") == q.contains("name=")
            && *s == 200),
        "the small file goes up as one multipart request"
    );
    let sessions = uploads
        .iter()
        .filter(|(m, q, s)| m == "POST" && q.contains("uploadType=resumable") && *s == 200)
        .count();
    assert_eq!(sessions, 2, "the big file and the stream go resumable");
    let incomplete = uploads
        .iter()
        .filter(|(m, _, s)| m == "PUT" && *s == 308)
        .count();
    assert!(
        incomplete >= 3,
        "the stream goes in several chunks, each answered 308 but the last"
    );

    // Listing, long listing, printing, describing.
    let listing = gcloud
        .run(&["storage", "ls", &format!("gs://{bucket}")])
        .await;
    let lines: Vec<&str> = listing.lines().collect();
    // gcloud prints a page's objects, then its prefixes.
    assert_eq!(lines, [gs("small.txt"), gs("data/")], "{listing}");
    let long = gcloud
        .run(&["storage", "ls", "-l", &format!("gs://{bucket}/data/")])
        .await;
    for (name, size) in [("big.bin", big.len()), ("streamed.bin", big.len())] {
        assert!(
            long.lines()
                .any(|l| l.contains(&gs(&format!("data/{name}")))
                    && l.split_whitespace().next() == Some(&size.to_string())),
            "ls -l lists {name} with {size} bytes:\n{long}"
        );
    }
    assert!(long.contains("TOTAL: 2 objects"), "{long}");
    let cat = gcloud.run(&["storage", "cat", &gs("small.txt")]).await;
    assert_eq!(cat.as_bytes(), small.as_slice());
    let described = gcloud
        .json(&[
            "storage",
            "objects",
            "describe",
            &gs("data/big.bin"),
            "--format=json",
        ])
        .await;
    assert_eq!(described["name"], "data/big.bin");
    assert_eq!(
        described["size"].to_string().trim_matches('"'),
        big.len().to_string()
    );
    for field in ["md5_hash", "crc32c_hash"] {
        assert!(
            described[field].as_str().is_some_and(|h| !h.is_empty()),
            "describe shows {field}: {described}"
        );
    }

    // Down again, validated against the hashes, byte for byte.
    let down = home.dir.path().join("down");
    std::fs::create_dir(&down).expect("download dir");
    for name in ["big.bin", "streamed.bin"] {
        gcloud
            .run(&["storage", "cp", &gs(&format!("data/{name}")), &path(&down)])
            .await;
        let got = std::fs::read(down.join(name)).expect("downloaded file");
        assert!(
            got == big,
            "{name} came back with {} bytes, changed",
            got.len()
        );
    }
    gcloud
        .run(&[
            "storage",
            "cp",
            &gs("small.txt"),
            &path(&down.join("small.txt")),
        ])
        .await;
    assert_eq!(
        std::fs::read(down.join("small.txt")).expect("small file"),
        small
    );

    gcloud.run(&["storage", "rm", &gs("small.txt")]).await;
    let after = gcloud
        .run(&["storage", "ls", &format!("gs://{bucket}")])
        .await;
    assert_eq!(after.lines().collect::<Vec<_>>(), [gs("data/")], "{after}");

    let traffic = sandbox.traffic();
    let calls: Vec<String> = traffic
        .iter()
        .map(|e| format!("{} {} /{} {}", e.status, e.method, e.path, e.query))
        .collect();
    println!("calls gcloud made:\n{}", calls.join("\n"));
    // gcloud looks a destination up before copying to it: those 404s are expected.
    let probe = |e: &terrain_sandbox::Exchange| {
        e.status == 404 && e.method == "GET" && !e.query.contains("alt=media")
    };
    assert!(
        traffic
            .iter()
            .all(|e| matches!(e.status, 200 | 204 | 206 | 308) || probe(e)),
        "gcloud saw errors:\n{}",
        calls.join("\n")
    );
    {
        let doc = storage_discovery();
        let mut checked = 0;
        for e in &traffic {
            // Object resources answered, and the metadata a resumable upload starts with.
            let bodies = [e.response.as_ref(), e.request.as_ref()];
            for body in bodies.into_iter().flatten() {
                let problems = match body["kind"].as_str() {
                    Some("storage#object") => shape_problems(&doc, "Object", body),
                    Some("storage#objects") => body["items"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .flat_map(|o| shape_problems(&doc, "Object", o))
                        .chain(shape_problems(&doc, "Objects", body))
                        .collect(),
                    _ if e.method == "POST" && e.query.contains("uploadType=resumable") => {
                        shape_problems(&doc, "Object", body)
                    }
                    _ => continue,
                };
                assert_eq!(problems, Vec::<String>::new(), "{} {}", e.method, e.path);
                checked += 1;
            }
        }
        assert!(checked > 0, "object bodies were checked against discovery");
    }
    sandbox.shutdown().await;
}

#[tokio::test]
async fn gcloud_finds_the_apis_of_a_new_project_off_and_turns_them_on() {
    if !gcloud_on_path() {
        println!("skipped: gcloud is not on PATH");
        return;
    }
    // A new project: only Cloud Storage and Service Usage on.
    let sandbox = Sandbox::start(Options {
        timing: Timing::instant(),
        ..Options::default()
    })
    .await
    .expect("sandbox starts");
    let home = Home::new();
    let gcloud = home.gcloud(&sandbox);
    let enabled = |text: String| -> Vec<String> {
        let mut names: Vec<String> = text.lines().map(str::to_string).collect();
        names.sort();
        names
    };
    let listed = gcloud
        .run(&[
            "services",
            "list",
            "--enabled",
            "--format=value(config.name)",
        ])
        .await;
    assert_eq!(
        enabled(listed),
        ["serviceusage.googleapis.com", "storage.googleapis.com"]
    );
    // Kubernetes Engine is off: refused as Google refuses it (403 SERVICE_DISABLED).
    let refused = gcloud
        .fails(&["container", "clusters", "list", "--format=json"])
        .await;
    assert!(refused.contains("container.googleapis.com"), "{refused}");
    let traffic = sandbox.traffic();
    let last = traffic
        .iter()
        .rev()
        .find(|e| e.api == "container")
        .expect("gcloud called Kubernetes Engine");
    assert_eq!(last.status, 403);
    let details = &last.response.as_ref().expect("a body")["error"]["details"][0];
    assert_eq!(details["reason"], "SERVICE_DISABLED");
    assert_eq!(details["metadata"]["service"], "container.googleapis.com");
    // Enabled (gcloud waits on the operation), with Compute Engine it depends on.
    gcloud
        .run(&["services", "enable", "container.googleapis.com"])
        .await;
    let listed = gcloud
        .run(&[
            "services",
            "list",
            "--enabled",
            "--format=value(config.name)",
        ])
        .await;
    assert_eq!(
        enabled(listed),
        [
            "compute.googleapis.com",
            "container.googleapis.com",
            "serviceusage.googleapis.com",
            "storage.googleapis.com"
        ]
    );
    let clusters = gcloud
        .json(&["container", "clusters", "list", "--format=json"])
        .await;
    assert_eq!(clusters, json!([]));
}

#[tokio::test]
async fn gcloud_manages_service_accounts_and_iam_policies() {
    if !gcloud_on_path() {
        println!("skipped: gcloud is not on PATH");
        return;
    }
    let sandbox = Sandbox::start(Options {
        timing: Timing::instant(),
        ..Options::google_apis_on()
    })
    .await
    .expect("sandbox starts");
    let home = Home::new();
    let gcloud = home.gcloud(&sandbox);
    let email = format!("runner@{PROJECT}.iam.gserviceaccount.com");
    let member = format!("serviceAccount:{email}");
    gcloud
        .run(&[
            "iam",
            "service-accounts",
            "create",
            "runner",
            "--display-name",
            "Pipeline runner",
        ])
        .await;
    let listed = gcloud
        .run(&[
            "iam",
            "service-accounts",
            "list",
            "--format=value(email,displayName)",
        ])
        .await;
    assert_eq!(listed.trim(), format!("{email}\tPipeline runner"));
    // Project policy: gcloud reads it, adds the binding and writes it back with the etag.
    gcloud
        .run(&[
            "projects",
            "add-iam-policy-binding",
            PROJECT,
            "--member",
            &member,
            "--role",
            "roles/container.defaultNodeServiceAccount",
            "--condition=None",
        ])
        .await;
    let policy = gcloud
        .json(&["projects", "get-iam-policy", PROJECT, "--format=json"])
        .await;
    let roles: Vec<&str> = policy["bindings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|b| b["role"].as_str())
        .collect();
    assert_eq!(
        roles,
        ["roles/owner", "roles/container.defaultNodeServiceAccount"],
        "the owner's binding is kept: {policy}"
    );
    // A role Google does not have is refused as Google refuses it.
    let refused = gcloud
        .fails(&[
            "projects",
            "add-iam-policy-binding",
            PROJECT,
            "--member",
            &member,
            "--role",
            "roles/storage.objectAdmn",
            "--condition=None",
        ])
        .await;
    assert!(
        refused.contains("roles/storage.objectAdmn is not supported"),
        "{refused}"
    );
    // Bucket policy.
    gcloud
        .run(&[
            "storage",
            "buckets",
            "create",
            "gs://iam-runs",
            "--location",
            "us-central1",
        ])
        .await;
    gcloud
        .run(&[
            "storage",
            "buckets",
            "add-iam-policy-binding",
            "gs://iam-runs",
            "--member",
            &member,
            "--role",
            "roles/storage.objectUser",
        ])
        .await;
    let bucket = gcloud
        .json(&[
            "storage",
            "buckets",
            "get-iam-policy",
            "gs://iam-runs",
            "--format=json",
        ])
        .await;
    assert!(
        bucket["bindings"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|b| b["role"] == "roles/storage.objectUser" && b["members"][0] == member.as_str()),
        "{bucket}"
    );
    let role = gcloud
        .json(&[
            "iam",
            "roles",
            "describe",
            "roles/storage.objectUser",
            "--format=json",
        ])
        .await;
    assert!(
        role["includedPermissions"]
            .as_array()
            .is_some_and(|p| p.iter().any(|p| p == "storage.objects.create")),
        "{role}"
    );
    // What gcloud sent and got, against the discovery documents.
    let iam = terrain_contracts::discovery("iam", "v1");
    let crm = terrain_contracts::discovery("cloudresourcemanager", "v3");
    let mut checked = 0;
    for e in sandbox.traffic() {
        let (doc, schema) = match (e.api.as_str(), e.path.as_str()) {
            ("iam", p) if p.ends_with("/serviceAccounts") && e.method == "POST" => {
                (&iam, "ServiceAccount")
            }
            ("cloudresourcemanager", p)
                if p.ends_with(":getIamPolicy") || p.ends_with(":setIamPolicy") =>
            {
                (&crm, "Policy")
            }
            _ => continue,
        };
        if e.status != 200 {
            continue;
        }
        let body = e.response.as_ref().expect("a body");
        assert_eq!(
            shape_problems(doc, schema, body),
            Vec::<String>::new(),
            "{} {}",
            e.method,
            e.path
        );
        checked += 1;
    }
    assert!(
        checked >= 3,
        "IAM answers were checked against discovery ({checked})"
    );
    gcloud
        .run(&["iam", "service-accounts", "delete", &email])
        .await;
    assert_eq!(
        gcloud
            .run(&["iam", "service-accounts", "list", "--format=value(email)"])
            .await
            .trim(),
        ""
    );
    sandbox.shutdown().await;
}
