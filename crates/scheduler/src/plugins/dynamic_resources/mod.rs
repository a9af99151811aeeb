//! DynamicResources (upstream `dynamicresources`, structured parameters only): a pod's
//! ResourceClaims must exist (PreEnqueue, PreFilter); claims already allocated must be reachable
//! from the node (their allocation's node selector); the others must be satisfiable together from
//! the node's ResourceSlices (Filter, see [`allocator`]). Reserve takes the devices in the shared
//! [`tracker::Tracker`] so the next cycle does not hand them out again; PreBind writes each claim's
//! `status.allocation` (after the `resource.kubernetes.io/delete-protection` finalizer) and adds the
//! pod to `status.reservedFor`, retrying on conflicts; Unreserve undoes both. PostFilter
//! deallocates an allocated claim reserved for nobody that keeps the pod off every node; Score
//! prefers nodes where `firstAvailable` requests get an earlier subrequest ([`scoring`]).
//!
//! At most [`MAX_IN_FLIGHT`] pods have claim writes in flight: the scheduling cycle is much faster
//! than the writes, so with many pending pods PreBind would otherwise run for all of them at once,
//! each on an HTTP/1.1 connection (and TLS handshake) of its own, and every write, binding
//! included, slowed to seconds (the bench's stall at 1-3 pods/s). Upstream's client-go
//! multiplexes HTTP/2 streams and is rate-limited by its QPS instead.
//!
//! Not done: extended resources backed by devices, binding conditions.

pub mod allocator;
pub mod capacity;
mod scoring;
pub mod selectors;
pub mod slices;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_sharing;
pub mod tracker;

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use futures::FutureExt;
use k8s_openapi::api::core::v1::{NodeSelector, Pod};
use k8s_openapi::api::resource::v1::{
    AllocationResult, ResourceClaim, ResourceClaimConsumerReference,
};
use kube::api::PostParams;
use kube::Api;

use self::allocator::{allocate, Picks, PrepareError, Prepared};
use self::selectors::SelectorCache;
use self::slices::SliceIndex;
use self::tracker::claim_key;
use super::node_affinity::node_selector_matches;
use crate::framework::{
    action, ClusterEvent, CycleState, EventResource, FilterPlugin, Framework, Handle, NodeInfo,
    NodeToStatus, Plugin, PostFilterPlugin, PostFilterResult, PreBindPlugin, PreEnqueuePlugin,
    PreFilterPlugin, PreFilterResult, PreScorePlugin, ReservePlugin, ScorePlugin, Status,
};
pub use crate::plugins::default_binder::MAX_IN_FLIGHT;

pub const NAME: &str = "DynamicResources";
const STATE_KEY: &str = "PreFilterDynamicResources";
/// Upstream `ResourceClaimReservedForMaxSize`.
pub const RESERVED_FOR_MAX_SIZE: usize = 256;
pub const FINALIZER: &str = "resource.kubernetes.io/delete-protection";
pub const ERR_CANNOT_ALLOCATE: &str = "cannot allocate all claims";
pub const ERR_NOT_AVAILABLE: &str = "resourceclaim not available on the node";
pub const ERR_IN_USE: &str = "resourceclaim in use";
/// PostFilter's verdicts (upstream's messages, part of the FailedScheduling event).
pub const MSG_NO_CLAIMS: &str = "no new claims to deallocate";
pub const MSG_DEALLOCATED: &str = "deallocation of ResourceClaim completed";
pub const MSG_STILL_NOT_SCHEDULABLE: &str = "still not schedulable";
/// PreBind's attempts at a claim's status write that meets conflicts (client-go `DefaultRetry`).
const WRITE_ATTEMPTS: usize = 5;

pub struct DynamicResources {
    handle: Handle,
    selectors: SelectorCache,
    /// The slice index and the slice generation it was built at.
    index: Mutex<Option<(u64, Arc<SliceIndex>)>>,
    /// Pods whose claim writes (PreBind, PostFilter) may be in flight at once.
    writes: Arc<tokio::sync::Semaphore>,
}

