//! Listing and watching through the API (upstream client-go `tools/cache/listwatch.go`:
//! `NewListWatchFromClient`), with the request and the response bytes handled once for every type and
//! only the decoding of objects generic.
//!
//! Why not `Api::list`/`Api::watch`: every informer type instantiated kube's whole request and
//! line-reading pipeline, and kube decodes watch events through serde's adjacently tagged enum, which
//! buffers each object as `serde::__private::Content` and decodes it a second time, so every type's
//! decoder (and that of every type it nests) was compiled a second time for the buffer. Here the
//! request, the line splitting and the error mapping are non-generic ([`RawListWatch`]), and an event
//! line is decoded in one pass straight into `K` ([`decode_event`]) with the same deserializer kube
//! uses for `get` and `list` responses (`serde_json::from_str`), so those share one instance per type.
//!
//! Kept from kube's pipeline: `Accept-Encoding: identity` on watches; an incomplete last line is
//! ignored; a line that is not an event but a `Status` becomes `Error::Api`; a connection cut inside
//! the chunked body (unexpected EOF) ends the stream, so the reflector resumes instead of backing off.
//! Different: a line longer than [`MAX_EVENT_LINE`] fails the watch (kube's is unbounded).

use std::marker::PhantomData;
use std::pin::Pin;

use futures::future::BoxFuture;
use futures::io::{AsyncBufRead, AsyncBufReadExt};
use futures::stream::BoxStream;
use futures::{FutureExt, StreamExt};
use kube::api::{ListParams, ObjectList, WatchEvent, WatchParams};
use kube::core::{Request, Status};
use kube::{Api, Client, Resource};
use serde::de::{DeserializeOwned, IgnoredAny, MapAccess, Visitor};
use serde::Deserialize;

use super::reflector::{ListerWatcher, WatchStream};

/// The longest watch event line accepted: larger than any object the API server stores (its request
/// bodies are limited to 3 MiB, etcd's values to 1.5 MiB) with its JSON envelope.
pub const MAX_EVENT_LINE: usize = 16 << 20;

/// Lists and watches one collection as text: the part of a lister-watcher that does not depend on the
/// object type.
#[derive(Clone)]
pub struct RawListWatch {
    client: Client,
    url: String,
    /// Only `PartialObjectMetadata` (the `Accept` header of metadata informers).
    metadata: bool,
}

impl RawListWatch {
    pub fn new(client: Client, url: String, metadata: bool) -> RawListWatch {
        RawListWatch {
            client,
            url,
            metadata,
        }
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// One list response's body.
    pub async fn list_text(&self, params: &ListParams) -> Result<String, kube::Error> {
        let request = Request::new(self.url.as_str());
        let mut req = if self.metadata {
            request.list_metadata(params)
        } else {
            request.list(params)
        }
        .map_err(kube::Error::BuildRequest)?;
        req.extensions_mut().insert("list");
        self.client.request_text(req).await
    }

    /// A watch response's lines (empty ones skipped), once the server has answered.
    pub async fn watch_lines(
        &self,
        params: &WatchParams,
        resource_version: &str,
    ) -> Result<BoxStream<'static, Result<String, kube::Error>>, kube::Error> {
        let request = Request::new(self.url.as_str());
        let mut req = if self.metadata {
            request.watch_metadata(params, resource_version)
        } else {
            request.watch(params, resource_version)
        }
        .map_err(kube::Error::BuildRequest)?;
        req.extensions_mut().insert("watch");
        // Watches are streamed uncompressed (kube does the same: its decompression handles only the
        // first gzip member, and servers gzip a watch one member per event).
        req.headers_mut()
            .entry(http::header::ACCEPT_ENCODING)
            .or_insert(http::HeaderValue::from_static("identity"));
        let body = self.client.request_stream(req).await?;
        let reader = LineReader {
            body: Box::pin(body),
            line: Vec::new(),
            done: false,
        };
        Ok(futures::stream::unfold(reader, |mut r| async move {
            let line = r.next_line().await?;
            Some((line, r))
        })
        .boxed())
    }
}

struct LineReader {
    body: Pin<Box<dyn AsyncBufRead + Send>>,
    line: Vec<u8>,
    done: bool,
}

