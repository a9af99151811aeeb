//! The pure part of the ReplicaSet controller (upstream `replica_set.go` / `controller_utils.go`): which
//! pods a ReplicaSet owns, adopts or releases, how many to create or which to delete, and its status.

use std::cmp::Ordering;
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{json, Value};

/// Upstream's `burstReplicas`: at most this many creates or deletes per sync.
pub const BURST_REPLICAS: usize = 500;

pub fn is_active(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && !matches!(
            pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        )
}

fn controller_uid(pod: &Pod) -> Option<&str> {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))
        .map(|r| r.uid.as_str())
}

fn labels_json(pod: &Pod) -> serde_json::Map<String, Value> {
    pod.metadata
        .labels
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect()
}

/// What the ReplicaSet does with the pods of its namespace.
#[derive(Debug, Default)]
pub struct Claim {
    /// Pods it controls (after adoption) that match its selector.
    pub owned: Vec<Arc<Pod>>,
    /// Orphans matching the selector, to adopt.
    pub adopt: Vec<Arc<Pod>>,
    /// Pods it controls that no longer match, to release.
    pub release: Vec<Arc<Pod>>,
}

/// Upstream `ClaimPods`: owned and matching pods are kept, orphans that match are adopted (not while
/// the ReplicaSet is being deleted), owned ones that stopped matching are released.
pub fn claim(
    rs: &ReplicaSet,
    selector: &apimachinery::labels::Selector,
    pods: &[Arc<Pod>],
) -> Claim {
    let uid = rs.metadata.uid.as_deref().unwrap_or("");
    let deleting = rs.metadata.deletion_timestamp.is_some();
    let mut c = Claim::default();
    for pod in pods {
        let matches = selector.matches(&labels_json(pod));
        match controller_uid(pod) {
            Some(owner) if owner == uid => {
                if matches {
                    c.owned.push(pod.clone());
                } else if is_active(pod) {
                    c.release.push(pod.clone());
                }
            }
            Some(_) => {}
            None if matches && !deleting && is_active(pod) => {
                c.adopt.push(pod.clone());
                c.owned.push(pod.clone());
            }
            None => {}
        }
    }
    c
}

fn ready_since(pod: &Pod) -> Option<Timestamp> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready" && c.status == "True")
        .map(|c| {
            c.last_transition_time
                .as_ref()
                .map_or(Timestamp::UNIX_EPOCH, |t| t.0)
        })
}

fn phase_rank(pod: &Pod) -> u8 {
    match pod.status.as_ref().and_then(|s| s.phase.as_deref()) {
        Some("Pending") | None => 0,
        Some("Running") => 2,
        _ => 1,
    }
}

fn restarts(pod: &Pod) -> i32 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .map_or(0, |c| c.iter().map(|c| c.restart_count).max().unwrap_or(0))
}

/// Upstream `ActivePods` order: the pods to delete first come first — unscheduled, then pending, not
/// ready, ready for less time, more restarts, newer.
pub fn deletion_order(a: &Pod, b: &Pod) -> Ordering {
    let assigned = |p: &Pod| {
        p.spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .is_some_and(|n| !n.is_empty())
    };
    assigned(a)
        .cmp(&assigned(b))
        .then_with(|| phase_rank(a).cmp(&phase_rank(b)))
        .then_with(|| ready_since(a).is_some().cmp(&ready_since(b).is_some()))
        .then_with(|| ready_since(b).cmp(&ready_since(a)))
        .then_with(|| restarts(b).cmp(&restarts(a)))
        .then_with(|| {
            let created = |p: &Pod| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
            created(b).cmp(&created(a))
        })
}

/// The pod a ReplicaSet creates from its template (upstream `GetPodFromTemplate`).
pub fn pod_from_template(rs: &ReplicaSet, kind: super::OwnerKind) -> Value {
    let template = rs.spec.as_ref().and_then(|s| s.template.as_ref());
    let meta = template.and_then(|t| t.metadata.as_ref());
    let name = rs.metadata.name.as_deref().unwrap_or("");
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "generateName": format!("{name}-"),
            "labels": meta.and_then(|m| m.labels.clone()),
            "annotations": meta.and_then(|m| m.annotations.clone()),
            "finalizers": meta.and_then(|m| m.finalizers.clone()),
            "ownerReferences": [{
                "apiVersion": kind.api_version(), "kind": kind.kind, "name": name,
                "uid": rs.metadata.uid, "controller": true, "blockOwnerDeletion": true,
            }],
        },
        "spec": template.and_then(|t| t.spec.clone()),
    })
}

