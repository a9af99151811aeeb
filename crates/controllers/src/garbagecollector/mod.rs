//! The garbage collector (upstream `pkg/controller/garbagecollector`): deletes objects whose owners
//! are all gone (background cascading deletion), deletes the dependents of owners deleted in the
//! foreground before letting the owner go, and orphans the dependents of owners deleted with the
//! `orphan` finalizer.
//!
//! Every resource the server serves that supports list, watch and delete (custom resources included,
//! re-discovered every 30 s) is followed by a metadata-only informer (a "monitor"); their events build
//! the dependency [`graph`] in one task, which hands uids to two work queues: attempt-to-delete and
//! attempt-to-orphan. Workers verify owners with a live GET by name and uid before acting, and delete
//! with a uid precondition, so a stale cache never deletes the wrong object.
//!
//! Pods and ReplicaSets are followed through the shared informer factory's typed informers, which
//! other controllers and the scheduler keep anyway (upstream's `InformerFactory.ForResource` prefers
//! the typed informer for every built-in kind): one cached copy of each pod, not two.
//!
//! Differences from upstream: other monitors are this controller's own metadata informers (not a
//! shared metadata informer factory), so monitors of resources that disappear can be stopped (a
//! shared one loses only this controller's handler); ownerReferences and
//! finalizers are rewritten with a JSON merge patch carrying the read resourceVersion (upstream uses
//! strategic merge / JSON patches), which works the same for built-in and custom resources.

pub mod discovery;
pub mod graph;
pub mod sync;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Duration;

use client::controller::Controller;
use client::events::{ApiEventSink, EventBroadcaster, EventType as RecordedType, Recorder};
use client::informer::{
    metadata_informer, EventHandlerFuncs, HandlerRegistration, InformerConfig, SharedInformer,
    SharedInformerFactory,
};
use client::workqueue::{default_controller_rate_limiter, QueueConfig, RateLimitingQueue};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, Preconditions, PropagationPolicy,
};
use kube::core::PartialObjectMeta;
use kube::{Api, Client};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use discovery::{Discovered, Discovery};
use graph::{Action, EventType, Graph, GraphEvent, Identity, Node};
use sync::{Decision, OwnerState};

/// Upstream `--concurrent-gc-syncs` default.
const GC_WORKERS: usize = 20;
/// How often resources are re-discovered (upstream's GC resync period).
const DISCOVERY_PERIOD: Duration = Duration::from_secs(30);
/// How long the first sync of the monitors is waited for before workers start anyway.
const SYNC_TIMEOUT: Duration = Duration::from_secs(60);
/// Resources the collector never follows (upstream `DefaultIgnoredResources`).
const IGNORED: &[(&str, &str)] = &[("", "events"), ("events.k8s.io", "events")];

type Meta = PartialObjectMeta<DynamicObject>;

/// What follows one resource for the graph.
#[derive(Clone)]
enum Monitor {
    /// The collector's own metadata informer.
    Own(Arc<SharedInformer<Meta>>),
    /// This collector's handler on the shared factory's typed informer.
    Pods(Arc<SharedInformer<Pod>>, HandlerRegistration),
    ReplicaSets(Arc<SharedInformer<ReplicaSet>>, HandlerRegistration),
}

impl Monitor {
    /// Stops following: an own informer stops; a shared one only loses this collector's handler.
    fn stop(&self) {
        match self {
            Monitor::Own(i) => i.stop(),
            Monitor::Pods(i, r) => {
                i.remove_event_handler(r);
            }
            Monitor::ReplicaSets(i, r) => {
                i.remove_event_handler(r);
            }
        }
    }

    async fn wait_for_sync(&self) {
        match self {
            Monitor::Own(i) => i.wait_for_sync().await,
            Monitor::Pods(i, _) => i.wait_for_sync().await,
            Monitor::ReplicaSets(i, _) => i.wait_for_sync().await,
        }
    }
}

struct Gc {
    client: Client,
    graph: Mutex<Graph>,
    discovery: RwLock<Arc<Discovery>>,
    monitors: Mutex<HashMap<String, Monitor>>,
    /// The shared informers Pods and ReplicaSets are followed through.
    factory: Arc<SharedInformerFactory>,
    changes: mpsc::UnboundedSender<GraphEvent>,
    attempt_to_delete: RateLimitingQueue<String>,
    attempt_to_orphan: RateLimitingQueue<String>,
    recorder: Recorder,
}

