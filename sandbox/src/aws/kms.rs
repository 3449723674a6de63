//! KMS (JSON 1.1, `X-Amz-Target: TrentService.<Op>`): customer managed keys and their
//! aliases, per region — create, describe (by key id, key ARN, alias name or alias
//! ARN), list, enable and disable, rotation, description, tags, and deletion scheduled
//! 7–30 days ahead (cancelled back to Disabled, as KMS does; on the sandbox clock the
//! key and its aliases go once the window ends). Keys hold no key material: nothing
//! here encrypts. A key pending deletion refuses what KMS refuses
//! (`KMSInvalidStateException`) and keeps its aliases listed until it is gone.

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::{AwsError, AwsRequest, AwsResponse, ACCOUNT};

const CONTENT_TYPE: &str = "application/x-amz-json-1.1";
const ENABLED: &str = "Enabled";
const DISABLED: &str = "Disabled";
const PENDING_DELETION: &str = "PendingDeletion";

/// Every emulated key and alias.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub(crate) struct Kms {
    #[serde(default)]
    keys: Vec<Key>,
    #[serde(default)]
    aliases: Vec<Alias>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Key {
    region: String,
    id: String,
    arn: String,
    created: DateTime<Utc>,
    description: String,
    key_usage: String,
    key_spec: String,
    state: String,
    #[serde(default)]
    deletion_date: Option<DateTime<Utc>>,
    #[serde(default)]
    pending_window_days: Option<i64>,
    #[serde(default)]
    rotation_period_days: Option<i64>,
    #[serde(default)]
    tags: Vec<(String, String)>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Alias {
    region: String,
    /// `alias/name`.
    name: String,
    target_key_id: String,
    created: DateTime<Utc>,
    updated: DateTime<Utc>,
}

fn not_found(message: impl Into<String>) -> AwsError {
    AwsError::new(400, "NotFoundException", message)
}

fn validation(message: impl Into<String>) -> AwsError {
    AwsError::new(400, "ValidationException", message)
}

fn invalid_state(message: impl Into<String>) -> AwsError {
    AwsError::new(400, "KMSInvalidStateException", message)
}

/// Seconds since the epoch with a fraction, as KMS's JSON timestamps are.
fn epoch(t: &DateTime<Utc>) -> Value {
    json!(t.timestamp_millis() as f64 / 1000.0)
}

/// The usages a key spec allows.
fn usages(spec: &str) -> Option<&'static [&'static str]> {
    Some(match spec {
        "SYMMETRIC_DEFAULT" => &["ENCRYPT_DECRYPT"],
        "RSA_2048" | "RSA_3072" | "RSA_4096" => &["ENCRYPT_DECRYPT", "SIGN_VERIFY"],
        "ECC_NIST_P256" | "ECC_NIST_P384" | "ECC_NIST_P521" => &["SIGN_VERIFY", "KEY_AGREEMENT"],
        "ECC_SECG_P256K1" | "ECC_NIST_EDWARDS25519" | "ML_DSA_44" | "ML_DSA_65" | "ML_DSA_87" => {
            &["SIGN_VERIFY"]
        }
        "HMAC_224" | "HMAC_256" | "HMAC_384" | "HMAC_512" => &["GENERATE_VERIFY_MAC"],
        "SM2" => &["ENCRYPT_DECRYPT", "SIGN_VERIFY", "KEY_AGREEMENT"],
        "ML_KEM_512" | "ML_KEM_768" | "ML_KEM_1024" => &["ENCAPSULATE_DECAPSULATE"],
        _ => return None,
    })
}

impl Key {
    fn enabled(&self) -> bool {
        self.state == ENABLED
    }

    fn metadata(&self) -> Value {
        let mut m = json!({
            "AWSAccountId": ACCOUNT,
            "KeyId": self.id,
            "Arn": self.arn,
            "CreationDate": epoch(&self.created),
            "Enabled": self.enabled(),
            "Description": self.description,
            "KeyUsage": self.key_usage,
            "KeyState": self.state,
            "Origin": "AWS_KMS",
            "KeyManager": "CUSTOMER",
            "CustomerMasterKeySpec": self.key_spec,
            "KeySpec": self.key_spec,
            "MultiRegion": false,
        });
        let algorithms: (&str, Vec<&str>) = match (self.key_usage.as_str(), self.key_spec.as_str())
        {
            ("ENCRYPT_DECRYPT", "SYMMETRIC_DEFAULT") => {
                ("EncryptionAlgorithms", vec!["SYMMETRIC_DEFAULT"])
            }
            ("ENCRYPT_DECRYPT", "SM2") => ("EncryptionAlgorithms", vec!["SM2PKE"]),
            ("ENCRYPT_DECRYPT", _) => (
                "EncryptionAlgorithms",
                vec!["RSAES_OAEP_SHA_1", "RSAES_OAEP_SHA_256"],
            ),
            ("SIGN_VERIFY", s) if s.starts_with("RSA") => (
                "SigningAlgorithms",
                vec![
                    "RSASSA_PKCS1_V1_5_SHA_256",
                    "RSASSA_PKCS1_V1_5_SHA_384",
                    "RSASSA_PKCS1_V1_5_SHA_512",
                    "RSASSA_PSS_SHA_256",
                    "RSASSA_PSS_SHA_384",
                    "RSASSA_PSS_SHA_512",
                ],
            ),
            ("SIGN_VERIFY", "ECC_NIST_P256" | "ECC_SECG_P256K1") => {
                ("SigningAlgorithms", vec!["ECDSA_SHA_256"])
            }
            ("SIGN_VERIFY", "ECC_NIST_P384") => ("SigningAlgorithms", vec!["ECDSA_SHA_384"]),
            ("SIGN_VERIFY", "ECC_NIST_P521") => ("SigningAlgorithms", vec!["ECDSA_SHA_512"]),
            ("SIGN_VERIFY", "ECC_NIST_EDWARDS25519") => {
                ("SigningAlgorithms", vec!["ED25519_SHA_512"])
            }
            ("SIGN_VERIFY", "SM2") => ("SigningAlgorithms", vec!["SM2DSA"]),
            ("SIGN_VERIFY", _) => ("SigningAlgorithms", vec!["ML_DSA_SHAKE_256"]),
            ("GENERATE_VERIFY_MAC", s) => {
                let bits = s.trim_start_matches("HMAC_");
                (
                    "MacAlgorithms",
                    vec![match bits {
                        "224" => "HMAC_SHA_224",
                        "384" => "HMAC_SHA_384",
                        "512" => "HMAC_SHA_512",
                        _ => "HMAC_SHA_256",
                    }],
                )
            }
            ("KEY_AGREEMENT", _) => ("KeyAgreementAlgorithms", vec!["ECDH"]),
            _ => ("", Vec::new()),
        };
        if !algorithms.0.is_empty() {
            m[algorithms.0] = json!(algorithms.1);
        }
        if let Some(d) = &self.deletion_date {
            m["DeletionDate"] = epoch(d);
        }
        if let Some(w) = self.pending_window_days {
            m["PendingDeletionWindowInDays"] = json!(w);
        }
        m
    }

