//! Hashes that stay the same across builds, platforms and sandbox restarts: FNV-1a for
//! etags, fingerprints and the stable names derived from them (node names, event names,
//! pod-template-hash labels, OpenAPI document hashes).

use serde_json::Value;

const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const PRIME: u64 = 0x0100_0000_01b3;

/// FNV-1a of bytes, for fingerprints and etags that must change exactly when content changes.
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(OFFSET, |h, b| (h ^ u64::from(*b)).wrapping_mul(PRIME))
}

/// FNV-1a of several parts with a separator byte between them, so `["ab", "c"]` and
/// `["a", "bc"]` hash apart.
pub(crate) fn fnv64(parts: &[&str]) -> u64 {
    let mut h = OFFSET;
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            h ^= 0xff;
            h = h.wrapping_mul(PRIME);
        }
        for b in part.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(PRIME);
        }
    }
    h
}

/// A JSON rendering with object keys sorted, so equal objects hash equally whatever order
/// their fields arrived in.
pub(crate) fn canonical(v: &Value) -> String {
    fn sorted(v: &Value) -> Value {
        match v {
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                Value::Object(
                    keys.into_iter()
                        .map(|k| (k.clone(), sorted(&m[k.as_str()])))
                        .collect(),
                )
            }
            Value::Array(a) => Value::Array(a.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    sorted(v).to_string()
}

/// A content fingerprint of a JSON value with object keys sorted, so equal maps always
/// fingerprint equally whatever their insertion order.
pub(crate) fn fingerprint(value: &Value) -> String {
    format!("{:08x}", fnv1a(canonical(value).as_bytes()) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fnv1a_matches_the_published_test_vectors() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn parts_hash_apart_where_their_concatenation_would_not() {
        assert_ne!(fnv64(&["ab", "c"]), fnv64(&["a", "bc"]));
        assert_eq!(fnv64(&["abc"]), fnv1a(b"abc"));
    }

    #[test]
    fn fingerprints_ignore_key_order() {
        let a = json!({"x": 1, "y": {"b": 2, "a": [1, 2]}});
        let b: Value =
            serde_json::from_str(r#"{"y": {"a": [1, 2], "b": 2}, "x": 1}"#).expect("JSON");
        assert_eq!(fingerprint(&a), fingerprint(&b));
        assert_ne!(fingerprint(&a), fingerprint(&json!({"x": 2})));
    }
}
