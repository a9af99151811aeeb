//! The device taint eviction controller (upstream `pkg/controller/devicetainteviction`,
//! `device-taint-eviction-controller`; feature DRADeviceTaints, beta and on by default in 1.36): a
//! scheduled pod using a ResourceClaim whose allocated device has a NoExecute taint (in its
//! ResourceSlice) that the allocation result's tolerations do not tolerate is deleted; one that
//! tolerates it for `tolerationSeconds` is deleted that long after the taint's `timeAdded`. Before
//! deleting, the pod gets the `DisruptionTarget` condition (reason
//! `DeletionByDeviceTaintManager`) and a `DeviceTaintManagerEviction` event, as upstream's. The
//! decisions are in [`decide`].
//!
//! Differences: DeviceTaintRules (feature DRADeviceTaintRules, alpha and off in 1.36) are not
//! read, so only the drivers' own taints evict; each pod's sync looks at every ResourceSlice
//! (upstream indexes slices by pool and keeps each claim's eviction time between events); a
//! cancelled eviction gets no "Cancelling deletion" event; no metrics.

pub mod decide;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use client::controller::Controller;
use client::events::{ApiEventSink, EventBroadcaster, EventType, Recorder};
use client::informer::{split_key, EventHandlerFuncs, SharedInformerFactory, Store};
use client::workqueue::{default_controller_rate_limiter, QueueConfig, RateLimitingQueue};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use kube::{Api, Resource};

use crate::util::eviction::{mark_disruption_target_and_delete, DisruptionTarget};

pub const CONTROLLER_NAME: &str = "device-taint-eviction-controller";
/// Pods already evicted, remembered so a late informer event does not evict them again (upstream
/// keeps the last 500 UIDs).
const MAX_EVICTED: usize = 500;

struct Ctx {
    client: kube::Client,
    pods: Arc<Store<Pod>>,
    claims: Arc<Store<ResourceClaim>>,
    slices: Arc<Store<ResourceSlice>>,
    queue: RateLimitingQueue<String>,
    recorder: Recorder,
    evicted: Mutex<(HashSet<String>, std::collections::VecDeque<String>)>,
}

impl Ctx {
    /// The pods a claim is reserved for.
    fn enqueue_claim_pods(&self, claim: &ResourceClaim) {
        let ns = claim.metadata.namespace.as_deref().unwrap_or("");
        for r in claim
            .status
            .as_ref()
            .and_then(|s| s.reserved_for.as_ref())
            .into_iter()
            .flatten()
            .filter(|r| r.resource == "pods" && r.api_group.as_deref().unwrap_or("").is_empty())
        {
            self.queue.add(format!("{ns}/{}", r.name));
        }
    }

    /// The pods of every claim with a device in the slice's pool.
    fn enqueue_pool_pods(&self, slice: &ResourceSlice) {
        let (driver, pool) = (&slice.spec.driver, &slice.spec.pool.name);
        for claim in self.claims.list() {
            let uses = claim
                .status
                .as_ref()
                .and_then(|s| s.allocation.as_ref())
                .and_then(|a| a.devices.as_ref())
                .and_then(|d| d.results.as_ref())
                .is_some_and(|rs| rs.iter().any(|r| &r.driver == driver && &r.pool == pool));
            if uses {
                self.enqueue_claim_pods(&claim);
            }
        }
    }

    fn was_evicted(&self, uid: &str) -> bool {
        self.evicted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .0
            .contains(uid)
    }

    fn remember_evicted(&self, uid: String) {
        let mut guard = self.evicted.lock().unwrap_or_else(|e| e.into_inner());
        let (set, order) = &mut *guard;
        if set.insert(uid.clone()) {
            order.push_back(uid);
        }
        while order.len() > MAX_EVICTED {
            if let Some(old) = order.pop_front() {
                set.remove(&old);
            }
        }
    }
}

fn pod_key(p: &Pod) -> String {
    format!(
        "{}/{}",
        p.metadata.namespace.as_deref().unwrap_or(""),
        p.metadata.name.as_deref().unwrap_or("")
    )
}

fn has_claims(p: &Pod) -> bool {
    !crate::resourceclaim::decide::pod_claims(p).is_empty()
}

