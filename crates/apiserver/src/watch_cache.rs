//! The watch cache (upstream `k8s.io/apiserver/pkg/storage/cacher`: `Cacher`, `watchCache`,
//! `cacheWatcher`): every resource's objects in memory, fed by one store watch, serving lists and watches.
//!
//! Differences from upstream, on purpose:
//! - One store watch on the whole key space feeds the caches of every resource, so each cache knows the
//!   global revision it has caught up to even when its own resource is idle. Consistent lists wait until
//!   the caches have seen the store's current revision, then read memory (upstream's
//!   ConsistentListFromCache). Writes the watch does not see (keys outside the prefix, another program
//!   on the same etcd, upstream's `compact_rev_key`) move that revision too: while someone waits, the
//!   store watch is asked for progress every 100 ms (upstream's `progress` requester), and its answer
//!   moves the caches' revision. A store that cannot answer (etcd before 3.4.31/3.5.13) gets a short
//!   wait instead ([`CacheSet::wait_consistent`]), after which lists read the store.
//! - Each object is kept as the JSON bytes served to clients; an event's watch frame is built once, on
//!   first use, and the same bytes go to every watcher (upstream's `cachingObject`).
//! - A watch from a revision older than the in-memory window is served by a direct store watch rather
//!   than failing, so any revision the store still keeps can be resumed from.
//! - A watcher whose buffer fills is closed instead of slowing the others; the client re-watches.
//! - Events keep no objects in memory (upstream's `DefaultWatchCacheSizes` sets their cache size to 0,
//!   so the registry serves them from etcd): see [`keeps_objects`]. Their cache still hands live
//!   changes to watchers, from the one store watch, so a watch of events costs no store watch of its
//!   own; reads, lists and initial states come from the store.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use storage::{EventKind, ListOptions, ProgressRequester, Store, WatchItem};
use tokio::sync::mpsc;

use crate::filter::{Attrs, Filter};
use crate::objects;
use crate::response::Format;

/// Events kept per resource for watches that resume from a recent revision.
const RING_CAPACITY: usize = 4096;
/// Events buffered per watcher before it is considered too slow and closed.
const WATCHER_BUFFER: usize = 16_384;
/// Keys read per page when loading the caches.
const LOAD_PAGE: usize = 10_000;
/// How often the store watch is asked for progress while a consistent read waits (upstream's
/// `progressRequestPeriod`).
const PROGRESS_PERIOD: Duration = Duration::from_millis(100);
/// How long a consistent read waits for the caches when the store cannot report progress: long enough
/// for events in flight, short enough that a revision moved by writes the watch never sees costs
/// little before the caller reads the store instead.
pub const NO_PROGRESS_WAIT: Duration = Duration::from_millis(250);

/// One object version as served.
#[derive(Debug)]
pub struct CachedObject {
    /// JSON with metadata.resourceVersion set.
    pub json: Bytes,
    pub attrs: Attrs,
    pub rv: i64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change of one object. For a delete, `object` is the last state with the delete's revision.
#[derive(Debug)]
pub struct CacheEvent {
    pub rv: i64,
    pub deleted: bool,
    pub object: Arc<CachedObject>,
    pub prev: Option<Arc<CachedObject>>,
    /// The object's key, for the events kept in the ring (pages at older revisions are rebuilt from
    /// it: `watch_cache_pages.rs`); empty for synthetic and store-read events, which never are.
    pub key: String,
    /// Each frame built once, however many watchers receive it: by format, then by event type.
    frames: [[OnceLock<Bytes>; 3]; 3],
}

impl CacheEvent {
    fn new(
        rv: i64,
        deleted: bool,
        object: Arc<CachedObject>,
        prev: Option<Arc<CachedObject>>,
    ) -> Self {
        CacheEvent {
            rv,
            deleted,
            object,
            prev,
            key: String::new(),
            frames: Default::default(),
        }
    }

