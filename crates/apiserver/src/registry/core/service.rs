//! Services (upstream `pkg/registry/core/service`): cluster IPs and node ports are allocated on
//! create, on type changes and released on delete (by `crate::allocator` through the REST
//! handlers). On update, allocated values the client left out are kept (upstream's
//! `patchAllocatedValues`) and values the new type cannot have are dropped when the client did not
//! change them (upstream's `dropTypeDependentFields`), so `kubectl patch` of `spec.type` alone
//! works both ways.

use apimachinery::resources::Resource;
use serde_json::Value;

use crate::registry::{generic, Strategy};

pub struct ServiceStrategy;

impl Strategy for ServiceStrategy {
    fn prepare_for_update(&self, resource: &Resource, new: &mut Value, old: &Value) {
        generic::prepare_for_update(resource, new, old);
        keep_allocations(new, old);
        drop_type_dependent_fields(new, old);
    }

    fn allocates_addresses(&self) -> bool {
        true
    }
}

fn service_type(svc: &Value) -> &str {
    svc.pointer("/spec/type")
        .and_then(Value::as_str)
        .unwrap_or("ClusterIP")
}

fn needs_cluster_ip(svc: &Value) -> bool {
    service_type(svc) != "ExternalName"
}

fn needs_node_ports(svc: &Value) -> bool {
    matches!(service_type(svc), "NodePort" | "LoadBalancer")
}

fn externally_accessible(svc: &Value) -> bool {
    needs_node_ports(svc)
        || svc
            .pointer("/spec/externalIPs")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty())
}

fn spec<'a>(svc: &'a Value, field: &str) -> Option<&'a Value> {
    svc.pointer(&format!("/spec/{field}"))
        .filter(|v| !v.is_null())
}

fn node_port_set(svc: &Value) -> Vec<u64> {
    let mut ports: Vec<u64> = svc
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|p| p.get("nodePort").and_then(Value::as_u64))
        .filter(|p| *p != 0)
        .collect();
    ports.sort_unstable();
    ports.dedup();
    ports
}

/// Upstream `patchAllocatedValues`: an update that leaves out a Service's allocated address, node
/// ports or health check node port keeps them, when the old and new types both use them.
fn keep_allocations(new: &mut Value, old: &Value) {
    if needs_cluster_ip(old) && needs_cluster_ip(new) {
        for field in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
            let missing = spec(new, field).is_none_or(|v| v == "");
            if missing {
                if let Some(v) = spec(old, field) {
                    new["spec"][field] = v.clone();
                }
            }
        }
    }
    if needs_node_ports(old) && needs_node_ports(new) {
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
    let needs_hc = |s: &Value| {
        service_type(s) == "LoadBalancer"
            && s.pointer("/spec/externalTrafficPolicy")
                .and_then(Value::as_str)
                == Some("Local")
    };
    if needs_hc(old) && needs_hc(new) && spec(new, "healthCheckNodePort").is_none_or(|v| v == 0) {
        if let Some(hc) = spec(old, "healthCheckNodePort") {
            new["spec"]["healthCheckNodePort"] = hc.clone();
        }
    }
}

