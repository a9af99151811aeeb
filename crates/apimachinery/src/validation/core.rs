//! Core kinds other than pods and services (upstream `pkg/apis/core/validation/validation.go`:
//! `ValidateConfigMap`, `ValidateSecret`, `ValidateNamespace`, `ValidateNode`, `ValidateEndpoints`,
//! `ValidateReplicationController`, the legacy checks of `ValidateEventCreate`, and
//! `ValidatePersistentVolumeClaim` in part).

use std::collections::HashSet;

use serde_json::{Map, Value};

use super::b64;
use super::core_container::validate_protocol;
use super::core_pod::validate_pod_template_spec;
use super::field::{ErrorList, FieldError, FieldPath};
use super::json::{get, get_arr, get_int, get_obj, get_str, semantic_eq, str_or_empty};
use super::meta::{self, nonnegative, validate_label_name, NameRule, Selector, FIELD_IMMUTABLE};
use super::names;

/// Upstream's `core.MaxSecretSize` (also the ConfigMap limit).
const MAX_SECRET_SIZE: usize = 1024 * 1024;

fn root(name: &str) -> FieldPath {
    FieldPath::root(name)
}

/// Sizes of `data` values; base64 for Secrets and `binaryData`.
fn decoded_len(v: &Value) -> usize {
    let s = v.as_str().unwrap_or("");
    b64::decode(s).map(|b| b.len()).unwrap_or(s.len())
}

/// Upstream's `ValidateConfigMap`.
pub(crate) fn validate_config_map(cm: &Value) -> ErrorList {
    let mut errs = meta::validate_object_meta(cm, NameRule::Subdomain, true);
    let mut total = 0usize;
    let binary = get_obj(cm, &["binaryData"]);
    for (k, v) in get_obj(cm, &["data"]).into_iter().flatten() {
        let p = root("data").key(k);
        errs.extend(
            names::is_config_map_key(k)
                .into_iter()
                .map(|m| FieldError::invalid(&p, k.as_str(), m)),
        );
        if binary.is_some_and(|b| b.contains_key(k)) {
            errs.push(FieldError::invalid(
                &p,
                k.as_str(),
                "duplicate of key present in binaryData",
            ));
        }
        total += v.as_str().map(str::len).unwrap_or(0);
    }
    for (k, v) in binary.into_iter().flatten() {
        let p = root("binaryData").key(k);
        errs.extend(
            names::is_config_map_key(k)
                .into_iter()
                .map(|m| FieldError::invalid(&p, k.as_str(), m)),
        );
        total += decoded_len(v);
    }
    if total > MAX_SECRET_SIZE {
        errs.push(FieldError::too_long(&root(""), MAX_SECRET_SIZE));
    }
    errs
}

fn immutable_flag_errors(new: &Value, old: &Value, fields: &[&str]) -> ErrorList {
    let mut errs = ErrorList::new();
    if get(old, &["immutable"]).and_then(Value::as_bool) == Some(true) {
        if get(new, &["immutable"]).and_then(Value::as_bool) != Some(true) {
            errs.push(FieldError::forbidden(
                &root("immutable"),
                "field is immutable when `immutable` is set",
            ));
        }
        for f in fields {
            if !semantic_eq(get(new, &[f]), get(old, &[f])) {
                errs.push(FieldError::forbidden(
                    &root(f),
                    "field is immutable when `immutable` is set",
                ));
            }
        }
    }
    errs
}

pub(crate) fn validate_config_map_update(new: &Value, old: &Value) -> ErrorList {
    let mut errs = meta::validate_object_meta_update(new, old, true);
    errs.extend(immutable_flag_errors(new, old, &["data", "binaryData"]));
    errs.extend(
        validate_config_map(new)
            .into_iter()
            .filter(|e| !e.field.as_str().starts_with("metadata.")),
    );
    errs
}

