//! The pure part of the disruption controller (upstream `pkg/controller/disruption`): a
//! PodDisruptionBudget's status from the pods it selects and the scale of their controllers.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// How long an eviction's entry in `disruptedPods` keeps its pod out of the healthy count while the
/// pod is not yet seen deleted (upstream `DeletionTimeout`).
pub const DELETION_TIMEOUT: Duration = Duration::from_secs(120);

/// Upstream `GetScaledValueFromIntOrPercent`.
fn scaled(v: &IntOrString, total: i32, round_up: bool) -> Result<i32, String> {
    match v {
        IntOrString::Int(i) => Ok(*i),
        IntOrString::String(s) => {
            let pct: f64 = s
                .strip_suffix('%')
                .and_then(|p| p.parse().ok())
                .ok_or_else(|| format!("invalid value for IntOrString: invalid type: string is not a percentage: {s:?}"))?;
            let x = pct * f64::from(total) / 100.0;
            Ok((if round_up { x.ceil() } else { x.floor() }) as i32)
        }
    }
}

/// Whether the budget needs the scale of the pods' controllers (upstream: maxUnavailable, or a
/// percentage minAvailable).
pub fn needs_scale(pdb: &PodDisruptionBudget) -> bool {
    let spec = pdb.spec.as_ref();
    spec.and_then(|s| s.max_unavailable.as_ref()).is_some()
        || matches!(
            spec.and_then(|s| s.min_available.as_ref()),
            Some(IntOrString::String(_))
        )
}

/// Upstream `getExpectedPodCount`: (expected pods, desired healthy).
pub fn expected(
    pdb: &PodDisruptionBudget,
    pods: usize,
    scale: Option<i32>,
) -> Result<(i32, i32), String> {
    let spec = pdb.spec.clone().unwrap_or_default();
    if let Some(max) = &spec.max_unavailable {
        let expected = scale.ok_or("no controller scale")?;
        let max = scaled(max, expected, true)?;
        return Ok((expected, (expected - max).max(0)));
    }
    match &spec.min_available {
        Some(IntOrString::Int(min)) => Ok((pods as i32, *min)),
        Some(min) => {
            let expected = scale.ok_or("no controller scale")?;
            Ok((expected, scaled(min, expected, true)?))
        }
        None => Ok((pods as i32, 0)),
    }
}

fn ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Upstream `buildDisruptedPodMap`: evictions still waiting for their pod to be seen deleting, and
/// when the oldest of them expires.
pub fn disrupted(
    pdb: &PodDisruptionBudget,
    pods: &[Arc<Pod>],
    now: Timestamp,
) -> (BTreeMap<String, Time>, Option<Duration>) {
    let listed = pdb
        .status
        .as_ref()
        .and_then(|s| s.disrupted_pods.clone())
        .unwrap_or_default();
    let mut kept = BTreeMap::new();
    let mut recheck: Option<Duration> = None;
    for pod in pods {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let Some(at) = listed.get(&name) else {
            continue;
        };
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let expires = at.0 + DELETION_TIMEOUT;
        if expires <= now {
            continue;
        }
        let left = Duration::try_from(expires.duration_since(now)).unwrap_or_default();
        recheck = Some(recheck.map_or(left, |r| r.min(left)));
        kept.insert(name, at.clone());
    }
    (kept, recheck)
}

/// Upstream `countHealthyPods`: Ready pods not being deleted and not just evicted.
pub fn healthy(pods: &[Arc<Pod>], disrupted: &BTreeMap<String, Time>) -> i32 {
    pods.iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| !disrupted.contains_key(p.metadata.name.as_deref().unwrap_or("")))
        .filter(|p| ready(p))
        .count() as i32
}

/// Upstream `apimeta.SetStatusCondition`: lastTransitionTime changes only with the status.
fn set_condition(conditions: &mut Vec<Condition>, mut new: Condition) {
    if let Some(cur) = conditions.iter_mut().find(|c| c.type_ == new.type_) {
        if cur.status == new.status {
            new.last_transition_time = cur.last_transition_time.clone();
        }
        *cur = new;
    } else {
        conditions.push(new);
    }
}

fn allowed_condition(
    status: &mut PodDisruptionBudgetStatus,
    ok: bool,
    reason: &str,
    message: String,
    now: Timestamp,
) {
    let c = Condition {
        type_: "DisruptionAllowed".into(),
        status: if ok { "True" } else { "False" }.into(),
        reason: reason.into(),
        message,
        observed_generation: status.observed_generation,
        last_transition_time: Time(now),
    };
    set_condition(status.conditions.get_or_insert_with(Vec::new), c);
}

