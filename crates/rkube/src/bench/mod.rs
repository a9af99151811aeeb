//! `rkube bench <scenario>`: benchmarks whose results are recorded in docs/benchmarks.md.

mod api_bench;
mod schedule_bench;
mod storage_bench;

use clap::{Args, Subcommand};

#[derive(Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    scenario: Scenario,
}

#[derive(Subcommand)]
enum Scenario {
    /// Storage backends: durable writes/s and latency at several concurrencies, list, watch delivery.
    Storage(storage_bench::StorageBenchArgs),
    /// A running API server over HTTPS: creates, GETs, LISTs and the watch fan-out, like a real client.
    Api(api_bench::ApiBenchArgs),
    /// Pods from creation to Running on simulated nodes with the scheduler (in-process by default).
    Schedule(schedule_bench::ScheduleBenchArgs),
}

pub async fn run(args: BenchArgs) -> Result<(), String> {
    match args.scenario {
        Scenario::Storage(args) => storage_bench::run(args).await,
        Scenario::Api(args) => api_bench::run(args).await,
        Scenario::Schedule(args) => schedule_bench::run(args).await,
    }
}
