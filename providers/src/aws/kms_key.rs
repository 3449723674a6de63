//! The `kms_key` kind: a customer managed KMS key (symmetric, for encryption) with its
//! yearly rotation, one alias and its tags, all changed in place.
//!
//! KMS is reached by hand-signed JSON 1.1 calls (`signed::KMS`). KMS makes the key's id,
//! so nothing names a key before it exists: a create whose answer was lost is found by
//! the alias it was to get, else by listing the account's keys and their tags, and
//! adopted when a key not pending deletion carries this address's tags. An alias that
//! already names another key of this address is re-pointed, never duplicated.
//!
//! Keys are never deleted at once: destroy removes the key's aliases and schedules its
//! deletion after `deletion_window_days`, and says until when it can be cancelled. A key
//! pending deletion reads as gone.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::signed::{Signed, KMS};
use super::{check_tags, code_of, is_ours, tags_with_ours, user_tags};
use crate::schema::Fields;
use crate::{Ctx, Invalid, Kind, Live, ProviderError};

/// The kind `kms_key`.
#[derive(Debug, Clone, Copy, Default)]
pub struct KmsKey;

/// KMS's code for a key or alias that does not exist.
const NOT_FOUND: &str = "NotFoundException";
/// KMS's code for a call the key's state does not allow (a key pending deletion).
const INVALID_STATE: &str = "KMSInvalidStateException";
/// The prefix of every alias name, and the one reserved for AWS managed keys.
const ALIAS_PREFIX: &str = "alias/";
const RESERVED_PREFIX: &str = "alias/aws/";
/// The deletion windows KMS allows, in days.
const MIN_WINDOW: i64 = 7;
const MAX_WINDOW: i64 = 30;
/// Key states in which a key is on its way out: it reads as gone.
const LEAVING: &[&str] = &["PendingDeletion", "PendingReplicaDeletion"];

fn thirty() -> i64 {
    MAX_WINDOW
}

fn yes() -> bool {
    true
}

/// What a stack writes for a `kms_key`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    /// What the key is for, up to 8192 characters.
    #[serde(default)]
    pub description: String,
    /// Days between destroy and the key's deletion, 7 to 30; the deletion can be
    /// cancelled until then.
    #[serde(default = "thirty")]
    pub deletion_window_days: i64,
    /// Rotate the key material every year (old material keeps decrypting).
    #[serde(default = "yes")]
    pub rotation: bool,
    /// An alias naming the key (alias/ is added when missing); alias/aws/ is reserved
    /// for AWS.
    pub alias: Option<String>,
    /// Key tags.
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
}

/// What `kms_key` reports after apply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Outputs {
    /// arn:aws:kms:REGION:ACCOUNT:key/KEY_ID, what S3 encryption and IAM policies name.
    #[terrain(derived_from = [])]
    pub arn: String,
    /// The key's id, a UUID.
    #[terrain(derived_from = [])]
    pub key_id: String,
    /// The alias's ARN, when the key has an alias.
    #[terrain(derived_from = ["alias"])]
    pub alias_arn: Option<String>,
}

/// `alias` as KMS names it: with its `alias/` prefix.
pub fn alias_name(alias: &str) -> String {
    if alias.starts_with(ALIAS_PREFIX) {
        alias.to_string()
    } else {
        format!("{ALIAS_PREFIX}{alias}")
    }
}

/// Checks an alias against KMS's rules (after adding `alias/`).
pub fn check_alias(alias: &str) -> Result<(), String> {
    let name = alias_name(alias);
    let rest = &name[ALIAS_PREFIX.len()..];
    if rest.is_empty() {
        return Err("an alias needs a name after alias/".to_string());
    }
    if name.len() > 256 {
        return Err(format!(
            "{name:?} is {} characters; KMS allows 256",
            name.len()
        ));
    }
    if let Some(c) = rest
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '/' | '_' | '-')))
    {
        return Err(format!(
            "{c:?} is not allowed in a KMS alias; use letters, digits, /, _ and -"
        ));
    }
    if name.starts_with(RESERVED_PREFIX) {
        return Err(format!(
            "{name:?}: aliases under alias/aws/ are reserved for AWS managed keys; pick another name"
        ));
    }
    Ok(())
}

