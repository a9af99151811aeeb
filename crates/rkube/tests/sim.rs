//! Simulated nodes in `rkube server --sim-nodes 100`: a Deployment's 300 pods, placed by the
//! scheduler, all run and become Ready with distinct IPs from their nodes' pod CIDRs; deleting some is
//! confirmed after the grace period (and the ReplicaSet replaces them); a Job whose pods run for 1 s
//! completes; a node whose heartbeats are stopped lets its Lease go stale, and renews it again once
//! resumed.

mod support;

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::json;
use support::{Backend, Cluster};

const NODES: usize = 100;
const PODS: usize = 300;

/// Polls `check` every 250 ms until it holds, for at most `limit`.
async fn eventually<F, Fut>(what: &str, limit: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let deadline = Instant::now() + limit;
    loop {
        match check().await {
            Ok(()) => return,
            Err(e) if Instant::now() >= deadline => panic!("{what} not within {limit:?}: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

fn in_cidr(ip: Ipv4Addr, cidr: &str) -> bool {
    let (base, prefix) = cidr.split_once('/').unwrap();
    let base: Ipv4Addr = base.parse().unwrap();
    let prefix: u32 = prefix.parse().unwrap();
    let mask = if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - prefix)
    };
    u32::from(ip) & mask == u32::from(base) & mask
}

fn ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

async fn renew_time(leases: &Api<Lease>, name: &str) -> jiff::Timestamp {
    leases
        .get(name)
        .await
        .unwrap()
        .spec
        .unwrap()
        .renew_time
        .unwrap()
        .0
}

#[test]
fn simulated_nodes_run_pods() {
    let c = Cluster::start_all(
        Backend::Sqlite,
        &[
            "--sim-nodes",
            &NODES.to_string(),
            "--sim-lease-renew-interval",
            "1s",
        ],
    );
    support::runtime().block_on(async {
        let client = c.client().await;
        let nodes: Api<Node> = Api::all(client.clone());
        let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
        let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");

        // The simulator starts after the server announced itself.
        eventually("100 nodes and their leases", Duration::from_secs(60), || {
            let (nodes, leases) = (nodes.clone(), leases.clone());
            async move {
                let n = nodes.list(&ListParams::default()).await.map_err(|e| e.to_string())?.items.len();
                let l = leases.list(&ListParams::default()).await.map_err(|e| e.to_string())?.items.len();
                (n == NODES && l == NODES).then_some(()).ok_or(format!("{n} nodes, {l} leases"))
            }
        })
        .await;
        let node_list = nodes.list(&ListParams::default()).await.unwrap().items;
        let mut cidrs = HashMap::new();
        let mut zones = HashSet::new();
        for n in &node_list {
            let status = n.status.as_ref().unwrap();
            let ready = status.conditions.as_ref().unwrap().iter().find(|c| c.type_ == "Ready").unwrap();
            assert_eq!(ready.status, "True");
            assert_eq!(status.capacity.as_ref().unwrap()["pods"].0, "110");
            zones.insert(n.metadata.labels.as_ref().unwrap()["topology.kubernetes.io/zone"].clone());
            let host_ip = status.addresses.as_ref().unwrap()[0].address.clone();
            cidrs.insert(n.metadata.name.clone().unwrap(), (n.spec.as_ref().unwrap().pod_cidr.clone().unwrap(), host_ip));
        }
        assert_eq!(zones.len(), 3);

        // The Deployment and ReplicaSet controllers create the pods, the scheduler places them.
        let deployment: Deployment = serde_json::from_value(json!({
            "metadata": {"name": "web"},
            "spec": {"replicas": PODS, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"terminationGracePeriodSeconds": 2,
                                           "containers": [{"name": "nginx", "image": "nginx",
                                                           "resources": {"requests": {"cpu": "100m"}}}]}}}
        }))
        .unwrap();
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
        deployments.create(&PostParams::default(), &deployment).await.unwrap();

        eventually("300 pods Running and Ready", Duration::from_secs(90), || {
            let pods = pods.clone();
            async move {
                let list = pods.list(&ListParams::default().labels("app=web")).await.map_err(|e| e.to_string())?;
                let running = list.items.iter().filter(|p| ready(p)).count();
                (running == PODS).then_some(()).ok_or(format!("{running} ready"))
            }
        })
        .await;
        let list = pods.list(&ListParams::default().labels("app=web")).await.unwrap().items;
        let mut ips = HashSet::new();
        for p in &list {
            let status = p.status.as_ref().unwrap();
            assert_eq!(status.phase.as_deref(), Some("Running"));
            let node = p.spec.as_ref().unwrap().node_name.clone().unwrap();
            let (cidr, host_ip) = &cidrs[&node];
            let ip: Ipv4Addr = status.pod_ip.as_deref().unwrap().parse().unwrap();
            assert!(in_cidr(ip, cidr), "{ip} outside {cidr} of {node}");
            assert_eq!(status.host_ip.as_ref(), Some(host_ip));
            assert!(ips.insert(ip), "{ip} given twice");
            let container = &status.container_statuses.as_ref().unwrap()[0];
            assert!(container.ready && container.state.as_ref().unwrap().running.is_some());
            let types: Vec<&str> = status.conditions.as_ref().unwrap().iter().map(|c| c.type_.as_str()).collect();
            for t in ["PodScheduled", "Initialized", "ContainersReady", "Ready"] {
                assert!(types.contains(&t), "{types:?}");
            }
        }

        // Graceful deletion: the pods linger with a deletionTimestamp, then go after their 2 s
        // (deletionTimestamp has whole seconds: at least 1 s); the ReplicaSet replaces them.
        let started = Instant::now();
        let doomed: Vec<String> = list.iter().take(20).map(|p| p.metadata.name.clone().unwrap()).collect();
        let mut responses = Vec::new();
        for name in &doomed {
            responses.push(pods.delete(name, &DeleteParams::default()).await.unwrap());
        }
        // A graceful delete answers with the pod, now carrying its deletionTimestamp (read from the
        // response: on a slow machine the pod may be gone before a later GET).
        let lingering = responses.remove(0).left().expect("a graceful delete returns the pod");
        assert!(lingering.metadata.deletion_timestamp.is_some());
        eventually("deleted pods gone and replaced", Duration::from_secs(30), || {
            let (pods, doomed) = (pods.clone(), doomed.clone());
            async move {
                let list = pods.list(&ListParams::default().labels("app=web")).await.map_err(|e| e.to_string())?.items;
                let left = list.iter().filter(|p| doomed.contains(p.metadata.name.as_ref().unwrap())).count();
                let ready = list.iter().filter(|p| ready(p)).count();
                (left == 0 && ready == PODS).then_some(()).ok_or(format!("{left} deleted ones left, {ready} ready"))
            }
        })
        .await;
        assert!(started.elapsed() >= Duration::from_secs(1));

        // A Job whose pods run for a second and succeed completes.
        let job: Job = serde_json::from_value(json!({
            "metadata": {"name": "once"},
            "spec": {"completions": 2, "parallelism": 2, "template": {
                "metadata": {"annotations": {"sim.rkube.io/run-for": "1s"}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}
        }))
        .unwrap();
        let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
        jobs.create(&PostParams::default(), &job).await.unwrap();
        eventually("the Job completed", Duration::from_secs(60), || {
            let jobs = jobs.clone();
            async move {
                let j = jobs.get("once").await.map_err(|e| e.to_string())?;
                let status = j.status.unwrap_or_default();
                let complete = status.conditions.iter().flatten().any(|c| c.type_ == "Complete" && c.status == "True");
                (complete && status.succeeded == Some(2)).then_some(()).ok_or(format!("{:?} succeeded", status.succeeded))
            }
        })
        .await;

        // Stopped heartbeats: the Lease of sim-7 stops being renewed while sim-8's goes on; resumed, it
        // is renewed again.
        let stop = json!({"metadata": {"annotations": {"sim.rkube.io/heartbeat": "stopped"}}});
        nodes.patch("sim-7", &PatchParams::default(), &Patch::Merge(&stop)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let (stale, other) = (renew_time(&leases, "sim-7").await, renew_time(&leases, "sim-8").await);
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(renew_time(&leases, "sim-7").await, stale, "a stopped node renewed its lease");
        assert!(renew_time(&leases, "sim-8").await > other);
        let resume = json!({"metadata": {"annotations": {"sim.rkube.io/heartbeat": null}}});
        nodes.patch("sim-7", &PatchParams::default(), &Patch::Merge(&resume)).await.unwrap();
        eventually("the lease renewed again", Duration::from_secs(10), || {
            let leases = leases.clone();
            async move {
                (renew_time(&leases, "sim-7").await > stale).then_some(()).ok_or_else(|| "stale".to_string())
            }
        })
        .await;
    });
}