impl LineReader {
    async fn next_line(&mut self) -> Option<Result<String, kube::Error>> {
        loop {
            if self.done {
                return None;
            }
            let available = match self.body.fill_buf().await {
                Ok(a) => a,
                Err(e) => {
                    self.done = true;
                    return read_error(e).map(Err);
                }
            };
            if available.is_empty() {
                // The end: a last line without its newline is handed on (it fails to decode as
                // incomplete and is ignored, as kube's codec does).
                self.done = true;
                return (!self.line.is_empty()).then(|| self.take_line());
            }
            let (used, complete) = match available.iter().position(|&b| b == b'\n') {
                Some(i) => {
                    self.line.extend_from_slice(&available[..i]);
                    (i + 1, true)
                }
                None => {
                    self.line.extend_from_slice(available);
                    (available.len(), false)
                }
            };
            self.body.consume_unpin(used);
            if self.line.len() > MAX_EVENT_LINE {
                self.done = true;
                return Some(Err(kube::Error::LinesCodecMaxLineLengthExceeded));
            }
            if complete {
                if self.line.last() == Some(&b'\r') {
                    self.line.pop();
                }
                if !self.line.is_empty() {
                    return Some(self.take_line());
                }
            }
        }
    }

    fn take_line(&mut self) -> Result<String, kube::Error> {
        String::from_utf8(std::mem::take(&mut self.line)).map_err(|e| {
            kube::Error::ReadEvents(std::io::Error::new(std::io::ErrorKind::InvalidData, e))
        })
    }
}

/// A read error of a watch body: `None` (the stream just ends, to be resumed) when the connection
/// was cut mid-body, as kube treats it; the error otherwise.
fn read_error(e: std::io::Error) -> Option<kube::Error> {
    if e.kind() == std::io::ErrorKind::UnexpectedEof
        || e.to_string().contains("unexpected EOF during chunk")
        || e.get_ref()
            .is_some_and(|inner| chain_has_unexpected_eof(inner))
    {
        tracing::debug!(error = %e, "watch body ended mid-stream");
        return None;
    }
    Some(kube::Error::ReadEvents(e))
}

fn chain_has_unexpected_eof(err: &(dyn std::error::Error + 'static)) -> bool {
    // Bounded: a `source` chain that cycles must not stall a watch.
    let mut current = Some(err);
    for _ in 0..16 {
        let Some(e) = current else { return false };
        if e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::UnexpectedEof)
        {
            return true;
        }
        current = e.source();
    }
    false
}

/// What an undecodable watch line means (kube's rules): nothing when it is incomplete, the server's
/// `Status` when it is one, else the decode error.
fn line_error(line: &str, e: serde_json::Error) -> Option<kube::Error> {
    if e.is_eof() {
        return None;
    }
    match serde_json::from_str::<Status>(line) {
        Ok(status) => Some(kube::Error::Api(Box::new(status))),
        Err(_) => Some(kube::Error::SerdeError(e)),
    }
}

/// Decodes a list response body (as kube's `Api::list`).
pub fn decode_list<K: Clone + DeserializeOwned>(text: &str) -> Result<ObjectList<K>, kube::Error> {
    serde_json::from_str(text).map_err(|e| {
        tracing::warn!(error = %e, "undecodable list response");
        kube::Error::SerdeError(e)
    })
}

#[derive(Clone, Copy, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
enum EventType {
    Added,
    Modified,
    Deleted,
    Bookmark,
    Error,
}

#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "lowercase")]
enum Field {
    Type,
    Object,
    #[serde(other)]
    Other,
}

enum Parsed<K> {
    Event(WatchEvent<K>),
    /// `object` came before `type`: it was skipped; decode again knowing the type.
    ObjectBeforeType(EventType),
}

/// Decodes `{"type": T, "object": O}`, `O` by `T` as soon as it is reached.
struct EventVisitor<K> {
    known: Option<EventType>,
    kind: PhantomData<fn() -> K>,
}

