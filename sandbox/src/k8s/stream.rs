//! The Kubernetes streaming protocols over WebSocket (`v5.channel.k8s.io`,
//! `v4.channel.k8s.io`): `exec` runs a command against the pod's volumes, `portforward`
//! connects to the process behind a pod port.
//!
//! An emulated pod has no filesystem of its own, only its volume mounts: `exec` runs the
//! host program the command jail (`jail.rs`) planned for the command, with the container's
//! environment, and maps host paths in what it prints back to container paths. Every binary frame starts with its channel byte;
//! exec uses 0 stdin, 1 stdout, 2 stderr, 3 the final `metav1.Status`, 4 resize, and v5
//! adds `[255, channel]` to close a channel. Port-forward uses channels `2i` (data) and
//! `2i + 1` (error) for the `i`-th requested port.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::pin;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use axum::extract::ws::{close_code, CloseFrame, Message, WebSocket};
use futures::stream::{self, SplitSink, SplitStream};
use futures::{SinkExt, Stream, StreamExt};
use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::process::{Child, ChildStdin, Command};

use super::jail::{plan, Plan, Run, View};
use super::Mount;

/// The negotiated subprotocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Protocol {
    V4,
    V5,
}

/// What an exec runs and sees.
#[derive(Debug, Clone)]
pub(crate) struct ExecTarget {
    pub command: Vec<String>,
    /// The container's environment (see `environment.rs`), which commands run with.
    pub env: Vec<(String, String)>,
    pub mounts: Vec<Mount>,
    /// The redis-server behind the pod, for `redis-cli`.
    pub redis: Option<SocketAddr>,
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
}

const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const STATUS: u8 = 3;
/// v5 only: `[CLOSE, channel]` says the client will send nothing more on `channel`.
const CLOSE: u8 = 255;

/// With v4 the only end-of-stdin signal is the socket closing, so a command still reading
/// stdin then gets this long to finish before it is killed.
const V4_STDIN_GRACE: Duration = Duration::from_secs(60);

/// How long the client gets to answer our close frame before the connection is dropped.
const CLOSE_WAIT: Duration = Duration::from_secs(5);

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Output is read and sent in chunks of at most this size.
pub(crate) const CHUNK: usize = 32 * 1024;

/// Output whose host paths are mapped back is held until a line ends, but never more than this.
const MAX_PENDING_LINE: usize = 64 * 1024;

/// Serves one exec session until the command exits.
pub(crate) async fn exec(ws: WebSocket, protocol: Protocol, target: ExecTarget) {
    let (mut sink, mut stream) = ws.split();
    // As the API server does: an empty frame on the lowest writable channel says the
    // session is established.
    let first = if target.stdout {
        STDOUT
    } else if target.stderr {
        STDERR
    } else {
        STATUS
    };
    if sink.send(Message::binary(vec![first])).await.is_err() {
        return;
    }
    let view = View::new(&target.mounts);
    let status = match plan(&target.command, &view, target.redis) {
        Plan::Exit { code, stderr } => {
            if target.stderr && !stderr.is_empty() {
                let _ = send(&mut sink, STDERR, stderr.as_bytes()).await;
            }
            exit_status(&target.command, code)
        }
        Plan::NotFound(name) => not_found_status(&name),
        Plan::Run(run) => {
            match run_process(&mut sink, &mut stream, protocol, &target, &view, run).await {
                Some(status) => status,
                None => return,
            }
        }
    };
    let _ = send(&mut sink, STATUS, status.to_string().as_bytes()).await;
    close(&mut sink).await;
    let _ = tokio::time::timeout(CLOSE_WAIT, async {
        while let Some(Ok(_)) = stream.next().await {}
    })
    .await;
}

