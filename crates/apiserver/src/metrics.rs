//! `/metrics` in Prometheus text format (upstream `endpoints/metrics`): request counts by verb,
//! resource and code, request latency by verb, and open watches; plus whatever the embedding process
//! adds (the all-in-one server adds its components' work queue metrics).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Upstream's `apiserver_request_duration_seconds` buckets (a subset).
const BUCKETS: &[f64] = &[
    0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0, 10.0, 30.0,
    60.0,
];

/// Extra text appended to `/metrics` by the embedding process.
pub type ExtraMetrics = Arc<dyn Fn() -> String + Send + Sync>;

#[derive(Default)]
struct Histogram {
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

/// The labels of `apiserver_request_total`: verb, group, version, resource, code.
type RequestLabels = (String, String, String, String, u16);

#[derive(Default)]
pub struct ApiMetrics {
    requests: Mutex<BTreeMap<RequestLabels, u64>>,
    /// verb -> latency histogram
    latency: Mutex<BTreeMap<String, Histogram>>,
    watches: AtomicI64,
    /// Watch event frames built, by format (json, protobuf, cbor): one per event, type and format,
    /// however many watchers receive it.
    watch_encodings: [AtomicU64; 3],
    /// Open client connections by [`Protocol`] (TLS ones after their handshake).
    connections: [AtomicI64; 3],
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl ApiMetrics {
    pub fn record(
        &self,
        verb: &str,
        group: &str,
        version: &str,
        resource: &str,
        code: u16,
        took: Duration,
    ) {
        let key = (
            verb.to_string(),
            group.to_string(),
            version.to_string(),
            resource.to_string(),
            code,
        );
        *lock(&self.requests).entry(key).or_default() += 1;
        if verb == "WATCH" {
            return;
        }
        let mut latency = lock(&self.latency);
        let h = latency.entry(verb.to_string()).or_default();
        if h.counts.is_empty() {
            h.counts = vec![0; BUCKETS.len()];
        }
        let secs = took.as_secs_f64();
        for (i, bound) in BUCKETS.iter().enumerate() {
            if secs <= *bound {
                h.counts[i] += 1;
            }
        }
        h.sum += secs;
        h.count += 1;
    }

    /// Counts a watch stream while the returned guard lives.
    pub fn watch_started(self: &Arc<Self>) -> WatchGuard {
        self.watches.fetch_add(1, Ordering::Relaxed);
        WatchGuard(self.clone())
    }

    /// Counts one watch event frame built in `format` (0 json, 1 protobuf, 2 cbor).
    pub fn watch_event_encoded(&self, format: usize) {
        self.watch_encodings[format].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts an open connection of `protocol` while the guard lives.
    pub fn connection_opened(self: &Arc<Self>, protocol: Protocol) -> ConnectionGuard {
        let protocol = protocol as usize;
        self.connections[protocol].fetch_add(1, Ordering::Relaxed);
        ConnectionGuard(self.clone(), protocol)
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        out.push_str("# HELP apiserver_request_total Counter of apiserver requests broken out for each verb, group, version, resource and HTTP response code.\n");
        out.push_str("# TYPE apiserver_request_total counter\n");
        for ((verb, group, version, resource, code), n) in lock(&self.requests).iter() {
            let _ = writeln!(
                out,
                "apiserver_request_total{{code=\"{code}\",group=\"{group}\",resource=\"{resource}\",verb=\"{verb}\",version=\"{version}\"}} {n}"
            );
        }
        out.push_str("# HELP apiserver_request_duration_seconds Response latency distribution in seconds for each verb.\n");
        out.push_str("# TYPE apiserver_request_duration_seconds histogram\n");
        for (verb, h) in lock(&self.latency).iter() {
            for (bound, n) in BUCKETS.iter().zip(&h.counts) {
                let _ = writeln!(out, "apiserver_request_duration_seconds_bucket{{verb=\"{verb}\",le=\"{bound}\"}} {n}");
            }
            let _ = writeln!(
                out,
                "apiserver_request_duration_seconds_bucket{{verb=\"{verb}\",le=\"+Inf\"}} {}",
                h.count
            );
            let _ = writeln!(
                out,
                "apiserver_request_duration_seconds_sum{{verb=\"{verb}\"}} {}",
                h.sum
            );
            let _ = writeln!(
                out,
                "apiserver_request_duration_seconds_count{{verb=\"{verb}\"}} {}",
                h.count
            );
        }
        out.push_str("# HELP apiserver_longrunning_requests Gauge of all active long-running apiserver requests (watches).\n");
        out.push_str("# TYPE apiserver_longrunning_requests gauge\n");
        let _ = writeln!(
            out,
            "apiserver_longrunning_requests{{verb=\"WATCH\"}} {}",
            self.watches.load(Ordering::Relaxed)
        );
        out.push_str("# HELP rkube_watch_event_encodings_total Watch event frames encoded, by format; each event is encoded once per format and event type whatever the number of watchers.\n");
        out.push_str("# TYPE rkube_watch_event_encodings_total counter\n");
        write_by_label(
            &mut out,
            "rkube_watch_event_encodings_total",
            "format",
            &["json", "protobuf", "cbor"],
            self.watch_encodings
                .iter()
                .map(|n| n.load(Ordering::Relaxed)),
        );
        out.push_str("# HELP rkube_apiserver_open_connections Open client connections by protocol: TLS with the HTTP version negotiated, or in-process (the all-in-one server's own components).\n");
        out.push_str("# TYPE rkube_apiserver_open_connections gauge\n");
        write_by_label(
            &mut out,
            "rkube_apiserver_open_connections",
            "protocol",
            &["http/1.1", "h2", "in-process"],
            self.connections.iter().map(|n| n.load(Ordering::Relaxed)),
        );
        out
    }
}

/// What an open connection speaks: TLS with HTTP/1.1 or HTTP/2 (ALPN), or HTTP/2 on an in-process
/// pipe ([`crate::serving::InProcess`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Http1 = 0,
    H2 = 1,
    InProcess = 2,
}

/// Decrements the open-connection gauge of its protocol when the connection closes.
pub struct ConnectionGuard(Arc<ApiMetrics>, usize);

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.0.connections[self.1].fetch_sub(1, Ordering::Relaxed);
    }
}

