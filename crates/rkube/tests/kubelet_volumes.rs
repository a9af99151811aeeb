//! Kubelet volumes on a real node (busybox), checked as upstream's node conformance checks them:
//! file contents, modes and owners (`stat`, following the `..data` symlink), atomic updates of a
//! mounted ConfigMap and of downward API labels while the pod runs, downward API resource values
//! with divisors, fsGroup ownership read by a non-root user, and mount failures with upstream's
//! event texts. One node and one main pod carry most checks, to keep the time small; the node
//! syncs pods every 5 s so updates show quickly. Needs what `kubelet.rs` needs (root, containerd,
//! `scripts/images.sh`).

#[path = "support/real_node.rs"]
mod real_node;
mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use real_node::{wait_for, RealNode};

const OBJECTS: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: cfg}
data: {greeting: hello, other: x}
---
apiVersion: v1
kind: Secret
metadata: {name: sec}
stringData: {token: s3cret}
---
apiVersion: v1
kind: Pod
metadata:
  name: vols
  labels: {app: vols}
spec:
  terminationGracePeriodSeconds: 1
  # The fsGroup is in the user's groups as upstream adds it; listed too so that this test of the
  # volumes does not hang on the security context code.
  securityContext: {fsGroup: 1234, supplementalGroups: [1234]}
  containers:
  - name: c
    image: busybox
    command: [sh, -c, "cat /etc/podinfo/podname; echo; cat /etc/podinfo/cpu_limit; echo; exec sleep 3600"]
    securityContext: {runAsUser: 1000}
    resources: {limits: {cpu: 500m, memory: 64Mi}}
    volumeMounts:
    - {name: cfg, mountPath: /etc/cfg}
    - {name: sec, mountPath: /etc/sec}
    - {name: podinfo, mountPath: /etc/podinfo}
    - {name: proj, mountPath: /etc/proj}
    - {name: opt, mountPath: /etc/opt}
    - {name: cache, mountPath: /cache}
    - {name: cache, mountPath: /mine, subPathExpr: $(POD_NAME)}
    - {name: cache, mountPath: /ro, readOnly: true}
    - {name: cfg, mountPath: /greeting, subPath: greeting}
    env:
    - {name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
  - name: nolimit
    image: busybox
    command: [sleep, "3600"]
  volumes:
  - name: cfg
    configMap: {name: cfg}
  - name: sec
    secret: {secretName: sec, defaultMode: 0400}
  - name: opt
    configMap: {name: absent, optional: true}
  - name: cache
    emptyDir: {medium: Memory, sizeLimit: 16Mi}
  - name: podinfo
    downwardAPI:
      items:
      - {path: podname, fieldRef: {fieldPath: metadata.name}}
      - {path: labels, fieldRef: {fieldPath: metadata.labels}}
      - {path: cpu_limit, resourceFieldRef: {containerName: c, resource: limits.cpu, divisor: 1m}}
      - {path: mem/limit, mode: 0400, resourceFieldRef: {containerName: c, resource: limits.memory, divisor: 1Mi}}
      - {path: node_cpu, resourceFieldRef: {containerName: nolimit, resource: limits.cpu, divisor: 1m}}
  - name: proj
    projected:
      defaultMode: 0440
      sources:
      - configMap: {name: cfg, items: [{key: other, path: cm/other}]}
      - downwardAPI:
          items:
          - {path: cpu, resourceFieldRef: {containerName: c, resource: limits.cpu}}
          - {path: cpu_one, resourceFieldRef: {containerName: c, resource: limits.cpu, divisor: "1"}}
---
apiVersion: v1
kind: Pod
metadata: {name: bad-key}
spec:
  containers:
  - {name: c, image: busybox, command: [sleep, "3600"], volumeMounts: [{name: s, mountPath: /s}]}
  volumes:
  - name: s
    secret: {secretName: sec, items: [{key: nokey, path: k}]}
---
apiVersion: v1
kind: Pod
metadata: {name: bad-dev}
spec:
  # Bound here directly: the scheduler would wait for the claim, which need not exist.
  nodeName: rkube-node
  containers:
  - {name: c, image: busybox, command: [sleep, "3600"], volumeDevices: [{name: d, devicePath: /dev/xvda}]}
  volumes:
  - name: d
    persistentVolumeClaim: {claimName: blk}
"#;

fn bad_host_path(path: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: bad-host}}\nspec:\n  containers:\n  - {{name: c, image: busybox, command: [sleep, \"3600\"], volumeMounts: [{{name: h, mountPath: /h}}]}}\n  volumes:\n  - name: h\n    hostPath: {{path: {path}, type: Directory}}\n"
    )
}

/// Runs `script` in container `c` of pod `vols` (as its user, 1000) and returns `name=value` lines.
fn probe(node: &RealNode, script: &str) -> BTreeMap<String, String> {
    let out = node.kubectl(&["exec", "vols", "-c", "c", "--", "sh", "-c", script]);
    out.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn configmap_secret_downward_api_and_projected_volumes_as_upstream() {
    let node = RealNode::start_with(&["busybox"], &["--sync-frequency", "5s"]);
    node.apply(OBJECTS);
    let missing_dir = node.data.join("no-such-dir").display().to_string();
    node.apply(&bad_host_path(&missing_dir));
    let pod = node.wait_pod("vols", "Running", Duration::from_secs(120), |p| {
        p["status"]["phase"] == "Running"
    });

    // The downward API files existed when the container started (it printed them first).
    let log = wait_for(
        "the container's first lines",
        Duration::from_secs(30),
        || {
            let l = node.log(&pod, "c", 0);
            (l.lines().count() >= 2).then_some(l)
        },
    );
    assert_eq!(
        log.lines().take(2).collect::<Vec<_>>(),
        ["vols", "500"],
        "{log}"
    );

    let node_obj: serde_json::Value =
        serde_json::from_str(&node.kubectl(&["get", "node", real_node::NODE, "-o", "json"]))
            .unwrap();
    let alloc_cpu = node_obj["status"]["allocatable"]["cpu"]
        .as_str()
        .unwrap()
        .to_string();
    let alloc_milli = alloc_cpu
        .strip_suffix('m')
        .map(|m| m.parse::<i64>().unwrap())
        .unwrap_or_else(|| alloc_cpu.parse::<i64>().unwrap() * 1000);

    let got = probe(
        &node,
        "echo id=$(id -u):$(id -g):$(id -G | tr ' ' ,); \
         echo token=$(cat /etc/sec/token); \
         echo token_stat=$(stat -L -c '%a %u %g' /etc/sec/token); \
         echo token_link=$(readlink /etc/sec/token); \
         echo sec_data=$(stat -L -c '%a %u %g' /etc/sec/..data); \
         echo sec_root=$(stat -c '%a %g' /etc/sec); \
         echo cfg_link=$(readlink /etc/cfg/greeting); \
         echo cfg_data=$(readlink /etc/cfg/..data); \
         echo greeting=$(cat /etc/cfg/greeting); \
         echo greeting_stat=$(stat -L -c '%a %u %g' /etc/cfg/greeting); \
         echo opt=$(ls -A /etc/opt | tr '\\n' ,); \
         echo podname=$(cat /etc/podinfo/podname); \
         echo labels=$(cat /etc/podinfo/labels); \
         echo mem=$(cat /etc/podinfo/mem/limit); \
         echo mem_stat=$(stat -L -c '%a %g' /etc/podinfo/mem/limit); \
         echo node_cpu=$(cat /etc/podinfo/node_cpu); \
         echo proj_other=$(cat /etc/proj/cm/other); \
         echo proj_stat=$(stat -L -c '%a %g' /etc/proj/cm/other); \
         echo proj_cpu=$(cat /etc/proj/cpu); \
         echo proj_cpu_one=$(cat /etc/proj/cpu_one); \
         echo cache_mount=$(grep ' /cache ' /proc/mounts); \
         echo sec_fs=$(grep ' /etc/sec ' /proc/mounts | cut -d' ' -f3); \
         echo cfg_fs=$(grep ' /etc/cfg ' /proc/mounts | cut -d' ' -f3); \
         echo cache_stat=$(stat -c '%a %g' /cache); \
         echo hi > /mine/f && echo expr=$(cat /cache/vols/f); \
         touch /ro/x 2>/dev/null && echo ro=writable || echo ro=refused; \
         echo sub=$(cat /greeting); \
         echo sa_token=$(stat -L -c '%a %u %g' /var/run/secrets/kubernetes.io/serviceaccount/token)",
    );
    let want = |k: &str| got.get(k).map(String::as_str).unwrap_or("<missing>");
    // A non-root user in the fsGroup reads a 0400 secret: upstream gives it mode 0440, group 1234.
    assert!(want("id").starts_with("1000:0:"), "{got:?}");
    assert!(want("id").contains("1234"), "{got:?}");
    assert_eq!(want("token"), "s3cret", "{got:?}");
    assert_eq!(want("token_stat"), "440 0 1234", "{got:?}");
    assert_eq!(want("token_link"), "..data/token", "{got:?}");
    assert_eq!(want("sec_data"), "2755 0 1234", "{got:?}");
    assert_eq!(
        want("sec_root"),
        "3777 1234",
        "a tmpfs root (1777) given to the fsGroup"
    );
    assert_eq!(want("cfg_link"), "..data/greeting", "{got:?}");
    assert!(want("cfg_data").starts_with("..20"), "{got:?}");
    assert_eq!(want("greeting"), "hello");
    assert_eq!(want("greeting_stat"), "644 0 1234", "{got:?}");
    // An optional missing ConfigMap is an empty volume: a timestamped directory and ..data.
    let opt: Vec<&str> = want("opt").split(',').filter(|e| !e.is_empty()).collect();
    assert!(
        opt.len() == 2 && opt[0].starts_with("..20") && opt[1] == "..data",
        "{got:?}"
    );
    assert_eq!(want("podname"), "vols");
    assert_eq!(want("labels"), "app=\"vols\"");
    assert_eq!(want("mem"), "64");
    assert_eq!(want("mem_stat"), "440 1234");
    assert_eq!(want("node_cpu"), alloc_milli.to_string(), "{got:?}");
    assert_eq!(want("proj_other"), "x");
    assert_eq!(want("proj_stat"), "440 1234");
    assert_eq!(want("proj_cpu"), "1", "500m rounded up, divisor unset");
    assert_eq!(want("proj_cpu_one"), "1");
    // emptyDir in memory: a tmpfs of sizeLimit; secrets on tmpfs too, configMaps on disk.
    assert!(
        want("cache_mount").starts_with("tmpfs /cache tmpfs "),
        "{got:?}"
    );
    assert!(want("cache_mount").contains("size=16384k"), "{got:?}");
    assert_eq!(want("cache_stat"), "3777 1234", "{got:?}");
    assert_eq!(want("sec_fs"), "tmpfs", "{got:?}");
    assert_ne!(want("cfg_fs"), "tmpfs", "{got:?}");
    assert_eq!(want("expr"), "hi", "subPathExpr $(POD_NAME): {got:?}");
    assert_eq!(want("ro"), "refused", "{got:?}");
    assert_eq!(want("sub"), "hello", "subPath of a ConfigMap key: {got:?}");
    // The projected service account token: 0600 with an fsGroup (containers run as different
    // users, so no owner is set), then the group's read bit.
    assert_eq!(want("sa_token"), "640 0 1234", "{got:?}");

    // Mount failures: upstream's texts in FailedMount events.
    let expected = [
        "MountVolume.SetUp failed for volume \"s\" : references non-existent secret key: nokey"
            .to_string(),
        format!(
            "MountVolume.SetUp failed for volume \"h\" : hostPath type check failed: {missing_dir} is not a directory"
        ),
        "volumeDevices (raw block volumes) are not supported by the rkube kubelet: container \"c\" asks for /dev/xvda as a block device".to_string(),
    ];
    wait_for("the FailedMount events", Duration::from_secs(30), || {
        let events = node.events();
        expected
            .iter()
            .all(|e| events.contains(e.as_str()))
            .then_some(())
    });

    // Updates while the pod runs: the ConfigMap through a new ..data, the labels in place.
    let old_data = want("cfg_data").to_string();
    node.kubectl(&[
        "patch",
        "configmap",
        "cfg",
        "-p",
        r#"{"data":{"greeting":"bonjour"}}"#,
    ]);
    node.kubectl(&["label", "pod", "vols", "tier=web"]);
    let started = std::time::Instant::now();
    let got = wait_for(
        "the updated ConfigMap and labels in the volumes",
        Duration::from_secs(30),
        || {
            let got = probe(
                &node,
                "echo greeting=$(cat /etc/cfg/greeting); echo data=$(readlink /etc/cfg/..data); \
                 echo labels=$(cat /etc/podinfo/labels | tr '\\n' ' ')",
            );
            (got.get("greeting").map(String::as_str) == Some("bonjour")
                && got
                    .get("labels")
                    .is_some_and(|l| l.contains("tier=\"web\"")))
            .then_some(got)
        },
    );
    assert_ne!(got["data"], old_data, "a new timestamped directory");
    assert_eq!(got["labels"].trim(), "app=\"vols\" tier=\"web\"");
    eprintln!("updates seen after {:?}", started.elapsed());

    // The pod's tmpfs mounts go with it.
    let uid = pod["metadata"]["uid"].as_str().unwrap().to_string();
    let mounted = || {
        std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .filter(|l| l.contains(&uid))
            .count()
    };
    assert!(mounted() >= 4, "the tmpfs of cache, sec, podinfo and proj");
    node.kubectl(&["delete", "pod", "vols", "--wait=false"]);
    wait_for("the pod's mounts to go", Duration::from_secs(60), || {
        (node.pod("vols").is_none() && mounted() == 0).then_some(())
    });
}
