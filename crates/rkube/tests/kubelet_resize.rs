//! In-place pod resize on a real node (issue 26 item 3; InPlacePodVerticalScaling, GA in 1.35):
//! `kubectl patch --subresource resize` changes a running container's cpu and memory limits
//! without a restart (the container's own cgroup files show the new quota and limit), a container
//! whose `resizePolicy` says `RestartContainer` for memory is restarted with the new limit, the
//! status reports `allocatedResources`, `resources` and `observedGeneration`, the API server refuses
//! what upstream refuses, and a resize beyond the node is `PodResizePending`/`Infeasible`.
//!
//! Needs root, containerd, runc, the CNI plugins and `scripts/images.sh`'s busybox (as `kubelet.rs`).

#[path = "support/real_node.rs"]
mod real_node;
mod support;

use std::time::Duration;

use real_node::{container_status, RealNode};
use serde_json::Value;

const TIMEOUT: Duration = Duration::from_secs(120);

const POD: &str = r#"apiVersion: v1
kind: Pod
metadata:
  name: resize
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: busybox
    imagePullPolicy: Never
    command: [sleep, "3600"]
    resources:
      requests: {cpu: 100m, memory: 32Mi}
      limits: {cpu: 200m, memory: 64Mi}
    resizePolicy:
    - {resourceName: cpu, restartPolicy: NotRequired}
    - {resourceName: memory, restartPolicy: NotRequired}
  - name: r
    image: busybox
    imagePullPolicy: Never
    command: [sleep, "3600"]
    resources:
      requests: {cpu: 100m, memory: 32Mi}
      limits: {cpu: 200m, memory: 64Mi}
    resizePolicy:
    - {resourceName: memory, restartPolicy: RestartContainer}
"#;

/// A cgroup v1 file as container `c` of the pod sees it.
fn cgroup(node: &RealNode, container: &str, file: &str) -> String {
    let subsystem = file.split('.').next().unwrap_or("");
    node.kubectl(&[
        "exec",
        "resize",
        "-c",
        container,
        "--",
        "cat",
        &format!("/sys/fs/cgroup/{subsystem}/{file}"),
    ])
    .trim()
    .to_string()
}

fn resize(node: &RealNode, patch: &str) -> std::process::Output {
    node.cluster.kubectl_output(
        &[
            "patch",
            "pod",
            "resize",
            "--subresource",
            "resize",
            "--patch",
            patch,
        ],
        None,
    )
}

