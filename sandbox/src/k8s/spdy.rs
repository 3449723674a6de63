//! SPDY/3.1 for `kubectl port-forward`: what kubectl (client-go, over moby/spdystream)
//! speaks once the API server has upgraded the connection, either as a plain
//! `Upgrade: SPDY/3.1` or tunnelled in the binary messages of a WebSocket whose
//! subprotocol is `SPDY/3.1+portforward.k8s.io` (KEP-4006).
//!
//! This module owns the framing (control frames SYN_STREAM, SYN_REPLY, RST_STREAM,
//! SETTINGS, PING, GOAWAY, HEADERS, WINDOW_UPDATE; data frames with FIN), the header
//! block compression (zlib with the SPDY/3 dictionary, one context per direction for the
//! whole session), the send and receive windows, and the server side of a port-forward
//! session: it answers the client's streams, pairs the `error` and `data` streams of one
//! `requestid`, and bridges each pair to the pod port named by its `port` header with
//! [`stream::connect`], as the kubelet does. A port nothing listens on is reported on the
//! request's error stream; the session goes on serving other requests.
//!
//! Flow control: spdystream implements none. It never sends WINDOW_UPDATE, ignores ours,
//! and relies on TCP backpressure. Our sends therefore wait on the peer's window only once
//! the peer shows it keeps one (a WINDOW_UPDATE, or SETTINGS_INITIAL_WINDOW_SIZE); until
//! then the windows are only counted, so a peer that starts taking part later sees a
//! consistent count. What we receive is acknowledged with WINDOW_UPDATE as it reaches
//! the pod, so a peer that honours the 64 KiB default windows can send without end.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::pin::{pin, Pin};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{ready, Context, Poll};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::ws::{close_code, CloseFrame, Message, WebSocket};
use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress};
use futures::{Sink, Stream};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{mpsc, watch, Notify, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::stream;

/// The SPDY version this module speaks.
const VERSION: u16 = 3;

/// The `Upgrade` token of a plain SPDY connection.
pub(crate) const UPGRADE_PROTOCOL: &str = "SPDY/3.1";

/// The header in which a SPDY upgrade negotiates the protocol it carries.
pub(crate) const PROTOCOL_VERSION_HEADER: &str = "x-stream-protocol-version";

const SYN_STREAM: u16 = 1;
const SYN_REPLY: u16 = 2;
const RST_STREAM: u16 = 3;
const SETTINGS: u16 = 4;
const PING: u16 = 6;
const GOAWAY: u16 = 7;
const HEADERS: u16 = 8;
const WINDOW_UPDATE: u16 = 9;

/// FIN on data frames and on SYN_STREAM, SYN_REPLY and HEADERS.
const FLAG_FIN: u8 = 0x01;
/// SYN_STREAM: the sender will receive nothing on this stream.
const FLAG_UNIDIRECTIONAL: u8 = 0x02;
/// SETTINGS: forget persisted settings.
const FLAG_CLEAR_SETTINGS: u8 = 0x01;

/// RST_STREAM status codes (SPDY/3.1 §2.6.3).
pub(crate) const PROTOCOL_ERROR: u32 = 1;
pub(crate) const REFUSED_STREAM: u32 = 3;
pub(crate) const FLOW_CONTROL_ERROR: u32 = 7;

/// GOAWAY status codes (SPDY/3.1 §2.6.6).
const GOAWAY_OK: u32 = 0;
const GOAWAY_PROTOCOL_ERROR: u32 = 1;

/// SETTINGS_INITIAL_WINDOW_SIZE.
const SETTINGS_INITIAL_WINDOW_SIZE: u32 = 7;

/// Frame lengths are 24 bits.
const MAX_LENGTH: usize = 0x00ff_ffff;

/// A header block that inflates beyond this is refused rather than held in memory.
const MAX_HEADER_BLOCK: usize = 256 * 1024;

/// The initial window of every stream and of the session (SPDY/3.1 §2.6.8).
const DEFAULT_WINDOW: i64 = 64 * 1024;

/// Windows never grow beyond 2^31 - 1.
const MAX_WINDOW: i64 = 0x7fff_ffff;

/// What we received is acknowledged once this much has reached the pod: half the window,
/// so a peer honouring it always has the other half to send on meanwhile.
const ACK_THRESHOLD: u32 = 32 * 1024;

/// How long the kubelet waits for both streams of a request (its streamCreationTimeout).
const PAIR_TIMEOUT: Duration = Duration::from_secs(30);

/// Frames read ahead of the session loop.
const FRAME_QUEUE: usize = 16;

/// Bytes from the client waiting to be written to one pod connection. Beyond this the
/// session stops reading, which is all the backpressure a spdystream peer understands; a
/// peer keeping to its windows never has more than a window (64 KiB) queued, so it never
/// makes the session wait, whatever the size of its frames.
const INBOUND_BACKLOG: usize = 1024 * 1024;

/// Frames waiting for the writer.
const OUTBOUND_QUEUE: usize = 64;

/// The writer sends queued frames in one write up to about this size.
const WRITE_BATCH: usize = 64 * 1024;

/// How long a closing session waits for its last frames to be written.
const CLOSE_WAIT: Duration = Duration::from_secs(5);

/// The port-forward stream headers (`k8s.io/api/core/v1`).
const HEADER_STREAM_TYPE: &str = "streamtype";
const HEADER_PORT: &str = "port";
const HEADER_REQUEST_ID: &str = "requestid";

/// The zlib dictionary of SPDY/3 header blocks (SPDY/3 §2.6.10.1), 1423 bytes.
const DICTIONARY: &[u8] =
    b"\x00\x00\x00\x07options\x00\x00\x00\x04head\x00\x00\x00\x04post\x00\x00\x00\x03put\
    \x00\x00\x00\x06delete\x00\x00\x00\x05trace\x00\x00\x00\x06accept\x00\x00\x00\x0eacc\
    ept-charset\x00\x00\x00\x0faccept-encoding\x00\x00\x00\x0faccept-language\x00\x00\
    \x00\x0daccept-ranges\x00\x00\x00\x03age\x00\x00\x00\x05allow\x00\x00\x00\x0dauthori\
    zation\x00\x00\x00\x0dcache-control\x00\x00\x00\x0aconnection\x00\x00\x00\x0ccontent\
    -base\x00\x00\x00\x10content-encoding\x00\x00\x00\x10content-language\x00\x00\x00\
    \x0econtent-length\x00\x00\x00\x10content-location\x00\x00\x00\x0bcontent-md5\x00\
    \x00\x00\x0dcontent-range\x00\x00\x00\x0ccontent-type\x00\x00\x00\x04date\x00\x00\
    \x00\x04etag\x00\x00\x00\x06expect\x00\x00\x00\x07expires\x00\x00\x00\x04from\x00\
    \x00\x00\x04host\x00\x00\x00\x08if-match\x00\x00\x00\x11if-modified-since\x00\x00\
    \x00\x0dif-none-match\x00\x00\x00\x08if-range\x00\x00\x00\x13if-unmodified-since\x00\
    \x00\x00\x0dlast-modified\x00\x00\x00\x08location\x00\x00\x00\x0cmax-forwards\x00\
    \x00\x00\x06pragma\x00\x00\x00\x12proxy-authenticate\x00\x00\x00\x13proxy-authorizat\
    ion\x00\x00\x00\x05range\x00\x00\x00\x07referer\x00\x00\x00\x0bretry-after\x00\x00\
    \x00\x06server\x00\x00\x00\x02te\x00\x00\x00\x07trailer\x00\x00\x00\x11transfer-enco\
    ding\x00\x00\x00\x07upgrade\x00\x00\x00\x0auser-agent\x00\x00\x00\x04vary\x00\x00\
    \x00\x03via\x00\x00\x00\x07warning\x00\x00\x00\x10www-authenticate\x00\x00\x00\x06me\
    thod\x00\x00\x00\x03get\x00\x00\x00\x06status\x00\x00\x00\x06200 OK\x00\x00\x00\x07v\
    ersion\x00\x00\x00\x08HTTP/1.1\x00\x00\x00\x03url\x00\x00\x00\x06public\x00\x00\x00\
    \x0aset-cookie\x00\x00\x00\x0akeep-alive\x00\x00\x00\x06origin1001012012022052063003\
    02303304305306307402405406407408409410411412413414415416417502504505203 Non-Authorit\
    ative Information204 No Content301 Moved Permanently400 Bad Request401 Unauthorized4\
    03 Forbidden404 Not Found500 Internal Server Error501 Not Implemented503 Service Una\
    vailableJan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 Mon, Tue, Wed, Thu\
    , Fri, Sat, Sun, GMTchunked,text/html,image/png,image/jpg,image/gif,application/xml,\
    application/xhtml+xml,text/plain,text/javascript,publicprivatemax-age=gzip,deflate,s\
    dchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0.";

/// Why a session or a frame failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SpdyError {
    #[error("spdy transport failed: {0}")]
    Io(#[from] io::Error),
    #[error("spdy protocol error: {0}")]
    Protocol(String),
    #[error("spdy header compression failed: {0}")]
    Compression(String),
}

fn protocol(message: impl Into<String>) -> SpdyError {
    SpdyError::Protocol(message.into())
}

/// Header names and values; a value may hold several, separated by NUL.
pub(crate) type Headers = Vec<(String, String)>;

/// The first value of header `name`.
fn header<'a>(headers: &'a Headers, name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n == name)
        .and_then(|(_, v)| v.split('\0').next())
}

/// One SPDY/3.1 frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Frame {
    SynStream {
        stream_id: u32,
        associated_to: u32,
        priority: u8,
        slot: u8,
        fin: bool,
        unidirectional: bool,
        headers: Headers,
    },
    SynReply {
        stream_id: u32,
        fin: bool,
        headers: Headers,
    },
    RstStream {
        stream_id: u32,
        status: u32,
    },
    Settings {
        clear: bool,
        entries: Vec<Setting>,
    },
    Ping {
        id: u32,
    },
    GoAway {
        last_good_stream_id: u32,
        status: u32,
    },
    Headers {
        stream_id: u32,
        fin: bool,
        headers: Headers,
    },
    WindowUpdate {
        stream_id: u32,
        delta: u32,
    },
    Data {
        stream_id: u32,
        fin: bool,
        data: Vec<u8>,
    },
    /// A control frame type SPDY/3.1 does not define: the spec says to ignore it.
    Unknown {
        kind: u16,
    },
}

