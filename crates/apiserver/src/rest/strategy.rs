//! Per-resource behaviour on writes (upstream `rest.RESTCreateStrategy`/`RESTUpdateStrategy` of each
//! registry package): what a create resets, what an update may change on the main resource versus its
//! `status`, when `metadata.generation` moves, and defaulting and validation through
//! `apimachinery::{defaults, validation}`.

use apimachinery::resources::Resource;
use serde_json::{json, Map, Value};

use crate::objects;

/// Metadata the server owns: copied from the stored object on every update.
const SERVER_OWNED_META: &[&str] = &[
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "namespace",
    "name",
];

/// Resets what a client may not set on create.
pub fn prepare_for_create(resource: &Resource, obj: &mut Value) {
    let meta = objects::meta_mut(obj);
    for field in [
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "selfLink",
        "resourceVersion",
    ] {
        meta.remove(field);
    }
    if resource.generation {
        meta.insert("generation".into(), 1.into());
    } else {
        meta.remove("generation");
    }
    let status = match (resource.group.as_str(), resource.plural.as_str()) {
        ("", "pods") => {
            let mut s = json!({"phase": "Pending", "qosClass": qos_class(obj)});
            // Upstream `applySchedulingGatedCondition`: a gated pod says why it waits.
            let gated = obj
                .pointer("/spec/schedulingGates")
                .and_then(Value::as_array)
                .is_some_and(|g| !g.is_empty());
            if gated {
                s["conditions"] = json!([{"type": "PodScheduled", "status": "False",
                    "reason": "SchedulingGated",
                    "message": "Scheduling is blocked due to non-empty scheduling gates",
                    "lastProbeTime": null, "lastTransitionTime": objects::now_rfc3339()}]);
            }
            Some(s)
        }
        ("", "namespaces") => Some(json!({"phase": "Active"})),
        ("", "persistentvolumeclaims") | ("", "persistentvolumes") => {
            Some(json!({"phase": "Pending"}))
        }
        // Nodes are registered with their status by the kubelet; custom resources keep theirs too.
        ("", "nodes") => None,
        _ if resource.has_subresource("status") => Some(Value::Null),
        _ => None,
    };
    if let (Some(status), Value::Object(map)) = (status, &mut *obj) {
        if status.is_null() {
            map.remove("status");
        } else {
            map.insert("status".into(), status);
        }
    }
    if is_crd(resource) {
        add_stored_version(obj);
    }
}

fn is_crd(resource: &Resource) -> bool {
    resource.group == "apiextensions.k8s.io" && resource.plural == "customresourcedefinitions"
}

/// Upstream's CRD strategy: the storage version is always among `status.storedVersions`, so that
/// objects written in it can be found again.
fn add_stored_version(crd: &mut Value) {
    let storage = crd["spec"]["versions"]
        .as_array()
        .and_then(|vs| vs.iter().find(|v| v["storage"].as_bool() == Some(true)))
        .and_then(|v| v["name"].as_str())
        .map(str::to_string);
    let Some(storage) = storage else { return };
    if !crd["status"].is_object() {
        crd["status"] = json!({});
    }
    let stored = &mut crd["status"]["storedVersions"];
    if !stored.is_array() {
        *stored = json!([]);
    }
    if let Some(list) = stored.as_array_mut() {
        if !list.iter().any(|v| v == storage.as_str()) {
            list.push(storage.into());
        }
    }
}

/// An update of the main resource: server-owned metadata and (for resources with a status
/// subresource) the status come from the stored object; generation moves when the spec changed.
pub fn prepare_for_update(resource: &Resource, new: &mut Value, old: &Value) {
    copy_server_meta(new, old);
    if resource.has_subresource("status") {
        set_top(new, "status", old.get("status").cloned());
    }
    if is_crd(resource) {
        add_stored_version(new);
    }
    bump_generation(resource, new, old);
    if resource.group.is_empty() && resource.plural == "services" {
        keep_service_allocations(new, old);
    }
}

/// An update that leaves out a Service's allocated address or node ports keeps them (upstream's
/// service REST does the same before validating that they did not change).
fn keep_service_allocations(new: &mut Value, old: &Value) {
    for field in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
        let missing = new
            .pointer(&format!("/spec/{field}"))
            .is_none_or(|v| v.is_null() || v == "");
        if missing {
            if let Some(v) = old.pointer(&format!("/spec/{field}")) {
                new["spec"][field] = v.clone();
            }
        }
    }
    let old_ports = old
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if let Some(ports) = new.pointer_mut("/spec/ports").and_then(Value::as_array_mut) {
        for port in ports {
            if port
                .get("nodePort")
                .is_some_and(|p| p.as_u64().unwrap_or(0) != 0)
            {
                continue;
            }
            let same = old_ports.iter().find(|o| {
                o.get("port") == port.get("port") && o.get("protocol") == port.get("protocol")
            });
            if let Some(node_port) = same.and_then(|o| o.get("nodePort")) {
                port["nodePort"] = node_port.clone();
            }
        }
    }
}

