//! `rkube bench <scenario>`: benchmarks whose results are recorded in docs/benchmarks.md.

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
}

pub async fn run(args: BenchArgs) -> Result<(), String> {
    match args.scenario {
        Scenario::Storage(args) => storage_bench::run(args).await,
    }
}
