//! A bucket's configuration subresources: `?versioning` (with MFA delete refused),
//! `?encryption` (the default encryption new objects get), `?publicAccessBlock` and
//! `?lifecycle`, whose rules are validated against S3's schema and limits and stored, but
//! never run.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use chrono::{DateTime, Utc};

use super::body::{configuration, expect_children, parse_bool, parse_int};
use super::format::xml;
use super::{
    invalid_argument, malformed, not_emulated, Bucket, Encryption, Outcome, PublicAccessBlock,
    Versioning, NS, SSE_ALGORITHMS,
};
use crate::aws::xml::Element;
use crate::aws::{AwsError, AwsRequest, AwsResponse};
use crate::common::ids::random_hex;

const MAX_LIFECYCLE_RULES: usize = 1000;
/// An element count with no limit, for [`expect_children`].
const UNBOUNDED: usize = usize::MAX;

const TRANSITION_STORAGE_CLASSES: &[&str] = &[
    "GLACIER",
    "STANDARD_IA",
    "ONEZONE_IA",
    "INTELLIGENT_TIERING",
    "DEEP_ARCHIVE",
    "GLACIER_IR",
];

pub(super) fn get_versioning(bucket: &Bucket) -> AwsResponse {
    let mut doc = Element::new("VersioningConfiguration").attr("xmlns", NS);
    if let Some(status) = bucket.versioning {
        doc.push_leaf("Status", status.as_str());
    }
    if let Some(mfa) = &bucket.mfa_delete {
        doc.push_leaf("MfaDelete", mfa.as_str());
    }
    xml(200, &doc)
}

pub(super) fn put_versioning(bucket: &mut Bucket, req: &AwsRequest) -> Outcome {
    let doc = configuration(req, "VersioningConfiguration")?;
    expect_children(&doc, &[("Status", 1), ("MfaDelete", 1)])?;
    let status = match doc.text_of("Status") {
        None => None,
        Some("Enabled") => Some(Versioning::Enabled),
        Some("Suspended") => Some(Versioning::Suspended),
        Some(_) => return Err(malformed().into()),
    };
    match doc.text_of("MfaDelete") {
        None => {}
        Some("Disabled") => bucket.mfa_delete = Some("Disabled".into()),
        Some("Enabled") => return Err(not_emulated("MFA delete").into()),
        Some(_) => return Err(malformed().into()),
    }
    if status.is_some() {
        bucket.versioning = status;
    }
    Ok(AwsResponse::empty(200))
}

pub(super) fn get_encryption(bucket: &Bucket) -> AwsResponse {
    let e = &bucket.encryption;
    let mut default = Element::new("ApplyServerSideEncryptionByDefault")
        .with(Element::leaf("SSEAlgorithm", e.algorithm.as_str()));
    if let Some(key) = &e.kms_key_id {
        default.push_leaf("KMSMasterKeyID", key.as_str());
    }
    let mut rule = Element::new("Rule").with(default).with(Element::leaf(
        "BucketKeyEnabled",
        e.bucket_key_enabled.to_string(),
    ));
    if !e.blocked_types.is_empty() {
        let mut blocked = Element::new("BlockedEncryptionTypes");
        for t in &e.blocked_types {
            blocked.push_leaf("EncryptionType", t.as_str());
        }
        rule.push(blocked);
    }
    let doc = Element::new("ServerSideEncryptionConfiguration")
        .attr("xmlns", NS)
        .with(rule);
    xml(200, &doc)
}

