//! Pods, pod specs and pod templates (upstream `pkg/apis/core/validation/validation.go`:
//! `ValidatePodSpec`, `ValidatePodCreate`, `ValidatePodUpdate`, `ValidatePodTemplateSpec`). Containers,
//! volumes and scheduling constraints are in `core_container`, `core_volume` and `core_scheduling`.
//!
//! Deliberately different: the update diff after "pod updates may not change fields other than ..." lists the
//! changed JSON paths instead of a Go `cmp.Diff`.

use std::collections::HashSet;

use serde_json::{Map, Value};

use super::core_container::{validate_containers, validate_init_containers, PodCtx};
use super::core_scheduling::{validate_affinity, validate_tolerations, validate_topology_spread};
use super::core_volume::validate_volumes;
use super::field::{ErrorList, FieldError, FieldPath};
use super::json::{diff_paths, get, get_arr, get_int, get_obj, get_str, semantic_eq, str_or_empty};
use super::meta::{self, validate_annotations, validate_labels, NameRule};
use super::names;

const MAX_INT32: i64 = i32::MAX as i64;

fn validate_pod_security_context(spec: &Value, path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    let sp = path.child("securityContext");
    if let Some(sc) = get(spec, &["securityContext"]) {
        for f in ["fsGroup", "runAsUser", "runAsGroup"] {
            if let Some(id) = get_int(sc, &[f]) {
                errs.extend(
                    names::is_valid_id(id)
                        .into_iter()
                        .map(|m| FieldError::invalid(&sp.child(f), id, m)),
                );
            }
        }
        for (g, gid) in get_arr(sc, &["supplementalGroups"]).iter().enumerate() {
            let gid = super::json::as_int(gid).unwrap_or(-1);
            errs.extend(
                names::is_valid_id(gid)
                    .into_iter()
                    .map(|m| FieldError::invalid(&sp.child("supplementalGroups").index(g), gid, m)),
            );
        }
        if let Some(p) = get_str(sc, &["fsGroupChangePolicy"]) {
            if p != "Always" && p != "OnRootMismatch" {
                errs.push(FieldError::not_supported(
                    &sp.child("fsGroupChangePolicy"),
                    p,
                    &["Always", "OnRootMismatch"],
                ));
            }
        }
    }
    errs.extend(super::core_sysctl::validate_sysctls(spec, path));
    if get(spec, &["shareProcessNamespace"]).and_then(Value::as_bool) == Some(true)
        && get(spec, &["hostPID"]).and_then(Value::as_bool) == Some(true)
    {
        errs.push(FieldError::invalid(
            &sp.child("shareProcessNamespace"),
            true,
            "ShareProcessNamespace and HostPID cannot both be enabled",
        ));
    }
    errs
}

fn validate_dns(spec: &Value, path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    let policy = str_or_empty(spec, &["dnsPolicy"]);
    match policy {
        "ClusterFirstWithHostNet" | "ClusterFirst" | "Default" | "None" => {}
        "" => errs.push(FieldError::required(&path.child("dnsPolicy"), "")),
        other => errs.push(FieldError::not_supported(
            &path.child("dnsPolicy"),
            other,
            &["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"],
        )),
    }
    let cp = path.child("dnsConfig");
    let config = get(spec, &["dnsConfig"]);
    if policy == "None" {
        match config {
            None => {
                return [
                    errs,
                    vec![FieldError::required(
                        &cp,
                        "must provide `dnsConfig` when `dnsPolicy` is None",
                    )],
                ]
                .concat()
            }
            Some(c) if get_arr(c, &["nameservers"]).is_empty() => {
                errs.push(FieldError::required(
                    &cp.child("nameservers"),
                    "must provide at least one DNS nameserver when `dnsPolicy` is None",
                ));
                return errs;
            }
            _ => {}
        }
    }
    if let Some(c) = config {
        let ns = get_arr(c, &["nameservers"]);
        if ns.len() > 3 {
            errs.push(FieldError::invalid(
                &cp.child("nameservers"),
                Value::from(ns.to_vec()),
                "must not have more than 3 nameservers",
            ));
        }
        for (i, ip) in ns.iter().enumerate() {
            let ip = ip.as_str().unwrap_or("");
            errs.extend(
                names::ip_errors(ip)
                    .into_iter()
                    .map(|m| FieldError::invalid(&cp.child("nameservers").index(i), ip, m)),
            );
        }
        let searches = get_arr(c, &["searches"]);
        if searches.len() > 32 {
            errs.push(FieldError::invalid(
                &cp.child("searches"),
                Value::from(searches.to_vec()),
                "must not have more than 32 search paths",
            ));
        }
        for (i, s) in searches.iter().enumerate() {
            let s = s.as_str().unwrap_or("").trim_end_matches('.');
            errs.extend(
                names::is_dns1123_subdomain(s)
                    .into_iter()
                    .map(|m| FieldError::invalid(&cp.child("searches").index(i), s, m)),
            );
        }
        for (i, o) in get_arr(c, &["options"]).iter().enumerate() {
            if str_or_empty(o, &["name"]).is_empty() {
                errs.push(FieldError::required(
                    &cp.child("options").index(i),
                    "must not be empty",
                ));
            }
        }
    }
    errs
}

