//! The ReplicaSet controller (upstream `pkg/controller/replicaset`): keeps `spec.replicas` pods of a
//! ReplicaSet's template alive. The ReplicationController controller is the same controller over
//! ReplicationControllers seen as ReplicaSets (as upstream's `pkg/controller/replication` does). Pods are created in slow-start batches (1, 2, 4, ...) and deleted in
//! upstream's order; orphans matching the selector are adopted, owned pods that stop matching are
//! released; expectations keep a stale cache from causing duplicate creates or deletes.

pub mod expectations;
pub mod sync;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use client::controller::{Controller, EnqueueHandler};
use client::events::{ApiEventSink, EventBroadcaster, EventType, Recorder};
use client::informer::{split_key, EventHandlerFuncs, SharedInformerFactory};
use client::workqueue::{default_controller_rate_limiter, QueueConfig, RateLimitingQueue};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{ObjectReference, Pod, ReplicationController};
use kube::api::{ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::json;

use expectations::{PodEvents, UidTrackingExpectations};

/// Pod deletes of one sync in flight at once.
const DELETES_IN_FLIGHT: usize = 32;

/// Expectations older than this are dropped (upstream `ExpectationsTimeout`).
const EXPECTATIONS_TIMEOUT: Duration = Duration::from_secs(300);

/// Creates and deletes a controller is still waiting to see, counted (upstream `ControllerExpectations`;
/// the DaemonSet and Job controllers). The ReplicaSet controller tracks deletions by pod instead
/// ([`expectations::UidTrackingExpectations`]).
#[derive(Default)]
pub struct Expectations {
    pending: Mutex<HashMap<String, (i64, i64, Instant)>>,
}

impl Expectations {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (i64, i64, Instant)>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn expect(&self, key: &str, adds: i64, dels: i64) {
        self.lock()
            .insert(key.to_string(), (adds, dels, Instant::now()));
    }

    pub fn satisfied(&self, key: &str) -> bool {
        match self.lock().get(key) {
            None => true,
            Some((adds, dels, at)) => {
                (*adds <= 0 && *dels <= 0) || at.elapsed() > EXPECTATIONS_TIMEOUT
            }
        }
    }

    pub fn observed(&self, key: &str, adds: i64, dels: i64) {
        if let Some(e) = self.lock().get_mut(key) {
            e.0 -= adds;
            e.1 -= dels;
        }
    }

    pub fn forget(&self, key: &str) {
        self.lock().remove(key);
    }
}

/// The owner kind the controller runs for.
#[derive(Clone, Copy, Debug)]
pub struct OwnerKind {
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub plural: &'static str,
}

impl OwnerKind {
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

pub const REPLICA_SET: OwnerKind = OwnerKind {
    group: "apps",
    version: "v1",
    kind: "ReplicaSet",
    plural: "replicasets",
};

pub const REPLICATION_CONTROLLER: OwnerKind = OwnerKind {
    group: "",
    version: "v1",
    kind: "ReplicationController",
    plural: "replicationcontrollers",
};

/// The controlled objects, as ReplicaSets.
trait Source: Send + Sync {
    fn get(&self, key: &str) -> Option<Arc<ReplicaSet>>;
    fn list_namespace(&self, ns: &str) -> Vec<Arc<ReplicaSet>>;
}

impl Source for client::informer::Store<ReplicaSet> {
    fn get(&self, key: &str) -> Option<Arc<ReplicaSet>> {
        client::informer::Store::get(self, key)
    }
    fn list_namespace(&self, ns: &str) -> Vec<Arc<ReplicaSet>> {
        client::informer::Store::list_namespace(self, ns)
    }
}

impl Source for client::informer::Store<ReplicationController> {
    fn get(&self, key: &str) -> Option<Arc<ReplicaSet>> {
        client::informer::Store::get(self, key).map(|rc| Arc::new(sync::as_replicaset(&rc)))
    }
    fn list_namespace(&self, ns: &str) -> Vec<Arc<ReplicaSet>> {
        client::informer::Store::list_namespace(self, ns)
            .iter()
            .map(|rc| Arc::new(sync::as_replicaset(rc)))
            .collect()
    }
}

struct Ctx {
    client: kube::Client,
    recorder: Recorder,
    kind: OwnerKind,
    replicasets: Arc<dyn Source>,
    pods: Arc<client::informer::Store<Pod>>,
    expectations: UidTrackingExpectations,
    queue: RateLimitingQueue<String>,
}

impl Ctx {
    /// Records an event about the controlled object (upstream `RealPodControl`'s events).
    fn event(&self, rs: &ReplicaSet, type_: EventType, reason: &str, message: &str) {
        let reference = ObjectReference {
            api_version: Some(self.kind.api_version()),
            kind: Some(self.kind.kind.to_string()),
            name: rs.metadata.name.clone(),
            namespace: rs.metadata.namespace.clone(),
            uid: rs.metadata.uid.clone(),
            resource_version: rs.metadata.resource_version.clone(),
            ..Default::default()
        };
        self.recorder.event(&reference, type_, reason, message);
    }

    /// The key of the object of our kind controlling this pod, if any.
    fn owner_key(&self, pod: &Pod) -> Option<String> {
        crate::controller_key(&pod.metadata, self.kind.kind)
    }

    fn pod_events(&self) -> PodEvents<'_> {
        PodEvents {
            kind: self.kind,
            expectations: &self.expectations,
        }
    }
}

/// The ReplicaSet controller.
pub async fn run(client: kube::Client, factory: &SharedInformerFactory, workers: usize) {
    let informer = factory.informer::<ReplicaSet>();
    let queue = RateLimitingQueue::with_config(
        default_controller_rate_limiter::<String>(),
        QueueConfig::named("replicaset"),
    );
    informer.add_event_handler(EnqueueHandler::new(queue.clone()));
    run_for(
        REPLICA_SET,
        informer.store(),
        queue,
        client,
        factory,
        workers,
    )
    .await;
}

/// The ReplicationController controller (upstream `replicationcontroller-controller`).
pub async fn run_replication_controllers(
    client: kube::Client,
    factory: &SharedInformerFactory,
    workers: usize,
) {
    let informer = factory.informer::<ReplicationController>();
    let queue = RateLimitingQueue::with_config(
        default_controller_rate_limiter::<String>(),
        QueueConfig::named("replicationmanager"),
    );
    informer.add_event_handler(EnqueueHandler::new(queue.clone()));
    run_for(
        REPLICATION_CONTROLLER,
        informer.store(),
        queue,
        client,
        factory,
        workers,
    )
    .await;
}

async fn run_for(
    kind: OwnerKind,
    source: Arc<dyn Source>,
    queue: RateLimitingQueue<String>,
    client: kube::Client,
    factory: &SharedInformerFactory,
    workers: usize,
) {
    let pod_informer = factory.informer::<Pod>();
    let broadcaster = EventBroadcaster::new();
    broadcaster.start_recording_to_sink(ApiEventSink::new(client.clone()));
    // Upstream's component names: "replicaset-controller", "replication-controller".
    let component = match kind.kind {
        "ReplicaSet" => "replicaset-controller",
        _ => "replication-controller",
    };
    let ctx = Arc::new(Ctx {
        client,
        recorder: broadcaster.new_recorder(component, ""),
        kind,
        replicasets: source,
        pods: pod_informer.store(),
        expectations: UidTrackingExpectations::default(),
        queue: queue.clone(),
    });
    let (c_add, c_update, c_delete) = (ctx.clone(), ctx.clone(), ctx.clone());
    pod_informer.add_event_handler(
        EventHandlerFuncs::new()
            .on_add(move |p: &Arc<Pod>, _| {
                let keys = c_add.pod_events().added(p);
                if keys.is_empty() && c_add.owner_key(p).is_none() {
                    enqueue_matching(&c_add, p);
                }
                keys.into_iter().for_each(|k| c_add.queue.add(k));
            })
            .on_update(move |old: &Arc<Pod>, new: &Arc<Pod>| {
                for key in c_update.pod_events().updated(old, new) {
                    c_update.queue.add(key);
                }
                if c_update.owner_key(new).is_none() {
                    enqueue_matching(&c_update, new);
                }
            })
            .on_delete(move |d| {
                for key in c_delete.pod_events().deleted(d.object()) {
                    c_delete.queue.add(key);
                }
            }),
    );
    factory.start();
    factory.wait_for_cache_sync().await;
    let controller = Controller::new(kind.plural, queue).with_max_retries(15);
    controller
        .run(workers, move |key: String| {
            let ctx = ctx.clone();
            async move { sync_replicaset(&ctx, &key).await }
        })
        .await;
}

/// An orphan pod may be adopted by a ReplicaSet whose selector matches it.
fn enqueue_matching(ctx: &Ctx, pod: &Pod) {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("");
    let labels: serde_json::Map<String, serde_json::Value> = pod
        .metadata
        .labels
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), json!(v)))
        .collect();
    for rs in ctx.replicasets.list_namespace(ns) {
        let selector = rs
            .spec
            .as_ref()
            .map(|s| serde_json::to_value(&s.selector).unwrap_or_default());
        let matches = selector
            .and_then(|s| apimachinery::labels::selector_from_label_selector(&s).ok())
            .is_some_and(|s| !s.is_empty() && s.matches(&labels));
        if matches {
            ctx.queue.add(format!(
                "{ns}/{}",
                rs.metadata.name.as_deref().unwrap_or("")
            ));
        }
    }
}

