//! The framework runtime (upstream `framework/runtime/framework.go`): one per profile, holding the
//! profile's plugins per extension point (in configured order, score weights) and running them:
//! PreFilter merging node narrowings, Filter in parallel over the nodes with upstream's early stop
//! and the two-pass "nominated pods" evaluation, Score with normalization and weights, Reserve and
//! Unreserve, Permit with waiting pods, PreBind, Bind, PostBind.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{
    Namespace, PersistentVolume, PersistentVolumeClaim, Pod, ReplicationController, Service,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceSlice};
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use tokio::sync::oneshot;

use super::parallelize::Parallelizer;
use super::{
    ClusterEvent, CycleState, FilterPlugin, NodeInfo, NodeToStatus, Plugin, PodInfo,
    PostFilterResult, PreFilterResult, QueuedPodInfo, ScorePlugin, Status,
};
use crate::queue::Nominator;
use client::informer::Store;

/// Informer caches the plugins read (upstream: the shared informer factory's listers).
#[derive(Clone, Default)]
pub struct Listers {
    pub pvcs: Arc<Store<PersistentVolumeClaim>>,
    pub pvs: Arc<Store<PersistentVolume>>,
    pub storage_classes: Arc<Store<StorageClass>>,
    pub csi_nodes: Arc<Store<CSINode>>,
    pub namespaces: Arc<Store<Namespace>>,
    pub pdbs: Arc<Store<PodDisruptionBudget>>,
    pub services: Arc<Store<Service>>,
    pub replication_controllers: Arc<Store<ReplicationController>>,
    pub replica_sets: Arc<Store<ReplicaSet>>,
    pub stateful_sets: Arc<Store<StatefulSet>>,
    pub resource_claims: Arc<Store<ResourceClaim>>,
    pub resource_slices: Arc<Store<ResourceSlice>>,
    pub device_classes: Arc<Store<DeviceClass>>,
    /// Devices taken by allocated claims and the claims the scheduler allocated but the informer
    /// has not shown yet (fed by the claim informer, shared by every profile's DynamicResources).
    pub dra: Arc<crate::plugins::dynamic_resources::tracker::Tracker>,
}

/// What plugin factories get (upstream `framework.Handle`).
#[derive(Clone, Default)]
pub struct Handle {
    pub client: Option<kube::Client>,
    pub listers: Listers,
    pub parallelizer: Parallelizer,
}

/// A pod held at Permit (upstream `waitingPod`): the plugins that still have to allow it.
struct WaitingPod {
    pending: HashSet<&'static str>,
    done: Option<oneshot::Sender<Status>>,
}

/// The plugins of one profile and how to run them.
pub struct Framework {
    pub profile_name: String,
    pub pre_enqueue: Vec<Arc<dyn Plugin>>,
    pub queue_sort: Option<Arc<dyn Plugin>>,
    pub pre_filter: Vec<Arc<dyn Plugin>>,
    pub filter: Vec<Arc<dyn Plugin>>,
    pub post_filter: Vec<Arc<dyn Plugin>>,
    pub pre_score: Vec<Arc<dyn Plugin>>,
    pub score: Vec<(Arc<dyn Plugin>, i64)>,
    pub reserve: Vec<Arc<dyn Plugin>>,
    pub permit: Vec<Arc<dyn Plugin>>,
    pub pre_bind: Vec<Arc<dyn Plugin>>,
    pub bind: Vec<Arc<dyn Plugin>>,
    pub post_bind: Vec<Arc<dyn Plugin>>,
    /// The profile's percentageOfNodesToScore, overriding the global one.
    pub percentage_of_nodes_to_score: Option<u32>,
    pub handle: Handle,
    pub nominator: Arc<Nominator>,
    /// Which plugin registered for which events (queueing hints).
    events: Vec<(ClusterEvent, &'static str)>,
    waiting: Mutex<HashMap<String, WaitingPod>>,
}

impl Framework {
    #[allow(clippy::too_many_arguments)]
    pub fn new(profile_name: &str, handle: Handle, nominator: Arc<Nominator>) -> Framework {
        Framework {
            profile_name: profile_name.to_string(),
            pre_enqueue: Vec::new(),
            queue_sort: None,
            pre_filter: Vec::new(),
            filter: Vec::new(),
            post_filter: Vec::new(),
            pre_score: Vec::new(),
            score: Vec::new(),
            reserve: Vec::new(),
            permit: Vec::new(),
            pre_bind: Vec::new(),
            bind: Vec::new(),
            post_bind: Vec::new(),
            percentage_of_nodes_to_score: None,
            handle,
            nominator,
            events: Vec::new(),
            waiting: Mutex::new(HashMap::new()),
        }
    }

