//! The `batch` group (upstream `pkg/apis/batch/validation/validation.go`): Jobs, including the
//! generated-selector check, and CronJobs with their cron schedule ([`super::cron`]).
//!
//! Deliberately different: pod failure and success policies are not validated in depth; time zones are
//! checked for form only (no tz database).

use serde_json::{Map, Value};

use super::core_pod::validate_pod_template_spec;
use super::cron;
use super::field::{ErrorList, FieldError, FieldPath};
use super::json::{get, get_bool, get_int, get_obj, get_str, semantic_eq, str_or_empty};
use super::meta::{
    self, immutable, nonnegative, validate_annotations, validate_label_selector, validate_labels,
    NameRule, Selector,
};
use super::names;

const MAX_PARALLELISM_FOR_INDEXED_JOB: i64 = 100_000;

fn labels_value(template: &Value) -> Value {
    get_obj(template, &["metadata", "labels"])
        .cloned()
        .map(Value::Object)
        .unwrap_or(Value::Null)
}

/// Upstream's `validateJobSpec`: the parts shared by Jobs and CronJob job templates. `path` is the
/// JobSpec (`spec` or `spec.jobTemplate.spec`).
fn validate_job_spec_common(spec: &Value, path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    for f in [
        "parallelism",
        "completions",
        "activeDeadlineSeconds",
        "backoffLimit",
        "ttlSecondsAfterFinished",
    ] {
        errs.extend(nonnegative(get_int(spec, &[f]), &path.child(f)));
    }
    let indexed = get_str(spec, &["completionMode"]) == Some("Indexed");
    if let Some(mode) = get_str(spec, &["completionMode"]) {
        if mode != "NonIndexed" && mode != "Indexed" {
            errs.push(FieldError::not_supported(
                &path.child("completionMode"),
                mode,
                &["NonIndexed", "Indexed"],
            ));
        }
        if indexed {
            if get(spec, &["completions"]).is_none() {
                errs.push(FieldError::required(
                    &path.child("completions"),
                    "when completion mode is Indexed",
                ));
            }
            if let Some(p) =
                get_int(spec, &["parallelism"]).filter(|p| *p > MAX_PARALLELISM_FOR_INDEXED_JOB)
            {
                errs.push(FieldError::invalid(
                    &path.child("parallelism"),
                    p,
                    format!("must be less than or equal to {MAX_PARALLELISM_FOR_INDEXED_JOB} when completion mode is Indexed"),
                ));
            }
        }
    }
    if let Some(b) = get_int(spec, &["backoffLimitPerIndex"]) {
        errs.extend(nonnegative(Some(b), &path.child("backoffLimitPerIndex")));
        if !indexed {
            errs.push(FieldError::forbidden(
                &path.child("backoffLimitPerIndex"),
                "requires indexed completion mode",
            ));
        }
    }
    if let Some(m) = get_int(spec, &["maxFailedIndexes"]) {
        errs.extend(nonnegative(Some(m), &path.child("maxFailedIndexes")));
        if get(spec, &["backoffLimitPerIndex"]).is_none() {
            errs.push(FieldError::required(
                &path.child("backoffLimitPerIndex"),
                "when maxFailedIndexes is specified",
            ));
        }
    }
    let failure_policy = get(spec, &["podFailurePolicy"]).is_some();
    if let Some(prp) = get_str(spec, &["podReplacementPolicy"]) {
        let p = path.child("podReplacementPolicy");
        if failure_policy {
            if prp != "Failed" {
                errs.push(FieldError::not_supported(&p, prp, &["Failed"]));
            }
        } else if prp != "Failed" && prp != "TerminatingOrFailed" {
            errs.push(FieldError::not_supported(
                &p,
                prp,
                &["Failed", "TerminatingOrFailed"],
            ));
        }
    }
    let tp = path.child("template");
    errs.extend(validate_pod_template_spec(get(spec, &["template"]), &tp));
    let rp_path = tp.child("spec").child("restartPolicy");
    match str_or_empty(spec, &["template", "spec", "restartPolicy"]) {
        "Always" | "" => errs.push(FieldError::required(
            &rp_path,
            "valid values: \"OnFailure\", \"Never\"",
        )),
        "OnFailure" if failure_policy => errs.push(FieldError::invalid(
            &rp_path,
            "OnFailure",
            "only \"Never\" is supported when podFailurePolicy is specified",
        )),
        "OnFailure" | "Never" => {}
        other => errs.push(FieldError::not_supported(
            &rp_path,
            other,
            &["OnFailure", "Never"],
        )),
    }
    errs
}