fn resize_condition(p: &Value, kind: &str) -> Option<Value> {
    p["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
        .cloned()
}

#[test]
fn containers_are_resized_in_place() {
    let mut node = RealNode::start(&["busybox"]);
    node.apply(POD);
    let p = node.wait_pod("resize", "both containers ready", TIMEOUT, |p| {
        ["c", "r"]
            .iter()
            .all(|c| container_status(p, c)["ready"] == true)
    });
    assert_eq!(p["metadata"]["generation"], 1);
    let c = container_status(&p, "c");
    assert_eq!(c["allocatedResources"]["cpu"], "100m", "{c}");
    assert_eq!(c["resources"]["limits"]["cpu"], "200m", "{c}");
    assert_eq!(cgroup(&node, "c", "cpu.cfs_quota_us"), "20000");
    assert_eq!(
        cgroup(&node, "c", "memory.limit_in_bytes"),
        (64u64 << 20).to_string()
    );

    // What upstream's validation refuses.
    for (patch, want) in [
        (
            r#"{"spec":{"containers":[{"name":"c","resources":{"limits":{"ephemeral-storage":"1Gi"}}}]}}"#,
            "only cpu and memory resources are mutable",
        ),
        (
            r#"{"spec":{"containers":[{"name":"c","resources":{"requests":{"memory":null}}}]}}"#,
            "resource requests cannot be removed",
        ),
        (
            r#"{"spec":{"containers":[{"name":"c","resources":{"requests":{"cpu":"200m","memory":"64Mi"}}},{"name":"r","resources":{"requests":{"cpu":"200m","memory":"64Mi"}}}]}}"#,
            "Pod QOS Class may not change as a result of resizing",
        ),
    ] {
        let out = resize(&node, patch);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(want),
            "{patch}: {err}"
        );
    }

    // cpu and memory up for c (in place), memory up for r (its policy restarts it).
    let out = resize(
        &node,
        r#"{"spec":{"containers":[{"name":"c","resources":{"limits":{"cpu":"300m","memory":"96Mi"}}},{"name":"r","resources":{"limits":{"memory":"96Mi"}}}]}}"#,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let p = node.wait_pod("resize", "the resize applied", TIMEOUT, |p| {
        let c = container_status(p, "c");
        let r = container_status(p, "r");
        c["resources"]["limits"]["cpu"] == "300m"
            && r["resources"]["limits"]["memory"] == "96Mi"
            && r["ready"] == true
            && resize_condition(p, "PodResizeInProgress").is_none()
    });
    assert_eq!(p["metadata"]["generation"], 2);
    assert_eq!(p["status"]["observedGeneration"], 2);
    assert!(resize_condition(&p, "PodResizePending").is_none());
    assert_eq!(container_status(&p, "c")["restartCount"], 0);
    assert_eq!(container_status(&p, "r")["restartCount"], 1);
    assert_eq!(cgroup(&node, "c", "cpu.cfs_quota_us"), "30000");
    assert_eq!(
        cgroup(&node, "c", "memory.limit_in_bytes"),
        (96u64 << 20).to_string()
    );
    assert_eq!(
        cgroup(&node, "r", "memory.limit_in_bytes"),
        (96u64 << 20).to_string()
    );
    let events = node.events();
    assert!(events.contains("ResizeStarted"), "{events}");
    assert!(events.contains("ResizeCompleted"), "{events}");
    assert!(
        events.contains("Container r resize requires restart"),
        "{events}"
    );

    // More cpu than the node has: Infeasible (the pod's requests: 100 cores for c, 100m for r),
    // and nothing changes.
    let out = resize(
        &node,
        r#"{"spec":{"containers":[{"name":"c","resources":{"requests":{"cpu":"100"},"limits":{"cpu":"100"}}}]}}"#,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let p = node.wait_pod("resize", "the resize pending", TIMEOUT, |p| {
        resize_condition(p, "PodResizePending").is_some()
    });
    let pending = resize_condition(&p, "PodResizePending").unwrap();
    assert_eq!(pending["reason"], "Infeasible", "{pending}");
    assert_eq!(pending["observedGeneration"], 3, "{pending}");
    let message = pending["message"].as_str().unwrap_or("");
    assert!(
        message.starts_with("Node didn't have enough capacity: cpu, requested: 100100, capacity: "),
        "{message}"
    );
    let c = container_status(&p, "c");
    assert_eq!(c["resources"]["limits"]["cpu"], "300m", "{c}");
    assert_eq!(c["allocatedResources"]["cpu"], "100m", "{c}");
    assert_eq!(cgroup(&node, "c", "cpu.cfs_quota_us"), "30000");
    assert!(node.events().contains("ResizeInfeasible"));

    // Another infeasible size is judged on its own (not on what the status reports allocated).
    let out = resize(
        &node,
        r#"{"spec":{"containers":[{"name":"c","resources":{"requests":{"cpu":"50"},"limits":{"cpu":"50"}}}]}}"#,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    node.wait_pod("resize", "the second resize infeasible", TIMEOUT, |p| {
        resize_condition(p, "PodResizePending").is_some_and(|c| {
            c["observedGeneration"] == 4
                && c["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("requested: 50100,"))
        })
    });
    // Back to what is allocated: nothing is pending any more.
    let out = resize(
        &node,
        r#"{"spec":{"containers":[{"name":"c","resources":{"requests":{"cpu":"100m"},"limits":{"cpu":"300m"}}}]}}"#,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let p = node.wait_pod("resize", "the pending resize withdrawn", TIMEOUT, |p| {
        resize_condition(p, "PodResizePending").is_none()
    });
    assert_eq!(container_status(&p, "c")["restartCount"], 0);
    assert_eq!(cgroup(&node, "c", "cpu.cfs_quota_us"), "30000");
    node.cleanup();
}
