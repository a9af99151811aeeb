use serde_json::json;

use super::*;
use crate::authn::UserInfo;

fn node_user(name: &str) -> UserInfo {
    UserInfo {
        name: format!("system:node:{name}"),
        uid: String::new(),
        groups: vec!["system:nodes".into(), "system:authenticated".into()],
    }
}

/// A request of `user`: (verb, group, resource, subresource, namespace, name, fieldSelector).
fn attrs<'a>(
    user: &'a UserInfo,
    verb: &'a str,
    (group, resource, subresource): (&'a str, &'a str, &'a str),
    (namespace, name): (&'a str, &'a str),
    field_selector: &'a str,
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
        field_selector,
    }
}

/// Pod `web` on node `n1` names secret `s1`, config map `cm1`, claim `data` (bound to `pv1`) and
/// runs as service account `sa`; VolumeAttachment `va1` is on `n1`.
fn graph() -> Graph {
    let mut g = Graph::default();
    g.set_pod(
        "apps",
        "web",
        Some(&json!({"spec": {
            "nodeName": "n1",
            "serviceAccountName": "sa",
            "containers": [{"envFrom": [{"configMapRef": {"name": "cm1"}}]}],
            "volumes": [
                {"name": "s", "secret": {"secretName": "s1"}},
                {"name": "d", "persistentVolumeClaim": {"claimName": "data"}}
            ]
        }})),
    );
    g.set_volume(
        "pv1",
        Some(&json!({"spec": {"claimRef": {"namespace": "apps", "name": "data"}}})),
    );
    g.set_attachment("va1", Some("n1"));
    g.set_pod(
        "apps",
        "other",
        Some(&json!({"spec": {"nodeName": "n2", "volumes": [{"name": "s", "secret": {"secretName": "s2"}}]}})),
    );
    g
}

const CORE: &str = "";

fn decide(g: &Graph, node: &str, a: &Attributes<'_>) -> Decision {
    let rules = [Rule {
        verbs: vec!["get".into(), "list".into(), "watch".into()],
        api_groups: vec!["".into()],
        resources: vec!["services".into()],
        ..Default::default()
    }];
    authorize(g, node, a, &rules)
}

#[test]
fn secrets_only_of_the_nodes_pods() {
    let (g, n1) = (graph(), node_user("n1"));
    let secret =
        |verb, name, selector| attrs(&n1, verb, (CORE, "secrets", ""), ("apps", name), selector);
    assert_eq!(decide(&g, "n1", &secret("get", "s1", "")), Allow);
    // The kubelet's single-object watch: the name comes from `metadata.name=s1`.
    assert_eq!(decide(&g, "n1", &secret("watch", "s1", "")), Allow);
    assert_eq!(
        decide(&g, "n1", &secret("get", "s2", "")),
        NoOpinion("no relationship found between node 'n1' and this object".into())
    );
    assert_eq!(
        decide(&g, "n1", &secret("list", "", "")),
        NoOpinion("No Object name found".into())
    );
    assert_eq!(
        decide(&g, "n1", &secret("update", "s1", "")),
        NoOpinion("can only read resources of this type".into())
    );
    let cluster_wide = attrs(&n1, "get", (CORE, "secrets", ""), ("", "s1"), "");
    assert_eq!(
        decide(&g, "n1", &cluster_wide),
        NoOpinion("can only read namespaced object of this type".into())
    );
    let cm = attrs(&n1, "get", (CORE, "configmaps", ""), ("apps", "cm1"), "");
    assert_eq!(decide(&g, "n1", &cm), Allow);
    // A node nothing runs on reaches nothing.
    let n3 = node_user("n3");
    let s1 = attrs(&n3, "get", (CORE, "secrets", ""), ("apps", "s1"), "");
    assert!(matches!(decide(&g, "n3", &s1), NoOpinion(_)));
}

