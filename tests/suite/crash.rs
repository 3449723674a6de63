//! Crash safety of `apply`: an apply of 48 resources (24 files, each after its own
//! 150 ms sleep) running 4 operations at a time is killed with SIGKILL part-way, at
//! several points, or ends itself on the spot between two state writes (inside a
//! journal append, before its flush, on either side of a compaction's rename), with its
//! state in a local file or in S3 (a served sandbox); the next `apply` must finish the
//! job without creating anything twice or losing anything, and the killed run's lock
//! must not get in its way. The state is read as
//! a run loads it: the snapshot with its journal replayed.
//!
//! "Nothing twice" is read from the JSON event log (`TERRAIN_LOG_PATH`, appended to by
//! both runs): no address has more than one `finished` event with step `create`.
//! "Nothing lost" means every resource ends up in the state with an id and every file
//! with its content, and each address has exactly one `finished` create, except where
//! the kill fell between the create and its log line: then the object must be
//! accounted for, either recorded in the state the killed run left or adopted (and
//! said so) by the re-run. No engine can do better, because the state and the log are
//! two files and a kill can fall between their writes.

use crate::common;

use std::collections::BTreeMap;
use std::fs::File;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::Sandbox;
use serde_json::Value;
use terrain::state::local::read_state;
use terrain::state::State;

/// Files in the fixture; each has its own `time_sleep`.
const FILES: usize = 24;
const STATE: &str = "state/crash.json";
const LOCK: &str = "state/crash.json.lock";

/// Every address of the fixture stack.
fn addresses() -> Vec<String> {
    (1..=FILES)
        .flat_map(|i| [format!("time_sleep.s{i:02}"), format!("local_file.f{i:02}")])
        .collect()
}

/// Where the killed apply keeps its state.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Store {
    /// `state/crash.json` and its journal.
    Local,
    /// An S3 object in a served sandbox (which outlives the killed run), the lock an
    /// object beside it.
    S3,
}

/// The S3 state's location, and its lock's line in `terrain sandbox list`.
const S3_BACKEND: &str =
    "\n[backend.s3]\nbucket = \"crash-state\"\nkey = \"crash.json\"\nregion = \"us-east-1\"\n";
const S3_LOCK: &str = "s3 object crash-state/crash.json.lock";

/// The state as a run would load it: the snapshot with its journal replayed, or the
/// S3 object. `None` while there is none yet.
fn loaded(sb: &Sandbox, store: Store) -> Option<State> {
    match store {
        Store::Local => read_state(&sb.join(STATE)).ok().flatten(),
        Store::S3 => {
            let pulled = sb.run(&[
                "state",
                "pull",
                "-s",
                "stack.toml",
                "--sandbox",
                "pulled.json",
            ]);
            (pulled.code == Some(0)).then(|| {
                serde_json::from_str(&sb.read("pulled.json")).expect("a pulled state decodes")
            })
        }
    }
}

/// How many resources the state records with an id, if it can be read.
fn ids_in_state(sb: &Sandbox, store: Store) -> Option<usize> {
    Some(
        loaded(sb, store)?
            .resources
            .values()
            .filter(|r| r.id.is_some())
            .count(),
    )
}

/// Whether the state's lock is still there (for the local store: its file).
fn lock_left(sb: &Sandbox, store: Store) -> bool {
    match store {
        Store::Local => sb.exists(LOCK),
        Store::S3 => sb
            .run(&["sandbox", "list"])
            .stdout
            .lines()
            .any(|l| l == S3_LOCK),
    }
}

/// The addresses the state records with an id.
fn with_ids(sb: &Sandbox, store: Store) -> Vec<String> {
    let state = loaded(sb, store).expect("there is a state");
    state
        .resources
        .iter()
        .filter(|(_, r)| r.id.is_some())
        .map(|(a, _)| a.clone())
        .collect()
}

/// The events of the log file, one JSON object per line.
fn events(sb: &Sandbox, log: &str) -> Vec<Value> {
    sb.read(log)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("log line is not JSON ({e}): {l}"))
        })
        .collect()
}