/// The status a ReplicaSet should report, and how long until a ready pod becomes available (to look
/// again then).
/// A ReplicationController as the ReplicaSet it is equivalent to (upstream's `conversion` adapter):
/// its map selector becomes `matchLabels`; everything else has the same shape.
pub fn as_replicaset(rc: &k8s_openapi::api::core::v1::ReplicationController) -> ReplicaSet {
    let mut v = serde_json::to_value(rc).unwrap_or_default();
    if let Some(o) = v.as_object_mut() {
        // k8s-openapi checks apiVersion and kind when they are present.
        o.remove("apiVersion");
        o.remove("kind");
    }
    if let Some(spec) = v.get_mut("spec").and_then(Value::as_object_mut) {
        let selector = spec.remove("selector").unwrap_or(Value::Null);
        spec.insert("selector".into(), json!({ "matchLabels": selector }));
    }
    serde_json::from_value(v).unwrap_or_default()
}

pub fn status(
    rs: &ReplicaSet,
    owned: &[Arc<Pod>],
    now: Timestamp,
) -> (Value, Option<std::time::Duration>) {
    let spec = rs.spec.as_ref();
    let min_ready = spec.and_then(|s| s.min_ready_seconds).unwrap_or(0) as i64;
    let template_labels: serde_json::Map<String, Value> = spec
        .and_then(|s| s.template.as_ref())
        .and_then(|t| t.metadata.as_ref())
        .and_then(|m| m.labels.as_ref())
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    let active: Vec<&Arc<Pod>> = owned.iter().filter(|p| is_active(p)).collect();
    let fully_labeled = active
        .iter()
        .filter(|p| {
            let labels = labels_json(p);
            template_labels
                .iter()
                .all(|(k, v)| labels.get(k) == Some(v))
        })
        .count();
    let mut ready = 0;
    let mut available = 0;
    let mut next: Option<std::time::Duration> = None;
    for p in &active {
        if let Some(since) = ready_since(p) {
            ready += 1;
            let at = since + jiff::SignedDuration::from_secs(min_ready);
            if min_ready == 0 || at <= now {
                available += 1;
            } else if let Ok(wait) = std::time::Duration::try_from(at.duration_since(now)) {
                next = Some(next.map_or(wait, |n| n.min(wait)));
            }
        }
    }
    let status = json!({
        "replicas": active.len(),
        "fullyLabeledReplicas": fully_labeled,
        "readyReplicas": ready,
        "availableReplicas": available,
        "observedGeneration": rs.metadata.generation.unwrap_or(0),
    });
    (status, next)
}

