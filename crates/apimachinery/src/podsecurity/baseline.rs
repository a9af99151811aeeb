//! The baseline checks (upstream `policy/check_*.go` of level Baseline), one function per
//! revision, named by the policy version it starts at. Each returns the violation it finds with
//! upstream's reason and detail texts, or `None` when the pod passes.

use std::collections::BTreeSet;

use serde_json::Value;

use super::helpers::{
    annotation, annotations, bool_at, containers, containers_phrase, field, go_quote,
    in_user_namespace, join_quote, list, name, path, pluralize, security_context, str_at,
};
use super::registry::Violation;

const APPARMOR_ANNOTATION_PREFIX: &str = "container.apparmor.security.beta.kubernetes.io/";

fn allowed_apparmor_annotation(value: &str) -> bool {
    value.is_empty() || value == "runtime/default" || value.starts_with("localhost/")
}

fn allowed_apparmor_type(t: &str) -> bool {
    matches!(t, "RuntimeDefault" | "Localhost")
}

/// AppArmor: the pod's and containers' `appArmorProfile.type` must be `RuntimeDefault` or
/// `Localhost`; the deprecated beta annotations `runtime/default`, `localhost/*` or empty.
pub(super) fn app_armor_profile_1_0(meta: &Value, spec: &Value) -> Option<Violation> {
    let mut setters = Vec::new();
    let mut bad_values = BTreeSet::new();
    if let Some(profile) = security_context(spec).and_then(|sc| field(sc, "appArmorProfile")) {
        let t = str_at(profile, &["type"]);
        if !allowed_apparmor_type(t) {
            setters.push("pod".to_string());
            bad_values.insert(t.to_string());
        }
    }
    let mut bad_containers = Vec::new();
    for c in containers(spec) {
        if let Some(profile) = security_context(c).and_then(|sc| field(sc, "appArmorProfile")) {
            let t = str_at(profile, &["type"]);
            if !allowed_apparmor_type(t) {
                bad_containers.push(name(c));
                bad_values.insert(t.to_string());
            }
        }
    }
    if !bad_containers.is_empty() {
        setters.push(containers_phrase(&bad_containers));
    }
    let mut forbidden_annotations: Vec<String> = annotations(meta)
        .filter(|(k, v)| {
            k.starts_with(APPARMOR_ANNOTATION_PREFIX) && !allowed_apparmor_annotation(v)
        })
        .map(|(k, v)| format!("{k}={}", go_quote(v)))
        .collect();
    let mut values: Vec<String> = bad_values.into_iter().collect();
    if !forbidden_annotations.is_empty() {
        forbidden_annotations.sort();
        setters.push(pluralize("annotation", "annotations", forbidden_annotations.len()).into());
        values.extend(forbidden_annotations);
    }
    if setters.is_empty() {
        return None;
    }
    Some(Violation::new(
        pluralize(
            "forbidden AppArmor profile",
            "forbidden AppArmor profiles",
            values.len(),
        ),
        format!(
            "{} must not set AppArmor profile type to {}",
            setters.join(" and "),
            join_quote(&values)
        ),
    ))
}

/// The capabilities a container may add at baseline: the container runtimes' default set.
const CAPABILITIES_ALLOWED_1_0: &[&str] = &[
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

/// Capabilities: containers may add only capabilities of the default set.
pub(super) fn capabilities_baseline_1_0(_meta: &Value, spec: &Value) -> Option<Violation> {
    let mut bad_containers = Vec::new();
    let mut non_default = BTreeSet::new();
    for c in containers(spec) {
        let Some(caps) = security_context(c).and_then(|sc| field(sc, "capabilities")) else {
            continue;
        };
        let mut valid = true;
        for cap in list(caps, "add").iter().filter_map(Value::as_str) {
            if !CAPABILITIES_ALLOWED_1_0.contains(&cap) {
                valid = false;
                non_default.insert(cap);
            }
        }
        if !valid {
            bad_containers.push(name(c));
        }
    }
    if bad_containers.is_empty() {
        return None;
    }
    let caps: Vec<&str> = non_default.into_iter().collect();
    Some(Violation::new(
        "non-default capabilities",
        format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_phrase(&bad_containers),
            join_quote(&caps)
        ),
    ))
}

/// Host namespaces: no `hostNetwork`, `hostPID` or `hostIPC`.
pub(super) fn host_namespaces_1_0(_meta: &Value, spec: &Value) -> Option<Violation> {
    let shared: Vec<String> = ["hostNetwork", "hostPID", "hostIPC"]
        .into_iter()
        .filter(|key| bool_at(spec, &[key]) == Some(true))
        .map(|key| format!("{key}=true"))
        .collect();
    (!shared.is_empty()).then(|| Violation::new("host namespaces", shared.join(", ")))
}