#[derive(Clone)]
struct State {
    /// The pod's claims as the scheduler sees them (assumed allocations included).
    claims: Vec<Arc<ResourceClaim>>,
    /// For allocated claims, where their devices are.
    available_on: Vec<Option<NodeSelector>>,
    /// Indices into `claims` of the claims to allocate, in `prepared`'s order.
    to_allocate: Vec<usize>,
    prepared: Option<Arc<Prepared>>,
    index: Arc<SliceIndex>,
    /// Reserve's allocations, by claim index.
    allocations: Vec<Option<AllocationResult>>,
    /// Claims PreBind added the pod to (Unreserve takes it out again).
    reserved_in_api: Arc<Mutex<Vec<String>>>,
    /// Indices of allocated claims some node could not reach (Filter records them for
    /// PostFilter, upstream `unavailableClaims`).
    unavailable: Arc<Mutex<BTreeSet<usize>>>,
    /// The devices Filter picked on each node that passed, kept only when Score ranks them
    /// (`firstAvailable` requests, see `ranked`); Reserve takes the chosen node's from here or
    /// searches that one node again. Keeping them for every feasible node (a node name, an `Arc`
    /// and a map insert under one lock per node and pod) cost more than Reserve's one search.
    node_allocations: Arc<Mutex<HashMap<String, Arc<Picks>>>>,
    /// Whether Score ranks the picks (some request to allocate is a `firstAvailable` one).
    ranked: bool,
}

fn pod_ref(pod: &Pod) -> (String, String, String) {
    (
        pod.metadata.namespace.clone().unwrap_or_default(),
        pod.metadata.name.clone().unwrap_or_default(),
        pod.metadata.uid.clone().unwrap_or_default(),
    )
}

fn reserved_for_pod(claim: &ResourceClaim, uid: &str) -> bool {
    claim
        .status
        .as_ref()
        .and_then(|s| s.reserved_for.as_ref())
        .is_some_and(|r| r.iter().any(|c| c.resource == "pods" && c.uid == uid))
}

fn allocation(claim: &ResourceClaim) -> Option<&AllocationResult> {
    claim.status.as_ref().and_then(|s| s.allocation.as_ref())
}

impl DynamicResources {
    pub fn new(handle: Handle) -> DynamicResources {
        DynamicResources {
            handle,
            selectors: SelectorCache::default(),
            index: Mutex::new(None),
            writes: Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT)),
        }
    }

    /// Upstream `foreachPodResourceClaim`: the pod's claims, or why they cannot be had.
    fn pod_claims(&self, pod: &Pod) -> Result<Vec<Arc<ResourceClaim>>, String> {
        let (ns, pod_name, uid) = pod_ref(pod);
        let mut out = Vec::new();
        let entries = pod.spec.as_ref().and_then(|s| s.resource_claims.as_ref());
        for rc in entries.into_iter().flatten() {
            let (name, check_owner) = if let Some(n) = &rc.resource_claim_name {
                (n.clone(), false)
            } else if rc.resource_claim_template_name.is_some() {
                let status = pod
                    .status
                    .as_ref()
                    .and_then(|s| s.resource_claim_statuses.as_ref())
                    .and_then(|s| s.iter().find(|s| s.name == rc.name));
                match status {
                    // Created for the pod, or deliberately none (nothing to allocate).
                    Some(s) => match &s.resource_claim_name {
                        Some(n) => (n.clone(), true),
                        None => continue,
                    },
                    None => {
                        return Err(format!(
                            "pod \"{pod_name}/{}\": ResourceClaim not created yet",
                            rc.name
                        ))
                    }
                }
            } else {
                return Err(format!(
                    "pod \"{pod_name}\", spec.resourceClaim \"{}\": none of the supported fields are set",
                    rc.name
                ));
            };
            let key = format!("{ns}/{name}");
            let Some(claim) = self
                .handle
                .listers
                .dra
                .get(&key, &self.handle.listers.resource_claims)
            else {
                return Err(format!(
                    "resourceclaim.resource.k8s.io \"{name}\" not found"
                ));
            };
            if claim.metadata.deletion_timestamp.is_some() {
                return Err(format!("resourceclaim \"{name}\" is being deleted"));
            }
            if check_owner {
                let owned = claim
                    .metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|o| o.controller == Some(true) && o.uid == uid);
                if !owned {
                    return Err(format!(
                        "ResourceClaim {ns}/{name} was not created for pod {ns}/{pod_name} (pod is not owner)"
                    ));
                }
            }
            out.push(claim);
        }
        Ok(out)
    }

    /// The slice index, rebuilt when a slice changed since it was built.
    fn slice_index(&self) -> Arc<SliceIndex> {
        let generation = self.handle.listers.dra.slices_generation();
        let dra = &self.handle.listers.dra;
        let build = || {
            Arc::new(SliceIndex::build(
                self.handle.listers.resource_slices.list(),
                dra,
            ))
        };
        let Ok(mut g) = self.index.lock() else {
            return build();
        };
        if let Some((gen, idx)) = g.as_ref() {
            // A compaction of the device ids makes the index's ids stale too.
            if *gen == generation && idx.epoch == dra.epoch() {
                return idx.clone();
            }
        }
        let idx = build();
        *g = Some((generation, idx.clone()));
        idx
    }
}