/// How the first apply is stopped.
enum Stop {
    /// SIGKILL from outside once the state records at least this many resources with
    /// ids.
    KillAfter(usize),
    /// The apply ends itself on the spot (as a SIGKILL would) at a point between two
    /// state writes: `TERRAIN_FAULT_ABORT_AT` (see `state::local::abort_point`).
    AbortAt(&'static str),
}

/// Starts an apply, stops it as `stop` says, re-runs it, and checks that the result is
/// whole and that every create happened exactly once.
fn kill_and_recover(kill_after: usize) {
    stop_and_recover(Stop::KillAfter(kill_after), Store::Local);
}

/// Stops the `terrain sandbox serve` of a test when dropped.
struct Served(Option<std::process::Child>);

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn stop_and_recover(stop: Stop, store: Store) {
    let mut sb = Sandbox::with_fixture("crash");
    sb.set_log(sb.join("events.jsonl"));
    let mut args = vec![
        "apply",
        "-s",
        "stack.toml",
        "--auto-approve",
        "--parallelism",
        "4",
    ];
    let _served = match store {
        Store::Local => Served(None),
        Store::S3 => {
            let stack = sb.read("stack.toml");
            sb.write("stack.toml", &format!("{stack}{S3_BACKEND}"));
            args.push("--sandbox");
            let child = sb
                .command(&["sandbox", "serve"], &[])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start terrain sandbox serve");
            sb.wait_for("the served sandbox", Duration::from_secs(30), || {
                sb.exists("state/sandbox/serve.json").then_some(())
            });
            Served(Some(child))
        }
    };
    let args = args.as_slice();

    // Output goes to files: nobody reads a pipe while the child runs.
    let out = File::create(sb.join("killed.stdout")).expect("create killed.stdout");
    let err = File::create(sb.join("killed.stderr")).expect("create killed.stderr");
    let envs: Vec<(&str, &str)> = match &stop {
        Stop::AbortAt(point) => vec![("TERRAIN_FAULT_ABORT_AT", *point)],
        Stop::KillAfter(_) => Vec::new(),
    };
    let mut child = sb
        .command(args, &envs)
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err))
        .spawn()
        .expect("start the apply to kill");

    let deadline = Instant::now() + Duration::from_secs(30);
    let status = match stop {
        Stop::KillAfter(kill_after) => {
            loop {
                if ids_in_state(&sb, store).is_some_and(|n| n >= kill_after) {
                    break;
                }
                if let Some(status) = child.try_wait().expect("poll the apply") {
                    panic!(
                        "the apply ended ({status}) before {kill_after} resources were recorded; stdout:\n{}\nstderr:\n{}",
                        sb.read("killed.stdout"),
                        sb.read("killed.stderr")
                    );
                }
                assert!(
                    Instant::now() < deadline,
                    "no progress: the state never recorded {kill_after} resources"
                );
                std::thread::sleep(Duration::from_millis(2));
            }
            child.kill().expect("SIGKILL the apply");
            child.wait().expect("reap the killed apply")
        }
        Stop::AbortAt(_) => loop {
            if let Some(status) = child.try_wait().expect("poll the apply") {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "the apply never reached its abort point"
            );
            std::thread::sleep(Duration::from_millis(2));
        },
    };
    assert_eq!(
        status.code(),
        None,
        "the apply must have been ended by a signal, not have finished; stderr:\n{}",
        sb.read("killed.stderr")
    );
    let recorded_at_kill = with_ids(&sb, store);
    if let Stop::KillAfter(_) = stop {
        assert!(
            recorded_at_kill.len() < 2 * FILES,
            "killed after {} of {} resources: too late to test recovery",
            recorded_at_kill.len(),
            2 * FILES
        );
    }
    let recorded = recorded_at_kill.len();
    assert!(
        lock_left(&sb, store),
        "the killed run leaves its lock record behind (a file with no OS lock, or an S3 object)"
    );

    // What the killed run left in the journal is listed, without values.
    let listed = sb.run(&["state", "journal", "-s", "stack.toml"]);
    listed.success();
    if let Stop::AbortAt("compact.before_rename") = stop {
        // Everything was done and its intents journaled; the last results and the
        // compaction were lost (the re-run adopts those objects).
        assert!(
            listed.stdout.contains("records in the journal of")
                && listed.stdout.contains("put     local_file.f24 ")
                && !listed.stdout.contains("file 24"),
            "{}",
            listed.stdout
        );
    }

    // The re-run: no --lock-timeout, so a lock still held by the dead run would fail it.
    // On S3 the dead run's lock object is taken over: its holder was a process of
    // this machine that is gone.
    let rerun = sb.run(args);
    rerun.success();
    let mut plan_args = vec!["plan", "-s", "stack.toml", "--detailed-exitcode"];
    if store == Store::S3 {
        plan_args.push("--sandbox");
    }
    let plan = sb.run(&plan_args);
    plan.expect_code(0);
    let banner = match store {
        Store::Local => "",
        Store::S3 => "State s3://crash-state/crash.json\n\n",
    };
    assert_eq!(
        plan.stdout,
        format!("{banner}No changes. Live infrastructure matches the stack.\n")
    );

    // The state has everything, complete.
    let state = serde_json::to_value(loaded(&sb, store).expect("a state")).expect("encode");
    let resources = state["resources"]
        .as_object()
        .expect("a state has resources");
    let mut problems = Vec::new();
    for addr in addresses() {
        match resources.get(&addr) {
            None => problems.push(format!("{addr}: not in the state")),
            Some(r) => {
                if !r.get("id").is_some_and(Value::is_string) {
                    problems.push(format!("{addr}: no id in the state"));
                }
                if r.get("pending").is_some_and(|p| !p.is_null()) {
                    problems.push(format!("{addr}: still pending: {}", r["pending"]));
                }
            }
        }
    }
    assert_eq!(
        resources.len(),
        2 * FILES,
        "the state holds exactly the stack's resources"
    );

    // Every file, with its content.
    for i in 1..=FILES {
        let rel = format!("out/f{i:02}.txt");
        match std::fs::read_to_string(sb.join(&rel)) {
            Ok(text) if text == format!("file {i:02}\n") => {}
            Ok(text) => problems.push(format!("{rel}: wrong content {text:?}")),
            Err(e) => problems.push(format!("{rel}: {e}")),
        }
    }

    // One finished create per address across both runs; none where the kill fell
    // between the create and its log line and the object is accounted for otherwise.
    let log = events(&sb, "events.jsonl");
    // A create that adopts the object of an interrupted one (its `started` event names
    // it in `adopts`) makes nothing: it is counted apart, and only where the object was
    // found by the re-run's refresh.
    let mut creates: BTreeMap<String, usize> = addresses().into_iter().map(|a| (a, 0)).collect();
    let mut adoptions: BTreeMap<String, usize> = BTreeMap::new();
    let mut adopting: BTreeMap<String, bool> = BTreeMap::new();
    for e in &log {
        let addr = e["address"].as_str().unwrap_or_default().to_string();
        if e["event"] == "started" && e["step"] == "create" {
            adopting.insert(addr.clone(), e.get("adopts").is_some_and(Value::is_string));
        }
        if e["event"] == "finished" && e["step"] == "create" {
            if adopting.get(&addr).copied().unwrap_or(false) {
                *adoptions.entry(addr).or_default() += 1;
            } else {
                *creates.entry(addr).or_default() += 1;
            }
        }
    }
    for addr in adoptions.keys() {
        if !rerun.stdout.contains(&format!("Warning: {addr}: found ")) {
            problems.push(format!(
                "{addr}: a create adopted an object the re-run's refresh never reported finding"
            ));
        }
    }
    for (addr, n) in &creates {
        let accounted = recorded_at_kill.contains(addr) || adoptions.contains_key(addr);
        if *n > 1 || (*n == 0 && !accounted) {
            let history: Vec<String> = log
                .iter()
                .filter(|e| e["address"] == addr.as_str())
                .map(ToString::to_string)
                .collect();
            let what = if *n > 1 {
                "created more than once"
            } else {
                "never reported created, and neither recorded nor adopted"
            };
            problems.push(format!(
                "{addr}: {what}: {n} finished creates; its events:\n    {}",
                history.join("\n    ")
            ));
        }
    }

    assert!(!lock_left(&sb, store), "the re-run leaves no lock behind");
    let journal = format!("{STATE}.journal");
    assert!(
        !sb.exists(&journal),
        "the re-run's compaction folds the journal into the state file and removes it"
    );
    assert!(
        problems.is_empty(),
        "after SIGKILL with {recorded} resources recorded, the re-run did not converge cleanly:\n  {}\n--- re-run stdout ---\n{}\n--- re-run stderr ---\n{}",
        problems.join("\n  "),
        rerun.stdout,
        rerun.stderr
    );
}

