//! The StatefulSet controller (upstream `pkg/controller/statefulset`): pods with stable identities
//! `<set>-<ordinal>` (hostname, subdomain = serviceName, pod-name and pod-index labels), created in
//! order and each waited for Running and Ready under OrderedReady (all at once under Parallel), scaled
//! down from the highest ordinal, claims from `volumeClaimTemplates`, ControllerRevisions for the
//! template, RollingUpdate (partition, maxUnavailable) and OnDelete, and the status kubectl reads.
//!
//! Pod names are fixed, so a stale cache only makes a create fail with AlreadyExists or repeat a
//! delete: unlike the ReplicaSet controller no expectations are needed (upstream has none either).
//! Pods are adopted and released by selector (members only: named `<set>-<ordinal>`); a member's
//! identity labels are restored if edited. Not yet: adoption of orphan ControllerRevisions, fixing a
//! pod's volumes (immutable anyway), events. `spec.ordinals` and `maxUnavailable` are always honoured
//! (upstream gates the latter behind `MaxUnavailableStatefulSet`, off by default in 1.33).

pub mod control;

use std::collections::HashSet;
use std::sync::Arc;

use client::controller::{Controller, EnqueueHandler};
use client::informer::{split_key, EventHandlerFuncs, SharedInformerFactory, Store};
use client::workqueue::{default_controller_rate_limiter, QueueConfig, RateLimitingQueue};
use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::json;

use crate::{claim, history};

const KIND: &str = "StatefulSet";

struct Ctx {
    client: kube::Client,
    sets: Arc<Store<StatefulSet>>,
    pods: Arc<Store<Pod>>,
    revisions: Arc<Store<ControllerRevision>>,
    claims: Arc<Store<PersistentVolumeClaim>>,
    queue: RateLimitingQueue<String>,
}

pub async fn run(client: kube::Client, factory: &SharedInformerFactory, workers: usize) {
    let set_informer = factory.informer::<StatefulSet>();
    let pod_informer = factory.informer::<Pod>();
    let rev_informer = factory.informer::<ControllerRevision>();
    let claim_informer = factory.informer::<PersistentVolumeClaim>();
    let queue = RateLimitingQueue::with_config(
        default_controller_rate_limiter::<String>(),
        QueueConfig::named("statefulset"),
    );
    set_informer.add_event_handler(EnqueueHandler::new(queue.clone()));
    let owner = |meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
        crate::controller_key(meta, KIND)
    };
    let (q1, q2, q3) = (queue.clone(), queue.clone(), queue.clone());
    let sets = set_informer.store();
    let orphan_owners = move |p: &Pod| {
        let ns = p.metadata.namespace.as_deref().unwrap_or("");
        claim::orphan_owners(&sets.list_namespace(ns), p, |s: &StatefulSet| {
            serde_json::to_value(s.spec.as_ref().map(|s| &s.selector)).unwrap_or_default()
        })
    };
    let orphan_owners_update = orphan_owners.clone();
    pod_informer.add_event_handler(
        EventHandlerFuncs::new()
            .on_add(move |p: &Arc<Pod>, _| {
                for k in owner(&p.metadata).into_iter().chain(orphan_owners(p)) {
                    q1.add(k);
                }
            })
            .on_update(move |old: &Arc<Pod>, new: &Arc<Pod>| {
                for k in [owner(&old.metadata), owner(&new.metadata)]
                    .into_iter()
                    .flatten()
                    .chain(orphan_owners_update(new))
                {
                    q2.add(k);
                }
            })
            .on_delete(move |d| {
                owner(&d.object().metadata)
                    .into_iter()
                    .for_each(|k| q3.add(k))
            }),
    );
    let (q1, q2, q3) = (queue.clone(), queue.clone(), queue.clone());
    rev_informer.add_event_handler(
        EventHandlerFuncs::new()
            .on_add(move |r: &Arc<ControllerRevision>, _| {
                owner(&r.metadata).into_iter().for_each(|k| q1.add(k))
            })
            .on_update(move |_, r: &Arc<ControllerRevision>| {
                owner(&r.metadata).into_iter().for_each(|k| q2.add(k))
            })
            .on_delete(move |d| {
                owner(&d.object().metadata)
                    .into_iter()
                    .for_each(|k| q3.add(k))
            }),
    );
    let ctx = Arc::new(Ctx {
        client,
        sets: set_informer.store(),
        pods: pod_informer.store(),
        revisions: rev_informer.store(),
        claims: claim_informer.store(),
        queue: queue.clone(),
    });
    factory.start();
    factory.wait_for_cache_sync().await;
    Controller::new("statefulset", queue)
        .with_max_retries(15)
        .run(workers, move |key: String| {
            let ctx = ctx.clone();
            async move { sync_statefulset(&ctx, &key).await }
        })
        .await;
}

