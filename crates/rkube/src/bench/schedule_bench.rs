//! `rkube bench schedule`: scheduling throughput in the style of upstream's scheduler_perf. Without
//! `--kubeconfig` it starts everything in this process: an API server on SQLite in a temporary
//! directory and the scheduler, plus `--nodes` nodes. The nodes are plain Node objects as
//! scheduler_perf's `createNodes` makes them (4 CPU, 32Gi, 110 pods, Ready, three zones; no kubelet),
//! or with `--sim-nodes` simulated kubelets whose pods go Running. Then, as scheduler_perf's
//! workloads: `--init-pods` pods are scheduled (not measured), and `--pods` measured pods are created
//! by `--concurrency` tasks while the scheduler runs.
//!
//! Results: scheduler_perf's `SchedulingThroughput` (the number of measured pods bound, sampled every
//! second from an informer, the first sample skipped: average and percentiles of the samples), the
//! end-to-end rate (measured pods over the time from their first create to the last one bound) and
//! each pod's latency from its create request to the informer seeing it bound.
//!
//! `--pending` isolates the scheduler from pod creation on a small machine: the init pods are created
//! bound (as if scheduled earlier), the measured pods are all created first, and only then is the
//! scheduler started; the rate is then measured from the scheduler's start (its informers' initial
//! lists included) to the last pod bound.
//!
//! `--scenario` picks scheduler_perf's pod templates: `basic` (SchedulingBasic), `topology-spread`
//! (TopologySpreading: a hard zone constraint, maxSkew 5; init pods are plain) and `anti-affinity`
//! (SchedulingPodAntiAffinity: required anti-affinity on the hostname; init pods of the same kind in
//! another namespace).
//!
//! `--dra` (scheduler_perf's SchedulingWithResourceClaim, structured parameters): every node
//! publishes a ResourceSlice of `--dra-devices` devices of the driver `gpu.example.com`, a
//! DeviceClass selects them by driver (CEL), and each measured pod gets a ResourceClaim of its own
//! for one device, created just before it; the scheduler allocates the claims (DynamicResources).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Args;
use client::informer::{EventHandlerFuncs, InformerConfig, SharedInformerFactory};
use futures::StreamExt;
use hdrhistogram::Histogram;
use k8s_openapi::api::core::v1::{Namespace, Node, ServiceAccount};
use kube::api::{ListParams, PostParams};
use kube::Api;
use serde_json::{json, Value};

use super::watched_pod::WatchedPod;

const NAMESPACE: &str = "bench-schedule";
const INIT_NAMESPACE: &str = "bench-schedule-init";

#[derive(Args)]
pub struct ScheduleBenchArgs {
    /// A running cluster with a scheduler and nodes; without it one is started in this process.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Nodes of the in-process cluster.
    #[arg(long, default_value_t = 100)]
    nodes: usize,
    /// Simulated kubelets (heartbeats, pods go Running) instead of plain Node objects.
    #[arg(long)]
    sim_nodes: bool,
    /// Pods scheduled before the measurement (scheduler_perf's initPods).
    #[arg(long, default_value_t = 0)]
    init_pods: usize,
    /// Measured pods.
    #[arg(long, default_value_t = 1000)]
    pods: usize,
    /// Concurrent creating tasks.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Create the measured pods first and start the scheduler after (in-process cluster only).
    #[arg(long)]
    pending: bool,
    /// CPU request of each pod.
    #[arg(long, default_value = "100m")]
    cpu: String,
    /// Memory request of each pod.
    #[arg(long, default_value = "500Mi")]
    memory: String,
    /// The pods' image (scheduler_perf's pause; real nodes need one they have, e.g. busybox).
    #[arg(long, default_value = "registry.k8s.io/pause:3.10")]
    image: String,
    /// The pods' command, split on spaces (real nodes: keep the containers running, e.g. "sleep 3600").
    #[arg(long)]
    command: Option<String>,
    /// basic, topology-spread or anti-affinity.
    #[arg(long, default_value = "basic")]
    scenario: String,
    /// Each measured pod claims one DRA device (see the module docs).
    #[arg(long)]
    dra: bool,
    /// With `--dra`: devices per node.
    #[arg(long, default_value_t = 8)]
    dra_devices: usize,
}

