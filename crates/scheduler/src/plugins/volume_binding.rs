//! VolumeBinding (upstream `volumebinding`), for pre-provisioned volumes: every PVC the pod uses must
//! exist and not be deleting; an unbound PVC of an `Immediate` class (or of no class) makes the pod
//! unschedulable, as upstream (the PV controller binds those first); a bound PVC's PV must exist and
//! its node affinity must match the node; an unbound `WaitForFirstConsumer` PVC needs an available PV
//! that fits it and the node, which PreBind reserves for it (the volume's claimRef, as upstream's
//! `BindPodVolumes`) before waiting for the PV controller to complete the binding.
//! A claim no available PV fits is feasible if its class has a provisioner whose allowed
//! topologies admit the node; PreBind then sets the claim's `volume.kubernetes.io/selected-node`
//! and waits for the volume to be provisioned and bound (a claim that already has a selected node
//! fits only that node). Claim events move only the pods that use the claim, and volume events
//! only pods whose claims all exist (upstream's queueing hints, [`pod_uses_claim`]). Not done: the assume cache (two pods scheduled at once may pick one PV;
//! the second's PreBind fails on the volume's resourceVersion and the pod is retried), CSI
//! storage capacity and scoring.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Patch, PatchParams};
use kube::Api;
use serde_json::json;

use super::node_affinity::node_selector_matches;
use crate::framework::resources::parse_quantity;
use crate::framework::{
    action, ClusterEvent, CycleState, EventResource, FilterPlugin, Handle, NodeInfo, Plugin,
    PreBindPlugin, PreFilterPlugin, PreFilterResult, Status,
};

pub const ERR_REASON_BIND_CONFLICT: &str =
    "node(s) didn't find available persistent volumes to bind";
pub const ERR_REASON_NODE_CONFLICT: &str = "node(s) had volume node affinity conflict";
pub const ERR_REASON_PV_NOT_EXIST: &str =
    "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)";
pub const ERR_UNBOUND_IMMEDIATE: &str = "pod has unbound immediate PersistentVolumeClaims";

const STATE_KEY: &str = "PreFilterVolumeBinding";

pub struct VolumeBinding {
    handle: Handle,
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
        VolumeBinding { handle }
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

fn request(pvc: &PersistentVolumeClaim) -> i64 {
    pvc.spec
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .and_then(|q| parse_quantity(&q.0).ok())
        .unwrap_or(0)
}

/// Whether an available PV can hold the claim on some node (upstream `FindMatchingVolume`, in
/// short: class, capacity, access modes, volume mode and label selector; node affinity is
/// [`pv_node_matches`]).
fn pv_fits(pv: &PersistentVolume, pvc: &PersistentVolumeClaim, requested: i64) -> bool {
    let (Some(ps), Some(cs)) = (pv.spec.as_ref(), pvc.spec.as_ref()) else {
        return false;
    };
    if ps.claim_ref.is_some() || pv.metadata.deletion_timestamp.is_some() {
        return false;
    }
    let class = |c: Option<&String>| c.cloned().unwrap_or_default();
    if class(ps.storage_class_name.as_ref()) != class(cs.storage_class_name.as_ref()) {
        return false;
    }
    let capacity = ps
        .capacity
        .as_ref()
        .and_then(|c| c.get("storage"))
        .and_then(|q| parse_quantity(&q.0).ok())
        .unwrap_or(0);
    if capacity < requested {
        return false;
    }
    let modes = ps.access_modes.clone().unwrap_or_default();
    if !cs.access_modes.iter().flatten().all(|m| modes.contains(m)) {
        return false;
    }
    let mode = |m: Option<&String>| m.cloned().unwrap_or_else(|| "Filesystem".into());
    if mode(ps.volume_mode.as_ref()) != mode(cs.volume_mode.as_ref()) {
        return false;
    }
    if let Some(sel) = &cs.selector {
        let s = crate::framework::selector::Selector::lenient(Some(sel));
        if !s.matches(pv.metadata.labels.as_ref()) {
            return false;
        }
    }
    true
}

fn capacity(pv: &PersistentVolume) -> i64 {
    pv.spec
        .as_ref()
        .and_then(|s| s.capacity.as_ref())
        .and_then(|c| c.get("storage"))
        .and_then(|q| parse_quantity(&q.0).ok())
        .unwrap_or(0)
}

/// The available volumes that fit `pvc` on some node, smallest first (as upstream picks the
/// smallest volume that fits), then by name.
fn candidates(
    pvs: &[Arc<PersistentVolume>],
    pvc: &PersistentVolumeClaim,
) -> Vec<Arc<PersistentVolume>> {
    let requested = request(pvc);
    let mut fit: Vec<(i64, Arc<PersistentVolume>)> = pvs
        .iter()
        .filter(|pv| pv_fits(pv, pvc, requested))
        .map(|pv| (capacity(pv), pv.clone()))
        .collect();
    fit.sort_by(|a, b| (a.0, &a.1.metadata.name).cmp(&(b.0, &b.1.metadata.name)));
    fit.into_iter().map(|(_, pv)| pv).collect()
}

fn pv_node_matches(pv: &PersistentVolume, node: &NodeInfo) -> bool {
    match pv
        .spec
        .as_ref()
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref())
    {
        Some(sel) => node_selector_matches(sel, node),
        None => true,
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
            let Some(pvc) = self.handle.listers.pvcs.get(&format!("{ns}/{name}")) else {
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
            let pvs = self.handle.listers.pvs.list();
            s.candidates = s.to_bind.iter().map(|c| candidates(&pvs, c)).collect();
        }
        state.write(STATE_KEY, s);
        (None, Status::Success)
    }
}

