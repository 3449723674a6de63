//! Working as a team, through the real binary: a stack whose state lives in S3 or GCS,
//! run on the sandbox (whose storage holds the state, the bucket made on first use)
//! with the state commands reading it there; and two applies of one stack from two processes sharing
//! a served sandbox, the second refused at once naming the holder, a third waiting for
//! the lock with `--lock-timeout`.

mod common;

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

#[test]
fn s3_state_on_the_sandbox_holds_the_stack_and_no_local_state_is_written() {
    let work = Work::new();
    work.write("stack.toml", &stack(""));
    work.run(&["apply", "--sandbox", "--auto-approve"])
        .success();
    assert!(
        !work.exists("state/sandbox/tiny.json") && !work.exists("state/tiny.json"),
        "the state went to S3, not to a file: {:?}",
        work.files()
    );
    let list = work.run(&["state", "list", "--sandbox"]);
    list.success();
    assert_eq!(list.stdout, "gcs_bucket.data\n");
    let inventory = work.run(&["sandbox", "list"]);
    inventory.success();
    for line in [
        "s3 bucket team-state",
        "s3 object team-state/ml/tiny.json",
        "gcs bucket tiny-data",
    ] {
        assert!(
            inventory.stdout.lines().any(|l| l == line),
            "{line}:\n{}",
            inventory.stdout
        );
    }
    assert!(
        !inventory.stdout.contains("ml/tiny.json.lock"),
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
fn gcs_state_on_the_sandbox_holds_the_stack_and_no_local_state_is_written() {
    let work = Work::new();
    work.write(
        "stack.toml",
        &stack("").replace(
            "[backend.s3]\nbucket = \"team-state\"\nkey = \"ml/tiny.json\"\nregion = \"us-east-1\"\n",
            "[backend.gcs]\nbucket = \"team-state\"\nprefix = \"ml/tiny\"\n",
        ),
    );
    assert!(work.read("stack.toml").contains("[backend.gcs]"));
    work.run(&["apply", "--sandbox", "--auto-approve"])
        .success();
    assert!(
        !work.exists("state/sandbox/tiny.json") && !work.exists("state/tiny.json"),
        "{:?}",
        work.files()
    );
    let list = work.run(&["state", "list", "--sandbox"]);
    list.success();
    assert_eq!(list.stdout, "gcs_bucket.data\n");
    let inventory = work.run(&["sandbox", "list"]);
    inventory.success();
    for line in [
        "gcs bucket team-state",
        "gcs object team-state/ml/tiny/default.json",
    ] {
        assert!(
            inventory.stdout.lines().any(|l| l == line),
            "{line}:\n{}",
            inventory.stdout
        );
    }
    work.run(&["plan", "--sandbox", "--detailed-exitcode"])
        .expect_code(0);
}

#[test]
fn two_applies_of_one_s3_state_the_second_refused_naming_the_holder() {
    let work = Work::new();
    // The first apply holds the lock for the 3 s of its sleep.
    work.write(
        "stack.toml",
        &stack(
            "\n[time_sleep.settle]\ncreate_duration = \"3s\"\ndepends_on = [\"gcs_bucket.data\"]\n",
        ),
    );
    let mut serve = work
        .command(&["sandbox", "serve"], &[])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start terrain sandbox serve");
    work.wait_for("the served sandbox", Duration::from_secs(30), || {
        work.exists("state/sandbox/serve.json").then_some(())
    });

    let first_args = ["apply", "--sandbox", "--auto-approve"];
    let first = work.spawn(&first_args);
    work.wait_for("the first apply's lock", Duration::from_secs(30), || {
        let list = work.run(&["sandbox", "list"]);
        list.stdout
            .lines()
            .any(|l| l == "s3 object team-state/ml/tiny.json.lock")
            .then_some(())
    });
    let second = work.run(&["apply", "--sandbox", "--auto-approve"]);
    second.failure();
    for want in [
        "state s3://team-state/ml/tiny.json is locked by",
        "for `apply`",
        "terrain force-unlock",
    ] {
        assert!(second.stderr.contains(want), "{want}:\n{}", second.stderr);
    }
    let third = work.run(&[
        "apply",
        "--sandbox",
        "--auto-approve",
        "--lock-timeout",
        "60s",
    ]);
    third.success();
    work.finish(first, &first_args).success();
    assert!(
        third.stdout.contains("No changes") || third.stdout.contains("0 added"),
        "the third apply found the first one's work done:\n{}",
        third.stdout
    );
    let _ = serve.kill();
    let _ = serve.wait();
}
