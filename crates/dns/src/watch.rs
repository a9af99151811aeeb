//! Keeps the server's snapshot current: Service and EndpointSlice informers (the client crate's
//! shared informers, as CoreDNS's `controller.go` uses client-go's), and a loop that rebuilds the
//! snapshot after changes. Differs: CoreDNS updates indexers per event; here a burst of events
//! costs one rebuild after [`DEBOUNCE`].

use std::sync::Arc;
use std::time::Duration;

use client::informer::{EventHandlerFuncs, InformerConfig, SharedInformerFactory};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use tokio::sync::Notify;

use crate::server::State;
use crate::snapshot::{Snapshot, SnapshotConfig};

/// Events within this window share one rebuild.
const DEBOUNCE: Duration = Duration::from_millis(50);
/// CoreDNS starts serving after at most this long even when the API has not answered.
const SYNC_TIMEOUT: Duration = Duration::from_secs(5);

pub struct Watch {
    factory: Arc<SharedInformerFactory>,
    task: tokio::task::JoinHandle<()>,
}

impl Watch {
    /// Starts the informers, waits (bounded) for their first lists and installs the first
    /// snapshot, then keeps it current in the background.
    pub async fn start(client: kube::Client, state: Arc<State>, config: SnapshotConfig) -> Watch {
        let factory = Arc::new(SharedInformerFactory::new(
            client,
            InformerConfig::new().trim_managed_fields(),
        ));
        let services = factory.informer::<Service>();
        let slices = factory.informer::<EndpointSlice>();
        let changed = Arc::new(Notify::new());
        let (a, u, d) = (changed.clone(), changed.clone(), changed.clone());
        services.add_event_handler(
            EventHandlerFuncs::new()
                .on_add(move |_, _| a.notify_one())
                .on_update(move |_, _| u.notify_one())
                .on_delete(move |_| d.notify_one()),
        );
        let (a, u, d) = (changed.clone(), changed.clone(), changed.clone());
        slices.add_event_handler(
            EventHandlerFuncs::new()
                .on_add(move |_, _| a.notify_one())
                .on_update(move |_, _| u.notify_one())
                .on_delete(move |_| d.notify_one()),
        );
        factory.start();
        if tokio::time::timeout(SYNC_TIMEOUT, factory.wait_for_cache_sync())
            .await
            .is_err()
        {
            tracing::warn!("dns: starting with unsynced Kubernetes API");
        }
        let build = move || {
            Snapshot::build(
                config.clone(),
                &services.store().list(),
                &slices.store().list(),
            )
        };
        state.replace(build());
        let task = tokio::spawn(async move {
            loop {
                changed.notified().await;
                tokio::time::sleep(DEBOUNCE).await;
                state.replace(build());
            }
        });
        Watch { factory, task }
    }

    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.task.abort();
        self.factory.shutdown();
    }
}
