//! The scheduling queue (upstream `internal/queue.PriorityQueue`): activeQ ordered by the QueueSort
//! plugin (PrioritySort: priority, then enqueue time), a backoff queue with per-pod exponential
//! backoff (1 s doubling to 10 s), the unschedulable pods, which wait for a cluster event that one of
//! the plugins that rejected them registered for (upstream's queueing hints, by event type only) or
//! for the periodic flush (5 minutes), and the gated pods that PreEnqueue kept out (scheduling gates),
//! which only an update of the pod itself brings back.
//!
//! As upstream with `SchedulerPopFromBackoffQ` (beta and on by default since 1.33): when activeQ is
//! empty, `pop` takes the pod backing off after an unschedulable attempt whose backoff ends first
//! (ends rounded down to 1 s windows, then priority, then enqueue time) instead of idling; pods
//! backing off after an error wait their backoff out.

mod nominator;

pub use nominator::Nominator;

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::framework::{ClusterEvent, Plugin, QueuedPodInfo};

pub const INITIAL_BACKOFF: Duration = Duration::from_secs(1);
pub const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// Unschedulable pods are retried at least this often (upstream `podMaxInUnschedulablePodsDuration`).
pub const UNSCHEDULABLE_FLUSH: Duration = Duration::from_secs(300);

struct Entry {
    info: QueuedPodInfo,
    sort: Option<Arc<dyn Plugin>>,
}

impl Entry {
    fn less(&self, other: &Entry) -> bool {
        match self.sort.as_ref().and_then(|p| p.as_queue_sort()) {
            Some(qs) => qs.less(&self.info, &other.info),
            None => {
                (self.info.priority, std::cmp::Reverse(self.info.seq))
                    > (other.info.priority, std::cmp::Reverse(other.info.seq))
            }
        }
    }
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.info.seq == other.info.seq
    }
}
impl Eq for Entry {}

impl Ord for Entry {
    fn cmp(&self, other: &Self) -> Ordering {
        // BinaryHeap pops the greatest: the entry QueueSort puts first.
        if self.less(other) {
            Ordering::Greater
        } else if other.less(self) {
            Ordering::Less
        } else {
            other.info.seq.cmp(&self.info.seq)
        }
    }
}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// What the queue knows of a pending pod.
struct PodState {
    priority: i32,
    profile: usize,
    timestamp: Instant,
    attempts: u32,
    /// The plugins that rejected it in its last attempt.
    rejected_by: HashSet<&'static str>,
}

#[derive(Default)]
struct Inner {
    active: BinaryHeap<Entry>,
    /// Keys in `active` and the seq of their live heap entry (others are stale).
    queued: HashMap<String, u64>,
    pods: HashMap<String, PodState>,
    /// Pods waiting out their backoff.
    backoff: HashMap<String, Backoff>,
    /// Pods that did not fit, since when.
    unschedulable: HashMap<String, Instant>,
    /// Pods PreEnqueue keeps out.
    gated: HashSet<String>,
    /// Pods being scheduled right now and the cluster events seen meanwhile.
    in_flight: HashMap<String, Vec<ClusterEvent>>,
    seq: u64,
}

/// A pod backing off.
#[derive(Clone, Copy)]
struct Backoff {
    ready: Instant,
    /// It failed with an error rather than not fitting (upstream's podErrorBackoffQ): never popped
    /// before `ready`.
    error: bool,
}

/// Upstream `backoffOrderingWindowDuration`: backoff ends this close are ordered by priority.
const BACKOFF_ORDERING_WINDOW: Duration = Duration::from_secs(1);

