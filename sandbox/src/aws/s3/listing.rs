//! The list operations on a bucket's objects: ListObjectsV2, ListObjects (v1) and
//! ListObjectVersions, with prefixes, delimiters rolled up into common prefixes,
//! `encoding-type=url` and pagination; ListMultipartUploads (in `multipart.rs`) shares the
//! parameters and the roll-up.

use std::collections::BTreeMap;

use super::format::{decode_token, encode_token, owner, quoted, url_encode, xml};
use super::{invalid_argument, Bucket, Outcome, Version, NS};
use crate::aws::xml::Element;
use crate::aws::{AwsError, AwsRequest};
use crate::common::time::time_millis;

const MAX_KEYS: usize = 1000;

/// A key or, with a delimiter, a common prefix standing for every key under it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Listed<'a> {
    Key(&'a str),
    Prefix(&'a str),
}

impl Listed<'_> {
    fn name(&self) -> &str {
        match self {
            Listed::Key(k) | Listed::Prefix(k) => k,
        }
    }
}

/// The keys under `prefix` in order, those with `delimiter` after the prefix rolled up
/// into one common prefix each. Keys sharing a prefix are adjacent in sorted order, so
/// comparing with the last entry is enough to roll them up.
pub(super) fn roll_up<'a>(
    keys: impl Iterator<Item = &'a str>,
    prefix: &str,
    delimiter: &str,
) -> Vec<Listed<'a>> {
    let mut out: Vec<Listed<'a>> = Vec::new();
    for key in keys.filter(|k| k.starts_with(prefix)) {
        let common = (!delimiter.is_empty())
            .then(|| key[prefix.len()..].find(delimiter))
            .flatten()
            .map(|i| &key[..prefix.len() + i + delimiter.len()]);
        match common {
            Some(p) if out.last() == Some(&Listed::Prefix(p)) => {}
            Some(p) => out.push(Listed::Prefix(p)),
            None => out.push(Listed::Key(key)),
        }
    }
    out
}

/// The list parameters every list operation shares.
pub(super) struct ListParams<'a> {
    pub(super) prefix: &'a str,
    pub(super) delimiter: &'a str,
    max_keys: usize,
    pub(super) url_encoded: bool,
}

pub(super) fn list_params(req: &AwsRequest) -> Result<ListParams<'_>, AwsError> {
    let max_keys = match req.param("max-keys") {
        None => MAX_KEYS,
        Some(v) => {
            let n = v.parse::<i64>().map_err(|_| {
                invalid_argument(
                    "Provided max-keys not an integer or within integer range",
                    "max-keys",
                    v,
                )
            })?;
            if n < 0 {
                return Err(invalid_argument(
                    "Argument maxKeys must be an integer between 0 and 2147483647",
                    "maxKeys",
                    v,
                ));
            }
            usize::try_from(n).unwrap_or(MAX_KEYS).min(MAX_KEYS)
        }
    };
    let url_encoded = match req.param("encoding-type") {
        None => false,
        Some("url") => true,
        Some(other) => {
            return Err(invalid_argument(
                "Invalid Encoding Method specified in Request",
                "encoding-type",
                other,
            ))
        }
    };
    Ok(ListParams {
        prefix: req.param("prefix").unwrap_or(""),
        delimiter: req.param("delimiter").unwrap_or(""),
        max_keys,
        url_encoded,
    })
}

impl ListParams<'_> {
    /// A key or prefix as the response writes it: URL-encoded when the client asked
    /// (`encoding-type=url`, which botocore always sends).
    pub(super) fn out(&self, s: &str) -> String {
        if self.url_encoded {
            url_encode(s)
        } else {
            s.to_string()
        }
    }

    /// The elements every list result starts with.
    fn header(&self, doc: &mut Element, name: &str) {
        doc.push_leaf("Name", name);
        doc.push_leaf("Prefix", self.out(self.prefix));
        if !self.delimiter.is_empty() {
            doc.push_leaf("Delimiter", self.out(self.delimiter));
        }
        doc.push_leaf("MaxKeys", self.max_keys.to_string());
        if self.url_encoded {
            doc.push_leaf("EncodingType", "url");
        }
    }

    pub(super) fn common_prefix(&self, prefix: &str) -> Element {
        Element::new("CommonPrefixes").with(Element::leaf("Prefix", self.out(prefix)))
    }

    fn contents(&self, key: &str, v: &Version, with_owner: bool) -> Element {
        let mut e = Element::new("Contents")
            .with(Element::leaf("Key", self.out(key)))
            .with(Element::leaf("LastModified", time_millis(v.last_modified)))
            .with(Element::leaf("ETag", quoted(&v.etag)));
        if let Some(c) = &v.checksum {
            e.push_leaf("ChecksumAlgorithm", c.algorithm.to_uppercase());
            e.push_leaf("ChecksumType", c.kind());
        }
        e.push_leaf("Size", v.size.to_string());
        e.push_leaf("StorageClass", v.storage_class());
        if with_owner {
            e.push(owner());
        }
        e
    }
}

