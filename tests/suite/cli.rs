//! End-to-end tests of the `terrain` binary: every kind of bad stack is refused with its
//! exact diagnostics and changes nothing; the happy path (validate, plan, apply, update,
//! replace, destroy) prints what `tests/expected/` says and never shows a secret; the
//! state lock, saved plans, prevent_destroy, targets, the state subcommands, outputs,
//! import, graph and drift behave as documented.
//!
//! Each test works in its own temporary directory with a copy of a fixture stack from
//! `tests/fixtures/`; `UPDATE_EXPECTED=1` rewrites the expected files (review them).

use crate::common;

use std::time::{Duration, Instant};

use common::{hostname, Run, Sandbox, TEST_USER};
use serde_json::Value;

/// The sensitive variable's value in the `happy` fixture.
const TOKEN: &str = "tok-5ecret-42";

// ---------------------------------------------------------------------------------------
// Bad input: every kind of mistake, its exact diagnostics, and nothing created.
// ---------------------------------------------------------------------------------------

/// Runs `apply --auto-approve` and `validate` on a bad stack (`stack` is the `-s`
/// argument, `extra` more arguments): both must exit 1, print nothing on stdout and the
/// same diagnostics on stderr, which must equal `tests/expected/bad/<expected>.stderr`;
/// and the working directory must hold exactly the files it held before (no state, no
/// lock, no output files).
#[track_caller]
fn assert_rejected(
    sb: &Sandbox,
    stack: &str,
    extra: &[&str],
    envs: &[(&str, &str)],
    expected: &str,
) {
    let before = sb.files();
    let mut apply_args = vec!["apply", "--auto-approve", "-s", stack];
    apply_args.extend_from_slice(extra);
    let apply = sb.run_env(&apply_args, envs);
    apply.failure();
    assert_eq!(apply.stdout, "", "a refused stack prints nothing on stdout");
    sb.expect(&format!("bad/{expected}.stderr"), &apply.stderr);

    let mut validate_args = vec!["validate", "-s", stack];
    validate_args.extend_from_slice(extra);
    let validate = sb.run_env(&validate_args, envs);
    validate.failure();
    assert_eq!(
        validate.stdout, "",
        "validate prints nothing on stdout for a bad stack"
    );
    assert_eq!(
        validate.stderr, apply.stderr,
        "validate and apply report the same problems"
    );

    assert_eq!(
        sb.files(),
        before,
        "a refused stack must create nothing (state, lock or files)"
    );
    assert!(
        !sb.exists("state"),
        "a refused stack must not even create the state directory"
    );
    assert!(
        !sb.exists("out"),
        "a refused stack must not create any output file"
    );
}

/// A bad fixture file from `tests/fixtures/bad/`, rejected by `apply` and `validate`.
#[track_caller]
fn bad(case: &str) -> Sandbox {
    let sb = Sandbox::with_fixture(&format!("bad/{case}.toml"));
    assert_rejected(&sb, &format!("{case}.toml"), &[], &[], case);
    sb
}

#[test]
fn toml_syntax_error_points_at_the_line() {
    bad("toml_syntax");
}

/// A syntax error on the last line (a key with no `=`): the excerpt must still show the
/// line, not miette's "Failed to read contents for label" (the span runs past the end).
#[test]
fn toml_syntax_error_at_end_of_file_shows_the_line() {
    bad("toml_syntax_at_eof");
}

#[test]
fn unknown_resource_kind_suggests_the_closest() {
    bad("unknown_kind");
}

#[test]
fn unknown_key_in_a_resource_suggests_the_closest() {
    bad("unknown_key");
}

#[test]
fn integer_given_where_a_string_is_expected() {
    bad("wrong_type");
}

#[test]
fn missing_required_field_names_it_and_says_what_it_is() {
    bad("missing_required");
}

#[test]
fn reference_to_an_unknown_resource_suggests_the_closest() {
    bad("unknown_resource");
}

#[test]
fn reference_to_an_unknown_attribute_suggests_the_closest() {
    bad("unknown_attribute");
}

#[test]
fn reference_to_an_unknown_variable_suggests_the_closest() {
    bad("unknown_variable");
}

/// A declared variable with no default and no value: one diagnostic at the declaration
/// (not a second "no variable" at every use, whose help would wrongly say to declare
/// it); `--var` and `TERRAIN_VAR_<name>` both fix it.
#[test]
fn variable_without_value_is_reported_once_and_var_fixes_it() {
    let sb = bad("variable_without_value");
    let run = sb.run(&[
        "apply",
        "--auto-approve",
        "-s",
        "variable_without_value.toml",
        "--var",
        "greeting=hi",
    ]);
    run.success();
    assert_eq!(sb.read("out/ok.txt"), "hi");

    let env = Sandbox::with_fixture("bad/variable_without_value.toml");
    let run = env.run_env(
        &["validate", "-s", "variable_without_value.toml"],
        &[("TERRAIN_VAR_greeting", "hey")],
    );
    run.success();
    assert_eq!(
        run.stdout,
        "The stack `bad` is valid: 1 resource, 0 outputs.\n"
    );
}

#[test]
fn var_for_an_undeclared_variable_is_refused() {
    let sb = Sandbox::with_fixture("bad/undeclared_var.toml");
    assert_rejected(
        &sb,
        "undeclared_var.toml",
        &["--var", "colour=red"],
        &[],
        "undeclared_var",
    );
    // The same stack is fine without the stray --var.
    sb.run(&["validate", "-s", "undeclared_var.toml"]).success();
}

#[test]
fn reference_without_an_attribute_is_not_a_reference() {
    bad("bad_ref_no_attr");
}

#[test]
fn unterminated_reference_is_refused() {
    bad("bad_ref_unterminated");
}

#[test]
fn depends_on_a_missing_resource_suggests_the_closest() {
    bad("depends_on_missing");
}

#[test]
fn dependency_cycle_names_every_address_on_it() {
    let sb = bad("cycle");
    let stderr = sb.run(&["validate", "-s", "cycle.toml"]).stderr;
    for addr in ["local_file.a", "local_file.b", "local_file.c"] {
        assert!(
            stderr.contains(addr),
            "the cycle must name {addr}:\n{stderr}"
        );
    }
    assert!(
        !stderr.contains("local_file.ok ->"),
        "local_file.ok is not on the cycle:\n{stderr}"
    );
}

