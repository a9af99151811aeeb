//! The pure part of the CronJob controller (upstream `pkg/controller/cronjob/utils.go` and the
//! decisions of `syncCronJob`): the most recent unmet schedule time and how many starts were missed,
//! when to look again, whether to start a Job now under the concurrency policy and starting
//! deadline, the Job made from the template, and which finished Jobs fall out of the history.
//! Every function takes `now`, so tests drive the clock.

use std::sync::Arc;
use std::time::Duration;

use jiff::tz::TimeZone;
use jiff::Timestamp;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};

use super::schedule::Schedule;

/// The annotation with the nominal start time of a CronJob's Job (RFC 3339 in the CronJob's zone).
pub const SCHEDULED_TIMESTAMP: &str = "batch.kubernetes.io/cronjob-scheduled-timestamp";
/// Upstream `nextScheduleDelta`: requeue slightly after the schedule time so it has passed.
const NEXT_SCHEDULE_DELTA: Duration = Duration::from_millis(100);

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Missed {
    None,
    Few,
    /// More than 100: upstream warns with TooManyMissedTimes.
    Many,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Recent {
    /// The last schedule time, creation time or starting deadline the search began from.
    pub earliest: Timestamp,
    /// The most recent schedule time not after `now`, if any.
    pub most_recent: Option<Timestamp>,
    pub missed: Missed,
}

fn spec_of(cj: &CronJob) -> k8s_openapi::api::batch::v1::CronJobSpec {
    cj.spec.clone()
}

fn secs(s: i64) -> jiff::SignedDuration {
    jiff::SignedDuration::from_secs(s)
}

/// Upstream `mostRecentScheduleTime`.
pub fn most_recent_schedule_time(
    cj: &CronJob,
    now: Timestamp,
    schedule: &Schedule,
    include_starting_deadline: bool,
) -> Result<Recent, String> {
    let created = cj
        .metadata
        .creation_timestamp
        .as_ref()
        .map_or(Timestamp::UNIX_EPOCH, |t| t.0);
    let mut earliest = cj
        .status
        .as_ref()
        .and_then(|s| s.last_schedule_time.as_ref())
        .map_or(created, |t| t.0);
    if include_starting_deadline {
        if let Some(deadline) = spec_of(cj).starting_deadline_seconds {
            let cutoff = now - secs(deadline);
            if cutoff > earliest {
                earliest = cutoff;
            }
        }
    }
    let none = |missed| Recent {
        earliest,
        most_recent: None,
        missed,
    };
    let too_close = || "time difference between two schedules is less than 1 second".to_string();
    let Some(t1) = schedule.next(earliest) else {
        return Err(too_close());
    };
    if now < t1 {
        return Ok(none(Missed::None));
    }
    let Some(t2) = schedule.next(t1) else {
        return Err(too_close());
    };
    if now < t2 {
        return Ok(Recent {
            earliest,
            most_recent: Some(t1),
            missed: Missed::None,
        });
    }
    let between = t2.duration_since(t1).as_secs_f64().round() as i64;
    if between < 1 {
        return Err(too_close());
    }
    // A rough count of the missed starts, then the exact most recent one, searched from one interval
    // before the estimate (uneven schedules such as "30 6-16/4 * * 1-5" need the margin).
    let elapsed = now.duration_since(t1).as_secs();
    let missed_count = elapsed / between + 1;
    let potential = t1 + secs((missed_count - 2) * between);
    let mut most_recent = None;
    let mut t = schedule.next(potential);
    while let Some(x) = t.filter(|x| *x <= now) {
        most_recent = Some(x);
        t = schedule.next(x);
    }
    let missed = match missed_count {
        n if n > 100 => Missed::Many,
        n if n > 1 => Missed::Few,
        _ => Missed::None,
    };
    Ok(Recent {
        earliest,
        most_recent,
        missed,
    })
}

/// Upstream `nextScheduleTimeDuration`: how long until the next schedule time after the most recent
/// one (or after now, when starts were missed or the schedule is invalid).
pub fn next_schedule_duration(
    cj: &CronJob,
    now: Timestamp,
    schedule: &Schedule,
) -> Option<Duration> {
    let from = match most_recent_schedule_time(cj, now, schedule, false) {
        Err(_) => now,
        Ok(Recent {
            most_recent: Some(t),
            ..
        }) => t,
        Ok(Recent {
            earliest,
            missed: Missed::None,
            ..
        }) => earliest,
        Ok(_) => now,
    };
    let next = schedule.next(from)?;
    let d = Duration::try_from(next.duration_since(now)).unwrap_or(Duration::ZERO);
    Some(d + NEXT_SCHEDULE_DELTA)
}

/// Upstream `getJobName`: `<cronjob>-<scheduled time in minutes since the epoch>`, the same for the
/// same start, so a start is never created twice.
pub fn job_name(cronjob: &str, scheduled: Timestamp) -> String {
    format!("{cronjob}-{}", scheduled.as_second().div_euclid(60))
}

/// The CronJob's time zone (`spec.timeZone`, UTC when unset).
pub fn time_zone(cj: &CronJob) -> Result<TimeZone, String> {
    match spec_of(cj).time_zone.as_deref() {
        None | Some("") | Some("UTC") => Ok(TimeZone::UTC),
        Some(name) => TimeZone::get(name).map_err(|e| format!("unknown time zone {name}: {e}")),
    }
}

/// Upstream `getJobFromTemplate2`: the Job for one start, owned by the CronJob.
pub fn job_from_template(cj: &CronJob, scheduled: Timestamp) -> Result<Job, String> {
    let spec = spec_of(cj);
    let template = spec.job_template;
    let meta = template.metadata.unwrap_or_default();
    let tz = time_zone(cj)?;
    let mut annotations = meta.annotations.unwrap_or_default();
    let zoned = scheduled.to_zoned(tz);
    // RFC 3339 as Go's time.RFC3339 prints it: "Z" for UTC, else the offset.
    let stamp = if zoned.offset().seconds() == 0 {
        zoned.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
    } else {
        zoned.strftime("%Y-%m-%dT%H:%M:%S%:z").to_string()
    };
    annotations.insert(SCHEDULED_TIMESTAMP.into(), stamp);
    let name = cj.metadata.name.clone().unwrap_or_default();
    let mut job = Job {
        spec: template.spec,
        ..Default::default()
    };
    job.metadata.name = Some(job_name(&name, scheduled));
    job.metadata.namespace = cj.metadata.namespace.clone();
    job.metadata.labels = meta.labels;
    job.metadata.annotations = Some(annotations);
    job.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "batch/v1".into(),
        kind: "CronJob".into(),
        name,
        uid: cj.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }]);
    Ok(job)
}

