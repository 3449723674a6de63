//! The Kubernetes streaming protocols over WebSocket (`v5.channel.k8s.io`,
//! `v4.channel.k8s.io`): `exec` runs a command against the pod's volumes, `portforward`
//! connects to the process behind a pod port.
//!
//! An emulated pod has no filesystem of its own, only its volume mounts. `exec` therefore
//! runs real host programs from a short list with every path argument translated through
//! the mounts (refused outside them, and for writes in read-only ones), options that would
//! run other programs or reach the host refused, and host paths in what the program
//! prints mapped back to container paths. Every binary frame starts with its channel byte;
//! exec uses 0 stdin, 1 stdout, 2 stderr, 3 the final `metav1.Status`, 4 resize, and v5
//! adds `[255, channel]` to close a channel. Port-forward uses channels `2i` (data) and
//! `2i + 1` (error) for the `i`-th requested port.

use std::ffi::OsString;
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

use super::processes::redis_cli_program;
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

/// `sleep` longer than this is cut short: a sandbox session should not hang on it.
const SLEEP_CAP_SECS: f64 = 60.0;

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

/// Directories a container's `PATH` covers: `/bin/tar` is `tar`.
const BIN_DIRS: &[&str] = &[
    "/bin",
    "/usr/bin",
    "/usr/local/bin",
    "/sbin",
    "/usr/sbin",
    "/usr/local/sbin",
];

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

// ---------------------------------------------------------------------------------------
// Planning: what a command turns into once checked against the pod's mounts

/// A command checked against the pod's mounts.
#[derive(Debug, PartialEq)]
enum Plan {
    Run(Run),
    /// Ends without running anything, as the command itself would have.
    Exit {
        code: i32,
        stderr: String,
    },
    /// The program does not exist in the container.
    NotFound(String),
}

#[derive(Debug, PartialEq)]
struct Run {
    /// The program's name as the container knows it, for messages.
    name: String,
    program: OsString,
    args: Vec<OsString>,
    /// Whether stdout is text naming files (host paths are mapped back) or data (`cat`, `tar`).
    rewrite_stdout: bool,
}

/// Why a command is refused before it runs.
#[derive(Debug, PartialEq)]
enum Refusal {
    /// Outside every mount (or leaving them through a symlink): the container cannot see it.
    Missing(String),
    ReadOnly(String),
    /// Something the sandbox does not do, such as an option that would run another program.
    Unsupported(String),
}

/// The pod's mounts, normalized for lookups.
struct View {
    mounts: Vec<ViewMount>,
    /// The first mount's container path: relative paths resolve against it, as the
    /// command runs in its host directory.
    cwd: Option<String>,
}

struct ViewMount {
    path: String,
    host: PathBuf,
    /// The canonical host directory, when it exists.
    real: Option<PathBuf>,
    read_only: bool,
}

/// A container path translated to the host.
#[derive(Debug)]
struct Resolved {
    host: OsString,
    read_only: bool,
}

impl View {
    fn new(mounts: &[Mount]) -> View {
        let mounts: Vec<ViewMount> = mounts
            .iter()
            .map(|m| ViewMount {
                path: normalize(&format!("/{}", m.path)),
                host: m.host.clone(),
                real: m.host.canonicalize().ok(),
                read_only: m.read_only,
            })
            .collect();
        let cwd = mounts.first().map(|m| m.path.clone());
        View { mounts, cwd }
    }

    fn cwd(&self) -> Option<&str> {
        self.cwd.as_deref()
    }

    fn first_host(&self) -> Option<&Path> {
        self.mounts.first().map(|m| m.host.as_path())
    }

    /// Translates `arg` (absolute, or relative to `base`) to the host path behind it.
    fn resolve(&self, arg: &str, base: Option<&str>) -> Result<Resolved, Refusal> {
        let missing = || Refusal::Missing(arg.to_string());
        let absolute = if arg.starts_with('/') {
            arg.to_string()
        } else {
            format!("{}/{arg}", base.ok_or_else(missing)?)
        };
        let path = normalize(&absolute);
        let mount = self
            .mounts
            .iter()
            .filter(|m| within(&path, &m.path))
            .max_by_key(|m| m.path.len())
            .ok_or_else(missing)?;
        let rest = path[mount.path.len()..].trim_start_matches('/');
        let mut host = mount.host.clone();
        if !rest.is_empty() {
            host.push(rest);
        }
        let read_only = self.confine(mount, &host).ok_or_else(missing)?;
        let mut host = host.into_os_string();
        // `dir/.` and `dir/` mean something to cp and tar: keep them.
        if arg == "." || arg.ends_with("/.") {
            host.push("/.");
        } else if arg.ends_with('/') && !path.ends_with('/') {
            host.push("/");
        }
        Ok(Resolved { host, read_only })
    }

    /// Whether writing to `host` is refused, or `None` when a symlink leads it outside
    /// every mount (the container would not see what is there).
    fn confine(&self, mount: &ViewMount, host: &Path) -> Option<bool> {
        // A mount whose directory does not exist has nothing below it, symlinks included.
        if mount.real.is_none() {
            return Some(mount.read_only);
        }
        let existing = host.ancestors().find(|a| a.symlink_metadata().is_ok())?;
        let real = existing.canonicalize().ok()?;
        let landing = self
            .mounts
            .iter()
            .filter_map(|m| Some((m, m.real.as_ref()?)))
            .filter(|(_, r)| real.starts_with(r))
            .max_by_key(|(_, r)| r.as_os_str().len())?;
        Some(mount.read_only || landing.0.read_only)
    }

    fn writable(&self, arg: &str, base: Option<&str>) -> Result<(), Refusal> {
        if self.resolve(arg, base)?.read_only {
            Err(Refusal::ReadOnly(arg.to_string()))
        } else {
            Ok(())
        }
    }
}

/// `/a/./b//c/../d` → `/a/b/d`; `..` at the root stays at the root.
fn normalize(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    format!("/{}", parts.join("/"))
}

