//! RoleBindings and ClusterRoleBindings (upstream `pkg/registry/rbac/{rolebinding,clusterrolebinding}/policybased`):
//! binding a role grants its rules, so the user must hold them all (in the binding's namespace),
//! unless they may escalate or `bind` that role.
//!
//! The bound role comes from the authorizer's index, or from storage when the index has not seen
//! it yet (upstream reads it from storage every time): a role created just before its binding is
//! found. A role that does not exist is a 404, as upstream.

use apimachinery::status::{ApiError, Qualified};
use serde_json::Value;

use super::escalation_check::{binding_authorized, escalation_allowed, RoleRef};
use super::{forbidden, only_gc_fields_change, validation, GROUP};
use crate::authn::UserInfo;
use crate::authz::rbac::{rules_of, Rule};
use crate::authz::Authorizer;
use crate::registry::Strategy;
use crate::rest::{storage_error, Ctx};

pub struct BindingStrategy;

#[async_trait::async_trait]
impl Strategy for BindingStrategy {
    async fn authorize_write(
        &self,
        ctx: &Ctx<'_>,
        obj: &Value,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        let (authorizer, namespace) = (&ctx.api.authorizer, ctx.namespace());
        let role_ref = RoleRef::of(obj);
        if may_skip(authorizer, ctx.user, &role_ref, namespace, obj, old) {
            return Ok(());
        }
        let Some(rules) = referenced_rules(ctx, &role_ref, namespace).await? else {
            return Ok(());
        };
        confirm(
            authorizer,
            ctx.user,
            namespace,
            (&ctx.req.resource, crate::objects::name(obj)),
            &rules,
        )
    }
}

/// The ways past the coverage check, in upstream's order.
pub fn may_skip(
    authorizer: &Authorizer,
    user: &UserInfo,
    role_ref: &RoleRef,
    namespace: &str,
    obj: &Value,
    old: Option<&Value>,
) -> bool {
    escalation_allowed(user)
        || old.is_some_and(|old| only_gc_fields_change(obj, old))
        || binding_authorized(authorizer, user, role_ref, namespace)
}

/// Upstream `ConfirmNoEscalation` on the bound role's rules, as the 403 of `(plural, name)`.
pub fn confirm(
    authorizer: &Authorizer,
    user: &UserInfo,
    namespace: &str,
    (plural, name): (&str, &str),
    rules: &[Rule],
) -> Result<(), ApiError> {
    let (held, errors) = authorizer.resolve_rules(user, namespace);
    validation::confirm_no_escalation(user, (&held, &errors), rules)
        .map_err(|why| forbidden(plural, name, &why))
}

/// The rules of the bound role; `None` for a `roleRef` validation refuses anyway (an unknown kind,
/// a Role named by a ClusterRoleBinding, no name), which is left to validation's 422.
async fn referenced_rules(
    ctx: &Ctx<'_>,
    role_ref: &RoleRef,
    namespace: &str,
) -> Result<Option<Vec<Rule>>, ApiError> {
    let plural = match (role_ref.kind.as_str(), namespace.is_empty()) {
        ("ClusterRole", _) => "clusterroles",
        ("Role", false) => "roles",
        _ => return Ok(None),
    };
    if role_ref.name.is_empty() {
        return Ok(None);
    }
    let authorizer = &ctx.api.authorizer;
    if let Some(rules) = authorizer.role_reference_rules(&role_ref.kind, namespace, &role_ref.name)
    {
        return Ok(Some(rules));
    }
    let not_found = || ApiError::not_found(&Qualified::new(GROUP, plural), &role_ref.name);
    let resource = ctx
        .api
        .registry
        .get(GROUP, "v1", plural)
        .ok_or_else(not_found)?;
    let key = if plural == "roles" {
        format!("/{}/{namespace}/{}", resource.storage, role_ref.name)
    } else {
        format!("/{}/{}", resource.storage, role_ref.name)
    };
    let kv = ctx
        .api
        .store
        .get(&key)
        .await
        .map_err(storage_error)?
        .ok_or_else(not_found)?;
    let role: Value = serde_json::from_slice(&kv.value).map_err(ApiError::internal)?;
    Ok(Some(rules_of(&role)))
}

#[cfg(test)]
mod tests {
    use super::super::escalation_check::tests::{alice_with, user};
    use super::*;
    use serde_json::json;

    fn binding_to(kind: &str, name: &str) -> Value {
        json!({"metadata": {"name": "b2", "namespace": "team"},
            "roleRef": {"apiGroup": GROUP, "kind": kind, "name": name},
            "subjects": [{"kind": "User", "name": "bob"}]})
    }

    fn cluster_admin_rules() -> Vec<Rule> {
        rules_of(&json!({"rules": [
            {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
            {"nonResourceURLs": ["*"], "verbs": ["*"]}]}))
    }

    #[test]
    fn binding_needs_the_roles_rules_or_bind() {
        let alice = user("alice", &["system:authenticated"]);
        let a = alice_with(json!([
            {"apiGroups": [GROUP], "resources": ["rolebindings"], "verbs": ["create"]},
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}
        ]));
        let obj = binding_to("ClusterRole", "cluster-admin");
        let role_ref = RoleRef::of(&obj);
        assert!(!may_skip(&a, &alice, &role_ref, "team", &obj, None));
        let err = confirm(
            &a,
            &alice,
            "team",
            ("rolebindings", "b2"),
            &cluster_admin_rules(),
        )
        .unwrap_err();
        assert_eq!(
            err.message,
            "rolebindings.rbac.authorization.k8s.io \"b2\" is forbidden: user \"alice\" (groups=[\"system:authenticated\"]) \
             is attempting to grant RBAC permissions not currently held:\n\
             {APIGroups:[\"*\"], Resources:[\"*\"], Verbs:[\"*\"]}\n{NonResourceURLs:[\"*\"], Verbs:[\"*\"]}"
        );
        // A role whose rules she holds may be bound.
        let held = rules_of(
            &json!({"rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]}),
        );
        assert_eq!(
            confirm(&a, &alice, "team", ("rolebindings", "b2"), &held),
            Ok(())
        );
        // With bind on that ClusterRole, in this namespace.
        let binder = alice_with(
            json!([{"apiGroups": [GROUP], "resources": ["clusterroles"], "verbs": ["bind"], "resourceNames": ["cluster-admin"]}]),
        );
        assert!(may_skip(&binder, &alice, &role_ref, "team", &obj, None));
        assert!(!may_skip(&binder, &alice, &role_ref, "", &obj, None));
        // An update of the garbage collector's fields only.
        let mut orphaned = obj.clone();
        orphaned["metadata"]["ownerReferences"] = json!([]);
        assert!(may_skip(
            &a,
            &alice,
            &role_ref,
            "team",
            &orphaned,
            Some(&obj)
        ));
        let mut resubjected = obj.clone();
        resubjected["subjects"][0]["name"] = json!("carol");
        assert!(!may_skip(
            &a,
            &alice,
            &role_ref,
            "team",
            &resubjected,
            Some(&obj)
        ));
    }
}