    fn not_pending(&self) -> Result<(), AwsError> {
        if self.state == PENDING_DELETION {
            Err(invalid_state(format!("{} is pending deletion.", self.arn)))
        } else {
            Ok(())
        }
    }

    /// What EnableKeyRotation and DisableKeyRotation both require: a key neither pending
    /// deletion nor disabled, of the one spec KMS rotates.
    fn rotatable(&self) -> Result<(), AwsError> {
        self.not_pending()?;
        if self.state == DISABLED {
            return Err(AwsError::new(
                400,
                "DisabledException",
                format!("{} is disabled.", self.arn),
            ));
        }
        if self.key_spec != "SYMMETRIC_DEFAULT" {
            return Err(AwsError::new(
                400,
                "UnsupportedOperationException",
                format!(
                    "{} key usage and key spec do not support automatic rotation.",
                    self.arn
                ),
            ));
        }
        Ok(())
    }
}

fn str_member(body: &Map<String, Value>, name: &str) -> Result<Option<String>, AwsError> {
    match body.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(AwsError::new(
            400,
            "SerializationException",
            format!("{name} must be a string"),
        )),
    }
}

fn required(body: &Map<String, Value>, name: &str) -> Result<String, AwsError> {
    str_member(body, name)?.ok_or_else(|| {
        validation(format!(
            "1 validation error detected: Value null at '{}' failed to satisfy constraint: Member must not be null",
            member(name)
        ))
    })
}

/// A member as KMS's validation messages name it: `KeyId` → `keyId`.
fn member(name: &str) -> String {
    let mut chars = name.chars();
    chars
        .next()
        .map(|c| c.to_ascii_lowercase().to_string() + chars.as_str())
        .unwrap_or_default()
}

/// A number of days `name` may give, within `range` (`default` when absent), refused in
/// KMS's validation wording (`… at 'pendingWindowInDays' failed to satisfy constraint`).
fn days_member(
    body: &Map<String, Value>,
    name: &str,
    range: std::ops::RangeInclusive<i64>,
    default: i64,
) -> Result<i64, AwsError> {
    match int_member(body, name)? {
        None => Ok(default),
        Some(d) if range.contains(&d) => Ok(d),
        Some(d) => Err(validation(format!(
            "1 validation error detected: Value '{d}' at '{}' failed to satisfy constraint: Member must have value between {} and {}",
            member(name),
            range.start(),
            range.end()
        ))),
    }
}

fn int_member(body: &Map<String, Value>, name: &str) -> Result<Option<i64>, AwsError> {
    match body.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_i64().map(Some).ok_or_else(|| {
            AwsError::new(
                400,
                "SerializationException",
                format!("{name} must be an integer"),
            )
        }),
    }
}

/// `[{TagKey, TagValue}]`, checked as KMS checks them.
fn tag_list(body: &Map<String, Value>) -> Result<Vec<(String, String)>, AwsError> {
    let Some(items) = body.get("Tags") else {
        return Ok(Vec::new());
    };
    let items = items
        .as_array()
        .ok_or_else(|| AwsError::new(400, "SerializationException", "Tags must be a list"))?;
    let mut out: Vec<(String, String)> = Vec::new();
    for t in items {
        let (Some(k), Some(v)) = (t["TagKey"].as_str(), t["TagValue"].as_str()) else {
            return Err(validation(
                "1 validation error detected: Value null at 'tags.member.tagKey' failed to satisfy constraint: Member must not be null",
            ));
        };
        if k.is_empty() || k.chars().count() > 128 || v.chars().count() > 256 {
            return Err(AwsError::new(
                400,
                "TagException",
                "Tag key or value has an invalid length",
            ));
        }
        if k.starts_with("aws:") {
            return Err(AwsError::new(
                400,
                "TagException",
                "Tags beginning with aws: are reserved",
            ));
        }
        match out.iter_mut().find(|(have, _)| have == k) {
            Some(e) => e.1 = v.to_string(),
            None => out.push((k.to_string(), v.to_string())),
        }
    }
    Ok(out)
}

fn tags_json(tags: &[(String, String)]) -> Value {
    Value::Array(
        tags.iter()
            .map(|(k, v)| json!({"TagKey": k, "TagValue": v}))
            .collect(),
    )
}

