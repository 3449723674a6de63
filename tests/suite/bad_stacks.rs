//! The plan is a promise: a corpus of bad stacks, each of which `terrain validate` or
//! `terrain plan --sandbox` must refuse before anything is made.
//!
//! Every directory under `tests/fixtures/bad-stacks/` is one case: the stack's files
//! (`stack.toml`, any other `.toml` of a directory stack, and the local files it
//! names: a `pipeline.json`, manifests, datasets, a kubeconfig) and `expect.toml`:
//!
//! ```toml
//! command = "plan"                       # or "validate"; plan runs with --sandbox
//! class = "placement"                    # which class of mistake (see CLASSES)
//! same_stack_cluster = true              # the stack creates the cluster it uses
//! vars = ["db_password=hunter2-s3cret"]  # optional --var values
//! args = ["--target", "gke_cluster.x"]   # optional extra arguments
//! contains = ["stack.toml:14:19", "instance_types.1"]   # substrings of stderr
//! absent = ["stack.toml:38:"]            # optional: substrings stderr must not hold
//! secret = "hunter2-s3cret"              # optional: in neither stdout nor stderr
//! ```
//!
//! Each case runs in its own temporary directory holding a copy of the case (without
//! `expect.toml`) as a directory stack: `terrain COMMAND -s . [--sandbox] [--var …]
//! [ARGS…]`. It must exit with code 1, print every `contains` substring on stderr, no
//! `absent` one, and the secret nowhere (compared case-insensitively, so a rewritten
//! suggestion such as a lowercased bucket name counts too). Substrings are compared
//! with whitespace and the `│` of wrapped message lines left out (the diagnostics wrap
//! long messages, at spaces and at hyphens), and one ending in a digit must not be
//! followed by another (`stack.toml:11:1` does not match `stack.toml:11:12`). A
//! `validate` run must not create `state/`. After a `--sandbox` run the sandbox must
//! hold nothing (`terrain sandbox list` in the same directory says "The sandbox holds
//! nothing.": no cluster, node pool, bucket, object, Filestore instance or pipeline)
//! and no state file beside it may record a resource.
//!
//! All cases run, and every failure is reported at the end with the case, its command
//! line and both outputs, with counts per class. Locations follow the diagnostics'
//! convention: `file:line:col` of the offending value, 1-based, a string's column
//! being that of its first character inside the quotes, a table's or list's its
//! opening bracket. The cases are written by `tests/fixtures/bad-stacks/generate.py`
//! from markers placed in the stack text, so positions are counted by a program, not
//! by hand: change a case there and rerun it (`python3 tests/fixtures/bad-stacks/generate.py`).

use crate::common;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::{copy_dir, fixture_path, Sandbox};

/// The classes of mistakes the corpus covers; every case names one.
const CLASSES: &[(&str, &str)] = &[
    (
        "pipeline-definition",
        "SageMaker pipeline definitions (named directly and through an s3_object)",
    ),
    ("manifest", "kubernetes_manifest files and inline manifests"),
    (
        "placement",
        "Job placement contradicting a node pool or the cluster",
    ),
    (
        "local-data",
        "dataset sources and queue item directories and globs",
    ),
    ("cycles", "self-references and longer cycles"),
    ("outputs", "outputs naming what does not exist"),
    (
        "duplicates",
        "definitions repeated across two files of one stack",
    ),
    ("regions", "regions and zones"),
    (
        "secrets",
        "invalid values from sensitive variables, never shown",
    ),
    (
        "located-checks",
        "kind and provider checks located at the value",
    ),
    ("usage", "command-line mistakes"),
    (
        "reuse",
        "count, for_each, modules, moved entries and provider instances",
    ),
    (
        "backend",
        "where the state lives: types, settings, references, secrets",
    ),
    ("encoding", "invalid UTF-8"),
    (
        "more",
        "types, keys, required fields, references, env, versions, names, capacities",
    ),
];

/// The fewest cases the corpus may hold.
const MIN_CASES: usize = 100;

/// How long one run of the binary may take before it counts as hung.
const RUN_TIMEOUT: Duration = Duration::from_secs(90);

