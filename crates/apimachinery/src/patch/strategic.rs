//! Strategic merge patch (upstream `k8s.io/apimachinery/pkg/util/strategicpatch`, `StrategicMergeMapPatch`
//! with `MergeParallelList` and `IgnoreUnmatchedNulls`, as the API server applies it).
//!
//! Semantics:
//! - objects merge recursively; `null` deletes a field;
//! - lists whose field has `patchStrategy: merge` merge: lists of objects by `patchMergeKey` (an item whose
//!   key exists merges into it, others are added), lists of primitives as a union; other lists are replaced;
//! - the merged list is ordered as upstream orders it: patch items in patch order, live-only items in live
//!   order, interleaved by their live positions (so a new item comes before the live items, as with upstream);
//! - directives: `$patch: replace` (on an object: replace it; as a list item: replace the list),
//!   `$patch: delete` (on an object: empty it; as a list item: delete the item with that merge key),
//!   `$retainKeys: [..]` (drop live fields not listed), `$setElementOrder/<field>: [..]` (order of the merged
//!   list, sent by `kubectl apply`), `$deleteFromPrimitiveList/<field>: [..]` (remove primitives).
//!
//! Deliberate differences from upstream, all where upstream would keep patch directives or `null`s in the
//! result (its typed decoding drops them later; objects here are stored as JSON, so they must not survive):
//! values the live object does not have yet are merged into an empty value rather than copied verbatim,
//! replaced lists lose `$patch` items, `$deleteFromPrimitiveList` for a field the object lacks is a no-op
//! (upstream adds the items to delete), and `$patch: merge` on an object is accepted as the default
//! behaviour (upstream rejects it as an unknown patch type). Errors upstream reports as 500 are 422 here.

use serde_json::{Map, Value};

use super::list::{clean_list, element_kind, merge_list, normalize_element_order, partition, Kind};
use super::schema::{lookup, PatchSchema, Strategy};
use super::{bad_request, go_fmt, go_type, invalid, PatchError};

pub(crate) const DIRECTIVE: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList";
const SET_ELEMENT_ORDER: &str = "$setElementOrder";

const ERR_RETAIN_KEYS: &str = "invalid patch format of retainKeys";
const ERR_PRIMITIVE_LIST: &str = "invalid patch format of primitive list";
const ERR_SET_ELEMENT_ORDER: &str = "invalid patch format of setElementOrder list";

/// Applies a strategic merge patch to `doc` (both JSON objects; a `null` patch changes nothing) using the
/// patch metadata of `schema` (see [`super::schema_for`]).
pub fn apply_strategic_merge_patch(
    doc: &Value,
    patch: &Value,
    schema: PatchSchema,
) -> Result<Value, PatchError> {
    let Value::Object(original) = doc else {
        return Err(bad_request("invalid JSON document"));
    };
    let patch = match patch {
        Value::Object(p) => p.clone(),
        Value::Null => Map::new(),
        _ => return Err(bad_request("invalid JSON document")),
    };
    merge_map(original.clone(), patch, schema).map(Value::Object)
}

