//! The PersistentVolume controller and volume protection of `rkube server` (with the scheduler
//! and one simulated node), driven by kubectl: Immediate claims bind to the smallest pre-created
//! volume that fits (phases, claimRef, upstream's annotations); a claim nothing fits stays
//! Pending with upstream's FailedBinding event; Retain volumes turn Released when their claim
//! goes, Delete volumes with no deleter Failed with upstream's event; an external provisioner's
//! class gets the claim annotated and upstream's ExternalProvisioning event; a claim used by a
//! pod and a bound volume stay Terminating until the pod, respectively the claim, is gone; a
//! WaitForFirstConsumer claim waits (upstream's event) and binds once its pod is scheduled; with a
//! provisioner's class, the scheduler selects the node and the pod waits in PreBind until the
//! provisioned volume (created here as an external provisioner would) is bound.

mod support;

use std::time::{Duration, Instant};

use support::{Backend, Cluster};

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(45);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn get(c: &Cluster, what: &[&str], path: &str) -> String {
    let jsonpath = format!("jsonpath={path}");
    let mut args = vec!["get"];
    args.extend_from_slice(what);
    args.extend_from_slice(&["-o", &jsonpath]);
    c.kubectl(&args)
}

/// Whether an object exists (`kind name`).
fn exists(c: &Cluster, kind: &str, name: &str) -> bool {
    !c.kubectl(&["get", kind, name, "--ignore-not-found", "-o", "name"])
        .trim()
        .is_empty()
}

/// `reason|message` of the events about an object, one a line.
fn events(c: &Cluster, kind: &str, name: &str) -> String {
    c.kubectl(&[
        "get",
        "events",
        "--field-selector",
        &format!("involvedObject.kind={kind},involvedObject.name={name}"),
        "-o",
        "jsonpath={range .items[*]}{.reason}|{.message}|{.source.component}{\"\\n\"}{end}",
    ])
}

fn volume(name: &str, size: &str, policy: &str, extra: &str) -> String {
    format!(
        "apiVersion: v1\nkind: PersistentVolume\nmetadata: {{name: {name}}}\nspec:\n  capacity: {{storage: {size}}}\n  accessModes: [ReadWriteOnce]\n  persistentVolumeReclaimPolicy: {policy}\n  hostPath: {{path: /tmp/{name}}}\n{extra}---\n"
    )
}

fn claim(name: &str, size: &str, extra: &str) -> String {
    format!(
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {{name: {name}}}\nspec:\n  accessModes: [ReadWriteOnce]\n  resources: {{requests: {{storage: {size}}}}}\n{extra}---\n"
    )
}

fn pod(name: &str, claim: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers: [{{name: c, image: registry.k8s.io/pause:3.10}}]\n  volumes: [{{name: data, persistentVolumeClaim: {{claimName: {claim}}}}}]\n---\n"
    )
}

fn phase(c: &Cluster, kind: &str, name: &str) -> String {
    get(c, &[kind, name], "{.status.phase}")
}

