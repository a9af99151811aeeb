//! Go's `time.ParseDuration`, shared by everything that reads a Go duration from a request: the
//! protobuf `Duration` special case, the API server's `?timeout=`.

const UNITS: &[(&str, u128)] = &[
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000),
    ("μs", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
];

/// Parses a Go duration string ("1h2m3.5s", "-300ms", "0") into nanoseconds, as `time.ParseDuration`
/// (its message on failure).
pub fn parse(s: &str) -> Result<i64, String> {
    let bad = || format!("time: invalid duration {s:?}");
    let (negative, mut rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if rest == "0" {
        return Ok(0);
    }
    if rest.is_empty() {
        return Err(bad());
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .ok_or_else(bad)?;
        let (number, tail) = rest.split_at(digits);
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let scale = UNITS
            .iter()
            .find(|(u, _)| *u == unit)
            .map(|(_, n)| *n)
            .ok_or_else(bad)?;
        let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
        if (whole.is_empty() && frac.is_empty()) || frac.contains('.') {
            return Err(bad());
        }
        let whole: u128 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| bad())?
        };
        let mut value = whole.checked_mul(scale).ok_or_else(bad)?;
        let mut place = scale;
        for d in frac.bytes() {
            place /= 10;
            value += u128::from(d - b'0') * place;
        }
        total = total.checked_add(value).ok_or_else(bad)?;
        rest = tail;
    }
    let total = i64::try_from(total).map_err(|_| bad())?;
    Ok(if negative { -total } else { total })
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn go_durations() {
        assert_eq!(parse("0"), Ok(0));
        assert_eq!(parse("1h2m3.5s"), Ok(3_723_500_000_000));
        assert_eq!(parse("-300ms"), Ok(-300_000_000));
        assert_eq!(parse("1.5µs"), Ok(1_500));
        for bad in ["", "5", "1x", ".s", "1..5s", "-", "9999999999h"] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
