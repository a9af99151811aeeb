//! WATCH (upstream `handlers.serveWatch` with the cacher's `cacheWatcher`): a chunked stream of
//! `{"type": ..., "object": ...}` frames. Initial state as synthetic ADDED events when
//! `resourceVersion` is "" or "0"; resume after any revision the watch cache or, failing that, the
//! store still keeps; `ERROR` with a 410 `Status` for a compacted one; periodic `BOOKMARK`s when
//! allowed; ends after `timeoutSeconds`.

use std::sync::Arc;
use std::time::Duration;

use apimachinery::serializer::{cbor, protobuf};
use apimachinery::status::ApiError;
use bytes::Bytes;
use futures::StreamExt;
use http::{Response, StatusCode};
use rand::Rng;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::list::{filter_of, CACHE_WAIT};
use super::{storage_error, table, Ctx};
use crate::objects;
use crate::response::{self, Body, Format, Representation};
use crate::watch_cache::{json_frame, CacheEvent, EventType, SubscribeError, WatchStart};

/// Frames buffered between the watch task and the connection.
const OUT_BUFFER: usize = 256;

pub async fn watch(ctx: &Ctx<'_>) -> Result<Response<Body>, ApiError> {
    let mut filter = filter_of(ctx)?;
    if let Some(name) = &ctx.req.name {
        // `/watch/<resource>/<name>`: only that object.
        let by_name = apimachinery::fields::parse(&format!("metadata.name={name}"))
            .map_err(ApiError::bad_request)?;
        filter.fields = Some(by_name);
    }
    let negotiated = ctx.negotiated()?;
    let repr = negotiated.repr;
    let format = negotiated.format;
    let rv = ctx.query.get("resourceVersion").unwrap_or("");
    let rv_num = objects::parse_resource_version(rv).map_err(ApiError::bad_request)?;
    let bookmarks = ctx.query.flag("allowWatchBookmarks");
    let send_initial = ctx.query.get("sendInitialEvents").map(|v| v == "true");
    if send_initial.is_some() && ctx.query.get("resourceVersionMatch") != Some("NotOlderThan") {
        return Err(ApiError::bad_request(
            "sendInitialEvents is forbidden for watch unless resourceVersionMatch is set to NotOlderThan",
        ));
    }
    let timeout = match ctx.query.value("timeoutSeconds") {
        Some(t) => Duration::from_secs(
            t.parse::<u64>()
                .map_err(|_| ApiError::bad_request(format!("invalid timeoutSeconds {t:?}")))?,
        ),
        // Upstream spreads watch lifetimes over [min-request-timeout, 2x] so clients do not re-watch at once.
        None => Duration::from_secs(rand::rng().random_range(1800..3600)),
    };

    let caches = &ctx.api.caches;
    let target = ctx.cache_target(rv, rv_num).await?;
    let reached = if rv.is_empty() {
        caches.wait_consistent(target, CACHE_WAIT).await
    } else {
        caches.wait_for(target, CACHE_WAIT).await
    };
    // Without progress notifications a revision moved by writes the cache never sees cannot be
    // told from events in flight: a watch from "now" then starts at the cache's state, and any event
    // in flight follows as a live one (upstream, on such an etcd, watches etcd directly).
    let may_start_behind = rv.is_empty() && !caches.reports_progress();
    if !reached && !may_start_behind {
        return Err(ApiError::too_large_resource_version(
            target,
            caches.revision(),
        ));
    }
    let initial_state = match send_initial {
        Some(v) => v,
        None => rv.is_empty() || rv == "0",
    };
    let start = if initial_state {
        WatchStart::InitialState
    } else if rv.is_empty() || rv == "0" {
        WatchStart::After(caches.revision())
    } else {
        WatchStart::After(rv_num)
    };
    if let WatchStart::After(after) = start {
        if after < caches.compacted() {
            return Ok(error_stream(
                format,
                ApiError::resource_version_too_old(after, caches.compacted()),
            ));
        }
    }
    let cache = ctx.cache();
    // A resource without a cache (Events): the initial state is the store's, then changes after it.
    let (mut initial, start) = match start {
        WatchStart::InitialState if !cache.keeps_objects() => {
            let (events, revision) = store_initial(ctx, &filter).await?;
            (events, WatchStart::After(revision))
        }
        start => (Vec::new(), start),
    };
    // Where a store watch starts when the cache cannot serve the watch.
    let store_after = match start {
        WatchStart::After(after) => after,
        WatchStart::InitialState => rv_num,
    };
    let failure = StoreFailure::default();
    let (live, start_rv, from_store) =
        match cache.subscribe(filter.clone(), start, caches.revision()) {
            Ok(sub) => {
                initial.extend(sub.initial);
                (sub.live, sub.start_rv, false)
            }
            Err(SubscribeError::TooOld) => {
                match store_watch(ctx, &filter, store_after, failure.clone()).await {
                    Ok(live) => (live, store_after, true),
                    Err(status) => return Ok(error_stream(format, status)),
                }
            }
        };
    let (out, body) = mpsc::channel::<Bytes>(OUT_BUFFER);
    let stream = WatchStream {
        encoder: Encoder {
            repr,
            format,
            resource: ctx.resource.clone(),
            metrics: ctx.api.metrics.clone(),
            convert: ctx.read_conversion(),
            columns: ctx.custom_columns(),
        },
        kind: ctx.resource.kind.clone(),
        api_version: ctx.resource.api_version(),
        bookmarks,
        initial_events_end: send_initial == Some(true),
        // A store-fed watch may lag the caches: its bookmarks only claim what it has sent.
        revision: (!from_store).then(|| caches.subscribe_revision()),
        bookmark_interval: ctx.api.bookmark_interval,
        timeout,
        failure,
    };
    let open = ctx.api.metrics.watch_started();
    tokio::spawn(async move {
        stream.run(initial, live, start_rv, out).await;
        drop(open);
    });
    let mut resp = Response::new(response::streaming(body));
    *resp.status_mut() = StatusCode::OK;
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(format.stream_content_type()),
    );
    Ok(resp)
}

