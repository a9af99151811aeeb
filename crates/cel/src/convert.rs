//! JSON <-> CEL values.
//!
//! Inputs are converted straight into the interpreter's value objects (`Box<dyn Val>`), so a bound
//! object is converted once per activation and then only borrowed by every evaluation.

use std::collections::HashMap;
use std::sync::Arc;

use cel::common::types::{
    CelBool, CelDouble, CelInt, CelList, CelMap, CelMapKey, CelNull, CelString,
};
use cel::common::value::Val;
use cel::objects::{Key, Map};
use cel::Value;

use crate::EvalError;

/// A JSON value as an interpreter value.
pub(crate) fn json_to_val(json: &serde_json::Value) -> Box<dyn Val> {
    match json {
        serde_json::Value::Null => Box::new(CelNull),
        serde_json::Value::Bool(b) => Box::new(CelBool::from(*b)),
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) => Box::new(CelInt::from(i)),
            // Beyond int64 (or fractional): a double, as upstream's unstructured decoding does.
            None => Box::new(CelDouble::from(n.as_f64().unwrap_or(f64::NAN))),
        },
        serde_json::Value::String(s) => Box::new(CelString::from(s.clone())),
        serde_json::Value::Array(items) => Box::new(CelList::from(
            items.iter().map(json_to_val).collect::<Vec<_>>(),
        )),
        serde_json::Value::Object(fields) => Box::new(CelMap::from(
            fields
                .iter()
                .map(|(k, v)| (CelMapKey::from(k.clone()), json_to_val(v)))
                .collect::<HashMap<_, _>>(),
        )),
    }
}

/// A JSON value as a CEL [`Value`]: objects become maps, arrays lists, integers `int` (beyond
/// int64 `double`), other numbers `double`.
pub fn json_to_value(json: &serde_json::Value) -> Value {
    match json {
        serde_json::Value::Null => Value::Null,
        serde_json::Value::Bool(b) => Value::Bool(*b),
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) => Value::Int(i),
            None => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        serde_json::Value::String(s) => Value::String(Arc::new(s.clone())),
        serde_json::Value::Array(items) => {
            Value::List(Arc::new(items.iter().map(json_to_value).collect()))
        }
        serde_json::Value::Object(fields) => Value::Map(Map {
            map: Arc::new(
                fields
                    .iter()
                    .map(|(k, v)| (Key::String(Arc::new(k.clone())), json_to_value(v)))
                    .collect(),
            ),
        }),
    }
}

/// A CEL result as JSON: maps become objects (keys sorted, non-string keys printed), lists
/// arrays, optionals their value (or `null`), timestamps RFC 3339 strings, durations strings in
/// seconds (`"1.5s"`), types their names, quantities/IPs/CIDRs/URLs their string forms.
pub fn to_json(value: &Value) -> Result<serde_json::Value, EvalError> {
    Ok(match value {
        Value::Null => serde_json::Value::Null,
        Value::Bool(b) => serde_json::Value::Bool(*b),
        Value::Int(i) => serde_json::Value::from(*i),
        Value::UInt(u) => serde_json::Value::from(*u),
        Value::Float(f) => serde_json::Number::from_f64(*f)
            .map(serde_json::Value::Number)
            .ok_or_else(|| EvalError::NotJson(format!("double {f}")))?,
        Value::String(s) => serde_json::Value::String(s.to_string()),
        Value::Bytes(b) => serde_json::Value::String(String::from_utf8_lossy(b).into_owned()),
        Value::List(items) => {
            serde_json::Value::Array(items.iter().map(to_json).collect::<Result<Vec<_>, _>>()?)
        }
        Value::Map(map) => {
            let mut entries = map
                .map
                .iter()
                .map(|(k, v)| Ok((key_string(k), to_json(v)?)))
                .collect::<Result<Vec<_>, EvalError>>()?;
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            serde_json::Value::Object(entries.into_iter().collect())
        }
        Value::Timestamp(t) => {
            serde_json::Value::String(t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true))
        }
        Value::Duration(d) => serde_json::Value::String(crate::library::format_duration(d)),
        Value::Opaque(o) => {
            if let Some(opt) = o.downcast_ref::<cel::objects::OptionalValue>() {
                return match opt.value() {
                    Some(v) => to_json(v),
                    None => Ok(serde_json::Value::Null),
                };
            }
            match crate::library::opaque_string(o.as_ref()) {
                Some(s) => serde_json::Value::String(s),
                None => return Err(EvalError::NotJson(o.runtime_type_name().to_owned())),
            }
        }
        other => return Err(EvalError::NotJson(format!("{other:?}"))),
    })
}

