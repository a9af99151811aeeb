//! The shared informer: one reflector, one indexed cache and any number of event handlers for one
//! collection (upstream client-go `tools/cache/shared_informer.go`: `sharedIndexInformer`,
//! `sharedProcessor`, `HandleDeltas`/`processDeltas` in `controller.go`).
//!
//! The reflector task applies every delta under the informer's delivery lock: it writes the store, then
//! queues the matching notification to every handler's listener. Adding a handler takes the same lock,
//! so a handler added late gets synthetic adds for exactly the cached objects and then every later
//! change, with nothing lost or doubled in between.
//!
//! Semantics kept from upstream:
//! - an add for an object already cached is delivered as an update, a watched delete carries the final
//!   object, and a relist delivers adds for new objects, updates for objects whose resourceVersion
//!   changed (unchanged ones are not re-delivered), and `DeletedFinalStateUnknown` tombstones for cached
//!   objects missing from the list;
//! - resync re-delivers every cached object as `on_update(obj, obj)` to each handler whose resync period
//!   is due (per handler; default the informer's; 0 = off; at least 1 s);
//! - [`SharedInformer::has_synced`] is true once the initial list is in the cache; here additionally
//!   only after every handler registered by then has been called for all of it (upstream checks the
//!   queue was drained; our queue has no such point). Each registration has its own `has_synced`.
//!
//! Differences: no DeltaFIFO (see [`super::reflector`]); an informer runs once (`start` after `stop`
//! does nothing), as upstream; a panicking handler is logged and skipped.

use std::fmt::{self, Debug};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::{watch, Notify};

use super::handlers::{
    DeletedObject, HandlerRegistration, Listener, Notification, ResourceEventHandler,
};
use super::index::{object_key, IndexError, IndexFunc};
use super::reflector::{
    ApiListerWatcher, Delta, DeltaSink, ListerWatcher, Reflector, ReflectorConfig, ReflectorStats,
    TransformError, TransformFunc,
};
use super::store::{in_key_order, Store};

/// Upstream's `minimumResyncPeriod`: shorter non-zero resync periods are raised to it.
pub const MINIMUM_RESYNC_PERIOD: Duration = Duration::from_secs(1);

/// How an informer lists, watches and resyncs.
#[derive(Clone, Debug, Default)]
pub struct InformerConfig {
    pub reflector: ReflectorConfig,
    /// The default resync period of handlers; zero = no resyncs.
    pub resync_period: Duration,
}

impl InformerConfig {
    pub fn new() -> Self {
        Self::default()
    }

    /// Only objects matching this label selector.
    pub fn labels(mut self, selector: impl Into<String>) -> Self {
        self.reflector.label_selector = Some(selector.into());
        self
    }

    /// Only objects matching this field selector.
    pub fn fields(mut self, selector: impl Into<String>) -> Self {
        self.reflector.field_selector = Some(selector.into());
        self
    }

    /// Objects are cached without `metadata.managedFields` (see [`ReflectorConfig`]).
    pub fn trim_managed_fields(mut self) -> Self {
        self.reflector.trim_managed_fields = true;
        self
    }

    pub fn resync(mut self, period: Duration) -> Self {
        self.resync_period = period;
        self
    }

    /// Retry waits after failures: first `initial`, doubling up to `max`.
    pub fn backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.reflector.initial_backoff = initial;
        self.reflector.max_backoff = max;
        self
    }
}

struct Delivery<K> {
    listeners: Vec<Arc<Listener<K>>>,
    /// The initial list has been applied.
    listed: bool,
    /// The run task has started the listeners.
    started: bool,
    /// Sync flags of the handlers registered when the initial list was applied.
    initial_waiters: Vec<watch::Receiver<bool>>,
}

impl<K: Send + Sync + 'static> Delivery<K> {
    fn distribute(&self, make: impl Fn() -> Notification<K>) {
        for l in &self.listeners {
            l.send(make());
        }
    }
}

/// A shared informer with an indexed cache (upstream `SharedIndexInformer`).
pub struct SharedInformer<K: Clone> {
    store: Arc<Store<K>>,
    reflector: Reflector<K>,
    resync_period: Duration,
    delivery: Mutex<Delivery<K>>,
    next_id: AtomicU64,
    listed: watch::Sender<bool>,
    synced: AtomicBool,
    stopped: AtomicBool,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
    resync_wake: Notify,
}

impl<K: Clone + 'static> Debug for SharedInformer<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedInformer")
            .field("reflector", &self.reflector)
            .field("store", &self.store)
            .field("resync_period", &self.resync_period)
            .finish()
    }
}

fn resource_version<K: Resource>(obj: &K) -> Option<&str> {
    obj.meta()
        .resource_version
        .as_deref()
        .filter(|v| !v.is_empty())
}

impl<K> SharedInformer<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    /// An informer on everything `api` can list (its namespace, if any), filtered by `config`'s
    /// selectors. Works for typed kinds and for `DynamicObject`.
    pub fn from_api(api: Api<K>, config: InformerConfig) -> Arc<SharedInformer<K>> {
        SharedInformer::new(Arc::new(ApiListerWatcher::new(api)), config)
    }
}

