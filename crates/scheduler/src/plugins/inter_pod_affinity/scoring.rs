//! InterPodAffinity's PreScore, Score and NormalizeScore (upstream `interpodaffinity/scoring.go`).

use rustc_hash::FxHashMap as HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use super::{topology_value, InterPodAffinity};
use crate::framework::selector::Labels;
use crate::framework::{
    AffinityTerm, CycleState, NodeInfo, PodInfo, PreScorePlugin, ScorePlugin, Status,
    WeightedAffinityTerm, MAX_NODE_SCORE,
};

const STATE_KEY: &str = "PreScoreInterPodAffinity";

/// topology key -> value -> score.
type ScoreMap = HashMap<String, HashMap<String, i64>>;

#[derive(Clone, Debug, Default)]
struct PreScoreState {
    topology_score: ScoreMap,
}

fn process_term(
    m: &mut ScoreMap,
    term: &AffinityTerm,
    weight: i64,
    pod: &Pod,
    ns_labels: Option<&Labels>,
    node: &NodeInfo,
    sign: i64,
) {
    if term.matches(pod, ns_labels) {
        if let Some(v) = topology_value(node, &term.topology_key) {
            *m.entry(term.topology_key.clone())
                .or_default()
                .entry(v.clone())
                .or_insert(0) += weight * sign;
        }
    }
}

fn process_terms(
    m: &mut ScoreMap,
    terms: &[WeightedAffinityTerm],
    pod: &Pod,
    ns_labels: Option<&Labels>,
    node: &NodeInfo,
    sign: i64,
) {
    for t in terms {
        process_term(m, &t.term, i64::from(t.weight), pod, ns_labels, node, sign);
    }
}

impl InterPodAffinity {
    fn process_existing_pod(
        &self,
        incoming: &PodInfo,
        ns_labels: Option<&Labels>,
        existing: &PodInfo,
        node: &NodeInfo,
        m: &mut ScoreMap,
    ) {
        if node.labels().is_none_or(|l| l.is_empty()) {
            return;
        }
        process_terms(
            m,
            &incoming.preferred_affinity_terms,
            &existing.pod,
            None,
            node,
            1,
        );
        process_terms(
            m,
            &incoming.preferred_anti_affinity_terms,
            &existing.pod,
            None,
            node,
            -1,
        );
        if self.args.hard_pod_affinity_weight > 0 {
            for t in &existing.required_affinity_terms {
                process_term(
                    m,
                    t,
                    self.args.hard_pod_affinity_weight,
                    &incoming.pod,
                    ns_labels,
                    node,
                    1,
                );
            }
        }
        process_terms(
            m,
            &existing.preferred_affinity_terms,
            &incoming.pod,
            ns_labels,
            node,
            1,
        );
        process_terms(
            m,
            &existing.preferred_anti_affinity_terms,
            &incoming.pod,
            ns_labels,
            node,
            -1,
        );
    }
}

impl PreScorePlugin for InterPodAffinity {
    fn pre_score(&self, state: &mut CycleState, pod: &Pod, nodes: &[Arc<NodeInfo>]) -> Status {
        if nodes.is_empty() {
            return Status::Skip;
        }
        // Fast path: no preferred terms of its own and no existing pod with any affinity.
        let affinity = pod.spec.as_ref().and_then(|s| s.affinity.as_ref());
        let has_preferred = affinity.is_some_and(|a| {
            a.pod_affinity.as_ref().is_some_and(|p| {
                p.preferred_during_scheduling_ignored_during_execution
                    .as_ref()
                    .is_some_and(|t| !t.is_empty())
            }) || a.pod_anti_affinity.as_ref().is_some_and(|p| {
                p.preferred_during_scheduling_ignored_during_execution
                    .as_ref()
                    .is_some_and(|t| !t.is_empty())
            })
        });
        if !has_preferred && state.snapshot.have_pods_with_affinity.is_empty() {
            return Status::Skip;
        }
        let mut pi = PodInfo::new(Arc::new(pod.clone()));
        if let Some(e) = &pi.parse_error {
            return Status::Error(format!("parsing pod: {e}"));
        }
        let has_constraints =
            !pi.preferred_affinity_terms.is_empty() || !pi.preferred_anti_affinity_terms.is_empty();
        if self.args.ignore_preferred_terms_of_existing_pods && !has_constraints {
            return Status::Skip;
        }
        for t in pi.preferred_affinity_terms.iter_mut() {
            self.merge_namespaces(&mut t.term);
        }
        for t in pi.preferred_anti_affinity_terms.iter_mut() {
            self.merge_namespaces(&mut t.term);
        }
        let ns_labels = self.namespace_labels(pod);
        let snapshot = state.snapshot.clone();
        // Without preferred terms of its own, only nodes with pods with affinity matter.
        let all: Vec<&Arc<NodeInfo>> = if has_constraints {
            snapshot.nodes.iter().collect()
        } else {
            snapshot.nodes_with_affinity().collect()
        };
        let pi = &pi;
        let ns = ns_labels.as_ref();
        let per_node = self.handle.parallelizer.map(all.len(), |i| {
            let node = all[i];
            let pods = if has_constraints {
                &node.pods
            } else {
                &node.pods_with_affinity
            };
            let mut m = ScoreMap::default();
            for existing in pods {
                self.process_existing_pod(pi, ns, existing, node, &mut m);
            }
            m
        });
        let mut total = ScoreMap::default();
        for m in per_node {
            for (k, values) in m {
                let dst = total.entry(k).or_default();
                for (v, s) in values {
                    *dst.entry(v).or_insert(0) += s;
                }
            }
        }
        if total.is_empty() {
            return Status::Skip;
        }
        state.write(
            STATE_KEY,
            PreScoreState {
                topology_score: total,
            },
        );
        Status::Success
    }
}

impl ScorePlugin for InterPodAffinity {
    fn score(&self, state: &CycleState, _pod: &Pod, node: &NodeInfo) -> i64 {
        let Some(s) = state.read::<PreScoreState>(STATE_KEY) else {
            return 0;
        };
        s.topology_score
            .iter()
            .filter_map(|(k, values)| topology_value(node, k).and_then(|v| values.get(v)))
            .sum()
    }

    fn normalize(&self, state: &CycleState, _pod: &Pod, scores: &mut [i64]) {
        if state.read::<PreScoreState>(STATE_KEY).is_none() {
            return;
        }
        let min = scores.iter().copied().min().unwrap_or(0);
        let max = scores.iter().copied().max().unwrap_or(0);
        let diff = max - min;
        for s in scores.iter_mut() {
            *s = if diff > 0 {
                (MAX_NODE_SCORE as f64 * ((*s - min) as f64 / diff as f64)) as i64
            } else {
                0
            };
        }
    }
}
