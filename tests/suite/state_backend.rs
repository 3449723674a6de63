//! The local state backend against the shared conformance suite, plus what only a local
//! file can get wrong: permissions, the backup, leftover temp files, locks held by a
//! process that gets killed, and a journal left torn, foreign, orphaned or stale.

use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use terrain::state::journal::{Change, Record, JOURNAL_FORMAT};
use terrain::state::local::LocalBackend;
use terrain::state::{conformance, Backend, LockInfo, ResourceState, State, StateError};

fn mode(path: &Path) -> u32 {
    fs::metadata(path).expect("stat").permissions().mode() & 0o777
}

#[tokio::test]
async fn local_backend_passes_conformance() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("nested").join("state.json");
    conformance::run(|| LocalBackend::new(&path)).await;
}

#[tokio::test]
async fn state_and_backup_are_private_even_if_the_file_was_not() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("state.json");
    let old = serde_json::to_vec_pretty(&State::new()).expect("encode");
    fs::write(&path, old).expect("write old state");
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).expect("chmod 0644");

    let backend = LocalBackend::new(&path);
    backend.save(&State::new()).await.expect("save");
    assert_eq!(mode(&path), 0o600, "state file mode");
    assert_eq!(
        mode(&dir.path().join("state.json.backup")),
        0o600,
        "backup mode"
    );

    backend.save(&State::new()).await.expect("second save");
    assert_eq!(mode(&path), 0o600, "state file mode after a second save");
    assert_eq!(
        mode(&dir.path().join("state.json.backup")),
        0o600,
        "backup mode after a second save"
    );
}

#[tokio::test]
async fn backup_holds_the_previous_version() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("state.json");
    let backend = LocalBackend::new(&path);
    let mut state = State::new();
    state.serial = 1;
    backend.save(&state).await.expect("first save");
    assert!(
        !dir.path().join("state.json.backup").exists(),
        "the first save has nothing to back up"
    );

    let first = state.clone();
    state.serial = 2;
    backend.save(&state).await.expect("second save");
    let backup = LocalBackend::new(dir.path().join("state.json.backup"));
    let backed_up = backup
        .load()
        .await
        .expect("load backup")
        .expect("backup exists");
    assert_eq!(backed_up, first, "backup must be the previous version");
    let current = backend.load().await.expect("load").expect("state exists");
    assert_eq!(current, state, "state must be the latest version");

    let text = fs::read_to_string(&path).expect("read state");
    assert!(text.ends_with("}\n"), "state file ends with a newline");
}

#[tokio::test]
async fn saves_leave_no_temp_files() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("state.json");
    let backend = LocalBackend::new(&path);
    for serial in 0..5 {
        let mut state = State::new();
        state.serial = serial;
        backend.save(&state).await.expect("save");
    }
    let mut names: Vec<String> = fs::read_dir(dir.path())
        .expect("list dir")
        .map(|e| {
            e.expect("dir entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    names.sort();
    assert_eq!(names, ["state.json", "state.json.backup"]);
}

#[tokio::test]
async fn newer_format_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("state.json");
    let mut state = serde_json::to_value(State::new()).expect("encode");
    state["format_version"] = 99.into();
    fs::write(&path, serde_json::to_vec(&state).expect("encode")).expect("write");
    match LocalBackend::new(&path).load().await {
        Err(StateError::UnsupportedFormat {
            found: 99,
            supported: 1,
            ..
        }) => {}
        other => panic!("expected UnsupportedFormat, got {other:?}"),
    }

    // A future format may change shape entirely; it is still "upgrade", not "corrupt".
    fs::write(&path, r#"{"format_version": 99, "resources": [1, 2]}"#).expect("write");
    match LocalBackend::new(&path).load().await {
        Err(StateError::UnsupportedFormat { found: 99, .. }) => {}
        other => panic!("expected UnsupportedFormat for a reshaped format, got {other:?}"),
    }
}

#[tokio::test]
async fn garbage_is_a_decode_error_naming_the_file() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("state.json");
    fs::write(&path, "{ not json").expect("write");
    match LocalBackend::new(&path).load().await {
        Err(e @ StateError::Decode { .. }) => {
            let msg = e.to_string();
            assert!(
                msg.contains(&path.display().to_string()),
                "message must name the file: {msg}"
            );
        }
        other => panic!("expected Decode, got {other:?}"),
    }
}

#[tokio::test]
async fn lock_held_message_says_who_and_how_to_break_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("state.json");
    let holder = LocalBackend::new(&path);
    let info = LockInfo::new("destroy");
    holder.lock(&info).await.expect("lock");
    let err = LocalBackend::new(&path)
        .lock(&LockInfo::new("apply"))
        .await
        .expect_err("lock is held");
    let msg = err.to_string();
    for part in [
        info.who.clone(),
        format!("pid {}", info.pid),
        "`destroy`".to_string(),
        format!("terrain force-unlock {}", info.id),
    ] {
        assert!(msg.contains(&part), "message must contain {part:?}: {msg}");
    }
    holder.unlock(&info.id).await.expect("unlock");
}

