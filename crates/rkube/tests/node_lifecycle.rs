//! The node lifecycle and taint eviction controllers with simulated nodes: a node whose heartbeats
//! stop is marked Unknown, tainted unreachable (NoSchedule and NoExecute), its pods marked not Ready,
//! the pods that tolerate the taint for 2 s evicted after that while those that tolerate it forever
//! stay; once it heartbeats again the taints go. When every node stops, no node is tainted NoExecute
//! (upstream's master disruption mode: the control plane, not the nodes, is suspect).

mod support;

use std::time::{Duration, Instant};

use support::{Backend, Cluster};

const FAST: &[&str] = &[
    "--sim-lease-renew-interval",
    "1s",
    "--node-monitor-period",
    "1s",
    "--node-monitor-grace-period",
    "4s",
    "--sim-zones",
    "1",
];

fn wait_until(c: &Cluster, what: &str, args: &[&str], done: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = c.kubectl(args);
        if done(&out) {
            return out;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; last: {out}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn pod(name: &str, node: &str, tolerations: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: {name}}}
spec:
  nodeName: {node}
  tolerations: {tolerations}
  containers: [{{name: c, image: app}}]
"#
    )
}

fn taints(c: &Cluster, node: &str) -> String {
    c.kubectl(&[
        "get",
        "node",
        node,
        "-o",
        "jsonpath={range .spec.taints[*]}{.key}:{.effect} {end}",
    ])
}

fn ready(c: &Cluster, node: &str) -> String {
    c.kubectl(&[
        "get",
        "node",
        node,
        "-o",
        "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
    ])
}

#[test]
fn a_silent_node_is_tainted_and_its_pods_evicted_as_they_tolerate() {
    let mut args = vec!["--sim-nodes", "10"];
    args.extend_from_slice(FAST);
    let c = Cluster::start_all(Backend::Sqlite, &args);
    wait_until(&c, "10 nodes", &["get", "nodes", "-o", "name"], |o| {
        o.lines().count() == 10
    });
    let brief = r#"[{key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute, tolerationSeconds: 2}]"#;
    c.kubectl_in(&["apply", "-f", "-"], Some(&pod("brief", "sim-3", brief)));
    c.kubectl_in(
        &["apply", "-f", "-"],
        Some(&pod("steadfast", "sim-3", "[{operator: Exists}]")),
    );
    for p in ["brief", "steadfast"] {
        wait_until(
            &c,
            "pods running",
            &["get", "pod", p, "-o", "jsonpath={.status.phase}"],
            |o| o == "Running",
        );
    }

    c.kubectl(&[
        "annotate",
        "node",
        "sim-3",
        "sim.rkube.io/heartbeat=stopped",
    ]);
    wait_until(
        &c,
        "sim-3 Unknown",
        &[
            "get",
            "node",
            "sim-3",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Ready\")].reason}",
        ],
        |o| o == "NodeStatusUnknown",
    );
    assert_eq!(ready(&c, "sim-3"), "Unknown");
    wait_until(
        &c,
        "the unreachable taints",
        &[
            "get",
            "node",
            "sim-3",
            "-o",
            "jsonpath={.spec.taints[*].key}",
        ],
        |o| o.matches("node.kubernetes.io/unreachable").count() == 2,
    );
    let t = taints(&c, "sim-3");
    assert!(
        t.contains("node.kubernetes.io/unreachable:NoSchedule")
            && t.contains("node.kubernetes.io/unreachable:NoExecute"),
        "{t}"
    );
    assert_eq!(ready(&c, "sim-4"), "True", "other nodes are untouched");
    assert_eq!(taints(&c, "sim-4"), "");
    wait_until(
        &c,
        "pods not Ready",
        &[
            "get",
            "pod",
            "steadfast",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
        ],
        |o| o == "False",
    );

    // The 2 s toleration runs out: the pod is marked and deleted (it stays Terminating: its kubelet is gone).
    let evicted = wait_until(&c, "brief evicted", &["get", "pod", "brief", "-o", "jsonpath={.metadata.deletionTimestamp}|{.status.conditions[?(@.type==\"DisruptionTarget\")].reason}"], |o| !o.starts_with('|'));
    assert!(evicted.ends_with("|DeletionByTaintManager"), "{evicted}");
    assert_eq!(
        c.kubectl(&[
            "get",
            "pod",
            "steadfast",
            "-o",
            "jsonpath={.metadata.deletionTimestamp}"
        ]),
        ""
    );

    // Heartbeats again: Ready, untainted.
    c.kubectl(&["annotate", "node", "sim-3", "sim.rkube.io/heartbeat-"]);
    wait_until(
        &c,
        "sim-3 untainted",
        &["get", "node", "sim-3", "-o", "jsonpath={.spec.taints}"],
        |o| o.is_empty(),
    );
    assert_eq!(ready(&c, "sim-3"), "True");
}

#[test]
fn when_every_node_goes_silent_nothing_is_evicted() {
    let mut args = vec!["--sim-nodes", "3"];
    args.extend_from_slice(FAST);
    let c = Cluster::start_all(Backend::Sqlite, &args);
    wait_until(&c, "3 nodes", &["get", "nodes", "-o", "name"], |o| {
        o.lines().count() == 3
    });
    c.kubectl_in(&["apply", "-f", "-"], Some(&pod("fragile", "sim-1", "[]")));
    wait_until(
        &c,
        "pod running",
        &["get", "pod", "fragile", "-o", "jsonpath={.status.phase}"],
        |o| o == "Running",
    );
    for n in ["sim-0", "sim-1", "sim-2"] {
        c.kubectl(&["annotate", "node", n, "sim.rkube.io/heartbeat=stopped"]);
    }
    for n in ["sim-0", "sim-1", "sim-2"] {
        wait_until(
            &c,
            "Unknown",
            &[
                "get",
                "node",
                n,
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
            ],
            |o| o == "Unknown",
        );
    }
    // Several monitor passes later: NoSchedule taints, but no NoExecute one, and the pod (which
    // tolerates nothing) is still there.
    std::thread::sleep(Duration::from_secs(4));
    for n in ["sim-0", "sim-1", "sim-2"] {
        let t = taints(&c, n);
        assert!(
            t.contains("unreachable:NoSchedule") && !t.contains("NoExecute"),
            "{n}: {t}"
        );
    }
    assert_eq!(
        c.kubectl(&[
            "get",
            "pod",
            "fragile",
            "-o",
            "jsonpath={.metadata.deletionTimestamp}"
        ]),
        ""
    );
}
