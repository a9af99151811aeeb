//! The PersistentVolume controller's decisions (upstream
//! `pkg/controller/volume/persistentvolume/pv_controller.go`: `syncUnboundClaim`,
//! `syncBoundClaim`, `syncVolume`, `reclaimVolume`, `findProvisionablePlugin`,
//! `findDeletablePlugin`, `isVolumeReleased`), as pure functions: given a claim or a volume and
//! what the controller knows, what to write. The writes themselves (and their order: volume
//! spec, volume status, claim spec, claim status) are in `mod.rs`; the helpers at the end of this
//! file compute each written object.
//!
//! Differences: no CSI migration (the `migrated-to` annotation only makes the controller stand
//! down); in-tree plugins are the provisioners registered with the controller (see
//! [`super::provisioner`]) instead of `kubernetes.io/*` volume plugins, so the pv-controller
//! deletion finalizer goes on their volumes; no recycler (Recycle fails as with no recycler
//! plugin); no deleter for hostPath volumes (upstream deletes `/tmp/...` paths on the
//! controller-manager's host).

use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    ObjectReference, PersistentVolume, PersistentVolumeClaim, PersistentVolumeClaimStatus,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::index::{check_volume_satisfies_claim, find_best_match, volume_mode_mismatch};
use crate::volume::{
    annotation, claim_class, claim_has_class, default_class, has_annotation, has_finalizer, key_of,
    ANN_BIND_COMPLETED, ANN_BOUND_BY_CONTROLLER, ANN_DYNAMICALLY_PROVISIONED, ANN_MIGRATED_TO,
    ANN_SELECTED_NODE, PV_DELETION_EXTERNAL_FINALIZER, PV_DELETION_IN_TREE_FINALIZER,
};

/// A volume whose filesystem must still be resized: the claim's capacity is this, not the PV's.
const ANN_PRE_RESIZE_CAPACITY: &str = "volume.alpha.kubernetes.io/pre-resize-capacity";

/// An event to record on the claim or volume being synced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub warning: bool,
    pub reason: &'static str,
    pub message: String,
}

impl Event {
    pub fn normal(reason: &'static str, message: impl Into<String>) -> Event {
        Event {
            warning: false,
            reason,
            message: message.into(),
        }
    }
    pub fn warning(reason: &'static str, message: impl Into<String>) -> Event {
        Event {
            warning: true,
            reason,
            message: message.into(),
        }
    }
}

/// What a claim sync reads besides the claim.
pub struct View<'a> {
    /// The controller's volumes (its cache, newer than the informer's after its own writes).
    pub volumes: &'a [Arc<PersistentVolume>],
    pub classes: &'a [Arc<StorageClass>],
    /// Names of the claim's non-terminated pods that are not scheduled yet.
    pub unscheduled_pods: &'a [String],
}

impl View<'_> {
    fn volume(&self, name: &str) -> Option<&Arc<PersistentVolume>> {
        self.volumes
            .iter()
            .find(|v| v.metadata.name.as_deref() == Some(name))
    }
}

/// What to do with a claim.
#[derive(Clone, Debug)]
pub enum ClaimAction {
    /// Record `event` (if any), then make the claim `Pending` (no access modes, no capacity).
    Pending { event: Option<Event> },
    /// Make the claim `Lost`, recording `event` only if the phase changes.
    Lost { event: Event },
    /// Bind the claim and the volume (both end `Bound`).
    Bind(Arc<PersistentVolume>),
    /// Give a classless claim the default class; the update event syncs it again.
    AssignDefaultClass(String),
    /// No volume fits and the claim has a class: provision one.
    Provision,
    /// Record `event` and fail the sync.
    Fail { event: Event, error: String },
}

/// Upstream `IsDelayBindingMode`: the claim's class binds `WaitForFirstConsumer`. A missing class
/// binds immediately.
pub fn is_delay_binding(
    claim: &PersistentVolumeClaim,
    classes: &[Arc<StorageClass>],
) -> Result<bool, String> {
    let name = claim_class(claim);
    if name.is_empty() {
        return Ok(false);
    }
    let Some(class) = classes
        .iter()
        .find(|c| c.metadata.name.as_deref() == Some(name.as_str()))
    else {
        return Ok(false);
    };
    match class.volume_binding_mode.as_deref() {
        Some(mode) => Ok(mode == "WaitForFirstConsumer"),
        None => Err(format!(
            "VolumeBindingMode not set for StorageClass {name:?}"
        )),
    }
}

