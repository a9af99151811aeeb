//! StorageObjectInUseProtection admission (upstream
//! `plugin/pkg/admission/storage/storageobjectinuseprotection`): new PersistentVolumeClaims get the
//! `kubernetes.io/pvc-protection` finalizer and new PersistentVolumes `kubernetes.io/pv-protection`,
//! so a claim still used by a pod, or a volume still bound to a claim, is not removed under it. The
//! PVC and PV protection controllers remove the finalizers once nothing uses the object.

use apimachinery::status::ApiError;
use serde_json::{json, Value};

use super::{Attributes, Operation};
use crate::ApiServer;

pub const PVC_PROTECTION: &str = "kubernetes.io/pvc-protection";
pub const PV_PROTECTION: &str = "kubernetes.io/pv-protection";

/// The plugin (upstream `StorageObjectInUseProtection`): mutating, on claim and volume creates.
pub struct StorageObjectInUseProtection;

#[async_trait::async_trait]
impl super::Plugin for StorageObjectInUseProtection {
    fn name(&self) -> &'static str {
        "StorageObjectInUseProtection"
    }

    fn handles(&self, attrs: &Attributes<'_>) -> bool {
        attrs.operation == Operation::Create
            && attrs.group.is_empty()
            && attrs.subresource.is_none()
            && finalizer_for(attrs.resource).is_some()
    }

    async fn admit(
        &self,
        _api: &ApiServer,
        attrs: &Attributes<'_>,
        object: &mut Value,
        _old: Option<&Value>,
    ) -> Result<(), ApiError> {
        if let Some(finalizer) = finalizer_for(attrs.resource) {
            add_finalizer(object, finalizer);
        }
        Ok(())
    }
}

/// The protection finalizer of a core resource, if it has one.
pub fn finalizer_for(resource: &str) -> Option<&'static str> {
    match resource {
        "persistentvolumeclaims" => Some(PVC_PROTECTION),
        "persistentvolumes" => Some(PV_PROTECTION),
        _ => None,
    }
}

/// Appends `finalizer` to the object's finalizers unless it is there.
pub fn add_finalizer(object: &mut Value, finalizer: &str) {
    let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let list = meta.entry("finalizers").or_insert_with(|| json!([]));
    if list.is_null() {
        *list = json!([]);
    }
    if let Some(list) = list.as_array_mut() {
        if !list.iter().any(|f| f == finalizer) {
            list.push(Value::String(finalizer.to_string()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_and_volumes_get_their_finalizer_once() {
        let mut pvc = json!({"metadata": {"name": "c"}});
        add_finalizer(&mut pvc, finalizer_for("persistentvolumeclaims").unwrap());
        assert_eq!(pvc["metadata"]["finalizers"], json!([PVC_PROTECTION]));
        add_finalizer(&mut pvc, PVC_PROTECTION);
        assert_eq!(pvc["metadata"]["finalizers"], json!([PVC_PROTECTION]));

        let mut pv = json!({"metadata": {"name": "v", "finalizers": ["example.com/keep"]}});
        add_finalizer(&mut pv, finalizer_for("persistentvolumes").unwrap());
        assert_eq!(
            pv["metadata"]["finalizers"],
            json!(["example.com/keep", PV_PROTECTION])
        );
    }

    #[test]
    fn other_resources_have_no_protection_finalizer() {
        assert_eq!(finalizer_for("pods"), None);
        assert_eq!(finalizer_for("configmaps"), None);
    }
}
