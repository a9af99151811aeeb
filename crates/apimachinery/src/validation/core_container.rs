//! Containers of a pod spec (upstream `pkg/apis/core/validation/validation.go`: `validateContainers`,
//! `validateInitContainers`, `validateContainerCommon`, ports, env, volume mounts, probes, lifecycle
//! handlers, resource requirements and the container security context).
//!
//! Deliberately different: resource quantities are compared as floating point numbers, and the
//! downward-API field paths of env vars are checked against the common list only.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use super::field::{ErrorList, FieldError, FieldPath};
use super::json::{as_int, get, get_arr, get_int, get_obj, get_str, str_or_empty};
use super::meta::nonnegative;
use super::names;

pub(crate) const SUPPORTED_PROTOCOLS: [&str; 3] = ["SCTP", "TCP", "UDP"];
const QUANTITY_REGEX: &str = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$";

/// What container validation needs to know about the pod: its valid volumes and grace period.
pub(crate) struct PodCtx<'a> {
    pub volumes: &'a HashSet<String>,
}

/// Upstream's `ValidatePortNumOrName` for an IntOrString port (`null`/absent is the zero int).
pub(crate) fn validate_port_num_or_name(port: Option<&Value>, path: &FieldPath) -> ErrorList {
    match port {
        Some(Value::String(s)) => names::is_valid_port_name(s)
            .into_iter()
            .map(|m| FieldError::invalid(path, s.as_str(), m))
            .collect(),
        other => {
            let n = other.and_then(as_int).unwrap_or(0);
            names::is_valid_port_num(n)
                .into_iter()
                .map(|m| FieldError::invalid(path, n, m))
                .collect()
        }
    }
}

fn validate_container_ports(c: &Value, path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    let mut seen = HashSet::new();
    for (i, p) in get_arr(c, &["ports"]).iter().enumerate() {
        let ip = path.index(i);
        let name = str_or_empty(p, &["name"]);
        if !name.is_empty() {
            let msgs = names::is_valid_port_name(name);
            if !msgs.is_empty() {
                errs.extend(
                    msgs.into_iter()
                        .map(|m| FieldError::invalid(&ip.child("name"), name, m)),
                );
            } else if !seen.insert(name.to_string()) {
                errs.push(FieldError::duplicate(&ip.child("name"), name));
            }
        }
        match get_int(p, &["containerPort"]).unwrap_or(0) {
            0 => errs.push(FieldError::required(&ip.child("containerPort"), "")),
            n => errs.extend(
                names::is_valid_port_num(n)
                    .into_iter()
                    .map(|m| FieldError::invalid(&ip.child("containerPort"), n, m)),
            ),
        }
        let host_port = get_int(p, &["hostPort"]).unwrap_or(0);
        if host_port != 0 {
            errs.extend(
                names::is_valid_port_num(host_port)
                    .into_iter()
                    .map(|m| FieldError::invalid(&ip.child("hostPort"), host_port, m)),
            );
        }
        errs.extend(validate_protocol(p, &ip.child("protocol")));
    }
    errs
}

/// A port's `protocol`: required, one of SCTP, TCP, UDP.
pub(crate) fn validate_protocol(port: &Value, path: &FieldPath) -> ErrorList {
    let proto = str_or_empty(port, &["protocol"]);
    if proto.is_empty() {
        vec![FieldError::required(path, "")]
    } else if !SUPPORTED_PROTOCOLS.contains(&proto) {
        vec![FieldError::not_supported(path, proto, &SUPPORTED_PROTOCOLS)]
    } else {
        Vec::new()
    }
}

const ENV_FIELD_PATHS: [&str; 11] = [
    "metadata.annotations",
    "metadata.labels",
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "spec.nodeName",
    "spec.serviceAccountName",
    "status.hostIP",
    "status.hostIPs",
    "status.podIP",
    "status.podIPs",
];

fn validate_key_ref(r: &Value, path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    let key = str_or_empty(r, &["key"]);
    if key.is_empty() {
        errs.push(FieldError::required(&path.child("key"), ""));
    } else {
        errs.extend(
            names::is_config_map_key(key)
                .into_iter()
                .map(|m| FieldError::invalid(&path.child("key"), key, m)),
        );
    }
    if str_or_empty(r, &["name"]).is_empty() {
        errs.push(FieldError::required(&path.child("name"), ""));
    }
    errs
}

