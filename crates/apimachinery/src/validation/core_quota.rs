//! ResourceQuota validation (upstream `pkg/apis/core/validation`: `ValidateResourceQuota`,
//! `ValidateResourceQuotaUpdate`, `ValidateResourceQuotaStatusUpdate` and their helpers): resource names
//! a quota may limit, non-negative (and for counts whole) quantities, scopes that exist, apply to the
//! limited resources and do not conflict, scope selectors' operators and values, immutable scopes.
//!
//! Deliberately different: a quantity that does not parse is a field error here; upstream fails
//! earlier, when decoding the request (400 "... cannot be handled as a ResourceQuota").

use serde_json::Value;

use super::field::{ErrorList, FieldError, FieldPath};
use super::json::{get, get_arr, get_obj, get_str};
use super::meta::{self, NameRule, FIELD_IMMUTABLE};
use super::names;
use crate::quantity::Quantity;
use crate::quota::pods::is_extended_resource_name;

/// Upstream `standardResources`.
const STANDARD_RESOURCES: &[&str] = &[
    "cpu",
    "memory",
    "ephemeral-storage",
    "requests.cpu",
    "requests.memory",
    "requests.ephemeral-storage",
    "limits.cpu",
    "limits.memory",
    "limits.ephemeral-storage",
    "pods",
    "resourcequotas",
    "services",
    "replicationcontrollers",
    "secrets",
    "configmaps",
    "persistentvolumeclaims",
    "storage",
    "requests.storage",
    "services.nodeports",
    "services.loadbalancers",
];

/// Upstream `standardQuotaResources`.
const STANDARD_QUOTA_RESOURCES: &[&str] = &[
    "cpu",
    "memory",
    "ephemeral-storage",
    "requests.cpu",
    "requests.memory",
    "requests.storage",
    "requests.ephemeral-storage",
    "limits.cpu",
    "limits.memory",
    "limits.ephemeral-storage",
    "pods",
    "resourcequotas",
    "services",
    "replicationcontrollers",
    "secrets",
    "persistentvolumeclaims",
    "configmaps",
    "services.nodeports",
    "services.loadbalancers",
];

/// Upstream `integerResources`: counts, which must be whole.
const INTEGER_RESOURCES: &[&str] = &[
    "pods",
    "resourcequotas",
    "services",
    "replicationcontrollers",
    "secrets",
    "configmaps",
    "persistentvolumeclaims",
    "services.nodeports",
    "services.loadbalancers",
];

const SCOPES: &[&str] = &[
    "Terminating",
    "NotTerminating",
    "BestEffort",
    "NotBestEffort",
    "PriorityClass",
    "CrossNamespacePodAffinity",
];

fn is_hugepages(name: &str) -> bool {
    name.starts_with("hugepages-") || name.starts_with("requests.hugepages-")
}

fn is_standard_quota_resource(name: &str) -> bool {
    STANDARD_QUOTA_RESOURCES.contains(&name) || is_hugepages(name)
}

/// Upstream `IsResourceQuotaScopeValidForResource`.
fn scope_valid_for(scope: &str, resource: &str) -> bool {
    let pod_count = resource == "pods";
    let pod_compute = matches!(
        resource,
        "cpu" | "memory" | "limits.cpu" | "limits.memory" | "requests.cpu" | "requests.memory"
    );
    match scope {
        "Terminating" | "NotTerminating" | "NotBestEffort" | "PriorityClass" => {
            pod_count || pod_compute
        }
        "BestEffort" => pod_count,
        _ => true,
    }
}

/// Upstream `ValidateResourceQuotaResourceName` (with `validateResourceName`).
fn validate_resource_name(name: &str, path: &FieldPath) -> ErrorList {
    let errs: ErrorList = names::is_qualified_name(name)
        .into_iter()
        .map(|m| FieldError::invalid(path, name, m))
        .collect();
    if !errs.is_empty() {
        return errs;
    }
    if !name.contains('/') {
        if !(STANDARD_RESOURCES.contains(&name) || is_hugepages(name)) {
            return vec![FieldError::invalid(
                path,
                name,
                "must be a standard resource type or fully qualified",
            )];
        }
        if !is_standard_quota_resource(name) {
            return vec![FieldError::invalid(
                path,
                name,
                "must be a standard resource for quota",
            )];
        }
    }
    errs
}

/// Upstream `ValidateResourceQuantityValue`.
fn validate_quantity(resource: &str, value: &Value, path: &FieldPath) -> ErrorList {
    let text = value
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| value.to_string());
    let q = match Quantity::parse(&text) {
        Ok(q) => q,
        Err(e) => return vec![FieldError::invalid(path, text.as_str(), e.to_string())],
    };
    let mut errs = ErrorList::new();
    if q.sign() < 0 {
        errs.push(FieldError::invalid(
            path,
            q.to_string(),
            "must be greater than or equal to 0",
        ));
    }
    let integer = INTEGER_RESOURCES.contains(&resource) || is_extended_resource_name(resource);
    if integer && q.milli_value() % 1000 != 0 {
        errs.push(FieldError::invalid(
            path,
            q.to_string(),
            "must be an integer",
        ));
    }
    errs
}

