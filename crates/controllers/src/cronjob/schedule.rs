//! Cron schedules as upstream parses them (`robfig/cron/v3` `ParseStandard`): five fields (minute,
//! hour, day of month, month, day of week) with `*`, `?`, lists, ranges, steps and month/day names;
//! the descriptors `@yearly`/`@annually`, `@monthly`, `@weekly`, `@daily`/`@midnight`, `@hourly` and
//! `@every <duration>`; an optional `TZ=`/`CRON_TZ=` prefix. Day of month and day of week are ANDed
//! when either is `*`/`?`, ORed otherwise. Times are computed in the schedule's time zone (jiff's
//! tz database), so DST changes behave as wall-clock cron does.

use std::time::Duration;

use jiff::civil::Date;
use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan};

#[derive(Debug, Clone, PartialEq)]
pub enum Schedule {
    Spec(Spec),
    /// `@every`: a fixed delay, whole seconds, at least one.
    Every(Duration),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    minute: u64,
    hour: u64,
    dom: u64,
    month: u64,
    dow: u64,
    dom_star: bool,
    dow_star: bool,
    tz: TimeZone,
}

struct Bounds {
    min: u32,
    max: u32,
    names: &'static [&'static str],
}

const MINUTES: Bounds = Bounds {
    min: 0,
    max: 59,
    names: &[],
};
const HOURS: Bounds = Bounds {
    min: 0,
    max: 23,
    names: &[],
};
const DOM: Bounds = Bounds {
    min: 1,
    max: 31,
    names: &[],
};
const MONTHS: Bounds = Bounds {
    min: 1,
    max: 12,
    names: &[
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ],
};
const DOW: Bounds = Bounds {
    min: 0,
    max: 6,
    names: &["sun", "mon", "tue", "wed", "thu", "fri", "sat"],
};

/// Parses a schedule; `tz` applies unless the spec carries its own `TZ=`/`CRON_TZ=` prefix.
pub fn parse(spec: &str, tz: TimeZone) -> Result<Schedule, String> {
    let spec = spec.trim();
    if spec.is_empty() {
        return Err("empty spec string".into());
    }
    let (tz, spec) = match spec
        .strip_prefix("TZ=")
        .or_else(|| spec.strip_prefix("CRON_TZ="))
    {
        Some(rest) => {
            let (name, rest) = rest.split_once(' ').unwrap_or((rest, ""));
            let tz =
                TimeZone::get(name).map_err(|e| format!("provided bad location {name}: {e}"))?;
            (tz, rest.trim())
        }
        None => (tz, spec),
    };
    if let Some(descriptor) = spec.strip_prefix('@') {
        return descriptor_schedule(descriptor, spec, tz);
    }
    let fields: Vec<&str> = spec.split_whitespace().collect();
    if fields.len() != 5 {
        return Err(format!(
            "expected exactly 5 fields, found {}: {spec}",
            fields.len()
        ));
    }
    let (dom, dom_star) = field(fields[2], &DOM)?;
    let (dow, dow_star) = field(fields[4], &DOW)?;
    Ok(Schedule::Spec(Spec {
        minute: field(fields[0], &MINUTES)?.0,
        hour: field(fields[1], &HOURS)?.0,
        dom,
        month: field(fields[3], &MONTHS)?.0,
        dow,
        dom_star,
        dow_star,
        tz,
    }))
}

fn descriptor_schedule(descriptor: &str, spec: &str, tz: TimeZone) -> Result<Schedule, String> {
    let fields = match descriptor {
        "yearly" | "annually" => "0 0 1 1 *",
        "monthly" => "0 0 1 * *",
        "weekly" => "0 0 * * 0",
        "daily" | "midnight" => "0 0 * * *",
        "hourly" => "0 * * * *",
        _ => {
            let Some(every) = descriptor.strip_prefix("every ") else {
                return Err(format!("unrecognized descriptor: {spec}"));
            };
            let d: jiff::SignedDuration = every
                .trim()
                .parse()
                .map_err(|e| format!("failed to parse duration {spec}: {e}"))?;
            let secs = d.as_secs().max(1) as u64;
            return Ok(Schedule::Every(Duration::from_secs(secs)));
        }
    };
    parse(fields, tz)
}

/// One field: comma-separated ranges. Returns the bits and whether it was `*`/`?` (star).
fn field(s: &str, b: &Bounds) -> Result<(u64, bool), String> {
    let mut bits = 0u64;
    let mut star = false;
    for part in s.split(',') {
        let (r, is_star) = range(part, b)?;
        bits |= r;
        star |= is_star;
    }
    Ok((bits, star))
}