/// One SETTINGS entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Setting {
    pub flags: u8,
    pub id: u32,
    pub value: u32,
}

impl Frame {
    /// Whether the frame carries a header block, whose bytes a reader must get whole (see
    /// [`write_frames`]).
    fn has_header_block(&self) -> bool {
        matches!(
            self,
            Frame::SynStream { .. } | Frame::SynReply { .. } | Frame::Headers { .. }
        )
    }

    /// Appends the frame's bytes to `out`, compressing its header block with `compressor`
    /// (the sending direction's context, which every header block of the session shares).
    pub(crate) fn encode(
        &self,
        compressor: &mut HeaderCompressor,
        out: &mut Vec<u8>,
    ) -> Result<(), SpdyError> {
        let fin = |f: bool| if f { FLAG_FIN } else { 0 };
        match self {
            Frame::SynStream {
                stream_id,
                associated_to,
                priority,
                slot,
                fin: f,
                unidirectional,
                headers,
            } => {
                let mut payload = Vec::new();
                payload.extend_from_slice(&(stream_id & 0x7fff_ffff).to_be_bytes());
                payload.extend_from_slice(&(associated_to & 0x7fff_ffff).to_be_bytes());
                payload.push((priority & 0x07) << 5);
                payload.push(*slot);
                payload.extend(compressor.compress(&header_block(headers)?)?);
                let flags = fin(*f)
                    | if *unidirectional {
                        FLAG_UNIDIRECTIONAL
                    } else {
                        0
                    };
                control(out, SYN_STREAM, flags, &payload)
            }
            Frame::SynReply {
                stream_id,
                fin: f,
                headers,
            } => {
                let mut payload = (stream_id & 0x7fff_ffff).to_be_bytes().to_vec();
                payload.extend(compressor.compress(&header_block(headers)?)?);
                control(out, SYN_REPLY, fin(*f), &payload)
            }
            Frame::Headers {
                stream_id,
                fin: f,
                headers,
            } => {
                let mut payload = (stream_id & 0x7fff_ffff).to_be_bytes().to_vec();
                payload.extend(compressor.compress(&header_block(headers)?)?);
                control(out, HEADERS, fin(*f), &payload)
            }
            Frame::RstStream { stream_id, status } => {
                control(out, RST_STREAM, 0, &pair(stream_id & 0x7fff_ffff, *status))
            }
            Frame::Settings { clear, entries } => {
                let count =
                    u32::try_from(entries.len()).map_err(|_| protocol("too many settings"))?;
                let mut payload = count.to_be_bytes().to_vec();
                for s in entries {
                    let id = s.id & 0x00ff_ffff;
                    payload.extend_from_slice(&((u32::from(s.flags) << 24) | id).to_be_bytes());
                    payload.extend_from_slice(&s.value.to_be_bytes());
                }
                let flags = if *clear { FLAG_CLEAR_SETTINGS } else { 0 };
                control(out, SETTINGS, flags, &payload)
            }
            Frame::Ping { id } => control(out, PING, 0, &id.to_be_bytes()),
            Frame::GoAway {
                last_good_stream_id,
                status,
            } => control(
                out,
                GOAWAY,
                0,
                &pair(last_good_stream_id & 0x7fff_ffff, *status),
            ),
            Frame::WindowUpdate { stream_id, delta } => control(
                out,
                WINDOW_UPDATE,
                0,
                &pair(stream_id & 0x7fff_ffff, delta & 0x7fff_ffff),
            ),
            Frame::Data {
                stream_id,
                fin: f,
                data,
            } => {
                let len = length(data.len())?;
                out.extend_from_slice(&(stream_id & 0x7fff_ffff).to_be_bytes());
                out.extend_from_slice(&((u32::from(fin(*f)) << 24) | len).to_be_bytes());
                out.extend_from_slice(data);
                Ok(())
            }
            Frame::Unknown { kind } => Err(protocol(format!(
                "control frame type {kind} cannot be sent"
            ))),
        }
    }

    /// The frame whose 8-byte head is `head` and whose payload is `payload`, its header
    /// block inflated with `decompressor` (the receiving direction's context).
    pub(crate) fn decode(
        head: [u8; 8],
        payload: &[u8],
        decompressor: &mut HeaderDecompressor,
    ) -> Result<Frame, SpdyError> {
        let first = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
        let flags = head[4];
        let fin = flags & FLAG_FIN != 0;
        if first & 0x8000_0000 == 0 {
            return Ok(Frame::Data {
                stream_id: first,
                fin,
                data: payload.to_vec(),
            });
        }
        let version = u16::try_from((first >> 16) & 0x7fff).unwrap_or(u16::MAX);
        if version != VERSION {
            return Err(protocol(format!("unsupported spdy version {version}")));
        }
        let kind = u16::try_from(first & 0xffff).unwrap_or(u16::MAX);
        let word = |at: usize| -> Result<u32, SpdyError> {
            payload
                .get(at..at + 4)
                .and_then(|b| b.try_into().ok())
                .map(u32::from_be_bytes)
                .ok_or_else(|| protocol(format!("control frame type {kind} is too short")))
        };
        let exact = |len: usize| -> Result<(), SpdyError> {
            if payload.len() == len {
                Ok(())
            } else {
                Err(protocol(format!(
                    "control frame type {kind} has length {}, not {len}",
                    payload.len()
                )))
            }
        };
        Ok(match kind {
            SYN_STREAM => {
                let (Some(&priority), Some(&slot)) = (payload.get(8), payload.get(9)) else {
                    return Err(protocol("syn_stream frame is too short"));
                };
                Frame::SynStream {
                    stream_id: word(0)? & 0x7fff_ffff,
                    associated_to: word(4)? & 0x7fff_ffff,
                    priority: priority >> 5,
                    slot,
                    fin,
                    unidirectional: flags & FLAG_UNIDIRECTIONAL != 0,
                    headers: parse_header_block(&decompressor.decompress(&payload[10..])?)?,
                }
            }
            SYN_REPLY => Frame::SynReply {
                stream_id: word(0)? & 0x7fff_ffff,
                fin,
                headers: parse_header_block(&decompressor.decompress(&payload[4..])?)?,
            },
            HEADERS => Frame::Headers {
                stream_id: word(0)? & 0x7fff_ffff,
                fin,
                headers: parse_header_block(&decompressor.decompress(&payload[4..])?)?,
            },
            RST_STREAM => {
                exact(8)?;
                Frame::RstStream {
                    stream_id: word(0)? & 0x7fff_ffff,
                    status: word(4)?,
                }
            }
            SETTINGS => {
                let count = usize::try_from(word(0)?).unwrap_or(usize::MAX);
                exact(count.saturating_mul(8).saturating_add(4))?;
                let mut entries = Vec::with_capacity(count);
                for i in 0..count {
                    let flag_id = word(4 + 8 * i)?;
                    entries.push(Setting {
                        flags: flag_id.to_be_bytes()[0],
                        id: flag_id & 0x00ff_ffff,
                        value: word(8 + 8 * i)?,
                    });
                }
                Frame::Settings {
                    clear: flags & FLAG_CLEAR_SETTINGS != 0,
                    entries,
                }
            }
            PING => {
                exact(4)?;
                Frame::Ping { id: word(0)? }
            }
            GOAWAY => {
                exact(8)?;
                Frame::GoAway {
                    last_good_stream_id: word(0)? & 0x7fff_ffff,
                    status: word(4)?,
                }
            }
            WINDOW_UPDATE => {
                exact(8)?;
                Frame::WindowUpdate {
                    stream_id: word(0)? & 0x7fff_ffff,
                    delta: word(4)? & 0x7fff_ffff,
                }
            }
            kind => Frame::Unknown { kind },
        })
    }
}

fn pair(a: u32, b: u32) -> [u8; 8] {
    let mut out = [0; 8];
    out[..4].copy_from_slice(&a.to_be_bytes());
    out[4..].copy_from_slice(&b.to_be_bytes());
    out
}

fn length(len: usize) -> Result<u32, SpdyError> {
    u32::try_from(len)
        .ok()
        .filter(|l| *l as usize <= MAX_LENGTH)
        .ok_or_else(|| protocol(format!("a frame of {len} bytes exceeds the 24-bit length")))
}

fn control(out: &mut Vec<u8>, kind: u16, flags: u8, payload: &[u8]) -> Result<(), SpdyError> {
    let len = length(payload.len())?;
    out.extend_from_slice(&(0x8000 | VERSION).to_be_bytes());
    out.extend_from_slice(&kind.to_be_bytes());
    out.extend_from_slice(&((u32::from(flags) << 24) | len).to_be_bytes());
    out.extend_from_slice(payload);
    Ok(())
}

/// The uncompressed header block: a count, then each name and value with its length.
fn header_block(headers: &Headers) -> Result<Vec<u8>, SpdyError> {
    let too_long = || protocol("a header is too long");
    let mut out = u32::try_from(headers.len())
        .map_err(|_| too_long())?
        .to_be_bytes()
        .to_vec();
    for (name, value) in headers {
        for s in [name.to_ascii_lowercase().as_str(), value.as_str()] {
            out.extend_from_slice(
                &u32::try_from(s.len())
                    .map_err(|_| too_long())?
                    .to_be_bytes(),
            );
            out.extend_from_slice(s.as_bytes());
        }
    }
    Ok(out)
}

/// Reads an uncompressed header block; names are lowercased, as HTTP names are
/// case-insensitive and SPDY requires them lowercase anyway.
fn parse_header_block(block: &[u8]) -> Result<Headers, SpdyError> {
    let mut cursor = Cursor(block);
    let count = cursor.word()?;
    let mut headers = Vec::with_capacity(count.min(64));
    for _ in 0..count {
        let len = cursor.word()?;
        let name = String::from_utf8_lossy(cursor.take(len)?).to_ascii_lowercase();
        let len = cursor.word()?;
        let value = String::from_utf8_lossy(cursor.take(len)?).into_owned();
        headers.push((name, value));
    }
    Ok(headers)
}

/// Reads a header block front to back.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], SpdyError> {
        if self.0.len() < n {
            return Err(protocol("header block is truncated"));
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Ok(head)
    }

    fn word(&mut self) -> Result<usize, SpdyError> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize)
    }
}