/// `Limit` (1–`max`) and `Marker` (an offset this API handed out): one page and the
/// next marker.
fn page<T: Clone>(
    body: &Map<String, Value>,
    items: &[T],
    max: i64,
) -> Result<(Vec<T>, Option<String>), AwsError> {
    let limit = match int_member(body, "Limit")? {
        None => max,
        Some(n) if (1..=max).contains(&n) => n,
        Some(n) => {
            return Err(validation(format!(
                "1 validation error detected: Value '{n}' at 'limit' failed to satisfy constraint: Member must have value between 1 and {max}"
            )))
        }
    };
    let start = match str_member(body, "Marker")? {
        None => 0,
        Some(m) => m
            .parse::<usize>()
            .ok()
            .filter(|n| *n <= items.len())
            .ok_or_else(|| AwsError::new(400, "InvalidMarkerException", "Invalid marker"))?,
    };
    let end = (start + usize::try_from(limit).unwrap_or(usize::MAX)).min(items.len());
    Ok((
        items[start..end].to_vec(),
        (end < items.len()).then(|| end.to_string()),
    ))
}

fn with_page(mut v: Value, next: Option<String>) -> Value {
    v["Truncated"] = json!(next.is_some());
    if let Some(m) = next {
        v["NextMarker"] = json!(m);
    }
    v
}

/// Whether `s` is a key id: a uuid, as KMS hands them out.
fn is_key_id(s: &str) -> bool {
    let parts: Vec<&str> = s.split('-').collect();
    parts.iter().map(|p| p.len()).eq([8, 4, 4, 4, 12])
        && parts
            .iter()
            .all(|p| p.chars().all(|c| c.is_ascii_hexdigit()))
}

/// An alias name KMS accepts: `alias/` and letters, digits, `/`, `_`, `-`; `alias/aws/`
/// is kept for AWS managed keys.
fn check_alias_name(name: &str) -> Result<(), AwsError> {
    let Some(rest) = name.strip_prefix("alias/") else {
        return Err(validation("Invalid identifier"));
    };
    if rest.is_empty() || name.len() > 256 {
        return Err(validation(format!(
            "1 validation error detected: Value '{name}' at 'aliasName' failed to satisfy constraint: Member must have length between 1 and 256"
        )));
    }
    if rest.starts_with("aws/") {
        return Err(AwsError::new(400, "NotAuthorizedException", ""));
    }
    if name.contains(':') {
        return Err(validation(format!(
            "{name} contains invalid characters for an alias"
        )));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "/_-".contains(c))
    {
        return Err(validation(format!(
            "1 validation error detected: Value '{name}' at 'aliasName' failed to satisfy constraint: Member must satisfy regular expression pattern: ^[a-zA-Z0-9:/_-]+$"
        )));
    }
    Ok(())
}

impl Kms {
    /// Forgets keys whose deletion window has ended, and their aliases.
    pub(crate) fn settle(&mut self, now: DateTime<Utc>) {
        let gone: Vec<(String, String)> = self
            .keys
            .iter()
            .filter(|k| k.deletion_date.is_some_and(|d| d <= now))
            .map(|k| (k.region.clone(), k.id.clone()))
            .collect();
        self.keys
            .retain(|k| !gone.contains(&(k.region.clone(), k.id.clone())));
        self.aliases
            .retain(|a| !gone.contains(&(a.region.clone(), a.target_key_id.clone())));
    }

    /// One line per key and alias, for `Sandbox::inventory`.
    pub(crate) fn inventory(&self, out: &mut Vec<String>) {
        for k in &self.keys {
            out.push(format!("kms key {}/{} ({})", k.region, k.id, k.state));
        }
        for a in &self.aliases {
            out.push(format!(
                "kms alias {}/{} -> {}",
                a.region, a.name, a.target_key_id
            ));
        }
    }

    fn alias_arn(region: &str, name: &str) -> String {
        format!("arn:aws:kms:{region}:{ACCOUNT}:{name}")
    }

    /// The key `key_id` names in `region`: a key id, a key ARN, an alias name or an
    /// alias ARN. `aliases` says whether an alias may name it (not for operations that
    /// take a key only, such as ScheduleKeyDeletion).
    fn resolve(&self, region: &str, key_id: &str, aliases: bool) -> Result<usize, AwsError> {
        let key_prefix = format!("arn:aws:kms:{region}:{ACCOUNT}:key/");
        let alias_prefix = format!("arn:aws:kms:{region}:{ACCOUNT}:");
        let find_key = |id: &str| {
            self.keys
                .iter()
                .position(|k| k.region == region && k.id == id)
                .ok_or_else(|| not_found(format!("Key '{key_prefix}{id}' does not exist")))
        };
        if let Some(id) = key_id.strip_prefix(&key_prefix) {
            return find_key(id);
        }
        let alias_name = if key_id.starts_with("alias/") {
            Some(key_id.to_string())
        } else {
            key_id
                .strip_prefix(&alias_prefix)
                .filter(|rest| rest.starts_with("alias/"))
                .map(str::to_string)
        };
        if let Some(name) = alias_name.filter(|_| aliases) {
            let target = self
                .aliases
                .iter()
                .find(|a| a.region == region && a.name == name)
                .map(|a| a.target_key_id.clone())
                .ok_or_else(|| {
                    not_found(format!(
                        "Alias {} is not found.",
                        Self::alias_arn(region, &name)
                    ))
                })?;
            return find_key(&target);
        }
        if is_key_id(key_id) {
            return find_key(key_id);
        }
        if key_id.starts_with("arn:") && key_id.contains(":key/") {
            // A key ARN of another region or account names no key here.
            return Err(not_found(format!("Key '{key_id}' does not exist")));
        }
        Err(not_found(format!("Invalid keyId '{key_id}'")))
    }

    fn key_of(
        &self,
        region: &str,
        body: &Map<String, Value>,
        aliases: bool,
    ) -> Result<usize, AwsError> {
        let id = required(body, "KeyId")?;
        self.resolve(region, &id, aliases)
    }