/// How the pod's unbound WaitForFirstConsumer claims get volumes on one node (upstream
/// `PodVolumes`): static bindings to existing volumes and claims to provision there.
#[derive(Default)]
struct Plan {
    bind: Vec<(Arc<PersistentVolumeClaim>, String)>,
    provision: Vec<Arc<PersistentVolumeClaim>>,
}

const ANN_SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";

/// Upstream `MatchTopologySelectorTerms`: no terms match every node; else any term whose
/// expressions all hold (the node's label value among the expression's values).
fn topology_matches(
    terms: Option<&Vec<k8s_openapi::api::core::v1::TopologySelectorTerm>>,
    node: &NodeInfo,
) -> bool {
    let Some(terms) = terms.filter(|t| !t.is_empty()) else {
        return true;
    };
    let labels = node.labels();
    terms.iter().any(|t| {
        t.match_label_expressions.iter().flatten().all(|e| {
            labels
                .and_then(|l| l.get(&e.key))
                .is_some_and(|v| e.values.contains(v))
        })
    })
}

impl VolumeBinding {
    /// Upstream `checkVolumeProvisions` for one claim: its class has a provisioner and its
    /// allowed topologies admit the node.
    fn can_provision(&self, pvc: &PersistentVolumeClaim, node: &NodeInfo) -> bool {
        let class = pvc
            .spec
            .as_ref()
            .and_then(|s| s.storage_class_name.clone())
            .unwrap_or_default();
        let Some(class) = self.handle.listers.storage_classes.get(&class) else {
            return false;
        };
        if class.provisioner.is_empty() || class.provisioner == "kubernetes.io/no-provisioner" {
            return false;
        }
        topology_matches(class.allowed_topologies.as_ref(), node)
    }

    /// Upstream `FindPodVolumes` for the unbound claims: a claim the scheduler already chose a
    /// node for is provisioned there (and fits no other node); the others get distinct available
    /// PVs that fit on the node, else are provisioned if their class can.
    fn find_matches(&self, s: &State, node: &NodeInfo) -> Option<Plan> {
        let mut taken: BTreeMap<String, ()> = BTreeMap::new();
        let mut plan = Plan::default();
        for (i, pvc) in s.to_bind.iter().enumerate() {
            let selected = pvc
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(ANN_SELECTED_NODE));
            if let Some(selected) = selected {
                if selected != node.name() {
                    return None;
                }
                plan.provision.push(pvc.clone());
                continue;
            }
            let found = s.candidates.get(i).into_iter().flatten().find(|pv| {
                let name = pv.metadata.name.as_deref().unwrap_or("");
                !taken.contains_key(name) && pv_node_matches(pv, node)
            });
            match found {
                Some(pv) => {
                    let name = pv.metadata.name.clone().unwrap_or_default();
                    taken.insert(name.clone(), ());
                    plan.bind.push((pvc.clone(), name));
                }
                None if self.can_provision(pvc, node) => plan.provision.push(pvc.clone()),
                None => return None,
            }
        }
        Some(plan)
    }
}

