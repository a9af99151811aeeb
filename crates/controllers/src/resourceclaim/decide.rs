//! The resource claim controller's decisions, free of I/O: which claim a pod's entry names, whether a
//! pod needs a sync, the claim made from a template, which `reservedFor` entries are stale and what a
//! claim sync writes. Upstream keeps these in `pkg/controller/resourceclaim` and
//! `k8s.io/dynamic-resource-allocation/resourceclaim`; the texts of errors are upstream's.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, PodResourceClaim};
use k8s_openapi::api::resource::v1::{
    ResourceClaim, ResourceClaimConsumerReference, ResourceClaimTemplate,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

/// The annotation of generated claims: the `pod.spec.resourceClaims[].name` they were made for.
pub const POD_CLAIM_ANNOTATION: &str = "resource.kubernetes.io/pod-claim-name";
/// The finalizer the scheduler puts on claims it allocates (upstream `resourceapi.Finalizer`).
pub const FINALIZER: &str = "resource.kubernetes.io/delete-protection";
/// Upstream `ResourceClaimReservedForMaxSize`.
pub const RESERVED_FOR_MAX: usize = 256;
/// How many deleted pods' UIDs are remembered (upstream `maxUIDCacheEntries`).
pub const DELETED_UIDS_MAX: usize = 500;
/// Room for `-` and the five random characters of a generated name within 63 (upstream's
/// `maxBaseLen`).
const MAX_GENERATE_BASE: usize = 57;

/// Why a pod's claim entry names no claim (upstream `resourceclaim.Name`'s errors).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// A template entry without a `resourceClaimStatuses` entry: the controller must create it.
    #[error("pod \"{0}\": ResourceClaim not created yet")]
    NotCreated(String),
    /// Neither a claim name nor a template name: an API this controller does not know.
    #[error("pod \"{pod}\", spec.resourceClaim {claim:?}: unsupported PodResourceClaim source")]
    Unsupported { pod: String, claim: String },
}

/// The claim a pod's entry refers to: `Ok(None)` when the pod's status says no claim is needed,
/// and whether the claim must be controlled by the pod (generated claims).
pub fn claim_name(pod: &Pod, pc: &PodResourceClaim) -> Result<(Option<String>, bool), NameError> {
    if let Some(name) = &pc.resource_claim_name {
        return Ok((Some(name.clone()), false));
    }
    if pc.resource_claim_template_name.is_some() {
        let status = pod
            .status
            .as_ref()
            .and_then(|s| s.resource_claim_statuses.as_ref())
            .into_iter()
            .flatten()
            .find(|s| s.name == pc.name);
        return match status {
            Some(s) => Ok((s.resource_claim_name.clone(), true)),
            None => Err(NameError::NotCreated(pod_key(pod))),
        };
    }
    Err(NameError::Unsupported {
        pod: pod_key(pod),
        claim: pc.name.clone(),
    })
}

pub fn pod_key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or(""),
        pod.metadata.name.as_deref().unwrap_or("")
    )
}

fn claim_key(claim: &ResourceClaim) -> String {
    format!(
        "{}/{}",
        claim.metadata.namespace.as_deref().unwrap_or(""),
        claim.metadata.name.as_deref().unwrap_or("")
    )
}

/// The pod's claim entries.
pub fn pod_claims(pod: &Pod) -> &[PodResourceClaim] {
    pod.spec
        .as_ref()
        .and_then(|s| s.resource_claims.as_deref())
        .unwrap_or(&[])
}

/// Upstream `resourceclaim.IsForPod`: a generated claim must be controlled by this very pod.
pub fn is_for_pod(pod: &Pod, claim: &ResourceClaim) -> Result<(), String> {
    let controlled = claim
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && Some(&o.uid) == pod.metadata.uid.as_ref());
    if claim.metadata.namespace != pod.metadata.namespace || !controlled {
        return Err(format!(
            "ResourceClaim {} was not created for pod {} (pod is not owner)",
            claim_key(claim),
            pod_key(pod)
        ));
    }
    Ok(())
}

