//! The pure part of the Job controller (upstream `pkg/controller/job/job_controller.go` helpers and
//! `pkg/controller/job/util`): pod classification, the counters' inputs, conditions, how many pods a
//! Job wants and which to remove, and the pods it creates.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::{Job, JobCondition, JobStatus};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use serde_json::Value;

use super::indexed;

/// Keeps a finished pod until the Job has counted it (upstream `batch.JobTrackingFinalizer`).
pub const TRACKING_FINALIZER: &str = "batch.kubernetes.io/job-tracking";

pub fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

pub fn has_tracking_finalizer(pod: &Pod) -> bool {
    pod.metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == TRACKING_FINALIZER)
}

fn terminal(pod: &Pod) -> bool {
    matches!(phase(pod), "Succeeded" | "Failed")
}

/// Upstream `controller.FilterActivePods`.
pub fn is_active(pod: &Pod) -> bool {
    !terminal(pod) && pod.metadata.deletion_timestamp.is_none()
}

/// Upstream `controller.IsPodTerminating`.
pub fn is_terminating(pod: &Pod) -> bool {
    !terminal(pod) && pod.metadata.deletion_timestamp.is_some()
}

pub fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Upstream `onlyReplaceFailedPods`: with `podReplacementPolicy: Failed` (the default when a pod
/// failure policy is set) terminating pods are neither replaced nor counted as failed.
pub fn only_replace_failed(job: &Job) -> bool {
    let spec = job.spec.as_ref();
    spec.and_then(|s| s.pod_replacement_policy.as_deref()) == Some("Failed")
        || spec.is_some_and(|s| s.pod_failure_policy.is_some())
}

/// Upstream `isPodFailed`: Failed, or (unless only failed pods are replaced) deleted before it
/// succeeded.
pub fn is_pod_failed(pod: &Pod, job: &Job) -> bool {
    if phase(pod) == "Failed" {
        return true;
    }
    if only_replace_failed(job) {
        return false;
    }
    pod.metadata.deletion_timestamp.is_some() && phase(pod) != "Succeeded"
}

pub fn conditions(job: &Job) -> &[JobCondition] {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or(&[])
}

pub fn find_condition<'a>(job: &'a Job, type_: &str) -> Option<&'a JobCondition> {
    conditions(job).iter().find(|c| c.type_ == type_)
}

fn condition_true(job: &Job, type_: &str) -> bool {
    find_condition(job, type_).is_some_and(|c| c.status == "True")
}

/// Upstream `util.IsJobFinished`: a true Complete or Failed condition.
pub fn is_finished(job: &Job) -> bool {
    condition_true(job, "Complete") || condition_true(job, "Failed")
}

pub fn is_suspended(job: &Job) -> bool {
    job.spec.as_ref().and_then(|s| s.suspend) == Some(true)
}

pub fn new_condition(
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: Timestamp,
) -> JobCondition {
    JobCondition {
        type_: type_.into(),
        status: status.into(),
        reason: (!reason.is_empty()).then(|| reason.into()),
        message: (!message.is_empty()).then(|| message.into()),
        last_probe_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
    }
}

/// Upstream `ensureJobConditionStatus`: sets the condition, appending it unless it would be a new
/// False one; returns whether anything changed.
pub fn ensure_condition(
    list: &mut Vec<JobCondition>,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: Timestamp,
) -> bool {
    if let Some(c) = list.iter_mut().find(|c| c.type_ == type_) {
        let same = c.status == status
            && c.reason.as_deref().unwrap_or("") == reason
            && c.message.as_deref().unwrap_or("") == message;
        if same {
            return false;
        }
        *c = new_condition(type_, status, reason, message, now);
        return true;
    }
    if status != "False" {
        list.push(new_condition(type_, status, reason, message, now));
        return true;
    }
    false
}