const DRA_DRIVER: &str = "gpu.example.com";

fn dra_spec(args: &ScheduleBenchArgs) -> Result<sim::devices::DeviceSpec, String> {
    sim::devices::DeviceSpec::parse(&format!("{DRA_DRIVER}={}", args.dra_devices))
}

/// The DeviceClass the bench's claims ask for.
async fn create_device_class(client: &kube::Client) -> Result<(), String> {
    let class: k8s_openapi::api::resource::v1::DeviceClass = serde_json::from_value(json!({
        "metadata": {"name": DRA_DRIVER},
        "spec": {"selectors": [{"cel": {"expression": format!("device.driver == '{DRA_DRIVER}'")}}]}
    }))
    .map_err(|e| e.to_string())?;
    match Api::all(client.clone())
        .create(&PostParams::default(), &class)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(format!("device class: {e}")),
    }
}

/// A claim for one device of the bench's class.
fn claim_object(name: &str) -> Value {
    json!({"metadata": {"name": name}, "spec": {"devices": {"requests": [
        {"name": "gpu", "exactly": {"deviceClassName": DRA_DRIVER}}]}}})
}

/// The pod of a scenario (upstream scheduler_perf's pod templates); `init` for the initial pods.
fn pod_for(
    scenario: &str,
    init: bool,
    name: &str,
    cpu: &str,
    memory: &str,
) -> Result<Value, String> {
    let resources = json!({"requests": {"cpu": cpu, "memory": memory}, "limits": {"cpu": cpu, "memory": memory}});
    let mut pod = json!({
        "metadata": {"name": name, "labels": {"color": "blue"}},
        "spec": {"containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10",
                                 "ports": [{"containerPort": 80}], "resources": resources}]}
    });
    match scenario {
        "basic" => {}
        "topology-spread" if init => {}
        "topology-spread" => {
            pod["spec"]["topologySpreadConstraints"] = json!([{"maxSkew": 5,
                "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"color": "blue"}}}]);
        }
        "anti-affinity" => {
            pod["metadata"]["labels"] = json!({"color": "green"});
            pod["spec"]["affinity"] = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"color": "green"}}, "topologyKey": "kubernetes.io/hostname",
                 "namespaces": [NAMESPACE, INIT_NAMESPACE]}]}});
        }
        other => {
            return Err(format!(
                "unknown scenario {other:?} (basic, topology-spread, anti-affinity)"
            ))
        }
    }
    Ok(pod)
}

/// scheduler_perf's default node (`makeBaseNode`), labelled with its hostname and one of three zones.
fn node_object(i: usize) -> Value {
    let name = format!("node-{i}");
    let resources = json!({"cpu": "4", "memory": "32Gi", "pods": "110"});
    json!({
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
            "topology.kubernetes.io/zone": format!("zone-{}", i % 3)}},
        "status": {"capacity": resources, "allocatable": resources, "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "bench"}]}
    })
}

/// The in-process cluster, stopped when dropped.
struct LocalCluster {
    _dir: tempfile::TempDir,
    _server: apiserver::server::Running,
    _sim: Option<sim::Simulator>,
    scheduler: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        if let Some(s) = &self.scheduler {
            s.abort();
        }
    }
}

impl LocalCluster {
    fn start_scheduler(&mut self, client: &kube::Client) {
        self.scheduler = Some(tokio::spawn(scheduler::run(
            client.clone(),
            scheduler::SchedulerConfig::default(),
        )));
    }
}

async fn create_all<F>(total: usize, concurrency: usize, make: F) -> Result<(), String>
where
    F: Fn(usize) -> futures::future::BoxFuture<'static, Result<(), String>>,
{
    let results: Vec<Result<(), String>> = futures::stream::iter(0..total)
        .map(make)
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await;
    results.into_iter().collect()
}

