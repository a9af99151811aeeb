//! A Deployment's status and conditions (upstream `calculateStatus`, `syncRolloutStatus`,
//! `checkPausedConditions` and `deploymentutil`'s condition helpers): counts from the ReplicaSets, the
//! Available condition, and the Progressing condition that tells `kubectl rollout status` whether a
//! rollout advances, completed, is paused, or exceeded `progressDeadlineSeconds`.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentCondition, DeploymentStatus, ReplicaSet};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::rollout::{fenceposts, replicas, rs_replicas};

pub const NEW_RS_AVAILABLE: &str = "NewReplicaSetAvailable";
pub const RS_UPDATED: &str = "ReplicaSetUpdated";
pub const NEW_RS_CREATED: &str = "NewReplicaSetCreated";
pub const TIMED_OUT: &str = "ProgressDeadlineExceeded";
pub const PAUSED: &str = "DeploymentPaused";
pub const RESUMED: &str = "DeploymentResumed";

fn rs_status(rs: &ReplicaSet) -> (i32, i32, i32) {
    let s = rs.status.as_ref();
    (
        s.map_or(0, |s| s.replicas),
        s.and_then(|s| s.ready_replicas).unwrap_or(0),
        s.and_then(|s| s.available_replicas).unwrap_or(0),
    )
}

/// Whole seconds, as the API stores them (so a recomputed status equals the stored one).
pub fn now() -> Timestamp {
    Timestamp::from_second(Timestamp::now().as_second()).unwrap_or(Timestamp::UNIX_EPOCH)
}

pub fn condition(
    type_: &str,
    status: &str,
    reason: &str,
    message: String,
    now: Timestamp,
) -> DeploymentCondition {
    DeploymentCondition {
        type_: type_.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message),
        last_update_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
    }
}

pub fn get<'a>(status: &'a DeploymentStatus, type_: &str) -> Option<&'a DeploymentCondition> {
    status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == type_)
}

fn remove(status: &mut DeploymentStatus, type_: &str) {
    if let Some(c) = status.conditions.as_mut() {
        c.retain(|c| c.type_ != type_);
    }
}

/// Upstream `SetDeploymentCondition`: nothing changes when status and reason are the same; a condition
/// keeping its status keeps its lastTransitionTime.
pub fn set(status: &mut DeploymentStatus, mut new: DeploymentCondition) {
    if let Some(cur) = get(status, &new.type_) {
        if cur.status == new.status && cur.reason == new.reason {
            return;
        }
        if cur.status == new.status {
            new.last_transition_time = cur.last_transition_time.clone();
        }
    }
    remove(status, &new.type_);
    status.conditions.get_or_insert_with(Vec::new).push(new);
}

pub fn has_progress_deadline(d: &Deployment) -> bool {
    d.spec
        .as_ref()
        .and_then(|s| s.progress_deadline_seconds)
        .is_some_and(|s| s != i32::MAX)
}

fn progress_deadline(d: &Deployment) -> Duration {
    let secs = d
        .spec
        .as_ref()
        .and_then(|s| s.progress_deadline_seconds)
        .unwrap_or(600);
    Duration::from_secs(secs.max(0) as u64)
}

/// Upstream `calculateStatus`: counts over every ReplicaSet and the Available condition; other
/// conditions are carried over from the current status.
pub fn calculate(
    d: &Deployment,
    new_rs: Option<&ReplicaSet>,
    all: &[&ReplicaSet],
    now: Timestamp,
) -> DeploymentStatus {
    let desired = replicas(d);
    let (_, max_unavailable) = fenceposts(d);
    let sum = |f: fn(&ReplicaSet) -> i32| all.iter().map(|rs| f(rs)).sum::<i32>();
    let available = sum(|rs| rs_status(rs).2);
    let total_replicas = sum(|rs| rs_status(rs).0);
    let current = d.status.clone().unwrap_or_default();
    let mut status = DeploymentStatus {
        observed_generation: d.metadata.generation,
        replicas: Some(total_replicas),
        updated_replicas: Some(new_rs.map_or(0, |rs| rs_status(rs).0)),
        ready_replicas: Some(sum(|rs| rs_status(rs).1)),
        available_replicas: Some(available),
        // Never negative: during a rollout more pods than desired may be available.
        unavailable_replicas: Some((sum(rs_replicas) - available).max(0)),
        collision_count: current.collision_count,
        conditions: current.conditions.clone(),
        terminating_replicas: None,
    };
    let available_condition = if available >= desired - max_unavailable {
        condition(
            "Available",
            "True",
            "MinimumReplicasAvailable",
            "Deployment has minimum availability.".into(),
            now,
        )
    } else {
        condition(
            "Available",
            "False",
            "MinimumReplicasUnavailable",
            "Deployment does not have minimum availability.".into(),
            now,
        )
    };
    set(&mut status, available_condition);
    status
}

