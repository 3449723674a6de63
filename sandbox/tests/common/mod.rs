//! What the sandbox's kubectl tests share: running the real `kubectl` with a kubeconfig
//! the sandbox wrote and a home of its own, so nothing of the developer's setup leaks in.

#![allow(dead_code)] // each test crate uses what it needs

use std::path::Path;
use std::time::Duration;

pub const KUBECTL: &str = "/usr/bin/kubectl";

pub struct Kubectl<'a> {
    pub kubeconfig: &'a Path,
    pub home: &'a Path,
}

pub struct Run {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

impl Kubectl<'_> {
    pub async fn run(&self, args: &[&str]) -> Run {
        let mut cmd = tokio::process::Command::new(KUBECTL);
        cmd.arg("--kubeconfig")
            .arg(self.kubeconfig)
            .arg("--cache-dir")
            .arg(self.home.join("cache"))
            .args(args)
            // Nothing from the developer's own setup may leak in.
            .env_remove("KUBECONFIG")
            .env("HOME", self.home)
            .env("CLOUDSDK_CONFIG", self.home.join("gcloud"));
        let out = tokio::time::timeout(Duration::from_secs(120), cmd.output())
            .await
            .expect("kubectl finishes within two minutes")
            .expect("kubectl runs");
        Run {
            ok: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Runs kubectl and fails the test with its output when it fails.
    pub async fn ok(&self, args: &[&str]) -> Run {
        let run = self.run(args).await;
        assert!(
            run.ok,
            "kubectl {} failed:\nstdout:\n{}\nstderr:\n{}",
            args.join(" "),
            run.stdout,
            run.stderr
        );
        run
    }

    /// Runs kubectl expecting it to fail.
    pub async fn fails(&self, args: &[&str]) -> Run {
        let run = self.run(args).await;
        assert!(
            !run.ok,
            "kubectl {} succeeded:\n{}",
            args.join(" "),
            run.stdout
        );
        run
    }
}
