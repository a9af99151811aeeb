//! The ephemeral volume controller (upstream `pkg/controller/volume/ephemeral`,
//! `ephemeral-volume-controller`): for each generic ephemeral volume of a pod
//! (`volumes[].ephemeral.volumeClaimTemplate`) it creates the claim `<pod>-<volume>` from the
//! template, controlled by the pod, so the claim is bound like any other and the garbage collector
//! deletes it with the pod. A claim of that name that the pod does not control is left alone (the
//! scheduler and the kubelet refuse such a pod, with upstream's "pod is not owner" text).
//!
//! Differences: no metrics; a claim deleted while its pod lives is made again on the pod's next
//! event or the claim's deletion (upstream enqueues the pod on claim deletion too).

use std::sync::Arc;

use client::controller::Controller;
use client::informer::{object_key, EventHandlerFuncs, SharedInformerFactory, Store};
use client::workqueue::{default_controller_rate_limiter, QueueConfig, RateLimitingQueue};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::PostParams;
use kube::Api;

use crate::volume::key_of;

/// Upstream's canonical controller name.
pub const CONTROLLER_NAME: &str = "ephemeral-volume-controller";

/// What a pod's ephemeral volumes need: the claims to create (pure).
pub fn claims_to_create(
    pod: &Pod,
    existing: impl Fn(&str) -> Option<Arc<PersistentVolumeClaim>>,
) -> Result<Vec<PersistentVolumeClaim>, String> {
    if pod.metadata.deletion_timestamp.is_some() {
        return Ok(Vec::new());
    }
    let pod_name = pod.metadata.name.as_deref().unwrap_or("");
    let ns = pod.metadata.namespace.clone();
    let mut out = Vec::new();
    for v in pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .into_iter()
        .flatten()
    {
        let Some(template) = v
            .ephemeral
            .as_ref()
            .and_then(|e| e.volume_claim_template.as_ref())
        else {
            continue;
        };
        let name = apimachinery::volumes::ephemeral_claim_name(pod_name, &v.name);
        if let Some(claim) = existing(&name) {
            let ours =
                claim.metadata.owner_references.iter().flatten().any(|o| {
                    o.controller == Some(true) && Some(&o.uid) == pod.metadata.uid.as_ref()
                });
            if !ours {
                return Err(format!(
                    "PVC {}/{name} was not created for pod {}/{pod_name} (pod is not owner)",
                    ns.as_deref().unwrap_or(""),
                    ns.as_deref().unwrap_or("")
                ));
            }
            continue;
        }
        let meta = template.metadata.clone().unwrap_or_default();
        out.push(PersistentVolumeClaim {
            metadata: ObjectMeta {
                name: Some(name),
                namespace: ns.clone(),
                labels: meta.labels,
                annotations: meta.annotations,
                owner_references: Some(vec![OwnerReference {
                    api_version: "v1".into(),
                    kind: "Pod".into(),
                    name: pod_name.to_string(),
                    uid: pod.metadata.uid.clone().unwrap_or_default(),
                    controller: Some(true),
                    block_owner_deletion: Some(true),
                }]),
                ..Default::default()
            },
            spec: Some(template.spec.clone()),
            status: None,
        });
    }
    Ok(out)
}

fn has_ephemeral(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .is_some_and(|vs| vs.iter().any(|v| v.ephemeral.is_some()))
}

struct Ctx {
    client: kube::Client,
    pods: Arc<Store<Pod>>,
    claims: Arc<Store<PersistentVolumeClaim>>,
    queue: RateLimitingQueue<String>,
}

