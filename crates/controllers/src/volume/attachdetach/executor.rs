//! The writes: the CSI attacher's `Attach` and `Detach` as the attach/detach controller runs them
//! (upstream `pkg/volume/csi/csi_attacher.go`, called from the operation generator's
//! `GenerateAttachVolumeFunc` / `GenerateDetachVolumeFunc`), and the node status updater
//! (`attachdetach/statusupdater`).
//!
//! Attach creates the VolumeAttachment `csi-<sha256(handle+driver+node)>` (`spec.attacher` the
//! driver, `spec.source.persistentVolumeName` the volume) unless the cache has it, then waits up
//! to 2 minutes (upstream `csiTimeout`) for `status.attached`, failing on `status.attachError` or
//! a deletion timestamp. Detach deletes it and waits until it is gone, failing on
//! `status.detachError`. Waiting reads the informer's cache, woken by its events as well as on
//! upstream's polling backoff (500 ms growing 5% a step up to 7 s).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::json;

use super::actual::ReportedVolume;
use super::volumes::{split_unique_name, VolumeSpec, CSI_PLUGIN_NAME};
use super::Ctx;

/// Upstream `csiTimeout`: how long attach and detach wait for the external attacher.
pub const CSI_TIMEOUT: Duration = Duration::from_secs(120);
const POLL_INITIAL: Duration = Duration::from_millis(500);
const POLL_MAX: Duration = Duration::from_secs(7);

/// Where a VolumeAttachment stands for the operation waiting on it.
#[derive(Debug, PartialEq, Eq)]
pub enum Progress {
    Done,
    Waiting,
    Failed(String),
}

/// Upstream `verifyAttachmentStatus` (a missing object has not reached the cache yet).
pub fn attach_progress(va: Option<&VolumeAttachment>) -> Progress {
    let Some(va) = va else {
        return Progress::Waiting;
    };
    if va.metadata.deletion_timestamp.is_some() {
        return Progress::Failed("volume attachment is being deleted".to_string());
    }
    let status = va.status.as_ref();
    if status.is_some_and(|s| s.attached) {
        return Progress::Done;
    }
    match status.and_then(|s| s.attach_error.as_ref()) {
        Some(e) => Progress::Failed(e.message.clone().unwrap_or_default()),
        None => Progress::Waiting,
    }
}

/// Upstream `verifyDetachmentStatus`: done once the object is gone.
pub fn detach_progress(va: Option<&VolumeAttachment>) -> Progress {
    let Some(va) = va else {
        return Progress::Done;
    };
    match va.status.as_ref().and_then(|s| s.detach_error.as_ref()) {
        Some(e) => Progress::Failed(e.message.clone().unwrap_or_default()),
        None => Progress::Waiting,
    }
}

/// The VolumeAttachment upstream's CSI attacher creates.
pub fn volume_attachment(spec: &VolumeSpec, node: &str) -> VolumeAttachment {
    serde_json::from_value(json!({
        "apiVersion": "storage.k8s.io/v1",
        "kind": "VolumeAttachment",
        "metadata": {"name": spec.attachment_name(node)},
        "spec": {"attacher": spec.driver, "nodeName": node,
                 "source": {"persistentVolumeName": spec.name}},
    }))
    .expect("a VolumeAttachment")
}

/// The status patch that sets a node's `volumesAttached` (the list is replaced as a whole, as
/// upstream's strategic merge patch of a list without a merge key does).
pub fn volumes_attached_patch(volumes: &[ReportedVolume]) -> serde_json::Value {
    if volumes.is_empty() {
        return json!({"status": {"volumesAttached": null}});
    }
    let list: Vec<_> = volumes
        .iter()
        .map(|v| json!({"name": v.name, "devicePath": v.device_path}))
        .collect();
    json!({"status": {"volumesAttached": list}})
}

/// The next poll interval of upstream's `ExponentialBackoffManager` (without its jitter).
fn next_poll(current: Duration) -> Duration {
    current.mul_f64(1.05).min(POLL_MAX)
}

/// Waits until `progress` of the cached VolumeAttachment `name` is done or failed, or `timeout`.
async fn wait_for(
    ctx: &Ctx,
    name: &str,
    timeout: Duration,
    progress: fn(Option<&VolumeAttachment>) -> Progress,
) -> Result<(), Option<String>> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut poll = POLL_INITIAL;
    loop {
        // Registered before the check, so an event between the check and the wait is not lost.
        let changed = ctx.attachments_changed.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        match progress(ctx.attachments.get(name).as_deref()) {
            Progress::Done => return Ok(()),
            Progress::Failed(message) => return Err(Some(message)),
            Progress::Waiting => {}
        }
        let now = tokio::time::Instant::now();
        if now >= deadline {
            return Err(None);
        }
        let sleep = poll.min(deadline - now);
        poll = next_poll(poll);
        tokio::select! {
            _ = changed => {}
            _ = tokio::time::sleep(sleep) => {}
        }
    }
}

