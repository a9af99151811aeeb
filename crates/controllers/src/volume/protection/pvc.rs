//! The PVC protection controller (upstream
//! `pkg/controller/volume/pvcprotection/pvc_protection_controller.go`,
//! `persistentvolumeclaim-protection-controller`): a deleted claim keeps
//! `kubernetes.io/pvc-protection` while a scheduled pod uses it (through a
//! `persistentVolumeClaim` volume, or a generic ephemeral volume the claim was made for, unless
//! that pod is shut down), and loses it after. Whether a pod uses it is asked of the informer
//! first and, if none there does, of a live list of the namespace's pods (the cache may be behind
//! a pod just created).
//!
//! Differences: claims are synced one at a time with a live list each, rather than batched per
//! namespace around one lazily made live list.

use std::sync::Arc;

use client::controller::Controller;
use client::informer::{object_key, EventHandlerFuncs, SharedInformerFactory, Store};
use client::workqueue::{default_controller_rate_limiter, QueueConfig, RateLimitingQueue};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{ListParams, PostParams};
use kube::Api;

use super::{finalizers_with, is_deletion_candidate, needs_finalizer};
use crate::volume::{
    index_pods_by_claim, is_pod_terminated, key_of, pod_claims, POD_PVC_INDEX,
    PVC_PROTECTION_FINALIZER,
};

/// Upstream's canonical controller name.
pub const CONTROLLER_NAME: &str = "persistentvolumeclaim-protection-controller";

/// Upstream `podIsShutDown`: deleted with a zero grace period (the kubelet is done with it, or it
/// was force-deleted).
fn pod_is_shut_down(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
        && pod.metadata.deletion_grace_period_seconds == Some(0)
}

/// Upstream `ephemeral.VolumeIsForPod`: the claim is controlled by the pod.
fn claim_is_for_pod(claim: &PersistentVolumeClaim, pod: &Pod) -> bool {
    claim
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && Some(&o.uid) == pod.metadata.uid.as_ref())
}

/// Upstream `podUsesPVC`: only scheduled pods count (the kubelet will not start a pod whose claim
/// is being deleted); a generic ephemeral volume counts only for the claim made for that pod.
pub fn pod_uses_claim(pod: &Pod, claim: &PersistentVolumeClaim) -> bool {
    let scheduled = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    if !scheduled || pod.metadata.namespace != claim.metadata.namespace {
        return false;
    }
    let name = claim.metadata.name.as_deref().unwrap_or("");
    pod_claims(pod).iter().any(|(c, ephemeral)| {
        c == name && (!ephemeral || (!pod_is_shut_down(pod) && claim_is_for_pod(claim, pod)))
    })
}

/// Upstream `enqueuePVCs`' filter: only a pod that is deleted, terminated or not scheduled can
/// let a claim go.
fn pod_may_release_claims(pod: &Pod, deleted: bool) -> bool {
    let scheduled = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    deleted || is_pod_terminated(pod) || !scheduled
}

struct Ctx {
    client: kube::Client,
    claims: Arc<Store<PersistentVolumeClaim>>,
    pods: Arc<Store<Pod>>,
    queue: RateLimitingQueue<String>,
}

impl Ctx {
    fn claim_changed(&self, claim: &PersistentVolumeClaim) {
        if needs_finalizer(&claim.metadata, PVC_PROTECTION_FINALIZER)
            || is_deletion_candidate(&claim.metadata, PVC_PROTECTION_FINALIZER)
        {
            self.queue.add(object_key(claim));
        }
    }

    fn pod_changed(&self, pod: &Pod, deleted: bool) {
        if !pod_may_release_claims(pod, deleted) {
            return;
        }
        let ns = pod.metadata.namespace.as_deref().unwrap_or("");
        for (claim, _) in pod_claims(pod) {
            self.queue.add(format!("{ns}/{claim}"));
        }
    }
}

pub async fn run(client: kube::Client, factory: &SharedInformerFactory, workers: usize) {
    let claim_informer = factory.informer::<PersistentVolumeClaim>();
    let pod_informer = factory.informer::<Pod>();
    index_pods_by_claim(&pod_informer);
    let ctx = Arc::new(Ctx {
        client,
        claims: claim_informer.store(),
        pods: pod_informer.store(),
        queue: RateLimitingQueue::with_config(
            default_controller_rate_limiter::<String>(),
            QueueConfig::named("pvcprotection"),
        ),
    });
    let (c1, c2) = (ctx.clone(), ctx.clone());
    claim_informer.add_event_handler(
        EventHandlerFuncs::new()
            .on_add(move |c: &Arc<PersistentVolumeClaim>, _| c1.claim_changed(c))
            .on_update(move |_, c: &Arc<PersistentVolumeClaim>| c2.claim_changed(c)),
    );
    let (p1, p2, p3) = (ctx.clone(), ctx.clone(), ctx.clone());
    pod_informer.add_event_handler(
        EventHandlerFuncs::new()
            .on_add(move |p: &Arc<Pod>, _| p1.pod_changed(p, false))
            .on_update(move |old: &Arc<Pod>, new: &Arc<Pod>| {
                p2.pod_changed(new, false);
                // An update may hide the deletion of a pod and the creation of another of the
                // same name: the old one's claims may be free now.
                if old.metadata.uid != new.metadata.uid {
                    p2.pod_changed(old, true);
                }
            })
            .on_delete(move |d| p3.pod_changed(d.object(), true)),
    );
    factory.start();
    factory.wait_for_cache_sync().await;
    let controller = Controller::new(CONTROLLER_NAME, ctx.queue.clone());
    controller
        .run(workers, move |key: String| {
            let ctx = ctx.clone();
            async move { sync(&ctx, &key).await }
        })
        .await;
}