#[test]
fn duplicate_resource_across_two_files_of_a_directory_stack() {
    let sb = Sandbox::new();
    sb.add_fixture_at("bad/duplicate", "dup");
    assert_rejected(&sb, "dup", &[], &[], "duplicate");
}

#[test]
fn unknown_lifecycle_key_suggests_the_closest() {
    bad("unknown_lifecycle_key");
}

#[test]
fn output_showing_a_sensitive_variable_must_be_marked_sensitive() {
    bad("sensitive_output");
}

#[test]
fn env_reference_to_an_unset_variable_is_refused() {
    let sb = bad("unset_env");
    let run = sb.run_env(
        &["validate", "-s", "unset_env.toml"],
        &[("TERRAIN_TEST_UNSET_HOME", "/home/t")],
    );
    run.success();
}

/// The kinds' own checks, all reported together; each names the field once.
#[test]
fn kind_level_validation_of_every_local_kind() {
    bad("kind_validation");
}

#[test]
fn template_string_given_to_an_integer_field() {
    bad("template_to_int");
}

/// Regression: a variable, an output or a `[providers.x]` table defined in two files of
/// one stack let one of them silently win.
#[test]
fn duplicate_variable_output_and_provider_across_files_are_refused() {
    let sb = Sandbox::new();
    sb.add_fixture_at("bad/duplicate_sections", "dup");
    assert_rejected(&sb, "dup", &[], &[], "duplicate_sections");
}

/// Regression: a resource using its own attribute wrote an internal placeholder and
/// never converged; depending on itself was let through.
#[test]
fn self_reference_is_a_dependency_cycle() {
    bad("self_reference");
}

/// Regression: an output with a misspelt attribute became null, and one naming a
/// missing resource disappeared; outputs now get a resource field's reference checks.
#[test]
fn output_references_are_checked_like_resource_fields() {
    bad("output_refs");
}

/// Regression: a kind's check on one list element (`instance_types.1`,
/// `taints.1.effect`) was reported at the resource's header.
#[test]
fn problem_with_a_list_element_points_at_the_element() {
    bad("list_elements");
}

/// Regression: a default of the wrong type was reported at the variable's name.
#[test]
fn variable_default_of_the_wrong_type_points_at_the_default() {
    bad("variable_default_type");
}

/// Regression: a stack file that is not UTF-8 was reported with no line.
#[test]
fn invalid_utf8_points_at_the_first_bad_byte() {
    let sb = Sandbox::new();
    std::fs::write(
        sb.join("latin1.toml"),
        b"[stack]\nname = \"bad\"\n\n[local_file.menu]\npath = \"out/menu.txt\"\ncontent = \"caf\xe9 cr\xe8me\"\n",
    )
    .expect("write the Latin-1 stack");
    assert_rejected(&sb, "latin1.toml", &[], &[], "invalid_utf8");
}

/// Regression: a wrong value given for a sensitive variable was echoed in the error.
#[test]
fn wrong_value_of_a_sensitive_variable_is_never_shown() {
    let sb = Sandbox::with_fixture("bad/sensitive_var_value.toml");
    assert_rejected(
        &sb,
        "sensitive_var_value.toml",
        &["--var", "port=s3cr3t-port", "--var", "retries=many"],
        &[],
        "sensitive_var_value",
    );
    let run = sb.run_env(
        &["validate", "-s", "sensitive_var_value.toml"],
        &[("TERRAIN_VAR_port", "s3cr3t-port")],
    );
    run.failure();
    assert!(
        run.stderr.contains("TERRAIN_VAR_port: (sensitive value)")
            && !run.stderr.contains("s3cr3t"),
        "the secret must not be shown:\n{}",
        run.stderr
    );
}

// ---------------------------------------------------------------------------------------
// The command line itself.
// ---------------------------------------------------------------------------------------

/// Regression: clap exited 2 on a command-line mistake, which a script using
/// `plan --detailed-exitcode` reads as "the plan has changes".
#[test]
fn command_line_mistakes_exit_1_not_2() {
    let sb = Sandbox::with_fixture("bad/variable_without_value.toml");
    let stack = "variable_without_value.toml";
    let run = sb.run(&[
        "plan",
        "--detailed-exitcode",
        "-s",
        stack,
        "--var",
        "novalue",
    ]);
    run.failure();
    assert!(
        run.stderr.contains("`novalue` is not NAME=VALUE"),
        "clap's message, as clap prints it:\n{}",
        run.stderr
    );
    let run = sb.run(&["plan", "--detailed-exitcode", "-s", stack, "--no-such-flag"]);
    run.failure();
    assert!(run.stderr.contains("--no-such-flag"), "{}", run.stderr);
    sb.run(&["no-such-command"]).failure();
    sb.run(&[]).failure();
}

#[test]
fn help_and_version_exit_0_on_stdout() {
    let sb = Sandbox::new();
    for args in [&["--help"][..], &["plan", "--help"], &["-h"]] {
        let run = sb.run(args);
        run.success();
        assert!(
            run.stdout.contains("Usage: terrain"),
            "{args:?}:\n{}",
            run.stdout
        );
        assert_eq!(run.stderr, "", "{args:?}");
    }
    for args in [&["--version"][..], &["-V"], &["plan", "--version"]] {
        let run = sb.run(args);
        run.success();
        assert!(
            run.stdout.starts_with("terrain") && run.stdout.contains(env!("CARGO_PKG_VERSION")),
            "{args:?}:\n{}",
            run.stdout
        );
    }
}

// ---------------------------------------------------------------------------------------
// The happy path.
// ---------------------------------------------------------------------------------------

/// Parses `plan --json` output.
#[track_caller]
fn plan_json(run: &Run) -> Value {
    serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("plan --json is not JSON ({e}):\n{}", run.stdout))
}

/// `address -> action` of a `plan --json` document.
#[track_caller]
fn actions(plan: &Value) -> Vec<(String, String)> {
    plan["changes"]
        .as_array()
        .expect("plan --json has a `changes` list")
        .iter()
        .map(|c| {
            (
                c["address"]
                    .as_str()
                    .expect("a change has an address")
                    .to_string(),
                c["action"]
                    .as_str()
                    .expect("a change has an action")
                    .to_string(),
            )
        })
        .collect()
}

fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
    items
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