/// Upstream `emitEventForUnboundDelayBindingClaim`.
fn delay_binding_event(unscheduled: &[String]) -> Event {
    match unscheduled {
        [] => Event::normal(
            "WaitForFirstConsumer",
            "waiting for first consumer to be created before binding",
        ),
        [one] => Event::normal(
            "WaitForPodScheduled",
            format!("waiting for pod {one} to be scheduled"),
        ),
        many => Event::normal(
            "WaitForPodScheduled",
            format!("waiting for pods {} to be scheduled", many.join(",")),
        ),
    }
}

/// Upstream `syncClaim`.
pub fn sync_claim(claim: &PersistentVolumeClaim, view: &View<'_>) -> Result<ClaimAction, String> {
    if has_annotation(&claim.metadata, ANN_BIND_COMPLETED) {
        Ok(sync_bound_claim(claim, view))
    } else {
        sync_unbound_claim(claim, view)
    }
}

fn volume_name(claim: &PersistentVolumeClaim) -> &str {
    claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .unwrap_or("")
}

fn claim_ref(volume: &PersistentVolume) -> Option<&ObjectReference> {
    volume.spec.as_ref().and_then(|s| s.claim_ref.as_ref())
}

fn claim_ref_uid(volume: &PersistentVolume) -> &str {
    claim_ref(volume)
        .and_then(|r| r.uid.as_deref())
        .unwrap_or("")
}

fn sync_unbound_claim(
    claim: &PersistentVolumeClaim,
    view: &View<'_>,
) -> Result<ClaimAction, String> {
    let requested = volume_name(claim);
    if requested.is_empty() {
        let delay = is_delay_binding(claim, view.classes)?;
        let found = find_best_match(claim, view.volumes, delay).map_err(|e| {
            format!(
                "error finding PV for claim {:?}: {e}",
                key_of(&claim.metadata)
            )
        })?;
        if let Some(volume) = found {
            return Ok(ClaimAction::Bind(volume));
        }
        if !claim_has_class(claim) {
            if let Some(class) = default_class(view.classes) {
                return Ok(ClaimAction::AssignDefaultClass(
                    class.metadata.name.clone().unwrap_or_default(),
                ));
            }
        }
        if delay && !has_annotation(&claim.metadata, ANN_SELECTED_NODE) {
            // No pod using the claim has been scheduled yet.
            return Ok(ClaimAction::Pending {
                event: Some(delay_binding_event(view.unscheduled_pods)),
            });
        }
        if !claim_class(claim).is_empty() {
            return Ok(ClaimAction::Provision);
        }
        return Ok(ClaimAction::Pending {
            event: Some(Event::normal(
                "FailedBinding",
                "no persistent volumes available for this claim and no storage class is set",
            )),
        });
    }
    // The user asked for a specific volume.
    let Some(volume) = view.volume(requested) else {
        return Ok(ClaimAction::Pending { event: None });
    };
    if claim_ref(volume).is_none() {
        return Ok(match check_volume_satisfies_claim(volume, claim) {
            Ok(()) => ClaimAction::Bind(volume.clone()),
            Err(why) => ClaimAction::Pending {
                event: Some(Event::warning(
                    "VolumeMismatch",
                    format!("Cannot bind to requested volume {requested:?}: {why}"),
                )),
            },
        });
    }
    if super::index::is_volume_bound_to_claim(volume, claim) {
        return Ok(ClaimAction::Bind(volume.clone()));
    }
    let event = Event::warning(
        "FailedBinding",
        format!("volume {requested:?} already bound to a different claim."),
    );
    if !has_annotation(&claim.metadata, ANN_BOUND_BY_CONTROLLER) {
        // The user asked for it; retry later.
        return Ok(ClaimAction::Pending { event: Some(event) });
    }
    let holder = claim_ref(volume)
        .map(|r| {
            format!(
                "{}/{}",
                r.namespace.as_deref().unwrap_or(""),
                r.name.as_deref().unwrap_or("")
            )
        })
        .unwrap_or_default();
    Ok(ClaimAction::Fail {
        event,
        error: format!(
            "invalid binding of claim {:?} to volume {requested:?}: volume already claimed by {holder:?}",
            key_of(&claim.metadata)
        ),
    })
}

