//! `rkube bench storage`: the storage backends side by side, both durable (fsync on commit).
//!
//! For each backend: creates of `--value-size` values by 1, 16 and 64 concurrent writers (writes/s,
//! p50/p99 latency), the delay from issuing a write to a watcher receiving its event, and a list of
//! `--list-keys` keys (whole, and in pages of 500). etcd is started from the machine's `etcd` binary on
//! free loopback ports unless `--etcd-servers` is given.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Args;
use futures::StreamExt;
use hdrhistogram::Histogram;
use storage::etcd::EtcdStore;
use storage::etcd_process::EtcdProcess;
use storage::sqlite::{SqliteOptions, SqliteStore};
use storage::{ListOptions, Store};

#[derive(Args)]
pub struct StorageBenchArgs {
    /// Backends to measure, comma-separated: sqlite, etcd.
    #[arg(long, value_delimiter = ',', default_value = "sqlite,etcd")]
    backend: Vec<String>,
    /// Concurrent writers, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,16,64")]
    concurrency: Vec<usize>,
    /// Writes per concurrency level (a tenth of it for a single writer, which pays one fsync per write).
    #[arg(long, default_value_t = 20_000)]
    writes: usize,
    /// Bytes per value.
    #[arg(long, default_value_t = 1024)]
    value_size: usize,
    /// Keys in the list benchmark.
    #[arg(long, default_value_t = 10_000)]
    list_keys: usize,
    /// Use this etcd instead of starting one.
    #[arg(long)]
    etcd_servers: Option<String>,
    /// Directory for the SQLite file (default: a temporary directory).
    #[arg(long)]
    data_dir: Option<std::path::PathBuf>,
}

