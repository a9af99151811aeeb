//! The resource quota controller (upstream `pkg/controller/resourcequota`, "resourcequota-controller"):
//! keeps every ResourceQuota's `status.hard` (its spec) and `status.used` (what the namespace's objects
//! consume, as `apimachinery::quota` measures it) current.
//!
//! As upstream: quotas whose spec is not yet reflected in their status go to a priority queue; every
//! quota is recomputed on a full resync (`--resource-quota-sync-period`, 5 minutes); objects that free
//! quota (deleted, a pod turning terminal, a Service changing type, a claim's allocation changing)
//! trigger a recomputation of the quotas of their namespace that track them ("replenishment");
//! creates need none, because admission charged them already. A resource that has not synced yet
//! leaves its previous usage in place and the quota is retried.
//!
//! Deliberately different: upstream's quota monitor watches every quotable resource the server
//! serves; here a resource is watched once a quota names it (pods, services and claims through the
//! shared typed informers, anything else `count/<resource>.<group>` through a metadata informer), so a
//! cluster without quotas pays nothing. Discovery (for `count/` names of other groups, custom
//! resources included) is refreshed every 30 s, and early (at most every 5 s) when a quota names an
//! unknown resource; a quota younger than 30 s naming one is looked at again after 5 s, so a quota
//! created right after its CustomResourceDefinition is computed without waiting for the next round.

pub mod sync;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

use apimachinery::quota::{self, Evaluator, Object, ResourceList};
use client::controller::Controller;
use client::informer::{
    metadata_informer, split_key, EventHandlerFuncs, InformerConfig, SharedInformer,
    SharedInformerFactory, Store,
};
use client::workqueue::{default_controller_rate_limiter, QueueConfig, RateLimitingQueue};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, ResourceQuota, Service};
use kube::api::{ApiResource, DynamicObject, PostParams};
use kube::core::PartialObjectMeta;
use kube::{Api, Client};

use crate::garbagecollector::discovery::{self, Discovery};

/// How often served resources are re-discovered (upstream's quota monitor resync).
const DISCOVERY_PERIOD: Duration = Duration::from_secs(30);
/// Earliest re-discovery after the last one, when a quota names an unknown resource.
const DISCOVERY_MIN_INTERVAL: Duration = Duration::from_secs(5);

type Meta = PartialObjectMeta<DynamicObject>;

/// The source of one resource's objects.
#[derive(Clone)]
enum Monitor {
    Pods(Arc<SharedInformer<Pod>>),
    Services(Arc<SharedInformer<Service>>),
    Claims(Arc<SharedInformer<PersistentVolumeClaim>>),
    Count(Arc<SharedInformer<Meta>>),
}

impl Monitor {
    fn has_synced(&self) -> bool {
        match self {
            Monitor::Pods(i) => i.has_synced(),
            Monitor::Services(i) => i.has_synced(),
            Monitor::Claims(i) => i.has_synced(),
            Monitor::Count(i) => i.has_synced(),
        }
    }

    /// The usage of the namespace's objects for `resources`, in the quota's scopes.
    fn usage(
        &self,
        e: &Evaluator,
        ns: &str,
        resources: &[String],
        q: &ResourceQuota,
    ) -> Result<ResourceList, String> {
        let scopes = quota::evaluator::scope_selectors(q);
        let now = jiff::Timestamp::now();
        match self {
            Monitor::Pods(i) => {
                let objects = i.store().list_namespace(ns);
                e.usage_stats(
                    objects.iter().map(|o| Object::Pod(o)),
                    resources,
                    &scopes,
                    now,
                )
            }
            Monitor::Services(i) => {
                let objects = i.store().list_namespace(ns);
                e.usage_stats(
                    objects.iter().map(|o| Object::Service(o)),
                    resources,
                    &scopes,
                    now,
                )
            }
            Monitor::Claims(i) => {
                let objects = i.store().list_namespace(ns);
                let claims = objects.iter().map(|o| Object::PersistentVolumeClaim(o));
                e.usage_stats(claims, resources, &scopes, now)
            }
            Monitor::Count(i) => {
                let n = i.store().list_namespace(ns).len();
                e.usage_stats((0..n).map(|_| Object::Other), resources, &scopes, now)
            }
        }
    }

    fn stop(&self) {
        if let Monitor::Count(i) = self {
            i.stop();
        }
    }
}

