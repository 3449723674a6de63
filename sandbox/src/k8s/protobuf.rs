//! Kubernetes' protobuf encoding of request bodies (`application/vnd.kubernetes.protobuf`),
//! for the kinds `kubectl create` sends that way: ConfigMap, Secret, Namespace and
//! ServiceAccount. A body is the magic `k8s\0` and a `runtime.Unknown` (the type's
//! apiVersion and kind, and the object's bytes), decoded here into the JSON the
//! handlers take. Field numbers are those of the API's `generated.proto`.

use base64::Engine as _;
use serde_json::{json, Map, Value};

/// The prefix of every protobuf-encoded object.
const MAGIC: &[u8] = b"k8s\0";

/// One field as the wire format carries it.
enum Wire<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    /// Fixed-width values: no field this module reads has one.
    Fixed,
}

/// The fields of one message, in order.
fn fields(mut buf: &[u8]) -> Result<Vec<(u64, Wire<'_>)>, String> {
    let mut out = Vec::new();
    while !buf.is_empty() {
        let key = varint(&mut buf)?;
        let (number, wire) = (key >> 3, key & 7);
        let value = match wire {
            0 => Wire::Varint(varint(&mut buf)?),
            2 => {
                let len = usize::try_from(varint(&mut buf)?).map_err(|_| "length overflows")?;
                if len > buf.len() {
                    return Err(format!("field {number} runs past the end of its message"));
                }
                let (bytes, rest) = buf.split_at(len);
                buf = rest;
                Wire::Bytes(bytes)
            }
            1 | 5 => {
                let width = if wire == 1 { 8 } else { 4 };
                if width > buf.len() {
                    return Err(format!("field {number} runs past the end of its message"));
                }
                buf = &buf[width..];
                Wire::Fixed
            }
            other => {
                return Err(format!(
                    "field {number} has wire type {other}, which is not supported"
                ))
            }
        };
        out.push((number, value));
    }
    Ok(out)
}

fn varint(buf: &mut &[u8]) -> Result<u64, String> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = buf.split_first().ok_or("a varint runs past the end")?;
        *buf = rest;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err("a varint is longer than 10 bytes".into())
}

fn text(bytes: &[u8]) -> Result<String, String> {
    String::from_utf8(bytes.to_vec()).map_err(|_| "a string field is not UTF-8".to_string())
}

/// A `map<string, string>` entry, or with `binary` a `map<string, bytes>` one (its value
/// base64, as JSON has it).
fn entry(bytes: &[u8], binary: bool) -> Result<(String, Value), String> {
    let (mut key, mut value) = (String::new(), Value::String(String::new()));
    for (n, w) in fields(bytes)? {
        match (n, w) {
            (1, Wire::Bytes(b)) => key = text(b)?,
            (2, Wire::Bytes(b)) if binary => {
                value = json!(base64::engine::general_purpose::STANDARD.encode(b));
            }
            (2, Wire::Bytes(b)) => value = json!(text(b)?),
            _ => {}
        }
    }
    Ok((key, value))
}

fn insert(object: &mut Map<String, Value>, field: &str, (k, v): (String, Value)) {
    let map = object.entry(field).or_insert_with(|| json!({}));
    if let Some(m) = map.as_object_mut() {
        m.insert(k, v);
    }
}

/// `ObjectMeta`: what a client sets (the rest is the server's).
fn meta(bytes: &[u8]) -> Result<Value, String> {
    let mut m = Map::new();
    for (n, w) in fields(bytes)? {
        match (n, w) {
            (1, Wire::Bytes(b)) => {
                m.insert("name".into(), json!(text(b)?));
            }
            (2, Wire::Bytes(b)) => {
                m.insert("generateName".into(), json!(text(b)?));
            }
            (3, Wire::Bytes(b)) => {
                m.insert("namespace".into(), json!(text(b)?));
            }
            (11, Wire::Bytes(b)) => insert(&mut m, "labels", entry(b, false)?),
            (12, Wire::Bytes(b)) => insert(&mut m, "annotations", entry(b, false)?),
            (14, Wire::Bytes(b)) => {
                let list = m.entry("finalizers").or_insert_with(|| json!([]));
                if let Some(a) = list.as_array_mut() {
                    a.push(json!(text(b)?));
                }
            }
            _ => {}
        }
    }
    Ok(Value::Object(m))
}

/// The object of kind `kind` in `bytes`, as JSON (without apiVersion and kind).
fn object(kind: &str, bytes: &[u8]) -> Result<Map<String, Value>, String> {
    let mut o = Map::new();
    for (n, w) in fields(bytes)? {
        match (kind, n, w) {
            (_, 1, Wire::Bytes(b)) => {
                o.insert("metadata".into(), meta(b)?);
            }
            ("ConfigMap", 2, Wire::Bytes(b)) => insert(&mut o, "data", entry(b, false)?),
            ("ConfigMap", 3, Wire::Bytes(b)) => insert(&mut o, "binaryData", entry(b, true)?),
            ("ConfigMap", 4, Wire::Varint(v)) | ("Secret", 5, Wire::Varint(v)) => {
                o.insert("immutable".into(), json!(v != 0));
            }
            ("Secret", 2, Wire::Bytes(b)) => insert(&mut o, "data", entry(b, true)?),
            ("Secret", 3, Wire::Bytes(b)) => {
                o.insert("type".into(), json!(text(b)?));
            }
            ("Secret", 4, Wire::Bytes(b)) => insert(&mut o, "stringData", entry(b, false)?),
            ("Namespace", 2, Wire::Bytes(b)) => {
                let mut finalizers = Vec::new();
                for (n, w) in fields(b)? {
                    if let (1, Wire::Bytes(f)) = (n, w) {
                        finalizers.push(json!(text(f)?));
                    }
                }
                o.insert("spec".into(), json!({"finalizers": finalizers}));
            }
            ("ServiceAccount", 3, Wire::Bytes(b)) => {
                let mut name = String::new();
                for (n, w) in fields(b)? {
                    if let (1, Wire::Bytes(f)) = (n, w) {
                        name = text(f)?;
                    }
                }
                let list = o.entry("imagePullSecrets").or_insert_with(|| json!([]));
                if let Some(a) = list.as_array_mut() {
                    a.push(json!({ "name": name }));
                }
            }
            ("ServiceAccount", 4, Wire::Varint(v)) => {
                o.insert("automountServiceAccountToken".into(), json!(v != 0));
            }
            _ => {}
        }
    }
    Ok(o)
}

