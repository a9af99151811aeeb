//! The request path's pure steps, for the fuzz targets (`crates/fuzzing`, `fuzz/`): each function runs
//! what a handler runs on a request's bytes, in the handler's order, without storage. Not used by the
//! server itself; kept beside the code it calls so that the private steps stay private.

use apimachinery::fieldmanager;
use apimachinery::resources::{Registry, Resource};
use apimachinery::status::ApiError;
use bytes::Bytes;
use http::HeaderMap;
use serde_json::Value;
use std::sync::{Arc, OnceLock};

use super::{decode, typed};

/// Built-in kinds the targets write to: (group, version, plural).
pub const RESOURCES: &[(&str, &str, &str)] = &[
    ("", "v1", "pods"),
    ("", "v1", "configmaps"),
    ("", "v1", "services"),
    ("", "v1", "nodes"),
    ("apps", "v1", "deployments"),
    ("batch", "v1", "jobs"),
    ("rbac.authorization.k8s.io", "v1", "roles"),
    ("networking.k8s.io", "v1", "networkpolicies"),
];

fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(Registry::with_builtin)
}

/// The resource `RESOURCES[i % len]`.
pub fn resource(i: usize) -> Arc<Resource> {
    let (g, v, p) = RESOURCES[i % RESOURCES.len()];
    registry()
        .get(g, v, p)
        .expect("a built-in resource of RESOURCES")
}

fn headers(content_type: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    if let Ok(v) = content_type.parse() {
        h.insert(http::header::CONTENT_TYPE, v);
    }
    h
}

/// A create or update body (`rest/write.rs` create and update): decoded by its content type, its
/// type checked against the resource, its fields checked as `fieldValidation` asks.
pub fn create_body(
    resource: &Resource,
    content_type: &str,
    field_validation: Option<&str>,
    body: &[u8],
) -> Result<(Value, Vec<String>), ApiError> {
    let body = Bytes::copy_from_slice(body);
    let (mut obj, strict) =
        decode::parse_request(&headers(content_type), &body, field_validation, true)?;
    let (api_version, kind) = (resource.api_version(), resource.kind.clone());
    decode::check_type(resource, &api_version, &kind, &mut obj)?;
    let warnings = typed::check_fields(
        &resource.group,
        &resource.version,
        &kind,
        &mut obj,
        field_validation,
        &strict,
    )?;
    Ok((obj, warnings))
}

/// A JSON, merge or strategic merge PATCH of `live` (`rest/write.rs` `patch`, its apply closure).
pub fn patch(
    resource: &Resource,
    patch_type: &str,
    field_validation: Option<&str>,
    live: &Value,
    body: &[u8],
) -> Result<(Value, Vec<String>), ApiError> {
    if body.len() > decode::MAX_BODY {
        return Err(ApiError::request_entity_too_large(
            "the patch is over 3 MiB",
        ));
    }
    let patch: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
    let strict = decode::patch_strict(patch_type, body, field_validation);
    let result = match patch_type {
        "application/json-patch+json" => apimachinery::patch::apply_json_patch(live, &patch),
        "application/merge-patch+json" => apimachinery::patch::apply_merge_patch(live, &patch),
        "application/strategic-merge-patch+json" => {
            let schema = apimachinery::patch::builtin_schema_for(&resource.group, &resource.kind);
            apimachinery::patch::apply_strategic_merge_patch(live, &patch, schema)
        }
        other => return Err(ApiError::unsupported_media_type(other)),
    };
    let mut patched = result.map_err(|e| e.to_api_error())?;
    let warnings = typed::check_fields(
        &resource.group,
        &resource.version,
        &resource.kind,
        &mut patched,
        field_validation,
        &strict,
    )?;
    Ok((patched, warnings))
}

/// A server-side apply (`rest/write.rs` `server_side_apply`) of the YAML `body` to `live` (`None`:
/// the object does not exist yet), by manager `kubectl`.
pub fn apply(
    resource: &Resource,
    field_validation: Option<&str>,
    force: bool,
    live: Option<&Value>,
    body: &[u8],
) -> Result<Value, ApiError> {
    let mut config: Value = serde_yaml_ng::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
    if !config.is_object() {
        return Err(ApiError::bad_request(
            "the apply configuration must be an object",
        ));
    }
    decode::check_type(
        resource,
        &resource.api_version(),
        &resource.kind,
        &mut config,
    )?;
    decode::apply_duplicates(body, field_validation)?;
    typed::check_fields(
        &resource.group,
        &resource.version,
        &resource.kind,
        &mut config,
        field_validation,
        &decode::Strict::default(),
    )?;
    let op = fieldmanager::Operation {
        group: &resource.group,
        kind: &resource.kind,
        api_version: resource.api_version(),
        manager: "kubectl",
        subresource: None,
        has_status: true,
        now: "2026-11-29T00:00:00Z",
    };
    fieldmanager::apply(&op, live, &config, force)
}

/// An update that carries its own `managedFields` (`rest/update.rs`: `fieldmanager::on_update`).
pub fn update_managed_fields(
    resource: &Resource,
    old: &Value,
    new: &mut Value,
) -> Result<(), ApiError> {
    let op = fieldmanager::Operation {
        group: &resource.group,
        kind: &resource.kind,
        api_version: resource.api_version(),
        manager: "kubectl",
        subresource: None,
        has_status: true,
        now: "2026-11-29T00:00:00Z",
    };
    fieldmanager::on_update(&op, old, new)
}

/// A request's method, path and query as the router reads them (`request::parse`), with the list
/// options a handler parses from the query (`continue`, `resourceVersion`, selectors).
pub fn route(method: &str, path: &str, query: &str) {
    let Ok(method) = http::Method::from_bytes(method.as_bytes()) else {
        return;
    };
    let q = crate::request::Query::parse(Some(query));
    let _ = crate::request::parse(&method, path, &q);
    let _ = crate::request::query_pairs(Some(query));
    if let Some(token) = q.get("continue") {
        let _ = super::list::decode_continue(token);
    }
    if let Some(rv) = q.get("resourceVersion") {
        let _ = crate::objects::parse_resource_version(rv);
    }
    if let Some(s) = q.get("labelSelector") {
        let _ = apimachinery::labels::parse(s);
    }
    if let Some(s) = q.get("fieldSelector") {
        let _ = apimachinery::fields::parse(s);
    }
}
