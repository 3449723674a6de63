//! The `kubernetes_dataset` kind: a local directory copied onto a PersistentVolumeClaim
//! (the shared NFS volume training jobs read), as a tar stream extracted by `tar` inside
//! a pod that mounts the claim: a given pod, or a short-lived helper pod.
//!
//! The copy is trusted, not re-read: `prepare` hashes the local directory (sorted
//! relative paths, modes and contents) into `content_hash` (at validate and plan too, so
//! a missing, unreadable or non-directory `source` fails there), and a changed hash is an
//! in-place update that copies again and removes remote files the directory no longer
//! has. `read` only checks that the claim still exists. Destroy leaves the files in
//! place unless `delete_on_destroy` is set, because datasets often outlive the stack.
//!
//! Ids: `<namespace>/<claim>:<path>@<copied_at>+<bytes>`; the copy time and size are
//! kept there because `read` sees only the prior spec.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use kube::api::AttachParams;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use super::{
    apply, check_cluster, check_dns_label, check_dns_subdomain, connect, mark_ours,
    with_managed_label,
};
use crate::protocol::UNKNOWN;
use crate::schema::Fields;
use crate::{Ctx, Health, Invalid, Kind, Live, ProviderError};

/// The kind `kubernetes_dataset`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Dataset;

/// Where the helper pod mounts the claim.
const HELPER_MOUNT: &str = "/data";
/// How long the helper pod may take to start (pulling its image included).
const HELPER_START_TIMEOUT: Duration = Duration::from_secs(300);
/// How long deleting the helper pod may take.
const HELPER_DELETE_TIMEOUT: Duration = Duration::from_secs(120);
/// Paths per `rm` when removing files the source no longer has.
const RM_BATCH: usize = 200;
/// Bytes per message on the way to the pod's `tar`.
const CHUNK: usize = 256 * 1024;
/// Versions the content hash, so that a change of what it covers shows as a change.
const HASH_VERSION: &[u8] = b"terrain-dataset-v1\n";

fn default_namespace() -> String {
    "default".into()
}

fn default_path() -> String {
    "/".into()
}

fn default_image() -> String {
    "busybox:1.36".into()
}

/// An existing pod that mounts the claim.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct PodRef {
    /// A running pod that mounts the claim.
    pub name: String,
    /// Where that pod mounts it ("/mnt/fileserver").
    pub mount_path: String,
}

/// What a stack writes for a `kubernetes_dataset`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    #[terrain(doc = crate::kubernetes::CLUSTER_DOC, force_new)]
    pub cluster: Value,
    /// The local directory to copy; relative paths start at the stack's directory.
    pub source: String,
    /// The PersistentVolumeClaim to copy onto.
    #[terrain(force_new)]
    pub claim: String,
    /// The claim's namespace.
    #[serde(default = "default_namespace")]
    #[terrain(force_new)]
    pub namespace: String,
    /// Where in the volume the files go ("/datasets"); an update removes files under it
    /// that the source no longer has.
    #[serde(default = "default_path")]
    #[terrain(force_new)]
    pub path: String,
    /// Copy through an existing pod instead of a helper pod.
    pub pod: Option<PodRef>,
    /// The helper pod's image; it needs `tar`, `mkdir`, `find` and `rm` (no shell is used).
    #[serde(default = "default_image")]
    pub image: String,
    /// Computed when planning: SHA-256 of the source's paths, modes and contents; not to be
    /// set in stacks.
    pub content_hash: Option<String>,
    /// Computed when planning: how many files the source has; not to be set in stacks.
    pub files: Option<i64>,
    /// Remove `path` from the volume on destroy; by default the files stay, as datasets
    /// often outlive the stack.
    #[serde(default)]
    pub delete_on_destroy: bool,
}

/// What `kubernetes_dataset` reports after apply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Outputs {
    /// The hash of what was copied.
    pub content_hash: String,
    /// How many files were copied.
    pub files: i64,
    /// How many bytes they hold.
    pub bytes: i64,
    /// When the last copy finished (RFC 3339).
    pub copied_at: String,
}

/// What a directory holds, as hashed and copied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    pub content_hash: String,
    /// Regular files.
    pub files: i64,
    /// Their total size.
    pub bytes: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum EntryKind {
    Dir,
    File,
    /// A relative symbolic link that stays inside the source.
    Link(String),
}

/// One entry under the source, by `/`-separated relative path.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    rel: String,
    kind: EntryKind,
    mode: u32,
}

fn io_error(call: &'static str, path: &Path, e: io::Error) -> ProviderError {
    ProviderError::io(call, path.display().to_string(), e)
}

#[cfg(unix)]
fn mode_of(meta: &std::fs::Metadata) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    meta.permissions().mode() & 0o7777
}

#[cfg(not(unix))]
fn mode_of(meta: &std::fs::Metadata) -> u32 {
    match (meta.is_dir(), meta.permissions().readonly()) {
        (true, _) => 0o755,
        (false, true) => 0o444,
        (false, false) => 0o644,
    }
}

/// The entries under `source`, sorted by relative path (so neither the hash nor the
/// archive depends on the order the directory lists them in). Symbolic links must be
/// relative and stay inside `source`, since the copy keeps them as links.
fn scan(source: &Path) -> Result<Vec<Entry>, ProviderError> {
    let meta = std::fs::metadata(source).map_err(|e| io_error("read dataset source", source, e))?;
    if !meta.is_dir() {
        return Err(ProviderError::Unsupported(format!(
            "source: {} is not a directory",
            source.display()
        )));
    }
    let root =
        std::fs::canonicalize(source).map_err(|e| io_error("read dataset source", source, e))?;
    let mut out = Vec::new();
    let mut pending = vec![(source.to_path_buf(), String::new())];
    while let Some((dir, rel_dir)) = pending.pop() {
        for entry in std::fs::read_dir(&dir).map_err(|e| io_error("list directory", &dir, e))? {
            let entry = entry.map_err(|e| io_error("list directory", &dir, e))?;
            let path = entry.path();
            let name = entry.file_name().into_string().map_err(|_| {
                ProviderError::Unsupported(format!(
                    "source: {} has a name that is not UTF-8",
                    path.display()
                ))
            })?;
            let rel = if rel_dir.is_empty() {
                name
            } else {
                format!("{rel_dir}/{name}")
            };
            let meta =
                std::fs::symlink_metadata(&path).map_err(|e| io_error("inspect", &path, e))?;
            let kind = if meta.is_dir() {
                pending.push((path.clone(), rel.clone()));
                EntryKind::Dir
            } else if meta.is_file() {
                EntryKind::File
            } else if meta.file_type().is_symlink() {
                EntryKind::Link(link_target(&root, &path)?)
            } else {
                return Err(ProviderError::Unsupported(format!(
                    "source: {} is not a regular file, directory or symbolic link",
                    path.display()
                )));
            };
            out.push(Entry {
                rel,
                kind,
                mode: mode_of(&meta),
            });
        }
    }
    out.sort_by(|a, b| a.rel.cmp(&b.rel));
    Ok(out)
}

/// The target of the link at `path`, refused when it leaves `root` (the copy would
/// point at whatever that path is inside the pod) or is absolute.
fn link_target(root: &Path, path: &Path) -> Result<String, ProviderError> {
    let target = std::fs::read_link(path).map_err(|e| io_error("read link", path, e))?;
    let outside = |why: &str| {
        ProviderError::Unsupported(format!(
            "source: symbolic link {} -> {} {why}",
            path.display(),
            target.display()
        ))
    };
    if target.is_absolute() {
        return Err(outside(
            "is absolute; use a relative link inside the source",
        ));
    }
    let resolved = std::fs::canonicalize(path).map_err(|_| outside("points at nothing"))?;
    if !resolved.starts_with(root) {
        return Err(outside("points outside the source"));
    }
    target
        .to_str()
        .map(str::to_string)
        .ok_or_else(|| outside("is not UTF-8"))
}

