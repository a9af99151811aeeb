use super::*;
use crate::cronjob::schedule::parse;
use serde_json::json;

fn ts(s: &str) -> Timestamp {
    s.parse().unwrap()
}

fn cronjob(spec: serde_json::Value, status: serde_json::Value) -> CronJob {
    let mut full = json!({"schedule": "*/1 * * * *", "concurrencyPolicy": "Allow",
        "jobTemplate": {"spec": {"template": {"spec": {"containers": []}}}}});
    for (k, v) in spec.as_object().unwrap() {
        full[k] = v.clone();
    }
    serde_json::from_value(json!({
        "metadata": {"name": "cj", "namespace": "ns", "uid": "u1", "creationTimestamp": "2026-01-01T00:00:30Z"},
        "spec": full,
        "status": status,
    }))
    .unwrap()
}

fn every_minute() -> Schedule {
    parse("*/1 * * * *", TimeZone::UTC).unwrap()
}

#[test]
fn most_recent_and_missed_counts() {
    let cj = cronjob(json!({}), json!({}));
    let s = every_minute();
    let r = most_recent_schedule_time(&cj, ts("2026-01-01T00:00:59Z"), &s, false).unwrap();
    assert_eq!((r.most_recent, r.missed), (None, Missed::None));
    let r = most_recent_schedule_time(&cj, ts("2026-01-01T00:01:10Z"), &s, false).unwrap();
    assert_eq!(
        (r.most_recent, r.missed),
        (Some(ts("2026-01-01T00:01:00Z")), Missed::None)
    );
    let r = most_recent_schedule_time(&cj, ts("2026-01-01T00:05:10Z"), &s, false).unwrap();
    assert_eq!(
        (r.most_recent, r.missed),
        (Some(ts("2026-01-01T00:05:00Z")), Missed::Few)
    );
    let r = most_recent_schedule_time(&cj, ts("2026-01-01T03:00:10Z"), &s, false).unwrap();
    assert_eq!(
        (r.most_recent, r.missed),
        (Some(ts("2026-01-01T03:00:00Z")), Missed::Many)
    );
    // The last schedule time, not the creation time, is where the search starts.
    let done = cronjob(
        json!({}),
        json!({"lastScheduleTime": "2026-01-01T00:05:00Z"}),
    );
    let r = most_recent_schedule_time(&done, ts("2026-01-01T00:05:30Z"), &s, false).unwrap();
    assert_eq!(r.most_recent, None);
    // A starting deadline moves the start of the search: few missed, not many.
    let dl = cronjob(json!({"startingDeadlineSeconds": 200}), json!({}));
    let r = most_recent_schedule_time(&dl, ts("2026-01-01T03:00:10Z"), &s, true).unwrap();
    assert_eq!(
        (r.most_recent, r.missed),
        (Some(ts("2026-01-01T03:00:00Z")), Missed::Few)
    );
    // Uneven schedules find the exact most recent time.
    let uneven = parse("30 6-16/4 * * 1-5", TimeZone::UTC).unwrap();
    let r = most_recent_schedule_time(&cj, ts("2026-01-07T15:00:00Z"), &uneven, false).unwrap();
    assert_eq!(r.most_recent, Some(ts("2026-01-07T14:30:00Z")));
    let never = parse("0 0 30 2 *", TimeZone::UTC).unwrap();
    assert!(most_recent_schedule_time(&cj, ts("2026-01-07T15:00:00Z"), &never, false).is_err());
}

#[test]
fn requeue_at_the_next_schedule_time() {
    let cj = cronjob(json!({}), json!({}));
    let s = every_minute();
    let d = next_schedule_duration(&cj, ts("2026-01-01T00:00:40Z"), &s).unwrap();
    assert_eq!(d, Duration::from_millis(20_100));
    let started = cronjob(
        json!({}),
        json!({"lastScheduleTime": "2026-01-01T00:01:00Z"}),
    );
    let d = next_schedule_duration(&started, ts("2026-01-01T00:01:00.5Z"), &s).unwrap();
    assert_eq!(d, Duration::from_millis(59_600));
    let hourly = parse("@hourly", TimeZone::UTC).unwrap();
    let d = next_schedule_duration(&cj, ts("2026-01-01T00:30:00Z"), &hourly).unwrap();
    assert_eq!(d, Duration::from_millis(1_800_100));
}

