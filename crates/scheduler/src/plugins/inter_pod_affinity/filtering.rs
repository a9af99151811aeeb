//! InterPodAffinity's PreFilter and Filter (upstream `interpodaffinity/filtering.go`).

use rustc_hash::FxHashMap as HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use super::{
    matches_all, topology_value, InterPodAffinity, ERR_REASON_AFFINITY, ERR_REASON_ANTI_AFFINITY,
    ERR_REASON_EXISTING_ANTI_AFFINITY,
};
use crate::framework::selector::Labels;
use crate::framework::{
    AffinityTerm, CycleState, FilterPlugin, NodeInfo, PodInfo, PreFilterPlugin, PreFilterResult,
    Status,
};

pub(super) const STATE_KEY: &str = "PreFilterInterPodAffinity";

/// topology key -> value -> count (upstream `topologyToMatchedTermCount`).
#[derive(Clone, Debug, Default)]
pub(super) struct Counts(HashMap<String, HashMap<String, i64>>);

impl Counts {
    fn update(&mut self, node: &NodeInfo, key: &str, delta: i64) {
        if let Some(v) = topology_value(node, key) {
            self.add(key, v, delta);
        }
    }

    fn add(&mut self, key: &str, value: &str, delta: i64) {
        let m = match self.0.get_mut(key) {
            Some(m) => m,
            None => self.0.entry(key.to_string()).or_default(),
        };
        let e = match m.get_mut(value) {
            Some(e) => e,
            None => m.entry(value.to_string()).or_insert(0),
        };
        *e += delta;
        if *e == 0 {
            m.remove(value);
            if m.is_empty() {
                self.0.remove(key);
            }
        }
    }

    fn get(&self, key: &str, value: &str) -> i64 {
        self.0
            .get(key)
            .and_then(|m| m.get(value))
            .copied()
            .unwrap_or(0)
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Upstream `updateWithAffinityTerms`: every term counts when the pod matches all of them.
    fn with_affinity_terms(&mut self, terms: &[AffinityTerm], pod: &Pod, node: &NodeInfo, d: i64) {
        if matches_all(terms, pod) {
            for t in terms {
                self.update(node, &t.topology_key, d);
            }
        }
    }

    /// Upstream `updateWithAntiAffinityTerms`: each matching term counts.
    fn with_anti_affinity_terms(
        &mut self,
        terms: &[AffinityTerm],
        pod: &Pod,
        ns_labels: Option<&Labels>,
        node: &NodeInfo,
        d: i64,
    ) {
        for t in terms {
            if t.matches(pod, ns_labels) {
                self.update(node, &t.topology_key, d);
            }
        }
    }
}

#[derive(Clone, Debug)]
pub(super) struct PreFilterState {
    /// Existing pods whose required anti-affinity matches the incoming pod.
    existing_anti_affinity: Counts,
    /// Existing pods matching the incoming pod's required affinity terms.
    affinity: Counts,
    /// Existing pods matching the incoming pod's required anti-affinity terms.
    anti_affinity: Counts,
    pod_info: Arc<PodInfo>,
    namespace_labels: Option<Labels>,
}

impl PreFilterState {
    fn update_with_pod(&mut self, other: &PodInfo, node: &NodeInfo, d: i64) {
        let pod = self.pod_info.pod.clone();
        self.existing_anti_affinity.with_anti_affinity_terms(
            &other.required_anti_affinity_terms,
            &pod,
            self.namespace_labels.as_ref(),
            node,
            d,
        );
        self.affinity.with_affinity_terms(
            &self.pod_info.required_affinity_terms,
            &other.pod,
            node,
            d,
        );
        self.anti_affinity.with_anti_affinity_terms(
            &self.pod_info.required_anti_affinity_terms,
            &other.pod,
            None,
            node,
            d,
        );
    }
}

impl PreFilterPlugin for InterPodAffinity {
    fn pre_filter(&self, state: &mut CycleState, pod: &Pod) -> (Option<PreFilterResult>, Status) {
        // Fast path: no required terms of its own and no existing pod with required anti-affinity.
        let affinity = pod.spec.as_ref().and_then(|s| s.affinity.as_ref());
        let has_required = affinity.is_some_and(|a| {
            a.pod_affinity.as_ref().is_some_and(|p| {
                p.required_during_scheduling_ignored_during_execution
                    .as_ref()
                    .is_some_and(|t| !t.is_empty())
            }) || a.pod_anti_affinity.as_ref().is_some_and(|p| {
                p.required_during_scheduling_ignored_during_execution
                    .as_ref()
                    .is_some_and(|t| !t.is_empty())
            })
        });
        if !has_required
            && state
                .snapshot
                .have_pods_with_required_anti_affinity
                .is_empty()
        {
            return (None, Status::Skip);
        }
        let mut pi = PodInfo::new(Arc::new(pod.clone()));
        if let Some(e) = &pi.parse_error {
            return (None, Status::Error(format!("parsing pod: {e}")));
        }
        for t in pi.required_affinity_terms.iter_mut() {
            self.merge_namespaces(t);
        }
        for t in pi.required_anti_affinity_terms.iter_mut() {
            self.merge_namespaces(t);
        }
        let ns_labels = self.namespace_labels(pod);
        let snapshot = state.snapshot.clone();
        let mut existing = Counts::default();
        for node in snapshot.nodes_with_required_anti_affinity() {
            for other in &node.pods_with_required_anti_affinity {
                existing.with_anti_affinity_terms(
                    &other.required_anti_affinity_terms,
                    pod,
                    ns_labels.as_ref(),
                    node,
                    1,
                );
            }
        }
        let (mut affinity, mut anti) = (Counts::default(), Counts::default());
        if !pi.required_affinity_terms.is_empty() || !pi.required_anti_affinity_terms.is_empty() {
            let nodes = &snapshot.nodes;
            let pi = &pi;
            // Per node, only what matched: (affinity?, topology key, value). Most nodes have no
            // matching pod, and then cost no allocation.
            let per_node = self.handle.parallelizer.map(nodes.len(), |i| {
                let node = &nodes[i];
                let mut hits: Vec<(bool, &str, &str)> = Vec::new();
                for other in &node.pods {
                    if matches_all(&pi.required_affinity_terms, &other.pod) {
                        for t in &pi.required_affinity_terms {
                            if let Some(v) = topology_value(node, &t.topology_key) {
                                hits.push((true, &t.topology_key, v));
                            }
                        }
                    }
                    for t in &pi.required_anti_affinity_terms {
                        if t.matches(&other.pod, None) {
                            if let Some(v) = topology_value(node, &t.topology_key) {
                                hits.push((false, &t.topology_key, v));
                            }
                        }
                    }
                }
                hits
            });
            for (is_affinity, key, value) in per_node.into_iter().flatten() {
                let counts = if is_affinity {
                    &mut affinity
                } else {
                    &mut anti
                };
                counts.add(key, value, 1);
            }
        }
        if existing.is_empty()
            && pi.required_affinity_terms.is_empty()
            && pi.required_anti_affinity_terms.is_empty()
        {
            return (None, Status::Skip);
        }
        state.write(
            STATE_KEY,
            PreFilterState {
                existing_anti_affinity: existing,
                affinity,
                anti_affinity: anti,
                pod_info: Arc::new(pi),
                namespace_labels: ns_labels,
            },
        );
        (None, Status::Success)
    }

