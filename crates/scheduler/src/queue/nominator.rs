//! Pods nominated to nodes by preemption (upstream `nominator` in `internal/queue`): a pod whose
//! `status.nominatedNodeName` is set waits for its victims to go, and the scheduler counts it on
//! that node when filtering other pods of equal or lower priority.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use crate::framework::PodInfo;

#[derive(Default)]
struct Inner {
    by_node: HashMap<String, Vec<Arc<PodInfo>>>,
    node_of: HashMap<String, String>,
}

#[derive(Default)]
pub struct Nominator {
    inner: RwLock<Inner>,
    /// Number of nominated pods, read without the lock on the filter hot path.
    count: AtomicUsize,
}

fn key(pi: &PodInfo) -> String {
    format!("{}/{}", pi.namespace(), pi.name())
}

impl Nominator {
    /// Nominates the pod to `node` (replacing an earlier nomination).
    pub fn add(&self, pi: Arc<PodInfo>, node: &str) {
        let k = key(&pi);
        let mut g = self.inner.write().unwrap_or_else(|e| e.into_inner());
        remove(&mut g, &k);
        g.node_of.insert(k, node.to_string());
        g.by_node.entry(node.to_string()).or_default().push(pi);
        self.count.store(g.node_of.len(), Ordering::Relaxed);
    }

    pub fn delete(&self, pod_key: &str) {
        if self.count.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut g = self.inner.write().unwrap_or_else(|e| e.into_inner());
        remove(&mut g, pod_key);
        self.count.store(g.node_of.len(), Ordering::Relaxed);
    }

    /// No pod is nominated anywhere (read without the lock).
    pub fn is_empty(&self) -> bool {
        self.count.load(Ordering::Relaxed) == 0
    }

    pub fn nominated_pods_for_node(&self, node: &str) -> Vec<Arc<PodInfo>> {
        if self.count.load(Ordering::Relaxed) == 0 {
            return Vec::new();
        }
        let g = self.inner.read().unwrap_or_else(|e| e.into_inner());
        g.by_node.get(node).cloned().unwrap_or_default()
    }

    pub fn nominated_node_of(&self, pod_key: &str) -> Option<String> {
        let g = self.inner.read().unwrap_or_else(|e| e.into_inner());
        g.node_of.get(pod_key).cloned()
    }
}

fn remove(g: &mut Inner, k: &str) {
    if let Some(node) = g.node_of.remove(k) {
        if let Some(list) = g.by_node.get_mut(&node) {
            list.retain(|p| key(p) != k);
            if list.is_empty() {
                g.by_node.remove(&node);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pi(name: &str) -> Arc<PodInfo> {
        Arc::new(PodInfo::new(Arc::new(
            serde_json::from_value(json!({"metadata": {"name": name, "namespace": "ns"}})).unwrap(),
        )))
    }

    #[test]
    fn nominate_move_and_delete() {
        let n = Nominator::default();
        assert!(n.nominated_pods_for_node("a").is_empty());
        n.add(pi("p"), "a");
        n.add(pi("q"), "a");
        assert_eq!(n.nominated_pods_for_node("a").len(), 2);
        n.add(pi("p"), "b");
        assert_eq!(n.nominated_pods_for_node("a").len(), 1);
        assert_eq!(n.nominated_node_of("ns/p").as_deref(), Some("b"));
        n.delete("ns/p");
        n.delete("ns/q");
        assert!(n.nominated_pods_for_node("a").is_empty());
        assert!(n.nominated_pods_for_node("b").is_empty());
    }
}