fn reserved_for(claim: &ResourceClaim) -> &[ResourceClaimConsumerReference] {
    claim
        .status
        .as_ref()
        .and_then(|s| s.reserved_for.as_deref())
        .unwrap_or(&[])
}

fn is_allocated(claim: &ResourceClaim) -> bool {
    claim
        .status
        .as_ref()
        .is_some_and(|s| s.allocation.is_some())
}

pub fn is_reserved_for_pod(pod: &Pod, claim: &ResourceClaim) -> bool {
    reserved_for(claim).iter().any(|r| {
        r.resource == "pods"
            && r.api_group.as_deref().unwrap_or("").is_empty()
            && Some(&r.uid) == pod.metadata.uid.as_ref()
    })
}

pub fn can_be_reserved(claim: &ResourceClaim) -> bool {
    reserved_for(claim).len() < RESERVED_FOR_MAX
}

/// Whether an allocated claim should be reserved for this scheduled pod by the controller (a pod
/// bound by `nodeName` skipped the scheduler, which otherwise reserves).
pub fn needs_reservation(pod: &Pod, claim: &ResourceClaim) -> bool {
    is_allocated(claim) && !is_reserved_for_pod(pod, claim) && can_be_reserved(claim)
}

fn node_name(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or("")
}

fn phase_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// Upstream `isPodDone`: none of the pod's containers runs or ever will.
pub fn is_pod_done(pod: &Pod) -> bool {
    phase_terminal(pod) || (pod.metadata.deletion_timestamp.is_some() && node_name(pod).is_empty())
}

/// Upstream `podNeedsClaims`: false when the pod's claims can be released (their syncs queued).
pub fn pod_needs_claims(pod: &Pod, deleted: bool) -> bool {
    !deleted && !is_pod_done(pod)
}

/// Upstream `podNeedsWork`: whether a pod sync would create or reserve something. `lookup` finds a
/// claim of the pod's namespace by name in the cache.
pub fn pod_needs_work(pod: &Pod, lookup: impl Fn(&str) -> Option<Arc<ResourceClaim>>) -> bool {
    if pod.metadata.deletion_timestamp.is_some() {
        return false;
    }
    for pc in pod_claims(pod) {
        let (name, check_owner) = match claim_name(pod, pc) {
            Ok(found) => found,
            Err(_) => return true,
        };
        let Some(name) = name else {
            return false;
        };
        let Some(claim) = lookup(&name) else {
            // A template's claim is ours to make; a named one the user must create.
            return pc.resource_claim_template_name.is_some();
        };
        if check_owner && is_for_pod(pod, &claim).is_err() {
            return false;
        }
        if node_name(pod).is_empty() {
            continue;
        }
        if needs_reservation(pod, &claim) {
            return true;
        }
    }
    false
}

/// The `<pod>-<claim>-` prefix of a generated claim's name, both parts cut in proportion to their
/// lengths when together they are too long (the API server would cut the end only, losing the claim
/// name).
pub fn generate_name(pod_name: &str, pc_name: &str) -> String {
    let full = format!("{pod_name}-{pc_name}-");
    if full.len() <= MAX_GENERATE_BASE {
        return full;
    }
    // Names are DNS labels/subdomains (ASCII), so byte cuts are character cuts.
    let cut = |s: &str| s[..s.len() * MAX_GENERATE_BASE / full.len()].to_string();
    format!("{}-{}", cut(pod_name), cut(pc_name))
}

