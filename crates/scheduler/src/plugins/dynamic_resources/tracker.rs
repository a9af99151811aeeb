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

use client::informer::Store;
use k8s_openapi::api::resource::v1::ResourceClaim;

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

#[derive(Default)]
struct Inner {
    assumed: HashMap<String, Assumed>,
    /// Devices taken by each claim (by `namespace/name`).
    by_claim: HashMap<String, Vec<DeviceId>>,
    /// driver -> pool -> device -> number of claims holding it (normally 1).
    taken: HashMap<String, HashMap<String, HashMap<String, u32>>>,
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

/// The devices an allocated claim holds exclusively (admin access takes none: upstream lets such
/// allocations share devices with ordinary ones).
pub fn claim_devices(c: &ResourceClaim) -> Vec<DeviceId> {
    c.status
        .as_ref()
        .and_then(|s| s.allocation.as_ref())
        .and_then(|a| a.devices.as_ref())
        .and_then(|d| d.results.as_ref())
        .into_iter()
        .flatten()
        .filter(|r| r.admin_access != Some(true))
        .map(|r| DeviceId {
            driver: r.driver.clone(),
            pool: r.pool.clone(),
            device: r.device.clone(),
        })
        .collect()
}

impl Inner {
    fn set_devices(&mut self, key: &str, devices: Vec<DeviceId>) {
        if let Some(old) = self.by_claim.remove(key) {
            for d in old {
                let pools = self.taken.entry(d.driver.clone()).or_default();
                let devs = pools.entry(d.pool.clone()).or_default();
                if let Some(n) = devs.get_mut(&d.device) {
                    *n -= 1;
                    if *n == 0 {
                        devs.remove(&d.device);
                    }
                }
                if devs.is_empty() {
                    pools.remove(&d.pool);
                }
                if pools.is_empty() {
                    self.taken.remove(&d.driver);
                }
            }
        }
        if devices.is_empty() {
            return;
        }
        for d in &devices {
            *self
                .taken
                .entry(d.driver.clone())
                .or_default()
                .entry(d.pool.clone())
                .or_default()
                .entry(d.device.clone())
                .or_default() += 1;
        }
        self.by_claim.insert(key.to_string(), devices);
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
            Ok(g) => f(&Taken(Some(&g.taken))),
            Err(_) => f(&Taken(None)),
        }
    }
}

type TakenMap = HashMap<String, HashMap<String, HashMap<String, u32>>>;

/// The devices held by allocated (or being allocated) claims.
pub struct Taken<'a>(Option<&'a TakenMap>);

impl Taken<'_> {
    pub fn contains(&self, driver: &str, pool: &str, device: &str) -> bool {
        self.0
            .and_then(|m| m.get(driver))
            .and_then(|p| p.get(pool))
            .is_some_and(|d| d.contains_key(device))
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
