//! Recording pod results in the Job status (upstream `trackJobStatusAndRemoveFinalizers`,
//! `flushUncountedAndRemoveFinalizers`, `enactJobFinished`): finished pods' UIDs are written to
//! `uncountedTerminatedPods` first, then their finalizers are removed, then they move into the
//! counters; the terminal condition is set once nothing is uncounted and no pod is terminating.

use std::collections::HashSet;
use std::sync::Arc;

use client::events::EventType;
use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;

use super::{
    failed_from_target, indexed, pod_failure_policy, remove_finalizer, sync, update_status, Ctx,
    JobCtx, MAX_UNCOUNTED,
};

fn uid(pod: &Pod) -> &str {
    pod.metadata.uid.as_deref().unwrap_or("")
}

pub(super) async fn track_status_and_remove_finalizers(
    ctx: &Ctx,
    key: &str,
    mut job: Job,
    jc: &mut JobCtx,
    mut needs_flush: bool,
) -> Result<(), String> {
    let now = Timestamp::now();
    let is_indexed = indexed::is_indexed(&job);
    let mut pods = jc.pods.clone();
    if is_indexed {
        sync::sort_by_index(&mut pods);
    }
    let mut with_finalizer: HashSet<String> = pods
        .iter()
        .filter(|p| sync::has_tracking_finalizer(p) && !jc.expected_rm.contains(uid(p)))
        .map(|p| uid(p).to_string())
        .collect();
    let status = job.status.get_or_insert_with(Default::default);
    if sync::clean_uncounted(status, &with_finalizer) {
        needs_flush = true;
    }
    let policy = job.spec.as_ref().and_then(|s| s.pod_failure_policy.clone());
    let completions = indexed::completions(&job);
    let mut to_remove: Vec<Arc<Pod>> = Vec::new();
    let mut new_indexes: Vec<i32> = Vec::new();
    let mut reached_max = false;
    let job_deleting = job.metadata.deletion_timestamp.is_some();
    let failing = jc
        .finished
        .as_ref()
        .is_some_and(|c| c.type_ != "SuccessCriteriaMet");
    let (mut add_succeeded, mut add_failed) = (Vec::new(), Vec::new());
    let listed_before = job
        .status
        .as_ref()
        .and_then(|s| s.uncounted_terminated_pods.as_ref())
        .map_or(0, |u| {
            u.succeeded.as_ref().map_or(0, Vec::len) + u.failed.as_ref().map_or(0, Vec::len)
        });
    for pod in &pods {
        if !sync::has_tracking_finalizer(pod) || jc.expected_rm.contains(uid(pod)) {
            continue;
        }
        let failed = sync::is_pod_failed(pod, &job);
        let succeeded = sync::phase(pod) == "Succeeded";
        // Upstream `canRemoveFinalizer`: a failed pod whose index awaits its replacement stays.
        let delayed = indexed::completion_index(pod)
            .and_then(|ix| jc.delayed.get(&ix))
            .is_some_and(|d| d.metadata.uid == pod.metadata.uid);
        if !(job_deleting || jc.finished.is_some() || succeeded || (failed && !delayed)) {
            continue;
        }
        to_remove.push(pod.clone());
        if succeeded && !jc.uncounted_failed.contains(uid(pod)) {
            if is_indexed {
                if let Some(ix) = indexed::completion_index(pod) {
                    if ix < completions && !jc.prev_succeeded_indexes.contains(&ix) {
                        new_indexes.push(ix);
                        needs_flush = true;
                    }
                }
            } else if !jc.uncounted_succeeded.contains(uid(pod)) {
                needs_flush = true;
                add_succeeded.push(uid(pod).to_string());
            }
        } else if failed || failing {
            // A finishing Job counts every pod that did not succeed as failed.
            let index_ok =
                !is_indexed || indexed::completion_index(pod).is_some_and(|ix| ix < completions);
            if !jc.uncounted_failed.contains(uid(pod))
                && index_ok
                && pod_failure_policy::matches(policy.as_ref(), pod).count
            {
                needs_flush = true;
                add_failed.push(uid(pod).to_string());
            }
        }
        let listed = listed_before + new_indexes.len() + add_succeeded.len() + add_failed.len();
        if listed >= MAX_UNCOUNTED {
            // Keeps the status small and this sync short; the status update requeues the Job.
            reached_max = true;
            break;
        }
    }
    let status = job.status.get_or_insert_with(Default::default);
    let uncounted = status
        .uncounted_terminated_pods
        .get_or_insert_with(Default::default);
    if !add_succeeded.is_empty() {
        uncounted
            .succeeded
            .get_or_insert_with(Vec::new)
            .extend(add_succeeded);
    }
    if !add_failed.is_empty() {
        uncounted
            .failed
            .get_or_insert_with(Vec::new)
            .extend(add_failed);
    }
    if is_indexed {
        jc.succeeded_indexes.extend(new_indexes);
        let s = indexed::format(&jc.succeeded_indexes);
        if s != status.completed_indexes.as_deref().unwrap_or("") {
            needs_flush = true;
        }
        status.succeeded =
            (!jc.succeeded_indexes.is_empty()).then_some(jc.succeeded_indexes.len() as i32);
        status.completed_indexes = (!s.is_empty()).then_some(s);
        let failed = jc.failed_indexes.as_ref().map(indexed::format);
        if failed != status.failed_indexes {
            status.failed_indexes = failed;
            needs_flush = true;
        }
    }
    if let Some(finished) = jc.finished.take() {
        let conditions = status.conditions.get_or_insert_with(Vec::new);
        jc.finished = Some(match finished.type_.as_str() {
            "FailureTarget" => {
                // The interim condition is recorded before any finalizer is removed.
                conditions.push(finished.clone());
                needs_flush = true;
                failed_from_target(&finished, now)
            }
            "SuccessCriteriaMet" => {
                if !conditions.iter().any(|c| c.type_ == "SuccessCriteriaMet") {
                    conditions.push(finished.clone());
                    needs_flush = true;
                }
                sync::new_condition(
                    "Complete",
                    "True",
                    finished.reason.as_deref().unwrap_or(""),
                    finished.message.as_deref().unwrap_or(""),
                    now,
                )
            }
            _ => finished,
        });
    }
    // Flush the new uncounted UIDs (and interim conditions) before removing finalizers.
    if needs_flush {
        job = update_status(ctx, &job).await?;
        ctx.backoff.update(key, jc.new_backoff.clone());
        needs_flush = false;
    }
    let mut rm_err = Ok(());
    if !to_remove.is_empty() {
        {
            let mut removing = ctx.removing();
            let set = removing.entry(key.to_string()).or_default();
            set.extend(to_remove.iter().map(|p| uid(p).to_string()));
        }
        let results = futures::future::join_all(to_remove.iter().map(|p| {
            let ns = p.metadata.namespace.as_deref().unwrap_or("");
            let name = p.metadata.name.as_deref().unwrap_or("");
            remove_finalizer(ctx, ns, name, p)
        }))
        .await;
        for (pod, r) in to_remove.iter().zip(results) {
            match r {
                Ok(()) => {
                    with_finalizer.remove(uid(pod));
                }
                Err(e) => {
                    ctx.removal_observed(key, uid(pod));
                    rm_err = Err(e);
                }
            }
        }
    }
    let status = job.status.get_or_insert_with(Default::default);
    if sync::clean_uncounted(status, &with_finalizer) {
        needs_flush = true;
    }
    if rm_err.is_err() {
        if needs_flush {
            update_status(ctx, &job).await?;
        }
        return rm_err;
    }
    let finished = !reached_max && enact_finished(&mut job, jc, now);
    if finished || needs_flush {
        let updated = update_status(ctx, &job).await?;
        if finished {
            record_finished(ctx, &updated, jc);
        }
    }
    Ok(())
}

