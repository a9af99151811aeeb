//! The leader election loop (upstream client-go `tools/leaderelection/leaderelection.go`:
//! `LeaderElector.Run`, `acquire`, `renew`, `release`, `tryAcquireOrRenew`, `maybeReportTransition`).
//!
//! As upstream: a candidate polls the lock every `retry_period` (jittered by 1.2) and takes it when it
//! does not exist, when `holderIdentity` is empty (released), or when the record has not changed for
//! `leaseDurationSeconds` measured from when this candidate *observed* it (local monotonic clock, not
//! the timestamps in the Lease). The leader renews every `retry_period`, first optimistically with the
//! Lease it last wrote, then by re-reading it; `leaseTransitions` is incremented whenever the holder
//! changes; a graceful stop clears `holderIdentity` and sets `leaseDurationSeconds` to 1.
//!
//! Deliberate differences:
//! - The renew deadline is measured from the *start of the last successful renewal* (upstream: from the
//!   start of the current renew cycle, one retry period later), and every request is cut off at that
//!   deadline, so the leader always stops leading at least `lease_duration - renew_deadline` before any
//!   other candidate may take over.
//! - A leader that observes another holder stops leading at once instead of retrying until the deadline.
//! - `on_stopped_leading` runs only after leading actually started (upstream defers it unconditionally),
//!   and it runs *before* the lease is released, so work guarded by the lease has been told to stop by
//!   the time another candidate can acquire it.
//! - `on_new_leader` is not called for an empty holder (a released lease).
//! - Callbacks are plain functions called on the elector's task: start long work with `tokio::spawn`.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use tokio::time::{sleep, sleep_until, timeout, timeout_at, Instant};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use super::config::{ConfigError, LeaderElectionConfig, JITTER_FACTOR};
use super::lease_lock::{LeaderElectionRecord, LeaseLock, LockError, ResourceLock};
use crate::events::{EventType, Recorder};

type StartedFn = Arc<dyn Fn(CancellationToken) + Send + Sync>;
type StoppedFn = Arc<dyn Fn() + Send + Sync>;
type NewLeaderFn = Arc<dyn Fn(&str) + Send + Sync>;

/// What the elector tells its owner (upstream `LeaderCallbacks`). All default to doing nothing.
#[derive(Clone)]
pub struct LeaderCallbacks {
    started: StartedFn,
    stopped: StoppedFn,
    new_leader: NewLeaderFn,
}

impl Default for LeaderCallbacks {
    fn default() -> LeaderCallbacks {
        LeaderCallbacks {
            started: Arc::new(|_| {}),
            stopped: Arc::new(|| {}),
            new_leader: Arc::new(|_| {}),
        }
    }
}

impl fmt::Debug for LeaderCallbacks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaderCallbacks").finish_non_exhaustive()
    }
}

impl LeaderCallbacks {
    /// Called when this candidate starts leading, with a token that is cancelled as soon as it stops
    /// leading (leadership lost, or `run` cancelled). Must not block: spawn the guarded work.
    pub fn on_started_leading(
        mut self,
        f: impl Fn(CancellationToken) + Send + Sync + 'static,
    ) -> LeaderCallbacks {
        self.started = Arc::new(f);
        self
    }

    /// Called when this candidate stops leading (after the token given to `on_started_leading` was
    /// cancelled, before the lease is released).
    pub fn on_stopped_leading(mut self, f: impl Fn() + Send + Sync + 'static) -> LeaderCallbacks {
        self.stopped = Arc::new(f);
        self
    }

    /// Called with the holder's identity whenever a different holder is observed, including the first
    /// one seen and this candidate itself.
    pub fn on_new_leader(mut self, f: impl Fn(&str) + Send + Sync + 'static) -> LeaderCallbacks {
        self.new_leader = Arc::new(f);
        self
    }
}

/// How [`LeaderElector::run`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunOutcome {
    /// Cancelled before this candidate ever led.
    NotAcquired,
    /// Led, then `run` was cancelled (the lease was released if `release_on_cancel`).
    Cancelled,
    /// Led, then lost the lease: it could not renew within the renew deadline, or another holder was
    /// observed.
    Lost,
}

