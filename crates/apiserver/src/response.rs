//! Responses: bodies, JSON encoding, `Status` errors, and content negotiation (upstream
//! `endpoints/handlers/negotiation` and `responsewriters`).

use std::convert::Infallible;

use apimachinery::serializer::{cbor, protobuf};
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

/// `resp` with `guard` kept alive until its body is sent or dropped (a flow-control seat, a watch
/// slot, an audit record). The body's length and end are still seen by hyper (`Content-Length`
/// instead of chunking) and by the layers around (the audit log keeps bodies of known length);
/// `map_frame` would hide them.
pub fn hold<G: Send + Sync + Unpin + 'static>(resp: Response<Body>, guard: G) -> Response<Body> {
    resp.map(|inner| {
        BodyExt::boxed(Held {
            inner,
            _guard: guard,
        })
    })
}

struct Held<G> {
    inner: Body,
    _guard: G,
}

impl<G: Send + Sync + Unpin + 'static> hyper::body::Body for Held<G> {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        std::pin::Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
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

/// A JSON body ending in a newline, as upstream's serializer writes it (Go's `json.Encoder`), so
/// clients comparing error bodies byte for byte see the same bytes.
pub fn json_response(code: StatusCode, value: &Value) -> Response<Body> {
    let mut body = serde_json::to_vec(value).unwrap_or_default();
    body.push(b'\n');
    bytes_response(code, JSON, body)
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

/// The wire format of a response body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Json,
    Protobuf,
    Cbor,
}

impl Format {
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Json => JSON,
            Format::Protobuf => protobuf::MEDIA_TYPE,
            Format::Cbor => cbor::MEDIA_TYPE,
        }
    }

    /// The content type of a watch stream (upstream marks every format but JSON with `stream=watch`).
    pub fn stream_content_type(self) -> &'static str {
        match self {
            Format::Json => JSON,
            Format::Protobuf => protobuf::STREAM_MEDIA_TYPE,
            Format::Cbor => cbor::STREAM_MEDIA_TYPE,
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }
}

/// What the client asked for: a representation in a format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Negotiated {
    pub repr: Representation,
    pub format: Format,
}

/// One entry of an `Accept` header.
struct MediaRange<'a> {
    media: &'a str,
    params: Vec<(&'a str, &'a str)>,
    quality: f32,
}

impl MediaRange<'_> {
    fn param(&self, key: &str) -> Option<&str> {
        self.params.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }
}

/// Parses `Accept` into its media ranges, best first: by quality, then in the order given (as upstream's
/// goautoneg); entries with `q=0` are refused ones and dropped.
fn media_ranges(accept: &str) -> Vec<MediaRange<'_>> {
    let mut ranges: Vec<MediaRange> = accept
        .split(',')
        .filter_map(|entry| {
            let mut parts = entry.split(';').map(str::trim);
            let media = parts.next().filter(|m| !m.is_empty())?;
            let mut quality = 1.0f32;
            let mut params = Vec::new();
            for (k, v) in parts.filter_map(|p| p.split_once('=')) {
                let (k, v) = (k.trim(), v.trim());
                if k == "q" {
                    quality = v.parse().unwrap_or(0.0);
                } else {
                    params.push((k, v));
                }
            }
            (quality > 0.0).then_some(MediaRange {
                media,
                params,
                quality,
            })
        })
        .collect();
    ranges.sort_by(|a, b| b.quality.total_cmp(&a.quality));
    ranges
}

