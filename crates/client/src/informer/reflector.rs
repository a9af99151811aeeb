//! The reflector: keeps a local cache in step with the API server by listing, then watching from the
//! list's resourceVersion (upstream client-go `tools/cache/reflector.go`, `ListAndWatch`, and
//! `listwatch.go`'s `ListerWatcher`).
//!
//! The loop, as upstream:
//! - **list** all objects, page by page (`limit`/`continue`, 500 per page by default), and hand the
//!   whole set to the sink as [`Delta::Replaced`]; the list's resourceVersion becomes the last synced one;
//! - **watch** from the last synced resourceVersion with `allowWatchBookmarks=true` and a server-side
//!   timeout (randomised between half and all of [`ReflectorConfig::watch_timeout`], as upstream spreads
//!   its 5-10 min); every event's resourceVersion, bookmarks included, advances the last synced one;
//! - when a watch ends or the connection drops, **resume** watching from the last synced resourceVersion
//!   (with exponential backoff after failures, 800 ms doubling to 30 s, reset after a healthy watch);
//! - a watch still open and silent [`WATCH_GRACE`] after its timeout is abandoned and resumed (a dead
//!   connection; upstream relies on HTTP/2 health checks for this);
//! - when the server answers **410 Gone** (the resourceVersion was compacted away, either on the watch
//!   request or as an error event), **relist** and start over; the sink turns the difference between
//!   the relist and its cache into updates and `DeletedFinalStateUnknown` tombstones.
//!
//! Differences from upstream, on purpose:
//! - No DeltaFIFO between the reflector and the informer: the reflector task applies each delta to the
//!   sink directly (the sink is cheap: a store write and a push to each handler's unbounded queue), so
//!   there is no queue to compress and `Replaced` carries the whole list.
//! - Lists always read the latest state (no `resourceVersion=0` first list served from a possibly
//!   stale cache); rkube's API server serves consistent lists from its watch cache anyway.
//! - No streaming lists (`sendInitialEvents`) yet.
//! - kube-runtime's `watcher` does the same list/watch/resume/410 loop; this one is written on
//!   `Api::list`/`Api::watch` through [`ListerWatcher`] so that the informer sees exactly when a relist
//!   replaces its cache, tests can substitute a fake, and list/watch calls can be counted
//!   ([`ReflectorStats`]).

use std::any::Any;
use std::fmt::Debug;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::{FutureExt, StreamExt};
use kube::api::{ListParams, ObjectList, WatchEvent, WatchParams};
use kube::Resource;

/// A stream of watch events as the kube crate yields them.
pub type WatchStream<K> = BoxStream<'static, Result<WatchEvent<K>, kube::Error>>;

/// Lists and watches one collection (upstream `cache.ListerWatcher`). [`ApiListerWatcher`] is the real
/// one; the metadata-only one is [`super::metadata::MetadataListerWatcher`].
pub trait ListerWatcher<K: Clone>: Send + Sync + 'static {
    /// One page of the collection.
    fn list(&self, params: ListParams) -> BoxFuture<'_, Result<ObjectList<K>, kube::Error>>;
    /// Changes after `resource_version`.
    fn watch(
        &self,
        params: WatchParams,
        resource_version: String,
    ) -> BoxFuture<'_, Result<WatchStream<K>, kube::Error>>;
    /// What is listed, for logs (the collection's URL).
    fn describe(&self) -> String;
}

pub use super::listwatch::ApiListerWatcher;

/// A change made to every object before it is cached and handed to handlers (upstream
/// `cache.TransformFunc`): drop what no reader of the cache looks at, so a large collection costs
/// less memory. It sees each object once, as it arrives from a list or a watch event.
pub type TransformFunc<K> = Arc<dyn Fn(&mut K) + Send + Sync>;

/// Why a transform was not installed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TransformError {
    /// Objects may already be cached untransformed (upstream: "informer has already started").
    #[error("the informer has already started")]
    AlreadyStarted,
    #[error("the informer already has a transform")]
    AlreadySet,
}

/// One change for the cache (upstream `cache.Delta`, without `Sync`: resyncs come from the informer).
#[derive(Debug, Clone, PartialEq)]
pub enum Delta<K> {
    /// A full list: the cache becomes exactly these objects.
    Replaced(Vec<K>),
    Added(K),
    Modified(K),
    /// The object's last state, as the watch delivered it.
    Deleted(K),
}

/// Where the reflector puts what it sees (the informer; upstream the DeltaFIFO's `Replace`/`Add`/...).
pub trait DeltaSink<K>: Send + Sync {
    fn apply(&self, delta: Delta<K>);
}

