//! The volume expander (upstream `pkg/controller/volume/expand`,
//! `persistentvolume-expander-controller`): a bound claim whose `spec.resources.requests.storage`
//! grew past its `status.capacity` is expanded. A claim whose class's provisioner is an in-tree
//! one that grows in the controller alone (the local-path provisioner) is finished here: the
//! volume's capacity, then the claim's `status.capacity` and `allocatedResources`, with upstream's
//! `VolumeResizeSuccessful` event. Any other provisioner is left to its external resizer, as
//! upstream does for CSI drivers: the claim gets `volume.kubernetes.io/storage-resizer` and the
//! `ExternalExpanding` event.
//!
//! Differences: no in-tree plugins besides local-path; no node-side (file system) expansion step,
//! which local-path does not need; failures are retried by the queue with no
//! `ControllerResizeInfeasible` status.

use std::sync::Arc;

use client::controller::Controller;
use client::events::{ApiEventSink, EventBroadcaster, EventType, Recorder};
use client::informer::{object_key, EventHandlerFuncs, SharedInformerFactory, Store};
use client::workqueue::{default_controller_rate_limiter, QueueConfig, RateLimitingQueue};
use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{Patch, PatchParams};
use kube::Api;
use serde_json::json;

use super::persistentvolume::provisioner::Provisioners;

/// Upstream's canonical controller name.
pub const CONTROLLER_NAME: &str = "persistentvolume-expander-controller";
/// The claim annotation naming the external resizer that should expand it.
pub const ANN_STORAGE_RESIZER: &str = "volume.kubernetes.io/storage-resizer";
const COMPONENT: &str = "volume_expand";

/// What to do with a claim (pure).
#[derive(Debug, PartialEq)]
pub enum Expansion {
    /// Nothing: not bound, not grown, or not ours.
    None,
    /// Grow the volume to this size here, then the claim's status.
    InTree(Quantity),
    /// Annotate the claim for this external resizer.
    External(String),
}

fn storage(q: Option<&std::collections::BTreeMap<String, Quantity>>) -> Option<&Quantity> {
    q.and_then(|m| m.get("storage"))
}

fn parsed(q: &Quantity) -> Option<apimachinery::quantity::Quantity> {
    apimachinery::quantity::Quantity::parse(&q.0).ok()
}

/// Upstream's `expandController.syncHandler` decision.
pub fn decide(
    claim: &PersistentVolumeClaim,
    class: Option<&StorageClass>,
    in_tree_can_expand: impl Fn(&str) -> bool,
) -> Expansion {
    let (Some(spec), Some(status)) = (claim.spec.as_ref(), claim.status.as_ref()) else {
        return Expansion::None;
    };
    if status.phase.as_deref() != Some("Bound")
        || spec.volume_name.as_deref().unwrap_or("").is_empty()
    {
        return Expansion::None;
    }
    let Some(requested) = storage(spec.resources.as_ref().and_then(|r| r.requests.as_ref())) else {
        return Expansion::None;
    };
    let current = storage(status.capacity.as_ref());
    let grown = match (parsed(requested), current.and_then(parsed)) {
        (Some(r), Some(c)) => r > c,
        _ => false,
    };
    if !grown {
        return Expansion::None;
    }
    let Some(class) = class else {
        return Expansion::None;
    };
    if in_tree_can_expand(&class.provisioner) {
        return Expansion::InTree(requested.clone());
    }
    let annotated = claim
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANN_STORAGE_RESIZER))
        == Some(&class.provisioner);
    if annotated {
        Expansion::None
    } else {
        Expansion::External(class.provisioner.clone())
    }
}

struct Ctx {
    client: kube::Client,
    claims: Arc<Store<PersistentVolumeClaim>>,
    classes: Arc<Store<StorageClass>>,
    provisioners: Provisioners,
    queue: RateLimitingQueue<String>,
    recorder: Recorder,
}

pub async fn run(
    client: kube::Client,
    factory: &SharedInformerFactory,
    provisioners: Provisioners,
    workers: usize,
) {
    let claim_informer = factory.informer::<PersistentVolumeClaim>();
    let class_informer = factory.informer::<StorageClass>();
    let broadcaster = EventBroadcaster::new();
    broadcaster.start_recording_to_sink(ApiEventSink::new(client.clone()));
    let ctx = Arc::new(Ctx {
        client,
        claims: claim_informer.store(),
        classes: class_informer.store(),
        provisioners,
        queue: RateLimitingQueue::with_config(
            default_controller_rate_limiter::<String>(),
            QueueConfig::named("volume_expand"),
        ),
        recorder: broadcaster.new_recorder(COMPONENT, ""),
    });
    let (c1, c2) = (ctx.clone(), ctx.clone());
    claim_informer.add_event_handler(
        EventHandlerFuncs::new()
            .on_add(move |c: &Arc<PersistentVolumeClaim>, _| c1.queue.add(object_key(c.as_ref())))
            .on_update(move |_, c: &Arc<PersistentVolumeClaim>| {
                c2.queue.add(object_key(c.as_ref()))
            }),
    );
    factory.start();
    factory.wait_for_cache_sync().await;
    let _broadcaster = broadcaster;
    Controller::new(CONTROLLER_NAME, ctx.queue.clone())
        .run(workers, move |key: String| {
            let ctx = ctx.clone();
            async move { sync(&ctx, &key).await }
        })
        .await;
}

