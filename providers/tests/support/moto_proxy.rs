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
    while let Ok(n) = client.read(&mut buf) {
        if n == 0 {
            break;
        }
        // Request lines are noted before the bytes go on: noted after, a fast answer
        // could reach the client, and the test clear the lines, before this one lands.
        if framed {
            framed = note_request_lines(&buf[..n], &mut pending, &mut body_left, seen);
        }
        if server.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = server.shutdown(Shutdown::Write);
    let _ = answers.join();
}

/// Notes the request line of each request that starts in `bytes`, following
/// Content-Length past bodies. Returns false at a chunked body, which is not followed:
/// no request line is noted on that connection after it.
fn note_request_lines(
    bytes: &[u8],
    pending: &mut Vec<u8>,
    body_left: &mut usize,
    seen: &Mutex<Vec<String>>,
) -> bool {
    pending.extend_from_slice(bytes);
    loop {
        if *body_left > 0 {
            let skip = (*body_left).min(pending.len());
            pending.drain(..skip);
            *body_left -= skip;
            if *body_left > 0 {
                return true;
            }
        }
        let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") else {
            return true;
        };
        let head = String::from_utf8_lossy(&pending[..end]).to_string();
        pending.drain(..end + 4);
        let mut lines = head.lines();
        if let Some(line) = lines.next() {
            seen.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(line.to_string());
        }
        for header in lines {
            let Some((name, value)) = header.split_once(':') else {
                continue;
            };
            if name.eq_ignore_ascii_case("content-length") {
                *body_left = value.trim().parse().unwrap_or(0);
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                return false;
            }
        }
    }
}