/// Upstream `pastBackoffLimitOnFailure`: with `restartPolicy: OnFailure`, container restarts of
/// running and pending pods count as failures.
pub fn past_backoff_limit_on_failure(job: &Job, pods: &[Arc<Pod>]) -> bool {
    let spec = job.spec.as_ref();
    let policy = spec
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|s| s.restart_policy.as_deref());
    if policy != Some("OnFailure") {
        return false;
    }
    let restarts: i32 = pods
        .iter()
        .filter(|p| matches!(phase(p), "Running" | "Pending"))
        .filter_map(|p| p.status.as_ref())
        .flat_map(|s| {
            s.init_container_statuses
                .iter()
                .flatten()
                .chain(s.container_statuses.iter().flatten())
        })
        .map(|c| c.restart_count)
        .sum();
    let limit = spec.and_then(|s| s.backoff_limit).unwrap_or(6);
    if limit == 0 {
        restarts > 0
    } else {
        restarts >= limit
    }
}

/// Time left before `activeDeadlineSeconds` (zero when passed); `None` without a deadline, a start
/// time, or while suspended (upstream `pastActiveDeadline` and the requeue after it).
pub fn deadline_remaining(job: &Job, now: Timestamp) -> Option<Duration> {
    let seconds = job.spec.as_ref()?.active_deadline_seconds?;
    let start = job.status.as_ref()?.start_time.as_ref()?.0;
    if is_suspended(job) {
        return None;
    }
    let elapsed = Duration::try_from(now.duration_since(start)).unwrap_or(Duration::ZERO);
    Some(Duration::from_secs(seconds.max(0) as u64).saturating_sub(elapsed))
}

/// How many pods should be running (upstream `manageJob`): with `completions`, never more than the
/// remaining completions nor `parallelism`; without, `parallelism` until one pod succeeded.
pub fn want_active(job: &Job, active: i32, succeeded: i32) -> i32 {
    let spec = job.spec.as_ref();
    let parallelism = spec.and_then(|s| s.parallelism).unwrap_or(1);
    match spec.and_then(|s| s.completions) {
        None if succeeded > 0 => active,
        None => parallelism,
        Some(c) => (c - succeeded).min(parallelism).max(0),
    }
}

/// Upstream `activePodsForRemoval`: for Indexed Jobs pods with bad or repeated indexes first, then
/// the pods least far along (upstream `controller.ActivePods` order).
pub fn pods_for_removal(job: &Job, active: &[Arc<Pod>], at_least: usize) -> Vec<Arc<Pod>> {
    let (mut rm, mut left) = if indexed::is_indexed(job) {
        indexed::duplicated_for_removal(job, active)
    } else {
        (Vec::new(), active.to_vec())
    };
    if rm.len() < at_least {
        left.sort_by(|a, b| crate::replicaset::sync::deletion_order(a, b));
        let n = (at_least - rm.len()).min(left.len());
        rm.extend(left.drain(..n));
    }
    rm
}

fn labels_json(pod: &Pod) -> serde_json::Map<String, Value> {
    pod.metadata
        .labels
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect()
}

/// What a Job does with its namespace's pods (upstream `ClaimPods` with the tracking finalizer).
#[derive(Debug, Default)]
pub struct Claim {
    /// Its pods, adopted ones included.
    pub owned: Vec<Arc<Pod>>,
    /// Orphans matching the selector, to adopt (owner reference and tracking finalizer).
    pub adopt: Vec<Arc<Pod>>,
    /// Its pods that no longer match, to release.
    pub release: Vec<Arc<Pod>>,
}

