//! In-place pod resize on a real node (issue 26 item 3; InPlacePodVerticalScaling, GA in 1.35):
//! `kubectl patch --subresource resize` changes a running container's cpu and memory limits
//! without a restart (the container's own cgroup files show the new quota and limit), a container
//! whose `resizePolicy` says `RestartContainer` for memory is restarted with the new limit, the
//! status reports `allocatedResources`, `resources` and `observedGeneration`, the API server refuses
//! what upstream refuses, and a resize beyond the node is `PodResizePending`/`Infeasible`.
//! LimitRanger and ResourceQuota admit `pods/resize` as upstream's, and the kubelet's own
//! admission of new pods (resources, node selector) rejects what does not fit the node. The pod
//! cgroup carries the pod's shares, CFS quota and memory limit, and follows a resize.
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

/// A cgroup v1 file of the pod's own cgroup (the Burstable pod `resize`), read on the host.
fn pod_cgroup(node: &RealNode, pod: &Value, file: &str) -> String {
    let subsystem = file.split('.').next().unwrap_or("");
    let root = node.cgroup_root.trim_matches('/');
    let uid = pod["metadata"]["uid"].as_str().unwrap_or("");
    let mut path = format!("/sys/fs/cgroup/{subsystem}/");
    if !root.is_empty() {
        path.push_str(root);
        path.push('/');
    }
    path.push_str(&format!("kubepods/burstable/pod{uid}/{file}"));
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
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
    // The pod cgroup: shares from the requests (200m), quota and memory from the limits, which
    // every container declares (upstream ResourceConfigForPod).
    assert_eq!(pod_cgroup(&node, &p, "cpu.shares"), "204");
    assert_eq!(pod_cgroup(&node, &p, "cpu.cfs_quota_us"), "40000");
    assert_eq!(
        pod_cgroup(&node, &p, "memory.limit_in_bytes"),
        (128u64 << 20).to_string()
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
    // The pod cgroup follows: 300m + 200m of cpu, 96Mi + 96Mi of memory.
    assert_eq!(pod_cgroup(&node, &p, "cpu.cfs_quota_us"), "50000");
    assert_eq!(
        pod_cgroup(&node, &p, "memory.limit_in_bytes"),
        (192u64 << 20).to_string()
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

    admission_of_resizes(&node);
    let node_name = p["spec"]["nodeName"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    kubelet_admission(&node, &node_name);
    node.cleanup();
}

/// LimitRanger and ResourceQuota see `pods/resize` as upstream's: a container's new limit above
/// the LimitRange's max, or requests growing past the quota, get 403 with upstream's messages.
fn admission_of_resizes(node: &RealNode) {
    node.apply(
        "apiVersion: v1\nkind: LimitRange\nmetadata:\n  name: lr\nspec:\n  limits:\n  - type: Container\n    max: {cpu: \"1\"}\n---\napiVersion: v1\nkind: ResourceQuota\nmetadata:\n  name: q\nspec:\n  hard: {requests.cpu: 500m}\n",
    );
    // Quota admission refuses what a quota tracks until the controller computed its usage.
    wait_for_quota_usage(node);
    let out = resize(
        node,
        r#"{"spec":{"containers":[{"name":"c","resources":{"requests":{"cpu":"2"},"limits":{"cpu":"2"}}}]}}"#,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && err.contains("pods \"resize\" is forbidden: maximum cpu usage per Container is 1, but limit is 2"),
        "{err}"
    );
    // 800m + 100m requested where 200m were: 700m more, over the quota's 500m.
    let out = resize(
        node,
        r#"{"spec":{"containers":[{"name":"c","resources":{"requests":{"cpu":"800m"},"limits":{"cpu":"800m"}}}]}}"#,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && err.contains("pods \"resize\" is forbidden: exceeded quota: q, requested: requests.cpu=700m, used: requests.cpu=200m, limited: requests.cpu=500m"),
        "{err}"
    );
    // Within both: admitted, and the quota is charged the growth.
    let out = resize(
        node,
        r#"{"spec":{"containers":[{"name":"c","resources":{"requests":{"cpu":"300m"},"limits":{"cpu":"300m"}}}]}}"#,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let used = node.kubectl(&[
        "get",
        "resourcequota",
        "q",
        "-o",
        "jsonpath={.status.used.requests\\.cpu}",
    ]);
    assert_eq!(used.trim(), "400m");
    node.kubectl(&["delete", "resourcequota", "q"]);
    node.kubectl(&["delete", "limitrange", "lr"]);
}

fn wait_for_quota_usage(node: &RealNode) {
    real_node::wait_for("quota q computed", TIMEOUT, || {
        let used = node.kubectl(&[
            "get",
            "resourcequota",
            "q",
            "-o",
            "jsonpath={.status.used.requests\\.cpu}",
        ]);
        (!used.trim().is_empty()).then_some(())
    });
}

/// The kubelet's own admission of pods bound to it directly (`spec.nodeName`, no scheduler):
/// requests beyond what is left of the node fail the pod with `OutOfcpu`, a nodeSelector the node
/// does not match with `NodeAffinity` (upstream `lifecycle/predicate.go`).
fn kubelet_admission(node: &RealNode, node_name: &str) {
    let pod = |name: &str, extra: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  nodeName: {node_name}\n{extra}  containers:\n  - name: c\n    image: busybox\n    imagePullPolicy: Never\n    command: [sleep, \"3600\"]\n    resources:\n      requests: {{cpu: \"100\"}}\n"
        )
    };
    node.apply(&pod("toobig", ""));
    node.apply(
        &pod("elsewhere", "  nodeSelector: {disk: none}\n").replace("cpu: \"100\"", "cpu: 10m"),
    );
    let p = node.wait_pod("toobig", "rejected", TIMEOUT, |p| {
        p["status"]["phase"] == "Failed"
    });
    assert_eq!(p["status"]["reason"], "OutOfcpu", "{}", p["status"]);
    let message = p["status"]["message"].as_str().unwrap_or("");
    assert!(
        message.starts_with(
            "Pod was rejected: Node didn't have enough resource: cpu, requested: 100000, used: "
        ),
        "{message}"
    );
    let p = node.wait_pod("elsewhere", "rejected", TIMEOUT, |p| {
        p["status"]["phase"] == "Failed"
    });
    assert_eq!(p["status"]["reason"], "NodeAffinity", "{}", p["status"]);
    assert_eq!(
        p["status"]["message"],
        "Pod was rejected: Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector"
    );
    assert!(node.events().contains("OutOfcpu"));
    // The resize pod, admitted before, runs on.
    assert_eq!(node.pod("resize").unwrap()["status"]["phase"], "Running");
}
