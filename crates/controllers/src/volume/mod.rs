//! Volume controllers (upstream `pkg/controller/volume`):
//!
//! - [`persistentvolume`]: the PersistentVolume controller (`persistentvolume-binder-controller`)
//!   that binds claims to volumes, provisions and reclaims them.
//! - [`localpath`]: the in-tree `rkube.io/local-path` provisioner, registered when
//!   `ControllerOptions::local_path_dir` is set (by `rkube server`).
//! - [`ephemeral`]: claims for pods' generic ephemeral volumes.
//! - [`expand`]: the volume expander (grown claims).
//! - [`protection`]: the PVC and PV protection controllers, which remove the
//!   `kubernetes.io/pvc-protection` and `kubernetes.io/pv-protection` finalizers the
//!   StorageObjectInUseProtection admission plugin puts on every claim and volume, once nothing
//!   uses the object any more.
//!
//! This file holds what they share: upstream's annotation names
//! (`k8s.io/component-helpers/storage/volume`), class helpers and the index of pods by the claims
//! they use (`pkg/controller/volume/common`'s `PodPVCIndex`).

pub mod attachdetach;
pub mod ephemeral;
pub mod expand;
pub mod localpath;
pub mod persistentvolume;
pub mod protection;

use std::sync::Arc;

use client::informer::SharedInformer;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// On claims: the binding has been set up once (its value does not matter).
pub const ANN_BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
/// On claims and volumes: the controller, not the user, made the binding.
pub const ANN_BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";
/// On claims: the node the scheduler chose for a `WaitForFirstConsumer` claim.
pub const ANN_SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// On volumes: the provisioner that created it.
pub const ANN_DYNAMICALLY_PROVISIONED: &str = "pv.kubernetes.io/provisioned-by";
/// On claims and volumes: a CSI driver took over from an in-tree plugin (the controller stands down).
pub const ANN_MIGRATED_TO: &str = "pv.kubernetes.io/migrated-to";
/// On claims: the provisioner expected to provision a volume for it.
pub const ANN_STORAGE_PROVISIONER: &str = "volume.kubernetes.io/storage-provisioner";
/// The deprecated form of [`ANN_STORAGE_PROVISIONER`], still written beside it (as upstream).
pub const ANN_BETA_STORAGE_PROVISIONER: &str = "volume.beta.kubernetes.io/storage-provisioner";
/// The deprecated class annotation, which wins over `spec.storageClassName`.
pub const ANN_BETA_STORAGE_CLASS: &str = "volume.beta.kubernetes.io/storage-class";
/// The class name of "dynamic provisioning not supported".
pub const NOT_SUPPORTED_PROVISIONER: &str = "kubernetes.io/no-provisioner";
/// The finalizer keeping an in-tree provisioned volume until its storage is deleted.
pub const PV_DELETION_IN_TREE_FINALIZER: &str = "kubernetes.io/pv-controller";
/// The finalizer external provisioners put on their volumes.
pub const PV_DELETION_EXTERNAL_FINALIZER: &str =
    "external-provisioner.volume.kubernetes.io/finalizer";
/// The finalizer of StorageObjectInUseProtection on claims.
pub const PVC_PROTECTION_FINALIZER: &str = "kubernetes.io/pvc-protection";
/// The finalizer of StorageObjectInUseProtection on volumes.
pub const PV_PROTECTION_FINALIZER: &str = "kubernetes.io/pv-protection";

/// The index of pods by the `namespace/claim` keys of the claims they use.
pub const POD_PVC_INDEX: &str = "pvcKey";

pub(crate) fn annotation<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

pub(crate) fn has_annotation(meta: &ObjectMeta, key: &str) -> bool {
    annotation(meta, key).is_some()
}

pub(crate) fn has_finalizer(meta: &ObjectMeta, finalizer: &str) -> bool {
    meta.finalizers.iter().flatten().any(|f| f == finalizer)
}

/// `namespace/name` of an object.
pub(crate) fn key_of(meta: &ObjectMeta) -> String {
    format!(
        "{}/{}",
        meta.namespace.as_deref().unwrap_or(""),
        meta.name.as_deref().unwrap_or("")
    )
}

/// Upstream `GetPersistentVolumeClaimClass`: the beta annotation, else `spec.storageClassName`,
/// else "" (no class).
pub fn claim_class(claim: &PersistentVolumeClaim) -> String {
    if let Some(class) = annotation(&claim.metadata, ANN_BETA_STORAGE_CLASS) {
        return class.to_string();
    }
    claim
        .spec
        .as_ref()
        .and_then(|s| s.storage_class_name.clone())
        .unwrap_or_default()
}

/// Upstream `PersistentVolumeClaimHasClass`: a class was asked for, even the empty one.
pub fn claim_has_class(claim: &PersistentVolumeClaim) -> bool {
    has_annotation(&claim.metadata, ANN_BETA_STORAGE_CLASS)
        || claim
            .spec
            .as_ref()
            .is_some_and(|s| s.storage_class_name.is_some())
}

/// Upstream `GetPersistentVolumeClass`.
pub fn volume_class(volume: &PersistentVolume) -> String {
    if let Some(class) = annotation(&volume.metadata, ANN_BETA_STORAGE_CLASS) {
        return class.to_string();
    }
    volume
        .spec
        .as_ref()
        .and_then(|s| s.storage_class_name.clone())
        .unwrap_or_default()
}

