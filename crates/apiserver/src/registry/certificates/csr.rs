//! CertificateSigningRequests (upstream `pkg/registry/certificates/certificates/strategy.go`):
//! `status` may not change the Approved/Denied conditions (they are the `approval` subresource's),
//! `approval` changes only the conditions, and both fill in condition timestamps.

use apimachinery::resources::Resource;
use serde_json::{json, Value};

use crate::objects;
use crate::registry::{generic, Strategy};

pub struct CsrStrategy;

impl Strategy for CsrStrategy {
    /// Upstream `PrepareForCreate`: the requester comes from the request, never from the client,
    /// and no request is created with a status (so none is pre-approved).
    fn prepare_for_create_by(&self, user: &crate::authn::UserInfo, obj: &mut Value) {
        // Indexing a non-object Value for writing panics; validation refuses such bodies later.
        if !obj.is_object() {
            return;
        }
        if !obj["spec"].is_object() {
            obj["spec"] = json!({});
        }
        let spec = &mut obj["spec"];
        spec["username"] = json!(user.name);
        spec["uid"] = json!(user.uid);
        spec["groups"] = json!(user.groups);
        if let Some(s) = spec.as_object_mut() {
            // rkube's users carry no extra attributes.
            s.remove("extra");
        }
        if let Some(o) = obj.as_object_mut() {
            o.remove("status");
        }
    }

    fn prepare_for_status_update(&self, _resource: &Resource, new: &mut Value, old: &Value) {
        generic::prepare_for_status_update(new, old);
        // Approval is the approval subresource's: Approved/Denied conditions stay as stored.
        for kind in ["Approved", "Denied"] {
            preserve_condition_instances(new, old, kind);
        }
        populate_condition_timestamps(new, old);
    }

    /// Upstream `csrApprovalStrategy`: only the status conditions (and metadata) change; the spec
    /// and the rest of the status stay as stored.
    fn prepare_for_approval_update(&self, new: &mut Value, old: &Value) -> bool {
        let conditions = new.pointer("/status/conditions").cloned();
        generic::copy_server_meta(new, old);
        let mut merged = old.clone();
        generic::set_top(&mut merged, "metadata", new.get("metadata").cloned());
        if !merged["status"].is_object() {
            merged["status"] = json!({});
        }
        match conditions {
            Some(c) => merged["status"]["conditions"] = c,
            None => {
                if let Some(s) = merged["status"].as_object_mut() {
                    s.remove("conditions");
                }
            }
        }
        *new = merged;
        populate_condition_timestamps(new, old);
        true
    }
}

