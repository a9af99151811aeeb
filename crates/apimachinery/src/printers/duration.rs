//! Human-readable durations, as upstream `k8s.io/apimachinery/pkg/util/duration` (`HumanDuration`): the
//! AGE column, job durations and "N (5m ago)" restart times. About two to three significant figures:
//! `59s`, `119s`, `2m5s`, `10m`, `3h`, `7h59m`, `47h`, `2d3h`, `45d`, `2y3d`, `9y`.
//!
//! Upstream works on Go's `time.Duration` (signed nanoseconds, saturating at ±292 years); the signed
//! variant here does the same, so clock skew shows `0s` (under two seconds) or `<invalid>` as upstream.

use std::time::Duration;

const SECOND: i64 = 1_000_000_000;
const MINUTE: i64 = 60 * SECOND;
const HOUR: i64 = 60 * MINUTE;

/// `HumanDuration` of a non-negative duration.
pub fn human_duration(d: Duration) -> String {
    human_duration_nanos(i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// `HumanDuration` of a signed duration in nanoseconds (Go's `time.Duration`): negative values within
/// two seconds print `0s`, further in the future `<invalid>`.
pub fn human_duration_nanos(d: i64) -> String {
    // Go: int(d.Seconds()) truncates toward zero, as does integer division here.
    let seconds = d / SECOND;
    if seconds < -1 {
        return "<invalid>".to_string();
    }
    if seconds < 0 {
        return "0s".to_string();
    }
    if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = d / MINUTE;
    if minutes < 10 {
        let s = (d / SECOND) % 60;
        if s == 0 {
            return format!("{minutes}m");
        }
        return format!("{minutes}m{s}s");
    }
    if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = d / HOUR;
    if hours < 8 {
        let m = (d / MINUTE) % 60;
        if m == 0 {
            return format!("{hours}h");
        }
        return format!("{hours}h{m}m");
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        if h == 0 {
            return format!("{}d", hours / 24);
        }
        return format!("{}d{}h", hours / 24, h);
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let dy = (hours / 24) % 365;
        if dy == 0 {
            return format!("{}y", hours / 24 / 365);
        }
        return format!("{}y{}d", hours / 24 / 365, dy);
    }
    format!("{}y", hours / 24 / 365)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: i64) -> String {
        human_duration_nanos(s * SECOND)
    }

    #[test]
    fn table() {
        let cases: &[(i64, &str)] = &[
            (0, "0s"),
            (1, "1s"),
            (59, "59s"),
            (60, "60s"),
            (119, "119s"),
            (120, "2m"),
            (125, "2m5s"),
            (9 * 60 + 59, "9m59s"),
            (10 * 60, "10m"),
            (10 * 60 + 30, "10m"),
            (179 * 60, "179m"),
            (3 * 3600, "3h"),
            (3 * 3600 + 60, "3h1m"),
            (7 * 3600 + 59 * 60, "7h59m"),
            (8 * 3600, "8h"),
            (47 * 3600 + 59 * 60, "47h"),
            (48 * 3600, "2d"),
            (51 * 3600, "2d3h"),
            (8 * 24 * 3600 - 1, "7d23h"),
            (8 * 24 * 3600, "8d"),
            (2 * 365 * 24 * 3600 - 1, "729d"),
            (2 * 365 * 24 * 3600, "2y"),
            (2 * 365 * 24 * 3600 + 3 * 24 * 3600, "2y3d"),
            (8 * 365 * 24 * 3600, "8y"),
            (20 * 365 * 24 * 3600 + 100 * 24 * 3600, "20y"),
        ];
        for (s, want) in cases {
            assert_eq!(secs(*s), *want, "{s} seconds");
        }
    }

    #[test]
    fn negative_and_fractional() {
        assert_eq!(human_duration_nanos(-SECOND / 2), "0s");
        assert_eq!(human_duration_nanos(-SECOND - SECOND / 2), "0s");
        assert_eq!(human_duration_nanos(-2 * SECOND), "<invalid>");
        assert_eq!(human_duration_nanos(SECOND * 5 + SECOND / 2), "5s");
        assert_eq!(human_duration_nanos(i64::MAX), "292y");
    }

    #[test]
    fn std_duration() {
        assert_eq!(human_duration(Duration::from_secs(125)), "2m5s");
        assert_eq!(human_duration(Duration::from_millis(999)), "0s");
        assert_eq!(human_duration(Duration::MAX), "292y");
    }
}