pub(super) fn put_encryption(bucket: &mut Bucket, req: &AwsRequest) -> Outcome {
    let doc = configuration(req, "ServerSideEncryptionConfiguration")?;
    expect_children(&doc, &[("Rule", 1)])?;
    let rule = doc.find("Rule").ok_or_else(malformed)?;
    expect_children(
        rule,
        &[
            ("ApplyServerSideEncryptionByDefault", 1),
            ("BucketKeyEnabled", 1),
            ("BlockedEncryptionTypes", 1),
        ],
    )?;
    let default = rule
        .find("ApplyServerSideEncryptionByDefault")
        .ok_or_else(malformed)?;
    expect_children(default, &[("SSEAlgorithm", 1), ("KMSMasterKeyID", 1)])?;
    let algorithm = default
        .text_of("SSEAlgorithm")
        .filter(|a| SSE_ALGORITHMS.contains(a))
        .ok_or_else(malformed)?;
    let kms_key_id = default.text_of("KMSMasterKeyID").map(str::to_string);
    if kms_key_id.is_some() && algorithm == "AES256" {
        return Err(invalid_argument(
            "a KMSMasterKeyID is not applicable if the default sse algorithm is not aws:kms or aws:kms:dsse",
            "ApplyServerSideEncryptionByDefault",
            "null",
        )
        .into());
    }
    let bucket_key_enabled = match rule.text_of("BucketKeyEnabled") {
        Some(v) => parse_bool(v)?,
        None => false,
    };
    let mut blocked_types = Vec::new();
    if let Some(blocked) = rule.find("BlockedEncryptionTypes") {
        expect_children(blocked, &[("EncryptionType", 2)])?;
        for t in blocked.all("EncryptionType") {
            if !matches!(t.text.as_str(), "NONE" | "SSE-C") {
                return Err(malformed().into());
            }
            blocked_types.push(t.text.clone());
        }
    }
    bucket.encryption = Encryption {
        algorithm: algorithm.to_string(),
        kms_key_id,
        bucket_key_enabled,
        blocked_types,
    };
    Ok(AwsResponse::empty(200))
}

pub(super) fn get_public_access_block(name: &str, bucket: &Bucket) -> Outcome {
    let block = bucket.public_access_block.ok_or_else(|| {
        AwsError::new(
            404,
            "NoSuchPublicAccessBlockConfiguration",
            "The public access block configuration was not found",
        )
        .with("BucketName", name)
    })?;
    let mut doc = Element::new("PublicAccessBlockConfiguration").attr("xmlns", NS);
    for (field, value) in PublicAccessBlock::FIELDS.iter().zip(block.values()) {
        doc.push_leaf(field, value.to_string());
    }
    Ok(xml(200, &doc))
}

pub(super) fn put_public_access_block(bucket: &mut Bucket, req: &AwsRequest) -> Outcome {
    let doc = configuration(req, "PublicAccessBlockConfiguration")?;
    let allowed: Vec<(&str, usize)> = PublicAccessBlock::FIELDS.iter().map(|f| (*f, 1)).collect();
    expect_children(&doc, &allowed)?;
    let flag = |name: &str| -> Result<bool, AwsError> {
        doc.text_of(name).map(parse_bool).unwrap_or(Ok(false))
    };
    bucket.public_access_block = Some(PublicAccessBlock {
        block_public_acls: flag("BlockPublicAcls")?,
        ignore_public_acls: flag("IgnorePublicAcls")?,
        block_public_policy: flag("BlockPublicPolicy")?,
        restrict_public_buckets: flag("RestrictPublicBuckets")?,
    });
    Ok(AwsResponse::empty(200))
}

pub(super) fn get_lifecycle(name: &str, bucket: &Bucket) -> Outcome {
    let rules = bucket.lifecycle.as_ref().ok_or_else(|| {
        AwsError::new(
            404,
            "NoSuchLifecycleConfiguration",
            "The lifecycle configuration does not exist",
        )
        .with("BucketName", name)
    })?;
    let mut doc = rules.clone();
    doc.attrs = vec![("xmlns".into(), NS.into())];
    Ok(xml(200, &doc).with_header(
        "x-amz-transition-default-minimum-object-size",
        transition_minimum_size(bucket),
    ))
}

fn transition_minimum_size(bucket: &Bucket) -> String {
    bucket
        .transition_minimum_size
        .clone()
        .unwrap_or_else(|| "all_storage_classes_128K".into())
}

