//! RBAC (upstream `plugin/pkg/auth/authorizer/rbac` and `pkg/apis/rbac/v1` helpers): Roles,
//! ClusterRoles and their bindings, kept parsed in an index the authorizer reads on every request.
//! A request is allowed when a rule of a role bound to the user (or one of their groups, or their
//! service account) covers it: ClusterRoleBindings everywhere, RoleBindings in their namespace.
//! Nothing here denies: a request no rule covers gets "no opinion", which the chain turns into 403.

use std::collections::HashMap;

use serde_json::Value;

use super::Attributes;
use crate::authn::UserInfo;

/// One `PolicyRule`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rule {
    pub verbs: Vec<String>,
    pub api_groups: Vec<String>,
    pub resources: Vec<String>,
    pub resource_names: Vec<String>,
    pub non_resource_urls: Vec<String>,
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

impl Rule {
    pub fn from_json(v: &Value) -> Rule {
        Rule {
            verbs: strings(&v["verbs"]),
            api_groups: strings(&v["apiGroups"]),
            resources: strings(&v["resources"]),
            resource_names: strings(&v["resourceNames"]),
            non_resource_urls: strings(&v["nonResourceURLs"]),
        }
    }

    /// The rule as a `PolicyRule` object (for rules reviews).
    pub fn to_json(&self) -> Value {
        let mut rule = serde_json::Map::new();
        rule.insert("verbs".into(), self.verbs.clone().into());
        let fields = [
            ("apiGroups", &self.api_groups),
            ("resources", &self.resources),
            ("resourceNames", &self.resource_names),
            ("nonResourceURLs", &self.non_resource_urls),
        ];
        for (name, values) in fields {
            if !values.is_empty() {
                rule.insert(name.into(), values.clone().into());
            }
        }
        Value::Object(rule)
    }

    /// Whether this rule covers the request (upstream `RuleAllows`).
    pub fn allows(&self, attrs: &Attributes<'_>) -> bool {
        if !has(&self.verbs, attrs.verb) {
            return false;
        }
        if !attrs.resource_request {
            return self.non_resource_urls.iter().any(|url| {
                url == "*"
                    || url == attrs.path
                    || url
                        .strip_suffix('*')
                        .is_some_and(|prefix| attrs.path.starts_with(prefix))
            });
        }
        has(&self.api_groups, attrs.group)
            && self.resource_matches(attrs.resource, attrs.subresource)
            && (self.resource_names.is_empty()
                || (!attrs.name.is_empty() && self.resource_names.iter().any(|n| n == attrs.name)))
    }

    fn resource_matches(&self, resource: &str, subresource: &str) -> bool {
        let combined = if subresource.is_empty() {
            resource.to_string()
        } else {
            format!("{resource}/{subresource}")
        };
        self.resources.iter().any(|r| {
            r == "*"
                || *r == combined
                || (!subresource.is_empty() && r.strip_prefix("*/") == Some(subresource))
        })
    }
}

fn has(list: &[String], value: &str) -> bool {
    list.iter().any(|v| v == "*" || v == value)
}

/// One subject of a binding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subject {
    pub kind: String,
    pub name: String,
    pub namespace: String,
}

impl Subject {
    /// Whether the subject names this user (upstream `appliesToUser`); `namespace` is the binding's,
    /// the default for a service account subject without one.
    fn applies_to(&self, user: &UserInfo, namespace: &str) -> bool {
        match self.kind.as_str() {
            "User" => user.name == self.name,
            "Group" => user.groups.contains(&self.name),
            "ServiceAccount" => {
                let ns = if self.namespace.is_empty() {
                    namespace
                } else {
                    &self.namespace
                };
                user.name == format!("system:serviceaccount:{ns}:{}", self.name)
            }
            _ => false,
        }
    }

    /// As upstream's reasons name it: `ServiceAccount "<name>/<namespace>"`, `User "<name>"`.
    fn describe(&self, binding_namespace: &str) -> String {
        match self.kind.as_str() {
            "ServiceAccount" => {
                let ns = if self.namespace.is_empty() {
                    binding_namespace
                } else {
                    &self.namespace
                };
                format!("ServiceAccount \"{}/{ns}\"", self.name)
            }
            kind => format!("{kind} \"{}\"", self.name),
        }
    }
}

