//! The delaying queue: upstream client-go `util/workqueue/delaying_queue.go` (`delayingType[T]`).
//!
//! Semantics carried over from upstream:
//! - [`DelayingQueue::add_after`] with a zero delay adds at once; otherwise the item waits, ordered by the
//!   time it becomes ready, and one background loop adds every ready item to the queue.
//! - An item already waiting is not waiting twice: adding it again keeps the earlier ready time.
//! - Every `add_after` that is not ignored because of shutdown counts as a retry in the metrics.
//! - The loop wakes at least every 10 s (upstream `maxWait`) as insurance, and stops on shutdown; items
//!   still waiting then are dropped.
//!
//! What differs:
//! - Upstream sends each delayed item over a 1000-slot channel to the loop, which owns the heap.
//!   Here `add_after` inserts under a mutex and only wakes the loop when the new item is the earliest,
//!   so producers never block on a full channel.
//! - The waiting set is an ordered map keyed by (ready time, arrival sequence) plus an index by item,
//!   instead of a heap with `heap.Fix`: moving an item earlier is a remove and an insert, and items
//!   ready at the same instant come out in the order they were added.
//! - Time is [`tokio::time::Instant`], so tests run on tokio's paused clock.
//! - The loop ends when the last handle is dropped as well as on shutdown.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::queue::{Queue, QueueConfig};

/// Upper bound on how long the waiting loop sleeps (upstream `maxWait`).
const MAX_WAIT: Duration = Duration::from_secs(10);

/// Where a delay that does not fit in an `Instant` (e.g. [`Duration::MAX`] from a rate limiter that will
/// never allow the item) lands: far enough to mean "never", near enough for timer arithmetic.
const FAR_FUTURE: Duration = Duration::from_secs(86_400 * 365 * 30);

/// A [`Queue`] that can also add items after a delay. Cheap to clone: clones share one queue.
///
/// Must be created inside a tokio runtime (it spawns its waiting loop there).
pub struct DelayingQueue<T> {
    inner: Arc<DelayingInner<T>>,
}

impl<T> Clone for DelayingQueue<T> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<T> std::fmt::Debug for DelayingQueue<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let waiting = self.inner.lock_waiting().by_item.len();
        f.debug_struct("DelayingQueue")
            .field("queue", &self.inner.queue)
            .field("waiting", &waiting)
            .finish()
    }
}

struct DelayingInner<T> {
    queue: Queue<T>,
    waiting: Mutex<Waiting<T>>,
    /// Wakes the loop when the earliest ready time moves earlier, on shutdown and on drop.
    wake: Arc<Notify>,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl<T> Drop for DelayingInner<T> {
    fn drop(&mut self) {
        // The loop holds only a weak reference; wake it so it notices and exits now rather than after
        // its next timer.
        self.wake.notify_one();
        if let Some(task) = self
            .task
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            task.abort();
        }
    }
}

/// Items waiting for their ready time (upstream `waitForPriorityQueue` + `waitingEntryByData`).
struct Waiting<T> {
    /// Ordered by ready time; the sequence number keeps keys unique and ties in arrival order.
    by_ready: BTreeMap<(Instant, u64), T>,
    /// The key of each waiting item in `by_ready`, to deduplicate.
    by_item: HashMap<T, (Instant, u64)>,
    next_seq: u64,
}