/// Upstream's `ValidateJobSpec`: the common part plus the selector rules.
fn validate_job_spec(job: &Value) -> ErrorList {
    let empty = Value::Object(Map::new());
    let spec = get(job, &["spec"]).unwrap_or(&empty);
    let sp = FieldPath::root("spec");
    let mut errs = validate_job_spec_common(spec, &sp);
    let selector = get(spec, &["selector"]);
    match selector {
        None => errs.push(FieldError::required(&sp.child("selector"), "")),
        Some(sel) => errs.extend(validate_label_selector(Some(sel), &sp.child("selector"))),
    }
    if let Ok(parsed) = Selector::parse(selector) {
        if parsed.is_empty() {
            errs.push(FieldError::required(&sp.child("selector"), ""));
        }
        let template = get(spec, &["template"]).unwrap_or(&empty);
        if !parsed.matches(get_obj(template, &["metadata", "labels"])) {
            errs.push(FieldError::invalid(
                &sp.child("template").child("metadata").child("labels"),
                labels_value(template),
                "`selector` does not match template `labels`",
            ));
        }
    }
    errs
}

fn validate_has_label(template: &Value, key: &str, expected: &str) -> ErrorList {
    let path = FieldPath::root("spec")
        .child("template")
        .child("metadata")
        .child("labels")
        .key(key);
    match get_str(template, &["metadata", "labels", key]) {
        None => vec![FieldError::required(&path, format!("must be '{expected}'"))],
        Some(v) if v != expected => vec![FieldError::invalid(
            &path,
            labels_value(template),
            format!("must be '{expected}'"),
        )],
        Some(_) => Vec::new(),
    }
}

/// Upstream's `validateGeneratedSelector` (with the `batch.kubernetes.io/` labels required).
fn validate_generated_selector(job: &Value) -> ErrorList {
    let mut errs = ErrorList::new();
    if get_bool(job, &["spec", "manualSelector"]) == Some(true) {
        return errs;
    }
    let Some(selector) = get(job, &["spec", "selector"]) else {
        return errs;
    };
    let uid = str_or_empty(job, &["metadata", "uid"]);
    let name = str_or_empty(job, &["metadata", "name"]);
    if uid.is_empty() {
        errs.push(FieldError::required(
            &FieldPath::root("metadata").child("uid"),
            "",
        ));
    }
    let empty = Value::Object(Map::new());
    let template = get(job, &["spec", "template"]).unwrap_or(&empty);
    let expected = [
        ("controller-uid", uid),
        ("job-name", name),
        ("batch.kubernetes.io/controller-uid", uid),
        ("batch.kubernetes.io/job-name", name),
    ];
    for (k, v) in expected {
        errs.extend(validate_has_label(template, k, v));
    }
    let expected_labels: Map<String, Value> = expected
        .iter()
        .map(|(k, v)| (k.to_string(), Value::from(*v)))
        .collect();
    if let Ok(s) = Selector::parse(Some(selector)) {
        if !s.matches(Some(&expected_labels)) {
            errs.push(FieldError::invalid(
                &FieldPath::root("spec").child("selector"),
                selector.clone(),
                "`selector` not auto-generated",
            ));
        }
    }
    errs
}

fn validate_job_create(job: &Value) -> ErrorList {
    let mut errs = meta::validate_object_meta(job, NameRule::Subdomain, true);
    errs.extend(validate_generated_selector(job));
    errs.extend(validate_job_spec(job));
    if get_str(job, &["spec", "completionMode"]) == Some("Indexed") {
        if let Some(c) = get_int(job, &["spec", "completions"]).filter(|c| *c > 0) {
            let name = str_or_empty(job, &["metadata", "name"]);
            let hostname = format!("{name}-{}", c - 1);
            if !names::is_dns1123_label(&hostname).is_empty() {
                errs.push(FieldError::invalid(
                    &FieldPath::root("metadata").child("name"),
                    name,
                    format!("will not able to create pod with invalid DNS label: {hostname}"),
                ));
            }
        }
    }
    errs
}

