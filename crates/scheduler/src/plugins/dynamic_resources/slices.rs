//! The ResourceSlices by node (upstream `GatherPools`): only each pool's newest generation counts,
//! and a pool missing some of its slices is incomplete. Rebuilt from the informer's store when a
//! slice changed, so a Filter call finds its node's devices without scanning every slice.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::resource::v1::ResourceSlice;

use super::allocator::{slice_on_node, NodeDevice};
use crate::framework::NodeInfo;

#[derive(Default)]
pub struct SliceIndex {
    by_node: HashMap<String, Vec<Arc<ResourceSlice>>>,
    /// Slices for all nodes, a node selector, or per-device node selection.
    shared: Vec<Arc<ResourceSlice>>,
    /// (driver, pool) whose newest generation has fewer slices than it announces.
    pub incomplete: HashSet<(String, String)>,
}

impl SliceIndex {
    pub fn build(slices: Vec<Arc<ResourceSlice>>) -> SliceIndex {
        let mut pools: HashMap<(String, String), Vec<Arc<ResourceSlice>>> = HashMap::new();
        for s in slices {
            if s.metadata.deletion_timestamp.is_some() {
                continue;
            }
            pools
                .entry((s.spec.driver.clone(), s.spec.pool.name.clone()))
                .or_default()
                .push(s);
        }
        let mut idx = SliceIndex::default();
        for (pool, mut slices) in pools {
            let newest = slices
                .iter()
                .map(|s| s.spec.pool.generation)
                .max()
                .unwrap_or(0);
            slices.retain(|s| s.spec.pool.generation == newest);
            let announced = slices
                .iter()
                .map(|s| s.spec.pool.resource_slice_count)
                .max()
                .unwrap_or(0);
            if (slices.len() as i64) < announced {
                idx.incomplete.insert(pool);
            }
            // Stable order: devices are tried in slice-name order, then as listed.
            slices.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
            for s in slices {
                let node =
                    s.spec.node_name.clone().filter(|n| {
                        !n.is_empty() && s.spec.per_device_node_selection != Some(true)
                    });
                match node {
                    Some(n) => idx.by_node.entry(n).or_default().push(s),
                    None => idx.shared.push(s),
                }
            }
        }
        idx
    }

    /// The devices usable on `node`.
    pub fn devices<'a>(&'a self, node: &NodeInfo) -> Vec<NodeDevice<'a>> {
        let mut out = Vec::new();
        for s in self.by_node.get(node.name()).into_iter().flatten() {
            for d in s.spec.devices.iter().flatten() {
                out.push(NodeDevice::new(s, d));
            }
        }
        for s in &self.shared {
            for d in s.spec.devices.iter().flatten() {
                if slice_on_node(s, Some(d), node) {
                    out.push(NodeDevice::new(s, d));
                }
            }
        }
        out
    }
}