fn conditions(obj: &Value) -> &[Value] {
    obj.pointer("/status/conditions")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// Upstream `preserveConditionInstances`: the stored instances of a condition type replace the
/// request's, when the request has as many (else validation reports the change).
fn preserve_condition_instances(new: &mut Value, old: &Value, kind: &str) {
    let of_kind =
        |c: &[Value]| -> Vec<usize> { (0..c.len()).filter(|i| c[*i]["type"] == kind).collect() };
    let old_conditions = conditions(old).to_vec();
    let old_at = of_kind(&old_conditions);
    let new_at = of_kind(conditions(new));
    if old_at.len() != new_at.len() {
        return;
    }
    if let Some(list) = new
        .pointer_mut("/status/conditions")
        .and_then(Value::as_array_mut)
    {
        for (o, n) in old_at.iter().zip(new_at) {
            list[n] = old_conditions[*o].clone();
        }
    }
}

/// Upstream `populateConditionTimestamps`: a condition without `lastUpdateTime` gets now; one
/// without `lastTransitionTime` keeps that of a stored condition of the same type and status, or
/// gets now.
fn populate_condition_timestamps(new: &mut Value, old: &Value) {
    let now = objects::now_rfc3339();
    let old_conditions = conditions(old).to_vec();
    let Some(list) = new
        .pointer_mut("/status/conditions")
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    let unset = |v: Option<&Value>| v.is_none_or(|v| v.is_null() || v == "");
    for c in list.iter_mut().filter(|c| c.is_object()) {
        if unset(c.get("lastUpdateTime")) {
            c["lastUpdateTime"] = now.clone().into();
        }
        if unset(c.get("lastTransitionTime")) {
            let kept = old_conditions.iter().find(|o| {
                o["type"] == c["type"]
                    && o["status"] == c["status"]
                    && !unset(o.get("lastTransitionTime"))
            });
            c["lastTransitionTime"] =
                kept.map_or_else(|| now.clone().into(), |o| o["lastTransitionTime"].clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use apimachinery::resources::Registry;

    /// Upstream's CSR status strategy keeps stored Approved/Denied conditions and fills condition
    /// timestamps; the approval strategy changes only the conditions.
    #[test]
    fn the_requester_is_the_requesting_user() {
        let user = crate::authn::UserInfo {
            name: "system:bootstrap:abcdef".into(),
            uid: "u1".into(),
            groups: vec!["system:bootstrappers".into()],
        };
        let mut obj = json!({"spec": {"username": "admin", "groups": ["system:masters"],
            "extra": {"k": ["v"]}, "signerName": "s"},
            "status": {"conditions": [{"type": "Approved", "status": "True"}]}});
        CsrStrategy.prepare_for_create_by(&user, &mut obj);
        assert_eq!(
            obj,
            json!({"spec": {"username": "system:bootstrap:abcdef", "uid": "u1",
                "groups": ["system:bootstrappers"], "signerName": "s"}})
        );
    }

    #[test]
    fn csr_status_and_approval_follow_upstream() {
        let reg = Registry::with_builtin();
        let csrs = reg
            .get("certificates.k8s.io", "v1", "certificatesigningrequests")
            .unwrap();
        let old = json!({"metadata": {"name": "c"}, "spec": {"signerName": "example.com/s"},
            "status": {"conditions": [{"type": "Approved", "status": "True", "reason": "A",
                "lastUpdateTime": "2020-01-01T00:00:00Z", "lastTransitionTime": "2020-01-01T00:00:00Z"}]}});
        let mut new = json!({"metadata": {"name": "c", "annotations": {"a": "b"}}, "spec": {"signerName": "x/y"},
            "status": {"certificate": "Y2VydA==", "conditions": [
                {"type": "Approved", "status": "True", "reason": "changed"},
                {"type": "StatusUpdate", "status": "True", "reason": "E2E"}]}});
        CsrStrategy.prepare_for_status_update(&csrs, &mut new, &old);
        assert_eq!(new["spec"]["signerName"], "example.com/s");
        assert_eq!(new["metadata"]["annotations"]["a"], "b");
        assert_eq!(new["status"]["certificate"], "Y2VydA==");
        assert_eq!(
            new["status"]["conditions"][0],
            old["status"]["conditions"][0]
        );
        assert_eq!(new["status"]["conditions"][1]["type"], "StatusUpdate");
        assert!(new["status"]["conditions"][1]["lastUpdateTime"].is_string());
        assert!(new["status"]["conditions"][1]["lastTransitionTime"].is_string());

        let stored = json!({"metadata": {"name": "c"}, "spec": {"signerName": "example.com/s"},
            "status": {"certificate": "Y2VydA=="}});
        let mut approval = json!({"metadata": {"name": "c", "annotations": {"patchedapproval": "true"}},
            "spec": {"signerName": "x/y"},
            "status": {"certificate": "b3RoZXI=", "conditions": [{"type": "ApprovalPatch", "status": "True", "reason": "e2e"}]}});
        assert!(CsrStrategy.prepare_for_approval_update(&mut approval, &stored));
        assert_eq!(
            approval["metadata"]["annotations"]["patchedapproval"],
            "true"
        );
        assert_eq!(approval["spec"]["signerName"], "example.com/s");
        assert_eq!(approval["status"]["certificate"], "Y2VydA==");
        assert_eq!(approval["status"]["conditions"][0]["type"], "ApprovalPatch");
        assert!(approval["status"]["conditions"][0]["lastTransitionTime"].is_string());
    }

    #[test]
    fn a_kept_transition_time_is_reused_and_other_kinds_have_no_approval() {
        let old = json!({"status": {"conditions": [{"type": "Failed", "status": "True",
            "lastTransitionTime": "2020-01-01T00:00:00Z"}]}});
        let mut new = json!({"status": {"conditions": [{"type": "Failed", "status": "True"}]}});
        populate_condition_timestamps(&mut new, &old);
        assert_eq!(
            new["status"]["conditions"][0]["lastTransitionTime"],
            "2020-01-01T00:00:00Z"
        );
        let mut other = json!({});
        assert!(!crate::registry::strategy_for("", "pods")
            .prepare_for_approval_update(&mut other, &json!({})));
    }
}
