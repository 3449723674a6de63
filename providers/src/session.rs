//! What one run shares among its provider calls, and nothing else does: the clients
//! each provider instance is configured with (one connection pool and token cache per
//! configuration), Kubernetes connections per cluster reference, API discovery per
//! cluster, per-cluster operation locks, and the environment the engine passes down.
//!
//! A [`Session`] is owned by the run (the engine's settings); providers reach it only
//! through their [`crate::Ctx`]. Two runs in one process (two engines, two stacks, a
//! test beside another) share no client, cache or environment: nothing here is a
//! process-global.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// Reads an environment variable as the run sees it.
pub type EnvFn = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// The environment of this process (outside tests, what the engine passes).
pub fn process_env() -> EnvFn {
    Arc::new(|name| std::env::var(name).ok())
}

/// What a slot holds: one cache, of the type its key names.
type Slot = Arc<dyn Any + Send + Sync>;

/// The state a run's provider calls share, by type and name.
#[derive(Default)]
pub struct Session {
    slots: Mutex<HashMap<(TypeId, &'static str), Slot>>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").finish_non_exhaustive()
    }
}

impl Session {
    /// A new session, sharing nothing with any other.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// The slot `name` of type `T`, made empty on first use. Each cache is one slot
    /// (`T` a map behind a lock), so a provider keeps what it caches for the run here.
    pub fn slot<T: Any + Send + Sync + Default>(&self, name: &'static str) -> Arc<T> {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        let any = slots
            .entry((TypeId::of::<T>(), name))
            .or_insert_with(|| Arc::new(T::default()) as Slot)
            .clone();
        drop(slots);
        // The key holds T's TypeId, so the value is a T.
        any.downcast::<T>()
            .unwrap_or_else(|_| Arc::new(T::default()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_is_shared_within_a_session_and_never_across_sessions() {
        let a = Session::new();
        let b = Session::new();
        let cache = a.slot::<Mutex<Vec<u32>>>("numbers");
        cache.lock().expect("lock").push(7);
        assert_eq!(
            *a.slot::<Mutex<Vec<u32>>>("numbers").lock().expect("lock"),
            [7]
        );
        assert!(b
            .slot::<Mutex<Vec<u32>>>("numbers")
            .lock()
            .expect("lock")
            .is_empty());
        // Same name, other type: another slot.
        assert!(a
            .slot::<Mutex<Vec<u64>>>("numbers")
            .lock()
            .expect("lock")
            .is_empty());
    }
}
