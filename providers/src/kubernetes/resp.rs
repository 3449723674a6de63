//! A minimal async Redis client speaking RESP2 over any byte stream (a TCP socket, a
//! Kubernetes port-forward): the handful of list commands `kubernetes_queue_items`
//! needs to push work items, take back the ones not consumed yet, and count them.
//!
//! Commands go out as arrays of bulk strings; replies are decoded incrementally, so a
//! reply split across reads (a port-forward delivers whatever the WebSocket frame held)
//! is reassembled before it is returned.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Values per `RPUSH`: one command per chunk keeps each request small, while the chunks
/// of one push still go in one transaction.
pub const PUSH_CHUNK: usize = 1000;

/// Arrays nested deeper than this are refused rather than followed (no Redis command we
/// send answers with more than two levels).
const MAX_DEPTH: usize = 32;

/// One RESP2 reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `+OK`
    Simple(String),
    /// `-ERR message`: the server refused the command.
    Error(String),
    /// `:42`
    Integer(i64),
    /// `$3\r\nabc`, or `$-1` (nil).
    Bulk(Option<Vec<u8>>),
    /// `*2\r\n…`, or `*-1` (nil).
    Array(Option<Vec<Reply>>),
}

impl Reply {
    /// A short description for error messages, without bulk contents (which may be
    /// anything a worker pushed).
    fn describe(&self) -> String {
        match self {
            Reply::Simple(s) => format!("status {s:?}"),
            Reply::Error(e) => format!("error {e:?}"),
            Reply::Integer(i) => format!("integer {i}"),
            Reply::Bulk(None) => "nil".to_string(),
            Reply::Bulk(Some(b)) => format!("a {}-byte string", b.len()),
            Reply::Array(None) => "nil array".to_string(),
            Reply::Array(Some(items)) => format!("an array of {}", items.len()),
        }
    }
}

/// Why a Redis call failed.
#[derive(Debug, thiserror::Error)]
pub enum RespError {
    #[error("redis connection: {0}")]
    Io(#[from] std::io::Error),
    #[error("redis connection closed by the server")]
    Closed,
    #[error("redis protocol: {0}")]
    Protocol(String),
    /// The server answered with an error reply (`WRONGTYPE …`, `NOAUTH …`).
    #[error("redis {command}: {message}")]
    Server {
        command: &'static str,
        message: String,
    },
    #[error("redis {command}: unexpected reply: {reply}")]
    Unexpected {
        command: &'static str,
        reply: String,
    },
}

impl RespError {
    /// The error code of a server error reply: its first word (`WRONGTYPE`, `NOAUTH`).
    pub fn code(&self) -> Option<&str> {
        match self {
            RespError::Server { message, .. } => message.split_whitespace().next(),
            _ => None,
        }
    }
}

/// A command as RESP2 puts it on the wire: an array of bulk strings.
pub fn encode(args: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + args.iter().map(|a| a.len() + 16).sum::<usize>());
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Decodes one reply from the start of `buf`: `Ok(None)` when `buf` holds only part of
/// it, else the reply and how many bytes it took.
pub fn decode(buf: &[u8]) -> Result<Option<(Reply, usize)>, RespError> {
    decode_at(buf, 0, 0)
}

fn decode_at(buf: &[u8], at: usize, depth: usize) -> Result<Option<(Reply, usize)>, RespError> {
    let Some((line, next)) = line_at(buf, at) else {
        return Ok(None);
    };
    let (&kind, rest) = line
        .split_first()
        .ok_or_else(|| RespError::Protocol("empty reply line".into()))?;
    let text = || String::from_utf8_lossy(rest).into_owned();
    match kind {
        b'+' => Ok(Some((Reply::Simple(text()), next))),
        b'-' => Ok(Some((Reply::Error(text()), next))),
        b':' => Ok(Some((Reply::Integer(number(rest)?), next))),
        b'$' => {
            let len = number(rest)?;
            if len == -1 {
                return Ok(Some((Reply::Bulk(None), next)));
            }
            let len = usize::try_from(len)
                .map_err(|_| RespError::Protocol(format!("bulk string of length {len}")))?;
            let end = next + len;
            if buf.len() < end + 2 {
                return Ok(None);
            }
            if &buf[end..end + 2] != b"\r\n" {
                return Err(RespError::Protocol(
                    "bulk string not followed by CRLF".into(),
                ));
            }
            Ok(Some((Reply::Bulk(Some(buf[next..end].to_vec())), end + 2)))
        }
        b'*' => {
            let count = number(rest)?;
            if count == -1 {
                return Ok(Some((Reply::Array(None), next)));
            }
            let count = usize::try_from(count)
                .map_err(|_| RespError::Protocol(format!("array of length {count}")))?;
            if depth >= MAX_DEPTH {
                return Err(RespError::Protocol(format!(
                    "arrays nested deeper than {MAX_DEPTH}"
                )));
            }
            let mut items = Vec::with_capacity(count.min(1024));
            let mut pos = next;
            for _ in 0..count {
                let Some((item, after)) = decode_at(buf, pos, depth + 1)? else {
                    return Ok(None);
                };
                items.push(item);
                pos = after;
            }
            Ok(Some((Reply::Array(Some(items)), pos)))
        }
        other => Err(RespError::Protocol(format!(
            "unknown reply type {:?}",
            char::from(other)
        ))),
    }
}

/// The line starting at `at` (without its CRLF) and where the next one starts.
fn line_at(buf: &[u8], at: usize) -> Option<(&[u8], usize)> {
    let rest = buf.get(at..)?;
    let end = rest.windows(2).position(|w| w == b"\r\n")?;
    Some((&rest[..end], at + end + 2))
}

fn number(digits: &[u8]) -> Result<i64, RespError> {
    std::str::from_utf8(digits)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| {
            RespError::Protocol(format!(
                "{:?} is not a number",
                String::from_utf8_lossy(digits)
            ))
        })
}

