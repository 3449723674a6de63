//! `plan --json` format 2 and the other JSON outputs, through the CLI: the plans of the
//! four example stacks (on the sandbox) match `schemas/plan-v2.schema.json`; a plan
//! with secrets and values known only after apply has them as nulls, marked in the
//! `after_unknown` / `before_sensitive` / `after_sensitive` trees (and drift's
//! `recorded_sensitive` / `live_sensitive`); no string in any JSON output (`plan`,
//! `output`, `state show`, a cost line from a secret) is or holds a marker text; and a
//! saved plan keeps its own format and still applies.
//!
//! The schema is checked by a small validator of the draft 2020-12 keywords the schema
//! uses (below), which refuses any keyword it does not know: the `jsonschema` crate
//! turns on serde_json's `float_roundtrip` for the test builds, which would rebuild
//! every crate that depends on serde_json (kube, k8s-openapi, the providers…) a second
//! time, and test a binary whose JSON floats parse unlike the shipped one's.

use crate::common;

use std::path::Path;

use common::Sandbox as Work;
use serde_json::{json, Value};

use common::SCENARIO_STACKS as STACKS;

/// The happy fixture's sensitive variable's value.
const TOKEN: &str = "tok-5ecret-42";

/// What people read in place of values, which no JSON output may hold; and the engine's
/// own marker for a value not known yet.
const MARKER_TEXTS: [&str; 3] = [
    "(known after apply)",
    "(sensitive value)",
    "terrain:known-after-apply",
];

fn schema() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("schemas/plan-v2.schema.json");
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is JSON: {e}", path.display()))
}

#[track_caller]
fn json_of(run: &common::Run) -> Value {
    run.success();
    serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("not JSON ({e}):\n{}", run.stdout))
}

/// Every string of `v` (keys too) with its JSON path.
fn strings(v: &Value, at: &str, out: &mut Vec<(String, String)>) {
    match v {
        Value::String(s) => out.push((at.to_string(), s.clone())),
        Value::Array(a) => {
            for (i, v) in a.iter().enumerate() {
                strings(v, &format!("{at}/{i}"), out);
            }
        }
        Value::Object(m) => {
            for (k, v) in m {
                out.push((format!("{at} (key)"), k.clone()));
                strings(v, &format!("{at}/{k}"), out);
            }
        }
        _ => {}
    }
}

/// Panics naming every string of `doc` that is or holds a marker text.
#[track_caller]
fn assert_no_marker_text(what: &str, doc: &Value) {
    assert_no_marker_text_but_in(what, doc, &[]);
}

/// [`assert_no_marker_text`], except in the messages for people under the JSON paths
/// `prose` (a capacity warning words a machine type from a secret as people read it).
#[track_caller]
fn assert_no_marker_text_but_in(what: &str, doc: &Value, prose: &[&str]) {
    let mut all = Vec::new();
    strings(doc, "", &mut all);
    let found: Vec<String> = all
        .iter()
        .filter(|(at, _)| !prose.iter().any(|p| at.starts_with(p)))
        .filter(|(_, s)| MARKER_TEXTS.iter().any(|m| s.contains(m)))
        .map(|(at, s)| format!("{at}: {s:?}"))
        .collect();
    assert!(
        found.is_empty(),
        "{what} holds marker texts:\n{}",
        found.join("\n")
    );
}

/// Panics listing where `doc` does not match `schema`.
#[track_caller]
fn assert_valid(what: &str, schema: &Value, doc: &Value) {
    let mut errors = Vec::new();
    validate(schema, schema, doc, "", &mut errors);
    assert!(
        errors.is_empty(),
        "{what} does not match schemas/plan-v2.schema.json:\n{}",
        errors.join("\n")
    );
}

// ---------------------------------------------------------------------------------------
// A validator for the part of JSON Schema draft 2020-12 the plan schema uses.
// ---------------------------------------------------------------------------------------

