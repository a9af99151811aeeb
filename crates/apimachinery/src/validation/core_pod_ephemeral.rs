//! The `pods/ephemeralcontainers` subresource (upstream `ValidatePodEphemeralContainersUpdate` and
//! `validateEphemeralContainers`): the pod stays valid, static pods take none, existing ephemeral
//! containers may be neither removed nor changed, and each one is a container without ports,
//! resources, probes, lifecycle or restart policy, with a name unique across all of the pod's
//! containers and a target (if any) among its regular or init containers.

use std::collections::HashSet;

use serde_json::{Map, Value};

use super::core_container::{validate_container_common, PodCtx};
use super::core_pod::validate_pod_metadata_and_spec;
use super::field::{ErrorList, FieldError, FieldPath};
use super::json::{diff_paths, get, get_arr, get_obj, is_zero, semantic_eq, str_or_empty};
use super::meta;

/// The annotation of a static pod's mirror (upstream `MirrorPodAnnotationKey`).
const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// `EphemeralContainerCommon` fields an ephemeral container may not set, in upstream's struct
/// order (upstream lists the allowed ones; these are the rest).
const FORBIDDEN_FIELDS: [&str; 8] = [
    "ports",
    "resources",
    "resizePolicy",
    "restartPolicy",
    "livenessProbe",
    "readinessProbe",
    "startupProbe",
    "lifecycle",
];

/// Upstream `validateEphemeralContainers` for `spec.ephemeralContainers`.
pub(crate) fn validate_ephemeral_containers(spec: &Value, path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    let list = get_arr(spec, &["ephemeralContainers"]);
    if list.is_empty() {
        return errs;
    }
    let names = |kind: &str| {
        get_arr(spec, &[kind])
            .iter()
            .map(|c| str_or_empty(c, &["name"]).to_string())
            .collect::<Vec<_>>()
    };
    let others: HashSet<String> = names("containers")
        .into_iter()
        .chain(names("initContainers"))
        .collect();
    let mut all = others.clone();
    let volumes: HashSet<String> = get_arr(spec, &["volumes"])
        .iter()
        .map(|v| str_or_empty(v, &["name"]).to_string())
        .collect();
    let ctx = PodCtx { volumes: &volumes };
    for (i, c) in list.iter().enumerate() {
        let p = path.index(i);
        errs.extend(validate_container_common(c, &ctx, &p));
        let name = str_or_empty(c, &["name"]);
        if !all.insert(name.to_string()) {
            errs.push(FieldError::duplicate(&p.child("name"), name));
        }
        let target = str_or_empty(c, &["targetContainerName"]);
        if !target.is_empty() && !others.contains(target) {
            errs.push(FieldError::not_found(
                &p.child("targetContainerName"),
                target,
            ));
        }
        for f in FORBIDDEN_FIELDS {
            if !is_zero(get(c, &[f])) {
                errs.push(FieldError::forbidden(
                    &p.child(f),
                    "cannot be set for an Ephemeral Container",
                ));
            }
        }
        for (j, m) in get_arr(c, &["volumeMounts"]).iter().enumerate() {
            for f in ["subPath", "subPathExpr"] {
                if !str_or_empty(m, &[f]).is_empty() {
                    errs.push(FieldError::forbidden(
                        &p.child("volumeMounts").index(j).child(f),
                        "cannot be set for an Ephemeral Container",
                    ));
                }
            }
        }
    }
    errs
}