pub async fn run(client: kube::Client, factory: &SharedInformerFactory, workers: usize) {
    let pod_informer = factory.informer::<Pod>();
    let claim_informer = factory.informer::<PersistentVolumeClaim>();
    let ctx = Arc::new(Ctx {
        client,
        pods: pod_informer.store(),
        claims: claim_informer.store(),
        queue: RateLimitingQueue::with_config(
            default_controller_rate_limiter::<String>(),
            QueueConfig::named("ephemeral_volume"),
        ),
    });
    let (p1, p2) = (ctx.clone(), ctx.clone());
    pod_informer.add_event_handler(
        EventHandlerFuncs::new()
            .on_add(move |p: &Arc<Pod>, _| {
                if has_ephemeral(p) {
                    p1.queue.add(object_key(p.as_ref()));
                }
            })
            .on_update(move |_, p: &Arc<Pod>| {
                if has_ephemeral(p) {
                    p2.queue.add(object_key(p.as_ref()));
                }
            }),
    );
    let c1 = ctx.clone();
    claim_informer.add_event_handler(EventHandlerFuncs::new().on_delete(move |d| {
        // A deleted claim of a live pod is made again.
        let claim: &PersistentVolumeClaim = d.object();
        for owner in claim.metadata.owner_references.iter().flatten() {
            if owner.kind == "Pod" && owner.controller == Some(true) {
                let ns = claim.metadata.namespace.as_deref().unwrap_or("");
                c1.queue.add(format!("{ns}/{}", owner.name));
            }
        }
    }));
    factory.start();
    factory.wait_for_cache_sync().await;
    Controller::new(CONTROLLER_NAME, ctx.queue.clone())
        .run(workers, move |key: String| {
            let ctx = ctx.clone();
            async move { sync(&ctx, &key).await }
        })
        .await;
}

async fn sync(ctx: &Ctx, key: &str) -> Result<(), String> {
    let Some(pod) = ctx.pods.get(key) else {
        return Ok(());
    };
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let wanted = claims_to_create(&pod, |name| ctx.claims.get(&format!("{ns}/{name}")))?;
    let api: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &ns);
    for claim in wanted {
        match api.create(&PostParams::default(), &claim).await {
            Ok(created) => {
                tracing::debug!(pod = key, claim = %key_of(&created.metadata), "created the ephemeral volume's claim");
            }
            // The informer was behind: the next event syncs again with the claim in it.
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => {
                return Err(format!(
                    "create PVC {}: {}",
                    claim.metadata.name.as_deref().unwrap_or(""),
                    crate::api_error_message(&e)
                ))
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod() -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "ns", "uid": "p1"},
            "spec": {"containers": [], "volumes": [
                {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {
                    "metadata": {"labels": {"a": "b"}, "annotations": {"x": "y"}},
                    "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "fast",
                             "resources": {"requests": {"storage": "1Gi"}}}}}},
                {"name": "tmp", "emptyDir": {}}]}}))
        .unwrap()
    }

    #[test]
    fn claims_from_templates() {
        let p = pod();
        let made = claims_to_create(&p, |_| None).unwrap();
        assert_eq!(made.len(), 1);
        let c = &made[0];
        assert_eq!(c.metadata.name.as_deref(), Some("web-scratch"));
        assert_eq!(c.metadata.namespace.as_deref(), Some("ns"));
        assert_eq!(c.metadata.labels.as_ref().unwrap()["a"], "b");
        assert_eq!(c.metadata.annotations.as_ref().unwrap()["x"], "y");
        let owner = &c.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (
                owner.kind.as_str(),
                owner.uid.as_str(),
                owner.controller,
                owner.block_owner_deletion
            ),
            ("Pod", "p1", Some(true), Some(true))
        );
        assert_eq!(
            c.spec.as_ref().unwrap().storage_class_name.as_deref(),
            Some("fast")
        );

        // Already there and ours: nothing to do; someone else's: refused.
        let ours = Arc::new(made[0].clone());
        assert!(claims_to_create(&p, |_| Some(ours.clone()))
            .unwrap()
            .is_empty());
        let mut foreign = made[0].clone();
        foreign.metadata.owner_references = None;
        let foreign = Arc::new(foreign);
        assert!(claims_to_create(&p, |_| Some(foreign.clone()))
            .unwrap_err()
            .contains("(pod is not owner)"));

        // A pod being deleted gets none.
        let mut deleting = p.clone();
        deleting.metadata.deletion_timestamp =
            serde_json::from_value(json!("2024-01-01T00:00:00Z")).unwrap();
        assert!(claims_to_create(&deleting, |_| None).unwrap().is_empty());
    }
}
