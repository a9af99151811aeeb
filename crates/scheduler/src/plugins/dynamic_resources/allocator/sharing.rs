//! The allocator's bookkeeping for devices that are not simply taken whole: devices with
//! `allowMultipleAllocations` (consumable capacity, upstream `allocatingCapacity` and
//! `CmpRequestOverCapacity`) and devices that consume a pool's shared counters (partitionable
//! devices, upstream `checkAvailableCounters`). Both features are beta and on by default in 1.36.
//!
//! A request without `capacity.requests` on a device that neither allows multiple allocations
//! nor consumes counters takes the fast path in [`Search::take`]: no lookups, no allocation.

use std::collections::BTreeMap;

use apimachinery::quantity::Quantity;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;

use super::super::capacity::{self, Consumed};
use super::super::slices::CounterAmounts;
use super::{Alt, NodeDevice, Search};

/// What taking one device for one request changed, to be undone when the search backtracks.
#[derive(Default)]
pub(super) struct Undo {
    /// The share added to `Search::allocating` (shareable devices).
    share: Option<Vec<Consumed>>,
    /// The device's counters were taken from its pool.
    counters: bool,
}

fn multi(dev: &NodeDevice<'_>) -> bool {
    dev.device.allow_multiple_allocations == Some(true)
}

fn consumes_counters(dev: &NodeDevice<'_>) -> bool {
    dev.device
        .consumes_counters
        .as_ref()
        .is_some_and(|c| !c.is_empty())
}

/// The device's counter consumption as ((counter set, counter), amount); `None` when a quantity
/// does not parse.
fn consumption_of(dev: &NodeDevice<'_>) -> Option<CounterAmounts> {
    let mut out = Vec::new();
    for c in dev.device.consumes_counters.iter().flatten() {
        for (name, counter) in &c.counters {
            out.push((
                (c.counter_set.clone(), name.clone()),
                capacity::parse(&counter.value)?,
            ));
        }
    }
    Some(out)
}

impl Search<'_, '_> {
    pub(super) fn push(&mut self, r: usize, a: usize, d: usize, undo: Undo) {
        if undo.share.is_none() {
            self.used[d] = true;
        }
        self.picked.push((r, a, d));
        self.undo.push(undo);
    }

    pub(super) fn pop(&mut self) {
        let (Some((_, _, d)), Some(undo)) = (self.picked.pop(), self.undo.pop()) else {
            return;
        };
        match &undo.share {
            Some(c) => {
                if let Some(u) = self.allocating.get_mut(&d) {
                    u.shares = u.shares.saturating_sub(1);
                    for c in c {
                        if let Some((_, q)) = u.consumed.iter_mut().find(|(n, _)| *n == c.norm) {
                            *q = q.sub(&c.amount);
                        }
                    }
                    if u.shares == 0 {
                        self.allocating.remove(&d);
                    }
                }
            }
            None => self.used[d] = false,
        }
        if undo.counters {
            self.return_counters(d);
        }
    }

    /// Takes device `d` for alternative `a` of request `r` if its capacity and counters allow:
    /// `None` when they do not.
    pub(super) fn take(&mut self, r: usize, a: usize, d: usize) -> Option<Undo> {
        let (prep, devices, taken) = (self.prep, self.devices, self.taken);
        let alt = &prep.requests[r].alts[a];
        let dev = &devices[d];
        let (multi, counters) = (multi(dev), consumes_counters(dev));
        if !multi && !counters && alt.capacity.is_empty() {
            return Some(Undo::default());
        }
        let driver = &dev.slice.spec.driver;
        let held = taken.shared(
            dev.id,
            self.epoch,
            driver,
            &dev.slice.spec.pool.name,
            &dev.device.name,
        );
        let mine = self.allocating.get(&d);
        let in_use = held.is_some() || mine.is_some();
        let mut undo = Undo::default();
        if capacity::involved(&alt.capacity, dev.device) {
            let c = capacity::consumption(&alt.capacity, dev.device, driver)?;
            if multi {
                let used = |n: &str| {
                    let h = held.map(|h| h.of(n)).unwrap_or_default();
                    h.add(&mine.map(|m| m.of(n)).unwrap_or_default())
                };
                if !capacity::fits(&c, used) {
                    return None;
                }
                undo.share = Some(c);
            } else if !capacity::fits(&c, |_| Quantity::zero()) {
                return None;
            }
        }
        // A shareable device takes its counters once, with its first share (upstream skips the
        // check while some capacity of it is in use).
        if counters && !(multi && in_use) {
            if !self.take_counters(d) {
                return None;
            }
            undo.counters = true;
        }
        if let Some(c) = &undo.share {
            let u = self.allocating.entry(d).or_default();
            u.shares += 1;
            for c in c {
                match u.consumed.iter_mut().find(|(n, _)| *n == c.norm) {
                    Some((_, q)) => *q = q.add(&c.amount),
                    None => u.consumed.push((c.norm.clone(), c.amount)),
                }
            }
        }
        Some(undo)
    }

