//! Compatibility with the official `kubectl`: with a kubeconfig the sandbox writes, kubectl
//! lists namespaces and pods, applies a manifest server-side, prints, describes and
//! deletes the object. Skipped (with a message) when kubectl is not installed.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use terrain_sandbox::{Options, Sandbox, Timing};

use crate::common;
use common::{gke_cluster, Kubectl, KUBECTL};

const PROJECT: &str = "kubectl-proj";

#[tokio::test]
async fn kubectl_gets_applies_describes_and_deletes() {
    if !Path::new(KUBECTL).is_file() {
        eprintln!("skipping: {KUBECTL} is not installed");
        return;
    }
    let sandbox = Sandbox::start(Options {
        timing: Timing::instant(),
        ..Options::google_apis_on()
    })
    .await
    .expect("sandbox starts");
    let home = tempfile::tempdir().expect("temp dir");
    let kubeconfig = gke_cluster(&sandbox, PROJECT, "batch", home.path()).await;
    let written = sandbox.kubeconfig(home.path()).expect("kubeconfig");
    let [(name, _)] = written.as_slice() else {
        panic!("one kubeconfig per cluster, got {written:?}");
    };
    assert_eq!(name, "batch");
    let kubectl = Kubectl {
        kubeconfig: &kubeconfig,
        home: home.path(),
    };

    let namespaces = kubectl.ok(&["get", "namespaces"]).await;
    let header: Vec<&str> = namespaces
        .stdout
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(header, ["NAME", "STATUS", "AGE"], "{}", namespaces.stdout);
    for ns in ["default", "kube-node-lease", "kube-public", "kube-system"] {
        assert!(
            namespaces
                .stdout
                .lines()
                .any(|l| l.split_whitespace().take(2).eq([ns, "Active"])),
            "{ns} Active in:\n{}",
            namespaces.stdout
        );
    }

    let pods = kubectl.ok(&["get", "pods", "-A"]).await;
    assert!(
        pods.stdout.contains("NAMESPACE") || pods.stderr.contains("No resources found"),
        "stdout:\n{}\nstderr:\n{}",
        pods.stdout,
        pods.stderr
    );

    let manifest = home.path().join("settings.yaml");
    std::fs::write(
        &manifest,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  labels:\n    app: demo\ndata:\n  greeting: hello\n",
    )
    .expect("manifest");
    let manifest = manifest.to_string_lossy().into_owned();
    let applied = kubectl
        .ok(&["apply", "--server-side", "-f", &manifest])
        .await;
    assert_eq!(
        applied.stdout.trim(),
        "configmap/settings serverside-applied"
    );

    let yaml = kubectl
        .ok(&["get", "configmap", "settings", "-o", "yaml"])
        .await;
    let object: Value = serde_yaml_ng::from_str(&yaml.stdout).expect("kubectl prints YAML");
    assert_eq!(object["kind"], "ConfigMap");
    assert_eq!(object["metadata"]["name"], "settings");
    assert_eq!(object["metadata"]["namespace"], "default");
    assert_eq!(object["data"]["greeting"], "hello");
    assert!(object["metadata"]["uid"].is_string());

    let table = kubectl.ok(&["get", "configmaps", "-l", "app=demo"]).await;
    let rows: Vec<Vec<&str>> = table
        .stdout
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows.first().map(Vec::as_slice),
        Some(["NAME", "DATA", "AGE"].as_slice())
    );
    assert_eq!(
        rows.get(1).map(|r| &r[..2]),
        Some(["settings", "1"].as_slice())
    );

    let described = kubectl.ok(&["describe", "configmap", "settings"]).await;
    for want in [
        "Name:",
        "settings",
        "Namespace:",
        "default",
        "app=demo",
        "greeting",
        "hello",
    ] {
        assert!(
            described.stdout.contains(want),
            "{want} in:\n{}",
            described.stdout
        );
    }

    let deleted = kubectl.ok(&["delete", "configmap", "settings"]).await;
    assert_eq!(deleted.stdout.trim(), "configmap \"settings\" deleted");
    let missing = kubectl.run(&["get", "configmap", "settings"]).await;
    assert!(!missing.ok);
    assert!(
        missing
            .stderr
            .contains("Error from server (NotFound): configmaps \"settings\" not found"),
        "{}",
        missing.stderr
    );
    sandbox.shutdown().await;
}