struct Ctx {
    client: Client,
    factory: Arc<SharedInformerFactory>,
    quotas: Arc<Store<ResourceQuota>>,
    /// Quotas to recompute.
    queue: RateLimitingQueue<String>,
    /// Quotas whose status lacks usage (upstream's `missingUsageQueue`).
    priority: RateLimitingQueue<String>,
    monitors: Mutex<HashMap<(String, String), Monitor>>,
    /// Held while a monitor is being created.
    creating: tokio::sync::Mutex<()>,
    discovery: RwLock<(Arc<Discovery>, Option<Instant>)>,
}

/// Runs the controller until the future is dropped.
pub async fn run(
    client: Client,
    factory: Arc<SharedInformerFactory>,
    workers: usize,
    sync_period: Duration,
) {
    let informer = factory.informer::<ResourceQuota>();
    let ctx = Arc::new(Ctx {
        client,
        factory: factory.clone(),
        quotas: informer.store(),
        queue: RateLimitingQueue::with_config(
            default_controller_rate_limiter::<String>(),
            QueueConfig::named("resourcequota_primary"),
        ),
        priority: RateLimitingQueue::with_config(
            default_controller_rate_limiter::<String>(),
            QueueConfig::named("resourcequota_priority"),
        ),
        monitors: Mutex::new(HashMap::new()),
        creating: tokio::sync::Mutex::new(()),
        discovery: RwLock::new((Arc::new(Discovery::default()), None)),
    });
    let (c1, c2, c3) = (ctx.clone(), ctx.clone(), ctx.clone());
    informer.add_event_handler(
        EventHandlerFuncs::new()
            .on_add(move |q: &Arc<ResourceQuota>, _| c1.add_quota(q))
            .on_update(move |old: &Arc<ResourceQuota>, new: &Arc<ResourceQuota>| {
                // Status updates are this controller's own; only a new spec needs work.
                if old.spec.as_ref().and_then(|s| s.hard.as_ref())
                    != new.spec.as_ref().and_then(|s| s.hard.as_ref())
                {
                    c2.add_quota(new);
                }
            })
            .on_delete(move |d| c3.queue.add(d.key())),
    );
    factory.start();
    informer.wait_for_sync().await;
    ctx.refresh_discovery().await;
    let resync = {
        let ctx = ctx.clone();
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(sync_period);
            ticker.tick().await;
            loop {
                ticker.tick().await;
                for key in ctx.quotas.list_keys() {
                    ctx.queue.add(key);
                }
            }
        })
    };
    let rediscover = {
        let ctx = ctx.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(DISCOVERY_PERIOD).await;
                ctx.refresh_discovery().await;
            }
        })
    };
    let primary = Controller::new("resourcequota", ctx.queue.clone());
    let priority = Controller::new("resourcequota-priority", ctx.priority.clone());
    let (a, b) = (ctx.clone(), ctx.clone());
    futures::future::join(
        primary.run(workers, move |key: String| {
            let ctx = a.clone();
            async move { ctx.sync(&key).await }
        }),
        priority.run(workers, move |key: String| {
            let ctx = b.clone();
            async move { ctx.sync(&key).await }
        }),
    )
    .await;
    resync.abort();
    rediscover.abort();
    for m in ctx.lock_monitors().values() {
        m.stop();
    }
}

fn key_of(q: &ResourceQuota) -> String {
    format!(
        "{}/{}",
        q.metadata.namespace.as_deref().unwrap_or(""),
        q.metadata.name.as_deref().unwrap_or("")
    )
}

impl Ctx {
    fn lock_monitors(&self) -> MutexGuard<'_, HashMap<(String, String), Monitor>> {
        self.monitors.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Upstream `addQuota`: quotas lacking usage first.
    fn add_quota(&self, q: &ResourceQuota) {
        if sync::needs_priority(q) {
            self.priority.add(key_of(q));
        } else {
            self.queue.add(key_of(q));
        }
    }

    /// Upstream `replenishQuota`: recompute the namespace's quotas that track the resource.
    fn replenish(&self, group: &str, resource: &str, namespace: &str) {
        let evaluator = Evaluator::for_resource(group, resource);
        for q in self.quotas.list_namespace(namespace) {
            if sync::tracks(&q, &evaluator) {
                self.queue.add(key_of(&q));
            }
        }
    }

