//! Upstream's bounded-frequency runner (`pkg/util/async/bounded_frequency_runner.go`): runs a
//! function when asked, but no more often than `min_interval` (after an initial burst of `burst`
//! runs, a token bucket), and at least every `max_interval` even when nobody asks.
//! `retry_after` asks for a run no later than a given delay (a failed sync).
//!
//! Differs: a blocking loop on a thread of its own (the proxiers' syncs run commands and block)
//! instead of a goroutine; stopping is a flag checked at each wake-up, set by [`StopOnDrop`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

#[derive(Default)]
struct State {
    requested: bool,
    retry_at: Option<Instant>,
}

pub struct BoundedFrequencyRunner {
    min_interval: Duration,
    max_interval: Duration,
    burst: u32,
    state: Mutex<State>,
    wake: Condvar,
}

impl BoundedFrequencyRunner {
    pub fn new(min_interval: Duration, max_interval: Duration, burst: u32) -> Self {
        Self {
            min_interval,
            max_interval: max_interval.max(min_interval),
            burst: burst.max(1),
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Asks for a run as soon as the rate limit allows.
    pub fn run(&self) {
        self.lock().requested = true;
        self.wake.notify_all();
    }

    /// Asks for a run within `after` (sooner if one is due anyway).
    pub fn retry_after(&self, after: Duration) {
        let at = Instant::now() + after;
        let mut st = self.lock();
        st.retry_at = Some(st.retry_at.map_or(at, |r| r.min(at)));
        drop(st);
        self.wake.notify_all();
    }

    /// Wakes the loop so it sees `stop`. The flag is set under the state lock, which the loop holds
    /// from its last look at the flag until it waits: a store between that look and the wait would
    /// otherwise be a lost wake-up (the loop then sleeps until `max_interval`, an hour in tests).
    pub fn stop(&self, stop: &AtomicBool) {
        let st = self.lock();
        stop.store(true, Ordering::SeqCst);
        drop(st);
        self.wake.notify_all();
    }

    /// Runs `f` per the bounds until `stop` is set.
    pub fn run_loop(&self, stop: &AtomicBool, mut f: impl FnMut()) {
        let mut tokens = self.burst as f64;
        let mut refilled = Instant::now();
        let mut last_run = Instant::now();
        loop {
            if stop.load(Ordering::SeqCst) {
                return;
            }
            let now = Instant::now();
            if !self.min_interval.is_zero() {
                let gained =
                    now.duration_since(refilled).as_secs_f64() / self.min_interval.as_secs_f64();
                tokens = (tokens + gained).min(self.burst as f64);
            } else {
                tokens = self.burst as f64;
            }
            refilled = now;
            let mut st = self.lock();
            // Looked at again under the lock: see `stop`.
            if stop.load(Ordering::SeqCst) {
                return;
            }
            let retry_due = st.retry_at.is_some_and(|r| r <= now);
            let periodic_due = now.duration_since(last_run) >= self.max_interval;
            let wanted = st.requested || retry_due || periodic_due;
            if wanted && tokens >= 1.0 {
                st.requested = false;
                if retry_due {
                    st.retry_at = None;
                }
                drop(st);
                tokens -= 1.0;
                f();
                last_run = Instant::now();
                continue;
            }
            // Sleep until the next reason to run: a token (when a run is wanted), the periodic
            // deadline, a retry, or a request (notify).
            let mut until = last_run + self.max_interval;
            if let Some(r) = st.retry_at {
                until = until.min(r);
            }
            if wanted {
                let need = (1.0 - tokens).max(0.0) * self.min_interval.as_secs_f64();
                until = until.min(now + Duration::from_secs_f64(need));
            }
            let wait = until
                .saturating_duration_since(now)
                .max(Duration::from_millis(1));
            let _unused = self
                .wake
                .wait_timeout(st, wait)
                .unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// Stops a [`BoundedFrequencyRunner::run_loop`] (and whatever else is registered with
/// [`StopOnDrop::also`], e.g. informer factories) when dropped. The proxy's future awaits the
/// loop's blocking thread; when that future is dropped (its task aborted at shutdown) nothing else
/// would stop the thread, and the tokio runtime would wait for it forever at exit.
pub struct StopOnDrop {
    runner: Arc<BoundedFrequencyRunner>,
    stop: Arc<AtomicBool>,
    also: Vec<Box<dyn FnOnce() + Send>>,
}

impl StopOnDrop {
    pub fn new(runner: Arc<BoundedFrequencyRunner>, stop: Arc<AtomicBool>) -> Self {
        Self {
            runner,
            stop,
            also: Vec::new(),
        }
    }

    /// Runs `f` too when dropped.
    pub fn also(mut self, f: impl FnOnce() + Send + 'static) -> Self {
        self.also.push(Box::new(f));
        self
    }
}

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.runner.stop(&self.stop);
        for f in self.also.drain(..) {
            f();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    fn wait_for(deadline: Duration, cond: impl Fn() -> bool) -> bool {
        let end = Instant::now() + deadline;
        while Instant::now() < end {
            if cond() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        cond()
    }

    #[test]
    fn requests_are_rate_limited_and_periodic_runs_happen() {
        let r = Arc::new(BoundedFrequencyRunner::new(
            Duration::from_millis(200),
            Duration::from_millis(600),
            1,
        ));
        let n = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (r2, n2, s2) = (r.clone(), n.clone(), stop.clone());
        let t = std::thread::spawn(move || {
            r2.run_loop(&s2, || {
                n2.fetch_add(1, Ordering::SeqCst);
            })
        });
        let start = Instant::now();
        for _ in 0..20 {
            r.run();
        }
        assert!(wait_for(Duration::from_secs(2), || n
            .load(Ordering::SeqCst)
            >= 1));
        // Twenty requests within the first 100 ms: one run, the burst; the next waits ~200 ms.
        std::thread::sleep(Duration::from_millis(100).saturating_sub(start.elapsed()));
        assert_eq!(n.load(Ordering::SeqCst), 1);
        assert!(wait_for(Duration::from_secs(2), || n
            .load(Ordering::SeqCst)
            == 2));
        // No requests: the max interval still brings a run.
        let before = n.load(Ordering::SeqCst);
        assert!(wait_for(Duration::from_secs(3), || n
            .load(Ordering::SeqCst)
            > before));
        r.stop(&stop);
        t.join().unwrap();
    }

    #[test]
    fn retry_after_runs_early() {
        let r = Arc::new(BoundedFrequencyRunner::new(
            Duration::ZERO,
            Duration::from_secs(3600),
            2,
        ));
        let n = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (r2, n2, s2) = (r.clone(), n.clone(), stop.clone());
        let t = std::thread::spawn(move || {
            r2.run_loop(&s2, || {
                n2.fetch_add(1, Ordering::SeqCst);
            })
        });
        r.retry_after(Duration::from_millis(50));
        assert!(wait_for(Duration::from_secs(2), || n
            .load(Ordering::SeqCst)
            == 1));
        r.stop(&stop);
        t.join().unwrap();
    }

    #[test]
    fn dropping_the_guard_ends_the_loop() {
        let r = Arc::new(BoundedFrequencyRunner::new(
            Duration::ZERO,
            Duration::from_secs(3600),
            1,
        ));
        let stop = Arc::new(AtomicBool::new(false));
        let also_ran = Arc::new(AtomicBool::new(false));
        let guard = StopOnDrop::new(r.clone(), stop.clone()).also({
            let a = also_ran.clone();
            move || a.store(true, Ordering::SeqCst)
        });
        let (r2, s2) = (r.clone(), stop.clone());
        let t = std::thread::spawn(move || r2.run_loop(&s2, || {}));
        r.run();
        drop(guard);
        // The loop sleeps up to an hour unless the guard woke it.
        assert!(wait_for(Duration::from_secs(2), || t.is_finished()));
        t.join().unwrap();
        assert!(also_ran.load(Ordering::SeqCst));
    }
}