/// The keywords [`validate`] applies, and those it skips as annotations.
const KEYWORDS: [&str; 15] = [
    "type",
    "const",
    "enum",
    "properties",
    "required",
    "additionalProperties",
    "minProperties",
    "items",
    "minItems",
    "maxItems",
    "minimum",
    "anyOf",
    "$ref",
    "$defs",
    "$schema",
];
const ANNOTATIONS: [&str; 2] = ["title", "description"];

fn type_matches(name: &str, v: &Value) -> bool {
    match name {
        "null" => v.is_null(),
        "boolean" => v.is_boolean(),
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "number" => v.is_number(),
        "integer" => v.as_f64().is_some_and(|f| f.fract() == 0.0),
        other => panic!("the schema names an unknown type {other:?}"),
    }
}

/// Appends to `errors` where `v` (at `at`) fails `schema`; `root` resolves `$ref`s.
fn validate(root: &Value, schema: &Value, v: &Value, at: &str, errors: &mut Vec<String>) {
    let s = match schema {
        Value::Bool(true) => return,
        Value::Bool(false) => {
            errors.push(format!("{at}: nothing is allowed here"));
            return;
        }
        Value::Object(s) => s,
        other => panic!("not a schema: {other}"),
    };
    for k in s.keys() {
        assert!(
            KEYWORDS.contains(&k.as_str()) || ANNOTATIONS.contains(&k.as_str()),
            "the schema uses `{k}`, which this validator does not know: add it"
        );
    }
    if let Some(r) = s.get("$ref").and_then(Value::as_str) {
        let name = r
            .strip_prefix("#/$defs/")
            .unwrap_or_else(|| panic!("only local $refs: {r}"));
        let target = &root["$defs"][name];
        assert!(!target.is_null(), "no $defs/{name}");
        validate(root, target, v, at, errors);
    }
    let mut here = Vec::new();
    match s.get("type") {
        Some(Value::String(t)) if !type_matches(t, v) => here.push(format!("{v} is not {t}")),
        Some(Value::Array(ts))
            if !ts
                .iter()
                .any(|t| type_matches(t.as_str().expect("a type name"), v)) =>
        {
            here.push(format!("{v} is none of {}", Value::Array(ts.clone())))
        }
        _ => {}
    }
    if let Some(c) = s.get("const") {
        if c != v {
            here.push(format!("{v} is not {c}"));
        }
    }
    if let Some(Value::Array(e)) = s.get("enum") {
        if !e.contains(v) {
            here.push(format!("{v} is none of {}", Value::Array(e.clone())));
        }
    }
    if let Some(min) = s.get("minimum").and_then(Value::as_f64) {
        if v.as_f64().is_some_and(|n| n < min) {
            here.push(format!("{v} is below {min}"));
        }
    }
    if let Value::Object(m) = v {
        if let Some(Value::Array(required)) = s.get("required") {
            for r in required.iter().filter_map(Value::as_str) {
                if !m.contains_key(r) {
                    here.push(format!("`{r}` is missing"));
                }
            }
        }
        if let Some(n) = s.get("minProperties").and_then(Value::as_u64) {
            if (m.len() as u64) < n {
                here.push(format!("fewer than {n} keys"));
            }
        }
        let props = s.get("properties").and_then(Value::as_object);
        for (k, item) in m {
            let at = format!("{at}/{k}");
            match props.and_then(|p| p.get(k)) {
                Some(p) => validate(root, p, item, &at, errors),
                None => {
                    if let Some(extra) = s.get("additionalProperties") {
                        validate(root, extra, item, &at, errors);
                    }
                }
            }
        }
    }
    if let Value::Array(a) = v {
        let len = a.len() as u64;
        if s.get("minItems")
            .and_then(Value::as_u64)
            .is_some_and(|n| len < n)
        {
            here.push("too few items".to_string());
        }
        if s.get("maxItems")
            .and_then(Value::as_u64)
            .is_some_and(|n| len > n)
        {
            here.push("too many items".to_string());
        }
        if let Some(items) = s.get("items") {
            for (i, item) in a.iter().enumerate() {
                validate(root, items, item, &format!("{at}/{i}"), errors);
            }
        }
    }
    if let Some(Value::Array(any)) = s.get("anyOf") {
        let matched = any.iter().any(|alt| {
            let mut e = Vec::new();
            validate(root, alt, v, at, &mut e);
            e.is_empty()
        });
        if !matched {
            here.push(format!("{v} matches none of anyOf"));
        }
    }
    errors.extend(here.into_iter().map(|why| format!("{at}: {why}")));
}