/// HostPath volumes are forbidden.
pub(super) fn host_path_volumes_1_0(_meta: &Value, spec: &Value) -> Option<Violation> {
    let volumes: Vec<&str> = list(spec, "volumes")
        .iter()
        .filter(|v| field(v, "hostPath").is_some())
        .map(name)
        .collect();
    (!volumes.is_empty()).then(|| {
        Violation::new(
            "hostPath volumes",
            format!(
                "{} {}",
                pluralize("volume", "volumes", volumes.len()),
                join_quote(&volumes)
            ),
        )
    })
}

/// Host ports are forbidden.
pub(super) fn host_ports_1_0(_meta: &Value, spec: &Value) -> Option<Violation> {
    let mut bad_containers = Vec::new();
    // Upstream keeps the ports as strings in a sorted set: "10" sorts before "9".
    let mut ports = BTreeSet::new();
    for c in containers(spec) {
        let mut valid = true;
        for port in list(c, "ports") {
            match path(port, &["hostPort"]).and_then(Value::as_i64) {
                Some(0) | None => {}
                Some(p) => {
                    valid = false;
                    ports.insert(p.to_string());
                }
            }
        }
        if !valid {
            bad_containers.push(name(c));
        }
    }
    if bad_containers.is_empty() {
        return None;
    }
    let ports: Vec<String> = ports.into_iter().collect();
    Some(Violation::new(
        "hostPort",
        format!(
            "{} {} {} {}",
            containers_phrase(&bad_containers),
            pluralize("uses", "use", bad_containers.len()),
            pluralize("hostPort", "hostPorts", ports.len()),
            ports.join(", ")
        ),
    ))
}

/// The hosts a probe or lifecycle handler names (`httpGet.host`, `tcpSocket.host`).
fn handler_hosts<'a>(handler: Option<&'a Value>, into: &mut Vec<&'a str>) {
    let Some(handler) = handler else { return };
    for action in ["httpGet", "tcpSocket"] {
        let host = str_at(handler, &[action, "host"]);
        if !host.is_empty() {
            into.push(host);
        }
    }
}

/// Probes and lifecycle handlers must not name a host (new in 1.34).
pub(super) fn host_probes_and_host_lifecycle_1_34(
    _meta: &Value,
    spec: &Value,
) -> Option<Violation> {
    let mut bad_containers = BTreeSet::new();
    let mut hosts = BTreeSet::new();
    for c in containers(spec) {
        let mut found = Vec::new();
        for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
            handler_hosts(field(c, probe), &mut found);
        }
        for hook in ["postStart", "preStop"] {
            handler_hosts(path(c, &["lifecycle", hook]), &mut found);
        }
        if !found.is_empty() {
            bad_containers.insert(name(c));
            hosts.extend(found);
        }
    }
    if bad_containers.is_empty() {
        return None;
    }
    let containers: Vec<&str> = bad_containers.into_iter().collect();
    let hosts: Vec<&str> = hosts.into_iter().collect();
    Some(Violation::new(
        "probe or lifecycle host",
        format!(
            "{} {} {} {}",
            containers_phrase(&containers),
            pluralize("uses", "use", containers.len()),
            pluralize(
                "probe or lifecycle host",
                "probe or lifecycle hosts",
                hosts.len()
            ),
            join_quote(&hosts)
        ),
    ))
}

/// Privileged containers are forbidden.
pub(super) fn privileged_1_0(_meta: &Value, spec: &Value) -> Option<Violation> {
    let bad: Vec<&str> = containers(spec)
        .filter(|c| bool_at(c, &["securityContext", "privileged"]) == Some(true))
        .map(name)
        .collect();
    (!bad.is_empty()).then(|| {
        Violation::new(
            "privileged",
            format!(
                "{} must not set securityContext.privileged=true",
                containers_phrase(&bad)
            ),
        )
    })
}

/// `procMount` must be unset or `Default`. Also the restricted `procMount_restricted` check,
/// which keeps this strict revision where baseline relaxes it.
pub(super) fn proc_mount_1_0(_meta: &Value, spec: &Value) -> Option<Violation> {
    let mut bad_containers = Vec::new();
    let mut types = BTreeSet::new();
    for c in containers(spec) {
        let Some(t) = security_context(c).and_then(|sc| field(sc, "procMount")) else {
            continue;
        };
        let t = t.as_str().unwrap_or_default();
        if t != "Default" {
            bad_containers.push(name(c));
            types.insert(t);
        }
    }
    if bad_containers.is_empty() {
        return None;
    }
    let types: Vec<&str> = types.into_iter().collect();
    Some(Violation::new(
        "procMount",
        format!(
            "{} must not set securityContext.procMount to {}",
            containers_phrase(&bad_containers),
            join_quote(&types)
        ),
    ))
}

