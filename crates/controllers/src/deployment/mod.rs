//! The Deployment controller (upstream `pkg/controller/deployment`): one ReplicaSet per pod template
//! (named `<deployment>-<pod-template-hash>`, revision annotations), rolled out by the Recreate or
//! RollingUpdate strategy (maxSurge/maxUnavailable); orphan ReplicaSets matching the selector adopted;
//! `spec.replicas` changes spread proportionally over a rollout in progress; pause and resume;
//! status with the Available and Progressing conditions (`progressDeadlineSeconds`); old ReplicaSets
//! beyond `revisionHistoryLimit` removed.
//!
//! Not yet: pod-template-hash collisions (`collisionCount`): our hash is of our JSON form of the
//! template, so two templates colliding is as unlikely as an FNV-32 collision but not handled.

pub mod progress;
pub mod rollout;
pub mod scale;

use std::sync::Arc;

use client::controller::{Controller, EnqueueHandler};
use client::informer::{split_key, EventHandlerFuncs, SharedInformerFactory, Store};
use client::workqueue::{default_controller_rate_limiter, QueueConfig, RateLimitingQueue};
use k8s_openapi::api::apps::v1::{Deployment, DeploymentStatus, ReplicaSet};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::{json, Value};

use rollout::{HASH_LABEL, REVISION};

struct Ctx {
    client: kube::Client,
    deployments: Arc<Store<Deployment>>,
    replicasets: Arc<Store<ReplicaSet>>,
    queue: RateLimitingQueue<String>,
}

/// The key of the Deployment controlling this replicaset, if any.
fn owner_key(obj: &ReplicaSet) -> Option<String> {
    crate::controller_key(&obj.metadata, "Deployment")
}

pub async fn run(client: kube::Client, factory: &SharedInformerFactory, workers: usize) {
    let d_informer = factory.informer::<Deployment>();
    let rs_informer = factory.informer::<ReplicaSet>();
    let queue = RateLimitingQueue::with_config(
        default_controller_rate_limiter::<String>(),
        QueueConfig::named("deployment"),
    );
    d_informer.add_event_handler(EnqueueHandler::new(queue.clone()));
    let (q1, q2, q3) = (queue.clone(), queue.clone(), queue.clone());
    rs_informer.add_event_handler(
        EventHandlerFuncs::new()
            .on_add(move |rs: &Arc<ReplicaSet>, _| {
                owner_key(rs).into_iter().for_each(|k| q1.add(k))
            })
            .on_update(move |_, rs: &Arc<ReplicaSet>| {
                owner_key(rs).into_iter().for_each(|k| q2.add(k))
            })
            .on_delete(move |d| owner_key(d.object()).into_iter().for_each(|k| q3.add(k))),
    );
    let ctx = Arc::new(Ctx {
        client,
        deployments: d_informer.store(),
        replicasets: rs_informer.store(),
        queue: queue.clone(),
    });
    factory.start();
    factory.wait_for_cache_sync().await;
    Controller::new("deployment", queue)
        .with_max_retries(15)
        .run(workers, move |key: String| {
            let ctx = ctx.clone();
            async move { sync_deployment(&ctx, &key).await }
        })
        .await;
}

fn revision(rs: &ReplicaSet) -> i64 {
    rs.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(REVISION))
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

/// Sets a ReplicaSet's replicas and the desired/max-replicas annotations the scaling logic reads back
/// (upstream `scaleReplicaSet`); writes nothing when both are already so.
async fn scale(
    api: &Api<ReplicaSet>,
    d: &Deployment,
    rs: &ReplicaSet,
    replicas: i32,
) -> Result<(), String> {
    if rollout::rs_replicas(rs) == replicas && scale::annotations_current(d, rs) {
        return Ok(());
    }
    let name = rs.metadata.name.as_deref().unwrap_or("");
    let desired = rollout::replicas(d);
    let patch = json!({
        "metadata": {"annotations": {
            scale::DESIRED_REPLICAS: desired.to_string(),
            scale::MAX_REPLICAS: (desired + rollout::fenceposts(d).0).to_string(),
        }},
        "spec": {"replicas": replicas},
    });
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(drop)
        .map_err(|e| format!("scale {name}: {e}"))
}

