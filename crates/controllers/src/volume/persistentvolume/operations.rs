//! The PV controller's long operations (upstream `pv_controller.go`: `provisionClaimOperation`,
//! `provisionClaimOperationExternal`, `deleteVolumeOperation`, `recycleVolumeOperation`, and
//! `pkg/util/goroutinemap` with exponential backoff): each runs as a task of its own, at most one
//! per name at a time, and after a failure the same name waits 500 ms, doubling up to 2 min 2 s,
//! before it may run again. The tasks live as long as the controller's `run` future.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{DeleteParams, PostParams};
use tokio::sync::mpsc;

use super::binder::{self, Event};
use super::provisioner::{DeleteError, ProvisionRequest};
use super::writes::api_error;
use super::{is_not_found, Ctx};
use crate::volume::{
    annotation, key_of, ANN_BETA_STORAGE_PROVISIONER, ANN_SELECTED_NODE, ANN_STORAGE_PROVISIONER,
    PV_DELETION_IN_TREE_FINALIZER,
};

const INITIAL_BACKOFF: Duration = Duration::from_millis(500);
const MAX_BACKOFF: Duration = Duration::from_millis(122_000);
/// Upstream `createProvisionedPVRetryCount` and `createProvisionedPVInterval`.
const CREATE_RETRIES: usize = 5;
const CREATE_INTERVAL: Duration = Duration::from_secs(10);

type Operation = BoxFuture<'static, Result<(), String>>;

#[derive(Default)]
struct OpState {
    running: bool,
    backoff: Duration,
    not_before: Option<Instant>,
}

/// Running operations by name (upstream `GoRoutineMap` with backoff on error).
pub(crate) struct Operations {
    states: Arc<Mutex<HashMap<String, OpState>>>,
    tx: mpsc::UnboundedSender<BoxFuture<'static, ()>>,
}

impl Operations {
    /// The registry and the future that runs its tasks (dropping it aborts them).
    pub(crate) fn new() -> (Operations, BoxFuture<'static, ()>) {
        let (tx, mut rx) = mpsc::unbounded_channel::<BoxFuture<'static, ()>>();
        let runner: BoxFuture<'static, ()> = Box::pin(async move {
            let mut tasks = tokio::task::JoinSet::new();
            loop {
                tokio::select! {
                    next = rx.recv() => match next {
                        Some(task) => { tasks.spawn(task); }
                        None => break,
                    },
                    Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
                }
            }
            while tasks.join_next().await.is_some() {}
        });
        let ops = Operations {
            states: Arc::new(Mutex::new(HashMap::new())),
            tx,
        };
        (ops, runner)
    }

    /// Starts `op` under `name` unless one is running or backing off.
    pub(crate) fn schedule(&self, name: String, op: Operation) {
        {
            let mut states = self.states.lock().unwrap_or_else(|e| e.into_inner());
            let state = states.entry(name.clone()).or_default();
            if state.running {
                tracing::trace!(operation = %name, "operation is already running");
                return;
            }
            if state.not_before.is_some_and(|t| Instant::now() < t) {
                tracing::trace!(operation = %name, "operation postponed by backoff");
                return;
            }
            state.running = true;
        }
        let states = self.states.clone();
        let task = Box::pin(async move {
            let result = op.await;
            let mut states = states.lock().unwrap_or_else(|e| e.into_inner());
            match result {
                Ok(()) => {
                    states.remove(&name);
                }
                Err(error) => {
                    tracing::info!(operation = %name, %error, "volume operation failed");
                    let state = states.entry(name).or_default();
                    state.running = false;
                    state.backoff = if state.backoff.is_zero() {
                        INITIAL_BACKOFF
                    } else {
                        (state.backoff * 2).min(MAX_BACKOFF)
                    };
                    state.not_before = Some(Instant::now() + state.backoff);
                }
            }
        });
        let _ = self.tx.send(task);
    }
}