#[test]
fn sigkill_early_then_rerun_creates_each_resource_exactly_once() {
    kill_and_recover(3);
}

#[test]
fn sigkill_midway_then_rerun_creates_each_resource_exactly_once() {
    kill_and_recover(8);
}

#[test]
fn sigkill_late_then_rerun_creates_each_resource_exactly_once() {
    kill_and_recover(15);
}

/// The same kill with the state in S3 (a served sandbox): the killed run's lock object
/// is taken over by the re-run, which converges with nothing created twice.
#[test]
fn sigkill_midway_with_state_in_s3_then_rerun_creates_each_resource_exactly_once() {
    stop_and_recover(Stop::KillAfter(8), Store::S3);
}

/// The 12th journal append reaches the disk only in part (its records torn mid-line),
/// then the process dies: the next run drops the torn tail, cuts it off before
/// appending, and converges.
#[test]
fn a_kill_inside_a_journal_append_leaves_a_torn_record_that_the_rerun_drops() {
    stop_and_recover(Stop::AbortAt("journal.append.torn:12"), Store::Local);
}

/// The 12th append is written but not yet flushed when the process dies.
#[test]
fn a_kill_before_a_journal_flush_then_rerun_creates_each_resource_exactly_once() {
    stop_and_recover(Stop::AbortAt("journal.append.before_sync:12"), Store::Local);
}