    pub(crate) fn handle(
        &mut self,
        req: &AwsRequest,
        now: DateTime<Utc>,
    ) -> Result<AwsResponse, AwsError> {
        let target = req.header("x-amz-target").unwrap_or_default();
        let Some(op) = target.strip_prefix("TrentService.") else {
            return Err(AwsError::new(
                400,
                "UnknownOperationException",
                format!("the X-Amz-Target {target:?} names no KMS operation"),
            ));
        };
        let body = match req.json()? {
            Value::Null => Map::new(),
            Value::Object(m) => m,
            _ => {
                return Err(AwsError::new(
                    400,
                    "SerializationException",
                    "the request body must be a JSON object",
                ))
            }
        };
        let region = req.region.as_str();
        let out = match op {
            "CreateKey" => self.create_key(region, &body, now)?,
            "DescribeKey" => self.describe_key(region, &body)?,
            "ListKeys" => self.list_keys(region, &body)?,
            "ScheduleKeyDeletion" => self.schedule_key_deletion(region, &body, now)?,
            "CancelKeyDeletion" => self.cancel_key_deletion(region, &body)?,
            "EnableKey" => self.set_key_state(region, &body, ENABLED)?,
            "DisableKey" => self.set_key_state(region, &body, DISABLED)?,
            "EnableKeyRotation" => self.enable_key_rotation(region, &body)?,
            "DisableKeyRotation" => self.disable_key_rotation(region, &body)?,
            "GetKeyRotationStatus" => self.get_key_rotation_status(region, &body, now)?,
            "UpdateKeyDescription" => self.update_key_description(region, &body)?,
            "CreateAlias" => self.create_alias(region, &body, now)?,
            "UpdateAlias" => self.update_alias(region, &body, now)?,
            "DeleteAlias" => self.delete_alias(region, &body)?,
            "ListAliases" => self.list_aliases(region, &body)?,
            "TagResource" => self.tag_resource(region, &body)?,
            "UntagResource" => self.untag_resource(region, &body)?,
            "ListResourceTags" => self.list_resource_tags(region, &body)?,
            other => {
                return Err(AwsError::new(
                    400,
                    "UnknownOperationException",
                    format!("the sandbox does not emulate KMS's {other}"),
                ))
            }
        };
        Ok(AwsResponse::json(200, CONTENT_TYPE, &out))
    }

    /// DescribeKey: the key's metadata; an alias may name it.
    fn describe_key(&self, region: &str, body: &Map<String, Value>) -> Result<Value, AwsError> {
        let i = self.key_of(region, body, true)?;
        Ok(json!({"KeyMetadata": self.keys[i].metadata()}))
    }

    /// ListKeys: one page of the region's keys, pending deletion included.
    fn list_keys(&self, region: &str, body: &Map<String, Value>) -> Result<Value, AwsError> {
        let keys: Vec<Value> = self
            .keys
            .iter()
            .filter(|k| k.region == region)
            .map(|k| json!({"KeyId": k.id, "KeyArn": k.arn}))
            .collect();
        let (items, next) = page(body, &keys, 1000)?;
        Ok(with_page(json!({"Keys": items}), next))
    }

    /// ScheduleKeyDeletion: the key goes `PendingWindowInDays` (7–30, default 30) from
    /// now; [`Kms::settle`] forgets it then.
    fn schedule_key_deletion(
        &mut self,
        region: &str,
        body: &Map<String, Value>,
        now: DateTime<Utc>,
    ) -> Result<Value, AwsError> {
        let i = self.key_of(region, body, false)?;
        let days = days_member(body, "PendingWindowInDays", 7..=30, 30)?;
        let key = &mut self.keys[i];
        key.not_pending()?;
        let when = now + Duration::days(days);
        key.state = PENDING_DELETION.to_string();
        key.deletion_date = Some(when);
        key.pending_window_days = Some(days);
        Ok(json!({
            "KeyId": key.arn,
            "DeletionDate": epoch(&when),
            "KeyState": PENDING_DELETION,
            "PendingWindowInDays": days,
        }))
    }

    /// CancelKeyDeletion: the key comes back Disabled, not as it was, as KMS does.
    fn cancel_key_deletion(
        &mut self,
        region: &str,
        body: &Map<String, Value>,
    ) -> Result<Value, AwsError> {
        let i = self.key_of(region, body, false)?;
        let key = &mut self.keys[i];
        if key.state != PENDING_DELETION {
            return Err(invalid_state(format!(
                "{} is not pending deletion.",
                key.arn
            )));
        }
        key.state = DISABLED.to_string();
        key.deletion_date = None;
        key.pending_window_days = None;
        Ok(json!({"KeyId": key.arn}))
    }

    /// EnableKey and DisableKey: the key's state becomes `state`.
    fn set_key_state(
        &mut self,
        region: &str,
        body: &Map<String, Value>,
        state: &str,
    ) -> Result<Value, AwsError> {
        let i = self.key_of(region, body, false)?;
        let key = &mut self.keys[i];
        key.not_pending()?;
        key.state = state.to_string();
        Ok(json!({}))
    }

    /// EnableKeyRotation: rotation every `RotationPeriodInDays` (90–2560, default 365).
    fn enable_key_rotation(
        &mut self,
        region: &str,
        body: &Map<String, Value>,
    ) -> Result<Value, AwsError> {
        let i = self.key_of(region, body, false)?;
        let period = days_member(body, "RotationPeriodInDays", 90..=2560, 365)?;
        let key = &mut self.keys[i];
        key.rotatable()?;
        key.rotation_period_days = Some(period);
        Ok(json!({}))
    }

    /// DisableKeyRotation: refused for the same keys EnableKeyRotation refuses.
    fn disable_key_rotation(
        &mut self,
        region: &str,
        body: &Map<String, Value>,
    ) -> Result<Value, AwsError> {
        let i = self.key_of(region, body, false)?;
        let key = &mut self.keys[i];
        key.rotatable()?;
        key.rotation_period_days = None;
        Ok(json!({}))
    }

