//! The `apps` group (upstream `pkg/apis/apps/validation/validation.go`, plus the selector immutability
//! that upstream's `pkg/registry/apps/*/strategy.go` adds for `apps/v1`): Deployment, ReplicaSet,
//! StatefulSet, DaemonSet, ControllerRevision.
//!
//! As upstream, a StatefulSet's pod template gets only its labels and annotations validated, not its
//! spec (its volumes come partly from `volumeClaimTemplates`).

use serde_json::{Map, Value};

use super::core_pod::validate_pod_template_spec;
use super::field::{ErrorList, FieldError, FieldPath};
use super::json::{as_int, get, get_int, get_obj, semantic_eq, str_or_empty};
use super::meta::{
    self, immutable, nonnegative, selector_is_empty, validate_annotations, validate_label_selector,
    validate_labels, NameRule, Selector,
};
use super::names;

fn spec_path() -> FieldPath {
    FieldPath::root("spec")
}

fn template_labels(obj: &Value) -> Value {
    get_obj(obj, &["spec", "template", "metadata", "labels"])
        .cloned()
        .map(Value::Object)
        .unwrap_or(Value::Null)
}

fn selector_mismatch(path: &FieldPath, labels: Value) -> FieldError {
    FieldError::invalid(
        &path.child("metadata").child("labels"),
        labels,
        "`selector` does not match template `labels`",
    )
}

/// `spec.selector`: required, strictly valid, non-empty (`kind` names the kind in the message).
fn validate_selector(obj: &Value, kind: &str) -> ErrorList {
    let sp = spec_path();
    match get(obj, &["spec", "selector"]) {
        None => vec![FieldError::required(&sp.child("selector"), "")],
        Some(sel) => {
            let mut errs = validate_label_selector(Some(sel), &sp.child("selector"));
            if selector_is_empty(sel) {
                errs.push(FieldError::invalid(
                    &sp.child("selector"),
                    sel.clone(),
                    format!("empty selector is invalid for {kind}"),
                ));
            }
            errs
        }
    }
}

/// Upstream's `ValidatePodTemplateSpecForReplicaSet` (also used by Deployments).
fn validate_template_for_replica_set(obj: &Value, kind_name: &str) -> ErrorList {
    let sp = spec_path();
    let tp = sp.child("template");
    let mut errs = ErrorList::new();
    let selector = match Selector::parse(get(obj, &["spec", "selector"])) {
        Ok(s) => s,
        Err(_) => {
            let sel = get(obj, &["spec", "selector"])
                .cloned()
                .unwrap_or(Value::Null);
            return vec![FieldError::invalid(
                &sp.child("selector"),
                sel,
                "invalid label selector",
            )];
        }
    };
    let Some(template) = get(obj, &["spec", "template"]) else {
        return vec![FieldError::required(&tp, "")];
    };
    if !selector.is_empty() && !selector.matches(get_obj(template, &["metadata", "labels"])) {
        errs.push(selector_mismatch(&tp, template_labels(obj)));
    }
    errs.extend(validate_pod_template_spec(Some(template), &tp));
    let rp = str_or_empty(template, &["spec", "restartPolicy"]);
    if rp != "Always" {
        errs.push(FieldError::not_supported(
            &tp.child("spec").child("restartPolicy"),
            rp,
            &["Always"],
        ));
    }
    if get(template, &["spec", "activeDeadlineSeconds"]).is_some() {
        errs.push(FieldError::forbidden(
            &tp.child("spec").child("activeDeadlineSeconds"),
            format!("activeDeadlineSeconds in {kind_name} is not Supported"),
        ));
    }
    errs
}

/// An IntOrString that must be a non-negative int or a percentage.
fn int_or_percent(v: Option<&Value>) -> Option<(i64, bool)> {
    match v {
        Some(Value::String(s)) => {
            if names::is_valid_percent(s).is_empty() {
                s[..s.len() - 1].parse().ok().map(|n| (n, true))
            } else {
                None
            }
        }
        Some(other) => as_int(other).map(|n| (n, false)),
        None => Some((0, false)),
    }
}