/// The validator rejects what the schema rules out (so a pass means something), and the
/// schema's marks trees are as strict as described.
#[test]
fn the_validator_rejects_documents_the_schema_rules_out() {
    let schema = schema();
    assert_eq!(
        schema["$schema"], "https://json-schema.org/draft/2020-12/schema",
        "draft 2020-12"
    );
    let sb = Work::with_fixture("happy");
    let good = json_of(&sb.run(&["plan", "-s", "stack.toml", "--json"]));
    assert_valid("the happy plan", &schema, &good);
    let invalid = |doc: &Value| {
        let mut errors = Vec::new();
        validate(&schema, &schema, doc, "", &mut errors);
        !errors.is_empty()
    };
    let with = |edit: &dyn Fn(&mut Value)| {
        let mut doc = good.clone();
        edit(&mut doc);
        doc
    };
    for (why, doc) in [
        ("format 1", with(&|d| d["format_version"] = json!(1))),
        (
            "the old markers key",
            with(&|d| d["markers"] = json!({"sensitive": "(sensitive value)"})),
        ),
        (
            "a change without after_unknown",
            with(&|d| {
                d["changes"][0]
                    .as_object_mut()
                    .map(|c| c.remove("after_unknown"));
            }),
        ),
        (
            "a false inside a marks object",
            with(&|d| d["changes"][0]["after_sensitive"] = json!({"path": false})),
        ),
        (
            "an empty marks object",
            with(&|d| d["changes"][0]["after_unknown"] = json!({})),
        ),
        (
            "an unknown action",
            with(&|d| d["changes"][0]["action"] = json!("create_then_delete")),
        ),
        (
            "a string total",
            with(&|d| d["summary"]["add"] = json!("5")),
        ),
    ] {
        assert!(invalid(&doc), "the schema let through {why}");
    }
    for (why, doc) in [
        (
            "a marks tree with an array",
            with(&|d| {
                d["changes"][0]["after_unknown"] = json!({"list": [false, true, {"k": true}]});
            }),
        ),
        (
            "the policies' verdict",
            with(&|d| {
                d["policy"] = json!({
                    "denies": [],
                    "warns": [{"policy": "terrain.p", "address": null, "message": "m"}],
                });
            }),
        ),
    ] {
        assert!(!invalid(&doc), "the schema refused {why}");
    }
}

/// Copies the example stacks and their shared modules into a work directory.
/// A work directory holding the stacks these tests use, with their shared modules.
fn with_stacks() -> Work {
    common::with_stacks(&[STACKS.as_slice(), &["modules"]].concat())
}

#[test]
fn the_plans_of_the_example_stacks_match_the_schema() {
    let schema = schema();
    let work = with_stacks();
    for s in STACKS {
        let plan =
            json_of(&work.run(&["plan", "-s", &format!("stacks/{s}"), "--sandbox", "--json"]));
        assert_valid(s, &schema, &plan);
        assert_no_marker_text(s, &plan);
        assert_eq!(plan["format_version"], 2);
        assert!(
            plan["changes"].as_array().is_some_and(|c| !c.is_empty()),
            "{s} plans something"
        );
    }
}

fn change<'a>(plan: &'a Value, address: &str) -> &'a Value {
    plan["changes"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["address"] == address))
        .unwrap_or_else(|| panic!("{address} in the plan:\n{plan}"))
}

