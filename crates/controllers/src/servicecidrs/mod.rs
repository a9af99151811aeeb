//! The ServiceCIDR controller (upstream `pkg/controller/servicecidrs`, `service-cidr-controller`):
//! puts the `networking.k8s.io/service-cidr-finalizer` on every ServiceCIDR and sets its `Ready`
//! condition True ("Kubernetes Service CIDR is ready"); a deleted ServiceCIDR keeps the finalizer,
//! with `Ready=False` reason `Terminating`, while an IPAddress of the API servers' allocator lies in it
//! and in no other ServiceCIDR, and loses it 10 s after nothing blocks it (so every API server's
//! allocator has stopped handing out its addresses). The decisions are in [`reconcile`].
//!
//! Differences: conditions are written with a merge patch of `status` rather than server-side apply;
//! no Events are recorded.

pub mod reconcile;

use std::sync::Arc;
use std::time::Duration;

use client::controller::Controller;
use client::informer::{EventHandlerFuncs, SharedInformerFactory};
use client::workqueue::{default_controller_rate_limiter, QueueConfig, RateLimitingQueue};
use k8s_openapi::api::networking::v1::{IPAddress, ServiceCIDR};
use kube::api::{Patch, PatchParams};
use kube::Api;
use serde_json::json;

use reconcile::Decision;

/// Upstream's controller name.
pub const CONTROLLER_NAME: &str = "service-cidr-controller";

struct Ctx {
    client: kube::Client,
    cidrs: Arc<client::informer::Store<ServiceCIDR>>,
    ips: Arc<client::informer::Store<IPAddress>>,
    queue: RateLimitingQueue<String>,
}

impl Ctx {
    fn enqueue_containing(&self, ip: &IPAddress) {
        if let Some(addr) = reconcile::managed_address(ip) {
            for name in reconcile::containing_address(&self.cidrs.list(), addr) {
                self.queue.add(name);
            }
        }
    }
}

pub async fn run(client: kube::Client, factory: &SharedInformerFactory, workers: usize) {
    let cidr_informer = factory.informer::<ServiceCIDR>();
    let ip_informer = factory.informer::<IPAddress>();
    let ctx = Arc::new(Ctx {
        client,
        cidrs: cidr_informer.store(),
        ips: ip_informer.store(),
        queue: RateLimitingQueue::with_config(
            default_controller_rate_limiter::<String>(),
            QueueConfig::named("ipaddresses"),
        ),
    });
    let (c1, c2, c3, c4, c5) = (
        ctx.clone(),
        ctx.clone(),
        ctx.clone(),
        ctx.clone(),
        ctx.clone(),
    );
    cidr_informer.add_event_handler(
        EventHandlerFuncs::new()
            .on_add(move |sc: &Arc<ServiceCIDR>, _| {
                c1.queue.add(client::informer::object_key(sc.as_ref()));
                for name in reconcile::overlapping(&c1.cidrs.list(), sc) {
                    c1.queue.add(name);
                }
            })
            .on_update(move |_, sc: &Arc<ServiceCIDR>| {
                c2.queue.add(client::informer::object_key(sc.as_ref()))
            })
            .on_delete(move |d| c3.queue.add(d.key())),
    );
    ip_informer.add_event_handler(
        EventHandlerFuncs::new()
            .on_add(move |ip: &Arc<IPAddress>, _| c4.enqueue_containing(ip))
            .on_delete(move |d| c5.enqueue_containing(d.object())),
    );
    factory.start();
    factory.wait_for_cache_sync().await;
    let controller = Controller::new(CONTROLLER_NAME, ctx.queue.clone()).with_max_retries(15);
    controller
        .run(workers, move |key: String| {
            let ctx = ctx.clone();
            async move { sync(&ctx, &key).await }
        })
        .await;
}

fn deleting_for(sc: &ServiceCIDR) -> Option<Duration> {
    let at = sc.metadata.deletion_timestamp.as_ref()?.0;
    let elapsed = jiff::Timestamp::now().duration_since(at);
    Some(Duration::try_from(elapsed).unwrap_or(Duration::ZERO))
}

async fn sync(ctx: &Ctx, key: &str) -> Result<(), String> {
    let Some(sc) = ctx.cidrs.get(key) else {
        return Ok(());
    };
    let all = ctx.cidrs.list();
    let ips = ctx.ips.list();
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let api: Api<ServiceCIDR> = Api::all(ctx.client.clone());
    let rv = sc.metadata.resource_version.clone();
    match reconcile::decide(&sc, &all, &ips, deleting_for(&sc), &now) {
        Decision::Blocked { status } => {
            if let Some(status) = status {
                tracing::info!(
                    servicecidr = key,
                    "deleting ServiceCIDR blocked by IP addresses"
                );
                patch_status(&api, key, status).await?;
            }
        }
        Decision::Wait(d) => {
            if !d.is_zero() {
                ctx.queue.add_after(key.to_string(), d);
            }
        }
        Decision::RemoveFinalizer => {
            let rest: Vec<String> = sc
                .metadata
                .finalizers
                .iter()
                .flatten()
                .filter(|f| *f != reconcile::FINALIZER)
                .cloned()
                .collect();
            let patch = json!({"metadata": {"finalizers": rest, "resourceVersion": rv}});
            tracing::info!(servicecidr = key, "removing the protection finalizer");
            ignore_not_found(
                api.patch(key, &PatchParams::default(), &Patch::Merge(&patch))
                    .await,
            )?;
        }
        Decision::Live {
            add_finalizer,
            status,
        } => {
            if add_finalizer {
                let mut finalizers: Vec<String> =
                    sc.metadata.finalizers.clone().unwrap_or_default();
                finalizers.push(reconcile::FINALIZER.to_string());
                let patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": rv}});
                ignore_not_found(
                    api.patch(key, &PatchParams::default(), &Patch::Merge(&patch))
                        .await,
                )?;
            }
            if let Some(status) = status {
                patch_status(&api, key, status).await?;
            }
        }
    }
    Ok(())
}

async fn patch_status(
    api: &Api<ServiceCIDR>,
    name: &str,
    status: serde_json::Value,
) -> Result<(), String> {
    let patch = json!({"status": status});
    ignore_not_found(
        api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await,
    )
}

fn ignore_not_found<T>(r: Result<T, kube::Error>) -> Result<(), String> {
    match r {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(crate::api_error_message(&e)),
    }
}