fn within(path: &str, mount: &str) -> bool {
    mount == "/"
        || path == mount
        || path
            .strip_prefix(mount)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// Checks a command against the pod's mounts.
fn plan(command: &[String], view: &View, redis: Option<SocketAddr>) -> Plan {
    plan_in(command, view, redis, None)
}

/// `shell`: the command comes from `sh -c`, which reports missing programs itself.
fn plan_in(
    command: &[String],
    view: &View,
    redis: Option<SocketAddr>,
    shell: Option<&str>,
) -> Plan {
    let Some((first, args)) = command.split_first() else {
        return Plan::NotFound(String::new());
    };
    let not_found = |name: &str| match shell {
        Some("bash") => Plan::Exit {
            code: 127,
            stderr: format!("bash: line 1: {name}: command not found\n"),
        },
        Some(sh) => Plan::Exit {
            code: 127,
            stderr: format!("{sh}: 1: {name}: not found\n"),
        },
        None => Plan::NotFound(name.to_string()),
    };
    let name = match first.rsplit_once('/') {
        Some((dir, base)) if BIN_DIRS.contains(&dir) => base,
        Some(_) => return not_found(first),
        None => first.as_str(),
    };
    let Some(kind) = kind_of(name) else {
        return not_found(first);
    };
    let translated = match kind {
        Kind::Shell => return plan_shell(name, args, view, redis),
        Kind::RedisCli => match redis {
            Some(addr) => redis_cli_args(args, addr, view),
            None if shell.is_some() => return not_found(first),
            None => {
                return Plan::Exit {
                    code: 127,
                    stderr: "redis-cli: not found\n".into(),
                }
            }
        },
        Kind::Verbatim => Ok(args.iter().map(OsString::from).collect()),
        Kind::Sleep => Ok(capped_sleep(args)),
        Kind::Env => env_args(args),
        Kind::Test => args
            .iter()
            .map(|a| {
                if a.starts_with('/') {
                    view.resolve(a, None).map(|r| r.host)
                } else {
                    Ok(a.into())
                }
            })
            .collect(),
        Kind::Find => find_args(args, view),
        Kind::Tar => tar_args(args, view),
        Kind::Files(spec) => file_args(args, spec, view),
    };
    match translated {
        Ok(args) => Plan::Run(Run {
            name: name.to_string(),
            program: match kind {
                Kind::RedisCli => redis_cli_program().into_os_string(),
                _ => name.into(),
            },
            args,
            rewrite_stdout: kind.rewrites_stdout(),
        }),
        Err(Refusal::Missing(path)) => Plan::Exit {
            code: 1,
            stderr: format!("{name}: {path}: No such file or directory\n"),
        },
        Err(Refusal::ReadOnly(path)) => Plan::Exit {
            code: 1,
            stderr: format!("{name}: {path}: Read-only file system\n"),
        },
        Err(Refusal::Unsupported(why)) => Plan::Exit {
            code: 126,
            stderr: format!("{name}: {why}\n"),
        },
    }
}

/// How a supported program's arguments are checked and translated.
#[derive(Clone, Copy)]
enum Kind {
    /// No argument is a path.
    Verbatim,
    Sleep,
    Env,
    Test,
    Find,
    Tar,
    RedisCli,
    Shell,
    /// Operands are files; options follow the spec.
    Files(&'static Spec),
}

impl Kind {
    fn rewrites_stdout(self) -> bool {
        match self {
            Kind::Files(spec) => spec.rewrite_stdout,
            Kind::Find | Kind::Test => true,
            _ => false,
        }
    }
}

fn kind_of(name: &str) -> Option<Kind> {
    Some(match name {
        "echo" | "true" => Kind::Verbatim,
        "sleep" => Kind::Sleep,
        "env" => Kind::Env,
        "test" => Kind::Test,
        "find" => Kind::Find,
        "tar" => Kind::Tar,
        "redis-cli" => Kind::RedisCli,
        "sh" | "bash" => Kind::Shell,
        "ls" => Kind::Files(&LS),
        "cat" => Kind::Files(&CAT),
        "mkdir" => Kind::Files(&MKDIR),
        "rm" => Kind::Files(&RM),
        "cp" => Kind::Files(&CP),
        "mv" => Kind::Files(&MV),
        "du" => Kind::Files(&DU),
        "stat" => Kind::Files(&STAT),
        "sha256sum" | "md5sum" => Kind::Files(&CHECKSUM),
        "wc" => Kind::Files(&WC),
        "head" => Kind::Files(&HEAD),
        "tail" => Kind::Files(&TAIL),
        "touch" => Kind::Files(&TOUCH),
        _ => return None,
    })
}

/// The options of a program whose operands are files.
struct Spec {
    /// Short options taking a value (`-n 5`, `-n5`).
    short_values: &'static str,
    /// Long options taking a value (`--lines 5`, `--lines=5`).
    long_values: &'static [&'static str],
    /// Options (short or long) whose value is a path.
    path_options: &'static [&'static str],
    /// Options (short or long) that would read names from a file or reach the host.
    refused: &'static [&'static str],
    writes: Writes,
    rewrite_stdout: bool,
}

/// Which paths a program writes to, checked against read-only mounts.
#[derive(Clone, Copy)]
enum Writes {
    Nothing,
    Operands,
    /// The destination: the `-t` directory or the last operand (`cp`).
    Destination,
    /// The destination and every source (`mv`).
    DestinationAndSources,
}