/// Feeds one entry's header to the hash; the fields are NUL-separated and the content
/// length precedes the content, so no two directories hash alike by accident.
fn hash_header(hasher: &mut Sha256, tag: u8, rel: &str, mode: u32, len: u64) {
    hasher.update([tag, 0]);
    hasher.update(rel.as_bytes());
    hasher.update(format!("\0{mode:o}\0{len}\0"));
}

/// A file opened for hashing or archiving: its size and mode as of opening.
fn open(source: &Path, rel: &str) -> Result<(File, u64, u32), ProviderError> {
    let path = source.join(rel);
    let file = File::open(&path).map_err(|e| io_error("read", &path, e))?;
    let meta = file.metadata().map_err(|e| io_error("read", &path, e))?;
    Ok((file, meta.len(), mode_of(&meta)))
}

/// Reads exactly `len` bytes of a file into the hash as they pass: a file that shrinks
/// while it is read is an error, one that grows is cut at its size at opening.
struct Exact<'a, R> {
    inner: io::Take<R>,
    hasher: &'a mut Sha256,
    left: u64,
}

impl<'a, R: Read> Exact<'a, R> {
    fn new(inner: R, len: u64, hasher: &'a mut Sha256) -> Self {
        Self {
            inner: inner.take(len),
            hasher,
            left: len,
        }
    }
}

impl<R: Read> Read for Exact<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n == 0 && self.left > 0 && !buf.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the file shrank while it was read",
            ));
        }
        self.hasher.update(&buf[..n]);
        self.left -= n as u64;
        Ok(n)
    }
}

/// Accumulates the summary of what was hashed.
struct Tally {
    hasher: Sha256,
    files: i64,
    bytes: u64,
}

impl Tally {
    fn new() -> Self {
        let mut hasher = Sha256::new();
        hasher.update(HASH_VERSION);
        Self {
            hasher,
            files: 0,
            bytes: 0,
        }
    }

    fn finish(self) -> Summary {
        Summary {
            content_hash: hex::encode(self.hasher.finalize()),
            files: self.files,
            bytes: i64::try_from(self.bytes).unwrap_or(i64::MAX),
        }
    }
}

/// Where a relative `path` is looked for: the current directory, which the engine sets
/// to the stack's directory.
fn shown_path(path: &Path) -> String {
    if path.is_absolute() {
        return path.display().to_string();
    }
    std::env::current_dir()
        .map(|cwd| cwd.join(path))
        .unwrap_or_else(|_| path.to_path_buf())
        .display()
        .to_string()
}

/// Checks that the local directory `dir`, given at the spec field `field`, exists, is a
/// directory and can be listed (`what` it is for: "to copy"), so the plan refuses what
/// apply could not read. The message shows where a relative path was looked for.
///
/// Fails with [`ProviderError::Invalid`] at `field`.
pub(super) fn check_local_dir(field: &str, dir: &str, what: &str) -> Result<(), ProviderError> {
    let path = Path::new(dir);
    let shown = shown_path(path);
    let whence = if path.is_relative() {
        " (relative paths start at the stack's directory)"
    } else {
        ""
    };
    let unreadable = |e: io::Error| {
        ProviderError::invalid(
            field,
            format!("{dir:?} cannot be read: {shown}: {e}{whence}"),
        )
    };
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(ProviderError::invalid(
                field,
                format!("{dir:?} does not exist: no directory at {shown}{whence}"),
            ));
        }
        Err(e) => return Err(unreadable(e)),
    };
    if !meta.is_dir() {
        let is = if meta.is_file() {
            "a file"
        } else {
            "not a file or directory"
        };
        return Err(ProviderError::invalid(
            field,
            format!(
                "{dir:?} is {is}, not a directory ({shown}); give the directory {what}{whence}"
            ),
        ));
    }
    std::fs::read_dir(path).map(drop).map_err(unreadable)
}

/// A failure reading inside a local directory, reported at the spec field `field`
/// that names it.
pub(super) fn at_field(field: &str, e: ProviderError) -> ProviderError {
    match e {
        ProviderError::Unsupported(m) => {
            let m = m
                .strip_prefix(&format!("{field}: "))
                .unwrap_or(&m)
                .to_string();
            ProviderError::invalid(field, m)
        }
        e @ ProviderError::Io { .. } => ProviderError::invalid(field, e.to_string()),
        e => e,
    }
}

/// Hashes `source` (sorted relative paths, modes, contents and link targets).
pub fn summarize(source: &Path) -> Result<Summary, ProviderError> {
    let mut tally = Tally::new();
    for entry in scan(source)? {
        match &entry.kind {
            EntryKind::Dir => hash_header(&mut tally.hasher, b'd', &entry.rel, entry.mode, 0),
            EntryKind::Link(target) => {
                hash_header(&mut tally.hasher, b'l', &entry.rel, 0, target.len() as u64);
                tally.hasher.update(target.as_bytes());
            }
            EntryKind::File => {
                let (file, len, mode) = open(source, &entry.rel)?;
                hash_header(&mut tally.hasher, b'f', &entry.rel, mode, len);
                io::copy(
                    &mut Exact::new(file, len, &mut tally.hasher),
                    &mut io::sink(),
                )
                .map_err(|e| io_error("read", &source.join(&entry.rel), e))?;
                tally.files += 1;
                tally.bytes += len;
            }
        }
    }
    Ok(tally.finish())
}

/// Writes `source` as a tar stream into `out` and hashes it on the way, exactly as
/// [`summarize`] does; returns the summary of what was written and the paths of the
/// non-directory entries (what a remote listing is compared with).
pub fn write_archive<W: Write>(
    source: &Path,
    out: W,
) -> Result<(Summary, BTreeSet<String>), ProviderError> {
    let mut builder = tar::Builder::new(out);
    let mut tally = Tally::new();
    let mut archived = BTreeSet::new();
    let failed = |rel: &str, e: io::Error| io_error("archive", &source.join(rel), e);
    for entry in scan(source)? {
        let mut header = tar::Header::new_gnu();
        header.set_mtime(0);
        header.set_uid(0);
        header.set_gid(0);
        match &entry.kind {
            EntryKind::Dir => {
                hash_header(&mut tally.hasher, b'd', &entry.rel, entry.mode, 0);
                header.set_entry_type(tar::EntryType::Directory);
                header.set_mode(entry.mode);
                header.set_size(0);
                builder
                    .append_data(&mut header, &entry.rel, io::empty())
                    .map_err(|e| failed(&entry.rel, e))?;
            }
            EntryKind::Link(target) => {
                hash_header(&mut tally.hasher, b'l', &entry.rel, 0, target.len() as u64);
                tally.hasher.update(target.as_bytes());
                header.set_entry_type(tar::EntryType::Symlink);
                header.set_mode(0o777);
                header.set_size(0);
                builder
                    .append_link(&mut header, &entry.rel, target)
                    .map_err(|e| failed(&entry.rel, e))?;
                archived.insert(entry.rel.clone());
            }
            EntryKind::File => {
                let (file, len, mode) = open(source, &entry.rel)?;
                hash_header(&mut tally.hasher, b'f', &entry.rel, mode, len);
                header.set_entry_type(tar::EntryType::Regular);
                header.set_mode(mode);
                header.set_size(len);
                builder
                    .append_data(
                        &mut header,
                        &entry.rel,
                        Exact::new(file, len, &mut tally.hasher),
                    )
                    .map_err(|e| failed(&entry.rel, e))?;
                tally.files += 1;
                tally.bytes += len;
                archived.insert(entry.rel.clone());
            }
        }
    }
    let mut out = builder.into_inner().map_err(|e| failed("", e))?;
    out.flush().map_err(|e| failed("", e))?;
    Ok((tally.finish(), archived))
}

