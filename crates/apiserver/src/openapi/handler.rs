//! Serving the OpenAPI documents (upstream kube-openapi `pkg/handler` for v2, `pkg/handler3` for v3):
//! `/openapi/v3` (the root listing each group version's document with its hash),
//! `/openapi/v3/<group version>` (immutable under its current hash, redirected from an outdated one)
//! and `/openapi/v2`.
//!
//! `/openapi/v2` is negotiated as upstream's handler does (goautoneg's reading of `Accept`): JSON, or
//! gnostic's protobuf for `application/com.github.proto-openapi.spec.v2@v1.0+protobuf` (what
//! client-go asks for) and `...spec.v2.v1.0+protobuf`, 406 with no body for anything else; the
//! response carries the SHA-512 `ETag` shared by both forms, `Last-Modified` and `Vary: Accept`, and
//! `If-None-Match` / `If-Modified-Since` get 304 (Go's `http.ServeContent`). Every document is
//! gzip-compressed for clients accepting gzip once it reaches 1400 bytes (NYTimes' `gziphandler`,
//! which upstream wraps the handlers in); compressed forms are kept with the document.
//!
//! Differences: `Range` requests get the whole document (`ServeContent` would answer 206).

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use apimachinery::resources::Snapshot;
use apimachinery::status::ApiError;
use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Response, StatusCode};

use crate::request::Query;
use crate::response::{self, Body};
use crate::server::not_found;
use crate::ApiServer;

/// The protobuf media type client-go asks for (deprecated upstream, still what it sends).
const PROTOBUF_DEPRECATED: &str = "com.github.proto-openapi.spec.v2@v1.0+protobuf";
/// The protobuf media type upstream answers with, for either request form.
const PROTOBUF: &str = "com.github.proto-openapi.spec.v2.v1.0+protobuf";
/// gziphandler's `DefaultMinSize`: smaller bodies are sent as they are.
const GZIP_MIN_SIZE: usize = 1400;

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
    let mut resp = match path.trim_end_matches('/') {
        "/openapi/v3" => {
            let mut root = super::root(snap, &custom);
            crate::aggregator::openapi::merge_root(&api.aggregator, &mut root);
            response::json_response(StatusCode::OK, &root)
        }
        "/openapi/v2" => serve_v2(&super::v2(snap, &custom), headers),
        p => {
            let gv = p.strip_prefix("/openapi/v3/").ok_or_else(not_found)?;
            if let Some(resp) = crate::aggregator::openapi::serve(&api.aggregator, gv, query) {
                return Ok(resp);
            }
            let doc = super::group_version(snap, &custom, gv).ok_or_else(not_found)?;
            // As upstream: an outdated hash is redirected to the current one.
            if query.get("hash").is_some_and(|h| h != doc.hash) {
                let mut resp = response::bytes_response(
                    StatusCode::MOVED_PERMANENTLY,
                    "text/plain; charset=utf-8",
                    Bytes::new(),
                );
                if let Ok(v) = HeaderValue::from_str(&format!("{p}?hash={}", doc.hash)) {
                    resp.headers_mut().insert(header::LOCATION, v);
                }
                return Ok(resp);
            }
            let mut resp = body_response(&doc, false, doc.body.clone(), headers);
            resp.headers_mut()
                .append(header::VARY, HeaderValue::from_static("Accept-Encoding"));
            if query.get("hash") == Some(doc.hash.as_str()) {
                resp.headers_mut().insert(
                    header::CACHE_CONTROL,
                    HeaderValue::from_static("public, immutable"),
                );
            }
            resp
        }
    };
    let h = resp.headers_mut();
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(
            header::CACHE_CONTROL,
            HeaderValue::from_static("no-cache, private"),
        );
    }
    Ok(resp)
}

/// `/openapi/v2` in the form `Accept` asks for.
fn serve_v2(doc: &super::Document, headers: &HeaderMap) -> Response<Body> {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let mut resp = match negotiate_v2(accept) {
        None => response::bytes_response(StatusCode::NOT_ACCEPTABLE, "", Bytes::new()),
        Some(V2Form::Json) => body_response(doc, false, doc.body.clone(), headers),
        Some(V2Form::Protobuf) => match doc.protobuf() {
            Ok(bytes) => body_response(doc, true, bytes, headers),
            Err(e) => {
                tracing::error!("Error in OpenAPI handler: {e}");
                response::bytes_response(StatusCode::SERVICE_UNAVAILABLE, "", Bytes::new())
            }
        },
    };
    let ok = resp.status() == StatusCode::OK;
    let h = resp.headers_mut();
    if !ok {
        h.remove(header::CONTENT_TYPE);
    }
    // gziphandler's, then the handler's own.
    h.append(header::VARY, HeaderValue::from_static("Accept-Encoding"));
    h.append(header::VARY, HeaderValue::from_static("Accept"));
    resp
}