/// Upstream's `ValidatePodSpec`. `is_pod` is upstream's `opts.ResourceIsPod`.
pub(crate) fn validate_pod_spec(spec: &Value, path: &FieldPath, is_pod: bool) -> ErrorList {
    let mut errs = ErrorList::new();
    if get(spec, &["terminationGracePeriodSeconds"]).is_none() {
        errs.push(FieldError::required(
            &path.child("terminationGracePeriodSeconds"),
            "",
        ));
    }
    let (volumes, verrs) = validate_volumes(spec, &path.child("volumes"));
    errs.extend(verrs);
    let ctx = PodCtx { volumes: &volumes };
    errs.extend(validate_containers(spec, &ctx, &path.child("containers")));
    errs.extend(validate_init_containers(
        spec,
        &ctx,
        &path.child("initContainers"),
    ));
    if get(spec, &["hostNetwork"]).and_then(Value::as_bool) == Some(true) {
        for (i, c) in get_arr(spec, &["containers"]).iter().enumerate() {
            for (j, p) in get_arr(c, &["ports"]).iter().enumerate() {
                let (hp, cp) = (
                    get_int(p, &["hostPort"]).unwrap_or(0),
                    get_int(p, &["containerPort"]).unwrap_or(0),
                );
                if (is_pod || hp != 0) && hp != cp {
                    errs.push(FieldError::invalid(
                        &path
                            .child("containers")
                            .index(i)
                            .child("ports")
                            .index(j)
                            .child("hostPort"),
                        hp,
                        "must match `containerPort` when `hostNetwork` is true",
                    ));
                }
            }
        }
    }
    match str_or_empty(spec, &["restartPolicy"]) {
        "Always" | "OnFailure" | "Never" => {}
        "" => errs.push(FieldError::required(&path.child("restartPolicy"), "")),
        other => errs.push(FieldError::not_supported(
            &path.child("restartPolicy"),
            other,
            &["Always", "OnFailure", "Never"],
        )),
    }
    errs.extend(validate_dns(spec, path));
    errs.extend(validate_labels(
        get(spec, &["nodeSelector"]),
        &path.child("nodeSelector"),
    ));
    errs.extend(validate_pod_security_context(spec, path));
    for (i, s) in get_arr(spec, &["imagePullSecrets"]).iter().enumerate() {
        if s.as_object().is_some_and(|m| m.keys().any(|k| k != "name")) {
            errs.push(FieldError::invalid(
                &path.child("imagePullSecrets").index(i),
                s.clone(),
                "only name may be set",
            ));
        }
    }
    if let Some(aff) = get(spec, &["affinity"]) {
        errs.extend(validate_affinity(aff, &path.child("affinity")));
    }
    for (i, g) in get_arr(spec, &["readinessGates"]).iter().enumerate() {
        let p = path.child("readinessGates").index(i).child("conditionType");
        let t = str_or_empty(g, &["conditionType"]);
        errs.extend(
            names::is_qualified_name(t)
                .into_iter()
                .map(|m| FieldError::invalid(&p, t, m)),
        );
    }
    let mut gates = HashSet::new();
    for (i, g) in get_arr(spec, &["schedulingGates"]).iter().enumerate() {
        let p = path.child("schedulingGates").index(i);
        let n = str_or_empty(g, &["name"]);
        errs.extend(
            names::is_qualified_name(n)
                .into_iter()
                .map(|m| FieldError::invalid(&p, n, m)),
        );
        if !gates.insert(n.to_string()) {
            errs.push(FieldError::duplicate(&p, n));
        }
    }
    errs.extend(validate_topology_spread(
        spec,
        &path.child("topologySpreadConstraints"),
    ));
    for (key, rule) in [
        ("serviceAccountName", NameRule::Subdomain),
        ("nodeName", NameRule::Subdomain),
    ] {
        if let Some(v) = get_str(spec, &[key]).filter(|s| !s.is_empty()) {
            errs.extend(
                rule.check(v, false)
                    .into_iter()
                    .map(|m| FieldError::invalid(&path.child(key), v, m)),
            );
        }
    }
    if let Some(v) = get_int(spec, &["activeDeadlineSeconds"]) {
        if !(1..=MAX_INT32).contains(&v) {
            errs.push(FieldError::invalid(
                &path.child("activeDeadlineSeconds"),
                v,
                names::inclusive_range_error(1, MAX_INT32),
            ));
        }
    }
    for key in ["hostname", "subdomain"] {
        if let Some(v) = get_str(spec, &[key]).filter(|s| !s.is_empty()) {
            errs.extend(
                names::is_dns1123_label(v)
                    .into_iter()
                    .map(|m| FieldError::invalid(&path.child(key), v, m)),
            );
        }
    }
    errs.extend(validate_tolerations(
        get_arr(spec, &["tolerations"]),
        &path.child("tolerations"),
    ));
    for (i, ha) in get_arr(spec, &["hostAliases"]).iter().enumerate() {
        let p = path.child("hostAliases").index(i);
        let ip = str_or_empty(ha, &["ip"]);
        errs.extend(
            names::ip_errors(ip)
                .into_iter()
                .map(|m| FieldError::invalid(&p.child("ip"), ip, m)),
        );
        for (j, h) in get_arr(ha, &["hostnames"]).iter().enumerate() {
            let h = h.as_str().unwrap_or("");
            errs.extend(
                names::is_dns1123_subdomain(h)
                    .into_iter()
                    .map(|m| FieldError::invalid(&p.child("hostnames").index(j), h, m)),
            );
        }
    }
    for key in ["priorityClassName", "runtimeClassName"] {
        if let Some(v) =
            get_str(spec, &[key]).filter(|s| !s.is_empty() || key == "runtimeClassName")
        {
            errs.extend(
                names::is_dns1123_subdomain(v)
                    .into_iter()
                    .map(|m| FieldError::invalid(&path.child(key), v, m)),
            );
        }
    }
    if let Some(p) = get_str(spec, &["preemptionPolicy"]) {
        match p {
            "PreemptLowerPriority" | "Never" => {}
            "" => errs.push(FieldError::required(&path.child("preemptionPolicy"), "")),
            other => errs.push(FieldError::not_supported(
                &path.child("preemptionPolicy"),
                other,
                &["PreemptLowerPriority", "Never"],
            )),
        }
    }
    if let Some(os) = get(spec, &["os"]) {
        let name = str_or_empty(os, &["name"]);
        if name.is_empty() {
            errs.push(FieldError::required(&path.child("os").child("name"), ""));
        }
        if name != "linux" && name != "windows" {
            errs.push(FieldError::not_supported(
                &path.child("os"),
                name,
                &["linux", "windows"],
            ));
        }
    }
    errs
}