/// Upstream `getStatefulSetRevisions`: the revision of the current template (created, or an equal
/// older one renumbered to the newest), and the revision the status names as current.
async fn revisions(
    ctx: &Ctx,
    set: &StatefulSet,
    owned: &[Arc<ControllerRevision>],
    collision_count: &mut i32,
) -> Result<(ControllerRevision, ControllerRevision), String> {
    let ns = set.metadata.namespace.as_deref().unwrap_or("");
    let api: Api<ControllerRevision> = Api::namespaced(ctx.client.clone(), ns);
    let template =
        serde_json::to_value(set.spec.as_ref().map(|s| &s.template)).map_err(|e| e.to_string())?;
    let labels = template["metadata"]["labels"].clone();
    let data = history::template_patch(&template);
    let next = history::next_revision(owned);
    let annotations = set.metadata.annotations.clone();
    let make = |cc: i32| {
        let mut rev =
            history::new_revision(&set.metadata, KIND, &labels, data.clone(), next, Some(cc));
        rev.metadata.annotations = annotations.clone();
        rev
    };
    let probe = make(*collision_count);
    let equal: Vec<&Arc<ControllerRevision>> = owned
        .iter()
        .filter(|r| history::equal_revision(r, &probe))
        .collect();
    let update = match equal.last() {
        Some(last)
            if owned
                .last()
                .is_some_and(|l| l.metadata.name == last.metadata.name) =>
        {
            (***last).clone()
        }
        Some(last) => history::update_revision(&api, last, next).await?,
        None => history::create_revision(&api, make, collision_count).await?,
    };
    let current_name = set.status.as_ref().and_then(|s| s.current_revision.clone());
    let current = owned
        .iter()
        .find(|r| r.metadata.name.is_some() && r.metadata.name == current_name)
        .map_or_else(|| update.clone(), |r| (**r).clone());
    Ok((current, update))
}

