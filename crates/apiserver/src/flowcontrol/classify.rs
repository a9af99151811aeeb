//! Classification (upstream `apiserver/pkg/util/flowcontrol/rule.go`): the first FlowSchema, in
//! matching order, with a rule whose subjects name the request's user and whose resource (or
//! non-resource) rules cover its verb and target; and its flow distinguisher.

use super::config::{
    Distinguisher, FlowSchema, NonResourceRule, PolicyRule, ResourceRule, Subject,
};
use crate::authn::UserInfo;

/// Upstream's `*`.
const ALL: &str = "*";
const SERVICE_ACCOUNT_PREFIX: &str = "system:serviceaccount:";

/// What classification looks at: upstream's `RequestDigest` (user and RequestInfo).
#[derive(Clone, Debug)]
pub struct RequestDigest<'a> {
    pub user: &'a UserInfo,
    /// The API verb (`get`, `list`, `watch`, `create`, ...) or, for a non-resource request, the
    /// lowercase HTTP method.
    pub verb: &'a str,
    pub resource: Option<ResourceAttributes<'a>>,
    /// The path of a non-resource request.
    pub path: &'a str,
}

#[derive(Clone, Copy, Debug)]
pub struct ResourceAttributes<'a> {
    pub group: &'a str,
    pub resource: &'a str,
    pub subresource: Option<&'a str>,
    /// Empty for cluster-scoped requests.
    pub namespace: &'a str,
}

/// The FlowSchema `digest` matches (the first in `schemas`' order) and its flow distinguisher.
pub fn classify<'s>(
    schemas: &'s [FlowSchema],
    digest: &RequestDigest<'_>,
) -> Option<(&'s FlowSchema, String)> {
    let schema = schemas
        .iter()
        .find(|s| s.rules.iter().any(|r| matches_rule(digest, r)))?;
    let distinguisher = match schema.distinguisher {
        Distinguisher::None => String::new(),
        Distinguisher::ByUser => digest.user.name.clone(),
        Distinguisher::ByNamespace => digest
            .resource
            .map(|r| r.namespace.to_string())
            .unwrap_or_default(),
    };
    Some((schema, distinguisher))
}

fn matches_rule(digest: &RequestDigest<'_>, rule: &PolicyRule) -> bool {
    if !rule
        .subjects
        .iter()
        .any(|s| matches_subject(digest.user, s))
    {
        return false;
    }
    match &digest.resource {
        Some(r) => rule
            .resource_rules
            .iter()
            .any(|rr| matches_resource_rule(digest.verb, r, rr)),
        None => rule
            .non_resource_rules
            .iter()
            .any(|nr| matches_non_resource_rule(digest.verb, digest.path, nr)),
    }
}

fn matches_subject(user: &UserInfo, subject: &Subject) -> bool {
    match subject {
        Subject::User(name) => name == ALL || *name == user.name,
        Subject::Group(name) => name == ALL || user.groups.iter().any(|g| g == name),
        Subject::ServiceAccount { namespace, name } => {
            let Some(rest) = user.name.strip_prefix(SERVICE_ACCOUNT_PREFIX) else {
                return false;
            };
            let Some((ns, sa)) = rest.split_once(':') else {
                return false;
            };
            ns == namespace && (name == ALL || sa == name)
        }
    }
}

fn contains(list: &[String], wanted: &str) -> bool {
    list.iter().any(|v| v == wanted || v == ALL)
}

fn matches_resource_rule(verb: &str, r: &ResourceAttributes<'_>, rule: &ResourceRule) -> bool {
    if !contains(&rule.verbs, verb) || !contains(&rule.api_groups, r.group) {
        return false;
    }
    let with_sub;
    let resource = match r.subresource {
        Some(sub) => {
            with_sub = format!("{}/{sub}", r.resource);
            with_sub.as_str()
        }
        None => r.resource,
    };
    // Only `*` or the exact resource (with its subresource): `pods/*` is no wildcard here.
    if !rule.resources.iter().any(|x| x == ALL || x == resource) {
        return false;
    }
    if r.namespace.is_empty() {
        return rule.cluster_scope;
    }
    contains(&rule.namespaces, r.namespace)
}

fn matches_non_resource_rule(verb: &str, path: &str, rule: &NonResourceRule) -> bool {
    contains(&rule.verbs, verb)
        && rule.urls.iter().any(|url| {
            url == ALL
                || url == path
                || url
                    .strip_suffix('*')
                    .is_some_and(|prefix| path.starts_with(prefix))
        })
}

#[cfg(test)]
mod tests {
    use super::super::config::{digest, Digest};
    use super::*;
    use serde_json::json;

    use crate::authn::test_user as user;