/// Upstream's `validatePodTemplateUpdate`: the template is immutable, except scheduling directives,
/// labels and annotations of a suspended Job that never started.
fn validate_template_update(new: &Value, old: &Value) -> ErrorList {
    let path = FieldPath::root("spec").child("template");
    let new_t = get(new, &["spec", "template"])
        .cloned()
        .unwrap_or(Value::Null);
    let mut old_t = get(old, &["spec", "template"])
        .cloned()
        .unwrap_or(Value::Null);
    let suspended = get_bool(old, &["spec", "suspend"]) == Some(true);
    let not_started = get(old, &["status", "startTime"]).is_none();
    if suspended && not_started {
        if let Some(ot) = old_t.as_object_mut() {
            let ometa = super::json::child_obj(ot, "metadata");
            for f in ["labels", "annotations"] {
                match get(&new_t, &["metadata", f]) {
                    Some(v) => ometa.insert(f.into(), v.clone()),
                    None => ometa.remove(f),
                };
            }
            let ospec = super::json::child_obj(ot, "spec");
            for f in ["nodeSelector", "tolerations", "schedulingGates"] {
                match get(&new_t, &["spec", f]) {
                    Some(v) => ospec.insert(f.into(), v.clone()),
                    None => ospec.remove(f),
                };
            }
            let new_na = get(&new_t, &["spec", "affinity", "nodeAffinity"]).cloned();
            let aff = super::json::child_obj(ospec, "affinity");
            match new_na {
                Some(na) => aff.insert("nodeAffinity".into(), na),
                None => aff.remove("nodeAffinity"),
            };
        }
    }
    if semantic_eq(Some(&new_t), Some(&old_t)) {
        Vec::new()
    } else {
        vec![FieldError::invalid(&path, new_t, meta::FIELD_IMMUTABLE)]
    }
}

fn validate_job_update(new: &Value, old: &Value) -> ErrorList {
    let mut errs = meta::validate_object_meta_update(new, old, true);
    errs.extend(validate_job_spec(new));
    let sp = FieldPath::root("spec");
    let indexed = get_str(new, &["spec", "completionMode"]) == Some("Indexed");
    let (nc, oc) = (
        get(new, &["spec", "completions"]),
        get(old, &["spec", "completions"]),
    );
    if !indexed {
        errs.extend(immutable(nc, oc, &sp.child("completions")));
    } else if !semantic_eq(nc, oc)
        && get_int(new, &["spec", "completions"]) != get_int(new, &["spec", "parallelism"])
    {
        errs.push(FieldError::invalid(
            &sp.child("completions"),
            nc.cloned().unwrap_or(Value::Null),
            "can only be modified in tandem with spec.parallelism",
        ));
    }
    errs.extend(immutable(
        get(new, &["spec", "selector"]),
        get(old, &["spec", "selector"]),
        &sp.child("selector"),
    ));
    errs.extend(validate_template_update(new, old));
    for f in [
        "completionMode",
        "podFailurePolicy",
        "backoffLimitPerIndex",
        "managedBy",
        "successPolicy",
    ] {
        errs.extend(immutable(
            get(new, &["spec", f]),
            get(old, &["spec", f]),
            &sp.child(f),
        ));
    }
    errs
}

