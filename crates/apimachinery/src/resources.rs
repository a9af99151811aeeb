//! The resource registry: every API resource the server serves, with what discovery publishes about it
//! (upstream: each group's `RESTStorageProvider` plus `APIResource` in discovery). Built-in resources are
//! entries of [`builtin`]; custom resources are added and removed at run time through [`Registry`], so
//! discovery and routing follow.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

/// One served resource at one group/version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resource {
    /// API group; "" for core.
    pub group: String,
    pub version: String,
    pub kind: String,
    /// The URL segment: lowercase plural.
    pub plural: String,
    pub singular: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    pub verbs: Vec<String>,
    /// Subresources served under `<name>/<subresource>`, e.g. "status", "scale", "binding".
    pub subresources: Vec<String>,
    /// Key prefix in storage, without the leading slash, e.g. "pods", "deployments", "minions" upstream
    /// for nodes (we use the plural). Resources sharing storage across versions share it.
    pub storage: String,
    /// `metadata.generation` is maintained (set to 1 on create, bumped on spec change).
    pub generation: bool,
    /// Served from a CustomResourceDefinition (no typed form; printed as upstream prints custom
    /// resources).
    pub custom: bool,
}

impl Resource {
    /// `apps/v1`, or `v1` for core.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    pub fn has_subresource(&self, name: &str) -> bool {
        self.subresources.iter().any(|s| s == name)
    }

    pub fn has_verb(&self, verb: &str) -> bool {
        self.verbs.iter().any(|v| v == verb)
    }

    /// `pods`, `deployments.apps`: how errors name the resource.
    pub fn group_resource(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }
}

/// The verbs of an ordinary stored resource.
pub const STANDARD_VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

mod builtin;
pub use builtin::builtin;

/// The resources served now. Cheap to clone (shared); readers see a consistent snapshot.
#[derive(Clone, Default)]
pub struct Registry {
    /// Readers take the current `Arc<Snapshot>`; writers replace it (copy on write), so serving a
    /// request never copies the table.
    inner: Arc<RwLock<Arc<Snapshot>>>,
}

/// All resources by (group, version, plural), plus the preferred version of each group.
#[derive(Clone, Default, Debug)]
pub struct Snapshot {
    pub resources: BTreeMap<(String, String, String), Arc<Resource>>,
    /// Group name -> versions in preference order.
    pub groups: Vec<(String, Vec<String>)>,
}

impl Snapshot {
    pub fn get(&self, group: &str, version: &str, plural: &str) -> Option<Arc<Resource>> {
        self.resources
            .get(&(group.to_string(), version.to_string(), plural.to_string()))
            .cloned()
    }

    /// The resources of one group/version, in plural order.
    pub fn group_version(&self, group: &str, version: &str) -> Vec<Arc<Resource>> {
        self.resources
            .values()
            .filter(|r| r.group == group && r.version == version)
            .cloned()
            .collect()
    }

    pub fn versions(&self, group: &str) -> Option<&[String]> {
        self.groups
            .iter()
            .find(|(g, _)| g == group)
            .map(|(_, v)| v.as_slice())
    }
}

impl Registry {
    pub fn with_builtin() -> Registry {
        let registry = Registry::default();
        for r in builtin() {
            registry.add(r);
        }
        registry
    }

    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.inner.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn get(&self, group: &str, version: &str, plural: &str) -> Option<Arc<Resource>> {
        self.inner
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(group, version, plural)
    }

    /// Adds or replaces a resource (a CRD version being served).
    pub fn add(&self, resource: Resource) {
        let mut guard = self.inner.write().unwrap_or_else(|e| e.into_inner());
        let snap = Arc::make_mut(&mut guard);
        let (group, version) = (resource.group.clone(), resource.version.clone());
        match snap.groups.iter_mut().find(|(g, _)| *g == group) {
            Some((_, versions)) => {
                if !versions.contains(&version) {
                    versions.push(version);
                }
            }
            None => snap.groups.push((group, vec![version])),
        }
        let key = (
            resource.group.clone(),
            resource.version.clone(),
            resource.plural.clone(),
        );
        snap.resources.insert(key, Arc::new(resource));
    }

    /// Removes a resource; its group disappears with its last version.
    pub fn remove(&self, group: &str, version: &str, plural: &str) {
        let mut guard = self.inner.write().unwrap_or_else(|e| e.into_inner());
        let snap = Arc::make_mut(&mut guard);
        snap.resources
            .remove(&(group.to_string(), version.to_string(), plural.to_string()));
        let still_served =
            |g: &str, v: &str| snap.resources.keys().any(|(rg, rv, _)| rg == g && rv == v);
        let mut groups = snap.groups.clone();
        for (g, versions) in &mut groups {
            versions.retain(|v| still_served(g, v));
        }
        groups.retain(|(_, versions)| !versions.is_empty());
        snap.groups = groups;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_table_is_consistent() {
        let reg = Registry::with_builtin();
        let snap = reg.snapshot();
        let pods = snap.get("", "v1", "pods").expect("pods");
        assert!(pods.namespaced && pods.short_names == ["po"] && pods.categories == ["all"]);
        assert_eq!(pods.api_version(), "v1");
        let deploy = snap.get("apps", "v1", "deployments").expect("deployments");
        assert_eq!(deploy.group_resource(), "deployments.apps");
        assert!(deploy.has_subresource("scale") && deploy.generation);
        assert_eq!(snap.versions("autoscaling").unwrap(), ["v2", "v1"]);
        assert_eq!(snap.groups[0].0, "", "core first");
        // Plurals are unique within a group/version.
        let mut seen = std::collections::HashSet::new();
        for r in snap.resources.values() {
            assert!(seen.insert((r.group.clone(), r.version.clone(), r.plural.clone())));
        }
    }

    #[test]
    fn resources_come_and_go() {
        let reg = Registry::with_builtin();
        let mut crd = (*reg.get("", "v1", "configmaps").unwrap()).clone();
        crd.group = "example.com".into();
        crd.kind = "Widget".into();
        crd.plural = "widgets".into();
        reg.add(crd);
        assert!(reg.get("example.com", "v1", "widgets").is_some());
        assert!(reg.snapshot().versions("example.com").is_some());
        reg.remove("example.com", "v1", "widgets");
        assert!(reg.get("example.com", "v1", "widgets").is_none());
        assert!(reg.snapshot().versions("example.com").is_none());
    }
}