fn reference(claim: &PersistentVolumeClaim) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("PersistentVolumeClaim".into()),
        name: claim.metadata.name.clone(),
        namespace: claim.metadata.namespace.clone(),
        uid: claim.metadata.uid.clone(),
        resource_version: claim.metadata.resource_version.clone(),
        ..Default::default()
    }
}

async fn sync(ctx: &Ctx, key: &str) -> Result<(), String> {
    let Some(claim) = ctx.claims.get(key) else {
        return Ok(());
    };
    let class_name = super::claim_class(&claim);
    let class = (!class_name.is_empty())
        .then(|| ctx.classes.get(&class_name))
        .flatten();
    let can = |p: &str| ctx.provisioners.get(p).is_some_and(|x| x.can_expand());
    let ns = claim.metadata.namespace.clone().unwrap_or_default();
    let name = claim.metadata.name.clone().unwrap_or_default();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &ns);
    let err = |what: &str, e: kube::Error| format!("{what}: {}", crate::api_error_message(&e));
    match decide(&claim, class.as_deref(), can) {
        Expansion::None => Ok(()),
        Expansion::External(resizer) => {
            let patch = json!({"metadata": {"annotations": {ANN_STORAGE_RESIZER: resizer}}});
            claims
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(|e| err("annotating the claim for its resizer", e))?;
            ctx.recorder.event(
                &reference(&claim),
                EventType::Normal,
                "ExternalExpanding",
                "waiting for an external controller to expand this PVC",
            );
            Ok(())
        }
        Expansion::InTree(size) => {
            let volume = claim
                .spec
                .as_ref()
                .and_then(|s| s.volume_name.clone())
                .unwrap_or_default();
            let pvs: Api<PersistentVolume> = Api::all(ctx.client.clone());
            let grow = json!({"spec": {"capacity": {"storage": size}}});
            if let Err(e) = pvs
                .patch(&volume, &PatchParams::default(), &Patch::Merge(&grow))
                .await
            {
                let msg = err("expanding the volume", e);
                ctx.recorder.event(
                    &reference(&claim),
                    EventType::Warning,
                    "VolumeResizeFailed",
                    &msg,
                );
                return Err(msg);
            }
            let status = json!({"status": {"capacity": {"storage": size},
                "allocatedResources": {"storage": size},
                "allocatedResourceStatuses": null, "conditions": null}});
            claims
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                .await
                .map_err(|e| err("recording the claim's new size", e))?;
            ctx.recorder.event(
                &reference(&claim),
                EventType::Normal,
                "VolumeResizeSuccessful",
                &format!("ExpandVolume succeeded for volume {volume}"),
            );
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(requested: &str, capacity: &str, phase: &str) -> PersistentVolumeClaim {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "c", "namespace": "ns"},
            "spec": {"volumeName": "pv1", "storageClassName": "lp",
                     "resources": {"requests": {"storage": requested}}},
            "status": {"phase": phase, "capacity": {"storage": capacity}}}))
        .unwrap()
    }

    fn class(provisioner: &str) -> StorageClass {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "lp"}, "provisioner": provisioner}))
        .unwrap()
    }

    #[test]
    fn decisions() {
        let local = class("rkube.io/local-path");
        let ours = |p: &str| p == "rkube.io/local-path";
        assert_eq!(
            decide(&claim("2Gi", "1Gi", "Bound"), Some(&local), ours),
            Expansion::InTree(Quantity("2Gi".into()))
        );
        // Same size in other units, smaller, unbound, or no class: nothing.
        assert_eq!(
            decide(&claim("1024Mi", "1Gi", "Bound"), Some(&local), ours),
            Expansion::None
        );
        assert_eq!(
            decide(&claim("1Gi", "2Gi", "Bound"), Some(&local), ours),
            Expansion::None
        );
        assert_eq!(
            decide(&claim("2Gi", "1Gi", "Pending"), Some(&local), ours),
            Expansion::None
        );
        assert_eq!(
            decide(&claim("2Gi", "1Gi", "Bound"), None, ours),
            Expansion::None
        );
        // A CSI driver's claim is handed to its resizer, once.
        let csi = class("ebs.csi.aws.com");
        assert_eq!(
            decide(&claim("2Gi", "1Gi", "Bound"), Some(&csi), ours),
            Expansion::External("ebs.csi.aws.com".into())
        );
        let mut annotated = claim("2Gi", "1Gi", "Bound");
        annotated.metadata.annotations = Some(
            [(
                ANN_STORAGE_RESIZER.to_string(),
                "ebs.csi.aws.com".to_string(),
            )]
            .into(),
        );
        assert_eq!(decide(&annotated, Some(&csi), ours), Expansion::None);
    }
}