/// A child process holding the flock on `lock_file` until killed, as a `terrain apply`
/// would; returns once the flock is taken.
fn spawn_flock_holder(lock_file: &Path) -> Child {
    let script = "import fcntl, sys, time\n\
                  f = open(sys.argv[1], 'r+')\n\
                  fcntl.flock(f, fcntl.LOCK_EX)\n\
                  print('locked', flush=True)\n\
                  time.sleep(600)\n";
    let mut child = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(lock_file)
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn python3 to hold the lock");
    let stdout = child.stdout.take().expect("child stdout is piped");
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("read from child");
    assert_eq!(line.trim(), "locked", "child must report holding the lock");
    child
}

#[tokio::test]
async fn lock_of_a_killed_process_is_released() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("state.json");
    let lock_file = dir.path().join("state.json.lock");
    let dead = LockInfo {
        id: "0d9c2b5e-child".to_string(),
        who: "ci@runner-7".to_string(),
        pid: 424242,
        operation: "apply".to_string(),
        created: "2024-05-01T12:00:00Z".to_string(),
        lease: None,
    };
    fs::write(&lock_file, serde_json::to_vec(&dead).expect("encode")).expect("write lock record");
    let mut child = spawn_flock_holder(&lock_file);

    let backend = LocalBackend::new(&path);
    let result = backend.lock(&LockInfo::new("apply")).await;
    let refused = matches!(&result, Err(StateError::LockHeld { holder, .. }) if **holder == dead);
    let info = backend.lock_info().await;
    child.kill().expect("SIGKILL the holder");
    child.wait().expect("reap the holder");
    assert!(
        refused,
        "lock held by a live child must be refused naming it, got {result:?}"
    );
    let info = info.expect("lock_info while held");
    assert_eq!(
        info.as_ref(),
        Some(&dead),
        "lock_info while the child lives"
    );

    // The record is still on disk, but nobody holds the flock: that is no lock.
    assert!(
        lock_file.exists(),
        "the killed holder leaves its lock file behind"
    );
    assert_eq!(
        backend.lock_info().await.expect("lock_info after kill"),
        None,
        "stale record is not a lock"
    );
    let mine = LockInfo::new("apply");
    backend
        .lock(&mine)
        .await
        .expect("lock after the holder died");
    assert_eq!(
        backend.lock_info().await.expect("lock_info"),
        Some(mine.clone())
    );
    let on_disk: LockInfo = serde_json::from_slice(&fs::read(&lock_file).expect("read lock file"))
        .expect("lock record");
    assert_eq!(
        on_disk, mine,
        "the new holder's record replaces the old one"
    );
    assert_eq!(mode(&lock_file), 0o600, "lock file mode");
    backend.unlock(&mine.id).await.expect("unlock");
    assert!(!lock_file.exists(), "unlock removes the lock file");
}