/// How the reflector lists and watches.
#[derive(Clone, Debug)]
pub struct ReflectorConfig {
    pub label_selector: Option<String>,
    pub field_selector: Option<String>,
    /// Objects per list page; `None` lists in one response.
    pub page_size: Option<u32>,
    /// The longest server-side watch timeout; each watch asks for a random one between half of it and
    /// all of it. At most 290 s (the kube crate refuses longer ones).
    pub watch_timeout: Duration,
    /// The first wait after a failed list or watch; doubled per failure up to `max_backoff`.
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    /// Drop `metadata.managedFields` from every object as it arrives (client-go's common
    /// `TrimManagedFields` transform): controllers never read them from a cache, and they are often
    /// the largest part of an object's metadata. A write of a cached object without them keeps the
    /// server's (an absent list means "unchanged").
    pub trim_managed_fields: bool,
}

impl Default for ReflectorConfig {
    fn default() -> Self {
        ReflectorConfig {
            label_selector: None,
            field_selector: None,
            page_size: Some(500),
            watch_timeout: Duration::from_secs(290),
            initial_backoff: Duration::from_millis(800),
            max_backoff: Duration::from_secs(30),
            trim_managed_fields: false,
        }
    }
}

/// How long past its server-side timeout a silent watch is kept before it is abandoned.
pub const WATCH_GRACE: Duration = Duration::from_secs(30);

/// Counts of what the reflector did, for tests and metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReflectorStats {
    /// Complete lists (however many pages each took).
    pub lists: u64,
    /// Watch requests made.
    pub watches: u64,
    /// Relists caused by 410 Gone.
    pub relists_after_gone: u64,
    /// Added/Modified/Deleted events applied.
    pub events: u64,
    /// Bookmarks seen.
    pub bookmarks: u64,
}

#[derive(Default)]
struct Counters {
    lists: AtomicU64,
    watches: AtomicU64,
    relists_after_gone: AtomicU64,
    events: AtomicU64,
    bookmarks: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// How one watch ended.
enum WatchEnd {
    /// Closed by the server (timeout) or by the connection; resume from the last resourceVersion.
    /// `healthy` when it delivered events or lasted a while (no backoff needed).
    Closed { healthy: bool },
    /// An error; resume after backoff (restarted from the initial wait when events had arrived).
    Failed { delivered: bool },
    /// 410 Gone: relist.
    Gone,
}

/// Lists and watches one collection into a [`DeltaSink`].
///
/// The loop (lists, pages, watches, resume points, backoff, 410 relists, counters) is compiled once
/// for every type: it runs in [`Core`] on type-erased objects ([`AnyObject`]); only the edges are
/// generic: [`Typed`] transforms each object and erases it, [`TypedSink`] hands it on as `K`. Every
/// informer type used to carry its own copy of the loop (55 of ~18 KB each in the all-in-one).
pub struct Reflector<K: Clone> {
    core: Core,
    edge: Typed<K>,
}

impl<K: Clone + 'static> Debug for Reflector<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reflector")
            .field("lw", &self.edge.lw.describe())
            .field("config", &self.core.config)
            .finish()
    }
}

pub fn is_gone(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == 410)
}

/// A number in [0, 1) that differs per call (std's per-instance random hasher keys).
fn random_fraction() -> f64 {
    let bits = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

struct Backoff {
    initial: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    fn new(initial: Duration, max: Duration) -> Backoff {
        Backoff {
            initial,
            max,
            next: initial,
        }
    }

    /// The next wait, with up to 100% jitter added as upstream's `wait.Jitter(d, 1.0)` (capped at max).
    fn next_delay(&mut self) -> Duration {
        let base = self.next;
        self.next = (self.next * 2).min(self.max);
        base.mul_f64(1.0 + random_fraction())
            .min(self.max.max(self.initial))
    }

    fn reset(&mut self) {
        self.next = self.initial;
    }
}

impl<K: Resource + Clone + Send + 'static> Reflector<K> {
    pub fn new(lw: Arc<dyn ListerWatcher<K>>, config: ReflectorConfig) -> Reflector<K> {
        Reflector {
            edge: Typed {
                lw,
                trim_managed_fields: config.trim_managed_fields,
                transform: OnceLock::new(),
            },
            core: Core {
                config,
                counters: Counters::default(),
                last_sync_resource_version: Mutex::new(None),
            },
        }
    }

    /// Installs the transform applied after `trim_managed_fields`; only one, set before
    /// [`run`](Self::run) (the informer checks that it has not started).
    pub fn set_transform(&self, f: TransformFunc<K>) -> Result<(), TransformError> {
        self.edge
            .transform
            .set(f)
            .map_err(|_| TransformError::AlreadySet)
    }

    pub fn config(&self) -> &ReflectorConfig {
        &self.core.config
    }

    /// The collection listed, for logs.
    pub fn describe(&self) -> String {
        self.edge.lw.describe()
    }

    pub fn stats(&self) -> ReflectorStats {
        self.core.stats()
    }

    /// The resourceVersion the cache reflects (upstream `LastSyncResourceVersion`); `None` before the
    /// first list.
    pub fn last_sync_resource_version(&self) -> Option<String> {
        self.core.last_sync()
    }

    /// Lists and watches forever; stop it by dropping the future.
    pub async fn run(&self, sink: &dyn DeltaSink<K>) {
        self.core.run(&self.edge, &TypedSink(sink)).await
    }
}