pub async fn run(client: kube::Client, factory: &SharedInformerFactory, workers: usize) {
    let pod_informer = factory.informer::<Pod>();
    let claim_informer = factory.informer::<ResourceClaim>();
    let slice_informer = factory.informer::<ResourceSlice>();
    let broadcaster = EventBroadcaster::new();
    broadcaster.start_recording_to_sink(ApiEventSink::new(client.clone()));
    let ctx = Arc::new(Ctx {
        client,
        pods: pod_informer.store(),
        claims: claim_informer.store(),
        slices: slice_informer.store(),
        queue: RateLimitingQueue::with_config(
            default_controller_rate_limiter::<String>(),
            QueueConfig::named("device_taint_eviction"),
        ),
        recorder: broadcaster.new_recorder(CONTROLLER_NAME, ""),
        evicted: Mutex::default(),
    });
    let (p1, p2) = (ctx.clone(), ctx.clone());
    pod_informer.add_event_handler(
        EventHandlerFuncs::new()
            .on_add(move |p: &Arc<Pod>, _| {
                if has_claims(p) {
                    p1.queue.add(pod_key(p))
                }
            })
            // As upstream: only a new node or new claim statuses can change a pod's verdict (and
            // the condition this controller adds does not bring the pod back).
            .on_update(move |old: &Arc<Pod>, new: &Arc<Pod>| {
                let node = |p: &Pod| p.spec.as_ref().and_then(|s| s.node_name.clone());
                let statuses = |p: &Pod| {
                    p.status
                        .as_ref()
                        .and_then(|s| s.resource_claim_statuses.clone())
                };
                if has_claims(new) && (node(old) != node(new) || statuses(old) != statuses(new)) {
                    p2.queue.add(pod_key(new))
                }
            }),
    );
    let (c1, c2, c3) = (ctx.clone(), ctx.clone(), ctx.clone());
    claim_informer.add_event_handler(
        EventHandlerFuncs::new()
            .on_add(move |c: &Arc<ResourceClaim>, _| c1.enqueue_claim_pods(c))
            .on_update(move |old: &Arc<ResourceClaim>, new: &Arc<ResourceClaim>| {
                c2.enqueue_claim_pods(old);
                c2.enqueue_claim_pods(new);
            })
            .on_delete(move |d| c3.enqueue_claim_pods(d.object())),
    );
    let (s1, s2, s3) = (ctx.clone(), ctx.clone(), ctx.clone());
    slice_informer.add_event_handler(
        EventHandlerFuncs::new()
            .on_add(move |s: &Arc<ResourceSlice>, _| s1.enqueue_pool_pods(s))
            .on_update(move |old: &Arc<ResourceSlice>, new: &Arc<ResourceSlice>| {
                let taints = |s: &ResourceSlice| {
                    s.spec
                        .devices
                        .iter()
                        .flatten()
                        .map(|d| d.taints.clone())
                        .collect::<Vec<_>>()
                };
                if taints(old) != taints(new) || old.spec.pool != new.spec.pool {
                    s2.enqueue_pool_pods(new)
                }
            })
            .on_delete(move |d| s3.enqueue_pool_pods(d.object())),
    );
    factory.start();
    factory.wait_for_cache_sync().await;
    Controller::new(CONTROLLER_NAME, ctx.queue.clone())
        .run(workers, move |key: String| {
            let ctx = ctx.clone();
            async move { sync_pod(&ctx, &key).await }
        })
        .await;
}

async fn sync_pod(ctx: &Ctx, key: &str) -> Result<(), String> {
    let Some(pod) = ctx.pods.get(key) else {
        return Ok(());
    };
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    if pod.metadata.deletion_timestamp.is_some() || ctx.was_evicted(&uid) {
        return Ok(());
    }
    let slices = ctx.slices.list();
    let slices: Vec<&ResourceSlice> = slices.iter().map(|s| s.as_ref()).collect();
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let Some(eviction) = decide::pod_eviction(&pod, |name| {
        let claim = ctx.claims.get(&format!("{ns}/{name}"))?;
        let eviction = decide::claim_eviction(&claim, &slices);
        Some((claim, eviction))
    }) else {
        return Ok(());
    };
    let wait = eviction.when.duration_since(jiff::Timestamp::now());
    if wait.is_positive() {
        // Checked again then: the taint or the claim may have changed meanwhile.
        let wait = Duration::try_from(wait).unwrap_or(Duration::from_secs(1));
        ctx.queue.add_after(key.to_string(), wait);
        return Ok(());
    }
    tracing::info!(pod = key, reasons = ?eviction.reasons, "evicting pod: device taint not tolerated");
    evict(ctx, &pod).await?;
    ctx.remember_evicted(uid);
    Ok(())
}

/// Upstream `addConditionAndDeletePod`: the DisruptionTarget condition, then a delete that must
/// hit this very pod (UID precondition), not a new one of the same name.
async fn evict(ctx: &Ctx, pod: &Pod) -> Result<(), String> {
    let key = pod_key(pod);
    let (ns, name) = split_key(&key);
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), ns.unwrap_or(""));
    ctx.recorder.event(
        &pod.object_ref(&()),
        EventType::Normal,
        "DeviceTaintManagerEviction",
        "Marking for deletion",
    );
    mark_disruption_target_and_delete(
        &api,
        name,
        DisruptionTarget {
            reason: "DeletionByDeviceTaintManager",
            message: "Device Taint manager: deleting due to NoExecute taint",
        },
        pod.metadata.uid.clone(),
    )
    .await
}
