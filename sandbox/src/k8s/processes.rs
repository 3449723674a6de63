//! The real processes behind emulated pods: a pod whose image is Redis is backed by a
//! `redis-server` on a loopback port, so queue items land in a real Redis.
//!
//! Each pod uid gets its own server with its data under `<data_dir>/redis/<uid>` (an
//! append-only file synced on every write), so a later sandbox on the same data directory
//! restarts the same pod's server and finds its queue where it was left. Nothing here
//! waits for a server: [`Processes::redis`] spawns and then reports the state on each
//! call, because it runs under the sandbox's state lock.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fmt;
use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// The state of the redis-server backing one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RedisStatus {
    /// Started, not yet accepting connections.
    Starting,
    Ready(SocketAddr),
    /// It exited or could not start; the message says why.
    Failed(String),
    /// No redis-server binary on this machine; the message says how to install one.
    Unavailable(String),
}

/// Points at the redis-server binary to use instead of the one on `PATH`.
const SERVER_ENV: &str = "TERRAIN_REDIS_SERVER";

/// How often a server that exited is started again before it stays failed.
const MAX_RESTARTS: u32 = 3;

/// How many lines of the server's log explain why it exited.
const LOG_TAIL_LINES: usize = 5;

/// A readiness probe to loopback either connects or is refused at once; the bound only
/// guards against a stalled network stack.
const PROBE_TIMEOUT: Duration = Duration::from_millis(100);

/// The processes of one sandbox; cheap to clone. The last clone dropped stops them all.
#[derive(Clone)]
pub(crate) struct Processes {
    data_dir: PathBuf,
    entries: Arc<Mutex<HashMap<String, Entry>>>,
}

impl fmt::Debug for Processes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Processes")
            .field("data_dir", &self.data_dir)
            .finish_non_exhaustive()
    }
}

/// One pod's server: the running process, if any, and its failures so far.
#[derive(Default)]
struct Entry {
    server: Option<Server>,
    failures: u32,
    last_error: String,
}

/// A running redis-server; dropping it kills the process and reaps it.
struct Server {
    child: Child,
    addr: SocketAddr,
    ready: bool,
    log: PathBuf,
    /// Where this run's lines start in the log, which earlier runs appended to.
    log_start: u64,
}