async fn sync_statefulset(ctx: &Ctx, key: &str) -> Result<(), String> {
    let Some(set) = ctx.sets.get(key) else {
        return Ok(());
    };
    let (ns, name) = split_key(key);
    let ns = ns.unwrap_or_default();
    let uid = set.metadata.uid.clone().unwrap_or_default();
    let selector_value =
        serde_json::to_value(set.spec.as_ref().map(|s| &s.selector)).unwrap_or_default();
    let selector = apimachinery::labels::selector_from_label_selector(&selector_value)
        .map_err(|e| format!("{key}: invalid selector: {e}"))?;
    // Only pods named for the set are its members (upstream `isMemberOf`).
    let claim = claim::claim_pods(&set.metadata, &ctx.pods.list_namespace(ns), |p| {
        selector.matches(&claim::pod_labels(p)) && control::ordinal(&set, p).is_some()
    });
    let pods_api: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    claim::apply(&pods_api, &set.metadata, KIND, &claim).await?;
    let pods = claim.owned;
    let owned = history::owned_revisions(&ctx.revisions.list_namespace(ns), &uid);
    let mut collision_count = set
        .status
        .as_ref()
        .and_then(|s| s.collision_count)
        .unwrap_or(0);
    let (current, update) = revisions(ctx, &set, &owned, &mut collision_count).await?;
    let update_template = history::template_of(&update).unwrap_or_default();
    let current_template =
        history::template_of(&current).unwrap_or_else(|| update_template.clone());
    let current_name = current.metadata.name.clone().unwrap_or_default();
    let update_name = update.metadata.name.clone().unwrap_or_default();
    let revs = control::Revisions {
        current: &current_name,
        current_template: &current_template,
        update: &update_name,
        update_template: &update_template,
    };
    let now = jiff::Timestamp::now();
    let plan = control::plan(&set, &pods, &revs, now);

    let claims_api: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), ns);
    let create_one = |pod: &serde_json::Value| {
        let (set, claims_api, pods_api) = (&set, &claims_api, &pods_api);
        let pod = pod.clone();
        async move {
            let pod_name = pod["metadata"]["name"].as_str().unwrap_or("").to_string();
            let ord = pod["metadata"]["labels"][control::POD_INDEX_LABEL]
                .as_str()
                .and_then(|o| o.parse().ok())
                .unwrap_or(0);
            create_missing_claims(ctx, set, claims_api, ord).await?;
            let pod: Pod = serde_json::from_value(pod).map_err(|e| e.to_string())?;
            match pods_api.create(&PostParams::default(), &pod).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
                Err(e) => Err(format!("create pod {pod_name}: {e}")),
            }
        }
    };
    if parallel(&set) {
        // Upstream `runForAll` under Parallel: `slowStartBatch(1, ...)`, each pod's claims then the
        // pod, a batch at once; one at a time made 1,000 pods with claims wait on 2,000 serial writes.
        let mut rest = plan.create.as_slice();
        for n in slow_start_batches(rest.len()) {
            let (batch, after) = rest.split_at(n);
            rest = after;
            let results = futures::future::join_all(batch.iter().map(create_one)).await;
            results.into_iter().collect::<Result<Vec<()>, String>>()?;
        }
    } else {
        for pod in &plan.create {
            create_one(pod).await?;
        }
    }
    for ord in &plan.create_claims {
        create_missing_claims(ctx, &set, &claims_api, *ord).await?;
    }
    for (pod_name, labels) in &plan.relabel {
        let patch = json!({"metadata": {"labels": labels}});
        pods_api
            .patch(pod_name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| format!("identity of {pod_name}: {e}"))?;
    }
    for pod_name in &plan.check_claims {
        let Some(pod) = pods
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(pod_name))
        else {
            continue;
        };
        let Some(ord) = control::ordinal(&set, pod) else {
            continue;
        };
        create_missing_claims(ctx, &set, &claims_api, ord).await?;
        for claim in control::claims(&set, ord) {
            let claim_name = claim["metadata"]["name"].as_str().unwrap_or("");
            let Some(existing) = ctx.claims.get(&format!("{ns}/{claim_name}")) else {
                continue;
            };
            if let Some(refs) = control::claim_owner_refs(&set, pod, &existing) {
                let patch = json!({"metadata": {"ownerReferences": refs}});
                claims_api
                    .patch(claim_name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map_err(|e| format!("claim {claim_name} owners: {e}"))?;
            }
        }
    }
    for pod_name in &plan.delete {
        match pods_api.delete(pod_name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(format!("delete pod {pod_name}: {e}")),
        }
    }

    // Revisions neither current, nor the update one, nor any pod's go beyond the history limit.
    let mut live: HashSet<String> = pods
        .iter()
        .map(|p| control::pod_revision(p).to_string())
        .collect();
    live.insert(current_name.clone());
    live.insert(update_name.clone());
    let limit = set
        .spec
        .as_ref()
        .and_then(|s| s.revision_history_limit)
        .unwrap_or(10);
    let rev_api: Api<ControllerRevision> = Api::namespaced(ctx.client.clone(), ns);
    let owned_now = history::owned_revisions(&ctx.revisions.list_namespace(ns), &uid);
    history::truncate_history(&rev_api, &owned_now, &live, limit).await?;

    let mut status = control::status(
        &set,
        &pods,
        &current_name,
        &update_name,
        collision_count,
        now,
    );
    let existing = serde_json::to_value(&set.status).unwrap_or_default();
    history::omit_zero(
        &mut status,
        &[
            "observedGeneration",
            "readyReplicas",
            "currentReplicas",
            "updatedReplicas",
            "currentRevision",
            "updateRevision",
        ],
    );
    if history::status_differs(&existing, &status) {
        let api: Api<StatefulSet> = Api::namespaced(ctx.client.clone(), ns);
        api.patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": status})),
        )
        .await
        .map_err(|e| format!("status: {e}"))?;
    }
    let min_ready = set
        .spec
        .as_ref()
        .and_then(|s| s.min_ready_seconds)
        .unwrap_or(0) as i64;
    let becoming_available = pods
        .iter()
        .filter_map(|p| control::availability(p, min_ready, now).err().flatten())
        .min();
    if let Some(after) = plan.requeue.into_iter().chain(becoming_available).min() {
        ctx.queue.add_after(key.to_string(), after);
    }
    Ok(())
}

