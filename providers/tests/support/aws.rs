//! Shared by the AWS test files: test credentials in each context's environment (never
//! the process's), a moto server (the third-party AWS emulator, `pip install
//! 'moto[server]'`, installed by `scripts/deps.sh`) on a free loopback port, and
//! provider tables pointing at an endpoint.

#![allow(dead_code)]

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use terrain_providers::{Ctx, EnvFn, Session};

/// The environment the AWS credential chain reads in a test, per context and never
/// the process's: test keys, and none of the developer's own AWS variables (profiles,
/// regions, endpoints); other variables are the process's.
pub fn env() -> EnvFn {
    Arc::new(|name: &str| match name {
        "AWS_ACCESS_KEY_ID" => Some("AKIDTERRAINTEST".to_string()),
        "AWS_SECRET_ACCESS_KEY" => Some("terrain-test-secret".to_string()),
        aws if aws.starts_with("AWS_") => None,
        other => std::env::var(other).ok(),
    })
}

/// A context for `address` with provider table `config`, in a run of its own (its own
/// session) with the test environment ([`env`]).
pub fn ctx(address: impl Into<String>, config: Value) -> Ctx {
    Ctx::new(address, config).in_run(Session::new(), env())
}

/// `[providers.aws]` for an emulator at `url`.
pub fn config(url: &str) -> Value {
    json!({"region": "us-east-1", "endpoint": url, "max_attempts": 3})
}

/// The sandbox configuration under which the two subnet ids and the roles these tests
/// name exist, the subnets one per zone, the roles trusting EKS and EC2: the sandbox's
/// EKS refuses subnets and roles the account does not have, as EKS does.
pub fn hand_named_account() -> Value {
    json!({"aws": {
        "subnets": {
            "subnet-0aaaaaaaaaaaaaaaa": "us-east-1a",
            "subnet-0bbbbbbbbbbbbbbbb": "us-east-1b",
        },
        "roles": {
            "eks-cluster": "eks.amazonaws.com",
            "eks-node": "ec2.amazonaws.com",
            "eks-nodes": "ec2.amazonaws.com",
        },
    }})
}

/// A moto server on a free loopback port, killed on drop.
pub struct Moto {
    child: Child,
    pub url: String,
}

impl Moto {
    /// Starts `moto_server` and waits until it answers. Panics (failing the test) when
    /// moto is not installed: run `scripts/deps.sh`.
    pub fn start() -> Moto {
        Self::start_with(&[])
    }

    /// A moto that checks credentials as AWS does (every request signed by a user it
    /// knows; the tests' keys are not one): each call answers 403.
    pub fn start_strict() -> Moto {
        Self::start_with(&[("INITIAL_NO_AUTH_ACTION_COUNT", "0")])
    }

    /// A moto that knows the AWS managed policies (arn:aws:iam::aws:policy/…), as every
    /// account does: moto loads them only when asked, to start faster.
    pub fn start_with_managed_policies() -> Moto {
        Self::start_with(&[("MOTO_IAM_LOAD_MANAGED_POLICIES", "true")])
    }

    fn start_with(env: &[(&str, &str)]) -> Moto {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("free port");
        let child = Command::new("moto_server")
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect(
                "moto_server runs; install it with scripts/deps.sh (pip install 'moto[server]')",
            );
        let url = format!("http://127.0.0.1:{port}");
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "moto_server did not start on port {port}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Moto { child, url }
    }

    /// Empties moto (every service, every region) between tests sharing one server.
    pub fn reset(&self) {
        let _ = reqwest::blocking_reset(&self.url);
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

mod reqwest {
    /// POST /moto-api/reset without pulling a blocking HTTP client into the tests.
    pub fn blocking_reset(url: &str) -> std::io::Result<()> {
        use std::io::{Read, Write};
        let addr = url.trim_start_matches("http://");
        let mut s = std::net::TcpStream::connect(addr)?;
        write!(s, "POST /moto-api/reset HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")?;
        let mut out = String::new();
        s.read_to_string(&mut out)?;
        Ok(())
    }
}
