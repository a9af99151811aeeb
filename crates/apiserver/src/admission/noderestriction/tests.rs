//! NodeRestriction's decisions, request by request, without a server.

use super::pods::MIRROR_POD_ANNOTATION;
use super::*;
use crate::admission::Outcome;
use crate::authn::UserInfo;
use serde_json::json;

fn node_user(name: &str) -> UserInfo {
    UserInfo {
        name: format!("system:node:{name}"),
        uid: String::new(),
        groups: vec!["system:nodes".into(), "system:authenticated".into()],
    }
}

struct Req<'a> {
    group: &'a str,
    resource: &'a str,
    sub: Option<&'a str>,
    namespace: &'a str,
    name: &'a str,
    op: Operation,
}

impl Req<'_> {
    fn run(
        &self,
        user: &UserInfo,
        object: &Value,
        old: Option<&Value>,
        lookups: &Lookups,
    ) -> Result<(), String> {
        let outcome = Outcome::default();
        let attrs = Attributes {
            group: self.group,
            version: "v1",
            kind: "",
            resource: self.resource,
            subresource: self.sub,
            namespace: self.namespace,
            name: self.name,
            operation: self.op,
            dry_run: false,
            user,
            outcome: &outcome,
        };
        check(&attrs, object, old, lookups).map_err(|e| {
            assert!(e.code == 403 || e.code == 404, "{e:?}");
            e.message
        })
    }
}

fn core<'a>(resource: &'a str, sub: Option<&'a str>, name: &'a str, op: Operation) -> Req<'a> {
    Req {
        group: "",
        resource,
        sub,
        namespace: if resource == "nodes" { "" } else { "default" },
        name,
        op,
    }
}

fn node(name: &str, labels: Value, taints: Value) -> Value {
    json!({"metadata": {"name": name, "uid": format!("uid-{name}"), "labels": labels},
           "spec": {"taints": taints}})
}

fn pod(name: &str, node: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"),
                        "labels": {"app": "web"}},
           "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]}})
}

fn mirror_pod(node: &str) -> Value {
    json!({"metadata": {"name": format!("static-{node}"), "namespace": "default",
                        "annotations": {MIRROR_POD_ANNOTATION: "hash"},
                        "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node,
                                             "uid": format!("uid-{node}"), "controller": true}]},
           "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]}})
}

#[test]
fn only_nodes_are_restricted() {
    let admin = UserInfo::server().clone();
    assert_eq!(node_identity(&admin), None);
    assert_eq!(node_identity(&node_user("a")), Some("a"));
    // The name alone is not enough: the group must be there too.
    let mut impostor = node_user("a");
    impostor.groups.clear();
    assert_eq!(node_identity(&impostor), None);
    let other = node("b", json!({}), json!([]));
    let req = core("nodes", None, "b", Operation::Update);
    assert_eq!(
        req.run(&admin, &other, Some(&other), &Lookups::default()),
        Ok(())
    );

    let nameless = node_user("");
    let err = req
        .run(&nameless, &other, Some(&other), &Lookups::default())
        .unwrap_err();
    assert_eq!(
        err,
        "nodes \"b\" is forbidden: could not determine node from user \"system:node:\""
    );
}

#[test]
fn a_node_changes_only_its_own_node_object() {
    let a = node_user("a");
    let l = Lookups::default();
    let b = node("b", json!({}), json!([]));
    for op in [Operation::Create, Operation::Update] {
        let err = core("nodes", None, "b", op)
            .run(&a, &b, Some(&b), &l)
            .unwrap_err();
        assert_eq!(
            err,
            "nodes \"b\" is forbidden: node \"a\" is not allowed to modify node \"b\""
        );
    }
    let err = core("nodes", None, "b", Operation::Delete)
        .run(&a, &Value::Null, Some(&b), &l)
        .unwrap_err();
    assert!(
        err.ends_with("node \"a\" is not allowed to modify node \"b\""),
        "{err}"
    );
    // Its own, status included.
    let own = node("a", json!({"kubernetes.io/hostname": "a"}), json!([]));
    assert_eq!(
        core("nodes", None, "a", Operation::Create).run(&a, &own, None, &l),
        Ok(())
    );
    assert_eq!(
        core("nodes", Some("status"), "a", Operation::Update).run(&a, &own, Some(&own), &l),
        Ok(())
    );
}

