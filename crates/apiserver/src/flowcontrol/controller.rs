//! The priority levels' live state (upstream `apf_controller.go`): the configuration in force, a
//! [`QueueSet`] per limited level sized by its nominal limit, counters for the debug endpoints and
//! metrics, and the lock they all live under. Requests come in through [`super::filter`].

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use serde_json::Value;
use tokio::sync::oneshot;

use super::borrowing::{self, Limits, SeatDemandStats};
use super::config::{self, Digest, LevelKind, LimitResponse};
use super::metrics::{BorrowingGauges, FlowMetrics, LevelGauges};
use super::queueset::{QueueSet, QueuingConfig, Ticket};
use super::retryafter::DroppedRequests;
use super::width;

/// What wakes a queued request: its ticket to run.
pub(super) type Waker = oneshot::Sender<Ticket>;

/// One priority level's state.
pub(super) struct Level {
    pub uid: String,
    /// False once the level's object is gone; kept until what runs or waits in it is done.
    pub configured: bool,
    pub nominal_limit: usize,
    /// Nominal, least and most seats (lendablePercent, borrowingLimitPercent); limited levels.
    pub limits: Limits,
    /// The seat demand seen over the borrowing periods so far.
    pub demand: SeatDemandStats,
    /// What the last division targeted for this level.
    pub target: f64,
    pub max_seats: usize,
    /// None: exempt.
    pub queues: Option<QueueSet<Waker>>,
    pub exempt_executing: usize,
    pub dropped: DroppedRequests,
    pub dispatched: u64,
    pub rejected: u64,
    pub timed_out: u64,
    pub cancelled: u64,
}

impl Level {
    pub fn executing(&self) -> usize {
        self.queues
            .as_ref()
            .map_or(self.exempt_executing, |q| q.executing())
    }
    fn idle(&self) -> bool {
        self.queues.as_ref().is_none_or(|q| q.idle()) && self.exempt_executing == 0
    }
}

pub(super) struct State {
    pub digest: Digest,
    pub levels: BTreeMap<String, Level>,
}

/// API Priority and Fairness: classification, queuing and seats for the whole server.
pub struct Apf {
    /// `--max-requests-inflight` + `--max-mutating-requests-inflight`.
    server_limit: usize,
    epoch: Instant,
    state: Mutex<State>,
    pub(super) metrics: FlowMetrics,
}

fn queuing(response: LimitResponse) -> QueuingConfig {
    match response {
        LimitResponse::Reject => QueuingConfig {
            queues: 0,
            hand_size: 0,
            queue_length_limit: 0,
        },
        LimitResponse::Queue {
            queues,
            hand_size,
            queue_length_limit,
        } => QueuingConfig {
            queues,
            hand_size,
            queue_length_limit,
        },
    }
}

impl Apf {
    /// Flow control over `server_limit` seats, with only the mandatory configuration until
    /// [`Apf::apply`] gives it the objects.
    pub fn new(server_limit: usize) -> Apf {
        let apf = Apf {
            server_limit: server_limit.max(1),
            epoch: Instant::now(),
            state: Mutex::new(State {
                digest: Digest::default(),
                levels: BTreeMap::new(),
            }),
            metrics: FlowMetrics::default(),
        };
        apf.apply(&[], &[]);
        apf
    }