/// A writer that hands its bytes, in chunks, to the task feeding the pod's stdin.
struct ChannelWriter {
    tx: mpsc::Sender<Vec<u8>>,
    buf: Vec<u8>,
}

impl ChannelWriter {
    fn send(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK));
        self.tx
            .blocking_send(chunk)
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the stream to the pod closed"))
    }
}

impl Write for ChannelWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= CHUNK {
            self.send()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send()
    }
}

/// The directory the dataset goes to, inside a pod that mounts the claim at `mount`.
fn destination(mount: &str, path: &str) -> String {
    let mount = mount.trim_end_matches('/');
    let path = path.trim_matches('/');
    match (mount.is_empty(), path.is_empty()) {
        (true, true) => "/".to_string(),
        (_, true) => mount.to_string(),
        (_, false) => format!("{mount}/{path}"),
    }
}

/// Whether a path has a `..` segment (and could leave the volume).
fn climbs(path: &str) -> bool {
    path.split('/').any(|segment| segment == "..")
}

/// The name of the helper pod for a dataset: stable per claim and path, so that a
/// leftover from an interrupted copy is found and replaced.
fn helper_name(spec: &Spec) -> String {
    let digest = hex::encode(Sha256::digest(format!(
        "{}/{}:{}",
        spec.namespace,
        spec.claim,
        destination("", &spec.path)
    )));
    format!("terrain-dataset-{}", &digest[..8])
}

/// The helper pod: it mounts the claim at [`HELPER_MOUNT`] and sleeps while terrain
/// execs into it.
pub fn helper_pod(spec: &Spec) -> Value {
    let mut labels = with_managed_label(&BTreeMap::new());
    labels.insert("app.kubernetes.io/component".into(), json!("dataset-copy"));
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": helper_name(spec), "namespace": spec.namespace, "labels": labels},
        "spec": {
            "restartPolicy": "Never",
            // `sleep` as PID 1 ignores SIGTERM: a long grace period would only delay
            // the cleanup.
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "copy",
                "image": spec.image,
                "command": ["sleep", "3600"],
                "volumeMounts": [{"name": "data", "mountPath": HELPER_MOUNT}],
            }],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": spec.claim}}],
        },
    })
}

fn id_of(spec: &Spec, copied_at: &str, bytes: i64) -> String {
    format!(
        "{}/{}:{}@{copied_at}+{bytes}",
        spec.namespace,
        spec.claim,
        destination("/", &spec.path)
    )
}

/// The copy time and size an id records.
fn parse_id(id: &str) -> Result<(String, i64), ProviderError> {
    id.rsplit_once('@')
        .and_then(|(_, tail)| tail.split_once('+'))
        .and_then(|(at, bytes)| Some((at.to_string(), bytes.parse().ok()?)))
        .ok_or_else(|| {
            ProviderError::Unsupported(format!(
                "{}: {id:?} is not an id of this kind; expected NAMESPACE/CLAIM:PATH@COPIED_AT+BYTES",
                Dataset::KIND
            ))
        })
}

fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    k8s_openapi::jiff::Timestamp::from_second(i64::try_from(secs).unwrap_or(0))
        .map(|t| t.to_string())
        .unwrap_or_default()
}

/// The dataset as the last copy left it: `spec` with the copy time and size its id
/// recorded.
fn recorded(id: &str, spec: &Spec) -> Result<Live<Dataset>, ProviderError> {
    let (copied_at, bytes) = parse_id(id)?;
    Ok(Live {
        id: id.to_string(),
        spec: spec.clone(),
        outputs: Outputs {
            content_hash: spec.content_hash.clone().unwrap_or_default(),
            files: spec.files.unwrap_or(0),
            bytes,
            copied_at,
        },
    })
}

/// Runs `command` in `pod`, feeding it `input` (when given) and returning its stdout
/// (when `capture`). A command that fails is an `Api` error with what it printed on
/// stderr.
async fn run(
    pods: &kube::Api<Pod>,
    pod: &str,
    command: &[String],
    input: Option<mpsc::Receiver<Vec<u8>>>,
    capture: bool,
) -> Result<Vec<u8>, ProviderError> {
    let program = command.first().map(String::as_str).unwrap_or_default();
    let call = format!("kubernetes exec {program}");
    let params = AttachParams::default()
        .stdin(input.is_some())
        .stdout(capture)
        .stderr(true);
    let mut attached = pods
        .exec(pod, command.to_vec(), &params)
        .await
        .map_err(|e| apply::api_error(call.clone(), e))?;
    let stdin = attached.stdin();
    let (stdout, stderr) = (attached.stdout(), attached.stderr());
    let status = attached.take_status();
    let feed = async move {
        let (Some(mut stdin), Some(mut input)) = (stdin, input) else {
            return Ok(());
        };
        while let Some(chunk) = input.recv().await {
            stdin.write_all(&chunk).await?;
        }
        // The end of stdin (the v5 close signal): `tar` sees the end of the archive.
        stdin.shutdown().await
    };
    let drain = |reader: Option<tokio::io::ReadHalf<tokio::io::SimplexStream>>| async move {
        let mut out = Vec::new();
        if let Some(mut reader) = reader {
            reader.read_to_end(&mut out).await?;
        }
        Ok::<_, io::Error>(out)
    };
    // All at once: a command that prints while it reads would otherwise block on a
    // full pipe while its stdin waits.
    let (fed, out, err) = tokio::join!(feed, drain(stdout), drain(stderr));
    let status = match status {
        Some(status) => status.await,
        None => None,
    };
    let stderr = String::from_utf8_lossy(&err.unwrap_or_default())
        .trim()
        .to_string();
    match status {
        Some(s) if s.status.as_deref() == Some("Success") => {}
        Some(s) => {
            let code = s.code.and_then(|c| u16::try_from(c).ok()).unwrap_or(0);
            let message = if stderr.is_empty() {
                s.message.unwrap_or_default()
            } else {
                stderr
            };
            return Err(ProviderError::api(
                call,
                code,
                s.reason.unwrap_or_default(),
                message,
            ));
        }
        None => {
            return Err(ProviderError::api(
                call,
                0,
                "",
                "the command ended without an exit status",
            ))
        }
    }
    fed.map_err(|e| ProviderError::api(call.clone(), 0, "", format!("sending stdin: {e}")))?;
    out.map_err(|e| ProviderError::api(call, 0, "", format!("reading stdout: {e}")))
}

fn args(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|s| s.to_string()).collect()
}