#[test]
fn happy_path_validate_plan_apply_update_replace_destroy() {
    let mut sb = Sandbox::with_fixture("happy");
    let log = sb.join("events.jsonl");
    sb.set_log(log);
    let s = ["-s", "stack.toml"];
    let with =
        |args: &[&'static str]| -> Vec<&'static str> { args.iter().copied().chain(s).collect() };
    // Everything printed, to check that the secret never shows.
    let mut seen = String::new();

    let run = sb.run(&with(&["validate"]));
    run.success();
    assert_eq!(
        run.stdout,
        "The stack `happy` is valid: 5 resources, 3 outputs.\n"
    );

    let run = sb.run(&with(&["plan"]));
    run.success();
    assert_eq!(run.stderr, "");
    sb.expect("happy/plan_create.stdout", &run.stdout);
    seen.push_str(&run.all_output());
    sb.run(&with(&["plan", "--detailed-exitcode"]))
        .expect_code(2);

    let run = sb.run(&with(&["plan", "--json"]));
    run.success();
    seen.push_str(&run.all_output());
    let plan = plan_json(&run);
    assert_eq!(
        actions(&plan),
        pairs(&[
            ("local_file.greeting", "create"),
            ("local_file.secret", "create"),
            ("random_id.run", "create"),
            ("time_sleep.settle", "create"),
            ("local_file.manifest", "create"),
        ])
    );
    assert_eq!(
        plan["summary"],
        serde_json::json!({"add": 5, "change": 0, "replace": 0, "destroy": 0})
    );
    assert_eq!(plan["has_changes"], Value::Bool(true));
    let secret = plan["changes"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["address"] == "local_file.secret"))
        .expect("secret in the plan");
    // A secret is null in JSON, marked in `after_sensitive` (plan --json format 2).
    assert_eq!(plan["format_version"], 2);
    assert_eq!(secret["after"]["sensitive_content"], Value::Null);
    assert_eq!(
        secret["after_sensitive"],
        serde_json::json!({"sensitive_content": true})
    );
    assert!(
        !sb.exists("state/happy.json"),
        "plan must not write the state"
    );

    let run = sb.run(&with(&["apply", "--auto-approve", "--parallelism", "1"]));
    run.success();
    assert_eq!(run.stderr, "");
    sb.expect("happy/apply.stdout", &run.stdout);
    seen.push_str(&run.all_output());

    let state = sb.json("state/happy.json");
    let run_hex = state["resources"]["random_id.run"]["outputs"]["hex"]
        .as_str()
        .expect("random_id.run has a hex output")
        .to_string();
    assert!(
        run_hex.starts_with("run-") && run_hex.len() == 12,
        "hex output is the prefix and 4 bytes: {run_hex}"
    );
    assert_eq!(sb.read("out/greeting.txt"), "hello, world\n");
    assert_eq!(sb.read("out/secret.txt"), format!("token={TOKEN}\n"));

    // A no-op shows its live spec as `before` (from the plan's refreshed state), secrets
    // hidden there too.
    let run = sb.run(&with(&["plan", "--json"]));
    run.success();
    seen.push_str(&run.all_output());
    let plan = plan_json(&run);
    let change = |address: &str| {
        plan["changes"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["address"] == address))
            .cloned()
            .unwrap_or_else(|| panic!("{address} in the plan"))
    };
    let greeting = change("local_file.greeting");
    assert_eq!(greeting["action"], "no_op");
    assert_eq!(greeting["before"]["path"], "out/greeting.txt");
    assert_eq!(greeting["before"]["content"], "hello, world\n");
    assert_eq!(greeting["before"]["mode"], greeting["after"]["mode"]);
    let secret = change("local_file.secret");
    assert_eq!(secret["action"], "no_op");
    assert_eq!(secret["before"]["sensitive_content"], Value::Null);
    assert_eq!(
        secret["before_sensitive"],
        serde_json::json!({"sensitive_content": true})
    );
    assert_eq!(sb.mode("out/secret.txt"), 0o600);
    assert_eq!(sb.mode("out/greeting.txt"), 0o644);
    assert_eq!(
        sb.read("out/manifest.txt"),
        format!("greeting 853ff93762a06ddbf722c4ebe9ddd66d8f63ddaea97f521c3ecc20da7c976020\nrun {run_hex}\n")
    );
    // The secret is in the state (so the checks below mean something), which is private.
    assert!(
        sb.read("state/happy.json").contains(TOKEN),
        "the state records the secret"
    );
    assert_eq!(
        sb.mode("state/happy.json"),
        0o600,
        "the state holds secrets: 0600"
    );
    assert_eq!(
        sb.mode("state/happy.json.backup"),
        0o600,
        "the backup holds secrets: 0600"
    );

    let run = sb.run(&with(&["plan", "--detailed-exitcode"]));
    run.expect_code(0);
    assert_eq!(
        run.stdout,
        "No changes. Live infrastructure matches the stack.\n"
    );
    seen.push_str(&run.all_output());
    let run = sb.run(&with(&["plan", "--json"]));
    seen.push_str(&run.all_output());
    let plan = plan_json(&run);
    assert!(
        actions(&plan).iter().all(|(_, a)| a == "no_op"),
        "nothing to do after apply: {plan}"
    );
    assert_eq!(plan["has_changes"], Value::Bool(false));

    // An in-place update.
    sb.set_value("stack.toml", "mode", "\"0600\"", "\"0640\"");
    let run = sb.run(&with(&["plan", "--detailed-exitcode"]));
    run.expect_code(2);
    sb.expect("happy/plan_update.stdout", &run.stdout);
    seen.push_str(&run.all_output());
    let run = sb.run(&with(&["plan", "--json"]));
    seen.push_str(&run.all_output());
    let plan = plan_json(&run);
    assert_eq!(
        plan["summary"],
        serde_json::json!({"add": 0, "change": 1, "replace": 0, "destroy": 0})
    );
    assert!(actions(&plan).contains(&("local_file.secret".to_string(), "update".to_string())));
    let run = sb.run(&with(&["apply", "--auto-approve", "--parallelism", "1"]));
    run.success();
    seen.push_str(&run.all_output());
    assert!(
        run.stdout
            .contains("Apply complete! Resources: 0 added, 1 changed, 0 replaced, 0 destroyed."),
        "{}",
        run.stdout
    );
    assert_eq!(sb.mode("out/secret.txt"), 0o640);

    // A replace: the path of a file cannot change in place.
    sb.edit(
        "stack.toml",
        "path = \"out/secret.txt\"",
        "path = \"out/secret-v2.txt\"",
    );
    let run = sb.run(&with(&["plan", "--detailed-exitcode"]));
    run.expect_code(2);
    sb.expect("happy/plan_replace.stdout", &run.stdout);
    seen.push_str(&run.all_output());
    let run = sb.run(&with(&["plan", "--json"]));
    seen.push_str(&run.all_output());
    let plan = plan_json(&run);
    assert_eq!(
        plan["summary"],
        serde_json::json!({"add": 0, "change": 0, "replace": 1, "destroy": 0})
    );
    let secret = plan["changes"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["address"] == "local_file.secret"))
        .expect("secret in the plan");
    assert_eq!(secret["action"], "replace");
    assert_eq!(secret["replace_because"], serde_json::json!(["path"]));
    let run = sb.run(&with(&["apply", "--auto-approve", "--parallelism", "1"]));
    run.success();
    seen.push_str(&run.all_output());
    assert!(
        run.stdout
            .contains("Apply complete! Resources: 0 added, 0 changed, 1 replaced, 0 destroyed."),
        "{}",
        run.stdout
    );
    assert!(
        !sb.exists("out/secret.txt"),
        "the old file is deleted by the replace"
    );
    assert_eq!(sb.read("out/secret-v2.txt"), format!("token={TOKEN}\n"));
    assert_eq!(sb.mode("out/secret-v2.txt"), 0o640);
    assert_eq!(sb.mode("state/happy.json"), 0o600);
    assert_eq!(sb.mode("state/happy.json.backup"), 0o600);
    sb.run(&with(&["plan", "--detailed-exitcode"]))
        .expect_code(0);

    for args in [
        &["state", "list"][..],
        &["state", "show", "local_file.secret"],
        &["output"],
        &["output", "--json"],
        &["output", "token"],
        &["graph"],
    ] {
        let run = sb.run(&with(args));
        run.success();
        seen.push_str(&run.all_output());
    }

    let run = sb.run(&with(&["destroy", "--auto-approve", "--parallelism", "1"]));
    run.success();
    assert_eq!(run.stderr, "");
    sb.expect("happy/destroy.stdout", &run.stdout);
    seen.push_str(&run.all_output());
    let run = sb.run(&with(&["state", "list"]));
    run.success();
    assert_eq!(run.stdout, "", "nothing is left in the state after destroy");
    assert_eq!(sb.state_addresses("state/happy.json"), Vec::<String>::new());
    assert_eq!(
        sb.files(),
        [
            "events.jsonl",
            "stack.toml",
            "state/happy.json",
            "state/happy.json.backup"
        ],
        "destroy removes every file it made and leaves no lock behind"
    );
    sb.run(&with(&["plan", "--detailed-exitcode"]))
        .expect_code(2);

    assert!(!seen.contains(TOKEN), "the secret was printed:\n{seen}");
    assert!(
        !sb.read("events.jsonl").contains(TOKEN),
        "the secret is in the event log"
    );
}

