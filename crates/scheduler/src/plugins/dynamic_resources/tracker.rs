//! Which devices are taken, and the claims the scheduler allocated but the informer has not shown
//! yet (upstream's `allocatedDevices` tracker plus the claim assume cache of the DRA manager).
//!
//! The informer's claims are the truth once they catch up; until then a claim the scheduler
//! allocated in Reserve is held here as *pending* (PreBind not done: other pods of the claim wait,
//! upstream's "in the process of being allocated"), then as the object PreBind wrote (newer than
//! the informer's copy). Its devices count as taken from Reserve on, so the next cycle does not
//! hand them out again while the API write is in flight.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use apimachinery::quantity::Quantity;
use client::informer::Store;
use k8s_openapi::api::resource::v1::ResourceClaim;

use super::capacity;

/// One device: driver, pool, device name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeviceId {
    pub driver: String,
    pub pool: String,
    pub device: String,
}

struct Assumed {
    claim: Arc<ResourceClaim>,
    /// Reserve allocated it and PreBind has not written it yet.
    pending: bool,
}

/// Ids at or below which the interner is never compacted (about 100 MiB of names at most).
const INTERN_FLOOR: usize = if cfg!(test) { 8 } else { 1 << 20 };

/// Device names as small integers: Filter checks every candidate device of every node against
/// the taken set, and hashing three strings per check was a tenth of a DRA bench's CPU. Names
/// stay interned while no claim or slice uses them, so the table is compacted (new ids, a new
/// epoch) once it holds twice the names in use; slice indexes of an older epoch are rebuilt.
#[derive(Default)]
struct Interner {
    ids: HashMap<Arc<DeviceId>, u32>,
    names: Vec<Arc<DeviceId>>,
    epoch: u64,
    /// Devices the last slice index interned (in use until the next index).
    slice_devices: usize,
}

impl Interner {
    fn intern(&mut self, d: &DeviceId) -> u32 {
        if let Some(&id) = self.ids.get(d) {
            return id;
        }
        let id = self.names.len() as u32;
        let d = Arc::new(d.clone());
        self.names.push(d.clone());
        self.ids.insert(d, id);
        id
    }
}

#[derive(Default)]
struct Inner {
    assumed: HashMap<String, Assumed>,
    /// Devices taken by each claim (by `namespace/name`), as interned ids.
    by_claim: HashMap<String, Vec<u32>>,
    names: Interner,
    /// By interned id: the number of claims holding the device (normally 0 or 1).
    taken: Vec<u32>,
    /// Shares each claim holds, as (interned id, consumed capacity).
    shares_by_claim: HashMap<String, Vec<(u32, capacity::Amounts)>>,
    /// By interned id: the shares held of devices that allow multiple allocations.
    shared: HashMap<u32, SharedUse>,
    /// Entries of `by_claim` and `shares_by_claim` summed (the ids claims hold): kept as they
    /// change, since `compact_if_needed` runs on every claim event and summing them there was a
    /// walk over every claim per event.
    held: usize,
}

/// Shared by the plugin (every profile's) and the claim informer's handlers.
#[derive(Default)]
pub struct Tracker {
    inner: RwLock<Inner>,
    /// Bumped by every ResourceSlice event: the plugin's slice index is stale past it.
    slices: AtomicU64,
}

pub fn claim_key(c: &ResourceClaim) -> String {
    format!(
        "{}/{}",
        c.metadata.namespace.as_deref().unwrap_or(""),
        c.metadata.name.as_deref().unwrap_or("")
    )
}

fn rv(c: &ResourceClaim) -> u64 {
    c.metadata
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// A share of a device that allows multiple allocations (consumable capacity): what one
/// allocation result with a `shareID` consumes, by normalized capacity name (`domain/id`).
#[derive(Clone, Debug, PartialEq)]
pub struct Share {
    pub device: DeviceId,
    pub consumed: Vec<(String, Quantity)>,
}

/// What other shares of a device hold (upstream `AggregatedCapacity` of one device).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SharedUse {
    /// Allocation results holding a share.
    pub shares: u32,
    /// Their consumed capacity summed, by normalized name.
    pub consumed: Vec<(String, Quantity)>,
}

impl SharedUse {
    /// What the shares hold of capacity `norm`.
    pub fn of(&self, norm: &str) -> Quantity {
        self.consumed
            .iter()
            .find(|(n, _)| n == norm)
            .map(|(_, q)| *q)
            .unwrap_or_default()
    }

