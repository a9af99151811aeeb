//! The work queue: upstream client-go `util/workqueue/queue.go` (`Typed[T]`).
//!
//! Semantics carried over from upstream:
//! - `queue` is the FIFO order of work; every item in it is dirty and not processing.
//! - `dirty` holds every item that needs processing. Adding an item that is already dirty does nothing, so
//!   an item added many times before a worker gets it is processed once.
//! - `processing` holds the items handed out by [`Queue::get`] and not yet [`Queue::done`]. An item added
//!   while processing is only marked dirty; `done` puts it back in the queue. So an item is never handed
//!   to two workers at once, and a change that arrives during processing is not lost.
//! - After [`Queue::shut_down`] adds are ignored, while `get` still hands out what is queued and returns
//!   `None` once the queue is empty. [`Queue::shut_down_with_drain`] also waits until every item handed
//!   out is done.
//!
//! What differs:
//! - `get` is `async` and returns `Option<T>` (`None` = shut down) instead of `(item, shutdown bool)`.
//! - The `dirty` and `processing` sets are two flags on one map entry per item (plus the metrics
//!   timestamps), so each operation hashes the item about once and clones it at most once.
//! - `done` for an item that is not being processed is ignored; upstream would queue it a second time if
//!   it were also dirty.
//! - The pluggable inner `Queue[T]` storage (`Touch`/`Push`/`Pop`) is not offered: the order is FIFO.
//! - Waiters park on a [`tokio::sync::Notify`] instead of a `sync.Cond`, and `get` spends tokio's
//!   cooperative budget so a worker that always finds work still yields its thread now and then.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::pin::pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use tokio::sync::Notify;
use tokio::time::Instant;

use super::metrics::{MetricsRegistry, QueueMetrics, UnfinishedWork};

/// Optional settings shared by [`Queue`], [`DelayingQueue`](super::DelayingQueue) and
/// [`RateLimitingQueue`](super::RateLimitingQueue) (upstream `TypedQueueConfig`).
#[derive(Clone, Debug, Default)]
pub struct QueueConfig {
    /// Name of the queue, the `name` label of its metrics. An unnamed queue records no metrics.
    pub name: String,
    /// Registry the metrics go to; `None` means [`MetricsRegistry::global`].
    pub registry: Option<MetricsRegistry>,
}

impl QueueConfig {
    /// A named queue whose metrics go to the global registry.
    pub fn named(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            registry: None,
        }
    }

    /// Sends the metrics to `registry` instead of the global one.
    pub fn with_registry(mut self, registry: &MetricsRegistry) -> Self {
        self.registry = Some(registry.clone());
        self
    }

    pub(crate) fn metrics(&self) -> Option<Arc<QueueMetrics>> {
        if self.name.is_empty() {
            return None;
        }
        let registry = self
            .registry
            .as_ref()
            .unwrap_or_else(|| MetricsRegistry::global());
        Some(registry.queue_metrics(&self.name))
    }
}

/// A work queue with client-go semantics (see the module docs). Cheap to clone: clones share one queue,
/// which is how producers and workers hold it.
pub struct Queue<T> {
    inner: Arc<Inner<T>>,
}

impl<T> Clone for Queue<T> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<T> std::fmt::Debug for Queue<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.inner.lock();
        f.debug_struct("Queue")
            .field("len", &state.queue.len())
            .field("processing", &state.processing)
            .field("shutting_down", &state.shutting_down)
            .finish()
    }
}

struct Inner<T> {
    state: Mutex<State<T>>,
    /// Wakes a worker parked in `get` when an item is queued, and all of them on shutdown.
    available: Notify,
    /// Wakes `shut_down_with_drain` when the last processing item is done (or a plain shutdown cancels
    /// the drain).
    drained: Notify,
    metrics: Option<Arc<QueueMetrics>>,
}

struct State<T> {
    /// The order in which items are handed out. Every element is dirty and not processing.
    queue: VecDeque<T>,
    /// The `dirty` and `processing` sets. An item has an entry exactly while it is dirty or processing.
    items: HashMap<T, ItemState>,
    /// Number of items with `processing` set, so the drain check needs no scan.
    processing: usize,
    shutting_down: bool,
    drain: bool,
}