fn validate_positive_int_or_percent(v: Option<&Value>, path: &FieldPath) -> ErrorList {
    match v {
        Some(Value::String(s)) => names::is_valid_percent(s)
            .into_iter()
            .map(|m| FieldError::invalid(path, s.as_str(), m))
            .collect(),
        Some(other) => nonnegative(as_int(other), path),
        None => Vec::new(),
    }
}

fn not_more_than_100_percent(v: Option<&Value>, path: &FieldPath) -> ErrorList {
    match (int_or_percent(v), v) {
        (Some((n, true)), Some(raw)) if n > 100 => vec![FieldError::invalid(
            path,
            raw.clone(),
            "must not be greater than 100%",
        )],
        _ => Vec::new(),
    }
}

fn value_of(v: Option<&Value>) -> i64 {
    int_or_percent(v).map(|(n, _)| n).unwrap_or(0)
}

fn validate_deployment_spec(d: &Value) -> ErrorList {
    let sp = spec_path();
    let mut errs = nonnegative(get_int(d, &["spec", "replicas"]), &sp.child("replicas"));
    errs.extend(validate_selector(d, "deployment"));
    errs.extend(validate_template_for_replica_set(d, "Deployment"));
    let st = sp.child("strategy");
    match str_or_empty(d, &["spec", "strategy", "type"]) {
        "Recreate" => {
            if get(d, &["spec", "strategy", "rollingUpdate"]).is_some() {
                errs.push(FieldError::forbidden(
                    &st.child("rollingUpdate"),
                    "may not be specified when strategy `type` is 'Recreate'",
                ));
            }
        }
        "RollingUpdate" => match get(d, &["spec", "strategy", "rollingUpdate"]) {
            None => errs.push(FieldError::required(
                &st.child("rollingUpdate"),
                "this should be defaulted and never be nil",
            )),
            Some(ru) => {
                let rp = st.child("rollingUpdate");
                let (mu, ms) = (get(ru, &["maxUnavailable"]), get(ru, &["maxSurge"]));
                errs.extend(validate_positive_int_or_percent(
                    mu,
                    &rp.child("maxUnavailable"),
                ));
                errs.extend(validate_positive_int_or_percent(ms, &rp.child("maxSurge")));
                if value_of(mu) == 0 && value_of(ms) == 0 {
                    errs.push(FieldError::invalid(
                        &rp.child("maxUnavailable"),
                        mu.cloned().unwrap_or(Value::from(0)),
                        "may not be 0 when `maxSurge` is 0",
                    ));
                }
                errs.extend(not_more_than_100_percent(mu, &rp.child("maxUnavailable")));
            }
        },
        _ => {
            let strategy = get(d, &["spec", "strategy"])
                .cloned()
                .unwrap_or(Value::Null);
            errs.push(FieldError::not_supported(
                &st,
                strategy,
                &["Recreate", "RollingUpdate"],
            ));
        }
    }
    let min_ready = get_int(d, &["spec", "minReadySeconds"]).unwrap_or(0);
    errs.extend(nonnegative(Some(min_ready), &sp.child("minReadySeconds")));
    errs.extend(nonnegative(
        get_int(d, &["spec", "revisionHistoryLimit"]),
        &sp.child("revisionHistoryLimit"),
    ));
    if let Some(pds) = get_int(d, &["spec", "progressDeadlineSeconds"]) {
        errs.extend(nonnegative(Some(pds), &sp.child("progressDeadlineSeconds")));
        if pds <= min_ready {
            errs.push(FieldError::invalid(
                &sp.child("progressDeadlineSeconds"),
                pds,
                "must be greater than minReadySeconds",
            ));
        }
    }
    errs
}

