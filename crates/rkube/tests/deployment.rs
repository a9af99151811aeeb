//! The Deployment controller of `rkube server` with the scheduler and simulated nodes, driven by
//! kubectl: create, rollout status, a rolling update to a new image, history, undo (the old
//! ReplicaSet becomes revision 3) and scaling.

mod support;

use support::{Backend, Cluster};

fn rollout(c: &Cluster) {
    let out = c.kubectl(&["rollout", "status", "deployment/web", "--timeout=60s"]);
    assert!(
        out.trim_end()
            .ends_with("deployment \"web\" successfully rolled out"),
        "{out}"
    );
}

#[test]
fn deployments_roll_out_and_back() {
    let c = Cluster::start_all(Backend::Sqlite, &["--sim-nodes", "3"]);
    c.kubectl(&[
        "create",
        "deployment",
        "web",
        "--image=nginx:1.25",
        "--replicas=3",
    ]);
    rollout(&c);
    let ready = c.kubectl(&[
        "get",
        "deployment",
        "web",
        "-o",
        "jsonpath={.status.readyReplicas}/{.status.updatedReplicas}/{.status.availableReplicas}",
    ]);
    assert_eq!(ready, "3/3/3");
    let first_rs = c.kubectl(&[
        "get",
        "rs",
        "-l",
        "app=web",
        "-o",
        "jsonpath={.items[0].metadata.name}",
    ]);
    let hash = c.kubectl(&[
        "get",
        "rs",
        &first_rs,
        "-o",
        "jsonpath={.metadata.labels.pod-template-hash}",
    ]);
    assert_eq!(first_rs, format!("web-{hash}"));

    c.kubectl(&["set", "image", "deployment/web", "nginx=nginx:1.26"]);
    rollout(&c);
    let replicas = c.kubectl(&["get", "rs", "-l", "app=web", "-o", "jsonpath={range .items[*]}{.spec.template.spec.containers[0].image}={.spec.replicas}/{.metadata.annotations.deployment\\.kubernetes\\.io/revision} {end}"]);
    let mut got: Vec<&str> = replicas.split_whitespace().collect();
    got.sort();
    assert_eq!(got, ["nginx:1.25=0/1", "nginx:1.26=3/2"]);
    let running = c.kubectl(&[
        "get",
        "pods",
        "-l",
        "app=web",
        "--field-selector",
        "status.phase=Running",
        "-o",
        "jsonpath={.items[*].spec.containers[0].image}",
    ]);
    assert_eq!(
        running
            .split_whitespace()
            .filter(|i| *i == "nginx:1.26")
            .count(),
        3,
        "{running}"
    );

    assert_eq!(
        c.kubectl(&["rollout", "undo", "deployment/web"]).trim(),
        "deployment.apps/web rolled back"
    );
    rollout(&c);
    let image = c.kubectl(&["get", "deployment", "web", "-o", "jsonpath={.spec.template.spec.containers[0].image} {.metadata.annotations.deployment\\.kubernetes\\.io/revision}"]);
    assert_eq!(image, "nginx:1.25 3");
    let history = c.kubectl(&["rollout", "history", "deployment/web"]);
    let revisions: Vec<&str> = history
        .lines()
        .skip(2)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(revisions, ["2", "3"], "{history}");

    c.kubectl(&["scale", "deployment", "web", "--replicas=5"]);
    rollout(&c);
    assert_eq!(
        c.kubectl(&[
            "get",
            "deployment",
            "web",
            "-o",
            "jsonpath={.status.availableReplicas}"
        ]),
        "5"
    );
}

/// Polls kubectl until `done` accepts its output (bounded).
fn wait_for(c: &Cluster, args: &[&str], what: &str, done: impl Fn(&str) -> bool) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let out = c.kubectl(args);
        if done(&out) {
            return out;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}; last: {out}"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// `<image>[+nowhere]=<replicas>` of each ReplicaSet of app=api, sorted (`+nowhere`: the template
/// with the node selector no node matches).
fn replicasets(c: &Cluster) -> Vec<String> {
    let out = c.kubectl(&["get", "rs", "-l", "app=api", "-o", "jsonpath={range .items[*]}{.spec.template.spec.containers[0].image}{.spec.template.spec.nodeSelector.nowhere}={.spec.replicas} {end}"]);
    let mut v: Vec<String> = out.split_whitespace().map(String::from).collect();
    v.sort();
    v
}