    /// The synthetic ADDED event of an object in a watch's initial state.
    pub fn added(object: Arc<CachedObject>) -> CacheEvent {
        CacheEvent::new(object.rv, false, object, None)
    }

    /// An event read directly from the store (a watch older than the in-memory window).
    pub fn from_store(cache: &WatchCache, event: &storage::Event) -> Option<CacheEvent> {
        let rv = event.revision();
        let prev = event
            .prev
            .as_ref()
            .and_then(|p| cache.make_object(&p.value, p.mod_revision));
        match event.kind {
            EventKind::Put => {
                let obj = cache.make_object(&event.kv.value, rv)?;
                Some(CacheEvent::new(rv, false, obj, prev))
            }
            EventKind::Delete => {
                let raw = event
                    .prev
                    .as_ref()
                    .map(|p| p.value.clone())
                    .unwrap_or_default();
                let obj = cache.make_object(&raw, rv)?;
                Some(CacheEvent::new(rv, true, obj, prev))
            }
        }
    }

    /// What a watcher with `filter` sees of this event, if anything: an object entering the selection
    /// is ADDED, leaving it is DELETED (upstream's `cacheWatcher.convertToWatchEvent`).
    pub fn type_for(&self, filter: &Filter) -> Option<EventType> {
        let now = !self.deleted && filter.matches(&self.object.attrs);
        let before = match (&self.prev, self.deleted) {
            (_, true) => filter.matches(&self.object.attrs),
            (Some(p), false) => filter.matches(&p.attrs),
            (None, false) => false,
        };
        match (before, now) {
            (false, true) => Some(EventType::Added),
            (true, true) => Some(EventType::Modified),
            (true, false) => Some(EventType::Deleted),
            (false, false) => None,
        }
    }

    /// The JSON watch frame for `kind`, built once and shared. An object leaving the selection is sent
    /// as DELETED with its new state, as upstream does.
    pub fn json_frame(&self, kind: EventType) -> Bytes {
        self.frame(kind, Format::Json, || {
            json_frame(kind.as_str(), &self.object.json)
        })
    }

    /// The frame of this event as `kind` in `format`, built by `build` the first time it is asked for.
    pub fn frame(&self, kind: EventType, format: Format, build: impl FnOnce() -> Bytes) -> Bytes {
        self.frames[format.index()][kind as usize]
            .get_or_init(build)
            .clone()
    }
}

pub fn json_frame(kind: &str, object: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(object.len() + 32);
    b.extend_from_slice(b"{\"type\":\"");
    b.extend_from_slice(kind.as_bytes());
    b.extend_from_slice(b"\",\"object\":");
    b.extend_from_slice(object);
    b.extend_from_slice(b"}\n");
    b.freeze()
}

/// A live watcher registered with a cache.
struct Watcher {
    filter: Filter,
    tx: mpsc::Sender<(Arc<CacheEvent>, EventType)>,
}

#[derive(Default)]
struct CacheInner {
    objects: BTreeMap<String, Arc<CachedObject>>,
    /// How many objects the store holds, for a cache that keeps none (list cost estimates).
    uncached_count: usize,
    ring: VecDeque<Arc<CacheEvent>>,
    /// Every event of this resource after this revision is in `ring`.
    window_start: i64,
    watchers: Vec<Watcher>,
}

/// The cache of one resource (one storage prefix).
pub struct WatchCache {
    pub storage: String,
    group: String,
    resource: String,
    /// The paths selectors read: all of an event's object that is decoded.
    shape: crate::selectable::Shape,
    /// Whether objects and recent events are kept ([`keeps_objects`]).
    keeps: bool,
    inner: RwLock<CacheInner>,
}

/// Whether the cache of a storage prefix keeps its objects and recent events in memory: all but
/// Events, as upstream's `DefaultWatchCacheSizes` (`events` 0: "events should not be cached"). At
/// density they are the most numerous objects after pods (a Scheduled event per pod, a
/// SuccessfulCreate per pod on its ReplicaSet) and nobody lists them often; reading them from the
/// store costs a query, where caching them cost ~2 KiB of server memory per pod.
pub fn keeps_objects(storage: &str) -> bool {
    storage != "events"
}

/// Where a watch starts.
pub enum WatchStart {
    /// Synthetic ADDED events for the current state, then changes (resourceVersion "" or "0").
    InitialState,
    /// Changes after this revision.
    After(i64),
}

/// A registered watch: events to send first, then the live channel.
pub struct Subscription {
    pub initial: Vec<(Arc<CacheEvent>, EventType)>,
    pub live: mpsc::Receiver<(Arc<CacheEvent>, EventType)>,
    /// The revision the initial events bring the watcher to.
    pub start_rv: i64,
}

/// Why a watch cannot be served from memory.
pub enum SubscribeError {
    /// The revision is older than the in-memory window: serve it from the store.
    TooOld,
}

impl WatchCache {
    fn new(storage: &str, group: &str, resource: &str) -> WatchCache {
        // Objects are kept in their stored form, whichever served resource asked first.
        let (group, resource) = crate::filter::stored_resource(group, resource);
        WatchCache {
            storage: storage.to_string(),
            group: group.to_string(),
            resource: resource.to_string(),
            shape: crate::selectable::Shape::for_selectors(crate::filter::selectable_fields(
                group, resource,
            )),
            keeps: keeps_objects(storage),
            inner: RwLock::new(CacheInner::default()),
        }
    }

