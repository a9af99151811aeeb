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
fn wait_for(c: &Cluster, what: &str, path: &str, timeout: Duration, check: impl Fn(&str) -> bool) -> String {
    let start = Instant::now();
    loop {
        let v = get(c, what, path);
        if check(&v) {
            return v;
        }
        assert!(start.elapsed() < timeout, "{what} {path}: still {v:?} after {timeout:?}");
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
    assert_eq!(c.kubectl_in(&["apply", "-f", "-"], Some(pi)).trim(), "job.batch/pi created");
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
        let phases = get(&c, "pods", "{range .items[?(@.metadata.labels.job-name==\"pi\")]}{.status.phase} {end}");
        let running = phases.split_whitespace().filter(|p| *p != "Succeeded").count();
        assert!(running <= 2, "more than 2 pi pods at once: {phases}");
        let done = get(&c, "job/pi", "{.status.conditions[?(@.type==\"Complete\")].status}");
        if done == "True" {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "pi did not complete: {phases}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let out = c.kubectl(&["wait", "--for=condition=complete", "job/pi", "--timeout=30s"]);
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
    assert!(times.iter().all(|t| t.ends_with('Z')) && times[0] <= times[1], "{times:?}");
    let uid = get(&c, "job/pi", "{.metadata.uid}");
    assert_eq!(get(&c, "job/pi", "{.spec.selector.matchLabels}"), format!("{{\"batch.kubernetes.io/controller-uid\":\"{uid}\"}}"));
    // Every pod counted, its finalizer gone, named <job>-<random>.
    let pods = get(&c, "pods", "{range .items[?(@.metadata.labels.job-name==\"pi\")]}{.metadata.name},{.status.phase},{.metadata.finalizers},{.metadata.ownerReferences[0].kind} {end}");
    let pods: Vec<&str> = pods.split_whitespace().collect();
    assert_eq!(pods.len(), 5, "{pods:?}");
    for p in pods {
        let f: Vec<&str> = p.split(',').collect();
        assert!(f[0].starts_with("pi-") && f[0].len() == 8, "{p}");
        // The API server keeps the emptied list (`[]`) where upstream drops it.
        assert!(f[1] == "Succeeded" && matches!(f[2], "" | "[]") && f[3] == "Job", "{p}");
    }

    // The Indexed Job: one pod per index, indexes recorded.
    c.kubectl(&["wait", "--for=condition=complete", "job/idx", "--timeout=30s"]);
    assert_eq!(get(&c, "job/idx", "{.status.completedIndexes} {.status.succeeded}"), "0-2 3");
    let pods = get(&c, "pods", "{range .items[?(@.metadata.labels.job-name==\"idx\")]}{.metadata.annotations.batch\\.kubernetes\\.io/job-completion-index}={.spec.hostname}={.metadata.labels.batch\\.kubernetes\\.io/job-completion-index}={.spec.containers[0].env[0].name} {end}");
    let mut pods: Vec<&str> = pods.split_whitespace().collect();
    pods.sort();
    assert_eq!(
        pods,
        ["0=idx-0=0=JOB_COMPLETION_INDEX", "1=idx-1=1=JOB_COMPLETION_INDEX", "2=idx-2=2=JOB_COMPLETION_INDEX"]
    );

    // Two failures (the second after the 10 s creation backoff) exceed backoffLimit 1.
    c.kubectl(&["wait", "--for=condition=failed", "job/fails", "--timeout=40s"]);
    assert_eq!(
        get(&c, "job/fails", "{.status.failed} {range .status.conditions[*]}{.type}={.reason};{end}"),
        "2 FailureTarget=BackoffLimitExceeded;Failed=BackoffLimitExceeded;"
    );
    assert_eq!(
        get(&c, "job/fails", "{.status.conditions[?(@.type==\"Failed\")].message}"),
        "Job has reached the specified backoff limit"
    );
    let events = c.kubectl(&["get", "events", "--field-selector", "involvedObject.name=fails", "-o", "jsonpath={range .items[*]}{.reason} {end}"]);
    assert!(events.contains("BackoffLimitExceeded") && events.contains("SuccessfulCreate"), "{events}");
}