pub fn claim(job: &Job, selector: &apimachinery::labels::Selector, pods: &[Arc<Pod>]) -> Claim {
    let uid = job.metadata.uid.as_deref().unwrap_or("");
    let deleting = job.metadata.deletion_timestamp.is_some();
    let mut c = Claim::default();
    for pod in pods {
        let matches = selector.matches(&labels_json(pod));
        let owner = pod
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|r| r.controller == Some(true));
        match owner {
            Some(r) if r.uid == uid => {
                if matches || deleting {
                    c.owned.push(pod.clone());
                } else {
                    c.release.push(pod.clone());
                }
            }
            Some(_) => {}
            None if matches && !deleting && pod.metadata.deletion_timestamp.is_none() => {
                let mut adopted = (**pod).clone();
                let fins = adopted.metadata.finalizers.get_or_insert_with(Vec::new);
                if !fins.iter().any(|f| f == TRACKING_FINALIZER) {
                    fins.push(TRACKING_FINALIZER.into());
                }
                c.adopt.push(pod.clone());
                c.owned.push(Arc::new(adopted));
            }
            None => {}
        }
    }
    c
}

/// Pods to account for: with the tracking finalizer, not yet in `uncountedTerminatedPods` nor
/// waiting for their finalizer removal to be seen, with a valid index for Indexed Jobs (upstream
/// `getValidPodsWithFilter`).
pub fn uncounted_candidates<'a>(
    job: &'a Job,
    pods: &'a [Arc<Pod>],
    uncounted: &'a HashSet<String>,
    expected_rm: &'a HashSet<String>,
) -> impl Iterator<Item = &'a Arc<Pod>> + 'a {
    pods.iter().filter(move |p| {
        let uid = p.metadata.uid.as_deref().unwrap_or("");
        has_tracking_finalizer(p)
            && !uncounted.contains(uid)
            && !expected_rm.contains(uid)
            && (!indexed::is_indexed(job) || indexed::valid_index(job, p).is_some())
    })
}

/// The pod UIDs listed in `status.uncountedTerminatedPods` (succeeded, failed).
pub fn uncounted_sets(status: &JobStatus) -> (HashSet<String>, HashSet<String>) {
    let u = status.uncounted_terminated_pods.as_ref();
    let set = |v: Option<&Vec<String>>| v.into_iter().flatten().cloned().collect();
    (
        set(u.and_then(|u| u.succeeded.as_ref())),
        set(u.and_then(|u| u.failed.as_ref())),
    )
}

/// Upstream `cleanUncountedPodsWithoutFinalizers`: UIDs whose pod no longer has the finalizer move
/// from `uncountedTerminatedPods` into the counters. Returns whether the status changed.
pub fn clean_uncounted(status: &mut JobStatus, with_finalizer: &HashSet<String>) -> bool {
    let mut changed = false;
    let u = status
        .uncounted_terminated_pods
        .get_or_insert_with(Default::default);
    let mut moved = [0i32; 2];
    for (i, list) in [&mut u.succeeded, &mut u.failed].into_iter().enumerate() {
        let Some(v) = list.as_mut() else { continue };
        let before = v.len();
        v.retain(|uid| with_finalizer.contains(uid));
        if v.len() != before {
            changed = true;
            moved[i] = (before - v.len()) as i32;
        }
        if v.is_empty() {
            *list = None;
        }
    }
    if moved[0] > 0 {
        status.succeeded = Some(status.succeeded.unwrap_or(0) + moved[0]);
    }
    if moved[1] > 0 {
        status.failed = Some(status.failed.unwrap_or(0) + moved[1]);
    }
    changed
}