    /// Records the events each enabled plugin registers (call after filling the lists).
    pub fn register_events(&mut self) {
        let mut seen = HashSet::new();
        let all = self
            .pre_enqueue
            .iter()
            .chain(&self.pre_filter)
            .chain(&self.filter)
            .chain(&self.reserve)
            .chain(&self.permit)
            .chain(&self.pre_bind);
        let mut events = Vec::new();
        for p in all {
            if seen.insert(p.name()) {
                events.extend(p.events_to_register().into_iter().map(|e| (e, p.name())));
            }
        }
        self.events = events;
    }

    /// Whether `event` may help a pod rejected by `plugins` (upstream's queueing hints, by event
    /// type only). A pod with no rejecting plugin (an error) is always moved.
    pub fn interested(&self, plugins: &HashSet<&'static str>, event: &ClusterEvent) -> bool {
        plugins.is_empty()
            || self
                .events
                .iter()
                .any(|(reg, name)| plugins.contains(name) && event.matches(reg))
    }

    pub fn parallelizer(&self) -> &Parallelizer {
        &self.handle.parallelizer
    }

    pub fn run_pre_enqueue(&self, pod: &Pod) -> Result<(), (&'static str, Status)> {
        for p in &self.pre_enqueue {
            if let Some(pe) = p.as_pre_enqueue() {
                let s = pe.pre_enqueue(pod);
                if !s.is_success() {
                    return Err((p.name(), s));
                }
            }
        }
        Ok(())
    }

    /// QueueSort's order; without a QueueSort plugin, priority then time.
    pub fn less(&self, a: &QueuedPodInfo, b: &QueuedPodInfo) -> bool {
        match self.queue_sort.as_ref().and_then(|p| p.as_queue_sort()) {
            Some(qs) => qs.less(a, b),
            None => (a.priority, std::cmp::Reverse(a.seq)) > (b.priority, std::cmp::Reverse(b.seq)),
        }
    }

    /// Runs PreFilter: the merged node narrowing, the status, the rejecting plugin and the plugins
    /// that narrowed the nodes. Narrowings of several plugins are
    /// intersected; an empty intersection is unresolvable.
    pub fn run_pre_filter(
        &self,
        state: &mut CycleState,
        pod: &Pod,
    ) -> (
        PreFilterResult,
        Status,
        Option<&'static str>,
        Vec<&'static str>,
    ) {
        let mut result = PreFilterResult::default();
        let mut narrowing = Vec::new();
        for p in &self.pre_filter {
            let Some(pf) = p.as_pre_filter() else {
                continue;
            };
            let (r, s) = pf.pre_filter(state, pod);
            match s {
                Status::Skip => {
                    state.skip_filter.insert(p.name());
                    continue;
                }
                Status::Success => {}
                other => return (result, other, Some(p.name()), narrowing),
            }
            if let Some(r) = r {
                if !r.all_nodes() {
                    narrowing.push(p.name());
                }
                result = result.merge(r);
                if result.node_names.as_ref().is_some_and(HashSet::is_empty) {
                    let msg = format!(
                        "node(s) didn't satisfy plugin(s) [{}] simultaneously",
                        narrowing.join(", ")
                    );
                    let first = narrowing.first().copied();
                    return (
                        result,
                        Status::UnschedulableAndUnresolvable(msg),
                        first,
                        narrowing,
                    );
                }
            }
        }
        (result, Status::Success, None, narrowing)
    }

    pub fn run_pre_filter_add_pod(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        to_add: &Arc<PodInfo>,
        node: &NodeInfo,
    ) -> Status {
        for p in &self.pre_filter {
            if state.skip_filter.contains(p.name()) {
                continue;
            }
            if let Some(pf) = p.as_pre_filter() {
                let s = pf.add_pod(state, pod, to_add, node);
                if !s.is_success() {
                    return s;
                }
            }
        }
        Status::Success
    }

    pub fn run_pre_filter_remove_pod(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        to_remove: &Arc<PodInfo>,
        node: &NodeInfo,
    ) -> Status {
        for p in &self.pre_filter {
            if state.skip_filter.contains(p.name()) {
                continue;
            }
            if let Some(pf) = p.as_pre_filter() {
                let s = pf.remove_pod(state, pod, to_remove, node);
                if !s.is_success() {
                    return s;
                }
            }
        }
        Status::Success
    }

