//! The PV protection controller (upstream
//! `pkg/controller/volume/pvprotection/pv_protection_controller.go`,
//! `persistentvolume-protection-controller`): a deleted volume keeps `kubernetes.io/pv-protection`
//! while it is `Bound` (the PV controller moves it to Released once its claim is gone) and loses
//! it after.

use std::sync::Arc;

use client::controller::Controller;
use client::informer::{object_key, EventHandlerFuncs, SharedInformerFactory, Store};
use client::workqueue::{default_controller_rate_limiter, QueueConfig, RateLimitingQueue};
use k8s_openapi::api::core::v1::PersistentVolume;
use kube::api::PostParams;
use kube::Api;

use super::{finalizers_with, is_deletion_candidate, needs_finalizer};
use crate::volume::PV_PROTECTION_FINALIZER;

/// Upstream's canonical controller name.
pub const CONTROLLER_NAME: &str = "persistentvolume-protection-controller";

/// Upstream `isBeingUsed`: the PV controller says it is bound.
pub fn is_being_used(volume: &PersistentVolume) -> bool {
    volume.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")
}

/// What the sync of a volume writes: `Some(add)` to add or remove the finalizer.
pub fn decide(volume: &PersistentVolume) -> Option<bool> {
    if is_deletion_candidate(&volume.metadata, PV_PROTECTION_FINALIZER) && !is_being_used(volume) {
        return Some(false);
    }
    needs_finalizer(&volume.metadata, PV_PROTECTION_FINALIZER).then_some(true)
}

struct Ctx {
    client: kube::Client,
    volumes: Arc<Store<PersistentVolume>>,
    queue: RateLimitingQueue<String>,
}

impl Ctx {
    fn changed(&self, volume: &PersistentVolume) {
        if needs_finalizer(&volume.metadata, PV_PROTECTION_FINALIZER)
            || is_deletion_candidate(&volume.metadata, PV_PROTECTION_FINALIZER)
        {
            self.queue.add(object_key(volume));
        }
    }
}

pub async fn run(client: kube::Client, factory: &SharedInformerFactory, workers: usize) {
    let informer = factory.informer::<PersistentVolume>();
    let ctx = Arc::new(Ctx {
        client,
        volumes: informer.store(),
        queue: RateLimitingQueue::with_config(
            default_controller_rate_limiter::<String>(),
            QueueConfig::named("pvprotection"),
        ),
    });
    let (c1, c2) = (ctx.clone(), ctx.clone());
    informer.add_event_handler(
        EventHandlerFuncs::new()
            .on_add(move |v: &Arc<PersistentVolume>, _| c1.changed(v))
            .on_update(move |_, v: &Arc<PersistentVolume>| c2.changed(v)),
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

async fn sync(ctx: &Ctx, name: &str) -> Result<(), String> {
    let Some(volume) = ctx.volumes.get(name) else {
        return Ok(());
    };
    let Some(add) = decide(&volume) else {
        return Ok(());
    };
    let mut new = (*volume).clone();
    new.metadata.finalizers = Some(finalizers_with(
        &volume.metadata,
        PV_PROTECTION_FINALIZER,
        add,
    ));
    let api: Api<PersistentVolume> = Api::all(ctx.client.clone());
    match api.replace(name, &PostParams::default(), &new).await {
        Ok(_) => {
            let what = if add { "added" } else { "removed" };
            tracing::info!(volume = name, "{what} the protection finalizer");
            Ok(())
        }
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(format!(
            "updating the finalizers of volume {name}: {}",
            crate::api_error_message(&e)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pv(phase: &str, deleting: bool, finalizers: &[&str]) -> PersistentVolume {
        let ts = deleting.then_some("2024-01-01T00:00:00Z");
        serde_json::from_value(
            json!({"metadata": {"name": "v", "deletionTimestamp": ts, "finalizers": finalizers},
            "status": {"phase": phase}}),
        )
        .unwrap()
    }

    #[test]
    fn decisions() {
        let f = &[PV_PROTECTION_FINALIZER];
        assert_eq!(decide(&pv("Bound", true, f)), None);
        assert_eq!(decide(&pv("Released", true, f)), Some(false));
        assert_eq!(decide(&pv("Available", true, f)), Some(false));
        assert_eq!(decide(&pv("Available", false, &[])), Some(true));
        assert_eq!(decide(&pv("Available", false, f)), None);
        assert_eq!(decide(&pv("Available", true, &["other"])), None);
    }
}
