//! Persistent storage on `rkube server`'s real node: the default `local-path` StorageClass and its
//! provisioner, the PV controller, protection, expansion and generic ephemeral volumes, with
//! containers reading and writing the volumes.
//!
//! - Seed 003's `nginx-sts` with `volumeClaimTemplates` on the default class: a claim per pod,
//!   bound to a local-path volume on the node; a page written by `nginx-sts-0` survives the pod's
//!   deletion; the claim grows; scaling down with `whenScaled: Delete` removes the claim, the
//!   volume and its directory.
//! - A generic ephemeral volume comes (a claim owned by the pod) and goes with its pod.
//! - An Immediate claim binds to a matching pre-created volume, a too-large one stays Pending with
//!   upstream's event; the claim in use stays (Terminating) until its pod is gone.
//! - Volume stats: a file written into the claim shows in the kubelet's `/stats/summary`
//!   (`pods[].volume[]` with its `pvcRef`) and `kubelet_volume_stats_used_bytes` on `/metrics`,
//!   both read through the API server's node proxy (measured every second here: the server runs
//!   with `--volume-stats-agg-period 1s`).

#[path = "support/real_node.rs"]
mod real_node;
mod support;

use std::path::PathBuf;
use std::time::Duration;

use real_node::{wait_for, RealNode};
use serde_json::Value;

const TIMEOUT: Duration = Duration::from_secs(120);

const STS: &str = "apiVersion: v1
kind: Service
metadata: {name: nginx-sts}
spec:
  clusterIP: None
  selector: {app: nginx-sts}
  ports: [{port: 80}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: nginx-sts}
spec:
  serviceName: nginx-sts
  replicas: 2
  selector: {matchLabels: {app: nginx-sts}}
  persistentVolumeClaimRetentionPolicy: {whenDeleted: Retain, whenScaled: Delete}
  template:
    metadata: {labels: {app: nginx-sts}}
    spec:
      containers:
      - name: nginx
        image: nginx
        volumeMounts: [{name: www, mountPath: /usr/share/nginx/html}]
  volumeClaimTemplates:
  - metadata: {name: www}
    spec:
      accessModes: [ReadWriteOnce]
      resources: {requests: {storage: 1Gi}}
";