fn validate_pod_specific_annotations(
    annotations: Option<&Map<String, Value>>,
    spec: &Value,
    path: &FieldPath,
) -> ErrorList {
    let mut errs = ErrorList::new();
    let Some(a) = annotations else {
        return errs;
    };
    if let Some(v) = a.get("kubernetes.io/config.mirror") {
        if str_or_empty(spec, &["nodeName"]).is_empty() {
            errs.push(FieldError::invalid(
                &path.key("kubernetes.io/config.mirror"),
                v.clone(),
                "must set spec.nodeName if mirror pod annotation is set",
            ));
        }
    }
    if let Some(v) = a.get("controller.kubernetes.io/pod-deletion-cost") {
        if v.as_str().and_then(|s| s.parse::<i32>().ok()).is_none() {
            errs.push(FieldError::invalid(
                &path.key("controller.kubernetes.io/pod-deletion-cost"),
                v.clone(),
                "must be a 32bit integer",
            ));
        }
    }
    errs
}

/// Upstream's `ValidatePodTemplateSpec` (`path` is the template, e.g. `spec.template`).
pub(crate) fn validate_pod_template_spec(template: Option<&Value>, path: &FieldPath) -> ErrorList {
    let empty = Value::Object(Map::new());
    let t = template.unwrap_or(&empty);
    let mut errs = validate_labels(get(t, &["metadata", "labels"]), &path.child("labels"));
    errs.extend(validate_annotations(
        get(t, &["metadata", "annotations"]),
        &path.child("annotations"),
    ));
    let spec = get(t, &["spec"]).unwrap_or(&empty);
    errs.extend(validate_pod_specific_annotations(
        get_obj(t, &["metadata", "annotations"]),
        spec,
        &path.child("annotations"),
    ));
    errs.extend(validate_pod_spec(spec, &path.child("spec"), false));
    if !get_arr(spec, &["ephemeralContainers"]).is_empty() {
        errs.push(FieldError::forbidden(
            &path.child("spec").child("ephemeralContainers"),
            "ephemeral containers not allowed in pod template",
        ));
    }
    errs
}

