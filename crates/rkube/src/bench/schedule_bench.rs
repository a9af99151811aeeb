//! `rkube bench schedule`: pods from creation to bound and Running on simulated nodes (in the style of
//! upstream's scheduler_perf). Without `--kubeconfig` it starts everything in this process: an API
//! server on SQLite in a temporary directory, `--nodes` simulated nodes and the scheduler. `--pods`
//! pods of `--cpu` are created by `--concurrency` tasks; each pod's latency is from issuing its create
//! to the informer seeing it bound (scheduling latency) and Running; throughput is pods over the time
//! from the first create to the last pod bound (and Running).
//!
//! `--scenario` picks the pod shape of upstream's scheduler_perf workloads: `basic`
//! (SchedulingBasic), `topology-spread` (TopologySpreading: a hard zone constraint, maxSkew 5) and
//! `anti-affinity` (SchedulingPodAntiAffinity: required anti-affinity on the hostname, so every pod
//! needs a node of its own).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Args;
use client::informer::{EventHandlerFuncs, InformerConfig, SharedInformerFactory};
use futures::StreamExt;
use hdrhistogram::Histogram;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, ServiceAccount};
use kube::api::{ListParams, PostParams};
use kube::Api;
use serde_json::json;

const NAMESPACE: &str = "bench-schedule";

#[derive(Args)]
pub struct ScheduleBenchArgs {
    /// A running cluster with a scheduler and nodes; without it one is started in this process.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Simulated nodes of the in-process cluster.
    #[arg(long, default_value_t = 100)]
    nodes: usize,
    #[arg(long, default_value_t = 1000)]
    pods: usize,
    /// Concurrent creating tasks.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// CPU request of each pod.
    #[arg(long, default_value = "100m")]
    cpu: String,
    /// Memory request of each pod.
    #[arg(long, default_value = "64Mi")]
    memory: String,
    /// The pods' command, split on spaces (real nodes: keep the containers running, e.g. "sleep 3600").
    #[arg(long)]
    command: Option<String>,
    /// basic, topology-spread or anti-affinity.
    #[arg(long, default_value = "basic")]
    scenario: String,
}

/// The pod of a scenario (upstream scheduler_perf's pod templates).
fn pod_for(
    scenario: &str,
    name: &str,
    cpu: &str,
    memory: &str,
) -> Result<serde_json::Value, String> {
    let mut pod = json!({
        "metadata": {"name": name, "labels": {"color": "blue"}},
        "spec": {"containers": [{"name": "c", "image": "busybox",
                                 "resources": {"requests": {"cpu": cpu, "memory": memory}}}]}
    });
    match scenario {
        "basic" => {}
        "topology-spread" => {
            pod["spec"]["topologySpreadConstraints"] = json!([{"maxSkew": 5,
                "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"color": "blue"}}}]);
        }
        "anti-affinity" => {
            pod["metadata"]["labels"] = json!({"color": "green"});
            pod["spec"]["affinity"] = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"color": "green"}}, "topologyKey": "kubernetes.io/hostname"}]}});
        }
        other => {
            return Err(format!(
                "unknown scenario {other:?} (basic, topology-spread, anti-affinity)"
            ))
        }
    }
    Ok(pod)
}

/// The in-process cluster, stopped when dropped.
struct LocalCluster {
    _dir: tempfile::TempDir,
    _server: apiserver::server::Running,
    _sim: sim::Simulator,
    scheduler: tokio::task::JoinHandle<()>,
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        self.scheduler.abort();
    }
}

async fn local_cluster(nodes: usize) -> Result<(kube::Client, LocalCluster), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let mut config = apiserver::Config::new(dir.path());
    config.secure_port = 0;
    let server = apiserver::start(config).await?;
    let client = client::kubeconfig::client_from_file(&dir.path().join("admin.kubeconfig")).await?;
    let started = Instant::now();
    let sim = sim::Simulator::start(
        client.clone(),
        sim::SimConfig {
            nodes,
            ..Default::default()
        },
    )
    .await?;
    eprintln!(
        "{nodes} simulated nodes registered in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    let scheduler = tokio::spawn(scheduler::run(
        client.clone(),
        scheduler::SchedulerConfig::default(),
    ));
    Ok((
        client,
        LocalCluster {
            _dir: dir,
            _server: server,
            _sim: sim,
            scheduler,
        },
    ))
}