    fn pool_of(&self, d: usize) -> (String, String) {
        let s = &self.devices[d].slice.spec;
        (s.driver.clone(), s.pool.name.clone())
    }

    /// The counters left in the pool: its counter sets less what allocated devices (of every
    /// node) consume. Computed once per search and pool.
    fn counters_left(&mut self, pool: &(String, String)) -> Option<&mut CounterAmounts> {
        if !self.counters_left.contains_key(pool) {
            let (counters, taken) = (self.counters, self.taken);
            let pc = counters.get(pool)?;
            let mut left = pc.totals.clone();
            for c in &pc.consumers {
                let allocated = taken.contains_id(c.id, self.epoch, &pool.0, &pool.1, &c.device)
                    || taken
                        .shared(c.id, self.epoch, &pool.0, &pool.1, &c.device)
                        .is_some();
                if !allocated {
                    continue;
                }
                for (k, q) in &c.consumes {
                    if let Some((_, l)) = left.iter_mut().find(|(n, _)| n == k) {
                        *l = l.sub(q);
                    }
                }
            }
            self.counters_left.insert(pool.clone(), left);
        }
        self.counters_left.get_mut(pool)
    }

    /// Takes device `d`'s counters from its pool if every one of them has enough left.
    fn take_counters(&mut self, d: usize) -> bool {
        let Some(need) = consumption_of(&self.devices[d]) else {
            return false;
        };
        let pool = self.pool_of(d);
        let Some(left) = self.counters_left(&pool) else {
            // The pool defines no counters: the slice is invalid for this device.
            return false;
        };
        for (k, q) in &need {
            match left.iter().find(|(n, _)| n == k) {
                Some((_, l)) if l >= q => {}
                _ => return false,
            }
        }
        for (k, q) in &need {
            if let Some((_, l)) = left.iter_mut().find(|(n, _)| n == k) {
                *l = l.sub(q);
            }
        }
        true
    }

    fn return_counters(&mut self, d: usize) {
        let Some(need) = consumption_of(&self.devices[d]) else {
            return;
        };
        let pool = self.pool_of(d);
        if let Some(left) = self.counters_left(&pool) {
            for (k, q) in &need {
                if let Some((_, l)) = left.iter_mut().find(|(n, _)| n == k) {
                    *l = l.add(q);
                }
            }
        }
    }
}

/// The `shareID` and `consumedCapacity` of an allocation result: a new share for a device that
/// allows multiple allocations (every capacity listed, upstream only leaves the map out when the
/// device has none), nothing otherwise.
pub(super) fn share_of(
    alt: &Alt,
    dev: &NodeDevice<'_>,
) -> (Option<String>, Option<BTreeMap<String, K8sQuantity>>) {
    if !multi(dev) {
        return (None, None);
    }
    let consumed = capacity::consumption(&alt.capacity, dev.device, &dev.slice.spec.driver)
        .filter(|c| !c.is_empty())
        .map(|c| c.into_iter().map(|c| (c.key, c.amount.to_k8s())).collect());
    (Some(capacity::new_share_id()), consumed)
}
