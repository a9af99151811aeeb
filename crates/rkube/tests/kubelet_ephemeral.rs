//! Ephemeral containers on a real node (issue 26 item 3): `kubectl debug --target` starts one in
//! the pod's sandbox sharing the target's PID namespace; its status, logs and exec; one that
//! exits is never restarted. And the kubelet's read API (item 4): `/pods` and `/configz` through
//! the API server's node proxy. One node for all of it.
//!
//! Needs root, containerd, runc, the CNI plugins and `scripts/images.sh`'s busybox (as `kubelet.rs`).

#[path = "support/real_node.rs"]
mod real_node;
mod support;

use std::time::{Duration, Instant};

use real_node::{RealNode, NODE};
use serde_json::Value;

const TIMEOUT: Duration = Duration::from_secs(120);

const POD: &str = "apiVersion: v1
kind: Pod
metadata:
  name: target
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: busybox
    imagePullPolicy: Never
    command: [sleep, '3601']
";

fn ephemeral_status<'a>(pod: &'a Value, name: &str) -> &'a Value {
    pod["status"]["ephemeralContainerStatuses"]
        .as_array()
        .and_then(|a| a.iter().find(|s| s["name"] == name))
        .unwrap_or(&Value::Null)
}

/// Polls `f` until it gives a value; on timeout, fails with the last pod and the events.
fn wait<T>(node: &RealNode, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        if let Some(v) = f() {
            return v;
        }
        if Instant::now() > deadline {
            panic!(
                "{what} not seen in {TIMEOUT:?}: {:?}\nevents:\n{}",
                node.pod("target"),
                node.events()
            );
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn wait_ephemeral(node: &RealNode, name: &str, state: &str) -> Value {
    wait(node, &format!("ephemeral container {name} {state}"), || {
        node.pod("target")
            .filter(|p| ephemeral_status(p, name)["state"][state].is_object())
    })
}

fn kubectl_ok(node: &RealNode, args: &[&str]) -> Option<String> {
    let out = node.cluster.kubectl_output(args, None);
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn kubectl_debug_shares_the_targets_processes_and_the_read_api() {
    let node = RealNode::start(&["busybox"]);
    node.apply(POD);
    wait(&node, "pod target Running", || {
        node.pod("target")
            .filter(|p| p["status"]["phase"] == "Running")
    });

    // As a user would: kubectl debug adds the container through pods/ephemeralcontainers.
    let out = node.cluster.kubectl_output(
        &[
            "debug",
            "target",
            "--image=busybox",
            "--image-pull-policy=Never",
            "--target=app",
            "-c",
            "dbg",
            "--",
            "sh",
            "-c",
            "ps; sleep 3600",
        ],
        None,
    );
    assert!(
        out.status.success(),
        "kubectl debug: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pod = wait_ephemeral(&node, "dbg", "running");
    let s = ephemeral_status(&pod, "dbg");
    assert_eq!(s["ready"], false, "{s}");
    assert_eq!(s["restartCount"], 0, "{s}");
    assert!(s.get("started").is_none(), "{s}");
    assert!(
        s["containerID"]
            .as_str()
            .is_some_and(|id| id.starts_with("containerd://")),
        "{s}"
    );
    assert_eq!(pod["status"]["phase"], "Running");

    // The target's PID namespace: `ps` in the debug container lists the app's process...
    let logs = wait(&node, "the target's process in dbg's ps", || {
        kubectl_ok(&node, &["logs", "target", "-c", "dbg"]).filter(|l| l.contains("sleep 3601"))
    });
    assert!(logs.contains("ps"), "{logs}");
    // ...and it is PID 1 there, as seen through exec.
    let cmdline = kubectl_ok(
        &node,
        &[
            "exec",
            "target",
            "-c",
            "dbg",
            "--",
            "cat",
            "/proc/1/cmdline",
        ],
    )
    .expect("kubectl exec -c dbg");
    assert_eq!(cmdline.replace('\0', " ").trim(), "sleep 3601");

    // Events name the ephemeral container by its field path, as upstream.
    let events: Value = serde_json::from_str(&node.kubectl(&[
        "get",
        "events",
        "--field-selector",
        "involvedObject.name=target",
        "-o",
        "json",
    ]))
    .expect("events JSON");
    let started = events["items"].as_array().into_iter().flatten().any(|e| {
        e["reason"] == "Started"
            && e["message"] == "Started container dbg"
            && e["involvedObject"]["fieldPath"] == "spec.ephemeralContainers{dbg}"
    });
    assert!(started, "{events}");

    // One that exits is never restarted; the pod goes on running.
    let out = node.cluster.kubectl_output(
        &[
            "debug",
            "target",
            "--image=busybox",
            "--image-pull-policy=Never",
            "-c",
            "once",
            "--",
            "sh",
            "-c",
            "echo done",
        ],
        None,
    );
    assert!(
        out.status.success(),
        "kubectl debug: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pod = wait_ephemeral(&node, "once", "terminated");
    let first = ephemeral_status(&pod, "once").clone();
    assert_eq!(first["state"]["terminated"]["exitCode"], 0, "{first}");
    assert_eq!(
        first["state"]["terminated"]["reason"], "Completed",
        "{first}"
    );
    let logs = kubectl_ok(&node, &["logs", "target", "-c", "once"]).expect("logs -c once");
    assert_eq!(logs, "done\n");

    // The kubelet's read API through the node proxy.
    let pods: Value = serde_json::from_str(&node.kubectl(&[
        "get",
        "--raw",
        &format!("/api/v1/nodes/{NODE}/proxy/pods"),
    ]))
    .expect("/pods JSON");
    assert_eq!(pods["kind"], "PodList");
    assert_eq!(pods["apiVersion"], "v1");
    let listed = pods["items"]
        .as_array()
        .and_then(|a| a.iter().find(|p| p["metadata"]["name"] == "target"))
        .unwrap_or_else(|| panic!("target not in /pods: {pods}"));
    assert_eq!(listed["spec"]["nodeName"], NODE);
    let names: Vec<&str> = listed["spec"]["ephemeralContainers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(names, ["dbg", "once"], "{listed}");
    let configz: Value = serde_json::from_str(&node.kubectl(&[
        "get",
        "--raw",
        &format!("/api/v1/nodes/{NODE}/proxy/configz"),
    ]))
    .expect("/configz JSON");
    let k = &configz["kubeletconfig"];
    assert_eq!(k["syncFrequency"], "1m0s", "{configz}");
    assert_eq!(k["fileCheckFrequency"], "2s", "{configz}");
    assert_eq!(k["maxPods"], 110, "{configz}");
    assert_eq!(k["clusterDomain"], "cluster.local", "{configz}");
    assert!(k["staticPodPath"].is_string(), "{configz}");
    assert!(k["cgroupRoot"]
        .as_str()
        .is_some_and(|r| r.starts_with("/rkube-test-")));

    // Several syncs later, `once` is still the one attempt that ran.
    let pod = node.pod("target").expect("pod target");
    let again = ephemeral_status(&pod, "once");
    assert_eq!(again["containerID"], first["containerID"], "{again}");
    assert_eq!(again["restartCount"], 0, "{again}");
    let runtime = node.runtime();
    let attempts = node
        .rt
        .block_on(runtime.list_containers(None))
        .expect("CRI list")
        .into_iter()
        .filter(|c| c.metadata.as_ref().is_some_and(|m| m.name == "once"))
        .count();
    assert_eq!(
        attempts, 1,
        "the exited ephemeral container was started again"
    );
}
