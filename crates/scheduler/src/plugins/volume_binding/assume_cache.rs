//! The assume cache (upstream `pkg/scheduler/util/assumecache`): an informer's objects with the
//! scheduler's own newer versions laid over them. VolumeBinding's Reserve assumes the volumes and
//! claims it chose for a pod (a volume's claimRef, a claim's selected node) before its binding
//! cycle writes them, so the next pods' cycles, which run meanwhile, do not choose the same volume;
//! Unreserve restores the informer's objects, and PreBind assumes what the API server returned.
//!
//! An assumption gives way once the informer holds a newer version of the object, or none (it was
//! deleted), as upstream replaces its `latestObj` only with a newer informer version; versions are
//! resourceVersions compared as integers, as upstream's cache does. Upstream keeps a copy of every
//! object, fed by a handler of its own on the informer; this keeps only the assumptions, over the
//! informer's store, so it costs nothing while nothing is assumed. Assumptions the informer has
//! overtaken are dropped when read, and the whole map is swept whenever it has doubled since the
//! last sweep, so it stays within about twice the objects assumed by pods still in flight.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use client::informer::{object_key, Store};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;

/// Why an object could not be assumed (upstream's `Assume` errors).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AssumeError {
    /// The informer does not hold the object.
    NotFound(String),
    /// The object to assume is older than the cache's latest version of it.
    OutOfSync {
        key: String,
        stored: u64,
        assumed: u64,
    },
}

impl fmt::Display for AssumeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AssumeError::NotFound(key) => write!(f, "{key:?} not found"),
            AssumeError::OutOfSync {
                key,
                stored,
                assumed,
            } => write!(
                f,
                "{key:?} is out of sync (stored: {stored}, assume: {assumed})"
            ),
        }
    }
}

impl std::error::Error for AssumeError {}

/// A resourceVersion as a number (0 when it is not one; the API server's always are).
pub fn version(meta: &ObjectMeta) -> u64 {
    meta.resource_version
        .as_deref()
        .and_then(|rv| rv.parse().ok())
        .unwrap_or(0)
}

struct Assumed<K> {
    objects: HashMap<String, Arc<K>>,
    /// The map's size after the last sweep: the next sweep comes when it has doubled.
    swept_at: usize,
}

pub struct AssumeCache<K> {
    store: Arc<Store<K>>,
    assumed: Mutex<Assumed<K>>,
}

