//! The scheduling constraints of a pod spec (upstream `pkg/apis/core/validation/validation.go`:
//! `ValidateTolerations`, `validateAffinity`, `ValidateNodeSelectorRequirement`,
//! `validateTopologySpreadConstraints`).

use serde_json::Value;

use super::field::{ErrorList, FieldError, FieldPath};
use super::json::{get, get_arr, get_int, str_or_empty};
use super::meta::{validate_label_name, validate_label_selector};
use super::names;

fn validate_taint_effect(effect: &str, path: &FieldPath) -> ErrorList {
    const EFFECTS: [&str; 3] = ["NoSchedule", "PreferNoSchedule", "NoExecute"];
    if EFFECTS.contains(&effect) {
        Vec::new()
    } else {
        vec![FieldError::not_supported(path, effect, &EFFECTS)]
    }
}

/// Upstream's `ValidateTolerations`.
pub(crate) fn validate_tolerations(tolerations: &[Value], path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    for (i, t) in tolerations.iter().enumerate() {
        let p = path.index(i);
        let key = str_or_empty(t, &["key"]);
        let op = str_or_empty(t, &["operator"]);
        let effect = str_or_empty(t, &["effect"]);
        let value = str_or_empty(t, &["value"]);
        if !key.is_empty() {
            errs.extend(validate_label_name(key, &p.child("key")));
        }
        if key.is_empty() && op != "Exists" {
            errs.push(FieldError::invalid(
                &p.child("operator"),
                op,
                "operator must be Exists when `key` is empty, which means \"match all values and all keys\"",
            ));
        }
        if get(t, &["tolerationSeconds"]).is_some() && effect != "NoExecute" {
            errs.push(FieldError::invalid(
                &p.child("effect"),
                effect,
                "effect must be 'NoExecute' when `tolerationSeconds` is set",
            ));
        }
        match op {
            "Equal" | "" => {
                let msgs = names::is_label_value(value);
                if !msgs.is_empty() {
                    errs.push(FieldError::invalid(
                        &p.child("operator"),
                        value,
                        msgs.join(";"),
                    ));
                }
            }
            "Exists" => {
                if !value.is_empty() {
                    errs.push(FieldError::invalid(
                        &p.child("operator"),
                        value,
                        "value must be empty when `operator` is 'Exists'",
                    ));
                }
            }
            other => errs.push(FieldError::not_supported(
                &p.child("operator"),
                other,
                &["Equal", "Exists"],
            )),
        }
        if !effect.is_empty() {
            errs.extend(validate_taint_effect(effect, &p.child("effect")));
        }
    }
    errs
}

pub(crate) fn validate_node_selector_term(term: &Value, path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    for (j, rq) in get_arr(term, &["matchExpressions"]).iter().enumerate() {
        let p = path.child("matchExpressions").index(j);
        let values = get_arr(rq, &["values"]);
        match str_or_empty(rq, &["operator"]) {
            "In" | "NotIn" if values.is_empty() => errs.push(FieldError::required(
                &p.child("values"),
                "must be specified when `operator` is 'In' or 'NotIn'",
            )),
            "Exists" | "DoesNotExist" if !values.is_empty() => errs.push(FieldError::forbidden(
                &p.child("values"),
                "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
            )),
            "Gt" | "Lt" if values.len() != 1 => errs.push(FieldError::required(
                &p.child("values"),
                "must be specified single value when `operator` is 'Lt' or 'Gt'",
            )),
            "In" | "NotIn" | "Exists" | "DoesNotExist" | "Gt" | "Lt" => {}
            other => errs.push(FieldError::invalid(
                &p.child("operator"),
                other,
                "not a valid selector operator",
            )),
        }
        errs.extend(validate_label_name(
            str_or_empty(rq, &["key"]),
            &p.child("key"),
        ));
        for (k, v) in values.iter().enumerate() {
            let v = v.as_str().unwrap_or("");
            errs.extend(
                names::is_label_value(v)
                    .into_iter()
                    .map(|m| FieldError::invalid(&p.child("values").index(k), v, m)),
            );
        }
    }
    for (j, rq) in get_arr(term, &["matchFields"]).iter().enumerate() {
        let p = path.child("matchFields").index(j);
        match str_or_empty(rq, &["operator"]) {
            "In" | "NotIn" => {
                if get_arr(rq, &["values"]).len() != 1 {
                    errs.push(FieldError::required(
                        &p.child("values"),
                        "must be only one value when `operator` is 'In' or 'NotIn' for node field selector",
                    ));
                }
            }
            other => errs.push(FieldError::invalid(
                &p.child("operator"),
                other,
                "not a valid selector operator",
            )),
        }
        let key = str_or_empty(rq, &["key"]);
        if key != "metadata.name" {
            errs.push(FieldError::invalid(
                &p.child("key"),
                key,
                "not a valid field selector key",
            ));
        }
    }
    errs
}

