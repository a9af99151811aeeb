//! `rkube`: Kubernetes, rebuilt in Rust. One binary whose subcommands are the Kubernetes components.

mod bench;
mod controller_flags;
mod controller_manager;
mod kubelet;
mod leader;
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
    /// The controller manager: the controllers that make objects so.
    ControllerManager(controller_manager::ControllerManagerArgs),
    /// The scheduler: binds pending pods to nodes.
    Scheduler(SchedulerArgs),
    /// The kubelet: runs the pods bound to this node through a CRI runtime (containerd).
    Kubelet(kubelet::KubeletArgs),
    /// Simulated nodes (like kwok): Nodes whose pods run without processes, for scale tests.
    Sim(sim::SimArgs),
    /// Measure a part of rkube (results go to docs/benchmarks.md).
    Bench(bench::BenchArgs),
}

/// A client for the cluster of `kubeconfig`, else of $KUBECONFIG or ~/.kube/config.
pub(crate) async fn cluster_client(
    kubeconfig: Option<&std::path::Path>,
) -> Result<kube::Client, String> {
    match kubeconfig {
        Some(path) => client::kubeconfig::client_from_file(path).await,
        None => kube::Client::try_default()
            .await
            .map_err(|e| format!("no cluster: {e}")),
    }
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
    #[command(flatten)]
    leader_election: leader::LeaderElectionFlags,
}

async fn run_scheduler(args: SchedulerArgs) -> Result<(), String> {
    let client = cluster_client(args.kubeconfig.as_deref()).await?;
    let config = scheduler::SchedulerConfig {
        scheduler_name: args.scheduler_name,
        percentage_of_nodes_to_score: args.percentage_of_nodes_to_score,
    };
    let elected = client.clone();
    leader::run_elected(
        elected,
        &args.leader_election,
        "kube-scheduler",
        move || scheduler::run(client, config),
    )
    .await
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
            Command::Kubelet(args) => kubelet::run(args).await,
            Command::Scheduler(args) => run_scheduler(args).await,
            Command::ControllerManager(args) => controller_manager::run(args).await,
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
