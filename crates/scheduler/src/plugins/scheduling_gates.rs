//! SchedulingGates (upstream `schedulinggates`): a pod with `spec.schedulingGates` is kept out of
//! activeQ (PreEnqueue) until every gate is removed.

use k8s_openapi::api::core::v1::Pod;

use crate::framework::{action, ClusterEvent, EventResource, Plugin, PreEnqueuePlugin, Status};

pub struct SchedulingGates;

impl Plugin for SchedulingGates {
    fn name(&self) -> &'static str {
        "SchedulingGates"
    }
    fn events_to_register(&self) -> Vec<ClusterEvent> {
        vec![ClusterEvent::new(
            EventResource::UnscheduledPod,
            action::UPDATE_POD_GATES,
        )]
    }
    fn as_pre_enqueue(&self) -> Option<&dyn PreEnqueuePlugin> {
        Some(self)
    }
}

impl PreEnqueuePlugin for SchedulingGates {
    fn pre_enqueue(&self, pod: &Pod) -> Status {
        let gates = pod
            .spec
            .as_ref()
            .and_then(|s| s.scheduling_gates.as_deref())
            .unwrap_or_default();
        if gates.is_empty() {
            return Status::Success;
        }
        let names: Vec<&str> = gates.iter().map(|g| g.name.as_str()).collect();
        Status::Pending(format!(
            "waiting for scheduling gates: [{}]",
            names.join(" ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testutil::pod;
    use serde_json::json;

    #[test]
    fn gates_keep_pods_pending() {
        let cases = [
            (json!({}), Status::Success),
            (json!({"schedulingGates": []}), Status::Success),
            (
                json!({"schedulingGates": [{"name": "foo"}, {"name": "bar"}]}),
                Status::Pending("waiting for scheduling gates: [foo bar]".into()),
            ),
        ];
        for (spec, want) in cases {
            assert_eq!(
                SchedulingGates.pre_enqueue(&pod("p", spec.clone())),
                want,
                "{spec}"
            );
        }
    }
}
