//! The Endpoints controller (upstream `pkg/controller/endpoint`): for every Service with a selector,
//! an Endpoints object of the same name listing the selected pods' addresses (see [`subsets`]).
//! Endpoints of Services without a selector are the user's and are left alone; Endpoints whose Service
//! is gone are deleted (also once at startup, for Services deleted while the controller was down).

pub mod subsets;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use client::controller::{Controller, EnqueueHandler};
use client::informer::{object_key, split_key, EventHandlerFuncs, SharedInformerFactory, Store};
use client::workqueue::{default_controller_rate_limiter, QueueConfig, RateLimitingQueue};
use k8s_openapi::api::core::v1::{Endpoints, Pod, Service};
use kube::api::{DeleteParams, PostParams};
use kube::Api;

use crate::endpointslice::util::{services_for_pod, TriggerTimeTracker, LEADER_ANNOTATION};

struct Ctx {
    client: kube::Client,
    services: Arc<Store<Service>>,
    pods: Arc<Store<Pod>>,
    endpoints: Arc<Store<Endpoints>>,
    trigger_times: TriggerTimeTracker,
    /// Per Service, the resourceVersion its Endpoints had before our last update: seeing it again in
    /// the cache means the cache is behind (upstream `staleEndpointsTracker`).
    replaced_versions: Mutex<HashMap<String, String>>,
    /// Services whose sync found the cache behind: the Endpoints update that catches the cache up
    /// queues them again. Upstream returns an error and retries with backoff instead, and a burst
    /// of pod events can use up the 15 retries before the watch delivers our own write, leaving
    /// the Endpoints out of date until the next unrelated change.
    waiting_for_cache: Arc<Mutex<HashSet<String>>>,
    queue: RateLimitingQueue<String>,
    recorder: client::events::Recorder,
    _events: client::events::EventBroadcaster,
}

pub async fn run(client: kube::Client, factory: &SharedInformerFactory, workers: usize) {
    let svc_informer = factory.informer::<Service>();
    let pod_informer = factory.informer::<Pod>();
    let ep_informer = factory.informer::<Endpoints>();
    let queue = RateLimitingQueue::with_config(
        default_controller_rate_limiter::<String>(),
        QueueConfig::named("endpoint"),
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
    // A deleted Endpoints object of a selecting Service is re-created.
    let q4 = queue.clone();
    let waiting_for_cache = Arc::new(Mutex::new(HashSet::new()));
    let (w5, q5) = (waiting_for_cache.clone(), queue.clone());
    ep_informer.add_event_handler(
        EventHandlerFuncs::new()
            .on_update(move |_, ep: &Arc<Endpoints>| {
                let key = object_key(ep.as_ref());
                if lock(&w5).remove(&key) {
                    q5.add(key);
                }
            })
            .on_delete(move |d| q4.add(d.key())),
    );
    let (events, recorder) =
        crate::endpointslice::util::event_recorder(&client, "endpoint-controller");
    let ctx = Arc::new(Ctx {
        recorder,
        _events: events,
        client,
        services,
        pods: pod_informer.store(),
        endpoints: ep_informer.store(),
        trigger_times: TriggerTimeTracker::default(),
        replaced_versions: Mutex::new(HashMap::new()),
        waiting_for_cache,
        queue: queue.clone(),
    });
    factory.start();
    factory.wait_for_cache_sync().await;
    // Endpoints left over from Services deleted while we were not running.
    for ep in ctx.endpoints.list() {
        let leader = ep
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(LEADER_ANNOTATION));
        if !leader {
            queue.add(object_key(ep.as_ref()));
        }
    }
    Controller::new("endpoint", queue)
        .with_max_retries(15)
        .run(workers, move |key: String| {
            let ctx = ctx.clone();
            async move { sync_service(&ctx, &key).await }
        })
        .await;
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Ctx {
    fn versions(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        lock(&self.replaced_versions)
    }

    fn cache_behind(&self, key: &str, current: Option<&Endpoints>) -> bool {
        let rv = current.and_then(|e| e.metadata.resource_version.as_ref());
        rv.is_some() && self.versions().get(key) == rv
    }

    /// Whether the cached Endpoints are older than our last write; if so the Service is parked
    /// until the informer delivers that write (see `waiting_for_cache`).
    fn park_if_cache_behind(&self, key: &str, current: Option<&Endpoints>) -> bool {
        if !self.cache_behind(key, current) {
            return false;
        }
        lock(&self.waiting_for_cache).insert(key.to_string());
        // The informer updates its store before calling handlers, so reading again after parking
        // means either the handler finds the key parked or this read sees the newer version.
        if self.cache_behind(key, self.endpoints.get(key).as_deref()) {
            return true;
        }
        if lock(&self.waiting_for_cache).remove(key) {
            self.queue.add(key.to_string());
        }
        true
    }
}

async fn sync_service(ctx: &Ctx, key: &str) -> Result<(), String> {
    let (ns, name) = split_key(key);
    let ns = ns.unwrap_or_default();
    let api: Api<Endpoints> = Api::namespaced(ctx.client.clone(), ns);
    let Some(svc) = ctx.services.get(key) else {
        // The Service is gone: so are its Endpoints.
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(format!("delete endpoints: {e}")),
        }
        ctx.trigger_times.delete(key);
        ctx.versions().remove(key);
        lock(&ctx.waiting_for_cache).remove(key);
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
        .filter(|p| crate::endpointslice::util::selector_matches(&svc, p.metadata.labels.as_ref()))
        .collect();
    let pods: Vec<&Pod> = pods.iter().map(|p| p.as_ref()).collect();
    // Computed on every sync so the tracker's state follows even when nothing is written.
    let trigger = ctx.trigger_times.compute(key, &svc, &pods);
    let current = ctx.endpoints.get(key);
    if ctx.park_if_cache_behind(key, current.as_deref()) {
        tracing::debug!(
            key,
            "endpoints informer cache is out of date; waiting for it"
        );
        return Ok(());
    }
    let Some(new) = subsets::desired_endpoints(&svc, &pods, current.as_deref(), trigger) else {
        return Ok(());
    };
    let result = if current.is_some() {
        api.replace(name, &PostParams::default(), &new).await
    } else {
        api.create(&PostParams::default(), &new).await
    };
    match result {
        Ok(written) => {
            let old = current.and_then(|c| c.metadata.resource_version.clone());
            if old.is_some() && old != written.metadata.resource_version {
                ctx.versions()
                    .insert(key.to_string(), old.unwrap_or_default());
            }
            Ok(())
        }
        // Creates in a terminating namespace keep failing: drop the item.
        Err(kube::Error::Api(e)) if current.is_none() && e.code == 403 && is_ns_terminating(&e) => {
            Ok(())
        }
        Err(e) => {
            let (reason, message) = if current.is_none() {
                (
                    "FailedToCreateEndpoint",
                    format!("Failed to create endpoint for service {key}: {e}"),
                )
            } else {
                (
                    "FailedToUpdateEndpoint",
                    format!("Failed to update endpoint {key}: {e}"),
                )
            };
            let target = crate::endpointslice::util::object_ref("Endpoints", &new.metadata);
            ctx.recorder.event(
                &target,
                client::events::EventType::Warning,
                reason,
                &message,
            );
            Err(format!("write endpoints: {e}"))
        }
    }
}

/// Whether the error says the namespace is terminating (upstream `NamespaceTerminatingCause`).
pub(crate) fn is_ns_terminating(e: &kube::core::Status) -> bool {
    e.details
        .iter()
        .flat_map(|d| d.causes.iter())
        .any(|c| c.reason == "NamespaceTerminating")
}