/// Upstream `mergeMap`: merges `patch` into `original`.
pub(crate) fn merge_map(
    mut original: Map<String, Value>,
    mut patch: Map<String, Value>,
    schema: PatchSchema,
) -> Result<Map<String, Value>, PatchError> {
    if let Some(directive) = patch.get(DIRECTIVE) {
        match directive.as_str() {
            Some("replace") => {
                patch.shift_remove(DIRECTIVE);
                return merge_map(Map::new(), patch, schema);
            }
            Some("delete") => return Ok(Map::new()),
            Some("merge") => {
                patch.shift_remove(DIRECTIVE);
            }
            _ => {
                return Err(invalid(format!(
                    "unknown patch type: {} in map: {}",
                    go_fmt(directive),
                    go_fmt(&Value::Object(patch.clone()))
                )))
            }
        }
    }
    apply_retain_keys(&mut original, &mut patch)?;
    apply_set_element_order(&mut original, &mut patch, schema)?;

    for (key, value) in patch {
        let (field, delete_list) = match key.strip_prefix(DELETE_FROM_PRIMITIVE_LIST) {
            Some(_) => (
                extract_key(&key, DELETE_FROM_PRIMITIVE_LIST, ERR_PRIMITIVE_LIST)?,
                true,
            ),
            None => (key, false),
        };
        if value.is_null() {
            original.shift_remove(&field);
            continue;
        }
        let meta = lookup(schema, &field);
        if delete_list {
            let Value::Array(to_delete) = value else {
                return Err(bad_request(ERR_PRIMITIVE_LIST));
            };
            if let Some(Value::Array(live)) = original.get_mut(&field) {
                live.retain(|v| !to_delete.contains(v));
            }
            continue;
        }
        let merged = match original.get_mut(&field) {
            None => fresh_value(value, meta.schema)?,
            Some(slot) => {
                let live = std::mem::take(slot);
                match (live, value) {
                    (Value::Object(l), Value::Object(p)) if meta.strategy != Strategy::Replace => {
                        Value::Object(merge_map(l, p, meta.schema)?)
                    }
                    (Value::Array(l), Value::Array(p)) => Value::Array(merge_list(l, p, &meta)?),
                    (_, value) => fresh_value(value, meta.schema)?,
                }
            }
        };
        original.insert(field, merged);
    }
    Ok(original)
}

/// A patch value for a field the live object lacks (or whose type changes): merged into an empty value,
/// which drops `null`s and directives.
fn fresh_value(value: Value, schema: PatchSchema) -> Result<Value, PatchError> {
    Ok(match value {
        Value::Object(p) => Value::Object(merge_map(Map::new(), p, schema)?),
        Value::Array(items) => Value::Array(clean_list(items, schema)?),
        other => other,
    })
}

/// Upstream `applyRetainKeysDirective`: every field the patch sets must be listed; live fields that are
/// not listed are dropped.
fn apply_retain_keys(
    original: &mut Map<String, Value>,
    patch: &mut Map<String, Value>,
) -> Result<(), PatchError> {
    let Some(retain) = patch.shift_remove(RETAIN_KEYS) else {
        return Ok(());
    };
    let Value::Array(retain) = retain else {
        return Err(bad_request(ERR_RETAIN_KEYS));
    };
    let keep = |k: &str| retain.iter().any(|v| v.as_str() == Some(k));
    for (k, v) in patch.iter() {
        if v.is_null()
            || k.starts_with(DELETE_FROM_PRIMITIVE_LIST)
            || k.starts_with(SET_ELEMENT_ORDER)
        {
            continue;
        }
        if !keep(k) {
            return Err(bad_request(ERR_RETAIN_KEYS));
        }
    }
    original.retain(|k, _| keep(k));
    Ok(())
}

/// Upstream `mergePatchIntoOriginal`: merges every list that has a `$setElementOrder/<field>` directive
/// and orders the result: the directive's order first, then the live order for live-only items.
fn apply_set_element_order(
    original: &mut Map<String, Value>,
    patch: &mut Map<String, Value>,
    schema: PatchSchema,
) -> Result<(), PatchError> {
    let keys: Vec<String> = patch
        .keys()
        .filter(|k| k.starts_with(SET_ELEMENT_ORDER))
        .cloned()
        .collect();
    for key in keys {
        let Some(order) = patch.shift_remove(&key) else {
            continue;
        };
        let Value::Array(order) = order else {
            return Err(invalid(bad_arg_type("[]interface {}", &order)));
        };
        let field = extract_key(&key, SET_ELEMENT_ORDER, ERR_SET_ELEMENT_ORDER)?;
        let live = list_at(original, &field)?;
        let patched = list_at(patch, &field)?;
        let meta = lookup(schema, &field);
        validate_patch_with_set_order_list(
            patched.as_deref().unwrap_or_default(),
            &order,
            meta.merge_key,
        )?;
        let merged = match (&live, patched) {
            (Some(l), None) => l.clone(),
            (None, Some(p)) => clean_list(p, meta.schema)?,
            (Some(l), Some(p)) => merge_list(l.clone(), p, &meta)?,
            (None, None) => continue,
        };
        patch.shift_remove(&field);
        let live = live.unwrap_or_default();
        let kind = element_kind(&[&live[..], &merged[..]])?;
        let by_key = kind == Some(Kind::Map) && !meta.merge_key.is_empty();
        let key = if by_key { meta.merge_key } else { "" };
        let (in_order, live_only) = partition(merged, &order, key)?;
        let ordered = normalize_element_order(in_order, live_only, &order, &live, key)?;
        original.insert(field, Value::Array(ordered));
    }
    Ok(())
}

