//! Smaller API groups, each following its upstream `pkg/apis/<group>/validation` package:
//! `coordination.k8s.io` Lease, `scheduling.k8s.io` PriorityClass, `storage.k8s.io` StorageClass,
//! `events.k8s.io` Event, `rbac.authorization.k8s.io` roles and bindings, `networking.k8s.io`
//! NetworkPolicy (ports and selectors), `discovery.k8s.io` EndpointSlice (address type and ports),
//! `policy` PodDisruptionBudget, `autoscaling` HorizontalPodAutoscaler (replica bounds and target).
//! CustomResourceDefinitions are in `super::crd`.
//!
//! Deliberately different: each kind gets its commonly hit rules, not every rule upstream has.

use serde_json::Value;

use super::core::validate_event_reporting;
use super::core_container::{validate_port_num_or_name, validate_protocol};
use super::field::{ErrorList, FieldError, FieldPath};
use super::json::{get, get_arr, get_bool, get_int, get_str, semantic_eq, str_or_empty};
use super::meta::{self, immutable, nonnegative, validate_label_selector, NameRule};
use super::names;

fn root(name: &str) -> FieldPath {
    FieldPath::root(name)
}

fn lease(obj: &Value) -> ErrorList {
    let sp = root("spec");
    let mut errs = ErrorList::new();
    if let Some(d) = get_int(obj, &["spec", "leaseDurationSeconds"]).filter(|d| *d <= 0) {
        errs.push(FieldError::invalid(
            &sp.child("leaseDurationSeconds"),
            d,
            "must be greater than 0",
        ));
    }
    if let Some(t) = get_int(obj, &["spec", "leaseTransitions"]).filter(|t| *t < 0) {
        errs.push(FieldError::invalid(
            &sp.child("leaseTransitions"),
            t,
            meta::IS_NEGATIVE,
        ));
    }
    errs
}

fn priority_class(obj: &Value) -> ErrorList {
    let mut errs = ErrorList::new();
    let name = str_or_empty(obj, &["metadata", "name"]);
    let value = get_int(obj, &["value"]).unwrap_or(0);
    let global_default = get_bool(obj, &["globalDefault"]).unwrap_or(false);
    if name.starts_with("system-") {
        let known = match name {
            "system-node-critical" => Some(2_000_001_000),
            "system-cluster-critical" => Some(2_000_000_000),
            _ => None,
        };
        let problem = match known {
            None => Some(format!("{name} is not a known system priority class")),
            Some(v) if v != value => Some(format!("value of {name} PriorityClass must be {v}")),
            Some(_) if global_default => Some(format!(
                "globalDefault of {name} PriorityClass must be false"
            )),
            Some(_) => None,
        };
        if let Some(p) = problem {
            errs.push(FieldError::forbidden(
                &root("metadata").child("name"),
                format!("priority class names with 'system-' prefix are reserved for system use only. error: {p}"),
            ));
        }
    } else if value > 1_000_000_000 {
        errs.push(FieldError::forbidden(
            &root("value"),
            "maximum allowed value of a user defined priority is 1000000000",
        ));
    }
    if let Some(p) = get_str(obj, &["preemptionPolicy"]) {
        if p != "PreemptLowerPriority" && p != "Never" {
            errs.push(FieldError::not_supported(
                &root("preemptionPolicy"),
                p,
                &["PreemptLowerPriority", "Never"],
            ));
        }
    }
    errs
}

fn storage_class(obj: &Value) -> ErrorList {
    let mut errs = ErrorList::new();
    let prov = str_or_empty(obj, &["provisioner"]);
    if prov.is_empty() {
        errs.push(FieldError::required(&root("provisioner"), ""));
    } else {
        errs.extend(
            names::is_qualified_name(&prov.to_lowercase())
                .into_iter()
                .map(|m| FieldError::invalid(&root("provisioner"), prov, m)),
        );
    }
    if let Some(r) = get_str(obj, &["reclaimPolicy"]) {
        if r != "Delete" && r != "Retain" {
            errs.push(FieldError::not_supported(
                &root("reclaimPolicy"),
                r,
                &["Delete", "Retain"],
            ));
        }
    }
    match get_str(obj, &["volumeBindingMode"]) {
        None => errs.push(FieldError::required(&root("volumeBindingMode"), "")),
        Some("Immediate" | "WaitForFirstConsumer") => {}
        Some(m) => errs.push(FieldError::not_supported(
            &root("volumeBindingMode"),
            m,
            &["Immediate", "WaitForFirstConsumer"],
        )),
    }
    errs
}

