//! Fault injection: the switches a test flips to make the emulated APIs misbehave the way
//! real clouds do (random 503s, 429 bursts with Retry-After, failing long-running
//! operations, slow operations, lost responses, Spot VMs reclaimed under pipeline task
//! pods). The switches are shared with the server through a cheap clone handle and can
//! also be set over HTTP (`POST /_sandbox/faults`).

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

/// The `google.rpc.Code` an operation fails with unless a test asks for another.
pub const INTERNAL: i32 = 13;

/// A handle on the fault switches of one sandbox; clones share the switches.
#[derive(Clone, Default)]
pub struct Faults {
    inner: Arc<Mutex<FaultState>>,
}

impl std::fmt::Debug for Faults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Faults")
            .field("state", &self.lock().spec())
            .finish()
    }
}

#[derive(Default)]
struct FaultState {
    error_rate: Option<ErrorRate>,
    burst: Option<Burst>,
    failing_operations: Vec<OperationFailure>,
    slow_factor: Option<f64>,
    fail_after_effect: u32,
    spot_reclaims: Option<SpotReclaims>,
}

struct ErrorRate {
    spec: ErrorRateSpec,
    rng: StdRng,
}

/// An error injected before a request has any effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Injected {
    pub status: u16,
    pub retry_after: Option<u32>,
}

/// A planned failure of the next operation started on one API.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OperationFailure {
    /// `container` or `file`.
    pub api: String,
    /// The numeric `google.rpc.Code`, 13 (INTERNAL) when absent.
    #[serde(default = "internal")]
    pub code: i32,
    pub message: String,
}

fn internal() -> i32 {
    INTERNAL
}

/// Random failures: each API request fails with `status` with probability `rate`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorRateSpec {
    pub status: u16,
    pub rate: f64,
    pub seed: u64,
}

/// The next `count` API requests fail with `status` and a Retry-After header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Burst {
    pub status: u16,
    pub count: u32,
    #[serde(default)]
    pub retry_after_secs: u32,
}

/// Spot and preemptible VMs reclaimed under running Kubeflow Pipelines task pods: each
/// attempt of a task on such a node is reclaimed halfway through its run with
/// probability `rate`, decided by a hash of `seed` and the attempt's stable names (run,
/// task, attempt number), so a fixed seed replays the same reclaims every time.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SpotReclaims {
    pub rate: f64,
    #[serde(default)]
    pub seed: u64,
}

/// The JSON form of the switches, read and written at `/_sandbox/faults`. When posted,
/// `clear` applies first, then every present field.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FaultSpec {
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub clear: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_rate: Option<ErrorRateSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<Burst>,
    /// Failures for the next operations, in order; one entry is consumed per operation.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fail_next_operations: Vec<OperationFailure>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slow_operations: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fail_after_effect: Option<u32>,
    /// Spot reclaims of pipeline task pods; a rate of 0 turns them off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spot_reclaims: Option<SpotReclaims>,
}

impl Faults {
    fn lock(&self) -> MutexGuard<'_, FaultState> {
        // A panic while holding this lock cannot leave the switches half-updated in a way
        // that matters to a test, so a poisoned lock is still used.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Each API request fails with `status` (e.g. 503) with probability `rate`, drawn from
    /// an RNG seeded with `seed` so a test run is reproducible; a rate of 0 disables it.
    pub fn set_error_rate(&self, status: u16, rate: f64, seed: u64) {
        self.lock()
            .set_error_rate(ErrorRateSpec { status, rate, seed });
    }

    /// The next `count` API requests fail with `status` (e.g. 429) and a `Retry-After`
    /// header of `retry_after_secs`.
    pub fn burst(&self, status: u16, count: u32, retry_after_secs: u32) {
        self.lock().burst = (count > 0).then_some(Burst {
            status,
            count,
            retry_after_secs,
        });
    }

