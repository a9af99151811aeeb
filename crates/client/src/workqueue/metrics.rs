//! Work queue metrics: upstream client-go `util/workqueue/metrics.go` (what is measured and when) together
//! with component-base `metrics/prometheus/workqueue/metrics.go` (the series names, help texts and buckets a
//! Kubernetes component exposes on `/metrics`).
//!
//! Series, all labelled `name="<queue name>"`:
//! `workqueue_depth`, `workqueue_adds_total`, `workqueue_queue_duration_seconds` (histogram, add -> get),
//! `workqueue_work_duration_seconds` (histogram, get -> done), `workqueue_unfinished_work_seconds`,
//! `workqueue_longest_running_processor_seconds` and `workqueue_retries_total`.
//!
//! What differs from upstream:
//! - No pluggable `MetricsProvider` and no Prometheus client library: a [`MetricsRegistry`] keeps one set of
//!   atomic counters per queue name and renders the text exposition format itself. Queues that share a name
//!   share the series, as upstream's `WithLabelValues(name)` children do.
//! - Upstream refreshes the two "unfinished work" gauges from a ticker every 500 ms per queue; here they are
//!   computed when the registry renders, from the processing start times of every live queue of that name.
//!   That is exact at scrape time and costs nothing between scrapes.
//! - Histogram buckets are 1e-8 s .. 10 s, ten buckets growing by ×10 (client-go's historical
//!   `ExponentialBuckets(10e-9, 10, 10)`, which controller-runtime still uses; current component-base starts
//!   at 1e-6 s). They are kept as integer nanoseconds so bucketing is exact.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use tokio::time::Instant;

/// Upper bounds of the latency and work duration histogram buckets, in nanoseconds (1e-8 s .. 10 s).
pub const HISTOGRAM_BUCKETS_NANOS: [u64; 10] = [
    10,
    100,
    1_000,
    10_000,
    100_000,
    1_000_000,
    10_000_000,
    100_000_000,
    1_000_000_000,
    10_000_000_000,
];

/// The `le` label of each bucket, spelled as Prometheus' Go client prints floats (`%g`), so scrapes diff
/// cleanly against upstream components.
const BUCKET_LABELS: [&str; 10] = [
    "1e-08", "1e-07", "1e-06", "1e-05", "0.0001", "0.001", "0.01", "0.1", "1", "10",
];

/// A fixed-bucket histogram updated with atomics, so queues sharing a name can observe concurrently.
#[derive(Default)]
pub(crate) struct Histogram {
    /// Non-cumulative counts per bucket; the last slot is the `+Inf` overflow bucket.
    buckets: [AtomicU64; HISTOGRAM_BUCKETS_NANOS.len() + 1],
    /// Sum of observations in seconds, stored as `f64` bits. Kept as float (not integer nanoseconds)
    /// because a busy queue's total work time can exceed what `u64` nanoseconds hold (584 years).
    sum_bits: AtomicU64,
}

impl Histogram {
    pub(crate) fn observe(&self, value: Duration) {
        let nanos = u64::try_from(value.as_nanos()).unwrap_or(u64::MAX);
        let slot = HISTOGRAM_BUCKETS_NANOS
            .iter()
            .position(|&bound| nanos <= bound)
            .unwrap_or(HISTOGRAM_BUCKETS_NANOS.len());
        self.buckets[slot].fetch_add(1, Ordering::Relaxed);
        let secs = value.as_secs_f64();
        // fetch_update only fails when the closure returns None, which it never does.
        let _ = self
            .sum_bits
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                Some((f64::from_bits(bits) + secs).to_bits())
            });
    }

    fn snapshot(&self) -> HistogramSnapshot {
        let mut buckets = [0u64; HISTOGRAM_BUCKETS_NANOS.len() + 1];
        for (dst, src) in buckets.iter_mut().zip(&self.buckets) {
            *dst = src.load(Ordering::Relaxed);
        }
        HistogramSnapshot {
            buckets,
            sum: f64::from_bits(self.sum_bits.load(Ordering::Relaxed)),
        }
    }
}