#[test]
fn apply_without_auto_approve_and_no_terminal_refuses() {
    let sb = Sandbox::with_fixture("happy");
    let run = sb.run(&["apply", "-s", "stack.toml"]);
    run.failure();
    assert!(
        run.stdout
            .contains("Plan: 5 to add, 0 to change, 0 to replace, 0 to destroy."),
        "the plan is shown first:\n{}",
        run.stdout
    );
    assert!(
        !run.stdout.contains("Enter a value"),
        "nobody to ask: no prompt"
    );
    assert_eq!(
        run.stderr,
        "Error: no terminal to confirm on; nothing was changed. Review the plan and pass --auto-approve to run without asking\n"
    );
    assert_eq!(
        sb.files(),
        ["stack.toml"],
        "a refused apply changes nothing"
    );

    // Same for destroy once there is something to destroy.
    sb.run(&["apply", "-s", "stack.toml", "--auto-approve"])
        .success();
    let state = sb.read("state/happy.json");
    let files = sb.files();
    let run = sb.run(&["destroy", "-s", "stack.toml"]);
    run.failure();
    assert!(
        run.stderr
            .contains("no terminal to confirm on; nothing was changed"),
        "{}",
        run.stderr
    );
    assert_eq!(
        sb.read("state/happy.json"),
        state,
        "a refused destroy leaves the state alone"
    );
    assert_eq!(sb.files(), files, "a refused destroy deletes nothing");
}

// ---------------------------------------------------------------------------------------
// The state lock.
// ---------------------------------------------------------------------------------------

const LOCK_FILE: &str = "state/locked.json.lock";

/// Waits until an apply holds the lock and returns the lock record.
fn wait_for_lock(sb: &Sandbox) -> Value {
    sb.wait_for(
        "the first apply to take the lock",
        Duration::from_secs(20),
        || {
            let text = std::fs::read_to_string(sb.join(LOCK_FILE)).ok()?;
            let v: Value = serde_json::from_str(&text).ok()?;
            v.get("id").and_then(Value::as_str).is_some().then_some(v)
        },
    )
}

#[test]
fn second_apply_is_refused_while_locked_and_lock_timeout_waits() {
    let sb = Sandbox::with_fixture("lock");
    let first_args = ["apply", "-s", "stack.toml", "--auto-approve"];
    let mut first = sb.spawn(&first_args);
    let first_pid = first.id();
    let lock = wait_for_lock(&sb);
    let id = lock["id"].as_str().expect("lock id").to_string();
    assert_eq!(
        lock["pid"],
        Value::from(first_pid),
        "the lock names the process holding it"
    );
    assert_eq!(lock["operation"], "apply");

    let started = Instant::now();
    let second = sb.run(&["apply", "-s", "stack.toml", "--auto-approve"]);
    let took = started.elapsed();
    second.failure();
    assert!(
        took < Duration::from_secs(2),
        "without --lock-timeout a held lock fails at once, took {took:?}"
    );
    let who = match hostname() {
        Some(host) => format!("{TEST_USER}@{host}"),
        None => format!("{TEST_USER}@"),
    };
    for part in [
        format!("state state/locked.json is locked by {who}"),
        format!("(pid {first_pid})"),
        "for `apply`".to_string(),
        format!("lock id {id}"),
        format!("terrain force-unlock {id}"),
    ] {
        assert!(
            second.stderr.contains(&part),
            "the refusal must say `{part}`:\n{}",
            second.stderr
        );
    }
    assert_eq!(second.stdout, "", "the refused apply did not plan");

    let third_args = [
        "apply",
        "-s",
        "stack.toml",
        "--auto-approve",
        "--lock-timeout",
        "30s",
    ];
    let third = sb.spawn(&third_args);
    assert!(
        first.try_wait().expect("poll the first apply").is_none(),
        "the first apply still holds the lock when the third starts"
    );
    let first = sb.finish(first, &first_args);
    first.success();
    assert!(
        first.stdout.contains("Apply complete! Resources: 2 added"),
        "{}",
        first.stdout
    );
    let third = sb.finish(third, &third_args);
    third.success();
    assert_eq!(
        third.stdout, "No changes. Live infrastructure matches the stack.\n",
        "the waiting apply ran after the first finished"
    );
    assert!(!sb.exists(LOCK_FILE), "no lock file is left behind");
    assert_eq!(sb.read("out/after.txt"), "done\n");
}