fn validate_list(obj: &Value, field: &str, path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    for (k, v) in get_obj(obj, &[field]).into_iter().flatten() {
        let p = path.child(field).key(k);
        errs.extend(validate_resource_name(k, &p));
        errs.extend(validate_quantity(k, v, &p));
    }
    errs
}

/// Upstream `ValidateResourceQuotaSpec` with `validateResourceQuotaScopes` and `validateScopeSelector`.
fn validate_spec(spec: &Value, path: &FieldPath) -> ErrorList {
    let mut errs = validate_list(spec, "hard", path);
    let hard: Vec<&String> = get_obj(spec, &["hard"])
        .map(|h| h.keys().collect())
        .unwrap_or_default();
    let conflicting = |set: &[&str]| {
        (set.contains(&"BestEffort") && set.contains(&"NotBestEffort"))
            || (set.contains(&"Terminating") && set.contains(&"NotTerminating"))
    };
    let scopes: Vec<&str> = get_arr(spec, &["scopes"])
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let scopes_value = get(spec, &["scopes"]).cloned().unwrap_or(Value::Null);
    let scopes_path = path.child("scopes");
    for scope in &scopes {
        if !SCOPES.contains(scope) {
            errs.push(FieldError::invalid(
                &scopes_path,
                scopes_value.clone(),
                "unsupported scope",
            ));
        }
        for k in &hard {
            if is_standard_quota_resource(k) && !scope_valid_for(scope, k) {
                errs.push(FieldError::invalid(
                    &scopes_path,
                    scopes_value.clone(),
                    "unsupported scope applied to resource",
                ));
            }
        }
    }
    if conflicting(&scopes) {
        errs.push(FieldError::invalid(
            &scopes_path,
            scopes_value.clone(),
            "conflicting scopes",
        ));
    }
    let Some(selector) = get(spec, &["scopeSelector"]).filter(|v| !v.is_null()) else {
        return errs;
    };
    let exprs_path = path.child("scopeSelector").child("matchExpressions");
    let mut selected = Vec::new();
    for req in get_arr(selector, &["matchExpressions"]) {
        let scope = get_str(req, &["scopeName"]).unwrap_or("");
        let op = get_str(req, &["operator"]).unwrap_or("");
        let values = get_arr(req, &["values"]).len();
        if !SCOPES.contains(&scope) {
            errs.push(FieldError::invalid(
                &exprs_path.child("scopeName"),
                scope,
                "unsupported scope",
            ));
        }
        for k in &hard {
            if is_standard_quota_resource(k) && !scope_valid_for(scope, k) {
                errs.push(FieldError::invalid(
                    &exprs_path,
                    selector.clone(),
                    "unsupported scope applied to resource",
                ));
            }
        }
        if matches!(
            scope,
            "BestEffort" | "NotBestEffort" | "Terminating" | "NotTerminating"
        ) && op != "Exists"
        {
            errs.push(FieldError::invalid(
                &exprs_path.child("operator"),
                op,
                "must be 'Exist' only operator when scope is any of ResourceQuotaScopeTerminating, ResourceQuotaScopeNotTerminating, ResourceQuotaScopeBestEffort and ResourceQuotaScopeNotBestEffort",
            ));
        }
        match op {
            "In" | "NotIn" if values == 0 => errs.push(FieldError::required(
                &exprs_path.child("values"),
                "must be at least one value when `operator` is 'In' or 'NotIn' for scope selector",
            )),
            "Exists" | "DoesNotExist" if values != 0 => errs.push(FieldError::invalid(
                &exprs_path.child("values"),
                get(req, &["values"]).cloned().unwrap_or(Value::Null),
                "must be no value when `operator` is 'Exist' or 'DoesNotExist' for scope selector",
            )),
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            _ => errs.push(FieldError::invalid(
                &exprs_path.child("operator"),
                op,
                "not a valid selector operator",
            )),
        }
        selected.push(scope);
    }
    if conflicting(&selected) {
        errs.push(FieldError::invalid(
            &exprs_path,
            scopes_value,
            "conflicting scopes",
        ));
    }
    errs
}

