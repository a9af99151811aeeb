//! Who may skip the coverage check (upstream `pkg/registry/rbac/escalation_check.go`):
//! `system:masters` (the API server's own loopback user is one), a user the authorizer allows
//! `escalate` on the role resource being written, or `bind` on the role a binding names.

use serde_json::Value;

use super::GROUP;
use crate::authn::UserInfo;
use crate::authz::{Attributes, Authorizer, PRIVILEGED_GROUP};
use crate::request::ResourceRequest;

/// Upstream `EscalationAllowed`: members of `system:masters` may do anything anyway.
pub fn escalation_allowed(user: &UserInfo) -> bool {
    user.groups.iter().any(|g| g == PRIVILEGED_GROUP)
}

/// Upstream `RoleEscalationAuthorized`: `escalate` on the request's own resource, name and
/// namespace (as upstream takes them from the request, a create asks without a name).
pub fn role_escalation_authorized(
    authorizer: &Authorizer,
    user: &UserInfo,
    req: &ResourceRequest,
) -> bool {
    if req.group != GROUP || !matches!(req.resource.as_str(), "roles" | "clusterroles") {
        return false;
    }
    let attrs = Attributes {
        user,
        verb: "escalate",
        resource_request: true,
        group: &req.group,
        version: "*",
        resource: &req.resource,
        subresource: "",
        namespace: req.namespace.as_deref().unwrap_or(""),
        name: req.name.as_deref().unwrap_or(""),
        path: "",
        field_selector: "",
    };
    authorizer.authorize(&attrs).is_ok()
}

/// A binding's `roleRef`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RoleRef {
    pub api_group: String,
    pub kind: String,
    pub name: String,
}

impl RoleRef {
    pub fn of(binding: &Value) -> RoleRef {
        let field = |f: &str| {
            binding
                .pointer(&format!("/roleRef/{f}"))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        RoleRef {
            api_group: field("apiGroup"),
            kind: field("kind"),
            name: field("name"),
        }
    }
}

/// Upstream `BindingAuthorized`: `bind` on the referenced role, in the binding's namespace (empty
/// for a ClusterRoleBinding), so that binding a ClusterRole can be delegated per namespace.
pub fn binding_authorized(
    authorizer: &Authorizer,
    user: &UserInfo,
    role_ref: &RoleRef,
    namespace: &str,
) -> bool {
    let resource = match role_ref.kind.as_str() {
        "ClusterRole" => "clusterroles",
        "Role" => "roles",
        _ => return false,
    };
    let attrs = Attributes {
        user,
        verb: "bind",
        resource_request: true,
        group: &role_ref.api_group,
        version: "*",
        resource,
        subresource: "",
        namespace,
        name: &role_ref.name,
        path: "",
        field_selector: "",
    };
    authorizer.authorize(&attrs).is_ok()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::authz::{rbac::Kind, Mode};
    use crate::request::Verb;
    use serde_json::json;

    pub(crate) use crate::authn::test_user as user;

    /// An RBAC authorizer holding these (kind, namespace, object) entries.
    pub(crate) fn authorizer(objects: &[(Kind, &str, Value)]) -> Authorizer {
        let a = Authorizer::new(Mode::Rbac { node: false });
        a.update(|index| {
            for (kind, ns, obj) in objects {
                let name = obj["metadata"]["name"].as_str().unwrap_or("");
                index.apply(*kind, ns, name, Some(obj));
            }
        });
        a
    }

    /// `alice` bound in namespace `team` to a Role with `rules`.
    pub(crate) fn alice_with(rules: Value) -> Authorizer {
        authorizer(&[
            (
                Kind::Role,
                "team",
                json!({"metadata": {"name": "r", "namespace": "team"}, "rules": rules}),
            ),
            (
                Kind::RoleBinding,
                "team",
                json!({"metadata": {"name": "b", "namespace": "team"},
                    "roleRef": {"apiGroup": GROUP, "kind": "Role", "name": "r"},
                    "subjects": [{"kind": "User", "name": "alice"}]}),
            ),
        ])
    }

    pub(crate) fn request(
        resource: &str,
        namespace: Option<&str>,
        name: Option<&str>,
    ) -> ResourceRequest {
        ResourceRequest {
            group: GROUP.into(),
            version: "v1".into(),
            namespace: namespace.map(str::to_string),
            resource: resource.into(),
            name: name.map(str::to_string),
            subresource: None,
            verb: Verb::Create,
        }
    }

    #[test]
    fn masters_and_escalate_skip_the_check() {
        assert!(escalation_allowed(&user("admin", &["system:masters"])));
        assert!(escalation_allowed(UserInfo::server()));
        assert!(!escalation_allowed(&user(
            "alice",
            &["system:authenticated"]
        )));

        let a = alice_with(
            json!([{"apiGroups": [GROUP], "resources": ["roles"], "verbs": ["escalate"], "resourceNames": ["only"]}]),
        );
        let alice = user("alice", &[]);
        // A create asks without a name, so a name-limited escalate allows updates only.
        assert!(!role_escalation_authorized(
            &a,
            &alice,
            &request("roles", Some("team"), None)
        ));
        assert!(role_escalation_authorized(
            &a,
            &alice,
            &request("roles", Some("team"), Some("only"))
        ));
        assert!(!role_escalation_authorized(
            &a,
            &alice,
            &request("roles", Some("other"), Some("only"))
        ));
        assert!(!role_escalation_authorized(
            &a,
            &alice,
            &request("rolebindings", Some("team"), Some("only"))
        ));
        // AlwaysAllow allows escalate as everything else.
        let open = Authorizer::new(Mode::AlwaysAllow);
        assert!(role_escalation_authorized(
            &open,
            &alice,
            &request("clusterroles", None, None)
        ));
    }

    #[test]
    fn bind_is_checked_on_the_referenced_role_in_the_bindings_namespace() {
        let a = alice_with(
            json!([{"apiGroups": [GROUP], "resources": ["clusterroles"], "verbs": ["bind"], "resourceNames": ["cluster-admin"]}]),
        );
        let alice = user("alice", &[]);
        let cluster_admin = RoleRef::of(
            &json!({"roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": "cluster-admin"}}),
        );
        assert_eq!(cluster_admin.kind, "ClusterRole");
        assert!(binding_authorized(&a, &alice, &cluster_admin, "team"));
        assert!(!binding_authorized(&a, &alice, &cluster_admin, ""));
        assert!(!binding_authorized(&a, &alice, &cluster_admin, "other"));
        let view = RoleRef {
            name: "view".into(),
            ..cluster_admin.clone()
        };
        assert!(!binding_authorized(&a, &alice, &view, "team"));
        let odd = RoleRef {
            kind: "Group".into(),
            ..cluster_admin
        };
        assert!(!binding_authorized(&a, &alice, &odd, "team"));
    }
}
