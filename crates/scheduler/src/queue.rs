//! The scheduling queue (upstream `internal/queue.PriorityQueue`): activeQ ordered by priority then
//! enqueue time (the PrioritySort plugin), a backoff queue with per-pod exponential backoff (1 s
//! doubling to 10 s), and the unschedulable pods, which wait for a cluster event that may make them
//! fit (a node added or changed, a pod deleted) or for the periodic flush (5 minutes).

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

pub const INITIAL_BACKOFF: Duration = Duration::from_secs(1);
pub const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// Unschedulable pods are retried at least this often (upstream `podMaxInUnschedulablePodsDuration`).
pub const UNSCHEDULABLE_FLUSH: Duration = Duration::from_secs(300);

#[derive(Debug, PartialEq, Eq)]
struct Entry {
    priority: i32,
    seq: u64,
    key: String,
}

impl Ord for Entry {
    fn cmp(&self, other: &Self) -> Ordering {
        // Higher priority first, then earlier enqueue first.
        self.priority
            .cmp(&other.priority)
            .then_with(|| other.seq.cmp(&self.seq))
    }
}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

#[derive(Default)]
struct Inner {
    active: BinaryHeap<Entry>,
    /// Keys in `active` (a key is queued once).
    queued: HashMap<String, i32>,
    /// Pods waiting out their backoff: ready time and priority.
    backoff: HashMap<String, (Instant, i32)>,
    /// Pods that did not fit, since when, and their priority.
    unschedulable: HashMap<String, (Instant, i32)>,
    /// Failed attempts per pod, for the backoff.
    attempts: HashMap<String, u32>,
    /// Pods being scheduled right now, and whether a cluster event arrived meanwhile.
    in_flight: HashMap<String, bool>,
    seq: u64,
}

#[derive(Default)]
pub struct SchedulingQueue {
    inner: Mutex<Inner>,
    notify: Notify,
}

fn backoff_for(attempts: u32) -> Duration {
    let d = INITIAL_BACKOFF.saturating_mul(1 << attempts.saturating_sub(1).min(10));
    d.min(MAX_BACKOFF)
}

impl SchedulingQueue {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds (or refreshes) a pending pod in activeQ, unless it is backing off.
    pub fn add(&self, key: &str, priority: i32) {
        let mut q = self.lock();
        if q.backoff.contains_key(key) || q.in_flight.contains_key(key) {
            return;
        }
        q.unschedulable.remove(key);
        push(&mut q, key, priority);
        drop(q);
        self.notify.notify_one();
    }

    /// Forgets a pod (deleted or bound by someone else).
    pub fn remove(&self, key: &str) {
        let mut q = self.lock();
        q.queued.remove(key);
        q.backoff.remove(key);
        q.unschedulable.remove(key);
        q.attempts.remove(key);
    }

    /// The next pod to schedule, waiting for one.
    pub async fn pop(&self) -> String {
        loop {
            let notified = self.notify.notified();
            let wait = {
                let mut q = self.lock();
                self.flush(&mut q);
                while let Some(e) = q.active.pop() {
                    // Skip stale heap entries of keys removed or re-queued with another priority.
                    if q.queued.get(&e.key) == Some(&e.priority) {
                        q.queued.remove(&e.key);
                        q.in_flight.insert(e.key.clone(), false);
                        return e.key;
                    }
                }
                q.backoff
                    .values()
                    .map(|(t, _)| t.saturating_duration_since(Instant::now()))
                    .min()
                    .unwrap_or(Duration::from_secs(1))
            };
            tokio::select! {
                _ = notified => {}
                _ = tokio::time::sleep(wait.max(Duration::from_millis(10))) => {}
            }
        }
    }

    /// Moves due backoff pods and long-waiting unschedulable ones to activeQ.
    fn flush(&self, q: &mut Inner) {
        let now = Instant::now();
        let due: Vec<(String, i32)> = q
            .backoff
            .iter()
            .filter(|(_, (t, _))| *t <= now)
            .map(|(k, (_, p))| (k.clone(), *p))
            .collect();
        for (k, p) in due {
            q.backoff.remove(&k);
            push(q, &k, p);
        }
        let stale: Vec<(String, i32)> = q
            .unschedulable
            .iter()
            .filter(|(_, (t, _))| now.duration_since(*t) >= UNSCHEDULABLE_FLUSH)
            .map(|(k, (_, p))| (k.clone(), *p))
            .collect();
        for (k, p) in stale {
            q.unschedulable.remove(&k);
            push(q, &k, p);
        }
    }

    /// The pod was placed (bound or assumed): clear its history.
    pub fn done(&self, key: &str) {
        let mut q = self.lock();
        q.in_flight.remove(key);
        q.attempts.remove(key);
    }

