//! Waiting for a state lock: retries [`Backend::lock`] with backoff until a timeout, so
//! a run started while another finishes (`-lock-timeout`) does not fail needlessly; and
//! telling a lock whose holder is gone (a killed run on this machine, or an operator
//! replica that lost its Lease) from a live one.

use std::time::Duration;

use tokio::time::Instant;

use super::{Backend, LockInfo, StateError};

/// The first pause after a refused lock; short because most holders finish quickly.
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// The longest pause, so a released lock is noticed within a second.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// Takes the lock for `info`, retrying while someone else holds it until `timeout` has
/// passed; then fails with the last [`StateError::LockHeld`], naming the holder. A zero
/// timeout makes exactly one attempt. Errors other than `LockHeld` return at once.
pub async fn acquire(
    backend: &dyn Backend,
    info: &LockInfo,
    timeout: Duration,
) -> Result<(), StateError> {
    let deadline = Instant::now() + timeout;
    let mut backoff = FIRST_BACKOFF;
    loop {
        match backend.lock(info).await {
            Err(e @ StateError::LockHeld { .. }) => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(e);
                }
                // Never sleep past the deadline: the last attempt lands right on it.
                tokio::time::sleep(backoff.min(left)).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
            other => return other,
        }
    }
}

/// Releases the lock if its holder is gone as `taker` can tell ([`abandoned`]), by
/// taking it over as `taker` and letting it go; returns the holder that remains, if
/// any. A run that reads but does not write (an operator's plan) calls it so that a
/// dead replica's lock does not wait for the next apply.
pub async fn clear_abandoned(
    backend: &dyn Backend,
    taker: &LockInfo,
) -> Result<Option<LockInfo>, StateError> {
    match backend.lock_info().await? {
        Some(holder) if abandoned(&holder, taker) => {
            match backend.lock(taker).await {
                Ok(()) => backend.unlock(&taker.id).await.map(|()| None),
                // Taken meanwhile by someone alive.
                Err(StateError::LockHeld { holder, .. }) => Ok(Some(*holder)),
                Err(e) => Err(e),
            }
        }
        other => Ok(other),
    }
}

/// Whether the run holding `holder` is gone, as `taker` (who wants the lock) can tell:
/// a process of this machine that no longer exists, or an operator replica whose Lease
/// `taker` now holds at a later term. A remote lock object outlives a killed run (the
/// local backend's OS lock does not), and such a lock is taken over rather than
/// refusing every later run until `force-unlock`. A holder on another machine is never
/// presumed gone, nor one that still holds its Lease: a Lease moves to a new term only
/// once its holder stopped renewing it for its whole duration, and a holder stops
/// working a renewal before that (see `operator/lease.rs`).
pub fn abandoned(holder: &LockInfo, taker: &LockInfo) -> bool {
    dead_here(holder) || lease_lost(holder, taker)
}

/// Whether `holder` took the lock at an older term of the Lease `taker` holds.
fn lease_lost(holder: &LockInfo, taker: &LockInfo) -> bool {
    match (&holder.lease, &taker.lease) {
        (Some(h), Some(t)) => h.namespace == t.namespace && h.name == t.name && h.term < t.term,
        _ => false,
    }
}

/// Whether `holder` is a process of this machine that no longer exists.
fn dead_here(holder: &LockInfo) -> bool {
    let host = |who: &str| who.rsplit_once('@').map(|(_, h)| h.to_string());
    let here = host(&LockInfo::who_here());
    here.is_some()
        && host(&holder.who) == here
        && holder.pid != 0
        && holder.pid != std::process::id()
        && !process_alive(holder.pid)
}