fn sync_bound_claim(claim: &PersistentVolumeClaim, view: &View<'_>) -> ClaimAction {
    let name = volume_name(claim);
    if name.is_empty() {
        return ClaimAction::Lost {
            event: Event::warning(
                "ClaimLost",
                "Bound claim has lost reference to PersistentVolume. Data on the volume is lost!",
            ),
        };
    }
    let Some(volume) = view.volume(name) else {
        return ClaimAction::Lost {
            event: Event::warning(
                "ClaimLost",
                "Bound claim has lost its PersistentVolume. Data on the volume is lost!",
            ),
        };
    };
    if claim_ref(volume).is_none() || Some(claim_ref_uid(volume)) == claim.metadata.uid.as_deref() {
        // Re-bind a volume that came unbound, or check that all is written.
        return ClaimAction::Bind(volume.clone());
    }
    ClaimAction::Lost {
        event: Event::warning(
            "ClaimMisbound",
            "Two claims are bound to the same volume, this one is bound incorrectly",
        ),
    }
}

/// What to do with a volume.
#[derive(Clone, Debug, PartialEq)]
pub enum VolumeAction {
    /// Set the phase (no-op when it is set).
    Phase(&'static str),
    /// Its claim is gone: make it `Released` unless it is `Released` or `Failed`, then reclaim it.
    Release,
    /// Its claim is not bound yet: sync the claim (by key).
    SyncClaim(String),
    /// Volume and claim cannot be bound: record `volume_event` on the volume and `claim_event` on the
    /// claim.
    Mismatch {
        volume_event: Event,
        claim_event: Event,
    },
    /// Roll a binding back.
    Unbind,
}

/// Upstream `syncVolume`, with the claim the volume's claimRef names already looked up (`None`:
/// it does not exist or has another UID).
pub fn sync_volume(
    volume: &PersistentVolume,
    claim: Option<&PersistentVolumeClaim>,
) -> VolumeAction {
    let Some(r) = claim_ref(volume) else {
        return VolumeAction::Phase("Available");
    };
    if claim_ref_uid(volume).is_empty() {
        // Pre-bound to a claim that has not been bound yet: the claim's sync does it.
        return VolumeAction::Phase("Available");
    }
    let Some(claim) = claim else {
        return VolumeAction::Release;
    };
    let name = volume.metadata.name.as_deref().unwrap_or("");
    let claim_volume = volume_name(claim);
    if claim_volume.is_empty() {
        if volume_mode_mismatch(claim, volume) {
            let claim_name = claim.metadata.name.as_deref().unwrap_or("");
            return VolumeAction::Mismatch {
                volume_event: Event::warning("VolumeMismatch", format!("Cannot bind PersistentVolume to requested PersistentVolumeClaim {claim_name:?} due to incompatible volumeMode.")),
                claim_event: Event::warning("VolumeMismatch", format!("Cannot bind PersistentVolume {name:?} to requested PersistentVolumeClaim due to incompatible volumeMode.")),
            };
        }
        return VolumeAction::SyncClaim(format!(
            "{}/{}",
            r.namespace.as_deref().unwrap_or(""),
            r.name.as_deref().unwrap_or("")
        ));
    }
    if claim_volume == name {
        return VolumeAction::Phase("Bound");
    }
    // The claim is bound to another volume.
    let provisioned = has_annotation(&volume.metadata, ANN_DYNAMICALLY_PROVISIONED);
    if provisioned && reclaim_policy(volume) == "Delete" {
        // Provisioned for this claim, which got another volume: not needed.
        return VolumeAction::Release;
    }
    // Bound by us: undo it; pre-bound by the user: keep the claimRef but clear its UID.
    VolumeAction::Unbind
}

pub fn volume_phase(volume: &PersistentVolume) -> &str {
    volume
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

pub fn reclaim_policy(volume: &PersistentVolume) -> &str {
    volume
        .spec
        .as_ref()
        .and_then(|s| s.persistent_volume_reclaim_policy.as_deref())
        .unwrap_or("")
}

/// Upstream `reclaimVolume`.
#[derive(Clone, Debug, PartialEq)]
pub enum Reclaim {
    Nothing,
    Recycle,
    Delete,
    /// An unknown policy: the volume fails with this event.
    Unknown(Event),
}

pub fn reclaim(volume: &PersistentVolume) -> Reclaim {
    if annotation(&volume.metadata, ANN_MIGRATED_TO).is_some_and(|m| !m.is_empty()) {
        return Reclaim::Nothing;
    }
    match reclaim_policy(volume) {
        "Retain" => Reclaim::Nothing,
        "Recycle" => Reclaim::Recycle,
        "Delete" => Reclaim::Delete,
        _ => Reclaim::Unknown(Event::warning(
            "VolumeUnknownReclaimPolicy",
            "Volume has unrecognized PersistentVolumeReclaimPolicy",
        )),
    }
}

/// The recycle outcome: rkube has no recycler (upstream's recycler pods for NFS and hostPath),
/// so Recycle volumes fail as upstream's with no recycler plugin.
pub fn no_recycler_event() -> Event {
    Event::warning(
        "VolumeFailedRecycle",
        "No recycler plugin found for the volume!",
    )
}

/// Upstream `isVolumeReleased`: bound (claimRef with a UID) to a claim that is gone, has another
/// UID, or is bound to another volume.
pub fn is_volume_released(
    volume: &PersistentVolume,
    claim: Option<&PersistentVolumeClaim>,
) -> bool {
    if claim_ref(volume).is_none() || claim_ref_uid(volume).is_empty() {
        return false;
    }
    match claim {
        Some(c) if c.metadata.uid.as_deref() == Some(claim_ref_uid(volume)) => {
            let bound_to = volume_name(c);
            !bound_to.is_empty() && Some(bound_to) != volume.metadata.name.as_deref()
        }
        _ => true,
    }
}

/// Who deletes a released volume's storage (upstream `findDeletablePlugin`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Deleter {
    /// The in-tree provisioner of this name.
    InTree(String),
    /// An external provisioner (or CSI driver) does it; the controller waits.
    External,
    /// Nobody can: the volume fails with this message.
    Missing(String),
}

pub fn find_deleter(volume: &PersistentVolume, registered: impl Fn(&str) -> bool) -> Deleter {
    let name = volume.metadata.name.as_deref().unwrap_or("");
    if let Some(by) =
        annotation(&volume.metadata, ANN_DYNAMICALLY_PROVISIONED).filter(|p| !p.is_empty())
    {
        if registered(by) {
            return Deleter::InTree(by.to_string());
        }
        if !by.starts_with("kubernetes.io/") {
            return Deleter::External;
        }
        return Deleter::Missing(format!("no volume plugin matched name: {by}"));
    }
    if has_annotation(&volume.metadata, ANN_MIGRATED_TO)
        || volume.spec.as_ref().is_some_and(|s| s.csi.is_some())
    {
        return Deleter::External;
    }
    Deleter::Missing(format!(
        "error getting deleter volume plugin for volume {name:?}: no deletable volume plugin matched"
    ))
}

/// How a claim gets its volume provisioned (upstream `findProvisionablePlugin`).
#[derive(Clone, Debug)]
pub enum Provisioning {
    InTree(Arc<StorageClass>),
    External(Arc<StorageClass>),
    /// A `ProvisioningFailed` warning with this message; the claim stays as it is.
    Failed(String),
}

pub fn find_provisioning(
    claim: &PersistentVolumeClaim,
    classes: &[Arc<StorageClass>],
    registered: impl Fn(&str) -> bool,
) -> Provisioning {
    let name = claim_class(claim);
    let Some(class) = classes
        .iter()
        .find(|c| c.metadata.name.as_deref() == Some(name.as_str()))
    else {
        return Provisioning::Failed(format!("storageclass.storage.k8s.io {name:?} not found"));
    };
    if registered(&class.provisioner) {
        Provisioning::InTree(class.clone())
    } else if !class.provisioner.starts_with("kubernetes.io/") {
        Provisioning::External(class.clone())
    } else {
        Provisioning::Failed(format!(
            "no volume plugin matched name: {}",
            class.provisioner
        ))
    }
}

/// Upstream's message of the `ExternalProvisioning` event.
pub fn external_provisioning_message(provisioner: &str) -> String {
    format!(
        "Waiting for a volume to be created either by the external provisioner '{provisioner}' \
         or manually by the system administrator. If volume creation is delayed, please verify \
         that the provisioner is running and correctly registered."
    )
}

/// Upstream `modifyDeletionFinalizers`: an in-tree provisioned volume has the pv-controller
/// finalizer exactly when its policy is Delete, and never the external provisioner's. `None`:
/// nothing to change.
pub fn deletion_finalizers(
    volume: &PersistentVolume,
    registered: impl Fn(&str) -> bool,
) -> Option<Vec<String>> {
    let by = annotation(&volume.metadata, ANN_DYNAMICALLY_PROVISIONED)?;
    if !registered(by) {
        return None;
    }
    let mut out: Vec<String> = volume.metadata.finalizers.clone().unwrap_or_default();
    let before = out.clone();
    let has = has_finalizer(&volume.metadata, PV_DELETION_IN_TREE_FINALIZER);
    match reclaim_policy(volume) {
        "Delete" if !has => out.push(PV_DELETION_IN_TREE_FINALIZER.to_string()),
        "Retain" | "Recycle" if has => out.retain(|f| f != PV_DELETION_IN_TREE_FINALIZER),
        _ => {}
    }
    out.retain(|f| f != PV_DELETION_EXTERNAL_FINALIZER);
    (out != before).then_some(out)
}

// ---- the objects the binding writes ----

/// A reference to the claim, for a volume's claimRef (upstream `reference.GetReference`).
pub fn claim_reference(claim: &PersistentVolumeClaim) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("PersistentVolumeClaim".into()),
        namespace: claim.metadata.namespace.clone(),
        name: claim.metadata.name.clone(),
        uid: claim.metadata.uid.clone(),
        resource_version: claim.metadata.resource_version.clone(),
        field_path: None,
    }
}