#[tokio::test]
async fn unreadable_record_of_a_live_lock_still_refuses() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("state.json");
    let lock_file = dir.path().join("state.json.lock");
    fs::write(&lock_file, "not a lock record").expect("write lock file");
    let mut child = spawn_flock_holder(&lock_file);
    let result = LocalBackend::new(&path).lock(&LockInfo::new("apply")).await;
    child.kill().expect("SIGKILL the holder");
    child.wait().expect("reap the holder");
    match result {
        Err(StateError::LockHeld { holder, .. }) => {
            assert_eq!(
                (holder.who.as_str(), holder.id.as_str()),
                ("unknown", "unknown"),
                "holder {holder:?}"
            )
        }
        other => panic!("expected LockHeld by an unknown holder, got {other:?}"),
    }
}

#[tokio::test]
async fn force_unlock_of_a_stale_record_is_not_locked() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("state.json");
    let stale = LockInfo::new("apply");
    fs::write(
        dir.path().join("state.json.lock"),
        serde_json::to_vec(&stale).expect("encode"),
    )
    .expect("write");
    match LocalBackend::new(&path).force_unlock(&stale.id).await {
        Err(StateError::NotLocked { .. }) => {}
        other => panic!("expected NotLocked for a lock file nobody holds, got {other:?}"),
    }
}

/// Many clients locking and unlocking at once: at most one may ever believe it holds the
/// lock. Catches a locker that wins the flock on a lock file an unlock just removed.
#[test]
fn contending_clients_exclude_each_other() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    const CLIENTS: usize = 4;
    const ROUNDS: usize = 50;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("state.json");
    let inside = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let path = path.clone();
            let inside = Arc::clone(&inside);
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .build()
                    .expect("runtime");
                runtime.block_on(async {
                    let backend = LocalBackend::new(&path);
                    for _ in 0..ROUNDS {
                        let info = LockInfo::new("apply");
                        loop {
                            match backend.lock(&info).await {
                                Ok(()) => break,
                                Err(StateError::LockHeld { .. }) => std::thread::yield_now(),
                                Err(e) => panic!("lock failed: {e}"),
                            }
                        }
                        let others = inside.fetch_add(1, Ordering::SeqCst);
                        assert_eq!(others, 0, "two clients held the lock at once");
                        std::thread::yield_now();
                        inside.fetch_sub(1, Ordering::SeqCst);
                        backend.unlock(&info.id).await.expect("unlock");
                    }
                });
            })
        })
        .collect();
    for worker in workers {
        worker.join().expect("client thread");
    }
}

// The journal.

/// One journal record of `state`'s lineage putting a resource named `name`.
fn put_record(state: &State, serial: u64, name: &str) -> Record {
    Record {
        journal: JOURNAL_FORMAT,
        lineage: state.lineage.clone(),
        serial,
        change: Change::Put {
            address: format!("test_thing.{name}"),
            resource: Box::new(ResourceState {
                kind: "test_thing".into(),
                provider: "test".into(),
                id: Some(name.into()),
                spec: serde_json::json!({ "name": name }),
                outputs: serde_json::json!({}),
                dependencies: Vec::new(),
                sensitive_paths: Vec::new(),
                pending: None,
                deposed: Vec::new(),
                tainted: false,
            }),
        },
    }
}

fn names(state: &State) -> Vec<String> {
    state.resources.keys().cloned().collect()
}

#[tokio::test]
async fn a_first_append_starts_the_state() {
    let dir = tempfile::tempdir().expect("temp dir");
    let backend = LocalBackend::new(dir.path().join("state.json"));
    conformance::fresh_journal(&backend).await;
    assert_eq!(
        mode(&dir.path().join("state.json")),
        0o600,
        "state file mode"
    );
    assert_eq!(
        mode(&dir.path().join("state.json.journal")),
        0o600,
        "the journal holds secrets too"
    );
}

