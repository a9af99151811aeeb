//! Events (core `v1` and `events.k8s.io`): no garbage collection finalizers (upstream's event
//! strategy answers `Unsupported`), so deleting an Event never waits for dependents.

use crate::registry::{GcPolicy, Strategy};

pub struct EventStrategy;

impl Strategy for EventStrategy {
    fn default_gc_policy(&self, _version: &str) -> GcPolicy {
        GcPolicy::Unsupported
    }
}