fn set_annotation(
    meta: &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    key: &str,
) {
    meta.annotations
        .get_or_insert_with(Default::default)
        .entry(key.to_string())
        .or_insert_with(|| "yes".to_string());
}

/// Upstream `GetBindVolumeToClaim`: the volume with its claimRef on the claim (and
/// bound-by-controller unless the user pre-bound it); `None` when nothing changes.
pub fn bind_volume_to_claim(
    volume: &PersistentVolume,
    claim: &PersistentVolumeClaim,
) -> Option<PersistentVolume> {
    let by_controller = !super::index::is_volume_bound_to_claim(volume, claim);
    let mut out = volume.clone();
    let mut dirty = false;
    let same = claim_ref(volume).is_some_and(|r| {
        r.name == claim.metadata.name
            && r.namespace == claim.metadata.namespace
            && r.uid.as_deref().unwrap_or("") == claim.metadata.uid.as_deref().unwrap_or("")
    });
    if !same {
        out.spec.get_or_insert_with(Default::default).claim_ref = Some(claim_reference(claim));
        dirty = true;
    }
    if by_controller && !has_annotation(&out.metadata, ANN_BOUND_BY_CONTROLLER) {
        set_annotation(&mut out.metadata, ANN_BOUND_BY_CONTROLLER);
        dirty = true;
    }
    dirty.then_some(out)
}

