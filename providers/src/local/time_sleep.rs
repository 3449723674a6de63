//! The `time_sleep` kind: a pause after create and/or before destroy, for ordering
//! against systems that are eventually consistent. Nothing exists remotely; the id is
//! the UTC time the create finished.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::duration::parse_duration;
use crate::schema::Fields;
use crate::{Ctx, Invalid, Kind, Live, ProviderError};

/// The kind `time_sleep`.
#[derive(Debug, Clone, Copy, Default)]
pub struct TimeSleep;

/// What a stack writes for a `time_sleep`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    /// How long to wait after creating, e.g. "30s" or "1m30s".
    pub create_duration: Option<String>,
    /// How long to wait before destroying, e.g. "30s" or "1m30s".
    pub destroy_duration: Option<String>,
    /// Arbitrary values; changing any of them recreates the sleep (and waits again).
    #[terrain(force_new)]
    pub triggers: Option<BTreeMap<String, String>>,
}

/// What `time_sleep` reports after apply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Outputs {
    /// When the create finished (RFC 3339, UTC).
    pub id: String,
}

const DURATION_FIELDS: [&str; 2] = ["create_duration", "destroy_duration"];

/// Says what is wrong with a duration; the field's name is added by whoever reports it.
fn duration_problem(text: &str) -> String {
    format!("{text:?} is not a duration; use e.g. \"500ms\", \"30s\", \"1m30s\"")
}

/// Parses the duration in `field`, `None` when the field is unset. Validation has
/// already refused bad text; this error only fires if that step was skipped.
fn duration(field: &str, text: Option<&str>) -> Result<Option<Duration>, ProviderError> {
    match text {
        None => Ok(None),
        Some(t) => parse_duration(t)
            .map(Some)
            .ok_or_else(|| ProviderError::Unsupported(format!("{field}: {}", duration_problem(t)))),
    }
}

async fn sleep(ctx: &Ctx, field: &str, text: Option<&str>) -> Result<(), ProviderError> {
    if let (Some(d), Some(t)) = (duration(field, text)?, text) {
        ctx.progress(&format!("sleeping {t}"));
        tokio::time::sleep(d).await;
    }
    Ok(())
}

#[async_trait]
impl Kind for TimeSleep {
    type Spec = Spec;
    type Outputs = Outputs;
    const KIND: &'static str = "time_sleep";
    const PROVIDER: &'static str = "local";

    fn validate(spec: &Spec, _config: &serde_json::Value) -> Vec<Invalid> {
        DURATION_FIELDS
            .into_iter()
            .zip([&spec.create_duration, &spec.destroy_duration])
            .filter_map(|(field, text)| {
                let text = text.as_deref()?;
                parse_duration(text)
                    .is_none()
                    .then(|| Invalid::at(field, duration_problem(text)))
            })
            .collect()
    }

    async fn read(
        &self,
        _ctx: &Ctx,
        id: &str,
        prior: Option<&Spec>,
    ) -> Result<Option<Live<Self>>, ProviderError> {
        let spec = prior.cloned().unwrap_or(Spec {
            create_duration: None,
            destroy_duration: None,
            triggers: None,
        });
        Ok(Some(live(id.to_string(), spec)))
    }

    async fn create(&self, ctx: &Ctx, spec: &Spec) -> Result<Live<Self>, ProviderError> {
        sleep(ctx, DURATION_FIELDS[0], spec.create_duration.as_deref()).await?;
        Ok(live(rfc3339_utc(SystemTime::now()), spec.clone()))
    }

    async fn update(
        &self,
        _ctx: &Ctx,
        id: &str,
        _prior: &Spec,
        spec: &Spec,
    ) -> Result<Live<Self>, ProviderError> {
        // Only the durations can change in place; they matter at the next create or
        // destroy, not now, so there is nothing to wait for.
        for (field, text) in DURATION_FIELDS
            .into_iter()
            .zip([&spec.create_duration, &spec.destroy_duration])
        {
            duration(field, text.as_deref())?;
        }
        Ok(live(id.to_string(), spec.clone()))
    }