/// Why a delete attempt ended without acting (not an error: nothing to retry).
enum Outcome {
    Done,
    /// The object is gone; a virtual delete event went to the graph.
    VirtualDelete,
    /// A cluster-scoped object names a namespaced owner: will not resolve by retrying.
    ClusterScopedWithNamespacedOwner,
}

/// Runs the collector with `workers` deleting and as many orphaning workers (upstream
/// `--concurrent-gc-syncs`).
pub async fn run(client: Client, factory: Arc<SharedInformerFactory>, workers: usize) {
    let broadcaster = EventBroadcaster::new();
    broadcaster.start_recording_to_sink(ApiEventSink::new(client.clone()));
    let (tx, mut rx) = mpsc::unbounded_channel();
    let gc = Arc::new(Gc {
        recorder: broadcaster.new_recorder("garbage-collector-controller", ""),
        client,
        graph: Mutex::new(Graph::default()),
        discovery: RwLock::new(Arc::new(Discovery::default())),
        monitors: Mutex::new(HashMap::new()),
        factory,
        changes: tx,
        attempt_to_delete: RateLimitingQueue::with_config(
            default_controller_rate_limiter::<String>(),
            QueueConfig::named("garbage_collector_attempt_to_delete"),
        ),
        attempt_to_orphan: RateLimitingQueue::with_config(
            default_controller_rate_limiter::<String>(),
            QueueConfig::named("garbage_collector_attempt_to_orphan"),
        ),
    });
    // The graph builder: one task applies every change in order.
    let builder = {
        let gc = gc.clone();
        tokio::spawn(async move {
            while let Some(event) = rx.recv().await {
                let actions = gc.lock_graph().process(&event);
                gc.act(actions);
            }
        })
    };
    // First discovery and sync; discovery failures are retried by the periodic loop.
    gc.resync_monitors().await;
    let monitors: Vec<_> = gc.lock_monitors().values().cloned().collect();
    let synced = futures::future::join_all(monitors.iter().map(|m| m.wait_for_sync()));
    if tokio::time::timeout(SYNC_TIMEOUT, synced).await.is_err() {
        tracing::warn!("garbage collector: not all monitors synced; starting anyway");
    }
    tracing::info!(
        nodes = gc.lock_graph().len(),
        "garbage collector: all resource monitors have synced"
    );
    let rediscover = {
        let gc = gc.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(DISCOVERY_PERIOD).await;
                gc.resync_monitors().await;
            }
        })
    };
    let (d, o) = (gc.clone(), gc.clone());
    let delete_controller = Controller::new("garbagecollector", gc.attempt_to_delete.clone());
    let orphan_controller =
        Controller::new("garbagecollector-orphan", gc.attempt_to_orphan.clone());
    let deleters = delete_controller.run(workers, move |uid: String| {
        let gc = d.clone();
        async move { gc.attempt_to_delete_worker(&uid).await }
    });
    let orphaners = orphan_controller.run(workers, move |uid: String| {
        let gc = o.clone();
        async move { gc.attempt_to_orphan_worker(&uid).await }
    });
    futures::future::join(deleters, orphaners).await;
    rediscover.abort();
    builder.abort();
    for m in gc.lock_monitors().values() {
        m.stop();
    }
}

fn identity_of(resource: &ApiResource, meta: &ObjectMeta) -> Identity {
    Identity {
        api_version: resource.api_version.clone(),
        kind: resource.kind.clone(),
        namespace: meta.namespace.clone().unwrap_or_default(),
        name: meta.name.clone().unwrap_or_default(),
        uid: meta.uid.clone().unwrap_or_default(),
    }
}

fn graph_event(
    t: EventType,
    resource: &ApiResource,
    meta: &ObjectMeta,
    old: Option<&ObjectMeta>,
) -> GraphEvent {
    GraphEvent {
        event_type: t,
        virtual_event: false,
        identity: identity_of(resource, meta),
        owners: meta.owner_references.clone().unwrap_or_default(),
        deleting: meta.deletion_timestamp.is_some(),
        finalizers: meta.finalizers.clone().unwrap_or_default(),
        old: old.map(|o| {
            (
                o.deletion_timestamp.is_some(),
                o.finalizers.clone().unwrap_or_default(),
            )
        }),
    }
}

