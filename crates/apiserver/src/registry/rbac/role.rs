//! Roles and ClusterRoles (upstream `pkg/registry/rbac/{role,clusterrole}/policybased`): a create or
//! update must grant nothing the user does not hold, unless the user may escalate. A ClusterRole
//! with an `aggregationRule` can gather any rule, so setting or keeping one needs full rights
//! (`*` on everything and every URL) or `escalate`.

use apimachinery::status::ApiError;
use serde_json::Value;

use super::escalation_check::{escalation_allowed, role_escalation_authorized};
use super::{forbidden, only_gc_fields_change, validation};
use crate::authn::UserInfo;
use crate::authz::rbac::{rules_of, Rule};
use crate::authz::Authorizer;
use crate::registry::Strategy;
use crate::request::ResourceRequest;
use crate::rest::Ctx;

pub struct RoleStrategy;

#[async_trait::async_trait]
impl Strategy for RoleStrategy {
    async fn authorize_write(
        &self,
        ctx: &Ctx<'_>,
        obj: &Value,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        check(&ctx.api.authorizer, ctx.user, ctx.req, obj, old)
    }
}

/// What upstream's `fullAuthority` holds: everything, as `cluster-admin`.
fn full_authority() -> [Rule; 2] {
    let all = || vec!["*".to_string()];
    [
        Rule {
            verbs: all(),
            api_groups: all(),
            resources: all(),
            ..Rule::default()
        },
        Rule {
            verbs: all(),
            non_resource_urls: all(),
            ..Rule::default()
        },
    ]
}

fn has_aggregation_rule(obj: &Value) -> bool {
    obj.pointer("/aggregationRule/clusterRoleSelectors")
        .and_then(Value::as_array)
        .is_some_and(|selectors| !selectors.is_empty())
}

/// Upstream's `Storage.Create`/`Update` of both kinds; `old` is the stored object on update.
pub fn check(
    authorizer: &Authorizer,
    user: &UserInfo,
    req: &ResourceRequest,
    obj: &Value,
    old: Option<&Value>,
) -> Result<(), ApiError> {
    if escalation_allowed(user) || role_escalation_authorized(authorizer, user, req) {
        return Ok(());
    }
    if old.is_some_and(|old| only_gc_fields_change(obj, old)) {
        return Ok(());
    }
    let name = crate::objects::name(obj);
    let (held, errors) = authorizer.resolve_rules(user, req.namespace.as_deref().unwrap_or(""));
    validation::confirm_no_escalation(user, (&held, &errors), &rules_of(obj))
        .map_err(|why| forbidden(&req.resource, name, &why))?;
    let aggregates = has_aggregation_rule(obj) || old.is_some_and(has_aggregation_rule);
    if req.resource == "clusterroles" && aggregates {
        validation::confirm_no_escalation(user, (&held, &errors), &full_authority()).map_err(
            |_| {
                forbidden(
                    &req.resource,
                    name,
                    "must have cluster-admin privileges to use the aggregationRule",
                )
            },
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::escalation_check::tests::{alice_with, request, user};
    use super::super::GROUP;
    use super::*;
    use serde_json::json;

    fn role(rules: Value) -> Value {
        json!({"metadata": {"name": "granted", "namespace": "team"}, "rules": rules})
    }

    #[test]
    fn a_role_may_grant_only_what_its_writer_holds() {
        let a = alice_with(json!([
            {"apiGroups": [GROUP], "resources": ["roles"], "verbs": ["create", "update"]},
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}
        ]));
        let alice = user("alice", &["system:authenticated"]);
        let req = request("roles", Some("team"), None);
        let held =
            role(json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]));
        assert_eq!(check(&a, &alice, &req, &held, None), Ok(()));
        let secrets =
            role(json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]));
        let err = check(&a, &alice, &req, &secrets, None).unwrap_err();
        assert_eq!(err.code, 403);
        assert_eq!(
            err.message,
            "roles.rbac.authorization.k8s.io \"granted\" is forbidden: user \"alice\" (groups=[\"system:authenticated\"]) \
             is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\"]}"
        );
        // Rules held in another namespace do not count.
        let elsewhere = request("roles", Some("other"), None);
        assert!(check(&a, &alice, &elsewhere, &held, None).is_err());
        // Masters skip the check.
        let admin = user("admin", &["system:masters"]);
        assert_eq!(check(&a, &admin, &req, &secrets, None), Ok(()));
    }

    #[test]
    fn updates_are_checked_unless_only_gc_fields_change() {
        let a = alice_with(
            json!([{"apiGroups": [GROUP], "resources": ["roles"], "verbs": ["update"]}]),
        );
        let alice = user("alice", &[]);
        let req = request("roles", Some("team"), Some("granted"));
        let old = role(json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]));
        let mut finalized = old.clone();
        finalized["metadata"]["finalizers"] = json!(["example.com/keep"]);
        assert_eq!(check(&a, &alice, &req, &finalized, Some(&old)), Ok(()));
        // Metadata other than the garbage collector's is checked, rules unchanged or not.
        let mut labelled = old.clone();
        labelled["metadata"]["labels"] = json!({"a": "b"});
        assert!(check(&a, &alice, &req, &labelled, Some(&old)).is_err());
    }

    #[test]
    fn escalate_on_the_role_resource_skips_the_check() {
        let a = alice_with(
            json!([{"apiGroups": [GROUP], "resources": ["roles"], "verbs": ["escalate"]}]),
        );
        let alice = user("alice", &[]);
        let secrets = role(json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["*"]}]));
        assert_eq!(
            check(
                &a,
                &alice,
                &request("roles", Some("team"), None),
                &secrets,
                None
            ),
            Ok(())
        );
        // Escalate on roles is not escalate on clusterroles.
        assert!(check(
            &a,
            &alice,
            &request("clusterroles", None, None),
            &secrets,
            None
        )
        .is_err());
    }

    #[test]
    fn aggregation_rules_need_full_rights() {
        let a = alice_with(json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]));
        let alice = user("alice", &[]);
        let aggregated = json!({"metadata": {"name": "agg"},
            "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"x": "y"}}]}});
        // alice's rules are a Role's, in namespace team: cluster-wide she holds nothing.
        let err = check(
            &a,
            &alice,
            &request("clusterroles", None, None),
            &aggregated,
            None,
        )
        .unwrap_err();
        assert_eq!(
            err.message,
            "clusterroles.rbac.authorization.k8s.io \"agg\" is forbidden: must have cluster-admin privileges to use the aggregationRule"
        );
        let admin_like = super::super::escalation_check::tests::authorizer(&[
            (
                crate::authz::rbac::Kind::ClusterRoleBinding,
                "",
                json!({"metadata": {"name": "b"}, "roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": "all"},
                "subjects": [{"kind": "User", "name": "alice"}]}),
            ),
            (
                crate::authz::rbac::Kind::ClusterRole,
                "",
                json!({"metadata": {"name": "all"}, "rules": [
                {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                {"nonResourceURLs": ["*"], "verbs": ["*"]}]}),
            ),
        ]);
        assert_eq!(
            check(
                &admin_like,
                &alice,
                &request("clusterroles", None, None),
                &aggregated,
                None
            ),
            Ok(())
        );
        // Dropping an aggregation rule needs the same rights.
        let plain = json!({"metadata": {"name": "agg"}, "rules": []});
        assert!(check(
            &a,
            &alice,
            &request("clusterroles", None, Some("agg")),
            &plain,
            Some(&aggregated)
        )
        .is_err());
    }
}
