//! The timestamp formats the emulated APIs write, one function per format.

use chrono::{DateTime, SecondsFormat, Utc};

/// `2024-05-01T12:00:00+00:00`, GKE's format for resource timestamps.
pub(crate) fn time_secs(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, false)
}

/// `2024-05-01T12:00:00.123456789Z`, the format of operation and Filestore timestamps.
pub(crate) fn time_nanos(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Nanos, true)
}

/// `2024-05-01T12:00:00.123Z`, Cloud Storage's and S3's format.
pub(crate) fn time_millis(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_use_each_api_format() {
        let t = DateTime::<Utc>::from_timestamp_millis(1_714_564_800_123).expect("time");
        assert_eq!(time_secs(t), "2024-05-01T12:00:00+00:00");
        assert_eq!(time_millis(t), "2024-05-01T12:00:00.123Z");
        assert_eq!(time_nanos(t), "2024-05-01T12:00:00.123000000Z");
    }
}
