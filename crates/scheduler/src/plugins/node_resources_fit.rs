//! NodeResourcesFit (upstream `noderesources.Fit`): the pod's requests must fit in what the
//! node's pods leave of its allocatable; scoring favours the least allocated nodes.

use k8s_openapi::api::core::v1::Pod;

use super::REASON_SEPARATOR;
use crate::framework::resources::{pod_non_zero_requests, pod_requests};
use crate::framework::{FilterPlugin, NodeInfo, ScorePlugin, Status, MAX_NODE_SCORE};

/// Filter: `Status::Unschedulable` with every failing reason ("Too many pods", "Insufficient
/// cpu", "Insufficient memory", "Insufficient ephemeral-storage", "Insufficient <scalar>", in
/// that order) joined by [`REASON_SEPARATOR`], as upstream keeps them all in one status.
/// Score: LeastAllocated over cpu and memory (weight 1 each) with the non-zero requests.
pub struct NodeResourcesFit;

/// The reasons the pod doesn't fit the node (upstream `fitsRequest`); empty when it fits.
pub fn insufficient_resources(pod: &Pod, node: &NodeInfo) -> Vec<String> {
    let mut reasons = Vec::new();
    if node.pods.len() as i64 + 1 > node.allocatable.allowed_pod_number {
        reasons.push("Too many pods".to_string());
    }
    let req = pod_requests(pod);
    let (alloc, used) = (&node.allocatable, &node.requested);
    let short = |want: i64, have: i64, used: i64| want > 0 && want > have - used;
    if short(req.milli_cpu, alloc.milli_cpu, used.milli_cpu) {
        reasons.push("Insufficient cpu".to_string());
    }
    if short(req.memory, alloc.memory, used.memory) {
        reasons.push("Insufficient memory".to_string());
    }
    if short(
        req.ephemeral_storage,
        alloc.ephemeral_storage,
        used.ephemeral_storage,
    ) {
        reasons.push("Insufficient ephemeral-storage".to_string());
    }
    for (name, want) in &req.scalar {
        let have = alloc.scalar.get(name).copied().unwrap_or(0);
        if short(*want, have, used.scalar.get(name).copied().unwrap_or(0)) {
            reasons.push(format!("Insufficient {name}"));
        }
    }
    reasons
}

/// Upstream `leastRequestedScore`: the free share of capacity, 0..=100.
fn least_requested_score(requested: i64, capacity: i64) -> i64 {
    if capacity == 0 || requested > capacity {
        return 0;
    }
    (capacity - requested) * MAX_NODE_SCORE / capacity
}

impl FilterPlugin for NodeResourcesFit {
    fn name(&self) -> &'static str {
        "NodeResourcesFit"
    }

    fn filter(&self, pod: &Pod, node: &NodeInfo) -> Status {
        let reasons = insufficient_resources(pod, node);
        if reasons.is_empty() {
            Status::Success
        } else {
            Status::Unschedulable(reasons.join(&REASON_SEPARATOR.to_string()))
        }
    }
}

