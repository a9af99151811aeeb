//! Services (upstream `pkg/registry/core/service`): cluster IPs and node ports are allocated on
//! create and released on delete (by `crate::allocator` through the REST handlers); an update
//! that leaves allocated values out keeps them.

use apimachinery::resources::Resource;
use serde_json::Value;

use crate::registry::{generic, Strategy};

pub struct ServiceStrategy;

impl Strategy for ServiceStrategy {
    fn prepare_for_update(&self, resource: &Resource, new: &mut Value, old: &Value) {
        generic::prepare_for_update(resource, new, old);
        keep_allocations(new, old);
    }

    fn allocates_addresses(&self) -> bool {
        true
    }
}

/// An update that leaves out a Service's allocated address or node ports keeps them (upstream's
/// service REST does the same before validating that they did not change).
fn keep_allocations(new: &mut Value, old: &Value) {
    for field in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
        let missing = new
            .pointer(&format!("/spec/{field}"))
            .is_none_or(|v| v.is_null() || v == "");
        if missing {
            if let Some(v) = old.pointer(&format!("/spec/{field}")) {
                new["spec"][field] = v.clone();
            }
        }
    }
    let old_ports = old
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if let Some(ports) = new.pointer_mut("/spec/ports").and_then(Value::as_array_mut) {
        for port in ports {
            if port
                .get("nodePort")
                .is_some_and(|p| p.as_u64().unwrap_or(0) != 0)
            {
                continue;
            }
            let same = old_ports.iter().find(|o| {
                o.get("port") == port.get("port") && o.get("protocol") == port.get("protocol")
            });
            if let Some(node_port) = same.and_then(|o| o.get("nodePort")) {
                port["nodePort"] = node_port.clone();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use apimachinery::resources::Registry;
    use serde_json::json;

    #[test]
    fn an_update_keeps_allocated_addresses_and_node_ports() {
        let svcs = Registry::with_builtin().get("", "v1", "services").unwrap();
        let old = json!({"metadata": {"name": "s", "uid": "u"}, "spec": {"clusterIP": "10.0.0.5",
            "clusterIPs": ["10.0.0.5"], "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30080}]}});
        let mut new = json!({"metadata": {"name": "s"}, "spec": {"clusterIP": "",
            "ports": [{"port": 80, "protocol": "TCP"}, {"port": 81, "protocol": "TCP"}]}});
        ServiceStrategy.prepare_for_update(&svcs, &mut new, &old);
        assert_eq!(new["spec"]["clusterIP"], "10.0.0.5");
        assert_eq!(new["spec"]["clusterIPs"], json!(["10.0.0.5"]));
        assert_eq!(new["spec"]["ports"][0]["nodePort"], 30080);
        assert!(new["spec"]["ports"][1].get("nodePort").is_none());
        assert_eq!(new["metadata"]["uid"], "u");
    }
}