fn validate_env(c: &Value, cpath: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    let path = &cpath.child("env");
    for (i, ev) in get_arr(c, &["env"]).iter().enumerate() {
        let ip = path.index(i);
        let name = str_or_empty(ev, &["name"]);
        if name.is_empty() {
            errs.push(FieldError::required(&ip.child("name"), ""));
        } else {
            errs.extend(
                names::is_env_var_name(name)
                    .into_iter()
                    .map(|m| FieldError::invalid(&ip.child("name"), name, m)),
            );
        }
        let Some(from) = get(ev, &["valueFrom"]) else {
            continue;
        };
        let vp = ip.child("valueFrom");
        let sources = [
            "fieldRef",
            "resourceFieldRef",
            "configMapKeyRef",
            "secretKeyRef",
            "fileKeyRef",
        ];
        let present: Vec<&str> = sources
            .iter()
            .copied()
            .filter(|s| get(from, &[s]).is_some())
            .collect();
        if let Some(fr) = get(from, &["fieldRef"]) {
            let fp = str_or_empty(fr, &["fieldPath"]);
            if fp.is_empty() {
                errs.push(FieldError::required(
                    &vp.child("fieldRef").child("fieldPath"),
                    "",
                ));
            } else {
                let base = fp.split('[').next().unwrap_or(fp);
                let subscript_ok = !fp.contains('[')
                    || base == "metadata.labels"
                    || base == "metadata.annotations";
                if !ENV_FIELD_PATHS.contains(&base) || !subscript_ok {
                    errs.push(FieldError::not_supported(
                        &vp.child("fieldRef").child("fieldPath"),
                        fp,
                        &ENV_FIELD_PATHS,
                    ));
                }
            }
        }
        for key in ["configMapKeyRef", "secretKeyRef"] {
            if let Some(r) = get(from, &[key]) {
                errs.extend(validate_key_ref(r, &vp.child(key)));
            }
        }
        if let Some(r) = get(from, &["resourceFieldRef"]) {
            if str_or_empty(r, &["resource"]).is_empty() {
                errs.push(FieldError::required(
                    &vp.child("resourceFieldRef").child("resource"),
                    "",
                ));
            }
        }
        match present.len() {
            0 => errs.push(FieldError::invalid(
                &vp,
                "",
                "must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`",
            )),
            1 => {}
            _ => errs.push(FieldError::invalid(&vp, "", "may not have more than one field specified at a time")),
        }
        if !str_or_empty(ev, &["value"]).is_empty() && !present.is_empty() {
            errs.push(FieldError::invalid(
                &vp,
                "",
                "may not be specified when `value` is not empty",
            ));
        }
    }
    for (i, ef) in get_arr(c, &["envFrom"]).iter().enumerate() {
        let ip = cpath.child("envFrom").index(i);
        let prefix = str_or_empty(ef, &["prefix"]);
        if !prefix.is_empty() {
            errs.extend(
                names::is_env_var_name(prefix)
                    .into_iter()
                    .map(|m| FieldError::invalid(&ip.child("prefix"), prefix, m)),
            );
        }
        let n = ["configMapRef", "secretRef"]
            .iter()
            .filter(|k| get(ef, &[k]).is_some())
            .count();
        if n == 0 {
            errs.push(FieldError::invalid(
                &ip,
                "",
                "must specify one of: `configMapRef` or `secretRef`",
            ));
        } else if n > 1 {
            errs.push(FieldError::invalid(
                &ip,
                "",
                "may not have more than one field specified at a time",
            ));
        }
        for key in ["configMapRef", "secretRef"] {
            if let Some(r) = get(ef, &[key]) {
                if str_or_empty(r, &["name"]).is_empty() {
                    errs.push(FieldError::required(&ip.child(key).child("name"), ""));
                }
            }
        }
    }
    errs
}

fn validate_volume_mounts(c: &Value, ctx: &PodCtx, path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    let mut mount_points = HashSet::new();
    for (i, m) in get_arr(c, &["volumeMounts"]).iter().enumerate() {
        let ip = path.index(i);
        let name = str_or_empty(m, &["name"]);
        if name.is_empty() {
            errs.push(FieldError::required(&ip.child("name"), ""));
        }
        if !ctx.volumes.contains(name) {
            errs.push(FieldError::not_found(&ip.child("name"), name));
        }
        let mount_path = str_or_empty(m, &["mountPath"]);
        if mount_path.is_empty() {
            errs.push(FieldError::required(&ip.child("mountPath"), ""));
        }
        if !mount_points.insert(mount_path.to_string()) {
            errs.push(FieldError::invalid(
                &ip.child("mountPath"),
                mount_path,
                "must be unique",
            ));
        }
        let sub_path = str_or_empty(m, &["subPath"]);
        if !sub_path.is_empty() {
            errs.extend(validate_local_descending_path(
                sub_path,
                &path.child("subPath"),
            ));
        }
    }
    errs
}

