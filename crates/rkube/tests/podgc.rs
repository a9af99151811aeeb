//! The pod garbage collector of `rkube server`, with a small `--terminated-pod-gc-threshold` and the
//! (hidden) quarantine and period flags shortened: the oldest terminated pods beyond the threshold are
//! deleted, and a pod bound to a node that does not exist is marked Failed with a `DisruptionTarget`
//! condition, then deleted.

mod support;

use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{PostParams, WatchEvent, WatchParams};
use kube::Api;
use support::{Backend, Cluster};

fn eventually<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn pod_yaml(name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  labels: {{job: batch}}\n  annotations: {{sim.rkube.io/run-for: 1s}}\n\
         spec:\n  restartPolicy: Never\n  containers: [{{name: c, image: busybox}}]\n"
    )
}

#[test]
fn pod_gc_deletes_old_terminated_pods_and_orphans() {
    let c = Cluster::start_all(
        Backend::Sqlite,
        &[
            "--sim-nodes",
            "3",
            "--terminated-pod-gc-threshold",
            "2",
            "--pod-gc-quarantine",
            "2s",
            "--pod-gc-period",
            "1s",
        ],
    );
    // Four pods that succeed, created one after another: the two oldest go.
    for i in 1..=4 {
        c.kubectl_in(&["apply", "-f", "-"], Some(&pod_yaml(&format!("done-{i}"))));
        std::thread::sleep(Duration::from_millis(1100));
    }
    eventually("two terminated pods left", || {
        let out = c.kubectl(&[
            "get",
            "pods",
            "-l",
            "job=batch",
            "-o",
            "jsonpath={.items[*].metadata.name}",
        ]);
        (out == "done-3 done-4").then_some(())
    });
    let phases = c.kubectl(&[
        "get",
        "pods",
        "-l",
        "job=batch",
        "-o",
        "jsonpath={.items[*].status.phase}",
    ]);
    assert_eq!(phases, "Succeeded Succeeded");

    // A pod bound to a node that does not exist: marked Failed (DisruptionTarget), then deleted.
    support::runtime().block_on(async {
        let api: Api<Pod> = Api::namespaced(c.client().await, "default");
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "orphan"},
            "spec": {"nodeName": "ghost", "containers": [{"name": "c", "image": "busybox"}]}
        }))
        .unwrap();
        let created = api.create(&PostParams::default(), &pod).await.unwrap();
        let rv = created.metadata.resource_version.clone().unwrap();
        let params = WatchParams::default()
            .fields("metadata.name=orphan")
            .timeout(40);
        let mut events = api.watch(&params, &rv).await.unwrap().boxed();
        let mut marked = None;
        let deadline = Instant::now() + Duration::from_secs(40);
        while let Some(event) = events.try_next().await.unwrap() {
            match event {
                WatchEvent::Modified(p) => {
                    let status = p.status.clone().unwrap_or_default();
                    if status.phase.as_deref() == Some("Failed") {
                        marked = status
                            .conditions
                            .unwrap_or_default()
                            .into_iter()
                            .find(|c| c.type_ == "DisruptionTarget");
                    }
                }
                WatchEvent::Deleted(_) => break,
                _ => {}
            }
            assert!(Instant::now() < deadline, "the orphan was not deleted");
        }
        let condition = marked.expect("marked Failed with DisruptionTarget before deletion");
        assert_eq!(
            (
                condition.status.as_str(),
                condition.reason.as_deref(),
                condition.message.as_deref()
            ),
            (
                "True",
                Some("DeletionByPodGC"),
                Some("PodGC: node no longer exists")
            )
        );
        assert!(api.get_opt("orphan").await.unwrap().is_none());
    });
}