/// An object of the reflector's type inside the type-erased loop (a `K`, or a `Vec<K>` for a page).
type AnyObject = Box<dyn Any + Send>;

/// One list page after the typed edge.
struct ErasedPage {
    /// The page's objects, transformed (a `Vec<K>`).
    items: AnyObject,
    len: usize,
    resource_version: Option<String>,
    continue_token: Option<String>,
}

#[derive(Clone, Copy)]
enum EventKind {
    Added,
    Modified,
    Deleted,
}

/// One watch event after the typed edge.
enum ErasedEvent {
    Object {
        kind: EventKind,
        /// Transformed (a `K`).
        object: AnyObject,
        resource_version: Option<String>,
    },
    Bookmark(String),
    Error(Box<kube::core::Status>),
}

type ErasedWatch = BoxStream<'static, Result<ErasedEvent, kube::Error>>;

/// What the loop needs of the typed side: list and watch with erased objects.
trait Edge: Send + Sync {
    fn list(&self, params: ListParams) -> BoxFuture<'_, Result<ErasedPage, kube::Error>>;
    fn watch(
        &self,
        params: WatchParams,
        resource_version: String,
    ) -> BoxFuture<'_, Result<ErasedWatch, kube::Error>>;
    fn describe(&self) -> String;
}

/// What the loop hands the typed sink.
trait ErasedSink: Send + Sync {
    /// A complete list, as its pages (each a `Vec<K>`).
    fn replaced(&self, pages: Vec<AnyObject>);
    fn event(&self, kind: EventKind, object: AnyObject);
}

/// The typed edge: the lister-watcher of `K` and what every object goes through before the store.
struct Typed<K: Clone> {
    lw: Arc<dyn ListerWatcher<K>>,
    trim_managed_fields: bool,
    transform: OnceLock<TransformFunc<K>>,
}

fn transform<K: Resource>(trim_managed_fields: bool, f: Option<&TransformFunc<K>>, object: &mut K) {
    if trim_managed_fields {
        object.meta_mut().managed_fields = None;
    }
    if let Some(f) = f {
        f(object);
    }
}

fn erase_event<K: Resource + Send + 'static>(
    event: WatchEvent<K>,
    trim_managed_fields: bool,
    f: Option<&TransformFunc<K>>,
) -> ErasedEvent {
    let (kind, mut object) = match event {
        WatchEvent::Added(o) => (EventKind::Added, o),
        WatchEvent::Modified(o) => (EventKind::Modified, o),
        WatchEvent::Deleted(o) => (EventKind::Deleted, o),
        WatchEvent::Bookmark(b) => return ErasedEvent::Bookmark(b.metadata.resource_version),
        WatchEvent::Error(status) => return ErasedEvent::Error(status),
    };
    transform(trim_managed_fields, f, &mut object);
    let resource_version = object.meta().resource_version.clone();
    ErasedEvent::Object {
        kind,
        object: Box::new(object),
        resource_version,
    }
}

impl<K: Resource + Clone + Send + 'static> Edge for Typed<K> {
    fn list(&self, params: ListParams) -> BoxFuture<'_, Result<ErasedPage, kube::Error>> {
        async move {
            let page = self.lw.list(params).await?;
            let mut items = page.items;
            let f = self.transform.get();
            for o in &mut items {
                transform(self.trim_managed_fields, f, o);
            }
            Ok(ErasedPage {
                len: items.len(),
                items: Box::new(items),
                resource_version: page.metadata.resource_version,
                continue_token: page.metadata.continue_,
            })
        }
        .boxed()
    }

    fn watch(
        &self,
        params: WatchParams,
        resource_version: String,
    ) -> BoxFuture<'_, Result<ErasedWatch, kube::Error>> {
        async move {
            let stream = self.lw.watch(params, resource_version).await?;
            let trim = self.trim_managed_fields;
            let f = self.transform.get().cloned();
            Ok(stream
                .map(move |item| item.map(|e| erase_event(e, trim, f.as_ref())))
                .boxed())
        }
        .boxed()
    }

    fn describe(&self) -> String {
        self.lw.describe()
    }
}

