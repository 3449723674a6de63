//! The `kubernetes_queue_items` kind: work items pushed onto a Redis list, the queue
//! batch workers pop from. The Redis is a `kubernetes_redis` pod, reached by
//! port-forward, or an external server given by address.
//!
//! State semantics: workers popping items is consumption, not drift, so `read` never
//! compares the queue with the stack. It trusts what was pushed (the prior `resolved`)
//! for as long as the Redis pod that received it exists with the uid it had then; a
//! missing or restarted pod (an empty Redis) reads as gone, so the next apply pushes
//! everything again. An update pushes only items not pushed before and takes items that
//! left the stack back out of the list if they are still queued; a replace (`-/+`)
//! removes the old items and pushes all of them again.
//!
//! Ids: `pod/<namespace>/<pod>:<port>/<list>@<pod uid>` for a Redis reached through its
//! pod, `address/<host:port>/<list>` for an external one (whose restarts cannot be seen).

use std::collections::HashSet;
use std::fmt;
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use async_trait::async_trait;
use futures::future::BoxFuture;
use futures::FutureExt;
use k8s_openapi::api::core::v1::Pod;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::dataset::{at_field, check_local_dir};
use super::resp::{Connection, RespError};
use super::{apply, check_cluster, connect};
use crate::protocol::{is_unknown, UNKNOWN};
use crate::schema::Fields;
use crate::{Ctx, Health, Invalid, Kind, Live, ProviderError};

/// The kind `kubernetes_queue_items`.
#[derive(Debug, Clone, Copy, Default)]
pub struct QueueItems;

/// How long one Redis session (connect, push or remove, close) may take.
const REDIS_TIMEOUT: Duration = Duration::from_secs(300);
/// How long closing a port-forward may take before it is left to finish on its own.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

fn default_glob() -> String {
    "**/*".into()
}

/// Items listed from a local directory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct FromDir {
    /// A local directory; relative paths start at the stack's directory.
    pub dir: String,
    /// Which files become items (`**` spans directories).
    #[serde(default = "default_glob")]
    pub glob: String,
    /// Prepended to each file's path relative to `dir`.
    #[serde(default)]
    pub prefix: String,
}

/// What a stack writes for a `kubernetes_queue_items`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    #[terrain(doc = crate::kubernetes::CLUSTER_DOC, force_new)]
    pub cluster: Value,
    /// The Redis to push to: a kubernetes_redis endpoint
    /// ("${kubernetes_redis.queue.endpoint}"), reached by port-forward, or { address =
    /// "host:port" }.
    #[terrain(force_new)]
    pub redis: Value,
    /// The Redis list the items are pushed onto (RPUSH), e.g. "datasets".
    #[terrain(force_new)]
    pub list: String,
    /// Items to push, in order, before those listed by `from`.
    #[serde(default)]
    pub items: Vec<String>,
    /// Items listed from local files: prefix + relative path of each matching file, sorted.
    pub from: Option<FromDir>,
    /// The Redis password (AUTH), if it has one.
    #[terrain(sensitive)]
    pub password: Option<String>,
    /// Computed when planning (items, then the files `from` lists); not to be set in
    /// stacks.
    pub resolved: Option<Vec<String>>,
}

/// What `kubernetes_queue_items` reports after apply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Outputs {
    /// The items pushed so far, in the stack's order.
    pub pushed: Vec<String>,
    /// How many items were pushed.
    pub count: i64,
    /// The uid of the Redis pod that received them (empty for an external Redis).
    pub redis_pod_uid: String,
}

/// Where the Redis is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A pod, reached by port-forward: a `kubernetes_redis` endpoint.
    Pod {
        namespace: String,
        pod: String,
        port: u16,
    },
    /// `host:port`, reached directly.
    Address(String),
}

const REDIS_SHAPE: &str = "expected a kubernetes_redis endpoint (\"${kubernetes_redis.queue.endpoint}\", { namespace, pod, port }) or { address = \"host:port\" }";

impl Target {
    /// The target a `redis` value names.
    pub fn of(redis: &Value) -> Result<Self, String> {
        let Some(map) = redis.as_object() else {
            return Err(REDIS_SHAPE.to_string());
        };
        let text = |key: &str| {
            map.get(key)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
        };
        match (map.get("address"), map.get("pod")) {
            (Some(_), Some(_)) => Err("give either `address` or a pod endpoint, not both".into()),
            (Some(_), None) => {
                let address = text("address").ok_or("address: expected \"host:port\"")?;
                match address.rsplit_once(':') {
                    Some((host, port))
                        if !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0) =>
                    {
                        Ok(Target::Address(address.to_string()))
                    }
                    _ => Err(format!("address: {address:?} is not \"host:port\"")),
                }
            }
            (None, Some(_)) => {
                let pod = text("pod").ok_or("pod: expected the Redis pod's name")?;
                let port = match map.get("port") {
                    Some(Value::Number(n)) => n.as_u64().and_then(|p| u16::try_from(p).ok()),
                    Some(Value::String(s)) => s.parse().ok(),
                    _ => None,
                }
                .filter(|p| *p > 0)
                .ok_or("port: expected the Redis port (1-65535)")?;
                let namespace = match map.get("namespace") {
                    None | Some(Value::Null) => "default",
                    Some(_) => text("namespace").ok_or("namespace: expected a namespace name")?,
                };
                Ok(Target::Pod {
                    namespace: namespace.to_string(),
                    pod: pod.to_string(),
                    port,
                })
            }
            (None, None) => Err(REDIS_SHAPE.to_string()),
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Pod {
                namespace,
                pod,
                port,
            } => write!(f, "pod {namespace}/{pod}:{port}"),
            Target::Address(a) => write!(f, "{a}"),
        }
    }
}

/// The id of the items pushed onto `list` at `target`, whose pod (if any) had `uid`.
fn id_of(target: &Target, list: &str, uid: &str) -> String {
    match target {
        Target::Pod {
            namespace,
            pod,
            port,
        } => format!("pod/{namespace}/{pod}:{port}/{list}@{uid}"),
        Target::Address(a) => format!("address/{a}/{list}"),
    }
}

/// The pod uid an id recorded (`None` for an external Redis or a malformed id).
fn recorded_uid(id: &str) -> Option<&str> {
    id.strip_prefix("pod/")
        .and_then(|rest| rest.rsplit_once('@'))
        .map(|(_, uid)| uid)
        .filter(|u| !u.is_empty())
}

