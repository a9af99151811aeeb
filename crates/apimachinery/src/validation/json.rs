//! Small helpers to read and edit objects in their served JSON form, shared by defaulting and validation.
//!
//! Go decodes JSON into typed structs, where an absent field, `null`, `""`, `0`, `false`, `[]` and `{}`
//! often mean the same thing. [`semantic_eq`] mirrors upstream's `apiequality.Semantic.DeepEqual` on
//! that basis, so an update that spells a zero value differently is not taken for a change.

use serde_json::{Map, Value};

/// The value at `path` (object keys only).
pub(crate) fn get<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    let mut cur = v;
    for key in path {
        cur = cur.as_object()?.get(*key)?;
    }
    if cur.is_null() {
        None
    } else {
        Some(cur)
    }
}

pub(crate) fn get_str<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    get(v, path).and_then(Value::as_str)
}

/// The string at `path`, or `""` when absent (Go's zero value).
pub(crate) fn str_or_empty<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    get_str(v, path).unwrap_or("")
}

/// An integer, accepting integral floats as Go's decoder does.
pub(crate) fn as_int(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64().or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e18)
                .map(|f| f as i64)
        }),
        _ => None,
    }
}

pub(crate) fn get_int(v: &Value, path: &[&str]) -> Option<i64> {
    get(v, path).and_then(as_int)
}

pub(crate) fn get_bool(v: &Value, path: &[&str]) -> Option<bool> {
    get(v, path).and_then(Value::as_bool)
}

/// The array at `path`, or an empty slice.
pub(crate) fn get_arr<'a>(v: &'a Value, path: &[&str]) -> &'a [Value] {
    get(v, path)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

pub(crate) fn get_obj<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Map<String, Value>> {
    get(v, path).and_then(Value::as_object)
}

/// The child object `key` of `map`, created (or replacing a non-object such as `null`) when missing.
pub(crate) fn child_obj<'a>(
    map: &'a mut Map<String, Value>,
    key: &str,
) -> &'a mut Map<String, Value> {
    let slot = map
        .entry(key.to_string())
        .or_insert_with(|| Value::Object(Map::new()));
    if !slot.is_object() {
        *slot = Value::Object(Map::new());
    }
    match slot {
        Value::Object(m) => m,
        _ => unreachable!("slot was just made an object"),
    }
}

/// The objects in the array `key` of `map`, to edit in place: none when the array is absent, and
/// elements that are not objects skipped.
pub(crate) fn each_obj<'a>(
    map: &'a mut Map<String, Value>,
    key: &str,
) -> impl Iterator<Item = &'a mut Map<String, Value>> {
    map.get_mut(key)
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object_mut)
}

/// Sets `key` to `value` when it is absent or `null`.
pub(crate) fn set_default(map: &mut Map<String, Value>, key: &str, value: Value) {
    match map.get(key) {
        None | Some(Value::Null) => {
            map.insert(key.to_string(), value);
        }
        _ => {}
    }
}

/// Sets `key` to `value` when it is absent, `null` or `""` (Go's empty string).
pub(crate) fn set_default_str(map: &mut Map<String, Value>, key: &str, value: &str) {
    match map.get(key) {
        None | Some(Value::Null) => {
            map.insert(key.to_string(), Value::from(value));
        }
        Some(Value::String(s)) if s.is_empty() => {
            map.insert(key.to_string(), Value::from(value));
        }
        _ => {}
    }
}

/// Whether the value is Go's zero value for its type (or absent).
pub(crate) fn is_zero(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => !b,
        Some(Value::Number(n)) => n.as_f64() == Some(0.0),
        Some(Value::String(s)) => s.is_empty(),
        Some(Value::Array(a)) => a.is_empty(),
        Some(Value::Object(o)) => o.values().all(|v| is_zero(Some(v))),
    }
}

/// Upstream's semantic equality on the JSON form: zero values and absence are equal.
pub(crate) fn semantic_eq(a: Option<&Value>, b: Option<&Value>) -> bool {
    match (a, b) {
        (Some(Value::Object(x)), Some(Value::Object(y))) => {
            x.iter().all(|(k, v)| semantic_eq(Some(v), y.get(k)))
                && y.iter().all(|(k, v)| x.contains_key(k) || is_zero(Some(v)))
        }
        (Some(Value::Array(x)), Some(Value::Array(y))) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| semantic_eq(Some(p), Some(q)))
        }
        (Some(Value::Number(x)), Some(Value::Number(y))) => x.as_f64() == y.as_f64(),
        (Some(x), Some(y)) if x == y => true,
        (x, y) => is_zero(x) && is_zero(y),
    }
}

/// The paths (dotted) at which two values differ semantically, for human-readable update errors.
pub(crate) fn diff_paths(
    prefix: &str,
    a: Option<&Value>,
    b: Option<&Value>,
    out: &mut Vec<String>,
) {
    if semantic_eq(a, b) {
        return;
    }
    match (a, b) {
        (Some(Value::Object(x)), Some(Value::Object(y))) => {
            for (k, v) in x {
                diff_paths(&format!("{prefix}.{k}"), Some(v), y.get(k), out);
            }
            for (k, v) in y {
                if !x.contains_key(k) {
                    diff_paths(&format!("{prefix}.{k}"), None, Some(v), out);
                }
            }
        }
        (Some(Value::Array(x)), Some(Value::Array(y))) if x.len() == y.len() => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                diff_paths(&format!("{prefix}[{i}]"), Some(p), Some(q), out);
            }
        }
        _ => {
            let show = |v: Option<&Value>| v.map(Value::to_string).unwrap_or_else(|| "null".into());
            out.push(format!("{prefix}: {} -> {}", show(a), show(b)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn zero_values_are_semantically_equal() {
        let a =
            json!({"spec": {"hostNetwork": false, "containers": [{"name": "a", "resources": {}}]}});
        let b = json!({"spec": {"containers": [{"name": "a"}]}});
        assert!(semantic_eq(Some(&a), Some(&b)));
        let c = json!({"spec": {"containers": [{"name": "b"}]}});
        assert!(!semantic_eq(Some(&a), Some(&c)));
        let mut d = Vec::new();
        diff_paths("spec", get(&a, &["spec"]), get(&c, &["spec"]), &mut d);
        assert_eq!(d, vec!["spec.containers[0].name: \"a\" -> \"b\""]);
        assert!(semantic_eq(Some(&json!(30)), Some(&json!(30.0))));
    }
}
