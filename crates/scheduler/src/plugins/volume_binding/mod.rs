//! VolumeBinding (upstream `volumebinding`): every PVC the pod uses must exist and not be
//! deleting; an unbound PVC of an `Immediate` class (or of no class) makes the pod unschedulable,
//! as upstream (the PV controller binds those first); a bound PVC's PV must exist and its node
//! affinity must match the node; an unbound `WaitForFirstConsumer` PVC needs an available PV that
//! fits it and the node, or a class whose provisioner's allowed topologies admit the node (a
//! claim that already has a selected node fits only that node).
//!
//! Reserve assumes the node's choice in the [`assume_cache`]s (the volume's claimRef, the claim's
//! `volume.kubernetes.io/selected-node`), so pods scheduled while this one's binding cycle runs
//! do not choose the same volume; Unreserve reverts it. PreBind writes the choice and waits for
//! the PV controller to bind (see [`binder`]). Claim events move only the pods that use the
//! claim, and volume events only pods whose claims all exist (upstream's queueing hints,
//! [`pod_uses_claim`]). Not done: CSI storage capacity and scoring.

pub mod assume_cache;
mod binder;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};

use crate::framework::{
    action, ClusterEvent, CycleState, EventResource, FilterPlugin, Handle, NodeInfo, Plugin,
    PreBindPlugin, PreFilterPlugin, PreFilterResult, ReservePlugin, Status,
};
use assume_cache::AssumeCache;
use binder::{candidates, pv_node_matches, Plan};

pub const ERR_REASON_BIND_CONFLICT: &str =
    "node(s) didn't find available persistent volumes to bind";
pub const ERR_REASON_NODE_CONFLICT: &str = "node(s) had volume node affinity conflict";
pub const ERR_REASON_PV_NOT_EXIST: &str =
    "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)";
pub const ERR_UNBOUND_IMMEDIATE: &str = "pod has unbound immediate PersistentVolumeClaims";

const STATE_KEY: &str = "PreFilterVolumeBinding";
/// The node's plan as Reserve assumed it, for PreBind and Unreserve.
const PLAN_KEY: &str = "ReserveVolumeBinding";

pub struct VolumeBinding {
    handle: Handle,
    /// The claims and volumes with this scheduler's choices laid over the informers' (upstream
    /// keeps them in the plugin's binder, one per profile, as here).
    pvcs: AssumeCache<PersistentVolumeClaim>,
    pvs: AssumeCache<PersistentVolume>,
}

#[derive(Clone, Debug, Default)]
struct State {
    /// PV names of the pod's bound claims.
    bound: Vec<String>,
    /// Unbound WaitForFirstConsumer claims.
    to_bind: Vec<Arc<PersistentVolumeClaim>>,
    /// For each claim of `to_bind`, the available volumes that fit it on any node, smallest
    /// first: found once per pod, so each node's Filter only checks their node affinity (listing,
    /// parsing and sorting every PV per node made a pod's cycle O(nodes x PVs)).
    candidates: Vec<Vec<Arc<PersistentVolume>>>,
}

impl VolumeBinding {
    pub fn new(handle: Handle) -> VolumeBinding {
        VolumeBinding {
            pvcs: AssumeCache::new(handle.listers.pvcs.clone()),
            pvs: AssumeCache::new(handle.listers.pvs.clone()),
            handle,
        }
    }

    fn binding_mode(&self, pvc: &PersistentVolumeClaim) -> String {
        let class = pvc.spec.as_ref().and_then(|s| s.storage_class_name.clone());
        class
            .filter(|c| !c.is_empty())
            .and_then(|c| self.handle.listers.storage_classes.get(&c))
            .and_then(|sc| sc.volume_binding_mode.clone())
            .unwrap_or_else(|| "Immediate".into())
    }
}

/// Upstream `isSchedulableAfterPersistentVolumeClaimChange` (and the same hint of VolumeZone,
/// VolumeRestrictions and NodeVolumeLimits): a claim's change can only help a pod that uses it.
pub fn pod_uses_claim(pod: &Pod, claim: &PersistentVolumeClaim) -> bool {
    pod.metadata.namespace == claim.metadata.namespace
        && claim.metadata.name.as_deref().is_some_and(|name| {
            apimachinery::volumes::pod_claims(pod)
                .iter()
                .any(|(c, _)| c == name)
        })
}

/// Whether a volume's change may help `pod`: not while one of its claims is missing (PreFilter
/// rejects it for that whatever the volumes are; the claim's own Add event brings it back).
/// StatefulSet pods are created right after their claims, so the scheduler often sees a pod
/// before its claim, and moving such pods on each of the many volume writes of a busy cluster
/// made them fail again and again.
pub fn volume_change_may_help(pod: &Pod, claim_exists: impl Fn(&str) -> bool) -> bool {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("");
    apimachinery::volumes::pod_claims(pod)
        .iter()
        .all(|(name, _)| claim_exists(&format!("{ns}/{name}")))
}

impl Plugin for VolumeBinding {
    fn name(&self) -> &'static str {
        "VolumeBinding"
    }
    fn events_to_register(&self) -> Vec<ClusterEvent> {
        vec![
            ClusterEvent::new(
                EventResource::PersistentVolumeClaim,
                action::ADD | action::UPDATE,
            ),
            ClusterEvent::new(
                EventResource::PersistentVolume,
                action::ADD | action::UPDATE,
            ),
            ClusterEvent::new(EventResource::StorageClass, action::ADD | action::UPDATE),
            ClusterEvent::new(EventResource::Node, action::ADD | action::UPDATE_NODE_LABEL),
        ]
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
    fn as_reserve(&self) -> Option<&dyn ReservePlugin> {
        Some(self)
    }
    fn as_pre_bind(&self) -> Option<&dyn PreBindPlugin> {
        Some(self)
    }
}