fn object_reference(id: &Identity) -> ObjectReference {
    ObjectReference {
        api_version: Some(id.api_version.clone()),
        kind: Some(id.kind.clone()),
        namespace: Some(id.namespace.clone()).filter(|n| !n.is_empty()),
        name: Some(id.name.clone()),
        uid: Some(id.uid.clone()),
        ..Default::default()
    }
}

fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

impl Gc {
    fn lock_graph(&self) -> MutexGuard<'_, Graph> {
        self.graph.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_monitors(&self) -> MutexGuard<'_, HashMap<String, Monitor>> {
        self.monitors.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn discovery(&self) -> Arc<Discovery> {
        self.discovery
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn act(&self, actions: Vec<Action>) {
        for a in actions {
            match a {
                Action::AttemptToDelete(uid) => self.attempt_to_delete.add(uid),
                Action::AttemptToOrphan(uid) => self.attempt_to_orphan.add(uid),
                Action::InvalidNamespaceOwnerRef { dependent, owner } => {
                    self.report_invalid_owner(&dependent, &owner)
                }
            }
        }
    }

    fn report_invalid_owner(&self, dependent: &Identity, owner: &Identity) {
        self.recorder.event(
            &object_reference(dependent),
            RecordedType::Warning,
            "OwnerRefInvalidNamespace",
            &format!(
                "ownerRef {owner} does not exist in namespace {:?}",
                dependent.namespace
            ),
        );
    }

    /// Discovers the deletable resources and starts / stops monitors to match (upstream
    /// `resyncMonitors`).
    async fn resync_monitors(self: &Arc<Self>) {
        let found = match discovery::discover(&self.client).await {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!(error = %e, "garbage collector: discovery failed");
                return;
            }
        };
        if let Some(e) = found.error() {
            tracing::warn!(error = %e, "garbage collector: partial discovery");
        }
        let wanted: HashMap<String, Discovered> = discovery::by_url(
            &found
                .preferred
                .iter()
                .filter(|d| d.supports(&["list", "watch", "delete"]))
                .filter(|d| {
                    !IGNORED.contains(&(d.resource.group.as_str(), d.resource.plural.as_str()))
                })
                .cloned()
                .collect::<Vec<_>>(),
        );
        *self.discovery.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(found);
        let mut monitors = self.lock_monitors();
        monitors.retain(|url, m| {
            let keep = wanted.contains_key(url);
            if !keep {
                tracing::info!(resource = %url, "garbage collector: stopping monitor");
                m.stop();
            }
            keep
        });
        for (url, d) in wanted {
            if monitors.contains_key(&url) {
                continue;
            }
            monitors.insert(url, self.start_monitor(&d.resource));
        }
    }

    fn start_monitor(&self, resource: &ApiResource) -> Monitor {
        match (resource.api_version.as_str(), resource.kind.as_str()) {
            ("v1", "Pod") => {
                let informer = self.factory.informer::<Pod>();
                let registration = self.follow(&informer, resource, |p: &Pod| &p.metadata);
                self.factory.start();
                Monitor::Pods(informer, registration)
            }
            ("apps/v1", "ReplicaSet") => {
                let informer = self.factory.informer::<ReplicaSet>();
                let registration = self.follow(&informer, resource, |r: &ReplicaSet| &r.metadata);
                self.factory.start();
                Monitor::ReplicaSets(informer, registration)
            }
            _ => {
                let api = Api::<DynamicObject>::all_with(self.client.clone(), resource);
                let informer = metadata_informer(api, InformerConfig::new().trim_managed_fields());
                self.follow(&informer, resource, |m: &Meta| &m.metadata);
                informer.start();
                Monitor::Own(informer)
            }
        }
    }

