//! String formats of CRD schemas (upstream `apiserver/validation/formats.go` over kube-openapi's
//! `strfmt` registry): the formats Kubernetes 1.33 validates, and their checks. Formats not listed are
//! ignored, as upstream strips them before validating.
//!
//! Differences: the checks are close re-statements of the Go parsers (`net/url.ParseRequestURI`,
//! `net/mail.ParseAddress`, `net.ParseMAC`, ...), not ports of them; exotic inputs may be judged
//! differently.

use std::net::IpAddr;
use std::sync::OnceLock;

use base64::Engine;
use regex::Regex;
use serde_json::Value;

/// The string formats validated at Kubernetes 1.33 (normalized: without `-`).
const SUPPORTED: &[&str] = &[
    "bsonobjectid",
    "uri",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "cidr",
    "mac",
    "uuid",
    "uuid3",
    "uuid4",
    "uuid5",
    "isbn",
    "isbn10",
    "isbn13",
    "creditcard",
    "ssn",
    "hexcolor",
    "rgbcolor",
    "byte",
    "password",
    "date",
    "duration",
    "datetime",
    "quantity",
];

/// The format validation applies with, after upstream's `StripUnsupportedFormatsPostProcess`: string
/// formats from the list, `int32`/`int64` for integers, `float`/`double` for numbers, nothing else.
pub fn effective(type_: &str, format: &str) -> String {
    if format.is_empty() {
        return String::new();
    }
    let keep = match type_ {
        "" | "string" => SUPPORTED.contains(&format.replace('-', "").as_str()),
        "integer" => matches!(format, "int32" | "int64"),
        "number" => matches!(format, "float" | "double"),
        _ => false,
    };
    if keep {
        format.to_string()
    } else {
        String::new()
    }
}

/// Whether `format` is a string format with a check (the registry "contains" it).
pub fn is_string_format(format: &str) -> bool {
    SUPPORTED.contains(&format.replace('-', "").as_str())
}

