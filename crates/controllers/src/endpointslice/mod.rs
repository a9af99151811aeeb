//! The EndpointSlice controller (upstream `pkg/controller/endpointslice`): for every Service with a
//! selector, EndpointSlices (labelled `kubernetes.io/service-name` and managed by
//! `endpointslice-controller.k8s.io`, owned by the Service) listing the selected pods, at most
//! `--max-endpoints-per-slice` endpoints each; see [`reconciler`] for how changes are kept minimal.
//! A tracker of the generations this controller wrote keeps a stale informer cache from causing
//! duplicate slices: the Service is retried until the cache has caught up.
//!
//! Not implemented: topology-aware hints (`service.kubernetes.io/topology-mode: Auto`, which needs
//! the nodes' CPU per zone); `trafficDistribution: PreferClose` hints are set.

pub mod reconciler;
pub mod util;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use client::controller::{Controller, EnqueueHandler};
use client::informer::{split_key, EventHandlerFuncs, SharedInformerFactory, Store};
use client::workqueue::{default_controller_rate_limiter, QueueConfig, RateLimitingQueue};
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{DeleteParams, PostParams};
use kube::Api;

use util::{
    rfc3339_nano, selector_matches, services_for_pod, TriggerTimeTracker, LABEL_SERVICE_NAME,
    LAST_CHANGE_TRIGGER_TIME,
};

/// The value of the managed-by label on the slices this controller owns.
pub const CONTROLLER_NAME: &str = "endpointslice-controller.k8s.io";

/// Generation recorded for a slice this controller deleted.
const DELETION_EXPECTED: i64 = -1;

/// The generations of the slices each Service's last sync wrote (upstream `EndpointSliceTracker`).
#[derive(Default)]
pub struct SliceTracker {
    by_service: Mutex<HashMap<String, HashMap<String, i64>>>,
}

impl SliceTracker {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, HashMap<String, i64>>> {
        self.by_service.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn wrote(&self, service: &str, slice: &EndpointSlice) {
        if let Some(uid) = slice.metadata.uid.clone() {
            let generation = slice.metadata.generation.unwrap_or(0);
            self.lock()
                .entry(service.to_string())
                .or_default()
                .insert(uid, generation);
        }
    }

    pub fn deleted(&self, service: &str, slice: &EndpointSlice) {
        if let Some(uid) = slice.metadata.uid.clone() {
            self.lock()
                .entry(service.to_string())
                .or_default()
                .insert(uid, DELETION_EXPECTED);
        }
    }

    /// The informer saw the slice go: nothing more to expect of it.
    pub fn observed_deletion(&self, service: &str, slice: &EndpointSlice) {
        if let (Some(uid), Some(m)) = (slice.metadata.uid.as_ref(), self.lock().get_mut(service)) {
            m.remove(uid);
        }
    }

    pub fn forget(&self, service: &str) {
        self.lock().remove(service);
    }

