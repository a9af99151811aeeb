//! List merging of the strategic merge patch (upstream `strategicpatch` `mergeSlice`,
//! `mergeSliceWithSpecialElements`, `normalizeElementOrder` and `mergeSortedSlice`).

use serde_json::{Map, Value};

use super::schema::{FieldMeta, PatchSchema, Strategy};
use super::strategic::{merge_key_value, merge_map, DIRECTIVE};
use super::{go_fmt, invalid, PatchError};

/// The kind of the elements of a list (upstream compares `reflect.Type`s).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Map,
    String,
    Number,
    Bool,
    Null,
}

/// Upstream `sliceElementType`: the one kind of all elements (`None` when there are none). Lists of lists
/// and mixed kinds are errors.
pub(crate) fn element_kind(lists: &[&[Value]]) -> Result<Option<Kind>, PatchError> {
    let mut kind = None;
    for v in lists.iter().flat_map(|l| l.iter()) {
        let k = match v {
            Value::Array(_) => return Err(invalid("lists of lists are not supported")),
            Value::Object(_) => Kind::Map,
            Value::String(_) => Kind::String,
            Value::Number(_) => Kind::Number,
            Value::Bool(_) => Kind::Bool,
            Value::Null => Kind::Null,
        };
        match kind {
            None => kind = Some(k),
            Some(prev) if prev != k => {
                let all = Value::Array(lists.iter().map(|l| Value::Array(l.to_vec())).collect());
                return Err(invalid(format!(
                    "list element types are not identical: {}",
                    go_fmt(&all)
                )));
            }
            Some(_) => {}
        }
    }
    Ok(kind)
}

/// Merges the patch list of a field into the live list according to the field's strategy: replaced unless
/// the strategy is `merge` (upstream `mergeSliceHandler` + `mergeSlice`).
pub(crate) fn merge_list(
    live: Vec<Value>,
    patch: Vec<Value>,
    meta: &FieldMeta,
) -> Result<Vec<Value>, PatchError> {
    if meta.strategy != Strategy::Merge {
        return clean_list(patch, meta.schema);
    }
    if live.is_empty() && patch.is_empty() {
        return Ok(live);
    }
    if element_kind(&[&live, &patch])? != Some(Kind::Map) {
        // A union of primitives, duplicates removed.
        let mut merged: Vec<Value> = Vec::with_capacity(live.len() + patch.len());
        for v in live.iter().chain(patch.iter()) {
            if !merged.contains(v) {
                merged.push(v.clone());
            }
        }
        let (in_patch, live_only) = partition(merged, &patch, "")?;
        return normalize_element_order(in_patch, live_only, &patch, &live, "");
    }
    let key = meta.merge_key;
    if key.is_empty() {
        return Err(invalid(
            "cannot merge lists without merge key for type struct",
        ));
    }

    // Directive items: `$patch: delete` removes live items, `$patch: replace` replaces the list.
    let mut live = live;
    let mut items = Vec::with_capacity(patch.len());
    let mut replace = false;
    for item in patch {
        let Some(directive) = item.get(DIRECTIVE) else {
            items.push(item);
            continue;
        };
        match directive.as_str() {
            Some("delete") => {
                let value = merge_key_value(&item, key)?;
                live.retain(|l| l.get(key) != Some(value));
            }
            Some("replace") => replace = true,
            Some("merge") => {
                return Err(invalid(
                    "merging lists cannot yet be specified in the patch",
                ))
            }
            _ => {
                return Err(invalid(format!(
                    "unknown patch type: {} in map: {}",
                    go_fmt(directive),
                    go_fmt(&item)
                )))
            }
        }
    }
    if replace {
        for item in &items {
            merge_key_value(item, key)?;
        }
        return clean_list(items, meta.schema);
    }

    let mut merged = live.clone();
    for item in &items {
        let value = merge_key_value(item, key)?;
        let patch_map = item.as_object().cloned().unwrap_or_default();
        match merged.iter().position(|l| l.get(key) == Some(value)) {
            Some(i) => {
                let live_map = match std::mem::take(&mut merged[i]) {
                    Value::Object(m) => m,
                    _ => Map::new(),
                };
                merged[i] = Value::Object(merge_map(live_map, patch_map, meta.schema)?);
            }
            None => merged.push(Value::Object(merge_map(
                Map::new(),
                patch_map,
                meta.schema,
            )?)),
        }
    }
    let (in_patch, live_only) = partition(merged, &items, key)?;
    normalize_element_order(in_patch, live_only, &items, &live, key)
}