const NO_OPTIONS: Spec = Spec {
    short_values: "",
    long_values: &[],
    path_options: &[],
    refused: &[],
    writes: Writes::Nothing,
    rewrite_stdout: true,
};
const LS: Spec = Spec {
    short_values: "ITw",
    long_values: &[
        "ignore",
        "width",
        "tabsize",
        "hide",
        "block-size",
        "format",
        "quoting-style",
        "sort",
        "time",
        "time-style",
        "indicator-style",
    ],
    ..NO_OPTIONS
};
const CAT: Spec = Spec {
    rewrite_stdout: false,
    ..NO_OPTIONS
};
const MKDIR: Spec = Spec {
    short_values: "m",
    long_values: &["mode"],
    writes: Writes::Operands,
    ..NO_OPTIONS
};
const RM: Spec = Spec {
    writes: Writes::Operands,
    ..NO_OPTIONS
};
const CP: Spec = Spec {
    short_values: "tS",
    long_values: &["target-directory", "suffix"],
    path_options: &["t", "target-directory"],
    writes: Writes::Destination,
    ..NO_OPTIONS
};
const MV: Spec = Spec {
    writes: Writes::DestinationAndSources,
    ..CP
};
const DU: Spec = Spec {
    short_values: "dBtX",
    long_values: &[
        "max-depth",
        "block-size",
        "threshold",
        "exclude-from",
        "exclude",
        "time-style",
    ],
    path_options: &["X", "exclude-from"],
    refused: &["files0-from"],
    ..NO_OPTIONS
};
const STAT: Spec = Spec {
    short_values: "c",
    long_values: &["format", "printf"],
    ..NO_OPTIONS
};
/// `--check` would open the names listed in a file, which are not translated.
const CHECKSUM: Spec = Spec {
    refused: &["c", "check"],
    ..NO_OPTIONS
};
const WC: Spec = Spec {
    refused: &["files0-from"],
    ..NO_OPTIONS
};
const HEAD: Spec = Spec {
    short_values: "nc",
    long_values: &["lines", "bytes"],
    rewrite_stdout: false,
    ..NO_OPTIONS
};
const TAIL: Spec = Spec {
    short_values: "ncs",
    long_values: &[
        "lines",
        "bytes",
        "sleep-interval",
        "pid",
        "max-unchanged-stats",
    ],
    ..HEAD
};
const TOUCH: Spec = Spec {
    short_values: "drt",
    long_values: &["date", "reference"],
    path_options: &["r", "reference"],
    writes: Writes::Operands,
    ..NO_OPTIONS
};

/// Whether `--given` names the long option `full` (getopt accepts unambiguous prefixes).
fn long_is(given: &str, full: &str) -> bool {
    given == full || (given.len() >= 3 && full.starts_with(given))
}

fn listed_long(name: &str, list: &[&str]) -> bool {
    list.iter().any(|o| o.len() > 1 && long_is(name, o))
}

fn listed_short(c: char, list: &[&str]) -> bool {
    list.iter().any(|o| o.len() == 1 && o.starts_with(c))
}

fn unsupported_option(option: &str) -> Refusal {
    Refusal::Unsupported(format!("option '{option}' is not supported in the sandbox"))
}

/// Translates the arguments of a program whose operands are files, and checks its writes.
fn file_args(args: &[String], spec: &Spec, view: &View) -> Result<Vec<OsString>, Refusal> {
    let cwd = view.cwd();
    let mut out: Vec<OsString> = Vec::new();
    let mut operands: Vec<&str> = Vec::new();
    let mut destination: Option<&str> = None;
    let mut only_operands = false;
    let mut i = 0;
    while let Some(arg) = args.get(i) {
        i += 1;
        if only_operands || arg == "-" || !arg.starts_with('-') {
            if arg == "-" {
                out.push(arg.into());
            } else {
                out.push(view.resolve(arg, cwd)?.host);
                operands.push(arg);
            }
            continue;
        }
        if arg == "--" {
            only_operands = true;
            out.push(arg.into());
            continue;
        }
        if let Some(long) = arg.strip_prefix("--") {
            let (name, inline) = match long.split_once('=') {
                Some((name, value)) => (name, Some(value)),
                None => (long, None),
            };
            if listed_long(name, spec.refused) {
                return Err(unsupported_option(&format!("--{name}")));
            }
            let value = match inline {
                Some(v) => Some(v),
                None if listed_long(name, spec.long_values) => {
                    i += 1;
                    args.get(i - 1).map(String::as_str)
                }
                None => None,
            };
            match value {
                Some(v) if listed_long(name, spec.path_options) => {
                    let mut option = OsString::from(format!("--{name}="));
                    option.push(view.resolve(v, cwd)?.host);
                    out.push(option);
                    destination = Some(v);
                }
                Some(v) => out.push(format!("--{name}={v}").into()),
                None => out.push(arg.into()),
            }
            continue;
        }
        let cluster = &arg[1..];
        if cluster.bytes().all(|b| b.is_ascii_digit()) {
            // `head -5`: a count, not options.
            out.push(arg.into());
            continue;
        }
        for (pos, c) in cluster.char_indices() {
            if listed_short(c, spec.refused) {
                return Err(unsupported_option(&format!("-{c}")));
            }
            out.push(format!("-{c}").into());
            if spec.short_values.contains(c) {
                let attached = &cluster[pos + c.len_utf8()..];
                let value = if attached.is_empty() {
                    i += 1;
                    args.get(i - 1).map(String::as_str)
                } else {
                    Some(attached)
                };
                match value {
                    Some(v) if listed_short(c, spec.path_options) => {
                        out.push(view.resolve(v, cwd)?.host);
                        destination = Some(v);
                    }
                    Some(v) => out.push(v.into()),
                    None => {}
                }
                break;
            }
        }
    }
    match spec.writes {
        Writes::Nothing => {}
        Writes::Operands => operands.iter().try_for_each(|p| view.writable(p, cwd))?,
        Writes::Destination | Writes::DestinationAndSources => {
            let sources = match destination {
                Some(_) => &operands[..],
                None => {
                    destination = operands.last().copied();
                    &operands[..operands.len().saturating_sub(1)]
                }
            };
            if let Some(d) = destination {
                view.writable(d, cwd)?;
            }
            if matches!(spec.writes, Writes::DestinationAndSources) {
                sources.iter().try_for_each(|p| view.writable(p, cwd))?;
            }
        }
    }
    Ok(out)
}