/// The claim to create for the pod's entry from the template.
pub fn claim_from_template(
    pod: &Pod,
    pc: &PodResourceClaim,
    template: &ResourceClaimTemplate,
) -> ResourceClaim {
    let meta = template.spec.metadata.clone().unwrap_or_default();
    let mut annotations = meta.annotations.unwrap_or_default();
    annotations.insert(POD_CLAIM_ANNOTATION.to_string(), pc.name.clone());
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    ResourceClaim {
        metadata: ObjectMeta {
            generate_name: Some(generate_name(&pod_name, &pc.name)),
            namespace: pod.metadata.namespace.clone(),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Pod".into(),
                name: pod_name,
                uid: pod.metadata.uid.clone().unwrap_or_default(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            annotations: Some(annotations),
            labels: meta.labels,
            ..Default::default()
        },
        spec: template.spec.spec.clone(),
        status: None,
    }
}

/// The pod's controlling owner reference of a claim: (name, uid) (upstream `owningPod`).
pub fn owning_pod(claim: &ResourceClaim) -> Option<(&str, &str)> {
    claim
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true) && o.api_version == "v1" && o.kind == "Pod")
        .map(|o| (o.name.as_str(), o.uid.as_str()))
}

/// Index values of a claim: the UIDs of pods controlling it (upstream `claimPodOwnerIndexFunc`).
pub fn owner_index(claim: &ResourceClaim) -> Vec<String> {
    owning_pod(claim)
        .map(|(_, uid)| uid.to_string())
        .into_iter()
        .collect()
}

/// Index values of a pod: `ns/claim` of every claim it names (upstream
/// `podResourceClaimIndexFunc`).
pub fn pod_claim_index(pod: &Pod) -> Vec<String> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("");
    pod_claims(pod)
        .iter()
        .filter_map(|pc| claim_name(pod, pc).ok()?.0)
        .map(|name| format!("{ns}/{name}"))
        .collect()
}

/// Among claims controlled by the pod, the one generated for its entry `pc_name` (a claim created
/// before the pod's status could record it). The first wins; others go with the pod.
pub fn find_generated(
    owned: impl IntoIterator<Item = Arc<ResourceClaim>>,
    pc_name: &str,
) -> Option<Arc<ResourceClaim>> {
    owned.into_iter().find(|c| {
        c.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(POD_CLAIM_ANNOTATION))
            .is_some_and(|n| n == pc_name)
    })
}

/// What is known of a pod named in `reservedFor`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Keep,
    Remove,
    /// Neither cached nor known deleted: the API server must say (removing the reservation of a
    /// pod the scheduler is binding would be wrong).
    AskServer,
}

/// Upstream `syncClaim`'s check of one `reservedFor` entry. `cached` is the pod of that name in
/// the cache; `known_deleted` whether its UID was seen deleted. Entries of other resources are not
/// supported (an error, as upstream).
pub fn check_entry(
    entry: &ResourceClaimConsumerReference,
    known_deleted: bool,
    cached: Option<&Pod>,
) -> Result<Verdict, String> {
    if !entry.api_group.as_deref().unwrap_or("").is_empty() || entry.resource != "pods" {
        return Err(format!(
            "unsupported ReservedFor entry: {}/{} {} ({})",
            entry.api_group.as_deref().unwrap_or(""),
            entry.resource,
            entry.name,
            entry.uid
        ));
    }
    if known_deleted {
        return Ok(Verdict::Remove);
    }
    Ok(match cached {
        None => Verdict::AskServer,
        Some(pod) if pod.metadata.uid.as_deref() != Some(entry.uid.as_str()) => Verdict::Remove,
        Some(pod) if is_pod_done(pod) => Verdict::Remove,
        Some(_) => Verdict::Keep,
    })
}

/// The server's answer for an [`Verdict::AskServer`] entry: kept only if the same pod exists.
pub fn server_verdict(entry: &ResourceClaimConsumerReference, server: Option<&Pod>) -> Verdict {
    match server {
        Some(pod) if pod.metadata.uid.as_deref() == Some(entry.uid.as_str()) => Verdict::Keep,
        _ => Verdict::Remove,
    }
}

/// The state of the pod a generated claim was made for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    /// Not generated for a pod.
    None,
    /// Not in the cache (perhaps not yet): left to the garbage collector.
    Unknown,
    /// The pod may still run.
    Needs,
    /// Replaced by a pod of another UID, or done.
    Done,
}