impl PreFilterPlugin for VolumeBinding {
    fn pre_filter(&self, state: &mut CycleState, pod: &Pod) -> (Option<PreFilterResult>, Status) {
        let names = apimachinery::volumes::pod_claims(pod);
        if names.is_empty() {
            return (None, Status::Skip);
        }
        let ns = pod.metadata.namespace.as_deref().unwrap_or("");
        let mut s = State::default();
        let mut unbound_immediate = false;
        for (name, ephemeral) in names {
            let Some(pvc) = self.pvcs.get(&format!("{ns}/{name}")) else {
                return (
                    None,
                    Status::UnschedulableAndUnresolvable(format!(
                        "persistentvolumeclaim \"{name}\" not found"
                    )),
                );
            };
            if ephemeral {
                let owned = pvc.metadata.owner_references.iter().flatten().any(|o| {
                    o.controller == Some(true) && Some(&o.uid) == pod.metadata.uid.as_ref()
                });
                if !owned {
                    return (
                        None,
                        Status::UnschedulableAndUnresolvable(format!(
                            "PVC {ns}/{name} was not created for pod {ns}/{} (pod is not owner)",
                            pod.metadata.name.as_deref().unwrap_or("")
                        )),
                    );
                }
            }
            if pvc.metadata.deletion_timestamp.is_some() {
                return (
                    None,
                    Status::UnschedulableAndUnresolvable(format!(
                        "persistentvolumeclaim \"{name}\" is being deleted"
                    )),
                );
            }
            let volume = pvc.spec.as_ref().and_then(|s| s.volume_name.clone());
            match volume.filter(|v| !v.is_empty()) {
                Some(pv) => s.bound.push(pv),
                None if self.binding_mode(&pvc) == "WaitForFirstConsumer" => s.to_bind.push(pvc),
                None => unbound_immediate = true,
            }
        }
        if unbound_immediate {
            return (
                None,
                Status::UnschedulableAndUnresolvable(ERR_UNBOUND_IMMEDIATE.into()),
            );
        }
        if !s.to_bind.is_empty() {
            let pvs = self.pvs.list();
            s.candidates = s.to_bind.iter().map(|c| candidates(&pvs, c)).collect();
        }
        state.write(STATE_KEY, s);
        (None, Status::Success)
    }
}

impl FilterPlugin for VolumeBinding {
    fn filter(&self, state: &CycleState, _pod: &Pod, node: &NodeInfo) -> Status {
        let Some(s) = state.read::<State>(STATE_KEY) else {
            return Status::Success;
        };
        for name in &s.bound {
            let Some(pv) = self.pvs.get(name) else {
                return Status::UnschedulableAndUnresolvable(ERR_REASON_PV_NOT_EXIST.into());
            };
            if !pv_node_matches(&pv, node) {
                return Status::UnschedulableAndUnresolvable(ERR_REASON_NODE_CONFLICT.into());
            }
        }
        if !s.to_bind.is_empty() && self.find_matches(s, node).is_none() {
            return Status::UnschedulableAndUnresolvable(ERR_REASON_BIND_CONFLICT.into());
        }
        Status::Success
    }
}

impl ReservePlugin for VolumeBinding {
    /// Upstream `Reserve` (`AssumePodVolumes`): the chosen node's plan, assumed.
    fn reserve(&self, state: &mut CycleState, _pod: &Pod, node: &str) -> Status {
        let plan = {
            let Some(s) = state.read::<State>(STATE_KEY) else {
                return Status::Success;
            };
            if s.to_bind.is_empty() {
                return Status::Success;
            }
            let Some(info) = state.snapshot.get(node) else {
                return Status::Error(format!("node {node} left the snapshot"));
            };
            let Some(plan) = self.find_matches(s, info) else {
                return Status::Unschedulable(ERR_REASON_BIND_CONFLICT.into());
            };
            plan
        };
        match self.assume_pod_volumes(plan, node) {
            Ok(assumed) => {
                state.write(PLAN_KEY, assumed);
                Status::Success
            }
            Err(e) => Status::Error(e),
        }
    }

    /// Upstream `Unreserve` (`RevertAssumedPodVolumes`).
    fn unreserve(&self, state: &mut CycleState, _pod: &Pod, _node: &str) {
        if let Some(plan) = state.read::<Plan>(PLAN_KEY) {
            self.revert_assumed_pod_volumes(plan);
        }
    }
}

impl PreBindPlugin for VolumeBinding {
    /// Upstream `PreBind` (`BindPodVolumes`) for the plan Reserve assumed.
    fn pre_bind<'a>(
        &'a self,
        state: &'a CycleState,
        _pod: &'a Pod,
        node: &'a str,
    ) -> BoxFuture<'a, Status> {
        async move {
            let Some(plan) = state.read::<Plan>(PLAN_KEY) else {
                return Status::Success;
            };
            let Some(client) = self.handle.client.clone() else {
                return Status::Error("no API client to bind volumes with".into());
            };
            let Some(info) = state.snapshot.get(node).cloned() else {
                return Status::Error(format!("node {node} left the snapshot"));
            };
            match self.bind_pod_volumes(client, plan, &info).await {
                Ok(()) => Status::Success,
                Err(e) => Status::Error(e),
            }
        }
        .boxed()
    }
}