/// Upstream's `ValidateSecret`. `stringData` keys count as `data` keys (upstream merges them first).
pub(crate) fn validate_secret(secret: &Value) -> ErrorList {
    let mut errs = meta::validate_object_meta(secret, NameRule::Subdomain, true);
    let dp = root("data");
    let mut data: Map<String, Value> = get_obj(secret, &["data"]).cloned().unwrap_or_default();
    for (k, v) in get_obj(secret, &["stringData"]).into_iter().flatten() {
        data.insert(
            k.clone(),
            Value::from(b64::encode(v.as_str().unwrap_or("").as_bytes())),
        );
    }
    let mut total = 0usize;
    for (k, v) in &data {
        errs.extend(
            names::is_config_map_key(k)
                .into_iter()
                .map(|m| FieldError::invalid(&dp.key(k), k.as_str(), m)),
        );
        total += decoded_len(v);
    }
    if total > MAX_SECRET_SIZE {
        errs.push(FieldError::too_long(&dp, MAX_SECRET_SIZE));
    }
    let has = |k: &str| data.contains_key(k);
    match str_or_empty(secret, &["type"]) {
        "kubernetes.io/service-account-token"
            if str_or_empty(
                secret,
                &[
                    "metadata",
                    "annotations",
                    "kubernetes.io/service-account.name",
                ],
            )
            .is_empty() =>
        {
            errs.push(FieldError::required(
                &root("metadata")
                    .child("annotations")
                    .key("kubernetes.io/service-account.name"),
                "",
            ));
        }
        t @ ("kubernetes.io/dockercfg" | "kubernetes.io/dockerconfigjson") => {
            let key = if t == "kubernetes.io/dockercfg" {
                ".dockercfg"
            } else {
                ".dockerconfigjson"
            };
            match data.get(key) {
                None => errs.push(FieldError::required(&dp.key(key), "")),
                Some(v) => {
                    let bytes = b64::decode(v.as_str().unwrap_or("")).unwrap_or_default();
                    if let Err(e) = serde_json::from_slice::<Map<String, Value>>(&bytes) {
                        errs.push(FieldError::invalid(
                            &dp.key(key),
                            "<secret contents redacted>",
                            e.to_string(),
                        ));
                    }
                }
            }
        }
        "kubernetes.io/basic-auth" if !has("username") && !has("password") => {
            errs.push(FieldError::required(&dp.key("username"), ""));
            errs.push(FieldError::required(&dp.key("password"), ""));
        }
        "kubernetes.io/ssh-auth"
            if data
                .get("ssh-privatekey")
                .is_none_or(|v| decoded_len(v) == 0) =>
        {
            errs.push(FieldError::required(&dp.key("ssh-privatekey"), ""));
        }
        "kubernetes.io/tls" => {
            for key in ["tls.crt", "tls.key"] {
                if !has(key) {
                    errs.push(FieldError::required(&dp.key(key), ""));
                }
            }
        }
        _ => {}
    }
    errs
}

pub(crate) fn validate_secret_update(new: &Value, old: &Value) -> ErrorList {
    let mut errs = meta::validate_object_meta_update(new, old, true);
    let (nt, ot) = (str_or_empty(new, &["type"]), str_or_empty(old, &["type"]));
    if nt != ot {
        errs.push(FieldError::invalid(&root("type"), nt, FIELD_IMMUTABLE));
    }
    errs.extend(immutable_flag_errors(new, old, &["data"]));
    errs.extend(
        validate_secret(new)
            .into_iter()
            .filter(|e| !e.field.as_str().starts_with("metadata.")),
    );
    errs
}

/// Upstream's `ValidateNamespace`.
pub(crate) fn validate_namespace(ns: &Value) -> ErrorList {
    let mut errs = meta::validate_object_meta(ns, NameRule::Label, true);
    let p = root("spec").child("finalizers");
    for f in get_arr(ns, &["spec", "finalizers"])
        .iter()
        .filter_map(Value::as_str)
    {
        errs.extend(
            names::is_qualified_name(f)
                .into_iter()
                .map(|m| FieldError::invalid(&p, f, m)),
        );
        errs.extend(meta::validate_kube_finalizer_name(f, &p));
    }
    errs
}

