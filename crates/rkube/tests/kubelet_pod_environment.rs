//! Security contexts and the pod environment on a real node, checked as upstream's node conformance
//! checks them (issue 26 items 2 and 3): `id` for runAsUser/runAsGroup/fsGroup/supplementalGroups,
//! `/proc/self/status` for NoNewPrivs, CapEff and Seccomp, a write to a read-only root filesystem,
//! runAsNonRoot refused for a root image, an unsafe sysctl rejected (`SysctlForbidden`) and a safe
//! one set, privileged, a Localhost seccomp profile, Service variables, `envFrom` and optional refs,
//! `$(VAR)` expansion, `/etc/hosts`, the host name, and termination messages (file and
//! `FallbackToLogsOnError`). One node; all pods start together.
//!
//! Needs root, containerd, runc, the CNI plugins and `scripts/images.sh`'s busybox (as `kubelet.rs`).

#[path = "support/real_node.rs"]
mod real_node;
mod support;

use std::time::Duration;

use real_node::{container_status, RealNode};
use serde_json::Value;

const TIMEOUT: Duration = Duration::from_secs(180);

const SERVICE: &str = "apiVersion: v1
kind: Service
metadata:
  name: my-svc
spec:
  ports:
  - {name: http, port: 80}
  - {name: dns, port: 53, protocol: UDP}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: cm
data: {a: one, b: two}
";

/// A Localhost seccomp profile (Docker's format, as containerd reads it): everything allowed but
/// creating directories.
const DENY_MKDIR: &str = r#"{"defaultAction": "SCMP_ACT_ALLOW",
  "syscalls": [{"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO"}]}"#;

const PODS: &str = r#"apiVersion: v1
kind: Pod
metadata:
  name: sec
spec:
  restartPolicy: Never
  securityContext: {runAsUser: 1000, runAsGroup: 3000, fsGroup: 2000, supplementalGroups: [4000]}
  containers:
  - name: c
    image: busybox
    imagePullPolicy: Never
    securityContext:
      allowPrivilegeEscalation: false
      readOnlyRootFilesystem: true
      seccompProfile: {type: RuntimeDefault}
    command: [sh, -c, 'echo "ids=$(id -u) $(id -g) [$(id -G)]"; grep -E "^(NoNewPrivs|Seccomp):" /proc/self/status; if touch /probe 2>/dev/null; then echo rootfs=writable; else echo rootfs=readonly; fi']
  - name: caps
    image: busybox
    imagePullPolicy: Never
    securityContext:
      runAsUser: 0
      capabilities: {drop: [ALL], add: [NET_BIND_SERVICE]}
    command: [sh, -c, 'echo "uid=$(id -u)"; grep -E "^(CapEff|NoNewPrivs|Seccomp):" /proc/self/status; if touch /probe 2>/dev/null; then echo rootfs=writable; else echo rootfs=readonly; fi; if echo 1 2>/dev/null > /proc/sys/kernel/shm_rmid_forced; then echo procsys=writable; else echo procsys=readonly; fi']
  - name: priv
    image: busybox
    imagePullPolicy: Never
    securityContext: {runAsUser: 0, privileged: true}
    command: [sh, -c, 'if echo 1 2>/dev/null > /proc/sys/kernel/shm_rmid_forced; then echo procsys=writable; else echo procsys=readonly; fi']
  - name: local-seccomp
    image: busybox
    imagePullPolicy: Never
    securityContext:
      seccompProfile: {type: Localhost, localhostProfile: deny-mkdir.json}
    command: [sh, -c, 'grep "^Seccomp:" /proc/self/status; if mkdir /tmp/d 2>/dev/null; then echo mkdir=allowed; else echo mkdir=denied; fi']
---
apiVersion: v1
kind: Pod
metadata:
  name: nonroot
spec:
  securityContext: {runAsNonRoot: true}
  containers:
  - name: c
    image: busybox
    imagePullPolicy: Never
    command: [sleep, "3600"]
