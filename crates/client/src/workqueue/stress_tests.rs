//! Concurrent stress test of the work queue guarantees (issue 4): 8 workers, 100,000 adds of 1,000 keys,
//! with workers re-adding the key they are processing at random.
//!
//! Checked:
//! - no key is ever processed by two workers at once (a per-key in-flight flag set at processing start and
//!   cleared before `done`);
//! - every add is followed by a processing that started after it. Each add takes a global sequence
//!   number *before* calling `add` and records it as the key's latest add; each processing start records
//!   the global sequence it sees *after* `get` returned. If `get` happened after an add, it sees at least
//!   that add's number, so "the key's highest start-seen number >= its latest add number" holds exactly
//!   when the latest add (and so every earlier one) was followed by a processing start. The check can
//!   only err towards passing, in the few instructions between taking a number and the `add`, never fail
//!   spuriously.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::Queue;

const WORKERS: usize = 8;
const KEYS: usize = 1_000;
const ADDS: u64 = 100_000;

struct Tracker {
    /// Global add sequence; the value after an add's `fetch_add` is that add's number.
    seq: AtomicU64,
    /// Adds claimed from the budget, and adds whose `add` call has returned.
    claimed: AtomicU64,
    completed: AtomicU64,
    re_adds: AtomicU64,
    processings: AtomicU64,
    violations: AtomicU64,
    busy: AtomicUsize,
    max_busy: AtomicUsize,
    in_flight: Vec<AtomicBool>,
    /// Per key: number of the latest add.
    last_add: Vec<AtomicU64>,
    /// Per key: highest global sequence seen at a processing start.
    covered: Vec<AtomicU64>,
}

impl Tracker {
    fn new() -> Self {
        Self {
            seq: AtomicU64::new(0),
            claimed: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            re_adds: AtomicU64::new(0),
            processings: AtomicU64::new(0),
            violations: AtomicU64::new(0),
            busy: AtomicUsize::new(0),
            max_busy: AtomicUsize::new(0),
            in_flight: (0..KEYS).map(|_| AtomicBool::new(false)).collect(),
            last_add: (0..KEYS).map(|_| AtomicU64::new(0)).collect(),
            covered: (0..KEYS).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Adds `key` if the budget of `ADDS` is not used up; returns whether it did.
    fn add(&self, queue: &Queue<u32>, key: u32) -> bool {
        if self
            .claimed
            .fetch_update(SeqCst, SeqCst, |n| (n < ADDS).then_some(n + 1))
            .is_err()
        {
            return false;
        }
        let number = self.seq.fetch_add(1, SeqCst) + 1;
        self.last_add[key as usize].fetch_max(number, SeqCst);
        queue.add(key);
        self.completed.fetch_add(1, SeqCst);
        true
    }
}

async fn worker(queue: Queue<u32>, tracker: Arc<Tracker>, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    while let Some(key) = queue.get().await {
        let k = key as usize;
        let seen = tracker.seq.load(SeqCst);
        tracker.covered[k].fetch_max(seen, SeqCst);
        if tracker.in_flight[k].swap(true, SeqCst) {
            tracker.violations.fetch_add(1, SeqCst);
        }
        let busy = tracker.busy.fetch_add(1, SeqCst) + 1;
        tracker.max_busy.fetch_max(busy, SeqCst);
        tracker.processings.fetch_add(1, SeqCst);

        // "Work": a few yields so other workers and the producer interleave, with re-adds of this key
        // in the middle of its processing.
        for _ in 0..rng.random_range(0..3) {
            tokio::task::yield_now().await;
        }
        if rng.random_bool(0.3) && tracker.add(&queue, key) {
            tracker.re_adds.fetch_add(1, SeqCst);
            tokio::task::yield_now().await;
        }

        tracker.busy.fetch_sub(1, SeqCst);
        tracker.in_flight[k].store(false, SeqCst);
        queue.done(&key);
    }
}

async fn producer(queue: Queue<u32>, tracker: Arc<Tracker>) {
    let mut rng = StdRng::seed_from_u64(0x5eed);
    let mut n = 0u64;
    while tracker.add(&queue, rng.random_range(0..KEYS as u32)) {
        n += 1;
        if n & 15 == 0 {
            tokio::task::yield_now().await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_concurrent_processing_and_every_add_is_processed() {
    let queue: Queue<u32> = Queue::new();
    let tracker = Arc::new(Tracker::new());

    let run = async {
        let workers: Vec<_> = (0..WORKERS)
            .map(|i| tokio::spawn(worker(queue.clone(), Arc::clone(&tracker), i as u64 + 1)))
            .collect();
        tokio::spawn(producer(queue.clone(), Arc::clone(&tracker)))
            .await
            .expect("producer panicked");
        // Workers may still be inside an add they claimed; the queue must not shut down under them.
        while tracker.completed.load(SeqCst) < ADDS {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        queue.shut_down_with_drain().await;
        for w in workers {
            w.await.expect("worker panicked");
        }
    };
    if tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .is_err()
    {
        panic!(
            "stress test did not finish in time ({} concurrent processings seen, {} of {ADDS} adds done)",
            tracker.violations.load(SeqCst),
            tracker.completed.load(SeqCst)
        );
    }

    assert_eq!(tracker.completed.load(SeqCst), ADDS);
    assert_eq!(
        tracker.violations.load(SeqCst),
        0,
        "a key was processed by two workers at once"
    );
    let mut uncovered = Vec::new();
    for key in 0..KEYS {
        let last = tracker.last_add[key].load(SeqCst);
        if last > tracker.covered[key].load(SeqCst) {
            uncovered.push(key);
        }
    }
    assert!(
        uncovered.is_empty(),
        "adds not followed by a processing: keys {uncovered:?}"
    );
    assert!(queue.is_empty());
    assert_eq!(queue.sets(), (0, 0));

    // The run must actually have exercised the interesting paths.
    let re_adds = tracker.re_adds.load(SeqCst);
    let processings = tracker.processings.load(SeqCst);
    assert!(re_adds > 1_000, "only {re_adds} re-adds during processing");
    assert!(processings >= KEYS as u64, "only {processings} processings");
    assert!(
        tracker.max_busy.load(SeqCst) >= 2,
        "workers never overlapped"
    );
}