fn validate_replica_set_spec(rs: &Value) -> ErrorList {
    let sp = spec_path();
    let mut errs = nonnegative(get_int(rs, &["spec", "replicas"]), &sp.child("replicas"));
    errs.extend(nonnegative(
        get_int(rs, &["spec", "minReadySeconds"]),
        &sp.child("minReadySeconds"),
    ));
    errs.extend(validate_selector(rs, "deployment"));
    errs.extend(validate_template_for_replica_set(rs, "ReplicaSet"));
    errs
}

fn validate_stateful_set_spec(ss: &Value) -> ErrorList {
    let sp = spec_path();
    let mut errs = ErrorList::new();
    match str_or_empty(ss, &["spec", "podManagementPolicy"]) {
        "" => errs.push(FieldError::required(&sp.child("podManagementPolicy"), "")),
        "OrderedReady" | "Parallel" => {}
        other => errs.push(FieldError::invalid(
            &sp.child("podManagementPolicy"),
            other,
            "must be 'OrderedReady' or 'Parallel'",
        )),
    }
    let up = sp.child("updateStrategy");
    let ru = get(ss, &["spec", "updateStrategy", "rollingUpdate"]);
    match str_or_empty(ss, &["spec", "updateStrategy", "type"]) {
        "" => errs.push(FieldError::required(&up, "")),
        "OnDelete" => {
            if let Some(ru) = ru {
                errs.push(FieldError::invalid(
                    &up.child("rollingUpdate"),
                    ru.clone(),
                    "only allowed for updateStrategy 'RollingUpdate'",
                ));
            }
        }
        "RollingUpdate" => {
            if let Some(ru) = ru {
                let rp = up.child("rollingUpdate");
                errs.extend(nonnegative(
                    get_int(ru, &["partition"]),
                    &rp.child("partition"),
                ));
                if let Some(mu) = get(ru, &["maxUnavailable"]) {
                    errs.extend(validate_positive_int_or_percent(
                        Some(mu),
                        &rp.child("maxUnavailable"),
                    ));
                    if value_of(Some(mu)) == 0 {
                        errs.push(FieldError::invalid(
                            &rp.child("maxUnavailable"),
                            mu.clone(),
                            "cannot be 0",
                        ));
                    }
                    errs.extend(not_more_than_100_percent(
                        Some(mu),
                        &rp.child("maxUnavailable"),
                    ));
                }
            }
        }
        _ => {
            let strategy = get(ss, &["spec", "updateStrategy"])
                .cloned()
                .unwrap_or(Value::Null);
            errs.push(FieldError::invalid(
                &up,
                strategy,
                "must be 'RollingUpdate' or 'OnDelete'",
            ));
        }
    }
    if let Some(policy) = get(ss, &["spec", "persistentVolumeClaimRetentionPolicy"]) {
        for f in ["whenDeleted", "whenScaled"] {
            let v = str_or_empty(policy, &[f]);
            if v != "Retain" && v != "Delete" {
                errs.push(FieldError::not_supported(
                    &sp.child("persistentVolumeClaimRetentionPolicy").child(f),
                    v,
                    &["Retain", "Delete"],
                ));
            }
        }
    }
    errs.extend(nonnegative(
        get_int(ss, &["spec", "replicas"]),
        &sp.child("replicas"),
    ));
    errs.extend(nonnegative(
        get_int(ss, &["spec", "minReadySeconds"]),
        &sp.child("minReadySeconds"),
    ));
    errs.extend(nonnegative(
        get_int(ss, &["spec", "ordinals", "start"]),
        &sp.child("ordinals.start"),
    ));
    errs.extend(validate_selector(ss, "statefulset"));
    let tp = sp.child("template");
    match Selector::parse(get(ss, &["spec", "selector"])) {
        Err(_) => {
            let sel = get(ss, &["spec", "selector"])
                .cloned()
                .unwrap_or(Value::Null);
            errs.push(FieldError::invalid(&sp.child("selector"), sel, ""));
        }
        Ok(selector) => match get(ss, &["spec", "template"]) {
            None => errs.push(FieldError::required(&tp, "")),
            Some(t) => {
                if !selector.is_empty() && !selector.matches(get_obj(t, &["metadata", "labels"])) {
                    errs.push(selector_mismatch(&tp, template_labels(ss)));
                }
                errs.extend(validate_labels(
                    get(t, &["metadata", "labels"]),
                    &tp.child("labels"),
                ));
                errs.extend(validate_annotations(
                    get(t, &["metadata", "annotations"]),
                    &tp.child("annotations"),
                ));
            }
        },
    }
    let rp = str_or_empty(ss, &["spec", "template", "spec", "restartPolicy"]);
    if rp != "Always" {
        errs.push(FieldError::not_supported(
            &tp.child("spec").child("restartPolicy"),
            rp,
            &["Always"],
        ));
    }
    if get(ss, &["spec", "template", "spec", "activeDeadlineSeconds"]).is_some() {
        errs.push(FieldError::forbidden(
            &tp.child("spec").child("activeDeadlineSeconds"),
            "activeDeadlineSeconds in StatefulSet is not Supported",
        ));
    }
    errs
}

