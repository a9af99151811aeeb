//! Pruning (upstream `schema/pruning` and `schema/defaulting/prunenulls.go`): fields a structural
//! schema does not specify are dropped, unless `x-kubernetes-preserve-unknown-fields` keeps them;
//! `apiVersion`, `kind` and `metadata` of the resource root and of embedded resources are never
//! pruned here (metadata is coerced to ObjectMeta by [`super::objectmeta`]).

use serde_json::Value;

use super::Schema;

const META_FIELDS: [&str; 3] = ["apiVersion", "kind", "metadata"];

/// Prunes `obj` in place against `schema` (its root is a resource root); returns the pruned paths,
/// e.g. `spec.foo`, `spec.items[1].bar`, in the order they occur.
pub fn prune(obj: &mut Value, schema: Option<&Schema>) -> Vec<String> {
    let root = schema.map(Schema::as_resource_root).unwrap_or(Schema {
        embedded_resource: true,
        ..Default::default()
    });
    let mut pruned = Vec::new();
    let mut path = String::new();
    walk(obj, Some(&root), &mut path, &mut pruned);
    pruned
}

fn push_key(path: &mut String, key: &str) -> usize {
    let len = path.len();
    if !path.is_empty() {
        path.push('.');
    }
    path.push_str(key);
    len
}

fn walk(x: &mut Value, s: Option<&Schema>, path: &mut String, pruned: &mut Vec<String>) {
    if let Some(s) = s.filter(|s| s.preserves_unknown()) {
        skip(x, s, path, pruned);
        return;
    }
    match x {
        Value::Object(map) => {
            let Some(s) = s else {
                for k in map.keys() {
                    let len = push_key(path, k);
                    pruned.push(path.clone());
                    path.truncate(len);
                }
                map.clear();
                return;
            };
            let mut remove = Vec::new();
            for (k, v) in map.iter_mut() {
                if s.embedded_resource && META_FIELDS.contains(&k.as_str()) {
                    continue;
                }
                let len = push_key(path, k);
                match s.field(k) {
                    Some(sub) => walk(v, sub, path, pruned),
                    None => {
                        pruned.push(path.clone());
                        remove.push(k.clone());
                    }
                }
                path.truncate(len);
            }
            for k in remove {
                map.shift_remove(&k);
            }
        }
        Value::Array(items) => {
            let item_schema = s.and_then(|s| s.items.as_deref());
            for (i, v) in items.iter_mut().enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                walk(v, item_schema, path, pruned);
                path.truncate(len);
            }
        }
        _ => {}
    }
}

/// Below `x-kubernetes-preserve-unknown-fields`: unknown fields stay, specified ones are pruned inside.
fn skip(x: &mut Value, s: &Schema, path: &mut String, pruned: &mut Vec<String>) {
    match x {
        Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                if s.embedded_resource && META_FIELDS.contains(&k.as_str()) {
                    continue;
                }
                let len = push_key(path, k);
                if let Some(sub) = s.field(k) {
                    walk(v, sub, path, pruned);
                }
                path.truncate(len);
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = s.items.as_deref() {
                for (i, v) in items.iter_mut().enumerate() {
                    let len = path.len();
                    path.push_str(&format!("[{i}]"));
                    skip(v, item_schema, path, pruned);
                    path.truncate(len);
                }
            }
        }
        _ => {}
    }
}

/// Removes `null` values whose schema is not nullable and has no default (a default fills them in
/// later), as decoding into Go structs would drop them.
pub fn prune_nulls(x: &mut Value, s: Option<&Schema>) {
    match x {
        Value::Object(map) => {
            let mut remove = Vec::new();
            for (k, v) in map.iter_mut() {
                let sub = s.and_then(|s| s.field(k).flatten());
                if v.is_null() && sub.is_some_and(|s| !s.nullable && s.default.is_none()) {
                    remove.push(k.clone());
                } else {
                    prune_nulls(v, sub);
                }
            }
            for k in remove {
                map.shift_remove(&k);
            }
        }
        Value::Array(items) => {
            let sub = s.and_then(|s| s.items.as_deref());
            for v in items {
                prune_nulls(v, sub);
            }
        }
        _ => {}
    }
}