/// Serves one port-forward session: `ports` pairs each requested pod port with the
/// address behind it (`None`: nothing listens there).
pub(crate) async fn portforward(
    ws: WebSocket,
    protocol: Protocol,
    ports: Vec<(u16, Option<SocketAddr>)>,
) {
    let (mut sink, mut stream) = ws.split();
    // Two channels per port, numbered in one byte.
    if ports.len() > usize::from(u8::MAX / 2) {
        close(&mut sink).await;
        return;
    }
    // Every channel first carries its port number, which kube-rs checks before anything else.
    for (i, (port, _)) in ports.iter().enumerate() {
        let [lo, hi] = port.to_le_bytes();
        for channel in [data_channel(i), data_channel(i) + 1] {
            if sink
                .send(Message::binary(vec![channel, lo, hi]))
                .await
                .is_err()
            {
                return;
            }
        }
    }
    let connections =
        futures::future::join_all(ports.iter().map(|&(port, addr)| connect(port, addr))).await;
    let mut writers: Vec<Option<OwnedWriteHalf>> = Vec::with_capacity(ports.len());
    let mut readers = Vec::new();
    for (i, connection) in connections.into_iter().enumerate() {
        match connection {
            Ok(tcp) => {
                let (read, write) = tcp.into_split();
                readers.push(tcp_chunks(i, read).boxed());
                writers.push(Some(write));
            }
            Err(message) => {
                writers.push(None);
                if send(&mut sink, data_channel(i) + 1, message.as_bytes())
                    .await
                    .is_err()
                {
                    return;
                }
            }
        }
    }

    let mut open = readers.len();
    let to_client = async {
        let mut chunks = stream::select_all(readers);
        while open > 0 {
            match chunks.next().await {
                Some((i, Some(bytes))) => {
                    if send(&mut sink, data_channel(i), &bytes).await.is_err() {
                        return;
                    }
                }
                Some((_, None)) => open -= 1,
                None => break,
            }
        }
        // The pod side is done with every port: so is the session, as with the kubelet.
        close(&mut sink).await;
    };
    let from_client = async {
        while let Some(Ok(message)) = stream.next().await {
            let Message::Binary(frame) = message else {
                continue;
            };
            match frame.split_first() {
                Some((&CLOSE, &[channel])) if protocol == Protocol::V5 && channel % 2 == 0 => {
                    if let Some(mut writer) = writers
                        .get_mut(usize::from(channel / 2))
                        .and_then(Option::take)
                    {
                        let _ = writer.shutdown().await;
                    }
                }
                Some((&channel, payload)) if channel % 2 == 0 && !payload.is_empty() => {
                    let slot = writers.get_mut(usize::from(channel / 2));
                    if let Some(writer) = slot {
                        if let Some(tcp) = writer.as_mut() {
                            if tcp.write_all(payload).await.is_err() {
                                *writer = None;
                            }
                        }
                    }
                }
                _ => {}
            }
        }
    };
    let mut from_client = pin!(from_client);
    tokio::select! {
        () = &mut from_client => {}
        () = to_client => {
            let _ = tokio::time::timeout(CLOSE_WAIT, from_client).await;
        }
    }
}

fn data_channel(port_index: usize) -> u8 {
    // `portforward` refuses more ports than one byte of channels can number.
    u8::try_from(2 * port_index).unwrap_or(u8::MAX - 1)
}

/// The connection to what listens behind a pod port, or the kubelet's error text (also
/// what `spdy` bridges its port-forward streams with).
pub(crate) async fn connect(port: u16, addr: Option<SocketAddr>) -> Result<TcpStream, String> {
    let failure = |reason: String| {
        format!("error forwarding port {port} to pod: failed to connect to localhost:{port} inside the pod: {reason}")
    };
    let Some(addr) = addr else {
        return Err(failure("connection refused".into()));
    };
    match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
        Ok(Ok(tcp)) => Ok(tcp),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            Err(failure("connection refused".into()))
        }
        Ok(Err(e)) => Err(failure(e.to_string())),
        Err(_) => Err(failure("connection timed out".into())),
    }
}

/// What the pod side of port `i` sends, ending with `(i, None)` when it closes.
fn tcp_chunks(
    i: usize,
    read: OwnedReadHalf,
) -> impl Stream<Item = (usize, Option<Vec<u8>>)> + Send {
    stream::unfold(Some(read), move |state| async move {
        let mut read = state?;
        let mut buf = vec![0; CHUNK];
        match read.read(&mut buf).await {
            Ok(0) | Err(_) => Some(((i, None), None)),
            Ok(n) => {
                buf.truncate(n);
                Some(((i, Some(buf)), Some(read)))
            }
        }
    })
}

/// Closes the session with a normal-closure code: client-go reports a close frame
/// without one as an error.
async fn close(sink: &mut SplitSink<WebSocket, Message>) {
    let frame = CloseFrame {
        code: close_code::NORMAL,
        reason: "".into(),
    };
    if sink.send(Message::Close(Some(frame))).await.is_ok() {
        let _ = sink.close().await;
    }
}

async fn send(
    sink: &mut SplitSink<WebSocket, Message>,
    channel: u8,
    payload: &[u8],
) -> Result<(), axum::Error> {
    let mut frame = Vec::with_capacity(payload.len() + 1);
    frame.push(channel);
    frame.extend_from_slice(payload);
    sink.send(Message::binary(frame)).await
}

// ---------------------------------------------------------------------------------------
// Running a planned command

/// Runs the command and streams it; `None` when the client went away first (the process
/// is then killed).
async fn run_process(
    sink: &mut SplitSink<WebSocket, Message>,
    stream: &mut SplitStream<WebSocket>,
    protocol: Protocol,
    target: &ExecTarget,
    view: &View,
    run: Run,
) -> Option<Value> {
    let workdir = match WorkDir::new(view) {
        Ok(dir) => dir,
        Err(e) => {
            return Some(internal_status(format!(
                "could not create a working directory: {e}"
            )))
        }
    };
    let piped = |wanted: bool| {
        if wanted {
            Stdio::piped()
        } else {
            Stdio::null()
        }
    };
    let mut command = Command::new(&run.program);
    command
        .args(&run.args)
        .current_dir(workdir.path())
        .env_clear()
        .stdin(piped(target.stdin))
        .stdout(piped(target.stdout))
        .stderr(piped(target.stderr))
        .kill_on_drop(true);
    // The host's PATH finds the jailed commands; the rest is the container's own.
    for key in ["PATH", "HOME", "LANG"] {
        if let Some(value) = std::env::var_os(key) {
            command.env(key, value);
        }
    }
    for (key, value) in target.env.iter().filter(|(k, _)| k != "PATH") {
        command.env(key, value);
    }
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Some(not_found_status(&run.name))
        }
        Err(e) => {
            return Some(internal_status(format!(
                "failed to start {}: {e}",
                run.name
            )))
        }
    };
    let stdin = child.stdin.take();
    let out = Output {
        stdout: child.stdout.take(),
        stderr: child.stderr.take(),
        out_map: if run.rewrite_stdout {
            Rewriter::new(view)
        } else {
            Rewriter::passthrough()
        },
        err_map: Rewriter::new(view),
    };
    let output = pump_output(sink, out, child, &target.command);
    let input = pump_input(stream, stdin, protocol);
    tokio::select! {
        status = output => Some(status),
        // Dropping `output` drops the child, and `kill_on_drop` ends it.
        () = input => None,
    }
}

