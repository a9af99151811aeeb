//! A cycle's view of the cluster (upstream `internal/cache/snapshot.go`): the nodes in node-tree
//! order, the nodes that hold pods with (anti-)affinity (so InterPodAffinity only visits those), and
//! how many nodes hold each image (ImageLocality's spread). Each update is numbered and the nodes it
//! replaced are journaled, so plugins that keep per-node results between cycles (PodTopologySpread's
//! counts) recompute only the nodes changed since they last looked.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

/// How many node replacements the journal keeps; a reader further behind starts over.
const JOURNAL_LEN: usize = 8192;

/// Layout ids are unique across snapshots, so results kept for one snapshot's lineage are never
/// taken for another's.
static NEXT_LAYOUT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

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
    /// Bumped by every update of the snapshot.
    pub version: u64,
    /// A new unique id whenever the node list itself (membership or order) changes: indices are
    /// then new. 0 for an empty default snapshot.
    pub layout: u64,
    /// (version, node index) of the nodes replaced by recent updates, oldest first.
    journal: VecDeque<(u64, usize)>,
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
        self.version += 1;
        self.layout = NEXT_LAYOUT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.journal.clear();
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

    /// Starts an update: the nodes replaced until the next one are journaled under a new version.
    pub(crate) fn begin_update(&mut self) {
        self.version += 1;
    }

    /// Replaces a node's info, keeping the lists of nodes with (anti-)affinity pods in order.
    pub(crate) fn replace(&mut self, info: Arc<NodeInfo>) {
        let Some(&i) = self.index.get(info.name()) else {
            return;
        };
        if self.journal.len() == JOURNAL_LEN {
            self.journal.pop_front();
        }
        self.journal.push_back((self.version, i));
        let old = &self.nodes[i];
        let lists = [
            (
                &mut self.have_pods_with_affinity,
                old.pods_with_affinity.is_empty(),
                info.pods_with_affinity.is_empty(),
            ),
            (
                &mut self.have_pods_with_required_anti_affinity,
                old.pods_with_required_anti_affinity.is_empty(),
                info.pods_with_required_anti_affinity.is_empty(),
            ),
        ];
        for (list, was_empty, is_empty) in lists {
            match (was_empty, is_empty, list.binary_search(&i)) {
                (true, false, Err(at)) => list.insert(at, i),
                (false, true, Ok(at)) => {
                    list.remove(at);
                }
                _ => {}
            }
        }
        self.nodes[i] = info;
    }

    /// Indices of the nodes replaced after `version` when the layout is still `layout`; None when
    /// that is not known (another layout, or the journal no longer reaches back that far).
    pub fn changed_since(&self, version: u64, layout: u64) -> Option<Vec<usize>> {
        if layout != self.layout || version > self.version {
            return None;
        }
        if version == self.version {
            return Some(Vec::new());
        }
        let covered = match self.journal.front() {
            // Entries of `version` itself may have been dropped from the front: need older ones.
            Some(&(oldest, _)) => oldest <= version || self.journal.len() < JOURNAL_LEN,
            None => true,
        };
        if !covered {
            return None;
        }
        let start = self.journal.partition_point(|&(v, _)| v <= version);
        Some(self.journal.range(start..).map(|&(_, i)| i).collect())
    }

    /// The node's position in [`Snapshot::nodes`].
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.index.get(name).copied()
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