/// Upstream's `validatePodMetadataAndSpec`.
pub(super) fn validate_pod_metadata_and_spec(pod: &Value) -> ErrorList {
    let empty = Value::Object(Map::new());
    let spec = get(pod, &["spec"]).unwrap_or(&empty);
    let sp = FieldPath::root("spec");
    let mut errs = meta::validate_object_meta(pod, NameRule::Subdomain, true);
    errs.extend(validate_pod_specific_annotations(
        get_obj(pod, &["metadata", "annotations"]),
        spec,
        &FieldPath::root("metadata").child("annotations"),
    ));
    errs.extend(validate_pod_spec(spec, &sp, true));
    if str_or_empty(spec, &["serviceAccountName"]).is_empty() {
        for (vi, v) in get_arr(spec, &["volumes"]).iter().enumerate() {
            for (si, s) in get_arr(v, &["projected", "sources"]).iter().enumerate() {
                if get(s, &["serviceAccountToken"]).is_some() {
                    let p = sp
                        .child("volumes")
                        .index(vi)
                        .child("projected")
                        .child("sources")
                        .index(si)
                        .child("serviceAccountToken");
                    errs.push(FieldError::forbidden(
                        &p,
                        "must not be specified when serviceAccountName is not set",
                    ));
                }
            }
        }
    }
    for kind in ["containers", "initContainers"] {
        for (i, c) in get_arr(spec, &[kind]).iter().enumerate() {
            let image = str_or_empty(c, &["image"]);
            if image.len() != image.trim().len() {
                errs.push(FieldError::invalid(
                    &sp.child(kind).index(i).child("image"),
                    image,
                    "must not have leading or trailing whitespace",
                ));
            }
        }
    }
    errs
}

/// Upstream's `ValidatePodCreate`.
pub(crate) fn validate_pod_create(pod: &Value) -> ErrorList {
    let mut errs = validate_pod_metadata_and_spec(pod);
    let sp = FieldPath::root("spec");
    if !get_arr(pod, &["spec", "ephemeralContainers"]).is_empty() {
        errs.push(FieldError::forbidden(
            &sp.child("ephemeralContainers"),
            "cannot be set on create",
        ));
    }
    if !str_or_empty(pod, &["spec", "nodeName"]).is_empty()
        && !get_arr(pod, &["spec", "schedulingGates"]).is_empty()
    {
        errs.push(FieldError::forbidden(
            &sp.child("nodeName"),
            "cannot be set until all schedulingGates have been cleared",
        ));
    }
    errs
}

const UPDATABLE_POD_SPEC_FIELDS: [&str; 5] = [
    "`spec.containers[*].image`",
    "`spec.initContainers[*].image`",
    "`spec.activeDeadlineSeconds`",
    "`spec.tolerations` (only additions to existing tolerations)",
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
];

pub(super) fn validate_container_updates(
    new: &[Value],
    old: &[Value],
    path: &FieldPath,
) -> (ErrorList, bool) {
    if new.len() != old.len() {
        return (
            vec![FieldError::forbidden(
                path,
                "pod updates may not add or remove containers",
            )],
            true,
        );
    }
    let mut errs = ErrorList::new();
    for (i, c) in new.iter().enumerate() {
        let image = str_or_empty(c, &["image"]);
        if image.is_empty() {
            errs.push(FieldError::required(&path.index(i).child("image"), ""));
        }
        if image.len() != image.trim().len() {
            errs.push(FieldError::invalid(
                &path.index(i).child("image"),
                image,
                "must not have leading or trailing whitespace",
            ));
        }
    }
    (errs, false)
}

