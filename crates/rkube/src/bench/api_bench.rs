//! `rkube bench api`: a running API server (rkube or upstream kube-apiserver) measured over HTTPS the way
//! a real client uses it: the credentials of a kubeconfig, one pooled hyper client (HTTP/2 by ALPN, as
//! client-go does, or HTTP/1.1 with `--http1`), JSON bodies. Connections are opened before each timed
//! run, so TLS handshakes are not measured; watches use connections of their own, 50 per connection.
//!
//! Scenarios (`--scenarios`):
//! - `create`: ConfigMaps of `--payload-bytes` data created by 1, 8 and 32 closed-loop tasks (creates/s,
//!   p50/p99 latency);
//! - `get`: one ConfigMap read by 16 tasks for `--get-seconds`, as a quorum read and with
//!   `resourceVersion=0` (GETs/s, p50/p99);
//! - `list`: `--list-objects` ConfigMaps listed whole (median of 5), with `resourceVersion=0` (median of 5)
//!   and in pages of 500 following `continue` (median of 3);
//! - `watch`: `--watchers` watches on one namespace, then 8 writers create `--watch-events` ConfigMaps
//!   stamped with their issue time; every watcher must see every event exactly once (delay from issuing a
//!   write to a watcher reading it: p50/p99/max, and the time from the first write to the last delivery).
//!
//! With `--server-pid` the server's resident memory is read from `/proc` when idle and after each scenario.
//!
//! Against peerbench (`/work/shared/tools/peerbench`, which measured upstream): the operations and URLs
//! are the same (`create-cm`, `list-cm`, wrk for GET), but peerbench speaks HTTP/1.1 with one connection
//! per worker and creates ConfigMaps with a ~100 byte payload; use `--http1 --payload-bytes 100` for the
//! like-for-like figures. Timings here stop when a response body has been fully received (a paged list
//! also extracts each page's `continue`); peerbench also decodes list items.

mod http;

use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Args;
use hdrhistogram::Histogram;
use http_body_util::BodyExt;
use hyper::StatusCode;
use serde::de::IgnoredAny;
use serde::Deserialize;

use self::http::ApiClient;

const SCENARIOS: &[&str] = &["create", "get", "list", "watch"];
/// Concurrent readers in the `get` scenario (wrk's 16 connections in the upstream figures).
const GET_TASKS: usize = 16;
/// Writers in the `watch` scenario.
const WATCH_WRITERS: usize = 8;
/// Tasks that fill the `list` namespace.
const FILL_TASKS: usize = 32;
/// Watches per HTTP/2 connection. hyper's client queues streams beyond the server's
/// SETTINGS_MAX_CONCURRENT_STREAMS (kube-apiserver: 100, hyper servers: 200) where Go's client opens
/// another connection, so the watchers are spread over connections of their own.
const WATCHES_PER_CONNECTION: usize = 50;
/// A watch that receives nothing for this long has failed.
const WATCH_IDLE: Duration = Duration::from_secs(60);
/// The watch scenario fails when no watcher makes progress for this long.
const WATCH_STALL: Duration = Duration::from_secs(30);
/// The data key of watch-scenario ConfigMaps: `"<index>:<issue micros>"`.
const STAMP_KEY: &str = "rkubeBenchStamp";
/// How the stamp appears in a compact JSON watch event.
const STAMP_NEEDLE: &[u8] = b"\"rkubeBenchStamp\":\"";