/// Whether `body` is protobuf-encoded.
pub(crate) fn is_protobuf(body: &[u8]) -> bool {
    body.starts_with(MAGIC)
}

/// The JSON of a protobuf-encoded body. A kind this module does not read is refused
/// with what it reads.
pub(crate) fn decode(body: &[u8]) -> Result<Value, String> {
    let unknown = body.strip_prefix(MAGIC).ok_or("no k8s protobuf prefix")?;
    let (mut api_version, mut kind, mut raw) = (String::new(), String::new(), &[][..]);
    for (n, w) in fields(unknown)? {
        match (n, w) {
            (1, Wire::Bytes(type_meta)) => {
                for (n, w) in fields(type_meta)? {
                    match (n, w) {
                        (1, Wire::Bytes(b)) => api_version = text(b)?,
                        (2, Wire::Bytes(b)) => kind = text(b)?,
                        _ => {}
                    }
                }
            }
            (2, Wire::Bytes(b)) => raw = b,
            _ => {}
        }
    }
    if !matches!(
        kind.as_str(),
        "ConfigMap" | "Secret" | "Namespace" | "ServiceAccount"
    ) {
        return Err(format!(
            "this API server reads protobuf bodies of ConfigMap, Secret, Namespace and ServiceAccount only, not {kind:?}; send JSON"
        ));
    }
    let mut o = object(&kind, raw)?;
    o.insert("apiVersion".into(), json!(api_version));
    o.insert("kind".into(), json!(kind));
    Ok(Value::Object(o))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Appends field `n` holding `bytes` (wire type 2).
    fn bytes(out: &mut Vec<u8>, n: u64, bytes: &[u8]) {
        put(out, (n << 3) | 2);
        put(out, bytes.len() as u64);
        out.extend_from_slice(bytes);
    }

    fn put(out: &mut Vec<u8>, mut v: u64) {
        loop {
            let byte = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }

    fn map_entry(k: &str, v: &[u8]) -> Vec<u8> {
        let mut e = Vec::new();
        bytes(&mut e, 1, k.as_bytes());
        bytes(&mut e, 2, v);
        e
    }

    fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
        let mut type_meta = Vec::new();
        bytes(&mut type_meta, 1, api_version.as_bytes());
        bytes(&mut type_meta, 2, kind.as_bytes());
        let mut unknown = Vec::new();
        bytes(&mut unknown, 1, &type_meta);
        bytes(&mut unknown, 2, raw);
        bytes(&mut unknown, 3, b"");
        bytes(&mut unknown, 4, b"");
        let mut out = MAGIC.to_vec();
        out.extend(unknown);
        out
    }

    #[test]
    fn a_configmap_as_kubectl_create_sends_it() {
        let mut meta = Vec::new();
        bytes(&mut meta, 1, b"stack");
        bytes(&mut meta, 3, b"default");
        bytes(&mut meta, 11, &map_entry("team", b"ml"));
        let mut cm = Vec::new();
        bytes(&mut cm, 1, &meta);
        bytes(
            &mut cm,
            2,
            &map_entry("stack.toml", b"[stack]\nname = \"data\"\n"),
        );
        bytes(&mut cm, 3, &map_entry("blob", &[0, 1, 2]));
        cm.extend([(4 << 3), 1]);
        let body = envelope("v1", "ConfigMap", &cm);
        assert!(is_protobuf(&body));
        assert_eq!(
            decode(&body).expect("decodes"),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "immutable": true,
                   "metadata": {"name": "stack", "namespace": "default", "labels": {"team": "ml"}},
                   "data": {"stack.toml": "[stack]\nname = \"data\"\n"},
                   "binaryData": {"blob": "AAEC"}})
        );
    }

    #[test]
    fn a_secrets_data_is_base64_and_other_kinds_are_refused() {
        let mut meta = Vec::new();
        bytes(&mut meta, 1, b"creds");
        let mut s = Vec::new();
        bytes(&mut s, 1, &meta);
        bytes(&mut s, 2, &map_entry("token", b"t0k"));
        bytes(&mut s, 3, b"Opaque");
        let v = decode(&envelope("v1", "Secret", &s)).expect("decodes");
        assert_eq!(v["data"], json!({"token": "dDBr"}));
        assert_eq!(v["type"], "Opaque");
        let err = decode(&envelope("apps/v1", "Deployment", &s)).expect_err("not read");
        assert!(err.contains("not \"Deployment\"; send JSON"), "{err}");
        let cut = &envelope("v1", "Secret", &s)[..20];
        assert!(decode(cut).is_err());
    }
}