fn toleration_eq_ignoring_seconds(a: &Value, b: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(m) = v.as_object_mut() {
            m.remove("tolerationSeconds");
        }
        v
    };
    semantic_eq(Some(&strip(a)), Some(&strip(b)))
}

/// Upstream's `ValidatePodUpdate`.
pub(crate) fn validate_pod_update(new: &Value, old: &Value) -> ErrorList {
    let mut errs = meta::validate_object_meta_update(new, old, true);
    errs.extend(validate_pod_metadata_and_spec(new));
    let empty = Value::Object(Map::new());
    let ns = get(new, &["spec"]).unwrap_or(&empty);
    let os = get(old, &["spec"]).unwrap_or(&empty);
    let sp = FieldPath::root("spec");
    for kind in ["containers", "initContainers"] {
        let (e, stop) =
            validate_container_updates(get_arr(ns, &[kind]), get_arr(os, &[kind]), &sp.child(kind));
        errs.extend(e);
        if stop {
            return errs;
        }
    }
    let ads = sp.child("activeDeadlineSeconds");
    match (
        get_int(ns, &["activeDeadlineSeconds"]),
        get_int(os, &["activeDeadlineSeconds"]),
    ) {
        (Some(n), _) if !(0..=MAX_INT32).contains(&n) => {
            errs.push(FieldError::invalid(
                &ads,
                n,
                names::inclusive_range_error(0, MAX_INT32),
            ));
            return errs;
        }
        (Some(n), Some(o)) if o < n => {
            errs.push(FieldError::invalid(
                &ads,
                n,
                "must be less than or equal to previous value",
            ));
            return errs;
        }
        (None, Some(_)) => errs.push(FieldError::invalid(
            &ads,
            Value::Null,
            "must not update from a positive integer to nil value",
        )),
        _ => {}
    }
    let new_tol = get_arr(ns, &["tolerations"]);
    for o in get_arr(os, &["tolerations"]) {
        if !new_tol.iter().any(|n| toleration_eq_ignoring_seconds(o, n)) {
            errs.push(FieldError::forbidden(
                &sp.child("tolerations"),
                "existing toleration can not be modified except its tolerationSeconds",
            ));
            break;
        }
    }
    let old_gates: Vec<&str> = get_arr(os, &["schedulingGates"])
        .iter()
        .map(|g| str_or_empty(g, &["name"]))
        .collect();
    for (i, g) in get_arr(ns, &["schedulingGates"]).iter().enumerate() {
        let name = str_or_empty(g, &["name"]);
        if !old_gates.contains(&name) {
            errs.push(FieldError::forbidden(
                &sp.child("schedulingGates").index(i).child("name"),
                format!("only deletion is allowed, but found new scheduling gate '{name}'"),
            ));
        }
    }
    if semantic_eq(Some(ns), Some(os)) {
        return errs;
    }
    // Munge the updatable fields to their old values and compare what is left.
    let mut munged = ns.clone();
    if let Some(m) = munged.as_object_mut() {
        for kind in ["containers", "initContainers"] {
            if let Some(Value::Array(cs)) = m.get_mut(kind) {
                for (c, oc) in cs.iter_mut().zip(get_arr(os, &[kind])) {
                    if let (Some(c), Some(img)) = (c.as_object_mut(), oc.get("image")) {
                        c.insert("image".into(), img.clone());
                    }
                }
            }
        }
        for key in ["activeDeadlineSeconds", "schedulingGates", "tolerations"] {
            match os.get(key) {
                Some(v) => m.insert(key.into(), v.clone()),
                None => m.remove(key),
            };
        }
        let old_grace = get_int(os, &["terminationGracePeriodSeconds"]);
        if old_grace.is_some_and(|g| g < 0)
            && m.get("terminationGracePeriodSeconds")
                .and_then(super::json::as_int)
                == Some(1)
        {
            if let Some(g) = os.get("terminationGracePeriodSeconds") {
                m.insert("terminationGracePeriodSeconds".into(), g.clone());
            }
        }
    }
    if !semantic_eq(Some(&munged), Some(os)) {
        let mut diff = Vec::new();
        diff_paths("spec", Some(os), Some(&munged), &mut diff);
        errs.push(FieldError::forbidden(
            &sp,
            format!(
                "pod updates may not change fields other than {}\n{}",
                UPDATABLE_POD_SPEC_FIELDS.join(","),
                diff.join("\n")
            ),
        ));
    }
    errs
}