/// What the sandbox says when it holds nothing.
const EMPTY_SANDBOX: &str = "The sandbox holds nothing.";

#[derive(Debug)]
struct Case {
    name: String,
    dir: PathBuf,
    command: String,
    class: String,
    same_stack_cluster: bool,
    vars: Vec<String>,
    args: Vec<String>,
    contains: Vec<String>,
    absent: Vec<String>,
    secret: Option<String>,
}

fn corpus_dir() -> PathBuf {
    fixture_path("bad-stacks")
}

/// Every case, sorted by name. Panics on a malformed `expect.toml`.
fn cases() -> Vec<Case> {
    let dir = corpus_dir();
    let mut names: Vec<String> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("list {}: {e}", dir.display()))
        .filter_map(Result::ok)
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names.iter().map(|n| read_case(&dir.join(n), n)).collect()
}

fn read_case(dir: &Path, name: &str) -> Case {
    let path = dir.join("expect.toml");
    let text = fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("case {name}: read {}: {e}", path.display()));
    let table: toml::Table = toml::from_str(&text)
        .unwrap_or_else(|e| panic!("case {name}: expect.toml is not TOML: {e}"));
    const KEYS: [&str; 8] = [
        "command",
        "class",
        "same_stack_cluster",
        "vars",
        "args",
        "contains",
        "absent",
        "secret",
    ];
    for key in table.keys() {
        assert!(
            KEYS.contains(&key.as_str()),
            "case {name}: unknown key `{key}` in expect.toml (keys: {})",
            KEYS.join(", ")
        );
    }
    let string = |key: &str| -> Option<String> {
        table.get(key).map(|v| {
            v.as_str()
                .unwrap_or_else(|| panic!("case {name}: `{key}` must be a string"))
                .to_string()
        })
    };
    let strings = |key: &str| -> Vec<String> {
        table
            .get(key)
            .map(|v| {
                v.as_array()
                    .unwrap_or_else(|| panic!("case {name}: `{key}` must be a list of strings"))
                    .iter()
                    .map(|s| {
                        s.as_str()
                            .unwrap_or_else(|| {
                                panic!("case {name}: `{key}` must be a list of strings")
                            })
                            .to_string()
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let command = string("command").unwrap_or_else(|| "plan".to_string());
    assert!(
        command == "plan" || command == "validate",
        "case {name}: command must be \"plan\" or \"validate\", not {command:?}"
    );
    let same_stack_cluster = table
        .get("same_stack_cluster")
        .map(|v| {
            v.as_bool()
                .unwrap_or_else(|| panic!("case {name}: `same_stack_cluster` must be a boolean"))
        })
        .unwrap_or(false);
    Case {
        name: name.to_string(),
        dir: dir.to_path_buf(),
        command,
        class: string("class").unwrap_or_else(|| panic!("case {name}: no `class`")),
        same_stack_cluster,
        vars: strings("vars"),
        args: strings("args"),
        contains: strings("contains"),
        absent: strings("absent"),
        secret: string("secret").filter(|s| !s.is_empty()),
    }
}

/// The stack's own `.toml` files (everything but `expect.toml`), lossily decoded.
fn stack_texts(case: &Case) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for entry in fs::read_dir(&case.dir).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".toml") && name != "expect.toml" {
            let bytes = fs::read(entry.path()).unwrap_or_default();
            out.push((name, String::from_utf8_lossy(&bytes).into_owned()));
        }
    }
    out
}

/// One finished run: exit code (`None`: killed by a signal or the timeout) and output.
struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    timed_out: bool,
}

/// Runs `cmd` to completion or until [`RUN_TIMEOUT`], capturing both streams.
fn run_with_timeout(mut cmd: Command) -> Result<Ran, String> {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("start terrain: {e}"))?;
    let mut out_pipe = child.stdout.take().ok_or("no stdout pipe")?;
    let mut err_pipe = child.stderr.take().ok_or("no stderr pipe")?;
    let out_reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = out_pipe.read_to_end(&mut buf);
        buf
    });
    let err_reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = err_pipe.read_to_end(&mut buf);
        buf
    });
    let deadline = Instant::now() + RUN_TIMEOUT;
    let mut timed_out = false;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() >= deadline => {
                timed_out = true;
                // The child this test started, by its handle.
                let _ = child.kill();
                break child.wait().ok();
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => return Err(format!("wait for terrain: {e}")),
        }
    };
    let stdout = out_reader.join().unwrap_or_default();
    let stderr = err_reader.join().unwrap_or_default();
    Ok(Ran {
        code: status.and_then(|s| s.code()),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
        timed_out,
    })
}