    /// Whether [`WatchCache::get`], [`WatchCache::list`] and a watch's initial state see the objects;
    /// when not, callers read the store.
    pub fn keeps_objects(&self) -> bool {
        self.keeps
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, CacheInner> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, CacheInner> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }

    pub fn make_object(&self, raw: &[u8], rv: i64) -> Option<Arc<CachedObject>> {
        let json = objects::with_resource_version(raw, rv);
        let value = crate::selectable::decode(&json, &self.shape).ok()?;
        let attrs = Attrs::of(&self.group, &self.resource, &value);
        Some(Arc::new(CachedObject { json, attrs, rv }))
    }

    /// The objects under `key_prefix` that `filter` selects, in key order.
    pub fn list(&self, key_prefix: &str, filter: &Filter) -> Vec<Arc<CachedObject>> {
        let inner = self.read();
        inner
            .objects
            .range(key_prefix.to_string()..)
            .take_while(|(k, _)| k.starts_with(key_prefix))
            .filter(|(_, o)| filter.matches(&o.attrs))
            .map(|(_, o)| o.clone())
            .collect()
    }

    pub fn get(&self, key: &str) -> Option<Arc<CachedObject>> {
        self.read().objects.get(key).cloned()
    }

    /// Puts an object version back in place, as if the cache had not seen the writes after it.
    #[cfg(test)]
    pub(crate) fn make_stale(&self, key: &str, obj: Arc<CachedObject>) {
        self.write().objects.insert(key.to_string(), obj);
    }

    /// Registers a watcher. Must be called with the global revision `current` the cache has reached.
    pub fn subscribe(
        &self,
        filter: Filter,
        start: WatchStart,
        current: i64,
    ) -> Result<Subscription, SubscribeError> {
        let mut inner = self.write();
        let (initial, start_rv) = match start {
            WatchStart::InitialState => {
                let events = inner
                    .objects
                    .values()
                    .filter(|o| filter.matches(&o.attrs))
                    .map(|o| (Arc::new(CacheEvent::added(o.clone())), EventType::Added))
                    .collect();
                (events, current)
            }
            WatchStart::After(rv) => {
                // Without a ring, a watch from a revision the caches have not reached would get the
                // events up to it twice (the caller's store read, then live): the store serves it.
                if rv < inner.window_start || (!self.keeps && rv > current) {
                    return Err(SubscribeError::TooOld);
                }
                let events = inner
                    .ring
                    .iter()
                    .filter(|e| e.rv > rv)
                    .filter_map(|e| e.type_for(&filter).map(|t| (e.clone(), t)))
                    .collect();
                (events, current.max(rv))
            }
        };
        let (tx, live) = mpsc::channel(WATCHER_BUFFER);
        inner.watchers.push(Watcher { filter, tx });
        Ok(Subscription {
            initial,
            live,
            start_rv,
        })
    }

