//! The Job controller (upstream `pkg/controller/job`): runs a Job's pods to completion. Pods carry the
//! `batch.kubernetes.io/job-tracking` finalizer from creation until their result is recorded: a
//! finished pod's UID goes to `status.uncountedTerminatedPods`, then its finalizer is removed, then it
//! moves into `succeeded`/`failed`, so no result is lost or counted twice. Terminal conditions are
//! set in two steps as upstream 1.33 does (SuccessCriteriaMet then Complete, FailureTarget then
//! Failed), the second once no pod is terminating.
//!
//! Files: this one (informers, queues, API writes, the sync flow of upstream `syncJob`), [`sync`]
//! (pure decisions), [`indexed`] (completion indexes, success policy), [`pod_failure_policy`],
//! [`backoff`] (delay before replacing failed pods).
//!
//! Not done: `managedBy` other than skipping Jobs managed elsewhere, metrics.

pub mod backoff;
pub mod indexed;
pub mod per_index;
pub mod pod_failure_policy;
pub mod sync;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use client::controller::Controller;
use client::events::{ApiEventSink, EventBroadcaster, EventType, Recorder};
use client::informer::{split_key, EventHandlerFuncs, SharedInformerFactory};
use client::workqueue::{ItemExponentialFailureRateLimiter, QueueConfig, RateLimitingQueue};
use jiff::Timestamp;
use k8s_openapi::api::batch::v1::{Job, JobCondition};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Resource};
use serde_json::json;

use crate::replicaset::Expectations;

/// Upstream `syncJobBatchPeriod`: pod events are folded into one sync per Job per second.
const SYNC_BATCH_PERIOD: Duration = Duration::from_secs(1);
/// Upstream `MaxUncountedPods` and `MaxPodCreateDeletePerSync`.
const MAX_UNCOUNTED: usize = 500;
const MAX_CREATE_DELETE: usize = 500;
/// The `spec.managedBy` value meaning this controller.
const CONTROLLER_NAME: &str = "kubernetes.io/job-controller";

struct Ctx {
    client: kube::Client,
    jobs: Arc<client::informer::Store<Job>>,
    pods: Arc<client::informer::Store<Pod>>,
    expectations: Expectations,
    /// Pod UIDs per Job whose finalizer removal was sent but not yet seen (upstream
    /// `uidTrackingExpectations`).
    removing: Mutex<HashMap<String, HashSet<String>>>,
    backoff: backoff::BackoffStore,
    queue: RateLimitingQueue<String>,
    orphans: RateLimitingQueue<String>,
    recorder: Recorder,
}

impl Ctx {
    fn removing(&self) -> std::sync::MutexGuard<'_, HashMap<String, HashSet<String>>> {
        self.removing.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn removal_observed(&self, key: &str, uid: &str) {
        if let Some(set) = self.removing().get_mut(key) {
            set.remove(uid);
        }
    }

    fn event(&self, job: &Job, type_: EventType, reason: &str, message: &str) {
        self.recorder
            .event(&job.object_ref(&()), type_, reason, message);
    }
}

fn queue(name: &str) -> RateLimitingQueue<String> {
    // Upstream: per-item exponential backoff from 1 s to 1 minute (DefaultJobApiBackOff, MaxJobApiBackOff).
    RateLimitingQueue::with_config(
        ItemExponentialFailureRateLimiter::new(Duration::from_secs(1), Duration::from_secs(60)),
        QueueConfig::named(name),
    )
}

/// The Job controlling the pod, if it is one we know (upstream `resolveControllerRef`).
fn controlling_job(ctx: &Ctx, pod: &Pod) -> Option<Arc<Job>> {
    let owner = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))?;
    if owner.kind != "Job" {
        return None;
    }
    let ns = pod.metadata.namespace.as_deref().unwrap_or("");
    let job = ctx.jobs.get(&format!("{ns}/{}", owner.name))?;
    (job.metadata.uid.as_deref() == Some(owner.uid.as_str())).then_some(job)
}

fn key_of(job: &Job) -> String {
    client::informer::object_key(job)
}

fn pod_key(pod: &Pod) -> String {
    client::informer::object_key(pod)
}