/// Upstream's `validateLocalDescendingPath`.
pub(crate) fn validate_local_descending_path(p: &str, path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    if p.starts_with('/') {
        errs.push(FieldError::invalid(path, p, "must be a relative path"));
    }
    if p.split(['/', '\\']).any(|part| part == "..") {
        errs.push(FieldError::invalid(path, p, "must not contain '..'"));
    }
    errs
}

/// A resource quantity as a number, `None` when it does not parse.
pub(crate) fn parse_quantity(v: &Value) -> Option<f64> {
    let s = match v {
        Value::String(s) => s.trim().to_string(),
        Value::Number(n) => return n.as_f64(),
        _ => return None,
    };
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(s.len());
    if split == 0 {
        return None;
    }
    let (num, suffix) = s.split_at(split);
    let n: f64 = num.parse().ok()?;
    let mult = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        e if e.starts_with(['e', 'E']) => 10f64.powi(e[1..].parse::<i32>().ok()?),
        _ => return None,
    };
    Some(n * mult)
}

fn show(v: &Value) -> String {
    v.as_str()
        .map(str::to_string)
        .unwrap_or_else(|| v.to_string())
}

fn validate_resource_name(name: &str, path: &FieldPath) -> ErrorList {
    let mut errs: ErrorList = names::is_qualified_name(name)
        .into_iter()
        .map(|m| FieldError::invalid(path, name, m))
        .collect();
    if !name.contains('/') {
        let standard = matches!(name, "cpu" | "memory" | "ephemeral-storage")
            || name.starts_with("hugepages-");
        if !standard {
            errs.push(FieldError::invalid(
                path,
                name,
                "must be a standard resource for containers",
            ));
        }
    }
    errs
}

/// Upstream's `ValidateContainerResourceRequirements` (names, quantities, requests <= limits).
pub(crate) fn validate_resources(res: Option<&Value>, path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    let Some(res) = res else {
        return errs;
    };
    let limits = get_obj(res, &["limits"]);
    for (kind, map) in [
        ("limits", limits),
        ("requests", get_obj(res, &["requests"])),
    ] {
        let Some(map) = map else { continue };
        for (name, q) in map {
            let p = path.child(kind).key(name);
            errs.extend(validate_resource_name(name, &p));
            match parse_quantity(q) {
                None => errs.push(FieldError::invalid(
                    &p,
                    show(q),
                    format!("quantities must match the regular expression '{QUANTITY_REGEX}'"),
                )),
                Some(n) if n < 0.0 => {
                    errs.push(FieldError::invalid(&p, show(q), super::meta::IS_NEGATIVE))
                }
                Some(n) if kind == "requests" => {
                    if let Some(limit) = limits.and_then(|l| l.get(name)) {
                        if parse_quantity(limit).is_some_and(|l| n > l) {
                            errs.push(FieldError::invalid(
                                &path.child("requests"),
                                show(q),
                                format!(
                                    "must be less than or equal to {name} limit of {}",
                                    show(limit)
                                ),
                            ));
                        }
                    }
                }
                Some(_) => {}
            }
        }
    }
    errs
}