/// Upstream `IsDefaultAnnotation`.
fn is_default_class(class: &StorageClass) -> bool {
    [
        "storageclass.kubernetes.io/is-default-class",
        "storageclass.beta.kubernetes.io/is-default-class",
    ]
    .iter()
    .any(|k| annotation(&class.metadata, k) == Some("true"))
}

/// Upstream `GetDefaultClass`: of the classes marked default, the newest, then the first by name.
pub fn default_class(classes: &[Arc<StorageClass>]) -> Option<Arc<StorageClass>> {
    let mut defaults: Vec<&Arc<StorageClass>> =
        classes.iter().filter(|c| is_default_class(c)).collect();
    defaults.sort_by(|a, b| {
        let created = |c: &StorageClass| c.metadata.creation_timestamp.as_ref().map(|t| t.0);
        created(b)
            .cmp(&created(a))
            .then_with(|| a.metadata.name.cmp(&b.metadata.name))
    });
    defaults.first().map(|c| (*c).clone())
}

pub use apimachinery::volumes::pod_claims;

/// The in-tree provisioners this controller manager runs (upstream's volume plugin list given to
/// the PV controller): local-path when it has a directory.
pub fn in_tree_provisioners(
    options: &crate::ControllerOptions,
) -> persistentvolume::provisioner::Provisioners {
    let mut provisioners = persistentvolume::provisioner::Provisioners::new();
    if let Some(dir) = &options.local_path_dir {
        provisioners.register(
            localpath::PROVISIONER_NAME,
            Arc::new(localpath::LocalPath::new(dir)),
        );
    }
    provisioners
}

/// Upstream `IsPodTerminated`: Failed or Succeeded, or deleted with no container running.
pub fn is_pod_terminated(pod: &Pod) -> bool {
    let status = pod.status.as_ref();
    let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or("");
    if phase == "Failed" || phase == "Succeeded" {
        return true;
    }
    if pod.metadata.deletion_timestamp.is_none() {
        return false;
    }
    let statuses = status.and_then(|s| s.container_statuses.as_ref());
    statuses.into_iter().flatten().all(|c| {
        c.state
            .as_ref()
            .is_some_and(|s| s.terminated.is_some() || s.waiting.is_some())
    })
}

/// Adds [`POD_PVC_INDEX`] to the shared pod informer (once, whoever asks first).
pub fn index_pods_by_claim(informer: &Arc<SharedInformer<Pod>>) {
    let _ = informer.add_indexer(
        POD_PVC_INDEX,
        Arc::new(|p: &Pod| {
            let ns = p.metadata.namespace.as_deref().unwrap_or("");
            pod_claims(p)
                .into_iter()
                .map(|(claim, _)| format!("{ns}/{claim}"))
                .collect()
        }),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn classes_and_defaults() {
        let claim: PersistentVolumeClaim = serde_json::from_value(json!({
            "metadata": {"name": "c"}, "spec": {"storageClassName": "fast"}}))
        .unwrap();
        assert_eq!(claim_class(&claim), "fast");
        assert!(claim_has_class(&claim));
        let beta: PersistentVolumeClaim = serde_json::from_value(json!({
            "metadata": {"name": "c", "annotations": {ANN_BETA_STORAGE_CLASS: "old"}},
            "spec": {"storageClassName": "fast"}}))
        .unwrap();
        assert_eq!(claim_class(&beta), "old");
        let none: PersistentVolumeClaim =
            serde_json::from_value(json!({"metadata": {"name": "c"}, "spec": {}})).unwrap();
        assert_eq!(claim_class(&none), "");
        assert!(!claim_has_class(&none));

        let class = |name: &str, created: &str, default: bool| -> Arc<StorageClass> {
            let ann = if default {
                json!({"storageclass.kubernetes.io/is-default-class": "true"})
            } else {
                json!({})
            };
            Arc::new(
                serde_json::from_value(json!({"metadata": {"name": name,
                    "creationTimestamp": created, "annotations": ann}, "provisioner": "x"}))
                .unwrap(),
            )
        };
        let classes = vec![
            class("a", "2024-01-01T00:00:00Z", true),
            class("b", "2024-02-01T00:00:00Z", true),
            class("c", "2024-03-01T00:00:00Z", false),
        ];
        assert_eq!(
            default_class(&classes).unwrap().metadata.name.as_deref(),
            Some("b")
        );
        assert!(default_class(&classes[2..]).is_none());
    }

    #[test]
    fn claims_of_pods_and_termination() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "ns"},
            "spec": {"containers": [], "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
                {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
                {"name": "tmp", "emptyDir": {}}]},
            "status": {"phase": "Running"}}))
        .unwrap();
        assert_eq!(
            pod_claims(&pod),
            vec![
                ("data".to_string(), false),
                ("web-scratch".to_string(), true)
            ]
        );
        assert!(!is_pod_terminated(&pod));
        let mut done = pod.clone();
        done.status.as_mut().unwrap().phase = Some("Succeeded".into());
        assert!(is_pod_terminated(&done));
        let mut deleted: Pod = serde_json::from_value(json!({
            "metadata": {"name": "web", "deletionTimestamp": "2024-01-01T00:00:00Z"},
            "status": {"phase": "Running", "containerStatuses": [{"name": "c", "image": "i",
                "imageID": "", "ready": false, "restartCount": 0,
                "state": {"running": {}}}]}}))
        .unwrap();
        assert!(!is_pod_terminated(&deleted));
        deleted.status.as_mut().unwrap().container_statuses = None;
        assert!(is_pod_terminated(&deleted));
    }
}