/// Orphans (no controller, or a controller Job that is gone or finished) lose the finalizer.
fn enqueue_orphan_if_tracked(ctx: &Ctx, pod: &Pod) {
    if sync::has_tracking_finalizer(pod) {
        ctx.orphans.add(pod_key(pod));
    }
}

pub async fn run(client: kube::Client, factory: &SharedInformerFactory, workers: usize) {
    let job_informer = factory.informer::<Job>();
    let pod_informer = factory.informer::<Pod>();
    let broadcaster = EventBroadcaster::new();
    broadcaster.start_recording_to_sink(ApiEventSink::new(client.clone()));
    let ctx = Arc::new(Ctx {
        client,
        jobs: job_informer.store(),
        pods: pod_informer.store(),
        expectations: Expectations::default(),
        removing: Mutex::default(),
        backoff: backoff::BackoffStore::default(),
        queue: queue("job"),
        orphans: queue("job_orphan_pod"),
        recorder: broadcaster.new_recorder("job-controller", ""),
    });
    let (c1, c2, c3) = (ctx.clone(), ctx.clone(), ctx.clone());
    job_informer.add_event_handler(
        EventHandlerFuncs::new()
            .on_add(move |j: &Arc<Job>, _| c1.queue.add(key_of(j)))
            .on_update(move |_, j: &Arc<Job>| c2.queue.add(key_of(j)))
            .on_delete(move |d| {
                let job = d.object();
                c3.queue.add(key_of(job));
                // Upstream `cleanupPodFinalizers`: the deleted Job's pods must not keep the finalizer.
                let uid = job.metadata.uid.as_deref().unwrap_or("");
                let ns = job.metadata.namespace.as_deref().unwrap_or("");
                for pod in c3.pods.list_namespace(ns) {
                    let owned = pod
                        .metadata
                        .owner_references
                        .iter()
                        .flatten()
                        .any(|r| r.controller == Some(true) && r.uid == uid);
                    if owned {
                        enqueue_orphan_if_tracked(&c3, &pod);
                    }
                }
            }),
    );
    let (c1, c2, c3) = (ctx.clone(), ctx.clone(), ctx.clone());
    pod_informer.add_event_handler(
        EventHandlerFuncs::new()
            .on_add(move |p: &Arc<Pod>, _| {
                if p.metadata.deletion_timestamp.is_some() {
                    pod_deleted(&c1, p);
                    return;
                }
                match controlling_job(&c1, p) {
                    Some(job) => {
                        let key = key_of(&job);
                        c1.expectations.observed(&key, 1, 0);
                        c1.queue.add_after(key, SYNC_BATCH_PERIOD);
                    }
                    None if has_controller(p) => enqueue_orphan_if_tracked(&c1, p),
                    None => {
                        enqueue_orphan_if_tracked(&c1, p);
                        enqueue_matching(&c1, p);
                    }
                }
            })
            .on_update(move |old: &Arc<Pod>, new: &Arc<Pod>| {
                if old.metadata.resource_version == new.metadata.resource_version {
                    return;
                }
                if new.metadata.deletion_timestamp.is_some() {
                    pod_deleted(&c2, new);
                    return;
                }
                let removed = !sync::has_tracking_finalizer(new);
                let uid = new.metadata.uid.as_deref().unwrap_or("");
                for job in [controlling_job(&c2, old), controlling_job(&c2, new)]
                    .into_iter()
                    .flatten()
                {
                    let key = key_of(&job);
                    if removed {
                        c2.removal_observed(&key, uid);
                    }
                    c2.queue.add_after(key, SYNC_BATCH_PERIOD);
                }
                if !has_controller(new) {
                    enqueue_orphan_if_tracked(&c2, new);
                    enqueue_matching(&c2, new);
                }
            })
            .on_delete(move |d| pod_deleted(&c3, d.object())),
    );
    factory.start();
    factory.wait_for_cache_sync().await;
    let orphan_ctx = ctx.clone();
    let orphans = Controller::new("job_orphan_pod", ctx.orphans.clone()).with_max_retries(15);
    let jobs = Controller::new("job", ctx.queue.clone()).with_max_retries(15);
    let sync_ctx = ctx.clone();
    futures::future::join(
        jobs.run(workers, move |key: String| {
            let ctx = sync_ctx.clone();
            async move { sync_job(&ctx, &key).await }
        }),
        orphans.run(1, move |key: String| {
            let ctx = orphan_ctx.clone();
            async move { sync_orphan_pod(&ctx, &key).await }
        }),
    )
    .await;
}

