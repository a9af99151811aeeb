//! NodeResourcesBalancedAllocation (upstream `noderesources.BalancedAllocation`): favours nodes
//! whose cpu and memory would be equally used, `(1 - std(fractions)) * 100`.

use k8s_openapi::api::core::v1::Pod;

use std::sync::Arc;

use crate::framework::resources::{pod_requests, Resources};
use crate::framework::{
    CycleState, NodeInfo, Plugin, PreScorePlugin, ScorePlugin, Status, MAX_NODE_SCORE,
};

/// Uses the actual requests (not the non-zero defaults). A pod requesting neither cpu nor memory
/// scores 0 everywhere: upstream skips the plugin for it, so that best-effort pods don't pile
/// onto one node.
pub struct NodeResourcesBalancedAllocation;

/// Upstream `balancedResourceScorer` over (requested, allocatable) pairs.
fn balanced_score(dims: &[(i64, i64)]) -> i64 {
    let mut buf = [0f64; 2];
    let mut spill = Vec::new();
    let mut len = 0;
    for &(req, alloc) in dims.iter().filter(|d| d.1 != 0) {
        let f = (req as f64 / alloc as f64).min(1.0);
        match buf.get_mut(len) {
            Some(slot) => *slot = f,
            None => {
                if spill.is_empty() {
                    spill.extend_from_slice(&buf);
                }
                spill.push(f);
            }
        }
        len += 1;
    }
    let fractions: &[f64] = if spill.is_empty() {
        &buf[..len]
    } else {
        &spill
    };
    let std = match fractions.len() {
        0 | 1 => 0.0,
        2 => ((fractions[0] - fractions[1]) / 2.0).abs(),
        n => {
            let mean = fractions.iter().sum::<f64>() / n as f64;
            (fractions
                .iter()
                .map(|f| (f - mean) * (f - mean))
                .sum::<f64>()
                / n as f64)
                .sqrt()
        }
    };
    ((1.0 - std) * MAX_NODE_SCORE as f64) as i64
}

impl ScorePlugin for NodeResourcesBalancedAllocation {
    fn score(&self, state: &CycleState, pod: &Pod, node: &NodeInfo) -> i64 {
        let computed;
        let req = match state.read::<Resources>(STATE_KEY) {
            Some(r) => r,
            None => {
                computed = pod_requests(pod);
                &computed
            }
        };
        if req.milli_cpu == 0 && req.memory == 0 {
            return 0;
        }
        let (used, alloc) = (&node.requested, &node.allocatable);
        balanced_score(&[
            (used.milli_cpu + req.milli_cpu, alloc.milli_cpu),
            (used.memory + req.memory, alloc.memory),
        ])
    }
}

impl Plugin for NodeResourcesBalancedAllocation {
    fn name(&self) -> &'static str {
        "NodeResourcesBalancedAllocation"
    }
    fn as_pre_score(&self) -> Option<&dyn PreScorePlugin> {
        Some(self)
    }
    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
}

const STATE_KEY: &str = "PreScoreNodeResourcesBalancedAllocation";

impl PreScorePlugin for NodeResourcesBalancedAllocation {
    /// The pod's requests once per cycle; best-effort pods skip the plugin (upstream).
    fn pre_score(&self, state: &mut CycleState, pod: &Pod, _nodes: &[Arc<NodeInfo>]) -> Status {
        let req = pod_requests(pod);
        if req.milli_cpu == 0 && req.memory == 0 {
            return Status::Skip;
        }
        state.write(STATE_KEY, req);
        Status::Success
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testutil::{node, node_info, pod_with_requests, st};
    use serde_json::{json, Value};

    fn req(cpu: i64, mem: i64) -> Value {
        json!({"cpu": format!("{cpu}m"), "memory": mem.to_string()})
    }

    #[test]
    fn score() {
        let n = |cpu: i64, mem: i64, existing: Vec<Pod>| {
            node_info(
                node(
                    "n",
                    json!({}),
                    json!({}),
                    json!({"cpu": format!("{cpu}m"), "memory": mem.to_string()}),
                ),
                existing,
            )
        };
        let cpu_only = || pod_with_requests("c", &[req(1000, 0), req(2000, 0)]);
        let cpu_and_memory = || pod_with_requests("cm", &[req(1000, 2000), req(2000, 3000)]);
        let no_resources = pod_with_requests("none", &[json!({})]);
        let cases: Vec<(&str, Pod, Vec<NodeInfo>, Vec<i64>)> = vec![
            (
                "nothing requested: skipped",
                no_resources.clone(),
                vec![n(4000, 10000, vec![]), n(4000, 10000, vec![cpu_only()])],
                vec![0, 0],
            ),
            (
                // cpu 3000/4000 = .75, memory 5000/10000 = .5 -> std .125; cpu .5, memory .5
                "nothing scheduled, resources requested, differently sized nodes",
                cpu_and_memory(),
                vec![n(4000, 10000, vec![]), n(6000, 10000, vec![])],
                vec![87, 100],
            ),
            (
                // cpu .6, memory .25 -> std .175; cpu .6, memory .5 -> std .05
                "resources requested, pods scheduled with resources",
                cpu_and_memory(),
                vec![
                    n(10000, 20000, vec![cpu_only()]),
                    n(10000, 20000, vec![cpu_and_memory()]),
                ],
                vec![82, 95],
            ),
            (
                "differently sized nodes",
                cpu_and_memory(),
                vec![
                    n(10000, 20000, vec![cpu_only()]),
                    n(10000, 50000, vec![cpu_and_memory()]),
                ],
                vec![82, 80],
            ),
            (
                // cpu fractions capped at 1
                "requested resources beyond capacity",
                cpu_only(),
                vec![
                    n(4000, 10000, vec![cpu_only()]),
                    n(4000, 10000, vec![cpu_and_memory()]),
                ],
                vec![50, 75],
            ),
            (
                "zero node resources",
                cpu_only(),
                vec![n(0, 0, vec![cpu_only()])],
                vec![100],
            ),
            (
                "only cpu allocatable",
                cpu_only(),
                vec![n(4000, 0, vec![])],
                vec![100],
            ),
        ];
        for (name, pod, nodes, want) in cases {
            let got: Vec<i64> = nodes
                .iter()
                .map(|ni| NodeResourcesBalancedAllocation.score(&st(), &pod, ni))
                .collect();
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn more_than_two_resources() {
        // fractions .2, .4, .6: std = sqrt(0.08 / 3) ~ .163
        assert_eq!(balanced_score(&[(2, 10), (4, 10), (6, 10)]), 83);
    }
}
