//! NodeName (upstream `nodename`): a pod that names a node fits only that node.

use k8s_openapi::api::core::v1::Pod;

use crate::framework::{action, ClusterEvent, EventResource};
use crate::framework::{CycleState, FilterPlugin, NodeInfo, Plugin, Status};

pub const ERR_REASON: &str = "node(s) didn't match the requested node name";

pub struct NodeName;

impl FilterPlugin for NodeName {
    fn filter(&self, _state: &CycleState, pod: &Pod, node: &NodeInfo) -> Status {
        match pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
            Some(wanted) if !wanted.is_empty() && wanted != node.name() => {
                Status::UnschedulableAndUnresolvable(ERR_REASON.into())
            }
            _ => Status::Success,
        }
    }
}

impl Plugin for NodeName {
    fn name(&self) -> &'static str {
        "NodeName"
    }
    fn events_to_register(&self) -> Vec<ClusterEvent> {
        vec![ClusterEvent::new(EventResource::Node, action::ADD)]
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testutil::{labeled_node, pod, st};
    use serde_json::json;

    #[test]
    fn filter() {
        let cases = vec![
            ("no host specified", json!({}), Status::Success),
            ("empty host", json!({"nodeName": ""}), Status::Success),
            ("host matches", json!({"nodeName": "foo"}), Status::Success),
            (
                "host doesn't match",
                json!({"nodeName": "bar"}),
                Status::UnschedulableAndUnresolvable(ERR_REASON.into()),
            ),
        ];
        let ni = labeled_node("foo", json!({}));
        for (name, spec, want) in cases {
            assert_eq!(NodeName.filter(&st(), &pod("p", spec), &ni), want, "{name}");
        }
    }
}