/// A RoleBinding or ClusterRoleBinding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Binding {
    pub name: String,
    pub namespace: String,
    /// `Role` or `ClusterRole`.
    pub role_kind: String,
    pub role_name: String,
    pub subjects: Vec<Subject>,
}

impl Binding {
    pub fn from_json(v: &Value) -> Binding {
        let namespace = v
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let subjects = v["subjects"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|s| Subject {
                kind: s["kind"].as_str().unwrap_or("").to_string(),
                name: s["name"].as_str().unwrap_or("").to_string(),
                namespace: s["namespace"].as_str().unwrap_or("").to_string(),
            })
            .collect();
        Binding {
            name: v
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            namespace,
            role_kind: v
                .pointer("/roleRef/kind")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            role_name: v
                .pointer("/roleRef/name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            subjects,
        }
    }
}

/// Every Role, ClusterRole and binding, parsed.
#[derive(Default, Debug)]
pub struct Index {
    cluster_roles: HashMap<String, Vec<Rule>>,
    /// namespace -> name -> rules.
    roles: HashMap<String, HashMap<String, Vec<Rule>>>,
    cluster_role_bindings: HashMap<String, Binding>,
    /// namespace -> name -> binding.
    role_bindings: HashMap<String, HashMap<String, Binding>>,
}

/// Which of the four RBAC resources an object is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    ClusterRole,
    Role,
    ClusterRoleBinding,
    RoleBinding,
}

/// The `rules` of a Role or ClusterRole.
pub fn rules_of(obj: &Value) -> Vec<Rule> {
    obj["rules"]
        .as_array()
        .into_iter()
        .flatten()
        .map(Rule::from_json)
        .collect()
}

impl Index {
    /// Adds or replaces `obj`; `None` removes the object named `namespace/name`.
    pub fn apply(&mut self, kind: Kind, namespace: &str, name: &str, obj: Option<&Value>) {
        match (kind, obj) {
            (Kind::ClusterRole, Some(o)) => {
                self.cluster_roles.insert(name.into(), rules_of(o));
            }
            (Kind::ClusterRole, None) => {
                self.cluster_roles.remove(name);
            }
            (Kind::Role, Some(o)) => {
                self.roles
                    .entry(namespace.into())
                    .or_default()
                    .insert(name.into(), rules_of(o));
            }
            (Kind::Role, None) => {
                if let Some(m) = self.roles.get_mut(namespace) {
                    m.remove(name);
                }
            }
            (Kind::ClusterRoleBinding, Some(o)) => {
                self.cluster_role_bindings
                    .insert(name.into(), Binding::from_json(o));
            }
            (Kind::ClusterRoleBinding, None) => {
                self.cluster_role_bindings.remove(name);
            }
            (Kind::RoleBinding, Some(o)) => {
                self.role_bindings
                    .entry(namespace.into())
                    .or_default()
                    .insert(name.into(), Binding::from_json(o));
            }
            (Kind::RoleBinding, None) => {
                if let Some(m) = self.role_bindings.get_mut(namespace) {
                    m.remove(name);
                }
            }
        }
    }

    /// Drops every object of one kind (before reloading it).
    pub fn clear(&mut self, kind: Kind) {
        match kind {
            Kind::ClusterRole => self.cluster_roles.clear(),
            Kind::Role => self.roles.clear(),
            Kind::ClusterRoleBinding => self.cluster_role_bindings.clear(),
            Kind::RoleBinding => self.role_bindings.clear(),
        }
    }

    /// The rules of a ClusterRole (none when it does not exist).
    pub fn cluster_role_rules(&self, name: &str) -> &[Rule] {
        self.cluster_roles.get(name).map_or(&[], Vec::as_slice)
    }

    /// The rules of the role a binding in `namespace` names (upstream `GetRoleReferenceRules`): a
    /// ClusterRole, or a Role of that namespace (so never for a ClusterRoleBinding, whose namespace
    /// is empty); `None` when it does not exist.
    pub fn role_reference_rules(&self, kind: &str, namespace: &str, name: &str) -> Option<&[Rule]> {
        match kind {
            "ClusterRole" => self.cluster_roles.get(name),
            "Role" => self.roles.get(namespace).and_then(|m| m.get(name)),
            _ => None,
        }
        .map(Vec::as_slice)
    }

    fn role_rules(&self, binding: &Binding) -> Option<&[Rule]> {
        self.role_reference_rules(&binding.role_kind, &binding.namespace, &binding.role_name)
    }