/// A document's body (`bytes`, of the JSON or protobuf form) with its validators, as
/// `http.ServeContent` answers: 304 when the client's copy is current, else the body, compressed
/// when the client accepts gzip and it is large enough (the caller adds gziphandler's
/// `Vary: Accept-Encoding`).
fn body_response(
    doc: &super::Document,
    protobuf: bool,
    bytes: Bytes,
    req: &HeaderMap,
) -> Response<Body> {
    let content_type = if protobuf {
        format!("application/{PROTOBUF}")
    } else {
        response::JSON.to_string()
    };
    let etag = format!("\"{}\"", doc.etag);
    let last_modified = http_date(doc.built);
    let fresh = match req.get(header::IF_NONE_MATCH).and_then(|v| v.to_str().ok()) {
        Some(inm) => etag_matches(inm, &etag),
        None => req
            .get(header::IF_MODIFIED_SINCE)
            .and_then(|v| v.to_str().ok())
            .and_then(parse_http_date)
            .is_some_and(|since| truncate_to_second(doc.built) <= since),
    };
    let gzip = accepts_gzip(req);
    let mut resp = if fresh {
        response::bytes_response(StatusCode::NOT_MODIFIED, "", Bytes::new())
    } else if gzip && bytes.len() >= GZIP_MIN_SIZE {
        let mut resp =
            response::bytes_response(StatusCode::OK, &content_type, doc.gzipped(protobuf, &bytes));
        resp.headers_mut()
            .insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        resp
    } else {
        response::bytes_response(StatusCode::OK, &content_type, bytes)
    };
    let h = resp.headers_mut();
    if fresh {
        h.remove(header::CONTENT_TYPE);
    }
    if let Ok(v) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, v);
    }
    if let Ok(v) = HeaderValue::from_str(&last_modified) {
        h.insert(header::LAST_MODIFIED, v);
    }
    resp
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum V2Form {
    Json,
    Protobuf,
}

/// One clause of an `Accept` header as goautoneg parses it.
#[derive(Debug)]
struct Clause<'a> {
    ty: &'a str,
    sub: &'a str,
    q: f32,
}

/// goautoneg's `ParseAccept`: clauses without a `/` are skipped (but `*`), `q` defaults to 1 (an
/// unparsable one counts as 0), and the clauses are ordered by its `Less`, an insertion sort as Go's
/// `sort.Sort` does on short slices.
fn parse_accept(header: &str) -> Vec<Clause<'_>> {
    let mut clauses = Vec::new();
    for part in header.split(',') {
        let part = part.trim_matches(' ');
        let mut params = part.split(';');
        let range = params.next().unwrap_or("");
        let mut sp = range.split('/');
        let ty = sp.next().unwrap_or("").trim_matches(' ');
        let sub = match (sp.next(), sp.next()) {
            (None, _) if ty == "*" => "*",
            (Some(sub), None) => sub.trim_matches(' '),
            _ => continue,
        };
        let mut q = 1.0;
        for param in params {
            if let Some((token, value)) = param.split_once('=') {
                if token.trim_matches(' ') == "q" {
                    q = value.parse::<f32>().unwrap_or(0.0);
                }
            }
        }
        clauses.push(Clause { ty, sub, q });
    }
    let less = |a: &Clause, b: &Clause| {
        a.q > b.q || (a.ty != "*" && b.ty == "*") || (a.sub != "*" && b.sub == "*")
    };
    for i in 1..clauses.len() {
        let mut j = i;
        while j > 0 && less(&clauses[j], &clauses[j - 1]) {
            clauses.swap(j, j - 1);
            j -= 1;
        }
    }
    clauses
}

/// The form of `/openapi/v2` to serve: the first clause (in goautoneg's order) that matches JSON or
/// one of the protobuf types, parameters and `q` aside, as upstream; None for 406.
fn negotiate_v2(accept: &str) -> Option<V2Form> {
    let accept = if accept.is_empty() { "*/*" } else { accept };
    let offered = [
        ("json", V2Form::Json),
        (PROTOBUF_DEPRECATED, V2Form::Protobuf),
        (PROTOBUF, V2Form::Protobuf),
    ];
    parse_accept(accept).iter().find_map(|c| {
        offered
            .iter()
            .find(|(sub, _)| {
                (c.ty == "application" || c.ty == "*") && (c.sub == *sub || c.sub == "*")
            })
            .map(|(_, form)| *form)
    })
}

/// gziphandler's `acceptsGzip`: `gzip` listed in `Accept-Encoding` with a q-value above 0.
fn accepts_gzip(req: &HeaderMap) -> bool {
    req.get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|coding| {
            let mut q = 1.0f64;
            let mut name = String::new();
            for (n, part) in coding.split(';').enumerate() {
                let part = part.trim();
                // As gziphandler: each parameter resets q before reading its own.
                q = 1.0;
                if n == 0 {
                    name = part.to_ascii_lowercase();
                } else if let Some(v) = part.strip_prefix("q=") {
                    q = v.parse::<f64>().ok()?.clamp(0.0, 1.0);
                }
            }
            Some((name, q))
        })
        .rfind(|(name, _)| name == "gzip")
        .is_some_and(|(_, q)| q > 0.0)
}

