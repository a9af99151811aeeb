//! The Deployment controller (upstream `pkg/controller/deployment`): one ReplicaSet per pod template
//! (named `<deployment>-<pod-template-hash>`, revision annotations), rolled out by the Recreate or
//! RollingUpdate strategy (maxSurge/maxUnavailable), status and the Available/Progressing conditions,
//! and old ReplicaSets beyond `revisionHistoryLimit` removed.
//!
//! Not yet: adoption of orphan ReplicaSets, hash collisions, `progressDeadlineSeconds`, proportional
//! scaling during a rollout, pause (a paused Deployment only gets its status).

pub mod rollout;

use std::sync::Arc;

use client::controller::{Controller, EnqueueHandler};
use client::informer::{split_key, EventHandlerFuncs, SharedInformerFactory, Store};
use client::workqueue::{default_controller_rate_limiter, QueueConfig, RateLimitingQueue};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::{json, Value};

use rollout::{HASH_LABEL, REVISION};

struct Ctx {
    client: kube::Client,
    deployments: Arc<Store<Deployment>>,
    replicasets: Arc<Store<ReplicaSet>>,
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

async fn scale(api: &Api<ReplicaSet>, rs: &ReplicaSet, replicas: i32) -> Result<(), String> {
    let name = rs.metadata.name.as_deref().unwrap_or("");
    let patch = json!({"spec": {"replicas": replicas}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(drop)
        .map_err(|e| format!("scale {name}: {e}"))
}

async fn sync_deployment(ctx: &Ctx, key: &str) -> Result<(), String> {
    let Some(d) = ctx.deployments.get(key) else {
        return Ok(());
    };
    if d.metadata.deletion_timestamp.is_some() {
        return Ok(());
    }
    let (ns, name) = split_key(key);
    let ns = ns.unwrap_or_default();
    let rs_api: Api<ReplicaSet> = Api::namespaced(ctx.client.clone(), ns);
    let uid = d.metadata.uid.clone().unwrap_or_default();
    let spec = d.spec.clone().unwrap_or_default();
    let template = serde_json::to_value(&spec.template).map_err(|e| e.to_string())?;
    let mut owned: Vec<Arc<ReplicaSet>> = ctx
        .replicasets
        .list_namespace(ns)
        .into_iter()
        .filter(|rs| {
            rs.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|r| r.controller == Some(true) && r.uid == uid)
        })
        .collect();
    owned.sort_by_key(|rs| revision(rs));
    let is_new = |rs: &ReplicaSet| {
        let t = rs
            .spec
            .as_ref()
            .map(|s| serde_json::to_value(&s.template).unwrap_or_default());
        t.is_some_and(|t| rollout::without_hash(&t) == template)
    };
    let new_rs = owned.iter().find(|rs| is_new(rs)).cloned();
    let old: Vec<Arc<ReplicaSet>> = owned.iter().filter(|rs| !is_new(rs)).cloned().collect();
    let desired = rollout::replicas(&d);
    let recreate = spec.strategy.as_ref().and_then(|s| s.type_.as_deref()) == Some("Recreate");
    let paused = spec.paused == Some(true);

    let Some(new_rs) = new_rs else {
        if paused {
            return Ok(());
        }
        // The first step of a rollout: the ReplicaSet of the current template.
        let hash = rollout::template_hash(&template);
        let next_revision = old.iter().map(|rs| revision(rs)).max().unwrap_or(0) + 1;
        let all: Vec<&ReplicaSet> = old.iter().map(|rs| rs.as_ref()).collect();
        let empty: ReplicaSet = serde_json::from_value(
            json!({"metadata": {}, "spec": {"replicas": 0, "selector": {}}}),
        )
        .map_err(|e| e.to_string())?;
        let initial = if recreate {
            if old.iter().any(|rs| rollout::rs_replicas(rs) > 0) {
                0
            } else {
                desired
            }
        } else {
            rollout::new_rs_target(&d, &empty, &all)
        };
        let mut rs_template = template.clone();
        rs_template["metadata"]["labels"][HASH_LABEL] = json!(hash);
        let mut selector = serde_json::to_value(&spec.selector).map_err(|e| e.to_string())?;
        selector["matchLabels"][HASH_LABEL] = json!(hash);
        let (surge, _) = rollout::fenceposts(&d);
        let rs: ReplicaSet = serde_json::from_value(json!({
            "metadata": {
                "name": format!("{name}-{hash}"),
                "namespace": ns,
                "labels": rs_template["metadata"]["labels"],
                "annotations": {REVISION: next_revision.to_string(),
                                "deployment.kubernetes.io/desired-replicas": desired.to_string(),
                                "deployment.kubernetes.io/max-replicas": (desired + surge).to_string()},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": name, "uid": uid,
                                     "controller": true, "blockOwnerDeletion": true}],
            },
            "spec": {"replicas": initial, "minReadySeconds": spec.min_ready_seconds.unwrap_or(0),
                     "selector": selector, "template": rs_template},
        }))
        .map_err(|e| e.to_string())?;
        return match rs_api.create(&PostParams::default(), &rs).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
            Err(e) => Err(format!("create ReplicaSet: {e}")),
        };
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
    let d_api: Api<Deployment> = Api::namespaced(ctx.client.clone(), ns);
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
    let all: Vec<&ReplicaSet> = owned.iter().map(|rs| rs.as_ref()).collect();
    if !paused {
        if recreate {
            let old_running = old.iter().any(|rs| {
                rollout::rs_replicas(rs) > 0 || rs.status.as_ref().is_some_and(|s| s.replicas > 0)
            });
            for rs in old.iter().filter(|rs| rollout::rs_replicas(rs) > 0) {
                scale(&rs_api, rs, 0).await?;
            }
            if !old_running && rollout::rs_replicas(&new_rs) != desired {
                scale(&rs_api, &new_rs, desired).await?;
            }
        } else {
            let target = rollout::new_rs_target(&d, &new_rs, &all);
            if target != rollout::rs_replicas(&new_rs) {
                scale(&rs_api, &new_rs, target).await?;
            }
            let mut budget = rollout::old_scale_down_budget(&d, &new_rs, &all);
            for rs in old.iter().filter(|rs| rollout::rs_replicas(rs) > 0) {
                if budget <= 0 {
                    break;
                }
                let down = budget.min(rollout::rs_replicas(rs));
                scale(&rs_api, rs, rollout::rs_replicas(rs) - down).await?;
                budget -= down;
            }
        }
    }