impl Plugin for DynamicResources {
    fn name(&self) -> &'static str {
        NAME
    }
    fn events_to_register(&self) -> Vec<ClusterEvent> {
        vec![
            ClusterEvent::new(EventResource::ResourceClaim, action::ALL),
            ClusterEvent::new(EventResource::ResourceSlice, action::ADD | action::UPDATE),
            ClusterEvent::new(EventResource::DeviceClass, action::ADD | action::UPDATE),
            ClusterEvent::new(EventResource::Node, action::ADD | action::UPDATE_NODE_LABEL),
            // A finished or deleted pod may leave a claim it held free to share or reallocate.
            ClusterEvent::new(EventResource::Pod, action::DELETE),
        ]
    }
    fn as_pre_enqueue(&self) -> Option<&dyn PreEnqueuePlugin> {
        Some(self)
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
    fn as_post_filter(&self) -> Option<&dyn PostFilterPlugin> {
        Some(self)
    }
    fn as_pre_score(&self) -> Option<&dyn PreScorePlugin> {
        Some(self)
    }
    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
}

impl PreEnqueuePlugin for DynamicResources {
    fn pre_enqueue(&self, pod: &Pod) -> Status {
        match self.pod_claims(pod) {
            Ok(_) => Status::Success,
            Err(e) => Status::UnschedulableAndUnresolvable(e),
        }
    }
}

