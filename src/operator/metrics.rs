//! What the operator tells Prometheus and the kubelet: `/metrics` in Prometheus' text
//! format (reconciles, plan and apply durations, drift found, Stacks by condition,
//! whether this replica leads, runs in flight against their limit), `/healthz` (the
//! process answers) and `/readyz` (the Stacks can be listed; a replica waiting for the
//! Lease is ready too, as a standby).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use kube::runtime::reflector::Store;

use super::crd::Stack;

/// Upper bounds (seconds) of the duration histograms' buckets: a plan of a few objects
/// takes under a second, an apply that makes a cluster many minutes.
const BUCKETS: [f64; 9] = [0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 1800.0];

/// A Prometheus histogram of durations.
#[derive(Default)]
struct Histogram {
    buckets: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    sum_micros: AtomicU64,
}

impl Histogram {
    fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        for (i, bound) in BUCKETS.iter().enumerate() {
            if secs <= *bound {
                self.buckets[i].fetch_add(1, Ordering::Relaxed);
            }
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        let micros = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        self.sum_micros.fetch_add(micros, Ordering::Relaxed);
    }

    fn render(&self, name: &str, help: &str, out: &mut String) {
        out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} histogram\n"));
        for (i, bound) in BUCKETS.iter().enumerate() {
            let n = self.buckets[i].load(Ordering::Relaxed);
            out.push_str(&format!("{name}_bucket{{le=\"{bound}\"}} {n}\n"));
        }
        let count = self.count.load(Ordering::Relaxed);
        out.push_str(&format!("{name}_bucket{{le=\"+Inf\"}} {count}\n"));
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        out.push_str(&format!("{name}_sum {sum}\n{name}_count {count}\n"));
    }
}

/// The operator's counters.
#[derive(Default)]
pub struct Metrics {
    reconciles_ok: AtomicU64,
    reconciles_failed: AtomicU64,
    plans: Histogram,
    plans_failed: AtomicU64,
    applies: Histogram,
    applies_failed: AtomicU64,
    drift: AtomicU64,
    ready: AtomicBool,
    leader: AtomicBool,
    runs: AtomicU64,
    runs_max: AtomicU64,
    /// The controller's Stacks, once it runs (on the replica that leads).
    stacks: OnceLock<Store<Stack>>,
}