    /// Whether the cached slices are older than what this controller wrote: a slice it deleted is
    /// still there, one it wrote is missing or at an older generation.
    pub fn stale(&self, service: &str, cached: &[EndpointSlice]) -> bool {
        let map = self.lock();
        let Some(expected) = map.get(service) else {
            return false;
        };
        let mut seen = std::collections::HashSet::new();
        for s in cached {
            let uid = s.metadata.uid.clone().unwrap_or_default();
            if let Some(g) = expected.get(&uid) {
                if *g == DELETION_EXPECTED || *g > s.metadata.generation.unwrap_or(0) {
                    return true;
                }
            }
            seen.insert(uid);
        }
        expected
            .iter()
            .any(|(uid, g)| *g != DELETION_EXPECTED && !seen.contains(uid))
    }
}

/// The `namespace/service` key of a slice managed by `controller`.
pub(crate) fn slice_service_key(slice: &EndpointSlice, controller: &str) -> Option<String> {
    let labels = slice.metadata.labels.as_ref();
    if !reconciler::managed_by(labels, controller) {
        return None;
    }
    let svc = labels?.get(LABEL_SERVICE_NAME)?;
    Some(format!(
        "{}/{svc}",
        slice.metadata.namespace.as_deref().unwrap_or("")
    ))
}

struct Ctx {
    client: kube::Client,
    services: Arc<Store<Service>>,
    pods: Arc<Store<Pod>>,
    nodes: Arc<Store<Node>>,
    slices: Arc<Store<EndpointSlice>>,
    tracker: Arc<SliceTracker>,
    trigger_times: TriggerTimeTracker,
    max_per_slice: usize,
    recorder: client::events::Recorder,
    _events: client::events::EventBroadcaster,
}

pub async fn run(c: &crate::ControllerContext) {
    let factory: &SharedInformerFactory = &c.factory;
    let svc_informer = factory.informer::<Service>();
    let pod_informer = factory.informer::<Pod>();
    let node_informer = factory.informer::<Node>();
    let slice_informer = factory.informer::<EndpointSlice>();
    let queue = RateLimitingQueue::with_config(
        default_controller_rate_limiter::<String>(),
        QueueConfig::named("endpoint_slice"),
    );
    svc_informer.add_event_handler(EnqueueHandler::new(queue.clone()));
    let services = svc_informer.store();
    let (s1, s2, s3) = (services.clone(), services.clone(), services.clone());
    let (q1, q2, q3) = (queue.clone(), queue.clone(), queue.clone());
    pod_informer.add_event_handler(
        EventHandlerFuncs::new()
            .on_add(move |p: &Arc<Pod>, _| {
                services_for_pod(&s1, p).into_iter().for_each(|k| q1.add(k))
            })
            .on_update(move |old: &Arc<Pod>, new: &Arc<Pod>| {
                let mut keys = services_for_pod(&s2, old);
                keys.extend(services_for_pod(&s2, new));
                keys.into_iter().for_each(|k| q2.add(k));
            })
            .on_delete(move |d| {
                services_for_pod(&s3, d.object())
                    .into_iter()
                    .for_each(|k| q3.add(k))
            }),
    );
    let tracker = Arc::new(SliceTracker::default());
    let (q4, q5, q6, t6) = (queue.clone(), queue.clone(), queue.clone(), tracker.clone());
    slice_informer.add_event_handler(
        EventHandlerFuncs::new()
            .on_add(move |s: &Arc<EndpointSlice>, _| {
                slice_service_key(s, CONTROLLER_NAME)
                    .into_iter()
                    .for_each(|k| q4.add(k))
            })
            .on_update(move |_, s: &Arc<EndpointSlice>| {
                slice_service_key(s, CONTROLLER_NAME)
                    .into_iter()
                    .for_each(|k| q5.add(k))
            })
            .on_delete(move |d| {
                if let Some(k) = slice_service_key(d.object(), CONTROLLER_NAME) {
                    t6.observed_deletion(&k, d.object());
                    q6.add(k);
                }
            }),
    );
    let (events, recorder) = util::event_recorder(&c.client, "endpoint-slice-controller");
    let ctx = Arc::new(Ctx {
        recorder,
        _events: events,
        client: c.client.clone(),
        services,
        pods: pod_informer.store(),
        nodes: node_informer.store(),
        slices: slice_informer.store(),
        tracker,
        trigger_times: TriggerTimeTracker::default(),
        max_per_slice: c.options.max_endpoints_per_slice.max(1),
    });
    factory.start();
    factory.wait_for_cache_sync().await;
    Controller::new("endpointslice", queue)
        .with_max_retries(15)
        .run(c.workers, move |key: String| {
            let ctx = ctx.clone();
            async move { sync_service(&ctx, &key).await }
        })
        .await;
}

async fn sync_service(ctx: &Ctx, key: &str) -> Result<(), String> {
    let (ns, name) = split_key(key);
    let ns = ns.unwrap_or_default();
    let Some(svc) = ctx.services.get(key) else {
        // The slices go with the Service through their owner reference (garbage collector).
        ctx.tracker.forget(key);
        ctx.trigger_times.delete(key);
        return Ok(());
    };
    let spec = svc.spec.clone().unwrap_or_default();
    if spec.type_.as_deref() == Some("ExternalName") || spec.selector.is_none() {
        return Ok(());
    }
    let pods: Vec<Arc<Pod>> = ctx
        .pods
        .list_namespace(ns)
        .into_iter()
        .filter(|p| selector_matches(&svc, p.metadata.labels.as_ref()))
        .collect();
    let pods: Vec<&Pod> = pods.iter().map(|p| p.as_ref()).collect();
    let existing: Vec<EndpointSlice> = ctx
        .slices
        .list_namespace(ns)
        .into_iter()
        .filter(|s| slice_service_key(s, CONTROLLER_NAME).as_deref() == Some(key))
        .map(|s| (*s).clone())
        .collect();
    if ctx.tracker.stale(key, &existing) {
        return Err(format!(
            "{key}: EndpointSlice informer cache is out of date"
        ));
    }
    let trigger = ctx.trigger_times.compute(key, &svc, &pods);
    let nodes = ctx.nodes.clone();
    let node_zone = move |node: &str| -> Option<Option<String>> {
        let node = nodes.get(node)?;
        Some(
            node.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("topology.kubernetes.io/zone"))
                .cloned(),
        )
    };
    let plan = reconciler::reconcile(
        &svc,
        &pods,
        &node_zone,
        &existing,
        ctx.max_per_slice,
        CONTROLLER_NAME,
    );
    let with_trigger = |mut s: EndpointSlice| {
        let mut a = s.metadata.annotations.take().unwrap_or_default();
        match trigger {
            Some(t) => a.insert(LAST_CHANGE_TRIGGER_TIME.into(), rfc3339_nano(t)),
            None => a.remove(LAST_CHANGE_TRIGGER_TIME),
        };
        s.metadata.annotations = (!a.is_empty()).then_some(a);
        s
    };
    let api: Api<EndpointSlice> = Api::namespaced(ctx.client.clone(), ns);
    let mut errors = Vec::new();
    // No new slices for a Service being deleted: the garbage collector would race them.
    if svc.metadata.deletion_timestamp.is_none() {
        for slice in plan.create {
            match api
                .create(&PostParams::default(), &with_trigger(slice))
                .await
            {
                Ok(created) => ctx.tracker.wrote(key, &created),
                Err(kube::Error::Api(e)) if crate::endpoint::is_ns_terminating(&e) => return Ok(()),
                Err(e) => errors.push(format!("create EndpointSlice for {key}: {e}")),
            }
        }
    }
    for slice in plan.update {
        let slice_name = slice.metadata.name.clone().unwrap_or_default();
        match api
            .replace(&slice_name, &PostParams::default(), &with_trigger(slice))
            .await
        {
            Ok(updated) => ctx.tracker.wrote(key, &updated),
            Err(e) => errors.push(format!("update EndpointSlice {slice_name}: {e}")),
        }
    }
    for slice in plan.delete {
        let slice_name = slice.metadata.name.clone().unwrap_or_default();
        match api.delete(&slice_name, &DeleteParams::default()).await {
            Ok(_) => ctx.tracker.deleted(key, &slice),
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => errors.push(format!("delete EndpointSlice {slice_name}: {e}")),
        }
    }
    if !plan.skipped_pods.is_empty() {
        errors.push(format!(
            "{key}: skipped pods whose node is unknown: {}",
            plan.skipped_pods.join(", ")
        ));
    }
    tracing::debug!(service = name, "synced EndpointSlices");
    if errors.is_empty() {
        Ok(())
    } else {
        let message = format!(
            "Error updating Endpoint Slices for Service {key}: {}",
            errors.join("; ")
        );
        ctx.recorder.event(
            &util::object_ref("Service", &svc.metadata),
            client::events::EventType::Warning,
            "FailedToUpdateEndpointSlices",
            &message,
        );
        Err(errors.join("; "))
    }
}