/// Upstream `getFinishedStatus`: the type of the Job's true Complete or Failed condition.
pub fn finished_status(job: &Job) -> Option<&str> {
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
        .map(|c| c.type_.as_str())
}

pub fn in_active_list(cj: &CronJob, uid: &str) -> bool {
    cj.status
        .as_ref()
        .and_then(|s| s.active.as_ref())
        .is_some_and(|a| a.iter().any(|r| r.uid.as_deref() == Some(uid)))
}

pub fn delete_from_active_list(cj: &mut CronJob, uid: &str) {
    if let Some(active) = cj.status.as_mut().and_then(|s| s.active.as_mut()) {
        active.retain(|r| r.uid.as_deref() != Some(uid));
    }
}

/// What to do about starting a Job now.
#[derive(Debug, PartialEq)]
pub enum Start {
    /// Start the Job for `scheduled`; with `replace`, delete the active Jobs first.
    Run { scheduled: Timestamp, replace: bool },
    /// Start nothing; an event to record, if any, and when to look again.
    Skip {
        event: Option<(bool, &'static str, String)>,
        requeue: Option<Duration>,
    },
}

/// The start decision of upstream `syncCronJob`, after the active list was reconciled: no unmet
/// schedule time, a missed starting deadline, a time already started, or Forbid with an active Job
/// skip; otherwise run (Replace deleting the active Jobs). The flag says more than 100 starts were
/// missed (the TooManyMissedTimes warning).
pub fn plan_start(cj: &CronJob, now: Timestamp, schedule: &Schedule) -> (Start, bool) {
    let spec = spec_of(cj);
    let requeue = next_schedule_duration(cj, now, schedule);
    let recent = match most_recent_schedule_time(cj, now, schedule, true) {
        Ok(r) => r,
        Err(e) => {
            let event = (
                true,
                "InvalidSchedule",
                format!("invalid schedule: {} : {e}", spec.schedule),
            );
            return (
                Start::Skip {
                    event: Some(event),
                    requeue: None,
                },
                false,
            );
        }
    };
    let many = recent.missed == Missed::Many;
    let Some(scheduled) = recent.most_recent.filter(|t| *t <= now) else {
        return (
            Start::Skip {
                event: None,
                requeue,
            },
            false,
        );
    };
    if let Some(deadline) = spec.starting_deadline_seconds {
        if scheduled + secs(deadline) < now {
            let when = scheduled.strftime("%a, %d %b %Y %H:%M:%S %z").to_string();
            let event = (
                true,
                "MissSchedule",
                format!("Missed scheduled time to start a job: {when}"),
            );
            return (
                Start::Skip {
                    event: Some(event),
                    requeue,
                },
                many,
            );
        }
    }
    let name = job_name(cj.metadata.name.as_deref().unwrap_or(""), scheduled);
    let status = cj.status.as_ref();
    let started = status
        .and_then(|s| s.active.as_ref())
        .is_some_and(|a| a.iter().any(|r| r.name.as_deref() == Some(name.as_str())))
        || status
            .and_then(|s| s.last_schedule_time.as_ref())
            .is_some_and(|t| t.0 == scheduled);
    if started {
        return (
            Start::Skip {
                event: None,
                requeue,
            },
            many,
        );
    }
    let active = status.and_then(|s| s.active.as_ref()).map_or(0, Vec::len);
    match spec.concurrency_policy.as_deref() {
        Some("Forbid") if active > 0 => {
            let event = (
                false,
                "JobAlreadyActive",
                "Not starting job because prior execution is running and concurrency policy is Forbid".to_string(),
            );
            (
                Start::Skip {
                    event: Some(event),
                    requeue,
                },
                many,
            )
        }
        Some("Replace") => (
            Start::Run {
                scheduled,
                replace: active > 0,
            },
            many,
        ),
        _ => (
            Start::Run {
                scheduled,
                replace: false,
            },
            many,
        ),
    }
}

/// Upstream `cleanupFinishedJobs`/`removeOldestJobs`: the oldest finished Jobs beyond the successful
/// and failed history limits.
pub fn jobs_beyond_history(cj: &CronJob, jobs: &[Arc<Job>]) -> Vec<Arc<Job>> {
    let spec = spec_of(cj);
    let mut out = Vec::new();
    for (kind, limit) in [
        ("Complete", spec.successful_jobs_history_limit),
        ("Failed", spec.failed_jobs_history_limit),
    ] {
        let Some(limit) = limit else { continue };
        let mut finished: Vec<Arc<Job>> = jobs
            .iter()
            .filter(|j| finished_status(j) == Some(kind))
            .cloned()
            .collect();
        let excess = finished.len().saturating_sub(limit.max(0) as usize);
        if excess == 0 {
            continue;
        }
        // Oldest first by start time (Jobs never started last), then name.
        finished.sort_by(|a, b| {
            let start = |j: &Job| {
                j.status
                    .as_ref()
                    .and_then(|s| s.start_time.clone())
                    .map(|t| t.0)
            };
            match (start(a), start(b)) {
                (Some(x), Some(y)) if x != y => x.cmp(&y),
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                _ => a.metadata.name.cmp(&b.metadata.name),
            }
        });
        out.extend(finished.into_iter().take(excess));
    }
    out
}

/// The completion time of a succeeded Job, for `status.lastSuccessfulTime`.
pub fn completion_time(job: &Job) -> Option<Time> {
    if finished_status(job) != Some("Complete") {
        return None;
    }
    job.status.as_ref()?.completion_time.clone()
}

#[cfg(test)]
#[path = "sync_tests.rs"]
mod tests;
