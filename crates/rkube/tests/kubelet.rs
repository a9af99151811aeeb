//! The kubelet on a real node: `rkube server` with its local node (containerd started as a child, in a
//! network namespace the test creates, pods in a cgroup tree of their own), images built by
//! `scripts/images.sh` (found in `target/images`, or `$RKUBE_IMAGES_DIR`). Needs root, containerd, runc
//! and the CNI plugins (scripts/test.sh installs them). The tests run one at a time: each node is a
//! containerd and a dozen processes on a 2-core machine.
//!
//! Logs, exec, attach, cp and port-forward through the kubelet's server are in `streaming_node.rs`;
//! both use the harness of `support/real_node.rs`.

#[path = "support/real_node.rs"]
mod real_node;
mod support;

use std::time::Duration;

use real_node::{condition, container_status, wait_for, RealNode, NODE};
use serde_json::Value;

/// Seed 003's `pi` Job, unmodified: 5 completions, 2 at a time, each printing pi to 2,000 digits.
#[test]
fn seed_pi_job_completes_and_prints_pi() {
    let node = RealNode::start(&["perl"]);
    node.apply(
        "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: pi\nspec:\n  parallelism: 2\n  completions: 5\n  template:\n    spec:\n      containers:\n      - name: pi\n        image: perl\n        command: [\"perl\", \"-Mbignum=bpi\", \"-wle\", \"print bpi(2000)\"]\n      restartPolicy: OnFailure\n",
    );
    wait_for("job pi to complete 5/5", Duration::from_secs(600), || {
        let out = node.kubectl(&["get", "job", "pi", "-o", "json"]);
        let job: Value = serde_json::from_str(&out).ok()?;
        let complete = job["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Complete" && c["status"] == "True");
        assert_ne!(
            job["status"]["failed"].as_i64().unwrap_or(0),
            6,
            "the Job failed: {out}"
        );
        (complete && job["status"]["succeeded"] == 5).then_some(())
    });
    let pods: Value =
        serde_json::from_str(&node.kubectl(&["get", "pods", "-l", "job-name=pi", "-o", "json"]))
            .unwrap();
    let pods = pods["items"].as_array().unwrap();
    let succeeded: Vec<&Value> = pods
        .iter()
        .filter(|p| p["status"]["phase"] == "Succeeded")
        .collect();
    assert_eq!(succeeded.len(), 5, "five pods succeeded");
    for p in &succeeded {
        let c = container_status(p, "pi");
        assert_eq!(c["state"]["terminated"]["reason"], "Completed");
        assert_eq!(c["state"]["terminated"]["exitCode"], 0);
    }
    // Through the API server and the kubelet's server, as `kubectl logs` reads any pod.
    let name = succeeded[0]["metadata"]["name"].as_str().unwrap();
    let pi = node.kubectl(&["logs", name]);
    let pi = pi.trim();
    assert_eq!(pi.len(), 2001, "2,000 digits: {pi}");
    assert!(pi.starts_with("3.14159265358979323846264338327950288419716939937510582097494459230781640628620899862803482534211706798214808651"), "{pi}");
    assert!(pi.ends_with("8658326459958133904780275901"), "{pi}");
}

