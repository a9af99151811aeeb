//! The `pods/resize` subresource (upstream `ValidatePodResize`, 1.35+ with
//! InPlacePodVerticalScaling GA): only the cpu and memory requests and limits of app containers
//! and sidecars (init containers with `restartPolicy: Always`) may change; the QoS class may not;
//! a request or limit may not be removed; static and Windows pods cannot be resized. Memory limit
//! decreases are allowed whatever the resize policy (1.35 lifted the RestartContainer rule; the
//! kubelet refuses to go below the current usage instead).

use serde_json::{Map, Value};

use super::core_pod::{validate_container_updates, validate_pod_metadata_and_spec};
use super::field::{ErrorList, FieldError, FieldPath};
use super::json::{get, get_arr, get_obj, semantic_eq, str_or_empty};
use super::meta;

/// The annotation of a static pod's mirror (upstream `MirrorPodAnnotationKey`).
const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// The resources a resize may change.
const RESIZABLE: [&str; 2] = ["cpu", "memory"];

fn is_sidecar(c: &Value) -> bool {
    str_or_empty(c, &["restartPolicy"]) == "Always"
}

/// Upstream `ValidatePodResize` on `new` (the stored pod with the request's spec) against `old`.
pub(crate) fn validate_pod_resize(new: &Value, old: &Value) -> ErrorList {
    if get_obj(old, &["metadata", "annotations"]).is_some_and(|a| a.contains_key(MIRROR_ANNOTATION))
    {
        return vec![FieldError::forbidden(
            &FieldPath::root(""),
            "static pods cannot be resized",
        )];
    }
    let mut errs = meta::validate_object_meta_update(new, old, true);
    errs.extend(validate_pod_metadata_and_spec(new));
    let empty = Value::Object(Map::new());
    let ns = get(new, &["spec"]).unwrap_or(&empty);
    let os = get(old, &["spec"]).unwrap_or(&empty);
    let sp = FieldPath::root("spec");
    if str_or_empty(os, &["os", "name"]) == "windows" {
        errs.push(FieldError::forbidden(
            &sp.child("os"),
            "windows pods cannot be resized",
        ));
    }
    for kind in ["containers", "initContainers"] {
        let (e, stop) =
            validate_container_updates(get_arr(ns, &[kind]), get_arr(os, &[kind]), &sp.child(kind));
        errs.extend(e);
        if stop {
            return errs;
        }
        for (i, (n, o)) in get_arr(ns, &[kind])
            .iter()
            .zip(get_arr(os, &[kind]))
            .enumerate()
        {
            if str_or_empty(n, &["name"]) != str_or_empty(o, &["name"]) {
                errs.push(FieldError::forbidden(
                    &sp.child(kind).index(i).child("name"),
                    "containers may not be renamed or reordered on resize",
                ));
            }
        }
    }
    let old_qos = crate::defaults::pod_qos_class(old);
    let new_qos = crate::defaults::pod_qos_class(new);
    if old_qos != new_qos {
        errs.push(FieldError::invalid(
            &sp,
            new_qos,
            "Pod QOS Class may not change as a result of resizing",
        ));
    }
    // Requests and limits may change but not go away (an app container or a sidecar).
    for kind in ["initContainers", "containers"] {
        for (i, (n, o)) in get_arr(ns, &[kind])
            .iter()
            .zip(get_arr(os, &[kind]))
            .enumerate()
        {
            if kind == "initContainers" && !is_sidecar(o) {
                continue;
            }
            for list in ["requests", "limits"] {
                let removed = get_obj(o, &["resources", list]).is_some_and(|old_list| {
                    let new_list = get_obj(n, &["resources", list]);
                    old_list
                        .keys()
                        .any(|k| !new_list.is_some_and(|m| m.contains_key(k)))
                });
                if removed {
                    let what = if list == "requests" {
                        "resource requests cannot be removed"
                    } else {
                        "resource limits cannot be removed"
                    };
                    errs.push(FieldError::forbidden(
                        &sp.child(kind).index(i).child("resources").child(list),
                        what,
                    ));
                }
            }
        }
    }
    // Put the old cpu/memory values back: whatever still differs is a forbidden change.
    let mut munged = ns.clone();
    for kind in ["containers", "initContainers"] {
        let Some(Value::Array(cs)) = munged.get_mut(kind) else {
            continue;
        };
        for (c, o) in cs.iter_mut().zip(get_arr(os, &[kind])) {
            if kind == "initContainers" && !is_sidecar(o) {
                if !semantic_eq(Some(c), Some(o)) {
                    errs.push(FieldError::forbidden(
                        &sp,
                        "resources for non-sidecar init containers are immutable",
                    ));
                }
                continue;
            }
            restore_cpu_memory(c, o);
            if !semantic_eq(Some(c), Some(o)) {
                errs.push(FieldError::forbidden(
                    &sp,
                    "only cpu and memory resources are mutable",
                ));
            }
        }
    }
    if !errs.is_empty() {
        return errs;
    }
    if let (Some(m), Some(o)) = (munged.as_object_mut(), os.as_object()) {
        // The containers were compared above; the rest of the spec may not change at all.
        for kind in ["containers", "initContainers"] {
            match o.get(kind) {
                Some(v) => m.insert(kind.into(), v.clone()),
                None => m.remove(kind),
            };
        }
    }
    if !semantic_eq(Some(&munged), Some(os)) {
        errs.push(FieldError::forbidden(
            &sp,
            "only cpu and memory resources are mutable",
        ));
    }
    errs
}