/// The compressing side of one direction's header blocks: one zlib stream for the
/// session, primed with [`DICTIONARY`], each block ending on a sync flush so the peer
/// can inflate it on its own.
pub(crate) struct HeaderCompressor(Compress);

impl HeaderCompressor {
    pub(crate) fn new() -> Result<HeaderCompressor, SpdyError> {
        let mut inner = Compress::new(Compression::default(), true);
        inner
            .set_dictionary(DICTIONARY)
            .map_err(|e| SpdyError::Compression(e.to_string()))?;
        Ok(HeaderCompressor(inner))
    }

    pub(crate) fn compress(&mut self, block: &[u8]) -> Result<Vec<u8>, SpdyError> {
        let mut out = Vec::with_capacity(block.len() + 64);
        let mut consumed = 0;
        loop {
            let before = self.0.total_in();
            self.0
                .compress_vec(&block[consumed..], &mut out, FlushCompress::Sync)
                .map_err(|e| SpdyError::Compression(e.to_string()))?;
            consumed += progress(before, self.0.total_in())?;
            // zlib has finished a sync flush when it left room in the output.
            if consumed == block.len() && out.len() < out.capacity() {
                return Ok(out);
            }
            out.reserve(out.capacity().max(64));
        }
    }
}

/// The inflating side of one direction's header blocks; the dictionary is supplied when
/// the stream's zlib header asks for it.
pub(crate) struct HeaderDecompressor(Decompress);

impl HeaderDecompressor {
    pub(crate) fn new() -> HeaderDecompressor {
        HeaderDecompressor(Decompress::new(true))
    }

    pub(crate) fn decompress(&mut self, input: &[u8]) -> Result<Vec<u8>, SpdyError> {
        let fail = |message: String| SpdyError::Compression(message);
        let mut out = Vec::with_capacity(input.len() * 4 + 64);
        let mut consumed = 0;
        loop {
            let (before_in, before_out) = (self.0.total_in(), out.len());
            let result = self
                .0
                .decompress_vec(&input[consumed..], &mut out, FlushDecompress::Sync);
            consumed += progress(before_in, self.0.total_in())?;
            match result {
                Ok(_) => {}
                Err(e) if e.needs_dictionary().is_some() => {
                    self.0
                        .set_dictionary(DICTIONARY)
                        .map_err(|_| fail("the header block needs another dictionary".into()))?;
                    continue;
                }
                Err(e) => return Err(fail(e.to_string())),
            }
            if out.len() > MAX_HEADER_BLOCK {
                return Err(fail(format!(
                    "a header block inflates beyond {MAX_HEADER_BLOCK} bytes"
                )));
            }
            if consumed == input.len() && out.len() < out.capacity() {
                return Ok(out);
            }
            if out.len() < out.capacity() && out.len() == before_out && consumed < input.len() {
                // Room to write and input left, yet no progress: the stream is broken.
                return Err(fail("the header block does not inflate".into()));
            }
            out.reserve(out.capacity().max(64));
        }
    }
}

/// How far a zlib counter moved.
fn progress(before: u64, after: u64) -> Result<usize, SpdyError> {
    usize::try_from(after.saturating_sub(before))
        .map_err(|_| SpdyError::Compression("zlib counters overflowed".into()))
}

/// Reads frames off a transport, inflating header blocks with the receiving context.
pub(crate) struct FrameReader<R> {
    io: R,
    headers: HeaderDecompressor,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    pub(crate) fn new(io: R) -> FrameReader<R> {
        FrameReader {
            io,
            headers: HeaderDecompressor::new(),
        }
    }

    /// The next frame; `None` when the transport ends between frames.
    pub(crate) async fn next(&mut self) -> Result<Option<Frame>, SpdyError> {
        let mut head = [0; 8];
        let mut filled = 0;
        while filled < head.len() {
            let n = self.io.read(&mut head[filled..]).await?;
            if n == 0 {
                if filled == 0 {
                    return Ok(None);
                }
                return Err(protocol("the transport ended inside a frame"));
            }
            filled += n;
        }
        let len = u32::from_be_bytes([0, head[5], head[6], head[7]]) as usize;
        let mut payload = vec![0; len];
        self.io.read_exact(&mut payload).await.map_err(|e| {
            if e.kind() == io::ErrorKind::UnexpectedEof {
                protocol("the transport ended inside a frame")
            } else {
                SpdyError::Io(e)
            }
        })?;
        Frame::decode(head, &payload, &mut self.headers).map(Some)
    }
}

/// Writes the frames it is handed, compressing header blocks with the sending context,
/// until every sender is gone; then shuts the transport down.
///
/// A frame with a header block is written on its own: client-go's framer reads a header
/// block through a zlib reader that must find the whole block in what one read of the
/// transport returns (a TLS record, a WebSocket message), or it fails the connection
/// with "compressed payload size was incorrect".
async fn write_frames<W: AsyncWrite + Unpin>(
    mut io: W,
    mut frames: mpsc::Receiver<Frame>,
) -> Result<(), SpdyError> {
    let mut compressor = HeaderCompressor::new()?;
    let mut batch = Vec::new();
    let mut next = frames.recv().await;
    while let Some(frame) = next.take() {
        batch.clear();
        frame.encode(&mut compressor, &mut batch)?;
        if !frame.has_header_block() {
            while batch.len() < WRITE_BATCH {
                match frames.try_recv() {
                    Ok(f) if f.has_header_block() => {
                        next = Some(f);
                        break;
                    }
                    Ok(f) => f.encode(&mut compressor, &mut batch)?,
                    Err(_) => break,
                }
            }
        }
        io.write_all(&batch).await?;
        if next.is_none() {
            io.flush().await?;
            next = frames.recv().await;
        }
    }
    io.shutdown().await?;
    Ok(())
}

/// The windows of one session: ours to send on (granted by the peer) and what we owe the
/// peer for data that reached the pod.
pub(crate) struct Flow {
    state: Mutex<FlowState>,
    changed: Notify,
}

struct FlowState {
    /// Whether the peer keeps windows (see the module docs); until then sends never wait.
    enforced: bool,
    /// The peer's initial window for new streams.
    initial: i64,
    /// Our session send window.
    session: i64,
    /// Our send window of each open stream.
    streams: HashMap<u32, i64>,
    /// Received bytes that reached the pod and were not yet acknowledged.
    unacked_session: u32,
    unacked: HashMap<u32, u32>,
}

