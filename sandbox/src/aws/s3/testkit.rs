//! The unit tests' harness: an S3 emulator driven through `handle`, as the server
//! drives it, and what it answers.

use axum::http::Method;
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use chrono::{DateTime, Utc};

use super::digest;
use super::S3;
use crate::aws::xml::Element;
use crate::aws::{AwsCtx, AwsRequest, Service};
use crate::faults::Faults;

/// An S3 emulator driven through `handle`, as the server drives it.
pub(super) struct Harness {
    pub(super) s3: S3,
    faults: Faults,
    pub(super) now: DateTime<Utc>,
}

pub(super) struct Reply {
    pub(super) status: u16,
    pub(super) headers: Vec<(String, String)>,
    pub(super) body: String,
    pub(super) doc: Option<Element>,
}

impl Reply {
    pub(super) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub(super) fn code(&self) -> Option<&str> {
        self.doc.as_ref().and_then(|d| d.text_of("Code"))
    }

    pub(super) fn doc(&self) -> &Element {
        self.doc.as_ref().expect("an XML body")
    }
}

impl Harness {
    pub(super) fn new() -> Self {
        Harness {
            s3: S3::default(),
            faults: Faults::default(),
            now: DateTime::parse_from_rfc3339("2026-11-21T10:00:00Z")
                .expect("valid time")
                .with_timezone(&Utc),
        }
    }

    pub(super) fn send(&mut self, req: AwsRequest) -> Reply {
        let ctx = AwsCtx {
            now: self.now,
            scale: 0.0,
            faults: &self.faults,
        };
        let response = self
            .s3
            .handle(&req, &ctx)
            .unwrap_or_else(|e| e.response(Service::S3, &req));
        let body = String::from_utf8_lossy(&response.body).into_owned();
        let doc = body
            .split_once("?>")
            .and_then(|(_, xml)| Element::parse(xml.trim().as_bytes()).ok());
        Reply {
            status: response.status,
            headers: response.headers,
            body,
            doc,
        }
    }

    pub(super) fn call(
        &mut self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Reply {
        self.send(AwsRequest::new(method, path, headers, body))
    }

    pub(super) fn in_region(
        &mut self,
        region: &str,
        method: Method,
        path: &str,
        body: &[u8],
    ) -> Reply {
        let mut req = AwsRequest::new(method, path, &[], body);
        req.region = region.to_string();
        self.send(req)
    }

    /// A configuration request with the Content-MD5 S3 requires.
    pub(super) fn configure(&mut self, method: Method, path: &str, body: &str) -> Reply {
        let md5 = B64.encode(digest::md5(body.as_bytes()));
        self.call(method, path, &[("content-md5", &md5)], body.as_bytes())
    }

    pub(super) fn put(&mut self, path: &str, data: &[u8]) -> Reply {
        self.call(Method::PUT, path, &[], data)
    }
}

pub(super) fn texts<'a>(doc: &'a Element, name: &'a str, field: &str) -> Vec<&'a str> {
    doc.all(name).filter_map(|e| e.text_of(field)).collect()
}