pub async fn run(args: ScheduleBenchArgs) -> Result<(), String> {
    let (client, _local) = match &args.kubeconfig {
        Some(path) => (client::kubeconfig::client_from_file(path).await?, None),
        None => {
            let (client, local) = local_cluster(args.nodes).await?;
            (client, Some(local))
        }
    };
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?
        .items
        .len();
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NAMESPACE}}))
        .map_err(|e| e.to_string())?;
    match Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(format!("namespace: {e}")),
    }
    // Pods need their service account; the in-process cluster runs no service account controller.
    let sa: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": "default"}}))
        .map_err(|e| e.to_string())?;
    match Api::<ServiceAccount>::namespaced(client.clone(), NAMESPACE)
        .create(&PostParams::default(), &sa)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(format!("service account: {e}")),
    }

    pod_for(&args.scenario, "check", &args.cpu, &args.memory)?;
    // When each pod was first seen bound, and Running.
    let bound: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let running: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let seen_bound = bound.clone();
    let factory = SharedInformerFactory::new(client.clone(), InformerConfig::new());
    let informer =
        factory.informer_for_api(Api::<Pod>::namespaced(client.clone(), NAMESPACE), None);
    let seen = running.clone();
    let record = move |p: &Arc<Pod>| {
        if p.spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .is_some_and(|n| !n.is_empty())
        {
            let name = p.metadata.name.clone().unwrap_or_default();
            seen_bound
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .entry(name)
                .or_insert_with(Instant::now);
        }
        if p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running") {
            let name = p.metadata.name.clone().unwrap_or_default();
            seen.lock()
                .unwrap_or_else(|e| e.into_inner())
                .entry(name)
                .or_insert_with(Instant::now);
        }
    };
    let record_update = record.clone();
    informer.add_event_handler(
        EventHandlerFuncs::new()
            .on_add(move |p, _| record(p))
            .on_update(move |_, p| record_update(p)),
    );
    factory.start();
    factory.wait_for_cache_sync().await;

    let run_id = std::process::id();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let created: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let first = Instant::now();
    let results: Vec<Result<(), String>> = futures::stream::iter(0..args.pods)
        .map(|i| {
            let (pods, created) = (pods.clone(), created.clone());
            let (cpu, memory, scenario) =
                (args.cpu.clone(), args.memory.clone(), args.scenario.clone());
            let command: Option<Vec<String>> = args
                .command
                .as_ref()
                .map(|c| c.split_whitespace().map(String::from).collect());
            async move {
                let name = format!("p-{run_id}-{i}");
                let mut pod: Pod =
                    serde_json::from_value(pod_for(&scenario, &name, &cpu, &memory)?)
                        .map_err(|e| e.to_string())?;
                if let (Some(cmd), Some(spec)) = (command, pod.spec.as_mut()) {
                    spec.containers[0].command = Some(cmd);
                }
                created
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(name.clone(), Instant::now());
                pods.create(&PostParams::default(), &pod)
                    .await
                    .map(drop)
                    .map_err(|e| format!("create {name}: {e}"))
            }
        })
        .buffer_unordered(args.concurrency.max(1))
        .collect()
        .await;
    results.into_iter().collect::<Result<Vec<()>, String>>()?;
    let created_all = first.elapsed();

    // Wait while progress is made.
    let (mut last_count, mut last_progress) = (0, Instant::now());
    loop {
        let count = running.lock().unwrap_or_else(|e| e.into_inner()).len();
        if count >= args.pods {
            break;
        }
        if count != last_count {
            (last_count, last_progress) = (count, Instant::now());
        } else if last_progress.elapsed() > Duration::from_secs(60) {
            return Err(format!("stalled: {count} of {} pods Running", args.pods));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let created = created.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let summarize = |seen: &HashMap<String, Instant>| -> Result<(f64, Histogram<u64>), String> {
        let mut latency = Histogram::<u64>::new(3).map_err(|e| e.to_string())?;
        let mut last = first;
        for (name, at) in seen {
            if let Some(c) = created.get(name) {
                let _ = latency.record(at.duration_since(*c).as_micros().max(1) as u64);
                last = last.max(*at);
            }
        }
        Ok((last.duration_since(first).as_secs_f64(), latency))
    };
    let (bound_s, bound_lat) = summarize(&bound.lock().unwrap_or_else(|e| e.into_inner()).clone())?;
    let (running_s, running_lat) =
        summarize(&running.lock().unwrap_or_else(|e| e.into_inner()).clone())?;
    let ms = |us: u64| us as f64 / 1000.0;
    println!();
    println!("| scenario | nodes | pods | creates took s | to last bound s | bound pods/s | scheduling latency p50 ms | p99 ms | to last Running s | Running pods/s | Running p50 ms | p99 ms |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    println!(
        "| {} | {nodes} | {} | {:.2} | {bound_s:.2} | {:.0} | {:.1} | {:.1} | {running_s:.2} | {:.0} | {:.1} | {:.1} |",
        args.scenario,
        args.pods,
        created_all.as_secs_f64(),
        args.pods as f64 / bound_s,
        ms(bound_lat.value_at_quantile(0.5)),
        ms(bound_lat.value_at_quantile(0.99)),
        args.pods as f64 / running_s,
        ms(running_lat.value_at_quantile(0.5)),
        ms(running_lat.value_at_quantile(0.99)),
    );
    Ok(())
}