/// A CEL list.
pub fn list_value(items: Vec<Value>) -> Value {
    Value::List(Arc::new(items))
}

/// A CEL map with string keys.
pub fn map_value(entries: impl IntoIterator<Item = (String, Value)>) -> Value {
    Value::Map(Map {
        map: Arc::new(
            entries
                .into_iter()
                .map(|(k, v)| (Key::String(Arc::new(k)), v))
                .collect(),
        ),
    })
}

/// A Kubernetes quantity as a CEL `kubernetes.Quantity` (e.g. a DRA device's capacity, which
/// upstream's device selectors compare with `compareTo(quantity("1Gi"))`).
pub fn quantity_value(q: apimachinery::quantity::Quantity) -> Value {
    Value::Opaque(Arc::new(crate::library::quantity::QuantityValue(q)))
}

/// A CEL optional: `optional.of(v)` or `optional.none()`.
pub fn optional_value(value: Option<Value>) -> Value {
    Value::Opaque(Arc::new(match value {
        Some(v) => cel::objects::OptionalValue::of(v),
        None => cel::objects::OptionalValue::none(),
    }))
}

/// An RFC 3339 date-time (`format: date-time`) as a CEL timestamp; a full date (`format: date`)
/// as midnight UTC.
pub fn timestamp_value(s: &str) -> Option<Value> {
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(s) {
        return Some(Value::Timestamp(t));
    }
    let date = chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").ok()?;
    let utc = chrono::FixedOffset::east_opt(0)?;
    Some(Value::Timestamp(
        date.and_hms_opt(0, 0, 0)?
            .and_local_timezone(utc)
            .single()?,
    ))
}

/// A Go duration string (`1h30m`, `1.5s`, `-200ms`; `format: duration`) as a CEL duration.
pub fn duration_value(s: &str) -> Option<Value> {
    let (neg, mut rest) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    if rest == "0" {
        return Some(Value::Duration(chrono::Duration::zero()));
    }
    let mut nanos: f64 = 0.0;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .filter(|&i| i > 0)?;
        let n: f64 = rest[..num_end].parse().ok()?;
        rest = &rest[num_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_end] {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return None,
        };
        nanos += n * scale;
        rest = &rest[unit_end..];
    }
    if nanos > i64::MAX as f64 {
        return None;
    }
    let d = chrono::Duration::nanoseconds(nanos as i64);
    Some(Value::Duration(if neg { -d } else { d }))
}

/// Base64 (`format: byte`) as CEL bytes.
pub fn bytes_value(s: &str) -> Option<Value> {
    let body = s.trim_end_matches('=');
    if !s.len().is_multiple_of(4) || s.len() - body.len() > 2 {
        return None;
    }
    let mut out = Vec::with_capacity(body.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for b in body.bytes() {
        let v = match b {
            b'A'..=b'Z' => b - b'A',
            b'a'..=b'z' => b - b'a' + 26,
            b'0'..=b'9' => b - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(Value::Bytes(Arc::new(out)))
}

fn key_string(key: &Key) -> String {
    match key {
        Key::String(s) => s.to_string(),
        Key::Int(i) => i.to_string(),
        Key::Uint(u) => u.to_string(),
        Key::Bool(b) => b.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_round_trips() {
        let doc = json!({"a": [1, 2.5, "x", null, true], "b": {"c": -3}});
        assert_eq!(to_json(&json_to_value(&doc)).unwrap(), doc);
    }

    #[test]
    fn integers_beyond_int64_become_doubles() {
        assert!(matches!(
            json_to_value(&json!(18446744073709551615u64)),
            Value::Float(_)
        ));
        assert_eq!(json_to_value(&json!(7)), Value::Int(7));
    }

    #[test]
    fn formatted_strings() {
        assert!(matches!(
            timestamp_value("2024-01-02T03:04:05Z"),
            Some(Value::Timestamp(_))
        ));
        assert!(matches!(
            timestamp_value("2024-01-02"),
            Some(Value::Timestamp(_))
        ));
        assert!(timestamp_value("yesterday").is_none());
        assert_eq!(
            duration_value("1h30m"),
            Some(Value::Duration(chrono::Duration::minutes(90)))
        );
        assert_eq!(
            duration_value("-1.5s"),
            Some(Value::Duration(chrono::Duration::milliseconds(-1500)))
        );
        assert!(duration_value("5 days").is_none());
        assert_eq!(
            bytes_value("aGk="),
            Some(Value::Bytes(Arc::new(b"hi".to_vec())))
        );
        assert!(bytes_value("a").is_none());
    }

    #[test]
    fn non_finite_doubles_are_not_json() {
        assert!(to_json(&Value::Float(f64::NAN)).is_err());
    }
}