#[derive(Args)]
pub struct ApiBenchArgs {
    /// Kubeconfig with the server URL and credentials (its current context).
    #[arg(long)]
    kubeconfig: PathBuf,
    /// Namespace for the objects (created if missing); `list` uses NAMESPACE-list, `watch` NAMESPACE-watch.
    #[arg(long, default_value = "bench")]
    namespace: String,
    /// ConfigMaps created per concurrency level.
    #[arg(long, default_value_t = 10_000)]
    creates: u64,
    /// Concurrent creating tasks, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,8,32")]
    concurrency: Vec<usize>,
    /// ConfigMaps in the listed namespace.
    #[arg(long, default_value_t = 10_000)]
    list_objects: u64,
    /// Concurrent watches in the fan-out.
    #[arg(long, default_value_t = 100)]
    watchers: usize,
    /// Objects created while the watches are open.
    #[arg(long, default_value_t = 10_000)]
    watch_events: u64,
    /// Report this process's resident memory (the API server's) from /proc.
    #[arg(long)]
    server_pid: Option<u32>,
    /// Scenarios to run, comma-separated: create, get, list, watch.
    #[arg(long, value_delimiter = ',', default_value = "create,get,list,watch")]
    scenarios: Vec<String>,
    /// Seconds of each GET run.
    #[arg(long, default_value_t = 10)]
    get_seconds: u64,
    /// Bytes of data per created ConfigMap (create, get and list scenarios).
    #[arg(long, default_value_t = 1024)]
    payload_bytes: usize,
    /// Speak HTTP/1.1 only (a connection per concurrent request, like peerbench and wrk).
    #[arg(long)]
    http1: bool,
}

pub async fn run(args: ApiBenchArgs) -> Result<(), String> {
    for s in &args.scenarios {
        if !SCENARIOS.contains(&s.as_str()) {
            return Err(format!(
                "unknown scenario {s:?} (expected {})",
                SCENARIOS.join(", ")
            ));
        }
    }
    let counts = [args.creates, args.list_objects, args.watch_events];
    if args.concurrency.contains(&0) || args.watchers == 0 || counts.contains(&0) {
        return Err("--concurrency, --creates, --list-objects, --watchers and --watch-events must be positive".into());
    }
    let client = ApiClient::from_kubeconfig(&args.kubeconfig, args.http1)?;
    let version = client.get("/version").await?;
    let protocol = format!("{:?}", version.version);
    let version: serde_json::Value =
        serde_json::from_slice(&version.expect(&[StatusCode::OK], "GET /version")?)
            .map_err(|e| format!("GET /version: {e}"))?;
    println!(
        "API server {} ({}), {protocol}, payload {} bytes",
        client.server(),
        version["gitVersion"].as_str().unwrap_or("unknown version"),
        args.payload_bytes
    );
    let mut rss = Vec::new();
    sample_rss(&args, &mut rss, "idle (start)")?;
    let result = run_scenarios(&args, &client, &mut rss).await;
    if !rss.is_empty() {
        println!();
        println!("| server RSS | MiB |");
        println!("|---|---|");
        for (point, mib) in &rss {
            println!("| {point} | {mib:.1} |");
        }
    }
    result
}

async fn run_scenarios(
    args: &ApiBenchArgs,
    client: &ApiClient,
    rss: &mut Vec<(String, f64)>,
) -> Result<(), String> {
    let run_id = run_id();
    let wants = |s: &str| args.scenarios.iter().any(|x| x == s);
    ensure_namespace(client, &args.namespace).await?;
    let payload = "x".repeat(args.payload_bytes);
    if wants("create") {
        create_scenario(args, client, &run_id, &payload).await?;
        sample_rss(args, rss, "after creates")?;
    }
    if wants("get") {
        get_scenario(args, client, &payload).await?;
        sample_rss(args, rss, "after GETs")?;
    }
    if wants("list") {
        list_scenario(args, client, &payload).await?;
        sample_rss(args, rss, "after lists")?;
    }
    if wants("watch") {
        watch_scenario(args, client, &run_id).await?;
        sample_rss(args, rss, "after watch fan-out")?;
    }
    Ok(())
}