/// `podManagementPolicy: Parallel` (upstream's non-monotonic updates).
fn parallel(set: &StatefulSet) -> bool {
    set.spec
        .as_ref()
        .and_then(|s| s.pod_management_policy.as_deref())
        == Some("Parallel")
}

/// The batch sizes of upstream's `slowStartBatch(1, count)`: 1, 2, 4, ... up to `count` in all.
fn slow_start_batches(count: usize) -> Vec<usize> {
    let (mut out, mut done, mut batch) = (Vec::new(), 0usize, 1usize);
    while done < count {
        let n = batch.min(count - done);
        out.push(n);
        done += n;
        batch = batch.saturating_mul(2);
    }
    out
}

/// Creates the claims of ordinal `ord` that do not exist yet (upstream `createPersistentVolumeClaims`).
async fn create_missing_claims(
    ctx: &Ctx,
    set: &StatefulSet,
    api: &Api<PersistentVolumeClaim>,
    ord: i32,
) -> Result<(), String> {
    let ns = set.metadata.namespace.as_deref().unwrap_or("");
    for claim in control::claims(set, ord) {
        let claim_name = claim["metadata"]["name"].as_str().unwrap_or("").to_string();
        if ctx.claims.get(&format!("{ns}/{claim_name}")).is_some() {
            continue;
        }
        let claim: PersistentVolumeClaim =
            serde_json::from_value(claim).map_err(|e| e.to_string())?;
        match api.create(&PostParams::default(), &claim).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(format!("create claim {claim_name}: {e}")),
        }
    }
    Ok(())
}

#[cfg(test)]
mod control_tests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slow_start_doubles_up_to_the_count() {
        assert_eq!(slow_start_batches(0), Vec::<usize>::new());
        assert_eq!(slow_start_batches(1), vec![1]);
        assert_eq!(slow_start_batches(10), vec![1, 2, 4, 3]);
        assert_eq!(slow_start_batches(15), vec![1, 2, 4, 8]);
    }

    #[test]
    fn only_parallel_sets_create_in_batches() {
        let mut set = StatefulSet::default();
        assert!(!parallel(&set));
        set.spec = Some(Default::default());
        set.spec.as_mut().unwrap().pod_management_policy = Some("Parallel".into());
        assert!(parallel(&set));
        set.spec.as_mut().unwrap().pod_management_policy = Some("OrderedReady".into());
        assert!(!parallel(&set));
    }
}
