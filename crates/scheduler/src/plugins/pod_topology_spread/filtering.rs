//! PodTopologySpread's PreFilter and Filter (upstream `podtopologyspread/filtering.go`).

use rustc_hash::FxHashMap as HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use super::counts::includes_every_node;
use super::{
    count_matching, node_has_all_keys, Constraint, PodTopologySpread,
    ERR_REASON_CONSTRAINTS_NOT_MATCH, ERR_REASON_NODE_LABEL_NOT_MATCH,
};
use crate::framework::{
    CycleState, FilterPlugin, NodeInfo, PodInfo, PreFilterPlugin, PreFilterResult, Status,
};

pub(super) const STATE_KEY: &str = "PreFilterPodTopologySpread";

/// The two domains with the fewest matching pods per topology key (upstream `criticalPaths`).
#[derive(Clone, Debug)]
pub(super) struct CriticalPaths([(String, i64); 2]);

impl Default for CriticalPaths {
    fn default() -> Self {
        CriticalPaths([(String::new(), i64::MAX), (String::new(), i64::MAX)])
    }
}

impl CriticalPaths {
    pub(super) fn update(&mut self, value: &str, num: i64) {
        let p = &mut self.0;
        let i = if p[0].0 == value {
            Some(0)
        } else if p[1].0 == value {
            Some(1)
        } else {
            None
        };
        match i {
            Some(i) => {
                p[i].1 = num;
                if p[0].1 > p[1].1 {
                    p.swap(0, 1);
                }
            }
            None if num < p[0].1 => {
                p[1] = p[0].clone();
                p[0] = (value.to_string(), num);
            }
            None if num < p[1].1 => p[1] = (value.to_string(), num),
            None => {}
        }
    }

    pub(super) fn min(&self) -> i64 {
        self.0[0].1
    }
}

#[derive(Clone, Debug, Default)]
pub(super) struct PreFilterState {
    pub constraints: Vec<Constraint>,
    /// Per constraint: topology value -> matching pods (upstream `TpValueToMatchNum`), every
    /// domain of a counting node present.
    pub counts: Vec<HashMap<String, i64>>,
    pub critical_paths: Vec<CriticalPaths>,
}

impl PreFilterState {
    fn new(constraints: Vec<Constraint>, counts: Vec<HashMap<String, i64>>) -> PreFilterState {
        let critical_paths = counts
            .iter()
            .map(|values| {
                let mut paths = CriticalPaths::default();
                for (v, n) in values {
                    paths.update(v, *n);
                }
                paths
            })
            .collect();
        PreFilterState {
            constraints,
            counts,
            critical_paths,
        }
    }

    fn min_match(&self, c: usize, min_domains: i64) -> i64 {
        if (self.counts[c].len() as i64) < min_domains {
            return 0;
        }
        self.critical_paths[c].min()
    }

    /// Upstream `updateWithPod`: `other` added (delta 1) or removed (-1) on `node`.
    fn update_with_pod(&mut self, other: &PodInfo, pod: &Pod, node: &NodeInfo, delta: i64) {
        if other.namespace() != pod.metadata.namespace.as_deref().unwrap_or("") {
            return;
        }
        if !node_has_all_keys(node, &self.constraints) {
            return;
        }
        let labels = node.labels();
        for (i, c) in self.constraints.iter().enumerate() {
            if !c.includes(pod, node) || !c.selector.matches(other.pod.metadata.labels.as_ref()) {
                continue;
            }
            let Some(value) = labels.and_then(|l| l.get(&c.topology_key)) else {
                continue;
            };
            let n = self.counts[i].entry(value.clone()).or_insert(0);
            *n += delta;
            let n = *n;
            self.critical_paths[i].update(value, n);
        }
    }
}

impl PodTopologySpread {
    /// Upstream `calPreFilterState`, from the kept counts when every node counts for the pod.
    pub(super) fn pre_filter_state(
        &self,
        state: &CycleState,
        pod: &Pod,
        constraints: Vec<Constraint>,
    ) -> PreFilterState {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("");
        if includes_every_node(pod, &constraints) {
            let counts = self.filter_counts.with(
                &state.snapshot,
                ns,
                &constraints,
                true,
                &self.handle.parallelizer,
                |kept| {
                    (0..constraints.len())
                        .map(|c| kept.domains(c).map(|(v, n)| (v.to_string(), n)).collect())
                        .collect()
                },
            );
            return PreFilterState::new(constraints, counts);
        }
        let nodes = &state.snapshot.nodes;
        // Per node: (constraint index, value, count) for the nodes that count.
        let per_node = self.handle.parallelizer.map(nodes.len(), |i| {
            let node = &nodes[i];
            if !node_has_all_keys(node, &constraints) {
                return Vec::new();
            }
            let labels = node.labels();
            constraints
                .iter()
                .enumerate()
                .filter(|(_, c)| c.includes(pod, node))
                .filter_map(|(ci, c)| {
                    let value = labels?.get(&c.topology_key)?;
                    Some((ci, value.as_str(), count_matching(node, &c.selector, ns)))
                })
                .collect::<Vec<_>>()
        });
        let mut counts: Vec<HashMap<String, i64>> = vec![HashMap::default(); constraints.len()];
        for (ci, value, n) in per_node.into_iter().flatten() {
            *counts[ci].entry(value.to_string()).or_insert(0) += n;
        }
        PreFilterState::new(constraints, counts)
    }
}

impl PreFilterPlugin for PodTopologySpread {
    fn pre_filter(&self, state: &mut CycleState, pod: &Pod) -> (Option<PreFilterResult>, Status) {
        let constraints = match self.constraints(pod, "DoNotSchedule") {
            Ok(c) => c,
            Err(e) => return (None, Status::Error(format!("parsing constraints: {e}"))),
        };
        if constraints.is_empty() {
            return (None, Status::Skip);
        }
        let s = self.pre_filter_state(state, pod, constraints);
        state.write(STATE_KEY, s);
        (None, Status::Success)
    }

    fn add_pod(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        to_add: &Arc<PodInfo>,
        node: &NodeInfo,
    ) -> Status {
        if let Some(s) = state.read_mut::<PreFilterState>(STATE_KEY) {
            s.update_with_pod(to_add, pod, node, 1);
        }
        Status::Success
    }

    fn remove_pod(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        to_remove: &Arc<PodInfo>,
        node: &NodeInfo,
    ) -> Status {
        if let Some(s) = state.read_mut::<PreFilterState>(STATE_KEY) {
            s.update_with_pod(to_remove, pod, node, -1);
        }
        Status::Success
    }
}

impl FilterPlugin for PodTopologySpread {
    fn filter(&self, state: &CycleState, pod: &Pod, node: &NodeInfo) -> Status {
        let Some(s) = state.read::<PreFilterState>(STATE_KEY) else {
            return Status::Error("PodTopologySpread: no PreFilter state".into());
        };
        let pod_labels = pod.metadata.labels.as_ref();
        let labels = node.labels();
        for (i, c) in s.constraints.iter().enumerate() {
            let Some(value) = labels.and_then(|l| l.get(&c.topology_key)) else {
                return Status::UnschedulableAndUnresolvable(
                    ERR_REASON_NODE_LABEL_NOT_MATCH.into(),
                );
            };
            let min = s.min_match(i, c.min_domains);
            let self_match = i64::from(c.selector.matches(pod_labels));
            let matching = s.counts[i].get(value).copied().unwrap_or(0);
            if matching + self_match - min > c.max_skew {
                return Status::Unschedulable(ERR_REASON_CONSTRAINTS_NOT_MATCH.into());
            }
        }
        Status::Success
    }
}