fn has_controller(pod: &Pod) -> bool {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|r| r.controller == Some(true))
}

/// Upstream `deletePod`: a deleted (or deleting) pod satisfies a delete expectation; the pods of a
/// gone or finished Job lose the finalizer through the orphan queue.
fn pod_deleted(ctx: &Ctx, pod: &Pod) {
    let Some(job) = controlling_job(ctx, pod) else {
        enqueue_orphan_if_tracked(ctx, pod);
        return;
    };
    if sync::is_finished(&job) {
        enqueue_orphan_if_tracked(ctx, pod);
        return;
    }
    let key = key_of(&job);
    ctx.expectations.observed(&key, 0, 1);
    if !sync::has_tracking_finalizer(pod) {
        ctx.removal_observed(&key, pod.metadata.uid.as_deref().unwrap_or(""));
    }
    ctx.queue.add_after(key, SYNC_BATCH_PERIOD);
}

/// An orphan pod may be adopted by a Job whose selector matches it.
fn enqueue_matching(ctx: &Ctx, pod: &Pod) {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("");
    let labels: serde_json::Map<String, serde_json::Value> = pod
        .metadata
        .labels
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), json!(v)))
        .collect();
    for job in ctx.jobs.list_namespace(ns) {
        if selector(&job).is_ok_and(|s| !s.is_empty() && s.matches(&labels)) {
            ctx.queue.add_after(key_of(&job), SYNC_BATCH_PERIOD);
        }
    }
}

fn selector(job: &Job) -> Result<apimachinery::labels::Selector, String> {
    let value = serde_json::to_value(job.spec.as_ref().map(|s| &s.selector)).unwrap_or_default();
    apimachinery::labels::selector_from_label_selector(&value)
}

/// Upstream `syncOrphanPod`: removes the tracking finalizer from a pod no running Job controls.
async fn sync_orphan_pod(ctx: &Ctx, key: &str) -> Result<(), String> {
    let Some(pod) = ctx.pods.get(key) else {
        return Ok(());
    };
    if let Some(owner) = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))
    {
        if owner.kind != "Job" || owner.api_version != "batch/v1" {
            return Ok(());
        }
        if controlling_job(ctx, &pod).is_some_and(|j| !sync::is_finished(&j)) {
            return Ok(());
        }
    }
    let (ns, name) = split_key(key);
    remove_finalizer(ctx, ns.unwrap_or_default(), name, &pod).await
}

async fn remove_finalizer(ctx: &Ctx, ns: &str, name: &str, pod: &Pod) -> Result<(), String> {
    if !sync::has_tracking_finalizer(pod) {
        return Ok(());
    }
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    let patch =
        json!({"metadata": {"$deleteFromPrimitiveList/finalizers": [sync::TRACKING_FINALIZER]}});
    match api
        .patch(name, &PatchParams::default(), &Patch::Strategic(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(format!("removing tracking finalizer from {ns}/{name}: {e}")),
    }
}

/// The pods of the Job, after adopting matching orphans and releasing pods that stopped matching.
async fn pods_for_job(ctx: &Ctx, job: &Job) -> Result<Vec<Arc<Pod>>, String> {
    let ns = job.metadata.namespace.as_deref().unwrap_or("");
    let selector = selector(job)?;
    let claim = sync::claim(job, &selector, &ctx.pods.list_namespace(ns));
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    let name = job.metadata.name.as_deref().unwrap_or("");
    for pod in &claim.adopt {
        let patch = json!({"metadata": {
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name,
                "uid": job.metadata.uid, "controller": true, "blockOwnerDeletion": true}],
            "finalizers": [sync::TRACKING_FINALIZER],
            "uid": pod.metadata.uid}});
        api.patch(
            pod.metadata.name.as_deref().unwrap_or(""),
            &PatchParams::default(),
            &Patch::Strategic(&patch),
        )
        .await
        .map_err(|e| format!("adopt: {e}"))?;
    }
    for pod in &claim.release {
        let patch = json!({"metadata": {"ownerReferences": [{"$patch": "delete", "uid": job.metadata.uid}],
            "uid": pod.metadata.uid}});
        api.patch(
            pod.metadata.name.as_deref().unwrap_or(""),
            &PatchParams::default(),
            &Patch::Strategic(&patch),
        )
        .await
        .map_err(|e| format!("release: {e}"))?;
    }
    Ok(claim.owned)
}

