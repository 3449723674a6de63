//! The official clients against `terrain sandbox serve`, set up with nothing but what
//! `serve` prints, as a user would: gcloud creates, describes, updates and deletes GKE
//! clusters and node pools, Filestore instances and Cloud Storage buckets and objects; the
//! aws CLI does the same with S3 buckets and objects, EKS clusters and node groups, and
//! reads SageMaker; kubectl, through the kubeconfig the cloud CLI wrote, finds the system
//! pods a fresh cluster has, explains kinds, execs with the container's environment and
//! forwards a port; scenario 1's workload built with kubectl is adopted by `terrain
//! import --all-in-cluster` with a clean plan after. A client that is not installed is
//! reported, not silently passed (`scripts/deps.sh` installs kubectl and the aws CLI;
//! gcloud is used where present).

use crate::common;

use std::io::{BufRead as _, Read as _, Write as _};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::Sandbox as Work;

/// A running `terrain sandbox serve` and what it printed.
struct Served {
    work: Work,
    child: Child,
    /// `export NAME=value` pairs of the banner.
    env: Vec<(String, String)>,
    /// The sandbox's address (`http://127.0.0.1:PORT`).
    url: String,
    /// The clients' own configuration (gcloud's, aws's, kubectl's), away from the user's.
    home: tempfile::TempDir,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Served {
    /// Starts `serve` with operations finishing at once and reads its banner.
    fn start() -> Served {
        let work = Work::new();
        let mut child = work
            .command(
                &["sandbox", "serve"],
                &[("TERRAIN_SANDBOX_TIME_SCALE", "0")],
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start terrain sandbox serve");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut lines = std::io::BufReader::new(stdout).lines();
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
        // Keep reading, so serve never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines.map_while(Result::ok) {});
        let env = banner
            .lines()
            .filter_map(|l| l.trim().strip_prefix("export "))
            .flat_map(|l| l.split_whitespace())
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let url = banner
            .split_whitespace()
            .find(|w| w.starts_with("http://127.0.0.1:"))
            .expect("the banner names the sandbox's address")
            .to_string();
        Served {
            work,
            child,
            env,
            url,
            home: tempfile::tempdir().expect("a home for the clients"),
        }
    }

    /// A client command with the banner's settings and a configuration of its own, run
    /// from a directory that is not the one serve runs in.
    fn command(&self, program: &str, args: &[&str]) -> Command {
        let mut cmd = Command::new(program);
        cmd.args(args)
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("HOME", self.home.path())
            .env("CLOUDSDK_CONFIG", self.home.path().join("gcloud"))
            .env("CLOUDSDK_CORE_DISABLE_PROMPTS", "1")
            .env("AWS_CONFIG_FILE", self.home.path().join("aws-config"))
            .env(
                "AWS_SHARED_CREDENTIALS_FILE",
                self.home.path().join("aws-credentials"),
            )
            .env("KUBECONFIG", self.home.path().join("kubeconfig"))
            .current_dir(self.home.path());
        cmd
    }

    /// Runs a client and returns its stdout, failing with its output when it fails.
    #[track_caller]
    fn ok(&self, program: &str, args: &[&str]) -> String {
        let out = self.output(program, args);
        assert!(
            out.status.success(),
            "{program} {}\nstdout:\n{}\nstderr:\n{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    #[track_caller]
    fn output(&self, program: &str, args: &[&str]) -> Output {
        let mut cmd = self.command(program, args);
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("run {program}: {e}"));
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            if child.try_wait().expect("wait for the client").is_some() {
                return child.wait_with_output().expect("the client's output");
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("{program} {} did not finish in 3 minutes", args.join(" "));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Whether `program` runs here; when not, says so (the check is reported, not passed).
fn installed(program: &str) -> bool {
    let runs = Command::new(program)
        .arg(if program == "kubectl" {
            "version"
        } else {
            "--version"
        })
        .args(if program == "kubectl" {
            &["--client"][..]
        } else {
            &[][..]
        })
        .output()
        .is_ok_and(|o| o.status.success());
    if !runs {
        eprintln!("{program} is not installed here: its checks were NOT run");
    }
    runs
}

#[test]
fn gcloud_creates_describes_and_deletes_what_the_sandbox_emulates() {
    if !installed("gcloud") {
        return;
    }
    let s = Served::start();
    let gcloud = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--project", "clients-project"]);
        s.ok("gcloud", &all)
    };
    let zone = ["--zone", "us-central1-a"];
    let with_zone = |args: &[&str]| -> Vec<String> {
        args.iter()
            .chain(zone.iter())
            .map(|a| a.to_string())
            .collect()
    };
    let run = |args: Vec<String>| gcloud(&args.iter().map(String::as_str).collect::<Vec<_>>());

    // GKE: a Standard cluster, a spot GPU pool from 0, an update, deletes.
    run(with_zone(&[
        "container",
        "clusters",
        "create",
        "std-1",
        "--num-nodes",
        "1",
    ]));
    let listed = run(with_zone(&[
        "container",
        "clusters",
        "list",
        "--format=value(name,status,currentNodeCount)",
    ]));
    assert_eq!(listed.trim(), "std-1\tRUNNING\t1");
    run(with_zone(&[
        "container",
        "node-pools",
        "create",
        "gpu",
        "--cluster",
        "std-1",
        "--machine-type",
        "n1-standard-4",
        "--accelerator",
        "type=nvidia-tesla-t4,count=1",
        "--spot",
        "--num-nodes",
        "0",
        "--enable-autoscaling",
        "--min-nodes",
        "0",
        "--max-nodes",
        "2",
    ]));
    run(with_zone(&[
        "container",
        "node-pools",
        "update",
        "gpu",
        "--cluster",
        "std-1",
        "--node-labels=team=ml",
    ]));
    let pool = run(with_zone(&[
        "container",
        "node-pools",
        "describe",
        "gpu",
        "--cluster",
        "std-1",
        "--format=value(config.spot,config.labels.team,autoscaling.maxNodeCount,config.accelerators[0].acceleratorType)",
    ]));
    assert_eq!(pool.trim(), "True\tml\t2\tnvidia-tesla-t4");
    run(with_zone(&[
        "container",
        "node-pools",
        "delete",
        "gpu",
        "--cluster",
        "std-1",
    ]));

    // Filestore.
    run(with_zone(&[
        "filestore",
        "instances",
        "create",
        "nfs",
        "--tier",
        "BASIC_HDD",
        "--file-share",
        "name=vol,capacity=1TB",
        "--network",
        "name=default",
    ]));
    let nfs = run(with_zone(&[
        "filestore",
        "instances",
        "describe",
        "nfs",
        "--format=value(state,fileShares[0].name,fileShares[0].capacityGb)",
    ]));
    assert_eq!(nfs.trim(), "READY\tvol\t1024");
    run(with_zone(&["filestore", "instances", "delete", "nfs"]));

    // Cloud Storage: a bucket, an object up and back, deletes.
    gcloud(&[
        "storage",
        "buckets",
        "create",
        "gs://clients-data",
        "--location",
        "us-central1",
    ]);
    let file = s.home.path().join("shard.csv");
    std::fs::write(&file, "a,b\n1,2\n").expect("write a file");
    let file = file.to_string_lossy().into_owned();
    gcloud(&[
        "storage",
        "cp",
        &file,
        "gs://clients-data/datasets/shard.csv",
    ]);
    assert_eq!(
        gcloud(&["storage", "ls", "gs://clients-data/datasets/"]).trim(),
        "gs://clients-data/datasets/shard.csv"
    );
    assert_eq!(
        gcloud(&["storage", "cat", "gs://clients-data/datasets/shard.csv"]),
        "a,b\n1,2\n"
    );
    gcloud(&["storage", "rm", "gs://clients-data/datasets/shard.csv"]);
    gcloud(&["storage", "buckets", "delete", "gs://clients-data"]);
    assert_eq!(
        gcloud(&["storage", "buckets", "list", "--format=value(name)"]).trim(),
        ""
    );

    // Capacity: the regions' quotas and the zones' accelerators, as plans will check them.
    let quotas = gcloud(&[
        "compute",
        "regions",
        "describe",
        "us-central1",
        "--format=value(quotas.metric)",
    ]);
    assert!(quotas.contains("NVIDIA_T4_GPUS"), "{quotas}");
    let offered = gcloud(&[
        "compute",
        "accelerator-types",
        "list",
        "--filter=zone:us-central1-a",
        "--format=value(name)",
    ]);
    assert!(offered.lines().any(|l| l == "nvidia-tesla-t4"), "{offered}");

    run(with_zone(&["container", "clusters", "delete", "std-1"]));
    assert_eq!(
        run(with_zone(&[
            "container",
            "clusters",
            "list",
            "--format=value(name)"
        ]))
        .trim(),
        ""
    );
}

#[test]
fn aws_creates_describes_and_deletes_what_the_sandbox_emulates() {
    if !installed("aws") {
        return;
    }
    let s = Served::start();
    let aws = |args: &[&str]| {
        let mut all = vec!["--endpoint-url", s.url.as_str(), "--output", "text"];
        all.extend(args);
        s.ok("aws", &all)
    };
    // S3.
    aws(&["s3", "mb", "s3://clients-data"]);
    let file = s.home.path().join("shard.csv");
    std::fs::write(&file, "a,b\n1,2\n").expect("write a file");
    let file = file.to_string_lossy().into_owned();
    aws(&["s3", "cp", &file, "s3://clients-data/datasets/shard.csv"]);
    let listed = aws(&["s3", "ls", "s3://clients-data", "--recursive"]);
    assert!(
        listed.trim_end().ends_with("8 datasets/shard.csv"),
        "{listed}"
    );
    aws(&["s3", "rm", "s3://clients-data/datasets/shard.csv"]);
    aws(&["s3", "rb", "s3://clients-data"]);

    // EKS: a cluster and a node group in the default VPC's subnets, kubectl through the
    // kubeconfig the CLI writes.
    let defaults = aws(&[
        "ec2",
        "describe-subnets",
        "--filters",
        "Name=default-for-az,Values=true",
        "--query",
        "sort_by(Subnets, &AvailabilityZone)[].SubnetId",
    ]);
    let subnets: Vec<&str> = defaults.split_whitespace().collect();
    assert!(
        subnets.len() >= 2,
        "one default subnet per zone: {defaults}"
    );
    let vpc_config = format!("subnetIds={},{}", subnets[0], subnets[1]);
    // The cluster's and the nodes' roles, trusting EKS and EC2.
    let mut arns = Vec::new();
    for (name, service) in [("eks", "eks.amazonaws.com"), ("node", "ec2.amazonaws.com")] {
        let trust = serde_json::json!({"Version": "2012-10-17", "Statement": [{"Effect": "Allow",
            "Principal": {"Service": service}, "Action": "sts:AssumeRole"}]});
        aws(&[
            "iam",
            "create-role",
            "--role-name",
            name,
            "--assume-role-policy-document",
            &trust.to_string(),
        ]);
        let arn = aws(&[
            "iam",
            "get-role",
            "--role-name",
            name,
            "--query",
            "Role.Arn",
        ]);
        arns.push(arn.trim().to_string());
    }
    aws(&[
        "eks",
        "create-cluster",
        "--name",
        "ml",
        "--role-arn",
        &arns[0],
        "--resources-vpc-config",
        &vpc_config,
    ]);
    aws(&["eks", "wait", "cluster-active", "--name", "ml"]);
    assert_eq!(
        aws(&[
            "eks",
            "describe-cluster",
            "--name",
            "ml",
            "--query",
            "cluster.status"
        ])
        .trim(),
        "ACTIVE"
    );
    aws(&[
        "eks",
        "create-nodegroup",
        "--cluster-name",
        "ml",
        "--nodegroup-name",
        "system",
        "--node-role",
        &arns[1],
        "--subnets",
        subnets[0],
        "--scaling-config",
        "minSize=1,maxSize=2,desiredSize=1",
    ]);
    aws(&[
        "eks",
        "wait",
        "nodegroup-active",
        "--cluster-name",
        "ml",
        "--nodegroup-name",
        "system",
    ]);
    aws(&["eks", "update-kubeconfig", "--name", "ml"]);
    if installed("kubectl") {
        let nodes = s.ok("kubectl", &["get", "nodes", "-o", "name"]);
        assert_eq!(nodes.lines().count(), 1, "{nodes}");
        assert!(nodes.contains(".ec2.internal"), "{nodes}");
    }
    assert_eq!(
        aws(&[
            "sagemaker",
            "list-pipelines",
            "--query",
            "length(PipelineSummaries)"
        ])
        .trim(),
        "0"
    );
    aws(&[
        "eks",
        "delete-nodegroup",
        "--cluster-name",
        "ml",
        "--nodegroup-name",
        "system",
    ]);
    aws(&[
        "eks",
        "wait",
        "nodegroup-deleted",
        "--cluster-name",
        "ml",
        "--nodegroup-name",
        "system",
    ]);
    aws(&["eks", "delete-cluster", "--name", "ml"]);
    aws(&["eks", "wait", "cluster-deleted", "--name", "ml"]);
    assert_eq!(
        aws(&["eks", "list-clusters", "--query", "length(clusters)"]).trim(),
        "0"
    );
    for name in ["eks", "node"] {
        aws(&["iam", "delete-role", "--role-name", name]);
    }
    assert_eq!(
        aws(&["iam", "list-roles", "--query", "length(Roles)"]).trim(),
        "0"
    );
}

/// A cluster made by a `--sandbox` apply, then explored with kubectl through the
/// kubeconfig serve wrote: system pods, explain, exec with the container's environment,
/// port-forward.
#[test]
fn kubectl_explores_a_cluster_terrain_made_on_the_sandbox() {
    if !installed("kubectl") {
        return;
    }
    let s = Served::start();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    common::copy_dir(
        &root.join("stacks/gke-batch-ml"),
        &s.work.join("stacks/gke-batch-ml"),
    );
    common::copy_dir(&root.join("stacks/modules"), &s.work.join("stacks/modules"));
    s.work
        .run(&[
            "apply",
            "-s",
            "stacks/gke-batch-ml",
            "--sandbox",
            "--auto-approve",
        ])
        .success();
    let kubeconfig = s.work.join("state/sandbox/kube/batch-aiml.kubeconfig");
    let kubeconfig = kubeconfig.to_string_lossy().into_owned();
    let kubectl = |args: &[&str]| {
        let mut all = vec!["--kubeconfig", kubeconfig.as_str()];
        all.extend(args);
        s.ok("kubectl", &all)
    };
    // What every cluster runs in kube-system.
    let system = kubectl(&["get", "pods", "-n", "kube-system", "-o", "name"]);
    assert!(system.contains("pod/kube-dns-"), "{system}");
    let svc = kubectl(&[
        "get",
        "service",
        "kube-dns",
        "-n",
        "kube-system",
        "-o",
        "jsonpath={.spec.clusterIP}",
    ]);
    assert_eq!(svc, "10.96.0.10");
    // The schemas the API server serves.
    let explained = kubectl(&["explain", "jobs.spec.backoffLimit"]);
    assert!(
        explained.contains("FIELD: backoffLimit <integer>"),
        "{explained}"
    );
    // exec: the container's environment, the drained queue.
    let env = kubectl(&["exec", "redis-leader", "--", "env"]);
    assert!(env.lines().any(|l| l == "HOSTNAME=redis-leader"), "{env}");
    assert!(
        env.lines()
            .any(|l| l.starts_with("REDIS_LEADER_SERVICE_HOST=")),
        "{env}"
    );
    assert_eq!(
        kubectl(&[
            "exec",
            "redis-leader",
            "--",
            "redis-cli",
            "llen",
            "datasets"
        ])
        .trim(),
        "0"
    );
    // port-forward: Redis answers through the tunnel.
    let mut forward = s
        .command(
            "kubectl",
            &[
                "--kubeconfig",
                &kubeconfig,
                "port-forward",
                "pod/redis-leader",
                ":6379",
            ],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start kubectl port-forward");
    let mut stdout = std::io::BufReader::new(forward.stdout.take().expect("piped stdout"));
    let mut first = String::new();
    stdout
        .read_line(&mut first)
        .expect("port-forward says where it listens");
    // Keep reading: kubectl reports each connection, and a closed pipe would end it.
    std::thread::spawn(move || for _ in stdout.lines().map_while(Result::ok) {});
    // `Forwarding from 127.0.0.1:PORT -> 6379`
    let port: u16 = first
        .split_whitespace()
        .nth(2)
        .and_then(|a| a.rsplit_once(':'))
        .and_then(|(_, p)| p.parse().ok())
        .unwrap_or_else(|| panic!("a local port in {first:?}"));
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("a timeout");
    conn.write_all(b"*1\r\n$4\r\nPING\r\n").expect("send PING");
    let mut reply = [0u8; 7];
    conn.read_exact(&mut reply)
        .expect("a reply through the tunnel");
    assert_eq!(&reply, b"+PONG\r\n");
    let _ = forward.kill();
    let _ = forward.wait();
}

/// The seed's batch setup as users build it today (scenario 1): a cluster and a
/// Filestore share from a stack, then by hand with kubectl the NFS volume and its claim,
/// the Redis pod and its Service (`kubectl apply`), and the Job (`kubectl create`).
/// `terrain import --all-in-cluster` lists them; picking them writes one block each, the
/// objects as they were written into `manifests/`, and imports them: the next plan
/// shows no changes.
#[test]
fn a_batch_setup_built_with_kubectl_is_adopted_with_a_clean_plan() {
    if !installed("kubectl") {
        return;
    }
    let s = Served::start();
    s.work
        .write("adopted/stack.toml", &common::by_hand_stack("adopted"));
    let in_stack = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["-s", "adopted", "--sandbox"]);
        s.work.run(&all)
    };
    in_stack(&["apply", "--auto-approve"]).success();
    let state = s.work.json("state/sandbox/adopted.json");
    let ip = state["resources"]["filestore_instance.nfs"]["outputs"]["ip_address"]
        .as_str()
        .unwrap_or_else(|| panic!("the share has an IP: {state:#}"))
        .to_string();
    common::build_by_hand(
        &s.work.join("state/sandbox/kube/batch-aiml.kubeconfig"),
        &ip,
    );

    // Listed: what was built by hand; not the Job's pods, not the API server's Service.
    let listed = in_stack(&["import", "--all-in-cluster", "gke_cluster.batch"]);
    listed.success();
    let expected = "Not managed by terrain in namespace default on gke_cluster.batch (5):
  persistentvolume/fileserver             kubernetes_manifest.pv_fileserver
  persistentvolumeclaim/fileserver-claim  kubernetes_manifest.pvc_fileserver_claim
  service/redis-leader                    kubernetes_manifest.service_redis_leader
  pod/redis-leader                        kubernetes_manifest.pod_redis_leader
  job/workload                            kubernetes_manifest.job_workload
";
    assert!(listed.stdout.starts_with(expected), "{}", listed.stdout);
    assert!(
        !s.work.exists("adopted/manifests"),
        "listing writes nothing"
    );

    let adopt = in_stack(&[
        "import",
        "--all-in-cluster",
        "gke_cluster.batch",
        "--namespace",
        "default",
        "--write",
        "adopted/workload.toml",
        "--include",
        "pv/fileserver",
        "--include",
        "pvc/fileserver-claim",
        "--include",
        "pod/redis-leader",
        "--include",
        "job/workload",
    ]);
    adopt.success();
    // One object alone, on the cluster --cluster names.
    let one = in_stack(&[
        "import",
        "kubernetes_manifest.redis",
        "v1/Service/default/redis-leader",
        "--write",
        "adopted/workload.toml",
        "--cluster",
        "gke_cluster.batch",
    ]);
    one.success();
    assert!(
        one.stdout.contains("Wrote [kubernetes_manifest.redis] to adopted/workload.toml and imported v1/Service/default/redis-leader."),
        "{}",
        one.stdout
    );
    let written = s.work.read("adopted/workload.toml");
    assert!(
        written.contains("[kubernetes_manifest.redis]\ncluster = \"${gke_cluster.batch.kubernetes}\"\nfile    = \"manifests/service-redis-leader.yaml\"\n"),
        "{written}"
    );
    assert!(
        written.contains(
            "# Adopted from Job default/workload on gke_cluster.batch by terrain import.\n[kubernetes_manifest.job_workload]\ncluster = \"${gke_cluster.batch.kubernetes}\"\nfile    = \"manifests/job-workload.yaml\"\n"
        ),
        "{written}"
    );
    assert_eq!(
        terrain::stack::fmt::format(&written).expect("TOML"),
        written,
        "the blocks are formatted"
    );
    // The Job as created, without what its controller added.
    let job = s.work.read("adopted/manifests/job-workload.yaml");
    for absent in [
        "selector",
        "controller-uid",
        "job-name",
        "status",
        "uid:",
        "dnsPolicy",
        "backoffLimit",
        "terminationMessagePath",
    ] {
        assert!(!job.contains(absent), "{absent} in {job}");
    }
    assert!(job.contains("cloud.google.com/gke-spot: 'true'"), "{job}");
    // The volume as applied: the share's IP, no binding ids.
    let pv = s
        .work
        .read("adopted/manifests/persistentvolume-fileserver.yaml");
    assert!(pv.contains(&format!("server: {ip}")), "{pv}");
    assert!(!pv.contains("claimRef"), "{pv}");

    let plan = in_stack(&["plan", "--detailed-exitcode", "--no-color"]);
    plan.success();
    assert!(
        plan.stdout.contains("No changes"),
        "{}\n{written}",
        plan.stdout
    );
    // Adopted: listed no more.
    let again = in_stack(&["import", "--all-in-cluster", "gke_cluster.batch"]);
    again.success();
    assert!(
        again
            .stdout
            .contains("Nothing to adopt in namespace default"),
        "{}",
        again.stdout
    );
}