    /// The Filter plugins that run this cycle (those whose PreFilter did not skip), in order.
    pub fn active_filters(&self, state: &CycleState) -> Vec<(&'static str, &dyn FilterPlugin)> {
        self.filter
            .iter()
            .filter(|p| !state.skip_filter.contains(p.name()))
            .filter_map(|p| p.as_filter().map(|f| (p.name(), f)))
            .collect()
    }

    /// The first failing filter's status and name.
    pub fn run_filter(
        &self,
        state: &CycleState,
        pod: &Pod,
        node: &NodeInfo,
    ) -> (Status, &'static str) {
        run_filters(&self.active_filters(state), state, pod, node)
    }

    /// Upstream `RunFilterPluginsWithNominatedPods`: the pod must fit both with the pods nominated
    /// to the node (of equal or higher priority) added, and without them.
    pub fn run_filter_with_nominated_pods(
        &self,
        state: &CycleState,
        pod: &Pod,
        node: &NodeInfo,
    ) -> (Status, &'static str) {
        self.filter_with_nominated(&self.active_filters(state), state, pod, node)
    }

    fn filter_with_nominated(
        &self,
        filters: &[(&'static str, &dyn FilterPlugin)],
        state: &CycleState,
        pod: &Pod,
        node: &NodeInfo,
    ) -> (Status, &'static str) {
        if self.nominator.is_empty() {
            return run_filters(filters, state, pod, node);
        }
        let nominated = self.nominator.nominated_pods_for_node(node.name());
        if nominated.is_empty() {
            return run_filters(filters, state, pod, node);
        }
        let prio = pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0);
        let me = (
            pod.metadata.namespace.as_deref(),
            pod.metadata.name.as_deref(),
        );
        let mut with = None;
        for pi in nominated {
            let p = pi.pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0);
            let other = (
                pi.pod.metadata.namespace.as_deref(),
                pi.pod.metadata.name.as_deref(),
            );
            if p >= prio && other != me {
                let (st, ni) = with.get_or_insert_with(|| (state.clone(), node.clone()));
                ni.add_pod_info(pi.clone());
                let s = self.run_pre_filter_add_pod(st, pod, &pi, ni);
                if !s.is_success() {
                    return (s, "");
                }
            }
        }
        if let Some((st, ni)) = &with {
            let r = run_filters(filters, st, pod, ni);
            if !r.0.is_success() {
                return r;
            }
        }
        run_filters(filters, state, pod, node)
    }

    /// Filters `nodes` from `start` (wrapping) until `wanted` fit, in parallel. Returns the feasible
    /// nodes, the failures and how many nodes were examined (upstream `findNodesThatPassFilters`).
    pub fn find_nodes_that_pass_filters(
        &self,
        state: &CycleState,
        pod: &Pod,
        nodes: &[Arc<NodeInfo>],
        start: usize,
        wanted: usize,
    ) -> (Vec<Arc<NodeInfo>>, NodeToStatus, usize) {
        let n = nodes.len();
        let mut statuses = NodeToStatus::new();
        if n == 0 {
            return (Vec::new(), statuses, 0);
        }
        let filters = self.active_filters(state);
        if filters.is_empty() {
            let feasible: Vec<_> = (0..wanted.min(n))
                .map(|i| nodes[(start + i) % n].clone())
                .collect();
            let processed = feasible.len();
            return (feasible, statuses, processed);
        }
        let filters = &filters[..];
        // Windows of about the number still wanted, each filtered in parallel: when most nodes fit
        // (the common case) one window does it, and no node beyond it is examined.
        let mut feasible = Vec::new();
        let mut processed = 0;
        while processed < n && feasible.len() < wanted {
            let window = (wanted - feasible.len()).max(64).min(n - processed);
            let base = start + processed;
            let results = self.parallelizer().map(window, |j| {
                prefetch(&nodes[(base + j + PREFETCH_AHEAD) % n]);
                self.filter_with_nominated(filters, state, pod, &nodes[(base + j) % n])
            });
            for (j, (status, plugin)) in results.into_iter().enumerate() {
                if feasible.len() >= wanted {
                    break;
                }
                processed += 1;
                let node = &nodes[(base + j) % n];
                if status.is_success() {
                    feasible.push(node.clone());
                } else {
                    statuses.insert(node.name().to_string(), (status, plugin));
                }
            }
        }
        (feasible, statuses, processed)
    }

