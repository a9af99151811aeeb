//! The attach/detach controller of `rkube server` with two simulated nodes, the test playing the
//! external CSI attacher (it sets `status.attached` on the VolumeAttachments): a CSI volume used by
//! a pod gets upstream's VolumeAttachment `csi-<sha256(handle+driver+node)>`, appears in the node's
//! `status.volumesAttached` once attached (with the pod's SuccessfulAttachVolume event); a driver
//! whose CSIDriver says `attachRequired: false` gets none; a second pod on another node using the
//! same ReadWriteOnce volume gets upstream's Multi-Attach event and no attachment until the first
//! pod is gone, then the volume is detached from the first node and attached to the second.

mod support;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::{Backend, Cluster};

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
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

/// `name|attacher|node|volume|attached` of every VolumeAttachment, one a line, sorted.
fn attachments(c: &Cluster) -> Vec<String> {
    let out = get(
        c,
        &["volumeattachments"],
        "{range .items[*]}{.metadata.name}|{.spec.attacher}|{.spec.nodeName}|{.spec.source.persistentVolumeName}|{.status.attached}{\"\\n\"}{end}",
    );
    let mut lines: Vec<String> = out.lines().map(str::to_string).collect();
    lines.sort();
    lines
}

fn volumes_attached(c: &Cluster, node: &str) -> String {
    get(
        c,
        &["node", node],
        "{range .status.volumesAttached[*]}{.name}{\"\\n\"}{end}",
    )
}

/// `reason|message` of the events about a pod, one a line.
fn pod_events(c: &Cluster, pod: &str) -> String {
    c.kubectl(&[
        "get",
        "events",
        "--field-selector",
        &format!("involvedObject.kind=Pod,involvedObject.name={pod}"),
        "-o",
        "jsonpath={range .items[*]}{.reason}|{.message}{\"\\n\"}{end}",
    ])
}

/// Upstream's attachment name, computed with coreutils' sha256sum rather than the code under test.
fn attachment_name(handle: &str, driver: &str, node: &str) -> String {
    let mut child = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("sha256sum");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(format!("{handle}{driver}{node}").as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let hex = String::from_utf8(out.stdout).unwrap();
    format!("csi-{}", hex.split_whitespace().next().unwrap())
}

fn csi_volume(name: &str, driver: &str, handle: &str, claim: &str) -> String {
    format!(
        "apiVersion: v1\nkind: PersistentVolume\nmetadata: {{name: {name}}}\nspec:\n  capacity: {{storage: 1Gi}}\n  accessModes: [ReadWriteOnce]\n  csi: {{driver: {driver}, volumeHandle: {handle}}}\n  claimRef: {{namespace: default, name: {claim}}}\n---\napiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {{name: {claim}}}\nspec:\n  storageClassName: \"\"\n  volumeName: {name}\n  accessModes: [ReadWriteOnce]\n  resources: {{requests: {{storage: 1Gi}}}}\n---\n"
    )
}

fn pod(name: &str, node: &str, claims: &[&str]) -> String {
    let volumes: Vec<String> = claims
        .iter()
        .map(|c| format!("{{name: {c}, persistentVolumeClaim: {{claimName: {c}}}}}"))
        .collect();
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  nodeName: {node}\n  terminationGracePeriodSeconds: 0\n  containers: [{{name: c, image: registry.k8s.io/pause:3.10}}]\n  volumes: [{}]\n---\n",
        volumes.join(", ")
    )
}

fn set_attached(c: &Cluster, name: &str) {
    c.kubectl(&[
        "patch",
        "volumeattachment",
        name,
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"attached":true}}"#,
    ]);
}

#[test]
fn csi_volumes_attach_to_the_node_of_their_pod_and_move_with_it() {
    let c = Cluster::start_all(
        Backend::Sqlite,
        &["--sim-nodes", "2", "--disable-local-path"],
    );
    wait_for("two nodes", || {
        get(&c, &["nodes"], "{.items[*].metadata.name}") == "sim-0 sim-1"
    });
    let mut manifest = String::from(
        "apiVersion: storage.k8s.io/v1\nkind: CSIDriver\nmetadata: {name: noattach.example.com}\nspec: {attachRequired: false}\n---\n",
    );
    manifest.push_str(&csi_volume("pv-a", "csi.example.com", "h-a", "claim-a"));
    manifest.push_str(&csi_volume(
        "pv-b",
        "noattach.example.com",
        "h-b",
        "claim-b",
    ));
    c.kubectl_in(&["apply", "-f", "-"], Some(&manifest));
    wait_for("both claims bound", || {
        get(&c, &["pvc"], "{.items[*].status.phase}") == "Bound Bound"
    });

    c.kubectl_in(
        &["apply", "-f", "-"],
        Some(&pod("user", "sim-0", &["claim-a", "claim-b"])),
    );
    let on_0 = attachment_name("h-a", "csi.example.com", "sim-0");
    wait_for("the attachment of pv-a to sim-0", || {
        !attachments(&c).is_empty()
    });
    // Only pv-a's driver needs attaching; nothing is attached until the attacher says so.
    assert_eq!(
        attachments(&c),
        [format!("{on_0}|csi.example.com|sim-0|pv-a|")]
    );
    assert_eq!(volumes_attached(&c, "sim-0"), "");

    set_attached(&c, &on_0);
    wait_for("pv-a in sim-0's volumesAttached", || {
        volumes_attached(&c, "sim-0") == "kubernetes.io/csi/csi.example.com^h-a\n"
    });
    wait_for("the SuccessfulAttachVolume event", || {
        pod_events(&c, "user")
            .contains("SuccessfulAttachVolume|AttachVolume.Attach succeeded for volume \"pv-a\" ")
    });

    // The same ReadWriteOnce volume wanted on another node: refused while sim-0 has it.
    c.kubectl_in(
        &["apply", "-f", "-"],
        Some(&pod("other", "sim-1", &["claim-a"])),
    );
    wait_for("the Multi-Attach event", || {
        pod_events(&c, "other").contains(
            "FailedAttachVolume|Multi-Attach error for volume \"pv-a\" Volume is already used by pod(s) user",
        )
    });
    assert_eq!(attachments(&c).len(), 1, "{:?}", attachments(&c));

    // The first pod goes: detached from sim-0, then attached to sim-1.
    c.kubectl(&["delete", "pod", "user", "--wait=false"]);
    let on_1 = attachment_name("h-a", "csi.example.com", "sim-1");
    wait_for("pv-a to move to sim-1", || {
        attachments(&c) == [format!("{on_1}|csi.example.com|sim-1|pv-a|")]
    });
    wait_for("sim-0's volumesAttached to empty", || {
        volumes_attached(&c, "sim-0").is_empty()
    });
    set_attached(&c, &on_1);
    wait_for("pv-a in sim-1's volumesAttached", || {
        volumes_attached(&c, "sim-1") == "kubernetes.io/csi/csi.example.com^h-a\n"
    });

    c.kubectl(&["delete", "pod", "other", "--wait=false"]);
    wait_for("the last attachment to go", || attachments(&c).is_empty());
    wait_for("sim-1's volumesAttached to empty", || {
        volumes_attached(&c, "sim-1").is_empty()
    });
}
