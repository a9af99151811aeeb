use super::*;

use crate::authn::test_user as user;

fn resource<'a>(
    u: Option<&'a UserInfo>,
    verb: &'a str,
    (group, res, sub): (&'a str, &'a str, &'a str),
    namespace: &'a str,
    name: &'a str,
) -> Attributes<'a> {
    Attributes {
        user: u,
        verb,
        resource: Some(ResourceAttributes {
            group,
            resource: res,
            subresource: sub,
            namespace,
            name,
        }),
        path: "/api/v1/whatever",
    }
}

fn path<'a>(u: Option<&'a UserInfo>, verb: &'a str, path: &'a str) -> Attributes<'a> {
    Attributes {
        user: u,
        verb,
        resource: None,
        path,
    }
}

fn policy(yaml: &str) -> Policy {
    Policy::parse(yaml.as_bytes()).unwrap_or_else(|e| panic!("{e}"))
}

const POLICY: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: None
  userGroups: ["system:nodes"]
- level: None
  users: ["system:kube-proxy"]
  verbs: ["watch"]
- level: None
  verbs: ["get"]
  nonResourceURLs: ["/healthz*", "/version"]
- level: Request
  resources:
  - group: ""
    resources: ["pods/log", "*/exec"]
- level: RequestResponse
  omitStages: [ResponseStarted]
  omitManagedFields: true
  resources:
  - group: ""
    resources: ["configmaps"]
    resourceNames: ["special"]
  - group: apps
    resources: ["deployments/*"]
- level: Metadata
  namespaces: ["kube-system", ""]
- level: Request
  resources:
  - group: "batch"
- level: Metadata
  resources:
  - group: ""
    resources: ["*"]
"#;

#[test]
fn first_matching_rule_wins_and_no_match_is_none() {
    let p = policy(POLICY);
    let alice = user("alice", &["system:authenticated"]);
    let node = user("system:node:n1", &["system:nodes", "system:authenticated"]);
    let a = Some(&alice);
    let level = |attrs: Attributes<'_>| p.decide(&attrs).level;
    // Groups: a node is never audited, even for what a later rule names.
    assert_eq!(
        level(resource(
            Some(&node),
            "get",
            ("", "configmaps", ""),
            "ns",
            "special"
        )),
        Level::None
    );
    assert_eq!(
        level(resource(a, "get", ("", "configmaps", ""), "ns", "special")),
        Level::RequestResponse
    );
    // resourceNames: another name falls through to the core `*` rule.
    assert_eq!(
        level(resource(a, "get", ("", "configmaps", ""), "ns", "other")),
        Level::Metadata
    );
    // Users and verbs together.
    let proxy = user("system:kube-proxy", &[]);
    assert_eq!(
        level(resource(
            Some(&proxy),
            "watch",
            ("", "services", ""),
            "",
            ""
        )),
        Level::None
    );
    assert_eq!(
        level(resource(Some(&proxy), "list", ("", "services", ""), "", "")),
        Level::Metadata
    );
    // Subresources: `pods/log` and `*/exec`; `pods` alone does not match `pods/log`.
    assert_eq!(
        level(resource(a, "get", ("", "pods", "log"), "ns", "p")),
        Level::Request
    );
    assert_eq!(
        level(resource(a, "create", ("", "pods", "exec"), "ns", "p")),
        Level::Request
    );
    assert_eq!(
        level(resource(a, "get", ("", "pods", "status"), "ns", "p")),
        Level::Metadata
    );
    // `deployments/*` takes the resource and all its subresources.
    assert_eq!(
        level(resource(a, "get", ("apps", "deployments", ""), "ns", "d")),
        Level::RequestResponse
    );
    assert_eq!(
        level(resource(
            a,
            "update",
            ("apps", "deployments", "scale"),
            "ns",
            "d"
        )),
        Level::RequestResponse
    );
    // Namespaces: "" is the cluster scope; other groups of other namespaces match nothing.
    assert_eq!(
        level(resource(
            a,
            "get",
            ("apps", "replicasets", ""),
            "kube-system",
            "r"
        )),
        Level::Metadata
    );
    assert_eq!(
        level(resource(
            a,
            "list",
            ("rbac.authorization.k8s.io", "clusterroles", ""),
            "",
            ""
        )),
        Level::Metadata
    );
    assert_eq!(
        level(resource(
            a,
            "get",
            ("apps", "replicasets", ""),
            "default",
            "r"
        )),
        Level::None
    );
    // A group without resources takes every resource of the group.
    assert_eq!(
        level(resource(a, "create", ("batch", "jobs", ""), "default", "")),
        Level::Request
    );
    assert_eq!(
        level(resource(
            a,
            "create",
            ("batch", "cronjobs", "status"),
            "default",
            ""
        )),
        Level::Request
    );
}

