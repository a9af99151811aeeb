//! Object keys and secondary indices (upstream client-go `tools/cache/index.go` and the index part of
//! `thread_safe_store.go`: `Indexers`, `IndexFunc`, `MetaNamespaceIndexFunc`, `MetaNamespaceKeyFunc`,
//! `SplitMetaNamespaceKey`, `updateIndices`).
//!
//! An index function maps an object to the values it is indexed under (a pod to its node name, any
//! object to its namespace); [`Indices`] keeps, per index, the set of object keys under each value and
//! is updated with the old and new state of every write. The store ([`super::store::Store`]) holds it
//! behind its lock.
//!
//! Differences from upstream: index functions cannot fail (an object that has no value for an index
//! returns an empty list), and key sets are ordered, so `by_index` answers are sorted by key.

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::sync::Arc;

use kube::Resource;

/// The name of the index every informer store has: objects by namespace (cluster-scoped objects have
/// none and are not in it).
pub const NAMESPACE_INDEX: &str = "namespace";

/// Maps an object to the values it is indexed under (upstream `IndexFunc`).
pub type IndexFunc<K> = Arc<dyn Fn(&K) -> Vec<String> + Send + Sync>;

/// Errors from index look-ups and registration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IndexError {
    /// `by_index` named an index that was never registered.
    #[error("index {0:?} does not exist")]
    NoSuchIndex(String),
    /// An index of this name is already registered.
    #[error("index {0:?} already exists")]
    Conflict(String),
}

/// The key of an object in a store (upstream `MetaNamespaceKeyFunc`): `namespace/name`, or `name` for
/// cluster-scoped objects.
pub fn object_key<K: Resource>(obj: &K) -> String {
    let meta = obj.meta();
    let name = meta.name.as_deref().unwrap_or_default();
    match meta.namespace.as_deref() {
        Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
        _ => name.to_string(),
    }
}

/// Splits a key made by [`object_key`] into namespace and name (upstream `SplitMetaNamespaceKey`).
pub fn split_key(key: &str) -> (Option<&str>, &str) {
    match key.split_once('/') {
        Some((ns, name)) => (Some(ns), name),
        None => (None, key),
    }
}

/// The namespace index function (upstream `MetaNamespaceIndexFunc`).
pub fn namespace_index_func<K: Resource>(obj: &K) -> Vec<String> {
    match obj.meta().namespace.as_deref() {
        Some(ns) if !ns.is_empty() => vec![ns.to_string()],
        _ => Vec::new(),
    }
}

/// Builds an [`IndexFunc`] from a closure.
pub fn index_func<K>(f: impl Fn(&K) -> Vec<String> + Send + Sync + 'static) -> IndexFunc<K> {
    Arc::new(f)
}

/// An index function on one label: the label's value, for objects that have the label.
pub fn label_index_func<K: Resource>(label: impl Into<String>) -> IndexFunc<K> {
    let label = label.into();
    Arc::new(move |obj: &K| {
        obj.meta()
            .labels
            .as_ref()
            .and_then(|l| l.get(&label))
            .map(|v| vec![v.clone()])
            .unwrap_or_default()
    })
}

/// Registered index functions and, per index, value -> keys.
///
/// Only the calls of the index functions are generic; the key sets are kept by the non-generic
/// [`IndexValues`], so the bookkeeping is compiled once for every informer type. The functions are a
/// short list (a store has a handful of indices), not a map, for the same reason.
pub struct Indices<K> {
    funcs: Vec<(String, IndexFunc<K>)>,
    values: IndexValues,
}

impl<K> Default for Indices<K> {
    fn default() -> Self {
        Indices {
            funcs: Vec::new(),
            values: IndexValues::default(),
        }
    }
}

impl<K> fmt::Debug for Indices<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Indices")
            .field("indexers", &self.names())
            .finish()
    }
}