/// What a claim sync writes, in order.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimPlan {
    /// The status to write (`reservedFor` pruned and, when nothing reserves the claim any more, the
    /// allocation cleared), if it changes.
    pub status: Option<ResourceClaim>,
    /// Drop [`FINALIZER`] afterwards.
    pub remove_finalizer: bool,
    /// Delete the claim: generated for a pod that will not run again.
    pub delete: bool,
}

/// Upstream `syncClaim` after the `reservedFor` checks: `valid` is what remains of `reservedFor`.
pub fn plan_claim(
    claim: &ResourceClaim,
    valid: Vec<ResourceClaimConsumerReference>,
    owner: Owner,
) -> ClaimPlan {
    let has_finalizer = claim
        .metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == FINALIZER);
    let unused = valid.is_empty();
    let mut plan = ClaimPlan {
        status: None,
        remove_finalizer: false,
        delete: false,
    };
    if valid.len() < reserved_for(claim).len() {
        let mut next = claim.clone();
        let status = next.status.get_or_insert_with(Default::default);
        // The transition from used to unused deallocates (the scheduler allocates again for a
        // later consumer, wherever it fits). Only the structured-parameters allocations, which
        // carry the finalizer, are the controller's to clear.
        if unused && has_finalizer {
            status.allocation = None;
        }
        status.reserved_for = if unused { None } else { Some(valid) };
        plan.remove_finalizer = has_finalizer && status.allocation.is_none();
        plan.status = Some(next);
    } else if has_finalizer && claim.metadata.deletion_timestamp.is_some() && unused {
        // A claim deleted while allocated and unused (it stayed allocated after its last user).
        if is_allocated(claim) {
            let mut next = claim.clone();
            if let Some(s) = next.status.as_mut() {
                s.allocation = None;
            }
            plan.status = Some(next);
        }
        plan.remove_finalizer = true;
    }
    plan.delete = unused && owner == Owner::Done && claim.metadata.deletion_timestamp.is_none();
    plan
}

/// The claim with [`FINALIZER`] removed (for an update built on the latest copy).
pub fn without_finalizer(mut claim: ResourceClaim) -> ResourceClaim {
    if let Some(f) = claim.metadata.finalizers.as_mut() {
        f.retain(|f| f != FINALIZER);
    }
    // Go omits the empty list; an empty one here would be stored as `finalizers: []`.
    if claim
        .metadata
        .finalizers
        .as_ref()
        .is_some_and(Vec::is_empty)
    {
        claim.metadata.finalizers = None;
    }
    claim
}

/// The owner's state from the cached pod of the owner's name.
pub fn owner_state(claim: &ResourceClaim, cached: impl Fn(&str) -> Option<Arc<Pod>>) -> Owner {
    let Some((name, uid)) = owning_pod(claim) else {
        return Owner::None;
    };
    match cached(name) {
        None => Owner::Unknown,
        Some(pod) if pod.metadata.uid.as_deref() != Some(uid) || is_pod_done(&pod) => Owner::Done,
        Some(_) => Owner::Needs,
    }
}

/// The UIDs of the most recently deleted pods, bounded (oldest forgotten first).
#[derive(Debug, Default)]
pub struct DeletedUids {
    order: VecDeque<String>,
    set: HashSet<String>,
}

impl DeletedUids {
    pub fn add(&mut self, uid: &str) {
        if uid.is_empty() || !self.set.insert(uid.to_string()) {
            return;
        }
        self.order.push_back(uid.to_string());
        while self.order.len() > DELETED_UIDS_MAX {
            if let Some(old) = self.order.pop_front() {
                self.set.remove(&old);
            }
        }
    }

    pub fn has(&self, uid: &str) -> bool {
        self.set.contains(uid)
    }
}

#[cfg(test)]
#[path = "decide_tests.rs"]
mod tests;