/// The volume in `phase` with `message`; `None` when the phase is already set (upstream
/// `updateVolumePhase` then writes nothing).
pub fn with_volume_phase(
    volume: &PersistentVolume,
    phase: &str,
    message: &str,
) -> Option<PersistentVolume> {
    if volume_phase(volume) == phase {
        return None;
    }
    let mut out = volume.clone();
    let status = out.status.get_or_insert_with(Default::default);
    status.phase = Some(phase.to_string());
    status.message = (!message.is_empty()).then(|| message.to_string());
    Some(out)
}

/// Upstream `bindClaimToVolume`: the claim's volumeName, bound-by-controller when the controller
/// chose the volume, and bind-completed; `None` when nothing changes.
pub fn bind_claim_to_volume(
    claim: &PersistentVolumeClaim,
    volume: &PersistentVolume,
) -> Option<PersistentVolumeClaim> {
    let name = volume.metadata.name.as_deref().unwrap_or("");
    let mut out = claim.clone();
    let mut dirty = false;
    if volume_name(claim) != name {
        out.spec.get_or_insert_with(Default::default).volume_name = Some(name.to_string());
        set_annotation(&mut out.metadata, ANN_BOUND_BY_CONTROLLER);
        dirty = true;
    }
    if !has_annotation(&out.metadata, ANN_BIND_COMPLETED) {
        set_annotation(&mut out.metadata, ANN_BIND_COMPLETED);
        dirty = true;
    }
    dirty.then_some(out)
}

