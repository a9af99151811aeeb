//! VolumeBinding's volume binder (upstream `volumebinding/binder.go`): which volumes fit a claim
//! (`FindPodVolumes`), assuming the choice for a node in the assume caches (`AssumePodVolumes`,
//! `RevertAssumedPodVolumes`), writing it (`BindPodVolumes`) and waiting for the PV controller to
//! complete it (`checkBindings`).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolume, PersistentVolumeClaim};
use kube::api::{Patch, PatchParams};
use kube::Api;
use serde_json::json;

use super::assume_cache::version;
use super::{State, VolumeBinding};
use crate::framework::resources::parse_quantity;
use crate::framework::NodeInfo;
use crate::plugins::node_affinity::node_selector_matches;

pub(super) const ANN_SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
const ANN_BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";

/// How long PreBind waits for the PV controller to complete the bindings it asked for (upstream
/// `bindTimeoutSeconds`' default).
const BIND_TIMEOUT: Duration = Duration::from_secs(600);
/// How often PreBind looks at the informers' claims and volumes meanwhile.
const BIND_POLL: Duration = Duration::from_millis(100);

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
    if capacity(pv) < requested {
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
pub(super) fn candidates(
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

pub(super) fn pv_node_matches(pv: &PersistentVolume, node: &NodeInfo) -> bool {
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

/// How the pod's unbound WaitForFirstConsumer claims get volumes on one node (upstream
/// `PodVolumes`): static bindings to existing volumes and claims to provision there. After
/// Reserve, the volumes carry the claimRef and the claims the selected node, as assumed.
#[derive(Clone, Default)]
pub(super) struct Plan {
    pub bind: Vec<(Arc<PersistentVolumeClaim>, Arc<PersistentVolume>)>,
    pub provision: Vec<Arc<PersistentVolumeClaim>>,
}

fn claim_key(pvc: &PersistentVolumeClaim) -> String {
    format!(
        "{}/{}",
        pvc.metadata.namespace.as_deref().unwrap_or(""),
        pvc.metadata.name.as_deref().unwrap_or("")
    )
}

/// Upstream `GetBindVolumeToClaim`: the volume reserved for the claim, as the PV controller
/// would write it.
fn bind_volume_to_claim(pv: &PersistentVolume, pvc: &PersistentVolumeClaim) -> PersistentVolume {
    let mut pv = pv.clone();
    let spec = pv.spec.get_or_insert_with(Default::default);
    spec.claim_ref = Some(ObjectReference {
        kind: Some("PersistentVolumeClaim".into()),
        api_version: Some("v1".into()),
        namespace: pvc.metadata.namespace.clone(),
        name: pvc.metadata.name.clone(),
        uid: pvc.metadata.uid.clone(),
        resource_version: pvc.metadata.resource_version.clone(),
        field_path: None,
    });
    pv.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(ANN_BOUND_BY_CONTROLLER.into(), "yes".into());
    pv
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
    pub(super) fn find_matches(&self, s: &State, node: &NodeInfo) -> Option<Plan> {
        let mut taken: BTreeSet<&str> = BTreeSet::new();
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
                !taken.contains(name) && pv_node_matches(pv, node)
            });
            match found {
                Some(pv) => {
                    taken.insert(pv.metadata.name.as_deref().unwrap_or(""));
                    plan.bind.push((pvc.clone(), pv.clone()));
                }
                None if self.can_provision(pvc, node) => plan.provision.push(pvc.clone()),
                None => return None,
            }
        }
        Some(plan)
    }

    /// Upstream `AssumePodVolumes`: lays the plan's volume claimRefs and claim selected nodes
    /// over the informers' objects, so the next pods' cycles see them taken; returns the plan
    /// as assumed. On an error nothing stays assumed.
    pub(super) fn assume_pod_volumes(&self, plan: Plan, node: &str) -> Result<Plan, String> {
        let mut assumed = Plan::default();
        let mut result = Ok(());
        for (pvc, pv) in plan.bind {
            let bound = Arc::new(bind_volume_to_claim(&pv, &pvc));
            result = self.pvs.assume(bound.clone());
            if result.is_err() {
                break;
            }
            assumed.bind.push((pvc, bound));
        }
        if result.is_ok() {
            for pvc in plan.provision {
                let has_node = pvc
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(ANN_SELECTED_NODE))
                    .is_some_and(|n| n == node);
                let claim = if has_node {
                    pvc
                } else {
                    let mut c = (*pvc).clone();
                    c.metadata
                        .annotations
                        .get_or_insert_with(Default::default)
                        .insert(ANN_SELECTED_NODE.into(), node.into());
                    Arc::new(c)
                };
                result = self.pvcs.assume(claim.clone());
                if result.is_err() {
                    break;
                }
                assumed.provision.push(claim);
            }
        }
        match result {
            Ok(()) => Ok(assumed),
            Err(e) => {
                self.revert_assumed_pod_volumes(&assumed);
                Err(format!("assuming volumes: {e}"))
            }
        }
    }

    /// Upstream `RevertAssumedPodVolumes`.
    pub(super) fn revert_assumed_pod_volumes(&self, plan: &Plan) {
        for (_, pv) in &plan.bind {
            self.pvs.restore(pv.metadata.name.as_deref().unwrap_or(""));
        }
        for pvc in &plan.provision {
            self.pvcs.restore(&claim_key(pvc));
        }
    }

    /// Upstream `BindPodVolumes`: writes the assumed volume claimRefs (against the version they
    /// were chosen from: a conflict means someone took the volume meanwhile) and claims' selected
    /// nodes, then waits until the PV controller has bound every claim.
    pub(super) async fn bind_pod_volumes(
        &self,
        client: kube::Client,
        plan: &Plan,
        node: &NodeInfo,
    ) -> Result<(), String> {
        let pvs: Api<PersistentVolume> = Api::all(client.clone());
        let mut requested = Vec::new();
        for (pvc, pv) in &plan.bind {
            let spec = pv.spec.as_ref();
            let patch = json!({
                "metadata": {"resourceVersion": pv.metadata.resource_version,
                             "annotations": {ANN_BOUND_BY_CONTROLLER: "yes"}},
                "spec": {"claimRef": spec.and_then(|s| s.claim_ref.as_ref())}});
            let name = pv.metadata.name.as_deref().unwrap_or("");
            let written = pvs
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(|e| format!("binding volumes: {e}"))?;
            requested.push(Requested {
                claim: claim_key(pvc),
                volume: Some(name.to_string()),
                written: version(&written.metadata),
            });
            // Ours until the informer shows a newer version (upstream assumes the API's answer).
            let _ = self.pvs.assume(Arc::new(written));
        }
        for pvc in &plan.provision {
            let ns = pvc.metadata.namespace.as_deref().unwrap_or("");
            let name = pvc.metadata.name.as_deref().unwrap_or("");
            // Tells the PV controller (and external provisioners) where to provision.
            let patch = json!({"metadata": {"resourceVersion": pvc.metadata.resource_version,
                "annotations": {ANN_SELECTED_NODE: node.name()}}});
            let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
            let written = pvcs
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(|e| format!("binding volumes: {e}"))?;
            requested.push(Requested {
                claim: claim_key(pvc),
                volume: None,
                written: version(&written.metadata),
            });
            let _ = self.pvcs.assume(Arc::new(written));
        }
        let deadline = tokio::time::Instant::now() + BIND_TIMEOUT;
        loop {
            if self
                .check_bindings(&requested, node)
                .map_err(|e| format!("binding volumes: {e}"))?
            {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err("binding volumes: timed out waiting for the condition".into());
            }
            tokio::time::sleep(BIND_POLL).await;
        }
    }
}

/// One binding PreBind asked for: the claim's key, the volume reserved for it (`None`: the claim is
/// to be provisioned on the node) and the resourceVersion of our write.
pub(super) struct Requested {
    pub claim: String,
    pub volume: Option<String>,
    pub written: u64,
}

impl VolumeBinding {
    /// Upstream `checkBindings` (on the informers' objects, as upstream's `GetAPIObj`):
    /// `Ok(true)` once every claim is bound to its volume by the PV controller, `Ok(false)` while
    /// it is not yet, an error when it cannot be any more.
    pub(super) fn check_bindings(
        &self,
        requested: &[Requested],
        node: &NodeInfo,
    ) -> Result<bool, String> {
        for r in requested {
            let Some(pvc) = self.pvcs.get_api(&r.claim) else {
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
                    let Some(pv) = self.pvs.get_api(volume) else {
                        return Err(format!(
                            "failed to check binding: PersistentVolume {volume:?} not found"
                        ));
                    };
                    if version(&pv.metadata) < r.written {
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
                    if version(&pvc.metadata) < r.written {
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
                        let Some(pv) = self.pvs.get_api(volume) else {
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