async fn local_cluster(args: &ScheduleBenchArgs) -> Result<(kube::Client, LocalCluster), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let mut config = apiserver::Config::new(dir.path());
    config.secure_port = 0;
    let server = apiserver::start(config).await?;
    let client = client::kubeconfig::client_from_file(&dir.path().join("admin.kubeconfig")).await?;
    let started = Instant::now();
    let sim = if args.sim_nodes {
        let config = sim::SimConfig {
            nodes: args.nodes,
            devices: if args.dra {
                vec![dra_spec(args)?]
            } else {
                Vec::new()
            },
            ..Default::default()
        };
        Some(sim::Simulator::start(client.clone(), config).await?)
    } else {
        let api: Api<Node> = Api::all(client.clone());
        create_all(args.nodes, args.concurrency, |i| {
            let api = api.clone();
            Box::pin(async move {
                let node: Node =
                    serde_json::from_value(node_object(i)).map_err(|e| e.to_string())?;
                // Nodes keep the status they are created with (as a kubelet registers them).
                api.create(&PostParams::default(), &node)
                    .await
                    .map(drop)
                    .map_err(|e| format!("node {i}: {e}"))
            })
        })
        .await?;
        if args.dra {
            let spec = dra_spec(args)?;
            create_all(args.nodes, args.concurrency, |i| {
                let (client, spec) = (client.clone(), spec.clone());
                Box::pin(async move {
                    sim::devices::publish(&client, &[spec], &format!("node-{i}"), None).await
                })
            })
            .await?;
        }
        None
    };
    clear_not_ready_taints(&client, args.concurrency).await?;
    eprintln!(
        "{} nodes registered in {:.1}s",
        args.nodes,
        started.elapsed().as_secs_f64()
    );
    let mut local = LocalCluster {
        _dir: dir,
        _server: server,
        _sim: sim,
        scheduler: None,
    };
    if !args.pending {
        local.start_scheduler(&client);
    }
    Ok((client, local))
}

/// The TaintNodesByCondition admission plugin gives every new node `node.kubernetes.io/not-ready:
/// NoSchedule`, which the node lifecycle controller removes once the node is Ready; the in-process
/// cluster runs no controllers, so the bench removes it (the nodes are Ready from the start).
async fn clear_not_ready_taints(client: &kube::Client, concurrency: usize) -> Result<(), String> {
    const NOT_READY: &str = "node.kubernetes.io/not-ready";
    let api: Api<Node> = Api::all(client.clone());
    let tainted: Vec<Node> = api
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?
        .items
        .into_iter()
        .filter(|n| {
            n.spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .is_some_and(|t| t.iter().any(|t| t.key == NOT_READY))
        })
        .collect();
    let tainted = Arc::new(tainted);
    create_all(tainted.len(), concurrency, |i| {
        let (api, tainted) = (api.clone(), tainted.clone());
        Box::pin(async move {
            let node = &tainted[i];
            let name = node.metadata.name.clone().unwrap_or_default();
            let keep: Vec<_> = node
                .spec
                .as_ref()
                .and_then(|s| s.taints.clone())
                .unwrap_or_default()
                .into_iter()
                .filter(|t| t.key != NOT_READY)
                .collect();
            let patch = json!({"spec": {"taints": keep}});
            api.patch(
                &name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&patch),
            )
            .await
            .map(drop)
            .map_err(|e| format!("node {name}: {e}"))
        })
    })
    .await
}

async fn ensure_namespace(client: &kube::Client, name: &str) -> Result<(), String> {
    let ns: Namespace =
        serde_json::from_value(json!({"metadata": {"name": name}})).map_err(|e| e.to_string())?;
    match Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(format!("namespace {name}: {e}")),
    }
    // Pods need their service account; the in-process cluster runs no service account controller.
    let sa: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": "default"}}))
        .map_err(|e| e.to_string())?;
    match Api::<ServiceAccount>::namespaced(client.clone(), name)
        .create(&PostParams::default(), &sa)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(format!("service account in {name}: {e}")),
    }
}

