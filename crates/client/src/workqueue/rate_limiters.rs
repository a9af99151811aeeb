//! Rate limiters for requeues: upstream client-go `util/workqueue/default_rate_limiters.go`.
//!
//! Semantics carried over from upstream:
//! - [`ItemExponentialFailureRateLimiter`]: `base * 2^failures`, capped at `max`; every `when` counts a
//!   failure for that item, `forget` clears it, `num_requeues` reports it.
//! - [`ItemFastSlowRateLimiter`]: `fast` for the first `max_fast_attempts` failures, `slow` after.
//! - [`BucketRateLimiter`]: one token bucket for all items (`golang.org/x/time/rate`'s
//!   `Limiter.Reserve().Delay()`): a full bucket of `burst` tokens refilled at `qps`; `when` takes a token
//!   and returns how long until it exists, so after a burst the delays grow by `1/qps` per call.
//! - [`MaxOfRateLimiter`]: asks every limiter (so each records the failure) and returns the longest wait.
//! - [`WithMaxWaitRateLimiter`]: caps another limiter's wait (upstream `TypedWithMaxWaitRateLimiter`).
//! - [`default_controller_rate_limiter`]: max of exponential 5 ms .. 1000 s and a 10 qps / 100 burst
//!   bucket (`DefaultTypedControllerRateLimiter`).
//!
//! What differs: `num_requeues` is a `u32` (saturating); a wait that can never end (a bucket with zero
//! burst, or zero qps once empty) is [`Duration::MAX`] instead of Go's `InfDuration`, and the delaying
//! queue treats it as "far future". Time is [`tokio::time::Instant`] so tests run on tokio's paused clock.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

/// Decides how long an item waits before it is retried (upstream `TypedRateLimiter[T]`).
pub trait RateLimiter<T>: Send + Sync {
    /// Records a failure of `item` and returns how long it should wait before the next attempt.
    fn when(&self, item: &T) -> Duration;
    /// Stops tracking `item` (it succeeded, or was given up on).
    fn forget(&self, item: &T);
    /// How many times `item` has failed since it was last forgotten.
    fn num_requeues(&self, item: &T) -> u32;
}

impl<T, R: RateLimiter<T> + ?Sized> RateLimiter<T> for Box<R> {
    fn when(&self, item: &T) -> Duration {
        (**self).when(item)
    }
    fn forget(&self, item: &T) {
        (**self).forget(item)
    }
    fn num_requeues(&self, item: &T) -> u32 {
        (**self).num_requeues(item)
    }
}

impl<T, R: RateLimiter<T> + ?Sized> RateLimiter<T> for Arc<R> {
    fn when(&self, item: &T) -> Duration {
        (**self).when(item)
    }
    fn forget(&self, item: &T) {
        (**self).forget(item)
    }
    fn num_requeues(&self, item: &T) -> u32 {
        (**self).num_requeues(item)
    }
}

/// Per-item failure counts shared by the per-item limiters.
struct Failures<T>(Mutex<HashMap<T, u32>>);

impl<T: Eq + Hash + Clone> Failures<T> {
    fn new() -> Self {
        Self(Mutex::new(HashMap::new()))
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<T, u32>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts one more failure; returns the count before it.
    fn record(&self, item: &T) -> u32 {
        let mut failures = self.lock();
        if let Some(count) = failures.get_mut(item) {
            let before = *count;
            *count = count.saturating_add(1);
            return before;
        }
        failures.insert(item.clone(), 1);
        0
    }

    fn get(&self, item: &T) -> u32 {
        self.lock().get(item).copied().unwrap_or(0)
    }

    fn forget(&self, item: &T) {
        self.lock().remove(item);
    }
}

/// `base * 2^failures`, capped at `max` (upstream `ItemExponentialFailureRateLimiter`).
pub struct ItemExponentialFailureRateLimiter<T> {
    failures: Failures<T>,
    base: Duration,
    max: Duration,
}

impl<T: Eq + Hash + Clone> ItemExponentialFailureRateLimiter<T> {
    pub fn new(base: Duration, max: Duration) -> Self {
        Self {
            failures: Failures::new(),
            base,
            max,
        }
    }
}

impl<T: Eq + Hash + Clone + Send + Sync> RateLimiter<T> for ItemExponentialFailureRateLimiter<T> {
    fn when(&self, item: &T) -> Duration {
        let exp = self.failures.record(item);
        // In floating point like upstream, so a large exponent saturates instead of overflowing; any
        // exponent past 2^1023 is infinite and caps anyway.
        let backoff = self.base.as_nanos() as f64 * 2f64.powi(exp.min(1024) as i32);
        if !backoff.is_finite() || backoff >= self.max.as_nanos() as f64 {
            return self.max;
        }
        Duration::from_nanos(backoff as u64)
    }

