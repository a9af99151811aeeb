//! NodeResourcesFit (upstream `noderesources.Fit`): the pod's requests must fit in what the node's
//! pods leave of its allocatable; scoring by the configured strategy — LeastAllocated (default),
//! MostAllocated or RequestedToCapacityRatio — over weighted resources (cpu and memory by default),
//! with the non-zero requests (100m / 200Mi for containers that request none).

use std::collections::HashSet;

use k8s_openapi::api::core::v1::Pod;
use serde::Deserialize;

use super::REASON_SEPARATOR;
use crate::framework::resources::{pod_non_zero_requests, pod_requests, Resources};
use crate::framework::{action, ClusterEvent, EventResource};
use crate::framework::{
    CycleState, FilterPlugin, NodeInfo, Plugin, PreFilterPlugin, PreFilterResult, PreScorePlugin,
    ScorePlugin, Status, MAX_NODE_SCORE,
};

/// A scored resource and its weight (upstream `config.ResourceSpec`).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ResourceSpec {
    pub name: String,
    #[serde(default = "one")]
    pub weight: i64,
}

fn one() -> i64 {
    1
}

/// One point of RequestedToCapacityRatio's shape: utilization 0..=100 -> score 0..=10.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct UtilizationShapePoint {
    pub utilization: i64,
    pub score: i64,
}

#[derive(Clone, Debug, Deserialize, PartialEq, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RequestedToCapacityRatioParam {
    #[serde(default)]
    pub shape: Vec<UtilizationShapePoint>,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ScoringStrategy {
    #[serde(rename = "type", default = "least")]
    pub type_: String,
    #[serde(default)]
    pub resources: Vec<ResourceSpec>,
    #[serde(default)]
    pub requested_to_capacity_ratio: Option<RequestedToCapacityRatioParam>,
}

fn least() -> String {
    "LeastAllocated".into()
}

/// `NodeResourcesFitArgs`.
#[derive(Clone, Debug, Deserialize, PartialEq, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FitArgs {
    #[serde(default)]
    pub ignored_resources: Vec<String>,
    #[serde(default)]
    pub ignored_resource_groups: Vec<String>,
    #[serde(default)]
    pub scoring_strategy: Option<ScoringStrategy>,
}

pub(crate) fn default_resources() -> Vec<ResourceSpec> {
    vec![
        ResourceSpec {
            name: "cpu".into(),
            weight: 1,
        },
        ResourceSpec {
            name: "memory".into(),
            weight: 1,
        },
    ]
}

#[derive(Clone, Debug, PartialEq)]
pub enum Strategy {
    LeastAllocated,
    MostAllocated,
    /// Shape points with scores already scaled to 0..=100.
    RequestedToCapacityRatio(Vec<(i64, i64)>),
}

pub struct NodeResourcesFit {
    pub strategy: Strategy,
    pub resources: Vec<ResourceSpec>,
    ignored: HashSet<String>,
    ignored_groups: HashSet<String>,
}

impl Default for NodeResourcesFit {
    fn default() -> Self {
        NodeResourcesFit {
            strategy: Strategy::LeastAllocated,
            resources: default_resources(),
            ignored: HashSet::new(),
            ignored_groups: HashSet::new(),
        }
    }
}