async fn sync_replicaset(ctx: &Ctx, key: &str) -> Result<(), String> {
    let Some(rs) = ctx.replicasets.get(key) else {
        ctx.expectations.forget(key);
        return Ok(());
    };
    let (ns, name) = split_key(key);
    let ns = ns.unwrap_or_default();
    let selector_value =
        serde_json::to_value(rs.spec.as_ref().map(|s| &s.selector)).unwrap_or_default();
    let selector = apimachinery::labels::selector_from_label_selector(&selector_value)
        .map_err(|e| format!("{key}: invalid selector: {e}"))?;
    let pods_api: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    // Expectations before the pod list, as upstream: the events that met them updated the cache
    // before they were counted, so the list read next includes them. Read after the list, they
    // could be met by an event the list missed, and a pod already deleted would be deleted again.
    let needs_sync = ctx.expectations.satisfied(key);
    let claim = sync::claim(&rs, &selector, &ctx.pods.list_namespace(ns));
    for pod in &claim.adopt {
        let patch = json!({"metadata": {"ownerReferences": [{"apiVersion": ctx.kind.api_version(), "kind": ctx.kind.kind,
            "name": name, "uid": rs.metadata.uid, "controller": true, "blockOwnerDeletion": true}],
            "uid": pod.metadata.uid}});
        pods_api
            .patch(
                pod.metadata.name.as_deref().unwrap_or(""),
                &PatchParams::default(),
                &Patch::Strategic(&patch),
            )
            .await
            .map_err(|e| format!("adopt: {e}"))?;
    }
    for pod in &claim.release {
        let patch = json!({"metadata": {"ownerReferences": [{"$patch": "delete", "uid": rs.metadata.uid}], "uid": pod.metadata.uid}});
        pods_api
            .patch(
                pod.metadata.name.as_deref().unwrap_or(""),
                &PatchParams::default(),
                &Patch::Strategic(&patch),
            )
            .await
            .map_err(|e| format!("release: {e}"))?;
    }
    let mut active: Vec<Arc<Pod>> = claim
        .owned
        .iter()
        .filter(|p| sync::is_active(p))
        .cloned()
        .collect();
    let wanted = rs
        .spec
        .as_ref()
        .and_then(|s| s.replicas)
        .unwrap_or(1)
        .max(0) as usize;
    // A failure to create or delete is reported in the status before it is returned (upstream).
    let mut failure: Option<(&str, String)> = None;
    if needs_sync && rs.metadata.deletion_timestamp.is_none() {
        if active.len() < wanted {
            let diff = (wanted - active.len()).min(sync::BURST_REPLICAS);
            if let Err(e) = create_pods(ctx, key, &rs, &pods_api, diff).await {
                failure = Some(("FailedCreate", e));
            }
        } else if active.len() > wanted {
            let diff = (active.len() - wanted).min(sync::BURST_REPLICAS);
            active.sort_by(|a, b| sync::deletion_order(a, b));
            let doomed: Vec<&Pod> = active.iter().take(diff).map(|p| p.as_ref()).collect();
            ctx.pod_events().deleting(key, &doomed);
            // In parallel, as upstream (a goroutine per pod), at most DELETES_IN_FLIGHT at once:
            // the kube client speaks HTTP/1.1, one connection per request in flight. Every
            // pod is tried, so none is left expected but never deleted.
            let names: Vec<String> = doomed
                .iter()
                .map(|p| p.metadata.name.clone().unwrap_or_default())
                .collect();
            let results: Vec<_> = futures::stream::iter(names.into_iter().map(|name| {
                let api = pods_api.clone();
                async move { api.delete(&name, &DeleteParams::default()).await }
            }))
            .buffered(DELETES_IN_FLIGHT)
            .collect()
            .await;
            for (pod, result) in doomed.iter().zip(results) {
                let pod_name = pod.metadata.name.as_deref().unwrap_or("");
                match result {
                    Ok(_) => ctx.event(
                        &rs,
                        EventType::Normal,
                        "SuccessfulDelete",
                        &format!("Deleted pod: {pod_name}"),
                    ),
                    Err(kube::Error::Api(e)) if e.code == 404 => {
                        ctx.pod_events().delete_not_observed(key, pod)
                    }
                    Err(e) => {
                        ctx.pod_events().delete_not_observed(key, pod);
                        let message = crate::api_error_message(&e);
                        ctx.event(
                            &rs,
                            EventType::Warning,
                            "FailedDelete",
                            &format!("Error deleting: {message}"),
                        );
                        failure.get_or_insert(("FailedDelete", message));
                    }
                }
            }
        }
    }
    let now = jiff::Timestamp::now();
    let (mut status, recheck) = sync::status(&rs, &claim.owned, now);
    let current = serde_json::to_value(&rs.status).unwrap_or_default();
    let mut changed = [
        "replicas",
        "fullyLabeledReplicas",
        "readyReplicas",
        "availableReplicas",
        "observedGeneration",
    ]
    .iter()
    .any(|f| current.get(f).unwrap_or(&json!(0)) != &status[f]);
    if let Some(conditions) = sync::replica_failure_conditions(&rs, failure.as_ref(), now) {
        status["conditions"] = conditions;
        changed = true;
    }
    if changed {
        let resource = ApiResource {
            group: ctx.kind.group.into(),
            version: ctx.kind.version.into(),
            api_version: ctx.kind.api_version(),
            kind: ctx.kind.kind.into(),
            plural: ctx.kind.plural.into(),
        };
        let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), ns, &resource);
        api.patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": status})),
        )
        .await
        .map_err(|e| format!("status: {e}"))?;
    }
    if let Some((_, e)) = failure {
        return Err(e);
    }
    if let Some(after) = recheck {
        ctx.queue.add_after(key.to_string(), after);
    }
    Ok(())
}

