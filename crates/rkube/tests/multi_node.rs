//! Two real nodes on one machine (`rkube server --nodes 2`): each kubelet with its containerd in a
//! network namespace of its own, joined by a third that the server makes; the kube-proxy of each
//! node; the cluster DNS on the fabric. Pods on one node reach a Service whose pods are on the other,
//! and a StatefulSet's pods by their DNS names, in nftables and in iptables mode.

#[path = "support/real_node.rs"]
mod real_node;
mod support;

use std::time::Duration;

use real_node::{wait_for, RealNode, NODE};
use serde_json::Value;

/// nginx pods pinned to the second node, a ClusterIP Service over them, and a StatefulSet of two
/// whose pods must land on different nodes, under a headless Service.
fn workloads(other: &str) -> String {
    format!(
        "apiVersion: apps/v1
kind: Deployment
metadata: {{name: web}}
spec:
  replicas: 2
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      nodeSelector: {{kubernetes.io/hostname: {other}}}
      containers: [{{name: nginx, image: nginx}}]
---
apiVersion: v1
kind: Service
metadata: {{name: web}}
spec:
  selector: {{app: web}}
  ports: [{{port: 80}}]
---
apiVersion: v1
kind: Service
metadata: {{name: nginx-sts}}
spec:
  clusterIP: None
  selector: {{app: nginx-sts}}
  ports: [{{port: 80, name: web}}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {{name: nginx-sts}}
spec:
  serviceName: nginx-sts
  replicas: 2
  selector: {{matchLabels: {{app: nginx-sts}}}}
  template:
    metadata: {{labels: {{app: nginx-sts}}}}
    spec:
      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
          - labelSelector: {{matchLabels: {{app: nginx-sts}}}}
            topologyKey: kubernetes.io/hostname
      containers: [{{name: nginx, image: nginx}}]
"
    )
}

/// A busybox pod on `node` that runs `script` once; whether it succeeded, and its log.
fn run_client(node: &RealNode, name: &str, on: &str, script: &str) -> (bool, String) {
    let pod = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"restartPolicy": "Never", "nodeName": on, "containers": [{
            "name": "c", "image": "busybox", "command": ["sh", "-c", script]}]},
    });
    node.apply(&pod.to_string());
    let done = node.wait_pod(name, "ended", Duration::from_secs(180), |p| {
        matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed"))
    });
    // Through the API server and the pod's kubelet (the log is on that node).
    (
        done["status"]["phase"] == "Succeeded",
        node.kubectl(&["logs", name]),
    )
}

fn ready_endpoints(node: &RealNode, service: &str) -> usize {
    let out = node.kubectl(&[
        "get",
        "endpointslices",
        "-l",
        &format!("kubernetes.io/service-name={service}"),
        "-o",
        "json",
    ]);
    let Ok(slices) = serde_json::from_str::<Value>(&out) else {
        return 0;
    };
    slices["items"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|s| s["endpoints"].as_array().into_iter().flatten())
        .filter(|e| e["conditions"]["ready"] == true)
        .count()
}

/// Retries `cmd` for up to 60 s (the proxy syncs within a second of a change, routes follow the
/// Nodes' pod CIDRs within a second); `timeout` rather than wget's `-T`, which crashes Debian's
/// static busybox.
fn retried(cmd: &str) -> String {
    // A subshell: its `exit` ends the retry loop, not the script (`a && b` runs both).
    format!("(for i in $(seq 1 60); do timeout 3 {cmd} && exit 0; sleep 1; done; exit 1)")
}