/// Tags as KMS takes them.
fn kms_tags(tags: &BTreeMap<String, String>) -> Value {
    Value::Array(
        tags.iter()
            .map(|(k, v)| json!({"TagKey": k, "TagValue": v}))
            .collect(),
    )
}

/// A key as DescribeKey answers it.
#[derive(Debug, Clone, PartialEq)]
struct Key {
    id: String,
    arn: String,
    description: String,
    state: String,
}

fn key_of(call: &str, answer: &Value) -> Result<Key, ProviderError> {
    let m = &answer["KeyMetadata"];
    let text = |k: &str| m[k].as_str().unwrap_or_default().to_string();
    if text("KeyId").is_empty() {
        return Err(crate::failure::malformed(
            call,
            crate::failure::Cloud::Aws,
            200,
            "the answer has no KeyMetadata.KeyId",
            None,
        ));
    }
    Ok(Key {
        id: text("KeyId"),
        arn: text("Arn"),
        description: text("Description"),
        state: text("KeyState"),
    })
}

/// An alias of a key.
#[derive(Debug, Clone, PartialEq)]
struct Alias {
    name: String,
    arn: String,
    target: Option<String>,
}

/// KMS for one provider table.
struct Kms {
    signed: Arc<Signed>,
}

impl Kms {
    async fn new(ctx: &Ctx) -> Result<Kms, ProviderError> {
        Ok(Kms {
            signed: Signed::for_run(ctx, "manage KMS keys", u32::MAX).await?,
        })
    }

    fn region(&self) -> &str {
        self.signed.region()
    }

    async fn call(&self, operation: &str, body: Value) -> Result<Value, ProviderError> {
        self.signed
            .json11(&KMS, self.region(), operation, &body)
            .await
    }

