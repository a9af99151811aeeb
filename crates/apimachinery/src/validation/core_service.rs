//! Services (upstream `pkg/apis/core/validation/validation.go`: `ValidateService`,
//! `ValidateServiceUpdate`, `validateServicePort`, the cluster IP and traffic policy checks).
//!
//! Deliberately different: cluster IPs, IP families and health-check node ports are allocated by the
//! server, so they are checked when present but never required; an update that leaves `clusterIP`
//! and `clusterIPs` out keeps the allocated ones (upstream's strategy copies them before validating).

use std::collections::HashSet;

use serde_json::Value;

use super::core_container::{validate_port_num_or_name, validate_protocol};
use super::field::{ErrorList, FieldError, FieldPath};
use super::json::{get, get_arr, get_int, get_str, str_or_empty};
use super::meta::{self, validate_labels, NameRule, FIELD_IMMUTABLE};
use super::names;

fn root(name: &str) -> FieldPath {
    FieldPath::root(name)
}

fn cluster_ips(svc: &Value) -> Vec<&str> {
    let ips: Vec<&str> = get_arr(svc, &["spec", "clusterIPs"])
        .iter()
        .filter_map(Value::as_str)
        .collect();
    if ips.is_empty() {
        get_str(svc, &["spec", "clusterIP"])
            .filter(|s| !s.is_empty())
            .into_iter()
            .collect()
    } else {
        ips
    }
}

fn is_headless(svc: &Value) -> bool {
    cluster_ips(svc) == ["None"]
}

fn externally_accessible(svc: &Value) -> bool {
    match str_or_empty(svc, &["spec", "type"]) {
        "LoadBalancer" | "NodePort" => true,
        "ClusterIP" => !get_arr(svc, &["spec", "externalIPs"]).is_empty(),
        _ => false,
    }
}

fn validate_service_port(
    p: &Value,
    require_name: bool,
    seen: &mut HashSet<String>,
    path: &FieldPath,
) -> ErrorList {
    let mut errs = ErrorList::new();
    let name = str_or_empty(p, &["name"]);
    if require_name && name.is_empty() {
        errs.push(FieldError::required(&path.child("name"), ""));
    } else if !name.is_empty() {
        errs.extend(
            names::is_dns1123_label(name)
                .into_iter()
                .map(|m| FieldError::invalid(&path.child("name"), name, m)),
        );
        if !seen.insert(name.to_string()) {
            errs.push(FieldError::duplicate(&path.child("name"), name));
        }
    }
    let port = get_int(p, &["port"]).unwrap_or(0);
    errs.extend(
        names::is_valid_port_num(port)
            .into_iter()
            .map(|m| FieldError::invalid(&path.child("port"), port, m)),
    );
    errs.extend(validate_protocol(p, &path.child("protocol")));
    errs.extend(validate_port_num_or_name(
        get(p, &["targetPort"]),
        &path.child("targetPort"),
    ));
    if let Some(ap) = get_str(p, &["appProtocol"]) {
        errs.extend(
            names::is_qualified_name(ap)
                .into_iter()
                .map(|m| FieldError::invalid(&path.child("appProtocol"), ap, m)),
        );
    }
    errs
}

