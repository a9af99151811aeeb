//! The scheduler's informers and event handlers (upstream `eventhandlers.go`): nodes and assigned
//! pods feed the cache, pending pods the queue (through PreEnqueue), nominations the nominator, and
//! every change that may make pods schedulable becomes a [`ClusterEvent`] for the queue's hints.
//! Node updates are classified (labels, taints, allocatable) so that heartbeat-only status writes
//! move no pod.

use std::sync::Arc;

use client::informer::{
    EventHandlerFuncs, InformerConfig, SharedInformer, SharedInformerFactory, Store,
};
use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{
    Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod, ReplicationController, Service,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceSlice};
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};

use crate::cache::pod_key;
use crate::framework::resources::pod_requests;
use crate::framework::{action, ClusterEvent, EventResource, Listers, PodInfo};
use crate::scheduler::Shared;

pub(crate) struct Informers {
    factory: Arc<SharedInformerFactory>,
    nodes: Arc<SharedInformer<Node>>,
    pods: Arc<SharedInformer<Pod>>,
    pvcs: Arc<SharedInformer<PersistentVolumeClaim>>,
    pvs: Arc<SharedInformer<PersistentVolume>>,
    storage_classes: Arc<SharedInformer<StorageClass>>,
    csi_nodes: Arc<SharedInformer<CSINode>>,
    namespaces: Arc<SharedInformer<Namespace>>,
    pdbs: Arc<SharedInformer<PodDisruptionBudget>>,
    services: Arc<SharedInformer<Service>>,
    rcs: Arc<SharedInformer<ReplicationController>>,
    rss: Arc<SharedInformer<ReplicaSet>>,
    sss: Arc<SharedInformer<StatefulSet>>,
    claims: Arc<SharedInformer<ResourceClaim>>,
    slices: Arc<SharedInformer<ResourceSlice>>,
    classes: Arc<SharedInformer<DeviceClass>>,
    dra: Arc<crate::plugins::dynamic_resources::tracker::Tracker>,
}

/// Which node changes matter to plugins (upstream `nodeSchedulingPropertiesChange`).
pub fn node_update_action(old: &Node, new: &Node) -> u32 {
    let mut a = 0;
    if old.metadata.labels != new.metadata.labels {
        a |= action::UPDATE_NODE_LABEL;
    }
    let taints = |n: &Node| n.spec.as_ref().map(|s| (s.taints.clone(), s.unschedulable));
    if taints(old) != taints(new) {
        a |= action::UPDATE_NODE_TAINT;
    }
    let alloc = |n: &Node| n.status.as_ref().and_then(|s| s.allocatable.clone());
    if alloc(old) != alloc(new) {
        a |= action::UPDATE_NODE_ALLOCATABLE;
    }
    let images = |n: &Node| n.status.as_ref().and_then(|s| s.images.clone());
    if a == 0 && images(old) != images(new) {
        a |= action::UPDATE_OTHER;
    }
    a
}

/// Which changes of an assigned pod matter (labels; requests going down).
pub fn assigned_pod_update_action(old: &Pod, new: &Pod) -> u32 {
    let mut a = 0;
    if old.metadata.labels != new.metadata.labels {
        a |= action::UPDATE_POD_LABEL;
    }
    // Only the requests are compared: no copy of either pod, nor their affinity terms.
    let (o, n) = (pod_requests(old), pod_requests(new));
    if n.milli_cpu < o.milli_cpu || n.memory < o.memory {
        a |= action::UPDATE_POD_SCALE_DOWN;
    }
    a
}

/// Whether an update of a pending pod may change its scheduling (upstream `isPodUpdated` ignores
/// status and bookkeeping metadata): then it is queued again.
fn pending_pod_changed(old: &Pod, new: &Pod) -> bool {
    old.spec != new.spec
        || old.metadata.labels != new.metadata.labels
        || old.metadata.annotations != new.metadata.annotations
        || old.metadata.owner_references != new.metadata.owner_references
}

fn nominated_node(pod: &Pod) -> Option<&str> {
    pod.status
        .as_ref()
        .and_then(|s| s.nominated_node_name.as_deref())
        .filter(|n| !n.is_empty())
}

fn event(shared: &Shared, resource: EventResource, a: u32) {
    if a != 0 {
        let interest = shared.interest();
        shared
            .queue
            .on_event(ClusterEvent::new(resource, a), &interest);
    }
}

fn on_pending_pod(shared: &Shared, pod: &Arc<Pod>, profile: usize) {
    let key = pod_key(pod);
    match nominated_node(pod) {
        Some(n) => shared.nominator.add(Arc::new(PodInfo::new(pod.clone())), n),
        None => shared.nominator.delete(&key),
    }
    shared.enqueue(pod, profile);
}