/// The emulator's durations scaled to nothing, should a run get as far as waiting.
const ENV: &[(&str, &str)] = &[("TERRAIN_SANDBOX_TIME_SCALE", "0")];

/// The command line of a case, relative to its working directory.
fn case_args(case: &Case) -> Vec<String> {
    let mut args = vec![case.command.clone(), "-s".to_string(), ".".to_string()];
    if case.command == "plan" {
        args.push("--sandbox".to_string());
    }
    for v in &case.vars {
        args.push("--var".to_string());
        args.push(v.clone());
    }
    args.extend(case.args.iter().cloned());
    args
}

/// A working directory holding the case's files, without `expect.toml`.
fn prepare(case: &Case) -> Sandbox {
    let sb = Sandbox::new();
    let entries =
        fs::read_dir(&case.dir).unwrap_or_else(|e| panic!("list {}: {e}", case.dir.display()));
    for entry in entries.flatten() {
        let name = entry.file_name();
        if name == "expect.toml" {
            continue;
        }
        let from = entry.path();
        let to = sb.path().join(&name);
        if from.is_dir() {
            copy_dir(&from, &to);
        } else {
            fs::copy(&from, &to).unwrap_or_else(|e| panic!("copy {}: {e}", from.display()));
        }
    }
    sb
}

/// What went wrong with one case (empty: it passed), and the outputs to show.
struct Outcome {
    problems: Vec<String>,
    command_line: String,
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn run_case(case: &Case) -> Outcome {
    let sb = prepare(case);
    let args = case_args(case);
    let arg_refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let command_line = format!(
        "(cd {} && terrain {})",
        case.dir.display(),
        args.iter()
            .map(|a| shell_quote(a))
            .collect::<Vec<_>>()
            .join(" ")
    );
    let mut problems = Vec::new();
    let ran = match run_with_timeout(sb.command(&arg_refs, ENV)) {
        Ok(r) => r,
        Err(e) => {
            return Outcome {
                problems: vec![e],
                command_line,
                code: None,
                stdout: String::new(),
                stderr: String::new(),
            }
        }
    };
    if ran.timed_out {
        problems.push(format!(
            "still running after {}s; killed",
            RUN_TIMEOUT.as_secs()
        ));
    }
    if ran.code != Some(1) {
        problems.push(format!("exit code {:?}, expected 1", ran.code));
    }
    for want in &case.contains {
        if !holds(&ran.stderr, want) {
            problems.push(format!("stderr lacks {want:?}"));
        }
    }
    for unwanted in &case.absent {
        if holds(&ran.stderr, unwanted) {
            problems.push(format!("stderr holds {unwanted:?}, which it must not"));
        }
    }
    if let Some(secret) = &case.secret {
        let secret = secret.to_lowercase();
        // Also across a wrapped line: compared without whitespace.
        let shows = |text: &str| squeezed(&text.to_lowercase()).contains(&squeezed(&secret));
        if shows(&ran.stdout) {
            problems.push(format!("stdout shows the secret {secret:?} (any case)"));
        }
        if shows(&ran.stderr) {
            problems.push(format!("stderr shows the secret {secret:?} (any case)"));
        }
    }
    if case.command == "plan" {
        problems.extend(sandbox_problems(&sb));
    } else if sb.exists("state") {
        problems.push("validate created state/".to_string());
    }
    Outcome {
        problems,
        command_line,
        code: ran.code,
        stdout: ran.stdout,
        stderr: ran.stderr,
    }
}

/// Whether the sandbox of `sb`'s directory holds anything, asked two ways: the
/// emulator's inventory (`terrain sandbox list`) and the state files beside it.
fn sandbox_problems(sb: &Sandbox) -> Vec<String> {
    let mut problems = Vec::new();
    match run_with_timeout(sb.command(&["sandbox", "list", "--dir", "state/sandbox"], ENV)) {
        Ok(list) if list.code == Some(0) && list.stdout.trim() == EMPTY_SANDBOX => {}
        Ok(list) => problems.push(format!(
            "after the run, `terrain sandbox list` exited {:?} and printed:\n{}{}",
            list.code, list.stdout, list.stderr
        )),
        Err(e) => problems.push(format!("terrain sandbox list: {e}")),
    }
    for dir in ["state", "state/sandbox"] {
        let Ok(entries) = fs::read_dir(sb.join(dir)) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.ends_with(".json") || ["cloud.json", "serve.json"].contains(&name.as_str()) {
                continue;
            }
            if dir == "state" {
                problems.push(format!("a --sandbox run wrote real state {dir}/{name}"));
                continue;
            }
            let text = fs::read_to_string(&path).unwrap_or_default();
            let recorded = serde_json::from_str::<serde_json::Value>(&text)
                .ok()
                .and_then(|v| {
                    v.get("resources")
                        .and_then(|r| r.as_object())
                        .map(|r| r.len())
                })
                .unwrap_or(0);
            if recorded > 0 {
                problems.push(format!(
                    "the sandbox state {dir}/{name} records {recorded} resource(s)"
                ));
            }
        }
    }
    problems
}

