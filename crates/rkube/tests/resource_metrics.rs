//! Resource metrics: `metrics.k8s.io/v1beta1` served by rkube itself, `kubectl top` over it, and
//! the kubelet's `/stats/summary` and `/metrics/resource` behind it.
//!
//! - Simulated nodes: the pods' `sim.rkube.io/cpu-usage`/`memory-usage` annotations show in `kubectl
//!   top pods` (split over containers with `--containers`, filtered by label and namespace), their
//!   sums in `kubectl top nodes`; the APIService is Available, the Table and the raw objects are as
//!   metrics-server's, and the `view` role carries the metrics reader's rules.
//! - A real node (named `real_node_*`, so `.config/nextest.toml` runs it in the real-node group): a
//!   pod spinning a shell loop shows nonzero CPU in `kubectl top pods` (scraped every 2 s here) and
//!   in the kubelet's summary.

#[path = "support/real_node.rs"]
mod real_node;
mod support;

use std::time::Duration;

use real_node::{wait_for, RealNode, NODE};
use serde_json::Value;
use support::{Backend, Cluster};

const SIM_PODS: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  name: busy
  annotations: {sim.rkube.io/cpu-usage: 250m, sim.rkube.io/memory-usage: 64Mi}
spec:
  containers:
  - {name: a, image: busybox}
  - {name: b, image: busybox}
---
apiVersion: v1
kind: Pod
metadata: {name: idle}
spec:
  containers: [{name: a, image: busybox}]
---
apiVersion: v1
kind: Namespace
metadata: {name: team}
---
apiVersion: v1
kind: Pod
metadata:
  name: other
  namespace: team
  labels: {app: x}
  annotations: {sim.rkube.io/cpu-usage: "1", sim.rkube.io/memory-usage: 128Mi}
spec:
  containers: [{name: a, image: busybox}]
"#;

/// The rows of kubectl's table output (header dropped), split on whitespace.
fn rows(out: &str) -> Vec<Vec<String>> {
    out.lines()
        .skip(1)
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect()
}

fn milli(cpu: &str) -> u64 {
    cpu.strip_suffix('m')
        .map(|m| m.parse().unwrap())
        .unwrap_or_else(|| cpu.parse::<u64>().unwrap() * 1000)
}

fn mebi(mem: &str) -> u64 {
    mem.strip_suffix("Mi").unwrap().parse().unwrap()
}

#[test]
fn simulated_nodes_usage_in_kubectl_top() {
    let c = Cluster::start_all(Backend::Sqlite, &["--sim-nodes", "2"]);
    c.kubectl_in(&["apply", "-f", "-"], Some(SIM_PODS));
    wait_for("the pods to run", Duration::from_secs(60), || {
        let out = c.kubectl(&[
            "get",
            "pods",
            "-A",
            "-o",
            "jsonpath={range .items[*]}{.status.phase} {end}",
        ]);
        (out.split_whitespace().filter(|p| *p == "Running").count() == 3).then_some(())
    });

    // Pods with metrics (all Running pods on simulated nodes; `idle` uses nothing).
    let top = c.kubectl(&["top", "pods"]);
    let r = rows(&top);
    assert_eq!(r.len(), 2, "{top}");
    assert_eq!(r[0][..3], ["busy", "250m", "64Mi"], "{top}");
    assert_eq!(r[1][..3], ["idle", "0m", "0Mi"], "{top}");
    let containers = c.kubectl(&["top", "pod", "busy", "--containers"]);
    let r = rows(&containers);
    assert_eq!(r[0][..4], ["busy", "a", "125m", "32Mi"], "{containers}");
    assert_eq!(r[1][..4], ["busy", "b", "125m", "32Mi"], "{containers}");
    let labelled = c.kubectl(&["top", "pods", "-A", "-l", "app=x"]);
    let r = rows(&labelled);
    assert_eq!(r.len(), 1, "{labelled}");
    assert_eq!(r[0][..4], ["team", "other", "1000m", "128Mi"], "{labelled}");

    // Nodes: the sum of their pods.
    let nodes = c.kubectl(&["top", "nodes"]);
    let r = rows(&nodes);
    assert_eq!(r.len(), 2, "{nodes}");
    let cpu: u64 = r.iter().map(|row| milli(&row[1])).sum();
    let mem: u64 = r.iter().map(|row| mebi(&row[3])).sum();
    assert_eq!((cpu, mem), (1250, 192), "{nodes}");

    // The objects as metrics-server writes them.
    let raw: Value = serde_json::from_str(&c.kubectl(&[
        "get",
        "--raw",
        "/apis/metrics.k8s.io/v1beta1/namespaces/team/pods/other",
    ]))
    .unwrap();
    assert_eq!(raw["kind"], "PodMetrics");
    assert_eq!(raw["window"], "15s");
    assert_eq!(raw["metadata"]["labels"]["app"], "x");
    assert_eq!(raw["containers"][0]["usage"]["cpu"], "1");
    assert_eq!(raw["containers"][0]["usage"]["memory"], "128Mi");
    let err = c.kubectl_fails(
        &["get", "--raw", "/apis/metrics.k8s.io/v1beta1/nodes/nope"],
        None,
    );
    assert!(
        err.contains("NotFound") || err.contains("not found"),
        "{err}"
    );
    // kubectl get prints metrics-server's Table.
    let table = c.kubectl(&["get", "pods.metrics.k8s.io", "busy"]);
    assert!(table.starts_with("NAME"), "{table}");
    assert_eq!(rows(&table)[0], ["busy", "250m", "64Mi", "15s"], "{table}");

    // Discovery, the APIService, RBAC.
    let available = c.kubectl(&[
        "get",
        "apiservice",
        "v1beta1.metrics.k8s.io",
        "-o",
        "jsonpath={.status.conditions[?(@.type==\"Available\")].status}",
    ]);
    assert_eq!(available, "True");
    let resources = c.kubectl(&["api-resources", "--api-group", "metrics.k8s.io"]);
    assert!(
        resources.contains("NodeMetrics") && resources.contains("PodMetrics"),
        "{resources}"
    );
    wait_for(
        "the view role to aggregate the metrics reader",
        Duration::from_secs(20),
        || {
            let view = c.kubectl(&["get", "clusterrole", "view", "-o", "json"]);
            view.contains("metrics.k8s.io").then_some(())
        },
    );
}