    fn forget(&self, item: &T) {
        self.failures.forget(item);
    }

    fn num_requeues(&self, item: &T) -> u32 {
        self.failures.get(item)
    }
}

/// Upstream `DefaultItemBasedRateLimiter`: exponential from 1 ms to 1000 s.
pub fn default_item_based_rate_limiter<T: Eq + Hash + Clone>(
) -> ItemExponentialFailureRateLimiter<T> {
    ItemExponentialFailureRateLimiter::new(Duration::from_millis(1), Duration::from_secs(1000))
}

/// `fast` for the first `max_fast_attempts` failures of an item, then `slow` (upstream
/// `ItemFastSlowRateLimiter`).
pub struct ItemFastSlowRateLimiter<T> {
    failures: Failures<T>,
    fast: Duration,
    slow: Duration,
    max_fast_attempts: u32,
}

impl<T: Eq + Hash + Clone> ItemFastSlowRateLimiter<T> {
    pub fn new(fast: Duration, slow: Duration, max_fast_attempts: u32) -> Self {
        Self {
            failures: Failures::new(),
            fast,
            slow,
            max_fast_attempts,
        }
    }
}

impl<T: Eq + Hash + Clone + Send + Sync> RateLimiter<T> for ItemFastSlowRateLimiter<T> {
    fn when(&self, item: &T) -> Duration {
        let attempt = self.failures.record(item).saturating_add(1);
        if attempt <= self.max_fast_attempts {
            self.fast
        } else {
            self.slow
        }
    }

    fn forget(&self, item: &T) {
        self.failures.forget(item);
    }

    fn num_requeues(&self, item: &T) -> u32 {
        self.failures.get(item)
    }
}

/// One token bucket for all items: overall retry speed, not per item (upstream `BucketRateLimiter` on
/// `rate.NewLimiter(qps, burst)`).
pub struct BucketRateLimiter {
    qps: f64,
    burst: u32,
    bucket: Mutex<Bucket>,
}

struct Bucket {
    /// May go negative: tokens already promised to callers that are waiting for them.
    tokens: f64,
    last: Instant,
}

impl BucketRateLimiter {
    /// A full bucket of `burst` tokens, refilled at `qps` tokens per second.
    pub fn new(qps: f64, burst: u32) -> Self {
        Self {
            qps,
            burst,
            bucket: Mutex::new(Bucket {
                tokens: f64::from(burst),
                last: Instant::now(),
            }),
        }
    }

    /// Takes one token and returns how long until it is available (`Reserve().Delay()`).
    fn reserve(&self) -> Duration {
        if self.qps == f64::INFINITY {
            return Duration::ZERO;
        }
        if self.burst == 0 {
            // Go: a request for more tokens than the burst can never be granted.
            return Duration::MAX;
        }
        let mut bucket = self.bucket.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let elapsed = now.saturating_duration_since(bucket.last);
        let refill = if self.qps > 0.0 {
            elapsed.as_secs_f64() * self.qps
        } else {
            0.0
        };
        let tokens = (bucket.tokens + refill).min(f64::from(self.burst)) - 1.0;
        if tokens < 0.0 && self.qps <= 0.0 {
            // Never refilled: the reservation fails and, as in Go, takes nothing.
            return Duration::MAX;
        }
        bucket.tokens = tokens;
        bucket.last = now;
        if tokens >= 0.0 {
            return Duration::ZERO;
        }
        // Rounded to the nanosecond so multiples of 1/qps come out exact (Go truncates; <1 ns apart).
        let nanos = (-tokens / self.qps * 1e9).round();
        if nanos >= u64::MAX as f64 {
            Duration::MAX
        } else {
            Duration::from_nanos(nanos as u64)
        }
    }
}

impl<T> RateLimiter<T> for BucketRateLimiter {
    fn when(&self, _item: &T) -> Duration {
        self.reserve()
    }

    fn forget(&self, _item: &T) {}

    fn num_requeues(&self, _item: &T) -> u32 {
        0
    }
}

/// The longest wait of several limiters (upstream `MaxOfRateLimiter`). With a token bucket inside, the
/// burst can appear exceeded when some items were delayed longer by another limiter, as upstream notes.
pub struct MaxOfRateLimiter<T> {
    limiters: Vec<Box<dyn RateLimiter<T>>>,
}

impl<T> MaxOfRateLimiter<T> {
    pub fn new(limiters: Vec<Box<dyn RateLimiter<T>>>) -> Self {
        Self { limiters }
    }
}

impl<T> RateLimiter<T> for MaxOfRateLimiter<T> {
    fn when(&self, item: &T) -> Duration {
        // Every limiter is asked, not just until the largest is found: each records the failure.
        self.limiters
            .iter()
            .map(|l| l.when(item))
            .fold(Duration::ZERO, Duration::max)
    }