    /// Applies one store event and hands it to the watchers it concerns.
    fn apply(&self, event: &storage::Event) {
        if !self.keeps {
            return self.apply_uncached(event);
        }
        let rv = event.revision();
        let key = event.kv.key.clone();
        let mut inner = self.write();
        let prev = inner.objects.get(&key).cloned();
        let cache_event = match event.kind {
            EventKind::Put => {
                let Some(obj) = self.make_object(&event.kv.value, rv) else {
                    tracing::warn!(key, "watch cache: undecodable object skipped");
                    return;
                };
                inner.objects.insert(key.clone(), obj.clone());
                CacheEvent::new(rv, false, obj, prev)
            }
            EventKind::Delete => {
                inner.objects.remove(&key);
                let raw = event
                    .prev
                    .as_ref()
                    .map(|p| p.value.clone())
                    .unwrap_or_default();
                let Some(obj) = self.make_object(&raw, rv) else {
                    return;
                };
                CacheEvent::new(rv, true, obj, prev)
            }
        };
        let cache_event = Arc::new(CacheEvent { key, ..cache_event });
        if inner.ring.len() >= RING_CAPACITY {
            if let Some(oldest) = inner.ring.pop_front() {
                inner.window_start = oldest.rv;
            }
        }
        inner.ring.push_back(cache_event.clone());
        Self::dispatch(&mut inner, &cache_event);
    }

    /// [`WatchCache::apply`] for a cache that keeps no objects: counts them, moves the window to this
    /// event (no older one is in memory), and builds the event only when someone watches.
    fn apply_uncached(&self, event: &storage::Event) {
        let mut inner = self.write();
        match (event.kind, &event.prev) {
            (EventKind::Put, None) => inner.uncached_count += 1,
            (EventKind::Delete, _) => inner.uncached_count = inner.uncached_count.saturating_sub(1),
            (EventKind::Put, Some(_)) => {}
        }
        inner.window_start = event.revision();
        inner.watchers.retain(|w| !w.tx.is_closed());
        if inner.watchers.is_empty() {
            return;
        }
        let Some(cache_event) = CacheEvent::from_store(self, event) else {
            tracing::warn!(
                key = event.kv.key,
                "watch cache: undecodable object skipped"
            );
            return;
        };
        Self::dispatch(&mut inner, &Arc::new(cache_event));
    }

    /// Hands an event to the watchers it concerns, dropping the closed and the too slow.
    fn dispatch(inner: &mut CacheInner, cache_event: &Arc<CacheEvent>) {
        inner.watchers.retain(|w| {
            if w.tx.is_closed() {
                return false;
            }
            match cache_event.type_for(&w.filter) {
                None => true,
                // A full buffer means a watcher too slow to keep up: drop it; its client re-watches.
                Some(t) => w.tx.try_send((cache_event.clone(), t)).is_ok(),
            }
        });
    }

    /// Replaces the contents after a (re)load; current watchers are closed so their clients re-watch.
    fn reset(&self, objects: BTreeMap<String, Arc<CachedObject>>, count: usize, revision: i64) {
        let mut inner = self.write();
        inner.objects = objects;
        inner.uncached_count = count;
        inner.ring.clear();
        inner.window_start = revision;
        inner.watchers.clear();
    }