/// `text` without whitespace and the `│` that continues a wrapped message line.
fn squeezed(text: &str) -> String {
    text.chars()
        .filter(|c| !c.is_whitespace() && *c != '│')
        .collect()
}

/// Whether `haystack` holds `needle`, wrapping and whitespace aside; a needle ending in
/// a digit must not be followed by one (a location is not a prefix of another).
fn holds(haystack: &str, needle: &str) -> bool {
    let (hay, needle) = (squeezed(haystack), squeezed(needle));
    if needle.is_empty() {
        return true;
    }
    let ends_in_digit = needle.ends_with(|c: char| c.is_ascii_digit());
    let mut from = 0;
    while let Some(i) = hay[from..].find(&needle) {
        let end = from + i + needle.len();
        if !ends_in_digit || !hay[end..].starts_with(|c: char| c.is_ascii_digit()) {
            return true;
        }
        from += i + 1;
        while !hay.is_char_boundary(from) {
            from += 1;
        }
    }
    false
}

fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// Every case, all run; fails once at the end listing every case that did not hold.
#[test]
fn matching_ignores_wrapping_and_keeps_locations_apart() {
    let stderr = "  × ./stack.toml:58:10: eks_node_group.system.labels: value (sensitive\n  │ value) of n1-\n  │ standard-8\n";
    assert!(holds(stderr, "stack.toml:58:10"));
    assert!(!holds(stderr, "stack.toml:58:1"));
    assert!(holds(stderr, "stack.toml:58:"));
    assert!(holds(stderr, "(sensitive value)"));
    assert!(holds(stderr, "n1-standard-8"));
    assert!(!holds(stderr, "stack.toml:5"));
    assert!(holds("a:1:2 and a:1:23", "a:1:2"));
}

