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