fn api_message(e: &kube::Error) -> String {
    crate::api_error_message(e)
}

fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

/// Upstream CSI `Attach`: returns the device path (always "" for CSI).
pub async fn attach(ctx: &Ctx, spec: &VolumeSpec, node: &str) -> Result<String, String> {
    let name = spec.attachment_name(node);
    if ctx.attachments.get(&name).is_none() {
        let api: Api<VolumeAttachment> = Api::all(ctx.client.clone());
        match api
            .create(&PostParams::default(), &volume_attachment(spec, node))
            .await
        {
            Ok(_) => tracing::debug!(attachment = %name, "created the VolumeAttachment"),
            Err(e) if is_status(&e, 409) => {
                tracing::debug!(attachment = %name, "the VolumeAttachment already exists")
            }
            Err(e) => {
                return Err(format!(
                    "{CSI_PLUGIN_NAME}: attacher.Attach failed: {}",
                    api_message(&e)
                ))
            }
        }
    }
    match wait_for(ctx, &name, ctx.options.attach_timeout, attach_progress).await {
        Ok(()) => Ok(String::new()),
        Err(Some(message)) => Err(message),
        Err(None) => Err(format!(
            "timed out waiting for external-attacher of {} CSI driver to attach volume {}",
            spec.driver, spec.handle
        )),
    }
}

/// Upstream `verifyVolumeIsSafeToDetach`: the live Node must not list the volume in use (a
/// deleted Node is safe).
pub async fn verify_safe_to_detach(ctx: &Ctx, volume: &str, node: &str) -> Result<(), String> {
    let api: Api<Node> = Api::all(ctx.client.clone());
    match api.get(node).await {
        Ok(n) => {
            if super::volumes::volumes_in_use(&n).iter().any(|v| v == volume) {
                return Err(format!(
                    "DetachVolume failed for volume (UniqueName: {volume:?}) on node {node:?} : volume is still in use by node, according to Node status"
                ));
            }
            Ok(())
        }
        Err(e) if is_status(&e, 404) => {
            tracing::warn!(%volume, %node, "Node not found on API server. DetachVolume will skip safe to detach check");
            Ok(())
        }
        Err(e) => Err(format!(
            "DetachVolume failed fetching node from API server for volume (UniqueName: {volume:?}) on node {node:?} : {}",
            api_message(&e)
        )),
    }
}

/// Upstream CSI `Detach` (after the optional safe-to-detach check).
pub async fn detach(
    ctx: &Ctx,
    volume: &str,
    spec: Option<&VolumeSpec>,
    node: &str,
    verify_safe: bool,
) -> Result<(), String> {
    if verify_safe {
        verify_safe_to_detach(ctx, volume, node).await?;
    }
    let (driver, handle) = match spec {
        Some(s) => (s.driver.clone(), s.handle.clone()),
        None => split_unique_name(volume)?,
    };
    let name = super::volumes::attachment_name(&handle, &driver, node);
    let api: Api<VolumeAttachment> = Api::all(ctx.client.clone());
    match api.delete(&name, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(e) if is_status(&e, 404) => return Ok(()),
        Err(e) => {
            return Err(format!(
                "{CSI_PLUGIN_NAME}: detacher.Detach failed to delete VolumeAttachment [{name}]: {}",
                api_message(&e)
            ))
        }
    }
    match wait_for(ctx, &name, ctx.options.attach_timeout, detach_progress).await {
        Ok(()) => Ok(()),
        Err(Some(message)) => Err(message),
        // Upstream passes no spec here, so the driver is "unknown" in its message.
        Err(None) => Err(format!(
            "timed out waiting for external-attacher of unknown CSI driver to detach volume {handle}"
        )),
    }
}

