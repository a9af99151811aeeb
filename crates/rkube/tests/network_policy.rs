//! NetworkPolicy enforcement on `rkube server`'s local node (`proxy/src/networkpolicy`), beside the
//! proxy in nftables and in iptables mode: a policy denies, then allows, as upstream CNIs do. The
//! node is real (`support/real_node.rs`): containerd, the pods, their bridge and the policy table
//! all live in a network namespace the test creates.

#[path = "support/real_node.rs"]
mod real_node;
mod support;

use std::time::Duration;

use real_node::{condition, wait_for, RealNode, NODE};
use serde_json::{json, Value};

/// nginx labelled app=server, with a readiness probe: the kubelet's probes come from the node,
/// which policies never block.
const SERVER: &str = "apiVersion: v1
kind: Pod
metadata: {name: server, labels: {app: server}}
spec:
  containers:
  - name: nginx
    image: nginx
    ports: [{name: http, containerPort: 80}]
    readinessProbe:
      httpGet: {path: /, port: 80}
      periodSeconds: 1
";

/// Ingress to the server only from pods labelled access=true (named port `http`).
const POLICY: &str = "apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: server-access}
spec:
  podSelector: {matchLabels: {app: server}}
  ingress:
  - from: [{podSelector: {matchLabels: {access: 'true'}}}]
    ports: [{port: http}]
";

/// The same, plus every pod of namespaces labelled team=trusted.
const POLICY_WITH_NAMESPACE: &str = "apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: server-access}
spec:
  podSelector: {matchLabels: {app: server}}
  ingress:
  - from:
    - podSelector: {matchLabels: {access: 'true'}}
    - namespaceSelector: {matchLabels: {team: trusted}}
    ports: [{port: http}]
";

/// A busybox pod in `ns` with `labels` that runs `script` once; whether it succeeded.
fn run_client(node: &RealNode, ns: &str, name: &str, labels: Value, script: &str) -> bool {
    run_client_on(node, None, ns, name, labels, script)
}

/// [`run_client`] on node `on` (None: wherever the scheduler puts it).
fn run_client_on(
    node: &RealNode,
    on: Option<&str>,
    ns: &str,
    name: &str,
    labels: Value,
    script: &str,
) -> bool {
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {"restartPolicy": "Never", "containers": [{
            "name": "c", "image": "busybox", "command": ["sh", "-c", script]}]},
    });
    if let Some(on) = on {
        pod["spec"]["nodeName"] = json!(on);
    }
    node.apply(&pod.to_string());
    let phase = wait_for(
        &format!("pod {ns}/{name} to end"),
        Duration::from_secs(120),
        || {
            let out = node.kubectl(&[
                "get",
                "pod",
                "-n",
                ns,
                name,
                "-o",
                "jsonpath={.status.phase}",
            ]);
            matches!(out.as_str(), "Succeeded" | "Failed").then_some(out)
        },
    );
    phase == "Succeeded"
}

/// Succeeds once the server answers (within 30 tries, 3 s each; `timeout`, not wget's `-T`,
/// which crashes Debian's static busybox).
fn until_reached(ip: &str) -> String {
    format!(
        "for i in $(seq 1 30); do timeout 3 wget -qO- http://{ip}/ | grep -q 'Welcome to nginx' && exit 0; sleep 1; done; exit 1"
    )
}

/// Succeeds once the server no longer answers (the policy's sync), within 30 tries.
fn until_blocked(ip: &str) -> String {
    format!(
        "for i in $(seq 1 30); do timeout 3 wget -qO- http://{ip}/ >/dev/null 2>&1 || exit 0; sleep 1; done; exit 1"
    )
}

/// Succeeds when none of 3 tries gets through (a client the policy keeps out).
fn never_reached(ip: &str) -> String {
    format!(
        "for i in 1 2 3; do timeout 3 wget -qO- http://{ip}/ >/dev/null 2>&1 && exit 1; done; exit 0"
    )
}

