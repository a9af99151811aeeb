//! One limited priority level's seats and queues (upstream `fairqueuing/queueset/queueset.go`):
//! fair queuing by virtual finish time over shuffle-sharded queues.
//!
//! Virtual time R advances at `min(seats wanted, concurrency limit) / active queues` per second;
//! a request's work is its seats times an estimated service time (upstream's 3 ms); the next
//! request dispatched is the head of the queue whose `nextDispatchR + work` is least, when its
//! seats fit (if they do not, nothing is dispatched until they do: no narrower request overtakes
//! it, as upstream). A queue's `nextDispatchR` advances by each request's work at dispatch and is
//! corrected by the actual service time at finish; after every change to a queue it is raised to
//! its head's arrival if below (upstream's anti-windup, `boundNextDispatchLocked`), so a queue
//! whose long requests are charged only their estimate while they run cannot dispatch a later
//! arrival ahead of requests that waited longer in other queues. With no queues (limitResponse Reject) a request
//! runs if its seats fit and is refused otherwise. A request wider than the whole limit runs alone.
//!
//! Pure state: the caller gives the time (seconds on any monotonic clock) and a payload per waiting
//! request (the filter's channel to wake it), and gets back the payloads to run.

use std::collections::VecDeque;

use super::borrowing::{DemandIntegrator, DemandPeriod};
use super::shufflesharding::Dealer;

/// Upstream's `estimatedServiceDuration`, in seconds.
pub const ESTIMATED_SERVICE_SECONDS: f64 = 0.003;

/// How a level queues.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueuingConfig {
    /// 0: no queuing (Reject).
    pub queues: usize,
    pub hand_size: usize,
    pub queue_length_limit: usize,
}

/// Held by a running request; given back to [`QueueSet::finish`].
#[derive(Debug)]
pub struct Ticket {
    queue: Option<usize>,
    generation: u64,
    pub seats: usize,
    started: f64,
}

struct Waiting<T> {
    id: u64,
    hash: u64,
    seats: usize,
    arrival_r: f64,
    arrived: f64,
    payload: T,
}

impl<T> Waiting<T> {
    fn work(&self) -> f64 {
        self.seats as f64 * ESTIMATED_SERVICE_SECONDS
    }
}

struct Queue<T> {
    waiting: VecDeque<Waiting<T>>,
    next_dispatch_r: f64,
    executing: usize,
    seats_in_use: usize,
    waiting_seats: usize,
}

impl<T> Queue<T> {
    fn new() -> Self {
        Queue {
            waiting: VecDeque::new(),
            next_dispatch_r: 0.0,
            executing: 0,
            seats_in_use: 0,
            waiting_seats: 0,
        }
    }
}

/// A snapshot of one queue, for the debug endpoints.
#[derive(Clone, Debug, PartialEq)]
pub struct QueueView {
    pub index: usize,
    pub waiting: usize,
    pub next_dispatch_r: f64,
    pub executing: usize,
    pub seats_in_use: usize,
    pub waiting_seats: usize,
}

pub struct QueueSet<T> {
    config: QueuingConfig,
    concurrency_limit: usize,
    dealer: Option<Dealer>,
    queues: Vec<Queue<T>>,
    /// Bumped when the queues are rebuilt, so tickets of the old ones are not charged to new ones.
    generation: u64,
    virtual_now: f64,
    last_real: f64,
    robin: usize,
    /// Requests queued so far: where the search of a hand starts (upstream's `enqueues`).
    enqueues: u64,
    seats_in_use: usize,
    executing: usize,
    waiting: usize,
    next_id: u64,
    /// Seats in use plus seats wanted by waiting requests, over time (for borrowing).
    demand: DemandIntegrator,
}

impl<T> QueueSet<T> {
    pub fn new(config: QueuingConfig, concurrency_limit: usize, now: f64) -> Self {
        let mut qs = QueueSet {
            config: QueuingConfig {
                queues: 0,
                hand_size: 0,
                queue_length_limit: 0,
            },
            concurrency_limit: concurrency_limit.max(1),
            dealer: None,
            queues: Vec::new(),
            generation: 0,
            virtual_now: 0.0,
            last_real: now,
            robin: 0,
            enqueues: 0,
            seats_in_use: 0,
            executing: 0,
            waiting: 0,
            next_id: 0,
            demand: DemandIntegrator::new(now),
        };
        let rejected = qs.reconfigure(config, concurrency_limit, now);
        debug_assert!(rejected.is_empty());
        qs
    }