/// Upstream `processNodeVolumes`: writes the node's `volumesAttached`. A node missing from the
/// cache or the server is skipped without retry (its re-creation asks for the write again).
pub async fn write_node_volumes(
    ctx: &Ctx,
    node: &str,
    volumes: &[ReportedVolume],
) -> Result<(), String> {
    if ctx.nodes.get(node).is_none() {
        tracing::debug!(%node, "could not update node status: not in the node cache");
        return Ok(());
    }
    let api: Api<Node> = Api::all(ctx.client.clone());
    let patch = volumes_attached_patch(volumes);
    match api
        .patch_status(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => {
            tracing::debug!(%node, volumes = volumes.len(), "updated the node's volumesAttached");
            Ok(())
        }
        Err(e) if is_status(&e, 404) => Ok(()),
        Err(e) => {
            ctx.lock().actual.set_node_status_update_needed(node);
            Err(format!(
                "could not update the status of node {node:?}: {}",
                api_message(&e)
            ))
        }
    }
}

/// Upstream `UpdateNodeStatusForNode`: writes the node's `volumesAttached` if it changed.
pub async fn update_node_status(ctx: &Ctx, node: &str) -> Result<(), String> {
    let Some(volumes) = ctx.lock().actual.take_report(node) else {
        return Ok(());
    };
    write_node_volumes(ctx, node, &volumes).await
}

/// Upstream `UpdateNodeStatuses`: every node whose `volumesAttached` changed.
pub async fn update_node_statuses(ctx: &Arc<Ctx>) {
    let nodes = ctx.lock().actual.nodes_needing_status_update();
    for node in nodes {
        if let Err(e) = update_node_status(ctx, &node).await {
            tracing::info!(error = %e, "UpdateNodeStatuses failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn va(value: serde_json::Value) -> VolumeAttachment {
        let mut base = json!({"metadata": {"name": "csi-x"},
            "spec": {"attacher": "d", "nodeName": "n1", "source": {}}});
        if let (Some(b), Some(v)) = (base.as_object_mut(), value.as_object()) {
            b.extend(v.clone());
        }
        serde_json::from_value(base).unwrap()
    }

    #[test]
    fn attachment_progress() {
        assert_eq!(attach_progress(None), Progress::Waiting);
        assert_eq!(attach_progress(Some(&va(json!({})))), Progress::Waiting);
        assert_eq!(
            attach_progress(Some(&va(json!({"status": {"attached": true}})))),
            Progress::Done
        );
        assert_eq!(
            attach_progress(Some(&va(json!({"status": {"attached": false,
                "attachError": {"message": "rpc error: busy"}}})))),
            Progress::Failed("rpc error: busy".into())
        );
        let mut deleting = va(json!({"status": {"attached": true}}));
        deleting.metadata.deletion_timestamp =
            Some(serde_json::from_value(json!("2024-01-01T00:00:00Z")).unwrap());
        assert_eq!(
            attach_progress(Some(&deleting)),
            Progress::Failed("volume attachment is being deleted".into())
        );

        assert_eq!(detach_progress(None), Progress::Done);
        assert_eq!(
            detach_progress(Some(&va(json!({"status": {"attached": true}})))),
            Progress::Waiting
        );
        assert_eq!(
            detach_progress(Some(&va(json!({"status": {"attached": true,
                "detachError": {"message": "still published"}}})))),
            Progress::Failed("still published".into())
        );
    }

    #[test]
    fn objects_written() {
        let spec = VolumeSpec {
            name: "pv1".into(),
            driver: "csi.example.com".into(),
            handle: "h1".into(),
            multi_attach_allowed: false,
        };
        let object = serde_json::to_value(volume_attachment(&spec, "n1")).unwrap();
        assert_eq!(
            object,
            json!({"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
                "metadata": {"name": "csi-8157d03abc5a2bde671ba3121addefb9168531d96b38761bc92ae350c651387b"},
                "spec": {"attacher": "csi.example.com", "nodeName": "n1",
                         "source": {"persistentVolumeName": "pv1"}}})
        );
        let reported = vec![ReportedVolume {
            name: "kubernetes.io/csi/csi.example.com^h1".into(),
            device_path: String::new(),
        }];
        assert_eq!(
            volumes_attached_patch(&reported),
            json!({"status": {"volumesAttached": [
                {"name": "kubernetes.io/csi/csi.example.com^h1", "devicePath": ""}]}})
        );
        assert_eq!(
            volumes_attached_patch(&[]),
            json!({"status": {"volumesAttached": null}})
        );
    }

    #[test]
    fn polling_backs_off_to_seven_seconds() {
        let mut poll = POLL_INITIAL;
        let mut total = Duration::ZERO;
        for _ in 0..200 {
            total += poll;
            poll = next_poll(poll);
        }
        assert_eq!(poll, POLL_MAX);
        assert!(next_poll(POLL_INITIAL) > POLL_INITIAL);
        assert!(total > CSI_TIMEOUT);
    }
}