fn json(node: &RealNode, args: &[&str]) -> Option<Value> {
    let mut all = vec!["get"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-o", "json", "--ignore-not-found"]);
    let out = node.cluster.kubectl_output(&all, None);
    if !out.status.success() || out.stdout.is_empty() {
        return None;
    }
    serde_json::from_slice(&out.stdout).ok()
}

fn running(p: &Value) -> bool {
    p["status"]["phase"] == "Running"
        && p["status"]["containerStatuses"][0]["ready"] == Value::Bool(true)
}

/// The claim's phase and the volume it is bound to.
fn claim_state(node: &RealNode, name: &str) -> Option<(String, String)> {
    let c = json(node, &["pvc", name])?;
    Some((
        c["status"]["phase"].as_str().unwrap_or("").to_string(),
        c["spec"]["volumeName"].as_str().unwrap_or("").to_string(),
    ))
}

fn bound_volume(node: &RealNode, claim: &str) -> String {
    wait_for(&format!("claim {claim} bound"), TIMEOUT, || {
        claim_state(node, claim).filter(|(phase, pv)| phase == "Bound" && !pv.is_empty())
    })
    .1
}

/// The directory of a local-path volume (checked to be under the node's data dir).
fn directory(node: &RealNode, pv: &str) -> PathBuf {
    let v = json(node, &["pv", pv]).unwrap_or_else(|| panic!("pv {pv}"));
    let path = PathBuf::from(v["spec"]["hostPath"]["path"].as_str().unwrap_or(""));
    assert!(
        path.starts_with(node.data.join("local-path")),
        "{pv}: {}",
        path.display()
    );
    path
}

fn exec(node: &RealNode, pod: &str, script: &str) -> String {
    node.kubectl(&["exec", pod, "--", "sh", "-c", script])
}

fn gone(node: &RealNode, what: &[&str]) -> Option<()> {
    json(node, what).is_none().then_some(())
}

#[test]
fn local_path_volumes_on_a_real_node() {
    let mut node =
        RealNode::start_with(&["nginx", "busybox"], &["--volume-stats-agg-period", "1s"]);
    let class = json(&node, &["storageclass", "local-path"]).expect("the default class");
    assert_eq!(
        class["metadata"]["annotations"]["storageclass.kubernetes.io/is-default-class"],
        "true"
    );
    assert_eq!(class["volumeBindingMode"], "WaitForFirstConsumer");

    statefulset_keeps_its_data(&node);
    ephemeral_volume_follows_its_pod(&node);
    immediate_claims_and_protection(&node);
    node.cleanup();
}

fn statefulset_keeps_its_data(node: &RealNode) {
    node.apply(STS);
    for i in 0..2 {
        node.wait_pod(&format!("nginx-sts-{i}"), "running", TIMEOUT, running);
    }
    let pv0 = bound_volume(node, "www-nginx-sts-0");
    let pv1 = bound_volume(node, "www-nginx-sts-1");
    assert_ne!(pv0, pv1);
    let claim = json(node, &["pvc", "www-nginx-sts-0"]).unwrap();
    assert_eq!(claim["spec"]["storageClassName"], "local-path");
    assert_eq!(
        claim["metadata"]["annotations"]["volume.kubernetes.io/selected-node"],
        real_node::NODE
    );
    let volume = json(node, &["pv", &pv0]).unwrap();
    assert_eq!(
        volume["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]
            ["values"][0],
        real_node::NODE
    );
    assert_eq!(volume["spec"]["persistentVolumeReclaimPolicy"], "Delete");
    let dir0 = directory(node, &pv0);
    let dir1 = directory(node, &pv1);

    // What the pod writes lands in its volume's directory and outlives the pod.
    exec(
        node,
        "nginx-sts-0",
        "echo kept > /usr/share/nginx/html/index.html",
    );
    assert_eq!(
        std::fs::read_to_string(dir0.join("index.html")).unwrap(),
        "kept\n"
    );
    volume_stats_follow_writes(node);
    let uid = node.pod("nginx-sts-0").unwrap()["metadata"]["uid"].clone();
    node.kubectl(&["delete", "pod", "nginx-sts-0"]);
    node.wait_pod("nginx-sts-0", "recreated and running", TIMEOUT, |p| {
        p["metadata"]["uid"] != uid && running(p)
    });
    assert_eq!(
        exec(node, "nginx-sts-0", "cat /usr/share/nginx/html/index.html"),
        "kept\n"
    );
    assert_eq!(bound_volume(node, "www-nginx-sts-0"), pv0);

    // The claim grows: local-path needs no node-side resize, so the controller finishes it.
    node.kubectl(&[
        "patch",
        "pvc",
        "www-nginx-sts-0",
        "-p",
        r#"{"spec":{"resources":{"requests":{"storage":"2Gi"}}}}"#,
    ]);
    wait_for("the claim to grow", TIMEOUT, || {
        let c = json(node, &["pvc", "www-nginx-sts-0"])?;
        let v = json(node, &["pv", &pv0])?;
        (c["status"]["capacity"]["storage"] == "2Gi" && v["spec"]["capacity"]["storage"] == "2Gi")
            .then_some(())
    });

    // Scaled down with whenScaled: Delete, the second claim, its volume and directory go.
    node.kubectl(&["scale", "statefulset", "nginx-sts", "--replicas=1"]);
    wait_for("nginx-sts-1 gone", TIMEOUT, || {
        gone(node, &["pod", "nginx-sts-1"])
    });
    wait_for("www-nginx-sts-1 deleted", TIMEOUT, || {
        gone(node, &["pvc", "www-nginx-sts-1"])
    });
    wait_for("its volume deleted", TIMEOUT, || gone(node, &["pv", &pv1]));
    assert!(!dir1.exists(), "{} is still there", dir1.display());
    assert!(dir0.join("index.html").exists());
    node.kubectl(&["delete", "statefulset", "nginx-sts"]);
    wait_for("nginx-sts-0 gone", TIMEOUT, || {
        gone(node, &["pod", "nginx-sts-0"])
    });
    // whenDeleted: Retain keeps the first claim.
    assert_eq!(bound_volume(node, "www-nginx-sts-0"), pv0);
}

/// The `www` volume of `nginx-sts-0` in the kubelet's Summary, through the node proxy.
fn summary_volume(node: &RealNode) -> Option<Value> {
    let path = format!("/api/v1/nodes/{}/proxy/stats/summary", real_node::NODE);
    let summary: Value = serde_json::from_str(&node.kubectl(&["get", "--raw", &path])).ok()?;
    let pod = summary["pods"]
        .as_array()?
        .iter()
        .find(|p| p["podRef"]["name"] == "nginx-sts-0")?
        .clone();
    pod["volume"]
        .as_array()?
        .iter()
        .find(|v| v["name"] == "www")
        .cloned()
}

/// `kubelet_volume_stats_used_bytes` of the claim on the kubelet's `/metrics`.
fn metrics_used_bytes(node: &RealNode, claim: &str) -> Option<u64> {
    let path = format!("/api/v1/nodes/{}/proxy/metrics", real_node::NODE);
    let text = node.kubectl(&["get", "--raw", &path]);
    let series = format!(
        "kubelet_volume_stats_used_bytes{{namespace=\"default\",persistentvolumeclaim=\"{claim}\"}} "
    );
    text.lines()
        .find_map(|l| l.strip_prefix(&series))
        .and_then(|v| v.trim().parse().ok())
}

/// Issue 21: the kubelet reports a local-path claim's use, and it grows with what the pod writes.
fn volume_stats_follow_writes(node: &RealNode) {
    let before = wait_for("volume stats of www", TIMEOUT, || summary_volume(node));
    assert_eq!(before["pvcRef"]["name"], "www-nginx-sts-0");
    assert_eq!(before["pvcRef"]["namespace"], "default");
    for key in ["capacityBytes", "availableBytes", "inodes", "inodesFree"] {
        assert!(before[key].as_u64().unwrap_or(0) > 0, "{key}: {before}");
    }
    assert!(before["inodesUsed"].as_u64().unwrap_or(0) >= 1, "{before}");
    let used = before["usedBytes"].as_u64().unwrap();
    const WRITTEN: u64 = 8 << 20;
    exec(
        node,
        "nginx-sts-0",
        "head -c 8388608 /dev/zero > /usr/share/nginx/html/big && sync",
    );
    let after = wait_for("usedBytes to grow by the file", TIMEOUT, || {
        summary_volume(node).filter(|v| v["usedBytes"].as_u64().unwrap_or(0) >= used + WRITTEN)
    });
    assert!(
        after["usedBytes"].as_u64().unwrap() < used + 2 * WRITTEN,
        "{before} -> {after}"
    );
    wait_for("kubelet_volume_stats_used_bytes", TIMEOUT, || {
        metrics_used_bytes(node, "www-nginx-sts-0").filter(|&u| u >= used + WRITTEN)
    });
    exec(node, "nginx-sts-0", "rm /usr/share/nginx/html/big");
}

fn ephemeral_volume_follows_its_pod(node: &RealNode) {
    node.apply(
        "apiVersion: v1
kind: Pod
metadata: {name: scratch}
spec:
  containers:
  - name: c
    image: busybox
    command: [sh, -c, 'echo scratch > /cache/file && sleep 3600']
    volumeMounts: [{name: cache, mountPath: /cache}]
  terminationGracePeriodSeconds: 1
  volumes:
  - name: cache
    ephemeral:
      volumeClaimTemplate:
        metadata: {labels: {kind: scratch}}
        spec:
          accessModes: [ReadWriteOnce]
          resources: {requests: {storage: 64Mi}}
",
    );
    let pod = node.wait_pod("scratch", "running", TIMEOUT, running);
    let claim = json(node, &["pvc", "scratch-cache"]).expect("the ephemeral claim");
    let owner = &claim["metadata"]["ownerReferences"][0];
    assert_eq!(owner["kind"], "Pod");
    assert_eq!(owner["uid"], pod["metadata"]["uid"]);
    assert_eq!(owner["controller"], true);
    assert_eq!(claim["metadata"]["labels"]["kind"], "scratch");
    let pv = bound_volume(node, "scratch-cache");
    let dir = directory(node, &pv);
    wait_for("the pod's file", TIMEOUT, || {
        (std::fs::read_to_string(dir.join("file")).ok()? == "scratch\n").then_some(())
    });
    node.kubectl(&["delete", "pod", "scratch"]);
    wait_for("the ephemeral claim deleted", TIMEOUT, || {
        gone(node, &["pvc", "scratch-cache"])
    });
    wait_for("its volume deleted", TIMEOUT, || gone(node, &["pv", &pv]));
    assert!(!dir.exists(), "{} is still there", dir.display());
}

fn immediate_claims_and_protection(node: &RealNode) {
    let manual = node.data.join("manual-volume");
    std::fs::create_dir_all(&manual).unwrap();
    node.apply(&format!(
        "apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {{name: manual}}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: Immediate
---
apiVersion: v1
kind: PersistentVolume
metadata: {{name: manual}}
spec:
  storageClassName: manual
  capacity: {{storage: 1Gi}}
  accessModes: [ReadWriteOnce]
  hostPath: {{path: {}, type: Directory}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: fits}}
spec:
  storageClassName: manual
  accessModes: [ReadWriteOnce]
  resources: {{requests: {{storage: 500Mi}}}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: too-large}}
spec:
  storageClassName: manual
  accessModes: [ReadWriteOnce]
  resources: {{requests: {{storage: 5Gi}}}}
",
        manual.display()
    ));
    assert_eq!(bound_volume(node, "fits"), "manual");
    wait_for("the too-large claim's event", TIMEOUT, || {
        let events = node.kubectl(&[
            "get",
            "events",
            "--field-selector",
            "involvedObject.name=too-large",
            "-o",
            "jsonpath={range .items[*]}{.reason}|{.message}{\"\\n\"}{end}",
        ]);
        events
            .lines()
            .any(|l| l.starts_with("ProvisioningFailed|") || l.starts_with("FailedBinding|"))
            .then_some(())
    });
    assert_eq!(claim_state(node, "too-large").unwrap().0, "Pending");

    node.apply(
        "apiVersion: v1
kind: Pod
metadata: {name: holder}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: busybox
    command: [sh, -c, 'echo held > /data/file && sleep 3600']
    volumeMounts: [{name: data, mountPath: /data}]
  volumes:
  - name: data
    persistentVolumeClaim: {claimName: fits}
",
    );
    node.wait_pod("holder", "running", TIMEOUT, running);
    wait_for("the pod's file in the pre-created volume", TIMEOUT, || {
        (std::fs::read_to_string(manual.join("file")).ok()? == "held\n").then_some(())
    });
    // In use: deleting the claim only marks it; it goes with the pod.
    node.kubectl(&["delete", "pvc", "fits", "--wait=false"]);
    wait_for("the claim Terminating", TIMEOUT, || {
        let c = json(node, &["pvc", "fits"])?;
        c["metadata"]["deletionTimestamp"].is_string().then_some(())
    });
    assert_eq!(claim_state(node, "fits").unwrap().0, "Bound");
    assert!(node
        .pod("holder")
        .is_some_and(|p| p["metadata"]["deletionTimestamp"].is_null()));
    node.kubectl(&["delete", "pod", "holder"]);
    wait_for("the claim gone after its pod", TIMEOUT, || {
        gone(node, &["pvc", "fits"])
    });
    // A pre-created volume defaults to Retain: released, its data kept.
    wait_for("the volume Released", TIMEOUT, || {
        (json(node, &["pv", "manual"])?["status"]["phase"] == "Released").then_some(())
    });
    assert!(manual.join("file").exists());
}
