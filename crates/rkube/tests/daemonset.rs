//! The DaemonSet controller of `rkube server` with the scheduler and simulated nodes, driven by
//! kubectl: seed 003's DaemonSet on every node (pinned by node affinity, with the daemon tolerations),
//! a node added and removed, cordon and a NoExecute taint, its ControllerRevisions, a rolling update of
//! the image, `rollout status` and `rollout undo`.

mod support;

use std::time::{Duration, Instant};

use support::{Backend, Cluster};

/// Seed 003's DaemonSet; a 1 s grace period so each replaced pod does not take 30 s to go.
const DS: &str = r#"
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: nginx-ds
spec:
  selector:
    matchLabels:
      app: nginx
  template:
    metadata:
      labels:
        app: nginx
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: nginx
        image: nginx
"#;

/// A node no simulated kubelet runs: it reports no capacity, so its daemon pod stays unscheduled.
const EXTRA_NODE: &str = r#"
apiVersion: v1
kind: Node
metadata:
  name: extra-node
  labels:
    kubernetes.io/hostname: extra-node
"#;

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

fn rollout(c: &Cluster) {
    let out = c.kubectl(&["rollout", "status", "daemonset/nginx-ds", "--timeout=45s"]);
    assert!(
        out.trim_end()
            .ends_with("daemon set \"nginx-ds\" successfully rolled out"),
        "{out}"
    );
}

/// `pod=node=affinity-node=image` for every pod of the DaemonSet, sorted.
fn placements(c: &Cluster) -> Vec<String> {
    let out = get(
        c,
        &["pods", "-l", "app=nginx"],
        "{range .items[*]}{.metadata.name}={.spec.nodeName}={.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchFields[0].values[0]}={.spec.containers[0].image} {end}",
    );
    let mut v: Vec<String> = out.split_whitespace().map(str::to_string).collect();
    v.sort();
    v
}

