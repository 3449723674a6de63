//! Renders plans: drift first, then one block per resource in graph order with its
//! symbol and field-level changes (unified diffs for long values), then a summary.
//! `--json` gets the same content as data (format 2, `schemas/plan-v2.schema.json`):
//! secrets and values not known until apply are `null` there, with Terraform's
//! `after_unknown` / `before_sensitive` / `after_sensitive` trees saying where.

use serde_json::{json, Value};
use similar::TextDiff;

use super::value::{created_lines, inline, is_sensitive, lines, mark, Marked, SENSITIVE};
use super::Style;
use crate::diff::changed_paths;
use crate::plan::{Action, Change, Plan};

const INDENT: &str = "      ";

/// `Warning: …` lines, then a blank line when there are any.
pub fn warnings(warnings: &[String], style: Style) -> String {
    let mut out = String::new();
    for w in warnings {
        out.push_str(&format!("{} {w}\n", style.paint("33", "Warning:")));
    }
    if !warnings.is_empty() {
        out.push('\n');
    }
    out
}

/// The human rendering of `plan`.
pub fn render(plan: &Plan, style: Style) -> String {
    let mut out = warnings(&plan.warnings, style);
    let drifted: Vec<&Change> = plan.drifted().collect();
    if !drifted.is_empty() {
        out.push_str("Changed outside terrain since the last apply:\n\n");
        for c in drifted {
            let Some(d) = &c.drift else { continue };
            match &d.live {
                None => out.push_str(&format!(
                    "  {} {} was deleted outside terrain\n",
                    style.paint("31", "-"),
                    c.address
                )),
                Some(live) => {
                    out.push_str(&format!(
                        "  {} {} changed outside terrain\n",
                        style.paint("33", "~"),
                        c.address
                    ));
                    out.push_str(&field_changes(
                        &d.recorded,
                        live,
                        &changed_paths(&d.recorded, live, &[]),
                        &[],
                        &c.sensitive_paths,
                        style,
                    ));
                }
            }
        }
        out.push('\n');
    }
    if !plan.has_changes() {
        out.push_str("No changes. Live infrastructure matches the stack.\n");
        return out;
    }
    out.push_str("terrain will perform these actions:\n\n");
    for m in &plan.moved {
        out.push_str(&format!(
            "  {} {} has moved to {}\n",
            style.paint("36", "#"),
            m.from,
            m.to
        ));
    }
    let cost_of = |c: &Change| {
        let address = c.address.to_string();
        plan.cost
            .as_ref()
            .and_then(|cost| cost.resources.iter().find(|r| r.address == address))
    };
    for c in plan.changes.iter().filter(|c| c.is_change()) {
        out.push_str(&change_block(c, style));
        if let Some(rc) = cost_of(c) {
            out.push_str(&super::cost::resource_lines(rc, style));
        }
    }
    if let Some(cost) = &plan.cost {
        out.push_str(&super::cost::summary(cost, style));
    }
    out.push_str(&format!("\n{}\n", summary_line(plan)));
    out
}

/// `Plan: 7 to add, 0 to change, 0 to replace, 0 to destroy.` (with `, N moved`).
pub fn summary_line(plan: &Plan) -> String {
    let s = plan.summary();
    let moved = match plan.moved.len() {
        0 => String::new(),
        n => format!(", {n} moved"),
    };
    format!(
        "Plan: {} to add, {} to change, {} to replace, {} to destroy{moved}.",
        s.add, s.change, s.replace, s.destroy
    )
}

fn symbol(c: &Change, style: Style) -> String {
    let (sym, colour) = match c.action {
        Action::Create => ("+", "32"),
        Action::Update => ("~", "33"),
        Action::Replace if c.create_before_destroy => ("+/-", "35"),
        Action::Replace => ("-/+", "35"),
        Action::Delete => ("-", "31"),
        Action::NoOp => ("-", "31"),
    };
    style.paint(colour, &format!("{sym:>3}"))
}