/// Upstream `updateClaimStatus`: the claim in `phase`, with the volume's access modes and (when
/// it becomes bound) its capacity, or neither without a volume; `None` when nothing changes.
pub fn claim_with_status(
    claim: &PersistentVolumeClaim,
    phase: &str,
    volume: Option<&PersistentVolume>,
) -> Result<Option<PersistentVolumeClaim>, String> {
    let old = claim.status.clone().unwrap_or_default();
    let mut new: PersistentVolumeClaimStatus = old.clone();
    new.phase = Some(phase.to_string());
    match volume {
        None => {
            new.access_modes = None;
            new.capacity = None;
        }
        Some(v) => {
            new.access_modes = v.spec.as_ref().and_then(|s| s.access_modes.clone());
            if old.phase.as_deref() != Some(phase) {
                let name = v.metadata.name.as_deref().unwrap_or("");
                let cap = v
                    .spec
                    .as_ref()
                    .and_then(|s| s.capacity.as_ref())
                    .and_then(|c| c.get("storage"))
                    .cloned()
                    .ok_or_else(|| {
                        format!("PersistentVolume {name:?} is without a storage capacity")
                    })?;
                let capacity = match annotation(&v.metadata, ANN_PRE_RESIZE_CAPACITY) {
                    Some(pre) => Quantity(pre.to_string()),
                    None => cap,
                };
                let mut map = new.capacity.clone().unwrap_or_default();
                map.insert("storage".into(), capacity);
                new.capacity = Some(map);
            }
        }
    }
    if new == old {
        return Ok(None);
    }
    let mut out = claim.clone();
    out.status = Some(new);
    Ok(Some(out))
}

/// Upstream `unbindVolume`: a controller binding is removed with its annotation; a user's
/// pre-binding keeps the claimRef without its UID.
pub fn unbind_volume(volume: &PersistentVolume) -> PersistentVolume {
    let mut out = volume.clone();
    if has_annotation(&volume.metadata, ANN_BOUND_BY_CONTROLLER) {
        if let Some(spec) = out.spec.as_mut() {
            spec.claim_ref = None;
        }
        if let Some(ann) = out.metadata.annotations.as_mut() {
            ann.remove(ANN_BOUND_BY_CONTROLLER);
            if ann.is_empty() {
                out.metadata.annotations = None;
            }
        }
    } else if let Some(r) = out.spec.as_mut().and_then(|s| s.claim_ref.as_mut()) {
        r.uid = None;
    }
    out
}

/// A volume a provisioner returned, made the claim's (upstream `provisionClaimOperation`): its
/// name, claimRef, class, the bound-by-controller and provisioned-by annotations and, for the
/// Delete policy, the pv-controller finalizer.
pub fn provisioned_volume(
    mut volume: PersistentVolume,
    claim: &PersistentVolumeClaim,
    pv_name: &str,
    provisioner: &str,
) -> PersistentVolume {
    if volume.metadata.name.as_deref().unwrap_or("").is_empty() {
        volume.metadata.name = Some(pv_name.to_string());
    }
    let spec = volume.spec.get_or_insert_with(Default::default);
    spec.claim_ref = Some(claim_reference(claim));
    spec.storage_class_name = Some(claim_class(claim));
    volume.status.get_or_insert_with(Default::default).phase = Some("Bound".into());
    set_annotation(&mut volume.metadata, ANN_BOUND_BY_CONTROLLER);
    volume
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(ANN_DYNAMICALLY_PROVISIONED.into(), provisioner.into());
    if reclaim_policy(&volume) == "Delete" {
        volume.metadata.finalizers = Some(vec![PV_DELETION_IN_TREE_FINALIZER.to_string()]);
    }
    volume
}

/// Upstream `getProvisionedVolumeNameForClaim`.
pub fn provisioned_volume_name(claim: &PersistentVolumeClaim) -> String {
    format!("pvc-{}", claim.metadata.uid.as_deref().unwrap_or(""))
}

#[cfg(test)]
#[path = "binder_tests.rs"]
mod tests;
