//! The watch cache (upstream `k8s.io/apiserver/pkg/storage/cacher`: `Cacher`, `watchCache`,
//! `cacheWatcher`): every resource's objects in memory, fed by one store watch, serving lists and watches.
//!
//! Differences from upstream, on purpose:
//! - One store watch on the whole key space feeds the caches of every resource, so each cache knows the
//!   global revision it has caught up to even when its own resource is idle. Consistent lists wait until
//!   the caches have seen the store's current revision, then read memory.
//! - Each object is kept as the JSON bytes served to clients; an event's watch frame is built once, on
//!   first use, and the same bytes go to every watcher (upstream's `cachingObject`).
//! - A watch from a revision older than the in-memory window is served by a direct store watch rather
//!   than failing, so any revision the store still keeps can be resumed from.
//! - A watcher whose buffer fills is closed instead of slowing the others; the client re-watches.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use storage::{EventKind, ListOptions, Store};
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
            frames: Default::default(),
        }
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
    inner: RwLock<CacheInner>,
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
            inner: RwLock::new(CacheInner::default()),
        }
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
                    .map(|o| {
                        let e = Arc::new(CacheEvent::new(o.rv, false, o.clone(), None));
                        (e, EventType::Added)
                    })
                    .collect();
                (events, current)
            }
            WatchStart::After(rv) => {
                if rv < inner.window_start {
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
                inner.objects.insert(key, obj.clone());
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
        let cache_event = Arc::new(cache_event);
        if inner.ring.len() >= RING_CAPACITY {
            if let Some(oldest) = inner.ring.pop_front() {
                inner.window_start = oldest.rv;
            }
        }
        inner.ring.push_back(cache_event.clone());
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
    fn reset(&self, objects: BTreeMap<String, Arc<CachedObject>>, revision: i64) {
        let mut inner = self.write();
        inner.objects = objects;
        inner.ring.clear();
        inner.window_start = revision;
        inner.watchers.clear();
    }

    pub fn len(&self) -> usize {
        self.read().objects.len()
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

    /// Waits until the caches have seen `revision`, at most `timeout`. Returns whether they did.
    pub async fn wait_for(&self, revision: i64, timeout: Duration) -> bool {
        let mut rx = self.revision.subscribe();
        tokio::time::timeout(timeout, rx.wait_for(|r| *r >= revision))
            .await
            .map(|r| r.is_ok())
            .unwrap_or(false)
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
                revision,
            );
        }
        self.revision.send_replace(revision);
        let mut stream = store.watch("/", revision).await?;
        while let Some(item) = stream.next().await {
            let event = item?;
            let rv = event.revision();
            if let Some(storage) = storage_of(&event.kv.key) {
                self.ensure_storage(storage).apply(&event);
            }
            self.revision.send_replace(rv);
        }
        Err(storage::Error::Closed)
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
mod cache_tests {
    use super::*;
    use bytes::Bytes;
    use storage::{Event, KeyValue};

    fn put(key: &str, labels: &str, rv: i64, prev: Option<(&str, i64)>) -> Event {
        let obj = |l: &str| {
            Bytes::from(format!(
                r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{}","namespace":"ns","labels":{{"app":"{l}"}}}}}}"#,
                key.rsplit('/').next().unwrap()
            ))
        };
        Event {
            kind: EventKind::Put,
            kv: KeyValue {
                key: key.into(),
                value: obj(labels),
                create_revision: rv,
                mod_revision: rv,
            },
            prev: prev.map(|(l, r)| KeyValue {
                key: key.into(),
                value: obj(l),
                create_revision: r,
                mod_revision: r,
            }),
        }
    }

    fn filter(sel: &str) -> Filter {
        Filter::new("", "configmaps", None, Some(sel), None).unwrap()
    }

    #[test]
    fn selection_transitions_become_added_and_deleted() {
        let cache = WatchCache::new("configmaps", "", "configmaps");
        let sub = cache
            .subscribe(filter("app=a"), WatchStart::After(0), 0)
            .ok()
            .unwrap();
        let mut live = sub.live;
        cache.apply(&put("/configmaps/ns/x", "a", 2, None));
        cache.apply(&put("/configmaps/ns/x", "b", 3, Some(("a", 2))));
        cache.apply(&put("/configmaps/ns/x", "a", 4, Some(("b", 3))));
        let kinds: Vec<EventType> = std::iter::from_fn(|| live.try_recv().ok())
            .map(|(_, t)| t)
            .collect();
        assert_eq!(
            kinds,
            [EventType::Added, EventType::Deleted, EventType::Added]
        );
        let frame = cache.read().ring[1].json_frame(EventType::Deleted);
        let v: serde_json::Value = serde_json::from_slice(&frame).unwrap();
        assert_eq!(v["type"], "DELETED");
        assert_eq!(v["object"]["metadata"]["resourceVersion"], "3");
    }

    #[test]
    fn replay_from_the_ring_and_too_old_outside_it() {
        let cache = WatchCache::new("configmaps", "", "configmaps");
        cache.reset(BTreeMap::new(), 1);
        for rv in 2..10 {
            cache.apply(&put(&format!("/configmaps/ns/o{rv}"), "a", rv, None));
        }
        let sub = cache
            .subscribe(filter("app=a"), WatchStart::After(5), 9)
            .ok()
            .unwrap();
        let replayed: Vec<i64> = sub.initial.iter().map(|(e, _)| e.rv).collect();
        assert_eq!(replayed, [6, 7, 8, 9]);
        let initial = cache
            .subscribe(Filter::default(), WatchStart::InitialState, 9)
            .ok()
            .unwrap();
        assert_eq!(initial.initial.len(), 8);
        assert!(initial.initial.iter().all(|(_, t)| *t == EventType::Added));
        assert!(matches!(
            cache.subscribe(Filter::default(), WatchStart::After(0), 9),
            Err(SubscribeError::TooOld)
        ));
    }

    #[test]
    fn a_watcher_that_stops_reading_is_dropped_not_waited_for() {
        let cache = WatchCache::new("configmaps", "", "configmaps");
        let slow = cache
            .subscribe(Filter::default(), WatchStart::After(0), 0)
            .ok()
            .unwrap();
        let fast = cache
            .subscribe(Filter::default(), WatchStart::After(0), 0)
            .ok()
            .unwrap();
        let mut fast_live = fast.live;
        let mut received = 0;
        for rv in 2..(WATCHER_BUFFER as i64 + 10) {
            cache.apply(&put(&format!("/configmaps/ns/o{}", rv % 7), "a", rv, None));
            while fast_live.try_recv().is_ok() {
                received += 1;
            }
        }
        assert_eq!(
            received,
            WATCHER_BUFFER + 8,
            "the reading watcher got every event"
        );
        assert_eq!(
            cache.read().watchers.len(),
            1,
            "the full watcher was closed"
        );
        drop(slow);
    }
}
