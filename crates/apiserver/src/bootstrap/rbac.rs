//! The default ClusterRoles and ClusterRoleBindings (upstream
//! `plugin/pkg/auth/authorizer/rbac/bootstrappolicy` and the `rbac/bootstrap-roles` post-start hook):
//! cluster-admin, admin, edit, view and the `system:aggregate-to-*` roles that feed the aggregated
//! ones (through the clusterrole-aggregation-controller), plus the discovery roles every user holds.
//! The list is data, `authz/bootstrap_policy.yaml`. Every object carries `kubernetes.io/bootstrapping: rbac-defaults`
//! and `rbac.authorization.kubernetes.io/autoupdate: "true"`.
//!
//! Reconciliation as upstream, simplified: an existing object whose autoupdate annotation is not
//! `"false"` gets the labels, annotations, rules (aggregation selectors for aggregated roles) and
//! subjects it lacks; nothing it has is removed. Upstream compares rules by coverage; here a rule is
//! missing unless an identical one exists. Of upstream's per-controller `system:controller:*` roles only
//! the clusterrole-aggregation controller's is created (it holds `escalate` on ClusterRoles, which
//! the RBAC escalation checks look for): rkube's controllers run as `system:masters`.

use std::sync::Arc;

use serde_json::{json, Map, Value};

use crate::ApiServer;

const GROUP: &str = "rbac.authorization.k8s.io";
const AUTOUPDATE: &str = "rbac.authorization.kubernetes.io/autoupdate";

/// The bootstrap objects ([`crate::authz::bootstrap_policy`]): ClusterRoles first (bindings refer to
/// them).
pub fn objects() -> Result<Vec<(&'static str, Value)>, String> {
    let (roles, bindings) = crate::authz::bootstrap_policy::objects()?;
    Ok(roles
        .into_iter()
        .map(|r| ("clusterroles", r))
        .chain(bindings.into_iter().map(|b| ("clusterrolebindings", b)))
        .collect())
}

/// Appends the items of `wanted[field]` that `current[field]` lacks; true if it did.
fn add_missing_items(current: &mut Value, wanted: &Value, field: &str) -> bool {
    let Some(want) = wanted.get(field).and_then(Value::as_array) else {
        return false;
    };
    if !current.get(field).is_some_and(Value::is_array) {
        current[field] = json!([]);
    }
    let Some(have) = current.get_mut(field).and_then(Value::as_array_mut) else {
        return false;
    };
    let mut changed = false;
    for item in want {
        if !have.contains(item) {
            have.push(item.clone());
            changed = true;
        }
    }
    changed
}

/// `existing` with what the bootstrap object adds, or `None` when nothing is missing or the object
/// opted out of updates.
pub fn reconcile(existing: &Value, wanted: &Value) -> Option<Value> {
    let meta = existing.get("metadata");
    let opted_out = meta
        .and_then(|m| m.pointer(&format!("/annotations/{}", AUTOUPDATE.replace('/', "~1"))))
        .and_then(Value::as_str)
        == Some("false");
    if opted_out {
        return None;
    }
    let mut out = existing.clone();
    let mut changed = false;
    for field in ["labels", "annotations"] {
        let Some(want) = wanted
            .pointer(&format!("/metadata/{field}"))
            .and_then(Value::as_object)
        else {
            continue;
        };
        if !out["metadata"][field].is_object() {
            out["metadata"][field] = Value::Object(Map::new());
        }
        for (k, v) in want {
            if out["metadata"][field].get(k).is_none() {
                out["metadata"][field][k] = v.clone();
                changed = true;
            }
        }
    }
    if let Some(rule) = wanted.get("aggregationRule") {
        if !out.get("aggregationRule").is_some_and(Value::is_object) {
            out["aggregationRule"] = json!({});
        }
        changed |= add_missing_items(&mut out["aggregationRule"], rule, "clusterRoleSelectors");
    } else {
        changed |= add_missing_items(&mut out, wanted, "rules");
    }
    changed |= add_missing_items(&mut out, wanted, "subjects");
    changed.then_some(out)
}

