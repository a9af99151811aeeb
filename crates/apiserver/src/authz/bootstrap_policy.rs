//! The default RBAC policy (upstream `plugin/pkg/auth/authorizer/rbac/bootstrappolicy`): the
//! ClusterRoles and ClusterRoleBindings kube-apiserver creates at start (`cluster-admin` for
//! `system:masters`, `admin`/`edit`/`view`, discovery and health for everyone, the components' roles),
//! read from `bootstrap_policy.yaml`.
//!
//! Missing ones are created; existing ones are left as they are (upstream reconciles roles marked
//! `rbac.authorization.kubernetes.io/autoupdate: "true"` back to the defaults, adding missing rules; rkube
//! does not). The aggregated roles (`admin`, `edit`, `view`) are created with the rules of the roles
//! they aggregate already filled in, so they work before the clusterrole-aggregation controller runs.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{json, Value};

const POLICY: &str = include_str!("bootstrap_policy.yaml");

#[derive(Deserialize)]
struct Policy {
    #[serde(rename = "clusterRoles")]
    cluster_roles: Vec<RoleSpec>,
    #[serde(rename = "clusterRoleBindings")]
    cluster_role_bindings: Vec<BindingSpec>,
}

#[derive(Deserialize)]
struct RoleSpec {
    name: String,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    aggregate: Option<String>,
    #[serde(default)]
    rules: Vec<RuleSpec>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RuleSpec {
    Resources(Vec<Vec<String>>),
    Urls {
        urls: Vec<String>,
        verbs: Vec<String>,
    },
}

#[derive(Deserialize)]
struct BindingSpec {
    name: String,
    role: String,
    #[serde(default)]
    users: Vec<String>,
    #[serde(default)]
    groups: Vec<String>,
    #[serde(default, rename = "serviceAccounts")]
    service_accounts: Vec<String>,
}

impl RuleSpec {
    fn to_json(&self) -> Result<Value, String> {
        match self {
            RuleSpec::Urls { urls, verbs } => Ok(json!({"nonResourceURLs": urls, "verbs": verbs})),
            RuleSpec::Resources(parts) => match parts.as_slice() {
                [groups, resources, verbs] => {
                    Ok(json!({"apiGroups": groups, "resources": resources, "verbs": verbs}))
                }
                [groups, resources, verbs, names] => Ok(json!({
                    "apiGroups": groups, "resources": resources, "resourceNames": names, "verbs": verbs
                })),
                _ => Err(format!("bootstrap policy: malformed rule {parts:?}")),
            },
        }
    }
}

fn metadata(name: &str, labels: &BTreeMap<String, String>, annotate: bool) -> Value {
    let mut labels: serde_json::Map<String, Value> = labels
        .iter()
        .map(|(k, v)| (k.clone(), Value::from(v.as_str())))
        .collect();
    labels.insert("kubernetes.io/bootstrapping".into(), "rbac-defaults".into());
    let mut meta = json!({"name": name, "labels": labels});
    if annotate {
        meta["annotations"] = json!({"rbac.authorization.kubernetes.io/autoupdate": "true"});
    }
    meta
}

/// The default ClusterRoles, then the default ClusterRoleBindings, as API objects.
pub fn objects() -> Result<(Vec<Value>, Vec<Value>), String> {
    let policy: Policy =
        serde_yaml_ng::from_str(POLICY).map_err(|e| format!("bootstrap policy: {e}"))?;
    let mut own_rules: BTreeMap<&str, Vec<Value>> = BTreeMap::new();
    for role in &policy.cluster_roles {
        let rules = role
            .rules
            .iter()
            .map(RuleSpec::to_json)
            .collect::<Result<Vec<_>, _>>()?;
        own_rules.insert(&role.name, rules);
    }
    // An aggregated role's rules: those of every role with its label, aggregated ones included
    // (admin takes edit's, which takes view's).
    fn aggregated<'a>(
        policy: &'a Policy,
        own: &BTreeMap<&'a str, Vec<Value>>,
        label: &str,
        depth: usize,
    ) -> Vec<Value> {
        let mut rules = Vec::new();
        for role in &policy.cluster_roles {
            if role.labels.get(label).map(String::as_str) != Some("true") || depth > 8 {
                continue;
            }
            let found = match &role.aggregate {
                Some(inner) => aggregated(policy, own, inner, depth + 1),
                None => own.get(role.name.as_str()).cloned().unwrap_or_default(),
            };
            // A rule reached twice (a role labelled for two levels) is kept once, as upstream's
            // aggregation controller keeps it.
            for rule in found {
                if !rules.contains(&rule) {
                    rules.push(rule);
                }
            }
        }
        rules
    }
    let roles = policy
        .cluster_roles
        .iter()
        .map(|role| {
            let mut obj = json!({
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": metadata(&role.name, &role.labels, true),
            });
            match &role.aggregate {
                Some(label) => {
                    obj["aggregationRule"] =
                        json!({"clusterRoleSelectors": [{"matchLabels": {label.as_str(): "true"}}]});
                    obj["rules"] = aggregated(&policy, &own_rules, label, 0).into();
                }
                None => obj["rules"] = own_rules[role.name.as_str()].clone().into(),
            }
            obj
        })
        .collect();
    let bindings = policy
        .cluster_role_bindings
        .iter()
        .map(|b| {
            let mut subjects: Vec<Value> = Vec::new();
            for u in &b.users {
                subjects.push(json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": u}));
            }
            for g in &b.groups {
                subjects.push(json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": g}));
            }
            for sa in &b.service_accounts {
                let (ns, name) = sa.split_once('/').unwrap_or(("default", sa));
                subjects.push(json!({"kind": "ServiceAccount", "name": name, "namespace": ns}));
            }
            let mut obj = json!({
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": metadata(&b.name, &BTreeMap::new(), true),
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": b.role},
            });
            if !subjects.is_empty() {
                obj["subjects"] = subjects.into();
            }
            obj
        })
        .collect();
    Ok((roles, bindings))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn role<'a>(roles: &'a [Value], name: &str) -> &'a Value {
        roles
            .iter()
            .find(|r| r["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no {name}"))
    }

