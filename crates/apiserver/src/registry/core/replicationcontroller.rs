//! ReplicationControllers: `v1` orphans its pods on a delete that names no policy (upstream's
//! `rcStrategy.DefaultGarbageCollectionPolicy`, kept for backward compatibility).

use crate::registry::{GcPolicy, Strategy};

pub struct ReplicationControllerStrategy;

impl Strategy for ReplicationControllerStrategy {
    fn default_gc_policy(&self, version: &str) -> GcPolicy {
        if version == "v1" {
            GcPolicy::OrphanDependents
        } else {
            GcPolicy::DeleteDependents
        }
    }
}
