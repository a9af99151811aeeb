//! The pure part of the resource quota controller (upstream `syncResourceQuota`, `addQuota` and the
//! quota monitor's update filter): which evaluators a quota needs, the status to write, whether it
//! differs from the stored one, and which object changes may free quota.

use std::collections::BTreeSet;

use apimachinery::quota::{self, pods, Evaluator, ResourceList};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, ResourceQuota, Service};

/// `(group, resource)` of an object-count quota name: `count/deployments.apps` -> ("apps",
/// "deployments"), `count/pods` -> ("", "pods"). Resource names have no dots, so the first dot
/// separates the group.
pub fn count_target(name: &str) -> Option<(String, String)> {
    let rest = name.strip_prefix("count/")?;
    if rest.is_empty() {
        return None;
    }
    Some(match rest.split_once('.') {
        Some((resource, group)) => (group.to_string(), resource.to_string()),
        None => (String::new(), rest.to_string()),
    })
}

/// The evaluators that charge at least one of `hard`'s resources: the core ones, plus object
/// counting for every other `count/<resource>.<group>` named (upstream registers one per discovered
/// resource; only the named ones matter). Ignored resources (events, reviews) have none.
pub fn evaluators_for(hard: &[String]) -> Vec<Evaluator> {
    let mut out: Vec<Evaluator> = Evaluator::core();
    let known: BTreeSet<(String, String)> = out
        .iter()
        .map(|e| {
            let (g, r) = e.group_resource();
            (g.to_string(), r.to_string())
        })
        .collect();
    for (group, resource) in hard.iter().filter_map(|n| count_target(n)) {
        if quota::is_ignored(&group, &resource)
            || known.contains(&(group.clone(), resource.clone()))
        {
            continue;
        }
        let e = Evaluator::for_resource(&group, &resource);
        if !out.contains(&e) {
            out.push(e);
        }
    }
    out.retain(|e| !e.matching_resources(hard).is_empty());
    out
}

/// The quota's hard limits; entries that do not parse are left out (and named in the error list).
pub fn hard_limits(q: &ResourceQuota) -> (ResourceList, Vec<String>) {
    let mut hard = ResourceList::new();
    let mut bad = Vec::new();
    for (name, v) in q
        .spec
        .as_ref()
        .and_then(|s| s.hard.as_ref())
        .into_iter()
        .flatten()
    {
        match apimachinery::quantity::Quantity::parse(&v.0) {
            Ok(v) => {
                hard.insert(name.clone(), v);
            }
            Err(e) => bad.push(format!("spec.hard[{name}]: {e}")),
        }
    }
    (hard, bad)
}

fn status_list(q: &ResourceQuota, hard: bool) -> Option<ResourceList> {
    let status = q.status.as_ref()?;
    let list = if hard {
        status.hard.as_ref()?
    } else {
        status.used.as_ref()?
    };
    // A stored value that does not parse counts as absent (and is rewritten).
    Some(
        list.iter()
            .filter_map(|(k, v)| {
                apimachinery::quantity::Quantity::parse(&v.0)
                    .ok()
                    .map(|v| (k.clone(), v))
            })
            .collect(),
    )
}

/// The status to write: `hard` from the spec; `used` is the previous usage overlaid with what was
/// measured now, for the hard resources only (upstream keeps previous values of resources whose
/// measurement failed). Returns `None` when the stored status already says that.
pub fn desired_status(
    q: &ResourceQuota,
    hard: &ResourceList,
    measured: &ResourceList,
) -> Option<(ResourceList, ResourceList)> {
    let previous_hard = status_list(q, true);
    let previous_used = status_list(q, false);
    let mut used = previous_used.clone().unwrap_or_default();
    for (k, v) in measured {
        used.insert(k.clone(), *v);
    }
    let used = quota::mask(&used, &quota::names(hard));
    let dirty = previous_hard
        .as_ref()
        .is_none_or(|h| !quota::equals(h, hard))
        || previous_used
            .as_ref()
            .is_none_or(|u| !quota::equals(u, &used));
    dirty.then_some((hard.clone(), used))
}