/// `find`: start paths, then an expression whose file arguments and absolute patterns are
/// translated; actions that run programs or write files elsewhere are refused.
fn find_args(args: &[String], view: &View) -> Result<Vec<OsString>, Refusal> {
    const REFUSED: &[&str] = &[
        "-exec",
        "-execdir",
        "-ok",
        "-okdir",
        "-fprint",
        "-fprint0",
        "-fprintf",
        "-fls",
        "-files0-from",
    ];
    const FILE_TESTS: &[&str] = &["-newer", "-anewer", "-cnewer", "-samefile"];
    let cwd = view.cwd();
    let mut out: Vec<OsString> = Vec::new();
    let mut i = 0;
    // Leading options: -H -L -P, -D debugopts, -O3.
    while let Some(arg) = args.get(i) {
        match arg.as_str() {
            "-H" | "-L" | "-P" => out.push(arg.into()),
            "-D" => {
                out.push(arg.into());
                i += 1;
                if let Some(v) = args.get(i) {
                    out.push(v.into());
                }
            }
            a if a.starts_with("-O") => out.push(arg.into()),
            _ => break,
        }
        i += 1;
    }
    let mut starts: Vec<&str> = Vec::new();
    while let Some(arg) = args.get(i) {
        if (arg.starts_with('-') && arg.len() > 1) || ["(", ")", "!", ","].contains(&arg.as_str()) {
            break;
        }
        out.push(view.resolve(arg, cwd)?.host);
        starts.push(arg);
        i += 1;
    }
    let mut deletes = false;
    let mut file_value = false;
    for arg in &args[i..] {
        if REFUSED.contains(&arg.as_str()) {
            return Err(unsupported_option(arg));
        }
        deletes |= arg == "-delete";
        if file_value || arg.starts_with('/') {
            out.push(view.resolve(arg, cwd)?.host);
            file_value = false;
        } else {
            // `-newerXY` compares with a file unless Y is `t` (a date).
            file_value = FILE_TESTS.contains(&arg.as_str())
                || arg
                    .strip_prefix("-newer")
                    .is_some_and(|xy| xy.len() == 2 && !xy.ends_with('t'));
            out.push(arg.into());
        }
    }
    if deletes {
        if starts.is_empty() {
            view.writable(".", cwd)?;
        }
        starts.iter().try_for_each(|p| view.writable(p, cwd))?;
    }
    Ok(out)
}

const TAR_SHORT_VALUES: &str = "fCTXgKNbLVHIF";
/// Options that run other programs, or write outside the target directory.
const TAR_SHORT_REFUSED: &str = "IFP";
const TAR_LONG_REFUSED: &[&str] = &[
    "use-compress-program",
    "to-command",
    "info-script",
    "new-volume-script",
    "rsh-command",
    "rmt-command",
    "checkpoint-action",
    "absolute-names",
];
const TAR_LONG_VALUES: &[&str] = &[
    "file",
    "directory",
    "files-from",
    "exclude-from",
    "listed-incremental",
    "index-file",
    "volno-file",
    "exclude",
    "transform",
    "xform",
    "owner",
    "group",
    "mode",
    "mtime",
    "newer",
    "after-date",
    "newer-mtime",
    "format",
    "blocking-factor",
    "record-size",
    "strip-components",
    "label",
    "suffix",
    "starting-file",
    "tape-length",
    "sparse-version",
    "exclude-tag",
    "exclude-tag-under",
    "exclude-tag-all",
    "add-file",
    "hole-detection",
    "quoting-style",
    "quote-chars",
    "no-quote-chars",
    "level",
    "owner-map",
    "group-map",
    "pax-option",
    "warning",
];
/// Long options naming a file, relative to where tar starts.
const TAR_LONG_PATHS: &[&str] = &[
    "files-from",
    "exclude-from",
    "listed-incremental",
    "index-file",
    "volno-file",
    "owner-map",
    "group-map",
];
const TAR_LONG_MODES: &[(&str, char)] = &[
    ("create", 'c'),
    ("extract", 'x'),
    ("get", 'x'),
    ("list", 't'),
    ("append", 'r'),
    ("update", 'u'),
    ("diff", 'd'),
    ("compare", 'd'),
    ("delete", 'D'),
    ("concatenate", 'A'),
    ("catenate", 'A'),
];

/// One argument of a translated tar command line; operands wait until the mode is known.
enum TarPiece {
    Done(OsString),
    Operand { text: String, dir: Option<String> },
}

/// Old-style `tar xzf file` → `tar -x -z -f file`.
fn expand_old_tar(args: &[String]) -> Vec<String> {
    let Some((first, rest)) = args.split_first() else {
        return Vec::new();
    };
    if first.starts_with('-') || first.is_empty() {
        return args.to_vec();
    }
    let mut rest = rest.iter();
    let mut out = Vec::new();
    for c in first.chars() {
        out.push(format!("-{c}"));
        if TAR_SHORT_VALUES.contains(c) {
            out.extend(rest.next().cloned());
        }
    }
    out.extend(rest.cloned());
    out
}

/// A tar command line being translated; operands wait until the mode is known.
struct TarLine<'a> {
    view: &'a View,
    /// The container directory relative operands and `-C`s are taken from.
    dir: Option<String>,
    pieces: Vec<TarPiece>,
    mode: Option<char>,
    archive: Option<String>,
    /// Every `-C` directory, as container paths.
    dirs: Vec<String>,
    remove_files: bool,
}

impl TarLine<'_> {
    /// Applies one option (`name` without dashes) with its value, if any.
    fn option(&mut self, name: &str, long: bool, value: Option<&str>) -> Result<(), Refusal> {
        let shown = if long {
            format!("--{name}")
        } else {
            format!("-{name}")
        };
        let is = |short: &str, full: &str| {
            if long {
                long_is(name, full)
            } else {
                name == short
            }
        };
        if (long && listed_long(name, TAR_LONG_REFUSED))
            || (!long && TAR_SHORT_REFUSED.contains(name))
        {
            return Err(unsupported_option(&shown));
        }
        if long {
            if let Some(&(_, mode)) = TAR_LONG_MODES.iter().find(|(full, _)| long_is(name, full)) {
                self.mode = Some(mode);
            }
            self.remove_files |= name == "remove-files";
        } else if "cxtrudA".contains(name) {
            self.mode = name.chars().next();
        }
        let Some(value) = value else {
            self.pieces.push(TarPiece::Done(shown.into()));
            return Ok(());
        };
        let cwd = self.view.cwd();
        let translated = if is("C", "directory") {
            let resolved = self.view.resolve(value, self.dir.as_deref())?;
            let base = self.dir.as_deref().unwrap_or("/");
            let next = normalize(&if value.starts_with('/') {
                value.to_string()
            } else {
                format!("{base}/{value}")
            });
            self.dirs.push(next.clone());
            self.dir = Some(next);
            resolved.host
        } else if is("f", "file") {
            self.archive = Some(value.to_string());
            if value == "-" {
                value.into()
            } else {
                self.view.resolve(value, cwd)?.host
            }
        } else if (!long && "TXg".contains(name)) || (long && listed_long(name, TAR_LONG_PATHS)) {
            self.view.resolve(value, cwd)?.host
        } else {
            value.into()
        };
        if long {
            let mut joined = OsString::from(format!("{shown}="));
            joined.push(translated);
            self.pieces.push(TarPiece::Done(joined));
        } else {
            self.pieces.push(TarPiece::Done(shown.into()));
            self.pieces.push(TarPiece::Done(translated));
        }
        Ok(())
    }
}