/// Decrements the open-watch gauge when the watch ends.
pub struct WatchGuard(Arc<ApiMetrics>);

impl Drop for WatchGuard {
    fn drop(&mut self) {
        self.0.watches.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One sample per label value of a metric family kept as an array of counters.
fn write_by_label<N: std::fmt::Display>(
    out: &mut String,
    name: &str,
    label: &str,
    values: &[&str],
    samples: impl Iterator<Item = N>,
) {
    for (value, n) in values.iter().zip(samples) {
        let _ = writeln!(out, "{name}{{{label}=\"{value}\"}} {n}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counts_latency_and_watches() {
        let m = Arc::new(ApiMetrics::default());
        m.record("LIST", "", "v1", "pods", 200, Duration::from_millis(3));
        m.record("LIST", "", "v1", "pods", 200, Duration::from_millis(30));
        m.record(
            "POST",
            "apps",
            "v1",
            "deployments",
            422,
            Duration::from_millis(1),
        );
        let guard = m.watch_started();
        let text = m.render();
        assert!(text.contains("apiserver_request_total{code=\"200\",group=\"\",resource=\"pods\",verb=\"LIST\",version=\"v1\"} 2"), "{text}");
        assert!(text
            .contains("apiserver_request_duration_seconds_bucket{verb=\"LIST\",le=\"0.005\"} 1"));
        assert!(text.contains("apiserver_request_duration_seconds_count{verb=\"LIST\"} 2"));
        assert!(text.contains("apiserver_longrunning_requests{verb=\"WATCH\"} 1"));
        drop(guard);
        assert!(m
            .render()
            .contains("apiserver_longrunning_requests{verb=\"WATCH\"} 0"));
    }
}