fn validate_weight(term: &Value, path: &FieldPath) -> ErrorList {
    let w = get_int(term, &["weight"]).unwrap_or(0);
    if (1..=100).contains(&w) {
        Vec::new()
    } else {
        vec![FieldError::invalid(
            &path.child("weight"),
            w,
            "must be in the range 1-100",
        )]
    }
}

fn validate_pod_affinity_term(term: &Value, path: &FieldPath) -> ErrorList {
    let mut errs =
        validate_label_selector(get(term, &["labelSelector"]), &path.child("labelSelector"));
    errs.extend(validate_label_selector(
        get(term, &["namespaceSelector"]),
        &path.child("namespaceSelector"),
    ));
    for ns in get_arr(term, &["namespaces"])
        .iter()
        .filter_map(Value::as_str)
    {
        errs.extend(
            names::is_dns1123_label(ns)
                .into_iter()
                .map(|m| FieldError::invalid(&path.child("namespace"), ns, m)),
        );
    }
    let key = str_or_empty(term, &["topologyKey"]);
    if key.is_empty() {
        errs.push(FieldError::required(
            &path.child("topologyKey"),
            "can not be empty",
        ));
    } else {
        errs.extend(validate_label_name(key, &path.child("topologyKey")));
    }
    errs
}

pub(crate) fn validate_affinity(aff: &Value, path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    if let Some(na) = get(aff, &["nodeAffinity"]) {
        let np = path.child("nodeAffinity");
        if let Some(req) = get(na, &["requiredDuringSchedulingIgnoredDuringExecution"]) {
            let tp = np
                .child("requiredDuringSchedulingIgnoredDuringExecution")
                .child("nodeSelectorTerms");
            let terms = get_arr(req, &["nodeSelectorTerms"]);
            if terms.is_empty() {
                errs.push(FieldError::required(
                    &tp,
                    "must have at least one node selector term",
                ));
            }
            for (i, t) in terms.iter().enumerate() {
                errs.extend(validate_node_selector_term(t, &tp.index(i)));
            }
        }
        for (i, t) in get_arr(na, &["preferredDuringSchedulingIgnoredDuringExecution"])
            .iter()
            .enumerate()
        {
            let p = np
                .child("preferredDuringSchedulingIgnoredDuringExecution")
                .index(i);
            errs.extend(validate_weight(t, &p));
            if let Some(pref) = get(t, &["preference"]) {
                errs.extend(validate_node_selector_term(pref, &p.child("preference")));
            }
        }
    }
    for kind in ["podAffinity", "podAntiAffinity"] {
        let Some(pa) = get(aff, &[kind]) else {
            continue;
        };
        let kp = path.child(kind);
        for (i, t) in get_arr(pa, &["requiredDuringSchedulingIgnoredDuringExecution"])
            .iter()
            .enumerate()
        {
            errs.extend(validate_pod_affinity_term(
                t,
                &kp.child("requiredDuringSchedulingIgnoredDuringExecution")
                    .index(i),
            ));
        }
        for (i, t) in get_arr(pa, &["preferredDuringSchedulingIgnoredDuringExecution"])
            .iter()
            .enumerate()
        {
            let p = kp
                .child("preferredDuringSchedulingIgnoredDuringExecution")
                .index(i);
            errs.extend(validate_weight(t, &p));
            if let Some(term) = get(t, &["podAffinityTerm"]) {
                errs.extend(validate_pod_affinity_term(
                    term,
                    &p.child("podAffinityTerm"),
                ));
            }
        }
    }
    errs
}

pub(crate) fn validate_topology_spread(spec: &Value, path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    let constraints = get_arr(spec, &["topologySpreadConstraints"]);
    for (i, c) in constraints.iter().enumerate() {
        let p = path.index(i);
        let skew = get_int(c, &["maxSkew"]).unwrap_or(0);
        if skew <= 0 {
            errs.push(FieldError::invalid(
                &p.child("maxSkew"),
                skew,
                "must be greater than zero",
            ));
        }
        let key = str_or_empty(c, &["topologyKey"]);
        if key.is_empty() {
            errs.push(FieldError::required(
                &p.child("topologyKey"),
                "can not be empty",
            ));
        } else {
            errs.extend(validate_label_name(key, &p.child("topologyKey")));
        }
        let when = str_or_empty(c, &["whenUnsatisfiable"]);
        if when != "DoNotSchedule" && when != "ScheduleAnyway" {
            errs.push(FieldError::not_supported(
                &p.child("whenUnsatisfiable"),
                when,
                &["DoNotSchedule", "ScheduleAnyway"],
            ));
        }
        let repeated = constraints[i + 1..].iter().any(|o| {
            str_or_empty(o, &["topologyKey"]) == key
                && str_or_empty(o, &["whenUnsatisfiable"]) == when
        });
        if repeated {
            errs.push(FieldError::duplicate(
                &p.child("{topologyKey, whenUnsatisfiable}"),
                format!("{{{key}, {when}}}"),
            ));
        }
        errs.extend(validate_label_selector(
            get(c, &["labelSelector"]),
            &p.child("labelSelector"),
        ));
    }
    errs
}