/// The pod a Job creates (upstream `GetPodFromTemplate` plus the Job's additions: the tracking
/// finalizer, and for Indexed Jobs the index annotation and label, hostname and
/// `JOB_COMPLETION_INDEX`).
pub fn pod_from_template(job: &Job, index: Option<i32>) -> Pod {
    let name = job.metadata.name.as_deref().unwrap_or("");
    let mut template = job
        .spec
        .as_ref()
        .map(|s| s.template.clone())
        .unwrap_or_default();
    let generate_name = match index {
        Some(ix) => {
            indexed::add_completion_index_env(&mut template);
            indexed::set_index(&mut template, name, ix);
            indexed::generate_name(name, ix)
        }
        None => format!("{name}-"),
    };
    let meta = template.metadata.unwrap_or_default();
    let mut finalizers = meta.finalizers.unwrap_or_default();
    if !finalizers.iter().any(|f| f == TRACKING_FINALIZER) {
        finalizers.push(TRACKING_FINALIZER.into());
    }
    let mut pod = Pod {
        spec: template.spec,
        ..Default::default()
    };
    pod.metadata.generate_name = Some(generate_name);
    pod.metadata.namespace = job.metadata.namespace.clone();
    pod.metadata.labels = meta.labels;
    pod.metadata.annotations = meta.annotations;
    pod.metadata.finalizers = Some(finalizers);
    pod.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "batch/v1".into(),
        kind: "Job".into(),
        name: name.into(),
        uid: job.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }]);
    pod
}

