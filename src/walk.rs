//! A bounded-parallel walker over a DAG of operations. A failed operation stops its
//! dependents only; independent branches run to the end. Once cancelled, nothing new
//! starts and operations in flight finish.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use futures::stream::{FuturesUnordered, StreamExt};

/// Set once to ask the walker to start nothing new (the first Ctrl-C).
#[derive(Clone, Default, Debug)]
pub struct Cancel(Arc<AtomicBool>);

impl Cancel {
    /// A flag not yet set.
    pub fn new() -> Self {
        Self::default()
    }
    /// Asks running walks to start nothing new.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
    /// Whether cancellation was asked for.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// How one node of the walk ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Done,
    Failed,
    /// Not run because the node at this index (a dependency) failed or was skipped.
    Skipped(usize),
    /// Not started because the walk was cancelled.
    Cancelled,
}

/// Runs `run(i)` for every node once all of `deps[i]` are done, at most `parallelism`
/// at a time, in index order among the ready ones. Returns each node's outcome.
pub async fn walk<F, Fut>(
    deps: &[Vec<usize>],
    parallelism: usize,
    cancel: &Cancel,
    run: F,
) -> Vec<Outcome>
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = bool>,
{
    let n = deps.len();
    let mut outcome: Vec<Option<Outcome>> = vec![None; n];
    let mut waiting: Vec<usize> = deps.iter().map(Vec::len).collect();
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, ds) in deps.iter().enumerate() {
        for &d in ds {
            dependents[d].push(i);
        }
    }
    let mut ready: std::collections::BTreeSet<usize> =
        (0..n).filter(|&i| waiting[i] == 0).collect();
    let mut running = FuturesUnordered::new();
    let parallelism = parallelism.max(1);
    loop {
        while running.len() < parallelism && !cancel.is_cancelled() {
            let Some(i) = ready.pop_first() else { break };
            let fut = run(i);
            running.push(async move { (i, fut.await) });
        }
        let Some((i, ok)) = running.next().await else {
            break;
        };
        outcome[i] = Some(if ok { Outcome::Done } else { Outcome::Failed });
        if ok {
            for &d in &dependents[i] {
                waiting[d] -= 1;
                if waiting[d] == 0 {
                    ready.insert(d);
                }
            }
        } else {
            skip_dependents(i, &dependents, &mut outcome);
        }
    }
    outcome
        .into_iter()
        .map(|o| o.unwrap_or(Outcome::Cancelled))
        .collect()
}

fn skip_dependents(failed: usize, dependents: &[Vec<usize>], outcome: &mut [Option<Outcome>]) {
    let mut stack: Vec<usize> = dependents[failed].clone();
    while let Some(d) = stack.pop() {
        if outcome[d].is_none() {
            outcome[d] = Some(Outcome::Skipped(failed));
            stack.extend(dependents[d].iter().copied());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::time::Duration;

    #[tokio::test]
    async fn failure_stops_dependents_only() {
        // 0 <- 1 <- 2 ; 3 independent
        let deps = vec![vec![], vec![0], vec![1], vec![]];
        let out = walk(&deps, 4, &Cancel::new(), |i| async move { i != 1 }).await;
        assert_eq!(
            out,
            vec![
                Outcome::Done,
                Outcome::Failed,
                Outcome::Skipped(1),
                Outcome::Done
            ]
        );
    }

    #[tokio::test]
    async fn never_more_than_parallelism_at_once() {
        let deps = vec![Vec::new(); 20];
        let live = Arc::new(Mutex::new((0usize, 0usize)));
        walk(&deps, 3, &Cancel::new(), |_| {
            let live = live.clone();
            async move {
                {
                    let mut l = live.lock().expect("lock");
                    l.0 += 1;
                    l.1 = l.1.max(l.0);
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
                live.lock().expect("lock").0 -= 1;
                true
            }
        })
        .await;
        assert_eq!(live.lock().expect("lock").1, 3);
    }

    #[tokio::test]
    async fn cancel_starts_nothing_new_but_finishes_running() {
        let deps = vec![vec![], vec![0], vec![1]];
        let cancel = Cancel::new();
        let out = walk(&deps, 2, &cancel, |i| {
            let cancel = cancel.clone();
            async move {
                if i == 0 {
                    cancel.cancel();
                }
                true
            }
        })
        .await;
        assert_eq!(
            out,
            vec![Outcome::Done, Outcome::Cancelled, Outcome::Cancelled]
        );
    }
}