/// `tar`: `-C` directories, the archive and list files are translated; members named on
/// the command line are translated when creating (absolute ones with a transform that
/// stores them under their container names), left alone otherwise.
fn tar_args(args: &[String], view: &View) -> Result<Vec<OsString>, Refusal> {
    let args = expand_old_tar(args);
    let cwd = view.cwd();
    let mut line = TarLine {
        view,
        dir: cwd.map(str::to_string),
        pieces: Vec::new(),
        mode: None,
        archive: None,
        dirs: Vec::new(),
        remove_files: false,
    };
    let mut only_operands = false;
    let mut i = 0;
    while let Some(arg) = args.get(i) {
        i += 1;
        if only_operands || arg == "-" || !arg.starts_with('-') {
            line.pieces.push(TarPiece::Operand {
                text: arg.clone(),
                dir: line.dir.clone(),
            });
        } else if arg == "--" {
            only_operands = true;
            line.pieces.push(TarPiece::Done(arg.into()));
        } else if let Some(long) = arg.strip_prefix("--") {
            let (name, value) = match long.split_once('=') {
                Some((name, value)) => (name, Some(value)),
                None if listed_long(long, TAR_LONG_VALUES) => {
                    i += 1;
                    (long, args.get(i - 1).map(String::as_str))
                }
                None => (long, None),
            };
            line.option(name, true, value)?;
        } else {
            let cluster = &arg[1..];
            for (pos, c) in cluster.char_indices() {
                let name = &cluster[pos..pos + c.len_utf8()];
                if TAR_SHORT_VALUES.contains(c) {
                    let attached = &cluster[pos + c.len_utf8()..];
                    let value = if attached.is_empty() {
                        i += 1;
                        args.get(i - 1).map(String::as_str)
                    } else {
                        Some(attached)
                    };
                    line.option(name, false, value)?;
                    break;
                }
                line.option(name, false, None)?;
            }
        }
    }

    let creating = matches!(line.mode, Some('c' | 'r' | 'u'));
    let mut out: Vec<OsString> = Vec::new();
    let mut transforms: Vec<OsString> = Vec::new();
    let mut absolute: Vec<String> = Vec::new();
    for piece in line.pieces {
        match piece {
            TarPiece::Done(arg) => out.push(arg),
            TarPiece::Operand { text, .. } if creating && text.starts_with('/') => {
                let resolved = view.resolve(&text, None)?;
                transforms.extend(member_transform(&resolved.host, &normalize(&text)));
                out.push(resolved.host);
                absolute.push(text);
            }
            TarPiece::Operand { text, dir } => {
                if creating && text.split('/').any(|part| part == "..") {
                    view.resolve(&text, dir.as_deref())?;
                }
                out.push(text.into());
            }
        }
    }
    if !transforms.is_empty() {
        transforms.push("--show-transformed-names".into());
        transforms.extend(out);
        out = transforms;
    }

    if line.mode == Some('x') || line.remove_files {
        if line.dirs.is_empty() && cwd.is_some() {
            view.writable(".", cwd)?;
        }
        line.dirs.iter().try_for_each(|d| view.writable(d, None))?;
    }
    if line.remove_files {
        absolute.iter().try_for_each(|p| view.writable(p, None))?;
    }
    let writes_archive = matches!(line.mode, Some('c' | 'r' | 'u' | 'A' | 'D'));
    if let Some(file) = line.archive.filter(|f| writes_archive && f != "-") {
        view.writable(&file, cwd)?;
    }
    Ok(out)
}

/// A `--transform` storing members under `host` with their container names (tar strips
/// the leading `/` first); none for a host path that is not UTF-8.
fn member_transform(host: &std::ffi::OsStr, container: &str) -> Option<OsString> {
    let host = host
        .to_str()?
        .trim_start_matches('/')
        .trim_end_matches(['/', '.']);
    let container = container.trim_start_matches('/');
    let escape = |s: &str, special: &str| {
        s.chars().fold(String::new(), |mut out, c| {
            if special.contains(c) {
                out.push('\\');
            }
            out.push(c);
            out
        })
    };
    Some(
        format!(
            "--transform=s|^{}|{}|",
            escape(host, "\\.[]*^$|"),
            escape(container, "\\&|")
        )
        .into(),
    )
}

/// `redis-cli` always talks to the pod's own server: `-h`/`-p` are replaced, and options
/// reaching elsewhere or writing host files are refused.
fn redis_cli_args(
    args: &[String],
    addr: SocketAddr,
    view: &View,
) -> Result<Vec<OsString>, Refusal> {
    const VALUES: &[&str] = &[
        "-a",
        "-r",
        "-i",
        "-n",
        "-d",
        "-D",
        "--user",
        "--pass",
        "--pipe-timeout",
        "--memkeys-samples",
        "--pattern",
        "--quoted-pattern",
        "--count",
        "--intrinsic-latency",
        "--lru-test",
        "--cluster",
    ];
    const REFUSED: &[&str] = &[
        "-s",
        "-u",
        "--rdb",
        "--functions-rdb",
        "--tls",
        "--cacert",
        "--cacertdir",
        "--cert",
        "--key",
        "--sni",
    ];
    let mut out: Vec<OsString> = vec![
        "-h".into(),
        addr.ip().to_string().into(),
        "-p".into(),
        addr.port().to_string().into(),
    ];
    let mut i = 0;
    while let Some(arg) = args.get(i) {
        i += 1;
        match arg.as_str() {
            "-h" | "-p" => i += 1,
            a if REFUSED.contains(&a) => return Err(unsupported_option(a)),
            "--eval" => {
                out.push(arg.into());
                if let Some(script) = args.get(i) {
                    out.push(view.resolve(script, view.cwd())?.host);
                }
                i += 1;
            }
            a if VALUES.contains(&a) => {
                out.push(arg.into());
                out.extend(args.get(i).map(OsString::from));
                i += 1;
            }
            a if a.starts_with('-') => out.push(arg.into()),
            // The command and its arguments, which may well look like options.
            _ => {
                out.extend(args[i - 1..].iter().map(OsString::from));
                break;
            }
        }
    }
    Ok(out)
}

