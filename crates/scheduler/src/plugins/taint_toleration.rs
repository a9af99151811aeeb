//! TaintToleration (upstream `tainttoleration`): NoSchedule/NoExecute taints must be tolerated;
//! nodes with fewer untolerated PreferNoSchedule taints score higher.

use k8s_openapi::api::core::v1::{Pod, Taint, Toleration};

use super::default_normalize_score;
use crate::framework::{action, ClusterEvent, EventResource};
use crate::framework::{
    CycleState, FilterPlugin, NodeInfo, Plugin, ScorePlugin, Status, MAX_NODE_SCORE,
};

pub struct TaintToleration;

pub use apimachinery::taints::{tolerates_taint, tolerations_tolerate_taint};

fn taints(node: &NodeInfo) -> &[Taint] {
    &node.taints
}

fn tolerations(pod: &Pod) -> &[Toleration] {
    pod.spec
        .as_ref()
        .and_then(|s| s.tolerations.as_deref())
        .unwrap_or_default()
}

impl FilterPlugin for TaintToleration {
    fn filter(&self, _state: &CycleState, pod: &Pod, node: &NodeInfo) -> Status {
        let tolerations = tolerations(pod);
        let untolerated = taints(node).iter().find(|t| {
            (t.effect == "NoSchedule" || t.effect == "NoExecute")
                && !tolerations_tolerate_taint(tolerations, t)
        });
        match untolerated {
            None => Status::Success,
            Some(t) => Status::UnschedulableAndUnresolvable(format!(
                "node(s) had untolerated taint {{{}: {}}}",
                t.key,
                t.value.as_deref().unwrap_or("")
            )),
        }
    }
}

impl ScorePlugin for TaintToleration {
    /// The number of PreferNoSchedule taints the pod doesn't tolerate (lower is better).
    fn score(&self, _state: &CycleState, pod: &Pod, node: &NodeInfo) -> i64 {
        if taints(node).is_empty() {
            return 0;
        }
        // Only tolerations that can match PreferNoSchedule taints count.
        let prefer: Vec<Toleration> = tolerations(pod)
            .iter()
            .filter(|t| {
                matches!(
                    t.effect.as_deref(),
                    None | Some("") | Some("PreferNoSchedule")
                )
            })
            .cloned()
            .collect();
        taints(node)
            .iter()
            .filter(|t| t.effect == "PreferNoSchedule" && !tolerations_tolerate_taint(&prefer, t))
            .count() as i64
    }

    fn normalize(&self, _state: &CycleState, _pod: &Pod, scores: &mut [i64]) {
        default_normalize_score(MAX_NODE_SCORE, true, scores);
    }
}