    fn add(&mut self, consumed: &[(String, Quantity)], sign: i32) {
        for (n, q) in consumed {
            let q = if sign < 0 { q.neg() } else { *q };
            match self.consumed.iter_mut().find(|(m, _)| m == n) {
                Some((_, v)) => *v = v.add(&q),
                None => self.consumed.push((n.clone(), q)),
            }
        }
    }
}

/// The devices an allocated claim holds: exclusively (results without a `shareID`), and as
/// shares (with one). Admin access takes none: upstream lets such allocations share devices with
/// ordinary ones.
pub fn claim_devices(c: &ResourceClaim) -> (Vec<DeviceId>, Vec<Share>) {
    let mut whole = Vec::new();
    let mut shares = Vec::new();
    let results = c
        .status
        .as_ref()
        .and_then(|s| s.allocation.as_ref())
        .and_then(|a| a.devices.as_ref())
        .and_then(|d| d.results.as_ref());
    for r in results.into_iter().flatten() {
        if r.admin_access == Some(true) {
            continue;
        }
        let device = DeviceId {
            driver: r.driver.clone(),
            pool: r.pool.clone(),
            device: r.device.clone(),
        };
        if r.share_id.is_none() {
            whole.push(device);
            continue;
        }
        let consumed = r
            .consumed_capacity
            .iter()
            .flatten()
            .filter_map(|(k, q)| Some((capacity::normalize(k, &r.driver), capacity::parse(q)?)))
            .collect();
        shares.push(Share { device, consumed });
    }
    (whole, shares)
}

impl Inner {
    fn set_devices(&mut self, key: &str, (devices, shares): (Vec<DeviceId>, Vec<Share>)) {
        if let Some(old) = self.by_claim.remove(key) {
            self.held -= old.len();
            for id in old {
                if let Some(n) = self.taken.get_mut(id as usize) {
                    *n = n.saturating_sub(1);
                }
            }
        }
        if let Some(old) = self.shares_by_claim.remove(key) {
            self.held -= old.len();
            for (id, consumed) in old {
                if let Some(u) = self.shared.get_mut(&id) {
                    u.add(&consumed, -1);
                    u.shares = u.shares.saturating_sub(1);
                    if u.shares == 0 {
                        self.shared.remove(&id);
                    }
                }
            }
        }
        if devices.is_empty() && shares.is_empty() {
            return;
        }
        self.compact_if_needed(devices.len() + shares.len());
        if !devices.is_empty() {
            let ids: Vec<u32> = devices.iter().map(|d| self.names.intern(d)).collect();
            for &id in &ids {
                let i = id as usize;
                if self.taken.len() <= i {
                    self.taken.resize(i + 1, 0);
                }
                self.taken[i] += 1;
            }
            self.held += ids.len();
            self.by_claim.insert(key.to_string(), ids);
        }
        if !shares.is_empty() {
            let held: Vec<(u32, capacity::Amounts)> = shares
                .into_iter()
                .map(|s| (self.names.intern(&s.device), s.consumed))
                .collect();
            for (id, consumed) in &held {
                let u = self.shared.entry(*id).or_default();
                u.shares += 1;
                u.add(consumed, 1);
            }
            self.held += held.len();
            self.shares_by_claim.insert(key.to_string(), held);
        }
    }

    /// Renumbers the names claims hold once the table has grown past twice the names in use
    /// (plus `adding`); slice indexes see the new epoch and intern their devices again.
    fn compact_if_needed(&mut self, adding: usize) {
        debug_assert_eq!(
            self.held,
            self.by_claim.values().map(Vec::len).sum::<usize>()
                + self.shares_by_claim.values().map(Vec::len).sum::<usize>()
        );
        let limit = INTERN_FLOOR.max(2 * (self.held + self.names.slice_devices + adding));
        if self.names.names.len() < limit {
            return;
        }
        let old = std::mem::take(&mut self.names);
        self.names.epoch = old.epoch + 1;
        let mut taken = Vec::new();
        for ids in self.by_claim.values_mut() {
            for id in ids.iter_mut() {
                let name = &old.names[*id as usize];
                *id = self.names.intern(name);
                let i = *id as usize;
                if taken.len() <= i {
                    taken.resize(i + 1, 0);
                }
                taken[i] += 1;
            }
        }
        self.taken = taken;
        let old_shared = std::mem::take(&mut self.shared);
        for held in self.shares_by_claim.values_mut() {
            for (id, _) in held.iter_mut() {
                let new = self.names.intern(&old.names[*id as usize]);
                if let Some(u) = old_shared.get(id) {
                    self.shared.insert(new, u.clone());
                }
                *id = new;
            }
        }
    }