pub async fn run(args: StorageBenchArgs) -> Result<(), String> {
    println!(
        "| backend | writers | writes | writes/s | p50 ms | p99 ms | watch delay p50 ms | watch delay p99 ms |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let mut list_rows = Vec::new();
    for backend in &args.backend {
        let (store, _guards) = open_backend(backend, &args).await?;
        for &writers in &args.concurrency {
            let total = if writers == 1 {
                args.writes / 10
            } else {
                args.writes
            };
            let r = write_phase(
                &store,
                &format!("/bench/w{writers}/"),
                writers,
                total,
                args.value_size,
            )
            .await?;
            println!(
                "| {backend} | {writers} | {total} | {:.0} | {:.2} | {:.2} | {:.2} | {:.2} |",
                r.per_second, r.p50_ms, r.p99_ms, r.watch_p50_ms, r.watch_p99_ms
            );
        }
        list_rows.push((backend.clone(), list_phase(&store, &args).await?));
    }
    println!();
    println!("| backend | keys | list all (median of 5) ms | list in pages of 500 ms |");
    println!("|---|---|---|---|");
    for (backend, (all_ms, paged_ms)) in list_rows {
        println!(
            "| {backend} | {} | {all_ms:.1} | {paged_ms:.1} |",
            args.list_keys
        );
    }
    Ok(())
}

/// Keeps whatever backs a store alive (temporary directory, etcd process) until the backend is done.
type Guards = (Option<tempfile::TempDir>, Option<EtcdProcess>);

async fn open_backend(
    name: &str,
    args: &StorageBenchArgs,
) -> Result<(Arc<dyn Store>, Guards), String> {
    match name {
        "sqlite" => {
            let (dir, tmp) = match &args.data_dir {
                Some(dir) => (dir.clone(), None),
                None => {
                    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
                    (tmp.path().to_path_buf(), Some(tmp))
                }
            };
            let store = SqliteStore::open(dir.join("bench.db"), SqliteOptions::default())
                .map_err(|e| e.to_string())?;
            Ok((Arc::new(store), (tmp, None)))
        }
        "etcd" => {
            let (endpoint, process) = match &args.etcd_servers {
                Some(servers) => (servers.clone(), None),
                None => {
                    let process = EtcdProcess::start()?;
                    (process.endpoint.clone(), Some(process))
                }
            };
            let endpoints: Vec<String> = endpoint.split(',').map(str::to_string).collect();
            let store = EtcdStore::connect(&endpoints, storage::etcd::DEFAULT_PREFIX)
                .await
                .map_err(|e| e.to_string())?;
            Ok((Arc::new(store), (None, process)))
        }
        other => Err(format!(
            "unknown backend {other:?} (expected sqlite or etcd)"
        )),
    }
}

struct WriteResult {
    per_second: f64,
    p50_ms: f64,
    p99_ms: f64,
    watch_p50_ms: f64,
    watch_p99_ms: f64,
}

fn new_histogram() -> Histogram<u64> {
    // Microseconds, up to 100 s, 3 significant digits.
    Histogram::new_with_bounds(1, 100_000_000, 3).expect("valid histogram bounds")
}

/// A value of `size` bytes whose first 20 carry the microseconds since `epoch` at which it was written.
fn stamped_value(epoch: Instant, size: usize) -> Bytes {
    let mut v = format!("{:020}", epoch.elapsed().as_micros()).into_bytes();
    v.resize(size.max(20), b'x');
    Bytes::from(v)
}

async fn write_phase(
    store: &Arc<dyn Store>,
    prefix: &str,
    writers: usize,
    total: usize,
    value_size: usize,
) -> Result<WriteResult, String> {
    let epoch = Instant::now();
    let mut watch = store.watch(prefix, 0).await.map_err(|e| e.to_string())?;
    let watcher = tokio::spawn(async move {
        let mut delays = new_histogram();
        while delays.len() < total as u64 {
            let next = tokio::time::timeout(Duration::from_secs(60), watch.next()).await;
            let Ok(Some(Ok(event))) = next else { break };
            let stamp: u64 = std::str::from_utf8(&event.kv.value[..20])
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            let now = epoch.elapsed().as_micros() as u64;
            let _ = delays.record(now.saturating_sub(stamp).max(1));
        }
        delays
    });
    let started = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..writers {
        let store = store.clone();
        let prefix = prefix.to_string();
        let count = total / writers + usize::from(w < total % writers);
        tasks.push(tokio::spawn(async move {
            let mut latencies = new_histogram();
            for i in 0..count {
                let value = stamped_value(epoch, value_size);
                let t = Instant::now();
                store
                    .create(&format!("{prefix}w{w}/k{i}"), value)
                    .await
                    .map_err(|e| e.to_string())?;
                let _ = latencies.record(t.elapsed().as_micros().max(1) as u64);
            }
            Ok::<_, String>(latencies)
        }));
    }
    let mut latencies = new_histogram();
    for t in tasks {
        let h = t.await.map_err(|e| e.to_string())??;
        latencies.add(&h).map_err(|e| e.to_string())?;
    }
    let elapsed = started.elapsed();
    let delays = watcher.await.map_err(|e| e.to_string())?;
    if delays.len() < total as u64 {
        return Err(format!("watcher saw {} of {total} events", delays.len()));
    }
    let ms = |us: u64| us as f64 / 1000.0;
    Ok(WriteResult {
        per_second: total as f64 / elapsed.as_secs_f64(),
        p50_ms: ms(latencies.value_at_quantile(0.5)),
        p99_ms: ms(latencies.value_at_quantile(0.99)),
        watch_p50_ms: ms(delays.value_at_quantile(0.5)),
        watch_p99_ms: ms(delays.value_at_quantile(0.99)),
    })
}

/// Creates the keys, then times a whole list (median of 5) and a paged list (pages of 500).
async fn list_phase(store: &Arc<dyn Store>, args: &StorageBenchArgs) -> Result<(f64, f64), String> {
    let prefix = "/bench/list/";
    write_phase(store, prefix, 64, args.list_keys, args.value_size).await?;
    let mut runs = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let list = store
            .list(ListOptions::prefix(prefix))
            .await
            .map_err(|e| e.to_string())?;
        runs.push(t.elapsed().as_secs_f64() * 1000.0);
        if list.items.len() != args.list_keys {
            return Err(format!(
                "listed {} keys, expected {}",
                list.items.len(),
                args.list_keys
            ));
        }
    }
    runs.sort_by(f64::total_cmp);
    let t = Instant::now();
    let mut after: Option<String> = None;
    let mut revision = None;
    let mut seen = 0;
    loop {
        let page = store
            .list(ListOptions {
                prefix,
                start_after: after.as_deref(),
                limit: Some(500),
                at_revision: revision,
            })
            .await
            .map_err(|e| e.to_string())?;
        revision = Some(page.revision);
        seen += page.items.len();
        after = page.items.last().map(|kv| kv.key.clone());
        if !page.more {
            break;
        }
    }
    let paged = t.elapsed().as_secs_f64() * 1000.0;
    if seen != args.list_keys {
        return Err(format!(
            "paged list saw {seen} keys, expected {}",
            args.list_keys
        ));
    }
    Ok((runs[2], paged))
}