/// Feeds channel 0 to the command's stdin until the client goes away.
async fn pump_input(
    stream: &mut SplitStream<WebSocket>,
    mut stdin: Option<ChildStdin>,
    protocol: Protocol,
) {
    while let Some(Ok(message)) = stream.next().await {
        let Message::Binary(frame) = message else {
            continue;
        };
        match frame.split_first() {
            Some((&STDIN, payload)) if !payload.is_empty() => {
                if let Some(pipe) = stdin.as_mut() {
                    if pipe.write_all(payload).await.is_err() {
                        stdin = None;
                    }
                }
            }
            Some((&CLOSE, &[STDIN])) if protocol == Protocol::V5 => stdin = None,
            // Resize, empty frames and unknown channels.
            _ => {}
        }
    }
    if protocol == Protocol::V4 && stdin.is_some() {
        // The closed socket was v4's way of ending stdin: let the command finish.
        drop(stdin);
        tokio::time::sleep(V4_STDIN_GRACE).await;
    }
}

struct Output<O, E> {
    stdout: Option<O>,
    stderr: Option<E>,
    out_map: Rewriter,
    err_map: Rewriter,
}

/// Streams stdout and stderr as they come, then waits for the exit and returns its status.
async fn pump_output<O, E>(
    sink: &mut SplitSink<WebSocket, Message>,
    mut out: Output<O, E>,
    mut child: Child,
    command: &[String],
) -> Value
where
    O: AsyncRead + Unpin,
    E: AsyncRead + Unpin,
{
    let mut out_buf = vec![0; CHUNK];
    let mut err_buf = vec![0; CHUNK];
    // Once the client is gone the pipes are still drained, so the command never blocks on them.
    let mut connected = true;
    while out.stdout.is_some() || out.stderr.is_some() {
        let (channel, bytes) = tokio::select! {
            read = read_some(&mut out.stdout, &mut out_buf) => match read {
                Some(n) => (STDOUT, out.out_map.push(&out_buf[..n])),
                None => {
                    out.stdout = None;
                    (STDOUT, out.out_map.finish())
                }
            },
            read = read_some(&mut out.stderr, &mut err_buf) => match read {
                Some(n) => (STDERR, out.err_map.push(&err_buf[..n])),
                None => {
                    out.stderr = None;
                    (STDERR, out.err_map.finish())
                }
            },
        };
        if connected && !bytes.is_empty() {
            connected = send(sink, channel, &bytes).await.is_ok();
        }
    }
    match child.wait().await {
        Ok(status) => exit_status(command, exit_code(status)),
        Err(e) => internal_status(format!("error waiting for the command: {e}")),
    }
}

/// The next chunk from a pipe (`None` at its end); never resolves for a closed pipe.
async fn read_some<R: AsyncRead + Unpin>(pipe: &mut Option<R>, buf: &mut [u8]) -> Option<usize> {
    match pipe {
        Some(pipe) => match pipe.read(buf).await {
            Ok(0) | Err(_) => None,
            Ok(n) => Some(n),
        },
        None => std::future::pending().await,
    }
}

fn exit_code(status: ExitStatus) -> i32 {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            // What container runtimes report for a process killed by a signal.
            return 128 + signal;
        }
    }
    status.code().unwrap_or(1)
}

/// The status the kubelet sends when a command ends.
fn exit_status(command: &[String], code: i32) -> Value {
    if code == 0 {
        return json!({"metadata": {}, "status": "Success"});
    }
    json!({
        "metadata": {},
        "status": "Failure",
        "message": format!(
            "command terminated with non-zero exit code: error executing command [{}], exit code {code}",
            command.join(" ")
        ),
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]},
    })
}

/// The status of a command that could not start (the API server's `InternalError`).
fn internal_status(error: String) -> Value {
    json!({
        "metadata": {},
        "status": "Failure",
        "message": format!("Internal error occurred: {error}"),
        "reason": "InternalError",
        "details": {"causes": [{"message": error}]},
        "code": 500,
    })
}

/// What containerd reports, through the kubelet, for a program the image lacks.
fn not_found_status(name: &str) -> Value {
    let exec_id: String = (0..4)
        .map(|_| format!("{:016x}", rand::random::<u64>()))
        .collect();
    let reason = if name.contains('/') {
        format!("exec: \"{name}\": stat {name}: no such file or directory")
    } else {
        format!("exec: \"{name}\": executable file not found in $PATH")
    };
    internal_status(format!(
        "error executing command in container: failed to exec in container: failed to start exec \"{exec_id}\": \
         OCI runtime exec failed: exec failed: unable to start container process: {reason}: unknown"
    ))
}