fn list_at(m: &Map<String, Value>, field: &str) -> Result<Option<Vec<Value>>, PatchError> {
    match m.get(field) {
        None => Ok(None),
        Some(Value::Array(a)) => Ok(Some(a.clone())),
        Some(other) => Err(invalid(bad_arg_type("[]interface {}", other))),
    }
}

/// Upstream `validatePatchWithSetOrderList`: the patch list (deletions aside) must follow the order of the
/// `$setElementOrder` list.
fn validate_patch_with_set_order_list(
    patch: &[Value],
    order: &[Value],
    merge_key: &str,
) -> Result<(), PatchError> {
    if order.is_empty() || patch.is_empty() {
        return Ok(());
    }
    let mut items: Vec<&Value> = Vec::new();
    for item in patch {
        if !merge_key.is_empty() {
            if !item.is_object() {
                return Err(invalid(bad_arg_type("map[string]interface {}", item)));
            }
            if item.get(DIRECTIVE).and_then(Value::as_str) == Some("delete") {
                continue;
            }
        }
        items.push(item);
    }
    let (mut pi, mut oi) = (0, 0);
    while pi < items.len() && oi < order.len() {
        if items[pi].get(DIRECTIVE).is_some() {
            pi += 1;
            continue;
        }
        if merge_key_value_equal(items[pi], &order[oi], merge_key)? {
            pi += 1;
        }
        oi += 1;
    }
    if pi < items.len() && oi >= order.len() {
        return Err(invalid(format!(
            "The order in patch list:\n{}\n doesn't match {SET_ELEMENT_ORDER} list:\n{}\n",
            go_fmt(&Value::Array(patch.to_vec())),
            go_fmt(&Value::Array(order.to_vec()))
        )));
    }
    Ok(())
}

fn merge_key_value_equal(left: &Value, right: &Value, merge_key: &str) -> Result<bool, PatchError> {
    if merge_key.is_empty() {
        return Ok(left == right);
    }
    let l = merge_key_value(left, merge_key)?;
    let r = merge_key_value(right, merge_key)?;
    Ok(l == r)
}

/// The merge key's value of a list item, with upstream's errors for non-objects and missing keys.
pub(crate) fn merge_key_value<'a>(
    item: &'a Value,
    merge_key: &str,
) -> Result<&'a Value, PatchError> {
    let Value::Object(m) = item else {
        return Err(invalid(bad_arg_type("map[string]interface {}", item)));
    };
    m.get(merge_key)
        .ok_or_else(|| no_merge_key(item, merge_key))
}

pub(crate) fn no_merge_key(item: &Value, merge_key: &str) -> PatchError {
    invalid(format!(
        "map: {} does not contain declared merge key: {merge_key}",
        go_fmt(item)
    ))
}

pub(crate) fn bad_arg_type(expected: &str, actual: &Value) -> String {
    format!("expected a {expected}, but received a {}", go_type(actual))
}

/// `$setElementOrder/containers` -> `containers`.
fn extract_key(key: &str, prefix: &str, err: &str) -> Result<String, PatchError> {
    match key.split_once('/') {
        Some((p, rest)) if p == prefix => Ok(rest.to_string()),
        _ => Err(bad_request(err)),
    }
}
