//! The scheduler cache (upstream `internal/cache`): every node with the pods placed on it — bound pods
//! from the informer and *assumed* pods, placed by the scheduler before their binding is confirmed —
//! so the next pod is scheduled against the capacity the previous ones took; the zone-aware node tree;
//! how many nodes hold each image. Snapshots are incremental (upstream `UpdateSnapshot`): only the
//! nodes changed since the last cycle are replaced in the kept snapshot, and node infos are shared
//! copy-on-write (`Arc::make_mut`), so an idle node costs nothing per cycle.
//! Assumed pods whose binding finished but never showed up in the informer expire after
//! [`ASSUMED_POD_TTL`] (upstream's default is now to never expire them).

mod node_tree;
mod snapshot;

pub use node_tree::{zone_key, NodeTree};
pub use snapshot::Snapshot;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};

use crate::framework::{NodeInfo, PodInfo};

/// How long an assumed pod whose binding finished may go unconfirmed by the informer.
pub const ASSUMED_POD_TTL: Duration = Duration::from_secs(30);

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

struct Assumed {
    pod: Arc<Pod>,
    /// Set when the binding finished: the pod expires if still unconfirmed then.
    deadline: Option<Instant>,
}

#[derive(Default)]
pub struct Cache {
    nodes: HashMap<String, Arc<NodeInfo>>,
    tree: NodeTree,
    /// Pod key -> the node it is placed on (bound or assumed).
    placed: HashMap<String, String>,
    /// Pods placed by the scheduler whose binding the informer has not shown yet.
    assumed: HashMap<String, Assumed>,
    /// Image name -> number of nodes that have it.
    images: HashMap<String, usize>,
    generation: u64,
    /// Nodes changed since the last snapshot update.
    dirty: HashSet<String>,
    tree_changed: bool,
    images_changed: bool,
    snapshot: Arc<Snapshot>,
}

impl Cache {
    fn touch(&mut self, name: &str) {
        self.generation += 1;
        if let Some(info) = self.nodes.get_mut(name) {
            Arc::make_mut(info).generation = self.generation;
        }
        self.dirty.insert(name.to_string());
    }

    fn count_images(&mut self, info: &NodeInfo, sign: isize) {
        for name in info.image_sizes.keys() {
            let e = self.images.entry(name.clone()).or_insert(0);
            *e = e.saturating_add_signed(sign);
            if *e == 0 {
                self.images.remove(name);
            }
        }
        if !info.image_sizes.is_empty() {
            self.images_changed = true;
        }
    }

    pub fn update_node(&mut self, node: Arc<Node>) {
        let name = node.metadata.name.clone().unwrap_or_default();
        if self.tree.add(&node) {
            self.tree_changed = true;
        }
        match self.nodes.get(&name).cloned() {
            Some(old) => {
                self.count_images(&old, -1);
                let info = self.nodes.get_mut(&name).map(Arc::make_mut);
                if let Some(info) = info {
                    info.set_node(node);
                }
            }
            None => {
                self.nodes
                    .insert(name.clone(), Arc::new(NodeInfo::new(node)));
            }
        }
        if let Some(info) = self.nodes.get(&name).cloned() {
            self.count_images(&info, 1);
        }
        self.touch(&name);
    }