impl Flow {
    pub(crate) fn new() -> Flow {
        Flow {
            state: Mutex::new(FlowState {
                enforced: false,
                initial: DEFAULT_WINDOW,
                session: DEFAULT_WINDOW,
                streams: HashMap::new(),
                unacked_session: 0,
                unacked: HashMap::new(),
            }),
            changed: Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, FlowState> {
        // The state stays consistent across a panic elsewhere: every update is one step.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A stream the peer opened: its window starts at the peer's initial window.
    pub(crate) fn open(&self, stream_id: u32) {
        let mut s = self.lock();
        let initial = s.initial;
        s.streams.insert(stream_id, initial);
        s.unacked.insert(stream_id, 0);
    }

    /// A stream that is done or reset: senders waiting on it give up.
    pub(crate) fn close(&self, stream_id: u32) {
        let mut s = self.lock();
        s.streams.remove(&stream_id);
        s.unacked.remove(&stream_id);
        drop(s);
        self.changed.notify_waiters();
    }

    /// Takes up to `want` bytes of window for a data frame on `stream_id`, waiting while the
    /// peer keeps windows and has none left; `None` once the stream is closed.
    pub(crate) async fn acquire(&self, stream_id: u32, want: usize) -> Option<usize> {
        let want = i64::try_from(want).unwrap_or(MAX_WINDOW);
        loop {
            // Registered before the check, so an update between the check and the wait
            // still wakes this sender.
            let changed = self.changed.notified();
            {
                let mut guard = self.lock();
                let s = &mut *guard;
                let window = *s.streams.get(&stream_id)?;
                let grant = if s.enforced {
                    want.min(window).min(s.session)
                } else {
                    want
                };
                if grant > 0 {
                    s.session -= grant;
                    if let Some(w) = s.streams.get_mut(&stream_id) {
                        *w -= grant;
                    }
                    return usize::try_from(grant).ok();
                }
            }
            changed.await;
        }
    }

    /// A WINDOW_UPDATE from the peer (stream 0: the session window).
    pub(crate) fn update(&self, stream_id: u32, delta: u32) {
        let mut s = self.lock();
        s.enforced = true;
        let delta = i64::from(delta);
        if stream_id == 0 {
            s.session = (s.session + delta).min(MAX_WINDOW);
        } else if let Some(w) = s.streams.get_mut(&stream_id) {
            *w = (*w + delta).min(MAX_WINDOW);
        }
        drop(s);
        self.changed.notify_waiters();
    }

    /// SETTINGS_INITIAL_WINDOW_SIZE: open streams move by the difference (§2.6.8).
    pub(crate) fn set_initial_window(&self, value: u32) {
        let mut s = self.lock();
        s.enforced = true;
        let value = i64::from(value).min(MAX_WINDOW);
        let delta = value - s.initial;
        s.initial = value;
        for w in s.streams.values_mut() {
            *w = (*w + delta).min(MAX_WINDOW);
        }
        drop(s);
        self.changed.notify_waiters();
    }

    /// `n` received bytes of `stream_id` are gone (to the pod, or dropped); returns the
    /// WINDOW_UPDATE frames that give the peer its window back. `None`: data for a stream
    /// that is no more, which still counts against the session window.
    pub(crate) fn consumed(&self, stream_id: Option<u32>, n: usize) -> Vec<Frame> {
        let n = u32::try_from(n).unwrap_or(u32::MAX);
        let mut s = self.lock();
        let mut updates = Vec::new();
        s.unacked_session = s.unacked_session.saturating_add(n);
        if s.unacked_session >= ACK_THRESHOLD {
            updates.push(Frame::WindowUpdate {
                stream_id: 0,
                delta: std::mem::take(&mut s.unacked_session),
            });
        }
        if let Some(id) = stream_id {
            if let Some(unacked) = s.unacked.get_mut(&id) {
                *unacked = unacked.saturating_add(n);
                if *unacked >= ACK_THRESHOLD {
                    updates.push(Frame::WindowUpdate {
                        stream_id: id,
                        delta: std::mem::take(unacked),
                    });
                }
            }
        }
        updates
    }
}

/// Where a session's requests go: the address behind a pod port, `None` when nothing
/// listens there.
pub(crate) type Resolver = Arc<dyn Fn(u16) -> Option<SocketAddr> + Send + Sync>;

/// Serves one port-forward session over `io` (the upgraded connection, or a [`Tunnel`])
/// until the client goes away.
pub(crate) async fn serve<T>(io: T, resolve: Resolver)
where
    T: AsyncRead + AsyncWrite + Send + 'static,
{
    let (read, write) = tokio::io::split(io);
    let (out, outbound) = mpsc::channel(OUTBOUND_QUEUE);
    let mut writer = tokio::spawn(write_frames(write, outbound));
    // Reading a frame is not cancel-safe, so it runs apart from the select below.
    let (frames_tx, mut frames) = mpsc::channel(FRAME_QUEUE);
    let reader = tokio::spawn(async move {
        let mut reader = FrameReader::new(read);
        loop {
            let next = reader.next().await;
            let last = !matches!(next, Ok(Some(_)));
            if frames_tx.send(next).await.is_err() || last {
                return;
            }
        }
    });
    let mut session = Session {
        link: Link {
            out,
            flow: Arc::new(Flow::new()),
        },
        resolve,
        streams: HashMap::new(),
        pairs: HashMap::new(),
        bridges: JoinSet::new(),
        last_stream_id: 0,
        gone_away: false,
    };
    let writer_done = session.run(&mut frames, &mut writer).await;
    reader.abort();
    // Dropping the session aborts its bridges and lets the writer see its last sender go:
    // it then writes what is queued and shuts the transport down.
    drop(session);
    if !writer_done {
        // A writer stuck on a peer that stopped reading is given up on.
        if tokio::time::timeout(CLOSE_WAIT, &mut writer).await.is_err() {
            writer.abort();
        }
    }
}

/// What the bridges of a session share with it: the writer's queue and the windows.
#[derive(Clone)]
struct Link {
    out: mpsc::Sender<Frame>,
    flow: Arc<Flow>,
}

impl Link {
    /// Queues a frame; false when the writer is gone (the session is over).
    async fn frame(&self, frame: Frame) -> bool {
        self.out.send(frame).await.is_ok()
    }

    /// Sends `bytes` on a stream in frames the peer's windows allow; false once the stream
    /// or the session is gone.
    async fn send(&self, stream_id: u32, mut bytes: &[u8]) -> bool {
        while !bytes.is_empty() {
            let Some(n) = self.flow.acquire(stream_id, bytes.len()).await else {
                return false;
            };
            let (now, rest) = bytes.split_at(n.min(bytes.len()));
            let data = now.to_vec();
            if !self
                .frame(Frame::Data {
                    stream_id,
                    fin: false,
                    data,
                })
                .await
            {
                return false;
            }
            bytes = rest;
        }
        true
    }

    /// Half-closes our side of a stream.
    async fn fin(&self, stream_id: u32) {
        self.frame(Frame::Data {
            stream_id,
            fin: true,
            data: Vec::new(),
        })
        .await;
    }

    /// `n` received bytes are gone; gives the peer its window back when enough add up.
    async fn acknowledge(&self, stream_id: Option<u32>, n: usize) {
        for update in self.flow.consumed(stream_id, n) {
            self.frame(update).await;
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Error,
    Data,
}

/// A stream the client opened.
struct Open {
    request_id: String,
    kind: Kind,
}

/// Which streams of a pair the client reset: nothing more is sent on those.
#[derive(Debug, Clone, Copy, Default)]
struct Resets {
    data: bool,
    error: bool,
}

/// The streams of one forwarded connection (one `requestid`).
struct Pair {
    port: u16,
    error: Option<u32>,
    data: Option<u32>,
    /// When an incomplete pair gives up waiting for its other stream.
    deadline: Instant,
    /// The client's data toward the pod; dropped at the client's FIN.
    to_pod: Option<mpsc::UnboundedSender<Vec<u8>>>,
    /// The other end of `to_pod`, until the bridge takes it.
    from_client: Option<mpsc::UnboundedReceiver<Vec<u8>>>,
    /// Room left in `to_pod`, in bytes (see [`INBOUND_BACKLOG`]).
    backlog: Arc<Semaphore>,
    resets: watch::Sender<Resets>,
    started: bool,
}

struct Session {
    link: Link,
    resolve: Resolver,
    streams: HashMap<u32, Open>,
    pairs: HashMap<String, Pair>,
    /// One task per started pair, yielding its request id when done.
    bridges: JoinSet<String>,
    last_stream_id: u32,
    /// The client sent GOAWAY: no new streams, and the session ends with the last pair.
    gone_away: bool,
}

impl Session {
    /// Handles frames until the client goes away; true when that was the writer failing.
    async fn run(
        &mut self,
        frames: &mut mpsc::Receiver<Result<Option<Frame>, SpdyError>>,
        writer: &mut tokio::task::JoinHandle<Result<(), SpdyError>>,
    ) -> bool {
        loop {
            let deadline = self
                .pairs
                .values()
                .filter(|p| !p.started)
                .map(|p| p.deadline)
                .min();
            let far = Instant::now() + PAIR_TIMEOUT;
            tokio::select! {
                next = frames.recv() => match next {
                    Some(Ok(Some(frame))) => {
                        if !self.on_frame(frame).await {
                            return false;
                        }
                    }
                    Some(Err(SpdyError::Protocol(_) | SpdyError::Compression(_))) => {
                        // A peer we cannot follow: say so, as SPDY asks, and stop.
                        let last_good_stream_id = self.last_stream_id;
                        self.link.frame(Frame::GoAway {
                            last_good_stream_id,
                            status: GOAWAY_PROTOCOL_ERROR,
                        }).await;
                        return false;
                    }
                    // The transport ended or failed.
                    Some(Ok(None) | Err(SpdyError::Io(_))) | None => return false,
                },
                Some(done) = self.bridges.join_next(), if !self.bridges.is_empty() => {
                    // A bridge only fails by panicking; its pair then waits for the session's end.
                    if let Ok(request_id) = done {
                        self.forget(&request_id);
                    }
                }
                () = tokio::time::sleep_until(deadline.unwrap_or(far)), if deadline.is_some() => {
                    if !self.expire().await {
                        return false;
                    }
                }
                _ = &mut *writer => return true,
            }
            if self.gone_away && self.pairs.is_empty() {
                // Answer the client's GOAWAY: nothing is left to finish.
                let last_good_stream_id = self.last_stream_id;
                self.link
                    .frame(Frame::GoAway {
                        last_good_stream_id,
                        status: GOAWAY_OK,
                    })
                    .await;
                return false;
            }
        }
    }

    /// False when the session cannot go on (the writer is gone).
    async fn on_frame(&mut self, frame: Frame) -> bool {
        match frame {
            Frame::SynStream {
                stream_id,
                fin,
                headers,
                ..
            } => self.on_syn_stream(stream_id, fin, &headers).await,
            Frame::Data {
                stream_id,
                fin,
                data,
            } => self.on_data(stream_id, fin, data).await,
            Frame::RstStream { stream_id, .. } => {
                self.on_reset(stream_id);
                true
            }
            Frame::Settings { entries, .. } => {
                for e in entries {
                    if e.id == SETTINGS_INITIAL_WINDOW_SIZE {
                        self.link.flow.set_initial_window(e.value);
                    }
                }
                true
            }
            // Odd ids are the client's own pings (spdystream sends one every 10 s); even
            // ones would answer ours, and we send none.
            Frame::Ping { id } if id % 2 == 1 => self.link.frame(Frame::Ping { id }).await,
            Frame::GoAway { .. } => {
                self.gone_away = true;
                true
            }
            Frame::WindowUpdate { stream_id, delta } => {
                self.link.flow.update(stream_id, delta);
                true
            }
            // A client has nothing to reply to, HEADERS add nothing to port-forward, and
            // SPDY says to ignore control frames of unknown types.
            Frame::Ping { .. }
            | Frame::SynReply { .. }
            | Frame::Headers { .. }
            | Frame::Unknown { .. } => true,
        }
    }

    async fn refuse(&self, stream_id: u32, status: u32) -> bool {
        self.link
            .frame(Frame::RstStream { stream_id, status })
            .await
    }

    async fn on_syn_stream(&mut self, stream_id: u32, fin: bool, headers: &Headers) -> bool {
        if self.gone_away {
            return self.refuse(stream_id, REFUSED_STREAM).await;
        }
        // Client streams are odd and increase, as in spdystream's validateStreamId.
        if stream_id.is_multiple_of(2) || stream_id <= self.last_stream_id {
            return self.refuse(stream_id, PROTOCOL_ERROR).await;
        }
        self.last_stream_id = stream_id;
        // The checks of the kubelet's httpStreamReceived: refused streams get no reply.
        let Some(port) = header(headers, HEADER_PORT)
            .and_then(|p| p.parse::<u16>().ok())
            .filter(|p| *p > 0)
        else {
            return self.refuse(stream_id, REFUSED_STREAM).await;
        };
        let kind = match header(headers, HEADER_STREAM_TYPE) {
            Some("error") => Kind::Error,
            Some("data") => Kind::Data,
            _ => return self.refuse(stream_id, REFUSED_STREAM).await,
        };
        // Clients older than request ids number a pair by its error stream, whose data
        // stream follows it (the kubelet's fallback).
        let request_id = header(headers, HEADER_REQUEST_ID)
            .map(str::to_string)
            .unwrap_or_else(|| match kind {
                Kind::Error => stream_id.to_string(),
                Kind::Data => stream_id.saturating_sub(2).to_string(),
            });
        let pair = self
            .pairs
            .entry(request_id.clone())
            .or_insert_with(|| Pair {
                port,
                error: None,
                data: None,
                deadline: Instant::now() + PAIR_TIMEOUT,
                to_pod: None,
                from_client: None,
                backlog: Arc::new(Semaphore::new(INBOUND_BACKLOG)),
                resets: watch::Sender::new(Resets::default()),
                started: false,
            });
        let taken = match kind {
            Kind::Error => pair.error.is_some(),
            Kind::Data => pair.data.is_some(),
        };
        if taken {
            // As the kubelet: the pair's error stream hears of it; the extra stream is refused.
            let message = format!(
                "error processing stream for request {request_id}: {} stream already assigned",
                if kind == Kind::Error { "error" } else { "data" }
            );
            let error = pair.error.filter(|_| !pair.started);
            if !self.refuse(stream_id, PROTOCOL_ERROR).await {
                return false;
            }
            if let Some(error) = error {
                return self.link.send(error, message.as_bytes()).await;
            }
            return true;
        }
        match kind {
            Kind::Error => pair.error = Some(stream_id),
            Kind::Data => {
                // The data stream's port is the one forwarded, as with the kubelet.
                pair.port = port;
                pair.data = Some(stream_id);
                let (to_pod, from_client) = mpsc::unbounded_channel();
                // A FIN on the SYN_STREAM: the client sends nothing, the pod gets EOF.
                pair.to_pod = (!fin).then_some(to_pod);
                pair.from_client = Some(from_client);
            }
        }
        self.link.flow.open(stream_id);
        self.streams.insert(
            stream_id,
            Open {
                request_id: request_id.clone(),
                kind,
            },
        );
        if !self
            .link
            .frame(Frame::SynReply {
                stream_id,
                fin: false,
                headers: Vec::new(),
            })
            .await
        {
            return false;
        }
        self.start(&request_id);
        true
    }

    /// Starts the bridge of a pair that has both streams.
    fn start(&mut self, request_id: &str) {
        let Some(pair) = self.pairs.get_mut(request_id) else {
            return;
        };
        let (Some(error), Some(data), false) = (pair.error, pair.data, pair.started) else {
            return;
        };
        let Some(from_client) = pair.from_client.take() else {
            return;
        };
        pair.started = true;
        let bridge = Bridge {
            port: pair.port,
            data,
            error,
            from_client,
            backlog: pair.backlog.clone(),
            resets: pair.resets.subscribe(),
            link: self.link.clone(),
        };
        let resolve = self.resolve.clone();
        let request_id = request_id.to_string();
        self.bridges.spawn(async move {
            bridge.run(resolve).await;
            request_id
        });
    }

    async fn on_data(&mut self, stream_id: u32, fin: bool, data: Vec<u8>) -> bool {
        let n = data.len();
        let target = self
            .streams
            .get(&stream_id)
            .filter(|open| open.kind == Kind::Data)
            .and_then(|open| self.pairs.get_mut(&open.request_id));
        let Some(pair) = target else {
            // An error stream (the client writes nothing there) or a stream that is done:
            // the bytes are dropped, and still count against the windows.
            let known = self.streams.contains_key(&stream_id).then_some(stream_id);
            self.link.acknowledge(known, n).await;
            return true;
        };
        let to_pod = pair.to_pod.clone();
        let backlog = pair.backlog.clone();
        let started = pair.started;
        if fin {
            pair.to_pod = None;
        }
        if n == 0 {
            return true;
        }
        let Some(to_pod) = to_pod else {
            // Data after the client's FIN: nothing will take it.
            self.link.acknowledge(None, n).await;
            return true;
        };
        let permits = backlog_permits(n);
        if started {
            // Waits while the pod is slower than the client (see INBOUND_BACKLOG). The
            // backlog closes when the bridge ends.
            match backlog.acquire_many(permits).await {
                Ok(room) => room.forget(),
                Err(_) => {
                    self.link.acknowledge(None, n).await;
                    return true;
                }
            }
            if to_pod.send(data).is_err() {
                self.link.acknowledge(None, n).await;
            }
            return true;
        }
        // The bridge is not there yet to drain the queue, so waiting on it could wait for
        // ever: a client that sends that much before opening the error stream is refused.
        let room = backlog.try_acquire_many(permits);
        match room {
            Ok(room) => {
                room.forget();
                // The receiver waits in the pair for its bridge: this send cannot fail.
                let _ = to_pod.send(data);
                true
            }
            Err(_) => {
                if let Some(pair) = self
                    .streams
                    .get(&stream_id)
                    .and_then(|open| self.pairs.get_mut(&open.request_id))
                {
                    pair.to_pod = None;
                }
                self.link.acknowledge(None, n).await;
                self.refuse(stream_id, FLOW_CONTROL_ERROR).await
            }
        }
    }

    fn on_reset(&mut self, stream_id: u32) {
        let Some(open) = self.streams.remove(&stream_id) else {
            return;
        };
        self.link.flow.close(stream_id);
        if let Some(pair) = self.pairs.get_mut(&open.request_id) {
            pair.resets.send_modify(|r| match open.kind {
                Kind::Data => r.data = true,
                Kind::Error => r.error = true,
            });
            if open.kind == Kind::Data {
                pair.to_pod = None;
            }
        }
    }

    /// Forgets a pair whose bridge is done, and its streams.
    fn forget(&mut self, request_id: &str) {
        let Some(pair) = self.pairs.remove(request_id) else {
            return;
        };
        for id in [pair.error, pair.data].into_iter().flatten() {
            self.streams.remove(&id);
            self.link.flow.close(id);
        }
    }

    /// Gives up on pairs whose other stream never came, telling the client as the
    /// kubelet does; false when the session cannot go on.
    async fn expire(&mut self) -> bool {
        let now = Instant::now();
        let expired: Vec<String> = self
            .pairs
            .iter()
            .filter(|(_, p)| !p.started && p.deadline <= now)
            .map(|(id, _)| id.clone())
            .collect();
        for request_id in expired {
            let Some(pair) = self.pairs.get(&request_id) else {
                continue;
            };
            let (error, data) = (pair.error, pair.data);
            if let Some(error) = error {
                let message = format!("timed out waiting for streams of request {request_id}");
                if !self.link.send(error, message.as_bytes()).await {
                    return false;
                }
            }
            for id in [error, data].into_iter().flatten() {
                self.link.fin(id).await;
            }
            self.forget(&request_id);
        }
        true
    }
}

/// Connects one pair to its pod port.
struct Bridge {
    port: u16,
    data: u32,
    error: u32,
    from_client: mpsc::UnboundedReceiver<Vec<u8>>,
    backlog: Arc<Semaphore>,
    resets: watch::Receiver<Resets>,
    link: Link,
}

impl Drop for Bridge {
    fn drop(&mut self) {
        // Nothing drains the queue any more: a session waiting for room stops waiting.
        self.backlog.close();
    }
}

/// What a chunk of `n` bytes takes of a backlog; larger chunks take all of it.
fn backlog_permits(n: usize) -> u32 {
    u32::try_from(n.min(INBOUND_BACKLOG)).unwrap_or(u32::MAX)
}

impl Bridge {
    /// Forwards until the pod side closes or the client resets the data stream, then
    /// closes both streams, with the kubelet's error text first when the port could not
    /// be reached.
    async fn run(mut self, resolve: Resolver) {
        // Looked up per connection: the process behind the port may have moved.
        let addr = resolve(self.port);
        let outcome = {
            let forward = forward(
                self.port,
                addr,
                self.data,
                (&mut self.from_client, &self.backlog),
                &self.link,
            );
            let reset = self.resets.wait_for(|r| r.data);
            tokio::select! {
                outcome = forward => outcome,
                _ = reset => Ok(()),
            }
        };
        let resets = *self.resets.borrow();
        if !resets.error {
            if let Err(message) = outcome {
                self.link.send(self.error, message.as_bytes()).await;
            }
            self.link.fin(self.error).await;
        }
        if !resets.data {
            self.link.fin(self.data).await;
        }
    }
}

/// Copies between the data stream and the pod port until the pod side closes; the
/// client's FIN half-closes the pod connection. `Err`: the kubelet's text for a port that
/// could not be reached.
async fn forward(
    port: u16,
    addr: Option<SocketAddr>,
    data: u32,
    inbound: (&mut mpsc::UnboundedReceiver<Vec<u8>>, &Semaphore),
    link: &Link,
) -> Result<(), String> {
    let tcp = stream::connect(port, addr).await?;
    let (read, write) = tcp.into_split();
    let mut to_pod = pin!(to_pod(write, inbound, data, link));
    let mut to_client = pin!(to_client(read, data, link));
    tokio::select! {
        () = &mut to_client => {}
        () = &mut to_pod => to_client.await,
    }
    Ok(())
}

async fn to_pod(
    mut write: OwnedWriteHalf,
    (from_client, backlog): (&mut mpsc::UnboundedReceiver<Vec<u8>>, &Semaphore),
    data: u32,
    link: &Link,
) {
    let mut broken = false;
    while let Some(chunk) = from_client.recv().await {
        // After a failed write the queue is still drained, so the session never waits
        // on it; the pod side is gone and `to_client` ends the bridge.
        if !broken && write.write_all(&chunk).await.is_err() {
            broken = true;
        }
        backlog.add_permits(backlog_permits(chunk.len()) as usize);
        link.acknowledge(Some(data), chunk.len()).await;
    }
    // The client's FIN becomes the pod's EOF.
    let _ = write.shutdown().await;
}

async fn to_client(mut read: OwnedReadHalf, data: u32, link: &Link) {
    let mut buf = vec![0; stream::CHUNK];
    loop {
        let n = match read.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if !link.send(data, &buf[..n]).await {
            return;
        }
    }
}

/// A WebSocket as a byte stream, as client-go's TunnelingConnection is on its side:
/// binary messages in, one binary message per write out.
pub(crate) struct Tunnel {
    ws: WebSocket,
    /// The rest of the message being read.
    pending: Bytes,
    eof: bool,
    close_sent: bool,
}

impl Tunnel {
    pub(crate) fn new(ws: WebSocket) -> Tunnel {
        Tunnel {
            ws,
            pending: Bytes::new(),
            eof: false,
            close_sent: false,
        }
    }
}

fn ws_error(e: axum::Error) -> io::Error {
    io::Error::other(e)
}

impl AsyncRead for Tunnel {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            if !self.pending.is_empty() {
                let n = self.pending.len().min(buf.remaining());
                let chunk = self.pending.split_to(n);
                buf.put_slice(&chunk);
                return Poll::Ready(Ok(()));
            }
            if self.eof {
                return Poll::Ready(Ok(()));
            }
            match ready!(Pin::new(&mut self.ws).poll_next(cx)) {
                Some(Ok(Message::Binary(bytes))) => self.pending = bytes,
                // client-go ends the tunnel with a normal closure.
                Some(Ok(Message::Close(_))) | None => self.eof = true,
                Some(Ok(Message::Text(_))) => {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "a text message in a spdy tunnel",
                    )))
                }
                // Answered by the WebSocket layer itself.
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                Some(Err(e)) => return Poll::Ready(Err(ws_error(e))),
            }
        }
    }
}

