//! `rkube bench density`: upstream's scalability test shape (clusterloader2's load test, reduced to
//! what one machine runs) on simulated nodes, judged against upstream's SLOs.
//!
//! Without `--kubeconfig` it starts `rkube server --disable-kubelet --sim-nodes N` as a child process
//! (this same binary) with a temporary data dir, so the server's RSS and CPU are its own; with
//! `--kubeconfig` (and `--server-pid` for its resources) it loads a running cluster.
//!
//! The workload: `--pods` pods in Deployments of `--deployment-size`, `--deployments-per-namespace`
//! to a namespace, created at `--rate` pods per second; once every Deployment is available, churn
//! (unless `--churn=false`): a rolling update of every Deployment, then each scaled to half and back,
//! each step paced at the same rate and waited for.
//!
//! Measured all along (`probes.rs`): every mutating call the bench makes plus a ConfigMap patched
//! five times a second (mutating latency), the delay from each patch's response to its watch event,
//! GETs of random pods (10/s), LISTs of a random namespace's pods (1/s), a paged LIST of every pod
//! (pages of 500, every 10 s), pod startup (watch's first sight to Running with containers started:
//! upstream measures from the creation timestamp, which has one-second resolution), pods bound per
//! second over the create phase (scheduling throughput), and the server's RSS and CPU every second.
//!
//! Output: a table with upstream's SLOs (mutating and GET p99 <= 1 s, namespaced LIST <= 5 s, cluster
//! LIST <= 30 s, pod startup p99 <= 5 s) and the RSS limit, `<out>/timeline.csv` (one line per
//! second), `<out>/density.png` (latency p99 per 10 s window over RSS and CPU), `<out>/server.log`,
//! and a last line `SLOs: met` or `SLOs: missed: <which>`.

mod plot;
mod probes;
mod report;

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Args;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::{json, Value};

use probes::{Recorder, LABEL, PROBE_NAMESPACE};
use report::{Kind, Results};

#[derive(Args)]
pub struct DensityBenchArgs {
    /// A running cluster (with nodes that run pods) to load; without it a server is started.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// With --kubeconfig: the server's process id, for its RSS and CPU.
    #[arg(long)]
    server_pid: Option<u32>,
    /// Simulated nodes of the started server.
    #[arg(long, default_value_t = 100)]
    nodes: usize,
    /// Pods of the workload.
    #[arg(long, default_value_t = 3000)]
    pods: usize,
    /// Pods created per second.
    #[arg(long, default_value_t = 50.0)]
    rate: f64,
    /// Replicas of each Deployment.
    #[arg(long, default_value_t = 10)]
    deployment_size: usize,
    /// Deployments in each namespace.
    #[arg(long, default_value_t = 10)]
    deployments_per_namespace: usize,
    /// Rolling updates and scaling after the create phase.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    churn: bool,
    /// Where timeline.csv, density.png and server.log go.
    #[arg(long, default_value = "density-out")]
    out: PathBuf,
    /// An extra argument for the started server (repeatable), e.g. `--server-arg=--storage=etcd`.
    #[arg(long = "server-arg", allow_hyphen_values = true)]
    server_args: Vec<String>,
    /// The RSS the server must stay under, MiB (issue 25: 4 GiB).
    #[arg(long, default_value_t = 4096.0)]
    rss_limit_mib: f64,
    /// How long a phase may go without progress before the run gives up, seconds.
    #[arg(long, default_value_t = 120)]
    stall_seconds: u64,
}

/// The started server, stopped (SIGTERM, then SIGKILL) when dropped.
struct Server {
    child: Child,
    kubeconfig: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_server(args: &DensityBenchArgs) -> Result<Server, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut child = Command::new(exe)
        .arg("server")
        .arg("--data-dir")
        .arg(dir.path())
        .args(["--secure-port", "0", "--disable-kubelet", "--disable-dns"])
        .args(["--sim-nodes", &args.nodes.to_string()])
        .args(&args.server_args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("starting rkube server: {e}"))?;
    let stderr = child.stderr.take().ok_or("no stderr")?;
    let log_path = args.out.join("server.log");
    let mut log =
        std::fs::File::create(&log_path).map_err(|e| format!("{}: {e}", log_path.display()))?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.starts_with("rkube: serving on ") {
                let _ = tx.send(());
            }
            let _ = writeln!(log, "{line}");
        }
    });
    let server = Server {
        child,
        kubeconfig: dir.path().join("admin.kubeconfig"),
        _dir: dir,
    };
    rx.recv_timeout(Duration::from_secs(120))
        .map_err(|_| format!("the server did not start; see {}", log_path.display()))?;
    Ok(server)
}