/// Upstream `enactJobFinished`: sets Complete or Failed once no pod is uncounted or terminating.
fn enact_finished(job: &mut Job, jc: &JobCtx, now: Timestamp) -> bool {
    let Some(cond) = &jc.finished else {
        return false;
    };
    let status = job.status.get_or_insert_with(Default::default);
    let uncounted = status.uncounted_terminated_pods.as_ref();
    let pending = uncounted.map_or(0, |u| {
        u.succeeded.as_ref().map_or(0, Vec::len) + u.failed.as_ref().map_or(0, Vec::len)
    });
    if pending > 0 || jc.terminating > 0 {
        return false;
    }
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    sync::ensure_condition(
        conditions,
        &cond.type_,
        &cond.status,
        cond.reason.as_deref().unwrap_or(""),
        cond.message.as_deref().unwrap_or(""),
        now,
    );
    if cond.type_ == "Complete" {
        status.completion_time = conditions
            .iter()
            .find(|c| c.type_ == "Complete")
            .and_then(|c| c.last_transition_time.clone());
    }
    true
}

/// Upstream `recordJobFinished`: the events of a finished Job.
fn record_finished(ctx: &Ctx, job: &Job, jc: &JobCtx) {
    let Some(cond) = &jc.finished else { return };
    if cond.type_ == "Complete" {
        let completions = job.spec.as_ref().and_then(|s| s.completions);
        let succeeded = job.status.as_ref().and_then(|s| s.succeeded).unwrap_or(0);
        if completions.is_some_and(|c| succeeded > c) {
            ctx.event(
                job,
                EventType::Warning,
                "TooManySucceededPods",
                "Too many succeeded pods running after completion count reached",
            );
        }
        ctx.event(job, EventType::Normal, "Completed", "Job completed");
    } else {
        ctx.event(
            job,
            EventType::Warning,
            cond.reason.as_deref().unwrap_or(""),
            cond.message.as_deref().unwrap_or(""),
        );
    }
}