fn events_v1(obj: &Value) -> ErrorList {
    let mut errs = ErrorList::new();
    if get(obj, &["eventTime"]).is_none() {
        errs.push(FieldError::required(&root("eventTime"), ""));
    }
    errs.extend(validate_event_reporting(obj, "reportingController"));
    if str_or_empty(obj, &["note"]).len() > 1024 {
        errs.push(FieldError::invalid(
            &root("note"),
            "",
            "can have at most 1024 characters",
        ));
    }
    let ty = str_or_empty(obj, &["type"]);
    if ty != "Normal" && ty != "Warning" {
        errs.push(FieldError::invalid(
            &root("type"),
            "",
            format!("has invalid value: {ty}"),
        ));
    }
    errs
}

fn rbac_subject(s: &Value, namespaced: bool, path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    let name = str_or_empty(s, &["name"]);
    let api_group = str_or_empty(s, &["apiGroup"]);
    if name.is_empty() {
        errs.push(FieldError::required(&path.child("name"), ""));
    }
    match str_or_empty(s, &["kind"]) {
        "ServiceAccount" => {
            if !name.is_empty() {
                errs.extend(
                    names::is_dns1123_subdomain(name)
                        .into_iter()
                        .map(|m| FieldError::invalid(&path.child("name"), name, m)),
                );
            }
            if !api_group.is_empty() {
                errs.push(FieldError::not_supported(
                    &path.child("apiGroup"),
                    api_group,
                    &[""],
                ));
            }
            if !namespaced && str_or_empty(s, &["namespace"]).is_empty() {
                errs.push(FieldError::required(&path.child("namespace"), ""));
            }
        }
        "User" | "Group" => {
            if api_group != "rbac.authorization.k8s.io" {
                errs.push(FieldError::not_supported(
                    &path.child("apiGroup"),
                    api_group,
                    &["rbac.authorization.k8s.io"],
                ));
            }
        }
        other => errs.push(FieldError::not_supported(
            &path.child("kind"),
            other,
            &["ServiceAccount", "User", "Group"],
        )),
    }
    errs
}

fn rbac_binding(obj: &Value, namespaced: bool) -> ErrorList {
    let mut errs = ErrorList::new();
    let rp = root("roleRef");
    let group = str_or_empty(obj, &["roleRef", "apiGroup"]);
    if group != "rbac.authorization.k8s.io" {
        errs.push(FieldError::not_supported(
            &rp.child("apiGroup"),
            group,
            &["rbac.authorization.k8s.io"],
        ));
    }
    let kind = str_or_empty(obj, &["roleRef", "kind"]);
    if namespaced && kind != "Role" && kind != "ClusterRole" {
        errs.push(FieldError::not_supported(
            &rp.child("kind"),
            kind,
            &["Role", "ClusterRole"],
        ));
    } else if !namespaced && kind != "ClusterRole" {
        errs.push(FieldError::not_supported(
            &rp.child("kind"),
            kind,
            &["ClusterRole"],
        ));
    }
    let name = str_or_empty(obj, &["roleRef", "name"]);
    if name.is_empty() {
        errs.push(FieldError::required(&rp.child("name"), ""));
    } else {
        errs.extend(
            names::is_valid_path_segment_name(name)
                .into_iter()
                .map(|m| FieldError::invalid(&rp.child("name"), name, m)),
        );
    }
    for (i, s) in get_arr(obj, &["subjects"]).iter().enumerate() {
        errs.extend(rbac_subject(s, namespaced, &root("subjects").index(i)));
    }
    errs
}

