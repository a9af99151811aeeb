//! The CronJob controller (upstream `pkg/controller/cronjob`, `ControllerV2`): creates a Job per
//! schedule time, named `<cronjob>-<minutes since the epoch>` and annotated with the scheduled time,
//! keeps `status.active`, `lastScheduleTime` and `lastSuccessfulTime`, applies the concurrency policy
//! and the starting deadline, and trims finished Jobs to the history limits. Each CronJob is requeued
//! for its next schedule time rather than polled.
//!
//! Files: this one (informers, queue, API calls), [`sync`] (pure decisions with an injected clock),
//! [`schedule`] (cron parsing and next times).

pub mod schedule;
pub mod sync;

use std::sync::Arc;

use client::controller::Controller;
use client::events::{ApiEventSink, EventBroadcaster, EventType, Recorder};
use client::informer::{split_key, EventHandlerFuncs, SharedInformerFactory};
use client::workqueue::{default_controller_rate_limiter, QueueConfig, RateLimitingQueue};
use jiff::Timestamp;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Resource};

struct Ctx {
    client: kube::Client,
    cronjobs: Arc<client::informer::Store<CronJob>>,
    jobs: Arc<client::informer::Store<Job>>,
    queue: RateLimitingQueue<String>,
    recorder: Recorder,
}

impl Ctx {
    fn event(&self, cj: &CronJob, warning: bool, reason: &str, message: &str) {
        let t = if warning {
            EventType::Warning
        } else {
            EventType::Normal
        };
        self.recorder.event(&cj.object_ref(&()), t, reason, message);
    }
}

fn owner_key(job: &Job) -> Option<String> {
    crate::controller_key(&job.metadata, "CronJob")
}

pub async fn run(client: kube::Client, factory: &SharedInformerFactory, workers: usize) {
    let cj_informer = factory.informer::<CronJob>();
    let job_informer = factory.informer::<Job>();
    let broadcaster = EventBroadcaster::new();
    broadcaster.start_recording_to_sink(ApiEventSink::new(client.clone()));
    let ctx = Arc::new(Ctx {
        client,
        cronjobs: cj_informer.store(),
        jobs: job_informer.store(),
        queue: RateLimitingQueue::with_config(
            default_controller_rate_limiter::<String>(),
            QueueConfig::named("cronjob"),
        ),
        recorder: broadcaster.new_recorder("cronjob-controller", ""),
    });
    let (c1, c2, c3) = (ctx.clone(), ctx.clone(), ctx.clone());
    cj_informer.add_event_handler(
        EventHandlerFuncs::new()
            .on_add(move |cj: &Arc<CronJob>, _| {
                c1.queue.add(client::informer::object_key(cj.as_ref()))
            })
            .on_update(move |old: &Arc<CronJob>, new: &Arc<CronJob>| {
                let key = client::informer::object_key(new.as_ref());
                let (o, n) = (&old.spec, &new.spec);
                let changed = (&o.schedule, &o.time_zone) != (&n.schedule, &n.time_zone);
                // A new schedule is waited for (upstream requeues at its next time); other changes sync now.
                match changed.then(|| next_after_now(new)).flatten() {
                    Some(d) => c2.queue.add_after(key, d),
                    None => c2.queue.add(key),
                }
            })
            .on_delete(move |d| c3.queue.add(d.key())),
    );
    let (c1, c2, c3) = (ctx.clone(), ctx.clone(), ctx.clone());
    job_informer.add_event_handler(
        EventHandlerFuncs::new()
            .on_add(move |j: &Arc<Job>, _| {
                if let Some(k) = owner_key(j) {
                    c1.queue.add(k);
                }
            })
            .on_update(move |old: &Arc<Job>, new: &Arc<Job>| {
                for k in [owner_key(old), owner_key(new)].into_iter().flatten() {
                    c2.queue.add(k);
                }
            })
            .on_delete(move |d| {
                if let Some(k) = owner_key(d.object()) {
                    c3.queue.add(k);
                }
            }),
    );
    factory.start();
    factory.wait_for_cache_sync().await;
    let controller = Controller::new("cronjob", ctx.queue.clone()).with_max_retries(15);
    controller
        .run(workers, move |key: String| {
            let ctx = ctx.clone();
            async move {
                let requeue = sync_cronjob(&ctx, &key, Timestamp::now()).await?;
                if let Some(after) = requeue {
                    ctx.queue.add_after(key, after);
                }
                Ok::<(), String>(())
            }
        })
        .await;
}

fn parsed_schedule(cj: &CronJob) -> Result<schedule::Schedule, String> {
    let tz = sync::time_zone(cj)?;
    schedule::parse(cj.spec.schedule.as_str(), tz)
}