#[derive(Default)]
struct ItemState {
    dirty: bool,
    processing: bool,
    /// When the item became dirty (metrics only): queue latency is measured from here to `get`.
    added_at: Option<Instant>,
    /// When `get` handed the item out (metrics only): work duration is measured from here to `done`.
    started_at: Option<Instant>,
}

impl<T> Inner<T> {
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        // A panic while holding the lock cannot leave the state half-updated in a way that matters more
        // than losing the queue entirely, so keep serving.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl<T: Send> UnfinishedWork for Inner<T> {
    fn unfinished_work(&self, now: Instant) -> (f64, f64) {
        let state = self.lock();
        let (mut total, mut oldest) = (0.0f64, 0.0f64);
        for started in state.items.values().filter_map(|s| s.started_at) {
            let age = now.saturating_duration_since(started).as_secs_f64();
            total += age;
            oldest = oldest.max(age);
        }
        (total, oldest)
    }
}

impl<T> Default for Queue<T>
where
    T: Clone + Eq + Hash + Send + Sync + 'static,
{
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Queue<T>
where
    T: Clone + Eq + Hash + Send + Sync + 'static,
{
    /// An unnamed queue (no metrics).
    pub fn new() -> Self {
        Self::with_config(QueueConfig::default())
    }

    /// A queue with the given name and metrics registry.
    pub fn with_config(config: QueueConfig) -> Self {
        let metrics = config.metrics();
        let inner = Arc::new(Inner {
            state: Mutex::new(State {
                queue: VecDeque::new(),
                items: HashMap::new(),
                processing: 0,
                shutting_down: false,
                drain: false,
            }),
            available: Notify::new(),
            drained: Notify::new(),
            metrics,
        });
        if let Some(metrics) = &inner.metrics {
            let weak: Weak<Inner<T>> = Arc::downgrade(&inner);
            metrics.register_source(weak);
        }
        Self { inner }
    }

    /// Marks `item` as needing processing. Does nothing if it is already waiting, or if the queue is
    /// shutting down; if it is being processed it is queued again when that processing is done.
    pub fn add(&self, item: T) {
        let mut guard = self.inner.lock();
        let state = &mut *guard;
        if state.shutting_down {
            return;
        }
        // Read the clock only for a real add: deduplicated adds (the common case under load) skip it.
        let now = || self.inner.metrics.as_ref().map(|_| Instant::now());
        let pushed = match state.items.entry(item) {
            Entry::Occupied(mut entry) => {
                let item_state = entry.get_mut();
                if item_state.dirty {
                    return;
                }
                // Present but not dirty means processing: remember the change, `done` will queue it.
                item_state.dirty = true;
                item_state.added_at = item_state.added_at.or_else(now);
                false
            }
            Entry::Vacant(entry) => {
                state.queue.push_back(entry.key().clone());
                entry.insert(ItemState {
                    dirty: true,
                    added_at: now(),
                    ..ItemState::default()
                });
                true
            }
        };
        if let Some(metrics) = &self.inner.metrics {
            metrics.adds.fetch_add(1, Ordering::Relaxed);
            metrics.depth.fetch_add(1, Ordering::Relaxed);
        }
        drop(guard);
        // Only a push into `queue` makes work available; a dirty-while-processing mark does not.
        if pushed {
            self.inner.available.notify_one();
        }
    }

    /// Waits for the next item and marks it as processing; the caller must call [`Queue::done`] with it
    /// when finished. Returns `None` once the queue is shutting down and empty: the worker should exit.
    ///
    /// Cancel safe: if the returned future is dropped, no item is lost.
    pub async fn get(&self) -> Option<T> {
        // Take part in tokio's cooperative scheduling as its channels do: a worker that always finds an
        // item waiting would otherwise never yield its thread to other tasks.
        tokio::task::consume_budget().await;
        if let Some(result) = self.try_take() {
            return result;
        }
        loop {
            // Register interest before looking at the state, so an add that lands between the look and
            // the wait still wakes us.
            let mut notified = pin!(self.inner.available.notified());
            notified.as_mut().enable();
            if let Some(result) = self.try_take() {
                return result;
            }
            notified.await;
        }
    }

    /// `Some(Some(item))`: got one; `Some(None)`: shut down and empty; `None`: must wait.
    fn try_take(&self) -> Option<Option<T>> {
        let mut guard = self.inner.lock();
        let state = &mut *guard;
        let Some(item) = state.queue.pop_front() else {
            return state.shutting_down.then_some(None);
        };
        let now = self.inner.metrics.as_ref().map(|_| Instant::now());
        let item_state = match state.items.get_mut(&item) {
            Some(s) => s,
            // Unreachable while the invariant holds (queued implies an entry); recover rather than panic.
            None => state.items.entry(item.clone()).or_default(),
        };
        item_state.dirty = false;
        item_state.processing = true;
        state.processing += 1;
        if let (Some(metrics), Some(now)) = (&self.inner.metrics, now) {
            metrics.depth.fetch_sub(1, Ordering::Relaxed);
            if let Some(added) = item_state.added_at.take() {
                metrics
                    .latency
                    .observe(now.saturating_duration_since(added));
            }
            item_state.started_at = Some(now);
        }
        Some(Some(item))
    }

    /// Marks `item` as done processing. If it was added again meanwhile, it goes back to the queue.
    pub fn done(&self, item: &T) {
        let mut guard = self.inner.lock();
        let state = &mut *guard;
        // Take the entry out by value: the common case (not dirty again) then needs one hash lookup.
        let Some((key, mut item_state)) = state.items.remove_entry(item) else {
            return;
        };
        if !item_state.processing {
            // Done without a matching get: leave the item as it was.
            state.items.insert(key, item_state);
            return;
        }
        item_state.processing = false;
        state.processing -= 1;
        if let Some(metrics) = &self.inner.metrics {
            if let Some(started) = item_state.started_at.take() {
                metrics
                    .work_duration
                    .observe(Instant::now().saturating_duration_since(started));
            }
        }
        let requeued = item_state.dirty;
        if requeued {
            state.queue.push_back(key.clone());
            state.items.insert(key, item_state);
        }
        let drained = state.processing == 0 && state.drain;
        drop(guard);
        if requeued {
            self.inner.available.notify_one();
        }
        if drained {
            self.inner.drained.notify_waiters();
        }
    }

    /// Number of items waiting to be handed out (not counting items that are dirty while processing),
    /// for information only, as upstream's `Len`.
    pub fn len(&self) -> usize {
        self.inner.lock().queue.len()
    }

    /// Whether no item is waiting to be handed out.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stops accepting adds and wakes all waiting workers; `get` returns what is still queued, then `None`.
    /// Also releases a pending [`Queue::shut_down_with_drain`] without waiting for processing items.
    pub fn shut_down(&self) {
        {
            let mut state = self.inner.lock();
            state.drain = false;
            state.shutting_down = true;
        }
        self.inner.available.notify_waiters();
        self.inner.drained.notify_waiters();
    }

    /// Like [`Queue::shut_down`], then waits until every item handed out has been marked done. Workers
    /// must keep calling `done` (and `get`, which still returns queued items) for this to return.
    pub async fn shut_down_with_drain(&self) {
        self.start_drain();
        self.wait_drained().await;
    }

    /// The synchronous half of `shut_down_with_drain`: takes effect before the caller awaits anything.
    pub(crate) fn start_drain(&self) {
        {
            let mut state = self.inner.lock();
            state.drain = true;
            state.shutting_down = true;
        }
        self.inner.available.notify_waiters();
    }

    /// Waits until no item is processing, or a plain shutdown cancelled the drain.
    pub(crate) async fn wait_drained(&self) {
        loop {
            let mut notified = pin!(self.inner.drained.notified());
            notified.as_mut().enable();
            {
                let state = self.inner.lock();
                if state.processing == 0 || !state.drain {
                    return;
                }
            }
            notified.await;
        }
    }

    /// Whether a shutdown has started.
    pub fn is_shutting_down(&self) -> bool {
        self.inner.lock().shutting_down
    }

    /// Counts a retry (an `add_after` / `add_rate_limited`) in the queue's metrics.
    pub(crate) fn record_retry(&self) {
        if let Some(metrics) = &self.inner.metrics {
            metrics.retries.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// (dirty, processing) set sizes, checking the invariants that tie them to `queue`.
    #[cfg(test)]
    pub(crate) fn sets(&self) -> (usize, usize) {
        let state = self.inner.lock();
        let dirty = state.items.values().filter(|s| s.dirty).count();
        let processing = state.items.values().filter(|s| s.processing).count();
        assert_eq!(processing, state.processing);
        assert!(state.items.values().all(|s| s.dirty || s.processing));
        for item in &state.queue {
            let s = &state.items[item];
            assert!(
                s.dirty && !s.processing,
                "queued items are dirty and not processing"
            );
        }
        (dirty, processing)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn now_or_never<F: std::future::Future>(f: F) -> Option<F::Output> {
        futures::FutureExt::now_or_never(f)
    }

    #[tokio::test]
    async fn add_deduplicates_items_waiting_to_be_processed() {
        let q = Queue::new();
        q.add("a");
        q.add("a");
        q.add("b");
        q.add("a");
        assert_eq!(q.len(), 2);
        assert_eq!(q.sets(), (2, 0));
        assert_eq!(q.get().await, Some("a"));
        assert_eq!(q.get().await, Some("b"));
        assert!(q.is_empty());
        assert_eq!(now_or_never(q.get()), None, "nothing else is queued");
    }

    #[tokio::test]
    async fn items_come_out_in_fifo_order() {
        let q = Queue::new();
        for i in 0..100u32 {
            q.add(i);
        }
        for i in 0..100u32 {
            assert_eq!(q.get().await, Some(i));
            q.done(&i);
        }
        assert_eq!(q.sets(), (0, 0));
    }

    #[tokio::test]
    async fn item_added_while_processing_is_requeued_only_on_done() {
        let q = Queue::new();
        q.add("a");
        assert_eq!(q.get().await, Some("a"));
        q.add("a");
        q.add("a"); // still one pending re-add
        assert_eq!(q.len(), 0, "not queued while processing");
        assert_eq!(q.sets(), (1, 1));
        assert_eq!(
            now_or_never(q.get()),
            None,
            "a second worker must not get it"
        );
        q.done(&"a");
        assert_eq!(q.len(), 1);
        assert_eq!(q.sets(), (1, 0));
        assert_eq!(q.get().await, Some("a"));
        q.done(&"a");
        assert_eq!(q.sets(), (0, 0));
        assert!(q.is_empty());
    }

    #[tokio::test]
    async fn requeued_item_goes_to_the_back() {
        let q = Queue::new();
        q.add(1);
        assert_eq!(q.get().await, Some(1));
        q.add(2);
        q.add(1);
        q.add(3);
        q.done(&1);
        assert_eq!(q.get().await, Some(2));
        assert_eq!(q.get().await, Some(3));
        assert_eq!(q.get().await, Some(1));
    }

    #[tokio::test]
    async fn done_without_get_is_ignored() {
        let q = Queue::new();
        q.done(&"x"); // unknown item
        q.add("a");
        q.done(&"a"); // queued but not processing: must not queue it twice
        assert_eq!(q.len(), 1);
        assert_eq!(q.get().await, Some("a"));
        q.done(&"a");
        assert!(q.is_empty());
        assert_eq!(q.sets(), (0, 0));
    }

    #[tokio::test]
    async fn get_waits_for_an_add() {
        let q: Queue<u32> = Queue::new();
        let worker = tokio::spawn({
            let q = q.clone();
            async move { q.get().await }
        });
        tokio::task::yield_now().await;
        q.add(7);
        let got = tokio::time::timeout(Duration::from_secs(5), worker).await;
        assert!(matches!(got, Ok(Ok(Some(7)))), "{got:?}");
    }

    #[tokio::test]
    async fn each_add_wakes_a_distinct_waiter() {
        let q: Queue<u32> = Queue::new();
        let workers: Vec<_> = (0..4)
            .map(|_| {
                let q = q.clone();
                tokio::spawn(async move { q.get().await })
            })
            .collect();
        tokio::task::yield_now().await;
        for i in 0..4 {
            q.add(i);
        }
        let mut got = Vec::new();
        for w in workers {
            let r = tokio::time::timeout(Duration::from_secs(5), w).await;
            match r {
                Ok(Ok(Some(v))) => got.push(v),
                other => panic!("worker did not get an item: {other:?}"),
            }
        }
        got.sort_unstable();
        assert_eq!(got, [0, 1, 2, 3]);
    }

    #[tokio::test]
    async fn cancelled_get_loses_no_item() {
        let q: Queue<u32> = Queue::new();
        // Park a get and drop it, then make sure a later get still sees the next add.
        assert_eq!(now_or_never(q.get()), None);
        q.add(1);
        assert_eq!(q.get().await, Some(1));
    }

    #[tokio::test]
    async fn shut_down_ignores_adds_and_wakes_waiters() {
        let q: Queue<u32> = Queue::new();
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let q = q.clone();
                tokio::spawn(async move { q.get().await })
            })
            .collect();
        tokio::task::yield_now().await;
        q.shut_down();
        assert!(q.is_shutting_down());
        for w in waiters {
            let r = tokio::time::timeout(Duration::from_secs(5), w).await;
            assert!(matches!(r, Ok(Ok(None))), "{r:?}");
        }
        q.add(1);
        assert!(q.is_empty());
        assert_eq!(q.get().await, None);
    }

    #[tokio::test]
    async fn shut_down_still_hands_out_queued_items_then_none() {
        let q = Queue::new();
        q.add(1);
        q.add(2);
        assert_eq!(q.get().await, Some(1));
        q.add(1); // dirty while processing
        q.shut_down();
        assert_eq!(q.get().await, Some(2));
        q.done(&2);
        // 1 is processing and dirty: it is queued again on done even though the queue is shut down.
        q.done(&1);
        assert_eq!(q.get().await, Some(1));
        q.done(&1);
        assert_eq!(q.get().await, None);
    }

    #[tokio::test]
    async fn shut_down_with_drain_waits_for_processing_items() {
        let q = Queue::new();
        q.add("a");
        q.add("b");
        assert_eq!(q.get().await, Some("a"));
        let drain = tokio::spawn({
            let q = q.clone();
            async move { q.shut_down_with_drain().await }
        });
        tokio::task::yield_now().await;
        assert!(q.is_shutting_down());
        assert!(!drain.is_finished(), "a is still processing");
        // Queued items are still handed out during a drain.
        assert_eq!(q.get().await, Some("b"));
        q.done(&"a");
        tokio::task::yield_now().await;
        assert!(!drain.is_finished(), "b is still processing");
        q.done(&"b");
        let r = tokio::time::timeout(Duration::from_secs(5), drain).await;
        assert!(matches!(r, Ok(Ok(()))), "{r:?}");
        assert_eq!(q.get().await, None);
    }

    #[tokio::test]
    async fn shut_down_with_drain_returns_at_once_when_idle() {
        let q: Queue<u8> = Queue::new();
        let r = tokio::time::timeout(Duration::from_secs(5), q.shut_down_with_drain()).await;
        assert!(r.is_ok());
    }

    #[tokio::test]
    async fn shut_down_releases_a_pending_drain() {
        let q = Queue::new();
        q.add(1);
        assert_eq!(q.get().await, Some(1));
        let drain = tokio::spawn({
            let q = q.clone();
            async move { q.shut_down_with_drain().await }
        });
        tokio::task::yield_now().await;
        assert!(!drain.is_finished());
        q.shut_down();
        let r = tokio::time::timeout(Duration::from_secs(5), drain).await;
        assert!(matches!(r, Ok(Ok(()))), "{r:?}");
    }

    #[tokio::test]
    async fn works_with_owned_string_keys() {
        let q: Queue<String> = Queue::new();
        q.add("default/web-0".to_owned());
        q.add("default/web-0".to_owned());
        let key = q.get().await;
        assert_eq!(key.as_deref(), Some("default/web-0"));
        if let Some(key) = key {
            q.done(&key);
        }
        assert_eq!(q.sets(), (0, 0));
    }
}
