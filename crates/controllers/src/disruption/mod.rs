//! The disruption controller (upstream `pkg/controller/disruption`): keeps each
//! PodDisruptionBudget's status — healthy, desired and expected pods, `disruptionsAllowed`, the
//! evictions still in flight and the `DisruptionAllowed` condition — which the API server's eviction
//! subresource reads (and decrements) to refuse evictions with 429.

pub mod budget;

use std::collections::HashMap;
use std::sync::Arc;

use client::controller::{Controller, EnqueueHandler};
use client::informer::{object_key, split_key, EventHandlerFuncs, SharedInformerFactory, Store};
use client::workqueue::{default_controller_rate_limiter, QueueConfig, RateLimitingQueue};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Pod, ReplicationController};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Patch, PatchParams};
use kube::Api;
use serde_json::{json, Value};

struct Ctx {
    client: kube::Client,
    pdbs: Arc<Store<PodDisruptionBudget>>,
    pods: Arc<Store<Pod>>,
    replicasets: Arc<Store<ReplicaSet>>,
    deployments: Arc<Store<Deployment>>,
    statefulsets: Arc<Store<StatefulSet>>,
    rcs: Arc<Store<ReplicationController>>,
    queue: RateLimitingQueue<String>,
}

fn labels(pod: &Pod) -> serde_json::Map<String, Value> {
    pod.metadata
        .labels
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), json!(v)))
        .collect()
}

fn selector(pdb: &PodDisruptionBudget) -> Option<apimachinery::labels::Selector> {
    let v = serde_json::to_value(pdb.spec.as_ref()?.selector.as_ref()?).ok()?;
    apimachinery::labels::selector_from_label_selector(&v).ok()
}

pub async fn run(client: kube::Client, factory: &SharedInformerFactory, workers: usize) {
    let pdb_informer = factory.informer::<PodDisruptionBudget>();
    let pod_informer = factory.informer::<Pod>();
    let queue = RateLimitingQueue::with_config(
        default_controller_rate_limiter::<String>(),
        QueueConfig::named("disruption"),
    );
    pdb_informer.add_event_handler(EnqueueHandler::new(queue.clone()));
    let ctx = Arc::new(Ctx {
        client,
        pdbs: pdb_informer.store(),
        pods: pod_informer.store(),
        replicasets: factory.informer::<ReplicaSet>().store(),
        deployments: factory.informer::<Deployment>().store(),
        statefulsets: factory.informer::<StatefulSet>().store(),
        rcs: factory.informer::<ReplicationController>().store(),
        queue: queue.clone(),
    });
    let (c1, c2, c3) = (ctx.clone(), ctx.clone(), ctx.clone());
    pod_informer.add_event_handler(
        EventHandlerFuncs::new()
            .on_add(move |p: &Arc<Pod>, _| enqueue_budgets(&c1, p))
            .on_update(move |_, p: &Arc<Pod>| enqueue_budgets(&c2, p))
            .on_delete(move |d| enqueue_budgets(&c3, d.object())),
    );
    factory.start();
    factory.wait_for_cache_sync().await;
    Controller::new("disruption", queue)
        .with_max_retries(15)
        .run(workers, move |key: String| {
            let ctx = ctx.clone();
            async move { sync(&ctx, &key).await }
        })
        .await;
}

/// The budgets selecting this pod.
fn enqueue_budgets(ctx: &Ctx, pod: &Pod) {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("");
    let labels = labels(pod);
    for pdb in ctx.pdbs.list_namespace(ns) {
        if selector(&pdb).is_some_and(|s| s.matches(&labels)) {
            ctx.queue.add(object_key(pdb.as_ref()));
        }
    }
}

/// The scale of the pod's controller, keyed by the controller's uid (upstream's finders: a
/// ReplicaSet's Deployment stands for it).
fn controller_scale(ctx: &Ctx, pod: &Pod) -> Result<Option<(String, i32)>, String> {
    let Some(owner) = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))
    else {
        return Ok(None); // unmanaged pods are left out
    };
    let ns = pod.metadata.namespace.as_deref().unwrap_or("");
    let key = format!("{ns}/{}", owner.name);
    let same = |uid: &Option<String>| uid.as_deref() == Some(owner.uid.as_str());
    let found = match owner.kind.as_str() {
        "ReplicationController" => ctx
            .rcs
            .get(&key)
            .filter(|o| same(&o.metadata.uid))
            .map(|o| {
                (
                    owner.uid.clone(),
                    o.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
                )
            }),
        "StatefulSet" => ctx
            .statefulsets
            .get(&key)
            .filter(|o| same(&o.metadata.uid))
            .map(|o| {
                (
                    owner.uid.clone(),
                    o.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
                )
            }),
        "ReplicaSet" => match ctx.replicasets.get(&key).filter(|o| same(&o.metadata.uid)) {
            None => None,
            Some(rs) => match crate::controller_key(&rs.metadata, "Deployment")
                .and_then(|k| ctx.deployments.get(&k))
            {
                Some(d) => Some((
                    d.metadata.uid.clone().unwrap_or_default(),
                    d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
                )),
                None => Some((
                    owner.uid.clone(),
                    rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
                )),
            },
        },
        _ => None,
    };
    match found {
        Some(f) => Ok(Some(f)),
        None => Err(format!(
            "found no controllers for pod {:?}",
            pod.metadata.name.as_deref().unwrap_or("")
        )),
    }
}

async fn sync(ctx: &Ctx, key: &str) -> Result<(), String> {
    let Some(pdb) = ctx.pdbs.get(key) else {
        return Ok(());
    };
    let (ns, name) = split_key(key);
    let ns = ns.unwrap_or("");
    let now = jiff::Timestamp::from_second(jiff::Timestamp::now().as_second()).unwrap_or_default();
    let pods: Vec<Arc<Pod>> = match selector(&pdb) {
        Some(sel) if !sel.is_empty() => ctx
            .pods
            .list_namespace(ns)
            .into_iter()
            .filter(|p| sel.matches(&labels(p)))
            .collect(),
        _ => Vec::new(),
    };
    let scale = if budget::needs_scale(&pdb) {
        let mut scales: HashMap<String, i32> = HashMap::new();
        let mut error = None;
        for p in &pods {
            match controller_scale(ctx, p) {
                Ok(Some((uid, n))) => {
                    scales.insert(uid, n);
                }
                Ok(None) => {}
                Err(e) => error = Some(e),
            }
        }
        match error {
            Some(e) => Err(e),
            None => Ok(Some(scales.values().sum())),
        }
    } else {
        Ok(None)
    };
    let (disrupted, recheck) = budget::disrupted(&pdb, &pods, now);
    let status = match scale.and_then(|s| budget::expected(&pdb, pods.len(), s)) {
        Ok(expected) => budget::status(&pdb, &pods, expected, disrupted, now),
        Err(e) => budget::fail_safe(&pdb, &e, now),
    };
    if pdb.status.as_ref() != Some(&status) {
        let api: Api<PodDisruptionBudget> = Api::namespaced(ctx.client.clone(), ns);
        // Guarded by resourceVersion: the eviction subresource also writes this status.
        let patch = json!({"metadata": {"resourceVersion": pdb.metadata.resource_version}, "status": status});
        api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| format!("status: {e}"))?;
    }
    if let Some(after) = recheck {
        ctx.queue.add_after(key.to_string(), after);
    }
    Ok(())
}
