//! The `watch` scenario of `rkube bench api`: a fan-out of watches (JSON, protobuf or a mix) over one
//! namespace while writers create stamped ConfigMaps; every watcher must see every event exactly once.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use apimachinery::serializer::protobuf;
use hdrhistogram::Histogram;
use http_body_util::BodyExt;
use hyper::StatusCode;

use super::http::ApiClient;
use super::{
    closed_loop, configmap, create_configmap, ensure_namespace, ms, new_histogram, parse_list,
    query_escape, warm_up, ApiBenchArgs, Until, STAMP_KEY, STAMP_NEEDLE, WATCHES_PER_CONNECTION,
    WATCH_IDLE, WATCH_STALL, WATCH_WRITERS,
};

/// What one watcher saw.
struct WatcherResult {
    delays: Histogram<u64>,
    /// Microseconds since the shared epoch of its last delivery.
    last_delivery: u64,
}

pub(super) async fn watch_scenario(
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
    // Only the bench's own ConfigMaps: a cluster's controllers add others (kube-root-ca.crt).
    let watch_path: Arc<str> = format!(
        "{path}?watch=true&labelSelector=bench%3Drkube&resourceVersion={}",
        query_escape(&rv)
    )
    .into();

    warm_up(client, WATCH_WRITERS).await?;
    let encodings_before = encoded_frames(client).await;
    let protobuf_watchers = watchers * usize::from(args.protobuf_watchers) / 100;
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
        let format = if w < protobuf_watchers {
            Format::Protobuf
        } else {
            Format::Json
        };
        handles.push(tokio::spawn(async move {
            let accept = match format {
                Format::Json => "application/json",
                Format::Protobuf => "application/vnd.kubernetes.protobuf, application/json",
            };
            let body = match client
                .open_stream(&watch_path, WATCH_IDLE * 2, accept)
                .await
            {
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
            read_watch(body, format, events, epoch, &delivered).await
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
    let encodings_after = encoded_frames(client).await;
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
    println!();
    println!("{protobuf_watchers} of {watchers} watchers in protobuf, the rest in JSON.");
    if let (Some(before), Some(after)) = (encodings_before, encodings_after) {
        println!(
            "Frames encoded by the server during the run: JSON {}, protobuf {} (for {events} events).",
            after.0 - before.0,
            after.1 - before.1
        );
    }
    Ok(())
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Format {
    Json,
    Protobuf,
}

/// The server's `rkube_watch_event_encodings_total` for JSON and protobuf (None for a server without it).
async fn encoded_frames(client: &ApiClient) -> Option<(u64, u64)> {
    let reply = client.get("/metrics").await.ok()?;
    let text =
        String::from_utf8_lossy(&reply.expect(&[StatusCode::OK], "/metrics").ok()?).into_owned();
    let count = |format: &str| -> Option<u64> {
        let prefix = format!("rkube_watch_event_encodings_total{{format=\"{format}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .and_then(|n| n.trim().parse().ok())
    };
    Some((count("json")?, count("protobuf")?))
}

/// Reads one watch stream until it has delivered each of the `events` stamped objects exactly once.
async fn read_watch(
    mut body: hyper::body::Incoming,
    format: Format,
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
        while let Some((event, next)) = next_event(format, &partial[start..]) {
            start += next;
            let Some((index, issued)) = event_stamp(format, event)? else {
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

/// The next complete event in `buf` (a JSON line, or a length-prefixed protobuf `WatchEvent`) and the
/// offset after it.
fn next_event(format: Format, buf: &[u8]) -> Option<(&[u8], usize)> {
    match format {
        Format::Json => memchr::memchr(b'\n', buf).map(|end| (&buf[..end], end + 1)),
        Format::Protobuf => {
            let len = u32::from_be_bytes(buf.get(..4)?.try_into().ok()?) as usize;
            let event = buf.get(4..4 + len)?;
            Some((event, 4 + len))
        }
    }
}

/// The `(index, issue micros)` stamp of a watch event; `None` for blank lines and bookmarks. In JSON the
/// stamp is found by a byte search (a line without the compact `"key":"` form is parsed); a protobuf
/// event is decoded.
fn event_stamp(format: Format, line: &[u8]) -> Result<Option<(u64, u64)>, String> {
    if format == Format::Protobuf {
        let (kind, object) =
            protobuf::decode_watch_event(line).map_err(|e| format!("protobuf watch event: {e}"))?;
        return match (kind.as_str(), object["data"][STAMP_KEY].as_str()) {
            ("BOOKMARK", _) => Ok(None),
            ("ERROR", _) => Err(format!("watch ERROR event: {object}")),
            (_, Some(stamp)) => parse_stamp(stamp).map(Some),
            (_, None) => Err(format!("watch event without a stamp: {object}")),
        };
    }
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
    parse_stamp(&raw).map(Some)
}

fn parse_stamp(raw: &str) -> Result<(u64, u64), String> {
    raw.split_once(':')
        .and_then(|(i, t)| Some((i.parse().ok()?, t.parse().ok()?)))
        .ok_or_else(|| format!("watch event: bad stamp {raw:?}"))
}