---
apiVersion: v1
kind: Pod
metadata:
  name: unsafe-sysctl
spec:
  securityContext:
    sysctls: [{name: net.core.somaxconn, value: "1024"}]
  containers:
  - name: c
    image: busybox
    imagePullPolicy: Never
    command: [sleep, "3600"]
---
apiVersion: v1
kind: Pod
metadata:
  name: env
spec:
  restartPolicy: Never
  hostname: web-0
  subdomain: web
  hostAliases:
  - {ip: 10.9.8.7, hostnames: [alias-one, alias-two]}
  securityContext:
    sysctls: [{name: kernel.shm_rmid_forced, value: "1"}]
  containers:
  - name: c
    image: busybox
    imagePullPolicy: Never
    envFrom:
    - configMapRef: {name: missing, optional: true}
    - configMapRef: {name: cm}
      prefix: CM_
    env:
    - {name: OPTIONAL, valueFrom: {secretKeyRef: {name: missing, key: k, optional: true}}}
    - {name: GREETING, value: hello}
    - {name: MESSAGE, value: "$(GREETING) world $$(GREETING) $(UNDEFINED)"}
    - {name: SVC, value: "$(MY_SVC_SERVICE_HOST):$(MY_SVC_SERVICE_PORT_HTTP)"}
    command: [sh, -c]
    args: ['echo "arg=$(GREETING)"; env | sort; echo "hostname=$(hostname)"; echo "shm_rmid_forced=$(cat /proc/sys/kernel/shm_rmid_forced)"; cat /etc/hosts; printf "written by the container" > /dev/termination-log']
---
apiVersion: v1
kind: Pod
metadata:
  name: nolinks
spec:
  restartPolicy: Never
  enableServiceLinks: false
  hostname: fqdn
  subdomain: web
  setHostnameAsFQDN: true
  containers:
  - name: c
    image: busybox
    imagePullPolicy: Never
    command: [sh, -c, 'env | sort; echo "hostname=$(hostname)"']
---
apiVersion: v1
kind: Pod
metadata:
  name: hostnet
spec:
  restartPolicy: Never
  hostNetwork: true
  hostAliases:
  - {ip: 10.9.8.6, hostnames: [hostnet-alias]}
  containers:
  - name: c
    image: busybox
    imagePullPolicy: Never
    command: [cat, /etc/hosts]
---
apiVersion: v1
kind: Pod
metadata:
  name: fallback
spec:
  restartPolicy: Never
  containers:
  - name: c
    image: busybox
    imagePullPolicy: Never
    terminationMessagePolicy: FallbackToLogsOnError
    command: [sh, -c, 'echo first line; echo last line; exit 3']
"#;