fn validate_taints(taints: &[Value], path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    let mut seen = HashSet::new();
    for (i, t) in taints.iter().enumerate() {
        let p = path.index(i);
        let key = str_or_empty(t, &["key"]);
        errs.extend(validate_label_name(key, &p.child("key")));
        let value = str_or_empty(t, &["value"]);
        let msgs = names::is_label_value(value);
        if !msgs.is_empty() {
            errs.push(FieldError::invalid(
                &p.child("value"),
                value,
                msgs.join(";"),
            ));
        }
        let effect = str_or_empty(t, &["effect"]);
        let effects = ["NoSchedule", "PreferNoSchedule", "NoExecute"];
        if effect.is_empty() {
            errs.push(FieldError::required(&p.child("effect"), ""));
        } else if !effects.contains(&effect) {
            errs.push(FieldError::not_supported(
                &p.child("effect"),
                effect,
                &effects,
            ));
        }
        if !seen.insert((effect.to_string(), key.to_string())) {
            let mut e = FieldError::duplicate(&p, t.clone());
            e.detail = "taints must be unique by key and effect pair".into();
            errs.push(e);
        }
    }
    errs
}

/// Upstream's `ValidateNode` (spec only; status fields are optional).
pub(crate) fn validate_node(node: &Value) -> ErrorList {
    let mut errs = meta::validate_object_meta(node, NameRule::Subdomain, true);
    let sp = root("spec");
    let mut cidrs: Vec<&str> = get_arr(node, &["spec", "podCIDRs"])
        .iter()
        .filter_map(Value::as_str)
        .collect();
    if cidrs.is_empty() {
        cidrs.extend(get_str(node, &["spec", "podCIDR"]).filter(|s| !s.is_empty()));
    }
    for (i, c) in cidrs.iter().enumerate() {
        if !names::is_cidr(c) {
            errs.push(FieldError::invalid(
                &sp.child("podCIDRs").index(i),
                *c,
                "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
            ));
        }
    }
    errs.extend(validate_taints(
        get_arr(node, &["spec", "taints"]),
        &sp.child("taints"),
    ));
    errs
}

pub(crate) fn validate_node_update(new: &Value, old: &Value) -> ErrorList {
    let mut errs = meta::validate_object_meta_update(new, old, true);
    errs.extend(
        validate_node(new)
            .into_iter()
            .filter(|e| !e.field.as_str().starts_with("metadata.")),
    );
    let old_cidrs = get_arr(old, &["spec", "podCIDRs"]);
    if !old_cidrs.is_empty()
        && !semantic_eq(
            get(new, &["spec", "podCIDRs"]),
            get(old, &["spec", "podCIDRs"]),
        )
    {
        errs.push(FieldError::forbidden(
            &root("spec").child("podCIDRs"),
            "node updates may not change podCIDR except from \"\" to valid",
        ));
    }
    let old_pid = str_or_empty(old, &["spec", "providerID"]);
    if !old_pid.is_empty() && old_pid != str_or_empty(new, &["spec", "providerID"]) {
        errs.push(FieldError::forbidden(
            &root("spec").child("providerID"),
            "node updates may not change providerID except from \"\" to valid",
        ));
    }
    errs
}

fn non_special_ip(ip: &str, path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    let Ok(addr) = ip.parse::<std::net::IpAddr>() else {
        return errs;
    };
    if addr.is_unspecified() {
        errs.push(FieldError::invalid(
            path,
            ip,
            format!("may not be unspecified ({ip})"),
        ));
    }
    if addr.is_loopback() {
        errs.push(FieldError::invalid(
            path,
            ip,
            "may not be in the loopback range (127.0.0.0/8, ::1/128)",
        ));
    }
    let link_local = match addr {
        std::net::IpAddr::V4(a) => a.is_link_local(),
        std::net::IpAddr::V6(a) => (a.segments()[0] & 0xffc0) == 0xfe80,
    };
    if link_local {
        errs.push(FieldError::invalid(
            path,
            ip,
            "may not be in the link-local range (169.254.0.0/16, fe80::/10)",
        ));
    }
    errs
}