/// Copies `source` to `dest` inside `pod`; with `prune`, removes the files under
/// `dest` that the source does not have.
async fn transfer(
    ctx: &Ctx,
    pods: &kube::Api<Pod>,
    pod: &str,
    dest: &str,
    source: &Path,
    prune: bool,
) -> Result<Summary, ProviderError> {
    run(pods, pod, &args(&["mkdir", "-p", dest]), None, false).await?;
    ctx.progress(&format!("copying {} to {pod}:{dest}", source.display()));
    let (tx, rx) = mpsc::channel(4);
    let producer = {
        let source = source.to_path_buf();
        tokio::task::spawn_blocking(move || {
            write_archive(
                &source,
                ChannelWriter {
                    tx,
                    buf: Vec::with_capacity(CHUNK),
                },
            )
        })
    };
    let extracted = run(
        pods,
        pod,
        &args(&["tar", "-x", "-m", "-f", "-", "-C", dest]),
        Some(rx),
        false,
    )
    .await;
    let produced = producer.await.map_err(|e| {
        ProviderError::Unsupported(format!("archiving {} stopped: {e}", source.display()))
    })?;
    let (summary, archived) = match (produced, extracted) {
        (Ok(done), Ok(_)) => done,
        // The pod stopped reading, and its error says why.
        (Err(local), Err(remote)) if closed_by_pod(&local) => return Err(remote),
        // A local failure explains a remote one (a cut-off archive).
        (Err(local), _) => return Err(local),
        (Ok(_), Err(remote)) => return Err(remote),
    };
    if prune {
        let listing = run(pods, pod, &args(&["find", dest, "-type", "f"]), None, true).await?;
        let stale = stale_files(&String::from_utf8_lossy(&listing), dest, &archived);
        for batch in stale.chunks(RM_BATCH) {
            let mut command = args(&["rm", "-f"]);
            command.extend(batch.iter().cloned());
            run(pods, pod, &command, None, false).await?;
        }
        if !stale.is_empty() {
            ctx.progress(&format!(
                "removed {} the source no longer has",
                plural(stale.len(), "file")
            ));
        }
    }
    Ok(summary)
}

/// Whether archiving failed only because the stream to the pod closed.
fn closed_by_pod(e: &ProviderError) -> bool {
    matches!(e, ProviderError::Io { source, .. } if source.kind() == io::ErrorKind::BrokenPipe)
}

/// The files a remote `find DEST -type f` listed that the archive did not have.
fn stale_files(listing: &str, dest: &str, archived: &BTreeSet<String>) -> Vec<String> {
    let prefix = if dest.ends_with('/') {
        dest.to_string()
    } else {
        format!("{dest}/")
    };
    listing
        .lines()
        .filter(|line| {
            line.strip_prefix(&prefix)
                .is_some_and(|rel| !rel.is_empty() && !archived.contains(rel))
        })
        .map(str::to_string)
        .collect()
}

fn plural(n: usize, one: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {one}s")
    }
}

/// Adds a failed cleanup to the error that came first, keeping both.
fn with_cleanup_error(first: ProviderError, what: &str, cleanup: ProviderError) -> ProviderError {
    let also = format!("{what} failed too: {cleanup}");
    match first {
        ProviderError::Api {
            call,
            status,
            code,
            message,
            request_id,
            hint,
        } => ProviderError::Api {
            call,
            status,
            code,
            message: format!("{message}; {also}"),
            request_id,
            hint,
        },
        ProviderError::Failed { call, message } => ProviderError::Failed {
            call,
            message: format!("{message}; {also}"),
        },
        other => ProviderError::Failed {
            call: Dataset::KIND.to_string(),
            message: format!("{other}; {also}"),
        },
    }
}

/// What to do inside a pod that mounts the claim.
enum Work<'a> {
    Copy { source: &'a Path, prune: bool },
    Remove,
}

/// Does `work` in the spec's pod, or in a helper pod started for it and deleted after,
/// whatever the outcome.
async fn in_pod(
    ctx: &Ctx,
    client: &crate::kubernetes::connect::Conn,
    spec: &Spec,
    work: Work<'_>,
) -> Result<Option<Summary>, ProviderError> {
    let pods: kube::Api<Pod> = kube::Api::namespaced(client.kube(), &spec.namespace);
    let what = match work {
        Work::Copy { .. } => "copy",
        Work::Remove => "removal",
    };
    let act = |pod: String, mount: String| {
        let pods = pods.clone();
        let work = &work;
        async move {
            let dest = destination(&mount, &spec.path);
            match work {
                Work::Copy { source, prune } => transfer(ctx, &pods, &pod, &dest, source, *prune)
                    .await
                    .map(Some),
                Work::Remove => {
                    ctx.progress(&format!("removing {pod}:{dest}"));
                    run(&pods, &pod, &args(&["rm", "-rf", &dest]), None, false)
                        .await
                        .map(|_| None)
                }
            }
        }
    };
    if let Some(pod) = &spec.pod {
        return act(pod.name.clone(), pod.mount_path.clone()).await;
    }
    let name = helper_name(spec);
    let ns = Some(spec.namespace.as_str());
    // A helper left by an interrupted copy may have stopped sleeping: start afresh.
    apply::delete_and_wait(client, "v1", "Pod", ns, &name, ctx, HELPER_DELETE_TIMEOUT).await?;
    let mut pod = helper_pod(spec);
    mark_ours(&mut pod, &ctx.address);
    let started = async {
        apply::apply(client, &pod, true).await?;
        apply::wait_until(
            client,
            "v1",
            "Pod",
            ns,
            &name,
            ctx,
            HELPER_START_TIMEOUT,
            &format!("helper pod {}/{name} to run", spec.namespace),
            |p| match p["status"]["phase"].as_str() {
                Some("Running") => Ok(true),
                Some(phase @ ("Failed" | "Succeeded")) => {
                    Err(format!("the helper pod ended ({phase}) before the copy"))
                }
                _ => match cannot_start(p) {
                    Some(why) => Err(format!("the helper pod cannot start: {why}")),
                    None => Ok(false),
                },
            },
        )
        .await
    }
    .await;
    let result = match started {
        Ok(_) => act(name.clone(), HELPER_MOUNT.to_string()).await,
        Err(e) => Err(e),
    };
    let cleanup =
        apply::delete_and_wait(client, "v1", "Pod", ns, &name, ctx, HELPER_DELETE_TIMEOUT).await;
    let removing = format!("removing helper pod {}/{name}", spec.namespace);
    match (result, cleanup) {
        (Ok(done), Ok(())) => Ok(done),
        (Err(e), Ok(())) => Err(e),
        // The work is done but a pod is left behind: fail, so that the next apply
        // does it again and cleans up.
        (Ok(_), Err(c)) => Err(ProviderError::Failed {
            call: format!("{} {what}", Dataset::KIND),
            message: format!("{what} succeeded, but {removing} failed: {c}"),
        }),
        (Err(e), Err(c)) => Err(with_cleanup_error(e, &removing, c)),
    }
}

/// Why a pending pod will not start by itself (its image cannot be pulled), if so.
fn cannot_start(pod: &Value) -> Option<String> {
    let statuses = pod["status"]["containerStatuses"].as_array()?;
    statuses.iter().find_map(|s| {
        let waiting = &s["state"]["waiting"];
        let reason = waiting["reason"].as_str()?;
        matches!(
            reason,
            "ImagePullBackOff"
                | "InvalidImageName"
                | "ErrImageNeverPull"
                | "CreateContainerConfigError"
        )
        .then(|| {
            format!(
                "{reason}: {}",
                waiting["message"].as_str().unwrap_or("no message")
            )
        })
    })
}

/// Whether the claim exists (and is not being deleted).
async fn claim_exists(
    client: &crate::kubernetes::connect::Conn,
    spec: &Spec,
) -> Result<bool, ProviderError> {
    let claim = apply::get(
        client,
        "v1",
        "PersistentVolumeClaim",
        Some(&spec.namespace),
        &spec.claim,
    )
    .await?;
    Ok(claim.is_some_and(|c| c["metadata"]["deletionTimestamp"].is_null()))
}

