//! The Node authorizer through kubectl, on one API server (`Node,RBAC`, the default) with static
//! tokens for two kubelets (`system:node:<name>` in `system:nodes`): a node reads the secrets and
//! config maps of the pods bound to it and no others, loses them when the pod goes, lists pods
//! only by its own `spec.nodeName`, and reads only its own Node.

mod support;

use std::time::{Duration, Instant};

use support::{Backend, Cluster};

struct Fixture {
    c: Cluster,
    _tokens: tempfile::NamedTempFile,
}

impl Fixture {
    fn start() -> Fixture {
        let tokens = support::token_file(
            "node-a-token,system:node:a,uid-a,\"system:nodes\"\n\
             node-b-token,system:node:b,uid-b,\"system:nodes\"\n",
        );
        let c = Cluster::start_with(
            Backend::Sqlite,
            &["--token-auth-file", tokens.path().to_str().unwrap()],
        );
        Fixture { c, _tokens: tokens }
    }

    /// kubectl as the user of `token`.
    fn as_node(&self, token: &str, args: &[&str]) -> std::process::Output {
        self.c.kubectl_as(token, args, None)
    }

    fn allowed(&self, token: &str, args: &[&str]) -> bool {
        self.as_node(token, args).status.success()
    }

    /// The error of a refused request.
    fn refusal(&self, token: &str, args: &[&str]) -> String {
        let out = self.as_node(token, args);
        assert!(!out.status.success(), "kubectl {args:?} should have failed");
        String::from_utf8_lossy(&out.stderr).trim().to_string()
    }
}

/// Polls `done` until it holds (30 s at most): the graph follows the pods through the watch cache.
fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn pod_yaml(name: &str, node: &str, secret: &str, config_map: &str) -> String {
    format!(
        "apiVersion: v1
kind: Pod
metadata: {{name: {name}}}
spec:
  nodeName: {node}
  containers:
  - name: c
    image: busybox
    envFrom: [{{configMapRef: {{name: {config_map}}}}}]
  volumes:
  - {{name: s, secret: {{secretName: {secret}}}}}
"
    )
}

#[test]
fn nodes_reach_only_what_their_pods_use() {
    let f = Fixture::start();
    let c = &f.c;
    eventually("the default service account", || {
        c.kubectl_output(&["get", "serviceaccount", "default"], None)
            .status
            .success()
    });
    for (node, secret, cm) in [("a", "secret-a", "cm-a"), ("b", "secret-b", "cm-b")] {
        c.kubectl(&["create", "secret", "generic", secret, "--from-literal=k=v"]);
        c.kubectl(&["create", "configmap", cm, "--from-literal=k=v"]);
        c.kubectl_in(
            &["create", "-f", "-"],
            Some(&pod_yaml(&format!("on-{node}"), node, secret, cm)),
        );
    }

    // Node a reads its pod's secret and config map, also through a single-object watch list.
    eventually("node a reading secret-a", || {
        f.allowed("node-a-token", &["get", "secret", "secret-a"])
    });
    assert!(f.allowed("node-a-token", &["get", "configmap", "cm-a"]));
    assert!(f.allowed(
        "node-a-token",
        &[
            "get",
            "secrets",
            "--field-selector",
            "metadata.name=secret-a"
        ]
    ));
    assert!(f.allowed("node-a-token", &["get", "pod", "on-a"]));
    assert!(f.allowed("node-b-token", &["get", "secret", "secret-b"]));

    // Not node b's.
    assert_eq!(
        f.refusal("node-a-token", &["get", "secret", "secret-b"]),
        "Error from server (Forbidden): secrets \"secret-b\" is forbidden: User \"system:node:a\" \
         cannot get resource \"secrets\" in API group \"\" in the namespace \"default\": no \
         relationship found between node 'a' and this object"
    );
    assert!(!f.allowed("node-a-token", &["get", "configmap", "cm-b"]));
    assert!(!f.allowed("node-a-token", &["get", "pod", "on-b"]));
    let err = f.refusal("node-a-token", &["get", "secrets"]);
    assert!(err.contains("No Object name found"), "{err}");

    // Pods: only its own, by field selector.
    let out = f.as_node(
        "node-a-token",
        &[
            "get",
            "pods",
            "-A",
            "--field-selector",
            "spec.nodeName=a",
            "-o",
            "name",
        ],
    );
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "pod/on-a");
    let err = f.refusal("node-a-token", &["get", "pods", "-A"]);
    assert!(
        err.contains("can only list/watch pods with spec.nodeName field selector"),
        "{err}"
    );

    // Nodes: only its own (the read comes before NodeRestriction would see a write).
    for n in ["a", "b"] {
        c.kubectl_in(
            &["create", "-f", "-"],
            Some(&format!(
                "apiVersion: v1\nkind: Node\nmetadata: {{name: {n}}}\n"
            )),
        );
    }
    assert!(f.allowed("node-a-token", &["get", "node", "a"]));
    let err = f.refusal("node-a-token", &["get", "node", "b"]);
    assert!(
        err.ends_with("node 'a' cannot read 'b', only its own Node object"),
        "{err}"
    );

    // A node keeps no access to what its deleted pod used.
    c.kubectl(&[
        "delete",
        "pod",
        "on-a",
        "--wait=false",
        "--grace-period=0",
        "--force",
    ]);
    eventually("node a losing secret-a", || {
        !f.allowed("node-a-token", &["get", "secret", "secret-a"])
    });
    assert!(!f.allowed("node-a-token", &["get", "configmap", "cm-a"]));
    assert!(f.allowed("node-b-token", &["get", "secret", "secret-b"]));
}