impl<T> DelayingInner<T> {
    fn lock_waiting(&self) -> MutexGuard<'_, Waiting<T>> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl<T> Default for DelayingQueue<T>
where
    T: Clone + Eq + Hash + Send + Sync + 'static,
{
    fn default() -> Self {
        Self::new()
    }
}

impl<T> DelayingQueue<T>
where
    T: Clone + Eq + Hash + Send + Sync + 'static,
{
    /// An unnamed delaying queue (no metrics).
    ///
    /// # Panics
    /// Outside a tokio runtime, as [`tokio::spawn`].
    pub fn new() -> Self {
        Self::with_config(QueueConfig::default())
    }

    /// A delaying queue with the given name and metrics registry.
    ///
    /// # Panics
    /// Outside a tokio runtime, as [`tokio::spawn`].
    pub fn with_config(config: QueueConfig) -> Self {
        let wake = Arc::new(Notify::new());
        let inner = Arc::new(DelayingInner {
            queue: Queue::with_config(config),
            waiting: Mutex::new(Waiting {
                by_ready: BTreeMap::new(),
                by_item: HashMap::new(),
                next_seq: 0,
            }),
            wake: Arc::clone(&wake),
            task: Mutex::new(None),
        });
        // Spawned after the Arc exists: a loop started inside `Arc::new_cyclic` could run on another
        // worker before construction finishes, fail to upgrade and exit.
        let task = tokio::spawn(waiting_loop(Arc::downgrade(&inner), wake));
        *inner.task.lock().unwrap_or_else(|e| e.into_inner()) = Some(task);
        Self { inner }
    }

    /// Adds `item` once `delay` has passed. A zero delay adds at once. If the item is already waiting it
    /// keeps whichever ready time is earlier. Ignored while shutting down.
    pub fn add_after(&self, item: T, delay: Duration) {
        let queue = &self.inner.queue;
        if queue.is_shutting_down() {
            return;
        }
        queue.record_retry();
        if delay.is_zero() {
            queue.add(item);
            return;
        }
        let now = Instant::now();
        let ready_at = now.checked_add(delay).unwrap_or_else(|| now + FAR_FUTURE);

        let mut waiting = self.inner.lock_waiting();
        let waiting = &mut *waiting;
        if let Some(&existing) = waiting.by_item.get(&item) {
            if existing.0 <= ready_at {
                return;
            }
            waiting.by_ready.remove(&existing);
        }
        let key = (ready_at, waiting.next_seq);
        waiting.next_seq += 1;
        let is_earliest = waiting
            .by_ready
            .first_key_value()
            .is_none_or(|(first, _)| key < *first);
        waiting.by_item.insert(item.clone(), key);
        waiting.by_ready.insert(key, item);
        if is_earliest {
            // The loop may be sleeping until a later time. If it is not waiting right now the permit is
            // kept, so the wake-up cannot be lost.
            self.inner.wake.notify_one();
        }
    }

    /// See [`Queue::add`].
    pub fn add(&self, item: T) {
        self.inner.queue.add(item);
    }

    /// See [`Queue::get`].
    pub async fn get(&self) -> Option<T> {
        self.inner.queue.get().await
    }

    /// See [`Queue::done`].
    pub fn done(&self, item: &T) {
        self.inner.queue.done(item);
    }

    /// See [`Queue::len`]; items still waiting for their delay are not counted.
    pub fn len(&self) -> usize {
        self.inner.queue.len()
    }

    /// See [`Queue::is_empty`].
    pub fn is_empty(&self) -> bool {
        self.inner.queue.is_empty()
    }

    /// Number of items waiting for their delay to pass.
    pub fn waiting_len(&self) -> usize {
        self.inner.lock_waiting().by_item.len()
    }

    /// See [`Queue::shut_down`]; also stops the waiting loop, dropping items still waiting.
    pub fn shut_down(&self) {
        self.inner.queue.shut_down();
        self.inner.wake.notify_one();
    }

    /// See [`Queue::shut_down_with_drain`]; also stops the waiting loop, dropping items still waiting.
    pub async fn shut_down_with_drain(&self) {
        self.inner.queue.start_drain();
        self.inner.wake.notify_one();
        self.inner.queue.wait_drained().await;
    }

    /// See [`Queue::is_shutting_down`].
    pub fn is_shutting_down(&self) -> bool {
        self.inner.queue.is_shutting_down()
    }

    /// The underlying queue.
    pub fn queue(&self) -> &Queue<T> {
        &self.inner.queue
    }
}

/// Moves items whose time has come into the queue, then sleeps until the next one is due (at most
/// `MAX_WAIT`) or until woken. Holds the queue only weakly between rounds so dropping it ends the loop.
async fn waiting_loop<T>(weak: Weak<DelayingInner<T>>, wake: Arc<Notify>)
where
    T: Clone + Eq + Hash + Send + Sync + 'static,
{
    loop {
        let deadline = {
            let Some(inner) = weak.upgrade() else {
                return;
            };
            if inner.queue.is_shutting_down() {
                // Drop what is still waiting now rather than when the last handle goes.
                let mut waiting = inner.lock_waiting();
                waiting.by_ready.clear();
                waiting.by_item.clear();
                return;
            }
            let now = Instant::now();
            let (ready, next) = {
                let mut waiting = inner.lock_waiting();
                let mut ready = Vec::new();
                while let Some(entry) = waiting.by_ready.first_entry() {
                    if entry.key().0 > now {
                        break;
                    }
                    let item = entry.remove();
                    waiting.by_item.remove(&item);
                    ready.push(item);
                }
                (ready, waiting.by_ready.first_key_value().map(|(k, _)| k.0))
            };
            // Added outside the waiting lock; ready items keep their ready-time order.
            for item in ready {
                inner.queue.add(item);
            }
            let cap = now + MAX_WAIT;
            next.map_or(cap, |at| at.min(cap))
        };
        tokio::select! {
            _ = wake.notified() => {}
            _ = tokio::time::sleep_until(deadline) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn items_come_out_in_ready_time_order_after_their_delay() {
        let q = DelayingQueue::new();
        let start = Instant::now();
        q.add_after("c", Duration::from_millis(30));
        q.add_after("a", Duration::from_millis(10));
        q.add_after("b", Duration::from_millis(20));
        assert_eq!(q.len(), 0);
        assert_eq!(q.waiting_len(), 3);
        for (expected, at) in [("a", 10), ("b", 20), ("c", 30)] {
            assert_eq!(q.get().await, Some(expected));
            assert_eq!(start.elapsed(), Duration::from_millis(at), "{expected}");
        }
        assert_eq!(q.waiting_len(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn zero_delay_adds_at_once() {
        let q = DelayingQueue::new();
        q.add_after(1, Duration::ZERO);
        assert_eq!(q.len(), 1);
        assert_eq!(q.waiting_len(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn waiting_item_keeps_the_earliest_ready_time() {
        let q = DelayingQueue::new();
        let start = Instant::now();
        q.add_after("x", Duration::from_millis(50));
        q.add_after("x", Duration::from_millis(10)); // earlier: moves up
        q.add_after("x", Duration::from_millis(40)); // later: ignored
        assert_eq!(q.waiting_len(), 1);
        assert_eq!(q.get().await, Some("x"));
        assert_eq!(start.elapsed(), Duration::from_millis(10));
        q.done(&"x");
        // Nothing else was left waiting: after the old deadlines pass, the queue is still empty.
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(q.len(), 0);
        assert_eq!(q.waiting_len(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn delayed_add_of_a_queued_item_is_deduplicated_by_the_queue() {
        let q = DelayingQueue::new();
        q.add("x");
        q.add_after("x", Duration::from_millis(5));
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(q.len(), 1);
        assert_eq!(q.get().await, Some("x"));
    }

    #[tokio::test(start_paused = true)]
    async fn an_earlier_item_added_later_wakes_the_loop() {
        let q = DelayingQueue::new();
        let start = Instant::now();
        q.add_after("late", Duration::from_secs(60));
        tokio::time::sleep(Duration::from_millis(1)).await; // let the loop sleep towards 60 s
        q.add_after("early", Duration::from_millis(5));
        assert_eq!(q.get().await, Some("early"));
        assert_eq!(start.elapsed(), Duration::from_millis(6));
    }

    #[tokio::test(start_paused = true)]
    async fn long_delays_are_honoured_across_the_heartbeat() {
        let q = DelayingQueue::new();
        let start = Instant::now();
        q.add_after(1u8, Duration::from_secs(25));
        assert_eq!(q.get().await, Some(1));
        assert_eq!(start.elapsed(), Duration::from_secs(25));
    }

    #[tokio::test(start_paused = true)]
    async fn never_ready_delay_does_not_overflow() {
        let q = DelayingQueue::new();
        q.add_after(1u8, Duration::MAX);
        assert_eq!(q.waiting_len(), 1);
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert_eq!(q.len(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn shut_down_ignores_delayed_adds_and_drops_waiting_items() {
        let q = DelayingQueue::new();
        q.add_after(1u8, Duration::from_millis(10));
        q.shut_down();
        q.add_after(2u8, Duration::from_millis(10));
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(q.waiting_len(), 0);
        assert_eq!(q.get().await, None);
    }

    #[tokio::test(start_paused = true)]
    async fn dropping_the_last_handle_stops_the_loop() {
        let q = DelayingQueue::new();
        q.add_after(1u8, Duration::from_millis(10));
        let weak = Arc::downgrade(&q.inner);
        drop(q);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            weak.upgrade().is_none(),
            "the loop must not keep the queue alive"
        );
    }
}