impl AsyncWrite for Tunnel {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        ready!(Pin::new(&mut self.ws).poll_ready(cx)).map_err(ws_error)?;
        Pin::new(&mut self.ws)
            .start_send(Message::binary(buf.to_vec()))
            .map_err(ws_error)?;
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.ws).poll_flush(cx).map_err(ws_error)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if !self.close_sent {
            ready!(Pin::new(&mut self.ws).poll_ready(cx)).map_err(ws_error)?;
            // With a code: client-go takes a close frame without one for an error.
            let frame = CloseFrame {
                code: close_code::NORMAL,
                reason: "".into(),
            };
            Pin::new(&mut self.ws)
                .start_send(Message::Close(Some(frame)))
                .map_err(ws_error)?;
            self.close_sent = true;
        }
        Pin::new(&mut self.ws).poll_close(cx).map_err(ws_error)
    }
}

/// Serves a port-forward session tunnelled in a WebSocket (`SPDY/3.1+portforward.k8s.io`).
pub(crate) async fn serve_tunnel(ws: WebSocket, resolve: Resolver) {
    serve(Tunnel::new(ws), resolve).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    use axum::extract::ws::WebSocketUpgrade;
    use axum::routing::get;
    use futures::{SinkExt as _, StreamExt as _};
    use tokio::io::{DuplexStream, ReadHalf, WriteHalf};
    use tokio::net::TcpListener;
    use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
    use tokio_tungstenite::tungstenite::Message as WsFrame;

    /// kubectl 1.32's first two SYN_STREAMs of a session (stream 1: the error stream of
    /// request 0 for port 6379; stream 3: its data stream), as it sent them to this
    /// server. The second block leans on the first's zlib context.
    const KUBECTL_SYN_STREAMS: &str = concat!(
        "800300010000003e0000000100000000000078f9e3c6a7c202253a703a2b294a4dcc851625ac",
        "a9a0808614cb45e01c60666c6ec9c0c0c0590489c64c50f2663400000000ffff",
        "800300010000001800000003000000000000c2aa19540e2512d60b000000ffff",
    );

    fn unhex(hex: &str) -> Vec<u8> {
        (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
            .collect()
    }

    fn adler32(bytes: &[u8]) -> u32 {
        let (mut a, mut b) = (1u32, 0u32);
        for &byte in bytes {
            a = (a + u32::from(byte)) % 65521;
            b = (b + a) % 65521;
        }
        (b << 16) | a
    }

    fn headers(pairs: &[(&str, &str)]) -> Headers {
        pairs
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    /// Splits a byte string into frames, decoding them with one receiving context.
    fn decode_all(mut bytes: &[u8]) -> Vec<Frame> {
        let mut decompressor = HeaderDecompressor::new();
        let mut frames = Vec::new();
        while !bytes.is_empty() {
            let head: [u8; 8] = bytes[..8].try_into().expect("a frame head");
            let len = u32::from_be_bytes([0, head[5], head[6], head[7]]) as usize;
            let payload = &bytes[8..8 + len];
            frames.push(Frame::decode(head, payload, &mut decompressor).expect("a valid frame"));
            bytes = &bytes[8 + len..];
        }
        frames
    }

    fn encode_all(frames: &[Frame]) -> Vec<u8> {
        let mut compressor = HeaderCompressor::new().expect("compressor");
        let mut bytes = Vec::new();
        for frame in frames {
            frame.encode(&mut compressor, &mut bytes).expect("encodes");
        }
        bytes
    }

    #[test]
    fn the_dictionary_is_the_spdy3_one() {
        assert_eq!(DICTIONARY.len(), 1423);
        // The dictionary id every SPDY/3 zlib header names.
        assert_eq!(adler32(DICTIONARY), 0xe3c6_a7c2);
        assert!(DICTIONARY.starts_with(b"\0\0\0\x07options\0\0\0\x04head"));
        assert!(DICTIONARY.ends_with(b"charset=iso-8859-1,utf-,*,enq=0."));
        let mut compress = Compress::new(Compression::default(), true);
        assert_eq!(compress.set_dictionary(DICTIONARY).ok(), Some(0xe3c6_a7c2));
    }

    #[test]
    fn frames_survive_an_encode_decode_roundtrip() {
        let frames = vec![
            Frame::SynStream {
                stream_id: 1,
                associated_to: 0,
                priority: 3,
                slot: 0,
                fin: false,
                unidirectional: false,
                headers: headers(&[
                    ("streamtype", "error"),
                    ("port", "6379"),
                    ("requestid", "0"),
                ]),
            },
            Frame::SynStream {
                stream_id: 3,
                associated_to: 1,
                priority: 7,
                slot: 9,
                fin: true,
                unidirectional: true,
                headers: headers(&[("streamtype", "data"), ("port", "6379"), ("multi", "a\0b")]),
            },
            Frame::SynReply {
                stream_id: 1,
                fin: false,
                headers: Vec::new(),
            },
            Frame::Headers {
                stream_id: 3,
                fin: true,
                headers: headers(&[("x", "y")]),
            },
            Frame::RstStream {
                stream_id: 5,
                status: REFUSED_STREAM,
            },
            Frame::Settings {
                clear: true,
                entries: vec![
                    Setting {
                        flags: 1,
                        id: SETTINGS_INITIAL_WINDOW_SIZE,
                        value: 1 << 20,
                    },
                    Setting {
                        flags: 0,
                        id: 4,
                        value: 100,
                    },
                ],
            },
            Frame::Ping { id: 1 },
            Frame::GoAway {
                last_good_stream_id: 7,
                status: GOAWAY_PROTOCOL_ERROR,
            },
            Frame::WindowUpdate {
                stream_id: 0,
                delta: 65536,
            },
            Frame::Data {
                stream_id: 3,
                fin: false,
                data: b"hello".to_vec(),
            },
            Frame::Data {
                stream_id: 3,
                fin: true,
                data: Vec::new(),
            },
        ];
        assert_eq!(decode_all(&encode_all(&frames)), frames);

        // Fixed layouts, byte for byte.
        assert_eq!(
            encode_all(&[Frame::Ping { id: 1 }]),
            unhex("800300060000000400000001")
        );
        assert_eq!(
            encode_all(&[Frame::RstStream {
                stream_id: 3,
                status: 5
            }]),
            unhex("80030003000000080000000300000005")
        );
        assert_eq!(
            encode_all(&[Frame::WindowUpdate {
                stream_id: 1,
                delta: 0x8000_0010
            }]),
            unhex("80030009000000080000000100000010"),
            "the reserved bit is cleared"
        );
        assert_eq!(
            encode_all(&[Frame::Data {
                stream_id: 3,
                fin: true,
                data: b"ab".to_vec()
            }]),
            unhex("00000003010000026162")
        );
        // An unknown control type decodes to something to ignore.
        assert_eq!(
            decode_all(&unhex("8003000a0000000400000000")),
            [Frame::Unknown { kind: 10 }]
        );
    }

    #[test]
    fn header_blocks_inflate_with_an_independent_decoder() {
        use miniz_oxide::inflate::core::inflate_flags::{
            TINFL_FLAG_HAS_MORE_INPUT, TINFL_FLAG_USING_NON_WRAPPING_OUTPUT_BUF,
        };
        use miniz_oxide::inflate::core::{decompress, DecompressorOxide};
        use miniz_oxide::inflate::TINFLStatus;

        let first = header_block(&headers(&[
            ("streamtype", "error"),
            ("port", "6379"),
            ("requestid", "0"),
        ]))
        .expect("block");
        let second = header_block(&headers(&[
            ("streamtype", "data"),
            ("port", "6379"),
            ("requestid", "0"),
        ]))
        .expect("block");
        let mut compressor = HeaderCompressor::new().expect("compressor");
        let a = compressor.compress(&first).expect("compresses");
        let b = compressor.compress(&second).expect("compresses");
        assert!(b.len() < a.len(), "the second block reuses the first");
        // Each block ends on a sync flush, so a peer can inflate it alone.
        assert!(a.ends_with(&[0, 0, 0xff, 0xff]) && b.ends_with(&[0, 0, 0xff, 0xff]));

        // The zlib header: deflate, FDICT set, and the dictionary's id.
        let (cmf, flg) = (a[0], a[1]);
        assert_eq!(cmf & 0x0f, 8, "deflate");
        assert_eq!((u16::from(cmf) * 256 + u16::from(flg)) % 31, 0);
        assert_ne!(flg & 0x20, 0, "FDICT");
        assert_eq!(
            u32::from_be_bytes([a[2], a[3], a[4], a[5]]),
            adler32(DICTIONARY)
        );

        // miniz_oxide inflates the raw deflate data into a buffer that already holds the
        // dictionary, which is what a preset dictionary means.
        let mut raw = a[6..].to_vec();
        raw.extend_from_slice(&b);
        let mut out = DICTIONARY.to_vec();
        out.resize(DICTIONARY.len() + 4096, 0);
        let mut inflater = DecompressorOxide::new();
        let (status, read, written) = decompress(
            &mut inflater,
            &raw,
            &mut out,
            DICTIONARY.len(),
            TINFL_FLAG_HAS_MORE_INPUT | TINFL_FLAG_USING_NON_WRAPPING_OUTPUT_BUF,
        );
        assert_eq!(status, TINFLStatus::NeedsMoreInput);
        assert_eq!(read, raw.len());
        let inflated = &out[DICTIONARY.len()..DICTIONARY.len() + written];
        assert_eq!(inflated, [first, second].concat());
    }

    #[test]
    fn kubectls_syn_streams_decode() {
        let frames = decode_all(&unhex(KUBECTL_SYN_STREAMS));
        let want = |stream_id: u32, kind: &str| Frame::SynStream {
            stream_id,
            associated_to: 0,
            priority: 0,
            slot: 0,
            fin: false,
            unidirectional: false,
            // In the order this kubectl sent them (client-go's header map has none).
            headers: headers(&[("streamtype", kind), ("port", "6379"), ("requestid", "0")]),
        };
        assert_eq!(frames, [want(1, "error"), want(3, "data")]);
    }

    #[tokio::test]
    async fn malformed_input_is_refused() {
        let mut decompressor = HeaderDecompressor::new();
        let bad_version = unhex("800200060000000400000001");
        let head: [u8; 8] = bad_version[..8].try_into().expect("head");
        let e = Frame::decode(head, &bad_version[8..], &mut decompressor).expect_err("version 2");
        assert_eq!(
            e.to_string(),
            "spdy protocol error: unsupported spdy version 2"
        );
        let short_rst = unhex("800300030000000400000001");
        let head: [u8; 8] = short_rst[..8].try_into().expect("head");
        assert!(Frame::decode(head, &short_rst[8..], &mut decompressor).is_err());
        let short_syn = unhex("80030001000000040000000100");
        let head: [u8; 8] = short_syn[..8].try_into().expect("head");
        assert!(Frame::decode(head, &short_syn[8..], &mut decompressor).is_err());

        // Garbage where a header block should be.
        let mut garbage = HeaderDecompressor::new();
        assert!(matches!(
            garbage.decompress(b"\x78\xbbnot zlib at all"),
            Err(SpdyError::Compression(_))
        ));
        // A block naming more headers than it holds.
        let mut compressor = HeaderCompressor::new().expect("compressor");
        let lying = compressor
            .compress(&[0, 0, 0, 2, 0, 0, 0, 1, b'a', 0, 0, 0, 1, b'b'])
            .expect("compresses");
        let mut decompressor = HeaderDecompressor::new();
        let block = decompressor.decompress(&lying).expect("inflates");
        assert_eq!(
            parse_header_block(&block)
                .expect_err("truncated")
                .to_string(),
            "spdy protocol error: header block is truncated"
        );

        // A transport that ends between frames, and one that ends inside one.
        let mut reader = FrameReader::new(&b""[..]);
        assert!(matches!(reader.next().await, Ok(None)));
        let cut = unhex("80030006000000040000");
        let mut reader = FrameReader::new(&cut[..]);
        assert_eq!(
            reader.next().await.expect_err("cut").to_string(),
            "spdy protocol error: the transport ended inside a frame"
        );
    }

    #[tokio::test]
    async fn sends_wait_on_windows_only_once_the_peer_keeps_them() {
        let flow = Flow::new();
        flow.open(1);
        // spdystream keeps no windows: nothing waits.
        assert_eq!(flow.acquire(1, 1 << 20).await, Some(1 << 20));

        let flow = Flow::new();
        flow.open(1);
        flow.open(3);
        flow.set_initial_window(65536);
        assert_eq!(flow.acquire(1, 100_000).await, Some(65536));
        let waiting = tokio::time::timeout(Duration::from_millis(50), flow.acquire(3, 10)).await;
        assert!(waiting.is_err(), "the session window is spent");
        flow.update(1, 100);
        flow.update(0, 30);
        assert_eq!(
            flow.acquire(1, 1000).await,
            Some(30),
            "the session window bounds it"
        );
        flow.update(0, 1000);
        assert_eq!(
            flow.acquire(1, 1000).await,
            Some(70),
            "the stream window bounds it"
        );
        assert_eq!(flow.acquire(3, 10).await, Some(10));

        // A smaller initial window moves open streams below zero; they wait for updates.
        flow.set_initial_window(5);
        let waiting = tokio::time::timeout(Duration::from_millis(50), flow.acquire(3, 10)).await;
        assert!(waiting.is_err(), "stream 3 is at 65526 + 5 - 65536 = -5");
        let flow = Arc::new(flow);
        let waiter = tokio::spawn({
            let flow = flow.clone();
            async move { flow.acquire(3, 10).await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        flow.close(3);
        assert_eq!(
            waiter.await.expect("joins"),
            None,
            "a closed stream gives up"
        );

        // Counted before the peer took part, so its later updates land right.
        let flow = Flow::new();
        flow.open(1);
        assert_eq!(flow.acquire(1, 100_000).await, Some(100_000));
        flow.update(1, 100_000 - 65536 + 5);
        flow.update(0, 100_000 - 65536 + 5);
        assert_eq!(flow.acquire(1, 1000).await, Some(5));
    }

    #[test]
    fn what_reaches_the_pod_is_acknowledged_in_window_updates() {
        let flow = Flow::new();
        flow.open(1);
        assert!(
            flow.consumed(Some(1), 20_000).is_empty(),
            "below the threshold"
        );
        assert_eq!(
            flow.consumed(Some(1), 20_000),
            [
                Frame::WindowUpdate {
                    stream_id: 0,
                    delta: 40_000
                },
                Frame::WindowUpdate {
                    stream_id: 1,
                    delta: 40_000
                }
            ]
        );
        // Bytes of a stream that is gone count for the session only.
        assert_eq!(
            flow.consumed(None, 40_000),
            [Frame::WindowUpdate {
                stream_id: 0,
                delta: 40_000
            }]
        );
        flow.close(1);
        assert!(flow.consumed(Some(1), 10).is_empty());
    }

    // ------------------------------------------------------------------ sessions

    /// A pod port: echoes what it gets, and closes once the client has half-closed.
    async fn echo_server() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (mut read, mut write) = tcp.into_split();
                    let _ = tokio::io::copy(&mut read, &mut write).await;
                    let _ = write.shutdown().await;
                });
            }
        });
        addr
    }

    /// Resolves `open` to `addr`; every other port has nothing behind it.
    fn resolver(open: u16, addr: SocketAddr) -> Resolver {
        Arc::new(move |port| (port == open).then_some(addr))
    }

    /// The client end of a session served over an in-memory pipe.
    struct Client {
        reader: FrameReader<ReadHalf<DuplexStream>>,
        writer: WriteHalf<DuplexStream>,
        compressor: HeaderCompressor,
    }

    impl Client {
        fn start(resolve: Resolver) -> Client {
            let (server, client) = tokio::io::duplex(1 << 20);
            tokio::spawn(serve(server, resolve));
            let (read, writer) = tokio::io::split(client);
            Client {
                reader: FrameReader::new(read),
                writer,
                compressor: HeaderCompressor::new().expect("compressor"),
            }
        }

        async fn send(&mut self, frame: Frame) {
            let mut bytes = Vec::new();
            frame
                .encode(&mut self.compressor, &mut bytes)
                .expect("encodes");
            self.writer
                .write_all(&bytes)
                .await
                .expect("the session reads");
        }

        async fn recv(&mut self) -> Option<Frame> {
            tokio::time::timeout(Duration::from_secs(10), self.reader.next())
                .await
                .expect("a frame within 10 s")
                .expect("a valid frame")
        }

        async fn frame(&mut self) -> Frame {
            self.recv().await.expect("the session goes on")
        }

        /// Opens one stream as kubectl does and checks the reply.
        async fn open(&mut self, stream_id: u32, kind: &str, port: u16, request: u32) {
            self.send(Frame::SynStream {
                stream_id,
                associated_to: 0,
                priority: 0,
                slot: 0,
                fin: false,
                unidirectional: false,
                headers: headers(&[
                    ("streamtype", kind),
                    ("port", &port.to_string()),
                    ("requestid", &request.to_string()),
                ]),
            })
            .await;
            assert_eq!(
                self.frame().await,
                Frame::SynReply {
                    stream_id,
                    fin: false,
                    headers: Vec::new()
                }
            );
        }

        /// Everything that arrives on `stream_id` until its FIN; other streams' data and
        /// FINs land in `others`.
        async fn until_fin(&mut self, stream_id: u32, others: &mut Vec<Frame>) -> Vec<u8> {
            let mut got = Vec::new();
            loop {
                match self.frame().await {
                    Frame::Data {
                        stream_id: id,
                        fin,
                        data,
                    } if id == stream_id => {
                        got.extend(data);
                        if fin {
                            return got;
                        }
                    }
                    other => others.push(other),
                }
            }
        }
    }

    /// A client that opens request `request` on streams `error` and `data`, sends `text`
    /// and FIN, and returns what comes back on the data stream and the error stream.
    async fn exchange(
        client: &mut Client,
        request: u32,
        (error, data): (u32, u32),
        port: u16,
        text: &[u8],
    ) -> (Vec<u8>, Vec<u8>) {
        client.open(error, "error", port, request).await;
        client
            .send(Frame::Data {
                stream_id: error,
                fin: true,
                data: Vec::new(),
            })
            .await;
        client.open(data, "data", port, request).await;
        client
            .send(Frame::Data {
                stream_id: data,
                fin: false,
                data: text.to_vec(),
            })
            .await;
        client
            .send(Frame::Data {
                stream_id: data,
                fin: true,
                data: Vec::new(),
            })
            .await;
        let mut others = Vec::new();
        let echoed = client.until_fin(data, &mut others).await;
        let mut errors = Vec::new();
        let mut error_fin = false;
        for frame in others {
            match frame {
                Frame::Data {
                    stream_id,
                    fin,
                    data,
                } if stream_id == error => {
                    errors.extend(data);
                    error_fin |= fin;
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        if !error_fin {
            errors.extend(client.until_fin(error, &mut Vec::new()).await);
        }
        (echoed, errors)
    }

    #[tokio::test]
    async fn a_session_bridges_a_request_to_the_pod_port() {
        let echo = echo_server().await;
        let mut client = Client::start(resolver(6379, echo));
        let (echoed, errors) = exchange(&mut client, 0, (1, 3), 6379, b"PING\r\n").await;
        assert_eq!(echoed, b"PING\r\n");
        assert!(errors.is_empty(), "{}", String::from_utf8_lossy(&errors));

        // The client's own pings come back; they are odd, as spdystream numbers them.
        client.send(Frame::Ping { id: 7 }).await;
        assert_eq!(client.frame().await, Frame::Ping { id: 7 });

        // GOAWAY with nothing left open ends the session.
        client
            .send(Frame::GoAway {
                last_good_stream_id: 0,
                status: GOAWAY_OK,
            })
            .await;
        assert!(matches!(client.frame().await, Frame::GoAway { .. }));
        assert_eq!(client.recv().await, None, "the session is over");
    }

    #[tokio::test]
    async fn a_port_nothing_listens_on_is_reported_and_the_session_goes_on() {
        let echo = echo_server().await;
        let mut client = Client::start(resolver(6379, echo));
        let (echoed, errors) = exchange(&mut client, 0, (1, 3), 9999, b"hello").await;
        assert!(echoed.is_empty());
        let message = String::from_utf8_lossy(&errors).into_owned();
        assert!(
            message.starts_with("error forwarding port 9999 to pod")
                && message.ends_with("connection refused"),
            "{message}"
        );

        // The next request, on the same session, works.
        let (echoed, errors) = exchange(&mut client, 1, (5, 7), 6379, b"still here").await;
        assert_eq!(echoed, b"still here");
        assert!(errors.is_empty());
    }

    #[tokio::test]
    async fn streams_kubelet_would_refuse_are_reset() {
        let echo = echo_server().await;
        let mut client = Client::start(resolver(6379, echo));
        let syn = |stream_id: u32, pairs: &[(&str, &str)]| Frame::SynStream {
            stream_id,
            associated_to: 0,
            priority: 0,
            slot: 0,
            fin: false,
            unidirectional: false,
            headers: headers(pairs),
        };
        let reset = |stream_id: u32, status: u32| Frame::RstStream { stream_id, status };
        client.send(syn(1, &[("streamtype", "data")])).await;
        assert_eq!(client.frame().await, reset(1, REFUSED_STREAM), "no port");
        client
            .send(syn(3, &[("streamtype", "data"), ("port", "0")]))
            .await;
        assert_eq!(client.frame().await, reset(3, REFUSED_STREAM), "port 0");
        client
            .send(syn(5, &[("streamtype", "stdin"), ("port", "6379")]))
            .await;
        assert_eq!(client.frame().await, reset(5, REFUSED_STREAM), "bad type");
        client
            .send(syn(5, &[("streamtype", "data"), ("port", "6379")]))
            .await;
        assert_eq!(client.frame().await, reset(5, PROTOCOL_ERROR), "reused id");
        client
            .send(syn(8, &[("streamtype", "data"), ("port", "6379")]))
            .await;
        assert_eq!(client.frame().await, reset(8, PROTOCOL_ERROR), "even id");

        // A duplicate error stream is refused, and the pair's error stream hears why.
        client.open(9, "error", 6379, 4).await;
        client
            .send(syn(
                11,
                &[
                    ("streamtype", "error"),
                    ("port", "6379"),
                    ("requestid", "4"),
                ],
            ))
            .await;
        assert_eq!(client.frame().await, reset(11, PROTOCOL_ERROR));
        match client.frame().await {
            Frame::Data {
                stream_id: 9, data, ..
            } => assert_eq!(
                String::from_utf8_lossy(&data),
                "error processing stream for request 4: error stream already assigned"
            ),
            other => panic!("unexpected {other:?}"),
        }
        // The session still serves.
        let (echoed, _) = exchange(&mut client, 5, (13, 15), 6379, b"ok").await;
        assert_eq!(echoed, b"ok");
    }

    #[tokio::test]
    async fn a_reset_data_stream_ends_its_bridge_and_closes_the_error_stream() {
        let echo = echo_server().await;
        let mut client = Client::start(resolver(6379, echo));
        client.open(1, "error", 6379, 0).await;
        client.open(3, "data", 6379, 0).await;
        client
            .send(Frame::Data {
                stream_id: 3,
                fin: false,
                data: b"x".to_vec(),
            })
            .await;
        assert_eq!(
            client.frame().await,
            Frame::Data {
                stream_id: 3,
                fin: false,
                data: b"x".to_vec()
            }
        );
        // kubectl resets the data stream when its local connection fails.
        client
            .send(Frame::RstStream {
                stream_id: 3,
                status: 5,
            })
            .await;
        assert_eq!(
            client.frame().await,
            Frame::Data {
                stream_id: 1,
                fin: true,
                data: Vec::new()
            },
            "the error stream closes, with nothing on it"
        );
    }

    #[tokio::test]
    async fn megabytes_flow_both_ways_within_the_peers_windows() {
        echo_within_windows(16 * 1024, 4 << 20).await;
    }

    #[tokio::test]
    async fn small_frames_within_the_windows_never_stall_the_session() {
        // Four times more frames in a window than 64 KiB of 16 KiB frames.
        echo_within_windows(256, 1 << 20).await;
    }

    /// A client that keeps windows (and makes the server keep them) sends `total` bytes in
    /// frames of `frame` bytes to an echo server and checks they come back.
    async fn echo_within_windows(frame: usize, total: usize) {
        let echo = echo_server().await;
        let mut client = Client::start(resolver(6379, echo));
        // Taking part in flow control: the server must now keep to our windows.
        client
            .send(Frame::Settings {
                clear: false,
                entries: vec![Setting {
                    flags: 0,
                    id: SETTINGS_INITIAL_WINDOW_SIZE,
                    value: 65536,
                }],
            })
            .await;
        client.open(1, "error", 6379, 0).await;
        client.open(3, "data", 6379, 0).await;

        let payload: Vec<u8> = (0..total).map(|i| (i % 251) as u8).collect();
        let mut sent = 0;
        // What the server lets us send, and what we let it send.
        let (mut send_stream, mut send_session) = (DEFAULT_WINDOW, DEFAULT_WINDOW);
        let mut granted = DEFAULT_WINDOW;
        let mut received = Vec::with_capacity(total);
        let mut unacked = 0;
        while received.len() < total {
            while sent < total && send_stream > 0 && send_session > 0 {
                let window = usize::try_from(send_stream.min(send_session)).expect("positive");
                let n = (total - sent).min(frame).min(window);
                client
                    .send(Frame::Data {
                        stream_id: 3,
                        fin: false,
                        data: payload[sent..sent + n].to_vec(),
                    })
                    .await;
                sent += n;
                send_stream -= n as i64;
                send_session -= n as i64;
                if sent == total {
                    client
                        .send(Frame::Data {
                            stream_id: 3,
                            fin: true,
                            data: Vec::new(),
                        })
                        .await;
                }
            }
            match client.frame().await {
                Frame::WindowUpdate {
                    stream_id: 0,
                    delta,
                } => send_session += i64::from(delta),
                Frame::WindowUpdate {
                    stream_id: 3,
                    delta,
                } => send_stream += i64::from(delta),
                Frame::Data {
                    stream_id: 3, data, ..
                } => {
                    received.extend_from_slice(&data);
                    assert!(
                        received.len() as i64 <= granted,
                        "the server sent {} bytes with a window of {granted}",
                        received.len()
                    );
                    unacked += data.len();
                    if unacked >= 16 * 1024 {
                        let delta = u32::try_from(unacked).expect("small");
                        for stream_id in [0, 3] {
                            client.send(Frame::WindowUpdate { stream_id, delta }).await;
                        }
                        granted += unacked as i64;
                        unacked = 0;
                    }
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        assert!(received == payload, "the echo comes back intact");
    }

    #[tokio::test]
    async fn a_websocket_tunnel_carries_the_session_in_binary_messages() {
        let echo = echo_server().await;
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        let resolve = resolver(6379, echo);
        let app = axum::Router::new().route(
            "/",
            get(move |upgrade: WebSocketUpgrade| {
                let resolve = resolve.clone();
                async move {
                    upgrade
                        .protocols(["SPDY/3.1+portforward.k8s.io"])
                        .on_upgrade(move |ws| serve_tunnel(ws, resolve))
                }
            }),
        );
        tokio::spawn(async move { axum::serve(listener, app).await });
        let mut request = format!("ws://{addr}/")
            .into_client_request()
            .expect("a websocket request");
        request.headers_mut().insert(
            "Sec-WebSocket-Protocol",
            "SPDY/3.1+portforward.k8s.io"
                .parse()
                .expect("a header value"),
        );
        let (mut ws, _) = tokio_tungstenite::connect_async(request)
            .await
            .expect("connect");

        // kubectl's own bytes, the first frame cut across two messages, as client-go's
        // framer writes a frame in several pieces.
        let syns = unhex(KUBECTL_SYN_STREAMS);
        let (first, second) = syns.split_at(70);
        for piece in [&first[..12], &first[12..], second] {
            ws.send(WsFrame::binary(piece.to_vec()))
                .await
                .expect("send");
        }
        let mut bytes = Vec::new();
        let mut frames = Vec::new();
        while frames.len() < 2 {
            match ws.next().await.expect("a message").expect("no error") {
                WsFrame::Binary(b) => bytes.extend_from_slice(&b),
                other => panic!("only binary messages carry SPDY, got {other:?}"),
            }
            frames = decode_all(&bytes);
        }
        let reply = |stream_id| Frame::SynReply {
            stream_id,
            fin: false,
            headers: Vec::new(),
        };
        assert_eq!(frames, [reply(1), reply(3)]);

        // Data and FIN in one message; the echo comes back, then both streams close.
        let mut client_compressor = HeaderCompressor::new().expect("compressor");
        let mut out = Vec::new();
        for frame in [
            Frame::Data {
                stream_id: 3,
                fin: false,
                data: b"PING\r\n".to_vec(),
            },
            Frame::Data {
                stream_id: 3,
                fin: true,
                data: Vec::new(),
            },
        ] {
            frame
                .encode(&mut client_compressor, &mut out)
                .expect("encodes");
        }
        ws.send(WsFrame::binary(out)).await.expect("send");
        let fins = |frames: &[Frame]| {
            frames
                .iter()
                .filter(|f| matches!(f, Frame::Data { fin: true, .. }))
                .count()
        };
        while fins(&frames) < 2 {
            match ws.next().await.expect("a message").expect("no error") {
                WsFrame::Binary(b) => bytes.extend_from_slice(&b),
                other => panic!("only binary messages carry SPDY, got {other:?}"),
            }
            frames = decode_all(&bytes);
        }
        let echoed: Vec<u8> = frames
            .iter()
            .filter_map(|f| match f {
                Frame::Data {
                    stream_id: 3, data, ..
                } => Some(data.clone()),
                _ => None,
            })
            .flatten()
            .collect();
        assert_eq!(echoed, b"PING\r\n");

        // The client's GOAWAY ends the session with a normal WebSocket closure, which
        // client-go's tunnel reads as EOF.
        let mut goaway = Vec::new();
        Frame::GoAway {
            last_good_stream_id: 0,
            status: GOAWAY_OK,
        }
        .encode(&mut client_compressor, &mut goaway)
        .expect("encodes");
        ws.send(WsFrame::binary(goaway)).await.expect("send");
        let mut closed = None;
        while let Some(Ok(message)) = ws.next().await {
            if let WsFrame::Close(frame) = message {
                closed = frame.map(|f| u16::from(f.code));
            }
        }
        assert_eq!(closed, Some(1000));
    }
}