/// Why a store-fed watch ended, set before its channel closes: a compacted start revision is
/// reported by etcd only after the watch was created (its first item), and the client must get
/// the 410 ERROR event to relist, not a clean end it would resume from the same revision forever.
type StoreFailure = Arc<std::sync::Mutex<Option<ApiError>>>;

/// The current objects a filter selects, read from the store, as ADDED events, and the revision
/// they were read at: the initial state of a watch of a resource the cache keeps no objects of.
async fn store_initial(
    ctx: &Ctx<'_>,
    filter: &crate::filter::Filter,
) -> Result<(Vec<(Arc<CacheEvent>, EventType)>, i64), ApiError> {
    let (objects, revision) = super::list::from_store_now(ctx, filter).await?;
    let events = objects
        .into_iter()
        .map(|obj| (Arc::new(CacheEvent::added(obj)), EventType::Added))
        .collect();
    Ok((events, revision))
}

/// A store watch for a revision older than the cache keeps, converted to cache events.
async fn store_watch(
    ctx: &Ctx<'_>,
    filter: &crate::filter::Filter,
    after: i64,
    failure: StoreFailure,
) -> Result<mpsc::Receiver<(Arc<CacheEvent>, EventType)>, ApiError> {
    let mut events = ctx
        .api
        .store
        .watch(&ctx.list_prefix(), after)
        .await
        .map_err(storage_error)?;
    let (tx, rx) = mpsc::channel(1024);
    let cache = ctx.cache();
    let filter = filter.clone();
    tokio::spawn(async move {
        while let Some(item) = events.next().await {
            let event = match item {
                Ok(event) => event,
                Err(e) => {
                    // Compacted (410) or broken: the stream ends with this error.
                    if let Ok(mut f) = failure.lock() {
                        *f = Some(storage_error(e));
                    }
                    return;
                }
            };
            let Some(e) = CacheEvent::from_store(&cache, &event) else {
                continue;
            };
            if let Some(t) = e.type_for(&filter) {
                if tx.send((Arc::new(e), t)).await.is_err() {
                    return;
                }
            }
        }
    });
    Ok(rx)
}