/// What one sync works with (upstream `syncJobCtx`).
struct JobCtx {
    pods: Vec<Arc<Pod>>,
    finished: Option<JobCondition>,
    prev_succeeded_indexes: indexed::Indexes,
    succeeded_indexes: indexed::Indexes,
    /// With `backoffLimitPerIndex`: the failed indexes, and per pending index the failed pod whose
    /// finalizer stays until its replacement exists.
    failed_indexes: Option<indexed::Indexes>,
    delayed: std::collections::BTreeMap<i32, Arc<Pod>>,
    new_backoff: backoff::BackoffRecord,
    expected_rm: HashSet<String>,
    uncounted_succeeded: HashSet<String>,
    uncounted_failed: HashSet<String>,
    terminating: i32,
    ready: i32,
}

async fn sync_job(ctx: &Ctx, key: &str) -> Result<(), String> {
    let Some(shared) = ctx.jobs.get(key) else {
        ctx.expectations.forget(key);
        ctx.removing().remove(key);
        ctx.backoff.remove(key);
        return Ok(());
    };
    let spec = shared.spec.clone().unwrap_or_default();
    if spec
        .managed_by
        .as_deref()
        .is_some_and(|m| m != CONTROLLER_NAME)
    {
        return Ok(());
    }
    if sync::is_finished(&shared) {
        ctx.backoff.remove(key);
        return Ok(());
    }
    if !matches!(
        spec.completion_mode.as_deref(),
        None | Some("NonIndexed" | "Indexed")
    ) {
        ctx.event(
            &shared,
            EventType::Warning,
            "UnknownCompletionMode",
            "Skipped Job sync because completion mode is unknown",
        );
        return Ok(());
    }
    let now = Timestamp::now();
    let mut job = (*shared).clone();
    let status = job.status.get_or_insert_with(Default::default);
    status
        .uncounted_terminated_pods
        .get_or_insert_with(Default::default);
    let (uncounted_succeeded, uncounted_failed) = sync::uncounted_sets(status);
    // Expectations are read before the pods, so a pod created meanwhile defers the sync instead of
    // being missed.
    let satisfied = ctx.expectations.satisfied(key);
    let pods = pods_for_job(ctx, &job).await?;
    let active_pods: Vec<Arc<Pod>> = pods
        .iter()
        .filter(|p| sync::is_active(p))
        .cloned()
        .collect();
    let expected_rm = ctx.removing().get(key).cloned().unwrap_or_default();
    let mut jc = JobCtx {
        ready: active_pods.iter().filter(|p| sync::is_ready(p)).count() as i32,
        terminating: pods.iter().filter(|p| sync::is_terminating(p)).count() as i32,
        pods,
        finished: None,
        prev_succeeded_indexes: Default::default(),
        succeeded_indexes: Default::default(),
        failed_indexes: None,
        delayed: Default::default(),
        new_backoff: Default::default(),
        expected_rm,
        uncounted_succeeded,
        uncounted_failed,
    };
    let mut active = active_pods.len() as i32;
    let new_succeeded: Vec<Arc<Pod>> =
        sync::uncounted_candidates(&job, &jc.pods, &jc.uncounted_succeeded, &jc.expected_rm)
            .filter(|p| sync::phase(p) == "Succeeded")
            .cloned()
            .collect();
    let new_failed: Vec<Arc<Pod>> =
        sync::uncounted_candidates(&job, &jc.pods, &jc.uncounted_failed, &jc.expected_rm)
            .filter(|p| sync::is_pod_failed(p, &job))
            .cloned()
            .collect();
    let policy = spec.pod_failure_policy.as_ref();
    let counted_failures = new_failed
        .iter()
        .filter(|p| pod_failure_policy::matches(policy, p).count)
        .count() as i32;
    let status = job.status.get_or_insert_with(Default::default);
    let mut succeeded = status.succeeded.unwrap_or(0)
        + new_succeeded.len() as i32
        + jc.uncounted_succeeded.len() as i32;
    let failed = status.failed.unwrap_or(0) + counted_failures + jc.uncounted_failed.len() as i32;
    if status.start_time.is_none() && !sync::is_suspended(&job) {
        job.status.get_or_insert_with(Default::default).start_time = Some(Time(now));
    }
    jc.new_backoff = backoff::new_record(ctx.backoff.get(key), &new_succeeded, &new_failed, now);

    jc.finished = sync::find_condition(&job, "SuccessCriteriaMet")
        .filter(|c| c.status == "True")
        .cloned();
    if jc.finished.is_none() {
        if let Some(target) =
            sync::find_condition(&job, "FailureTarget").filter(|c| c.status == "True")
        {
            jc.finished = Some(failed_from_target(target, now));
        } else if let Some(msg) = fail_job_message(&job, &jc.pods) {
            jc.finished = Some(sync::new_condition(
                "FailureTarget",
                "True",
                "PodFailurePolicy",
                &msg,
                now,
            ));
        }
    }
    if jc.finished.is_none() {
        let limit = spec.backoff_limit.unwrap_or(6);
        if failed > limit || sync::past_backoff_limit_on_failure(&job, &jc.pods) {
            jc.finished = Some(sync::new_condition(
                "FailureTarget",
                "True",
                "BackoffLimitExceeded",
                "Job has reached the specified backoff limit",
                now,
            ));
        } else {
            match sync::deadline_remaining(&job, now) {
                Some(left) if left.is_zero() => {
                    jc.finished = Some(sync::new_condition(
                        "FailureTarget",
                        "True",
                        "DeadlineExceeded",
                        "Job was active longer than specified deadline",
                        now,
                    ))
                }
                Some(left) => ctx.queue.add_after(key.to_string(), left),
                None => {}
            }
        }
    }
    if indexed::is_indexed(&job) {
        (jc.prev_succeeded_indexes, jc.succeeded_indexes) =
            indexed::succeeded_indexes(&job, &jc.pods);
        succeeded = jc.succeeded_indexes.len() as i32;
        jc.failed_indexes = per_index::failed_indexes(&job, &jc.pods);
        if let Some(failed) = &jc.failed_indexes {
            let completions = spec.completions.unwrap_or(0) as usize;
            if jc.finished.is_none()
                && spec
                    .max_failed_indexes
                    .is_some_and(|m| failed.len() > m.max(0) as usize)
            {
                jc.finished = Some(sync::new_condition(
                    "FailureTarget",
                    "True",
                    "MaxFailedIndexesExceeded",
                    "Job has exceeded the specified maximal number of failed indexes",
                    now,
                ));
            } else if jc.finished.is_none()
                && !failed.is_empty()
                && failed.len() + jc.succeeded_indexes.len() >= completions
            {
                jc.finished = Some(sync::new_condition(
                    "FailureTarget",
                    "True",
                    "FailedIndexes",
                    "Job has failed indexes",
                    now,
                ));
            }
            jc.delayed = per_index::delayed_deletion(
                &job,
                &jc.pods,
                &jc.succeeded_indexes,
                failed,
                &jc.expected_rm,
                now,
            );
        }
        if jc.finished.is_none() {
            let completions = spec.completions.unwrap_or(0);
            if let Some(msg) = indexed::match_success_policy(
                spec.success_policy.as_ref(),
                completions,
                &jc.succeeded_indexes,
            ) {
                jc.finished = Some(sync::new_condition(
                    "SuccessCriteriaMet",
                    "True",
                    "SuccessPolicy",
                    &msg,
                    now,
                ));
            }
        }
    }

    let mut suspend_changed = false;
    let mut manage_err = Ok(());
    if jc.finished.is_some() {
        let (deleted_ready, deleted, err) = delete_active_pods(ctx, &job, &active_pods).await;
        if deleted != active || !satisfied {
            // Pods not yet deleted or not yet in the cache: not finished yet.
            jc.finished = None;
        }
        active -= deleted;
        jc.terminating += deleted;
        jc.ready -= deleted_ready;
        manage_err = err;
    } else {
        let mut managed = false;
        if satisfied && job.metadata.deletion_timestamp.is_none() {
            let (a, err) = manage_job(ctx, key, &job, &active_pods, succeeded, &mut jc, now).await;
            active = a;
            manage_err = err;
            managed = true;
        }
        let complete = match spec.completions {
            None => succeeded > 0 && active == 0,
            Some(c) => succeeded >= c && active == 0,
        };
        if complete {
            jc.finished = Some(sync::new_condition(
                "SuccessCriteriaMet",
                "True",
                "CompletionsReached",
                "Reached expected number of succeeded pods",
                now,
            ));
        } else if managed {
            let suspended = sync::is_suspended(&job);
            let status = job.status.get_or_insert_with(Default::default);
            let conditions = status.conditions.get_or_insert_with(Vec::new);
            let (cs, reason, message, event_reason) = if suspended {
                ("True", "JobSuspended", "Job suspended", "Suspended")
            } else {
                ("False", "JobResumed", "Job resumed", "Resumed")
            };
            if sync::ensure_condition(conditions, "Suspended", cs, reason, message, now) {
                suspend_changed = true;
                if !suspended {
                    // activeDeadlineSeconds counts continuous activity: resuming restarts the clock.
                    status.start_time = Some(Time(now));
                }
            }
            if status.conditions.as_ref().is_some_and(Vec::is_empty) {
                status.conditions = None;
            }
            if suspend_changed {
                ctx.event(&job, EventType::Normal, event_reason, message);
            }
        }
    }
    let status = job.status.get_or_insert_with(Default::default);
    let needs_update = suspend_changed
        || active != status.active.unwrap_or(0)
        || Some(jc.ready) != status.ready
        || Some(jc.terminating) != status.terminating;
    status.active = (active != 0).then_some(active);
    status.ready = Some(jc.ready);
    status.terminating = Some(jc.terminating);
    track_status_and_remove_finalizers(ctx, key, job, &mut jc, needs_update).await?;
    manage_err
}

