//! Request bodies: `aws-chunked` framing undone (trailing checksums kept), `Content-MD5`
//! and the flexible `x-amz-checksum-*` headers and trailers verified against the content,
//! and the XML documents of configuration requests read and checked against their schema.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;

use super::digest;
use super::{invalid_argument, malformed, Checksum};
use crate::aws::xml::Element;
use crate::aws::{AwsError, AwsRequest};

/// The `x-amz-checksum-*` algorithms and their digest lengths in bytes.
pub(super) const CHECKSUM_ALGORITHMS: &[(&str, usize)] = &[
    ("crc32", 4),
    ("crc32c", 4),
    ("crc64nvme", 8),
    ("sha1", 20),
    ("sha256", 32),
    ("sha512", 64),
    ("md5", 16),
    ("xxhash64", 8),
    ("xxhash3", 8),
    ("xxhash128", 16),
];

/// A request body with any `aws-chunked` framing removed, and the trailing headers the
/// framing carried (flexible checksums sent after the data).
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Payload {
    pub(super) data: Vec<u8>,
    trailers: Vec<(String, String)>,
}

pub(super) fn payload(req: &AwsRequest) -> Result<Payload, AwsError> {
    let chunked = req.header("content-encoding").is_some_and(|e| {
        e.split(',')
            .any(|e| e.trim().eq_ignore_ascii_case("aws-chunked"))
    }) || req
        .header("x-amz-content-sha256")
        .is_some_and(|h| h.starts_with("STREAMING-"));
    if !chunked {
        return Ok(Payload {
            data: req.body.clone(),
            trailers: Vec::new(),
        });
    }
    let declared = req
        .header("x-amz-decoded-content-length")
        .ok_or_else(|| {
            AwsError::new(
                411,
                "MissingContentLength",
                "You must provide the Content-Length HTTP header.",
            )
        })?
        .trim()
        .parse::<usize>()
        .map_err(|_| {
            invalid_argument(
                "x-amz-decoded-content-length is not a number",
                "x-amz-decoded-content-length",
                req.header("x-amz-decoded-content-length").unwrap_or(""),
            )
        })?;
    let incomplete = |detail: String| {
        AwsError::new(
            400,
            "IncompleteBody",
            format!("The request body terminated unexpectedly: {detail}"),
        )
    };
    let decoded = decode_aws_chunked(&req.body).map_err(incomplete)?;
    if decoded.data.len() != declared {
        return Err(incomplete(format!(
            "{} bytes decoded, x-amz-decoded-content-length says {declared}",
            decoded.data.len()
        )));
    }
    if let Some(named) = req.header("x-amz-trailer") {
        for name in named.split(',').map(|n| n.trim().to_ascii_lowercase()) {
            if !decoded.trailers.iter().any(|(k, _)| *k == name) {
                return Err(incomplete(format!("the trailer {name} is missing")));
            }
        }
    }
    Ok(decoded)
}

/// Decodes `aws-chunked`: `hex-size[;chunk-signature=…]\r\n<data>\r\n` chunks, a
/// zero-size last chunk, then trailer lines (`x-amz-checksum-crc32:…`) and an empty line.
/// Chunk signatures are not checked: that needs the caller's secret key.
fn decode_aws_chunked(body: &[u8]) -> Result<Payload, String> {
    fn line<'a>(body: &'a [u8], pos: &mut usize) -> Result<&'a str, String> {
        let rest = &body[*pos..];
        let (text, used) = match rest.windows(2).position(|w| w == b"\r\n") {
            Some(i) => (&rest[..i], i + 2),
            None => (rest, rest.len()),
        };
        *pos += used;
        std::str::from_utf8(text).map_err(|_| "a chunk header is not text".to_string())
    }
    let mut pos = 0;
    let mut data = Vec::new();
    loop {
        if pos >= body.len() {
            return Err("the body ends before the last (zero-size) chunk".into());
        }
        let header = line(body, &mut pos)?;
        let size_hex = header.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_hex, 16)
            .map_err(|_| format!("{size_hex:?} is not a chunk size"))?;
        if size == 0 {
            break;
        }
        let end = pos
            .checked_add(size)
            .filter(|end| end.saturating_add(2) <= body.len())
            .ok_or_else(|| format!("a chunk of {size} bytes runs past the end of the body"))?;
        data.extend_from_slice(&body[pos..end]);
        if &body[end..end + 2] != b"\r\n" {
            return Err("a chunk is not followed by CRLF".into());
        }
        pos = end + 2;
    }
    let mut trailers = Vec::new();
    while pos < body.len() {
        let text = line(body, &mut pos)?;
        if text.is_empty() {
            break;
        }
        let (name, value) = text
            .split_once(':')
            .ok_or_else(|| format!("the trailer {text:?} has no `:`"))?;
        trailers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
    }
    if body[pos..].iter().any(|b| !b.is_ascii_whitespace()) {
        return Err("content after the trailers".into());
    }
    Ok(Payload { data, trailers })
}

