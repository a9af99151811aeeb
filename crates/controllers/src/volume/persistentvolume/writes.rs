//! The PV controller's writes (upstream `pv_controller.go`'s `updateClaimStatus`,
//! `updateVolumePhase`, `updateVolumePhaseWithEvent` and the full-object updates of its bind and
//! unbind steps): each one's answer goes into the controller's own cache at once (upstream
//! `storeObjectUpdate`), so the next sync never acts on an informer copy older than the write.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::PostParams;
use kube::Api;

use super::binder::{self, Event};
use super::Ctx;
use crate::volume::key_of;

pub(super) fn api_error(what: &str, e: kube::Error) -> String {
    format!("{what}: {}", crate::api_error_message(&e))
}

impl Ctx {
    pub(super) fn claims_api(&self, claim: &PersistentVolumeClaim) -> Api<PersistentVolumeClaim> {
        Api::namespaced(
            self.client.clone(),
            claim.metadata.namespace.as_deref().unwrap_or(""),
        )
    }

    pub(super) fn volumes_api(&self) -> Api<PersistentVolume> {
        Api::all(self.client.clone())
    }

    pub(super) async fn put_claim(
        &self,
        claim: &PersistentVolumeClaim,
    ) -> Result<Arc<PersistentVolumeClaim>, String> {
        let name = claim.metadata.name.clone().unwrap_or_default();
        let new = self
            .claims_api(claim)
            .replace(&name, &PostParams::default(), claim)
            .await
            .map_err(|e| api_error(&format!("updating claim {}", key_of(&claim.metadata)), e))?;
        let new = Arc::new(new);
        self.store_claim(new.clone());
        Ok(new)
    }

    pub(super) async fn put_claim_status(
        &self,
        claim: &PersistentVolumeClaim,
    ) -> Result<Arc<PersistentVolumeClaim>, String> {
        let name = claim.metadata.name.clone().unwrap_or_default();
        let new = self
            .claims_api(claim)
            .replace_status(&name, &PostParams::default(), claim)
            .await
            .map_err(|e| {
                api_error(
                    &format!("updating status of claim {}", key_of(&claim.metadata)),
                    e,
                )
            })?;
        let new = Arc::new(new);
        self.store_claim(new.clone());
        Ok(new)
    }

    pub(super) async fn put_volume(
        &self,
        volume: &PersistentVolume,
    ) -> Result<Arc<PersistentVolume>, String> {
        let name = volume.metadata.name.clone().unwrap_or_default();
        let new = self
            .volumes_api()
            .replace(&name, &PostParams::default(), volume)
            .await
            .map_err(|e| api_error(&format!("updating volume {name}"), e))?;
        let new = Arc::new(new);
        self.store_volume(new.clone());
        Ok(new)
    }

    pub(super) async fn put_volume_status(
        &self,
        volume: &PersistentVolume,
    ) -> Result<Arc<PersistentVolume>, String> {
        let name = volume.metadata.name.clone().unwrap_or_default();
        let new = self
            .volumes_api()
            .replace_status(&name, &PostParams::default(), volume)
            .await
            .map_err(|e| api_error(&format!("updating status of volume {name}"), e))?;
        let new = Arc::new(new);
        self.store_volume(new.clone());
        Ok(new)
    }

    /// Upstream `updateClaimStatus`.
    pub(super) async fn update_claim_status(
        &self,
        claim: &Arc<PersistentVolumeClaim>,
        phase: &str,
        volume: Option<&PersistentVolume>,
    ) -> Result<Arc<PersistentVolumeClaim>, String> {
        match binder::claim_with_status(claim, phase, volume)? {
            Some(new) => self.put_claim_status(&new).await,
            None => Ok(claim.clone()),
        }
    }

    /// Upstream `updateVolumePhase`.
    pub(super) async fn update_volume_phase(
        &self,
        volume: &Arc<PersistentVolume>,
        phase: &str,
        message: &str,
    ) -> Result<Arc<PersistentVolume>, String> {
        match binder::with_volume_phase(volume, phase, message) {
            Some(new) => self.put_volume_status(&new).await,
            None => Ok(volume.clone()),
        }
    }

    /// Upstream `updateVolumePhaseWithEvent`: the event only when the phase changes.
    pub(super) async fn update_volume_phase_with_event(
        &self,
        volume: &Arc<PersistentVolume>,
        phase: &str,
        event: &Event,
    ) -> Result<Arc<PersistentVolume>, String> {
        if binder::volume_phase(volume) == phase {
            return Ok(volume.clone());
        }
        let new = self
            .update_volume_phase(volume, phase, &event.message)
            .await?;
        self.volume_event(&new, event);
        Ok(new)
    }
}
