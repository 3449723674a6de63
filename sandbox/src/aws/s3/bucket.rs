//! The buckets themselves: CreateBucket (name rules, region and location constraint,
//! today's defaults), DeleteBucket, GetBucketLocation and ListBuckets. HeadBucket is
//! answered by the routing in `mod.rs`; the subresources are in `bucket_config.rs` and
//! `tagging.rs`.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use super::body::{expect_children, payload};
use super::format::{decode_token, encode_token, owner, xml};
use super::tagging::{parse_tags, Tagged};
use super::{
    invalid_argument, malformed, not_emulated, Bucket, Encryption, Outcome, PublicAccessBlock, NS,
    S3,
};
use crate::aws::xml::Element;
use crate::aws::{AwsError, AwsRequest, AwsResponse};
use crate::common::time::time_millis;

/// `BucketLocationConstraint` in the model: every region a bucket can be created in, and
/// `EU`, the legacy alias of eu-west-1. us-east-1 is not one: it is the absence of one.
const LOCATION_CONSTRAINTS: &[&str] = &[
    "af-south-1",
    "ap-east-1",
    "ap-east-2",
    "ap-northeast-1",
    "ap-northeast-2",
    "ap-northeast-3",
    "ap-south-1",
    "ap-south-2",
    "ap-southeast-1",
    "ap-southeast-2",
    "ap-southeast-3",
    "ap-southeast-4",
    "ap-southeast-5",
    "ap-southeast-6",
    "ap-southeast-7",
    "ca-central-1",
    "ca-west-1",
    "cn-north-1",
    "cn-northwest-1",
    "EU",
    "eu-central-1",
    "eu-central-2",
    "eu-north-1",
    "eu-south-1",
    "eu-south-2",
    "eu-west-1",
    "eu-west-2",
    "eu-west-3",
    "il-central-1",
    "me-central-1",
    "me-south-1",
    "mx-central-1",
    "sa-east-1",
    "us-east-2",
    "us-gov-east-1",
    "us-gov-west-1",
    "us-west-1",
    "us-west-2",
];