    /// The next long-running operation started on `api` (`container` or `file`) ends
    /// DONE with error 13 INTERNAL and `message`; a failed create leaves no object.
    pub fn fail_next_operation(&self, api: &str, message: &str) {
        self.fail_next_operation_with(api, INTERNAL, message);
    }

    /// Like [`Faults::fail_next_operation`] with another `google.rpc.Code`, e.g. 9
    /// FAILED_PRECONDITION.
    pub fn fail_next_operation_with(&self, api: &str, code: i32, message: &str) {
        self.lock().failing_operations.push(OperationFailure {
            api: api.to_string(),
            code,
            message: message.to_string(),
        });
    }

    /// Multiplies the duration of operations started from now on.
    pub fn slow_operations(&self, factor: f64) {
        self.lock().slow_factor = Some(factor.max(0.0));
    }

    /// The next `count` mutating API requests take effect but answer 503, as if the
    /// response had been lost on the way back.
    pub fn fail_after_effect(&self, count: u32) {
        self.lock().fail_after_effect = count;
    }

    /// Turns every fault off.
    pub fn clear(&self) {
        *self.lock() = FaultState::default();
    }

    /// The current switches in their JSON form.
    pub fn spec(&self) -> FaultSpec {
        self.lock().spec()
    }

    /// Applies a JSON fault description (see [`FaultSpec`]).
    pub fn apply(&self, spec: FaultSpec) {
        let mut state = self.lock();
        if spec.clear {
            *state = FaultState::default();
        }
        if let Some(rate) = spec.error_rate {
            state.set_error_rate(rate);
        }
        if let Some(burst) = spec.burst {
            state.burst = (burst.count > 0).then_some(burst);
        }
        state.failing_operations.extend(spec.fail_next_operations);
        if let Some(factor) = spec.slow_operations {
            state.slow_factor = Some(factor.max(0.0));
        }
        if let Some(count) = spec.fail_after_effect {
            state.fail_after_effect = count;
        }
        if let Some(reclaims) = spec.spot_reclaims {
            state.spot_reclaims = (reclaims.rate > 0.0).then_some(reclaims);
        }
    }

    /// Reclaims spot VMs under pipeline task pods (see [`SpotReclaims`]); a rate of 0
    /// turns it off.
    pub fn spot_reclaims(&self, rate: f64, seed: u64) {
        self.lock().spot_reclaims = (rate > 0.0).then_some(SpotReclaims { rate, seed });
    }

    /// The spot reclaim switch, for the Kubernetes controllers' settle.
    pub(crate) fn reclaims(&self) -> Option<SpotReclaims> {
        self.lock().spot_reclaims
    }

    /// Decides whether an API request fails before it has any effect.
    pub(crate) fn before_request(&self) -> Option<Injected> {
        let mut state = self.lock();
        if let Some(burst) = state.burst.as_mut() {
            burst.count -= 1;
            let injected = Injected {
                status: burst.status,
                retry_after: Some(burst.retry_after_secs),
            };
            if burst.count == 0 {
                state.burst = None;
            }
            return Some(injected);
        }
        let rate = state.error_rate.as_mut()?;
        let roll: f64 = rate.rng.random();
        (roll < rate.spec.rate).then_some(Injected {
            status: rate.spec.status,
            retry_after: None,
        })
    }

    /// Decides whether the response of a mutating request that took effect is lost.
    pub(crate) fn lose_response(&self) -> bool {
        let mut state = self.lock();
        if state.fail_after_effect == 0 {
            return false;
        }
        state.fail_after_effect -= 1;
        true
    }

    /// Takes the planned failure for the next operation on `api`, if any.
    pub(crate) fn take_operation_failure(&self, api: &str) -> Option<(i32, String)> {
        let mut state = self.lock();
        let i = state.failing_operations.iter().position(|f| f.api == api)?;
        let failure = state.failing_operations.remove(i);
        Some((failure.code, failure.message))
    }