    /// The key `id` (an id, ARN or `alias/…`); `None` when there is none.
    async fn describe(&self, id: &str) -> Result<Option<Key>, ProviderError> {
        match self.call("DescribeKey", json!({"KeyId": id})).await {
            Ok(answer) => key_of("kms:DescribeKey", &answer).map(Some),
            Err(e) if code_of(&e) == NOT_FOUND => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Every page of a KMS list call: the entries under `list`.
    async fn list_all(
        &self,
        operation: &str,
        body: Value,
        list: &str,
    ) -> Result<Vec<Value>, ProviderError> {
        let mut out = Vec::new();
        let mut marker: Option<String> = None;
        // Bounded, so an endpoint that keeps answering with a marker cannot loop us.
        for _ in 0..1000 {
            let mut page = body.clone();
            if let Some(m) = &marker {
                page["Marker"] = json!(m);
            }
            let answer = self.call(operation, page).await?;
            if let Some(items) = answer[list].as_array() {
                out.extend(items.iter().cloned());
            }
            marker = answer["NextMarker"]
                .as_str()
                .filter(|_| answer["Truncated"].as_bool() == Some(true))
                .map(str::to_string);
            if marker.is_none() {
                break;
            }
        }
        Ok(out)
    }

    async fn tags(&self, id: &str) -> Result<BTreeMap<String, String>, ProviderError> {
        Ok(self
            .list_all("ListResourceTags", json!({"KeyId": id}), "Tags")
            .await?
            .iter()
            .map(|t| {
                (
                    t["TagKey"].as_str().unwrap_or_default().to_string(),
                    t["TagValue"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect())
    }

    async fn aliases(&self, id: &str) -> Result<Vec<Alias>, ProviderError> {
        Ok(self
            .list_all("ListAliases", json!({"KeyId": id}), "Aliases")
            .await?
            .iter()
            .map(|a| Alias {
                name: a["AliasName"].as_str().unwrap_or_default().to_string(),
                arn: a["AliasArn"].as_str().unwrap_or_default().to_string(),
                target: a["TargetKeyId"].as_str().map(str::to_string),
            })
            // Only the aliases of this key: an endpoint that ignores the filter must
            // not have the key report another's alias.
            .filter(|a| a.target.as_deref().is_none_or(|t| t == id))
            .collect())
    }

    async fn rotation(&self, id: &str) -> Result<bool, ProviderError> {
        let answer = self
            .call("GetKeyRotationStatus", json!({"KeyId": id}))
            .await?;
        Ok(answer["KeyRotationEnabled"].as_bool().unwrap_or(false))
    }

    async fn set_rotation(&self, id: &str, on: bool) -> Result<(), ProviderError> {
        let operation = if on {
            "EnableKeyRotation"
        } else {
            "DisableKeyRotation"
        };
        self.call(operation, json!({"KeyId": id})).await.map(drop)
    }

    /// Points alias `name` at key `id`: creates it, or re-points it when it names
    /// another key this address made; refuses an alias of a key terrain did not make.
    async fn point_alias(&self, ctx: &Ctx, name: &str, id: &str) -> Result<(), ProviderError> {
        let current = match self.describe(name).await? {
            None => {
                return self
                    .call("CreateAlias", json!({"AliasName": name, "TargetKeyId": id}))
                    .await
                    .map(drop)
            }
            Some(k) => k,
        };
        if current.id == id {
            return Ok(());
        }
        if !is_ours(&self.tags(&current.id).await?, &ctx.address) {
            return Err(ProviderError::api(
                "kms:CreateAlias",
                409,
                "AlreadyExistsException",
                format!(
                    "{name} already names key {}, which was not created by {}; remove the alias from that key or pick another alias",
                    current.id, ctx.address
                ),
            ));
        }
        ctx.progress(&format!("pointing {name} at key {id}"));
        self.call("UpdateAlias", json!({"AliasName": name, "TargetKeyId": id}))
            .await
            .map(drop)
    }

    async fn delete_alias(&self, name: &str) -> Result<(), ProviderError> {
        match self.call("DeleteAlias", json!({"AliasName": name})).await {
            Err(e) if code_of(&e) == NOT_FOUND => Ok(()),
            other => other.map(drop),
        }
    }

    /// A live key this address made (an earlier create whose answer was lost): the
    /// alias's key first, else the account's keys one by one.
    async fn find_ours(&self, ctx: &Ctx, spec: &Spec) -> Result<Option<Key>, ProviderError> {
        if let Some(alias) = &spec.alias {
            if let Some(key) = self.describe(&alias_name(alias)).await? {
                if !LEAVING.contains(&key.state.as_str())
                    && is_ours(&self.tags(&key.id).await?, &ctx.address)
                {
                    return Ok(Some(key));
                }
            }
        }
        for entry in self.list_all("ListKeys", json!({}), "Keys").await? {
            let Some(id) = entry["KeyId"].as_str() else {
                continue;
            };
            let tags = match self.tags(id).await {
                Ok(t) => t,
                // Keys of AWS services and of other accounts' grants may not be
                // readable; they are not this address's either.
                Err(e) if matches!(code_of(&e), "AccessDeniedException" | NOT_FOUND) => continue,
                Err(e) => return Err(e),
            };
            if !is_ours(&tags, &ctx.address) {
                continue;
            }
            if let Some(key) = self.describe(id).await? {
                if !LEAVING.contains(&key.state.as_str()) {
                    return Ok(Some(key));
                }
            }
        }
        Ok(None)
    }
}

/// Reads the whole key as a spec, or `None` when it is gone or pending deletion.
async fn read_live(
    kms: &Kms,
    id: &str,
    prior: Option<&Spec>,
) -> Result<Option<Live<KmsKey>>, ProviderError> {
    let Some(key) = kms.describe(id).await? else {
        return Ok(None);
    };
    if LEAVING.contains(&key.state.as_str()) {
        return Ok(None);
    }
    let (rotation, aliases, tags) = futures::join!(
        kms.rotation(&key.id),
        kms.aliases(&key.id),
        kms.tags(&key.id)
    );
    let (rotation, aliases, tags) = (rotation?, aliases?, tags?);
    let wanted = prior.and_then(|p| p.alias.as_deref());
    let alias = wanted
        .and_then(|w| aliases.iter().find(|a| a.name == alias_name(w)))
        .or_else(|| aliases.first());
    Ok(Some(Live {
        id: key.id.clone(),
        spec: Spec {
            description: key.description.clone(),
            // terrain's own setting, used at destroy: KMS keeps none before then.
            deletion_window_days: prior.map_or(MAX_WINDOW, |p| p.deletion_window_days),
            rotation,
            // In the stack's spelling when it is the alias the stack names.
            alias: alias.map(|a| match wanted {
                Some(w) if alias_name(w) == a.name => w.to_string(),
                _ => a.name.clone(),
            }),
            tags: user_tags(&tags),
        },
        outputs: Outputs {
            arn: key.arn,
            key_id: key.id,
            alias_arn: alias.map(|a| a.arn.clone()),
        },
    }))
}

/// Takes key `id` from `from` (its live spec) to `spec`; only what differs is sent.
async fn converge(
    ctx: &Ctx,
    kms: &Kms,
    id: &str,
    from: &Spec,
    spec: &Spec,
) -> Result<(), ProviderError> {
    if from.description != spec.description {
        kms.call(
            "UpdateKeyDescription",
            json!({"KeyId": id, "Description": spec.description}),
        )
        .await?;
    }
    if from.rotation != spec.rotation {
        kms.set_rotation(id, spec.rotation).await?;
    }
    let had = from.alias.as_deref().map(alias_name);
    let wants = spec.alias.as_deref().map(alias_name);
    if had != wants {
        // The new name first: the key is never without the alias a reader may use.
        if let Some(name) = &wants {
            kms.point_alias(ctx, name, id).await?;
        }
        if let Some(name) = &had {
            kms.delete_alias(name).await?;
        }
    }
    if from.tags != spec.tags {
        let ours = tags_with_ours(&spec.tags, &ctx.address);
        let changed: BTreeMap<String, String> = ours
            .iter()
            .filter(|(k, v)| from.tags.get(*k) != Some(*v))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if !changed.is_empty() {
            kms.call(
                "TagResource",
                json!({"KeyId": id, "Tags": kms_tags(&changed)}),
            )
            .await?;
        }
        let removed: Vec<&String> = from
            .tags
            .keys()
            .filter(|k| !ours.contains_key(*k))
            .collect();
        if !removed.is_empty() {
            kms.call("UntagResource", json!({"KeyId": id, "TagKeys": removed}))
                .await?;
        }
    }
    Ok(())
}

fn gone_error(call: &str, id: &str) -> ProviderError {
    ProviderError::api(
        call,
        400,
        NOT_FOUND,
        format!("key {id} is gone or pending deletion; plan again to make a new key"),
    )
}

/// The day a key scheduled for deletion at `epoch_secs` goes: `2026-12-01`.
fn day_of(epoch_secs: f64) -> String {
    let at = SystemTime::UNIX_EPOCH + Duration::from_secs_f64(epoch_secs.max(0.0));
    crate::local::time_sleep::rfc3339_utc(at)[..10].to_string()
}

/// What destroy reports once the key is scheduled for deletion.
pub fn scheduled_message(id: &str, day: &str) -> String {
    format!(
        "key {id} is scheduled for deletion on {day}; until then it can be restored with `aws kms cancel-key-deletion --key-id {id}`"
    )
}

#[async_trait]
impl Kind for KmsKey {
    type Spec = Spec;
    type Outputs = Outputs;
    const KIND: &'static str = "kms_key";
    const PROVIDER: &'static str = "aws";
    const WRITES: crate::protocol::Writes = crate::protocol::Writes::FromId;
    const BILLS: bool = true;

    fn validate(spec: &Spec, _config: &Value) -> Vec<Invalid> {
        let mut out = Vec::new();
        if spec.description.chars().count() > 8192 {
            out.push(Invalid::at(
                "description",
                "must be at most 8192 characters long",
            ));
        }
        if !(MIN_WINDOW..=MAX_WINDOW).contains(&spec.deletion_window_days) {
            out.push(Invalid::at(
                "deletion_window_days",
                format!(
                    "must be {MIN_WINDOW} to {MAX_WINDOW} days, got {}",
                    spec.deletion_window_days
                ),
            ));
        }
        if let Some(alias) = &spec.alias {
            if let Err(m) = check_alias(alias) {
                out.push(Invalid::at("alias", m));
            }
        }
        check_tags("KMS", &spec.tags, &mut out);
        out
    }

    /// A customer managed key's monthly fee, billed by the hour.
    fn usage(_spec: &Value, config: &Value, _peers: &[crate::Peer]) -> Vec<crate::Usage> {
        let region = crate::usage::known(&config["region"]).unwrap_or_default();
        vec![crate::Usage::fixed(
            "kms.key",
            "customer-managed",
            region,
            1.0,
            "customer managed key".to_string(),
        )]
    }

    async fn read(
        &self,
        ctx: &Ctx,
        id: &str,
        prior: Option<&Spec>,
    ) -> Result<Option<Live<Self>>, ProviderError> {
        read_live(&Kms::new(ctx).await?, id, prior).await
    }

    async fn create(&self, ctx: &Ctx, spec: &Spec) -> Result<Live<Self>, ProviderError> {
        let kms = Kms::new(ctx).await?;
        if let Some(key) = kms.find_ours(ctx, spec).await? {
            ctx.progress(&format!(
                "adopting key {}, which an earlier attempt created",
                key.id
            ));
            let live = read_live(&kms, &key.id, Some(spec))
                .await?
                .ok_or_else(|| gone_error("kms:DescribeKey", &key.id))?;
            converge(ctx, &kms, &key.id, &live.spec, spec).await?;
            return read_live(&kms, &key.id, Some(spec))
                .await?
                .ok_or_else(|| gone_error("kms:DescribeKey", &key.id));
        }
        let created = kms
            .call(
                "CreateKey",
                json!({
                    "Description": spec.description,
                    "KeyUsage": "ENCRYPT_DECRYPT",
                    "KeySpec": "SYMMETRIC_DEFAULT",
                    "Tags": kms_tags(&tags_with_ours(&spec.tags, &ctx.address)),
                }),
            )
            .await?;
        let key = key_of("kms:CreateKey", &created)?;
        if spec.rotation {
            kms.set_rotation(&key.id, true).await?;
        }
        let mut alias_arn = None;
        if let Some(alias) = &spec.alias {
            let name = alias_name(alias);
            kms.point_alias(ctx, &name, &key.id).await?;
            alias_arn = kms
                .aliases(&key.id)
                .await?
                .into_iter()
                .find(|a| a.name == name)
                .map(|a| a.arn);
        }
        Ok(Live {
            id: key.id.clone(),
            spec: spec.clone(),
            outputs: Outputs {
                arn: key.arn,
                key_id: key.id,
                alias_arn,
            },
        })
    }

    async fn update(
        &self,
        ctx: &Ctx,
        id: &str,
        prior: &Spec,
        spec: &Spec,
    ) -> Result<Live<Self>, ProviderError> {
        let kms = Kms::new(ctx).await?;
        // From the live key rather than `prior`: what changed outside terrain since the
        // last refresh is put right too.
        let live = read_live(&kms, id, Some(prior))
            .await?
            .ok_or_else(|| gone_error("kms:DescribeKey", id))?;
        converge(ctx, &kms, id, &live.spec, spec).await?;
        let mut outputs = live.outputs;
        if live.spec.alias.as_deref().map(alias_name) != spec.alias.as_deref().map(alias_name) {
            let name = spec.alias.as_deref().map(alias_name);
            outputs.alias_arn = match name {
                Some(name) => kms
                    .aliases(id)
                    .await?
                    .into_iter()
                    .find(|a| a.name == name)
                    .map(|a| a.arn),
                None => None,
            };
        }
        Ok(Live {
            id: id.to_string(),
            spec: spec.clone(),
            outputs,
        })
    }

    async fn delete(&self, ctx: &Ctx, id: &str, prior: Option<&Spec>) -> Result<(), ProviderError> {
        let kms = Kms::new(ctx).await?;
        let Some(key) = kms.describe(id).await? else {
            return Ok(());
        };
        if LEAVING.contains(&key.state.as_str()) {
            return Ok(());
        }
        // The aliases go first: one left on a key pending deletion still names it, and a
        // new key could not take it.
        for alias in kms.aliases(&key.id).await? {
            kms.delete_alias(&alias.name).await?;
        }
        let window = prior.map_or(MAX_WINDOW, |p| p.deletion_window_days);
        let answer = match kms
            .call(
                "ScheduleKeyDeletion",
                json!({"KeyId": key.id, "PendingWindowInDays": window}),
            )
            .await
        {
            Ok(a) => a,
            Err(e) if matches!(code_of(&e), NOT_FOUND | INVALID_STATE) => {
                // Gone, or scheduled meanwhile: either way it is on its way out.
                return match kms.describe(&key.id).await? {
                    Some(k) if !LEAVING.contains(&k.state.as_str()) => Err(e),
                    _ => Ok(()),
                };
            }
            Err(e) => return Err(e),
        };
        let day = answer["DeletionDate"]
            .as_f64()
            .map(day_of)
            .unwrap_or_else(|| format!("the end of its {window}-day window"));
        ctx.progress(&scheduled_message(&key.id, &day));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::schema_mismatches;

    fn spec() -> Spec {
        Spec {
            description: "training data".into(),
            deletion_window_days: 7,
            rotation: false,
            alias: Some("ml/data".into()),
            tags: BTreeMap::from([("team".to_string(), "ml".to_string())]),
        }
    }

    fn problems(s: &Spec) -> Vec<String> {
        KmsKey::validate(s, &Value::Null)
            .into_iter()
            .map(|p| p.to_string())
            .collect()
    }

    #[test]
    fn schema_matches_spec_and_outputs() {
        let outputs = Outputs {
            arn: "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
                .into(),
            key_id: "1234abcd-12ab-34cd-56ef-1234567890ab".into(),
            alias_arn: Some("arn:aws:kms:us-east-1:123456789012:alias/ml/data".into()),
        };
        assert_eq!(
            schema_mismatches::<KmsKey>(&spec(), &outputs),
            Vec::<String>::new()
        );
        let minimal: Spec = serde_json::from_value(KmsKey::schema().with_defaults(&json!({})))
            .expect("every field has a default");
        assert_eq!(minimal.deletion_window_days, 30);
        assert!(minimal.rotation);
        assert_eq!(problems(&minimal), Vec::<String>::new());
    }

    #[test]
    fn the_limits_fit_kmss_model() {
        let model = terrain_contracts::json("aws/botocore-1.44.5/kms/2014-11-01/service-2.json");
        let shape = |n: &str| model["shapes"][n].clone();
        assert_eq!(shape("AliasNameType")["max"], json!(256));
        assert_eq!(shape("DescriptionType")["max"], json!(8192));
        // The model allows 1 to 365 days; KMS itself takes 7 to 30 (its API reference).
        let window = shape("PendingWindowInDaysType");
        assert!(window["min"].as_i64() <= Some(MIN_WINDOW));
        assert!(window["max"].as_i64() >= Some(MAX_WINDOW));
    }

    #[test]
    fn deletion_windows_are_seven_to_thirty_days() {
        let mut s = spec();
        for ok in [7, 30] {
            s.deletion_window_days = ok;
            assert_eq!(problems(&s), Vec::<String>::new());
        }
        for bad in [0, 6, 31, 365] {
            s.deletion_window_days = bad;
            let p = problems(&s);
            assert!(
                matches!(p.as_slice(), [one] if one == &format!("deletion_window_days: must be 7 to 30 days, got {bad}")),
                "{p:?}"
            );
        }
    }

    #[test]
    fn aliases_get_their_prefix_and_aws_ones_are_reserved() {
        assert_eq!(alias_name("ml/data"), "alias/ml/data");
        assert_eq!(alias_name("alias/ml"), "alias/ml");
        for ok in ["ml", "alias/ml-data_1", "team/ml/key"] {
            assert_eq!(check_alias(ok), Ok(()), "{ok}");
        }
        for (bad, says) in [
            ("alias/aws/s3", "reserved for AWS"),
            ("aws/ebs", "reserved for AWS"),
            ("alias/", "needs a name"),
            ("ml data", "' ' is not allowed"),
            ("ml:data", "':' is not allowed"),
            (&"k".repeat(251) as &str, "KMS allows 256"),
        ] {
            let e = check_alias(bad).expect_err(bad);
            assert!(e.contains(says), "{bad}: {e}");
        }
        let mut s = spec();
        s.alias = Some("alias/aws/s3".into());
        assert!(matches!(problems(&s).as_slice(), [p] if p.starts_with("alias: ")));
    }

    #[test]
    fn tags_and_descriptions_keep_to_kmss_limits() {
        let mut s = spec();
        s.description = "x".repeat(8193);
        s.tags = (0..49)
            .map(|i| (format!("k{i}"), "v".to_string()))
            .collect();
        let p = problems(&s);
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(p[0].starts_with("description: "));
        assert!(
            p[1].starts_with("tags: at most 48 tags (KMS allows 50"),
            "{p:?}"
        );
    }

    #[test]
    fn a_key_bills_one_key_month_in_the_providers_region() {
        let usage = KmsKey::usage(&json!({}), &json!({"region": "eu-west-1"}), &[]);
        assert_eq!(usage.len(), 1);
        assert_eq!(usage[0].meter, "kms.key");
        assert_eq!(usage[0].item, "customer-managed");
        assert_eq!(usage[0].region, "eu-west-1");
        assert_eq!((usage[0].min, usage[0].max), (1.0, 1.0));
    }

    #[test]
    fn the_scheduled_deletion_says_when_and_how_to_cancel() {
        assert_eq!(day_of(1_798_761_600.0), "2027-01-01");
        let m = scheduled_message("1234abcd", "2027-01-01");
        assert!(m.contains("on 2027-01-01"), "{m}");
        assert!(
            m.contains("aws kms cancel-key-deletion --key-id 1234abcd"),
            "{m}"
        );
    }

    #[test]
    fn keys_read_from_kmss_answer() {
        let answer = json!({"KeyMetadata": {"KeyId": "k1", "Arn": "arn:aws:kms:us-east-1:1:key/k1", "Description": "d", "KeyState": "PendingDeletion"}});
        let key = key_of("kms:DescribeKey", &answer).expect("a key");
        assert_eq!(key.state, "PendingDeletion");
        assert!(LEAVING.contains(&key.state.as_str()));
        assert!(key_of("kms:DescribeKey", &json!({})).is_err());
    }
}
