//! Tags: the tag sets of buckets (`/{bucket}?tagging`) and of object versions
//! (`/{bucket}/{key}?tagging`, and `x-amz-tagging` on writes), with S3's limits on their
//! number, length and characters.

use super::body::{configuration, expect_children};
use super::format::xml;
use super::{malformed, no_such_key, select_version, Bucket, Fail, Outcome, Version, NS};
use crate::aws::xml::Element;
use crate::aws::{AwsError, AwsRequest, AwsResponse};
use crate::http::parse_query;

const MAX_BUCKET_TAGS: usize = 50;
const MAX_OBJECT_TAGS: usize = 10;

/// What tags are put on: buckets and objects have different limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Tagged {
    Bucket,
    Object,
}

/// A tagging request's `<Tagging><TagSet>…</TagSet></Tagging>`, checked.
fn tagging_document(req: &AwsRequest, tagged: Tagged) -> Result<Vec<(String, String)>, AwsError> {
    let doc = configuration(req, "Tagging")?;
    expect_children(&doc, &[("TagSet", 1)])?;
    let set = doc.find("TagSet").ok_or_else(malformed)?;
    parse_tags(set, tagged)
}

/// A `TagSet` (or CreateBucket's `Tags`): `<Tag><Key/><Value/></Tag>…`.
pub(super) fn parse_tags(set: &Element, tagged: Tagged) -> Result<Vec<(String, String)>, AwsError> {
    expect_children(set, &[("Tag", usize::MAX)])?;
    let mut pairs = Vec::new();
    for tag in &set.children {
        expect_children(tag, &[("Key", 1), ("Value", 1)])?;
        let key = tag.text_of("Key").ok_or_else(malformed)?;
        let value = tag.text_of("Value").ok_or_else(malformed)?;
        pairs.push((key.to_string(), value.to_string()));
    }
    check_tags(pairs, tagged)
}

/// `x-amz-tagging`: object tags as a URL query string (`k1=v1&k2=v2`).
pub(super) fn header_tags(req: &AwsRequest) -> Result<Vec<(String, String)>, AwsError> {
    match req.header("x-amz-tagging") {
        Some(raw) => check_tags(parse_query(raw), Tagged::Object),
        None => Ok(Vec::new()),
    }
}

/// Checks tags as S3 does: at most 50 on a bucket and 10 on an object, keys up to 128
/// and values up to 256 characters of a limited set, no `aws:` keys, no key twice.
fn check_tags(
    pairs: Vec<(String, String)>,
    tagged: Tagged,
) -> Result<Vec<(String, String)>, AwsError> {
    let invalid = |message: &str| AwsError::new(400, "InvalidTag", message);
    match tagged {
        Tagged::Bucket if pairs.len() > MAX_BUCKET_TAGS => {
            return Err(invalid("Bucket tag count cannot be greater than 50"));
        }
        Tagged::Object if pairs.len() > MAX_OBJECT_TAGS => {
            return Err(AwsError::new(
                400,
                "BadRequest",
                "Object tags cannot be greater than 10",
            ));
        }
        _ => {}
    }
    let allowed = |c: char| c.is_alphanumeric() || c.is_whitespace() || "_.:/=+-@".contains(c);
    let mut tags: Vec<(String, String)> = Vec::new();
    for (key, value) in pairs {
        if key.chars().count() > 128 {
            return Err(invalid("The TagKey you have provided is too long, max 128"));
        }
        if value.chars().count() > 256 {
            return Err(invalid(
                "The TagValue you have provided is too long, max 256",
            ));
        }
        if key.is_empty() || !key.chars().all(allowed) {
            return Err(invalid("The TagKey you have provided is invalid"));
        }
        if !value.chars().all(allowed) {
            return Err(invalid("The TagValue you have provided is invalid"));
        }
        if key.starts_with("aws:") {
            return Err(invalid("System tags cannot be added/updated by requester"));
        }
        if tags.iter().any(|(k, _)| *k == key) {
            return Err(invalid("Cannot provide multiple Tags with the same key"));
        }
        tags.push((key, value));
    }
    Ok(tags)
}

/// `<Tagging><TagSet>…</TagSet></Tagging>`, as GetBucketTagging and GetObjectTagging
/// answer.
fn tagging(tags: &[(String, String)]) -> Element {
    let mut set = Element::new("TagSet");
    for (k, v) in tags {
        set.push(
            Element::new("Tag")
                .with(Element::leaf("Key", k.as_str()))
                .with(Element::leaf("Value", v.as_str())),
        );
    }
    Element::new("Tagging").attr("xmlns", NS).with(set)
}

