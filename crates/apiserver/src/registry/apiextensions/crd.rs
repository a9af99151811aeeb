//! CustomResourceDefinitions (upstream `apiextensions-apiserver/pkg/registry/customresourcedefinition`):
//! the storage version is always among `status.storedVersions`, and a deleted CRD first deletes its
//! custom resources (the `customresourcecleanup` finalizer, run by [`crate::crd::finalizer`]).

use apimachinery::resources::Resource;
use serde_json::{json, Value};

use crate::registry::{generic, Strategy};

pub struct CrdStrategy;

impl Strategy for CrdStrategy {
    fn prepare_for_create(&self, resource: &Resource, obj: &mut Value) {
        generic::prepare_for_create(resource, obj);
        add_stored_version(obj);
    }

    fn prepare_for_update(&self, resource: &Resource, new: &mut Value, old: &Value) {
        generic::prepare_for_update(resource, new, old);
        add_stored_version(new);
    }

    fn on_first_delete(&self, new: &mut Value, finalizers: &mut Vec<String>) {
        crate::crd::finalizer::mark_for_deletion(new, finalizers);
    }
}

/// Adds the storage version to `status.storedVersions`, so that objects written in it can be
/// found again.
fn add_stored_version(crd: &mut Value) {
    let storage = crd["spec"]["versions"]
        .as_array()
        .and_then(|vs| vs.iter().find(|v| v["storage"].as_bool() == Some(true)))
        .and_then(|v| v["name"].as_str())
        .map(str::to_string);
    let Some(storage) = storage else { return };
    if !crd["status"].is_object() {
        crd["status"] = json!({});
    }
    let stored = &mut crd["status"]["storedVersions"];
    if !stored.is_array() {
        *stored = json!([]);
    }
    if let Some(list) = stored.as_array_mut() {
        if !list.iter().any(|v| v == storage.as_str()) {
            list.push(storage.into());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use apimachinery::resources::Registry;

    #[test]
    fn the_storage_version_is_recorded_on_create_and_update() {
        let crds = Registry::with_builtin()
            .get("apiextensions.k8s.io", "v1", "customresourcedefinitions")
            .unwrap();
        let mut crd = json!({"metadata": {"name": "w"}, "spec": {"versions": [
            {"name": "v1", "storage": true}]}, "status": {"storedVersions": ["v0"]}});
        CrdStrategy.prepare_for_create(&crds, &mut crd);
        assert_eq!(crd["status"]["storedVersions"], json!(["v1"]));
        let old = crd.clone();
        let mut new = json!({"metadata": {"name": "w"}, "spec": {"versions": [
            {"name": "v1", "storage": false}, {"name": "v2", "storage": true}]}});
        CrdStrategy.prepare_for_update(&crds, &mut new, &old);
        assert_eq!(new["status"]["storedVersions"], json!(["v1", "v2"]));
    }
}
