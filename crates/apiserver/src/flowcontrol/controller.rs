//! The priority levels' live state (upstream `apf_controller.go`): the configuration in force, a
//! [`QueueSet`] per limited level sized by its nominal limit, counters for the debug endpoints and
//! metrics, and the lock they all live under. Requests come in through [`super::filter`].

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use serde_json::Value;
use tokio::sync::oneshot;

use super::config::{self, Digest, LevelKind, LimitResponse};
use super::metrics::{FlowMetrics, LevelGauges};
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
                LevelKind::Limited { response, .. } => {
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
                })
                .collect()
        };
        self.metrics.render(&gauges)
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