struct Observed {
    record: LeaderElectionRecord,
    /// When `record` was last seen to change (or written by us): the base of expiry.
    time: Instant,
    /// The holder last reported to `on_new_leader`.
    reported: String,
}

/// One candidate in a leader election (upstream `LeaderElector`).
pub struct LeaderElector<L: ResourceLock = LeaseLock> {
    config: LeaderElectionConfig,
    lock: L,
    callbacks: LeaderCallbacks,
    observed: Mutex<Observed>,
    recorder: Option<Recorder>,
}

impl<L: ResourceLock> fmt::Debug for LeaderElector<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaderElector")
            .field("lock", &self.lock.describe())
            .field("identity", &self.config.identity)
            .field("leader", &self.get_leader())
            .finish_non_exhaustive()
    }
}

impl<L: ResourceLock> LeaderElector<L> {
    /// Checks the configuration (upstream `NewLeaderElector`) and builds the elector.
    pub fn new(
        config: LeaderElectionConfig,
        lock: L,
        callbacks: LeaderCallbacks,
    ) -> Result<LeaderElector<L>, ConfigError> {
        config.validate()?;
        if lock.identity() != config.identity {
            return Err(ConfigError::IdentityMismatch {
                lock: lock.identity().to_string(),
                config: config.identity.clone(),
            });
        }
        Ok(LeaderElector {
            config,
            lock,
            callbacks,
            observed: Mutex::new(Observed {
                record: LeaderElectionRecord::default(),
                time: Instant::now(),
                reported: String::new(),
            }),
            recorder: None,
        })
    }

    /// Records `LeaderElection` events (`<identity> became leader`, `<identity> stopped leading`) on
    /// the lock object, as upstream's `RecordEvent`.
    pub fn with_event_recorder(mut self, recorder: Recorder) -> LeaderElector<L> {
        self.recorder = Some(recorder);
        self
    }

    pub fn config(&self) -> &LeaderElectionConfig {
        &self.config
    }

    /// The identity of the last observed holder; empty if none was observed (or it was released).
    pub fn get_leader(&self) -> String {
        self.with_observed(|o| o.record.holder_identity.clone())
    }

    /// Whether the last observed holder is this candidate.
    pub fn is_leader(&self) -> bool {
        self.with_observed(|o| o.record.holder_identity == self.config.identity)
    }

    /// Runs one election term: waits until this candidate acquires the lease (or `cancel` fires), then
    /// leads and renews until the lease is lost or `cancel` fires. Call it again to rejoin the election
    /// after a loss.
    pub async fn run(&self, cancel: CancellationToken) -> RunOutcome {
        let desc = self.lock.describe();
        info!(lock = %desc, identity = %self.config.identity, "attempting to acquire leader lease");
        let Some(acquired_at) = self.acquire(&cancel).await else {
            return RunOutcome::NotAcquired;
        };
        if cancel.is_cancelled() {
            // Acquired in the same moment as the shutdown: never start, just give it back.
            if self.config.release_on_cancel {
                self.release().await;
            }
            return RunOutcome::Cancelled;
        }
        info!(lock = %desc, identity = %self.config.identity, "successfully acquired lease");
        self.record_event("became leader");
        let leading = cancel.child_token();
        (self.callbacks.started)(leading.clone());
        let outcome = self.renew(&cancel, acquired_at).await;
        leading.cancel();
        // The counterpart of "successfully acquired lease": operators (and the HA tests) read the
        // two lines to see when this process led.
        info!(lock = %desc, identity = %self.config.identity, ?outcome, "stopped leading");
        (self.callbacks.stopped)();
        self.record_event("stopped leading");
        if self.config.release_on_cancel {
            self.release().await;
        }
        outcome
    }