impl PreFilterPlugin for DynamicResources {
    fn pre_filter(&self, state: &mut CycleState, pod: &Pod) -> (Option<PreFilterResult>, Status) {
        let claims = match self.pod_claims(pod) {
            Ok(c) => c,
            Err(e) => return (None, Status::UnschedulableAndUnresolvable(e)),
        };
        if claims.is_empty() {
            return (None, Status::Skip);
        }
        let (_, _, uid) = pod_ref(pod);
        let mut available_on = Vec::with_capacity(claims.len());
        let mut to_allocate = Vec::new();
        for (i, claim) in claims.iter().enumerate() {
            match allocation(claim) {
                Some(a) => {
                    let reserved = claim
                        .status
                        .as_ref()
                        .and_then(|s| s.reserved_for.as_ref())
                        .map_or(0, |r| r.len());
                    if reserved >= RESERVED_FOR_MAX_SIZE && !reserved_for_pod(claim, &uid) {
                        return (
                            None,
                            Status::UnschedulableAndUnresolvable(ERR_IN_USE.into()),
                        );
                    }
                    available_on.push(a.node_selector.clone());
                }
                None => {
                    let key = claim_key(claim);
                    if self.handle.listers.dra.is_pending(&key) {
                        return (
                            None,
                            Status::UnschedulableAndUnresolvable(format!(
                                "resource claim {key} is in the process of being allocated"
                            )),
                        );
                    }
                    available_on.push(None);
                    to_allocate.push(i);
                }
            }
        }
        let prepared = if to_allocate.is_empty() {
            None
        } else {
            let list = to_allocate.iter().map(|&i| claims[i].clone()).collect();
            let classes = &self.handle.listers.device_classes;
            match Prepared::new(list, |n| classes.get(n), &self.selectors) {
                Ok(p) => Some(Arc::new(p)),
                Err(PrepareError::ClassMissing(e)) => {
                    return (None, Status::UnschedulableAndUnresolvable(e))
                }
                Err(PrepareError::Invalid(e)) => return (None, Status::Error(e)),
            }
        };
        let n = claims.len();
        let ranked = to_allocate
            .iter()
            .any(|&i| scoring::has_first_available(&claims[i]));
        state.write(
            STATE_KEY,
            State {
                claims,
                available_on,
                to_allocate,
                index: if prepared.is_some() {
                    self.slice_index()
                } else {
                    Arc::default()
                },
                prepared,
                allocations: vec![None; n],
                reserved_in_api: Arc::default(),
                unavailable: Arc::default(),
                node_allocations: Arc::default(),
                ranked,
            },
        );
        (None, Status::Success)
    }
}

impl DynamicResources {
    fn allocate_on(&self, s: &State, node: &NodeInfo) -> Result<Option<Picks>, String> {
        let Some(prep) = &s.prepared else {
            return Ok(Some(Picks::default()));
        };
        let devices = s.index.devices(node);
        self.handle.listers.dra.with_taken(|taken| {
            allocate(
                prep,
                &devices,
                taken,
                s.index.epoch,
                &s.index.incomplete,
                &s.index.counters,
            )
        })
    }
}

impl FilterPlugin for DynamicResources {
    fn filter(&self, state: &CycleState, _pod: &Pod, node: &NodeInfo) -> Status {
        let Some(s) = state.read::<State>(STATE_KEY) else {
            return Status::Success;
        };
        let unavailable: Vec<usize> = s
            .available_on
            .iter()
            .enumerate()
            .filter(|(_, sel)| {
                sel.as_ref()
                    .is_some_and(|sel| !node_selector_matches(sel, node))
            })
            .map(|(i, _)| i)
            .collect();
        if !unavailable.is_empty() {
            if let Ok(mut u) = s.unavailable.lock() {
                u.extend(unavailable);
            }
            return Status::UnschedulableAndUnresolvable(ERR_NOT_AVAILABLE.into());
        }
        match self.allocate_on(s, node) {
            Err(e) => Status::Error(e),
            Ok(None) => Status::UnschedulableAndUnresolvable(ERR_CANNOT_ALLOCATE.into()),
            Ok(Some(picks)) => {
                if s.ranked {
                    if let Ok(mut m) = s.node_allocations.lock() {
                        m.insert(node.name().to_string(), Arc::new(picks));
                    }
                }
                Status::Success
            }
        }
    }
}