/// Chooses the representation and format from `Accept` (upstream `NegotiateOutputMediaType`). Entries
/// are tried best first; one we cannot produce (protobuf for a custom resource, a Table in protobuf, an
/// unknown `as=` kind) is skipped; if none fits, 406.
pub fn negotiate(
    headers: &HeaderMap,
    include_object: Option<&str>,
    protobuf_ok: bool,
) -> Result<Negotiated, ApiError> {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .trim();
    if accept.is_empty() {
        return Ok(Negotiated {
            repr: Representation::Object,
            format: Format::Json,
        });
    }
    for range in media_ranges(accept) {
        let format = match range.media {
            "application/json" | "application/*" | "*/*" | "application/yaml" => Format::Json,
            protobuf::MEDIA_TYPE if protobuf_ok => Format::Protobuf,
            cbor::MEDIA_TYPE => Format::Cbor,
            _ => continue,
        };
        let meta_group = range.param("g") == Some("meta.k8s.io")
            && matches!(range.param("v"), Some("v1" | "v1beta1"));
        let repr = match range.param("as") {
            None => Representation::Object,
            // Tables have no protobuf form upstream.
            Some("Table") if meta_group && format != Format::Protobuf => {
                let include = match include_object {
                    Some("None") => IncludeObject::None,
                    Some("Object") => IncludeObject::Object,
                    _ => IncludeObject::Metadata,
                };
                Representation::Table {
                    include_object: include,
                }
            }
            Some("PartialObjectMetadata" | "PartialObjectMetadataList") if meta_group => {
                Representation::Metadata
            }
            Some(_) => continue,
        };
        return Ok(Negotiated { repr, format });
    }
    let mut supported = vec![JSON, "application/yaml"];
    if protobuf_ok {
        supported.push(protobuf::MEDIA_TYPE);
    }
    supported.push(cbor::MEDIA_TYPE);
    Err(ApiError::not_acceptable(format!(
        "only the following media types are accepted: {}",
        supported.join(", ")
    )))
}

/// Re-encodes a JSON body in `format`; a body whose kind has no form in that format stays JSON.
pub fn transcode(format: Format, json: &[u8]) -> Option<(Vec<u8>, &'static str)> {
    let value: Value = serde_json::from_slice(json).ok()?;
    match format {
        Format::Json => None,
        Format::Protobuf => protobuf::encode(&value)
            .ok()
            .map(|b| (b, protobuf::MEDIA_TYPE)),
        Format::Cbor => Some((cbor::encode(&value), cbor::MEDIA_TYPE)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_accept(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::ACCEPT, v.parse().unwrap());
        h
    }

    #[tokio::test]
    async fn a_held_body_keeps_its_length_and_frees_the_guard_when_dropped() {
        use hyper::body::Body as _;
        let guard = std::sync::Arc::new(());
        let resp = hold(
            bytes_response(StatusCode::OK, JSON, Bytes::from_static(b"{}\n")),
            guard.clone(),
        );
        // Hyper sends a Content-Length, and the audit log keeps the body, only when it is exact.
        assert_eq!(resp.body().size_hint().exact(), Some(3));
        assert!(!resp.body().is_end_stream());
        assert_eq!(std::sync::Arc::strong_count(&guard), 2);
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], b"{}\n");
        assert_eq!(std::sync::Arc::strong_count(&guard), 1);
    }

    #[test]
    fn kubectl_get_asks_for_a_table() {
        let h = with_accept("application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json");
        assert_eq!(
            negotiate(&h, None, true).unwrap().repr,
            Representation::Table {
                include_object: IncludeObject::Metadata
            }
        );
        assert_eq!(
            negotiate(&HeaderMap::new(), None, true).unwrap(),
            Negotiated {
                repr: Representation::Object,
                format: Format::Json
            }
        );
    }

    #[test]
    fn protobuf_is_chosen_where_the_kind_has_it() {
        let h = with_accept("application/vnd.kubernetes.protobuf, application/json");
        assert_eq!(negotiate(&h, None, true).unwrap().format, Format::Protobuf);
        // A custom resource answers JSON to the same request, and 406 to protobuf alone.
        assert_eq!(negotiate(&h, None, false).unwrap().format, Format::Json);
        let h = with_accept("application/vnd.kubernetes.protobuf");
        assert_eq!(negotiate(&h, None, false).unwrap_err().code, 406);
        // Quality values order the entries.
        let h = with_accept("application/json;q=0.5, application/vnd.kubernetes.protobuf;q=0.9");
        assert_eq!(negotiate(&h, None, true).unwrap().format, Format::Protobuf);
        let h = with_accept("application/vnd.kubernetes.protobuf;q=0, application/json");
        assert_eq!(negotiate(&h, None, true).unwrap().format, Format::Json);
        // The metadata client's protobuf request.
        let h = with_accept("application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json");
        let n = negotiate(&h, None, true).unwrap();
        assert_eq!(
            (n.repr, n.format),
            (Representation::Metadata, Format::Protobuf)
        );
        // Tables only in JSON.
        let h = with_accept("application/vnd.kubernetes.protobuf;as=Table;g=meta.k8s.io;v=v1");
        assert_eq!(negotiate(&h, None, true).unwrap_err().code, 406);
        let h = with_accept("application/cbor");
        assert_eq!(negotiate(&h, None, false).unwrap().format, Format::Cbor);
    }
}