fn change_block(c: &Change, style: Style) -> String {
    let mut out = String::new();
    let what = match c.action {
        Action::Create => "will be created".to_string(),
        Action::Update => "will be updated in place".to_string(),
        Action::Replace => {
            let first = if c.create_before_destroy {
                ", the new one created first"
            } else {
                ""
            };
            let tainted = if c.tainted { "is tainted, so " } else { "" };
            if c.replace_because.is_empty() {
                format!("{tainted}must be replaced{first}")
            } else {
                format!(
                    "{tainted}must be replaced{first} ({} forces replacement)",
                    c.replace_because.join(", ")
                )
            }
        }
        Action::Delete => "will be destroyed".to_string(),
        Action::NoOp => format!("has {} old object(s) to destroy", c.deposed.len()),
    };
    out.push_str(&format!("{} {} {what}\n", symbol(c, style), c.address));
    for note in &c.notes {
        out.push_str(&format!("{INDENT}# {note}\n"));
    }
    let empty = Value::Object(Default::default());
    match c.action {
        Action::Create => {
            let mut after = c.after.clone().unwrap_or_else(|| empty.clone());
            if let Value::Object(m) = &mut after {
                for name in &c.computed {
                    m.entry(name.clone()).or_insert_with(|| {
                        Value::String(terrain_providers::protocol::UNKNOWN.to_string())
                    });
                }
            }
            out.push_str(&all_fields("+", &after, &c.sensitive_paths, style));
        }
        Action::Update | Action::Replace => {
            let before = c.before.as_ref().unwrap_or(&empty);
            let after = c.after.as_ref().unwrap_or(&empty);
            let changed = changed_paths(before, after, &[]);
            out.push_str(&field_changes(
                before,
                after,
                &changed,
                &c.replace_because,
                &c.sensitive_paths,
                style,
            ));
            if let Some(diff) = &c.live_diff {
                out.push_str(&format!("{INDENT}  # live objects:\n"));
                for line in diff.lines() {
                    let colour = match line.chars().next() {
                        Some('+') if !line.starts_with("+++") => "32",
                        Some('-') if !line.starts_with("---") => "31",
                        _ => "0",
                    };
                    out.push_str(&format!("{INDENT}    {}\n", style.paint(colour, line)));
                }
            }
        }
        Action::Delete => {
            if let Some(id) = &c.id {
                out.push_str(&format!("{INDENT}  id = {id}\n"));
            }
        }
        Action::NoOp => {}
    }
    for d in &c.deposed {
        out.push_str(&format!(
            "{INDENT}{} old object {} will be destroyed\n",
            style.paint("31", "-"),
            d.id
        ));
    }
    out
}

/// Every non-null top-level field, for creates.
fn all_fields(sym: &str, value: &Value, sensitive: &[String], style: Style) -> String {
    let Value::Object(map) = value else {
        return String::new();
    };
    let mut keys: Vec<&String> = map.keys().filter(|k| !map[*k].is_null()).collect();
    keys.sort();
    let width = keys.iter().map(|k| k.len()).max().unwrap_or(0);
    let mut out = String::new();
    for k in keys {
        let v = &map[k];
        let secret = is_sensitive(k, sensitive);
        match inline(v, secret) {
            Some(s) => out.push_str(&format!(
                "{INDENT}{} {k:<width$} = {s}\n",
                style.paint("32", sym)
            )),
            None => {
                out.push_str(&format!(
                    "{INDENT}{} {k:<width$} = <<-\n",
                    style.paint("32", sym)
                ));
                for line in created_lines(v).lines() {
                    out.push_str(&format!("{INDENT}      {line}\n"));
                }
            }
        }
    }
    out
}

fn at<'a>(v: &'a Value, path: &str) -> &'a Value {
    path.split('.')
        .try_fold(v, |v, k| v.get(k))
        .unwrap_or(&Value::Null)
}

