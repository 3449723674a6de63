//! Long-running operations as lazy state machines: an operation is a start time plus a
//! duration, evaluated against the clock whenever a request reads state, so no background
//! timers exist and a state file written by one process is finished by the next. Also
//! the progress report (stages and metrics) an operation shows while it runs.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::Api;
use crate::faults::Faults;

/// A `google.rpc.Status` an operation ended with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct RpcStatus {
    pub code: i32,
    pub message: String,
}

/// The clock of one operation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Lro {
    pub start: DateTime<Utc>,
    pub duration_ms: u64,
    /// Whether the completion has been applied to the objects (set by `settle`).
    #[serde(default)]
    pub settled: bool,
    /// The failure a fault planned for this operation; it becomes the operation's error
    /// when it completes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<RpcStatus>,
}

impl Lro {
    pub(crate) fn end(&self) -> DateTime<Utc> {
        let ms = i64::try_from(self.duration_ms).unwrap_or(i64::MAX / 2);
        self.start + chrono::Duration::milliseconds(ms)
    }

    /// Whether the operation has run its course but its effect is not applied yet.
    pub(crate) fn due(&self, now: DateTime<Utc>) -> bool {
        !self.settled && now >= self.end()
    }

    /// How far along the operation is. An unsettled operation never reports 1.0: it
    /// completes on the next read, never in the response that started it.
    pub(crate) fn fraction(&self, now: DateTime<Utc>) -> f64 {
        if self.settled {
            return 1.0;
        }
        if self.duration_ms == 0 {
            return 0.0;
        }
        let elapsed = (now - self.start).num_milliseconds().max(0) as f64;
        (elapsed / self.duration_ms as f64).clamp(0.0, 0.99)
    }

    /// The error of a finished, failed operation.
    pub(crate) fn error(&self) -> Option<&RpcStatus> {
        if self.settled {
            self.failure.as_ref()
        } else {
            None
        }
    }
}

/// What a handler needs to start operations: the clock reading of this request, the
/// sandbox's timing and the fault switches.
pub(crate) struct OpCtx<'a> {
    pub now: DateTime<Utc>,
    pub scale: f64,
    pub faults: &'a Faults,
}

impl OpCtx<'_> {
    /// Starts an operation whose realistic duration is `base`.
    pub(crate) fn start(&self, api: Api, base: Duration) -> Lro {
        let factor = self.scale * self.faults.slow_factor();
        let ms = base.as_millis() as f64 * factor;
        let duration_ms = if ms.is_finite() && ms > 0.0 {
            ms.round() as u64
        } else {
            0
        };
        Lro {
            start: self.now,
            duration_ms,
            settled: false,
            failure: self
                .faults
                .take_operation_failure(api.name())
                .map(|(code, message)| RpcStatus { code, message }),
        }
    }
}

/// A GKE-style `OperationProgress`: one metric pair (`X`, `X_TOTAL`) and one stage per
/// step, filled in proportion to `fraction`.
pub(crate) fn progress(steps: &[(&str, i64)], fraction: f64, done: bool) -> Value {
    let total: i64 = steps.iter().map(|(_, n)| n).sum();
    let mut reached = if done {
        total
    } else {
        (fraction * total as f64).floor() as i64
    };
    let mut metrics = Vec::new();
    let mut stages = Vec::new();
    let mut current_found = false;
    for (name, size) in steps {
        let here = reached.clamp(0, *size);
        reached -= here;
        let status = if here == *size {
            "DONE"
        } else if !current_found {
            current_found = true;
            "RUNNING"
        } else {
            "PENDING"
        };
        let pair = json!([
            {"name": name, "intValue": here.to_string()},
            {"name": format!("{name}_TOTAL"), "intValue": size.to_string()},
        ]);
        if let Value::Array(items) = &pair {
            metrics.extend(items.iter().cloned());
        }
        stages.push(json!({"name": name, "status": status, "metrics": pair}));
    }
    json!({
        "status": if done { "DONE" } else { "RUNNING" },
        "metrics": metrics,
        "stages": stages,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: i64) -> DateTime<Utc> {
        DateTime::<Utc>::from_timestamp_millis(1_700_000_000_000 + ms).expect("valid time")
    }

    #[test]
    fn an_operation_is_due_after_its_duration_and_never_before() {
        let faults = Faults::default();
        let ctx = OpCtx {
            now: at(0),
            scale: 0.5,
            faults: &faults,
        };
        let lro = ctx.start(Api::Container, Duration::from_secs(6));
        assert_eq!(lro.duration_ms, 3000);
        assert!(!lro.due(at(2999)));
        assert!(lro.due(at(3000)));
        assert_eq!(lro.fraction(at(1500)), 0.5);
        assert_eq!(lro.fraction(at(9000)), 0.99);
    }

    #[test]
    fn instant_timing_completes_on_the_next_read() {
        let faults = Faults::default();
        let ctx = OpCtx {
            now: at(0),
            scale: 0.0,
            faults: &faults,
        };
        let lro = ctx.start(Api::File, Duration::from_secs(4));
        assert_eq!(lro.fraction(at(0)), 0.0);
        assert!(lro.due(at(0)));
    }

    #[test]
    fn faults_slow_and_fail_operations() {
        let faults = Faults::default();
        faults.slow_operations(2.0);
        faults.fail_next_operation("file", "quota");
        let ctx = OpCtx {
            now: at(0),
            scale: 1.0,
            faults: &faults,
        };
        let container = ctx.start(Api::Container, Duration::from_secs(1));
        assert_eq!(
            (container.duration_ms, container.failure.is_some()),
            (2000, false)
        );
        let mut file = ctx.start(Api::File, Duration::from_secs(1));
        assert_eq!(file.error(), None, "no error while running");
        file.settled = true;
        assert_eq!(
            file.error(),
            Some(&RpcStatus {
                code: 13,
                message: "quota".to_string()
            })
        );
    }

    #[test]
    fn progress_fills_stages_in_order() {
        let steps = [("A", 2), ("B", 2)];
        let p = progress(&steps, 0.5, false);
        let statuses: Vec<&str> = p["stages"]
            .as_array()
            .expect("stages")
            .iter()
            .filter_map(|s| s["status"].as_str())
            .collect();
        assert_eq!(statuses, ["DONE", "RUNNING"]);
        assert_eq!(p["metrics"][0], json!({"name": "A", "intValue": "2"}));
        assert_eq!(p["metrics"][2], json!({"name": "B", "intValue": "0"}));
        let p = progress(&steps, 0.0, false);
        assert_eq!(p["stages"][1]["status"], "PENDING");
        let p = progress(&steps, 0.3, true);
        assert_eq!(p["status"], "DONE");
        assert_eq!(p["metrics"][2]["intValue"], "2");
    }
}