/// Pods sorted by completion index (upstream `byCompletionIndex`), so indexes are recorded in order.
pub fn sort_by_index(pods: &mut [Arc<Pod>]) {
    pods.sort_by_key(|p| indexed::completion_index(p).unwrap_or(i32::MAX));
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn job(spec: serde_json::Value, status: serde_json::Value) -> Job {
        let mut full = json!({"template": {"spec": {"containers": [], "restartPolicy": "Never"}}});
        for (k, v) in spec.as_object().unwrap() {
            full[k] = v.clone();
        }
        serde_json::from_value(
            json!({"metadata": {"name": "j", "namespace": "ns", "uid": "u"},
            "spec": full, "status": status}),
        )
        .unwrap()
    }

    fn pod(name: &str, phase: &str, extra: serde_json::Value) -> Arc<Pod> {
        let mut p = json!({"metadata": {"name": name, "uid": name, "finalizers": [TRACKING_FINALIZER]},
            "status": {"phase": phase}});
        if let Some(m) = extra.get("metadata") {
            for (k, v) in m.as_object().unwrap() {
                p["metadata"][k] = v.clone();
            }
        }
        if let Some(s) = extra.get("status") {
            for (k, v) in s.as_object().unwrap() {
                p["status"][k] = v.clone();
            }
        }
        Arc::new(serde_json::from_value(p).unwrap())
    }

    #[test]
    fn wanted_pods() {
        let j = job(json!({"parallelism": 2, "completions": 5}), json!({}));
        assert_eq!(want_active(&j, 0, 0), 2);
        assert_eq!(want_active(&j, 2, 4), 1);
        assert_eq!(want_active(&j, 0, 5), 0);
        assert_eq!(want_active(&j, 0, 7), 0);
        let work_queue = job(json!({"parallelism": 3}), json!({}));
        assert_eq!(want_active(&work_queue, 1, 0), 3);
        // After one success a work-queue Job only lets the running pods finish.
        assert_eq!(want_active(&work_queue, 1, 1), 1);
    }

    #[test]
    fn failed_and_terminating_pods() {
        let deleting = json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}});
        let default = job(json!({}), json!({}));
        assert!(is_pod_failed(&pod("a", "Failed", json!({})), &default));
        assert!(is_pod_failed(
            &pod("b", "Running", deleting.clone()),
            &default
        ));
        assert!(!is_pod_failed(
            &pod("c", "Succeeded", deleting.clone()),
            &default
        ));
        assert!(is_terminating(&pod("b", "Running", deleting.clone())));
        assert!(!is_active(&pod("b", "Running", deleting.clone())));
        // podReplacementPolicy Failed (or a pod failure policy): terminating is not failed.
        let failed_only = job(json!({"podReplacementPolicy": "Failed"}), json!({}));
        assert!(!is_pod_failed(
            &pod("b", "Running", deleting.clone()),
            &failed_only
        ));
        let with_policy = job(json!({"podFailurePolicy": {"rules": []}}), json!({}));
        assert!(!is_pod_failed(&pod("b", "Running", deleting), &with_policy));
    }

    #[test]
    fn restarts_count_against_the_limit_with_on_failure() {
        let restarted = |n: i32| {
            pod(
                "r",
                "Running",
                json!({"status": {"containerStatuses": [{"name": "c", "image": "x",
                "imageID": "", "ready": true, "restartCount": n}]}}),
            )
        };
        let mut j = job(json!({"backoffLimit": 2}), json!({}));
        assert!(!past_backoff_limit_on_failure(&j, &[restarted(5)]));
        j.spec
            .as_mut()
            .unwrap()
            .template
            .spec
            .as_mut()
            .unwrap()
            .restart_policy = Some("OnFailure".into());
        assert!(!past_backoff_limit_on_failure(&j, &[restarted(1)]));
        assert!(past_backoff_limit_on_failure(
            &j,
            &[restarted(1), restarted(1)]
        ));
        j.spec.as_mut().unwrap().backoff_limit = Some(0);
        assert!(past_backoff_limit_on_failure(&j, &[restarted(1)]));
        assert!(!past_backoff_limit_on_failure(&j, &[restarted(0)]));
    }

    #[test]
    fn active_deadline() {
        let now: Timestamp = "2026-01-01T00:00:10Z".parse().unwrap();
        let j = job(
            json!({"activeDeadlineSeconds": 15}),
            json!({"startTime": "2026-01-01T00:00:00Z"}),
        );
        assert_eq!(deadline_remaining(&j, now), Some(Duration::from_secs(5)));
        let late = job(
            json!({"activeDeadlineSeconds": 5}),
            json!({"startTime": "2026-01-01T00:00:00Z"}),
        );
        assert_eq!(deadline_remaining(&late, now), Some(Duration::ZERO));
        let suspended = job(
            json!({"activeDeadlineSeconds": 5, "suspend": true}),
            json!({"startTime": "2026-01-01T00:00:00Z"}),
        );
        assert_eq!(deadline_remaining(&suspended, now), None);
        assert_eq!(deadline_remaining(&job(json!({}), json!({})), now), None);
    }

    #[test]
    fn conditions_are_ensured_as_upstream() {
        let now = Timestamp::UNIX_EPOCH;
        let mut list = Vec::new();
        // A new False condition is not added.
        assert!(!ensure_condition(
            &mut list,
            "Suspended",
            "False",
            "JobResumed",
            "Job resumed",
            now
        ));
        assert!(ensure_condition(
            &mut list,
            "Suspended",
            "True",
            "JobSuspended",
            "Job suspended",
            now
        ));
        assert!(!ensure_condition(
            &mut list,
            "Suspended",
            "True",
            "JobSuspended",
            "Job suspended",
            now
        ));
        assert!(ensure_condition(
            &mut list,
            "Suspended",
            "False",
            "JobResumed",
            "Job resumed",
            now
        ));
        assert_eq!(list.len(), 1);
        assert_eq!(list[0].reason.as_deref(), Some("JobResumed"));
    }

    #[test]
    fn uncounted_pods_move_into_counters_once_their_finalizer_is_gone() {
        let mut status: JobStatus = serde_json::from_value(json!({"succeeded": 2, "failed": 1,
            "uncountedTerminatedPods": {"succeeded": ["a", "b"], "failed": ["c"]}}))
        .unwrap();
        let with: HashSet<String> = ["b".to_string()].into_iter().collect();
        assert!(clean_uncounted(&mut status, &with));
        assert_eq!((status.succeeded, status.failed), (Some(3), Some(2)));
        let u = status.uncounted_terminated_pods.as_ref().unwrap();
        assert_eq!(
            (u.succeeded.clone(), u.failed.clone()),
            (Some(vec!["b".to_string()]), None)
        );
        assert!(!clean_uncounted(&mut status, &with));
    }

    #[test]
    fn removal_prefers_duplicate_indexes_then_least_progressed() {
        let indexed = job(
            json!({"completionMode": "Indexed", "completions": 3}),
            json!({}),
        );
        let ix = |name: &str, i: &str, phase: &str| {
            pod(
                name,
                phase,
                json!({"metadata": {"annotations": {indexed::COMPLETION_INDEX: i}}}),
            )
        };
        let pods = vec![
            ix("a", "0", "Running"),
            ix("b", "0", "Pending"),
            ix("c", "1", "Running"),
            ix("d", "7", "Running"),
        ];
        let names = |v: Vec<Arc<Pod>>| {
            let mut n: Vec<String> = v.iter().map(|p| p.metadata.name.clone().unwrap()).collect();
            n.sort();
            n
        };
        assert_eq!(names(pods_for_removal(&indexed, &pods, 0)), ["b", "d"]);
        let plain = job(json!({}), json!({}));
        let pods = vec![
            pod("run", "Running", json!({})),
            pod("pend", "Pending", json!({})),
        ];
        assert_eq!(names(pods_for_removal(&plain, &pods, 1)), ["pend"]);
    }

    #[test]
    fn pods_from_the_template() {
        let j = job(
            json!({"completionMode": "Indexed", "completions": 3,
            "template": {"metadata": {"labels": {"job-name": "j"}, "finalizers": ["x"]},
                "spec": {"containers": [{"name": "c"}], "restartPolicy": "Never"}}}),
            json!({}),
        );
        let p = serde_json::to_value(pod_from_template(&j, Some(2))).unwrap();
        assert_eq!(p["metadata"]["generateName"], "j-2-");
        assert_eq!(
            p["metadata"]["finalizers"],
            json!(["x", TRACKING_FINALIZER])
        );
        assert_eq!(p["metadata"]["annotations"][indexed::COMPLETION_INDEX], "2");
        assert_eq!(p["metadata"]["labels"][indexed::COMPLETION_INDEX], "2");
        assert_eq!(p["metadata"]["labels"]["job-name"], "j");
        assert_eq!(p["metadata"]["ownerReferences"][0]["kind"], "Job");
        assert_eq!(p["metadata"]["ownerReferences"][0]["controller"], true);
        assert_eq!(p["spec"]["hostname"], "j-2");
        assert_eq!(
            p["spec"]["containers"][0]["env"][0]["name"],
            indexed::COMPLETION_INDEX_ENV
        );
        let plain = job(json!({}), json!({}));
        let p = serde_json::to_value(pod_from_template(&plain, None)).unwrap();
        assert_eq!(p["metadata"]["generateName"], "j-");
        assert!(p["spec"].get("hostname").is_none());
    }

    #[test]
    fn claim_adopts_orphans_with_the_finalizer_and_releases_strays() {
        let j = job(
            json!({"selector": {"matchLabels": {"app": "x"}}}),
            json!({}),
        );
        let sel = apimachinery::labels::selector_from_label_selector(
            &json!({"matchLabels": {"app": "x"}}),
        )
        .unwrap();
        let owned = json!({"metadata": {"labels": {"app": "x"}, "ownerReferences": [{"apiVersion": "batch/v1",
            "kind": "Job", "name": "j", "uid": "u", "controller": true}]}});
        let stray = json!({"metadata": {"labels": {"app": "y"}, "ownerReferences": [{"apiVersion": "batch/v1",
            "kind": "Job", "name": "j", "uid": "u", "controller": true}]}});
        let orphan = pod(
            "o",
            "Running",
            json!({"metadata": {"labels": {"app": "x"}, "finalizers": []}}),
        );
        let c = claim(
            &j,
            &sel,
            &[
                pod("a", "Running", owned),
                pod("s", "Running", stray),
                orphan,
            ],
        );
        assert_eq!(c.owned.len(), 2);
        assert_eq!(c.release.len(), 1);
        assert_eq!(c.adopt.len(), 1);
        assert!(has_tracking_finalizer(&c.owned[1]));
    }
}