fn validate_daemon_set_spec(ds: &Value) -> ErrorList {
    let sp = spec_path();
    let mut errs = validate_label_selector(get(ds, &["spec", "selector"]), &sp.child("selector"));
    if let Ok(selector) = Selector::parse(get(ds, &["spec", "selector"])) {
        if !selector.matches(get_obj(ds, &["spec", "template", "metadata", "labels"])) {
            errs.push(selector_mismatch(
                &sp.child("template"),
                template_labels(ds),
            ));
        }
    }
    if let Some(sel) = get(ds, &["spec", "selector"]).filter(|s| selector_is_empty(s)) {
        errs.push(FieldError::invalid(
            &sp.child("selector"),
            sel.clone(),
            "empty selector is invalid for daemonset",
        ));
    }
    let tp = sp.child("template");
    errs.extend(validate_pod_template_spec(
        get(ds, &["spec", "template"]),
        &tp,
    ));
    let rp = str_or_empty(ds, &["spec", "template", "spec", "restartPolicy"]);
    if rp != "Always" {
        errs.push(FieldError::not_supported(
            &tp.child("spec").child("restartPolicy"),
            rp,
            &["Always"],
        ));
    }
    if get(ds, &["spec", "template", "spec", "activeDeadlineSeconds"]).is_some() {
        errs.push(FieldError::forbidden(
            &tp.child("spec").child("activeDeadlineSeconds"),
            "activeDeadlineSeconds in DaemonSet is not Supported",
        ));
    }
    errs.extend(nonnegative(
        get_int(ds, &["spec", "minReadySeconds"]),
        &sp.child("minReadySeconds"),
    ));
    let up = sp.child("updateStrategy");
    match str_or_empty(ds, &["spec", "updateStrategy", "type"]) {
        "OnDelete" => {}
        "RollingUpdate" => match get(ds, &["spec", "updateStrategy", "rollingUpdate"]) {
            None => errs.push(FieldError::required(&up.child("rollingUpdate"), "")),
            Some(ru) => {
                let rp = up.child("rollingUpdate");
                let (mu, ms) = (get(ru, &["maxUnavailable"]), get(ru, &["maxSurge"]));
                errs.extend(validate_positive_int_or_percent(
                    mu,
                    &rp.child("maxUnavailable"),
                ));
                errs.extend(validate_positive_int_or_percent(ms, &rp.child("maxSurge")));
                errs.extend(not_more_than_100_percent(mu, &rp.child("maxUnavailable")));
                errs.extend(not_more_than_100_percent(ms, &rp.child("maxSurge")));
                match (value_of(mu) != 0, value_of(ms) != 0) {
                    (true, true) => errs.push(FieldError::invalid(
                        &rp.child("maxSurge"),
                        ms.cloned().unwrap_or(Value::Null),
                        "may not be set when maxUnavailable is non-zero",
                    )),
                    (false, false) => errs.push(FieldError::required(
                        &rp.child("maxUnavailable"),
                        "cannot be 0 when maxSurge is 0",
                    )),
                    _ => {}
                }
            }
        },
        _ => {
            let strategy = get(ds, &["spec", "updateStrategy"])
                .cloned()
                .unwrap_or(Value::Null);
            errs.push(FieldError::not_supported(
                &up,
                strategy,
                &["RollingUpdate", "OnDelete"],
            ));
        }
    }
    errs.extend(nonnegative(
        get_int(ds, &["spec", "revisionHistoryLimit"]),
        &sp.child("revisionHistoryLimit"),
    ));
    errs
}