fn validate_cluster_ip_fields(svc: &Value, sp: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    if str_or_empty(svc, &["spec", "type"]) == "ExternalName" {
        return errs;
    }
    let ips = get_arr(svc, &["spec", "clusterIPs"]);
    let ip = str_or_empty(svc, &["spec", "clusterIP"]);
    if let Some(first) = ips.first().and_then(Value::as_str) {
        if first != ip {
            errs.push(FieldError::invalid(
                &sp.child("clusterIPs"),
                Value::from(ips.to_vec()),
                "first value must match `clusterIP`",
            ));
        }
    }
    for (i, v) in ips.iter().enumerate() {
        let v = v.as_str().unwrap_or("");
        if v == "None" && ips.len() == 1 {
            continue;
        }
        errs.extend(
            names::ip_errors(v)
                .into_iter()
                .map(|m| FieldError::invalid(&sp.child("clusterIPs").index(i), v, m)),
        );
    }
    if let Some(p) = get_str(svc, &["spec", "ipFamilyPolicy"]) {
        let valid = ["PreferDualStack", "RequireDualStack", "SingleStack"];
        if !valid.contains(&p) {
            errs.push(FieldError::not_supported(
                &sp.child("ipFamilyPolicy"),
                p,
                &valid,
            ));
        }
    }
    let mut seen = HashSet::new();
    for (i, f) in get_arr(svc, &["spec", "ipFamilies"]).iter().enumerate() {
        let f = f.as_str().unwrap_or("");
        let p = sp.child("ipFamilies").index(i);
        if f != "IPv4" && f != "IPv6" {
            errs.push(FieldError::not_supported(&p, f, &["IPv4", "IPv6"]));
        } else if !seen.insert(f) {
            errs.push(FieldError::duplicate(&p, f));
        }
    }
    errs
}

