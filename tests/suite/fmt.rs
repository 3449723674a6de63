//! `terrain fmt`: the corpus of messy stack files under `tests/fixtures/fmt/` formatted
//! to `tests/expected/fmt/` (each expected file formatted again unchanged, each
//! formatting keeping the file's meaning), the command's exit codes, `--check`,
//! `--diff`, in-place rewrites, files that do not parse, `--recursive`, the example
//! stacks still validating the same once formatted (on a copy), and the example stacks
//! being kept formatted (the CI check).

use crate::common;

use std::fs;
use std::path::PathBuf;

use common::{manifest_dir, Sandbox};
use serde_json::{Map, Value};
use terrain::stack::fmt::format;

/// The corpus: every `tests/fixtures/fmt/*.toml`, by file name.
fn corpus() -> Vec<(String, String)> {
    let dir = manifest_dir().join("tests/fixtures/fmt");
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("list {}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    assert!(files.len() >= 5, "the corpus has its files");
    files
        .into_iter()
        .map(|p| {
            let name = p
                .file_name()
                .expect("a file name")
                .to_string_lossy()
                .into_owned();
            let text =
                fs::read_to_string(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()));
            (name, text)
        })
        .collect()
}

/// The data a TOML text means, as JSON (dates and times as their text).
fn meaning(text: &str) -> Value {
    let doc: toml_edit::DocumentMut = text
        .parse()
        .unwrap_or_else(|e| panic!("parse:\n{e}\n{text}"));
    table(doc.as_table())
}

fn table(t: &toml_edit::Table) -> Value {
    let mut map = Map::new();
    for (k, item) in t.iter() {
        map.insert(k.to_string(), item_value(item));
    }
    Value::Object(map)
}

fn item_value(item: &toml_edit::Item) -> Value {
    match item {
        toml_edit::Item::None => Value::Null,
        toml_edit::Item::Value(v) => value(v),
        toml_edit::Item::Table(t) => table(t),
        toml_edit::Item::ArrayOfTables(a) => Value::Array(a.iter().map(table).collect()),
    }
}

fn value(v: &toml_edit::Value) -> Value {
    use toml_edit::Value as V;
    match v {
        V::String(s) => Value::String(s.value().clone()),
        V::Integer(i) => Value::from(*i.value()),
        V::Float(f) => Value::String(format!("float {}", f.value())),
        V::Boolean(b) => Value::Bool(*b.value()),
        V::Datetime(d) => Value::String(format!("datetime {}", d.value())),
        V::Array(a) => Value::Array(a.iter().map(value).collect()),
        V::InlineTable(t) => {
            let mut map = Map::new();
            for (k, v) in t.iter() {
                map.insert(k.to_string(), value(v));
            }
            Value::Object(map)
        }
    }
}