fn on_assigned_pod(shared: &Shared, pod: &Arc<Pod>) {
    let key = pod_key(pod);
    shared.nominator.delete(&key);
    shared.queue.remove(&key);
    shared.cache().update_pod(pod.clone());
}

impl Informers {
    /// The scheduler's own factory. The scheduler never reads managedFields: not caching them saves
    /// most of a pod's metadata (upstream kube-scheduler trims them too).
    pub(crate) fn factory(client: kube::Client) -> Arc<SharedInformerFactory> {
        Arc::new(SharedInformerFactory::new(
            client,
            InformerConfig::new().trim_managed_fields(),
        ))
    }

    /// The scheduler's informers from `factory`, which other components of the process may share
    /// (then its default configuration must trim no more than managedFields).
    pub(crate) fn new(factory: Arc<SharedInformerFactory>) -> Informers {
        Informers {
            nodes: factory.informer::<Node>(),
            pods: factory.informer::<Pod>(),
            pvcs: factory.informer::<PersistentVolumeClaim>(),
            pvs: factory.informer::<PersistentVolume>(),
            storage_classes: factory.informer::<StorageClass>(),
            csi_nodes: factory.informer::<CSINode>(),
            namespaces: factory.informer::<Namespace>(),
            pdbs: factory.informer::<PodDisruptionBudget>(),
            services: factory.informer::<Service>(),
            rcs: factory.informer::<ReplicationController>(),
            rss: factory.informer::<ReplicaSet>(),
            sss: factory.informer::<StatefulSet>(),
            claims: factory.informer::<ResourceClaim>(),
            slices: factory.informer::<ResourceSlice>(),
            classes: factory.informer::<DeviceClass>(),
            dra: Arc::default(),
            factory,
        }
    }

    pub(crate) fn listers(&self) -> Listers {
        Listers {
            pvcs: self.pvcs.store(),
            pvs: self.pvs.store(),
            storage_classes: self.storage_classes.store(),
            csi_nodes: self.csi_nodes.store(),
            namespaces: self.namespaces.store(),
            pdbs: self.pdbs.store(),
            services: self.services.store(),
            replication_controllers: self.rcs.store(),
            replica_sets: self.rss.store(),
            stateful_sets: self.sss.store(),
            resource_claims: self.claims.store(),
            resource_slices: self.slices.store(),
            device_classes: self.classes.store(),
            dra: self.dra.clone(),
        }
    }