impl Drop for Server {
    fn drop(&mut self) {
        // The process may have exited already; either way it must not outlive the sandbox.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Why a server could not be spawned.
enum SpawnError {
    Unavailable(String),
    Failed(String),
}

impl Processes {
    pub(crate) fn new(data_dir: PathBuf) -> Processes {
        Processes {
            data_dir,
            entries: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// Starts, if it is not running, the redis-server backing the pod with uid `pod_uid`,
    /// and reports its state without blocking.
    pub(crate) fn redis(&self, pod_uid: &str) -> RedisStatus {
        if !valid_uid(pod_uid) {
            return RedisStatus::Failed(format!("invalid pod uid {pod_uid:?}"));
        }
        let mut entries = lock(&self.entries);
        let entry = entries.entry(pod_uid.to_string()).or_default();
        if let Some(server) = entry.server.as_mut() {
            match server.child.try_wait() {
                Ok(None) => {
                    if !server.ready {
                        server.ready =
                            TcpStream::connect_timeout(&server.addr, PROBE_TIMEOUT).is_ok();
                    }
                    return if server.ready {
                        RedisStatus::Ready(server.addr)
                    } else {
                        RedisStatus::Starting
                    };
                }
                Ok(Some(status)) => {
                    let message = exit_message(status, &server.log, server.log_start);
                    entry.server = None;
                    entry.failures += 1;
                    entry.last_error.clone_from(&message);
                    return RedisStatus::Failed(message);
                }
                Err(e) => {
                    let message = format!("redis-server could not be checked: {e}");
                    entry.server = None;
                    entry.failures += 1;
                    entry.last_error.clone_from(&message);
                    return RedisStatus::Failed(message);
                }
            }
        }
        if entry.failures > MAX_RESTARTS {
            return RedisStatus::Failed(entry.last_error.clone());
        }
        match spawn_server(&self.data_dir, pod_uid) {
            Ok(server) => {
                entry.server = Some(server);
                RedisStatus::Starting
            }
            Err(SpawnError::Unavailable(message)) => {
                // Not remembered: installing redis-server fixes the next call.
                entries.remove(pod_uid);
                RedisStatus::Unavailable(message)
            }
            Err(SpawnError::Failed(message)) => {
                entry.failures += 1;
                entry.last_error.clone_from(&message);
                RedisStatus::Failed(message)
            }
        }
    }

    /// The address of the pod's redis-server, when it is ready.
    pub(crate) fn redis_addr(&self, pod_uid: &str) -> Option<SocketAddr> {
        match self.redis(pod_uid) {
            RedisStatus::Ready(a) => Some(a),
            _ => None,
        }
    }

    /// Stops the pod's process (and forgets its data), if any.
    pub(crate) fn stop(&self, pod_uid: &str) {
        if !valid_uid(pod_uid) {
            return;
        }
        let removed = lock(&self.entries).remove(pod_uid);
        // Killed (and reaped) before the data goes, so the server cannot write it back.
        drop(removed);
        let _ = fs::remove_dir_all(redis_dir(&self.data_dir, pod_uid));
    }

    /// Stops every process (sandbox shutdown); data stays for the next start.
    pub(crate) fn stop_all(&self) {
        let all = std::mem::take(&mut *lock(&self.entries));
        drop(all);
    }
}

/// The `redis-cli` matching the server in use: next to `TERRAIN_REDIS_SERVER` when that
/// is set and has one, else the one on `PATH`.
pub(crate) fn redis_cli_program() -> PathBuf {
    std::env::var_os(SERVER_ENV)
        .filter(|v| !v.is_empty())
        .and_then(|server| Some(Path::new(&server).parent()?.join("redis-cli")))
        .filter(|cli| cli.is_file())
        .unwrap_or_else(|| PathBuf::from("redis-cli"))
}

fn lock(entries: &Mutex<HashMap<String, Entry>>) -> MutexGuard<'_, HashMap<String, Entry>> {
    // A panic elsewhere leaves the map consistent: every change is a single insert or remove.
    entries.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A uid becomes a directory name, so it must be one plain path component.
fn valid_uid(uid: &str) -> bool {
    !uid.is_empty() && uid != "." && uid != ".." && !uid.contains(['/', '\\', '\0'])
}

fn redis_dir(data_dir: &Path, uid: &str) -> PathBuf {
    data_dir.join("redis").join(uid)
}

/// The redis-server to run: `TERRAIN_REDIS_SERVER` when set, else the first on `path`.
fn find_redis_server(
    env_value: Option<OsString>,
    path: Option<OsString>,
) -> Result<PathBuf, String> {
    if let Some(value) = env_value.filter(|v| !v.is_empty()) {
        let server = PathBuf::from(value);
        return if server.is_file() {
            Ok(server)
        } else {
            Err(format!(
                "{SERVER_ENV} is set to {}, which is not a file",
                server.display()
            ))
        };
    }
    path.iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join("redis-server"))
        .find(|candidate| candidate.is_file())
        .ok_or_else(|| {
            format!(
                "redis-server is not installed: install it (Debian/Ubuntu: apt-get install redis-server) or set {SERVER_ENV}"
            )
        })
}

fn spawn_server(data_dir: &Path, uid: &str) -> Result<Server, SpawnError> {
    let program = find_redis_server(std::env::var_os(SERVER_ENV), std::env::var_os("PATH"))
        .map_err(SpawnError::Unavailable)?;
    let dir = std::path::absolute(redis_dir(data_dir, uid)).map_err(|e| {
        SpawnError::Failed(format!("could not resolve the redis data directory: {e}"))
    })?;
    fs::create_dir_all(&dir)
        .map_err(|e| SpawnError::Failed(format!("could not create {}: {e}", dir.display())))?;
    let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|listener| listener.local_addr())
        .map_err(|e| SpawnError::Failed(format!("could not find a free loopback port: {e}")))?
        .port();
    let log = dir.join("redis.log");
    let log_start = fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
    let child = Command::new(&program)
        .arg("--bind")
        .arg("127.0.0.1")
        .arg("--port")
        .arg(port.to_string())
        .arg("--dir")
        .arg(&dir)
        .args([
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
            "--save",
            "",
        ])
        .args(["--daemonize", "no", "--protected-mode", "no"])
        .arg("--logfile")
        .arg(&log)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| SpawnError::Failed(format!("could not start {}: {e}", program.display())))?;
    Ok(Server {
        child,
        addr: SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
        ready: false,
        log,
        log_start,
    })
}

/// Why a server exited, from the last lines it logged in this run.
fn exit_message(status: ExitStatus, log: &Path, log_start: u64) -> String {
    let text = read_from(log, log_start).unwrap_or_default();
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let tail = &lines[lines.len().saturating_sub(LOG_TAIL_LINES)..];
    if tail.is_empty() {
        format!(
            "redis-server exited: {status}, nothing in {}",
            log.display()
        )
    } else {
        format!("redis-server exited: {}", tail.join("; "))
    }
}

fn read_from(path: &Path, start: u64) -> std::io::Result<String> {
    let mut file = fs::File::open(path)?;
    file.seek(SeekFrom::Start(start))?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::io::{BufRead, BufReader, Write};
    use std::thread::sleep;

    /// Polls until the server is ready; the bound only keeps a broken machine from hanging.
    fn wait_ready(processes: &Processes, uid: &str) -> SocketAddr {
        for _ in 0..600 {
            match processes.redis(uid) {
                RedisStatus::Ready(addr) => return addr,
                RedisStatus::Starting => sleep(Duration::from_millis(50)),
                other => panic!("redis-server for {uid} did not start: {other:?}"),
            }
        }
        panic!("redis-server for {uid} never became ready");
    }

    /// Sends one command in RESP and returns the first reply line.
    fn command(addr: SocketAddr, args: &[&str]) -> String {
        let mut stream = TcpStream::connect(addr).expect("connect to redis-server");
        let mut request = format!("*{}\r\n", args.len());
        for arg in args {
            request.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
        }
        stream
            .write_all(request.as_bytes())
            .expect("send a command");
        let mut reader = BufReader::new(stream);
        let mut line = String::new();
        reader.read_line(&mut line).expect("read the reply");
        if line.starts_with('$') && line.trim_end() != "$-1" {
            line.clear();
            reader.read_line(&mut line).expect("read the bulk reply");
        }
        line.trim_end().to_string()
    }

    #[test]
    fn redis_becomes_ready_and_answers() {
        let data = tempfile::tempdir().expect("temp dir");
        let processes = Processes::new(data.path().to_path_buf());
        let addr = wait_ready(&processes, "uid-a");
        assert_eq!(command(addr, &["PING"]), "+PONG");
        assert_eq!(processes.redis_addr("uid-a"), Some(addr));
        assert!(data.path().join("redis/uid-a/redis.log").is_file());
    }

    #[test]
    fn data_survives_a_restart_on_the_same_data_dir() {
        let data = tempfile::tempdir().expect("temp dir");
        let first = Processes::new(data.path().to_path_buf());
        let addr = wait_ready(&first, "uid-b");
        assert_eq!(command(addr, &["RPUSH", "queue", "item-1"]), ":1");
        first.stop_all();
        assert!(
            TcpStream::connect_timeout(&addr, PROBE_TIMEOUT).is_err(),
            "stop_all left the server running"
        );
        drop(first);

        let second = Processes::new(data.path().to_path_buf());
        let addr = wait_ready(&second, "uid-b");
        assert_eq!(command(addr, &["LINDEX", "queue", "0"]), "item-1");
    }

    #[test]
    fn stop_kills_the_server_and_removes_its_data() {
        let data = tempfile::tempdir().expect("temp dir");
        let processes = Processes::new(data.path().to_path_buf());
        let addr = wait_ready(&processes, "uid-c");
        assert_eq!(command(addr, &["SET", "k", "v"]), "+OK");
        processes.stop("uid-c");
        assert!(!data.path().join("redis/uid-c").exists());
        assert!(
            TcpStream::connect_timeout(&addr, PROBE_TIMEOUT).is_err(),
            "stop left the server running"
        );

        let addr = wait_ready(&processes, "uid-c");
        assert_eq!(command(addr, &["GET", "k"]), "$-1");
    }

    #[test]
    fn dropping_the_last_clone_kills_the_servers() {
        let data = tempfile::tempdir().expect("temp dir");
        let processes = Processes::new(data.path().to_path_buf());
        let clone = processes.clone();
        let addr = wait_ready(&processes, "uid-d");
        drop(processes);
        assert_eq!(
            command(addr, &["PING"]),
            "+PONG",
            "a remaining clone keeps the server"
        );
        drop(clone);
        assert!(TcpStream::connect_timeout(&addr, PROBE_TIMEOUT).is_err());
    }

    #[test]
    fn a_server_that_cannot_start_fails_with_its_log() {
        let data = tempfile::tempdir().expect("temp dir");
        let processes = Processes::new(data.path().to_path_buf());
        let dir = data.path().join("redis/uid-e");
        fs::create_dir_all(&dir).expect("create the data dir");
        // An append-only manifest redis cannot parse makes it refuse to start.
        fs::create_dir_all(dir.join("appendonlydir")).expect("create the aof dir");
        fs::write(
            dir.join("appendonlydir/appendonly.aof.manifest"),
            "not a manifest\n",
        )
        .expect("write");
        let mut failed = None;
        for _ in 0..600 {
            match processes.redis("uid-e") {
                RedisStatus::Failed(message) => {
                    failed = Some(message);
                    break;
                }
                RedisStatus::Starting => sleep(Duration::from_millis(50)),
                other => panic!("unexpected state {other:?}"),
            }
        }
        let message = failed.expect("redis-server never failed");
        assert!(message.starts_with("redis-server exited: "), "{message}");
        assert!(message.to_lowercase().contains("manifest"), "{message}");
    }

    #[test]
    fn invalid_uids_are_refused() {
        let data = tempfile::tempdir().expect("temp dir");
        let processes = Processes::new(data.path().to_path_buf());
        for uid in ["", "..", "a/b"] {
            assert!(
                matches!(processes.redis(uid), RedisStatus::Failed(_)),
                "{uid:?}"
            );
        }
        assert!(!data.path().join("redis").exists());
    }

    #[test]
    fn finding_the_server_binary() {
        let dir = tempfile::tempdir().expect("temp dir");
        let server = dir.path().join("redis-server");
        fs::write(&server, "").expect("write a stand-in binary");
        let missing = dir.path().join("nope");
        let path =
            std::env::join_paths([missing.clone(), dir.path().to_path_buf()]).expect("join paths");

        assert_eq!(
            find_redis_server(None, Some(path.clone())),
            Ok(server.clone())
        );
        assert_eq!(
            find_redis_server(Some(OsString::new()), Some(path)),
            Ok(server.clone())
        );
        assert_eq!(
            find_redis_server(Some(server.clone().into_os_string()), None),
            Ok(server)
        );
        let unset = find_redis_server(None, Some(missing.clone().into_os_string()))
            .expect_err("nothing on PATH");
        assert!(unset.starts_with("redis-server is not installed: install it (Debian/Ubuntu: apt-get install redis-server)"));
        let wrong = find_redis_server(Some(missing.into_os_string()), None)
            .expect_err("env points nowhere");
        assert!(wrong.contains("TERRAIN_REDIS_SERVER"), "{wrong}");
    }
}
