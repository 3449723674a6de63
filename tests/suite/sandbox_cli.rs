//! `--sandbox` runs and the `terrain sandbox` subcommands through the real binary: a tiny
//! GCP stack taken through plan, apply, re-plan and destroy on the emulator each run
//! starts in-process, with its state kept apart from real state; the sandbox lock
//! (`cloud.lock`) refusing a second owner and taking over a dead one's; `reset`; the
//! help and the time-scale variable; relative paths resolved against the stack's
//! directory; and what a real run without Google credentials says to do.

use crate::common;

use std::process::{Child, Command};

use common::{Run, Sandbox as Work};

/// One bucket on GCP: the smallest stack that needs a cloud account.
const TINY: &str = r#"[stack]
name = "tiny"

[providers.gcp]
project = "tiny-project"
region = "us-central1"

[gcs_bucket.data]
name = "tiny-data"
location = "us-central1"
"#;

/// A work directory holding `stack.toml` = [`TINY`].
fn tiny() -> Work {
    let work = Work::new();
    work.write("stack.toml", TINY);
    work
}

/// Whether `rel` is an empty directory.
fn is_empty_dir(work: &Work, rel: &str) -> bool {
    std::fs::read_dir(work.join(rel))
        .unwrap_or_else(|e| panic!("list {rel}: {e}"))
        .next()
        .is_none()
}

#[test]
fn sandbox_run_plans_applies_and_destroys_with_state_kept_apart() {
    let work = tiny();
    work.run(&["plan", "--sandbox", "--detailed-exitcode"])
        .expect_code(2);
    let apply = work.run(&["apply", "--sandbox", "--auto-approve"]);
    apply.success();
    assert!(
        apply.stdout.contains("gcs_bucket.data: creation complete")
            && apply.stdout.contains("Apply complete!"),
        "{}",
        apply.stdout
    );
    work.run(&["plan", "--sandbox", "--detailed-exitcode"])
        .expect_code(0);

    assert_eq!(
        work.state_addresses("state/sandbox/tiny.json"),
        ["gcs_bucket.data"]
    );
    assert!(
        !work.exists("state/tiny.json"),
        "sandbox state never lands where real state goes: {:?}",
        work.files()
    );
    assert!(work.exists("state/sandbox/cloud.json"));
    assert_eq!(work.mode("state/sandbox/tiny.json"), 0o600);
    assert!(
        !work.exists("state/sandbox/cloud.lock"),
        "the run let go of the sandbox"
    );

    let list = work.run(&["sandbox", "list"]);
    list.success();
    assert!(
        list.stdout.lines().any(|l| l == "gcs bucket tiny-data"),
        "{}",
        list.stdout
    );

    let destroy = work.run(&["destroy", "--sandbox", "--auto-approve"]);
    destroy.success();
    assert!(
        destroy
            .stdout
            .contains("Destroy complete! Resources: 1 destroyed."),
        "{}",
        destroy.stdout
    );
    assert!(work.state_addresses("state/sandbox/tiny.json").is_empty());
    assert!(!work.exists("state/tiny.json"));
    let list = work.run(&["sandbox", "list"]);
    list.success();
    assert_eq!(list.stdout, "The sandbox holds nothing.\n");
}

/// A process that stays alive until dropped, to hold a lock in its name.
struct Sleeper(Child);

