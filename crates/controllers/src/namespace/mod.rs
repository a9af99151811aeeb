//! The namespace controller (upstream `pkg/controller/namespace`): a namespace with a
//! `deletionTimestamp` (the API marks it `Terminating` and keeps it while `spec.finalizers` holds
//! `kubernetes`) is emptied by the [`deletion`] pass, requeued with upstream's wait
//! (`estimate / 2 + 1` seconds) while content remains, and finalized when nothing is left.

pub mod conditions;
pub mod deletion;

use std::sync::Arc;
use std::time::Duration;

use client::controller::Controller;
use client::informer::{EventHandlerFuncs, SharedInformerFactory};
use client::workqueue::{default_controller_rate_limiter, QueueConfig, RateLimitingQueue};
use k8s_openapi::api::core::v1::Namespace;

use deletion::{Deleter, Pending};

fn enqueue_if_deleting(queue: &RateLimitingQueue<String>, ns: &Namespace) {
    if ns.metadata.deletion_timestamp.is_some() {
        if let Some(name) = &ns.metadata.name {
            queue.add(name.clone());
        }
    }
}

pub async fn run(client: kube::Client, factory: &SharedInformerFactory, workers: usize) {
    let informer = factory.informer::<Namespace>();
    let queue = RateLimitingQueue::with_config(
        default_controller_rate_limiter::<String>(),
        QueueConfig::named("namespace"),
    );
    let (q1, q2) = (queue.clone(), queue.clone());
    informer.add_event_handler(
        EventHandlerFuncs::new()
            .on_add(move |ns: &Arc<Namespace>, _| enqueue_if_deleting(&q1, ns))
            .on_update(move |_, ns: &Arc<Namespace>| enqueue_if_deleting(&q2, ns)),
    );
    factory.start();
    factory.wait_for_cache_sync().await;
    let deleter = Arc::new(Deleter::new(client));
    let controller = Controller::new("namespace", queue.clone());
    controller
        .run(workers, move |name: String| {
            let (deleter, queue) = (deleter.clone(), queue.clone());
            async move {
                match deleter.delete(&name).await {
                    Ok(()) => Ok(()),
                    Err(Pending::Remaining(estimate)) => {
                        let wait = (estimate / 2 + 1) as u64;
                        tracing::debug!(namespace = %name, wait, "content remaining in namespace");
                        queue.add_after(name, Duration::from_secs(wait));
                        Ok(())
                    }
                    Err(Pending::Failed(e)) => {
                        Err(format!("deletion of namespace {name} failed: {e}"))
                    }
                }
            }
        })
        .await;
}