    /// Adds the handlers, starts the informers, waits for their caches; returns the pod store.
    pub(crate) async fn start(self, shared: Arc<Shared>) -> Arc<Store<Pod>> {
        let (s1, s2, s3) = (shared.clone(), shared.clone(), shared.clone());
        self.nodes.add_event_handler(
            EventHandlerFuncs::new()
                .on_add(move |n: &Arc<Node>, _| {
                    s1.cache().update_node(n.clone());
                    event(&s1, EventResource::Node, action::ADD);
                })
                .on_update(move |old: &Arc<Node>, n: &Arc<Node>| {
                    s2.cache().update_node(n.clone());
                    event(&s2, EventResource::Node, node_update_action(old, n));
                })
                .on_delete(move |d| {
                    s3.cache()
                        .remove_node(d.object().metadata.name.as_deref().unwrap_or(""));
                    event(&s3, EventResource::Node, action::DELETE);
                }),
        );
        let (p1, p2, p3) = (shared.clone(), shared.clone(), shared.clone());
        self.pods.add_event_handler(
            EventHandlerFuncs::new()
                .on_add(move |p: &Arc<Pod>, _| {
                    if p.spec
                        .as_ref()
                        .and_then(|s| s.node_name.as_deref())
                        .is_some_and(|n| !n.is_empty())
                    {
                        on_assigned_pod(&p1, p);
                        event(&p1, EventResource::Pod, action::ADD);
                    } else if let Some(profile) = p1.responsible(p) {
                        on_pending_pod(&p1, p, profile);
                    }
                })
                .on_update(move |old: &Arc<Pod>, p: &Arc<Pod>| {
                    let was_assigned = old
                        .spec
                        .as_ref()
                        .and_then(|s| s.node_name.as_deref())
                        .is_some_and(|n| !n.is_empty());
                    if p.spec
                        .as_ref()
                        .and_then(|s| s.node_name.as_deref())
                        .is_some_and(|n| !n.is_empty())
                    {
                        on_assigned_pod(&p2, p);
                        let a = if !was_assigned {
                            action::ADD
                        } else if !crate::scheduler::terminal(old) && crate::scheduler::terminal(p)
                        {
                            // A finished pod frees its node as a deleted one would.
                            action::DELETE
                        } else {
                            assigned_pod_update_action(old, p)
                        };
                        event(&p2, EventResource::Pod, a);
                    } else if let Some(profile) = p2.responsible(p) {
                        let key = pod_key(p);
                        match nominated_node(p) {
                            Some(n) => p2.nominator.add(Arc::new(PodInfo::new(p.clone())), n),
                            None => p2.nominator.delete(&key),
                        }
                        if pending_pod_changed(old, p) || p2.queue.is_gated(&key) {
                            p2.enqueue(p, profile);
                        }
                    } else {
                        let key = pod_key(p);
                        p2.queue.remove(&key);
                        p2.nominator.delete(&key);
                    }
                })
                .on_delete(move |d| {
                    let pod = d.object();
                    let key = pod_key(pod);
                    p3.queue.remove(&key);
                    p3.nominator.delete(&key);
                    let was_placed = p3.cache().is_placed(&key);
                    p3.cache().remove_pod(pod);
                    if was_placed {
                        event(&p3, EventResource::Pod, action::DELETE);
                    }
                }),
        );
        macro_rules! on_changes {
            ($inf:expr, $res:expr) => {{
                let (a, b) = (shared.clone(), shared.clone());
                $inf.add_event_handler(
                    EventHandlerFuncs::new()
                        .on_add(move |_, _| event(&a, $res, action::ADD))
                        .on_update(move |_, _| event(&b, $res, action::UPDATE_OTHER)),
                );
            }};
        }
        self.volume_handlers(&shared);
        on_changes!(self.storage_classes, EventResource::StorageClass);
        on_changes!(self.csi_nodes, EventResource::CSINode);
        on_changes!(self.namespaces, EventResource::Namespace);
        on_changes!(self.classes, EventResource::DeviceClass);
        self.dra_handlers(&shared);
        self.factory.start();
        self.factory.wait_for_cache_sync().await;
        self.pods.store()
    }
}

impl Informers {
    /// Claim and volume events with VolumeBinding's queueing hints: a claim's change moves only
    /// the pods that use it, a volume's only pods whose claims all exist.
    fn volume_handlers(&self, shared: &Arc<Shared>) {
        use crate::plugins::volume_binding::{pod_uses_claim, volume_change_may_help};
        let claim_event = |shared: &Arc<Shared>, pods: &Arc<Store<Pod>>| {
            let (shared, pods) = (shared.clone(), pods.clone());
            move |claim: &PersistentVolumeClaim, a: u32| {
                let interest = shared.interest();
                let concerns = |k: &str| pods.get(k).is_some_and(|p| pod_uses_claim(&p, claim));
                let e = ClusterEvent::new(EventResource::PersistentVolumeClaim, a);
                shared.queue.on_event_for(e, &interest, &concerns);
            }
        };
        let pods = self.pods.store();
        let (on_add, on_update) = (claim_event(shared, &pods), claim_event(shared, &pods));
        self.pvcs.add_event_handler(
            EventHandlerFuncs::new()
                .on_add(move |c: &Arc<PersistentVolumeClaim>, _| on_add(c, action::ADD))
                .on_update(move |_, c: &Arc<PersistentVolumeClaim>| {
                    on_update(c, action::UPDATE_OTHER)
                }),
        );
        let volume_event = |shared: &Arc<Shared>| {
            let (shared, pods, claims) = (shared.clone(), pods.clone(), self.pvcs.store());
            move |a: u32| {
                let interest = shared.interest();
                let concerns = |k: &str| {
                    pods.get(k)
                        .is_some_and(|p| volume_change_may_help(&p, |c| claims.get(c).is_some()))
                };
                let e = ClusterEvent::new(EventResource::PersistentVolume, a);
                shared.queue.on_event_for(e, &interest, &concerns);
            }
        };
        let (on_add, on_update) = (volume_event(shared), volume_event(shared));
        self.pvs.add_event_handler(
            EventHandlerFuncs::new()
                .on_add(move |_, _| on_add(action::ADD))
                .on_update(move |_, _| on_update(action::UPDATE_OTHER)),
        );
    }