/// From 1.35 any `procMount` is allowed for a pod in a user namespace.
pub(super) fn proc_mount_1_35_baseline(meta: &Value, spec: &Value) -> Option<Violation> {
    if in_user_namespace(spec) {
        return None;
    }
    proc_mount_1_0(meta, spec)
}

const SELINUX_TYPES_1_0: &[&str] = &["", "container_t", "container_init_t", "container_kvm_t"];
const SELINUX_TYPES_1_31: &[&str] = &[
    "",
    "container_t",
    "container_init_t",
    "container_kvm_t",
    "container_engine_t",
];

pub(super) fn se_linux_options_1_0(meta: &Value, spec: &Value) -> Option<Violation> {
    se_linux_options(meta, spec, SELINUX_TYPES_1_0)
}

/// 1.31 allows `container_engine_t` too.
pub(super) fn se_linux_options_1_31(meta: &Value, spec: &Value) -> Option<Violation> {
    se_linux_options(meta, spec, SELINUX_TYPES_1_31)
}

/// SELinux: the type must be one of `allowed`; user and role must not be set.
fn se_linux_options(_meta: &Value, spec: &Value, allowed: &[&str]) -> Option<Violation> {
    let mut bad_types = BTreeSet::new();
    let (mut set_user, mut set_role) = (false, false);
    let mut valid = |opts: &Value| {
        let mut ok = true;
        let t = str_at(opts, &["type"]);
        if !allowed.contains(&t) {
            ok = false;
            bad_types.insert(t.to_string());
        }
        if !str_at(opts, &["user"]).is_empty() {
            ok = false;
            set_user = true;
        }
        if !str_at(opts, &["role"]).is_empty() {
            ok = false;
            set_role = true;
        }
        ok
    };
    let mut setters = Vec::new();
    if let Some(opts) = security_context(spec).and_then(|sc| field(sc, "seLinuxOptions")) {
        if !valid(opts) {
            setters.push("pod".to_string());
        }
    }
    let bad_containers: Vec<&str> = containers(spec)
        .filter(|c| {
            security_context(c)
                .and_then(|sc| field(sc, "seLinuxOptions"))
                .is_some_and(|opts| !valid(opts))
        })
        .map(name)
        .collect();
    if !bad_containers.is_empty() {
        setters.push(containers_phrase(&bad_containers));
    }
    if setters.is_empty() {
        return None;
    }
    let mut data = Vec::new();
    if !bad_types.is_empty() {
        let types: Vec<String> = bad_types.into_iter().collect();
        data.push(format!(
            "{} {}",
            pluralize("type", "types", types.len()),
            join_quote(&types)
        ));
    }
    if set_user {
        data.push("user may not be set".to_string());
    }
    if set_role {
        data.push("role may not be set".to_string());
    }
    Some(Violation::new(
        "seLinuxOptions",
        format!(
            "{} set forbidden securityContext.seLinuxOptions: {}",
            setters.join(" and "),
            data.join("; ")
        ),
    ))
}

const SECCOMP_POD_ANNOTATION: &str = "seccomp.security.alpha.kubernetes.io/pod";
const SECCOMP_CONTAINER_ANNOTATION_PREFIX: &str = "container.seccomp.security.alpha.kubernetes.io/";

fn valid_seccomp_annotation(v: &str) -> bool {
    v == "runtime/default" || v == "docker/default" || v.starts_with("localhost/")
}

pub(super) fn valid_seccomp_type(t: &str) -> bool {
    matches!(t, "Localhost" | "RuntimeDefault")
}

/// Before 1.19 seccomp was chosen by the alpha annotations: if set, they must name the runtime's
/// default or a localhost profile.
pub(super) fn seccomp_profile_baseline_1_0(meta: &Value, spec: &Value) -> Option<Violation> {
    let mut forbidden = BTreeSet::new();
    let mut check = |key: String| {
        if let Some(v) = annotation(meta, &key).filter(|v| !valid_seccomp_annotation(v)) {
            forbidden.insert(format!("{key}={}", go_quote(v)));
        }
    };
    check(SECCOMP_POD_ANNOTATION.to_string());
    for c in containers(spec) {
        check(format!("{SECCOMP_CONTAINER_ANNOTATION_PREFIX}{}", name(c)));
    }
    if forbidden.is_empty() {
        return None;
    }
    let forbidden: Vec<String> = forbidden.into_iter().collect();
    Some(Violation::new(
        "seccompProfile",
        format!(
            "forbidden {} {}",
            pluralize("annotation", "annotations", forbidden.len()),
            forbidden.join(", ")
        ),
    ))
}