#[test]
fn force_unlock_needs_the_right_id() {
    let sb = Sandbox::with_fixture("lock");
    let args = ["apply", "-s", "stack.toml", "--auto-approve"];
    let holder = sb.spawn(&args);
    let holder_pid = holder.id();
    let lock = wait_for_lock(&sb);
    let id = lock["id"].as_str().expect("lock id").to_string();

    let wrong = sb.run(&["force-unlock", "not-the-id", "-s", "stack.toml"]);
    wrong.failure();
    assert_eq!(
        sb.normalise(&wrong.stderr),
        "Error: state state/locked.json is locked with id <UUID>, not not-the-id; nothing was unlocked\n"
    );
    assert!(sb.exists(LOCK_FILE), "a wrong id releases nothing");
    let still = sb.run(&["apply", "-s", "stack.toml", "--auto-approve"]);
    still.failure();
    assert!(
        still.stderr.contains("is locked by"),
        "still locked after a wrong id:\n{}",
        still.stderr
    );

    let right = sb.run(&["force-unlock", &id, "-s", "stack.toml"]);
    right.success();
    let who = hostname().map_or(format!("{TEST_USER}@"), |h| format!("{TEST_USER}@{h}"));
    assert!(
        right.stdout.starts_with(&format!(
            "Released lock {id} on state/locked.json (held by {who}"
        )),
        "{}",
        right.stdout
    );
    assert!(
        right
            .stdout
            .contains(&format!("(pid {holder_pid}) for `apply`")),
        "{}",
        right.stdout
    );
    assert!(!sb.exists(LOCK_FILE), "force-unlock removes the lock");

    let again = sb.run(&["force-unlock", &id, "-s", "stack.toml"]);
    again.failure();
    assert_eq!(
        again.stderr,
        "Error: state state/locked.json is not locked\n"
    );
    // The holder carries on; what it says about its lock having been broken is not
    // checked here, only that it finishes.
    let _ = sb.finish(holder, &args);
}

// ---------------------------------------------------------------------------------------
// Saved plans.
// ---------------------------------------------------------------------------------------

/// A plan saved before anything was ever applied applies as it is.
#[test]
fn saved_plan_made_before_the_first_apply_applies() {
    let sb = Sandbox::with_fixture("saved_plan");
    sb.run(&["plan", "-s", "stack.toml", "--out", "p.json"])
        .success();
    let run = sb.run(&["apply", "p.json"]);
    run.success();
    assert!(
        run.stdout.contains("Apply complete! Resources: 2 added"),
        "{}",
        run.stdout
    );
    assert_eq!(sb.read("out/a.txt"), "a\n");
    assert_eq!(sb.read("out/b.txt"), "b\n");
}

#[test]
fn fresh_saved_plan_applies_without_a_prompt() {
    let sb = Sandbox::with_fixture("saved_plan");
    sb.run(&[
        "apply",
        "-s",
        "stack.toml",
        "--auto-approve",
        "--target",
        "local_file.a",
    ])
    .success();
    let run = sb.run(&["plan", "-s", "stack.toml", "--out", "p.json"]);
    run.success();
    assert!(
        run.stdout.ends_with(
            "\nSaved the plan to p.json. To apply exactly this plan: terrain apply p.json\n"
        ),
        "{}",
        run.stdout
    );
    assert_eq!(
        sb.mode("p.json"),
        0o600,
        "a saved plan holds values from the state: 0600"
    );
    // No terminal and no --auto-approve: a saved plan is applied without asking.
    let run = sb.run(&["apply", "p.json"]);
    run.success();
    assert!(!run.stdout.contains("Enter a value"), "{}", run.stdout);
    assert!(
        run.stdout
            .contains("Apply complete! Resources: 1 added, 0 changed, 0 replaced, 0 destroyed."),
        "{}",
        run.stdout
    );
    assert_eq!(sb.read("out/b.txt"), "b\n");
    sb.run(&["plan", "-s", "stack.toml", "--detailed-exitcode"])
        .expect_code(0);
}

#[test]
fn saved_plan_is_refused_once_the_state_changed() {
    let sb = Sandbox::with_fixture("saved_plan");
    sb.run(&[
        "apply",
        "-s",
        "stack.toml",
        "--auto-approve",
        "--target",
        "local_file.a",
    ])
    .success();
    sb.run(&["plan", "-s", "stack.toml", "--out", "p.json"])
        .success();
    // Something else changes the state meanwhile.
    sb.run(&[
        "apply",
        "-s",
        "stack.toml",
        "--auto-approve",
        "--target",
        "local_file.b",
    ])
    .success();
    std::fs::remove_file(sb.join("out/b.txt"))
        .expect("remove b by hand, so a stale apply would show");
    let state = sb.read("state/saved.json");
    let run = sb.run(&["apply", "p.json"]);
    run.failure();
    assert!(
        run.stderr
            .starts_with("Error: the saved plan is stale: the state changed since (serial ")
            && run.stderr.ends_with("; run `terrain plan` again\n"),
        "{}",
        run.stderr
    );
    assert_eq!(
        sb.read("state/saved.json"),
        state,
        "a stale plan changes nothing"
    );
    assert!(!sb.exists("out/b.txt"), "a stale plan creates nothing");
}

#[test]
fn saved_plan_is_refused_after_the_stack_changed() {
    let sb = Sandbox::with_fixture("saved_plan");
    sb.run(&[
        "apply",
        "-s",
        "stack.toml",
        "--auto-approve",
        "--target",
        "local_file.a",
    ])
    .success();
    sb.run(&["plan", "-s", "stack.toml", "--out", "p.json"])
        .success();
    sb.edit("stack.toml", "content = \"b\\n\"", "content = \"bee\\n\"");
    let state = sb.read("state/saved.json");
    let run = sb.run(&["apply", "p.json"]);
    run.failure();
    assert_eq!(run.stderr, "Error: the saved plan is stale: the stack's files changed since it was saved; run `terrain plan` again\n");
    assert_eq!(run.stdout, "");
    assert_eq!(
        sb.read("state/saved.json"),
        state,
        "a stale plan changes nothing"
    );
    assert!(!sb.exists("out/b.txt"), "a stale plan creates nothing");
}

