//! Waiting for a state lock: retries [`Backend::lock`] with backoff until a timeout, so
//! a run started while another finishes (`-lock-timeout`) does not fail needlessly; and
//! telling a lock whose holder is gone (a killed run on this machine) from a live one.

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

/// Whether the run holding `holder` is gone: a process of this machine that no longer
/// exists. A remote lock object outlives a killed run (the local backend's OS lock
/// does not), and such a lock is taken over rather than refusing every later run until
/// `force-unlock`. A holder on another machine is never presumed gone.
pub fn abandoned(holder: &LockInfo) -> bool {
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
        assert!(
            abandoned(&holder(here.clone(), dead)),
            "a reaped process is gone"
        );
        assert!(!abandoned(&holder(here.clone(), 1)), "pid 1 is alive");
        assert!(
            !abandoned(&holder(here, std::process::id())),
            "this process holds it"
        );
        assert!(
            !abandoned(&holder("ci@another-machine".into(), dead)),
            "a holder elsewhere is never presumed gone"
        );
    }
}