impl<K: Resource + Clone + Send + Sync + 'static> SharedInformer<K> {
    /// An informer on any [`ListerWatcher`].
    pub fn new(lw: Arc<dyn ListerWatcher<K>>, config: InformerConfig) -> Arc<SharedInformer<K>> {
        let (listed, _) = watch::channel(false);
        Arc::new(SharedInformer {
            store: Arc::new(Store::new()),
            reflector: Reflector::new(lw, config.reflector),
            resync_period: clamp_resync(config.resync_period),
            delivery: Mutex::new(Delivery {
                listeners: Vec::new(),
                listed: false,
                started: false,
                initial_waiters: Vec::new(),
            }),
            next_id: AtomicU64::new(1),
            listed,
            synced: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
            task: Mutex::new(None),
            resync_wake: Notify::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Delivery<K>> {
        self.delivery.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The cache (upstream `GetIndexer`/`GetStore`). Read-only by convention: only the informer writes.
    pub fn store(&self) -> Arc<Store<K>> {
        self.store.clone()
    }

    /// Adds an index to the cache (upstream `AddIndexers`); existing objects are indexed at once.
    pub fn add_indexer(&self, name: &str, func: IndexFunc<K>) -> Result<(), IndexError> {
        self.store.add_indexer(name, func)
    }

    /// Installs a transform every object goes through before it is cached (upstream
    /// `SetTransform`): for caches whose readers need a few fields of large objects. Only before
    /// [`start`](Self::start), and only one. The informer may be shared: the transform must keep
    /// every field any of its users reads.
    pub fn set_transform(&self, f: TransformFunc<K>) -> Result<(), TransformError> {
        let task = self.task.lock().unwrap_or_else(|e| e.into_inner());
        if task.is_some() || self.stopped.load(Ordering::Acquire) {
            return Err(TransformError::AlreadyStarted);
        }
        self.reflector.set_transform(f)
    }

    /// The collection watched, for logs.
    pub fn describe(&self) -> String {
        self.reflector.describe()
    }

    pub fn stats(&self) -> ReflectorStats {
        self.reflector.stats()
    }

    /// The resourceVersion the cache reflects; `None` before the first list.
    pub fn last_sync_resource_version(&self) -> Option<String> {
        self.reflector.last_sync_resource_version()
    }

    /// The default resync period of handlers.
    pub fn resync_period(&self) -> Duration {
        self.resync_period
    }

    /// Registers a handler with the informer's resync period (upstream `AddEventHandler`).
    pub fn add_event_handler(&self, handler: impl ResourceEventHandler<K>) -> HandlerRegistration {
        self.add_event_handler_with_resync(handler, self.resync_period)
    }

    /// Registers a handler with its own resync period (0 = none). If the cache is already filled, the
    /// handler first gets an add for every cached object.
    pub fn add_event_handler_with_resync(
        &self,
        handler: impl ResourceEventHandler<K>,
        resync_period: Duration,
    ) -> HandlerRegistration {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let listener = Arc::new(Listener::new(
            id,
            Arc::new(handler),
            clamp_resync(resync_period),
        ));
        let registration = listener.registration();
        {
            let mut d = self.lock();
            if d.listed {
                for (_, obj) in in_key_order(self.store.snapshot()) {
                    listener.send(Notification::Add { obj, initial: true });
                }
                listener.send(Notification::Synced);
            }
            if d.started && !self.stopped.load(Ordering::Acquire) {
                listener.start();
            }
            d.listeners.push(listener);
        }
        self.resync_wake.notify_one();
        registration
    }

    /// Unregisters a handler (upstream `RemoveEventHandler`); it gets nothing more after the
    /// notifications already queued. Returns whether it was registered.
    pub fn remove_event_handler(&self, registration: &HandlerRegistration) -> bool {
        let mut d = self.lock();
        let before = d.listeners.len();
        d.listeners.retain(|l| l.id != registration.id());
        d.listeners.len() != before
    }

    /// True once the initial list is in the cache and every handler registered by then has been
    /// called for all of it. Never turns false again.
    pub fn has_synced(&self) -> bool {
        if self.synced.load(Ordering::Acquire) {
            return true;
        }
        let d = self.lock();
        if !d.listed {
            return false;
        }
        let done = d
            .initial_waiters
            .iter()
            .all(|w| *w.borrow() || w.has_changed().is_err());
        if done {
            self.synced.store(true, Ordering::Release);
        }
        done
    }

    /// Waits until [`has_synced`](Self::has_synced). Bound it with a timeout: an informer that cannot
    /// list never syncs.
    pub async fn wait_for_sync(&self) {
        let mut listed = self.listed.subscribe();
        let _ = listed.wait_for(|l| *l).await;
        let waiters = self.lock().initial_waiters.clone();
        for mut w in waiters {
            // An error means the handler was removed: nothing to wait for.
            let _ = w.wait_for(|s| *s).await;
        }
        self.synced.store(true, Ordering::Release);
    }

    /// Whether the informer is running.
    pub fn is_running(&self) -> bool {
        self.lock().started && !self.stopped.load(Ordering::Acquire)
    }

    /// Starts the informer on the current tokio runtime, once; returns whether this call started it.
    pub fn start(self: &Arc<Self>) -> bool {
        let mut task = self.task.lock().unwrap_or_else(|e| e.into_inner());
        if task.is_some() || self.stopped.load(Ordering::Acquire) {
            return false;
        }
        *task = Some(tokio::spawn(self.clone().run()));
        true
    }

    /// Stops the informer and its handlers' deliveries. It cannot be started again.
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
        if let Some(task) = self.task.lock().unwrap_or_else(|e| e.into_inner()).take() {
            task.abort();
        }
        for l in &self.lock().listeners {
            l.stop();
        }
    }

    /// Lists, watches and resyncs until the future is dropped (what [`start`](Self::start) spawns).
    pub async fn run(self: Arc<Self>) {
        {
            let mut d = self.lock();
            d.started = true;
            for l in &d.listeners {
                l.start();
            }
        }
        let sink: &dyn DeltaSink<K> = &*self;
        tokio::select! {
            _ = self.reflector.run(sink) => {}
            _ = self.resync_loop() => {}
        }
    }

    async fn resync_loop(&self) {
        loop {
            let next = self
                .lock()
                .listeners
                .iter()
                .filter_map(|l| l.next_resync_at())
                .min();
            match next {
                None => self.resync_wake.notified().await,
                Some(at) => {
                    tokio::select! {
                        _ = tokio::time::sleep_until(tokio::time::Instant::from_std(at)) => {
                            self.resync(Instant::now());
                        }
                        _ = self.resync_wake.notified() => {}
                    }
                }
            }
        }
    }

    /// Re-delivers every cached object to the handlers whose resync is due (upstream
    /// `shouldResync` + `DeltaFIFO.Resync`).
    fn resync(&self, now: Instant) {
        let d = self.lock();
        let due: Vec<&Arc<Listener<K>>> = d
            .listeners
            .iter()
            .filter(|l| l.take_resync_due(now))
            .collect();
        if due.is_empty() || !d.listed {
            return;
        }
        let objects = in_key_order(self.store.snapshot());
        for l in due {
            for (_, obj) in &objects {
                l.send(Notification::Update {
                    old: obj.clone(),
                    new: obj.clone(),
                });
            }
        }
    }

    /// A relist: the cache becomes `items`; handlers get the difference.
    fn replace(&self, d: &mut Delivery<K>, items: Vec<K>) {
        let initial = !d.listed;
        let new: Vec<Arc<K>> = items.into_iter().map(Arc::new).collect();
        let mut old = self.store.replace(new.iter().cloned());
        for obj in &new {
            match old.remove(&object_key(obj.as_ref())) {
                Some(prev) => {
                    let unchanged = resource_version(prev.as_ref()).is_some()
                        && resource_version(prev.as_ref()) == resource_version(obj.as_ref());
                    if !unchanged {
                        d.distribute(|| Notification::Update {
                            old: prev.clone(),
                            new: obj.clone(),
                        });
                    }
                }
                None => d.distribute(|| Notification::Add {
                    obj: obj.clone(),
                    initial,
                }),
            }
        }
        for (key, last_known) in in_key_order(old) {
            d.distribute(|| {
                Notification::Delete(DeletedObject::DeletedFinalStateUnknown {
                    key: key.clone(),
                    last_known: last_known.clone(),
                })
            });
        }
        if initial {
            d.listed = true;
            let mut waiters = Vec::with_capacity(d.listeners.len());
            for l in &d.listeners {
                l.send(Notification::Synced);
                waiters.push(l.synced_receiver());
            }
            d.initial_waiters = waiters;
            self.listed.send_replace(true);
        }
    }
}

impl<K: Resource + Clone + Send + Sync + 'static> DeltaSink<K> for SharedInformer<K> {
    fn apply(&self, delta: Delta<K>) {
        let mut d = self.lock();
        match delta {
            Delta::Replaced(items) => self.replace(&mut d, items),
            Delta::Added(obj) | Delta::Modified(obj) => {
                let new = Arc::new(obj);
                match self.store.upsert(new.clone()) {
                    Some(old) => d.distribute(|| Notification::Update {
                        old: old.clone(),
                        new: new.clone(),
                    }),
                    None => d.distribute(|| Notification::Add {
                        obj: new.clone(),
                        initial: false,
                    }),
                }
            }
            Delta::Deleted(obj) => {
                self.store.delete(&object_key(&obj));
                let deleted = DeletedObject::Object(Arc::new(obj));
                d.distribute(|| Notification::Delete(deleted.clone()));
            }
        }
    }
}

fn clamp_resync(period: Duration) -> Duration {
    if period.is_zero() {
        period
    } else {
        period.max(MINIMUM_RESYNC_PERIOD)
    }
}

#[cfg(test)]
#[path = "shared_tests.rs"]
mod tests;
