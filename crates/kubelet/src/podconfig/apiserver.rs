//! The API server source (upstream `config/apiserver.go`): a reflector over the pods bound to this node
//! (`spec.nodeName=<node>`) whose store sends its whole content on every change (upstream's
//! `UndeltaStore`).

use std::sync::Arc;

use client::informer::{EventHandlerFuncs, InformerConfig, SharedInformer};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;

use super::SourceSet;

/// Runs the source until `updates` is closed.
pub async fn run(
    client: kube::Client,
    node_name: String,
    updates: tokio::sync::mpsc::Sender<SourceSet>,
) {
    let informer = SharedInformer::from_api(
        Api::<Pod>::all(client),
        InformerConfig::new().fields(format!("spec.nodeName={node_name}")),
    );
    let changed = Arc::new(tokio::sync::Notify::new());
    let (on_add, on_update, on_delete) = (changed.clone(), changed.clone(), changed.clone());
    informer.add_event_handler(
        EventHandlerFuncs::new()
            .on_add(move |_, _| on_add.notify_one())
            .on_update(move |_, _| on_update.notify_one())
            .on_delete(move |_| on_delete.notify_one()),
    );
    informer.start();
    let store = informer.store();
    loop {
        // The first set goes out once the initial list is in (an empty node sends an empty set).
        if informer.has_synced() {
            let pods: Vec<Pod> = store.list().iter().map(|p| (**p).clone()).collect();
            if updates.send(SourceSet(pods)).await.is_err() {
                informer.stop();
                return;
            }
            changed.notified().await;
        } else {
            tokio::select! {
                _ = changed.notified() => {}
                _ = tokio::time::sleep(std::time::Duration::from_millis(50)) => {}
            }
        }
    }
}