#[test]
fn non_resource_urls_match_exactly_or_by_trailing_star() {
    let p = policy(POLICY);
    let alice = user("alice", &[]);
    let a = Some(&alice);
    let level = |attrs: Attributes<'_>| p.decide(&attrs).level;
    assert_eq!(level(path(a, "get", "/healthz")), Level::None);
    assert_eq!(level(path(a, "get", "/healthz/etcd")), Level::None);
    assert_eq!(level(path(a, "get", "/version")), Level::None);
    // Not the verb: falls through; no later rule names paths, and the namespace and resource rules
    // never match a non-resource request.
    assert_eq!(level(path(a, "post", "/healthz")), Level::None);
    let everything = policy(
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n  nonResourceURLs: ['*']\n",
    );
    assert_eq!(
        everything.decide(&path(a, "get", "/apis")).level,
        Level::Metadata
    );
    // A path rule never matches a resource request.
    assert_eq!(
        everything
            .decide(&resource(a, "get", ("", "pods", ""), "ns", "p"))
            .level,
        Level::None
    );
}

#[test]
fn failed_authentication_matches_no_user_rule() {
    let p = policy(
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: None\n  users: [alice]\n- level: None\n  userGroups: [system:unauthenticated]\n- level: Metadata\n",
    );
    assert_eq!(p.decide(&path(None, "get", "/api")).level, Level::Metadata);
}

#[test]
fn omit_stages_unite_and_managed_fields_inherit() {
    let p = policy(POLICY);
    let alice = user("alice", &[]);
    let d = p.decide(&resource(
        Some(&alice),
        "get",
        ("", "configmaps", ""),
        "ns",
        "special",
    ));
    assert!(d.omit_stages.contains(Stage::RequestReceived));
    assert!(d.omit_stages.contains(Stage::ResponseStarted));
    assert!(!d.omit_stages.contains(Stage::ResponseComplete));
    assert!(d.omit_managed_fields);
    let d = p.decide(&resource(Some(&alice), "get", ("", "pods", ""), "ns", "p"));
    assert!(d.omit_stages.contains(Stage::RequestReceived));
    assert!(!d.omit_stages.contains(Stage::ResponseStarted));
    assert!(!d.omit_managed_fields);
    // No match: the policy's own stages.
    let d = p.decide(&path(Some(&alice), "get", "/nothing"));
    assert_eq!(d.level, Level::None);
    assert!(d.omit_stages.contains(Stage::RequestReceived));
}

#[test]
fn json_policies_parse_too() {
    let p = policy(
        r#"{"apiVersion":"audit.k8s.io/v1","kind":"Policy","omitManagedFields":true,
            "rules":[{"level":"RequestResponse","verbs":["create"]},{"level":"Metadata","omitManagedFields":false}]}"#,
    );
    let alice = user("alice", &[]);
    let d = p.decide(&path(Some(&alice), "create", "/x"));
    assert_eq!(
        (d.level, d.omit_managed_fields),
        (Level::RequestResponse, true)
    );
    let d = p.decide(&path(Some(&alice), "get", "/x"));
    assert_eq!((d.level, d.omit_managed_fields), (Level::Metadata, false));
}

#[test]
fn bad_policies_are_refused_with_a_reason() {
    let bad = |text: &str, want: &str| {
        let err = Policy::parse(text.as_bytes()).expect_err(text);
        assert!(err.contains(want), "{err} should contain {want}");
    };
    bad(
        "apiVersion: audit.k8s.io/v1beta1\nkind: Policy\nrules:\n- level: None\n",
        "unknown group version",
    );
    bad(
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: []\n",
        "0 rules",
    );
    bad(
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Everything\n",
        "failed decoding",
    );
    bad(
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: None\n  omitStages: [Sometimes]\n",
        "failed decoding",
    );
    bad(
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: None\n  nonResourceURLs: ['/a*b']\n",
        "must be the final character",
    );
    bad(
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: None\n  nonResourceURLs: ['healthz']\n",
        "must begin with a '/'",
    );
    bad(
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: None\n  nonResourceURLs: ['/x']\n  namespaces: [a]\n",
        "both regular resources and non-resource URLs",
    );
    bad(
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: None\n  resources: [{group: Apps, resources: [x]}]\n",
        "subdomain",
    );
    bad(
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: None\n  resources: [{group: apps, resourceNames: [x]}]\n",
        "requires at least one resource",
    );
    bad("{{{", "failed decoding");
}
