//! Creating and deleting a Job's pods (upstream `manageJob`, `deleteJobPods`, `deleteActivePods`).

use std::sync::Arc;

use client::events::EventType;
use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::PostParams;
use kube::Api;

use super::{
    backoff, delete_pod, indexed, per_index, remove_finalizer, sync, Ctx, JobCtx, MAX_CREATE_DELETE,
};

/// Deletes the active pods of a finishing Job, keeping their finalizers so their results are still
/// counted. Returns (ready pods deleted, pods deleted, first error).
pub(super) async fn delete_active_pods(
    ctx: &Ctx,
    job: &Job,
    pods: &[Arc<Pod>],
) -> (i32, i32, Result<(), String>) {
    let results = futures::future::join_all(pods.iter().map(|p| delete_pod(ctx, job, p))).await;
    tally(pods, results)
}

fn tally(pods: &[Arc<Pod>], results: Vec<Result<(), String>>) -> (i32, i32, Result<(), String>) {
    let (mut ready, mut deleted, mut err) = (0, 0, Ok(()));
    for (pod, r) in pods.iter().zip(results) {
        match r {
            Ok(()) => deleted += 1,
            Err(e) => err = Err(e),
        }
        // Upstream counts a ready pod as no longer ready whether or not its delete worked.
        if sync::is_ready(pod) {
            ready += 1;
        }
    }
    (ready, deleted, err)
}

/// Deletes surplus pods of a running Job: the finalizer goes first (the pod's result will not be
/// counted), then the pod.
async fn delete_job_pods(
    ctx: &Ctx,
    key: &str,
    job: &Job,
    pods: &[Arc<Pod>],
) -> (i32, i32, Result<(), String>) {
    ctx.expectations.expect(key, 0, pods.len() as i64);
    let results = futures::future::join_all(pods.iter().map(|p| async move {
        let ns = p.metadata.namespace.as_deref().unwrap_or("");
        let name = p.metadata.name.as_deref().unwrap_or("");
        let r = match remove_finalizer(ctx, ns, name, p).await {
            Ok(()) => delete_pod(ctx, job, p).await,
            Err(e) => Err(e),
        };
        if r.is_err() {
            ctx.expectations.observed(key, 0, 1);
        }
        r
    }))
    .await;
    tally(pods, results)
}

/// Upstream `manageJob`: deletes every active pod of a suspended Job, surplus pods of a running one,
/// or creates the missing ones (after the failure backoff, in slow-start batches). Returns the
/// active count after the changes and the first error.
pub(super) async fn manage_job(
    ctx: &Ctx,
    key: &str,
    job: &Job,
    active_pods: &[Arc<Pod>],
    succeeded: i32,
    jc: &mut JobCtx,
    now: Timestamp,
) -> (i32, Result<(), String>) {
    let mut active = active_pods.len() as i32;
    if sync::is_suspended(job) {
        let rm = sync::pods_for_removal(job, active_pods, active_pods.len());
        let (ready, removed, err) = delete_job_pods(ctx, key, job, &rm).await;
        jc.terminating += removed;
        jc.ready -= ready;
        return (active - removed, err);
    }
    let want = sync::want_active(job, active, succeeded);
    let rm_at_least = (active - want).max(0) as usize;
    let mut rm = sync::pods_for_removal(job, active_pods, rm_at_least);
    rm.truncate(MAX_CREATE_DELETE);
    if !rm.is_empty() {
        // Deletions take precedence: one sync either deletes or creates.
        let (ready, removed, err) = delete_job_pods(ctx, key, job, &rm).await;
        jc.terminating += removed;
        jc.ready -= ready;
        return (active - removed, err);
    }
    let terminating = if sync::only_replace_failed(job) {
        jc.terminating
    } else {
        0
    };
    let mut diff = want - terminating - active;
    if diff <= 0 {
        return (active, Ok(()));
    }
    let per_index = per_index::limit(job).is_some();
    if !per_index {
        let wait = backoff::remaining(&jc.new_backoff, now);
        if !wait.is_zero() {
            ctx.queue.add_after(key.to_string(), wait);
            return (active, Ok(()));
        }
    }
    diff = diff.min(MAX_CREATE_DELETE as i32);
    let indexes: Vec<Option<i32>> = if indexed::is_indexed(job) {
        let mut pending = indexed::first_pending(
            job,
            &jc.pods,
            &jc.succeeded_indexes,
            jc.failed_indexes.as_ref(),
            diff as usize,
        );
        if per_index {
            // Each index waits out its own backoff; if none is ready, look again at the first.
            let waits: Vec<_> = pending
                .iter()
                .map(|ix| per_index::remaining(jc.delayed.get(ix), now))
                .collect();
            let ready: Vec<i32> = pending
                .iter()
                .zip(&waits)
                .filter(|(_, w)| w.is_zero())
                .map(|(ix, _)| *ix)
                .collect();
            if ready.is_empty() {
                if let Some(wait) = waits.into_iter().min() {
                    ctx.queue.add_after(key.to_string(), wait);
                }
                return (active, Ok(()));
            }
            pending = ready;
        }
        pending.into_iter().map(Some).collect()
    } else {
        vec![None; diff as usize]
    };
    let count = indexes.len();
    ctx.expectations.expect(key, count as i64, 0);
    let ns = job.metadata.namespace.as_deref().unwrap_or("");
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    let params = PostParams::default();
    let (mut done, mut batch) = (0usize, 1usize);
    let mut created = 0i32;
    while done < count {
        let n = batch.min(count - done);
        let results = futures::future::join_all(indexes[done..done + n].iter().map(|ix| {
            let mut pod = sync::pod_from_template(job, *ix);
            if let (true, Some(ix)) = (per_index, ix) {
                let annotations = pod
                    .metadata
                    .annotations
                    .get_or_insert_with(Default::default);
                per_index::add_failure_counts(annotations, job, jc.delayed.get(ix));
            }
            let api = &api;
            let params = &params;
            async move { api.create(params, &pod).await }
        }))
        .await;
        done += n;
        let mut first_err = None;
        for r in results {
            match r {
                Ok(p) => {
                    created += 1;
                    let name = p.metadata.name.unwrap_or_default();
                    ctx.event(
                        job,
                        EventType::Normal,
                        "SuccessfulCreate",
                        &format!("Created pod: {name}"),
                    );
                }
                Err(e) => {
                    ctx.expectations.observed(key, 1, 0);
                    ctx.event(
                        job,
                        EventType::Warning,
                        "FailedCreate",
                        &format!("Error creating: {}", crate::api_error_message(&e)),
                    );
                    first_err.get_or_insert(e.to_string());
                }
            }
        }
        if let Some(e) = first_err {
            // The creates never attempted will never be observed either.
            ctx.expectations.observed(key, (count - done) as i64, 0);
            return (active + created, Err(format!("creating pods: {e}")));
        }
        batch *= 2;
    }
    active += created;
    (active, Ok(()))
}