// ---------------------------------------------------------------------------------------
// prevent_destroy and --target.
// ---------------------------------------------------------------------------------------

#[test]
fn prevent_destroy_refuses_destroy_and_replace_naming_the_resource() {
    let sb = Sandbox::with_fixture("guarded");
    sb.run(&["apply", "-s", "stack.toml", "--auto-approve"])
        .success();
    let state = sb.read("state/guarded.json");
    let refusal = "Error: local_file.keep: lifecycle.prevent_destroy is set, but this plan would destroy it; remove prevent_destroy first if this is intended\n";

    let run = sb.run(&["destroy", "-s", "stack.toml", "--auto-approve"]);
    run.failure();
    assert_eq!(run.stderr, refusal);
    assert_eq!(run.stdout, "");
    let run = sb.run(&["plan", "-s", "stack.toml", "--destroy"]);
    run.failure();
    assert_eq!(run.stderr, refusal);
    assert_eq!(
        sb.read("state/guarded.json"),
        state,
        "a refused destroy changes nothing"
    );
    assert_eq!(sb.read("out/keep.txt"), "precious\n");
    assert_eq!(sb.read("out/scratch.txt"), "scratch\n");

    sb.edit("stack.toml", "out/keep.txt", "out/keep-v2.txt");
    let run = sb.run(&["plan", "-s", "stack.toml"]);
    run.failure();
    assert_eq!(
        run.stderr,
        "Error: local_file.keep: lifecycle.prevent_destroy is set, but this plan would replace it (path forces replacement); remove prevent_destroy first if this is intended\n"
    );
    sb.edit("stack.toml", "out/keep-v2.txt", "out/keep.txt");

    // What is not protected can still go.
    let run = sb.run(&[
        "destroy",
        "-s",
        "stack.toml",
        "--auto-approve",
        "--target",
        "local_file.scratch",
    ]);
    run.success();
    assert!(
        run.stdout
            .contains("Destroy complete! Resources: 1 destroyed."),
        "{}",
        run.stdout
    );
    assert_eq!(
        sb.state_addresses("state/guarded.json"),
        ["local_file.keep"]
    );
    assert!(!sb.exists("out/scratch.txt"));
    assert_eq!(sb.read("out/keep.txt"), "precious\n");
}

#[test]
fn target_pulls_in_dependencies_and_destroy_target_pulls_in_dependents() {
    let sb = Sandbox::with_fixture("targets");
    let run = sb.run(&[
        "plan",
        "-s",
        "stack.toml",
        "--target",
        "local_file.middle",
        "--json",
    ]);
    run.success();
    let plan = plan_json(&run);
    let changing: Vec<(String, String)> = actions(&plan)
        .into_iter()
        .filter(|(_, a)| a != "no_op")
        .collect();
    assert_eq!(
        changing,
        pairs(&[
            ("local_file.base", "create"),
            ("local_file.middle", "create")
        ])
    );

    let run = sb.run(&[
        "apply",
        "-s",
        "stack.toml",
        "--auto-approve",
        "--target",
        "local_file.middle",
        "--parallelism",
        "1",
    ]);
    run.success();
    assert!(
        run.stdout.contains("Apply complete! Resources: 2 added"),
        "{}",
        run.stdout
    );
    assert_eq!(
        sb.state_addresses("state/targets.json"),
        ["local_file.base", "local_file.middle"]
    );
    assert!(sb.exists("out/base.txt") && sb.exists("out/middle.txt"));
    assert!(
        !sb.exists("out/top.txt") && !sb.exists("out/other.txt"),
        "untargeted resources are left alone"
    );

    sb.run(&["apply", "-s", "stack.toml", "--auto-approve"])
        .success();
    assert_eq!(sb.state_addresses("state/targets.json").len(), 4);

    let run = sb.run(&[
        "plan",
        "-s",
        "stack.toml",
        "--destroy",
        "--target",
        "local_file.base",
        "--json",
    ]);
    run.success();
    let changing: Vec<(String, String)> = actions(&plan_json(&run))
        .into_iter()
        .filter(|(_, a)| a != "no_op")
        .collect();
    assert_eq!(
        changing,
        pairs(&[
            ("local_file.top", "delete"),
            ("local_file.middle", "delete"),
            ("local_file.base", "delete")
        ]),
        "dependents first"
    );
    let run = sb.run(&[
        "destroy",
        "-s",
        "stack.toml",
        "--auto-approve",
        "--target",
        "local_file.base",
        "--parallelism",
        "1",
    ]);
    run.success();
    assert!(
        run.stdout
            .contains("Destroy complete! Resources: 3 destroyed."),
        "{}",
        run.stdout
    );
    assert_eq!(
        sb.state_addresses("state/targets.json"),
        ["local_file.other"]
    );
    assert_eq!(sb.read("out/other.txt"), "other\n");
    for gone in ["out/base.txt", "out/middle.txt", "out/top.txt"] {
        assert!(!sb.exists(gone), "{gone} is destroyed with its dependency");
    }

    let run = sb.run(&["plan", "-s", "stack.toml", "--target", "local_file.nope"]);
    run.failure();
    assert_eq!(
        run.stderr,
        "Error: --target local_file.nope: no such resource in the stack or the state\n"
    );
}

// ---------------------------------------------------------------------------------------
// State subcommands, outputs, import, graph.
// ---------------------------------------------------------------------------------------

/// The happy fixture, applied.
fn applied_happy() -> Sandbox {
    let sb = Sandbox::with_fixture("happy");
    sb.run(&["apply", "-s", "stack.toml", "--auto-approve"])
        .success();
    sb
}