/// Whether a quota goes to the priority queue (upstream `addQuota`): its spec changed since the
/// status was computed, or a limit the controller can measure has no usage yet.
pub fn needs_priority(q: &ResourceQuota) -> bool {
    let spec_hard = hard_limits(q).0;
    let Some(status_hard) = status_list(q, true) else {
        return true;
    };
    if !quota::equals(&spec_hard, &status_hard) {
        return true;
    }
    let used = status_list(q, false).unwrap_or_default();
    let missing: Vec<String> = status_hard
        .keys()
        .filter(|k| !used.contains_key(*k))
        .cloned()
        .collect();
    !missing.is_empty() && !evaluators_for(&missing).is_empty()
}

/// Whether a quota tracks something `evaluator` charges (the replenishment filter).
pub fn tracks(q: &ResourceQuota, evaluator: &Evaluator) -> bool {
    let hard = status_list(q, true)
        .map(|h| quota::names(&h))
        .unwrap_or_default();
    !evaluator.matching_resources(&hard).is_empty()
}

/// A pod update frees quota when the pod stops being charged (upstream's update filter).
pub fn pod_update_frees_quota(old: &Pod, new: &Pod, now: jiff::Timestamp) -> bool {
    pods::counts_against_quota(old, now) && !pods::counts_against_quota(new, now)
}

/// A service update changes usage when its quota type (NodePort, LoadBalancer, other) changes.
pub fn service_update_changes_quota(old: &Service, new: &Service) -> bool {
    quota::evaluator::quota_service_type(old) != quota::evaluator::quota_service_type(new)
}

