//! The restricted checks (upstream `policy/check_*.go` of level Restricted), one function per
//! revision. `restricted` runs these plus every baseline check a restricted one does not
//! override (see `registry`).

use std::collections::BTreeSet;

use serde_json::Value;

use super::baseline::{seccomp_bad_setters, seccomp_setters};
use super::helpers::{
    bool_at, containers, containers_phrase, field, in_user_namespace, is_windows, join_quote, list,
    name, pluralize, security_context,
};
use super::registry::Violation;

/// The volume sources restricted allows; any other (or none) is reported by its type.
const ALLOWED_VOLUME_SOURCES: &[&str] = &[
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "image",
    "persistentVolumeClaim",
    "projected",
    "secret",
];

/// The forbidden sources in upstream's order (the first one set names the volume's type).
const RESTRICTED_VOLUME_SOURCES: &[&str] = &[
    "hostPath",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "gitRepo",
    "nfs",
    "iscsi",
    "glusterfs",
    "rbd",
    "flexVolume",
    "cinder",
    "cephfs",
    "flocker",
    "fc",
    "azureFile",
    "vsphereVolume",
    "quobyte",
    "azureDisk",
    "photonPersistentDisk",
    "portworxVolume",
    "scaleIO",
    "storageos",
];

/// Volume types: only the sources that need no privilege on the node. (The `image` source was
/// added to the 1.0 revision in place upstream, so it passes at every version.)
pub(super) fn restricted_volumes_1_0(_meta: &Value, spec: &Value) -> Option<Violation> {
    let mut bad_volumes = Vec::new();
    let mut bad_types = BTreeSet::new();
    for volume in list(spec, "volumes") {
        if ALLOWED_VOLUME_SOURCES
            .iter()
            .any(|src| field(volume, src).is_some())
        {
            continue;
        }
        bad_volumes.push(name(volume));
        let kind = RESTRICTED_VOLUME_SOURCES
            .iter()
            .find(|src| field(volume, src).is_some())
            .map_or("unknown", |src| *src);
        bad_types.insert(kind);
    }
    if bad_volumes.is_empty() {
        return None;
    }
    let types: Vec<&str> = bad_types.into_iter().collect();
    Some(Violation::new(
        "restricted volume types",
        format!(
            "{} {} {} {} {}",
            pluralize("volume", "volumes", bad_volumes.len()),
            join_quote(&bad_volumes),
            pluralize("uses", "use", bad_volumes.len()),
            pluralize(
                "restricted volume type",
                "restricted volume types",
                types.len()
            ),
            join_quote(&types)
        ),
    ))
}

/// Privilege escalation must be disabled explicitly (`allowPrivilegeEscalation: false`).
pub(super) fn allow_privilege_escalation_1_8(_meta: &Value, spec: &Value) -> Option<Violation> {
    let bad: Vec<&str> = containers(spec)
        .filter(|c| bool_at(c, &["securityContext", "allowPrivilegeEscalation"]) != Some(false))
        .map(name)
        .collect();
    (!bad.is_empty()).then(|| {
        Violation::new(
            "allowPrivilegeEscalation != false",
            format!(
                "{} must set securityContext.allowPrivilegeEscalation=false",
                containers_phrase(&bad)
            ),
        )
    })
}

/// From 1.25 Windows pods are not checked (the field is Linux-only).
pub(super) fn allow_privilege_escalation_1_25(meta: &Value, spec: &Value) -> Option<Violation> {
    if is_windows(spec) {
        return None;
    }
    allow_privilege_escalation_1_8(meta, spec)
}

/// Either the pod sets `runAsNonRoot: true` and no container sets false, or every container
/// sets true.
pub(super) fn run_as_non_root_1_0(_meta: &Value, spec: &Value) -> Option<Violation> {
    const REASON: &str = "runAsNonRoot != true";
    let mut setters = Vec::new();
    let mut pod_non_root = false;
    match bool_at(spec, &["securityContext", "runAsNonRoot"]) {
        Some(false) => setters.push("pod".to_string()),
        Some(true) => pod_non_root = true,
        None => {}
    }
    let (mut explicit, mut implicit) = (Vec::new(), Vec::new());
    for c in containers(spec) {
        match bool_at(c, &["securityContext", "runAsNonRoot"]) {
            Some(false) => explicit.push(name(c)),
            Some(true) => {}
            None if !pod_non_root => implicit.push(name(c)),
            None => {}
        }
    }
    if !explicit.is_empty() {
        setters.push(containers_phrase(&explicit));
    }
    if !setters.is_empty() {
        return Some(Violation::new(
            REASON,
            format!(
                "{} must not set securityContext.runAsNonRoot=false",
                setters.join(" and ")
            ),
        ));
    }
    (!implicit.is_empty()).then(|| {
        Violation::new(
            REASON,
            format!(
                "pod or {} must set securityContext.runAsNonRoot=true",
                containers_phrase(&implicit)
            ),
        )
    })
}