#[test]
fn state_list_and_show_hide_secrets() {
    let sb = applied_happy();
    let run = sb.run(&["state", "list", "-s", "stack.toml"]);
    run.success();
    assert_eq!(run.stdout, "local_file.greeting\nlocal_file.manifest\nlocal_file.secret\nrandom_id.run\ntime_sleep.settle\n");

    let run = sb.run(&["state", "show", "local_file.secret", "-s", "stack.toml"]);
    run.success();
    assert!(
        !run.stdout.contains(TOKEN),
        "state show printed the secret:\n{}",
        run.stdout
    );
    sb.expect("state/show_secret.stdout", &run.stdout);

    // A field that is unset is shown as null, not as a hidden secret.
    let run = sb.run(&["state", "show", "local_file.greeting", "-s", "stack.toml"]);
    run.success();
    sb.expect("state/show_greeting.stdout", &run.stdout);

    let run = sb.run(&["state", "show", "local_file.nope", "-s", "stack.toml"]);
    run.failure();
    assert_eq!(run.stderr, "Error: local_file.nope is not in the state\n");
}

#[test]
fn state_mv_follows_a_rename_and_state_rm_forgets_without_deleting() {
    let sb = applied_happy();
    let run = sb.run(&[
        "state",
        "mv",
        "local_file.secret",
        "local_file.token_file",
        "-s",
        "stack.toml",
    ]);
    run.success();
    assert_eq!(
        run.stdout,
        "Moved local_file.secret to local_file.token_file.\n"
    );
    sb.edit(
        "stack.toml",
        "[local_file.secret]",
        "[local_file.token_file]",
    );
    let run = sb.run(&["plan", "-s", "stack.toml", "--detailed-exitcode"]);
    run.expect_code(0);
    assert_eq!(
        run.stdout,
        "No changes. Live infrastructure matches the stack.\n"
    );

    let run = sb.run(&[
        "state",
        "mv",
        "local_file.token_file",
        "random_id.token_file",
        "-s",
        "stack.toml",
    ]);
    run.failure();
    assert_eq!(run.stderr, "Error: cannot move local_file.token_file to random_id.token_file: a resource keeps its kind\n");
    let run = sb.run(&[
        "state",
        "mv",
        "local_file.token_file",
        "local_file.greeting",
        "-s",
        "stack.toml",
    ]);
    run.failure();
    assert_eq!(run.stderr, "Error: cannot move local_file.token_file to local_file.greeting: local_file.greeting is already in the state\n");

    let state = sb.read("state/happy.json");
    let run = sb.run(&[
        "state",
        "rm",
        "local_file.greeting",
        "local_file.nope",
        "-s",
        "stack.toml",
    ]);
    run.failure();
    assert_eq!(
        run.stderr,
        "Error: local_file.nope is not in the state; nothing was removed\n"
    );
    assert_eq!(
        sb.read("state/happy.json"),
        state,
        "a failed rm removes nothing"
    );

    let run = sb.run(&["state", "rm", "local_file.manifest", "-s", "stack.toml"]);
    run.success();
    assert_eq!(
        run.stdout,
        "Removed local_file.manifest from the state; the object itself was left as it is.\n"
    );
    assert!(
        sb.exists("out/manifest.txt"),
        "state rm leaves the object alone"
    );
    assert!(!sb
        .state_addresses("state/happy.json")
        .contains(&"local_file.manifest".to_string()));
    let plan = plan_json(&sb.run(&["plan", "-s", "stack.toml", "--json"]));
    assert!(
        actions(&plan).contains(&("local_file.manifest".to_string(), "create".to_string())),
        "forgotten: planned again"
    );
}

#[test]
fn outputs_all_one_and_json_with_secrets_hidden() {
    let sb = applied_happy();
    let run = sb.run(&["output", "-s", "stack.toml"]);
    run.success();
    assert_eq!(
        run.stdout,
        "greeting_path   = \"out/greeting.txt\"\n\
         greeting_sha256 = \"853ff93762a06ddbf722c4ebe9ddd66d8f63ddaea97f521c3ecc20da7c976020\"\n\
         token           = (sensitive value)\n"
    );
    let run = sb.run(&["output", "greeting_path", "-s", "stack.toml"]);
    run.success();
    assert_eq!(run.stdout, "out/greeting.txt\n");
    let run = sb.run(&["output", "token", "-s", "stack.toml"]);
    run.success();
    assert_eq!(run.stdout, "(sensitive value)\n");
    let run = sb.run(&["output", "token", "--show-sensitive", "-s", "stack.toml"]);
    run.success();
    assert_eq!(
        run.stdout,
        format!("{TOKEN}\n"),
        "asked for by name with --show-sensitive"
    );

    let run = sb.run(&["output", "--json", "-s", "stack.toml"]);
    run.success();
    let all: Value = serde_json::from_str(&run.stdout).expect("output --json is JSON");
    assert_eq!(
        all,
        serde_json::json!({
            "greeting_path": {"value": "out/greeting.txt", "sensitive": false},
            "greeting_sha256": {"value": "853ff93762a06ddbf722c4ebe9ddd66d8f63ddaea97f521c3ecc20da7c976020", "sensitive": false},
            "token": {"value": null, "sensitive": true},
        })
    );
    let run = sb.run(&["output", "greeting_path", "--json", "-s", "stack.toml"]);
    run.success();
    assert_eq!(run.stdout, "\"out/greeting.txt\"\n");
    let run = sb.run(&["output", "token", "--json", "-s", "stack.toml"]);
    run.success();
    assert_eq!(run.stdout, "null\n", "no marker text in JSON");

    let run = sb.run(&["output", "nope", "-s", "stack.toml"]);
    run.failure();
    assert_eq!(
        run.stderr,
        "Error: no output `nope` in the state; outputs: greeting_path, greeting_sha256, token\n"
    );
}

