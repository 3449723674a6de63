//! The `random_id` kind: random bytes drawn once at create and kept in state, reported
//! as hex, URL-safe base64 and decimal. There is no remote object: the id (the hex) is
//! the whole truth, so read reconstructs everything from it.

use std::collections::BTreeMap;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::schema::Fields;
use crate::{Ctx, Invalid, Kind, Live, ProviderError};

/// The largest `byte_length` accepted; `dec` is computed with a quadratic conversion,
/// which this bound keeps trivially cheap.
const MAX_BYTES: i64 = 64;

/// The kind `random_id`.
#[derive(Debug, Clone, Copy, Default)]
pub struct RandomId;

/// What a stack writes for a `random_id`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    /// How many random bytes to draw, 1 to 64.
    #[terrain(force_new)]
    pub byte_length: i64,
    /// Text put before each encoding of the id (not part of the id).
    #[terrain(force_new)]
    pub prefix: Option<String>,
    /// Arbitrary values; changing any of them draws a new id.
    #[terrain(force_new)]
    pub keepers: Option<BTreeMap<String, String>>,
}

/// The id in each encoding, each with the prefix prepended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Outputs {
    /// The bytes in lowercase hex, after the prefix.
    pub hex: String,
    /// The bytes in URL-safe base64 without padding, after the prefix.
    pub b64_url: String,
    /// The bytes as a big-endian unsigned decimal number, after the prefix.
    pub dec: String,
}

impl RandomId {
    fn live(bytes: &[u8], spec: Spec) -> Live<Self> {
        let prefix = spec.prefix.clone().unwrap_or_default();
        Live {
            id: hex::encode(bytes),
            outputs: Outputs {
                hex: format!("{prefix}{}", hex::encode(bytes)),
                b64_url: format!("{prefix}{}", base64_url(bytes)),
                dec: format!("{prefix}{}", decimal(bytes)),
            },
            spec,
        }
    }
}

#[async_trait]
impl Kind for RandomId {
    type Spec = Spec;
    type Outputs = Outputs;
    const KIND: &'static str = "random_id";
    const PROVIDER: &'static str = "local";

    fn validate(spec: &Spec, _config: &serde_json::Value) -> Vec<Invalid> {
        if (1..=MAX_BYTES).contains(&spec.byte_length) {
            Vec::new()
        } else {
            vec![Invalid::at(
                "byte_length",
                format!(
                    "must be between 1 and {MAX_BYTES}, got {}",
                    spec.byte_length
                ),
            )]
        }
    }

    async fn read(
        &self,
        _ctx: &Ctx,
        id: &str,
        prior: Option<&Spec>,
    ) -> Result<Option<Live<Self>>, ProviderError> {
        let bytes = match hex::decode(id) {
            Ok(bytes) if !bytes.is_empty() => bytes,
            _ => {
                return Err(ProviderError::Unsupported(format!(
                    "random_id: id {id:?} is not a non-empty hex string (import a random_id by its hex value, without the prefix)"
                )))
            }
        };
        let byte_length = i64::try_from(bytes.len()).unwrap_or(i64::MAX);
        // The length comes from the id rather than the prior: if they disagree the id is
        // the truth, and the resulting diff on a force_new field draws a correct one.
        let spec = match prior {
            Some(prior) => Spec {
                byte_length,
                ..prior.clone()
            },
            None => Spec {
                byte_length,
                prefix: None,
                keepers: None,
            },
        };
        Ok(Some(Self::live(&bytes, spec)))
    }

    async fn create(&self, _ctx: &Ctx, spec: &Spec) -> Result<Live<Self>, ProviderError> {
        let len = usize::try_from(spec.byte_length)
            .ok()
            .filter(|n| (1..=MAX_BYTES as usize).contains(n))
            .ok_or_else(|| {
                ProviderError::Unsupported(format!(
                    "random_id: byte_length must be between 1 and {MAX_BYTES}, got {}",
                    spec.byte_length
                ))
            })?;
        let mut bytes = vec![0u8; len];
        rand::fill(bytes.as_mut_slice());
        Ok(Self::live(&bytes, spec.clone()))
    }