    /// The claim to believe: what PreBind wrote while the informer is behind it. A pending
    /// allocation is not shown (the claim is not allocated yet for other pods); it only takes
    /// devices.
    fn effective(
        &self,
        key: &str,
        informer: Option<&Arc<ResourceClaim>>,
    ) -> Option<Arc<ResourceClaim>> {
        match (self.assumed.get(key), informer) {
            (Some(a), Some(i)) if a.pending || rv(i) >= rv(&a.claim) => Some(i.clone()),
            (Some(a), _) => Some(a.claim.clone()),
            (None, i) => i.cloned(),
        }
    }

    fn refresh(&mut self, key: &str, informer: Option<&Arc<ResourceClaim>>) {
        if let (Some(a), Some(i)) = (self.assumed.get(key), informer) {
            if !a.pending && rv(i) >= rv(&a.claim) {
                self.assumed.remove(key);
            }
        }
        if informer.is_none() && self.assumed.get(key).is_some_and(|a| !a.pending) {
            // Deleted: what PreBind wrote is gone with it.
            self.assumed.remove(key);
        }
        let devices = match self.assumed.get(key) {
            Some(a) if a.pending => claim_devices(&a.claim),
            _ => self
                .effective(key, informer)
                .map(|c| claim_devices(&c))
                .unwrap_or_default(),
        };
        self.set_devices(key, devices);
    }
}

impl Tracker {
    /// A ResourceSlice was added, changed or deleted.
    pub fn slices_changed(&self) {
        self.slices.fetch_add(1, Ordering::Release);
    }

    pub fn slices_generation(&self) -> u64 {
        self.slices.load(Ordering::Acquire)
    }

    /// The informer saw the claim change (`None`: deleted).
    pub fn on_claim(&self, key: &str, claim: Option<&Arc<ResourceClaim>>) {
        if let Ok(mut g) = self.inner.write() {
            g.refresh(key, claim);
        }
    }

    /// The claim `key` as the scheduler should see it.
    pub fn get(&self, key: &str, store: &Store<ResourceClaim>) -> Option<Arc<ResourceClaim>> {
        let informer = store.get(key);
        match self.inner.read() {
            Ok(g) => g.effective(key, informer.as_ref()),
            Err(_) => informer,
        }
    }

    /// Whether Reserve allocated the claim and PreBind has not written it yet.
    pub fn is_pending(&self, key: &str) -> bool {
        self.inner
            .read()
            .map(|g| g.assumed.get(key).is_some_and(|a| a.pending))
            .unwrap_or(false)
    }

    /// Reserve: the claim with the allocation the scheduler chose, not written yet.
    pub fn assume_pending(&self, claim: Arc<ResourceClaim>) {
        let key = claim_key(&claim);
        if let Ok(mut g) = self.inner.write() {
            let devices = claim_devices(&claim);
            g.assumed.insert(
                key.clone(),
                Assumed {
                    claim,
                    pending: true,
                },
            );
            g.set_devices(&key, devices);
        }
    }

    /// PreBind wrote the claim: hold what the API server returned until the informer has it.
    pub fn assume_written(&self, claim: Arc<ResourceClaim>, store: &Store<ResourceClaim>) {
        let key = claim_key(&claim);
        if let Ok(mut g) = self.inner.write() {
            g.assumed.insert(
                key.clone(),
                Assumed {
                    claim,
                    pending: false,
                },
            );
            g.refresh(&key, store.get(&key).as_ref());
        }
    }

    /// Unreserve or a failed PreBind: back to the informer's claim.
    pub fn forget(&self, key: &str, store: &Store<ResourceClaim>) {
        if let Ok(mut g) = self.inner.write() {
            if g.assumed.get(key).is_some_and(|a| a.pending) {
                g.assumed.remove(key);
            }
            g.refresh(key, store.get(key).as_ref());
        }
    }