async fn sync(ctx: &Ctx, key: &str) -> Result<(), String> {
    let Some(claim) = ctx.claims.get(key) else {
        return Ok(());
    };
    if is_deletion_candidate(&claim.metadata, PVC_PROTECTION_FINALIZER) {
        if !is_being_used(ctx, &claim).await? {
            return write_finalizers(ctx, &claim, false).await;
        }
        tracing::debug!(claim = key, "keeping the claim: a pod uses it");
    }
    if needs_finalizer(&claim.metadata, PVC_PROTECTION_FINALIZER) {
        return write_finalizers(ctx, &claim, true).await;
    }
    Ok(())
}

async fn is_being_used(ctx: &Ctx, claim: &PersistentVolumeClaim) -> Result<bool, String> {
    let cached = ctx
        .pods
        .by_index(POD_PVC_INDEX, &key_of(&claim.metadata))
        .unwrap_or_default();
    if cached.iter().any(|p| pod_uses_claim(p, claim)) {
        return Ok(true);
    }
    // The informer may not have a pod just created: ask the API server.
    let ns = claim.metadata.namespace.as_deref().unwrap_or("");
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    let live = pods
        .list(&ListParams::default())
        .await
        .map_err(|e| format!("live list of pods failed: {}", crate::api_error_message(&e)))?;
    Ok(live.items.iter().any(|p| pod_uses_claim(p, claim)))
}

async fn write_finalizers(
    ctx: &Ctx,
    claim: &PersistentVolumeClaim,
    add: bool,
) -> Result<(), String> {
    let mut new = claim.clone();
    new.metadata.finalizers = Some(finalizers_with(
        &claim.metadata,
        PVC_PROTECTION_FINALIZER,
        add,
    ));
    let api: Api<PersistentVolumeClaim> = Api::namespaced(
        ctx.client.clone(),
        claim.metadata.namespace.as_deref().unwrap_or(""),
    );
    let name = claim.metadata.name.as_deref().unwrap_or("");
    match api.replace(name, &PostParams::default(), &new).await {
        Ok(_) => {
            let what = if add { "added" } else { "removed" };
            tracing::info!(claim = %key_of(&claim.metadata), "{what} the protection finalizer");
            Ok(())
        }
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(format!(
            "updating the finalizers of claim {}: {}",
            key_of(&claim.metadata),
            crate::api_error_message(&e)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claim(name: &str, owner: Option<&str>) -> PersistentVolumeClaim {
        let refs = owner.map(|uid| json!([{"apiVersion": "v1", "kind": "Pod", "name": "web", "uid": uid, "controller": true}]));
        serde_json::from_value(
            json!({"metadata": {"name": name, "namespace": "ns", "ownerReferences": refs}}),
        )
        .unwrap()
    }

    fn pod(node: Option<&str>, extra_meta: serde_json::Value) -> Pod {
        let mut meta = json!({"name": "web", "namespace": "ns", "uid": "p1"});
        if let (Some(m), Some(e)) = (meta.as_object_mut(), extra_meta.as_object()) {
            m.extend(e.clone());
        }
        serde_json::from_value(
            json!({"metadata": meta, "spec": {"nodeName": node, "containers": [],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
                        {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}]}}),
        )
        .unwrap()
    }

    #[test]
    fn which_pods_use_a_claim() {
        let scheduled = pod(Some("n1"), json!({}));
        assert!(pod_uses_claim(&scheduled, &claim("data", None)));
        assert!(!pod_uses_claim(&scheduled, &claim("other", None)));
        // Unscheduled pods do not hold claims.
        assert!(!pod_uses_claim(&pod(None, json!({})), &claim("data", None)));
        // An ephemeral claim counts only if made for this pod, and not once the pod is shut down.
        assert!(pod_uses_claim(
            &scheduled,
            &claim("web-scratch", Some("p1"))
        ));
        assert!(!pod_uses_claim(
            &scheduled,
            &claim("web-scratch", Some("p0"))
        ));
        let shut = pod(
            Some("n1"),
            json!({"deletionTimestamp": "2024-01-01T00:00:00Z", "deletionGracePeriodSeconds": 0}),
        );
        assert!(!pod_uses_claim(&shut, &claim("web-scratch", Some("p1"))));
        assert!(pod_uses_claim(&shut, &claim("data", None)));
    }

    #[test]
    fn pod_events_that_may_free_claims() {
        let running = pod(Some("n1"), json!({}));
        assert!(!pod_may_release_claims(&running, false));
        assert!(pod_may_release_claims(&running, true));
        assert!(pod_may_release_claims(&pod(None, json!({})), false));
    }
}
