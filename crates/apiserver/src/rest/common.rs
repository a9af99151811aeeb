//! What the per-verb handlers share (so that they need not import each other): the admission
//! attributes and field manager of a request, the response of an update, the `Scale` view,
//! warning headers, and the parsed `DeleteOptions`.

use apimachinery::fieldmanager;
use apimachinery::status::ApiError;
use bytes::Bytes;
use http::{Response, StatusCode};
use serde_json::{json, Value};

use super::Ctx;
use crate::response::Body;
use crate::{admission, objects};

/// Attempts of a write that retries on conflict before giving up on a hot object.
pub(crate) const MAX_RETRIES: usize = 20;

/// The parts of `DeleteOptions` that matter here, from the body or the query.
pub(crate) struct DeleteOptions {
    pub grace_period: Option<i64>,
    pub propagation: Option<String>,
    /// `orphanDependents` as sent (deprecated; wins over `propagationPolicy` when set).
    pub orphan: Option<bool>,
    pub precondition_uid: Option<String>,
    pub precondition_rv: Option<String>,
}

/// `Warning: 299 - "<text>"` headers, as upstream sends for unknown fields with `fieldValidation=Warn`.
pub fn add_warnings(resp: &mut Response<Body>, warnings: &[String]) {
    for w in warnings {
        let text = format!("299 - {}", serde_json::Value::String(w.clone()));
        if let Ok(v) = http::HeaderValue::from_str(&text) {
            resp.headers_mut().append("Warning", v);
        }
    }
}

/// The admission attributes of a write to the object the request names.
pub(crate) fn admission_attributes<'a>(
    ctx: &'a Ctx<'_>,
    sub: Option<&'a str>,
    operation: admission::Operation,
    name: &'a str,
) -> admission::Attributes<'a> {
    admission::Attributes {
        group: &ctx.resource.group,
        version: &ctx.resource.version,
        kind: match sub {
            Some("scale") => "Scale",
            Some("binding") => "Binding",
            Some("eviction") => "Eviction",
            Some("token") => "TokenRequest",
            _ => &ctx.resource.kind,
        },
        resource: &ctx.resource.plural,
        subresource: sub,
        namespace: if ctx.resource.namespaced {
            ctx.namespace()
        } else {
            ""
        },
        name,
        operation,
        dry_run: ctx.dry_run(),
        user: ctx.user,
        outcome: &ctx.outcome,
    }
}

/// The field manager of the request (`fieldManager`, else the user agent's product name).
pub(crate) fn field_manager(ctx: &Ctx<'_>) -> Result<String, ApiError> {
    let user_agent = ctx
        .headers
        .get(http::header::USER_AGENT)
        .and_then(|v| v.to_str().ok());
    fieldmanager::manager_name(ctx.query.get("fieldManager"), user_agent)
}

pub(crate) fn operation<'a>(
    ctx: &'a Ctx<'_>,
    sub: Option<&'a str>,
    manager: &'a str,
    now: &'a str,
) -> fieldmanager::Operation<'a> {
    fieldmanager::Operation {
        group: &ctx.resource.group,
        kind: &ctx.resource.kind,
        api_version: ctx.resource.api_version(),
        manager,
        subresource: sub,
        has_status: ctx.resource.has_subresource("status"),
        now,
    }
}

/// The `Scale` view of an object: a CRD's scale paths for custom resources.
pub fn scale_view(
    crd: Option<&crate::crd::info::CrdInfo>,
    version: &str,
    obj: &Value,
) -> Result<Value, ApiError> {
    match crd {
        Some(info) => crate::crd::handler::scale_of(info, version, obj),
        None => scale_of(obj),
    }
}

pub(crate) async fn respond(
    ctx: &Ctx<'_>,
    sub: Option<&str>,
    json: Bytes,
) -> Result<Response<Body>, ApiError> {
    if sub == Some("scale") {
        let mut obj: Value = serde_json::from_slice(&json).map_err(ApiError::internal)?;
        if let Some(conversion) = ctx.read_conversion() {
            conversion.apply(&mut obj).await?;
        }
        return Ok(crate::response::json_response(
            StatusCode::OK,
            &scale_view(ctx.crd.as_deref(), &ctx.resource.version, &obj)?,
        ));
    }
    ctx.object_response(StatusCode::OK, json).await
}

/// The `autoscaling/v1` `Scale` view of a scalable object.
pub fn scale_of(obj: &Value) -> Result<Value, ApiError> {
    let meta = objects::meta(obj).cloned().unwrap_or_default();
    let mut scale_meta = serde_json::Map::new();
    for field in [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
    ] {
        if let Some(v) = meta.get(field) {
            scale_meta.insert(field.into(), v.clone());
        }
    }
    let selector = match obj.pointer("/spec/selector") {
        // ReplicationController: a plain map.
        Some(Value::Object(m))
            if !m.contains_key("matchLabels") && !m.contains_key("matchExpressions") =>
        {
            let set = m.clone();
            apimachinery::labels::selector_from_set(&set).to_string()
        }
        Some(sel) => apimachinery::labels::selector_from_label_selector(sel)
            .map(|s| s.to_string())
            .unwrap_or_default(),
        None => String::new(),
    };
    Ok(json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": scale_meta,
        "spec": {"replicas": obj.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(0)},
        "status": {
            "replicas": obj.pointer("/status/replicas").and_then(Value::as_i64).unwrap_or(0),
            "selector": selector,
        },
    }))
}