/// Waits for pod `name` to satisfy `f`; on timeout, fails with the pod and the events.
fn wait(node: &RealNode, name: &str, what: &str, f: impl Fn(&Value) -> bool) -> Value {
    let deadline = std::time::Instant::now() + TIMEOUT;
    loop {
        let pod = node.pod(name);
        if let Some(p) = pod.as_ref().filter(|p| f(p)) {
            return p.clone();
        }
        if std::time::Instant::now() > deadline {
            panic!(
                "pod {name}: {what} not seen in {TIMEOUT:?}: {pod:?}\nevents:\n{}",
                node.events()
            );
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn terminated(p: &Value, name: &str) -> bool {
    container_status(p, name)["state"]["terminated"].is_object()
}

fn lines(log: &str) -> Vec<&str> {
    log.lines().collect()
}

#[test]
fn security_contexts_and_pod_environment() {
    let node = RealNode::start(&["busybox"]);
    let seccomp = node.data.join("kubelet/seccomp");
    std::fs::create_dir_all(&seccomp).unwrap();
    std::fs::write(seccomp.join("deny-mkdir.json"), DENY_MKDIR).unwrap();
    // The Service exists before the pods, so their containers get its variables.
    node.apply(SERVICE);
    let svc_ip = node.kubectl(&["get", "svc", "my-svc", "-o", "jsonpath={.spec.clusterIP}"]);
    let api_ip = node.kubectl(&[
        "get",
        "svc",
        "kubernetes",
        "-o",
        "jsonpath={.spec.clusterIP}",
    ]);
    assert!(!svc_ip.is_empty() && !api_ip.is_empty());
    node.apply(PODS);

    // An unsafe sysctl: the node refuses the pod before anything starts.
    let rejected = wait(&node, "unsafe-sysctl", "Failed", |p| {
        p["status"]["phase"] == "Failed"
    });
    assert_eq!(
        rejected["status"]["reason"], "SysctlForbidden",
        "{rejected}"
    );
    assert_eq!(
        rejected["status"]["message"],
        "Pod was rejected: forbidden sysctl: \"net.core.somaxconn\" not allowlisted"
    );

    // runAsNonRoot with an image whose user is root.
    let nonroot = wait(&node, "nonroot", "CreateContainerConfigError", |p| {
        container_status(p, "c")["state"]["waiting"]["reason"] == "CreateContainerConfigError"
    });
    let msg = container_status(&nonroot, "c")["state"]["waiting"]["message"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(
        msg.starts_with(
            "container has runAsNonRoot and image will run as root (pod: \"nonroot_default("
        ),
        "{msg}"
    );

    // Users, groups, no_new_privs, seccomp, capabilities, read-only root.
    let sec = wait(&node, "sec", "both containers terminated", |p| {
        ["c", "caps", "priv", "local-seccomp"]
            .iter()
            .all(|c| terminated(p, c))
    });
    let out = node.log(&sec, "c", 0);
    let out = lines(&out);
    // runAsUser, runAsGroup, and the groups: fsGroup and supplementalGroups with the primary group.
    let ids = out[0]
        .strip_prefix("ids=1000 3000 [")
        .unwrap_or_else(|| panic!("{out:?}"));
    let mut groups: Vec<&str> = ids.trim_end_matches(']').split_whitespace().collect();
    groups.sort();
    assert_eq!(groups, ["2000", "3000", "4000"], "{out:?}");
    assert!(out.contains(&"NoNewPrivs:\t1"), "{out:?}");
    assert!(out.contains(&"Seccomp:\t2"), "{out:?}");
    assert!(out.contains(&"rootfs=readonly"), "{out:?}");
    let out = node.log(&sec, "caps", 0);
    let out = lines(&out);
    assert_eq!(out[0], "uid=0", "{out:?}");
    // CAP_NET_BIND_SERVICE (bit 10) only.
    assert!(out.contains(&"CapEff:\t0000000000000400"), "{out:?}");
    assert!(out.contains(&"NoNewPrivs:\t0"), "{out:?}");
    assert!(out.contains(&"Seccomp:\t0"), "{out:?}");
    assert!(out.contains(&"rootfs=writable"), "{out:?}");
    assert!(out.contains(&"procsys=readonly"), "{out:?}");
    // Privileged: /proc/sys is not read-only (and all capabilities).
    let out = node.log(&sec, "priv", 0);
    assert_eq!(lines(&out), ["procsys=writable"], "{out}");
    // A Localhost profile from <root-dir>/seccomp.
    let out = node.log(&sec, "local-seccomp", 0);
    assert_eq!(lines(&out), ["Seccomp:\t2", "mkdir=denied"], "{out}");

    // The environment, the host name, /etc/hosts, a safe sysctl, the termination message file.
    let env = wait(&node, "env", "Succeeded", |p| {
        p["status"]["phase"] == "Succeeded" || p["status"]["phase"] == "Failed"
    });
    assert_eq!(env["status"]["phase"], "Succeeded", "{env}");
    let c = container_status(&env, "c");
    assert_eq!(
        c["state"]["terminated"]["message"], "written by the container",
        "{c}"
    );
    let pod_ip = env["status"]["podIP"].as_str().unwrap_or("").to_string();
    let log = node.log(&env, "c", 0);
    let out = lines(&log);
    for want in [
        "arg=hello".to_string(),
        "CM_a=one".to_string(),
        "CM_b=two".to_string(),
        "GREETING=hello".to_string(),
        "MESSAGE=hello world $(GREETING) $(UNDEFINED)".to_string(),
        format!("SVC={svc_ip}:80"),
        format!("MY_SVC_SERVICE_HOST={svc_ip}"),
        "MY_SVC_SERVICE_PORT=80".to_string(),
        "MY_SVC_SERVICE_PORT_HTTP=80".to_string(),
        "MY_SVC_SERVICE_PORT_DNS=53".to_string(),
        format!("MY_SVC_PORT=tcp://{svc_ip}:80"),
        format!("MY_SVC_PORT_53_UDP=udp://{svc_ip}:53"),
        "MY_SVC_PORT_53_UDP_PROTO=udp".to_string(),
        "MY_SVC_PORT_53_UDP_PORT=53".to_string(),
        format!("MY_SVC_PORT_53_UDP_ADDR={svc_ip}"),
        format!("KUBERNETES_SERVICE_HOST={api_ip}"),
        format!("KUBERNETES_PORT_443_TCP=tcp://{api_ip}:443"),
        "hostname=web-0".to_string(),
        "shm_rmid_forced=1".to_string(),
        "# Kubernetes-managed hosts file.".to_string(),
        "127.0.0.1\tlocalhost".to_string(),
        "::1\tlocalhost ip6-localhost ip6-loopback".to_string(),
        format!("{pod_ip}\tweb-0.web.default.svc.cluster.local\tweb-0"),
        "# Entries added by HostAliases.".to_string(),
        "10.9.8.7\talias-one\talias-two".to_string(),
    ] {
        assert!(out.contains(&want.as_str()), "{want:?} not in:\n{log}");
    }
    // An optional key of a missing Secret: no variable.
    assert!(!log.contains("OPTIONAL="), "{log}");

    // Without service links: the API server's Service only; the kernel host name is the FQDN.
    let nolinks = wait(&node, "nolinks", "Succeeded", |p| {
        p["status"]["phase"] == "Succeeded" || p["status"]["phase"] == "Failed"
    });
    let log = node.log(&nolinks, "c", 0);
    assert!(
        log.contains(&format!("KUBERNETES_SERVICE_HOST={api_ip}\n")),
        "{log}"
    );
    assert!(!log.contains("MY_SVC_"), "{log}");
    assert!(
        log.contains("hostname=fqdn.web.default.svc.cluster.local\n"),
        "{log}"
    );

    // A host-network pod: the node's /etc/hosts under the host-network header (so not
    // "kubelet-managed" in upstream's conformance sense), with its aliases.
    let hostnet = wait(&node, "hostnet", "Succeeded", |p| {
        p["status"]["phase"] == "Succeeded" || p["status"]["phase"] == "Failed"
    });
    let log = node.log(&hostnet, "c", 0);
    let node_hosts = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
    assert_eq!(
        log,
        format!(
            "# Kubernetes-managed hosts file (host network).\n{node_hosts}\n# Entries added by HostAliases.\n10.9.8.6\thostnet-alias\n"
        )
    );

    // FallbackToLogsOnError: a failed container with no message file content reports its log's tail.
    let fallback = wait(&node, "fallback", "Failed", |p| {
        p["status"]["phase"] == "Failed"
    });
    let t = &container_status(&fallback, "c")["state"]["terminated"];
    assert_eq!(t["exitCode"], 3, "{t}");
    assert_eq!(t["message"], "first line\nlast line\n", "{t}");

    let events = node.events();
    assert!(events.contains("SysctlForbidden"), "{events}");
}