fn policy_denies_then_allows(mode: &str) {
    let mut node = RealNode::start_with(&["nginx", "busybox"], &["--proxy-mode", mode]);
    node.apply(SERVER);
    let server = node.wait_pod("server", "Ready", Duration::from_secs(120), |p| {
        condition(p, "Ready") == "True"
    });
    let ip = server["status"]["podIP"].as_str().unwrap().to_string();
    let none = json!({});
    let access = json!({"access": "true"});

    assert!(
        run_client(
            &node,
            "default",
            "before",
            none.clone(),
            &until_reached(&ip)
        ),
        "{mode}: no policy, yet the server is unreachable"
    );

    node.apply(POLICY);
    assert!(
        run_client(
            &node,
            "default",
            "denied",
            none.clone(),
            &until_blocked(&ip)
        ),
        "{mode}: the policy did not keep an unlabelled client out"
    );
    assert!(
        run_client(
            &node,
            "default",
            "allowed",
            access.clone(),
            &until_reached(&ip)
        ),
        "{mode}: a client labelled access=true is kept out"
    );

    // A namespaceSelector peer admits the pods of a labelled namespace, not those of others.
    node.apply(
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: trusted, labels: {team: trusted}}\n---\n\
         apiVersion: v1\nkind: Namespace\nmetadata: {name: untrusted}\n",
    );
    wait_for(
        "the default service accounts",
        Duration::from_secs(60),
        || {
            ["trusted", "untrusted"]
                .iter()
                .all(|ns| {
                    node.cluster
                        .kubectl_output(&["get", "serviceaccount", "default", "-n", ns], None)
                        .status
                        .success()
                })
                .then_some(())
        },
    );
    node.apply(POLICY_WITH_NAMESPACE);
    assert!(
        run_client(
            &node,
            "trusted",
            "from-ns",
            none.clone(),
            &until_reached(&ip)
        ),
        "{mode}: a pod of a namespace the policy selects is kept out"
    );
    assert!(
        run_client(
            &node,
            "untrusted",
            "other-ns",
            none.clone(),
            &never_reached(&ip)
        ),
        "{mode}: a pod of a namespace the policy does not select got through"
    );

    // The kubelet's probes come from the node: the server stayed Ready throughout.
    assert_eq!(
        condition(&node.pod("server").unwrap(), "Ready"),
        "True",
        "{mode}: probes from the node were blocked"
    );

    node.kubectl(&["delete", "networkpolicy", "server-access"]);
    assert!(
        run_client(&node, "default", "after", none, &until_reached(&ip)),
        "{mode}: the policy is gone, yet the unlabelled client is kept out"
    );
    node.cleanup();
}

#[test]
fn policy_denies_then_allows_nftables() {
    policy_denies_then_allows("nftables");
}

#[test]
fn policy_denies_then_allows_iptables() {
    policy_denies_then_allows("iptables");
}

/// Egress of pods labelled access=true: anywhere but the server (an ipBlock with an exception).
fn egress_policy(server_ip: &str) -> String {
    format!(
        "apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {{name: no-server}}
spec:
  podSelector: {{matchLabels: {{access: 'true'}}}}
  policyTypes: [Egress]
  egress:
  - to: [{{ipBlock: {{cidr: 0.0.0.0/0, except: ['{server_ip}/32']}}}}]
"
    )
}

/// Two nodes (`--nodes 2`): the server on the second, clients on the first. The server's node
/// enforces its ingress rules against a peer on another node; the client's node enforces the
/// client's egress rules (an ipBlock with an exception).
fn policy_across_nodes(mode: &str) {
    let mut node = RealNode::start_nodes(2, &["nginx", "busybox"], &["--proxy-mode", mode]);
    let other = format!("{NODE}-1");
    let mut server: Value = serde_yaml_ng::from_str(SERVER).unwrap();
    server["spec"]["nodeName"] = json!(other);
    node.apply(&server.to_string());
    let server = node.wait_pod("server", "Ready", Duration::from_secs(180), |p| {
        condition(p, "Ready") == "True"
    });
    let ip = server["status"]["podIP"].as_str().unwrap().to_string();
    let (none, access) = (json!({}), json!({"access": "true"}));
    let here = Some(NODE);

    assert!(
        run_client_on(
            &node,
            here,
            "default",
            "before",
            none.clone(),
            &until_reached(&ip)
        ),
        "{mode}: no policy, yet the server is unreachable from {NODE}"
    );
    node.apply(POLICY);
    assert!(
        run_client_on(
            &node,
            here,
            "default",
            "denied",
            none.clone(),
            &until_blocked(&ip)
        ),
        "{mode}: {other} let an unlabelled client of {NODE} in"
    );
    assert!(
        run_client_on(
            &node,
            here,
            "default",
            "allowed",
            access.clone(),
            &until_reached(&ip)
        ),
        "{mode}: {other} kept out a labelled client of {NODE}"
    );
    node.apply(&egress_policy(&ip));
    assert!(
        run_client_on(
            &node,
            here,
            "default",
            "egress",
            access.clone(),
            &until_blocked(&ip)
        ),
        "{mode}: {NODE} let a client out to an address its egress rules except"
    );
    node.kubectl(&["delete", "networkpolicy", "server-access", "no-server"]);
    assert!(
        run_client_on(&node, here, "default", "after", access, &until_reached(&ip)),
        "{mode}: the policies are gone, yet the client is kept out"
    );
    node.cleanup();
}

#[test]
fn policy_across_nodes_nftables() {
    policy_across_nodes("nftables");
}

#[test]
fn policy_across_nodes_iptables() {
    policy_across_nodes("iptables");
}