/// The current (not deleted) version of every key, in key order.
pub(super) fn current_objects(bucket: &Bucket) -> impl Iterator<Item = (&str, &Version)> {
    bucket.objects.iter().filter_map(|(k, versions)| {
        versions
            .last()
            .filter(|v| !v.delete_marker)
            .map(|v| (k.as_str(), v))
    })
}

pub(super) fn list_objects_v2(name: &str, bucket: &Bucket, req: &AwsRequest) -> Outcome {
    let params = list_params(req)?;
    let start_after = req.param("start-after").unwrap_or("");
    let token = match req.param("continuation-token") {
        Some(t) => Some(decode_token(t, "continuation-token")?),
        None => None,
    };
    let current: BTreeMap<&str, &Version> = current_objects(bucket).collect();
    let keys = current.keys().copied().filter(|k| *k > start_after);
    let entries: Vec<Listed> = roll_up(keys, params.prefix, params.delimiter)
        .into_iter()
        .filter(|e| token.as_deref().is_none_or(|t| e.name() > t))
        .collect();
    let page = &entries[..entries.len().min(params.max_keys)];
    let truncated = params.max_keys > 0 && page.len() < entries.len();
    let mut doc = Element::new("ListBucketResult").attr("xmlns", NS);
    params.header(&mut doc, name);
    if let Some(t) = req.param("continuation-token") {
        doc.push_leaf("ContinuationToken", t);
    }
    if let (true, Some(last)) = (truncated, page.last()) {
        doc.push_leaf("NextContinuationToken", encode_token(last.name()));
    }
    if !start_after.is_empty() {
        doc.push_leaf("StartAfter", params.out(start_after));
    }
    doc.push_leaf("KeyCount", page.len().to_string());
    doc.push_leaf("IsTruncated", truncated.to_string());
    let with_owner = req.param("fetch-owner") == Some("true");
    push_entries(&mut doc, &params, page, |key| {
        current
            .get(key)
            .map(|v| params.contents(key, v, with_owner))
    });
    Ok(xml(200, &doc))
}

pub(super) fn list_objects_v1(name: &str, bucket: &Bucket, req: &AwsRequest) -> Outcome {
    let params = list_params(req)?;
    let marker = req.param("marker").unwrap_or("");
    let current: BTreeMap<&str, &Version> = current_objects(bucket).collect();
    let keys = current.keys().copied().filter(|k| *k > marker);
    let entries: Vec<Listed> = roll_up(keys, params.prefix, params.delimiter)
        .into_iter()
        .filter(|e| e.name() > marker)
        .collect();
    let page = &entries[..entries.len().min(params.max_keys)];
    let truncated = params.max_keys > 0 && page.len() < entries.len();
    let mut doc = Element::new("ListBucketResult").attr("xmlns", NS);
    params.header(&mut doc, name);
    doc.push_leaf("Marker", params.out(marker));
    // S3 sends NextMarker only with a delimiter; without one the last key is the marker.
    if let (true, false, Some(last)) = (truncated, params.delimiter.is_empty(), page.last()) {
        doc.push_leaf("NextMarker", params.out(last.name()));
    }
    doc.push_leaf("IsTruncated", truncated.to_string());
    push_entries(&mut doc, &params, page, |key| {
        current.get(key).map(|v| params.contents(key, v, true))
    });
    Ok(xml(200, &doc))
}