/// Upstream `DeploymentComplete`.
pub fn complete(d: &Deployment, s: &DeploymentStatus) -> bool {
    let desired = replicas(d);
    s.updated_replicas == Some(desired)
        && s.replicas == Some(desired)
        && s.available_replicas == Some(desired)
        && s.observed_generation >= d.metadata.generation
}

/// Upstream `DeploymentProgressing`: more updated, ready or available pods, or fewer old ones.
fn progressing(d: &Deployment, new: &DeploymentStatus) -> bool {
    let old = d.status.clone().unwrap_or_default();
    let n = |v: Option<i32>| v.unwrap_or(0);
    let old_old = n(old.replicas) - n(old.updated_replicas);
    let new_old = n(new.replicas) - n(new.updated_replicas);
    n(new.updated_replicas) > n(old.updated_replicas)
        || new_old < old_old
        || n(new.ready_replicas) > n(old.ready_replicas)
        || n(new.available_replicas) > n(old.available_replicas)
}

/// Upstream `DeploymentTimedOut`: the Progressing condition was last updated longer than the deadline ago.
pub fn timed_out(d: &Deployment, s: &DeploymentStatus, now: Timestamp) -> bool {
    if !has_progress_deadline(d) {
        return false;
    }
    let Some(c) = get(s, "Progressing") else {
        return false;
    };
    match c.reason.as_deref() {
        Some(NEW_RS_AVAILABLE) => false,
        Some(TIMED_OUT) => true,
        _ => c.last_update_time.as_ref().is_some_and(|t| {
            t.0.checked_add(progress_deadline(d))
                .is_ok_and(|deadline| deadline < now)
        }),
    }
}

/// Upstream `syncRolloutStatus`: the status after a rollout step, with the Progressing condition
/// updated only when the rollout completed, advanced or ran out of time, and the ReplicaSets'
/// `ReplicaFailure` condition (the new one's first) carried over.
pub fn rollout(
    d: &Deployment,
    new_rs: Option<&ReplicaSet>,
    all: &[&ReplicaSet],
    now: Timestamp,
) -> DeploymentStatus {
    let mut status = rollout_progress(d, new_rs, all, now);
    match replica_failure(new_rs, all) {
        Some(c) => set(&mut status, c),
        None => remove(&mut status, "ReplicaFailure"),
    }
    status
}

/// Upstream `getReplicaFailures` + `ReplicaSetToDeploymentCondition`: the new ReplicaSet's
/// `ReplicaFailure` condition, else an old one's.
fn replica_failure(
    new_rs: Option<&ReplicaSet>,
    all: &[&ReplicaSet],
) -> Option<DeploymentCondition> {
    let failure = |rs: &ReplicaSet| {
        rs.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "ReplicaFailure"))
            .map(|c| DeploymentCondition {
                type_: c.type_.clone(),
                status: c.status.clone(),
                reason: c.reason.clone(),
                message: c.message.clone(),
                last_update_time: c.last_transition_time.clone(),
                last_transition_time: c.last_transition_time.clone(),
            })
    };
    new_rs
        .and_then(failure)
        .or_else(|| all.iter().find_map(|rs| failure(rs)))
}

