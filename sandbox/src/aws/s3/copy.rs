//! Copies: CopyObject (metadata and tagging directives, the copy-to-itself rule) and the
//! `x-amz-copy-source` it shares with UploadPartCopy (in `multipart.rs`): which version
//! of which object a copy reads, once its `x-amz-copy-source-if-*` conditions hold.

use chrono::{DateTime, Utc};

use super::format::{etag_matches, quoted, xml};
use super::objects::{
    add_version, check_object_extras, check_write_conditions, object_sse, sse_headers,
    storage_class, stored_headers, user_metadata,
};
use super::tagging::header_tags;
use super::{
    invalid_argument, precondition_failed, select_version, Fail, Outcome, Version, Versioning, NS,
    S3,
};
use crate::aws::xml::Element;
use crate::aws::{AwsError, AwsRequest};
use crate::common::time::time_millis;
use crate::http::percent_decode;

impl S3 {
    pub(super) fn copy_object(
        &mut self,
        bucket: &str,
        key: &str,
        req: &AwsRequest,
        now: DateTime<Utc>,
    ) -> Outcome {
        let directive = req.header("x-amz-metadata-directive").unwrap_or("COPY");
        if !matches!(directive, "COPY" | "REPLACE") {
            return Err(invalid_argument(
                "Unknown metadata directive.",
                "x-amz-metadata-directive",
                directive,
            )
            .into());
        }
        let tagging = req.header("x-amz-tagging-directive").unwrap_or("COPY");
        if !matches!(tagging, "COPY" | "REPLACE") {
            return Err(invalid_argument(
                "Unknown tagging directive.",
                "x-amz-tagging-directive",
                tagging,
            )
            .into());
        }
        check_object_extras(req)?;
        let source = self.copy_source(req)?;
        let (src_bucket, src_key) = (source.bucket.clone(), source.key.clone());
        let source_version_id = source.version_id.clone();
        let mut copy = source.version.clone();
        let destination = self.bucket_mut(bucket)?;
        check_write_conditions(
            req,
            key,
            destination.objects.get(key).and_then(|v| v.last()),
        )?;
        let changes_encryption = req.header("x-amz-server-side-encryption").is_some();
        let changes_class = req.header("x-amz-storage-class").is_some();
        if src_bucket == bucket
            && src_key == key
            && directive == "COPY"
            && !changes_encryption
            && !changes_class
        {
            return Err(AwsError::new(
                400,
                "InvalidRequest",
                "This copy request is illegal because it is trying to copy an object to itself without changing the object's metadata, storage class, website redirect location or encryption attributes.",
            )
            .into());
        }
        if directive == "REPLACE" {
            copy.content_type = req
                .header("content-type")
                .unwrap_or("binary/octet-stream")
                .to_string();
            copy.headers = stored_headers(req);
            copy.metadata = user_metadata(req)?;
        }
        // The source's tags come along unless the request replaces them (with none when
        // it sends no `x-amz-tagging`).
        if tagging == "REPLACE" {
            copy.tags = header_tags(req)?;
        }
        copy.storage_class = storage_class(req)?.or(copy.storage_class);
        copy.sse = Some(object_sse(req, destination)?);
        copy.last_modified = now;
        let sse = copy.sse.clone();
        let etag = copy.etag.clone();
        let version_id = add_version(destination, key, copy);
        let result = Element::new("CopyObjectResult")
            .attr("xmlns", NS)
            .with(Element::leaf("ETag", quoted(&etag)))
            .with(Element::leaf("LastModified", time_millis(now)));
        let mut response = xml(200, &result);
        if let Some(id) = source_version_id {
            response = response.with_header("x-amz-copy-source-version-id", id);
        }
        if destination.versioning == Some(Versioning::Enabled) {
            response = response.with_header("x-amz-version-id", version_id);
        }
        response.headers.extend(sse.iter().flat_map(sse_headers));
        Ok(response)
    }