fn re(cell: &'static OnceLock<Regex>, pattern: &str) -> &'static Regex {
    cell.get_or_init(|| Regex::new(pattern).unwrap_or_else(|_| Regex::new("$^").expect("regex")))
}

macro_rules! regex {
    ($pattern:expr) => {{
        static CELL: OnceLock<Regex> = OnceLock::new();
        re(&CELL, $pattern)
    }};
}

/// Whether `s` is valid in `format` (a supported string format).
pub fn validates(format: &str, s: &str) -> bool {
    match format.replace('-', "").as_str() {
        "bsonobjectid" => s.len() == 24 && s.chars().all(|c| c.is_ascii_hexdigit()),
        "uri" => is_request_uri(s),
        "email" => is_email(s),
        "hostname" => is_hostname(s),
        "ipv4" => s.parse::<IpAddr>().is_ok() && s.contains('.'),
        "ipv6" => s.parse::<IpAddr>().is_ok() && s.contains(':'),
        "cidr" => is_cidr(s),
        "mac" => is_mac(s),
        "uuid" => regex!(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$")
            .is_match(s),
        "uuid3" => {
            regex!(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?3[0-9a-f]{3}-?[0-9a-f]{4}-?[0-9a-f]{12}$")
                .is_match(s)
        }
        "uuid4" => {
            regex!(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?4[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$")
                .is_match(s)
        }
        "uuid5" => {
            regex!(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?5[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$")
                .is_match(s)
        }
        "isbn" => is_isbn10(s) || is_isbn13(s),
        "isbn10" => is_isbn10(s),
        "isbn13" => is_isbn13(s),
        "creditcard" => {
            let digits: String = s.chars().filter(char::is_ascii_digit).collect();
            regex!(r"^(?:4[0-9]{12}(?:[0-9]{3})?|5[1-5][0-9]{14}|6(?:011|5[0-9][0-9])[0-9]{12}|3[47][0-9]{13}|3(?:0[0-5]|[68][0-9])[0-9]{11}|(?:2131|1800|35[0-9]{3})[0-9]{11})$")
                .is_match(&digits)
        }
        "ssn" => regex!(r"^[0-9]{3}[- ]?[0-9]{2}[- ]?[0-9]{4}$").is_match(s),
        "hexcolor" => regex!(r"^#?([0-9a-fA-F]{3}|[0-9a-fA-F]{6})$").is_match(s),
        "rgbcolor" => regex!(
            r"^rgb\([\t\n\f\r ]*(0|[1-9][0-9]?|1[0-9][0-9]?|2[0-4][0-9]|25[0-5])[\t\n\f\r ]*,[\t\n\f\r ]*(0|[1-9][0-9]?|1[0-9][0-9]?|2[0-4][0-9]|25[0-5])[\t\n\f\r ]*,[\t\n\f\r ]*(0|[1-9][0-9]?|1[0-9][0-9]?|2[0-4][0-9]|25[0-5])[\t\n\f\r ]*\)$"
        )
        .is_match(s),
        "byte" => base64::engine::general_purpose::STANDARD.decode(s).is_ok(),
        "password" => true,
        "date" => is_date(s),
        "duration" => is_duration(s),
        "datetime" => is_datetime(s),
        "quantity" => {
            crate::validation::parse_quantity(&Value::String(s.to_string())).is_some()
        }
        _ => true,
    }
}

/// `net/url.ParseRequestURI`: an absolute URI (with a scheme) or an absolute path.
fn is_request_uri(s: &str) -> bool {
    if s.is_empty() || s.chars().any(|c| c.is_control() || c == ' ') {
        return false;
    }
    s.starts_with('/') || regex!(r"^[a-zA-Z][a-zA-Z0-9+.\-]*:").is_match(s)
}

fn is_email(s: &str) -> bool {
    let addr = match (s.find('<'), s.rfind('>')) {
        (Some(open), Some(close)) if open < close && close == s.len() - 1 => &s[open + 1..close],
        (None, None) => s,
        _ => return false,
    };
    let Some((local, domain)) = addr.rsplit_once('@') else {
        return false;
    };
    !local.is_empty()
        && !domain.is_empty()
        && !local.contains(char::is_whitespace)
        && !domain.contains(char::is_whitespace)
        && !domain.starts_with('.')
        && !domain.ends_with('.')
}

fn is_hostname(s: &str) -> bool {
    if s.is_empty() || s.len() > 255 {
        return false;
    }
    regex!(r"^[a-zA-Z0-9\p{L}]([a-zA-Z0-9\p{L}\-]{0,62})(\.[a-zA-Z0-9\p{L}]([a-zA-Z0-9\p{L}\-]{0,62}))*\.?$")
        .is_match(s)
}

fn is_cidr(s: &str) -> bool {
    let Some((ip, bits)) = s.split_once('/') else {
        return false;
    };
    let Ok(bits) = bits.parse::<u8>() else {
        return false;
    };
    match ip.parse::<IpAddr>() {
        Ok(IpAddr::V4(_)) => bits <= 32,
        Ok(IpAddr::V6(_)) => bits <= 128,
        Err(_) => false,
    }
}

/// `net.ParseMAC`: 6, 8 or 20 octets as `aa:bb:..`, `aa-bb-..` or `aabb.ccdd.eeff`.
fn is_mac(s: &str) -> bool {
    let octets = |sep: char| -> Option<usize> {
        let parts: Vec<&str> = s.split(sep).collect();
        parts
            .iter()
            .all(|p| p.len() == 2 && p.chars().all(|c| c.is_ascii_hexdigit()))
            .then_some(parts.len())
    };
    let n = if s.contains(':') {
        octets(':')
    } else if s.contains('-') {
        octets('-')
    } else {
        let parts: Vec<&str> = s.split('.').collect();
        parts
            .iter()
            .all(|p| p.len() == 4 && p.chars().all(|c| c.is_ascii_hexdigit()))
            .then_some(parts.len() * 2)
    };
    matches!(n, Some(6 | 8 | 20))
}

fn isbn_digits(s: &str) -> String {
    s.chars().filter(|c| !matches!(c, '-' | ' ')).collect()
}

fn is_isbn10(s: &str) -> bool {
    let d = isbn_digits(s);
    if !regex!(r"^[0-9]{9}[0-9X]$").is_match(&d) {
        return false;
    }
    let sum: u32 = d
        .chars()
        .enumerate()
        .map(|(i, c)| {
            let v = if c == 'X' {
                10
            } else {
                c.to_digit(10).unwrap_or(0)
            };
            (10 - i as u32) * v
        })
        .sum();
    sum.is_multiple_of(11)
}

fn is_isbn13(s: &str) -> bool {
    let d = isbn_digits(s);
    if !regex!(r"^[0-9]{13}$").is_match(&d) {
        return false;
    }
    let sum: u32 = d
        .chars()
        .enumerate()
        .map(|(i, c)| c.to_digit(10).unwrap_or(0) * if i % 2 == 0 { 1 } else { 3 })
        .sum();
    sum.is_multiple_of(10)
}

fn is_date(s: &str) -> bool {
    regex!(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$").is_match(s) && s.parse::<jiff::civil::Date>().is_ok()
}

/// strfmt's `date-time`: RFC 3339 (fractional seconds optional), or without a zone.
fn is_datetime(s: &str) -> bool {
    if !regex!(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]+)?)?([Zz]|[+-][0-9]{2}:?[0-9]{2})?$")
        .is_match(s)
    {
        return false;
    }
    // The pattern admits only ASCII before the time, so the first ten bytes are the date.
    s.get(..10)
        .is_some_and(|date| date.parse::<jiff::civil::Date>().is_ok())
}

/// Go's `time.ParseDuration` (`1h30m`, `1.5s`), or strfmt's `<n> <unit>` form (`22 ns`, `3 days`).
fn is_duration(s: &str) -> bool {
    regex!(r"^[-+]?([0-9]*(\.[0-9]*)?(ns|us|µs|μs|ms|s|m|h))+$").is_match(s) && s != "+" && s != "-"
        || regex!(r"^[0-9]+[\t\n\f\r ]*(ns|us|µs|ms|s|m|h|d|w|nanoseconds?|microseconds?|milliseconds?|seconds?|sec|minutes?|min|hours?|hr|days?|weeks?|wk)$")
            .is_match(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_accept_and_reject() {
        let cases = [
            ("uri", "http://example.com/a", true),
            ("uri", "/path", true),
            ("uri", "example", false),
            ("email", "a@example.com", true),
            ("email", "Joe <a@example.com>", true),
            ("email", "nope", false),
            ("hostname", "my-host.example.com", true),
            ("hostname", "-bad", false),
            ("ipv4", "10.0.0.1", true),
            ("ipv4", "::1", false),
            ("ipv6", "::1", true),
            ("cidr", "10.0.0.0/8", true),
            ("cidr", "10.0.0.0/33", false),
            ("mac", "01:23:45:67:89:ab", true),
            ("mac", "01:23:45", false),
            ("uuid", "123e4567-e89b-12d3-a456-426614174000", true),
            ("uuid", "123", false),
            ("byte", "aGVsbG8=", true),
            ("byte", "not base64!", false),
            ("date", "2024-02-29", true),
            ("date", "2023-02-29", false),
            ("date-time", "2024-01-01T10:00:00Z", true),
            ("date-time", "2024-01-01T10:00:00.123+01:00", true),
            ("date-time", "yesterday", false),
            ("duration", "1h30m", true),
            ("duration", "22 ns", true),
            ("duration", "soon", false),
            ("quantity", "10Gi", true),
            ("quantity", "ten", false),
            ("isbn10", "0321751043", true),
            ("isbn13", "978-0321751041", true),
            ("hexcolor", "#fff", true),
            ("rgbcolor", "rgb(255,255,255)", true),
            ("ssn", "123-45-6789", true),
            // Go's \d is ASCII only: other digits are no date (and once panicked a write by
            // slicing the date inside a multi-byte character).
            ("date-time", "٢٠٢٤-01-01T10:00:00Z", false),
            ("date-time", "2024-01-0١T10:00:00Z", false),
            ("date", "２０２４-01-01", false),
            ("ssn", "١٢٣-45-6789", false),
        ];
        for (format, value, ok) in cases {
            assert_eq!(validates(format, value), ok, "{format} {value}");
        }
        assert_eq!(effective("string", "date-time"), "date-time");
        assert_eq!(effective("string", "k8s-short-name"), "");
        assert_eq!(effective("integer", "int32"), "int32");
        assert_eq!(effective("integer", "uri"), "");
        assert_eq!(effective("object", "uri"), "");
    }
}