    /// Registers the handler that turns an informer's changes into graph events.
    fn follow<K>(
        &self,
        informer: &SharedInformer<K>,
        resource: &ApiResource,
        meta: fn(&K) -> &ObjectMeta,
    ) -> HandlerRegistration
    where
        K: kube::Resource + Clone + Send + Sync + 'static,
    {
        let (r1, r2, r3) = (resource.clone(), resource.clone(), resource.clone());
        let (t1, t2, t3) = (
            self.changes.clone(),
            self.changes.clone(),
            self.changes.clone(),
        );
        informer.add_event_handler(
            EventHandlerFuncs::new()
                .on_add(move |o: &Arc<K>, _| {
                    let _ = t1.send(graph_event(EventType::Add, &r1, meta(o), None));
                })
                .on_update(move |old: &Arc<K>, new: &Arc<K>| {
                    let _ = t2.send(graph_event(
                        EventType::Update,
                        &r2,
                        meta(new),
                        Some(meta(old)),
                    ));
                })
                .on_delete(move |d| {
                    let _ = t3.send(graph_event(EventType::Delete, &r3, meta(d.object()), None));
                }),
        )
    }

    fn resolve(&self, api_version: &str, kind: &str) -> Result<Discovered, String> {
        self.discovery()
            .resolve(api_version, kind)
            .cloned()
            .ok_or_else(|| format!("unable to get REST mapping for {api_version}/{kind}"))
    }

    fn api(&self, d: &Discovered, namespace: &str) -> Api<DynamicObject> {
        if d.namespaced {
            Api::namespaced_with(self.client.clone(), namespace, &d.resource)
        } else {
            Api::all_with(self.client.clone(), &d.resource)
        }
    }

    /// The live metadata of the object of `id` if it still has that uid.
    async fn get_live(&self, id: &Identity) -> Result<Option<ObjectMeta>, String> {
        let d = self.resolve(&id.api_version, &id.kind)?;
        let got = self
            .api(&d, &id.namespace)
            .get_metadata_opt(&id.name)
            .await
            .map_err(|e| format!("get {id}: {e}"))?;
        Ok(got
            .map(|m| m.metadata)
            .filter(|m| m.uid.as_deref() == Some(id.uid.as_str())))
    }

    /// Read-modify-write of an object's metadata: `change` gives the metadata fields to set (None:
    /// nothing to do); the write carries the read resourceVersion and is retried on conflict.
    async fn update_metadata(
        &self,
        id: &Identity,
        change: impl Fn(&ObjectMeta) -> Option<serde_json::Map<String, Value>>,
    ) -> Result<(), String> {
        let d = self.resolve(&id.api_version, &id.kind)?;
        let api = self.api(&d, &id.namespace);
        for _ in 0..10 {
            let meta = match api.get_metadata_opt(&id.name).await {
                Ok(Some(m)) if m.metadata.uid.as_deref() == Some(id.uid.as_str()) => m.metadata,
                Ok(_) => return Ok(()),
                Err(e) => return Err(format!("get {id}: {e}")),
            };
            let Some(mut fields) = change(&meta) else {
                return Ok(());
            };
            fields.insert("resourceVersion".into(), json!(meta.resource_version));
            let patch = json!({ "metadata": fields });
            match api
                .patch(&id.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => return Ok(()),
                Err(e) if is_status(&e, 404) => return Ok(()),
                Err(e) if is_status(&e, 409) => continue,
                Err(e) => return Err(format!("patch {id}: {e}")),
            }
        }
        Err(format!("patch {id}: too many conflicts"))
    }

    async fn remove_finalizer(&self, id: &Identity, finalizer: &str) -> Result<(), String> {
        self.update_metadata(id, |m| {
            let list = m.finalizers.clone().unwrap_or_default();
            let kept: Vec<String> = list.iter().filter(|f| *f != finalizer).cloned().collect();
            (kept.len() != list.len()).then(|| {
                let mut f = serde_json::Map::new();
                f.insert(
                    "finalizers".into(),
                    if kept.is_empty() {
                        Value::Null
                    } else {
                        json!(kept)
                    },
                );
                f
            })
        })
        .await
    }

    /// Rewrites the object's ownerReferences with `edit`.
    async fn edit_owner_refs(
        &self,
        id: &Identity,
        edit: impl Fn(&[OwnerReference]) -> Vec<OwnerReference>,
    ) -> Result<(), String> {
        self.update_metadata(id, |m| {
            let refs = m.owner_references.clone().unwrap_or_default();
            let new = edit(&refs);
            (new != refs).then(|| {
                let mut f = serde_json::Map::new();
                f.insert(
                    "ownerReferences".into(),
                    if new.is_empty() {
                        Value::Null
                    } else {
                        json!(new)
                    },
                );
                f
            })
        })
        .await
    }