impl NodeResourcesFit {
    /// From `NodeResourcesFitArgs`, validated as upstream (`ValidateNodeResourcesFitArgs`).
    pub fn from_args(args: FitArgs) -> Result<NodeResourcesFit, String> {
        let strategy = args.scoring_strategy.unwrap_or(ScoringStrategy {
            type_: least(),
            resources: Vec::new(),
            requested_to_capacity_ratio: None,
        });
        let resources = if strategy.resources.is_empty() {
            default_resources()
        } else {
            strategy.resources.clone()
        };
        for r in &resources {
            if !(1..=100).contains(&r.weight) {
                return Err(format!(
                    "scoringStrategy.resources[{}].weight: Invalid value: {}: resource weight of {} not in valid range [1, 100]",
                    r.name, r.weight, r.name
                ));
            }
        }
        let strategy = match strategy.type_.as_str() {
            "LeastAllocated" => Strategy::LeastAllocated,
            "MostAllocated" => Strategy::MostAllocated,
            "RequestedToCapacityRatio" => {
                let shape = strategy
                    .requested_to_capacity_ratio
                    .map(|r| r.shape)
                    .unwrap_or_default();
                if shape.is_empty() {
                    return Err("scoringStrategy.requestedToCapacityRatio.shape: Required value: at least one point must be specified".into());
                }
                let mut last = -1;
                for p in &shape {
                    if !(0..=100).contains(&p.utilization) || !(0..=10).contains(&p.score) {
                        return Err(format!(
                            "scoringStrategy.requestedToCapacityRatio.shape: Invalid value: utilization {} / score {} out of range",
                            p.utilization, p.score
                        ));
                    }
                    if p.utilization <= last {
                        return Err("scoringStrategy.requestedToCapacityRatio.shape: Invalid value: utilization values must be sorted in increasing order".into());
                    }
                    last = p.utilization;
                }
                Strategy::RequestedToCapacityRatio(
                    shape
                        .iter()
                        .map(|p| (p.utilization, p.score * (MAX_NODE_SCORE / 10)))
                        .collect(),
                )
            }
            other => {
                return Err(format!(
                    "scoringStrategy.type: Unsupported value: {other:?}: supported values: \"LeastAllocated\", \"MostAllocated\", \"RequestedToCapacityRatio\""
                ))
            }
        };
        Ok(NodeResourcesFit {
            strategy,
            resources,
            ignored: args.ignored_resources.into_iter().collect(),
            ignored_groups: args.ignored_resource_groups.into_iter().collect(),
        })
    }

    fn ignores(&self, name: &str) -> bool {
        self.ignored.contains(name)
            || name
                .split_once('/')
                .is_some_and(|(group, _)| self.ignored_groups.contains(group))
    }

    /// The reasons the pod doesn't fit the node (upstream `fitsRequest`); empty when it fits.
    pub fn insufficient_resources(&self, req: &Resources, node: &NodeInfo) -> Vec<String> {
        let mut reasons = Vec::new();
        if node.pods.len() as i64 + 1 > node.allocatable.allowed_pod_number {
            reasons.push("Too many pods".to_string());
        }
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
            if self.ignores(name) {
                continue;
            }
            let have = alloc.scalar.get(name).copied().unwrap_or(0);
            if short(*want, have, used.scalar.get(name).copied().unwrap_or(0)) {
                reasons.push(format!("Insufficient {name}"));
            }
        }
        reasons
    }
}

/// The reasons the pod doesn't fit the node with the default arguments.
pub fn insufficient_resources(pod: &Pod, node: &NodeInfo) -> Vec<String> {
    NodeResourcesFit::default().insufficient_resources(&pod_requests(pod), node)
}

/// Upstream `leastRequestedScore`: the free share of capacity, 0..=100.
fn least_requested_score(requested: i64, capacity: i64) -> i64 {
    if capacity == 0 || requested > capacity {
        return 0;
    }
    (capacity - requested) * MAX_NODE_SCORE / capacity
}

/// Upstream `mostRequestedScore`: the used share of capacity, 0..=100 (capped).
fn most_requested_score(requested: i64, capacity: i64) -> i64 {
    if capacity == 0 {
        return 0;
    }
    requested.min(capacity) * MAX_NODE_SCORE / capacity
}

/// Upstream `helper.BuildBrokenLinearFunction`.
pub(crate) fn broken_linear(shape: &[(i64, i64)], p: i64) -> i64 {
    for (i, &(u, s)) in shape.iter().enumerate() {
        if p <= u {
            if i == 0 {
                return s;
            }
            let (pu, ps) = shape[i - 1];
            return ps + (s - ps) * (p - pu) / (u - pu);
        }
    }
    shape.last().map(|&(_, s)| s).unwrap_or(0)
}

/// Requested (node + pod) and allocatable of a scored resource (upstream
/// `calculateResourceAllocatableRequest`, non-zero requests for cpu and memory).
fn resource_pair(name: &str, pod_req: &Resources, node: &NodeInfo) -> (i64, i64) {
    let (nz, alloc) = (&node.non_zero_requested, &node.allocatable);
    match name {
        "cpu" => (nz.milli_cpu + pod_req.milli_cpu, alloc.milli_cpu),
        "memory" => (nz.memory + pod_req.memory, alloc.memory),
        "ephemeral-storage" => (
            node.requested.ephemeral_storage + pod_req.ephemeral_storage,
            alloc.ephemeral_storage,
        ),
        other => (
            node.requested.scalar.get(other).copied().unwrap_or(0)
                + pod_req.scalar.get(other).copied().unwrap_or(0),
            alloc.scalar.get(other).copied().unwrap_or(0),
        ),
    }
}