/// `sleep` for at most a minute.
fn capped_sleep(args: &[String]) -> Vec<OsString> {
    let seconds = |arg: &String| -> Option<f64> {
        let (number, unit) = match arg.char_indices().last()? {
            (i, 's') => (&arg[..i], 1.0),
            (i, 'm') => (&arg[..i], 60.0),
            (i, 'h') => (&arg[..i], 3600.0),
            (i, 'd') => (&arg[..i], 86400.0),
            _ => (arg.as_str(), 1.0),
        };
        let value: f64 = number.parse().ok()?;
        (value.is_finite() && value >= 0.0).then_some(value * unit)
    };
    if args.iter().any(|a| a.starts_with('-')) {
        // `--help`, or a negative time sleep rejects itself.
        return args.iter().map(OsString::from).collect();
    }
    match args.iter().map(seconds).sum::<Option<f64>>() {
        Some(total) if total <= SLEEP_CAP_SECS => args.iter().map(OsString::from).collect(),
        _ => vec![OsString::from(format!("{SLEEP_CAP_SECS}"))],
    }
}

/// `env` prints the environment; running a command through it is not offered.
fn env_args(args: &[String]) -> Result<Vec<OsString>, Refusal> {
    if args.iter().all(|a| a == "-0" || a == "--null") {
        Ok(args.iter().map(OsString::from).collect())
    } else {
        Err(Refusal::Unsupported(
            "the sandbox runs env without a command only".into(),
        ))
    }
}

/// `sh -c '<command>'`: a single simple command is run as if exec'd directly.
fn plan_shell(sh: &str, args: &[String], view: &View, redis: Option<SocketAddr>) -> Plan {
    let single_only = || {
        Plan::Exit {
        code: 126,
        stderr: format!(
            "{sh}: the sandbox runs single commands only: pipes, lists, redirections, expansions and globs are not supported\n"
        ),
    }
    };
    let mut rest = args.iter();
    let script = loop {
        match rest.next().map(String::as_str) {
            Some("-o") => {
                rest.next();
            }
            Some(flags) if flags.len() > 1 && flags.starts_with('-') => {
                if !flags[1..].chars().all(|c| "ceilux".contains(c)) {
                    return single_only();
                }
                if flags.contains('c') {
                    match rest.next() {
                        Some(script) => break script,
                        None => {
                            return Plan::Exit {
                                code: 2,
                                stderr: format!("{sh}: -c: option requires an argument\n"),
                            };
                        }
                    }
                }
            }
            // A script file, or a script on stdin.
            _ => return single_only(),
        }
    };
    match split_script(script) {
        Ok(words) => {
            let words = match words.split_first() {
                Some((first, rest)) if first == "exec" => rest.to_vec(),
                _ => words,
            };
            if words.is_empty() {
                return Plan::Exit {
                    code: 0,
                    stderr: String::new(),
                };
            }
            plan_in(&words, view, redis, Some(sh))
        }
        Err(ScriptError::Unsupported) => single_only(),
        Err(ScriptError::Unterminated) => Plan::Exit {
            code: 2,
            stderr: format!("{sh}: 1: Syntax error: Unterminated quoted string\n"),
        },
    }
}

#[derive(Debug, PartialEq)]
enum ScriptError {
    /// Pipes, lists, redirections, expansions, globs, assignments.
    Unsupported,
    Unterminated,
}

