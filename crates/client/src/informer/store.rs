//! The informer's thread-safe indexed cache (upstream client-go `tools/cache/store.go`,
//! `thread_safe_store.go` and the `Indexer` interface in `index.go`).
//!
//! Objects are kept as `Arc<K>` under their [`object_key`] (`namespace/name`, or `name` when
//! cluster-scoped), so readers get cheap clones and never a lock held across their own work. Every
//! store has the [`NAMESPACE_INDEX`]; more indices can be added with [`Store::add_indexer`], also after
//! objects are in (they are indexed on registration).
//!
//! Differences from upstream: there is no key function parameter (every store keys by namespace/name, as
//! every informer upstream does), and the mutating methods return the previous object so the informer
//! can tell adds from updates without a second look-up. Only the informer should write to a store it
//! owns; the mutators are public for tests and for caches built by hand.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use kube::Resource;

use super::index::{
    namespace_index_func, object_key, IndexError, IndexFunc, Indices, NAMESPACE_INDEX,
};

struct Inner<K> {
    items: HashMap<String, Arc<K>>,
    indices: Indices<K>,
}

/// A thread-safe map of objects by key with secondary indices (upstream `cache.Indexer`).
pub struct Store<K> {
    inner: RwLock<Inner<K>>,
}

impl<K> fmt::Debug for Store<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = self.read();
        f.debug_struct("Store")
            .field("len", &inner.items.len())
            .field("indices", &inner.indices)
            .finish()
    }
}

impl<K: Resource + 'static> Default for Store<K> {
    fn default() -> Self {
        Store::new()
    }
}

impl<K> Store<K> {
    fn read(&self) -> RwLockReadGuard<'_, Inner<K>> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Inner<K>> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }

    /// The object stored under `key`.
    pub fn get(&self, key: &str) -> Option<Arc<K>> {
        self.read().items.get(key).cloned()
    }

    /// Every object, in no particular order.
    pub fn list(&self) -> Vec<Arc<K>> {
        self.read().items.values().cloned().collect()
    }

    /// Every key, sorted.
    pub fn list_keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self.read().items.keys().cloned().collect();
        keys.sort();
        keys
    }

    /// A consistent copy of the whole map.
    pub fn snapshot(&self) -> HashMap<String, Arc<K>> {
        self.read().items.clone()
    }

    pub fn len(&self) -> usize {
        self.read().items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.read().items.is_empty()
    }

    /// The objects whose index `index` includes `value` (upstream `ByIndex`), sorted by key.
    pub fn by_index(&self, index: &str, value: &str) -> Result<Vec<Arc<K>>, IndexError> {
        let inner = self.read();
        let keys = inner.indices.keys(index, value)?;
        Ok(keys
            .iter()
            .filter_map(|k| inner.items.get(k).cloned())
            .collect())
    }

    /// The keys of the objects whose index `index` includes `value` (upstream `IndexKeys`), sorted.
    pub fn index_keys(&self, index: &str, value: &str) -> Result<Vec<String>, IndexError> {
        self.read().indices.keys(index, value)
    }

    /// The values that index at least one object in `index` (upstream `ListIndexFuncValues`), sorted.
    pub fn list_index_values(&self, index: &str) -> Vec<String> {
        self.read().indices.values(index)
    }

    /// The registered index names.
    pub fn index_names(&self) -> Vec<String> {
        self.read().indices.names()
    }

    /// The objects in namespace `ns` (through the namespace index), sorted by key.
    pub fn list_namespace(&self, ns: &str) -> Vec<Arc<K>> {
        self.by_index(NAMESPACE_INDEX, ns).unwrap_or_default()
    }

    /// Registers another index and indexes the objects already stored (upstream `AddIndexers`).
    pub fn add_indexer(&self, name: &str, func: IndexFunc<K>) -> Result<(), IndexError> {
        let mut inner = self.write();
        let Inner { items, indices } = &mut *inner;
        indices.add(name, func, items.iter())
    }
}