fn next_after_now(cj: &CronJob) -> Option<std::time::Duration> {
    let s = parsed_schedule(cj).ok()?;
    sync::next_schedule_duration(cj, Timestamp::now(), &s)
}

fn job_ref(job: &Job) -> ObjectReference {
    ObjectReference {
        api_version: Some("batch/v1".into()),
        kind: Some("Job".into()),
        name: job.metadata.name.clone(),
        namespace: job.metadata.namespace.clone(),
        uid: job.metadata.uid.clone(),
        resource_version: job.metadata.resource_version.clone(),
        ..Default::default()
    }
}

/// Upstream `sync` + `syncCronJob`: returns when to look again.
async fn sync_cronjob(
    ctx: &Ctx,
    key: &str,
    now: Timestamp,
) -> Result<Option<std::time::Duration>, String> {
    let Some(shared) = ctx.cronjobs.get(key) else {
        return Ok(None);
    };
    let (ns, name) = split_key(key);
    let ns = ns.unwrap_or_default();
    let uid = shared.metadata.uid.clone().unwrap_or_default();
    let jobs: Vec<Arc<Job>> = ctx
        .jobs
        .list_namespace(ns)
        .into_iter()
        .filter(|j| {
            j.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|r| r.controller == Some(true) && r.kind == "CronJob" && r.uid == uid)
        })
        .collect();
    let mut cj = (*shared).clone();
    let jobs_api: Api<Job> = Api::namespaced(ctx.client.clone(), ns);
    let cj_api: Api<CronJob> = Api::namespaced(ctx.client.clone(), ns);

    // History limits first (upstream `cleanupFinishedJobs`).
    let mut update_status = false;
    for job in sync::jobs_beyond_history(&cj, &jobs) {
        if delete_job(ctx, &mut cj, &jobs_api, &job).await {
            update_status = true;
        }
    }
    let result = reconcile(
        ctx,
        &mut cj,
        &jobs,
        &jobs_api,
        &cj_api,
        now,
        &mut update_status,
    )
    .await;
    if update_status {
        if let Some(status) = cj.status.as_mut() {
            if status.active.as_ref().is_some_and(Vec::is_empty) {
                status.active = None;
            }
        }
        cj_api
            .replace_status(name, &PostParams::default(), &cj)
            .await
            .map_err(|e| format!("updating status: {e}"))?;
    }
    result
}