impl<'de, K: DeserializeOwned> Visitor<'de> for EventVisitor<K> {
    type Value = Parsed<K>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a watch event")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Parsed<K>, A::Error> {
        let mut event_type = self.known;
        let mut event = None;
        let mut skipped_object = false;
        while let Some(field) = map.next_key::<Field>()? {
            match field {
                Field::Type => {
                    let t = map.next_value::<EventType>()?;
                    event_type = event_type.or(Some(t));
                }
                Field::Object => match event_type {
                    Some(t) => {
                        event = Some(match t {
                            EventType::Added => WatchEvent::Added(map.next_value()?),
                            EventType::Modified => WatchEvent::Modified(map.next_value()?),
                            EventType::Deleted => WatchEvent::Deleted(map.next_value()?),
                            EventType::Bookmark => WatchEvent::Bookmark(map.next_value()?),
                            EventType::Error => WatchEvent::Error(map.next_value()?),
                        })
                    }
                    None => {
                        map.next_value::<IgnoredAny>()?;
                        skipped_object = true;
                    }
                },
                Field::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        match (event, event_type) {
            (Some(e), _) => Ok(Parsed::Event(e)),
            (None, Some(t)) if skipped_object => Ok(Parsed::ObjectBeforeType(t)),
            (None, Some(_)) => Err(serde::de::Error::missing_field("object")),
            (None, None) => Err(serde::de::Error::missing_field("type")),
        }
    }
}

fn parse_event<K: DeserializeOwned>(
    line: &str,
    known: Option<EventType>,
) -> Result<Parsed<K>, serde_json::Error> {
    use serde::Deserializer as _;
    let mut de = serde_json::Deserializer::from_str(line);
    let parsed = (&mut de).deserialize_map(EventVisitor {
        known,
        kind: PhantomData,
    })?;
    de.end()?;
    Ok(parsed)
}

/// Decodes one watch event line into `K`.
pub fn decode_event<K: DeserializeOwned>(line: &str) -> Result<WatchEvent<K>, serde_json::Error> {
    match parse_event(line, None)? {
        Parsed::Event(e) => Ok(e),
        Parsed::ObjectBeforeType(t) => match parse_event(line, Some(t))? {
            Parsed::Event(e) => Ok(e),
            Parsed::ObjectBeforeType(_) => Err(serde::de::Error::missing_field("object")),
        },
    }
}

/// A watch's lines decoded as events of `K` (kube's rules for lines that are not events).
pub fn decode_events<K: DeserializeOwned + Send + 'static>(
    lines: BoxStream<'static, Result<String, kube::Error>>,
) -> WatchStream<K> {
    lines
        .filter_map(|line| {
            std::future::ready(match line {
                Ok(line) => match decode_event::<K>(&line) {
                    Ok(event) => Some(Ok(event)),
                    Err(e) => line_error(&line, e).map(Err),
                },
                Err(e) => Some(Err(e)),
            })
        })
        .boxed()
}

/// Lists and watches through the API what a kube [`Api`] names (typed kinds, `DynamicObject`, and
/// `PartialObjectMeta<K>` for metadata only).
pub struct ApiListerWatcher<K> {
    raw: RawListWatch,
    kind: PhantomData<fn() -> K>,
}

impl<K: Resource> ApiListerWatcher<K> {
    pub fn new(api: Api<K>) -> Self {
        let url = api.resource_url().to_string();
        ApiListerWatcher::from_raw(RawListWatch::new(api.into_client(), url, K::metadata_api()))
    }
}

impl<K> ApiListerWatcher<K> {
    /// For a collection named by URL (the metadata informer's `Api<K>` lists `PartialObjectMeta<K>`).
    pub fn from_raw(raw: RawListWatch) -> Self {
        ApiListerWatcher {
            raw,
            kind: PhantomData,
        }
    }
}