async fn write_status(
    api: &Api<Deployment>,
    d: &Deployment,
    status: &DeploymentStatus,
) -> Result<(), String> {
    if d.status.as_ref() == Some(status) {
        return Ok(());
    }
    let name = d.metadata.name.as_deref().unwrap_or("");
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(&json!({ "status": status })),
    )
    .await
    .map(drop)
    .map_err(|e| format!("status: {e}"))
}

/// Upstream `getReplicaSetsForDeployment`: ReplicaSets it controls and still selects; orphans it
/// selects are adopted, owned ones it no longer selects are released.
async fn claim_replicasets(
    ctx: &Ctx,
    d: &Deployment,
    api: &Api<ReplicaSet>,
) -> Result<Vec<Arc<ReplicaSet>>, String> {
    let ns = d.metadata.namespace.as_deref().unwrap_or("");
    let uid = d.metadata.uid.clone().unwrap_or_default();
    let selector_value =
        serde_json::to_value(d.spec.as_ref().map(|s| &s.selector)).unwrap_or_default();
    let selector = apimachinery::labels::selector_from_label_selector(&selector_value)
        .map_err(|e| format!("invalid selector: {e}"))?;
    let mut owned = Vec::new();
    for rs in ctx.replicasets.list_namespace(ns) {
        let labels: serde_json::Map<String, Value> = rs
            .metadata
            .labels
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), json!(v)))
            .collect();
        let matches = !selector.is_empty() && selector.matches(&labels);
        let controller = rs
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|r| r.controller == Some(true));
        let rs_name = rs.metadata.name.as_deref().unwrap_or("");
        let patch = match controller {
            Some(r) if r.uid == uid && matches => {
                owned.push(rs.clone());
                continue;
            }
            Some(r) if r.uid == uid && rs.metadata.deletion_timestamp.is_none() => {
                json!({"metadata": {"ownerReferences": [{"$patch": "delete", "uid": uid}], "uid": rs.metadata.uid}})
            }
            None if matches
                && d.metadata.deletion_timestamp.is_none()
                && rs.metadata.deletion_timestamp.is_none() =>
            {
                owned.push(rs.clone());
                json!({"metadata": {"ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment",
                    "name": d.metadata.name, "uid": uid, "controller": true, "blockOwnerDeletion": true}],
                    "uid": rs.metadata.uid}})
            }
            _ => continue,
        };
        api.patch(rs_name, &PatchParams::default(), &Patch::Strategic(&patch))
            .await
            .map_err(|e| format!("adopt or release ReplicaSet {rs_name}: {e}"))?;
    }
    owned.sort_by_key(|rs| revision(rs));
    Ok(owned)
}

/// Old ReplicaSets beyond the history limit go, oldest first, once they have no pods (upstream
/// `cleanupDeployment`).
async fn cleanup(api: &Api<ReplicaSet>, d: &Deployment, old: &[Arc<ReplicaSet>]) {
    let limit = d
        .spec
        .as_ref()
        .and_then(|s| s.revision_history_limit)
        .unwrap_or(10)
        .max(0) as usize;
    let empty_old: Vec<&Arc<ReplicaSet>> = old
        .iter()
        .filter(|rs| {
            rollout::rs_replicas(rs) == 0
                && rs.status.as_ref().is_none_or(|s| s.replicas == 0)
                && rs.metadata.deletion_timestamp.is_none()
        })
        .collect();
    for rs in empty_old.iter().take(empty_old.len().saturating_sub(limit)) {
        let _ = api
            .delete(
                rs.metadata.name.as_deref().unwrap_or(""),
                &DeleteParams::default(),
            )
            .await;
    }
}

