//! The garbage collector of `rkube server`, driven by kubectl: background, foreground and orphan
//! cascading deletion of Deployments on simulated nodes, and ownerReferences between ConfigMaps
//! (owner deleted, dangling reference, two owners, an owner in another namespace), and a custom
//! resource owned by a ConfigMap.

mod support;

use std::time::{Duration, Instant};

use support::{Backend, Cluster};

/// Polls `check` every 100 ms until it returns true; panics with `what` after `timeout`.
fn wait_until(timeout: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn names(c: &Cluster, args: &[&str]) -> Vec<String> {
    let mut full = vec!["get"];
    full.extend_from_slice(args);
    full.extend_from_slice(&["-o", "name"]);
    c.kubectl(&full).lines().map(str::to_string).collect()
}

/// A Deployment whose pods go away one second after deletion on the simulated nodes.
fn deployment(name: &str, replicas: u32, grace: u32) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
  labels:
    app: {name}
spec:
  replicas: {replicas}
  selector:
    matchLabels:
      app: {name}
  template:
    metadata:
      labels:
        app: {name}
    spec:
      terminationGracePeriodSeconds: {grace}
      containers:
      - name: c
        image: nginx
"#
    )
}

fn create_and_wait(c: &Cluster, name: &str, replicas: usize, grace: u32) {
    c.kubectl_in(
        &["apply", "-f", "-"],
        Some(&deployment(name, replicas as u32, grace)),
    );
    let selector = format!("app={name}");
    wait_until(Duration::from_secs(30), "pods to be created", || {
        names(c, &["pods", "-l", &selector]).len() == replicas
    });
}

#[test]
fn deployments_cascade_in_background_foreground_and_orphan() {
    let c = Cluster::start_all(Backend::Sqlite, &["--sim-nodes", "3"]);

    // Background (kubectl's default): the ReplicaSet and its pods follow the Deployment.
    create_and_wait(&c, "bg", 2, 1);
    c.kubectl(&["delete", "deployment", "bg"]);
    wait_until(
        Duration::from_secs(30),
        "bg's ReplicaSets and pods to go",
        || names(&c, &["rs,pods", "-l", "app=bg"]).is_empty(),
    );

    // Foreground: the Deployment stays (deleting) while its pods exist, and goes after them.
    create_and_wait(&c, "fg", 2, 3);
    c.kubectl(&[
        "delete",
        "deployment",
        "fg",
        "--cascade=foreground",
        "--wait=false",
    ]);
    let mut seen_waiting = false;
    wait_until(Duration::from_secs(40), "fg to be deleted", || {
        let owner = c.kubectl(&[
            "get",
            "deployment",
            "--ignore-not-found",
            "-l",
            "app=fg",
            "-o",
            "jsonpath={range .items[*]}{.metadata.deletionTimestamp} {.metadata.finalizers}{end}",
        ]);
        let pods = names(&c, &["pods", "-l", "app=fg"]);
        if owner.trim().is_empty() {
            // Gone: nothing of it may be left.
            assert!(
                pods.is_empty(),
                "pods outlived a foreground-deleted owner: {pods:?}"
            );
            return true;
        }
        if owner.contains("foregroundDeletion") && !owner.starts_with(' ') && !pods.is_empty() {
            seen_waiting = true;
        }
        false
    });
    assert!(
        seen_waiting,
        "never saw the Deployment deleting while its pods existed"
    );
    assert!(names(&c, &["rs", "-l", "app=fg"]).is_empty());

    // Orphan: the ReplicaSet and pods stay, without the reference to the gone Deployment.
    create_and_wait(&c, "orph", 1, 1);
    c.kubectl(&["delete", "deployment", "orph", "--cascade=orphan"]);
    assert!(names(&c, &["deployment", "-l", "app=orph"]).is_empty());
    let rs = c.kubectl(&[
        "get",
        "rs",
        "-l",
        "app=orph",
        "-o",
        "jsonpath={range .items[*]}{.metadata.name}={.metadata.ownerReferences}{end}",
    ]);
    assert!(rs.starts_with("orph-") && rs.ends_with('='), "{rs}");
    assert_eq!(names(&c, &["pods", "-l", "app=orph"]).len(), 1);
}

fn configmap(name: &str, ns: &str, owners: &[(&str, &str)]) -> String {
    let mut refs = String::new();
    for (owner, uid) in owners {
        refs.push_str(&format!(
            "\n  - apiVersion: v1\n    kind: ConfigMap\n    name: {owner}\n    uid: {uid}"
        ));
    }
    let refs = if owners.is_empty() {
        String::new()
    } else {
        format!("\n  ownerReferences:{refs}")
    };
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {ns}{refs}\ndata:\n  k: v\n")
}

fn uid(c: &Cluster, ns: &str, name: &str) -> String {
    c.kubectl(&[
        "get",
        "cm",
        name,
        "-n",
        ns,
        "-o",
        "jsonpath={.metadata.uid}",
    ])
}