pub(super) fn put_lifecycle(bucket: &mut Bucket, req: &AwsRequest) -> Outcome {
    let mut doc = configuration(req, "LifecycleConfiguration")?;
    validate_lifecycle(&mut doc)?;
    let minimum = match req.header("x-amz-transition-default-minimum-object-size") {
        None => None,
        Some(v @ ("varies_by_storage_class" | "all_storage_classes_128K")) => Some(v.to_string()),
        Some(v) => {
            return Err(invalid_argument(
                "Invalid value for x-amz-transition-default-minimum-object-size",
                "x-amz-transition-default-minimum-object-size",
                v,
            )
            .into())
        }
    };
    doc.attrs.clear();
    bucket.lifecycle = Some(doc);
    bucket.transition_minimum_size = minimum;
    Ok(AwsResponse::empty(200).with_header(
        "x-amz-transition-default-minimum-object-size",
        transition_minimum_size(bucket),
    ))
}

/// Checks a lifecycle configuration against S3's schema and rules, and gives rules
/// without an ID the random one S3 assigns.
fn validate_lifecycle(doc: &mut Element) -> Result<(), AwsError> {
    expect_children(doc, &[("Rule", MAX_LIFECYCLE_RULES)])?;
    if doc.children.is_empty() {
        return Err(malformed());
    }
    let mut ids: Vec<String> = Vec::new();
    for rule in &mut doc.children {
        validate_rule(rule)?;
        let id = match rule.text_of("ID") {
            Some(id) => id.to_string(),
            None => {
                let id = B64.encode(random_hex(36));
                rule.children.insert(0, Element::leaf("ID", id.as_str()));
                id
            }
        };
        if ids.contains(&id) {
            return Err(invalid_argument(
                "Rule ID must be unique. Found same ID for more than one rule",
                "ID",
                &id,
            ));
        }
        ids.push(id);
    }
    Ok(())
}

/// Checks one lifecycle rule: its elements, its ID and status, what it selects, and its
/// actions (at least one).
fn validate_rule(rule: &Element) -> Result<(), AwsError> {
    expect_children(
        rule,
        &[
            ("ID", 1),
            ("Prefix", 1),
            ("Filter", 1),
            ("Status", 1),
            ("Expiration", 1),
            ("Transition", UNBOUNDED),
            ("NoncurrentVersionTransition", UNBOUNDED),
            ("NoncurrentVersionExpiration", 1),
            ("AbortIncompleteMultipartUpload", 1),
        ],
    )?;
    if let Some(id) = rule.text_of("ID") {
        if id.chars().count() > 255 {
            return Err(invalid_argument(
                "ID length should not exceed allowed limit of 255",
                "ID",
                id,
            ));
        }
    }
    if !matches!(rule.text_of("Status"), Some("Enabled" | "Disabled")) {
        return Err(malformed());
    }
    // A rule selects objects by the V2 `Filter` or the deprecated rule-level `Prefix`,
    // exactly one of them.
    let has_tags = match (rule.find("Filter"), rule.find("Prefix")) {
        (Some(filter), None) => validate_filter(filter)?,
        (None, Some(_)) => false,
        _ => return Err(malformed()),
    };
    let mut actions = 0;
    if let Some(expiration) = rule.find("Expiration") {
        actions += 1;
        validate_expiration(expiration)?;
    }
    for transition in rule.all("Transition") {
        actions += 1;
        validate_transition(transition)?;
    }
    for transition in rule.all("NoncurrentVersionTransition") {
        actions += 1;
        validate_noncurrent_transition(transition)?;
    }
    if let Some(expiration) = rule.find("NoncurrentVersionExpiration") {
        actions += 1;
        validate_noncurrent_expiration(expiration)?;
    }
    if let Some(abort) = rule.find("AbortIncompleteMultipartUpload") {
        actions += 1;
        validate_abort(abort, has_tags)?;
    }
    if actions == 0 {
        return Err(AwsError::new(
            400,
            "InvalidRequest",
            "At least one action needs to be specified in a rule",
        ));
    }
    Ok(())
}