    fn config() -> Digest {
        let level = |name: &str| json!({"metadata": {"name": name}, "spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": 10}}});
        let schemas = vec![
            json!({"metadata": {"name": "b-pods"}, "spec": {"priorityLevelConfiguration": {"name": "low"},
                "matchingPrecedence": 500, "distinguisherMethod": {"type": "ByNamespace"},
                "rules": [{"subjects": [{"kind": "User", "user": {"name": "*"}}],
                    "resourceRules": [{"verbs": ["list", "get"], "apiGroups": [""], "resources": ["pods", "pods/log"], "namespaces": ["*"]}]}]}}),
            // Same precedence, earlier name: wins over b-pods for what both match.
            json!({"metadata": {"name": "a-alice"}, "spec": {"priorityLevelConfiguration": {"name": "high"},
                "matchingPrecedence": 500, "distinguisherMethod": {"type": "ByUser"},
                "rules": [{"subjects": [{"kind": "User", "user": {"name": "alice"}}],
                    "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "namespaces": ["team"]}]}]}}),
            json!({"metadata": {"name": "sa"}, "spec": {"priorityLevelConfiguration": {"name": "high"},
                "matchingPrecedence": 100,
                "rules": [{"subjects": [{"kind": "ServiceAccount", "serviceAccount": {"namespace": "kube-system", "name": "*"}}],
                    "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "clusterScope": true}],
                    "nonResourceRules": [{"verbs": ["get"], "nonResourceURLs": ["/metrics", "/debug/*"]}]}]}}),
        ];
        digest(&schemas, &[level("low"), level("high")])
    }

    fn pods<'a>(ns: &'a str, sub: Option<&'a str>) -> Option<ResourceAttributes<'a>> {
        Some(ResourceAttributes {
            group: "",
            resource: "pods",
            subresource: sub,
            namespace: ns,
        })
    }

    fn which(c: &Digest, d: RequestDigest<'_>) -> (String, String) {
        let (s, f) = classify(&c.schemas, &d).expect("some schema matches");
        (s.name.clone(), f)
    }

    #[test]
    fn precedence_then_name_then_the_catch_all() {
        let c = config();
        let alice = user("alice", &["system:authenticated"]);
        let bob = user("bob", &["system:authenticated"]);
        let digest = |u, verb, resource| RequestDigest {
            user: u,
            verb,
            resource,
            path: "",
        };
        assert_eq!(
            which(&c, digest(&alice, "list", pods("team", None))),
            ("a-alice".into(), "alice".into())
        );
        assert_eq!(
            which(&c, digest(&bob, "list", pods("team", None))),
            ("b-pods".into(), "team".into())
        );
        assert_eq!(
            which(&c, digest(&bob, "get", pods("team", Some("log")))),
            ("b-pods".into(), "team".into())
        );
        // Verb, subresource and namespace must all be covered.
        assert_eq!(
            which(&c, digest(&bob, "delete", pods("team", None))).0,
            "catch-all"
        );
        assert_eq!(
            which(&c, digest(&bob, "get", pods("team", Some("exec")))).0,
            "catch-all"
        );
        assert_eq!(
            which(&c, digest(&alice, "delete", pods("other", None))).0,
            "catch-all"
        );
        // Cluster scope only where clusterScope says so.
        assert_eq!(
            which(&c, digest(&bob, "list", pods("", None))).0,
            "catch-all"
        );
        // system:masters are exempt, before anything else.
        let admin = user("admin", &["system:masters", "system:authenticated"]);
        assert_eq!(
            which(&c, digest(&admin, "list", pods("team", None))),
            ("exempt".into(), String::new())
        );
    }

    #[test]
    fn service_accounts_and_non_resource_paths() {
        let c = config();
        let sa = user(
            "system:serviceaccount:kube-system:foo",
            &["system:serviceaccounts", "system:authenticated"],
        );
        let other = user(
            "system:serviceaccount:default:foo",
            &["system:serviceaccounts", "system:authenticated"],
        );
        let node = RequestDigest {
            user: &sa,
            verb: "get",
            resource: Some(ResourceAttributes {
                group: "",
                resource: "nodes",
                subresource: None,
                namespace: "",
            }),
            path: "",
        };
        assert_eq!(which(&c, node.clone()).0, "sa");
        assert_eq!(
            which(
                &c,
                RequestDigest {
                    user: &other,
                    ..node
                }
            )
            .0,
            "catch-all"
        );
        let path = |p| RequestDigest {
            user: &sa,
            verb: "get",
            resource: None,
            path: p,
        };
        assert_eq!(which(&c, path("/metrics")).0, "sa");
        assert_eq!(which(&c, path("/debug/pprof/heap")).0, "sa");
        assert_eq!(which(&c, path("/metricsx")).0, "catch-all");
    }
}
