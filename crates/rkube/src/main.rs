//! `rkube`: Kubernetes, rebuilt in Rust. One binary whose subcommands are the Kubernetes components.

mod bench;
mod controller_flags;
mod serve;
mod sim;

use clap::{Parser, Subcommand};

/// mimalloc: the API server allocates many small, short-lived JSON values per request, where it is
/// markedly faster than glibc's malloc (see docs/benchmarks.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "rkube", version, about = "Kubernetes, rebuilt in Rust")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Every component in one process on an embedded store (for now: the API server).
    Server(serve::ServeArgs),
    /// The Kubernetes API server.
    Apiserver(serve::ServeArgs),
    /// The controller manager: the controllers that make objects so (for now: ReplicaSet).
    ControllerManager(ControllerManagerArgs),
    /// The scheduler: binds pending pods to nodes.
    Scheduler(SchedulerArgs),
    /// Simulated nodes (like kwok): Nodes whose pods run without processes, for scale tests.
    Sim(sim::SimArgs),
    /// Measure a part of rkube (results go to docs/benchmarks.md).
    Bench(bench::BenchArgs),
}

#[derive(clap::Args)]
struct ClusterArgs {
    /// Kubeconfig of the cluster (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(long)]
    kubeconfig: Option<std::path::PathBuf>,
}

impl ClusterArgs {
    async fn client(&self) -> Result<kube::Client, String> {
        match &self.kubeconfig {
            Some(path) => client::kubeconfig::client_from_file(path).await,
            None => kube::Client::try_default()
                .await
                .map_err(|e| format!("no cluster: {e}")),
        }
    }
}

#[derive(clap::Args)]
struct ControllerManagerArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
    #[command(flatten)]
    controllers: controller_flags::ControllerFlags,
}

#[derive(clap::Args)]
struct SchedulerArgs {
    /// Kubeconfig of the cluster (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(long)]
    kubeconfig: Option<std::path::PathBuf>,
    /// Schedule the pods whose spec.schedulerName is this.
    #[arg(long, default_value = "default-scheduler")]
    scheduler_name: String,
    /// percentageOfNodesToScore (0: upstream's adaptive default).
    #[arg(long, default_value_t = 0)]
    percentage_of_nodes_to_score: usize,
}

async fn run_scheduler(args: SchedulerArgs) -> Result<(), String> {
    let client = match &args.kubeconfig {
        Some(path) => client::kubeconfig::client_from_file(path).await?,
        None => kube::Client::try_default()
            .await
            .map_err(|e| format!("no cluster: {e}"))?,
    };
    let config = scheduler::SchedulerConfig {
        scheduler_name: args.scheduler_name,
        percentage_of_nodes_to_score: args.percentage_of_nodes_to_score,
    };
    tokio::select! {
        _ = scheduler::run(client, config) => Ok(()),
        r = tokio::signal::ctrl_c() => r.map_err(|e| e.to_string()),
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
            Command::Server(args) | Command::Apiserver(args) => serve::run(args).await,
            Command::Sim(args) => sim::run(args).await,
            Command::Scheduler(args) => run_scheduler(args).await,
            Command::ControllerManager(args) => {
                let client = args.cluster.client().await?;
                let options = args
                    .controllers
                    .options(args.cluster.kubeconfig.as_deref())?;
                tokio::select! {
                    _ = controllers::run(client, options) => Ok(()),
                    r = tokio::signal::ctrl_c() => r.map_err(|e| e.to_string()),
                }
            }
            Command::Bench(args) => bench::run(args).await,
        }
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rkube: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
