//! Pods (upstream `pkg/registry/core/pod`): created `Pending` with their QoS class; deleted
//! gracefully once scheduled; `pods/status` may not touch owner references; `ephemeralcontainers`
//! and `resize` change only the spec. The `binding` and `eviction` subresources are in
//! [`binding`] and [`eviction`].

pub mod binding;
pub mod ephemeral;
pub mod eviction;

use apimachinery::resources::Resource;
use serde_json::{json, Map, Value};

use crate::objects;
use crate::registry::{generic, Strategy};

pub struct PodStrategy;

impl Strategy for PodStrategy {
    fn prepare_for_create(&self, resource: &Resource, obj: &mut Value) {
        generic::prepare_meta_for_create(resource, obj);
        let mut status = json!({"phase": "Pending", "qosClass": qos_class(obj)});
        // Upstream `applySchedulingGatedCondition`: a gated pod says why it waits.
        let gated = obj
            .pointer("/spec/schedulingGates")
            .and_then(Value::as_array)
            .is_some_and(|g| !g.is_empty());
        if gated {
            status["conditions"] = json!([{"type": "PodScheduled", "status": "False",
                "reason": "SchedulingGated",
                "message": "Scheduling is blocked due to non-empty scheduling gates",
                "lastProbeTime": null, "lastTransitionTime": objects::now_rfc3339()}]);
        }
        generic::set_top(obj, "status", Some(status));
    }

    fn prepare_for_status_update(&self, _resource: &Resource, new: &mut Value, old: &Value) {
        generic::prepare_for_status_update(new, old);
        // Old kubelets corrupted owner references; pods/status may not touch them.
        generic::set_meta_field(
            new,
            "ownerReferences",
            generic::old_meta(old, "ownerReferences"),
        );
    }

    /// Upstream's graceful deletion: only once scheduled and not finished; an explicit
    /// `gracePeriodSeconds` wins over the pod's `terminationGracePeriodSeconds`.
    fn grace_period(&self, obj: &Value, requested: Option<i64>) -> i64 {
        let scheduled = obj
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .is_some_and(|n| !n.is_empty());
        let finished = matches!(
            obj.pointer("/status/phase").and_then(Value::as_str),
            Some("Succeeded" | "Failed")
        );
        if !scheduled || finished {
            return 0;
        }
        let grace = requested
            .or_else(|| {
                obj.pointer("/spec/terminationGracePeriodSeconds")
                    .and_then(Value::as_i64)
            })
            .unwrap_or(30);
        // 0 deletes at once (`kubectl delete --grace-period=0 --force`).
        grace.max(0)
    }
}

/// `resize`: the spec from the request, everything else as stored; the generation moves when the
/// spec changed (upstream's pod resize strategy; `ephemeralcontainers`: see [`ephemeral`]).
pub fn prepare_for_spec_subresource(new: &Value, old: &Value) -> Value {
    let mut merged = old.clone();
    merged["spec"] = new.get("spec").cloned().unwrap_or(Value::Null);
    if merged.get("spec") != old.get("spec") {
        let generation = objects::meta(old)
            .and_then(|m| m.get("generation"))
            .and_then(Value::as_i64)
            .unwrap_or(1);
        objects::set_meta(&mut merged, "generation", json!(generation + 1));
    }
    merged
}

