//! PodTopologySpread's PreScore, Score and NormalizeScore (upstream `podtopologyspread/scoring.go`).

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use super::counts::includes_every_node;
use super::{count_matching, node_has_all_keys, Constraint, PodTopologySpread, LABEL_HOSTNAME};
use crate::framework::{CycleState, NodeInfo, PreScorePlugin, ScorePlugin, Status, MAX_NODE_SCORE};

const STATE_KEY: &str = "PreScorePodTopologySpread";

#[derive(Clone, Debug, Default)]
struct PreScoreState {
    constraints: Vec<Constraint>,
    /// Feasible nodes lacking a topology key: scored 0.
    ignored: HashSet<String>,
    /// The same by position in the scored node list (for NormalizeScore).
    ignored_at: Vec<bool>,
    /// Per constraint: topology value of a feasible node -> matching pods (not for hostname:
    /// counted per node in Score).
    counts: Vec<HashMap<String, i64>>,
    weights: Vec<f64>,
}

impl PreScorePlugin for PodTopologySpread {
    fn pre_score(&self, state: &mut CycleState, pod: &Pod, filtered: &[Arc<NodeInfo>]) -> Status {
        let snapshot = state.snapshot.clone();
        let all = &snapshot.nodes;
        if filtered.is_empty() || all.is_empty() {
            return Status::Skip;
        }
        let own = pod
            .spec
            .as_ref()
            .and_then(|s| s.topology_spread_constraints.as_ref())
            .is_some_and(|c| !c.is_empty());
        let require_all = own || !self.system_defaulted;
        let constraints = match self.constraints(pod, "ScheduleAnyway") {
            Ok(c) => c,
            Err(e) => return Status::Error(format!("parsing constraints: {e}")),
        };
        if constraints.is_empty() {
            return Status::Skip;
        }
        let mut s = PreScoreState {
            counts: vec![HashMap::default(); constraints.len()],
            ..Default::default()
        };
        let mut topo_size = vec![0usize; constraints.len()];
        for n in filtered {
            let ignored = require_all && !node_has_all_keys(n, &constraints);
            s.ignored_at.push(ignored);
            if ignored {
                s.ignored.insert(n.name().to_string());
                continue;
            }
            for (i, c) in constraints.iter().enumerate() {
                if c.topology_key == LABEL_HOSTNAME {
                    continue;
                }
                let value = n
                    .labels()
                    .and_then(|l| l.get(&c.topology_key))
                    .cloned()
                    .unwrap_or_default();
                if let std::collections::hash_map::Entry::Vacant(e) = s.counts[i].entry(value) {
                    e.insert(0);
                    topo_size[i] += 1;
                }
            }
        }
        s.weights = constraints
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let size = if c.topology_key == LABEL_HOSTNAME {
                    filtered.len() - s.ignored.len()
                } else {
                    topo_size[i]
                };
                ((size + 2) as f64).ln()
            })
            .collect();
        let ns = pod.metadata.namespace.as_deref().unwrap_or("");
        if includes_every_node(pod, &constraints) {
            let counts = &mut s.counts;
            self.score_counts.with(
                &snapshot,
                ns,
                &constraints,
                require_all,
                &self.handle.parallelizer,
                |kept| {
                    for (i, values) in counts.iter_mut().enumerate() {
                        for (value, n) in values.iter_mut() {
                            *n = kept.count(i, value).unwrap_or(0);
                        }
                    }
                },
            );
        } else {
            self.count_from_scratch(pod, all, &constraints, require_all, &mut s.counts);
        }
        s.constraints = constraints;
        state.write(STATE_KEY, s);
        Status::Success
    }
}

impl PodTopologySpread {
    /// Upstream's PreScore counting over every node, into the domains of the feasible nodes.
    fn count_from_scratch(
        &self,
        pod: &Pod,
        all: &[Arc<NodeInfo>],
        constraints: &[Constraint],
        require_all: bool,
        counts: &mut [HashMap<String, i64>],
    ) {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("");
        let known: &[HashMap<String, i64>] = counts;
        let per_node = self.handle.parallelizer.map(all.len(), |i| {
            let node = &all[i];
            if require_all && !node_has_all_keys(node, constraints) {
                return Vec::new();
            }
            let labels = node.labels();
            let mut out = Vec::new();
            for (ci, c) in constraints.iter().enumerate() {
                if c.topology_key == LABEL_HOSTNAME || !c.includes(pod, node) {
                    continue;
                }
                let value = labels
                    .and_then(|l| l.get(&c.topology_key))
                    .map(String::as_str)
                    .unwrap_or("");
                // Only domains of feasible nodes matter.
                if known[ci].contains_key(value) {
                    out.push((ci, value, count_matching(node, &c.selector, ns)));
                }
            }
            out
        });
        let sums: Vec<(usize, String, i64)> = per_node
            .into_iter()
            .flatten()
            .map(|(ci, v, n)| (ci, v.to_string(), n))
            .collect();
        for (ci, v, n) in sums {
            if let Some(e) = counts[ci].get_mut(&v) {
                *e += n;
            }
        }
    }
}

impl ScorePlugin for PodTopologySpread {
    fn score(&self, state: &CycleState, pod: &Pod, node: &NodeInfo) -> i64 {
        let Some(s) = state.read::<PreScoreState>(STATE_KEY) else {
            return 0;
        };
        if s.ignored.contains(node.name()) {
            return 0;
        }
        let ns = pod.metadata.namespace.as_deref().unwrap_or("");
        let labels = node.labels();
        let mut score = 0.0;
        for (i, c) in s.constraints.iter().enumerate() {
            let Some(value) = labels.and_then(|l| l.get(&c.topology_key)) else {
                continue;
            };
            let cnt = if c.topology_key == LABEL_HOSTNAME {
                count_matching(node, &c.selector, ns)
            } else {
                s.counts[i].get(value).copied().unwrap_or(0)
            };
            score += cnt as f64 * s.weights[i] + (c.max_skew - 1) as f64;
        }
        score.round() as i64
    }

    /// Fewer matching pods is better: `100 * (max + min - score) / max`; ignored nodes get 0.
    fn normalize(&self, state: &CycleState, _pod: &Pod, scores: &mut [i64]) {
        let Some(s) = state.read::<PreScoreState>(STATE_KEY) else {
            return;
        };
        let ignored = |i: usize| s.ignored_at.get(i).copied().unwrap_or(false);
        let (mut min, mut max) = (i64::MAX, 0i64);
        for (i, &sc) in scores.iter().enumerate() {
            if !ignored(i) {
                min = min.min(sc);
                max = max.max(sc);
            }
        }
        for (i, sc) in scores.iter_mut().enumerate() {
            *sc = if ignored(i) {
                0
            } else if max == 0 {
                MAX_NODE_SCORE
            } else {
                MAX_NODE_SCORE * (max + min - *sc) / max
            };
        }
    }
}
