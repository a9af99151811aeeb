//! Jobs (upstream `pkg/registry/batch/job`): the selector and the pod template's labels are
//! defaulted from the new Job's UID (unless `manualSelector`), and `batch/v1` orphans its pods on
//! a delete that names no policy, for backward compatibility.

use serde_json::Value;

use crate::registry::{GcPolicy, Strategy};

pub struct JobStrategy;

impl Strategy for JobStrategy {
    fn after_create_defaulting(&self, obj: &mut Value, uid: &str) {
        apimachinery::defaults::default_job_selector(obj, uid);
    }

    fn default_gc_policy(&self, version: &str) -> GcPolicy {
        if version == "v1" {
            GcPolicy::OrphanDependents
        } else {
            GcPolicy::DeleteDependents
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_new_job_gets_a_selector_from_its_uid() {
        let mut job = json!({"metadata": {"name": "j"}, "spec": {"template": {"spec": {}}}});
        JobStrategy.after_create_defaulting(&mut job, "uid-1");
        assert_eq!(
            job.pointer("/spec/selector/matchLabels/batch.kubernetes.io~1controller-uid"),
            Some(&json!("uid-1"))
        );
        assert_eq!(
            JobStrategy.default_gc_policy("v1"),
            GcPolicy::OrphanDependents
        );
    }
}