/// The end-of-apply compaction has written its new snapshot to a temp file but not
/// renamed it: the old snapshot and the whole journal are the state.
#[test]
fn a_kill_before_the_compactions_rename_keeps_the_journal_as_the_state() {
    stop_and_recover(Stop::AbortAt("compact.before_rename"), Store::Local);
}

/// The compaction renamed its new snapshot but died before emptying the journal: the
/// journal's records are already in the snapshot and are skipped by their serial.
#[test]
fn a_kill_between_the_compactions_rename_and_the_journal_truncation_replays_nothing_twice() {
    stop_and_recover(Stop::AbortAt("compact.after_rename"), Store::Local);
}

/// A `time_sleep` cannot be found again after a crash (it has no id known in advance),
/// so its create must be in the state before the engine reports it finished: otherwise
/// a kill between the two makes the next run create it again. Watches a whole apply:
/// whenever the log reports a finished sleep, the state must already have its id.
#[test]
fn finished_creates_that_cannot_be_adopted_are_saved_before_they_are_reported() {
    let mut sb = Sandbox::with_fixture("crash");
    sb.set_log(sb.join("events.jsonl"));
    let args = [
        "apply",
        "-s",
        "stack.toml",
        "--auto-approve",
        "--parallelism",
        "4",
    ];
    let out = File::create(sb.join("apply.stdout")).expect("create apply.stdout");
    let err = File::create(sb.join("apply.stderr")).expect("create apply.stderr");
    let mut child = sb
        .command(&args, &[])
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err))
        .spawn()
        .expect("start the apply");

    let mut seen_lines = 0;
    let mut checked = 0;
    let mut unsaved = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let done = child.try_wait().expect("poll the apply").is_some();
        let text = std::fs::read_to_string(sb.join("events.jsonl")).unwrap_or_default();
        // Only whole lines; the state is read after the log, so it can only be newer.
        let lines: Vec<&str> = text
            .split_inclusive('\n')
            .filter(|l| l.ends_with('\n'))
            .collect();
        let fresh: Vec<Value> = lines[seen_lines.min(lines.len())..]
            .iter()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        seen_lines = lines.len();
        let finished: Vec<String> = fresh
            .iter()
            .filter(|e| e["event"] == "finished" && e["step"] == "create")
            .filter_map(|e| {
                e["address"]
                    .as_str()
                    .filter(|a| a.starts_with("time_sleep."))
                    .map(str::to_string)
            })
            .collect();
        if !finished.is_empty() {
            let saved = with_ids(&sb, Store::Local);
            for addr in finished {
                checked += 1;
                if !saved.contains(&addr) {
                    unsaved.push(addr);
                }
            }
        }
        if done {
            break;
        }
        assert!(Instant::now() < deadline, "the apply did not finish");
        std::thread::sleep(Duration::from_millis(1));
    }
    let status = child.wait().expect("reap the apply");
    assert!(
        status.success(),
        "the apply failed: {}",
        sb.read("apply.stderr")
    );
    assert_eq!(checked, FILES, "every sleep was reported finished once");
    assert!(
        unsaved.is_empty(),
        "reported finished while the state did not have them yet (a kill at that moment makes the next run create them again): {unsaved:?}"
    );
}
