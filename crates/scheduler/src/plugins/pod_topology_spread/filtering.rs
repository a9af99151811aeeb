//! PodTopologySpread's PreFilter and Filter (upstream `podtopologyspread/filtering.go`).

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

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
    /// topology key -> value -> matching pods.
    pub counts: HashMap<String, HashMap<String, i64>>,
    pub critical_paths: HashMap<String, CriticalPaths>,
}

impl PreFilterState {
    fn min_match(&self, key: &str, min_domains: i64) -> i64 {
        let domains = self.counts.get(key).map_or(0, HashMap::len) as i64;
        if domains < min_domains {
            return 0;
        }
        self.critical_paths.get(key).map_or(0, CriticalPaths::min)
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
        for c in &self.constraints {
            if !c.includes(pod, node) || !c.selector.matches(other.pod.metadata.labels.as_ref()) {
                continue;
            }
            let Some(value) = labels.and_then(|l| l.get(&c.topology_key)) else {
                continue;
            };
            let n = self
                .counts
                .entry(c.topology_key.clone())
                .or_default()
                .entry(value.clone())
                .or_insert(0);
            *n += delta;
            let n = *n;
            self.critical_paths
                .entry(c.topology_key.clone())
                .or_default()
                .update(value, n);
        }
    }
}

impl PodTopologySpread {
    pub(super) fn pre_filter_state(
        &self,
        state: &CycleState,
        pod: &Pod,
        constraints: Vec<Constraint>,
    ) -> PreFilterState {
        let nodes = &state.snapshot.nodes;
        let ns = pod.metadata.namespace.as_deref().unwrap_or("");
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
        let mut s = PreFilterState {
            constraints: Vec::new(),
            counts: HashMap::new(),
            critical_paths: HashMap::new(),
        };
        for (ci, value, n) in per_node.into_iter().flatten() {
            *s.counts
                .entry(constraints[ci].topology_key.clone())
                .or_default()
                .entry(value.to_string())
                .or_insert(0) += n;
        }
        for (key, values) in &s.counts {
            let paths = s.critical_paths.entry(key.clone()).or_default();
            for (v, n) in values {
                paths.update(v, *n);
            }
        }
        s.constraints = constraints;
        s
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
        for c in &s.constraints {
            let Some(value) = labels.and_then(|l| l.get(&c.topology_key)) else {
                return Status::UnschedulableAndUnresolvable(
                    ERR_REASON_NODE_LABEL_NOT_MATCH.into(),
                );
            };
            let min = s.min_match(&c.topology_key, c.min_domains);
            let self_match = i64::from(c.selector.matches(pod_labels));
            let matching = s
                .counts
                .get(&c.topology_key)
                .and_then(|m| m.get(value))
                .copied()
                .unwrap_or(0);
            if matching + self_match - min > c.max_skew {
                return Status::Unschedulable(ERR_REASON_CONSTRAINTS_NOT_MATCH.into());
            }
        }
        Status::Success
    }
}