#[test]
fn a_node_keeps_its_taints() {
    let a = node_user("a");
    let old = node(
        "a",
        json!({}),
        json!([{"key": "dedicated", "effect": "NoSchedule"}]),
    );
    let new = node("a", json!({}), json!([]));
    let err = core("nodes", None, "a", Operation::Update)
        .run(&a, &new, Some(&old), &Lookups::default())
        .unwrap_err();
    assert_eq!(
        err,
        "nodes \"a\" is forbidden: node \"a\" is not allowed to modify taints"
    );
    // No taints, absent or empty, is the same.
    let bare = json!({"metadata": {"name": "a"}, "spec": {}});
    let empty = node("a", json!({}), json!([]));
    assert_eq!(
        core("nodes", None, "a", Operation::Update).run(
            &a,
            &bare,
            Some(&empty),
            &Lookups::default()
        ),
        Ok(())
    );
}

#[test]
fn node_labels_follow_the_kubelet_label_rules() {
    for allowed in [
        "example.com/rack",
        "rack",
        "kubernetes.io/hostname",
        "topology.kubernetes.io/zone",
        "node.kubernetes.io/instance-type",
        "node.kubernetes.io/anything",
        "sub.kubelet.kubernetes.io/x",
        "beta.kubernetes.io/arch",
    ] {
        assert!(!is_forbidden_label(allowed), "{allowed}");
    }
    for forbidden in [
        "node-restriction.kubernetes.io/x",
        "team.node-restriction.kubernetes.io/x",
        "node-role.kubernetes.io/control-plane",
        "kubernetes.io/role",
        "k8s.io/x",
        "example.k8s.io/x",
    ] {
        assert!(is_forbidden_label(forbidden), "{forbidden}");
    }
    // "notkubernetes.io" is not a kubernetes.io subdomain.
    assert!(!is_forbidden_label("notkubernetes.io/x"));

    let a = node_user("a");
    let l = Lookups::default();
    let new = node(
        "a",
        json!({"node-restriction.kubernetes.io/pool": "x", "node-role.kubernetes.io/worker": "", "rack": "1"}),
        json!([]),
    );
    let err = core("nodes", None, "a", Operation::Create)
        .run(&a, &new, None, &l)
        .unwrap_err();
    assert_eq!(
        err,
        "nodes \"a\" is forbidden: node \"a\" is not allowed to set the following labels: node-restriction.kubernetes.io/pool, node-role.kubernetes.io/worker"
    );
    // On update, removing a forbidden label is a change too; unchanged ones are fine.
    let old = node(
        "a",
        json!({"node-role.kubernetes.io/worker": "", "rack": "1"}),
        json!([]),
    );
    let new = node("a", json!({"rack": "2"}), json!([]));
    let err = core("nodes", None, "a", Operation::Update)
        .run(&a, &new, Some(&old), &l)
        .unwrap_err();
    assert_eq!(
        err,
        "nodes \"a\" is forbidden: is not allowed to modify labels: node-role.kubernetes.io/worker"
    );
    let new = node(
        "a",
        json!({"node-role.kubernetes.io/worker": "", "rack": "2"}),
        json!([]),
    );
    assert_eq!(
        core("nodes", None, "a", Operation::Update).run(&a, &new, Some(&old), &l),
        Ok(())
    );
}

