//! Defaulting (upstream `schema/defaulting/algorithm.go`): a missing field whose schema has a
//! `default` gets a copy of it, and so does a `null` where the schema is not nullable; then defaulting
//! descends into the (possibly just defaulted) values. Applied to request bodies and to objects read
//! from storage, as upstream does.

use serde_json::Value;

use super::Schema;

/// Applies the defaults of `schema` to `obj` in place.
pub fn apply(obj: &mut Value, schema: Option<&Schema>) {
    let Some(s) = schema else { return };
    match obj {
        Value::Object(map) => {
            for (k, prop) in &s.properties {
                let Some(default) = &prop.default else {
                    continue;
                };
                let missing = match map.get(k) {
                    None => true,
                    Some(Value::Null) => !prop.nullable,
                    Some(_) => false,
                };
                if missing {
                    map.insert(k.clone(), default.clone());
                }
            }
            for (k, v) in map.iter_mut() {
                if let Some(prop) = s.properties.get(k) {
                    apply(v, Some(prop));
                } else if let Some(additional) = s.additional_schema() {
                    if v.is_null() && !additional.nullable {
                        if let Some(d) = &additional.default {
                            *v = d.clone();
                        }
                    }
                    apply(v, Some(additional));
                }
            }
        }
        Value::Array(items) => {
            let Some(item_schema) = s.items.as_deref() else {
                return;
            };
            for v in items {
                if v.is_null() && !item_schema.nullable {
                    if let Some(d) = &item_schema.default {
                        *v = d.clone();
                    }
                }
                apply(v, Some(item_schema));
            }
        }
        _ => {}
    }
}

/// Whether any node of the schema has a default (reads need defaulting then).
pub fn has_defaults(schema: &Schema) -> bool {
    schema.has(&|s| s.default.is_some())
}
