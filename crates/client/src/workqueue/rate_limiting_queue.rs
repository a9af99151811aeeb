//! The rate limiting queue: upstream client-go `util/workqueue/rate_limiting_queue.go`
//! (`rateLimitingType[T]`).
//!
//! Semantics carried over from upstream: [`RateLimitingQueue::add_rate_limited`] is
//! `add_after(item, limiter.when(item))`; [`RateLimitingQueue::forget`] only clears the limiter's memory
//! of the item (the caller still calls `done`); [`RateLimitingQueue::num_requeues`] asks the limiter.
//!
//! What differs: the queue methods are delegated explicitly instead of through Go interface embedding,
//! and the limiter is any [`RateLimiter`] (shared behind an `Arc`).

use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use super::delaying::DelayingQueue;
use super::queue::{Queue, QueueConfig};
use super::rate_limiters::RateLimiter;

/// A [`DelayingQueue`] that requeues failed items after the wait its rate limiter decides. Cheap to
/// clone: clones share one queue and one limiter.
///
/// The usual worker loop: `get`, process, then on error `add_rate_limited(key)`, on success
/// `forget(&key)`, and in both cases `done(&key)`.
pub struct RateLimitingQueue<T> {
    queue: DelayingQueue<T>,
    limiter: Arc<dyn RateLimiter<T>>,
}

impl<T> Clone for RateLimitingQueue<T> {
    fn clone(&self) -> Self {
        Self {
            queue: self.queue.clone(),
            limiter: Arc::clone(&self.limiter),
        }
    }
}

impl<T> std::fmt::Debug for RateLimitingQueue<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimitingQueue")
            .field("queue", &self.queue)
            .finish_non_exhaustive()
    }
}

impl<T> RateLimitingQueue<T>
where
    T: Clone + Eq + Hash + Send + Sync + 'static,
{
    /// An unnamed rate limiting queue (no metrics).
    ///
    /// # Panics
    /// Outside a tokio runtime, as [`tokio::spawn`].
    pub fn new(limiter: impl RateLimiter<T> + 'static) -> Self {
        Self::with_config(limiter, QueueConfig::default())
    }

    /// A rate limiting queue with the given name and metrics registry.
    ///
    /// # Panics
    /// Outside a tokio runtime, as [`tokio::spawn`].
    pub fn with_config(limiter: impl RateLimiter<T> + 'static, config: QueueConfig) -> Self {
        Self {
            queue: DelayingQueue::with_config(config),
            limiter: Arc::new(limiter),
        }
    }

    /// Adds `item` after the wait the rate limiter gives it (which also counts it as a requeue there).
    pub fn add_rate_limited(&self, item: T) {
        let delay = self.limiter.when(&item);
        self.queue.add_after(item, delay);
    }

    /// Makes the rate limiter forget `item` (it succeeded or was given up on). Call `done` as well.
    pub fn forget(&self, item: &T) {
        self.limiter.forget(item);
    }

    /// How many times `item` has been requeued with [`RateLimitingQueue::add_rate_limited`] since it was
    /// last forgotten.
    pub fn num_requeues(&self, item: &T) -> u32 {
        self.limiter.num_requeues(item)
    }

    /// See [`DelayingQueue::add_after`].
    pub fn add_after(&self, item: T, delay: Duration) {
        self.queue.add_after(item, delay);
    }

    /// See [`Queue::add`].
    pub fn add(&self, item: T) {
        self.queue.add(item);
    }

    /// See [`Queue::get`].
    pub async fn get(&self) -> Option<T> {
        self.queue.get().await
    }

    /// See [`Queue::done`].
    pub fn done(&self, item: &T) {
        self.queue.done(item);
    }

    /// See [`Queue::len`].
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// See [`Queue::is_empty`].
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// See [`DelayingQueue::shut_down`].
    pub fn shut_down(&self) {
        self.queue.shut_down();
    }

    /// See [`DelayingQueue::shut_down_with_drain`].
    pub async fn shut_down_with_drain(&self) {
        self.queue.shut_down_with_drain().await;
    }

    /// See [`Queue::is_shutting_down`].
    pub fn is_shutting_down(&self) -> bool {
        self.queue.is_shutting_down()
    }

    /// The underlying delaying queue.
    pub fn delaying_queue(&self) -> &DelayingQueue<T> {
        &self.queue
    }

    /// The underlying plain queue.
    pub fn queue(&self) -> &Queue<T> {
        self.queue.queue()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workqueue::rate_limiters::{
        default_controller_rate_limiter, ItemExponentialFailureRateLimiter,
    };
    use tokio::time::Instant;

    const MS: Duration = Duration::from_millis(1);

    #[tokio::test(start_paused = true)]
    async fn failing_item_is_retried_with_exponential_backoff_until_forgotten() {
        let q = RateLimitingQueue::new(default_controller_rate_limiter::<String>());
        let key = "default/web".to_owned();
        q.add(key.clone());
        let mut got = q.get().await;
        let mut last = Instant::now();
        let mut waits = Vec::new();
        // Fail four times: each retry arrives after 5, 10, 20, 40 ms.
        for _ in 0..4 {
            let item = got.take();
            assert_eq!(item.as_ref(), Some(&key));
            q.add_rate_limited(key.clone());
            q.done(&key);
            got = q.get().await;
            waits.push(last.elapsed());
            last = Instant::now();
        }
        assert_eq!(waits, [5 * MS, 10 * MS, 20 * MS, 40 * MS]);
        assert_eq!(q.num_requeues(&key), 4);
        // Success: forget, and the next failure starts from the base again.
        q.forget(&key);
        q.done(&key);
        assert_eq!(q.num_requeues(&key), 0);
        let start = Instant::now();
        q.add_rate_limited(key.clone());
        assert_eq!(q.get().await.as_ref(), Some(&key));
        assert_eq!(start.elapsed(), 5 * MS);
    }

    #[tokio::test(start_paused = true)]
    async fn requeue_while_processing_waits_for_done() {
        let q = RateLimitingQueue::new(ItemExponentialFailureRateLimiter::new(
            MS,
            Duration::from_secs(1),
        ));
        q.add(1u32);
        assert_eq!(q.get().await, Some(1));
        q.add_rate_limited(1);
        tokio::time::sleep(10 * MS).await;
        // Ready, but still processing: not handed out again until done.
        assert_eq!(q.len(), 0);
        q.done(&1);
        assert_eq!(q.len(), 1);
        assert_eq!(q.get().await, Some(1));
    }

    #[tokio::test(start_paused = true)]
    async fn shut_down_stops_rate_limited_adds() {
        let q = RateLimitingQueue::new(ItemExponentialFailureRateLimiter::new(
            MS,
            Duration::from_secs(1),
        ));
        q.add_rate_limited("a");
        q.shut_down();
        assert!(q.is_shutting_down());
        tokio::time::sleep(10 * MS).await;
        assert_eq!(q.get().await, None);
    }
}