    pub fn concurrency_limit(&self) -> usize {
        self.concurrency_limit
    }
    pub fn config(&self) -> QueuingConfig {
        self.config
    }
    pub fn seats_in_use(&self) -> usize {
        self.seats_in_use
    }
    pub fn executing(&self) -> usize {
        self.executing
    }
    pub fn waiting(&self) -> usize {
        self.waiting
    }
    pub fn virtual_now(&self) -> f64 {
        self.virtual_now
    }
    pub fn queues(&self) -> Vec<QueueView> {
        self.queues
            .iter()
            .enumerate()
            .map(|(index, q)| QueueView {
                index,
                waiting: q.waiting.len(),
                next_dispatch_r: q.next_dispatch_r,
                executing: q.executing,
                seats_in_use: q.seats_in_use,
                waiting_seats: q.waiting_seats,
            })
            .collect()
    }
    /// Whether nothing runs or waits here.
    pub fn idle(&self) -> bool {
        self.executing == 0 && self.waiting == 0
    }

    /// The seat demand since the last call (upstream resets the integrator every borrowing
    /// period).
    pub fn take_demand(&mut self, now: f64) -> DemandPeriod {
        self.sync_time(now);
        self.demand.reset()
    }

    /// A new limit or queuing: waiting requests are dealt again into the new queues; those no
    /// queue takes (queuing turned off, queues full) are given back to be refused. Call
    /// [`QueueSet::dispatch`] afterwards, as the new limit may let some run.
    pub fn reconfigure(
        &mut self,
        config: QueuingConfig,
        concurrency_limit: usize,
        now: f64,
    ) -> Vec<T> {
        self.sync_time(now);
        self.concurrency_limit = concurrency_limit.max(1);
        if config == self.config {
            return Vec::new();
        }
        let (queues, hand) = (config.queues, config.hand_size.min(config.queues));
        self.dealer = if queues == 0 {
            None
        } else {
            Dealer::new(queues as i64, hand.max(1) as i64)
                .or_else(|_| Dealer::new(queues as i64, 1))
                .ok()
        };
        self.config = config;
        let old: Vec<Queue<T>> = std::mem::take(&mut self.queues);
        self.queues = (0..if self.dealer.is_some() { queues } else { 0 })
            .map(|_| Queue::new())
            .collect();
        self.generation += 1;
        self.robin = 0;
        self.waiting = 0;
        let mut refused = Vec::new();
        let mut again: Vec<Waiting<T>> = old.into_iter().flat_map(|q| q.waiting).collect();
        again.sort_by(|a, b| a.arrived.total_cmp(&b.arrived));
        for w in again {
            match self.choose_queue(w.hash) {
                Some(i) if self.queues[i].waiting.len() < self.config.queue_length_limit => {
                    self.push(i, w)
                }
                _ => refused.push(w.payload),
            }
        }
        refused
    }

    /// Called first by every change: what held since the last one is accounted (virtual time,
    /// seat demand).
    fn sync_time(&mut self, now: f64) {
        let elapsed = (now - self.last_real).max(0.0);
        self.last_real = self.last_real.max(now);
        let mut active = 0usize;
        let mut wanted = 0usize;
        let mut waiting_seats = 0usize;
        for q in &self.queues {
            wanted += q.seats_in_use + q.waiting_seats;
            waiting_seats += q.waiting_seats;
            if !q.waiting.is_empty() || q.executing > 0 {
                active += 1;
            }
        }
        self.demand
            .hold((self.seats_in_use + waiting_seats) as f64, now);
        if active > 0 {
            let rate = wanted.min(self.concurrency_limit) as f64 / active as f64;
            self.virtual_now += rate * elapsed;
        }
    }