impl S3 {
    pub(super) fn list_buckets(&self, req: &AwsRequest) -> Outcome {
        let prefix = req.param("prefix").unwrap_or("");
        let region = req.param("bucket-region");
        let max = match req.param("max-buckets") {
            None => usize::MAX,
            Some(v) => v
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=10_000).contains(n))
                .ok_or_else(|| {
                    invalid_argument(
                        "The value of max-buckets must be between 1 and 10000",
                        "max-buckets",
                        v,
                    )
                })?,
        };
        let after = match req.param("continuation-token") {
            Some(token) => Some(decode_token(token, "continuation-token")?),
            None => None,
        };
        let mut matching = self.buckets.iter().filter(|(name, b)| {
            name.starts_with(prefix)
                && region.is_none_or(|r| r == b.region)
                && after.as_deref().is_none_or(|a| name.as_str() > a)
        });
        let mut list = Element::new("Buckets");
        let mut last = None;
        for (name, bucket) in matching.by_ref().take(max) {
            list.push(
                Element::new("Bucket")
                    .with(Element::leaf("Name", name.as_str()))
                    .with(Element::leaf("CreationDate", time_millis(bucket.created)))
                    .with(Element::leaf("BucketRegion", bucket.region.as_str())),
            );
            last = Some(name.as_str());
        }
        let mut result = Element::new("ListAllMyBucketsResult")
            .attr("xmlns", NS)
            .with(owner())
            .with(list);
        if let (Some(last), Some(_)) = (last, matching.next()) {
            result.push_leaf("ContinuationToken", encode_token(last));
        }
        if req.param("prefix").is_some() {
            result.push_leaf("Prefix", prefix);
        }
        Ok(xml(200, &result))
    }

    pub(super) fn create_bucket(
        &mut self,
        name: &str,
        req: &AwsRequest,
        now: DateTime<Utc>,
    ) -> Outcome {
        check_bucket_name(name)?;
        let config = if req.body.iter().all(u8::is_ascii_whitespace) {
            None
        } else {
            let body = payload(req)?;
            let doc = Element::parse(&body.data).map_err(|_| malformed())?;
            if doc.name != "CreateBucketConfiguration" {
                return Err(malformed().into());
            }
            expect_children(
                &doc,
                &[
                    ("LocationConstraint", 1),
                    ("Location", 1),
                    ("Bucket", 1),
                    ("Tags", 1),
                ],
            )?;
            Some(doc)
        };
        if let Some(config) = &config {
            if config.find("Location").is_some() || config.find("Bucket").is_some() {
                return Err(not_emulated("directory buckets (S3 Express One Zone)").into());
            }
        }
        if req
            .header("x-amz-bucket-object-lock-enabled")
            .is_some_and(|v| v.eq_ignore_ascii_case("true"))
        {
            return Err(not_emulated("S3 Object Lock").into());
        }
        // Buckets enforce bucket-owner object ownership, which refuses ACLs other than
        // `private`; the ownerships that allow ACLs would need ACLs emulated.
        match req.header("x-amz-object-ownership") {
            None | Some("BucketOwnerEnforced") => {}
            Some(other) => {
                return Err(not_emulated(&format!("object ownership {other} (object ACLs)")).into())
            }
        }
        if req.header("x-amz-acl").is_some_and(|acl| acl != "private") {
            return Err(AwsError::new(
                400,
                "InvalidBucketAclWithObjectOwnership",
                "Bucket cannot have ACLs set with ObjectOwnership's BucketOwnerEnforced setting",
            )
            .into());
        }
        if self.buckets.contains_key(name) {
            return Err(AwsError::new(
                409,
                "BucketAlreadyOwnedByYou",
                "Your previous request to create the named bucket succeeded and you already own it.",
            )
            .with("BucketName", name)
            .into());
        }
        let constraint = config
            .as_ref()
            .and_then(|c| c.text_of("LocationConstraint"))
            .filter(|c| !c.is_empty());
        let region = match constraint {
            None if req.region == "us-east-1" => "us-east-1".to_string(),
            None => {
                return Err(AwsError::new(
                    400,
                    "IllegalLocationConstraintException",
                    "The unspecified location constraint is incompatible for the region specific endpoint this request was sent to.",
                )
                .into())
            }
            Some(c) if !LOCATION_CONSTRAINTS.contains(&c) => {
                return Err(AwsError::new(
                    400,
                    "InvalidLocationConstraint",
                    "The specified location-constraint is not valid",
                )
                .with("LocationConstraint", c)
                .into())
            }
            Some("EU") => "eu-west-1".to_string(),
            Some(c) => c.to_string(),
        };
        if region != req.region {
            let c = constraint.unwrap_or("unspecified");
            return Err(AwsError::new(
                400,
                "IllegalLocationConstraintException",
                format!("The {c} location constraint is incompatible for the region specific endpoint this request was sent to."),
            )
            .into());
        }
        let tags = match config.as_ref().and_then(|c| c.find("Tags")) {
            Some(tags) => parse_tags(tags, Tagged::Bucket)?,
            None => Vec::new(),
        };
        self.buckets.insert(
            name.to_string(),
            Bucket {
                region,
                location_constraint: constraint.map(str::to_string),
                created: now,
                versioning: None,
                mfa_delete: None,
                encryption: Encryption::default(),
                public_access_block: Some(PublicAccessBlock::ALL),
                lifecycle: None,
                transition_minimum_size: None,
                tags,
                objects: BTreeMap::new(),
                uploads: BTreeMap::new(),
            },
        );
        Ok(AwsResponse::empty(200).with_header("location", format!("/{name}")))
    }

    pub(super) fn get_location(&self, name: &str) -> Outcome {
        let bucket = self.bucket(name)?;
        let mut doc = Element::new("LocationConstraint").attr("xmlns", NS);
        if let Some(c) = &bucket.location_constraint {
            doc.text = c.clone();
        }
        Ok(xml(200, &doc))
    }

    pub(super) fn delete_bucket(&mut self, name: &str) -> Outcome {
        let bucket = self.bucket(name)?;
        // Noncurrent versions and delete markers count: a versioned bucket is empty only
        // when every version is gone.
        if !bucket.objects.is_empty() {
            let message = if bucket.versioning.is_some() {
                "The bucket you tried to delete is not empty. You must delete all versions in the bucket."
            } else {
                "The bucket you tried to delete is not empty"
            };
            return Err(AwsError::new(409, "BucketNotEmpty", message)
                .with("BucketName", name)
                .into());
        }
        self.buckets.remove(name);
        Ok(AwsResponse::empty(204))
    }
}

/// General purpose bucket naming rules
/// (https://docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html).
fn check_bucket_name(name: &str) -> Result<(), AwsError> {
    let b = name.as_bytes();
    let edge = |c: Option<&u8>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    let ip_like = name.split('.').count() == 4 && name.split('.').all(|p| p.parse::<u8>().is_ok());
    let ok = (3..=63).contains(&b.len())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'-' | b'.'))
        && edge(b.first())
        && edge(b.last())
        && !name.contains("..")
        && !ip_like
        && !["xn--", "sthree-", "amzn-s3-demo-"]
            .iter()
            .any(|p| name.starts_with(p))
        && !["-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3"]
            .iter()
            .any(|s| name.ends_with(s));
    if ok {
        Ok(())
    } else {
        Err(AwsError::new(
            400,
            "InvalidBucketName",
            "The specified bucket is not valid.",
        )
        .with("BucketName", name))
    }
}

#[cfg(test)]
mod tests {
    use axum::http::Method;

    use super::super::testkit::{texts, Harness};

