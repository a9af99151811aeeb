//! In-tree provisioners (upstream's `ProvisionableVolumePlugin` / `DeletableVolumePlugin` of
//! `pkg/volume`, as the PV controller uses them): a [`Provisioner`] is registered under the
//! provisioner name a StorageClass names (e.g. `rkube.io/local-path`); the controller provisions
//! claims of such classes through it and deletes the storage of its released volumes with the
//! Delete policy. Classes of any other provisioner are left to an external provisioner (the claim
//! gets the `volume.kubernetes.io/storage-provisioner` annotation), as upstream does for names
//! outside `kubernetes.io/`.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;

/// What a provisioner is asked to create (upstream `VolumeOptions` plus the selected node).
pub struct ProvisionRequest<'a> {
    /// The name the volume should get (`pvc-<claim uid>`).
    pub pv_name: &'a str,
    pub claim: &'a PersistentVolumeClaim,
    pub class: &'a StorageClass,
    /// The class's reclaim policy (Delete when unset).
    pub reclaim_policy: &'a str,
    /// The node the scheduler chose for a `WaitForFirstConsumer` claim.
    pub selected_node: Option<&'a Node>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProvisionError {
    #[error("{0}")]
    Failed(String),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeleteError {
    /// The storage is still in use; the controller tries again later without failing the volume
    /// (upstream `DeletedVolumeInUseError`).
    #[error("{0}")]
    InUse(String),
    #[error("{0}")]
    Failed(String),
}

/// An in-tree provisioner.
pub trait Provisioner: Send + Sync {
    /// Whether the class's `mountOptions` can be honoured (a class with some is refused if not).
    fn supports_mount_options(&self) -> bool {
        false
    }

    /// Creates the storage and returns its PersistentVolume (capacity, access modes, source, node
    /// affinity, reclaim policy); the controller adds the name, claimRef, class and annotations.
    fn provision<'a>(
        &'a self,
        request: ProvisionRequest<'a>,
    ) -> BoxFuture<'a, Result<PersistentVolume, ProvisionError>>;

    /// Whether its volumes grow in the controller alone (upstream's in-tree `ExpandableVolumePlugin`
    /// without node expansion); the expander then finishes a claim's resize itself.
    fn can_expand(&self) -> bool {
        false
    }

    /// Deletes the storage of a released volume it provisioned.
    fn delete<'a>(&'a self, volume: &'a PersistentVolume)
        -> BoxFuture<'a, Result<(), DeleteError>>;
}

/// The in-tree provisioners by provisioner name.
#[derive(Clone, Default)]
pub struct Provisioners {
    by_name: BTreeMap<String, Arc<dyn Provisioner>>,
}

impl Provisioners {
    pub fn new() -> Provisioners {
        Provisioners::default()
    }

    pub fn register(&mut self, name: impl Into<String>, provisioner: Arc<dyn Provisioner>) {
        self.by_name.insert(name.into(), provisioner);
    }

    pub fn get(&self, name: &str) -> Option<Arc<dyn Provisioner>> {
        self.by_name.get(name).cloned()
    }

    pub fn contains(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
    }
}

impl std::fmt::Debug for Provisioners {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.by_name.keys()).finish()
    }
}