impl<K> ListerWatcher<K> for ApiListerWatcher<K>
where
    K: Clone + DeserializeOwned + Send + Sync + 'static,
{
    fn list(&self, params: ListParams) -> BoxFuture<'_, Result<ObjectList<K>, kube::Error>> {
        async move { decode_list(&self.raw.list_text(&params).await?) }.boxed()
    }

    fn watch(
        &self,
        params: WatchParams,
        resource_version: String,
    ) -> BoxFuture<'_, Result<WatchStream<K>, kube::Error>> {
        async move {
            let lines = self.raw.watch_lines(&params, &resource_version).await?;
            Ok(decode_events(lines))
        }
        .boxed()
    }

    fn describe(&self) -> String {
        if self.raw.metadata {
            format!("{} (metadata)", self.raw.url)
        } else {
            self.raw.url.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    #[test]
    fn events_decode_in_either_field_order() {
        let added = r#"{"type":"ADDED","object":{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","resourceVersion":"5"},"data":{"k":"v"}}}"#;
        match decode_event::<ConfigMap>(added).unwrap() {
            WatchEvent::Added(cm) => {
                assert_eq!(cm.metadata.name.as_deref(), Some("a"));
                assert_eq!(cm.data.unwrap()["k"], "v");
            }
            other => panic!("{other:?}"),
        }
        let reversed = r#"{"object":{"metadata":{"name":"b"}},"type":"DELETED"}"#;
        assert!(matches!(
            decode_event::<ConfigMap>(reversed).unwrap(),
            WatchEvent::Deleted(cm) if cm.metadata.name.as_deref() == Some("b")
        ));
        let bookmark = r#"{"type":"BOOKMARK","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"12","annotations":{"k8s.io/initial-events-end":"true"}}}}"#;
        match decode_event::<ConfigMap>(bookmark).unwrap() {
            WatchEvent::Bookmark(b) => assert_eq!(b.metadata.resource_version, "12"),
            other => panic!("{other:?}"),
        }
        let error = r#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","message":"too old resource version: 1 (5)","reason":"Expired","code":410}}"#;
        match decode_event::<ConfigMap>(error).unwrap() {
            WatchEvent::Error(s) => assert_eq!(s.code, 410),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bad_lines_are_errors_statuses_or_ignored() {
        // Not events: errors. Every field of a Status is optional, so any JSON object that is not an
        // event reads as one (kube's rule); anything else is a decode error.
        for line in [
            r#"{"type":"SOMETHING","object":{}}"#,
            r#"{"type":"ADDED"}"#,
            r#"{"object":{}}"#,
            r#"{"type":"ADDED","object":{"metadata":{"name":7}}}"#,
        ] {
            let e = decode_event::<ConfigMap>(line).expect_err(line);
            assert!(
                matches!(line_error(line, e), Some(kube::Error::Api(_))),
                "{line}"
            );
        }
        for line in [r#"["ADDED"]"#, r#"{"type":"ADDED","object":{}} trailing"#] {
            let e = decode_event::<ConfigMap>(line).expect_err(line);
            assert!(
                matches!(line_error(line, e), Some(kube::Error::SerdeError(_))),
                "{line}"
            );
        }
        // An incomplete last line is dropped.
        let cut = r#"{"type":"ADDED","object":{"metadata":{"na"#;
        let e = decode_event::<ConfigMap>(cut).expect_err("incomplete");
        assert!(line_error(cut, e).is_none());
        // A bare Status (a server error in place of events).
        let status = r#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"gone","reason":"Expired","code":410}"#;
        let e = decode_event::<ConfigMap>(status).expect_err("not an event");
        assert!(matches!(line_error(status, e), Some(kube::Error::Api(s)) if s.code == 410));
    }

    #[tokio::test]
    async fn lines_are_split_bounded_and_end_on_a_cut_body() {
        let body: &[u8] = b"one\r\n\ntwo\nthree";
        let mut r = LineReader {
            body: Box::pin(futures::io::Cursor::new(body)),
            line: Vec::new(),
            done: false,
        };
        let mut lines = Vec::new();
        while let Some(l) = r.next_line().await {
            lines.push(l.unwrap());
        }
        assert_eq!(lines, ["one", "two", "three"]);

        let long = vec![b'x'; MAX_EVENT_LINE + 2];
        let mut r = LineReader {
            body: Box::pin(futures::io::Cursor::new(long)),
            line: Vec::new(),
            done: false,
        };
        assert!(matches!(
            r.next_line().await,
            Some(Err(kube::Error::LinesCodecMaxLineLengthExceeded))
        ));
        assert!(r.next_line().await.is_none());

        let cut = std::io::Error::other(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "peer closed connection without sending TLS close_notify",
        ));
        assert!(read_error(cut).is_none());
        assert!(read_error(std::io::Error::other("reset")).is_some());
    }
}