fn rollout_progress(
    d: &Deployment,
    new_rs: Option<&ReplicaSet>,
    all: &[&ReplicaSet],
    now: Timestamp,
) -> DeploymentStatus {
    let mut status = calculate(d, new_rs, all, now);
    if !has_progress_deadline(d) {
        remove(&mut status, "Progressing");
        return status;
    }
    let current = d.status.clone().unwrap_or_default();
    let current_cond = get(&current, "Progressing").cloned();
    let done = status.replicas == status.updated_replicas
        && current_cond.as_ref().and_then(|c| c.reason.as_deref()) == Some(NEW_RS_AVAILABLE);
    if done {
        return status;
    }
    let name = d.metadata.name.as_deref().unwrap_or("");
    let rs_name = new_rs.and_then(|rs| rs.metadata.name.as_deref());
    if complete(d, &status) {
        let message = match rs_name {
            Some(rs) => format!("ReplicaSet \"{rs}\" has successfully progressed."),
            None => format!("Deployment \"{name}\" has successfully progressed."),
        };
        set(
            &mut status,
            condition("Progressing", "True", NEW_RS_AVAILABLE, message, now),
        );
    } else if progressing(d, &status) {
        let message = match rs_name {
            Some(rs) => format!("ReplicaSet \"{rs}\" is progressing."),
            None => format!("Deployment \"{name}\" is progressing."),
        };
        // Progress refreshes lastUpdateTime even with the same reason (what the deadline counts from).
        let mut c = condition("Progressing", "True", RS_UPDATED, message, now);
        if let Some(cur) = current_cond.filter(|c| c.status == "True") {
            c.last_transition_time = cur.last_transition_time;
        }
        remove(&mut status, "Progressing");
        status.conditions.get_or_insert_with(Vec::new).push(c);
    } else if timed_out(d, &status, now) {
        let message = format!(
            "ReplicaSet \"{}\" has timed out progressing.",
            rs_name.unwrap_or(name)
        );
        set(
            &mut status,
            condition("Progressing", "False", TIMED_OUT, message, now),
        );
    }
    status
}

/// When to look again at a rollout that may run out of time (upstream `requeueStuckDeployment`).
pub fn recheck_after(d: &Deployment, s: &DeploymentStatus, now: Timestamp) -> Option<Duration> {
    let c = get(s, "Progressing")?;
    if !has_progress_deadline(d) || complete(d, s) || timed_out(d, s, now) {
        return None;
    }
    let since = c.last_update_time.as_ref()?.0;
    let deadline = since.checked_add(progress_deadline(d)).ok()?;
    let left = deadline.duration_since(now);
    Some(Duration::from_secs(left.as_secs().max(0) as u64 + 1))
}