#[test]
fn every_bad_stack_is_refused_before_anything_is_made() {
    let cases = cases();
    assert!(
        !cases.is_empty(),
        "no cases under {}",
        corpus_dir().display()
    );
    let started = Instant::now();
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<(usize, Outcome)>> = Mutex::new(Vec::new());
    let workers = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .clamp(1, 4);
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(case) = cases.get(i) else {
                    break;
                };
                let outcome = run_case(case);
                results
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push((i, outcome));
            });
        }
    });
    let mut results = results
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    results.sort_by_key(|(i, _)| *i);

    // Per class: (cases, passed).
    let mut per_class: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    let mut failed: Vec<(&Case, &Outcome)> = Vec::new();
    for (i, outcome) in &results {
        let case = &cases[*i];
        let entry = per_class.entry(case.class.as_str()).or_default();
        entry.0 += 1;
        if outcome.problems.is_empty() {
            entry.1 += 1;
        } else {
            failed.push((case, outcome));
        }
    }
    let mut summary = format!(
        "bad stacks: {} of {} refused as expected in {:.1}s\n",
        cases.len() - failed.len(),
        cases.len(),
        started.elapsed().as_secs_f64()
    );
    for (class, (total, passed)) in &per_class {
        let _ = writeln!(summary, "  {class:<22} {passed:>3} / {total:<3} passed");
    }
    println!("{summary}");
    if failed.is_empty() {
        return;
    }
    let mut report = String::new();
    for (case, outcome) in &failed {
        let _ = writeln!(
            report,
            "==== {} [{}]\n$ {}\nexit code: {:?}\nproblems:\n{}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            case.name,
            case.class,
            outcome.command_line,
            outcome.code,
            outcome
                .problems
                .iter()
                .map(|p| format!("  - {p}"))
                .collect::<Vec<_>>()
                .join("\n"),
            outcome.stdout.trim_end(),
            outcome.stderr.trim_end()
        );
    }
    let mut by_class: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (case, _) in &failed {
        by_class
            .entry(case.class.as_str())
            .or_default()
            .push(case.name.as_str());
    }
    let _ = writeln!(report, "==== {} failing case(s), by class:", failed.len());
    for (class, names) in &by_class {
        let _ = writeln!(report, "  {class}: {}", names.join(", "));
    }
    panic!("{report}\n{summary}");
}

/// The corpus itself: big enough, every case well-formed, every class present with
/// several cases and at least one whose cluster the same stack creates.
#[test]
fn corpus_covers_every_class_with_a_cluster_of_the_same_stack() {
    let cases = cases();
    assert!(
        cases.len() >= MIN_CASES,
        "the corpus holds {} cases; it must hold at least {MIN_CASES}",
        cases.len()
    );
    let known: Vec<&str> = CLASSES.iter().map(|(c, _)| *c).collect();
    let mut problems = Vec::new();
    for case in &cases {
        if !known.contains(&case.class.as_str()) {
            problems.push(format!(
                "{}: unknown class {:?} (classes: {})",
                case.name,
                case.class,
                known.join(", ")
            ));
        }
        if case.contains.is_empty() {
            problems.push(format!("{}: `contains` is empty", case.name));
        }
        let texts = stack_texts(case);
        if texts.is_empty() {
            problems.push(format!("{}: no stack file", case.name));
        }
        if case.same_stack_cluster {
            let creates_cluster = texts.iter().any(|(_, t)| {
                t.lines().any(|l| {
                    let l = l.trim_start();
                    l.starts_with("[gke_cluster.") || l.starts_with("[eks_cluster.")
                })
            });
            if !creates_cluster {
                problems.push(format!(
                    "{}: same_stack_cluster = true, but no stack file has a [gke_cluster.…] or [eks_cluster.…] table",
                    case.name
                ));
            }
        }
        if let Some(secret) = &case.secret {
            if !case
                .contains
                .iter()
                .any(|c| c.contains("(sensitive value)"))
                && case.class == "secrets"
            {
                problems.push(format!(
                    "{}: a secrets case must expect `(sensitive value)` in the message",
                    case.name
                ));
            }
            let secret = secret.to_lowercase();
            if case
                .contains
                .iter()
                .chain(&case.absent)
                .any(|c| c.to_lowercase().contains(&secret))
            {
                problems.push(format!("{}: `contains` holds the secret itself", case.name));
            }
        }
    }
    for (class, what) in CLASSES {
        let of_class: Vec<&Case> = cases.iter().filter(|c| c.class == *class).collect();
        if of_class.len() < 3 {
            problems.push(format!(
                "class {class} ({what}) has {} case(s); it needs several (3 or more)",
                of_class.len()
            ));
        }
        if !of_class.iter().any(|c| c.same_stack_cluster) {
            problems.push(format!(
                "class {class} ({what}) has no case whose cluster is created by the same stack (same_stack_cluster = true)"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "the bad-stacks corpus is malformed:\n{}",
        problems.join("\n")
    );
}