/// Upstream's `validateHandler`: exactly one action of a probe or lifecycle hook.
fn validate_handler(h: &Value, kinds: &[&str], path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    let mut n = 0;
    for kind in kinds {
        let Some(action) = get(h, &[kind]) else {
            continue;
        };
        let p = path.child(kind);
        if n > 0 {
            errs.push(FieldError::forbidden(
                &p,
                "may not specify more than 1 handler type",
            ));
            continue;
        }
        n += 1;
        match *kind {
            "exec" if get_arr(action, &["command"]).is_empty() => {
                errs.push(FieldError::required(&p.child("command"), ""));
            }
            "httpGet" => {
                if str_or_empty(action, &["path"]).is_empty() {
                    errs.push(FieldError::required(&p.child("path"), ""));
                }
                errs.extend(validate_port_num_or_name(
                    get(action, &["port"]),
                    &p.child("port"),
                ));
                let scheme = str_or_empty(action, &["scheme"]);
                if scheme != "HTTP" && scheme != "HTTPS" {
                    errs.push(FieldError::not_supported(
                        &p.child("scheme"),
                        scheme,
                        &["HTTP", "HTTPS"],
                    ));
                }
                for hdr in get_arr(action, &["httpHeaders"]) {
                    let name = str_or_empty(hdr, &["name"]);
                    for m in names::is_http_header_name(name) {
                        errs.push(FieldError::invalid(&p.child("httpHeaders"), name, m));
                    }
                }
            }
            "tcpSocket" => errs.extend(validate_port_num_or_name(
                get(action, &["port"]),
                &p.child("port"),
            )),
            "grpc" => {
                let port = get_int(action, &["port"]).unwrap_or(0);
                errs.extend(
                    names::is_valid_port_num(port)
                        .into_iter()
                        .map(|m| FieldError::invalid(&p.child("port"), port, m)),
                );
            }
            _ => {}
        }
    }
    if n == 0 {
        errs.push(FieldError::required(path, "must specify a handler type"));
    }
    errs
}

fn validate_probe(probe: Option<&Value>, kind: &str, path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    let Some(probe) = probe else {
        return errs;
    };
    errs.extend(validate_handler(
        probe,
        &["exec", "httpGet", "tcpSocket", "grpc"],
        path,
    ));
    for f in [
        "initialDelaySeconds",
        "timeoutSeconds",
        "periodSeconds",
        "successThreshold",
        "failureThreshold",
    ] {
        errs.extend(nonnegative(get_int(probe, &[f]), &path.child(f)));
    }
    if let Some(t) = get_int(probe, &["terminationGracePeriodSeconds"]) {
        if kind == "readinessProbe" {
            errs.push(FieldError::invalid(
                &path.child("terminationGracePeriodSeconds"),
                t,
                "must not be set for readinessProbes",
            ));
        } else if t <= 0 {
            errs.push(FieldError::invalid(
                &path.child("terminationGracePeriodSeconds"),
                t,
                "must be greater than 0",
            ));
        }
    }
    if kind != "readinessProbe" {
        let st = get_int(probe, &["successThreshold"]).unwrap_or(0);
        if st != 1 {
            errs.push(FieldError::invalid(
                &path.child("successThreshold"),
                st,
                "must be 1",
            ));
        }
    }
    errs
}

fn validate_probes_and_lifecycle(c: &Value, path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    if let Some(lc) = get(c, &["lifecycle"]) {
        for hook in ["postStart", "preStop"] {
            if let Some(h) = get(lc, &[hook]) {
                errs.extend(validate_handler(
                    h,
                    &["exec", "httpGet", "tcpSocket", "sleep"],
                    &path.child("lifecycle").child(hook),
                ));
            }
        }
    }
    for kind in ["livenessProbe", "readinessProbe", "startupProbe"] {
        errs.extend(validate_probe(get(c, &[kind]), kind, &path.child(kind)));
    }
    errs
}

fn validate_security_context(sc: Option<&Value>, path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    let Some(sc) = sc else {
        return errs;
    };
    for f in ["runAsUser", "runAsGroup"] {
        if let Some(id) = get_int(sc, &[f]) {
            errs.extend(
                names::is_valid_id(id)
                    .into_iter()
                    .map(|m| FieldError::invalid(&path.child(f), id, m)),
            );
        }
    }
    if get(sc, &["allowPrivilegeEscalation"]).and_then(Value::as_bool) == Some(false)
        && get(sc, &["privileged"]).and_then(Value::as_bool) == Some(true)
    {
        errs.push(FieldError::invalid(
            path,
            sc.clone(),
            "cannot set `allowPrivilegeEscalation` to false and `privileged` to true",
        ));
    }
    errs
}