    #[test]
    fn buckets_are_global_and_live_in_one_region() {
        let mut h = Harness::new();
        let eu = "<CreateBucketConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><LocationConstraint>eu-west-1</LocationConstraint></CreateBucketConfiguration>";
        let cases: &[(&str, &str, &str, u16, Option<&str>)] = &[
            ("us-east-1", "/plain", "", 200, None),
            ("eu-west-1", "/in-eu", eu, 200, None),
            ("us-east-1", "/plain", "", 409, Some("BucketAlreadyOwnedByYou")),
            ("eu-west-1", "/plain", eu, 409, Some("BucketAlreadyOwnedByYou")),
            ("eu-west-1", "/no-constraint", "", 400, Some("IllegalLocationConstraintException")),
            ("us-east-1", "/wrong-endpoint", eu, 400, Some("IllegalLocationConstraintException")),
            ("us-east-1", "/explicit-us-east-1", "<CreateBucketConfiguration><LocationConstraint>us-east-1</LocationConstraint></CreateBucketConfiguration>", 400, Some("InvalidLocationConstraint")),
            ("us-east-1", "/mars", "<CreateBucketConfiguration><LocationConstraint>mars-1</LocationConstraint></CreateBucketConfiguration>", 400, Some("InvalidLocationConstraint")),
            ("eu-west-1", "/legacy-eu", "<CreateBucketConfiguration><LocationConstraint>EU</LocationConstraint></CreateBucketConfiguration>", 200, None),
            ("us-east-1", "/bad-xml", "<CreateBucketConfiguration>", 400, Some("MalformedXML")),
            ("us-east-1", "/wrong-root", "<Other/>", 400, Some("MalformedXML")),
            ("us-east-1", "/Upper", "", 400, Some("InvalidBucketName")),
            ("us-east-1", "/ab", "", 400, Some("InvalidBucketName")),
            ("us-east-1", "/a..b", "", 400, Some("InvalidBucketName")),
            ("us-east-1", "/192.168.1.1", "", 400, Some("InvalidBucketName")),
            ("us-east-1", "/-dash", "", 400, Some("InvalidBucketName")),
            ("us-east-1", "/xn--punycode", "", 400, Some("InvalidBucketName")),
            ("us-east-1", "/ends--x-s3", "", 400, Some("InvalidBucketName")),
            ("us-east-1", "/has_underscore", "", 400, Some("InvalidBucketName")),
        ];
        for (region, path, body, status, code) in cases {
            let r = h.in_region(region, Method::PUT, path, body.as_bytes());
            assert_eq!(
                (r.status, r.code()),
                (*status, *code),
                "PUT {path} in {region}: {}",
                r.body
            );
        }
        let location = |h: &mut Harness, path: &str| {
            let r = h.in_region("us-east-1", Method::GET, path, b"");
            (r.status, r.doc.map(|d| d.text))
        };
        assert_eq!(
            location(&mut h, "/plain?location"),
            (200, Some(String::new()))
        );
        assert_eq!(
            location(&mut h, "/in-eu?location"),
            (200, Some("eu-west-1".into()))
        );
        assert_eq!(
            location(&mut h, "/legacy-eu?location"),
            (200, Some("EU".into()))
        );
        let head = h.in_region("eu-west-1", Method::HEAD, "/in-eu", b"");
        assert_eq!(
            (head.status, head.header("x-amz-bucket-region")),
            (200, Some("eu-west-1"))
        );
        assert!(head.body.is_empty());
        // Addressed through another region's endpoint, a bucket redirects to its own.
        let moved = h.in_region("us-east-1", Method::HEAD, "/in-eu", b"");
        assert_eq!(
            (moved.status, moved.header("x-amz-bucket-region")),
            (301, Some("eu-west-1"))
        );
        assert!(moved.body.is_empty());
        let moved = h.in_region("us-east-1", Method::GET, "/in-eu?list-type=2", b"");
        assert_eq!(moved.code(), Some("PermanentRedirect"));
        let missing = h.in_region("us-east-1", Method::HEAD, "/nowhere", b"");
        assert_eq!((missing.status, missing.body.as_str()), (404, ""));
        let list = h.call(Method::GET, "/", &[], b"");
        let buckets = list.doc().find("Buckets").expect("Buckets");
        assert_eq!(
            texts(buckets, "Bucket", "Name"),
            ["in-eu", "legacy-eu", "plain"]
        );
        assert_eq!(
            texts(buckets, "Bucket", "BucketRegion"),
            ["eu-west-1", "eu-west-1", "us-east-1"]
        );
        let paged = h.call(Method::GET, "/?max-buckets=2", &[], b"");
        let token = paged
            .doc()
            .text_of("ContinuationToken")
            .expect("a token")
            .to_string();
        let rest = h.call(
            Method::GET,
            &format!(
                "/?max-buckets=2&continuation-token={}",
                crate::http::percent_encode(&token)
            ),
            &[],
            b"",
        );
        let names = texts(
            rest.doc().find("Buckets").expect("Buckets"),
            "Bucket",
            "Name",
        );
        assert_eq!(names, ["plain"]);
        assert!(rest.doc().find("ContinuationToken").is_none());
    }
}