/// Upstream `dropTypeDependentFields`: on a type change, the fields the new type cannot have are
/// cleared when the client left them as they were (they were most likely allocated or defaulted,
/// and are freed by the allocator); a value the client changed stays, for validation to refuse.
fn drop_type_dependent_fields(new: &mut Value, old: &Value) {
    let same = |field: &str, new: &Value| spec(old, field) == spec(new, field);
    let mut clear: Vec<&str> = Vec::new();
    if needs_cluster_ip(old) && !needs_cluster_ip(new) {
        if same("clusterIP", new) && same("clusterIPs", new) {
            clear.extend(["clusterIP", "clusterIPs"]);
        }
        if same("ipFamilies", new) {
            clear.push("ipFamilies");
        }
        if same("ipFamilyPolicy", new) {
            clear.push("ipFamilyPolicy");
        }
    }
    let needs_hc = |s: &Value| {
        service_type(s) == "LoadBalancer"
            && s.pointer("/spec/externalTrafficPolicy")
                .and_then(Value::as_str)
                == Some("Local")
    };
    if needs_hc(old) && !needs_hc(new) && same("healthCheckNodePort", new) {
        clear.push("healthCheckNodePort");
    }
    let was_lb = service_type(old) == "LoadBalancer";
    let is_lb = service_type(new) == "LoadBalancer";
    if was_lb && !is_lb {
        if spec(new, "allocateLoadBalancerNodePorts").is_some()
            && same("allocateLoadBalancerNodePorts", new)
        {
            clear.push("allocateLoadBalancerNodePorts");
        }
        if same("loadBalancerClass", new) {
            clear.push("loadBalancerClass");
        }
    }
    if externally_accessible(old)
        && !externally_accessible(new)
        && same("externalTrafficPolicy", new)
    {
        clear.push("externalTrafficPolicy");
    }
    // Node ports: only when no new one was added (upstream `sameNodePorts`: a subset of the old).
    let old_ports = node_port_set(old);
    let drop_node_ports = needs_node_ports(old)
        && !needs_node_ports(new)
        && node_port_set(new).iter().all(|p| old_ports.contains(p));
    if !is_lb {
        // Upstream empties the load balancer status at once (de-provisioning is asynchronous).
        if let Some(status) = new.get_mut("status").and_then(Value::as_object_mut) {
            if status.contains_key("loadBalancer") {
                status.insert("loadBalancer".into(), serde_json::json!({}));
            }
        }
    }
    let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    for field in clear {
        spec.remove(field);
    }
    if drop_node_ports {
        if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
            for port in ports.iter_mut().filter_map(Value::as_object_mut) {
                port.remove("nodePort");
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
        let old = json!({"metadata": {"name": "s", "uid": "u"}, "spec": {"type": "NodePort",
            "clusterIP": "10.0.0.5", "clusterIPs": ["10.0.0.5"],
            "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30080}]}});
        let mut new = json!({"metadata": {"name": "s"}, "spec": {"type": "NodePort",
            "clusterIP": "", "ports": [{"port": 80, "protocol": "TCP"}, {"port": 81, "protocol": "TCP"}]}});
        ServiceStrategy.prepare_for_update(&svcs, &mut new, &old);
        assert_eq!(new["spec"]["clusterIP"], "10.0.0.5");
        assert_eq!(new["spec"]["clusterIPs"], json!(["10.0.0.5"]));
        assert_eq!(new["spec"]["ports"][0]["nodePort"], 30080);
        assert!(new["spec"]["ports"][1].get("nodePort").is_none());
        assert_eq!(new["metadata"]["uid"], "u");
    }

    fn prepared(new: Value, old: &Value) -> Value {
        let svcs = Registry::with_builtin().get("", "v1", "services").unwrap();
        let mut new = new;
        ServiceStrategy.prepare_for_update(&svcs, &mut new, old);
        new
    }

    #[test]
    fn leaving_node_port_or_load_balancer_drops_what_only_they_use() {
        let old = json!({"metadata": {"name": "s"}, "spec": {"type": "LoadBalancer",
            "clusterIP": "10.0.0.5", "clusterIPs": ["10.0.0.5"], "externalTrafficPolicy": "Local",
            "healthCheckNodePort": 31000, "allocateLoadBalancerNodePorts": true,
            "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30080}]},
            "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}]}}});
        // `kubectl patch -p '{"spec":{"type":"ClusterIP"}}'`: everything else as it was.
        let mut patched = old.clone();
        patched["spec"]["type"] = json!("ClusterIP");
        let new = prepared(patched, &old);
        assert_eq!(new["spec"]["clusterIP"], "10.0.0.5");
        assert!(new["spec"]["ports"][0].get("nodePort").is_none());
        for gone in [
            "healthCheckNodePort",
            "externalTrafficPolicy",
            "allocateLoadBalancerNodePorts",
        ] {
            assert!(new["spec"].get(gone).is_none(), "{gone}");
        }
        assert_eq!(new["status"]["loadBalancer"], json!({}));

        // A node port the client changed stays, for validation to refuse.
        let mut changed = old.clone();
        changed["spec"]["type"] = json!("ClusterIP");
        changed["spec"]["ports"][0]["nodePort"] = json!(30099);
        let new = prepared(changed, &old);
        assert_eq!(new["spec"]["ports"][0]["nodePort"], 30099);

        // To ExternalName: the address goes too.
        let mut external = old.clone();
        external["spec"]["type"] = json!("ExternalName");
        external["spec"]["externalName"] = json!("example.com");
        let new = prepared(external, &old);
        for gone in ["clusterIP", "clusterIPs"] {
            assert!(new["spec"].get(gone).is_none(), "{gone}");
        }
    }

    #[test]
    fn values_are_kept_only_where_both_types_use_them() {
        let external = json!({"metadata": {"name": "s"}, "spec": {"type": "ExternalName",
            "externalName": "example.com"}});
        let to_cluster_ip = prepared(
            json!({"metadata": {"name": "s"}, "spec": {"type": "ClusterIP",
                "ports": [{"port": 80, "protocol": "TCP"}]}}),
            &external,
        );
        assert!(to_cluster_ip["spec"].get("clusterIP").is_none());

        let lb = json!({"metadata": {"name": "s"}, "spec": {"type": "LoadBalancer",
            "externalTrafficPolicy": "Local", "healthCheckNodePort": 31000,
            "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30080}]}});
        let put = prepared(
            json!({"metadata": {"name": "s"}, "spec": {"type": "LoadBalancer",
                "externalTrafficPolicy": "Local",
                "ports": [{"port": 80, "protocol": "TCP"}]}}),
            &lb,
        );
        assert_eq!(put["spec"]["healthCheckNodePort"], 31000);
        assert_eq!(put["spec"]["ports"][0]["nodePort"], 30080);
    }
}
