//! The behaviour every state backend must show, as one reusable suite: storage round
//! trips, replacement, journal replay and compaction (for backends that keep a
//! journal), and the lock protocol between two independent clients. A backend's
//! tests call [`run`] with a factory for fresh clients of one empty, private location.
//!
//! This is test support code: a failed check panics with a message saying what the
//! backend got wrong.

use std::collections::BTreeMap;

use serde_json::json;

use super::journal::{Change, Record, JOURNAL_FORMAT};
use super::{
    Backend, Deposed, LockInfo, OutputState, Pending, PendingOp, ResourceState, State, StateError,
};

/// Runs the whole suite. `make` must return a new client each call, all pointing at the
/// same stored location, which must start out empty and unlocked; two clients stand for
/// two processes.
pub async fn run<F, B>(make: F)
where
    F: Fn() -> B,
    B: Backend,
{
    storage(&make).await;
    beside(&make).await;
    if make().journals() {
        journal(&make).await;
    }
    locking(&make).await;
}

/// A state using every part of the format, so a lossy encoding shows up as a mismatch.
fn sample_state() -> State {
    let mut state = State::new();
    state.serial = 7;
    state.resources.insert(
        "bucket.data".to_string(),
        ResourceState {
            kind: "bucket".to_string(),
            provider: "gcp".to_string(),
            id: Some("projects/demo/buckets/data".to_string()),
            spec: json!({ "name": "data", "location": "EU", "labels": { "team": "ml" } }),
            outputs: json!({ "url": "gs://data", "size": 0 }),
            dependencies: vec!["project.demo".to_string()],
            sensitive_paths: vec![],
            pending: None,
            deposed: vec![],
            tainted: false,
        },
    );
    state.resources.insert(
        "database.main".to_string(),
        ResourceState {
            kind: "database".to_string(),
            provider: "gcp".to_string(),
            id: Some("db-2".to_string()),
            spec: json!({ "tier": "small", "password": "hunter2" }),
            outputs: json!({ "token": "s3cr3t", "host": "10.0.0.2" }),
            dependencies: vec!["bucket.data".to_string(), "project.demo".to_string()],
            sensitive_paths: vec!["spec.password".to_string(), "outputs.token".to_string()],
            pending: Some(Pending {
                op: PendingOp::Update,
                started_at: "2024-05-01T12:00:00Z".to_string(),
                planned_id: None,
                spec: json!({ "tier": "large", "password": "hunter2" }),
            }),
            deposed: vec![Deposed {
                id: "db-1".to_string(),
                spec: json!({ "tier": "small" }),
            }],
            // A failed create's object, kept for the next plan to replace.
            tainted: true,
        },
    );
    state.resources.insert(
        "vm.worker".to_string(),
        ResourceState {
            kind: "vm".to_string(),
            provider: "gcp".to_string(),
            id: None,
            spec: json!({ "machine": "a2-highgpu-1g", "disks": [10, 20], "unicode": "żółw 🐢" }),
            outputs: serde_json::Value::Null,
            dependencies: vec![],
            sensitive_paths: vec![],
            pending: Some(Pending {
                op: PendingOp::Create,
                started_at: "2024-05-01T12:00:01Z".to_string(),
                planned_id: Some("worker-0".to_string()),
                spec: json!({ "machine": "a2-highgpu-1g" }),
            }),
            deposed: vec![],
            tainted: false,
        },
    );
    state.outputs = BTreeMap::from([
        (
            "bucket_url".to_string(),
            OutputState {
                value: json!("gs://data"),
                sensitive: false,
            },
        ),
        (
            "db_token".to_string(),
            OutputState {
                value: json!({ "token": "s3cr3t" }),
                sensitive: true,
            },
        ),
    ]);
    state
}

/// What is kept beside the state (the operator's pending plans): stored once under its
/// name, read back by another client, stored again without harm, absent names `None`.
async fn beside<F, B>(make: &F)
where
    F: Fn() -> B,
    B: Backend,
{
    let (a, b) = (make(), make());
    let loc = a.location();
    let name = "sha256-0123.json";
    let where_ = a
        .put_beside(name, b"{\"plan\": 1}".to_vec())
        .await
        .unwrap_or_else(|e| panic!("{loc}: put_beside: {e}"));
    assert!(
        where_.contains("plans") && where_.contains(name),
        "{loc}: stored at {where_}"
    );
    assert_eq!(
        b.get_beside(name).await.expect("get_beside").as_deref(),
        Some(&b"{\"plan\": 1}"[..]),
        "{loc}: another client reads what was stored beside the state"
    );
    a.put_beside(name, b"{\"plan\": 1}".to_vec())
        .await
        .unwrap_or_else(|e| panic!("{loc}: storing the same name again: {e}"));
    assert_eq!(
        b.get_beside("sha256-none.json").await.expect("get_beside"),
        None
    );
}