/// One line per changed path (`~ a.b = old -> new`), a unified diff for long values.
fn field_changes(
    before: &Value,
    after: &Value,
    changed: &[String],
    forcing: &[String],
    sensitive: &[String],
    style: Style,
) -> String {
    let width = changed.iter().map(String::len).max().unwrap_or(0);
    let mut out = String::new();
    for p in changed {
        let b = at(before, p);
        let a = at(after, p);
        let secret = is_sensitive(p, sensitive);
        let force = if forcing.iter().any(|f| f == p) {
            style.paint("31", "  # forces replacement")
        } else {
            String::new()
        };
        let (sym, colour) = match (b.is_null(), a.is_null()) {
            (true, false) => ("+", "32"),
            (false, true) => ("-", "31"),
            _ => ("~", "33"),
        };
        let sym = style.paint(colour, sym);
        match (inline(b, secret), inline(a, secret)) {
            (Some(bs), Some(as_)) => {
                let text = match (b.is_null(), a.is_null()) {
                    (true, false) => as_,
                    (false, true) => format!("{bs} -> null"),
                    _ => format!("{bs} -> {as_}"),
                };
                out.push_str(&format!("{INDENT}{sym} {p:<width$} = {text}{force}\n"));
            }
            _ => {
                out.push_str(&format!("{INDENT}{sym} {p}:{force}\n"));
                out.push_str(&unified(&lines(b), &lines(a), style));
            }
        }
    }
    out
}

/// A unified diff of two texts, indented under the field.
fn unified(before: &str, after: &str, style: Style) -> String {
    let diff = TextDiff::from_lines(before, after);
    let mut out = String::new();
    for hunk in diff.unified_diff().context_radius(2).iter_hunks() {
        out.push_str(&format!("{INDENT}    {}\n", hunk.header()));
        for change in hunk.iter_changes() {
            let (sign, colour) = match change.tag() {
                similar::ChangeTag::Delete => ("-", "31"),
                similar::ChangeTag::Insert => ("+", "32"),
                similar::ChangeTag::Equal => (" ", "0"),
            };
            let line = change.value().trim_end_matches('\n');
            out.push_str(&format!(
                "{INDENT}    {}\n",
                style.paint(colour, &format!("{sign}{line}"))
            ));
        }
    }
    out
}

/// The format version of `plan --json` documents (not of saved plan files, which have
/// their own: [`crate::plan::PLAN_FORMAT_VERSION`]).
pub const JSON_FORMAT_VERSION: u32 = 2;

/// The values of a `--json` side (`before`, `after`, drift's `recorded`, `live`): a side
/// that is absent has no value and nothing marked.
fn side(v: Option<&Value>, sensitive: &[String]) -> Marked {
    v.map_or(
        Marked {
            value: Value::Null,
            unknown: Value::Bool(false),
            sensitive: Value::Bool(false),
        },
        |v| mark(v, sensitive),
    )
}