    pub fn run_pre_score(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        nodes: &[Arc<NodeInfo>],
    ) -> Status {
        for p in &self.pre_score {
            if let Some(ps) = p.as_pre_score() {
                match ps.pre_score(state, pod, nodes) {
                    Status::Skip => {
                        state.skip_score.insert(p.name());
                    }
                    Status::Success => {}
                    other => return other,
                }
            }
        }
        Status::Success
    }

    /// Weighted, normalized total per node (upstream `RunScorePlugins` summed as in
    /// `prioritizeNodes`). Every plugin scores a node in one pass over the nodes (one parallel
    /// hand-off per cycle, not one per plugin), then each plugin's scores are normalized.
    pub fn run_score(&self, state: &CycleState, pod: &Pod, nodes: &[Arc<NodeInfo>]) -> Vec<i64> {
        let plugins: Vec<(&dyn ScorePlugin, i64)> = self
            .score
            .iter()
            .filter(|(p, _)| !state.skip_score.contains(p.name()))
            .filter_map(|(p, w)| p.as_score().map(|s| (s, *w)))
            .collect();
        let mut totals = vec![0i64; nodes.len()];
        if plugins.is_empty() {
            return totals;
        }
        // Node-major: every plugin's raw score of one node, computed together.
        const INLINE: usize = 8;
        let rows: Vec<([i64; INLINE], Vec<i64>)> = self.parallelizer().map(nodes.len(), |i| {
            if let Some(ahead) = nodes.get(i + PREFETCH_AHEAD) {
                prefetch(ahead);
            }
            let node = &nodes[i];
            let mut row = [0i64; INLINE];
            let mut spill = Vec::new();
            for (j, (p, _)) in plugins.iter().enumerate() {
                let v = p.score(state, pod, node);
                match row.get_mut(j) {
                    Some(slot) => *slot = v,
                    None => spill.push(v),
                }
            }
            (row, spill)
        });
        let mut scores = vec![0i64; nodes.len()];
        for (j, (p, weight)) in plugins.iter().enumerate() {
            for (s, (row, spill)) in scores.iter_mut().zip(&rows) {
                *s = if j < INLINE {
                    row[j]
                } else {
                    spill[j - INLINE]
                };
            }
            p.normalize(state, pod, &mut scores);
            for (t, s) in totals.iter_mut().zip(&scores) {
                *t += s * weight;
            }
        }
        totals
    }

    pub fn has_post_filter(&self) -> bool {
        !self.post_filter.is_empty()
    }

    /// Runs PostFilter plugins until one succeeds (upstream: the first success wins); the
    /// messages of the unschedulable ones are joined.
    pub fn run_post_filter(
        &self,
        state: &CycleState,
        pod: &Pod,
        statuses: &NodeToStatus,
    ) -> (PostFilterResult, Status) {
        let mut reasons = Vec::new();
        let mut last = PostFilterResult::default();
        for p in &self.post_filter {
            let Some(pf) = p.as_post_filter() else {
                continue;
            };
            let (r, s) = pf.post_filter(state, pod, statuses, self);
            match s {
                Status::Success => return (r, s),
                Status::Unschedulable(m) | Status::UnschedulableAndUnresolvable(m) => {
                    reasons.push(m);
                    last = r;
                }
                other => return (r, other),
            }
        }
        (last, Status::Unschedulable(reasons.join(", ")))
    }

    pub fn run_reserve(&self, state: &mut CycleState, pod: &Pod, node: &str) -> Status {
        for p in &self.reserve {
            if let Some(r) = p.as_reserve() {
                let s = r.reserve(state, pod, node);
                if !s.is_success() {
                    return s;
                }
            }
        }
        Status::Success
    }

    /// Unreserve runs in reverse order, for every Reserve plugin.
    pub fn run_unreserve(&self, state: &mut CycleState, pod: &Pod, node: &str) {
        for p in self.reserve.iter().rev() {
            if let Some(r) = p.as_reserve() {
                r.unreserve(state, pod, node);
            }
        }
    }

    /// Runs Permit; a plugin that says Wait registers the pod as waiting (see [`Framework::allow`]).
    pub fn run_permit(&self, state: &CycleState, pod: &Pod, node: &str) -> (Status, Duration) {
        let mut pending = HashSet::new();
        let mut timeout = Duration::MAX;
        for p in &self.permit {
            let Some(pp) = p.as_permit() else { continue };
            match pp.permit(state, pod, node) {
                (Status::Success, _) => {}
                (Status::Wait, t) => {
                    pending.insert(p.name());
                    timeout = timeout.min(t);
                }
                (s, _) => return (s, Duration::ZERO),
            }
        }
        if pending.is_empty() {
            return (Status::Success, Duration::ZERO);
        }
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        self.lock_waiting().insert(
            uid,
            WaitingPod {
                pending,
                done: None,
            },
        );
        (Status::Wait, timeout)
    }