/// Decides whether an event may help a pod of a profile rejected by some plugins.
pub type Interest<'a> = &'a dyn Fn(usize, &HashSet<&'static str>, &ClusterEvent) -> bool;

pub struct SchedulingQueue {
    inner: Mutex<Inner>,
    notify: Notify,
    sort: Option<Arc<dyn Plugin>>,
    initial_backoff: Duration,
    max_backoff: Duration,
    /// `SchedulerPopFromBackoffQ`.
    pop_from_backoff: bool,
    /// The origin of the backoff ordering windows.
    epoch: Instant,
}

impl Default for SchedulingQueue {
    fn default() -> Self {
        SchedulingQueue {
            inner: Mutex::default(),
            notify: Notify::new(),
            sort: None,
            initial_backoff: INITIAL_BACKOFF,
            max_backoff: MAX_BACKOFF,
            pop_from_backoff: true,
            epoch: Instant::now(),
        }
    }
}

fn backoff_for(initial: Duration, max: Duration, attempts: u32) -> Duration {
    let d = initial.saturating_mul(1 << attempts.saturating_sub(1).min(10));
    d.min(max)
}

impl SchedulingQueue {
    /// A queue ordered by `sort` (a QueueSort plugin; `None`: priority then FIFO).
    pub fn new(sort: Option<Arc<dyn Plugin>>) -> SchedulingQueue {
        SchedulingQueue {
            sort,
            ..Default::default()
        }
    }

    /// Backoff from `initial` doubling to `max` (podInitialBackoffSeconds, podMaxBackoffSeconds).
    pub fn with_backoff(mut self, initial: Duration, max: Duration) -> SchedulingQueue {
        self.initial_backoff = initial;
        self.max_backoff = max.max(initial);
        self
    }

    /// Whether an idle scheduler takes pods from the backoff queue early (the
    /// `SchedulerPopFromBackoffQ` feature gate; on by default).
    pub fn with_pop_from_backoff(mut self, enabled: bool) -> SchedulingQueue {
        self.pop_from_backoff = enabled;
        self
    }

    fn backoff_for(&self, attempts: u32) -> Duration {
        backoff_for(self.initial_backoff, self.max_backoff, attempts)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds (or refreshes) a pending pod of `profile` in activeQ, unless it is backing off or in
    /// flight. Use for new pods and for updates of the pod that may make it schedulable.
    pub fn add(&self, key: &str, priority: i32, profile: usize) {
        let mut q = self.lock();
        let now = Instant::now();
        let st = q.pods.entry(key.to_string()).or_insert_with(|| PodState {
            priority,
            profile,
            timestamp: now,
            attempts: 0,
            rejected_by: HashSet::new(),
        });
        st.priority = priority;
        st.profile = profile;
        q.gated.remove(key);
        if q.backoff.contains_key(key) || q.in_flight.contains_key(key) {
            return;
        }
        q.unschedulable.remove(key);
        self.push(&mut q, key);
        drop(q);
        self.notify.notify_one();
    }

    /// PreEnqueue rejected the pod (e.g. scheduling gates): it waits for an update of itself.
    pub fn gate(&self, key: &str, priority: i32, profile: usize) {
        let mut q = self.lock();
        let now = Instant::now();
        q.pods.entry(key.to_string()).or_insert_with(|| PodState {
            priority,
            profile,
            timestamp: now,
            attempts: 0,
            rejected_by: HashSet::new(),
        });
        q.queued.remove(key);
        q.backoff.remove(key);
        q.unschedulable.remove(key);
        q.gated.insert(key.to_string());
    }

    /// Forgets a pod (deleted or bound by someone else).
    pub fn remove(&self, key: &str) {
        let mut q = self.lock();
        q.queued.remove(key);
        q.backoff.remove(key);
        q.unschedulable.remove(key);
        q.gated.remove(key);
        q.pods.remove(key);
    }

    /// The next pod to schedule, waiting for one.
    pub async fn pop(&self) -> String {
        loop {
            let notified = self.notify.notified();
            let wait = {
                let mut q = self.lock();
                self.flush(&mut q);
                while let Some(e) = q.active.pop() {
                    // Skip stale heap entries of keys removed or re-queued.
                    if q.queued.get(&e.info.key) == Some(&e.info.seq) {
                        q.queued.remove(&e.info.key);
                        return Self::start(&mut q, e.info.key);
                    }
                }
                if let Some(key) = self.early_backoff_pod(&q) {
                    q.backoff.remove(&key);
                    return Self::start(&mut q, key);
                }
                q.backoff
                    .values()
                    .map(|b| b.ready.saturating_duration_since(Instant::now()))
                    .min()
                    .unwrap_or(Duration::from_secs(1))
            };
            tokio::select! {
                _ = notified => {}
                _ = tokio::time::sleep(wait.max(Duration::from_millis(10))) => {}
            }
        }
    }

    /// Hands `key` to a scheduling cycle.
    fn start(q: &mut Inner, key: String) -> String {
        q.in_flight.insert(key.clone(), Vec::new());
        if let Some(st) = q.pods.get_mut(&key) {
            st.attempts += 1;
        }
        key
    }

    /// The pod to pop from the backoff queue while activeQ is empty, if enabled (upstream orders its
    /// backoffQ by the backoff end's window, then priority, then enqueue time).
    fn early_backoff_pod(&self, q: &Inner) -> Option<String> {
        if !self.pop_from_backoff {
            return None;
        }
        let window = BACKOFF_ORDERING_WINDOW.as_millis().max(1);
        q.backoff
            .iter()
            .filter(|(_, b)| !b.error)
            .filter_map(|(k, b)| {
                let st = q.pods.get(k)?;
                let bucket = b.ready.saturating_duration_since(self.epoch).as_millis() / window;
                Some(((bucket, std::cmp::Reverse(st.priority), st.timestamp), k))
            })
            .min()
            .map(|(_, k)| k.clone())
    }

    /// Moves due backoff pods and long-waiting unschedulable ones to activeQ.
    fn flush(&self, q: &mut Inner) {
        let now = Instant::now();
        let due: Vec<String> = q
            .backoff
            .iter()
            .filter(|(_, b)| b.ready <= now)
            .map(|(k, _)| k.clone())
            .collect();
        for k in due {
            q.backoff.remove(&k);
            self.push(q, &k);
        }
        let stale: Vec<String> = q
            .unschedulable
            .iter()
            .filter(|(_, t)| now.duration_since(**t) >= UNSCHEDULABLE_FLUSH)
            .map(|(k, _)| k.clone())
            .collect();
        for k in stale {
            q.unschedulable.remove(&k);
            self.push(q, &k);
        }
    }

    /// The pod was placed (assumed): forget it.
    pub fn done(&self, key: &str) {
        let mut q = self.lock();
        q.in_flight.remove(key);
        q.pods.remove(key);
    }

    /// The pod left the cycle without an outcome (deleted, or not ours any more).
    pub fn skip(&self, key: &str) {
        let mut q = self.lock();
        q.in_flight.remove(key);
    }

    /// The pod did not fit (rejected by `plugins`): it waits for an event one of them registered
    /// for, unless such an event arrived while it was being scheduled (then it backs off).
    pub fn unschedulable(&self, key: &str, plugins: HashSet<&'static str>, interest: Interest<'_>) {
        let mut q = self.lock();
        let events = q.in_flight.remove(key).unwrap_or_default();
        let Some(st) = q.pods.get_mut(key) else {
            return;
        };
        let profile = st.profile;
        let moved = events.iter().any(|e| interest(profile, &plugins, e));
        let ready = Instant::now() + self.backoff_for(st.attempts);
        st.rejected_by = plugins;
        if moved {
            q.backoff.insert(
                key.to_string(),
                Backoff {
                    ready,
                    error: false,
                },
            );
        } else {
            q.unschedulable.insert(key.to_string(), Instant::now());
        }
        drop(q);
        self.notify.notify_one();
    }

    /// Scheduling failed for another reason (error, binding failure): retry after the backoff.
    pub fn error(&self, key: &str, priority: i32, profile: usize) {
        let mut q = self.lock();
        q.in_flight.remove(key);
        let now = Instant::now();
        let st = q.pods.entry(key.to_string()).or_insert_with(|| PodState {
            priority,
            profile,
            timestamp: now,
            attempts: 1,
            rejected_by: HashSet::new(),
        });
        st.rejected_by.clear();
        let ready = now + self.backoff_for(st.attempts.max(1));
        q.backoff
            .insert(key.to_string(), Backoff { ready, error: true });
        drop(q);
        self.notify.notify_one();
    }

    /// A cluster event: unschedulable pods that it may help move to the backoff queue (or activeQ
    /// when their backoff has passed); pods in flight remember it.
    pub fn on_event(&self, event: ClusterEvent, interest: Interest<'_>) {
        self.on_event_filtered(event, interest, None);
    }

    /// As [`Self::on_event`] for an event about one object, which can only help the pods
    /// `concerns` accepts (by key): upstream's queueing hints answer QueueSkip for the others (a
    /// claim added for another pod). Skipped pods neither move nor count the event as seen during
    /// their cycle, so a pod whose claim is missing waits for that claim instead of being retried
    /// on every other claim's or volume's change. `concerns` runs without the queue's lock (it may
    /// read informer stores).
    pub fn on_event_for(
        &self,
        event: ClusterEvent,
        interest: Interest<'_>,
        concerns: &dyn Fn(&str) -> bool,
    ) {
        let keys: Vec<String> = {
            let q = self.lock();
            let may_move = |k: &&String| {
                q.pods
                    .get(*k)
                    .is_some_and(|st| interest(st.profile, &st.rejected_by, &event))
            };
            q.in_flight
                .keys()
                .chain(q.unschedulable.keys().filter(may_move))
                .cloned()
                .collect()
        };
        let concerned: HashSet<String> = keys.into_iter().filter(|k| concerns(k)).collect();
        self.on_event_filtered(event, interest, Some(&concerned));
    }

    fn on_event_filtered(
        &self,
        event: ClusterEvent,
        interest: Interest<'_>,
        only: Option<&HashSet<String>>,
    ) {
        let wanted = |k: &String| only.is_none_or(|o| o.contains(k));
        let mut q = self.lock();
        for (k, v) in q.in_flight.iter_mut() {
            if wanted(k) {
                v.push(event);
            }
        }
        let now = Instant::now();
        let waiting: Vec<(String, Instant)> = q
            .unschedulable
            .iter()
            .filter(|(k, _)| wanted(k))
            .map(|(k, t)| (k.clone(), *t))
            .collect();
        let mut moved = false;
        for (k, since) in waiting {
            let Some(st) = q.pods.get(&k) else { continue };
            if !interest(st.profile, &st.rejected_by, &event) {
                continue;
            }
            let ready = since + self.backoff_for(st.attempts);
            q.unschedulable.remove(&k);
            moved = true;
            if ready <= now {
                self.push(&mut q, &k);
            } else {
                q.backoff.insert(
                    k,
                    Backoff {
                        ready,
                        error: false,
                    },
                );
            }
        }
        drop(q);
        if moved {
            self.notify.notify_one();
        }
    }

    /// Every unschedulable pod moves (tests, and the flush on demand).
    pub fn move_all_to_active_or_backoff(&self) {
        self.on_event(
            ClusterEvent::new(
                crate::framework::EventResource::Node,
                crate::framework::action::ALL,
            ),
            &|_, _, _| true,
        );
    }

    /// (active, backoff, unschedulable incl. gated) pod counts.
    pub fn pending(&self) -> (usize, usize, usize) {
        let q = self.lock();
        (
            q.queued.len(),
            q.backoff.len(),
            q.unschedulable.len() + q.gated.len(),
        )
    }

    /// The pods PreEnqueue keeps out.
    pub fn gated_keys(&self) -> Vec<String> {
        self.lock().gated.iter().cloned().collect()
    }

    pub fn is_gated(&self, key: &str) -> bool {
        self.lock().gated.contains(key)
    }

    fn push(&self, q: &mut Inner, key: &str) {
        let Some(st) = q.pods.get(key) else { return };
        let (priority, timestamp) = (st.priority, st.timestamp);
        q.seq += 1;
        let seq = q.seq;
        q.queued.insert(key.to_string(), seq);
        q.active.push(Entry {
            info: QueuedPodInfo {
                key: key.to_string(),
                priority,
                timestamp,
                seq,
            },
            sort: self.sort.clone(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::{action, EventResource};

    fn plugins(names: &[&'static str]) -> HashSet<&'static str> {
        names.iter().copied().collect()
    }

    /// Fit cares about pod deletions, NodeAffinity about node label changes.
    fn interest(_: usize, rejected: &HashSet<&'static str>, e: &ClusterEvent) -> bool {
        rejected.is_empty()
            || (rejected.contains("Fit")
                && e.resource == EventResource::Pod
                && e.action & action::DELETE != 0)
            || (rejected.contains("NodeAffinity")
                && e.resource == EventResource::Node
                && e.action & (action::ADD | action::UPDATE_NODE_LABEL) != 0)
    }

    #[tokio::test]
    async fn priority_then_fifo() {
        let q = SchedulingQueue::new(Some(Arc::new(crate::plugins::PrioritySort)));
        q.add("low-1", 0, 0);
        q.add("high", 100, 0);
        q.add("low-2", 0, 0);
        q.add("low-1", 0, 0); // already queued: keeps its place (first enqueue time)
        assert_eq!(q.pop().await, "high");
        assert_eq!(q.pop().await, "low-1");
        assert_eq!(q.pop().await, "low-2");
        assert_eq!(q.pending(), (0, 0, 0));
    }

    #[tokio::test]
    async fn unschedulable_pods_wait_for_an_event_they_care_about() {
        let q = SchedulingQueue::default()
            .with_backoff(Duration::from_millis(1), Duration::from_millis(1));
        q.add("p", 0, 0);
        assert_eq!(q.pop().await, "p");
        q.unschedulable("p", plugins(&["NodeAffinity"]), &interest);
        assert_eq!(q.pending(), (0, 0, 1));
        // A pod deletion does not help a node affinity mismatch.
        q.on_event(
            ClusterEvent::new(EventResource::Pod, action::DELETE),
            &interest,
        );
        assert_eq!(q.pending(), (0, 0, 1));
        // A node label change may.
        q.on_event(
            ClusterEvent::new(EventResource::Node, action::UPDATE_NODE_LABEL),
            &interest,
        );
        let (active, backoff, unschedulable) = q.pending();
        assert_eq!((active + backoff, unschedulable), (1, 0));
        assert_eq!(
            tokio::time::timeout(Duration::from_secs(5), q.pop())
                .await
                .unwrap(),
            "p"
        );
        // An update of the pod itself requeues it.
        q.unschedulable("p", plugins(&["Fit"]), &interest);
        q.add("p", 0, 0);
        assert_eq!(q.pending(), (1, 0, 0));
    }

    #[tokio::test]
    async fn a_relevant_event_during_scheduling_means_backoff_not_waiting() {
        let q = SchedulingQueue::default();
        q.add("p", 0, 0);
        assert_eq!(q.pop().await, "p");
        q.on_event(
            ClusterEvent::new(EventResource::Node, action::UPDATE_NODE_TAINT),
            &interest,
        );
        q.unschedulable("p", plugins(&["Fit"]), &interest);
        assert_eq!(q.pending(), (0, 0, 1), "an irrelevant event");
        q.add("p", 0, 0);
        assert_eq!(q.pop().await, "p");
        q.on_event(
            ClusterEvent::new(EventResource::Pod, action::DELETE),
            &interest,
        );
        q.unschedulable("p", plugins(&["Fit"]), &interest);
        assert_eq!(q.pending(), (0, 1, 0));
    }

    #[tokio::test]
    async fn an_event_for_one_object_moves_only_the_pods_it_concerns() {
        let q = SchedulingQueue::default();
        let deleted = ClusterEvent::new(EventResource::Pod, action::DELETE);
        for k in ["a", "b"] {
            q.add(k, 0, 0);
            assert_eq!(q.pop().await, k);
            q.unschedulable(k, plugins(&["Fit"]), &interest);
        }
        assert_eq!(q.pending(), (0, 0, 2));
        q.on_event_for(deleted, &interest, &|k| k == "a");
        assert_eq!(q.pending(), (0, 1, 1), "only a moves");
        // During a cycle, an event concerning another pod is not remembered for this one.
        q.add("c", 0, 0);
        assert_eq!(q.pop().await, "c");
        q.on_event_for(deleted, &interest, &|k| k == "b");
        q.unschedulable("c", plugins(&["Fit"]), &interest);
        assert_eq!(q.pending(), (0, 2, 1), "b moved, c waits");
        q.add("d", 0, 0);
        assert_eq!(q.pop().await, "d");
        q.on_event_for(deleted, &interest, &|k| k == "d");
        q.unschedulable("d", plugins(&["Fit"]), &interest);
        assert_eq!(q.pending(), (0, 3, 1), "d saw its event during the cycle");
    }

    #[tokio::test]
    async fn gated_pods_stay_out_until_updated() {
        let q = SchedulingQueue::default();
        q.gate("g", 0, 0);
        assert!(q.is_gated("g"));
        q.move_all_to_active_or_backoff();
        assert_eq!(q.pending(), (0, 0, 1));
        q.add("g", 0, 0);
        assert!(!q.is_gated("g"));
        assert_eq!(q.pop().await, "g");
        q.remove("g");
        assert_eq!(q.pending(), (0, 0, 0));
    }

    #[tokio::test]
    async fn errors_back_off() {
        let q = SchedulingQueue::default();
        q.add("p", 0, 0);
        assert_eq!(q.pop().await, "p");
        q.error("p", 0, 0);
        assert_eq!(q.pending(), (0, 1, 0));
    }

    /// A pod that did not fit, then an event that may help it: it backs off for 10 s.
    async fn backing_off(q: &SchedulingQueue, key: &str, priority: i32) {
        q.add(key, priority, 0);
        assert_eq!(q.pop().await, key);
        q.on_event(
            ClusterEvent::new(EventResource::Pod, action::DELETE),
            &interest,
        );
        q.unschedulable(key, plugins(&["Fit"]), &interest);
    }

    #[tokio::test]
    async fn an_idle_queue_pops_unschedulable_pods_from_backoff_early() {
        let q = SchedulingQueue::default()
            .with_backoff(Duration::from_secs(10), Duration::from_secs(10));
        backing_off(&q, "low", 0).await;
        backing_off(&q, "high", 100).await;
        assert_eq!(q.pending(), (0, 2, 0));
        let pop = || tokio::time::timeout(Duration::from_secs(2), q.pop());
        // Both backoffs end in the same window: priority decides.
        assert_eq!(pop().await.unwrap(), "high");
        assert_eq!(pop().await.unwrap(), "low");
        // activeQ goes first.
        backing_off(&q, "backoff", 100).await;
        q.add("active", 0, 0);
        assert_eq!(pop().await.unwrap(), "active");
        assert_eq!(pop().await.unwrap(), "backoff");
    }

    #[tokio::test]
    async fn errors_and_the_gate_off_wait_out_the_backoff() {
        let q = SchedulingQueue::default()
            .with_backoff(Duration::from_secs(10), Duration::from_secs(10));
        q.add("p", 0, 0);
        assert_eq!(q.pop().await, "p");
        q.error("p", 0, 0);
        assert!(tokio::time::timeout(Duration::from_millis(300), q.pop())
            .await
            .is_err());
        let q = SchedulingQueue::default()
            .with_backoff(Duration::from_secs(10), Duration::from_secs(10))
            .with_pop_from_backoff(false);
        backing_off(&q, "p", 0).await;
        assert!(tokio::time::timeout(Duration::from_millis(300), q.pop())
            .await
            .is_err());
        assert_eq!(q.pending(), (0, 1, 0));
    }

    #[test]
    fn backoff_doubles_to_the_maximum() {
        let b = |n| backoff_for(INITIAL_BACKOFF, MAX_BACKOFF, n);
        assert_eq!(b(1), Duration::from_secs(1));
        assert_eq!(b(2), Duration::from_secs(2));
        assert_eq!(b(4), Duration::from_secs(8));
        assert_eq!(b(5), MAX_BACKOFF);
        assert_eq!(b(40), MAX_BACKOFF);
        let q =
            SchedulingQueue::default().with_backoff(Duration::from_secs(2), Duration::from_secs(5));
        assert_eq!(q.backoff_for(1), Duration::from_secs(2));
        assert_eq!(q.backoff_for(3), Duration::from_secs(5));
    }
}