fn rbac_rules(obj: &Value, namespaced: bool) -> ErrorList {
    let mut errs = ErrorList::new();
    for (i, rule) in get_arr(obj, &["rules"]).iter().enumerate() {
        let p = root("rules").index(i);
        if get_arr(rule, &["verbs"]).is_empty() {
            errs.push(FieldError::required(
                &p.child("verbs"),
                "verbs must contain at least one value",
            ));
        }
        let urls = get_arr(rule, &["nonResourceURLs"]);
        if !urls.is_empty() {
            if namespaced {
                errs.push(FieldError::invalid(
                    &p.child("nonResourceURLs"),
                    Value::from(urls.to_vec()),
                    "namespaced rules cannot apply to non-resource URLs",
                ));
            }
            if !get_arr(rule, &["apiGroups"]).is_empty()
                || !get_arr(rule, &["resources"]).is_empty()
                || !get_arr(rule, &["resourceNames"]).is_empty()
            {
                errs.push(FieldError::invalid(
                    &p.child("nonResourceURLs"),
                    Value::from(urls.to_vec()),
                    "rules cannot apply to both regular resources and non-resource URLs",
                ));
            }
            continue;
        }
        if get_arr(rule, &["apiGroups"]).is_empty() {
            errs.push(FieldError::required(
                &p.child("apiGroups"),
                "resource rules must supply at least one api group",
            ));
        }
        if get_arr(rule, &["resources"]).is_empty() {
            errs.push(FieldError::required(
                &p.child("resources"),
                "resource rules must supply at least one resource",
            ));
        }
    }
    errs
}

fn network_policy(obj: &Value) -> ErrorList {
    let sp = root("spec");
    let mut errs =
        validate_label_selector(get(obj, &["spec", "podSelector"]), &sp.child("podSelector"));
    for dir in ["ingress", "egress"] {
        let peers_key = if dir == "ingress" { "from" } else { "to" };
        for (i, rule) in get_arr(obj, &["spec", dir]).iter().enumerate() {
            let rp = sp.child(dir).index(i);
            for (j, port) in get_arr(rule, &["ports"]).iter().enumerate() {
                let pp = rp.child("ports").index(j);
                if get(port, &["protocol"]).is_some() {
                    errs.extend(validate_protocol(port, &pp.child("protocol")));
                }
                if let Some(p) = get(port, &["port"]) {
                    errs.extend(validate_port_num_or_name(Some(p), &pp.child("port")));
                }
            }
            for (j, peer) in get_arr(rule, &[peers_key]).iter().enumerate() {
                let pp = rp.child(peers_key).index(j);
                errs.extend(validate_label_selector(
                    get(peer, &["podSelector"]),
                    &pp.child("podSelector"),
                ));
                errs.extend(validate_label_selector(
                    get(peer, &["namespaceSelector"]),
                    &pp.child("namespaceSelector"),
                ));
                if let Some(cidr) = get_str(peer, &["ipBlock", "cidr"]) {
                    if !names::is_cidr(cidr) {
                        errs.push(FieldError::invalid(
                            &pp.child("ipBlock").child("cidr"),
                            cidr,
                            "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
                        ));
                    }
                }
            }
        }
    }
    let types = get_arr(obj, &["spec", "policyTypes"]);
    for (i, t) in types.iter().enumerate() {
        let t = t.as_str().unwrap_or("");
        if t != "Ingress" && t != "Egress" {
            errs.push(FieldError::not_supported(
                &sp.child("policyTypes").index(i),
                t,
                &["Egress", "Ingress"],
            ));
        }
    }
    if types.len() > 2 {
        errs.push(FieldError::invalid(
            &sp.child("policyTypes"),
            Value::from(types.to_vec()),
            "may not specify more than two policyTypes",
        ));
    }
    errs
}