async fn storage<F, B>(make: &F)
where
    F: Fn() -> B,
    B: Backend,
{
    let a = make();
    let loc = a.location();
    let empty = a
        .load()
        .await
        .expect("load of an empty location must succeed");
    assert!(
        empty.is_none(),
        "{loc}: load of an empty location must be None, got {empty:?}"
    );

    let first = sample_state();
    a.save(&first).await.expect("save must succeed");
    let loaded = a.load().await.expect("load after save must succeed");
    assert_eq!(
        loaded.as_ref(),
        Some(&first),
        "{loc}: load must return exactly what was saved"
    );
    let loaded = make()
        .load()
        .await
        .expect("load from a fresh client must succeed");
    assert_eq!(
        loaded.as_ref(),
        Some(&first),
        "{loc}: a fresh client must see the saved state"
    );

    let mut second = first.clone();
    second.serial += 1;
    second.resources.remove("vm.worker");
    if let Some(db) = second.resources.get_mut("database.main") {
        db.pending = None;
        db.deposed.clear();
    }
    second.outputs.clear();
    a.save(&second).await.expect("second save must succeed");
    let loaded = make()
        .load()
        .await
        .expect("load after a second save must succeed");
    assert_eq!(
        loaded.as_ref(),
        Some(&second),
        "{loc}: a second save must replace the first"
    );
}

/// A record of `state`'s lineage bringing it to `serial`.
fn record(state: &State, serial: u64, change: Change) -> Record {
    Record {
        journal: JOURNAL_FORMAT,
        lineage: state.lineage.clone(),
        serial,
        change,
    }
}

/// Appended records are what the next load sees (replayed over the saved state, by a
/// fresh client too); a save folds them in and removes the journal; the first append
/// with no state saved yet starts one.
async fn journal<F, B>(make: &F)
where
    F: Fn() -> B,
    B: Backend,
{
    let a = make();
    let loc = a.location();
    let base = sample_state();
    a.save(&base).await.expect("save must succeed");
    assert!(
        a.journal().await.expect("journal must read").is_empty(),
        "{loc}: a save leaves an empty journal"
    );

    // An intent, then its result, then a removal and new outputs: one append each, the
    // last two together (group commit).
    let mut intent = base.resources["vm.worker"].clone();
    intent.pending = Some(Pending {
        op: PendingOp::Create,
        started_at: "2024-05-01T12:00:02Z".to_string(),
        planned_id: Some("worker-1".to_string()),
        spec: json!({ "machine": "a3-highgpu-8g" }),
    });
    let mut done = intent.clone();
    done.pending = None;
    done.id = Some("worker-1".to_string());
    let outputs = BTreeMap::from([(
        "worker".to_string(),
        OutputState {
            value: json!("worker-1"),
            sensitive: false,
        },
    )]);
    let put = |r: &ResourceState| Change::Put {
        address: "vm.worker".to_string(),
        resource: Box::new(r.clone()),
    };
    let s = base.serial;
    let batches = vec![
        vec![record(&base, s + 1, put(&intent))],
        vec![record(&base, s + 2, put(&done))],
        vec![
            record(
                &base,
                s + 3,
                Change::Remove {
                    address: "bucket.data".to_string(),
                },
            ),
            record(
                &base,
                s + 4,
                Change::Outputs {
                    outputs: outputs.clone(),
                },
            ),
        ],
    ];
    let mut expected = base.clone();
    let mut size = 0;
    for (i, batch) in batches.iter().enumerate() {
        let after = a.append(batch).await.expect("append must succeed");
        assert!(
            after > size,
            "{loc}: append {i} must grow the journal ({size} → {after} bytes)"
        );
        size = after;
        for r in batch {
            super::journal::apply(&mut expected, r.change.clone());
            expected.serial = r.serial;
        }
        let loaded = make()
            .load()
            .await
            .expect("load with a journal must succeed");
        assert_eq!(
            loaded.as_ref(),
            Some(&expected),
            "{loc}: after append {i}, a fresh client must see the state with the journal replayed"
        );
    }
    assert_eq!(expected.serial, s + 4);
    assert_eq!(
        expected.resources["vm.worker"].id.as_deref(),
        Some("worker-1")
    );
    assert!(!expected.resources.contains_key("bucket.data"));
    let all: Vec<Record> = batches.into_iter().flatten().collect();
    assert_eq!(
        make().journal().await.expect("journal must read"),
        all,
        "{loc}: the journal lists its records in order"
    );

    // Compaction: the whole state saved, with its serial bumped, empties the journal.
    let mut compacted = expected.clone();
    compacted.serial += 1;
    a.save(&compacted).await.expect("compaction must succeed");
    assert!(
        make()
            .journal()
            .await
            .expect("journal must read")
            .is_empty(),
        "{loc}: a save empties the journal"
    );
    assert_eq!(
        make().load().await.expect("load must succeed").as_ref(),
        Some(&compacted),
        "{loc}: after compaction the state is the saved one"
    );
    // And the journal goes on from there.
    let next = record(&compacted, compacted.serial + 1, put(&intent));
    a.append(std::slice::from_ref(&next))
        .await
        .expect("append after compaction must succeed");
    let mut after = compacted.clone();
    super::journal::apply(&mut after, next.change.clone());
    after.serial = next.serial;
    assert_eq!(
        make().load().await.expect("load must succeed").as_ref(),
        Some(&after),
        "{loc}: records appended after a compaction replay over it"
    );
}

