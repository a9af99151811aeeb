//! The custom resource parts of the generic REST handlers (upstream `customresource_handler.go`'s
//! schema-coercing decoder, `unstructuredDefaulter`, the customresource strategy and validator, the
//! `None` converter and the scale subresource): called by `rest::write`, `rest::read` and the read
//! conversion when the resource comes from a CRD.

use apimachinery::schema::{defaults, listtype, objectmeta, prune, validate};
use apimachinery::status::ApiError;
use apimachinery::validation::field::{FieldError, FieldPath};
use serde_json::{json, Value};

use super::info::CrdInfo;

/// Decodes a request body as upstream's schema-coercing decoder does: `metadata` through ObjectMeta,
/// unknown fields pruned (reported per `fieldValidation`: Strict is a 400, Warn returns warnings),
/// non-nullable nulls without default dropped, embedded resources' metadata coerced.
pub fn check_fields(
    info: &CrdInfo,
    version: &str,
    obj: &mut Value,
    field_validation: Option<&str>,
) -> Result<Vec<String>, ApiError> {
    let mode = field_validation.unwrap_or("Warn");
    if !matches!(mode, "Strict" | "Warn" | "Ignore") {
        return Err(ApiError::bad_request(format!(
            "fieldValidation: Unsupported value: {mode:?}: supported values: \"Ignore\", \"Strict\", \"Warn\""
        )));
    }
    let mut unknown = Vec::new();
    if let Some(meta) = obj.get_mut("metadata").filter(|m| !m.is_null()) {
        let (coerced, extra) = objectmeta::coerce_meta(meta).map_err(|e| {
            ApiError::bad_request(format!(
                "{kind} in version {version:?} cannot be handled as a {kind}: {e}",
                kind = info.kind
            ))
        })?;
        unknown.extend(extra.into_iter().map(|f| format!("metadata.{f}")));
        *meta = coerced;
    }
    let schema = info.schema(version);
    unknown.extend(prune::prune(obj, schema));
    prune::prune_nulls(obj, schema);
    let embedded = objectmeta::coerce_embedded(obj, schema).map_err(|e| {
        ApiError::bad_request(format!(
            "{kind} in version {version:?} cannot be handled as a {kind}: {e}",
            kind = info.kind
        ))
    })?;
    unknown.extend(embedded);
    let messages: Vec<String> = unknown
        .iter()
        .map(|p| format!("unknown field {p:?}"))
        .collect();
    if mode == "Strict" && !messages.is_empty() {
        return Err(ApiError::bad_request(format!(
            "{kind} in version {version:?} cannot be handled as a {kind}: strict decoding error: {}",
            messages.join(", "),
            kind = info.kind
        )));
    }
    Ok(if mode == "Warn" { messages } else { Vec::new() })
}

/// Applies the version's schema defaults.
pub fn default(info: &CrdInfo, version: &str, obj: &mut Value) {
    defaults::apply(obj, info.schema(version));
}

/// Upstream's customresource validator and strategy checks beyond object metadata: the schema,
/// the scale paths, embedded resources and list-type uniqueness (ratcheted on update: only enforced
/// when the old object satisfied it).
pub fn validate(
    info: &CrdInfo,
    version: &str,
    new: &Value,
    old: Option<&Value>,
    status_only: bool,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let v = info.version(version);
    let schema = v.and_then(|v| v.schema.as_ref());
    if let Some(s) = schema {
        errs.extend(validate::validate(new, s, None));
    }
    if let Some(scale) = v.and_then(|v| v.scale.as_ref()) {
        if !status_only {
            errs.extend(replicas_errors(new, &scale.spec_replicas_path));
        }
        errs.extend(replicas_errors(new, &scale.status_replicas_path));
        if let Some(selector) = &scale.label_selector_path {
            if let Some(found) = at_path(new, selector).filter(|v| !v.is_string() && !v.is_null()) {
                errs.push(FieldError::invalid(
                    &FieldPath::root(selector),
                    "",
                    format!(
                        "{} accessor error: {} is of the type {}, expected string",
                        selector.trim_start_matches('.'),
                        found,
                        go_type(found)
                    ),
                ));
            }
        }
    }
    errs.extend(objectmeta::validate_embedded(new, schema));
    let old_ok = old.is_none_or(|o| listtype::validate(o, schema).is_empty());
    if old_ok {
        errs.extend(listtype::validate(new, schema));
    }
    errs
}

fn go_type(v: &Value) -> &'static str {
    match v {
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_i64() => "int64",
        Value::Number(_) => "float64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
        Value::Null => "<nil>",
    }
}

