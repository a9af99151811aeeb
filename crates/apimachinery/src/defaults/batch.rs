//! The `batch` group (upstream `pkg/apis/batch/v1/defaults.go`, and the generated selector of
//! `pkg/registry/batch/job/strategy.go`): Jobs and CronJobs.
//!
//! The Job selector needs the Job's uid, which only the server knows, so it is a separate function,
//! [`default_job_selector`], for the server to call on create after it has assigned the uid.

use serde_json::{json, Map, Value};

use super::pod::{default_template_at, empty_object_meta};
use crate::validation::json::{child_obj, each_obj, set_default};

type Obj = Map<String, Value>;

pub(crate) fn job(j: &mut Obj) {
    let spec = child_obj(j, "spec");
    let unset = |spec: &Obj, k: &str| spec.get(k).is_none_or(Value::is_null);
    if unset(spec, "completions") && unset(spec, "parallelism") {
        spec.insert("completions".into(), Value::from(1));
        spec.insert("parallelism".into(), Value::from(1));
    }
    set_default(spec, "parallelism", Value::from(1));
    let per_index = !unset(spec, "backoffLimitPerIndex");
    set_default(
        spec,
        "backoffLimit",
        Value::from(if per_index { i64::from(i32::MAX) } else { 6 }),
    );
    set_default(spec, "completionMode", Value::from("NonIndexed"));
    set_default(spec, "suspend", Value::from(false));
    let failure_policy = !unset(spec, "podFailurePolicy");
    if let Some(policy) = spec
        .get_mut("podFailurePolicy")
        .and_then(Value::as_object_mut)
    {
        for rule in each_obj(policy, "rules") {
            for pattern in each_obj(rule, "onPodConditions") {
                set_default(pattern, "status", Value::from("True"));
            }
        }
    }
    set_default(
        spec,
        "podReplacementPolicy",
        Value::from(if failure_policy {
            "Failed"
        } else {
            "TerminatingOrFailed"
        }),
    );
    copy_template_labels(j);
    default_template_at(j, &["spec", "template"]);
    set_default(j, "status", json!({}));
}

/// `SetDefaults_Job`'s label copy: template labels become the Job's when it has none.
fn copy_template_labels(j: &mut Obj) {
    let labels = j
        .get("spec")
        .and_then(|s| s.get("template"))
        .and_then(|t| t.get("metadata"))
        .and_then(|m| m.get("labels"))
        .and_then(Value::as_object)
        .cloned();
    if let Some(labels) = labels {
        let meta = child_obj(j, "metadata");
        if meta
            .get("labels")
            .and_then(Value::as_object)
            .is_none_or(Map::is_empty)
        {
            meta.insert("labels".into(), Value::Object(labels));
        }
    }
}

/// The selector and pod template labels upstream generates for a Job on create (unless
/// `spec.manualSelector` is true): template labels `batch.kubernetes.io/controller-uid`,
/// `batch.kubernetes.io/job-name`, `controller-uid`, `job-name` (kept when the user set them),
/// `spec.selector.matchLabels` `batch.kubernetes.io/controller-uid: <uid>`. Also sets
/// `metadata.uid` when missing and copies the template labels to a Job without labels, as upstream
/// shows them when the Job is read back.
pub fn default_job_selector(obj: &mut Value, uid: &str) {
    let Some(j) = obj.as_object_mut() else { return };
    set_default(child_obj(j, "metadata"), "uid", Value::from(uid));
    let manual = j
        .get("spec")
        .and_then(|s| s.get("manualSelector"))
        .and_then(Value::as_bool)
        == Some(true);
    if manual {
        return;
    }
    let name = j
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let spec = child_obj(j, "spec");
    let labels = child_obj(child_obj(child_obj(spec, "template"), "metadata"), "labels");
    for (key, value) in [
        ("batch.kubernetes.io/controller-uid", uid),
        ("batch.kubernetes.io/job-name", name.as_str()),
        ("controller-uid", uid),
        ("job-name", name.as_str()),
    ] {
        labels.entry(key).or_insert_with(|| Value::from(value));
    }
    let valid = labels.values().all(|v| {
        v.as_str()
            .is_some_and(|s| crate::validation::names::is_label_value(s).is_empty())
    });
    let match_labels = child_obj(child_obj(spec, "selector"), "matchLabels");
    match_labels
        .entry("batch.kubernetes.io/controller-uid")
        .or_insert_with(|| Value::from(uid));
    // Invalid labels fail validation on the template already; copying them would repeat the errors.
    if valid {
        copy_template_labels(j);
    }
}

pub(crate) fn cron_job(cj: &mut Obj) {
    let spec = child_obj(cj, "spec");
    set_default(spec, "concurrencyPolicy", Value::from("Allow"));
    set_default(spec, "suspend", Value::from(false));
    set_default(spec, "successfulJobsHistoryLimit", Value::from(3));
    set_default(spec, "failedJobsHistoryLimit", Value::from(1));
    let jt = child_obj(spec, "jobTemplate");
    empty_object_meta(jt);
    default_template_at(jt, &["spec", "template"]);
    set_default(cj, "status", json!({}));
}