#[test]
fn a_node_deletes_only_pods_bound_to_it() {
    let a = node_user("a");
    let l = Lookups::default();
    let theirs = pod("web-b", "b");
    let err = core("pods", None, "web-b", Operation::Delete)
        .run(&a, &Value::Null, Some(&theirs), &l)
        .unwrap_err();
    assert_eq!(
        err,
        "pods \"web-b\" is forbidden: node \"a\" can only delete pods with spec.nodeName set to itself"
    );
    let mine = pod("web-a", "a");
    assert_eq!(
        core("pods", None, "web-a", Operation::Delete).run(&a, &Value::Null, Some(&mine), &l),
        Ok(())
    );
    let err = core("pods", None, "web-a", Operation::Update)
        .run(&a, &mine, Some(&mine), &l)
        .unwrap_err();
    assert_eq!(
        err,
        "pods \"web-a\" is forbidden: unexpected operation \"UPDATE\", node \"a\" can only create and delete mirror pods"
    );
    let err = core("pods", Some("binding"), "web-a", Operation::Create)
        .run(&a, &json!({}), None, &l)
        .unwrap_err();
    assert_eq!(
        err,
        "pods \"web-a\" is forbidden: unexpected pod subresource \"binding\", only 'status' and 'eviction' are allowed"
    );
}