impl<K: Resource + 'static> Store<K> {
    /// An empty store with the namespace index.
    pub fn new() -> Store<K> {
        let mut indices = Indices::default();
        // A fresh `Indices` has no index of this name, so this cannot conflict.
        let _ = indices.add(
            NAMESPACE_INDEX,
            Arc::new(namespace_index_func::<K>),
            std::iter::empty(),
        );
        Store {
            inner: RwLock::new(Inner {
                items: HashMap::new(),
                indices,
            }),
        }
    }

    /// An empty store with the namespace index and these.
    pub fn with_indexers(
        indexers: impl IntoIterator<Item = (String, IndexFunc<K>)>,
    ) -> Result<Store<K>, IndexError> {
        let store = Store::new();
        for (name, func) in indexers {
            store.add_indexer(&name, func)?;
        }
        Ok(store)
    }

    /// The stored object with the same key as `obj`.
    pub fn get_by_object(&self, obj: &K) -> Option<Arc<K>> {
        self.get(&object_key(obj))
    }

    /// Adds or replaces the object under its key, returning the previous one (upstream `Add`/`Update`).
    pub fn upsert(&self, obj: Arc<K>) -> Option<Arc<K>> {
        let key = object_key(obj.as_ref());
        let mut inner = self.write();
        let old = inner.items.insert(key.clone(), obj.clone());
        inner
            .indices
            .update(&key, old.as_deref(), Some(obj.as_ref()));
        old
    }

    /// Removes the object under `key`, returning it (upstream `Delete`).
    pub fn delete(&self, key: &str) -> Option<Arc<K>> {
        let mut inner = self.write();
        let old = inner.items.remove(key);
        if let Some(old) = &old {
            inner.indices.update(key, Some(old.as_ref()), None);
        }
        old
    }

    /// Replaces the whole content (upstream `Replace`), returning the previous content by key.
    pub fn replace(&self, objects: impl IntoIterator<Item = Arc<K>>) -> HashMap<String, Arc<K>> {
        let items: HashMap<String, Arc<K>> = objects
            .into_iter()
            .map(|o| (object_key(o.as_ref()), o))
            .collect();
        let mut inner = self.write();
        inner.indices.clear();
        let Inner {
            items: current,
            indices,
        } = &mut *inner;
        for (key, obj) in &items {
            indices.update(key, None, Some(obj.as_ref()));
        }
        std::mem::replace(current, items)
    }
}

/// The entries of a map of objects by key, sorted by key. The sort runs on the keys alone, in a
/// function that is not generic, so one copy of it serves every informer type.
pub(crate) fn in_key_order<V>(map: HashMap<String, V>) -> Vec<(String, V)> {
    let entries: Vec<(String, V)> = map.into_iter().collect();
    let keys: Vec<&str> = entries.iter().map(|(k, _)| k.as_str()).collect();
    let order = key_order(&keys);
    let mut slots: Vec<Option<(String, V)>> = entries.into_iter().map(Some).collect();
    order.into_iter().filter_map(|i| slots[i].take()).collect()
}

fn key_order(keys: &[&str]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..keys.len()).collect();
    order.sort_unstable_by(|&a, &b| keys[a].cmp(keys[b]));
    order
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::informer::index::label_index_func;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;

    fn cm(ns: &str, name: &str, app: &str) -> Arc<ConfigMap> {
        Arc::new(ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(ns.into()),
                labels: Some([("app".to_string(), app.to_string())].into()),
                ..Default::default()
            },
            ..Default::default()
        })
    }

    #[test]
    fn informer_store_indexes_by_namespace_and_label() {
        let store: Store<ConfigMap> =
            Store::with_indexers([("app".to_string(), label_index_func("app"))]).unwrap();
        assert!(store.upsert(cm("a", "x", "web")).is_none());
        store.upsert(cm("a", "y", "db"));
        store.upsert(cm("b", "x", "web"));
        assert_eq!(store.list_keys(), vec!["a/x", "a/y", "b/x"]);
        assert_eq!(
            store.index_keys("namespace", "a").unwrap(),
            vec!["a/x", "a/y"]
        );
        assert_eq!(store.index_keys("app", "web").unwrap(), vec!["a/x", "b/x"]);
        // Relabel: the key moves between values.
        let old = store.upsert(cm("a", "x", "db")).expect("previous");
        assert_eq!(old.metadata.labels.as_ref().unwrap()["app"], "web");
        assert_eq!(store.index_keys("app", "web").unwrap(), vec!["b/x"]);
        assert_eq!(store.index_keys("app", "db").unwrap(), vec!["a/x", "a/y"]);
        assert!(store.delete("a/y").is_some());
        assert_eq!(store.list_namespace("a").len(), 1);
        assert_eq!(store.list_index_values("app"), vec!["db", "web"]);
        // Replace drops what is not listed and reindexes.
        let old = store.replace([cm("c", "z", "web")]);
        assert_eq!(old.len(), 2);
        assert_eq!(store.list_keys(), vec!["c/z"]);
        assert_eq!(store.index_keys("app", "web").unwrap(), vec!["c/z"]);
        assert!(store.index_keys("namespace", "a").unwrap().is_empty());
        // An index added later covers what is already stored.
        store
            .add_indexer(
                "name",
                Arc::new(|c: &ConfigMap| c.metadata.name.clone().into_iter().collect()),
            )
            .unwrap();
        assert_eq!(store.by_index("name", "z").unwrap().len(), 1);
        assert!(store.by_index("missing", "z").is_err());
    }
}