/// Upstream's `ValidateService`.
pub(crate) fn validate_service(svc: &Value) -> ErrorList {
    let mut errs = meta::validate_object_meta(svc, NameRule::Dns1035, true);
    let sp = root("spec");
    let ty = str_or_empty(svc, &["spec", "type"]);
    let ports = get_arr(svc, &["spec", "ports"]);
    let headless = is_headless(svc);
    if ports.is_empty() && !headless && ty != "ExternalName" {
        errs.push(FieldError::required(&sp.child("ports"), ""));
    }
    match ty {
        "LoadBalancer" | "NodePort" if headless => errs.push(FieldError::invalid(
            &sp.child("clusterIPs").index(0),
            "None",
            format!("may not be set to 'None' for {ty} services"),
        )),
        "ExternalName" => {
            if !get_arr(svc, &["spec", "clusterIPs"]).is_empty() {
                errs.push(FieldError::forbidden(
                    &sp.child("clusterIPs"),
                    "may not be set for ExternalName services",
                ));
            }
            if !get_arr(svc, &["spec", "ipFamilies"]).is_empty() {
                errs.push(FieldError::forbidden(
                    &sp.child("ipFamilies"),
                    "may not be set for ExternalName services",
                ));
            }
            if get(svc, &["spec", "ipFamilyPolicy"]).is_some() {
                errs.push(FieldError::forbidden(
                    &sp.child("ipFamilyPolicy"),
                    "may not be set for ExternalName services",
                ));
            }
            let cname = str_or_empty(svc, &["spec", "externalName"]);
            let cname = cname.strip_suffix('.').unwrap_or(cname);
            if cname.is_empty() {
                errs.push(FieldError::required(&sp.child("externalName"), ""));
            } else {
                errs.extend(
                    names::is_dns1123_subdomain(cname)
                        .into_iter()
                        .map(|m| FieldError::invalid(&sp.child("externalName"), cname, m)),
                );
            }
        }
        _ => {}
    }
    let mut seen = HashSet::new();
    for (i, p) in ports.iter().enumerate() {
        errs.extend(validate_service_port(
            p,
            ports.len() > 1,
            &mut seen,
            &sp.child("ports").index(i),
        ));
    }
    errs.extend(validate_labels(
        get(svc, &["spec", "selector"]),
        &sp.child("selector"),
    ));
    let affinity = str_or_empty(svc, &["spec", "sessionAffinity"]);
    match affinity {
        "" => errs.push(FieldError::required(&sp.child("sessionAffinity"), "")),
        "ClientIP" => {
            let cp = sp.child("sessionAffinityConfig");
            let msg = "when session affinity type is ClientIP";
            match get(svc, &["spec", "sessionAffinityConfig"]) {
                None => errs.push(FieldError::required(&cp, msg)),
                Some(c) => match get(c, &["clientIP"]) {
                    None => errs.push(FieldError::required(&cp.child("clientIP"), msg)),
                    Some(ci) => match get_int(ci, &["timeoutSeconds"]) {
                        None => errs.push(FieldError::required(
                            &cp.child("clientIP").child("timeoutSeconds"),
                            msg,
                        )),
                        Some(t) if t <= 0 || t > 86400 => errs.push(FieldError::invalid(
                            &cp.child("clientIP").child("timeoutSeconds"),
                            t,
                            "must be greater than 0 and less than 86400",
                        )),
                        Some(_) => {}
                    },
                },
            }
        }
        "None" => {
            if get(svc, &["spec", "sessionAffinityConfig"]).is_some() {
                errs.push(FieldError::forbidden(
                    &sp.child("sessionAffinityConfig"),
                    "must not be set when session affinity is None",
                ));
            }
        }
        other => errs.push(FieldError::not_supported(
            &sp.child("sessionAffinity"),
            other,
            &["ClientIP", "None"],
        )),
    }
    errs.extend(validate_cluster_ip_fields(svc, &sp));
    for (i, ip) in get_arr(svc, &["spec", "externalIPs"]).iter().enumerate() {
        let ip = ip.as_str().unwrap_or("");
        errs.extend(
            names::ip_errors(ip)
                .into_iter()
                .map(|m| FieldError::invalid(&sp.child("externalIPs").index(i), ip, m)),
        );
    }
    let types = ["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"];
    if ty.is_empty() {
        errs.push(FieldError::required(&sp.child("type"), ""));
    } else if !types.contains(&ty) {
        errs.push(FieldError::not_supported(&sp.child("type"), ty, &types));
    }
    let mut node_ports = HashSet::new();
    let mut port_keys = HashSet::new();
    for (i, p) in ports.iter().enumerate() {
        let pp = sp.child("ports").index(i);
        let node_port = get_int(p, &["nodePort"]).unwrap_or(0);
        let proto = str_or_empty(p, &["protocol"]);
        if ty == "ClusterIP" && node_port != 0 {
            errs.push(FieldError::forbidden(
                &pp.child("nodePort"),
                "may not be used when `type` is 'ClusterIP'",
            ));
        }
        if node_port != 0 && !node_ports.insert((proto.to_string(), node_port)) {
            errs.push(FieldError::duplicate(&pp.child("nodePort"), node_port));
        }
        let port = get_int(p, &["port"]).unwrap_or(0);
        if !port_keys.insert((proto.to_string(), port)) {
            errs.push(FieldError::duplicate(
                &pp,
                serde_json::json!({"port": port, "protocol": proto}),
            ));
        }
    }
    let ranges = get_arr(svc, &["spec", "loadBalancerSourceRanges"]);
    if !ranges.is_empty() {
        let rp = sp.child("LoadBalancerSourceRanges");
        if ty != "LoadBalancer" {
            errs.push(FieldError::forbidden(
                &rp,
                "may only be used when `type` is 'LoadBalancer'",
            ));
        }
        for (i, r) in ranges.iter().enumerate() {
            let r = r.as_str().unwrap_or("").trim();
            if !names::is_cidr(r) {
                errs.push(FieldError::invalid(
                    &rp.index(i),
                    r,
                    "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
                ));
            }
        }
    }
    let alloc = get(svc, &["spec", "allocateLoadBalancerNodePorts"]);
    if alloc.is_some() && ty != "LoadBalancer" {
        errs.push(FieldError::forbidden(
            &sp.child("allocateLoadBalancerNodePorts"),
            "may only be used when `type` is 'LoadBalancer'",
        ));
    }
    if ty == "LoadBalancer" && alloc.is_none() {
        errs.push(FieldError::required(
            &root("allocateLoadBalancerNodePorts"),
            "",
        ));
    }
    let etp = str_or_empty(svc, &["spec", "externalTrafficPolicy"]);
    if !externally_accessible(svc) {
        if !etp.is_empty() {
            errs.push(FieldError::invalid(
                &sp.child("externalTrafficPolicy"),
                etp,
                "may only be set for externally-accessible services",
            ));
        }
    } else if etp.is_empty() {
        errs.push(FieldError::required(&sp.child("externalTrafficPolicy"), ""));
    } else if etp != "Cluster" && etp != "Local" {
        errs.push(FieldError::not_supported(
            &sp.child("externalTrafficPolicy"),
            etp,
            &["Cluster", "Local"],
        ));
    }
    let hc = get_int(svc, &["spec", "healthCheckNodePort"]).unwrap_or(0);
    if hc != 0 {
        if !(ty == "LoadBalancer" && etp == "Local") {
            errs.push(FieldError::invalid(
                &sp.child("healthCheckNodePort"),
                hc,
                "may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'",
            ));
        } else {
            errs.extend(
                names::is_valid_port_num(hc)
                    .into_iter()
                    .map(|m| FieldError::invalid(&sp.child("healthCheckNodePort"), hc, m)),
            );
        }
    }
    match get_str(svc, &["spec", "internalTrafficPolicy"]) {
        None if matches!(ty, "NodePort" | "LoadBalancer" | "ClusterIP") => {
            errs.push(FieldError::required(&sp.child("internalTrafficPolicy"), ""))
        }
        Some(p) if p != "Cluster" && p != "Local" => errs.push(FieldError::not_supported(
            &sp.child("internalTrafficPolicy"),
            p,
            &["Cluster", "Local"],
        )),
        _ => {}
    }
    if let Some(td) = get_str(svc, &["spec", "trafficDistribution"]) {
        if td != "PreferClose" {
            errs.push(FieldError::not_supported(
                &sp.child("trafficDistribution"),
                td,
                &["PreferClose"],
            ));
        }
    }
    errs
}