/// A 200 stream holding one ERROR event, as upstream reports a watch that cannot start.
fn error_stream(format: Format, err: ApiError) -> Response<Body> {
    let frame = frame_of(format, "ERROR", &err.to_status());
    response::bytes_response(StatusCode::OK, format.stream_content_type(), frame)
}

struct Encoder {
    repr: Representation,
    format: Format,
    resource: Arc<apimachinery::resources::Resource>,
    metrics: Arc<crate::metrics::ApiMetrics>,
    /// How stored objects become served ones, when they differ.
    convert: Option<super::ReadConversion>,
    /// A custom resource's printer columns.
    columns: Option<Vec<apimachinery::printers::custom::CustomColumn>>,
}

impl Encoder {
    /// The event's frame; `Err` holds the ERROR frame of a failed conversion, after which the
    /// watch ends (upstream's watch ends on an object it cannot decode).
    async fn frame(&self, event: &CacheEvent, kind: EventType) -> Result<Bytes, Bytes> {
        if let Some(convert) = &self.convert {
            // A converted resource: its frames differ from the stored version's, so they are not shared.
            let mut obj: Value = serde_json::from_slice(&event.object.json).unwrap_or(Value::Null);
            if let Err(e) = convert.apply(&mut obj).await {
                return Err(frame_of(self.format, "ERROR", &e.to_status()));
            }
            let obj = match self.repr {
                Representation::Object => obj,
                Representation::Table { include_object } => {
                    let rv = event.rv.to_string();
                    table::table(
                        &self.resource,
                        self.columns.as_deref(),
                        &[obj],
                        include_object,
                        &rv,
                        None,
                    )
                }
                Representation::Metadata => table::partial_metadata(&obj),
            };
            return Ok(frame_of(self.format, kind.as_str(), &obj));
        }
        Ok(self.shared_frame(event, kind))
    }

    /// The frame of a resource served as stored.
    fn shared_frame(&self, event: &CacheEvent, kind: EventType) -> Bytes {
        match self.repr {
            Representation::Object => event.frame(kind, self.format, || {
                self.metrics.watch_event_encoded(self.format.index());
                match self.format {
                    Format::Json => json_frame(kind.as_str(), &event.object.json),
                    _ => {
                        let obj: Value =
                            serde_json::from_slice(&event.object.json).unwrap_or(Value::Null);
                        frame_of(self.format, kind.as_str(), &obj)
                    }
                }
            }),
            Representation::Table { include_object } => {
                let obj: Value = serde_json::from_slice(&event.object.json).unwrap_or(Value::Null);
                let rv = event.rv.to_string();
                let t = table::table(
                    &self.resource,
                    self.columns.as_deref(),
                    &[obj],
                    include_object,
                    &rv,
                    None,
                );
                frame_of(self.format, kind.as_str(), &t)
            }
            Representation::Metadata => {
                let obj: Value = serde_json::from_slice(&event.object.json).unwrap_or(Value::Null);
                frame_of(self.format, kind.as_str(), &table::partial_metadata(&obj))
            }
        }
    }
}