impl Dataset {
    async fn copy(&self, ctx: &Ctx, spec: &Spec, prune: bool) -> Result<Live<Self>, ProviderError> {
        let client = connect::client(ctx, &spec.cluster).await?;
        if !claim_exists(&client, spec).await? {
            return Err(ProviderError::api(
                format!(
                    "kubernetes get PersistentVolumeClaim {}/{}",
                    spec.namespace, spec.claim
                ),
                404,
                "NotFound",
                "the claim to copy onto does not exist",
            ));
        }
        let source = PathBuf::from(&spec.source);
        let summary = in_pod(
            ctx,
            &client,
            spec,
            Work::Copy {
                source: &source,
                prune,
            },
        )
        .await?
        .ok_or_else(|| ProviderError::Unsupported("the copy reported nothing".into()))?;
        let copied_at = now_rfc3339();
        ctx.progress(&format!(
            "copied {} ({} bytes)",
            plural(usize::try_from(summary.files).unwrap_or(0), "file"),
            summary.bytes
        ));
        // What was copied, which may differ from what was planned if the directory
        // changed in between: the next plan then shows the difference.
        let spec = Spec {
            content_hash: Some(summary.content_hash.clone()),
            files: Some(summary.files),
            ..spec.clone()
        };
        Ok(Live {
            id: id_of(&spec, &copied_at, summary.bytes),
            spec,
            outputs: Outputs {
                content_hash: summary.content_hash,
                files: summary.files,
                bytes: summary.bytes,
                copied_at,
            },
        })
    }
}

#[async_trait]
impl Kind for Dataset {
    type Spec = Spec;
    type Outputs = Outputs;
    const KIND: &'static str = "kubernetes_dataset";
    const PROVIDER: &'static str = "kubernetes";
    const WRITES: crate::protocol::Writes = crate::protocol::Writes::AsManifest;
    const RENDERS: bool = true;

    fn validate(spec: &Spec, _config: &Value) -> Vec<Invalid> {
        let mut out = Vec::new();
        check_cluster(&spec.cluster, &mut out);
        if spec.source.is_empty() {
            out.push(Invalid::at("source", "must not be empty"));
        }
        if let Err(m) = check_dns_subdomain(&spec.claim) {
            out.push(Invalid::at("claim", m));
        }
        if let Err(m) = check_dns_label(&spec.namespace) {
            out.push(Invalid::at("namespace", m));
        }
        if climbs(&spec.path) {
            out.push(Invalid::at(
                "path",
                format!(
                    "{:?} climbs out with `..`; give a path inside the volume",
                    spec.path
                ),
            ));
        }
        if let Some(pod) = &spec.pod {
            if let Err(m) = check_dns_subdomain(&pod.name) {
                out.push(Invalid::at("pod.name", m));
            }
            if !pod.mount_path.starts_with('/') || climbs(&pod.mount_path) {
                out.push(Invalid::at(
                    "pod.mount_path",
                    format!(
                        "{:?} is not an absolute path inside the pod",
                        pod.mount_path
                    ),
                ));
            }
        }
        if spec.image.is_empty() {
            out.push(Invalid::at("image", "must not be empty"));
        }
        if spec.content_hash.is_some() {
            out.push(Invalid::at(
                "content_hash",
                "is computed from `source` when planning; do not set it",
            ));
        }
        if spec.files.is_some() {
            out.push(Invalid::at(
                "files",
                "is computed from `source` when planning; do not set it",
            ));
        }
        if spec.delete_on_destroy && destination("", &spec.path) == "/" {
            out.push(Invalid::at(
                "delete_on_destroy",
                "would empty the whole volume, since `path` is its root; copy into a directory (path = \"/datasets\") or leave delete_on_destroy off",
            ));
        }
        out
    }

    fn prepare(mut spec: Spec) -> Result<Spec, ProviderError> {
        // A source not known until apply (another resource's output) is hashed then;
        // the plan shows the hash as known after apply.
        if spec.source.contains(UNKNOWN) {
            spec.content_hash = Some(UNKNOWN.to_string());
            return Ok(spec);
        }
        // `validate` reports an empty source.
        if spec.source.is_empty() {
            return Ok(spec);
        }
        check_local_dir("source", &spec.source, "to copy")?;
        let summary = summarize(Path::new(&spec.source)).map_err(|e| at_field("source", e))?;
        spec.content_hash = Some(summary.content_hash);
        spec.files = Some(summary.files);
        Ok(spec)
    }

    fn render(spec: &Spec, _config: &Value) -> Option<Result<Vec<Value>, ProviderError>> {
        Some(Ok(if spec.pod.is_some() {
            Vec::new()
        } else {
            vec![helper_pod(spec)]
        }))
    }

    async fn read(
        &self,
        ctx: &Ctx,
        id: &str,
        prior: Option<&Spec>,
    ) -> Result<Option<Live<Self>>, ProviderError> {
        let Some(prior) = prior else {
            return Err(ProviderError::Unsupported(format!(
                "{}: cannot be imported: what was copied is known only to the state that copied it; apply the stack instead",
                Self::KIND
            )));
        };
        parse_id(id)?;
        let client = connect::client(ctx, &prior.cluster).await?;
        if !claim_exists(&client, prior).await? {
            return Ok(None);
        }
        recorded(id, prior).map(Some)
    }

    async fn create(&self, ctx: &Ctx, spec: &Spec) -> Result<Live<Self>, ProviderError> {
        self.copy(ctx, spec, false).await
    }

    async fn update(
        &self,
        ctx: &Ctx,
        id: &str,
        prior: &Spec,
        spec: &Spec,
    ) -> Result<Live<Self>, ProviderError> {
        // Only how the files get there or what destroy does changed (pod, image,
        // delete_on_destroy, where the source lives): the volume already holds them.
        if spec.content_hash.is_some()
            && spec.content_hash == prior.content_hash
            && spec.files == prior.files
        {
            return recorded(id, spec);
        }
        self.copy(ctx, spec, true).await
    }

    async fn delete(
        &self,
        ctx: &Ctx,
        _id: &str,
        prior: Option<&Spec>,
    ) -> Result<(), ProviderError> {
        let Some(prior) = prior else { return Ok(()) };
        if !prior.delete_on_destroy {
            ctx.progress("keeping the copied files (delete_on_destroy is off)");
            return Ok(());
        }
        let client = connect::client(ctx, &prior.cluster).await?;
        if !claim_exists(&client, prior).await? {
            return Ok(());
        }
        in_pod(ctx, &client, prior, Work::Remove).await.map(|_| ())
    }