impl ReservePlugin for DynamicResources {
    fn reserve(&self, state: &mut CycleState, _pod: &Pod, node: &str) -> Status {
        let Some(ni) = state.snapshot.get(node).cloned() else {
            return Status::Error(format!("node {node:?} not in the snapshot"));
        };
        let Some(s) = state.read::<State>(STATE_KEY) else {
            return Status::Success;
        };
        let Some(prep) = &s.prepared else {
            return Status::Success;
        };
        // Filter's answer for the node when Score needed it; otherwise (and where Filter did
        // not run: a nominated node's, or a caller that skipped it) the search again for this
        // one node, on the same index and the taken devices as they are now.
        let stored = s
            .node_allocations
            .lock()
            .ok()
            .and_then(|m| m.get(node).cloned());
        let picks = match stored {
            Some(p) => p,
            None => match self.allocate_on(s, &ni) {
                Err(e) => return Status::Error(e),
                Ok(None) => return Status::Unschedulable(ERR_CANNOT_ALLOCATE.into()),
                Ok(Some(p)) => Arc::new(p),
            },
        };
        // The same index and node give the same device list Filter's picks point into.
        let results = allocator::results(prep, &ni, &s.index.devices(&ni), &picks);
        let Some(s) = state.read_mut::<State>(STATE_KEY) else {
            return Status::Success;
        };
        for (&i, result) in s.to_allocate.iter().zip(results) {
            let mut claim = (*s.claims[i]).clone();
            claim.status.get_or_insert_with(Default::default).allocation = Some(result.clone());
            self.handle.listers.dra.assume_pending(Arc::new(claim));
            s.allocations[i] = Some(result);
        }
        Status::Success
    }

    fn unreserve(&self, state: &mut CycleState, pod: &Pod, _node: &str) {
        let Some(s) = state.read::<State>(STATE_KEY) else {
            return;
        };
        for &i in &s.to_allocate {
            self.handle.listers.dra.forget(
                &claim_key(&s.claims[i]),
                &self.handle.listers.resource_claims,
            );
        }
        let written: Vec<String> = s
            .reserved_in_api
            .lock()
            .map(|g| g.clone())
            .unwrap_or_default();
        let (Some(client), false) = (self.handle.client.clone(), written.is_empty()) else {
            return;
        };
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (ns, _, uid) = pod_ref(pod);
        rt.spawn(async move {
            let api: Api<ResourceClaim> = Api::namespaced(client, &ns);
            for name in written {
                unreserve_in_api(&api, &name, &uid).await;
            }
        });
    }
}

/// Takes the pod out of the claim's `reservedFor` (the claim controller deallocates a claim
/// reserved for nobody).
async fn unreserve_in_api(api: &Api<ResourceClaim>, name: &str, uid: &str) {
    for _ in 0..WRITE_ATTEMPTS {
        let Ok(mut claim) = api.get(name).await else {
            return;
        };
        let Some(list) = claim.status.as_mut().and_then(|s| s.reserved_for.as_mut()) else {
            return;
        };
        let before = list.len();
        list.retain(|r| r.uid != uid);
        if list.len() == before {
            return;
        }
        match api
            .replace_status(name, &PostParams::default(), &claim)
            .await
        {
            Err(kube::Error::Api(e)) if e.code == 409 => continue,
            Err(e) => {
                tracing::warn!(claim = name, error = %e, "removing pod from reservedFor");
                return;
            }
            Ok(_) => return,
        }
    }
}