/// From 1.35 pods in a user namespace are not checked: root in the pod is not root on the node.
pub(super) fn run_as_non_root_1_35(meta: &Value, spec: &Value) -> Option<Violation> {
    if in_user_namespace(spec) {
        return None;
    }
    run_as_non_root_1_0(meta, spec)
}

/// Neither the pod nor a container may set `runAsUser: 0`.
pub(super) fn run_as_user_1_23(_meta: &Value, spec: &Value) -> Option<Violation> {
    let root = |v: &Value| {
        security_context(v)
            .and_then(|sc| field(sc, "runAsUser"))
            .and_then(Value::as_i64)
            == Some(0)
    };
    let mut setters = Vec::new();
    if root(spec) {
        setters.push("pod".to_string());
    }
    let bad: Vec<&str> = containers(spec).filter(|c| root(c)).map(name).collect();
    if !bad.is_empty() {
        setters.push(containers_phrase(&bad));
    }
    (!setters.is_empty()).then(|| {
        Violation::new(
            "runAsUser=0",
            format!("{} must not set runAsUser=0", setters.join(" and ")),
        )
    })
}

/// From 1.35 pods in a user namespace are not checked.
pub(super) fn run_as_user_1_35(meta: &Value, spec: &Value) -> Option<Violation> {
    if in_user_namespace(spec) {
        return None;
    }
    run_as_user_1_23(meta, spec)
}

/// Seccomp must be set to `RuntimeDefault` or `Localhost`: on the pod, or on every container.
pub(super) fn seccomp_profile_restricted_1_19(_meta: &Value, spec: &Value) -> Option<Violation> {
    let mut unset = Vec::new();
    let (setters, values, pod_valid) = seccomp_setters(spec, &mut unset);
    if !setters.is_empty() {
        return Some(seccomp_bad_setters(&setters, values));
    }
    (!pod_valid && !unset.is_empty()).then(|| {
        Violation::new(
            "seccompProfile",
            format!(
                "pod or {} must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\"",
                containers_phrase(&unset)
            ),
        )
    })
}

/// From 1.25 Windows pods are not checked.
pub(super) fn seccomp_profile_restricted_1_25(meta: &Value, spec: &Value) -> Option<Violation> {
    if is_windows(spec) {
        return None;
    }
    seccomp_profile_restricted_1_19(meta, spec)
}

/// Containers must drop `ALL` capabilities and may add back only `NET_BIND_SERVICE`.
pub(super) fn capabilities_restricted_1_22(_meta: &Value, spec: &Value) -> Option<Violation> {
    let mut missing_drop_all = Vec::new();
    let mut adding_forbidden = Vec::new();
    let mut forbidden = BTreeSet::new();
    for c in containers(spec) {
        let Some(caps) = security_context(c).and_then(|sc| field(sc, "capabilities")) else {
            missing_drop_all.push(name(c));
            continue;
        };
        let strings = |key| list(caps, key).iter().filter_map(Value::as_str);
        if !strings("drop").any(|cap| cap == "ALL") {
            missing_drop_all.push(name(c));
        }
        let mut added_forbidden = false;
        for cap in strings("add").filter(|cap| *cap != "NET_BIND_SERVICE") {
            added_forbidden = true;
            forbidden.insert(cap);
        }
        if added_forbidden {
            adding_forbidden.push(name(c));
        }
    }
    let mut details = Vec::new();
    if !missing_drop_all.is_empty() {
        details.push(format!(
            "{} must set securityContext.capabilities.drop=[\"ALL\"]",
            containers_phrase(&missing_drop_all)
        ));
    }
    if !adding_forbidden.is_empty() {
        let caps: Vec<&str> = forbidden.into_iter().collect();
        details.push(format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_phrase(&adding_forbidden),
            join_quote(&caps)
        ));
    }
    (!details.is_empty()).then(|| Violation::new("unrestricted capabilities", details.join("; ")))
}

/// From 1.25 Windows pods are not checked.
pub(super) fn capabilities_restricted_1_25(meta: &Value, spec: &Value) -> Option<Violation> {
    if is_windows(spec) {
        return None;
    }
    capabilities_restricted_1_22(meta, spec)
}

#[cfg(test)]
#[path = "restricted_tests.rs"]
mod tests;