/// The budget's status (upstream `updatePdbStatus` after `trySync`).
pub fn status(
    pdb: &PodDisruptionBudget,
    pods: &[Arc<Pod>],
    expected_healthy: (i32, i32),
    disrupted_pods: BTreeMap<String, Time>,
    now: Timestamp,
) -> PodDisruptionBudgetStatus {
    let (expected, desired) = expected_healthy;
    let current = healthy(pods, &disrupted_pods);
    let allowed = if expected <= 0 {
        0
    } else {
        (current - desired).max(0)
    };
    let mut status = PodDisruptionBudgetStatus {
        current_healthy: Some(current),
        desired_healthy: Some(desired),
        expected_pods: Some(expected),
        disruptions_allowed: Some(allowed),
        disrupted_pods: (!disrupted_pods.is_empty()).then_some(disrupted_pods),
        observed_generation: pdb.metadata.generation,
        conditions: pdb.status.as_ref().and_then(|s| s.conditions.clone()),
    };
    if allowed > 0 {
        allowed_condition(&mut status, true, "SufficientPods", String::new(), now);
    } else {
        allowed_condition(&mut status, false, "InsufficientPods", String::new(), now);
    }
    status
}

/// Upstream `failSafe`: when the status cannot be computed, no disruption is allowed.
pub fn fail_safe(
    pdb: &PodDisruptionBudget,
    error: &str,
    now: Timestamp,
) -> PodDisruptionBudgetStatus {
    let mut status = pdb.status.clone().unwrap_or_default();
    status.disruptions_allowed = Some(0);
    status.observed_generation = pdb.metadata.generation;
    allowed_condition(&mut status, false, "SyncFailed", error.to_string(), now);
    status
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pdb(spec: serde_json::Value) -> PodDisruptionBudget {
        serde_json::from_value(json!({"metadata": {"name": "b", "generation": 2}, "spec": spec}))
            .unwrap()
    }

    fn pod(name: &str, ready: bool) -> Arc<Pod> {
        Arc::new(serde_json::from_value(json!({"metadata": {"name": name},
            "status": {"conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}})).unwrap())
    }

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_767_225_600 + s).unwrap()
    }

    #[test]
    fn budgets_as_upstream() {
        let pods = [pod("a", true), pod("b", true), pod("c", false)];
        // minAvailable 2 of 2 healthy: no disruption.
        let p = pdb(json!({"minAvailable": 2}));
        assert!(!needs_scale(&p));
        let e = expected(&p, pods.len(), None).unwrap();
        assert_eq!(e, (3, 2));
        let s = status(&p, &pods, e, BTreeMap::new(), at(0));
        assert_eq!(
            (
                s.current_healthy,
                s.desired_healthy,
                s.expected_pods,
                s.disruptions_allowed
            ),
            (Some(2), Some(2), Some(3), Some(0))
        );
        let c = &s.conditions.as_ref().unwrap()[0];
        assert_eq!(
            (c.status.as_str(), c.reason.as_str(), c.observed_generation),
            ("False", "InsufficientPods", Some(2))
        );
        // maxUnavailable 50% of a scale of 3: rounds up to 2 unavailable, 1 desired healthy.
        let p = pdb(json!({"maxUnavailable": "50%"}));
        assert!(needs_scale(&p));
        assert!(expected(&p, 3, None).is_err());
        let e = expected(&p, 3, Some(3)).unwrap();
        assert_eq!(e, (3, 1));
        let s = status(&p, &pods, e, BTreeMap::new(), at(0));
        assert_eq!(s.disruptions_allowed, Some(1));
        assert_eq!(s.conditions.as_ref().unwrap()[0].reason, "SufficientPods");
        // minAvailable 50% of 3 rounds up to 2.
        assert_eq!(
            expected(&pdb(json!({"minAvailable": "50%"})), 3, Some(3)).unwrap(),
            (3, 2)
        );
    }

    #[test]
    fn evicted_pods_stay_out_of_the_count_until_deleted_or_expired() {
        let pods = [pod("a", true), pod("b", true)];
        let mut p = pdb(json!({"minAvailable": 1}));
        p.status = Some(PodDisruptionBudgetStatus {
            disrupted_pods: Some(BTreeMap::from([
                ("a".to_string(), Time(at(0))),
                ("gone".to_string(), Time(at(0))),
            ])),
            ..Default::default()
        });
        let (d, recheck) = disrupted(&p, &pods, at(20));
        assert_eq!(d.keys().collect::<Vec<_>>(), ["a"]);
        assert_eq!(recheck, Some(Duration::from_secs(100)));
        assert_eq!(healthy(&pods, &d), 1);
        let (d, _) = disrupted(&p, &pods, at(121));
        assert!(d.is_empty());
        let f = fail_safe(&p, "found no controllers for pod \"a\"", at(0));
        assert_eq!(
            (
                f.disruptions_allowed,
                f.conditions.unwrap()[0].reason.as_str()
            ),
            (Some(0), "SyncFailed")
        );
    }
}