    /// Upstream's `shuffleShardLocked`: of the flow's hand, the queue with the least waiting work
    /// (seats times the estimated service time, so least waiting seats), searched from a place that
    /// moves with every enqueue so that ties do not always go to the same queue.
    fn choose_queue(&mut self, hash: u64) -> Option<usize> {
        let dealer = self.dealer.as_ref()?;
        let hand = dealer.deal_into_hand(hash);
        if hand.is_empty() {
            return None;
        }
        let offset = (self.enqueues % hand.len() as u64) as usize;
        self.enqueues = self.enqueues.wrapping_add(1);
        let mut best: Option<(usize, usize)> = None;
        for k in 0..hand.len() {
            let i = hand[(offset + k) % hand.len()];
            let work = self.queues[i].waiting_seats;
            if best.is_none_or(|(_, w)| work < w) {
                best = Some((i, work));
            }
        }
        best.map(|(i, _)| i)
    }

    /// Upstream's `boundNextDispatchLocked`: a queue's next dispatch is never before its head's
    /// arrival.
    fn bound_next_dispatch(&mut self, i: usize) {
        if let Some(q) = self.queues.get_mut(i) {
            if let Some(head) = q.waiting.front() {
                if q.next_dispatch_r < head.arrival_r {
                    q.next_dispatch_r = head.arrival_r;
                }
            }
        }
    }

    fn push(&mut self, i: usize, w: Waiting<T>) {
        let virtual_now = self.virtual_now;
        let q = &mut self.queues[i];
        if q.waiting.is_empty() && q.executing == 0 {
            q.next_dispatch_r = virtual_now;
        }
        q.waiting_seats += w.seats;
        q.waiting.push_back(w);
        self.waiting += 1;
        self.bound_next_dispatch(i);
    }

    fn can_accommodate(&self, seats: usize) -> bool {
        if seats > self.concurrency_limit {
            // Wider than the whole level: runs alone.
            return self.executing == 0;
        }
        self.seats_in_use + seats <= self.concurrency_limit
    }

    fn ticket(&mut self, queue: Option<usize>, seats: usize, now: f64) -> Ticket {
        self.seats_in_use += seats;
        self.executing += 1;
        if let Some(i) = queue {
            self.queues[i].seats_in_use += seats;
            self.queues[i].executing += 1;
        }
        Ticket {
            queue,
            generation: self.generation,
            seats,
            started: now,
        }
    }

    /// A request of flow `hash` wanting `seats`: `Ok(id)` when it was queued (its payload comes back
    /// from this or a later dispatch, or it is withdrawn by [`QueueSet::cancel`] with `id`),
    /// `Err(payload)` when it is refused. `Ok` with the payload to run now comes back in `run`.
    pub fn start(
        &mut self,
        now: f64,
        hash: u64,
        seats: usize,
        payload: T,
        run: &mut Vec<(T, Ticket)>,
    ) -> Result<u64, T> {
        self.sync_time(now);
        let seats = seats.max(1);
        let id = self.next_id;
        self.next_id += 1;
        let Some(i) = self.choose_queue(hash) else {
            // No queuing: run now or never.
            if !self.can_accommodate(seats) {
                return Err(payload);
            }
            let ticket = self.ticket(None, seats, now);
            run.push((payload, ticket));
            return Ok(id);
        };
        if self.seats_in_use >= self.concurrency_limit
            && self.queues[i].waiting.len() >= self.config.queue_length_limit
        {
            return Err(payload);
        }
        let arrival_r = self.virtual_now;
        self.push(
            i,
            Waiting {
                id,
                hash,
                seats,
                arrival_r,
                arrived: now,
                payload,
            },
        );
        self.dispatch(now, run);
        Ok(id)
    }