    /// The object version `x-amz-copy-source` names, once the `x-amz-copy-source-if-*`
    /// conditions hold; for CopyObject and UploadPartCopy.
    pub(super) fn copy_source(&self, req: &AwsRequest) -> Result<CopySource<'_>, Fail> {
        let source = req.header("x-amz-copy-source").unwrap_or("");
        let (bucket, key, version_id) = parse_copy_source(source)?;
        let source_bucket = self.bucket(&bucket)?;
        let addresses_marker = version_id.as_deref().is_some_and(|id| {
            source_bucket
                .objects
                .get(&key)
                .and_then(|vs| vs.iter().find(|v| v.version_id == id))
                .is_some_and(|v| v.delete_marker)
        });
        if addresses_marker {
            return Err(AwsError::new(
                400,
                "InvalidRequest",
                "The source of a copy request may not specifically refer to a delete marker by version id.",
            )
            .into());
        }
        let version = select_version(source_bucket, &key, version_id.as_deref(), "PUT")?;
        if let Some(m) = req.header("x-amz-copy-source-if-match") {
            if !etag_matches(m, &version.etag) {
                return Err(precondition_failed("x-amz-copy-source-If-Match").into());
            }
        }
        if let Some(m) = req.header("x-amz-copy-source-if-none-match") {
            if etag_matches(m, &version.etag) {
                return Err(precondition_failed("x-amz-copy-source-If-None-Match").into());
            }
        }
        Ok(CopySource {
            version_id: source_bucket
                .versioning
                .is_some()
                .then(|| version.version_id.clone()),
            bucket,
            key,
            version,
        })
    }
}

/// What a copy reads: the source bucket and key, the version, and that version's ID
/// when the source bucket is versioned (answered as `x-amz-copy-source-version-id`).
pub(super) struct CopySource<'a> {
    bucket: String,
    key: String,
    pub(super) version: &'a Version,
    pub(super) version_id: Option<String>,
}

/// `x-amz-copy-source`: `[/]bucket/key[?versionId=id]`, URL-encoded.
fn parse_copy_source(source: &str) -> Result<(String, String, Option<String>), AwsError> {
    let invalid = || {
        AwsError::new(
            400,
            "InvalidArgument",
            "Copy Source must mention the source bucket and key: sourcebucket/sourcekey",
        )
        .with("ArgumentName", "x-amz-copy-source")
        .with("ArgumentValue", source)
    };
    let (path, version) = match source.split_once("?versionId=") {
        Some((p, v)) => (p, Some(percent_decode(v))),
        None => (source, None),
    };
    let path = percent_decode(path.trim_start_matches('/'));
    let (bucket, key) = path.split_once('/').ok_or_else(invalid)?;
    if bucket.is_empty() || key.is_empty() {
        return Err(invalid());
    }
    Ok((bucket.to_string(), key.to_string(), version))
}

#[cfg(test)]
mod tests {
    use axum::http::Method;

    use super::super::digest;
    use super::super::format::{hex, quoted};
    use super::super::testkit::Harness;

    #[test]
    fn copies_take_content_and_optionally_metadata() {
        let mut h = Harness::new();
        h.put("/src", b"");
        h.put("/dst", b"");
        h.call(
            Method::PUT,
            "/src/a",
            &[("x-amz-meta-k", "v"), ("content-type", "text/csv")],
            b"rows",
        );
        let r = h.call(
            Method::PUT,
            "/dst/b",
            &[("x-amz-copy-source", "/src/a")],
            b"",
        );
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.doc().name, "CopyObjectResult");
        assert_eq!(
            r.doc().text_of("ETag"),
            Some(quoted(&hex(&digest::md5(b"rows")))).as_deref()
        );
        let got = h.call(Method::GET, "/dst/b", &[], b"");
        assert_eq!(
            (
                got.body.as_str(),
                got.header("x-amz-meta-k"),
                got.header("content-type")
            ),
            ("rows", Some("v"), Some("text/csv"))
        );
        let replaced = [
            ("x-amz-copy-source", "src/a"),
            ("x-amz-metadata-directive", "REPLACE"),
            ("x-amz-meta-n", "1"),
        ];
        h.call(Method::PUT, "/dst/c", &replaced, b"");
        let got = h.call(Method::GET, "/dst/c", &[], b"");
        assert_eq!(
            (got.header("x-amz-meta-k"), got.header("x-amz-meta-n")),
            (None, Some("1"))
        );
        let itself = h.call(
            Method::PUT,
            "/src/a",
            &[("x-amz-copy-source", "/src/a")],
            b"",
        );
        assert_eq!(itself.code(), Some("InvalidRequest"));
        let missing = h.call(
            Method::PUT,
            "/dst/d",
            &[("x-amz-copy-source", "/src/none")],
            b"",
        );
        assert_eq!(missing.code(), Some("NoSuchKey"));
        let public = h.call(Method::PUT, "/dst/e", &[("x-amz-acl", "public-read")], b"x");
        assert_eq!(public.code(), Some("AccessControlListNotSupported"));
        let no_key = h.call(Method::PUT, "/dst/d", &[("x-amz-copy-source", "src")], b"");
        assert_eq!(no_key.code(), Some("InvalidArgument"));
    }
}