/// A short lowercase tag (seconds since 1970 in base 36) that keeps object names unique across runs.
fn run_id() -> String {
    let mut n = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let mut out = Vec::new();
    loop {
        out.push(b"0123456789abcdefghijklmnopqrstuvwxyz"[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8_lossy(&out).into_owned()
}

fn sample_rss(
    args: &ApiBenchArgs,
    rss: &mut Vec<(String, f64)>,
    point: &str,
) -> Result<(), String> {
    let Some(pid) = args.server_pid else {
        return Ok(());
    };
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| format!("{path}: no VmRSS line"))?;
    rss.push((point.to_string(), kib / 1024.0));
    Ok(())
}

async fn ensure_namespace(client: &ApiClient, name: &str) -> Result<(), String> {
    let body =
        format!(r#"{{"apiVersion":"v1","kind":"Namespace","metadata":{{"name":"{name}"}}}}"#);
    client
        .post("/api/v1/namespaces", body)
        .await?
        .expect(
            &[StatusCode::OK, StatusCode::CREATED, StatusCode::CONFLICT],
            &format!("creating namespace {name}"),
        )
        .map(drop)
}

fn configmap(name: &str, key: &str, value: &str) -> String {
    format!(
        r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}","labels":{{"bench":"rkube"}}}},"data":{{"{key}":"{value}"}}}}"#
    )
}

async fn create_configmap(
    client: &ApiClient,
    ns: &str,
    body: String,
    conflict_ok: bool,
) -> Result<(), String> {
    let ok: &[StatusCode] = if conflict_ok {
        &[StatusCode::CREATED, StatusCode::CONFLICT]
    } else {
        &[StatusCode::CREATED]
    };
    client
        .post(&format!("/api/v1/namespaces/{ns}/configmaps"), body)
        .await?
        .expect(ok, &format!("creating a ConfigMap in {ns}"))
        .map(drop)
}

fn new_histogram() -> Histogram<u64> {
    // Microseconds, up to 1000 s, 3 significant digits.
    Histogram::new_with_bounds(1, 1_000_000_000, 3).expect("valid histogram bounds")
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

fn median(mut runs: Vec<f64>) -> f64 {
    runs.sort_by(f64::total_cmp);
    runs.get(runs.len() / 2).copied().unwrap_or(f64::NAN)
}

/// When a closed-loop run ends.
#[derive(Clone, Copy)]
enum Until {
    Ops(u64),
    Elapsed(Duration),
}

struct LoadResult {
    ops: u64,
    elapsed: Duration,
    latencies: Histogram<u64>,
}

impl LoadResult {
    fn per_second(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64()
    }
}

/// Opens the connections `tasks` concurrent requests need (one per request over HTTP/1.1), so that TLS
/// handshakes are not part of the measurement (wrk also connects before it measures).
async fn warm_up(client: &ApiClient, tasks: usize) -> Result<(), String> {
    let requests = (0..tasks).map(|_| client.get("/version"));
    for reply in futures::future::join_all(requests).await {
        reply?.expect(&[StatusCode::OK], "GET /version").map(drop)?;
    }
    Ok(())
}

/// Runs `op(i)` for i = 0, 1, 2, ... from `tasks` tasks, each issuing its next request when the previous
/// one is answered, until `until`; the first error stops every task and is returned.
async fn closed_loop<F, Fut>(tasks: usize, until: Until, op: F) -> Result<LoadResult, String>
where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), String>> + Send + 'static,
{
    let op = Arc::new(op);
    let next = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let (op, next, failed) = (op.clone(), next.clone(), failed.clone());
        handles.push(tokio::spawn(async move {
            let mut latencies = new_histogram();
            while !failed.load(Ordering::Relaxed) {
                let i = next.fetch_add(1, Ordering::Relaxed);
                match until {
                    Until::Ops(n) if i >= n => break,
                    Until::Elapsed(d) if started.elapsed() >= d => break,
                    _ => {}
                }
                let t = Instant::now();
                if let Err(e) = op(i).await {
                    failed.store(true, Ordering::Relaxed);
                    return Err(e);
                }
                let _ = latencies.record(t.elapsed().as_micros().max(1) as u64);
            }
            Ok(latencies)
        }));
    }
    let mut latencies = new_histogram();
    let mut first_error = None;
    for h in handles {
        match h.await.map_err(|e| e.to_string()).and_then(|r| r) {
            Ok(h) => latencies.add(&h).map_err(|e| e.to_string())?,
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    Ok(LoadResult {
        ops: latencies.len(),
        elapsed: started.elapsed(),
        latencies,
    })
}

async fn create_scenario(
    args: &ApiBenchArgs,
    client: &ApiClient,
    run_id: &str,
    payload: &str,
) -> Result<(), String> {
    println!();
    println!("| creating tasks | creates | creates/s | p50 ms | p99 ms | max ms |");
    println!("|---|---|---|---|---|---|");
    for &c in &args.concurrency {
        let (client2, ns) = (client.clone(), args.namespace.clone());
        let prefix = format!("c{c}-{run_id}-");
        let payload = Arc::<str>::from(payload);
        warm_up(client, c).await?;
        let r = closed_loop(c, Until::Ops(args.creates), move |i| {
            let (client, ns) = (client2.clone(), ns.clone());
            let body = configmap(&format!("{prefix}{i}"), "payload", &payload);
            async move { create_configmap(&client, &ns, body, false).await }
        })
        .await?;
        let h = &r.latencies;
        println!(
            "| {c} | {} | {:.0} | {:.2} | {:.2} | {:.2} |",
            r.ops,
            r.per_second(),
            ms(h.value_at_quantile(0.5)),
            ms(h.value_at_quantile(0.99)),
            ms(h.max())
        );
    }
    Ok(())
}

async fn get_scenario(
    args: &ApiBenchArgs,
    client: &ApiClient,
    payload: &str,
) -> Result<(), String> {
    let ns = &args.namespace;
    create_configmap(client, ns, configmap("bench-get", "payload", payload), true).await?;
    println!();
    println!("| GET one ConfigMap | tasks | GETs | GETs/s | p50 ms | p99 ms |");
    println!("|---|---|---|---|---|---|");
    let base = format!("/api/v1/namespaces/{ns}/configmaps/bench-get");
    for (label, query) in [
        ("quorum read", ""),
        ("resourceVersion=0", "?resourceVersion=0"),
    ] {
        let path: Arc<str> = format!("{base}{query}").into();
        warm_up(client, GET_TASKS).await?;
        let client = client.clone();
        let r = closed_loop(
            GET_TASKS,
            Until::Elapsed(Duration::from_secs(args.get_seconds)),
            move |_| {
                let (client, path) = (client.clone(), path.clone());
                async move {
                    client
                        .get(&path)
                        .await?
                        .expect(&[StatusCode::OK], &path)
                        .map(drop)
                }
            },
        )
        .await?;
        println!(
            "| {label} | {GET_TASKS} | {} | {:.0} | {:.2} | {:.2} |",
            r.ops,
            r.per_second(),
            ms(r.latencies.value_at_quantile(0.5)),
            ms(r.latencies.value_at_quantile(0.99))
        );
    }
    Ok(())
}

#[derive(Deserialize)]
struct ListBody {
    #[serde(default)]
    metadata: ListMeta,
    #[serde(default)]
    items: Vec<IgnoredAny>,
}

#[derive(Deserialize, Default)]
struct ListMeta {
    #[serde(rename = "continue", default)]
    continue_token: Option<String>,
    #[serde(rename = "resourceVersion", default)]
    resource_version: Option<String>,
}

fn parse_list(body: &[u8], what: &str) -> Result<ListBody, String> {
    serde_json::from_slice(body).map_err(|e| format!("{what}: not a list: {e}"))
}

/// Percent-encodes a query value (a `continue` token is base64 and may hold `+`, `/` and `=`).
fn query_escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// One list, following `continue` when `limit` is set: (items, pages, bytes, milliseconds).
async fn timed_list(
    client: &ApiClient,
    path: &str,
    query: &str,
) -> Result<(u64, u64, u64, f64), String> {
    let started = Instant::now();
    let (mut items, mut pages, mut bytes) = (0u64, 0u64, 0u64);
    let mut token: Option<String> = None;
    let mut elapsed;
    loop {
        let mut url = format!("{path}?{query}");
        if let Some(t) = &token {
            url.push_str(&format!("&continue={}", query_escape(t)));
        }
        let body = client.get(&url).await?.expect(&[StatusCode::OK], &url)?;
        elapsed = started.elapsed();
        let list = parse_list(&body, &url)?;
        items += list.items.len() as u64;
        pages += 1;
        bytes += body.len() as u64;
        token = list.metadata.continue_token.filter(|t| !t.is_empty());
        if token.is_none() {
            break;
        }
        if pages > 100_000 {
            return Err(format!("{path}?{query}: more than 100000 pages"));
        }
    }
    Ok((items, pages, bytes, elapsed.as_secs_f64() * 1000.0))
}

async fn list_scenario(
    args: &ApiBenchArgs,
    client: &ApiClient,
    payload: &str,
) -> Result<(), String> {
    let ns = format!("{}-list", args.namespace);
    let path = format!("/api/v1/namespaces/{ns}/configmaps");
    let want = args.list_objects;
    ensure_namespace(client, &ns).await?;
    let (have, ..) = timed_list(client, &path, "limit=500").await?;
    if have > want {
        return Err(format!(
            "namespace {ns} holds {have} ConfigMaps, more than --list-objects {want}; delete it first"
        ));
    }
    if have < want {
        eprintln!(
            "rkube bench api: creating {} ConfigMaps in {ns}",
            want - have
        );
        let (client2, ns2) = (client.clone(), ns.clone());
        let payload = Arc::<str>::from(payload);
        closed_loop(FILL_TASKS, Until::Ops(want), move |i| {
            let (client, ns) = (client2.clone(), ns2.clone());
            let body = configmap(&format!("item-{i}"), "payload", &payload);
            async move { create_configmap(&client, &ns, body, true).await }
        })
        .await?;
    }
    println!();
    println!("| LIST ConfigMaps | objects | pages | bytes | median ms | runs |");
    println!("|---|---|---|---|---|---|");
    let kinds = [
        ("quorum", "", 5),
        ("resourceVersion=0", "resourceVersion=0", 5),
        ("pages of 500", "limit=500", 3),
    ];
    for (label, query, runs) in kinds {
        let mut times = Vec::new();
        let (mut pages, mut bytes) = (0, 0);
        for _ in 0..runs {
            let (items, p, b, t) = timed_list(client, &path, query).await?;
            if items != want {
                return Err(format!(
                    "LIST {path}?{query} returned {items} items, expected {want}"
                ));
            }
            (pages, bytes) = (p, b);
            times.push(t);
        }
        println!(
            "| {label} | {want} | {pages} | {bytes} | {:.1} | {runs} |",
            median(times)
        );
    }
    Ok(())
}

/// What one watcher saw.
struct WatcherResult {
    delays: Histogram<u64>,
    /// Microseconds since the shared epoch of its last delivery.
    last_delivery: u64,
}

async fn watch_scenario(
    args: &ApiBenchArgs,
    client: &ApiClient,
    run_id: &str,
) -> Result<(), String> {
    let ns = format!("{}-watch", args.namespace);
    let path = format!("/api/v1/namespaces/{ns}/configmaps");
    let (watchers, events) = (args.watchers, args.watch_events);
    ensure_namespace(client, &ns).await?;
    let body = client
        .get(&format!("{path}?limit=1"))
        .await?
        .expect(&[StatusCode::OK], &path)?;
    let rv = parse_list(&body, &path)?
        .metadata
        .resource_version
        .ok_or_else(|| format!("LIST {path}: no metadata.resourceVersion"))?;
    let watch_path: Arc<str> =
        format!("{path}?watch=true&resourceVersion={}", query_escape(&rv)).into();

    warm_up(client, WATCH_WRITERS).await?;
    let epoch = Instant::now();
    let delivered = Arc::new(AtomicU64::new(0));
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel::<Result<(), String>>(watchers);
    // Watchers read (and time out when idle) only once every watch is open and the writers start.
    let (go_tx, go_rx) = tokio::sync::watch::channel(false);
    let watch_clients: Vec<ApiClient> = (0..watchers.div_ceil(WATCHES_PER_CONNECTION))
        .map(|_| client.with_own_connections())
        .collect();
    let mut handles = Vec::new();
    for w in 0..watchers {
        let (client, watch_path, delivered, ready) = (
            watch_clients[w / WATCHES_PER_CONNECTION].clone(),
            watch_path.clone(),
            delivered.clone(),
            ready_tx.clone(),
        );
        let mut go = go_rx.clone();
        handles.push(tokio::spawn(async move {
            let body = match client.open_stream(&watch_path, WATCH_IDLE * 2).await {
                Ok(body) => body,
                Err(e) => {
                    let _ = ready.send(Err(e.clone())).await;
                    return Err(e);
                }
            };
            let _ = ready.send(Ok(())).await;
            go.wait_for(|go| *go)
                .await
                .map_err(|_| "watch scenario abandoned".to_string())?;
            read_watch(body, events, epoch, &delivered).await
        }));
    }
    drop(ready_tx);
    let abort_all = |handles: &[tokio::task::JoinHandle<_>]| handles.iter().for_each(|h| h.abort());
    for opened in 0..watchers {
        let next = tokio::time::timeout(WATCH_IDLE, ready_rx.recv()).await;
        let failure = match next {
            Ok(Some(Ok(()))) => continue,
            Ok(Some(Err(e))) => e,
            Ok(None) => "a watcher ended before opening its watch".to_string(),
            Err(_) => format!("only {opened} of {watchers} watches opened within {WATCH_IDLE:?}"),
        };
        abort_all(&handles);
        return Err(failure);
    }

    let _ = go_tx.send(true);
    let first_write = epoch.elapsed().as_micros() as u64;
    let (client2, ns2) = (client.clone(), ns.clone());
    let prefix = format!("w-{run_id}-");
    let writes = closed_loop(WATCH_WRITERS, Until::Ops(events), move |i| {
        let (client, ns) = (client2.clone(), ns2.clone());
        let stamp = format!("{i}:{}", epoch.elapsed().as_micros());
        let body = configmap(&format!("{prefix}{i}"), STAMP_KEY, &stamp);
        async move { create_configmap(&client, &ns, body, false).await }
    })
    .await;
    let writes = match writes {
        Ok(w) => w,
        Err(e) => {
            abort_all(&handles);
            return Err(e);
        }
    };

    // Wait for the deliveries while they make progress.
    let expected = watchers as u64 * events;
    let mut all = Box::pin(futures::future::join_all(handles.iter_mut()));
    let (mut last_count, mut last_progress) = (u64::MAX, Instant::now());
    let results = loop {
        if let Ok(results) = tokio::time::timeout(Duration::from_secs(1), &mut all).await {
            break results;
        }
        let now = delivered.load(Ordering::Relaxed);
        if now != last_count {
            (last_count, last_progress) = (now, Instant::now());
        } else if last_progress.elapsed() >= WATCH_STALL {
            drop(all);
            abort_all(&handles);
            return Err(format!(
                "watch fan-out stalled: {now} of {expected} deliveries, none in the last {WATCH_STALL:?}"
            ));
        }
    };
    let mut delays = new_histogram();
    let mut last_delivery = 0;
    for r in results {
        let r = r.map_err(|e| e.to_string())??;
        delays.add(&r.delays).map_err(|e| e.to_string())?;
        last_delivery = last_delivery.max(r.last_delivery);
    }
    if delays.len() != expected {
        return Err(format!(
            "{} deliveries, expected {watchers} x {events} = {expected}",
            delays.len()
        ));
    }
    let span = Duration::from_micros(last_delivery.saturating_sub(first_write));
    println!();
    println!(
        "| watchers | events | deliveries | delay p50 ms | delay p99 ms | delay max ms | first write to last delivery s | deliveries/s | writes/s |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    println!(
        "| {watchers} | {events} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.0} | {:.0} |",
        delays.len(),
        ms(delays.value_at_quantile(0.5)),
        ms(delays.value_at_quantile(0.99)),
        ms(delays.max()),
        span.as_secs_f64(),
        expected as f64 / span.as_secs_f64(),
        writes.per_second()
    );
    Ok(())
}

/// Reads one watch stream until it has delivered each of the `events` stamped objects exactly once.
async fn read_watch(
    mut body: hyper::body::Incoming,
    events: u64,
    epoch: Instant,
    delivered: &AtomicU64,
) -> Result<WatcherResult, String> {
    let mut seen = vec![false; events as usize];
    let mut result = WatcherResult {
        delays: new_histogram(),
        last_delivery: 0,
    };
    let mut partial: Vec<u8> = Vec::new();
    while result.delays.len() < events {
        let got = result.delays.len();
        let frame = match tokio::time::timeout(WATCH_IDLE, body.frame()).await {
            Err(_) => {
                return Err(format!(
                    "watch idle for {WATCH_IDLE:?} after {got} of {events} events"
                ))
            }
            Ok(None) => {
                return Err(format!(
                    "watch ended by the server after {got} of {events} events"
                ))
            }
            Ok(Some(Err(e))) => {
                return Err(format!(
                    "watch stream failed after {got} of {events} events: {e}"
                ))
            }
            Ok(Some(Ok(frame))) => frame,
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        let now = epoch.elapsed().as_micros() as u64;
        partial.extend_from_slice(&data);
        let mut start = 0;
        while let Some(end) = memchr::memchr(b'\n', &partial[start..]) {
            let line = &partial[start..start + end];
            start += end + 1;
            let Some((index, issued)) = event_stamp(line)? else {
                continue;
            };
            let slot = seen.get_mut(index as usize).ok_or_else(|| {
                format!("watch event for object {index}, only {events} were written")
            })?;
            if std::mem::replace(slot, true) {
                return Err(format!("watch delivered object {index} twice"));
            }
            let _ = result.delays.record(now.saturating_sub(issued).max(1));
            result.last_delivery = now;
            delivered.fetch_add(1, Ordering::Relaxed);
        }
        partial.drain(..start);
    }
    Ok(result)
}

/// The `(index, issue micros)` stamp of a watch event line; `None` for blank lines and bookmarks. The
/// stamp is found by a byte search; a line without the compact `"key":"` form is parsed as JSON.
fn event_stamp(line: &[u8]) -> Result<Option<(u64, u64)>, String> {
    let line = line.trim_ascii();
    if line.is_empty() {
        return Ok(None);
    }
    let raw = match memchr::memmem::find(line, STAMP_NEEDLE) {
        Some(at) => {
            let rest = &line[at + STAMP_NEEDLE.len()..];
            let end = memchr::memchr(b'"', rest).ok_or("watch event: unterminated stamp")?;
            String::from_utf8_lossy(&rest[..end]).into_owned()
        }
        None => {
            let event: serde_json::Value = serde_json::from_slice(line).map_err(|e| {
                format!(
                    "watch event is not JSON ({e}): {}",
                    String::from_utf8_lossy(&line[..line.len().min(300)])
                )
            })?;
            match event["type"].as_str() {
                Some("BOOKMARK") => return Ok(None),
                Some("ERROR") => return Err(format!("watch ERROR event: {}", event["object"])),
                _ => {}
            }
            match event["object"]["data"][STAMP_KEY].as_str() {
                Some(s) => s.to_string(),
                None => {
                    return Err(format!(
                        "watch event without a stamp: {}",
                        String::from_utf8_lossy(&line[..line.len().min(300)])
                    ))
                }
            }
        }
    };
    let parsed = raw
        .split_once(':')
        .and_then(|(i, t)| Some((i.parse().ok()?, t.parse().ok()?)));
    parsed
        .map(Some)
        .ok_or_else(|| format!("watch event: bad stamp {raw:?}"))
}