impl FilterPlugin for VolumeBinding {
    fn filter(&self, state: &CycleState, _pod: &Pod, node: &NodeInfo) -> Status {
        let Some(s) = state.read::<State>(STATE_KEY) else {
            return Status::Success;
        };
        for name in &s.bound {
            let Some(pv) = self.handle.listers.pvs.get(name) else {
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

/// How long PreBind waits for the PV controller to complete the bindings it asked for (upstream
/// `bindTimeoutSeconds`' default).
const BIND_TIMEOUT: Duration = Duration::from_secs(600);
/// How often PreBind looks at the informers' claims and volumes meanwhile.
const BIND_POLL: Duration = Duration::from_millis(100);

/// One binding PreBind asked for: the claim's key, the volume reserved for it (`None`: the claim is
/// to be provisioned on the node) and the resourceVersion of our write.
struct Requested {
    claim: String,
    volume: Option<String>,
    written: u64,
}

fn resource_version(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> u64 {
    meta.resource_version
        .as_deref()
        .and_then(|rv| rv.parse().ok())
        .unwrap_or(0)
}

impl VolumeBinding {
    /// Upstream `checkBindings`: `Ok(true)` once every claim is bound to its volume by the PV
    /// controller, `Ok(false)` while it is not yet, an error when it cannot be any more.
    fn check_bindings(&self, requested: &[Requested], node: &NodeInfo) -> Result<bool, String> {
        for r in requested {
            let Some(pvc) = self.handle.listers.pvcs.get(&r.claim) else {
                return Err(format!(
                    "failed to check binding: pvc {:?} not in cache",
                    r.claim
                ));
            };
            let bound_to = pvc
                .spec
                .as_ref()
                .and_then(|s| s.volume_name.clone())
                .filter(|v| !v.is_empty());
            let completed = pvc
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key("pv.kubernetes.io/bind-completed"));
            match &r.volume {
                Some(volume) => {
                    let Some(pv) = self.handle.listers.pvs.get(volume) else {
                        return Err(format!(
                            "failed to check binding: PersistentVolume {volume:?} not found"
                        ));
                    };
                    if resource_version(&pv.metadata) < r.written {
                        // The informer has not seen our write yet.
                        return Ok(false);
                    }
                    if !pv_node_matches(&pv, node) {
                        return Err(format!(
                            "pv {volume:?} node affinity doesn't match node {:?}",
                            node.name()
                        ));
                    }
                    let uid = pv
                        .spec
                        .as_ref()
                        .and_then(|s| s.claim_ref.as_ref())
                        .and_then(|c| c.uid.as_deref())
                        .unwrap_or("");
                    if uid.is_empty() {
                        return Err(format!("ClaimRef got reset for pv {volume:?}"));
                    }
                }
                None => {
                    if resource_version(&pvc.metadata) < r.written {
                        return Ok(false);
                    }
                    let selected = pvc
                        .metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get(ANN_SELECTED_NODE));
                    if selected.map(String::as_str) != Some(node.name()) {
                        // The PV controller drops the node when provisioning there failed.
                        return Err(format!(
                            "provisioning failed for PVC {:?}",
                            pvc.metadata.name.as_deref().unwrap_or("")
                        ));
                    }
                    if let Some(volume) = &bound_to {
                        let Some(pv) = self.handle.listers.pvs.get(volume) else {
                            // Not seen yet; a deleted volume unbinds the claim eventually.
                            return Ok(false);
                        };
                        if !pv_node_matches(&pv, node) {
                            return Err(format!(
                                "pv {volume:?} node affinity doesn't match node {:?}",
                                node.name()
                            ));
                        }
                    }
                }
            }
            if bound_to.is_none() || !completed {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

impl PreBindPlugin for VolumeBinding {
    /// Upstream `BindPodVolumes`: reserves the volume chosen for each WaitForFirstConsumer claim
    /// (its claimRef and `bound-by-controller`, as the PV controller would write them), then waits
    /// until the PV controller has bound the claims.
    fn pre_bind<'a>(
        &'a self,
        state: &'a CycleState,
        _pod: &'a Pod,
        node: &'a str,
    ) -> BoxFuture<'a, Status> {
        async move {
            let Some(s) = state.read::<State>(STATE_KEY) else {
                return Status::Success;
            };
            if s.to_bind.is_empty() {
                return Status::Success;
            }
            let Some(client) = self.handle.client.clone() else {
                return Status::Error("no API client to bind volumes with".into());
            };
            let Some(info) = state.snapshot.get(node).cloned() else {
                return Status::Error(format!("node {node} left the snapshot"));
            };
            let Some(plan) = self.find_matches(s, &info) else {
                return Status::Unschedulable(ERR_REASON_BIND_CONFLICT.into());
            };
            let pvs: Api<PersistentVolume> = Api::all(client.clone());
            let mut requested = Vec::new();
            for (pvc, pv) in plan.bind {
                let ns = pvc.metadata.namespace.clone().unwrap_or_default();
                let name = pvc.metadata.name.clone().unwrap_or_default();
                // The volume as matched: a conflict means someone took it meanwhile.
                let rv = self
                    .handle
                    .listers
                    .pvs
                    .get(&pv)
                    .and_then(|v| v.metadata.resource_version.clone());
                let patch = json!({
                    "metadata": {"resourceVersion": rv,
                                 "annotations": {"pv.kubernetes.io/bound-by-controller": "yes"}},
                    "spec": {"claimRef": {"kind": "PersistentVolumeClaim", "apiVersion": "v1",
                        "namespace": ns, "name": name, "uid": pvc.metadata.uid,
                        "resourceVersion": pvc.metadata.resource_version}}});
                match pvs
                    .patch(&pv, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    Ok(written) => requested.push(Requested {
                        claim: format!("{ns}/{name}"),
                        volume: Some(pv),
                        written: resource_version(&written.metadata),
                    }),
                    Err(e) => return Status::Error(format!("binding volumes: {e}")),
                }
            }
            for pvc in plan.provision {
                let ns = pvc.metadata.namespace.clone().unwrap_or_default();
                let name = pvc.metadata.name.clone().unwrap_or_default();
                // Tells the PV controller (and external provisioners) where to provision.
                let patch = json!({"metadata": {"resourceVersion": pvc.metadata.resource_version,
                    "annotations": {ANN_SELECTED_NODE: node}}});
                let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
                match pvcs
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    Ok(written) => requested.push(Requested {
                        claim: format!("{ns}/{name}"),
                        volume: None,
                        written: resource_version(&written.metadata),
                    }),
                    Err(e) => return Status::Error(format!("binding volumes: {e}")),
                }
            }
            let deadline = tokio::time::Instant::now() + BIND_TIMEOUT;
            loop {
                match self.check_bindings(&requested, &info) {
                    Ok(true) => return Status::Success,
                    Ok(false) => {}
                    Err(e) => return Status::Error(format!("binding volumes: {e}")),
                }
                if tokio::time::Instant::now() >= deadline {
                    return Status::Error(
                        "binding volumes: timed out waiting for the condition".into(),
                    );
                }
                tokio::time::sleep(BIND_POLL).await;
            }
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testutil::{handle_with, labeled_node, pod, st_of};
    use serde_json::{json, Value};

    fn pvc(name: &str, volume: Option<&str>, class: Option<&str>) -> Value {
        json!({"kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": "default"},
            "spec": {"volumeName": volume, "storageClassName": class, "accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": "1Gi"}}}})
    }

    fn pv(name: &str, zone: Option<&str>, class: &str, claimed: bool) -> Value {
        let mut v = json!({"kind": "PersistentVolume", "metadata": {"name": name},
            "spec": {"storageClassName": class, "accessModes": ["ReadWriteOnce"], "capacity": {"storage": "2Gi"}}});
        if let Some(z) = zone {
            v["spec"]["nodeAffinity"] = json!({"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "zone", "operator": "In", "values": [z]}]}]}});
        }
        if claimed {
            v["spec"]["claimRef"] = json!({"name": "other", "namespace": "default"});
        }
        v
    }

    fn wffc(name: &str) -> Value {
        json!({"kind": "StorageClass", "metadata": {"name": name}, "provisioner": "kubernetes.io/no-provisioner",
            "volumeBindingMode": "WaitForFirstConsumer"})
    }

    fn pod_with_claims(claims: &[&str]) -> Pod {
        let vols: Vec<Value> = claims
            .iter()
            .map(|c| json!({"name": c, "persistentVolumeClaim": {"claimName": c}}))
            .collect();
        pod("p", json!({ "volumes": vols }))
    }

    #[test]
    fn filter() {
        let z1 = labeled_node("n1", json!({"zone": "z1"}));
        let z2 = labeled_node("n2", json!({"zone": "z2"}));
        let nodes = vec![z1.clone(), z2.clone()];
        let unresolvable = |m: &str| Status::UnschedulableAndUnresolvable(m.to_string());
        // (name, objects, claims, pre-filter status, filter on n1, filter on n2)
        type Case<'a> = (&'a str, Vec<Value>, Vec<&'a str>, Status, Status, Status);
        let cases: Vec<Case> = vec![
            (
                "no volumes",
                vec![],
                vec![],
                Status::Skip,
                Status::Success,
                Status::Success,
            ),
            (
                "claim not found",
                vec![],
                vec!["c"],
                unresolvable("persistentvolumeclaim \"c\" not found"),
                Status::Success,
                Status::Success,
            ),
            (
                "bound claim, PV without affinity",
                vec![pvc("c", Some("v"), None), pv("v", None, "", true)],
                vec!["c"],
                Status::Success,
                Status::Success,
                Status::Success,
            ),
            (
                "bound claim, node-affine PV",
                vec![pvc("c", Some("v"), None), pv("v", Some("z1"), "", true)],
                vec!["c"],
                Status::Success,
                Status::Success,
                unresolvable(ERR_REASON_NODE_CONFLICT),
            ),
            (
                "bound to a missing PV",
                vec![pvc("c", Some("gone"), None)],
                vec!["c"],
                Status::Success,
                unresolvable(ERR_REASON_PV_NOT_EXIST),
                unresolvable(ERR_REASON_PV_NOT_EXIST),
            ),
            (
                "unbound immediate claim",
                vec![pvc("c", None, Some("fast"))],
                vec!["c"],
                unresolvable(ERR_UNBOUND_IMMEDIATE),
                Status::Success,
                Status::Success,
            ),
            (
                "unbound WaitForFirstConsumer claim with a local PV in z2",
                vec![
                    pvc("c", None, Some("local")),
                    wffc("local"),
                    pv("v", Some("z2"), "local", false),
                ],
                vec!["c"],
                Status::Success,
                unresolvable(ERR_REASON_BIND_CONFLICT),
                Status::Success,
            ),
            (
                "the only PV is claimed",
                vec![
                    pvc("c", None, Some("local")),
                    wffc("local"),
                    pv("v", None, "local", true),
                ],
                vec!["c"],
                Status::Success,
                unresolvable(ERR_REASON_BIND_CONFLICT),
                unresolvable(ERR_REASON_BIND_CONFLICT),
            ),
            (
                "two claims need two PVs",
                vec![
                    pvc("a", None, Some("local")),
                    pvc("b", None, Some("local")),
                    wffc("local"),
                    pv("v1", None, "local", false),
                ],
                vec!["a", "b"],
                Status::Success,
                unresolvable(ERR_REASON_BIND_CONFLICT),
                unresolvable(ERR_REASON_BIND_CONFLICT),
            ),
        ];
        for (name, objects, claims, want_pre, want1, want2) in cases {
            let vb = VolumeBinding::new(handle_with(&objects));
            let p = pod_with_claims(&claims);
            let mut st = st_of(&nodes);
            let (_, pre) = vb.pre_filter(&mut st, &p);
            assert_eq!(pre, want_pre, "{name}: prefilter");
            if !pre.is_success() {
                continue;
            }
            assert_eq!(vb.filter(&st, &p, &z1), want1, "{name}: n1");
            assert_eq!(vb.filter(&st, &p, &z2), want2, "{name}: n2");
        }
    }

    #[test]
    fn claims_to_provision() {
        let z1 = labeled_node("n1", json!({"zone": "z1"}));
        let z2 = labeled_node("n2", json!({"zone": "z2"}));
        let nodes = vec![z1.clone(), z2.clone()];
        let conflict = Status::UnschedulableAndUnresolvable(ERR_REASON_BIND_CONFLICT.into());
        let class = |topology: Option<&str>| {
            let mut c = json!({"kind": "StorageClass", "metadata": {"name": "dyn"},
                "provisioner": "rkube.io/local-path", "volumeBindingMode": "WaitForFirstConsumer"});
            if let Some(z) = topology {
                c["allowedTopologies"] =
                    json!([{"matchLabelExpressions": [{"key": "zone", "values": [z]}]}]);
            }
            c
        };
        let mut selected = pvc("c", None, Some("dyn"));
        selected["metadata"]["annotations"] = json!({"volume.kubernetes.io/selected-node": "n2"});
        // (objects, filter on n1, filter on n2)
        let cases: Vec<(Vec<Value>, Status, Status)> = vec![
            (
                vec![pvc("c", None, Some("dyn")), class(None)],
                Status::Success,
                Status::Success,
            ),
            (
                vec![pvc("c", None, Some("dyn")), class(Some("z1"))],
                Status::Success,
                conflict.clone(),
            ),
            (
                vec![selected, class(None)],
                conflict.clone(),
                Status::Success,
            ),
            // no-provisioner classes are only for pre-created volumes.
            (
                vec![pvc("c", None, Some("local")), wffc("local")],
                conflict.clone(),
                conflict.clone(),
            ),
        ];
        for (i, (objects, want1, want2)) in cases.into_iter().enumerate() {
            let vb = VolumeBinding::new(handle_with(&objects));
            let p = pod_with_claims(&["c"]);
            let mut st = st_of(&nodes);
            let (_, pre) = vb.pre_filter(&mut st, &p);
            assert_eq!(pre, Status::Success, "case {i}");
            assert_eq!(vb.filter(&st, &p, &z1), want1, "case {i}: n1");
            assert_eq!(vb.filter(&st, &p, &z2), want2, "case {i}: n2");
        }
    }

    #[test]
    fn queueing_hints_look_at_the_pod_claims() {
        let p = pod_with_claims(&["a", "b"]);
        let claim = |name: &str, ns: &str| -> PersistentVolumeClaim {
            serde_json::from_value(json!({"metadata": {"name": name, "namespace": ns}})).unwrap()
        };
        assert!(pod_uses_claim(&p, &claim("a", "default")));
        assert!(pod_uses_claim(&p, &claim("b", "default")));
        assert!(!pod_uses_claim(&p, &claim("c", "default")));
        assert!(!pod_uses_claim(&p, &claim("a", "other")));
        // A volume change helps only once every claim of the pod exists.
        assert!(volume_change_may_help(&p, |k| k == "default/a" || k == "default/b"));
        assert!(!volume_change_may_help(&p, |k| k == "default/a"));
        assert!(volume_change_may_help(&pod_with_claims(&[]), |_| false));
    }

    #[test]
    fn deleting_claim() {
        let mut c = pvc("c", Some("v"), None);
        c["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
        let vb = VolumeBinding::new(handle_with(&[c]));
        let (_, s) = vb.pre_filter(&mut st_of(&[]), &pod_with_claims(&["c"]));
        assert_eq!(
            s,
            Status::UnschedulableAndUnresolvable(
                "persistentvolumeclaim \"c\" is being deleted".into()
            )
        );
    }
}