/// Checks `Content-MD5` and the `x-amz-checksum-*` header or trailer against the body,
/// and returns the checksum to store. `required` is for the operations S3 refuses
/// without one (bucket configurations, DeleteObjects).
pub(super) fn integrity(
    req: &AwsRequest,
    body: &Payload,
    required: bool,
) -> Result<Option<Checksum>, AwsError> {
    let md5 = req.header("content-md5");
    if let Some(sent) = md5 {
        let valid = B64
            .decode(sent.trim())
            .ok()
            .filter(|d| d.len() == 16)
            .ok_or_else(|| {
                AwsError::new(
                    400,
                    "InvalidDigest",
                    "The Content-MD5 you specified was invalid.",
                )
                .with("Content-MD5", sent)
            })?;
        let actual = digest::md5(&body.data);
        if valid != actual {
            return Err(AwsError::new(
                400,
                "BadDigest",
                "The Content-MD5 you specified did not match what we received.",
            )
            .with("ExpectedDigest", sent)
            .with("CalculatedDigest", B64.encode(actual)));
        }
    }
    let sent: Vec<(&str, usize, &str)> = req
        .headers
        .iter()
        .chain(body.trailers.iter())
        .filter_map(|(name, value)| {
            let algorithm = name.to_ascii_lowercase();
            let algorithm = algorithm.strip_prefix("x-amz-checksum-")?.to_string();
            CHECKSUM_ALGORITHMS
                .iter()
                .find(|(a, _)| *a == algorithm)
                .map(|(a, len)| (*a, *len, value.as_str()))
        })
        .collect();
    if sent.len() > 1 {
        return Err(AwsError::new(
            400,
            "InvalidRequest",
            "Expecting a single x-amz-checksum- header. Multiple checksum Types are not allowed.",
        ));
    }
    let Some(&(algorithm, len, value)) = sent.first() else {
        if req.header("x-amz-sdk-checksum-algorithm").is_some() {
            return Err(AwsError::new(
                400,
                "InvalidRequest",
                "x-amz-sdk-checksum-algorithm specified, but no corresponding x-amz-checksum-* or x-amz-trailer headers were found.",
            ));
        }
        if required && md5.is_none() {
            return Err(AwsError::new(
                400,
                "InvalidRequest",
                "Missing required header for this request: Content-MD5",
            ));
        }
        return Ok(None);
    };
    let value = value.trim();
    let digest = B64
        .decode(value)
        .ok()
        .filter(|d| d.len() == len)
        .ok_or_else(|| {
            AwsError::new(
                400,
                "InvalidRequest",
                format!("Value for x-amz-checksum-{algorithm} header is invalid."),
            )
        })?;
    if let Some(actual) = digest::compute(algorithm, &body.data) {
        if actual != digest {
            return Err(AwsError::new(
                400,
                "BadDigest",
                format!(
                    "The {} you specified did not match the calculated checksum.",
                    algorithm.to_uppercase()
                ),
            ));
        }
    }
    Ok(Some(Checksum {
        algorithm: algorithm.to_string(),
        value: value.to_string(),
        composite: false,
    }))
}

/// The XML document of a configuration request, whose root must be `root`; S3 refuses
/// these without an integrity header.
pub(super) fn configuration(req: &AwsRequest, root: &str) -> Result<Element, AwsError> {
    let body = payload(req)?;
    integrity(req, &body, true)?;
    let doc = Element::parse(&body.data).map_err(|_| malformed())?;
    if doc.name != root {
        return Err(malformed());
    }
    Ok(doc)
}