/// The new ReplicaSet for the Deployment's current template (upstream `getNewReplicaSet` with
/// `createIfNotExisted`), with the Progressing condition saying so.
async fn create_new_replicaset(
    ctx: &Ctx,
    d: &Deployment,
    template: &Value,
    old: &[Arc<ReplicaSet>],
    now: jiff::Timestamp,
) -> Result<(), String> {
    let ns = d.metadata.namespace.as_deref().unwrap_or("");
    let name = d.metadata.name.as_deref().unwrap_or("");
    let spec = d.spec.clone().unwrap_or_default();
    let desired = rollout::replicas(d);
    let recreate = spec.strategy.as_ref().and_then(|s| s.type_.as_deref()) == Some("Recreate");
    let hash = rollout::template_hash(template);
    let next_revision = old.iter().map(|rs| revision(rs)).max().unwrap_or(0) + 1;
    let all: Vec<&ReplicaSet> = old.iter().map(|rs| rs.as_ref()).collect();
    let empty: ReplicaSet =
        serde_json::from_value(json!({"metadata": {}, "spec": {"replicas": 0, "selector": {}}}))
            .map_err(|e| e.to_string())?;
    let initial = if recreate {
        if old.iter().any(|rs| rollout::rs_replicas(rs) > 0) {
            0
        } else {
            desired
        }
    } else {
        rollout::new_rs_target(d, &empty, &all)
    };
    let mut rs_template = template.clone();
    rs_template["metadata"]["labels"][HASH_LABEL] = json!(hash);
    let mut selector = serde_json::to_value(&spec.selector).map_err(|e| e.to_string())?;
    selector["matchLabels"][HASH_LABEL] = json!(hash);
    let (surge, _) = rollout::fenceposts(d);
    let rs_name = format!("{name}-{hash}");
    let rs: ReplicaSet = serde_json::from_value(json!({
        "metadata": {
            "name": rs_name,
            "namespace": ns,
            "labels": rs_template["metadata"]["labels"],
            "annotations": {REVISION: next_revision.to_string(),
                            scale::DESIRED_REPLICAS: desired.to_string(),
                            scale::MAX_REPLICAS: (desired + surge).to_string()},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": name,
                                 "uid": d.metadata.uid, "controller": true, "blockOwnerDeletion": true}],
        },
        "spec": {"replicas": initial, "minReadySeconds": spec.min_ready_seconds.unwrap_or(0),
                 "selector": selector, "template": rs_template},
    }))
    .map_err(|e| e.to_string())?;
    let rs_api: Api<ReplicaSet> = Api::namespaced(ctx.client.clone(), ns);
    match rs_api.create(&PostParams::default(), &rs).await {
        Ok(_) => {}
        // Ours from an earlier sync the cache has not shown yet; the informer event requeues us.
        Err(kube::Error::Api(e)) if e.code == 409 => return Ok(()),
        Err(e) => return Err(format!("create ReplicaSet: {e}")),
    }
    if progress::has_progress_deadline(d) {
        let mut status = d.status.clone().unwrap_or_default();
        progress::set(
            &mut status,
            progress::condition(
                "Progressing",
                "True",
                progress::NEW_RS_CREATED,
                format!("Created new replica set \"{rs_name}\""),
                now,
            ),
        );
        let d_api: Api<Deployment> = Api::namespaced(ctx.client.clone(), ns);
        write_status(&d_api, d, &status).await?;
    }
    Ok(())
}