impl DynamicResources {
    /// Upstream `bindClaim`: the allocation (if the scheduler made it) and the reservation.
    async fn bind_claim(
        &self,
        client: kube::Client,
        claim: &ResourceClaim,
        allocation: Option<&AllocationResult>,
        pod: &Pod,
    ) -> Result<Arc<ResourceClaim>, String> {
        let (ns, pod_name, uid) = pod_ref(pod);
        let name = claim.metadata.name.clone().unwrap_or_default();
        let api: Api<ResourceClaim> = Api::namespaced(client, &ns);
        let mut claim = claim.clone();
        // The assumed claim carries our allocation already: start from the API's view of it.
        if let (Some(_), Some(st)) = (allocation, claim.status.as_mut()) {
            st.allocation = None;
        }
        let mut refresh = false;
        let mut last = String::new();
        for _ in 0..WRITE_ATTEMPTS {
            if refresh {
                let fresh = api.get(&name).await.map_err(|e| e.to_string())?;
                if fresh.metadata.uid != claim.metadata.uid {
                    return Err(format!("claim {ns}/{name} got replaced in the meantime"));
                }
                if fresh.metadata.deletion_timestamp.is_some() {
                    return Err(format!("claim {ns}/{name} got deleted in the meantime"));
                }
                claim = fresh;
            }
            if let Some(a) = allocation {
                if allocation_of(&claim).is_some() {
                    return Err(format!(
                        "claim {ns}/{name} got allocated elsewhere in the meantime"
                    ));
                }
                if !claim
                    .metadata
                    .finalizers
                    .iter()
                    .flatten()
                    .any(|f| f == FINALIZER)
                {
                    claim
                        .metadata
                        .finalizers
                        .get_or_insert_with(Vec::new)
                        .push(FINALIZER.into());
                    match api.replace(&name, &PostParams::default(), &claim).await {
                        Ok(c) => claim = c,
                        Err(kube::Error::Api(e)) if e.code == 409 => {
                            refresh = true;
                            last = e.message;
                            continue;
                        }
                        Err(e) => return Err(format!("add finalizer: {e}")),
                    }
                }
                claim.status.get_or_insert_with(Default::default).allocation = Some(a.clone());
            }
            if !reserved_for_pod(&claim, &uid) {
                claim
                    .status
                    .get_or_insert_with(Default::default)
                    .reserved_for
                    .get_or_insert_with(Vec::new)
                    .push(ResourceClaimConsumerReference {
                        api_group: None,
                        resource: "pods".into(),
                        name: pod_name.clone(),
                        uid: uid.clone(),
                    });
            }
            match api
                .replace_status(&name, &PostParams::default(), &claim)
                .await
            {
                Ok(c) => return Ok(Arc::new(c)),
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    refresh = true;
                    last = e.message;
                }
                Err(e) => return Err(format!("update claim status: {e}")),
            }
        }
        Err(format!("claim {ns}/{name}: {last}"))
    }
}

fn allocation_of(claim: &ResourceClaim) -> Option<&AllocationResult> {
    allocation(claim)
}

impl PreBindPlugin for DynamicResources {
    fn pre_bind<'a>(
        &'a self,
        state: &'a CycleState,
        pod: &'a Pod,
        _node: &'a str,
    ) -> BoxFuture<'a, Status> {
        async move {
            let Some(s) = state.read::<State>(STATE_KEY) else {
                return Status::Success;
            };
            let Some(client) = self.handle.client.clone() else {
                return Status::Error("no API client".into());
            };
            let (_, _, uid) = pod_ref(pod);
            let needed = s
                .claims
                .iter()
                .enumerate()
                .any(|(i, c)| s.allocations[i].is_some() || !reserved_for_pod(c, &uid));
            // See the module docs: the writes of a bounded number of pods at a time.
            let _slot = if needed {
                match self.writes.clone().acquire_owned().await {
                    Ok(p) => Some(p),
                    Err(_) => return Status::Error("scheduler shutting down".into()),
                }
            } else {
                None
            };
            for (i, claim) in s.claims.iter().enumerate() {
                let alloc = s.allocations[i].as_ref();
                if alloc.is_none() && reserved_for_pod(claim, &uid) {
                    continue;
                }
                match self.bind_claim(client.clone(), claim, alloc, pod).await {
                    Ok(written) => {
                        if let Ok(mut g) = s.reserved_in_api.lock() {
                            g.push(written.metadata.name.clone().unwrap_or_default());
                        }
                        self.handle
                            .listers
                            .dra
                            .assume_written(written, &self.handle.listers.resource_claims);
                    }
                    Err(e) => {
                        return Status::Error(format!(
                            "binding claim {}: {e}",
                            claim.metadata.name.as_deref().unwrap_or("")
                        ))
                    }
                }
            }
            Status::Success
        }
        .boxed()
    }
}