    pub fn remove_node(&mut self, name: &str) {
        if let Some(old) = self.nodes.remove(name) {
            self.count_images(&old, -1);
        }
        self.tree.remove(name);
        self.tree_changed = true;
        self.dirty.remove(name);
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
        self.touch(&node);
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
            self.touch(&node);
        }
    }

    /// Places a pod on a node before its binding is confirmed.
    pub fn assume(&mut self, pod: Arc<Pod>, node: &str) {
        self.assume_info(Arc::new(PodInfo::new(pod)), node);
    }

    pub fn assume_info(&mut self, pi: Arc<PodInfo>, node: &str) {
        let key = format!("{}/{}", pi.namespace(), pi.name());
        let pod = pi.pod.clone();
        if let Some(info) = self.nodes.get_mut(node) {
            Arc::make_mut(info).add_pod_info(pi);
        }
        self.touch(node);
        self.placed.insert(key.clone(), node.to_string());
        self.assumed.insert(
            key,
            Assumed {
                pod,
                deadline: None,
            },
        );
    }

    /// The binding of an assumed pod finished: it expires unless the informer confirms it.
    pub fn finish_binding(&mut self, key: &str) {
        if let Some(a) = self.assumed.get_mut(key) {
            a.deadline = Some(Instant::now() + ASSUMED_POD_TTL);
        }
    }

    /// Undoes an assumption (the binding failed).
    pub fn forget(&mut self, key: &str) {
        if let Some(a) = self.assumed.remove(key) {
            self.unplace(key, &a.pod);
        }
    }

    /// Forgets assumed pods whose binding finished long ago without confirmation.
    pub fn cleanup_expired(&mut self, now: Instant) {
        let expired: Vec<String> = self
            .assumed
            .iter()
            .filter(|(_, a)| a.deadline.is_some_and(|d| d <= now))
            .map(|(k, _)| k.clone())
            .collect();
        for k in expired {
            tracing::warn!(pod = %k, "assumed pod expired");
            self.forget(&k);
        }
    }

    pub fn is_placed(&self, key: &str) -> bool {
        self.placed.contains_key(key)
    }

    pub fn is_assumed(&self, key: &str) -> bool {
        self.assumed.contains_key(key)
    }

    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// Brings the kept snapshot up to date and returns it (upstream `UpdateSnapshot`).
    pub fn snapshot(&mut self) -> Arc<Snapshot> {
        if self.dirty.is_empty() && !self.tree_changed && !self.images_changed {
            return self.snapshot.clone();
        }
        let snap = Arc::make_mut(&mut self.snapshot);
        if self.tree_changed {
            let nodes = self
                .tree
                .list()
                .into_iter()
                .filter_map(|n| self.nodes.get(&n).cloned())
                .collect();
            snap.set_nodes(nodes);
            self.tree_changed = false;
        } else {
            snap.begin_update();
            for name in self.dirty.iter() {
                if let Some(info) = self.nodes.get(name) {
                    snap.replace(info.clone());
                }
            }
        }
        self.dirty.clear();
        if self.images_changed {
            snap.image_num_nodes = Arc::new(self.images.clone());
            self.images_changed = false;
        }
        self.snapshot.clone()
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

    fn zoned(name: &str, zone: &str) -> Arc<Node> {
        Arc::new(
            serde_json::from_value(
                json!({"metadata": {"name": name, "labels": {"topology.kubernetes.io/zone": zone}},
                "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                           "images": [{"names": ["img:1"], "sizeBytes": 100}]}}),
            )
            .unwrap(),
        )
    }

    #[test]
    fn incremental_snapshots() {
        let mut c = Cache::default();
        for (n, z) in [("a1", "a"), ("a2", "a"), ("b1", "b")] {
            c.update_node(zoned(n, z));
        }
        let s1 = c.snapshot();
        let names: Vec<&str> = s1.nodes.iter().map(|n| n.name()).collect();
        assert_eq!(names, ["a1", "b1", "a2"], "round-robin over zones");
        assert_eq!(s1.image_num_nodes.get("img:1"), Some(&3));
        // Nothing changed: the same snapshot.
        let s2 = c.snapshot();
        assert!(Arc::ptr_eq(&s1, &s2));
        drop(s2);
        // One node changes: only its entry is new.
        c.assume(pod("x", Some("b1"), "Pending"), "b1");
        let s3 = c.snapshot();
        assert!(Arc::ptr_eq(&s1.nodes[0], &s3.nodes[0]));
        assert!(!Arc::ptr_eq(&s1.nodes[1], &s3.nodes[1]));
        assert_eq!(s3.get("b1").unwrap().pods.len(), 1);
        assert_eq!(
            s1.get("b1").unwrap().pods.len(),
            0,
            "old snapshots are unchanged"
        );
        // A pod with anti-affinity is indexed.
        let anti: Arc<Pod> = Arc::new(serde_json::from_value(json!({"metadata": {"name": "aa", "namespace": "default"},
            "spec": {"nodeName": "a2", "containers": [], "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "x"}}}]}}}})).unwrap());
        c.update_pod(anti.clone());
        let s4 = c.snapshot();
        assert_eq!(
            s4.nodes_with_required_anti_affinity()
                .map(|n| n.name())
                .collect::<Vec<_>>(),
            ["a2"]
        );
        assert_eq!(s4.nodes_with_affinity().count(), 1);
        c.remove_pod(&anti);
        assert_eq!(c.snapshot().nodes_with_affinity().count(), 0);
        // Removing a node rebuilds the order and the image counts.
        c.remove_node("a1");
        let s5 = c.snapshot();
        assert_eq!(
            s5.nodes.iter().map(|n| n.name()).collect::<Vec<_>>(),
            ["a2", "b1"]
        );
        assert_eq!(s5.image_num_nodes.get("img:1"), Some(&2));
    }

    #[test]
    fn the_snapshot_journal_names_the_nodes_changed_since_a_version() {
        let mut c = Cache::default();
        for n in ["a", "b", "c"] {
            c.update_node(node(n));
        }
        let s1 = c.snapshot();
        let (v1, layout) = (s1.version, s1.layout);
        drop(s1);
        assert_eq!(c.snapshot().changed_since(v1, layout), Some(vec![]));
        c.assume(pod("p", Some("b"), "Pending"), "b");
        let s2 = c.snapshot();
        let b = s2.index_of("b").unwrap();
        assert_eq!(s2.changed_since(v1, layout), Some(vec![b]));
        assert_eq!(s2.changed_since(s2.version, layout), Some(vec![]));
        assert_eq!(s2.changed_since(v1, layout + 1), None, "another layout");
        assert_eq!(
            s2.changed_since(s2.version + 1, layout),
            None,
            "ahead of it"
        );
        let v2 = s2.version;
        drop(s2);
        c.assume(pod("q", Some("a"), "Pending"), "a");
        c.assume(pod("r", Some("c"), "Pending"), "c");
        let s3 = c.snapshot();
        let mut since_v1 = s3.changed_since(v1, layout).unwrap();
        since_v1.sort();
        assert_eq!(since_v1, vec![0, 1, 2]);
        assert_eq!(s3.changed_since(v2, layout).unwrap().len(), 2);
        drop(s3);
        // A new node: a new layout, and nothing is known of the old one.
        c.update_node(node("d"));
        let s4 = c.snapshot();
        assert_ne!(s4.layout, layout);
        assert_eq!(s4.changed_since(v2, layout), None);
    }

    #[test]
    fn assumed_pods_expire_after_binding_unless_confirmed() {
        let mut c = Cache::default();
        c.update_node(node("n1"));
        c.assume(pod("a", Some("n1"), "Pending"), "n1");
        c.cleanup_expired(Instant::now() + ASSUMED_POD_TTL * 2);
        assert!(c.is_placed("default/a"), "binding not finished: kept");
        c.finish_binding("default/a");
        c.cleanup_expired(Instant::now() + ASSUMED_POD_TTL * 2);
        assert!(!c.is_placed("default/a"));
        assert_eq!(cpu_on(&c, "n1"), 0);
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
        assert_eq!(snap.nodes[0].requested.milli_cpu, 0);
        assert_eq!(cpu_on(&c, "n1"), 1000);
        c.remove_pod(&pod("d", Some("n1"), "Pending"));
        assert_eq!(cpu_on(&c, "n1"), 0);
    }
}