#[test]
fn claims_bind_release_and_are_protected() {
    // No default class: the claims below keep no class, as in a cluster without one.
    let c = Cluster::start_all(
        Backend::Sqlite,
        &["--sim-nodes", "1", "--disable-local-path"],
    );
    wait_for("the default service account", || {
        c.kubectl_output(&["get", "serviceaccount", "default"], None)
            .status
            .success()
    });

    // --- Immediate binding to the smallest volume that fits.
    let objects = [
        volume("pv-small", "1Gi", "Retain", ""),
        volume("pv-big", "5Gi", "Retain", ""),
        claim("data", "1Gi", ""),
        claim("huge", "100Gi", ""),
    ]
    .concat();
    c.kubectl_in(&["apply", "-f", "-"], Some(&objects));
    wait_for("data bound", || phase(&c, "pvc", "data") == "Bound");
    wait_for("pv-small bound", || phase(&c, "pv", "pv-small") == "Bound");
    let uid = get(&c, &["pvc", "data"], "{.metadata.uid}");
    assert_eq!(
        get(&c, &["pvc", "data"], "{.spec.volumeName} {.metadata.annotations.pv\\.kubernetes\\.io/bind-completed} {.metadata.annotations.pv\\.kubernetes\\.io/bound-by-controller} {.status.capacity.storage} {.status.accessModes}"),
        "pv-small yes yes 1Gi [\"ReadWriteOnce\"]"
    );
    assert_eq!(
        get(&c, &["pv", "pv-small"], "{.spec.claimRef.kind} {.spec.claimRef.namespace}/{.spec.claimRef.name} {.spec.claimRef.uid} {.metadata.annotations.pv\\.kubernetes\\.io/bound-by-controller}"),
        format!("PersistentVolumeClaim default/data {uid} yes")
    );
    // Both carry the protection finalizers (StorageObjectInUseProtection is on by default).
    assert_eq!(
        get(&c, &["pvc", "data"], "{.metadata.finalizers}"),
        "[\"kubernetes.io/pvc-protection\"]"
    );
    assert_eq!(
        get(&c, &["pv", "pv-small"], "{.metadata.finalizers}"),
        "[\"kubernetes.io/pv-protection\"]"
    );
    assert_eq!(phase(&c, "pv", "pv-big"), "Available");

    // --- Nothing fits: Pending with upstream's event.
    wait_for("FailedBinding of huge", || {
        events(&c, "PersistentVolumeClaim", "huge").contains(
            "FailedBinding|no persistent volumes available for this claim and no storage class is set|persistentvolume-controller",
        )
    });
    assert_eq!(phase(&c, "pvc", "huge"), "Pending");
    c.kubectl(&["delete", "pvc", "huge"]);

    // --- Retain: the volume is Released when its claim goes.
    c.kubectl(&["delete", "pvc", "data", "--timeout=30s"]);
    wait_for("pv-small released", || {
        phase(&c, "pv", "pv-small") == "Released"
    });
    assert_eq!(
        get(&c, &["pv", "pv-small"], "{.spec.claimRef.name}"),
        "data"
    );

    // --- A claim in use stays until its pod goes.
    c.kubectl_in(
        &["apply", "-f", "-"],
        Some(&[claim("busy", "2Gi", ""), pod("user", "busy")].concat()),
    );
    wait_for("busy bound to pv-big", || {
        get(&c, &["pvc", "busy"], "{.spec.volumeName}") == "pv-big"
    });
    wait_for("user scheduled", || {
        !get(&c, &["pod", "user"], "{.spec.nodeName}").is_empty()
    });
    c.kubectl(&["delete", "pvc", "busy", "--wait=false"]);
    wait_for("busy terminating", || {
        !get(&c, &["pvc", "busy"], "{.metadata.deletionTimestamp}").is_empty()
    });
    // The protection controller has had its chance: the claim is still there, finalizer and all.
    let held_until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < held_until {
        assert_eq!(
            get(&c, &["pvc", "busy"], "{.metadata.finalizers}"),
            "[\"kubernetes.io/pvc-protection\"]"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    c.kubectl(&["delete", "pod", "user", "--timeout=30s"]);
    wait_for("busy gone", || !exists(&c, "pvc", "busy"));
    wait_for("pv-big released", || {
        phase(&c, "pv", "pv-big") == "Released"
    });

    // --- A bound volume stays until its claim goes.
    c.kubectl_in(
        &["apply", "-f", "-"],
        Some(
            &[
                volume("pv-held", "1Gi", "Retain", ""),
                claim("holder", "1Gi", "  volumeName: pv-held\n"),
            ]
            .concat(),
        ),
    );
    wait_for("pv-held bound", || phase(&c, "pv", "pv-held") == "Bound");
    // A claim naming its volume chose it itself: no bound-by-controller on the claim.
    wait_for("holder bound", || phase(&c, "pvc", "holder") == "Bound");
    assert_eq!(
        get(&c, &["pvc", "holder"], "{.metadata.annotations.pv\\.kubernetes\\.io/bind-completed}|{.metadata.annotations.pv\\.kubernetes\\.io/bound-by-controller}"),
        "yes|"
    );
    c.kubectl(&["delete", "pv", "pv-held", "--wait=false"]);
    wait_for("pv-held terminating", || {
        !get(&c, &["pv", "pv-held"], "{.metadata.deletionTimestamp}").is_empty()
    });
    let held_until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < held_until {
        assert_eq!(phase(&c, "pv", "pv-held"), "Bound");
        std::thread::sleep(Duration::from_millis(300));
    }
    c.kubectl(&["delete", "pvc", "holder", "--timeout=30s"]);
    wait_for("pv-held gone", || !exists(&c, "pv", "pv-held"));

    // --- Delete with no deleter for the volume's source: Failed with upstream's event.
    c.kubectl_in(
        &["apply", "-f", "-"],
        Some(
            &[
                volume("pv-del", "1Gi", "Delete", ""),
                claim("doomed", "1Gi", "  volumeName: pv-del\n"),
            ]
            .concat(),
        ),
    );
    wait_for("doomed bound", || phase(&c, "pvc", "doomed") == "Bound");
    c.kubectl(&["delete", "pvc", "doomed", "--timeout=30s"]);
    wait_for("pv-del failed", || phase(&c, "pv", "pv-del") == "Failed");
    wait_for("VolumeFailedDelete", || {
        events(&c, "PersistentVolume", "pv-del").contains(
            "VolumeFailedDelete|error getting deleter volume plugin for volume \"pv-del\": no deletable volume plugin matched",
        )
    });
}

#[test]
fn provisioning_and_delayed_binding() {
    let c = Cluster::start_all(Backend::Sqlite, &["--sim-nodes", "1"]);
    wait_for("the default service account", || {
        c.kubectl_output(&["get", "serviceaccount", "default"], None)
            .status
            .success()
    });
    let classes = "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: external}\nprovisioner: example.com/nfs\n---\napiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: local}\nprovisioner: kubernetes.io/no-provisioner\nvolumeBindingMode: WaitForFirstConsumer\n---\n";
    c.kubectl_in(&["apply", "-f", "-"], Some(classes));

    // --- An external provisioner's class: the claim is annotated for it.
    c.kubectl_in(
        &["apply", "-f", "-"],
        Some(&claim("shared", "1Gi", "  storageClassName: external\n")),
    );
    wait_for("the provisioner annotation", || {
        get(&c, &["pvc", "shared"], "{.metadata.annotations.volume\\.kubernetes\\.io/storage-provisioner} {.metadata.annotations.volume\\.beta\\.kubernetes\\.io/storage-provisioner}")
            == "example.com/nfs example.com/nfs"
    });
    wait_for("ExternalProvisioning", || {
        events(&c, "PersistentVolumeClaim", "shared").contains(
            "ExternalProvisioning|Waiting for a volume to be created either by the external provisioner 'example.com/nfs' or manually by the system administrator. If volume creation is delayed, please verify that the provisioner is running and correctly registered.",
        )
    });
    assert_eq!(phase(&c, "pvc", "shared"), "Pending");

    // --- WaitForFirstConsumer: no binding until a pod using the claim is scheduled.
    let node_affinity = "  storageClassName: local\n  nodeAffinity:\n    required:\n      nodeSelectorTerms: [{matchExpressions: [{key: kubernetes.io/hostname, operator: Exists}]}]\n";
    c.kubectl_in(
        &["apply", "-f", "-"],
        Some(
            &[
                volume("local-1", "1Gi", "Retain", node_affinity),
                claim("later", "1Gi", "  storageClassName: local\n"),
            ]
            .concat(),
        ),
    );
    wait_for("WaitForFirstConsumer", || {
        events(&c, "PersistentVolumeClaim", "later").contains(
            "WaitForFirstConsumer|waiting for first consumer to be created before binding",
        )
    });
    assert_eq!(phase(&c, "pvc", "later"), "Pending");
    assert_eq!(phase(&c, "pv", "local-1"), "Available");
    c.kubectl_in(&["apply", "-f", "-"], Some(&pod("consumer", "later")));
    wait_for("later bound", || phase(&c, "pvc", "later") == "Bound");
    assert_eq!(get(&c, &["pvc", "later"], "{.spec.volumeName}"), "local-1");
    wait_for("local-1 bound", || phase(&c, "pv", "local-1") == "Bound");
    wait_for("consumer scheduled", || {
        !get(&c, &["pod", "consumer"], "{.spec.nodeName}").is_empty()
    });

    // --- Dynamic provisioning with delayed binding: the scheduler picks the node, the PV
    // controller hands the claim to the (external) provisioner, played here by the test.
    let class = "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: dynamic}\nprovisioner: example.com/fake\nvolumeBindingMode: WaitForFirstConsumer\n---\n";
    c.kubectl_in(
        &["apply", "-f", "-"],
        Some(
            &[
                class.to_string(),
                claim("made", "1Gi", "  storageClassName: dynamic\n"),
                pod("maker", "made"),
            ]
            .concat(),
        ),
    );
    let annotations = "{.metadata.annotations.volume\\.kubernetes\\.io/selected-node}|{.metadata.annotations.volume\\.kubernetes\\.io/storage-provisioner}";
    let mut node = String::new();
    wait_for("the selected node and the provisioner annotation", || {
        let got = get(&c, &["pvc", "made"], annotations);
        match got.split_once('|') {
            Some((n, "example.com/fake")) if !n.is_empty() => {
                node = n.to_string();
                true
            }
            _ => false,
        }
    });
    // The pod waits in PreBind meanwhile.
    assert_eq!(get(&c, &["pod", "maker"], "{.spec.nodeName}"), "");
    let uid = get(&c, &["pvc", "made"], "{.metadata.uid}");
    let provisioned = format!(
        "apiVersion: v1\nkind: PersistentVolume\nmetadata:\n  name: pvc-{uid}\n  annotations: {{pv.kubernetes.io/provisioned-by: example.com/fake}}\nspec:\n  capacity: {{storage: 1Gi}}\n  accessModes: [ReadWriteOnce]\n  persistentVolumeReclaimPolicy: Delete\n  storageClassName: dynamic\n  claimRef: {{namespace: default, name: made, uid: {uid}}}\n  hostPath: {{path: /tmp/made}}\n"
    );
    c.kubectl_in(&["create", "-f", "-"], Some(&provisioned));
    wait_for("made bound", || phase(&c, "pvc", "made") == "Bound");
    assert_eq!(
        get(&c, &["pvc", "made"], "{.spec.volumeName}"),
        format!("pvc-{uid}")
    );
    wait_for("maker scheduled on the selected node", || {
        get(&c, &["pod", "maker"], "{.spec.nodeName}") == node
    });
    // Its volume is the external provisioner's to delete: Released, not Failed.
    c.kubectl(&["delete", "pod", "maker", "--timeout=30s"]);
    c.kubectl(&["delete", "pvc", "made", "--timeout=30s"]);
    let pv = format!("pvc-{uid}");
    wait_for("the provisioned volume released", || {
        phase(&c, "pv", &pv) == "Released"
    });
}