struct HistogramSnapshot {
    buckets: [u64; HISTOGRAM_BUCKETS_NANOS.len() + 1],
    sum: f64,
}

/// Something that knows how long its in-flight items have been processing: each live queue.
pub(crate) trait UnfinishedWork: Send + Sync {
    /// Returns (sum of the ages of all items being processed, age of the oldest one), in seconds.
    fn unfinished_work(&self, now: Instant) -> (f64, f64);
}

/// The metrics of all queues with one name (upstream `defaultQueueMetrics` + `defaultRetryMetrics`).
#[derive(Default)]
pub(crate) struct QueueMetrics {
    pub(crate) depth: AtomicI64,
    pub(crate) adds: AtomicU64,
    pub(crate) retries: AtomicU64,
    pub(crate) latency: Histogram,
    pub(crate) work_duration: Histogram,
    /// Live queues of this name, asked for their unfinished work at render time. Weak so that dropping a
    /// queue is not prevented by the registry.
    sources: Mutex<Vec<Weak<dyn UnfinishedWork>>>,
}

impl QueueMetrics {
    pub(crate) fn register_source(&self, source: Weak<dyn UnfinishedWork>) {
        let mut sources = self.sources.lock().unwrap_or_else(|e| e.into_inner());
        sources.retain(|s| s.strong_count() > 0);
        sources.push(source);
    }

    fn snapshot(&self, now: Instant) -> Snapshot {
        let (mut unfinished, mut longest) = (0.0f64, 0.0f64);
        {
            let mut sources = self.sources.lock().unwrap_or_else(|e| e.into_inner());
            sources.retain(|s| s.strong_count() > 0);
            for source in sources.iter().filter_map(Weak::upgrade) {
                let (total, oldest) = source.unfinished_work(now);
                unfinished += total;
                longest = longest.max(oldest);
            }
        }
        Snapshot {
            depth: self.depth.load(Ordering::Relaxed),
            adds: self.adds.load(Ordering::Relaxed),
            retries: self.retries.load(Ordering::Relaxed),
            latency: self.latency.snapshot(),
            work_duration: self.work_duration.snapshot(),
            unfinished,
            longest,
        }
    }
}

struct Snapshot {
    depth: i64,
    adds: u64,
    retries: u64,
    latency: HistogramSnapshot,
    work_duration: HistogramSnapshot,
    unfinished: f64,
    longest: f64,
}

/// The queue metrics of a component, rendered for its `/metrics` endpoint.
///
/// Cheap to clone (a shared handle). Queues created with a non-empty name register here (see
/// [`QueueConfig`](super::QueueConfig)); queues without a name record nothing, as upstream.
#[derive(Clone, Default)]
pub struct MetricsRegistry {
    queues: Arc<Mutex<BTreeMap<String, Arc<QueueMetrics>>>>,
}

impl std::fmt::Debug for MetricsRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsRegistry")
            .field("queues", &self.queue_names())
            .finish()
    }
}

impl MetricsRegistry {
    /// An empty registry (tests, or a component that wants its own).
    pub fn new() -> Self {
        Self::default()
    }