    /// GetKeyRotationStatus: whether the key rotates, and when it next would (nothing
    /// here rotates, so that is always one period from now).
    fn get_key_rotation_status(
        &self,
        region: &str,
        body: &Map<String, Value>,
        now: DateTime<Utc>,
    ) -> Result<Value, AwsError> {
        let i = self.key_of(region, body, false)?;
        let key = &self.keys[i];
        key.not_pending()?;
        let mut out = json!({
            "KeyRotationEnabled": key.rotation_period_days.is_some(),
            "KeyId": key.arn,
        });
        if let Some(days) = key.rotation_period_days {
            out["RotationPeriodInDays"] = json!(days);
            out["NextRotationDate"] = epoch(&(now + Duration::days(days)));
        }
        Ok(out)
    }

    /// UpdateKeyDescription: a new description, of at most 8192 characters.
    fn update_key_description(
        &mut self,
        region: &str,
        body: &Map<String, Value>,
    ) -> Result<Value, AwsError> {
        let i = self.key_of(region, body, false)?;
        let description = required(body, "Description")?;
        if description.chars().count() > 8192 {
            return Err(validation(
                "1 validation error detected: Value at 'description' failed to satisfy constraint: Member must have length less than or equal to 8192",
            ));
        }
        let key = &mut self.keys[i];
        key.not_pending()?;
        key.description = description;
        Ok(json!({}))
    }

    /// What CreateAlias and UpdateAlias both check first: a valid alias name and a key
    /// (not an alias) that is not pending deletion. The alias name and the key's id.
    fn alias_target(
        &self,
        region: &str,
        body: &Map<String, Value>,
    ) -> Result<(String, String), AwsError> {
        let name = required(body, "AliasName")?;
        let target = required(body, "TargetKeyId")?;
        check_alias_name(&name)?;
        if target.starts_with("alias/") || target.contains(":alias/") {
            return Err(validation("Aliases must refer to keys. Not aliases"));
        }
        let i = self.resolve(region, &target, false)?;
        let key_id = self.keys[i].id.clone();
        self.keys[i].not_pending()?;
        Ok((name, key_id))
    }

    /// Where the alias `name` is in the list, if `region` has it.
    fn alias_index(&self, region: &str, name: &str) -> Option<usize> {
        self.aliases
            .iter()
            .position(|a| a.region == region && a.name == name)
    }

    /// CreateAlias: a new alias; one of the same name in the region is an error.
    fn create_alias(
        &mut self,
        region: &str,
        body: &Map<String, Value>,
        now: DateTime<Utc>,
    ) -> Result<Value, AwsError> {
        let (name, key_id) = self.alias_target(region, body)?;
        if self.alias_index(region, &name).is_some() {
            return Err(AwsError::new(
                400,
                "AlreadyExistsException",
                format!(
                    "An alias with the name {} already exists",
                    Self::alias_arn(region, &name)
                ),
            ));
        }
        self.aliases.push(Alias {
            region: region.to_string(),
            name,
            target_key_id: key_id,
            created: now,
            updated: now,
        });
        Ok(json!({}))
    }

    /// UpdateAlias: an existing alias points at another key.
    fn update_alias(
        &mut self,
        region: &str,
        body: &Map<String, Value>,
        now: DateTime<Utc>,
    ) -> Result<Value, AwsError> {
        let (name, key_id) = self.alias_target(region, body)?;
        let Some(a) = self.alias_index(region, &name) else {
            return Err(not_found(format!(
                "Alias {} is not found.",
                Self::alias_arn(region, &name)
            )));
        };
        let alias = &mut self.aliases[a];
        alias.target_key_id = key_id;
        alias.updated = now;
        Ok(json!({}))
    }

    /// DeleteAlias: the alias goes; its key stays.
    fn delete_alias(&mut self, region: &str, body: &Map<String, Value>) -> Result<Value, AwsError> {
        let name = required(body, "AliasName")?;
        if !name.starts_with("alias/") {
            return Err(validation("Invalid identifier"));
        }
        let before = self.aliases.len();
        self.aliases
            .retain(|a| !(a.region == region && a.name == name));
        if self.aliases.len() == before {
            return Err(not_found(format!(
                "Alias {} is not found.",
                Self::alias_arn(region, &name)
            )));
        }
        Ok(json!({}))
    }

    /// ListAliases: one page of the region's aliases by name, or only those of `KeyId`.
    fn list_aliases(&self, region: &str, body: &Map<String, Value>) -> Result<Value, AwsError> {
        let only = match str_member(body, "KeyId")? {
            Some(id) => Some(self.keys[self.resolve(region, &id, false)?].id.clone()),
            None => None,
        };
        let mut aliases: Vec<&Alias> = self
            .aliases
            .iter()
            .filter(|a| a.region == region)
            .filter(|a| only.as_ref().is_none_or(|k| *k == a.target_key_id))
            .collect();
        aliases.sort_by(|a, b| a.name.cmp(&b.name));
        let entries: Vec<Value> = aliases
            .iter()
            .map(|a| {
                json!({
                    "AliasName": a.name,
                    "AliasArn": Self::alias_arn(region, &a.name),
                    "TargetKeyId": a.target_key_id,
                    "CreationDate": epoch(&a.created),
                    "LastUpdatedDate": epoch(&a.updated),
                })
            })
            .collect();
        let (items, next) = page(body, &entries, 100)?;
        Ok(with_page(json!({"Aliases": items}), next))
    }

    /// TagResource: tags merged into the key's, at most 50 in all.
    fn tag_resource(&mut self, region: &str, body: &Map<String, Value>) -> Result<Value, AwsError> {
        let i = self.key_of(region, body, false)?;
        let given = tag_list(body)?;
        let key = &mut self.keys[i];
        key.not_pending()?;
        // Merged aside first: a refused request changes nothing, as in KMS.
        let mut tags = key.tags.clone();
        for (k, v) in given {
            match tags.iter_mut().find(|(have, _)| *have == k) {
                Some(e) => e.1 = v,
                None => tags.push((k, v)),
            }
        }
        if tags.len() > 50 {
            return Err(AwsError::new(
                400,
                "LimitExceededException",
                "Too many tags",
            ));
        }
        key.tags = tags;
        Ok(json!({}))
    }

