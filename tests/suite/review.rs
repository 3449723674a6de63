//! `terrain plan --markdown`, the plan as a pull-request comment, through the CLI: the
//! four scenario stacks on the sandbox render as `tests/expected/markdown/` says (the
//! gke-accelerators one with the sandbox's multi-line capacity warning); a plan that
//! replaces, updates and destroys local resources says why each replace happens, puts
//! each destroy in bold and never shows a secret; a plan with nothing to do is one line;
//! `--markdown --json` is refused; a prevent_destroy refusal prints no Markdown.
//!
//! `UPDATE_EXPECTED=1` rewrites the expected files (review them).

use crate::common;

use common::Sandbox as Work;

use common::SCENARIO_STACKS as STACKS;

/// A work directory holding the stacks these tests use, with their shared modules.
fn with_stacks() -> Work {
    common::with_stacks(&[STACKS.as_slice(), &["modules"]].concat())
}

#[test]
fn the_scenario_stacks_render_as_pull_request_comments() {
    let work = with_stacks();
    for s in STACKS {
        let run = work.run(&[
            "plan",
            "-s",
            &format!("stacks/{s}"),
            "--sandbox",
            "--markdown",
        ]);
        run.success();
        assert_eq!(run.stderr, "", "{s}: nothing on stderr");
        assert!(
            !run.stdout.contains('\x1b'),
            "{s}: no colour in Markdown:\n{}",
            run.stdout
        );
        work.expect(&format!("markdown/{s}.md"), &run.stdout);
    }
}

/// Local kinds only: no sandbox needed. `config` will be replaced (its path forces it),
/// `notes` updated, `secret` updated with a new secret, `scratch` and `run` destroyed.
const STACK: &str = r#"[stack]
name = "review"

[variables.token]
default = "tok-5ecret-42"
sensitive = true

[local_file.config]
path = "out/config.txt"
content = "mode = fast\n"

[local_file.notes]
path = "out/notes.txt"
content = "v1\n"

[local_file.secret]
path = "out/secret.txt"
sensitive_content = "token=${var.token}\n"

[local_file.scratch]
path = "out/scratch.txt"
content = "scratch\n"

[random_id.run]
byte_length = 4
"#;

#[test]
fn replaces_say_why_destroys_are_bold_and_secrets_never_show() {
    let work = Work::new();
    work.write("stack.toml", STACK);
    work.run(&["apply", "-s", "stack.toml", "--auto-approve"])
        .success();

    let unchanged = work.run(&["plan", "-s", "stack.toml", "--markdown"]);
    unchanged.success();
    assert_eq!(
        unchanged.stdout,
        "### terrain plan: review — no changes, live infrastructure matches the stack\n"
    );

    work.edit("stack.toml", "out/config.txt", "out/config-v2.txt");
    work.edit(
        "stack.toml",
        "content = \"v1\\n\"",
        "content = \"v2 | `x`\\n\"",
    );
    work.edit("stack.toml", "tok-5ecret-42", "tok-5ecret-43");
    work.edit(
        "stack.toml",
        "[local_file.scratch]\npath = \"out/scratch.txt\"\ncontent = \"scratch\\n\"\n",
        "",
    );
    work.edit("stack.toml", "[random_id.run]\nbyte_length = 4\n", "");
    let run = work.run(&[
        "plan",
        "-s",
        "stack.toml",
        "--markdown",
        "--detailed-exitcode",
        "--out",
        "review.plan",
    ]);
    run.expect_code(2);
    let md = &run.stdout;
    for line in [
        "0 to add, **2 to change**, **1 to replace**, **2 to destroy**",
        "| `-/+` | **`local_file.config`** | local_file | `path` forces replacement |",
        "| `~` | `local_file.notes` | local_file | `content` |",
        "| `~` | `local_file.secret` | local_file | `sensitive_content` |",
        "| `-` | **`local_file.scratch`** | local_file | removed from the stack |",
        "| `-` | **`random_id.run`** | random_id | removed from the stack |",
    ] {
        assert!(
            md.lines().any(|l| l == line),
            "want the line `{line}` in:\n{md}"
        );
    }
    for secret in ["tok-5ecret-42", "tok-5ecret-43"] {
        assert!(!run.all_output().contains(secret), "{secret} shown:\n{md}");
    }
    assert!(
        md.ends_with("```\n\n</details>\n"),
        "the Markdown ends the comment, the saved-plan line is left out:\n{md}"
    );
    assert!(work.exists("review.plan"), "--out still saves the plan");
    work.expect("markdown/replace-and-destroy.md", md);
}

#[test]
fn markdown_and_json_are_refused_together() {
    let work = Work::new();
    work.write("stack.toml", STACK);
    let run = work.run(&["plan", "-s", "stack.toml", "--markdown", "--json"]);
    run.failure();
    assert_eq!(run.stdout, "");
    assert!(
        run.stderr
            .contains("'--markdown' cannot be used with '--json'"),
        "{}",
        run.stderr
    );
    assert!(!work.exists("state"), "a refused command plans nothing");
}

/// Planning refuses to replace a resource with prevent_destroy, so no comment could
/// show one: the refusal is the error, with no Markdown on stdout.
#[test]
fn a_prevent_destroy_refusal_prints_no_markdown() {
    let work = Work::new();
    work.write(
        "stack.toml",
        "[stack]\nname = \"guarded\"\n\n[local_file.keep]\npath = \"out/keep.txt\"\ncontent = \"precious\\n\"\nlifecycle = { prevent_destroy = true }\n",
    );
    work.run(&["apply", "-s", "stack.toml", "--auto-approve"])
        .success();
    work.edit("stack.toml", "out/keep.txt", "out/keep-v2.txt");
    let run = work.run(&["plan", "-s", "stack.toml", "--markdown"]);
    run.failure();
    assert_eq!(run.stdout, "");
    assert_eq!(
        run.stderr,
        "Error: local_file.keep: lifecycle.prevent_destroy is set, but this plan would replace it (path forces replacement); remove prevent_destroy first if this is intended\n"
    );
}