/// A list taken from the patch as it is: `$patch` items dropped, objects cleaned of `null`s and
/// directives (merged into an empty object).
pub(crate) fn clean_list(items: Vec<Value>, schema: PatchSchema) -> Result<Vec<Value>, PatchError> {
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        match item {
            Value::Object(m) if m.contains_key(DIRECTIVE) => {}
            Value::Object(m) => out.push(Value::Object(merge_map(Map::new(), m, schema)?)),
            other => out.push(other),
        }
    }
    Ok(out)
}

/// Upstream `partition{Primitives,Maps}ByPresentInList`: the items present in `by` (by merge key, or by
/// value when `key` is empty), and the others.
pub(crate) fn partition(
    items: Vec<Value>,
    by: &[Value],
    key: &str,
) -> Result<(Vec<Value>, Vec<Value>), PatchError> {
    let mut present = Vec::new();
    let mut absent = Vec::new();
    for item in items {
        let found = if key.is_empty() {
            by.contains(&item)
        } else {
            let value = merge_key_value(&item, key)?;
            let mut found = false;
            for (i, b) in by.iter().enumerate() {
                if !b.is_object() {
                    return Err(invalid(format!("value for key {i} is not a map.")));
                }
                if b.get(key) == Some(value) {
                    found = true;
                    break;
                }
            }
            found
        };
        if found {
            present.push(item);
        } else {
            absent.push(item);
        }
    }
    Ok((present, absent))
}

/// Upstream `normalizeElementOrder`: sorts the patch items by `patch_order` and the live-only items by
/// `live_order`, then interleaves them ([`merge_sorted`]).
pub(crate) fn normalize_element_order(
    in_patch: Vec<Value>,
    live_only: Vec<Value>,
    patch_order: &[Value],
    live_order: &[Value],
    key: &str,
) -> Result<Vec<Value>, PatchError> {
    let in_patch = normalize_slice_order(in_patch, patch_order, key)?;
    let live_only = normalize_slice_order(live_only, live_order, key)?;
    Ok(merge_sorted(live_only, in_patch, live_order, key))
}

/// Upstream `normalizeSliceOrder`: a stable sort by position in `order`; items carrying `$patch: delete`
/// go last.
fn normalize_slice_order(
    items: Vec<Value>,
    order: &[Value],
    key: &str,
) -> Result<Vec<Value>, PatchError> {
    let mut items = items;
    let mut deletes = Vec::new();
    if !key.is_empty() {
        for v in items.iter().chain(order.iter()) {
            merge_key_value(v, key)?;
        }
        let (keep, del): (Vec<Value>, Vec<Value>) = items
            .into_iter()
            .partition(|v| v.get(DIRECTIVE).and_then(Value::as_str) != Some("delete"));
        items = keep;
        deletes = del;
    }
    items.sort_by_key(|v| index(order, v, key).unwrap_or(usize::MAX));
    items.extend(deletes);
    Ok(items)
}

/// Upstream `mergeSortedSlice`: inserts each live-only item (`left`) into the patch items (`right`) before
/// the first patch item that comes after it in the live list; patch items not in the live list come first.
fn merge_sorted(
    left: Vec<Value>,
    right: Vec<Value>,
    live_order: &[Value],
    key: &str,
) -> Vec<Value> {
    let mut out = Vec::with_capacity(left.len() + right.len());
    let mut left = left.into_iter().peekable();
    let mut right = right.into_iter().peekable();
    loop {
        let take_left = match (left.peek(), right.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(l), Some(r)) => {
                matches!((index(live_order, l, key), index(live_order, r, key)), (Some(li), Some(ri)) if li < ri)
            }
        };
        let next = if take_left { left.next() } else { right.next() };
        out.extend(next);
    }
    out
}

/// The position of `v` in `list`, comparing merge key values (or whole values when `key` is empty).
fn index(list: &[Value], v: &Value, key: &str) -> Option<usize> {
    if key.is_empty() {
        return list.iter().position(|x| x == v);
    }
    let want = v.get(key);
    list.iter().position(|x| x.get(key) == want)
}