impl Plugin for TaintToleration {
    fn name(&self) -> &'static str {
        "TaintToleration"
    }
    fn events_to_register(&self) -> Vec<ClusterEvent> {
        vec![
            ClusterEvent::new(EventResource::Node, action::ADD | action::UPDATE_NODE_TAINT),
            ClusterEvent::new(
                EventResource::UnscheduledPod,
                action::UPDATE_POD_TOLERATIONS,
            ),
        ]
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testutil::{pod, st, tainted_node};
    use serde_json::{json, Value};

    fn taint(key: &str, value: &str, effect: &str) -> Value {
        json!({"key": key, "value": value, "effect": effect})
    }

    fn tol(key: &str, op: &str, value: &str, effect: &str) -> Value {
        json!({"key": key, "operator": op, "value": value, "effect": effect})
    }

    #[test]
    fn toleration_matching() {
        let t: Taint = serde_json::from_value(taint("foo", "bar", "NoSchedule")).unwrap();
        let cases = vec![
            (
                json!({"key": "foo", "operator": "Equal", "value": "bar", "effect": "NoSchedule"}),
                true,
            ),
            (json!({"key": "foo", "value": "bar"}), true),
            (json!({"key": "foo", "value": "baz"}), false),
            (json!({"key": "foo", "operator": "Exists"}), true),
            (json!({"key": "other", "operator": "Exists"}), false),
            (json!({"operator": "Exists"}), true),
            (json!({"operator": "Exists", "effect": "NoExecute"}), false),
            (
                json!({"key": "foo", "operator": "Lt", "value": "bar"}),
                false,
            ),
        ];
        for (tol, want) in cases {
            let tol: Toleration = serde_json::from_value(tol.clone()).unwrap();
            assert_eq!(tolerates_taint(&tol, &t), want, "{tol:?}");
        }
    }

    #[test]
    fn filter() {
        let fail = |k: &str, v: &str| {
            Status::UnschedulableAndUnresolvable(format!(
                "node(s) had untolerated taint {{{k}: {v}}}"
            ))
        };
        let cases = vec![
            (
                "no tolerations, taint NoSchedule",
                json!([]),
                json!([taint("dedicated", "user1", "NoSchedule")]),
                fail("dedicated", "user1"),
            ),
            (
                "toleration for user1 on a user1 node",
                json!([tol("dedicated", "Equal", "user1", "NoSchedule")]),
                json!([taint("dedicated", "user1", "NoSchedule")]),
                Status::Success,
            ),
            (
                "toleration for user2 on a user1 node",
                json!([tol("dedicated", "Equal", "user2", "NoSchedule")]),
                json!([taint("dedicated", "user1", "NoSchedule")]),
                fail("dedicated", "user1"),
            ),
            (
                "Exists toleration",
                json!([tol("foo", "Exists", "", "NoSchedule")]),
                json!([taint("foo", "bar", "NoSchedule")]),
                Status::Success,
            ),
            (
                "all of several taints tolerated",
                json!([
                    tol("dedicated", "Equal", "user2", "NoSchedule"),
                    tol("foo", "Exists", "", "NoSchedule")
                ]),
                json!([
                    taint("dedicated", "user2", "NoSchedule"),
                    taint("foo", "bar", "NoSchedule")
                ]),
                Status::Success,
            ),
            (
                "key and value match but effect doesn't",
                json!([tol("foo", "Equal", "bar", "PreferNoSchedule")]),
                json!([taint("foo", "bar", "NoSchedule")]),
                fail("foo", "bar"),
            ),
            (
                "empty toleration effect matches NoSchedule",
                json!([{"key": "foo", "operator": "Equal", "value": "bar"}]),
                json!([taint("foo", "bar", "NoSchedule")]),
                Status::Success,
            ),
            (
                "untolerated PreferNoSchedule taint doesn't filter",
                json!([tol("dedicated", "Equal", "user2", "NoSchedule")]),
                json!([taint("dedicated", "user1", "PreferNoSchedule")]),
                Status::Success,
            ),
            (
                "no tolerations, PreferNoSchedule taint",
                json!([]),
                json!([taint("dedicated", "user1", "PreferNoSchedule")]),
                Status::Success,
            ),
            (
                "untolerated NoExecute taint",
                json!([]),
                json!([taint("evict", "", "NoExecute")]),
                fail("evict", ""),
            ),
            (
                "control-plane taint without a value",
                json!([]),
                json!([{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]),
                fail("node-role.kubernetes.io/control-plane", ""),
            ),
        ];
        for (name, tols, node_taints, want) in cases {
            let p = pod("p", json!({ "tolerations": tols }));
            assert_eq!(
                TaintToleration.filter(&st(), &p, &tainted_node("n", node_taints)),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn score() {
        let cases = vec![
            (
                "tolerated taints score higher than intolerable ones",
                json!([tol("foo", "Equal", "bar", "PreferNoSchedule")]),
                vec![
                    json!([taint("foo", "bar", "PreferNoSchedule")]),
                    json!([taint("foo", "blah", "PreferNoSchedule")]),
                ],
                vec![100, 0],
            ),
            (
                "all taints tolerated: same score however many",
                json!([
                    tol("cpu-type", "Equal", "arm64", "PreferNoSchedule"),
                    tol("disk-type", "Equal", "ssd", "PreferNoSchedule")
                ]),
                vec![
                    json!([]),
                    json!([taint("cpu-type", "arm64", "PreferNoSchedule")]),
                    json!([
                        taint("cpu-type", "arm64", "PreferNoSchedule"),
                        taint("disk-type", "ssd", "PreferNoSchedule")
                    ]),
                ],
                vec![100, 100, 100],
            ),
            (
                "more intolerable taints, lower score",
                json!([tol("foo", "Equal", "bar", "PreferNoSchedule")]),
                vec![
                    json!([]),
                    json!([taint("cpu-type", "arm64", "PreferNoSchedule")]),
                    json!([
                        taint("cpu-type", "arm64", "PreferNoSchedule"),
                        taint("disk-type", "ssd", "PreferNoSchedule")
                    ]),
                ],
                vec![100, 50, 0],
            ),
            (
                "only PreferNoSchedule taints and tolerations count",
                json!([
                    tol("cpu-type", "Equal", "arm64", "NoSchedule"),
                    tol("disk-type", "Equal", "ssd", "NoSchedule")
                ]),
                vec![
                    json!([]),
                    json!([taint("cpu-type", "arm64", "NoSchedule")]),
                    json!([
                        taint("cpu-type", "arm64", "PreferNoSchedule"),
                        taint("disk-type", "ssd", "PreferNoSchedule")
                    ]),
                ],
                vec![100, 100, 0],
            ),
            (
                "no tolerations: the untainted node wins",
                json!([]),
                vec![
                    json!([]),
                    json!([taint("cpu-type", "arm64", "PreferNoSchedule")]),
                ],
                vec![100, 0],
            ),
        ];
        for (name, tols, nodes, want) in cases {
            let p = pod("p", json!({ "tolerations": tols }));
            let mut scores: Vec<i64> = nodes
                .into_iter()
                .map(|t| ScorePlugin::score(&TaintToleration, &st(), &p, &tainted_node("n", t)))
                .collect();
            TaintToleration.normalize(&st(), &p, &mut scores);
            assert_eq!(scores, want, "{name}");
        }
    }
}