impl ScorePlugin for NodeResourcesFit {
    fn name(&self) -> &'static str {
        "NodeResourcesFit"
    }

    fn score(&self, pod: &Pod, node: &NodeInfo) -> i64 {
        let req = pod_non_zero_requests(pod);
        let used = &node.non_zero_requested;
        let dims = [
            (
                used.milli_cpu + req.milli_cpu,
                node.allocatable.milli_cpu,
                1,
            ),
            (used.memory + req.memory, node.allocatable.memory, 1),
        ];
        let (mut total, mut weights) = (0, 0);
        // A resource the node doesn't have is left out rather than scored 0.
        for (requested, allocatable, weight) in dims.into_iter().filter(|d| d.1 != 0) {
            total += least_requested_score(requested, allocatable) * weight;
            weights += weight;
        }
        if weights == 0 {
            0
        } else {
            total / weights
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testutil::{node, node_info, pod_with_requests};
    use serde_json::{json, Value};

    /// Upstream's test node: cpu 10m, memory 20, pods 32, example.com/aaa 5, storage 20, hugepages-2Mi 5.
    fn test_node(pods: i64, existing: Vec<Pod>) -> NodeInfo {
        let alloc = json!({"cpu": "10m", "memory": "20", "pods": pods.to_string(), "example.com/aaa": "5",
            "ephemeral-storage": "20", "hugepages-2Mi": "5"});
        node_info(node("n", json!({}), json!({}), alloc), existing)
    }

    fn req(cpu: i64, mem: i64) -> Value {
        json!({"cpu": format!("{cpu}m"), "memory": mem.to_string()})
    }

    fn with_init(mut p: Pod, inits: &[Value]) -> Pod {
        let init = pod_with_requests("x", inits).spec.unwrap().containers;
        p.spec.as_mut().unwrap().init_containers = Some(init);
        p
    }

    #[test]
    fn filter() {
        let p = |reqs: &[Value]| pod_with_requests("p", reqs);
        let used = |reqs: &[Value]| vec![pod_with_requests("e", reqs)];
        let fail = |r: &[&str]| Status::Unschedulable(r.join("\n"));
        let ext = |n: i64| json!({"cpu": "1m", "memory": "1", "example.com/aaa": n.to_string()});
        let cases: Vec<(&str, Pod, Vec<Pod>, i64, Status)> = vec![
            (
                "no resources requested always fits",
                p(&[json!({})]),
                used(&[req(10, 20)]),
                32,
                Status::Success,
            ),
            (
                "too many resources fails",
                p(&[req(1, 1)]),
                used(&[req(10, 20)]),
                32,
                fail(&["Insufficient cpu", "Insufficient memory"]),
            ),
            (
                "init container cpu",
                with_init(p(&[req(1, 1)]), &[req(3, 1)]),
                used(&[req(8, 19)]),
                32,
                fail(&["Insufficient cpu"]),
            ),
            (
                "highest init container cpu",
                with_init(p(&[req(1, 1)]), &[req(3, 1), req(2, 1)]),
                used(&[req(8, 19)]),
                32,
                fail(&["Insufficient cpu"]),
            ),
            (
                "init container memory",
                with_init(p(&[req(1, 1)]), &[req(1, 3)]),
                used(&[req(9, 19)]),
                32,
                fail(&["Insufficient memory"]),
            ),
            (
                "init containers are a max, not a sum",
                with_init(p(&[req(1, 1)]), &[req(1, 1), req(1, 1)]),
                used(&[req(9, 19)]),
                32,
                Status::Success,
            ),
            (
                "both resources fit",
                p(&[req(1, 1)]),
                used(&[req(5, 5)]),
                32,
                Status::Success,
            ),
            (
                "one resource memory fits",
                p(&[req(2, 1)]),
                used(&[req(9, 5)]),
                32,
                fail(&["Insufficient cpu"]),
            ),
            (
                "one resource cpu fits",
                p(&[req(1, 2)]),
                used(&[req(5, 19)]),
                32,
                fail(&["Insufficient memory"]),
            ),
            (
                "equal edge case",
                p(&[req(5, 1)]),
                used(&[req(5, 19)]),
                32,
                Status::Success,
            ),
            (
                "equal edge case for init container",
                with_init(p(&[req(4, 1)]), &[req(5, 1)]),
                used(&[req(5, 19)]),
                32,
                Status::Success,
            ),
            (
                "extended resource fits",
                p(&[json!({"example.com/aaa": "1"})]),
                used(&[json!({})]),
                32,
                Status::Success,
            ),
            (
                "extended resource capacity enforced",
                p(&[ext(10)]),
                used(&[json!({})]),
                32,
                fail(&["Insufficient example.com/aaa"]),
            ),
            (
                "extended resource allocatable enforced",
                p(&[ext(1)]),
                used(&[json!({"example.com/aaa": "5"})]),
                32,
                fail(&["Insufficient example.com/aaa"]),
            ),
            (
                "extended resource summed over containers",
                p(&[ext(3), ext(3)]),
                used(&[json!({"example.com/aaa": "2"})]),
                32,
                fail(&["Insufficient example.com/aaa"]),
            ),
            (
                "extended resource: init containers are a max",
                with_init(p(&[json!({})]), &[ext(3), ext(3)]),
                used(&[json!({"example.com/aaa": "2"})]),
                32,
                Status::Success,
            ),
            (
                "zero request of an absent resource fits",
                p(&[json!({"example.com/bbb": "0"})]),
                used(&[json!({})]),
                32,
                Status::Success,
            ),
            (
                "unknown extended resource",
                p(&[json!({"example.com/bbb": "1"})]),
                used(&[json!({})]),
                32,
                fail(&["Insufficient example.com/bbb"]),
            ),
            (
                "kubernetes.io resource",
                p(&[json!({"kubernetes.io/something": "1"})]),
                used(&[json!({})]),
                32,
                fail(&["Insufficient kubernetes.io/something"]),
            ),
            (
                "hugepages fit",
                p(&[json!({"hugepages-2Mi": "3"})]),
                used(&[json!({"hugepages-2Mi": "2"})]),
                32,
                Status::Success,
            ),
            (
                "hugepages enforced",
                p(&[json!({"hugepages-2Mi": "3"})]),
                used(&[json!({"hugepages-2Mi": "3"})]),
                32,
                fail(&["Insufficient hugepages-2Mi"]),
            ),
            (
                "ephemeral storage enforced",
                p(&[json!({"ephemeral-storage": "25"})]),
                used(&[json!({})]),
                32,
                fail(&["Insufficient ephemeral-storage"]),
            ),
            (
                "ephemeral storage fits",
                p(&[json!({"ephemeral-storage": "10"})]),
                used(&[json!({"ephemeral-storage": "2"})]),
                32,
                Status::Success,
            ),
            (
                "too many pods",
                p(&[json!({})]),
                used(&[req(10, 20)]),
                1,
                fail(&["Too many pods"]),
            ),
            (
                "too many pods and short of resources",
                p(&[req(1, 1)]),
                used(&[req(10, 20)]),
                1,
                fail(&["Too many pods", "Insufficient cpu", "Insufficient memory"]),
            ),
            (
                "overhead counts",
                {
                    let mut x = p(&[req(1, 1)]);
                    x.spec.as_mut().unwrap().overhead =
                        Some(serde_json::from_value(json!({"cpu": "3m", "memory": "15"})).unwrap());
                    x
                },
                used(&[req(5, 5)]),
                32,
                fail(&["Insufficient memory"]),
            ),
        ];
        for (name, pod, existing, pods, want) in cases {
            assert_eq!(
                NodeResourcesFit.filter(&pod, &test_node(pods, existing)),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn least_allocated_score() {
        let n = |cpu: &str, mem: &str, existing: Vec<Pod>| {
            node_info(
                node(
                    "n",
                    json!({}),
                    json!({}),
                    json!({"cpu": cpu, "memory": mem, "pods": "110"}),
                ),
                existing,
            )
        };
        let p = |reqs: &[Value]| pod_with_requests("p", reqs);
        let e = |reqs: &[Value]| vec![pod_with_requests("e", reqs)];
        let cases: Vec<(&str, Pod, Vec<NodeInfo>, Vec<i64>)> = vec![
            // Requests default to 100m/200Mi: cpu (4000-100)*100/4000 = 97, memory over capacity = 0.
            (
                "nothing scheduled, nothing requested",
                p(&[json!({})]),
                vec![n("4", "10000", vec![]), n("4", "10000", vec![])],
                vec![48, 48],
            ),
            (
                "nothing scheduled, resources requested, differently sized nodes",
                p(&[req(1000, 2000), req(2000, 3000)]),
                vec![n("4", "10000", vec![]), n("6", "10000", vec![])],
                // cpu (4000-3000)/4000 = 25, memory (10000-5000)/10000 = 50 -> 37; cpu 50, memory 50 -> 50
                vec![37, 50],
            ),
            (
                "no resources requested, pods scheduled with resources",
                p(&[json!({"cpu": "0", "memory": "0"})]),
                vec![
                    n("10", "20000", e(&[req(3000, 0)])),
                    n("10", "20000", e(&[req(3000, 5000)])),
                ],
                // cpu 70; memory: 0 requested and 0 on the node -> 100, 5000 -> 75
                vec![85, 72],
            ),
            (
                "requested beyond capacity scores 0",
                p(&[req(3000, 0)]),
                vec![n("10", "4000", e(&[req(8000, 0)]))],
                vec![50],
            ),
            (
                "a resource the node lacks is left out",
                p(&[req(1000, 0)]),
                vec![n("4", "0", vec![])],
                vec![75],
            ),
            (
                "zero allocatable",
                p(&[req(1000, 0)]),
                vec![n("0", "0", vec![])],
                vec![0],
            ),
        ];
        for (name, pod, nodes, want) in cases {
            let got: Vec<i64> = nodes
                .iter()
                .map(|ni| ScorePlugin::score(&NodeResourcesFit, &pod, ni))
                .collect();
            assert_eq!(got, want, "{name}");
        }
    }
}
