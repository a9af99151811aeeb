//! Namespaces (upstream `pkg/registry/core/namespace`): created `Active`; a deleted namespace stays
//! `Terminating` until `spec.finalizers` (emptied through `finalize` by the namespace controller)
//! and `metadata.finalizers` are gone.

use apimachinery::resources::Resource;
use serde_json::{json, Value};

use crate::registry::{generic, Strategy};

pub struct NamespaceStrategy;

impl Strategy for NamespaceStrategy {
    fn prepare_for_create(&self, resource: &Resource, obj: &mut Value) {
        generic::prepare_meta_for_create(resource, obj);
        generic::set_top(obj, "status", Some(json!({"phase": "Active"})));
    }

    fn deletion_blocked(&self, obj: &Value) -> bool {
        obj.pointer("/spec/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|f| !f.is_empty())
    }

    fn mark_terminating(&self, obj: &mut Value) {
        obj["status"]["phase"] = "Terminating".into();
    }
}

/// The `finalize` subresource: only `spec.finalizers` changes, from the request.
pub fn prepare_for_finalize(new: &Value, old: &Value) -> Value {
    let mut finalized = old.clone();
    finalized["spec"]["finalizers"] = new
        .pointer("/spec/finalizers")
        .cloned()
        .unwrap_or(Value::Array(vec![]));
    finalized
}

#[cfg(test)]
mod tests {
    use super::*;
    use apimachinery::resources::Registry;

    #[test]
    fn namespaces_start_active_and_wait_for_spec_finalizers() {
        let nss = Registry::with_builtin()
            .get("", "v1", "namespaces")
            .unwrap();
        let mut ns = json!({"metadata": {"name": "a"}, "spec": {"finalizers": ["kubernetes"]}});
        NamespaceStrategy.prepare_for_create(&nss, &mut ns);
        assert_eq!(ns["status"]["phase"], "Active");
        assert!(NamespaceStrategy.deletion_blocked(&ns));
        let finalized = prepare_for_finalize(
            &json!({"spec": {"finalizers": []}, "metadata": {"labels": {"x": "y"}}}),
            &ns,
        );
        assert!(!NamespaceStrategy.deletion_blocked(&finalized));
        assert!(
            finalized["metadata"].get("labels").is_none(),
            "only the finalizers change"
        );
        let mut terminating = finalized.clone();
        NamespaceStrategy.mark_terminating(&mut terminating);
        assert_eq!(terminating["status"]["phase"], "Terminating");
    }
}
