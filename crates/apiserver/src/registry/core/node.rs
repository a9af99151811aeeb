//! Nodes: registered with their status by the kubelet, so a create keeps the status it was sent
//! (upstream's `nodeStrategy.PrepareForCreate` resets only `spec.configSource`-era fields).

use apimachinery::resources::Resource;
use serde_json::Value;

use crate::registry::{generic, Strategy};

pub struct NodeStrategy;

impl Strategy for NodeStrategy {
    fn prepare_for_create(&self, resource: &Resource, obj: &mut Value) {
        generic::prepare_meta_for_create(resource, obj);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use apimachinery::resources::Registry;
    use serde_json::json;

    #[test]
    fn a_created_node_keeps_its_status() {
        let nodes = Registry::with_builtin().get("", "v1", "nodes").unwrap();
        let mut node = json!({"metadata": {"name": "n"}, "status": {"capacity": {"cpu": "2"}}});
        NodeStrategy.prepare_for_create(&nodes, &mut node);
        assert_eq!(node["status"]["capacity"]["cpu"], "2");
    }
}