async fn reconcile(
    ctx: &Ctx,
    cj: &mut CronJob,
    jobs: &[Arc<Job>],
    jobs_api: &Api<Job>,
    cj_api: &Api<CronJob>,
    now: Timestamp,
    update_status: &mut bool,
) -> Result<Option<std::time::Duration>, String> {
    let name = cj.metadata.name.clone().unwrap_or_default();
    for job in jobs {
        let juid = job.metadata.uid.as_deref().unwrap_or("");
        let jname = job.metadata.name.as_deref().unwrap_or("");
        let found = sync::in_active_list(cj, juid);
        let finished = sync::finished_status(job);
        if !found && finished.is_none() {
            // The informer's CronJob may be older than the Job: check the server's before warning.
            let fresh = cj_api.get(&name).await.map_err(|e| e.to_string())?;
            if sync::in_active_list(&fresh, juid) {
                *cj = fresh;
                continue;
            }
            ctx.event(
                cj,
                true,
                "UnexpectedJob",
                &format!("Saw a job that the controller did not create or forgot: {jname}"),
            );
        } else if let (true, Some(cond)) = (found, finished) {
            sync::delete_from_active_list(cj, juid);
            ctx.event(
                cj,
                false,
                "SawCompletedJob",
                &format!("Saw completed job: {jname}, condition: {cond}"),
            );
            *update_status = true;
        }
        if let Some(done) = sync::completion_time(job) {
            let status = cj.status.get_or_insert_with(Default::default);
            if status
                .last_successful_time
                .as_ref()
                .is_none_or(|t| done.0 > t.0)
            {
                status.last_successful_time = Some(done);
                *update_status = true;
            }
        }
    }
    // Active Jobs that no longer exist (checked on the server, the cache may lag).
    let active: Vec<ObjectReference> = cj
        .status
        .as_ref()
        .and_then(|s| s.active.clone())
        .unwrap_or_default();
    for r in active {
        let ruid = r.uid.as_deref().unwrap_or("");
        if jobs.iter().any(|j| j.metadata.uid.as_deref() == Some(ruid)) {
            continue;
        }
        let rname = r.name.as_deref().unwrap_or("");
        match jobs_api.get_opt(rname).await.map_err(|e| e.to_string())? {
            Some(j) if j.metadata.uid.as_deref() == Some(ruid) => {}
            _ => {
                ctx.event(
                    cj,
                    false,
                    "MissingJob",
                    &format!("Active job went missing: {rname}"),
                );
                sync::delete_from_active_list(cj, ruid);
                *update_status = true;
            }
        }
    }
    if cj.metadata.deletion_timestamp.is_some() {
        return Ok(None);
    }
    let spec = cj.spec.clone();
    if let Err(e) = sync::time_zone(cj) {
        let tz = spec.time_zone.unwrap_or_default();
        ctx.event(
            cj,
            true,
            "UnknownTimeZone",
            &format!("invalid timeZone: {tz:?}: {e}"),
        );
        return Ok(None);
    }
    if spec.suspend == Some(true) {
        return Ok(None);
    }
    if spec.schedule.contains("TZ") {
        ctx.event(cj, true, "UnsupportedSchedule", &format!("CRON_TZ or TZ used in schedule {:?} is not officially supported, see https://kubernetes.io/docs/concepts/workloads/controllers/cron-jobs/ for more details", spec.schedule));
    }
    let sched = match parsed_schedule(cj) {
        Ok(s) => s,
        Err(e) => {
            ctx.event(
                cj,
                true,
                "UnparseableSchedule",
                &format!("unparseable schedule: {:?} : {e}", spec.schedule),
            );
            return Ok(None);
        }
    };
    let (start, many_missed) = sync::plan_start(cj, now, &sched);
    if many_missed {
        ctx.event(cj, true, "TooManyMissedTimes", "too many missed start times. Set or decrease .spec.startingDeadlineSeconds or check clock skew");
    }
    let (scheduled, replace) = match start {
        sync::Start::Skip { event, requeue } => {
            if let Some((warning, reason, message)) = event {
                ctx.event(cj, warning, reason, &message);
            }
            return Ok(requeue);
        }
        sync::Start::Run { scheduled, replace } => (scheduled, replace),
    };
    if replace {
        let active: Vec<ObjectReference> = cj
            .status
            .as_ref()
            .and_then(|s| s.active.clone())
            .unwrap_or_default();
        for r in active {
            let job = match jobs_api.get(r.name.as_deref().unwrap_or("")).await {
                Ok(j) => j,
                Err(e) => {
                    ctx.event(cj, true, "FailedGet", &format!("Get job: {e}"));
                    return Err(e.to_string());
                }
            };
            if !delete_job(ctx, cj, jobs_api, &job).await {
                return Err(format!(
                    "could not replace job {}",
                    job.metadata.name.unwrap_or_default()
                ));
            }
            *update_status = true;
        }
    }
    let request = sync::job_from_template(cj, scheduled)?;
    let job = match jobs_api.create(&PostParams::default(), &request).await {
        Ok(j) => {
            let jname = j.metadata.name.clone().unwrap_or_default();
            ctx.event(
                cj,
                false,
                "SuccessfulCreate",
                &format!("Created job {jname}"),
            );
            j
        }
        // Created by someone else (or by us before a crash): take it as ours.
        Err(kube::Error::Api(e)) if e.code == 409 => jobs_api
            .get(request.metadata.name.as_deref().unwrap_or(""))
            .await
            .map_err(|e| e.to_string())?,
        Err(e) => {
            ctx.event(
                cj,
                true,
                "FailedCreate",
                &format!("Error creating job: {}", crate::api_error_message(&e)),
            );
            return Err(e.to_string());
        }
    };
    let status = cj.status.get_or_insert_with(Default::default);
    status
        .active
        .get_or_insert_with(Vec::new)
        .push(job_ref(&job));
    status.last_schedule_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        scheduled,
    ));
    *update_status = true;
    Ok(sync::next_schedule_duration(cj, now, &sched))
}

/// Deletes a Job with background propagation and drops it from the active list (upstream
/// `deleteJob`). Returns whether it worked.
async fn delete_job(ctx: &Ctx, cj: &mut CronJob, api: &Api<Job>, job: &Job) -> bool {
    let name = job.metadata.name.as_deref().unwrap_or("");
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => {
            ctx.event(cj, true, "FailedDelete", &format!("Deleted job: {e}"));
            return false;
        }
    }
    sync::delete_from_active_list(cj, job.metadata.uid.as_deref().unwrap_or(""));
    ctx.event(
        cj,
        false,
        "SuccessfulDelete",
        &format!("Deleted job {name}"),
    );
    true
}