/// Splits a shell script that is one simple command into its words.
fn split_script(script: &str) -> Result<Vec<String>, ScriptError> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = script.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '\n' => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
                // A second line is a second command.
                if chars.clone().any(|c| !c.is_whitespace()) {
                    return Err(ScriptError::Unsupported);
                }
            }
            '#' if !in_word => break,
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => word.push(c),
                        None => return Err(ScriptError::Unterminated),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('$' | '`') => return Err(ScriptError::Unsupported),
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\' | '$' | '`')) => word.push(c),
                            Some('\n') => {}
                            Some(c) => {
                                word.push('\\');
                                word.push(c);
                            }
                            None => return Err(ScriptError::Unterminated),
                        },
                        Some(c) => word.push(c),
                        None => return Err(ScriptError::Unterminated),
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next() {
                    Some('\n') | None => {}
                    Some(c) => word.push(c),
                }
            }
            '|' | '&' | ';' | '<' | '>' | '(' | ')' | '`' | '$' | '*' | '?' | '[' => {
                return Err(ScriptError::Unsupported);
            }
            '~' if !in_word => return Err(ScriptError::Unsupported),
            c => {
                if c == '='
                    && words.is_empty()
                    && !word.is_empty()
                    && word.chars().all(|c| c == '_' || c.is_ascii_alphanumeric())
                {
                    // `NAME=value command`: an assignment.
                    return Err(ScriptError::Unsupported);
                }
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    Ok(words)
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

    #[derive(Debug, PartialEq)]
    enum Expect {
        Run(&'static str, Vec<&'static str>),
        Exit(i32, &'static str),
        NotFound(&'static str),
    }

    fn summarize(plan: Plan) -> String {
        match plan {
            Plan::Run(run) => {
                let args: Vec<String> = run
                    .args
                    .iter()
                    .map(|a| a.to_string_lossy().into_owned())
                    .collect();
                let program = Path::new(&run.program)
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned());
                format!("run {} {}", program.unwrap_or_default(), args.join(" "))
            }
            Plan::Exit { code, stderr } => format!("exit {code} {stderr}"),
            Plan::NotFound(name) => format!("not found {name}"),
        }
    }

    fn render(expect: &Expect) -> String {
        match expect {
            Expect::Run(program, args) => format!("run {program} {}", args.join(" ")),
            Expect::Exit(code, stderr) => format!("exit {code} {stderr}"),
            Expect::NotFound(name) => format!("not found {name}"),
        }
    }

    #[test]
    fn commands_are_translated_through_the_mounts() {
        use Expect::*;
        // Host directories that do not exist: translation is lexical, and nothing below
        // a missing directory can be a symlink.
        let view = View::new(&[
            mount("/data", Path::new("/h/data"), false),
            mount("/mnt/ro/", Path::new("/h/ro"), true),
            mount("/data/nested", Path::new("/h/nested"), false),
        ]);
        let redis: Option<SocketAddr> = Some(SocketAddr::from(([127, 0, 0, 1], 7000)));
        let cases: Vec<(&[&str], Expect)> = vec![
            (&["ls", "-la", "/data/x"], Run("ls", vec!["-l", "-a", "/h/data/x"])),
            (&["/bin/ls", "/data/nested/y"], Run("ls", vec!["/h/nested/y"])),
            (&["ls", "/outside"], Exit(1, "ls: /outside: No such file or directory\n")),
            (&["cat", "/data/../etc/passwd"], Exit(1, "cat: /data/../etc/passwd: No such file or directory\n")),
            (&["cat", "x", "-"], Run("cat", vec!["/h/data/x", "-"])),
            (&["cat", "../../etc/passwd"], Exit(1, "cat: ../../etc/passwd: No such file or directory\n")),
            (&["head", "-5", "/data/x"], Run("head", vec!["-5", "/h/data/x"])),
            (&["head", "-n", "3", "/data/x"], Run("head", vec!["-n", "3", "/h/data/x"])),
            (&["tail", "--lines", "3", "/data/x"], Run("tail", vec!["--lines=3", "/h/data/x"])),
            (&["mkdir", "-pm755", "/data/x"], Run("mkdir", vec!["-p", "-m", "755", "/h/data/x"])),
            (&["mkdir", "-p", "/mnt/ro/x"], Exit(1, "mkdir: /mnt/ro/x: Read-only file system\n")),
            (&["rm", "-rf", "/data/x"], Run("rm", vec!["-r", "-f", "/h/data/x"])),
            (&["rm", "/mnt/ro/x"], Exit(1, "rm: /mnt/ro/x: Read-only file system\n")),
            (&["touch", "-r", "/mnt/ro/a", "/data/b"], Run("touch", vec!["-r", "/h/ro/a", "/h/data/b"])),
            (&["cp", "-r", "/mnt/ro/a", "/data/b/"], Run("cp", vec!["-r", "/h/ro/a", "/h/data/b/"])),
            (&["cp", "/data/a/.", "/data/b"], Run("cp", vec!["/h/data/a/.", "/h/data/b"])),
            (&["cp", "/data/a", "/mnt/ro/b"], Exit(1, "cp: /mnt/ro/b: Read-only file system\n")),
            (&["cp", "-t", "/mnt/ro", "/data/a"], Exit(1, "cp: /mnt/ro: Read-only file system\n")),
            (&["cp", "--target-directory=/data/d", "/mnt/ro/a"], Run("cp", vec!["--target-directory=/h/data/d", "/h/ro/a"])),
            (&["mv", "/mnt/ro/a", "/data/b"], Exit(1, "mv: /mnt/ro/a: Read-only file system\n")),
            (&["mv", "/data/a", "/data/b"], Run("mv", vec!["/h/data/a", "/h/data/b"])),
            (&["du", "-sh", "/mnt/ro"], Run("du", vec!["-s", "-h", "/h/ro"])),
            (&["sha256sum", "-c", "/data/SUMS"], Exit(126, "sha256sum: option '-c' is not supported in the sandbox\n")),
            (&["wc", "--files0-from=/data/l"], Exit(126, "wc: option '--files0-from' is not supported in the sandbox\n")),
            (&["stat", "-c", "%s", "/data/x"], Run("stat", vec!["-c", "%s", "/h/data/x"])),
            (&["test", "-d", "/data/x"], Run("test", vec!["-d", "/h/data/x"])),
            (&["test", "-n", "word"], Run("test", vec!["-n", "word"])),
            (&["find", "/data", "-name", "*.txt"], Run("find", vec!["/h/data", "-name", "*.txt"])),
            (&["find", "-L", ".", "-newer", "/data/ref", "-newermt", "2024-01-01"], Run("find", vec!["-L", "/h/data/.", "-newer", "/h/data/ref", "-newermt", "2024-01-01"])),
            (&["find", "/data", "-exec", "rm", "{}", ";"], Exit(126, "find: option '-exec' is not supported in the sandbox\n")),
            (&["find", "/mnt/ro", "-delete"], Exit(1, "find: /mnt/ro: Read-only file system\n")),
            (&["tar", "-xzf", "-", "-C", "/data/sub"], Run("tar", vec!["-x", "-z", "-f", "-", "-C", "/h/data/sub"])),
            (&["tar", "xf", "/mnt/ro/a.tar", "-C", "/data"], Run("tar", vec!["-x", "-f", "/h/ro/a.tar", "-C", "/h/data"])),
            (&["tar", "--directory=/data", "--extract"], Run("tar", vec!["--directory=/h/data", "--extract"])),
            (&["tar", "-x", "-C", "/mnt/ro"], Exit(1, "tar: /mnt/ro: Read-only file system\n")),
            (&["tar", "-C", "/mnt/ro", "-x"], Exit(1, "tar: /mnt/ro: Read-only file system\n")),
            (&["tar", "-C", "/data", "-C", "sub", "-x", "member"], Run("tar", vec!["-C", "/h/data", "-C", "/h/data/sub", "-x", "member"])),
            (&["tar", "-cf", "-", "-C", "/mnt/ro", "."], Run("tar", vec!["-c", "-f", "-", "-C", "/h/ro", "."])),
            (&["tar", "-cf", "/mnt/ro/out.tar", "x"], Exit(1, "tar: /mnt/ro/out.tar: Read-only file system\n")),
            (&["tar", "-c", "-C", "/data", "../../etc"], Exit(1, "tar: ../../etc: No such file or directory\n")),
            (&["tar", "-cf", "-", "/data/x"], Run("tar", vec!["--transform=s|^h/data/x|data/x|", "--show-transformed-names", "-c", "-f", "-", "/h/data/x"])),
            (&["tar", "--to-command=sh", "-x"], Exit(126, "tar: option '--to-command' is not supported in the sandbox\n")),
            (&["tar", "-xP"], Exit(126, "tar: option '-P' is not supported in the sandbox\n")),
            (&["tar", "-I", "sh", "-xf", "a"], Exit(126, "tar: option '-I' is not supported in the sandbox\n")),
            (&["sleep", "3600"], Run("sleep", vec!["60"])),
            (&["sleep", "1m", "1s"], Run("sleep", vec!["60"])),
            (&["sleep", "infinity"], Run("sleep", vec!["60"])),
            (&["sleep", "0.5"], Run("sleep", vec!["0.5"])),
            (&["echo", "/outside"], Run("echo", vec!["/outside"])),
            (&["env"], Run("env", vec![])),
            (&["env", "bash"], Exit(126, "env: the sandbox runs env without a command only\n")),
            (&["frobnicate"], NotFound("frobnicate")),
            (&["/opt/tool"], NotFound("/opt/tool")),
            (&[], NotFound("")),
            (&["sh", "-c", "ls /data"], Run("ls", vec!["/h/data"])),
            (&["/bin/bash", "-lc", "exec cat \"/data/a b\" 'x'"], Run("cat", vec!["/h/data/a b", "/h/data/x"])),
            (&["sh", "-c", "ls /data | wc -l"], Exit(126, "sh: the sandbox runs single commands only: pipes, lists, redirections, expansions and globs are not supported\n")),
            (&["bash", "-c", "echo $HOME"], Exit(126, "bash: the sandbox runs single commands only: pipes, lists, redirections, expansions and globs are not supported\n")),
            (&["sh", "-c", "ls > /data/x"], Exit(126, "sh: the sandbox runs single commands only: pipes, lists, redirections, expansions and globs are not supported\n")),
            (&["sh", "-c", "nosuch arg"], Exit(127, "sh: 1: nosuch: not found\n")),
            (&["bash", "-c", "nosuch"], Exit(127, "bash: line 1: nosuch: command not found\n")),
            (&["sh", "-c", "'open"], Exit(2, "sh: 1: Syntax error: Unterminated quoted string\n")),
            (&["sh", "-c", ""], Exit(0, "")),
            (&["sh", "script.sh"], Exit(126, "sh: the sandbox runs single commands only: pipes, lists, redirections, expansions and globs are not supported\n")),
            (&["redis-cli", "-h", "localhost", "-p", "6379", "SET", "k", "-h"], Run("redis-cli", vec!["-h", "127.0.0.1", "-p", "7000", "SET", "k", "-h"])),
            (&["redis-cli", "-n", "2", "--raw", "GET", "k"], Run("redis-cli", vec!["-h", "127.0.0.1", "-p", "7000", "-n", "2", "--raw", "GET", "k"])),
            (&["redis-cli", "--rdb", "/data/dump.rdb"], Exit(126, "redis-cli: option '--rdb' is not supported in the sandbox\n")),
        ];
        for (command, expected) in cases {
            let command: Vec<String> = command.iter().map(|s| s.to_string()).collect();
            let got = summarize(plan(&command, &view, redis));
            assert_eq!(got, render(&expected), "{command:?}");
        }
        let got = summarize(plan(&["redis-cli".to_string()], &view, None));
        assert_eq!(got, "exit 127 redis-cli: not found\n");
    }

    #[test]
    fn symlinks_out_of_the_mounts_are_not_followed() {
        let volume = tempfile::tempdir().expect("temp dir");
        let outside = tempfile::tempdir().expect("temp dir");
        std::fs::write(outside.path().join("secret"), "s").expect("write");
        #[cfg(unix)]
        std::os::unix::fs::symlink(outside.path(), volume.path().join("link")).expect("symlink");
        let view = View::new(&[mount("/data", volume.path(), false)]);
        assert!(matches!(
            view.resolve("/data/link/secret", None),
            Err(Refusal::Missing(_))
        ));
        assert!(view.resolve("/data/plain/file", None).is_ok());
    }

    #[test]
    fn scripts_split_into_words() {
        let cases: Vec<(&str, Result<Vec<&str>, ScriptError>)> = vec![
            ("ls -l /data", Ok(vec!["ls", "-l", "/data"])),
            (
                "  cat   'a b'  \"c d\" e\\ f  ",
                Ok(vec!["cat", "a b", "c d", "e f"]),
            ),
            ("echo \"say \\\"hi\\\"\"", Ok(vec!["echo", "say \"hi\""])),
            ("echo a # comment", Ok(vec!["echo", "a"])),
            ("echo 'a;b|c'", Ok(vec!["echo", "a;b|c"])),
            ("ls\n", Ok(vec!["ls"])),
            ("ls; rm x", Err(ScriptError::Unsupported)),
            ("ls && rm x", Err(ScriptError::Unsupported)),
            ("ls\nrm x", Err(ScriptError::Unsupported)),
            ("cat < x", Err(ScriptError::Unsupported)),
            ("echo \"$HOME\"", Err(ScriptError::Unsupported)),
            ("ls *.txt", Err(ScriptError::Unsupported)),
            ("ls ~", Err(ScriptError::Unsupported)),
            ("FOO=1 ls", Err(ScriptError::Unsupported)),
            ("echo 'open", Err(ScriptError::Unterminated)),
            ("echo \"open", Err(ScriptError::Unterminated)),
        ];
        for (script, expected) in cases {
            let expected =
                expected.map(|words| words.into_iter().map(String::from).collect::<Vec<_>>());
            assert_eq!(split_script(script), expected, "{script:?}");
        }
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