impl Ctx {
    /// Upstream `setClaimProvisioner`: both provisioner annotations on the claim.
    async fn set_claim_provisioner(
        &self,
        claim: &Arc<PersistentVolumeClaim>,
        provisioner: &str,
    ) -> Result<Arc<PersistentVolumeClaim>, String> {
        if annotation(&claim.metadata, ANN_STORAGE_PROVISIONER) == Some(provisioner) {
            return Ok(claim.clone());
        }
        let mut new = (**claim).clone();
        let ann = new
            .metadata
            .annotations
            .get_or_insert_with(Default::default);
        ann.insert(ANN_BETA_STORAGE_PROVISIONER.into(), provisioner.into());
        ann.insert(ANN_STORAGE_PROVISIONER.into(), provisioner.into());
        self.put_claim(&new).await
    }

    /// Upstream `provisionClaimOperationExternal`.
    pub(super) async fn provision_external(
        &self,
        claim: &Arc<PersistentVolumeClaim>,
        class: &StorageClass,
    ) -> Result<(), String> {
        let provisioner = class.provisioner.as_str();
        let claim = match self.set_claim_provisioner(claim, provisioner).await {
            Ok(c) => c,
            Err(e) => {
                self.claim_event(
                    claim,
                    &Event::warning("ProvisioningFailed", format!("Error saving claim: {e}")),
                );
                return Err(e);
            }
        };
        self.claim_event(
            &claim,
            &Event::normal(
                "ExternalProvisioning",
                binder::external_provisioning_message(provisioner),
            ),
        );
        Ok(())
    }

    /// Upstream `rescheduleProvisioning`: drop the scheduler's node choice so it picks again.
    async fn reschedule_provisioning(&self, claim: &Arc<PersistentVolumeClaim>) {
        if annotation(&claim.metadata, ANN_SELECTED_NODE).is_none() {
            return;
        }
        let mut new = (**claim).clone();
        if let Some(ann) = new.metadata.annotations.as_mut() {
            ann.remove(ANN_SELECTED_NODE);
        }
        if let Err(e) = self.put_claim(&new).await {
            tracing::debug!(claim = %key_of(&claim.metadata), error = %e, "could not reset the selected node");
        }
    }