/// The happy fixture: a sensitive variable flows into `local_file.secret`, and
/// `local_file.manifest` interpolates outputs known only after apply.
#[test]
fn secrets_and_unknowns_are_nulls_marked_in_parallel_trees() {
    let schema = schema();
    let sb = Work::with_fixture("happy");
    let s = ["-s", "stack.toml"];
    let run = |args: &[&str]| -> common::Run {
        let all: Vec<&str> = args.iter().chain(&s).copied().collect();
        sb.run(&all)
    };
    let checked = |what: &str, doc: Value| -> Value {
        assert_no_marker_text(what, &doc);
        assert!(
            !doc.to_string().contains(TOKEN),
            "{what} shows the secret: {doc}"
        );
        doc
    };

    // Before anything exists: creates.
    let plan = checked("the create plan", json_of(&run(&["plan", "--json"])));
    assert_valid("the create plan", &schema, &plan);
    assert_eq!(plan["format_version"], 2);
    assert!(plan.get("markers").is_none(), "{plan}");
    let secret = change(&plan, "local_file.secret");
    assert_eq!(secret["after"]["sensitive_content"], Value::Null);
    assert_eq!(secret["after"]["path"], "out/secret.txt");
    assert_eq!(
        secret["after_sensitive"],
        json!({"sensitive_content": true})
    );
    assert_eq!(secret["after_unknown"], json!(false));
    assert_eq!(secret["before"], Value::Null);
    assert_eq!(secret["before_sensitive"], json!(false));
    // `content` interpolates two outputs: the whole string is unknown.
    let manifest = change(&plan, "local_file.manifest");
    assert_eq!(manifest["after"]["content"], Value::Null);
    assert_eq!(manifest["after_unknown"], json!({"content": true}));
    assert_eq!(manifest["after_sensitive"], json!(false));
    let greeting = change(&plan, "local_file.greeting");
    assert_eq!(greeting["after"]["content"], "hello, world\n");
    assert_eq!(
        (&greeting["after_unknown"], &greeting["after_sensitive"]),
        (&json!(false), &json!(false)),
        "nothing marked is false"
    );

    run(&["apply", "--auto-approve"]).success();

    // The secret as it is now: before and after, both marked.
    let plan = checked(
        "a plan after apply",
        json_of(&run(&["plan", "--json", "--var", "greeting=hi"])),
    );
    assert_valid("a plan after apply", &schema, &plan);
    let secret = change(&plan, "local_file.secret");
    assert_eq!(secret["action"], "no_op");
    assert_eq!(secret["before"]["sensitive_content"], Value::Null);
    assert_eq!(
        secret["before_sensitive"],
        json!({"sensitive_content": true})
    );
    assert_eq!(
        secret["after_sensitive"],
        json!({"sensitive_content": true})
    );
    // An update whose new value is unknown: before known, after unknown.
    let manifest = change(&plan, "local_file.manifest");
    assert_ne!(manifest["action"], "no_op");
    assert!(manifest["before"]["content"].is_string(), "{manifest}");
    assert_eq!(manifest["after"]["content"], Value::Null);
    assert_eq!(manifest["after_unknown"]["content"], true);

    // Drift of a secret: recorded and live both hidden and marked.
    sb.write("out/secret.txt", "token=changed-by-hand\n");
    let plan = checked("a plan with drift", json_of(&run(&["plan", "--json"])));
    assert_valid("a plan with drift", &schema, &plan);
    assert!(!plan.to_string().contains("changed-by-hand"), "{plan}");
    let drift = &change(&plan, "local_file.secret")["drift"];
    assert_eq!(
        drift["recorded"]["sensitive_content"],
        Value::Null,
        "{drift}"
    );
    assert_eq!(
        drift["recorded_sensitive"],
        json!({"sensitive_content": true})
    );
    assert_eq!(drift["live"]["sensitive_content"], Value::Null, "{drift}");
    assert_eq!(drift["live_sensitive"], json!({"sensitive_content": true}));
    run(&["apply", "--auto-approve"]).success();

    // The other JSON outputs.
    let outputs = checked("output --json", json_of(&run(&["output", "--json"])));
    assert_eq!(outputs["token"], json!({"value": null, "sensitive": true}));
    let one = checked(
        "output token --json",
        json_of(&run(&["output", "token", "--json"])),
    );
    assert_eq!(one, Value::Null);
    let shown = checked(
        "state show",
        json_of(&run(&["state", "show", "local_file.secret"])),
    );
    assert_eq!(shown["spec"]["sensitive_content"], Value::Null);
    assert_eq!(shown["spec_sensitive"], json!({"sensitive_content": true}));
    assert_eq!(shown["outputs_sensitive"], json!(false));
    // People still read the marker texts.
    let human = run(&["output", "token"]);
    human.success();
    assert_eq!(human.stdout, "(sensitive value)\n");
}