/// A run in flight, counted until dropped.
pub struct Running<'a>(&'a Metrics);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.runs.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Metrics {
    pub fn reconciled(&self, ok: bool) {
        let c = if ok {
            &self.reconciles_ok
        } else {
            &self.reconciles_failed
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// A plan that took `took`; `ok` false when it failed.
    pub fn planned(&self, took: Duration, ok: bool) {
        if ok {
            self.plans.observe(took);
        } else {
            self.plans_failed.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// An apply that took `took`; `ok` false when it failed.
    pub fn applied(&self, took: Duration, ok: bool) {
        if ok {
            self.applies.observe(took);
        } else {
            self.applies_failed.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A plan or apply begins; it ends when the guard is dropped.
    pub fn run_started(&self) -> Running<'_> {
        let now = self.runs.fetch_add(1, Ordering::Relaxed) + 1;
        self.runs_max.fetch_max(now, Ordering::Relaxed);
        Running(self)
    }

    /// Whether this replica holds the Lease.
    pub fn leading(&self, yes: bool) {
        self.leader.store(yes, Ordering::Relaxed);
    }

    /// The controller's Stacks, for the gauge of Stacks by condition.
    pub fn watch(&self, store: Store<Stack>) {
        let _ = self.stacks.set(store);
    }

    /// Drift newly found on a Stack.
    pub fn drifted(&self) {
        self.drift.fetch_add(1, Ordering::Relaxed);
    }

    /// The text exposition of the counters, and of the Stacks by condition.
    pub fn render(&self) -> String {
        let stacks = self.stacks.get().map(Store::state).unwrap_or_default();
        self.render_with(&stacks)
    }

    fn render_with(&self, stacks: &[Arc<Stack>]) -> String {
        let mut out = String::new();
        let counter = |out: &mut String, name: &str, help: &str, rows: &[(&str, u64)]| {
            out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} counter\n"));
            for (labels, n) in rows {
                out.push_str(&format!("{name}{labels} {n}\n"));
            }
        };
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        counter(
            &mut out,
            "terrain_operator_reconciles_total",
            "Reconciles of Stacks, by result.",
            &[
                ("{result=\"ok\"}", load(&self.reconciles_ok)),
                ("{result=\"error\"}", load(&self.reconciles_failed)),
            ],
        );
        counter(
            &mut out,
            "terrain_operator_plans_failed_total",
            "Plans that failed.",
            &[("", load(&self.plans_failed))],
        );
        counter(
            &mut out,
            "terrain_operator_applies_failed_total",
            "Applies that failed.",
            &[("", load(&self.applies_failed))],
        );
        counter(
            &mut out,
            "terrain_operator_drift_detected_total",
            "Times drift was newly found on a Stack.",
            &[("", load(&self.drift))],
        );
        self.plans.render(
            "terrain_operator_plan_duration_seconds",
            "How long plans took.",
            &mut out,
        );
        self.applies.render(
            "terrain_operator_apply_duration_seconds",
            "How long applies took.",
            &mut out,
        );
        let gauge = |out: &mut String, name: &str, help: &str, n: u64| {
            out.push_str(&format!(
                "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {n}\n"
            ));
        };
        gauge(
            &mut out,
            "terrain_operator_leader",
            "1 on the replica that holds the Lease and reconciles, else 0.",
            u64::from(self.leader.load(Ordering::Relaxed)),
        );
        gauge(
            &mut out,
            "terrain_operator_runs_in_flight",
            "Plans and applies running now.",
            load(&self.runs),
        );
        gauge(
            &mut out,
            "terrain_operator_runs_in_flight_max",
            "The most plans and applies that ran at once since the process started.",
            load(&self.runs_max),
        );
        out.push_str("# HELP terrain_operator_stacks Stacks by condition and status.\n# TYPE terrain_operator_stacks gauge\n");
        let mut counts = std::collections::BTreeMap::<(String, String), u64>::new();
        for s in stacks {
            for c in s.status.iter().flat_map(|st| st.conditions.iter()) {
                *counts
                    .entry((c.type_.clone(), c.status.clone()))
                    .or_default() += 1;
            }
        }
        for ((condition, status), n) in counts {
            out.push_str(&format!(
                "terrain_operator_stacks{{condition=\"{condition}\",status=\"{status}\"}} {n}\n"
            ));
        }
        out
    }
}

/// Serves `/metrics`, `/healthz` and `/readyz` on `listener` until the process ends;
/// ready once `stacks` can be listed (the API server answers and the operator may read
/// Stacks).
pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics: Arc<Metrics>,
    stacks: kube::Api<Stack>,
) {
    use axum::http::StatusCode;
    use axum::routing::get;
    let ready_metrics = metrics.clone();
    tokio::spawn(async move {
        let one = kube::api::ListParams::default().limit(1);
        while stacks.list_metadata(&one).await.is_err() {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        ready_metrics.ready.store(true, Ordering::Relaxed);
    });
    let for_metrics = metrics.clone();
    let app = axum::Router::new()
        .route(
            "/metrics",
            get(move || {
                let m = for_metrics.clone();
                async move { m.render() }
            }),
        )
        .route("/healthz", get(|| async { "ok\n" }))
        .route(
            "/readyz",
            get(move || {
                let ready = metrics.ready.load(Ordering::Relaxed);
                async move {
                    if ready {
                        (StatusCode::OK, "ready\n")
                    } else {
                        (StatusCode::SERVICE_UNAVAILABLE, "listing the Stacks\n")
                    }
                }
            }),
        );
    let _ = axum::serve(listener, app).await;
}

/// Binds `addr` for [`serve`]; the address it got (port 0 picks one).
pub async fn bind(addr: SocketAddr) -> std::io::Result<(tokio::net::TcpListener, SocketAddr)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    Ok((listener, local))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_count_into_every_bucket_at_or_above_and_the_text_format_holds() {
        let m = Metrics::default();
        m.planned(Duration::from_millis(300), true);
        m.planned(Duration::from_secs(20), true);
        m.planned(Duration::from_secs(1), false);
        m.applied(Duration::from_secs(70), true);
        m.reconciled(true);
        m.reconciled(false);
        m.drifted();
        m.leading(true);
        let first = m.run_started();
        let second = m.run_started();
        drop(first);
        drop(second);
        let _third = m.run_started();
        let text = m.render();
        for line in [
            "terrain_operator_reconciles_total{result=\"ok\"} 1",
            "terrain_operator_reconciles_total{result=\"error\"} 1",
            "terrain_operator_plans_failed_total 1",
            "terrain_operator_drift_detected_total 1",
            "terrain_operator_plan_duration_seconds_bucket{le=\"0.1\"} 0",
            "terrain_operator_plan_duration_seconds_bucket{le=\"0.5\"} 1",
            "terrain_operator_plan_duration_seconds_bucket{le=\"60\"} 2",
            "terrain_operator_plan_duration_seconds_bucket{le=\"+Inf\"} 2",
            "terrain_operator_plan_duration_seconds_sum 20.3",
            "terrain_operator_apply_duration_seconds_bucket{le=\"60\"} 0",
            "terrain_operator_apply_duration_seconds_bucket{le=\"300\"} 1",
            "terrain_operator_leader 1",
            "terrain_operator_runs_in_flight 1",
            "terrain_operator_runs_in_flight_max 2",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "no line {line:?} in\n{text}"
            );
        }
        // Every sample line is NAME{LABELS} VALUE or NAME VALUE.
        for l in text.lines().filter(|l| !l.starts_with('#')) {
            let (_, value) = l.rsplit_once(' ').expect("a value");
            assert!(value.parse::<f64>().is_ok(), "{l}");
        }
    }
}
