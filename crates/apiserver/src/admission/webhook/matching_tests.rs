use super::*;
use crate::admission::Outcome;
use crate::authn::UserInfo;
use apimachinery::labels::selector_from_label_selector;
use apimachinery::resources::Registry;
use serde_json::json;

struct Req {
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    resource: &'static str,
    subresource: Option<&'static str>,
    namespace: &'static str,
    name: &'static str,
    operation: Operation,
}

const POD_CREATE: Req = Req {
    group: "",
    version: "v1",
    kind: "Pod",
    resource: "pods",
    subresource: None,
    namespace: "default",
    name: "p",
    operation: Operation::Create,
};

fn with<T>(r: &Req, f: impl FnOnce(&Attributes<'_>) -> T) -> T {
    let outcome = Outcome::default();
    let attrs = Attributes {
        group: r.group,
        version: r.version,
        kind: r.kind,
        resource: r.resource,
        subresource: r.subresource,
        namespace: r.namespace,
        name: r.name,
        operation: r.operation,
        dry_run: false,
        user: UserInfo::server(),
        outcome: &outcome,
    };
    f(&attrs)
}

fn rule(v: Value) -> Rule {
    Rule::from_json(&v)
}

fn matches(rules: &[Rule], r: &Req) -> bool {
    with(r, |a| direct_invocation(rules, a).is_some())
}

#[test]
fn operations_groups_versions_and_wildcards() {
    let exact = rule(
        json!({"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                            "resources": ["pods"]}),
    );
    assert!(matches(std::slice::from_ref(&exact), &POD_CREATE));
    let update = Req {
        operation: Operation::Update,
        ..POD_CREATE
    };
    assert!(!matches(std::slice::from_ref(&exact), &update));
    let all = rule(
        json!({"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"],
                          "resources": ["*"]}),
    );
    assert!(matches(std::slice::from_ref(&all), &update));
    let apps = Req {
        group: "apps",
        kind: "Deployment",
        resource: "deployments",
        ..POD_CREATE
    };
    assert!(!matches(&[exact], &apps));
    assert!(matches(&[all], &apps));
    // Missing lists match nothing.
    assert!(!matches(
        &[rule(json!({"resources": ["pods"]}))],
        &POD_CREATE
    ));
}

#[test]
fn resources_and_subresources() {
    let status = Req {
        subresource: Some("status"),
        kind: "Pod",
        operation: Operation::Update,
        ..POD_CREATE
    };
    let r = |res: &str| {
        rule(
            json!({"operations": ["*"], "apiGroups": [""], "apiVersions": ["v1"],
                    "resources": [res]}),
        )
    };
    // `pods` is the resource alone; `*` every resource but no subresource.
    assert!(matches(&[r("pods")], &POD_CREATE));
    assert!(!matches(&[r("pods")], &status));
    assert!(matches(&[r("*")], &POD_CREATE));
    assert!(!matches(&[r("*")], &status));
    // `pods/*` pods and every subresource of pods (upstream's matcher takes the `*` as any
    // subresource, none included), `*/status` every status, `*/*` everything.
    assert!(matches(&[r("pods/*")], &status));
    assert!(matches(&[r("pods/*")], &POD_CREATE));
    assert!(matches(&[r("*/status")], &status));
    assert!(!matches(&[r("*/status")], &POD_CREATE));
    assert!(matches(&[r("*/*")], &status));
    assert!(matches(&[r("*/*")], &POD_CREATE));
    assert!(!matches(&[r("pods/log")], &status));
}

#[test]
fn scopes() {
    let scoped = |scope: &str| {
        rule(
            json!({"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"],
                    "resources": ["*"], "scope": scope}),
        )
    };
    let node = Req {
        kind: "Node",
        resource: "nodes",
        namespace: "",
        ..POD_CREATE
    };
    let namespace = Req {
        kind: "Namespace",
        resource: "namespaces",
        namespace: "",
        name: "team-a",
        ..POD_CREATE
    };
    assert!(matches(&[scoped("Namespaced")], &POD_CREATE));
    assert!(!matches(&[scoped("Namespaced")], &node));
    assert!(!matches(&[scoped("Namespaced")], &namespace));
    assert!(!matches(&[scoped("Cluster")], &POD_CREATE));
    assert!(matches(&[scoped("Cluster")], &node));
    assert!(matches(&[scoped("Cluster")], &namespace));
    for r in [&POD_CREATE, &node, &namespace] {
        assert!(matches(&[scoped("*")], r));
    }
    assert!(!matches(&[scoped("Bogus")], &POD_CREATE));
}

#[test]
fn subresource_kinds_in_the_invocation() {
    let scale = Req {
        group: "apps",
        kind: "Scale",
        resource: "deployments",
        subresource: Some("scale"),
        operation: Operation::Update,
        ..POD_CREATE
    };
    let rules = [rule(
        json!({"operations": ["UPDATE"], "apiGroups": ["apps"],
                             "apiVersions": ["v1"], "resources": ["deployments/scale"]}),
    )];
    let inv = with(&scale, |a| direct_invocation(&rules, a)).unwrap();
    assert_eq!(inv.resource, "deployments");
    assert_eq!(inv.subresource, "scale");
    assert_eq!(
        inv.kind,
        Gvk {
            group: "autoscaling".into(),
            version: "v1".into(),
            kind: "Scale".into()
        }
    );
}

#[test]
fn equivalent_resources_match_with_their_own_version() {
    let snapshot = Registry::with_builtin().snapshot();
    let event = Req {
        kind: "Event",
        resource: "events",
        ..POD_CREATE
    };
    let rules = [rule(
        json!({"operations": ["CREATE"], "apiGroups": ["events.k8s.io"],
                             "apiVersions": ["v1"], "resources": ["events"]}),
    )];
    with(&event, |a| {
        assert!(direct_invocation(&rules, a).is_none());
        let others = equivalents(&snapshot, a);
        assert!(others.iter().all(|i| i.resource == "events"), "{others:?}");
        let inv = equivalent_invocation(&rules, a, &others).expect("equivalent match");
        assert_eq!(inv.group, "events.k8s.io");
        assert_eq!(inv.kind.api_version(), "events.k8s.io/v1");
        assert_eq!(inv.kind.kind, "Event");
        // The request's own resource and kind are kept for requestResource/requestKind.
        let own = request_invocation(a);
        assert_eq!(own.kind.api_version(), "v1");
    });
    let hpa = Req {
        group: "autoscaling",
        version: "v2",
        kind: "HorizontalPodAutoscaler",
        resource: "horizontalpodautoscalers",
        ..POD_CREATE
    };
    let v1_rules = [rule(
        json!({"operations": ["*"], "apiGroups": ["autoscaling"],
                                "apiVersions": ["v1"], "resources": ["horizontalpodautoscalers"]}),
    )];
    with(&hpa, |a| {
        let inv = equivalent_invocation(&v1_rules, a, &equivalents(&snapshot, a)).unwrap();
        assert_eq!(inv.version, "v1");
        assert_eq!(inv.kind.api_version(), "autoscaling/v1");
    });
    // Resources with storage of their own have no equivalents.
    with(&POD_CREATE, |a| {
        assert!(equivalents(&snapshot, a).is_empty())
    });
}

#[test]
fn namespace_selector_subjects() {
    with(&POD_CREATE, |a| {
        assert_eq!(namespace_to_check(a), Some("default"));
        assert!(namespace_labels_from_object(a, &json!({})).is_none());
    });
    let node = Req {
        kind: "Node",
        resource: "nodes",
        namespace: "",
        ..POD_CREATE
    };
    with(&node, |a| assert_eq!(namespace_to_check(a), None));
    let ns = Req {
        kind: "Namespace",
        resource: "namespaces",
        namespace: "",
        name: "team-a",
        ..POD_CREATE
    };
    let obj = json!({"metadata": {"name": "team-a", "labels": {"env": "prod"}}});
    with(&ns, |a| {
        assert_eq!(namespace_to_check(a), Some("team-a"));
        let labels = namespace_labels_from_object(a, &obj).unwrap();
        assert_eq!(labels["env"], "prod");
    });
    // Deleting a namespace looks its labels up instead (the object is absent).
    let ns_delete = Req {
        operation: Operation::Delete,
        ..ns
    };
    with(&ns_delete, |a| {
        assert!(namespace_labels_from_object(a, &Value::Null).is_none())
    });
}

#[test]
fn object_selector_looks_at_object_and_old_object() {
    let sel = selector_from_label_selector(&json!({"matchLabels": {"hook": "on"}})).unwrap();
    let on = json!({"metadata": {"labels": {"hook": "on"}}});
    let off = json!({"metadata": {"labels": {"hook": "off"}}});
    assert!(object_selector_matches(&sel, &on, None));
    assert!(!object_selector_matches(&sel, &off, None));
    assert!(object_selector_matches(&sel, &off, Some(&on)));
    // DELETE: no new object, the old one decides.
    assert!(object_selector_matches(&sel, &Value::Null, Some(&on)));
    assert!(!object_selector_matches(&sel, &Value::Null, Some(&off)));
    // An empty selector matches everything, even no object.
    assert!(object_selector_matches(
        &Selector::everything(),
        &Value::Null,
        None
    ));
    // DoesNotExist matches objects without the label.
    let not_in = selector_from_label_selector(
        &json!({"matchExpressions": [{"key": "skip", "operator": "DoesNotExist"}]}),
    )
    .unwrap();
    assert!(object_selector_matches(
        &not_in,
        &json!({"metadata": {}}),
        None
    ));
}