/// A rule's V2 `Filter`: one condition, or an `And` of several. Whether it selects by
/// tags, which rules with AbortIncompleteMultipartUpload may not.
fn validate_filter(filter: &Element) -> Result<bool, AwsError> {
    let mut has_tags = false;
    let allowed = [
        ("Prefix", 1),
        ("Tag", 1),
        ("ObjectSizeGreaterThan", 1),
        ("ObjectSizeLessThan", 1),
        ("And", 1),
    ];
    expect_children(filter, &allowed)?;
    if filter.children.len() > 1 {
        return Err(malformed());
    }
    if let Some(tag) = filter.find("Tag") {
        validate_filter_tag(tag)?;
        has_tags = true;
    }
    if let Some(and) = filter.find("And") {
        expect_children(
            and,
            &[
                ("Prefix", 1),
                ("Tag", UNBOUNDED),
                ("ObjectSizeGreaterThan", 1),
                ("ObjectSizeLessThan", 1),
            ],
        )?;
        for tag in and.all("Tag") {
            validate_filter_tag(tag)?;
            has_tags = true;
        }
        for size in ["ObjectSizeGreaterThan", "ObjectSizeLessThan"] {
            if let Some(v) = and.text_of(size) {
                parse_int(v)?;
            }
        }
    }
    for size in ["ObjectSizeGreaterThan", "ObjectSizeLessThan"] {
        if let Some(v) = filter.text_of(size) {
            parse_int(v)?;
        }
    }
    Ok(has_tags)
}

/// The `Expiration` action: exactly one of a date, a number of days or the
/// expired-delete-marker flag.
fn validate_expiration(expiration: &Element) -> Result<(), AwsError> {
    expect_children(
        expiration,
        &[("Date", 1), ("Days", 1), ("ExpiredObjectDeleteMarker", 1)],
    )?;
    if expiration.children.len() != 1 {
        return Err(malformed());
    }
    if let Some(days) = expiration.text_of("Days") {
        positive(
            days,
            "'Days' for Expiration action must be a positive integer",
            "Days",
        )?;
    }
    if let Some(date) = expiration.text_of("Date") {
        check_midnight(date)?;
    }
    if let Some(flag) = expiration.text_of("ExpiredObjectDeleteMarker") {
        parse_bool(flag)?;
    }
    Ok(())
}

/// A `Transition` action: a storage class it may move to, and days or a date; the
/// infrequent-access classes take no object younger than 30 days.
fn validate_transition(transition: &Element) -> Result<(), AwsError> {
    expect_children(transition, &[("Date", 1), ("Days", 1), ("StorageClass", 1)])?;
    let class = transition
        .text_of("StorageClass")
        .filter(|c| TRANSITION_STORAGE_CLASSES.contains(c))
        .ok_or_else(malformed)?;
    match (transition.text_of("Days"), transition.text_of("Date")) {
        (Some(days), None) => {
            let days = parse_int(days)?;
            if days < 0 {
                return Err(invalid_argument(
                    "'Days' in Transition action must be a non-negative integer",
                    "Days",
                    &days.to_string(),
                ));
            }
            if matches!(class, "STANDARD_IA" | "ONEZONE_IA") && days < 30 {
                return Err(invalid_argument(
                    &format!("'Days' in Transition action must be greater than or equal to 30 for storageClass '{class}'"),
                    "Days",
                    &days.to_string(),
                ));
            }
        }
        (None, Some(date)) => check_midnight(date)?,
        _ => return Err(malformed()),
    }
    Ok(())
}

/// A `NoncurrentVersionTransition` action: a storage class it may move to, and days
/// since the version became noncurrent.
fn validate_noncurrent_transition(transition: &Element) -> Result<(), AwsError> {
    expect_children(
        transition,
        &[
            ("NoncurrentDays", 1),
            ("StorageClass", 1),
            ("NewerNoncurrentVersions", 1),
        ],
    )?;
    transition
        .text_of("StorageClass")
        .filter(|c| TRANSITION_STORAGE_CLASSES.contains(c))
        .ok_or_else(malformed)?;
    let days = transition.text_of("NoncurrentDays").ok_or_else(malformed)?;
    if parse_int(days)? < 0 {
        return Err(invalid_argument(
            "'NoncurrentDays' in NoncurrentVersionTransition action must be a non-negative integer",
            "NoncurrentDays",
            days,
        ));
    }
    if let Some(n) = transition.text_of("NewerNoncurrentVersions") {
        positive(
            n,
            "'NewerNoncurrentVersions' must be a positive integer",
            "NewerNoncurrentVersions",
        )?;
    }
    Ok(())
}

