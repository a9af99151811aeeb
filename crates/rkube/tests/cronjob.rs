//! The CronJob controller of `rkube server` on simulated nodes, through kubectl: one scheduled firing
//! (every minute, so the test waits up to a minute for it) creates `<cronjob>-<minutes>` with the
//! scheduled-timestamp annotation, lists it active, then records its success; `kubectl create job
//! --from=cronjob/...` works. Schedules, missed starts and concurrency policies are unit-tested in
//! `controllers::cronjob` with an injected clock.

mod support;

use std::time::{Duration, Instant};

use support::{Backend, Cluster};

fn get(c: &Cluster, what: &str, path: &str) -> String {
    c.kubectl(&["get", what, "-o", &format!("jsonpath={path}")])
}

fn wait_for(
    c: &Cluster,
    what: &str,
    path: &str,
    timeout: Duration,
    check: impl Fn(&str) -> bool,
) -> String {
    let start = Instant::now();
    loop {
        let v = get(c, what, path);
        if check(&v) {
            return v;
        }
        assert!(
            start.elapsed() < timeout,
            "{what} {path}: still {v:?} after {timeout:?}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
fn cronjob_fires_and_jobs_from_it() {
    let c = Cluster::start_all(Backend::Sqlite, &["--sim-nodes", "3"]);
    let cj = r#"
apiVersion: batch/v1
kind: CronJob
metadata:
  name: tick
spec:
  schedule: "* * * * *"
  concurrencyPolicy: Forbid
  successfulJobsHistoryLimit: 1
  jobTemplate:
    spec:
      template:
        metadata:
          annotations:
            sim.rkube.io/run-for: 1s
        spec:
          restartPolicy: Never
          containers:
          - name: main
            image: busybox
"#;
    assert_eq!(
        c.kubectl_in(&["apply", "-f", "-"], Some(cj)).trim(),
        "cronjob.batch/tick created"
    );

    // A Job made by hand from the CronJob's template.
    assert_eq!(
        c.kubectl(&["create", "job", "manual", "--from=cronjob/tick"])
            .trim(),
        "job.batch/manual created"
    );
    assert_eq!(
        get(&c, "job/manual", "{.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name} {.metadata.annotations.cronjob\\.kubernetes\\.io/instantiate}"),
        "CronJob/tick manual"
    );
    c.kubectl(&[
        "wait",
        "--for=condition=complete",
        "job/manual",
        "--timeout=30s",
    ]);

    // The scheduled firing, at the next minute.
    let active = wait_for(
        &c,
        "cronjob/tick",
        "{.status.active[0].name}",
        Duration::from_secs(75),
        |v| !v.is_empty(),
    );
    let scheduled = get(&c, "cronjob/tick", "{.status.lastScheduleTime}");
    let ts: jiff::Timestamp = scheduled.parse().expect("lastScheduleTime");
    assert_eq!(ts.as_second() % 60, 0, "{scheduled}");
    assert_eq!(active, format!("tick-{}", ts.as_second() / 60));
    assert_eq!(
        get(&c, &format!("job/{active}"), "{.metadata.annotations.batch\\.kubernetes\\.io/cronjob-scheduled-timestamp} {.metadata.ownerReferences[0].controller}"),
        format!("{scheduled} true")
    );
    let row = c.kubectl(&["get", "cronjob", "tick", "--no-headers"]);
    assert!(
        row.split_whitespace().collect::<Vec<_>>()[..3] == ["tick", "*", "*"],
        "{row}"
    );

    // The Job completes: it leaves the active list, the success is recorded, and the history limit
    // of 1 keeps only the newest finished Job (the manual one goes).
    c.kubectl(&[
        "wait",
        "--for=condition=complete",
        &format!("job/{active}"),
        "--timeout=30s",
    ]);
    wait_for(
        &c,
        "cronjob/tick",
        "{.status.active}",
        Duration::from_secs(20),
        str::is_empty,
    );
    let completed = get(&c, &format!("job/{active}"), "{.status.completionTime}");
    assert_eq!(
        get(&c, "cronjob/tick", "{.status.lastSuccessfulTime}"),
        completed
    );
    wait_for(
        &c,
        "jobs",
        "{.items[*].metadata.name}",
        Duration::from_secs(20),
        |v| v == active,
    );
    let events = c.kubectl(&[
        "get",
        "events",
        "--field-selector",
        "involvedObject.name=tick",
        "-o",
        "jsonpath={range .items[*]}{.reason} {end}",
    ]);
    for reason in ["SuccessfulCreate", "SawCompletedJob", "SuccessfulDelete"] {
        assert!(events.contains(reason), "{reason} missing from {events}");
    }
}

/// Three CronJobs firing every minute whose Jobs outlive the minute: at the second firing Allow runs
/// both Jobs, Forbid skips (a `JobAlreadyActive` event) and Replace deletes the running Job for the
/// new one. Waits for two real firings (up to two minutes).
#[test]
fn concurrency_policies_decide_overlapping_runs() {
    let c = Cluster::start_all(Backend::Sqlite, &["--sim-nodes", "3"]);
    let manifests: Vec<String> = ["Allow", "Forbid", "Replace"]
        .iter()
        .map(|policy| {
            let name = policy.to_lowercase();
            format!(
                r#"apiVersion: batch/v1
kind: CronJob
metadata:
  name: {name}
spec:
  schedule: "* * * * *"
  concurrencyPolicy: {policy}
  jobTemplate:
    spec:
      template:
        metadata:
          annotations:
            sim.rkube.io/run-for: 10m
        spec:
          restartPolicy: Never
          containers:
          - name: main
            image: busybox
"#
            )
        })
        .collect();
    // All three must be created within one minute, so that their first firings are the same minute:
    // one apply, not in the last seconds of a minute.
    let second = jiff::Timestamp::now().as_second() % 60;
    if second >= 55 {
        std::thread::sleep(Duration::from_secs((61 - second) as u64));
    }
    c.kubectl_in(&["apply", "-f", "-"], Some(&manifests.join("---\n")));
    let active = |name: &str| get(&c, &format!("cronjob/{name}"), "{.status.active[*].name}");
    // The first firing: one active Job each, all for the same minute.
    let first = wait_for(
        &c,
        "cronjob/allow",
        "{.status.active[*].name}",
        Duration::from_secs(75),
        |v| !v.is_empty(),
    );
    let minute: i64 = first
        .strip_prefix("allow-")
        .and_then(|m| m.parse().ok())
        .unwrap_or_else(|| panic!("job name {first}"));
    for name in ["forbid", "replace"] {
        wait_for(
            &c,
            &format!("cronjob/{name}"),
            "{.status.active[*].name}",
            Duration::from_secs(20),
            |v| v == format!("{name}-{minute}"),
        );
    }

    // The second firing, a minute later.
    let next = minute + 1;
    wait_for(
        &c,
        "cronjob/allow",
        "{.status.active[*].name}",
        Duration::from_secs(80),
        |v| v == format!("allow-{minute} allow-{next}"),
    );
    wait_for(
        &c,
        "cronjob/replace",
        "{.status.active[*].name}",
        Duration::from_secs(20),
        |v| v == format!("replace-{next}"),
    );
    wait_for(
        &c,
        "jobs",
        "{.items[*].metadata.name}",
        Duration::from_secs(20),
        |v| {
            !v.split_whitespace()
                .any(|j| j == format!("replace-{minute}"))
        },
    );
    let skipped = || {
        c.kubectl(&[
            "get",
            "events",
            "--field-selector",
            "involvedObject.name=forbid,reason=JobAlreadyActive",
            "-o",
            "jsonpath={.items[*].message}",
        ])
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while skipped().is_empty() {
        assert!(Instant::now() < deadline, "no JobAlreadyActive event");
        std::thread::sleep(Duration::from_millis(250));
    }
    assert_eq!(active("forbid"), format!("forbid-{minute}"));
    assert!(!c
        .kubectl(&[
            "get",
            "job",
            &format!("forbid-{next}"),
            "--ignore-not-found",
            "-o",
            "name"
        ])
        .contains("forbid"));
}
