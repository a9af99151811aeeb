//! `rkube`: Kubernetes, rebuilt in Rust. One binary whose subcommands are the Kubernetes components.

mod bench;
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
    /// Simulated nodes (like kwok): Nodes whose pods run without processes, for scale tests.
    Sim(sim::SimArgs),
    /// Measure a part of rkube (results go to docs/benchmarks.md).
    Bench(bench::BenchArgs),
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