    // Old ReplicaSets beyond the history limit go, oldest first, once they have no pods.
    let limit = spec.revision_history_limit.unwrap_or(10).max(0) as usize;
    let empty_old: Vec<&Arc<ReplicaSet>> = old
        .iter()
        .filter(|rs| {
            rollout::rs_replicas(rs) == 0 && rs.status.as_ref().is_none_or(|s| s.replicas == 0)
        })
        .collect();
    for rs in empty_old.iter().take(empty_old.len().saturating_sub(limit)) {
        let _ = rs_api
            .delete(
                rs.metadata.name.as_deref().unwrap_or(""),
                &DeleteParams::default(),
            )
            .await;
    }

    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let status = rollout::status(&d, Some(&new_rs), &all, &now);
    let current = serde_json::to_value(&d.status).unwrap_or_default();
    let summary = |s: &Value| -> Value {
        let conditions: Vec<Value> = s["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| json!([c["type"], c["status"], c["reason"]]))
            .collect();
        json!([
            s["observedGeneration"],
            s["replicas"],
            s["updatedReplicas"],
            s["readyReplicas"],
            s["availableReplicas"],
            s["unavailableReplicas"],
            conditions
        ])
    };
    let norm = |s: &Value| -> Value {
        let mut s = s.clone();
        for f in [
            "replicas",
            "updatedReplicas",
            "readyReplicas",
            "availableReplicas",
            "unavailableReplicas",
            "observedGeneration",
        ] {
            if s.get(f).is_none_or(Value::is_null) {
                s[f] = json!(0);
            }
        }
        summary(&s)
    };
    if norm(&current) != norm(&status) {
        d_api
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"status": status})),
            )
            .await
            .map_err(|e| format!("status: {e}"))?;
    }
    Ok(())
}