/// A `status` update (upstream's `*StatusStrategy.PrepareForUpdate`). Built-in kinds take the
/// status and the metadata from the request (server-owned metadata excepted, as every update) and
/// everything else (the spec) from the stored object; some reset more (below). Custom resources
/// take only the status (the CR status strategy copies the old object, metadata included).
pub fn prepare_for_status_update(resource: &Resource, custom: bool, new: &mut Value, old: &Value) {
    let status = new.get("status").cloned();
    let mut merged = old.clone();
    set_top(&mut merged, "status", status);
    if custom {
        if let Some(rv) = objects::meta_str(new, "resourceVersion").map(str::to_string) {
            objects::set_meta(&mut merged, "resourceVersion", rv);
        }
        *new = merged;
        return;
    }
    copy_server_meta(new, old);
    set_top(&mut merged, "metadata", new.get("metadata").cloned());
    *new = merged;
    let old_meta = |field: &str| objects::meta(old).and_then(|m| m.get(field)).cloned();
    match (resource.group.as_str(), resource.plural.as_str()) {
        // "status must not modify labels" (deployment, replicaset, statefulset, daemonset).
        ("apps", "deployments" | "replicasets" | "statefulsets" | "daemonsets") => {
            set_meta_field(new, "labels", old_meta("labels"));
        }
        // Old kubelets corrupted owner references; pods/status may not touch them.
        ("", "pods") => set_meta_field(new, "ownerReferences", old_meta("ownerReferences")),
        ("certificates.k8s.io", "certificatesigningrequests") => {
            // Approval is the approval subresource's: Approved/Denied conditions stay as stored.
            for kind in ["Approved", "Denied"] {
                preserve_condition_instances(new, old, kind);
            }
            populate_condition_timestamps(new, old);
        }
        _ => {}
    }
}

/// The CSR `approval` subresource (upstream `csrApprovalStrategy`): only the status conditions
/// (and metadata) change; the spec and the rest of the status stay as stored.
pub fn prepare_for_approval_update(new: &mut Value, old: &Value) {
    let conditions = new.pointer("/status/conditions").cloned();
    copy_server_meta(new, old);
    let mut merged = old.clone();
    set_top(&mut merged, "metadata", new.get("metadata").cloned());
    if !merged["status"].is_object() {
        merged["status"] = json!({});
    }
    match conditions {
        Some(c) => merged["status"]["conditions"] = c,
        None => {
            if let Some(s) = merged["status"].as_object_mut() {
                s.remove("conditions");
            }
        }
    }
    *new = merged;
    populate_condition_timestamps(new, old);
}

fn set_meta_field(obj: &mut Value, field: &str, value: Option<Value>) {
    let meta = objects::meta_mut(obj);
    match value {
        Some(v) => meta.insert(field.to_string(), v),
        None => meta.remove(field),
    };
}

