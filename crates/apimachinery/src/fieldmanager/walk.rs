//! Walks over objects guided by the kind's list semantics (upstream: the typed values of
//! structured-merge-diff over the OpenAPI schema): the field set of a value, the fields one value changes
//! against another, the merge of an applied configuration into a live object, and removal of fields.
//!
//! List semantics come from the strategic merge patch table: a list with the `merge` strategy and a
//! merge key is associative (items keyed by that field), one of primitives with `merge` is a set, every
//! other list is atomic; objects are granular. Unknown kinds (custom resources) have atomic lists.

use serde_json::{Map, Value};

use super::fieldset::{self, FieldSet};
use crate::patch::schema::{lookup, FieldMeta, PatchSchema, Strategy};

enum ListKind<'a> {
    Associative(&'a str),
    Set,
    Atomic,
}

fn list_kind(meta: &FieldMeta, items: &[Value]) -> ListKind<'static> {
    if meta.strategy != Strategy::Merge {
        return ListKind::Atomic;
    }
    if !meta.merge_key.is_empty() && items.iter().all(|i| i.get(meta.merge_key).is_some()) {
        return ListKind::Associative(meta.merge_key);
    }
    if items.iter().all(|i| !i.is_object() && !i.is_array()) {
        return ListKind::Set;
    }
    ListKind::Atomic
}

fn item_key(item: &Value, key: &str) -> String {
    fieldset::key(&[(key, item.get(key).unwrap_or(&Value::Null))])
}

/// The fields a value sets.
pub fn set_of(obj: &Value, schema: PatchSchema) -> FieldSet {
    let mut set = FieldSet::default();
    if let Value::Object(map) = obj {
        object_set(map, schema, &mut set);
    }
    set
}

fn object_set(map: &Map<String, Value>, schema: PatchSchema, node: &mut FieldSet) {
    for (k, v) in map {
        if v.is_null() {
            continue;
        }
        value_set(v, &lookup(schema, k), node.child(fieldset::field(k)));
    }
}

fn value_set(v: &Value, meta: &FieldMeta, node: &mut FieldSet) {
    match v {
        Value::Object(map) if !map.is_empty() => object_set(map, meta.schema, node),
        Value::Array(items) => match list_kind(meta, items) {
            ListKind::Associative(key) => {
                for item in items {
                    let child = node.child(item_key(item, key));
                    child.member = true;
                    if let Value::Object(fields) = item {
                        object_set(fields, meta.schema, child);
                    }
                }
            }
            ListKind::Set => {
                for item in items {
                    node.child(fieldset::value(item)).member = true;
                }
            }
            ListKind::Atomic => node.member = true,
        },
        _ => node.member = true,
    }
}

/// The fields of `new` whose values are new or differ from `old` (what an update changed).
pub fn changed(old: &Value, new: &Value, schema: PatchSchema) -> FieldSet {
    let mut set = FieldSet::default();
    if let (Value::Object(o), Value::Object(n)) = (old, new) {
        object_changed(o, n, schema, &mut set);
    } else {
        set = set_of(new, schema);
    }
    set
}

fn object_changed(
    old: &Map<String, Value>,
    new: &Map<String, Value>,
    schema: PatchSchema,
    node: &mut FieldSet,
) {
    for (k, v) in new {
        if v.is_null() {
            continue;
        }
        let meta = lookup(schema, k);
        let child = node.child(fieldset::field(k));
        match old.get(k) {
            Some(o) => value_changed(o, v, &meta, child),
            None => value_set(v, &meta, child),
        }
        if child.is_empty() {
            node.children.remove(&fieldset::field(k));
        }
    }
}

fn value_changed(old: &Value, new: &Value, meta: &FieldMeta, node: &mut FieldSet) {
    match (old, new) {
        (Value::Object(o), Value::Object(n)) if !n.is_empty() => {
            object_changed(o, n, meta.schema, node)
        }
        (Value::Array(o), Value::Array(n)) => match list_kind(meta, n) {
            ListKind::Associative(key) => {
                for item in n {
                    let k = item_key(item, key);
                    let child = node.child(k.clone());
                    match o.iter().find(|i| item_key(i, key) == k) {
                        Some(old_item) => {
                            if let (Value::Object(oi), Value::Object(ni)) = (old_item, item) {
                                object_changed(oi, ni, meta.schema, child);
                            }
                        }
                        None => {
                            child.member = true;
                            if let Value::Object(fields) = item {
                                object_set(fields, meta.schema, child);
                            }
                        }
                    }
                    if child.is_empty() {
                        node.children.remove(&k);
                    }
                }
            }
            ListKind::Set => {
                for item in n.iter().filter(|i| !o.contains(i)) {
                    node.child(fieldset::value(item)).member = true;
                }
            }
            ListKind::Atomic => node.member = old != new,
        },
        _ => node.member = old != new,
    }
}