pub(super) fn get_tagging(name: &str, bucket: &Bucket) -> Outcome {
    if bucket.tags.is_empty() {
        return Err(
            AwsError::new(404, "NoSuchTagSet", "The TagSet does not exist")
                .with("BucketName", name)
                .into(),
        );
    }
    Ok(xml(200, &tagging(&bucket.tags)))
}

pub(super) fn put_tagging(bucket: &mut Bucket, req: &AwsRequest) -> Outcome {
    bucket.tags = tagging_document(req, Tagged::Bucket)?;
    Ok(AwsResponse::empty(204))
}

/// The version the object tagging operations address (`?versionId=`, else the current
/// one), as GetObject would; they answer its ID the way GetObject does.
fn tagged_version<'a>(
    bucket: &'a mut Bucket,
    key: &str,
    req: &AwsRequest,
) -> Result<&'a mut Version, Fail> {
    let id = select_version(bucket, key, req.param("versionId"), req.method.as_str())?
        .version_id
        .clone();
    bucket
        .objects
        .get_mut(key)
        .and_then(|vs| vs.iter_mut().find(|v| v.version_id == id))
        .ok_or_else(|| no_such_key(key).into())
}

fn with_version_id(response: AwsResponse, bucket_versioned: bool, v: &Version) -> AwsResponse {
    if bucket_versioned || v.version_id != "null" {
        response.with_header("x-amz-version-id", v.version_id.clone())
    } else {
        response
    }
}

pub(super) fn get_object_tagging(bucket: &mut Bucket, key: &str, req: &AwsRequest) -> Outcome {
    let versioned = bucket.versioning.is_some();
    let v = tagged_version(bucket, key, req)?;
    Ok(with_version_id(xml(200, &tagging(&v.tags)), versioned, v))
}

pub(super) fn put_object_tagging(bucket: &mut Bucket, key: &str, req: &AwsRequest) -> Outcome {
    let tags = tagging_document(req, Tagged::Object)?;
    let versioned = bucket.versioning.is_some();
    let v = tagged_version(bucket, key, req)?;
    v.tags = tags;
    Ok(with_version_id(AwsResponse::empty(200), versioned, v))
}

pub(super) fn delete_object_tagging(bucket: &mut Bucket, key: &str, req: &AwsRequest) -> Outcome {
    let versioned = bucket.versioning.is_some();
    let v = tagged_version(bucket, key, req)?;
    v.tags.clear();
    Ok(with_version_id(AwsResponse::empty(204), versioned, v))
}

#[cfg(test)]
mod tests {
    use axum::http::Method;

    use super::super::testkit::{texts, Harness};

    #[test]
    fn tags_are_validated() {
        let mut h = Harness::new();
        h.put("/bkt", b"");
        assert_eq!(
            h.call(Method::GET, "/bkt?tagging", &[], b"").code(),
            Some("NoSuchTagSet")
        );
        let set = |tags: &str| format!("<Tagging><TagSet>{tags}</TagSet></Tagging>");
        let tag = |k: &str, v: &str| format!("<Tag><Key>{k}</Key><Value>{v}</Value></Tag>");
        let ok = set(&(tag("team", "ml") + &tag("cost-center", "42")));
        assert_eq!(h.configure(Method::PUT, "/bkt?tagging", &ok).status, 204);
        let got = h.call(Method::GET, "/bkt?tagging", &[], b"");
        let tag_set = got.doc().find("TagSet").expect("TagSet");
        assert_eq!(texts(tag_set, "Tag", "Key"), ["team", "cost-center"]);
        for bad in [
            set(&(tag("a", "1") + &tag("a", "2"))),
            set(&tag("aws:reserved", "x")),
            set(&tag(&"k".repeat(129), "x")),
            set(&tag("k", &"v".repeat(257))),
            set(&tag("", "x")),
            set(&tag("bad*key", "x")),
            set(&(0..51)
                .map(|i| tag(&format!("k{i}"), "v"))
                .collect::<String>()),
        ] {
            assert_eq!(
                h.configure(Method::PUT, "/bkt?tagging", &bad).code(),
                Some("InvalidTag"),
                "{bad}"
            );
        }
        assert_eq!(h.call(Method::DELETE, "/bkt?tagging", &[], b"").status, 204);
        assert_eq!(h.call(Method::GET, "/bkt?tagging", &[], b"").status, 404);
    }