fn replicas_errors(obj: &Value, path: &str) -> Vec<FieldError> {
    let fp = FieldPath::root(path);
    match at_path(obj, path) {
        None | Some(Value::Null) => Vec::new(),
        Some(v) => match v.as_i64().filter(|_| v.is_i64()) {
            None => vec![FieldError::invalid(
                &fp,
                0,
                format!(
                    "{} accessor error: {} is of the type {}, expected int64",
                    path.trim_start_matches('.'),
                    v,
                    go_type(v)
                ),
            )],
            Some(n) if n < 0 => vec![FieldError::invalid(
                &fp,
                n,
                "should be a non-negative integer",
            )],
            Some(n) if n > i64::from(i32::MAX) => vec![FieldError::invalid(
                &fp,
                n,
                format!("should be less than or equal to {}", i32::MAX),
            )],
            Some(_) => Vec::new(),
        },
    }
}

/// The value at a simple `.a.b.c` path.
fn at_path<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    let mut cur = obj;
    for seg in path.trim_start_matches('.').split('.') {
        cur = cur.get(seg)?;
    }
    Some(cur)
}

/// A stored object as served in `version`: the stored version's defaults applied (upstream defaults
/// on read from storage), then, when the version differs, `apiVersion` rewritten (the `None`
/// conversion) and the object pruned to the served version's schema.
pub fn to_served(info: &CrdInfo, version: &str, obj: &mut Value) {
    let target = info.api_version(version);
    let from = obj
        .get("apiVersion")
        .and_then(Value::as_str)
        .and_then(|av| av.strip_prefix(&format!("{}/", info.group)))
        .map(str::to_string);
    if let Some(stored) = &from {
        defaults::apply(obj, info.schema(stored));
    }
    if from.as_deref() != Some(version) {
        obj["apiVersion"] = Value::String(target);
        prune::prune(obj, info.schema(version));
    }
}

/// A served object in the storage version (the `None` conversion), pruned to its schema.
pub fn to_stored(info: &CrdInfo, obj: &mut Value) {
    let target = info.api_version(&info.storage_version);
    if obj.get("apiVersion").and_then(Value::as_str) != Some(target.as_str()) {
        obj["apiVersion"] = Value::String(target);
        prune::prune(obj, info.schema(&info.storage_version));
    }
}

/// The `autoscaling/v1` Scale of a custom resource (upstream `scaleFromCustomResource`).
pub fn scale_of(info: &CrdInfo, version: &str, obj: &Value) -> Result<Value, ApiError> {
    let Some(scale) = info.version(version).and_then(|v| v.scale.as_ref()) else {
        return Err(ApiError::internal(
            "the custom resource has no scale subresource",
        ));
    };
    let int_at = |p: &str| at_path(obj, p).and_then(Value::as_i64).unwrap_or(0);
    let mut meta = serde_json::Map::new();
    for field in [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
    ] {
        if let Some(v) = obj.pointer(&format!("/metadata/{field}")) {
            meta.insert(field.into(), v.clone());
        }
    }
    let mut status = json!({"replicas": int_at(&scale.status_replicas_path)});
    if let Some(sel) = scale
        .label_selector_path
        .as_deref()
        .and_then(|p| at_path(obj, p))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    {
        status["selector"] = sel.into();
    }
    Ok(json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": meta,
        "spec": {"replicas": int_at(&scale.spec_replicas_path)},
        "status": status,
    }))
}

/// Writes `replicas` at the version's `specReplicasPath` (upstream `SetNestedField`).
pub fn set_replicas(
    info: &CrdInfo,
    version: &str,
    obj: &mut Value,
    replicas: i64,
) -> Result<(), ApiError> {
    let Some(scale) = info.version(version).and_then(|v| v.scale.as_ref()) else {
        return Err(ApiError::internal(
            "the custom resource has no scale subresource",
        ));
    };
    let segments: Vec<&str> = scale
        .spec_replicas_path
        .trim_start_matches('.')
        .split('.')
        .collect();
    let mut cur = obj;
    for (i, seg) in segments.iter().enumerate() {
        if !cur.is_object() {
            if cur.is_null() {
                *cur = json!({});
            } else {
                return Err(ApiError::internal(format!(
                    "value cannot be set because {} is not a map[string]interface{{}}",
                    segments[..i].join(".")
                )));
            }
        }
        let map = cur.as_object_mut().expect("checked object");
        if i + 1 == segments.len() {
            map.insert(seg.to_string(), Value::from(replicas));
            return Ok(());
        }
        cur = map.entry(seg.to_string()).or_insert(Value::Null);
    }
    Ok(())
}