/// A glob over relative paths: `**` as a whole segment spans any number of directories;
/// `*` and `?` stay within one segment; `[abc]`, `[a-z]` and `[!x]` match one character.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Glob {
    segments: Vec<Segment>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    AnyDirs,
    Pattern(Vec<Token>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Char(char),
    Any,
    One,
    Class {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
}

impl Glob {
    /// Parses `pattern`, saying what is wrong with it.
    pub fn parse(pattern: &str) -> Result<Self, String> {
        if pattern.is_empty() {
            return Err("must not be empty; \"**/*\" matches every file".into());
        }
        if pattern.starts_with('/') {
            return Err(format!(
                "{pattern:?} is absolute; globs are relative to `dir`"
            ));
        }
        let segments = pattern
            .split('/')
            .map(|segment| Self::segment(pattern, segment))
            .collect::<Result<_, _>>()?;
        Ok(Self { segments })
    }

    fn segment(pattern: &str, segment: &str) -> Result<Segment, String> {
        if segment == "**" {
            return Ok(Segment::AnyDirs);
        }
        if segment.contains("**") {
            return Err(format!(
                "{pattern:?}: `**` must be a whole path segment (\"data/**/*.json\")"
            ));
        }
        let mut tokens = Vec::new();
        let mut chars = segment.chars();
        while let Some(c) = chars.next() {
            tokens.push(match c {
                '*' => Token::Any,
                '?' => Token::One,
                '[' => {
                    let mut body: Vec<char> = Vec::new();
                    loop {
                        match chars.next() {
                            None => return Err(format!("{pattern:?}: unclosed `[`")),
                            // A `]` right after `[` or `[!` is a literal.
                            Some(']') if !(body.is_empty() || body == ['!']) => break,
                            Some(c) => body.push(c),
                        }
                    }
                    let negated = body.first() == Some(&'!');
                    let body = if negated { &body[1..] } else { &body[..] };
                    let mut ranges = Vec::new();
                    let mut i = 0;
                    while i < body.len() {
                        if i + 2 < body.len() && body[i + 1] == '-' {
                            ranges.push((body[i], body[i + 2]));
                            i += 3;
                        } else {
                            ranges.push((body[i], body[i]));
                            i += 1;
                        }
                    }
                    Token::Class { negated, ranges }
                }
                c => Token::Char(c),
            });
        }
        Ok(Segment::Pattern(tokens))
    }

    /// Whether `path` (relative, `/`-separated) matches.
    pub fn matches(&self, path: &str) -> bool {
        let parts: Vec<&str> = path.split('/').collect();
        match_segments(&self.segments, &parts)
    }
}

fn match_segments(pattern: &[Segment], parts: &[&str]) -> bool {
    match pattern.split_first() {
        None => parts.is_empty(),
        Some((Segment::AnyDirs, rest)) => {
            match_segments(rest, parts)
                || (!parts.is_empty() && match_segments(pattern, &parts[1..]))
        }
        Some((Segment::Pattern(tokens), rest)) => {
            parts.split_first().is_some_and(|(first, others)| {
                let chars: Vec<char> = first.chars().collect();
                match_tokens(tokens, &chars) && match_segments(rest, others)
            })
        }
    }
}

fn match_tokens(tokens: &[Token], text: &[char]) -> bool {
    match tokens.split_first() {
        None => text.is_empty(),
        Some((Token::Any, rest)) => (0..=text.len()).any(|skip| match_tokens(rest, &text[skip..])),
        Some((token, rest)) => text.split_first().is_some_and(|(c, after)| {
            let hit = match token {
                Token::Char(want) => want == c,
                Token::One => true,
                Token::Class { negated, ranges } => {
                    ranges.iter().any(|(lo, hi)| (lo..=hi).contains(&c)) != *negated
                }
                Token::Any => false,
            };
            hit && match_tokens(rest, after)
        }),
    }
}

/// The regular files under `dir` (symbolic links to files count; linked directories
/// are not entered), as sorted `/`-separated paths relative to `dir`.
fn files_under(dir: &Path) -> Result<Vec<String>, ProviderError> {
    let mut out = Vec::new();
    let mut pending = vec![(dir.to_path_buf(), String::new())];
    while let Some((at, rel)) = pending.pop() {
        let entries = std::fs::read_dir(&at)
            .map_err(|e| ProviderError::io("list directory", at.display().to_string(), e))?;
        for entry in entries {
            let entry = entry
                .map_err(|e| ProviderError::io("list directory", at.display().to_string(), e))?;
            let path = entry.path();
            let name = entry.file_name().into_string().map_err(|name| {
                ProviderError::Unsupported(format!(
                    "from.dir: {:?} is not UTF-8 and cannot become a queue item",
                    at.join(name)
                ))
            })?;
            let rel = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            let kind = entry
                .file_type()
                .map_err(|e| ProviderError::io("inspect", path.display().to_string(), e))?;
            if kind.is_dir() {
                pending.push((path, rel));
            } else if kind.is_file()
                || (kind.is_symlink() && std::fs::metadata(&path).is_ok_and(|m| m.is_file()))
            {
                out.push(rel);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// `prefix + path` of each file `from` matches, sorted, and how many files `dir`
/// holds in all.
///
/// Fails when `dir` cannot be listed or the glob does not parse, at the field at fault.
fn listed(from: &FromDir) -> Result<(Vec<String>, usize), ProviderError> {
    let glob = Glob::parse(&from.glob).map_err(|m| ProviderError::invalid("from.glob", m))?;
    let files = files_under(Path::new(&from.dir)).map_err(|e| at_field("from.dir", e))?;
    let total = files.len();
    let matched = files
        .into_iter()
        .filter(|rel| glob.matches(rel))
        .map(|rel| format!("{}{rel}", from.prefix))
        .collect();
    Ok((matched, total))
}

/// `items`, then `listed`; an item already listed is not listed again.
fn merged(items: &[String], listed: Vec<String>) -> Vec<String> {
    let mut seen = HashSet::new();
    items
        .iter()
        .cloned()
        .chain(listed)
        .filter(|item| seen.insert(item.clone()))
        .collect()
}

/// The items to push, in order: `items`, then `prefix + path` of each file `from`
/// matches; an item already listed is not listed again.
pub fn resolve(items: &[String], from: Option<&FromDir>) -> Result<Vec<String>, ProviderError> {
    let listed = match from {
        Some(from) => listed(from)?.0,
        None => Vec::new(),
    };
    Ok(merged(items, listed))
}

/// What an update does, given what was pushed and what the stack wants: the items to
/// push (in the stack's order) and the ones to take back out.
fn changes(pushed: &[String], wanted: &[String]) -> (Vec<String>, Vec<String>) {
    let before: HashSet<&String> = pushed.iter().collect();
    let after: HashSet<&String> = wanted.iter().collect();
    let push = wanted
        .iter()
        .filter(|i| !before.contains(i))
        .cloned()
        .collect();
    let remove = pushed
        .iter()
        .filter(|i| !after.contains(i))
        .cloned()
        .collect();
    (push, remove)
}

/// A byte stream that can carry a Redis connection.
trait Duplex: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Duplex for T {}

/// A port-forwarded stream that fails its next read once the API server reports an
/// error for the port (nothing listening there): without this the client would wait
/// for a reply that never comes.
struct Forwarded {
    stream: tokio::io::DuplexStream,
    error: Option<BoxFuture<'static, Option<String>>>,
}

impl AsyncRead for Forwarded {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        if let Some(error) = this.error.as_mut() {
            if let Poll::Ready(message) = error.as_mut().poll(cx) {
                this.error = None;
                if let Some(message) = message {
                    return Poll::Ready(Err(std::io::Error::other(format!(
                        "port-forward: {message}"
                    ))));
                }
            }
        }
        Pin::new(&mut this.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Forwarded {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// An open Redis connection, with the port-forward carrying it.
struct Redis {
    conn: Connection<Box<dyn Duplex>>,
    forward: Option<kube::api::Portforwarder>,
    target: Target,
}

impl Redis {
    fn failed(&self, e: RespError) -> ProviderError {
        redis_failed(&self.target, e)
    }

    async fn close(self) {
        drop(self.conn);
        if let Some(forward) = self.forward {
            // The forwarder ends once the server acknowledges the close; if it does
            // not, its task finishes on its own when the connection drops.
            let _ = tokio::time::timeout(CLOSE_GRACE, forward.join()).await;
        }
    }
}

fn redis_failed(target: &Target, e: RespError) -> ProviderError {
    ProviderError::api(format!("redis at {target}"), 0, "", e.to_string())
}

/// Runs one Redis session, bounded by [`REDIS_TIMEOUT`].
async fn bounded<T>(
    target: &Target,
    session: impl Future<Output = Result<T, ProviderError>>,
) -> Result<T, ProviderError> {
    tokio::time::timeout(REDIS_TIMEOUT, session)
        .await
        .unwrap_or_else(|_| {
            Err(ProviderError::Timeout {
                call: format!("redis at {target}"),
                waiting_for: "redis to answer".into(),
                after: REDIS_TIMEOUT,
            })
        })
}

/// The Redis a spec names, with a client for its cluster when it is a pod.
struct Place {
    target: Target,
    client: Option<connect::Conn>,
}

impl Place {
    async fn of(ctx: &Ctx, spec: &Spec) -> Result<Self, ProviderError> {
        let target = Target::of(&spec.redis)
            .map_err(|m| ProviderError::Config(format!("{}: redis: {m}", QueueItems::KIND)))?;
        let client = match target {
            Target::Pod { .. } => Some(connect::client(ctx, &spec.cluster).await?),
            Target::Address(_) => None,
        };
        Ok(Self { target, client })
    }

    /// The uid of the Redis pod now (`Some("")` for an external Redis); `None` when
    /// the pod is gone or going.
    async fn uid(&self) -> Result<Option<String>, ProviderError> {
        let (Target::Pod { namespace, pod, .. }, Some(client)) = (&self.target, &self.client)
        else {
            return Ok(Some(String::new()));
        };
        let Some(live) = apply::get(client, "v1", "Pod", Some(namespace), pod).await? else {
            return Ok(None);
        };
        // A terminating pod takes its data with it: the same as gone.
        if !live["metadata"]["deletionTimestamp"].is_null() {
            return Ok(None);
        }
        Ok(live["metadata"]["uid"].as_str().map(str::to_string))
    }

    /// Whether `uid` (now) differs from the one `id` recorded: the pod restarted empty.
    fn restarted(&self, id: &str, uid: &str) -> bool {
        matches!(self.target, Target::Pod { .. }) && recorded_uid(id) != Some(uid)
    }

    fn gone(&self) -> ProviderError {
        ProviderError::api(
            format!("kubernetes get Pod for redis at {}", self.target),
            404,
            "NotFound",
            "the Redis pod does not exist (or is terminating)",
        )
    }

    async fn open(&self, password: Option<&str>) -> Result<Redis, ProviderError> {
        let (stream, forward): (Box<dyn Duplex>, _) = match (&self.target, &self.client) {
            (
                Target::Pod {
                    namespace,
                    pod,
                    port,
                },
                Some(client),
            ) => {
                let pods: kube::Api<Pod> = kube::Api::namespaced(client.kube(), namespace);
                let call = || format!("kubernetes portforward {namespace}/{pod}:{port}");
                let mut forward = pods
                    .portforward(pod, &[*port])
                    .await
                    .map_err(|e| apply::api_error(call(), e))?;
                let stream = forward
                    .take_stream(*port)
                    .ok_or_else(|| ProviderError::api(call(), 0, "", "no stream for the port"))?;
                let error = forward.take_error(*port).map(FutureExt::boxed);
                (Box::new(Forwarded { stream, error }), Some(forward))
            }
            (Target::Pod { .. }, None) => {
                return Err(ProviderError::Config(
                    "redis pod without a cluster client".into(),
                ))
            }
            (Target::Address(address), _) => {
                let stream = tokio::net::TcpStream::connect(address.as_str())
                    .await
                    .map_err(|e| {
                        ProviderError::api(
                            format!("redis at {address}"),
                            0,
                            "UNREACHABLE",
                            e.to_string(),
                        )
                    })?;
                (Box::new(stream), None)
            }
        };
        let mut redis = Redis {
            conn: Connection::new(stream),
            forward,
            target: self.target.clone(),
        };
        if let Some(password) = password {
            redis
                .conn
                .auth(password)
                .await
                .map_err(|e| redis.failed(e))?;
        }
        redis.conn.ping().await.map_err(|e| redis.failed(e))?;
        Ok(redis)
    }
}

/// The resolved items of a spec `prepare` completed (or completes now).
fn wanted(spec: &Spec) -> Result<Vec<String>, ProviderError> {
    match &spec.resolved {
        Some(items) => Ok(items.clone()),
        None => resolve(&spec.items, spec.from.as_ref()),
    }
}

fn live(id: String, spec: Spec, uid: String) -> Live<QueueItems> {
    let pushed = spec.resolved.clone().unwrap_or_default();
    Live {
        id,
        outputs: Outputs {
            count: i64::try_from(pushed.len()).unwrap_or(i64::MAX),
            pushed,
            redis_pod_uid: uid,
        },
        spec,
    }
}

/// Takes `items` back out of the list where still queued; returns how many were.
async fn remove(redis: &mut Redis, list: &str, items: &[String]) -> Result<i64, ProviderError> {
    let mut removed = 0;
    for item in items {
        removed += redis
            .conn
            .lrem(list, item)
            .await
            .map_err(|e| redis.failed(e))?;
    }
    Ok(removed)
}

fn plural(n: usize, one: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {one}s")
    }
}

#[async_trait]
impl Kind for QueueItems {
    type Spec = Spec;
    type Outputs = Outputs;
    const KIND: &'static str = "kubernetes_queue_items";
    const PROVIDER: &'static str = "kubernetes";
    const WRITES: crate::protocol::Writes = crate::protocol::Writes::AsManifest;

    fn validate(spec: &Spec, _config: &Value) -> Vec<Invalid> {
        let mut out = Vec::new();
        check_cluster(&spec.cluster, &mut out);
        if !is_unknown(&spec.redis) {
            if let Err(m) = Target::of(&spec.redis) {
                out.push(Invalid::at("redis", m));
            }
        }
        if spec.list.is_empty() {
            out.push(Invalid::at("list", "must not be empty"));
        }
        let mut first_at = std::collections::HashMap::new();
        for (i, item) in spec.items.iter().enumerate() {
            // Two items not known yet may well turn out different.
            if item.contains(UNKNOWN) {
                continue;
            }
            if item.is_empty() {
                out.push(Invalid::at(&format!("items.{i}"), "must not be empty"));
            } else if let Some(first) = first_at.get(item) {
                out.push(Invalid::at(
                    &format!("items.{i}"),
                    format!(
                        "{item:?} is already listed at items.{first}; each item is pushed once"
                    ),
                ));
            } else {
                first_at.insert(item, i);
            }
        }
        if let Some(from) = &spec.from {
            if from.dir.is_empty() {
                out.push(Invalid::at("from.dir", "must not be empty"));
            }
            if let Err(m) = Glob::parse(&from.glob) {
                out.push(Invalid::at("from.glob", m));
            }
        }
        if spec.password.as_deref() == Some("") {
            out.push(Invalid::at(
                "password",
                "must not be empty; leave it out for a Redis without AUTH",
            ));
        }
        if spec.resolved.is_some() {
            out.push(Invalid::at(
                "resolved",
                "is computed from `items` and `from` when planning; do not set it",
            ));
        }
        out
    }

    fn prepare(mut spec: Spec) -> Result<Spec, ProviderError> {
        let listed = match &spec.from {
            None => Vec::new(),
            Some(from) => {
                // Listed at apply when the directory is not known yet; `validate`
                // reports an empty one.
                if from.dir.contains(UNKNOWN) || from.dir.is_empty() {
                    return Ok(spec);
                }
                check_local_dir("from.dir", &from.dir, "to list")?;
                // A glob not known yet is matched at apply; one that does not parse is
                // reported by `validate`.
                if from.glob.contains(UNKNOWN) || Glob::parse(&from.glob).is_err() {
                    return Ok(spec);
                }
                let (listed, total) = listed(from)?;
                // Refused even when `items` is not empty: `from` is there only to list
                // files, so listing none means its directory or glob is wrong, and
                // pushing nothing from it is never the intent (a typo would otherwise
                // push the fixed items alone, unnoticed). To push no files, leave
                // `from` out.
                if listed.is_empty() {
                    let dir = &from.dir;
                    let whence = if Path::new(dir).is_relative() {
                        " (relative paths start at the stack's directory)"
                    } else {
                        ""
                    };
                    return Err(ProviderError::invalid(
                        "from.glob",
                        format!(
                            "{:?} matches no file under {dir:?}, which holds {}{whence}; fix the glob or from.dir, or leave from out",
                            from.glob,
                            plural(total, "file")
                        ),
                    ));
                }
                listed
            }
        };
        spec.resolved = Some(merged(&spec.items, listed));
        Ok(spec)
    }

    async fn read(
        &self,
        ctx: &Ctx,
        id: &str,
        prior: Option<&Spec>,
    ) -> Result<Option<Live<Self>>, ProviderError> {
        let Some(prior) = prior else {
            return Err(ProviderError::Unsupported(format!(
                "{}: cannot be imported: what was pushed is known only to the state that pushed it; apply the stack instead",
                Self::KIND
            )));
        };
        let place = Place::of(ctx, prior).await?;
        let uid = match place.uid().await? {
            Some(uid) if !place.restarted(id, &uid) => uid,
            // Gone or restarted empty: the items must be pushed again.
            _ => return Ok(None),
        };
        Ok(Some(live(id.to_string(), prior.clone(), uid)))
    }

    async fn create(&self, ctx: &Ctx, spec: &Spec) -> Result<Live<Self>, ProviderError> {
        let items = wanted(spec)?;
        let place = Place::of(ctx, spec).await?;
        let uid = place.uid().await?.ok_or_else(|| place.gone())?;
        bounded(&place.target, async {
            let mut redis = place.open(spec.password.as_deref()).await?;
            ctx.progress(&format!(
                "pushing {} onto {}",
                plural(items.len(), "item"),
                spec.list
            ));
            let length = redis
                .conn
                .rpush(&spec.list, &items)
                .await
                .map_err(|e| redis.failed(e))?;
            redis.close().await;
            ctx.progress(&format!(
                "{} now holds {}",
                spec.list,
                plural(usize::try_from(length).unwrap_or(0), "item")
            ));
            Ok(())
        })
        .await?;
        let spec = Spec {
            resolved: Some(items),
            ..spec.clone()
        };
        Ok(live(id_of(&place.target, &spec.list, &uid), spec, uid))
    }

    async fn update(
        &self,
        ctx: &Ctx,
        id: &str,
        prior: &Spec,
        spec: &Spec,
    ) -> Result<Live<Self>, ProviderError> {
        let items = wanted(spec)?;
        let place = Place::of(ctx, spec).await?;
        let uid = place.uid().await?.ok_or_else(|| place.gone())?;
        let restarted = place.restarted(id, &uid);
        let (push, take_back) = if restarted {
            ctx.progress(&format!(
                "redis restarted since the last push; pushing all {} again",
                plural(items.len(), "item")
            ));
            (items.clone(), Vec::new())
        } else {
            changes(prior.resolved.as_deref().unwrap_or_default(), &items)
        };
        bounded(&place.target, async {
            let mut redis = place.open(spec.password.as_deref()).await?;
            if !take_back.is_empty() {
                let removed = remove(&mut redis, &spec.list, &take_back).await?;
                ctx.progress(&format!(
                    "{} left the stack: removed {removed} still queued, the rest were already taken by workers",
                    plural(take_back.len(), "item")
                ));
            }
            if !push.is_empty() {
                ctx.progress(&format!("pushing {} onto {}", plural(push.len(), "new item"), spec.list));
                redis.conn.rpush(&spec.list, &push).await.map_err(|e| redis.failed(e))?;
            }
            redis.close().await;
            Ok(())
        })
        .await?;
        let spec = Spec {
            resolved: Some(items),
            ..spec.clone()
        };
        Ok(live(id_of(&place.target, &spec.list, &uid), spec, uid))
    }

    async fn delete(&self, ctx: &Ctx, id: &str, prior: Option<&Spec>) -> Result<(), ProviderError> {
        let Some(prior) = prior else { return Ok(()) };
        let items = prior.resolved.clone().unwrap_or_default();
        if items.is_empty() {
            return Ok(());
        }
        let place = Place::of(ctx, prior).await?;
        match place.uid().await? {
            // The Redis that held them is gone, and its items with it.
            None => return Ok(()),
            Some(uid) if place.restarted(id, &uid) => return Ok(()),
            Some(_) => {}
        }
        bounded(&place.target, async {
            let mut redis = place.open(prior.password.as_deref()).await?;
            let removed = remove(&mut redis, &prior.list, &items).await?;
            redis.close().await;
            ctx.progress(&format!(
                "removed {removed} of {} still queued",
                plural(items.len(), "item")
            ));
            Ok(())
        })
        .await
    }

    async fn health(
        &self,
        ctx: &Ctx,
        id: &str,
        prior: Option<&Spec>,
    ) -> Result<Option<Health>, ProviderError> {
        let Some(prior) = prior else { return Ok(None) };
        let place = Place::of(ctx, prior).await?;
        let summary = match place.uid().await? {
            None => format!("redis {} is gone", place.target),
            Some(uid) if place.restarted(id, &uid) => {
                "redis restarted since the push; the next apply pushes the items again".to_string()
            }
            Some(_) => {
                let queued = bounded(&place.target, async {
                    let mut redis = place.open(prior.password.as_deref()).await?;
                    let queued = redis
                        .conn
                        .llen(&prior.list)
                        .await
                        .map_err(|e| redis.failed(e))?;
                    redis.close().await;
                    Ok(queued)
                })
                .await?;
                // Workers taking items is what the queue is for: say how far they got.
                let pushed = prior.resolved.as_ref().map_or(0, Vec::len);
                let summary = match queued {
                    0 => format!("all {pushed} taken by workers"),
                    n => format!("{n} of {pushed} still queued"),
                };
                return Ok(Some(Health {
                    ready: true,
                    summary,
                }));
            }
        };
        Ok(Some(Health {
            ready: false,
            summary,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubernetes::resp::tests::redis_server;
    use crate::testing::schema_mismatches;
    use crate::Type;
    use serde_json::json;

    fn cluster() -> Value {
        json!({"kubeconfig": "/nonexistent/kubeconfig"})
    }

    fn endpoint() -> Value {
        json!({"namespace": "default", "pod": "redis-leader", "port": 6379, "service_host": "redis-leader.default.svc.cluster.local"})
    }

    fn base() -> Spec {
        Spec {
            cluster: cluster(),
            redis: endpoint(),
            list: "datasets".into(),
            items: vec!["a".into(), "b".into()],
            from: None,
            password: None,
            resolved: None,
        }
    }

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn schema_matches_spec_and_outputs() {
        let full = Spec {
            from: Some(FromDir {
                dir: "data".into(),
                glob: "*.json".into(),
                prefix: "gs://b/".into(),
            }),
            password: Some("pw".into()),
            resolved: Some(strings(&["a"])),
            ..base()
        };
        let outputs = Outputs {
            pushed: strings(&["a"]),
            count: 1,
            redis_pod_uid: "u".into(),
        };
        assert_eq!(
            schema_mismatches::<QueueItems>(&full, &outputs),
            Vec::<String>::new()
        );
        // The nested defaults agree too.
        let from: FromDir = serde_json::from_value(json!({"dir": "d"})).expect("decodes");
        let schema = QueueItems::schema();
        let Some(Type::Object(fields)) = schema.field("from").map(|f| &f.ty) else {
            panic!("from is a table")
        };
        for f in fields.iter().filter(|f| !f.required) {
            assert_eq!(
                Some(&serde_json::to_value(&from).expect("encodes")[f.name]),
                f.default.as_ref(),
                "from.{}",
                f.name
            );
        }
    }

    #[test]
    fn marking() {
        let schema = QueueItems::schema();
        let force_new: Vec<&str> = schema
            .fields
            .iter()
            .filter(|f| f.force_new)
            .map(|f| f.name)
            .collect();
        assert_eq!(force_new, ["cluster", "redis", "list"]);
        assert!(schema.field("password").is_some_and(|f| f.sensitive));
    }

    #[test]
    fn targets() {
        let cases: Vec<(Value, Result<Target, &str>)> = vec![
            (
                endpoint(),
                Ok(Target::Pod {
                    namespace: "default".into(),
                    pod: "redis-leader".into(),
                    port: 6379,
                }),
            ),
            (
                json!({"pod": "r", "port": "6380"}),
                Ok(Target::Pod {
                    namespace: "default".into(),
                    pod: "r".into(),
                    port: 6380,
                }),
            ),
            (
                json!({"namespace": "ml", "pod": "r", "port": 1}),
                Ok(Target::Pod {
                    namespace: "ml".into(),
                    pod: "r".into(),
                    port: 1,
                }),
            ),
            (
                json!({"address": "10.0.0.3:6379"}),
                Ok(Target::Address("10.0.0.3:6379".into())),
            ),
            (
                json!({"address": "[::1]:6379"}),
                Ok(Target::Address("[::1]:6379".into())),
            ),
            (json!({"address": "redis"}), Err("is not \"host:port\"")),
            (json!({"address": ":6379"}), Err("is not \"host:port\"")),
            (json!({"address": "h:0"}), Err("is not \"host:port\"")),
            (json!({"address": 5}), Err("address: expected")),
            (json!({"pod": "r"}), Err("port: expected")),
            (json!({"pod": "r", "port": 70000}), Err("port: expected")),
            (json!({"pod": "", "port": 1}), Err("pod: expected")),
            (
                json!({"pod": "r", "port": 1, "namespace": 3}),
                Err("namespace: expected"),
            ),
            (
                json!({"pod": "r", "port": 1, "address": "h:1"}),
                Err("not both"),
            ),
            (json!({}), Err("kubernetes_redis endpoint")),
            (json!("redis:6379"), Err("kubernetes_redis endpoint")),
        ];
        for (value, want) in cases {
            match (Target::of(&value), want) {
                (Ok(got), Ok(want)) => assert_eq!(got, want, "{value}"),
                (Err(got), Err(want)) => {
                    assert!(got.contains(want), "{value}: {got:?} lacks {want:?}")
                }
                (got, want) => panic!("{value}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn ids_record_the_pod_uid() {
        let pod = Target::of(&endpoint()).expect("valid");
        let id = id_of(&pod, "a@b/c", "1234-abcd");
        assert_eq!(id, "pod/default/redis-leader:6379/a@b/c@1234-abcd");
        assert_eq!(recorded_uid(&id), Some("1234-abcd"));
        let external = id_of(&Target::Address("h:1".into()), "q@x", "");
        assert_eq!(external, "address/h:1/q@x");
        assert_eq!(recorded_uid(&external), None);
        assert_eq!(recorded_uid("pod/default/r:1/q@"), None);
    }

    #[test]
    fn globs() {
        let cases: &[(&str, &str, bool)] = &[
            ("**/*", "a", true),
            ("**/*", "x/y/z.json", true),
            ("*", "a", true),
            ("*", "x/a", false),
            ("*.json", "a.json", true),
            ("*.json", "d/a.json", false),
            ("**/*.json", "d/e/a.json", true),
            ("**/*.json", "a.json", true),
            ("**/*.json", "a.jsonl", false),
            ("d/**", "d/a", true),
            ("d/**", "d/e/a", true),
            ("d/**", "e/a", false),
            ("d/**/x", "d/x", true),
            ("d/**/x", "d/1/2/x", true),
            ("shard-??.parquet", "shard-07.parquet", true),
            ("shard-??.parquet", "shard-7.parquet", false),
            ("shard-[0-4]*", "shard-3x", true),
            ("shard-[0-4]*", "shard-5x", false),
            ("shard-[!0-4]*", "shard-5x", true),
            ("[]a]", "]", true),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "axxbyy", false),
        ];
        for (pattern, path, want) in cases {
            let glob = Glob::parse(pattern).expect("valid glob");
            assert_eq!(glob.matches(path), *want, "{pattern} vs {path}");
        }
        for (bad, why) in [
            ("", "must not be empty"),
            ("/abs/*", "absolute"),
            ("a**", "whole path segment"),
            ("[ab", "unclosed"),
        ] {
            let e = Glob::parse(bad).expect_err(bad);
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    fn write(dir: &Path, rel: &str) {
        let path = dir.join(rel);
        std::fs::create_dir_all(path.parent().expect("has a parent")).expect("mkdir");
        std::fs::write(path, rel).expect("write");
    }

    #[test]
    fn prepare_lists_files_sorted_with_prefix_after_the_items() -> Result<(), ProviderError> {
        let dir = tempfile::tempdir().expect("tempdir");
        // Created out of order, so sorting is what puts them in order.
        for rel in [
            "z.json",
            "b/2.json",
            "a.json",
            "b/1.json",
            "b/notes.txt",
            "c/d/e.json",
        ] {
            write(dir.path(), rel);
        }
        std::fs::create_dir(dir.path().join("empty")).expect("mkdir");
        let from = |glob: &str| FromDir {
            dir: dir.path().display().to_string(),
            glob: glob.into(),
            prefix: "gs://bucket/".into(),
        };

        let spec = QueueItems::prepare(Spec {
            items: vec![],
            from: Some(from("**/*.json")),
            ..base()
        })?;
        assert_eq!(
            spec.resolved,
            Some(strings(&[
                "gs://bucket/a.json",
                "gs://bucket/b/1.json",
                "gs://bucket/b/2.json",
                "gs://bucket/c/d/e.json",
                "gs://bucket/z.json"
            ]))
        );
        let spec = QueueItems::prepare(Spec {
            items: vec![],
            from: Some(from("*")),
            ..base()
        })?;
        assert_eq!(
            spec.resolved,
            Some(strings(&["gs://bucket/a.json", "gs://bucket/z.json"]))
        );

        // Items first, in the stack's order; a file already listed as an item is not
        // listed twice.
        let spec = QueueItems::prepare(Spec {
            items: strings(&["zzz", "gs://bucket/z.json", "first?"]),
            from: Some(FromDir {
                glob: "b/*".into(),
                ..from("")
            }),
            ..base()
        })?;
        assert_eq!(
            spec.resolved,
            Some(strings(&[
                "zzz",
                "gs://bucket/z.json",
                "first?",
                "gs://bucket/b/1.json",
                "gs://bucket/b/2.json",
                "gs://bucket/b/notes.txt"
            ]))
        );

        let spec = QueueItems::prepare(base())?;
        assert_eq!(spec.resolved, Some(strings(&["a", "b"])));

        // The default glob takes every file, and no prefix leaves paths as they are.
        let all: FromDir = serde_json::from_value(json!({"dir": dir.path()})).expect("decodes");
        let spec = QueueItems::prepare(Spec {
            items: vec![],
            from: Some(all),
            ..base()
        })?;
        assert_eq!(
            spec.resolved,
            Some(strings(&[
                "a.json",
                "b/1.json",
                "b/2.json",
                "b/notes.txt",
                "c/d/e.json",
                "z.json"
            ]))
        );

        let missing = QueueItems::prepare(Spec {
            from: Some(FromDir {
                dir: dir.path().join("nope").display().to_string(),
                ..from("*")
            }),
            ..base()
        });
        let e = missing.expect_err("no such directory");
        assert!(
            matches!(&e, ProviderError::Invalid { field, message } if field == "from.dir" && message.contains("does not exist")),
            "{e}"
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

    fn from_dir(dir: &str, glob: &str) -> Spec {
        Spec {
            from: Some(FromDir {
                dir: dir.into(),
                glob: glob.into(),
                prefix: String::new(),
            }),
            ..base()
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
    fn queue_from_dir_that_does_not_exist_is_refused_at_from_dir() {
        let rel = "no-such-queue-directory";
        let (field, message) =
            invalid(QueueItems::prepare(from_dir(rel, "*")).expect_err("missing"));
        assert_eq!(field, "from.dir");
        assert_eq!(
            message,
            format!(
                "\"{rel}\" does not exist: no directory at {} (relative paths start at the stack's directory)",
                here(rel)
            )
        );
    }

    #[test]
    fn queue_from_dir_that_is_a_file_or_unreadable_is_refused_at_from_dir() {
        // Tests run in the crate's directory, which has this file.
        let (field, message) =
            invalid(QueueItems::prepare(from_dir("Cargo.toml", "*")).expect_err("a file"));
        assert_eq!(field, "from.dir");
        assert_eq!(
            message,
            format!(
                "\"Cargo.toml\" is a file, not a directory ({}); give the directory to list (relative paths start at the stack's directory)",
                here("Cargo.toml")
            )
        );
        let (field, message) = invalid(
            QueueItems::prepare(from_dir("Cargo.toml/x", "*")).expect_err("through a file"),
        );
        assert_eq!(field, "from.dir");
        assert!(
            message.starts_with(&format!(
                "\"Cargo.toml/x\" cannot be read: {}: ",
                here("Cargo.toml/x")
            )),
            "{message}"
        );
    }

    #[test]
    fn queue_glob_matching_nothing_is_refused_at_from_glob_even_with_items() {
        let dir = tempfile::tempdir().expect("tempdir");
        write(dir.path(), "training/a.csv");
        write(dir.path(), "training/b.csv");
        let path = dir.path().display().to_string();
        // `base()` has items: a glob that lists nothing is still a mistake.
        let (field, message) = invalid(
            QueueItems::prepare(from_dir(&path, "training/*.pkl")).expect_err("matches nothing"),
        );
        assert_eq!(field, "from.glob");
        assert_eq!(
            message,
            format!("\"training/*.pkl\" matches no file under {path:?}, which holds 2 files; fix the glob or from.dir, or leave from out")
        );
        let empty = tempfile::tempdir().expect("tempdir");
        let (field, message) = invalid(
            QueueItems::prepare(Spec {
                items: vec![],
                ..from_dir(&empty.path().display().to_string(), "**/*")
            })
            .expect_err("an empty directory"),
        );
        assert_eq!(field, "from.glob");
        assert!(message.contains("which holds 0 files"), "{message}");
        assert!(QueueItems::prepare(from_dir(&path, "training/*.csv")).is_ok());
    }

    #[test]
    fn queue_from_not_known_until_apply_is_listed_then() -> Result<(), ProviderError> {
        use crate::Resource;
        // A directory or glob from another resource: listed at apply, nothing read now.
        for spec in [
            from_dir(UNKNOWN, "*"),
            from_dir("no-such-queue-directory", UNKNOWN),
        ] {
            let dir_unknown = spec.from.as_ref().is_some_and(|f| f.dir.contains(UNKNOWN));
            let prepared = QueueItems::prepare(spec);
            if dir_unknown {
                assert_eq!(prepared?.resolved, None);
            } else {
                // A known directory is still checked.
                assert_eq!(invalid(prepared.expect_err("missing")).0, "from.dir");
            }
        }
        // A glob that does not parse is `validate`'s to report, not `prepare`'s.
        let dir = tempfile::tempdir().expect("tempdir");
        write(dir.path(), "a.json");
        let bad = QueueItems::prepare(from_dir(&dir.path().display().to_string(), "a/**b"))?;
        assert_eq!(bad.resolved, None);
        // Through the adapter, with the cluster and the Redis of the same stack unknown
        // (as at `terrain validate` and `plan`): the directory is listed all the same.
        let adapter = crate::Adapter::new(QueueItems);
        let mut spec = serde_json::to_value(from_dir(&dir.path().display().to_string(), "*.json"))
            .expect("encodes");
        spec["cluster"] = json!(UNKNOWN);
        spec["redis"] = json!(UNKNOWN);
        spec["items"] = json!([UNKNOWN]);
        let prepared = adapter.prepare(spec.clone())?;
        assert_eq!(prepared["resolved"], json!([UNKNOWN, "a.json"]));
        spec["from"]["glob"] = json!("*.pkl");
        let e = adapter.prepare(spec).expect_err("matches nothing");
        assert!(
            matches!(&e, ProviderError::Invalid { field, .. } if field == "from.glob"),
            "{e}"
        );
        Ok(())
    }

    #[test]
    fn validation_table() {
        let unknown = crate::protocol::UNKNOWN;
        let cases: Vec<(Spec, &str, &str)> = vec![
            (base(), "", ""),
            (
                Spec {
                    redis: json!({"address": "h:6379"}),
                    password: Some("pw".into()),
                    ..base()
                },
                "",
                "",
            ),
            (
                Spec {
                    redis: json!({"host": "h"}),
                    ..base()
                },
                "redis",
                "kubernetes_redis endpoint",
            ),
            (
                Spec {
                    cluster: json!("batch"),
                    ..base()
                },
                "cluster",
                "cluster reference",
            ),
            (
                Spec {
                    list: String::new(),
                    ..base()
                },
                "list",
                "must not be empty",
            ),
            (
                Spec {
                    items: strings(&["a", ""]),
                    ..base()
                },
                "items.1",
                "must not be empty",
            ),
            (
                Spec {
                    items: strings(&["a", "b", "a"]),
                    ..base()
                },
                "items.2",
                "already listed at items.0",
            ),
            (
                Spec {
                    from: Some(FromDir {
                        dir: String::new(),
                        glob: "*".into(),
                        prefix: String::new(),
                    }),
                    ..base()
                },
                "from.dir",
                "must not be empty",
            ),
            (
                Spec {
                    from: Some(FromDir {
                        dir: "d".into(),
                        glob: "[x".into(),
                        prefix: String::new(),
                    }),
                    ..base()
                },
                "from.glob",
                "unclosed",
            ),
            (
                Spec {
                    password: Some(String::new()),
                    ..base()
                },
                "password",
                "leave it out",
            ),
            (
                Spec {
                    resolved: Some(strings(&["a"])),
                    ..base()
                },
                "resolved",
                "do not set it",
            ),
            // Two unknown items may turn out different: not judged as duplicates.
            (
                Spec {
                    items: vec![unknown.to_string(), unknown.to_string()],
                    ..base()
                },
                "",
                "",
            ),
        ];
        for (spec, path, want) in cases {
            let problems = QueueItems::validate(&spec, &Value::Null);
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

    #[test]
    fn updates_push_only_new_items_and_take_back_removed_ones() {
        type Items = &'static [&'static str];
        // What was pushed, what the stack wants, what is pushed, what is taken back.
        let cases: &[(Items, Items, Items, Items)] = &[
            (&["a", "b"], &["a", "b"], &[], &[]),
            (&["a", "b"], &["a", "b", "c"], &["c"], &[]),
            (&["a", "b"], &["c", "a"], &["c"], &["b"]),
            (&["a", "b"], &["b", "a"], &[], &[]),
            (&[], &["x", "y"], &["x", "y"], &[]),
            (&["x", "y"], &[], &[], &["x", "y"]),
        ];
        for (pushed, wanted, push, remove) in cases {
            assert_eq!(
                changes(&strings(pushed), &strings(wanted)),
                (strings(push), strings(remove)),
                "{pushed:?} -> {wanted:?}"
            );
        }
    }

    #[tokio::test]
    async fn a_port_error_fails_the_read_instead_of_hanging() {
        let (client, _server) = tokio::io::duplex(64);
        let error =
            async { Some("error forwarding port 6379: connection refused".to_string()) }.boxed();
        let stream: Box<dyn Duplex> = Box::new(Forwarded {
            stream: client,
            error: Some(error),
        });
        let mut conn = Connection::new(stream);
        let err = conn.ping().await.expect_err("the port failed");
        assert_eq!(
            err.to_string(),
            "redis connection: port-forward: error forwarding port 6379: connection refused"
        );
    }

    #[tokio::test]
    async fn lifecycle_against_a_real_redis() -> Result<(), ProviderError> {
        let Some(server) = redis_server(&[]).await else {
            return Ok(());
        };
        let ctx = Ctx::new("kubernetes_queue_items.shards", json!({}));
        let address = format!("127.0.0.1:{}", server.port);
        let spec = |items: &[&str]| {
            QueueItems::prepare(Spec {
                redis: json!({"address": address}),
                items: strings(items),
                ..base()
            })
        };
        let peek = || async {
            let mut conn = Connection::new(
                tokio::net::TcpStream::connect(address.as_str())
                    .await
                    .expect("connects"),
            );
            conn.lrange_all("datasets").await.expect("lrange")
        };

        let first = spec(&["a", "b", "c"])?;
        let created = QueueItems.create(&ctx, &first).await?;
        assert_eq!(created.id, format!("address/{address}/datasets"));
        assert_eq!(
            created.outputs,
            Outputs {
                pushed: strings(&["a", "b", "c"]),
                count: 3,
                redis_pod_uid: String::new()
            }
        );
        assert_eq!(peek().await, strings(&["a", "b", "c"]));

        // A worker takes "a": consumption, not drift.
        let mut worker = Connection::new(
            tokio::net::TcpStream::connect(address.as_str())
                .await
                .expect("connects"),
        );
        worker
            .call("LPOP", &[b"LPOP", b"datasets"])
            .await
            .expect("lpop");
        let read = QueueItems
            .read(&ctx, &created.id, Some(&created.spec))
            .await?
            .expect("still there");
        assert_eq!(read.spec, created.spec);
        assert_eq!(read.outputs, created.outputs);

        // "b" leaves the stack (still queued: taken back), "a" too (already consumed),
        // "d" joins: only "d" is pushed.
        let second = spec(&["c", "d"])?;
        let updated = QueueItems
            .update(&ctx, &created.id, &created.spec, &second)
            .await?;
        assert_eq!(peek().await, strings(&["c", "d"]));
        assert_eq!(updated.outputs.pushed, strings(&["c", "d"]));
        assert_eq!(updated.spec.resolved, Some(strings(&["c", "d"])));

        // Nothing changed: nothing is pushed again.
        QueueItems
            .update(&ctx, &updated.id, &updated.spec, &second)
            .await?;
        assert_eq!(peek().await, strings(&["c", "d"]));

        let health = QueueItems
            .health(&ctx, &updated.id, Some(&updated.spec))
            .await?;
        assert_eq!(
            health,
            Some(Health {
                ready: true,
                summary: "2 of 2 still queued".into()
            })
        );

        // Delete takes back what is still queued and leaves other producers' items.
        worker
            .rpush("datasets", &strings(&["someone-else"]))
            .await
            .expect("rpush");
        QueueItems
            .delete(&ctx, &updated.id, Some(&updated.spec))
            .await?;
        assert_eq!(peek().await, strings(&["someone-else"]));
        QueueItems
            .delete(&ctx, &updated.id, Some(&updated.spec))
            .await?;
        assert_eq!(peek().await, strings(&["someone-else"]));
        Ok(())
    }

    #[tokio::test]
    async fn import_is_refused_and_an_unreachable_redis_is_an_error() {
        let ctx = Ctx::new("kubernetes_queue_items.shards", json!({}));
        let err = QueueItems
            .read(&ctx, "address/h:1/q", None)
            .await
            .expect_err("no import");
        assert!(err.to_string().contains("cannot be imported"), "{err}");

        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let spec = QueueItems::prepare(Spec {
            redis: json!({"address": format!("127.0.0.1:{port}")}),
            ..base()
        })
        .expect("prepares");
        let err = QueueItems
            .create(&ctx, &spec)
            .await
            .expect_err("nothing listens");
        assert!(
            err.to_string()
                .starts_with(&format!("redis at 127.0.0.1:{port} failed: UNREACHABLE")),
            "{err}"
        );
    }
}
