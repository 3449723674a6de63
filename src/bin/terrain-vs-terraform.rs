//! `terrain-vs-terraform`: applies and re-plans the same S3 buckets with terrain and with
//! Terraform (hashicorp/aws) against one moto server, and prints wall time and request
//! counts side by side. The point is the refresh: a terrain plan reads only what the
//! stack manages, while the Terraform AWS provider reads every bucket sub-resource it
//! knows (ACL, CORS, website, logging, replication, policy, object lock…).
//!
//! Requests are counted by a loopback proxy in front of moto (one request line each),
//! phase by phase, so neither tool is instrumented; the proxy also corrects the one
//! moto 5.2.1 answer the Rust SDK refuses (the root element of GetBucketVersioning). Both tools run with their
//! default parallelism (10) and the same bucket settings (versioning on, terraform's
//! ownership tags vs terrain's). Terraform's provider comes from a filesystem mirror
//! (`--mirror`, default `/opt/tf-plugins`), so nothing is downloaded.
//!
//! ```text
//! cargo build --release --bin terrain --bin terrain-vs-terraform
//! target/release/terrain-vs-terraform [--buckets 50] [--terraform terraform]
//! ```

#[path = "../../providers/tests/support/moto_proxy.rs"]
mod moto_proxy;

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use moto_proxy::MotoProxy;

use anyhow::{bail, Context, Result};
use clap::Parser;

/// Applies and re-plans N S3 buckets with terrain and with Terraform against moto.
#[derive(Parser, Debug)]
struct Args {
    /// How many buckets each tool manages.
    #[arg(long, default_value_t = 50)]
    buckets: usize,
    /// The Terraform binary.
    #[arg(long, default_value = "terraform")]
    terraform: PathBuf,
    /// Filesystem mirror holding registry.terraform.io/hashicorp/aws.
    #[arg(long, default_value = "/opt/tf-plugins")]
    mirror: PathBuf,
    /// The terrain binary (default: beside this one).
    #[arg(long)]
    terrain: Option<PathBuf>,
    /// The moto server command.
    #[arg(long, default_value = "moto_server")]
    moto: String,
}

/// One timed phase of one tool.
struct Phase {
    wall: Duration,
    requests: usize,
    s3_reads: usize,
}

/// A moto server behind a counting proxy.
struct Moto {
    child: Child,
    proxy: MotoProxy,
    url: String,
}