fn failed_from_target(target: &JobCondition, now: Timestamp) -> JobCondition {
    sync::new_condition(
        "Failed",
        "True",
        target.reason.as_deref().unwrap_or(""),
        target.message.as_deref().unwrap_or(""),
        now,
    )
}

/// Upstream `getFailJobMessage`: the message of the first failed pod a FailJob rule matches.
fn fail_job_message(job: &Job, pods: &[Arc<Pod>]) -> Option<String> {
    let policy = job.spec.as_ref()?.pod_failure_policy.as_ref()?;
    pods.iter()
        .filter(|p| sync::is_pod_failed(p, job))
        .find_map(|p| pod_failure_policy::matches(Some(policy), p).fail_job)
}

mod status;
use status::track_status_and_remove_finalizers;

mod manage;
use manage::{delete_active_pods, manage_job};

/// Replaces the Job's status (upstream `UpdateStatus`); a conflict fails the sync, which retries.
async fn update_status(ctx: &Ctx, job: &Job) -> Result<Job, String> {
    let ns = job.metadata.namespace.as_deref().unwrap_or("");
    let api: Api<Job> = Api::namespaced(ctx.client.clone(), ns);
    api.replace_status(
        job.metadata.name.as_deref().unwrap_or(""),
        &PostParams::default(),
        job,
    )
    .await
    .map_err(|e| format!("updating status: {e}"))
}

/// Deletes a pod; a pod already gone counts as deleted.
async fn delete_pod(ctx: &Ctx, job: &Job, pod: &Pod) -> Result<(), String> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("");
    let name = pod.metadata.name.as_deref().unwrap_or("");
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => {
            ctx.event(
                job,
                EventType::Normal,
                "SuccessfulDelete",
                &format!("Deleted pod: {name}"),
            );
            Ok(())
        }
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => {
            ctx.event(
                job,
                EventType::Warning,
                "FailedDelete",
                &format!("Error deleting: {e}"),
            );
            Err(format!("deleting pod {ns}/{name}: {e}"))
        }
    }
}
