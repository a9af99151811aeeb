//! `spec.backoffLimitPerIndex` and `spec.maxFailedIndexes` (upstream `indexed_job_utils.go` and
//! `backoff_utils.go`, per-index parts): each pod records how often its index failed before it
//! (`batch.kubernetes.io/job-index-failure-count`, and the failures a pod failure policy ignored);
//! an index fails once a counted failure finds that count at the limit, or on a FailIndex rule. A
//! failed pod is kept (its finalizer stays) until its replacement exists, so the count carries over.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;

use super::indexed::{self, Indexes};
use super::{backoff, pod_failure_policy, sync};

pub const INDEX_FAILURE_COUNT: &str = "batch.kubernetes.io/job-index-failure-count";
pub const INDEX_IGNORED_FAILURE_COUNT: &str = "batch.kubernetes.io/job-index-ignored-failure-count";

pub fn limit(job: &Job) -> Option<i32> {
    job.spec.as_ref()?.backoff_limit_per_index
}

fn annotation(pod: &Pod, key: &str) -> i32 {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .and_then(|v| v.parse::<i64>().ok())
        .filter(|v| (0..=i64::from(i32::MAX)).contains(v))
        .map_or(0, |v| v as i32)
}

fn failure_count(pod: &Pod) -> i32 {
    annotation(pod, INDEX_FAILURE_COUNT)
}

fn absolute_failure_count(pod: &Pod) -> i32 {
    failure_count(pod) + annotation(pod, INDEX_IGNORED_FAILURE_COUNT)
}

/// Upstream `isIndexFailed`.
fn is_index_failed(job: &Job, pod: &Pod, limit: i32) -> bool {
    if !sync::is_pod_failed(pod, job) {
        return false;
    }
    let policy = job
        .spec
        .as_ref()
        .and_then(|s| s.pod_failure_policy.as_ref());
    let verdict = pod_failure_policy::matches(policy, pod);
    if verdict.action.as_deref() == Some("FailIndex") {
        return true;
    }
    verdict.count && failure_count(pod) >= limit
}

/// Upstream `calculateFailedIndexes`: `status.failedIndexes` plus the indexes of uncounted pods
/// that failed them.
pub fn failed_indexes(job: &Job, pods: &[Arc<Pod>]) -> Option<Indexes> {
    let limit = limit(job)?;
    let completions = indexed::completions(job);
    let recorded = job
        .status
        .as_ref()
        .and_then(|s| s.failed_indexes.as_deref())
        .unwrap_or("");
    let mut failed = indexed::parse(recorded, completions);
    for pod in pods {
        if let Some(ix) = indexed::valid_index(job, pod) {
            if sync::has_tracking_finalizer(pod) && is_index_failed(job, pod, limit) {
                failed.insert(ix);
            }
        }
    }
    Some(failed)
}

/// Upstream `getPodsWithDelayedDeletionPerIndex`: per pending index, the failed pod its replacement
/// takes the failure count from (the one with the highest count, then the latest finish).
pub fn delayed_deletion(
    job: &Job,
    pods: &[Arc<Pod>],
    succeeded: &Indexes,
    failed: &Indexes,
    expected_rm: &std::collections::HashSet<String>,
    now: Timestamp,
) -> BTreeMap<i32, Arc<Pod>> {
    let active: Indexes = pods
        .iter()
        .filter(|p| sync::is_active(p))
        .filter_map(|p| indexed::completion_index(p))
        .collect();
    let mut out: BTreeMap<i32, Arc<Pod>> = BTreeMap::new();
    for pod in pods {
        let uid = pod.metadata.uid.as_deref().unwrap_or("");
        if !sync::has_tracking_finalizer(pod)
            || expected_rm.contains(uid)
            || !sync::is_pod_failed(pod, job)
        {
            continue;
        }
        let Some(ix) = indexed::valid_index(job, pod) else {
            continue;
        };
        if succeeded.contains(&ix) || failed.contains(&ix) || active.contains(&ix) {
            continue;
        }
        let replace = out.get(&ix).is_none_or(|last| {
            absolute_failure_count(last) <= absolute_failure_count(pod)
                && backoff::finished_time(pod, now) >= backoff::finished_time(last, now)
        });
        if replace {
            out.insert(ix, pod.clone());
        }
    }
    out
}