    /// The objects of the resource: those kept, or the store's count for a cache that keeps none.
    pub fn len(&self) -> usize {
        let inner = self.read();
        if self.keeps {
            inner.objects.len()
        } else {
            inner.uncached_count
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The caches of all resources and the task feeding them.
pub struct CacheSet {
    caches: RwLock<HashMap<String, Arc<WatchCache>>>,
    revision: tokio::sync::watch::Sender<i64>,
    /// The store's compacted revision as last reported: history before it is not served from memory.
    compacted: std::sync::atomic::AtomicI64,
    progress: Progress,
}

/// Progress requests on demand: only while someone waits for a revision the caches have not reached.
#[derive(Default)]
struct Progress {
    /// The current store watch's requester; `None` between watches or when the store has none.
    requester: std::sync::Mutex<Option<ProgressRequester>>,
    waiting: std::sync::atomic::AtomicUsize,
    /// Woken when the first waiter arrives.
    wake: tokio::sync::Notify,
}

/// Counts one waiter for as long as it lives.
struct Waiting<'a>(&'a Progress);

impl<'a> Waiting<'a> {
    fn new(progress: &'a Progress) -> Self {
        progress
            .waiting
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        progress.wake.notify_one();
        Waiting(progress)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0
            .waiting
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

impl Progress {
    fn requester(&self) -> Option<ProgressRequester> {
        self.requester
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn set_requester(&self, requester: Option<ProgressRequester>) {
        *self.requester.lock().unwrap_or_else(|e| e.into_inner()) = requester;
    }

    /// Completes when a request is due: someone waits, and the last request (if any) is a period old.
    async fn due(&self, last: Option<tokio::time::Instant>) {
        loop {
            let woken = self.wake.notified();
            if self.waiting.load(std::sync::atomic::Ordering::Acquire) > 0 {
                break;
            }
            woken.await;
        }
        if let Some(last) = last {
            tokio::time::sleep_until(last + PROGRESS_PERIOD).await;
        }
    }
}

/// The storage prefix a key belongs to: `/pods/ns/x` -> `pods`; group-qualified prefixes
/// (`/events.k8s.io/events/...`, custom resources `/example.com/widgets/...`) take two segments.
pub fn storage_of(key: &str) -> Option<&str> {
    let rest = key.strip_prefix('/')?;
    let first_end = rest.find('/')?;
    if rest[..first_end].contains('.') {
        let second = rest[first_end + 1..].find('/')?;
        Some(&rest[..first_end + 1 + second])
    } else {
        Some(&rest[..first_end])
    }
}

/// Keeps an in-memory view of one resource in step with its cache, as upstream's in-process
/// consumers do with informers: `reset`, then `apply` of every current object, before this returns
/// (so the view is never empty once the server serves); then each change, from a task. When the
/// cache closes the watcher for falling behind, the view is reloaded from scratch.
pub fn follow<R, A>(caches: &Arc<CacheSet>, cache: Arc<WatchCache>, reset: R, apply: A)
where
    R: Fn() + Send + 'static,
    A: Fn(&CacheEvent, EventType) + Send + 'static,
{
    let caches = caches.clone();
    let mut live = load(&caches, &cache, &reset, &apply);
    tokio::spawn(async move {
        loop {
            if let Some(rx) = live.as_mut() {
                while let Some((event, event_type)) = rx.recv().await {
                    apply(&event, event_type);
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            live = load(&caches, &cache, &reset, &apply);
        }
    });
}

/// Subscribes from the current state, resets the view and applies that state.
fn load(
    caches: &CacheSet,
    cache: &WatchCache,
    reset: &impl Fn(),
    apply: &impl Fn(&CacheEvent, EventType),
) -> Option<mpsc::Receiver<(Arc<CacheEvent>, EventType)>> {
    let sub = cache
        .subscribe(
            Default::default(),
            WatchStart::InitialState,
            caches.revision(),
        )
        .ok()?;
    reset();
    for (event, event_type) in &sub.initial {
        apply(event, *event_type);
    }
    Some(sub.live)
}

impl CacheSet {
    pub fn new() -> Arc<CacheSet> {
        let (revision, _) = tokio::sync::watch::channel(0);
        Arc::new(CacheSet {
            caches: RwLock::new(HashMap::new()),
            revision,
            compacted: std::sync::atomic::AtomicI64::new(0),
            progress: Progress::default(),
        })
    }

    /// Makes sure a cache exists for a resource's storage prefix.
    pub fn ensure(&self, storage: &str, group: &str, resource: &str) -> Arc<WatchCache> {
        if let Some(c) = self
            .caches
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(storage)
        {
            return c.clone();
        }
        let mut caches = self.caches.write().unwrap_or_else(|e| e.into_inner());
        caches
            .entry(storage.to_string())
            .or_insert_with(|| Arc::new(WatchCache::new(storage, group, resource)))
            .clone()
    }

    /// The cache of a storage prefix met in the store, made on first sight: custom resources' prefixes
    /// (`<group>/<plural>`) appear when their CRD is created, and on start before the CRDs are read.
    fn ensure_storage(&self, storage: &str) -> Arc<WatchCache> {
        if let Some(c) = self.get(storage) {
            return c;
        }
        let (group, resource) = storage.split_once('/').unwrap_or(("", storage));
        self.ensure(storage, group, resource)
    }

    pub fn get(&self, storage: &str) -> Option<Arc<WatchCache>> {
        self.caches
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(storage)
            .cloned()
    }

    /// Records a store compaction: watches from before `revision` then get 410, as they would from the
    /// store, even while the events are still in memory.
    pub fn set_compacted(&self, revision: i64) {
        self.compacted
            .fetch_max(revision, std::sync::atomic::Ordering::AcqRel);
    }

    pub fn compacted(&self) -> i64 {
        self.compacted.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The global revision every cache has caught up to.
    pub fn revision(&self) -> i64 {
        *self.revision.borrow()
    }

    /// Waits until the caches have seen `revision`, at most `timeout`, asking the store watch for
    /// progress meanwhile. Returns whether they did.
    pub async fn wait_for(&self, revision: i64, timeout: Duration) -> bool {
        let mut rx = self.revision.subscribe();
        if *rx.borrow_and_update() >= revision {
            return true;
        }
        let _waiting = Waiting::new(&self.progress);
        tokio::time::timeout(timeout, rx.wait_for(|r| *r >= revision))
            .await
            .map(|r| r.is_ok())
            .unwrap_or(false)
    }

    /// Whether the store watch answers progress requests, so a wait for the current revision ends
    /// as soon as the watch has caught up, whoever moved the revision.
    pub fn reports_progress(&self) -> bool {
        self.progress.requester().is_some()
    }

    /// [`CacheSet::wait_for`] the store's current revision, for a consistent read: at most `timeout`
    /// when the store reports progress, else at most [`NO_PROGRESS_WAIT`] (the revision may have been
    /// moved by writes the watch never sees). Returns whether the caches reached it.
    pub async fn wait_consistent(&self, current: i64, timeout: Duration) -> bool {
        let timeout = if self.reports_progress() {
            timeout
        } else {
            timeout.min(NO_PROGRESS_WAIT)
        };
        self.wait_for(current, timeout).await
    }

    /// Moves the caches' revision forward (never back).
    fn advance(&self, revision: i64) {
        self.revision.send_if_modified(|current| {
            let moved = revision > *current;
            if moved {
                *current = revision;
            }
            moved
        });
    }

    pub fn subscribe_revision(&self) -> tokio::sync::watch::Receiver<i64> {
        self.revision.subscribe()
    }

    /// Loads every cache from the store, then follows the store's changes until it fails; then loads
    /// again. Runs until the store closes.
    pub async fn run(self: Arc<Self>, store: Arc<dyn Store>) {
        loop {
            match self.load_and_follow(&store).await {
                Err(storage::Error::Closed) => return,
                Err(e) => {
                    tracing::warn!(error = %e, "watch cache: store watch ended; reloading");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Ok(()) => return,
            }
        }
    }

    async fn load_and_follow(&self, store: &Arc<dyn Store>) -> Result<(), storage::Error> {
        let mut by_storage: HashMap<String, BTreeMap<String, Arc<CachedObject>>> = HashMap::new();
        let mut uncached: HashMap<String, usize> = HashMap::new();
        let mut after: Option<String> = None;
        let mut revision = None;
        loop {
            let page = store
                .list(ListOptions {
                    prefix: "/",
                    start_after: after.as_deref(),
                    limit: Some(LOAD_PAGE),
                    at_revision: revision,
                })
                .await?;
            revision = Some(page.revision);
            after = page.items.last().map(|kv| kv.key.clone());
            for kv in page.items {
                let Some(storage) = storage_of(&kv.key) else {
                    continue;
                };
                let cache = self.ensure_storage(storage);
                if !cache.keeps {
                    *uncached.entry(storage.to_string()).or_default() += 1;
                    continue;
                }
                if let Some(obj) = cache.make_object(&kv.value, kv.mod_revision) {
                    by_storage
                        .entry(storage.to_string())
                        .or_default()
                        .insert(kv.key, obj);
                }
            }
            if !page.more {
                break;
            }
        }
        let revision = revision.unwrap_or(0);
        let caches: Vec<Arc<WatchCache>> = self
            .caches
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect();
        for cache in caches {
            cache.reset(
                by_storage.remove(&cache.storage).unwrap_or_default(),
                uncached.remove(&cache.storage).unwrap_or_default(),
                revision,
            );
        }
        self.revision.send_replace(revision);
        let watch = store.watch_progress("/", revision).await?;
        let mut stream = watch.stream;
        self.progress.set_requester(watch.requester.clone());
        let result = self.follow(&mut stream, watch.requester).await;
        self.progress.set_requester(None);
        result
    }

    /// Applies the store watch's events, and asks it for progress while someone waits.
    async fn follow(
        &self,
        stream: &mut storage::ProgressWatchStream,
        requester: Option<ProgressRequester>,
    ) -> Result<(), storage::Error> {
        let mut last_request = None;
        loop {
            let (progress, asks, last) = (&self.progress, requester.is_some(), last_request);
            let due = async move {
                if asks {
                    progress.due(last).await
                } else {
                    std::future::pending().await
                }
            };
            let item = tokio::select! {
                biased;
                item = stream.next() => item,
                () = due => {
                    if let Some(requester) = &requester {
                        requester.request();
                    }
                    last_request = Some(tokio::time::Instant::now());
                    continue;
                }
            };
            match item {
                None => return Err(storage::Error::Closed),
                Some(Err(e)) => return Err(e),
                Some(Ok(WatchItem::Event(event))) => {
                    if let Some(storage) = storage_of(&event.kv.key) {
                        self.ensure_storage(storage).apply(&event);
                    }
                    self.advance(event.revision());
                }
                // Every event up to it is applied: the caches are as current as the store was then.
                Some(Ok(WatchItem::Progress(revision))) => self.advance(revision),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_prefix_of_keys() {
        assert_eq!(storage_of("/pods/default/web"), Some("pods"));
        assert_eq!(storage_of("/namespaces/default"), Some("namespaces"));
        assert_eq!(
            storage_of("/events.k8s.io/events/ns/e"),
            Some("events.k8s.io/events")
        );
        assert_eq!(storage_of("/nothing"), None);
    }
}

#[cfg(test)]
#[path = "watch_cache_tests.rs"]
mod cache_tests;

#[path = "watch_cache_pages.rs"]
mod pages;
pub use pages::{CachePage, PageError, PageRequest};