/// Upstream's `validateContainerCommon`.
pub(crate) fn validate_container_common(c: &Value, ctx: &PodCtx, path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    let name = str_or_empty(c, &["name"]);
    if name.is_empty() {
        errs.push(FieldError::required(&path.child("name"), ""));
    } else {
        errs.extend(
            names::is_dns1123_label(name)
                .into_iter()
                .map(|m| FieldError::invalid(&path.child("name"), name, m)),
        );
    }
    if str_or_empty(c, &["image"]).is_empty() {
        errs.push(FieldError::required(&path.child("image"), ""));
    }
    let tmp = str_or_empty(c, &["terminationMessagePolicy"]);
    match tmp {
        "File" | "FallbackToLogsOnError" => {}
        "" => errs.push(FieldError::required(
            &path.child("terminationMessagePolicy"),
            "",
        )),
        other => errs.push(FieldError::not_supported(
            &path.child("terminationMessagePolicy"),
            other,
            &["File", "FallbackToLogsOnError"],
        )),
    }
    errs.extend(validate_container_ports(c, &path.child("ports")));
    errs.extend(validate_env(c, path));
    errs.extend(validate_volume_mounts(c, ctx, &path.child("volumeMounts")));
    let pull = str_or_empty(c, &["imagePullPolicy"]);
    match pull {
        "Always" | "IfNotPresent" | "Never" => {}
        "" => errs.push(FieldError::required(&path.child("imagePullPolicy"), "")),
        other => errs.push(FieldError::not_supported(
            &path.child("imagePullPolicy"),
            other,
            &["Always", "IfNotPresent", "Never"],
        )),
    }
    errs.extend(validate_resources(
        get(c, &["resources"]),
        &path.child("resources"),
    ));
    errs.extend(validate_security_context(
        get(c, &["securityContext"]),
        &path.child("securityContext"),
    ));
    errs
}

fn check_host_port_conflicts(containers: &[Value], path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    let mut seen = HashMap::new();
    for (ci, c) in containers.iter().enumerate() {
        for (pi, p) in get_arr(c, &["ports"]).iter().enumerate() {
            let hp = get_int(p, &["hostPort"]).unwrap_or(0);
            if hp == 0 {
                continue;
            }
            let key = format!(
                "{}/{}/{hp}",
                str_or_empty(p, &["protocol"]),
                str_or_empty(p, &["hostIP"])
            );
            if seen.insert(key.clone(), ()).is_some() {
                errs.push(FieldError::duplicate(
                    &path.index(ci).child("ports").index(pi).child("hostPort"),
                    key,
                ));
            }
        }
    }
    errs
}

/// Upstream's `validateContainers` (regular containers).
pub(crate) fn validate_containers(spec: &Value, ctx: &PodCtx, path: &FieldPath) -> ErrorList {
    let containers = get_arr(spec, &["containers"]);
    if containers.is_empty() {
        return vec![FieldError::required(path, "")];
    }
    let mut errs = ErrorList::new();
    let mut names_seen = HashSet::new();
    for (i, c) in containers.iter().enumerate() {
        let p = path.index(i);
        errs.extend(validate_container_common(c, ctx, &p));
        let name = str_or_empty(c, &["name"]);
        if !names_seen.insert(name.to_string()) {
            errs.push(FieldError::duplicate(&p.child("name"), name));
        }
        errs.extend(validate_probes_and_lifecycle(c, &p));
        if get(c, &["restartPolicy"]).is_some() {
            errs.push(FieldError::forbidden(
                &p.child("restartPolicy"),
                "may not be set for non-init containers",
            ));
        }
    }
    errs.extend(check_host_port_conflicts(containers, path));
    errs
}

/// Upstream's `validateInitContainers`.
pub(crate) fn validate_init_containers(spec: &Value, ctx: &PodCtx, path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    let mut all_names: HashSet<String> = get_arr(spec, &["containers"])
        .iter()
        .map(|c| str_or_empty(c, &["name"]).to_string())
        .collect();
    for (i, c) in get_arr(spec, &["initContainers"]).iter().enumerate() {
        let p = path.index(i);
        errs.extend(validate_container_common(c, ctx, &p));
        let restart_always = match get_str(c, &["restartPolicy"]) {
            None => false,
            Some("Always") => true,
            Some(other) => {
                errs.push(FieldError::not_supported(
                    &p.child("restartPolicy"),
                    other,
                    &["Always"],
                ));
                false
            }
        };
        let name = str_or_empty(c, &["name"]);
        if all_names.contains(name) {
            errs.push(FieldError::duplicate(&p.child("name"), name));
        } else if !name.is_empty() {
            all_names.insert(name.to_string());
        }
        errs.extend(check_host_port_conflicts(std::slice::from_ref(c), path));
        if restart_always {
            errs.extend(validate_probes_and_lifecycle(c, &p));
        } else {
            for f in [
                "lifecycle",
                "livenessProbe",
                "readinessProbe",
                "startupProbe",
            ] {
                if get(c, &[f]).is_some() {
                    errs.push(FieldError::forbidden(
                        &p.child(f),
                        "may not be set for init containers without restartPolicy=Always",
                    ));
                }
            }
        }
    }
    errs
}
