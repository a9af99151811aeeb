//! Responses: bodies, JSON encoding, `Status` errors, and content negotiation (upstream
//! `endpoints/handlers/negotiation` and `responsewriters`).

use std::convert::Infallible;

use apimachinery::status::ApiError;
use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Response, StatusCode};
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::body::Frame;
use serde_json::Value;
use tokio_stream::wrappers::ReceiverStream;

pub type Body = BoxBody<Bytes, Infallible>;

pub const JSON: &str = "application/json";

pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed()
}

/// A body fed by a channel, for watches: each item is sent (and flushed) as it comes.
pub fn streaming(rx: tokio::sync::mpsc::Receiver<Bytes>) -> Body {
    use futures::StreamExt;
    let stream = ReceiverStream::new(rx).map(|b| Ok::<_, Infallible>(Frame::data(b)));
    BodyExt::boxed(StreamBody::new(stream))
}

pub fn bytes_response(
    code: StatusCode,
    content_type: &str,
    bytes: impl Into<Bytes>,
) -> Response<Body> {
    let mut resp = Response::new(full(bytes));
    *resp.status_mut() = code;
    if let Ok(v) = HeaderValue::from_str(content_type) {
        resp.headers_mut().insert(header::CONTENT_TYPE, v);
    }
    resp
}

pub fn json_response(code: StatusCode, value: &Value) -> Response<Body> {
    bytes_response(code, JSON, serde_json::to_vec(value).unwrap_or_default())
}

pub fn error_response(err: &ApiError) -> Response<Body> {
    let code = StatusCode::from_u16(err.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut resp = json_response(code, &err.to_status());
    if let Some(secs) = err.details.as_ref().and_then(|d| d.retry_after_seconds) {
        if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
            resp.headers_mut().insert(header::RETRY_AFTER, v);
        }
    }
    resp
}

/// The representation a client asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Representation {
    /// The object itself.
    Object,
    /// A `meta.k8s.io/v1` Table (kubectl get); `include_object` as the `includeObject` parameter.
    Table { include_object: IncludeObject },
    /// `PartialObjectMetadata` / `PartialObjectMetadataList` (metadata-only clients).
    Metadata,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IncludeObject {
    None,
    Metadata,
    Object,
}

/// Chooses the representation from `Accept`. Entries are tried in order; an entry we cannot produce
/// (protobuf, unknown `as=` kinds) is skipped; if none fits, 406.
pub fn negotiate(
    headers: &HeaderMap,
    include_object: Option<&str>,
) -> Result<Representation, ApiError> {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .trim();
    if accept.is_empty() {
        return Ok(Representation::Object);
    }
    for entry in accept.split(',') {
        let mut parts = entry.split(';').map(str::trim);
        let media = parts.next().unwrap_or("");
        let params: Vec<(&str, &str)> = parts
            .filter_map(|p| p.split_once('='))
            .map(|(k, v)| (k.trim(), v.trim()))
            .collect();
        let param = |k: &str| params.iter().find(|(pk, _)| *pk == k).map(|(_, v)| *v);
        if !matches!(
            media,
            "application/json" | "application/*" | "*/*" | "application/yaml"
        ) {
            continue;
        }
        match param("as") {
            None => return Ok(Representation::Object),
            Some("Table")
                if param("g") == Some("meta.k8s.io")
                    && matches!(param("v"), Some("v1" | "v1beta1")) =>
            {
                let include = match include_object {
                    Some("None") => IncludeObject::None,
                    Some("Object") => IncludeObject::Object,
                    _ => IncludeObject::Metadata,
                };
                return Ok(Representation::Table {
                    include_object: include,
                });
            }
            Some("PartialObjectMetadata" | "PartialObjectMetadataList")
                if param("g") == Some("meta.k8s.io")
                    && matches!(param("v"), Some("v1" | "v1beta1")) =>
            {
                return Ok(Representation::Metadata)
            }
            Some(_) => continue,
        }
    }
    Err(ApiError::not_acceptable(format!(
        "only the following media types are accepted: application/json, application/json;as=Table;v=v1;g=meta.k8s.io (asked for {accept:?})"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_accept(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::ACCEPT, v.parse().unwrap());
        h
    }

    #[test]
    fn kubectl_get_asks_for_a_table() {
        let h = with_accept("application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json");
        assert_eq!(
            negotiate(&h, None).unwrap(),
            Representation::Table {
                include_object: IncludeObject::Metadata
            }
        );
        let h = with_accept("application/vnd.kubernetes.protobuf, application/json");
        assert_eq!(negotiate(&h, None).unwrap(), Representation::Object);
        let h = with_accept("application/vnd.kubernetes.protobuf");
        assert_eq!(negotiate(&h, None).unwrap_err().code, 406);
        assert_eq!(
            negotiate(&HeaderMap::new(), None).unwrap(),
            Representation::Object
        );
    }
}