impl<K> Indices<K> {
    /// Registers an index and indexes `existing` (key, object) pairs under it.
    pub fn add<'a>(
        &mut self,
        name: &str,
        func: IndexFunc<K>,
        existing: impl Iterator<Item = (&'a String, &'a Arc<K>)>,
    ) -> Result<(), IndexError>
    where
        K: 'a,
    {
        if self.funcs.iter().any(|(n, _)| n == name) {
            return Err(IndexError::Conflict(name.to_string()));
        }
        let mut index: HashMap<String, BTreeSet<String>> = HashMap::new();
        for (key, obj) in existing {
            for value in func(obj) {
                index.entry(value).or_default().insert(key.clone());
            }
        }
        self.funcs.push((name.to_string(), func));
        self.values.0.insert(name.to_string(), index);
        Ok(())
    }

    /// Moves `key` from the values of `old` to the values of `new` in every index (upstream
    /// `updateIndices`); `None` for a create or a delete.
    pub fn update(&mut self, key: &str, old: Option<&K>, new: Option<&K>) {
        for (name, func) in &self.funcs {
            let old_values = old.map(|o| func(o)).unwrap_or_default();
            let new_values = new.map(|n| func(n)).unwrap_or_default();
            self.values.move_key(name, key, old_values, new_values);
        }
    }

    /// Drops every indexed key (the funcs stay).
    pub fn clear(&mut self) {
        self.values.clear();
    }

    /// The keys indexed under `value` in index `name`, sorted.
    pub fn keys(&self, name: &str, value: &str) -> Result<Vec<String>, IndexError> {
        self.values.keys(name, value)
    }

    /// Every value that has at least one key in index `name` (upstream `ListIndexFuncValues`).
    pub fn values(&self, name: &str) -> Vec<String> {
        self.values.values(name)
    }

    /// The registered index names, sorted.
    pub fn names(&self) -> Vec<String> {
        sorted_names(self.funcs.iter().map(|(n, _)| n))
    }
}

fn sorted_names<'a>(names: impl Iterator<Item = &'a String>) -> Vec<String> {
    let mut names: Vec<String> = names.cloned().collect();
    names.sort();
    names
}

/// Per index, value -> keys (the type-independent part of [`Indices`]).
#[derive(Default)]
struct IndexValues(HashMap<String, HashMap<String, BTreeSet<String>>>);

impl IndexValues {
    /// Moves `key` from `old_values` to `new_values` in index `name`.
    fn move_key(
        &mut self,
        name: &str,
        key: &str,
        old_values: Vec<String>,
        new_values: Vec<String>,
    ) {
        if old_values == new_values {
            return;
        }
        let index = match self.0.get_mut(name) {
            Some(index) => index,
            None => self.0.entry(name.to_string()).or_default(),
        };
        for value in &old_values {
            if new_values.contains(value) {
                continue;
            }
            if let Some(keys) = index.get_mut(value) {
                keys.remove(key);
                if keys.is_empty() {
                    index.remove(value);
                }
            }
        }
        for value in new_values {
            index.entry(value).or_default().insert(key.to_string());
        }
    }

    fn clear(&mut self) {
        for index in self.0.values_mut() {
            index.clear();
        }
    }

    fn keys(&self, name: &str, value: &str) -> Result<Vec<String>, IndexError> {
        let index = self
            .0
            .get(name)
            .ok_or_else(|| IndexError::NoSuchIndex(name.to_string()))?;
        Ok(index
            .get(value)
            .map(|keys| keys.iter().cloned().collect())
            .unwrap_or_default())
    }

    fn values(&self, name: &str) -> Vec<String> {
        sorted_names(self.0.get(name).into_iter().flat_map(|index| index.keys()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Namespace, Pod};
    use kube::api::ObjectMeta;

    fn pod(ns: &str, name: &str, node: &str) -> Pod {
        let mut p = Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(ns.into()),
                ..Default::default()
            },
            ..Default::default()
        };
        p.spec = Some(k8s_openapi::api::core::v1::PodSpec {
            node_name: (!node.is_empty()).then(|| node.to_string()),
            ..Default::default()
        });
        p
    }

    fn by_node(p: &Pod) -> Vec<String> {
        p.spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .into_iter()
            .collect()
    }

    #[test]
    fn informer_keys_for_namespaced_and_cluster_scoped_objects() {
        assert_eq!(object_key(&pod("default", "web", "")), "default/web");
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some("kube-system".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        assert_eq!(object_key(&ns), "kube-system");
        assert_eq!(split_key("default/web"), (Some("default"), "web"));
        assert_eq!(split_key("kube-system"), (None, "kube-system"));
    }

    #[test]
    fn informer_index_moves_keys_between_values() {
        let mut idx: Indices<Pod> = Indices::default();
        idx.add("node", index_func(by_node), std::iter::empty())
            .unwrap();
        let a = pod("ns", "a", "n1");
        idx.update("ns/a", None, Some(&a));
        assert_eq!(idx.keys("node", "n1").unwrap(), vec!["ns/a"]);
        let a2 = pod("ns", "a", "n2");
        idx.update("ns/a", Some(&a), Some(&a2));
        assert!(idx.keys("node", "n1").unwrap().is_empty());
        assert_eq!(idx.values("node"), vec!["n2"]);
        idx.update("ns/a", Some(&a2), None);
        assert!(idx.values("node").is_empty());
        assert_eq!(
            idx.keys("nope", "x"),
            Err(IndexError::NoSuchIndex("nope".into()))
        );
        assert_eq!(
            idx.add("node", index_func(by_node), std::iter::empty()),
            Err(IndexError::Conflict("node".into()))
        );
    }
}
