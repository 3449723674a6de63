//! The duration syntax of the local kinds (`"500ms"`, `"30s"`, `"1m30s"`, `"2h"`):
//! parsing it, and writing a `Duration` back the same way for progress messages.

use std::time::Duration;

/// Parses a duration written as one or more `<integer><unit>` parts, units `ms`, `s`,
/// `m` and `h` (`"1m30s"`, `"200ms"`). `None` when the text is not such a duration.
pub fn parse_duration(text: &str) -> Option<Duration> {
    if text.is_empty() {
        return None;
    }
    let mut rest = text;
    let mut total = Duration::ZERO;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return None;
        }
        let amount: u64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let part = match &rest[..unit_len] {
            "ms" => Duration::from_millis(amount),
            "s" => Duration::from_secs(amount),
            "m" => Duration::from_secs(amount.checked_mul(60)?),
            "h" => Duration::from_secs(amount.checked_mul(3600)?),
            _ => return None,
        };
        rest = &rest[unit_len..];
        total = total.checked_add(part)?;
    }
    Some(total)
}

/// Writes `d` in the syntax [`parse_duration`] reads, largest units first (`"1m30s"`);
/// sub-millisecond precision is dropped because the syntax cannot express it.
pub fn format_duration(d: Duration) -> String {
    let mut millis = d.as_millis();
    if millis == 0 {
        return "0s".to_string();
    }
    let mut out = String::new();
    for (unit, size) in [("h", 3_600_000u128), ("m", 60_000), ("s", 1_000), ("ms", 1)] {
        let n = millis / size;
        if n > 0 {
            out.push_str(&format!("{n}{unit}"));
            millis %= size;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_single_and_combined_units() {
        assert_eq!(parse_duration("200ms"), Some(Duration::from_millis(200)));
        assert_eq!(parse_duration("2s"), Some(Duration::from_secs(2)));
        assert_eq!(parse_duration("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("1h"), Some(Duration::from_secs(3600)));
        assert_eq!(
            parse_duration("1h2m3s4ms"),
            Some(Duration::from_millis(3_723_004))
        );
        assert_eq!(parse_duration("0s"), Some(Duration::ZERO));
    }

    #[test]
    fn rejects_what_is_not_a_duration() {
        for text in [
            "", "2", "2x", "s", "1.5s", "-1s", " 1s", "1s ", "1 s", "1mss", "ms1",
        ] {
            assert_eq!(parse_duration(text), None, "{text:?} should not parse");
        }
    }

    #[test]
    fn rejects_overflow_instead_of_wrapping() {
        assert_eq!(parse_duration("99999999999999999999s"), None);
        assert_eq!(parse_duration(&format!("{}h", u64::MAX)), None);
    }

    #[test]
    fn format_round_trips_through_parse() {
        for text in ["200ms", "2s", "1m30s", "1h", "1h2m3s4ms", "0s"] {
            let d = parse_duration(text).expect("test input is a valid duration");
            assert_eq!(format_duration(d), text);
        }
        assert_eq!(format_duration(Duration::from_secs(90)), "1m30s");
    }
}