    fn forget(&self, item: &T) {
        for limiter in &self.limiters {
            limiter.forget(item);
        }
    }

    fn num_requeues(&self, item: &T) -> u32 {
        self.limiters
            .iter()
            .map(|l| l.num_requeues(item))
            .max()
            .unwrap_or(0)
    }
}

/// Caps the wait of another limiter (upstream `TypedWithMaxWaitRateLimiter`).
pub struct WithMaxWaitRateLimiter<T> {
    limiter: Box<dyn RateLimiter<T>>,
    max_wait: Duration,
}

impl<T> WithMaxWaitRateLimiter<T> {
    pub fn new(limiter: Box<dyn RateLimiter<T>>, max_wait: Duration) -> Self {
        Self { limiter, max_wait }
    }
}

impl<T> RateLimiter<T> for WithMaxWaitRateLimiter<T> {
    fn when(&self, item: &T) -> Duration {
        self.limiter.when(item).min(self.max_wait)
    }

    fn forget(&self, item: &T) {
        self.limiter.forget(item);
    }

    fn num_requeues(&self, item: &T) -> u32 {
        self.limiter.num_requeues(item)
    }
}

/// Upstream `DefaultTypedControllerRateLimiter`: per item exponential from 5 ms to 1000 s, and overall
/// 10 qps with a burst of 100 (which only limits retry speed, not the first attempt of each item).
pub fn default_controller_rate_limiter<T>() -> MaxOfRateLimiter<T>
where
    T: Eq + Hash + Clone + Send + Sync + 'static,
{
    MaxOfRateLimiter::new(vec![
        Box::new(ItemExponentialFailureRateLimiter::new(
            Duration::from_millis(5),
            Duration::from_secs(1000),
        )),
        Box::new(BucketRateLimiter::new(10.0, 100)),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn exponential_doubles_from_the_base() {
        let rl = ItemExponentialFailureRateLimiter::new(5 * MS, Duration::from_secs(1000));
        let waits: Vec<Duration> = (0..6).map(|_| rl.when(&"one")).collect();
        assert_eq!(
            waits,
            [5 * MS, 10 * MS, 20 * MS, 40 * MS, 80 * MS, 160 * MS]
        );
        assert_eq!(rl.num_requeues(&"one"), 6);
        // Other items have their own count.
        assert_eq!(rl.when(&"two"), 5 * MS);
        assert_eq!(rl.num_requeues(&"two"), 1);
    }

    #[test]
    fn exponential_caps_at_the_maximum() {
        let rl = ItemExponentialFailureRateLimiter::new(5 * MS, Duration::from_secs(1000));
        // 5 ms * 2^17 = 655.36 s is the last uncapped wait; 2^18 would be 1310.72 s.
        let waits: Vec<Duration> = (0..20).map(|_| rl.when(&1)).collect();
        assert_eq!(waits[17], Duration::from_millis(655_360));
        assert_eq!(waits[18], Duration::from_secs(1000));
        assert_eq!(waits[19], Duration::from_secs(1000));
        // Far past the point where 2^n overflows, it stays capped.
        for _ in 0..2000 {
            rl.when(&1);
        }
        assert_eq!(rl.when(&1), Duration::from_secs(1000));
    }

    #[test]
    fn forget_resets_the_exponential_backoff() {
        let rl = ItemExponentialFailureRateLimiter::new(MS, Duration::from_secs(1));
        rl.when(&"a");
        rl.when(&"a");
        assert_eq!(rl.num_requeues(&"a"), 2);
        rl.forget(&"a");
        assert_eq!(rl.num_requeues(&"a"), 0);
        assert_eq!(rl.when(&"a"), MS);
    }

    #[test]
    fn default_item_based_limiter_starts_at_one_millisecond() {
        let rl = default_item_based_rate_limiter();
        assert_eq!(rl.when(&0u8), MS);
        assert_eq!(rl.when(&0u8), 2 * MS);
    }

    #[test]
    fn fast_slow_switches_after_the_fast_attempts() {
        let rl = ItemFastSlowRateLimiter::new(5 * MS, Duration::from_secs(10), 3);
        let waits: Vec<Duration> = (0..5).map(|_| rl.when(&"x")).collect();
        assert_eq!(
            waits,
            [
                5 * MS,
                5 * MS,
                5 * MS,
                Duration::from_secs(10),
                Duration::from_secs(10)
            ]
        );
        assert_eq!(rl.num_requeues(&"x"), 5);
        rl.forget(&"x");
        assert_eq!(rl.when(&"x"), 5 * MS);
    }

    #[tokio::test(start_paused = true)]
    async fn bucket_allows_the_burst_then_spaces_by_one_over_qps() {
        let rl = BucketRateLimiter::new(10.0, 100);
        for i in 0..100 {
            assert_eq!(
                RateLimiter::<u32>::when(&rl, &i),
                Duration::ZERO,
                "burst token {i}"
            );
        }
        // With the clock stopped each further call waits one more token interval.
        for n in 1..=5u32 {
            assert_eq!(RateLimiter::<u32>::when(&rl, &0), n * 100 * MS);
        }
        assert_eq!(RateLimiter::<u32>::num_requeues(&rl, &0), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn bucket_refills_at_qps() {
        let rl = BucketRateLimiter::new(10.0, 100);
        for _ in 0..100 {
            RateLimiter::<()>::when(&rl, &());
        }
        assert_eq!(RateLimiter::<()>::when(&rl, &()), 100 * MS);
        // Calls spaced by exactly one interval each find their token waiting: one interval after the
        // previous promised one.
        tokio::time::advance(100 * MS).await;
        assert_eq!(RateLimiter::<()>::when(&rl, &()), 100 * MS);
        // After a long pause the bucket is full again, but never more than the burst.
        tokio::time::advance(Duration::from_secs(60)).await;
        for _ in 0..100 {
            assert_eq!(RateLimiter::<()>::when(&rl, &()), Duration::ZERO);
        }
        assert_eq!(RateLimiter::<()>::when(&rl, &()), 100 * MS);
    }

    #[tokio::test(start_paused = true)]
    async fn bucket_edge_cases() {
        assert_eq!(
            RateLimiter::<()>::when(&BucketRateLimiter::new(1.0, 0), &()),
            Duration::MAX
        );
        let unlimited = BucketRateLimiter::new(f64::INFINITY, 0);
        assert_eq!(RateLimiter::<()>::when(&unlimited, &()), Duration::ZERO);
        let never_refilled = BucketRateLimiter::new(0.0, 1);
        assert_eq!(
            RateLimiter::<()>::when(&never_refilled, &()),
            Duration::ZERO
        );
        assert_eq!(RateLimiter::<()>::when(&never_refilled, &()), Duration::MAX);
    }

    #[test]
    fn max_of_returns_the_longest_wait_and_forgets_everywhere() {
        let rl = MaxOfRateLimiter::new(vec![
            Box::new(ItemFastSlowRateLimiter::new(3 * MS, 30 * MS, 2)),
            Box::new(ItemExponentialFailureRateLimiter::new(
                MS,
                Duration::from_secs(1),
            )),
        ]);
        // fast/slow: 3, 3, 30, 30; exponential: 1, 2, 4, 8, 16, 32, 64
        let waits: Vec<Duration> = (0..7).map(|_| rl.when(&"k")).collect();
        assert_eq!(
            waits,
            [3 * MS, 3 * MS, 30 * MS, 30 * MS, 30 * MS, 32 * MS, 64 * MS]
        );
        assert_eq!(rl.num_requeues(&"k"), 7);
        rl.forget(&"k");
        assert_eq!(rl.num_requeues(&"k"), 0);
        assert_eq!(rl.when(&"k"), 3 * MS);
        assert_eq!(
            MaxOfRateLimiter::<u8>::new(Vec::new()).when(&0),
            Duration::ZERO
        );
    }

    #[test]
    fn with_max_wait_caps_the_inner_limiter() {
        let rl = WithMaxWaitRateLimiter::new(
            Box::new(ItemExponentialFailureRateLimiter::new(
                10 * MS,
                Duration::from_secs(100),
            )),
            25 * MS,
        );
        let waits: Vec<Duration> = (0..4).map(|_| rl.when(&1)).collect();
        assert_eq!(waits, [10 * MS, 20 * MS, 25 * MS, 25 * MS]);
        assert_eq!(rl.num_requeues(&1), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn default_controller_limiter_is_max_of_exponential_and_bucket() {
        let rl = default_controller_rate_limiter::<String>();
        let key = |k: &str| k.to_owned();
        // One item failing repeatedly: the per-item exponential dominates while the bucket has tokens.
        let waits: Vec<Duration> = (0..4).map(|_| rl.when(&key("x"))).collect();
        assert_eq!(waits, [5 * MS, 10 * MS, 20 * MS, 40 * MS]);
        // Many distinct items: after the 100-token burst (4 used above), the bucket dominates.
        for i in 0..96 {
            assert_eq!(rl.when(&i.to_string()), 5 * MS);
        }
        assert_eq!(rl.when(&key("y")), 100 * MS);
        assert_eq!(rl.when(&key("z")), 200 * MS);
        assert_eq!(rl.num_requeues(&key("x")), 4);
        rl.forget(&key("x"));
        assert_eq!(rl.num_requeues(&key("x")), 0);
    }
}
