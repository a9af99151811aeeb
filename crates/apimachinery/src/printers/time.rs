//! Timestamps of served objects (`metav1.Time`, `metav1.MicroTime`, RFC 3339 strings in UTC) and the
//! printers' `translateTimestampSince` from upstream `pkg/printers/internalversion`: the age of a
//! timestamp as `HumanDuration`, `<unknown>` when it is unset.
//!
//! Instants are nanoseconds since the Unix epoch as `i128`, so Go's zero time (year 1) and far futures
//! fit; differences saturate to `i64` nanoseconds like Go's `Time.Sub`. A missing, null, unparsable or
//! zero (`0001-01-01T00:00:00Z`) timestamp counts as unset, as `IsZero` does upstream.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;

use super::duration::human_duration_nanos;

const NANOS_PER_SEC: i128 = 1_000_000_000;
const SECS_PER_DAY: i64 = 86_400;

/// An instant, in nanoseconds since 1970-01-01T00:00:00Z.
pub(crate) type Instant = i128;

/// `now` as an [`Instant`].
pub(crate) fn instant_of(now: SystemTime) -> Instant {
    match now.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_nanos() as i128,
        Err(e) => -(e.duration().as_nanos() as i128),
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day count since 1970-01-01 (inverse of [`days_from_civil`]).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

fn is_leap(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Go's zero `time.Time` (0001-01-01T00:00:00Z) as an [`Instant`].
fn go_zero() -> Instant {
    i128::from(days_from_civil(1, 1, 1)) * i128::from(SECS_PER_DAY) * NANOS_PER_SEC
}

fn digits(s: &[u8]) -> Option<i64> {
    if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(s.iter().fold(0i64, |n, d| n * 10 + i64::from(d - b'0')))
}

/// Parses an RFC 3339 timestamp (`2024-01-02T03:04:05Z`, optional fraction, `Z` or `±hh:mm` offset).
pub(crate) fn parse_rfc3339(s: &str) -> Option<Instant> {
    let b = s.as_bytes();
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b'T'
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let year = digits(&b[0..4])?;
    let month = digits(&b[5..7])?;
    let day = digits(&b[8..10])?;
    let hour = digits(&b[11..13])?;
    let minute = digits(&b[14..16])?;
    let second = digits(&b[17..19])?;
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return None;
    }
    if hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    let mut rest = &b[19..];
    let mut nanos: i128 = 0;
    if rest.first() == Some(&b'.') {
        let frac_len = rest[1..].iter().take_while(|c| c.is_ascii_digit()).count();
        if frac_len == 0 || frac_len > 9 {
            return None;
        }
        let frac = digits(&rest[1..=frac_len])?;
        nanos = i128::from(frac) * 10i128.pow(9 - frac_len as u32);
        rest = &rest[1 + frac_len..];
    }
    let offset_secs = match rest {
        [b'Z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let oh = digits(&[*h1, *h2])?;
            let om = digits(&[*m1, *m2])?;
            if oh > 23 || om > 59 {
                return None;
            }
            let off = oh * 3600 + om * 60;
            if *sign == b'-' {
                -off
            } else {
                off
            }
        }
        _ => return None,
    };
    let secs =
        days_from_civil(year, month, day) * SECS_PER_DAY + hour * 3600 + minute * 60 + second
            - offset_secs;
    Some(i128::from(secs) * NANOS_PER_SEC + nanos)
}

/// The instant of a timestamp field; `None` when missing, null, unparsable or Go's zero time.
pub(crate) fn time_of(v: Option<&Value>) -> Option<Instant> {
    let t = parse_rfc3339(v?.as_str()?)?;
    (t != go_zero()).then_some(t)
}

/// Go's `t.Sub(u)`: nanoseconds, saturating at the ends of `time.Duration`.
pub(crate) fn sub(t: Instant, u: Instant) -> i64 {
    let d = t - u;
    i64::try_from(d).unwrap_or(if d < 0 { i64::MIN } else { i64::MAX })
}

/// `translateTimestampSince`: `HumanDuration(now - t)`, or `<unknown>` for an unset timestamp.
pub(crate) fn since(t: Option<Instant>, now: Instant) -> String {
    match t {
        Some(t) => human_duration_nanos(sub(now, t)),
        None => "<unknown>".to_string(),
    }
}

/// `Time.UTC().Format(time.RFC3339)` at second precision; unset prints Go's zero time, as upstream's
/// default table (`Created At`) does.
pub(crate) fn format_rfc3339(t: Option<Instant>) -> String {
    let t = t.unwrap_or_else(go_zero);
    let secs = t.div_euclid(NANOS_PER_SEC);
    let secs = i64::try_from(secs).unwrap_or(if secs < 0 { i64::MIN / 2 } else { i64::MAX / 2 });
    let days = secs.div_euclid(SECS_PER_DAY);
    let sod = secs.rem_euclid(SECS_PER_DAY);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        sod / 3600,
        (sod % 3600) / 60,
        sod % 60
    )
}

