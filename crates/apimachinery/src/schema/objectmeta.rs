//! Metadata of custom resources (upstream `schema/objectmeta`): the root's `metadata` and that of
//! every embedded resource (`x-kubernetes-embedded-resource`) pass through the typed `ObjectMeta`, so
//! unknown metadata fields are dropped (and reported) and wrongly typed ones are errors; embedded
//! resources must have `apiVersion` and `kind` and valid metadata.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::{go_sharp_v, Schema};
use crate::validation::field::{FieldError, FieldPath};
use crate::validation::meta::{validate_object_meta, NameRule};
use crate::validation::names;

/// `metadata` decoded into `ObjectMeta` and back: the coerced value and the paths of unknown fields
/// (relative to `metadata`, e.g. `foo`, `labels.x` never: labels are a map).
pub fn coerce_meta(meta: &Value) -> Result<(Value, Vec<String>), String> {
    let typed = ObjectMeta::deserialize(meta).map_err(|e| e.to_string())?;
    let value = serde_json::to_value(&typed).map_err(|e| e.to_string())?;
    let mut unknown = Vec::new();
    diff(meta, &value, "", &mut unknown);
    Ok((value, unknown))
}

fn diff(input: &Value, typed: &Value, path: &str, out: &mut Vec<String>) {
    match (input, typed) {
        (Value::Object(a), Value::Object(b)) => {
            // Sorted, as upstream finds them: it decodes metadata re-encoded from a Go map.
            let mut keys: Vec<&String> = a.keys().collect();
            keys.sort();
            for k in keys {
                let v = &a[k.as_str()];
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                match b.get(k.as_str()) {
                    Some(tv) => diff(v, tv, &p, out),
                    None if !v.is_null() => out.push(p),
                    None => {}
                }
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            for (i, (v, tv)) in a.iter().zip(b).enumerate() {
                diff(v, tv, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// Coerces the metadata of embedded resources below the root (the root's own metadata is the API
/// server's business): returns the unknown fields' paths (`spec.template.metadata.foo`).
pub fn coerce_embedded(
    obj: &mut Value,
    schema: Option<&Schema>,
) -> Result<Vec<String>, Box<FieldError>> {
    let mut unknown = Vec::new();
    if let (Some(s), Value::Object(map)) = (schema, obj) {
        for (k, v) in map.iter_mut() {
            if matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                continue;
            }
            if let Some(Some(sub)) = s.field(k) {
                coerce(v, sub, &FieldPath::root(k), &mut unknown)?;
            }
        }
    }
    Ok(unknown)
}

fn coerce(
    x: &mut Value,
    s: &Schema,
    path: &FieldPath,
    unknown: &mut Vec<String>,
) -> Result<(), Box<FieldError>> {
    match x {
        Value::Object(map) => {
            if s.embedded_resource {
                for k in ["apiVersion", "kind"] {
                    if let Some(v) = map.get(k) {
                        if !v.is_string() {
                            return Err(Box::new(invalid(&path.child(k), v, "must be a string")));
                        }
                    }
                }
                if let Some(meta) = map.get_mut("metadata") {
                    let (coerced, extra) = coerce_meta(meta)
                        .map_err(|e| Box::new(invalid(&path.child("metadata"), meta, &e)))?;
                    for f in extra {
                        unknown.push(format!("{path}.metadata.{f}"));
                    }
                    *meta = coerced;
                }
            }
            for (k, v) in map.iter_mut() {
                if s.embedded_resource && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                if let Some(prop) = s.properties.get(k) {
                    coerce(v, prop, &path.child(k), unknown)?;
                } else if let Some(extra) = s.additional_schema() {
                    coerce(v, extra, &path.key(k), unknown)?;
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = &s.items {
                for (i, v) in items.iter_mut().enumerate() {
                    coerce(v, item_schema, &path.index(i), unknown)?;
                }
            }
        }
        _ => {}
    }
    Ok(())
}

fn invalid(path: &FieldPath, v: &Value, detail: &str) -> FieldError {
    let mut e = FieldError::invalid(path, v.clone(), detail);
    if v.is_object() || v.is_array() {
        e.value_text = Some(go_sharp_v(v));
    }
    e
}

/// Validates the embedded resources below the root: `apiVersion` and `kind` present and well formed,
/// metadata as upstream's `ValidateObjectMeta` with path-segment names.
pub fn validate_embedded(obj: &Value, schema: Option<&Schema>) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let (Some(s), Value::Object(map)) = (schema, obj) {
        for (k, v) in map {
            if let Some(prop) = s.properties.get(k) {
                validate(v, prop, &FieldPath::root(k), &mut errs);
            } else if let Some(extra) = s.additional_schema() {
                validate(v, extra, &FieldPath::root(&format!("[{k}]")), &mut errs);
            }
        }
    }
    errs
}

fn validate(x: &Value, s: &Schema, path: &FieldPath, errs: &mut Vec<FieldError>) {
    match x {
        Value::Object(map) => {
            if s.embedded_resource {
                errs.extend(validate_resource(path, map));
            }
            for (k, v) in map {
                if let Some(prop) = s.properties.get(k) {
                    validate(v, prop, &path.child(k), errs);
                } else if let Some(extra) = s.additional_schema() {
                    validate(v, extra, &path.key(k), errs);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = &s.items {
                for (i, v) in items.iter().enumerate() {
                    validate(v, item_schema, &path.index(i), errs);
                }
            }
        }
        _ => {}
    }
}

fn validate_resource(path: &FieldPath, x: &Map<String, Value>) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for k in ["apiVersion", "kind"] {
        if !x.contains_key(k) {
            errs.push(FieldError::required(&path.child(k), ""));
        }
    }
    if let Some(v) = x.get("apiVersion") {
        match v.as_str() {
            None => errs.push(invalid(&path.child("apiVersion"), v, "must be a string")),
            Some("") => errs.push(FieldError::required(&path.child("apiVersion"), "")),
            Some(av) => {
                if let Some(e) = group_version_error(av) {
                    errs.push(FieldError::invalid(&path.child("apiVersion"), av, e));
                }
            }
        }
    }
    if let Some(v) = x.get("kind") {
        match v.as_str() {
            None => errs.push(invalid(&path.child("kind"), v, "must be a string")),
            Some("") => errs.push(FieldError::required(&path.child("kind"), "")),
            Some(kind) => {
                if let Some(msg) = names::kind_name_error(kind) {
                    errs.push(FieldError::invalid(&path.child("kind"), kind, msg));
                }
            }
        }
    }
    if let Some(meta) = x.get("metadata") {
        match ObjectMeta::deserialize(meta) {
            Err(e) => errs.push(invalid(&path.child("metadata"), meta, &e.to_string())),
            Ok(_) => {
                let mut m = meta.as_object().cloned().unwrap_or_default();
                if m.get("name")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .is_empty()
                {
                    m.insert("name".into(), "fakename".into());
                }
                let wrapped = serde_json::json!({ "metadata": m });
                for mut e in validate_object_meta(&wrapped, NameRule::PathSegment, false) {
                    e.field = FieldPath::root(&format!("{path}.{}", e.field));
                    errs.push(e);
                }
            }
        }
    }
    errs
}

/// Upstream `schema.ParseGroupVersion`'s error for a malformed apiVersion.
fn group_version_error(av: &str) -> Option<String> {
    (av.matches('/').count() > 1).then(|| format!("unexpected GroupVersion string: {av}"))
}