    async fn health(
        &self,
        ctx: &Ctx,
        _id: &str,
        prior: Option<&Spec>,
    ) -> Result<Option<Health>, ProviderError> {
        let Some(prior) = prior else { return Ok(None) };
        let client = connect::client(ctx, &prior.cluster).await?;
        if !claim_exists(&client, prior).await? {
            return Ok(Some(Health {
                ready: false,
                summary: format!("claim {}/{} is gone", prior.namespace, prior.claim),
            }));
        }
        let hash = prior.content_hash.as_deref().unwrap_or_default();
        Ok(Some(Health {
            ready: true,
            summary: format!(
                "copied {} (hash {}…)",
                plural(
                    usize::try_from(prior.files.unwrap_or(0)).unwrap_or(0),
                    "file"
                ),
                hash.get(..12).unwrap_or(hash)
            ),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::schema_mismatches;

    fn base(source: &str) -> Spec {
        Spec {
            cluster: json!({"kubeconfig": "/nonexistent/kubeconfig"}),
            source: source.into(),
            claim: "fileserver".into(),
            namespace: "default".into(),
            path: "/datasets".into(),
            pod: None,
            image: "busybox:1.36".into(),
            content_hash: None,
            files: None,
            delete_on_destroy: false,
        }
    }

    fn write(dir: &Path, rel: &str, content: &str) {
        let path = dir.join(rel);
        std::fs::create_dir_all(path.parent().expect("has a parent")).expect("mkdir");
        std::fs::write(path, content).expect("write");
    }

    /// A small dataset: nested directories, an empty one and an in-tree link.
    fn dataset() -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        write(dir.path(), "train/shard-1.jsonl", "{\"x\":1}\n");
        write(dir.path(), "train/shard-0.jsonl", "{\"x\":0}\n");
        write(dir.path(), "README.md", "# data\n");
        std::fs::create_dir(dir.path().join("empty")).expect("mkdir");
        #[cfg(unix)]
        std::os::unix::fs::symlink("train/shard-0.jsonl", dir.path().join("latest"))
            .expect("symlink");
        dir
    }

    #[test]
    fn schema_matches_spec_and_outputs() {
        let full = Spec {
            pod: Some(PodRef {
                name: "redis-leader".into(),
                mount_path: "/mnt/fileserver".into(),
            }),
            content_hash: Some("ab".into()),
            files: Some(2),
            delete_on_destroy: true,
            ..base("data")
        };
        let outputs = Outputs {
            content_hash: "ab".into(),
            files: 2,
            bytes: 10,
            copied_at: "2026-01-01T00:00:00Z".into(),
        };
        assert_eq!(
            schema_mismatches::<Dataset>(&full, &outputs),
            Vec::<String>::new()
        );
    }

    #[test]
    fn marking() {
        let schema = Dataset::schema();
        let force_new: Vec<&str> = schema
            .fields
            .iter()
            .filter(|f| f.force_new)
            .map(|f| f.name)
            .collect();
        assert_eq!(force_new, ["cluster", "claim", "namespace", "path"]);
        // A new hash is an in-place update: copy again.
        assert!(schema.field("content_hash").is_some_and(|f| !f.force_new));
    }

    #[test]
    fn hash_is_stable_and_follows_content() -> Result<(), ProviderError> {
        let dir = dataset();
        let first = summarize(dir.path())?;
        assert_eq!(summarize(dir.path())?, first, "stable across runs");
        assert_eq!(first.files, 3);
        assert_eq!(first.bytes, 8 + 8 + 7);
        assert_eq!(first.content_hash.len(), 64);

        // Another directory with the same content, created in another order, hashes
        // alike: listing order does not matter.
        let other = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(other.path().join("empty")).expect("mkdir");
        #[cfg(unix)]
        std::os::unix::fs::symlink("train/shard-0.jsonl", other.path().join("latest"))
            .expect("symlink");
        write(other.path(), "README.md", "# data\n");
        write(other.path(), "train/shard-0.jsonl", "{\"x\":0}\n");
        write(other.path(), "train/shard-1.jsonl", "{\"x\":1}\n");
        assert_eq!(summarize(other.path())?, first);

        write(dir.path(), "train/shard-1.jsonl", "{\"x\":2}\n");
        let changed = summarize(dir.path())?;
        assert_ne!(
            changed.content_hash, first.content_hash,
            "a changed file changes the hash"
        );
        assert_eq!((changed.files, changed.bytes), (first.files, first.bytes));

        write(dir.path(), "val/shard-0.jsonl", "");
        let added = summarize(dir.path())?;
        assert_ne!(
            added.content_hash, changed.content_hash,
            "an added (even empty) file changes the hash"
        );
        assert_eq!(added.files, 4);

        std::fs::rename(
            dir.path().join("val/shard-0.jsonl"),
            dir.path().join("val/shard-9.jsonl"),
        )
        .expect("rename");
        assert_ne!(
            summarize(dir.path())?.content_hash,
            added.content_hash,
            "a renamed file changes the hash"
        );

        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let before = summarize(dir.path())?;
            std::fs::set_permissions(
                dir.path().join("README.md"),
                std::fs::Permissions::from_mode(0o600),
            )
            .expect("chmod");
            assert_ne!(
                summarize(dir.path())?.content_hash,
                before.content_hash,
                "a mode change changes the hash"
            );
        }
        Ok(())
    }

    #[test]
    fn prepare_fills_the_hash_and_count() -> Result<(), ProviderError> {
        let dir = dataset();
        let source = dir.path().display().to_string();
        let prepared = Dataset::prepare(base(&source))?;
        let summary = summarize(dir.path())?;
        assert_eq!(prepared.content_hash, Some(summary.content_hash));
        assert_eq!(prepared.files, Some(3));
        assert_eq!(
            Spec {
                content_hash: None,
                files: None,
                ..prepared
            },
            base(&source)
        );

        let missing = Dataset::prepare(base(&dir.path().join("nope").display().to_string()))
            .expect_err("no such directory");
        assert!(
            matches!(&missing, ProviderError::Invalid { field, message } if field == "source" && message.contains("does not exist")),
            "{missing}"
        );
        let file = Dataset::prepare(base(&dir.path().join("README.md").display().to_string()))
            .expect_err("a file");
        assert!(
            file.to_string().contains("is a file, not a directory"),
            "{file}"
        );
        Ok(())
    }

    /// The problem `prepare` reports, at its field.
    fn invalid(e: ProviderError) -> (String, String) {
        match e {
            ProviderError::Invalid { field, message } => (field, message),
            other => panic!("want a problem at a field, got {other:?}"),
        }
    }

    fn here(rel: &str) -> String {
        std::env::current_dir()
            .expect("cwd")
            .join(rel)
            .display()
            .to_string()
    }

    #[test]
    fn dataset_source_that_does_not_exist_is_refused_at_source() {
        let rel = "no-such-dataset-directory";
        let (field, message) = invalid(Dataset::prepare(base(rel)).expect_err("no such directory"));
        assert_eq!(field, "source");
        assert_eq!(
            message,
            format!(
                "\"{rel}\" does not exist: no directory at {} (relative paths start at the stack's directory)",
                here(rel)
            )
        );
        let dir = tempfile::tempdir().expect("tempdir");
        let absolute = dir.path().join("gone").display().to_string();
        let (_, message) = invalid(Dataset::prepare(base(&absolute)).expect_err("gone"));
        assert_eq!(
            message,
            format!("{absolute:?} does not exist: no directory at {absolute}"),
            "no word about relative paths for an absolute one"
        );
    }

    #[test]
    fn dataset_source_that_is_a_file_is_refused_at_source() {
        // Tests run in the crate's directory, which has this file.
        let (field, message) = invalid(Dataset::prepare(base("Cargo.toml")).expect_err("a file"));
        assert_eq!(field, "source");
        assert_eq!(
            message,
            format!(
                "\"Cargo.toml\" is a file, not a directory ({}); give the directory to copy (relative paths start at the stack's directory)",
                here("Cargo.toml")
            )
        );
    }

    #[cfg(unix)]
    #[test]
    fn dataset_source_that_cannot_be_read_is_refused_at_source() {
        use std::os::unix::fs::PermissionsExt;
        let dir = dataset();
        let locked = dir.path().join("train");
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).expect("chmod");
        // Root reads any directory: nothing to test then.
        let readable = std::fs::read_dir(&locked).is_ok();
        let source = locked.display().to_string();
        let top = Dataset::prepare(base(&source));
        let inner = Dataset::prepare(base(&dir.path().display().to_string()));
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        // What root meets too: a path through a file cannot be looked at.
        let through = dir.path().join("README.md/train").display().to_string();
        let (field, message) =
            invalid(Dataset::prepare(base(&through)).expect_err("through a file"));
        assert_eq!(field, "source");
        assert!(
            message.starts_with(&format!("{through:?} cannot be read: {through}: ")),
            "{message}"
        );
        if readable {
            return;
        }
        let (field, message) = invalid(top.expect_err("unreadable"));
        assert_eq!(field, "source");
        assert!(
            message.starts_with(&format!("{source:?} cannot be read: {source}: ")),
            "{message}"
        );
        // A directory inside the source that cannot be listed is the source's problem.
        let (field, message) = invalid(inner.expect_err("unreadable inside"));
        assert_eq!(field, "source");
        assert!(message.contains(&source), "{message}");
    }

    #[test]
    fn dataset_source_not_known_until_apply_is_hashed_then() -> Result<(), ProviderError> {
        use crate::protocol::UNKNOWN;
        use crate::Resource;
        let prepared = Dataset::prepare(base(UNKNOWN))?;
        assert_eq!(prepared.content_hash.as_deref(), Some(UNKNOWN));
        assert_eq!(prepared.files, None);
        // Through the adapter, with the cluster and the pod of the same stack unknown
        // (as at `terrain validate` and `plan`): the source is still read and hashed.
        let dir = dataset();
        let adapter = crate::Adapter::new(Dataset);
        let mut spec =
            serde_json::to_value(base(&dir.path().display().to_string())).expect("encodes");
        spec["cluster"] = json!(UNKNOWN);
        spec["pod"] = json!({"name": UNKNOWN, "mount_path": "/mnt/fileserver"});
        let prepared = adapter.prepare(spec.clone())?;
        assert_eq!(prepared["cluster"], json!(UNKNOWN));
        assert_eq!(prepared["files"], json!(3));
        assert_eq!(
            prepared["content_hash"],
            json!(summarize(dir.path())?.content_hash)
        );
        spec["source"] = json!("no-such-dataset-directory");
        let e = adapter.prepare(spec).expect_err("missing");
        assert!(
            matches!(&e, ProviderError::Invalid { field, .. } if field == "source"),
            "{e}"
        );
        Ok(())
    }

    #[cfg(unix)]
    #[test]
    fn links_leaving_the_source_are_refused() {
        let outside = tempfile::tempdir().expect("tempdir");
        write(outside.path(), "secret", "x");
        let cases = [
            (outside.path().join("secret"), "is absolute"),
            (
                Path::new("../..")
                    .join(outside.path().file_name().expect("named"))
                    .join("secret"),
                "points outside the source",
            ),
            (PathBuf::from("missing"), "points at nothing"),
        ];
        for (target, why) in cases {
            let dir = dataset();
            std::os::unix::fs::symlink(&target, dir.path().join("train/link")).expect("symlink");
            let e = summarize(dir.path()).expect_err("refused");
            assert!(e.to_string().contains(why), "{}: {e}", target.display());
            let e = write_archive(dir.path(), Vec::new()).expect_err("refused");
            assert!(e.to_string().contains(why), "{}: {e}", target.display());
        }
    }

    #[test]
    fn archive_reads_back_with_relative_paths() -> Result<(), ProviderError> {
        let dir = dataset();
        let long = format!("{}/{}.bin", "d".repeat(80), "f".repeat(90));
        write(dir.path(), &long, "long name");
        let mut bytes = Vec::new();
        let (summary, archived) = write_archive(dir.path(), &mut bytes)?;
        assert_eq!(
            summary,
            summarize(dir.path())?,
            "the archive hashes like prepare"
        );

        let mut seen = Vec::new();
        let mut archive = tar::Archive::new(bytes.as_slice());
        for entry in archive.entries().expect("entries") {
            let mut entry = entry.expect("entry");
            let path = entry.path().expect("path").display().to_string();
            let mut content = String::new();
            let kind = entry.header().entry_type();
            if kind.is_file() {
                entry.read_to_string(&mut content).expect("content");
            } else if kind.is_symlink() {
                content = entry
                    .link_name()
                    .expect("link")
                    .expect("a target")
                    .display()
                    .to_string();
            }
            seen.push((path, content));
        }
        #[allow(unused_mut)] // only unix has the link
        let mut want = vec![
            ("README.md".to_string(), "# data\n".to_string()),
            ("d".repeat(80), String::new()),
            (long.clone(), "long name".to_string()),
            ("empty".to_string(), String::new()),
            ("train".to_string(), String::new()),
            ("train/shard-0.jsonl".to_string(), "{\"x\":0}\n".to_string()),
            ("train/shard-1.jsonl".to_string(), "{\"x\":1}\n".to_string()),
        ];
        #[cfg(unix)]
        want.insert(4, ("latest".to_string(), "train/shard-0.jsonl".to_string()));
        assert_eq!(seen, want);
        let mut files: Vec<&str> = vec![
            "README.md",
            &long,
            "train/shard-0.jsonl",
            "train/shard-1.jsonl",
        ];
        #[cfg(unix)]
        files.push("latest");
        assert_eq!(
            archived,
            files
                .into_iter()
                .map(str::to_string)
                .collect::<BTreeSet<_>>()
        );
        Ok(())
    }

    #[tokio::test]
    async fn the_archive_streams_through_the_channel_in_chunks() -> Result<(), ProviderError> {
        let dir = dataset();
        write(dir.path(), "big.bin", &"x".repeat(3 * CHUNK));
        let (tx, mut rx) = mpsc::channel(2);
        let source = dir.path().to_path_buf();
        let producer = tokio::task::spawn_blocking(move || {
            write_archive(
                &source,
                ChannelWriter {
                    tx,
                    buf: Vec::new(),
                },
            )
        });
        let mut streamed = Vec::new();
        let mut chunks = 0;
        while let Some(chunk) = rx.recv().await {
            chunks += 1;
            streamed.extend(chunk);
        }
        let (summary, _) = producer.await.expect("producer ran")?;
        assert!(chunks > 3, "{chunks} chunks");

        // A receiver that goes away (the exec ended) stops the archive as a closed
        // stream, which the exec's own error then explains.
        let (tx, rx) = mpsc::channel(1);
        drop(rx);
        let source = dir.path().to_path_buf();
        let e = tokio::task::spawn_blocking(move || {
            write_archive(
                &source,
                ChannelWriter {
                    tx,
                    buf: Vec::new(),
                },
            )
        })
        .await
        .expect("producer ran")
        .expect_err("nobody reads");
        assert!(closed_by_pod(&e), "{e}");
        assert!(!closed_by_pod(&ProviderError::io(
            "read",
            "x",
            io::Error::other("disk")
        )));
        let mut direct = Vec::new();
        assert_eq!(write_archive(dir.path(), &mut direct)?.0, summary);
        assert_eq!(streamed, direct);
        Ok(())
    }

    #[test]
    fn destinations_and_stale_files() {
        for (mount, path, want) in [
            ("/data", "/", "/data"),
            ("/data", "/datasets", "/data/datasets"),
            ("/data/", "datasets/", "/data/datasets"),
            ("/mnt/fileserver", "a/b", "/mnt/fileserver/a/b"),
            ("/", "/", "/"),
            ("/", "x", "/x"),
        ] {
            assert_eq!(destination(mount, path), want, "{mount} + {path}");
        }
        let archived: BTreeSet<String> = ["a", "d/b"].into_iter().map(str::to_string).collect();
        let listing = "/data/x/a\n/data/x/d/b\n/data/x/d/old\n/data/x/old.txt\n/data/xy/a\n";
        assert_eq!(
            stale_files(listing, "/data/x", &archived),
            ["/data/x/d/old", "/data/x/old.txt"]
        );
        assert_eq!(stale_files("/a\n/d/b\n/c\n", "/", &archived), ["/c"]);
    }

    #[test]
    fn ids_keep_the_copy_time_and_size() {
        let spec = base("d");
        let id = id_of(&spec, "2026-11-21T02:38:34Z", 1234);
        assert_eq!(id, "default/fileserver:/datasets@2026-11-21T02:38:34Z+1234");
        assert_eq!(
            parse_id(&id).expect("parses"),
            ("2026-11-21T02:38:34Z".to_string(), 1234)
        );
        for bad in ["", "default/fileserver:/datasets", "a@b", "a@b+x"] {
            let e = parse_id(bad).expect_err(bad);
            assert!(
                e.to_string()
                    .contains("expected NAMESPACE/CLAIM:PATH@COPIED_AT+BYTES"),
                "{e}"
            );
        }
        let now = now_rfc3339();
        assert!(
            now.len() == 20 && now.ends_with('Z') && now.as_bytes()[10] == b'T',
            "{now}"
        );
    }

    #[test]
    fn helper_pod_mounts_the_claim_and_is_rendered_only_when_used() {
        let spec = base("d");
        let pod = helper_pod(&spec);
        let name = pod["metadata"]["name"].as_str().expect("named");
        assert!(
            name.starts_with("terrain-dataset-") && name.len() == "terrain-dataset-".len() + 8,
            "{name}"
        );
        assert_eq!(
            helper_name(&spec),
            helper_name(&base("elsewhere")),
            "stable: the source does not name it"
        );
        assert_ne!(
            helper_name(&spec),
            helper_name(&Spec {
                path: "/other".into(),
                ..base("d")
            })
        );
        assert_eq!(
            pod["metadata"]["labels"]["app.kubernetes.io/managed-by"],
            "terrain"
        );
        assert_eq!(pod["spec"]["restartPolicy"], "Never");
        assert_eq!(
            pod["spec"]["containers"][0]["command"],
            json!(["sleep", "3600"])
        );
        assert_eq!(pod["spec"]["containers"][0]["image"], "busybox:1.36");
        assert_eq!(
            pod["spec"]["containers"][0]["volumeMounts"][0]["mountPath"],
            HELPER_MOUNT
        );
        assert_eq!(
            pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"],
            "fileserver"
        );

        let rendered = Dataset::render(&spec, &Value::Null)
            .expect("renders")
            .expect("valid");
        assert_eq!(rendered, vec![pod]);
        let through_pod = Spec {
            pod: Some(PodRef {
                name: "redis-leader".into(),
                mount_path: "/mnt/fileserver".into(),
            }),
            ..base("d")
        };
        assert_eq!(
            Dataset::render(&through_pod, &Value::Null)
                .expect("renders")
                .expect("valid"),
            Vec::<Value>::new()
        );
    }

    #[test]
    fn validation_table() {
        let pod = |name: &str, mount: &str| {
            Some(PodRef {
                name: name.into(),
                mount_path: mount.into(),
            })
        };
        let cases: Vec<(Spec, &str, &str)> = vec![
            (base("d"), "", ""),
            (
                Spec {
                    pod: pod("redis-leader", "/mnt/fileserver"),
                    delete_on_destroy: true,
                    ..base("d")
                },
                "",
                "",
            ),
            (
                Spec {
                    cluster: json!(3),
                    ..base("d")
                },
                "cluster",
                "cluster reference",
            ),
            (
                Spec {
                    source: String::new(),
                    ..base("d")
                },
                "source",
                "must not be empty",
            ),
            (
                Spec {
                    claim: "File_Server".into(),
                    ..base("d")
                },
                "claim",
                "DNS-1123",
            ),
            (
                Spec {
                    namespace: "a.b".into(),
                    ..base("d")
                },
                "namespace",
                "DNS-1123",
            ),
            (
                Spec {
                    path: "/datasets/../..".into(),
                    ..base("d")
                },
                "path",
                "climbs out",
            ),
            (
                Spec {
                    pod: pod("Redis", "/mnt"),
                    ..base("d")
                },
                "pod.name",
                "DNS-1123",
            ),
            (
                Spec {
                    pod: pod("redis", "mnt"),
                    ..base("d")
                },
                "pod.mount_path",
                "not an absolute path",
            ),
            (
                Spec {
                    image: String::new(),
                    ..base("d")
                },
                "image",
                "must not be empty",
            ),
            (
                Spec {
                    content_hash: Some("abc".into()),
                    ..base("d")
                },
                "content_hash",
                "do not set it",
            ),
            (
                Spec {
                    files: Some(1),
                    ..base("d")
                },
                "files",
                "do not set it",
            ),
            (
                Spec {
                    path: "/".into(),
                    delete_on_destroy: true,
                    ..base("d")
                },
                "delete_on_destroy",
                "whole volume",
            ),
        ];
        for (spec, path, want) in cases {
            let problems = Dataset::validate(&spec, &Value::Null);
            if want.is_empty() {
                assert!(problems.is_empty(), "{spec:?}: {problems:?}");
            } else {
                assert!(
                    problems
                        .iter()
                        .any(|p| p.path.join(".") == path && p.message.contains(want)),
                    "want {path}: {want}, got {problems:?}"
                );
            }
        }
    }

    #[tokio::test]
    async fn an_update_that_keeps_the_content_does_not_copy() -> Result<(), ProviderError> {
        let dir = dataset();
        let prior = Dataset::prepare(base(&dir.path().display().to_string()))?;
        let id = id_of(&prior, "2026-11-21T02:38:34Z", 23);
        // The cluster cannot be reached: a copy would fail.
        let spec = Spec {
            delete_on_destroy: true,
            image: "busybox:1.37".into(),
            ..prior.clone()
        };
        let live = Dataset
            .update(
                &Ctx::new("kubernetes_dataset.d", json!({})),
                &id,
                &prior,
                &spec,
            )
            .await?;
        assert_eq!((live.id.as_str(), &live.spec), (id.as_str(), &spec));
        assert_eq!(
            live.outputs,
            Outputs {
                content_hash: prior.content_hash.clone().expect("prepared"),
                files: 3,
                bytes: 23,
                copied_at: "2026-11-21T02:38:34Z".into()
            }
        );

        write(dir.path(), "new.txt", "n");
        let changed = Dataset::prepare(spec.clone())?;
        let e = Dataset
            .update(
                &Ctx::new("kubernetes_dataset.d", json!({})),
                &id,
                &prior,
                &changed,
            )
            .await
            .expect_err("copies, and cannot");
        assert!(e.to_string().contains("kubeconfig"), "{e}");
        Ok(())
    }

    #[test]
    fn a_failed_cleanup_keeps_both_errors() {
        let first = ProviderError::api(
            "kubernetes exec tar",
            0,
            "NonZeroExitCode",
            "tar: short read",
        );
        let cleanup = ProviderError::Timeout {
            call: "kubernetes delete".into(),
            waiting_for: "Pod default/h to be deleted".into(),
            after: Duration::from_secs(120),
        };
        let e = with_cleanup_error(first, "removing helper pod default/h", cleanup);
        assert_eq!(
            e.to_string(),
            "kubernetes exec tar failed: NonZeroExitCode: tar: short read; removing helper pod default/h failed too: kubernetes delete: timed out after 120s waiting for Pod default/h to be deleted"
        );
        assert!(matches!(e, ProviderError::Api { .. }));
    }
}