    /// Runs `f` with a view of the taken devices (one lock for a whole Filter call).
    pub fn with_taken<R>(&self, f: impl FnOnce(&Taken<'_>) -> R) -> R {
        match self.inner.read() {
            Ok(g) => f(&Taken(Some(&*g))),
            Err(_) => f(&Taken(None)),
        }
    }

    /// Ids for the devices of a new slice index (`f` is called with an interning function), and
    /// the epoch they belong to.
    pub fn intern_slice_devices<R>(
        &self,
        f: impl FnOnce(&mut dyn FnMut(&DeviceId) -> u32) -> (R, usize),
    ) -> (R, u64) {
        match self.inner.write() {
            Ok(mut g) => {
                g.names.slice_devices = 0;
                g.compact_if_needed(0);
                let epoch = g.names.epoch;
                let (r, n) = f(&mut |d| g.names.intern(d));
                g.names.slice_devices = n;
                (r, epoch)
            }
            // No ids: every check goes by name (an epoch no index has).
            Err(_) => (f(&mut |_| NO_ID).0, u64::MAX),
        }
    }

    /// The interner's epoch: slice indexes built in an older one are stale.
    pub fn epoch(&self) -> u64 {
        self.inner.read().map(|g| g.names.epoch).unwrap_or(u64::MAX)
    }
}

/// A device without an interned id (checked by name).
pub const NO_ID: u32 = u32::MAX;

/// The devices held by allocated (or being allocated) claims.
pub struct Taken<'a>(Option<&'a Inner>);