    /// Polls until the lease is acquired; returns when the successful attempt started.
    async fn acquire(&self, cancel: &CancellationToken) -> Option<Instant> {
        loop {
            if cancel.is_cancelled() {
                return None;
            }
            let start = Instant::now();
            let acquired = matches!(
                timeout(self.config.renew_deadline, self.try_acquire_or_renew()).await,
                Ok(true)
            );
            self.maybe_report_transition();
            // An answer that arrived only after a freeze (see `renew`) is too old to lead on; the
            // next attempt renews what we hold, and leads from then.
            if acquired && Instant::now() < start + self.config.renew_deadline {
                return Some(start);
            }
            debug!(lock = %self.lock.describe(), "failed to acquire lease");
            tokio::select! {
                _ = cancel.cancelled() => return None,
                _ = sleep(jittered(self.config.retry_period)) => {}
            }
        }
    }

    /// Renews every retry period until a renewal cannot be completed within the renew deadline of
    /// the last successful one, another holder is observed, or `cancel` fires.
    async fn renew(&self, cancel: &CancellationToken, mut last_success: Instant) -> RunOutcome {
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return RunOutcome::Cancelled,
                _ = sleep(self.config.retry_period) => {}
            }
            let deadline = last_success + self.config.renew_deadline;
            loop {
                let start = Instant::now();
                if start >= deadline {
                    warn!(lock = %self.lock.describe(), "failed to renew lease within the renew deadline");
                    return RunOutcome::Lost;
                }
                let renewed = matches!(
                    timeout_at(deadline, self.try_acquire_or_renew()).await,
                    Ok(true)
                );
                self.maybe_report_transition();
                if renewed {
                    // A process frozen mid-request (SIGSTOP, a long GC-like stall) may find the
                    // answer waiting when it wakes: the renewal is as old as its start, and others
                    // may have taken over since. Lead on only if that start is still recent.
                    if Instant::now() >= start + self.config.renew_deadline {
                        warn!(lock = %self.lock.describe(), "renewal answered after the renew deadline");
                        return RunOutcome::Lost;
                    }
                    debug!(lock = %self.lock.describe(), "successfully renewed lease");
                    last_success = start;
                    break;
                }
                if !self.is_leader() {
                    info!(lock = %self.lock.describe(), holder = %self.get_leader(), "lease taken over");
                    return RunOutcome::Lost;
                }
                tokio::select! {
                    _ = cancel.cancelled() => return RunOutcome::Cancelled,
                    _ = sleep_until((start + self.config.retry_period).min(deadline)) => {}
                }
            }
        }
    }

    /// Gives the lease up if this candidate holds it (upstream `release`): empty holder, lease of one
    /// second, so the next poll of any candidate takes it.
    async fn release(&self) -> bool {
        if !self.is_leader() {
            return true;
        }
        let now = Timestamp::now();
        let mut record = LeaderElectionRecord {
            holder_identity: String::new(),
            lease_duration_seconds: 1,
            acquire_time: Some(now),
            renew_time: Some(now),
            leader_transitions: self.with_observed(|o| o.record.leader_transitions),
        };
        for attempt in 0..2 {
            match timeout(self.config.renew_deadline, self.lock.update(record.clone())).await {
                Ok(Ok(())) => {
                    info!(lock = %self.lock.describe(), "released lease");
                    self.set_observed(record);
                    self.maybe_report_transition();
                    return true;
                }
                Ok(Err(LockError::Conflict)) if attempt == 0 => {
                    // Our copy is stale (an abandoned renewal may have landed): re-read and retry if
                    // the lease is still ours.
                    match timeout(self.config.renew_deadline, self.lock.get()).await {
                        Ok(Ok(Some(current)))
                            if current.holder_identity == self.config.identity =>
                        {
                            record.leader_transitions = current.leader_transitions;
                        }
                        _ => return true,
                    }
                }
                Ok(Err(e)) => {
                    error!(lock = %self.lock.describe(), error = %e, "failed to release lock");
                    return false;
                }
                Err(_) => {
                    error!(lock = %self.lock.describe(), "timed out releasing lock");
                    return false;
                }
            }
        }
        false
    }

    /// One attempt to acquire or renew (upstream `tryAcquireOrRenew`). True when this candidate holds
    /// the lease after the attempt.
    async fn try_acquire_or_renew(&self) -> bool {
        let now = Timestamp::now();
        let mut record = LeaderElectionRecord {
            holder_identity: self.config.identity.clone(),
            lease_duration_seconds: self.config.lease_duration_seconds(),
            acquire_time: Some(now),
            renew_time: Some(now),
            leader_transitions: 0,
        };

        // 1. Fast path: the leader updates optimistically with the Lease it last wrote.
        if self.is_leader() && self.is_lease_valid(Instant::now()) {
            let old = self.with_observed(|o| o.record.clone());
            record.acquire_time = old.acquire_time;
            record.leader_transitions = old.leader_transitions;
            match self.lock.update(record.clone()).await {
                Ok(()) => {
                    self.set_observed(record);
                    return true;
                }
                Err(e) => debug!(error = %e, "optimistic lease update failed, re-reading"),
            }
        }

        // 2. Read the lock, creating it if it does not exist.
        let old = match self.lock.get().await {
            Ok(Some(old)) => old,
            Ok(None) => {
                return match self.lock.create(record.clone()).await {
                    Ok(()) => {
                        self.set_observed(record);
                        true
                    }
                    Err(e) => {
                        debug!(error = %e, "error initially creating leader election record");
                        false
                    }
                };
            }
            Err(e) => {
                warn!(lock = %self.lock.describe(), error = %e, "error retrieving resource lock");
                return false;
            }
        };

        // 3. A changed record restarts the expiry clock.
        if self.with_observed(|o| o.record != old) {
            self.set_observed(old.clone());
        }
        if !old.holder_identity.is_empty()
            && self.is_lease_valid(Instant::now())
            && !self.is_leader()
        {
            debug!(holder = %old.holder_identity, "lock is held and has not yet expired");
            return false;
        }

        // 4. Take or keep it.
        if self.is_leader() {
            record.acquire_time = old.acquire_time;
            record.leader_transitions = old.leader_transitions;
        } else {
            record.leader_transitions = old.leader_transitions.saturating_add(1);
        }
        match self.lock.update(record.clone()).await {
            Ok(()) => {
                self.set_observed(record);
                true
            }
            Err(e) => {
                debug!(error = %e, "failed to update lock");
                false
            }
        }
    }

    fn maybe_report_transition(&self) {
        let holder = {
            let Ok(mut o) = self.observed.lock() else {
                return;
            };
            if o.record.holder_identity == o.reported {
                return;
            }
            o.reported = o.record.holder_identity.clone();
            o.reported.clone()
        };
        if !holder.is_empty() {
            (self.callbacks.new_leader)(&holder);
        }
    }

    fn is_lease_valid(&self, now: Instant) -> bool {
        self.with_observed(|o| {
            let secs = u64::try_from(o.record.lease_duration_seconds).unwrap_or(0);
            o.time + Duration::from_secs(secs) > now
        })
    }

    fn set_observed(&self, record: LeaderElectionRecord) {
        if let Ok(mut o) = self.observed.lock() {
            o.record = record;
            o.time = Instant::now();
        }
    }

    fn with_observed<T>(&self, f: impl FnOnce(&Observed) -> T) -> T {
        match self.observed.lock() {
            Ok(o) => f(&o),
            Err(poisoned) => f(&poisoned.into_inner()),
        }
    }

    fn record_event(&self, what: &str) {
        let Some(recorder) = &self.recorder else {
            return;
        };
        if let Some(object) = self.lock.object_reference() {
            let message = format!("{} {what}", self.config.identity);
            recorder.event(&object, EventType::Normal, "LeaderElection", &message);
        }
    }
}

/// Upstream `wait.Jitter(d, JitterFactor)`: `d + rand * 1.2 * d`.
fn jittered(d: Duration) -> Duration {
    d + d.mul_f64(rand::random::<f64>() * JITTER_FACTOR)
}

impl LeaderElector<LeaseLock> {
    /// An elector on the Lease named by `config`.
    pub fn for_lease(
        client: kube::Client,
        config: LeaderElectionConfig,
        callbacks: LeaderCallbacks,
    ) -> Result<LeaderElector<LeaseLock>, ConfigError> {
        let lock = LeaseLock::new(
            client,
            &config.lease_namespace,
            &config.lease_name,
            &config.identity,
        );
        LeaderElector::new(config, lock, callbacks)
    }
}