fn endpoint_slice(obj: &Value) -> ErrorList {
    let mut errs = ErrorList::new();
    let at = str_or_empty(obj, &["addressType"]);
    match at {
        "IPv4" | "IPv6" | "FQDN" => {}
        "" => errs.push(FieldError::required(&root("addressType"), "")),
        other => errs.push(FieldError::not_supported(
            &root("addressType"),
            other,
            &["FQDN", "IPv4", "IPv6"],
        )),
    }
    for (i, ep) in get_arr(obj, &["endpoints"]).iter().enumerate() {
        let n = get_arr(ep, &["addresses"]).len();
        if n == 0 || n > 100 {
            errs.push(FieldError::invalid(
                &root("endpoints").index(i).child("addresses"),
                n,
                "must contain at least 1 address but no more than 100 addresses",
            ));
        }
    }
    for (i, port) in get_arr(obj, &["ports"]).iter().enumerate() {
        let pp = root("ports").index(i);
        if get(port, &["protocol"]).is_some() {
            errs.extend(validate_protocol(port, &pp.child("protocol")));
        }
        if let Some(p) = get_int(port, &["port"]) {
            errs.extend(
                names::is_valid_port_num(p)
                    .into_iter()
                    .map(|m| FieldError::invalid(&pp.child("port"), p, m)),
            );
        }
    }
    errs
}

fn pod_disruption_budget(obj: &Value) -> ErrorList {
    let sp = root("spec");
    let mut errs = ErrorList::new();
    let (min, max) = (
        get(obj, &["spec", "minAvailable"]),
        get(obj, &["spec", "maxUnavailable"]),
    );
    if min.is_some() && max.is_some() {
        errs.push(FieldError::invalid(
            &sp,
            obj.get("spec").cloned().unwrap_or(Value::Null),
            "minAvailable and maxUnavailable cannot be both set",
        ));
    }
    for (key, v) in [("minAvailable", min), ("maxUnavailable", max)] {
        match v {
            Some(Value::String(s)) => {
                let p = sp.child(key);
                let msgs = names::is_valid_percent(s);
                if !msgs.is_empty() {
                    errs.extend(
                        msgs.into_iter()
                            .map(|m| FieldError::invalid(&p, s.as_str(), m)),
                    );
                } else if s[..s.len() - 1].parse::<i64>().is_ok_and(|n| n > 100) {
                    errs.push(FieldError::invalid(
                        &p,
                        s.as_str(),
                        "must not be greater than 100%",
                    ));
                }
            }
            Some(other) => errs.extend(nonnegative(super::json::as_int(other), &sp.child(key))),
            None => {}
        }
    }
    errs.extend(validate_label_selector(
        get(obj, &["spec", "selector"]),
        &sp.child("selector"),
    ));
    errs
}

fn hpa(obj: &Value) -> ErrorList {
    let sp = root("spec");
    let mut errs = ErrorList::new();
    let min = get_int(obj, &["spec", "minReplicas"]);
    let max = get_int(obj, &["spec", "maxReplicas"]).unwrap_or(0);
    if let Some(m) = min.filter(|m| *m < 1) {
        errs.push(FieldError::invalid(
            &sp.child("minReplicas"),
            m,
            "must be greater than or equal to 1",
        ));
    }
    if max < 1 {
        errs.push(FieldError::invalid(
            &sp.child("maxReplicas"),
            max,
            "must be greater than 0",
        ));
    }
    if min.is_some_and(|m| max < m) {
        errs.push(FieldError::invalid(
            &sp.child("maxReplicas"),
            max,
            "must be greater than or equal to `minReplicas`",
        ));
    }
    let tp = sp.child("scaleTargetRef");
    for key in ["kind", "name"] {
        let v = str_or_empty(obj, &["spec", "scaleTargetRef", key]);
        if v.is_empty() {
            errs.push(FieldError::required(&tp.child(key), ""));
        } else {
            errs.extend(
                names::is_valid_path_segment_name(v)
                    .into_iter()
                    .map(|m| FieldError::invalid(&tp.child(key), v, m)),
            );
        }
    }
    errs
}

type Check = fn(&Value) -> ErrorList;
type UpdateCheck = fn(&Value, &Value) -> ErrorList;