    /// The pod did not fit: it waits for a cluster event, unless one arrived while it was being
    /// scheduled (then it backs off and retries).
    pub fn unschedulable(&self, key: &str, priority: i32) {
        let mut q = self.lock();
        let event_meanwhile = q.in_flight.remove(key).unwrap_or(false);
        let attempts = {
            let a = q.attempts.entry(key.to_string()).or_default();
            *a += 1;
            *a
        };
        if event_meanwhile {
            q.backoff.insert(
                key.to_string(),
                (Instant::now() + backoff_for(attempts), priority),
            );
        } else {
            q.unschedulable
                .insert(key.to_string(), (Instant::now(), priority));
        }
        drop(q);
        self.notify.notify_one();
    }

    /// Scheduling failed for another reason (binding error): retry after the backoff.
    pub fn error(&self, key: &str, priority: i32) {
        let mut q = self.lock();
        q.in_flight.remove(key);
        let attempts = {
            let a = q.attempts.entry(key.to_string()).or_default();
            *a += 1;
            *a
        };
        q.backoff.insert(
            key.to_string(),
            (Instant::now() + backoff_for(attempts), priority),
        );
        drop(q);
        self.notify.notify_one();
    }

    /// A cluster event that may make unschedulable pods fit (node added or changed, pod deleted):
    /// they move to the backoff queue (or activeQ when their backoff has passed).
    pub fn move_all_to_active_or_backoff(&self) {
        let mut q = self.lock();
        for v in q.in_flight.values_mut() {
            *v = true;
        }
        let waiting: Vec<(String, (Instant, i32))> = q.unschedulable.drain().collect();
        let now = Instant::now();
        for (k, (since, p)) in waiting {
            let attempts = q.attempts.get(&k).copied().unwrap_or(1);
            let ready = since + backoff_for(attempts);
            if ready <= now {
                push(&mut q, &k, p);
            } else {
                q.backoff.insert(k, (ready, p));
            }
        }
        drop(q);
        self.notify.notify_one();
    }

    pub fn pending(&self) -> (usize, usize, usize) {
        let q = self.lock();
        (q.queued.len(), q.backoff.len(), q.unschedulable.len())
    }
}

fn push(q: &mut Inner, key: &str, priority: i32) {
    if q.queued.get(key) == Some(&priority) {
        return;
    }
    q.seq += 1;
    let seq = q.seq;
    q.queued.insert(key.to_string(), priority);
    q.active.push(Entry {
        priority,
        seq,
        key: key.to_string(),
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn priority_then_fifo() {
        let q = SchedulingQueue::default();
        q.add("low-1", 0);
        q.add("high", 100);
        q.add("low-2", 0);
        q.add("low-1", 0); // already queued: keeps its place
        assert_eq!(q.pop().await, "high");
        assert_eq!(q.pop().await, "low-1");
        assert_eq!(q.pop().await, "low-2");
        assert_eq!(q.pending(), (0, 0, 0));
    }

    #[tokio::test]
    async fn unschedulable_pods_wait_for_an_event() {
        let q = SchedulingQueue::default();
        q.add("p", 0);
        assert_eq!(q.pop().await, "p");
        q.unschedulable("p", 0);
        assert_eq!(q.pending(), (0, 0, 1));
        q.add("p", 0); // an update of the pod itself requeues it
        assert_eq!(q.pending(), (1, 0, 0));
        assert_eq!(q.pop().await, "p");
        q.unschedulable("p", 0);
        q.move_all_to_active_or_backoff();
        let (active, backoff, unschedulable) = q.pending();
        assert_eq!((active + backoff, unschedulable), (1, 0));
        assert_eq!(
            tokio::time::timeout(Duration::from_secs(5), q.pop())
                .await
                .unwrap(),
            "p"
        );
    }

    #[tokio::test]
    async fn an_event_during_scheduling_means_backoff_not_waiting() {
        let q = SchedulingQueue::default();
        q.add("p", 0);
        assert_eq!(q.pop().await, "p");
        q.move_all_to_active_or_backoff();
        q.unschedulable("p", 0);
        assert_eq!(q.pending(), (0, 1, 0));
    }

    #[test]
    fn backoff_doubles_to_ten_seconds() {
        assert_eq!(backoff_for(1), Duration::from_secs(1));
        assert_eq!(backoff_for(2), Duration::from_secs(2));
        assert_eq!(backoff_for(4), Duration::from_secs(8));
        assert_eq!(backoff_for(5), MAX_BACKOFF);
        assert_eq!(backoff_for(40), MAX_BACKOFF);
    }
}
