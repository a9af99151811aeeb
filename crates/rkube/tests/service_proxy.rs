//! `rkube server` runs kube-proxy for its local node: a pod reaches a Deployment through its
//! Service's ClusterIP, in nftables and in iptables mode. The node is real (`support/real_node.rs`):
//! containerd, the pods and the proxy's rules all live in a network namespace the test creates.

#[path = "support/real_node.rs"]
mod real_node;
mod support;

use std::time::Duration;

use real_node::{wait_for, RealNode};
use serde_json::Value;

const WEB: &str = "apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: nginx, image: nginx}]
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{port: 80}]
---
apiVersion: v1
kind: Service
metadata: {name: nobody}
spec:
  selector: {app: nobody}
  ports: [{port: 80}]
";

/// What an in-cluster client does: the Service's address from the kubelet's variables, the
/// service account's CA and token; `/version`, then who the token is (SelfSubjectReview).
const IN_CLUSTER: &str = r#"
import json, os, ssl, sys, time, urllib.request
d = "/var/run/secrets/kubernetes.io/serviceaccount/"
ctx = ssl.create_default_context(cafile=d + "ca.crt")
base = "https://%s:%s" % (os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"])
auth = {"Authorization": "Bearer " + open(d + "token").read(), "Content-Type": "application/json"}
review = json.dumps({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}).encode()
for attempt in range(30):
    try:
        print(urllib.request.urlopen(urllib.request.Request(base + "/version", headers=auth), context=ctx, timeout=3).read().decode())
        who = urllib.request.Request(base + "/apis/authentication.k8s.io/v1/selfsubjectreviews", data=review, headers=auth)
        print(json.load(urllib.request.urlopen(who, context=ctx, timeout=3))["status"]["userInfo"]["username"])
        sys.exit(0)
    except Exception as e:
        print("attempt", attempt, e, flush=True)
        time.sleep(1)
sys.exit(1)
"#;

/// A busybox pod that runs `script` once; its log once it ended, and whether it succeeded.
fn run_client(node: &RealNode, name: &str, script: &str) -> (bool, String) {
    run_pod(node, name, &["sh", "-c", script], "busybox")
}

/// A pod of `image` that runs `command` once; its log once it ended, and whether it succeeded.
fn run_pod(node: &RealNode, name: &str, command: &[&str], image: &str) -> (bool, String) {
    let pod = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"restartPolicy": "Never", "containers": [{
            "name": "c", "image": image, "command": command}]},
    });
    node.apply(&pod.to_string());
    let done = node.wait_pod(name, "ended", Duration::from_secs(120), |p| {
        matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed"))
    });
    (
        done["status"]["phase"] == "Succeeded",
        node.log(&done, "c", 0),
    )
}

fn cluster_ip(node: &RealNode, service: &str) -> String {
    node.kubectl(&[
        "get",
        "service",
        service,
        "-o",
        "jsonpath={.spec.clusterIP}",
    ])
}

fn service_reaches_its_pods(mode: &str) {
    let mut node = RealNode::start_with(&["nginx", "busybox", "python"], &["--proxy-mode", mode]);
    node.apply(WEB);
    wait_for("web's two endpoints", Duration::from_secs(120), || {
        let out = node.kubectl(&[
            "get",
            "endpointslices",
            "-l",
            "kubernetes.io/service-name=web",
            "-o",
            "json",
        ]);
        let slices: Value = serde_json::from_str(&out).ok()?;
        let ready = slices["items"]
            .as_array()?
            .iter()
            .flat_map(|s| s["endpoints"].as_array().into_iter().flatten())
            .filter(|e| e["conditions"]["ready"] == true)
            .count();
        (ready == 2).then_some(())
    });
    let web = cluster_ip(&node, "web");
    // The proxy syncs within its one-second minimum period after the endpoints change; the
    // client retries for up to 30 s rather than racing it. (`timeout`, not wget's `-T`, which
    // crashes Debian's static busybox.)
    let (ok, log) = run_client(
        &node,
        "client",
        &format!(
            "for i in $(seq 1 30); do timeout 2 wget -qO- http://{web}/ && exit 0; sleep 1; done; exit 1"
        ),
    );
    assert!(
        ok && log.contains("Welcome to nginx!"),
        "{mode}: through {web}: {log}"
    );

    // A Service without endpoints is rejected at once, not left to time out (upstream's reject
    // rules): wget fails well within the 10 s it is given.
    let nobody = cluster_ip(&node, "nobody");
    let (ok, log) = run_client(
        &node,
        "refused",
        &format!(
            "start=$(date +%s); timeout 10 wget -qO- http://{nobody}/; echo \"rc=$? took=$(( $(date +%s) - start ))\""
        ),
    );
    assert!(ok, "{log}");
    // The log interleaves the container's stdout and stderr in either order (wget's message may
    // follow the echo), so read the digits right after `took=`.
    let took: u64 = log
        .rsplit("took=")
        .next()
        .map(|t| {
            t.chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>()
        })
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("{log}"));
    assert!(!log.contains("rc=0"), "{mode}: {nobody} answered: {log}");
    assert!(took < 5, "{mode}: {nobody} was not refused at once: {log}");

    // In-cluster clients reach the API server through the `kubernetes` Service: its endpoint is
    // the server's address inside the node's namespace (--node-network-cidr's first), and a pod
    // verifies the server with its service account's CA and authenticates with its token, as
    // client libraries' in-cluster configs do (python: busybox's TLS has only suites rustls does
    // not implement).
    let endpoint = node.kubectl(&[
        "get",
        "endpoints",
        "kubernetes",
        "-o",
        "jsonpath={.subsets[0].addresses[0].ip}",
    ]);
    assert_eq!(endpoint, "172.31.0.1", "{mode}: the kubernetes endpoints");
    let (ok, log) = run_pod(
        &node,
        "in-cluster",
        &["python3", "-c", IN_CLUSTER],
        "python",
    );
    assert!(
        ok && log.contains("\"gitVersion\"")
            && log.contains("system:serviceaccount:default:default"),
        "{mode}: the API server from a pod: {log}"
    );
    node.cleanup();
}

#[test]
fn service_reaches_its_pods_nftables() {
    service_reaches_its_pods("nftables");
}

#[test]
fn service_reaches_its_pods_iptables() {
    service_reaches_its_pods("iptables");
}