    /// Runs waiting requests while seats allow, fairest first.
    pub fn dispatch(&mut self, now: f64, run: &mut Vec<(T, Ticket)>) {
        self.sync_time(now);
        while self.waiting > 0 && self.seats_in_use < self.concurrency_limit {
            let Some(i) = self.fairest_queue() else {
                break;
            };
            let seats = self.queues[i].waiting.front().map_or(1, |w| w.seats);
            if !self.can_accommodate(seats) {
                break;
            }
            let Some(w) = self.queues[i].waiting.pop_front() else {
                break;
            };
            self.waiting -= 1;
            let work = w.work();
            let q = &mut self.queues[i];
            q.waiting_seats -= w.seats;
            q.next_dispatch_r += work;
            self.bound_next_dispatch(i);
            self.robin = i;
            let ticket = self.ticket(Some(i), w.seats, now);
            run.push((w.payload, ticket));
        }
    }

    /// Upstream's `findDispatchQueueToBoundLocked`: round robin from the last dispatch, the least
    /// virtual finish time of the queues' heads.
    fn fairest_queue(&self) -> Option<usize> {
        let n = self.queues.len();
        let mut best: Option<(usize, f64)> = None;
        for k in 1..=n {
            let i = (self.robin + k) % n;
            let q = &self.queues[i];
            if let Some(head) = q.waiting.front() {
                let finish = q.next_dispatch_r + head.work();
                if best.is_none_or(|(_, f)| finish < f) {
                    best = Some((i, finish));
                }
            }
        }
        best.map(|(i, _)| i)
    }

    /// A running request ended: its seats come back, its queue's virtual time is corrected by the
    /// actual service time, and waiting requests that now fit are returned in `run`.
    pub fn finish(&mut self, ticket: Ticket, now: f64, run: &mut Vec<(T, Ticket)>) {
        self.sync_time(now);
        self.seats_in_use = self.seats_in_use.saturating_sub(ticket.seats);
        self.executing = self.executing.saturating_sub(1);
        if ticket.generation == self.generation {
            if let Some(q) = ticket.queue.and_then(|i| self.queues.get_mut(i)) {
                q.seats_in_use = q.seats_in_use.saturating_sub(ticket.seats);
                q.executing = q.executing.saturating_sub(1);
                let actual = (now - ticket.started).max(0.0);
                q.next_dispatch_r -= ticket.seats as f64 * (ESTIMATED_SERVICE_SECONDS - actual);
            }
            if let Some(i) = ticket.queue {
                self.bound_next_dispatch(i);
            }
        }
        self.dispatch(now, run);
    }

