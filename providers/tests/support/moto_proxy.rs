//! A loopback proxy in front of moto, shared by the AWS tests and the
//! `terrain-vs-terraform` benchmark: it counts requests (one request line each) without
//! instrumenting either client, and corrects the one answer of moto 5.2.1 the Rust SDK
//! refuses (the root element of GetBucketVersioning).

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Mutex, PoisonError};

/// What moto 5.2.1 names the root element of a GetBucketVersioning answer, and what S3
/// names it (the Rust SDK refuses any other root), padded to the same length: XML
/// allows blanks before `>` and `/>`, so the fix needs no change of Content-Length.
const MOTO_VERSIONING_ROOT: &[u8] = b"GetBucketVersioningResponse";
const S3_VERSIONING_ROOT: &[u8] = b"VersioningConfiguration    ";

/// A loopback proxy in front of moto: records the request line of every request that
/// passes, and corrects the root element of moto's GetBucketVersioning answers.
pub struct MotoProxy {
    pub url: String,
    lines: Arc<Mutex<Vec<String>>>,
}

impl MotoProxy {
    /// Listens on a free loopback port and relays to `upstream` (`http://127.0.0.1:PORT`).
    pub fn start(upstream: &str) -> MotoProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let url = format!("http://{}", listener.local_addr().expect("local address"));
        let upstream = upstream.trim_start_matches("http://").to_string();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&lines);
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let Ok(server) = TcpStream::connect(&upstream) else {
                    continue;
                };
                let seen = Arc::clone(&seen);
                std::thread::spawn(move || relay(client, server, &seen));
            }
        });
        MotoProxy { url, lines }
    }

    /// Forgets the request lines so far.
    pub fn clear(&self) {
        self.lines
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }

    /// The request lines so far (`GET /bucket?versioning HTTP/1.1`), in arrival order.
    pub fn lines(&self) -> Vec<String> {
        self.lines
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// Relays one connection: requests as they are (noting each request line), answers
/// with moto's versioning root corrected.
fn relay(mut client: TcpStream, mut server: TcpStream, seen: &Mutex<Vec<String>>) {
    let (Ok(mut from_server), Ok(mut to_client)) = (server.try_clone(), client.try_clone()) else {
        return;
    };
    let answers = std::thread::spawn(move || {
        let mut held: Vec<u8> = Vec::new();
        let mut buf = [0u8; 16 * 1024];
        loop {
            let n = match from_server.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            held.extend_from_slice(&buf[..n]);
            let mut at = 0;
            while let Some(i) = held[at..]
                .windows(MOTO_VERSIONING_ROOT.len())
                .position(|w| w == MOTO_VERSIONING_ROOT)
            {
                let start = at + i;
                held[start..start + S3_VERSIONING_ROOT.len()].copy_from_slice(S3_VERSIONING_ROOT);
                at = start + S3_VERSIONING_ROOT.len();
            }
            // Hold back only a tail that may be the start of a root split across reads.
            let keep = (1..MOTO_VERSIONING_ROOT.len())
                .rev()
                .find(|k| held.ends_with(&MOTO_VERSIONING_ROOT[..*k]))
                .unwrap_or(0);
            let send = held.len() - keep;
            if to_client.write_all(&held[..send]).is_err() {
                break;
            }
            held.drain(..send);
        }
        let _ = to_client.write_all(&held);
        let _ = to_client.shutdown(Shutdown::Write);
    });
    let mut pending: Vec<u8> = Vec::new();
    // Body bytes of the current request still to pass before the next request line.
    let mut body_left = 0usize;
    let mut framed = true;
    let mut buf = [0u8; 16 * 1024];
    let mut out: Vec<u8> = Vec::new();
    while let Ok(n) = client.read(&mut buf) {
        if n == 0 {
            break;
        }
        // Request lines are noted before the bytes go on: noted after, a fast answer
        // could reach the client, and the test clear the lines, before this one lands.
        let sent = if framed {
            out.clear();
            framed = frame_requests(&buf[..n], &mut pending, &mut body_left, seen, &mut out);
            server.write_all(&out)
        } else {
            server.write_all(&buf[..n])
        };
        if sent.is_err() {
            break;
        }
    }
    let _ = server.shutdown(Shutdown::Write);
    let _ = answers.join();
}

/// Notes the request line of each request that starts in `bytes`, following
/// Content-Length past bodies, and puts in `out` what goes on to moto: each request with
/// `Connection: close` in its head, so that moto closes the connection after answering
/// and the client never sends a request on a kept-alive connection moto is closing (a
/// request lost that way failed a test now and then with "connection closed before
/// message completed"). A head cut by a read waits in `pending` for the rest. Returns
/// false at a chunked body, which is not followed: everything after it goes on as it
/// is, and no request line is noted on that connection after it.
fn frame_requests(
    bytes: &[u8],
    pending: &mut Vec<u8>,
    body_left: &mut usize,
    seen: &Mutex<Vec<String>>,
    out: &mut Vec<u8>,
) -> bool {
    pending.extend_from_slice(bytes);
    loop {
        if *body_left > 0 {
            let pass = (*body_left).min(pending.len());
            out.extend(pending.drain(..pass));
            *body_left -= pass;
            if *body_left > 0 {
                return true;
            }
        }
        let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") else {
            return true;
        };
        let head = String::from_utf8_lossy(&pending[..end]).to_string();
        pending.drain(..end + 4);
        let mut lines = head.split("\r\n");
        let mut chunked = false;
        if let Some(line) = lines.next() {
            seen.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(line.to_string());
            out.extend_from_slice(line.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        for header in lines {
            let name = header.split_once(':').map_or("", |(n, _)| n.trim());
            if name.eq_ignore_ascii_case("connection") {
                continue;
            }
            if name.eq_ignore_ascii_case("content-length") {
                *body_left = header
                    .split_once(':')
                    .and_then(|(_, v)| v.trim().parse().ok())
                    .unwrap_or(0);
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                chunked = true;
            }
            out.extend_from_slice(header.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"Connection: close\r\n\r\n");
        if chunked {
            out.append(pending);
            return false;
        }
    }
}
