//! kube-proxy's metrics (upstream `pkg/proxy/metrics/metrics.go`), in the Prometheus text format,
//! and the state `/healthz` reports (upstream `pkg/proxy/healthcheck/proxier_health.go`).
//!
//! Names as upstream where upstream has one; `kubeproxy_sync_proxy_rules_total{mode}` (rules of the
//! last sync) stands for upstream's per-backend rule gauges.

use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::proxier::SyncStats;

const BUCKETS: [f64; 14] = [
    0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.024, 2.048, 4.096,
    8.192,
];

#[derive(Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    sum: f64,
    count: u64,
}

impl Histogram {
    fn observe(&mut self, v: f64) {
        for (i, b) in BUCKETS.iter().enumerate() {
            if v <= *b {
                self.counts[i] += 1;
            }
        }
        self.sum += v;
        self.count += 1;
    }

    fn write(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        for (i, b) in BUCKETS.iter().enumerate() {
            let _ = writeln!(out, "{name}_bucket{{le=\"{b}\"}} {}", self.counts[i]);
        }
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", self.count);
        let _ = writeln!(out, "{name}_sum {}\n{name}_count {}", self.sum, self.count);
    }
}

#[derive(Default)]
struct Data {
    all: Histogram,
    full: Histogram,
    partial: Histogram,
    last_sync: Option<SystemTime>,
    last_queued: Option<SystemTime>,
    rules_total: usize,
    service_ports: usize,
    endpoints: usize,
    failures: u64,
}

/// Shared between the sync loop, event handlers and the HTTP server.
pub struct Metrics {
    mode: &'static str,
    data: Mutex<Data>,
}

fn secs(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

impl Metrics {
    pub fn new(mode: &'static str) -> Self {
        Self {
            mode,
            data: Mutex::new(Data::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Data> {
        self.data.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A change waits for a sync (upstream `QueuedUpdate`).
    pub fn queued(&self) {
        let mut d = self.lock();
        if d.last_queued
            .is_none_or(|q| d.last_sync.is_some_and(|s| s >= q))
        {
            d.last_queued = Some(SystemTime::now());
        }
    }

    pub fn synced(&self, s: &SyncStats) {
        let mut d = self.lock();
        let v = s.duration.as_secs_f64();
        d.all.observe(v);
        if s.full {
            d.full.observe(v);
        } else {
            d.partial.observe(v);
        }
        d.last_sync = Some(SystemTime::now());
        d.rules_total = s.rules_total;
        d.service_ports = s.service_ports;
        d.endpoints = s.endpoints;
    }

    pub fn sync_failed(&self) {
        self.lock().failures += 1;
    }

    /// Upstream's rule: unhealthy when a queued change has waited longer than `timeout` for a
    /// sync, or when no sync has ever succeeded within `timeout` of the first change.
    pub fn healthy(&self, timeout: Duration) -> (bool, Option<SystemTime>) {
        let d = self.lock();
        let now = SystemTime::now();
        let ok = match d.last_queued {
            None => true,
            Some(q) => {
                d.last_sync.is_some_and(|s| s >= q)
                    || now.duration_since(q).unwrap_or_default() <= timeout
            }
        };
        (ok, d.last_sync)
    }

    pub fn render(&self) -> String {
        let d = self.lock();
        let mut out = String::new();
        d.all.write(
            &mut out,
            "kubeproxy_sync_proxy_rules_duration_seconds",
            "SyncProxyRules latency in seconds",
        );
        d.full.write(
            &mut out,
            "kubeproxy_sync_full_proxy_rules_duration_seconds",
            "SyncProxyRules latency in seconds for full resyncs",
        );
        d.partial.write(
            &mut out,
            "kubeproxy_sync_partial_proxy_rules_duration_seconds",
            "SyncProxyRules latency in seconds for partial resyncs",
        );
        if let Some(t) = d.last_sync {
            let _ = writeln!(out, "# TYPE kubeproxy_sync_proxy_rules_last_timestamp_seconds gauge\nkubeproxy_sync_proxy_rules_last_timestamp_seconds {}", secs(t));
        }
        if let Some(t) = d.last_queued {
            let _ = writeln!(out, "# TYPE kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds gauge\nkubeproxy_sync_proxy_rules_last_queued_timestamp_seconds {}", secs(t));
        }
        let _ = writeln!(out, "# TYPE kubeproxy_sync_proxy_rules_total gauge\nkubeproxy_sync_proxy_rules_total{{mode=\"{}\"}} {}", self.mode, d.rules_total);
        let _ = writeln!(out, "# TYPE kubeproxy_sync_proxy_rules_service_ports gauge\nkubeproxy_sync_proxy_rules_service_ports {}", d.service_ports);
        let _ = writeln!(out, "# TYPE kubeproxy_sync_proxy_rules_endpoints gauge\nkubeproxy_sync_proxy_rules_endpoints {}", d.endpoints);
        let _ = writeln!(out, "# TYPE kubeproxy_sync_proxy_rules_iptables_restore_failures_total counter\nkubeproxy_sync_proxy_rules_iptables_restore_failures_total {}", d.failures);
        out
    }
}
