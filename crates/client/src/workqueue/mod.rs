//! Work queues with upstream client-go `util/workqueue` semantics: the queue between informer event
//! handlers and a controller's workers.
//!
//! - [`Queue`] (`queue.go`): FIFO, deduplicating (`dirty`), never hands one item to two workers at once
//!   (`processing`), requeues an item added during its processing when it is `done`, shuts down with or
//!   without draining.
//! - [`DelayingQueue`] (`delaying_queue.go`): `add_after`, waiting items ordered by ready time.
//! - [`RateLimiter`] and its implementations (`default_rate_limiters.go`): per-item exponential, fast/slow,
//!   token bucket, max-of; [`default_controller_rate_limiter`].
//! - [`RateLimitingQueue`] (`rate_limiting_queue.go`): `add_rate_limited`, `forget`, `num_requeues`.
//! - [`MetricsRegistry`] (`metrics.go` + component-base's Prometheus provider): the `workqueue_*` series
//!   of every named queue, rendered for `/metrics`.
//!
//! Items are any `T: Clone + Eq + Hash + Send + Sync + 'static`, typically a `namespace/name` key.
//! All queues are cheap-to-clone handles; `get` is `async` and returns `None` once the queue is shut down
//! and empty. A worker:
//!
//! ```no_run
//! # use client::workqueue::{default_controller_rate_limiter, QueueConfig, RateLimitingQueue};
//! # async fn sync(_key: &str) -> Result<(), ()> { Ok(()) }
//! # async fn example() {
//! let queue = RateLimitingQueue::with_config(
//!     default_controller_rate_limiter::<String>(),
//!     QueueConfig::named("deployment"),
//! );
//! while let Some(key) = queue.get().await {
//!     match sync(&key).await {
//!         Ok(()) => queue.forget(&key),
//!         Err(()) => queue.add_rate_limited(key.clone()),
//!     }
//!     queue.done(&key);
//! }
//! # }
//! ```
//!
//! Each file names what it does differently from upstream; the main differences are `async` `get`,
//! `Option` instead of a shutdown flag, and metrics rendered by our own registry.

mod delaying;
mod metrics;
mod queue;
mod rate_limiters;
mod rate_limiting_queue;
#[cfg(test)]
mod stress_tests;

pub use delaying::DelayingQueue;
pub use metrics::{MetricsRegistry, HISTOGRAM_BUCKETS_NANOS};
pub use queue::{Queue, QueueConfig};
pub use rate_limiters::{
    default_controller_rate_limiter, default_item_based_rate_limiter, BucketRateLimiter,
    ItemExponentialFailureRateLimiter, ItemFastSlowRateLimiter, MaxOfRateLimiter, RateLimiter,
    WithMaxWaitRateLimiter,
};
pub use rate_limiting_queue::RateLimitingQueue;