    /// The factor operation durations are multiplied by.
    pub(crate) fn slow_factor(&self) -> f64 {
        self.lock().slow_factor.unwrap_or(1.0)
    }
}

impl FaultState {
    fn set_error_rate(&mut self, spec: ErrorRateSpec) {
        self.error_rate = (spec.rate > 0.0).then(|| ErrorRate {
            spec,
            rng: StdRng::seed_from_u64(spec.seed),
        });
    }

    fn spec(&self) -> FaultSpec {
        FaultSpec {
            clear: false,
            error_rate: self.error_rate.as_ref().map(|r| r.spec),
            burst: self.burst,
            fail_next_operations: self.failing_operations.clone(),
            slow_operations: self.slow_factor,
            fail_after_effect: (self.fail_after_effect > 0).then_some(self.fail_after_effect),
            spot_reclaims: self.spot_reclaims,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_fails_exactly_count_requests_with_retry_after() {
        let faults = Faults::default();
        faults.burst(429, 2, 3);
        let want = Some(Injected {
            status: 429,
            retry_after: Some(3),
        });
        assert_eq!(faults.before_request(), want);
        assert_eq!(faults.before_request(), want);
        assert_eq!(faults.before_request(), None);
    }

    #[test]
    fn error_rate_is_deterministic_for_a_seed() {
        let run = || {
            let faults = Faults::default();
            faults.set_error_rate(503, 0.5, 7);
            (0..64)
                .map(|_| faults.before_request().is_some())
                .collect::<Vec<_>>()
        };
        let first = run();
        assert_eq!(first, run());
        let failures = first.iter().filter(|f| **f).count();
        assert!((16..=48).contains(&failures), "{failures} of 64 failed");
        let faults = Faults::default();
        faults.set_error_rate(503, 0.0, 7);
        assert!((0..32).all(|_| faults.before_request().is_none()));
    }

    #[test]
    fn operation_failures_are_per_api_and_consumed_in_order() {
        let faults = Faults::default();
        faults.fail_next_operation("file", "disk on fire");
        faults.fail_next_operation_with("container", 9, "no");
        assert_eq!(faults.take_operation_failure("storage"), None);
        assert_eq!(
            faults.take_operation_failure("container"),
            Some((9, "no".to_string()))
        );
        assert_eq!(
            faults.take_operation_failure("file"),
            Some((13, "disk on fire".to_string()))
        );
        assert_eq!(faults.take_operation_failure("file"), None);
    }

    #[test]
    fn lost_responses_are_counted_and_clear_resets_everything() {
        let faults = Faults::default();
        faults.fail_after_effect(1);
        faults.slow_operations(3.0);
        assert!(faults.lose_response());
        assert!(!faults.lose_response());
        assert_eq!(faults.slow_factor(), 3.0);
        faults.clear();
        assert_eq!(faults.slow_factor(), 1.0);
        assert_eq!(faults.spec(), FaultSpec::default());
    }

    #[test]
    fn json_spec_round_trips() {
        let spec: FaultSpec = serde_json::from_value(serde_json::json!({
            "clear": true,
            "burst": {"status": 429, "count": 2, "retryAfterSecs": 1},
            "failNextOperations": [{"api": "container", "message": "boom"}],
            "failAfterEffect": 1
        }))
        .expect("valid spec");
        let faults = Faults::default();
        faults.apply(spec);
        let now = faults.spec();
        assert_eq!(now.burst.map(|b| b.count), Some(2));
        assert_eq!(now.fail_next_operations[0].code, 13);
        assert_eq!(now.fail_after_effect, Some(1));
        faults.apply(
            serde_json::from_value(serde_json::json!({"spotReclaims": {"rate": 0.5, "seed": 7}}))
                .expect("valid spec"),
        );
        assert_eq!(faults.reclaims(), Some(SpotReclaims { rate: 0.5, seed: 7 }));
        assert!(serde_json::from_value::<FaultSpec>(serde_json::json!({"bogus": 1})).is_err());
    }
}