/// Creates the missing bootstrap objects and reconciles the existing ones.
pub async fn ensure(api: &Arc<ApiServer>) -> Result<(), String> {
    for (plural, wanted) in objects()? {
        let gvr = (GROUP, "v1", plural);
        let name = crate::objects::name(&wanted).to_string();
        let key = super::key_of(api, gvr, None, &name)?;
        let existing = api.store.get(&key).await.map_err(|e| e.to_string())?;
        let Some(kv) = existing else {
            super::create_if_missing(api, gvr, None, wanted).await?;
            continue;
        };
        let Ok(current) = serde_json::from_slice::<Value>(&kv.value) else {
            continue;
        };
        if let Some(updated) = reconcile(&current, &wanted) {
            let bytes = crate::objects::encode_for_storage(&updated);
            if let Err(e) = api.store.update(&key, bytes, Some(kv.mod_revision)).await {
                // Someone changed it meanwhile; the next start reconciles again.
                tracing::warn!(%key, error = %e, "could not reconcile a bootstrap RBAC object");
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bootstrap_objects_parse_and_carry_upstream_metadata() {
        let objects = objects().expect("policy parses");
        let names: Vec<&str> = objects
            .iter()
            .map(|(_, o)| crate::objects::name(o))
            .collect();
        for want in [
            "cluster-admin",
            "admin",
            "edit",
            "view",
            "system:aggregate-to-view",
            "system:discovery",
        ] {
            assert!(names.contains(&want), "{want} missing from {names:?}");
        }
        let (_, edit) = objects
            .iter()
            .find(|(p, o)| *p == "clusterroles" && crate::objects::name(o) == "edit")
            .expect("edit");
        assert_eq!(
            edit["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-admin"],
            "true"
        );
        assert_eq!(
            edit["metadata"]["labels"]["kubernetes.io/bootstrapping"],
            "rbac-defaults"
        );
        assert_eq!(edit["metadata"]["annotations"][AUTOUPDATE], "true");
        // Aggregated roles start with the rules of what they aggregate (the controller keeps them).
        assert!(!edit["rules"].as_array().expect("rules").is_empty());
        let (_, binding) = objects
            .iter()
            .find(|(p, o)| {
                *p == "clusterrolebindings" && crate::objects::name(o) == "cluster-admin"
            })
            .expect("binding");
        assert_eq!(binding["subjects"][0]["name"], "system:masters");
    }

    #[test]
    fn reconciliation_only_adds() {
        let wanted = json!({"metadata": {"name": "r", "labels": {"a": "1"}, "annotations": {AUTOUPDATE: "true"}},
            "rules": [{"verbs": ["get"], "resources": ["pods"]}, {"verbs": ["list"], "resources": ["pods"]}]});
        let existing = json!({"metadata": {"name": "r", "labels": {"mine": "x"}},
            "rules": [{"resources": ["pods"], "verbs": ["get"]}, {"verbs": ["*"], "resources": ["secrets"]}]});
        let updated = reconcile(&existing, &wanted).expect("changed");
        assert_eq!(
            updated["metadata"]["labels"],
            json!({"mine": "x", "a": "1"})
        );
        assert_eq!(updated["rules"].as_array().map(Vec::len), Some(3));
        assert_eq!(reconcile(&updated, &wanted), None);
        let mut opted_out = existing.clone();
        opted_out["metadata"]["annotations"] = json!({AUTOUPDATE: "false"});
        assert_eq!(reconcile(&opted_out, &wanted), None);
        let aggregated = json!({"metadata": {"name": "view"},
            "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"x": "true"}}]}});
        let customized = json!({"metadata": {"name": "view", "labels": {}, "annotations": {}},
            "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"y": "true"}}]},
            "rules": [{"verbs": ["get"]}]});
        let merged = reconcile(&customized, &aggregated).expect("changed");
        assert_eq!(
            merged["aggregationRule"]["clusterRoleSelectors"]
                .as_array()
                .map(Vec::len),
            Some(2)
        );
        assert_eq!(merged["rules"], customized["rules"]);
    }
}