/// Whether process `pid` of this machine exists.
pub fn process_alive(pid: u32) -> bool {
    std::path::Path::new("/proc").join(pid.to_string()).exists()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::state::local::LocalBackend;
    use crate::state::LeaseHold;

    fn state_path(dir: &tempfile::TempDir) -> std::path::PathBuf {
        dir.path().join("state.json")
    }

    #[tokio::test]
    async fn takes_a_free_lock_at_once() {
        let dir = tempfile::tempdir().expect("temp dir");
        let backend = LocalBackend::new(state_path(&dir));
        let info = LockInfo::new("apply");
        acquire(&backend, &info, Duration::ZERO)
            .await
            .expect("free lock is taken");
        assert_eq!(
            backend.lock_info().await.expect("lock info"),
            Some(info.clone())
        );
        backend.unlock(&info.id).await.expect("unlock");
    }

    #[tokio::test]
    async fn zero_timeout_fails_once_with_the_holder() {
        let dir = tempfile::tempdir().expect("temp dir");
        let holder = LocalBackend::new(state_path(&dir));
        let waiter = LocalBackend::new(state_path(&dir));
        let held = LockInfo::new("apply");
        holder.lock(&held).await.expect("first lock");

        let started = std::time::Instant::now();
        let err = acquire(&waiter, &LockInfo::new("plan"), Duration::ZERO)
            .await
            .expect_err("a held lock must be refused");
        assert!(
            started.elapsed() < FIRST_BACKOFF,
            "zero timeout must not wait, took {:?}",
            started.elapsed()
        );
        match err {
            StateError::LockHeld { holder: h, .. } => assert_eq!(*h, held),
            other => panic!("expected LockHeld, got {other}"),
        }
    }

    #[tokio::test]
    async fn gives_up_after_the_timeout() {
        let dir = tempfile::tempdir().expect("temp dir");
        let holder = LocalBackend::new(state_path(&dir));
        let waiter = LocalBackend::new(state_path(&dir));
        let held = LockInfo::new("apply");
        holder.lock(&held).await.expect("first lock");

        let timeout = Duration::from_millis(450);
        let started = std::time::Instant::now();
        let err = acquire(&waiter, &LockInfo::new("plan"), timeout)
            .await
            .expect_err("lock stays held");
        let waited = started.elapsed();
        assert!(waited >= timeout, "returned before the timeout: {waited:?}");
        assert!(
            waited < timeout + Duration::from_millis(500),
            "overshot the timeout: {waited:?}"
        );
        assert!(
            matches!(err, StateError::LockHeld { ref holder, .. } if **holder == held),
            "got {err}"
        );
    }

    #[tokio::test]
    async fn waits_for_a_release() {
        let dir = tempfile::tempdir().expect("temp dir");
        let holder = Arc::new(LocalBackend::new(state_path(&dir)));
        let waiter = LocalBackend::new(state_path(&dir));
        let held = LockInfo::new("apply");
        holder.lock(&held).await.expect("first lock");

        let releaser = {
            let holder = Arc::clone(&holder);
            let id = held.id.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(250)).await;
                holder.unlock(&id).await
            })
        };
        let mine = LockInfo::new("plan");
        acquire(&waiter, &mine, Duration::from_secs(10))
            .await
            .expect("lock taken once released");
        releaser
            .await
            .expect("releaser task")
            .expect("holder unlocks");
        assert_eq!(waiter.lock_info().await.expect("lock info"), Some(mine));
    }

    fn holder(who: String, pid: u32) -> LockInfo {
        LockInfo {
            id: "lock".into(),
            who,
            pid,
            operation: "apply".into(),
            created: "2026-11-26T10:00:00Z".into(),
            lease: None,
        }
    }

    #[test]
    fn only_a_gone_process_of_this_machine_abandons_its_lock() {
        let mut child = std::process::Command::new("true")
            .spawn()
            .expect("run true");
        let dead = child.id();
        child.wait().expect("reap");
        let here = LockInfo::who_here();
        let me = LockInfo::new("apply");
        assert!(
            abandoned(&holder(here.clone(), dead), &me),
            "a reaped process is gone"
        );
        assert!(!abandoned(&holder(here.clone(), 1), &me), "pid 1 is alive");
        assert!(
            !abandoned(&holder(here, std::process::id()), &me),
            "this process holds it"
        );
        assert!(
            !abandoned(&holder("ci@another-machine".into(), dead), &me),
            "a holder elsewhere is never presumed gone"
        );
    }

    fn at(term: i32, holder: &str, name: &str) -> Option<LeaseHold> {
        Some(LeaseHold {
            namespace: "terrain-system".into(),
            name: name.into(),
            holder: holder.into(),
            term,
        })
    }

    #[test]
    fn only_a_holder_at_an_older_term_of_the_takers_lease_lost_it() {
        // Both on other machines, alive as far as this one can tell.
        let elsewhere = |lease| holder("terrain@operator-7d9f-abc".into(), 4242).holding(lease);
        let taker = |lease| LockInfo::new("operator apply").holding(lease);
        let new_leader = taker(at(3, "operator-b_1", "terrain-operator"));
        assert!(abandoned(
            &elsewhere(at(2, "operator-a_1", "terrain-operator")),
            &new_leader
        ));
        // The same term: that holder still renews (a term has one holder).
        assert!(!abandoned(
            &elsewhere(at(3, "operator-b_0", "terrain-operator")),
            &new_leader
        ));
        // A later term: the taker is the one that lost it.
        assert!(!abandoned(
            &elsewhere(at(4, "operator-c_1", "terrain-operator")),
            &new_leader
        ));
        // Another Lease (another operator deployment) says nothing of this one.
        assert!(!abandoned(
            &elsewhere(at(0, "operator-a_1", "other-operator")),
            &new_leader
        ));
        // A run from the command line holds no Lease: never taken over by a Lease.
        assert!(!abandoned(&elsewhere(None), &new_leader));
        // A taker holding no Lease cannot tell a replica's Lease lost.
        assert!(!abandoned(
            &elsewhere(at(2, "operator-a_1", "terrain-operator")),
            &taker(None)
        ));
    }
}
