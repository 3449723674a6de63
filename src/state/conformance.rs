//! The behaviour every state backend must show, as one reusable suite: storage round
//! trips, replacement, and the lock protocol between two independent clients. A backend's
//! tests call [`run`] with a factory for fresh clients of one empty, private location.
//!
//! This is test support code: a failed check panics with a message saying what the
//! backend got wrong.

use std::collections::BTreeMap;

use serde_json::json;

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

async fn locking<F, B>(make: &F)
where
    F: Fn() -> B,
    B: Backend,
{
    let a = make();
    let b = make();
    let loc = a.location();

    let none = b
        .lock_info()
        .await
        .expect("lock_info when unlocked must succeed");
    assert!(
        none.is_none(),
        "{loc}: lock_info must be None before anyone locks, got {none:?}"
    );
    expect_not_locked(
        a.unlock("no-such-lock").await,
        &loc,
        "unlock while unlocked",
    );
    expect_not_locked(
        b.force_unlock("no-such-lock").await,
        &loc,
        "force_unlock while unlocked",
    );

    // Two clients contend; the loser learns who holds it.
    let info_a = LockInfo::new("apply");
    a.lock(&info_a)
        .await
        .expect("lock of an unlocked state must succeed");
    expect_held(
        b.lock(&LockInfo::new("plan")).await,
        &info_a,
        &loc,
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
        &loc,
        "holder locking again",
    );

    // Saving and loading work while locked (the holder writes as it goes).
    a.save(&sample_state())
        .await
        .expect("save by the lock holder must succeed");
    a.load().await.expect("load while locked must succeed");

    // A wrong id releases nothing.
    expect_mismatch(
        a.unlock("not-the-id").await,
        &info_a,
        &loc,
        "unlock with a wrong id",
    );
    expect_held(
        b.lock(&LockInfo::new("plan")).await,
        &info_a,
        &loc,
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
        &loc,
        "lock after the other client took over",
    );
    b.unlock(&info_b.id).await.expect("unlock must succeed");
    expect_not_locked(b.unlock(&info_b.id).await, &loc, "unlock twice");

    // Breaking a lock whose holder is still alive (a hung run on another machine).
    let info_a = LockInfo::new("apply");
    a.lock(&info_a).await.expect("relock must succeed");
    expect_mismatch(
        b.force_unlock("not-the-id").await,
        &info_a,
        &loc,
        "force_unlock with a wrong id",
    );
    expect_held(
        b.lock(&LockInfo::new("plan")).await,
        &info_a,
        &loc,
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
        &loc,
        "old holder unlocking after force_unlock",
    );
    let seen = a.lock_info().await.expect("lock_info must succeed");
    assert_eq!(
        seen.as_ref(),
        Some(&info_b),
        "{loc}: the new holder must keep the lock"
    );
    b.unlock(&info_b.id).await.expect("unlock must succeed");

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

fn expect_held(result: Result<(), StateError>, holder: &LockInfo, loc: &str, what: &str) {
    match result {
        Err(StateError::LockHeld { holder: found, .. }) => {
            assert_eq!(
                &found, holder,
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