fn value(s: &str, b: &Bounds) -> Result<u32, String> {
    let lower = s.to_ascii_lowercase();
    if let Some(i) = b.names.iter().position(|n| *n == lower) {
        return Ok(i as u32 + b.min);
    }
    s.parse::<u32>()
        .map_err(|_| format!("failed to parse int from {s}"))
}

fn range(expr: &str, b: &Bounds) -> Result<(u64, bool), String> {
    let (range_part, step) = match expr.split_once('/') {
        Some((r, s)) => {
            let step = s
                .parse::<u32>()
                .map_err(|_| format!("failed to parse int from {s}"))?;
            if step == 0 {
                return Err(format!("step of range should be a positive number: {expr}"));
            }
            (r, Some(step))
        }
        None => (expr, None),
    };
    let (mut start, mut end, mut star) = if range_part == "*" || range_part == "?" {
        (b.min, b.max, true)
    } else {
        match range_part.split_once('-') {
            Some((a, z)) => (value(a, b)?, value(z, b)?, false),
            None => {
                let v = value(range_part, b)?;
                (v, v, false)
            }
        }
    };
    if let Some(step) = step {
        if !star && !range_part.contains('-') {
            // "N/step" means "N-max/step".
            end = b.max;
        }
        if step > 1 {
            star = false;
        }
        if start < b.min {
            return Err(format!(
                "beginning of range ({start}) below minimum ({}): {expr}",
                b.min
            ));
        }
        if end > b.max {
            return Err(format!(
                "end of range ({end}) above maximum ({}): {expr}",
                b.max
            ));
        }
        if start > end {
            return Err(format!(
                "beginning of range ({start}) beyond end of range ({end}): {expr}"
            ));
        }
        let mut bits = 0u64;
        while start <= end {
            bits |= 1 << start;
            start += step;
        }
        return Ok((bits, star));
    }
    if start < b.min {
        return Err(format!(
            "beginning of range ({start}) below minimum ({}): {expr}",
            b.min
        ));
    }
    if end > b.max {
        return Err(format!(
            "end of range ({end}) above maximum ({}): {expr}",
            b.max
        ));
    }
    if start > end {
        return Err(format!(
            "beginning of range ({start}) beyond end of range ({end}): {expr}"
        ));
    }
    let bits = (start..=end).fold(0u64, |acc, v| acc | 1 << v);
    Ok((bits, star))
}

impl Spec {
    fn day_matches(&self, d: Date) -> bool {
        let dom = self.dom & (1 << d.day()) != 0;
        let dow = self.dow & (1 << d.weekday().to_sunday_zero_offset()) != 0;
        if self.dom_star || self.dow_star {
            dom && dow
        } else {
            dom || dow
        }
    }
}