pub async fn run(args: DensityBenchArgs) -> Result<(), String> {
    std::fs::create_dir_all(&args.out).map_err(|e| format!("{}: {e}", args.out.display()))?;
    let deployments = args.pods.div_ceil(args.deployment_size.max(1));
    let size = args.deployment_size.max(1);
    let per_ns = args.deployments_per_namespace.max(1);
    let rate = if args.rate > 0.0 { args.rate } else { 1.0 };
    let started_server = match &args.kubeconfig {
        Some(_) => None,
        None => Some(start_server(&args)?),
    };
    let kubeconfig = match (&args.kubeconfig, &started_server) {
        (Some(k), _) => k.clone(),
        (None, Some(s)) => s.kubeconfig.clone(),
        (None, None) => unreachable!("a server was started"),
    };
    let pid = args
        .server_pid
        .or(started_server.as_ref().map(|s| s.child.id()));
    let client = client::kubeconfig::client_from_file(&kubeconfig).await?;
    let nodes = wait_for_nodes(&client, args.kubeconfig.is_none().then_some(args.nodes)).await?;
    eprintln!("{nodes} nodes ready; {deployments} Deployments of {size}, {rate} pods/s");

    let namespaces: Vec<String> = (0..deployments.div_ceil(per_ns))
        .map(|i| format!("density-{i}"))
        .collect();
    for ns in namespaces
        .iter()
        .map(String::as_str)
        .chain([PROBE_NAMESPACE])
    {
        create_namespace(&client, ns).await?;
    }

    let recorder = Recorder::new();
    let seen: Arc<Mutex<probes::PodsSeen>> = Arc::default();
    let usage: Arc<Mutex<Vec<report::Usage>>> = Arc::default();
    let mut tasks = vec![probes::watch_pods(
        client.clone(),
        recorder.clone(),
        seen.clone(),
    )];
    tasks.extend(probes::start_probes(
        &client,
        &recorder,
        &seen,
        namespaces.clone(),
    ));
    if let Some(pid) = pid {
        tasks.push(probes::sample_usage(pid, recorder.clone(), usage.clone()));
    }
    let stop: Vec<_> = tasks
        .into_iter()
        .map(tokio_util::task::AbortOnDropHandle::new)
        .collect();

    let work = Workload {
        client: client.clone(),
        recorder: recorder.clone(),
        deployments,
        per_ns,
        interval: Duration::from_secs_f64(size as f64 / rate),
        stall: Duration::from_secs(args.stall_seconds),
    };
    let create_started = recorder.now();
    work.pace("create", |d| work.create(d, size)).await?;
    work.wait_available("create", size).await?;
    let create_ended = recorder.now();
    if args.churn {
        work.pace("rolling update", |d| work.roll(d)).await?;
        work.wait_available("rolling update", size).await?;
        let half = size.div_ceil(2);
        work.pace("scale down", |d| work.scale(d, half)).await?;
        work.wait_available("scale down", half).await?;
        work.pace("scale up", |d| work.scale(d, size)).await?;
        work.wait_available("scale up", size).await?;
    }
    drop(stop);

    let (samples, errors) = recorder.take();
    let bound: Vec<f64> = {
        let seen = seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.bound_at.iter().map(|t| recorder.at(*t)).collect()
    };
    let in_create = bound
        .iter()
        .filter(|t| **t >= create_started && **t <= create_ended)
        .count();
    let results = Results {
        samples,
        usage: std::mem::take(&mut usage.lock().unwrap_or_else(|e| e.into_inner())),
        scheduling_throughput: in_create as f64 / (create_ended - create_started).max(1e-3),
        pods: args.pods,
        nodes,
        seconds: recorder.now(),
        rss_limit_mib: args.rss_limit_mib,
    };
    let timeline = args.out.join("timeline.csv");
    std::fs::write(&timeline, results.timeline_csv())
        .map_err(|e| format!("{}: {e}", timeline.display()))?;
    let png = args.out.join("density.png");
    if let Err(e) = plot::draw(&results, &png) {
        eprintln!("no plot: {e}");
    }
    for (kind, n) in errors {
        eprintln!(
            "{n} failed {} calls (counted in the latencies)",
            kind.name()
        );
    }
    print!("{}", results.render());
    eprintln!("timeline: {}; plot: {}", timeline.display(), png.display());
    Ok(())
}

