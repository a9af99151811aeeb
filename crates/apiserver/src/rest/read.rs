//! GET of one object and of its read-only views (`status`, `scale`).

use apimachinery::status::ApiError;
use http::{Response, StatusCode};

use super::Ctx;
use crate::objects;
use crate::response::{self, Body};

/// `GET .../<name>`: a quorum read from the store by default; from the watch cache when the client
/// accepts any version (`resourceVersion` set) and the resource is cached, as upstream.
pub async fn get(ctx: &Ctx<'_>) -> Result<Response<Body>, ApiError> {
    let rv = ctx.query.value("resourceVersion");
    // A resource without a cache (Events) is read from the store whatever the client accepts.
    if rv.is_some() && ctx.cache().keeps_objects() {
        objects::parse_resource_version(rv.unwrap_or("")).map_err(ApiError::bad_request)?;
        let key = ctx.key(ctx.namespace(), ctx.name());
        return match ctx.cache().get(&key) {
            Some(obj) => ctx.object_response(StatusCode::OK, obj.json.clone()).await,
            None => Err(ApiError::not_found(&ctx.qualified(), ctx.name())),
        };
    }
    let json = ctx.current_json(ctx.namespace(), ctx.name()).await?;
    ctx.object_response(StatusCode::OK, json).await
}

pub async fn get_subresource(ctx: &Ctx<'_>, sub: &str) -> Result<Response<Body>, ApiError> {
    let (mut obj, _) = ctx.current(ctx.namespace(), ctx.name()).await?;
    match sub {
        "scale" => {
            if let Some(conversion) = ctx.read_conversion() {
                conversion.apply(&mut obj).await?;
            }
            let scale = super::common::scale_view(ctx.crd.as_deref(), &ctx.resource.version, &obj)?;
            Ok(response::json_response(StatusCode::OK, &scale))
        }
        "status" | "approval" | "ephemeralcontainers" | "resize" => {
            let json = serde_json::to_vec(&obj).map_err(ApiError::internal)?;
            ctx.object_response(StatusCode::OK, json.into()).await
        }
        other => Err(ApiError::method_not_supported(
            &ctx.qualified(),
            &format!("get {other}"),
        )),
    }
}