#[test]
fn configmaps_follow_their_owner_references() {
    let c = Cluster::start_all(Backend::Sqlite, &["--disable-scheduler"]);
    let create = |yaml: String| {
        c.kubectl_in(&["create", "-f", "-"], Some(&yaml));
    };
    let exists = |ns: &str, name: &str| {
        !c.kubectl(&[
            "get",
            "cm",
            name,
            "-n",
            ns,
            "--ignore-not-found",
            "-o",
            "name",
        ])
        .trim()
        .is_empty()
    };

    // A custom resource owned by a ConfigMap: its CRD appears after the collector started, so it is
    // followed from the next re-discovery (every 30 s, as upstream).
    c.kubectl_in(&["apply", "-f", "-"], Some(CRD));
    c.kubectl(&[
        "wait",
        "--for=condition=Established",
        "crd/widgets.example.com",
        "--timeout=30s",
    ]);
    create(configmap("holder", "default", &[]));
    let holder = uid(&c, "default", "holder");
    c.kubectl_in(
        &["create", "-f", "-"],
        Some(&format!(
            "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\n  ownerReferences:\n  - apiVersion: v1\n    kind: ConfigMap\n    name: holder\n    uid: {holder}\n"
        )),
    );
    c.kubectl(&["delete", "cm", "holder"]);

    // One owner: the dependent goes with it.
    create(configmap("owner", "default", &[]));
    let owner_uid = uid(&c, "default", "owner");
    create(configmap("dep", "default", &[("owner", &owner_uid)]));
    // Two owners: deleting one leaves the dependent with the other's reference only.
    create(configmap("a", "default", &[]));
    create(configmap("b", "default", &[]));
    let (a, b) = (uid(&c, "default", "a"), uid(&c, "default", "b"));
    create(configmap("shared", "default", &[("a", &a), ("b", &b)]));
    // A reference to a uid that never existed: verified absent and collected.
    create(configmap(
        "dangling",
        "default",
        &[("never", "00000000-0000-0000-0000-00000000beef")],
    ));
    // A reference to an owner that lives in another namespace: absent here, so collected, and an
    // OwnerRefInvalidNamespace event names it.
    c.kubectl(&["create", "namespace", "other"]);
    create(configmap("elsewhere", "other", &[("owner", &owner_uid)]));

    // A cluster-scoped object naming a namespaced owner: reported, never collected.
    c.kubectl_in(
        &["create", "-f", "-"],
        Some(&format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: owned\n  ownerReferences:\n  - apiVersion: v1\n    kind: ConfigMap\n    name: b\n    uid: {b}\nrules: []\n"
        )),
    );

    wait_until(
        Duration::from_secs(20),
        "the dangling dependent to go",
        || !exists("default", "dangling"),
    );
    wait_until(
        Duration::from_secs(20),
        "the cross-namespace dependent to go",
        || !exists("other", "elsewhere"),
    );
    wait_until(
        Duration::from_secs(20),
        "the OwnerRefInvalidNamespace event",
        || {
            c.kubectl(&[
            "get",
            "events",
            "-n",
            "other",
            "--field-selector",
            "reason=OwnerRefInvalidNamespace",
            "-o",
            "jsonpath={.items[*].message}",
        ])
        .contains(&format!(
            "ownerRef [v1/ConfigMap, namespace: other, name: owner, uid: {owner_uid}] does not exist in namespace \"other\""
        ))
        },
    );
    wait_until(
        Duration::from_secs(20),
        "the cluster-scoped dependent's event",
        || {
            c.kubectl(&[
            "get",
            "events",
            "-n",
            "default",
            "--field-selector",
            "reason=OwnerRefInvalidNamespace,involvedObject.kind=ClusterRole",
            "-o",
            "jsonpath={.items[*].message}",
        ])
        .contains(&format!(
            "ownerRef [v1/ConfigMap, namespace: , name: b, uid: {b}] does not exist in namespace \"\""
        ))
        },
    );
    assert_eq!(
        c.kubectl(&["get", "clusterrole", "owned", "-o", "name"])
            .trim(),
        "clusterrole.rbac.authorization.k8s.io/owned"
    );
    assert!(
        exists("default", "dep"),
        "a dependent of a live owner was deleted"
    );
    assert!(exists("default", "shared"));

    c.kubectl(&["delete", "cm", "owner"]);
    wait_until(Duration::from_secs(20), "the dependent to go", || {
        !exists("default", "dep")
    });

    c.kubectl(&["delete", "cm", "a"]);
    wait_until(Duration::from_secs(20), "the dead reference to go", || {
        c.kubectl(&[
            "get",
            "cm",
            "shared",
            "-o",
            "jsonpath={.metadata.ownerReferences[*].uid}",
        ]) == b
    });
    assert!(exists("default", "shared"));
    assert!(exists("default", "b"));

    wait_until(Duration::from_secs(45), "the custom resource to go", || {
        c.kubectl(&["get", "widgets", "--ignore-not-found", "-o", "name"])
            .trim()
            .is_empty()
    });
}

const CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
"#;