/// Upstream's `ValidateEndpoints`.
pub(crate) fn validate_endpoints(ep: &Value) -> ErrorList {
    let mut errs = meta::validate_object_meta(ep, NameRule::Subdomain, true);
    for (i, ss) in get_arr(ep, &["subsets"]).iter().enumerate() {
        let p = root("subsets").index(i);
        let (addrs, not_ready) = (
            get_arr(ss, &["addresses"]),
            get_arr(ss, &["notReadyAddresses"]),
        );
        if addrs.is_empty() && not_ready.is_empty() {
            errs.push(FieldError::required(
                &p,
                "must specify `addresses` or `notReadyAddresses`",
            ));
        }
        for (kind, list) in [("addresses", addrs), ("notReadyAddresses", not_ready)] {
            for (j, a) in list.iter().enumerate() {
                let ap = p.child(kind).index(j);
                let ip = str_or_empty(a, &["ip"]);
                errs.extend(
                    names::ip_errors(ip)
                        .into_iter()
                        .map(|m| FieldError::invalid(&ap.child("ip"), ip, m)),
                );
                if let Some(h) = get_str(a, &["hostname"]).filter(|h| !h.is_empty()) {
                    errs.extend(
                        names::is_dns1123_label(h)
                            .into_iter()
                            .map(|m| FieldError::invalid(&ap.child("hostname"), h, m)),
                    );
                }
                if let Some(n) = get_str(a, &["nodeName"]) {
                    errs.extend(
                        names::is_dns1123_subdomain(n)
                            .into_iter()
                            .map(|m| FieldError::invalid(&ap.child("nodeName"), n, m)),
                    );
                }
                errs.extend(non_special_ip(ip, &ap.child("ip")));
            }
        }
        let ports = get_arr(ss, &["ports"]);
        for (j, port) in ports.iter().enumerate() {
            let pp = p.child("ports").index(j);
            let name = str_or_empty(port, &["name"]);
            if ports.len() > 1 && name.is_empty() {
                errs.push(FieldError::required(&pp.child("name"), ""));
            } else if !name.is_empty() {
                errs.extend(
                    names::is_dns1123_label(name)
                        .into_iter()
                        .map(|m| FieldError::invalid(&pp.child("name"), name, m)),
                );
            }
            let n = get_int(port, &["port"]).unwrap_or(0);
            errs.extend(
                names::is_valid_port_num(n)
                    .into_iter()
                    .map(|m| FieldError::invalid(&pp.child("port"), n, m)),
            );
            errs.extend(validate_protocol(port, &pp.child("protocol")));
        }
    }
    errs
}

/// The legacy checks of upstream's `ValidateEventCreate` for `v1` Events (no object meta checks).
pub(crate) fn validate_core_event(ev: &Value) -> ErrorList {
    let mut errs = ErrorList::new();
    let ns = str_or_empty(ev, &["metadata", "namespace"]);
    let ins = str_or_empty(ev, &["involvedObject", "namespace"]);
    let p = root("involvedObject").child("namespace");
    if get(ev, &["eventTime"]).is_none() {
        if (ins.is_empty() && !ns.is_empty() && ns != "default") || (!ins.is_empty() && ns != ins) {
            errs.push(FieldError::invalid(
                &p,
                ins,
                "does not match event.namespace",
            ));
        }
    } else {
        if ins.is_empty() && ns != "default" && ns != "kube-system" {
            errs.push(FieldError::invalid(
                &p,
                ins,
                "does not match event.namespace",
            ));
        }
        errs.extend(validate_event_reporting(ev, "reportingComponent"));
    }
    for m in names::is_dns1123_subdomain(ns) {
        errs.push(FieldError::invalid(&root("namespace"), ns, m));
    }
    errs
}

/// The checks upstream's `ValidateEventCreate` makes of an event with `eventTime` (core `v1`) or of any
/// `events.k8s.io` event: the reporter (`reporter_key`: `reportingComponent` in core, `reportingController`
/// in `events.k8s.io`) is a required qualified name; `reportingInstance`, `action` and `reason` are
/// required and at most 128 characters.
pub(super) fn validate_event_reporting(ev: &Value, reporter_key: &str) -> ErrorList {
    let mut errs = ErrorList::new();
    let reporter = str_or_empty(ev, &[reporter_key]);
    if reporter.is_empty() {
        errs.push(FieldError::required(&root(reporter_key), ""));
    }
    errs.extend(
        names::is_qualified_name(reporter)
            .into_iter()
            .map(|m| FieldError::invalid(&root(reporter_key), reporter, m)),
    );
    for (key, max) in [("reportingInstance", 128), ("action", 128), ("reason", 128)] {
        let v = str_or_empty(ev, &[key]);
        if v.is_empty() {
            errs.push(FieldError::required(&root(key), ""));
        } else if v.len() > max {
            errs.push(FieldError::invalid(
                &root(key),
                "",
                format!("can have at most {max} characters"),
            ));
        }
    }
    errs
}

