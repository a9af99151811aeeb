//! The custom resource parts of the generic REST handlers (upstream `customresource_handler.go`'s
//! schema-coercing decoder, `unstructuredDefaulter`, the customresource strategy and validator, the
//! `None` converter and the scale subresource): called by `rest::write`, `rest::read` and the read
//! conversion when the resource comes from a CRD.

use apimachinery::schema::{defaults, listtype, objectmeta, prune, validate};
use apimachinery::status::ApiError;
use apimachinery::validation::field::{FieldError, FieldPath};
use serde_json::{json, Value};

use super::info::CrdInfo;
use crate::rest::decode::{finish, Strict};
use crate::rest::strict::MAX_ERRORS;

/// Decodes a request body as upstream's schema-coercing decoder does: `metadata` through ObjectMeta,
/// unknown fields pruned (reported per `fieldValidation`: Strict is a 400, or a 422 for a patch;
/// Warn returns warnings), non-nullable nulls without default dropped, embedded resources'
/// metadata coerced. The strict errors come in upstream's order: the body's repeated keys (in
/// document order), unknown metadata fields, pruned fields, unknown metadata fields of embedded
/// resources (each group sorted).
pub fn check_fields(
    info: &CrdInfo,
    version: &str,
    obj: &mut Value,
    field_validation: Option<&str>,
    strict: &Strict,
) -> Result<Vec<String>, ApiError> {
    let mode = field_validation.unwrap_or("Warn");
    if !matches!(mode, "Strict" | "Warn" | "Ignore") {
        return Err(ApiError::bad_request(format!(
            "fieldValidation: Unsupported value: {mode:?}: supported values: \"Ignore\", \"Strict\", \"Warn\""
        )));
    }
    let cannot = |e: &dyn std::fmt::Display| {
        ApiError::bad_request(format!(
            "{kind} in version {version:?} cannot be handled as a {kind}: {e}",
            kind = info.kind
        ))
    };
    // A failed Strict patch shows the patched object as it was before pruning.
    let patched = (strict.patch.is_some() && mode == "Strict").then(|| obj.clone());
    let mut errors: Vec<String> = strict
        .dups
        .iter()
        .take(MAX_ERRORS)
        .map(|d| format!("duplicate field {:?}", d.path))
        .collect();
    let unknown = unknown_fields(info, version, obj).map_err(|e| cannot(&e))?;
    errors.extend(unknown.iter().map(|p| format!("unknown field {p:?}")));
    finish(
        errors,
        field_validation,
        strict,
        &info.kind,
        version,
        patched.as_ref().unwrap_or(obj),
    )
}

/// Coerces `obj` as the schema-coercing decoder does and returns the unknown fields' paths in
/// upstream's order (metadata, pruned, embedded metadata; each sorted as upstream sorts them).
fn unknown_fields(info: &CrdInfo, version: &str, obj: &mut Value) -> Result<Vec<String>, String> {
    let mut unknown = Vec::new();
    if let Some(meta) = obj.get_mut("metadata").filter(|m| !m.is_null()) {
        let (coerced, extra) = objectmeta::coerce_meta(meta)?;
        unknown.extend(extra.into_iter().map(|f| format!("metadata.{f}")));
        *meta = coerced;
    }
    let schema = info.schema(version);
    let mut pruned = prune::prune(obj, schema);
    pruned.sort();
    unknown.extend(pruned);
    prune::prune_nulls(obj, schema);
    let mut embedded = objectmeta::coerce_embedded(obj, schema).map_err(|e| e.to_string())?;
    embedded.sort();
    unknown.extend(embedded);
    Ok(unknown)
}

/// Server-side apply of a custom resource: fields its schema does not declare fail the apply as
/// upstream's structured-merge type conversion fails it, whatever `fieldValidation` says (500,
/// `failed to create typed patch object (<ns>/<name>; <group>/<version>, Kind=<kind>): .spec.foo:
/// field not declared in schema`).
pub fn check_apply(
    info: &CrdInfo,
    version: &str,
    config: &Value,
    namespace: &str,
    name: &str,
) -> Result<(), ApiError> {
    let mut copy = config.clone();
    let Ok(unknown) = unknown_fields(info, version, &mut copy) else {
        // Wrongly typed metadata: left to the decoding that follows.
        return Ok(());
    };
    if unknown.is_empty() {
        return Ok(());
    }
    let schema = info.schema(version);
    let errors: Vec<String> = unknown
        .iter()
        .map(|p| {
            format!(
                "{}: field not declared in schema",
                smd_path(config, schema, p)
            )
        })
        .collect();
    let detail = match errors.as_slice() {
        [one] => one.clone(),
        many => format!("errors:\n  {}", many.join("\n  ")),
    };
    Err(ApiError {
        code: 500,
        reason: "",
        message: format!(
            "failed to create typed patch object ({namespace}/{name}; {}/{version}, Kind={}): {detail}",
            info.group, info.kind
        ),
        details: None,
    })
}

