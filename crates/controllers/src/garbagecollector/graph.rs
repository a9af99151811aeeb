//! The dependency graph (upstream `garbagecollector/graph.go` and the event processing of
//! `graph_builder.go`): one node per object uid with its owner references and its dependents. Owners
//! referenced but not (yet) seen are "virtual" nodes, to be verified against the API. Processing an
//! informer event updates the graph and says which nodes the workers should look at; it does no I/O,
//! so the rules are tested here without a server.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

pub const FINALIZER_ORPHAN: &str = "orphan";
pub const FINALIZER_FOREGROUND: &str = "foregroundDeletion";

/// Upstream's absent owner cache holds this many identities (LRU there, FIFO here).
const ABSENT_CACHE_SIZE: usize = 500;

/// An object's coordinates (upstream `objectReference`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Identity {
    pub api_version: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[{}/{}, namespace: {}, name: {}, uid: {}]",
            self.api_version, self.kind, self.namespace, self.name, self.uid
        )
    }
}

impl Identity {
    /// The owner a reference names, assumed in the dependent's namespace.
    pub fn of_owner(r: &OwnerReference, namespace: &str) -> Identity {
        Identity {
            api_version: r.api_version.clone(),
            kind: r.kind.clone(),
            namespace: namespace.to_string(),
            name: r.name.clone(),
            uid: r.uid.clone(),
        }
    }
}

fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

/// Whether a reference names these coordinates (uid, name, kind and group; the version may differ).
pub fn reference_matches(r: &OwnerReference, id: &Identity) -> bool {
    r.uid == id.uid
        && r.name == id.name
        && r.kind == id.kind
        && group_of(&r.api_version) == group_of(&id.api_version)
}

#[derive(Clone, Debug, Default)]
pub struct Node {
    pub identity: Identity,
    pub owners: Vec<OwnerReference>,
    pub dependents: HashSet<String>,
    /// Has a deletionTimestamp.
    pub being_deleted: bool,
    /// Being deleted in the foreground: its dependents go first.
    pub deleting_dependents: bool,
    /// Made up from an owner reference, not (yet) seen by an informer.
    pub virtual_node: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Add,
    Update,
    Delete,
}

/// One change for the graph: from an informer, or a "virtual" delete from a worker that found an
/// object absent.
#[derive(Clone, Debug)]
pub struct GraphEvent {
    pub event_type: EventType,
    pub virtual_event: bool,
    pub identity: Identity,
    pub owners: Vec<OwnerReference>,
    pub deleting: bool,
    pub finalizers: Vec<String>,
    /// For updates: whether the old object was being deleted, and its finalizers.
    pub old: Option<(bool, Vec<String>)>,
}

impl GraphEvent {
    pub fn virtual_delete(identity: Identity) -> GraphEvent {
        GraphEvent {
            event_type: EventType::Delete,
            virtual_event: true,
            identity,
            owners: Vec::new(),
            deleting: false,
            finalizers: Vec::new(),
            old: None,
        }
    }

    fn has(&self, f: &str) -> bool {
        self.finalizers.iter().any(|x| x == f)
    }

    /// Deleting now with `finalizer`, and was not before.
    fn starts_waiting_for(&self, finalizer: &str) -> bool {
        if !self.deleting || !self.has(finalizer) {
            return false;
        }
        match &self.old {
            None => true,
            Some((old_deleting, old_finalizers)) => {
                !old_deleting || !old_finalizers.iter().any(|x| x == finalizer)
            }
        }
    }
}

/// What the graph asks of the workers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    AttemptToDelete(String),
    AttemptToOrphan(String),
    /// `dependent` names an owner observed in another namespace (event `OwnerRefInvalidNamespace`).
    InvalidNamespaceOwnerRef {
        dependent: Box<Identity>,
        owner: Box<Identity>,
    },
}

#[derive(Debug, Default)]
pub struct Graph {
    pub nodes: HashMap<String, Node>,
    absent: HashSet<Identity>,
    absent_order: VecDeque<Identity>,
}