/// Creates `count` pods in batches of 1, 2, 4, ... stopping at the first failure (upstream
/// `slowStartBatch`), so a broken template does not flood the API with failing creates.
async fn create_pods(
    ctx: &Ctx,
    key: &str,
    rs: &ReplicaSet,
    api: &Api<Pod>,
    count: usize,
) -> Result<(), String> {
    ctx.expectations.expect_creations(key, count);
    let pod: Pod =
        serde_json::from_value(sync::pod_from_template(rs, ctx.kind)).map_err(|e| e.to_string())?;
    let params = PostParams::default();
    let (mut done, mut batch) = (0usize, 1usize);
    while done < count {
        let n = batch.min(count - done);
        let results = futures::future::join_all((0..n).map(|_| api.create(&params, &pod))).await;
        done += n;
        let mut failed = 0;
        let mut first_error = None;
        for result in results {
            match result {
                Ok(created) => ctx.event(
                    rs,
                    EventType::Normal,
                    "SuccessfulCreate",
                    &format!(
                        "Created pod: {}",
                        created.metadata.name.as_deref().unwrap_or("")
                    ),
                ),
                Err(e) => {
                    failed += 1;
                    let message = crate::api_error_message(&e);
                    // No event while the namespace is going away (upstream).
                    if !matches!(&e, kube::Error::Api(s) if crate::endpoint::is_ns_terminating(s)) {
                        ctx.event(
                            rs,
                            EventType::Warning,
                            "FailedCreate",
                            &format!("Error creating: {message}"),
                        );
                    }
                    first_error.get_or_insert(message);
                }
            }
        }
        if let Some(err) = first_error {
            // Creates that did not happen (and the skipped ones) will never be observed.
            ctx.expectations
                .creations_observed(key, failed + count - done);
            return Err(err);
        }
        batch *= 2;
    }
    Ok(())
}