    #[test]
    fn objects_carry_tags() {
        let mut h = Harness::new();
        h.put("/bkt", b"");
        h.call(Method::PUT, "/bkt/k", &[("x-amz-tagging", "a=1&b=2")], b"x");
        let got = h.call(Method::GET, "/bkt/k?tagging", &[], b"");
        assert_eq!(got.doc().name, "Tagging");
        let set = got.doc().find("TagSet").expect("TagSet");
        assert_eq!(texts(set, "Tag", "Key"), ["a", "b"]);
        let body = "<Tagging><TagSet><Tag><Key>c</Key><Value>3</Value></Tag></TagSet></Tagging>";
        assert_eq!(h.configure(Method::PUT, "/bkt/k?tagging", body).status, 200);
        let got = h.call(Method::GET, "/bkt/k?tagging", &[], b"");
        let set = got.doc().find("TagSet").expect("TagSet");
        assert_eq!(texts(set, "Tag", "Key"), ["c"]);
        // Integrity is required as for bucket configurations.
        let r = h.call(Method::PUT, "/bkt/k?tagging", &[], body.as_bytes());
        assert_eq!(r.code(), Some("InvalidRequest"));
        // Copies keep tags unless told to replace them.
        h.call(
            Method::PUT,
            "/bkt/kept",
            &[("x-amz-copy-source", "/bkt/k")],
            b"",
        );
        let replaced = [
            ("x-amz-copy-source", "/bkt/k"),
            ("x-amz-tagging-directive", "REPLACE"),
            ("x-amz-tagging", "d=4"),
        ];
        h.call(Method::PUT, "/bkt/replaced", &replaced, b"");
        for (key, expected) in [("kept", "c"), ("replaced", "d")] {
            let got = h.call(Method::GET, &format!("/bkt/{key}?tagging"), &[], b"");
            let set = got.doc().find("TagSet").expect("TagSet");
            assert_eq!(texts(set, "Tag", "Key"), [expected], "{key}");
        }
        let bad_directive = [
            ("x-amz-copy-source", "/bkt/k"),
            ("x-amz-tagging-directive", "MERGE"),
        ];
        assert_eq!(
            h.call(Method::PUT, "/bkt/x", &bad_directive, b"").code(),
            Some("InvalidArgument")
        );
        assert_eq!(
            h.call(Method::DELETE, "/bkt/k?tagging", &[], b"").status,
            204
        );
        let got = h.call(Method::GET, "/bkt/k?tagging", &[], b"");
        assert_eq!(got.status, 200);
        assert_eq!(got.doc().find("TagSet").map(|s| s.children.len()), Some(0));
        assert_eq!(got.header("x-amz-version-id"), None);
        let eleven: Vec<String> = (0..11).map(|i| format!("k{i}=v")).collect();
        let r = h.call(
            Method::PUT,
            "/bkt/many",
            &[("x-amz-tagging", &eleven.join("&"))],
            b"x",
        );
        assert_eq!(r.code(), Some("BadRequest"));
        let r = h.call(
            Method::PUT,
            "/bkt/sys",
            &[("x-amz-tagging", "aws:x=1")],
            b"x",
        );
        assert_eq!(r.code(), Some("InvalidTag"));
        let missing = h.call(Method::GET, "/bkt/none?tagging", &[], b"");
        assert_eq!(missing.code(), Some("NoSuchKey"));

        // On a versioned bucket, each version has its own tags.
        let enable = "<VersioningConfiguration><Status>Enabled</Status></VersioningConfiguration>";
        h.configure(Method::PUT, "/bkt?versioning", enable);
        let v1 = h
            .call(Method::PUT, "/bkt/v", &[("x-amz-tagging", "n=1")], b"1")
            .header("x-amz-version-id")
            .unwrap_or("")
            .to_string();
        h.call(Method::PUT, "/bkt/v", &[("x-amz-tagging", "n=2")], b"2");
        let old = h.call(
            Method::GET,
            &format!("/bkt/v?tagging&versionId={v1}"),
            &[],
            b"",
        );
        assert_eq!(old.header("x-amz-version-id"), Some(v1.as_str()));
        let set = old.doc().find("TagSet").expect("TagSet");
        assert_eq!(texts(set, "Tag", "Value"), ["1"]);
    }
}