/// A machine type from a sensitive variable: its cost lines name it `null`, listed in
/// the usage's `sensitive`, where people read `(sensitive value)`.
#[test]
fn a_cost_line_from_a_secret_is_null_and_named_sensitive() {
    let schema = schema();
    let work = with_stacks();
    common::gpu_machine_from_a_secret(&work);
    let args = ["plan", "-s", "stacks/gke-accelerators", "--sandbox"];
    let human = work.run(&args);
    human.success();
    assert!(
        human.stdout.contains("× (sensitive value)"),
        "{}",
        human.stdout
    );
    let plan = json_of(&work.run(&[&args[..], &["--json"]].concat()));
    assert_valid("the plan with a secret machine type", &schema, &plan);
    // The quota warning is a message for people (not a value): it says
    // `3–5 nodes × (sensitive value)` as the human plan does.
    assert_no_marker_text_but_in(
        "the plan with a secret machine type",
        &plan,
        &["/warnings/"],
    );
    assert!(!plan.to_string().contains("g2-standard-24"), "{plan}");
    let pool = change(&plan, "module.gpu.gke_node_pool.main");
    assert_eq!(pool["after"]["machine_type"], Value::Null);
    assert_eq!(pool["after_sensitive"]["machine_type"], true);
    let usage = &pool["cost"]["lines"][0]["usage"];
    assert_eq!(usage["item"], Value::Null, "{usage}");
    assert_eq!(usage["basis"], Value::Null, "{usage}");
    assert_eq!(usage["sensitive"], json!(["item", "basis"]), "{usage}");
    assert!(
        pool["cost"]["hourly_max"].as_f64().is_some_and(|m| m > 0.0),
        "priced all the same: {pool}"
    );
}

/// A saved plan is its own format (`PLAN_FORMAT_VERSION`), unchanged by `plan --json`'s
/// version 2, and applies, secrets and unknowns included.
#[test]
fn a_saved_plan_keeps_its_format_and_applies() {
    let sb = Work::with_fixture("happy");
    sb.run(&["plan", "-s", "stack.toml", "--out", "p.json"])
        .success();
    let saved = sb.json("p.json");
    assert_eq!(
        saved["format_version"],
        json!(terrain::plan::PLAN_FORMAT_VERSION),
        "a saved plan is not a plan --json document"
    );
    assert_eq!(saved["format_version"], 1);
    assert!(saved.get("refreshed").is_some() && saved.get("lineage").is_some());
    let run = sb.run(&["apply", "p.json"]);
    run.success();
    assert!(
        run.stdout
            .contains("Apply complete! Resources: 5 added, 0 changed, 0 replaced, 0 destroyed."),
        "{}",
        run.stdout
    );
    assert_eq!(sb.read("out/secret.txt"), format!("token={TOKEN}\n"));
    sb.run(&["plan", "-s", "stack.toml", "--detailed-exitcode"])
        .expect_code(0);
}
