//! The `apps` workloads (Deployments, ReplicaSets, StatefulSets, DaemonSets): upstream's status
//! strategies of all four reset labels too ("status must not modify labels").

use apimachinery::resources::Resource;
use serde_json::Value;

use super::{generic, Strategy};

pub struct WorkloadStrategy;

impl Strategy for WorkloadStrategy {
    fn prepare_for_status_update(&self, _resource: &Resource, new: &mut Value, old: &Value) {
        generic::prepare_for_status_update(new, old);
        generic::set_meta_field(new, "labels", generic::old_meta(old, "labels"));
    }
}