    /// Claims feed the DRA tracker and wake the pods PreEnqueue kept out for a missing claim;
    /// slices invalidate the plugin's slice index.
    fn dra_handlers(&self, shared: &Arc<Shared>) {
        let key = |c: &ResourceClaim| crate::plugins::dynamic_resources::tracker::claim_key(c);
        let (t1, t2, t3) = (self.dra.clone(), self.dra.clone(), self.dra.clone());
        let (c1, c2, c3) = (shared.clone(), shared.clone(), shared.clone());
        let pods = self.pods.store();
        self.claims.add_event_handler(
            EventHandlerFuncs::new()
                .on_add(move |c: &Arc<ResourceClaim>, _| {
                    t1.on_claim(&key(c), Some(c));
                    event(&c1, EventResource::ResourceClaim, action::ADD);
                    let ns = c.metadata.namespace.as_deref().unwrap_or("");
                    for k in c1.queue.gated_keys() {
                        let Some(p) = pods.get(&k) else { continue };
                        if p.metadata.namespace.as_deref() == Some(ns) {
                            if let Some(profile) = c1.responsible(&p) {
                                c1.enqueue(&p, profile);
                            }
                        }
                    }
                })
                .on_update(move |_, c: &Arc<ResourceClaim>| {
                    t2.on_claim(&key(c), Some(c));
                    event(&c2, EventResource::ResourceClaim, action::UPDATE_OTHER);
                })
                .on_delete(move |d| {
                    t3.on_claim(&key(d.object()), None);
                    event(&c3, EventResource::ResourceClaim, action::DELETE);
                }),
        );
        let (t1, t2, t3) = (self.dra.clone(), self.dra.clone(), self.dra.clone());
        let (s1, s2) = (shared.clone(), shared.clone());
        self.slices.add_event_handler(
            EventHandlerFuncs::new()
                .on_add(move |_: &Arc<ResourceSlice>, _| {
                    t1.slices_changed();
                    event(&s1, EventResource::ResourceSlice, action::ADD);
                })
                .on_update(move |_, _| {
                    t2.slices_changed();
                    event(&s2, EventResource::ResourceSlice, action::UPDATE_OTHER);
                })
                .on_delete(move |_| t3.slices_changed()),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(v: serde_json::Value) -> Node {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn node_updates_are_classified() {
        let base = json!({"metadata": {"name": "n", "labels": {"a": "1"}},
            "spec": {"taints": []}, "status": {"allocatable": {"cpu": "1"}, "conditions": []}});
        let with = |path: &str, v: serde_json::Value| {
            let mut n = base.clone();
            *n.pointer_mut(path).unwrap() = v;
            node(n)
        };
        let old = node(base.clone());
        let cases = [
            (
                with("/metadata/labels", json!({"a": "2"})),
                action::UPDATE_NODE_LABEL,
            ),
            (
                with(
                    "/spec/taints",
                    json!([{"key": "k", "effect": "NoSchedule"}]),
                ),
                action::UPDATE_NODE_TAINT,
            ),
            (
                with("/status/allocatable", json!({"cpu": "2"})),
                action::UPDATE_NODE_ALLOCATABLE,
            ),
            (
                with(
                    "/status/conditions",
                    json!([{"type": "Ready", "status": "True"}]),
                ),
                0,
            ),
        ];
        for (new, want) in cases {
            assert_eq!(node_update_action(&old, &new), want, "{new:?}");
        }
        let mut cordoned = base.clone();
        cordoned["spec"]["unschedulable"] = json!(true);
        assert_eq!(
            node_update_action(&old, &node(cordoned)),
            action::UPDATE_NODE_TAINT
        );
    }

    #[test]
    fn pod_updates_are_classified() {
        let pod = |labels: serde_json::Value, cpu: &str, phase: &str| -> Pod {
            serde_json::from_value(json!({"metadata": {"name": "p", "labels": labels},
                "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
                "status": {"phase": phase}}))
            .unwrap()
        };
        let old = pod(json!({"a": "1"}), "1", "Pending");
        assert_eq!(
            assigned_pod_update_action(&old, &pod(json!({"a": "2"}), "1", "Pending")),
            action::UPDATE_POD_LABEL
        );
        assert_eq!(
            assigned_pod_update_action(&old, &pod(json!({"a": "1"}), "500m", "Pending")),
            action::UPDATE_POD_SCALE_DOWN
        );
        assert_eq!(
            assigned_pod_update_action(&old, &pod(json!({"a": "1"}), "1", "Running")),
            0
        );
        // A pending pod's status-only change does not requeue it.
        assert!(!pending_pod_changed(
            &old,
            &pod(json!({"a": "1"}), "1", "Running")
        ));
        assert!(pending_pod_changed(
            &old,
            &pod(json!({"a": "1"}), "2", "Pending")
        ));
    }
}