    fn lock_waiting(&self) -> std::sync::MutexGuard<'_, HashMap<String, WaitingPod>> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until every waiting Permit plugin allowed the pod, one rejected it, or the timeout.
    pub async fn wait_on_permit(&self, pod: &Pod, timeout: Duration) -> Status {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let rx = {
            let mut w = self.lock_waiting();
            let Some(wp) = w.get_mut(&uid) else {
                return Status::Success;
            };
            if wp.pending.is_empty() {
                w.remove(&uid);
                return Status::Success;
            }
            let (tx, rx) = oneshot::channel();
            wp.done = Some(tx);
            rx
        };
        let r = tokio::time::timeout(timeout, rx).await;
        self.lock_waiting().remove(&uid);
        match r {
            Ok(Ok(s)) => s,
            Ok(Err(_)) => Status::Error("waiting pod dropped".into()),
            Err(_) => Status::Unschedulable(format!(
                "rejected due to timeout after waiting {timeout:?} at plugin Permit"
            )),
        }
    }

    /// A Permit plugin allows a waiting pod (upstream `WaitingPod.Allow`).
    pub fn allow(&self, uid: &str, plugin: &'static str) {
        let mut w = self.lock_waiting();
        if let Some(wp) = w.get_mut(uid) {
            wp.pending.remove(plugin);
            if wp.pending.is_empty() {
                if let Some(tx) = wp.done.take() {
                    let _ = tx.send(Status::Success);
                }
            }
        }
    }

    /// A Permit plugin rejects a waiting pod.
    pub fn reject(&self, uid: &str, plugin: &'static str, msg: &str) {
        if let Some(mut wp) = self.lock_waiting().remove(uid) {
            if let Some(tx) = wp.done.take() {
                let _ = tx.send(Status::Unschedulable(format!("{msg} (by {plugin})")));
            }
        }
    }

    /// Pods waiting at Permit (their uids).
    pub fn waiting_pods(&self) -> Vec<String> {
        self.lock_waiting().keys().cloned().collect()
    }

    pub async fn run_pre_bind(&self, state: &CycleState, pod: &Pod, node: &str) -> Status {
        for p in &self.pre_bind {
            if let Some(pb) = p.as_pre_bind() {
                let s = pb.pre_bind(state, pod, node).await;
                if !s.is_success() {
                    return s;
                }
            }
        }
        Status::Success
    }

    pub async fn run_bind(&self, state: &CycleState, pod: &Pod, node: &str) -> Status {
        for p in &self.bind {
            if let Some(b) = p.as_bind() {
                match b.bind(state, pod, node).await {
                    Status::Skip => continue,
                    s => return s,
                }
            }
        }
        Status::Error("no bind plugin bound the pod".into())
    }

    pub async fn run_post_bind(&self, state: &CycleState, pod: &Pod, node: &str) {
        for p in &self.post_bind {
            if let Some(pb) = p.as_post_bind() {
                pb.post_bind(state, pod, node).await;
            }
        }
    }
}

/// How many nodes ahead of the one being filtered its successor's info is prefetched.
const PREFETCH_AHEAD: usize = 4;

/// Asks the CPU to load the start of a node's info ahead of use: with thousands of nodes the
/// infos are not in cache, and filtering them in order otherwise waits on each in turn.
#[inline(always)]
fn prefetch(node: &Arc<NodeInfo>) {
    #[cfg(target_arch = "x86_64")]
    {
        let p = Arc::as_ptr(node) as *const i8;
        // SAFETY: prefetching is a hint and never faults, whatever the address.
        unsafe {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            _mm_prefetch::<_MM_HINT_T0>(p);
            _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(64));
            _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(128));
            _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(192));
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = node;
}

/// The first failing filter's status and name.
fn run_filters(
    filters: &[(&'static str, &dyn FilterPlugin)],
    state: &CycleState,
    pod: &Pod,
    node: &NodeInfo,
) -> (Status, &'static str) {
    for (name, f) in filters {
        let s = f.filter(state, pod, node);
        if !s.is_success() {
            return (s, name);
        }
    }
    (Status::Success, "")
}

#[cfg(test)]
#[path = "runtime_tests.rs"]
mod tests;