#[test]
fn concurrency_policies() {
    let s = every_minute();
    let now = ts("2026-01-01T00:01:05Z");
    let active = json!({"active": [{"name": "cj-29450880", "uid": "j1", "kind": "Job", "namespace": "ns"}],
        "lastScheduleTime": "2026-01-01T00:00:00Z"});
    let run = Start::Run {
        scheduled: ts("2026-01-01T00:01:00Z"),
        replace: false,
    };
    assert_eq!(plan_start(&cronjob(json!({}), json!({})), now, &s).0, run);
    assert_eq!(
        plan_start(&cronjob(json!({}), active.clone()), now, &s).0,
        run
    );
    let (forbid, _) = plan_start(
        &cronjob(json!({"concurrencyPolicy": "Forbid"}), active.clone()),
        now,
        &s,
    );
    assert!(matches!(
        forbid,
        Start::Skip {
            event: Some((false, "JobAlreadyActive", _)),
            requeue: Some(_)
        }
    ));
    let (replace, _) = plan_start(
        &cronjob(json!({"concurrencyPolicy": "Replace"}), active),
        now,
        &s,
    );
    assert_eq!(
        replace,
        Start::Run {
            scheduled: ts("2026-01-01T00:01:00Z"),
            replace: true
        }
    );
    let (replace_idle, _) = plan_start(
        &cronjob(json!({"concurrencyPolicy": "Replace"}), json!({})),
        now,
        &s,
    );
    assert_eq!(
        replace_idle,
        Start::Run {
            scheduled: ts("2026-01-01T00:01:00Z"),
            replace: false
        }
    );
}

#[test]
fn already_started_missed_deadline_and_many_missed() {
    let s = every_minute();
    let now = ts("2026-01-01T00:01:05Z");
    let started = cronjob(
        json!({}),
        json!({"lastScheduleTime": "2026-01-01T00:01:00Z"}),
    );
    assert!(matches!(
        plan_start(&started, now, &s).0,
        Start::Skip { event: None, .. }
    ));
    let by_name = cronjob(
        json!({}),
        json!({"active": [{"name": job_name("cj", ts("2026-01-01T00:01:00Z")), "uid": "j"}]}),
    );
    assert!(matches!(
        plan_start(&by_name, now, &s).0,
        Start::Skip { event: None, .. }
    ));
    // A start older than the starting deadline is not even considered (the search begins at
    // now - deadline), so nothing starts until the next time.
    let late = cronjob(json!({"startingDeadlineSeconds": 3}), json!({}));
    assert_eq!(
        plan_start(&late, now, &s).0,
        Start::Skip {
            event: None,
            requeue: Some(Duration::from_millis(55_100))
        }
    );
    let in_time = cronjob(json!({"startingDeadlineSeconds": 10}), json!({}));
    assert!(matches!(plan_start(&in_time, now, &s).0, Start::Run { .. }));
    let (run, many) = plan_start(
        &cronjob(json!({}), json!({})),
        ts("2026-01-02T00:00:10Z"),
        &s,
    );
    assert_eq!(
        run,
        Start::Run {
            scheduled: ts("2026-01-02T00:00:00Z"),
            replace: false
        }
    );
    assert!(many);
    let bad = cronjob(json!({}), json!({}));
    let never = parse("0 0 30 2 *", TimeZone::UTC).unwrap();
    assert!(matches!(
        plan_start(&bad, now, &never).0,
        Start::Skip {
            event: Some((true, "InvalidSchedule", _)),
            requeue: None
        }
    ));
}

#[test]
fn jobs_from_the_template() {
    let cj = cronjob(
        json!({"timeZone": "Europe/Paris", "jobTemplate": {"metadata": {"labels": {"a": "b"}},
            "spec": {"template": {"spec": {"containers": []}}}}}),
        json!({}),
    );
    let job = job_from_template(&cj, ts("2026-01-01T10:00:00Z")).unwrap();
    assert_eq!(job.metadata.name.as_deref(), Some("cj-29454360"));
    assert_eq!(
        job.metadata.annotations.unwrap()[SCHEDULED_TIMESTAMP],
        "2026-01-01T11:00:00+01:00"
    );
    assert_eq!(job.metadata.labels.unwrap()["a"], "b");
    let owner = &job.metadata.owner_references.unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.controller),
        ("CronJob", Some(true))
    );
    let utc =
        job_from_template(&cronjob(json!({}), json!({})), ts("2026-01-01T10:00:00Z")).unwrap();
    assert_eq!(
        utc.metadata.annotations.unwrap()[SCHEDULED_TIMESTAMP],
        "2026-01-01T10:00:00Z"
    );
}

#[test]
fn history_limits_remove_the_oldest() {
    let job = |name: &str, cond: &str, start: &str| {
        Arc::new(
            serde_json::from_value::<Job>(json!({"metadata": {"name": name},
                "status": {"startTime": start, "conditions": [{"type": cond, "status": "True"}]}}))
            .unwrap(),
        )
    };
    let jobs = vec![
        job("a", "Complete", "2026-01-01T00:03:00Z"),
        job("b", "Complete", "2026-01-01T00:01:00Z"),
        job("c", "Complete", "2026-01-01T00:02:00Z"),
        job("d", "Failed", "2026-01-01T00:01:00Z"),
        job("e", "Failed", "2026-01-01T00:04:00Z"),
    ];
    let cj = cronjob(
        json!({"successfulJobsHistoryLimit": 1, "failedJobsHistoryLimit": 1}),
        json!({}),
    );
    let names: Vec<_> = jobs_beyond_history(&cj, &jobs)
        .iter()
        .map(|j| j.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(names, ["b", "c", "d"]);
    assert!(jobs_beyond_history(&cronjob(json!({}), json!({})), &jobs).is_empty());
}
