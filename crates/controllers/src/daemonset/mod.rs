//! The DaemonSet controller (upstream `pkg/controller/daemon`): one pod per node that should run it
//! (nodeSelector, node affinity, taints against the daemon tolerations; unschedulable nodes too), each
//! pinned to its node by a required `metadata.name` node affinity for the scheduler to bind, following
//! node additions and removals; ControllerRevisions of the template with the `controller-revision-hash`
//! and `pod-template-generation` pod labels; RollingUpdate (maxUnavailable, maxSurge) and OnDelete; the
//! status kubectl reads. Expectations keep a stale cache from creating a second pod for a node.
//!
//! Pods are adopted and released by selector. Not yet: adoption of orphan ControllerRevisions,
//! de-duplicating equal revisions (the newest is used), the failed-pod backoff, events.

pub mod sync;

use std::collections::HashSet;
use std::sync::Arc;

use client::controller::{Controller, EnqueueHandler};
use client::informer::{split_key, EventHandlerFuncs, SharedInformerFactory, Store};
use client::workqueue::{default_controller_rate_limiter, QueueConfig, RateLimitingQueue};
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::json;

use crate::replicaset::Expectations;
use crate::{claim, history};

const KIND: &str = "DaemonSet";

struct Ctx {
    client: kube::Client,
    sets: Arc<Store<DaemonSet>>,
    pods: Arc<Store<Pod>>,
    nodes: Arc<Store<Node>>,
    revisions: Arc<Store<ControllerRevision>>,
    expectations: Expectations,
    queue: RateLimitingQueue<String>,
}

fn owner_key(meta: &ObjectMeta) -> Option<String> {
    crate::controller_key(meta, KIND)
}

/// Whether a node change can change where daemon pods go (upstream `shouldIgnoreNodeUpdate`, which
/// ignores heartbeats: only labels, spec and the conditions' statuses count).
fn node_changed(old: &Node, new: &Node) -> bool {
    let conditions = |n: &Node| -> Vec<(String, String)> {
        let mut c: Vec<(String, String)> = n
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .map(|c| (c.type_.clone(), c.status.clone()))
            .collect();
        c.sort();
        c
    };
    old.metadata.labels != new.metadata.labels
        || old.spec != new.spec
        || conditions(old) != conditions(new)
}

pub async fn run(client: kube::Client, factory: &SharedInformerFactory, workers: usize) {
    let ds_informer = factory.informer::<DaemonSet>();
    let pod_informer = factory.informer::<Pod>();
    let node_informer = factory.informer::<Node>();
    let rev_informer = factory.informer::<ControllerRevision>();
    let queue = RateLimitingQueue::with_config(
        default_controller_rate_limiter::<String>(),
        QueueConfig::named("daemonset"),
    );
    ds_informer.add_event_handler(EnqueueHandler::new(queue.clone()));
    let ctx = Arc::new(Ctx {
        client,
        sets: ds_informer.store(),
        pods: pod_informer.store(),
        nodes: node_informer.store(),
        revisions: rev_informer.store(),
        expectations: Expectations::default(),
        queue: queue.clone(),
    });
    let (c_add, c_update, c_delete) = (ctx.clone(), ctx.clone(), ctx.clone());
    let orphan_owners = |ctx: &Ctx, p: &Pod| {
        let ns = p.metadata.namespace.as_deref().unwrap_or("");
        claim::orphan_owners(&ctx.sets.list_namespace(ns), p, |d: &DaemonSet| {
            serde_json::to_value(d.spec.as_ref().map(|s| &s.selector)).unwrap_or_default()
        })
    };
    pod_informer.add_event_handler(
        EventHandlerFuncs::new()
            .on_add(move |p: &Arc<Pod>, _| {
                if let Some(key) = owner_key(&p.metadata) {
                    c_add.expectations.observed(&key, 1, 0);
                    c_add.queue.add(key);
                }
                for key in orphan_owners(&c_add, p) {
                    c_add.queue.add(key);
                }
            })
            .on_update(move |old: &Arc<Pod>, new: &Arc<Pod>| {
                if new.metadata.deletion_timestamp.is_some()
                    && old.metadata.deletion_timestamp.is_none()
                {
                    if let Some(key) = owner_key(&new.metadata) {
                        c_update.expectations.observed(&key, 0, 1);
                    }
                }
                for key in [owner_key(&old.metadata), owner_key(&new.metadata)]
                    .into_iter()
                    .flatten()
                {
                    c_update.queue.add(key);
                }
                for key in orphan_owners(&c_update, new) {
                    c_update.queue.add(key);
                }
            })
            .on_delete(move |d| {
                if let Some(key) = owner_key(&d.object().metadata) {
                    if d.object().metadata.deletion_timestamp.is_none() {
                        c_delete.expectations.observed(&key, 0, 1);
                    }
                    c_delete.queue.add(key);
                }
            }),
    );
    let enqueue_all = {
        let ctx = ctx.clone();
        move || {
            for key in ctx.sets.list_keys() {
                ctx.queue.add(key);
            }
        }
    };
    let (e1, e2, e3) = (enqueue_all.clone(), enqueue_all.clone(), enqueue_all);
    node_informer.add_event_handler(
        EventHandlerFuncs::new()
            .on_add(move |_: &Arc<Node>, _| e1())
            .on_update(move |old: &Arc<Node>, new: &Arc<Node>| {
                if node_changed(old, new) {
                    e2()
                }
            })
            .on_delete(move |_| e3()),
    );
    let (q1, q2) = (queue.clone(), queue.clone());
    rev_informer.add_event_handler(
        EventHandlerFuncs::new()
            .on_add(move |r: &Arc<ControllerRevision>, _| {
                owner_key(&r.metadata).into_iter().for_each(|k| q1.add(k))
            })
            .on_delete(move |d| {
                owner_key(&d.object().metadata)
                    .into_iter()
                    .for_each(|k| q2.add(k))
            }),
    );
    factory.start();
    factory.wait_for_cache_sync().await;
    Controller::new("daemonset", queue)
        .with_max_retries(15)
        .run(workers, move |key: String| {
            let ctx = ctx.clone();
            async move { sync_daemonset(&ctx, &key).await }
        })
        .await;
}