impl PostFilterPlugin for DynamicResources {
    /// Upstream's PostFilter: an allocated claim that some node could not reach and that no other
    /// pod holds is deallocated, so that the next attempt can allocate it where the pod fits.
    fn post_filter(
        &self,
        state: &CycleState,
        pod: &Pod,
        _statuses: &NodeToStatus,
        _framework: &Framework,
    ) -> (PostFilterResult, Status) {
        let none = PostFilterResult::default();
        let Some(s) = state
            .read::<State>(STATE_KEY)
            .filter(|s| !s.claims.is_empty())
        else {
            return (none, Status::Unschedulable(MSG_NO_CLAIMS.into()));
        };
        let (_, _, uid) = pod_ref(pod);
        let unavailable: Vec<usize> = s
            .unavailable
            .lock()
            .map(|u| u.iter().copied().collect())
            .unwrap_or_default();
        for i in unavailable {
            let Some(claim) = s.claims.get(i) else {
                continue;
            };
            if !deallocatable(claim, &uid) {
                continue;
            }
            self.deallocate(claim);
            return (none, Status::Unschedulable(MSG_DEALLOCATED.into()));
        }
        (
            none,
            Status::Unschedulable(MSG_STILL_NOT_SCHEDULABLE.into()),
        )
    }
}

/// Whether PostFilter may deallocate the claim: reserved for nobody, or only for this pod.
fn deallocatable(claim: &ResourceClaim, uid: &str) -> bool {
    let reserved = claim
        .status
        .as_ref()
        .and_then(|s| s.reserved_for.as_deref())
        .unwrap_or_default();
    allocation(claim).is_some()
        && (reserved.is_empty() || (reserved.len() == 1 && reserved[0].uid == uid))
}

/// The claim with its allocation, reservations and device status cleared (what PostFilter writes).
fn deallocated(claim: &ResourceClaim) -> ResourceClaim {
    let mut claim = claim.clone();
    if let Some(st) = claim.status.as_mut() {
        st.reserved_for = None;
        st.allocation = None;
        st.devices = None;
    }
    claim
}

impl DynamicResources {
    /// Writes the deallocation in the background (PostFilter is synchronous); a conflict means
    /// the claim changed since this cycle read it, and the claim event that caused it requeues
    /// the pod anyway.
    fn deallocate(&self, claim: &ResourceClaim) {
        let (Some(client), Ok(rt)) = (
            self.handle.client.clone(),
            tokio::runtime::Handle::try_current(),
        ) else {
            return;
        };
        let claim = deallocated(claim);
        let writes = self.writes.clone();
        rt.spawn(async move {
            let Ok(_slot) = writes.acquire_owned().await else {
                return;
            };
            let ns = claim.metadata.namespace.clone().unwrap_or_default();
            let name = claim.metadata.name.clone().unwrap_or_default();
            let api: Api<ResourceClaim> = Api::namespaced(client, &ns);
            if let Err(e) = api
                .replace_status(&name, &PostParams::default(), &claim)
                .await
            {
                tracing::warn!(claim = %format!("{ns}/{name}"), error = %e, "deallocating the claim");
            }
        });
    }
}

impl PreScorePlugin for DynamicResources {
    /// Nothing to rank unless a claim to allocate has a `firstAvailable` request.
    fn pre_score(&self, state: &mut CycleState, _pod: &Pod, _nodes: &[Arc<NodeInfo>]) -> Status {
        let Some(s) = state.read::<State>(STATE_KEY) else {
            return Status::Skip;
        };
        if s.ranked {
            Status::Success
        } else {
            Status::Skip
        }
    }
}

impl ScorePlugin for DynamicResources {
    fn score(&self, state: &CycleState, _pod: &Pod, node: &NodeInfo) -> i64 {
        let Some(s) = state.read::<State>(STATE_KEY) else {
            return 0;
        };
        let (Some(prep), Some(picks)) = (
            &s.prepared,
            s.node_allocations
                .lock()
                .ok()
                .and_then(|m| m.get(node.name()).cloned()),
        ) else {
            return 0;
        };
        picks.score(prep)
    }

    fn normalize(&self, _state: &CycleState, _pod: &Pod, scores: &mut [i64]) {
        scoring::normalize(scores);
    }
}