/// The typed sink: erased objects back to `K` (they are always `K`: the edge made them).
struct TypedSink<'a, K>(&'a dyn DeltaSink<K>);

fn unerase<K: 'static>(object: AnyObject) -> Option<K> {
    match object.downcast::<K>() {
        Ok(o) => Some(*o),
        Err(_) => {
            tracing::error!("reflector: an object of another type reached the sink; dropped");
            None
        }
    }
}

impl<K: Send + 'static> ErasedSink for TypedSink<'_, K> {
    fn replaced(&self, pages: Vec<AnyObject>) {
        let mut pages = pages.into_iter().filter_map(unerase::<Vec<K>>);
        let mut items = pages.next().unwrap_or_default();
        for page in pages {
            items.extend(page);
        }
        self.0.apply(Delta::Replaced(items));
    }

    fn event(&self, kind: EventKind, object: AnyObject) {
        let Some(o) = unerase::<K>(object) else {
            return;
        };
        self.0.apply(match kind {
            EventKind::Added => Delta::Added(o),
            EventKind::Modified => Delta::Modified(o),
            EventKind::Deleted => Delta::Deleted(o),
        });
    }
}

/// The reflector's loop and state, for every type.
struct Core {
    config: ReflectorConfig,
    counters: Counters,
    last_sync_resource_version: Mutex<Option<String>>,
}

impl Core {
    fn stats(&self) -> ReflectorStats {
        let c = &self.counters;
        ReflectorStats {
            lists: c.lists.load(Ordering::Relaxed),
            watches: c.watches.load(Ordering::Relaxed),
            relists_after_gone: c.relists_after_gone.load(Ordering::Relaxed),
            events: c.events.load(Ordering::Relaxed),
            bookmarks: c.bookmarks.load(Ordering::Relaxed),
        }
    }

