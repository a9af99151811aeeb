//! A cycle's view of the cluster (upstream `internal/cache/snapshot.go`): the nodes in node-tree
//! order, the nodes that hold pods with (anti-)affinity (so InterPodAffinity only visits those), and
//! how many nodes hold each image (ImageLocality's spread).

use std::collections::HashMap;
use std::sync::Arc;

use crate::framework::NodeInfo;

#[derive(Clone, Default, Debug)]
pub struct Snapshot {
    pub nodes: Vec<Arc<NodeInfo>>,
    index: Arc<HashMap<String, usize>>,
    /// Indices of nodes with pods that have any pod (anti-)affinity.
    pub have_pods_with_affinity: Vec<usize>,
    /// Indices of nodes with pods that have required anti-affinity.
    pub have_pods_with_required_anti_affinity: Vec<usize>,
    /// Image name -> number of nodes that have it.
    pub image_num_nodes: Arc<HashMap<String, usize>>,
}

impl Snapshot {
    /// A snapshot of these nodes, in this order (also for tests).
    pub fn new(nodes: Vec<Arc<NodeInfo>>) -> Snapshot {
        let mut s = Snapshot::default();
        let mut images: HashMap<String, usize> = HashMap::new();
        for n in &nodes {
            for name in n.image_sizes.keys() {
                *images.entry(name.clone()).or_default() += 1;
            }
        }
        s.image_num_nodes = Arc::new(images);
        s.set_nodes(nodes);
        s
    }

    pub(crate) fn set_nodes(&mut self, nodes: Vec<Arc<NodeInfo>>) {
        self.index = Arc::new(
            nodes
                .iter()
                .enumerate()
                .map(|(i, n)| (n.name().to_string(), i))
                .collect(),
        );
        self.nodes = nodes;
        self.rebuild_affinity_lists();
    }

    pub(crate) fn rebuild_affinity_lists(&mut self) {
        self.have_pods_with_affinity = (0..self.nodes.len())
            .filter(|&i| !self.nodes[i].pods_with_affinity.is_empty())
            .collect();
        self.have_pods_with_required_anti_affinity = (0..self.nodes.len())
            .filter(|&i| !self.nodes[i].pods_with_required_anti_affinity.is_empty())
            .collect();
    }

    /// Replaces a node's info; true when whether it holds pods with affinity changed.
    pub(crate) fn replace(&mut self, info: Arc<NodeInfo>) -> bool {
        let Some(&i) = self.index.get(info.name()) else {
            return false;
        };
        let old = &self.nodes[i];
        let changed = old.pods_with_affinity.is_empty() != info.pods_with_affinity.is_empty()
            || old.pods_with_required_anti_affinity.is_empty()
                != info.pods_with_required_anti_affinity.is_empty();
        self.nodes[i] = info;
        changed
    }

    pub fn get(&self, name: &str) -> Option<&Arc<NodeInfo>> {
        self.index.get(name).map(|&i| &self.nodes[i])
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    pub fn nodes_with_affinity(&self) -> impl Iterator<Item = &Arc<NodeInfo>> {
        self.have_pods_with_affinity.iter().map(|&i| &self.nodes[i])
    }

    pub fn nodes_with_required_anti_affinity(&self) -> impl Iterator<Item = &Arc<NodeInfo>> {
        self.have_pods_with_required_anti_affinity
            .iter()
            .map(|&i| &self.nodes[i])
    }
}