fn validate_cron_job_spec(cj: &Value) -> ErrorList {
    let empty = Value::Object(Map::new());
    let spec = get(cj, &["spec"]).unwrap_or(&empty);
    let sp = FieldPath::root("spec");
    let mut errs = ErrorList::new();
    let schedule = str_or_empty(spec, &["schedule"]);
    if schedule.is_empty() {
        errs.push(FieldError::required(&sp.child("schedule"), ""));
    } else {
        if let Err(e) = cron::parse_standard(schedule) {
            errs.push(FieldError::invalid(&sp.child("schedule"), schedule, e));
        }
        if schedule.contains("TZ") {
            errs.push(FieldError::invalid(
                &sp.child("schedule"),
                schedule,
                "cannot use TZ or CRON_TZ in schedule, use timeZone field instead",
            ));
        }
    }
    if let Some(tz) = get_str(spec, &["timeZone"]) {
        let p = sp.child("timeZone");
        if tz.is_empty() {
            errs.push(FieldError::invalid(
                &p,
                tz,
                "timeZone must be nil or non-empty string",
            ));
        } else if tz.eq_ignore_ascii_case("local") {
            errs.push(FieldError::invalid(&p, tz, "timeZone must be an explicit time zone as defined in https://www.iana.org/time-zones"));
        } else if tz.contains(char::is_whitespace) || tz.starts_with('/') || tz.contains("..") {
            errs.push(FieldError::invalid(
                &p,
                tz,
                format!("unknown time zone {tz}"),
            ));
        }
    }
    errs.extend(nonnegative(
        get_int(spec, &["startingDeadlineSeconds"]),
        &sp.child("startingDeadlineSeconds"),
    ));
    match str_or_empty(spec, &["concurrencyPolicy"]) {
        "Allow" | "Forbid" | "Replace" => {}
        "" => errs.push(FieldError::required(&sp.child("concurrencyPolicy"), "")),
        other => errs.push(FieldError::not_supported(
            &sp.child("concurrencyPolicy"),
            other,
            &["Allow", "Forbid", "Replace"],
        )),
    }
    let jt = sp.child("jobTemplate");
    let template = get(spec, &["jobTemplate"]).unwrap_or(&empty);
    errs.extend(validate_labels(
        get(template, &["metadata", "labels"]),
        &jt.child("metadata").child("labels"),
    ));
    errs.extend(validate_annotations(
        get(template, &["metadata", "annotations"]),
        &jt.child("metadata").child("annotations"),
    ));
    let job_spec = get(template, &["spec"]).unwrap_or(&empty);
    errs.extend(validate_job_spec_common(job_spec, &jt.child("spec")));
    if let Some(sel) = get(job_spec, &["selector"]) {
        errs.push(FieldError::invalid(
            &jt.child("spec").child("selector"),
            sel.clone(),
            "`selector` will be auto-generated",
        ));
    }
    if get_bool(job_spec, &["manualSelector"]) == Some(true) {
        errs.push(FieldError::not_supported(
            &jt.child("spec").child("manualSelector"),
            true,
            &["nil", "false"],
        ));
    }
    for f in ["successfulJobsHistoryLimit", "failedJobsHistoryLimit"] {
        errs.extend(nonnegative(get_int(spec, &[f]), &sp.child(f)));
    }
    errs
}

fn validate_cron_job_create(cj: &Value) -> ErrorList {
    let mut errs = meta::validate_object_meta(cj, NameRule::Subdomain, true);
    errs.extend(validate_cron_job_spec(cj));
    let name = str_or_empty(cj, &["metadata", "name"]);
    if name.len() > 52 {
        errs.push(FieldError::invalid(
            &FieldPath::root("metadata").child("name"),
            name,
            "must be no more than 52 characters",
        ));
    }
    errs
}

/// `validate_create` for the batch group; `None` for kinds it does not know.
pub(crate) fn validate_create(kind: &str, obj: &Value) -> Option<ErrorList> {
    match kind {
        "Job" => Some(validate_job_create(obj)),
        "CronJob" => Some(validate_cron_job_create(obj)),
        _ => None,
    }
}

/// `validate_update` for the batch group; `None` for kinds it does not know.
pub(crate) fn validate_update(kind: &str, new: &Value, old: &Value) -> Option<ErrorList> {
    match kind {
        "Job" => Some(validate_job_update(new, old)),
        "CronJob" => {
            let mut errs = meta::validate_object_meta_update(new, old, true);
            errs.extend(validate_cron_job_spec(new));
            Some(errs)
        }
        _ => None,
    }
}