/// Upstream `checkPausedConditions`: a paused Deployment says so in Progressing (Unknown), and says
/// it resumed when it is resumed; a timed-out rollout keeps saying that.
pub fn paused_condition(d: &Deployment, now: Timestamp) -> Option<DeploymentStatus> {
    if !has_progress_deadline(d) {
        return None;
    }
    let mut status = d.status.clone().unwrap_or_default();
    let reason = get(&status, "Progressing").and_then(|c| c.reason.clone());
    if reason.as_deref() == Some(TIMED_OUT) {
        return None;
    }
    let paused = d.spec.as_ref().and_then(|s| s.paused) == Some(true);
    let c = match (paused, reason.as_deref() == Some(PAUSED)) {
        (true, false) => condition(
            "Progressing",
            "Unknown",
            PAUSED,
            "Deployment is paused".into(),
            now,
        ),
        (false, true) => condition(
            "Progressing",
            "Unknown",
            RESUMED,
            "Deployment is resumed".into(),
            now,
        ),
        _ => return None,
    };
    set(&mut status, c);
    Some(status)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(status: serde_json::Value) -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "generation": 2},
            "spec": {"replicas": 4, "progressDeadlineSeconds": 60, "selector": {"matchLabels": {"app": "web"}},
                     "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 1}},
                     "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}},
            "status": status,
        }))
        .unwrap()
    }

    fn rs(name: &str, replicas: i32, available: i32) -> ReplicaSet {
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"replicas": replicas, "selector": {}},
            "status": {"replicas": replicas, "readyReplicas": available, "availableReplicas": available}}))
        .unwrap()
    }

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + s).unwrap()
    }

    #[test]
    fn replica_failures_are_carried_over() {
        let d = deployment(json!({"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2}));
        let mut failing = rs("web-b", 4, 2);
        failing.status.as_mut().unwrap().conditions = serde_json::from_value(json!([{
            "type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
            "message": "pods \"x\" is forbidden: exceeded quota", "lastTransitionTime": "2023-11-14T22:13:20Z"}]))
        .unwrap();
        let s = rollout(&d, Some(&failing), &[&failing], at(5));
        let c = get(&s, "ReplicaFailure").expect("carried over");
        assert_eq!(
            (
                c.status.as_str(),
                c.reason.as_deref(),
                c.last_update_time.clone()
            ),
            ("True", Some("FailedCreate"), Some(Time(at(0))))
        );
        let healthy = rs("web-b", 4, 4);
        let recovered = deployment(serde_json::to_value(&s).unwrap());
        let s = rollout(&recovered, Some(&healthy), &[&healthy], at(10));
        assert!(get(&s, "ReplicaFailure").is_none());
    }

    #[test]
    fn progress_refreshes_the_deadline_and_its_absence_times_out() {
        let (old, new) = (rs("web-a", 3, 3), rs("web-b", 2, 1));
        let d = deployment(
            json!({"observedGeneration": 2, "replicas": 4, "updatedReplicas": 1, "availableReplicas": 3,
            "conditions": [{"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated",
                            "lastUpdateTime": "2023-11-14T22:13:20Z", "lastTransitionTime": "2023-11-14T22:13:20Z"}]}),
        );
        // One more updated pod: progress, lastUpdateTime moves, lastTransitionTime stays.
        let s = rollout(&d, Some(&new), &[&old, &new], at(30));
        let c = get(&s, "Progressing").unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_deref()),
            ("True", Some(RS_UPDATED))
        );
        assert_eq!(c.last_update_time, Some(Time(at(30))));
        assert_eq!(c.last_transition_time, Some(Time(at(0))));
        assert_eq!(recheck_after(&d, &s, at(30)), Some(Duration::from_secs(61)));
        // Nothing new 61 s after the last progress: the deadline is exceeded.
        let stuck = deployment(serde_json::to_value(&s).unwrap());
        let s = rollout(&stuck, Some(&new), &[&old, &new], at(91));
        let c = get(&s, "Progressing").unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_deref()),
            ("False", Some(TIMED_OUT))
        );
        assert_eq!(
            c.message.as_deref(),
            Some("ReplicaSet \"web-b\" has timed out progressing.")
        );
        assert_eq!(recheck_after(&stuck, &s, at(91)), None);
    }

    #[test]
    fn a_complete_rollout_says_so_once() {
        let new = rs("web-b", 4, 4);
        let d = deployment(
            json!({"observedGeneration": 2, "replicas": 4, "updatedReplicas": 3, "availableReplicas": 3}),
        );
        let s = rollout(&d, Some(&new), &[&new], at(5));
        let c = get(&s, "Progressing").unwrap();
        assert_eq!(c.reason.as_deref(), Some(NEW_RS_AVAILABLE));
        assert_eq!(
            c.message.as_deref(),
            Some("ReplicaSet \"web-b\" has successfully progressed.")
        );
        assert_eq!(
            get(&s, "Available").unwrap().reason.as_deref(),
            Some("MinimumReplicasAvailable")
        );
        let later = rollout(
            &deployment(serde_json::to_value(&s).unwrap()),
            Some(&new),
            &[&new],
            at(500),
        );
        assert_eq!(
            later, s,
            "a finished rollout's status does not change with time"
        );
    }

    #[test]
    fn pausing_and_resuming_show_in_progressing() {
        let mut d = deployment(
            json!({"conditions": [{"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}]}),
        );
        d.spec.as_mut().unwrap().paused = Some(true);
        let s = paused_condition(&d, at(1)).unwrap();
        let c = get(&s, "Progressing").unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_deref()),
            ("Unknown", Some(PAUSED))
        );
        d.status = Some(s);
        assert!(paused_condition(&d, at(2)).is_none());
        d.spec.as_mut().unwrap().paused = Some(false);
        let s = paused_condition(&d, at(3)).unwrap();
        assert_eq!(
            get(&s, "Progressing").unwrap().reason.as_deref(),
            Some(RESUMED)
        );
    }

    #[test]
    fn unavailable_counts_desired_pods_not_yet_available() {
        let (old, new) = (rs("web-a", 3, 3), rs("web-b", 2, 0));
        let d = deployment(json!({}));
        let s = calculate(&d, Some(&new), &[&old, &new], at(0));
        assert_eq!(
            (
                s.replicas,
                s.updated_replicas,
                s.available_replicas,
                s.unavailable_replicas
            ),
            (Some(5), Some(2), Some(3), Some(2))
        );
        assert_eq!(get(&s, "Available").unwrap().status, "True");
    }
}
