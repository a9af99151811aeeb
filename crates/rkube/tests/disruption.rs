//! PodDisruptionBudgets with the disruption controller and the eviction subresource: the budget's
//! status follows the pods it selects; an eviction takes one allowed disruption (and records the pod
//! in disruptedPods), the next is refused with 429 naming the budget until a replacement is healthy;
//! a percentage maxUnavailable counts the Deployment's scale; pending pods are evicted regardless.

mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{EvictParams, ListParams};
use kube::Api;
use support::{Backend, Cluster};

fn wait_for(c: &Cluster, what: &str, args: &[&str], want: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = c.kubectl(args);
        if out == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {out} (want {want})"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

const STATUS: &str = "jsonpath={.status.currentHealthy}/{.status.desiredHealthy}/{.status.expectedPods}/{.status.disruptionsAllowed}/{.status.conditions[0].reason}";

#[test]
fn budgets_limit_evictions() {
    let c = Cluster::start_all(Backend::Sqlite, &["--sim-nodes", "3"]);
    // Pods of no controller: nothing replaces an evicted one until the test does.
    for i in 0..3 {
        c.kubectl(&[
            "run",
            &format!("solo-{i}"),
            "--image=solo:1",
            "--labels=app=solo",
        ]);
    }
    c.kubectl(&[
        "create",
        "pdb",
        "solo",
        "--selector=app=solo",
        "--min-available=2",
    ]);
    wait_for(
        &c,
        "the budget's status",
        &["get", "pdb", "solo", "-o", STATUS],
        "3/2/3/1/SufficientPods",
    );

    support::runtime().block_on(async {
        let pods: Api<Pod> = Api::namespaced(c.client().await, "default");
        let names: Vec<String> = pods
            .list(&ListParams::default().labels("app=solo"))
            .await
            .unwrap()
            .items
            .into_iter()
            .filter_map(|p| p.metadata.name)
            .collect();
        assert_eq!(
            names.len(),
            3,
            "{}",
            c.kubectl(&["get", "pods", "--show-labels", "-A"])
        );
        pods.evict(&names[0], &EvictParams::default())
            .await
            .expect("the first eviction is allowed");
        let evicted = pods.get(&names[0]).await.unwrap();
        assert!(evicted.metadata.deletion_timestamp.is_some());
        let condition = evicted
            .status
            .unwrap()
            .conditions
            .unwrap()
            .into_iter()
            .find(|c| c.type_ == "DisruptionTarget")
            .unwrap();
        assert_eq!(condition.reason.as_deref(), Some("EvictionByEvictionAPI"));

        // The budget is spent: the next eviction is refused with 429 and the budget's numbers.
        match pods.evict(&names[1], &EvictParams::default()).await {
            Err(kube::Error::Api(e)) => {
                assert_eq!((e.code, e.reason.as_str()), (429, "TooManyRequests"));
                assert_eq!(
                    e.message,
                    "Cannot evict pod as it would violate the pod's disruption budget."
                );
            }
            other => panic!("expected 429, got {other:?}"),
        }
        assert!(pods
            .get(&names[1])
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_none());
    });

    wait_for(
        &c,
        "the spent budget",
        &["get", "pdb", "solo", "-o", "jsonpath={.status.currentHealthy}/{.status.disruptionsAllowed}/{.status.conditions[0].reason}"],
        "2/0/InsufficientPods",
    );
    // A replacement becomes healthy: one disruption is allowed again.
    c.kubectl(&["run", "solo-3", "--image=solo:1", "--labels=app=solo"]);
    wait_for(
        &c,
        "the budget to recover",
        &[
            "get",
            "pdb",
            "solo",
            "-o",
            "jsonpath={.status.disruptionsAllowed}",
        ],
        "1",
    );

    // maxUnavailable 34% of a Deployment's 3 rounds up to 2; the scale comes from the Deployment.
    c.kubectl(&[
        "create",
        "deployment",
        "web",
        "--image=web:1",
        "--replicas=3",
    ]);
    c.kubectl(&[
        "create",
        "pdb",
        "web-pct",
        "--selector=app=web",
        "--max-unavailable=34%",
    ]);
    wait_for(
        &c,
        "the percentage budget",
        &["get", "pdb", "web-pct", "-o", STATUS],
        "3/1/3/2/SufficientPods",
    );
}