impl Graph {
    pub fn get(&self, uid: &str) -> Option<&Node> {
        self.nodes.get(uid)
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Remembers an owner verified absent, so its other dependents need no lookup.
    pub fn add_absent(&mut self, id: Identity) {
        if self.absent.insert(id.clone()) {
            self.absent_order.push_back(id);
            if self.absent_order.len() > ABSENT_CACHE_SIZE {
                if let Some(old) = self.absent_order.pop_front() {
                    self.absent.remove(&old);
                }
            }
        }
    }

    pub fn is_absent(&self, id: &Identity) -> bool {
        self.absent.contains(id)
    }

    /// The dependents whose reference to `owner` has `blockOwnerDeletion`.
    pub fn blocking_dependents(&self, owner: &str) -> Vec<String> {
        let Some(node) = self.nodes.get(owner) else {
            return Vec::new();
        };
        node.dependents
            .iter()
            .filter(|d| {
                self.nodes.get(*d).is_some_and(|dep| {
                    dep.owners
                        .iter()
                        .any(|r| r.uid == owner && r.block_owner_deletion == Some(true))
                })
            })
            .cloned()
            .collect()
    }

    /// Splits dependents by whether their reference to `owner` matches its coordinates (a namespaced
    /// owner in another namespace never does).
    fn partition_dependents(
        &self,
        deps: &HashSet<String>,
        owner: &Identity,
    ) -> (Vec<String>, Vec<String>) {
        let (mut matching, mut other) = (Vec::new(), Vec::new());
        for uid in deps {
            let Some(dep) = self.nodes.get(uid) else {
                continue;
            };
            let (mut yes, mut no) = (false, false);
            if !owner.namespace.is_empty() && owner.namespace != dep.identity.namespace {
                no = true;
            } else {
                for r in dep.owners.iter().filter(|r| r.uid == owner.uid) {
                    if reference_matches(r, owner) {
                        yes = true;
                    } else {
                        no = true;
                    }
                }
            }
            if yes {
                matching.push(uid.clone());
            }
            if no {
                other.push(uid.clone());
            }
        }
        (matching, other)
    }

    fn add_dependent_to_owners(
        &mut self,
        dep_uid: &str,
        owners: &[OwnerReference],
        out: &mut Vec<Action>,
    ) {
        let Some(dep) = self.nodes.get(dep_uid).cloned() else {
            return;
        };
        let mut mismatch = false;
        for r in owners {
            match self.nodes.get_mut(&r.uid) {
                None => {
                    let mut owner = Node {
                        identity: Identity::of_owner(r, &dep.identity.namespace),
                        virtual_node: true,
                        ..Node::default()
                    };
                    owner.dependents.insert(dep_uid.to_string());
                    self.nodes.insert(r.uid.clone(), owner);
                    out.push(Action::AttemptToDelete(r.uid.clone()));
                }
                Some(owner) => {
                    owner.dependents.insert(dep_uid.to_string());
                    let ns = &owner.identity.namespace;
                    if !mismatch && !ns.is_empty() && *ns != dep.identity.namespace {
                        if !owner.virtual_node {
                            out.push(Action::InvalidNamespaceOwnerRef {
                                dependent: Box::new(dep.identity.clone()),
                                owner: Box::new(Identity::of_owner(r, &dep.identity.namespace)),
                            });
                        }
                        mismatch = true;
                    }
                }
            }
        }
        if mismatch {
            // The collector verifies the references and deletes the dependent if all are absent.
            out.push(Action::AttemptToDelete(dep_uid.to_string()));
        }
    }

    fn remove_dependent_from_owners(&mut self, dep_uid: &str, owners: &[OwnerReference]) {
        for r in owners {
            if let Some(owner) = self.nodes.get_mut(&r.uid) {
                owner.dependents.remove(dep_uid);
            }
        }
    }

    /// Owners waiting in the foreground whose blocking dependent went away or stopped blocking.
    fn unblocked_owners(
        &self,
        removed: &[OwnerReference],
        changed: &[(OwnerReference, OwnerReference)],
        out: &mut Vec<Action>,
    ) {
        let mut check = |uid: &str| {
            if self.nodes.get(uid).is_some_and(|o| o.deleting_dependents) {
                out.push(Action::AttemptToDelete(uid.to_string()));
            }
        };
        for r in removed {
            if r.block_owner_deletion == Some(true) {
                check(&r.uid);
            }
        }
        for (old, new) in changed {
            if old.block_owner_deletion == Some(true) && new.block_owner_deletion != Some(true) {
                check(&new.uid);
            }
        }
    }

    fn process_transitions(&mut self, event: &GraphEvent, out: &mut Vec<Action>) {
        let uid = &event.identity.uid;
        if event.starts_waiting_for(FINALIZER_ORPHAN) {
            out.push(Action::AttemptToOrphan(uid.clone()));
            return;
        }
        if event.starts_waiting_for(FINALIZER_FOREGROUND) {
            if let Some(node) = self.nodes.get_mut(uid) {
                node.deleting_dependents = true;
                out.extend(node.dependents.iter().cloned().map(Action::AttemptToDelete));
                out.push(Action::AttemptToDelete(uid.clone()));
            }
        }
    }

    /// Applies one event (upstream `processGraphChanges`) and returns what to look at.
    pub fn process(&mut self, event: &GraphEvent) -> Vec<Action> {
        let mut out = Vec::new();
        let uid = event.identity.uid.clone();
        // A virtual node is now observed: take the real coordinates, re-check dependents that
        // disagree with them.
        if !event.virtual_event && event.event_type != EventType::Delete {
            if let Some(node) = self.nodes.get(&uid).filter(|n| n.virtual_node).cloned() {
                if node.identity != event.identity {
                    let (_, bad) = self.partition_dependents(&node.dependents, &event.identity);
                    for dep in bad {
                        if let Some(d) = self.nodes.get(&dep) {
                            if !event.identity.namespace.is_empty()
                                && d.identity.namespace != event.identity.namespace
                            {
                                if let Some(r) = d.owners.iter().find(|r| r.uid == uid) {
                                    out.push(Action::InvalidNamespaceOwnerRef {
                                        dependent: Box::new(d.identity.clone()),
                                        owner: Box::new(Identity::of_owner(
                                            r,
                                            &d.identity.namespace,
                                        )),
                                    });
                                }
                            }
                        }
                        out.push(Action::AttemptToDelete(dep));
                    }
                }
                if let Some(n) = self.nodes.get_mut(&uid) {
                    n.identity = event.identity.clone();
                    n.virtual_node = false;
                }
            }
        }
        let found = self.nodes.contains_key(&uid);
        match event.event_type {
            EventType::Add | EventType::Update if !found => {
                let node = Node {
                    identity: event.identity.clone(),
                    owners: event.owners.clone(),
                    dependents: HashSet::new(),
                    being_deleted: event.deleting,
                    deleting_dependents: event.deleting && event.has(FINALIZER_FOREGROUND),
                    virtual_node: event.virtual_event,
                };
                self.nodes.insert(uid.clone(), node);
                self.add_dependent_to_owners(&uid, &event.owners, &mut out);
                self.process_transitions(event, &mut out);
            }
            EventType::Add | EventType::Update => {
                let existing = self.nodes[&uid].owners.clone();
                let (added, removed, changed) = references_diff(&existing, &event.owners);
                if !added.is_empty() || !removed.is_empty() || !changed.is_empty() {
                    self.unblocked_owners(&removed, &changed, &mut out);
                    if let Some(n) = self.nodes.get_mut(&uid) {
                        n.owners = event.owners.clone();
                    }
                    self.add_dependent_to_owners(&uid, &added, &mut out);
                    self.remove_dependent_from_owners(&uid, &removed);
                }
                if event.deleting {
                    if let Some(n) = self.nodes.get_mut(&uid) {
                        n.being_deleted = true;
                    }
                }
                self.process_transitions(event, &mut out);
            }
            EventType::Delete => {
                if !found {
                    return out;
                }
                let existing = self.nodes[&uid].clone();
                let mut remove = true;
                if event.virtual_event {
                    let deleted = &event.identity;
                    if existing.virtual_node {
                        let (matching, other) =
                            self.partition_dependents(&existing.dependents, deleted);
                        if !other.is_empty() {
                            // Some dependents name other coordinates for this uid: keep the node.
                            remove = false;
                            if !matching.is_empty() {
                                self.add_absent(deleted.clone());
                                out.extend(matching.into_iter().map(Action::AttemptToDelete));
                            }
                            if existing.identity == *deleted {
                                let replacement = other.iter().find_map(|d| {
                                    let dep = self.nodes.get(d)?;
                                    let r = dep.owners.iter().find(|r| r.uid == uid)?;
                                    let id = Identity::of_owner(r, &dep.identity.namespace);
                                    (id != *deleted).then_some(id)
                                });
                                if let Some(id) = replacement {
                                    if let Some(n) = self.nodes.get_mut(&uid) {
                                        n.identity = id;
                                    }
                                    out.push(Action::AttemptToDelete(uid.clone()));
                                }
                            }
                        }
                    } else if existing.identity != *deleted {
                        // The observed object is there; only references with other coordinates are gone.
                        remove = false;
                        let (matching, _) =
                            self.partition_dependents(&existing.dependents, deleted);
                        if !matching.is_empty() {
                            self.add_absent(deleted.clone());
                            out.extend(matching.into_iter().map(Action::AttemptToDelete));
                        }
                    }
                }
                if remove {
                    self.nodes.remove(&uid);
                    self.remove_dependent_from_owners(&uid, &existing.owners);
                    if !existing.dependents.is_empty() {
                        let id = if event.virtual_event {
                            event.identity.clone()
                        } else {
                            existing.identity.clone()
                        };
                        self.add_absent(id);
                    }
                    out.extend(
                        existing
                            .dependents
                            .iter()
                            .cloned()
                            .map(Action::AttemptToDelete),
                    );
                    for r in &existing.owners {
                        if self
                            .nodes
                            .get(&r.uid)
                            .is_some_and(|o| o.deleting_dependents)
                        {
                            out.push(Action::AttemptToDelete(r.uid.clone()));
                        }
                    }
                }
            }
        }
        out
    }
}

/// Added, removed and changed references by uid (upstream `referencesDiffs`).
#[allow(clippy::type_complexity)]
pub fn references_diff(
    old: &[OwnerReference],
    new: &[OwnerReference],
) -> (
    Vec<OwnerReference>,
    Vec<OwnerReference>,
    Vec<(OwnerReference, OwnerReference)>,
) {
    let old_by: HashMap<&str, &OwnerReference> = old.iter().map(|r| (r.uid.as_str(), r)).collect();
    let new_uids: HashSet<&str> = new.iter().map(|r| r.uid.as_str()).collect();
    let mut added = Vec::new();
    let mut changed = Vec::new();
    for r in new {
        match old_by.get(r.uid.as_str()) {
            None => added.push(r.clone()),
            Some(o) if *o != r => changed.push(((*o).clone(), r.clone())),
            Some(_) => {}
        }
    }
    let removed = old
        .iter()
        .filter(|r| !new_uids.contains(r.uid.as_str()))
        .cloned()
        .collect();
    (added, removed, changed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(kind: &str, ns: &str, name: &str, uid: &str) -> Identity {
        Identity {
            api_version: "v1".into(),
            kind: kind.into(),
            namespace: ns.into(),
            name: name.into(),
            uid: uid.into(),
        }
    }

    fn owner_ref(o: &Identity, block: bool) -> OwnerReference {
        OwnerReference {
            api_version: o.api_version.clone(),
            kind: o.kind.clone(),
            name: o.name.clone(),
            uid: o.uid.clone(),
            block_owner_deletion: block.then_some(true),
            controller: None,
        }
    }

    fn ev(t: EventType, identity: &Identity, owners: Vec<OwnerReference>) -> GraphEvent {
        GraphEvent {
            event_type: t,
            virtual_event: false,
            identity: identity.clone(),
            owners,
            deleting: false,
            finalizers: vec![],
            old: None,
        }
    }

    #[test]
    fn unseen_owner_becomes_virtual_and_is_verified() {
        let mut g = Graph::default();
        let owner = id("ConfigMap", "ns", "a", "u-a");
        let dep = id("ConfigMap", "ns", "b", "u-b");
        let actions = g.process(&ev(EventType::Add, &dep, vec![owner_ref(&owner, false)]));
        assert_eq!(actions, [Action::AttemptToDelete("u-a".into())]);
        assert!(g.get("u-a").unwrap().virtual_node);
        // Observed later: no longer virtual.
        let actions = g.process(&ev(EventType::Add, &owner, vec![]));
        assert!(actions.is_empty());
        assert!(!g.get("u-a").unwrap().virtual_node);
        // The owner goes: its dependent is to be checked and the owner is known absent.
        let actions = g.process(&ev(EventType::Delete, &owner, vec![]));
        assert_eq!(actions, [Action::AttemptToDelete("u-b".into())]);
        assert!(g.is_absent(&owner));
        assert!(g.get("u-a").is_none());
    }

    #[test]
    fn foreground_deletion_enqueues_dependents_and_blocking_ones_block() {
        let mut g = Graph::default();
        let owner = id("ConfigMap", "ns", "a", "u-a");
        let dep = id("ConfigMap", "ns", "b", "u-b");
        g.process(&ev(EventType::Add, &owner, vec![]));
        g.process(&ev(EventType::Add, &dep, vec![owner_ref(&owner, true)]));
        let mut upd = ev(EventType::Update, &owner, vec![]);
        upd.deleting = true;
        upd.finalizers = vec![FINALIZER_FOREGROUND.into()];
        upd.old = Some((false, vec![]));
        let actions = g.process(&upd);
        assert_eq!(
            actions,
            [
                Action::AttemptToDelete("u-b".into()),
                Action::AttemptToDelete("u-a".into())
            ]
        );
        assert!(g.get("u-a").unwrap().deleting_dependents);
        assert_eq!(g.blocking_dependents("u-a"), ["u-b"]);
        // The dependent goes: the waiting owner is looked at again.
        let actions = g.process(&ev(EventType::Delete, &dep, vec![owner_ref(&owner, true)]));
        assert_eq!(actions, [Action::AttemptToDelete("u-a".into())]);
        assert!(g.blocking_dependents("u-a").is_empty());
    }

    #[test]
    fn orphan_finalizer_starts_orphaning_once() {
        let mut g = Graph::default();
        let owner = id("ConfigMap", "ns", "a", "u-a");
        g.process(&ev(EventType::Add, &owner, vec![]));
        let mut upd = ev(EventType::Update, &owner, vec![]);
        upd.deleting = true;
        upd.finalizers = vec![FINALIZER_ORPHAN.into()];
        upd.old = Some((false, vec![]));
        assert_eq!(g.process(&upd), [Action::AttemptToOrphan("u-a".into())]);
        upd.old = Some((true, vec![FINALIZER_ORPHAN.into()]));
        assert!(g.process(&upd).is_empty());
    }

    #[test]
    fn owner_in_another_namespace_is_reported_and_checked() {
        let mut g = Graph::default();
        let owner = id("ConfigMap", "one", "a", "u-a");
        let dep = id("ConfigMap", "two", "b", "u-b");
        g.process(&ev(EventType::Add, &owner, vec![]));
        let actions = g.process(&ev(EventType::Add, &dep, vec![owner_ref(&owner, false)]));
        assert_eq!(
            actions,
            [
                Action::InvalidNamespaceOwnerRef {
                    dependent: Box::new(dep.clone()),
                    owner: Box::new(id("ConfigMap", "two", "a", "u-a"))
                },
                Action::AttemptToDelete("u-b".into())
            ]
        );
        assert_eq!(
            id("ConfigMap", "two", "a", "u-a").to_string(),
            "[v1/ConfigMap, namespace: two, name: a, uid: u-a]"
        );
    }

    #[test]
    fn cluster_scoped_dependent_of_an_observed_namespaced_owner_is_reported() {
        let mut g = Graph::default();
        let owner = id("ConfigMap", "ns", "a", "u-a");
        let dep = id("ClusterRole", "", "r", "u-r");
        g.process(&ev(EventType::Add, &owner, vec![]));
        let actions = g.process(&ev(EventType::Add, &dep, vec![owner_ref(&owner, false)]));
        assert_eq!(
            actions,
            [
                Action::InvalidNamespaceOwnerRef {
                    dependent: Box::new(dep.clone()),
                    owner: Box::new(id("ConfigMap", "", "a", "u-a"))
                },
                Action::AttemptToDelete("u-r".into())
            ]
        );
    }

    #[test]
    fn removed_blocking_reference_unblocks_a_waiting_owner() {
        let mut g = Graph::default();
        let owner = id("ConfigMap", "ns", "a", "u-a");
        let dep = id("ConfigMap", "ns", "b", "u-b");
        let mut o = ev(EventType::Add, &owner, vec![]);
        o.deleting = true;
        o.finalizers = vec![FINALIZER_FOREGROUND.into()];
        g.process(&o);
        g.process(&ev(EventType::Add, &dep, vec![owner_ref(&owner, true)]));
        let actions = g.process(&ev(EventType::Update, &dep, vec![]));
        assert_eq!(actions, [Action::AttemptToDelete("u-a".into())]);
        assert!(g.get("u-a").unwrap().dependents.is_empty());
    }

    #[test]
    fn virtual_delete_of_unverified_owner_removes_it() {
        let mut g = Graph::default();
        let owner = id("ConfigMap", "ns", "ghost", "u-x");
        let dep = id("ConfigMap", "ns", "b", "u-b");
        g.process(&ev(EventType::Add, &dep, vec![owner_ref(&owner, false)]));
        let actions = g.process(&GraphEvent::virtual_delete(owner.clone()));
        assert_eq!(actions, [Action::AttemptToDelete("u-b".into())]);
        assert!(g.is_absent(&owner));
        assert!(g.get("u-x").is_none());
    }
}