    /// ClusterRoleBindings, then the RoleBindings of `namespace`.
    fn bindings_for(&self, namespace: &str) -> impl Iterator<Item = &Binding> {
        let local = self
            .role_bindings
            .get(namespace)
            .filter(|_| !namespace.is_empty())
            .into_iter()
            .flat_map(|m| m.values());
        self.cluster_role_bindings.values().chain(local)
    }

    /// Calls `visit` with each binding that applies to the user (cluster-wide ones, then those of
    /// `namespace`), the matching subject and the bound role's rules, until it returns true.
    pub fn visit(
        &self,
        user: &UserInfo,
        namespace: &str,
        mut visit: impl FnMut(&Binding, &Subject, &[Rule]) -> bool,
    ) {
        for binding in self.bindings_for(namespace) {
            let Some(subject) = binding
                .subjects
                .iter()
                .find(|s| s.applies_to(user, &binding.namespace))
            else {
                continue;
            };
            let Some(rules) = self.role_rules(binding) else {
                continue;
            };
            if visit(binding, subject, rules) {
                return;
            }
        }
    }

    /// Why the request is allowed (upstream's reason text), or `None`.
    pub fn allowed_by(&self, attrs: &Attributes<'_>) -> Option<String> {
        let mut reason = None;
        self.visit(attrs.user, attrs.namespace, |binding, subject, rules| {
            if !rules.iter().any(|r| r.allows(attrs)) {
                return false;
            }
            let what = if binding.namespace.is_empty() {
                format!("ClusterRoleBinding \"{}\"", binding.name)
            } else {
                format!("RoleBinding \"{}/{}\"", binding.name, binding.namespace)
            };
            let role = if binding.role_kind == "Role" {
                format!("Role \"{}\"", binding.role_name)
            } else {
                format!("ClusterRole \"{}\"", binding.role_name)
            };
            reason = Some(format!(
                "RBAC: allowed by {what} of {role} to {}",
                subject.describe(&binding.namespace)
            ));
            true
        });
        reason
    }

    /// Every rule that applies to the user in `namespace` (cluster-wide ones included).
    pub fn rules_for(&self, user: &UserInfo, namespace: &str) -> Vec<Rule> {
        let mut all = Vec::new();
        self.visit(user, namespace, |_, _, rules| {
            all.extend(rules.iter().cloned());
            false
        });
        all
    }