/// Upstream `getRemainingTimePerIndex`: the backoff before re-creating an index whose last pod failed.
pub fn remaining(last_failed: Option<&Arc<Pod>>, now: Timestamp) -> Duration {
    let Some(pod) = last_failed else {
        return Duration::ZERO;
    };
    let record = backoff::BackoffRecord {
        failures_after_last_success: absolute_failure_count(pod) as u32 + 1,
        last_failure_time: Some(backoff::finished_time(pod, now)),
    };
    backoff::remaining(&record, now)
}

/// Upstream `addIndexFailureCountAnnotation`: the replacement's counts, from the pod it replaces.
pub fn add_failure_counts(
    annotations: &mut BTreeMap<String, String>,
    job: &Job,
    replaced: Option<&Arc<Pod>>,
) {
    let (mut counted, mut ignored) = (0, 0);
    if let Some(p) = replaced {
        counted = failure_count(p);
        ignored = annotation(p, INDEX_IGNORED_FAILURE_COUNT);
        let policy = job
            .spec
            .as_ref()
            .and_then(|s| s.pod_failure_policy.as_ref());
        if pod_failure_policy::matches(policy, p).count {
            counted += 1;
        } else {
            ignored += 1;
        }
    }
    annotations.insert(INDEX_FAILURE_COUNT.into(), counted.to_string());
    if ignored > 0 {
        annotations.insert(INDEX_IGNORED_FAILURE_COUNT.into(), ignored.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn job(limit: i32) -> Job {
        serde_json::from_value(
            json!({"metadata": {"name": "j"}, "spec": {"completionMode": "Indexed",
            "completions": 4, "backoffLimitPerIndex": limit, "template": {}},
            "status": {"failedIndexes": "3"}}),
        )
        .unwrap()
    }

    fn failed(ix: i32, count: i32, at: &str) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": format!("p{ix}-{count}"), "uid": format!("u{ix}-{count}"),
                "finalizers": [sync::TRACKING_FINALIZER],
                "annotations": {indexed::COMPLETION_INDEX: ix.to_string(), INDEX_FAILURE_COUNT: count.to_string()}},
                "status": {"phase": "Failed", "containerStatuses": [{"name": "c", "image": "x", "imageID": "",
                    "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 1, "finishedAt": at}}}]}}))
            .unwrap(),
        )
    }

    #[test]
    fn indexes_fail_at_the_limit() {
        let j = job(1);
        let pods = vec![
            failed(0, 0, "2026-01-01T00:00:00Z"),
            failed(1, 1, "2026-01-01T00:00:00Z"),
        ];
        let f = failed_indexes(&j, &pods).unwrap();
        assert_eq!(indexed::format(&f), "1,3");
        let now: Timestamp = "2026-01-01T00:00:04Z".parse().unwrap();
        let delayed = delayed_deletion(&j, &pods, &Indexes::new(), &f, &Default::default(), now);
        assert_eq!(delayed.keys().copied().collect::<Vec<_>>(), [0]);
        // One failure so far for index 0: 10 s from its finish.
        assert_eq!(remaining(delayed.get(&0), now), Duration::from_secs(6));
        let mut a = BTreeMap::new();
        add_failure_counts(&mut a, &j, delayed.get(&0));
        assert_eq!(a[INDEX_FAILURE_COUNT], "1");
        assert_eq!(
            failed_indexes(
                &serde_json::from_value(json!({"spec": {"template": {}}})).unwrap(),
                &pods
            ),
            None
        );
    }
}