#[test]
fn a_node_creates_only_its_own_mirror_pods() {
    let a = node_user("a");
    let l = Lookups {
        node: Some(node("a", json!({}), json!([]))),
        pod: None,
    };
    let create = |p: &Value| {
        let name = p["metadata"]["name"].as_str().unwrap_or("");
        core("pods", None, name, Operation::Create).run(&a, p, None, &l)
    };
    assert_eq!(create(&mirror_pod("a")), Ok(()));

    let mut plain = mirror_pod("a");
    plain["metadata"]["annotations"] = json!({});
    assert!(create(&plain).unwrap_err().ends_with(
        "pod does not have \"kubernetes.io/config.mirror\" annotation, node \"a\" can only create mirror pods"
    ));
    let mut elsewhere = mirror_pod("a");
    elsewhere["spec"]["nodeName"] = json!("b");
    assert!(create(&elsewhere)
        .unwrap_err()
        .ends_with("node \"a\" can only create pods with spec.nodeName set to itself"));
    let mut orphan = mirror_pod("a");
    orphan["metadata"]["ownerReferences"] = json!([]);
    assert!(create(&orphan)
        .unwrap_err()
        .ends_with("node \"a\" can only create pods with an owner reference set to itself"));
    let mut not_controller = mirror_pod("a");
    not_controller["metadata"]["ownerReferences"][0]["controller"] = json!(false);
    assert!(create(&not_controller).unwrap_err().ends_with(
        "node \"a\" can only create pods with a controller owner reference set to itself"
    ));
    let mut blocking = mirror_pod("a");
    blocking["metadata"]["ownerReferences"][0]["blockOwnerDeletion"] = json!(true);
    assert!(create(&blocking)
        .unwrap_err()
        .ends_with("node \"a\" must not set blockOwnerDeletion on an owner reference"));
    let mut stale = mirror_pod("a");
    stale["metadata"]["ownerReferences"][0]["uid"] = json!("old-uid");
    assert!(create(&stale)
        .unwrap_err()
        .ends_with("node a UID mismatch: expected old-uid got uid-a"));

    for (spec_part, what) in [
        (
            json!({"serviceAccountName": "default"}),
            "a service account",
        ),
        (json!({"imagePullSecrets": [{"name": "reg"}]}), "secrets"),
        (
            json!({"volumes": [{"name": "v", "secret": {"secretName": "s"}}]}),
            "secrets",
        ),
        (
            json!({"volumes": [{"name": "v", "projected": {"sources": [{"secret": {"name": "s"}}]}}]}),
            "secrets",
        ),
        (
            json!({"volumes": [{"name": "v", "csi": {"driver": "d", "nodePublishSecretRef": {"name": "s"}}}]}),
            "secrets",
        ),
        (
            json!({"volumes": [{"name": "v", "configMap": {"name": "c"}}]}),
            "configmaps",
        ),
        (
            json!({"volumes": [{"name": "v", "projected": {"sources": [{"clusterTrustBundle": {"name": "b", "path": "p"}}]}}]}),
            "clustertrustbundles",
        ),
        (
            json!({"volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "c"}}]}),
            "persistentvolumeclaims",
        ),
    ] {
        let mut p = mirror_pod("a");
        for (k, v) in spec_part.as_object().unwrap() {
            p["spec"][k] = v.clone();
        }
        let err = create(&p).unwrap_err();
        assert!(
            err.ends_with(&format!(
                "node \"a\" can not create pods that reference {what}"
            )),
            "{err}"
        );
    }
    let mut env = mirror_pod("a");
    env["spec"]["containers"][0]["env"] =
        json!([{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}]);
    assert!(create(&env).unwrap_err().ends_with("reference configmaps"));
    env["spec"]["containers"][0]["env"] =
        json!([{"name": "X", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]);
    assert!(create(&env).unwrap_err().ends_with("reference secrets"));
    env["spec"]["containers"][0]["env"] = json!([{"name": "X", "value": "plain"}]);
    assert_eq!(create(&env), Ok(()));
}

#[test]
fn pod_status_and_eviction_only_for_pods_bound_to_the_node() {
    let a = node_user("a");
    let l = Lookups::default();
    let theirs = pod("web-b", "b");
    let err = core("pods", Some("status"), "web-b", Operation::Update)
        .run(&a, &theirs, Some(&theirs), &l)
        .unwrap_err();
    assert_eq!(
        err,
        "pods \"web-b\" is forbidden: node \"a\" can only update pod status for pods with spec.nodeName set to itself"
    );
    let mine = pod("web-a", "a");
    let status = core("pods", Some("status"), "web-a", Operation::Update);
    assert_eq!(status.run(&a, &mine, Some(&mine), &l), Ok(()));
    let mut relabelled = mine.clone();
    relabelled["metadata"]["labels"]["app"] = json!("db");
    assert_eq!(
        status.run(&a, &relabelled, Some(&mine), &l).unwrap_err(),
        "pods \"web-a\" is forbidden: node \"a\" cannot update labels through pod status"
    );
    let mut claimed = mine.clone();
    claimed["status"] =
        json!({"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "x"}]});
    assert!(status
        .run(&a, &claimed, Some(&mine), &l)
        .unwrap_err()
        .ends_with("cannot update resource claim statues"));

    let eviction =
        json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "web-b"}});
    let evict = core("pods", Some("eviction"), "web-b", Operation::Create);
    let with_pod = |p: &Value| Lookups {
        pod: Some(p.clone()),
        node: None,
    };
    assert_eq!(
        evict
            .run(&a, &eviction, None, &with_pod(&theirs))
            .unwrap_err(),
        "pods \"web-b\" is forbidden: node a can only evict pods with spec.nodeName set to itself"
    );
    assert_eq!(
        evict.run(&a, &eviction, None, &l).unwrap_err(),
        "pods \"web-b\" not found"
    );
    let evict_mine = core("pods", Some("eviction"), "web-a", Operation::Create);
    assert_eq!(
        evict_mine.run(&a, &eviction, None, &with_pod(&mine)),
        Ok(())
    );
}

#[test]
fn claims_status_only_capacity_and_conditions() {
    let a = node_user("a");
    let l = Lookups::default();
    let old = json!({"metadata": {"name": "c", "resourceVersion": "5", "labels": {"x": "1"}},
                     "spec": {"resources": {"requests": {"storage": "1Gi"}}},
                     "status": {"phase": "Bound", "capacity": {"storage": "1Gi"}}});
    let mut grown = old.clone();
    grown["status"]["capacity"]["storage"] = json!("2Gi");
    grown["status"]["conditions"] = json!([{"type": "Resizing", "status": "True"}]);
    grown["metadata"]["resourceVersion"] = json!("6");
    let status = core(
        "persistentvolumeclaims",
        Some("status"),
        "c",
        Operation::Update,
    );
    assert_eq!(status.run(&a, &grown, Some(&old), &l), Ok(()));
    let mut relabelled = grown.clone();
    relabelled["metadata"]["labels"]["x"] = json!("2");
    relabelled["status"]["phase"] = json!("Lost");
    assert_eq!(
        status.run(&a, &relabelled, Some(&old), &l).unwrap_err(),
        "persistentvolumeclaims \"c\" is forbidden: node \"a\" is not allowed to update fields other than status.capacity and status.conditions: metadata.labels.x, status.phase"
    );
    let err = core("persistentvolumeclaims", None, "c", Operation::Update)
        .run(&a, &grown, Some(&old), &l)
        .unwrap_err();
    assert_eq!(
        err,
        "persistentvolumeclaims \"c\" is forbidden: may only update PVC status"
    );
}

#[test]
fn leases_and_csinodes_only_its_own() {
    let a = node_user("a");
    let l = Lookups::default();
    let lease = |name: &str| json!({"metadata": {"name": name}});
    let req = |ns, name, op| Req {
        group: "coordination.k8s.io",
        resource: "leases",
        sub: None,
        namespace: ns,
        name,
        op,
    };
    assert_eq!(
        req("kube-node-lease", "a", Operation::Create).run(&a, &lease("a"), None, &l),
        Ok(())
    );
    assert_eq!(
        req("kube-node-lease", "b", Operation::Update).run(&a, &lease("b"), Some(&lease("b")), &l).unwrap_err(),
        "leases.coordination.k8s.io \"b\" is forbidden: can only access node lease with the same name as the requesting node"
    );
    assert_eq!(
        req("default", "a", Operation::Create).run(&a, &lease("a"), None, &l).unwrap_err(),
        "leases.coordination.k8s.io \"a\" is forbidden: can only access leases in the \"kube-node-lease\" system namespace"
    );
    let csinode = |name, op| Req {
        group: "storage.k8s.io",
        resource: "csinodes",
        sub: None,
        namespace: "",
        name,
        op,
    };
    assert_eq!(
        csinode("a", Operation::Create).run(&a, &lease("a"), None, &l),
        Ok(())
    );
    assert_eq!(
        csinode("b", Operation::Delete).run(&a, &Value::Null, Some(&lease("b")), &l).unwrap_err(),
        "csinodes.storage.k8s.io \"b\" is forbidden: can only access CSINode with the same name as the requesting node"
    );
}

#[test]
fn tokens_only_for_pods_on_the_node() {
    let a = node_user("a");
    let token = |reference: Value| {
        json!({"apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest", "spec": {"audiences": ["api"], "boundObjectRef": reference}})
    };
    let req = core(
        "serviceaccounts",
        Some("token"),
        "default",
        Operation::Create,
    );
    let mine = pod("web-a", "a");
    let theirs = pod("web-b", "b");
    let with_pod = |p: &Value| Lookups {
        pod: Some(p.clone()),
        node: None,
    };
    let bound = |name: &str, uid: &str| {
        token(json!({"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid}))
    };
    assert_eq!(
        req.run(&a, &bound("web-a", "uid-web-a"), None, &with_pod(&mine)),
        Ok(())
    );
    assert_eq!(
        req.run(&a, &bound("web-b", "uid-web-b"), None, &with_pod(&theirs)).unwrap_err(),
        "serviceaccounts \"default\" is forbidden: node requested token bound to a pod scheduled on a different node"
    );
    assert!(req
        .run(&a, &bound("web-a", "stale"), None, &with_pod(&mine))
        .unwrap_err()
        .ends_with("the UID in the bound object reference (stale) does not match the UID in record. The object might have been deleted and then recreated"));
    assert!(req
        .run(&a, &bound("web-a", ""), None, &with_pod(&mine))
        .unwrap_err()
        .ends_with("node requested token with a pod binding without a uid"));
    assert!(req
        .run(&a, &token(Value::Null), None, &Lookups::default())
        .unwrap_err()
        .ends_with("node requested token not bound to a pod"));
    let secret_bound =
        token(json!({"apiVersion": "v1", "kind": "Secret", "name": "s", "uid": "u"}));
    assert!(req
        .run(&a, &secret_bound, None, &Lookups::default())
        .unwrap_err()
        .ends_with("node requested token not bound to a pod"));
    assert_eq!(
        req.run(&a, &bound("gone", "u"), None, &Lookups::default())
            .unwrap_err(),
        "pods \"gone\" not found"
    );
    // Other service account writes are RBAC's business.
    let plain = core("serviceaccounts", None, "default", Operation::Update);
    assert_eq!(
        plain.run(&a, &json!({}), Some(&json!({})), &Lookups::default()),
        Ok(())
    );
}
