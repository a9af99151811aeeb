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
