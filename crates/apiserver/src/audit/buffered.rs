//! The batching wrapper (upstream `plugin/pkg/audit/buffered`), used by the webhook's `batch`
//! mode: events wait in a bounded buffer; a batch leaves when it has `max_batch_size` events or
//! every `max_batch_wait`, at most `throttle_qps` batches a second (bursts of `throttle_burst`),
//! each sent on its own task so one slow POST does not hold the next.
//!
//! The request path only ever `try_send`s: a full buffer drops the event, logs and counts it
//! (`apiserver_audit_error_total{plugin="webhook"}`), and the request goes on.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::event::Event;
use super::webhook::Webhook;

/// Body bytes held in the buffer; past it events keep their metadata and lose their bodies, as in
/// the log backend.
const BUFFER_BYTES: usize = 64 << 20;
/// Batches being sent at once (upstream starts a goroutine per batch, bounded only by the
/// throttle): past it the collector waits and the buffer absorbs, then drops.
const MAX_IN_FLIGHT: usize = 32;

/// `--audit-webhook-batch-*` (upstream's `BatchConfig`).
#[derive(Clone, Debug)]
pub struct BatchConfig {
    pub buffer_size: usize,
    pub max_batch_size: usize,
    pub max_batch_wait: Duration,
    /// `--audit-webhook-batch-throttle-enable` with its QPS and burst.
    pub throttle: Option<(f64, usize)>,
}

impl Default for BatchConfig {
    /// Upstream's webhook defaults.
    fn default() -> BatchConfig {
        BatchConfig {
            buffer_size: 10_000,
            max_batch_size: 400,
            max_batch_wait: Duration::from_secs(30),
            throttle: Some((10.0, 15)),
        }
    }
}

impl BatchConfig {
    pub fn validate(&self) -> Result<(), String> {
        if self.buffer_size == 0 {
            return Err("--audit-webhook-batch-buffer-size must be positive".into());
        }
        if self.max_batch_size == 0 {
            return Err("--audit-webhook-batch-max-size must be positive".into());
        }
        if self.max_batch_wait.is_zero() {
            return Err("--audit-webhook-batch-max-wait must be positive".into());
        }
        if let Some((qps, burst)) = self.throttle {
            if !(qps > 0.0 && qps.is_finite()) {
                return Err("--audit-webhook-batch-throttle-qps must be positive".into());
            }
            if burst == 0 {
                return Err("--audit-webhook-batch-throttle-burst must be positive".into());
            }
        }
        Ok(())
    }
}

/// The request side of the buffer.
pub struct Buffered {
    tx: mpsc::Sender<Event>,
    held_bytes: Arc<AtomicUsize>,
    webhook: Arc<Webhook>,
}

impl Buffered {
    /// Starts the collector on a thread of its own (with its own runtime: the server's may be
    /// busy, and events must still leave).
    pub fn start(webhook: Arc<Webhook>, config: BatchConfig) -> Result<Buffered, String> {
        config.validate()?;
        let (tx, rx) = mpsc::channel(config.buffer_size);
        let held_bytes = Arc::new(AtomicUsize::new(0));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the audit webhook: {e}"))?;
        let (hook, held) = (webhook.clone(), held_bytes.clone());
        std::thread::Builder::new()
            .name("audit-webhook".into())
            .spawn(move || rt.block_on(run(rx, hook, config, held)))
            .map_err(|e| format!("cannot start the audit webhook: {e}"))?;
        Ok(Buffered {
            tx,
            held_bytes,
            webhook,
        })
    }

    /// A buffer nothing drains, for tests.
    #[cfg(test)]
    pub(crate) fn unstarted(
        webhook: Arc<Webhook>,
        size: usize,
    ) -> (Buffered, mpsc::Receiver<Event>) {
        let (tx, rx) = mpsc::channel(size);
        let held_bytes = Arc::default();
        (
            Buffered {
                tx,
                held_bytes,
                webhook,
            },
            rx,
        )
    }

