//! Working as a team, through the real binary: a stack whose state lives in S3 or GCS,
//! run on the sandbox (whose storage holds the state, the bucket made on first use)
//! with the state commands reading it there; and two applies of one stack from two processes sharing
//! a served sandbox, the second refused at once naming the holder, a third waiting for
//! the lock with `--lock-timeout`.

use crate::common;
use crate::support::aws as aws_support;
use crate::support::moto_proxy;

use std::process::Stdio;
use std::time::Duration;

use common::Sandbox as Work;

/// One bucket on GCP, its state in S3; `extra` is appended.
fn stack(extra: &str) -> String {
    format!(
        r#"[stack]
name = "tiny"

[backend.s3]
bucket = "team-state"
key = "ml/tiny.json"
region = "us-east-1"

[providers.gcp]
project = "tiny-project"
region = "us-central1"

[gcs_bucket.data]
name = "tiny-data"
location = "us-central1"
{extra}"#
    )
}

/// Applies `stack_toml` on the sandbox and checks its state went to the remote store
/// (whose objects `sandbox list` shows as `objects`), not to a file, and that plan,
/// destroy and the state commands read it there.
fn remote_state_on_the_sandbox(stack_toml: &str, objects: &[&str], lock: &str) {
    let work = Work::new();
    work.write("stack.toml", stack_toml);
    work.run(&["apply", "--sandbox", "--auto-approve"])
        .success();
    assert!(
        !work.exists("state/sandbox/tiny.json") && !work.exists("state/tiny.json"),
        "the state went to the remote store, not to a file: {:?}",
        work.files()
    );
    let list = work.run(&["state", "list", "--sandbox"]);
    list.success();
    assert_eq!(list.stdout, "gcs_bucket.data\n");
    let inventory = work.run(&["sandbox", "list"]);
    inventory.success();
    for line in objects.iter().chain(&["gcs bucket tiny-data"]) {
        assert!(
            inventory.stdout.lines().any(|l| l == *line),
            "{line}:\n{}",
            inventory.stdout
        );
    }
    assert!(
        !inventory.stdout.lines().any(|l| l == lock),
        "the run released its lock:\n{}",
        inventory.stdout
    );
    work.run(&["plan", "--sandbox", "--detailed-exitcode"])
        .expect_code(0);
    work.run(&["destroy", "--sandbox", "--auto-approve"])
        .success();
    let list = work.run(&["state", "list", "--sandbox"]);
    list.success();
    assert_eq!(list.stdout, "");
}

#[test]
fn s3_state_on_the_sandbox_holds_the_stack_and_no_local_state_is_written() {
    remote_state_on_the_sandbox(
        &stack(""),
        &["s3 bucket team-state", "s3 object team-state/ml/tiny.json"],
        "s3 object team-state/ml/tiny.json.lock",
    );
}

#[test]
fn gcs_state_on_the_sandbox_holds_the_stack_and_no_local_state_is_written() {
    remote_state_on_the_sandbox(
        &with_backend("[backend.gcs]\nbucket = \"team-state\"\nprefix = \"ml/tiny\"\n"),
        &[
            "gcs bucket team-state",
            "gcs object team-state/ml/tiny/default.json",
        ],
        "gcs object team-state/ml/tiny/default.json.lock",
    );
}