impl Taken<'_> {
    pub fn contains(&self, driver: &str, pool: &str, device: &str) -> bool {
        self.lookup(driver, pool, device)
            .is_some_and(|id| self.by_id(id))
    }

    fn lookup(&self, driver: &str, pool: &str, device: &str) -> Option<u32> {
        let g = self.0?;
        let d = DeviceId {
            driver: driver.into(),
            pool: pool.into(),
            device: device.into(),
        };
        g.names.ids.get(&d).copied()
    }

    fn by_id(&self, id: u32) -> bool {
        self.0
            .and_then(|g| g.taken.get(id as usize))
            .is_some_and(|&n| n > 0)
    }

    /// The current id of a device a slice index of `epoch` gave `id` (by name if the ids were
    /// renumbered since: an index built before a compaction, still used by this cycle).
    fn resolve(&self, id: u32, epoch: u64, driver: &str, pool: &str, device: &str) -> Option<u32> {
        match self.0 {
            Some(g) if g.names.epoch == epoch && id != NO_ID => Some(id),
            _ => self.lookup(driver, pool, device),
        }
    }

    /// Whether an allocation holds the device whole.
    pub fn contains_id(&self, id: u32, epoch: u64, driver: &str, pool: &str, device: &str) -> bool {
        self.resolve(id, epoch, driver, pool, device)
            .is_some_and(|id| self.by_id(id))
    }

    /// The shares allocations hold of the device, if any.
    pub fn shared(
        &self,
        id: u32,
        epoch: u64,
        driver: &str,
        pool: &str,
        device: &str,
    ) -> Option<&SharedUse> {
        let g = self.0?;
        if g.shared.is_empty() {
            return None;
        }
        let id = self.resolve(id, epoch, driver, pool, device)?;
        g.shared.get(&id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claim(rv: &str, devices: &[&str]) -> Arc<ResourceClaim> {
        let results: Vec<_> = devices
            .iter()
            .map(|d| json!({"request": "r", "driver": "d", "pool": "p", "device": d}))
            .collect();
        let status = if devices.is_empty() {
            json!({})
        } else {
            json!({"allocation": {"devices": {"results": results}}})
        };
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": "c", "namespace": "ns", "resourceVersion": rv},
                "spec": {}, "status": status
            }))
            .unwrap(),
        )
    }

    #[test]
    fn assumed_claims_hold_devices_until_the_informer_catches_up() {
        let t = Tracker::default();
        let store = Store::<ResourceClaim>::new();
        let unallocated = claim("5", &[]);
        store.upsert(unallocated.clone());
        t.on_claim("ns/c", Some(&unallocated));
        assert!(!t.with_taken(|x| x.contains("d", "p", "dev-0")));

        t.assume_pending(claim("5", &["dev-0"]));
        assert!(t.is_pending("ns/c"));
        assert!(t.with_taken(|x| x.contains("d", "p", "dev-0")));
        // An unrelated informer event (e.g. the finalizer update) keeps the pending allocation.
        let finalized = claim("6", &[]);
        store.upsert(finalized.clone());
        t.on_claim("ns/c", Some(&finalized));
        assert!(t.with_taken(|x| x.contains("d", "p", "dev-0")));

        t.assume_written(claim("7", &["dev-0"]), &store);
        assert!(!t.is_pending("ns/c"));
        let got = t.get("ns/c", &store).unwrap();
        assert_eq!(got.metadata.resource_version.as_deref(), Some("7"));
        // The informer's older copy does not undo what PreBind wrote.
        t.on_claim("ns/c", Some(&finalized));
        assert!(t.with_taken(|x| x.contains("d", "p", "dev-0")));
        let caught_up = claim("7", &["dev-0"]);
        store.upsert(caught_up.clone());
        t.on_claim("ns/c", Some(&caught_up));
        // Deallocation frees the device.
        let freed = claim("8", &[]);
        store.upsert(freed.clone());
        t.on_claim("ns/c", Some(&freed));
        assert!(!t.with_taken(|x| x.contains("d", "p", "dev-0")));
    }

    fn dev(name: &str) -> DeviceId {
        DeviceId {
            driver: "d".into(),
            pool: "p".into(),
            device: name.into(),
        }
    }

    #[test]
    fn slice_devices_are_checked_by_id_and_by_name_after_a_compaction() {
        let t = Tracker::default();
        let store = Store::<ResourceClaim>::new();
        let (ids, epoch) = t.intern_slice_devices(|intern| {
            let ids: Vec<u32> = ["dev-0", "dev-1"].iter().map(|n| intern(&dev(n))).collect();
            (ids, 2)
        });
        assert_eq!(ids, [0, 1]);
        let c = claim("5", &["dev-1"]);
        store.upsert(c.clone());
        t.on_claim("ns/c", Some(&c));
        let check = |id, e, name: &str| t.with_taken(|x| x.contains_id(id, e, "d", "p", name));
        assert!(!check(ids[0], epoch, "dev-0"));
        assert!(check(ids[1], epoch, "dev-1"));
        // Claims with devices no slice has, until the table outgrows twice the names in use.
        for i in 0..16 {
            let other = claim("6", &[&format!("gone-{i}")]);
            t.on_claim("ns/other", Some(&other));
        }
        t.on_claim("ns/other", None);
        let now = t.epoch();
        assert!(now > epoch, "compacted");
        let g = t.inner.read().unwrap();
        assert!(
            g.names.names.len() <= INTERN_FLOOR,
            "{}",
            g.names.names.len()
        );
        drop(g);
        // The old index's ids are stale: its checks go by name and still see dev-1 taken.
        assert!(check(ids[1], epoch, "dev-1"));
        assert!(!check(ids[0], epoch, "dev-0"));
        assert!(check(NO_ID, now, "dev-1"));
        // A new index gets ids of the new epoch.
        let (ids, epoch) = t.intern_slice_devices(|intern| {
            let ids: Vec<u32> = ["dev-0", "dev-1"].iter().map(|n| intern(&dev(n))).collect();
            (ids, 2)
        });
        assert_eq!(epoch, now);
        assert!(check(ids[1], epoch, "dev-1"));
        assert!(!check(ids[0], epoch, "dev-0"));
        // Freed by deallocation.
        let freed = claim("7", &[]);
        t.on_claim("ns/c", Some(&freed));
        assert!(!check(ids[1], epoch, "dev-1"));
    }

    #[test]
    fn held_ids_are_counted_as_claims_change() {
        let t = Tracker::default();
        let held = || t.inner.read().unwrap().held;
        t.on_claim("ns/a", Some(&claim("1", &["dev-0", "dev-1"])));
        t.on_claim("ns/b", Some(&claim("1", &["dev-2"])));
        assert_eq!(held(), 3);
        t.on_claim("ns/a", Some(&claim("2", &["dev-0"])));
        assert_eq!(held(), 2);
        t.on_claim("ns/b", None);
        assert_eq!(held(), 1);
        // A pending allocation holds its devices; forgetting it releases them.
        let store = Store::<ResourceClaim>::new();
        t.assume_pending(claim("5", &["dev-3", "dev-4"]));
        assert_eq!(held(), 3);
        t.forget("ns/c", &store);
        assert_eq!(held(), 1);
        t.on_claim("ns/a", Some(&claim("3", &[])));
        assert_eq!(held(), 0);
    }

    #[test]
    fn forget_restores_the_informer_claim() {
        let t = Tracker::default();
        let store = Store::<ResourceClaim>::new();
        store.upsert(claim("5", &[]));
        t.assume_pending(claim("5", &["dev-1"]));
        t.forget("ns/c", &store);
        assert!(!t.is_pending("ns/c"));
        assert!(!t.with_taken(|x| x.contains("d", "p", "dev-1")));
        assert!(t
            .get("ns/c", &store)
            .unwrap()
            .status
            .as_ref()
            .unwrap()
            .allocation
            .is_none());
    }
}
