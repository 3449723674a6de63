//! Names, tokens and formats: version and upload IDs, continuation tokens, S3's
//! `encoding-type=url`, ETags and their conditions, HTTP dates, hex, the account's
//! `Owner`, and the XML answer of a result document.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use chrono::{DateTime, Utc};

use super::digest;
use super::invalid_argument;
use crate::aws::xml::Element;
use crate::aws::{AwsError, AwsResponse, ACCOUNT};

/// A version ID as S3 makes them: 32 URL-safe characters.
pub(super) fn new_version_id() -> String {
    random_id(32)
}

/// `len` random URL-safe characters, as S3's version and upload IDs are made of.
pub(super) fn random_id(len: usize) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._";
    (0..len)
        .map(|_| ALPHABET[rand::random_range(0..ALPHABET.len())] as char)
        .collect()
}

/// Continuation tokens are opaque to clients; the sandbox's carry the last key listed.
pub(super) fn encode_token(last: &str) -> String {
    B64.encode(last)
}

pub(super) fn decode_token(token: &str, param: &str) -> Result<String, AwsError> {
    B64.decode(token)
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .ok_or_else(|| {
            invalid_argument("The continuation token provided is incorrect", param, token)
        })
}

/// S3's `encoding-type=url`: everything but unreserved characters and `/` escaped, space
/// as `+` (botocore decodes with `unquote_plus`).
pub(super) fn url_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'/' => {
                out.push(b as char)
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// Whether an `If-Match`/`If-None-Match` value (`*`, or quoted ETags separated by
/// commas) names `etag`.
pub(super) fn etag_matches(condition: &str, etag: &str) -> bool {
    condition
        .split(',')
        .map(str::trim)
        .any(|c| c == "*" || c.trim_start_matches("W/").trim_matches('"') == etag)
}

pub(super) fn quoted(etag: &str) -> String {
    format!("\"{etag}\"")
}

/// RFC 7231 dates, as `Last-Modified` carries them.
pub(super) fn http_date(t: DateTime<Utc>) -> String {
    t.format("%a, %d %b %Y %H:%M:%S GMT").to_string()
}

pub(super) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub(super) fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| {
            text.get(i..i + 2)
                .and_then(|pair| u8::from_str_radix(pair, 16).ok())
        })
        .collect()
}

/// The XML element of an `x-amz-checksum-<algorithm>` value (`ChecksumCRC32`).
pub(super) fn checksum_element(algorithm: &str) -> String {
    format!("Checksum{}", algorithm.to_uppercase())
}

/// The owner of everything: the sandbox account's canonical user ID (64 hex digits, as
/// S3's are), derived from the account number so it is stable.
pub(super) fn owner() -> Element {
    Element::new("Owner").with(Element::leaf(
        "ID",
        hex(&digest::sha256(ACCOUNT.as_bytes())),
    ))
}

pub(super) fn xml(status: u16, doc: &Element) -> AwsResponse {
    AwsResponse::xml(status, &doc.render())
}