impl Moto {
    fn start(command: &str) -> Result<Moto> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let child = Command::new(command)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| {
                format!("could not start {command}; install it with scripts/deps.sh")
            })?;
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if started.elapsed() > Duration::from_secs(30) {
                bail!("moto did not start on port {port}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let proxy = MotoProxy::start(&format!("http://127.0.0.1:{port}"));
        let url = proxy.url.clone();
        Ok(Moto { child, proxy, url })
    }

    /// Request lines so far (`GET /b?versioning HTTP/1.1`).
    fn requests(&self) -> Vec<String> {
        self.proxy.lines()
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `cmd`, failing with its output when it exits other than `ok_codes`.
fn run(cmd: &mut Command, ok_codes: &[i32]) -> Result<()> {
    let out = cmd
        .output()
        .with_context(|| format!("could not run {cmd:?}"))?;
    let code = out.status.code().unwrap_or(-1);
    if !ok_codes.contains(&code) {
        bail!(
            "{cmd:?} exited {code}\n--- stdout\n{}\n--- stderr\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// Times `cmd` and counts the requests moto saw meanwhile.
fn phase(moto: &Moto, cmd: &mut Command, ok_codes: &[i32]) -> Result<Phase> {
    let before = moto.requests().len();
    let started = Instant::now();
    run(cmd, ok_codes)?;
    let wall = started.elapsed();
    let lines = moto.requests();
    let new = &lines[before.min(lines.len())..];
    let s3_reads = new
        .iter()
        .filter(|l| l.starts_with("GET ") || l.starts_with("HEAD "))
        .count();
    Ok(Phase {
        wall,
        requests: new.len(),
        s3_reads,
    })
}

/// A scratch directory removed when dropped.
struct WorkDir(PathBuf);

impl WorkDir {
    fn new() -> Result<WorkDir> {
        let dir = std::env::temp_dir().join(format!("terrain-vs-terraform-{}", std::process::id()));
        // A leftover of an earlier run with the same pid holds nothing worth keeping.
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir)?;
        Ok(WorkDir(dir))
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn terraform_dir(dir: &Path, url: &str, n: usize) -> Result<()> {
    fs::create_dir_all(dir)?;
    let main = format!(
        r#"terraform {{
  required_providers {{
    aws = {{ source = "hashicorp/aws" }}
  }}
}}

provider "aws" {{
  region                      = "us-east-1"
  access_key                  = "bench"
  secret_key                  = "bench"
  skip_credentials_validation = true
  skip_requesting_account_id  = true
  skip_metadata_api_check     = true
  s3_use_path_style           = true
  endpoints {{
    s3  = "{url}"
    sts = "{url}"
  }}
}}

resource "aws_s3_bucket" "b" {{
  count  = {n}
  bucket = "tf-bench-${{count.index}}"
  tags   = {{ managed-by = "terraform" }}
}}

resource "aws_s3_bucket_versioning" "b" {{
  count  = {n}
  bucket = aws_s3_bucket.b[count.index].id
  versioning_configuration {{
    status = "Enabled"
  }}
}}
"#
    );
    fs::write(dir.join("main.tf"), main)?;
    Ok(())
}

fn terrain_stack(dir: &Path, url: &str, n: usize) -> Result<()> {
    fs::create_dir_all(dir)?;
    let mut stack = format!(
        "[stack]\nname = \"bench\"\n\n[providers.aws]\nregion = \"us-east-1\"\nendpoint = \"{url}\"\n"
    );
    for i in 0..n {
        write!(
            stack,
            "\n[s3_bucket.b{i}]\nname = \"terrain-bench-{i}\"\nversioning = true\n"
        )?;
    }
    fs::write(dir.join("stack.toml"), stack)?;
    Ok(())
}

fn bench(args: &Args) -> Result<String> {
    let terrain = match &args.terrain {
        Some(p) => p.clone(),
        None => std::env::current_exe()?.with_file_name("terrain"),
    };
    if !terrain.exists() {
        bail!(
            "{} not found; build it with `cargo build --release --bin terrain`",
            terrain.display()
        );
    }
    let moto = Moto::start(&args.moto)?;
    let work = WorkDir::new()?;
    let tf = work.0.join("terraform");
    let tr = work.0.join("terrain");
    terraform_dir(&tf, &moto.url, args.buckets)?;
    terrain_stack(&tr, &moto.url, args.buckets)?;
    let cli_config = work.0.join("terraformrc");
    fs::write(
        &cli_config,
        format!(
            "provider_installation {{\n  filesystem_mirror {{\n    path = \"{}\"\n  }}\n}}\n",
            args.mirror.display()
        ),
    )?;

    let tf_cmd = |verb: &[&str]| {
        let mut c = Command::new(&args.terraform);
        c.current_dir(&tf)
            .args(verb)
            .env("TF_CLI_CONFIG_FILE", &cli_config)
            .env("TF_IN_AUTOMATION", "1")
            .env("CHECKPOINT_DISABLE", "1");
        c
    };
    let tr_cmd = |verb: &[&str]| {
        let mut c = Command::new(&terrain);
        c.current_dir(&tr)
            .args(verb)
            .env("AWS_ACCESS_KEY_ID", "bench")
            .env("AWS_SECRET_ACCESS_KEY", "bench")
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .env("AWS_CONFIG_FILE", "/nonexistent")
            .env("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
            .env("NO_COLOR", "1");
        c
    };

    run(&mut tf_cmd(&["init", "-input=false", "-no-color"]), &[0])?;
    let tf_apply = phase(
        &moto,
        &mut tf_cmd(&["apply", "-auto-approve", "-input=false", "-no-color"]),
        &[0],
    )?;
    let tf_plan = phase(
        &moto,
        &mut tf_cmd(&["plan", "-detailed-exitcode", "-input=false", "-no-color"]),
        &[0],
    )?;
    let tr_apply = phase(&moto, &mut tr_cmd(&["apply", "--auto-approve"]), &[0])?;
    let tr_plan = phase(&moto, &mut tr_cmd(&["plan", "--detailed-exitcode"]), &[0])?;
    run(
        &mut tf_cmd(&["destroy", "-auto-approve", "-input=false", "-no-color"]),
        &[0],
    )?;
    run(&mut tr_cmd(&["destroy", "--auto-approve"]), &[0])?;

    let n = args.buckets;
    let mut out = String::new();
    writeln!(out, "{n} S3 buckets (versioning on) against one moto server; requests as a proxy in front of moto counted them")?;
    writeln!(
        out,
        "{:<28} {:>10} {:>10} {:>14} {:>12}",
        "", "wall", "requests", "per bucket", "reads"
    )?;
    for (name, p) in [
        ("terraform 1.11 apply", &tf_apply),
        ("terrain apply", &tr_apply),
        ("terraform re-plan (no-op)", &tf_plan),
        ("terrain re-plan (no-op)", &tr_plan),
    ] {
        writeln!(
            out,
            "{name:<28} {:>9.2}s {:>10} {:>14.1} {:>12}",
            p.wall.as_secs_f64(),
            p.requests,
            p.requests as f64 / n as f64,
            p.s3_reads
        )?;
    }
    writeln!(
        out,
        "re-plan: terrain sends {:.1}x fewer requests and takes {:.1}x less wall time",
        tf_plan.requests as f64 / tr_plan.requests.max(1) as f64,
        tf_plan.wall.as_secs_f64() / tr_plan.wall.as_secs_f64().max(1e-9)
    )?;
    Ok(out)
}

fn main() -> ExitCode {
    let args = Args::parse();
    match bench(&args) {
        Ok(report) => {
            print!("{report}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("terrain-vs-terraform: {e:#}");
            ExitCode::FAILURE
        }
    }
}