/// Upstream's `ValidateServiceUpdate`.
pub(crate) fn validate_service_update(new: &Value, old: &Value) -> ErrorList {
    let mut errs = meta::validate_object_meta_update(new, old, true);
    let external_name = |s: &Value| str_or_empty(s, &["spec", "type"]) == "ExternalName";
    let new_has_ip =
        get(new, &["spec", "clusterIP"]).is_some() || get(new, &["spec", "clusterIPs"]).is_some();
    let both_headless = is_headless(new) && is_headless(old);
    if !(external_name(new) || external_name(old) || !new_has_ip || both_headless) {
        let (n, o) = (cluster_ips(new), cluster_ips(old));
        let p = root("spec").child("clusterIPs");
        let shown = Value::from(n.clone());
        if n.len() == o.len() {
            for (i, ip) in o.iter().enumerate() {
                if n[i] != *ip {
                    errs.push(FieldError::invalid(
                        &p.index(i),
                        shown.clone(),
                        "may not change once set",
                    ));
                }
            }
        } else if o.len() > n.len() {
            if n.is_empty() {
                errs.push(FieldError::invalid(
                    &p.index(0),
                    shown.clone(),
                    "primary clusterIP can not be unset",
                ));
            } else if n[0] != o[0] {
                errs.push(FieldError::invalid(
                    &p.index(0),
                    shown.clone(),
                    "may not change once set",
                ));
            }
            if n.len() == 1 && str_or_empty(new, &["spec", "ipFamilyPolicy"]) != "SingleStack" {
                errs.push(FieldError::invalid(
                    &p.index(0),
                    shown,
                    "`ipFamilyPolicy` must be set to 'SingleStack' when releasing the secondary clusterIP",
                ));
            }
        } else if !o.is_empty() && n[0] != o[0] {
            errs.push(FieldError::invalid(
                &p.index(0),
                shown,
                "may not change once set",
            ));
        }
    }
    let needs_hc = |s: &Value| {
        str_or_empty(s, &["spec", "type"]) == "LoadBalancer"
            && str_or_empty(s, &["spec", "externalTrafficPolicy"]) == "Local"
    };
    if needs_hc(new)
        && needs_hc(old)
        && get(new, &["spec", "healthCheckNodePort"]).is_some()
        && get_int(new, &["spec", "healthCheckNodePort"])
            != get_int(old, &["spec", "healthCheckNodePort"])
    {
        errs.push(FieldError::forbidden(
            &root("spec").child("healthCheckNodePort"),
            FIELD_IMMUTABLE,
        ));
    }
    errs.extend(
        validate_service(new)
            .into_iter()
            .filter(|e| !e.field.as_str().starts_with("metadata.")),
    );
    errs
}
