//! Builders for plugin tests: pods and nodes from JSON fragments, a handle whose listers hold
//! storage objects.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::{json, Value};

use crate::framework::{Handle, NodeInfo};

/// A pod named `name` whose `spec` is `spec` (containers default to one empty container).
pub fn pod(name: &str, mut spec: Value) -> Pod {
    if spec.get("containers").is_none() {
        spec["containers"] = json!([{"name": "c"}]);
    }
    serde_json::from_value(
        json!({"metadata": {"name": name, "namespace": "default"}, "spec": spec}),
    )
    .unwrap()
}

/// A pod with one container per request map.
pub fn pod_with_requests(name: &str, requests: &[Value]) -> Pod {
    let containers: Vec<Value> = requests
        .iter()
        .enumerate()
        .map(|(i, r)| json!({"name": format!("c{i}"), "resources": {"requests": r}}))
        .collect();
    pod(name, json!({ "containers": containers }))
}

/// A node named `name` with extra `metadata` fields, `spec` and `status.allocatable`.
pub fn node(name: &str, metadata: Value, spec: Value, allocatable: Value) -> Node {
    let mut meta = metadata;
    if meta.is_null() {
        meta = json!({});
    }
    meta["name"] = json!(name);
    serde_json::from_value(
        json!({"metadata": meta, "spec": spec, "status": {"allocatable": allocatable}}),
    )
    .unwrap()
}

/// A NodeInfo of `node` holding `pods`.
pub fn node_info(node: Node, pods: Vec<Pod>) -> NodeInfo {
    let mut ni = NodeInfo::new(Arc::new(node));
    for p in pods {
        ni.add_pod(Arc::new(p));
    }
    ni
}

/// A plain node with labels (no taints, no allocatable).
pub fn labeled_node(name: &str, labels: Value) -> NodeInfo {
    node_info(
        node(name, json!({ "labels": labels }), json!({}), json!({})),
        vec![],
    )
}

/// A plain node with taints.
pub fn tainted_node(name: &str, taints: Value) -> NodeInfo {
    node_info(
        node(name, json!({}), json!({ "taints": taints }), json!({})),
        vec![],
    )
}

/// An empty cycle state (plugins that need none).
pub fn st() -> crate::framework::CycleState {
    crate::framework::CycleState::new(Arc::new(crate::cache::Snapshot::default()))
}

/// A cycle state over these nodes.
pub fn st_of(nodes: &[NodeInfo]) -> crate::framework::CycleState {
    crate::framework::CycleState::new(Arc::new(crate::cache::Snapshot::new(
        nodes.iter().cloned().map(Arc::new).collect(),
    )))
}

/// A handle whose listers hold `objects` (claims, volumes, classes and CSINodes, told apart by
/// `kind`).
pub fn handle_with(objects: &[Value]) -> Handle {
    fn parse<T: serde::de::DeserializeOwned>(o: &Value) -> Arc<T> {
        Arc::new(serde_json::from_value(o.clone()).unwrap())
    }
    let h = Handle::default();
    for o in objects {
        match o["kind"].as_str() {
            Some("PersistentVolumeClaim") => {
                h.listers.pvcs.upsert(parse(o));
            }
            Some("PersistentVolume") => {
                h.listers.pvs.upsert(parse(o));
            }
            Some("StorageClass") => {
                h.listers.storage_classes.upsert(parse(o));
            }
            Some("CSINode") => {
                h.listers.csi_nodes.upsert(parse(o));
            }
            _ => panic!("unexpected {o}"),
        }
    }
    h
}