    /// The process-wide registry named queues use when their config names no registry, as upstream's
    /// global metrics provider.
    pub fn global() -> &'static MetricsRegistry {
        static GLOBAL: OnceLock<MetricsRegistry> = OnceLock::new();
        GLOBAL.get_or_init(MetricsRegistry::new)
    }

    /// Names of the queues that have registered, sorted.
    pub fn queue_names(&self) -> Vec<String> {
        let queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        queues.keys().cloned().collect()
    }

    /// The shared metrics for `name`, created on first use.
    pub(crate) fn queue_metrics(&self, name: &str) -> Arc<QueueMetrics> {
        let mut queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(existing) = queues.get(name) {
            return Arc::clone(existing);
        }
        let metrics = Arc::new(QueueMetrics::default());
        queues.insert(name.to_owned(), Arc::clone(&metrics));
        metrics
    }

    /// All queues' series in the Prometheus text exposition format (version 0.0.4), families sorted by
    /// name as Prometheus' Go client writes them, series sorted by queue name.
    pub fn render(&self) -> String {
        let now = Instant::now();
        // Snapshot under the registry lock only; each snapshot then locks its own queues briefly.
        let queues: Vec<(String, Arc<QueueMetrics>)> = {
            let queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
            queues
                .iter()
                .map(|(name, m)| (escape_label_value(name), Arc::clone(m)))
                .collect()
        };
        let snapshots: Vec<(String, Snapshot)> = queues
            .into_iter()
            .map(|(name, m)| (name, m.snapshot(now)))
            .collect();

        let mut out = String::new();
        family(
            &mut out,
            "workqueue_adds_total",
            "counter",
            "Total number of adds handled by workqueue",
        );
        for (name, s) in &snapshots {
            let _ = writeln!(out, "workqueue_adds_total{{name=\"{name}\"}} {}", s.adds);
        }
        family(
            &mut out,
            "workqueue_depth",
            "gauge",
            "Current depth of workqueue",
        );
        for (name, s) in &snapshots {
            let _ = writeln!(out, "workqueue_depth{{name=\"{name}\"}} {}", s.depth);
        }
        family(
            &mut out,
            "workqueue_longest_running_processor_seconds",
            "gauge",
            "How many seconds has the longest running processor for workqueue been running.",
        );
        for (name, s) in &snapshots {
            let _ = writeln!(
                out,
                "workqueue_longest_running_processor_seconds{{name=\"{name}\"}} {}",
                s.longest
            );
        }
        family(
            &mut out,
            "workqueue_queue_duration_seconds",
            "histogram",
            "How long in seconds an item stays in workqueue before being requested.",
        );
        for (name, s) in &snapshots {
            histogram(
                &mut out,
                "workqueue_queue_duration_seconds",
                name,
                &s.latency,
            );
        }
        family(
            &mut out,
            "workqueue_retries_total",
            "counter",
            "Total number of retries handled by workqueue",
        );
        for (name, s) in &snapshots {
            let _ = writeln!(
                out,
                "workqueue_retries_total{{name=\"{name}\"}} {}",
                s.retries
            );
        }
        family(
            &mut out,
            "workqueue_unfinished_work_seconds",
            "gauge",
            "How many seconds of work has done that is in progress and hasn't been observed by \
             work_duration. Large values indicate stuck threads. One can deduce the number of stuck \
             threads by observing the rate at which this increases.",
        );
        for (name, s) in &snapshots {
            let _ = writeln!(
                out,
                "workqueue_unfinished_work_seconds{{name=\"{name}\"}} {}",
                s.unfinished
            );
        }
        family(
            &mut out,
            "workqueue_work_duration_seconds",
            "histogram",
            "How long in seconds processing an item from workqueue takes.",
        );
        for (name, s) in &snapshots {
            histogram(
                &mut out,
                "workqueue_work_duration_seconds",
                name,
                &s.work_duration,
            );
        }
        out
    }
}

/// `# HELP` and `# TYPE` lines; component-base prefixes the help of BETA metrics with `[BETA]`.
fn family(out: &mut String, metric: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {metric} [BETA] {help}");
    let _ = writeln!(out, "# TYPE {metric} {kind}");
}

fn histogram(out: &mut String, metric: &str, name: &str, h: &HistogramSnapshot) {
    let mut cumulative = 0u64;
    for (le, count) in BUCKET_LABELS.iter().zip(&h.buckets) {
        cumulative += count;
        let _ = writeln!(
            out,
            "{metric}_bucket{{name=\"{name}\",le=\"{le}\"}} {cumulative}"
        );
    }
    cumulative += h.buckets[HISTOGRAM_BUCKETS_NANOS.len()];
    let _ = writeln!(
        out,
        "{metric}_bucket{{name=\"{name}\",le=\"+Inf\"}} {cumulative}"
    );
    let _ = writeln!(out, "{metric}_sum{{name=\"{name}\"}} {}", h.sum);
    let _ = writeln!(out, "{metric}_count{{name=\"{name}\"}} {cumulative}");
}