/// `validate_create` for the apps group; `None` for kinds it does not know.
pub(crate) fn validate_create(kind: &str, obj: &Value) -> Option<ErrorList> {
    let (rule, spec): (NameRule, fn(&Value) -> ErrorList) = match kind {
        "Deployment" => (NameRule::Subdomain, validate_deployment_spec),
        "ReplicaSet" => (NameRule::Subdomain, validate_replica_set_spec),
        "StatefulSet" => (NameRule::Label, validate_stateful_set_spec),
        "DaemonSet" => (NameRule::Subdomain, validate_daemon_set_spec),
        "ControllerRevision" => (NameRule::Subdomain, validate_controller_revision),
        _ => return None,
    };
    let mut errs = meta::validate_object_meta(obj, rule, true);
    errs.extend(spec(obj));
    Some(errs)
}

fn validate_controller_revision(cr: &Value) -> ErrorList {
    let mut errs = ErrorList::new();
    if get(cr, &["data"]).is_none() {
        errs.push(FieldError::required(
            &FieldPath::root("data"),
            "data is mandatory",
        ));
    }
    errs.extend(nonnegative(
        get_int(cr, &["revision"]),
        &FieldPath::root("revision"),
    ));
    errs
}

/// `validate_update` for the apps group; `None` for kinds it does not know.
pub(crate) fn validate_update(kind: &str, new: &Value, old: &Value) -> Option<ErrorList> {
    let mut errs = meta::validate_object_meta_update(new, old, true);
    let sp = spec_path();
    match kind {
        "Deployment" | "ReplicaSet" | "DaemonSet" => {
            errs.extend(match kind {
                "Deployment" => validate_deployment_spec(new),
                "ReplicaSet" => validate_replica_set_spec(new),
                _ => validate_daemon_set_spec(new),
            });
            errs.extend(immutable(
                get(new, &["spec", "selector"]),
                get(old, &["spec", "selector"]),
                &sp.child("selector"),
            ));
        }
        "StatefulSet" => {
            errs.extend(validate_stateful_set_spec(new));
            let strip = |v: &Value| -> Value {
                let mut spec = get(v, &["spec"])
                    .cloned()
                    .unwrap_or_else(|| Value::Object(Map::new()));
                if let Some(m) = spec.as_object_mut() {
                    for f in [
                        "replicas",
                        "template",
                        "updateStrategy",
                        "minReadySeconds",
                        "ordinals",
                        "persistentVolumeClaimRetentionPolicy",
                    ] {
                        m.remove(f);
                    }
                }
                spec
            };
            if !semantic_eq(Some(&strip(new)), Some(&strip(old))) {
                errs.push(FieldError::forbidden(
                    &sp,
                    "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden",
                ));
            }
        }
        "ControllerRevision" => {
            errs.extend(validate_controller_revision(new));
            errs.extend(immutable(
                get(new, &["data"]),
                get(old, &["data"]),
                &FieldPath::root("data"),
            ));
        }
        _ => return None,
    }
    Some(errs)
}