    fn last_sync(&self) -> Option<String> {
        self.last_sync_resource_version
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn set_last_sync(&self, rv: &str) {
        *self
            .last_sync_resource_version
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(rv.to_string());
    }

    /// Boxed, so that the loop's state machine is one function rather than inlined into each type's
    /// `Reflector::run`.
    fn run<'a>(&'a self, lw: &'a dyn Edge, sink: &'a dyn ErasedSink) -> BoxFuture<'a, ()> {
        async move {
            let mut backoff = Backoff::new(self.config.initial_backoff, self.config.max_backoff);
            let mut resume: Option<String> = None;
            loop {
                let rv = match resume.take() {
                    Some(rv) => rv,
                    None => match self.list_all(lw).await {
                        Ok((pages, count, rv)) => {
                            tracing::debug!(resource = %lw.describe(), count, %rv, "listed");
                            sink.replaced(pages);
                            self.set_last_sync(&rv);
                            backoff.reset();
                            rv
                        }
                        Err(e) => {
                            tracing::warn!(resource = %lw.describe(), error = %e, "list failed");
                            tokio::time::sleep(backoff.next_delay()).await;
                            continue;
                        }
                    },
                };
                let (end, rv) = self.watch_once(lw, rv, sink).await;
                match end {
                    WatchEnd::Closed { healthy: true } => backoff.reset(),
                    WatchEnd::Closed { healthy: false } => {
                        tokio::time::sleep(backoff.next_delay()).await;
                    }
                    WatchEnd::Failed { delivered } => {
                        if delivered {
                            backoff.reset();
                        }
                        tokio::time::sleep(backoff.next_delay()).await;
                    }
                    WatchEnd::Gone => {
                        tracing::info!(resource = %lw.describe(), %rv, "resourceVersion too old (410 Gone): relisting");
                        bump(&self.counters.relists_after_gone);
                        continue;
                    }
                }
                resume = Some(rv);
            }
        }
        .boxed()
    }

    fn list_params(&self, limit: Option<u32>, continue_token: Option<String>) -> ListParams {
        ListParams {
            label_selector: self.config.label_selector.clone(),
            field_selector: self.config.field_selector.clone(),
            limit,
            continue_token,
            ..ListParams::default()
        }
    }

    /// Lists every page; returns the pages, their object count and the list's resourceVersion. An
    /// expired continue token (410 between pages) falls back to one unpaged list, as upstream's pager
    /// does.
    async fn list_all(
        &self,
        lw: &dyn Edge,
    ) -> Result<(Vec<AnyObject>, usize, String), kube::Error> {
        let mut pages = Vec::new();
        let mut count = 0;
        let mut token: Option<String> = None;
        let mut rv: Option<String> = None;
        let mut limit = self.config.page_size;
        loop {
            let had_token = token.is_some();
            let page = match lw.list(self.list_params(limit, token.take())).await {
                Ok(page) => page,
                Err(e) if had_token && is_gone(&e) => {
                    tracing::info!(resource = %lw.describe(), "continue token expired: listing in one request");
                    pages.clear();
                    count = 0;
                    rv = None;
                    limit = None;
                    continue;
                }
                Err(e) => return Err(e),
            };
            if rv.is_none() {
                rv = page.resource_version;
            }
            count += page.len;
            pages.push(page.items);
            match page.continue_token {
                Some(c) if !c.is_empty() => token = Some(c),
                _ => break,
            }
        }
        bump(&self.counters.lists);
        Ok((pages, count, rv.unwrap_or_default()))
    }

    fn watch_params(&self) -> WatchParams {
        let max = self.config.watch_timeout.as_secs().clamp(1, 290);
        let min = (max / 2).max(1);
        let timeout = min + ((max - min) as f64 * random_fraction()) as u64;
        WatchParams {
            label_selector: self.config.label_selector.clone(),
            field_selector: self.config.field_selector.clone(),
            timeout: Some(timeout as u32),
            bookmarks: true,
            ..WatchParams::default()
        }
    }

    /// One watch from `rv`; returns how it ended and the resourceVersion to resume from.
    async fn watch_once(
        &self,
        lw: &dyn Edge,
        mut rv: String,
        sink: &dyn ErasedSink,
    ) -> (WatchEnd, String) {
        bump(&self.counters.watches);
        let started = Instant::now();
        let params = self.watch_params();
        let params_timeout = params.timeout.unwrap_or(290);
        let mut stream = match lw.watch(params, rv.clone()).await {
            Ok(stream) => stream,
            Err(e) if is_gone(&e) => return (WatchEnd::Gone, rv),
            Err(e) => {
                tracing::debug!(resource = %lw.describe(), error = %e, "watch failed");
                return (WatchEnd::Failed { delivered: false }, rv);
            }
        };
        let mut delivered = false;
        // The server ends the watch after its timeout; one that stays silent well past it (a dead
        // connection the OS has not noticed, a server that never closes) is abandoned and resumed.
        let deadline = tokio::time::Instant::from_std(started)
            + Duration::from_secs(u64::from(params_timeout))
            + WATCH_GRACE;
        loop {
            let item = match tokio::time::timeout_at(deadline, stream.next()).await {
                Ok(Some(item)) => item,
                Ok(None) => break,
                Err(_) => {
                    tracing::info!(resource = %lw.describe(), "watch outlived its timeout: reconnecting");
                    return (WatchEnd::Closed { healthy: true }, rv);
                }
            };
            let (kind, object, obj_rv) = match item {
                Ok(ErasedEvent::Object {
                    kind,
                    object,
                    resource_version,
                }) => (kind, object, resource_version),
                Ok(ErasedEvent::Bookmark(bookmark_rv)) => {
                    bump(&self.counters.bookmarks);
                    if !bookmark_rv.is_empty() {
                        rv = bookmark_rv;
                        self.set_last_sync(&rv);
                    }
                    continue;
                }
                Ok(ErasedEvent::Error(status)) if status.code == 410 => {
                    return (WatchEnd::Gone, rv)
                }
                Ok(ErasedEvent::Error(status)) => {
                    tracing::warn!(resource = %lw.describe(), code = status.code, message = %status.message, "watch error event");
                    return (WatchEnd::Failed { delivered }, rv);
                }
                Err(e) if is_gone(&e) => return (WatchEnd::Gone, rv),
                Err(e) => {
                    tracing::debug!(resource = %lw.describe(), error = %e, "watch stream broke");
                    return (WatchEnd::Failed { delivered }, rv);
                }
            };
            bump(&self.counters.events);
            sink.event(kind, object);
            delivered = true;
            if let Some(v) = obj_rv.filter(|v| !v.is_empty()) {
                rv = v;
                self.set_last_sync(&rv);
            }
        }
        let healthy = delivered || started.elapsed() >= Duration::from_secs(1);
        (WatchEnd::Closed { healthy }, rv)
    }
}

#[cfg(test)]
#[path = "reflector_tests.rs"]
pub(crate) mod tests;