    fn add_pod(
        &self,
        state: &mut CycleState,
        _pod: &Pod,
        to_add: &Arc<PodInfo>,
        node: &NodeInfo,
    ) -> Status {
        if let Some(s) = state.read_mut::<PreFilterState>(STATE_KEY) {
            s.update_with_pod(to_add, node, 1);
        }
        Status::Success
    }

    fn remove_pod(
        &self,
        state: &mut CycleState,
        _pod: &Pod,
        to_remove: &Arc<PodInfo>,
        node: &NodeInfo,
    ) -> Status {
        if let Some(s) = state.read_mut::<PreFilterState>(STATE_KEY) {
            s.update_with_pod(to_remove, node, -1);
        }
        Status::Success
    }
}

fn satisfies_affinity(s: &PreFilterState, node: &NodeInfo) -> bool {
    let mut pods_exist = true;
    for t in &s.pod_info.required_affinity_terms {
        match topology_value(node, &t.topology_key) {
            Some(v) => {
                if s.affinity.get(&t.topology_key, v) <= 0 {
                    pods_exist = false;
                }
            }
            // Every topology key must exist on the node.
            None => return false,
        }
    }
    if !pods_exist {
        // The first pod of a group with affinity to itself: allowed when no pod matches at all
        // and the pod matches its own terms.
        return s.affinity.is_empty()
            && matches_all(&s.pod_info.required_affinity_terms, &s.pod_info.pod);
    }
    true
}

fn satisfies_anti_affinity(s: &PreFilterState, node: &NodeInfo) -> bool {
    if s.anti_affinity.is_empty() {
        return true;
    }
    s.pod_info.required_anti_affinity_terms.iter().all(|t| {
        match topology_value(node, &t.topology_key) {
            Some(v) => s.anti_affinity.get(&t.topology_key, v) <= 0,
            None => true,
        }
    })
}

fn satisfies_existing_anti_affinity(s: &PreFilterState, node: &NodeInfo) -> bool {
    if s.existing_anti_affinity.is_empty() {
        return true;
    }
    node.labels()
        .into_iter()
        .flatten()
        .all(|(k, v)| s.existing_anti_affinity.get(k, v) <= 0)
}

impl FilterPlugin for InterPodAffinity {
    fn filter(&self, state: &CycleState, _pod: &Pod, node: &NodeInfo) -> Status {
        let Some(s) = state.read::<PreFilterState>(STATE_KEY) else {
            return Status::Error("InterPodAffinity: no PreFilter state".into());
        };
        if !satisfies_affinity(s, node) {
            return Status::UnschedulableAndUnresolvable(ERR_REASON_AFFINITY.into());
        }
        if !satisfies_anti_affinity(s, node) {
            return Status::Unschedulable(ERR_REASON_ANTI_AFFINITY.into());
        }
        if !satisfies_existing_anti_affinity(s, node) {
            return Status::Unschedulable(ERR_REASON_EXISTING_ANTI_AFFINITY.into());
        }
        Status::Success
    }
}