    /// UntagResource: keys the key does not have are no error.
    fn untag_resource(
        &mut self,
        region: &str,
        body: &Map<String, Value>,
    ) -> Result<Value, AwsError> {
        let i = self.key_of(region, body, false)?;
        let keys: Vec<String> = body
            .get("TagKeys")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
            .ok_or_else(|| {
                validation(
                    "1 validation error detected: Value null at 'tagKeys' failed to satisfy constraint: Member must not be null",
                )
            })?;
        let key = &mut self.keys[i];
        key.not_pending()?;
        key.tags.retain(|(k, _)| !keys.contains(k));
        Ok(json!({}))
    }

    /// ListResourceTags: one page of the key's tags.
    fn list_resource_tags(
        &self,
        region: &str,
        body: &Map<String, Value>,
    ) -> Result<Value, AwsError> {
        let i = self.key_of(region, body, false)?;
        let (items, next) = page(body, &self.keys[i].tags, 50)?;
        Ok(with_page(json!({"Tags": tags_json(&items)}), next))
    }

    fn create_key(
        &mut self,
        region: &str,
        body: &Map<String, Value>,
        now: DateTime<Utc>,
    ) -> Result<Value, AwsError> {
        let spec = match (str_member(body, "KeySpec")?, str_member(body, "CustomerMasterKeySpec")?) {
            (Some(_), Some(_)) => {
                return Err(validation(
                    "You cannot specify KeySpec and CustomerMasterKeySpec in the same request. CustomerMasterKeySpec parameter is deprecated. Use KeySpec parameter.",
                ))
            }
            (Some(s), None) | (None, Some(s)) => s,
            (None, None) => "SYMMETRIC_DEFAULT".to_string(),
        };
        let usage = str_member(body, "KeyUsage")?.unwrap_or_else(|| "ENCRYPT_DECRYPT".to_string());
        let Some(allowed) = usages(&spec) else {
            return Err(validation(format!(
                "1 validation error detected: Value '{spec}' at 'keySpec' failed to satisfy constraint: Member must satisfy enum value set"
            )));
        };
        if !allowed.contains(&usage.as_str()) {
            return Err(validation(format!(
                "KeyUsage {usage} is not compatible with KeySpec {spec}"
            )));
        }
        let description = str_member(body, "Description")?.unwrap_or_default();
        if description.chars().count() > 8192 {
            return Err(validation(
                "1 validation error detected: Value at 'description' failed to satisfy constraint: Member must have length less than or equal to 8192",
            ));
        }
        if let Some(origin) = str_member(body, "Origin")? {
            if origin != "AWS_KMS" {
                return Err(AwsError::new(
                    400,
                    "UnsupportedOperationException",
                    format!("the sandbox creates keys of origin AWS_KMS only, not {origin}"),
                ));
            }
        }
        if body.get("MultiRegion").and_then(Value::as_bool) == Some(true) {
            return Err(AwsError::new(
                400,
                "UnsupportedOperationException",
                "the sandbox does not create multi-Region keys",
            ));
        }
        let tags = tag_list(body)?;
        let id = crate::common::ids::new_uid();
        let key = Key {
            region: region.to_string(),
            arn: format!("arn:aws:kms:{region}:{ACCOUNT}:key/{id}"),
            id,
            created: now,
            description,
            key_usage: usage,
            key_spec: spec,
            state: ENABLED.to_string(),
            deletion_date: None,
            pending_window_days: None,
            rotation_period_days: None,
            tags,
        };
        let out = json!({"KeyMetadata": key.metadata()});
        self.keys.push(key);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::Method;

    struct Harness {
        kms: Kms,
        now: DateTime<Utc>,
    }

    impl Harness {
        fn new() -> Self {
            Harness {
                kms: Kms::default(),
                now: Utc::now(),
            }
        }

        fn call_in(&mut self, region: &str, op: &str, body: Value) -> Result<Value, AwsError> {
            let target = format!("TrentService.{op}");
            let mut req = AwsRequest::new(
                Method::POST,
                "/",
                &[("x-amz-target", &target), ("content-type", CONTENT_TYPE)],
                body.to_string().as_bytes(),
            );
            req.region = region.to_string();
            self.kms.settle(self.now);
            let resp = self.kms.handle(&req, self.now)?;
            assert_eq!(resp.status, 200);
            Ok(resp.json_body().unwrap_or_default())
        }

        fn call(&mut self, op: &str, body: Value) -> Result<Value, AwsError> {
            self.call_in("us-east-1", op, body)
        }

        fn key(&mut self) -> (String, String) {
            let made = self
                .call("CreateKey", json!({"Description": "d"}))
                .expect("created");
            let m = &made["KeyMetadata"];
            (
                m["KeyId"].as_str().unwrap_or_default().to_string(),
                m["Arn"].as_str().unwrap_or_default().to_string(),
            )
        }
    }

    #[test]
    fn keys_are_created_with_kms_defaults() {
        let mut h = Harness::new();
        let made = h
            .call(
                "CreateKey",
                json!({"Tags": [{"TagKey": "team", "TagValue": "ml"}]}),
            )
            .expect("created");
        let m = &made["KeyMetadata"];
        let id = m["KeyId"].as_str().unwrap_or_default();
        assert!(is_key_id(id), "{id}");
        assert_eq!(
            m["Arn"],
            format!("arn:aws:kms:us-east-1:123456789012:key/{id}")
        );
        assert_eq!(m["KeyState"], ENABLED);
        assert_eq!(m["KeyUsage"], "ENCRYPT_DECRYPT");
        assert_eq!(m["KeySpec"], "SYMMETRIC_DEFAULT");
        assert_eq!(m["EncryptionAlgorithms"], json!(["SYMMETRIC_DEFAULT"]));
        assert!(m["CreationDate"].is_f64());
        let tags = h
            .call("ListResourceTags", json!({"KeyId": id}))
            .expect("tags");
        assert_eq!(tags["Tags"], json!([{"TagKey": "team", "TagValue": "ml"}]));
        let e = h
            .call("CreateKey", json!({"KeySpec": "ECC_NIST_P256"}))
            .expect_err("ECC keys do not encrypt");
        assert_eq!(e.code, "ValidationException");
        let sign = h
            .call(
                "CreateKey",
                json!({"KeySpec": "RSA_2048", "KeyUsage": "SIGN_VERIFY"}),
            )
            .expect("created");
        assert!(sign["KeyMetadata"]["SigningAlgorithms"].is_array());
        // Keys are per region.
        let listed = h
            .call_in("eu-west-1", "ListKeys", json!({}))
            .expect("listed");
        assert_eq!(listed["Keys"], json!([]));
        let e = h
            .call_in("eu-west-1", "DescribeKey", json!({"KeyId": id}))
            .expect_err("another region");
        assert_eq!(e.code, "NotFoundException");
    }

    #[test]
    fn tag_resource_over_the_limit_changes_nothing() {
        let mut h = Harness::new();
        let (id, _) = h.key();
        let tags = |range: std::ops::Range<usize>| -> Vec<Value> {
            range
                .map(|n| json!({"TagKey": format!("k{n}"), "TagValue": "v"}))
                .collect()
        };
        h.call("TagResource", json!({"KeyId": id, "Tags": tags(0..40)}))
            .expect("40 tags");
        let e = h
            .call("TagResource", json!({"KeyId": id, "Tags": tags(40..51)}))
            .expect_err("51 tags");
        assert_eq!(e.code, "LimitExceededException");
        let listed = h
            .call("ListResourceTags", json!({"KeyId": id}))
            .expect("listed");
        assert_eq!(
            listed["Tags"].as_array().map(Vec::len),
            Some(40),
            "the refused request added none"
        );
    }

    #[test]
    fn keys_are_found_by_id_arn_alias_and_alias_arn() {
        let mut h = Harness::new();
        let (id, arn) = h.key();
        h.call(
            "CreateAlias",
            json!({"AliasName": "alias/ml", "TargetKeyId": id}),
        )
        .expect("alias");
        for name in [
            id.clone(),
            arn.clone(),
            "alias/ml".to_string(),
            "arn:aws:kms:us-east-1:123456789012:alias/ml".to_string(),
        ] {
            let d = h
                .call("DescribeKey", json!({"KeyId": name}))
                .expect("found");
            assert_eq!(d["KeyMetadata"]["KeyId"], json!(id), "{name}");
        }
        let e = h
            .call("DescribeKey", json!({"KeyId": "alias/nope"}))
            .expect_err("no alias");
        assert_eq!(e.code, "NotFoundException");
        assert_eq!(
            e.message,
            "Alias arn:aws:kms:us-east-1:123456789012:alias/nope is not found."
        );
        let e = h
            .call("DescribeKey", json!({"KeyId": "garbage"}))
            .expect_err("bad id");
        assert_eq!(e.message, "Invalid keyId 'garbage'");
        let missing = "00000000-0000-4000-8000-000000000000";
        let e = h
            .call("DescribeKey", json!({"KeyId": missing}))
            .expect_err("no key");
        assert_eq!(
            e.message,
            format!("Key 'arn:aws:kms:us-east-1:123456789012:key/{missing}' does not exist")
        );
    }

    #[test]
    fn aliases_are_unique_prefixed_and_repointable() {
        let mut h = Harness::new();
        let (a, _) = h.key();
        let (b, _) = h.key();
        h.call(
            "CreateAlias",
            json!({"AliasName": "alias/x", "TargetKeyId": a}),
        )
        .expect("alias");
        let e = h
            .call(
                "CreateAlias",
                json!({"AliasName": "alias/x", "TargetKeyId": b}),
            )
            .expect_err("twice");
        assert_eq!((e.status, e.code.as_str()), (400, "AlreadyExistsException"));
        assert_eq!(
            h.call("CreateAlias", json!({"AliasName": "x", "TargetKeyId": a}))
                .expect_err("prefix")
                .code,
            "ValidationException"
        );
        assert_eq!(
            h.call(
                "CreateAlias",
                json!({"AliasName": "alias/aws/s3", "TargetKeyId": a})
            )
            .expect_err("reserved")
            .code,
            "NotAuthorizedException"
        );
        assert_eq!(
            h.call(
                "CreateAlias",
                json!({"AliasName": "alias/y", "TargetKeyId": "alias/x"})
            )
            .expect_err("alias of alias")
            .code,
            "ValidationException"
        );
        h.call(
            "UpdateAlias",
            json!({"AliasName": "alias/x", "TargetKeyId": b}),
        )
        .expect("repointed");
        let by_b = h.call("ListAliases", json!({"KeyId": b})).expect("listed");
        assert_eq!(by_b["Aliases"][0]["AliasName"], "alias/x");
        let by_a = h.call("ListAliases", json!({"KeyId": a})).expect("listed");
        assert_eq!(by_a["Aliases"], json!([]));
        assert_eq!(
            h.call(
                "UpdateAlias",
                json!({"AliasName": "alias/none", "TargetKeyId": b})
            )
            .expect_err("no alias")
            .code,
            "NotFoundException"
        );
        h.call("DeleteAlias", json!({"AliasName": "alias/x"}))
            .expect("deleted");
        assert_eq!(
            h.call("DeleteAlias", json!({"AliasName": "alias/x"}))
                .expect_err("gone")
                .code,
            "NotFoundException"
        );
    }

    #[test]
    fn deletion_is_scheduled_cancelled_to_disabled_and_happens_on_time() {
        let mut h = Harness::new();
        let (id, arn) = h.key();
        h.call(
            "CreateAlias",
            json!({"AliasName": "alias/doomed", "TargetKeyId": id}),
        )
        .expect("alias");
        for days in [6, 31] {
            assert_eq!(
                h.call(
                    "ScheduleKeyDeletion",
                    json!({"KeyId": id, "PendingWindowInDays": days})
                )
                .expect_err("out of range")
                .code,
                "ValidationException"
            );
        }
        let s = h
            .call("ScheduleKeyDeletion", json!({"KeyId": id}))
            .expect("scheduled");
        assert_eq!(s["KeyId"], json!(arn));
        assert_eq!(s["KeyState"], PENDING_DELETION);
        assert_eq!(s["PendingWindowInDays"], 30);
        let again = h
            .call(
                "ScheduleKeyDeletion",
                json!({"KeyId": id, "PendingWindowInDays": 7}),
            )
            .expect_err("already pending");
        assert_eq!(again.code, "KMSInvalidStateException");
        for op in [
            "EnableKeyRotation",
            "GetKeyRotationStatus",
            "EnableKey",
            "DisableKey",
        ] {
            assert_eq!(
                h.call(op, json!({"KeyId": id})).expect_err("pending").code,
                "KMSInvalidStateException",
                "{op}"
            );
        }
        let d = h
            .call("DescribeKey", json!({"KeyId": "alias/doomed"}))
            .expect("still described");
        assert!(d["KeyMetadata"]["DeletionDate"].is_f64());
        assert_eq!(d["KeyMetadata"]["Enabled"], false);
        let listed = h.call("ListAliases", json!({})).expect("listed");
        assert_eq!(listed["Aliases"][0]["AliasName"], "alias/doomed");
        let c = h
            .call("CancelKeyDeletion", json!({"KeyId": id}))
            .expect("cancelled");
        assert_eq!(c["KeyId"], json!(arn));
        let d = h
            .call("DescribeKey", json!({"KeyId": id}))
            .expect("described");
        assert_eq!(d["KeyMetadata"]["KeyState"], DISABLED);
        assert!(d["KeyMetadata"].get("DeletionDate").is_none());
        assert_eq!(
            h.call("CancelKeyDeletion", json!({"KeyId": id}))
                .expect_err("not pending")
                .code,
            "KMSInvalidStateException"
        );
        h.call("EnableKey", json!({"KeyId": id})).expect("enabled");
        h.call(
            "ScheduleKeyDeletion",
            json!({"KeyId": id, "PendingWindowInDays": 7}),
        )
        .expect("scheduled");
        h.now += Duration::days(7);
        assert_eq!(
            h.call("DescribeKey", json!({"KeyId": id}))
                .expect_err("deleted")
                .code,
            "NotFoundException"
        );
        assert_eq!(
            h.call("ListAliases", json!({})).expect("listed")["Aliases"],
            json!([])
        );
    }

    #[test]
    fn rotation_description_and_tags() {
        let mut h = Harness::new();
        let (id, arn) = h.key();
        let off = h
            .call("GetKeyRotationStatus", json!({"KeyId": id}))
            .expect("status");
        assert_eq!(off["KeyRotationEnabled"], false);
        h.call(
            "EnableKeyRotation",
            json!({"KeyId": id, "RotationPeriodInDays": 180}),
        )
        .expect("enabled");
        let on = h
            .call("GetKeyRotationStatus", json!({"KeyId": arn}))
            .expect("status");
        assert_eq!(on["KeyRotationEnabled"], true);
        assert_eq!(on["RotationPeriodInDays"], 180);
        h.call("DisableKeyRotation", json!({"KeyId": id}))
            .expect("disabled");
        h.call("DisableKey", json!({"KeyId": id}))
            .expect("disabled");
        assert_eq!(
            h.call("EnableKeyRotation", json!({"KeyId": id}))
                .expect_err("disabled")
                .code,
            "DisabledException"
        );
        h.call(
            "UpdateKeyDescription",
            json!({"KeyId": id, "Description": "new"}),
        )
        .expect("updated");
        h.call("TagResource", json!({"KeyId": id, "Tags": [{"TagKey": "a", "TagValue": "1"}, {"TagKey": "b", "TagValue": "2"}]}))
            .expect("tagged");
        h.call("UntagResource", json!({"KeyId": id, "TagKeys": ["a"]}))
            .expect("untagged");
        let tags = h
            .call("ListResourceTags", json!({"KeyId": id}))
            .expect("tags");
        assert_eq!(tags["Tags"], json!([{"TagKey": "b", "TagValue": "2"}]));
        assert_eq!(tags["Truncated"], false);
        let d = h
            .call("DescribeKey", json!({"KeyId": id}))
            .expect("described");
        assert_eq!(d["KeyMetadata"]["Description"], "new");
        assert_eq!(
            h.call(
                "TagResource",
                json!({"KeyId": id, "Tags": [{"TagKey": "aws:x", "TagValue": "1"}]})
            )
            .expect_err("reserved")
            .code,
            "TagException"
        );
    }

    #[test]
    fn listing_pages() {
        let mut h = Harness::new();
        for _ in 0..3 {
            h.key();
        }
        let first = h.call("ListKeys", json!({"Limit": 2})).expect("listed");
        assert_eq!(first["Keys"].as_array().map(Vec::len), Some(2));
        assert_eq!(first["Truncated"], true);
        let rest = h
            .call(
                "ListKeys",
                json!({"Limit": 2, "Marker": first["NextMarker"]}),
            )
            .expect("listed");
        assert_eq!(rest["Keys"].as_array().map(Vec::len), Some(1));
        assert_eq!(rest["Truncated"], false);
        assert!(h.call("ListKeys", json!({"Limit": 0})).is_err());
        assert_eq!(
            h.call("Encrypt", json!({})).expect_err("not served").code,
            "UnknownOperationException"
        );
    }
}