/// The `NoncurrentVersionExpiration` action: a positive number of days.
fn validate_noncurrent_expiration(expiration: &Element) -> Result<(), AwsError> {
    expect_children(
        expiration,
        &[("NoncurrentDays", 1), ("NewerNoncurrentVersions", 1)],
    )?;
    let days = expiration.text_of("NoncurrentDays").ok_or_else(malformed)?;
    positive(
        days,
        "'NoncurrentDays' for NoncurrentVersionExpiration action must be a positive integer",
        "NoncurrentDays",
    )?;
    if let Some(n) = expiration.text_of("NewerNoncurrentVersions") {
        positive(
            n,
            "'NewerNoncurrentVersions' must be a positive integer",
            "NewerNoncurrentVersions",
        )?;
    }
    Ok(())
}

/// The `AbortIncompleteMultipartUpload` action: a positive number of days, in a rule
/// that does not filter by tags (uploads have none).
fn validate_abort(abort: &Element, has_tags: bool) -> Result<(), AwsError> {
    expect_children(abort, &[("DaysAfterInitiation", 1)])?;
    let days = abort.text_of("DaysAfterInitiation").ok_or_else(malformed)?;
    positive(
        days,
        "'DaysAfterInitiation' for AbortIncompleteMultipartUpload action must be a positive integer",
        "DaysAfterInitiation",
    )?;
    if has_tags {
        return Err(AwsError::new(
            400,
            "InvalidRequest",
            "AbortIncompleteMultipartUpload cannot be specified with Tags.",
        ));
    }
    Ok(())
}

fn validate_filter_tag(tag: &Element) -> Result<(), AwsError> {
    expect_children(tag, &[("Key", 1), ("Value", 1)])?;
    if tag.find("Key").is_none() || tag.find("Value").is_none() {
        return Err(malformed());
    }
    Ok(())
}

/// Lifecycle dates must be midnight UTC (`2027-01-01T00:00:00.000Z`).
fn check_midnight(date: &str) -> Result<(), AwsError> {
    let parsed = DateTime::parse_from_rfc3339(date).map_err(|_| malformed())?;
    if parsed.with_timezone(&Utc).time() != chrono::NaiveTime::MIN {
        return Err(invalid_argument(
            "'Date' must be at midnight GMT",
            "Date",
            date,
        ));
    }
    Ok(())
}

