//! `terrain render ADDR`: the plain objects a resource is made of (Kubernetes manifests),
//! as YAML documents (or JSON), with values from the last apply; values not known yet
//! show as `(known after apply)` in YAML and are `null` in JSON. Pipe it to
//! `kubectl apply --dry-run=server -f -` or a manifest validator. Secrets' values are
//! never printed: `(sensitive value)` in YAML, `null` in JSON.

use anyhow::Context;
use clap::Args;
use serde_json::Value;

use super::{common, Exit, StackArgs};
use crate::addr::Address;
use crate::engine::Quiet;
use crate::output;
use crate::output::value::{KNOWN_AFTER_APPLY, SENSITIVE};

#[derive(Args, Debug)]
pub struct RenderArgs {
    /// The resource (`kind.name`).
    address: Address,
    #[command(flatten)]
    stack: StackArgs,
    /// Prints a JSON list instead of YAML documents.
    #[arg(long)]
    json: bool,
}

/// Replaces the unknown marker with the text plans show (YAML), or a string holding it
/// with `null` (JSON, which never holds a marker text a script could take for a value).
fn mark_unknown(v: Value, json: bool) -> Value {
    match v {
        Value::String(s) if s.contains(terrain_providers::protocol::UNKNOWN) => {
            if json {
                Value::Null
            } else {
                Value::String(s.replace(terrain_providers::protocol::UNKNOWN, KNOWN_AFTER_APPLY))
            }
        }
        Value::Array(items) => {
            Value::Array(items.into_iter().map(|v| mark_unknown(v, json)).collect())
        }
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (k, mark_unknown(v, json)))
                .collect(),
        ),
        other => other,
    }
}

/// Hides the values of Secrets: rendered output ends up in terminals and CI logs
/// (`(sensitive value)` in YAML, `null` in JSON).
fn redact_secrets(mut v: Value, json: bool) -> Value {
    if v["kind"] == "Secret" {
        for field in ["data", "stringData"] {
            if let Some(map) = v.get_mut(field).and_then(Value::as_object_mut) {
                for value in map.values_mut() {
                    *value = if json {
                        Value::Null
                    } else {
                        Value::String(SENSITIVE.to_string())
                    };
                }
            }
        }
    }
    v
}

/// YAML documents separated by `---`.
pub fn to_yaml(objects: &[Value]) -> anyhow::Result<String> {
    let mut out = String::new();
    for o in objects {
        out.push_str("---\n");
        out.push_str(&serde_yaml_ng::to_string(o).context("encode YAML")?);
    }
    Ok(out)
}

pub async fn run(args: RenderArgs) -> anyhow::Result<Exit> {
    let registry = common::registry();
    let stack = common::load_stack(&args.stack, &registry)?;
    let engine = common::engine(
        &args.stack,
        "terrain render",
        stack,
        registry,
        1,
        std::sync::Arc::new(Quiet),
    )
    .await?;
    let backend = engine.backend.clone();
    let state = backend.load().await?.unwrap_or_default();
    let objects: Vec<Value> = engine
        .render(&args.address, &state)?
        .into_iter()
        .map(|o| mark_unknown(o, args.json))
        .map(|o| redact_secrets(o, args.json))
        .collect();
    let text = if args.json {
        format!(
            "{}\n",
            serde_json::to_string_pretty(&objects).context("encode JSON")?
        )
    } else {
        to_yaml(&objects)?
    };
    output::print(&text);
    Ok(Exit::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use terrain_providers::protocol::UNKNOWN;

    #[test]
    fn yaml_shows_marker_texts_where_json_has_nulls() {
        let secret = json!({
            "kind": "Secret",
            "metadata": {"name": format!("run-{UNKNOWN}")},
            "data": {"token": "dG9r"},
        });
        let yaml = redact_secrets(mark_unknown(secret.clone(), false), false);
        assert_eq!(yaml["metadata"]["name"], format!("run-{KNOWN_AFTER_APPLY}"));
        assert_eq!(yaml["data"]["token"], SENSITIVE);
        let json = redact_secrets(mark_unknown(secret, true), true);
        assert_eq!(
            json,
            json!({"kind": "Secret", "metadata": {"name": null}, "data": {"token": null}})
        );
    }
}