    /// Withdraws a waiting request (its wait timed out, or its client left): its payload, or None
    /// when it is not waiting any more (it was dispatched meanwhile).
    pub fn cancel(&mut self, id: u64, now: f64) -> Option<T> {
        self.sync_time(now);
        for i in 0..self.queues.len() {
            let q = &mut self.queues[i];
            if let Some(pos) = q.waiting.iter().position(|w| w.id == id) {
                let w = q.waiting.remove(pos)?;
                q.waiting_seats -= w.seats;
                self.waiting -= 1;
                self.bound_next_dispatch(i);
                return Some(w.payload);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queued(queues: usize, hand: usize, limit: usize) -> QueuingConfig {
        QueuingConfig {
            queues,
            hand_size: hand,
            queue_length_limit: limit,
        }
    }

    #[test]
    fn reject_level_runs_what_fits_and_refuses_the_rest() {
        let mut qs = QueueSet::new(queued(0, 0, 0), 3, 0.0);
        let mut run = Vec::new();
        assert!(qs.start(0.0, 1, 2, "a", &mut run).is_ok());
        assert!(qs.start(0.0, 1, 1, "b", &mut run).is_ok());
        assert_eq!(qs.start(0.0, 1, 1, "c", &mut run), Err("c"));
        assert_eq!(qs.seats_in_use(), 3);
        let (_, a) = run.remove(0);
        qs.finish(a, 0.1, &mut run);
        assert_eq!(qs.seats_in_use(), 1);
        assert!(qs.start(0.1, 1, 2, "d", &mut run).is_ok());
        // Wider than the whole level: only alone.
        assert!(qs.start(0.1, 1, 9, "wide", &mut run).is_err());
        let tickets: Vec<Ticket> = run.drain(..).map(|(_, t)| t).collect();
        for t in tickets {
            qs.finish(t, 0.2, &mut run);
        }
        assert!(qs.idle());
        assert!(qs.start(0.2, 1, 9, "wide", &mut run).is_ok());
        assert_eq!(qs.seats_in_use(), 9);
    }

    #[test]
    fn seats_are_accounted_and_queued_requests_run_as_seats_free() {
        let mut qs = QueueSet::new(queued(4, 2, 10), 4, 0.0);
        let mut run = Vec::new();
        for name in ["a", "b", "c", "d"] {
            qs.start(0.0, 7, 1, name, &mut run).unwrap();
        }
        assert_eq!(run.len(), 4);
        assert_eq!(qs.seats_in_use(), 4);
        // Full: the next waits, then runs when a seat frees.
        qs.start(0.0, 7, 2, "wide", &mut run).unwrap();
        assert_eq!((run.len(), qs.waiting()), (4, 1));
        let (_, t) = run.remove(0);
        qs.finish(t, 0.01, &mut run);
        assert_eq!(run.len(), 3, "two seats are needed, one is free");
        let (_, t) = run.remove(0);
        qs.finish(t, 0.02, &mut run);
        assert_eq!(run.last().map(|(n, _)| *n), Some("wide"));
        assert_eq!((qs.seats_in_use(), qs.waiting(), qs.executing()), (4, 0, 3));
    }

    #[test]
    fn queues_full_means_rejection() {
        // One queue of two: with every seat taken the third waiting request is refused.
        let mut qs = QueueSet::new(queued(1, 1, 2), 1, 0.0);
        let mut run = Vec::new();
        qs.start(0.0, 1, 1, 0, &mut run).unwrap();
        qs.start(0.0, 1, 1, 1, &mut run).unwrap();
        qs.start(0.0, 1, 1, 2, &mut run).unwrap();
        assert_eq!(qs.start(0.0, 1, 1, 3, &mut run), Err(3));
        assert_eq!((run.len(), qs.waiting()), (1, 2));
    }

    #[test]
    fn cancel_withdraws_a_waiting_request() {
        let mut qs = QueueSet::new(queued(2, 1, 5), 1, 0.0);
        let mut run = Vec::new();
        qs.start(0.0, 1, 1, "running", &mut run).unwrap();
        let id = qs.start(0.0, 1, 1, "waiting", &mut run).unwrap();
        assert_eq!(qs.cancel(id, 1.0), Some("waiting"));
        assert_eq!(qs.cancel(id, 1.0), None);
        assert_eq!(qs.waiting(), 0);
        let (_, t) = run.remove(0);
        qs.finish(t, 1.0, &mut run);
        assert!(run.is_empty() && qs.idle());
    }

    /// Two flows on different queues, one with a deep backlog: dispatching alternates between
    /// them instead of serving the backlog first.
    #[test]
    fn fair_ordering_across_flows() {
        // 2 queues, hands of 1: find two hashes dealt different queues.
        let dealer = Dealer::new(2, 1).unwrap();
        let heavy = 0u64;
        let light = (1..100)
            .find(|h| dealer.deal_into_hand(*h) != dealer.deal_into_hand(heavy))
            .unwrap();
        let mut qs = QueueSet::new(queued(2, 1, 100), 1, 0.0);
        let mut run = Vec::new();
        qs.start(0.0, heavy, 1, "h0", &mut run).unwrap();
        for i in 1..=10 {
            qs.start(0.0, heavy, 1, if i < 10 { "h" } else { "h-last" }, &mut run)
                .unwrap();
        }
        for _ in 0..3 {
            qs.start(0.0, light, 1, "l", &mut run).unwrap();
        }
        let mut order = Vec::new();
        let mut now = 0.0;
        while let Some((name, ticket)) = run.pop() {
            order.push(name);
            now += 0.003;
            qs.finish(ticket, now, &mut run);
        }
        assert_eq!(order.len(), 14);
        // The three light requests are served among the first seven, not after ten heavy ones.
        let last_light = order.iter().rposition(|n| *n == "l").unwrap();
        assert!(last_light <= 7, "{order:?}");
        assert_eq!(order.last(), Some(&"h-last"));
    }

    #[test]
    fn reconfiguring_keeps_waiting_requests_where_it_can() {
        let mut qs = QueueSet::new(queued(8, 2, 10), 1, 0.0);
        let mut run = Vec::new();
        qs.start(0.0, 3, 1, "running", &mut run).unwrap();
        for i in 0..5 {
            qs.start(0.0, i, 1, "waiting", &mut run).unwrap();
        }
        assert_eq!(qs.waiting(), 5);
        // Fewer, shorter queues: all fit in 1 queue of 3? two are refused.
        let refused = qs.reconfigure(queued(1, 1, 3), 1, 0.1);
        assert_eq!((refused.len(), qs.waiting()), (2, 3));
        // Reject: every waiting request is refused; the running one finishes normally.
        let refused = qs.reconfigure(queued(0, 0, 0), 2, 0.2);
        assert_eq!((refused.len(), qs.waiting()), (3, 0));
        let (_, t) = run.remove(0);
        qs.finish(t, 0.3, &mut run);
        assert!(qs.idle());
    }

    /// Three hashes dealt three different queues (hands of 1).
    fn three_flows(queues: usize) -> (u64, u64, u64) {
        let dealer = Dealer::new(queues as i64, 1).unwrap();
        let q = |h: u64| dealer.deal_into_hand(h)[0];
        let a = 0u64;
        let b = (1..1000).find(|h| q(*h) != q(a)).unwrap();
        let c = (1..1000).find(|h| q(*h) != q(a) && q(*h) != q(b)).unwrap();
        (a, b, c)
    }

    /// Upstream's anti-windup (`boundNextDispatchLocked`): a queue whose long request has been
    /// executing (charged only its 3 ms estimate so far) does not get to dispatch a request that
    /// arrived later ahead of one that has waited longer in another queue: its next dispatch is
    /// never earlier than its head's arrival.
    #[test]
    fn a_queue_busy_for_long_does_not_jump_ahead_of_earlier_arrivals() {
        let (a, b, c) = three_flows(8);
        let mut qs = QueueSet::new(queued(8, 1, 10), 2, 0.0);
        let mut run = Vec::new();
        qs.start(0.0, a, 1, "a0", &mut run).unwrap();
        qs.start(0.0, b, 1, "b0", &mut run).unwrap();
        assert_eq!(run.len(), 2, "both fit");
        // Seats full: c1 waits from t=5, a1 from t=10.
        qs.start(5.0, c, 1, "c1", &mut run).unwrap();
        qs.start(10.0, a, 1, "a1", &mut run).unwrap();
        assert_eq!(qs.waiting(), 2);
        // b0 ends: one seat, for the request that arrived first in virtual time.
        let (_, b0) = run.pop().unwrap();
        qs.finish(b0, 10.1, &mut run);
        assert_eq!(run.last().map(|(n, _)| *n), Some("c1"));
    }

    /// After every change, each queue's next dispatch is at or after its head's arrival.
    #[test]
    fn next_dispatch_never_precedes_the_heads_arrival() {
        let (a, b, c) = three_flows(4);
        let mut qs = QueueSet::new(queued(4, 1, 50), 3, 0.0);
        let mut run: Vec<(u32, Ticket)> = Vec::new();
        let mut t = 0.0;
        let check = |qs: &QueueSet<u32>| {
            for q in &qs.queues {
                if let Some(head) = q.waiting.front() {
                    assert!(
                        q.next_dispatch_r >= head.arrival_r,
                        "{} < {}",
                        q.next_dispatch_r,
                        head.arrival_r
                    );
                }
            }
        };
        for step in 0..300u32 {
            t += 0.01;
            let flow = [a, b, c][(step % 3) as usize];
            let seats = 1 + (step % 2) as usize;
            let _ = qs.start(t, flow, seats, step, &mut run);
            check(&qs);
            // Finish the oldest running one every other step, some quick, some slow.
            if step % 2 == 0 && !run.is_empty() {
                let (_, ticket) = run.remove(0);
                let end = if step % 4 == 0 { ticket.started } else { t };
                qs.finish(ticket, end.max(t), &mut run);
                check(&qs);
            }
        }
    }
}