#[tokio::test]
async fn a_torn_last_record_is_dropped_and_the_next_append_cuts_it_off() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("state.json");
    let journal = dir.path().join("state.json.journal");
    let state = State::new();
    let backend = LocalBackend::new(&path);
    backend.save(&state).await.expect("save");
    backend
        .append(&[put_record(&state, 1, "a")])
        .await
        .expect("append a");
    // A crash halfway through writing the second record.
    let torn = terrain::state::journal::encode(&put_record(&state, 2, "b")).expect("encode");
    let mut bytes = fs::read(&journal).expect("read journal");
    let whole = bytes.len();
    bytes.extend_from_slice(&torn[..torn.len() / 2]);
    fs::write(&journal, &bytes).expect("write torn journal");

    let loaded = LocalBackend::new(&path)
        .load()
        .await
        .expect("a torn tail is not an error")
        .expect("state");
    assert_eq!(names(&loaded), ["test_thing.a"]);
    assert_eq!(loaded.serial, 1);

    // A new run appends record 2 again: the torn bytes go first.
    let next = LocalBackend::new(&path);
    next.append(&[put_record(&state, 2, "c")])
        .await
        .expect("append after a torn tail");
    assert_eq!(
        fs::read(&journal).expect("read journal").len(),
        whole
            + terrain::state::journal::encode(&put_record(&state, 2, "c"))
                .expect("encode")
                .len(),
        "the torn record was cut off before the new one"
    );
    let loaded = next.load().await.expect("load").expect("state");
    assert_eq!(names(&loaded), ["test_thing.a", "test_thing.c"]);
    assert_eq!(loaded.serial, 2);
}

#[tokio::test]
async fn a_journal_of_another_lineage_is_refused_naming_both() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("state.json");
    let ours = State::new();
    let theirs = State::new();
    LocalBackend::new(&path).save(&ours).await.expect("save");
    let line = terrain::state::journal::encode(&put_record(&theirs, 1, "a")).expect("encode");
    fs::write(dir.path().join("state.json.journal"), line).expect("write journal");

    let err = LocalBackend::new(&path)
        .load()
        .await
        .expect_err("a foreign journal must be refused");
    let text = err.to_string();
    assert!(
        matches!(err, StateError::Journal { .. })
            && text.contains(&theirs.lineage)
            && text.contains(&ours.lineage),
        "{text}"
    );
    // Nor is it continued with this state's records.
    let append = LocalBackend::new(&path)
        .append(&[put_record(&ours, 1, "b")])
        .await;
    assert!(
        matches!(append, Err(StateError::Journal { .. })),
        "{append:?}"
    );
}

#[tokio::test]
async fn a_journal_without_its_state_file_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("state.json");
    let state = State::new();
    let backend = LocalBackend::new(&path);
    backend
        .append(&[put_record(&state, 1, "a")])
        .await
        .expect("append");
    fs::remove_file(&path).expect("remove the state file");
    let err = LocalBackend::new(&path)
        .load()
        .await
        .expect_err("a journal alone is not a state");
    assert!(
        matches!(err, StateError::JournalWithoutSnapshot { .. }),
        "{err}"
    );
    assert!(err.to_string().contains(".backup"), "{err}");
}

#[tokio::test]
async fn records_a_compaction_already_folded_in_are_skipped() {
    // A compaction renamed its snapshot (serial 3) into place and was killed before
    // emptying the journal (records 1 and 2).
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("state.json");
    let mut state = State::new();
    let backend = LocalBackend::new(&path);
    backend.save(&state).await.expect("save");
    backend
        .append(&[put_record(&state, 1, "a"), put_record(&state, 2, "b")])
        .await
        .expect("append");
    let journal = fs::read(dir.path().join("state.json.journal")).expect("read journal");
    let mut folded = LocalBackend::new(&path)
        .load()
        .await
        .expect("load")
        .expect("state");
    folded.serial = 3;
    folded.resources.remove("test_thing.b");
    backend.save(&folded).await.expect("compaction");
    fs::write(dir.path().join("state.json.journal"), journal).expect("put the journal back");

    let loaded = LocalBackend::new(&path)
        .load()
        .await
        .expect("load")
        .expect("state");
    assert_eq!(loaded, folded, "the stale records change nothing");
    state.serial = 3;
    LocalBackend::new(&path)
        .append(&[put_record(&state, 4, "c")])
        .await
        .expect("append after the stale records");
    let loaded = LocalBackend::new(&path)
        .load()
        .await
        .expect("load")
        .expect("state");
    assert_eq!(names(&loaded), ["test_thing.a", "test_thing.c"]);
    assert_eq!(loaded.serial, 4);
}