fn conditions(obj: &Value) -> &[Value] {
    obj.pointer("/status/conditions")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// Upstream `preserveConditionInstances`: the stored instances of a condition type replace the
/// request's, when the request has as many (else validation reports the change).
fn preserve_condition_instances(new: &mut Value, old: &Value, kind: &str) {
    let of_kind =
        |c: &[Value]| -> Vec<usize> { (0..c.len()).filter(|i| c[*i]["type"] == kind).collect() };
    let old_conditions = conditions(old).to_vec();
    let old_at = of_kind(&old_conditions);
    let new_at = of_kind(conditions(new));
    if old_at.len() != new_at.len() {
        return;
    }
    if let Some(list) = new
        .pointer_mut("/status/conditions")
        .and_then(Value::as_array_mut)
    {
        for (o, n) in old_at.iter().zip(new_at) {
            list[n] = old_conditions[*o].clone();
        }
    }
}

/// Upstream `populateConditionTimestamps`: a condition without `lastUpdateTime` gets now; one
/// without `lastTransitionTime` keeps that of a stored condition of the same type and status, or
/// gets now.
fn populate_condition_timestamps(new: &mut Value, old: &Value) {
    let now = objects::now_rfc3339();
    let old_conditions = conditions(old).to_vec();
    let Some(list) = new
        .pointer_mut("/status/conditions")
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    let unset = |v: Option<&Value>| v.is_none_or(|v| v.is_null() || v == "");
    for c in list.iter_mut().filter(|c| c.is_object()) {
        if unset(c.get("lastUpdateTime")) {
            c["lastUpdateTime"] = now.clone().into();
        }
        if unset(c.get("lastTransitionTime")) {
            let kept = old_conditions.iter().find(|o| {
                o["type"] == c["type"]
                    && o["status"] == c["status"]
                    && !unset(o.get("lastTransitionTime"))
            });
            c["lastTransitionTime"] =
                kept.map_or_else(|| now.clone().into(), |o| o["lastTransitionTime"].clone());
        }
    }
}

fn copy_server_meta(new: &mut Value, old: &Value) {
    let old_meta = objects::meta(old).cloned().unwrap_or_default();
    let meta = objects::meta_mut(new);
    for field in SERVER_OWNED_META {
        match old_meta.get(*field) {
            Some(v) => meta.insert(field.to_string(), v.clone()),
            None => meta.remove(*field),
        };
    }
}

fn set_top(obj: &mut Value, field: &str, value: Option<Value>) {
    if let Value::Object(map) = obj {
        match value {
            Some(v) => map.insert(field.to_string(), v),
            None => map.remove(field),
        };
    }
}

/// Everything but metadata and status: a change here is a spec change.
fn spec_part(obj: &Value) -> Map<String, Value> {
    obj.as_object()
        .map(|m| {
            m.iter()
                .filter(|(k, _)| {
                    !matches!(k.as_str(), "metadata" | "status" | "apiVersion" | "kind")
                })
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default()
}

fn bump_generation(resource: &Resource, new: &mut Value, old: &Value) {
    if !resource.generation {
        return;
    }
    let old_gen = objects::meta(old)
        .and_then(|m| m.get("generation"))
        .and_then(Value::as_i64)
        .unwrap_or(1);
    // Custom resources: any change outside metadata moves the generation (upstream's
    // customresource strategy), status included when there is no status subresource.
    let changed = if resource.custom {
        let rest = |o: &Value| -> Map<String, Value> {
            o.as_object()
                .map(|m| {
                    m.iter()
                        .filter(|(k, _)| k.as_str() != "metadata")
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect()
                })
                .unwrap_or_default()
        };
        rest(new) != rest(old)
    } else {
        spec_part(new) != spec_part(old)
    };
    objects::set_meta(
        new,
        "generation",
        if changed { old_gen + 1 } else { old_gen },
    );
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

    #[test]
    fn status_and_generation_follow_upstream() {
        let reg = Registry::with_builtin();
        let deploy = reg.get("apps", "v1", "deployments").unwrap();
        let mut d = json!({"metadata": {"name": "web", "generation": 7}, "spec": {"replicas": 1}, "status": {"replicas": 5}});
        prepare_for_create(&deploy, &mut d);
        assert_eq!(d["metadata"]["generation"], 1);
        assert!(d.get("status").is_none());
        let old = json!({"metadata": {"name": "web", "generation": 1, "uid": "u1"}, "spec": {"replicas": 1}, "status": {"replicas": 1}});
        let mut same = json!({"metadata": {"name": "web", "uid": "forged"}, "spec": {"replicas": 1}, "status": {"replicas": 9}});
        prepare_for_update(&deploy, &mut same, &old);
        assert_eq!(same["metadata"]["generation"], 1);
        assert_eq!(same["metadata"]["uid"], "u1");
        assert_eq!(
            same["status"]["replicas"], 1,
            "status ignored on the main resource"
        );
        let mut scaled = json!({"metadata": {"name": "web"}, "spec": {"replicas": 3}});
        prepare_for_update(&deploy, &mut scaled, &old);
        assert_eq!(scaled["metadata"]["generation"], 2);
        let mut status = json!({"metadata": {"name": "web", "resourceVersion": "5"}, "spec": {"replicas": 100}, "status": {"replicas": 2}});
        prepare_for_status_update(&deploy, false, &mut status, &old);
        assert_eq!(status["spec"]["replicas"], 1, "spec ignored on /status");
        assert_eq!(status["status"]["replicas"], 2);
    }

    /// Upstream's built-in status strategies reset the spec only: metadata (annotations, labels)
    /// sent to /status is kept ("should support CronJob/Ingress/CSR API operations" patch
    /// `metadata.annotations` through /status and expect it); workloads keep their stored labels,
    /// pods their owner references, custom resources all their stored metadata.
    #[test]
    fn status_updates_keep_the_requests_metadata_as_upstream() {
        let reg = Registry::with_builtin();
        let cronjobs = reg.get("batch", "v1", "cronjobs").unwrap();
        let old = json!({"metadata": {"name": "c", "uid": "u1", "labels": {"a": "1"}}, "spec": {"schedule": "* * * * *"}});
        let mut new = json!({"metadata": {"name": "c", "uid": "forged", "labels": {"a": "1"}, "annotations": {"patchedstatus": "true"}},
            "spec": {"schedule": "0 0 * * *"}, "status": {"lastScheduleTime": "2026-01-01T00:00:00Z"}});
        prepare_for_status_update(&cronjobs, false, &mut new, &old);
        assert_eq!(new["metadata"]["annotations"]["patchedstatus"], "true");
        assert_eq!(new["metadata"]["uid"], "u1");
        assert_eq!(new["spec"]["schedule"], "* * * * *");
        assert_eq!(new["status"]["lastScheduleTime"], "2026-01-01T00:00:00Z");

        let deploy = reg.get("apps", "v1", "deployments").unwrap();
        let mut new = json!({"metadata": {"name": "c", "labels": {"b": "2"}, "annotations": {"x": "y"}}, "status": {}});
        prepare_for_status_update(&deploy, false, &mut new, &old);
        assert_eq!(new["metadata"]["labels"], json!({"a": "1"}));
        assert_eq!(new["metadata"]["annotations"], json!({"x": "y"}));

        let mut new =
            json!({"metadata": {"name": "c", "annotations": {"x": "y"}}, "status": {"s": 1}});
        prepare_for_status_update(&cronjobs, true, &mut new, &old);
        assert_eq!(
            new["metadata"], old["metadata"],
            "custom resources: only the status"
        );
        assert_eq!(new["status"]["s"], 1);
    }

    /// Upstream's CSR status strategy keeps stored Approved/Denied conditions and fills condition
    /// timestamps; the approval strategy changes only the conditions.
    #[test]
    fn csr_status_and_approval_follow_upstream() {
        let reg = Registry::with_builtin();
        let csrs = reg
            .get("certificates.k8s.io", "v1", "certificatesigningrequests")
            .unwrap();
        let old = json!({"metadata": {"name": "c"}, "spec": {"signerName": "example.com/s"},
            "status": {"conditions": [{"type": "Approved", "status": "True", "reason": "A",
                "lastUpdateTime": "2020-01-01T00:00:00Z", "lastTransitionTime": "2020-01-01T00:00:00Z"}]}});
        let mut new = json!({"metadata": {"name": "c", "annotations": {"a": "b"}}, "spec": {"signerName": "x/y"},
            "status": {"certificate": "Y2VydA==", "conditions": [
                {"type": "Approved", "status": "True", "reason": "changed"},
                {"type": "StatusUpdate", "status": "True", "reason": "E2E"}]}});
        prepare_for_status_update(&csrs, false, &mut new, &old);
        assert_eq!(new["spec"]["signerName"], "example.com/s");
        assert_eq!(new["metadata"]["annotations"]["a"], "b");
        assert_eq!(new["status"]["certificate"], "Y2VydA==");
        assert_eq!(
            new["status"]["conditions"][0],
            old["status"]["conditions"][0]
        );
        assert_eq!(new["status"]["conditions"][1]["type"], "StatusUpdate");
        assert!(new["status"]["conditions"][1]["lastUpdateTime"].is_string());
        assert!(new["status"]["conditions"][1]["lastTransitionTime"].is_string());

        let stored = json!({"metadata": {"name": "c"}, "spec": {"signerName": "example.com/s"},
            "status": {"certificate": "Y2VydA=="}});
        let mut approval = json!({"metadata": {"name": "c", "annotations": {"patchedapproval": "true"}},
            "spec": {"signerName": "x/y"},
            "status": {"certificate": "b3RoZXI=", "conditions": [{"type": "ApprovalPatch", "status": "True", "reason": "e2e"}]}});
        prepare_for_approval_update(&mut approval, &stored);
        assert_eq!(
            approval["metadata"]["annotations"]["patchedapproval"],
            "true"
        );
        assert_eq!(approval["spec"]["signerName"], "example.com/s");
        assert_eq!(approval["status"]["certificate"], "Y2VydA==");
        assert_eq!(approval["status"]["conditions"][0]["type"], "ApprovalPatch");
        assert!(approval["status"]["conditions"][0]["lastTransitionTime"].is_string());
    }

    #[test]
    fn gated_pods_get_the_scheduling_gated_condition() {
        let reg = Registry::with_builtin();
        let pods = reg.get("", "v1", "pods").unwrap();
        let mut gated = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a"}],
            "schedulingGates": [{"name": "example.com/wait"}]}, "status": {"phase": "Running"}});
        prepare_for_create(&pods, &mut gated);
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
        prepare_for_create(&pods, &mut plain);
        assert!(plain["status"].get("conditions").is_none());
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
