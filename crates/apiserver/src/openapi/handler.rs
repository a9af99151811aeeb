//! Serving the OpenAPI documents: `/openapi/v3` (the root listing each group version's document with
//! its hash), `/openapi/v3/<group version>` (immutable under its current hash, redirected from an
//! outdated one) and `/openapi/v2`.

use std::sync::Arc;

use apimachinery::resources::Snapshot;
use apimachinery::status::ApiError;
use bytes::Bytes;
use http::{HeaderMap, Response, StatusCode};

use crate::request::Query;
use crate::response::{self, Body};
use crate::server::not_found;
use crate::ApiServer;

pub fn serve(
    api: &Arc<ApiServer>,
    snap: &Snapshot,
    path: &str,
    query: &Query,
    headers: &HeaderMap,
) -> Result<Response<Body>, ApiError> {
    // The CRDs' schemas, for the documents of custom resources.
    let crds = api
        .caches
        .get("customresourcedefinitions")
        .map(|c| c.list("/customresourcedefinitions/", &Default::default()))
        .unwrap_or_default();
    let custom = super::CustomSchemas::from_crds(crds.iter().map(|o| &o.json[..]));
    let doc = match path.trim_end_matches('/') {
        "/openapi/v3" => {
            return Ok(response::json_response(
                StatusCode::OK,
                &super::root(snap, &custom),
            ))
        }
        "/openapi/v2" => {
            let accept = headers
                .get(http::header::ACCEPT)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            // Only JSON is served: a protobuf-only client is told so (upstream also has protobuf).
            if !accept.is_empty() && !accept.contains("json") && !accept.contains("*/*") {
                return Err(ApiError {
                    code: 406,
                    reason: "NotAcceptable",
                    message: format!("only application/json is supported, not {accept}"),
                    details: None,
                });
            }
            super::v2(snap, &custom)
        }
        p => {
            let gv = p.strip_prefix("/openapi/v3/").ok_or_else(not_found)?;
            let doc = super::group_version(snap, &custom, gv).ok_or_else(not_found)?;
            // As upstream: an outdated hash is redirected to the current one.
            if query.get("hash").is_some_and(|h| h != doc.hash) {
                let mut resp = response::bytes_response(
                    StatusCode::MOVED_PERMANENTLY,
                    "text/plain; charset=utf-8",
                    Bytes::new(),
                );
                if let Ok(v) = http::HeaderValue::from_str(&format!("{p}?hash={}", doc.hash)) {
                    resp.headers_mut().insert(http::header::LOCATION, v);
                }
                return Ok(resp);
            }
            doc
        }
    };
    let mut resp = response::bytes_response(StatusCode::OK, response::JSON, doc.body);
    let immutable = query.get("hash") == Some(doc.hash.as_str());
    let cache = if immutable {
        "public, immutable"
    } else {
        "no-cache, private"
    };
    let h = resp.headers_mut();
    h.insert(
        http::header::CACHE_CONTROL,
        http::HeaderValue::from_static(cache),
    );
    if let Ok(v) = http::HeaderValue::from_str(&format!("\"{}\"", doc.hash)) {
        h.insert(http::header::ETAG, v);
    }
    Ok(resp)
}
