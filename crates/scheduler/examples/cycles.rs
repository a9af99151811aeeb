//! The scheduling algorithm alone, with no API server: `--nodes` nodes (4 CPU, 32Gi, 110 pods, three
//! zones, as upstream scheduler_perf's default node) in the cache, then `--pods` pods of a scenario
//! scheduled one after another with the default profile, each assumed where it lands. Prints pods/s
//! of the cycles (PreFilter to selectHost) and their latency percentiles.
//!
//!     cargo run --release -p scheduler --example cycles -- [basic|topology-spread|anti-affinity] NODES PODS

use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::{Node, Pod};
use scheduler::cache::Cache;
use scheduler::framework::{parallelize::Parallelizer, Handle};
use scheduler::queue::Nominator;
use serde_json::json;

fn node(i: usize) -> Arc<Node> {
    let name = format!("node-{i}");
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                "topology.kubernetes.io/zone": format!("zone-{}", i % 3)}},
            "status": {"allocatable": {"cpu": "4", "memory": "32Gi", "pods": "110"},
                       "capacity": {"cpu": "4", "memory": "32Gi", "pods": "110"}}
        }))
        .unwrap(),
    )
}

fn pod(scenario: &str, i: usize) -> Arc<Pod> {
    let mut p = json!({
        "metadata": {"name": format!("pod-{i}"), "namespace": "sched", "uid": format!("uid-{i}"),
                     "labels": {"color": "blue"}},
        "spec": {"schedulerName": "default-scheduler", "containers": [{"name": "pause", "image": "pause",
            "ports": [{"containerPort": 80}],
            "resources": {"requests": {"cpu": "100m", "memory": "500Mi"},
                          "limits": {"cpu": "100m", "memory": "500Mi"}}}]}
    });
    match scenario {
        "basic" => {}
        "topology-spread" => {
            p["spec"]["topologySpreadConstraints"] = json!([{"maxSkew": 5,
                "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"color": "blue"}}}]);
        }
        "anti-affinity" => {
            p["metadata"]["labels"] = json!({"color": "green"});
            p["spec"]["affinity"] = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"color": "green"}}, "topologyKey": "kubernetes.io/hostname"}]}});
        }
        other => panic!("unknown scenario {other}"),
    }
    Arc::new(serde_json::from_value(p).unwrap())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let scenario = args.get(1).map_or("basic", String::as_str);
    let nodes: usize = args.get(2).map_or(5000, |s| s.parse().unwrap());
    let pods: usize = args.get(3).map_or(10000, |s| s.parse().unwrap());
    let cores = std::env::var("PARALLELISM")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let handle = Handle {
        parallelizer: Parallelizer::new(cores),
        ..Default::default()
    };
    let config = scheduler::KubeSchedulerConfiguration::default_config();
    let fw = scheduler::profile::new_framework(
        &config.profiles[0],
        handle,
        Arc::new(Nominator::default()),
    )
    .unwrap();
    eprintln!(
        "NodeInfo is {} bytes",
        std::mem::size_of::<scheduler::framework::NodeInfo>()
    );
    let mut cache = Cache::default();
    for i in 0..nodes {
        cache.update_node(node(i));
    }
    let pods: Vec<Arc<Pod>> = (0..pods).map(|i| pod(scenario, i)).collect();
    let mut next_start = 0;
    let mut latencies = Vec::with_capacity(pods.len());
    let started = Instant::now();
    let mut failed = 0;
    for p in pods.iter() {
        let t = Instant::now();
        if let Err(e) =
            scheduler::scheduler::schedule_in_memory(&fw, &mut cache, p.clone(), &mut next_start, 0)
        {
            failed += 1;
            if failed == 1 {
                eprintln!("first failure: {e}");
            }
        }
        latencies.push(t.elapsed());
    }
    let took = started.elapsed();
    // Where the pods went: per zone, and the most on one node (a check on the placement).
    let snapshot = cache.snapshot();
    let mut zones = std::collections::BTreeMap::<String, usize>::new();
    let mut most = 0;
    for n in &snapshot.nodes {
        let zone = n
            .labels()
            .and_then(|l| l.get("topology.kubernetes.io/zone"))
            .cloned();
        *zones.entry(zone.unwrap_or_default()).or_default() += n.pods.len();
        most = most.max(n.pods.len());
    }
    eprintln!("pods per zone {zones:?}, at most {most} on a node");
    latencies.sort();
    let q = |f: f64| latencies[((latencies.len() as f64 * f) as usize).min(latencies.len() - 1)];
    println!(
        "{scenario}: {nodes} nodes, {} pods in {:.2}s = {:.0} pods/s; cycle p50 {:?} p99 {:?} max {:?}; {failed} unschedulable",
        pods.len(),
        took.as_secs_f64(),
        pods.len() as f64 / took.as_secs_f64(),
        q(0.5),
        q(0.99),
        latencies.last().unwrap()
    );
}
