//! The TTL-after-finished controller (upstream `pkg/controller/ttlafterfinished`): deletes a finished
//! Job `spec.ttlSecondsAfterFinished` seconds after its Complete or Failed condition's transition.
//! The Job is requeued for its expiry time; before deleting, the TTL is checked again on a fresh copy
//! from the server, and the delete carries a UID precondition and foreground propagation, as upstream
//! does, so the Job disappears after its pods (the garbage collector finishes the cascade).

use std::sync::Arc;
use std::time::Duration;

use client::controller::Controller;
use client::informer::{split_key, EventHandlerFuncs, SharedInformerFactory};
use client::workqueue::{default_controller_rate_limiter, QueueConfig, RateLimitingQueue};
use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use kube::api::{DeleteParams, Preconditions, PropagationPolicy};
use kube::Api;

/// When a Job may be deleted: `None` when it is not finished, has no TTL or is already being
/// deleted (upstream `needsCleanup` and `getFinishAndExpireTime`).
pub fn expire_at(job: &Job) -> Option<Timestamp> {
    if job.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let ttl = job.spec.as_ref()?.ttl_seconds_after_finished?;
    let finished = job
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")?;
    let at = finished.last_transition_time.as_ref()?.0;
    at.checked_add(jiff::SignedDuration::from_secs(i64::from(ttl)))
        .ok()
}

/// Time left before the Job expires (zero once expired).
pub fn time_left(job: &Job, now: Timestamp) -> Option<Duration> {
    let at = expire_at(job)?;
    Some(Duration::try_from(at.duration_since(now)).unwrap_or(Duration::ZERO))
}

struct Ctx {
    client: kube::Client,
    jobs: Arc<client::informer::Store<Job>>,
    queue: RateLimitingQueue<String>,
}

pub async fn run(client: kube::Client, factory: &SharedInformerFactory, workers: usize) {
    let informer = factory.informer::<Job>();
    let ctx = Arc::new(Ctx {
        client,
        jobs: informer.store(),
        queue: RateLimitingQueue::with_config(
            default_controller_rate_limiter::<String>(),
            QueueConfig::named("ttl_jobs_to_delete"),
        ),
    });
    let (c1, c2) = (ctx.clone(), ctx.clone());
    let enqueue = |ctx: &Ctx, job: &Job| {
        if expire_at(job).is_some() {
            ctx.queue.add(client::informer::object_key(job));
        }
    };
    informer.add_event_handler(
        EventHandlerFuncs::new()
            .on_add(move |j: &Arc<Job>, _| enqueue(&c1, j))
            .on_update(move |_, j: &Arc<Job>| enqueue(&c2, j)),
    );
    factory.start();
    factory.wait_for_cache_sync().await;
    let controller = Controller::new("ttl_jobs_to_delete", ctx.queue.clone()).with_max_retries(15);
    controller
        .run(workers, move |key: String| {
            let ctx = ctx.clone();
            async move { process_job(&ctx, &key).await }
        })
        .await;
}

async fn process_job(ctx: &Ctx, key: &str) -> Result<(), String> {
    let Some(job) = ctx.jobs.get(key) else {
        return Ok(());
    };
    if !expired(ctx, key, &job) {
        return Ok(());
    }
    let (ns, name) = split_key(key);
    let api: Api<Job> = Api::namespaced(ctx.client.clone(), ns.unwrap_or_default());
    // The cached TTL may be stale: decide on the server's copy.
    let Some(fresh) = api.get_opt(name).await.map_err(|e| e.to_string())? else {
        return Ok(());
    };
    if !expired(ctx, key, &fresh) {
        return Ok(());
    }
    let params = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Foreground),
        preconditions: Some(Preconditions {
            uid: fresh.metadata.uid.clone(),
            resource_version: None,
        }),
        ..Default::default()
    };
    tracing::debug!(job = key, "cleaning up finished Job");
    match api.delete(name, &params).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(()),
        Err(e) => Err(format!("deleting {key}: {e}")),
    }
}

/// Whether the Job's TTL has expired; if not yet, requeues it for the expiry time.
fn expired(ctx: &Ctx, key: &str, job: &Job) -> bool {
    let now = Timestamp::now();
    let Some(left) = time_left(job, now) else {
        return false;
    };
    if left.is_zero() {
        return true;
    }
    ctx.queue.add_after(key.to_string(), left);
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn job(ttl: Option<i32>, cond: Option<(&str, &str)>, deleting: bool) -> Job {
        let mut j = json!({"metadata": {"name": "j"}, "spec": {"template": {}}, "status": {}});
        if let Some(t) = ttl {
            j["spec"]["ttlSecondsAfterFinished"] = json!(t);
        }
        if let Some((t, s)) = cond {
            j["status"]["conditions"] =
                json!([{"type": t, "status": s, "lastTransitionTime": "2026-01-01T00:00:00Z"}]);
        }
        if deleting {
            j["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:05Z");
        }
        serde_json::from_value(j).unwrap()
    }

    #[test]
    fn expiry_after_finish() {
        let now: Timestamp = "2026-01-01T00:00:04Z".parse().unwrap();
        assert_eq!(
            time_left(&job(Some(10), Some(("Complete", "True")), false), now),
            Some(Duration::from_secs(6))
        );
        assert_eq!(
            time_left(&job(Some(3), Some(("Failed", "True")), false), now),
            Some(Duration::ZERO)
        );
        assert_eq!(
            time_left(&job(Some(0), Some(("Complete", "True")), false), now),
            Some(Duration::ZERO)
        );
        assert_eq!(
            time_left(&job(None, Some(("Complete", "True")), false), now),
            None
        );
        assert_eq!(
            time_left(&job(Some(3), Some(("Complete", "False")), false), now),
            None
        );
        assert_eq!(
            time_left(
                &job(Some(3), Some(("SuccessCriteriaMet", "True")), false),
                now
            ),
            None
        );
        assert_eq!(time_left(&job(Some(3), None, false), now), None);
        assert_eq!(
            time_left(&job(Some(3), Some(("Complete", "True")), true), now),
            None
        );
    }
}