/// Refuses children not in `allowed` or appearing more often than their maximum.
pub(super) fn expect_children(
    element: &Element,
    allowed: &[(&str, usize)],
) -> Result<(), AwsError> {
    for (name, max) in allowed {
        if element.all(name).count() > *max {
            return Err(malformed());
        }
    }
    if element
        .children
        .iter()
        .all(|c| allowed.iter().any(|(name, _)| *name == c.name))
    {
        Ok(())
    } else {
        Err(malformed())
    }
}

pub(super) fn parse_bool(text: &str) -> Result<bool, AwsError> {
    match text {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(malformed()),
    }
}

pub(super) fn parse_int(text: &str) -> Result<i64, AwsError> {
    text.parse::<i64>().map_err(|_| malformed())
}

#[cfg(test)]
mod tests {
    use axum::http::Method;

    use super::super::testkit::Harness;
    use super::*;

    #[test]
    fn aws_chunked_bodies_decode() {
        // STREAMING-AWS4-HMAC-SHA256-PAYLOAD: signed chunks, no trailer.
        let signed = b"5;chunk-signature=aaaa\r\nhello\r\n6;chunk-signature=bbbb\r\n world\r\n0;chunk-signature=cccc\r\n\r\n";
        assert_eq!(
            decode_aws_chunked(signed),
            Ok(Payload {
                data: b"hello world".to_vec(),
                trailers: vec![]
            })
        );
        // STREAMING-UNSIGNED-PAYLOAD-TRAILER: bare sizes, then the checksum trailer.
        let crc = B64.encode(digest::crc32(b"hello world", 0xEDB8_8320).to_be_bytes());
        let unsigned = format!("b\r\nhello world\r\n0\r\nx-amz-checksum-crc32:{crc}\r\n\r\n");
        let decoded = decode_aws_chunked(unsigned.as_bytes()).expect("decodes");
        assert_eq!(decoded.data, b"hello world");
        assert_eq!(
            decoded.trailers,
            vec![("x-amz-checksum-crc32".to_string(), crc.clone())]
        );
        // A chunk larger than 9 bytes has a multi-digit hex size; data may hold CRLF.
        let data: Vec<u8> = (0..=255u8).cycle().take(8192 + 17).collect();
        let mut body = b"2000;chunk-signature=x\r\n".to_vec();
        body.extend_from_slice(&data[..8192]);
        body.extend_from_slice(b"\r\n11;chunk-signature=y\r\n");
        body.extend_from_slice(&data[8192..]);
        body.extend_from_slice(b"\r\n0;chunk-signature=z\r\nx-amz-checksum-sha256:abc\r\nx-amz-trailer-signature:def\r\n\r\n");
        let decoded = decode_aws_chunked(&body).expect("decodes");
        assert_eq!(decoded.data, data);
        assert_eq!(decoded.trailers.len(), 2);
        // An empty payload is just the last chunk.
        assert_eq!(decode_aws_chunked(b"0\r\n\r\n").map(|p| p.data), Ok(vec![]));

        for bad in [
            &b""[..],
            b"5\r\nhello\r\n",
            b"5\r\nhel",
            b"zz\r\nhello\r\n0\r\n\r\n",
            b"5\r\nhelloXX0\r\n\r\n",
            b"0\r\nx-amz-checksum-crc32\r\n\r\n",
            b"0\r\n\r\ngarbage",
            b"ffffffffffffffffff\r\n",
        ] {
            assert!(
                decode_aws_chunked(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn chunked_uploads_are_stored_decoded_and_checked() {
        let mut h = Harness::new();
        assert_eq!(h.put("/bkt", b"").status, 200);
        let crc = B64.encode(digest::crc32(b"hello world", 0xEDB8_8320).to_be_bytes());
        let body = format!("b\r\nhello world\r\n0\r\nx-amz-checksum-crc32:{crc}\r\n\r\n");
        let headers = [
            ("content-encoding", "aws-chunked"),
            ("x-amz-content-sha256", "STREAMING-UNSIGNED-PAYLOAD-TRAILER"),
            ("x-amz-decoded-content-length", "11"),
            ("x-amz-trailer", "x-amz-checksum-crc32"),
            ("x-amz-sdk-checksum-algorithm", "CRC32"),
        ];
        let r = h.call(Method::PUT, "/bkt/k", &headers, body.as_bytes());
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(
            r.header("etag"),
            Some("\"5eb63bbbe01eeed093cb22bb8f5acdc3\"")
        );
        assert_eq!(r.header("x-amz-checksum-crc32"), Some(crc.as_str()));
        let got = h.call(
            Method::GET,
            "/bkt/k",
            &[("x-amz-checksum-mode", "ENABLED")],
            b"",
        );
        assert_eq!(got.body, "hello world");
        assert_eq!(got.header("x-amz-checksum-crc32"), Some(crc.as_str()));
        // The framing is not the object's content encoding.
        assert_eq!(got.header("content-encoding"), None);

        let wrong_length = [
            ("content-encoding", "aws-chunked"),
            ("x-amz-decoded-content-length", "12"),
        ];
        let r = h.call(Method::PUT, "/bkt/k", &wrong_length, body.as_bytes());
        assert_eq!((r.status, r.code()), (400, Some("IncompleteBody")));
        let no_length = [("content-encoding", "aws-chunked")];
        assert_eq!(
            h.call(Method::PUT, "/bkt/k", &no_length, body.as_bytes())
                .status,
            411
        );
        let bad_crc = "b\r\nhello world\r\n0\r\nx-amz-checksum-crc32:AAAAAA==\r\n\r\n";
        let r = h.call(Method::PUT, "/bkt/k", &headers, bad_crc.as_bytes());
        assert_eq!((r.status, r.code()), (400, Some("BadDigest")));
        let missing_trailer = "b\r\nhello world\r\n0\r\n\r\n";
        let r = h.call(Method::PUT, "/bkt/k", &headers, missing_trailer.as_bytes());
        assert_eq!((r.status, r.code()), (400, Some("IncompleteBody")));
    }

    #[test]
    fn integrity_headers_are_verified() {
        let mut h = Harness::new();
        h.put("/bkt", b"");
        let md5 = B64.encode(digest::md5(b"data"));
        assert_eq!(
            h.call(Method::PUT, "/bkt/k", &[("content-md5", &md5)], b"data")
                .status,
            200
        );
        let r = h.call(Method::PUT, "/bkt/k", &[("content-md5", &md5)], b"other");
        assert_eq!((r.status, r.code()), (400, Some("BadDigest")));
        let r = h.call(Method::PUT, "/bkt/k", &[("content-md5", "nope")], b"data");
        assert_eq!((r.status, r.code()), (400, Some("InvalidDigest")));
        let sha = B64.encode(digest::sha256(b"data"));
        let r = h.call(
            Method::PUT,
            "/bkt/k",
            &[("x-amz-checksum-sha256", &sha)],
            b"data",
        );
        assert_eq!(r.status, 200);
        let r = h.call(
            Method::PUT,
            "/bkt/k",
            &[("x-amz-checksum-sha256", &sha)],
            b"date",
        );
        assert_eq!((r.status, r.code()), (400, Some("BadDigest")));
        let crc = B64.encode(digest::crc32(b"data", 0x82F6_3B78).to_be_bytes());
        let both = [
            ("x-amz-checksum-sha256", sha.as_str()),
            ("x-amz-checksum-crc32c", crc.as_str()),
        ];
        assert_eq!(
            h.call(Method::PUT, "/bkt/k", &both, b"data").code(),
            Some("InvalidRequest")
        );
        let r = h.call(
            Method::PUT,
            "/bkt/k",
            &[("x-amz-checksum-crc32c", "AAA")],
            b"data",
        );
        assert_eq!(r.code(), Some("InvalidRequest"));
        let r = h.call(
            Method::PUT,
            "/bkt/k",
            &[("x-amz-sdk-checksum-algorithm", "CRC32")],
            b"data",
        );
        assert_eq!(r.code(), Some("InvalidRequest"));
        // Bucket configurations need one of them.
        let versioning =
            "<VersioningConfiguration><Status>Enabled</Status></VersioningConfiguration>";
        let r = h.call(Method::PUT, "/bkt?versioning", &[], versioning.as_bytes());
        assert_eq!((r.status, r.code()), (400, Some("InvalidRequest")));
        let crc32 = B64.encode(digest::crc32(versioning.as_bytes(), 0xEDB8_8320).to_be_bytes());
        let r = h.call(
            Method::PUT,
            "/bkt?versioning",
            &[("x-amz-checksum-crc32", &crc32)],
            versioning.as_bytes(),
        );
        assert_eq!(r.status, 200, "{}", r.body);
    }
}
