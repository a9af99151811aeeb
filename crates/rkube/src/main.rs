//! `rkube`: Kubernetes, rebuilt in Rust. One binary whose subcommands are the Kubernetes components.

mod agent_lb;
mod apiserver;
mod bench;
mod cluster_info;
mod controller_flags;
mod controller_manager;
mod dns;
mod kubelet;
mod leader;
mod local_path;
mod migrate;
mod nodes;
mod proxy;
mod serve;
mod serving_flags;
mod sim;

use clap::{Parser, Subcommand};

/// mimalloc: the API server allocates many small, short-lived JSON values per request, where it is
/// markedly faster than glibc's malloc (see docs/benchmarks.md).
/// The `system-allocator` feature leaves glibc's malloc in place for heap profilers.
#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "rkube", version, about = "Kubernetes, rebuilt in Rust")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// Parsed once at start and moved into its subcommand: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Every component in one process (API server, controller manager, scheduler, a local kubelet when
    /// containerd is installed, simulated nodes on request) on an embedded store, like k3s.
    Server(serve::ServeArgs),
    /// The Kubernetes API server alone (upstream kube-apiserver); several can share one etcd.
    Apiserver(apiserver::ApiserverArgs),
    /// The controller manager: the controllers that make objects so.
    ControllerManager(controller_manager::ControllerManagerArgs),
    /// The scheduler: binds pending pods to nodes.
    Scheduler(SchedulerArgs),
    /// The kubelet: runs the pods bound to this node through a CRI runtime (containerd).
    Kubelet(kubelet::KubeletArgs),
    /// kube-proxy: routes Service traffic to endpoints with nftables or iptables.
    Proxy(proxy::ProxyArgs),
    /// Simulated nodes (like kwok): Nodes whose pods run without processes, for scale tests.
    Sim(sim::SimArgs),
    /// Cluster DNS (CoreDNS's kubernetes plugin): Service and pod names of the cluster.
    Dns(dns::DnsArgs),
    /// Measure a part of rkube (results go to docs/benchmarks.md).
    Bench(bench::BenchArgs),
    /// Move a cluster's state between storage backends (SQLite to etcd and back); stop the API
    /// servers first.
    Migrate(migrate::MigrateArgs),
}

/// A client for the cluster of `kubeconfig`, else of $KUBECONFIG or ~/.kube/config.
pub(crate) async fn cluster_client(
    kubeconfig: Option<&std::path::Path>,
) -> Result<kube::Client, String> {
    match kubeconfig {
        Some(path) => client::kubeconfig::client_from_file(path).await,
        None => {
            let config = kube::Config::infer()
                .await
                .map_err(|e| format!("no cluster: {e}"))?;
            client::transport::client_from_config(&config).map_err(|e| format!("no cluster: {e}"))
        }
    }
}

#[derive(clap::Args)]
struct SchedulerArgs {
    /// Kubeconfig of the cluster (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(long)]
    kubeconfig: Option<std::path::PathBuf>,
    #[command(flatten)]
    servers: agent_lb::ServerFlags,
    /// A KubeSchedulerConfiguration (kubescheduler.config.k8s.io/v1) file: profiles, plugins,
    /// pluginConfig, percentageOfNodesToScore, parallelism, leaderElection.
    #[arg(long)]
    config: Option<std::path::PathBuf>,
    /// Without --config: the single profile's schedulerName.
    #[arg(long, default_value = "default-scheduler")]
    scheduler_name: String,
    /// Without --config: percentageOfNodesToScore (0: upstream's adaptive default).
    #[arg(long, default_value_t = 0)]
    percentage_of_nodes_to_score: usize,
    #[command(flatten)]
    leader_election: leader::LeaderElectionFlags,
}

async fn run_scheduler(args: SchedulerArgs) -> Result<(), String> {
    let config = scheduler_config(
        args.config.as_deref(),
        &args.scheduler_name,
        args.percentage_of_nodes_to_score,
    )?;
    // As upstream, the file's clientConnection.kubeconfig and leaderElection win over flags.
    let file_kubeconfig = config
        .configuration
        .client_connection
        .as_ref()
        .and_then(|c| c.kubeconfig.clone())
        .filter(|k| !k.is_empty())
        .map(std::path::PathBuf::from);
    let kubeconfig = file_kubeconfig.or(args.kubeconfig);
    let client = agent_lb::cluster_client(kubeconfig.as_deref(), &args.servers).await?;
    let mut election = args.leader_election.clone();
    if let Some(le) = &config.configuration.leader_election {
        leader::apply_configuration(&mut election, le)?;
    }
    let elected = client.clone();
    leader::run_elected(elected, &election, "kube-scheduler", move || async move {
        if let Err(e) = scheduler::run_checked(client, config).await {
            tracing::error!(error = %e, "scheduler stopped");
        }
    })
    .await
}

/// The scheduler configuration: the file, else one profile from the flags.
pub(crate) fn scheduler_config(
    file: Option<&std::path::Path>,
    scheduler_name: &str,
    percentage: usize,
) -> Result<scheduler::SchedulerConfig, String> {
    match file {
        Some(path) => scheduler::SchedulerConfig::from_file(path),
        None => {
            let mut c = scheduler::SchedulerConfig::default();
            c.configuration.profiles[0].scheduler_name = Some(scheduler_name.to_string());
            c.configuration.percentage_of_nodes_to_score = Some(percentage as i64);
            Ok(c)
        }
    }
}

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("rkube: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Server(args) => serve::run(args).await,
            Command::Apiserver(args) => apiserver::run(args).await,
            Command::Sim(args) => sim::run(args).await,
            Command::Kubelet(args) => kubelet::run(args).await,
            Command::Scheduler(args) => run_scheduler(args).await,
            Command::ControllerManager(args) => controller_manager::run(args).await,
            Command::Bench(args) => bench::run(args).await,
            Command::Proxy(args) => proxy::run(args).await,
            Command::Dns(args) => dns::run(args).await,
            Command::Migrate(args) => migrate::run(args).await,
        }
    });
    // Blocking tasks cannot be aborted (kube-proxy's sync runner is a loop on its own thread), and
    // dropping the runtime would wait for them forever: a SIGTERMed `rkube server` drained its API
    // server in milliseconds and then never exited. Give them a moment, then exit regardless.
    runtime.shutdown_timeout(std::time::Duration::from_secs(5));
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rkube: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// Clap's own consistency checks (duplicate flag names across flattened groups, ...), which it
    /// otherwise only runs when a subcommand is parsed.
    #[test]
    fn command_line_is_consistent() {
        super::Cli::command().debug_assert();
    }
}