    async fn update(
        &self,
        _ctx: &Ctx,
        id: &str,
        _prior: &Spec,
        spec: &Spec,
    ) -> Result<Live<Self>, ProviderError> {
        // Every field forces replacement, so an update only ever restates the same id.
        let bytes = hex::decode(id).map_err(|e| {
            ProviderError::Unsupported(format!("random_id: id {id:?} is not hex: {e}"))
        })?;
        Ok(Self::live(&bytes, spec.clone()))
    }

    async fn delete(
        &self,
        _ctx: &Ctx,
        _id: &str,
        _prior: Option<&Spec>,
    ) -> Result<(), ProviderError> {
        Ok(())
    }
}

const BASE64_URL: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// URL-safe base64 without padding (RFC 4648 §5), written here rather than pulled in
/// as a crate for one call.
fn base64_url(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let byte = |i: usize| u32::from(chunk.get(i).copied().unwrap_or(0));
        let group = (byte(0) << 16) | (byte(1) << 8) | byte(2);
        // n bytes carry 8n bits, which need n + 1 six-bit characters.
        for i in 0..=chunk.len() {
            let index = (group >> (18 - 6 * i)) & 0x3f;
            out.push(char::from(BASE64_URL[index as usize]));
        }
    }
    out
}

/// The bytes as a big-endian unsigned integer in decimal. Up to 64 bytes exceed every
/// native integer, so this multiplies a little-endian digit vector by 256 per byte.
fn decimal(bytes: &[u8]) -> String {
    let mut digits: Vec<u8> = Vec::new();
    for &b in bytes {
        let mut carry = u32::from(b);
        for d in digits.iter_mut() {
            let v = u32::from(*d) * 256 + carry;
            *d = (v % 10) as u8;
            carry = v / 10;
        }
        while carry > 0 {
            digits.push((carry % 10) as u8);
            carry /= 10;
        }
    }
    if digits.is_empty() {
        return "0".to_string();
    }
    digits.iter().rev().map(|d| char::from(b'0' + d)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::schema_mismatches;
    use serde_json::json;

    fn ctx() -> Ctx {
        Ctx::new("random_id.x", json!({}))
    }

    fn spec(byte_length: i64, prefix: Option<&str>) -> Spec {
        Spec {
            byte_length,
            prefix: prefix.map(str::to_string),
            keepers: None,
        }
    }

    #[test]
    fn schema_agrees_with_serde() {
        let full = Spec {
            byte_length: 8,
            prefix: Some("p-".into()),
            keepers: Some(BTreeMap::from([("image".to_string(), "v1".to_string())])),
        };
        let outputs = RandomId::live(&[1, 2], full.clone()).outputs;
        assert_eq!(
            schema_mismatches::<RandomId>(&full, &outputs),
            Vec::<String>::new()
        );
    }

    #[test]
    fn every_field_forces_a_new_id() {
        assert!(RandomId::schema().fields.iter().all(|f| f.force_new));
    }

    #[test]
    fn validate_bounds_byte_length() {
        for ok in [1, 8, 64] {
            assert!(
                RandomId::validate(&spec(ok, None), &serde_json::Value::Null).is_empty(),
                "{ok}"
            );
        }
        for bad in [-1, 0, 65] {
            let problems = RandomId::validate(&spec(bad, None), &serde_json::Value::Null);
            assert_eq!(problems.len(), 1, "{bad}");
            assert_eq!(problems[0].path, vec!["byte_length".to_string()]);
            assert!(
                problems[0].message.contains("between 1 and 64"),
                "{}",
                problems[0].message
            );
        }
    }

    #[test]
    fn base64_url_matches_rfc_4648_vectors() {
        for (input, expected) in [
            ("", ""),
            ("f", "Zg"),
            ("fo", "Zm8"),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg"),
            ("fooba", "Zm9vYmE"),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64_url(input.as_bytes()), expected, "{input:?}");
        }
        // The two characters that differ from standard base64 ('+' and '/').
        assert_eq!(base64_url(&[0xfb, 0xff]), "-_8");
    }

    #[test]
    fn decimal_matches_native_integers_and_big_values() {
        assert_eq!(decimal(&[]), "0");
        assert_eq!(decimal(&[0, 0]), "0");
        assert_eq!(decimal(&[0, 1]), "1");
        assert_eq!(decimal(&[1, 0]), "256");
        let n: u128 = 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210;
        assert_eq!(decimal(&n.to_be_bytes()), n.to_string());
        assert_eq!(decimal(&[0xff; 16]), u128::MAX.to_string());
        // 2^256 - 1.
        assert_eq!(
            decimal(&[0xff; 32]),
            "115792089237316195423570985008687907853269984665640564039457584007913129639935"
        );
        // 2^512.
        let mut big = vec![1u8];
        big.extend([0u8; 64]);
        assert_eq!(
            decimal(&big),
            "13407807929942597099574024998205846127479365820592393377723561443721764030073546976801874298166903427690031858186486050853753882811946569946433649006084096"
        );
    }

    #[tokio::test]
    async fn create_draws_fresh_bytes_and_reports_every_encoding() -> Result<(), ProviderError> {
        let a = RandomId.create(&ctx(), &spec(16, Some("job-"))).await?;
        let b = RandomId.create(&ctx(), &spec(16, Some("job-"))).await?;
        assert_ne!(a.id, b.id, "two creates draw different bytes");
        assert_eq!(a.id.len(), 32);
        let bytes = hex::decode(&a.id).expect("id is hex");
        assert_eq!(a.outputs.hex, format!("job-{}", a.id));
        assert_eq!(a.outputs.b64_url, format!("job-{}", base64_url(&bytes)));
        assert_eq!(a.outputs.dec, format!("job-{}", decimal(&bytes)));
        assert_eq!(a.spec, spec(16, Some("job-")));
        Ok(())
    }

    #[tokio::test]
    async fn read_reconstructs_from_id_and_prior() -> Result<(), ProviderError> {
        let prior = Spec {
            byte_length: 2,
            prefix: Some("p".into()),
            keepers: Some(BTreeMap::from([("k".to_string(), "v".to_string())])),
        };
        let live = RandomId
            .read(&ctx(), "0100", Some(&prior))
            .await?
            .expect("always exists");
        assert_eq!(live.id, "0100");
        assert_eq!(live.spec, prior);
        assert_eq!(
            live.outputs,
            Outputs {
                hex: "p0100".into(),
                b64_url: "pAQA".into(),
                dec: "p256".into()
            }
        );
        Ok(())
    }

    #[tokio::test]
    async fn import_takes_length_from_the_id_and_nothing_else() -> Result<(), ProviderError> {
        let live = RandomId
            .read(&ctx(), "deadbeef", None)
            .await?
            .expect("always exists");
        assert_eq!(live.spec, spec(4, None));
        assert_eq!(live.outputs.hex, "deadbeef");
        assert_eq!(live.outputs.dec, "3735928559");
        Ok(())
    }

    #[tokio::test]
    async fn read_of_a_bad_id_says_what_an_id_is() {
        for id in ["", "xyz", "abc"] {
            let err = RandomId.read(&ctx(), id, None).await.expect_err("not hex");
            assert!(err.to_string().contains("hex"), "{err}");
        }
    }

    #[tokio::test]
    async fn planned_id_is_unknown_and_delete_is_a_no_op() -> Result<(), ProviderError> {
        assert_eq!(
            RandomId::planned_id(&spec(8, None), &serde_json::Value::Null),
            None
        );
        RandomId.delete(&ctx(), "00", None).await
    }
}