/// Reads exactly `n` bytes, or fails the test after a minute.
async fn read_exactly(conn: &mut tokio::net::TcpStream, n: usize) -> Vec<u8> {
    use tokio::io::AsyncReadExt as _;
    let mut buf = vec![0; n];
    tokio::time::timeout(Duration::from_secs(60), conn.read_exact(&mut buf))
        .await
        .expect("the forwarded connection answers within a minute")
        .expect("the forwarded connection stays open");
    buf
}

/// A sandbox with one GKE cluster running the Redis pod `cache`; `None` (with a
/// message) when kubectl is not installed.
async fn cluster_with_redis() -> Option<(Sandbox, tempfile::TempDir, std::path::PathBuf)> {
    if !Path::new(KUBECTL).is_file() {
        eprintln!("skipping: {KUBECTL} is not installed");
        return None;
    }
    let sandbox = Sandbox::start(Options {
        timing: Timing::instant(),
        ..Options::google_apis_on()
    })
    .await
    .expect("sandbox starts");
    let home = tempfile::tempdir().expect("temp dir");
    let kubeconfig = gke_cluster(&sandbox, PROJECT, "forward", home.path()).await;
    let kubectl = Kubectl {
        kubeconfig: &kubeconfig,
        home: home.path(),
    };
    let manifest = home.path().join("cache.yaml");
    std::fs::write(
        &manifest,
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: cache\nspec:\n  containers:\n  - name: redis\n    image: redis:7.2\n    ports:\n    - containerPort: 6379\n",
    )
    .expect("manifest");
    kubectl
        .ok(&["apply", "-f", &manifest.to_string_lossy()])
        .await;
    let mut phase = String::new();
    for _ in 0..120 {
        phase = kubectl
            .ok(&["get", "pod", "cache", "-o", "jsonpath={.status.phase}"])
            .await
            .stdout;
        if phase == "Running" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(phase, "Running", "the redis pod runs");
    Some((sandbox, home, kubeconfig))
}

/// `kubectl port-forward pod/cache <local>:<remote>` in the background, once it listens
/// (over the WebSocket tunnel, or plain SPDY when `websockets` is false), with a free
/// local port.
async fn port_forward(
    kubeconfig: &Path,
    home: &Path,
    remote: u16,
    websockets: bool,
) -> (tokio::process::Child, u16) {
    use tokio::io::AsyncBufReadExt as _;

    let local = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free local port")
        .port();
    let mut forward = tokio::process::Command::new(KUBECTL)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--cache-dir")
        .arg(home.join("cache"))
        .args([
            "port-forward",
            "--address",
            "127.0.0.1",
            "pod/cache",
            &format!("{local}:{remote}"),
        ])
        .env_remove("KUBECONFIG")
        .env("HOME", home)
        .env("KUBECTL_PORT_FORWARD_WEBSOCKETS", websockets.to_string())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("kubectl port-forward starts");
    let stdout = forward.stdout.take().expect("stdout");
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let ready = tokio::time::timeout(Duration::from_secs(60), async {
        while let Ok(Some(line)) = lines.next_line().await {
            if line.starts_with("Forwarding from 127.0.0.1:") {
                return true;
            }
        }
        false
    })
    .await;
    if ready != Ok(true) {
        let _ = forward.start_kill();
        let out = forward.wait_with_output().await.expect("kubectl output");
        panic!(
            "kubectl port-forward did not start:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // Keep draining stdout ("Handling connection for …"), so kubectl never blocks on it.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (forward, local)
}

/// Talks to Redis through `kubectl port-forward`: PING, then a value of several MB
/// stored and read back, then a second connection on the same session.
async fn port_forward_reaches_redis(websockets: bool) {
    use tokio::io::AsyncWriteExt as _;

    let Some((sandbox, home, kubeconfig)) = cluster_with_redis().await else {
        return;
    };
    sandbox.clear_traffic();
    let (mut forward, local) = port_forward(&kubeconfig, home.path(), 6379, websockets).await;

    let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", local))
        .await
        .expect("the forwarded port accepts");
    conn.write_all(b"PING\r\n").await.expect("write");
    assert_eq!(read_exactly(&mut conn, 7).await, b"+PONG\r\n");

    // Several MB each way: far beyond SPDY's 64 KiB initial windows.
    let value: Vec<u8> = (0..6 * 1024 * 1024u32)
        .map(|i| b'a' + (i.wrapping_mul(2_654_435_761) >> 27) as u8 % 26)
        .collect();
    let mut set = format!("*3\r\n$3\r\nSET\r\n$3\r\nbig\r\n${}\r\n", value.len()).into_bytes();
    set.extend_from_slice(&value);
    set.extend_from_slice(b"\r\n");
    conn.write_all(&set).await.expect("write");
    assert_eq!(read_exactly(&mut conn, 5).await, b"+OK\r\n");
    conn.write_all(b"*2\r\n$3\r\nGET\r\n$3\r\nbig\r\n")
        .await
        .expect("write");
    let head = format!("${}\r\n", value.len());
    assert_eq!(read_exactly(&mut conn, head.len()).await, head.as_bytes());
    let back = read_exactly(&mut conn, value.len() + 2).await;
    assert!(
        back[..value.len()] == value[..],
        "the value comes back intact"
    );
    drop(conn);

    // A second connection is a new request on the same session.
    let mut again = tokio::net::TcpStream::connect(("127.0.0.1", local))
        .await
        .expect("the forwarded port accepts again");
    again
        .write_all(b"*2\r\n$6\r\nSTRLEN\r\n$3\r\nbig\r\n")
        .await
        .expect("write");
    let want = format!(":{}\r\n", value.len());
    assert_eq!(read_exactly(&mut again, want.len()).await, want.as_bytes());
    drop(again);

    let upgrades: Vec<String> = sandbox
        .traffic()
        .into_iter()
        .filter(|e| e.path.ends_with("/pods/cache/portforward"))
        .map(|e| format!("{} {} {:?}", e.method, e.status, e.query))
        .collect();
    // kubectl upgrades with GET for the WebSocket tunnel, POST for SPDY, and names its
    // ports per stream, not in the query.
    let want = if websockets {
        "GET 101 \"\""
    } else {
        "POST 101 \"\""
    };
    assert_eq!(upgrades, [want], "one upgrade, over the expected transport");

    forward.start_kill().expect("kubectl is stopped");
    let out = forward.wait_with_output().await.expect("kubectl exits");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("error") && !stderr.contains("lost connection"),
        "kubectl port-forward reported:\n{stderr}"
    );
    sandbox.shutdown().await;
}

#[tokio::test]
async fn kubectl_port_forward_reaches_redis_over_the_websocket_tunnel() {
    port_forward_reaches_redis(true).await;
}

#[tokio::test]
async fn kubectl_port_forward_reaches_redis_over_spdy() {
    port_forward_reaches_redis(false).await;
}

#[tokio::test]
async fn kubectl_port_forward_reports_a_port_nothing_listens_on() {
    use tokio::io::AsyncReadExt as _;

    let Some((sandbox, home, kubeconfig)) = cluster_with_redis().await else {
        return;
    };
    let (forward, local) = port_forward(&kubeconfig, home.path(), 9999, true).await;
    let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", local))
        .await
        .expect("kubectl accepts locally");
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(60), conn.read_to_end(&mut rest)).await;
    assert!(
        matches!(read, Ok(Ok(0)) | Ok(Err(_))),
        "the connection closes with nothing on it: {read:?}"
    );
    // kubectl prints the kubelet's message from the error stream, then gives up on the
    // session (client-go closes it after any such error).
    let out = tokio::time::timeout(Duration::from_secs(60), forward.wait_with_output())
        .await
        .expect("kubectl exits on its own")
        .expect("kubectl output");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("an error occurred forwarding {local} -> 9999"))
            && stderr.contains("error forwarding port 9999 to pod")
            && stderr.contains("connection refused"),
        "{stderr}"
    );
    sandbox.shutdown().await;
}