/// Replaces the pod's condition of the same type.
pub fn add_condition(pod: &mut Value, condition: Value) {
    let kind = condition["type"].clone();
    let conditions = pod["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut conditions: Vec<Value> = conditions
        .into_iter()
        .filter(|c| c["type"] != kind)
        .collect();
    conditions.push(condition);
    pod["status"]["conditions"] = Value::Array(conditions);
}

/// Upstream's `qos.GetPodQOS`: Guaranteed when every container has equal, non-zero cpu and memory
/// requests and limits; BestEffort when none has any; Burstable otherwise.
pub fn qos_class(pod: &Value) -> &'static str {
    let mut containers: Vec<&Value> = Vec::new();
    for list in ["containers", "initContainers"] {
        if let Some(cs) = pod
            .pointer(&format!("/spec/{list}"))
            .and_then(Value::as_array)
        {
            containers.extend(cs);
        }
    }
    let mut any = false;
    let mut guaranteed = !containers.is_empty();
    for c in containers {
        let requests = c.pointer("/resources/requests").and_then(Value::as_object);
        let limits = c.pointer("/resources/limits").and_then(Value::as_object);
        let nonzero = |m: Option<&Map<String, Value>>, r: &str| {
            m.and_then(|m| m.get(r))
                .and_then(Value::as_str)
                .is_some_and(|q| !is_zero_quantity(q))
        };
        for r in ["cpu", "memory"] {
            if nonzero(requests, r) || nonzero(limits, r) {
                any = true;
            }
            // Requests default to limits, so a limit alone counts as an equal request.
            let limit = limits.and_then(|m| m.get(r));
            let request = requests.and_then(|m| m.get(r)).or(limit);
            if !nonzero(limits, r) || request != limit {
                guaranteed = false;
            }
        }
    }
    if !any {
        "BestEffort"
    } else if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

fn is_zero_quantity(q: &str) -> bool {
    let digits: String = q
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    digits.parse::<f64>().map(|n| n == 0.0).unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use apimachinery::resources::Registry;

    fn pods() -> Resource {
        Resource::clone(&Registry::with_builtin().get("", "v1", "pods").unwrap())
    }

    #[test]
    fn gated_pods_get_the_scheduling_gated_condition() {
        let pods = pods();
        let mut gated = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a"}],
            "schedulingGates": [{"name": "example.com/wait"}]}, "status": {"phase": "Running"}});
        PodStrategy.prepare_for_create(&pods, &mut gated);
        assert_eq!(gated["status"]["phase"], "Pending");
        let c = &gated["status"]["conditions"][0];
        assert_eq!(
            (
                c["type"].as_str(),
                c["status"].as_str(),
                c["reason"].as_str()
            ),
            (Some("PodScheduled"), Some("False"), Some("SchedulingGated"))
        );
        assert_eq!(
            c["message"],
            "Scheduling is blocked due to non-empty scheduling gates"
        );
        let mut plain = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a"}], "schedulingGates": []}});
        PodStrategy.prepare_for_create(&pods, &mut plain);
        assert!(plain["status"].get("conditions").is_none());
    }

    #[test]
    fn pod_status_updates_keep_spec_and_owner_references() {
        let pods = pods();
        let old = json!({"metadata": {"name": "p", "uid": "u", "ownerReferences": [{"uid": "rs"}]},
            "spec": {"nodeName": "n1"}, "status": {"phase": "Pending"}});
        let mut new = json!({"metadata": {"name": "p", "ownerReferences": [], "labels": {"l": "v"}},
            "spec": {"nodeName": "other"}, "status": {"phase": "Running"}});
        PodStrategy.prepare_for_status_update(&pods, &mut new, &old);
        assert_eq!(new["status"]["phase"], "Running");
        assert_eq!(new["spec"]["nodeName"], "n1");
        assert_eq!(new["metadata"]["ownerReferences"], json!([{"uid": "rs"}]));
        assert_eq!(new["metadata"]["labels"]["l"], "v");
        // The main resource ignores the status (pods have a status subresource).
        let mut main = json!({"metadata": {"name": "p"}, "spec": {"nodeName": "n1"}, "status": {"phase": "Failed"}});
        PodStrategy.prepare_for_update(&pods, &mut main, &old);
        assert_eq!(main["status"]["phase"], "Pending");
    }

    #[test]
    fn grace_periods_follow_upstream() {
        let unscheduled = json!({"spec": {}});
        assert_eq!(PodStrategy.grace_period(&unscheduled, Some(10)), 0);
        let running = json!({"spec": {"nodeName": "n", "terminationGracePeriodSeconds": 5}});
        assert_eq!(PodStrategy.grace_period(&running, None), 5);
        assert_eq!(PodStrategy.grace_period(&running, Some(2)), 2);
        assert_eq!(PodStrategy.grace_period(&running, Some(-1)), 0);
        let done = json!({"spec": {"nodeName": "n"}, "status": {"phase": "Succeeded"}});
        assert_eq!(PodStrategy.grace_period(&done, None), 0);
    }

    #[test]
    fn spec_subresources_change_only_the_spec() {
        let old = json!({"metadata": {"name": "p", "labels": {"a": "b"}}, "spec": {"x": 1}, "status": {"phase": "Running"}});
        let new = json!({"metadata": {"name": "p"}, "spec": {"x": 2}, "status": {}});
        let merged = prepare_for_spec_subresource(&new, &old);
        assert_eq!(merged["spec"]["x"], 2);
        assert_eq!(merged["metadata"]["generation"], 2);
        let same = prepare_for_spec_subresource(&old, &old);
        assert!(same["metadata"].get("generation").is_none());
        assert_eq!(merged["status"]["phase"], "Running");
        assert_eq!(merged["metadata"]["labels"]["a"], "b");
    }

    #[test]
    fn pod_qos_classes() {
        let besteffort = json!({"spec": {"containers": [{"name": "a"}]}});
        assert_eq!(qos_class(&besteffort), "BestEffort");
        let guaranteed = json!({"spec": {"containers": [{"resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}});
        assert_eq!(qos_class(&guaranteed), "Guaranteed");
        let burstable =
            json!({"spec": {"containers": [{"resources": {"requests": {"cpu": "100m"}}}]}});
        assert_eq!(qos_class(&burstable), "Burstable");
    }
}
