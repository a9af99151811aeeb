//! RBAC's registry (upstream `pkg/registry/rbac`): privilege-escalation prevention on writes of
//! Roles, ClusterRoles and their bindings, as upstream's `policybased` storages wrap each kind's
//! store. A user may only grant what they hold: a role's rules must be covered by the user's own
//! rules ([`validation`]), a binding's role too, unless [`escalation_check`] says the user may skip
//! that (`system:masters`, the `escalate` verb on roles, the `bind` verb on the bound role).
//!
//! The checks run as [`Strategy::authorize_write`](super::Strategy::authorize_write), after
//! mutating admission and before validation, where upstream's wrappers run. The user's rules come
//! from the authorizer's index ([`crate::authz::rbac::Index`]), the data every request is
//! authorized with.
//!
//! Differences: upstream checks a `generateName` create before the name is made, so its 403 names
//! no object; rkube's names the generated one.

pub mod binding;
pub mod escalation_check;
pub mod role;
pub mod validation;

use apimachinery::status::{ApiError, Qualified};
use serde_json::Value;

pub const GROUP: &str = "rbac.authorization.k8s.io";

/// Metadata the garbage collector writes (upstream `IsOnlyMutatingGCFields` compares the rest).
/// `resourceVersion` and `managedFields` are left out too: upstream's field manager has already
/// run when it compares, rkube's runs after the check, so they would differ for bookkeeping alone.
const GC_META: &[&str] = &[
    "ownerReferences",
    "finalizers",
    "selfLink",
    "resourceVersion",
    "managedFields",
];

/// Whether an update changes nothing but what the garbage collector writes, which upstream lets
/// through unchecked so that orphaning and foreground deletion work on any role or binding.
pub fn only_gc_fields_change(new: &Value, old: &Value) -> bool {
    let strip = |obj: &Value| {
        let mut obj = obj.clone();
        if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            for field in GC_META {
                meta.remove(*field);
            }
        }
        obj
    };
    strip(new) == strip(old)
}

/// Upstream's `NewForbidden(rbac.Resource(plural), name, err)`.
pub fn forbidden(plural: &str, name: &str, why: &str) -> ApiError {
    ApiError::forbidden_about(&Qualified::new(GROUP, plural), name, why)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn gc_fields_alone_skip_the_checks() {
        let old = json!({"metadata": {"name": "r", "resourceVersion": "5", "labels": {"a": "1"}},
            "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]});
        let mut new = old.clone();
        new["metadata"]["finalizers"] = json!(["example.com/keep"]);
        new["metadata"]["ownerReferences"] = json!([{"name": "o"}]);
        new["metadata"]["resourceVersion"] = json!("4");
        assert!(only_gc_fields_change(&new, &old));
        // A label is not the garbage collector's: upstream checks the rules again.
        new["metadata"]["labels"]["a"] = json!("2");
        assert!(!only_gc_fields_change(&new, &old));
        let mut new = old.clone();
        new["rules"][0]["verbs"] = json!(["list"]);
        assert!(!only_gc_fields_change(&new, &old));
    }

    #[test]
    fn forbidden_names_the_object_as_upstream() {
        let err = forbidden("roles", "r", "why");
        assert_eq!(err.code, 403);
        assert_eq!(
            err.message,
            "roles.rbac.authorization.k8s.io \"r\" is forbidden: why"
        );
    }
}
