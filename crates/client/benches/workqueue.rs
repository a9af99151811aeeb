//! Work queue throughput (issue 4): adds/s from one producer, and get/done pairs/s with 1 and 8 workers.
//!
//! Run: `cargo bench -p client --bench workqueue`. Prints a markdown table for docs/benchmarks.md.
//!
//! - adds: one producer calls `add` 1,000,000 times cycling over 10,000 `namespace/name` string keys
//!   (cloning the key each time, as a caller handing over an owned key does). No consumer runs, so after
//!   the first 10,000 the adds are deduplicated: this is the event-handler path of a busy controller.
//! - get/done: the queue is filled with distinct keys (not timed) and shut down, then N worker tasks on
//!   the multi-thread runtime call `get` and `done` until it is empty. Measured two ways: 100 rounds of a
//!   10,000-key queue (a controller-sized working set that stays in cache), and one 1,000,000-deep queue,
//!   where each pair is dominated by cache misses in the 1M-entry map.
//!
//! Each scenario runs for an unnamed queue (no metrics) and a named one (metrics on: two clock reads and
//! histogram updates per item). The median of five runs is reported.

use std::time::{Duration, Instant};

use client::workqueue::{MetricsRegistry, Queue, QueueConfig};

const ADDS: usize = 1_000_000;
const ADD_KEYS: usize = 10_000;
/// Pairs per get/done measurement: `rounds * items`.
const PAIRS: usize = 1_000_000;
const RUNS: usize = 5;

fn config(metrics: bool, registry: &MetricsRegistry) -> QueueConfig {
    if metrics {
        QueueConfig::named("bench").with_registry(registry)
    } else {
        QueueConfig::default()
    }
}

fn keys(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("default/pod-{i:07}")).collect()
}

fn bench_adds(metrics: bool) -> Duration {
    let registry = MetricsRegistry::new();
    let keys = keys(ADD_KEYS);
    let queue: Queue<String> = Queue::with_config(config(metrics, &registry));
    let start = Instant::now();
    for i in 0..ADDS {
        queue.add(keys[i % ADD_KEYS].clone());
    }
    let elapsed = start.elapsed();
    assert_eq!(queue.len(), ADD_KEYS);
    elapsed
}

/// Fills a queue with `items` distinct keys and drains it with `workers` tasks, `PAIRS / items` times;
/// returns the time spent draining.
fn bench_get_done(
    rt: &tokio::runtime::Runtime,
    workers: usize,
    items: usize,
    metrics: bool,
) -> Duration {
    let registry = MetricsRegistry::new();
    let keys = keys(items);
    let mut elapsed = Duration::ZERO;
    for _ in 0..PAIRS / items {
        let queue: Queue<String> = Queue::with_config(config(metrics, &registry));
        for key in &keys {
            queue.add(key.clone());
        }
        // Shut down so `get` returns None once the queue is empty and the workers end.
        queue.shut_down();
        elapsed += rt.block_on(async {
            let start = Instant::now();
            let tasks: Vec<_> = (0..workers)
                .map(|_| {
                    let queue = queue.clone();
                    tokio::spawn(async move {
                        let mut n = 0usize;
                        while let Some(key) = queue.get().await {
                            queue.done(&key);
                            n += 1;
                        }
                        n
                    })
                })
                .collect();
            let mut total = 0;
            for task in tasks {
                total += task.await.unwrap_or(0);
            }
            let elapsed = start.elapsed();
            assert_eq!(total, items);
            elapsed
        });
    }
    elapsed
}

fn median(mut runs: Vec<Duration>) -> Duration {
    runs.sort_unstable();
    runs[runs.len() / 2]
}

fn row(scenario: &str, queue: &str, ops: usize, elapsed: Duration) {
    let secs = elapsed.as_secs_f64();
    println!(
        "| {scenario} | {queue} | {ops} | {:.1} | {:.2} M/s |",
        secs * 1e3,
        ops as f64 / secs / 1e6
    );
}

fn main() {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start the tokio runtime: {e}");
            std::process::exit(1);
        }
    };

    println!("Work queue throughput (`cargo bench -p client --bench workqueue`), {threads} CPU(s), tokio multi-thread runtime with {threads} worker threads, median of {RUNS} runs.");
    println!();
    println!("| scenario | queue | ops | time (ms) | throughput |");
    println!("| --- | --- | ---: | ---: | ---: |");
    for (metrics, label) in [(false, "unnamed (no metrics)"), (true, "named (metrics)")] {
        let adds = median((0..RUNS).map(|_| bench_adds(metrics)).collect());
        row(
            &format!("add, 1 producer, {ADDS} adds over {ADD_KEYS} keys"),
            label,
            ADDS,
            adds,
        );
        for (items, depth) in [
            (ADD_KEYS, "10,000-key queue x 100"),
            (PAIRS, "one 1,000,000-key queue"),
        ] {
            for workers in [1, 8] {
                let runs = (0..RUNS).map(|_| bench_get_done(&rt, workers, items, metrics));
                row(
                    &format!("get + done, {workers} worker(s), {depth}"),
                    label,
                    PAIRS,
                    median(runs.collect()),
                );
            }
        }
    }
}