/// Appends `Contents` for the keys of a page, then `CommonPrefixes`, as S3 orders them.
fn push_entries<'a>(
    doc: &mut Element,
    params: &ListParams,
    page: &[Listed<'a>],
    contents: impl Fn(&'a str) -> Option<Element>,
) {
    for entry in page {
        if let Listed::Key(key) = entry {
            if let Some(e) = contents(key) {
                doc.push(e);
            }
        }
    }
    for entry in page {
        if let Listed::Prefix(p) = entry {
            doc.push(params.common_prefix(p));
        }
    }
}

/// One row of ListObjectVersions.
enum VersionRow<'a> {
    Version {
        key: &'a str,
        version: &'a Version,
        latest: bool,
    },
    Prefix(&'a str),
}

pub(super) fn list_object_versions(name: &str, bucket: &Bucket, req: &AwsRequest) -> Outcome {
    let params = list_params(req)?;
    let key_marker = req.param("key-marker").unwrap_or("");
    let version_marker = req.param("version-id-marker").unwrap_or("");
    if !version_marker.is_empty() && key_marker.is_empty() {
        return Err(invalid_argument(
            "A version-id marker cannot be specified without a key marker.",
            "version-id-marker",
            version_marker,
        )
        .into());
    }
    let listed = roll_up(
        bucket.objects.keys().map(String::as_str),
        params.prefix,
        params.delimiter,
    );
    let mut rows: Vec<VersionRow> = Vec::new();
    for entry in listed {
        match entry {
            Listed::Prefix(p) => {
                if key_marker.is_empty() || p > key_marker {
                    rows.push(VersionRow::Prefix(p));
                }
            }
            Listed::Key(key) => {
                if !key_marker.is_empty() && key < key_marker {
                    continue;
                }
                let Some(versions) = bucket.objects.get(key) else {
                    continue;
                };
                // Newest first; on the marker's key, only the versions after the marker.
                let newest_first = versions.iter().rev().enumerate();
                let skip = if key == key_marker {
                    match versions
                        .iter()
                        .rev()
                        .position(|v| v.version_id == version_marker)
                    {
                        Some(i) if !version_marker.is_empty() => i + 1,
                        _ => versions.len(),
                    }
                } else {
                    0
                };
                for (i, version) in newest_first.skip(skip) {
                    rows.push(VersionRow::Version {
                        key,
                        version,
                        latest: i == 0,
                    });
                }
            }
        }
    }
    let page_len = rows.len().min(params.max_keys);
    let truncated = params.max_keys > 0 && page_len < rows.len();
    let mut doc = Element::new("ListVersionsResult").attr("xmlns", NS);
    params.header(&mut doc, name);
    doc.push_leaf("KeyMarker", params.out(key_marker));
    doc.push_leaf("VersionIdMarker", version_marker);
    if truncated {
        match &rows[page_len - 1] {
            VersionRow::Version { key, version, .. } => {
                doc.push_leaf("NextKeyMarker", params.out(key));
                doc.push_leaf("NextVersionIdMarker", version.version_id.as_str());
            }
            VersionRow::Prefix(p) => doc.push_leaf("NextKeyMarker", params.out(p)),
        }
    }
    doc.push_leaf("IsTruncated", truncated.to_string());
    for row in &rows[..page_len] {
        if let VersionRow::Version {
            key,
            version,
            latest,
        } = row
        {
            let mut e = Element::new(if version.delete_marker {
                "DeleteMarker"
            } else {
                "Version"
            });
            e.push_leaf("Key", params.out(key));
            e.push_leaf("VersionId", version.version_id.as_str());
            e.push_leaf("IsLatest", latest.to_string());
            e.push_leaf("LastModified", time_millis(version.last_modified));
            if !version.delete_marker {
                e.push_leaf("ETag", quoted(&version.etag));
                if let Some(c) = &version.checksum {
                    e.push_leaf("ChecksumAlgorithm", c.algorithm.to_uppercase());
                    e.push_leaf("ChecksumType", c.kind());
                }
                e.push_leaf("Size", version.size.to_string());
                e.push_leaf("StorageClass", version.storage_class());
            }
            e.push(owner());
            doc.push(e);
        }
    }
    for row in &rows[..page_len] {
        if let VersionRow::Prefix(p) = row {
            doc.push(params.common_prefix(p));
        }
    }
    Ok(xml(200, &doc))
}

#[cfg(test)]
mod tests {
    use axum::http::Method;

    use super::super::testkit::{texts, Harness};

    #[test]
    fn listing_rolls_up_and_pages() {
        let mut h = Harness::new();
        h.put("/bkt", b"");
        for key in ["a.txt", "dir/x", "dir/y", "dir/sub/z", "e f+g", "zz"] {
            h.put(
                &format!("/bkt/{}", crate::http::percent_encode(key)),
                b"data",
            );
        }
        let r = h.call(Method::GET, "/bkt?list-type=2&delimiter=/", &[], b"");
        let doc = r.doc();
        assert_eq!(texts(doc, "Contents", "Key"), ["a.txt", "e f+g", "zz"]);
        assert_eq!(texts(doc, "CommonPrefixes", "Prefix"), ["dir/"]);
        assert_eq!(doc.text_of("KeyCount"), Some("4"));
        let r = h.call(
            Method::GET,
            "/bkt?list-type=2&prefix=dir/&delimiter=/",
            &[],
            b"",
        );
        assert_eq!(texts(r.doc(), "Contents", "Key"), ["dir/x", "dir/y"]);
        assert_eq!(texts(r.doc(), "CommonPrefixes", "Prefix"), ["dir/sub/"]);
        let r = h.call(Method::GET, "/bkt?list-type=2&encoding-type=url", &[], b"");
        assert!(texts(r.doc(), "Contents", "Key").contains(&"e+f%2Bg"));

        // Two at a time: every key once, the common prefix counting as one entry.
        let mut seen = Vec::new();
        let mut token: Option<String> = None;
        for _ in 0..10 {
            let mut path = "/bkt?list-type=2&delimiter=/&max-keys=2".to_string();
            if let Some(t) = &token {
                path.push_str(&format!(
                    "&continuation-token={}",
                    crate::http::percent_encode(t)
                ));
            }
            let r = h.call(Method::GET, &path, &[], b"");
            let doc = r.doc();
            for c in &doc.children {
                match c.name.as_str() {
                    "Contents" => seen.push(c.text_of("Key").unwrap_or("").to_string()),
                    "CommonPrefixes" => seen.push(c.text_of("Prefix").unwrap_or("").to_string()),
                    _ => {}
                }
            }
            token = doc.text_of("NextContinuationToken").map(str::to_string);
            assert_eq!(doc.text_of("IsTruncated") == Some("true"), token.is_some());
            if token.is_none() {
                break;
            }
        }
        seen.sort();
        assert_eq!(seen, ["a.txt", "dir/", "e f+g", "zz"]);
        let r = h.call(Method::GET, "/bkt?list-type=2&start-after=dir/y", &[], b"");
        assert_eq!(texts(r.doc(), "Contents", "Key"), ["e f+g", "zz"]);
        let r = h.call(
            Method::GET,
            "/bkt?list-type=2&continuation-token=%%%",
            &[],
            b"",
        );
        assert_eq!(r.code(), Some("InvalidArgument"));
        let r = h.call(Method::GET, "/bkt?list-type=2&max-keys=0", &[], b"");
        assert_eq!(
            (r.doc().text_of("KeyCount"), r.doc().text_of("IsTruncated")),
            (Some("0"), Some("false"))
        );
        // ListObjects (v1) pages with markers.
        let r = h.call(Method::GET, "/bkt?max-keys=2", &[], b"");
        assert_eq!(texts(r.doc(), "Contents", "Key"), ["a.txt", "dir/sub/z"]);
        assert_eq!(r.doc().text_of("IsTruncated"), Some("true"));
        let r = h.call(Method::GET, "/bkt?marker=dir/sub/z", &[], b"");
        assert_eq!(
            texts(r.doc(), "Contents", "Key"),
            ["dir/x", "dir/y", "e f+g", "zz"]
        );

        // Versions page by key and version ID markers.
        let enable = "<VersioningConfiguration><Status>Enabled</Status></VersioningConfiguration>";
        h.configure(Method::PUT, "/bkt?versioning", enable);
        h.put("/bkt/zz", b"again");
        let mut rows = Vec::new();
        let mut markers: Option<(String, String)> = None;
        for _ in 0..10 {
            let mut path = "/bkt?versions&max-keys=3".to_string();
            if let Some((k, v)) = &markers {
                path.push_str(&format!(
                    "&key-marker={}&version-id-marker={v}",
                    crate::http::percent_encode(k)
                ));
            }
            let r = h.call(Method::GET, &path, &[], b"");
            let doc = r.doc();
            rows.extend(doc.all("Version").map(|v| {
                format!(
                    "{}@{}",
                    v.text_of("Key").unwrap_or(""),
                    v.text_of("VersionId").unwrap_or("")
                )
            }));
            markers = doc.text_of("NextKeyMarker").map(|k| {
                (
                    k.to_string(),
                    doc.text_of("NextVersionIdMarker").unwrap_or("").to_string(),
                )
            });
            if doc.text_of("IsTruncated") != Some("true") {
                break;
            }
        }
        assert_eq!(rows.len(), 7, "{rows:?}");
        assert_eq!(rows.iter().filter(|r| r.starts_with("zz@")).count(), 2);
    }
}