/// A field path (`spec.ports[0].foo`) as structured-merge-diff prints it: a leading dot, and list
/// items of `x-kubernetes-list-type: map` lists named by their keys (`.spec.ports[containerPort=80,protocol="TCP"].foo`).
fn smd_path(obj: &Value, schema: Option<&apimachinery::schema::Schema>, path: &str) -> String {
    let mut out = String::new();
    let mut cur = Some(obj);
    let mut s = schema;
    let mut rest = path;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('[') {
            let Some(end) = after.find(']') else { break };
            let index: usize = after[..end].parse().unwrap_or(0);
            let item = cur.and_then(|c| c.get(index));
            match (s.filter(|s| s.list_type.as_deref() == Some("map")), item) {
                (Some(list), Some(item)) if !list.list_map_keys.is_empty() => {
                    let keys: Vec<String> = list
                        .list_map_keys
                        .iter()
                        .map(|k| format!("{k}={}", item.get(k).unwrap_or(&Value::Null)))
                        .collect();
                    out.push_str(&format!("[{}]", keys.join(",")));
                }
                _ => out.push_str(&format!("[{index}]")),
            }
            cur = item;
            s = s.and_then(|s| s.items.as_deref());
            rest = &after[end + 1..];
        } else {
            let seg = rest.strip_prefix('.').unwrap_or(rest);
            let end = seg.find(['.', '[']).unwrap_or(seg.len());
            let key = &seg[..end];
            out.push('.');
            out.push_str(key);
            cur = cur.and_then(|c| c.get(key));
            s = s.and_then(|s| s.field(key).flatten());
            rest = &seg[end..];
        }
    }
    out
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
    if let (Some(s), Some(rules)) = (schema, v.and_then(|v| v.rules.as_deref())) {
        errs.extend(validation_rules(rules, s, new, old, &errs));
    }
    errs
}