/// A connection to one Redis server.
#[derive(Debug)]
pub struct Connection<S> {
    stream: S,
    /// Bytes read but not yet decoded.
    buf: Vec<u8>,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Connection<S> {
    /// A connection over `stream`, which must already reach the server.
    pub fn new(stream: S) -> Self {
        Self {
            stream,
            buf: Vec::new(),
        }
    }

    async fn send(&mut self, args: &[&[u8]]) -> Result<(), RespError> {
        self.stream.write_all(&encode(args)).await?;
        Ok(())
    }

    async fn receive(&mut self) -> Result<Reply, RespError> {
        loop {
            if let Some((reply, used)) = decode(&self.buf)? {
                self.buf.drain(..used);
                return Ok(reply);
            }
            let mut chunk = [0u8; 8192];
            let n = self.stream.read(&mut chunk).await?;
            if n == 0 {
                return Err(RespError::Closed);
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Sends one command and returns its reply; an error reply is an error. `command`
    /// names the call in messages, so arguments (a password) never appear in them.
    pub async fn call(
        &mut self,
        command: &'static str,
        args: &[&[u8]],
    ) -> Result<Reply, RespError> {
        self.send(args).await?;
        self.stream.flush().await?;
        match self.receive().await? {
            Reply::Error(message) => Err(RespError::Server { command, message }),
            reply => Ok(reply),
        }
    }

    async fn integer(&mut self, command: &'static str, args: &[&[u8]]) -> Result<i64, RespError> {
        match self.call(command, args).await? {
            Reply::Integer(n) => Ok(n),
            other => Err(RespError::Unexpected {
                command,
                reply: other.describe(),
            }),
        }
    }

    /// `PING`: whether the server answers.
    pub async fn ping(&mut self) -> Result<(), RespError> {
        match self.call("PING", &[b"PING"]).await? {
            Reply::Simple(s) if s == "PONG" => Ok(()),
            other => Err(RespError::Unexpected {
                command: "PING",
                reply: other.describe(),
            }),
        }
    }

    /// `AUTH password`. The password never appears in the error, even where a server
    /// would quote it back.
    pub async fn auth(&mut self, password: &str) -> Result<(), RespError> {
        let redact = |text: String| {
            if password.is_empty() {
                text
            } else {
                text.replace(password, "***")
            }
        };
        match self.call("AUTH", &[b"AUTH", password.as_bytes()]).await {
            Ok(Reply::Simple(s)) if s == "OK" => Ok(()),
            Ok(other) => Err(RespError::Unexpected {
                command: "AUTH",
                reply: redact(other.describe()),
            }),
            Err(RespError::Server { command, message }) => Err(RespError::Server {
                command,
                message: redact(message),
            }),
            Err(e) => Err(e),
        }
    }

    /// `RPUSH key value…` in chunks of [`PUSH_CHUNK`] values, all in one `MULTI`/`EXEC`
    /// transaction so that a push is never left half done. Returns the list's length
    /// afterwards.
    pub async fn rpush(&mut self, key: &str, values: &[String]) -> Result<i64, RespError> {
        if values.is_empty() {
            return self.llen(key).await;
        }
        let chunks: Vec<&[String]> = values.chunks(PUSH_CHUNK).collect();
        // Pipelined: the replies are a few bytes each, so writing everything before
        // reading cannot fill the server's output buffer.
        self.send(&[b"MULTI"]).await?;
        for chunk in &chunks {
            let mut args: Vec<&[u8]> = Vec::with_capacity(chunk.len() + 2);
            args.push(b"RPUSH");
            args.push(key.as_bytes());
            args.extend(chunk.iter().map(|v| v.as_bytes()));
            self.send(&args).await?;
        }
        self.send(&[b"EXEC"]).await?;
        self.stream.flush().await?;
        // Every reply is read even after an error, so the connection stays in step.
        let mut first_error = None;
        for command in std::iter::once("MULTI").chain(chunks.iter().map(|_| "RPUSH")) {
            match self.receive().await? {
                Reply::Simple(s) if s == "OK" || s == "QUEUED" => {}
                Reply::Error(message) => {
                    first_error.get_or_insert(RespError::Server { command, message });
                }
                other => {
                    first_error.get_or_insert(RespError::Unexpected {
                        command,
                        reply: other.describe(),
                    });
                }
            }
        }
        let exec = self.receive().await?;
        if let Some(e) = first_error {
            return Err(e);
        }
        match exec {
            Reply::Array(Some(replies)) => {
                let mut length = 0;
                for reply in replies {
                    match reply {
                        Reply::Integer(n) => length = n,
                        Reply::Error(message) => {
                            return Err(RespError::Server {
                                command: "RPUSH",
                                message,
                            })
                        }
                        other => {
                            return Err(RespError::Unexpected {
                                command: "RPUSH",
                                reply: other.describe(),
                            })
                        }
                    }
                }
                Ok(length)
            }
            Reply::Error(message) => Err(RespError::Server {
                command: "EXEC",
                message,
            }),
            other => Err(RespError::Unexpected {
                command: "EXEC",
                reply: other.describe(),
            }),
        }
    }

    /// `LREM key 0 value`: removes every occurrence; returns how many there were.
    pub async fn lrem(&mut self, key: &str, value: &str) -> Result<i64, RespError> {
        self.integer("LREM", &[b"LREM", key.as_bytes(), b"0", value.as_bytes()])
            .await
    }

    /// `LLEN key`.
    pub async fn llen(&mut self, key: &str) -> Result<i64, RespError> {
        self.integer("LLEN", &[b"LLEN", key.as_bytes()]).await
    }

    /// `LRANGE key 0 -1`: the whole list, head first (bytes that are not UTF-8 are
    /// replaced, which no item this client pushed can contain).
    pub async fn lrange_all(&mut self, key: &str) -> Result<Vec<String>, RespError> {
        match self
            .call("LRANGE", &[b"LRANGE", key.as_bytes(), b"0", b"-1"])
            .await?
        {
            Reply::Array(Some(items)) => items
                .into_iter()
                .map(|item| match item {
                    Reply::Bulk(Some(bytes)) => Ok(String::from_utf8_lossy(&bytes).into_owned()),
                    other => Err(RespError::Unexpected {
                        command: "LRANGE",
                        reply: other.describe(),
                    }),
                })
                .collect(),
            other => Err(RespError::Unexpected {
                command: "LRANGE",
                reply: other.describe(),
            }),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn commands_encode_as_arrays_of_bulk_strings() {
        assert_eq!(encode(&[b"PING"]), b"*1\r\n$4\r\nPING\r\n".to_vec());
        assert_eq!(
            encode(&[b"LLEN", b"datasets"]),
            b"*2\r\n$4\r\nLLEN\r\n$8\r\ndatasets\r\n".to_vec()
        );
        // Binary-safe: CRLF and empty arguments go by length, not by delimiter.
        assert_eq!(
            encode(&[b"RPUSH", b"k", b"a\r\nb", b""]),
            b"*4\r\n$5\r\nRPUSH\r\n$1\r\nk\r\n$4\r\na\r\nb\r\n$0\r\n\r\n".to_vec()
        );
    }

    #[test]
    fn replies_decode() {
        let bulk = |s: &str| Reply::Bulk(Some(s.as_bytes().to_vec()));
        let cases: Vec<(&[u8], Reply)> = vec![
            (b"+OK\r\n", Reply::Simple("OK".into())),
            (b"+\r\n", Reply::Simple(String::new())),
            (
                b"-ERR unknown command 'FOO'\r\n",
                Reply::Error("ERR unknown command 'FOO'".into()),
            ),
            (
                b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
                Reply::Error(
                    "WRONGTYPE Operation against a key holding the wrong kind of value".into(),
                ),
            ),
            (b":0\r\n", Reply::Integer(0)),
            (b":-42\r\n", Reply::Integer(-42)),
            (b":9223372036854775807\r\n", Reply::Integer(i64::MAX)),
            (b"$5\r\nhello\r\n", bulk("hello")),
            (b"$0\r\n\r\n", bulk("")),
            (b"$4\r\na\r\nb\r\n", bulk("a\r\nb")),
            (b"$-1\r\n", Reply::Bulk(None)),
            (b"*0\r\n", Reply::Array(Some(vec![]))),
            (b"*-1\r\n", Reply::Array(None)),
            (
                b"*2\r\n$1\r\na\r\n$-1\r\n",
                Reply::Array(Some(vec![bulk("a"), Reply::Bulk(None)])),
            ),
            (
                b"*3\r\n:1\r\n*2\r\n+x\r\n*1\r\n-E\r\n$2\r\nzz\r\n",
                Reply::Array(Some(vec![
                    Reply::Integer(1),
                    Reply::Array(Some(vec![
                        Reply::Simple("x".into()),
                        Reply::Array(Some(vec![Reply::Error("E".into())])),
                    ])),
                    bulk("zz"),
                ])),
            ),
        ];
        for (wire, want) in cases {
            let got = decode(wire).expect("valid reply");
            assert_eq!(
                got,
                Some((want.clone(), wire.len())),
                "{:?}",
                String::from_utf8_lossy(wire)
            );
            // Every strict prefix is incomplete, never an error or a wrong reply.
            for cut in 0..wire.len() {
                assert_eq!(
                    decode(&wire[..cut]).expect("a prefix is not an error"),
                    None,
                    "{:?} cut at {cut}",
                    String::from_utf8_lossy(wire)
                );
            }
            // Trailing bytes belong to the next reply and are not consumed.
            let mut two = wire.to_vec();
            two.extend_from_slice(b"+NEXT\r\n");
            assert_eq!(decode(&two).expect("valid reply"), Some((want, wire.len())));
        }
    }

    #[test]
    fn malformed_replies_are_protocol_errors() {
        let cases: Vec<(&[u8], &str)> = vec![
            (b"!oops\r\n", "unknown reply type '!'"),
            (b"\r\n", "empty reply line"),
            (b":12x\r\n", "\"12x\" is not a number"),
            (b"$-2\r\n", "bulk string of length -2"),
            (b"$2\r\nabcd\r\n", "not followed by CRLF"),
            (b"*-5\r\n", "array of length -5"),
        ];
        for (wire, want) in cases {
            match decode(wire) {
                Err(RespError::Protocol(m)) => assert!(m.contains(want), "{m:?} lacks {want:?}"),
                other => panic!(
                    "{:?}: expected a protocol error, got {other:?}",
                    String::from_utf8_lossy(wire)
                ),
            }
        }
        let deep = "*1\r\n".repeat(MAX_DEPTH + 1) + ":1\r\n";
        assert!(
            matches!(decode(deep.as_bytes()), Err(RespError::Protocol(m)) if m.contains("nested deeper"))
        );
    }

    #[test]
    fn server_errors_expose_their_code() {
        let e = RespError::Server {
            command: "RPUSH",
            message: "WRONGTYPE Operation against a key".into(),
        };
        assert_eq!(e.code(), Some("WRONGTYPE"));
        assert_eq!(
            e.to_string(),
            "redis RPUSH: WRONGTYPE Operation against a key"
        );
        assert_eq!(RespError::Closed.code(), None);
    }

    /// A scripted server on the other end of a one-byte pipe: every read the client
    /// makes returns a single byte, so each reply arrives split at every position.
    fn scripted(
        replies: &'static [u8],
        expect_request: Vec<u8>,
    ) -> (
        Connection<tokio::io::DuplexStream>,
        tokio::task::JoinHandle<Vec<u8>>,
    ) {
        let (client, mut server) = tokio::io::duplex(1);
        let task = tokio::spawn(async move {
            let mut request = vec![0u8; expect_request.len()];
            let read = server.read_exact(&mut request).await;
            // A failed read shows up as a mismatching request in the test.
            if read.is_ok() {
                let _ = server.write_all(replies).await;
            }
            request
        });
        (Connection::new(client), task)
    }

    #[tokio::test]
    async fn split_replies_are_reassembled() -> Result<(), RespError> {
        let request = encode(&[b"LRANGE", b"q", b"0", b"-1"]);
        let (mut conn, server) = scripted(
            b"*3\r\n$3\r\none\r\n$0\r\n\r\n$5\r\nth\r\nr\r\n",
            request.clone(),
        );
        assert_eq!(
            conn.lrange_all("q").await?,
            vec!["one".to_string(), String::new(), "th\r\nr".to_string()]
        );
        assert_eq!(server.await.expect("server task"), request);
        Ok(())
    }

    #[tokio::test]
    async fn error_replies_and_closed_connections_are_errors() -> Result<(), RespError> {
        let request = encode(&[b"LLEN", b"q"]);
        let (mut conn, _server) = scripted(
            b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
            request.clone(),
        );
        let err = conn.llen("q").await.expect_err("error reply");
        assert_eq!(err.code(), Some("WRONGTYPE"), "{err}");

        let (mut conn, _server) = scripted(b"$3\r\nabc\r\n", request.clone());
        let err = conn.llen("q").await.expect_err("bulk is not an integer");
        assert_eq!(
            err.to_string(),
            "redis LLEN: unexpected reply: a 3-byte string"
        );

        let (mut conn, _server) = scripted(b":4", request);
        assert!(matches!(conn.llen("q").await, Err(RespError::Closed)));
        Ok(())
    }

    #[tokio::test]
    async fn auth_errors_never_quote_the_password() -> Result<(), RespError> {
        let request = encode(&[b"AUTH", b"hunter2"]);
        let (mut conn, _server) = scripted(
            b"-ERR AUTH hunter2 called without any password configured\r\n",
            request,
        );
        let err = conn.auth("hunter2").await.expect_err("refused");
        let text = err.to_string();
        assert!(!text.contains("hunter2"), "{text}");
        assert!(
            text.starts_with("redis AUTH: ERR AUTH *** called"),
            "{text}"
        );
        Ok(())
    }

    /// A redis-server on a free loopback port, killed when dropped.
    pub(crate) struct RedisServer {
        child: std::process::Child,
        pub(crate) port: u16,
    }

    impl Drop for RedisServer {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    const REDIS_SERVER: &str = "/usr/bin/redis-server";

    /// Starts a redis-server (with `extra` arguments), or `None` when none is installed.
    pub(crate) async fn redis_server(extra: &[&str]) -> Option<RedisServer> {
        if !std::path::Path::new(REDIS_SERVER).exists() {
            eprintln!("skipped: {REDIS_SERVER} is not installed (apt-get install redis-server)");
            return None;
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free loopback port")
            .port();
        let child = std::process::Command::new(REDIS_SERVER)
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .args(extra)
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server starts");
        let server = RedisServer { child, port };
        // Readiness, not timing: poll until it accepts connections.
        for _ in 0..200 {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                return Some(server);
            }
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        }
        panic!("redis-server on port {port} never accepted connections");
    }

    async fn connect(server: &RedisServer) -> Connection<tokio::net::TcpStream> {
        Connection::new(
            tokio::net::TcpStream::connect(("127.0.0.1", server.port))
                .await
                .expect("connects"),
        )
    }

    #[tokio::test]
    async fn list_commands_against_a_real_redis() -> Result<(), RespError> {
        let Some(server) = redis_server(&[]).await else {
            return Ok(());
        };
        let mut conn = connect(&server).await;
        conn.ping().await?;
        assert_eq!(conn.llen("datasets").await?, 0);
        assert_eq!(conn.lrange_all("datasets").await?, Vec::<String>::new());

        // More than one chunk, with values that need binary safety.
        let items: Vec<String> = (0..2 * PUSH_CHUNK + 7)
            .map(|i| format!("shard-{i:05}\r\n é"))
            .collect();
        assert_eq!(
            conn.rpush("datasets", &items).await?,
            i64::try_from(items.len()).expect("small")
        );
        assert_eq!(conn.lrange_all("datasets").await?, items);
        assert_eq!(
            conn.rpush("datasets", &["tail".to_string()]).await?,
            i64::try_from(items.len() + 1).expect("small")
        );
        assert_eq!(
            conn.rpush("datasets", &[]).await?,
            i64::try_from(items.len() + 1).expect("small"),
            "an empty push reports the length"
        );

        assert_eq!(conn.lrem("datasets", &items[3]).await?, 1);
        assert_eq!(conn.lrem("datasets", &items[3]).await?, 0, "already gone");
        assert_eq!(
            conn.llen("datasets").await?,
            i64::try_from(items.len()).expect("small")
        );
        let left = conn.lrange_all("datasets").await?;
        assert!(!left.contains(&items[3]));
        assert_eq!(left.last().map(String::as_str), Some("tail"));

        // A key of another type: the server's error comes back with its code, and the
        // connection stays usable after a failed transaction.
        conn.call("SET", &[b"SET", b"plain", b"v"]).await?;
        let err = conn
            .rpush("plain", &["x".to_string()])
            .await
            .expect_err("wrong type");
        assert_eq!(err.code(), Some("WRONGTYPE"), "{err}");
        conn.ping().await?;
        assert_eq!(
            conn.llen("datasets").await?,
            i64::try_from(items.len()).expect("small")
        );
        Ok(())
    }

    #[tokio::test]
    async fn auth_against_a_real_redis() -> Result<(), RespError> {
        let Some(server) = redis_server(&["--requirepass", "s3cret-pw"]).await else {
            return Ok(());
        };
        let mut conn = connect(&server).await;
        let err = conn.llen("q").await.expect_err("not authenticated yet");
        assert_eq!(err.code(), Some("NOAUTH"), "{err}");
        let err = conn.auth("wrong-pw").await.expect_err("wrong password");
        assert!(!err.to_string().contains("wrong-pw"), "{err}");
        conn.auth("s3cret-pw").await?;
        assert_eq!(conn.llen("q").await?, 0);
        Ok(())
    }
}