    /// [`Index::rules_for`] and upstream `RulesFor`'s resolution errors: one per binding that applies
    /// to the user but names a role that does not exist, worded as the registry's 404, ordered as
    /// upstream lists bindings (cluster-wide ones, then by name).
    pub fn resolve(&self, user: &UserInfo, namespace: &str) -> (Vec<Rule>, Vec<String>) {
        let mut rules = Vec::new();
        let mut missing = Vec::new();
        for binding in self.bindings_for(namespace) {
            if !binding
                .subjects
                .iter()
                .any(|s| s.applies_to(user, &binding.namespace))
            {
                continue;
            }
            match self.role_rules(binding) {
                Some(found) => rules.extend(found.iter().cloned()),
                None => missing.push((!binding.namespace.is_empty(), &binding.name, binding)),
            }
        }
        missing.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
        let errors = missing
            .into_iter()
            .map(|(_, _, b)| match b.role_kind.as_str() {
                "Role" => format!(
                    "roles.rbac.authorization.k8s.io {:?} not found",
                    b.role_name
                ),
                "ClusterRole" => format!(
                    "clusterroles.rbac.authorization.k8s.io {:?} not found",
                    b.role_name
                ),
                kind => format!("unsupported role reference kind: {kind:?}"),
            })
            .collect();
        (rules, errors)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    use crate::authn::test_user as user;

    fn attrs<'a>(
        user: &'a UserInfo,
        verb: &'a str,
        group: &'a str,
        resource: &'a str,
        subresource: &'a str,
        namespace: &'a str,
        name: &'a str,
    ) -> Attributes<'a> {
        Attributes {
            user,
            verb,
            resource_request: true,
            group,
            version: "v1",
            resource,
            subresource,
            namespace,
            name,
            path: "",
            field_selector: "",
        }
    }

    fn path<'a>(user: &'a UserInfo, verb: &'a str, path: &'a str) -> Attributes<'a> {
        Attributes {
            user,
            verb,
            resource_request: false,
            group: "",
            version: "",
            resource: "",
            subresource: "",
            namespace: "",
            name: "",
            path,
            field_selector: "",
        }
    }

    #[test]
    fn rule_matching() {
        let u = user("u", &[]);
        let rule = |v: Value| Rule::from_json(&v);
        let pods_get = rule(json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}));
        assert!(pods_get.allows(&attrs(&u, "get", "", "pods", "", "ns", "p")));
        assert!(!pods_get.allows(&attrs(&u, "list", "", "pods", "", "ns", "")));
        assert!(!pods_get.allows(&attrs(&u, "get", "apps", "pods", "", "ns", "p")));
        // A resource does not cover its subresources.
        assert!(!pods_get.allows(&attrs(&u, "get", "", "pods", "log", "ns", "p")));
        let logs = rule(json!({"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]}));
        assert!(logs.allows(&attrs(&u, "get", "", "pods", "log", "ns", "p")));
        assert!(!logs.allows(&attrs(&u, "get", "", "pods", "", "ns", "p")));
        let any_scale = rule(json!({"apiGroups": ["*"], "resources": ["*/scale"], "verbs": ["*"]}));
        assert!(any_scale.allows(&attrs(
            &u,
            "update",
            "apps",
            "deployments",
            "scale",
            "ns",
            "d"
        )));
        assert!(!any_scale.allows(&attrs(&u, "update", "apps", "deployments", "", "ns", "d")));
        assert!(!any_scale.allows(&attrs(
            &u,
            "update",
            "apps",
            "deployments",
            "status",
            "ns",
            "d"
        )));
        // resourceNames need a name: a list is never covered.
        let named = rule(
            json!({"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["a"], "verbs": ["get", "list"]}),
        );
        assert!(named.allows(&attrs(&u, "get", "", "configmaps", "", "ns", "a")));
        assert!(!named.allows(&attrs(&u, "get", "", "configmaps", "", "ns", "b")));
        assert!(!named.allows(&attrs(&u, "list", "", "configmaps", "", "ns", "")));
        // Non-resource URLs: exact, or a prefix ending in '*'; never a resource request.
        let urls = rule(json!({"nonResourceURLs": ["/healthz", "/apis/*"], "verbs": ["get"]}));
        assert!(urls.allows(&path(&u, "get", "/healthz")));
        assert!(!urls.allows(&path(&u, "get", "/healthz/etcd")));
        assert!(urls.allows(&path(&u, "get", "/apis/apps/v1")));
        assert!(!urls.allows(&path(&u, "post", "/apis/apps/v1")));
        assert!(!urls.allows(&attrs(&u, "get", "", "pods", "", "ns", "")));
        let everything = rule(json!({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}));
        assert!(everything.allows(&attrs(
            &u,
            "deletecollection",
            "x.io",
            "things",
            "sub",
            "",
            ""
        )));
        assert!(!everything.allows(&path(&u, "get", "/metrics")));
    }

    fn index() -> Index {
        let mut idx = Index::default();
        idx.apply(
            Kind::ClusterRole,
            "",
            "view",
            Some(&json!({"rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]})),
        );
        idx.apply(
            Kind::Role,
            "dev",
            "cm-writer",
            Some(&json!({"rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]}]})),
        );
        idx.apply(
            Kind::ClusterRoleBinding,
            "",
            "viewers",
            Some(&json!({"metadata": {"name": "viewers"}, "roleRef": {"kind": "ClusterRole", "name": "view"},
                "subjects": [{"kind": "Group", "name": "auditors"}]})),
        );
        idx.apply(
            Kind::RoleBinding,
            "dev",
            "writers",
            Some(&json!({"metadata": {"name": "writers", "namespace": "dev"}, "roleRef": {"kind": "Role", "name": "cm-writer"},
                "subjects": [{"kind": "User", "name": "alice"}, {"kind": "ServiceAccount", "name": "bot"}]})),
        );
        idx.apply(
            Kind::RoleBinding,
            "dev",
            "local-view",
            Some(&json!({"metadata": {"name": "local-view", "namespace": "dev"}, "roleRef": {"kind": "ClusterRole", "name": "view"},
                "subjects": [{"kind": "User", "name": "bob"}]})),
        );
        idx
    }

    #[test]
    fn bindings_grant_their_roles_where_they_apply() {
        let idx = index();
        let auditor = user("carol", &["auditors"]);
        assert_eq!(
            idx.allowed_by(&attrs(&auditor, "list", "", "pods", "", "any", ""))
                .as_deref(),
            Some("RBAC: allowed by ClusterRoleBinding \"viewers\" of ClusterRole \"view\" to Group \"auditors\"")
        );
        // Cluster scope too (a list across namespaces).
        assert!(idx
            .allowed_by(&attrs(&auditor, "list", "", "pods", "", "", ""))
            .is_some());
        let alice = user("alice", &[]);
        assert!(idx
            .allowed_by(&attrs(&alice, "create", "", "configmaps", "", "dev", ""))
            .is_some());
        assert!(idx
            .allowed_by(&attrs(&alice, "create", "", "configmaps", "", "prod", ""))
            .is_none());
        // A service account subject without a namespace is the binding's namespace's.
        let bot = user("system:serviceaccount:dev:bot", &[]);
        assert_eq!(
            idx.allowed_by(&attrs(&bot, "create", "", "configmaps", "", "dev", ""))
                .as_deref(),
            Some("RBAC: allowed by RoleBinding \"writers/dev\" of Role \"cm-writer\" to ServiceAccount \"bot/dev\"")
        );
        let other_bot = user("system:serviceaccount:prod:bot", &[]);
        assert!(idx
            .allowed_by(&attrs(
                &other_bot,
                "create",
                "",
                "configmaps",
                "",
                "dev",
                ""
            ))
            .is_none());
        // A RoleBinding to a ClusterRole grants it in its namespace only.
        let bob = user("bob", &[]);
        assert!(idx
            .allowed_by(&attrs(&bob, "get", "", "pods", "", "dev", "p"))
            .is_some());
        assert!(idx
            .allowed_by(&attrs(&bob, "get", "", "pods", "", "prod", "p"))
            .is_none());
        assert!(idx
            .allowed_by(&attrs(&bob, "list", "", "pods", "", "", ""))
            .is_none());
    }

    #[test]
    fn removals_and_missing_roles_grant_nothing() {
        let mut idx = index();
        let alice = user("alice", &[]);
        idx.apply(Kind::Role, "dev", "cm-writer", None);
        assert!(idx
            .allowed_by(&attrs(&alice, "create", "", "configmaps", "", "dev", ""))
            .is_none());
        // A ClusterRoleBinding naming a Role is ignored.
        idx.apply(
            Kind::ClusterRoleBinding,
            "",
            "odd",
            Some(&json!({"metadata": {"name": "odd"}, "roleRef": {"kind": "Role", "name": "cm-writer"},
                "subjects": [{"kind": "User", "name": "alice"}]})),
        );
        assert!(idx.rules_for(&alice, "dev").is_empty());
        let carol = user("carol", &["auditors"]);
        assert_eq!(idx.rules_for(&carol, "dev").len(), 1);
        idx.apply(Kind::ClusterRoleBinding, "", "viewers", None);
        assert!(idx.rules_for(&carol, "dev").is_empty());
    }

    #[test]
    fn resolution_reports_bindings_to_missing_roles() {
        let mut idx = index();
        let alice = user("alice", &[]);
        assert_eq!(
            idx.resolve(&alice, "dev"),
            (idx.rules_for(&alice, "dev"), vec![])
        );
        idx.apply(Kind::Role, "dev", "cm-writer", None);
        idx.apply(
            Kind::ClusterRoleBinding,
            "",
            "gone",
            Some(&json!({"metadata": {"name": "gone"}, "roleRef": {"kind": "ClusterRole", "name": "nothing"},
                "subjects": [{"kind": "User", "name": "alice"}]})),
        );
        let (rules, errors) = idx.resolve(&alice, "dev");
        assert!(rules.is_empty());
        assert_eq!(
            errors,
            [
                "clusterroles.rbac.authorization.k8s.io \"nothing\" not found",
                "roles.rbac.authorization.k8s.io \"cm-writer\" not found"
            ]
        );
        // Bindings that do not name the user are not resolved.
        assert_eq!(idx.resolve(&user("bob", &[]), "prod"), (vec![], vec![]));
        assert_eq!(
            idx.role_reference_rules("ClusterRole", "dev", "view")
                .map(<[Rule]>::len),
            Some(1)
        );
        assert!(idx.role_reference_rules("Role", "", "cm-writer").is_none());
    }
}