/// The cell of a `date` column holding `value` (e.g. a custom resource's printer column): its age as
/// `HumanDuration`, `<unknown>` for Go's zero time and `<invalid>` when it is not an RFC 3339 timestamp,
/// as apiextensions' table convertor prints it.
pub fn date_cell(value: &str, now: SystemTime) -> String {
    match parse_rfc3339(value) {
        None => "<invalid>".to_string(),
        Some(t) if t == go_zero() => "<unknown>".to_string(),
        Some(t) => human_duration_nanos(sub(instant_of(now), t)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::time::Duration;

    #[test]
    fn parses_rfc3339_forms() {
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_rfc3339("1970-01-01T00:00:01.5Z"), Some(1_500_000_000));
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00.000001Z"), Some(1_000));
        assert_eq!(parse_rfc3339("1970-01-01T01:00:00+01:00"), Some(0));
        assert_eq!(parse_rfc3339("1969-12-31T23:00:00-01:00"), Some(0));
        assert_eq!(
            parse_rfc3339("2024-02-29T12:00:00Z"),
            Some(1_709_208_000 * NANOS_PER_SEC)
        );
        for bad in [
            "",
            "2024-02-30T00:00:00Z",
            "2023-02-29T00:00:00Z",
            "2024-01-01 00:00:00Z",
            "2024-01-01T24:00:00Z",
            "2024-01-01T00:00:00",
            "2024-01-01T00:00:00.Z",
            "2024-01-01T00:00:00+0100",
            "x024-01-01T00:00:00Z",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }

    #[test]
    fn zero_and_missing_are_unset() {
        assert_eq!(time_of(None), None);
        assert_eq!(time_of(Some(&json!(null))), None);
        assert_eq!(time_of(Some(&json!(5))), None);
        assert_eq!(time_of(Some(&json!("0001-01-01T00:00:00Z"))), None);
        assert_eq!(time_of(Some(&json!("1970-01-01T00:00:00Z"))), Some(0));
    }

    #[test]
    fn formats_like_go() {
        assert_eq!(format_rfc3339(None), "0001-01-01T00:00:00Z");
        assert_eq!(format_rfc3339(Some(0)), "1970-01-01T00:00:00Z");
        let t = parse_rfc3339("2024-03-05T06:07:08.9+02:00");
        assert_eq!(format_rfc3339(t), "2024-03-05T04:07:08Z");
        assert_eq!(format_rfc3339(Some(-1)), "1969-12-31T23:59:59Z");
    }

    #[test]
    fn since_and_date_cells() {
        let now = UNIX_EPOCH + Duration::from_secs(1_000_000);
        let n = instant_of(now);
        assert_eq!(since(None, n), "<unknown>");
        assert_eq!(since(Some(n - 125 * NANOS_PER_SEC), n), "2m5s");
        assert_eq!(since(Some(n + 10 * NANOS_PER_SEC), n), "<invalid>");
        assert_eq!(date_cell("1970-01-12T13:46:40Z", now), "0s");
        assert_eq!(date_cell("1970-01-12T12:46:40Z", now), "60m");
        assert_eq!(date_cell("yesterday", now), "<invalid>");
        assert_eq!(date_cell("0001-01-01T00:00:00Z", now), "<unknown>");
        assert_eq!(
            instant_of(UNIX_EPOCH - Duration::from_secs(1)),
            -NANOS_PER_SEC
        );
    }
}