fn positive(text: &str, message: &str, name: &str) -> Result<i64, AwsError> {
    let n = parse_int(text)?;
    if n <= 0 {
        return Err(invalid_argument(message, name, text));
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use axum::http::Method;

    use super::super::testkit::Harness;
    use super::*;

    #[test]
    fn new_buckets_have_todays_defaults() {
        let mut h = Harness::new();
        h.put("/bkt", b"");
        let versioning = h.call(Method::GET, "/bkt?versioning", &[], b"");
        assert_eq!(
            versioning.doc().render(),
            format!("<VersioningConfiguration xmlns=\"{NS}\"/>")
        );
        let encryption = h.call(Method::GET, "/bkt?encryption", &[], b"");
        let rule = encryption.doc().find("Rule").expect("a rule");
        assert_eq!(
            rule.find("ApplyServerSideEncryptionByDefault")
                .and_then(|d| d.text_of("SSEAlgorithm")),
            Some("AES256")
        );
        let block = h.call(Method::GET, "/bkt?publicAccessBlock", &[], b"");
        assert_eq!(
            PublicAccessBlock::FIELDS.map(|f| block.doc().text_of(f).map(str::to_string)),
            PublicAccessBlock::FIELDS.map(|_| Some("true".to_string()))
        );
        assert_eq!(
            h.call(Method::DELETE, "/bkt?publicAccessBlock", &[], b"")
                .status,
            204
        );
        let gone = h.call(Method::GET, "/bkt?publicAccessBlock", &[], b"");
        assert_eq!(
            (gone.status, gone.code()),
            (404, Some("NoSuchPublicAccessBlockConfiguration"))
        );
        let kms = "<ServerSideEncryptionConfiguration><Rule><ApplyServerSideEncryptionByDefault><SSEAlgorithm>aws:kms</SSEAlgorithm><KMSMasterKeyID>k-1</KMSMasterKeyID></ApplyServerSideEncryptionByDefault><BucketKeyEnabled>true</BucketKeyEnabled></Rule></ServerSideEncryptionConfiguration>";
        assert_eq!(h.configure(Method::PUT, "/bkt?encryption", kms).status, 200);
        let put = h.put("/bkt/k", b"x");
        assert_eq!(put.header("x-amz-server-side-encryption"), Some("aws:kms"));
        assert_eq!(
            put.header("x-amz-server-side-encryption-aws-kms-key-id"),
            Some("arn:aws:kms:us-east-1:123456789012:key/k-1")
        );
        assert_eq!(
            put.header("x-amz-server-side-encryption-bucket-key-enabled"),
            Some("true")
        );
        assert_eq!(
            h.call(Method::DELETE, "/bkt?encryption", &[], b"").status,
            204
        );
        assert_eq!(
            h.put("/bkt/k", b"x").header("x-amz-server-side-encryption"),
            Some("AES256")
        );
        for bad in [
            "<ServerSideEncryptionConfiguration><Rule><ApplyServerSideEncryptionByDefault><SSEAlgorithm>ROT13</SSEAlgorithm></ApplyServerSideEncryptionByDefault></Rule></ServerSideEncryptionConfiguration>",
            "<ServerSideEncryptionConfiguration/>",
            "<ServerSideEncryptionConfiguration><Rule><Unknown/></Rule></ServerSideEncryptionConfiguration>",
        ] {
            assert_eq!(h.configure(Method::PUT, "/bkt?encryption", bad).code(), Some("MalformedXML"), "{bad}");
        }
        let key_with_aes = "<ServerSideEncryptionConfiguration><Rule><ApplyServerSideEncryptionByDefault><SSEAlgorithm>AES256</SSEAlgorithm><KMSMasterKeyID>k</KMSMasterKeyID></ApplyServerSideEncryptionByDefault></Rule></ServerSideEncryptionConfiguration>";
        assert_eq!(
            h.configure(Method::PUT, "/bkt?encryption", key_with_aes)
                .code(),
            Some("InvalidArgument")
        );
    }

    #[test]
    fn lifecycle_rules_are_validated() {
        let rule = |body: &str| {
            format!("<LifecycleConfiguration><Rule>{body}</Rule></LifecycleConfiguration>")
        };
        let cases: &[(&str, u16, Option<&str>)] = &[
            ("<ID>logs</ID><Filter><Prefix>logs/</Prefix></Filter><Status>Enabled</Status><Expiration><Days>30</Days></Expiration>", 200, None),
            ("<Filter/><Status>Enabled</Status><NoncurrentVersionExpiration><NoncurrentDays>7</NoncurrentDays></NoncurrentVersionExpiration><AbortIncompleteMultipartUpload><DaysAfterInitiation>1</DaysAfterInitiation></AbortIncompleteMultipartUpload>", 200, None),
            ("<Prefix>old/</Prefix><Status>Disabled</Status><Transition><Days>30</Days><StorageClass>STANDARD_IA</StorageClass></Transition>", 200, None),
            ("<Filter><And><Prefix>a/</Prefix><Tag><Key>k</Key><Value>v</Value></Tag></And></Filter><Status>Enabled</Status><Expiration><Date>2027-01-01T00:00:00.000Z</Date></Expiration>", 200, None),
            ("<Filter/><Status>Enabled</Status>", 400, Some("InvalidRequest")),
            ("<Filter/><Status>Maybe</Status><Expiration><Days>1</Days></Expiration>", 400, Some("MalformedXML")),
            ("<Status>Enabled</Status><Expiration><Days>1</Days></Expiration>", 400, Some("MalformedXML")),
            ("<Prefix/><Filter/><Status>Enabled</Status><Expiration><Days>1</Days></Expiration>", 400, Some("MalformedXML")),
            ("<Filter/><Status>Enabled</Status><Expiration><Days>0</Days></Expiration>", 400, Some("InvalidArgument")),
            ("<Filter/><Status>Enabled</Status><Expiration><Days>x</Days></Expiration>", 400, Some("MalformedXML")),
            ("<Filter/><Status>Enabled</Status><Expiration><Days>1</Days><Date>2027-01-01T00:00:00Z</Date></Expiration>", 400, Some("MalformedXML")),
            ("<Filter/><Status>Enabled</Status><Expiration><Date>2027-01-01T10:00:00Z</Date></Expiration>", 400, Some("InvalidArgument")),
            ("<Filter/><Status>Enabled</Status><Transition><Days>5</Days><StorageClass>STANDARD_IA</StorageClass></Transition>", 400, Some("InvalidArgument")),
            ("<Filter/><Status>Enabled</Status><Transition><Days>5</Days><StorageClass>TAPE</StorageClass></Transition>", 400, Some("MalformedXML")),
            ("<Filter><Tag><Key>k</Key><Value>v</Value></Tag></Filter><Status>Enabled</Status><AbortIncompleteMultipartUpload><DaysAfterInitiation>1</DaysAfterInitiation></AbortIncompleteMultipartUpload>", 400, Some("InvalidRequest")),
            ("<Filter><Prefix>a</Prefix><Tag><Key>k</Key><Value>v</Value></Tag></Filter><Status>Enabled</Status><Expiration><Days>1</Days></Expiration>", 400, Some("MalformedXML")),
            ("<Filter/><Status>Enabled</Status><Expiration><Days>1</Days></Expiration><Extra/>", 400, Some("MalformedXML")),
        ];
        let mut h = Harness::new();
        h.put("/bkt", b"");
        let missing = h.call(Method::GET, "/bkt?lifecycle", &[], b"");
        assert_eq!(
            (missing.status, missing.code()),
            (404, Some("NoSuchLifecycleConfiguration"))
        );
        for (body, status, code) in cases {
            let r = h.configure(Method::PUT, "/bkt?lifecycle", &rule(body));
            assert_eq!((r.status, r.code()), (*status, *code), "{body}: {}", r.body);
        }
        let twice = "<LifecycleConfiguration><Rule><ID>a</ID><Filter/><Status>Enabled</Status><Expiration><Days>1</Days></Expiration></Rule><Rule><ID>a</ID><Filter/><Status>Enabled</Status><Expiration><Days>2</Days></Expiration></Rule></LifecycleConfiguration>";
        assert_eq!(
            h.configure(Method::PUT, "/bkt?lifecycle", twice).code(),
            Some("InvalidArgument")
        );
        assert_eq!(
            h.configure(Method::PUT, "/bkt?lifecycle", "<LifecycleConfiguration/>")
                .code(),
            Some("MalformedXML")
        );
        // The last accepted configuration is what GET answers, IDs filled in.
        let got = h.call(Method::GET, "/bkt?lifecycle", &[], b"");
        assert_eq!(
            got.header("x-amz-transition-default-minimum-object-size"),
            Some("all_storage_classes_128K")
        );
        let stored = got.doc().find("Rule").expect("a rule");
        assert!(stored.text_of("ID").is_some_and(|id| !id.is_empty()));
        assert_eq!(
            stored.find("Expiration").and_then(|e| e.text_of("Date")),
            Some("2027-01-01T00:00:00.000Z")
        );
        assert_eq!(
            h.call(Method::DELETE, "/bkt?lifecycle", &[], b"").status,
            204
        );
        assert_eq!(h.call(Method::GET, "/bkt?lifecycle", &[], b"").status, 404);
    }
}