/// Upstream `ValidateResourceQuota` (on create).
pub(crate) fn validate_resource_quota(obj: &Value) -> ErrorList {
    let mut errs = meta::validate_object_meta(obj, NameRule::Subdomain, true);
    let spec = get(obj, &["spec"]).cloned().unwrap_or(Value::Null);
    errs.extend(validate_spec(&spec, &FieldPath::root("spec")));
    if let Some(status) = get(obj, &["status"]) {
        let path = FieldPath::root("status");
        errs.extend(validate_list(status, "hard", &path));
        errs.extend(validate_list(status, "used", &path));
    }
    errs
}

/// Upstream `ValidateResourceQuotaUpdate` (and the status update's checks): the scopes may not change.
pub(crate) fn validate_resource_quota_update(new: &Value, old: &Value) -> ErrorList {
    let mut errs = meta::validate_object_meta_update(new, old, true);
    let spec = get(new, &["spec"]).cloned().unwrap_or(Value::Null);
    errs.extend(validate_spec(&spec, &FieldPath::root("spec")));
    if let Some(status) = get(new, &["status"]) {
        let path = FieldPath::root("status");
        errs.extend(validate_list(status, "hard", &path));
        errs.extend(validate_list(status, "used", &path));
    }
    let scopes = |v: &Value| -> Vec<String> {
        let mut s: Vec<String> = get_arr(v, &["spec", "scopes"])
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect();
        s.sort();
        s.dedup();
        s
    };
    if scopes(new) != scopes(old) {
        errs.push(FieldError::invalid(
            &FieldPath::root("spec").child("scopes"),
            get(new, &["spec", "scopes"])
                .cloned()
                .unwrap_or(Value::Null),
            FIELD_IMMUTABLE,
        ));
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn quota(spec: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "q", "namespace": "ns"}, "spec": spec})
    }

    fn errors(v: &Value) -> Vec<String> {
        validate_resource_quota(v)
            .iter()
            .map(|e| format!("{}: {}", e.field.as_str(), e.body()))
            .collect()
    }

    #[test]
    fn resource_quota_specs() {
        let cases: Vec<(Value, Vec<&str>)> = vec![
            (json!({"hard": {"pods": "10", "requests.cpu": "1500m", "count/deployments.apps": "3",
                "requests.example.com/gpu": "2", "hugepages-2Mi": "1Gi"}}), vec![]),
            (json!({"hard": {"pods": "1.5"}}), vec!["spec.hard[pods]: Invalid value: \"1500m\": must be an integer"]),
            (json!({"hard": {"cpu": "-1"}}), vec!["spec.hard[cpu]: Invalid value: \"-1\": must be greater than or equal to 0"]),
            (json!({"hard": {"widgets": "1"}}), vec!["spec.hard[widgets]: Invalid value: \"widgets\": must be a standard resource type or fully qualified"]),
            (json!({"hard": {"storage": "1"}}), vec!["spec.hard[storage]: Invalid value: \"storage\": must be a standard resource for quota"]),
            (json!({"hard": {"pods": "abc"}}), vec!["spec.hard[pods]: Invalid value: \"abc\": quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"]),
            (json!({"hard": {"pods": "1"}, "scopes": ["BestEffort", "NotBestEffort"]}),
                vec!["spec.scopes: Invalid value: [\"BestEffort\",\"NotBestEffort\"]: conflicting scopes"]),
            (json!({"hard": {"services": "1"}, "scopes": ["Terminating"]}),
                vec!["spec.scopes: Invalid value: [\"Terminating\"]: unsupported scope applied to resource"]),
            (json!({"hard": {"pods": "1"}, "scopes": ["Sometimes"]}),
                vec!["spec.scopes: Invalid value: [\"Sometimes\"]: unsupported scope"]),
            (json!({"hard": {"pods": "1"}, "scopeSelector": {"matchExpressions": [
                {"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}]}}), vec![]),
            (json!({"hard": {"pods": "1"}, "scopeSelector": {"matchExpressions": [
                {"scopeName": "PriorityClass", "operator": "In"}]}}),
                vec!["spec.scopeSelector.matchExpressions.values: Required value: must be at least one value when `operator` is 'In' or 'NotIn' for scope selector"]),
        ];
        for (spec, want) in cases {
            assert_eq!(errors(&quota(spec.clone())), want, "{spec}");
        }
    }

    #[test]
    fn scopes_are_immutable() {
        let old = quota(json!({"hard": {"pods": "1"}, "scopes": ["BestEffort"]}));
        let mut new = old.clone();
        new["spec"]["hard"]["pods"] = json!("2");
        assert!(validate_resource_quota_update(&new, &old).is_empty());
        new["spec"]["scopes"] = json!(["NotTerminating"]);
        let errs: Vec<String> = validate_resource_quota_update(&new, &old)
            .iter()
            .map(|e| format!("{}: {}", e.field.as_str(), e.body()))
            .collect();
        assert_eq!(
            errs,
            ["spec.scopes: Invalid value: [\"NotTerminating\"]: field is immutable"]
        );
    }
}
