//! The Job and TTL-after-finished controllers of `rkube server` on simulated nodes, through kubectl:
//! seed 003's `pi` Job (5 completions, 2 at a time), an Indexed Job, a Job failing after its backoff
//! limit, suspend/resume, activeDeadlineSeconds, a pod failure policy and ttlSecondsAfterFinished.

mod support;

use std::time::{Duration, Instant};

use support::{Backend, Cluster};

fn get(c: &Cluster, what: &str, path: &str) -> String {
    c.kubectl(&["get", what, "-o", &format!("jsonpath={path}")])
}

/// Polls until `check` accepts the jsonpath value, or panics with the last value.
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

fn job(name: &str, spec: &str, pod_annotations: &str, pod_spec_extra: &str) -> String {
    format!(
        r#"
apiVersion: batch/v1
kind: Job
metadata:
  name: {name}
spec:
{spec}
  template:
    metadata:
      annotations:
{pod_annotations}
    spec:
{pod_spec_extra}
      containers:
      - name: main
        image: busybox
"#
    )
}

#[test]
fn jobs_complete_fail_and_index() {
    let c = Cluster::start_all(Backend::Sqlite, &["--sim-nodes", "3"]);
    // Seed 003's pi Job, with simulated pods that run for a second.
    let pi = r#"
apiVersion: batch/v1
kind: Job
metadata:
  name: pi
spec:
  parallelism: 2
  completions: 5
  template:
    metadata:
      annotations:
        sim.rkube.io/run-for: 1s
    spec:
      containers:
      - name: pi
        image: perl
        command: ["perl", "-Mbignum=bpi", "-wle", "print bpi(2000)"]
      restartPolicy: OnFailure
"#;
    assert_eq!(
        c.kubectl_in(&["apply", "-f", "-"], Some(pi)).trim(),
        "job.batch/pi created"
    );
    let indexed = job(
        "idx",
        "  completionMode: Indexed\n  completions: 3\n  parallelism: 3",
        "        sim.rkube.io/run-for: 1s",
        "      restartPolicy: Never",
    );
    c.kubectl_in(&["apply", "-f", "-"], Some(&indexed));
    let failing = job(
        "fails",
        "  backoffLimit: 1",
        "        sim.rkube.io/run-for: 500ms\n        sim.rkube.io/exit-code: \"1\"",
        "      restartPolicy: Never",
    );
    c.kubectl_in(&["apply", "-f", "-"], Some(&failing));

    // Never more than parallelism pods at once.
    let start = Instant::now();
    loop {
        let phases = get(
            &c,
            "pods",
            "{range .items[?(@.metadata.labels.job-name==\"pi\")]}{.status.phase} {end}",
        );
        let running = phases
            .split_whitespace()
            .filter(|p| *p != "Succeeded")
            .count();
        assert!(running <= 2, "more than 2 pi pods at once: {phases}");
        let done = get(
            &c,
            "job/pi",
            "{.status.conditions[?(@.type==\"Complete\")].status}",
        );
        if done == "True" {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "pi did not complete: {phases}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let out = c.kubectl(&[
        "wait",
        "--for=condition=complete",
        "job/pi",
        "--timeout=30s",
    ]);
    assert_eq!(out.trim(), "job.batch/pi condition met");
    let row = c.kubectl(&["get", "job", "pi", "--no-headers"]);
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cols[..2], ["pi", "Complete"], "{row}");
    assert_eq!(cols[2], "5/5", "{row}");
    let status = get(
        &c,
        "job/pi",
        "{.status.succeeded} {.status.active} {.status.failed} {.status.ready} {.status.terminating} {.status.uncountedTerminatedPods} {range .status.conditions[*]}{.type}={.status}/{.reason};{end}",
    );
    assert_eq!(
        status,
        "5   0 0 {} SuccessCriteriaMet=True/CompletionsReached;Complete=True/CompletionsReached;"
    );
    let times = get(&c, "job/pi", "{.status.startTime} {.status.completionTime}");
    let times: Vec<&str> = times.split(' ').collect();
    assert!(
        times.iter().all(|t| t.ends_with('Z')) && times[0] <= times[1],
        "{times:?}"
    );
    let uid = get(&c, "job/pi", "{.metadata.uid}");
    assert_eq!(
        get(&c, "job/pi", "{.spec.selector.matchLabels}"),
        format!("{{\"batch.kubernetes.io/controller-uid\":\"{uid}\"}}")
    );
    // Every pod counted, its finalizer gone, named <job>-<random>.
    let pods = get(&c, "pods", "{range .items[?(@.metadata.labels.job-name==\"pi\")]}{.metadata.name},{.status.phase},{.metadata.finalizers},{.metadata.ownerReferences[0].kind} {end}");
    let pods: Vec<&str> = pods.split_whitespace().collect();
    assert_eq!(pods.len(), 5, "{pods:?}");
    for p in pods {
        let f: Vec<&str> = p.split(',').collect();
        assert!(f[0].starts_with("pi-") && f[0].len() == 8, "{p}");
        // The API server keeps the emptied list (`[]`) where upstream drops it.
        assert!(
            f[1] == "Succeeded" && matches!(f[2], "" | "[]") && f[3] == "Job",
            "{p}"
        );
    }

    // The Indexed Job: one pod per index, indexes recorded.
    c.kubectl(&[
        "wait",
        "--for=condition=complete",
        "job/idx",
        "--timeout=30s",
    ]);
    assert_eq!(
        get(
            &c,
            "job/idx",
            "{.status.completedIndexes} {.status.succeeded}"
        ),
        "0-2 3"
    );
    let pods = get(&c, "pods", "{range .items[?(@.metadata.labels.job-name==\"idx\")]}{.metadata.annotations.batch\\.kubernetes\\.io/job-completion-index}={.spec.hostname}={.metadata.labels.batch\\.kubernetes\\.io/job-completion-index}={.spec.containers[0].env[0].name} {end}");
    let mut pods: Vec<&str> = pods.split_whitespace().collect();
    pods.sort();
    assert_eq!(
        pods,
        [
            "0=idx-0=0=JOB_COMPLETION_INDEX",
            "1=idx-1=1=JOB_COMPLETION_INDEX",
            "2=idx-2=2=JOB_COMPLETION_INDEX"
        ]
    );

    // Two failures (the second after the 10 s creation backoff) exceed backoffLimit 1.
    c.kubectl(&[
        "wait",
        "--for=condition=failed",
        "job/fails",
        "--timeout=40s",
    ]);
    assert_eq!(
        get(
            &c,
            "job/fails",
            "{.status.failed} {range .status.conditions[*]}{.type}={.reason};{end}"
        ),
        "2 FailureTarget=BackoffLimitExceeded;Failed=BackoffLimitExceeded;"
    );
    assert_eq!(
        get(
            &c,
            "job/fails",
            "{.status.conditions[?(@.type==\"Failed\")].message}"
        ),
        "Job has reached the specified backoff limit"
    );
    let events = c.kubectl(&[
        "get",
        "events",
        "--field-selector",
        "involvedObject.name=fails",
        "-o",
        "jsonpath={range .items[*]}{.reason} {end}",
    ]);
    assert!(
        events.contains("BackoffLimitExceeded") && events.contains("SuccessfulCreate"),
        "{events}"
    );
}