/// One watch event in `format`: a JSON line, a length-prefixed protobuf `WatchEvent`, or a CBOR item.
fn frame_of(format: Format, kind: &str, object: &Value) -> Bytes {
    match format {
        Format::Json => json_frame(kind, &serde_json::to_vec(object).unwrap_or_default()),
        Format::Protobuf => match protobuf::encode(object) {
            Ok(bytes) => Bytes::from(protobuf::watch_event_frame(kind, &bytes)),
            Err(e) => {
                let status =
                    ApiError::internal(format!("cannot encode the object: {e}")).to_status();
                let bytes = protobuf::encode(&status).unwrap_or_default();
                Bytes::from(protobuf::watch_event_frame("ERROR", &bytes))
            }
        },
        Format::Cbor => Bytes::from(cbor::encode(&json!({"type": kind, "object": object}))),
    }
}

struct WatchStream {
    encoder: Encoder,
    kind: String,
    api_version: String,
    bookmarks: bool,
    initial_events_end: bool,
    revision: Option<tokio::sync::watch::Receiver<i64>>,
    bookmark_interval: Duration,
    timeout: Duration,
    /// A store-fed watch's error, sent as an ERROR event when its channel ends.
    failure: StoreFailure,
}

impl WatchStream {
    fn bookmark(&self, rv: i64, initial_end: bool) -> Bytes {
        let mut metadata = json!({"resourceVersion": rv.to_string(), "creationTimestamp": null});
        if initial_end {
            metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let object = match self.encoder.repr {
            Representation::Table { .. } => {
                json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": metadata, "columnDefinitions": [], "rows": []})
            }
            _ => json!({"kind": self.kind, "apiVersion": self.api_version, "metadata": metadata}),
        };
        frame_of(self.encoder.format, "BOOKMARK", &object)
    }

    /// Sends an event's frame; false when the watch is over (the client left, or a conversion
    /// failed and its ERROR event was the last frame).
    async fn send(&self, out: &mpsc::Sender<Bytes>, event: &CacheEvent, kind: EventType) -> bool {
        match self.encoder.frame(event, kind).await {
            Ok(frame) => out.send(frame).await.is_ok(),
            Err(error) => {
                let _ = out.send(error).await;
                false
            }
        }
    }

    async fn run(
        self,
        initial: Vec<(Arc<CacheEvent>, EventType)>,
        mut live: mpsc::Receiver<(Arc<CacheEvent>, EventType)>,
        start_rv: i64,
        out: mpsc::Sender<Bytes>,
    ) {
        let deadline = tokio::time::sleep(self.timeout);
        tokio::pin!(deadline);
        let mut last_rv = start_rv;
        for (event, kind) in initial {
            last_rv = last_rv.max(event.rv);
            if !self.send(&out, &event, kind).await {
                return;
            }
        }
        if self.initial_events_end && out.send(self.bookmark(start_rv, true)).await.is_err() {
            return;
        }
        let mut ticker = tokio::time::interval(self.bookmark_interval);
        ticker.tick().await;
        loop {
            tokio::select! {
                item = live.recv() => {
                    let Some((event, kind)) = item else {
                        let failed = self.failure.lock().ok().and_then(|mut f| f.take());
                        if let Some(err) = failed {
                            let _ = out.send(frame_of(self.encoder.format, "ERROR", &err.to_status())).await;
                        }
                        return;
                    };
                    last_rv = last_rv.max(event.rv);
                    if !self.send(&out, &event, kind).await {
                        return;
                    }
                }
                _ = ticker.tick(), if self.bookmarks => {
                    // Everything up to the caches' revision has been handed to `live`: drain it, then
                    // the bookmark's revision is exact.
                    let rv = self.revision.as_ref().map(|r| *r.borrow()).unwrap_or(0);
                    while let Ok((event, kind)) = live.try_recv() {
                        last_rv = last_rv.max(event.rv);
                        if !self.send(&out, &event, kind).await {
                            return;
                        }
                    }
                    let rv = rv.max(last_rv);
                    if out.send(self.bookmark(rv, false)).await.is_err() {
                        return;
                    }
                }
                _ = out.closed() => return,
                _ = &mut deadline => return,
            }
        }
    }
}