/// `bytes` gzip-compressed at the default level, as gziphandler does.
pub(super) fn gzip(bytes: &[u8]) -> Bytes {
    let mut enc = flate2::write::GzEncoder::new(
        Vec::with_capacity(bytes.len() / 4),
        flate2::Compression::default(),
    );
    // Writing to a Vec cannot fail.
    let _ = enc.write_all(bytes);
    Bytes::from(enc.finish().unwrap_or_default())
}

/// `If-None-Match` against our (strong) tag with the weak comparison `ServeContent` uses.
fn etag_matches(header: &str, etag: &str) -> bool {
    header.split(',').map(str::trim).any(|candidate| {
        candidate == "*" || candidate.strip_prefix("W/").unwrap_or(candidate) == etag
    })
}

fn truncate_to_second(t: SystemTime) -> SystemTime {
    let secs = t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
    UNIX_EPOCH + Duration::from_secs(secs)
}

/// An HTTP date (IMF-fixdate, `Tue, 15 Nov 1994 08:12:31 GMT`).
fn http_date(t: SystemTime) -> String {
    let t: chrono::DateTime<chrono::Utc> = t.into();
    t.format("%a, %d %b %Y %H:%M:%S GMT").to_string()
}

fn parse_http_date(s: &str) -> Option<SystemTime> {
    let t = chrono::DateTime::parse_from_rfc2822(s.trim()).ok()?;
    let secs = u64::try_from(t.timestamp()).ok()?;
    Some(UNIX_EPOCH + Duration::from_secs(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_negotiation_follows_goautoneg() {
        let table: &[(&str, Option<V2Form>)] = &[
            ("", Some(V2Form::Json)),
            ("*/*", Some(V2Form::Json)),
            ("application/json", Some(V2Form::Json)),
            ("application/json;stream=watch", Some(V2Form::Json)),
            // What client-go's OpenAPISchema() sends.
            (
                "application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
                Some(V2Form::Protobuf),
            ),
            (
                "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
                Some(V2Form::Protobuf),
            ),
            (
                "application/com.github.proto-openapi.spec.v2@v1.0+protobuf, application/json",
                Some(V2Form::Protobuf),
            ),
            (
                "application/json;q=0.5, application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
                Some(V2Form::Protobuf),
            ),
            ("application/*", Some(V2Form::Json)),
            ("*", Some(V2Form::Json)),
            ("application/yaml", None),
            ("text/html, application/xml", None),
            ("application/vnd.kubernetes.protobuf", None),
            ("application", None),
            // goautoneg does not drop q=0 clauses.
            ("application/json;q=0", Some(V2Form::Json)),
            ("text/plain, */*;q=0.1", Some(V2Form::Json)),
        ];
        for (accept, want) in table {
            assert_eq!(negotiate_v2(accept), *want, "{accept:?}");
        }
    }

    #[test]
    fn accept_clauses_sort_by_quality_then_specificity() {
        let c = parse_accept("*/*;q=0.8, text/*, application/json;q=0.9, text/html");
        let order: Vec<String> = c.iter().map(|c| format!("{}/{}", c.ty, c.sub)).collect();
        assert_eq!(
            order,
            // Go's Less puts a specific subtype first whatever its q: application/json before text/*.
            ["text/html", "application/json", "text/*", "*/*"],
            "{c:?}"
        );
        let c = parse_accept("a/b;q=x");
        assert_eq!(c[0].q, 0.0);
    }

    #[test]
    fn gzip_is_accepted_with_a_positive_quality() {
        let table = [
            ("gzip", true),
            ("gzip, deflate, br", true),
            ("deflate", false),
            ("gzip;q=0", false),
            ("GZIP;q=0.5", true),
            ("identity, gzip;q=0.001", true),
            ("", false),
        ];
        for (value, want) in table {
            let mut h = HeaderMap::new();
            h.insert(header::ACCEPT_ENCODING, HeaderValue::from_static(value));
            assert_eq!(accepts_gzip(&h), want, "{value:?}");
        }
        assert!(!accepts_gzip(&HeaderMap::new()));
    }

    #[test]
    fn validators_match_as_serve_content_does() {
        let tag = "\"ABC\"";
        assert!(etag_matches("\"ABC\"", tag));
        assert!(etag_matches("W/\"ABC\"", tag));
        assert!(etag_matches("\"x\", \"ABC\"", tag));
        assert!(etag_matches("*", tag));
        assert!(!etag_matches("\"ABD\"", tag));
        let t = UNIX_EPOCH + Duration::from_millis(784_887_151_500);
        assert_eq!(http_date(t), "Tue, 15 Nov 1994 08:12:31 GMT");
        assert_eq!(
            parse_http_date("Tue, 15 Nov 1994 08:12:31 GMT"),
            Some(truncate_to_second(t))
        );
        assert_eq!(parse_http_date("yesterday"), None);
    }

    #[test]
    fn gzip_round_trips() {
        use std::io::Read;
        let data = vec![b'x'; 5000];
        let z = gzip(&data);
        assert!(z.len() < data.len());
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&z[..])
            .read_to_end(&mut out)
            .unwrap();
        assert_eq!(out, data);
    }
}
