//! The EndpointSlice mirroring controller (upstream `pkg/controller/endpointslicemirroring`): a
//! Service without a selector gets its endpoints from a custom Endpoints object; this controller
//! mirrors that object into EndpointSlices managed by `endpointslicemirroring-controller.k8s.io`
//! (see [`reconciler`]), and deletes them when the Service gains a selector, the Service or the
//! Endpoints go, or the Endpoints are labelled `endpointslice.kubernetes.io/skip-mirror: "true"`.

pub mod reconciler;

use std::sync::Arc;

use client::controller::{Controller, EnqueueHandler};
use client::informer::{split_key, EventHandlerFuncs, SharedInformerFactory, Store};
use client::workqueue::{default_controller_rate_limiter, QueueConfig, RateLimitingQueue};
use k8s_openapi::api::core::v1::{Endpoints, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{DeleteParams, PostParams};
use kube::Api;

use crate::endpointslice::reconciler::Plan;
use crate::endpointslice::util::{object_ref, LEADER_ANNOTATION};
use crate::endpointslice::{slice_service_key, SliceTracker};
use client::events::EventType;
use reconciler::CONTROLLER_NAME;

const SKIP_MIRROR: &str = "endpointslice.kubernetes.io/skip-mirror";

struct Ctx {
    client: kube::Client,
    services: Arc<Store<Service>>,
    endpoints: Arc<Store<Endpoints>>,
    slices: Arc<Store<EndpointSlice>>,
    tracker: Arc<SliceTracker>,
    max_per_subset: usize,
    recorder: client::events::Recorder,
    _events: client::events::EventBroadcaster,
}

/// Whether these Endpoints are to be mirrored at all.
fn should_mirror(ep: &Endpoints) -> bool {
    let skip = ep
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(SKIP_MIRROR))
        .is_some_and(|v| v == "true");
    let leader = ep
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(LEADER_ANNOTATION));
    !skip && !leader
}

pub async fn run(c: &crate::ControllerContext) {
    let factory: &SharedInformerFactory = &c.factory;
    let svc_informer = factory.informer::<Service>();
    let ep_informer = factory.informer::<Endpoints>();
    let slice_informer = factory.informer::<EndpointSlice>();
    let queue = RateLimitingQueue::with_config(
        default_controller_rate_limiter::<String>(),
        QueueConfig::named("endpoint_slice_mirroring"),
    );
    svc_informer.add_event_handler(EnqueueHandler::new(queue.clone()));
    ep_informer.add_event_handler(EnqueueHandler::new(queue.clone()));
    let tracker = Arc::new(SliceTracker::default());
    let (q1, q2, q3, t3) = (queue.clone(), queue.clone(), queue.clone(), tracker.clone());
    slice_informer.add_event_handler(
        EventHandlerFuncs::new()
            .on_add(move |s: &Arc<EndpointSlice>, _| {
                slice_service_key(s, CONTROLLER_NAME)
                    .into_iter()
                    .for_each(|k| q1.add(k))
            })
            .on_update(move |_, s: &Arc<EndpointSlice>| {
                slice_service_key(s, CONTROLLER_NAME)
                    .into_iter()
                    .for_each(|k| q2.add(k))
            })
            .on_delete(move |d| {
                if let Some(k) = slice_service_key(d.object(), CONTROLLER_NAME) {
                    t3.observed_deletion(&k, d.object());
                    q3.add(k);
                }
            }),
    );
    let (events, recorder) = crate::endpointslice::util::event_recorder(
        &c.client,
        "endpoint-slice-mirroring-controller",
    );
    let ctx = Arc::new(Ctx {
        recorder,
        _events: events,
        client: c.client.clone(),
        services: svc_informer.store(),
        endpoints: ep_informer.store(),
        slices: slice_informer.store(),
        tracker,
        max_per_subset: c.options.mirroring_max_endpoints_per_subset.max(1),
    });
    factory.start();
    factory.wait_for_cache_sync().await;
    Controller::new("endpointslicemirroring", queue)
        .with_max_retries(15)
        .run(c.workers, move |key: String| {
            let ctx = ctx.clone();
            async move { sync_endpoints(&ctx, &key).await }
        })
        .await;
}

async fn sync_endpoints(ctx: &Ctx, key: &str) -> Result<(), String> {
    let (ns, _) = split_key(key);
    let ns = ns.unwrap_or_default();
    let existing: Vec<EndpointSlice> = ctx
        .slices
        .list_namespace(ns)
        .into_iter()
        .filter(|s| slice_service_key(s, CONTROLLER_NAME).as_deref() == Some(key))
        .map(|s| (*s).clone())
        .collect();
    let svc = ctx.services.get(key);
    let ep = ctx.endpoints.get(key);
    let mirror = match (&svc, &ep) {
        (Some(svc), Some(ep)) => {
            svc.spec
                .as_ref()
                .and_then(|s| s.selector.as_ref())
                .is_none()
                && should_mirror(ep)
        }
        _ => false,
    };
    let plan = match ep {
        Some(ep) if mirror => {
            if ctx.tracker.stale(key, &existing) {
                return Err(format!(
                    "{key}: EndpointSlice informer cache is out of date"
                ));
            }
            let (plan, skipped) = reconciler::reconcile(&ep, &existing, ctx.max_per_subset);
            let target = object_ref("Endpoints", &ep.metadata);
            if skipped.invalid > 0 {
                let message = format!(
                    "Skipped {} invalid IP addresses when mirroring to EndpointSlices",
                    skipped.invalid
                );
                ctx.recorder
                    .event(&target, EventType::Warning, "InvalidIPAddress", &message);
            }
            if skipped.over_capacity > 0 {
                let message = format!(
                    "A max of {} addresses can be mirrored to EndpointSlices per Endpoints subset. \
                     {} addresses were skipped",
                    ctx.max_per_subset, skipped.over_capacity
                );
                ctx.recorder.event(
                    &target,
                    EventType::Warning,
                    "TooManyAddressesToMirror",
                    &message,
                );
            }
            plan
        }
        _ => Plan {
            delete: existing,
            ..Default::default()
        },
    };
    apply(ctx, key, ns, plan).await
}

async fn apply(ctx: &Ctx, key: &str, ns: &str, plan: Plan) -> Result<(), String> {
    let api: Api<EndpointSlice> = Api::namespaced(ctx.client.clone(), ns);
    let mut errors = Vec::new();
    for slice in plan.create {
        match api.create(&PostParams::default(), &slice).await {
            Ok(created) => ctx.tracker.wrote(key, &created),
            Err(kube::Error::Api(e)) if crate::endpoint::is_ns_terminating(&e) => return Ok(()),
            Err(e) => errors.push(format!("create EndpointSlice for {key}: {e}")),
        }
    }
    for slice in plan.update {
        let name = slice.metadata.name.clone().unwrap_or_default();
        match api.replace(&name, &PostParams::default(), &slice).await {
            Ok(updated) => ctx.tracker.wrote(key, &updated),
            Err(e) => errors.push(format!("update EndpointSlice {name}: {e}")),
        }
    }
    for slice in plan.delete {
        let name = slice.metadata.name.clone().unwrap_or_default();
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => ctx.tracker.deleted(key, &slice),
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => errors.push(format!("delete EndpointSlice {name}: {e}")),
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("; "))
    }
}