    /// Upstream `provisionClaimOperation`, for a registered in-tree provisioner.
    pub(super) async fn provision_in_tree(
        &self,
        claim: &Arc<PersistentVolumeClaim>,
        class: &StorageClass,
    ) -> Result<(), String> {
        let name = class.provisioner.as_str();
        let Some(provisioner) = self.provisioners.get(name) else {
            return Err(format!("provisioner {name} is not registered"));
        };
        let failed = |message: String| Event::warning("ProvisioningFailed", message);
        if claim.spec.as_ref().is_some_and(|s| s.data_source.is_some()) {
            let msg = format!("plugin {name:?} is not a CSI plugin. Only CSI plugin can provision a claim with a datasource");
            self.claim_event(claim, &failed(msg.clone()));
            return Err(msg);
        }
        let claim = self.set_claim_provisioner(claim, name).await?;
        let pv_name = binder::provisioned_volume_name(&claim);
        match self.volumes_api().get(&pv_name).await {
            Ok(_) => return Ok(()), // provisioned by an earlier run
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(api_error(&format!("reading volume {pv_name}"), e)),
        }
        let class_name = class.metadata.name.as_deref().unwrap_or("");
        let mount_options = class.mount_options.clone().unwrap_or_default();
        if !provisioner.supports_mount_options() && !mount_options.is_empty() {
            let msg = format!(
                "Mount options are not supported by the provisioner but StorageClass {class_name:?} has mount options [{}]",
                mount_options.join(" ")
            );
            self.claim_event(&claim, &failed(msg));
            return Err(format!(
                "provisioner {name:?} doesn't support mount options"
            ));
        }
        let selected = match annotation(&claim.metadata, ANN_SELECTED_NODE) {
            Some(node) => match self.nodes.get(node) {
                Some(n) => Some(n),
                None => {
                    let msg = format!("Failed to get target node: node {node:?} not found");
                    self.claim_event(&claim, &failed(msg.clone()));
                    return Err(msg);
                }
            },
            None => None,
        };
        let policy = class
            .reclaim_policy
            .clone()
            .unwrap_or_else(|| "Delete".into());
        let request = ProvisionRequest {
            pv_name: &pv_name,
            claim: &claim,
            class,
            reclaim_policy: &policy,
            selected_node: selected.as_deref(),
        };
        let volume = match provisioner.provision(request).await {
            Ok(v) => v,
            Err(e) => {
                self.reschedule_provisioning(&claim).await;
                let msg =
                    format!("Failed to provision volume with StorageClass {class_name:?}: {e}");
                self.claim_event(&claim, &failed(msg.clone()));
                return Err(msg);
            }
        };
        let volume = binder::provisioned_volume(volume, &claim, &pv_name, name);
        let vol_name = volume.metadata.name.clone().unwrap_or_default();
        let mut last_error = None;
        for attempt in 0..CREATE_RETRIES {
            match self
                .volumes_api()
                .create(&PostParams::default(), &volume)
                .await
            {
                Ok(v) => {
                    self.store_volume(Arc::new(v));
                    last_error = None;
                    break;
                }
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    last_error = None;
                    break;
                }
                Err(e) => last_error = Some(crate::api_error_message(&e)),
            }
            if attempt + 1 < CREATE_RETRIES {
                tokio::time::sleep(CREATE_INTERVAL).await;
            }
        }
        let claim_key = key_of(&claim.metadata);
        let Some(error) = last_error else {
            self.sync_provisioned(claim_key.clone());
            self.claim_event(
                &claim,
                &Event::normal(
                    "ProvisioningSucceeded",
                    format!("Successfully provisioned volume {vol_name} using {name}"),
                ),
            );
            return Ok(());
        };
        // The storage exists but its PV object does not: delete the storage.
        self.claim_event(&claim, &failed(format!(
            "Error creating provisioned PV object for claim {claim_key}: {error}. Deleting the volume."
        )));
        let mut delete_error = None;
        for attempt in 0..CREATE_RETRIES {
            match provisioner.delete(&volume).await {
                Ok(()) => {
                    delete_error = None;
                    break;
                }
                Err(e) => delete_error = Some(e.to_string()),
            }
            if attempt + 1 < CREATE_RETRIES {
                tokio::time::sleep(CREATE_INTERVAL).await;
            }
        }
        if let Some(e) = delete_error {
            self.claim_event(&claim, &Event::warning("ProvisioningCleanupFailed", format!(
                "Error cleaning provisioned volume for claim {claim_key}: {e}. Please delete manually."
            )));
        }
        Ok(())
    }

    /// Upstream `deleteVolumeOperation`.
    pub(super) async fn delete_operation(&self, volume: &PersistentVolume) -> Result<(), String> {
        let name = volume.metadata.name.clone().unwrap_or_default();
        let fresh = match self.volumes_api().get(&name).await {
            Ok(v) => Arc::new(v),
            Err(_) => return Ok(()),
        };
        if !self.released(&fresh) {
            return Ok(());
        }
        match binder::find_deleter(&fresh, self.registered()) {
            binder::Deleter::External => Ok(()),
            binder::Deleter::Missing(message) => {
                let event = Event::warning("VolumeFailedDelete", message.clone());
                self.update_volume_phase_with_event(&fresh, "Failed", &event)
                    .await?;
                Err(message)
            }
            binder::Deleter::InTree(provisioner) => {
                let Some(p) = self.provisioners.get(&provisioner) else {
                    return Err(format!("provisioner {provisioner} is not registered"));
                };
                match p.delete(&fresh).await {
                    Err(DeleteError::InUse(m)) => {
                        self.volume_event(&fresh, &Event::normal("VolumeDelete", m.clone()));
                        return Err(m);
                    }
                    Err(DeleteError::Failed(m)) => {
                        let event = Event::warning("VolumeFailedDelete", m.clone());
                        self.update_volume_phase_with_event(&fresh, "Failed", &event)
                            .await?;
                        return Err(m);
                    }
                    Ok(()) => {}
                }
                tracing::info!(volume = %name, "volume deleted");
                self.remove_in_tree_finalizer(&name).await?;
                match self
                    .volumes_api()
                    .delete(&name, &DeleteParams::default())
                    .await
                {
                    Ok(_) => Ok(()),
                    Err(e) if is_not_found(&e) => Ok(()),
                    Err(e) => Err(api_error(&format!("deleting volume {name}"), e)),
                }
            }
        }
    }

    /// Upstream `removeDeletionProtectionFinalizer`, on the newest copy of the volume.
    async fn remove_in_tree_finalizer(&self, name: &str) -> Result<(), String> {
        let current = match self.volumes_api().get(name).await {
            Ok(v) => v,
            Err(e) if is_not_found(&e) => return Ok(()),
            Err(e) => return Err(api_error(&format!("reading volume {name}"), e)),
        };
        let finalizers = current.metadata.finalizers.clone().unwrap_or_default();
        if !finalizers
            .iter()
            .any(|f| f == PV_DELETION_IN_TREE_FINALIZER)
        {
            return Ok(());
        }
        let mut new = current;
        new.metadata.finalizers = Some(
            finalizers
                .into_iter()
                .filter(|f| f != PV_DELETION_IN_TREE_FINALIZER)
                .collect(),
        );
        self.put_volume(&new).await.map(|_| ())
    }

    /// Whether the volume still needs reclaiming, judged by the controller's claims.
    fn released(&self, volume: &PersistentVolume) -> bool {
        let claim = volume
            .spec
            .as_ref()
            .and_then(|s| s.claim_ref.as_ref())
            .and_then(|r| {
                self.cached_claim(&format!(
                    "{}/{}",
                    r.namespace.as_deref().unwrap_or(""),
                    r.name.as_deref().unwrap_or("")
                ))
            });
        binder::is_volume_released(volume, claim.as_deref())
    }

    /// Upstream `recycleVolumeOperation` with no recycler plugin: the volume fails.
    pub(super) async fn recycle_operation(&self, volume: &PersistentVolume) -> Result<(), String> {
        let name = volume.metadata.name.clone().unwrap_or_default();
        let fresh = match self.volumes_api().get(&name).await {
            Ok(v) => Arc::new(v),
            Err(_) => return Ok(()),
        };
        if !self.released(&fresh) {
            return Ok(());
        }
        self.update_volume_phase_with_event(&fresh, "Failed", &binder::no_recycler_event())
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn one_run_per_name_and_backoff_after_failure() {
        let (ops, runner) = Operations::new();
        let runner = tokio::spawn(runner);
        let runs = Arc::new(AtomicUsize::new(0));
        let (release, released) = tokio::sync::oneshot::channel::<()>();
        let r = runs.clone();
        ops.schedule(
            "op".into(),
            Box::pin(async move {
                r.fetch_add(1, Ordering::SeqCst);
                let _ = released.await;
                Err("failed".to_string())
            }),
        );
        // Scheduled again while running: skipped.
        let r = runs.clone();
        ops.schedule(
            "op".into(),
            Box::pin(async move {
                r.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }),
        );
        let deadline = Instant::now() + Duration::from_secs(5);
        while runs.load(Ordering::SeqCst) == 0 {
            assert!(Instant::now() < deadline, "the operation did not start");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let _ = release.send(());
        // After the failure the name backs off (500 ms): an immediate retry is skipped.
        while ops
            .states
            .lock()
            .unwrap()
            .get("op")
            .is_some_and(|s| s.running)
        {
            assert!(Instant::now() < deadline, "the operation did not finish");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let r = runs.clone();
        ops.schedule(
            "op".into(),
            Box::pin(async move {
                r.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }),
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        // Once the backoff has passed it runs, and success forgets the name.
        tokio::time::sleep(INITIAL_BACKOFF).await;
        let r = runs.clone();
        ops.schedule(
            "op".into(),
            Box::pin(async move {
                r.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }),
        );
        while ops.states.lock().unwrap().contains_key("op") {
            assert!(Instant::now() < deadline, "the retry did not finish");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(runs.load(Ordering::SeqCst), 2);
        drop(ops);
        let _ = runner.await;
    }
}
