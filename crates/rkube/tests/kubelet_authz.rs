//! The kubelet's HTTPS server authenticates and authorizes as upstream's, on `rkube server`'s real
//! node (Webhook authorization, token webhook, no anonymous access): a request without credentials
//! is 401, so is a token the API server does not know; a user's bearer token is reviewed by the API
//! server (TokenReview) and the request authorized by SubjectAccessReview against `nodes/<sub>` of
//! the node: 403 with upstream's text without the right, 200 with a ClusterRole granting
//! `nodes/proxy` (and `nodes/stats` for `/stats`); the API server's own kubelet client certificate
//! still reaches logs and exec. Needs what `kubelet.rs` needs (root, containerd, runc, CNI plugins,
//! `scripts/images.sh`).

#[path = "support/real_node.rs"]
mod real_node;
mod support;

use std::process::Command;
use std::time::Duration;

use real_node::{RealNode, NODE};

/// `curl` to the kubelet at `port`: (status, body).
fn kubelet_get(port: &str, path: &str, token: Option<&str>) -> (u16, String) {
    let mut cmd = Command::new("curl");
    cmd.args(["-sk", "-m", "20", "-w", "\n%{http_code}"]);
    if let Some(t) = token {
        cmd.args(["-H", &format!("Authorization: Bearer {t}")]);
    }
    let out = cmd
        .arg(format!("https://127.0.0.1:{port}{path}"))
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').expect("curl output");
    (code.trim().parse().expect("status"), body.to_string())
}

#[test]
fn the_kubelet_authorizes_requests_through_the_api_server() {
    let tokens = support::token_file(
        "alice-token,alice,u1\nbob-token,bob,u2\ncarol-token,carol,u3,\"team-c\"\n",
    );
    let token_file = tokens.path().display().to_string();
    let node = RealNode::start_with(&["busybox"], &["--token-auth-file", &token_file]);
    let port = node.kubectl(&[
        "get",
        "node",
        NODE,
        "-o",
        "jsonpath={.status.daemonEndpoints.kubeletEndpoint.Port}",
    ]);
    assert!(!port.is_empty());

    // No credentials, or a token nobody has: 401 (anonymous access is off, as kubeadm runs it).
    assert_eq!(
        kubelet_get(&port, "/pods", None),
        (401, "Unauthorized".to_string())
    );
    assert_eq!(kubelet_get(&port, "/healthz", None).0, 401);
    assert_eq!(kubelet_get(&port, "/pods", Some("nobody")).0, 401);

    // A known user without rights on the node: 403, upstream's text.
    let (code, body) = kubelet_get(&port, "/pods", Some("alice-token"));
    assert_eq!(code, 403, "{body}");
    assert_eq!(
        body,
        "Forbidden (user=alice, verb=get, resource=nodes, subresource(s)=[pods proxy])\n"
    );
    let (code, body) = kubelet_get(&port, "/stats/summary", Some("alice-token"));
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("subresource(s)=[stats]"), "{body}");

    // bob may proxy to nodes and read their stats; carol's group only reads stats.
    node.apply(
        "apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: kubelet-reader}
rules:
- {apiGroups: [''], resources: [nodes/proxy, nodes/stats], verbs: [get]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: kubelet-stats}
rules:
- {apiGroups: [''], resources: [nodes/stats], verbs: [get]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: bob-reads-kubelets}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: kubelet-reader}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: bob}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: team-c-reads-stats}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: kubelet-stats}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: Group, name: team-c}]
",
    );
    let (code, body) = kubelet_get(&port, "/pods", Some("bob-token"));
    assert_eq!(code, 200, "{body}");
    let list: serde_json::Value = serde_json::from_str(&body).expect("a PodList");
    assert_eq!(list["kind"], "PodList");
    // Authorized for stats: the node's Summary.
    for token in ["bob-token", "carol-token"] {
        let (code, body) = kubelet_get(&port, "/stats/summary", Some(token));
        assert_eq!(code, 200, "{token}: {body}");
        let summary: serde_json::Value = serde_json::from_str(&body).expect("a Summary");
        assert!(summary["node"]["nodeName"].is_string(), "{body}");
    }
    let (code, body) = kubelet_get(&port, "/pods", Some("carol-token"));
    assert_eq!(code, 403, "{body}");
    // `create` is another verb: bob's `get` does not allow exec by POST.
    let out = Command::new("curl")
        .args(["-sk", "-m", "20", "-o", "/dev/null", "-w", "%{http_code}"])
        .args(["-X", "POST", "-H", "Authorization: Bearer bob-token"])
        .arg(format!(
            "https://127.0.0.1:{port}/exec/default/p/c?command=true"
        ))
        .output()
        .expect("curl");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "403");

    // The API server's own client certificate still gets through: logs and exec.
    node.apply(
        "apiVersion: v1
kind: Pod
metadata: {name: talker}
spec:
  containers:
  - {name: c, image: busybox, command: [sh, -c, 'echo hello from talker; sleep 3600']}
",
    );
    node.wait_pod("talker", "Running", Duration::from_secs(120), |p| {
        p["status"]["phase"] == "Running"
    });
    real_node::wait_for("the pod's log", Duration::from_secs(30), || {
        let out = node.cluster.kubectl_output(&["logs", "talker"], None);
        String::from_utf8_lossy(&out.stdout)
            .contains("hello from talker")
            .then_some(())
    });
    let out = node.kubectl(&["exec", "talker", "--", "echo", "exec works"]);
    assert_eq!(out.trim(), "exec works");
}