/// A first append where no state was saved yet starts the state from the records'
/// lineage. A backend's tests run it on a second empty, private location.
pub async fn fresh_journal<B: Backend>(b: &B) {
    let loc = b.location();
    let start = State::new();
    let r = record(
        &start,
        1,
        Change::Put {
            address: "bucket.data".to_string(),
            resource: Box::new(sample_state().resources["bucket.data"].clone()),
        },
    );
    b.append(std::slice::from_ref(&r))
        .await
        .expect("a first append must succeed");
    let loaded = b
        .load()
        .await
        .expect("load must succeed")
        .expect("a first append makes a state");
    assert_eq!(
        loaded.lineage, start.lineage,
        "{loc}: lineage from the records"
    );
    assert_eq!(loaded.serial, 1, "{loc}: serial from the records");
    assert_eq!(
        loaded.resources.keys().collect::<Vec<_>>(),
        vec!["bucket.data"],
        "{loc}: the record replayed"
    );
}

/// The lock protocol between two independent clients of one location, and a third
/// that comes after them.
async fn locking<F, B>(make: &F)
where
    F: Fn() -> B,
    B: Backend,
{
    let a = make();
    let b = make();
    let loc = a.location();

    unlocked(&a, &b, &loc).await;
    let info_a = contended(&a, &b, &loc).await;
    // Saving and loading work while locked (the holder writes as it goes).
    a.save(&sample_state())
        .await
        .expect("save by the lock holder must succeed");
    a.load().await.expect("load while locked must succeed");
    released_by_id(&a, &b, &loc, &info_a).await;
    broken_by_force(&a, &b, &loc).await;

    let c = make();
    let info_c = LockInfo::new("import");
    c.lock(&info_c)
        .await
        .expect("a fresh client must lock a released state");
    c.unlock(&info_c.id).await.expect("unlock must succeed");
    expect_not_locked(
        c.force_unlock(&info_c.id).await,
        &loc,
        "force_unlock after unlock",
    );
}

/// Before anyone locks: no holder is shown, and neither unlock releases anything.
async fn unlocked<B: Backend>(a: &B, b: &B, loc: &str) {
    let none = b
        .lock_info()
        .await
        .expect("lock_info when unlocked must succeed");
    assert!(
        none.is_none(),
        "{loc}: lock_info must be None before anyone locks, got {none:?}"
    );
    expect_not_locked(a.unlock("no-such-lock").await, loc, "unlock while unlocked");
    expect_not_locked(
        b.force_unlock("no-such-lock").await,
        loc,
        "force_unlock while unlocked",
    );
}

/// Two clients contend: `a` takes the lock, `b` (and `a` again) learn who holds it.
/// Returns `a`'s lock, still held.
async fn contended<B: Backend>(a: &B, b: &B, loc: &str) -> LockInfo {
    let info_a = LockInfo::new("apply");
    a.lock(&info_a)
        .await
        .expect("lock of an unlocked state must succeed");
    expect_held(
        b.lock(&LockInfo::new("plan")).await,
        &info_a,
        loc,
        "second client's lock",
    );
    let seen = b
        .lock_info()
        .await
        .expect("lock_info while locked must succeed");
    assert_eq!(
        seen.as_ref(),
        Some(&info_a),
        "{loc}: lock_info from another client must show the holder"
    );
    let seen = a
        .lock_info()
        .await
        .expect("lock_info by the holder must succeed");
    assert_eq!(
        seen.as_ref(),
        Some(&info_a),
        "{loc}: lock_info from the holder must show its own lock"
    );
    expect_held(
        a.lock(&LockInfo::new("apply")).await,
        &info_a,
        loc,
        "holder locking again",
    );
    info_a
}