async fn sync_deployment(ctx: &Ctx, key: &str) -> Result<(), String> {
    let Some(cached) = ctx.deployments.get(key) else {
        return Ok(());
    };
    let mut d = (*cached).clone();
    let (ns, name) = split_key(key);
    let ns = ns.unwrap_or_default();
    let rs_api: Api<ReplicaSet> = Api::namespaced(ctx.client.clone(), ns);
    let d_api: Api<Deployment> = Api::namespaced(ctx.client.clone(), ns);
    let now = progress::now();
    let owned = claim_replicasets(ctx, &d, &rs_api).await?;
    let spec = d.spec.clone().unwrap_or_default();
    let template = serde_json::to_value(&spec.template).map_err(|e| e.to_string())?;
    let is_new = |rs: &ReplicaSet| {
        let t = rs
            .spec
            .as_ref()
            .map(|s| serde_json::to_value(&s.template).unwrap_or_default());
        t.is_some_and(|t| rollout::without_hash(&t) == template)
    };
    let new_rs = owned.iter().find(|rs| is_new(rs)).cloned();
    let old: Vec<Arc<ReplicaSet>> = owned.iter().filter(|rs| !is_new(rs)).cloned().collect();
    let all: Vec<&ReplicaSet> = owned.iter().map(|rs| rs.as_ref()).collect();
    // A Deployment being deleted only gets its status (upstream `syncStatusOnly`).
    if d.metadata.deletion_timestamp.is_some() {
        let status = progress::calculate(&d, new_rs.as_deref(), &all, now);
        return write_status(&d_api, &d, &status).await;
    }
    if let Some(status) = progress::paused_condition(&d, now) {
        write_status(&d_api, &d, &status).await?;
        d.status = Some(status);
    }
    let paused = spec.paused == Some(true);

    // Paused, or resized mid-rollout: resize in proportion, no rollout step (upstream `dc.sync`).
    if paused || scale::is_scaling_event(&d, &all) {
        let new_index = new_rs
            .as_ref()
            .and_then(|n| owned.iter().position(|rs| Arc::ptr_eq(rs, n)));
        for (i, replicas) in scale::proportional(&d, &all, new_index) {
            scale(&rs_api, &d, all[i], replicas).await?;
        }
        if paused {
            cleanup(&rs_api, &d, &old).await;
        }
        let status = progress::calculate(&d, new_rs.as_deref(), &all, now);
        return write_status(&d_api, &d, &status).await;
    }

    let Some(new_rs) = new_rs else {
        return create_new_replicaset(ctx, &d, &template, &old, now).await;
    };

    // A template seen before (a rollback) makes its ReplicaSet the newest revision again.
    let max_old = old.iter().map(|rs| revision(rs)).max().unwrap_or(0);
    let mut new_revision = revision(&new_rs);
    if new_revision <= max_old {
        new_revision = max_old + 1;
        let patch = json!({"metadata": {"annotations": {REVISION: new_revision.to_string()}}});
        rs_api
            .patch(
                new_rs.metadata.name.as_deref().unwrap_or(""),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .map_err(|e| format!("revision of the ReplicaSet: {e}"))?;
    }
    // The Deployment carries its current revision (kubectl rollout undo and history rely on it).
    let new_revision = new_revision.to_string();
    if d.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(REVISION))
        != Some(&new_revision)
    {
        let patch = json!({"metadata": {"annotations": {REVISION: new_revision}}});
        d_api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| format!("revision annotation: {e}"))?;
    }
    let desired = rollout::replicas(&d);
    if spec.strategy.as_ref().and_then(|s| s.type_.as_deref()) == Some("Recreate") {
        let old_running = old.iter().any(|rs| {
            rollout::rs_replicas(rs) > 0 || rs.status.as_ref().is_some_and(|s| s.replicas > 0)
        });
        for rs in old.iter().filter(|rs| rollout::rs_replicas(rs) > 0) {
            scale(&rs_api, &d, rs, 0).await?;
        }
        if !old_running {
            scale(&rs_api, &d, &new_rs, desired).await?;
        }
    } else {
        let target = rollout::new_rs_target(&d, &new_rs, &all);
        scale(&rs_api, &d, &new_rs, target).await?;
        let mut budget = rollout::old_scale_down_budget(&d, &new_rs, &all);
        for rs in old.iter().filter(|rs| rollout::rs_replicas(rs) > 0) {
            if budget <= 0 {
                break;
            }
            let down = budget.min(rollout::rs_replicas(rs));
            scale(&rs_api, &d, rs, rollout::rs_replicas(rs) - down).await?;
            budget -= down;
        }
    }
    let status = progress::rollout(&d, Some(&new_rs), &all, now);
    if progress::complete(&d, &status) {
        cleanup(&rs_api, &d, &old).await;
    }
    write_status(&d_api, &d, &status).await?;
    if let Some(after) = progress::recheck_after(&d, &status, now) {
        ctx.queue.add_after(key.to_string(), after);
    }
    Ok(())
}