/// A claim update changes usage when its allocated storage changes (upstream
/// `RequiresQuotaReplenish`).
pub fn claim_update_changes_quota(
    old: &PersistentVolumeClaim,
    new: &PersistentVolumeClaim,
) -> bool {
    let allocated = |c: &PersistentVolumeClaim| {
        c.status
            .as_ref()
            .and_then(|s| s.allocated_resources.as_ref())
            .and_then(|r| r.get("storage"))
            .map(|q| q.0.clone())
    };
    allocated(old) != allocated(new)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rq(spec_hard: serde_json::Value, status: serde_json::Value) -> ResourceQuota {
        serde_json::from_value(json!({"metadata": {"name": "q", "namespace": "ns"},
            "spec": {"hard": spec_hard}, "status": status}))
        .expect("quota")
    }

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn list(entries: &[(&str, &str)]) -> ResourceList {
        entries
            .iter()
            .map(|(k, v)| {
                (
                    k.to_string(),
                    apimachinery::quantity::Quantity::parse(v).expect("q"),
                )
            })
            .collect()
    }

    #[test]
    fn count_names_and_evaluators() {
        assert_eq!(
            count_target("count/pods"),
            Some((String::new(), "pods".into()))
        );
        assert_eq!(
            count_target("count/deployments.apps"),
            Some(("apps".into(), "deployments".into()))
        );
        assert_eq!(
            count_target("count/widgets.example.com"),
            Some(("example.com".into(), "widgets".into()))
        );
        assert_eq!(count_target("pods"), None);
        assert_eq!(count_target("count/"), None);
        let got: Vec<(String, String)> = evaluators_for(&names(&[
            "pods",
            "configmaps",
            "count/deployments.apps",
            "count/events",
            "requests.storage",
        ]))
        .iter()
        .map(|e| {
            let (g, r) = e.group_resource();
            (g.to_string(), r.to_string())
        })
        .collect();
        assert_eq!(
            got,
            [
                ("".to_string(), "pods".to_string()),
                ("".into(), "persistentvolumeclaims".into()),
                ("".into(), "configmaps".into()),
                ("apps".into(), "deployments".into()),
            ]
        );
    }

    #[test]
    fn status_to_write() {
        struct Case {
            name: &'static str,
            quota: ResourceQuota,
            measured: ResourceList,
            want: Option<(&'static str, &'static str)>,
        }
        let pp = |l: &ResourceList| quota::pretty_print(l);
        let cases = [
            Case {
                name: "first computation",
                quota: rq(json!({"pods": "10", "secrets": "5"}), json!({})),
                measured: list(&[("pods", "2"), ("secrets", "1"), ("count/pods", "2")]),
                want: Some(("pods=10,secrets=5", "pods=2,secrets=1")),
            },
            Case {
                name: "nothing changed",
                quota: rq(
                    json!({"pods": "10"}),
                    json!({"hard": {"pods": "10"}, "used": {"pods": "2"}}),
                ),
                measured: list(&[("pods", "2")]),
                want: None,
            },
            Case {
                name: "same values in another form",
                quota: rq(
                    json!({"memory": "1Gi"}),
                    json!({"hard": {"memory": "1024Mi"}, "used": {"memory": "0"}}),
                ),
                measured: list(&[("memory", "0")]),
                want: None,
            },
            Case {
                name: "spec changed, usage kept for what was not measured",
                quota: rq(
                    json!({"pods": "20", "configmaps": "3"}),
                    json!({"hard": {"pods": "10", "configmaps": "3"}, "used": {"pods": "4", "configmaps": "1"}}),
                ),
                measured: list(&[("pods", "3")]),
                want: Some(("configmaps=3,pods=20", "configmaps=1,pods=3")),
            },
            Case {
                name: "a dropped limit leaves used",
                quota: rq(
                    json!({"pods": "10"}),
                    json!({"hard": {"pods": "10", "secrets": "2"}, "used": {"pods": "1", "secrets": "1"}}),
                ),
                measured: list(&[("pods", "1")]),
                want: Some(("pods=10", "pods=1")),
            },
        ];
        for c in cases {
            let hard = hard_limits(&c.quota).0;
            let got = desired_status(&c.quota, &hard, &c.measured);
            let got = got.as_ref().map(|(h, u)| (pp(h), pp(u)));
            let want = c.want.map(|(h, u)| (h.to_string(), u.to_string()));
            assert_eq!(got, want, "{}", c.name);
        }
    }

    #[test]
    fn priority_and_replenishment_filters() {
        assert!(needs_priority(&rq(json!({"pods": "1"}), json!({}))));
        assert!(needs_priority(&rq(
            json!({"pods": "2"}),
            json!({"hard": {"pods": "1"}, "used": {"pods": "0"}})
        )));
        assert!(needs_priority(&rq(
            json!({"pods": "1"}),
            json!({"hard": {"pods": "1"}})
        )));
        assert!(!needs_priority(&rq(
            json!({"pods": "1"}),
            json!({"hard": {"pods": "1"}, "used": {"pods": "0"}})
        )));
        let q = rq(
            json!({"pods": "1"}),
            json!({"hard": {"pods": "1"}, "used": {"pods": "0"}}),
        );
        assert!(tracks(&q, &Evaluator::Pods));
        assert!(!tracks(&q, &Evaluator::Services));

        let pod = |v: serde_json::Value| -> Pod { serde_json::from_value(v).expect("pod") };
        let running = pod(json!({"status": {"phase": "Running"}}));
        let done = pod(json!({"status": {"phase": "Succeeded"}}));
        let now = jiff::Timestamp::UNIX_EPOCH;
        assert!(pod_update_frees_quota(&running, &done, now));
        assert!(!pod_update_frees_quota(&done, &done, now));
        assert!(!pod_update_frees_quota(&running, &running, now));
        let svc = |t: &str| -> Service {
            serde_json::from_value(json!({"spec": {"type": t}})).expect("svc")
        };
        assert!(service_update_changes_quota(
            &svc("ClusterIP"),
            &svc("NodePort")
        ));
        assert!(!service_update_changes_quota(
            &svc("ClusterIP"),
            &svc("ExternalName")
        ));
        let claim = |a: Option<&str>| -> PersistentVolumeClaim {
            serde_json::from_value(
                json!({"status": {"allocatedResources": a.map(|a| json!({"storage": a}))}}),
            )
            .expect("claim")
        };
        assert!(claim_update_changes_quota(
            &claim(None),
            &claim(Some("1Gi"))
        ));
        assert!(!claim_update_changes_quota(
            &claim(Some("1Gi")),
            &claim(Some("1Gi"))
        ));
    }
}