/// Waits until `want` nodes (or, attached to a cluster, every node, at least one) are Ready.
async fn wait_for_nodes(client: &kube::Client, want: Option<usize>) -> Result<usize, String> {
    let api: Api<Node> = Api::all(client.clone());
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let nodes = api
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        let ready = nodes
            .items
            .iter()
            .filter(|n| {
                n.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
                    && !n
                        .spec
                        .as_ref()
                        .and_then(|s| s.taints.as_ref())
                        .is_some_and(|t| t.iter().any(|t| t.effect == "NoSchedule"))
            })
            .count();
        let enough = match want {
            Some(w) => ready >= w,
            None => ready > 0 && ready == nodes.items.len(),
        };
        if enough {
            return Ok(ready);
        }
        if Instant::now() > deadline {
            return Err(format!("only {ready} nodes became Ready and schedulable"));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn create_namespace(client: &kube::Client, name: &str) -> Result<(), String> {
    let ns: Namespace =
        serde_json::from_value(json!({"metadata": {"name": name}})).map_err(|e| e.to_string())?;
    match Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(format!("namespace {name}: {e}")),
    }
}

/// The Deployment `i` of the workload.
fn deployment(i: usize, replicas: usize) -> Value {
    let name = format!("d-{i}");
    json!({
        "metadata": {"name": name, "labels": {LABEL: "1"}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "strategy": {"rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
            "template": {
                "metadata": {"labels": {"app": name, LABEL: "1"}},
                "spec": {"containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": "10m", "memory": "10Mi"}}}]}
            }
        }
    })
}

/// One call of a phase, run on its own task.
type Step = futures::future::BoxFuture<'static, Result<(), String>>;

struct Workload {
    client: kube::Client,
    recorder: Arc<Recorder>,
    deployments: usize,
    per_ns: usize,
    interval: Duration,
    stall: Duration,
}

impl Workload {
    fn api(&self, i: usize) -> Api<Deployment> {
        Api::namespaced(self.client.clone(), &format!("density-{}", i / self.per_ns))
    }