    async fn refresh_discovery(self: &Arc<Self>) {
        let found = match discovery::discover(&self.client).await {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!(error = %e, "resource quota: discovery failed");
                return;
            }
        };
        let changed = {
            let mut guard = self.discovery.write().unwrap_or_else(|e| e.into_inner());
            let changed = guard.0.preferred != found.preferred;
            *guard = (Arc::new(found), Some(Instant::now()));
            changed
        };
        if changed {
            // Stop watching resources no longer served; quotas naming new ones can now be computed.
            let served = self.discovery().preferred.clone();
            self.lock_monitors().retain(|(g, r), m| {
                let keep = matches!(
                    m,
                    Monitor::Pods(_) | Monitor::Services(_) | Monitor::Claims(_)
                ) || served
                    .iter()
                    .any(|d| d.resource.group == *g && d.resource.plural == *r);
                if !keep {
                    m.stop();
                }
                keep
            });
            for key in self.quotas.list_keys() {
                self.queue.add(key);
            }
        }
    }

    fn discovery(&self) -> Arc<Discovery> {
        self.discovery
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .0
            .clone()
    }

    /// The served, namespaced, watchable resource `group`/`resource`, re-discovering first when it
    /// is unknown and discovery is not fresh.
    async fn resolve(self: &Arc<Self>, group: &str, resource: &str) -> Option<ApiResource> {
        let find = |d: &Discovery| {
            d.preferred
                .iter()
                .find(|x| {
                    x.resource.group == group
                        && x.resource.plural == resource
                        && x.namespaced
                        && x.supports(&["list", "watch"])
                })
                .map(|x| x.resource.clone())
        };
        if let Some(r) = find(&self.discovery()) {
            return Some(r);
        }
        let stale = self
            .discovery
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .1
            .is_none_or(|at| at.elapsed() >= DISCOVERY_MIN_INTERVAL);
        if stale {
            self.refresh_discovery().await;
            return find(&self.discovery());
        }
        None
    }

    /// The monitor of an evaluator's resource, started on first use; `None` when the server does
    /// not serve the resource.
    async fn monitor(self: &Arc<Self>, e: &Evaluator) -> Option<Monitor> {
        let (group, resource) = e.group_resource();
        let id = (group.to_string(), resource.to_string());
        if let Some(m) = self.lock_monitors().get(&id) {
            return Some(m.clone());
        }
        // One creation at a time, so two workers never register the same handlers twice.
        let _creating = self.creating.lock().await;
        if let Some(m) = self.lock_monitors().get(&id) {
            return Some(m.clone());
        }
        let monitor = match e {
            Evaluator::Pods => Monitor::Pods(self.pod_monitor()),
            Evaluator::Services => Monitor::Services(self.service_monitor()),
            Evaluator::PersistentVolumeClaims => Monitor::Claims(self.claim_monitor()),
            Evaluator::ObjectCount { .. } => {
                let api_resource = if group.is_empty()
                    && quota::evaluator::LEGACY_ALIASES
                        .iter()
                        .any(|(r, _)| *r == resource)
                {
                    core_resource(resource)
                } else {
                    self.resolve(group, resource).await?
                };
                Monitor::Count(self.count_monitor(group, resource, &api_resource))
            }
        };
        self.lock_monitors().insert(id, monitor.clone());
        Some(monitor)
    }

    fn pod_monitor(self: &Arc<Self>) -> Arc<SharedInformer<Pod>> {
        let informer = self.factory.informer::<Pod>();
        let (a, b) = (Arc::downgrade(self), Arc::downgrade(self));
        informer.add_event_handler(
            EventHandlerFuncs::new()
                .on_update(move |old: &Arc<Pod>, new: &Arc<Pod>| {
                    if sync::pod_update_frees_quota(old, new, jiff::Timestamp::now()) {
                        if let Some(ctx) = a.upgrade() {
                            ctx.replenish("", "pods", namespace_of(&new.metadata));
                        }
                    }
                })
                .on_delete(move |d| {
                    if let Some(ctx) = b.upgrade() {
                        ctx.replenish("", "pods", namespace_of(&d.object().metadata));
                    }
                }),
        );
        self.factory.start();
        informer
    }

    fn service_monitor(self: &Arc<Self>) -> Arc<SharedInformer<Service>> {
        let informer = self.factory.informer::<Service>();
        let (a, b) = (Arc::downgrade(self), Arc::downgrade(self));
        informer.add_event_handler(
            EventHandlerFuncs::new()
                .on_update(move |old: &Arc<Service>, new: &Arc<Service>| {
                    if sync::service_update_changes_quota(old, new) {
                        if let Some(ctx) = a.upgrade() {
                            ctx.replenish("", "services", namespace_of(&new.metadata));
                        }
                    }
                })
                .on_delete(move |d| {
                    if let Some(ctx) = b.upgrade() {
                        ctx.replenish("", "services", namespace_of(&d.object().metadata));
                    }
                }),
        );
        self.factory.start();
        informer
    }

    fn claim_monitor(self: &Arc<Self>) -> Arc<SharedInformer<PersistentVolumeClaim>> {
        let informer = self.factory.informer::<PersistentVolumeClaim>();
        let (a, b) = (Arc::downgrade(self), Arc::downgrade(self));
        let resource = "persistentvolumeclaims";
        informer.add_event_handler(
            EventHandlerFuncs::new()
                .on_update(
                    move |old: &Arc<PersistentVolumeClaim>, new: &Arc<PersistentVolumeClaim>| {
                        if sync::claim_update_changes_quota(old, new) {
                            if let Some(ctx) = a.upgrade() {
                                ctx.replenish("", resource, namespace_of(&new.metadata));
                            }
                        }
                    },
                )
                .on_delete(move |d| {
                    if let Some(ctx) = b.upgrade() {
                        ctx.replenish("", resource, namespace_of(&d.object().metadata));
                    }
                }),
        );
        self.factory.start();
        informer
    }

    fn count_monitor(
        self: &Arc<Self>,
        group: &str,
        resource: &str,
        api_resource: &ApiResource,
    ) -> Arc<SharedInformer<Meta>> {
        let api = Api::<DynamicObject>::all_with(self.client.clone(), api_resource);
        let informer = metadata_informer(api, InformerConfig::new().trim_managed_fields());
        let weak = Arc::downgrade(self);
        let (group, resource) = (group.to_string(), resource.to_string());
        informer.add_event_handler(EventHandlerFuncs::new().on_delete(
            move |d: &client::informer::DeletedObject<Meta>| {
                if let Some(ctx) = weak.upgrade() {
                    ctx.replenish(&group, &resource, namespace_of(&d.object().metadata));
                }
            },
        ));
        informer.start();
        informer
    }

    /// Recomputes one quota's status (upstream `syncResourceQuota`).
    async fn sync(self: &Arc<Self>, key: &str) -> Result<(), String> {
        let Some(q) = self.quotas.get(key) else {
            return Ok(());
        };
        let (ns, name) = split_key(key);
        let ns = ns.unwrap_or_default();
        let (hard, mut errors) = sync::hard_limits(&q);
        let hard_names = quota::names(&hard);
        let mut measured = ResourceList::new();
        let mut matched: Vec<String> = Vec::new();
        // A new quota may name a resource (a custom one) that the last discovery predates: look
        // again shortly, for a while, instead of waiting for the periodic re-discovery.
        let young = q.metadata.creation_timestamp.as_ref().is_some_and(|t| {
            jiff::Timestamp::now().duration_since(t.0)
                < jiff::SignedDuration::try_from(DISCOVERY_PERIOD).unwrap_or_default()
        });
        let mut unknown = false;
        for e in sync::evaluators_for(&hard_names) {
            let resources = e.matching_resources(&hard_names);
            let Some(monitor) = self.monitor(&e).await else {
                unknown = true;
                continue;
            };
            let (g, r) = e.group_resource();
            if !monitor.has_synced() {
                errors.push(format!("{r}.{g} not yet synced"));
                continue;
            }
            match monitor.usage(&e, ns, &resources, &q) {
                Ok(used) => {
                    measured = quota::add(&measured, &used);
                    matched.extend(resources);
                }
                Err(err) => errors.push(format!("{r}.{g}: {err}")),
            }
        }
        let measured = quota::mask(&measured, &matched);
        if let Some((hard, used)) = sync::desired_status(&q, &hard, &measured) {
            let mut updated = (*q).clone();
            updated.status = Some(k8s_openapi::api::core::v1::ResourceQuotaStatus {
                hard: Some(quota::to_k8s_list(&hard)),
                used: Some(quota::to_k8s_list(&used)),
            });
            let api: Api<ResourceQuota> = Api::namespaced(self.client.clone(), ns);
            if let Err(e) = api
                .replace_status(name, &PostParams::default(), &updated)
                .await
            {
                errors.push(format!("update status: {}", crate::api_error_message(&e)));
            }
        }
        if unknown && young {
            self.queue
                .add_after(key.to_string(), DISCOVERY_MIN_INTERVAL);
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join("; "))
        }
    }
}

fn namespace_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> &str {
    meta.namespace.as_deref().unwrap_or("")
}

/// A core v1 resource counted under a legacy name (known without discovery).
fn core_resource(plural: &str) -> ApiResource {
    let kind = match plural {
        "configmaps" => "ConfigMap",
        "secrets" => "Secret",
        "resourcequotas" => "ResourceQuota",
        _ => "ReplicationController",
    };
    ApiResource {
        group: String::new(),
        version: "v1".into(),
        api_version: "v1".into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}