#[test]
fn import_brings_an_existing_file_under_management() {
    let sb = Sandbox::with_fixture("import");
    sb.write("out/existing.txt", "made by hand\n");
    std::fs::set_permissions(
        sb.join("out/existing.txt"),
        std::os::unix::fs::PermissionsExt::from_mode(0o640),
    )
    .expect("chmod");

    let run = sb.run(&[
        "import",
        "local_file.nope",
        "out/existing.txt",
        "-s",
        "stack.toml",
    ]);
    run.failure();
    assert_eq!(run.stderr, "Error: import local_file.nope: the stack has no such resource; add it to the stack first\n");
    let run = sb.run(&[
        "import",
        "local_file.existing",
        "out/missing.txt",
        "-s",
        "stack.toml",
    ]);
    run.failure();
    assert_eq!(
        run.stderr,
        "Error: import local_file.existing: no local_file with id `out/missing.txt` exists\n"
    );

    let run = sb.run(&[
        "import",
        "local_file.existing",
        "out/existing.txt",
        "-s",
        "stack.toml",
    ]);
    run.success();
    assert_eq!(
        run.stdout,
        "Imported local_file.existing [id=out/existing.txt]. Run `terrain plan` to see how it differs from the stack.\n"
    );
    assert_eq!(
        sb.state_addresses("state/imported.json"),
        ["local_file.existing"]
    );
    let run = sb.run(&["plan", "-s", "stack.toml", "--detailed-exitcode"]);
    run.expect_code(0);
    assert_eq!(
        run.stdout,
        "No changes. Live infrastructure matches the stack.\n"
    );

    let run = sb.run(&[
        "import",
        "local_file.existing",
        "out/existing.txt",
        "-s",
        "stack.toml",
    ]);
    run.failure();
    assert_eq!(
        run.stderr,
        "Error: local_file.existing is already in the state (id out/existing.txt); `terrain state rm local_file.existing` first to import another object\n"
    );

    // Once imported it is managed like any other resource.
    sb.run(&["destroy", "-s", "stack.toml", "--auto-approve"])
        .success();
    assert!(!sb.exists("out/existing.txt"));
}

/// Importing a file the stack writes with `sensitive_content` must not make its content
/// show up in plans or `state show`.
#[test]
fn import_of_a_sensitive_file_keeps_the_secret_hidden() {
    let sb = applied_happy();
    sb.run(&["state", "rm", "local_file.secret", "-s", "stack.toml"])
        .success();
    sb.run(&[
        "import",
        "local_file.secret",
        "out/secret.txt",
        "-s",
        "stack.toml",
    ])
    .success();
    let mut seen = String::new();
    for args in [
        &["plan", "-s", "stack.toml"][..],
        &["plan", "-s", "stack.toml", "--json"],
        &["state", "show", "local_file.secret", "-s", "stack.toml"],
    ] {
        let run = sb.run(args);
        run.success();
        seen.push_str(&run.all_output());
    }
    assert!(
        !seen.contains(TOKEN),
        "the imported file's secret content was printed:\n{seen}"
    );
}

#[test]
fn graph_prints_dot() {
    let sb = Sandbox::with_fixture("happy");
    let run = sb.run(&["graph", "-s", "stack.toml"]);
    run.success();
    assert_eq!(run.stderr, "");
    sb.expect("happy/graph.dot", &run.stdout);
}

// ---------------------------------------------------------------------------------------
// Drift and how plans render values.
// ---------------------------------------------------------------------------------------

#[test]
fn drift_edited_file_is_shown_and_updated_back() {
    let sb = Sandbox::with_fixture("drift");
    sb.run(&["apply", "-s", "stack.toml", "--auto-approve"])
        .success();
    sb.write("out/notes.txt", "line one\nline 2, edited by hand\n");
    let run = sb.run(&["plan", "-s", "stack.toml", "--detailed-exitcode"]);
    run.expect_code(2);
    sb.expect("drift/edited.stdout", &run.stdout);
    let plan = plan_json(&sb.run(&["plan", "-s", "stack.toml", "--json"]));
    assert_eq!(
        actions(&plan),
        pairs(&[
            ("local_file.config", "no_op"),
            ("local_file.notes", "update")
        ])
    );
    let notes = plan["changes"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["address"] == "local_file.notes"))
        .expect("notes in the plan");
    assert_eq!(
        notes["drift"]["live"]["content"],
        "line one\nline 2, edited by hand\n"
    );

    sb.run(&["apply", "-s", "stack.toml", "--auto-approve"])
        .success();
    assert_eq!(sb.read("out/notes.txt"), "line one\nline two\n");
    sb.run(&["plan", "-s", "stack.toml", "--detailed-exitcode"])
        .expect_code(0);
}

#[test]
fn drift_deleted_file_is_shown_and_created_again() {
    let sb = Sandbox::with_fixture("drift");
    sb.run(&["apply", "-s", "stack.toml", "--auto-approve"])
        .success();
    std::fs::remove_file(sb.join("out/config.txt")).expect("delete by hand");
    let run = sb.run(&["plan", "-s", "stack.toml", "--detailed-exitcode"]);
    run.expect_code(2);
    sb.expect("drift/deleted.stdout", &run.stdout);

    let run = sb.run(&["apply", "-s", "stack.toml", "--auto-approve"]);
    run.success();
    assert!(
        run.stdout
            .contains("Apply complete! Resources: 1 added, 0 changed, 0 replaced, 0 destroyed."),
        "{}",
        run.stdout
    );
    assert_eq!(sb.read("out/config.txt"), "debug = false\n");
    sb.run(&["plan", "-s", "stack.toml", "--detailed-exitcode"])
        .expect_code(0);
}

/// A multi-line value that becomes unknown (a dependency changes) is shown as
/// `(known after apply)`, never as the engine's internal placeholder.
#[test]
fn plan_shows_known_after_apply_for_a_multiline_value() {
    let sb = applied_happy();
    let run = sb.run(&["plan", "-s", "stack.toml", "--var", "greeting=hi"]);
    run.success();
    assert!(
        !run.stdout.contains("terrain:"),
        "an internal placeholder leaked into the plan:\n{}",
        run.stdout
    );
    sb.expect("happy/plan_unknown_multiline.stdout", &run.stdout);
}

#[test]
fn state_mv_takes_a_resource_into_an_instance_and_a_module_and_the_plan_follows() {
    let sb = applied_happy();
    let run = sb.run(&[
        "state",
        "mv",
        "local_file.secret",
        "local_file.secret[0]",
        "-s",
        "stack.toml",
    ]);
    run.success();
    assert_eq!(
        run.stdout,
        "Moved local_file.secret to local_file.secret[0].\n"
    );
    // The block becomes count = 1: instance [0] is the object already made.
    sb.edit(
        "stack.toml",
        "[local_file.secret]\n",
        "[local_file.secret]\ncount = 1\n",
    );
    let plan = sb.run(&["plan", "-s", "stack.toml", "--detailed-exitcode"]);
    plan.expect_code(0);
    let run = sb.run(&[
        "state",
        "mv",
        "local_file.secret[0]",
        "module.files[\"a\"].local_file.secret",
        "-s",
        "stack.toml",
    ]);
    run.success();
    let list = sb.run(&["state", "list", "-s", "stack.toml"]);
    list.success();
    assert!(
        list.stdout
            .lines()
            .any(|l| l == "module.files[\"a\"].local_file.secret"),
        "{}",
        list.stdout
    );
}
