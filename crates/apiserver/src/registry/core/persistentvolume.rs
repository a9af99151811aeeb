//! PersistentVolumes and PersistentVolumeClaims: created `Pending` whatever status was sent
//! (upstream's `persistentvolume`/`persistentvolumeclaim` strategies).

use apimachinery::resources::Resource;
use serde_json::{json, Value};

use crate::registry::{generic, Strategy};

pub struct VolumeStrategy;

impl Strategy for VolumeStrategy {
    fn prepare_for_create(&self, resource: &Resource, obj: &mut Value) {
        generic::prepare_meta_for_create(resource, obj);
        generic::set_top(obj, "status", Some(json!({"phase": "Pending"})));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use apimachinery::resources::Registry;

    #[test]
    fn claims_start_pending() {
        let pvcs = Registry::with_builtin()
            .get("", "v1", "persistentvolumeclaims")
            .unwrap();
        let mut pvc = json!({"metadata": {"name": "c"}, "status": {"phase": "Bound"}});
        VolumeStrategy.prepare_for_create(&pvcs, &mut pvc);
        assert_eq!(pvc["status"], json!({"phase": "Pending"}));
    }
}
