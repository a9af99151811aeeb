//! `x-kubernetes-list-type` invariants (upstream `schema/listtype`): items of a `set` list are unique,
//! and items of a `map` list are objects unique by their `x-kubernetes-list-map-keys`.

use serde_json::{Map, Value};

use super::{go_sharp_v, Schema};
use crate::validation::field::{ErrorType, FieldError, FieldPath};

/// Checks every list below the root object `obj`.
pub fn validate(obj: &Value, schema: Option<&Schema>) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let (Some(s), Value::Object(map)) = (schema, obj) {
        object(None, s, map, &mut errs);
    }
    errs
}

fn child(path: Option<&FieldPath>, key: &str) -> FieldPath {
    match path {
        Some(p) => p.child(key),
        None => FieldPath::root(key),
    }
}

fn object(
    path: Option<&FieldPath>,
    s: &Schema,
    map: &Map<String, Value>,
    errs: &mut Vec<FieldError>,
) {
    if let Some(extra) = s.additional_schema() {
        for (k, v) in map {
            let p = match path {
                Some(p) => p.key(k),
                None => FieldPath::root(&format!("[{k}]")),
            };
            value(&p, extra, v, errs);
        }
    }
    for (k, v) in map {
        if let Some(sub) = s.properties.get(k) {
            value(&child(path, k), sub, v, errs);
        }
    }
}

fn value(path: &FieldPath, s: &Schema, v: &Value, errs: &mut Vec<FieldError>) {
    match v {
        Value::Array(items) => array(path, s, items, errs),
        Value::Object(map) => object(Some(path), s, map, errs),
        _ => {}
    }
}

fn duplicate(path: &FieldPath, v: &Value) -> FieldError {
    match v {
        Value::Object(_) | Value::Array(_) => {
            FieldError::with_value_text(ErrorType::Duplicate, path, go_sharp_v(v), "")
        }
        other => FieldError::duplicate(path, other.clone()),
    }
}

fn array(path: &FieldPath, s: &Schema, items: &[Value], errs: &mut Vec<FieldError>) {
    match s.list_type.as_deref() {
        Some("set") => {
            for i in non_unique(items) {
                errs.push(duplicate(&path.index(i), &items[i]));
            }
        }
        Some("map") => errs.extend(list_map(path, s, items)),
        _ => {}
    }
    if let Some(item_schema) = &s.items {
        for (i, item) in items.iter().enumerate() {
            value(&path.index(i), item_schema, item, errs);
        }
    }
}

/// The indices of the second occurrence of each repeated item (JSON equality).
fn non_unique(items: &[Value]) -> Vec<usize> {
    let mut seen: Vec<(String, usize)> = Vec::new();
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let key = canonical(item);
        match seen.iter_mut().find(|(k, _)| *k == key) {
            Some((_, times)) => {
                *times += 1;
                if *times == 2 {
                    out.push(i);
                }
            }
            None => seen.push((key, 1)),
        }
    }
    out
}

/// A canonical text of a value: object keys sorted, as Go's `json.Marshal` of a map.
fn canonical(v: &Value) -> String {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let parts: Vec<String> = keys
                .iter()
                .map(|k| format!("{}:{}", Value::String((*k).clone()), canonical(&m[*k])))
                .collect();
            format!("{{{}}}", parts.join(","))
        }
        Value::Array(a) => format!(
            "[{}]",
            a.iter().map(canonical).collect::<Vec<_>>().join(",")
        ),
        Value::Number(n) => match n.as_f64() {
            Some(f) if f.fract() == 0.0 && f.abs() < 1e15 => format!("{}", f as i64),
            _ => n.to_string(),
        },
        other => other.to_string(),
    }
}

fn list_map(path: &FieldPath, s: &Schema, items: &[Value]) -> Vec<FieldError> {
    for (i, x) in items.iter().enumerate() {
        if !x.is_null() && !x.is_object() {
            let mut e = FieldError::invalid(
                &path.index(i),
                x.clone(),
                "must be an object for an array of list-type map",
            );
            if x.is_array() {
                e.value_text = Some(go_sharp_v(x));
            }
            return vec![e];
        }
    }
    if items.len() <= 1 {
        return Vec::new();
    }
    let keys: Vec<Value> = items
        .iter()
        .map(|x| {
            let mut key = Map::new();
            if let Some(m) = x.as_object() {
                for k in &s.list_map_keys {
                    if let Some(v) = m.get(k) {
                        key.insert(k.clone(), v.clone());
                    }
                }
            }
            Value::Object(key)
        })
        .collect();
    non_unique(&keys)
        .into_iter()
        .map(|i| duplicate(&path.index(i), &keys[i]))
        .collect()
}