const BUSY_POD: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: spin}
spec:
  containers:
  - name: spin
    image: busybox
    command: [sh, -c, "while :; do :; done"]
"#;

#[test]
fn real_node_busy_pod_shows_cpu() {
    let mut node = RealNode::start_with(&["busybox"], &["--metric-resolution", "2s"]);
    node.apply(BUSY_POD);
    node.wait_pod("spin", "running", Duration::from_secs(60), |p| {
        p["status"]["phase"] == "Running"
    });
    // Two scrapes after the container started give its rate.
    let top = wait_for(
        "kubectl top to show the spinning pod",
        Duration::from_secs(40),
        || {
            let out = node
                .cluster
                .kubectl_output(&["top", "pod", "spin", "--no-headers"], None);
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            let row: Vec<&str> = text.split_whitespace().collect();
            (row.len() >= 3 && row[1].ends_with('m') && milli(row[1]) >= 100).then_some(text)
        },
    );
    assert!(top.starts_with("spin"), "{top}");
    let nodes = node.kubectl(&["top", "node", "--no-headers"]);
    assert!(nodes.starts_with(NODE), "{nodes}");

    // The kubelet's summary through the API server's node proxy.
    let summary: Value = serde_json::from_str(&node.kubectl(&[
        "get",
        "--raw",
        &format!("/api/v1/nodes/{NODE}/proxy/stats/summary"),
    ]))
    .unwrap();
    assert_eq!(summary["node"]["nodeName"], NODE);
    assert!(
        summary["node"]["memory"]["workingSetBytes"]
            .as_u64()
            .unwrap()
            > 0
    );
    assert!(summary["node"]["fs"]["capacityBytes"].as_u64().unwrap() > 0);
    let pod = summary["pods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["podRef"]["name"] == "spin")
        .unwrap_or_else(|| panic!("no spin pod in {summary}"));
    let container = &pod["containers"][0];
    assert_eq!(container["name"], "spin");
    assert!(
        container["cpu"]["usageCoreNanoSeconds"].as_u64().unwrap() > 0,
        "{container}"
    );
    assert!(
        container["cpu"]["usageNanoCores"].as_u64().unwrap() > 100_000_000,
        "{container}"
    );
    assert!(
        container["memory"]["workingSetBytes"].as_u64().unwrap() > 0,
        "{container}"
    );
    assert!(
        pod["cpu"]["usageNanoCores"].as_u64().unwrap() > 100_000_000,
        "{pod}"
    );
    let text = node.kubectl(&[
        "get",
        "--raw",
        &format!("/api/v1/nodes/{NODE}/proxy/metrics/resource"),
    ]);
    assert!(
        text.contains("container_cpu_usage_seconds_total{container=\"spin\",namespace=\"default\",pod=\"spin\"}"),
        "{text}"
    );
    assert!(text.contains("\nresource_scrape_error 0\n"), "{text}");
    node.cleanup();
}
