//! The text forms of the meta types with a custom JSON encoding: `metav1.Time` and `MicroTime` (RFC 3339)
//! and `metav1.Duration` (Go's `time.Duration` string).

use super::ProtobufError;

/// Seconds and nanoseconds since the epoch of an RFC 3339 time, as Go's `time.Parse(time.RFC3339, ..)`.
pub fn parse_time(s: &str) -> Result<(i64, i32), ProtobufError> {
    let ts: jiff::Timestamp = s
        .parse()
        .map_err(|e| ProtobufError::Invalid(format!("invalid time {s:?}: {e}")))?;
    Ok((ts.as_second(), ts.subsec_nanosecond()))
}

fn timestamp(seconds: i64, nanos: i32) -> Result<jiff::Timestamp, ProtobufError> {
    jiff::Timestamp::new(seconds, nanos)
        .map_err(|e| ProtobufError::Invalid(format!("time out of range: {e}")))
}

/// `metav1.Time`'s JSON form: UTC, whole seconds.
pub fn format_time(seconds: i64) -> Result<String, ProtobufError> {
    Ok(timestamp(seconds, 0)?
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string())
}

/// `metav1.MicroTime`'s JSON form: UTC with six fractional digits.
pub fn format_micro_time(seconds: i64, nanos: i32) -> Result<String, ProtobufError> {
    let micros = nanos / 1000 * 1000;
    Ok(timestamp(seconds, micros)?
        .strftime("%Y-%m-%dT%H:%M:%S.%6fZ")
        .to_string())
}

/// Parses a Go duration string ("1h2m3.5s", "-300ms", "0") into nanoseconds, as `time.ParseDuration`.
pub fn parse_duration(s: &str) -> Result<i64, ProtobufError> {
    crate::go_duration::parse(s).map_err(ProtobufError::Invalid)
}

/// Formats nanoseconds as Go's `time.Duration.String`.
pub fn format_duration(nanos: i64) -> String {
    if nanos == 0 {
        return "0s".into();
    }
    let sign = if nanos < 0 { "-" } else { "" };
    let n = nanos.unsigned_abs();
    let fraction = |value: u64, unit: u64| -> String {
        let whole = value / unit;
        let frac = value % unit;
        if frac == 0 {
            return whole.to_string();
        }
        let width = unit.ilog10() as usize;
        let digits = format!("{frac:0width$}");
        format!("{whole}.{}", digits.trim_end_matches('0'))
    };
    if n < 1_000 {
        return format!("{sign}{n}ns");
    }
    if n < 1_000_000 {
        return format!("{sign}{}µs", fraction(n, 1_000));
    }
    if n < 1_000_000_000 {
        return format!("{sign}{}ms", fraction(n, 1_000_000));
    }
    let hours = n / 3_600_000_000_000;
    let minutes = n / 60_000_000_000 % 60;
    let seconds = fraction(n % 60_000_000_000, 1_000_000_000);
    if hours > 0 {
        format!("{sign}{hours}h{minutes}m{seconds}s")
    } else if minutes > 0 {
        format!("{sign}{minutes}m{seconds}s")
    } else {
        format!("{sign}{seconds}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_as_upstream_prints_them() {
        let (s, n) = parse_time("2024-05-06T07:08:09Z").unwrap();
        assert_eq!((s, n), (1714979289, 0));
        assert_eq!(format_time(s).unwrap(), "2024-05-06T07:08:09Z");
        let (s, n) = parse_time("2024-05-06T09:08:09.123456789+02:00").unwrap();
        assert_eq!(format_time(s).unwrap(), "2024-05-06T07:08:09Z");
        assert_eq!(
            format_micro_time(s, n).unwrap(),
            "2024-05-06T07:08:09.123456Z"
        );
        assert!(parse_time("yesterday").is_err());
    }

    #[test]
    fn durations_as_go_prints_and_parses_them() {
        for (text, nanos) in [
            ("0s", 0),
            ("1ns", 1),
            ("1.5µs", 1_500),
            ("300ms", 300_000_000),
            ("1s", 1_000_000_000),
            ("1.5s", 1_500_000_000),
            ("1m0s", 60_000_000_000),
            ("1h0m0s", 3_600_000_000_000),
            ("2h45m30.25s", 9_930_250_000_000),
            ("-5m0s", -300_000_000_000),
        ] {
            assert_eq!(format_duration(nanos), text);
            assert_eq!(parse_duration(text).unwrap(), nanos, "{text}");
        }
        assert_eq!(parse_duration("0").unwrap(), 0);
        assert_eq!(parse_duration("1h30m").unwrap(), 5_400_000_000_000);
        assert_eq!(parse_duration(".5s").unwrap(), 500_000_000);
        for bad in ["", "1", "1x", "s", "1..5s", "-", "99999999999999999h"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