/// Upstream `ValidatePodEphemeralContainersUpdate` of `old` to `new` (the stored pod with the
/// request's ephemeral containers).
pub(crate) fn validate_pod_ephemeral_containers_update(new: &Value, old: &Value) -> ErrorList {
    let mut errs = meta::validate_object_meta_update(new, old, true);
    errs.extend(validate_pod_metadata_and_spec(new));
    let empty = Value::Object(Map::new());
    let spec = get(new, &["spec"]).unwrap_or(&empty);
    let path = FieldPath::root("spec").child("ephemeralContainers");
    errs.extend(validate_ephemeral_containers(spec, &path));
    if get_obj(old, &["metadata", "annotations"]).is_some_and(|a| a.contains_key(MIRROR_ANNOTATION))
    {
        return vec![FieldError::forbidden(
            &FieldPath::root(""),
            "static pods do not support ephemeral containers",
        )];
    }
    let new_list = get_arr(new, &["spec", "ephemeralContainers"]);
    for o in get_arr(old, &["spec", "ephemeralContainers"]) {
        let name = str_or_empty(o, &["name"]);
        match new_list.iter().find(|n| str_or_empty(n, &["name"]) == name) {
            None => errs.push(FieldError::forbidden(
                &path,
                format!("existing ephemeral containers {name:?} may not be removed\n"),
            )),
            Some(n) if !semantic_eq(Some(o), Some(n)) => {
                let mut diff = Vec::new();
                diff_paths(name, Some(o), Some(n), &mut diff);
                errs.push(FieldError::forbidden(
                    &path,
                    format!(
                        "existing ephemeral containers {name:?} may not be changed\n{}",
                        diff.join("\n")
                    ),
                ));
            }
            Some(_) => {}
        }
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(ephemeral: Value) -> Value {
        json!({
            "metadata": {"name": "p", "namespace": "default", "resourceVersion": "1"},
            "spec": {
                "containers": [{"name": "app", "image": "busybox",
                    "terminationMessagePolicy": "File", "imagePullPolicy": "Always"}],
                "initContainers": [{"name": "init", "image": "busybox",
                    "terminationMessagePolicy": "File", "imagePullPolicy": "Always"}],
                "restartPolicy": "Always", "dnsPolicy": "ClusterFirst",
                "terminationGracePeriodSeconds": 30,
                "ephemeralContainers": ephemeral,
            }
        })
    }

    fn debug(name: &str) -> Value {
        json!({"name": name, "image": "busybox", "targetContainerName": "app",
               "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent"})
    }

    fn messages(errs: &ErrorList) -> Vec<String> {
        errs.iter().map(|e| e.to_string()).collect()
    }

    #[test]
    fn an_added_container_is_accepted() {
        let old = pod(json!([]));
        let new = pod(json!([debug("dbg")]));
        assert_eq!(
            messages(&validate_pod_ephemeral_containers_update(&new, &old)),
            Vec::<String>::new()
        );
    }

    #[test]
    fn names_targets_and_forbidden_fields() {
        let mut bad = debug("app");
        bad["targetContainerName"] = json!("nope");
        bad["ports"] = json!([{"containerPort": 80}]);
        bad["readinessProbe"] = json!({"exec": {"command": ["true"]}});
        bad["volumeMounts"] = json!([{"name": "v", "mountPath": "/v", "subPath": "x"}]);
        let mut dup = debug("init");
        dup["resources"] = json!({});
        let mut spec = pod(json!([bad, dup]))["spec"].clone();
        spec["volumes"] = json!([{"name": "v", "emptyDir": {}}]);
        let path = FieldPath::root("spec").child("ephemeralContainers");
        let errs = messages(&validate_ephemeral_containers(&spec, &path));
        let want = [
            "spec.ephemeralContainers[0].name: Duplicate value: \"app\"",
            "spec.ephemeralContainers[0].targetContainerName: Not found: \"nope\"",
            "spec.ephemeralContainers[0].ports: Forbidden: cannot be set for an Ephemeral Container",
            "spec.ephemeralContainers[0].readinessProbe: Forbidden: cannot be set for an Ephemeral Container",
            "spec.ephemeralContainers[0].volumeMounts[0].subPath: Forbidden: cannot be set for an Ephemeral Container",
            "spec.ephemeralContainers[1].name: Duplicate value: \"init\"",
        ];
        for w in want {
            assert!(errs.iter().any(|e| e == w), "{w} not in {errs:#?}");
        }
        // An empty `resources` (what defaulting may leave) is not "set".
        assert!(
            !errs.iter().any(|e| e.contains("[1].resources")),
            "{errs:#?}"
        );
    }

    #[test]
    fn existing_ones_may_not_be_removed_or_changed() {
        let old = pod(json!([debug("a"), debug("b")]));
        let mut changed = debug("b");
        changed["image"] = json!("other");
        let new = pod(json!([changed]));
        let errs = messages(&validate_pod_ephemeral_containers_update(&new, &old));
        assert!(
            errs.iter().any(|e| e.starts_with(
                "spec.ephemeralContainers: Forbidden: existing ephemeral containers \"a\" may not be removed"
            )),
            "{errs:#?}"
        );
        assert!(
            errs.iter().any(|e| e.starts_with(
                "spec.ephemeralContainers: Forbidden: existing ephemeral containers \"b\" may not be changed"
            )),
            "{errs:#?}"
        );
    }

    #[test]
    fn static_pods_take_none() {
        let mut old = pod(json!([]));
        old["metadata"]["annotations"] = json!({MIRROR_ANNOTATION: "x"});
        let mut new = pod(json!([debug("dbg")]));
        new["metadata"]["annotations"] = old["metadata"]["annotations"].clone();
        assert_eq!(
            messages(&validate_pod_ephemeral_containers_update(&new, &old)),
            [": Forbidden: static pods do not support ephemeral containers"]
        );
    }
}