#[test]
fn jobs_suspend_deadline_failure_policy_and_ttl() {
    let c = Cluster::start_all(Backend::Sqlite, &["--sim-nodes", "3"]);
    let long = "        sim.rkube.io/run-for: 10m";
    let quick_exit = "      restartPolicy: Never\n      terminationGracePeriodSeconds: 1";
    c.kubectl_in(
        &["apply", "-f", "-"],
        Some(&job(
            "sleepy",
            "  parallelism: 2\n  completions: 4",
            long,
            quick_exit,
        )),
    );
    c.kubectl_in(
        &["apply", "-f", "-"],
        Some(&job(
            "deadline",
            "  activeDeadlineSeconds: 2",
            long,
            quick_exit,
        )),
    );
    let policy = "  backoffLimit: 6\n  podFailurePolicy:\n    rules:\n    - action: FailJob\n      onExitCodes:\n        operator: In\n        values: [42]";
    c.kubectl_in(
        &["apply", "-f", "-"],
        Some(&job(
            "policy",
            policy,
            "        sim.rkube.io/run-for: 500ms\n        sim.rkube.io/exit-code: \"42\"",
            quick_exit,
        )),
    );
    c.kubectl_in(
        &["apply", "-f", "-"],
        Some(&job(
            "short",
            "  ttlSecondsAfterFinished: 1",
            "        sim.rkube.io/run-for: 500ms",
            quick_exit,
        )),
    );
    let per_index =
        "  completionMode: Indexed\n  completions: 2\n  parallelism: 2\n  backoffLimitPerIndex: 1";
    c.kubectl_in(
        &["apply", "-f", "-"],
        Some(&job(
            "perindex",
            per_index,
            "        sim.rkube.io/run-for: 500ms\n        sim.rkube.io/exit-code: \"1\"",
            quick_exit,
        )),
    );
    let t = Duration::from_secs(30);

    // Suspend: the pods go, the Suspended condition comes; resume: pods again, startTime reset.
    wait_for(&c, "job/sleepy", "{.status.active}", t, |v| v == "2");
    let started = get(&c, "job/sleepy", "{.status.startTime}");
    c.kubectl(&[
        "patch",
        "job",
        "sleepy",
        "--type=merge",
        "-p",
        r#"{"spec":{"suspend":true}}"#,
    ]);
    wait_for(
        &c,
        "job/sleepy",
        "{.status.conditions[?(@.type==\"Suspended\")].reason}",
        t,
        |v| v == "JobSuspended",
    );
    wait_for(
        &c,
        "pods",
        "{.items[?(@.metadata.labels.job-name==\"sleepy\")].metadata.name}",
        t,
        str::is_empty,
    );
    wait_for(
        &c,
        "job/sleepy",
        "{.status.active}/{.status.terminating}",
        t,
        |v| v == "/0",
    );
    std::thread::sleep(Duration::from_millis(1100)); // startTime has whole seconds
    c.kubectl(&[
        "patch",
        "job",
        "sleepy",
        "--type=merge",
        "-p",
        r#"{"spec":{"suspend":false}}"#,
    ]);
    let cond = wait_for(
        &c,
        "job/sleepy",
        "{.status.conditions[?(@.type==\"Suspended\")].status}/{.status.conditions[?(@.type==\"Suspended\")].reason}",
        t,
        |v| v == "False/JobResumed",
    );
    assert_eq!(cond, "False/JobResumed");
    wait_for(&c, "job/sleepy", "{.status.active}", t, |v| v == "2");
    assert!(get(&c, "job/sleepy", "{.status.startTime}") > started);

    // activeDeadlineSeconds.
    c.kubectl(&[
        "wait",
        "--for=condition=failed",
        "job/deadline",
        "--timeout=30s",
    ]);
    assert_eq!(
        get(&c, "job/deadline", "{.status.conditions[?(@.type==\"Failed\")].reason}: {.status.conditions[?(@.type==\"Failed\")].message}"),
        "DeadlineExceeded: Job was active longer than specified deadline"
    );

    // A FailJob rule of the pod failure policy ends the Job at the first matching failure.
    c.kubectl(&[
        "wait",
        "--for=condition=failed",
        "job/policy",
        "--timeout=30s",
    ]);
    let pod = get(
        &c,
        "pods",
        "{.items[?(@.metadata.labels.job-name==\"policy\")].metadata.name}",
    );
    assert_eq!(
        get(&c, "job/policy", "{.status.failed} {.status.conditions[?(@.type==\"Failed\")].reason}: {.status.conditions[?(@.type==\"Failed\")].message}"),
        format!("1 PodFailurePolicy: Container main for pod default/{pod} failed with exit code 42 matching FailJob rule at index 0")
    );

    // backoffLimitPerIndex 1: each index fails twice (the retry after its own 10 s backoff, carrying
    // the failure count), then the Job fails with both indexes failed.
    c.kubectl(&[
        "wait",
        "--for=condition=failed",
        "job/perindex",
        "--timeout=40s",
    ]);
    assert_eq!(
        get(&c, "job/perindex", "{.status.failed} {.status.failedIndexes} {.status.conditions[?(@.type==\"Failed\")].reason}"),
        "4 0,1 FailedIndexes"
    );
    let counts = get(&c, "pods", "{range .items[?(@.metadata.labels.job-name==\"perindex\")]}{.metadata.annotations.batch\\.kubernetes\\.io/job-completion-index}:{.metadata.annotations.batch\\.kubernetes\\.io/job-index-failure-count} {end}");
    let mut counts: Vec<&str> = counts.split_whitespace().collect();
    counts.sort();
    assert_eq!(counts, ["0:0", "0:1", "1:0", "1:1"]);

    // ttlSecondsAfterFinished: the finished Job is deleted (foreground: it is marked for deletion and
    // goes once the garbage collector has removed its pods).
    let start = Instant::now();
    loop {
        let out = c.kubectl_output(
            &[
                "get",
                "job",
                "short",
                "-o",
                "jsonpath={.metadata.deletionTimestamp}",
            ],
            None,
        );
        let gone =
            !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("NotFound");
        if gone || !String::from_utf8_lossy(&out.stdout).is_empty() {
            break;
        }
        assert!(
            start.elapsed() < t,
            "job/short was not deleted after its TTL"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}
