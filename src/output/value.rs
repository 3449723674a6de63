//! Renders values for plans and `state show`: secrets hidden, values not known until
//! apply shown as such, short values inline and long ones over several lines.

use serde_json::Value;
use terrain_providers::protocol::{is_unknown, UNKNOWN};

/// What a secret shows as.
pub const SENSITIVE: &str = "(sensitive value)";
/// What a value not known until apply shows as.
pub const KNOWN_AFTER_APPLY: &str = "(known after apply)";

/// Whether `path` is, or is inside, one of `sensitive`.
pub fn is_sensitive(path: &str, sensitive: &[String]) -> bool {
    sensitive.iter().any(|s| {
        s == path || path.starts_with(&format!("{s}.")) || s.starts_with(&format!("{path}."))
    })
}

/// `value` with the secrets at `sensitive` paths replaced by [`SENSITIVE`] and unknowns
/// by [`KNOWN_AFTER_APPLY`] (for `--json` and `state show`).
pub fn redact(value: &Value, sensitive: &[String], path: &str) -> Value {
    if !path.is_empty()
        && !value.is_null()
        && sensitive
            .iter()
            .any(|s| s == path || path.starts_with(&format!("{s}.")))
    {
        return Value::String(SENSITIVE.to_string());
    }
    match value {
        Value::String(s) if s.contains(UNKNOWN) => Value::String(KNOWN_AFTER_APPLY.to_string()),
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| {
                    let p = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    (k.clone(), redact(v, sensitive, &p))
                })
                .collect(),
        ),
        Value::Array(a) => Value::Array(
            a.iter()
                .enumerate()
                .map(|(i, v)| {
                    redact(
                        v,
                        sensitive,
                        &if path.is_empty() {
                            i.to_string()
                        } else {
                            format!("{path}.{i}")
                        },
                    )
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

/// A one-line rendering, or `None` when the value deserves several lines.
pub fn inline(value: &Value, sensitive: bool) -> Option<String> {
    if sensitive {
        return Some(SENSITIVE.to_string());
    }
    if is_unknown(value) {
        return Some(KNOWN_AFTER_APPLY.to_string());
    }
    let s = match value {
        Value::String(s) if s.contains('\n') => return None,
        other => other.to_string(),
    };
    (s.chars().count() <= 80).then_some(s)
}

/// A multi-line rendering: strings as their lines, anything else as pretty JSON; a
/// value not known yet as such, and nothing as no lines.
pub fn lines(value: &Value) -> String {
    if is_unknown(value) {
        return KNOWN_AFTER_APPLY.to_string();
    }
    match value {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => serde_json::to_string_pretty(other).unwrap_or_else(|_| other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn redacts_secrets_and_unknowns() {
        let v =
            json!({"user": "a", "password": "hunter2", "ip": UNKNOWN, "nested": {"token": "t"}});
        let r = redact(
            &v,
            &["password".into(), "nested.token".into(), "unset".into()],
            "",
        );
        assert_eq!(
            r,
            json!({"user": "a", "password": SENSITIVE, "ip": KNOWN_AFTER_APPLY, "nested": {"token": SENSITIVE}})
        );
        assert!(!r.to_string().contains("hunter2"));
        assert_eq!(
            redact(&json!({"unset": null}), &["unset".into()], ""),
            json!({"unset": null}),
            "nothing is not a secret"
        );
    }

    #[test]
    fn inline_or_not() {
        assert_eq!(inline(&json!("x"), false).as_deref(), Some("\"x\""));
        assert_eq!(inline(&json!("a\nb"), false), None);
        assert_eq!(inline(&json!("a\nb"), true).as_deref(), Some(SENSITIVE));
    }
}
