//! Cron schedules as CronJobs accept them: upstream validates with `github.com/robfig/cron/v3`
//! `ParseStandard` (five fields, ranges, steps, month and weekday names, `@hourly`-style descriptors
//! and `@every <duration>`), and reports that parser's error text. This is a re-implementation of its
//! grammar and messages, not of its scheduling.

struct Bounds {
    min: u32,
    max: u32,
    names: &'static [&'static str],
    /// The number the first name stands for (`jan` = 1, `sun` = 0).
    first: u32,
}

const MINUTES: Bounds = Bounds {
    min: 0,
    max: 59,
    names: &[],
    first: 0,
};
const HOURS: Bounds = Bounds {
    min: 0,
    max: 23,
    names: &[],
    first: 0,
};
const DOM: Bounds = Bounds {
    min: 1,
    max: 31,
    names: &[],
    first: 0,
};
const MONTHS: Bounds = Bounds {
    min: 1,
    max: 12,
    names: &[
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ],
    first: 1,
};
const DOW: Bounds = Bounds {
    min: 0,
    max: 6,
    names: &["sun", "mon", "tue", "wed", "thu", "fri", "sat"],
    first: 0,
};

/// Go's `strconv.Atoi` with its error text.
fn atoi(s: &str) -> Result<i64, String> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return Err(format!("strconv.Atoi: parsing {s:?}: invalid syntax"));
    }
    s.parse::<i64>()
        .map_err(|_| format!("strconv.Atoi: parsing {s:?}: value out of range"))
}

fn must_parse_int(expr: &str) -> Result<u32, String> {
    let n = atoi(expr).map_err(|e| format!("failed to parse int from {expr}: {e}"))?;
    if n < 0 {
        return Err(format!("negative number ({n}) not allowed: {expr}"));
    }
    u32::try_from(n).map_err(|_| {
        format!(
            "failed to parse int from {expr}: strconv.Atoi: parsing {expr:?}: value out of range"
        )
    })
}

fn parse_int_or_name(expr: &str, b: &Bounds) -> Result<u32, String> {
    let lower = expr.to_lowercase();
    if let Some(i) = b.names.iter().position(|n| *n == lower) {
        return Ok(b.first + i as u32);
    }
    must_parse_int(expr)
}

fn check_range(expr: &str, b: &Bounds) -> Result<(), String> {
    let range_and_step: Vec<&str> = expr.split('/').collect();
    let low_and_high: Vec<&str> = range_and_step[0].split('-').collect();
    let single = low_and_high.len() == 1;
    let (start, mut end) = if low_and_high[0] == "*" || low_and_high[0] == "?" {
        (b.min, b.max)
    } else {
        let start = parse_int_or_name(low_and_high[0], b)?;
        let end = match low_and_high.len() {
            1 => start,
            2 => parse_int_or_name(low_and_high[1], b)?,
            _ => return Err(format!("too many hyphens: {expr}")),
        };
        (start, end)
    };
    let step = match range_and_step.len() {
        1 => 1,
        2 => {
            let step = must_parse_int(range_and_step[1])?;
            if single {
                end = b.max;
            }
            step
        }
        _ => return Err(format!("too many slashes: {expr}")),
    };
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
    if step == 0 {
        return Err(format!("step of range should be a positive number: {expr}"));
    }
    Ok(())
}

fn check_field(field: &str, b: &Bounds) -> Result<(), String> {
    for expr in field.split(',').filter(|e| !e.is_empty()) {
        check_range(expr, b)?;
    }
    Ok(())
}

/// Go's `time.ParseDuration`, enough to validate `@every`.
fn parse_go_duration(s: &str) -> Result<(), String> {
    let err = || format!("time: invalid duration {s:?}");
    let mut rest = s.strip_prefix(['+', '-']).unwrap_or(s);
    if rest == "0" {
        return Ok(());
    }
    if rest.is_empty() {
        return Err(err());
    }
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let num = &rest[..num_len];
        if num.is_empty() || num == "." || num.matches('.').count() > 1 {
            return Err(err());
        }
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        if unit.is_empty() {
            return Err(format!("time: missing unit in duration {s:?}"));
        }
        if !matches!(unit, "ns" | "us" | "µs" | "μs" | "ms" | "s" | "m" | "h") {
            return Err(format!("time: unknown unit {unit:?} in duration {s:?}"));
        }
        rest = &rest[unit_len..];
    }
    Ok(())
}

fn check_descriptor(spec: &str) -> Result<(), String> {
    match spec {
        "@yearly" | "@annually" | "@monthly" | "@weekly" | "@daily" | "@midnight" | "@hourly" => {
            Ok(())
        }
        _ => match spec.strip_prefix("@every ") {
            Some(d) => {
                parse_go_duration(d).map_err(|e| format!("failed to parse duration {spec}: {e}"))
            }
            None => Err(format!("unrecognized descriptor: {spec}")),
        },
    }
}

/// Validates `spec` as `cron.ParseStandard` does; `Err` carries its message.
pub fn parse_standard(spec: &str) -> Result<(), String> {
    if spec.is_empty() {
        return Err("empty spec string".into());
    }
    let mut spec = spec;
    if spec.starts_with("TZ=") || spec.starts_with("CRON_TZ=") {
        let Some(space) = spec.find(' ') else {
            return Err(format!(
                "provided bad location {}: unknown time zone",
                &spec[spec.find('=').map_or(0, |i| i + 1)..]
            ));
        };
        spec = spec[space..].trim();
    }
    if spec.starts_with('@') {
        return check_descriptor(spec);
    }
    let fields: Vec<&str> = spec.split_whitespace().collect();
    if fields.len() != 5 {
        return Err(format!(
            "expected exactly 5 fields, found {}: [{}]",
            fields.len(),
            fields.join(" ")
        ));
    }
    for (f, b) in fields.iter().zip([&MINUTES, &HOURS, &DOM, &MONTHS, &DOW]) {
        check_field(f, b)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse_standard;

    #[test]
    fn accepts_standard_schedules() {
        for s in [
            "*/5 * * * *",
            "0 0 * * 0",
            "0 9-17 * JAN-mar mon-fri",
            "@hourly",
            "@every 1h30m",
            "15,45 */2 1 * *",
            "5/15 * * * *",
        ] {
            assert_eq!(parse_standard(s), Ok(()), "{s}");
        }
    }

    #[test]
    fn rejects_with_robfig_messages() {
        let cases = [
            ("* * * *", "expected exactly 5 fields, found 4: [* * * *]"),
            ("60 * * * *", "end of range (60) above maximum (59): 60"),
            ("* * 0 * *", "beginning of range (0) below minimum (1): 0"),
            ("* * * * 7", "end of range (7) above maximum (6): 7"),
            (
                "x * * * *",
                "failed to parse int from x: strconv.Atoi: parsing \"x\": invalid syntax",
            ),
            (
                "5-1 * * * *",
                "beginning of range (5) beyond end of range (1): 5-1",
            ),
            (
                "*/0 * * * *",
                "step of range should be a positive number: */0",
            ),
            ("1-2-3 * * * *", "too many hyphens: 1-2-3"),
            ("@sometimes", "unrecognized descriptor: @sometimes"),
            (
                "@every xyz",
                "failed to parse duration @every xyz: time: invalid duration \"xyz\"",
            ),
        ];
        for (s, msg) in cases {
            assert_eq!(parse_standard(s), Err(msg.to_string()), "{s}");
        }
    }
}