/// The command's working directory: the first mount's host directory, else an empty
/// directory removed when the session ends.
enum WorkDir {
    Mount(PathBuf),
    Temp(PathBuf),
}

impl WorkDir {
    fn new(view: &View) -> std::io::Result<WorkDir> {
        if let Some(host) = view.first_host().filter(|h| h.is_dir()) {
            return Ok(WorkDir::Mount(host.to_path_buf()));
        }
        let dir = std::env::temp_dir().join(format!("terrain-exec-{:016x}", rand::random::<u64>()));
        std::fs::create_dir_all(&dir)?;
        Ok(WorkDir::Temp(dir))
    }

    fn path(&self) -> &Path {
        match self {
            WorkDir::Mount(p) | WorkDir::Temp(p) => p,
        }
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if let WorkDir::Temp(dir) = self {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Maps host paths in a program's output back to container paths. Output is held until
/// a line (or NUL-separated name) ends so a path split across reads is still found.
struct Rewriter {
    /// Host prefix → container path, longest host first.
    pairs: Vec<(Vec<u8>, Vec<u8>)>,
    pending: Vec<u8>,
}

impl Rewriter {
    fn passthrough() -> Rewriter {
        Rewriter {
            pairs: Vec::new(),
            pending: Vec::new(),
        }
    }

    fn new(view: &View) -> Rewriter {
        let mut pairs = Vec::new();
        for m in &view.mounts {
            let container = m.path.as_bytes().to_vec();
            for host in std::iter::once(&m.host).chain(m.real.as_ref()) {
                let bytes = host.as_os_str().as_encoded_bytes();
                let bytes = bytes.strip_suffix(b"/").unwrap_or(bytes).to_vec();
                if !bytes.is_empty() && !pairs.iter().any(|(h, _)| *h == bytes) {
                    pairs.push((bytes, container.clone()));
                }
            }
        }
        pairs.sort_by_key(|(host, _)| std::cmp::Reverse(host.len()));
        Rewriter {
            pairs,
            pending: Vec::new(),
        }
    }

    fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        if self.pairs.is_empty() {
            return chunk.to_vec();
        }
        self.pending.extend_from_slice(chunk);
        let cut = match self.pending.iter().rposition(|&b| b == b'\n' || b == 0) {
            Some(i) => i + 1,
            None if self.pending.len() > MAX_PENDING_LINE => self.pending.len(),
            None => return Vec::new(),
        };
        let rest = self.pending.split_off(cut);
        let done = std::mem::replace(&mut self.pending, rest);
        self.map(&done)
    }

    fn finish(&mut self) -> Vec<u8> {
        let done = std::mem::take(&mut self.pending);
        self.map(&done)
    }

    fn map(&self, bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        'scan: while i < bytes.len() {
            for (host, container) in &self.pairs {
                if bytes[i..].starts_with(host) {
                    let after = i + host.len();
                    // A mount at `/` maps `<host>/x` to `/x`, and `<host>` alone to `/`.
                    if container.as_slice() != b"/" || bytes.get(after) != Some(&b'/') {
                        out.extend_from_slice(container);
                    }
                    i = after;
                    continue 'scan;
                }
            }
            out.push(bytes[i]);
            i += 1;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::io::Write;
    use std::process::Command as StdCommand;

    use axum::extract::ws::WebSocketUpgrade;
    use axum::routing::get;
    use tokio::net::TcpListener;
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    use tokio_tungstenite::tungstenite::Message as Frame;

    use crate::k8s::processes::{Processes, RedisStatus};

    type Client = tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >;

    const V5: &str = "v5.channel.k8s.io";
    const V4: &str = "v4.channel.k8s.io";

    /// Serves one WebSocket session with `serve` on a loopback port and connects to it
    /// offering `protocol`, as kube-rs and kubectl do.
    async fn connect<F, Fut>(protocol: &str, serve: F) -> Client
    where
        F: FnOnce(WebSocket, Protocol) -> Fut + Clone + Send + Sync + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a loopback port");
        let addr = listener.local_addr().expect("local address");
        let app = axum::Router::new().route(
            "/",
            get(move |upgrade: WebSocketUpgrade| {
                let serve = serve.clone();
                async move {
                    upgrade.protocols([V5, V4]).on_upgrade(move |ws| {
                        let protocol = if ws.protocol().is_some_and(|p| p == V5) {
                            Protocol::V5
                        } else {
                            Protocol::V4
                        };
                        serve(ws, protocol)
                    })
                }
            }),
        );
        tokio::spawn(async move { axum::serve(listener, app).await });
        let mut request = format!("ws://{addr}/")
            .into_client_request()
            .expect("a websocket request");
        request.headers_mut().insert(
            "Sec-WebSocket-Protocol",
            protocol.parse().expect("a header value"),
        );
        let (client, response) = tokio_tungstenite::connect_async(request)
            .await
            .expect("connect");
        assert_eq!(
            response
                .headers()
                .get("Sec-WebSocket-Protocol")
                .and_then(|v| v.to_str().ok()),
            Some(protocol)
        );
        client
    }

    fn target(command: &[&str], mounts: Vec<Mount>) -> ExecTarget {
        ExecTarget {
            command: command.iter().map(|s| s.to_string()).collect(),
            env: vec![("QUEUE".into(), "datasets".into())],
            mounts,
            redis: None,
            stdin: false,
            stdout: true,
            stderr: true,
        }
    }

    fn mount(path: &str, host: &Path, read_only: bool) -> Mount {
        Mount {
            path: path.into(),
            host: host.to_path_buf(),
            read_only,
        }
    }

    async fn start_exec(protocol: &str, target: ExecTarget) -> Client {
        connect(protocol, move |ws, p| exec(ws, p, target)).await
    }

    #[derive(Debug, Default)]
    struct Outcome {
        /// The channel of every frame, in order.
        channels: Vec<u8>,
        stdout: Vec<u8>,
        stderr: Vec<u8>,
        status: Option<Value>,
        /// The code of the server's close frame.
        close_code: Option<u16>,
    }

    impl Outcome {
        fn stderr(&self) -> String {
            String::from_utf8_lossy(&self.stderr).into_owned()
        }

        fn stdout(&self) -> String {
            String::from_utf8_lossy(&self.stdout).into_owned()
        }

        fn status(&self) -> &Value {
            self.status.as_ref().expect("a status on channel 3")
        }
    }

    /// Reads exec frames until the server ends the session.
    async fn finish(client: &mut Client) -> Outcome {
        let mut outcome = Outcome::default();
        while let Some(frame) = client.next().await {
            match frame.expect("a clean websocket session") {
                Frame::Binary(bytes) => {
                    let (&channel, payload) = bytes.split_first().expect("a channel byte");
                    outcome.channels.push(channel);
                    match channel {
                        STDOUT => outcome.stdout.extend_from_slice(payload),
                        STDERR => outcome.stderr.extend_from_slice(payload),
                        STATUS if !payload.is_empty() => {
                            assert!(outcome.status.is_none(), "a second status");
                            outcome.status =
                                Some(serde_json::from_slice(payload).expect("status json"));
                        }
                        _ => {}
                    }
                }
                Frame::Close(frame) => outcome.close_code = frame.map(|f| u16::from(f.code)),
                _ => {}
            }
        }
        outcome
    }

    async fn stdin(client: &mut Client, bytes: &[u8]) {
        let mut frame = vec![STDIN];
        frame.extend_from_slice(bytes);
        client.send(Frame::binary(frame)).await.expect("send stdin");
    }

    fn success() -> Value {
        json!({"metadata": {}, "status": "Success"})
    }

    fn exit_cause(status: &Value) -> Option<&str> {
        assert_eq!(status["status"], "Failure", "{status}");
        status["details"]["causes"][0]["message"].as_str()
    }

    /// A tar archive of `dir`'s contents, made by the host's tar.
    fn archive_of(dir: &Path) -> Vec<u8> {
        let output = StdCommand::new("tar")
            .arg("-c")
            .arg("-C")
            .arg(dir)
            .arg(".")
            .output()
            .expect("run tar");
        assert!(output.status.success());
        output.stdout
    }

    fn members(archive: &[u8]) -> Vec<String> {
        let mut child = StdCommand::new("tar")
            .args(["-t", "-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("run tar -t");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(archive)
            .expect("write the archive");
        let output = child.wait_with_output().expect("tar -t output");
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .map(str::to_string)
            .collect()
    }

    #[tokio::test]
    async fn tar_extracts_stdin_into_the_mount_after_a_v5_close() {
        let source = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir(source.path().join("sub")).expect("mkdir");
        std::fs::write(source.path().join("hello.txt"), "hello\n").expect("write");
        std::fs::write(source.path().join("sub/data.bin"), vec![7u8; 100_000]).expect("write");
        let archive = archive_of(source.path());
        let volume = tempfile::tempdir().expect("temp dir");

        let mut exec_target = target(
            &["tar", "-x", "-C", "/data"],
            vec![mount("/data", volume.path(), false)],
        );
        exec_target.stdin = true;
        let mut client = start_exec(V5, exec_target).await;
        // kube-rs may open with an empty frame; it must be harmless.
        stdin(&mut client, &[]).await;
        for chunk in archive.chunks(16 * 1024) {
            stdin(&mut client, chunk).await;
        }
        client
            .send(Frame::binary(vec![CLOSE, STDIN]))
            .await
            .expect("send close");
        let outcome = finish(&mut client).await;

        assert_eq!(outcome.status(), &success(), "stderr: {}", outcome.stderr());
        // client-go reports a close frame without the normal-closure code as an error.
        assert_eq!(outcome.close_code, Some(1000));
        assert_eq!(
            outcome.channels.first(),
            Some(&STDOUT),
            "the opening frame is on stdout"
        );
        assert_eq!(
            std::fs::read_to_string(volume.path().join("hello.txt")).expect("read"),
            "hello\n"
        );
        assert_eq!(
            std::fs::read(volume.path().join("sub/data.bin")).expect("read"),
            vec![7u8; 100_000]
        );
    }

    #[tokio::test]
    async fn tar_create_streams_the_mount_back() {
        let volume = tempfile::tempdir().expect("temp dir");
        std::fs::write(volume.path().join("hello.txt"), "hello\n").expect("write");
        let mut client = start_exec(
            V5,
            target(
                &["tar", "-c", "-C", "/data", "."],
                vec![mount("/data", volume.path(), true)],
            ),
        )
        .await;
        let outcome = finish(&mut client).await;
        assert_eq!(outcome.status(), &success(), "stderr: {}", outcome.stderr());
        assert!(members(&outcome.stdout).contains(&"./hello.txt".to_string()));
    }

    #[tokio::test]
    async fn a_path_outside_every_mount_exits_1() {
        let volume = tempfile::tempdir().expect("temp dir");
        let mut client = start_exec(
            V5,
            target(
                &["ls", "/outside"],
                vec![mount("/data", volume.path(), false)],
            ),
        )
        .await;
        let outcome = finish(&mut client).await;
        let status = outcome.status();
        assert_eq!(status["reason"], "NonZeroExitCode");
        assert_eq!(exit_cause(status), Some("1"));
        assert_eq!(status["details"]["causes"][0]["reason"], "ExitCode");
        assert_eq!(
            status["message"],
            "command terminated with non-zero exit code: error executing command [ls /outside], exit code 1"
        );
        assert!(
            outcome
                .stderr()
                .contains("/outside: No such file or directory"),
            "{}",
            outcome.stderr()
        );
    }

    #[tokio::test]
    async fn env_in_a_container_prints_the_containers_environment() {
        let mut client = start_exec(V5, target(&["env"], Vec::new())).await;
        let outcome = finish(&mut client).await;
        assert_eq!(outcome.status(), &success());
        let stdout = outcome.stdout();
        assert!(stdout.lines().any(|l| l == "QUEUE=datasets"), "{stdout}");
    }

    #[tokio::test]
    async fn an_unknown_command_fails_like_the_runtime() {
        let mut client = start_exec(V5, target(&["frobnicate", "now"], Vec::new())).await;
        let outcome = finish(&mut client).await;
        let status = outcome.status();
        assert_eq!(status["reason"], "InternalError");
        assert_eq!(status["code"], 500);
        let message = status["message"].as_str().expect("a message");
        assert!(
            message.starts_with("Internal error occurred: error executing command in container"),
            "{message}"
        );
        assert!(
            message.ends_with(
                "OCI runtime exec failed: exec failed: unable to start container process: \
                 exec: \"frobnicate\": executable file not found in $PATH: unknown"
            ),
            "{message}"
        );
    }

    #[tokio::test]
    async fn a_read_only_mount_refuses_mkdir() {
        let volume = tempfile::tempdir().expect("temp dir");
        let mut client = start_exec(
            V5,
            target(
                &["mkdir", "-p", "/data/new"],
                vec![mount("/data", volume.path(), true)],
            ),
        )
        .await;
        let outcome = finish(&mut client).await;
        assert_eq!(exit_cause(outcome.status()), Some("1"));
        assert!(
            outcome.stderr().contains("Read-only file system"),
            "{}",
            outcome.stderr()
        );
        assert!(!volume.path().join("new").exists());
    }

    /// Serves one exec session; the receiver yields once `exec` has returned.
    async fn start_exec_watched(
        protocol: &str,
        target: ExecTarget,
    ) -> (Client, tokio::sync::mpsc::Receiver<()>) {
        let (done_tx, done_rx) = tokio::sync::mpsc::channel(1);
        let client = connect(protocol, move |ws, p| async move {
            exec(ws, p, target).await;
            let _ = done_tx.send(()).await;
        })
        .await;
        (client, done_rx)
    }

    #[tokio::test]
    async fn with_v4_the_socket_closing_ends_stdin() {
        let source = tempfile::tempdir().expect("temp dir");
        std::fs::write(source.path().join("hello.txt"), "hello\n").expect("write");
        let archive = archive_of(source.path());
        let volume = tempfile::tempdir().expect("temp dir");
        let mut exec_target = target(
            &["tar", "-x", "-C", "/data"],
            vec![mount("/data", volume.path(), false)],
        );
        exec_target.stdin = true;
        let (mut client, mut done) = start_exec_watched(V4, exec_target).await;
        stdin(&mut client, &archive).await;
        // What kube-rs does with v4 at the end of stdin.
        client.close(None).await.expect("close");
        while let Some(Ok(_)) = client.next().await {}
        done.recv().await.expect("exec returned");
        assert_eq!(
            std::fs::read_to_string(volume.path().join("hello.txt")).expect("extracted"),
            "hello\n"
        );
    }

    #[tokio::test]
    async fn a_client_that_goes_away_ends_the_command() {
        let volume = tempfile::tempdir().expect("temp dir");
        std::fs::write(volume.path().join("log"), "line\n").expect("write");
        let (mut client, mut done) = start_exec_watched(
            V5,
            target(
                &["tail", "-f", "/data/log"],
                vec![mount("/data", volume.path(), false)],
            ),
        )
        .await;
        let mut stdout = Vec::new();
        while stdout != b"line\n" {
            match client.next().await.expect("a frame").expect("no error") {
                Frame::Binary(bytes) if bytes.first() == Some(&STDOUT) => {
                    stdout.extend_from_slice(&bytes[1..])
                }
                _ => {}
            }
        }
        drop(client);
        // `tail -f` never ends by itself: exec returns only because the process is killed.
        // The bound only keeps a regression from hanging the test run.
        tokio::time::timeout(Duration::from_secs(30), done.recv())
            .await
            .expect("the command outlived its client");
    }

    #[tokio::test]
    async fn v4_without_close_runs_commands_that_do_not_read_stdin() {
        let volume = tempfile::tempdir().expect("temp dir");
        std::fs::write(volume.path().join("hello.txt"), "hello\n").expect("write");
        let mut client = start_exec(
            V4,
            target(
                &["cat", "/data/hello.txt"],
                vec![mount("/data", volume.path(), false)],
            ),
        )
        .await;
        let outcome = finish(&mut client).await;
        assert_eq!(outcome.status(), &success(), "stderr: {}", outcome.stderr());
        assert_eq!(outcome.stdout(), "hello\n");
    }

    #[tokio::test]
    async fn find_prints_container_paths() {
        let volume = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir(volume.path().join("sub")).expect("mkdir");
        std::fs::write(volume.path().join("sub/a.txt"), "a").expect("write");
        let mut client = start_exec(
            V5,
            target(
                &["sh", "-c", "find /mnt/share -name '*.txt'"],
                vec![mount("/mnt/share", volume.path(), false)],
            ),
        )
        .await;
        let outcome = finish(&mut client).await;
        assert_eq!(outcome.status(), &success(), "stderr: {}", outcome.stderr());
        assert_eq!(outcome.stdout(), "/mnt/share/sub/a.txt\n");
    }

    #[tokio::test]
    async fn stdin_is_piped_through_and_a_nonzero_exit_is_reported() {
        let volume = tempfile::tempdir().expect("temp dir");
        let mut exec_target = target(&["wc", "-c"], vec![mount("/data", volume.path(), false)]);
        exec_target.stdin = true;
        let mut client = start_exec(V5, exec_target).await;
        stdin(&mut client, b"12345").await;
        client
            .send(Frame::Ping(Vec::new().into()))
            .await
            .expect("ping");
        client.send(Frame::text("ignored")).await.expect("text");
        client
            .send(Frame::binary(vec![4, b'{', b'}']))
            .await
            .expect("resize");
        client
            .send(Frame::binary(vec![CLOSE, STDIN]))
            .await
            .expect("close stdin");
        let outcome = finish(&mut client).await;
        assert_eq!(outcome.status(), &success(), "stderr: {}", outcome.stderr());
        assert_eq!(outcome.stdout().trim(), "5");

        let mut client = start_exec(
            V5,
            target(
                &["test", "-f", "/data/missing"],
                vec![mount("/data", volume.path(), false)],
            ),
        )
        .await;
        let outcome = finish(&mut client).await;
        assert_eq!(exit_cause(outcome.status()), Some("1"));
    }

    #[tokio::test]
    async fn redis_cli_talks_to_the_pods_redis() {
        let data = tempfile::tempdir().expect("temp dir");
        let processes = Processes::new(data.path().to_path_buf());
        let mut addr = None;
        // The bound only keeps a broken machine from hanging the test.
        for _ in 0..600 {
            match processes.redis("pod-uid") {
                RedisStatus::Ready(a) => {
                    addr = Some(a);
                    break;
                }
                RedisStatus::Starting => tokio::time::sleep(Duration::from_millis(50)).await,
                other => panic!("redis-server did not start: {other:?}"),
            }
        }
        let mut exec_target = target(&["redis-cli", "PING"], Vec::new());
        exec_target.redis = Some(addr.expect("redis-server ready"));
        let mut client = start_exec(V5, exec_target.clone()).await;
        let outcome = finish(&mut client).await;
        assert_eq!(outcome.status(), &success(), "stderr: {}", outcome.stderr());
        assert_eq!(outcome.stdout().trim(), "PONG");

        exec_target.command = ["sh", "-c", "redis-cli -h localhost -p 6379 RPUSH q 'a b'"]
            .map(String::from)
            .to_vec();
        let mut client = start_exec(V5, exec_target.clone()).await;
        assert_eq!(finish(&mut client).await.stdout().trim(), "1");
        exec_target.command = ["redis-cli", "LRANGE", "q", "0", "-1"]
            .map(String::from)
            .to_vec();
        let mut client = start_exec(V5, exec_target.clone()).await;
        assert_eq!(finish(&mut client).await.stdout().trim(), "a b");

        exec_target.redis = None;
        exec_target.command = vec!["redis-cli".into(), "PING".into()];
        let mut client = start_exec(V5, exec_target).await;
        let outcome = finish(&mut client).await;
        assert_eq!(exit_cause(outcome.status()), Some("127"));
        assert_eq!(outcome.stderr(), "redis-cli: not found\n");
    }

    /// A TCP server answering each connection by echoing what it reads, then closing after
    /// `ECHO_LIMIT` bytes.
    async fn echo_server() -> SocketAddr {
        const ECHO_LIMIT: usize = 5;
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        tokio::spawn(async move {
            while let Ok((mut tcp, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut seen = 0;
                    let mut buf = [0; 64];
                    while seen < ECHO_LIMIT {
                        match tcp.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => {
                                seen += n;
                                if tcp.write_all(&buf[..n]).await.is_err() {
                                    return;
                                }
                            }
                        }
                    }
                });
            }
        });
        addr
    }

    /// Reads port-forward frames until the server ends the session, by channel.
    async fn forward_frames(client: &mut Client) -> (Vec<Vec<u8>>, bool) {
        let mut frames = Vec::new();
        let mut closed = false;
        while let Some(frame) = client.next().await {
            match frame.expect("a clean websocket session") {
                Frame::Binary(bytes) => frames.push(bytes.to_vec()),
                Frame::Close(frame) => closed = frame.is_some_and(|f| u16::from(f.code) == 1000),
                _ => {}
            }
        }
        (frames, closed)
    }

    #[tokio::test]
    async fn portforward_bridges_to_the_pod_port() {
        let echo = echo_server().await;
        let mut client = connect(V4, move |ws, p| {
            portforward(ws, p, vec![(6379, Some(echo))])
        })
        .await;
        let [lo, hi] = 6379u16.to_le_bytes();
        // kube-rs requires exactly these first: one three-byte frame per channel.
        for channel in [0, 1] {
            match client.next().await.expect("a frame").expect("no error") {
                Frame::Binary(bytes) => assert_eq!(bytes.to_vec(), vec![channel, lo, hi]),
                other => panic!("unexpected {other:?}"),
            }
        }
        client
            .send(Frame::binary(b"\0hel".to_vec()))
            .await
            .expect("send");
        client
            .send(Frame::binary(b"\0lo".to_vec()))
            .await
            .expect("send");
        let (frames, closed) = forward_frames(&mut client).await;
        let echoed: Vec<u8> = frames
            .iter()
            .flat_map(|f| {
                assert_eq!(f[0], 0, "only data comes back");
                f[1..].to_vec()
            })
            .collect();
        assert_eq!(echoed, b"hello");
        assert!(closed, "the session closes once the pod side closes");
    }

    #[tokio::test]
    async fn portforward_reports_a_port_nothing_listens_on() {
        let echo = echo_server().await;
        let mut client = connect(V4, move |ws, p| {
            portforward(ws, p, vec![(6379, None), (8080, Some(echo))])
        })
        .await;
        let mut frames = Vec::new();
        // Four port frames and one error.
        while frames.len() < 5 {
            if let Frame::Binary(bytes) = client.next().await.expect("a frame").expect("no error") {
                frames.push(bytes.to_vec());
            }
        }
        let [lo, hi] = 6379u16.to_le_bytes();
        let [lo2, hi2] = 8080u16.to_le_bytes();
        assert_eq!(
            frames[..4],
            [
                vec![0, lo, hi],
                vec![1, lo, hi],
                vec![2, lo2, hi2],
                vec![3, lo2, hi2]
            ]
        );
        assert_eq!(frames[4][0], 1);
        let message = String::from_utf8_lossy(&frames[4][1..]).into_owned();
        assert!(
            message.starts_with("error forwarding port 6379 to pod"),
            "{message}"
        );
        assert!(message.ends_with("connection refused"), "{message}");

        // The other port still works.
        client
            .send(Frame::binary(b"\x02hello".to_vec()))
            .await
            .expect("send");
        let (rest, closed) = forward_frames(&mut client).await;
        let echoed: Vec<u8> = rest
            .iter()
            .filter(|f| f[0] == 2)
            .flat_map(|f| f[1..].to_vec())
            .collect();
        assert_eq!(echoed, b"hello");
        assert!(closed);
    }

    #[tokio::test]
    async fn portforward_with_only_a_dead_port_ends_after_the_error() {
        let mut client = connect(V5, move |ws, p| portforward(ws, p, vec![(9000, None)])).await;
        let (frames, closed) = forward_frames(&mut client).await;
        let [lo, hi] = 9000u16.to_le_bytes();
        assert_eq!(frames.len(), 3, "{frames:?}");
        assert_eq!(frames[..2], [vec![0, lo, hi], vec![1, lo, hi]]);
        assert!(String::from_utf8_lossy(&frames[2][1..]).contains("error forwarding port 9000"));
        assert!(closed);
    }

    #[test]
    fn host_paths_in_output_become_container_paths() {
        let view = View::new(&[
            mount("/data", Path::new("/h/data"), false),
            mount("/data/deep", Path::new("/h/data-deep"), false),
        ]);
        let mut rewriter = Rewriter::new(&view);
        let mut out = rewriter.push(b"/h/data/a\n/h/da");
        out.extend(rewriter.push(b"ta-deep/b\0/h/data"));
        assert_eq!(out, b"/data/a\n/data/deep/b\0");
        assert_eq!(rewriter.finish(), b"/data");
        let mut passthrough = Rewriter::passthrough();
        assert_eq!(passthrough.push(b"/h/data/a"), b"/h/data/a");
    }

    #[test]
    fn statuses_match_the_kubelet() {
        let command = vec!["sh".to_string(), "-c".to_string(), "exit 2".to_string()];
        assert_eq!(
            exit_status(&command, 0).to_string(),
            r#"{"metadata":{},"status":"Success"}"#
        );
        assert_eq!(
            exit_status(&command, 2).to_string(),
            r#"{"metadata":{},"status":"Failure","message":"command terminated with non-zero exit code: error executing command [sh -c exit 2], exit code 2","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"2"}]}}"#
        );
    }
}