#[test]
fn claims_volumes_attachments_and_tokens() {
    let (g, n1) = (graph(), node_user("n1"));
    let get = |resource: (&'static str, &'static str, &'static str), ns, name| {
        decide(&g, "n1", &attrs(&n1, "get", resource, (ns, name), ""))
    };
    assert_eq!(
        get((CORE, "persistentvolumeclaims", ""), "apps", "data"),
        Allow
    );
    assert_eq!(get((CORE, "persistentvolumes", ""), "", "pv1"), Allow);
    assert_eq!(
        get(("storage.k8s.io", "volumeattachments", ""), "", "va1"),
        Allow
    );
    assert!(matches!(
        get((CORE, "persistentvolumes", ""), "", "pv2"),
        NoOpinion(_)
    ));
    let list_pvs = attrs(&n1, "list", (CORE, "persistentvolumes", ""), ("", ""), "");
    assert_eq!(
        decide(&g, "n1", &list_pvs),
        NoOpinion("can only get individual resources of this type".into())
    );
    let status = attrs(
        &n1,
        "patch",
        (CORE, "persistentvolumeclaims", "status"),
        ("apps", "data"),
        "",
    );
    assert_eq!(decide(&g, "n1", &status), Allow);
    let token = |name| {
        attrs(
            &n1,
            "create",
            (CORE, "serviceaccounts", "token"),
            ("apps", name),
            "",
        )
    };
    assert_eq!(decide(&g, "n1", &token("sa")), Allow);
    assert!(matches!(decide(&g, "n1", &token("admin")), NoOpinion(_)));
}

#[test]
fn own_node_lease_and_csinode() {
    let (g, n1) = (graph(), node_user("n1"));
    let d =
        |verb, resource, ns, name| decide(&g, "n1", &attrs(&n1, verb, resource, (ns, name), ""));
    let nodes = (CORE, "nodes", "");
    assert_eq!(d("get", nodes, "", "n1"), Allow);
    assert_eq!(
        d("get", nodes, "", "n2"),
        NoOpinion("node 'n1' cannot read 'n2', only its own Node object".into())
    );
    assert_eq!(
        d("list", nodes, "", ""),
        NoOpinion("node 'n1' cannot read all nodes, only its own Node object".into())
    );
    assert_eq!(d("create", nodes, "", ""), Allow);
    assert_eq!(d("patch", (CORE, "nodes", "status"), "", "n1"), Allow);
    let leases = ("coordination.k8s.io", "leases", "");
    assert_eq!(d("update", leases, "kube-node-lease", "n1"), Allow);
    assert_eq!(d("create", leases, "kube-node-lease", ""), Allow);
    assert!(matches!(
        d("update", leases, "kube-node-lease", "n2"),
        NoOpinion(_)
    ));
    assert!(matches!(d("get", leases, "default", "n1"), NoOpinion(_)));
    let csinodes = ("storage.k8s.io", "csinodes", "");
    assert_eq!(d("patch", csinodes, "", "n1"), Allow);
    assert!(matches!(d("get", csinodes, "", "n2"), NoOpinion(_)));
}

#[test]
fn pods_by_node_selector() {
    let (g, n1) = (graph(), node_user("n1"));
    let pods = (CORE, "pods", "");
    let list = |selector| decide(&g, "n1", &attrs(&n1, "list", pods, ("", ""), selector));
    assert_eq!(list("spec.nodeName=n1"), Allow);
    assert_eq!(
        list("spec.nodeName=n2"),
        NoOpinion("can only list/watch pods with spec.nodeName field selector".into())
    );
    assert!(matches!(list(""), NoOpinion(_)));
    assert!(matches!(list("spec.nodeName!=n1"), NoOpinion(_)));
    let get = |name| decide(&g, "n1", &attrs(&n1, "get", pods, ("apps", name), ""));
    assert_eq!(get("web"), Allow);
    assert!(matches!(get("other"), NoOpinion(_)));
    let status = attrs(&n1, "patch", (CORE, "pods", "status"), ("apps", "web"), "");
    assert_eq!(decide(&g, "n1", &status), Allow);
    let exec = attrs(&n1, "create", (CORE, "pods", "exec"), ("apps", "web"), "");
    assert_eq!(decide(&g, "n1", &exec), NoOpinion(String::new()));
}

#[test]
fn other_resources_follow_the_node_rules() {
    let (g, n1) = (graph(), node_user("n1"));
    let services = attrs(&n1, "list", (CORE, "services", ""), ("", ""), "");
    assert_eq!(decide(&g, "n1", &services), Allow);
    let deployments = attrs(&n1, "list", ("apps", "deployments", ""), ("", ""), "");
    assert_eq!(decide(&g, "n1", &deployments), NoOpinion(String::new()));
    let anonymous = UserInfo {
        name: "system:node:".into(),
        uid: String::new(),
        groups: vec!["system:nodes".into()],
    };
    let a = attrs(&anonymous, "list", (CORE, "services", ""), ("", ""), "");
    assert_eq!(
        decide(&g, "", &a),
        NoOpinion("unknown node for user \"system:node:\"".into())
    );
}
