//! The ReplicaSet controller of `rkube server` with the scheduler and simulated nodes: a ReplicaSet's
//! pods are created, scheduled and Running, replaced when deleted, scaled down in upstream's order, an
//! orphan matching the selector is adopted, and the status counts ready and available replicas; a
//! ReplicationController is kept the same way.

mod support;

use std::time::{Duration, Instant};

use support::{Backend, Cluster};

fn eventually(what: &str, mut check: impl FnMut() -> Result<(), String>) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match check() {
            Ok(()) => return,
            Err(e) if Instant::now() >= deadline => panic!("{what} not within 60 s: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(250)),
        }
    }
}

const REPLICASET: &str = r#"
apiVersion: apps/v1
kind: ReplicaSet
metadata: {name: web}
spec:
  replicas: 6
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 1
      containers: [{name: nginx, image: nginx, resources: {requests: {cpu: 100m}}}]
"#;

#[test]
fn a_replicaset_keeps_its_pods_running() {
    let c = Cluster::start_all(Backend::Sqlite, &["--sim-nodes", "3"]);
    let running = |c: &Cluster| -> Vec<String> {
        c.kubectl(&[
            "get",
            "pods",
            "-l",
            "app=web",
            "--field-selector",
            "status.phase=Running",
            "-o",
            "name",
        ])
        .lines()
        .map(str::to_string)
        .collect()
    };
    let pods = |c: &Cluster| {
        c.kubectl(&["get", "pods", "-l", "app=web", "-o", "name"])
            .lines()
            .count()
    };
    // An orphan with the selector's labels, there before the ReplicaSet: adopted, so only 5 are created.
    c.kubectl_in(&["create", "-f", "-"], Some("apiVersion: v1\nkind: Pod\nmetadata: {name: orphan, labels: {app: web}}\nspec: {terminationGracePeriodSeconds: 1, containers: [{name: c, image: nginx}]}\n"));
    c.kubectl_in(&["create", "-f", "-"], Some(REPLICASET));
    eventually("6 pods Running", || {
        let r = running(&c);
        (r.len() == 6 && pods(&c) == 6)
            .then_some(())
            .ok_or(format!("{r:?}"))
    });
    let owner = c.kubectl(&[
        "get",
        "pod",
        "orphan",
        "-o",
        "jsonpath={.metadata.ownerReferences[0].name}/{.metadata.ownerReferences[0].controller}",
    ]);
    assert_eq!(owner, "web/true");
    eventually("status", || {
        let s = c.kubectl(&["get", "rs", "web", "-o", "jsonpath={.status.replicas}/{.status.readyReplicas}/{.status.availableReplicas}/{.status.observedGeneration}"]);
        (s == "6/6/6/1").then_some(()).ok_or(s)
    });
    let table = c.kubectl(&["get", "rs", "web"]);
    assert!(
        table
            .lines()
            .nth(1)
            .unwrap()
            .split_whitespace()
            .collect::<Vec<_>>()[..4]
            == ["web", "6", "6", "6"],
        "{table}"
    );

    // A deleted pod is replaced.
    let victim = running(&c)[0].clone();
    c.kubectl(&["delete", &victim, "--wait=false"]);
    eventually("a replacement", || {
        let r = running(&c);
        (r.len() == 6 && !r.contains(&victim))
            .then_some(())
            .ok_or(format!("{r:?}"))
    });

    // Scaled down to 2, then up to 4.
    c.kubectl(&["scale", "rs", "web", "--replicas=2"]);
    eventually("2 pods", || {
        let n = pods(&c);
        (n == 2).then_some(()).ok_or(format!("{n} pods"))
    });
    c.kubectl(&["scale", "rs", "web", "--replicas=4"]);
    eventually("4 pods Running", || {
        let r = running(&c);
        (r.len() == 4).then_some(()).ok_or(format!("{r:?}"))
    });
    eventually("status after scaling", || {
        let s = c.kubectl(&[
            "get",
            "rs",
            "web",
            "-o",
            "jsonpath={.status.replicas}/{.status.readyReplicas}/{.status.observedGeneration}",
        ]);
        (s == "4/4/3").then_some(()).ok_or(s)
    });
}

#[test]
fn a_replication_controller_keeps_its_pods_running() {
    let c = Cluster::start_all(Backend::Sqlite, &["--sim-nodes", "2"]);
    c.kubectl_in(
        &["apply", "-f", "-"],
        Some(
            r#"
apiVersion: v1
kind: ReplicationController
metadata: {name: legacy}
spec:
  replicas: 3
  template:
    metadata: {labels: {app: legacy}}
    spec:
      terminationGracePeriodSeconds: 0
      containers: [{name: c, image: legacy:1}]
"#,
        ),
    );
    let status = |c: &Cluster| {
        c.kubectl(&[
            "get",
            "rc",
            "legacy",
            "-o",
            "jsonpath={.status.replicas}/{.status.readyReplicas}/{.status.availableReplicas}",
        ])
    };
    eventually("3 ready replicas", || {
        let s = status(&c);
        (s == "3/3/3").then_some(()).ok_or(s)
    });
    let owners = c.kubectl(&[
        "get",
        "pods",
        "-l",
        "app=legacy",
        "-o",
        "jsonpath={range .items[*]}{.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name} {end}",
    ]);
    assert_eq!(
        owners.split_whitespace().collect::<Vec<_>>(),
        ["ReplicationController/legacy"; 3]
    );
    c.kubectl(&["scale", "rc", "legacy", "--replicas=1"]);
    eventually("1 pod left", || {
        let n = c
            .kubectl(&["get", "pods", "-l", "app=legacy", "-o", "name"])
            .lines()
            .count();
        (n == 1 && status(&c) == "1/1/1")
            .then_some(())
            .ok_or(format!("{n} pods, status {}", status(&c)))
    });
}