/// `a` holding `info_a`: a wrong id releases nothing, the right one releases it, and
/// `b` can then take it (and release it once).
async fn released_by_id<B: Backend>(a: &B, b: &B, loc: &str, info_a: &LockInfo) {
    // A wrong id releases nothing.
    expect_mismatch(
        a.unlock("not-the-id").await,
        info_a,
        loc,
        "unlock with a wrong id",
    );
    expect_held(
        b.lock(&LockInfo::new("plan")).await,
        info_a,
        loc,
        "lock after a refused unlock",
    );

    // The right id releases it, and the other client can take it.
    a.unlock(&info_a.id)
        .await
        .expect("unlock with the holder's id must succeed");
    let none = b
        .lock_info()
        .await
        .expect("lock_info after unlock must succeed");
    assert!(
        none.is_none(),
        "{loc}: lock_info must be None after unlock, got {none:?}"
    );
    let info_b = LockInfo::new("destroy");
    b.lock(&info_b)
        .await
        .expect("lock after the holder unlocked must succeed");
    expect_held(
        a.lock(&LockInfo::new("apply")).await,
        &info_b,
        loc,
        "lock after the other client took over",
    );
    b.unlock(&info_b.id).await.expect("unlock must succeed");
    expect_not_locked(b.unlock(&info_b.id).await, loc, "unlock twice");
}

/// Breaking a lock whose holder is still alive (a hung run on another machine): `b`
/// force-unlocks `a`'s lock and takes it, and `a` cannot release `b`'s.
async fn broken_by_force<B: Backend>(a: &B, b: &B, loc: &str) {
    let info_a = LockInfo::new("apply");
    a.lock(&info_a).await.expect("relock must succeed");
    expect_mismatch(
        b.force_unlock("not-the-id").await,
        &info_a,
        loc,
        "force_unlock with a wrong id",
    );
    expect_held(
        b.lock(&LockInfo::new("plan")).await,
        &info_a,
        loc,
        "lock after a refused force_unlock",
    );
    b.force_unlock(&info_a.id)
        .await
        .expect("force_unlock with the holder's id must succeed");
    let none = b
        .lock_info()
        .await
        .expect("lock_info after force_unlock must succeed");
    assert!(
        none.is_none(),
        "{loc}: lock_info must be None after force_unlock, got {none:?}"
    );
    let info_b = LockInfo::new("apply");
    b.lock(&info_b)
        .await
        .expect("lock after force_unlock must succeed, though the old holder still runs");

    // The broken holder must not be able to release the new holder's lock.
    expect_mismatch(
        a.unlock(&info_a.id).await,
        &info_b,
        loc,
        "old holder unlocking after force_unlock",
    );
    let seen = a.lock_info().await.expect("lock_info must succeed");
    assert_eq!(
        seen.as_ref(),
        Some(&info_b),
        "{loc}: the new holder must keep the lock"
    );
    b.unlock(&info_b.id).await.expect("unlock must succeed");
}

fn expect_held(result: Result<(), StateError>, holder: &LockInfo, loc: &str, what: &str) {
    match result {
        Err(StateError::LockHeld { holder: found, .. }) => {
            assert_eq!(
                &*found, holder,
                "{loc}: {what}: LockHeld must name the holder"
            )
        }
        Err(other) => panic!(
            "{loc}: {what}: expected LockHeld by {}, got error: {other}",
            holder.id
        ),
        Ok(()) => panic!(
            "{loc}: {what}: expected LockHeld by {}, but the lock was granted",
            holder.id
        ),
    }
}

fn expect_mismatch(result: Result<(), StateError>, holder: &LockInfo, loc: &str, what: &str) {
    match result {
        Err(StateError::LockMismatch { found, .. }) => {
            assert_eq!(
                found, holder.id,
                "{loc}: {what}: LockMismatch must name the held id"
            )
        }
        Err(other) => panic!("{loc}: {what}: expected LockMismatch, got error: {other}"),
        Ok(()) => panic!("{loc}: {what}: expected LockMismatch, but it succeeded"),
    }
}

fn expect_not_locked(result: Result<(), StateError>, loc: &str, what: &str) {
    match result {
        Err(StateError::NotLocked { .. }) => {}
        Err(other) => panic!("{loc}: {what}: expected NotLocked, got error: {other}"),
        Ok(()) => panic!("{loc}: {what}: expected NotLocked, but it succeeded"),
    }
}