/// Two applies of `work`'s stack, each run with `args` (and `envs`): the first holds
/// the lock (the stack sleeps 20 s, long enough for the second to find it held even on
/// a loaded machine) until `locked` says its lock object exists; the second is refused
/// at once naming the holder of `location`; a third waits for the lock with
/// `--lock-timeout` and finds the work done.
fn two_applies(
    work: &Work,
    args: &[&str],
    envs: &[(&str, &str)],
    location: &str,
    locked: impl Fn() -> bool,
) {
    let first_args: Vec<&str> = ["apply", "--auto-approve"]
        .iter()
        .chain(args)
        .copied()
        .collect();
    let mut first = work
        .command(&first_args, envs)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the first apply");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !locked() {
        if first.try_wait().expect("poll the first apply").is_some() {
            let run = work.finish(first, &first_args);
            panic!(
                "the first apply ended before its lock was seen:\n{}\n{}",
                run.stdout, run.stderr
            );
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for the first apply's lock"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let second = work.run_env(&first_args, envs);
    if second.code != Some(1) {
        // Say what the first run did too: a second run that got the lock means the
        // first lost or released it.
        let _ = first.kill();
        let run = work.finish(first, &first_args);
        panic!(
            "the second apply exited with {:?}, expected 1:\n{}\n{}\n--- the first apply ---\n{}\n{}",
            second.code, second.stdout, second.stderr, run.stdout, run.stderr
        );
    }
    for want in [
        format!("state {location} is locked by"),
        "for `apply`".to_string(),
        "terrain force-unlock".to_string(),
    ] {
        assert!(second.stderr.contains(&want), "{want}:\n{}", second.stderr);
    }
    let mut third_args = first_args.clone();
    third_args.extend(["--lock-timeout", "60s"]);
    let third = work.run_env(&third_args, envs);
    third.success();
    work.finish(first, &first_args).success();
    assert!(
        third.stdout.contains("No changes") || third.stdout.contains("0 added"),
        "the third apply found the first one's work done:\n{}",
        third.stdout
    );
}

/// Serves the sandbox of `work` until dropped, so that several runs share it.
struct Serve(std::process::Child);

impl Serve {
    fn start(work: &Work) -> Self {
        let child = work
            .command(&["sandbox", "serve"], &[])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start terrain sandbox serve");
        work.wait_for("the served sandbox", Duration::from_secs(30), || {
            work.exists("state/sandbox/serve.json").then_some(())
        });
        Self(child)
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Whether `terrain sandbox list` in `work` shows `line`.
fn sandbox_holds(work: &Work, line: &str) -> bool {
    work.run(&["sandbox", "list"])
        .stdout
        .lines()
        .any(|l| l == line)
}

const SLEEP: &str =
    "\n[time_sleep.settle]\ncreate_duration = \"20s\"\ndepends_on = [\"gcs_bucket.data\"]\n";

#[test]
fn two_applies_of_one_s3_state_the_second_refused_naming_the_holder() {
    let work = Work::new();
    work.write("stack.toml", &stack(SLEEP));
    let _serve = Serve::start(&work);
    two_applies(
        &work,
        &["--sandbox"],
        &[],
        "s3://team-state/ml/tiny.json",
        || sandbox_holds(&work, "s3 object team-state/ml/tiny.json.lock"),
    );
}

#[test]
fn two_applies_of_one_gcs_state_the_second_refused_naming_the_holder() {
    let work = Work::new();
    work.write(
        "stack.toml",
        &with_backend("[backend.gcs]\nbucket = \"team-state\"\nprefix = \"ml/tiny\"\n").replace(
            "location = \"us-central1\"\n",
            &format!("location = \"us-central1\"\n{SLEEP}"),
        ),
    );
    let _serve = Serve::start(&work);
    two_applies(
        &work,
        &["--sandbox"],
        &[],
        "gs://team-state/ml/tiny/default.json",
        || sandbox_holds(&work, "gcs object team-state/ml/tiny/default.json.lock"),
    );
}

/// Against moto, with the AWS default credential chain (the environment) and an
/// S3-compatible endpoint named in the stack: no sandbox at all.
#[test]
fn two_applies_of_one_s3_state_on_moto_the_second_refused_naming_the_holder() {
    let moto = aws_support::Moto::start();
    let proxy = moto_proxy::MotoProxy::start(&moto.url);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let config = serde_json::json!({"region": "us-east-1", "endpoint": proxy.url});
        let client = terrain_providers::aws::config::s3(&aws_support::ctx("test", config))
            .await
            .expect("S3 client");
        client
            .create_bucket()
            .bucket("team-state")
            .send()
            .await
            .expect("create the bucket");
        client
            .put_bucket_versioning()
            .bucket("team-state")
            .versioning_configuration(
                aws_sdk_s3::types::VersioningConfiguration::builder()
                    .status(aws_sdk_s3::types::BucketVersioningStatus::Enabled)
                    .build(),
            )
            .send()
            .await
            .expect("enable versioning");
    });
    let work = Work::new();
    work.write(
        "stack.toml",
        &format!(
            "[stack]\nname = \"tiny\"\n\n[backend.s3]\nbucket = \"team-state\"\nkey = \"ml/tiny.json\"\nregion = \"us-east-1\"\nendpoint = \"{}\"\n\n[time_sleep.settle]\ncreate_duration = \"20s\"\n",
            proxy.url
        ),
    );
    let envs = [
        ("AWS_ACCESS_KEY_ID", "AKIDTERRAINTEST"),
        ("AWS_SECRET_ACCESS_KEY", "terrain-test-secret"),
        ("AWS_EC2_METADATA_DISABLED", "true"),
        ("AWS_CONFIG_FILE", "/nonexistent/terrain-test-aws-config"),
        (
            "AWS_SHARED_CREDENTIALS_FILE",
            "/nonexistent/terrain-test-aws-credentials",
        ),
    ];
    let lock_url = format!("{}/team-state/ml/tiny.json.lock", proxy.url);
    // An anonymous read of a private object is refused (403); of a missing one, 404.
    two_applies(&work, &[], &envs, "s3://team-state/ml/tiny.json", || {
        matches!(http_status(&lock_url), Some(200 | 403))
    });
    assert_eq!(http_status(&lock_url), Some(404), "the lock was released");
}

/// The status of an anonymous GET of `url`.
fn http_status(url: &str) -> Option<u16> {
    use std::io::{Read, Write};
    let rest = url.strip_prefix("http://")?;
    let (addr, path) = rest.split_once('/')?;
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    write!(
        s,
        "GET /{path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    out.split_whitespace().nth(1)?.parse().ok()
}

/// A stack whose bucket is named after its environment and a variable each
/// environment sets.
const ENVS: &str = r#"[stack]
name = "tiny"

[variables.suffix]
default = "dev"

[variables.location]
default = "us-central1"

[providers.gcp]
project = "tiny-project"
region = "us-central1"

[gcs_bucket.data]
name = "tiny-${env}-${var.suffix}"
location = "${var.location}"
"#;

fn envs() -> Work {
    let work = Work::new();
    work.write("stack.toml", ENVS);
    work.write("envs/staging.toml", "suffix = \"stg\"\n");
    work.write("envs/prod.toml", "# prod\nsuffix = \"prd\"\n");
    work
}

#[test]
fn environments_hold_two_states_that_never_mix() {
    let work = envs();
    let staging = work.run(&["apply", "--sandbox", "--auto-approve", "--env", "staging"]);
    staging.success();
    assert!(
        staging.stdout.starts_with("Environment staging: state "),
        "{}",
        staging.stdout
    );
    assert!(
        staging.stdout.contains("state/sandbox/staging/tiny.json"),
        "{}",
        staging.stdout
    );
    work.run_env(
        &["apply", "--sandbox", "--auto-approve"],
        &[("TERRAIN_ENV", "prod")],
    )
    .success();
    assert_eq!(
        work.state_addresses("state/sandbox/staging/tiny.json"),
        ["gcs_bucket.data"]
    );
    assert_eq!(
        work.state_addresses("state/sandbox/prod/tiny.json"),
        ["gcs_bucket.data"]
    );
    assert!(
        !work.exists("state/sandbox/tiny.json"),
        "{:?}",
        work.files()
    );
    let inventory = work.run(&["sandbox", "list"]);
    for bucket in ["gcs bucket tiny-staging-stg", "gcs bucket tiny-prod-prd"] {
        assert!(
            inventory.stdout.lines().any(|l| l == bucket),
            "{bucket}:\n{}",
            inventory.stdout
        );
    }
    // Each environment plans clean against its own state.
    for env in ["staging", "prod"] {
        work.run(&["plan", "--sandbox", "--detailed-exitcode", "--env", env])
            .expect_code(0);
    }
    // A variables file overrides the environment's; --var overrides both.
    work.write("extra.toml", "suffix = \"x1\"\n");
    let plan = work.run(&[
        "plan",
        "--sandbox",
        "--env",
        "staging",
        "--var-file",
        "extra.toml",
    ]);
    plan.success();
    assert!(plan.stdout.contains("tiny-staging-x1"), "{}", plan.stdout);
    let plan = work.run(&[
        "plan",
        "--sandbox",
        "--env",
        "staging",
        "--var-file",
        "extra.toml",
        "--var",
        "suffix=x2",
    ]);
    assert!(plan.stdout.contains("tiny-staging-x2"), "{}", plan.stdout);

    // A saved plan applies to the environment and with the files it was made with.
    work.run(&[
        "plan",
        "--sandbox",
        "--env",
        "staging",
        "--var-file",
        "extra.toml",
        "--out",
        "staging.plan",
    ])
    .success();
    work.run(&["apply", "--sandbox", "staging.plan"]).success();
    let state = work.json("state/sandbox/staging/tiny.json");
    assert_eq!(
        state["resources"]["gcs_bucket.data"]["spec"]["name"],
        "tiny-staging-x1"
    );
    let prod = work.json("state/sandbox/prod/tiny.json");
    assert_eq!(
        prod["resources"]["gcs_bucket.data"]["spec"]["name"],
        "tiny-prod-prd"
    );
}

#[test]
fn an_unknown_environment_or_variable_is_refused_naming_what_exists() {
    let work = envs();
    let run = work.run(&["plan", "--sandbox", "--env", "stagin"]);
    run.failure();
    assert!(
        run.stderr.contains("--env stagin: no environment file")
            && run.stderr.contains("did you mean `staging`?")
            && run.stderr.contains("environments: prod, staging"),
        "{}",
        run.stderr
    );
    work.write("envs/typo.toml", "sufix = \"x\"\nlocation = 3\n");
    let run = work.run(&["validate", "--env", "typo"]);
    run.failure();
    for want in [
        "envs/typo.toml:1:1",
        "the stack declares no variable `sufix`",
        "did you mean `suffix`?",
        "envs/typo.toml:2:12",
        "variables.location: the number 3 is not a",
    ] {
        assert!(run.stderr.contains(want), "{want}:\n{}", run.stderr);
    }
    assert!(!work.exists("state"), "{:?}", work.files());
}

#[test]
fn an_environment_of_an_s3_state_has_its_own_key() {
    let work = envs();
    work.edit(
        "stack.toml",
        "[variables.suffix]",
        "[backend.s3]\nbucket = \"team-state\"\nkey = \"ml/tiny.json\"\n\n[variables.suffix]",
    );
    let run = work.run(&["apply", "--sandbox", "--auto-approve", "--env", "prod"]);
    run.success();
    assert!(
        run.stdout
            .starts_with("Environment prod: state s3://team-state/ml/tiny.prod.json"),
        "{}",
        run.stdout
    );
    let inventory = work.run(&["sandbox", "list"]);
    assert!(
        inventory
            .stdout
            .lines()
            .any(|l| l == "s3 object team-state/ml/tiny.prod.json"),
        "{}",
        inventory.stdout
    );
    let list = work.run(&["state", "list", "--sandbox", "--env", "prod"]);
    assert_eq!(list.stdout, "gcs_bucket.data\n");
    let list = work.run(&["state", "list", "--sandbox", "--env", "staging"]);
    assert_eq!(list.stdout, "", "staging has its own, empty state");
}

/// `stack("")` with its `[backend.s3]` table replaced by `backend` (empty: local).
fn with_backend(backend: &str) -> String {
    stack("").replace(
        "[backend.s3]\nbucket = \"team-state\"\nkey = \"ml/tiny.json\"\nregion = \"us-east-1\"\n",
        backend,
    )
}

/// Lineage and serial of the state `terrain state pull` writes.
fn pulled(work: &Work) -> (String, u64) {
    work.run(&["state", "pull", "--sandbox", "pulled.json"])
        .success();
    assert_eq!(work.mode("pulled.json"), 0o600);
    let s = work.json("pulled.json");
    (
        s["lineage"].as_str().expect("lineage").to_string(),
        s["serial"].as_u64().expect("serial"),
    )
}

#[test]
fn migrate_local_to_s3_to_gcs_to_local_keeps_serial_and_lineage() {
    let work = Work::new();
    work.write("stack.toml", &with_backend(""));
    work.run(&["apply", "--sandbox", "--auto-approve"])
        .success();
    let local = work.json("state/sandbox/tiny.json");
    let origin = (
        local["lineage"].as_str().expect("lineage").to_string(),
        local["serial"].as_u64().expect("serial"),
    );

    work.write(
        "stack.toml",
        &with_backend("[backend.s3]\nbucket = \"team-state\"\nkey = \"ml/tiny.json\"\n"),
    );
    let run = work.run(&[
        "state",
        "migrate",
        "--sandbox",
        "--from",
        "state/sandbox/tiny.json",
    ]);
    run.success();
    assert!(
        run.stdout.contains("to s3://team-state/ml/tiny.json")
            && run.stdout.contains("was left as it was"),
        "{}",
        run.stdout
    );
    assert_eq!(pulled(&work), origin);
    work.run(&["plan", "--sandbox", "--detailed-exitcode"])
        .expect_code(0);

    work.write(
        "stack.toml",
        &with_backend("[backend.gcs]\nbucket = \"team-state\"\nprefix = \"ml/tiny\"\n"),
    );
    work.run(&[
        "state",
        "migrate",
        "--sandbox",
        "--from",
        "s3://team-state/ml/tiny.json",
    ])
    .success();
    assert_eq!(pulled(&work), origin);
    work.run(&["plan", "--sandbox", "--detailed-exitcode"])
        .expect_code(0);

    work.write(
        "stack.toml",
        &with_backend("[backend.local]\npath = \"state/moved.json\"\n"),
    );
    work.run(&[
        "state",
        "migrate",
        "--sandbox",
        "--from",
        "gs://team-state/ml/tiny/default.json",
    ])
    .success();
    let moved = work.json("state/sandbox/moved.json");
    assert_eq!(
        (
            moved["lineage"].as_str().expect("lineage"),
            moved["serial"].as_u64().expect("serial")
        ),
        (origin.0.as_str(), origin.1)
    );
    assert_eq!(work.mode("state/sandbox/moved.json"), 0o600);
    let again = work.run(&[
        "state",
        "migrate",
        "--sandbox",
        "--from",
        "gs://team-state/ml/tiny/default.json",
    ]);
    again.success();
    assert!(
        again.stdout.contains("already holds this state"),
        "{}",
        again.stdout
    );

    // A target holding another lineage is never overwritten by a migration.
    work.write(
        "stack.toml",
        &with_backend("[backend.local]\npath = \"state/other.json\"\n"),
    );
    work.write(
        "fresh/stack.toml",
        &with_backend("[backend.local]\npath = \"state/other.json\"\n"),
    );
    work.run(&["apply", "--sandbox", "--auto-approve", "-s", "fresh"])
        .success();
    std::fs::create_dir_all(work.join("state/sandbox")).expect("mkdir");
    std::fs::copy(
        work.join("fresh/state/sandbox/other.json"),
        work.join("state/sandbox/other.json"),
    )
    .expect("copy a foreign state");
    let refused = work.run(&[
        "state",
        "migrate",
        "--sandbox",
        "--from",
        "state/sandbox/moved.json",
    ]);
    refused.failure();
    assert!(
        refused.stderr.contains("already holds another state")
            && refused.stderr.contains("nothing was migrated"),
        "{}",
        refused.stderr
    );
}

#[test]
fn push_refuses_an_older_or_foreign_state_unless_forced() {
    let work = Work::new();
    work.write(
        "stack.toml",
        &with_backend("[backend.s3]\nbucket = \"team-state\"\nkey = \"ml/tiny.json\"\n"),
    );
    work.run(&["apply", "--sandbox", "--auto-approve"])
        .success();
    let (lineage, serial) = pulled(&work);
    // An older copy of the same lineage.
    let mut old = work.json("pulled.json");
    old["serial"] = serde_json::json!(serial - 1);
    work.write("old.json", &old.to_string());
    let refused = work.run(&["state", "push", "--sandbox", "old.json"]);
    refused.failure();
    assert!(
        refused.stderr.contains("older than the stored state's"),
        "{}",
        refused.stderr
    );
    // Another lineage.
    let mut foreign = work.json("pulled.json");
    foreign["lineage"] = serde_json::json!("another-lineage");
    work.write("foreign.json", &foreign.to_string());
    let refused = work.run(&["state", "push", "--sandbox", "foreign.json"]);
    refused.failure();
    assert!(
        refused.stderr.contains("of lineage another-lineage"),
        "{}",
        refused.stderr
    );
    assert_eq!(
        pulled(&work),
        (lineage.clone(), serial),
        "nothing was pushed"
    );
    // Forced: it lands, newer than what it replaced.
    work.run(&["state", "push", "--sandbox", "--force", "foreign.json"])
        .success();
    assert_eq!(pulled(&work), ("another-lineage".to_string(), serial + 1));
}