    pub(super) fn now(&self) -> f64 {
        self.epoch.elapsed().as_secs_f64()
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes the FlowSchemas and PriorityLevelConfigurations now in storage: levels are created,
    /// resized (their waiting requests dealt into the new queues, those that no longer fit
    /// refused) or retired.
    pub fn apply(&self, schema_objects: &[Value], level_objects: &[Value]) {
        let digest = config::digest(schema_objects, level_objects);
        let limits = config::nominal_limits(&digest.levels, self.server_limit);
        let now = self.now();
        let mut state = self.lock();
        for level in state.levels.values_mut() {
            level.configured = false;
        }
        for (name, pl) in &digest.levels {
            let nominal = limits.get(name).copied().unwrap_or(0);
            let entry = state.levels.entry(name.clone()).or_insert_with(|| Level {
                uid: String::new(),
                configured: true,
                nominal_limit: 0,
                limits: Limits::new(0, 0, Some(0), 0),
                demand: SeatDemandStats::default(),
                target: 0.0,
                max_seats: width::MAX_SEATS,
                queues: None,
                exempt_executing: 0,
                dropped: DroppedRequests::default(),
                dispatched: 0,
                rejected: 0,
                timed_out: 0,
                cancelled: 0,
            });
            entry.uid = pl.uid.clone();
            entry.configured = true;
            entry.nominal_limit = nominal;
            match pl.kind {
                LevelKind::Exempt => {
                    // Requests already queued here are let go: exempt never waits.
                    if let Some(mut qs) = entry.queues.take() {
                        let refused =
                            qs.reconfigure(queuing(LimitResponse::Reject), usize::MAX, now);
                        drop(refused);
                    }
                }
                LevelKind::Limited {
                    response,
                    lendable_percent,
                    borrowing_limit_percent,
                    ..
                } => {
                    entry.limits = Limits::new(
                        nominal,
                        lendable_percent,
                        borrowing_limit_percent,
                        self.server_limit,
                    );
                    let config = queuing(response);
                    entry.max_seats = width::max_seats(nominal, config.hand_size.max(1));
                    match entry.queues.as_mut() {
                        Some(qs) => {
                            // Refused requests see their waker dropped: a 429.
                            let refused = qs.reconfigure(config, nominal, now);
                            entry.rejected += refused.len() as u64;
                            let mut run = Vec::new();
                            qs.dispatch(now, &mut run);
                            deliver(qs, run, now);
                        }
                        None => entry.queues = Some(QueueSet::new(config, nominal, now)),
                    }
                }
            }
        }
        state.levels.retain(|_, l| l.configured || !l.idle());
        state.digest = digest;
        // The limits set above are the nominal ones: divide again with the demand known so far.
        rebalance(&mut state, now, false);
    }

    /// Upstream's periodic `updateBorrowing` (every [`borrowing::ADJUSTMENT_PERIOD`]): the
    /// period's seat demand of each level updates its statistics, and the seats are divided again.
    pub fn update_borrowing(&self) {
        let now = self.now();
        rebalance(&mut self.lock(), now, true);
    }

    /// Each limited level's current limit, for tests and the debug endpoints.
    pub fn current_limits(&self) -> BTreeMap<String, usize> {
        self.lock()
            .levels
            .iter()
            .filter_map(|(name, l)| Some((name.clone(), l.queues.as_ref()?.concurrency_limit())))
            .collect()
    }

    /// The gauges of every level, for `/metrics`.
    pub fn metrics_text(&self) -> String {
        let gauges: Vec<LevelGauges> = {
            let state = self.lock();
            state
                .levels
                .iter()
                .map(|(name, l)| LevelGauges {
                    name: name.clone(),
                    waiting: l.queues.as_ref().map_or(0, |q| q.waiting()),
                    executing: l.executing(),
                    seats: l.queues.as_ref().map_or(0, |q| q.seats_in_use()),
                    nominal_limit: l.nominal_limit,
                    borrowing: l.queues.as_ref().map(|q| BorrowingGauges {
                        lower: l.limits.min,
                        upper: l.limits.max,
                        current: q.concurrency_limit(),
                        stats: l.demand,
                        target: l.target,
                    }),
                })
                .collect()
        };
        self.metrics.render(&gauges)
    }
}

/// Divides the server's seats among the limited levels by their demand (see [`borrowing`]);
/// `new_period` ends the demand integration period first. Requests a raised limit lets run are
/// woken.
fn rebalance(state: &mut State, now: f64, new_period: bool) {
    let mut input = Vec::new();
    for level in state.levels.values_mut() {
        let Some(qs) = level.queues.as_mut() else {
            continue;
        };
        if new_period {
            level.demand.update(qs.take_demand(now));
        }
        input.push((level.limits, level.demand));
    }
    let limits = match borrowing::current_limits(&input) {
        Ok(limits) => limits,
        Err(e) => {
            tracing::error!(error = %e, "unable to derive new concurrency limits; keeping the current ones");
            return;
        }
    };
    let levels = state.levels.values_mut().filter(|l| l.queues.is_some());
    for (level, limit) in levels.zip(limits) {
        level.target = borrowing::Item::of(level.limits, &level.demand).target;
        let Some(qs) = level.queues.as_mut() else {
            continue;
        };
        if qs.concurrency_limit() == limit.max(1) {
            continue;
        }
        let refused = qs.reconfigure(qs.config(), limit, now);
        debug_assert!(refused.is_empty(), "the queuing did not change");
        let mut run = Vec::new();
        qs.dispatch(now, &mut run);
        deliver(qs, run, now);
    }
}

/// Wakes the requests a dispatch of `qs` chose to run. A request whose waiter is gone gives its
/// seats back at once (which may let more run).
pub(super) fn deliver(qs: &mut QueueSet<Waker>, run: Vec<(Waker, Ticket)>, now: f64) {
    let mut pending = run;
    while let Some((waker, ticket)) = pending.pop() {
        if let Err(ticket) = waker.send(ticket) {
            qs.finish(ticket, now, &mut pending);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn level(name: &str, shares: u64, lendable: u64) -> Value {
        json!({"metadata": {"name": name, "uid": name}, "spec": {"type": "Limited", "limited": {
            "nominalConcurrencyShares": shares, "lendablePercent": lendable,
            "limitResponse": {"type": "Queue",
            "queuing": {"queues": 8, "handSize": 2, "queueLengthLimit": 100}}}}})
    }

    #[test]
    fn a_saturated_level_borrows_from_an_idle_one_every_period() {
        // busy: 20 seats, lends nothing; idle: 20 seats, lends all; catch-all: 5 shares (20).
        let apf = Apf::new(60);
        apf.apply(&[], &[level("busy", 5, 0), level("idle", 5, 100)]);
        // Right after a config change, with no demand seen yet, idle levels already lend what they
        // may (down to the queue set's least limit, 1) and the others share it.
        let nominal = apf.current_limits();
        assert_eq!(nominal["idle"], 1, "{nominal:?}");
        assert_eq!(
            (nominal["busy"], nominal["catch-all"]),
            (30, 30),
            "{nominal:?}"
        );

        // Fill busy's seats and queue 60 more requests behind them.
        let mut receivers = Vec::new();
        {
            let now = apf.now();
            let mut state = apf.lock();
            let qs = state
                .levels
                .get_mut("busy")
                .unwrap()
                .queues
                .as_mut()
                .unwrap();
            for i in 0..100u64 {
                let (tx, rx) = oneshot::channel();
                let mut run = Vec::new();
                assert!(qs.start(now, i, 1, tx, &mut run).is_ok());
                for (waker, ticket) in run {
                    let _ = waker.send(ticket);
                }
                receivers.push(rx);
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        apf.update_borrowing();
        let after = apf.current_limits();
        // busy (demand 100) takes all the idle level lends; the quiet catch-all falls back to its
        // nominal 20, all of which it may not lend.
        assert_eq!((after["busy"], after["catch-all"]), (40, 20), "{after:?}");
        let state = apf.lock();
        let busy = &state.levels["busy"];
        assert_eq!(
            busy.queues.as_ref().unwrap().concurrency_limit(),
            after["busy"]
        );
        // The raised limit let queued requests run.
        assert_eq!(busy.queues.as_ref().unwrap().seats_in_use(), after["busy"]);
        assert!(busy.demand.high_watermark >= 100.0);
        let text = {
            drop(state);
            apf.metrics_text()
        };
        assert!(text.contains(&format!(
            "apiserver_flowcontrol_current_limit_seats{{priority_level=\"busy\"}} {}\n",
            after["busy"]
        )));
        assert!(
            text.contains("apiserver_flowcontrol_lower_limit_seats{priority_level=\"idle\"} 0\n")
        );
    }
}