/// When each pod of a namespace was first seen bound, and Running.
#[derive(Clone, Default)]
struct Seen {
    bound: Arc<Mutex<HashMap<String, Instant>>>,
    running: Arc<Mutex<HashMap<String, Instant>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Seen {
    fn record(&self, p: &WatchedPod) {
        let name = || p.name().to_string();
        if p.bound() {
            lock(&self.bound).entry(name()).or_insert_with(Instant::now);
        }
        if p.running() {
            lock(&self.running)
                .entry(name())
                .or_insert_with(Instant::now);
        }
    }

    fn bound(&self) -> usize {
        lock(&self.bound).len()
    }

    fn running(&self) -> usize {
        lock(&self.running).len()
    }
}

/// Waits while `count()` makes progress, until it reaches `want`.
async fn wait_for(what: &str, want: usize, count: impl Fn() -> usize) -> Result<(), String> {
    let (mut last_count, mut last_progress) = (0, Instant::now());
    loop {
        let n = count();
        if n >= want {
            return Ok(());
        }
        if n != last_count {
            (last_count, last_progress) = (n, Instant::now());
        } else if last_progress.elapsed() > Duration::from_secs(60) {
            return Err(format!("stalled: {n} of {want} pods {what}"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Creates `count` pods of the scenario in `namespace`, optionally bound to nodes round-robin;
/// returns when each create was issued.
async fn create_pods(
    client: &kube::Client,
    args: &ScheduleBenchArgs,
    namespace: &str,
    count: usize,
    init: bool,
    bind_to: Option<Arc<Vec<String>>>,
) -> Result<HashMap<String, Instant>, String> {
    let pods = kube::core::Request::new(format!("/api/v1/namespaces/{namespace}/pods"));
    let pods = Arc::new(pods);
    let client = client.clone();
    let claims: Option<Api<k8s_openapi::api::resource::v1::ResourceClaim>> =
        (args.dra && !init).then(|| Api::namespaced(client.clone(), namespace));
    let created: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let run_id = std::process::id();
    let command: Option<Vec<String>> = args
        .command
        .as_ref()
        .map(|c| c.split_whitespace().map(String::from).collect());
    let (scenario, cpu, memory) = (args.scenario.clone(), args.cpu.clone(), args.memory.clone());
    let image = args.image.clone();
    let created_in = created.clone();
    create_all(count, args.concurrency, move |i| {
        let (client, pods, created, command, bind_to) = (
            client.clone(),
            pods.clone(),
            created_in.clone(),
            command.clone(),
            bind_to.clone(),
        );
        let claims = claims.clone();
        let (scenario, cpu, memory) = (scenario.clone(), cpu.clone(), memory.clone());
        let image = image.clone();
        Box::pin(async move {
            let name = format!("p-{run_id}-{i}");
            // Edited as JSON and posted as bytes, the response unread beyond its status: the bench
            // shares the process it measures, and a typed Pod each way costs it two conversions.
            let mut pod = pod_for(&scenario, init, &name, &cpu, &memory)?;
            pod["apiVersion"] = json!("v1");
            pod["kind"] = json!("Pod");
            let container = &mut pod["spec"]["containers"][0];
            container["image"] = json!(image);
            if let Some(cmd) = command {
                container["command"] = json!(cmd);
            }
            if let Some(nodes) = bind_to.as_ref().filter(|n| !n.is_empty()) {
                pod["spec"]["nodeName"] = json!(nodes[i % nodes.len()]);
            }
            lock(&created).insert(name.clone(), Instant::now());
            if let Some(claims) = claims {
                let claim_name = format!("{name}-gpu");
                let claim =
                    serde_json::from_value(claim_object(&claim_name)).map_err(|e| e.to_string())?;
                claims
                    .create(&PostParams::default(), &claim)
                    .await
                    .map_err(|e| format!("create claim {claim_name}: {e}"))?;
                pod["spec"]["resourceClaims"] =
                    json!([{"name": "gpu", "resourceClaimName": claim_name}]);
                pod["spec"]["containers"][0]["resources"]["claims"] = json!([{"name": "gpu"}]);
            }
            let body = serde_json::to_vec(&pod).map_err(|e| e.to_string())?;
            let request = pods
                .create(&PostParams::default(), body)
                .map_err(|e| format!("create {name}: {e}"))?;
            client
                .request_text(request)
                .await
                .map(drop)
                .map_err(|e| format!("create {name}: {e}"))
        })
    })
    .await?;
    let created = lock(&created).clone();
    Ok(created)
}

/// CPU seconds (user + system) this process has used: with the in-process cluster, everything
/// (API server, scheduler, this client); less disturbed by other load on the machine than wall time.
fn process_cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // Fields after the command name (which is in parentheses and may hold spaces).
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 of stat(5), 12 and 13 after the name.
    (ticks(11) + ticks(12)) / 100.0
}

/// scheduler_perf's throughput collector: bound pods counted every second once the first is bound
/// (that first sample skipped), until all are.
async fn sample_throughput(seen: Seen, want: usize) -> Vec<f64> {
    let mut samples = Vec::new();
    let mut last: Option<(usize, Instant)> = None;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let (n, now) = (seen.bound(), Instant::now());
        if let Some((prev, at)) = last {
            samples.push((n - prev) as f64 / now.duration_since(at).as_secs_f64());
        }
        if n > 0 {
            last = Some((n, now));
        }
        if n >= want {
            return samples;
        }
    }
}

pub async fn run(args: ScheduleBenchArgs) -> Result<(), String> {
    pod_for(&args.scenario, false, "check", &args.cpu, &args.memory)?;
    if args.pending && args.kubeconfig.is_some() {
        return Err("--pending needs the in-process cluster (no --kubeconfig)".into());
    }
    let (client, mut local) = match &args.kubeconfig {
        Some(path) => (client::kubeconfig::client_from_file(path).await?, None),
        None => {
            let (client, local) = local_cluster(&args).await?;
            (client, Some(local))
        }
    };
    let node_names: Vec<String> = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    let nodes = node_names.len();
    ensure_namespace(&client, NAMESPACE).await?;
    ensure_namespace(&client, INIT_NAMESPACE).await?;
    if args.dra {
        create_device_class(&client).await?;
    }
    let wait_running = args.kubeconfig.is_some() || args.sim_nodes;

    let factory = SharedInformerFactory::new(client.clone(), InformerConfig::new());
    let (init_seen, seen) = (Seen::default(), Seen::default());
    for (ns, seen) in [(INIT_NAMESPACE, &init_seen), (NAMESPACE, &seen)] {
        let informer =
            factory.informer_for_api(Api::<WatchedPod>::namespaced(client.clone(), ns), None);
        let (on_add, on_update) = (seen.clone(), seen.clone());
        informer.add_event_handler(
            EventHandlerFuncs::new()
                .on_add(move |p, _| on_add.record(p))
                .on_update(move |_, p| on_update.record(p)),
        );
    }
    factory.start();
    factory.wait_for_cache_sync().await;

    if args.init_pods > 0 {
        let bind_to = args.pending.then(|| Arc::new(node_names.clone()));
        create_pods(
            &client,
            &args,
            INIT_NAMESPACE,
            args.init_pods,
            true,
            bind_to,
        )
        .await?;
        wait_for("bound", args.init_pods, || init_seen.bound()).await?;
        eprintln!("{} init pods bound", args.init_pods);
    }

    let sampler = (!args.pending).then(|| tokio::spawn(sample_throughput(seen.clone(), args.pods)));
    let cpu_before = process_cpu_seconds();
    let first = Instant::now();
    let created = create_pods(&client, &args, NAMESPACE, args.pods, false, None).await?;
    let created_all = first.elapsed();
    // With `--pending`, the scheduling phase alone (the creates are not in it).
    let mut cpu_at_start = None;
    let (start, sampler) = match local.as_mut().filter(|_| args.pending) {
        Some(local) => {
            cpu_at_start = Some(process_cpu_seconds());
            let start = Instant::now();
            local.start_scheduler(&client);
            (
                start,
                tokio::spawn(sample_throughput(seen.clone(), args.pods)),
            )
        }
        None => (first, sampler.ok_or("no sampler")?),
    };
    wait_for("bound", args.pods, || seen.bound()).await?;
    let cpu_now = process_cpu_seconds();
    let cpu_per_pod_ms = (cpu_now - cpu_before) * 1000.0 / args.pods as f64;
    let scheduling_cpu_s = cpu_at_start.map(|c| cpu_now - c);
    let mut samples = sampler.await.map_err(|e| e.to_string())?;
    eprintln!(
        "throughput samples (pods/s, one a second): {:?}",
        samples.iter().map(|s| s.round() as i64).collect::<Vec<_>>()
    );
    if wait_running {
        wait_for("Running", args.pods, || seen.running()).await?;
    }

    let summarize = |at: &HashMap<String, Instant>| -> Result<(f64, Histogram<u64>), String> {
        let mut latency = Histogram::<u64>::new(3).map_err(|e| e.to_string())?;
        let mut last = start;
        for (name, at) in at {
            if let Some(c) = created.get(name) {
                let _ = latency.record(at.duration_since(*c).as_micros().max(1) as u64);
                last = last.max(*at);
            }
        }
        Ok((last.duration_since(start).as_secs_f64(), latency))
    };
    let (bound_s, bound_lat) = summarize(&lock(&seen.bound).clone())?;
    let ms = |us: u64| us as f64 / 1000.0;
    samples.sort_by(f64::total_cmp);
    // A percentile of a handful of one-second samples says nothing (a 4 s run has no p99), so
    // each is printed only with enough samples for it: 1/(1-q) of them, and 5 for the median.
    let pct = |q: f64| -> String {
        // (less a hair: 1/(1-0.9) is 10.000000000000002 in floating point)
        let enough = (1.0 / (1.0 - q) - 1e-9).ceil().max(5.0) as usize;
        if samples.len() < enough {
            return "-".into();
        }
        let i = ((samples.len() as f64 * q).ceil() as usize).clamp(1, samples.len()) - 1;
        format!("{:.0}", samples[i])
    };
    let average = if samples.is_empty() {
        0.0
    } else {
        samples.iter().sum::<f64>() / samples.len() as f64
    };
    let mode = if args.pending {
        "pending (scheduler started after the creates)"
    } else {
        "concurrent (creates while scheduling)"
    };
    println!();
    println!(
        "scenario {}{}, {nodes} nodes, {} init pods, {} measured pods, {mode}",
        args.scenario,
        if args.dra {
            format!(
                " with one DRA claim per pod ({} devices per node)",
                args.dra_devices
            )
        } else {
            String::new()
        },
        args.init_pods,
        args.pods
    );
    println!("| scenario | mode | nodes | pods | creates took s | to last bound s | bound pods/s | SchedulingThroughput avg | p50 | p90 | p99 | create-to-bound p50 ms | p99 ms | throughput samples |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    println!(
        "| {} | {} | {nodes} | {} | {:.2} | {bound_s:.2} | {:.0} | {average:.0} | {} | {} | {} | {} | {} | {} |",
        args.scenario,
        if args.pending { "pending" } else { "concurrent" },
        args.pods,
        created_all.as_secs_f64(),
        args.pods as f64 / bound_s,
        pct(0.5),
        pct(0.9),
        pct(0.99),
        if args.pending { "-".to_string() } else { format!("{:.1}", ms(bound_lat.value_at_quantile(0.5))) },
        if args.pending { "-".to_string() } else { format!("{:.1}", ms(bound_lat.value_at_quantile(0.99))) },
        samples.len(),
    );
    if local.is_some() {
        println!("CPU of this process (API server, scheduler, client) from the first measured create to the last bind: {cpu_per_pod_ms:.3} ms per pod");
        if let Some(cpu) = scheduling_cpu_s {
            // Cores busy on average: below the machine's cores, the run waited on something.
            println!(
                "CPU from the scheduler's start to the last bind: {:.3} ms per pod, {:.2} cores busy on average",
                cpu * 1000.0 / args.pods as f64,
                cpu / bound_s
            );
        }
        let mib = |field| super::proc_status_mib("self", field).map_or(f64::NAN, |m| m);
        println!(
            "memory of this process: RSS {:.1} MiB now, {:.1} MiB at its peak",
            mib("VmRSS"),
            mib("VmHWM")
        );
    }
    if wait_running {
        let (running_s, running_lat) = summarize(&lock(&seen.running).clone())?;
        println!(
            "Running: last at {running_s:.2} s ({:.0} pods/s); create-to-Running p50 {:.1} ms, p99 {:.1} ms",
            args.pods as f64 / running_s,
            ms(running_lat.value_at_quantile(0.5)),
            ms(running_lat.value_at_quantile(0.99)),
        );
    }
    Ok(())
}