/// Upstream's `ValidateReplicationController` spec part.
pub(crate) fn validate_replication_controller(rc: &Value) -> ErrorList {
    let mut errs = ErrorList::new();
    let sp = root("spec");
    errs.extend(nonnegative(
        get_int(rc, &["spec", "minReadySeconds"]),
        &sp.child("minReadySeconds"),
    ));
    let selector = get_obj(rc, &["spec", "selector"]);
    if selector.is_none_or(Map::is_empty) {
        errs.push(FieldError::required(&sp.child("selector"), ""));
    }
    errs.extend(nonnegative(
        get_int(rc, &["spec", "replicas"]),
        &sp.child("replicas"),
    ));
    let tp = sp.child("template");
    match get(rc, &["spec", "template"]) {
        None => errs.push(FieldError::required(&tp, "")),
        Some(t) => {
            if let Some(sel) = selector.filter(|s| !s.is_empty()) {
                let as_selector = Selector::parse(Some(&serde_json::json!({ "matchLabels": sel })));
                let labels = get_obj(t, &["metadata", "labels"]);
                if as_selector.is_ok_and(|s| !s.matches(labels)) {
                    errs.push(FieldError::invalid(
                        &tp.child("metadata").child("labels"),
                        labels.cloned().map(Value::Object).unwrap_or(Value::Null),
                        "`selector` does not match template `labels`",
                    ));
                }
            }
            errs.extend(validate_pod_template_spec(Some(t), &tp));
            let rp = str_or_empty(t, &["spec", "restartPolicy"]);
            if rp != "Always" {
                errs.push(FieldError::not_supported(
                    &tp.child("spec").child("restartPolicy"),
                    rp,
                    &["Always"],
                ));
            }
            if get(t, &["spec", "activeDeadlineSeconds"]).is_some() {
                errs.push(FieldError::forbidden(
                    &tp.child("spec").child("activeDeadlineSeconds"),
                    "activeDeadlineSeconds in ReplicationController is not Supported",
                ));
            }
        }
    }
    errs
}

/// The create part of upstream's `ValidatePersistentVolumeClaim` (spec basics only).
pub(crate) fn validate_pvc_spec(spec: Option<&Value>, path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    let empty = Value::Object(Map::new());
    let spec = spec.unwrap_or(&empty);
    let modes = get_arr(spec, &["accessModes"]);
    if modes.is_empty() {
        errs.push(FieldError::required(
            &path.child("accessModes"),
            "at least 1 access mode is required",
        ));
    }
    let valid = [
        "ReadOnlyMany",
        "ReadWriteMany",
        "ReadWriteOnce",
        "ReadWriteOncePod",
    ];
    for m in modes {
        let m = m.as_str().unwrap_or("");
        if !valid.contains(&m) {
            errs.push(FieldError::not_supported(
                &path.child("accessModes"),
                m,
                &valid,
            ));
        }
    }
    if get(spec, &["resources", "requests", "storage"]).is_none() {
        errs.push(FieldError::required(
            &path.child("resources").key("storage"),
            "",
        ));
    }
    errs.extend(super::storage_vac::pvc_spec_class_name(spec, path));
    if let Some(vm) = get_str(spec, &["volumeMode"]) {
        if vm != "Block" && vm != "Filesystem" {
            errs.push(FieldError::not_supported(
                &path.child("volumeMode"),
                vm,
                &["Block", "Filesystem"],
            ));
        }
    }
    errs.extend(meta::validate_label_selector(
        get(spec, &["selector"]),
        &path.child("selector"),
    ));
    errs
}
