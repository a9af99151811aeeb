//! `rkube bench <scenario>`: benchmarks whose results are recorded in docs/benchmarks.md.

mod api_bench;
mod density;
mod schedule_bench;
mod storage_bench;
mod watched_pod;

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
    /// Upstream's scalability test shape on simulated nodes: Deployments at a pod rate, churn,
    /// upstream's SLIs against its SLOs, the server's RSS and CPU; a table, a CSV and a plot.
    Density(density::DensityBenchArgs),
}

pub async fn run(args: BenchArgs) -> Result<(), String> {
    match args.scenario {
        Scenario::Storage(args) => storage_bench::run(args).await,
        Scenario::Api(args) => api_bench::run(args).await,
        Scenario::Schedule(args) => schedule_bench::run(args).await,
        Scenario::Density(args) => density::run(args).await,
    }
}

/// A memory figure of a process from `/proc/<pid>/status` in MiB (`field`: `VmRSS`, `VmHWM`...).
fn proc_status_mib(pid: &str, field: &str) -> Result<f64, String> {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| format!("{path}: no {field} line"))?;
    Ok(kib / 1024.0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn proc_status_reads_memory_fields() {
        let rss = super::proc_status_mib("self", "VmRSS").expect("VmRSS");
        let peak = super::proc_status_mib("self", "VmHWM").expect("VmHWM");
        assert!(rss > 0.0 && peak > 0.0, "rss {rss} peak {peak}");
        // A prefix of a field is not the field.
        assert!(super::proc_status_mib("self", "VmR").is_err());
    }
}