/// The name rule and spec check of a kind of these groups.
fn rules(group: &str, kind: &str) -> Option<(NameRule, Option<Check>)> {
    let r = match (group, kind) {
        ("coordination.k8s.io", "Lease") => (NameRule::Subdomain, Some(lease as Check)),
        ("scheduling.k8s.io", "PriorityClass") => {
            (NameRule::Subdomain, Some(priority_class as Check))
        }
        ("storage.k8s.io", "StorageClass") => (NameRule::Subdomain, Some(storage_class as Check)),
        ("events.k8s.io", "Event") => (NameRule::Subdomain, Some(events_v1 as Check)),
        ("rbac.authorization.k8s.io", "Role") => (
            NameRule::PathSegment,
            Some((|o| rbac_rules(o, true)) as Check),
        ),
        ("rbac.authorization.k8s.io", "ClusterRole") => (
            NameRule::PathSegment,
            Some((|o| rbac_rules(o, false)) as Check),
        ),
        ("rbac.authorization.k8s.io", "RoleBinding") => (
            NameRule::PathSegment,
            Some((|o| rbac_binding(o, true)) as Check),
        ),
        ("rbac.authorization.k8s.io", "ClusterRoleBinding") => (
            NameRule::PathSegment,
            Some((|o| rbac_binding(o, false)) as Check),
        ),
        ("networking.k8s.io", "NetworkPolicy") => {
            (NameRule::Subdomain, Some(network_policy as Check))
        }
        ("discovery.k8s.io", "EndpointSlice") => {
            (NameRule::Subdomain, Some(endpoint_slice as Check))
        }
        ("policy", "PodDisruptionBudget") => {
            (NameRule::Subdomain, Some(pod_disruption_budget as Check))
        }
        ("autoscaling", "HorizontalPodAutoscaler") => (NameRule::Subdomain, Some(hpa as Check)),
        _ => return None,
    };
    Some(r)
}

/// Kinds validated in their own modules: ServiceCIDR and IPAddress (`networking_ipam`),
/// VolumeAttributesClass (`storage_vac`), FlowSchema and PriorityLevelConfiguration
/// (`flowcontrol`), APIService (`apiregistration`), the webhook configurations
/// (`admission_webhook`) and the admission policies (`validating_policy`, `admission_policy`):
/// `(create, update)`.
fn own_module(group: &str, kind: &str) -> Option<(Check, UpdateCheck)> {
    use super::storage_vac;
    use super::{
        admission_policy as ap, admission_webhook as aw, apiregistration, flowcontrol as fc,
        networking_ipam as ni, validating_policy as vp,
    };
    let r: (Check, UpdateCheck) = match (group, kind) {
        ("networking.k8s.io", "ServiceCIDR") => {
            (ni::validate_service_cidr, ni::validate_service_cidr_update)
        }
        ("networking.k8s.io", "IPAddress") => {
            (ni::validate_ip_address, ni::validate_ip_address_update)
        }
        ("storage.k8s.io", "VolumeAttributesClass") => (
            storage_vac::validate_volume_attributes_class,
            storage_vac::validate_volume_attributes_class_update,
        ),
        ("flowcontrol.apiserver.k8s.io", "FlowSchema") => (fc::validate_flow_schema, |new, old| {
            with_meta_update(fc::validate_flow_schema(new), new, old)
        }),
        ("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration") => {
            (fc::validate_priority_level, |new, old| {
                with_meta_update(fc::validate_priority_level(new), new, old)
            })
        }
        ("apiregistration.k8s.io", "APIService") => (
            apiregistration::validate_api_service,
            apiregistration::validate_api_service_update,
        ),
        ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration") => (
            |obj| aw::validate_create(obj, false),
            |new, old| aw::validate_update(new, old, false),
        ),
        ("admissionregistration.k8s.io", "MutatingWebhookConfiguration") => (
            |obj| aw::validate_create(obj, true),
            |new, old| aw::validate_update(new, old, true),
        ),
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy") => {
            (vp::validate_policy, |new, old| {
                with_meta_update(vp::validate_policy(new), new, old)
            })
        }
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding") => {
            (vp::validate_binding, |new, old| {
                with_meta_update(vp::validate_binding(new), new, old)
            })
        }
        ("admissionregistration.k8s.io", "MutatingAdmissionPolicy") => {
            (ap::validate_mutating_policy, |new, old| {
                with_meta_update(ap::validate_mutating_policy(new), new, old)
            })
        }
        ("admissionregistration.k8s.io", "MutatingAdmissionPolicyBinding") => {
            (ap::validate_mutating_binding, |new, old| {
                with_meta_update(ap::validate_mutating_binding(new), new, old)
            })
        }
        _ => return None,
    };
    Some(r)
}