fn pods_cross_nodes(mode: &str) {
    let mut node = RealNode::start_nodes(
        2,
        &["nginx", "busybox"],
        &["--proxy-mode", mode, "--dns-port", "53"],
    );
    let other = format!("{NODE}-1");
    node.apply(&workloads(&other));
    wait_for("web's two endpoints", Duration::from_secs(180), || {
        (ready_endpoints(&node, "web") == 2).then_some(())
    });
    wait_for("nginx-sts's two pods", Duration::from_secs(180), || {
        (ready_endpoints(&node, "nginx-sts") == 2).then_some(())
    });
    let hosts: Vec<String> = (0..2)
        .map(|i| {
            node.kubectl(&[
                "get",
                "pod",
                &format!("nginx-sts-{i}"),
                "-o",
                "jsonpath={.spec.nodeName}",
            ])
        })
        .collect();
    assert_ne!(hosts[0], hosts[1], "{mode}: anti-affinity: {hosts:?}");

    // Pod to Service across nodes: the client on the first node, web's pods on the second; by the
    // Service's name, so the cluster DNS answers too.
    let (ok, log) = run_client(
        &node,
        "to-service",
        NODE,
        &retried("wget -qO- http://web.default.svc.cluster.local/"),
    );
    assert!(
        ok && log.contains("Welcome to nginx!"),
        "{mode}: web from {NODE}: {log}"
    );

    // The API server's endpoint for pods is its address on the fabric.
    let endpoints = node.kubectl(&[
        "get",
        "endpoints",
        "kubernetes",
        "-o",
        "jsonpath={.subsets[0].addresses[0].ip}",
    ]);
    let objects = node.kubectl(&["get", "endpoints,endpointslices", "-o", "wide"]);
    assert_eq!(
        endpoints, "172.31.0.1",
        "{mode}: the kubernetes endpoints: {objects}"
    );

    // A StatefulSet pod by its stable name (the search path completes it) and the headless
    // Service's name (its pods' addresses), from the second node.
    let (ok, log) = run_client(
        &node,
        "to-sts",
        &other,
        &format!(
            "{} && {}",
            retried("wget -qO- http://nginx-sts-1.nginx-sts/"),
            retried("wget -qO- http://nginx-sts.default.svc.cluster.local/")
        ),
    );
    assert!(
        // Two pages, each with the phrase in its title and heading.
        ok && log.matches("Welcome to nginx!").count() == 4,
        "{mode}: nginx-sts from {other}: {log}"
    );
    // The API server through the `kubernetes` Service from the second node's network (its
    // kube-proxy, the endpoint on the fabric). Not from a busybox pod: busybox's own TLS offers
    // only suites rustls does not implement (CBC), so it cannot talk to the API server at all.
    let other_ns = format!("{}-1", node.netns);
    let url = format!(
        "https://{}/version",
        node.kubectl(&[
            "get",
            "service",
            "kubernetes",
            "-o",
            "jsonpath={.spec.clusterIP}"
        ])
    );
    let version = wait_for(
        "the API server through the kubernetes Service",
        Duration::from_secs(60),
        || {
            let out = std::process::Command::new("ip")
                .args(["netns", "exec", &other_ns, "curl", "-sk", "--max-time", "5"])
                .arg(&url)
                .output()
                .ok()?;
            let body = String::from_utf8_lossy(&out.stdout).into_owned();
            body.contains("\"gitVersion\"").then_some(body)
        },
    );
    assert!(version.contains("1.36"), "{mode}: {version}");
    node.cleanup();
}

#[test]
fn pods_cross_nodes_nftables() {
    pods_cross_nodes("nftables");
}

#[test]
fn pods_cross_nodes_iptables() {
    pods_cross_nodes("iptables");
}

/// The first run the README shows, with kubectl alone: a Deployment of nginx, `kubectl expose`, and
/// `kubectl run` of busybox fetching the Service by its short name (on one node of `--nodes 1`, the
/// closest a test gets to the host's own network).
#[test]
fn kubectl_first_run() {
    let mut node = RealNode::start_nodes(
        1,
        &["nginx", "busybox"],
        &["--proxy-mode", "nftables", "--dns-port", "53"],
    );
    node.kubectl(&[
        "create",
        "deployment",
        "web",
        "--image=nginx",
        "--replicas=3",
    ]);
    node.kubectl(&["expose", "deployment", "web", "--port=80"]);
    wait_for("web's three endpoints", Duration::from_secs(180), || {
        (ready_endpoints(&node, "web") == 3).then_some(())
    });
    // The proxy syncs within its one-second minimum period; wait until its rules name the
    // Service and every endpoint rather than racing it.
    let mut wanted = vec![node.kubectl(&["get", "svc", "web", "-o", "jsonpath={.spec.clusterIP}"])];
    wanted.extend(
        node.kubectl(&[
            "get",
            "pods",
            "-l",
            "app=web",
            "-o",
            "jsonpath={.items[*].status.podIP}",
        ])
        .split_whitespace()
        .map(str::to_string),
    );
    wait_for("the proxy's rules for web", Duration::from_secs(30), || {
        let out = std::process::Command::new("ip")
            .args(["netns", "exec", &node.netns, "nft", "list", "ruleset"])
            .output()
            .ok()?;
        let rules = String::from_utf8_lossy(&out.stdout);
        wanted
            .iter()
            .all(|w| rules.contains(w.as_str()))
            .then_some(())
    });
    // kubectl attaches once the pod runs, and an attach sees only output written after it (as
    // upstream's: a container that is done before kubectl attaches loses its output to the
    // attach), so the client waits a moment before fetching.
    let out = node.cluster.kubectl_output(
        &[
            "run",
            "-i",
            "--rm",
            "c",
            "--image=busybox",
            "--restart=Never",
            "--",
            "sh",
            "-c",
            "sleep 3; wget -qO- web",
        ],
        None,
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("Welcome to nginx!"),
        "kubectl run: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    node.cleanup();
}