/// Upstream `constructHistory`: the revision of the current template (created when missing, an older
/// equal one renumbered to the newest) and its hash; the collision count may grow.
async fn current_revision(
    ctx: &Ctx,
    ds: &DaemonSet,
    owned: &[Arc<ControllerRevision>],
    collision_count: &mut i32,
) -> Result<(ControllerRevision, String), String> {
    let ns = ds.metadata.namespace.as_deref().unwrap_or("");
    let api: Api<ControllerRevision> = Api::namespaced(ctx.client.clone(), ns);
    let template =
        serde_json::to_value(ds.spec.as_ref().map(|s| &s.template)).map_err(|e| e.to_string())?;
    let data = history::template_patch(&template);
    let (current, old): (Vec<_>, Vec<_>) = owned
        .iter()
        .partition(|r| r.data.as_ref().map(|d| &d.0) == Some(&data));
    let next = old.iter().map(|r| r.revision).max().unwrap_or(0) + 1;
    // Upstream hashes the collision count only once the status has one (it starts unset).
    let unset = ds.status.as_ref().and_then(|s| s.collision_count).is_none();
    let probe = |cc: i32| (!(unset && cc == 0)).then_some(cc);
    let rev = match current.last() {
        Some(cur) if cur.revision >= next => (***cur).clone(),
        Some(cur) => history::update_revision(&api, cur, next).await?,
        None => {
            let make = |cc: i32| {
                let hash = sync::template_hash(&template, probe(cc));
                let mut labels = template["metadata"]["labels"].clone();
                if !labels.is_object() {
                    labels = json!({});
                }
                labels[sync::HASH_LABEL] = json!(hash);
                serde_json::from_value(json!({
                    "apiVersion": "apps/v1", "kind": "ControllerRevision",
                    "metadata": {
                        "name": format!("{}-{hash}", ds.metadata.name.as_deref().unwrap_or("")),
                        "namespace": ns,
                        "labels": labels,
                        "annotations": ds.metadata.annotations,
                        "ownerReferences": [history::controller_ref(&ds.metadata, KIND)],
                    },
                    "data": data,
                    "revision": next,
                }))
                .expect("a ControllerRevision from its own fields")
            };
            history::create_revision(&api, make, collision_count).await?
        }
    };
    let hash = rev
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(sync::HASH_LABEL))
        .cloned()
        .unwrap_or_else(|| sync::template_hash(&template, probe(*collision_count)));
    Ok((rev, hash))
}