#[test]
fn paused_resized_and_stuck_rollouts_behave_as_upstream() {
    let c = Cluster::start_all(Backend::Sqlite, &["--sim-nodes", "3"]);
    c.kubectl(&[
        "create",
        "deployment",
        "api",
        "--image=api:1",
        "--replicas=6",
    ]);
    let status = |c: &Cluster| c.kubectl(&["rollout", "status", "deployment/api", "--timeout=60s"]);
    assert!(status(&c).contains("successfully rolled out"));
    let progressing = "jsonpath={.status.conditions[?(@.type==\"Progressing\")].reason}";

    // Paused: a template change starts nothing, a resize still happens, the condition says paused.
    c.kubectl(&["rollout", "pause", "deployment/api"]);
    wait_for(
        &c,
        &["get", "deployment", "api", "-o", progressing],
        "the paused condition",
        |r| r == "DeploymentPaused",
    );
    c.kubectl(&["set", "image", "deployment/api", "api=api:2"]);
    c.kubectl(&["scale", "deployment", "api", "--replicas=8"]);
    wait_for(
        &c,
        &[
            "get",
            "rs",
            "-l",
            "app=api",
            "-o",
            "jsonpath={.items[*].spec.replicas}",
        ],
        "the paused resize",
        |r| r == "8",
    );
    assert_eq!(replicasets(&c), ["api:1=8"]);

    // Resumed: the rollout to api:2 runs to the end.
    c.kubectl(&["rollout", "resume", "deployment/api"]);
    assert!(status(&c).contains("successfully rolled out"));
    assert_eq!(replicasets(&c), ["api:1=0", "api:2=8"]);

    // A rollout whose pods can never be placed exceeds its progress deadline and says so.
    c.kubectl(&[
        "patch",
        "deployment",
        "api",
        "-p",
        r#"{"spec":{"progressDeadlineSeconds":3,"template":{"spec":{"nodeSelector":{"nowhere":"true"}}}}}"#,
    ]);
    let out = c.kubectl_fails(
        &["rollout", "status", "deployment/api", "--timeout=60s"],
        None,
    );
    assert!(
        out.contains("deployment \"api\" exceeded its progress deadline"),
        "{out}"
    );
    assert_eq!(
        c.kubectl(&["get", "deployment", "api", "-o", progressing]),
        "ProgressDeadlineExceeded"
    );
    // Stuck at maxSurge 2 / maxUnavailable 2 of 8: the new ReplicaSet has 4 pending pods, the old 6.
    let stuck = replicasets(&c);
    assert_eq!(stuck, ["api:1=0", "api:2=6", "api:2true=4"], "{stuck:?}");

    // Resized mid-rollout: both ReplicaSets grow in proportion (upstream's arithmetic: 16 + 4 surge
    // over 10 sized for 10 -> 12 and 8).
    c.kubectl(&["scale", "deployment", "api", "--replicas=16"]);
    let sizes = wait_for(
        &c,
        &[
            "get",
            "rs",
            "-l",
            "app=api",
            "-o",
            "jsonpath={.items[*].spec.replicas}",
        ],
        "the proportional resize",
        |r| {
            r.split_whitespace()
                .filter_map(|n| n.parse::<i32>().ok())
                .sum::<i32>()
                == 20
        },
    );
    assert_eq!(
        replicasets(&c),
        ["api:1=0", "api:2=12", "api:2true=8"],
        "{sizes}"
    );
}