/// The pod's and containers' seccomp profile types, when set, must be `RuntimeDefault` or
/// `Localhost`. Returns the bad setters (`pod`, `containers "a"`), the bad values, and whether the
/// pod itself sets a valid profile; `unset` collects the containers that set none.
pub(super) fn seccomp_setters<'a>(
    spec: &'a Value,
    unset: &mut Vec<&'a str>,
) -> (Vec<String>, BTreeSet<String>, bool) {
    let mut setters = Vec::new();
    let mut values = BTreeSet::new();
    let mut pod_valid = false;
    if let Some(profile) = security_context(spec).and_then(|sc| field(sc, "seccompProfile")) {
        let t = str_at(profile, &["type"]);
        if valid_seccomp_type(t) {
            pod_valid = true;
        } else {
            setters.push("pod".to_string());
            values.insert(t.to_string());
        }
    }
    let mut bad_containers = Vec::new();
    for c in containers(spec) {
        match security_context(c).and_then(|sc| field(sc, "seccompProfile")) {
            Some(profile) => {
                let t = str_at(profile, &["type"]);
                if !valid_seccomp_type(t) {
                    bad_containers.push(name(c));
                    values.insert(t.to_string());
                }
            }
            None => unset.push(name(c)),
        }
    }
    if !bad_containers.is_empty() {
        setters.push(containers_phrase(&bad_containers));
    }
    (setters, values, pod_valid)
}

/// The `... must not set securityContext.seccompProfile.type to ...` violation.
pub(super) fn seccomp_bad_setters(setters: &[String], values: BTreeSet<String>) -> Violation {
    let values: Vec<String> = values.into_iter().collect();
    Violation::new(
        "seccompProfile",
        format!(
            "{} must not set securityContext.seccompProfile.type to {}",
            setters.join(" and "),
            join_quote(&values)
        ),
    )
}

/// From 1.19 the `seccompProfile` fields: if set, `RuntimeDefault` or `Localhost`.
pub(super) fn seccomp_profile_baseline_1_19(_meta: &Value, spec: &Value) -> Option<Violation> {
    let (setters, values, _) = seccomp_setters(spec, &mut Vec::new());
    (!setters.is_empty()).then(|| seccomp_bad_setters(&setters, values))
}

const SYSCTLS_1_0: &[&str] = &[
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_unprivileged_port_start",
];
const SYSCTLS_1_27: &[&str] = &["net.ipv4.ip_local_reserved_ports"];
const SYSCTLS_1_29: &[&str] = &[
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
];
const SYSCTLS_1_32: &[&str] = &["net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"];

/// Sysctls: only the "safe" ones, namespaced and isolated from other pods. Each revision adds to
/// the previous one's list.
fn sysctls(spec: &Value, allowed: &[&[&str]]) -> Option<Violation> {
    let forbidden: Vec<&str> = security_context(spec)
        .map(|sc| list(sc, "sysctls"))
        .unwrap_or_default()
        .iter()
        .map(name)
        .filter(|n| !allowed.iter().any(|set| set.contains(n)))
        .collect();
    (!forbidden.is_empty()).then(|| Violation::new("forbidden sysctls", forbidden.join(", ")))
}

pub(super) fn sysctls_1_0(_meta: &Value, spec: &Value) -> Option<Violation> {
    sysctls(spec, &[SYSCTLS_1_0])
}

pub(super) fn sysctls_1_27(_meta: &Value, spec: &Value) -> Option<Violation> {
    sysctls(spec, &[SYSCTLS_1_0, SYSCTLS_1_27])
}

pub(super) fn sysctls_1_29(_meta: &Value, spec: &Value) -> Option<Violation> {
    sysctls(spec, &[SYSCTLS_1_0, SYSCTLS_1_27, SYSCTLS_1_29])
}

pub(super) fn sysctls_1_32(_meta: &Value, spec: &Value) -> Option<Violation> {
    sysctls(
        spec,
        &[SYSCTLS_1_0, SYSCTLS_1_27, SYSCTLS_1_29, SYSCTLS_1_32],
    )
}

/// Windows HostProcess pods and containers are forbidden.
pub(super) fn windows_host_process_1_0(_meta: &Value, spec: &Value) -> Option<Violation> {
    let host_process =
        |v: &Value| bool_at(v, &["securityContext", "windowsOptions", "hostProcess"]);
    let mut setters = Vec::new();
    if host_process(spec) == Some(true) {
        setters.push("pod".to_string());
    }
    let bad: Vec<&str> = containers(spec)
        .filter(|c| host_process(c) == Some(true))
        .map(name)
        .collect();
    if !bad.is_empty() {
        setters.push(containers_phrase(&bad));
    }
    (!setters.is_empty()).then(|| {
        Violation::new(
            "hostProcess",
            format!(
                "{} must not set securityContext.windowsOptions.hostProcess=true",
                setters.join(" and ")
            ),
        )
    })
}

#[cfg(test)]
#[path = "baseline_tests.rs"]
mod tests;