    /// Queues the event; never waits.
    pub fn process(&self, mut event: Event) {
        let held = event.bodies.held_bytes();
        if held > 0 {
            let before = self.held_bytes.fetch_add(held, Ordering::Relaxed);
            if before + held > BUFFER_BYTES {
                self.held_bytes.fetch_sub(held, Ordering::Relaxed);
                event.bodies.request = None;
                event.bodies.response = None;
                event.annotations.insert(
                    super::log::BODIES_DROPPED.into(),
                    "the audit webhook buffer was over its byte budget".into(),
                );
            }
        }
        let held = event.bodies.held_bytes();
        if self.tx.try_send(event).is_err() {
            self.held_bytes.fetch_sub(held, Ordering::Relaxed);
            let n = self.webhook.errors.fetch_add(1, Ordering::Relaxed) + 1;
            if n == 1 || n.is_multiple_of(1000) {
                tracing::error!(
                    errors = n,
                    "Error in audit plugin 'webhook' affecting 1 audit events: audit buffer queue blocked"
                );
            }
        }
    }

    pub fn errors(&self) -> u64 {
        self.webhook.errors.load(Ordering::Relaxed)
    }
}

/// Collects batches until every sender is gone, then sends what is left and waits for the sends.
async fn run(
    mut rx: mpsc::Receiver<Event>,
    webhook: Arc<Webhook>,
    config: BatchConfig,
    held_bytes: Arc<AtomicUsize>,
) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT));
    let mut bucket = config
        .throttle
        .map(|(qps, burst)| TokenBucket::new(qps, burst));
    let mut tick = tokio::time::interval_at(
        Instant::now() + config.max_batch_wait,
        config.max_batch_wait,
    );
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut open = true;
    while open {
        let mut batch = Vec::new();
        while batch.len() < config.max_batch_size {
            tokio::select! {
                event = rx.recv() => match event {
                    Some(e) => batch.push(e),
                    None => { open = false; break; }
                },
                _ = tick.tick() => break,
            }
        }
        if batch.is_empty() {
            continue;
        }
        let bytes: usize = batch.iter().map(|e| e.bodies.held_bytes()).sum();
        if let Some(bucket) = &mut bucket {
            bucket.accept().await;
        }
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        let (hook, held) = (webhook.clone(), held_bytes.clone());
        tokio::spawn(async move {
            let _ = hook.send(batch).await;
            held.fetch_sub(bytes, Ordering::Relaxed);
            drop(permit);
        });
    }
    // Every batch sent: wait for them all.
    let _ = slots.acquire_many(MAX_IN_FLIGHT as u32).await;
}

/// client-go's token bucket rate limiter: `burst` tokens, refilled at `qps`; `accept` waits for
/// one.
struct TokenBucket {
    qps: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    fn new(qps: f64, burst: usize) -> TokenBucket {
        TokenBucket {
            qps,
            burst: burst as f64,
            tokens: burst as f64,
            last: Instant::now(),
        }
    }

    /// How long until a token is free at `now`, taking it (the wait is already counted).
    fn reserve(&mut self, now: Instant) -> Duration {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + elapsed * self.qps).min(self.burst) - 1.0;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.qps)
        }
    }

    async fn accept(&mut self) {
        let wait = self.reserve(Instant::now());
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_bucket_allows_a_burst_then_qps() {
        let start = Instant::now();
        let mut b = TokenBucket::new(10.0, 3);
        b.last = start;
        for _ in 0..3 {
            assert_eq!(b.reserve(start), Duration::ZERO);
        }
        let wait = b.reserve(start);
        assert!((wait.as_secs_f64() - 0.1).abs() < 1e-9, "{wait:?}");
        let wait = b.reserve(start);
        assert!((wait.as_secs_f64() - 0.2).abs() < 1e-9, "{wait:?}");
        // A second later the bucket is full again, never past the burst.
        let later = start + Duration::from_secs(10);
        assert_eq!(b.reserve(later), Duration::ZERO);
        assert_eq!(b.tokens, 2.0);
    }

    #[test]
    fn bad_batch_settings_are_refused() {
        assert!(BatchConfig::default().validate().is_ok());
        let bad = BatchConfig {
            max_batch_size: 0,
            ..Default::default()
        };
        assert!(bad.validate().unwrap_err().contains("max-size"));
        let bad = BatchConfig {
            throttle: Some((0.0, 1)),
            ..Default::default()
        };
        assert!(bad.validate().unwrap_err().contains("qps"));
    }
}