impl Schedule {
    /// The first activation strictly after `after`, searching five years ahead as robfig does
    /// (`None` for a schedule that never fires, such as February 30th).
    pub fn next(&self, after: Timestamp) -> Option<Timestamp> {
        match self {
            Schedule::Every(d) => {
                let whole = Timestamp::from_second(after.as_second()).ok()?;
                whole
                    .checked_add(jiff::SignedDuration::try_from(*d).ok()?)
                    .ok()
            }
            Schedule::Spec(s) => {
                let start = after.to_zoned(s.tz.clone()).date();
                let limit = start.checked_add(5.years()).ok()?;
                let mut d = start;
                while d <= limit {
                    if s.month & (1 << d.month()) != 0 && s.day_matches(d) {
                        for h in (0..24).filter(|h| s.hour & (1u64 << h) != 0) {
                            for m in (0..60).filter(|m| s.minute & (1u64 << m) != 0) {
                                let civil = d.at(h as i8, m as i8, 0, 0);
                                let Ok(z) = civil.to_zoned(s.tz.clone()) else {
                                    continue;
                                };
                                // A wall time skipped by a DST change fires at the shifted time, as
                                // Go's time.Date normalises it.
                                if z.timestamp() > after {
                                    return Some(z.timestamp());
                                }
                            }
                        }
                    }
                    d = d.tomorrow().ok()?;
                }
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn next(spec: &str, after: &str) -> String {
        parse(spec, TimeZone::UTC)
            .unwrap()
            .next(ts(after))
            .map(|t| t.to_string())
            .unwrap_or_default()
    }

    #[test]
    fn five_fields() {
        assert_eq!(
            next("*/1 * * * *", "2026-01-01T00:00:00Z"),
            "2026-01-01T00:01:00Z"
        );
        assert_eq!(
            next("* * * * *", "2026-01-01T00:00:30.5Z"),
            "2026-01-01T00:01:00Z"
        );
        assert_eq!(
            next("*/15 * * * *", "2026-01-01T00:14:59Z"),
            "2026-01-01T00:15:00Z"
        );
        assert_eq!(
            next("30 6-16/4 * * 1-5", "2026-01-02T14:31:00Z"),
            "2026-01-05T06:30:00Z"
        );
        assert_eq!(
            next("0 0 1 jan *", "2026-03-01T00:00:00Z"),
            "2027-01-01T00:00:00Z"
        );
        assert_eq!(
            next("0 12 * * SUN", "2026-01-01T00:00:00Z"),
            "2026-01-04T12:00:00Z"
        );
        assert_eq!(
            next("5/20 * * * *", "2026-01-01T00:06:00Z"),
            "2026-01-01T00:25:00Z"
        );
        assert_eq!(
            next("0 0 29 2 *", "2026-01-01T00:00:00Z"),
            "2028-02-29T00:00:00Z"
        );
        assert_eq!(next("0 0 30 2 *", "2026-01-01T00:00:00Z"), "");
    }

    #[test]
    fn day_of_month_or_day_of_week() {
        // Both restricted: either matches (the 13th, or any Friday).
        assert_eq!(
            next("0 0 13 * 5", "2026-01-01T00:00:00Z"),
            "2026-01-02T00:00:00Z"
        );
        // One is a star: both must match.
        assert_eq!(
            next("0 0 13 * *", "2026-01-01T00:00:00Z"),
            "2026-01-13T00:00:00Z"
        );
        assert_eq!(
            next("0 0 ? * 5", "2026-01-03T00:00:00Z"),
            "2026-01-09T00:00:00Z"
        );
        // */2 is not a star for this rule.
        assert_eq!(
            next("0 0 */2 * 1", "2026-01-01T00:00:00Z"),
            "2026-01-03T00:00:00Z"
        );
    }

    #[test]
    fn descriptors() {
        assert_eq!(
            next("@hourly", "2026-01-01T00:00:00Z"),
            "2026-01-01T01:00:00Z"
        );
        assert_eq!(
            next("@daily", "2026-01-01T00:00:00Z"),
            "2026-01-02T00:00:00Z"
        );
        assert_eq!(
            next("@weekly", "2026-01-01T00:00:00Z"),
            "2026-01-04T00:00:00Z"
        );
        assert_eq!(
            next("@monthly", "2026-01-01T00:00:00Z"),
            "2026-02-01T00:00:00Z"
        );
        assert_eq!(
            next("@yearly", "2026-01-01T00:00:00Z"),
            "2027-01-01T00:00:00Z"
        );
        assert_eq!(
            next("@every 1h30m", "2026-01-01T00:00:10.5Z"),
            "2026-01-01T01:30:10Z"
        );
        assert!(parse("@fortnightly", TimeZone::UTC)
            .unwrap_err()
            .contains("unrecognized descriptor"));
    }

    #[test]
    fn errors() {
        for bad in [
            "* * * *",
            "60 * * * *",
            "* 24 * * *",
            "* * 0 * *",
            "* * * 13 *",
            "* * * * 7",
            "5-1 * * * *",
            "*/0 * * * *",
            "x * * * *",
        ] {
            assert!(parse(bad, TimeZone::UTC).is_err(), "{bad}");
        }
        assert!(parse("* * * * *", TimeZone::UTC).is_ok());
    }

    #[test]
    fn time_zones_and_dst() {
        let ny = TimeZone::get("America/New_York").unwrap();
        let s = parse("0 9 * * *", ny.clone()).unwrap();
        // 09:00 EST is 14:00 UTC; after the March change 09:00 EDT is 13:00 UTC.
        assert_eq!(
            s.next(ts("2026-03-07T15:00:00Z")).unwrap().to_string(),
            "2026-03-08T13:00:00Z"
        );
        assert_eq!(
            s.next(ts("2026-03-06T15:00:00Z")).unwrap().to_string(),
            "2026-03-07T14:00:00Z"
        );
        // 02:30 does not exist on 2026-03-08 in New York: it fires an hour later in wall time.
        let gap = parse("30 2 * * *", ny).unwrap();
        assert_eq!(
            gap.next(ts("2026-03-08T00:00:00Z")).unwrap().to_string(),
            "2026-03-08T07:30:00Z"
        );
        let tz = parse("CRON_TZ=Asia/Tokyo 0 0 * * *", TimeZone::UTC).unwrap();
        assert_eq!(
            tz.next(ts("2026-01-01T00:00:00Z")).unwrap().to_string(),
            "2026-01-01T15:00:00Z"
        );
    }
}