/// The machine-readable plan (`plan --json`, format [`JSON_FORMAT_VERSION`]): every
/// secret and every value not known until apply is `null`, with trees saying where they
/// were (see [`mark`]); no value in it is a marker text (`warnings` are messages for
/// people, worded as the human plan words them).
pub fn to_json(plan: &Plan) -> Value {
    let changes: Vec<Value> = plan
        .changes
        .iter()
        .map(|c| {
            let secrets = &c.sensitive_paths;
            let before = side(plan.before(c), secrets);
            let after = side(plan.after(c).as_deref(), secrets);
            // The provider's diff text has its secrets replaced by the marker text: the
            // text is then withheld, and said to be.
            let diff_sensitive = c
                .live_diff
                .as_deref()
                .is_some_and(|d| d.contains(SENSITIVE));
            json!({
                "address": c.address.to_string(),
                // Where the address comes from, for scripts: the module calls it sits
                // under and its instance key (a number for count, a string for
                // for_each).
                "module_address": (!c.address.module().is_empty()).then(|| {
                    c.address.module().iter().map(ToString::to_string).collect::<Vec<_>>().join(".")
                }),
                "index": c.address.key().map(|k| match k {
                    crate::addr::Key::Index(i) => json!(i),
                    crate::addr::Key::Name(n) => json!(n),
                }),
                "kind": c.kind,
                "action": c.action,
                "before": before.value,
                "after": after.value,
                "after_unknown": after.unknown,
                "before_sensitive": before.sensitive,
                "after_sensitive": after.sensitive,
                "replace_because": c.replace_because,
                "create_before_destroy": c.create_before_destroy,
                "dependencies": c.dependencies.iter().map(ToString::to_string).collect::<Vec<_>>(),
                "drift": c.drift.as_ref().map(|d| {
                    let recorded = mark(&d.recorded, secrets);
                    let live = side(d.live.as_ref(), secrets);
                    json!({
                        "recorded": recorded.value,
                        "recorded_sensitive": recorded.sensitive,
                        "live": live.value,
                        "live_sensitive": live.sensitive,
                    })
                }),
                "deposed": c.deposed.iter().map(|d| d.id.clone()).collect::<Vec<_>>(),
                "tainted": c.tainted,
                "live_diff": c.live_diff.as_ref().filter(|_| !diff_sensitive),
                "live_diff_sensitive": diff_sensitive,
                "cost": plan.cost.as_ref().and_then(|cost| {
                    let address = c.address.to_string();
                    cost.resources.iter().find(|r| r.address == address)
                }).map(super::cost::resource_json),
            })
        })
        .collect();
    json!({
        "format_version": JSON_FORMAT_VERSION,
        "terrain_version": plan.terrain_version,
        "stack": plan.stack,
        "destroy": plan.destroy,
        "changes": changes,
        "summary": plan.summary(),
        "moved": plan.moved,
        "has_changes": plan.has_changes(),
        "warnings": plan.warnings,
        "cost": plan.cost.as_ref().map(super::cost::totals_json),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::addr::Address;
    use crate::plan::Drift;
    use terrain_providers::protocol::UNKNOWN;

    fn plan(changes: Vec<Change>) -> Plan {
        Plan::of_changes("demo", changes)
    }

    fn update(before: Value, after: Value) -> Change {
        Change {
            id: Some("v1/Secret/default/creds".into()),
            before: Some(before),
            after: Some(after),
            sensitive_paths: vec!["data".into()],
            ..Change::of(Address::new("kubernetes_secret", "creds"), Action::Update)
        }
    }

    #[test]
    fn json_has_nulls_and_marks_never_marker_texts() {
        let mut c = update(
            json!({"name": "creds", "data": {"k": "old"}, "labels": {"a": "b"}}),
            json!({"name": "creds", "data": {"k": "new"}, "labels": {"a": format!("v-{UNKNOWN}")}}),
        );
        c.drift = Some(Drift {
            recorded: json!({"name": "creds", "data": {"k": "old"}}),
            live: Some(json!({"name": "creds", "data": {"k": "edited"}})),
        });
        c.live_diff = Some(format!("-  k: {SENSITIVE}\n+  k: {SENSITIVE}\n"));
        let doc = to_json(&plan(vec![c]));
        assert_eq!(doc["format_version"], 2);
        assert!(doc.get("markers").is_none());
        let c = &doc["changes"][0];
        assert_eq!(c["before"]["data"], Value::Null);
        assert_eq!(c["after"]["labels"]["a"], Value::Null);
        assert_eq!(c["after_unknown"], json!({"labels": {"a": true}}));
        assert_eq!(c["before_sensitive"], json!({"data": true}));
        assert_eq!(c["after_sensitive"], json!({"data": true}));
        assert_eq!(c["drift"]["recorded_sensitive"], json!({"data": true}));
        assert_eq!(c["drift"]["live"], json!({"name": "creds", "data": null}));
        assert_eq!(c["drift"]["live_sensitive"], json!({"data": true}));
        assert_eq!(
            c["live_diff"],
            Value::Null,
            "a diff quoting a secret is withheld"
        );
        assert_eq!(c["live_diff_sensitive"], true);
        let text = doc.to_string();
        for hidden in [
            "old",
            "new",
            "edited",
            SENSITIVE,
            "(known after apply)",
            "terrain:",
        ] {
            assert!(!text.contains(hidden), "{hidden} in {text}");
        }
    }

    #[test]
    fn a_delete_has_no_after_and_nothing_marked_after() {
        let mut c = update(json!({"name": "creds", "data": {"k": "v"}}), json!({}));
        c.action = Action::Delete;
        c.after = None;
        c.live_diff = Some("-  replicas: 1\n".into());
        let doc = to_json(&plan(vec![c]));
        let c = &doc["changes"][0];
        assert_eq!(c["after"], Value::Null);
        assert_eq!(
            (&c["after_unknown"], &c["after_sensitive"]),
            (&json!(false), &json!(false))
        );
        assert_eq!(c["before_sensitive"], json!({"data": true}));
        assert_eq!(
            c["live_diff"], "-  replicas: 1\n",
            "a diff without secrets stays"
        );
        assert_eq!(c["live_diff_sensitive"], false);
    }
}