/// A static pod file starts a pod with a mirror pod; removing the file stops it.
#[test]
fn static_pod_has_a_mirror_pod_and_stops_with_its_file() {
    let node = RealNode::start(&["busybox"]);
    let manifest = node.data.join("manifests/web.yaml");
    std::fs::write(
        &manifest,
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n  labels: {app: static}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: busybox\n    imagePullPolicy: Never\n    command: [sleep, \"3600\"]\n",
    )
    .unwrap();
    let mirror_name = format!("web-{NODE}");
    let mirror = node.wait_pod(&mirror_name, "Running", Duration::from_secs(120), |p| {
        p["status"]["phase"] == "Running" && condition(p, "Ready") == "True"
    });
    let ann = &mirror["metadata"]["annotations"];
    assert!(ann["kubernetes.io/config.mirror"].is_string(), "{mirror}");
    assert_eq!(ann["kubernetes.io/config.source"], "file");
    assert_eq!(mirror["metadata"]["ownerReferences"][0]["kind"], "Node");
    assert_eq!(mirror["metadata"]["labels"]["app"], "static");
    let runtime = node.runtime();
    let found = node
        .rt
        .block_on(runtime.find_container("default", &mirror_name, "c"))
        .unwrap();
    assert!(found.is_some(), "the static pod's container runs");

    std::fs::remove_file(&manifest).unwrap();
    wait_for("the mirror pod to go", Duration::from_secs(120), || {
        node.pod(&mirror_name).is_none().then_some(())
    });
    wait_for(
        "the static pod's containers to go",
        Duration::from_secs(60),
        || {
            let left = node
                .rt
                .block_on(runtime.pod_containers("default", &mirror_name, None))
                .unwrap();
            left.is_empty().then_some(())
        },
    );
}

/// A failing liveness probe restarts the container, with CrashLoopBackOff between restarts.
#[test]
fn failing_liveness_probe_restarts_with_backoff() {
    let node = RealNode::start(&["busybox"]);
    node.apply(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: live\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: busybox\n    command: [sleep, \"3600\"]\n    livenessProbe:\n      exec: {command: [\"false\"]}\n      periodSeconds: 1\n      failureThreshold: 1\n",
    );
    let mut saw_backoff = false;
    let pod = node.wait_pod("live", "two restarts", Duration::from_secs(180), |p| {
        let c = container_status(p, "c");
        if c["state"]["waiting"]["reason"] == "CrashLoopBackOff" {
            assert!(c["state"]["waiting"]["message"]
                .as_str()
                .unwrap_or("")
                .starts_with("back-off 10s restarting failed container=c pod=live_default("));
        }
        c["restartCount"].as_i64().unwrap_or(0) >= 2
    });
    let c = container_status(&pod, "c");
    assert_eq!(c["lastState"]["terminated"]["exitCode"], 137, "{pod}");
    // Between the second and third start the container waits in CrashLoopBackOff.
    node.wait_pod("live", "CrashLoopBackOff", Duration::from_secs(120), |p| {
        saw_backoff |= container_status(p, "c")["state"]["waiting"]["reason"] == "CrashLoopBackOff";
        saw_backoff
    });
    let events = node.events();
    assert!(
        events.contains("Container c failed liveness probe, will be restarted"),
        "{events}"
    );
    assert!(events.contains("Liveness probe failed"), "{events}");
}

/// A container over its memory limit ends OOMKilled; a failing one reports its termination message.
#[test]
fn container_over_its_memory_limit_is_oom_killed() {
    let node = RealNode::start(&["busybox"]);
    node.apply(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: hog\nspec:\n  restartPolicy: Never\n  containers:\n  - name: c\n    image: busybox\n    command: [sh, -c, \"tail /dev/zero\"]\n    resources:\n      limits: {memory: 32Mi}\n",
    );
    let pod = node.wait_pod("hog", "Failed", Duration::from_secs(120), |p| {
        p["status"]["phase"] == "Failed"
    });
    let t = &container_status(&pod, "c")["state"]["terminated"];
    assert_eq!(t["reason"], "OOMKilled", "{pod}");
    assert_eq!(t["exitCode"], 137);
    node.apply(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: bye\nspec:\n  restartPolicy: Never\n  containers:\n  - name: c\n    image: busybox\n    command: [sh, -c, \"echo -n bye > /dev/termination-log; exit 3\"]\n",
    );
    let pod = node.wait_pod("bye", "Failed", Duration::from_secs(120), |p| {
        p["status"]["phase"] == "Failed"
    });
    let t = &container_status(&pod, "c")["state"]["terminated"];
    let got = (
        t["exitCode"].as_i64(),
        t["reason"].as_str(),
        t["message"].as_str(),
    );
    assert_eq!(got, (Some(3), Some("Error"), Some("bye")), "{pod}");
}

/// Deleting a pod sends SIGTERM, which the container traps; the pod then goes. On the way: an init
/// container runs first, postStart after the start, preStop before the signal.
#[test]
fn deletion_sends_sigterm_the_container_traps() {
    let node = RealNode::start(&["busybox"]);
    let out = node.data.join("sigterm-out");
    std::fs::create_dir_all(&out).unwrap();
    node.apply(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: trap\nspec:\n  initContainers:\n  - name: init\n    image: busybox\n    command: [sh, -c, \"echo init > /out/init\"]\n    volumeMounts: [{{name: out, mountPath: /out}}]\n  containers:\n  - name: c\n    image: busybox\n    command: [sh, -c, \"test -e /out/init || exit 1; trap 'echo TERM-received > /out/signal; exit 0' TERM; echo started > /out/started; while true; do sleep 0.2; done\"]\n    lifecycle:\n      postStart: {{exec: {{command: [sh, -c, \"echo post > /out/poststart\"]}}}}\n      preStop: {{exec: {{command: [sh, -c, \"echo pre > /out/prestop\"]}}}}\n    volumeMounts: [{{name: out, mountPath: /out}}]\n  volumes:\n  - name: out\n    hostPath: {{path: {}, type: Directory}}\n",
        out.display()
    ));
    node.wait_pod("trap", "Running", Duration::from_secs(120), |p| {
        p["status"]["phase"] == "Running"
    });
    wait_for("the trap to be set", Duration::from_secs(60), || {
        out.join("started").exists().then_some(())
    });
    node.kubectl(&["delete", "pod", "trap", "--wait=false"]);
    wait_for("the pod to go", Duration::from_secs(60), || {
        node.pod("trap").is_none().then_some(())
    });
    assert_eq!(
        std::fs::read_to_string(out.join("signal")).unwrap_or_default(),
        "TERM-received\n"
    );
}

/// A sidecar (an init container with `restartPolicy: Always`) starts before the app container,
/// once its startup probe passed, runs beside it, and is stopped after the app container has
/// finished; the pod then Succeeds whatever the sidecar's exit code.
#[test]
fn sidecar_runs_beside_the_app_and_stops_after_it() {
    let node = RealNode::start(&["busybox"]);
    let out = node.data.join("sidecar-out");
    std::fs::create_dir_all(&out).unwrap();
    node.apply(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: sidecar\nspec:\n  restartPolicy: Never\n  terminationGracePeriodSeconds: 10\n  initContainers:\n  - name: side\n    image: busybox\n    restartPolicy: Always\n    command: [sh, -c, \"trap 'echo side-term >> /out/order; exit 0' TERM; sleep 1; echo up > /out/up; while true; do sleep 0.2; done\"]\n    startupProbe:\n      exec: {{command: [test, -e, /out/up]}}\n      periodSeconds: 1\n    volumeMounts: [{{name: out, mountPath: /out}}]\n  containers:\n  - name: app\n    image: busybox\n    command: [sh, -c, \"test -e /out/up || exit 3; echo app-done >> /out/order\"]\n    volumeMounts: [{{name: out, mountPath: /out}}]\n  volumes:\n  - name: out\n    hostPath: {{path: {}, type: Directory}}\n",
        out.display()
    ));
    let pod = node.wait_pod("sidecar", "Succeeded", Duration::from_secs(120), |p| {
        p["status"]["phase"] == "Succeeded" || p["status"]["phase"] == "Failed"
    });
    assert_eq!(pod["status"]["phase"], "Succeeded", "{pod}");
    // The app saw the sidecar's file (exit 0, not 3), and the sidecar got SIGTERM after it.
    assert_eq!(
        container_status(&pod, "app")["state"]["terminated"]["exitCode"],
        0,
        "{pod}"
    );
    assert_eq!(
        std::fs::read_to_string(out.join("order")).unwrap_or_default(),
        "app-done\nside-term\n"
    );
    let side = &pod["status"]["initContainerStatuses"][0];
    assert_eq!(side["name"], "side");
    assert!(side["state"]["terminated"].is_object(), "{pod}");
    assert_eq!(condition(&pod, "Initialized"), "True", "{pod}");
}

/// A readiness probe (httpGet, through the pod network) drives the Ready condition.
#[test]
fn readiness_probe_drives_ready() {
    let node = RealNode::start(&["busybox"]);
    node.apply(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: ready\nspec:\n  containers:\n  - name: c\n    image: busybox\n    command: [sh, -c, \"mkdir -p /www; while [ ! -e /tmp/go ]; do sleep 0.2; done; echo ok > /www/index.html; exec httpd -f -p 8080 -h /www\"]\n    readinessProbe:\n      httpGet: {path: /index.html, port: 8080}\n      periodSeconds: 1\n",
    );
    let pod = node.wait_pod("ready", "Running", Duration::from_secs(120), |p| {
        p["status"]["phase"] == "Running"
    });
    assert_eq!(
        condition(&pod, "Ready"),
        "False",
        "not ready before the server listens: {pod}"
    );
    assert_eq!(container_status(&pod, "c")["ready"], false);
    // Let the server start: a file through the runtime (exec is the streaming branch's).
    let runtime = node.runtime();
    let c = node
        .rt
        .block_on(runtime.find_container("default", "ready", "c"))
        .unwrap()
        .expect("container");
    node.rt
        .block_on(kubelet::kuberuntime::exec_sync(
            &runtime,
            &c.id,
            vec!["touch".into(), "/tmp/go".into()],
            Duration::from_secs(10),
        ))
        .expect("exec");
    let pod = node.wait_pod("ready", "Ready", Duration::from_secs(60), |p| {
        condition(p, "Ready") == "True"
    });
    assert_eq!(container_status(&pod, "c")["ready"], true);
    assert_eq!(condition(&pod, "ContainersReady"), "True");
}

/// A restarted kubelet (and containerd) adopts the running pods: nothing restarts.
#[test]
fn kubelet_restart_restarts_nothing() {
    let mut node = RealNode::start(&["busybox"]);
    node.apply(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: steady\nspec:\n  containers:\n  - name: c\n    image: busybox\n    command: [sleep, \"3600\"]\n    readinessProbe:\n      exec: {command: [\"true\"]}\n      periodSeconds: 2\n",
    );
    let before = node.wait_pod("steady", "Ready", Duration::from_secs(120), |p| {
        condition(p, "Ready") == "True"
    });
    node.cluster.restart();
    wait_for(
        "the node to be Ready again",
        Duration::from_secs(120),
        || {
            let out = node.cluster.kubectl_output(
                &[
                    "get",
                    "node",
                    NODE,
                    "-o",
                    "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
                ],
                None,
            );
            (String::from_utf8_lossy(&out.stdout) == "True").then_some(())
        },
    );
    // A new pod running proves the restarted kubelet has synced its pods.
    node.apply(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: after\nspec:\n  containers:\n  - name: c\n    image: busybox\n    command: [sleep, \"3600\"]\n",
    );
    node.wait_pod("after", "Running", Duration::from_secs(120), |p| {
        p["status"]["phase"] == "Running"
    });
    let after = node.wait_pod("steady", "Ready", Duration::from_secs(60), |p| {
        condition(p, "Ready") == "True"
    });
    let (b, a) = (
        container_status(&before, "c"),
        container_status(&after, "c"),
    );
    assert_eq!(a["containerID"], b["containerID"], "same container");
    assert_eq!(a["restartCount"], 0);
    assert_eq!(
        a["state"]["running"]["startedAt"],
        b["state"]["running"]["startedAt"]
    );
    assert_eq!(
        after["status"]["podIP"], before["status"]["podIP"],
        "same sandbox"
    );
    node.cleanup();
}

/// The Python client's e2e pod: `python -u /opt/port-server.py 1234 1235` from a configMap volume
/// mounted read-only at `/opt`, a tcpSocket startup probe on 1235, restartPolicy Never. It went
/// `Failed` with empty logs when the python image had no `python` (only `python3`).
#[test]
fn python_port_server_from_a_read_only_config_map_runs() {
    let node = RealNode::start(&["python"]);
    let script = "import socket, sys, threading\n\
        lock = threading.Lock()\n\
        def serve(port):\n    s = socket.socket()\n    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n    s.bind(('0.0.0.0', port))\n    s.listen(5)\n    with lock:\n        print('listening on', port)\n    while True:\n        c, _ = s.accept()\n        c.sendall(b'hello')\n        c.close()\n\
        threads = [threading.Thread(target=serve, args=(int(p),)) for p in sys.argv[1:]]\n\
        [t.start() for t in threads]\n[t.join() for t in threads]\n";
    let indented: String = script.lines().map(|l| format!("    {l}\n")).collect();
    node.apply(&format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: port-server\ndata:\n  port-server.py: |\n{indented}"
    ));
    node.apply(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: port-server\nspec:\n  restartPolicy: Never\n  containers:\n  - name: c\n    image: python\n    command: [python, -u, /opt/port-server.py, \"1234\", \"1235\"]\n    volumeMounts:\n    - {name: code, mountPath: /opt, readOnly: true}\n    startupProbe:\n      tcpSocket: {port: 1235}\n      periodSeconds: 1\n      failureThreshold: 30\n  volumes:\n  - name: code\n    configMap: {name: port-server}\n",
    );
    let pod = node.wait_pod("port-server", "Ready", Duration::from_secs(120), |p| {
        p["status"]["phase"] != "Pending"
            && (condition(p, "Ready") == "True" || p["status"]["phase"] == "Failed")
    });
    assert_eq!(pod["status"]["phase"], "Running", "{pod}");
    assert_eq!(container_status(&pod, "c")["started"], true, "{pod}");
    let log = wait_for("the server's output", Duration::from_secs(30), || {
        let log = node.log(&pod, "c", 0);
        log.contains("listening on 1235").then_some(log)
    });
    assert!(log.contains("listening on 1234"), "{log}");
}