/// Upstream `dropCPUMemoryResourcesFromContainer`: `c`'s cpu and memory requests and limits
/// become `old`'s (absent where `old` has none).
fn restore_cpu_memory(c: &mut Value, old: &Value) {
    for list in ["requests", "limits"] {
        let old_list = get_obj(old, &["resources", list]);
        let Some(obj) = c.as_object_mut() else {
            return;
        };
        let resources = obj
            .entry("resources")
            .or_insert_with(|| Value::Object(Map::new()));
        let Some(resources) = resources.as_object_mut() else {
            return;
        };
        let entry = resources
            .entry(list)
            .or_insert_with(|| Value::Object(Map::new()));
        let Some(entry) = entry.as_object_mut() else {
            continue;
        };
        for r in RESIZABLE {
            match old_list.and_then(|m| m.get(r)) {
                Some(v) => entry.insert(r.into(), v.clone()),
                None => entry.remove(r),
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(resources: Value) -> Value {
        let mut p = json!({"metadata": {"name": "p", "namespace": "ns", "uid": "u",
            "resourceVersion": "1"},
            "spec": {"containers": [{"name": "c", "image": "busybox", "resources": resources}]}});
        crate::defaults::apply_defaults("", "Pod", &mut p);
        p
    }

    fn details(errs: &ErrorList) -> Vec<String> {
        errs.iter().map(|e| e.to_string()).collect()
    }

    #[test]
    fn cpu_and_memory_may_change_within_the_qos_class() {
        let old = pod(json!({"requests": {"cpu": "100m", "memory": "64Mi"},
            "limits": {"cpu": "200m", "memory": "128Mi"}}));
        let new = pod(json!({"requests": {"cpu": "150m", "memory": "64Mi"},
            "limits": {"cpu": "300m", "memory": "96Mi"}}));
        assert_eq!(
            details(&validate_pod_resize(&new, &old)),
            Vec::<String>::new()
        );
        // A memory limit decrease is allowed (1.35+), whatever the resize policy.
    }

    #[test]
    fn other_resources_and_fields_are_refused() {
        let old = pod(json!({"requests": {"cpu": "100m"}, "limits": {"cpu": "200m"}}));
        let mut new = pod(json!({"requests": {"cpu": "100m"},
            "limits": {"cpu": "200m", "ephemeral-storage": "1Gi"}}));
        let errs = details(&validate_pod_resize(&new, &old));
        assert!(
            errs.iter()
                .any(|e| e.contains("only cpu and memory resources are mutable")),
            "{errs:?}"
        );
        new = pod(json!({"requests": {"cpu": "100m"}, "limits": {"cpu": "200m"}}));
        new["spec"]["containers"][0]["image"] = json!("busybox:2");
        let errs = details(&validate_pod_resize(&new, &old));
        assert!(errs
            .iter()
            .any(|e| e.contains("only cpu and memory resources are mutable")));
        new = pod(json!({"requests": {"cpu": "100m"}, "limits": {"cpu": "200m"}}));
        new["spec"]["activeDeadlineSeconds"] = json!(5);
        let errs = details(&validate_pod_resize(&new, &old));
        assert!(errs
            .iter()
            .any(|e| e.contains("only cpu and memory resources are mutable")));
    }

    #[test]
    fn removals_and_qos_changes_are_refused() {
        let old = pod(json!({"requests": {"cpu": "100m", "memory": "64Mi"},
            "limits": {"cpu": "200m"}}));
        let new = pod(json!({"requests": {"cpu": "100m"}, "limits": {"cpu": "200m"}}));
        let errs = details(&validate_pod_resize(&new, &old));
        assert!(errs.iter().any(|e| e.contains(
            "spec.containers[0].resources.requests: Forbidden: resource requests cannot be removed"
        )));
        let new = pod(json!({"requests": {"cpu": "100m", "memory": "64Mi"}}));
        let errs = details(&validate_pod_resize(&new, &old));
        assert!(errs
            .iter()
            .any(|e| e.contains("resource limits cannot be removed")));
        // Burstable -> Guaranteed.
        let old = pod(json!({"requests": {"cpu": "100m", "memory": "64Mi"},
            "limits": {"cpu": "200m", "memory": "64Mi"}}));
        let new = pod(json!({"requests": {"cpu": "200m", "memory": "64Mi"},
            "limits": {"cpu": "200m", "memory": "64Mi"}}));
        let errs = details(&validate_pod_resize(&new, &old));
        assert!(
            errs.iter().any(|e| e.contains(
                "spec: Invalid value: \"Guaranteed\": Pod QOS Class may not change as a result of resizing"
            )),
            "{errs:?}"
        );
    }

    #[test]
    fn init_containers_sidecars_and_static_pods() {
        let mut old = pod(json!({"requests": {"cpu": "100m"}}));
        old["spec"]["initContainers"] = json!([
            {"name": "init", "image": "busybox", "resources": {"requests": {"cpu": "10m"}}},
            {"name": "side", "image": "busybox", "restartPolicy": "Always",
             "resources": {"requests": {"cpu": "10m"}}}]);
        crate::defaults::apply_defaults("", "Pod", &mut old);
        let mut new = old.clone();
        new["spec"]["initContainers"][1]["resources"]["requests"]["cpu"] = json!("20m");
        assert_eq!(
            details(&validate_pod_resize(&new, &old)),
            Vec::<String>::new()
        );
        new["spec"]["initContainers"][0]["resources"]["requests"]["cpu"] = json!("20m");
        let errs = details(&validate_pod_resize(&new, &old));
        assert!(errs
            .iter()
            .any(|e| e.contains("resources for non-sidecar init containers are immutable")));
        let mut mirror = old.clone();
        mirror["metadata"]["annotations"] = json!({MIRROR_ANNOTATION: "x"});
        let errs = details(&validate_pod_resize(&mirror, &mirror));
        assert!(errs
            .iter()
            .any(|e| e.contains("static pods cannot be resized")));
    }
}