    #[test]
    fn the_policy_parses_and_aggregates() {
        let (roles, bindings) = objects().expect("policy");
        assert_eq!(
            role(&roles, "cluster-admin")["rules"],
            json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                   {"nonResourceURLs": ["*"], "verbs": ["*"]}])
        );
        let count = |name: &str| role(&roles, name)["rules"].as_array().unwrap().len();
        let view = count("system:aggregate-to-view");
        let edit = count("system:aggregate-to-edit");
        let admin = count("system:aggregate-to-admin");
        // The metrics reader's one rule is aggregated to all three (once: identical rules are not
        // repeated).
        assert_eq!(count("system:aggregated-metrics-reader"), 1);
        assert_eq!(count("view"), view + 1);
        assert_eq!(count("edit"), edit + view + 1);
        assert_eq!(count("admin"), admin + edit + view + 1);
        assert_eq!(
            role(&roles, "admin")["aggregationRule"],
            json!({"clusterRoleSelectors": [{"matchLabels": {"rbac.authorization.k8s.io/aggregate-to-admin": "true"}}]})
        );
        assert_eq!(
            role(&roles, "system:kube-scheduler")["rules"][2]["resourceNames"],
            json!(["kube-scheduler"])
        );
        for r in &roles {
            assert_eq!(
                r["metadata"]["labels"]["kubernetes.io/bootstrapping"],
                "rbac-defaults"
            );
        }
        let masters = bindings
            .iter()
            .find(|b| b["metadata"]["name"] == "cluster-admin")
            .unwrap();
        assert_eq!(masters["subjects"][0]["name"], "system:masters");
        // The aggregation controller may rewrite any ClusterRole, as upstream grants.
        let aggregator = "system:controller:clusterrole-aggregation-controller";
        assert_eq!(
            role(&roles, aggregator)["rules"][0],
            json!({"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"],
                "verbs": ["escalate", "get", "list", "patch", "update", "watch"]})
        );
        let binding = bindings
            .iter()
            .find(|b| b["metadata"]["name"] == aggregator)
            .unwrap();
        assert_eq!(
            binding["subjects"],
            json!([{"kind": "ServiceAccount", "name": "clusterrole-aggregation-controller", "namespace": "kube-system"}])
        );
        // Every binding names a role of the policy.
        for b in &bindings {
            role(&roles, b["roleRef"]["name"].as_str().unwrap());
        }
    }
}