/// The applied configuration merged into the live object: objects merge field by field, associative
/// lists item by item (new items appended), sets are united, everything else is replaced.
pub fn merge(live: &Value, config: &Value, schema: PatchSchema) -> Value {
    match (live, config) {
        (Value::Object(l), Value::Object(c)) => Value::Object(merge_objects(l, c, schema)),
        _ => config.clone(),
    }
}

fn merge_objects(
    live: &Map<String, Value>,
    config: &Map<String, Value>,
    schema: PatchSchema,
) -> Map<String, Value> {
    let mut out = live.clone();
    for (k, c) in config {
        if c.is_null() {
            continue;
        }
        let meta = lookup(schema, k);
        let merged = match live.get(k) {
            Some(l) => merge_values(l, c, &meta),
            None => c.clone(),
        };
        out.insert(k.clone(), merged);
    }
    out
}

fn merge_values(live: &Value, config: &Value, meta: &FieldMeta) -> Value {
    match (live, config) {
        (Value::Object(l), Value::Object(c)) => Value::Object(merge_objects(l, c, meta.schema)),
        (Value::Array(l), Value::Array(c)) => match list_kind(meta, c) {
            ListKind::Associative(key) => {
                let mut out: Vec<Value> = l
                    .iter()
                    .map(|item| {
                        let k = item_key(item, key);
                        match c.iter().find(|ci| item_key(ci, key) == k) {
                            Some(ci) => merge_values(
                                item,
                                ci,
                                &FieldMeta {
                                    strategy: Strategy::Default,
                                    ..*meta
                                },
                            ),
                            None => item.clone(),
                        }
                    })
                    .collect();
                for ci in c {
                    let k = item_key(ci, key);
                    if !l.iter().any(|item| item_key(item, key) == k) {
                        out.push(ci.clone());
                    }
                }
                Value::Array(out)
            }
            ListKind::Set => {
                let mut out = l.clone();
                out.extend(c.iter().filter(|i| !l.contains(i)).cloned());
                Value::Array(out)
            }
            ListKind::Atomic => config.clone(),
        },
        _ => config.clone(),
    }
}

/// Removes the members of `remove` from `obj`, except nodes `keep` still has members under (a list item
/// the applier no longer sets but another manager has fields in stays, without the applier's fields).
pub fn remove(obj: &mut Value, remove: &FieldSet, keep: &FieldSet, schema: PatchSchema) {
    if let Value::Object(map) = obj {
        remove_from_object(map, remove, keep, schema);
    }
}

fn remove_from_object(
    map: &mut Map<String, Value>,
    remove: &FieldSet,
    keep: &FieldSet,
    schema: PatchSchema,
) {
    let empty = FieldSet::default();
    for (element, sub) in &remove.children {
        let Some(name) = element.strip_prefix("f:") else {
            continue;
        };
        let kept = keep.children.get(element).unwrap_or(&empty);
        if sub.member && kept.is_empty() {
            map.remove(name);
            continue;
        }
        let meta = lookup(schema, name);
        if let Some(v) = map.get_mut(name) {
            remove_from_value(v, sub, kept, &meta);
            // A map or list emptied by the removal goes too (it was only there for the removed fields).
            let emptied = match v {
                Value::Object(m) => m.is_empty(),
                Value::Array(a) => a.is_empty(),
                _ => false,
            };
            if emptied {
                map.remove(name);
            }
        }
    }
}

fn remove_from_value(v: &mut Value, remove: &FieldSet, keep: &FieldSet, meta: &FieldMeta) {
    let empty = FieldSet::default();
    match v {
        Value::Object(map) => remove_from_object(map, remove, keep, meta.schema),
        Value::Array(items) => {
            let kind = list_kind(meta, items);
            items.retain_mut(|item| {
                let element = match kind {
                    ListKind::Associative(key) => item_key(item, key),
                    ListKind::Set => fieldset::value(item),
                    ListKind::Atomic => return true,
                };
                let Some(sub) = remove.children.get(&element) else {
                    return true;
                };
                let kept = keep.children.get(&element).unwrap_or(&empty);
                if sub.member && kept.is_empty() {
                    return false;
                }
                if let Value::Object(fields) = item {
                    remove_from_object(fields, sub, kept, meta.schema);
                }
                true
            });
        }
        _ => {}
    }
}

/// The value at a member path (`None` when absent).
pub fn value_at<'v>(obj: &'v Value, path: &[String], schema: PatchSchema) -> Option<&'v Value> {
    let mut current = obj;
    let mut meta = FieldMeta {
        schema,
        strategy: Strategy::Default,
        retain_keys: false,
        merge_key: "",
    };
    for element in path {
        if let Some(name) = element.strip_prefix("f:") {
            meta = lookup(meta.schema, name);
            current = current.get(name)?;
        } else {
            let items = current.as_array()?;
            current = match list_kind(&meta, items) {
                ListKind::Associative(key) => {
                    items.iter().find(|i| &item_key(i, key) == element)?
                }
                ListKind::Set => items.iter().find(|i| &fieldset::value(i) == element)?,
                ListKind::Atomic => return None,
            };
        }
    }
    Some(current)
}
