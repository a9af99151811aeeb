//! The `apps` group (upstream `pkg/apis/apps/v1/defaults.go`): Deployment, ReplicaSet, StatefulSet,
//! DaemonSet, each with its pod template defaulted as a pod spec, and StatefulSet claim templates
//! defaulted as PersistentVolumeClaims.
//!
//! Deliberately different: the zero-valued `status` Go serializes right after create (`status: {}`,
//! `status: {replicas: 0}`, ...) is added when there is none, so the JSON matches upstream's.

use serde_json::{json, Value};

use super::core::persistent_volume_claim;
use super::pod::{default_template_at, empty_object_meta};
use crate::validation::json::{child_obj, each_obj, set_default, set_default_str};

type Obj = serde_json::Map<String, Value>;

pub(crate) fn deployment(d: &mut Obj) {
    let spec = child_obj(d, "spec");
    set_default(spec, "replicas", Value::from(1));
    let strategy = child_obj(spec, "strategy");
    set_default_str(strategy, "type", "RollingUpdate");
    if strategy.get("type").and_then(Value::as_str) == Some("RollingUpdate") {
        let ru = child_obj(strategy, "rollingUpdate");
        set_default(ru, "maxUnavailable", Value::from("25%"));
        set_default(ru, "maxSurge", Value::from("25%"));
    }
    set_default(spec, "revisionHistoryLimit", Value::from(10));
    set_default(spec, "progressDeadlineSeconds", Value::from(600));
    default_template_at(d, &["spec", "template"]);
    set_default(d, "status", json!({}));
}

pub(crate) fn replica_set(rs: &mut Obj) {
    set_default(child_obj(rs, "spec"), "replicas", Value::from(1));
    default_template_at(rs, &["spec", "template"]);
    set_default(rs, "status", json!({"replicas": 0}));
}

pub(crate) fn daemon_set(ds: &mut Obj) {
    let spec = child_obj(ds, "spec");
    let us = child_obj(spec, "updateStrategy");
    set_default_str(us, "type", "RollingUpdate");
    if us.get("type").and_then(Value::as_str) == Some("RollingUpdate") {
        let ru = child_obj(us, "rollingUpdate");
        set_default(ru, "maxUnavailable", Value::from(1));
        set_default(ru, "maxSurge", Value::from(0));
    }
    set_default(spec, "revisionHistoryLimit", Value::from(10));
    default_template_at(ds, &["spec", "template"]);
    set_default(
        ds,
        "status",
        json!({"currentNumberScheduled": 0, "numberMisscheduled": 0, "desiredNumberScheduled": 0, "numberReady": 0}),
    );
}

pub(crate) fn stateful_set(ss: &mut Obj) {
    let spec = child_obj(ss, "spec");
    set_default_str(spec, "podManagementPolicy", "OrderedReady");
    let us = child_obj(spec, "updateStrategy");
    let type_unset = us
        .get("type")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty);
    if type_unset {
        us.insert("type".into(), Value::from("RollingUpdate"));
        set_default(us, "rollingUpdate", json!({}));
    }
    if us.get("type").and_then(Value::as_str) == Some("RollingUpdate") {
        if let Some(ru) = us.get_mut("rollingUpdate").and_then(Value::as_object_mut) {
            set_default(ru, "partition", Value::from(0));
        }
    }
    let policy = child_obj(spec, "persistentVolumeClaimRetentionPolicy");
    set_default_str(policy, "whenDeleted", "Retain");
    set_default_str(policy, "whenScaled", "Retain");
    set_default(spec, "replicas", Value::from(1));
    set_default(spec, "revisionHistoryLimit", Value::from(10));
    for t in each_obj(spec, "volumeClaimTemplates") {
        set_default(t, "apiVersion", Value::from("v1"));
        set_default(t, "kind", Value::from("PersistentVolumeClaim"));
        empty_object_meta(t);
        persistent_volume_claim(t);
    }
    default_template_at(ss, &["spec", "template"]);
    set_default(ss, "status", json!({"replicas": 0, "availableReplicas": 0}));
}