impl<K: Resource<DynamicType = ()> + 'static> AssumeCache<K> {
    pub fn new(store: Arc<Store<K>>) -> AssumeCache<K> {
        AssumeCache {
            store,
            assumed: Mutex::new(Assumed {
                objects: HashMap::new(),
                swept_at: 0,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Assumed<K>> {
        self.assumed.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The latest version of `key`: the assumed object unless the informer's (`api`) is newer.
    fn latest(assumed: &mut Assumed<K>, key: &str, api: Option<Arc<K>>) -> Option<Arc<K>> {
        let Some(api) = api else {
            assumed.objects.remove(key);
            return None;
        };
        match assumed.objects.get(key) {
            Some(a) if version(a.meta()) >= version(api.meta()) => Some(a.clone()),
            Some(_) => {
                assumed.objects.remove(key);
                Some(api)
            }
            None => Some(api),
        }
    }

    /// The latest version of the object under `key` (upstream `Get`).
    pub fn get(&self, key: &str) -> Option<Arc<K>> {
        let api = self.store.get(key);
        Self::latest(&mut self.lock(), key, api)
    }

    /// The informer's version of the object under `key` (upstream `GetAPIObj`).
    pub fn get_api(&self, key: &str) -> Option<Arc<K>> {
        self.store.get(key)
    }

    /// The latest version of every object (upstream `List`).
    pub fn list(&self) -> Vec<Arc<K>> {
        let mut objects = self.store.list();
        let mut assumed = self.lock();
        if assumed.objects.is_empty() {
            return objects;
        }
        for o in objects.iter_mut() {
            let key = object_key(o.as_ref());
            if let Some(latest) = Self::latest(&mut assumed, &key, Some(o.clone())) {
                *o = latest;
            }
        }
        objects
    }

    /// Lays `obj` over the informer's version until the informer holds a newer one (upstream
    /// `Assume`): refused for an object the informer does not hold or one older than the latest.
    pub fn assume(&self, obj: Arc<K>) -> Result<(), AssumeError> {
        let key = object_key(obj.as_ref());
        let api = self.store.get(&key);
        let mut assumed = self.lock();
        let Some(current) = Self::latest(&mut assumed, &key, api) else {
            return Err(AssumeError::NotFound(key));
        };
        let (stored, new) = (version(current.meta()), version(obj.meta()));
        if new < stored {
            return Err(AssumeError::OutOfSync {
                key,
                stored,
                assumed: new,
            });
        }
        assumed.objects.insert(key, obj);
        if assumed.objects.len() >= 2 * assumed.swept_at.max(16) {
            self.sweep(&mut assumed);
        }
        Ok(())
    }

    /// Drops the assumption on `key`, back to the informer's version (upstream `Restore`).
    pub fn restore(&self, key: &str) {
        self.lock().objects.remove(key);
    }

    /// Drops every assumption the informer has overtaken.
    fn sweep(&self, assumed: &mut Assumed<K>) {
        let store = &self.store;
        assumed.objects.retain(|key, a| {
            store
                .get(key)
                .is_some_and(|api| version(a.meta()) >= version(api.meta()))
        });
        assumed.swept_at = assumed.objects.len();
    }

    /// How many assumptions are held (tests).
    #[cfg(test)]
    pub fn assumed_len(&self) -> usize {
        self.lock().objects.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PersistentVolume;
    use serde_json::json;

    fn pv(name: &str, rv: &str, claim: Option<&str>) -> Arc<PersistentVolume> {
        let mut v = json!({"metadata": {"name": name, "resourceVersion": rv}, "spec": {}});
        if let Some(c) = claim {
            v["spec"]["claimRef"] = json!({"name": c, "namespace": "default"});
        }
        Arc::new(serde_json::from_value(v).unwrap())
    }

    fn claim_of(pv: &PersistentVolume) -> Option<String> {
        pv.spec.as_ref()?.claim_ref.as_ref()?.name.clone()
    }

    #[test]
    fn assumed_objects_until_the_informer_is_newer() {
        let store = Arc::new(Store::new());
        store.upsert(pv("v", "5", None));
        let cache = AssumeCache::new(store.clone());
        cache.assume(pv("v", "5", Some("a"))).unwrap();
        assert_eq!(claim_of(&cache.get("v").unwrap()).as_deref(), Some("a"));
        assert_eq!(claim_of(&cache.list()[0]).as_deref(), Some("a"));
        assert_eq!(claim_of(&cache.get_api("v").unwrap()), None);
        // The informer's resync of the same version does not undo the assumption.
        store.upsert(pv("v", "5", None));
        assert_eq!(claim_of(&cache.get("v").unwrap()).as_deref(), Some("a"));
        // An older object cannot be assumed over a newer one.
        assert_eq!(
            cache.assume(pv("v", "4", Some("b"))),
            Err(AssumeError::OutOfSync {
                key: "v".into(),
                stored: 5,
                assumed: 4
            })
        );
        // A newer informer version replaces it.
        store.upsert(pv("v", "6", Some("c")));
        assert_eq!(claim_of(&cache.get("v").unwrap()).as_deref(), Some("c"));
        assert_eq!(cache.assumed_len(), 0);
    }

    #[test]
    fn restore_and_delete() {
        let store = Arc::new(Store::new());
        store.upsert(pv("v", "5", None));
        let cache = AssumeCache::new(store.clone());
        cache.assume(pv("v", "5", Some("a"))).unwrap();
        cache.restore("v");
        assert_eq!(claim_of(&cache.get("v").unwrap()), None);
        cache.assume(pv("v", "5", Some("a"))).unwrap();
        store.delete("v");
        assert!(cache.get("v").is_none());
        assert!(cache.list().is_empty());
        assert_eq!(
            cache.assume(pv("v", "5", Some("a"))),
            Err(AssumeError::NotFound("v".into()))
        );
    }

    #[test]
    fn overtaken_assumptions_are_swept() {
        let store = Arc::new(Store::new());
        let cache = AssumeCache::new(store.clone());
        for i in 0..1000 {
            let name = format!("v{i}");
            store.upsert(pv(&name, "1", None));
            cache.assume(pv(&name, "1", Some("a"))).unwrap();
            // The informer sees the write and never shows this volume to the cache again.
            store.upsert(pv(&name, "2", Some("a")));
        }
        assert!(cache.assumed_len() <= 32, "{}", cache.assumed_len());
    }
}