/// The status conditions after a sync, when they change (upstream `calculateStatus`): a
/// `ReplicaFailure` condition (reason FailedCreate or FailedDelete, the error as message) is added
/// when managing the replicas failed and none is present, and removed once a sync succeeds.
pub fn replica_failure_conditions(
    rs: &ReplicaSet,
    failure: Option<&(&str, String)>,
    now: Timestamp,
) -> Option<Value> {
    let current: Vec<Value> = rs
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .map(|c| {
            c.iter()
                .filter_map(|c| serde_json::to_value(c).ok())
                .collect()
        })
        .unwrap_or_default();
    let is_failure = |c: &Value| c.get("type").and_then(Value::as_str) == Some("ReplicaFailure");
    let present = current.iter().any(is_failure);
    match (failure, present) {
        (Some((reason, message)), false) => {
            let mut out = current;
            out.push(json!({
                "type": "ReplicaFailure",
                "status": "True",
                "lastTransitionTime": now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
                "reason": reason,
                "message": message,
            }));
            Some(Value::Array(out))
        }
        (None, true) => Some(Value::Array(
            current.into_iter().filter(|c| !is_failure(c)).collect(),
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replica_failure_condition_comes_and_goes() {
        let now: Timestamp = "2026-01-01T00:00:00Z".parse().expect("time");
        let plain = rs();
        let failing = (
            "FailedCreate",
            "pods \"x\" is forbidden: exceeded quota".to_string(),
        );
        let added = replica_failure_conditions(&plain, Some(&failing), now).expect("added");
        assert_eq!(
            added,
            json!([{"type": "ReplicaFailure", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z",
                "reason": "FailedCreate", "message": "pods \"x\" is forbidden: exceeded quota"}])
        );
        let mut failed = plain.clone();
        failed.status = serde_json::from_value(json!({"replicas": 1, "conditions": added})).ok();
        assert_eq!(
            replica_failure_conditions(&failed, Some(&failing), now),
            None
        );
        assert_eq!(
            replica_failure_conditions(&failed, None, now),
            Some(json!([]))
        );
        assert_eq!(replica_failure_conditions(&plain, None, now), None);
    }

    fn rs() -> ReplicaSet {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "default", "uid": "rs-1", "generation": 3},
            "spec": {"replicas": 2, "minReadySeconds": 10, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web", "tier": "fe"}},
                                  "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}
        }))
        .unwrap()
    }

    fn pod(name: &str, extra: Value) -> Arc<Pod> {
        let mut v = json!({"metadata": {"name": name, "namespace": "default", "labels": {"app": "web", "tier": "fe"},
                                        "creationTimestamp": "2026-01-01T00:00:00Z"},
                           "spec": {"containers": [{"name": "c"}]}, "status": {"phase": "Pending"}});
        merge(&mut v, extra);
        Arc::new(serde_json::from_value(v).unwrap())
    }

    fn merge(a: &mut Value, b: Value) {
        match (a, b) {
            (Value::Object(a), Value::Object(b)) => {
                for (k, v) in b {
                    merge(a.entry(k).or_insert(Value::Null), v);
                }
            }
            (a, b) => *a = b,
        }
    }

    fn owned_by(uid: &str) -> Value {
        json!({"metadata": {"ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "x", "uid": uid, "controller": true}]}})
    }

    #[test]
    fn claims_adopt_orphans_and_release_strays() {
        let selector = apimachinery::labels::selector_from_label_selector(
            &json!({"matchLabels": {"app": "web"}}),
        )
        .unwrap();
        let pods = vec![
            pod("mine", owned_by("rs-1")),
            pod("orphan", json!({})),
            pod("other-owner", owned_by("rs-2")),
            pod("stray", {
                let mut v = owned_by("rs-1");
                v["metadata"]["labels"] = json!({"app": "db"});
                v
            }),
            pod("unrelated", json!({"metadata": {"labels": {"app": "db"}}})),
        ];
        let c = claim(&rs(), &selector, &pods);
        let names = |v: &[Arc<Pod>]| {
            v.iter()
                .map(|p| p.metadata.name.clone().unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&c.owned), ["mine", "orphan"]);
        assert_eq!(names(&c.adopt), ["orphan"]);
        assert_eq!(names(&c.release), ["stray"]);
    }

    #[test]
    fn deletion_prefers_unscheduled_pending_unready_newer_pods() {
        let running_ready = pod(
            "a",
            json!({"spec": {"nodeName": "n"}, "status": {"phase": "Running",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}),
        );
        let running_unready = pod(
            "b",
            json!({"spec": {"nodeName": "n"}, "status": {"phase": "Running"}}),
        );
        let pending = pod("c", json!({"spec": {"nodeName": "n"}}));
        let unscheduled = pod("d", json!({}));
        let newer_ready = pod(
            "e",
            json!({"metadata": {"creationTimestamp": "2026-01-02T00:00:00Z"}, "spec": {"nodeName": "n"},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-03T00:00:00Z"}]}}),
        );
        let mut all = [
            running_ready,
            newer_ready,
            running_unready,
            pending,
            unscheduled,
        ];
        all.sort_by(|a, b| deletion_order(a, b));
        let order: Vec<_> = all
            .iter()
            .map(|p| p.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(order, ["d", "c", "b", "e", "a"]);
    }

    #[test]
    fn status_counts_ready_and_available_pods() {
        let now: Timestamp = "2026-01-01T00:01:00Z".parse().unwrap();
        let ready_long = pod(
            "a",
            json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}),
        );
        let ready_just = pod(
            "b",
            json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:55Z"}]}}),
        );
        let mislabeled = pod(
            "c",
            json!({"metadata": {"labels": {"app": "web", "tier": "be"}}}),
        );
        let gone = pod(
            "d",
            json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:50Z"}}),
        );
        let (s, next) = status(&rs(), &[ready_long, ready_just, mislabeled, gone], now);
        assert_eq!(
            s,
            json!({"replicas": 3, "fullyLabeledReplicas": 2, "readyReplicas": 2, "availableReplicas": 1, "observedGeneration": 3})
        );
        assert_eq!(next, Some(std::time::Duration::from_secs(5)));
        let p = pod_from_template(&rs(), super::super::REPLICA_SET);
        assert_eq!(p["metadata"]["generateName"], "web-");
        assert_eq!(p["metadata"]["ownerReferences"][0]["controller"], true);
        assert_eq!(p["metadata"]["labels"]["tier"], "fe");
    }

    #[test]
    fn a_replication_controller_is_seen_as_a_replicaset() {
        let rc: k8s_openapi::api::core::v1::ReplicationController = serde_json::from_value(json!({
            "metadata": {"name": "web", "uid": "rc-1"},
            "spec": {"replicas": 3, "selector": {"app": "web"},
                     "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c"}]}}},
            "status": {"replicas": 2, "readyReplicas": 1}
        }))
        .unwrap();
        let rs = as_replicaset(&rc);
        let spec = rs.spec.as_ref().unwrap();
        assert_eq!(spec.replicas, Some(3));
        assert_eq!(
            serde_json::to_value(&spec.selector).unwrap(),
            json!({"matchLabels": {"app": "web"}})
        );
        assert_eq!(rs.status.as_ref().unwrap().ready_replicas, Some(1));
        let pod = pod_from_template(&rs, super::super::REPLICATION_CONTROLLER);
        assert_eq!(
            pod["metadata"]["ownerReferences"][0]["kind"],
            "ReplicationController"
        );
        assert_eq!(pod["metadata"]["ownerReferences"][0]["apiVersion"], "v1");
    }
}