/// An update validated as a create: the create's errors, with its metadata errors replaced by
/// those of the metadata update rules (names cannot change, so the create's name checks hold).
fn with_meta_update(create: ErrorList, new: &Value, old: &Value) -> ErrorList {
    let kube_rules = !new
        .get("apiVersion")
        .and_then(Value::as_str)
        .is_some_and(|v| v.starts_with("admissionregistration.k8s.io/"));
    let mut errs = meta::validate_object_meta_update(new, old, kube_rules);
    errs.extend(
        create
            .into_iter()
            .filter(|e| !e.field.as_str().starts_with("metadata.")),
    );
    errs
}

/// `validate_create` for these groups; `None` for kinds they do not cover.
pub(crate) fn validate_create(group: &str, kind: &str, obj: &Value) -> Option<ErrorList> {
    if let Some((create, _)) = own_module(group, kind) {
        return Some(create(obj));
    }
    let (rule, check) = rules(group, kind)?;
    let mut errs = meta::validate_object_meta(obj, rule, true);
    if let Some(check) = check {
        errs.extend(check(obj));
    }
    Some(errs)
}

/// `validate_update` for these groups; `None` for kinds they do not cover.
pub(crate) fn validate_update(
    group: &str,
    kind: &str,
    new: &Value,
    old: &Value,
) -> Option<ErrorList> {
    if let Some((_, update)) = own_module(group, kind) {
        return Some(update(new, old));
    }
    let (_, check) = rules(group, kind)?;
    let mut errs = meta::validate_object_meta_update(new, old, true);
    if let Some(check) = check {
        errs.extend(check(new));
    }
    match (group, kind) {
        ("scheduling.k8s.io", "PriorityClass") => {
            if get_int(new, &["value"]) != get_int(old, &["value"]) {
                errs.push(FieldError::forbidden(
                    &root("value"),
                    "may not be changed in an update.",
                ));
            }
            errs.extend(immutable(
                get(new, &["preemptionPolicy"]),
                get(old, &["preemptionPolicy"]),
                &root("preemptionPolicy"),
            ));
        }
        ("storage.k8s.io", "StorageClass") => {
            for f in ["parameters", "provisioner", "reclaimPolicy"] {
                if !semantic_eq(get(new, &[f]), get(old, &[f])) {
                    errs.push(FieldError::forbidden(
                        &root(f),
                        format!("updates to {f} are forbidden."),
                    ));
                }
            }
            errs.extend(immutable(
                get(new, &["volumeBindingMode"]),
                get(old, &["volumeBindingMode"]),
                &root("volumeBindingMode"),
            ));
        }
        ("rbac.authorization.k8s.io", "RoleBinding" | "ClusterRoleBinding")
            if !semantic_eq(get(new, &["roleRef"]), get(old, &["roleRef"])) =>
        {
            errs.push(FieldError::invalid(
                &root("roleRef"),
                new.get("roleRef").cloned().unwrap_or(Value::Null),
                "cannot change roleRef",
            ));
        }
        ("discovery.k8s.io", "EndpointSlice") => {
            errs.extend(immutable(
                get(new, &["addressType"]),
                get(old, &["addressType"]),
                &root("addressType"),
            ));
        }
        _ => {}
    }
    Some(errs)
}
