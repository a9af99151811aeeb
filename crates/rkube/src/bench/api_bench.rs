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
//!   `--protobuf-watchers P` makes P% of them watch in protobuf; the server's count of encoded frames per
//!   format (`rkube_watch_event_encodings_total`, when it has it) is reported.
//! - `flood`: see [`flood`]: LISTs and creates at full speed from another user while paced probes
//!   measure what a person and a controller see (not in the default set).
//!
//! With `--server-pid` the server's resident memory is read from `/proc` when idle and after each scenario.
//!
//! Against peerbench (`/work/shared/tools/peerbench`, which measured upstream): the operations and URLs
//! are the same (`create-cm`, `list-cm`, wrk for GET), but peerbench speaks HTTP/1.1 with one connection
//! per worker and creates ConfigMaps with a ~100 byte payload; use `--http1 --payload-bytes 100` for the
//! like-for-like figures. Timings here stop when a response body has been fully received (a paged list
//! also extracts each page's `continue`); peerbench also decodes list items.

mod flood;
mod http;
mod watch;

use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Args;
use hdrhistogram::Histogram;
use hyper::StatusCode;
use serde::de::IgnoredAny;
use serde::Deserialize;

use self::http::ApiClient;

const SCENARIOS: &[&str] = &["create", "get", "list", "watch", "flood"];
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
    /// Percentage of the watchers that ask for protobuf (the rest ask for JSON).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=100))]
    protobuf_watchers: u8,
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
    /// `flood`: the flooding client's kubeconfig (another user; default: the main one's).
    #[arg(long)]
    flood_kubeconfig: Option<PathBuf>,
    /// `flood`: a third probe's kubeconfig: an ordinary user (not system:masters, so subject to
    /// flow control like the flooder) listing the small namespace every 100 ms.
    #[arg(long)]
    probe_kubeconfig: Option<PathBuf>,
    /// `flood`: seconds of flooding.
    #[arg(long, default_value_t = 20)]
    flood_seconds: u64,
    /// `flood`: flooding tasks (half list the --list-objects namespace whole, half create).
    #[arg(long, default_value_t = 16)]
    flood_tasks: usize,
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
        watch::watch_scenario(args, client, &run_id).await?;
        sample_rss(args, rss, "after watch fan-out")?;
    }
    if wants("flood") {
        flood::flood_scenario(args, client, &run_id, &payload).await?;
        sample_rss(args, rss, "after the flood")?;
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
    let mib = super::proc_status_mib(&pid.to_string(), "VmRSS")?;
    rss.push((point.to_string(), mib));
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
    let path = fill_list_namespace(args, client, payload).await?;
    let want = args.list_objects;
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

/// Makes NAMESPACE-list hold `--list-objects` ConfigMaps; returns the path that lists them.
async fn fill_list_namespace(
    args: &ApiBenchArgs,
    client: &ApiClient,
    payload: &str,
) -> Result<String, String> {
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
    Ok(path)
}