/// Label values escape backslash, double quote and newline (text format spec).
fn escape_label_value(value: &str) -> String {
    let mut escaped = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => escaped.push_str("\\\\"),
            '"' => escaped.push_str("\\\""),
            '\n' => escaped.push_str("\\n"),
            c => escaped.push(c),
        }
    }
    escaped
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workqueue::rate_limiters::ItemExponentialFailureRateLimiter;
    use crate::workqueue::{Queue, QueueConfig, RateLimitingQueue};

    fn line_value(text: &str, series: &str) -> Option<String> {
        text.lines()
            .find_map(|l| {
                l.strip_prefix(series)
                    .and_then(|rest| rest.strip_prefix(' '))
            })
            .map(str::to_owned)
    }

    #[test]
    fn histogram_buckets_are_inclusive_upper_bounds() {
        let h = Histogram::default();
        h.observe(Duration::from_nanos(10)); // exactly 1e-8 s -> first bucket
        h.observe(Duration::from_nanos(11)); // -> 1e-7
        h.observe(Duration::from_secs(10)); // -> 10
        h.observe(Duration::from_secs(11)); // -> +Inf only
        let s = h.snapshot();
        assert_eq!(s.buckets[0], 1);
        assert_eq!(s.buckets[1], 1);
        assert_eq!(s.buckets[9], 1);
        assert_eq!(s.buckets[10], 1);
        assert!((s.sum - 21.000_000_021).abs() < 1e-9);
    }

    #[tokio::test(start_paused = true)]
    async fn render_reports_each_series_with_counts() {
        let registry = MetricsRegistry::new();
        let q: Queue<String> =
            Queue::with_config(QueueConfig::named("pods").with_registry(&registry));
        q.add("a".to_owned());
        q.add("b".to_owned());
        q.add("a".to_owned()); // deduplicated: not counted as an add, as upstream
        tokio::time::advance(Duration::from_millis(5)).await;
        let a = q.get().await;
        assert_eq!(a.as_deref(), Some("a"));
        tokio::time::advance(Duration::from_millis(2)).await;
        q.done(&"a".to_owned());
        let b = q.get().await;
        assert_eq!(b.as_deref(), Some("b"));
        tokio::time::advance(Duration::from_secs(3)).await;

        let text = registry.render();
        let v = |series: &str| line_value(&text, series);
        assert_eq!(
            v(r#"workqueue_adds_total{name="pods"}"#).as_deref(),
            Some("2")
        );
        assert_eq!(v(r#"workqueue_depth{name="pods"}"#).as_deref(), Some("0"));
        // Both items waited 5 ms or more before being handed out: latency 5 ms and 7 ms.
        assert_eq!(
            v(r#"workqueue_queue_duration_seconds_bucket{name="pods",le="0.001"}"#).as_deref(),
            Some("0")
        );
        assert_eq!(
            v(r#"workqueue_queue_duration_seconds_bucket{name="pods",le="0.01"}"#).as_deref(),
            Some("2")
        );
        assert_eq!(
            v(r#"workqueue_queue_duration_seconds_bucket{name="pods",le="+Inf"}"#).as_deref(),
            Some("2")
        );
        assert_eq!(
            v(r#"workqueue_queue_duration_seconds_sum{name="pods"}"#).as_deref(),
            Some("0.012")
        );
        assert_eq!(
            v(r#"workqueue_queue_duration_seconds_count{name="pods"}"#).as_deref(),
            Some("2")
        );
        // "a" took 2 ms from get to done; "b" is still processing, for 3 s.
        assert_eq!(
            v(r#"workqueue_work_duration_seconds_count{name="pods"}"#).as_deref(),
            Some("1")
        );
        assert_eq!(
            v(r#"workqueue_work_duration_seconds_sum{name="pods"}"#).as_deref(),
            Some("0.002")
        );
        assert_eq!(
            v(r#"workqueue_work_duration_seconds_bucket{name="pods",le="0.001"}"#).as_deref(),
            Some("0")
        );
        assert_eq!(
            v(r#"workqueue_work_duration_seconds_bucket{name="pods",le="0.01"}"#).as_deref(),
            Some("1")
        );
        assert_eq!(
            v(r#"workqueue_unfinished_work_seconds{name="pods"}"#).as_deref(),
            Some("3")
        );
        assert_eq!(
            v(r#"workqueue_longest_running_processor_seconds{name="pods"}"#).as_deref(),
            Some("3")
        );
        assert_eq!(
            v(r#"workqueue_retries_total{name="pods"}"#).as_deref(),
            Some("0")
        );

        // Every family has exactly one HELP and one TYPE line, and families come sorted.
        let types: Vec<&str> = text.lines().filter(|l| l.starts_with("# TYPE ")).collect();
        assert_eq!(
            types,
            [
                "# TYPE workqueue_adds_total counter",
                "# TYPE workqueue_depth gauge",
                "# TYPE workqueue_longest_running_processor_seconds gauge",
                "# TYPE workqueue_queue_duration_seconds histogram",
                "# TYPE workqueue_retries_total counter",
                "# TYPE workqueue_unfinished_work_seconds gauge",
                "# TYPE workqueue_work_duration_seconds histogram",
            ]
        );
        assert!(text.contains(
            "# HELP workqueue_adds_total [BETA] Total number of adds handled by workqueue\n"
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn depth_counts_items_re_added_while_processing() {
        let registry = MetricsRegistry::new();
        let q: Queue<u32> =
            Queue::with_config(QueueConfig::named("depth").with_registry(&registry));
        q.add(1);
        let one = q.get().await;
        assert_eq!(one, Some(1));
        q.add(1); // dirty while processing: counted in depth as upstream, though not yet in the queue
        let text = registry.render();
        assert_eq!(
            line_value(&text, r#"workqueue_depth{name="depth"}"#).as_deref(),
            Some("1")
        );
        assert_eq!(
            line_value(&text, r#"workqueue_adds_total{name="depth"}"#).as_deref(),
            Some("2")
        );
        assert_eq!(q.len(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn retries_count_rate_limited_adds() {
        let registry = MetricsRegistry::new();
        let q = RateLimitingQueue::with_config(
            ItemExponentialFailureRateLimiter::new(
                Duration::from_millis(1),
                Duration::from_secs(1),
            ),
            QueueConfig::named("retry").with_registry(&registry),
        );
        q.add_rate_limited("x");
        q.add_rate_limited("x");
        q.add_after("y", Duration::ZERO);
        q.add("z"); // a plain add is not a retry
        let text = registry.render();
        assert_eq!(
            line_value(&text, r#"workqueue_retries_total{name="retry"}"#).as_deref(),
            Some("3")
        );
    }

    #[tokio::test]
    async fn queues_sharing_a_name_share_series_and_unnamed_queues_register_nothing() {
        let registry = MetricsRegistry::new();
        let q1: Queue<u8> =
            Queue::with_config(QueueConfig::named("shared").with_registry(&registry));
        let q2: Queue<u8> =
            Queue::with_config(QueueConfig::named("shared").with_registry(&registry));
        let unnamed: Queue<u8> =
            Queue::with_config(QueueConfig::default().with_registry(&registry));
        q1.add(1);
        q2.add(1);
        unnamed.add(1);
        assert_eq!(registry.queue_names(), ["shared"]);
        let text = registry.render();
        assert_eq!(
            line_value(&text, r#"workqueue_adds_total{name="shared"}"#).as_deref(),
            Some("2")
        );
        // Counters outlive the queues, as upstream's registered metric vectors do.
        drop((q1, q2));
        let text = registry.render();
        assert_eq!(
            line_value(&text, r#"workqueue_adds_total{name="shared"}"#).as_deref(),
            Some("2")
        );
    }

    #[test]
    fn label_values_are_escaped() {
        let registry = MetricsRegistry::new();
        let _q: Queue<u8> =
            Queue::with_config(QueueConfig::named("we\"ird\\na\nme").with_registry(&registry));
        let text = registry.render();
        assert!(
            text.contains(r#"workqueue_depth{name="we\"ird\\na\nme"} 0"#),
            "{text}"
        );
    }
}