const PRE_FILTER_KEY: &str = "PreFilterNodeResourcesFit";
const PRE_SCORE_KEY: &str = "PreScoreNodeResourcesFit";

impl Plugin for NodeResourcesFit {
    fn name(&self) -> &'static str {
        "NodeResourcesFit"
    }
    fn events_to_register(&self) -> Vec<ClusterEvent> {
        vec![
            ClusterEvent::new(
                EventResource::Pod,
                action::DELETE | action::UPDATE_POD_SCALE_DOWN,
            ),
            ClusterEvent::new(
                EventResource::Node,
                action::ADD | action::UPDATE_NODE_ALLOCATABLE,
            ),
        ]
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
    fn as_pre_score(&self) -> Option<&dyn PreScorePlugin> {
        Some(self)
    }
    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
}

impl PreFilterPlugin for NodeResourcesFit {
    /// The pod's requests, summed once per cycle.
    fn pre_filter(&self, state: &mut CycleState, pod: &Pod) -> (Option<PreFilterResult>, Status) {
        state.write(PRE_FILTER_KEY, pod_requests(pod));
        (None, Status::Success)
    }
}

impl FilterPlugin for NodeResourcesFit {
    /// `Status::Unschedulable` with every failing reason ("Too many pods", "Insufficient cpu",
    /// "Insufficient memory", "Insufficient ephemeral-storage", "Insufficient <scalar>", in that
    /// order) joined by [`REASON_SEPARATOR`], as upstream keeps them all in one status.
    fn filter(&self, state: &CycleState, pod: &Pod, node: &NodeInfo) -> Status {
        let reasons = match state.read::<Resources>(PRE_FILTER_KEY) {
            Some(req) => self.insufficient_resources(req, node),
            None => self.insufficient_resources(&pod_requests(pod), node),
        };
        if reasons.is_empty() {
            Status::Success
        } else {
            Status::Unschedulable(reasons.join(&REASON_SEPARATOR.to_string()))
        }
    }
}

impl PreScorePlugin for NodeResourcesFit {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        _nodes: &[std::sync::Arc<NodeInfo>],
    ) -> Status {
        state.write(PRE_SCORE_KEY, pod_non_zero_requests(pod));
        Status::Success
    }
}

impl ScorePlugin for NodeResourcesFit {
    fn score(&self, state: &CycleState, pod: &Pod, node: &NodeInfo) -> i64 {
        let computed;
        let req = match state.read::<Resources>(PRE_SCORE_KEY) {
            Some(r) => r,
            None => {
                computed = pod_non_zero_requests(pod);
                &computed
            }
        };
        let (mut total, mut weights) = (0, 0);
        for r in &self.resources {
            let (requested, allocatable) = resource_pair(&r.name, req, node);
            // A resource the node doesn't have is left out rather than scored 0.
            if allocatable == 0 {
                continue;
            }
            let s = match &self.strategy {
                Strategy::LeastAllocated => least_requested_score(requested, allocatable),
                Strategy::MostAllocated => most_requested_score(requested, allocatable),
                Strategy::RequestedToCapacityRatio(shape) => {
                    let util = if requested > allocatable {
                        100
                    } else {
                        requested * 100 / allocatable
                    };
                    let s = broken_linear(shape, util);
                    // Upstream leaves zero scores out of the average.
                    if s <= 0 {
                        continue;
                    }
                    s
                }
            };
            total += s * r.weight;
            weights += r.weight;
        }
        if weights == 0 {
            0
        } else if matches!(self.strategy, Strategy::RequestedToCapacityRatio(_)) {
            (total as f64 / weights as f64).round() as i64
        } else {
            total / weights
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testutil::{node, node_info, pod_with_requests, st};
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
                NodeResourcesFit::default().filter(&st(), &pod, &test_node(pods, existing)),
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
                .map(|ni| ScorePlugin::score(&NodeResourcesFit::default(), &st(), &pod, ni))
                .collect();
            assert_eq!(got, want, "{name}");
        }
    }
}