/// The rolling-update bounds upstream's e2e checks (`WaitForDeploymentCompleteAndCheckRolling`), at
/// every change the watches deliver while a 10-replica Deployment with maxSurge 3 and maxUnavailable 2
/// rolls to a new image: the ReplicaSets' replicas never sum to more than 13 and the Deployment never
/// reports fewer than 8 available.
#[test]
fn rolling_updates_stay_within_surge_and_unavailability() {
    use futures::{StreamExt, TryStreamExt};
    use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
    use kube::api::{Api, ListParams, WatchEvent, WatchParams};
    use std::collections::BTreeMap;

    let c = Cluster::start_all(Backend::Sqlite, &["--sim-nodes", "3"]);
    let manifest = r#"apiVersion: apps/v1
kind: Deployment
metadata: {name: roll}
spec:
  replicas: 10
  selector: {matchLabels: {app: roll}}
  strategy:
    type: RollingUpdate
    rollingUpdate: {maxSurge: 3, maxUnavailable: 2}
  template:
    metadata: {labels: {app: roll}}
    spec: {containers: [{name: c, image: "roll:1"}]}
"#;
    c.kubectl_in(&["apply", "-f", "-"], Some(manifest));
    c.kubectl(&["rollout", "status", "deployment/roll", "--timeout=60s"]);

    let rt = support::runtime();
    let client = rt.block_on(c.client());
    let rss: Api<ReplicaSet> = Api::namespaced(client.clone(), "default");
    let deps: Api<Deployment> = Api::namespaced(client, "default");
    let (rs_list, dep_list) = rt.block_on(async {
        (
            rss.list(&ListParams::default().labels("app=roll"))
                .await
                .unwrap(),
            deps.list(&ListParams::default().fields("metadata.name=roll"))
                .await
                .unwrap(),
        )
    });
    let mut replicas: BTreeMap<String, i32> = rs_list
        .items
        .iter()
        .map(|rs| {
            (
                rs.metadata.name.clone().unwrap(),
                rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(replicas.values().sum::<i32>(), 10);
    let rs_rv = rs_list.metadata.resource_version.unwrap();
    let dep_rv = dep_list.metadata.resource_version.unwrap();

    // Both watches feed one channel; the checker sees every ReplicaSet and Deployment change in order
    // per resource.
    enum Change {
        Rs(String, i32),
        Available(i32, bool),
    }
    let (tx, rx) = std::sync::mpsc::channel::<Change>();
    let tx2 = tx.clone();
    let rs_watch = rt.spawn(async move {
        let mut s = rss
            .watch(&WatchParams::default().labels("app=roll"), &rs_rv)
            .await
            .unwrap()
            .boxed();
        while let Some(ev) = s.try_next().await.unwrap() {
            if let WatchEvent::Added(rs) | WatchEvent::Modified(rs) = ev {
                let n = rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0);
                if tx.send(Change::Rs(rs.metadata.name.unwrap(), n)).is_err() {
                    return;
                }
            }
        }
    });
    let dep_watch = rt.spawn(async move {
        let mut s = deps
            .watch(
                &WatchParams::default().fields("metadata.name=roll"),
                &dep_rv,
            )
            .await
            .unwrap()
            .boxed();
        while let Some(ev) = s.try_next().await.unwrap() {
            if let WatchEvent::Modified(d) = ev {
                let status = d.status.unwrap_or_default();
                let done = d.metadata.generation == status.observed_generation
                    && status.updated_replicas == Some(10)
                    && status.available_replicas == Some(10)
                    && status.replicas == Some(10);
                let available = status.available_replicas.unwrap_or(0);
                if tx2.send(Change::Available(available, done)).is_err() {
                    return;
                }
            }
        }
    });

    c.kubectl(&["set", "image", "deployment/roll", "c=roll:2"]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    let (mut max_total, mut min_available, mut changes) = (10, 10, 0);
    let mut new_rs_seen = false;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left).expect("the rollout did not finish") {
            Change::Rs(name, n) => {
                new_rs_seen |= !replicas.contains_key(&name);
                replicas.insert(name, n);
                let total: i32 = replicas.values().sum();
                assert!(total <= 13, "ReplicaSets sum to {total}: {replicas:?}");
                max_total = max_total.max(total);
            }
            Change::Available(available, done) => {
                assert!(available >= 8, "only {available} available");
                min_available = min_available.min(available);
                if done && new_rs_seen {
                    break;
                }
            }
        }
        changes += 1;
    }
    rs_watch.abort();
    dep_watch.abort();
    // The surge was used, not just respected: the new ReplicaSet starts at maxSurge pods. (Whether
    // availability dips below 10 depends on how fast the simulated pods become ready: not asserted.)
    assert_eq!(
        max_total, 13,
        "surge never used ({changes} changes, min available {min_available})"
    );
    c.kubectl(&["rollout", "status", "deployment/roll", "--timeout=60s"]);
}
