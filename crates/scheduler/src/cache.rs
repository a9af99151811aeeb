//! The scheduler cache (upstream `internal/cache`): every node with the pods placed on it — bound pods
//! from the informer and *assumed* pods, placed by the scheduler before their binding is confirmed — so
//! the next pod is scheduled against the capacity the previous ones took. Node infos are shared with
//! snapshots copy-on-write (`Arc::make_mut`): a cycle's snapshot costs one `Arc` per node.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};

use crate::framework::NodeInfo;

pub fn pod_key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or(""),
        pod.metadata.name.as_deref().unwrap_or("")
    )
}

fn terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

#[derive(Default)]
pub struct Cache {
    nodes: BTreeMap<String, Arc<NodeInfo>>,
    /// Pod key -> the node it is placed on (bound or assumed).
    placed: HashMap<String, String>,
    /// Pods placed by the scheduler whose binding the informer has not shown yet.
    assumed: HashMap<String, Arc<Pod>>,
}

impl Cache {
    pub fn update_node(&mut self, node: Arc<Node>) {
        let name = node.metadata.name.clone().unwrap_or_default();
        let mut info = NodeInfo::new(node);
        if let Some(old) = self.nodes.get(&name) {
            for p in &old.pods {
                info.add_pod(p.clone());
            }
        }
        self.nodes.insert(name, Arc::new(info));
    }

    pub fn remove_node(&mut self, name: &str) {
        self.nodes.remove(name);
    }

    /// A pod from the informer: bound ones take their node's capacity (terminal ones no longer do).
    pub fn update_pod(&mut self, pod: Arc<Pod>) {
        let key = pod_key(&pod);
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        if node.is_empty() {
            return;
        }
        self.assumed.remove(&key);
        self.unplace(&key, &pod);
        if terminal(&pod) {
            return;
        }
        if let Some(info) = self.nodes.get_mut(&node) {
            Arc::make_mut(info).add_pod(pod);
        }
        self.placed.insert(key, node);
    }

    pub fn remove_pod(&mut self, pod: &Pod) {
        let key = pod_key(pod);
        self.assumed.remove(&key);
        self.unplace(&key, pod);
    }

    fn unplace(&mut self, key: &str, pod: &Pod) {
        if let Some(node) = self.placed.remove(key) {
            if let Some(info) = self.nodes.get_mut(&node) {
                Arc::make_mut(info).remove_pod(
                    pod.metadata.namespace.as_deref().unwrap_or(""),
                    pod.metadata.name.as_deref().unwrap_or(""),
                );
            }
        }
    }

    /// Places a pod on a node before its binding is confirmed.
    pub fn assume(&mut self, pod: Arc<Pod>, node: &str) {
        let key = pod_key(&pod);
        if let Some(info) = self.nodes.get_mut(node) {
            Arc::make_mut(info).add_pod(pod.clone());
        }
        self.placed.insert(key.clone(), node.to_string());
        self.assumed.insert(key, pod);
    }

    /// Undoes an assumption (the binding failed).
    pub fn forget(&mut self, key: &str) {
        if let Some(pod) = self.assumed.remove(key) {
            self.unplace(key, &pod);
        }
    }

    pub fn is_placed(&self, key: &str) -> bool {
        self.placed.contains_key(key)
    }

    /// The nodes, in name order, for one scheduling cycle.
    pub fn snapshot(&self) -> Vec<Arc<NodeInfo>> {
        self.nodes.values().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str) -> Arc<Node> {
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": name},
                "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}}))
            .unwrap(),
        )
    }

    fn pod(name: &str, node: Option<&str>, phase: &str) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": name, "namespace": "default"},
                "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
                "status": {"phase": phase}}))
            .unwrap(),
        )
    }

    fn cpu_on(cache: &Cache, node: &str) -> i64 {
        cache.nodes[node].requested.milli_cpu
    }

    #[test]
    fn assumed_and_bound_pods_take_capacity_once() {
        let mut c = Cache::default();
        c.update_node(node("n1"));
        c.assume(pod("a", Some("n1"), "Pending"), "n1");
        assert_eq!(cpu_on(&c, "n1"), 1000);
        // The informer confirms the binding: still counted once.
        c.update_pod(pod("a", Some("n1"), "Pending"));
        assert_eq!(cpu_on(&c, "n1"), 1000);
        // A node update keeps the pods.
        c.update_node(node("n1"));
        assert_eq!(cpu_on(&c, "n1"), 1000);
        // Terminal pods give the capacity back.
        c.update_pod(pod("a", Some("n1"), "Succeeded"));
        assert_eq!(cpu_on(&c, "n1"), 0);
        c.assume(pod("b", Some("n1"), "Pending"), "n1");
        c.forget("default/b");
        assert_eq!(cpu_on(&c, "n1"), 0);
        assert!(!c.is_placed("default/b"));
        // Snapshots are not changed by later placements.
        let snap = c.snapshot();
        c.assume(pod("d", Some("n1"), "Pending"), "n1");
        assert_eq!(snap[0].requested.milli_cpu, 0);
        assert_eq!(cpu_on(&c, "n1"), 1000);
        c.remove_pod(&pod("d", Some("n1"), "Pending"));
        assert_eq!(cpu_on(&c, "n1"), 0);
    }
}