    async fn delete_object(&self, id: &Identity, policy: &str) -> Result<(), String> {
        let d = self.resolve(&id.api_version, &id.kind)?;
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(id.uid.clone()),
                resource_version: None,
            }),
            propagation_policy: Some(match policy {
                "Orphan" => PropagationPolicy::Orphan,
                "Foreground" => PropagationPolicy::Foreground,
                _ => PropagationPolicy::Background,
            }),
            ..DeleteParams::default()
        };
        tracing::debug!(object = %id, policy, "garbage collector: deleting");
        match self.api(&d, &id.namespace).delete(&id.name, &params).await {
            Ok(_) => Ok(()),
            Err(e) if is_status(&e, 404) => Ok(()),
            Err(e) => Err(format!("delete {id}: {e}")),
        }
    }

    async fn attempt_to_delete_worker(&self, uid: &str) -> Result<(), String> {
        let Some(node) = self.lock_graph().get(uid).cloned() else {
            return Ok(());
        };
        match self.attempt_to_delete_item(&node).await? {
            Outcome::VirtualDelete | Outcome::ClusterScopedWithNamespacedOwner => Ok(()),
            // A virtual node is looked at again (with backoff) until an informer observes it or
            // it is found absent.
            Outcome::Done if self.lock_graph().get(uid).is_some_and(|n| n.virtual_node) => {
                Err(format!("{} not observed yet", node.identity))
            }
            Outcome::Done => Ok(()),
        }
    }

    async fn attempt_to_delete_item(&self, node: &Node) -> Result<Outcome, String> {
        if node.being_deleted && !node.deleting_dependents {
            return Ok(Outcome::Done);
        }
        // A virtual owner of a namespaced kind named by a cluster-scoped dependent has nowhere to
        // be looked up (upstream `getObject` gives up the same way).
        let d = self.resolve(&node.identity.api_version, &node.identity.kind)?;
        if d.namespaced && node.identity.namespace.is_empty() {
            return Ok(Outcome::ClusterScopedWithNamespacedOwner);
        }
        let Some(latest) = self.get_live(&node.identity).await? else {
            let _ = self
                .changes
                .send(GraphEvent::virtual_delete(node.identity.clone()));
            return Ok(Outcome::VirtualDelete);
        };
        if node.deleting_dependents {
            self.process_deleting_dependents(node).await?;
            return Ok(Outcome::Done);
        }
        let refs = latest.owner_references.clone().unwrap_or_default();
        let mut classified = Vec::with_capacity(refs.len());
        for r in refs {
            let state = match self.owner_state(&r, node).await? {
                Some(s) => s,
                None => return Ok(Outcome::ClusterScopedWithNamespacedOwner),
            };
            classified.push((r, state));
        }
        let (has_dependents, dependent_deleting) = {
            let graph = self.lock_graph();
            let deps = graph
                .get(&node.identity.uid)
                .map(|n| n.dependents.clone())
                .unwrap_or_default();
            let deleting = deps
                .iter()
                .any(|d| graph.get(d).is_some_and(|n| n.deleting_dependents));
            (!deps.is_empty(), deleting)
        };
        let finalizers = latest.finalizers.clone().unwrap_or_default();
        match sync::decide(&classified, has_dependents, dependent_deleting, &finalizers) {
            Decision::Nothing => {}
            Decision::RemoveReferences(uids) => {
                tracing::debug!(object = %node.identity, ?uids, "garbage collector: removing dead owner references");
                self.edit_owner_refs(&node.identity, |refs| {
                    refs.iter()
                        .filter(|r| !uids.contains(&r.uid))
                        .cloned()
                        .collect()
                })
                .await?;
            }
            Decision::DeleteForeground { unblock } => {
                if unblock {
                    self.edit_owner_refs(&node.identity, |refs| {
                        refs.iter()
                            .cloned()
                            .map(|mut r| {
                                if r.block_owner_deletion == Some(true) {
                                    r.block_owner_deletion = Some(false);
                                }
                                r
                            })
                            .collect()
                    })
                    .await?;
                }
                self.delete_object(&node.identity, "Foreground").await?;
            }
            Decision::Delete(policy) => self.delete_object(&node.identity, policy).await?,
        }
        Ok(Outcome::Done)
    }

    /// Checks one owner (upstream `isDangling` + the classification): `None` when a cluster-scoped
    /// object names a namespaced owner, which is left alone (the graph builder reports it when the
    /// owner is observed).
    async fn owner_state(
        &self,
        r: &OwnerReference,
        node: &Node,
    ) -> Result<Option<OwnerState>, String> {
        let mut key = Identity::of_owner(r, "");
        {
            let graph = self.lock_graph();
            if graph.is_absent(&key) {
                return Ok(Some(OwnerState::Dangling));
            }
            key.namespace = node.identity.namespace.clone();
            if graph.is_absent(&key) {
                return Ok(Some(OwnerState::Dangling));
            }
        }
        let d = self.resolve(&r.api_version, &r.kind)?;
        if !d.namespaced {
            key.namespace.clear();
        }
        if node.identity.namespace.is_empty() && d.namespaced {
            return Ok(None);
        }
        let owner = self
            .api(&d, &key.namespace)
            .get_metadata_opt(&r.name)
            .await
            .map_err(|e| format!("get owner {key}: {e}"))?;
        let Some(owner) = owner.filter(|o| o.metadata.uid.as_deref() == Some(r.uid.as_str()))
        else {
            self.lock_graph().add_absent(key);
            return Ok(Some(OwnerState::Dangling));
        };
        let waiting = owner.metadata.deletion_timestamp.is_some()
            && owner
                .metadata
                .finalizers
                .iter()
                .flatten()
                .any(|f| f == graph::FINALIZER_FOREGROUND);
        Ok(Some(if waiting {
            OwnerState::WaitingForDependentsDeletion
        } else {
            OwnerState::Solid
        }))
    }

    /// An owner deleted in the foreground: removes the finalizer once no dependent blocks it,
    /// otherwise makes sure the blocking dependents are being deleted.
    async fn process_deleting_dependents(&self, node: &Node) -> Result<(), String> {
        let (blocking, to_check): (usize, Vec<String>) = {
            let graph = self.lock_graph();
            let blocking = graph.blocking_dependents(&node.identity.uid);
            let check = blocking
                .iter()
                .filter(|d| !graph.get(d).is_some_and(|n| n.deleting_dependents))
                .cloned()
                .collect();
            (blocking.len(), check)
        };
        if blocking == 0 {
            return self
                .remove_finalizer(&node.identity, graph::FINALIZER_FOREGROUND)
                .await;
        }
        for d in to_check {
            self.attempt_to_delete.add(d);
        }
        Ok(())
    }

    /// Removes the owner's references from all its dependents, then its `orphan` finalizer (upstream
    /// `attemptToOrphanWorker`).
    async fn attempt_to_orphan_worker(&self, uid: &str) -> Result<(), String> {
        let (owner, dependents) = {
            let graph = self.lock_graph();
            let Some(node) = graph.get(uid) else {
                return Ok(());
            };
            let deps: Vec<Identity> = node
                .dependents
                .iter()
                .filter_map(|d| graph.get(d).map(|n| n.identity.clone()))
                .collect();
            (node.identity.clone(), deps)
        };
        let owner_uid = uid.to_string();
        let results: Vec<Result<(), String>> = futures::stream::iter(dependents)
            .map(|dep: Identity| {
                let owner_uid = owner_uid.clone();
                async move {
                    let keep = move |refs: &[OwnerReference]| -> Vec<OwnerReference> {
                        refs.iter()
                            .filter(|r| r.uid != owner_uid)
                            .cloned()
                            .collect()
                    };
                    self.edit_owner_refs(&dep, keep).await
                }
            })
            .buffer_unordered(GC_WORKERS)
            .collect()
            .await;
        let errors: Vec<String> = results.into_iter().filter_map(Result::err).collect();
        if !errors.is_empty() {
            return Err(format!(
                "orphaning dependents of {owner}: {}",
                errors.join("; ")
            ));
        }
        self.remove_finalizer(&owner, graph::FINALIZER_ORPHAN).await
    }
}
