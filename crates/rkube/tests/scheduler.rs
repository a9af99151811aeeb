//! The scheduler of `rkube server` with simulated nodes: pods spread by free capacity, a pod
//! too big for any node reported as upstream does, node selectors, a pod pending until a node changes,
//! and taints with tolerations.

mod support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{ListParams, PostParams};
use kube::Api;
use serde_json::{json, Value};
use support::{Backend, Cluster};

async fn eventually<F, Fut, T>(what: &str, limit: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + limit;
    loop {
        match check().await {
            Ok(v) => return v,
            Err(e) if Instant::now() >= deadline => panic!("{what} not within {limit:?}: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

fn pod(name: &str, cpu: &str, extra: Value) -> Pod {
    let mut v = json!({
        "metadata": {"name": name, "labels": {"app": "sched"}},
        "spec": {"containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}]}
    });
    if let (Value::Object(spec), Value::Object(more)) = (&mut v["spec"], extra) {
        spec.extend(more);
    }
    serde_json::from_value(v).unwrap()
}

async fn node_of(pods: &Api<Pod>, name: &str) -> Result<String, String> {
    let p = pods.get(name).await.map_err(|e| e.to_string())?;
    let node = p.spec.and_then(|s| s.node_name).unwrap_or_default();
    let running = p.status.and_then(|s| s.phase).as_deref() == Some("Running");
    if node.is_empty() || !running {
        return Err(format!("{name} on {node:?}, running {running}"));
    }
    Ok(node)
}

async fn unschedulable_message(pods: &Api<Pod>, name: &str) -> Result<String, String> {
    let p = pods.get(name).await.map_err(|e| e.to_string())?;
    p.status
        .and_then(|s| s.conditions)
        .and_then(|c| {
            c.into_iter()
                .find(|c| c.type_ == "PodScheduled" && c.status == "False")
        })
        .filter(|c| c.reason.as_deref() == Some("Unschedulable"))
        .and_then(|c| c.message)
        .ok_or_else(|| format!("{name} not reported unschedulable"))
}

#[test]
fn the_scheduler_places_pods_on_simulated_nodes() {
    let c = Cluster::start_all(Backend::Sqlite, &["--sim-nodes", "10", "--sim-cpu", "4"]);
    let limit = Duration::from_secs(60);
    support::runtime().block_on(async {
        let client = c.client().await;
        let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
        // Ready and untainted, so that the spread below is not skewed by pods placed while some
        // nodes were still joining (under load, 7 of 40 pods once landed on one node that way).
        eventually("10 simulated nodes ready", limit, || {
            let c = &c;
            async move {
                let out = c.kubectl(&[
                    "get",
                    "nodes",
                    "-o",
                    r#"jsonpath={range .items[*]}{.metadata.name} {.status.conditions[?(@.type=="Ready")].status} {.spec.taints}{"\n"}{end}"#,
                ]);
                let ready = out.lines().filter(|l| l.split_whitespace().collect::<Vec<_>>().get(1) == Some(&"True") && l.split_whitespace().count() == 2).count();
                (ready == 10).then_some(()).ok_or(out)
            }
        })
        .await;

        // 40 pods of 500m on 10 nodes of 4 CPUs: every pod runs, spread by free capacity.
        for i in 0..40 {
            pods.create(&PostParams::default(), &pod(&format!("spread-{i}"), "500m", json!({})))
                .await
                .unwrap();
        }
        let mut per_node: HashMap<String, usize> = HashMap::new();
        for i in 0..40 {
            let name = format!("spread-{i}");
            let node = eventually("the pod running", limit, || node_of(&pods, &name)).await;
            *per_node.entry(node).or_default() += 1;
        }
        assert_eq!(per_node.len(), 10, "{per_node:?}");
        assert!(per_node.values().all(|n| (3..=5).contains(n)), "{per_node:?}");

        // Too big for any node: PodScheduled=False with upstream's message, and an event.
        pods.create(&PostParams::default(), &pod("huge", "5", json!({}))).await.unwrap();
        let message = eventually("huge reported", limit, || unschedulable_message(&pods, "huge")).await;
        assert_eq!(
            message,
            "0/10 nodes are available: 10 Insufficient cpu. no new claims to deallocate, preemption: 0/10 nodes are available: 10 No preemption victims found for incoming pod.."
        );
        let events: Api<Event> = Api::namespaced(client.clone(), "default");
        eventually("a FailedScheduling event", limit, || {
            let events = events.clone();
            async move {
                let list = events.list(&ListParams::default().fields("involvedObject.name=huge")).await.map_err(|e| e.to_string())?;
                list.items.iter().any(|e| e.reason.as_deref() == Some("FailedScheduling")).then_some(()).ok_or_else(|| "none".to_string())
            }
        })
        .await;

        // A node selector picks the node.
        let pinned = pod("pinned", "100m", json!({"nodeSelector": {"kubernetes.io/hostname": "sim-3"}}));
        pods.create(&PostParams::default(), &pinned).await.unwrap();
        assert_eq!(eventually("pinned running", limit, || node_of(&pods, "pinned")).await, "sim-3");

        // Pending until a node gets the label it asks for.
        let waiting = pod("waiting", "100m", json!({"nodeSelector": {"pool": "late"}}));
        pods.create(&PostParams::default(), &waiting).await.unwrap();
        let message = eventually("waiting reported", limit, || unschedulable_message(&pods, "waiting")).await;
        assert_eq!(
            message,
            "0/10 nodes are available: 10 node(s) didn't match Pod's node affinity/selector. no new claims to deallocate, preemption: 0/10 nodes are available: 10 Preemption is not helpful for scheduling.."
        );
        c.kubectl(&["label", "node", "sim-5", "pool=late"]);
        assert_eq!(eventually("waiting running", limit, || node_of(&pods, "waiting")).await, "sim-5");

        // Taints keep pods away unless tolerated.
        c.kubectl(&["taint", "node", "sim-6", "dedicated=db:NoSchedule"]);
        let selector = json!({"kubernetes.io/hostname": "sim-6"});
        pods.create(&PostParams::default(), &pod("intolerant", "100m", json!({"nodeSelector": selector.clone()}))).await.unwrap();
        let message = eventually("intolerant reported", limit, || unschedulable_message(&pods, "intolerant")).await;
        assert!(message.contains("1 node(s) had untolerated taint {dedicated: db}"), "{message}");
        let tolerant = pod(
            "tolerant",
            "100m",
            json!({"nodeSelector": selector, "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "db", "effect": "NoSchedule"}]}),
        );
        pods.create(&PostParams::default(), &tolerant).await.unwrap();
        assert_eq!(eventually("tolerant running", limit, || node_of(&pods, "tolerant")).await, "sim-6");
    });
}