/// The keys of every table in the order they come, for checking that order is kept.
fn key_order(v: &Value, path: &str, out: &mut Vec<String>) {
    match v {
        Value::Object(map) => {
            for (k, v) in map {
                let p = format!("{path}.{k}");
                out.push(p.clone());
                key_order(v, &p, out);
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                key_order(v, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

#[test]
fn the_corpus_formats_to_the_expected_files() {
    for (name, text) in corpus() {
        let out = format(&text).unwrap_or_else(|e| panic!("{name}:{e}"));
        assert_eq!(
            common::normalise(&out),
            out,
            "{name}: keep timestamps, UUIDs and hex words out of the corpus, so the expected file is exactly the output"
        );
        common::expect_file(&format!("fmt/{name}"), &out);
    }
}

#[test]
fn the_expected_files_are_already_formatted() {
    let dir = manifest_dir().join("tests/expected/fmt");
    let mut seen = 0;
    for (name, _) in corpus() {
        let path = dir.join(&name);
        let text =
            fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        let again = format(&text).unwrap_or_else(|e| panic!("{name}:{e}"));
        assert_eq!(
            again, text,
            "formatting expected/fmt/{name} again changed it"
        );
        seen += 1;
    }
    assert!(seen >= 5);
}

#[test]
fn formatting_keeps_the_meaning_and_the_order() {
    for (name, text) in corpus() {
        let out = format(&text).unwrap_or_else(|e| panic!("{name}:{e}"));
        let (before, after) = (meaning(&text), meaning(&out));
        assert_eq!(before, after, "{name}: formatting changed the data");
        let (mut order_before, mut order_after) = (Vec::new(), Vec::new());
        key_order(&before, "", &mut order_before);
        key_order(&after, "", &mut order_after);
        assert_eq!(
            order_before, order_after,
            "{name}: formatting reordered keys"
        );
    }
}

#[test]
fn formatting_keeps_every_comment() {
    for (name, text) in corpus() {
        let out = format(&text).unwrap_or_else(|e| panic!("{name}:{e}"));
        let comments = |t: &str| -> Vec<String> {
            t.lines()
                .filter_map(|l| l.find("# ").map(|i| l[i..].trim_end().to_string()))
                .collect()
        };
        // Every comment of the input (and every `# ` inside strings) is still there, in
        // the same order.
        assert_eq!(comments(&text), comments(&out), "{name}");
    }
}

const MESSY: &str = "[stack]\nname=\"s\"\ndescription = \"d\"\n";
const TIDY: &str = "[stack]\nname        = \"s\"\ndescription = \"d\"\n";

#[test]
fn check_exits_0_when_formatted_and_1_listing_the_files_when_not() {
    let work = Sandbox::new();
    work.write("a.toml", TIDY);
    work.write("b.toml", TIDY);
    let run = work.run(&["fmt", "--check"]);
    run.success();
    assert_eq!(run.all_output(), "");

    work.write("b.toml", MESSY);
    let run = work.run(&["fmt", "--check"]);
    run.failure();
    assert_eq!(run.stdout, "b.toml\n");
    assert_eq!(run.stderr, "");
    assert_eq!(work.read("b.toml"), MESSY, "--check writes nothing");

    let run = work.run(&["fmt", "--check", "a.toml"]);
    run.success();
}

#[test]
fn diff_shows_the_changes() {
    let work = Sandbox::new();
    work.write("stack.toml", MESSY);
    let run = work.run(&["fmt", "--check", "--diff"]);
    run.failure();
    work.expect("fmt/check-diff.txt", &run.stdout);
    assert_eq!(
        work.read("stack.toml"),
        MESSY,
        "--check --diff writes nothing"
    );

    // Like `terraform fmt -diff`: without --check the diff is shown and the file written.
    let run = work.run(&["fmt", "--diff", "stack.toml"]);
    run.success();
    work.expect("fmt/check-diff.txt", &run.stdout);
    assert_eq!(work.read("stack.toml"), TIDY);
}

#[test]
fn fmt_rewrites_in_place_keeping_the_mode() {
    use std::os::unix::fs::PermissionsExt;
    let work = Sandbox::with_fixture("fmt");
    let path = work.join("stack.toml");
    fs::set_permissions(&path, fs::Permissions::from_mode(0o640)).expect("chmod");
    let before: Vec<String> = work.files();

    let run = work.run(&["fmt"]);
    run.success();
    assert_eq!(
        run.stdout,
        "arrays_and_inline.toml\ncomments.toml\ndotted_and_moved.toml\nstack.toml\nstrings.toml\n"
    );
    for (name, text) in corpus() {
        let expected = format(&text).expect("the corpus formats");
        assert_eq!(work.read(&name), expected, "{name}");
    }
    assert_eq!(work.mode("stack.toml"), 0o640);
    assert_eq!(work.files(), before, "no temporary file is left behind");

    // A second run has nothing to do.
    let run = work.run(&["fmt"]);
    run.success();
    assert_eq!(run.all_output(), "");
    work.run(&["fmt", "--check", "."]).success();
}

#[test]
fn a_file_that_does_not_parse_is_located_and_left_alone() {
    let work = Sandbox::new();
    let bad = "[stack]\nname = \"s\"\nregion = [\"a\",\n  \"b\"\nzone = 1\n";
    work.write("bad.toml", bad);
    work.write("good.toml", MESSY);
    let run = work.run(&["fmt"]);
    run.failure();
    assert_eq!(
        run.stdout, "good.toml\n",
        "the other files are still formatted"
    );
    assert_eq!(
        run.stderr,
        "Error: bad.toml:5:1: missing comma between array elements, expected `,`; the file was left as it is\n"
    );
    assert_eq!(work.read("bad.toml"), bad);
    assert_eq!(work.read("good.toml"), TIDY);

    let run = work.run(&["fmt", "--check", "bad.toml"]);
    run.failure();
    assert!(run.stderr.contains("bad.toml:5:1: "), "{}", run.stderr);

    let run = work.run(&["fmt", "missing.toml"]);
    run.failure();
    assert!(
        run.stderr.starts_with("Error: read missing.toml: "),
        "{}",
        run.stderr
    );
}

#[test]
fn recursive_descends_but_skips_state_target_and_hidden_directories() {
    let work = Sandbox::new();
    for rel in [
        "a.toml",
        "sub/b.toml",
        "sub/deeper/c.toml",
        "state/d.toml",
        "target/e.toml",
        ".hidden/f.toml",
    ] {
        work.write(rel, MESSY);
    }
    work.write("sub/notes.txt", MESSY);

    let run = work.run(&["fmt", "--check"]);
    run.failure();
    assert_eq!(
        run.stdout, "a.toml\n",
        "without --recursive only the directory's files"
    );

    let run = work.run(&["fmt", "--check", "--recursive"]);
    run.failure();
    assert_eq!(run.stdout, "a.toml\nsub/b.toml\nsub/deeper/c.toml\n");

    let run = work.run(&["fmt", "-r", "sub"]);
    run.success();
    assert_eq!(run.stdout, "sub/b.toml\nsub/deeper/c.toml\n");
    assert_eq!(work.read("sub/deeper/c.toml"), TIDY);
    assert_eq!(work.read("state/d.toml"), MESSY);
    assert_eq!(work.read("sub/notes.txt"), MESSY);
}

/// The example stacks, and the `--env`s each is checked with.
const EXAMPLES: [(&str, &[&str]); 7] = [
    ("quickstart", &[]),
    ("gke-batch-ml", &[]),
    ("gke-gpu-pipelines", &[]),
    ("eks-sagemaker", &[]),
    ("gke-accelerators", &[]),
    ("multi-region-gpu", &[]),
    ("team", &["staging", "prod"]),
];

#[test]
fn the_example_stacks_validate_the_same_once_formatted() {
    // A copy: the example stacks themselves are never written.
    let work = Sandbox::new();
    common::copy_dir(&manifest_dir().join("stacks"), &work.join("stacks"));
    let validate = |work: &Sandbox| -> Vec<String> {
        let mut out = Vec::new();
        for (stack, envs) in EXAMPLES {
            let dir = format!("stacks/{stack}");
            let mut runs = vec![work.run(&["validate", "-s", &dir])];
            for env in envs {
                runs.push(work.run(&["validate", "-s", &dir, "--env", env]));
            }
            for run in runs {
                run.success();
                out.push(run.stdout.clone());
            }
        }
        out
    };
    let before = validate(&work);
    let run = work.run(&["fmt", "--recursive", "stacks"]);
    run.success();
    let after = validate(&work);
    assert_eq!(before, after);
    // Formatted once, they stay formatted.
    work.run(&["fmt", "--check", "--recursive", "stacks"])
        .success();
    // Every file keeps its data.
    for file in work.files() {
        if file.ends_with(".toml") {
            let original = fs::read_to_string(manifest_dir().join(&file))
                .unwrap_or_else(|e| panic!("read {file}: {e}"));
            assert_eq!(meaning(&original), meaning(&work.read(&file)), "{file}");
        }
    }
}

/// The example stacks are kept in `terrain fmt`'s layout (CI runs this): a file it would
/// change fails the test, named in the message.
#[test]
fn the_example_stacks_are_formatted() {
    let root = manifest_dir();
    // From the repository root, as a developer or CI would run it; --check writes nothing.
    let out = Sandbox::new()
        .command(&["fmt", "--check", "-r", "stacks"], &[])
        .current_dir(&root)
        .output()
        .expect("run terrain fmt --check -r stacks");
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && listed.is_empty() && out.stderr.is_empty(),
        "`terrain fmt --check -r stacks` exited with {:?}; run `cargo run -- fmt -r stacks` to format:\n{listed}{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );

    // fmt reads only `.toml` files: on a copy, formatting every example changes no file,
    // the policies (`.rego`), READMEs, YAML, JSON and datasets included.
    let work = Sandbox::new();
    common::copy_dir(&root.join("stacks"), &work.join("stacks"));
    let files = work.files();
    assert!(
        files
            .iter()
            .any(|f| f.starts_with("stacks/policies/") && f.ends_with(".rego")),
        "the policies are among the files: {files:?}"
    );
    let run = work.run(&["fmt", "-r", "stacks"]);
    run.success();
    assert_eq!(run.all_output(), "", "nothing to rewrite");
    assert_eq!(work.files(), files, "no file added or removed");
    for file in &files {
        let original = fs::read(root.join(file)).unwrap_or_else(|e| panic!("read {file}: {e}"));
        let after = fs::read(work.join(file)).unwrap_or_else(|e| panic!("read {file}: {e}"));
        assert!(original == after, "{file} was changed");
    }
}

/// `common::set_value`, which the tests editing the example stacks use: it finds a value
/// whatever the alignment, keeps the alignment, and fails loudly rather than leave a
/// stack unedited.
#[test]
fn set_value_edits_a_value_whatever_the_alignment_and_fails_when_it_cannot() {
    use common::set_value;
    let text = "[pool]\nname         = \"gpu\"\ncluster_name = \"c\"\nmax_nodes    = 10240\nscaling      = { min = 0, max = 4 }\n\n[share]\nmax_nodes = 1024\n";
    assert_eq!(
        set_value(text, "max_nodes", "1024", "2048"),
        text.replace("max_nodes = 1024", "max_nodes = 2048"),
        "the whole value only: 10240 is not 1024"
    );
    assert_eq!(
        set_value(text, "name", "\"gpu\"", "\"tpu\""),
        text.replace("\"gpu\"", "\"tpu\""),
        "the key itself only: cluster_name is not name; the alignment stays"
    );
    assert_eq!(
        set_value(text, "max", "4", "6"),
        text.replace("max = 4", "max = 6"),
        "an inline table's entry"
    );
    let panic_message = |text: &str, key: &str, old: &str| -> String {
        std::panic::catch_unwind(|| set_value(text, key, old, "x"))
            .expect_err("set_value panics")
            .downcast::<String>()
            .map(|m| *m)
            .unwrap_or_default()
    };
    let absent = panic_message(text, "name", "\"tpu\"");
    assert!(
        absent.contains("no `name = \"tpu\"`") && absent.contains("2: name         = \"gpu\""),
        "names the key and shows where it is set: {absent}"
    );
    let absent = panic_message(text, "nodes", "1024");
    assert!(absent.contains("no `nodes = 1024`"), "{absent}");
    let twice = format!("{text}\n[other]\nname = \"gpu\"\n");
    let ambiguous = panic_message(&twice, "name", "\"gpu\"");
    assert!(
        ambiguous.contains("`name = \"gpu\"` is ambiguous: it is set on 2 lines"),
        "{ambiguous}"
    );
}