    async fn delete(
        &self,
        ctx: &Ctx,
        _id: &str,
        prior: Option<&Spec>,
    ) -> Result<(), ProviderError> {
        let text = prior.and_then(|p| p.destroy_duration.as_deref());
        sleep(ctx, DURATION_FIELDS[1], text).await
    }
}

fn live(id: String, spec: Spec) -> Live<TimeSleep> {
    Live {
        outputs: Outputs { id: id.clone() },
        id,
        spec,
    }
}

/// `t` as `YYYY-MM-DDTHH:MM:SSZ`, computed here to avoid a date crate for one format.
pub(crate) fn rfc3339_utc(t: SystemTime) -> String {
    // A clock before 1970 is a broken clock; the epoch is as good an answer as any.
    let secs = t
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The proleptic Gregorian date `days` after 1970-01-01 (Howard Hinnant's
/// `civil_from_days`, restricted to dates after the epoch).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::schema_mismatches;
    use serde_json::json;
    use std::sync::{Arc, Mutex};
    use tokio::time::Instant;

    fn spec(create: Option<&str>, destroy: Option<&str>) -> Spec {
        Spec {
            create_duration: create.map(str::to_string),
            destroy_duration: destroy.map(str::to_string),
            triggers: None,
        }
    }

    /// A context whose progress messages land in the returned log.
    fn recording_ctx() -> (Ctx, Arc<Mutex<Vec<String>>>) {
        let log = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&log);
        let ctx = Ctx::new("time_sleep.wait", json!({})).with_reporter(Arc::new(move |m: &str| {
            sink.lock()
                .expect("no test panics while holding the log")
                .push(m.to_string());
        }));
        (ctx, log)
    }

    fn messages(log: &Arc<Mutex<Vec<String>>>) -> Vec<String> {
        log.lock()
            .expect("no test panics while holding the log")
            .clone()
    }

    #[test]
    fn schema_agrees_with_serde() {
        let full = Spec {
            create_duration: Some("1s".into()),
            destroy_duration: Some("2s".into()),
            triggers: Some(BTreeMap::from([("image".to_string(), "v1".to_string())])),
        };
        let outputs = Outputs {
            id: "2024-01-01T00:00:00Z".into(),
        };
        assert_eq!(
            schema_mismatches::<TimeSleep>(&full, &outputs),
            Vec::<String>::new()
        );
    }

    #[test]
    fn only_triggers_force_replacement() {
        let schema = TimeSleep::schema();
        let forcing: Vec<_> = schema
            .fields
            .iter()
            .filter(|f| f.force_new)
            .map(|f| f.name)
            .collect();
        assert_eq!(forcing, ["triggers"]);
    }

    #[test]
    fn validate_names_the_bad_duration_and_shows_good_ones() {
        assert!(TimeSleep::validate(
            &spec(Some("1m30s"), Some("200ms")),
            &serde_json::Value::Null
        )
        .is_empty());
        assert!(TimeSleep::validate(&spec(None, None), &serde_json::Value::Null).is_empty());
        let problems =
            TimeSleep::validate(&spec(Some("2x"), Some("soon")), &serde_json::Value::Null);
        assert_eq!(
            problems,
            vec![
                Invalid::at(
                    "create_duration",
                    "\"2x\" is not a duration; use e.g. \"500ms\", \"30s\", \"1m30s\""
                ),
                Invalid::at(
                    "destroy_duration",
                    "\"soon\" is not a duration; use e.g. \"500ms\", \"30s\", \"1m30s\""
                ),
            ]
        );
    }

    #[test]
    fn timestamps_are_rfc3339_utc() {
        assert_eq!(rfc3339_utc(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        let t = UNIX_EPOCH + Duration::from_secs(951_782_400 + 3661);
        assert_eq!(rfc3339_utc(t), "2000-02-29T01:01:01Z");
        let t = UNIX_EPOCH + Duration::from_secs(1_704_067_199);
        assert_eq!(rfc3339_utc(t), "2023-12-31T23:59:59Z");
    }

    #[tokio::test(start_paused = true)]
    async fn create_sleeps_and_reports_progress() -> Result<(), ProviderError> {
        let (ctx, log) = recording_ctx();
        let start = Instant::now();
        let live = TimeSleep
            .create(&ctx, &spec(Some("2s"), Some("5s")))
            .await?;
        assert_eq!(start.elapsed(), Duration::from_secs(2));
        assert_eq!(messages(&log), ["sleeping 2s"]);
        assert_eq!(live.outputs.id, live.id);
        assert!(live.id.ends_with('Z') && live.id.len() == 20, "{}", live.id);
        Ok(())
    }

    #[tokio::test(start_paused = true)]
    async fn create_without_duration_returns_at_once() -> Result<(), ProviderError> {
        let (ctx, log) = recording_ctx();
        let start = Instant::now();
        TimeSleep.create(&ctx, &spec(None, None)).await?;
        assert_eq!(start.elapsed(), Duration::ZERO);
        assert!(messages(&log).is_empty());
        Ok(())
    }

    #[tokio::test(start_paused = true)]
    async fn update_does_not_sleep_and_keeps_the_id() -> Result<(), ProviderError> {
        let (ctx, log) = recording_ctx();
        let start = Instant::now();
        let live = TimeSleep
            .update(
                &ctx,
                "2024-01-01T00:00:00Z",
                &spec(Some("1s"), None),
                &spec(Some("1h"), Some("1m")),
            )
            .await?;
        assert_eq!(start.elapsed(), Duration::ZERO);
        assert!(messages(&log).is_empty());
        assert_eq!(live.id, "2024-01-01T00:00:00Z");
        assert_eq!(live.spec, spec(Some("1h"), Some("1m")));
        Ok(())
    }

    #[tokio::test(start_paused = true)]
    async fn delete_sleeps_the_prior_destroy_duration() -> Result<(), ProviderError> {
        let (ctx, log) = recording_ctx();
        let start = Instant::now();
        TimeSleep
            .delete(&ctx, "id", Some(&spec(Some("1h"), Some("1m30s"))))
            .await?;
        assert_eq!(start.elapsed(), Duration::from_secs(90));
        assert_eq!(messages(&log), ["sleeping 1m30s"]);

        let start = Instant::now();
        TimeSleep.delete(&ctx, "id", None).await?;
        assert_eq!(
            start.elapsed(),
            Duration::ZERO,
            "nothing known about a destroy duration on import"
        );
        Ok(())
    }

    #[tokio::test]
    async fn read_returns_the_prior_or_an_empty_spec() -> Result<(), ProviderError> {
        let ctx = Ctx::new("time_sleep.wait", json!({}));
        let prior = spec(Some("1s"), None);
        let live = TimeSleep
            .read(&ctx, "t", Some(&prior))
            .await?
            .expect("always exists");
        assert_eq!(
            (live.id.as_str(), live.outputs.id.as_str(), &live.spec),
            ("t", "t", &prior)
        );
        let live = TimeSleep
            .read(&ctx, "t", None)
            .await?
            .expect("always exists");
        assert_eq!(live.spec, spec(None, None));
        Ok(())
    }

    #[tokio::test]
    async fn a_bad_duration_that_slipped_past_validate_is_an_error_not_a_panic() {
        let ctx = Ctx::new("time_sleep.wait", json!({}));
        let err = TimeSleep
            .create(&ctx, &spec(Some("2x"), None))
            .await
            .expect_err("bad duration");
        assert!(
            err.to_string().contains("\"2x\" is not a duration"),
            "{err}"
        );
    }
}
