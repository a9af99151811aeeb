//! NodeUnschedulable (upstream `nodeunschedulable`): cordoned nodes take only pods that tolerate
//! the `node.kubernetes.io/unschedulable:NoSchedule` taint.

use k8s_openapi::api::core::v1::{Pod, Taint};

use super::taint_toleration::tolerations_tolerate_taint;
use crate::framework::{action, ClusterEvent, EventResource};
use crate::framework::{CycleState, FilterPlugin, NodeInfo, Plugin, Status};

pub const ERR_REASON_UNSCHEDULABLE: &str = "node(s) were unschedulable";

pub struct NodeUnschedulable;

impl FilterPlugin for NodeUnschedulable {
    fn filter(&self, _state: &CycleState, pod: &Pod, node: &NodeInfo) -> Status {
        if !node.unschedulable {
            return Status::Success;
        }
        let taint = Taint {
            key: "node.kubernetes.io/unschedulable".into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        };
        let tolerations = pod
            .spec
            .as_ref()
            .and_then(|s| s.tolerations.as_deref())
            .unwrap_or_default();
        if tolerations_tolerate_taint(tolerations, &taint) {
            Status::Success
        } else {
            Status::UnschedulableAndUnresolvable(ERR_REASON_UNSCHEDULABLE.into())
        }
    }
}

impl Plugin for NodeUnschedulable {
    fn name(&self) -> &'static str {
        "NodeUnschedulable"
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testutil::{node, node_info, pod, st};
    use serde_json::json;

    #[test]
    fn filter() {
        let fail = Status::UnschedulableAndUnresolvable(ERR_REASON_UNSCHEDULABLE.into());
        let tol = json!({"tolerations": [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}]});
        let cases = vec![
            (
                "schedulable node, no unschedulable field",
                json!({}),
                json!({}),
                Status::Success,
            ),
            (
                "unschedulable node",
                json!({"unschedulable": true}),
                json!({}),
                fail.clone(),
            ),
            (
                "explicitly schedulable node",
                json!({"unschedulable": false}),
                json!({}),
                Status::Success,
            ),
            (
                "unschedulable node, pod tolerates the taint",
                json!({"unschedulable": true}),
                tol,
                Status::Success,
            ),
            (
                "toleration with another effect does not help",
                json!({"unschedulable": true}),
                json!({"tolerations": [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoExecute"}]}),
                fail.clone(),
            ),
            (
                "tolerate-everything toleration",
                json!({"unschedulable": true}),
                json!({"tolerations": [{"operator": "Exists"}]}),
                Status::Success,
            ),
        ];
        for (name, node_spec, pod_spec, want) in cases {
            let ni = node_info(node("n", json!({}), node_spec, json!({})), vec![]);
            assert_eq!(
                NodeUnschedulable.filter(&st(), &pod("p", pod_spec), &ni),
                want,
                "{name}"
            );
        }
    }
}
