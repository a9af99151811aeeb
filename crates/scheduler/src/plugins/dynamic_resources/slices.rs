//! The ResourceSlices by node (upstream `GatherPools`): only each pool's newest generation counts,
//! and a pool missing some of its slices is incomplete. Rebuilt from the informer's store when a
//! slice changed, so a Filter call finds its node's devices without scanning every slice.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use apimachinery::quantity::Quantity;
use k8s_openapi::api::resource::v1::ResourceSlice;
use rkube_cel::Value;
use rustc_hash::FxHashMap;

use super::capacity;

use super::allocator::{slice_on_node, NodeDevice, SelectorMemo};
use super::selectors::device_value;
use super::tracker::{DeviceId, Tracker};

/// A slice with the CEL value of each of its devices, built once per index: every pod's Filter
/// would otherwise rebuild them on every node.
struct Indexed {
    slice: Arc<ResourceSlice>,
    values: Vec<Value>,
    /// Per device, selector results already known (see [`SelectorMemo`]).
    memos: Vec<SelectorMemo>,
    /// Per device, the tracker's id for it (see [`Tracker::intern_slice_devices`]).
    ids: Vec<u32>,
}

impl Indexed {
    fn new(slice: Arc<ResourceSlice>, intern: &mut dyn FnMut(&DeviceId) -> u32) -> Indexed {
        let values: Vec<Value> = slice
            .spec
            .devices
            .iter()
            .flatten()
            .map(|d| device_value(&slice.spec.driver, d))
            .collect();
        let memos = (0..values.len()).map(|_| SelectorMemo::default()).collect();
        let ids = slice
            .spec
            .devices
            .iter()
            .flatten()
            .map(|d| {
                intern(&DeviceId {
                    driver: slice.spec.driver.clone(),
                    pool: slice.spec.pool.name.clone(),
                    device: d.name.clone(),
                })
            })
            .collect();
        Indexed {
            slice,
            values,
            memos,
            ids,
        }
    }
}
use crate::framework::NodeInfo;

/// Amounts by (counter set, counter).
pub type CounterAmounts = Vec<((String, String), Quantity)>;

/// A device that consumes shared counters, on whatever node it is.
pub struct CounterConsumer {
    /// The tracker's id (see [`Indexed::ids`]).
    pub id: u32,
    pub device: String,
    /// ((counter set, counter), amount).
    pub consumes: CounterAmounts,
}

/// A pool's shared counters (partitionable devices, upstream `Pool.CounterSets`) and the devices
/// that consume them: the allocator subtracts what allocated ones consume.
#[derive(Default)]
pub struct PoolCounters {
    /// ((counter set, counter), total).
    pub totals: CounterAmounts,
    pub consumers: Vec<CounterConsumer>,
}

impl PoolCounters {
    fn add(&mut self, s: &Indexed) {
        for set in s.slice.spec.shared_counters.iter().flatten() {
            for (name, c) in &set.counters {
                if let Some(q) = capacity::parse(&c.value) {
                    self.totals.push(((set.name.clone(), name.clone()), q));
                }
            }
        }
        for (d, &id) in s.slice.spec.devices.iter().flatten().zip(&s.ids) {
            let consumes: Vec<_> = d
                .consumes_counters
                .iter()
                .flatten()
                .flat_map(|c| {
                    c.counters.iter().filter_map(|(n, q)| {
                        Some((
                            (c.counter_set.clone(), n.clone()),
                            capacity::parse(&q.value)?,
                        ))
                    })
                })
                .collect();
            if !consumes.is_empty() {
                self.consumers.push(CounterConsumer {
                    id,
                    device: d.name.clone(),
                    consumes,
                });
            }
        }
    }
}

#[derive(Default)]
pub struct SliceIndex {
    /// Looked up by every Filter call: a faster hash than SipHash for node names.
    by_node: FxHashMap<String, Vec<Indexed>>,
    /// Slices for all nodes, a node selector, or per-device node selection.
    shared: Vec<Indexed>,
    /// (driver, pool) whose newest generation has fewer slices than it announces.
    pub incomplete: HashSet<(String, String)>,
    /// The tracker's interner epoch the devices' ids belong to.
    pub epoch: u64,
    /// Shared counters by (driver, pool), for pools that have any.
    pub counters: HashMap<(String, String), PoolCounters>,
}

impl SliceIndex {
    /// Indexes `slices`, with device ids from `tracker`.
    pub fn build(slices: Vec<Arc<ResourceSlice>>, tracker: &Tracker) -> SliceIndex {
        let (idx, epoch) = tracker.intern_slice_devices(|intern| {
            let idx = Self::build_with(slices, intern);
            let n = idx
                .by_node
                .values()
                .flatten()
                .chain(&idx.shared)
                .map(|s| s.ids.len())
                .sum();
            (idx, n)
        });
        SliceIndex { epoch, ..idx }
    }

    fn build_with(
        slices: Vec<Arc<ResourceSlice>>,
        intern: &mut dyn FnMut(&DeviceId) -> u32,
    ) -> SliceIndex {
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
                idx.incomplete.insert(pool.clone());
            }
            // Stable order: devices are tried in slice-name order, then as listed.
            slices.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
            let counted = slices.iter().any(|s| {
                s.spec
                    .shared_counters
                    .as_ref()
                    .is_some_and(|c| !c.is_empty())
            });
            for s in slices {
                let indexed = Indexed::new(s, intern);
                if counted {
                    idx.counters.entry(pool.clone()).or_default().add(&indexed);
                }
                let s = indexed.slice.clone();
                let node =
                    s.spec.node_name.clone().filter(|n| {
                        !n.is_empty() && s.spec.per_device_node_selection != Some(true)
                    });
                match node {
                    Some(n) => idx.by_node.entry(n).or_default().push(indexed),
                    None => idx.shared.push(indexed),
                }
            }
        }
        idx
    }

    /// The devices usable on `node`.
    pub fn devices<'a>(&'a self, node: &NodeInfo) -> Vec<NodeDevice<'a>> {
        // Called for every node of every pod's Filter: one allocation of the right size.
        let local = self.by_node.get(node.name()).map_or(&[][..], Vec::as_slice);
        let mut out =
            Vec::with_capacity(local.iter().chain(&self.shared).map(|s| s.ids.len()).sum());
        for s in local {
            for (((d, v), m), &id) in s
                .slice
                .spec
                .devices
                .iter()
                .flatten()
                .zip(&s.values)
                .zip(&s.memos)
                .zip(&s.ids)
            {
                out.push(NodeDevice::with_value(&s.slice, d, v, m, id));
            }
        }
        for s in &self.shared {
            for (((d, v), m), &id) in s
                .slice
                .spec
                .devices
                .iter()
                .flatten()
                .zip(&s.values)
                .zip(&s.memos)
                .zip(&s.ids)
            {
                if slice_on_node(&s.slice, Some(d), node) {
                    out.push(NodeDevice::with_value(&s.slice, d, v, m, id));
                }
            }
        }
        out
    }
}