async fn sync_daemonset(ctx: &Ctx, key: &str) -> Result<(), String> {
    let Some(ds) = ctx.sets.get(key) else {
        ctx.expectations.forget(key);
        return Ok(());
    };
    if ds.metadata.deletion_timestamp.is_some() {
        return Ok(());
    }
    let (ns, name) = split_key(key);
    let ns = ns.unwrap_or_default();
    let uid = ds.metadata.uid.clone().unwrap_or_default();
    let selector_value =
        serde_json::to_value(ds.spec.as_ref().map(|s| &s.selector)).unwrap_or_default();
    let selector = apimachinery::labels::selector_from_label_selector(&selector_value)
        .map_err(|e| format!("{key}: invalid selector: {e}"))?;
    let claim = claim::claim_pods(&ds.metadata, &ctx.pods.list_namespace(ns), |p| {
        selector.matches(&claim::pod_labels(p))
    });
    let pods_api: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    claim::apply(&pods_api, &ds.metadata, KIND, &claim).await?;
    let pods = claim.owned;
    let mut nodes = ctx.nodes.list();
    nodes.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let owned = history::owned_revisions(&ctx.revisions.list_namespace(ns), &uid);
    let mut collision_count = ds
        .status
        .as_ref()
        .and_then(|s| s.collision_count)
        .unwrap_or(0);
    let (cur, hash) = current_revision(ctx, &ds, &owned, &mut collision_count).await?;
    let by_node = sync::pods_by_node(&pods);
    let now = jiff::Timestamp::now();

    if ctx.expectations.satisfied(key) {
        let mut changes = sync::manage(&ds, &nodes, &by_node, &hash, now);
        if changes == sync::Changes::default() {
            changes = sync::rolling_update(&ds, &nodes, &by_node, &hash, now);
        }
        sync_nodes(ctx, key, &ds, &hash, changes).await?;
    }

    // Old revisions no pod uses go beyond the history limit, oldest first.
    let live_hashes: HashSet<&str> = pods
        .iter()
        .filter_map(|p| p.metadata.labels.as_ref()?.get(sync::HASH_LABEL))
        .map(String::as_str)
        .collect();
    let mut live: HashSet<String> = owned
        .iter()
        .filter(|r| {
            r.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(sync::HASH_LABEL))
                .is_some_and(|h| live_hashes.contains(h.as_str()))
        })
        .filter_map(|r| r.metadata.name.clone())
        .collect();
    live.insert(cur.metadata.name.clone().unwrap_or_default());
    let limit = ds
        .spec
        .as_ref()
        .and_then(|s| s.revision_history_limit)
        .unwrap_or(10);
    let rev_api: Api<ControllerRevision> = Api::namespaced(ctx.client.clone(), ns);
    history::truncate_history(&rev_api, &owned, &live, limit).await?;

    let mut status = sync::status(&ds, &nodes, &by_node, &hash, now);
    if collision_count > 0 {
        status["collisionCount"] = json!(collision_count);
    }
    let existing = serde_json::to_value(&ds.status).unwrap_or_default();
    history::omit_zero(
        &mut status,
        &[
            "observedGeneration",
            "updatedNumberScheduled",
            "numberAvailable",
            "numberUnavailable",
        ],
    );
    if history::status_differs(&existing, &status) {
        let api: Api<DaemonSet> = Api::namespaced(ctx.client.clone(), ns);
        api.patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": status})),
        )
        .await
        .map_err(|e| format!("status: {e}"))?;
    }
    let min_ready = ds
        .spec
        .as_ref()
        .and_then(|s| s.min_ready_seconds)
        .unwrap_or(0) as i64;
    let next = pods
        .iter()
        .filter_map(|p| sync::available_at(p, min_ready, now))
        .min();
    if let Some(at) = next {
        if let Ok(after) = std::time::Duration::try_from(at.duration_since(now)) {
            ctx.queue.add_after(key.to_string(), after);
        }
    }
    Ok(())
}

/// Creates a pod for each node and deletes the pods (upstream `syncNodes`), under expectations.
async fn sync_nodes(
    ctx: &Ctx,
    key: &str,
    ds: &DaemonSet,
    hash: &str,
    changes: sync::Changes,
) -> Result<(), String> {
    let ns = ds.metadata.namespace.as_deref().unwrap_or("");
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    let unique = |v: Vec<String>| -> Vec<String> {
        let mut seen = HashSet::new();
        v.into_iter().filter(|n| seen.insert(n.clone())).collect()
    };
    let (create, delete) = (unique(changes.create), unique(changes.delete));
    if create.is_empty() && delete.is_empty() {
        return Ok(());
    }
    ctx.expectations
        .expect(key, create.len() as i64, delete.len() as i64);
    let template =
        serde_json::to_value(ds.spec.as_ref().map(|s| &s.template)).map_err(|e| e.to_string())?;
    let params = PostParams::default();
    let creates = create.iter().map(|node| {
        let pod = sync::new_pod(ds, &template, node, hash);
        let api = api.clone();
        let params = params.clone();
        async move {
            let pod: Pod = serde_json::from_value(pod).map_err(|e| e.to_string())?;
            api.create(&params, &pod)
                .await
                .map(drop)
                .map_err(|e| format!("create pod for node {node}: {e}"))
        }
    });
    let mut first_err = None;
    for r in futures::future::join_all(creates).await {
        if let Err(e) = r {
            // A create that failed will never be observed.
            ctx.expectations.observed(key, 1, 0);
            first_err.get_or_insert(e);
        }
    }
    for pod in &delete {
        match api.delete(pod, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(e) => {
                ctx.expectations.observed(key, 0, 1);
                if !matches!(&e, kube::Error::Api(a) if a.code == 404) {
                    first_err.get_or_insert(format!("delete pod {pod}: {e}"));
                }
            }
        }
    }
    first_err.map_or(Ok(()), Err)
}

#[cfg(test)]
mod sync_tests;