impl Sleeper {
    fn start() -> Self {
        Self(
            Command::new("sleep")
                .arg("30")
                .spawn()
                .expect("start `sleep 30`"),
        )
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn sandbox_lock_of_a_live_process_refuses_the_run() {
    let work = tiny();
    let holder = Sleeper::start();
    let lock = format!("{} terrain apply\n", holder.pid());
    work.write("state/sandbox/cloud.lock", &lock);

    let run = work.run(&["plan", "--sandbox"]);
    run.failure();
    let want = format!("in use by `terrain apply` (pid {})", holder.pid());
    assert!(
        run.stderr.contains(&want),
        "{want} missing:\n{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("terrain sandbox serve"),
        "says how runs can share a sandbox:\n{}",
        run.stderr
    );
    assert_eq!(
        work.read("state/sandbox/cloud.lock"),
        lock,
        "another process's lock is left alone"
    );
    assert!(!work.exists("state/sandbox/tiny.json"));
    drop(holder);
}

#[test]
fn sandbox_lock_of_a_dead_process_is_taken_over() {
    let work = tiny();
    work.write("state/sandbox/cloud.lock", "999999999 terrain apply\n");
    work.run(&["apply", "--sandbox", "--auto-approve"])
        .success();
    assert_eq!(
        work.state_addresses("state/sandbox/tiny.json"),
        ["gcs_bucket.data"]
    );
    assert!(
        !work.exists("state/sandbox/cloud.lock"),
        "taken over, then released"
    );
}

#[test]
fn sandbox_reset_forgets_the_cloud_and_the_stacks_sandbox_state() {
    let work = tiny();
    work.run(&["apply", "--sandbox", "--auto-approve"])
        .success();
    assert!(work.exists("state/sandbox/cloud.json"));
    assert!(work.exists("state/sandbox/tiny.json"));

    let reset = work.run(&["sandbox", "reset"]);
    reset.success();
    assert!(
        reset.stdout.starts_with("Reset the sandbox"),
        "{}",
        reset.stdout
    );
    assert!(
        is_empty_dir(&work, "state/sandbox"),
        "left behind: {:?}",
        work.files()
    );
    let list = work.run(&["sandbox", "list"]);
    list.success();
    assert_eq!(list.stdout, "The sandbox holds nothing.\n");
    // With its state gone too, the stack plans its bucket afresh.
    work.run(&["plan", "--sandbox", "--detailed-exitcode"])
        .expect_code(2);
}

#[test]
fn relative_paths_in_a_stack_start_at_its_directory() {
    let work = Work::new();
    work.write(
        "sub/stack.toml",
        "[stack]\nname = \"rel\"\n\n[local_file.x]\npath = \"out/x.txt\"\ncontent = \"hello\\n\"\n",
    );
    work.run(&["apply", "-s", "sub", "--auto-approve"])
        .success();
    assert_eq!(work.read("sub/out/x.txt"), "hello\n");
    assert!(!work.exists("out/x.txt"), "{:?}", work.files());
    // terrain's own paths start where it was started.
    assert_eq!(work.state_addresses("state/rel.json"), ["local_file.x"]);
    assert_eq!(work.mode("state/rel.json"), 0o600);
    assert!(!work.exists("sub/state"), "{:?}", work.files());

    work.run(&["destroy", "-s", "sub", "--auto-approve"])
        .success();
    assert!(!work.exists("sub/out/x.txt"));
}

#[test]
fn sandbox_help_shows_the_subcommands_and_the_time_scale() {
    let help = help_of(&["sandbox", "--help"]);
    for want in ["serve", "list", "reset"] {
        assert!(help.stdout.contains(want), "{want}:\n{}", help.stdout);
    }
    let help = help_of(&["sandbox", "serve", "--help"]);
    for want in ["--time-scale", "TERRAIN_SANDBOX_TIME_SCALE", "--dir"] {
        assert!(help.stdout.contains(want), "{want}:\n{}", help.stdout);
    }
}

fn help_of(args: &[&str]) -> Run {
    let run = Work::new().run(args);
    run.success();
    run
}

#[test]
fn a_bad_time_scale_is_refused_naming_the_variable() {
    let work = tiny();
    let run = work.run_env(
        &["plan", "--sandbox"],
        &[("TERRAIN_SANDBOX_TIME_SCALE", "fast")],
    );
    run.failure();
    assert!(
        run.stderr.contains("TERRAIN_SANDBOX_TIME_SCALE") && run.stderr.contains("`fast`"),
        "{}",
        run.stderr
    );
    assert!(
        !work.exists("state/sandbox/cloud.lock"),
        "the failed run let go of the sandbox"
    );
    // serve reads the same variable through its flag.
    let serve = work.run_env(
        &["sandbox", "serve"],
        &[("TERRAIN_SANDBOX_TIME_SCALE", "fast")],
    );
    // A usage error exits 1, like every error: 2 means "changes" to a CI script.
    serve.expect_code(1);
    assert!(serve.stderr.contains("--time-scale"), "{}", serve.stderr);
}

#[test]
fn a_real_run_without_google_credentials_says_what_to_set() {
    let work = tiny();
    let home = tempfile::tempdir().expect("an empty home");
    let mut cmd = work.command(&["apply", "--auto-approve"], &[]);
    // No credentials anywhere: no variables, no gcloud files (an empty home), and a
    // metadata server address that refuses at once instead of a lookup that may hang.
    for (key, _) in std::env::vars_os() {
        let k = key.to_string_lossy();
        if k.starts_with("GOOGLE_") || k.starts_with("CLOUDSDK_") || k.starts_with("GCE_") {
            cmd.env_remove(&key);
        }
    }
    cmd.env("HOME", home.path())
        .env("GCE_METADATA_HOST", "127.0.0.1:1");
    let out = cmd.output().expect("run terrain apply");
    let run = Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        args: vec!["apply".into(), "--auto-approve".into()],
    };
    run.failure();
    for want in [
        "no Google credentials found",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "or run with --sandbox to try the stack without an account",
    ] {
        assert!(run.stderr.contains(want), "{want} missing:\n{}", run.stderr);
    }
    assert!(
        work.state_addresses("state/tiny.json").is_empty(),
        "nothing was created"
    );
    assert!(
        !work.exists("state/sandbox"),
        "a real run does not touch the sandbox"
    );
}

/// The `export NAME=VALUE` pairs of what `terrain sandbox serve` printed.
fn exports(banner: &str) -> Vec<(String, String)> {
    banner
        .lines()
        .filter_map(|l| l.trim().strip_prefix("export "))
        .flat_map(|l| l.split_whitespace())
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// gcloud and the aws CLI, set up with nothing but what `serve` prints, list what a
/// `--sandbox` apply made. Regression: the printed storage override made every
/// `gcloud storage` command fail (gcloud takes it as the root including `storage/v1/`),
/// and the token file was printed relative to where serve ran.
#[test]
fn gcloud_and_aws_work_with_what_serve_prints() {
    use std::io::BufRead as _;
    let work = tiny();
    let mut serve = work
        .command(
            &["sandbox", "serve"],
            &[("TERRAIN_SANDBOX_TIME_SCALE", "0")],
        )
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start terrain sandbox serve");
    let mut lines = std::io::BufReader::new(serve.stdout.take().expect("stdout")).lines();
    let mut banner = String::new();
    for line in lines.by_ref() {
        let line = line.expect("a banner line");
        let done = line.contains("<cluster>.kubeconfig");
        banner.push_str(&line);
        banner.push('\n');
        if done {
            break;
        }
    }
    let later = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let sink = later.clone();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            sink.lock().expect("lock").push(line);
        }
    });
    work.run(&["apply", "--sandbox", "--auto-approve"])
        .success();
    let env = exports(&banner);
    let token = env
        .iter()
        .find(|(k, _)| k == "CLOUDSDK_AUTH_ACCESS_TOKEN_FILE")
        .map(|(_, v)| v.clone())
        .expect("the token file is printed");
    assert!(std::path::Path::new(&token).is_absolute(), "{token}");
    assert!(
        env.iter()
            .any(|(k, v)| k == "AWS_DEFAULT_REGION" && v == "us-east-1"),
        "{banner}"
    );
    let elsewhere = tempfile::tempdir().expect("another directory");
    let gcloud_config = tempfile::tempdir().expect("a gcloud config directory");
    match Command::new("gcloud")
        .args(["storage", "ls", "--project", "tiny-project"])
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .env("CLOUDSDK_CONFIG", gcloud_config.path())
        .current_dir(elsewhere.path())
        .output()
    {
        Ok(out) => assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "gs://tiny-data/\n",
            "gcloud storage ls: {}",
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => eprintln!("gcloud is not installed ({e}); the gcloud check was not run"),
    }
    // Regression: create-auto stopped at Service Usage (not emulated), then at the
    // default node pool gcloud always sends, and describe crashed on a missing node
    // version.
    let gcloud = |args: &[&str]| {
        Command::new("gcloud")
            .args(args)
            .args(["--project", "tiny-project", "--region", "us-central1"])
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("CLOUDSDK_CONFIG", gcloud_config.path())
            .env("CLOUDSDK_CORE_DISABLE_PROMPTS", "1")
            .env("KUBECONFIG", elsewhere.path().join("kubeconfig"))
            .current_dir(elsewhere.path())
            .output()
    };
    if let Ok(out) = gcloud(&["container", "clusters", "create-auto", "auto-1"]) {
        assert!(
            out.status.success(),
            "gcloud container clusters create-auto: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let out = gcloud(&[
            "container",
            "clusters",
            "describe",
            "auto-1",
            "--format=value(status,currentNodeVersion,autopilot.enabled)",
        ])
        .expect("gcloud runs");
        let shown = String::from_utf8_lossy(&out.stdout);
        let fields: Vec<&str> = shown.split_whitespace().collect();
        assert!(
            matches!(fields.as_slice(), ["RUNNING", version, "True"] if version.contains("-gke.")),
            "describe: {shown} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // serve says how to get credentials for the new cluster with gcloud.
        let want = "gcloud container clusters get-credentials auto-1 --location us-central1 --project tiny-project";
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !later.lock().expect("lock").iter().any(|l| l.contains(want)) {
            assert!(
                std::time::Instant::now() < deadline,
                "serve did not print `{want}`: {:?}",
                later.lock().expect("lock")
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        // kubectl through the kubeconfig gcloud wrote (the GKE auth plugin reads the
        // printed token file) sees the cluster at the version GKE reports.
        let kubectl = |args: &[&str]| {
            Command::new("kubectl")
                .args(args)
                .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                .env("CLOUDSDK_CONFIG", gcloud_config.path())
                .env("KUBECONFIG", elsewhere.path().join("kubeconfig"))
                .current_dir(elsewhere.path())
                .output()
        };
        let plugin = Command::new("gke-gcloud-auth-plugin")
            .arg("--version")
            .output()
            .is_ok();
        match kubectl(&["get", "service", "kubernetes", "-o", "name"]) {
            Ok(_) if !plugin => {
                eprintln!("gke-gcloud-auth-plugin is not installed; the kubectl check was not run");
            }
            Ok(out) => {
                assert_eq!(
                    String::from_utf8_lossy(&out.stdout),
                    "service/kubernetes\n",
                    "kubectl get service kubernetes: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                let out = kubectl(&["version", "-o", "json"]).expect("kubectl runs");
                let v: serde_json::Value =
                    serde_json::from_slice(&out.stdout).expect("kubectl version JSON");
                assert_eq!(
                    v["serverVersion"]["gitVersion"],
                    format!("v{}", fields[1]),
                    "the API server's version is GKE's"
                );
            }
            Err(e) => eprintln!("kubectl is not installed ({e}); the kubectl check was not run"),
        }
    }
    let url = banner
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .expect("the sandbox's address");
    let aws_home = tempfile::tempdir().expect("an aws config directory");
    match Command::new("aws")
        .args([
            "--endpoint-url",
            url,
            "s3api",
            "list-buckets",
            "--output",
            "json",
        ])
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .env_remove("AWS_REGION")
        .env("AWS_CONFIG_FILE", aws_home.path().join("config"))
        .env(
            "AWS_SHARED_CREDENTIALS_FILE",
            aws_home.path().join("credentials"),
        )
        .current_dir(elsewhere.path())
        .output()
    {
        Ok(out) => assert!(
            out.status.success(),
            "aws with AWS_DEFAULT_REGION alone: {}",
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => eprintln!("the aws CLI is not installed ({e}); the aws check was not run"),
    }
    let _ = serve.kill();
    let _ = serve.wait();
}
