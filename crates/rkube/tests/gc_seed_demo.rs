//! Seed 003's garbage-collector demo through kubectl, on `rkube server` with one simulated node:
//! deleting a StatefulSet takes its pod and ControllerRevision with it; deleting a DaemonSet with
//! `--cascade=orphan` leaves its pod running and its ControllerRevision with no owner.

mod support;

use std::time::{Duration, Instant};

use support::{Backend, Cluster};

/// Seed 003's StatefulSet (a 1 s grace period so its pod does not take 30 s to go).
const STS: &str = r#"
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: nginx-sts
spec:
  replicas: 1
  serviceName: nginx-sts
  selector:
    matchLabels:
      app: nginx-sts
  template:
    metadata:
      labels:
        app: nginx-sts
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: nginx
        image: nginx
"#;

/// Seed 003's DaemonSet.
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
      containers:
      - name: nginx
        image: nginx
"#;

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `kubectl get <what>` rows without the header: each row's columns.
fn rows(c: &Cluster, what: &str) -> Vec<Vec<String>> {
    c.kubectl(&["get", what])
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect()
}

#[test]
fn statefulset_cascades_and_orphaned_daemonset_keeps_its_pod_and_revision() {
    let c = Cluster::start_all(Backend::Sqlite, &["--sim-nodes", "1"]);

    // $ k create -f statefulset.yaml; the pod runs and one revision names its controller.
    c.kubectl_in(&["create", "-f", "-"], Some(STS));
    wait_for("nginx-sts-0 to run", || {
        rows(&c, "pods")
            .iter()
            .any(|r| r[0] == "nginx-sts-0" && r[2] == "Running")
    });
    let revisions = rows(&c, "controllerrevisions.apps");
    assert_eq!(revisions.len(), 1, "{revisions:?}");
    assert!(revisions[0][0].starts_with("nginx-sts-"), "{revisions:?}");
    assert_eq!(revisions[0][1], "statefulset.apps/nginx-sts");

    // $ k delete statefulsets.apps nginx-sts: the revision and the pod go too.
    let out = c.kubectl(&["delete", "statefulsets.apps", "nginx-sts"]);
    assert_eq!(out.trim(), "statefulset.apps \"nginx-sts\" deleted");
    wait_for("the StatefulSet's revision and pod to go", || {
        let none = |what: &str| {
            let out = c.kubectl_output(&["get", what], None);
            String::from_utf8_lossy(&out.stderr).trim()
                == "No resources found in default namespace."
        };
        none("controllerrevisions.apps") && none("po")
    });

    // $ k apply -f daemonset.yaml; one pod on the one node, one revision.
    c.kubectl_in(&["apply", "-f", "-"], Some(DS));
    wait_for("the daemon pod to run", || {
        rows(&c, "pods")
            .iter()
            .any(|r| r[0].starts_with("nginx-ds-") && r[2] == "Running")
    });
    let pod = rows(&c, "pods")[0][0].clone();
    let revisions = rows(&c, "controllerrevisions.apps");
    assert_eq!(revisions.len(), 1, "{revisions:?}");
    assert_eq!(revisions[0][1], "daemonset.apps/nginx-ds");
    let revision = revisions[0][0].clone();

    // $ k delete daemonsets.apps nginx-ds --cascade=orphan
    let out = c.kubectl(&["delete", "daemonsets.apps", "nginx-ds", "--cascade=orphan"]);
    assert_eq!(out.trim(), "daemonset.apps \"nginx-ds\" deleted");
    assert!(rows(&c, "daemonsets.apps").is_empty());
    // The revision stays, its CONTROLLER column <none>; the pod keeps running, without an owner.
    let revisions = rows(&c, "controllerrevisions.apps");
    assert_eq!(revisions.len(), 1, "{revisions:?}");
    assert_eq!(revisions[0][0], revision);
    assert_eq!(revisions[0][1], "<none>");
    let owners = c.kubectl(&[
        "get",
        "pod",
        &pod,
        "-o",
        "jsonpath={.status.phase} {.metadata.ownerReferences}",
    ]);
    assert_eq!(owners.trim(), "Running");
    let revision_owners = c.kubectl(&[
        "get",
        "controllerrevision",
        &revision,
        "-o",
        "jsonpath={.metadata.ownerReferences}",
    ]);
    assert_eq!(revision_owners, "");
}