/// The CEL rules' errors, unless earlier errors make the object too broken to evaluate them
/// (upstream `hasBlockingErr`: then one error says so instead).
fn validation_rules(
    rules: &super::validation_rules::RuleTree,
    schema: &apimachinery::schema::Schema,
    new: &Value,
    old: Option<&Value>,
    earlier: &[FieldError],
) -> Vec<FieldError> {
    use apimachinery::validation::ErrorType;
    let blocking = earlier.iter().any(|e| {
        matches!(
            e.kind,
            ErrorType::NotSupported
                | ErrorType::Required
                | ErrorType::TooLong
                | ErrorType::TooMany
                | ErrorType::TypeInvalid
        )
    });
    if blocking {
        return vec![FieldError::with_value_text(
            ErrorType::Invalid,
            &FieldPath::root("<nil>"),
            "\"null\"",
            "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
        )];
    }
    super::validation_eval::validate(rules, schema, new, old)
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

/// Stored objects as served in `version`: the stored version's defaults applied (upstream defaults
/// on read from storage), then those in another version converted (the webhook's, or `None`'s
/// `apiVersion` rewrite) and pruned to the served version's schema, as upstream's
/// schema-coercing converter does after any conversion.
pub async fn to_served(
    api: &crate::ApiServer,
    info: &CrdInfo,
    version: &str,
    objs: &mut [Value],
) -> Result<(), ApiError> {
    let prefix = format!("{}/", info.group);
    for obj in objs.iter_mut() {
        let stored = obj
            .get("apiVersion")
            .and_then(Value::as_str)
            .and_then(|av| av.strip_prefix(&prefix))
            .map(str::to_string);
        if let Some(stored) = stored {
            defaults::apply(obj, info.schema(&stored));
        }
    }
    convert(api, info, version, objs).await
}

/// A served object in the storage version, pruned to its schema.
pub async fn to_stored(
    api: &crate::ApiServer,
    info: &CrdInfo,
    obj: &mut Value,
) -> Result<(), ApiError> {
    convert(api, info, &info.storage_version, std::slice::from_mut(obj)).await
}

/// Converts the objects not in `version` and prunes them to its schema.
async fn convert(
    api: &crate::ApiServer,
    info: &CrdInfo,
    version: &str,
    objs: &mut [Value],
) -> Result<(), ApiError> {
    let target = info.api_version(version);
    let moved: Vec<usize> = (0..objs.len())
        .filter(|&i| objs[i].get("apiVersion").and_then(Value::as_str) != Some(target.as_str()))
        .collect();
    if moved.is_empty() {
        return Ok(());
    }
    match &info.webhook {
        Some(hook) => {
            super::conversion::convert(api, &api.crds.conversion, hook, objs, &target).await?
        }
        None => {
            for &i in &moved {
                objs[i]["apiVersion"] = Value::String(target.clone());
            }
        }
    }
    for &i in &moved {
        prune::prune(&mut objs[i], info.schema(version));
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> CrdInfo {
        CrdInfo::parse(&json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "noxus.example.com"},
            "spec": {"group": "example.com", "scope": "Cluster",
                "names": {"plural": "noxus", "singular": "noxu", "kind": "Noxu", "listKind": "NoxuList"},
                "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                        "properties": {
                            "template": {"type": "object", "x-kubernetes-embedded-resource": true,
                                "properties": {"metadata": {"type": "object", "properties": {"name": {"type": "string"}}},
                                    "spec": {"type": "object"}}},
                            "foo": {"type": "string"},
                            "ports": {"type": "array", "x-kubernetes-list-type": "map",
                                "x-kubernetes-list-map-keys": ["containerPort", "protocol"],
                                "items": {"type": "object", "required": ["containerPort", "protocol"],
                                    "properties": {"containerPort": {"type": "integer"}, "protocol": {"type": "string"}}}}}},
                        "status": {"type": "object", "properties": {"a": {"type": "string"}}}}}}}]}
        }))
        .expect("crd")
    }

    #[test]
    fn custom_resources_report_duplicates_then_unknown_fields() {
        let info = info();
        let body = br#"{"apiVersion": "example.com/v1", "kind": "Noxu",
            "metadata": {"name": "a", "zzz": 1, "unknownMeta": "x"},
            "spec": {"foo": "1", "foo": "2", "kept": true,
                "template": {"apiVersion": "v1", "kind": "Sub", "metadata": {"name": "s", "unknownSubMeta": "u"}, "bar": 1},
                "ports": [{"containerPort": 80, "protocol": "TCP", "extra": 1}]},
            "status": {"b": 1}, "unknownField": 2}"#;
        let (mut obj, dups) = crate::rest::strict::parse_json(body, false).unwrap();
        let strict = Strict {
            dups,
            ..Strict::default()
        };
        let err = check_fields(&info, "v1", &mut obj.clone(), Some("Strict"), &strict).unwrap_err();
        assert_eq!(
            err.message,
            r#"Noxu in version "v1" cannot be handled as a Noxu: strict decoding error: duplicate field "spec.foo", unknown field "metadata.unknownMeta", unknown field "metadata.zzz", unknown field "spec.ports[0].extra", unknown field "spec.template.bar", unknown field "status.b", unknown field "unknownField", unknown field "spec.template.metadata.unknownSubMeta""#
        );
        let warnings = check_fields(&info, "v1", &mut obj, None, &strict).unwrap();
        assert_eq!(warnings.len(), 8);
        // Preserved unknown fields stay; the last value wins.
        assert_eq!(obj["spec"]["kept"], true);
        assert_eq!(obj["spec"]["foo"], "2");
        assert!(obj.get("unknownField").is_none());
        assert!(obj["spec"]["template"]["metadata"]
            .get("unknownSubMeta")
            .is_none());
    }

    #[test]
    fn server_side_apply_fails_on_undeclared_fields() {
        let info = info();
        let config = json!({"apiVersion": "example.com/v1", "kind": "Noxu", "metadata": {"name": "a", "unknownMeta": 1},
            "spec": {"ports": [{"containerPort": 80, "protocol": "TCP", "extra": 1}]}});
        let err = check_apply(&info, "v1", &config, "", "a").unwrap_err();
        assert_eq!(err.code, 500);
        assert_eq!(
            err.message,
            "failed to create typed patch object (/a; example.com/v1, Kind=Noxu): errors:\n  .metadata.unknownMeta: field not declared in schema\n  .spec.ports[containerPort=80,protocol=\"TCP\"].extra: field not declared in schema"
        );
        let ok = json!({"apiVersion": "example.com/v1", "kind": "Noxu", "metadata": {"name": "a"}, "spec": {"anything": 1}});
        check_apply(&info, "v1", &ok, "", "a").unwrap();
    }
}