    /// Runs `step` for every Deployment, one per `interval`, without waiting for earlier ones.
    async fn pace(&self, phase: &str, step: impl Fn(usize) -> Step) -> Result<(), String> {
        let started = Instant::now();
        let mut running = Vec::with_capacity(self.deployments);
        for i in 0..self.deployments {
            let at = started + self.interval.mul_f64(i as f64);
            tokio::time::sleep_until(at.into()).await;
            running.push(tokio::spawn(step(i)));
        }
        let mut failed = Vec::new();
        for r in running {
            match r.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => failed.push(e),
                Err(e) => failed.push(e.to_string()),
            }
        }
        eprintln!(
            "{phase}: {} Deployments in {:.1} s",
            self.deployments,
            started.elapsed().as_secs_f64()
        );
        match failed.first() {
            None => Ok(()),
            Some(e) => Err(format!(
                "{phase}: {} calls failed, first: {e}",
                failed.len()
            )),
        }
    }

    fn create(&self, i: usize, size: usize) -> Step {
        let (api, recorder) = (self.api(i), self.recorder.clone());
        Box::pin(async move {
            let d: Deployment =
                serde_json::from_value(deployment(i, size)).map_err(|e| e.to_string())?;
            recorder
                .time(Kind::Mutating, api.create(&PostParams::default(), &d))
                .await
                .map(drop)
                .map_err(|e| format!("d-{i}: {e}"))
        })
    }

    fn roll(&self, i: usize) -> Step {
        self.patch(
            i,
            json!({"spec": {"template": {"metadata": {"annotations": {"density/revision": "2"}}}}}),
        )
    }

    fn scale(&self, i: usize, replicas: usize) -> Step {
        self.patch(i, json!({"spec": {"replicas": replicas}}))
    }

    fn patch(&self, i: usize, patch: Value) -> Step {
        let (api, recorder) = (self.api(i), self.recorder.clone());
        Box::pin(async move {
            recorder
                .time(
                    Kind::Mutating,
                    api.patch(
                        &format!("d-{i}"),
                        &PatchParams::default(),
                        &Patch::Merge(&patch),
                    ),
                )
                .await
                .map(drop)
                .map_err(|e| format!("d-{i}: {e}"))
        })
    }

    /// Waits until every Deployment has rolled out `replicas` available pods of its current template
    /// and no others, giving up after `stall` without progress.
    async fn wait_available(&self, phase: &str, replicas: usize) -> Result<(), String> {
        let api: Api<Deployment> = Api::all(self.client.clone());
        let params = ListParams::default().labels(&format!("{LABEL}=1"));
        let (mut best, mut progress) = (0, Instant::now());
        let started = Instant::now();
        loop {
            let done = match api.list(&params).await {
                Ok(list) => list
                    .items
                    .iter()
                    .filter(|d| rolled_out(d, replicas))
                    .count(),
                Err(e) => {
                    tracing::debug!(error = %e, "density: listing Deployments");
                    best
                }
            };
            if done >= self.deployments {
                eprintln!(
                    "{phase}: every Deployment available after {:.1} s more",
                    started.elapsed().as_secs_f64()
                );
                return Ok(());
            }
            if done > best {
                (best, progress) = (done, Instant::now());
            } else if progress.elapsed() > self.stall {
                return Err(format!(
                    "{phase}: stalled at {done} of {} Deployments rolled out",
                    self.deployments
                ));
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }
}

/// A Deployment whose controller has seen its spec and whose pods are all of the current template,
/// available, `replicas` of them.
fn rolled_out(d: &Deployment, replicas: usize) -> bool {
    let Some(status) = d.status.as_ref() else {
        return false;
    };
    let want = replicas as i32;
    status.observed_generation >= d.metadata.generation
        && status.updated_replicas == Some(want)
        && status.available_replicas == Some(want)
        && status.replicas == Some(want)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rolled_out_needs_the_current_generation_and_only_new_pods() {
        let d = |gen: i64, observed: i64, updated: i32, available: i32, total: i32| -> Deployment {
            serde_json::from_value(json!({
                "metadata": {"name": "d", "generation": gen},
                "status": {"observedGeneration": observed, "updatedReplicas": updated,
                           "availableReplicas": available, "replicas": total}
            }))
            .unwrap()
        };
        assert!(rolled_out(&d(2, 2, 10, 10, 10), 10));
        assert!(!rolled_out(&d(3, 2, 10, 10, 10), 10), "spec not seen yet");
        assert!(!rolled_out(&d(2, 2, 8, 10, 12), 10), "old pods left");
        assert!(!rolled_out(&d(2, 2, 10, 9, 10), 10), "one unavailable");
        assert!(rolled_out(&d(2, 2, 5, 5, 5), 5));
        let none: Deployment = serde_json::from_value(json!({"metadata": {"name": "d"}})).unwrap();
        assert!(!rolled_out(&none, 1));
    }

    #[test]
    fn deployments_carry_the_bench_label_on_pods() {
        let d: Deployment = serde_json::from_value(deployment(7, 3)).unwrap();
        let template = d.spec.unwrap().template;
        assert_eq!(
            template.metadata.unwrap().labels.unwrap().get(LABEL),
            Some(&"1".to_string())
        );
    }
}