#[test]
fn daemonsets_cover_nodes_and_roll_out() {
    let c = Cluster::start_all(Backend::Sqlite, &["--sim-nodes", "3"]);
    c.kubectl_in(&["apply", "-f", "-"], Some(DS));
    rollout(&c);

    // One pod per node, bound to the node its affinity names.
    let nodes = get(&c, &["nodes"], "{.items[*].metadata.name}");
    let mut nodes: Vec<&str> = nodes.split_whitespace().collect();
    nodes.sort();
    assert_eq!(nodes.len(), 3);
    let placed = placements(&c);
    let mut on: Vec<String> = placed
        .iter()
        .map(|p| {
            let parts: Vec<&str> = p.split('=').collect();
            assert_eq!(parts[1], parts[2], "{p}");
            assert_eq!(parts[3], "nginx", "{p}");
            parts[1].to_string()
        })
        .collect();
    on.sort();
    assert_eq!(on, nodes);
    let pod = placed[0].split('=').next().unwrap().to_string();
    let tolerations = get(
        &c,
        &["pod", &pod],
        "{range .spec.tolerations[*]}{.key}:{.operator}:{.effect}:{.tolerationSeconds} {end}",
    );
    assert_eq!(
        tolerations.split_whitespace().collect::<Vec<_>>(),
        [
            "node.kubernetes.io/not-ready:Exists:NoExecute:",
            "node.kubernetes.io/unreachable:Exists:NoExecute:",
            "node.kubernetes.io/disk-pressure:Exists:NoSchedule:",
            "node.kubernetes.io/memory-pressure:Exists:NoSchedule:",
            "node.kubernetes.io/pid-pressure:Exists:NoSchedule:",
            "node.kubernetes.io/unschedulable:Exists:NoSchedule:",
        ]
    );
    let operator = get(
        &c,
        &["pod", &pod],
        "{.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchFields[0].key} {.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchFields[0].operator}",
    );
    assert_eq!(operator, "metadata.name In");

    // The revision, its hash on the pods, and the status as seed 003 shows them.
    let revision = get(
        &c,
        &["controllerrevisions"],
        "{.items[0].metadata.name} {.items[0].metadata.labels.controller-revision-hash} {.items[0].revision} {.items[0].metadata.ownerReferences[0].kind}/{.items[0].metadata.ownerReferences[0].name}",
    );
    let parts: Vec<&str> = revision.split(' ').collect();
    let hash = parts[1].to_string();
    assert_eq!(parts[0], format!("nginx-ds-{hash}"));
    assert_eq!(&parts[2..], ["1", "DaemonSet/nginx-ds"]);
    let labels = get(
        &c,
        &["pods", "-l", "app=nginx"],
        "{range .items[*]}{.metadata.labels.controller-revision-hash}/{.metadata.labels.pod-template-generation} {end}",
    );
    let want = format!("{hash}/1");
    assert!(labels.split_whitespace().all(|l| l == want), "{labels}");
    let status = "{.status.desiredNumberScheduled} {.status.currentNumberScheduled} {.status.numberReady} {.status.updatedNumberScheduled} {.status.numberAvailable} {.status.numberMisscheduled} {.status.observedGeneration}";
    assert_eq!(get(&c, &["ds", "nginx-ds"], status), "3 3 3 3 3 0 1");

    // A new node gets a pod pinned to it; removing the node removes the pod.
    c.kubectl_in(&["create", "-f", "-"], Some(EXTRA_NODE));
    wait_for("a pod for extra-node", || {
        placements(&c).iter().any(|p| p.contains("=extra-node="))
    });
    wait_for("4 desired", || {
        get(&c, &["ds", "nginx-ds"], "{.status.desiredNumberScheduled}") == "4"
    });
    c.kubectl(&["delete", "node", "extra-node"]);
    wait_for("the extra-node pod gone", || {
        placements(&c).len() == 3 && !placements(&c).iter().any(|p| p.contains("extra-node"))
    });
    wait_for("3 desired", || {
        get(&c, &["ds", "nginx-ds"], status) == "3 3 3 3 3 0 1"
    });

    // A cordoned node keeps its pod (daemon pods tolerate unschedulable); an untolerated NoExecute
    // taint evicts it, and it comes back once the taint is gone.
    c.kubectl(&["cordon", nodes[0]]);
    c.kubectl(&["taint", "node", nodes[1], "dedicated=x:NoExecute"]);
    wait_for("the tainted node's pod gone", || {
        let placed = placements(&c);
        placed.len() == 2
            && !placed
                .iter()
                .any(|p| p.contains(&format!("={}=", nodes[1])))
    });
    assert!(placements(&c)
        .iter()
        .any(|p| p.contains(&format!("={}=", nodes[0]))));
    wait_for("2 desired", || {
        get(&c, &["ds", "nginx-ds"], status) == "2 2 2 2 2 0 1"
    });
    c.kubectl(&["taint", "node", nodes[1], "dedicated-"]);
    c.kubectl(&["uncordon", nodes[0]]);
    wait_for("3 desired again", || {
        get(&c, &["ds", "nginx-ds"], status) == "3 3 3 3 3 0 1"
    });

    // A rolling update of the image, one node at a time (maxUnavailable 1), then back.
    c.kubectl(&["set", "image", "daemonset/nginx-ds", "nginx=nginx:1.26"]);
    rollout(&c);
    let images: Vec<String> = placements(&c)
        .iter()
        .map(|p| p.rsplit('=').next().unwrap().to_string())
        .collect();
    assert_eq!(images, ["nginx:1.26"; 3]);
    assert_eq!(get(&c, &["ds", "nginx-ds"], status), "3 3 3 3 3 0 2");
    let revisions = get(
        &c,
        &["controllerrevisions"],
        "{range .items[*]}{.revision} {end}",
    );
    let mut revisions: Vec<&str> = revisions.split_whitespace().collect();
    revisions.sort();
    assert_eq!(revisions, ["1", "2"]);

    assert_eq!(
        c.kubectl(&["rollout", "undo", "daemonset/nginx-ds"]).trim(),
        "daemonset.apps/nginx-ds rolled back"
    );
    rollout(&c);
    let images: Vec<String> = placements(&c)
        .iter()
        .map(|p| p.rsplit('=').next().unwrap().to_string())
        .collect();
    assert_eq!(images, ["nginx"; 3]);
    let first = get(
        &c,
        &["controllerrevision", &format!("nginx-ds-{hash}")],
        "{.revision}",
    );
    assert_eq!(first, "3");
    let history = c.kubectl(&["rollout", "history", "daemonset/nginx-ds"]);
    let numbers: Vec<&str> = history
        .lines()
        .skip(2)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(numbers, ["2", "3"], "{history}");
}
